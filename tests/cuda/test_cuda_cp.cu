/* tests/cuda/test_cuda_cp.cu - >>context-parallel on GPUs: the CUDA compute
   table (flash attention with positions, merge, memcpy_2d, axpy) and NCCL
   (ring p2p, all-to-all, all-gather) under `mpirun -np <GPUs> build/test_cuda_cp`,
   one GPU per rank, against the double-precision oracle of tests/cp_suite.h.
   Every algorithm the world size allows: ring contiguous and zigzag, Ulysses
   (GQA with fewer kv heads than the degree, and without all-to-all), hybrid.
   With one GPU only cp 1 runs (NCCL takes one rank per GPU). Rank 0 prints the
   summary line with the checks of all ranks added up. */
#define PARALLEL_IMPLEMENTATION
#ifndef PARALLEL_WITH_MPI
#define PARALLEL_WITH_MPI
#endif
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>
#include "../test.h"
#include "../cp_suite.h"
#define PARALLEL_CUDA_DECLARATIONS_ONLY
#include "../../parallel_cuda.cu"

#include <stdio.h>

static void run_case(const cp_cfg *c, const char *label, int rank) {
    cp_world *w = cp_world_new(c);
    par_ctx_desc d;
    par_ctx *ctx = NULL;
    par_status st;
    memset(&d, 0, sizeof d);
    d.mesh = c->mesh, d.timeout_ms = 60000;
    CHECK_MSG(w != NULL, "%s: out of memory", label);
    if (!w) return;
    st = par_ctx_init_nccl(&d, &ctx);
    CHECK_MSG(st == PAR_OK, "%s: par_ctx_init_nccl", label);
    if (st == PAR_OK) {
        st = cp_rank_run(ctx, w);
        CHECK_MSG(st == PAR_OK, "%s: rank %d: %s", label, rank, par_last_error());
        CHECK_MSG(st != PAR_OK || w->max_err[rank] < CP_TOL, "%s: rank %d worst relative error %.3g", label, rank,
                  w->max_err[rank]);
        if (rank == 0) printf("  %-40s rank 0 worst err %.2e\n", label, w->max_err[0]);
        par_ctx_destroy(ctx);
    }
    cp_world_free(w);
}

/* par_calibrate on the CUDA table (the planner's profile of a GPU): a layer's GEMM shapes,
   RMSNorm and RoPE (positions in device memory), attention; no node sharing on a device
   table. */
static void calibrate_case(const char *mesh, int rank) {
    par_ctx_desc d;
    par_ctx *ctx = NULL;
    par_calibrate_desc cd;
    par_cluster c;
    par_model_shape m;
    par_status st;
    memset(&d, 0, sizeof d);
    d.mesh = mesh, d.timeout_ms = 60000;
    if (par_ctx_init_nccl(&d, &ctx) != PAR_OK) {
        CHECK_MSG(0, "calibrate: par_ctx_init_nccl: %s", par_last_error());
        return;
    }
    memset(&m, 0, sizeof m);
    m.layers = 2, m.hidden = 512, m.heads = 8, m.kv_heads = 2, m.ffn = 1376, m.vocab = 1024, m.seq = 512, m.batch = 8;
    memset(&cd, 0, sizeof cd);
    cd.repeats = 3;
    CHECK_OK(par_calibrate_desc_for_model(&m, par_ctx_size(ctx), &cd));
    CHECK(cd.model.layers == 2);
    st = par_calibrate(ctx, &cd, &c);
    CHECK_MSG(st == PAR_OK, "par_calibrate on the CUDA table: %s", par_last_error());
    if (st == PAR_OK) {
        CHECK(c.node_parallelism == 0 && c.flops > 1e9 && c.attention_rate > 0 && c.norm_rate > 0 && c.rope_rate > 0);
        CHECK(c.activation_rate > 0 && c.memory_bandwidth > 0 && c.kernel_latency > 0);
        if (rank == 0)
            printf("  calibrate: GEMM %.1f Tflop/s (a layer's shapes), attention %.1f Tflop/s, norm %.2g/s, rope %.2g/s, "
                   "call %.1f us\n", c.flops / 1e12, c.attention_rate / 1e12, c.norm_rate, c.rope_rate,
                   c.kernel_latency * 1e6);
    }
    par_ctx_destroy(ctx);
}

int main(int argc, char **argv) {
    int rank = 0, n = 1, totals[2], sums[2];
    char mesh[32];
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    snprintf(mesh, sizeof mesh, "cp=%d", n);
    {
        /* heads 8, kv heads 2: Ulysses degrees above 2 replicate the kv heads */
        cp_cfg c;
        memset(&c, 0, sizeof c);
        c.mesh = mesh, c.tokens = "[None,cp]", c.ranks = n, c.batch = 2, c.heads = 8, c.kv_heads = 2, c.head_dim = 64;
        c.seq = 64 * n;
        c.algo = PAR_CP_RING;
        run_case(&c, "ring zigzag", rank);
        c.contiguous = 1;
        run_case(&c, "ring contiguous", rank);
        c.contiguous = 0;
        if (8 % n == 0) {
            c.algo = PAR_CP_ULYSSES;
            run_case(&c, "ulysses", rank);
            c.no_a2a = 1;
            run_case(&c, "ulysses without all_to_all", rank);
            c.no_a2a = 0;
        }
        if (n >= 4 && n % 2 == 0) {
            c.algo = PAR_CP_HYBRID, c.ulysses = 2;
            run_case(&c, "hybrid (Ulysses 2)", rank);
        }
        c.algo = PAR_CP_RING, c.full = 1;
        run_case(&c, "ring zigzag, full attention", rank);
    }
    calibrate_case(mesh, rank);
    totals[0] = test_passed_, totals[1] = test_failed_;
    MPI_Reduce(totals, sums, 2, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD);
    if (rank == 0) printf("cuda_cp: %d passed, %d failed (%d ranks)\n", sums[0], sums[1], n);
    MPI_Finalize();
    return test_failed_ ? 1 : 0;
}
