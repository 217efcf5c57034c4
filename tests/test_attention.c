/* tests/test_attention.c - the CPU flash attention (attention_fwd / attention_bwd /
   attention_merge of the CPU compute table, >>compute-cpu) against a naive double
   reference with a materialized softmax, and finite differences in double.

   Covered: causal and non-causal; GQA ratios 1, 2, 4 and MQA; q/k blocks of
   different lengths with position offsets and zigzag positions; lengths that are
   not tile multiples and span several tiles (PAR__ATTN_BQ queries x PAR__ATTN_BK
   keys, 128 x 256); batch > 1; custom scale; rows that see no key (lse -inf, o 0, zero
   gradients); accumulate = 0 / 1; splitting the keys into 2-4 blocks and merging
   the partial (o, lse) = attention over all keys, and per-block backward with the
   global o/lse summing to the full gradients; workspace memory of fwd+bwd that
   does not grow with S (counting allocator); argument errors.

   TOLERANCES. Inputs are random in [-1, 1] and exactly representable in double, so
   the double reference is exact to ~1e-15 for the same inputs; all error is the
   kernel's float32 arithmetic (unit roundoff u = 6e-8). A score is a dot of length
   head_dim <= 64 (|s| <= ~8 after scaling): error <= ~64u|s| ~ 3e-6 worst case,
   ~1e-7 typical; exp/log add a few u relative. o is a convex combination of v rows
   (|o| <= 1), lse = O(10). We accept |got - ref| <= TOL * (1 + |ref|) with
   TOL_FWD = 2e-5: ~10x above the typical observed error, yet a wrong mask, a wrong
   GQA head or a dropped key block moves values by 1e-3 .. 1. Gradients sum up to
   ~300 keys x 4 GQA heads of products and go through dS = P (dP - D) (cancellation),
   so TOL_BWD = 1e-4, measured against (1 + max|ref| of the tensor) so tiny entries
   of a large-gradient tensor are not judged relatively. Finite differences are
   central in double with h = 1e-5: truncation ~h^2 ~ 1e-10, far below TOL_BWD; the
   double analytic reference is checked against them at 1e-7. */
#define PARALLEL_IMPLEMENTATION
/* Counting allocator (all three macros, as the header requires): current and peak
   bytes the library holds, to show the attention workspace does not grow with S. */
#include <stdlib.h>
#include <stdint.h>
#include <string.h>
static long long test_cur_bytes, test_peak_bytes;
static void *test_malloc(size_t n) {
    size_t *p = (size_t *)malloc(n + 16);
    if (!p) return NULL;
    p[0] = n;
    test_cur_bytes += (long long)n;
    if (test_cur_bytes > test_peak_bytes) test_peak_bytes = test_cur_bytes;
    return (char *)p + 16;
}
static void test_free(void *q) {
    if (!q) return;
    q = (char *)q - 16;
    test_cur_bytes -= (long long)((size_t *)q)[0];
    free(q);
}
static void *test_realloc(void *q, size_t n) {
    void *r = test_malloc(n);
    if (r && q) {
        size_t old = ((size_t *)(void *)((char *)q - 16))[0];
        memcpy(r, q, old < n ? old : n);
        test_free(q);
    }
    return r;
}
#define PARALLEL_MALLOC(sz) test_malloc(sz)
#define PARALLEL_REALLOC(p, sz) test_realloc(p, sz)
#define PARALLEL_FREE(p) test_free(p)
#include "test.h"
#include "half.h"

#include <math.h>

#define TOL_FWD 2e-5
#define TOL_BWD 1e-4

/* The kernels under test, reached through the CPU compute table. */
static par_compute_table tbl;
static par_status att_fwd(const par_attn_desc *d, const float *q, const float *k, const float *v, float *o,
                          float *lse) {
    return tbl.attention_fwd(tbl.user, d, q, k, v, o, lse);
}
static par_status att_bwd(const par_attn_desc *d, const float *q, const float *k, const float *v, const float *o,
                          const float *lse, const float *do_, float *dq, float *dk, float *dv, int accumulate) {
    return tbl.attention_bwd(tbl.user, d, q, k, v, o, lse, do_, dq, dk, dv, accumulate);
}
static par_status att_merge(const par_attn_desc *d, float *o, float *lse, const float *o_b, const float *lse_b) {
    return tbl.attention_merge(tbl.user, d, o, lse, o_b, lse_b);
}

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static double urand(void) { /* [-1, 1) */
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (double)(rng_state >> 11) / 9007199254740992.0 * 2.0 - 1.0;
}
static float *frand(int64_t n) {
    float *p = (float *)malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
    int64_t i;
    for (i = 0; i < n; i++) p[i] = (float)urand();
    return p;
}
static float *ffill(int64_t n, float x) {
    float *p = (float *)malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
    int64_t i;
    for (i = 0; i < n; i++) p[i] = x;
    return p;
}
static double *dalloc(int64_t n) { return (double *)calloc((size_t)(n > 0 ? n : 1), sizeof(double)); }

typedef struct cfg {
    const char *name;
    int batch, q_heads, kv_heads, head_dim;
    int64_t q_len, k_len;
    int causal;
    float scale;
    int64_t q_off, k_off; /* positions = off + i, unless zigzag */
    int zigzag;           /* positions [0..n/2) then [P-n/2..P) with P = 4n */
} cfg;

static int64_t *make_pos(int64_t n, int64_t off, int zigzag) {
    int64_t *p = (int64_t *)malloc((size_t)(n > 0 ? n : 1) * sizeof(int64_t)), i;
    for (i = 0; i < n; i++) p[i] = zigzag ? (i < n / 2 ? i : 4 * n - (n - i)) : off + i;
    return p;
}

/* Naive reference in double. o [b, sq, hq, d], lse [b, hq, sq]. If do_ given, also
   the analytic gradients. Inputs as double arrays. */
static void ref_attention(const par_attn_desc *d, const double *q, const double *k, const double *v,
                          double *o, double *lse, const double *do_, double *dq, double *dk, double *dv) {
    const int D = d->head_dim, group = d->q_heads / d->kv_heads;
    const double scale = d->scale != 0.0f ? (double)d->scale : 1.0 / sqrt((double)D);
    double *s = dalloc(d->k_len), *dp = dalloc(d->k_len);
    int64_t b, i, j;
    int h, c;
    if (dq) {
        memset(dq, 0, sizeof(double) * (size_t)(d->batch * d->q_len * d->q_heads * D));
        memset(dk, 0, sizeof(double) * (size_t)(d->batch * d->k_len * d->kv_heads * D));
        memset(dv, 0, sizeof(double) * (size_t)(d->batch * d->k_len * d->kv_heads * D));
    }
    for (b = 0; b < d->batch; b++)
        for (h = 0; h < d->q_heads; h++)
            for (i = 0; i < d->q_len; i++) {
                const int g = h / group;
                const int64_t qi = ((b * d->q_len + i) * d->q_heads + h) * D;
                const int64_t qp = d->q_pos ? d->q_pos[i] : i;
                double mx = -INFINITY, sum = 0, Di = 0;
                for (j = 0; j < d->k_len; j++) {
                    const int64_t kj = ((b * d->k_len + j) * d->kv_heads + g) * D;
                    const int64_t kp = d->k_pos ? d->k_pos[j] : j;
                    double acc = 0;
                    for (c = 0; c < D; c++) acc += q[qi + c] * k[kj + c];
                    s[j] = (d->causal && kp > qp) ? -INFINITY : acc * scale;
                    if (s[j] > mx) mx = s[j];
                }
                for (c = 0; c < D; c++) o[qi + c] = 0;
                if (mx == -INFINITY) {
                    lse[(b * d->q_heads + h) * d->q_len + i] = -INFINITY;
                    continue;
                }
                for (j = 0; j < d->k_len; j++) sum += (s[j] = exp(s[j] - mx));
                for (j = 0; j < d->k_len; j++) {
                    const int64_t kj = ((b * d->k_len + j) * d->kv_heads + g) * D;
                    s[j] /= sum;
                    for (c = 0; c < D; c++) o[qi + c] += s[j] * v[kj + c];
                }
                lse[(b * d->q_heads + h) * d->q_len + i] = mx + log(sum);
                if (!dq) continue;
                for (j = 0; j < d->k_len; j++) {
                    const int64_t kj = ((b * d->k_len + j) * d->kv_heads + g) * D;
                    dp[j] = 0;
                    for (c = 0; c < D; c++) dp[j] += do_[qi + c] * v[kj + c];
                    Di += s[j] * dp[j];
                }
                for (j = 0; j < d->k_len; j++) {
                    const int64_t kj = ((b * d->k_len + j) * d->kv_heads + g) * D;
                    const double ds = s[j] * (dp[j] - Di) * scale;
                    for (c = 0; c < D; c++) {
                        dv[kj + c] += s[j] * do_[qi + c];
                        dq[qi + c] += ds * k[kj + c];
                        dk[kj + c] += ds * q[qi + c];
                    }
                }
            }
    free(s);
    free(dp);
}

static double *to_double(const float *x, int64_t n) {
    double *p = dalloc(n);
    int64_t i;
    for (i = 0; i < n; i++) p[i] = x[i];
    return p;
}

/* max over i of |got - ref| / (1 + |ref|)  (relative-ish), or with `global` scale
   |got - ref| / (1 + max|ref|). Infinities must match exactly. */
static double max_err(const float *got, const double *ref, int64_t n, int global) {
    double e = 0, big = 0;
    int64_t i;
    for (i = 0; i < n; i++)
        if (fabs(ref[i]) > big && isfinite(ref[i])) big = fabs(ref[i]);
    for (i = 0; i < n; i++) {
        double ei;
        if (isinf(ref[i]) || isinf(got[i])) {
            ei = ((double)got[i] == ref[i]) ? 0 : INFINITY;
        } else {
            ei = fabs((double)got[i] - ref[i]) / (1.0 + (global ? big : fabs(ref[i])));
        }
        if (!(ei <= e)) e = ei; /* NaN propagates */
    }
    return e;
}

static void fill_desc(const cfg *t, par_attn_desc *d, int64_t **qp, int64_t **kp) {
    memset(d, 0, sizeof *d);
    d->batch = t->batch;
    d->q_heads = t->q_heads;
    d->kv_heads = t->kv_heads;
    d->head_dim = t->head_dim;
    d->q_len = t->q_len;
    d->k_len = t->k_len;
    d->causal = t->causal;
    d->scale = t->scale;
    *qp = *kp = NULL;
    if (t->q_off || t->zigzag) *qp = make_pos(t->q_len, t->q_off, t->zigzag);
    if (t->k_off || t->zigzag) *kp = make_pos(t->k_len, t->k_off, t->zigzag);
    d->q_pos = *qp;
    d->k_pos = *kp;
}

/* Forward + backward vs the double reference; then the keys split into `blocks`
   blocks: forward each + merge == full, and per-block backward with the global o/lse
   (accumulate=1 after the first) == full gradients. */
static void run_cfg(const cfg *t, int blocks) {
    par_attn_desc d;
    int64_t *qp, *kp;
    int64_t nq, nk, nl, i, b, j, h;
    float *q, *k, *v, *o, *lse, *dO, *dq, *dk, *dv;
    double *Q, *K, *V, *Oref, *Lref, *DO, *DQ, *DK, *DV;
    int masked_rows = 0;
    fill_desc(t, &d, &qp, &kp);
    nq = (int64_t)t->batch * t->q_len * t->q_heads * t->head_dim;
    nk = (int64_t)t->batch * t->k_len * t->kv_heads * t->head_dim;
    nl = (int64_t)t->batch * t->q_heads * t->q_len;
    q = frand(nq);
    k = frand(nk);
    v = frand(nk);
    dO = frand(nq);
    o = ffill(nq, 7.0f); /* garbage: the kernel must overwrite */
    lse = ffill(nl, 7.0f);
    dq = ffill(nq, 1e30f);
    dk = ffill(nk, 1e30f);
    dv = ffill(nk, 1e30f);
    Q = to_double(q, nq);
    K = to_double(k, nk);
    V = to_double(v, nk);
    DO = to_double(dO, nq);
    Oref = dalloc(nq);
    Lref = dalloc(nl);
    DQ = dalloc(nq);
    DK = dalloc(nk);
    DV = dalloc(nk);
    ref_attention(&d, Q, K, V, Oref, Lref, DO, DQ, DK, DV);
    for (i = 0; i < nl; i++) masked_rows += isinf(Lref[i]) ? 1 : 0;

    CHECK_OK(att_fwd(&d, q, k, v, o, lse));
    {
        double eo = max_err(o, Oref, nq, 0), el = max_err(lse, Lref, nl, 0);
        CHECK_MSG(eo <= TOL_FWD, "%s: o err %.3g", t->name, eo);
        CHECK_MSG(el <= TOL_FWD, "%s: lse err %.3g", t->name, el);
    }
    if (masked_rows) { /* fully masked rows: lse exactly -inf and o exactly 0 */
        int ok = 1;
        for (b = 0; b < t->batch; b++)
            for (h = 0; h < t->q_heads; h++)
                for (i = 0; i < t->q_len; i++)
                    if (isinf(Lref[(b * t->q_heads + h) * t->q_len + i])) {
                        int c;
                        if (lse[(b * t->q_heads + h) * t->q_len + i] != -INFINITY) ok = 0;
                        for (c = 0; c < t->head_dim; c++) {
                            const int64_t at = ((b * t->q_len + i) * t->q_heads + h) * t->head_dim + c;
                            if (o[at] != 0.0f) ok = 0;
                        }
                    }
        CHECK_MSG(ok, "%s: masked rows (%d) not lse=-inf, o=0", t->name, masked_rows);
    }

    CHECK_OK(att_bwd(&d, q, k, v, o, lse, dO, dq, dk, dv, 0));
    {
        double e1 = max_err(dq, DQ, nq, 1), e2 = max_err(dk, DK, nk, 1), e3 = max_err(dv, DV, nk, 1);
        CHECK_MSG(e1 <= TOL_BWD, "%s: dq err %.3g", t->name, e1);
        CHECK_MSG(e2 <= TOL_BWD, "%s: dk err %.3g", t->name, e2);
        CHECK_MSG(e3 <= TOL_BWD, "%s: dv err %.3g", t->name, e3);
    }
    if (masked_rows) { /* rows with no visible key get exactly zero dq */
        int ok = 1, c;
        for (b = 0; b < t->batch; b++)
            for (h = 0; h < t->q_heads; h++)
                for (i = 0; i < t->q_len; i++)
                    if (isinf(Lref[(b * t->q_heads + h) * t->q_len + i]))
                        for (c = 0; c < t->head_dim; c++)
                            if (dq[((b * t->q_len + i) * t->q_heads + h) * t->head_dim + c] != 0.0f) ok = 0;
        CHECK_MSG(ok, "%s: masked rows have nonzero dq", t->name);
    }

    /* accumulate=1 on top of the result adds the gradient once more (not bit-exact:
       partial sums then start from the old value, so compare (new - old) to the ref) */
    {
        float *dq2 = (float *)malloc((size_t)nq * sizeof(float)), *dk2 = (float *)malloc((size_t)nk * sizeof(float));
        float *dv2 = (float *)malloc((size_t)nk * sizeof(float));
        double e1, e2, e3;
        memcpy(dq2, dq, (size_t)nq * sizeof(float));
        memcpy(dk2, dk, (size_t)nk * sizeof(float));
        memcpy(dv2, dv, (size_t)nk * sizeof(float));
        CHECK_OK(att_bwd(&d, q, k, v, o, lse, dO, dq2, dk2, dv2, 1));
        for (i = 0; i < nq; i++) dq2[i] -= dq[i];
        for (i = 0; i < nk; i++) dk2[i] -= dk[i], dv2[i] -= dv[i];
        e1 = max_err(dq2, DQ, nq, 1), e2 = max_err(dk2, DK, nk, 1), e3 = max_err(dv2, DV, nk, 1);
        CHECK_MSG(e1 <= TOL_BWD && e2 <= TOL_BWD && e3 <= TOL_BWD, "%s: accumulate=1 did not add (%.3g %.3g %.3g)",
                  t->name, e1, e2, e3);
        free(dq2);
        free(dk2);
        free(dv2);
    }

    /* Split the keys into `blocks` uneven blocks, forward each, merge from (0, -inf). */
    if (t->k_len >= blocks && blocks >= 2) {
        int64_t cut[5];
        int blk;
        const int D = t->head_dim;
        float *om = ffill(nq, 0.0f), *lm = ffill(nl, -INFINITY); /* merged, shaped as o and lse */
        float *dqb = ffill(nq, 0.0f);
        double dkmax = 0, dvmax = 0;
        for (i = 0; i < nk; i++) {
            if (fabs(DK[i]) > dkmax) dkmax = fabs(DK[i]);
            if (fabs(DV[i]) > dvmax) dvmax = fabs(DV[i]);
        }
        /* uneven cuts: block sizes grow 1 : 2 : 3 : 4 (scaled to k_len) */
        {
            int64_t wsum = (int64_t)blocks * (blocks + 1) / 2, acc = 0;
            cut[0] = 0;
            for (blk = 0; blk < blocks; blk++) {
                acc += blk + 1;
                cut[blk + 1] = t->k_len * acc / wsum;
                if (cut[blk + 1] <= cut[blk]) cut[blk + 1] = cut[blk] + 1;
            }
            cut[blocks] = t->k_len;
        }
        for (blk = 0; blk < blocks; blk++) {
            const int64_t n = cut[blk + 1] - cut[blk];
            const int64_t nkb = (int64_t)t->batch * n * t->kv_heads * D;
            float *kb = (float *)malloc((size_t)nkb * sizeof(float)), *vb = (float *)malloc((size_t)nkb * sizeof(float));
            float *ob = ffill(nq, 3.0f), *lb = ffill(nl, 3.0f);
            float *dkk = frand(nkb), *dvv = frand(nkb); /* pre-existing values, accumulate=1 adds */
            float *dk0 = (float *)malloc((size_t)nkb * sizeof(float)), *dv0 = (float *)malloc((size_t)nkb * sizeof(float));
            par_attn_desc db = d;
            const int64_t row = (int64_t)t->kv_heads * D;
            int64_t *pp = NULL;
            int ok = 1;
            memcpy(dk0, dkk, (size_t)nkb * sizeof(float));
            memcpy(dv0, dvv, (size_t)nkb * sizeof(float));
            for (b = 0; b < t->batch; b++) {
                memcpy(kb + b * n * row, k + (b * t->k_len + cut[blk]) * row, (size_t)(n * row) * sizeof(float));
                memcpy(vb + b * n * row, v + (b * t->k_len + cut[blk]) * row, (size_t)(n * row) * sizeof(float));
            }
            db.k_len = n;
            /* NULL positions would mean 0..n-1 of THIS block: give the global ones */
            db.k_pos = kp ? kp + cut[blk] : (pp = make_pos(n, cut[blk], 0));
            CHECK_OK(att_fwd(&db, q, kb, vb, ob, lb));
            /* global o and lse; block 0 overwrites (accumulate=0), later ones add */
            CHECK_OK(att_bwd(&db, q, kb, vb, o, lse, dO, dqb, dkk, dvv, blk > 0));
            if (blk == 0) { /* accumulate=0 discarded the pre-fill */
                memset(dk0, 0, (size_t)nkb * sizeof(float));
                memset(dv0, 0, (size_t)nkb * sizeof(float));
            }
            free(pp);
            CHECK_OK(att_merge(&d, om, lm, ob, lb));
            /* dk/dv of this block (minus what was there) equals the full slice */
            for (b = 0; b < t->batch; b++)
                for (j = 0; j < n * row; j++) {
                    const int64_t at = (b * t->k_len + cut[blk]) * row + j, bt = b * n * row + j;
                    /* same global-scaled criterion as max_err; +1 for the pre-fill's rounding */
                    if (fabs((double)(dkk[bt] - dk0[bt]) - DK[at]) > TOL_BWD * (2 + dkmax)) ok = 0;
                    if (fabs((double)(dvv[bt] - dv0[bt]) - DV[at]) > TOL_BWD * (2 + dvmax)) ok = 0;
                }
            CHECK_MSG(ok, "%s: block %d/%d dk/dv (accumulate) differ from full backward", t->name, blk, blocks);
            free(kb);
            free(vb);
            free(ob);
            free(lb);
            free(dkk);
            free(dvv);
            free(dk0);
            free(dv0);
        }
        {
            double eo = max_err(om, Oref, nq, 0), el = max_err(lm, Lref, nl, 0), eq = max_err(dqb, DQ, nq, 1);
            CHECK_MSG(eo <= TOL_FWD, "%s: merged o err %.3g (%d blocks)", t->name, eo, blocks);
            CHECK_MSG(el <= TOL_FWD, "%s: merged lse err %.3g (%d blocks)", t->name, el, blocks);
            CHECK_MSG(eq <= TOL_BWD, "%s: blocked dq err %.3g (%d blocks)", t->name, eq, blocks);
        }
        free(om);
        free(lm);
        free(dqb);
    }
    printf("  %-30s done (masked rows %d, %d key blocks)\n", t->name, masked_rows, blocks);
    free(q), free(k), free(v), free(o), free(lse), free(dO), free(dq), free(dk), free(dv);
    free(Q), free(K), free(V), free(Oref), free(Lref), free(DO), free(DQ), free(DK), free(DV);
    free(qp), free(kp);
}

/* Finite differences of loss = sum(o * w) in double (reference forward) against the
   kernel's f32 gradients and the double analytic reference. */
static void run_fd(const cfg *t) {
    par_attn_desc d;
    int64_t *qp, *kp, nq, nk, nl, i;
    float *q, *k, *v, *w, *o, *lse, *dq, *dk, *dv;
    double *Q, *K, *V, *W, *O, *L, *DQ, *DK, *DV;
    const double hstep = 1e-5;
    double worst_kernel = 0, worst_ref = 0;
    int which;
    fill_desc(t, &d, &qp, &kp);
    nq = (int64_t)t->batch * t->q_len * t->q_heads * t->head_dim;
    nk = (int64_t)t->batch * t->k_len * t->kv_heads * t->head_dim;
    nl = (int64_t)t->batch * t->q_heads * t->q_len;
    q = frand(nq), k = frand(nk), v = frand(nk), w = frand(nq);
    o = ffill(nq, 0), lse = ffill(nl, 0), dq = ffill(nq, 0), dk = ffill(nk, 0), dv = ffill(nk, 0);
    Q = to_double(q, nq), K = to_double(k, nk), V = to_double(v, nk), W = to_double(w, nq);
    O = dalloc(nq), L = dalloc(nl), DQ = dalloc(nq), DK = dalloc(nk), DV = dalloc(nk);
    CHECK_OK(att_fwd(&d, q, k, v, o, lse));
    CHECK_OK(att_bwd(&d, q, k, v, o, lse, w, dq, dk, dv, 0));
    ref_attention(&d, Q, K, V, O, L, W, DQ, DK, DV);
    for (which = 0; which < 3; which++) {
        double *X = which == 0 ? Q : which == 1 ? K : V;
        const double *R = which == 0 ? DQ : which == 1 ? DK : DV;
        const float *G = which == 0 ? dq : which == 1 ? dk : dv;
        const int64_t n = which == 0 ? nq : nk;
        for (i = 0; i < n; i++) {
            const double x0 = X[i];
            double lp = 0, lm = 0, fd;
            int64_t r;
            X[i] = x0 + hstep;
            ref_attention(&d, Q, K, V, O, L, NULL, NULL, NULL, NULL);
            for (r = 0; r < nq; r++) lp += O[r] * W[r];
            X[i] = x0 - hstep;
            ref_attention(&d, Q, K, V, O, L, NULL, NULL, NULL, NULL);
            for (r = 0; r < nq; r++) lm += O[r] * W[r];
            X[i] = x0;
            fd = (lp - lm) / (2 * hstep);
            if (fabs(G[i] - fd) / (1 + fabs(fd)) > worst_kernel) worst_kernel = fabs(G[i] - fd) / (1 + fabs(fd));
            if (fabs(R[i] - fd) / (1 + fabs(fd)) > worst_ref) worst_ref = fabs(R[i] - fd) / (1 + fabs(fd));
        }
    }
    CHECK_MSG(worst_kernel <= TOL_BWD, "%s: kernel grad vs finite diff err %.3g", t->name, worst_kernel);
    CHECK_MSG(worst_ref <= 1e-7, "%s: reference grad vs finite diff err %.3g", t->name, worst_ref);
    printf("  %-30s kernel %.2g, reference %.2g\n", t->name, worst_kernel, worst_ref);
    free(q), free(k), free(v), free(w), free(o), free(lse), free(dq), free(dk), free(dv);
    free(Q), free(K), free(V), free(W), free(O), free(L), free(DQ), free(DK), free(DV);
    free(qp), free(kp);
}

/* Merge on the desc layout: o [b, s, h, d], lse [b, h, s]. With 2 heads and 3 rows
   the two layouts differ, so a row-order mix-up moves values. Cases per (h, i):
   both -inf stays (0, -inf); lse -inf takes the block; block -inf leaves it; equal
   lse averages; general case vs the closed form in double. */
static void test_merge_layout(void) {
    par_attn_desc d;
    float o[3 * 2 * 2], l[2 * 3], ob[3 * 2 * 2], lb[2 * 3];
    double want_o[3 * 2 * 2], want_l[2 * 3];
    int i, h, c, ok = 1;
    memset(&d, 0, sizeof d);
    d.batch = 1, d.q_heads = 2, d.kv_heads = 1, d.head_dim = 2, d.q_len = 3, d.k_len = 1;
    for (i = 0; i < 12; i++) o[i] = (float)(i + 1), ob[i] = (float)(20 - i);
    /* lse[h][i] / lse_b[h][i] */
    l[0] = -INFINITY, lb[0] = -INFINITY; /* h0 i0: both empty */
    l[1] = -INFINITY, lb[1] = 1.5f;      /* h0 i1: takes the block */
    l[2] = 0.25f, lb[2] = -INFINITY;     /* h0 i2: unchanged */
    l[3] = 0.5f, lb[3] = 0.5f;           /* h1 i0: average */
    l[4] = 2.0f, lb[4] = -1.0f;          /* h1 i1 */
    l[5] = -3.0f, lb[5] = 4.0f;          /* h1 i2 */
    o[0] = o[1] = 0.0f;                  /* an empty row holds o = 0 */
    for (h = 0; h < 2; h++)
        for (i = 0; i < 3; i++) {
            const double la = l[h * 3 + i], lbb = lb[h * 3 + i];
            const int at = (i * 2 + h) * 2;
            double wa, wb, ln;
            if (isinf(la) && isinf(lbb)) ln = -INFINITY, wa = 1, wb = 0;
            else if (isinf(la)) ln = lbb, wa = 0, wb = 1;
            else if (isinf(lbb)) ln = la, wa = 1, wb = 0;
            else ln = log(exp(la) + exp(lbb)), wa = exp(la - ln), wb = exp(lbb - ln);
            want_l[h * 3 + i] = ln;
            for (c = 0; c < 2; c++) want_o[at + c] = wa * o[at + c] + wb * ob[at + c];
        }
    CHECK_OK(att_merge(&d, o, l, ob, lb));
    for (i = 0; i < 6; i++)
        if (isinf(want_l[i]) ? l[i] != -INFINITY : fabs(l[i] - want_l[i]) > 1e-6 * (1 + fabs(want_l[i]))) ok = 0;
    for (i = 0; i < 12; i++)
        if (fabs(o[i] - want_o[i]) > 1e-6 * (1 + fabs(want_o[i]))) ok = 0;
    CHECK_MSG(ok, "merge on the [b,s,h,d] / [b,h,s] layout differs from the closed form");
    CHECK(o[0] == 0.0f && o[1] == 0.0f && l[0] == -INFINITY);
}

/* Peak bytes the library allocates during fwd + bwd (counting allocator). */
static long long attn_peak(int64_t S, int causal, double *err) {
    par_attn_desc d;
    const int H = 2, D = 64;
    const int64_t n = S * H * D;
    float *q = frand(n), *k = frand(n), *v = frand(n), *dO = frand(n), *o = ffill(n, 0), *lse = ffill(S * H, 0);
    float *dq = ffill(n, 0), *dk = ffill(n, 0), *dv = ffill(n, 0);
    long long base;
    memset(&d, 0, sizeof d);
    d.batch = 1, d.q_heads = H, d.kv_heads = H, d.head_dim = D, d.q_len = S, d.k_len = S, d.causal = causal;
    base = test_cur_bytes;
    test_peak_bytes = test_cur_bytes;
    CHECK_OK(att_fwd(&d, q, k, v, o, lse));
    CHECK_OK(att_bwd(&d, q, k, v, o, lse, dO, dq, dk, dv, 0));
    CHECK_MSG(test_cur_bytes == base, "attention leaked %lld bytes", test_cur_bytes - base);
    { /* sanity of the outputs: finite (a broken tiling at this size shows as NaN) */
        int64_t i;
        *err = 0;
        for (i = 0; i < n; i++)
            if (!isfinite(o[i]) || !isfinite(dq[i]) || !isfinite(dk[i]) || !isfinite(dv[i])) *err = INFINITY;
    }
    free(q), free(k), free(v), free(dO), free(o), free(lse), free(dq), free(dk), free(dv);
    return test_peak_bytes - base;
}

/* Workspace must not grow with S: the peak at 4S must stay below twice the peak at
   S (a linear workspace would give 4x, a materialized S x S score matrix 16x), and
   below the size of ONE S x S f32 score matrix at 4S. */
static void test_memory(void) {
    int causal;
    for (causal = 0; causal < 2; causal++) {
        double e1, e4;
        const int64_t S = 256;
        long long p1 = attn_peak(S, causal, &e1), p4 = attn_peak(4 * S, causal, &e4);
        CHECK_MSG(p1 > 0, "no workspace seen: is the counting allocator wired?");
        CHECK_MSG(p4 <= 2 * p1, "causal %d: workspace grew from %lld bytes at S=%lld to %lld at 4S", causal, p1,
                  (long long)S, p4);
        CHECK_MSG(p4 < (long long)(4 * S) * (4 * S) * 4, "causal %d: workspace %lld bytes >= one S x S matrix",
                  causal, p4);
        CHECK(e1 == 0 && e4 == 0);
        printf("  workspace fwd+bwd causal=%d: S=%lld %lld bytes, S=%lld %lld bytes\n", causal, (long long)S, p1,
               (long long)(4 * S), p4);
    }
}

/* The private exp row kernel (portable and, where the CPU has it, AVX-512) against
   exp() in double: <= 4 ulp relative over the softmax range, exact 0 below -87 and
   for -inf, NaN kept, and the returned sum; over the first w columns only (a short
   key tile's width), the rest of the row left as it was. */
static void check_exp_row(const char *name, float (*fn)(float *, float, int), int w) {
    float x[PAR__ATTN_BK];
    double worst = 0;
    int j, ok = 1, round, beyond = 1;
    for (round = 0; round < 200; round++) {
        const float sub = (float)(urand() * 4.0);
        float got;
        for (j = 0; j < PAR__ATTN_BK; j++) x[j] = (float)(urand() * 45.0 - 44.0) + sub; /* t in [-89, 1] */
        x[3] = -INFINITY;
        x[5] = NAN;
        x[7] = sub - 87.5f;
        x[9] = sub;
        {
            float t[PAR__ATTN_BK];
            for (j = 0; j < PAR__ATTN_BK; j++) t[j] = x[j] - sub;
            got = fn(x, sub, w);
            for (j = w; j < PAR__ATTN_BK; j++) beyond &= x[j] == t[j] + sub;
            for (j = 0; j < w; j++) {
                if (j == 5) {
                    ok &= x[j] != x[j];
                    continue;
                }
                if (t[j] < -87.0f) {
                    ok &= x[j] == 0.0f;
                    continue;
                }
                {
                    const double want = exp((double)t[j]), e = fabs(x[j] - want) / want;
                    if (e > worst) worst = e;
                }
            }
        }
        ok &= got != got; /* the NaN entry makes the sum NaN */
        x[5] = 0.0f;
    }
    CHECK_MSG(ok, "%s w=%d: special values (-inf, < -87, NaN) wrong", name, w);
    CHECK_MSG(beyond, "%s w=%d: columns past the width were written", name, w);
    CHECK_MSG(worst <= 4 * 5.96e-8, "%s w=%d: exp relative error %.3g > 4 ulp", name, w, worst);
    { /* sum of a row without NaN equals the sum of what it wrote */
        double s2 = 0;
        float got;
        for (j = 0; j < PAR__ATTN_BK; j++) x[j] = (float)(urand() * 10.0 - 10.0);
        got = fn(x, 0.0f, w);
        for (j = 0; j < w; j++) s2 += x[j];
        CHECK_MSG(fabs(got - s2) <= 1e-6 * s2, "%s w=%d: returned sum %.9g, entries sum to %.9g", name, w, got, s2);
    }
    printf("  exp row %-22s w=%3d max rel err %.2g\n", name, w, worst);
}

static void test_exp(void) {
    check_exp_row("portable", par__attn_exp_sum_c, PAR__ATTN_BK);
    check_exp_row("portable", par__attn_exp_sum_c, 48);
#ifdef PAR__ATTN_AVX512
    if (par__attn_isa()) check_exp_row("avx512", par__attn_exp_sum_avx512, PAR__ATTN_BK);
    if (par__attn_isa()) check_exp_row("avx512", par__attn_exp_sum_avx512, 48);
#endif
}

static void test_errors(void) {
    par_attn_desc d;
    float x[64] = {0}, y[64];
    memset(&d, 0, sizeof d);
    d.batch = 1, d.q_heads = 3, d.kv_heads = 2, d.head_dim = 4, d.q_len = 2, d.k_len = 2;
    CHECK_ERR(att_fwd(&d, x, x, x, y, y + 32), PAR_EINVAL, "q_heads 3 is not a multiple of kv_heads 2");
    CHECK_ERR(att_bwd(&d, x, x, x, x, x, x, y, y, y, 0), PAR_EINVAL, "not a multiple of kv_heads");
    CHECK_ERR(att_merge(&d, y, y, x, x), PAR_EINVAL, "not a multiple of kv_heads");
    d.q_heads = 2;
    CHECK_ERR(att_fwd(NULL, x, x, x, y, y), PAR_EINVAL, "attention_fwd: desc is NULL");
    CHECK_ERR(att_fwd(&d, x, NULL, x, y, y), PAR_EINVAL, "attention_fwd: k is NULL");
    CHECK_ERR(att_fwd(&d, x, x, x, NULL, y), PAR_EINVAL, "attention_fwd: o is NULL");
    CHECK_ERR(att_fwd(&d, x, x, x, y, NULL), PAR_EINVAL, "attention_fwd: lse is NULL");
    CHECK_ERR(att_bwd(&d, x, x, x, x, x, x, y, NULL, y, 0), PAR_EINVAL, "attention_bwd: dk is NULL");
    CHECK_ERR(att_bwd(&d, x, x, x, x, x, NULL, y, y, y, 0), PAR_EINVAL, "attention_bwd: do_ is NULL");
    CHECK_ERR(att_bwd(&d, x, x, x, x, NULL, x, y, y, y, 1), PAR_EINVAL, "attention_bwd: lse is NULL");
    CHECK_ERR(att_merge(&d, y, y, NULL, x), PAR_EINVAL, "attention_merge: o_b is NULL");
    CHECK_ERR(att_merge(NULL, y, y, x, x), PAR_EINVAL, "attention_merge: desc is NULL");
    d.dtype = PAR_I64;
    CHECK_ERR(att_fwd(&d, x, x, x, y, y), PAR_EUNSUPPORTED, "dtype i64");
    CHECK_ERR(att_bwd(&d, x, x, x, x, x, x, y, y, y, 0), PAR_EUNSUPPORTED, "(f32, bf16 or f16)");
    CHECK_ERR(att_merge(&d, y, y, x, x), PAR_EUNSUPPORTED, "dtype i64");
    d.dtype = PAR_BF16; /* a 16-bit call with a NULL still names it */
    CHECK_ERR(att_fwd(&d, x, NULL, x, y, y), PAR_EINVAL, "attention_fwd: k is NULL");
    CHECK_ERR(att_bwd(&d, x, x, x, x, x, NULL, y, y, y, 0), PAR_EINVAL, "attention_bwd: do_ is NULL");
    d.dtype = PAR_F32;
    d.head_dim = 0;
    CHECK_ERR(att_fwd(&d, x, x, x, y, y), PAR_EINVAL, "head_dim 0");
    d.head_dim = 4, d.batch = -2;
    CHECK_ERR(att_bwd(&d, x, x, x, x, x, x, y, y, y, 0), PAR_EINVAL, "batch -2");
    d.batch = 1, d.q_len = -1;
    CHECK_ERR(att_fwd(&d, x, x, x, y, y), PAR_EINVAL, "q_len -1");
    d.q_len = 2, d.scale = INFINITY;
    CHECK_ERR(att_fwd(&d, x, x, x, y, y), PAR_EINVAL, "scale inf is not finite");
    d.scale = NAN;
    CHECK_ERR(att_bwd(&d, x, x, x, x, x, x, y, y, y, 0), PAR_EINVAL, "not finite");
    d.scale = 0, d.k_len = INT64_MAX / 2;
    CHECK_ERR(att_fwd(&d, x, x, x, y, y), PAR_EINVAL, "overflow int64");
    /* k_len = 0: every row sees no key; k and v may be NULL (no elements) */
    d.q_len = 2, d.k_len = 0;
    {
        float o[16], l[4], g[16];
        int i, ok = 1;
        for (i = 0; i < 16; i++) o[i] = 5, g[i] = 5;
        CHECK_OK(att_fwd(&d, x, NULL, NULL, o, l));
        for (i = 0; i < 16; i++) ok &= o[i] == 0.0f;
        for (i = 0; i < 4; i++) ok &= l[i] == -INFINITY;
        CHECK_MSG(ok, "k_len 0 should give o = 0, lse = -inf");
        CHECK_OK(att_bwd(&d, x, NULL, NULL, o, l, x, g, NULL, NULL, 0));
        for (i = 0; i < 16; i++) ok &= g[i] == 0.0f;
        CHECK_MSG(ok, "k_len 0 should give dq = 0");
    }
    /* q_len = 0: nothing to do, NULL q/o/lse allowed */
    d.q_len = 0, d.k_len = 2;
    CHECK_OK(att_fwd(&d, NULL, x, x, NULL, NULL));
}

/* A table with 3 threads splits attention by sequence over its threads; every
   sequence runs the same code, so the result must equal threads = 1 bitwise
   (causal with GQA, 5 sequences of 70 queries and keys, accumulate on). */
/* bf16 and f16 calls: the f32 kernel on the tensors widened, the outputs
   rounded once (to nearest even) - so exactly the f32 call on the decoded
   inputs, rounded here with a rounding written from the formats; the
   backward with accumulate = 1 adds into the widened old gradients; lse is
   f32 either way; the staging is workspace while the call runs, returned
   after it, and within scratch_bound's count for the call's sizes. */
static uint16_t to16(par_dtype t, float f) { return half_round(t, f); }
static float from16(par_dtype t, uint16_t h) { return (float)half_value(t, h); }

static void test_16bit(void) {
    static const par_dtype types[2] = {PAR_BF16, PAR_F16};
    static const struct { int b, hq, hkv, d; int64_t sq, sk; int causal; } shapes[] = {
        {1, 4, 2, 16, 65, 65, 1}, {2, 2, 1, 8, 37, 70, 0}, {1, 2, 2, 32, 300, 300, 1}};
    int ti;
    size_t si;
    for (ti = 0; ti < 2; ti++)
        for (si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
            const par_dtype t = types[ti];
            par_attn_desc d;
            int64_t nq, nk, i, j;
            float *q, *k, *v, *o, *lse, *o16f, *lse16, *dq, *dk, *dv, *g;
            uint16_t *q16, *k16, *v16, *o16, *do16, *dq16, *dk16, *dv16;
            int ok = 1, acc;
            memset(&d, 0, sizeof d);
            d.batch = shapes[si].b, d.q_heads = shapes[si].hq, d.kv_heads = shapes[si].hkv, d.head_dim = shapes[si].d;
            d.q_len = shapes[si].sq, d.k_len = shapes[si].sk, d.causal = shapes[si].causal;
            nq = d.batch * d.q_len * d.q_heads * d.head_dim, nk = d.batch * d.k_len * d.kv_heads * d.head_dim;
            q = frand(nq), k = frand(nk), v = frand(nk), g = frand(nq);
            q16 = (uint16_t *)malloc((size_t)nq * 2), k16 = (uint16_t *)malloc((size_t)nk * 2);
            v16 = (uint16_t *)malloc((size_t)nk * 2), o16 = (uint16_t *)malloc((size_t)nq * 2);
            do16 = (uint16_t *)malloc((size_t)nq * 2), dq16 = (uint16_t *)malloc((size_t)nq * 2);
            dk16 = (uint16_t *)malloc((size_t)nk * 2), dv16 = (uint16_t *)malloc((size_t)nk * 2);
            for (i = 0; i < nq; i++) q16[i] = to16(t, q[i]), q[i] = from16(t, q16[i]), do16[i] = to16(t, g[i]), g[i] = from16(t, do16[i]);
            for (i = 0; i < nk; i++) k16[i] = to16(t, k[i]), k[i] = from16(t, k16[i]), v16[i] = to16(t, v[i]), v[i] = from16(t, v16[i]);
            o = ffill(nq, 0), lse = ffill(d.batch * d.q_heads * d.q_len, 0), lse16 = ffill(d.batch * d.q_heads * d.q_len, 0);
            o16f = ffill(nq, 0), dq = ffill(nq, 0), dk = ffill(nk, 0), dv = ffill(nk, 0);
            d.dtype = PAR_F32;
            CHECK_OK(att_fwd(&d, q, k, v, o, lse));
            d.dtype = t;
            CHECK_OK(tbl.attention_fwd(tbl.user, &d, q16, k16, v16, o16, lse16));
            for (i = 0; i < nq; i++) ok &= o16[i] == to16(t, o[i]);
            ok &= memcmp(lse, lse16, (size_t)(d.batch * d.q_heads * d.q_len) * 4) == 0;
            CHECK_MSG(ok, "%s forward %d: o or lse differ from the f32 call rounded", par_dtype_name(t), (int)si);
            /* backward on the 16-bit o the forward gave (widened for the f32 call) */
            for (i = 0; i < nq; i++) o16f[i] = from16(t, o16[i]);
            for (acc = 0; acc < 2; acc++) {
                for (i = 0; i < nq; i++) dq16[i] = to16(t, acc ? 0.25f : 0.0f), dq[i] = acc ? 0.25f : 0.0f;
                for (j = 0; j < nk; j++) dk16[j] = dv16[j] = to16(t, acc ? -0.5f : 0.0f), dk[j] = dv[j] = acc ? -0.5f : 0.0f;
                d.dtype = PAR_F32;
                CHECK_OK(att_bwd(&d, q, k, v, o16f, lse, g, dq, dk, dv, acc));
                d.dtype = t;
                CHECK_OK(tbl.attention_bwd(tbl.user, &d, q16, k16, v16, o16, lse16, do16, dq16, dk16, dv16, acc));
                for (i = 0, ok = 1; i < nq; i++) ok &= dq16[i] == to16(t, dq[i]);
                for (j = 0; j < nk; j++) ok &= dk16[j] == to16(t, dk[j]) && dv16[j] == to16(t, dv[j]);
                CHECK_MSG(ok, "%s backward %d (accumulate %d): gradients differ from the f32 call rounded",
                          par_dtype_name(t), (int)si, acc);
            }
            if (si == 0) { /* on a fresh table: the staging is workspace while the call runs, none after, and
                              scratch_bound counts it for the call's sizes */
                par_compute_table t2;
                par_cpu_desc cd;
                par_mem_report r;
                par_scratch_query sq;
                size_t bound = 0;
                memset(&cd, 0, sizeof cd);
                cd.threads = 1;
                CHECK_OK(par_compute_cpu(&cd, &t2));
                CHECK_OK(t2.attention_bwd(t2.user, &d, q16, k16, v16, o16, lse16, do16, dq16, dk16, dv16, 0));
                memset(&sq, 0, sizeof sq);
                sq.attn_type = t, sq.attn_q_elems = nq, sq.attn_kv_elems = nk;
                CHECK_OK(t2.scratch_bound(t2.user, &sq, &bound));
                CHECK_OK(t2.memory_report(t2.user, &r));
                CHECK_MSG(r.current[PAR_MEM_WORKSPACE] == 0 && r.peak[PAR_MEM_WORKSPACE] >= (4 * nq + 4 * nk) * 4 &&
                              (size_t)r.peak[PAR_MEM_WORKSPACE] <= bound,
                          "staging: now %lld, peak %lld, bound %zu", (long long)r.current[PAR_MEM_WORKSPACE],
                          (long long)r.peak[PAR_MEM_WORKSPACE], bound);
                sq.attn_q_elems = -1;
                CHECK_ERR(t2.scratch_bound(t2.user, &sq, &bound), PAR_EINVAL, "attn_q_elems -1");
                t2.destroy(t2.user);
            }
            free(q), free(k), free(v), free(g), free(o), free(lse), free(lse16), free(o16f), free(dq), free(dk), free(dv);
            free(q16), free(k16), free(v16), free(o16), free(do16), free(dq16), free(dk16), free(dv16);
        }
}

static void test_threads(void) {
    par_compute_table t3;
    par_cpu_desc cd;
    par_attn_desc d;
    const int64_t nq = 5 * 70 * 4 * 16, nk = 5 * 70 * 2 * 16, nl = 5 * 4 * 70;
    float *q = frand(nq), *k = frand(nk), *v = frand(nk), *dout = frand(nq);
    float *o1 = ffill(nq, 0), *o3 = ffill(nq, 0), *l1 = ffill(nl, 0), *l3 = ffill(nl, 0);
    float *dq1 = ffill(nq, 1), *dq3 = ffill(nq, 1), *dk1 = ffill(nk, 1), *dk3 = ffill(nk, 1), *dv1 = ffill(nk, 1),
          *dv3 = ffill(nk, 1);
    memset(&cd, 0, sizeof cd);
    memset(&d, 0, sizeof d);
    cd.threads = 3;
    CHECK_OK(par_compute_cpu(&cd, &t3));
    d.batch = 5, d.q_heads = 4, d.kv_heads = 2, d.head_dim = 16, d.q_len = d.k_len = 70, d.causal = 1, d.dtype = PAR_F32;
    CHECK_OK(tbl.attention_fwd(tbl.user, &d, q, k, v, o1, l1));
    CHECK_OK(t3.attention_fwd(t3.user, &d, q, k, v, o3, l3));
    CHECK_MSG(memcmp(o1, o3, (size_t)nq * 4) == 0 && memcmp(l1, l3, (size_t)nl * 4) == 0, "fwd threads 3 != 1");
    CHECK_OK(tbl.attention_bwd(tbl.user, &d, q, k, v, o1, l1, dout, dq1, dk1, dv1, 1));
    CHECK_OK(t3.attention_bwd(t3.user, &d, q, k, v, o1, l1, dout, dq3, dk3, dv3, 1));
    CHECK_MSG(memcmp(dq1, dq3, (size_t)nq * 4) == 0 && memcmp(dk1, dk3, (size_t)nk * 4) == 0 &&
                  memcmp(dv1, dv3, (size_t)nk * 4) == 0,
              "bwd threads 3 != 1");
    /* an argument error is reported by name, not lost in a kernel thread */
    CHECK_ERR(t3.attention_fwd(t3.user, &d, q, NULL, v, o3, l3), PAR_EINVAL, "k");
    t3.destroy(t3.user);
    free(q), free(k), free(v), free(dout), free(o1), free(o3), free(l1), free(l3);
    free(dq1), free(dq3), free(dk1), free(dk3), free(dv1), free(dv3);
}

int main(void) {
    static const cfg cases[] = {
        /* name                 b  hq hkv  D  sq   sk  causal scale qoff koff zig */
        {"mha noncausal 37", 2, 4, 4, 32, 37, 37, 0, 0, 0, 0, 0},
        {"mha causal 37", 2, 4, 4, 32, 37, 37, 1, 0, 0, 0, 0},
        {"gqa2 causal 65", 1, 4, 2, 16, 65, 65, 1, 0, 0, 0, 0},
        {"gqa2 noncausal 65", 1, 4, 2, 16, 65, 65, 0, 0, 0, 0, 0},
        {"gqa4 causal 130 d64", 1, 8, 2, 64, 130, 130, 1, 0, 0, 0, 0},
        {"gqa4 noncausal 130", 2, 8, 2, 24, 130, 130, 0, 0, 0, 0, 0},
        {"mqa causal 130", 1, 4, 1, 32, 130, 130, 1, 0, 0, 0, 0},
        {"mqa noncausal 65x37", 1, 4, 1, 8, 65, 37, 0, 0, 0, 0, 0},
        {"mha causal 300 d64 b2", 2, 2, 2, 64, 300, 300, 1, 0, 0, 0, 0},
        {"gqa2 noncausal 200x333 d40", 1, 4, 2, 40, 200, 333, 0, 0, 0, 0, 0},
        {"gqa4 causal 150x290 offset", 2, 4, 1, 16, 150, 290, 1, 0, 140, 0, 0},
        {"offset causal q100 k64", 2, 4, 2, 16, 32, 64, 1, 0, 100, 64, 0},
        /* the last query of the first q tile has the position of the first key of
           the second k tile: that tile holds exactly one visible (query, key) pair */
        {"tile boundary causal", 1, 2, 1, 16, PAR__ATTN_BQ + 36, PAR__ATTN_BK + 72, 1, 0,
         PAR__ATTN_BK - PAR__ATTN_BQ + 1, 0, 0},
        {"offset noncausal q100 k64", 1, 2, 1, 16, 32, 64, 0, 0, 100, 64, 0},
        {"masked rows q10 k20", 1, 2, 2, 16, 40, 70, 1, 0, 10, 20, 0},
        {"masked rows q0 k200 300x260", 1, 2, 1, 8, 300, 260, 1, 0, 0, 200, 0},
        {"zigzag causal 96", 1, 4, 2, 16, 96, 96, 1, 0, 0, 0, 1},
        {"zigzag causal 280", 1, 2, 1, 16, 280, 280, 1, 0, 0, 0, 1},
        {"scale 0.5 causal 130x65", 1, 2, 1, 16, 130, 65, 1, 0.5f, 0, 0, 0},
        {"long k 1 query", 1, 1, 1, 4, 1, 200, 1, 0, 199, 0, 0},
        {"head_dim 3 causal 70", 1, 3, 3, 3, 70, 70, 1, 0, 0, 0, 0},
        {"gqa2 causal 600 d64 (tiles)", 1, 4, 2, 64, 600, 600, 1, 0, 0, 0, 0},
    };
    static const cfg fd_cases[] = {
        {"fd causal gqa2", 1, 2, 1, 4, 5, 7, 1, 0, 3, 0, 0},
        {"fd noncausal mha", 2, 2, 2, 3, 4, 6, 0, 0, 0, 0, 0},
        {"fd masked mqa", 1, 3, 1, 4, 5, 5, 1, 0.7f, 0, 2, 0},
        {"fd gqa4 zigzag", 1, 4, 1, 2, 6, 6, 1, 0, 0, 0, 1},
    };
    size_t i;
    par_cpu_desc cd;
    memset(&cd, 0, sizeof cd);
    cd.threads = 1;
    if (par_compute_cpu(&cd, &tbl) != PAR_OK || !tbl.attention_fwd || !tbl.attention_bwd || !tbl.attention_merge) {
        fprintf(stderr, "no CPU compute table with attention: %s\n", par_last_error());
        return 1;
    }
    for (i = 0; i < sizeof cases / sizeof cases[0]; i++) run_cfg(&cases[i], 2 + (int)(i % 3));
    for (i = 0; i < sizeof fd_cases / sizeof fd_cases[0]; i++) run_fd(&fd_cases[i]);
    test_exp();
    test_merge_layout();
    test_memory();
    test_errors();
    test_16bit();
    test_threads();
    tbl.destroy(tbl.user);
    return TEST_END("test_attention");
}
