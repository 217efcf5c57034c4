/* tests/comm_suite.h - backend-generic tests of a par_comm_table.

   USAGE (stable signature):

       static int comm_suite_run(par_ctx *ctx, int quick, int *passed);
       static int comm_suite_run_opts(par_ctx *ctx, const comm_suite_options *opts, int *passed);

   Call it on EVERY rank of a context (threads, MPI, NCCL or a host table), each
   rank with the same `quick` (and options); it is collective. comm_suite_run is
   comm_suite_run_opts with only `quick` set: the exact checks below, which the
   threads and MPI backends meet. It returns the number of failed
   checks on this rank and adds the passed ones to *passed (may be NULL). Failures
   print "rank R: file:line: ..." to stderr. It keeps its own counters (test.h's
   globals are not thread-safe, and in the threads backend every rank is a thread
   of one process), so the caller sums the per-rank results.

   What it covers, over every group it can make from the context's mesh (each
   non-empty set of mesh dims, so the whole world and each dim of e.g. 2x2x2 or
   2x4; the caller picks the mesh through par_ctx_desc.mesh):
     all_reduce (sum/avg/max), reduce_scatter (sum/avg/max), all_gather,
     all_to_all, broadcast from every root, barrier; every dtype; in place and
     out of place; counts 0, 1, odd, a few thousand and (not quick) 1M elements;
     bf16/f16 rounding to nearest even; different groups in flight at once;
     async overlap (test() progresses an op on its own while this rank computes);
     send/recv rings (nonblocking both ways), pairwise ordering, all pairs;
     argument errors that every backend must catch locally (PAR_EINVAL).
   Expected values are computed here from the rank ids alone. Inputs are small
   integers so every sum is exact; only avg over a group whose size is not a
   power of two is compared within one unit in the last place of the dtype
   (backends may divide or multiply by 1/n). Buffers are allocated through the
   context's compute table, so device backends work (host shadows are copied).
   Uses only par_ctx_* and par_comm_table.

   Options (comm_suite_options) for a backend whose documented float reductions
   differ from the table's "bf16/f16 reduce in f32 and round to nearest even":
   reduce_in_dtype = 1 says floating sums and averages are computed in the dtype
   itself, a rounding per step in an unspecified order, and avg as the
   premultiplied sum sum_m(x_m * (1/n)) -- NCCL (parallel_cuda.cu). Then those
   results (the bf16/f16 rounding sums and every float avg) are compared within
       tol = (n + 1) * eps * s * sum_m |x_m|
   with n the members, s = 1/n for avg and 1 for sum, eps the dtype's machine
   epsilon (2^-7 bf16, 2^-10 f16, 2^-23 f32, 2^-52 f64). To first order, in
   units of eps/2 * s * sum|x|: the n products x_m * (1/n) err by 1 together,
   the rounding of 1/n by 1, each of the n - 1 additions by 1 (its partial sum
   is at most s * sum|x|), the once-rounded expectation by 1: n + 2 units;
   (n + 1) eps = 2n + 2 units leaves room for second-order terms. Max, integer
   results and the suite's float sums of small integers (exact in every dtype)
   stay compared exactly. */
#ifndef PAR_COMM_SUITE_H
#define PAR_COMM_SUITE_H
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "../parallel.h"

typedef struct comm_suite_options {
    int quick;           /* skip the 1M-element sizes */
    int reduce_in_dtype; /* floating sums/avg round in the dtype, avg premultiplied (above) */
} comm_suite_options;

typedef struct cs_state {
    par_ctx *ctx;
    const par_comm_table *c;
    const par_compute_table *m;
    int rank, passed, failed, quick, reduce_in_dtype;
} cs_state;

#define CS_CHECK(S, cond, ...)                                                            \
    do {                                                                                  \
        if (cond) {                                                                       \
            (S)->passed++;                                                                \
        } else {                                                                          \
            (S)->failed++;                                                                \
            if ((S)->failed <= 20) {                                                      \
                char cs_msg_[1024];                                                        \
                snprintf(cs_msg_, sizeof cs_msg_, __VA_ARGS__);                           \
                fprintf(stderr, "rank %d: %s:%d: FAILED: %s -- %s (last error: %s)\n",    \
                        (S)->rank, __FILE__, __LINE__, #cond, cs_msg_, par_last_error()); \
            }                                                                             \
        }                                                                                 \
    } while (0)

#define CS_OK(S, expr) \
    do { par_status cs_st_ = (expr); CS_CHECK(S, cs_st_ == PAR_OK, "got %s", par_status_string(cs_st_)); } while (0)

/* ---- element encoding, written independently of the backends ------------ */

static size_t cs_esz(par_dtype t) { return t == PAR_BF16 || t == PAR_F16 ? 2 : t == PAR_I64 || t == PAR_F64 ? 8 : 4; }

/* x must be exactly representable (small integers and halves are). */
static uint16_t cs_f16_bits(double x) {
    int e;
    double m;
    uint16_t sign = x < 0 ? 0x8000 : 0;
    if (x == 0) return sign;
    m = frexp(fabs(x), &e); /* |x| = m * 2^e, m in [0.5, 1) */
    return (uint16_t)(sign | (uint16_t)((e - 1 + 15) << 10) | (uint16_t)((m * 2 - 1) * 1024));
}
static double cs_f16_value(uint16_t h) {
    int e = (h >> 10) & 31, mant = h & 1023;
    double v = e == 0 ? ldexp(mant, -24) : e == 31 ? (mant ? NAN : INFINITY) : ldexp(1024 + mant, e - 25);
    return h & 0x8000 ? -v : v;
}
static uint16_t cs_bf16_bits(double x) { /* exact values only: the low half of the f32 is zero */
    float f = (float)x;
    uint32_t u;
    memcpy(&u, &f, 4);
    return (uint16_t)(u >> 16);
}
static double cs_bf16_value(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* x rounded to `mant` stored mantissa bits, nearest with ties to even (the
   default rounding mode of nearbyint). */
static double cs_round_mant(double x, int mant) {
    int e;
    if (x == 0 || !isfinite(x)) return x;
    frexp(x, &e);
    return ldexp(nearbyint(ldexp(x, mant + 1 - e)), e - mant - 1);
}
static double cs_round_to(par_dtype t, double x) {
    return t == PAR_BF16 ? cs_round_mant(x, 7) : t == PAR_F16 ? cs_round_mant(x, 10) : t == PAR_F32 ? (double)(float)x : x;
}

static void cs_set(par_dtype t, void *p, int64_t i, double v) {
    switch (t) {
    case PAR_F32: ((float *)p)[i] = (float)v; break;
    case PAR_BF16: ((uint16_t *)p)[i] = cs_bf16_bits(v); break;
    case PAR_F16: ((uint16_t *)p)[i] = cs_f16_bits(v); break;
    case PAR_I32: ((int32_t *)p)[i] = (int32_t)v; break;
    case PAR_I64: ((int64_t *)p)[i] = (int64_t)v; break;
    default: ((double *)p)[i] = v; break;
    }
}
static double cs_get(par_dtype t, const void *p, int64_t i) {
    switch (t) {
    case PAR_F32: return ((const float *)p)[i];
    case PAR_BF16: return cs_bf16_value(((const uint16_t *)p)[i]);
    case PAR_F16: return cs_f16_value(((const uint16_t *)p)[i]);
    case PAR_I32: return ((const int32_t *)p)[i];
    case PAR_I64: return (double)((const int64_t *)p)[i];
    default: return ((const double *)p)[i];
    }
}

/* The input of world rank r at element i: small integers in [-11, 11]. */
static double cs_val(int r, int64_t i, int salt) { return (double)((r * 131 + i * 7 + salt * 13) % 23) - 11; }

/* ---- buffers in the compute table's memory, with host shadows ----------- */

typedef struct cs_buf {
    void *dev;
    unsigned char *host;
    size_t bytes;
} cs_buf;

static int cs_alloc(cs_state *S, cs_buf *b, size_t bytes) {
    b->bytes = bytes;
    b->host = (unsigned char *)calloc(1, bytes ? bytes : 1);
    b->dev = b->host;
    if (b->host && S->m->device_memory && S->m->alloc(S->m->user, bytes ? bytes : 1, PAR_MEM_COMM, &b->dev) != PAR_OK) {
        free(b->host);
        b->host = NULL;
    }
    CS_CHECK(S, b->host != NULL, "allocating %zu bytes", bytes);
    return b->host != NULL;
}
static void cs_free(cs_state *S, cs_buf *b) {
    if (b->host && S->m->device_memory) S->m->free(S->m->user, b->dev);
    free(b->host);
    b->host = NULL;
}
static void cs_put(cs_state *S, cs_buf *b) {
    if (S->m->device_memory && b->bytes) S->m->memcpy(S->m->user, b->dev, b->host, b->bytes, PAR_COPY_HOST_TO_DEVICE);
}
static void cs_fetch(cs_state *S, cs_buf *b) {
    if (S->m->device_memory && b->bytes) S->m->memcpy(S->m->user, b->host, b->dev, b->bytes, PAR_COPY_DEVICE_TO_HOST);
}
static void *cs_at(cs_buf *b, size_t off) { return (unsigned char *)b->dev + off; }

/* A group of the context with its rank list. */
typedef struct cs_group {
    par_comm_group *g;
    int n, idx;
    int ranks[1024];
    char name[64];
} cs_group;

static int cs_group_get(cs_state *S, uint32_t mask, cs_group *G) {
    int i, len = 0;
    par_status st = par_ctx_group(S->ctx, mask, &G->g, &G->idx, &G->n);
    CS_CHECK(S, st == PAR_OK, "par_ctx_group(mask 0x%x)", (unsigned)mask);
    if (st != PAR_OK) return 0;
    st = par_mesh_group(par_ctx_mesh(S->ctx), S->rank, mask, G->ranks, &i);
    CS_CHECK(S, st == PAR_OK && i == G->n && G->ranks[G->idx] == S->rank, "par_mesh_group(mask 0x%x)", (unsigned)mask);
    for (i = 0; i < G->n && len < (int)sizeof G->name - 12; i++)
        len += snprintf(G->name + len, sizeof G->name - (size_t)len, i ? ",%d" : "[%d", G->ranks[i]);
    snprintf(G->name + len, sizeof G->name - (size_t)len, "]");
    return st == PAR_OK;
}

static int cs_pow2(int n) { return (n & (n - 1)) == 0; }

/* Compare one received element with its expectation; 1 if equal (avg over a
   non-power-of-two group: within one unit in the last place; with a tolerance
   tol > 0, see comm_suite_options: within tol). */
static int cs_close(par_dtype t, double got, double want, int loose, double tol) {
    double ulp;
    int e;
    if (got == want) return 1;
    if (tol > 0 && fabs(got - want) <= tol) return 1;
    if (!loose || t == PAR_I32 || t == PAR_I64) return 0;
    frexp(want, &e);
    ulp = ldexp(1.0, e - (t == PAR_BF16 ? 8 : t == PAR_F16 ? 11 : t == PAR_F32 ? 24 : 53));
    return fabs(got - want) <= ulp;
}

/* reduce over the group of the inputs at element i (salt selects the data). */
static double cs_expect_reduce(const cs_group *G, par_dtype t, par_reduce_op op, int64_t i, int salt) {
    double acc = 0, v;
    int m;
    for (m = 0; m < G->n; m++) {
        v = cs_val(G->ranks[m], i, salt);
        acc = m == 0 ? v : op == PAR_REDUCE_MAX ? (v > acc ? v : acc) : acc + v;
    }
    if (op == PAR_REDUCE_AVG) {
        if (t == PAR_I32 || t == PAR_I64) acc = (double)((int64_t)acc / G->n); /* C division truncates */
        else if (t == PAR_F64) acc = acc / G->n;
        else acc = (double)((float)acc / (float)G->n); /* f32 math, then the dtype's rounding */
    }
    return cs_round_to(t, acc);
}

/* Machine epsilon of a floating dtype (0 for integers). */
static double cs_eps(par_dtype t) {
    return t == PAR_BF16 ? ldexp(1.0, -7) : t == PAR_F16 ? ldexp(1.0, -10) : t == PAR_F32 ? ldexp(1.0, -23)
           : t == PAR_F64 ? ldexp(1.0, -52) : 0.0;
}

/* The tolerance of comm_suite_options.reduce_in_dtype for a float sum or avg
   over the group of the members' inputs x_m (abs_sum = sum_m |x_m|); 0 (exact
   checks) without the option, for max and for integers. */
static double cs_reduce_tol(const cs_state *S, const cs_group *G, par_dtype t, par_reduce_op op, double abs_sum) {
    if (!S->reduce_in_dtype || op == PAR_REDUCE_MAX) return 0.0;
    return (G->n + 1) * cs_eps(t) * (op == PAR_REDUCE_AVG ? abs_sum / G->n : abs_sum);
}

/* sum over the group of |input| at element i (salt selects the data). */
static double cs_abs_sum(const cs_group *G, int64_t i, int salt) {
    double s = 0;
    int m;
    for (m = 0; m < G->n; m++) s += fabs(cs_val(G->ranks[m], i, salt));
    return s;
}

/* Count of mismatches, reporting the first; TOL is each element's tolerance
   (0: exact, or 1 ulp when loose). */
#define CS_EXPECT_ALL(S, what, count, GOT, WANT, loose, TOL)                                                    \
    do {                                                                                                        \
        int64_t k_, bad_ = 0, first_ = -1;                                                                      \
        double g_ = 0, w_ = 0;                                                                                  \
        for (k_ = 0; k_ < (count); k_++) {                                                                      \
            double gk_ = (GOT), wk_ = (WANT);                                                                   \
            if (!cs_close(t, gk_, wk_, loose, (TOL))) {                                                         \
                if (!bad_++) first_ = k_, g_ = gk_, w_ = wk_;                                                    \
            }                                                                                                   \
        }                                                                                                       \
        CS_CHECK(S, bad_ == 0, "%s: %lld of %lld wrong, first at %lld: got %g want %g", what, (long long)bad_,   \
                 (long long)(count), (long long)first_, g_, w_);                                                \
    } while (0)

static const par_dtype cs_dtypes[PAR_DTYPE_COUNT] = {PAR_F32, PAR_BF16, PAR_F16, PAR_I32, PAR_I64, PAR_F64};

/* ---- collectives on one group ------------------------------------------- */

static void cs_collectives(cs_state *S, const cs_group *G, par_dtype t, int64_t count, int salt) {
    const par_comm_table *c = S->c;
    size_t es = cs_esz(t), bytes = (size_t)count * es;
    int n = G->n, me = G->idx, r = S->rank, inplace, root;
    int64_t i;
    cs_buf a, b;
    char what[160];
    static const par_reduce_op ops[3] = {PAR_REDUCE_SUM, PAR_REDUCE_AVG, PAR_REDUCE_MAX};
    int oi;
    if (!cs_alloc(S, &a, bytes * (size_t)n)) return;
    if (!cs_alloc(S, &b, bytes * (size_t)n)) {
        cs_free(S, &a);
        return;
    }
    for (oi = 0; oi < 3; oi++)
        for (inplace = 0; inplace < 2; inplace++) {
            par_reduce_op op = ops[oi];
            int loose = op == PAR_REDUCE_AVG && !cs_pow2(n);
            /* avg under reduce_in_dtype: premultiplied, rounded in the dtype (sums stay exact here) */
            int in_dtype = S->reduce_in_dtype && op == PAR_REDUCE_AVG;
            /* all_reduce */
            for (i = 0; i < count; i++) cs_set(t, a.host, i, cs_val(r, i, salt + oi));
            cs_put(S, &a);
            snprintf(what, sizeof what, "all_reduce %s %s n=%lld group %s %s", par_reduce_op_name(op), par_dtype_name(t),
                     (long long)count, G->name, inplace ? "in place" : "out of place");
            CS_OK(S, c->all_reduce(c->user, G->g, a.dev, inplace ? a.dev : b.dev, count, t, op, NULL));
            cs_fetch(S, inplace ? &a : &b);
            CS_EXPECT_ALL(S, what, count, cs_get(t, (inplace ? a : b).host, k_),
                          cs_expect_reduce(G, t, op, k_, salt + oi), loose,
                          in_dtype ? cs_reduce_tol(S, G, t, op, cs_abs_sum(G, k_, salt + oi)) : 0.0);
            /* reduce_scatter: block j of member m's send is element j*count+k of its data */
            for (i = 0; i < count * n; i++) cs_set(t, a.host, i, cs_val(r, i, salt + oi));
            cs_put(S, &a);
            snprintf(what, sizeof what, "reduce_scatter %s %s n=%lld group %s %s", par_reduce_op_name(op),
                     par_dtype_name(t), (long long)count, G->name, inplace ? "in place" : "out of place");
            CS_OK(S, c->reduce_scatter(c->user, G->g, a.dev, inplace ? cs_at(&a, bytes * (size_t)me) : b.dev, count, t,
                                       op, NULL));
            cs_fetch(S, inplace ? &a : &b);
            CS_EXPECT_ALL(S, what, count, cs_get(t, inplace ? a.host + bytes * (size_t)me : b.host, k_),
                          cs_expect_reduce(G, t, op, (int64_t)me * count + k_, salt + oi), loose,
                          in_dtype ? cs_reduce_tol(S, G, t, op, cs_abs_sum(G, (int64_t)me * count + k_, salt + oi))
                                   : 0.0);
        }
    for (inplace = 0; inplace < 2; inplace++) {
        /* all_gather: recv block m = member m's data */
        unsigned char *src = inplace ? b.host + bytes * (size_t)me : a.host;
        memset(b.host, 0xA5, b.bytes);
        for (i = 0; i < count; i++) cs_set(t, src, i, cs_val(r, i, salt + 5));
        cs_put(S, &a);
        cs_put(S, &b);
        snprintf(what, sizeof what, "all_gather %s n=%lld group %s %s", par_dtype_name(t), (long long)count, G->name,
                 inplace ? "in place" : "out of place");
        CS_OK(S, c->all_gather(c->user, G->g, inplace ? cs_at(&b, bytes * (size_t)me) : a.dev, b.dev, count, t, NULL));
        cs_fetch(S, &b);
        CS_EXPECT_ALL(S, what, count * n, cs_get(t, b.host, k_), cs_val(G->ranks[k_ / (count ? count : 1)],
                                                                     k_ % (count ? count : 1), salt + 5), 0, 0.0);
    }
    /* all_to_all: member m's block j holds cs_val(m, j*count + k) */
    for (i = 0; i < count * n; i++) cs_set(t, a.host, i, cs_val(r, i, salt + 6));
    cs_put(S, &a);
    snprintf(what, sizeof what, "all_to_all %s n=%lld group %s", par_dtype_name(t), (long long)count, G->name);
    CS_OK(S, c->all_to_all(c->user, G->g, a.dev, b.dev, count, t, NULL));
    cs_fetch(S, &b);
    CS_EXPECT_ALL(S, what, count * n, cs_get(t, b.host, k_),
                  cs_val(G->ranks[k_ / (count ? count : 1)], (int64_t)me * count + k_ % (count ? count : 1), salt + 6), 0, 0.0);
    /* broadcast from every root */
    for (root = 0; root < n; root++) {
        for (i = 0; i < count; i++) cs_set(t, a.host, i, me == root ? cs_val(r, i, salt + 7 + root) : -99);
        cs_put(S, &a);
        snprintf(what, sizeof what, "broadcast root %d %s n=%lld group %s", root, par_dtype_name(t), (long long)count,
                 G->name);
        CS_OK(S, c->broadcast(c->user, G->g, a.dev, count, t, root, NULL));
        cs_fetch(S, &a);
        CS_EXPECT_ALL(S, what, count, cs_get(t, a.host, k_), cs_val(G->ranks[root], k_, salt + 7 + root), 0, 0.0);
    }
    CS_OK(S, c->barrier(c->user, G->g));
    cs_free(S, &a);
    cs_free(S, &b);
}

/* bf16/f16 sums that need rounding: member 0 holds base + 2*(k % 64), the others
   1 or 0, so the exact f32 sum often lies halfway between two neighbours. */
static double cs_rounding_sum(const cs_group *G, double base, int64_t k) { /* exact; every input >= 0 */
    double s = base + 2 * (double)(k % 64);
    int m;
    for (m = 1; m < G->n; m++) s += (double)((k + m) % 2);
    return s;
}
static double cs_rounding_expect(const cs_group *G, par_dtype t, double base, int64_t k) {
    return cs_round_to(t, cs_rounding_sum(G, base, k));
}

static void cs_rounding(cs_state *S, const cs_group *G) {
    const par_comm_table *c = S->c;
    const int64_t count = 256;
    int ti;
    int64_t k;
    char what[120];
    for (ti = 0; ti < 2; ti++) {
        par_dtype t = ti ? PAR_F16 : PAR_BF16;
        double base = ti ? 2048 : 256; /* where the spacing is 2 */
        cs_buf a;
        if (!cs_alloc(S, &a, (size_t)count * 2)) return;
        for (k = 0; k < count; k++)
            cs_set(t, a.host, k, G->idx == 0 ? base + 2 * (double)(k % 64) : (double)((k + G->idx) % 2));
        cs_put(S, &a);
        CS_OK(S, c->all_reduce(c->user, G->g, a.dev, a.dev, count, t, PAR_REDUCE_SUM, NULL));
        cs_fetch(S, &a);
        snprintf(what, sizeof what, "%s sum rounding on group %s", par_dtype_name(t), G->name);
        /* Rounded once from the exact sum, as an f32 accumulation does; under
           reduce_in_dtype every step rounds, so only the tolerance holds. */
        CS_EXPECT_ALL(S, what, count, cs_get(t, a.host, k_), cs_rounding_expect(G, t, base, k_), 0,
                      cs_reduce_tol(S, G, t, PAR_REDUCE_SUM, cs_rounding_sum(G, base, k_)));
        cs_free(S, &a);
    }
}

/* Async overlap: an all_reduce of a large buffer progresses while this rank
   computes and only polls test(); then two groups' async ops in flight at once
   and a blocking op behind them. */
static void cs_async(cs_state *S, const cs_group *G, const cs_group *H) {
    const par_comm_table *c = S->c;
    const par_dtype t = PAR_F32;
    int64_t count = S->quick ? (1 << 15) : (1 << 20), i, polls = 0;
    volatile double sink = 0;
    int done = 0;
    par_request *req = NULL, *req2 = NULL;
    cs_buf a, b, d;
    par_status st = PAR_OK;
    if (!cs_alloc(S, &a, (size_t)count * 4)) return;
    if (!cs_alloc(S, &b, (size_t)count * 4) || !cs_alloc(S, &d, (size_t)count * 4 * (size_t)H->n)) return;
    for (i = 0; i < count; i++) cs_set(t, a.host, i, cs_val(S->rank, i, 40));
    cs_put(S, &a);
    CS_OK(S, c->all_reduce(c->user, G->g, a.dev, b.dev, count, t, PAR_REDUCE_SUM, &req));
    CS_CHECK(S, req != NULL, "async all_reduce gave no request");
    while (req && !done) {
        for (i = 0; i < 20000; i++) sink = sink + (double)i * 0.5; /* the computation being overlapped */
        st = c->test(c->user, req, &done);
        if (st != PAR_OK) break;
        polls++;
        if (polls > 100000000) break;
    }
    CS_CHECK(S, st == PAR_OK && done, "test() never completed the async all_reduce (%lld polls, %s)", (long long)polls,
             par_status_string(st));
    cs_fetch(S, &b);
    CS_EXPECT_ALL(S, "async all_reduce after test()", count, cs_get(t, b.host, k_),
                  cs_expect_reduce(G, t, PAR_REDUCE_SUM, k_, 40), 0, 0.0);
    /* Two groups at once (G and H, e.g. a tp and a dp group), then a blocking op
       issued while both are pending. */
    for (i = 0; i < count; i++) cs_set(t, a.host, i, cs_val(S->rank, i, 41));
    cs_put(S, &a);
    req = req2 = NULL;
    CS_OK(S, c->all_reduce(c->user, G->g, a.dev, b.dev, count, t, PAR_REDUCE_MAX, &req));
    CS_OK(S, c->all_gather(c->user, H->g, a.dev, d.dev, count, t, &req2));
    CS_OK(S, c->barrier(c->user, H->g));
    if (req2) CS_OK(S, c->wait(c->user, req2));
    if (req) CS_OK(S, c->wait(c->user, req));
    cs_fetch(S, &b);
    cs_fetch(S, &d);
    CS_EXPECT_ALL(S, "async all_reduce max beside another group", count, cs_get(t, b.host, k_),
                  cs_expect_reduce(G, t, PAR_REDUCE_MAX, k_, 41), 0, 0.0);
    CS_EXPECT_ALL(S, "async all_gather beside another group", count * H->n, cs_get(t, d.host, k_),
                  cs_val(H->ranks[k_ / count], k_ % count, 41), 0, 0.0);
    cs_free(S, &a);
    cs_free(S, &b);
    cs_free(S, &d);
}

/* Point to point on group G. */
static void cs_p2p(cs_state *S, const cs_group *G) {
    const par_comm_table *c = S->c;
    const par_dtype t = PAR_I32;
    const int64_t count = 1000;
    int n = G->n, me = G->idx, next = (me + 1) % n, prev = (me + n - 1) % n, m, j;
    par_request *rs = NULL, *rr = NULL, **reqs;
    cs_buf a, b, all;
    int64_t i;
    char what[120];
    if (!cs_alloc(S, &a, (size_t)count * 4 * 3) || !cs_alloc(S, &b, (size_t)count * 4 * 3) ||
        !cs_alloc(S, &all, (size_t)count * 4 * (size_t)n))
        return;
    /* Ring, nonblocking both ways, recv posted first on odd members. */
    for (i = 0; i < count; i++) cs_set(t, a.host, i, cs_val(S->rank, i, 50));
    cs_put(S, &a);
    if (me % 2) CS_OK(S, c->recv(c->user, G->g, b.dev, count, t, prev, &rr));
    CS_OK(S, c->send(c->user, G->g, a.dev, count, t, next, &rs));
    if (!(me % 2)) CS_OK(S, c->recv(c->user, G->g, b.dev, count, t, prev, &rr));
    if (rr) CS_OK(S, c->wait(c->user, rr));
    if (rs) CS_OK(S, c->wait(c->user, rs));
    cs_fetch(S, &b);
    snprintf(what, sizeof what, "ring recv from member %d on group %s", prev, G->name);
    CS_EXPECT_ALL(S, what, count, cs_get(t, b.host, k_), cs_val(G->ranks[prev], k_, 50), 0, 0.0);
    /* Blocking ring shift with an even/odd order (no deadlock when n is even). */
    if (n % 2 == 0) {
        for (i = 0; i < count; i++) cs_set(t, a.host, i, cs_val(S->rank, i, 51));
        cs_put(S, &a);
        if (me % 2 == 0) {
            CS_OK(S, c->send(c->user, G->g, a.dev, count, t, next, NULL));
            CS_OK(S, c->recv(c->user, G->g, b.dev, count, t, prev, NULL));
        } else {
            CS_OK(S, c->recv(c->user, G->g, b.dev, count, t, prev, NULL));
            CS_OK(S, c->send(c->user, G->g, a.dev, count, t, next, NULL));
        }
        cs_fetch(S, &b);
        CS_EXPECT_ALL(S, "blocking ring", count, cs_get(t, b.host, k_), cs_val(G->ranks[prev], k_, 51), 0, 0.0);
    }
    /* Ordering: member 0 sends three messages of different lengths to member
       n-1, which receives them in order. */
    if (n > 1 && (me == 0 || me == n - 1)) {
        par_request *q[3] = {NULL, NULL, NULL};
        for (i = 0; i < 3 * count; i++) cs_set(t, a.host, i, cs_val(S->rank, i, 52));
        cs_put(S, &a);
        for (j = 0; j < 3; j++) {
            int64_t len = count - 100 * j, off = (int64_t)j * count;
            if (me == 0) CS_OK(S, c->send(c->user, G->g, cs_at(&a, (size_t)off * 4), len, t, n - 1, &q[j]));
            else CS_OK(S, c->recv(c->user, G->g, cs_at(&b, (size_t)off * 4), len, t, 0, NULL));
        }
        for (j = 0; j < 3; j++)
            if (q[j]) CS_OK(S, c->wait(c->user, q[j]));
        if (me == n - 1) {
            cs_fetch(S, &b);
            for (j = 0; j < 3; j++) {
                int64_t len = count - 100 * j, off = (int64_t)j * count;
                CS_EXPECT_ALL(S, "ordered messages", len, cs_get(t, b.host, off + k_), cs_val(G->ranks[0], off + k_, 52), 0, 0.0);
            }
        }
    }
    /* All pairs: every member receives a block from every member (itself too),
       recvs posted before the sends. */
    reqs = (par_request **)calloc((size_t)(2 * n), sizeof *reqs);
    if (reqs) {
        for (i = 0; i < count; i++) cs_set(t, a.host, i, cs_val(S->rank, i, 53 + me));
        cs_put(S, &a);
        for (m = 0; m < n; m++) CS_OK(S, c->recv(c->user, G->g, cs_at(&all, (size_t)(m * count * 4)), count, t, m, &reqs[m]));
        for (m = 0; m < n; m++) {
            /* member m gets cs_val(me's rank, i, 53 + m)... sent from a fresh fill per target */
            CS_OK(S, c->send(c->user, G->g, a.dev, count, t, m, &reqs[n + m]));
        }
        for (m = 0; m < 2 * n; m++)
            if (reqs[m]) CS_OK(S, c->wait(c->user, reqs[m]));
        cs_fetch(S, &all);
        for (m = 0; m < n; m++) {
            snprintf(what, sizeof what, "all-pairs block from member %d on group %s", m, G->name);
            CS_EXPECT_ALL(S, what, count, cs_get(t, all.host, (int64_t)m * count + k_), cs_val(G->ranks[m], k_, 53 + m), 0, 0.0);
        }
        free(reqs);
    }
    cs_free(S, &a);
    cs_free(S, &b);
    cs_free(S, &all);
}

/* Bad arguments every backend must reject before communicating. */
static void cs_errors(cs_state *S, const cs_group *G) {
    const par_comm_table *c = S->c;
    float x[4] = {0};
    par_request *req = NULL;
    CS_CHECK(S, c->all_reduce(c->user, G->g, NULL, x, 4, PAR_F32, PAR_REDUCE_SUM, NULL) == PAR_EINVAL, "NULL send");
    CS_CHECK(S, c->all_reduce(c->user, G->g, x, x, -1, PAR_F32, PAR_REDUCE_SUM, NULL) == PAR_EINVAL, "negative count");
    CS_CHECK(S, strstr(par_last_error(), "-1") != NULL, "message names the count");
    CS_CHECK(S, c->all_reduce(c->user, G->g, x, x, 4, (par_dtype)99, PAR_REDUCE_SUM, NULL) == PAR_EINVAL, "bad dtype");
    CS_CHECK(S, c->all_reduce(c->user, G->g, x, x, 4, PAR_F32, (par_reduce_op)7, &req) == PAR_EINVAL, "bad op");
    CS_CHECK(S, c->all_gather(c->user, G->g, x, NULL, 1, PAR_F32, NULL) == PAR_EINVAL, "NULL recv");
    CS_CHECK(S, c->broadcast(c->user, G->g, x, 4, PAR_F32, G->n, NULL) == PAR_EINVAL, "root out of range");
    CS_CHECK(S, c->broadcast(c->user, G->g, x, 4, PAR_F32, -1, NULL) == PAR_EINVAL, "negative root");
    CS_CHECK(S, c->send(c->user, G->g, x, 4, PAR_F32, G->n, NULL) == PAR_EINVAL, "peer out of range");
    CS_CHECK(S, c->recv(c->user, G->g, x, 4, PAR_F32, -1, NULL) == PAR_EINVAL, "negative peer");
    CS_CHECK(S, c->recv(c->user, G->g, NULL, 4, PAR_F32, 0, NULL) == PAR_EINVAL, "NULL recv buffer");
    CS_CHECK(S, c->all_reduce(c->user, NULL, x, x, 4, PAR_F32, PAR_REDUCE_SUM, NULL) == PAR_EINVAL, "NULL group");
    /* Buffers may overlap only in the in-place forms (par_comm_check_args). */
    {
        float y[4 * 1024 + 8];
        const int other = (G->idx + 1) % G->n; /* a block that is not this member's */
        CS_CHECK(S, c->all_reduce(c->user, G->g, y, y + 1, 4, PAR_F32, PAR_REDUCE_SUM, NULL) == PAR_EINVAL,
                 "all_reduce with send and recv overlapping but not equal");
        CS_CHECK(S, strstr(par_last_error(), "all_reduce on group") && strstr(par_last_error(), "overlap"),
                 "message names the op, the group and the rule: %s", par_last_error());
        CS_CHECK(S, c->all_to_all(c->user, G->g, y, y + 1, 2, PAR_F32, NULL) == PAR_EINVAL, "all_to_all overlapping");
        if (G->n > 1) {
            CS_CHECK(S, c->all_gather(c->user, G->g, y + 4 * other, y, 4, PAR_F32, NULL) == PAR_EINVAL,
                     "all_gather from another member's block of recv");
            CS_CHECK(S, strstr(par_last_error(), "recv + index*count") != NULL, "all_gather rule: %s", par_last_error());
            CS_CHECK(S, c->reduce_scatter(c->user, G->g, y, y + 4 * other, 4, PAR_F32, PAR_REDUCE_SUM, NULL) == PAR_EINVAL,
                     "reduce_scatter into another member's block of send");
        }
    }
    /* A rank list with this rank twice is refused before any communication. */
    {
        par_comm_group *bad = NULL;
        const int twice[2] = {S->rank, S->rank};
        CS_CHECK(S, c->group_create(c->user, twice, 2, &bad) == PAR_EINVAL && bad == NULL, "group_create with a rank twice");
    }
    /* The group still works after the rejected calls (in the compute table's
       memory: device memory for NCCL; the calls above fail before any access). */
    {
        cs_buf xb;
        if (cs_alloc(S, &xb, sizeof(float))) {
            cs_set(PAR_F32, xb.host, 0, (double)S->rank);
            cs_put(S, &xb);
            CS_OK(S, c->all_reduce(c->user, G->g, xb.dev, xb.dev, 1, PAR_F32, PAR_REDUCE_MAX, NULL));
            cs_fetch(S, &xb);
            CS_CHECK(S, cs_get(PAR_F32, xb.host, 0) == (double)G->ranks[G->n - 1] || G->n == 0,
                     "max of ranks after errors: %g", cs_get(PAR_F32, xb.host, 0));
            cs_free(S, &xb);
        }
    }
}

static int comm_suite_run_opts(par_ctx *ctx, const comm_suite_options *opts, int *passed);

/* Unused where a runner calls only comm_suite_run_opts. */
static PAR__MAYBE_UNUSED int comm_suite_run(par_ctx *ctx, int quick, int *passed) {
    comm_suite_options o;
    memset(&o, 0, sizeof o);
    o.quick = quick;
    return comm_suite_run_opts(ctx, &o, passed);
}

static int comm_suite_run_opts(par_ctx *ctx, const comm_suite_options *opts, int *passed) {
    cs_state S;
    const int quick = opts ? opts->quick : 0;
    const par_mesh *mesh = par_ctx_mesh(ctx);
    uint32_t mask, all = (1u << mesh->ndim) - 1;
    int ti, si;
    cs_group *G = (cs_group *)malloc(sizeof *G), *W = (cs_group *)malloc(sizeof *W), *H = (cs_group *)malloc(sizeof *H);
    const int64_t sizes[5] = {0, 1, 7, 1003, 1 << 20};
    memset(&S, 0, sizeof S);
    S.ctx = ctx;
    S.c = par_ctx_comm(ctx);
    S.m = par_ctx_compute(ctx);
    S.rank = par_ctx_rank(ctx);
    S.quick = quick;
    S.reduce_in_dtype = opts ? opts->reduce_in_dtype : 0;
    if (!G || !W || !H) {
        free(G), free(W), free(H);
        return 1;
    }
    if (!cs_group_get(&S, all, W)) goto out;
    /* Every set of mesh dims; all groups of one set run at the same time. */
    for (mask = 1; mask <= all; mask++) {
        if (!cs_group_get(&S, mask, G)) goto out;
        for (ti = 0; ti < PAR_DTYPE_COUNT; ti++)
            for (si = 0; si < 4; si++) cs_collectives(&S, G, cs_dtypes[ti], sizes[si] + (si == 3 ? mask : 0), (int)mask);
        cs_rounding(&S, G);
        cs_p2p(&S, G);
    }
    /* Large: f32 on the world (and a 1M i64/bf16 reduce when not quick). */
    cs_collectives(&S, W, PAR_F32, quick ? 65537 : sizes[4], 90);
    if (!quick) {
        cs_collectives(&S, W, PAR_BF16, sizes[4] + 1, 91);
        cs_collectives(&S, W, PAR_I64, sizes[4] / 4 + 3, 92);
    }
    /* Async: the world beside the group of the leftmost mesh dim (device dim ndim-1). */
    if (!cs_group_get(&S, 1u << (mesh->ndim - 1), H)) goto out;
    cs_async(&S, W, H);
    cs_errors(&S, W);
    CS_OK(&S, S.c->barrier(S.c->user, W->g));
out:
    free(G);
    free(W);
    free(H);
    if (passed) *passed += S.passed;
    return S.failed;
}

#endif
