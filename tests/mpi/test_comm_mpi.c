/* tests/mpi/test_comm_mpi.c - the OpenMPI comm backend under mpirun.

   Build: mpicc -std=c11 -O2 -g -Wall -Wextra -Wpedantic -Werror -DPARALLEL_WITH_MPI -Itests \
              tests/mpi/test_comm_mpi.c -o build/test_comm_mpi -lm -lpthread
   (add -DPAR__MPI_MAX_COUNT=1000 for build/test_comm_mpi_chunked: ops over
   1000 elements then split into chunks, exercising the > INT_MAX count path.
   Not much lower: with 7-element chunks, thousands of non-blocking collectives
   in flight at once crashed inside OpenMPI 4.1.4's progress engine.)
   Run:   mpirun --allow-run-as-root --oversubscribe -np 4 build/test_comm_mpi

   Every rank runs the checks; rank 0 prints ONE summary line with the counts
   summed over ranks. The host initializes MPI here (so contexts can come and go);
   the context-initializes-MPI path is covered by the bench and the examples.

   References are computed independently of the backend: expected values from
   the closed-form inputs of every member in double, rounded to bf16/f16 with
   rint() on the value's ulp (not with the backend's bit tricks).

   The allocator: one more context runs the same ops with a counting
   par_allocator in its desc while the PARALLEL_MALLOC/REALLOC/FREE macros
   count too: the backend (its state, groups, requests, f32 and in-place
   temporaries, chunk datatypes' arrays) must take every block from the hooks,
   none from the macros, and give all of them back by par_ctx_destroy. This
   file compiles the implementation itself for that (and for the private
   converters and PAR__MPI_MAX_COUNT below). */
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "count_alloc.h" /* counting PARALLEL_MALLOC/REALLOC/FREE and hooks */

#define PARALLEL_IMPLEMENTATION
#include "test.h"
#include <math.h>
#include <poll.h>

#ifndef PAR__MPI_MAX_COUNT
#define TEST_NAME "comm_mpi"
#elif PAR__MPI_MAX_COUNT == INT_MAX
#define TEST_NAME "comm_mpi"
#else
#define TEST_NAME "comm_mpi_chunked"
#endif

#include "comm_suite.h" /* the backend-generic suite (tests/comm_suite.h) */

/* --- independent bf16/f16 reference --------------------------------------- */

static double ref_round(double x, int bits, int min_exp) { /* RNE to `bits` significant bits */
    int e;
    double ulp;
    if (x == 0 || isinf(x) || isnan(x)) return x;
    frexp(x, &e);
    if (e < min_exp) e = min_exp;
    ulp = ldexp(1.0, e - bits);
    return rint(x / ulp) * ulp;
}
static double ref_bf16(double x) { return ref_round(x, 8, -1000); }
static double ref_f16(double x) {
    double r = ref_round(x, 11, -13);
    return fabs(r) > 65504 ? copysign(INFINITY, r) : r;
}
static double ref_decode_f16(unsigned h) {
    unsigned e = (h >> 10) & 31, m = h & 1023;
    double v = e == 31 ? (m ? NAN : INFINITY) : e ? ldexp(1024 + m, (int)e - 25) : ldexp(m, -24);
    return h & 0x8000 ? -v : v;
}
static double ref_decode_bf16(unsigned h) {
    unsigned e = (h >> 7) & 255, m = h & 127;
    double v = e == 255 ? (m ? NAN : INFINITY) : e ? ldexp(128 + m, (int)e - 134) : ldexp(m, -133);
    return h & 0x8000 ? -v : v;
}

/* Exhaustive: decoding every finite value, and rounding every midpoint between
   neighbours (ties to even) and the floats just beside it. */
static void test_conversions(void) {
    unsigned h, bad = 0;
    for (h = 0; h < 0x7bff && bad < 5; h++) { /* pairs of finite neighbours */
        double v = ref_decode_f16(h), w = ref_decode_f16(h + 1), mid = (v + w) / 2;
        float fm = (float)mid;
        unsigned even = (h & 1) ? h + 1 : h;
        if (par__f16_to_f32((uint16_t)h) != (float)v || par__f16_to_f32((uint16_t)(h | 0x8000)) != (float)-v ||
            par__f32_to_f16((float)v) != h || par__f32_to_f16(fm) != even ||
            par__f32_to_f16(-fm) != (even | 0x8000) || par__f32_to_f16(nextafterf(fm, 0)) != h ||
            par__f32_to_f16(nextafterf(fm, INFINITY)) != h + 1)
            bad++, fprintf(stderr, "f16 0x%04x: conversion mismatch\n", h);
    }
    CHECK_INT(bad, 0);
    for (bad = 0, h = 0; h < 0x7f7f && bad < 5; h++) {
        double v = ref_decode_bf16(h), w = ref_decode_bf16(h + 1), mid = (v + w) / 2;
        float fm = (float)mid;
        unsigned even = (h & 1) ? h + 1 : h;
        if (par__bf16_to_f32((uint16_t)h) != (float)v || par__f32_to_bf16((float)v) != h ||
            par__f32_to_bf16(fm) != even || par__f32_to_bf16(nextafterf(fm, 0)) != h ||
            par__f32_to_bf16(nextafterf(fm, INFINITY)) != h + 1)
            bad++, fprintf(stderr, "bf16 0x%04x: conversion mismatch\n", h);
    }
    CHECK_INT(bad, 0);
    CHECK_INT(par__f32_to_f16(65519.0f), 0x7bff);
    CHECK_INT(par__f32_to_f16(65520.0f), 0x7c00);
    CHECK(isnan(par__bf16_to_f32(par__f32_to_bf16(NAN))));
    CHECK(isnan(par__f16_to_f32(par__f32_to_f16(NAN))));
}

/* --- values ---------------------------------------------------------------- */

/* Input i of member r (exact in every dtype, sums exact in f32). */
static double val(par_dtype d, int r, int64_t i) {
    double v = (double)((r * 7 + i * 3) % 29) - 9;
    return d == PAR_BF16 || d == PAR_F16 ? v * 0.25 : v;
}
static void store(par_dtype d, void *buf, int64_t i, double v) {
    switch (d) {
    case PAR_F32: ((float *)buf)[i] = (float)v; break;
    case PAR_F64: ((double *)buf)[i] = v; break;
    case PAR_I32: ((int32_t *)buf)[i] = (int32_t)v; break;
    case PAR_I64: ((int64_t *)buf)[i] = (int64_t)v; break;
    case PAR_BF16: { /* v is exact in bf16 and f32 here: take the top half of the f32 */
        float f = (float)v;
        uint32_t u;
        memcpy(&u, &f, 4);
        ((uint16_t *)buf)[i] = (uint16_t)(u >> 16);
        break;
    }
    case PAR_F16: { /* v is exact in f16 here */
        double a = fabs(v), m;
        int e;
        unsigned h;
        m = frexp(a, &e); /* a = m * 2^e, m in [0.5, 1) */
        if (a == 0)
            h = 0;
        else if (e - 1 >= -14)
            h = (unsigned)(e - 1 + 15) << 10 | (unsigned)((m * 2 - 1) * 1024);
        else
            h = (unsigned)ldexp(a, 24);
        ((uint16_t *)buf)[i] = (uint16_t)(h | (v < 0 ? 0x8000u : 0));
        break;
    }
    default: break;
    }
}
static double load(par_dtype d, const void *buf, int64_t i) {
    switch (d) {
    case PAR_F32: return ((const float *)buf)[i];
    case PAR_F64: return ((const double *)buf)[i];
    case PAR_I32: return ((const int32_t *)buf)[i];
    case PAR_I64: return (double)((const int64_t *)buf)[i];
    case PAR_BF16: return ref_decode_bf16(((const uint16_t *)buf)[i]);
    case PAR_F16: return ref_decode_f16(((const uint16_t *)buf)[i]);
    default: return NAN;
    }
}
/* What reducing the inputs of element i over members 0..n-1 must give. */
static double expect(par_dtype d, par_reduce_op op, int n, int64_t i, const int *member_world) {
    double acc = op == PAR_REDUCE_MAX ? -INFINITY : 0;
    int m;
    for (m = 0; m < n; m++) {
        double v = val(d, member_world[m], i);
        acc = op == PAR_REDUCE_MAX ? (v > acc ? v : acc) : acc + v;
    }
    if (op == PAR_REDUCE_AVG) {
        if (d == PAR_I32 || d == PAR_I64) return trunc(acc / n);
        acc = d == PAR_F32 ? (double)((float)acc / (float)n) : acc / n;
    }
    if (d == PAR_BF16) return ref_bf16(acc);
    if (d == PAR_F16) return ref_f16(acc);
    return acc;
}

static int count_bad(par_dtype d, const void *buf, int64_t n, double (*want)(int64_t, void *), void *arg,
                     const char *what) {
    int64_t i;
    int bad = 0;
    for (i = 0; i < n; i++) {
        double g = load(d, buf, i), w = want(i, arg);
        if (g != w) {
            if (bad < 3) fprintf(stderr, "%s %s [%lld]: got %g want %g\n", what, par_dtype_name(d), (long long)i, g, w);
            bad++;
        }
    }
    return bad;
}

/* --- collectives on one group ---------------------------------------------- */

typedef struct gctx {
    const par_comm_table *c;
    par_comm_group *g;
    int n, index;
    int world[64]; /* world rank of each member */
    par_dtype d;
    par_reduce_op op;
    int block; /* for reduce_scatter / gather / a2a references */
    int64_t count;
    int root;
} gctx;

static double want_reduce(int64_t i, void *a) {
    gctx *x = (gctx *)a;
    return expect(x->d, x->op, x->n, i + (int64_t)x->block * x->count, x->world);
}
static double want_gather(int64_t i, void *a) {
    gctx *x = (gctx *)a;
    return val(x->d, x->world[i / x->count], i % x->count);
}
/* all_to_all: member m sends block j holding val(m, j*count + t). */
static double want_a2a(int64_t i, void *a) {
    gctx *x = (gctx *)a;
    int64_t j = i / x->count, t = i % x->count;
    return val(x->d, x->world[j], (int64_t)x->index * x->count + t);
}
static double want_bcast(int64_t i, void *a) {
    gctx *x = (gctx *)a;
    return val(x->d, x->world[x->root], i);
}

static void *xalloc(size_t n) {
    void *p = calloc(n ? n : 1, 1);
    if (!p) abort();
    return p;
}

/* Blocking, async+wait, async+test. */
/* req is read after the op's call has filled it (argument order is unspecified). */
static par_status finish(gctx *x, par_status st, par_request **reqp, int mode) {
    int done = 0, spins = 0;
    par_request *req = *reqp;
    if (st != PAR_OK || mode == 0) return st;
    if (mode == 1) return x->c->wait(x->c->user, req);
    while (!done && spins++ < 100000000) {
        st = x->c->test(x->c->user, req, &done);
        if (done || st != PAR_OK) return st;
    }
    return PAR_ETIMEOUT;
}

static void run_group_ops(gctx *x, int64_t count) {
    static const par_dtype dtypes[] = {PAR_F32, PAR_BF16, PAR_F16, PAR_I32, PAR_I64, PAR_F64};
    int di, oi, mode, j, bad;
    x->count = count;
    for (di = 0; di < 6; di++) {
        par_dtype d = dtypes[di];
        size_t es = par_dtype_size(d);
        int64_t n = x->n, i;
        char *send = (char *)xalloc((size_t)(n * count) * es), *recv = (char *)xalloc((size_t)(n * count) * es);
        x->d = d;
        for (mode = 0; mode < 3; mode++) {
            par_request *req = NULL, **rq = mode ? &req : NULL;
            for (oi = 0; oi < 3; oi++) {
                x->op = (par_reduce_op)oi;
                x->block = 0;
                /* all_reduce, out of place then in place */
                for (i = 0; i < count; i++) store(d, send, i, val(d, x->world[x->index], i));
                CHECK_OK(finish(x, x->c->all_reduce(x->c->user, x->g, send, recv, count, d, x->op, rq), &req, mode));
                CHECK_INT(count_bad(d, recv, count, want_reduce, x, "all_reduce"), 0);
                CHECK_OK(finish(x, x->c->all_reduce(x->c->user, x->g, send, send, count, d, x->op, rq), &req, mode));
                CHECK_INT(count_bad(d, send, count, want_reduce, x, "all_reduce in place"), 0);
                /* reduce_scatter: block j of member m holds val(m, j*count + t) */
                for (i = 0; i < n * count; i++) store(d, send, i, val(d, x->world[x->index], i));
                x->block = x->index;
                CHECK_OK(finish(x, x->c->reduce_scatter(x->c->user, x->g, send, recv, count, d, x->op, rq), &req, mode));
                CHECK_INT(count_bad(d, recv, count, want_reduce, x, "reduce_scatter"), 0);
                CHECK_OK(finish(x, x->c->reduce_scatter(x->c->user, x->g, send, send + (size_t)(x->index * count) * es,
                                                         count, d, x->op, rq), &req, mode));
                CHECK_INT(count_bad(d, send + (size_t)(x->index * count) * es, count, want_reduce, x,
                                    "reduce_scatter in place"), 0);
            }
            /* all_gather, out of place then in place */
            for (i = 0; i < count; i++) store(d, send, i, val(d, x->world[x->index], i));
            memset(recv, 0x55, (size_t)(n * count) * es);
            CHECK_OK(finish(x, x->c->all_gather(x->c->user, x->g, send, recv, count, d, rq), &req, mode));
            CHECK_INT(count_bad(d, recv, n * count, want_gather, x, "all_gather"), 0);
            memset(recv, 0x55, (size_t)(n * count) * es);
            for (i = 0; i < count; i++) store(d, recv, x->index * count + i, val(d, x->world[x->index], i));
            CHECK_OK(finish(x, x->c->all_gather(x->c->user, x->g, recv + (size_t)(x->index * count) * es, recv, count,
                                                d, rq), &req, mode));
            CHECK_INT(count_bad(d, recv, n * count, want_gather, x, "all_gather in place"), 0);
            /* all_to_all */
            for (i = 0; i < n * count; i++) store(d, send, i, val(d, x->world[x->index], i));
            memset(recv, 0x55, (size_t)(n * count) * es);
            CHECK_OK(finish(x, x->c->all_to_all(x->c->user, x->g, send, recv, count, d, rq), &req, mode));
            CHECK_INT(count_bad(d, recv, n * count, want_a2a, x, "all_to_all"), 0);
            /* broadcast from every root */
            for (j = 0, bad = 0; j < n; j++) {
                x->root = j;
                for (i = 0; i < count; i++) store(d, recv, i, j == x->index ? val(d, x->world[j], i) : -1);
                CHECK_OK(finish(x, x->c->broadcast(x->c->user, x->g, recv, count, d, j, rq), &req, mode));
                bad += count_bad(d, recv, count, want_bcast, x, "broadcast");
            }
            CHECK_INT(bad, 0);
            /* ring p2p, two messages per pair to check FIFO order (second = first + 1) */
            if (n > 1) {
                int next = (x->index + 1) % x->n, prev = (x->index + x->n - 1) % x->n;
                par_request *r1 = NULL, *r2 = NULL, *s1 = NULL, *s2 = NULL;
                char *send2 = (char *)xalloc((size_t)count * es), *recv2 = (char *)xalloc((size_t)count * es);
                for (i = 0; i < count; i++) {
                    store(d, send, i, val(d, x->world[x->index], i));
                    store(d, send2, i, val(d, x->world[x->index], i + 1));
                }
                CHECK_OK(x->c->recv(x->c->user, x->g, recv, count, d, prev, &r1));
                CHECK_OK(x->c->recv(x->c->user, x->g, recv2, count, d, prev, &r2));
                if (mode == 0) { /* blocking sends: the receives are already posted */
                    CHECK_OK(x->c->send(x->c->user, x->g, send, count, d, next, NULL));
                    CHECK_OK(x->c->send(x->c->user, x->g, send2, count, d, next, NULL));
                } else {
                    CHECK_OK(x->c->send(x->c->user, x->g, send, count, d, next, &s1));
                    CHECK_OK(x->c->send(x->c->user, x->g, send2, count, d, next, &s2));
                    CHECK_OK(finish(x, PAR_OK, &s1, mode));
                    CHECK_OK(finish(x, PAR_OK, &s2, mode));
                }
                CHECK_OK(finish(x, PAR_OK, &r1, mode ? mode : 1));
                CHECK_OK(finish(x, PAR_OK, &r2, mode ? mode : 1));
                for (i = 0, bad = 0; i < count; i++)
                    bad += load(d, recv, i) != val(d, x->world[prev], i) ||
                           load(d, recv2, i) != val(d, x->world[prev], i + 1);
                CHECK_INT(bad, 0);
                free(send2);
                free(recv2);
            }
            CHECK_OK(x->c->barrier(x->c->user, x->g));
        }
        free(send);
        free(recv);
    }
}

/* bf16/f16 sums must round ONCE: 256 + 1 + 1 + 1 = 259 -> 260 in bf16 (tie to
   even), while rounding after every pairwise step gives 256 or 258. */
static void test_single_rounding(const par_comm_table *c, par_comm_group *world, int rank, int n) {
    uint16_t b, h;
    float one = 1.0f, big = rank == 0 ? 256.0f : 1.0f, bigh = rank == 0 ? 2048.0f : 1.0f;
    (void)one;
    if (n != 4) return;
    b = par__f32_to_bf16(big);
    h = par__f32_to_f16(bigh); /* f16: 2048 + 3 = 2051 -> 2052 (spacing 2 above 2048) */
    CHECK_OK(c->all_reduce(c->user, world, &b, &b, 1, PAR_BF16, PAR_REDUCE_SUM, NULL));
    CHECK_OK(c->all_reduce(c->user, world, &h, &h, 1, PAR_F16, PAR_REDUCE_SUM, NULL));
    CHECK(ref_decode_bf16(b) == 260.0);
    CHECK(ref_decode_f16(h) == 2052.0);
}

static void test_errors(par_ctx *ctx, par_comm_group *g, int n) {
    const par_comm_table *c = par_ctx_comm(ctx);
    float buf[64] = {0};
    int dup[2] = {0, 0}, out[1] = {99}, self = par_ctx_rank(ctx), other = (self + 1) % n;
    int notme[1];
    par_comm_group *bad = NULL;
    notme[0] = other;
    CHECK_ERR(c->all_reduce(c->user, NULL, buf, buf, 1, PAR_F32, PAR_REDUCE_SUM, NULL), PAR_EINVAL, "NULL group");
    CHECK_ERR(c->all_reduce(c->user, g, buf, buf, -1, PAR_F32, PAR_REDUCE_SUM, NULL), PAR_EINVAL, "count -1 is negative");
    CHECK_ERR(c->all_reduce(c->user, g, buf, buf, 1, (par_dtype)17, PAR_REDUCE_SUM, NULL), PAR_EINVAL, "unknown dtype 17");
    CHECK_ERR(c->all_reduce(c->user, g, buf, buf, 1, PAR_F32, (par_reduce_op)9, NULL), PAR_EINVAL, "unknown reduce op 9");
    CHECK_ERR(c->all_reduce(c->user, g, NULL, buf, 1, PAR_F32, PAR_REDUCE_SUM, NULL), PAR_EINVAL, "NULL send buffer");
    CHECK_ERR(c->all_reduce(c->user, g, buf, buf + 1, 4, PAR_F32, PAR_REDUCE_SUM, NULL), PAR_EINVAL, "overlap");
    CHECK_ERR(c->all_gather(c->user, g, buf, NULL, 1, PAR_F32, NULL), PAR_EINVAL, "NULL recv buffer");
    CHECK_ERR(c->all_to_all(c->user, g, buf, buf + 1, 2, PAR_F32, NULL), PAR_EINVAL, "overlap");
    CHECK_ERR(c->broadcast(c->user, g, buf, 1, PAR_F32, n, NULL), PAR_EINVAL, "root");
    CHECK_ERR(c->broadcast(c->user, g, buf, 1, PAR_F32, -1, NULL), PAR_EINVAL, "outside the group");
    CHECK_ERR(c->send(c->user, g, buf, 1, PAR_F32, n, NULL), PAR_EINVAL, "peer");
    CHECK_ERR(c->recv(c->user, g, buf, 1, PAR_F32, -2, NULL), PAR_EINVAL, "peer -2");
    CHECK_ERR(c->wait(c->user, NULL), PAR_EINVAL, "NULL request");
    CHECK_ERR(c->group_create(c->user, dup, 2, &bad), PAR_EINVAL, "listed twice");
    CHECK_ERR(c->group_create(c->user, out, 1, &bad), PAR_EINVAL, "outside the world");
    if (n > 1) CHECK_ERR(c->group_create(c->user, notme, 1, &bad), PAR_EINVAL, "not among");
    /* a receive larger than the matching send is a count mismatch, not silence
       (not with chunks: the receive's second chunk would wait for a message
       that never comes) */
    if (n > 1 && PAR__MPI_MAX_COUNT > 8) {
        int index = par_ctx_rank(ctx), next = (index + 1) % n, prev = (index + n - 1) % n;
        par_request *r = NULL;
        CHECK_OK(c->recv(c->user, g, buf, 8, PAR_F32, prev, &r));
        CHECK_OK(c->send(c->user, g, buf + 32, 5, PAR_F32, next, NULL));
        CHECK_ERR(c->wait(c->user, r), PAR_ECOMM, "expected 8 elements");
    }
}

/* Member 0 arrives late: the others get PAR_ETIMEOUT naming op, group and the
   collective's number; so does member 0, whose peers have left by then. */
static void test_timeout(int n) {
    par_ctx_desc desc;
    par_ctx *ctx = NULL;
    par_comm_group *g = NULL;
    int ranks[64], i, rank;
    float x = 1;
    memset(&desc, 0, sizeof desc);
    desc.timeout_ms = 300;
    desc.mpi_keep_alive = 1; /* the suite goes on after this fault (tests/mpi/crash.sh --stall checks the abort) */
    CHECK_OK(par_ctx_init_mpi(&desc, &ctx));
    if (!ctx) return;
    rank = par_ctx_rank(ctx);
    for (i = 0; i < n; i++) ranks[i] = n - 1 - i;
    CHECK_OK(par_ctx_group_ranks(ctx, ranks, n, &g));
    if (g && n > 1) {
        const par_comm_table *c = par_ctx_comm(ctx);
        if (rank == 0) {
            poll(NULL, 0, 900);
            /* the others have left: the late rank gets no result either */
            CHECK_ERR(c->all_reduce(c->user, g, &x, &x, 1, PAR_F32, PAR_REDUCE_SUM, NULL), PAR_ETIMEOUT,
                      "(rank 0, collective #1 on this group) timed out after 300 ms");
            CHECK(x == 1);
        } else {
            char want[64];
            snprintf(want, sizeof want, "group [%d,", n - 1);
            CHECK_ERR(c->all_reduce(c->user, g, &x, &x, 1, PAR_F32, PAR_REDUCE_SUM, NULL), PAR_ETIMEOUT, "all_reduce");
            CHECK(strstr(par_last_error(), want) != NULL && strstr(par_last_error(), "timed out after 300 ms"));
            CHECK_ERR(c->barrier(c->user, g), PAR_ECOMM, "unusable");
        }
    }
    MPI_Barrier(MPI_COMM_WORLD);
    par_ctx_destroy(ctx);
}

/* Every group of the mesh: the ops of run_group_ops, the single rounding and
   argument errors on the whole world, then the shared suite. alloc may be NULL. */
static void test_ctx_alloc(const char *mesh, int64_t count, const par_allocator *alloc) {
    par_ctx_desc desc;
    par_ctx *ctx = NULL;
    uint32_t mask, all;
    memset(&desc, 0, sizeof desc);
    desc.mesh = mesh;
    if (alloc) desc.allocator = *alloc;
    CHECK_OK(par_ctx_init_mpi(&desc, &ctx));
    if (!ctx) return;
    CHECK_STR(par_ctx_comm(ctx)->name, "mpi");
    all = (1u << par_ctx_mesh(ctx)->ndim) - 1;
    for (mask = 1; mask <= all; mask++) {
        gctx x;
        int ranks[64], i;
        memset(&x, 0, sizeof x);
        x.c = par_ctx_comm(ctx);
        CHECK_OK(par_ctx_group(ctx, mask, &x.g, &x.index, &x.n));
        if (!x.g) continue;
        CHECK_OK(par_mesh_group(par_ctx_mesh(ctx), par_ctx_rank(ctx), mask, ranks, &i));
        for (i = 0; i < x.n; i++) x.world[i] = ranks[i];
        run_group_ops(&x, count);
        run_group_ops(&x, 0);
        if (mask == all) {
            test_single_rounding(x.c, x.g, par_ctx_rank(ctx), x.n);
            test_errors(ctx, x.g, x.n);
        }
    }
    /* the chunked build runs it quick: 7-element chunks make 1M elements slow */
    test_failed_ += comm_suite_run(ctx, PAR__MPI_MAX_COUNT < 100000, &test_passed_);
    par_ctx_destroy(ctx);
}

static void test_ctx(const char *mesh, int64_t count) { test_ctx_alloc(mesh, count, NULL); }

/* the counting allocator: tests/count_alloc.h */

/* A context whose desc carries a counting allocator: every block of the
   backend and the context through it, none through the macros, all freed by
   par_ctx_destroy. Then a partial hook set is refused before MPI is touched. */
static void test_allocator(int size) {
    counter c;
    par_allocator a;
    par_ctx_desc desc;
    par_ctx *ctx = (par_ctx *)&desc;
    long before;
    memset(&c, 0, sizeof c);
    pthread_mutex_init(&c.mu, NULL);
    memset(&a, 0, sizeof a);
    a.user = &c, a.malloc = hook_malloc, a.realloc = hook_realloc, a.free = hook_free;
    before = macro_count();
    /* more than PAR__MPI_MAX_COUNT elements in the chunked build: the chunk
       datatypes' array grows by realloc */
    test_ctx_alloc(size == 4 ? "a=2,b=2" : NULL, PAR__MPI_MAX_COUNT < 100000 ? 2 * PAR__MPI_MAX_COUNT + 3 : 37, &a);
    CHECK_MSG(macro_count() == before, "%ld PARALLEL_MALLOC/REALLOC/FREE calls went around the hooks",
              macro_count() - before);
    CHECK_MSG(c.mallocs > 20, "only %ld allocations went through the hooks", c.mallocs);
    CHECK_MSG(c.reallocs > 0, "no realloc went through the hooks (the request arrays grow by it)");
    CHECK_MSG(c.live == 0, "%ld hooked blocks still allocated after par_ctx_destroy", c.live);
    CHECK_INT(c.frees, c.mallocs);
    CHECK_INT(c.bad, 0);

    memset(&desc, 0, sizeof desc);
    desc.allocator = a;
    desc.allocator.free = NULL;
    before = c.mallocs + c.reallocs + c.frees + c.bad;
    CHECK_ERR(par_ctx_init_mpi(&desc, &ctx), PAR_EINVAL, "par_ctx_desc.allocator: free is NULL");
    CHECK(ctx == NULL);
    CHECK_INT(c.mallocs + c.reallocs + c.frees + c.bad, before);
    pthread_mutex_destroy(&c.mu);
}

int main(int argc, char **argv) {
    int provided = 0, rank = 0, size = 1, counts[2], sums[2] = {0, 0};
    MPI_Init_thread(&argc, &argv, MPI_THREAD_SERIALIZED, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (rank == 0) test_conversions();
    if (size == 4) test_ctx("a=2,b=2", 37);
    test_ctx(NULL, 37);
#if PAR__MPI_MAX_COUNT > 100000
    test_ctx(NULL, 70000); /* past the eager limits: rendezvous protocols */
#else
    test_ctx(NULL, 2 * PAR__MPI_MAX_COUNT + 3); /* three chunks per block */
#endif
    test_allocator(size);
    test_timeout(size);
    counts[0] = test_passed_;
    counts[1] = test_failed_;
    MPI_Reduce(counts, sums, 2, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD);
    MPI_Finalize();
    if (rank != 0) return test_failed_ ? 1 : 0;
    test_passed_ = sums[0];
    test_failed_ = sums[1];
    return TEST_END(TEST_NAME);
}
