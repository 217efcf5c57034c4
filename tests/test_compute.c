/* tests/test_compute.c - the CPU compute table (par_compute_cpu), every kernel
   called THROUGH THE TABLE. (Attention numerics are tested by helper-A's tests.)

   Every forward is compared with a naive DOUBLE reference written here from the
   math (not from the kernel); every backward with central finite differences of
   a double forward, on L = sum(out * R) for a random R (so dout = R).

   Tolerances (absolute, scaled by the magnitudes involved):
   * f32 kernels round each operation to 2^-24 ~ 6e-8 relative. A dot of length k
     has worst-case error ~ k * 6e-8 * sum|a_i b_i| (gamma_k); gemm is checked
     against 2 * (k+1) * 2^-24 * (|alpha| sum|a||b| + |beta||c|) + 1e-30 per
     entry, the deterministic bound with a factor 2 of slack (FMA only lowers the
     error). Indexing or transpose bugs give O(1) errors, far above it.
   * Elementwise / row kernels (rmsnorm, rope, swiglu, xent, adamw): results are
     O(1..10); f32 rounding gives <= ~1e-6 relative; we use 1e-5 * (1 + |ref|).
   * Finite differences: h = 1e-4 in double on smooth O(1) functions; truncation
     error ~ h^2 |f'''| ~ 1e-8, rounding ~ 1e-16 / 1e-4 = 1e-12. The f32 gradient
     itself carries ~1e-6 relative error. We accept |g - fd| <= 1e-4 (1 + |fd|),
     10-100x above both, far below any formula error (O(0.1)).
   * GEMM with threads = 3 must equal threads = 1 BITWISE: every C element is
     accumulated in the same order whichever worker computes it.

   The GEMM section also calls the private micro-kernel dispatcher for EVERY
   micro-kernel this CPU supports (AVX-512, AVX2, portable), so all of them are
   checked on the machine running the tests. */
#define _POSIX_C_SOURCE 199309L
#define PARALLEL_IMPLEMENTATION
#include "test.h"
#include "half.h"

#include <math.h>
#include <stdlib.h>

/* The table under test; K(op, args...) calls op through it. */
static par_compute_table *T_;
#define K(op, ...) T_->op(T_->user, __VA_ARGS__)

/* ------------------------------------------------------------------ helpers */

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static float frand(void) { /* uniform in [-1, 1), exactly representable */
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((int64_t)(rng_state >> 40) - (1 << 23)) / (float)(1 << 23);
}
static float *falloc(int64_t n) { return (float *)calloc((size_t)(n > 0 ? n : 1), sizeof(float)); }
static double *dalloc(int64_t n) { return (double *)calloc((size_t)(n > 0 ? n : 1), sizeof(double)); }
static void fill(float *x, int64_t n, float s) {
    int64_t i;
    for (i = 0; i < n; i++) x[i] = s * frand();
}
static int close_to(double got, double want, double tol) { return fabs(got - want) <= tol * (1.0 + fabs(want)); }

/* max over i of |got - want| / (1 + |want|); reports how far a test was from failing */
static double max_rel(const float *got, const double *want, int64_t n) {
    double m = 0.0;
    int64_t i;
    for (i = 0; i < n; i++) {
        double e = fabs((double)got[i] - want[i]) / (1.0 + fabs(want[i]));
        if (!(e <= m)) m = e; /* NaN propagates as "infinitely bad" */
    }
    return m;
}

/* Finite-difference gradient of f at x (n doubles): fd[i] = dL/dx_i. */
typedef double (*loss_fn)(const double *x, void *ctx);
static void fd_grad(loss_fn f, void *ctx, double *x, int64_t n, double *fd) {
    const double h = 1e-4;
    int64_t i;
    for (i = 0; i < n; i++) {
        double x0 = x[i], lp, lm;
        x[i] = x0 + h;
        lp = f(x, ctx);
        x[i] = x0 - h;
        lm = f(x, ctx);
        x[i] = x0;
        fd[i] = (lp - lm) / (2.0 * h);
    }
}
static void f2d(const float *x, double *y, int64_t n) {
    int64_t i;
    for (i = 0; i < n; i++) y[i] = x[i];
}

/* ---------------------------------------------------------------------- gemm */

static par_status gemm_sb(int ta, int tb, int64_t m, int64_t n, int64_t k, float alpha, const float *A, int64_t lda,
                          int64_t sa, const float *B, int64_t ldb, int64_t sb, float beta, float *C, int64_t ldc,
                          int64_t sc, int64_t batch) {
    par_gemm_desc d;
    memset(&d, 0, sizeof d);
    d.transa = ta, d.transb = tb, d.m = m, d.n = n, d.k = k, d.alpha = alpha, d.beta = beta;
    d.lda = lda, d.ldb = ldb, d.ldc = ldc, d.stride_a = sa, d.stride_b = sb, d.stride_c = sc, d.batch = batch;
    d.a_type = PAR_F32, d.c_type = PAR_F32;
    return T_->gemm(T_->user, &d, A, B, C);
}
static par_status gemm1(int ta, int tb, int64_t m, int64_t n, int64_t k, float alpha, const float *A, int64_t lda,
                        const float *B, int64_t ldb, float beta, float *C, int64_t ldc) {
    return gemm_sb(ta, tb, m, n, k, alpha, A, lda, 0, B, ldb, 0, beta, C, ldc, 0, 1);
}

static double opval(const float *X, int64_t ld, int trans, int64_t r, int64_t c) {
    return trans ? X[c * ld + r] : X[r * ld + c];
}

/* Check one GEMM (or one problem of a batch) against the double reference. */
static int gemm_ok(int ta, int tb, int64_t m, int64_t n, int64_t k, float alpha, const float *A, int64_t lda,
                   const float *B, int64_t ldb, float beta, const float *C0, const float *C, int64_t ldc,
                   double *worst) {
    int64_t i, j, p;
    int ok = 1;
    for (i = 0; i < m; i++)
        for (j = 0; j < n; j++) {
            double s = 0.0, sa = 0.0, ref, bound;
            for (p = 0; p < k; p++) {
                double t = opval(A, lda, ta, i, p) * opval(B, ldb, tb, p, j);
                s += t;
                sa += fabs(t);
            }
            ref = (double)alpha * s + (beta == 0.0f ? 0.0 : (double)beta * C0[i * ldc + j]);
            bound = 2.0 * (double)(k + 1) * ldexp(1.0, -24) *
                        (fabs(alpha) * sa + (beta == 0.0f ? 0.0 : fabs(beta * C0[i * ldc + j]))) +
                    1e-30;
            if (!(fabs(C[i * ldc + j] - ref) <= bound)) ok = 0;
            if (bound > 0 && fabs(C[i * ldc + j] - ref) / bound > *worst) *worst = fabs(C[i * ldc + j] - ref) / bound;
        }
    return ok;
}

static void test_gemm(void) {
    /* odd sizes, sizes around the register tile (6/8/16/32), and beyond the cache
       blocks (MC = 96, KC = 256) so edge panels and several k blocks run */
    static const int64_t shapes[][3] = {{1, 1, 1},   {7, 33, 130}, {130, 7, 33}, {33, 130, 7},  {1, 130, 33},
                                        {130, 1, 7}, {7, 7, 1},    {65, 67, 300}, {130, 130, 257}, {3, 4100, 5}};
    static const float ab[][2] = {{1.0f, 0.0f}, {0.5f, -1.5f}, {-2.0f, 1.0f}, {0.0f, 0.5f}};
    double worst = 0.0;
    size_t s;
    int ta, tb, c, cases = 0, bad = 0;
    for (s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        const int64_t m = shapes[s][0], n = shapes[s][1], k = shapes[s][2];
        for (ta = 0; ta < 2; ta++)
            for (tb = 0; tb < 2; tb++)
                for (c = 0; c < 4; c++) {
                    /* padded leading dims catch lda/ldc mix-ups */
                    const int64_t lda = (ta ? m : k) + 3, ldb = (tb ? k : n) + 2, ldc = n + 1;
                    const int64_t arows = ta ? k : m, brows = tb ? n : k;
                    float *A = falloc(arows * lda), *B = falloc(brows * ldb), *C = falloc(m * ldc),
                          *C0 = falloc(m * ldc);
                    int64_t i;
                    fill(A, arows * lda, 1.0f);
                    fill(B, brows * ldb, 1.0f);
                    fill(C0, m * ldc, 1.0f);
                    memcpy(C, C0, (size_t)(m * ldc) * sizeof(float));
                    if (ab[c][1] == 0.0f)
                        for (i = 0; i < m * ldc; i++) C[i] = NAN; /* beta = 0 must not read C */
                    CHECK_OK(gemm1(ta, tb, m, n, k, ab[c][0], A, lda, B, ldb, ab[c][1], C, ldc));
                    cases++;
                    if (!gemm_ok(ta, tb, m, n, k, ab[c][0], A, lda, B, ldb, ab[c][1], C0, C, ldc, &worst)) {
                        bad++;
                        fprintf(stderr, "gemm mismatch: %c%c m=%lld n=%lld k=%lld alpha=%g beta=%g\n",
                                ta ? 'T' : 'N', tb ? 'T' : 'N', (long long)m, (long long)n, (long long)k,
                                (double)ab[c][0], (double)ab[c][1]);
                    }
                    free(A);
                    free(B);
                    free(C);
                    free(C0);
                }
    }
    CHECK_MSG(bad == 0, "%d of %d gemm cases wrong", bad, cases);
    printf("gemm: %d cases, worst error %.3f of the bound\n", cases, worst);

    /* strided batch, with gaps between problems and a broadcast B (strideB = 0) */
    for (ta = 0; ta < 2; ta++)
        for (tb = 0; tb < 2; tb++) {
            const int64_t m = 9, n = 17, k = 31, batch = 3;
            const int64_t lda = ta ? m : k, ldb = tb ? k : n, ldc = n;
            const int64_t sA = (ta ? k : m) * lda + 5, sC = m * ldc + 7;
            int pass;
            for (pass = 0; pass < 2; pass++) {
                const int64_t sB = pass ? 0 : (tb ? n : k) * ldb + 3;
                float *A = falloc(sA * batch), *B = falloc((tb ? n : k) * ldb + 3 * batch + sB * batch),
                      *C = falloc(sC * batch), *C0 = falloc(sC * batch);
                int64_t b, i;
                int ok = 1;
                fill(A, sA * batch, 1.0f);
                fill(B, (tb ? n : k) * ldb + 3 * batch + sB * batch, 1.0f);
                fill(C0, sC * batch, 1.0f);
                memcpy(C, C0, (size_t)(sC * batch) * sizeof(float));
                CHECK_OK(gemm_sb(ta, tb, m, n, k, 0.75f, A, lda, sA, B, ldb, sB, 0.5f, C, ldc, sC, batch));
                for (b = 0; b < batch; b++) {
                    ok &= gemm_ok(ta, tb, m, n, k, 0.75f, A + b * sA, lda, B + b * sB, ldb, 0.5f, C0 + b * sC,
                                  C + b * sC, ldc, &worst);
                    for (i = m * ldc; i < sC; i++) ok &= C[b * sC + i] == C0[b * sC + i]; /* gaps untouched */
                }
                CHECK_MSG(ok, "strided batch %c%c strideB=%lld", ta ? 'T' : 'N', tb ? 'T' : 'N', (long long)sB);
                free(A);
                free(B);
                free(C);
                free(C0);
            }
        }

    /* k = 0: C = beta C */
    {
        float a[4] = {0}, b[4] = {0}, cc[4] = {2.0f};
        CHECK_OK(gemm1(0, 0, 1, 1, 0, 1.0f, a, 1, b, 1, 3.0f, cc, 1));
        CHECK(cc[0] == 6.0f);
    }
}

/* ------------------------------------------------------------------ rmsnorm */

typedef struct {
    int64_t rows, dim;
    const double *x, *w, *R;
    double eps;
    int wrt; /* 0: x, 1: w */
} rms_ctx;

static void rms_ref(int64_t rows, int64_t dim, const double *x, const double *w, double eps, double *y) {
    int64_t r, j;
    for (r = 0; r < rows; r++) {
        double ms = 0.0;
        for (j = 0; j < dim; j++) ms += x[r * dim + j] * x[r * dim + j];
        ms /= (double)dim;
        for (j = 0; j < dim; j++) y[r * dim + j] = w[j] * x[r * dim + j] / sqrt(ms + eps);
    }
}
static double rms_loss(const double *v, void *vctx) {
    rms_ctx *c = (rms_ctx *)vctx;
    double *y = dalloc(c->rows * c->dim), L = 0.0;
    int64_t i;
    rms_ref(c->rows, c->dim, c->wrt ? c->x : v, c->wrt ? v : c->w, c->eps, y);
    for (i = 0; i < c->rows * c->dim; i++) L += y[i] * c->R[i];
    free(y);
    return L;
}

static void test_rmsnorm(void) {
    static const int64_t shapes[][2] = {{1, 1}, {3, 7}, {5, 33}, {2, 130}};
    size_t s;
    for (s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        const int64_t rows = shapes[s][0], dim = shapes[s][1], N = rows * dim;
        const float eps = 1e-5f;
        float *x = falloc(N), *w = falloc(dim), *y = falloc(N), *rstd = falloc(rows), *dy = falloc(N),
              *dx = falloc(N), *dw = falloc(dim);
        double *xd = dalloc(N), *wd = dalloc(dim), *yd = dalloc(N), *Rd = dalloc(N), *fd = dalloc(N),
               *fdw = dalloc(dim);
        int64_t r, j;
        rms_ctx ctx;
        fill(x, N, 2.0f);
        for (j = 0; j < dim; j++) w[j] = 1.0f + 0.5f * frand();
        fill(dy, N, 1.0f);
        f2d(x, xd, N);
        f2d(w, wd, dim);
        f2d(dy, Rd, N);
        CHECK_OK(K(rmsnorm_fwd, PAR_F32, rows, dim, x, w, eps, y, rstd));
        rms_ref(rows, dim, xd, wd, (double)eps, yd);
        CHECK_MSG(max_rel(y, yd, N) < 1e-5, "rmsnorm fwd [%lld,%lld] err %g", (long long)rows, (long long)dim,
                  max_rel(y, yd, N));
        for (r = 0; r < rows; r++) {
            double ms = 0.0;
            for (j = 0; j < dim; j++) ms += xd[r * dim + j] * xd[r * dim + j];
            CHECK(close_to(rstd[r], 1.0 / sqrt(ms / (double)dim + eps), 1e-5));
        }
        for (j = 0; j < dim; j++) dw[j] = 0.25f; /* dw accumulates */
        CHECK_OK(K(rmsnorm_bwd, PAR_F32, rows, dim, x, w, rstd, dy, dx, dw));
        ctx.rows = rows;
        ctx.dim = dim;
        ctx.x = xd;
        ctx.w = wd;
        ctx.R = Rd;
        ctx.eps = eps;
        ctx.wrt = 0;
        fd_grad(rms_loss, &ctx, xd, N, fd);
        ctx.wrt = 1;
        fd_grad(rms_loss, &ctx, wd, dim, fdw);
        for (j = 0; j < dim; j++) fdw[j] += 0.25;
        CHECK_MSG(max_rel(dx, fd, N) < 1e-4, "rmsnorm dx err %g", max_rel(dx, fd, N));
        CHECK_MSG(max_rel(dw, fdw, dim) < 1e-4, "rmsnorm dw err %g", max_rel(dw, fdw, dim));
        free(x), free(w), free(y), free(rstd), free(dy), free(dx), free(dw);
        free(xd), free(wd), free(yd), free(Rd), free(fd), free(fdw);
    }
    CHECK_ERR(K(rmsnorm_fwd, PAR_F32, 2, 0, NULL, NULL, 1e-5f, NULL, NULL), PAR_EINVAL, "rmsnorm_fwd: dim is 0");
}

/* --------------------------------------------------------------------- rope */

typedef struct {
    int64_t T, H, D;
    const int64_t *pos;
    double theta;
    const double *R;
} rope_ctx;

/* Written from the HF definition: q*cos + rotate_half(q)*sin with
   rotate_half(q) = cat(-q[d/2:], q[:d/2]) and cos/sin = cat(freqs, freqs). */
static void rope_ref(const rope_ctx *c, const double *x, double *y) {
    int64_t t, h, i, d = c->D;
    for (t = 0; t < c->T; t++)
        for (h = 0; h < c->H; h++)
            for (i = 0; i < d; i++) {
                const double *q = x + (t * c->H + h) * d;
                const double f = 1.0 / pow(c->theta, (double)(2 * (i % (d / 2))) / (double)d);
                const double a = (double)c->pos[t] * f;
                const double rot = i < d / 2 ? -q[i + d / 2] : q[i - d / 2];
                y[(t * c->H + h) * d + i] = q[i] * cos(a) + rot * sin(a);
            }
}
static double rope_loss(const double *v, void *vctx) {
    rope_ctx *c = (rope_ctx *)vctx;
    int64_t N = c->T * c->H * c->D, i;
    double *y = dalloc(N), L = 0.0;
    rope_ref(c, v, y);
    for (i = 0; i < N; i++) L += y[i] * c->R[i];
    free(y);
    return L;
}

static void test_rope(void) {
    static const int64_t shapes[][3] = {{1, 1, 2}, {5, 3, 8}, {7, 2, 34}, {4, 4, 128}};
    static const int64_t posv[] = {0, 1, 17, 4095, 3, 100000, 2};
    size_t s;
    for (s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        const int64_t T = shapes[s][0], H = shapes[s][1], D = shapes[s][2], N = T * H * D;
        float *x = falloc(N), *y = falloc(N), *dy = falloc(N), *dx = falloc(N);
        double *xd = dalloc(N), *yd = dalloc(N), *Rd = dalloc(N), *fd = dalloc(N);
        rope_ctx ctx;
        ctx.T = T, ctx.H = H, ctx.D = D, ctx.pos = posv, ctx.theta = s == 2 ? 500000.0 : 10000.0, ctx.R = Rd;
        fill(x, N, 1.0f);
        fill(dy, N, 1.0f);
        f2d(x, xd, N);
        f2d(dy, Rd, N);
        CHECK_OK(K(rope_fwd, PAR_F32, T, H, D, posv, (float)ctx.theta, x, y));
        rope_ref(&ctx, xd, yd);
        /* 1e-5: cos/sin computed in double then rounded, two f32 products and a sum */
        CHECK_MSG(max_rel(y, yd, N) < 1e-5, "rope fwd err %g", max_rel(y, yd, N));
        CHECK_OK(K(rope_fwd, PAR_F32, T, H, D, posv, (float)ctx.theta, x, x)); /* in place */
        CHECK(memcmp(x, y, (size_t)N * sizeof(float)) == 0);
        CHECK_OK(K(rope_bwd, PAR_F32, T, H, D, posv, (float)ctx.theta, dy, dx));
        fd_grad(rope_loss, &ctx, xd, N, fd);
        CHECK_MSG(max_rel(dx, fd, N) < 1e-4, "rope bwd err %g", max_rel(dx, fd, N));
        free(x), free(y), free(dy), free(dx), free(xd), free(yd), free(Rd), free(fd);
    }
    CHECK_ERR(K(rope_fwd, PAR_F32, 1, 1, 3, posv, 10000.0f, NULL, NULL), PAR_EINVAL, "rope_fwd: head_dim is 3");
}

/* ------------------------------------------------------------------- swiglu */

typedef struct {
    int64_t n;
    const double *g, *u, *R;
    int wrt;
} swi_ctx;
static double swi_loss(const double *v, void *vctx) {
    swi_ctx *c = (swi_ctx *)vctx;
    const double *g = c->wrt ? c->g : v, *u = c->wrt ? v : c->u;
    double L = 0.0;
    int64_t i;
    for (i = 0; i < c->n; i++) L += g[i] / (1.0 + exp(-g[i])) * u[i] * c->R[i];
    return L;
}

static void test_swiglu(void) {
    static const int64_t sizes[] = {1, 7, 33, 130};
    size_t s;
    for (s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        const int64_t n = sizes[s];
        float *g = falloc(n), *u = falloc(n), *h = falloc(n), *dh = falloc(n), *dg = falloc(n), *du = falloc(n);
        double *gd = dalloc(n), *ud = dalloc(n), *hd = dalloc(n), *Rd = dalloc(n), *fg = dalloc(n), *fu = dalloc(n);
        int64_t i;
        swi_ctx ctx;
        fill(g, n, 4.0f);
        fill(u, n, 2.0f);
        fill(dh, n, 1.0f);
        f2d(g, gd, n), f2d(u, ud, n), f2d(dh, Rd, n);
        for (i = 0; i < n; i++) hd[i] = gd[i] / (1.0 + exp(-gd[i])) * ud[i];
        CHECK_OK(K(swiglu_fwd, PAR_F32, n, g, u, h));
        CHECK_MSG(max_rel(h, hd, n) < 1e-5, "swiglu fwd err %g", max_rel(h, hd, n));
        CHECK_OK(K(swiglu_bwd, PAR_F32, n, g, u, dh, dg, du));
        ctx.n = n, ctx.g = gd, ctx.u = ud, ctx.R = Rd, ctx.wrt = 0;
        fd_grad(swi_loss, &ctx, gd, n, fg);
        ctx.wrt = 1;
        fd_grad(swi_loss, &ctx, ud, n, fu);
        CHECK_MSG(max_rel(dg, fg, n) < 1e-4, "swiglu dg err %g", max_rel(dg, fg, n));
        CHECK_MSG(max_rel(du, fu, n) < 1e-4, "swiglu du err %g", max_rel(du, fu, n));
        free(g), free(u), free(h), free(dh), free(dg), free(du);
        free(gd), free(ud), free(hd), free(Rd), free(fg), free(fu);
    }
}

/* ---------------------------------------------------------------- embedding */

static void test_embedding(void) {
    const int64_t V = 37, D = 5, T = 11;
    static const int32_t ids[11] = {0, 36, 5, 5, 12, 9, 10, 27, 28, 5, 19};
    static const int64_t starts[5] = {0, 10, 19, 28, 37}; /* 4 uneven shards */
    float *table = falloc(V * D), *out = falloc(T * D), *sum = falloc(T * D), *dout = falloc(T * D),
          *dt = falloc(V * D), *dts = falloc(V * D);
    double *ref = dalloc(V * D);
    int64_t t, j, s;
    int ok = 1;
    int32_t bad[1] = {-1};
    fill(table, V * D, 1.0f);
    fill(dout, T * D, 1.0f);
    CHECK_OK(K(embedding_fwd, PAR_F32, T, ids, table, V, D, 0, out));
    for (t = 0; t < T; t++)
        for (j = 0; j < D; j++) ok &= out[t * D + j] == table[ids[t] * D + j];
    CHECK_MSG(ok, "full-table gather");
    /* vocab-parallel: each shard sees only its rows; the sum of the outputs (an
       all-reduce) is the full lookup, and each shard's gradient is its slice */
    for (s = 0; s < 4; s++) {
        const int64_t st = starts[s], rows = starts[s + 1] - st;
        CHECK_OK(K(embedding_fwd, PAR_F32, T, ids, table + st * D, rows, D, st, out));
        for (j = 0; j < T * D; j++) sum[j] += out[j];
        CHECK_OK(K(embedding_bwd, PAR_F32, T, ids, dout, rows, D, st, dts + st * D));
    }
    ok = 1;
    for (t = 0; t < T; t++)
        for (j = 0; j < D; j++) ok &= sum[t * D + j] == table[ids[t] * D + j];
    CHECK_MSG(ok, "sharded gather sums to the full lookup");
    for (j = 0; j < V * D; j++) dt[j] = 0.5f, ref[j] = 0.5; /* accumulate on top of 0.5 */
    CHECK_OK(K(embedding_bwd, PAR_F32, T, ids, dout, V, D, 0, dt));
    for (t = 0; t < T; t++)
        for (j = 0; j < D; j++) ref[ids[t] * D + j] += dout[t * D + j];
    CHECK_MSG(max_rel(dt, ref, V * D) < 1e-6, "embedding scatter-add (repeated id 5) err %g", max_rel(dt, ref, V * D));
    for (j = 0; j < V * D; j++) ref[j] -= 0.5;
    CHECK_MSG(max_rel(dts, ref, V * D) < 1e-6, "sharded scatter-add err %g", max_rel(dts, ref, V * D));
    CHECK_ERR(K(embedding_fwd, PAR_F32, 1, bad, table, V, D, 0, out), PAR_EINVAL, "negative id");
    free(table), free(out), free(sum), free(dout), free(dt), free(dts), free(ref);
}

/* ------------------------------------------------------------ cross-entropy */

typedef struct {
    int64_t rows, V;
    const int32_t *tg;
    double scale;
} xent_ctx;
static void xent_ref(int64_t rows, int64_t V, const double *x, const int32_t *tg, double *loss) {
    int64_t r, j;
    for (r = 0; r < rows; r++) {
        double s = 0.0;
        if (tg[r] < 0) {
            loss[r] = 0.0;
            continue;
        }
        for (j = 0; j < V; j++) s += exp(x[r * V + j]);
        loss[r] = log(s) - x[r * V + tg[r]];
    }
}
static double xent_loss(const double *v, void *vctx) {
    xent_ctx *c = (xent_ctx *)vctx;
    double *l = dalloc(c->rows), L = 0.0;
    int64_t r;
    xent_ref(c->rows, c->V, v, c->tg, l);
    for (r = 0; r < c->rows; r++) L += c->scale * l[r];
    free(l);
    return L;
}

static void test_xent(void) {
    static const int64_t shapes[][2] = {{1, 1}, {3, 7}, {5, 37}, {4, 130}};
    size_t s;
    for (s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        const int64_t rows = shapes[s][0], V = shapes[s][1], N = rows * V;
        float *x = falloc(N), *loss = falloc(rows), *dl = falloc(N), *loss2 = falloc(rows), *dl2 = falloc(N);
        double *xd = dalloc(N), *ld = dalloc(rows), *fd = dalloc(N);
        int32_t *tg = (int32_t *)calloc((size_t)rows, sizeof(int32_t));
        int64_t r, j;
        xent_ctx ctx;
        fill(x, N, 8.0f); /* logits up to +-8: exp needs the max shift in f32 */
        for (r = 0; r < rows; r++) tg[r] = (int32_t)((r * 7 + 3) % V);
        if (rows > 2) tg[1] = -100; /* ignored row */
        f2d(x, xd, N);
        xent_ref(rows, V, xd, tg, ld);
        CHECK_OK(K(xent, PAR_F32, rows, V, x, tg, loss, dl, 0.5f));
        CHECK_MSG(max_rel(loss, ld, rows) < 1e-5, "xent loss err %g", max_rel(loss, ld, rows));
        ctx.rows = rows, ctx.V = V, ctx.tg = tg, ctx.scale = 0.5;
        fd_grad(xent_loss, &ctx, xd, N, fd);
        CHECK_MSG(max_rel(dl, fd, N) < 1e-4, "xent dlogits err %g", max_rel(dl, fd, N));
        /* forward only, and in place */
        CHECK_OK(K(xent, PAR_F32, rows, V, x, tg, loss2, NULL, 0.5f));
        CHECK(memcmp(loss, loss2, (size_t)rows * sizeof(float)) == 0);
        memcpy(dl2, x, (size_t)N * sizeof(float));
        CHECK_OK(K(xent, PAR_F32, rows, V, dl2, tg, loss2, dl2, 0.5f));
        CHECK(memcmp(dl, dl2, (size_t)N * sizeof(float)) == 0);

        /* vocab split over 4 shards (uneven, some may be empty for tiny V):
           assemble with max / sum "all-reduces" done here by hand */
        if (V >= 4) {
            int64_t st[5], k;
            float *gmax = falloc(rows), *gsum = falloc(rows), *tgt = falloc(rows), *tmp = falloc(rows),
                  *lsplit = falloc(rows), *dsplit = falloc(N);
            double *dd = dalloc(N);
            for (k = 0; k <= 4; k++) st[k] = (V * k + 2) / 4 - (k == 4 ? 0 : 0);
            st[0] = 0, st[4] = V;
            for (r = 0; r < rows; r++) gmax[r] = -INFINITY;
            for (k = 0; k < 4; k++) { /* shards hold contiguous column copies */
                const int64_t vl = st[k + 1] - st[k];
                float *xs = falloc(rows * vl);
                for (r = 0; r < rows; r++) memcpy(xs + r * vl, x + r * V + st[k], (size_t)vl * sizeof(float));
                CHECK_OK(K(xent_local_max, PAR_F32, rows, vl, xs, tmp));
                for (r = 0; r < rows; r++) gmax[r] = tmp[r] > gmax[r] ? tmp[r] : gmax[r];
                free(xs);
            }
            for (k = 0; k < 4; k++) {
                const int64_t vl = st[k + 1] - st[k];
                float *xs = falloc(rows * vl), *ds = falloc(rows * vl);
                for (r = 0; r < rows; r++) memcpy(xs + r * vl, x + r * V + st[k], (size_t)vl * sizeof(float));
                CHECK_OK(K(xent_local_sumexp, PAR_F32, rows, vl, xs, gmax, tmp));
                for (r = 0; r < rows; r++) gsum[r] += tmp[r];
                CHECK_OK(K(xent_local_target, PAR_F32, rows, vl, xs, tg, st[k], tmp));
                for (r = 0; r < rows; r++) tgt[r] += tmp[r];
                free(xs), free(ds);
            }
            CHECK_OK(K(xent_loss_from_pieces, rows, gmax, gsum, tgt, tg, lsplit));
            CHECK_MSG(max_rel(lsplit, ld, rows) < 1e-5, "split loss err %g", max_rel(lsplit, ld, rows));
            for (k = 0; k < 4; k++) {
                const int64_t vl = st[k + 1] - st[k];
                float *xs = falloc(rows * vl);
                for (r = 0; r < rows; r++) memcpy(xs + r * vl, x + r * V + st[k], (size_t)vl * sizeof(float));
                CHECK_OK(K(xent_bwd_split, PAR_F32, rows, vl, xs, tg, st[k], gmax, gsum, 0.5f, xs)); /* in place */
                for (r = 0; r < rows; r++) memcpy(dsplit + r * V + st[k], xs + r * vl, (size_t)vl * sizeof(float));
                free(xs);
            }
            f2d(dl, dd, N);
            CHECK_MSG(max_rel(dsplit, dd, N) < 1e-6, "split dlogits vs full err %g", max_rel(dsplit, dd, N));
            CHECK_MSG(max_rel(dsplit, fd, N) < 1e-4, "split dlogits vs FD err %g", max_rel(dsplit, fd, N));
            free(gmax), free(gsum), free(tgt), free(tmp), free(lsplit), free(dsplit), free(dd);
        }
        for (j = 0; j < 1; j++) tg[0] = (int32_t)V;
        CHECK_ERR(K(xent, PAR_F32, rows, V, x, tg, loss, dl, 1.0f), PAR_EINVAL, "outside the vocab");
        free(x), free(loss), free(dl), free(loss2), free(dl2), free(xd), free(ld), free(fd), free(tg);
    }
}

/* -------------------------------------------------------------------- adamw */

static void test_adamw(void) {
    /* Hand-computed two-step reference for one scalar: lr 0.1, betas (0.9, 0.999),
       eps 1e-8, wd 0.01, p0 = 1, grads 0.5 then -0.25.
       step 1: p = 1 * (1 - 0.001) = 0.999; m = 0.05; v = 0.00025;
               mhat = 0.5, vhat = 0.25, p -= 0.1 * 0.5 / (0.5 + 1e-8) -> 0.899000002
       step 2: p = 0.899000002 * 0.999; m = 0.02; v = 0.00031225;
               mhat = 0.02 / 0.19, vhat = 0.00031225 / 0.001999 -> p = 0.8714672987 */
    float p = 1.0f, m = 0.0f, v = 0.0f, g1 = 0.5f, g2 = -0.25f;
    CHECK_OK(K(adamw, 1, &p, &g1, &m, &v, 0.1f, 0.9f, 0.999f, 1e-8f, 0.01f, 1));
    CHECK_MSG(close_to(p, 0.899000002, 1e-6) && close_to(m, 0.05, 1e-6) && close_to(v, 0.00025, 1e-6),
              "step 1: p=%.9g m=%.9g v=%.9g", (double)p, (double)m, (double)v);
    CHECK_OK(K(adamw, 1, &p, &g2, &m, &v, 0.1f, 0.9f, 0.999f, 1e-8f, 0.01f, 2));
    /* 1e-6 relative: a handful of f32 ops on O(1) values */
    CHECK_MSG(close_to(p, 0.8714672987058463, 1e-6) && close_to(m, 0.02, 1e-6) && close_to(v, 0.00031225, 1e-6),
              "step 2: p=%.9g m=%.9g v=%.9g", (double)p, (double)m, (double)v);
    /* vector of 33 values, three steps, against a double reference */
    {
        const int64_t n = 33;
        float *pf = falloc(n), *gf = falloc(n), *mf = falloc(n), *vf = falloc(n);
        double *pd = dalloc(n), *md = dalloc(n), *vd = dalloc(n);
        int64_t i, t;
        fill(pf, n, 1.0f);
        f2d(pf, pd, n);
        for (t = 1; t <= 3; t++) {
            fill(gf, n, 0.1f);
            CHECK_OK(K(adamw, n, pf, gf, mf, vf, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, t));
            for (i = 0; i < n; i++) {
                double gd = gf[i];
                pd[i] -= 1e-3 * 0.1 * pd[i];
                md[i] = 0.9 * md[i] + 0.1 * gd;
                vd[i] = 0.95 * vd[i] + 0.05 * gd * gd;
                pd[i] -= 1e-3 * (md[i] / (1 - pow(0.9, (double)t))) / (sqrt(vd[i] / (1 - pow(0.95, (double)t))) + 1e-8);
            }
        }
        CHECK_MSG(max_rel(pf, pd, n) < 1e-6, "adamw vector err %g", max_rel(pf, pd, n));
        free(pf), free(gf), free(mf), free(vf), free(pd), free(md), free(vd);
    }
    CHECK_ERR(K(adamw, 1, &p, &g1, &m, &v, 0.1f, 0.9f, 0.999f, 1e-8f, 0.0f, 0), PAR_EINVAL, "adamw: step is 0");
}

/* --------------------------------------------------------------- reductions */

static void test_reductions(void) {
    static const int64_t sizes[] = {0, 1, 7, 1001};
    size_t s;
    for (s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        const int64_t n = sizes[s];
        float *x = falloc(n), *y = falloc(n), *y0 = falloc(n);
        double *ref = dalloc(n), ss = -1.0, want = 0.0;
        int64_t i;
        fill(x, n, 3.0f);
        fill(y0, n, 1.0f);
        memcpy(y, y0, (size_t)n * sizeof(float));
        CHECK_OK(K(axpy, PAR_F32, n, -0.75f, x, y));
        for (i = 0; i < n; i++) ref[i] = y0[i] - 0.75 * x[i];
        CHECK(max_rel(y, ref, n) < 1e-6);
        CHECK_OK(K(scale, n, 1.5f, y));
        for (i = 0; i < n; i++) ref[i] *= 1.5;
        CHECK(max_rel(y, ref, n) < 1e-6);
        CHECK_OK(K(sumsq, n, x, &ss));
        for (i = 0; i < n; i++) want += (double)x[i] * x[i];
        CHECK(close_to(ss, want, 1e-12)); /* both double: only summation order can differ */
        free(x), free(y), free(y0), free(ref);
    }
    CHECK_ERR(K(sumsq, 3, NULL, NULL), PAR_EINVAL, "sumsq: out is NULL");
}

/* convert: to bf16 and f16 by round to nearest even (ties to the even
   mantissa), past the range to inf, nan kept, signed zero kept; widening
   exact. Expected bit patterns worked out from the formats. */
static void test_convert(void) {
    static const float in[] = {1.0f, 1.00390625f /* 1 + 2^-8: a bf16 tie, to even 1.0; f16 exact */,
                               1.01171875f /* 1 + 3 x 2^-8: a bf16 tie, to even 1 + 4 x 2^-8 */, -0.0f,
                               131008.0f /* 0x47fff000: bf16 rounds up to 2^17; f16 overflows */,
                               1e30f /* 0x7149f2ca: up */, -2.5f, 0.0009765625f /* 2^-10 */,
                               1.00048828125f /* 1 + 2^-11: an f16 tie, to even 1.0 */,
                               1.00146484375f /* 1 + 3 x 2^-11: an f16 tie, to even 1 + 2^-9 */};
    static const uint16_t want_bf16[] = {0x3f80, 0x3f80, 0x3f82, 0x8000, 0x4800, 0x714a, 0xc020, 0x3a80, 0x3f80, 0x3f80};
    static const uint16_t want_f16[] = {0x3c00, 0x3c04, 0x3c0c, 0x8000, 0x7c00, 0x7c00, 0xc100, 0x1400, 0x3c00, 0x3c02};
    const int64_t n = (int64_t)(sizeof in / sizeof in[0]);
    uint16_t got[16];
    float back[16], nan_in = NAN;
    par_compute_table t;
    int64_t i;
    int ok = 1;
    CHECK_OK(par_compute_cpu(NULL, &t));
    CHECK_OK(t.convert(t.user, n, PAR_F32, in, PAR_BF16, got));
    for (i = 0; i < n; i++) ok &= got[i] == want_bf16[i];
    CHECK_MSG(ok, "f32 -> bf16: %04x %04x %04x %04x %04x %04x %04x %04x", got[0], got[1], got[2], got[3], got[4], got[5],
              got[6], got[7]);
    CHECK_OK(t.convert(t.user, n, PAR_BF16, got, PAR_F32, back));
    for (i = 0, ok = 1; i < n; i++) {
        uint32_t u;
        memcpy(&u, &back[i], 4);
        ok &= u == (uint32_t)want_bf16[i] << 16; /* widening appends zeros */
    }
    CHECK_MSG(ok, "bf16 -> f32 is not exact");
    CHECK_OK(t.convert(t.user, n, PAR_F32, in, PAR_F16, got));
    for (i = 0, ok = 1; i < n; i++) ok &= got[i] == want_f16[i];
    CHECK_MSG(ok, "f32 -> f16: %04x %04x %04x %04x %04x %04x %04x %04x", got[0], got[1], got[2], got[3], got[4], got[5],
              got[6], got[7]);
    CHECK_OK(t.convert(t.user, 1, PAR_F32, &nan_in, PAR_BF16, got));
    CHECK_OK(t.convert(t.user, 1, PAR_F32, &nan_in, PAR_F16, got + 1));
    CHECK_MSG((got[0] & 0x7f80) == 0x7f80 && (got[0] & 0x7f) && (got[1] & 0x7c00) == 0x7c00 && (got[1] & 0x3ff),
              "nan: bf16 %04x, f16 %04x", got[0], got[1]);
    CHECK_OK(t.convert(t.user, n, PAR_F16, want_f16, PAR_BF16, got)); /* through f32: 1 + 2^-10 rounds to 1.0 */
    CHECK_MSG(got[0] == 0x3f80 && got[1] == 0x3f80 && got[6] == 0xc020, "f16 -> bf16: %04x %04x %04x", got[0], got[1], got[6]);
    CHECK_ERR(t.convert(t.user, 1, PAR_I32, in, PAR_F32, back), PAR_EINVAL, "convert: i32 to f32: only f32, bf16 and f16 convert");
    CHECK_ERR(t.convert(t.user, -1, PAR_F32, in, PAR_BF16, got), PAR_EINVAL, "convert: n is -1");
    CHECK_ERR(t.convert(t.user, 1, PAR_F32, NULL, PAR_BF16, got), PAR_EINVAL, "convert: src is NULL");
    CHECK_OK(t.convert(t.user, 0, PAR_F32, NULL, PAR_BF16, NULL));
    t.destroy(t.user);
}

/* ------------------------------------------------- gemm: kernels and threads */

static void fill_big(float *x, int64_t n) { fill(x, n, 1.0f); }

/* Every micro-kernel this CPU supports, through the private single-threaded
   driver, on shapes that hit every edge tile (m, n not multiples of 6/8/32),
   several k blocks (k > 256), the stack-buffer path (small) and the heap path. */
static void test_gemm_isas(void) {
    static const int64_t shapes[][3] = {{1, 1, 1}, {7, 33, 130}, {13, 9, 5}, {17, 65, 300}, {100, 70, 513}};
    const par__cpu_gemm_isa *isa[4];
    int ni = par__cpu_gemm_isas(isa), q, ta, tb;
    size_t s;
    double worst = 0.0;
    CHECK(ni >= 1 && isa[ni - 1] == &par__cpu_isa_generic);
    for (q = 0; q < ni; q++) {
        int bad = 0;
        for (s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
            for (ta = 0; ta < 2; ta++)
                for (tb = 0; tb < 2; tb++) {
                    const int64_t m = shapes[s][0], n = shapes[s][1], k = shapes[s][2];
                    const int64_t lda = (ta ? m : k) + 1, ldb = (tb ? k : n) + 3, ldc = n + 2;
                    float *A = falloc((ta ? k : m) * lda), *B = falloc((tb ? n : k) * ldb), *C = falloc(m * ldc),
                          *C0 = falloc(m * ldc);
                    fill(A, (ta ? k : m) * lda, 1.0f);
                    fill(B, (tb ? n : k) * ldb, 1.0f);
                    fill(C0, m * ldc, 1.0f);
                    memcpy(C, C0, (size_t)(m * ldc) * sizeof(float));
                    par__cpu_sgemm_isa(isa[q], ta, tb, m, n, k, -0.5f, A, lda, B, ldb, 1.5f, C, ldc);
                    bad += !gemm_ok(ta, tb, m, n, k, -0.5f, A, lda, B, ldb, 1.5f, C0, C, ldc, &worst);
                    free(A), free(B), free(C), free(C0);
                }
        CHECK_MSG(bad == 0, "micro-kernel %s: %d wrong shapes", isa[q]->name, bad);
        printf("gemm micro-kernel %s: checked\n", isa[q]->name);
    }
    /* the internal entry point used by the attention kernels (beta = 0 must not read C) */
    {
        const int64_t m = 37, n = 41, k = 70;
        float *A = falloc(m * k), *B = falloc(n * k), *C = falloc(m * n), *C0 = falloc(m * n);
        int64_t i;
        fill(A, m * k, 1.0f);
        fill(B, n * k, 1.0f);
        for (i = 0; i < m * n; i++) C[i] = NAN;
        par__cpu_sgemm(0, 1, m, n, k, 0.25f, A, k, B, k, 0.0f, C, n);
        CHECK_MSG(gemm_ok(0, 1, m, n, k, 0.25f, A, k, B, k, 0.0f, C0, C, n, &worst), "par__cpu_sgemm NT");
        free(A), free(B), free(C), free(C0);
    }
}

/* threads = 3 against threads = 1: bitwise equal, and right against the reference.
   Shapes are above the multithreading threshold: row split (m >= n), column
   split (m < n), and a batch that covers the workers (round robin). */
static void test_gemm_threads(par_compute_table *t1, par_compute_table *t3) {
    static const int64_t shapes[][4] = {{301, 203, 150, 1}, {45, 1401, 140, 1}, {130, 129, 131, 4}, {96, 100, 900, 2}};
    size_t s;
    int ta, tb;
    double worst = 0.0;
    for (s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (ta = 0; ta < 2; ta++)
            for (tb = 0; tb < 2; tb++) {
                const int64_t m = shapes[s][0], n = shapes[s][1], k = shapes[s][2], batch = shapes[s][3];
                const int64_t lda = (ta ? m : k) + 1, ldb = (tb ? k : n), ldc = n + 5;
                const int64_t sa = (ta ? k : m) * lda, sb = ((tb ? n : k) * ldb) * (s == 2 ? 0 : 1), sc = m * ldc + 3;
                float *A = falloc(sa * batch), *B = falloc((tb ? n : k) * ldb * batch), *C1 = falloc(sc * batch),
                      *C3 = falloc(sc * batch), *C0 = falloc(sc * batch);
                int64_t bi;
                int ok = 1;
                /* each shape must be big enough for the pool, or this tests nothing */
                CHECK_MSG((batch >= 3 ? batch : 1) * m * n * k >= PAR__CPU_GEMM_MT_MIN, "shape %d is below the "
                          "multithreading threshold", (int)s);
                fill_big(A, sa * batch);
                fill_big(B, (tb ? n : k) * ldb * batch);
                fill(C0, sc * batch, 1.0f);
                memcpy(C1, C0, (size_t)(sc * batch) * sizeof(float));
                memcpy(C3, C0, (size_t)(sc * batch) * sizeof(float));
                T_ = t1;
                CHECK_OK(gemm_sb(ta, tb, m, n, k, 0.5f, A, lda, sa, B, ldb, sb, -1.0f, C1, ldc, sc, batch));
                T_ = t3;
                CHECK_OK(gemm_sb(ta, tb, m, n, k, 0.5f, A, lda, sa, B, ldb, sb, -1.0f, C3, ldc, sc, batch));
                CHECK_MSG(memcmp(C1, C3, (size_t)(sc * batch) * sizeof(float)) == 0,
                          "threads 3 != threads 1 (%c%c m=%lld n=%lld k=%lld batch=%lld)", ta ? 'T' : 'N',
                          tb ? 'T' : 'N', (long long)m, (long long)n, (long long)k, (long long)batch);
                for (bi = 0; bi < batch; bi++)
                    ok &= gemm_ok(ta, tb, m, n, k, 0.5f, A + bi * sa, lda, B + bi * sb, ldb, -1.0f, C0 + bi * sc,
                                  C3 + bi * sc, ldc, &worst);
                CHECK_MSG(ok, "threaded gemm vs reference (%c%c m=%lld n=%lld)", ta ? 'T' : 'N', tb ? 'T' : 'N',
                          (long long)m, (long long)n);
                free(A), free(B), free(C1), free(C3), free(C0);
            }
    T_ = t1;
    printf("threaded gemm: worst error %.3f of the bound\n", worst);
}

/* Zero leading dims are tight, batch 0 is 1; every bad argument is named. */
static void test_gemm_desc(void) {
    float a[64], b[64], c[64], c0[64];
    double worst = 0.0;
    par_gemm_desc d;
    int i;
    fill(a, 64, 1.0f);
    fill(b, 64, 1.0f);
    fill(c0, 64, 1.0f);
    memcpy(c, c0, sizeof c);
    memset(&d, 0, sizeof d);
    d.transa = 1, d.m = 3, d.n = 5, d.k = 4, d.alpha = 1.0f, d.beta = 0.5f; /* A stored 4 x 3, tight */
    CHECK_OK(T_->gemm(T_->user, &d, a, b, c));
    CHECK(gemm_ok(1, 0, 3, 5, 4, 1.0f, a, 3, b, 5, 0.5f, c0, c, 5, &worst));
#define GEMM_ERR(field, value, status, needle)                 \
    do {                                                       \
        par_gemm_desc e = d;                                   \
        e.field = value;                                       \
        CHECK_ERR(T_->gemm(T_->user, &e, a, b, c), status, needle); \
    } while (0)
    GEMM_ERR(a_type, PAR_I64, PAR_EUNSUPPORTED, "a_type i64");
    GEMM_ERR(c_type, PAR_F16, PAR_EUNSUPPORTED, "c_type f16 with a_type f32");
    GEMM_ERR(transa, 2, PAR_EINVAL, "transa is 2");
    GEMM_ERR(transb, -1, PAR_EINVAL, "transb is -1");
    GEMM_ERR(m, -1, PAR_EINVAL, "m is -1");
    GEMM_ERR(n, -2, PAR_EINVAL, "n is -2");
    GEMM_ERR(k, -3, PAR_EINVAL, "k is -3");
    GEMM_ERR(lda, 2, PAR_EINVAL, "lda is 2");
    GEMM_ERR(ldb, 4, PAR_EINVAL, "ldb is 4");
    GEMM_ERR(ldc, 4, PAR_EINVAL, "ldc is 4");
    GEMM_ERR(lda, -1, PAR_EINVAL, "lda is -1");
    GEMM_ERR(batch, -1, PAR_EINVAL, "batch is -1");
    GEMM_ERR(stride_a, -1, PAR_EINVAL, "stride_a is -1");
    GEMM_ERR(stride_b, -1, PAR_EINVAL, "stride_b is -1");
    GEMM_ERR(stride_c, -1, PAR_EINVAL, "stride_c is -1");
    {
        par_gemm_desc e = d;
        e.batch = 2, e.stride_c = 14; /* needs (3-1)*5+5 = 15 */
        CHECK_ERR(T_->gemm(T_->user, &e, a, b, c), PAR_EINVAL, "stride_c is 14");
    }
    CHECK_ERR(T_->gemm(T_->user, NULL, a, b, c), PAR_EINVAL, "desc is NULL");
    CHECK_ERR(T_->gemm(T_->user, &d, NULL, b, c), PAR_EINVAL, "a is NULL");
    CHECK_ERR(T_->gemm(T_->user, &d, a, NULL, c), PAR_EINVAL, "b is NULL");
    CHECK_ERR(T_->gemm(T_->user, &d, a, b, NULL), PAR_EINVAL, "c is NULL");
    /* m = 0: nothing to do, NULLs fine */
    {
        par_gemm_desc e = d;
        e.m = 0;
        CHECK_OK(T_->gemm(T_->user, &e, NULL, NULL, NULL));
    }
    for (i = 0; i < 64; i++) CHECK(c0[i] == c0[i]); /* inputs untouched by failing calls: no NaN crept in */
#undef GEMM_ERR
}

/* ------------------------------------------------------------ memory hooks */

static void test_memory(void) {
    par_compute_table t;
    par_mem_report r;
    void *p1 = NULL, *p2 = NULL, *p3 = NULL;
    char src[100], dst[100], grid[5 * 16];
    int i, zero = 1;
    CHECK_OK(par_compute_cpu(NULL, &t));
    CHECK_OK(t.memory_report(t.user, &r));
    CHECK(r.current_total == 0 && r.peak_total == 0);
    CHECK_OK(t.alloc(t.user, 1000, PAR_MEM_PARAMS, &p1));
    CHECK_OK(t.alloc(t.user, 300, PAR_MEM_ACTIVATIONS, &p2));
    CHECK(p1 && ((uintptr_t)p1 & 63) == 0 && p2 && ((uintptr_t)p2 & 63) == 0);
    for (i = 0; i < 1000; i++) zero &= ((unsigned char *)p1)[i] == 0;
    CHECK_MSG(zero, "alloc must zero-fill");
    memset(p1, 0xAB, 1000); /* the whole block is writable (ASan checks) */
    CHECK_OK(t.memory_report(t.user, &r));
    CHECK_INT(r.current[PAR_MEM_PARAMS], 1000);
    CHECK_INT(r.current[PAR_MEM_ACTIVATIONS], 300);
    CHECK_INT(r.current_total, 1300);
    t.free(t.user, p2);
    CHECK_OK(t.alloc(t.user, 200, PAR_MEM_ACTIVATIONS, &p3));
    CHECK_OK(t.memory_report(t.user, &r));
    CHECK_INT(r.current[PAR_MEM_ACTIVATIONS], 200);
    CHECK_INT(r.peak[PAR_MEM_ACTIVATIONS], 300);
    CHECK_INT(r.peak_total, 1300);
    CHECK_INT(r.current_total, 1200);
    CHECK_INT(r.current[PAR_MEM_GRADS], 0);
    t.free(t.user, p1);
    t.free(t.user, p3);
    t.free(t.user, NULL); /* no-op */
    CHECK_OK(t.memory_report(t.user, &r));
    CHECK_INT(r.current_total, 0);
    CHECK_INT(r.peak[PAR_MEM_PARAMS], 1000);
    CHECK_ERR(t.alloc(t.user, 8, PAR_MEM_CATEGORY_COUNT, &p1), PAR_EINVAL, "category is 6");
    CHECK_ERR(t.alloc(t.user, 8, PAR_MEM_PARAMS, NULL), PAR_EINVAL, "ptr is NULL");
    CHECK_ERR(t.alloc(t.user, (size_t)-1, PAR_MEM_PARAMS, &p1), PAR_ENOMEM, "too large");
    CHECK_ERR(t.memory_report(t.user, NULL), PAR_EINVAL, "report is NULL");
    /* the built-in GEMM's packing space shows up as workspace */
    {
        float a[4] = {1, 2, 3, 4}, c[4];
        par_gemm_desc d;
        memset(&d, 0, sizeof d);
        d.m = d.n = d.k = 2, d.alpha = 1.0f;
        CHECK_OK(t.gemm(t.user, &d, a, a, c));
        CHECK(c[0] == 7.0f && c[1] == 10.0f && c[2] == 15.0f && c[3] == 22.0f);
        CHECK_OK(t.memory_report(t.user, &r));
#ifdef PARALLEL_WITH_CBLAS
        CHECK(r.current_total == 0); /* cblas_sgemm packs in its own memory */
#else
        CHECK(r.current[PAR_MEM_WORKSPACE] > 0 && r.current_total == r.current[PAR_MEM_WORKSPACE]);
#endif
    }
    /* copies */
    for (i = 0; i < 100; i++) src[i] = (char)i;
    CHECK_OK(t.memcpy(t.user, dst, src, 100, PAR_COPY_HOST_TO_DEVICE));
    CHECK(memcmp(dst, src, 100) == 0);
    CHECK_OK(t.memset(t.user, dst, 7, 50));
    CHECK(dst[0] == 7 && dst[49] == 7 && dst[50] == 50);
    memset(grid, 0, sizeof grid);
    CHECK_OK(t.memcpy_2d(t.user, grid + 1, 16, src, 10, 4, 5)); /* 5 rows of 4 bytes */
    for (i = 0, zero = 1; i < 5 * 16; i++) {
        int r_ = i / 16, c_ = i % 16;
        zero &= grid[i] == ((c_ >= 1 && c_ <= 4) ? src[r_ * 10 + c_ - 1] : 0);
    }
    CHECK_MSG(zero, "memcpy_2d layout");
    CHECK_ERR(t.memcpy(t.user, NULL, src, 4, PAR_COPY_HOST_TO_HOST), PAR_EINVAL, "dst is NULL");
    CHECK_ERR(t.memcpy(t.user, dst, src, 4, (par_copy_kind)9), PAR_EINVAL, "kind is 9");
    CHECK_ERR(t.memset(t.user, NULL, 0, 4), PAR_EINVAL, "dst is NULL");
    CHECK_ERR(t.memcpy_2d(t.user, grid, 3, src, 10, 4, 2), PAR_EINVAL, "dst_pitch 3");
    CHECK_ERR(t.memcpy_2d(t.user, grid, 16, src, 2, 4, 2), PAR_EINVAL, "src_pitch 2");
    CHECK_ERR(t.memcpy_2d(t.user, grid, 16, NULL, 10, 4, 2), PAR_EINVAL, "src is NULL");
    CHECK_OK(t.synchronize(t.user));
    t.destroy(t.user);
}

/* ----------------------------------------------------- table and arguments */

static void test_table(void) {
    par_compute_table t;
    par_cpu_desc desc;
    par_attn_desc ad;
    float x[4] = {0};
    CHECK_OK(par_compute_cpu(NULL, &t));
    CHECK_INT(t.version, PAR_COMPUTE_TABLE_VERSION);
    CHECK_STR(t.name, "cpu");
    CHECK(t.device_memory == 0 && t.stream == NULL && t.user != NULL);
    CHECK(t.alloc && t.free && t.memcpy && t.memset && t.memcpy_2d && t.memory_report && t.synchronize && t.gemm &&
          t.attention_fwd && t.attention_bwd && t.attention_merge && t.rmsnorm_fwd && t.rmsnorm_bwd && t.rope_fwd &&
          t.rope_bwd && t.swiglu_fwd && t.swiglu_bwd && t.embedding_fwd && t.embedding_bwd && t.xent &&
          t.xent_local_max && t.xent_local_sumexp && t.xent_local_target && t.xent_loss_from_pieces &&
          t.xent_bwd_split && t.adamw && t.scale && t.axpy && t.sumsq && t.convert && t.scratch_bound && t.destroy);
    /* attention wrappers: dtype and desc are the table's to check */
    memset(&ad, 0, sizeof ad);
    ad.batch = 1, ad.q_heads = 1, ad.kv_heads = 1, ad.head_dim = 4, ad.q_len = 1, ad.k_len = 1, ad.dtype = PAR_BF16;
    ad.dtype = PAR_I32;
    CHECK_ERR(t.attention_fwd(t.user, &ad, x, x, x, x, x), PAR_EUNSUPPORTED, "dtype i32");
    CHECK_ERR(t.attention_bwd(t.user, &ad, x, x, x, x, x, x, x, x, x, 0), PAR_EUNSUPPORTED, "dtype i32");
    CHECK_ERR(t.attention_merge(t.user, &ad, x, x, x, x), PAR_EUNSUPPORTED, "dtype i32");
    CHECK_ERR(t.attention_fwd(t.user, NULL, x, x, x, x, x), PAR_EINVAL, "desc is NULL");
    t.destroy(t.user);
    memset(&desc, 0, sizeof desc);
    desc.threads = -1;
    CHECK_ERR(par_compute_cpu(&desc, &t), PAR_EINVAL, "threads is -1");
    desc.threads = 1;
    CHECK_ERR(par_compute_cpu(&desc, NULL), PAR_EINVAL, "table is NULL");
}

/* One NULL pointer or bad size per kernel: the status and the argument's name. */
static void test_arg_errors(void) {
    float f[8] = {0};
    int32_t ids[2] = {0, 1};
    int64_t pos[2] = {0, 1};
    double dd;
    CHECK_ERR(K(rmsnorm_fwd, PAR_F32, -1, 4, f, f, 1e-5f, f, f), PAR_EINVAL, "rmsnorm_fwd: rows is -1");
    CHECK_ERR(K(rmsnorm_fwd, PAR_F32, 1, 4, f, NULL, 1e-5f, f, f), PAR_EINVAL, "rmsnorm_fwd: w is NULL");
    CHECK_ERR(K(rmsnorm_bwd, PAR_F32, 1, 4, f, f, NULL, f, f, f), PAR_EINVAL, "rmsnorm_bwd: rstd is NULL");
    CHECK_ERR(K(rmsnorm_bwd, PAR_F32, 1, 4, f, f, f, f, f, NULL), PAR_EINVAL, "rmsnorm_bwd: dw is NULL");
    CHECK_ERR(K(rope_fwd, PAR_F32, 1, 1, 4, NULL, 10000.0f, f, f), PAR_EINVAL, "rope_fwd: pos is NULL");
    CHECK_ERR(K(rope_fwd, PAR_F32, 1, 1, 4, pos, 0.0f, f, f), PAR_EINVAL, "rope_fwd: theta is 0");
    CHECK_ERR(K(rope_fwd, PAR_F32, -2, 1, 4, pos, 1.0f, f, f), PAR_EINVAL, "rope_fwd: tokens is -2");
    CHECK_ERR(K(rope_bwd, PAR_F32, 1, 1, 4, pos, 10000.0f, NULL, f), PAR_EINVAL, "rope_bwd: dy is NULL");
    CHECK_ERR(K(rope_bwd, PAR_F32, 1, 1, 4, pos, 10000.0f, f, NULL), PAR_EINVAL, "rope_bwd: dx is NULL");
    CHECK_ERR(K(swiglu_fwd, PAR_F32, 2, f, NULL, f), PAR_EINVAL, "swiglu_fwd: u is NULL");
    CHECK_ERR(K(swiglu_bwd, PAR_F32, -1, f, f, f, f, f), PAR_EINVAL, "swiglu_bwd: n is -1");
    CHECK_ERR(K(swiglu_bwd, PAR_F32, 2, f, f, f, f, NULL), PAR_EINVAL, "swiglu_bwd: du is NULL");
    CHECK_ERR(K(embedding_fwd, PAR_F32, 2, NULL, f, 2, 2, 0, f), PAR_EINVAL, "embedding_fwd: ids is NULL");
    CHECK_ERR(K(embedding_fwd, PAR_F32, 2, ids, f, 2, 0, 0, f), PAR_EINVAL, "embedding_fwd: dim is 0");
    CHECK_ERR(K(embedding_fwd, PAR_F32, 2, ids, f, 2, 2, -1, f), PAR_EINVAL, "embedding_fwd: start is -1");
    CHECK_ERR(K(embedding_bwd, PAR_F32, 2, ids, f, 2, 2, 0, NULL), PAR_EINVAL, "embedding_bwd: dtable is NULL");
    CHECK_ERR(K(xent, PAR_F32, 1, 0, f, ids, f, f, 1.0f), PAR_EINVAL, "xent: vocab is 0");
    CHECK_ERR(K(xent, PAR_F32, 1, 4, f, NULL, f, f, 1.0f), PAR_EINVAL, "xent: targets is NULL");
    CHECK_ERR(K(xent_local_max, PAR_F32, 1, 4, NULL, f), PAR_EINVAL, "xent_local_max: logits is NULL");
    CHECK_ERR(K(xent_local_sumexp, PAR_F32, 1, 4, f, NULL, f), PAR_EINVAL, "xent_local_sumexp: gmax is NULL");
    CHECK_ERR(K(xent_local_target, PAR_F32, 1, 4, f, ids, -3, f), PAR_EINVAL, "xent_local_target: start is -3");
    CHECK_ERR(K(xent_loss_from_pieces, 1, f, f, f, ids, NULL), PAR_EINVAL, "xent_loss_from_pieces: loss is NULL");
    CHECK_ERR(K(xent_bwd_split, PAR_F32, 1, 4, f, ids, 0, f, NULL, 1.0f, f), PAR_EINVAL, "xent_bwd_split: gsum is NULL");
    CHECK_ERR(K(adamw, 2, f, f, NULL, f, 0.1f, 0.9f, 0.99f, 1e-8f, 0.0f, 1), PAR_EINVAL, "adamw: m is NULL");
    CHECK_ERR(K(adamw, 2, f, f, f, f, 0.1f, 1.0f, 0.99f, 1e-8f, 0.0f, 1), PAR_EINVAL, "adamw: betas");
    CHECK_ERR(K(scale, -1, 1.0f, f), PAR_EINVAL, "scale: n is -1");
    CHECK_ERR(K(axpy, PAR_F32, 2, 1.0f, f, NULL), PAR_EINVAL, "axpy: y is NULL");
    CHECK_ERR(K(sumsq, 2, NULL, &dd), PAR_EINVAL, "sumsq: x is NULL");
    /* zero-size calls touch nothing and need no pointers */
    CHECK_OK(K(swiglu_fwd, PAR_F32, 0, NULL, NULL, NULL));
    CHECK_OK(K(sumsq, 0, NULL, &dd));
    CHECK(dd == 0.0);
}

/* ------------------------------------- row-parallel kernels: threads = 3 vs 1 */

/* The table fans elementwise and row kernels (and attention, by sequence) out
   over its threads in contiguous ranges; each range runs the same single-
   threaded code, so threads = 3 must equal threads = 1 bitwise. Sizes are large
   enough to fan out. */
static int same_bits(const float *a, const float *b, int64_t n) { return memcmp(a, b, (size_t)n * sizeof(float)) == 0; }

static void test_fan_out(par_compute_table *t1, par_compute_table *t3) {
    const int64_t rows = 700, dim = 96, n = rows * dim, heads = 6, hd = 16, V = 300;
    float *x = falloc(n), *w = falloc(dim), *y1 = falloc(n), *y3 = falloc(n), *r1 = falloc(rows), *r3 = falloc(rows);
    float *u = falloc(n), *z1 = falloc(n), *z3 = falloc(n), *lg = falloc(rows * V), *d1 = falloc(rows * V), *d3 = falloc(rows * V);
    float *p1 = falloc(n), *p3 = falloc(n), *m1 = falloc(n), *m3 = falloc(n), *v1 = falloc(n), *v3 = falloc(n);
    int32_t *tg = (int32_t *)calloc((size_t)rows, sizeof(int32_t));
    int64_t *pos = (int64_t *)calloc((size_t)rows, sizeof(int64_t)), i;
    fill(x, n, 1.0f), fill(w, dim, 1.0f), fill(u, n, 1.0f), fill(lg, rows * V, 3.0f);
    for (i = 0; i < rows; i++) tg[i] = (int32_t)((i * 37) % V), pos[i] = (i * 13) % 257;
    CHECK_OK(t1->rmsnorm_fwd(t1->user, PAR_F32, rows, dim, x, w, 1e-5f, y1, r1));
    CHECK_OK(t3->rmsnorm_fwd(t3->user, PAR_F32, rows, dim, x, w, 1e-5f, y3, r3));
    CHECK_MSG(same_bits(y1, y3, n) && same_bits(r1, r3, rows), "rmsnorm_fwd threads 3 != threads 1");
    CHECK_OK(t1->rope_fwd(t1->user, PAR_F32, rows, heads, hd, pos, 10000.0f, x, y1));
    CHECK_OK(t3->rope_fwd(t3->user, PAR_F32, rows, heads, hd, pos, 10000.0f, x, y3));
    CHECK_MSG(same_bits(y1, y3, rows * heads * hd), "rope_fwd threads 3 != threads 1");
    CHECK_OK(t1->rope_bwd(t1->user, PAR_F32, rows, heads, hd, pos, 10000.0f, x, y1));
    CHECK_OK(t3->rope_bwd(t3->user, PAR_F32, rows, heads, hd, pos, 10000.0f, x, y3));
    CHECK_MSG(same_bits(y1, y3, rows * heads * hd), "rope_bwd threads 3 != threads 1");
    CHECK_OK(t1->swiglu_fwd(t1->user, PAR_F32, n, x, u, y1));
    CHECK_OK(t3->swiglu_fwd(t3->user, PAR_F32, n, x, u, y3));
    CHECK_MSG(same_bits(y1, y3, n), "swiglu_fwd threads 3 != threads 1");
    CHECK_OK(t1->swiglu_bwd(t1->user, PAR_F32, n, x, u, w[0] > 2 ? x : u, y1, z1));
    CHECK_OK(t3->swiglu_bwd(t3->user, PAR_F32, n, x, u, w[0] > 2 ? x : u, y3, z3));
    CHECK_MSG(same_bits(y1, y3, n) && same_bits(z1, z3, n), "swiglu_bwd threads 3 != threads 1");
    CHECK_OK(t1->xent(t1->user, PAR_F32, rows, V, lg, tg, r1, d1, 0.5f));
    CHECK_OK(t3->xent(t3->user, PAR_F32, rows, V, lg, tg, r3, d3, 0.5f));
    CHECK_MSG(same_bits(r1, r3, rows) && same_bits(d1, d3, rows * V), "xent threads 3 != threads 1");
    memcpy(p1, x, (size_t)n * 4), memcpy(p3, x, (size_t)n * 4);
    for (i = 1; i <= 3; i++) {
        CHECK_OK(t1->adamw(t1->user, n, p1, u, m1, v1, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, i));
        CHECK_OK(t3->adamw(t3->user, n, p3, u, m3, v3, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, i));
    }
    CHECK_MSG(same_bits(p1, p3, n) && same_bits(m1, m3, n) && same_bits(v1, v3, n), "adamw threads 3 != threads 1");
    /* an error inside one kernel thread keeps its sentence */
    tg[rows - 3] = (int32_t)V;
    CHECK_ERR(t3->xent(t3->user, PAR_F32, rows, V, lg, tg, r3, d3, 0.5f), PAR_EINVAL, "outside the vocab");
    free(x), free(w), free(y1), free(y3), free(r1), free(r3), free(u), free(z1), free(z3), free(lg), free(d1), free(d3);
    free(p1), free(p3), free(m1), free(m3), free(v1), free(v3), free(tg), free(pos);
}

/* scratch_bound: after GEMMs with m, n, k each at most the query's, the packing
   space a fresh table reports is within the bound, for 1 and 3 threads; one
   single-threaded GEMM of exactly the bound's shape reaches it (tight). */
/* 16-bit GEMMs: A and B in bf16 or f16 (values decoded here from the
   formats), C in f32 (accumulated in f32: within f32 rounding of a double
   reference) or in the 16-bit type (alpha op(A) op(B) + beta C in f32,
   rounded once: at most one 16-bit ulp from the double reference rounded,
   and mostly equal to it); transposes, leading dims, a strided batch, beta
   reading a 16-bit C, 1 and 3 threads (row and column slices). */
static double dec16(par_dtype t, uint16_t h) { return half_value(t, h); }

/* A double rounded to bf16 / f16 by searching the neighbours' midpoints (independent of the library). */
static double round16(par_dtype t, double x) {
    const int e = x == 0 ? 0 : ilogb(x);
    const double ulp = ldexp(1.0, e - (t == PAR_BF16 ? 7 : 10));
    double q = floor(x / ulp), lo = q * ulp, r = x - lo;
    if (r > ulp / 2 || (r == ulp / 2 && fmod(q, 2.0) != 0)) lo += ulp;
    return lo;
}

static void test_gemm16(par_compute_table *t1, par_compute_table *t3) {
    static const par_dtype types[2] = {PAR_BF16, PAR_F16};
    static const struct { int ta, tb; int64_t m, n, k, batch; } shapes[] = {
        {0, 0, 7, 9, 13, 1}, {1, 0, 33, 17, 40, 1}, {0, 1, 130, 70, 65, 1}, {1, 1, 5, 300, 3, 2}, {0, 1, 260, 200, 160, 1}};
    int ti, th;
    size_t si;
    for (ti = 0; ti < 2; ti++)
        for (th = 0; th < 2; th++)
            for (si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
                const par_dtype t = types[ti];
                par_compute_table *tab = th ? t3 : t1;
                const int64_t m = shapes[si].m, n = shapes[si].n, k = shapes[si].k, nb = shapes[si].batch;
                const int64_t lda = (shapes[si].ta ? m : k) + 3, ldb = (shapes[si].tb ? k : n) + 1, ldc = n + 2;
                const int64_t sa = (shapes[si].ta ? k : m) * lda, sb = (shapes[si].tb ? n : k) * ldb, sc = m * ldc;
                uint16_t *A = (uint16_t *)calloc((size_t)(sa * nb), 2), *B = (uint16_t *)calloc((size_t)(sb * nb), 2);
                uint16_t *C16 = (uint16_t *)calloc((size_t)(sc * nb), 2);
                float *C32 = (float *)calloc((size_t)(sc * nb), 4);
                par_gemm_desc d;
                int64_t bi, i, j, p, off16 = 0, exact = 0, total = 0;
                double worst32 = 0;
                int ok16 = 1;
                for (i = 0; i < sa * nb; i++) A[i] = t == PAR_BF16 ? (uint16_t)(0x3c00 + (rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull) % 0x700) ^ (uint16_t)(i & 1 ? 0x8000 : 0)
                                                                     : (uint16_t)(0x3000 + (rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull) % 0xc00) ^ (uint16_t)(i & 1 ? 0x8000 : 0);
                for (i = 0; i < sb * nb; i++) B[i] = A[(i * 7) % (sa * nb)];
                for (i = 0; i < sc * nb; i++) C16[i] = A[(i * 5) % (sa * nb)];
                memset(&d, 0, sizeof d);
                d.transa = shapes[si].ta, d.transb = shapes[si].tb, d.m = m, d.n = n, d.k = k, d.alpha = 0.5f;
                d.lda = lda, d.ldb = ldb, d.ldc = ldc, d.stride_a = sa, d.stride_b = sb, d.stride_c = sc, d.batch = nb;
                d.a_type = t, d.c_type = PAR_F32, d.beta = 0.0f;
                CHECK_OK(tab->gemm(tab->user, &d, A, B, C32));
                d.c_type = t, d.beta = 0.25f;
                {
                    uint16_t *C0 = (uint16_t *)malloc((size_t)(sc * nb) * 2);
                    memcpy(C0, C16, (size_t)(sc * nb) * 2);
                    CHECK_OK(tab->gemm(tab->user, &d, A, B, C16));
                    for (bi = 0; bi < nb; bi++)
                        for (i = 0; i < m; i++)
                            for (j = 0; j < n; j++) {
                                double acc = 0, mag = 0, want, got;
                                for (p = 0; p < k; p++) {
                                    const double a = dec16(t, A[bi * sa + (shapes[si].ta ? p * lda + i : i * lda + p)]);
                                    const double b = dec16(t, B[bi * sb + (shapes[si].tb ? j * ldb + p : p * ldb + j)]);
                                    acc += a * b, mag += fabs(a * b);
                                }
                                {   /* f32 C: f32 accumulation of k products, each sum within an f32 ulp of the partial sums */
                                    const double g32 = C32[bi * sc + i * ldc + j], err = fabs(g32 - 0.5 * acc);
                                    const double rel = err / (1e-30 + k * 6e-8 * 0.5 * mag);
                                    if (rel > worst32) worst32 = rel;
                                }
                                want = round16(t, 0.5 * acc + 0.25 * dec16(t, C0[bi * sc + i * ldc + j]));
                                got = dec16(t, C16[bi * sc + i * ldc + j]);
                                total++, exact += got == want;
                                if (fabs(got - want) > fabs(round16(t, want * (1 + 1.0 / 64)) - want) + 1e-300) ok16 = 0;
                            }
                    for (bi = 0; bi < nb; bi++) /* the padding between rows is untouched */
                        for (i = 0; i < m; i++)
                            for (j = n; j < ldc && bi * sc + i * ldc + j < sc * nb; j++)
                                off16 += C16[bi * sc + i * ldc + j] != C0[bi * sc + i * ldc + j];
                    free(C0);
                }
                CHECK_MSG(worst32 <= 1.0, "%s %lldx%lldx%lld: an f32 C is off by %g x k f32 ulps", par_dtype_name(t),
                          (long long)m, (long long)n, (long long)k, worst32);
                CHECK_MSG(ok16 && exact * 100 >= total * 95, "%s %lldx%lldx%lld (%d thread(s)): %lld of %lld exactly "
                          "rounded, every one within an ulp: %d", par_dtype_name(t), (long long)m, (long long)n,
                          (long long)k, th ? 3 : 1, (long long)exact, (long long)total, ok16);
                CHECK_MSG(off16 == 0, "%s: the rows' padding changed", par_dtype_name(t));
                free(A), free(B), free(C16), free(C32);
            }
    {   /* the workspace a 16-bit GEMM takes (packing and the staging of C) is within scratch_bound */
        par_compute_table t;
        par_cpu_desc cd;
        par_mem_report r;
        par_scratch_query q;
        par_gemm_desc d;
        size_t bound = 0;
        const int64_t m = 300, n = 200, k = 150;
        uint16_t *A = (uint16_t *)calloc((size_t)(m * k), 2), *B = (uint16_t *)calloc((size_t)(k * n), 2);
        uint16_t *C = (uint16_t *)calloc((size_t)(m * n), 2);
        memset(&cd, 0, sizeof cd);
        cd.threads = 1;
        CHECK_OK(par_compute_cpu(&cd, &t));
        memset(&q, 0, sizeof q);
        q.gemm_m = m, q.gemm_n = n, q.gemm_k = k, q.gemm_type = PAR_BF16;
        CHECK_OK(t.scratch_bound(t.user, &q, &bound));
        memset(&d, 0, sizeof d);
        d.m = m, d.n = n, d.k = k, d.alpha = 1, d.a_type = d.c_type = PAR_BF16;
        CHECK_OK(t.gemm(t.user, &d, A, B, C));
        CHECK_OK(t.memory_report(t.user, &r));
        CHECK_MSG(r.peak[PAR_MEM_WORKSPACE] >= m * n * 4 && (size_t)r.peak[PAR_MEM_WORKSPACE] <= bound,
                  "16-bit GEMM workspace peak %lld, bound %zu", (long long)r.peak[PAR_MEM_WORKSPACE], bound);
        q.gemm_type = PAR_I32;
        CHECK_ERR(t.scratch_bound(t.user, &q, &bound), PAR_EINVAL, "scratch_bound: gemm_type i32");
        t.destroy(t.user);
        free(A), free(B), free(C);
    }
    {   /* the rules */
        par_gemm_desc d;
        float x[4] = {0};
        memset(&d, 0, sizeof d);
        d.m = d.n = d.k = 1, d.alpha = 1, d.a_type = PAR_BF16, d.c_type = PAR_F16;
        CHECK_ERR(t1->gemm(t1->user, &d, x, x, x), PAR_EUNSUPPORTED, "gemm: c_type f16 with a_type bf16: C is f32 or the type of A and B");
        d.a_type = PAR_I32, d.c_type = PAR_F32;
        CHECK_ERR(t1->gemm(t1->user, &d, x, x, x), PAR_EUNSUPPORTED, "gemm: a_type i32 is not supported by the cpu table");
    }
}

static void test_scratch_bound(void) {
    static const int64_t shapes[][3] = {{301, 203, 150}, {45, 1401, 140}, {130, 129, 131}, {96, 100, 900}};
    const par_scratch_query q = {301, 1401, 900, 0, PAR_F32, PAR_F32, 0, 0, PAR_F32, 0};
    int threads;
    for (threads = 1; threads <= 3; threads += 2) {
        par_compute_table t;
        par_cpu_desc d;
        par_mem_report r;
        size_t bound = 0;
        size_t i;
        memset(&d, 0, sizeof d);
        d.threads = threads;
        CHECK_OK(par_compute_cpu(&d, &t));
        CHECK(t.scratch_bound != NULL);
        CHECK_OK(t.scratch_bound(t.user, &q, &bound));
#ifdef PARALLEL_WITH_CBLAS
        CHECK(bound == 0); /* CBLAS packs in its own memory */
        t.destroy(t.user);
        continue;
#endif
        CHECK(bound > 0);
        T_ = &t;
        for (i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
            const int64_t m = shapes[i][0], n = shapes[i][1], k = shapes[i][2];
            float *A = falloc(m * k), *B = falloc(k * n), *C = falloc(m * n);
            fill_big(A, m * k), fill_big(B, k * n);
            CHECK_OK(gemm_sb(0, 0, m, n, k, 1.0f, A, k, 0, B, n, 0, 0.0f, C, n, 0, 1));
            free(A), free(B), free(C);
        }
        CHECK_OK(t.memory_report(t.user, &r));
        CHECK_MSG(r.peak[PAR_MEM_WORKSPACE] > 0 && (size_t)r.peak[PAR_MEM_WORKSPACE] <= bound,
                  "%d thread(s): workspace peak %lld, bound %zu", threads, (long long)r.peak[PAR_MEM_WORKSPACE], bound);
        if (threads == 1) {
            float *A = falloc(q.gemm_m * q.gemm_k), *B = falloc(q.gemm_k * q.gemm_n), *C = falloc(q.gemm_m * q.gemm_n);
            CHECK_OK(gemm_sb(0, 0, q.gemm_m, q.gemm_n, q.gemm_k, 1.0f, A, q.gemm_k, 0, B, q.gemm_n, 0, 0.0f, C,
                             q.gemm_n, 0, 1));
            CHECK_OK(t.memory_report(t.user, &r));
            CHECK_MSG((size_t)r.peak[PAR_MEM_WORKSPACE] == bound, "the bound's own shape: peak %lld, bound %zu",
                      (long long)r.peak[PAR_MEM_WORKSPACE], bound);
            free(A), free(B), free(C);
        }
        {
            const par_scratch_query none = {0, 0, 0, 0, PAR_F32, PAR_F32, 0, 0, PAR_F32, 0}, bad = {4, -1, 4, 0, PAR_F32, PAR_F32, 0, 0, PAR_F32, 0};
            CHECK_OK(t.scratch_bound(t.user, &none, &bound));
            CHECK(bound == 0);
            CHECK_ERR(t.scratch_bound(t.user, &bad, &bound), PAR_EINVAL, "must be >= 0");
            CHECK_ERR(t.scratch_bound(t.user, NULL, &bound), PAR_EINVAL, "q is NULL");
        }
        t.destroy(t.user);
    }
}

int main(void) {
    par_compute_table t1, t3;
    par_cpu_desc d1, d3;
    memset(&d1, 0, sizeof d1); /* desc structs: zero fields are defaults */
    memset(&d3, 0, sizeof d3);
    d1.threads = 1;
    d3.threads = 3;
    if (par_compute_cpu(&d1, &t1) != PAR_OK || par_compute_cpu(&d3, &t3) != PAR_OK) {
        fprintf(stderr, "par_compute_cpu failed: %s\n", par_last_error());
        return 1;
    }
    T_ = &t1;
    test_table();
    test_memory();
    test_gemm_isas();
    test_gemm(); /* threads = 1 */
    T_ = &t3;
    test_gemm(); /* threads = 3 (small shapes stay on one thread; same checks) */
    test_gemm_desc();
    T_ = &t1;
    test_gemm_threads(&t1, &t3);
    test_gemm16(&t1, &t3);
    test_scratch_bound();
    T_ = &t1;
    test_fan_out(&t1, &t3);
    test_rmsnorm();
    test_rope();
    test_swiglu();
    test_embedding();
    test_xent();
    test_adamw();
    test_reductions();
    test_convert();
    test_arg_errors();
    t1.destroy(t1.user);
    t3.destroy(t3.user);
    return TEST_END("test_compute");
}
