/* tests/mpi/test_params_mpi.c - >>params and >>tensor-parallel over the MPI
   backend (tests/params_suite.h), under mpirun -np 4: meshes "dp=4",
   "dp=2,tp=2" and "dp=1,tp=4". Rank 0 prints "params_mpi: N passed, N failed"
   (the checks of all ranks added up). */
#include <mpi.h>
#include "../../parallel.h"
#include "../params_suite.h"

int main(void) {
    static const char *const meshes[] = {"dp=4", "dp=2,tp=2", "dp=1,tp=4"};
    long long passed = 0, failed = 0;
    int m, rank = 0;
    MPI_Init(NULL, NULL);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    for (m = 0; m < 3; m++) {
        par_ctx_desc desc;
        par_ctx *ctx = NULL;
        long long mine[2] = {0, 1}, all[2] = {0, 0};
        int p = 0;
        memset(&desc, 0, sizeof desc);
        desc.mesh = meshes[m], desc.timeout_ms = 60000, desc.kernel_threads = 1;
        if (par_ctx_init_mpi(&desc, &ctx) == PAR_OK) {
            mine[1] = params_suite_run(ctx, &p);
            mine[0] = p;
            par_ctx_destroy(ctx);
        } else {
            fprintf(stderr, "rank %d: par_ctx_init_mpi(%s): %s\n", rank, meshes[m], par_last_error());
        }
        MPI_Allreduce(mine, all, 2, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
        if (rank == 0) fprintf(stderr, "  mesh %s (%lld passed, %lld failed)\n", meshes[m], all[0], all[1]); /* not the summary form: it may print after the summary */
        passed += all[0], failed += all[1];
    }
    if (rank == 0) printf("params_mpi: %lld passed, %lld failed\n", passed, failed);
    MPI_Finalize();
    return failed ? 1 : 0;
}
