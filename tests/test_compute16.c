/* tests/test_compute16.c - the CPU compute table's activation kernels on bf16
   and f16 tensors (rmsnorm, rope, swiglu, embedding, the cross-entropies,
   axpy), called through the table.

   The rule checked, exactly: a 16-bit call gives the bits of the table's own
   f32 kernel run on the 16-bit inputs decoded (tests/half.h, not the
   library's converters), each 16-bit output then rounded once to nearest even
   (half_round); its f32 outputs (rstd, loss, the pieces, rmsnorm's dw and
   embedding's dtable, accumulated into) equal the f32 kernel's bitwise. No
   tolerance: the staging widens exactly and runs the same f32 arithmetic, so
   any difference is a bug (a wrong row offset, a block boundary, a double
   rounding). The f32 kernels' numerics are tests/test_compute.c's.

   Shapes: a single row, rows that are not a multiple of the staging block
   (8192 floats), rows wider than a block (one row a block), and enough
   elements to fan out over 3 threads; each on a 1-thread and a 3-thread
   table. Also: the aliasing the table allows (rope y == x, rmsnorm_bwd
   dx == dy, swiglu_bwd dg == g and du == u, xent and xent_bwd_split dlogits ==
   logits), xent without dlogits, rmsnorm without rstd, the errors (a dtype
   other than f32 / bf16 / f16, NULL, bad sizes, a bad id or target far past
   the first block), and scratch_bound: after every 16-bit kernel at the
   queried row length the table's workspace peak equals the bound. */
#include "test.h"
#include "half.h"

#include <stdlib.h>

static par_compute_table *T1, *T3; /* 1 and 3 kernel threads */
static const par_dtype TYPES[2] = {PAR_BF16, PAR_F16};

/* ------------------------------------------------------------------ helpers */

static uint64_t rng = 0x2545F4914F6CDD1Dull;
static double urand(void) { /* uniform in [0, 1) */
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return (double)(rng >> 11) / 9007199254740992.0;
}

static void *xalloc(int64_t n, size_t size) {
    void *p = calloc((size_t)(n > 0 ? n : 1), size);
    if (!p) {
        fprintf(stderr, "out of memory\n");
        exit(1);
    }
    return p;
}
static uint16_t *h_alloc(int64_t n) { return (uint16_t *)xalloc(n, 2); }
static float *f_alloc(int64_t n) { return (float *)xalloc(n, 4); }

/* n random 16-bit values of type t in h, decoded into f: most within +-scale,
   one in 8 a hundred times larger, one in 16 a thousand times smaller, about
   half negative. Every one is a 16-bit number, so f holds them exactly. */
static void rand16(par_dtype t, int64_t n, double scale, uint16_t *h, float *f) {
    int64_t i;
    for (i = 0; i < n; i++) {
        const double k = urand();
        double v = (2 * urand() - 1) * scale;
        if (k < 0.125) v *= 100;
        else if (k < 0.1875) v *= 1e-3;
        h[i] = half_round(t, (float)v);
        f[i] = (float)half_value(t, h[i]);
    }
}

/* The first i where got[i] is not want[i] rounded once to t, or -1. */
static int64_t diff16(par_dtype t, const uint16_t *got, const float *want, int64_t n) {
    int64_t i;
    for (i = 0; i < n; i++)
        if (got[i] != half_round(t, want[i])) return i;
    return -1;
}
/* The first i where got[i] and want[i] differ in a bit, or -1. */
static int64_t diff32(const float *got, const float *want, int64_t n) {
    int64_t i;
    for (i = 0; i < n; i++)
        if (memcmp(got + i, want + i, 4) != 0) return i;
    return -1;
}

#define SAME16(t, got, want, n, what)                                                                             \
    do {                                                                                                          \
        const int64_t at_ = diff16((t), (got), (want), (n));                                                      \
        CHECK_MSG(at_ < 0, "%s %s (%s): element %lld is 0x%04x, the f32 kernel's %.9g rounds to 0x%04x", what,    \
                  par_dtype_name(t), shape, (long long)at_, at_ < 0 ? 0u : (unsigned)(got)[at_],                  \
                  at_ < 0 ? 0.0 : (double)(want)[at_], at_ < 0 ? 0u : (unsigned)half_round((t), (want)[at_]));   \
    } while (0)
#define SAME32(got, want, n, what)                                                                                \
    do {                                                                                                          \
        const int64_t at_ = diff32((got), (want), (n));                                                           \
        CHECK_MSG(at_ < 0, "%s %s (%s): f32 element %lld is %.9g, the f32 kernel's %.9g", what,                  \
                  par_dtype_name(t), shape, (long long)at_, at_ < 0 ? 0.0 : (double)(got)[at_],                 \
                  at_ < 0 ? 0.0 : (double)(want)[at_]);                                                           \
    } while (0)

#define K16(tab, op, ...) (tab)->op((tab)->user, __VA_ARGS__)

/* ----------------------------------------------------------------- rmsnorm */

static void test_rmsnorm16(void) {
    static const int64_t shapes[][2] = {{1, 5}, {700, 96}, {2000, 64}, {13, 9000}, {3, 40000}};
    size_t si;
    int ti, th;
    for (si = 0; si < sizeof shapes / sizeof shapes[0]; si++)
        for (ti = 0; ti < 2; ti++)
            for (th = 0; th < 2; th++) {
                const par_dtype t = TYPES[ti];
                par_compute_table *tab = th ? T3 : T1;
                const int64_t rows = shapes[si][0], dim = shapes[si][1], n = rows * dim;
                uint16_t *x = h_alloc(n), *w = h_alloc(dim), *dy = h_alloc(n), *y = h_alloc(n), *dx = h_alloc(n);
                uint16_t *buf = h_alloc(n);
                float *xf = f_alloc(n), *wf = f_alloc(dim), *dyf = f_alloc(n), *yr = f_alloc(n), *rr = f_alloc(rows);
                float *rs = f_alloc(rows), *dxr = f_alloc(n), *dwr = f_alloc(dim), *dw = f_alloc(dim);
                char shape[64];
                int64_t j;
                snprintf(shape, sizeof shape, "%lld x %lld, %d thread(s)", (long long)rows, (long long)dim, th ? 3 : 1);
                rand16(t, n, 2.0, x, xf), rand16(t, dim, 1.5, w, wf), rand16(t, n, 1.0, dy, dyf);
                CHECK_OK(K16(T1, rmsnorm_fwd, PAR_F32, rows, dim, xf, wf, 1e-5f, yr, rr));
                CHECK_OK(K16(tab, rmsnorm_fwd, t, rows, dim, x, w, 1e-5f, y, rs));
                SAME16(t, y, yr, n, "rmsnorm_fwd y");
                SAME32(rs, rr, rows, "rmsnorm_fwd rstd");
                CHECK_OK(K16(tab, rmsnorm_fwd, t, rows, dim, x, w, 1e-5f, buf, NULL)); /* rstd not wanted */
                CHECK_MSG(memcmp(buf, y, (size_t)n * 2) == 0, "rmsnorm_fwd %s (%s) without rstd", par_dtype_name(t), shape);
                for (j = 0; j < dim; j++) dwr[j] = dw[j] = (float)(0.25 * (double)j); /* dw is added to */
                CHECK_OK(K16(T1, rmsnorm_bwd, PAR_F32, rows, dim, xf, wf, rr, dyf, dxr, dwr));
                CHECK_OK(K16(tab, rmsnorm_bwd, t, rows, dim, x, w, rs, dy, dx, dw));
                SAME16(t, dx, dxr, n, "rmsnorm_bwd dx");
                SAME32(dw, dwr, dim, "rmsnorm_bwd dw");
                for (j = 0; j < dim; j++) dw[j] = (float)(0.25 * (double)j);
                memcpy(buf, dy, (size_t)n * 2); /* dx == dy */
                CHECK_OK(K16(tab, rmsnorm_bwd, t, rows, dim, x, w, rs, buf, buf, dw));
                SAME16(t, buf, dxr, n, "rmsnorm_bwd dx == dy");
                SAME32(dw, dwr, dim, "rmsnorm_bwd dw (dx == dy)");
                free(x), free(w), free(dy), free(y), free(dx), free(buf), free(xf), free(wf), free(dyf), free(yr);
                free(rr), free(rs), free(dxr), free(dwr), free(dw);
            }
}

/* -------------------------------------------------------------------- rope */

static void test_rope16(void) {
    static const int64_t shapes[][3] = {{1, 1, 2}, {700, 6, 16}, {2000, 2, 32}, {13, 9, 1000}};
    size_t si;
    int ti, th, dir;
    for (si = 0; si < sizeof shapes / sizeof shapes[0]; si++)
        for (ti = 0; ti < 2; ti++)
            for (th = 0; th < 2; th++)
                for (dir = 0; dir < 2; dir++) {
                    const par_dtype t = TYPES[ti];
                    par_compute_table *tab = th ? T3 : T1;
                    const int64_t tokens = shapes[si][0], heads = shapes[si][1], hd = shapes[si][2];
                    const int64_t n = tokens * heads * hd;
                    uint16_t *x = h_alloc(n), *y = h_alloc(n);
                    float *xf = f_alloc(n), *yr = f_alloc(n);
                    int64_t *pos = (int64_t *)xalloc(tokens, sizeof(int64_t)), i;
                    char shape[80];
                    snprintf(shape, sizeof shape, "%s %lld x %lld x %lld, %d thread(s)", dir ? "bwd" : "fwd",
                             (long long)tokens, (long long)heads, (long long)hd, th ? 3 : 1);
                    for (i = 0; i < tokens; i++) pos[i] = (int64_t)(urand() * 8192);
                    rand16(t, n, 1.0, x, xf);
                    if (dir == 0) {
                        CHECK_OK(K16(T1, rope_fwd, PAR_F32, tokens, heads, hd, pos, 10000.0f, xf, yr));
                        CHECK_OK(K16(tab, rope_fwd, t, tokens, heads, hd, pos, 10000.0f, x, y));
                        SAME16(t, y, yr, n, "rope y");
                        CHECK_OK(K16(tab, rope_fwd, t, tokens, heads, hd, pos, 10000.0f, x, x)); /* y == x */
                    } else {
                        CHECK_OK(K16(T1, rope_bwd, PAR_F32, tokens, heads, hd, pos, 10000.0f, xf, yr));
                        CHECK_OK(K16(tab, rope_bwd, t, tokens, heads, hd, pos, 10000.0f, x, y));
                        SAME16(t, y, yr, n, "rope dx");
                        CHECK_OK(K16(tab, rope_bwd, t, tokens, heads, hd, pos, 10000.0f, x, x)); /* dx == dy */
                    }
                    SAME16(t, x, yr, n, "rope in place");
                    free(x), free(y), free(xf), free(yr), free(pos);
                }
}

/* ------------------------------------------------------------------ swiglu */

static void test_swiglu16(void) {
    static const int64_t sizes[] = {1, 1000, 3 * 8192 + 17, 100003};
    size_t si;
    int ti, th;
    for (si = 0; si < sizeof sizes / sizeof sizes[0]; si++)
        for (ti = 0; ti < 2; ti++)
            for (th = 0; th < 2; th++) {
                const par_dtype t = TYPES[ti];
                par_compute_table *tab = th ? T3 : T1;
                const int64_t n = sizes[si];
                uint16_t *g = h_alloc(n), *u = h_alloc(n), *dh = h_alloc(n), *h = h_alloc(n), *dg = h_alloc(n);
                uint16_t *du = h_alloc(n);
                float *gf = f_alloc(n), *uf = f_alloc(n), *dhf = f_alloc(n), *hr = f_alloc(n), *dgr = f_alloc(n);
                float *dur = f_alloc(n);
                char shape[64];
                snprintf(shape, sizeof shape, "n %lld, %d thread(s)", (long long)n, th ? 3 : 1);
                rand16(t, n, 3.0, g, gf), rand16(t, n, 1.0, u, uf), rand16(t, n, 1.0, dh, dhf);
                CHECK_OK(K16(T1, swiglu_fwd, PAR_F32, n, gf, uf, hr));
                CHECK_OK(K16(tab, swiglu_fwd, t, n, g, u, h));
                SAME16(t, h, hr, n, "swiglu_fwd h");
                CHECK_OK(K16(T1, swiglu_bwd, PAR_F32, n, gf, uf, dhf, dgr, dur));
                CHECK_OK(K16(tab, swiglu_bwd, t, n, g, u, dh, dg, du));
                SAME16(t, dg, dgr, n, "swiglu_bwd dg");
                SAME16(t, du, dur, n, "swiglu_bwd du");
                CHECK_OK(K16(tab, swiglu_bwd, t, n, g, u, dh, g, u)); /* dg == g, du == u */
                SAME16(t, g, dgr, n, "swiglu_bwd dg == g");
                SAME16(t, u, dur, n, "swiglu_bwd du == u");
                free(g), free(u), free(dh), free(h), free(dg), free(du), free(gf), free(uf), free(dhf), free(hr);
                free(dgr), free(dur);
            }
}

/* The f32 kernel allows what the table's doc says of swiglu_bwd (dg, du may
   equal g, u): in place equals out of place, bitwise. */
static void test_swiglu_f32_alias(void) {
    const int64_t n = 70001;
    float *g = f_alloc(n), *u = f_alloc(n), *dh = f_alloc(n), *dg = f_alloc(n), *du = f_alloc(n);
    int64_t i;
    const char *shape = "f32 in place";
    const par_dtype t = PAR_F32;
    for (i = 0; i < n; i++) g[i] = (float)(6 * urand() - 3), u[i] = (float)(2 * urand() - 1), dh[i] = (float)urand();
    CHECK_OK(K16(T3, swiglu_bwd, PAR_F32, n, g, u, dh, dg, du));
    CHECK_OK(K16(T3, swiglu_bwd, PAR_F32, n, g, u, dh, g, u));
    SAME32(g, dg, n, "swiglu_bwd dg == g");
    SAME32(u, du, n, "swiglu_bwd du == u");
    free(g), free(u), free(dh), free(dg), free(du);
}

/* --------------------------------------------------------------- embedding */

static void test_embedding16(void) {
    /* vocab rows, dim, tokens; each also as a shard of the rows [start, start + rows / 2) */
    static const int64_t shapes[][3] = {{37, 5, 11}, {50, 96, 700}, {9, 9000, 13}};
    size_t si;
    int ti, th, shard;
    for (si = 0; si < sizeof shapes / sizeof shapes[0]; si++)
        for (ti = 0; ti < 2; ti++)
            for (th = 0; th < 2; th++)
                for (shard = 0; shard < 2; shard++) {
                    const par_dtype t = TYPES[ti];
                    par_compute_table *tab = th ? T3 : T1;
                    const int64_t V = shapes[si][0], D = shapes[si][1], n = shapes[si][2];
                    const int64_t start = shard ? V / 3 : 0, rows = shard ? V / 2 : V;
                    uint16_t *table = h_alloc(V * D), *dout = h_alloc(n * D), *out = h_alloc(n * D);
                    float *tf = f_alloc(V * D), *doutf = f_alloc(n * D), *outr = f_alloc(n * D);
                    float *dt = f_alloc(rows * D), *dtr = f_alloc(rows * D);
                    int32_t *ids = (int32_t *)xalloc(n, sizeof(int32_t));
                    int64_t i;
                    char shape[80];
                    snprintf(shape, sizeof shape, "%lld ids into %lld x %lld from %lld, %d thread(s)", (long long)n,
                             (long long)rows, (long long)D, (long long)start, th ? 3 : 1);
                    rand16(t, V * D, 1.0, table, tf), rand16(t, n * D, 1.0, dout, doutf);
                    for (i = 0; i < n; i++) ids[i] = (int32_t)(i % 3 == 0 ? 2 : urand() * V); /* id 2 repeats */
                    CHECK_OK(K16(T1, embedding_fwd, PAR_F32, n, ids, tf + start * D, rows, D, start, outr));
                    CHECK_OK(K16(tab, embedding_fwd, t, n, ids, table + start * D, rows, D, start, out));
                    SAME16(t, out, outr, n * D, "embedding_fwd out");
                    for (i = 0; i < rows * D; i++) dt[i] = dtr[i] = (float)(i % 7) * 0.125f; /* added to */
                    CHECK_OK(K16(T1, embedding_bwd, PAR_F32, n, ids, doutf, rows, D, start, dtr));
                    CHECK_OK(K16(tab, embedding_bwd, t, n, ids, dout, rows, D, start, dt));
                    SAME32(dt, dtr, rows * D, "embedding_bwd dtable");
                    free(table), free(dout), free(out), free(tf), free(doutf), free(outr), free(dt), free(dtr), free(ids);
                }
}

/* ----------------------------------------------------------- cross-entropy */

static void test_xent16(void) {
    static const int64_t shapes[][2] = {{1, 5}, {700, 96}, {2000, 64}, {13, 9000}, {4, 40000}};
    size_t si;
    int ti, th;
    for (si = 0; si < sizeof shapes / sizeof shapes[0]; si++)
        for (ti = 0; ti < 2; ti++)
            for (th = 0; th < 2; th++) {
                const par_dtype t = TYPES[ti];
                par_compute_table *tab = th ? T3 : T1;
                const int64_t rows = shapes[si][0], V = shapes[si][1], n = rows * V;
                uint16_t *lg = h_alloc(n), *dl = h_alloc(n), *buf = h_alloc(n);
                float *lf = f_alloc(n), *dlr = f_alloc(n), *lossr = f_alloc(rows), *loss = f_alloc(rows);
                float *loss2 = f_alloc(rows);
                int32_t *tg = (int32_t *)xalloc(rows, sizeof(int32_t));
                int64_t r;
                char shape[64];
                snprintf(shape, sizeof shape, "%lld x %lld, %d thread(s)", (long long)rows, (long long)V, th ? 3 : 1);
                rand16(t, n, 4.0, lg, lf);
                for (r = 0; r < rows; r++) tg[r] = r % 5 == 3 ? -1 : (int32_t)(urand() * V); /* some rows ignored */
                CHECK_OK(K16(T1, xent, PAR_F32, rows, V, lf, tg, lossr, dlr, 0.5f));
                CHECK_OK(K16(tab, xent, t, rows, V, lg, tg, loss, dl, 0.5f));
                SAME32(loss, lossr, rows, "xent loss");
                SAME16(t, dl, dlr, n, "xent dlogits");
                CHECK_OK(K16(tab, xent, t, rows, V, lg, tg, loss2, NULL, 0.5f)); /* the loss only */
                SAME32(loss2, lossr, rows, "xent loss (no dlogits)");
                memcpy(buf, lg, (size_t)n * 2); /* dlogits == logits */
                CHECK_OK(K16(tab, xent, t, rows, V, buf, tg, loss2, buf, 0.5f));
                SAME16(t, buf, dlr, n, "xent dlogits == logits");
                SAME32(loss2, lossr, rows, "xent loss (dlogits == logits)");
                free(lg), free(dl), free(buf), free(lf), free(dlr), free(lossr), free(loss), free(loss2), free(tg);
            }
}

/* The vocab-split pieces on one shard [start, start + v_local) of a vocab of V. */
static void test_xent_split16(void) {
    static const int64_t shapes[][3] = {{1, 5, 3}, {700, 96, 50}, {2000, 64, 64}, {13, 9000, 4000}, {4, 40000, 1}};
    size_t si;
    int ti, th;
    for (si = 0; si < sizeof shapes / sizeof shapes[0]; si++)
        for (ti = 0; ti < 2; ti++)
            for (th = 0; th < 2; th++) {
                const par_dtype t = TYPES[ti];
                par_compute_table *tab = th ? T3 : T1;
                const int64_t rows = shapes[si][0], v = shapes[si][1], start = shapes[si][2], n = rows * v;
                uint16_t *lg = h_alloc(n), *dl = h_alloc(n);
                float *lf = f_alloc(n), *dlr = f_alloc(n), *mx = f_alloc(rows), *mxr = f_alloc(rows);
                float *sm = f_alloc(rows), *smr = f_alloc(rows), *tgt = f_alloc(rows), *tgtr = f_alloc(rows);
                float *gmax = f_alloc(rows);
                int32_t *tg = (int32_t *)xalloc(rows, sizeof(int32_t));
                int64_t r;
                char shape[80];
                snprintf(shape, sizeof shape, "%lld x %lld from %lld, %d thread(s)", (long long)rows, (long long)v,
                         (long long)start, th ? 3 : 1);
                rand16(t, n, 4.0, lg, lf);
                for (r = 0; r < rows; r++) /* in the shard, past it, before it, ignored */
                    tg[r] = r % 4 == 0 ? (int32_t)(start + urand() * v) : r % 4 == 1 ? (int32_t)(start + v + 7)
                          : r % 4 == 2 ? (int32_t)(start / 2) : -1;
                tg[0] = (int32_t)(start + v - 1); /* the shard's edges */
                if (rows > 2) tg[2] = (int32_t)start;
                CHECK_OK(K16(T1, xent_local_max, PAR_F32, rows, v, lf, mxr));
                CHECK_OK(K16(tab, xent_local_max, t, rows, v, lg, mx));
                SAME32(mx, mxr, rows, "xent_local_max");
                for (r = 0; r < rows; r++) gmax[r] = mxr[r] + (r % 2 ? 1.5f : 0.0f); /* another shard's may be larger */
                CHECK_OK(K16(T1, xent_local_sumexp, PAR_F32, rows, v, lf, gmax, smr));
                CHECK_OK(K16(tab, xent_local_sumexp, t, rows, v, lg, gmax, sm));
                SAME32(sm, smr, rows, "xent_local_sumexp");
                CHECK_OK(K16(T1, xent_local_target, PAR_F32, rows, v, lf, tg, start, tgtr));
                CHECK_OK(K16(tab, xent_local_target, t, rows, v, lg, tg, start, tgt));
                SAME32(tgt, tgtr, rows, "xent_local_target");
                CHECK_OK(K16(T1, xent_bwd_split, PAR_F32, rows, v, lf, tg, start, gmax, smr, 0.25f, dlr));
                CHECK_OK(K16(tab, xent_bwd_split, t, rows, v, lg, tg, start, gmax, smr, 0.25f, dl));
                SAME16(t, dl, dlr, n, "xent_bwd_split dlogits");
                CHECK_OK(K16(tab, xent_bwd_split, t, rows, v, lg, tg, start, gmax, smr, 0.25f, lg)); /* in place */
                SAME16(t, lg, dlr, n, "xent_bwd_split dlogits == logits");
                free(lg), free(dl), free(lf), free(dlr), free(mx), free(mxr), free(sm), free(smr), free(tgt), free(tgtr);
                free(gmax), free(tg);
            }
}

/* -------------------------------------------------------------------- axpy */

static void test_axpy16(void) {
    static const int64_t sizes[] = {1, 1000, 3 * 8192 + 17, 100003};
    size_t si;
    int ti, th;
    for (si = 0; si < sizeof sizes / sizeof sizes[0]; si++)
        for (ti = 0; ti < 2; ti++)
            for (th = 0; th < 2; th++) {
                const par_dtype t = TYPES[ti];
                par_compute_table *tab = th ? T3 : T1;
                const int64_t n = sizes[si];
                uint16_t *x = h_alloc(n), *y = h_alloc(n);
                float *xf = f_alloc(n), *yr = f_alloc(n);
                char shape[64];
                snprintf(shape, sizeof shape, "n %lld, %d thread(s)", (long long)n, th ? 3 : 1);
                rand16(t, n, 1.0, x, xf), rand16(t, n, 1.0, y, yr);
                CHECK_OK(K16(T1, axpy, PAR_F32, n, -0.37f, xf, yr));
                CHECK_OK(K16(tab, axpy, t, n, -0.37f, x, y));
                SAME16(t, y, yr, n, "axpy y");
                free(x), free(y), free(xf), free(yr);
            }
}

/* ------------------------------------------------------------------ errors */

static void test_errors16(void) {
    par_compute_table *tab = T3;
    uint16_t h[16] = {0};
    float f[16] = {0}, *dt;
    int32_t ids[2] = {0, 1}, *many;
    int64_t pos[2] = {0, 1}, i;
    static const par_dtype bad_types[3] = {PAR_I32, PAR_F64, (par_dtype)99};
    int b;
    for (b = 0; b < 3; b++) { /* every kernel names itself and the dtype */
        const par_dtype d = bad_types[b];
        char want[64];
        snprintf(want, sizeof want, ": dtype is %s (%d)", par_dtype_name(d), (int)d);
#define BAD_DTYPE(op, ...)                                                                    \
    do {                                                                                      \
        par_status st_ = K16(tab, op, d, __VA_ARGS__);                                        \
        CHECK_MSG(st_ == PAR_EINVAL && strncmp(par_last_error(), #op ": ", strlen(#op) + 2) == 0 && \
                      strstr(par_last_error(), want) != NULL,                                 \
                  "%s with dtype %d: %s", #op, (int)d, par_status_string(st_));               \
    } while (0)
        BAD_DTYPE(rmsnorm_fwd, 1, 4, h, h, 1e-5f, h, f);
        BAD_DTYPE(rmsnorm_bwd, 1, 4, h, h, f, h, h, f);
        BAD_DTYPE(rope_fwd, 1, 1, 4, pos, 1e4f, h, h);
        BAD_DTYPE(rope_bwd, 1, 1, 4, pos, 1e4f, h, h);
        BAD_DTYPE(swiglu_fwd, 4, h, h, h);
        BAD_DTYPE(swiglu_bwd, 4, h, h, h, h, h);
        BAD_DTYPE(embedding_fwd, 2, ids, h, 2, 2, 0, h);
        BAD_DTYPE(embedding_bwd, 2, ids, h, 2, 2, 0, f);
        BAD_DTYPE(xent, 1, 4, h, ids, f, h, 1.0f);
        BAD_DTYPE(xent_local_max, 1, 4, h, f);
        BAD_DTYPE(xent_local_sumexp, 1, 4, h, f, f);
        BAD_DTYPE(xent_local_target, 1, 4, h, ids, 0, f);
        BAD_DTYPE(xent_bwd_split, 1, 4, h, ids, 0, f, f, 1.0f, h);
        BAD_DTYPE(axpy, 4, 1.0f, h, h);
#undef BAD_DTYPE
    }
    /* 16-bit calls make the f32 kernels' checks, with their sentences */
    CHECK_ERR(K16(tab, rmsnorm_fwd, PAR_BF16, -1, 4, h, h, 1e-5f, h, f), PAR_EINVAL, "rmsnorm_fwd: rows is -1");
    CHECK_ERR(K16(tab, rmsnorm_fwd, PAR_F16, 1, 4, h, NULL, 1e-5f, h, f), PAR_EINVAL, "rmsnorm_fwd: w is NULL");
    CHECK_ERR(K16(tab, rmsnorm_bwd, PAR_BF16, 1, 4, h, h, NULL, h, h, f), PAR_EINVAL, "rmsnorm_bwd: rstd is NULL");
    CHECK_ERR(K16(tab, rmsnorm_bwd, PAR_F16, 1, 4, h, h, f, h, h, NULL), PAR_EINVAL, "rmsnorm_bwd: dw is NULL");
    CHECK_ERR(K16(tab, rope_fwd, PAR_BF16, 1, 1, 4, NULL, 1e4f, h, h), PAR_EINVAL, "rope_fwd: pos is NULL");
    CHECK_ERR(K16(tab, rope_fwd, PAR_F16, 1, 1, 3, pos, 1e4f, h, h), PAR_EINVAL, "rope_fwd: head_dim is 3");
    CHECK_ERR(K16(tab, rope_bwd, PAR_BF16, 1, 1, 4, pos, 1e4f, NULL, h), PAR_EINVAL, "rope_bwd: dy is NULL");
    CHECK_ERR(K16(tab, rope_bwd, PAR_F16, 1, 1, 4, pos, 0.0f, h, h), PAR_EINVAL, "rope_bwd: theta is 0");
    CHECK_ERR(K16(tab, swiglu_fwd, PAR_BF16, 2, h, NULL, h), PAR_EINVAL, "swiglu_fwd: u is NULL");
    CHECK_ERR(K16(tab, swiglu_bwd, PAR_F16, 2, h, h, h, h, NULL), PAR_EINVAL, "swiglu_bwd: du is NULL");
    CHECK_ERR(K16(tab, embedding_fwd, PAR_BF16, 2, NULL, h, 2, 2, 0, h), PAR_EINVAL, "embedding_fwd: ids is NULL");
    CHECK_ERR(K16(tab, embedding_fwd, PAR_F16, 2, ids, h, 2, 2, -1, h), PAR_EINVAL, "embedding_fwd: start is -1");
    CHECK_ERR(K16(tab, embedding_bwd, PAR_BF16, 2, ids, h, 2, 2, 0, NULL), PAR_EINVAL, "embedding_bwd: dtable is NULL");
    CHECK_ERR(K16(tab, xent, PAR_F16, 1, 0, h, ids, f, h, 1.0f), PAR_EINVAL, "xent: vocab is 0");
    CHECK_ERR(K16(tab, xent, PAR_BF16, 1, 4, h, ids, NULL, h, 1.0f), PAR_EINVAL, "xent: loss is NULL");
    CHECK_ERR(K16(tab, xent_local_max, PAR_F16, 1, 4, NULL, f), PAR_EINVAL, "xent_local_max: logits is NULL");
    CHECK_ERR(K16(tab, xent_local_sumexp, PAR_BF16, 1, 4, h, NULL, f), PAR_EINVAL, "xent_local_sumexp: gmax is NULL");
    CHECK_ERR(K16(tab, xent_local_target, PAR_F16, 1, 4, h, ids, -3, f), PAR_EINVAL, "xent_local_target: start is -3");
    CHECK_ERR(K16(tab, xent_bwd_split, PAR_BF16, 1, 4, h, ids, 0, f, NULL, 1.0f, h), PAR_EINVAL,
              "xent_bwd_split: gsum is NULL");
    CHECK_ERR(K16(tab, axpy, PAR_F16, 2, 1.0f, h, NULL), PAR_EINVAL, "axpy: y is NULL");
    CHECK_ERR(K16(tab, axpy, PAR_BF16, -2, 1.0f, h, h), PAR_EINVAL, "axpy: n is -2");
    /* nothing to do: no pointers needed */
    CHECK_OK(K16(tab, swiglu_fwd, PAR_BF16, 0, NULL, NULL, NULL));
    CHECK_OK(K16(tab, rmsnorm_fwd, PAR_F16, 0, 8, NULL, NULL, 1e-5f, NULL, NULL));
    CHECK_OK(K16(tab, rope_fwd, PAR_BF16, 3, 0, 4, NULL, 1e4f, NULL, NULL)); /* no heads */
    CHECK_OK(K16(tab, rope_fwd, PAR_F32, 3, 0, 4, NULL, 1e4f, NULL, NULL));
    CHECK_OK(K16(tab, xent_bwd_split, PAR_F16, 2, 0, NULL, NULL, 0, NULL, NULL, 1.0f, NULL)); /* empty shard */
    CHECK_OK(K16(tab, xent_bwd_split, PAR_F32, 2, 0, NULL, NULL, 0, NULL, NULL, 1.0f, NULL));
    for (b = 0; b < 3; b++) { /* an empty shard still writes its pieces: max -inf, sum 0 */
        const par_dtype d = b == 0 ? PAR_F32 : TYPES[b - 1];
        float m[2] = {1, 1}, s[2] = {1, 1}, g[2] = {0, 0};
        CHECK_OK(K16(tab, xent_local_max, d, 2, 0, NULL, m));
        CHECK_OK(K16(tab, xent_local_sumexp, d, 2, 0, NULL, g, s));
        CHECK_MSG(isinf(m[0]) && m[0] < 0 && isinf(m[1]) && s[0] == 0.0f && s[1] == 0.0f, "%s", par_dtype_name(d));
    }
    /* a bad id or target far past the first block: its own index, and nothing written */
    many = (int32_t *)xalloc(700, sizeof(int32_t));
    dt = f_alloc(4 * 96);
    {
        uint16_t *big = h_alloc(700 * 96);
        float *loss = f_alloc(700);
        for (i = 0; i < 700; i++) many[i] = (int32_t)(i % 4);
        many[600] = -5;
        CHECK_ERR(K16(tab, embedding_bwd, PAR_BF16, 700, many, big, 4, 96, 0, dt), PAR_EINVAL,
                  "embedding_bwd: token 600 has negative id -5");
        for (i = 0; i < 700 * 96; i++) big[i] = 0x3f80; /* 1.0 */
        CHECK_ERR(K16(tab, embedding_bwd, PAR_BF16, 700, many, big, 4, 96, 0, dt), PAR_EINVAL, "token 600");
        for (i = 0; i < 4 * 96 && dt[i] == 0.0f; i++) {}
        CHECK_MSG(i == 4 * 96, "embedding_bwd added rows before failing on a bad id (element %lld)", (long long)i);
        CHECK_ERR(K16(tab, embedding_fwd, PAR_F16, 700, many, big, 4, 96, 0, big), PAR_EINVAL,
                  "embedding_fwd: token 600 has negative id -5");
        many[600] = 96;
        CHECK_ERR(K16(tab, xent, PAR_BF16, 700, 96, big, many, loss, big, 1.0f), PAR_EINVAL,
                  "xent: row 600 has target 96 outside the vocab of 96");
        free(big), free(loss);
    }
    free(many), free(dt);
}

/* ---------------------------------------------------------- scratch_bound */

/* Every 16-bit kernel with rows of `cols` (elementwise ones over n values). */
static void run_all16(par_compute_table *tab, par_dtype t, int64_t cols, int64_t rows, int64_t n) {
    const int64_t m = rows * cols, big = m > n ? m : n;
    void *a = xalloc(big, 4), *b = xalloc(big, 4), *c = xalloc(big, 4), *w = xalloc(cols, 4); /* f32 or 16-bit */
    float *f = f_alloc(rows), *dw = f_alloc(cols), *dtable = f_alloc(cols);
    int32_t *ids = (int32_t *)xalloc(rows, sizeof(int32_t));
    int64_t *pos = (int64_t *)xalloc(rows, sizeof(int64_t));
    float *g = f_alloc(rows);
    CHECK_OK(K16(tab, rmsnorm_fwd, t, rows, cols, a, w, 1e-5f, b, f));
    CHECK_OK(K16(tab, rmsnorm_bwd, t, rows, cols, a, w, f, b, c, dw));
    if (cols % 4 == 0) { /* 2 heads of an even head_dim */
        CHECK_OK(K16(tab, rope_fwd, t, rows, 2, cols / 2, pos, 1e4f, a, b));
        CHECK_OK(K16(tab, rope_bwd, t, rows, 2, cols / 2, pos, 1e4f, a, b));
    }
    CHECK_OK(K16(tab, swiglu_fwd, t, n, a, b, c));
    CHECK_OK(K16(tab, swiglu_bwd, t, n, a, b, c, a, b));
    CHECK_OK(K16(tab, embedding_fwd, t, rows, ids, w, 1, cols, 0, a));
    CHECK_OK(K16(tab, embedding_bwd, t, rows, ids, a, 1, cols, 0, dtable));
    CHECK_OK(K16(tab, xent, t, rows, cols, a, ids, f, b, 1.0f));
    CHECK_OK(K16(tab, xent_local_max, t, rows, cols, a, g));
    CHECK_OK(K16(tab, xent_local_sumexp, t, rows, cols, a, g, f));
    CHECK_OK(K16(tab, xent_local_target, t, rows, cols, a, ids, 0, f));
    CHECK_OK(K16(tab, xent_bwd_split, t, rows, cols, a, ids, 0, g, f, 1.0f, b));
    CHECK_OK(K16(tab, axpy, t, n, 0.5f, a, b));
    free(a), free(b), free(c), free(w), free(f), free(dw), free(dtable), free(ids), free(pos), free(g);
}

/* After every 16-bit kernel at the queried row length, with enough rows to
   split over every thread, the table's workspace peak EQUALS the bound (the
   bound is the largest staging of any kernel: the elementwise swiglu_bwd for
   short rows, rmsnorm for long ones); calls with fewer rows or narrower rows
   stay within it. f32 calls stage nothing. */
static void test_scratch_bound16(void) {
    static const int64_t cols_list[] = {96, 9000, 40000};
    int th, ti;
    size_t ci;
    for (th = 1; th <= 3; th += 2)
        for (ci = 0; ci < sizeof cols_list / sizeof cols_list[0]; ci++)
            for (ti = 0; ti < 2; ti++) {
                const int64_t cols = cols_list[ci], rows = cols < 1000 ? 1200 : 4; /* rows enough for 3 parts */
                par_compute_table t;
                par_cpu_desc d;
                par_scratch_query q;
                par_mem_report r;
                size_t bound = 0, bound32 = 1;
                memset(&d, 0, sizeof d);
                d.threads = th;
                CHECK_OK(par_compute_cpu(&d, &t));
                memset(&q, 0, sizeof q);
                q.act_cols = cols;
                CHECK_OK(t.scratch_bound(t.user, &q, &bound32));
                CHECK(bound32 == 0); /* f32 activations stage nothing */
                run_all16(&t, PAR_F32, cols, rows, 100000);
                CHECK_OK(t.memory_report(t.user, &r));
                CHECK_INT(r.peak[PAR_MEM_WORKSPACE], 0);
                q.act_type = TYPES[ti];
                CHECK_OK(t.scratch_bound(t.user, &q, &bound));
                run_all16(&t, q.act_type, cols / 3 * 2, 5, 1000); /* smaller calls first */
                CHECK_OK(t.memory_report(t.user, &r));
                CHECK_MSG(r.peak[PAR_MEM_WORKSPACE] > 0 && (size_t)r.peak[PAR_MEM_WORKSPACE] <= bound,
                          "small calls: peak %lld, bound %zu", (long long)r.peak[PAR_MEM_WORKSPACE], bound);
                run_all16(&t, q.act_type, cols, rows, 100000);
                CHECK_OK(t.memory_report(t.user, &r));
                CHECK_MSG((size_t)r.peak[PAR_MEM_WORKSPACE] == bound,
                          "%s, %d thread(s), rows of %lld: workspace peak %lld, scratch_bound %zu",
                          par_dtype_name(q.act_type), th, (long long)cols, (long long)r.peak[PAR_MEM_WORKSPACE], bound);
                run_all16(&t, q.act_type, cols, 3 * th, 20000); /* again, smaller: no growth */
                CHECK_OK(t.memory_report(t.user, &r));
                CHECK((size_t)r.peak[PAR_MEM_WORKSPACE] == bound && (size_t)r.current[PAR_MEM_WORKSPACE] == bound);
                t.destroy(t.user);
            }
    {   /* a 16-bit GEMM's C shares the staging: the bound of both is the larger, and holds */
        par_compute_table t;
        par_cpu_desc d;
        par_scratch_query q;
        par_mem_report r;
        par_gemm_desc gd;
        size_t both = 0, gemm_only = 0, act_only = 0;
        const int64_t m = 300, n = 200, k = 64;
        uint16_t *A = h_alloc(m * k), *B = h_alloc(k * n), *C = h_alloc(m * n);
        memset(&d, 0, sizeof d);
        d.threads = 3;
        CHECK_OK(par_compute_cpu(&d, &t));
        memset(&q, 0, sizeof q);
        q.gemm_m = m, q.gemm_n = n, q.gemm_k = k, q.gemm_type = PAR_BF16;
        CHECK_OK(t.scratch_bound(t.user, &q, &gemm_only));
        q.act_type = PAR_BF16, q.act_cols = 96;
        CHECK_OK(t.scratch_bound(t.user, &q, &both));
        q.gemm_m = q.gemm_n = q.gemm_k = 0, q.gemm_type = PAR_F32;
        CHECK_OK(t.scratch_bound(t.user, &q, &act_only));
        CHECK_MSG(both < gemm_only + act_only && both >= gemm_only && both >= act_only,
                  "gemm %zu, activations %zu, both %zu", gemm_only, act_only, both);
        memset(&gd, 0, sizeof gd);
        gd.m = m, gd.n = n, gd.k = k, gd.alpha = 1, gd.a_type = gd.c_type = PAR_BF16;
        CHECK_OK(t.gemm(t.user, &gd, A, B, C));
        run_all16(&t, PAR_BF16, 96, 1200, 100000);
        CHECK_OK(t.gemm(t.user, &gd, A, B, C));
        CHECK_OK(t.memory_report(t.user, &r));
        CHECK_MSG(r.peak[PAR_MEM_WORKSPACE] > 0 && (size_t)r.peak[PAR_MEM_WORKSPACE] <= both,
                  "GEMM and activations: peak %lld, bound %zu", (long long)r.peak[PAR_MEM_WORKSPACE], both);
        q.act_type = PAR_I32;
        CHECK_ERR(t.scratch_bound(t.user, &q, &both), PAR_EINVAL, "scratch_bound: act_type i32");
        q.act_type = PAR_F16, q.act_cols = -1;
        CHECK_ERR(t.scratch_bound(t.user, &q, &both), PAR_EINVAL, "scratch_bound: act_cols -1");
        t.destroy(t.user);
        free(A), free(B), free(C);
    }
}

int main(void) {
    par_compute_table t1, t3;
    par_cpu_desc d1, d3;
    memset(&d1, 0, sizeof d1);
    memset(&d3, 0, sizeof d3);
    d1.threads = 1;
    d3.threads = 3;
    if (par_compute_cpu(&d1, &t1) != PAR_OK || par_compute_cpu(&d3, &t3) != PAR_OK) {
        fprintf(stderr, "par_compute_cpu failed: %s\n", par_last_error());
        return 1;
    }
    T1 = &t1, T3 = &t3;
    test_rmsnorm16();
    test_rope16();
    test_swiglu16();
    test_swiglu_f32_alias();
    test_embedding16();
    test_xent16();
    test_xent_split16();
    test_axpy16();
    test_errors16();
    test_scratch_bound16();
    t1.destroy(t1.user);
    t3.destroy(t3.user);
    return TEST_END("test_compute16");
}
