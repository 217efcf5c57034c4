/* tests/mpi/test_pipeline_mpi.c - >>pipeline's executor over the MPI backend,
   under mpirun -np 4: the toy chain of tests/pp_toy.h on "pp=4" with every
   schedule kind (interleaved, zbv and dualpipev with 2 chunks; zbv and
   dualpipev on the V placement, so rank 0 sends activations both ways and
   rank 3 hands chunk 0's output to its chunk 1 locally). Rank 0 prints
   "pipeline_mpi: N passed, N failed" (the checks of all ranks added up). */
#include <mpi.h>
#include <stdio.h>
#include "../../parallel.h"
#include "../pp_toy.h"

int main(void) {
    static const int ms[] = {4, 9};
    long long mine[2] = {0, 0}, all[2] = {0, 0};
    int rank = 0, size = 0, k, j;
    MPI_Init(NULL, NULL);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    for (k = 0; k < (int)PAR_PP_KIND_COUNT; k++)
        for (j = 0; j < 2; j++) {
            const int vshape = k == PAR_PP_ZBV || k == PAR_PP_DUALPIPEV;
            const int v = k == PAR_PP_INTERLEAVED || vshape ? 2 : 1;
            const int m = k == PAR_PP_INTERLEAVED ? 4 * (j + 1) : k == PAR_PP_DUALPIPEV ? 2 * size + j : ms[j];
            char mesh[32];
            par_ctx_desc desc;
            par_ctx *ctx = NULL;
            toy t;
            int ok = 0;
            snprintf(mesh, sizeof mesh, "pp=%d", size);
            memset(&desc, 0, sizeof desc);
            desc.mesh = mesh, desc.timeout_ms = 60000, desc.kernel_threads = 1;
            toy_init(&t, size, v, m, (par_pp_kind)k);
            if (par_ctx_init_mpi(&desc, &ctx) == PAR_OK) {
                ok = toy_body(ctx, &t) == PAR_OK && toy_stage_ok(&t, rank);
                if (!ok) fprintf(stderr, "rank %d: %s m %d: %s\n", rank, par_pp_kind_name((par_pp_kind)k), m, par_last_error());
                par_ctx_destroy(ctx);
            } else {
                fprintf(stderr, "rank %d: par_ctx_init_mpi(%s): %s\n", rank, mesh, par_last_error());
            }
            mine[ok ? 0 : 1]++;
        }
    MPI_Allreduce(mine, all, 2, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0) printf("pipeline_mpi: %lld passed, %lld failed\n", all[0], all[1]);
    MPI_Finalize();
    return all[1] ? 1 : 0;
}
