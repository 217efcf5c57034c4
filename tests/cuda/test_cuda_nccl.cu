/* tests/cuda/test_cuda_nccl.cu - the NCCL table's multi-GPU paths under
   `mpirun -np <GPUs> build/test_cuda_nccl`, one GPU per rank:
     - argument errors of par_nccl_desc (any world size);
     - nccl_split_vs_init: the world in reverse order made by ncclCommSplit
       (group_init AUTO) and by its own ncclCommInitRank (INIT) give bitwise
       the same all_reduce, all_gather, reduce_scatter, broadcast and ring
       send/recv, equal to expectations computed here;
     - nccl_group_streams_ring: with a stream per group, a ring step's recv +
       send (fused in one NCCL group) sends what a slow kernel on the compute
       stream wrote before the send was issued, and a kernel launched after the
       wait reads what was received (the events that order the two streams);
     - nccl_pipeline_posted: >>pipeline's executor (the toy chain of
       tests/pp_toy.h, gradients checked against its independent double
       expectation) with its boundary tensors in device memory, 1F1B with
       blocking receives and with every receive posted ahead (PA / PG), on a
       stream per group, where posted receives wait in the queue until needed;
     - nccl_bucket_overlap: an async all_reduce of 256 MB on a group's own
       stream is still in flight while a kernel issued after it runs on the
       compute stream (the kernel raises a flag in mapped host memory and spins
       until released); with one stream the same kernel cannot start before the
       reduction is done, which the test checks too (so the check can fail).
   Parts that need more GPUs than ranks print "<name>: skipped (needs N GPUs,
   found M)". Rank 0 prints the summary with the checks of all ranks added up. */
#define PARALLEL_IMPLEMENTATION
#ifndef PARALLEL_WITH_MPI
#define PARALLEL_WITH_MPI
#endif
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>
#include "../test.h"
#include "../pp_toy.h"
#define PARALLEL_CUDA_DECLARATIONS_ONLY
#include "../../parallel_cuda.cu"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int R, N; /* world rank, size */

/* One rank per GPU: a part needing `need` GPUs runs when there are that many
   ranks (NCCL refuses two ranks on one GPU, so ranks <= GPUs under make
   test-cuda's -np $(GPUS)). Else it says why it was skipped, with the GPUs
   this rank sees. */
static int enough(const char *name, int need) {
    int devices = 0;
    if (N >= need) return 1;
    if (cudaGetDeviceCount(&devices) != cudaSuccess) devices = 0;
    if (R == 0) {
        if (devices < need)
            printf("%s: skipped (needs %d GPUs, found %d)\n", name, need, devices);
        else
            printf("%s: skipped (needs %d GPUs, found %d; run it with mpirun -np %d)\n", name, need, devices,
                   devices);
    }
    return 0;
}

/* ------------------------------------------------------------ kernels */

/* Spin about `cycles` clocks, then write x[i] = value * (i % 7 + 1): a producer
   slow enough that a send not ordered after it would read the old contents. */
__global__ void slow_fill(float *x, int64_t n, float value, long long cycles) {
    if (threadIdx.x == 0 && blockIdx.x == 0) {
        const long long t0 = clock64();
        while (clock64() - t0 < cycles) {
        }
    }
    __syncthreads();
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        x[i] = value * (float)(i % 7 + 1);
}

__global__ void copy_k(const float *x, float *y, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        y[i] = x[i];
}

/* Raise *started, then spin until *release (or `cycles` clocks, a bound so that
   a broken test cannot hang). */
__global__ void spin_until(volatile int *started, volatile int *release, long long cycles) {
    const long long t0 = clock64();
    *started = 1;
    __threadfence_system();
    while (!*release && clock64() - t0 < cycles) {
    }
}

/* -------------------------------------------------------------- helpers */

static par_status make_table(int group_init, int group_streams, par_comm_table *t) {
    par_nccl_desc d;
    memset(&d, 0, sizeof d);
    d.timeout_ms = 60000, d.group_init = group_init, d.group_streams = group_streams;
    return par_comm_nccl(&d, t);
}

static float *dev_floats(int64_t n) {
    float *p = NULL;
    if (cudaMalloc((void **)&p, sizeof(float) * (size_t)n) != cudaSuccess) return NULL;
    cudaMemset(p, 0, sizeof(float) * (size_t)n);
    return p;
}

/* ------------------------------------------------------- argument errors */

static void test_errors(void) {
    par_nccl_desc d;
    par_comm_table t;
    int split = 0;
    memset(&d, 0, sizeof d);
    d.group_init = 7;
    CHECK_ERR(par_comm_nccl(&d, &t), PAR_EINVAL, "group_init 7");
    d.group_init = 0, d.group_streams = 2;
    CHECK_ERR(par_comm_nccl(&d, &t), PAR_EINVAL, "group_streams 2");
    d.group_streams = 0;
    setenv("PARALLEL_NCCL_GROUP_STREAMS", "yes", 1);
    CHECK_ERR(par_comm_nccl(&d, &t), PAR_EINVAL, "PARALLEL_NCCL_GROUP_STREAMS is \"yes\"");
    unsetenv("PARALLEL_NCCL_GROUP_STREAMS");
    memset(&t, 0, sizeof t);
    CHECK_ERR(par_comm_nccl_group_split(&t, NULL, &split), PAR_EINVAL, "not a table made by par_comm_nccl");
}

/* ------------------------------------------------- split vs init results */

#define SV_COUNT 4099 /* odd: no op happens to be a whole number of NCCL's chunks */

/* Every op on the world in reverse order (member j = rank N-1-j), results on
   the host: all_reduce (count), all_gather (N*count), reduce_scatter (count),
   broadcast from member 0 (count), ring recv from member index-1 (count). */
static int run_ops(par_comm_table *t, float *host, int *split) {
    const int64_t n = SV_COUNT;
    int *rev = (int *)malloc(sizeof(int) * (size_t)N), me, ok = 1, j;
    float *src = (float *)malloc(sizeof(float) * (size_t)(N * n)), *d_in = dev_floats(N * n), *d_out = dev_floats(N * n);
    par_comm_group *g = NULL;
    par_request *rs = NULL, *rr = NULL;
    for (j = 0; j < N; j++) rev[j] = N - 1 - j;
    me = N - 1 - R;
    ok = rev && src && d_in && d_out && t->group_create(t->user, rev, N, &g) == PAR_OK;
    CHECK_MSG(ok, "rank %d: setup: %s", R, par_last_error());
    if (ok) CHECK_OK(par_comm_nccl_group_split(t, g, split));
    /* member `me` holds (R+1) * (i % 7 + 1) in each of its N blocks, block b scaled by (b+1) */
    for (j = 0; ok && j < N; j++)
        for (int64_t i = 0; i < n; i++) src[j * n + i] = (float)((R + 1) * (i % 7 + 1) * (j + 1));
    if (ok) ok = cudaMemcpy(d_in, src, sizeof(float) * (size_t)(N * n), cudaMemcpyHostToDevice) == cudaSuccess;
    if (ok) ok = t->all_reduce(t->user, g, d_in, d_out, n, PAR_F32, PAR_REDUCE_SUM, NULL) == PAR_OK;
    if (ok) ok = cudaMemcpy(host, d_out, sizeof(float) * (size_t)n, cudaMemcpyDeviceToHost) == cudaSuccess;
    if (ok) ok = t->all_gather(t->user, g, d_in, d_out, n, PAR_F32, NULL) == PAR_OK;
    if (ok) ok = cudaMemcpy(host + n, d_out, sizeof(float) * (size_t)(N * n), cudaMemcpyDeviceToHost) == cudaSuccess;
    if (ok) ok = t->reduce_scatter(t->user, g, d_in, d_out, n, PAR_F32, PAR_REDUCE_SUM, NULL) == PAR_OK;
    if (ok) ok = cudaMemcpy(host + (N + 1) * n, d_out, sizeof(float) * (size_t)n, cudaMemcpyDeviceToHost) == cudaSuccess;
    if (ok) ok = cudaMemcpy(d_out, d_in, sizeof(float) * (size_t)n, cudaMemcpyDeviceToDevice) == cudaSuccess;
    if (ok) ok = t->broadcast(t->user, g, d_out, n, PAR_F32, 0, NULL) == PAR_OK;
    if (ok) ok = cudaMemcpy(host + (N + 2) * n, d_out, sizeof(float) * (size_t)n, cudaMemcpyDeviceToHost) == cudaSuccess;
    if (ok) ok = t->recv(t->user, g, d_out, n, PAR_F32, (me + N - 1) % N, &rr) == PAR_OK;
    if (ok) ok = t->send(t->user, g, d_in, n, PAR_F32, (me + 1) % N, &rs) == PAR_OK;
    if (ok) ok = t->wait(t->user, rs) == PAR_OK && t->wait(t->user, rr) == PAR_OK; /* the send first: fused, no hang */
    if (ok) ok = cudaMemcpy(host + (N + 3) * n, d_out, sizeof(float) * (size_t)n, cudaMemcpyDeviceToHost) == cudaSuccess;
    CHECK_MSG(ok, "rank %d: ops on the reversed world: %s", R, par_last_error());
    if (g) t->group_destroy(t->user, g);
    cudaFree(d_in);
    cudaFree(d_out);
    free(src);
    free(rev);
    return ok;
}

static void test_split_vs_init(void) {
    const int64_t n = SV_COUNT, total = (N + 4) * n;
    par_comm_table a, b;
    float *ha = (float *)calloc((size_t)total, sizeof(float)), *hb = (float *)calloc((size_t)total, sizeof(float));
    int split_a = -1, split_b = -1, version = 0, ok, bad = 0, me = N - 1 - R;
    if (!enough("nccl_split_vs_init", 2)) {
        free(ha);
        free(hb);
        return;
    }
    CHECK_OK(par_cuda_nccl_version(&version));
    CHECK_OK(make_table(PAR_NCCL_GROUP_AUTO, -1, &a));
    CHECK_OK(make_table(PAR_NCCL_GROUP_INIT, -1, &b));
    ok = a.user && b.user && ha && hb && run_ops(&a, ha, &split_a) && run_ops(&b, hb, &split_b);
    if (ok) {
        CHECK_MSG(split_a == (version >= 21800), "rank %d: AUTO split %d with NCCL %d", R, split_a, version);
        CHECK_INT(split_b, 0);
        CHECK_MSG(memcmp(ha, hb, sizeof(float) * (size_t)total) == 0, "rank %d: split and init differ", R);
        for (int64_t i = 0; i < n; i++) {
            const double k = (double)(i % 7 + 1), tri = N * (N + 1) / 2.0;
            int j;
            bad += ha[i] != (float)(k * tri);                                  /* all_reduce, block 0: scale 1 */
            for (j = 0; j < N; j++) bad += ha[n + j * n + i] != (float)((N - j) * k); /* member j = rank N-1-j */
            bad += ha[(N + 1) * n + i] != (float)(k * tri * (me + 1));          /* reduce_scatter: block me */
            bad += ha[(N + 2) * n + i] != (float)(N * k);                       /* broadcast: member 0 = rank N-1 */
            bad += ha[(N + 3) * n + i] != (float)((N - (me + N - 1) % N) * k);  /* recv from member me-1 */
        }
        CHECK_MSG(bad == 0, "rank %d: %d results differ from the expectation", R, bad);
        if (R == 0)
            printf("  split vs init: reversed world split=%d (NCCL %d) and init, %d ranks, bitwise equal\n", split_a,
                   version, N);
    }
    if (a.user) a.destroy(a.user);
    if (b.user) b.destroy(b.user);
    free(ha);
    free(hb);
}

/* ------------------------------------------------ group streams: ring */

static void test_group_streams_ring(void) {
    const int64_t n = 1 << 20;
    par_comm_table t;
    cudaStream_t s = NULL;
    float *buf = NULL, *rbuf = NULL, *out = NULL, *host = NULL;
    int step, ok = 1, bad = 0, prev = (R + N - 1) % N, next = (R + 1) % N;
    par_comm_group *world = NULL;
    int *all = NULL;
    if (!enough("nccl_group_streams_ring", 2)) return;
    CHECK_OK(make_table(PAR_NCCL_GROUP_AUTO, 1, &t));
    if (!t.user) return;
    all = (int *)malloc(sizeof(int) * (size_t)N);
    for (step = 0; all && step < N; step++) all[step] = step;
    buf = dev_floats(n), rbuf = dev_floats(n), out = dev_floats(n);
    host = (float *)malloc(sizeof(float) * (size_t)n);
    ok = all && buf && rbuf && out && host && cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess &&
         t.set_stream(t.user, s) == PAR_OK && t.group_create(t.user, all, N, &world) == PAR_OK;
    CHECK_MSG(ok, "rank %d: setup: %s", R, par_last_error());
    for (step = 0; ok && step < 3; step++) {
        par_request *rr = NULL, *rs = NULL;
        const float mine = (float)(100 * step + R + 1), want = (float)(100 * step + prev + 1);
        slow_fill<<<64, 256, 0, s>>>(buf, n, mine, 20000000LL); /* ~10 ms before it writes */
        ok = t.recv(t.user, world, rbuf, n, PAR_F32, prev, &rr) == PAR_OK &&
             t.send(t.user, world, buf, n, PAR_F32, next, &rs) == PAR_OK;
        ok = ok && (step % 2 ? t.wait(t.user, rs) == PAR_OK && t.wait(t.user, rr) == PAR_OK
                             : t.wait(t.user, rr) == PAR_OK && t.wait(t.user, rs) == PAR_OK);
        if (ok) copy_k<<<64, 256, 0, s>>>(rbuf, out, n); /* after the wait: on the compute stream */
        ok = ok && cudaStreamSynchronize(s) == cudaSuccess &&
             cudaMemcpy(host, out, sizeof(float) * (size_t)n, cudaMemcpyDeviceToHost) == cudaSuccess;
        CHECK_MSG(ok, "rank %d: ring step %d: %s", R, step, par_last_error());
        for (int64_t i = 0; ok && i < n; i++) bad += host[i] != want * (float)(i % 7 + 1);
    }
    CHECK_MSG(bad == 0, "rank %d: %d elements of the ring differ (a send before its producer?)", R, bad);
    if (R == 0 && ok) printf("  group streams: 3 ring steps of 4 MB behind a 10 ms producer kernel, exact\n");
    if (world) t.group_destroy(t.user, world);
    t.destroy(t.user);
    if (s) cudaStreamDestroy(s);
    cudaFree(buf);
    cudaFree(rbuf);
    cudaFree(out);
    free(host);
    free(all);
}

/* --------------------------------------- pipeline with device boundaries */

/* The toy's rank state with a device copy of its four boundary arrays: the
   executor sends and receives device memory; the toy computes on the host. */
typedef struct dev_rank {
    toy_rank r;
    float *d; /* in, out, gin, gout: TOY_MAX_MB x 4 x TOY_N each */
} dev_rank;

#define DEV_ARR (TOY_MAX_MB * 4 * TOY_N)

static float *dev_slot(dev_rank *d, int which, int mb, int c) { return d->d + which * DEV_ARR + (mb * 4 + c) * TOY_N; }

static par_status dev_copy(void *dst, const void *src, cudaMemcpyKind kind) {
    cudaError_t e = cudaMemcpy(dst, src, sizeof(float) * TOY_N, kind);
    return e == cudaSuccess ? PAR_OK : par__fail(PAR_ECOMM, "cudaMemcpy: %s", cudaGetErrorString(e));
}

static par_status dev_fwd(void *u, int mb, int c) {
    dev_rank *d = (dev_rank *)u;
    if (toy_vs(&d->r, c) > 0) PAR__CHECK(dev_copy(d->r.in[mb][c], dev_slot(d, 0, mb, c), cudaMemcpyDeviceToHost));
    PAR__CHECK(toy_fwd(&d->r, mb, c));
    return dev_copy(dev_slot(d, 1, mb, c), d->r.out[mb][c], cudaMemcpyHostToDevice);
}

static par_status dev_bwd(void *u, int mb, int c, par_pp_op op) {
    dev_rank *d = (dev_rank *)u;
    if (toy_vs(&d->r, c) < d->r.t->p * d->r.t->v - 1)
        PAR__CHECK(dev_copy(d->r.gout[mb][c], dev_slot(d, 3, mb, c), cudaMemcpyDeviceToHost));
    PAR__CHECK(toy_bwd(&d->r, mb, c, op));
    if (op == PAR_PP_W) return PAR_OK;
    return dev_copy(dev_slot(d, 2, mb, c), d->r.gin[mb][c], cudaMemcpyHostToDevice);
}

static par_status dev_buf(void *u, int mb, int c, int is_grad, int is_input, void **ptr, int64_t *count) {
    dev_rank *d = (dev_rank *)u;
    *ptr = dev_slot(d, is_grad ? (is_input ? 2 : 3) : (is_input ? 0 : 1), mb, c);
    *count = TOY_N;
    return PAR_OK;
}

static int run_pipeline(toy *t, const par_pp_schedule *s) {
    dev_rank *d = (dev_rank *)calloc(1, sizeof(dev_rank));
    par_ctx_desc desc;
    par_ctx *ctx = NULL;
    par_pp_run_desc rd;
    char mesh[32];
    par_status st = PAR_ENOMEM;
    int c;
    snprintf(mesh, sizeof mesh, "pp=%d", N);
    memset(&desc, 0, sizeof desc);
    desc.mesh = mesh, desc.timeout_ms = 60000;
    if (d && cudaMalloc((void **)&d->d, sizeof(float) * 4 * DEV_ARR) == cudaSuccess &&
        (st = par_ctx_init_nccl(&desc, &ctx)) == PAR_OK) {
        d->r.t = t, d->r.stage = par_ctx_rank(ctx);
        memset(&rd, 0, sizeof rd);
        rd.schedule = s, rd.stage_dims = 1u;
        rd.callbacks.user = d, rd.callbacks.forward = dev_fwd, rd.callbacks.backward = dev_bwd;
        rd.callbacks.buffer = dev_buf;
        st = par_pp_run(ctx, &rd);
        for (c = 0; c < t->v; c++) t->got_dw[toy_vs(&d->r, c)] = d->r.dw[c];
        par_ctx_destroy(ctx);
    }
    if (st != PAR_OK) fprintf(stderr, "rank %d: pipeline: %s\n", R, par_last_error());
    if (d) cudaFree(d->d);
    free(d);
    return st == PAR_OK && toy_stage_ok(t, R);
}

static void test_pipeline_posted(void) {
    static const par_pp_kind kinds[2] = {PAR_PP_1F1B, PAR_PP_GPIPE};
    int k, posted;
    if (!enough("nccl_pipeline_posted", 2)) return;
    /* par_ctx_init_nccl takes group_streams from the environment */
    setenv("PARALLEL_NCCL_GROUP_STREAMS", "1", 1);
    for (k = 0; k < 2; k++)
        for (posted = 0; posted < 2; posted++) {
            par_pp_schedule_desc sd;
            par_pp_schedule *s = NULL, *ahead = NULL;
            toy t;
            memset(&sd, 0, sizeof sd);
            sd.stages = N, sd.chunks = 1, sd.micro_batches = 6, sd.kind = kinds[k];
            toy_init(&t, N, 1, 6, kinds[k]);
            CHECK_OK(par_pp_schedule_make(&sd, &s));
            if (!s) continue;
            if (posted) ahead = toy_post_ahead(s);
            CHECK_MSG(!posted || ahead, "posting ahead: %s", par_last_error());
            if (!posted || ahead)
                CHECK_MSG(run_pipeline(&t, posted ? ahead : s), "rank %d: %s%s on device buffers", R,
                          par_pp_kind_name(kinds[k]), posted ? " (receives posted ahead)" : "");
            if (R == 0)
                printf("  pipeline %s%s, %d stages, 6 micro-batches, device boundaries: run\n",
                       par_pp_kind_name(kinds[k]), posted ? " with every receive posted ahead" : "", N);
            par_pp_schedule_destroy(ahead);
            par_pp_schedule_destroy(s);
        }
    unsetenv("PARALLEL_NCCL_GROUP_STREAMS");
}

/* ------------------------------------------------------- bucket overlap */

/* 1 when the reduction was seen in flight while the kernel issued after it ran. */
static int overlap_seen(int group_streams, int *result_ok) {
    const int64_t n = (int64_t)64 << 20; /* 256 MB of f32 */
    par_comm_table t;
    cudaStream_t s = NULL;
    float *x = NULL, first = 0, last = 0;
    int *host = NULL, *dev = NULL, seen = 0, done = 0, ok, i, *all = (int *)malloc(sizeof(int) * (size_t)N);
    par_comm_group *world = NULL;
    par_request *req = NULL;
    *result_ok = 0;
    if (make_table(PAR_NCCL_GROUP_AUTO, group_streams, &t) != PAR_OK) {
        CHECK_MSG(0, "rank %d: table: %s", R, par_last_error());
        free(all);
        return 0;
    }
    for (i = 0; all && i < N; i++) all[i] = i;
    x = dev_floats(n);
    ok = all && x && cudaHostAlloc((void **)&host, 2 * sizeof(int), cudaHostAllocMapped) == cudaSuccess &&
         cudaHostGetDevicePointer((void **)&dev, host, 0) == cudaSuccess &&
         cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess && t.set_stream(t.user, s) == PAR_OK &&
         t.group_create(t.user, all, N, &world) == PAR_OK;
    if (ok) {
        host[0] = host[1] = 0;
        slow_fill<<<256, 256, 0, s>>>(x, n, (float)(R + 1), 0); /* the "gradients", on the compute stream */
        MPI_Barrier(MPI_COMM_WORLD);                             /* every rank issues its reduction together */
        ok = t.all_reduce(t.user, world, x, x, n, PAR_F32, PAR_REDUCE_SUM, &req) == PAR_OK;
        if (ok) spin_until<<<1, 1, 0, s>>>(dev, dev + 1, 4000000000LL); /* the next "backward" kernel */
        {
            volatile int *flag = host;
            const double t0 = MPI_Wtime();
            while (!flag[0] && MPI_Wtime() - t0 < 5.0) {
            }
        }
        if (ok) ok = t.test(t.user, req, &done) == PAR_OK;
        seen = ok && host[0] && !done;
        ((volatile int *)host)[1] = 1; /* release the kernel */
        if (ok && !done) ok = t.wait(t.user, req) == PAR_OK;
        ok = ok && cudaStreamSynchronize(s) == cudaSuccess &&
             cudaMemcpy(&first, x, sizeof(float), cudaMemcpyDeviceToHost) == cudaSuccess &&
             cudaMemcpy(&last, x + n - 1, sizeof(float), cudaMemcpyDeviceToHost) == cudaSuccess;
        *result_ok = ok && first == (float)(N * (N + 1) / 2) * 1.0f &&
                     last == (float)(N * (N + 1) / 2) * (float)((n - 1) % 7 + 1);
    }
    CHECK_MSG(ok, "rank %d: overlap (group_streams %d): %s", R, group_streams, par_last_error());
    if (world) t.group_destroy(t.user, world);
    t.destroy(t.user);
    if (s) cudaStreamDestroy(s);
    if (host) cudaFreeHost(host);
    cudaFree(x);
    free(all);
    return seen;
}

static void test_bucket_overlap(void) {
    int ok1 = 0, ok2 = 0, with, without;
    if (!enough("nccl_bucket_overlap", 2)) return;
    with = overlap_seen(1, &ok1);
    without = overlap_seen(-1, &ok2);
    CHECK_MSG(with, "rank %d: with a stream per group the reduction was not in flight while the kernel ran", R);
    CHECK_MSG(!without, "rank %d: with one stream a kernel ran while the reduction before it was in flight", R);
    CHECK_MSG(ok1 && ok2, "rank %d: the overlapped all_reduce's result is wrong (%d %d)", R, ok1, ok2);
    if (R == 0)
        printf("  bucket overlap: 256 MB all_reduce in flight while the next kernel ran: stream per group %s, one "
               "stream %s\n", with ? "yes" : "no", without ? "yes" : "no");
}

int main(int argc, char **argv) {
    int totals[2], sums[2];
    (void)toy_body; /* pp_toy.h's host-buffer body: this test has its own, on device buffers */
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &R);
    MPI_Comm_size(MPI_COMM_WORLD, &N);
    test_errors();
    test_split_vs_init();
    test_group_streams_ring();
    test_pipeline_posted();
    test_bucket_overlap();
    totals[0] = test_passed_;
    totals[1] = test_failed_;
    MPI_Allreduce(totals, sums, 2, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    MPI_Finalize();
    test_passed_ = sums[0];
    test_failed_ = sums[1];
    if (R == 0) return TEST_END("cuda_nccl");
    return sums[1] ? 1 : 0;
}
