/* tests/mpi/test_pipeline_mpi.c - >>pipeline's executor over the MPI backend,
   under mpirun -np 4: the toy chain of tests/pp_toy.h on "pp=4" with every
   schedule kind (interleaved, looped_bfs, zb1p, zbv and dualpipev with 2
   chunks; zbv and dualpipev on the V placement, so rank 0 sends activations
   both ways and rank 3 hands chunk 0's output to its chunk 1 locally), ZB1P
   and ZBV with every receive posted ahead (PA / PG: the MPI backend's async
   receives, matched in posting order). Rank 0 prints
   "pipeline_mpi: N passed, N failed" (the checks of all ranks added up). */
#include <mpi.h>
#include <stdio.h>
#include "../../parallel.h"
#include "../pp_toy.h"

/* The chunks (1, else 2) and micro-batches (m, else 4 (j + 1): the
   interleaved rounds, else 2p + j: dualpipev's m >= 2p) kind takes on p
   stages: every kind in par_pp_kind runs without a list here. */
static void pick(par_pp_kind kind, int p, int m, int j, int *v, int *mb) {
    int tries;
    for (tries = 0; tries < 6; tries++) {
        par_pp_schedule_desc sd;
        par_pp_schedule *s = NULL;
        memset(&sd, 0, sizeof sd);
        *v = 1 + tries % 2, *mb = tries < 2 ? m : tries < 4 ? 4 * (j + 1) : 2 * p + j;
        sd.stages = p, sd.chunks = *v, sd.micro_batches = *mb, sd.kind = kind;
        if (par_pp_schedule_make(&sd, &s) == PAR_OK) {
            par_pp_schedule_destroy(s);
            return;
        }
    }
}

int main(void) {
    static const int ms[] = {4, 9};
    long long mine[2] = {0, 0}, all[2] = {0, 0};
    int rank = 0, size = 0, k, j;
    MPI_Init(NULL, NULL);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    for (k = 0; k <= (int)PAR_PP_KIND_COUNT + 1; k++) /* past the kinds: zb1p, zbv with receives posted ahead */
        for (j = 0; j < 2; j++) {
            const par_pp_kind kind = k == PAR_PP_KIND_COUNT       ? PAR_PP_ZB1P
                                     : k == PAR_PP_KIND_COUNT + 1 ? PAR_PP_ZBV
                                                                  : (par_pp_kind)k;
            int v = 1, m = ms[j];
            par_pp_schedule *posted = NULL;
            char mesh[32];
            par_ctx_desc desc;
            par_ctx *ctx = NULL;
            toy t;
            int ok = 0;
            snprintf(mesh, sizeof mesh, "pp=%d", size);
            memset(&desc, 0, sizeof desc);
            desc.mesh = mesh, desc.timeout_ms = 60000, desc.kernel_threads = 1;
            pick(kind, size, ms[j], j, &v, &m);
            toy_init(&t, size, v, m, kind);
            if (k >= PAR_PP_KIND_COUNT) {
                par_pp_schedule_desc sd;
                par_pp_schedule *s = NULL;
                memset(&sd, 0, sizeof sd);
                sd.stages = size, sd.chunks = v, sd.micro_batches = m, sd.kind = kind;
                if (par_pp_schedule_make(&sd, &s) == PAR_OK) t.schedule = posted = toy_post_ahead(s);
                par_pp_schedule_destroy(s);
            }
            if (par_ctx_init_mpi(&desc, &ctx) == PAR_OK) {
                ok = toy_body(ctx, &t) == PAR_OK && toy_stage_ok(&t, rank);
                if (!ok) fprintf(stderr, "rank %d: %s%s m %d: %s\n", rank, par_pp_kind_name(kind),
                                 posted ? " (receives posted ahead)" : "", m, par_last_error());
                par_ctx_destroy(ctx);
            } else {
                fprintf(stderr, "rank %d: par_ctx_init_mpi(%s): %s\n", rank, mesh, par_last_error());
            }
            par_pp_schedule_destroy(posted);
            mine[ok ? 0 : 1]++;
        }
    MPI_Allreduce(mine, all, 2, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0) printf("pipeline_mpi: %lld passed, %lld failed\n", all[0], all[1]);
    MPI_Finalize();
    return all[1] ? 1 : 0;
}
