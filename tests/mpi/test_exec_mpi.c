/* tests/mpi/test_exec_mpi.c - the redistribution executor over the MPI backend.
   Run under mpirun -np 4: random plans on the meshes 2x2 and 4, for several
   dtypes, must leave every rank with exactly what the mesh simulator computes.
   The test initializes MPI itself, so the two contexts (one per mesh) leave
   MPI running in between. Rank 0 prints "exec_mpi: N passed, N failed" (one check per case run per rank). */
#include <mpi.h>
#include "../../parallel.h"
#include <stdio.h>
#include "../exec_cases.h"

#define CASES 80

static int64_t world_sum(par_ctx *ctx, int64_t v) {
    const par_comm_table *c = par_ctx_comm(ctx);
    par_comm_group *world = NULL;
    int64_t out = -1;
    if (par_ctx_group(ctx, (1u << par_ctx_mesh(ctx)->ndim) - 1, &world, NULL, NULL) != PAR_OK) return -1;
    if (c->all_reduce(c->user, world, &v, &out, 1, PAR_I64, PAR_REDUCE_SUM, NULL) != PAR_OK) return -1;
    return out;
}

int main(void) {
    static const char *const meshes[] = {"2x2", "4"};
    static const par_dtype dtypes[] = {PAR_F32, PAR_F64, PAR_I32, PAR_I64};
    int64_t total_failed = 0, total_runs = 0, m, d;
    MPI_Init(NULL, NULL);
    for (m = 0; m < 2; m++) {
        par_ctx_desc desc;
        par_ctx *ctx = NULL;
        exec_case *cases = NULL;
        int n, f = 0;
        int64_t all_failed, all_runs;
        memset(&desc, 0, sizeof desc);
        desc.mesh = meshes[m];
        desc.timeout_ms = 60000;
        if (par_ctx_init_mpi(&desc, &ctx) != PAR_OK) {
            fprintf(stderr, "par_ctx_init_mpi: %s\n", par_last_error());
            printf("exec_mpi: 0 passed, 1 failed\n");
            MPI_Abort(MPI_COMM_WORLD, 1);
            return 1;
        }
        n = exec_cases_make(meshes[m], CASES, &cases);
        for (d = 0; d < 4; d++) f += exec_cases_check(ctx, cases, n, dtypes[d], d == 1);
        all_failed = world_sum(ctx, f + (n != CASES));
        all_runs = world_sum(ctx, 4 * n + 1);
        if (all_failed < 0 || all_runs < 0) all_failed = all_runs = 1;
        total_failed += all_failed;
        total_runs += all_runs;
        if (par_ctx_rank(ctx) == 0)
            fprintf(stderr, "mesh %s: %d cases x 4 dtypes on %d ranks, %lld failed\n", meshes[m], n, par_ctx_size(ctx),
                    (long long)all_failed);
        exec_cases_free(cases, n);
        if (m == 1) {
            int rank = par_ctx_rank(ctx);
            par_ctx_destroy(ctx);
            if (rank == 0) printf("exec_mpi: %lld passed, %lld failed\n", (long long)(total_runs - total_failed), (long long)total_failed);
            MPI_Finalize();
            return total_failed ? 1 : 0;
        }
        par_ctx_destroy(ctx);
    }
    return 0;
}
