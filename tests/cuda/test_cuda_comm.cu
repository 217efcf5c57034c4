/* tests/cuda/test_cuda_comm.cu - the NCCL comm table of parallel_cuda.cu under
   `mpirun -np <number of GPUs> build/test_cuda_comm` (one GPU per rank; also
   runs with -np 1). Every op x dtype (f32, bf16, f16, i32, i64, f64) on the
   world, the world in reverse order, a singleton, the ranks of this rank's
   parity, and {0, 1} (created by its members only), blocking and async,
   against expectations computed here on the host; argument errors;
   par_ctx_init_nccl; and the backend-generic suite (tests/comm_suite.h) on an
   NCCL context, 1-D and, on an even world of 4 or more, dp=2 x tp=N/2. Values
   are small integers, exact in every dtype, so sums and maxima compare exactly;
   averages of float types compare within the dtype's rounding (bf16 2^-8, f16
   2^-11 relative) plus an absolute term for NCCL's premultiplied average.

   Build (PARALLEL_WITH_MPI for both files, MPI flags from mpicc):
     nvcc -std=c++17 -I. -DPARALLEL_WITH_MPI $(mpicc --showme:compile) \
          parallel_cuda.cu tests/cuda/test_cuda_comm.cu \
          -lcublas -lnccl -lcudart $(mpicc --showme:link) -o build/test_cuda_comm
   Rank 0 prints the summary line with the checks of all ranks added up. */
#define PARALLEL_IMPLEMENTATION
#ifndef PARALLEL_WITH_MPI
#define PARALLEL_WITH_MPI
#endif
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>
#include "../test.h"
#include "../comm_suite.h"
#define PARALLEL_CUDA_DECLARATIONS_ONLY
#include "../../parallel_cuda.cu"

#include <cuda_fp16.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

static par_comm_table T;
static par_compute_table G;
static int R, N; /* world rank, size */

static const par_dtype all_types[6] = {PAR_F32, PAR_BF16, PAR_F16, PAR_I32, PAR_I64, PAR_F64};

/* ---------------------------------------------------------- conversions */

static uint16_t to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}
static float from_bf16(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static void put(par_dtype t, void *buf, size_t i, double x) {
    switch (t) {
    case PAR_F32: ((float *)buf)[i] = (float)x; break;
    case PAR_BF16: ((uint16_t *)buf)[i] = to_bf16((float)x); break;
    case PAR_F16: {
        __half_raw r = __float2half_rn((float)x);
        ((uint16_t *)buf)[i] = r.x;
        break;
    }
    case PAR_I32: ((int32_t *)buf)[i] = (int32_t)x; break;
    case PAR_I64: ((int64_t *)buf)[i] = (int64_t)x; break;
    default: ((double *)buf)[i] = x; break;
    }
}
static double get(par_dtype t, const void *buf, size_t i) {
    switch (t) {
    case PAR_F32: return ((const float *)buf)[i];
    case PAR_BF16: return from_bf16(((const uint16_t *)buf)[i]);
    case PAR_F16: {
        __half_raw r;
        r.x = ((const uint16_t *)buf)[i];
        return __half2float(__half(r));
    }
    case PAR_I32: return ((const int32_t *)buf)[i];
    case PAR_I64: return (double)((const int64_t *)buf)[i];
    default: return ((const double *)buf)[i];
    }
}

static int is_int(par_dtype t) { return t == PAR_I32 || t == PAR_I64; }

/* Element e of member m's input: small integers, negative ones too. */
static double val(int m, int64_t e) { return (double)(((m + 1) * (e % 5 + 1) + e % 3) % 11 - 3); }

/* Device buffer of n elements of t filled with f(i) (NULL f: zeros). */
static void *dev_fill(par_dtype t, size_t n, double (*f)(size_t, void *), void *arg) {
    const size_t es = par_dtype_size(t);
    unsigned char *h = (unsigned char *)calloc(n ? n : 1, es);
    void *d = NULL;
    for (size_t i = 0; i < n; i++) put(t, h, i, f ? f(i, arg) : 0.0);
    if (G.alloc(G.user, n * es, PAR_MEM_COMM, &d) != PAR_OK) d = NULL;
    if (d && n) G.memcpy(G.user, d, h, n * es, PAR_COPY_HOST_TO_DEVICE);
    free(h);
    return d;
}

/* Compare device buffer against want(i): |got - want| <= atol + rtol |want|. */
static int dev_check(const char *what, par_dtype t, const void *d, size_t n, double (*want)(size_t, void *), void *arg,
                     double rtol, double atol) {
    const size_t es = par_dtype_size(t);
    unsigned char *h = (unsigned char *)calloc(n ? n : 1, es);
    int ok = 1;
    G.synchronize(G.user);
    if (n) G.memcpy(G.user, h, d, n * es, PAR_COPY_DEVICE_TO_HOST);
    for (size_t i = 0; i < n && ok; i++) {
        const double g = get(t, h, i), w = want(i, arg);
        if (!(fabs(g - w) <= atol + rtol * fabs(w))) {
            fprintf(stderr, "rank %d: %s (%s): element %zu: got %.9g want %.9g\n", R, what, par_dtype_name(t), i, g, w);
            ok = 0;
        }
    }
    free(h);
    return ok;
}

/* --------------------------------------------------------------- ops */

typedef struct grp {
    par_comm_group *g;
    const int *ranks;
    int count, index;
    const char *name;
} grp;

typedef struct ctx_ar {
    const grp *gr;
    par_reduce_op op;
    par_dtype t;
    int64_t count;
    int root, member;
} ctx_ar;

static double f_own(size_t i, void *a) { return val(((ctx_ar *)a)->gr->index, (int64_t)i); }
static double f_member(size_t i, void *a) { return val(((ctx_ar *)a)->member, (int64_t)i); }
static double f_reduced(size_t i, void *a) {
    const ctx_ar *c = (const ctx_ar *)a;
    double s = 0, mx = -1e300;
    for (int m = 0; m < c->gr->count; m++) {
        s += val(m, (int64_t)i);
        mx = val(m, (int64_t)i) > mx ? val(m, (int64_t)i) : mx;
    }
    if (c->op == PAR_REDUCE_MAX) return mx;
    if (c->op == PAR_REDUCE_AVG) return is_int(c->t) ? (double)((int64_t)s / c->gr->count) : s / c->gr->count;
    return s;
}
static double f_gathered(size_t i, void *a) {
    const ctx_ar *c = (const ctx_ar *)a;
    return val((int)(i / (size_t)c->count), (int64_t)(i % (size_t)c->count));
}
/* reduce_scatter / all_to_all input of member m, block j, element e. */
static double blockval(int m, int j, int64_t e) { return (double)((m * 7 + j * 3 + e) % 23 - 5); }
static double f_blocks(size_t i, void *a) {
    const ctx_ar *c = (const ctx_ar *)a;
    return blockval(c->gr->index, (int)(i / (size_t)c->count), (int64_t)(i % (size_t)c->count));
}
static double f_rs(size_t i, void *a) {
    const ctx_ar *c = (const ctx_ar *)a;
    double s = 0;
    for (int m = 0; m < c->gr->count; m++) s += blockval(m, c->gr->index, (int64_t)i);
    return s;
}
static double f_a2a(size_t i, void *a) {
    const ctx_ar *c = (const ctx_ar *)a;
    return blockval((int)(i / (size_t)c->count), c->gr->index, (int64_t)(i % (size_t)c->count));
}
static double f_root(size_t i, void *a) { return val(((ctx_ar *)a)->root, (int64_t)i); }
static double f_garbage(size_t i, void *a) {
    (void)a;
    return (double)(i % 3) + 90.0;
}

static void test_group_dtype(const grp *gr, par_dtype t, int64_t count) {
    const double exact = 0.0, avg_tol = t == PAR_BF16 ? 1.0 / 128 : t == PAR_F16 ? 1.0 / 1024 : 1e-6;
    const int c = gr->count;
    /* NCCL's float avg is a premultiplied sum, sum_m(x_m * (1/c)) in the dtype:
       when 1/c is inexact (c not a power of two) a sum that cancels to 0 comes out
       as a tiny nonzero, which no relative bound admits. So avg also gets an
       absolute term of avg_tol per unit of the inputs' magnitude per member. */
    double maxabs = 0, avg_atol;
    ctx_ar a;
    char what[160];
    void *s, *r;
    memset(&a, 0, sizeof a);
    a.gr = gr;
    a.t = t;
    a.count = count;
    for (int m = 0; m < c; m++)
        for (int64_t e = 0; e < count; e++) maxabs = fabs(val(m, e)) > maxabs ? fabs(val(m, e)) : maxabs;
    avg_atol = avg_tol * maxabs * c;
    /* all_reduce: sum, avg, max, blocking; sum in place */
    for (int op = 0; op < 3; op++) {
        a.op = (par_reduce_op)op;
        s = dev_fill(t, (size_t)count, f_own, &a);
        r = dev_fill(t, (size_t)count, NULL, NULL);
        snprintf(what, sizeof what, "all_reduce %s on %s", par_reduce_op_name(a.op), gr->name);
        CHECK_MSG(T.all_reduce(T.user, gr->g, s, r, count, t, a.op, NULL) == PAR_OK, "%s %s", what, par_dtype_name(t));
        CHECK_MSG(dev_check(what, t, r, (size_t)count, f_reduced, &a, op == PAR_REDUCE_AVG ? avg_tol : exact,
                            op == PAR_REDUCE_AVG ? avg_atol : exact),
                  "%s", what);
        G.free(G.user, s);
        G.free(G.user, r);
    }
    a.op = PAR_REDUCE_SUM;
    s = dev_fill(t, (size_t)count, f_own, &a);
    CHECK_OK(T.all_reduce(T.user, gr->g, s, s, count, t, PAR_REDUCE_SUM, NULL));
    CHECK_MSG(dev_check("all_reduce in place", t, s, (size_t)count, f_reduced, &a, exact, exact), "%s", gr->name);
    G.free(G.user, s);

    /* all_gather, separate and in place */
    s = dev_fill(t, (size_t)count, f_own, &a);
    r = dev_fill(t, (size_t)(count * c), f_garbage, NULL);
    CHECK_OK(T.all_gather(T.user, gr->g, s, r, count, t, NULL));
    CHECK_MSG(dev_check("all_gather", t, r, (size_t)(count * c), f_gathered, &a, exact, exact), "%s", gr->name);
    G.free(G.user, r);
    r = dev_fill(t, (size_t)(count * c), f_garbage, NULL);
    CHECK_OK(G.memcpy(G.user, (char *)r + (size_t)(gr->index * count) * par_dtype_size(t), s,
                      (size_t)count * par_dtype_size(t), PAR_COPY_DEVICE_TO_DEVICE));
    CHECK_OK(T.all_gather(T.user, gr->g, (char *)r + (size_t)(gr->index * count) * par_dtype_size(t), r, count, t,
                          NULL));
    CHECK_MSG(dev_check("all_gather in place", t, r, (size_t)(count * c), f_gathered, &a, exact, exact), "%s", gr->name);
    G.free(G.user, s);
    G.free(G.user, r);

    /* reduce_scatter (sum) and all_to_all */
    s = dev_fill(t, (size_t)(count * c), f_blocks, &a);
    r = dev_fill(t, (size_t)count, f_garbage, NULL);
    CHECK_OK(T.reduce_scatter(T.user, gr->g, s, r, count, t, PAR_REDUCE_SUM, NULL));
    CHECK_MSG(dev_check("reduce_scatter", t, r, (size_t)count, f_rs, &a, exact, exact), "%s", gr->name);
    G.free(G.user, r);
    r = dev_fill(t, (size_t)(count * c), f_garbage, NULL);
    CHECK_OK(T.all_to_all(T.user, gr->g, s, r, count, t, NULL));
    CHECK_MSG(dev_check("all_to_all", t, r, (size_t)(count * c), f_a2a, &a, exact, exact), "%s", gr->name);
    G.free(G.user, s);
    G.free(G.user, r);

    /* broadcast from every root */
    for (a.root = 0; a.root < c; a.root++) {
        s = a.root == gr->index ? dev_fill(t, (size_t)count, f_root, &a) : dev_fill(t, (size_t)count, f_garbage, NULL);
        CHECK_OK(T.broadcast(T.user, gr->g, s, count, t, a.root, NULL));
        CHECK_MSG(dev_check("broadcast", t, s, (size_t)count, f_root, &a, exact, exact), "%s root %d", gr->name, a.root);
        G.free(G.user, s);
    }

    /* send/recv around the ring, async */
    if (c >= 2) {
        par_request *rq = NULL, *sq = NULL;
        const int next = (gr->index + 1) % c, prev = (gr->index + c - 1) % c;
        s = dev_fill(t, (size_t)count, f_own, &a);
        r = dev_fill(t, (size_t)count, f_garbage, NULL);
        CHECK_OK(T.recv(T.user, gr->g, r, count, t, prev, &rq));
        CHECK_OK(T.send(T.user, gr->g, s, count, t, next, &sq));
        CHECK(rq && sq);
        if (sq) CHECK_OK(T.wait(T.user, sq));
        if (rq) CHECK_OK(T.wait(T.user, rq));
        a.member = prev;
        CHECK_MSG(dev_check("send/recv ring", t, r, (size_t)count, f_member, &a, exact, exact), "%s", gr->name);
        G.free(G.user, s);
        G.free(G.user, r);
    }

    /* async all_reduce completed by test(), and two requests waited out of order */
    {
        par_request *q1 = NULL, *q2 = NULL;
        int done = 0;
        long polls = 0;
        void *s2, *r2;
        a.op = PAR_REDUCE_SUM;
        s = dev_fill(t, (size_t)count, f_own, &a);
        r = dev_fill(t, (size_t)count, NULL, NULL);
        s2 = dev_fill(t, (size_t)count, f_own, &a);
        r2 = dev_fill(t, (size_t)count, NULL, NULL);
        CHECK_OK(T.all_reduce(T.user, gr->g, s, r, count, t, PAR_REDUCE_SUM, &q1));
        CHECK_OK(T.all_reduce(T.user, gr->g, s2, r2, count, t, PAR_REDUCE_SUM, &q2));
        if (q2) CHECK_OK(T.wait(T.user, q2));
        while (q1 && !done && polls++ < 100000000L) CHECK_OK(T.test(T.user, q1, &done));
        CHECK_MSG(done, "test() never reported completion");
        CHECK_MSG(dev_check("async all_reduce", t, r, (size_t)count, f_reduced, &a, exact, exact), "%s", gr->name);
        CHECK_MSG(dev_check("async all_reduce 2", t, r2, (size_t)count, f_reduced, &a, exact, exact), "%s", gr->name);
        G.free(G.user, s);
        G.free(G.user, r);
        G.free(G.user, s2);
        G.free(G.user, r2);
    }
    CHECK_OK(T.barrier(T.user, gr->g));
}

static void test_group(const int *ranks, int count, const char *name) {
    grp gr;
    gr.ranks = ranks;
    gr.count = count;
    gr.name = name;
    gr.index = -1;
    gr.g = NULL;
    for (int i = 0; i < count; i++)
        if (ranks[i] == R) gr.index = i;
    if (gr.index < 0) return; /* not a member: does not take part */
    CHECK_MSG(T.group_create(T.user, ranks, count, &gr.g) == PAR_OK, "group_create %s", name);
    if (!gr.g) return;
    for (int ti = 0; ti < 6; ti++) {
        test_group_dtype(&gr, all_types[ti], 1);
        test_group_dtype(&gr, all_types[ti], 1000 + 3);
    }
    /* argument errors */
    {
        void *b = dev_fill(PAR_F32, 4, NULL, NULL);
        CHECK_ERR(T.all_reduce(T.user, gr.g, b, b, -1, PAR_F32, PAR_REDUCE_SUM, NULL), PAR_EINVAL, "count");
        CHECK_ERR(T.all_reduce(T.user, gr.g, b, b, 4, PAR_DTYPE_COUNT, PAR_REDUCE_SUM, NULL), PAR_EINVAL, "dtype");
        CHECK_ERR(T.broadcast(T.user, gr.g, b, 4, PAR_F32, count, NULL), PAR_EINVAL, "root");
        CHECK_ERR(T.send(T.user, gr.g, b, 4, PAR_F32, gr.index, NULL), PAR_EINVAL, "itself");
        CHECK_ERR(T.recv(T.user, gr.g, b, 4, PAR_F32, count, NULL), PAR_EINVAL, "peer");
        CHECK_ERR(T.all_reduce(T.user, gr.g, NULL, b, 4, PAR_F32, PAR_REDUCE_SUM, NULL), PAR_EINVAL, "NULL");
        G.free(G.user, b);
    }
    T.group_destroy(T.user, gr.g);
}

static void test_ctx(void) {
    par_ctx *ctx = NULL;
    par_comm_group *g = NULL;
    int index = -1, count = 0;
    CHECK_OK(par_ctx_init_nccl(NULL, &ctx));
    if (!ctx) return;
    CHECK_INT(par_ctx_rank(ctx), R);
    CHECK_INT(par_ctx_size(ctx), N);
    CHECK_STR(par_ctx_comm(ctx)->name, "nccl");
    CHECK_STR(par_ctx_compute(ctx)->name, "cuda");
    CHECK_OK(par_ctx_group(ctx, 1u, &g, &index, &count));
    CHECK_INT(index, R);
    CHECK_INT(count, N);
    if (g) {
        const par_compute_table *ct = par_ctx_compute(ctx);
        const par_comm_table *cm = par_ctx_comm(ctx);
        float h[5] = {1, 2, 3, 4, (float)R}, back[5];
        void *d = NULL;
        CHECK_OK(ct->alloc(ct->user, sizeof h, PAR_MEM_COMM, &d));
        CHECK_OK(ct->memcpy(ct->user, d, h, sizeof h, PAR_COPY_HOST_TO_DEVICE));
        CHECK_OK(cm->all_reduce(cm->user, g, d, d, 5, PAR_F32, PAR_REDUCE_SUM, NULL));
        CHECK_OK(ct->memcpy(ct->user, back, d, sizeof back, PAR_COPY_DEVICE_TO_HOST));
        CHECK_MSG(back[0] == (float)N && back[3] == 4.0f * N && back[4] == (float)(N * (N - 1) / 2),
                  "ctx all_reduce: %g %g %g", (double)back[0], (double)back[3], (double)back[4]);
        ct->free(ct->user, d);
    }
    {
        par_ctx_desc bad;
        par_ctx *c2 = NULL;
        memset(&bad, 0, sizeof bad);
        bad.comm = par_ctx_comm(ctx);
        CHECK_ERR(par_ctx_init_nccl(&bad, &c2), PAR_EINVAL, "desc->comm");
    }
    /* The caller's own compute table: the collectives must run on its stream,
       after its kernels. A kernel is queued there and the all_reduce issued right
       behind it, without a synchronize between them. */
    {
        par_cuda_desc cd;
        par_compute_table mine;
        par_ctx_desc d2;
        par_ctx *c3 = NULL;
        const int64_t n = 1 << 22;
        float *h = (float *)malloc(sizeof(float) * (size_t)n);
        void *buf = NULL;
        memset(&cd, 0, sizeof cd);
        memset(&mine, 0, sizeof mine);
        CHECK_OK(par_comm_nccl_device(par_ctx_comm(ctx), &cd.device));
        CHECK_OK(par_compute_cuda(&cd, &mine));
        memset(&d2, 0, sizeof d2);
        d2.compute = &mine;
        if (mine.user) CHECK_OK(par_ctx_init_nccl(&d2, &c3));
        if (c3 && h) {
            const par_comm_table *cm = par_ctx_comm(c3);
            par_comm_group *w = NULL;
            int64_t bad = 0;
            CHECK(par_ctx_compute(c3)->stream == mine.stream);
            CHECK_OK(par_ctx_group(c3, 1u, &w, NULL, NULL));
            for (int64_t i = 0; i < n; i++) h[i] = 1.0f;
            CHECK_OK(mine.alloc(mine.user, sizeof(float) * (size_t)n, PAR_MEM_COMM, &buf));
            CHECK_OK(mine.memcpy(mine.user, buf, h, sizeof(float) * (size_t)n, PAR_COPY_HOST_TO_DEVICE));
            for (int rep = 0; rep < 4; rep++) /* x = (R + 1) * 1, long enough to race */
                CHECK_OK(mine.scale(mine.user, n, rep == 0 ? (float)(R + 1) : 1.0f, (float *)buf));
            if (w) CHECK_OK(cm->all_reduce(cm->user, w, buf, buf, n, PAR_F32, PAR_REDUCE_SUM, NULL));
            CHECK_OK(mine.memcpy(mine.user, h, buf, sizeof(float) * (size_t)n, PAR_COPY_DEVICE_TO_HOST));
            for (int64_t i = 0; i < n; i++) bad += h[i] != (float)(N * (N + 1) / 2);
            CHECK_MSG(bad == 0, "all_reduce behind a kernel of the caller's compute table: %lld of %lld wrong "
                                "(collectives not on its stream?)", (long long)bad, (long long)n);
            mine.free(mine.user, buf);
        }
        if (c3) par_ctx_destroy(c3); /* leaves `mine` alone: the caller's */
        if (mine.user) mine.destroy(mine.user);
        free(h);
    }
    par_ctx_destroy(ctx);
}

/* The suite every comm backend runs (threads and MPI run it exactly), here with
   the option for NCCL's documented float reductions: bf16/f16 reduced in the
   type itself and avg as a premultiplied sum (see comm_suite_options). */
static void test_suite(const char *mesh, int quick) {
    par_ctx_desc desc;
    par_ctx *ctx = NULL;
    comm_suite_options opts;
    int passed = 0, failed;
    memset(&desc, 0, sizeof desc);
    desc.mesh = mesh;
    desc.timeout_ms = 120000; /* a hang fails the op instead of stalling the job */
    CHECK_OK(par_ctx_init_nccl(&desc, &ctx));
    if (!ctx) return;
    memset(&opts, 0, sizeof opts);
    opts.quick = quick;
    opts.reduce_in_dtype = 1;
    failed = comm_suite_run_opts(ctx, &opts, &passed);
    CHECK_MSG(failed == 0 && passed > 0, "rank %d: comm suite on mesh %s: %d checks failed, %d passed", R,
              mesh ? mesh : "(1-D)", failed, passed);
    test_passed_ += passed;
    test_failed_ += failed;
    par_ctx_destroy(ctx);
}

int main(int argc, char **argv) {
    int *world, *rev, *parity, np = 0, dev = -1, totals[2], sums[2];
    par_cuda_desc cd;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &R);
    MPI_Comm_size(MPI_COMM_WORLD, &N);
    world = (int *)malloc(sizeof(int) * (size_t)N);
    rev = (int *)malloc(sizeof(int) * (size_t)N);
    parity = (int *)malloc(sizeof(int) * (size_t)N);
    for (int i = 0; i < N; i++) {
        world[i] = i;
        rev[i] = N - 1 - i;
        if (i % 2 == R % 2) parity[np++] = i;
    }
    CHECK_OK(par_comm_nccl(NULL, &T));
    if (T.user) {
        CHECK_INT(T.rank, R);
        CHECK_INT(T.size, N);
        CHECK_STR(T.name, "nccl");
        CHECK_OK(par_comm_nccl_device(&T, &dev));
        memset(&cd, 0, sizeof cd);
        cd.device = dev;
        CHECK_OK(par_compute_cuda(&cd, &G));
        if (G.user) {
            CHECK_OK(T.set_stream(T.user, G.stream));
            test_group(world, N, "world");
            test_group(rev, N, "world reversed");
            test_group(&R, 1, "self");
            test_group(parity, np, "parity");
            if (N >= 3) {
                static const int pair[2] = {0, 1};
                test_group(pair, 2, "{0,1}");
            }
            {
                par_comm_group *g = NULL;
                int dup[2] = {R, R}, other = (R + 1) % N;
                CHECK_ERR(T.group_create(T.user, dup, 2, &g), PAR_EINVAL, N == 1 ? "ranks listed" : "twice");
                if (N > 1) CHECK_ERR(T.group_create(T.user, &other, 1, &g), PAR_EINVAL, "not among");
            }
            G.destroy(G.user);
        }
        T.destroy(T.user);
    }
    test_ctx();
    test_suite(NULL, 0);
    if (N >= 4 && N % 2 == 0) {
        char mesh[32];
        snprintf(mesh, sizeof mesh, "dp=2,tp=%d", N / 2);
        test_suite(mesh, 1);
    }
    /* One summary line for the whole job. */
    totals[0] = test_passed_;
    totals[1] = test_failed_;
    MPI_Allreduce(totals, sums, 2, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    free(world);
    free(rev);
    free(parity);
    MPI_Finalize();
    test_passed_ = sums[0];
    test_failed_ = sums[1];
    if (R == 0) return TEST_END("cuda_comm");
    return sums[1] ? 1 : 0;
}
