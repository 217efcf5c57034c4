/* tests/cuda/test_cuda_threads.cu - many ranks as threads on ONE GPU
   (par_run_cuda_threads: the threads backend moving device memory through
   parallel_cuda.cu's data mover, every rank its own CUDA table and stream).
   Needs a GPU (`make test-cuda`); CI without one only links it.

   - the backend-generic comm suite (tests/comm_suite.h) on 2 ranks (1-D),
     4 (dp=2 x tp=2) and 8 (2x2x2), with the threads backend's exact
     expectations (16-bit sums in f32, rounded once: no reduce_in_dtype);
   - all_reduce and reduce_scatter (sum, avg, max) of random f32, bf16 and f16
     on 4 ranks bitwise equal to the CPU threads backend on the same bytes
     (the declaration promises the same arithmetic in the same order);
   - every rank computes on a CUDA table of its own stream;
   - a rank that fails makes its peers' collective fail with its name;
   - the launcher's refusals (rank counts, desc->compute, cuda->stream).
   Build: see the Makefile (build/test_cuda_threads). */
#define PARALLEL_IMPLEMENTATION
#include "../test.h"
#include "../comm_suite.h"
#define PARALLEL_CUDA_DECLARATIONS_ONLY
#include "../../parallel_cuda.cu"

#include <stdint.h>
#include <stdlib.h>

/* ---- the comm suite ------------------------------------------------------ */

typedef struct suite_run {
    int quick;
    int passed[8], failed[8];
    const char *table[8];
    void *stream[8];
} suite_run;

static par_status suite_rank(par_ctx *ctx, void *arg) {
    suite_run *s = (suite_run *)arg;
    int r = par_ctx_rank(ctx);
    s->table[r] = par_ctx_compute(ctx)->name;
    s->stream[r] = par_ctx_compute(ctx)->stream;
    s->failed[r] = comm_suite_run(ctx, s->quick, &s->passed[r]);
    return PAR_OK;
}

static void run_suite(const char *mesh, int n, int quick) {
    static suite_run s;
    par_ctx_desc d;
    int r, q, passed = 0, failed = 0;
    memset(&s, 0, sizeof s);
    memset(&d, 0, sizeof d);
    d.mesh = mesh;
    d.timeout_ms = 60000;
    s.quick = quick;
    CHECK_OK(par_run_cuda_threads(&d, NULL, n, suite_rank, &s));
    for (r = 0; r < n; r++) {
        passed += s.passed[r], failed += s.failed[r];
        CHECK_MSG(s.table[r] && strcmp(s.table[r], "cuda") == 0, "rank %d computed on %s", r,
                  s.table[r] ? s.table[r] : "(nothing)");
        CHECK_MSG(s.stream[r] != NULL, "rank %d has no stream of its own", r);
        for (q = 0; q < r; q++) CHECK_MSG(s.stream[q] != s.stream[r], "ranks %d and %d share a stream", q, r);
    }
    CHECK_MSG(failed == 0 && passed > 0, "mesh %s on %d GPU threads: %d suite checks failed, %d passed",
              mesh ? mesh : "1-D", n, failed, passed);
    test_passed_ += passed, test_failed_ += failed;
    printf("  suite on %-12s %d ranks on one GPU: %d passed, %d failed\n", mesh ? mesh : "1-D", n, passed, failed);
}

/* ---- bitwise the CPU threads backend -------------------------------------- */

#define BW_COUNT 4099 /* odd: slices of unequal length */

#define BW_CASES 18 /* 3 types x 3 ops x (all_reduce, reduce_scatter) */

typedef struct bitwise_run {
    unsigned char out[4][BW_CASES][4 * BW_COUNT * 4]; /* rank, case, result bytes */
} bitwise_run;

static const par_dtype bw_types[3] = {PAR_F32, PAR_BF16, PAR_F16};
static const par_reduce_op bw_ops[3] = {PAR_REDUCE_SUM, PAR_REDUCE_AVG, PAR_REDUCE_MAX};

/* Random finite values of every rank (the same on both runs): f32 with all
   mantissa bits, 16-bit ones of many exponents in a range that cannot overflow. */
static void bw_fill(par_dtype t, int rank, int salt, unsigned char *p, int64_t count) {
    uint64_t x = 0x9e3779b97f4a7c15ull * (uint64_t)(rank * 7 + salt * 131 + 1);
    int64_t i;
    for (i = 0; i < count; i++) {
        float f;
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        f = (float)((double)(x >> 11) / 9007199254740992.0 * 2.0 - 1.0) * (float)(1 << (x % 7));
        if (t == PAR_F32) memcpy(p + 4 * i, &f, 4);
        else {
            uint32_t u;
            uint16_t h;
            memcpy(&u, &f, 4);
            if (t == PAR_BF16) h = (uint16_t)(u >> 16);
            else /* an f16 below 64 in magnitude: sign, exponent 1..20, the f32's top mantissa bits */
                h = (uint16_t)(((u >> 16) & 0x8000u) | ((1u + (uint32_t)(x % 20)) << 10) | ((u >> 13) & 0x3ffu));
            memcpy(p + 2 * i, &h, 2);
        }
    }
}

/* Every case on this rank's buffers (device or host, as the table says). */
static par_status bitwise_rank(par_ctx *ctx, void *arg) {
    bitwise_run *b = (bitwise_run *)arg;
    const par_compute_table *m = par_ctx_compute(ctx);
    int r = par_ctx_rank(ctx), k;
    size_t bytes = 4 * BW_COUNT * 4;
    unsigned char *host = (unsigned char *)malloc(bytes);
    void *send = NULL, *recv = NULL;
    par_status st = PAR_OK;
    if (!host) return PAR_ENOMEM;
    RETURN_IF_ERR(m->alloc(m->user, bytes, PAR_MEM_COMM, &send));
    RETURN_IF_ERR(m->alloc(m->user, bytes, PAR_MEM_COMM, &recv));
    for (k = 0; k < BW_CASES && st == PAR_OK; k++) {
        par_dtype t = bw_types[k / 6];
        par_reduce_op op = bw_ops[(k / 2) % 3];
        int scatter = k % 2;
        size_t esz = par_dtype_size(t);
        bw_fill(t, r, k, host, 4 * BW_COUNT);
        st = m->memcpy(m->user, send, host, 4 * BW_COUNT * esz, PAR_COPY_HOST_TO_DEVICE);
        if (st == PAR_OK)
            st = scatter ? par_reduce_scatter(ctx, NULL, send, recv, BW_COUNT, t, op, NULL)
                         : par_all_reduce(ctx, NULL, send, recv, 4 * BW_COUNT, t, op, NULL);
        if (st == PAR_OK)
            st = m->memcpy(m->user, b->out[r][k], recv, (scatter ? 1 : 4) * BW_COUNT * esz, PAR_COPY_DEVICE_TO_HOST);
    }
    m->free(m->user, send);
    m->free(m->user, recv);
    free(host);
    return st;
}

static void test_bitwise(void) {
    static bitwise_run cpu, gpu;
    int r, k, same = 0;
    memset(&cpu, 0, sizeof cpu);
    memset(&gpu, 0, sizeof gpu);
    CHECK_OK(par_run_threads(4, bitwise_rank, &cpu));
    CHECK_OK(par_run_cuda_threads(NULL, NULL, 4, bitwise_rank, &gpu));
    for (r = 0; r < 4; r++)
        for (k = 0; k < BW_CASES; k++) {
            int ok = memcmp(cpu.out[r][k], gpu.out[r][k], sizeof cpu.out[r][k]) == 0;
            same += ok;
            CHECK_MSG(ok, "rank %d: %s %s %s differs between the GPU threads and the CPU threads backend", r,
                      k % 2 ? "reduce_scatter" : "all_reduce", par_reduce_op_name(bw_ops[(k / 2) % 3]),
                      par_dtype_name(bw_types[k / 6]));
        }
    printf("  bitwise the CPU threads backend: %d of %d results (4 ranks, f32/bf16/f16 x sum/avg/max)\n", same,
           4 * BW_CASES);
}

/* ---- a failing rank, refused launches ------------------------------------ */

static par_status fail_rank(par_ctx *ctx, void *arg) {
    const par_compute_table *m = par_ctx_compute(ctx);
    void *buf = NULL;
    par_status st;
    (void)arg;
    if (par_ctx_rank(ctx) == 1) return par_set_error(PAR_EIO, "rank 1 gives up on purpose");
    RETURN_IF_ERR(m->alloc(m->user, 64, PAR_MEM_COMM, &buf));
    st = par_all_reduce(ctx, NULL, buf, buf, 16, PAR_F32, PAR_REDUCE_SUM, NULL);
    m->free(m->user, buf);
    return st;
}

static par_status noop_rank(par_ctx *ctx, void *arg) {
    (void)ctx, (void)arg;
    return PAR_OK;
}

static void test_errors(void) {
    par_ctx_desc d;
    par_cuda_desc cd;
    par_compute_table cpu;
    CHECK_ERR(par_run_cuda_threads(NULL, NULL, 3, fail_rank, NULL), PAR_EIO, "rank 1: rank 1 gives up on purpose");
    CHECK_MSG(strstr(par_last_error(), "rank 1 failed") != NULL, "the peers' error: %s", par_last_error());
    CHECK_ERR(par_run_cuda_threads(NULL, NULL, 0, noop_rank, NULL), PAR_EINVAL, "0 ranks, need 1..256");
    CHECK_ERR(par_run_cuda_threads(NULL, NULL, 257, noop_rank, NULL), PAR_EINVAL, "257 ranks, need 1..256");
    CHECK_ERR(par_run_cuda_threads(NULL, NULL, 2, NULL, NULL), PAR_EINVAL, "NULL rank function");
    CHECK_OK(par_compute_cpu(NULL, &cpu));
    memset(&d, 0, sizeof d);
    d.compute = &cpu;
    CHECK_ERR(par_run_cuda_threads(&d, NULL, 2, noop_rank, NULL), PAR_EINVAL, "desc->compute must be NULL");
    cpu.destroy(cpu.user);
    memset(&cd, 0, sizeof cd);
    cd.stream = (void *)&cd;
    CHECK_ERR(par_run_cuda_threads(NULL, &cd, 2, noop_rank, NULL), PAR_EINVAL, "cuda->stream must be NULL");
    cd.stream = NULL, cd.device = 999;
    CHECK_ERR(par_run_cuda_threads(NULL, &cd, 2, noop_rank, NULL), PAR_EINVAL, "device 999 does not exist");
}

int main(int argc, char **argv) {
    int count = 0, quick = argc > 1 && strcmp(argv[1], "--quick") == 0;
    if (par_cuda_device_info(&count, NULL, 0) != PAR_OK || count < 1) {
        printf("cuda_threads: skipped (no CUDA device: %s)\n", par_last_error());
        return TEST_END("cuda_threads");
    }
    run_suite(NULL, 2, quick);
    run_suite("dp=2,tp=2", 4, quick);
    run_suite("a=2,b=2,c=2", 8, 1);
    test_bitwise();
    test_errors();
    return TEST_END("cuda_threads");
}
