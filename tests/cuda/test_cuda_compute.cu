/* tests/cuda/test_cuda_compute.cu - every hook of the CUDA compute table
   (parallel_cuda.cu) against the CPU table (par_compute_cpu) or, for GEMM and
   the memory hooks, against references computed here. Needs a GPU.

   Tolerances, per element |got - want| <= atol + rtol |want|:
     f32 kernels     atol 1e-5, rtol 1e-4 (summation order and FMA differ; the
                     GPU attention accumulates in a different order than the CPU)
     bf16 attention  atol 2e-2, rtol 2e-2 (inputs are rounded to bf16 for both
                     sides; the GPU rounds o and the gradients to bf16: 2^-8 each)
     f16 attention   atol 3e-3, rtol 3e-3 (2^-11 rounding of outputs)
     bf16/f16 GEMM   f32 output: atol 1e-4 rel. to sqrt(k); bf16/f16 output: one
                     rounding of the result (rtol 2^-7 / 2^-10)
     bf16/f16 activation kernels (test_activations16): bit for bit the GPU's
                     f32 kernel on the widened inputs, rounded once; against the
                     CPU's f32 kernel, that kernel's f32 tolerance above plus half
                     an ulp of the 16-bit type (exact where both sides are)

   Build (see the report / Makefile):
     nvcc -std=c++17 -I. parallel_cuda.cu tests/cuda/test_cuda_compute.cu \
          -lcublas -lnccl -lcudart -o build/test_cuda_compute */
#define PARALLEL_IMPLEMENTATION
#include "../test.h"
#define PARALLEL_CUDA_DECLARATIONS_ONLY
#include "../../parallel_cuda.cu"
#include "../half.h"

#include <cuda_fp16.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

static par_compute_table G; /* CUDA */
static par_compute_table C; /* CPU */

/* ------------------------------------------------------------ helpers */

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static float frand(void) { /* uniform in [-1, 1) */
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((double)(rng_state >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}
static void fill(float *x, size_t n, float amp) {
    for (size_t i = 0; i < n; i++) x[i] = amp * frand();
}

static float *falloc(size_t n) { return (float *)calloc(n ? n : 1, sizeof(float)); }

/* bf16 round-to-nearest-even, written here independently of CUDA's headers. */
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
static uint16_t to_f16(float f) {
    __half_raw r = __float2half_rn(f);
    return r.x;
}
static float from_f16(uint16_t u) {
    __half_raw r;
    r.x = u;
    return __half2float(__half(r));
}

/* Round x in place to dtype (so both sides see the same inputs) and write the
   dtype's bytes to out (n elements of par_dtype_size). */
static void to_dtype(par_dtype t, float *x, size_t n, void *out) {
    for (size_t i = 0; i < n; i++) {
        if (t == PAR_F32) {
            ((float *)out)[i] = x[i];
        } else if (t == PAR_BF16) {
            uint16_t h = to_bf16(x[i]);
            ((uint16_t *)out)[i] = h;
            x[i] = from_bf16(h);
        } else {
            uint16_t h = to_f16(x[i]);
            ((uint16_t *)out)[i] = h;
            x[i] = from_f16(h);
        }
    }
}
static void from_dtype(par_dtype t, const void *in, size_t n, float *x) {
    for (size_t i = 0; i < n; i++)
        x[i] = t == PAR_F32 ? ((const float *)in)[i]
               : t == PAR_BF16 ? from_bf16(((const uint16_t *)in)[i])
                               : from_f16(((const uint16_t *)in)[i]);
}

static void *up(const void *host, size_t bytes) {
    void *p = NULL;
    if (G.alloc(G.user, bytes, PAR_MEM_ACTIVATIONS, &p) != PAR_OK) return NULL;
    if (bytes && G.memcpy(G.user, p, host, bytes, PAR_COPY_HOST_TO_DEVICE) != PAR_OK) return NULL;
    return p;
}
static void down(void *host, const void *dev, size_t bytes) {
    if (G.synchronize(G.user) != PAR_OK) fprintf(stderr, "synchronize: %s\n", par_last_error());
    if (bytes && G.memcpy(G.user, host, dev, bytes, PAR_COPY_DEVICE_TO_HOST) != PAR_OK)
        fprintf(stderr, "download: %s\n", par_last_error());
}
static void gfree(void *p) { G.free(G.user, p); }

/* 1 if every element is within atol + rtol |want| (infinities must match). */
static int close_to(const char *what, const float *got, const float *want, size_t n, double atol, double rtol) {
    double worst = 0;
    size_t bad = n;
    for (size_t i = 0; i < n; i++) {
        const double g = got[i], w = want[i];
        double err;
        if (isinf(w) || isinf(g)) {
            err = (g == w) ? 0 : INFINITY;
        } else {
            err = fabs(g - w) - (atol + rtol * fabs(w));
            if (isnan(g) || isnan(w)) err = INFINITY;
        }
        if (err > 0 && bad == n) bad = i;
        if (err > worst) worst = err;
    }
    if (bad != n)
        fprintf(stderr, "  %s: element %zu: got %.9g want %.9g (worst excess %.3g over %zu)\n", what, bad,
                (double)got[bad], (double)want[bad], worst, n);
    return bad == n;
}

/* --------------------------------------------------------- memory hooks */

static void test_memory(void) {
    par_mem_report r;
    unsigned char host[300], back[300];
    void *a = NULL, *b = NULL, *c = NULL;
    int zero = 1;
    CHECK_OK(G.alloc(G.user, 300, PAR_MEM_PARAMS, &a));
    CHECK_OK(G.alloc(G.user, 1000, PAR_MEM_GRADS, &b));
    CHECK_OK(G.alloc(G.user, 0, PAR_MEM_COMM, &c));
    CHECK(a && b && c && a != c);
    CHECK_OK(G.memory_report(G.user, &r));
    CHECK_INT(r.current[PAR_MEM_PARAMS], 300);
    CHECK_INT(r.current[PAR_MEM_GRADS], 1000);
    CHECK_INT(r.current_total, 1300);
    /* zero-filled */
    memset(back, 0xAB, sizeof back);
    down(back, a, 300);
    for (int i = 0; i < 300; i++) zero &= back[i] == 0;
    CHECK_MSG(zero, "alloc is not zero-filled");
    /* memset, memcpy both ways and device to device */
    for (int i = 0; i < 300; i++) host[i] = (unsigned char)(i * 7 + 1);
    CHECK_OK(G.memcpy(G.user, a, host, 300, PAR_COPY_HOST_TO_DEVICE));
    CHECK_OK(G.memset(G.user, (char *)a + 10, 0x5c, 20));
    CHECK_OK(G.memcpy(G.user, (char *)b + 100, a, 300, PAR_COPY_DEVICE_TO_DEVICE));
    down(back, (char *)b + 100, 300);
    {
        int ok = 1;
        for (int i = 0; i < 300; i++) ok &= back[i] == (i >= 10 && i < 30 ? 0x5c : (unsigned char)(i * 7 + 1));
        CHECK_MSG(ok, "memcpy/memset round trip differs");
    }
    /* memcpy_2d: 5 rows of 12 bytes from pitch 40 to pitch 16 */
    {
        unsigned char want[80];
        int ok = 1;
        CHECK_OK(G.memset(G.user, b, 0, 1000));
        CHECK_OK(G.memcpy_2d(G.user, b, 16, a, 40, 12, 5));
        down(back, b, 80);
        for (int rr = 0; rr < 5; rr++)
            for (int x = 0; x < 16; x++) {
                const int src = rr * 40 + x;
                want[rr * 16 + x] = x < 12 ? (src >= 10 && src < 30 ? 0x5c : (unsigned char)(src * 7 + 1)) : 0;
            }
        for (int i = 0; i < 80; i++) ok &= back[i] == want[i];
        CHECK_MSG(ok, "memcpy_2d result differs");
        CHECK_ERR(G.memcpy_2d(G.user, b, 8, a, 40, 12, 5), PAR_EINVAL, "pitch");
    }
    /* host to host */
    {
        unsigned char h2[300];
        CHECK_OK(G.memcpy(G.user, h2, host, 300, PAR_COPY_HOST_TO_HOST));
        CHECK(memcmp(h2, host, 300) == 0);
    }
    G.free(G.user, b);
    G.free(G.user, NULL);
    CHECK_OK(G.memory_report(G.user, &r));
    CHECK_INT(r.current[PAR_MEM_GRADS], 0);
    CHECK_INT(r.peak[PAR_MEM_GRADS], 1000);
    CHECK_INT(r.current_total, 300);
    CHECK(r.peak_total >= 1300);
    G.free(G.user, a);
    G.free(G.user, c);
    CHECK_ERR(G.alloc(G.user, 8, (par_mem_category)99, &a), PAR_EINVAL, "category");
    CHECK_ERR(G.memcpy(G.user, NULL, host, 4, PAR_COPY_HOST_TO_DEVICE), PAR_EINVAL, "NULL");
    CHECK_OK(G.synchronize(G.user));
}

/* ----------------------------------------------------------------- gemm */

static void test_gemm_case(par_dtype at, par_dtype ct, int transa, int transb, int64_t m, int64_t n, int64_t k,
                           int64_t batch, int broadcast_a, int pad) {
    par_gemm_desc d;
    const int64_t ar = transa ? k : m, ac = transa ? m : k, br = transb ? n : k, bc = transb ? k : n;
    const int64_t lda = ac + pad, ldb = bc + pad, ldc = n + pad;
    const int64_t sa = broadcast_a ? 0 : ar * lda, sb = br * ldb, sc = m * ldc;
    const size_t na = (size_t)(ar * lda * (broadcast_a ? 1 : batch)), nb = (size_t)(br * ldb * batch),
                 nc = (size_t)(m * ldc * batch);
    const size_t as = par_dtype_size(at), cs = par_dtype_size(ct);
    float *a = falloc(na), *b = falloc(nb), *c0 = falloc(nc), *want = falloc(nc), *got = falloc(nc);
    void *ab = malloc(na * as + 1), *bb = malloc(nb * as + 1), *cb = malloc(nc * cs + 1);
    void *da, *db, *dc;
    char what[160];
    double atol, rtol;
    fill(a, na, 1.0f);
    fill(b, nb, 1.0f);
    fill(c0, nc, 1.0f);
    to_dtype(at, a, na, ab);
    to_dtype(at, b, nb, bb);
    to_dtype(ct, c0, nc, cb);
    memset(&d, 0, sizeof d);
    d.transa = transa;
    d.transb = transb;
    d.m = m;
    d.n = n;
    d.k = k;
    d.alpha = 0.75f;
    d.beta = -0.5f;
    d.lda = pad ? lda : 0;
    d.ldb = pad ? ldb : 0;
    d.ldc = pad ? ldc : 0;
    d.stride_a = sa;
    d.stride_b = sb;
    d.stride_c = sc;
    d.batch = batch;
    d.a_type = at;
    d.c_type = ct;
    /* Reference in double from the (rounded) inputs; padding of C is untouched. */
    memcpy(want, c0, nc * sizeof(float));
    for (int64_t p = 0; p < batch; p++)
        for (int64_t i = 0; i < m; i++)
            for (int64_t j = 0; j < n; j++) {
                double s = 0;
                for (int64_t q = 0; q < k; q++) {
                    const double x = transa ? a[p * sa + q * lda + i] : a[p * sa + i * lda + q];
                    const double y = transb ? b[p * sb + j * ldb + q] : b[p * sb + q * ldb + j];
                    s += x * y;
                }
                want[p * sc + i * ldc + j] = (float)(0.75 * s - 0.5 * (double)c0[p * sc + i * ldc + j]);
            }
    da = up(ab, na * as);
    db = up(bb, nb * as);
    dc = up(cb, nc * cs);
    snprintf(what, sizeof what, "gemm %s->%s ta=%d tb=%d m=%lld n=%lld k=%lld batch=%lld bcast=%d pad=%d",
             par_dtype_name(at), par_dtype_name(ct), transa, transb, (long long)m, (long long)n, (long long)k,
             (long long)batch, broadcast_a, pad);
    CHECK_MSG(G.gemm(G.user, &d, da, db, dc) == PAR_OK, "%s", what);
    down(cb, dc, nc * cs);
    from_dtype(ct, cb, nc, got);
    atol = (at == PAR_F32 ? 1e-5 : 1e-4) * sqrt((double)k + 1);
    rtol = ct == PAR_F32 ? 1e-5 : ct == PAR_BF16 ? 1.0 / 128 : 1.0 / 1024;
    if (ct != PAR_F32) atol += 2 * rtol; /* |C| is O(sqrt k) at most a few units here */
    CHECK_MSG(close_to(what, got, want, nc, atol, rtol), "%s", what);
    gfree(da);
    gfree(db);
    gfree(dc);
    free(a);
    free(b);
    free(c0);
    free(want);
    free(got);
    free(ab);
    free(bb);
    free(cb);
}

/* Nothing to multiply (k == 0 or alpha == 0): C = beta * C over a strided,
   padded batch (padding untouched), A and B unread and may be NULL; beta == 0
   writes zeros without reading C (NaN there must not survive). */
static void test_gemm_scale_only(par_dtype ct, int64_t k, float alpha, float beta) {
    const int64_t m = 6, n = 5, ldc = 7, batch = 3, sc = m * ldc + 3, nc = sc * batch;
    const size_t cs = par_dtype_size(ct);
    float *c0 = falloc((size_t)nc), *want = falloc((size_t)nc), *got = falloc((size_t)nc);
    void *cb = malloc((size_t)nc * cs), *dc;
    par_gemm_desc d;
    char what[120];
    fill(c0, (size_t)nc, 2.0f);
    if (beta == 0.0f)
        for (int64_t p = 0; p < batch; p++) c0[p * sc + ldc + 1] = NAN; /* inside C: must become 0 */
    to_dtype(ct, c0, (size_t)nc, cb);
    memcpy(want, c0, (size_t)nc * sizeof(float));
    for (int64_t p = 0; p < batch; p++)
        for (int64_t i = 0; i < m; i++)
            for (int64_t j = 0; j < n; j++) {
                const float x = c0[p * sc + i * ldc + j];
                float w = beta == 0.0f ? 0.0f : beta * x;
                if (ct != PAR_F32) { /* the kernel rounds its f32 product to the dtype */
                    uint16_t h = ct == PAR_BF16 ? to_bf16(w) : to_f16(w);
                    w = ct == PAR_BF16 ? from_bf16(h) : from_f16(h);
                }
                want[p * sc + i * ldc + j] = w;
            }
    dc = up(cb, (size_t)nc * cs);
    memset(&d, 0, sizeof d);
    d.m = m, d.n = n, d.k = k, d.alpha = alpha, d.beta = beta;
    d.ldc = ldc, d.stride_c = sc, d.stride_a = 1000, d.stride_b = 1000, d.batch = batch;
    d.a_type = ct; /* c_type must be f32 or a_type */
    d.c_type = ct;
    snprintf(what, sizeof what, "gemm C = beta C: %s k=%lld alpha=%g beta=%g", par_dtype_name(ct), (long long)k,
             (double)alpha, (double)beta);
    CHECK_MSG(G.gemm(G.user, &d, NULL, NULL, dc) == PAR_OK, "%s", what);
    down(cb, dc, (size_t)nc * cs);
    from_dtype(ct, cb, (size_t)nc, got);
    CHECK_MSG(close_to(what, got, want, (size_t)nc, 0, 0), "%s", what);
    gfree(dc);
    free(c0), free(want), free(got), free(cb);
}

static void test_gemm(void) {
    static const int64_t shapes[][3] = {{1, 1, 1}, {17, 33, 9}, {64, 48, 80}, {3, 130, 257}, {5, 7, 0}};
    par_gemm_desc d;
    for (unsigned s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int ta = 0; ta < 2; ta++)
            for (int tb = 0; tb < 2; tb++)
                test_gemm_case(PAR_F32, PAR_F32, ta, tb, shapes[s][0], shapes[s][1], shapes[s][2], 1, 0, 0);
    test_gemm_case(PAR_F32, PAR_F32, 0, 1, 19, 23, 31, 3, 0, 0);
    test_gemm_case(PAR_F32, PAR_F32, 1, 0, 19, 23, 31, 3, 1, 0);
    test_gemm_case(PAR_F32, PAR_F32, 1, 1, 19, 23, 31, 2, 0, 5);
    for (int t = 0; t < 2; t++) {
        const par_dtype at = t ? PAR_F16 : PAR_BF16;
        test_gemm_case(at, PAR_F32, 0, 0, 33, 65, 70, 1, 0, 0);
        test_gemm_case(at, PAR_F32, 1, 1, 33, 65, 70, 2, 0, 3);
        test_gemm_case(at, at, 0, 1, 64, 64, 64, 3, 1, 0);
        test_gemm_case(at, at, 1, 0, 7, 9, 200, 1, 0, 0);
    }
    memset(&d, 0, sizeof d);
    d.m = d.n = d.k = 4;
    d.a_type = PAR_F32;
    d.c_type = PAR_BF16;
    CHECK_ERR(G.gemm(G.user, &d, (void *)8, (void *)8, (void *)8), PAR_EINVAL, "c_type");
    d.c_type = PAR_F32;
    d.lda = 2;
    CHECK_ERR(G.gemm(G.user, &d, (void *)8, (void *)8, (void *)8), PAR_EINVAL, "leading");
    d.lda = 0;
    d.a_type = PAR_I32;
    CHECK_ERR(G.gemm(G.user, &d, (void *)8, (void *)8, (void *)8), PAR_EINVAL, "a_type");
    CHECK_ERR(G.gemm(G.user, NULL, NULL, NULL, NULL), PAR_EINVAL, "NULL");
    /* The CPU table's rules: trans flags 0 or 1, C blocks of a batch apart, A and
       B needed only when there is something to multiply. */
    for (int t = 0; t < 3; t++) {
        const par_dtype ct = t == 0 ? PAR_F32 : t == 1 ? PAR_BF16 : PAR_F16;
        test_gemm_scale_only(ct, 4, 0.0f, -0.5f);
        test_gemm_scale_only(ct, 0, 0.75f, 2.0f);
        test_gemm_scale_only(ct, 0, 1.0f, 0.0f);
        test_gemm_scale_only(ct, 3, 0.0f, 1.0f);
    }
    d.a_type = PAR_F32;
    d.alpha = 1.0f;
    d.transa = 2;
    CHECK_ERR(G.gemm(G.user, &d, (void *)8, (void *)8, (void *)8), PAR_EINVAL, "transa is 2");
    d.transa = 0;
    d.batch = 2;
    d.stride_c = 3 * 4 + 3; /* (m - 1) * ldc + n - 1 */
    CHECK_ERR(G.gemm(G.user, &d, (void *)8, (void *)8, (void *)8), PAR_EINVAL, "overlap");
    d.stride_c = 16;
    CHECK_ERR(G.gemm(G.user, &d, NULL, (void *)8, (void *)8), PAR_EINVAL, "a is NULL");
    CHECK_ERR(G.gemm(G.user, &d, (void *)8, (void *)8, NULL), PAR_EINVAL, "c is NULL");
}

/* ------------------------------------------------------------ attention */

static int have(const void *hook, const char *name) {
    CHECK_MSG(hook != NULL, "the CPU table has no %s hook (reference missing)", name);
    return hook != NULL;
}

/* pos_mode: 0 = NULL positions, 1 = queries at the end of the keys (offset
   k_len - q_len), 2 = zigzag (two halves swapped), 3 = keys start after many
   queries (fully masked rows). */
static void make_pos(int64_t *qp, int64_t ql, int64_t *kp, int64_t kl, int mode) {
    for (int64_t i = 0; i < ql; i++) qp[i] = mode == 1 ? kl - ql + i : mode == 2 ? (i + ql / 2) % ql : i;
    for (int64_t j = 0; j < kl; j++) kp[j] = mode == 2 ? (j + kl / 2) % kl : mode == 3 ? j + 16 : j;
}

static void test_attention_case(par_dtype dt, int batch, int hq, int hkv, int dim, int64_t ql, int64_t kl,
                                int causal, int pos_mode) {
    const size_t nq = (size_t)batch * ql * hq * dim, nk = (size_t)batch * kl * hkv * dim,
                 nl = (size_t)batch * hq * ql, es = par_dtype_size(dt);
    float *q = falloc(nq), *k = falloc(nk), *v = falloc(nk), *dout = falloc(nq);
    float *o_ref = falloc(nq), *lse_ref = falloc(nl), *dq_ref = falloc(nq), *dk_ref = falloc(nk), *dv_ref = falloc(nk);
    float *o = falloc(nq), *lse = falloc(nl), *dq = falloc(nq), *dk = falloc(nk), *dv = falloc(nk);
    void *qb = malloc(nq * es + 1), *kb = malloc(nk * es + 1), *vb = malloc(nk * es + 1), *dob = malloc(nq * es + 1);
    void *ob = malloc(nq * es + 1), *dqb = malloc(nq * es + 1), *dkb = malloc(nk * es + 1), *dvb = malloc(nk * es + 1);
    int64_t *qp = (int64_t *)calloc((size_t)ql + 1, 8), *kp = (int64_t *)calloc((size_t)kl + 1, 8);
    void *gq, *gk, *gv, *gdo, *go, *glse, *gdq, *gdk, *gdv, *gqp = NULL, *gkp = NULL;
    par_attn_desc hd, gd;
    char what[200];
    const double atol = dt == PAR_F32 ? 1e-5 : dt == PAR_BF16 ? 2e-2 : 3e-3;
    const double rtol = dt == PAR_F32 ? 1e-4 : dt == PAR_BF16 ? 2e-2 : 3e-3;
    fill(q, nq, 1.0f);
    fill(k, nk, 1.0f);
    fill(v, nk, 1.0f);
    fill(dout, nq, 1.0f);
    to_dtype(dt, q, nq, qb);
    to_dtype(dt, k, nk, kb);
    to_dtype(dt, v, nk, vb);
    to_dtype(dt, dout, nq, dob);
    make_pos(qp, ql, kp, kl, pos_mode);
    memset(&hd, 0, sizeof hd);
    hd.batch = batch;
    hd.q_heads = hq;
    hd.kv_heads = hkv;
    hd.head_dim = dim;
    hd.q_len = ql;
    hd.k_len = kl;
    hd.causal = causal;
    hd.dtype = PAR_F32;
    hd.q_pos = pos_mode ? qp : NULL;
    hd.k_pos = pos_mode ? kp : NULL;
    snprintf(what, sizeof what, "attention %s b=%d hq=%d hkv=%d d=%d q=%lld k=%lld causal=%d pos=%d",
             par_dtype_name(dt), batch, hq, hkv, dim, (long long)ql, (long long)kl, causal, pos_mode);
    if (!have((const void *)C.attention_fwd, "attention_fwd") || !have((const void *)C.attention_bwd, "attention_bwd"))
        goto done;
    CHECK_MSG(C.attention_fwd(C.user, &hd, q, k, v, o_ref, lse_ref) == PAR_OK, "CPU fwd %s", what);
    CHECK_MSG(C.attention_bwd(C.user, &hd, q, k, v, o_ref, lse_ref, dout, dq_ref, dk_ref, dv_ref, 0) == PAR_OK,
              "CPU bwd %s", what);

    gq = up(qb, nq * es);
    gk = up(kb, nk * es);
    gv = up(vb, nk * es);
    gdo = up(dob, nq * es);
    go = up(ob, nq * es);
    glse = up(lse, nl * 4);
    gdq = up(dqb, nq * es);
    gdk = up(dkb, nk * es);
    gdv = up(dvb, nk * es);
    if (pos_mode) {
        gqp = up(qp, (size_t)ql * 8);
        gkp = up(kp, (size_t)kl * 8);
    }
    gd = hd;
    gd.dtype = dt;
    gd.q_pos = (const int64_t *)gqp;
    gd.k_pos = (const int64_t *)gkp;
    CHECK_MSG(G.attention_fwd(G.user, &gd, gq, gk, gv, go, (float *)glse) == PAR_OK, "fwd %s", what);
    down(ob, go, nq * es);
    down(lse, glse, nl * 4);
    from_dtype(dt, ob, nq, o);
    CHECK_MSG(close_to("o", o, o_ref, nq, atol, rtol), "o of %s", what);
    CHECK_MSG(close_to("lse", lse, lse_ref, nl, 1e-5, 1e-5 + (dt == PAR_F32 ? 0 : 1e-3)), "lse of %s", what);

    /* Backward from the GPU's own o and lse, overwriting garbage in dq/dk/dv. */
    CHECK_OK(G.memset(G.user, gdq, 0x7f, nq * es));
    CHECK_OK(G.memset(G.user, gdk, 0x7f, nk * es));
    CHECK_OK(G.memset(G.user, gdv, 0x7f, nk * es));
    CHECK_MSG(G.attention_bwd(G.user, &gd, gq, gk, gv, go, (const float *)glse, gdo, gdq, gdk, gdv, 0) == PAR_OK,
              "bwd %s", what);
    down(dqb, gdq, nq * es);
    down(dkb, gdk, nk * es);
    down(dvb, gdv, nk * es);
    from_dtype(dt, dqb, nq, dq);
    from_dtype(dt, dkb, nk, dk);
    from_dtype(dt, dvb, nk, dv);
    CHECK_MSG(close_to("dq", dq, dq_ref, nq, atol, rtol), "dq of %s", what);
    CHECK_MSG(close_to("dk", dk, dk_ref, nk, atol, rtol), "dk of %s", what);
    CHECK_MSG(close_to("dv", dv, dv_ref, nk, atol, rtol), "dv of %s", what);

    /* accumulate = 1 adds a second copy. */
    CHECK_MSG(G.attention_bwd(G.user, &gd, gq, gk, gv, go, (const float *)glse, gdo, gdq, gdk, gdv, 1) == PAR_OK,
              "bwd accumulate %s", what);
    down(dqb, gdq, nq * es);
    down(dkb, gdk, nk * es);
    from_dtype(dt, dqb, nq, dq);
    from_dtype(dt, dkb, nk, dk);
    for (size_t i = 0; i < nq; i++) dq_ref[i] *= 2;
    for (size_t i = 0; i < nk; i++) dk_ref[i] *= 2;
    CHECK_MSG(close_to("dq acc", dq, dq_ref, nq, 2 * atol, rtol), "accumulated dq of %s", what);
    CHECK_MSG(close_to("dk acc", dk, dk_ref, nk, 2 * atol, rtol), "accumulated dk of %s", what);

    gfree(gq);
    gfree(gk);
    gfree(gv);
    gfree(gdo);
    gfree(go);
    gfree(glse);
    gfree(gdq);
    gfree(gdk);
    gfree(gdv);
    gfree(gqp);
    gfree(gkp);
done:
    free(q), free(k), free(v), free(dout), free(o_ref), free(lse_ref), free(dq_ref), free(dk_ref), free(dv_ref);
    free(o), free(lse), free(dq), free(dk), free(dv), free(qb), free(kb), free(vb), free(dob), free(ob), free(dqb);
    free(dkb), free(dvb), free(qp), free(kp);
}

/* Keys in 3 blocks: forward per block + merge (starting from o = 0, lse = -inf)
   must equal the CPU forward over all keys. f32 (merge is f32). */
static void test_merge(int hq, int hkv, int dim, int64_t ql, int64_t kl, int causal) {
    const int batch = 2;
    const size_t nq = (size_t)batch * ql * hq * dim, nk = (size_t)batch * kl * hkv * dim, nl = (size_t)batch * hq * ql;
    float *q = falloc(nq), *k = falloc(nk), *v = falloc(nk), *o_ref = falloc(nq), *lse_ref = falloc(nl);
    float *o = falloc(nq), *lse = falloc(nl), *kb = NULL, *vb = NULL;
    int64_t *qp = (int64_t *)calloc((size_t)ql, 8), *kp = (int64_t *)calloc((size_t)kl, 8);
    const int64_t cut[4] = {0, kl / 3, kl / 3 + kl / 4, kl};
    par_attn_desc hd, gd;
    void *gq, *go, *glse, *gob, *glb, *gqp;
    char what[160];
    fill(q, nq, 1.0f);
    fill(k, nk, 1.0f);
    fill(v, nk, 1.0f);
    make_pos(qp, ql, kp, kl, 1);
    memset(&hd, 0, sizeof hd);
    hd.batch = batch;
    hd.q_heads = hq;
    hd.kv_heads = hkv;
    hd.head_dim = dim;
    hd.q_len = ql;
    hd.k_len = kl;
    hd.causal = causal;
    hd.q_pos = qp;
    hd.k_pos = kp;
    snprintf(what, sizeof what, "merge hq=%d hkv=%d d=%d q=%lld k=%lld causal=%d", hq, hkv, dim, (long long)ql,
             (long long)kl, causal);
    if (!have((const void *)C.attention_fwd, "attention_fwd")) goto done;
    CHECK_MSG(C.attention_fwd(C.user, &hd, q, k, v, o_ref, lse_ref) == PAR_OK, "CPU fwd %s", what);
    for (size_t i = 0; i < nl; i++) lse[i] = -INFINITY;
    gq = up(q, nq * 4);
    go = up(o, nq * 4); /* zeros */
    glse = up(lse, nl * 4);
    gob = up(o, nq * 4);
    glb = up(lse, nl * 4);
    gqp = up(qp, (size_t)ql * 8);
    for (int blk = 0; blk < 3; blk++) {
        const int64_t j0 = cut[blk], n = cut[blk + 1] - cut[blk];
        const size_t nkb = (size_t)batch * n * hkv * dim;
        void *gk, *gv, *gkp;
        /* This block's keys, [batch, n, hkv, dim], and their global positions. */
        kb = falloc(nkb);
        vb = falloc(nkb);
        for (int b = 0; b < batch; b++)
            for (int64_t j = 0; j < n; j++)
                for (int64_t c = 0; c < (int64_t)hkv * dim; c++) {
                    kb[((size_t)b * n + j) * hkv * dim + c] = k[((size_t)b * kl + j0 + j) * hkv * dim + c];
                    vb[((size_t)b * n + j) * hkv * dim + c] = v[((size_t)b * kl + j0 + j) * hkv * dim + c];
                }
        gk = up(kb, nkb * 4);
        gv = up(vb, nkb * 4);
        gkp = up(kp + j0, (size_t)n * 8);
        gd = hd;
        gd.k_len = n;
        gd.q_pos = (const int64_t *)gqp;
        gd.k_pos = (const int64_t *)gkp;
        CHECK_MSG(G.attention_fwd(G.user, &gd, gq, gk, gv, gob, (float *)glb) == PAR_OK, "block fwd %s", what);
        CHECK_MSG(G.attention_merge(G.user, &gd, (float *)go, (float *)glse, (const float *)gob, (const float *)glb) ==
                      PAR_OK,
                  "merge %s", what);
        G.synchronize(G.user);
        gfree(gk);
        gfree(gv);
        gfree(gkp);
        free(kb);
        free(vb);
    }
    down(o, go, nq * 4);
    down(lse, glse, nl * 4);
    CHECK_MSG(close_to("merged o", o, o_ref, nq, 1e-5, 1e-4), "%s", what);
    CHECK_MSG(close_to("merged lse", lse, lse_ref, nl, 1e-5, 1e-5), "%s", what);
    gfree(gq);
    gfree(go);
    gfree(glse);
    gfree(gob);
    gfree(glb);
    gfree(gqp);
done:
    free(q), free(k), free(v), free(o_ref), free(lse_ref), free(o), free(lse), free(qp), free(kp);
}

/* Pointers of tensors without elements may be NULL (as on the CPU): no keys
   gives o = 0 and lse = -inf (and dq = 0), no queries gives dk = dv = 0. */
static void test_attention_empty(void) {
    par_attn_desc d;
    const int64_t len = 5, dim = 8, nq = 2 * len * dim, nl = 2 * len;
    float *h = falloc((size_t)nq), *zero = falloc((size_t)nq), *neg = falloc((size_t)nl), *back = falloc((size_t)nq);
    void *x, *y, *z, *w, *l;
    fill(h, (size_t)nq, 1.0f);
    for (int64_t i = 0; i < nl; i++) neg[i] = -INFINITY;
    x = up(h, (size_t)nq * 4), y = up(h, (size_t)nq * 4), z = up(h, (size_t)nq * 4), w = up(h, (size_t)nq * 4);
    l = up(h, (size_t)nl * 4);
    memset(&d, 0, sizeof d);
    d.batch = 1, d.q_heads = 2, d.kv_heads = 2, d.head_dim = (int)dim, d.dtype = PAR_F32;
    /* no keys: k, v (and dk, dv) NULL */
    d.q_len = len, d.k_len = 0;
    CHECK_OK(G.attention_fwd(G.user, &d, x, NULL, NULL, y, (float *)l));
    down(back, y, (size_t)nq * 4);
    CHECK_MSG(close_to("attention_fwd without keys: o", back, zero, (size_t)nq, 0, 0), "o");
    down(back, l, (size_t)nl * 4);
    CHECK_MSG(close_to("attention_fwd without keys: lse", back, neg, (size_t)nl, 0, 0), "lse");
    CHECK_OK(G.attention_bwd(G.user, &d, x, NULL, NULL, y, (const float *)l, w, z, NULL, NULL, 0));
    down(back, z, (size_t)nq * 4);
    CHECK_MSG(close_to("attention_bwd without keys: dq", back, zero, (size_t)nq, 0, 0), "dq");
    CHECK_ERR(G.attention_bwd(G.user, &d, x, NULL, NULL, y, (const float *)l, NULL, z, NULL, NULL, 0), PAR_EINVAL,
              "do_ is NULL");
    /* no queries: q, o, lse, do_, dq NULL */
    d.q_len = 0, d.k_len = len;
    CHECK_OK(G.attention_fwd(G.user, &d, NULL, x, y, NULL, NULL));
    CHECK_OK(G.attention_bwd(G.user, &d, NULL, x, y, NULL, NULL, NULL, NULL, z, w, 0));
    down(back, z, (size_t)nq * 4);
    CHECK_MSG(close_to("attention_bwd without queries: dk", back, zero, (size_t)nq, 0, 0), "dk");
    down(back, w, (size_t)nq * 4);
    CHECK_MSG(close_to("attention_bwd without queries: dv", back, zero, (size_t)nq, 0, 0), "dv");
    CHECK_ERR(G.attention_fwd(G.user, &d, NULL, NULL, y, NULL, NULL), PAR_EINVAL, "k is NULL");
    CHECK_ERR(G.attention_bwd(G.user, &d, NULL, x, y, NULL, NULL, NULL, NULL, z, NULL, 0), PAR_EINVAL, "dv is NULL");
    CHECK_OK(G.attention_merge(G.user, &d, NULL, NULL, NULL, NULL));
    d.q_len = len;
    CHECK_ERR(G.attention_merge(G.user, &d, (float *)x, (float *)l, NULL, (const float *)l), PAR_EINVAL,
              "o_b is NULL");
    gfree(x), gfree(y), gfree(z), gfree(w), gfree(l);
    free(h), free(zero), free(neg), free(back);
}

/* The bf16/f16 cases, run on every attention kernel choice (test_attention_kernels):
   with tensor cores, head_dim 64 and 128 take the mma kernels (64-query and
   64-key tiles, 32-query tiles in dK/dV), so the lengths below are chosen off
   those multiples (ragged last tiles), with GQA, zigzag positions, rows with no
   visible key and q longer than k. */
static void test_attention_half(void) {
    const par_dtype types[2] = {PAR_BF16, PAR_F16};
    for (int t = 0; t < 2; t++) {
        test_attention_case(types[t], 2, 4, 2, 64, 65, 65, 1, 0);
        test_attention_case(types[t], 1, 8, 1, 128, 33, 97, 0, 1);
        test_attention_case(types[t], 1, 2, 2, 256, 20, 40, 1, 1);   /* SIMT on every table */
        test_attention_case(types[t], 1, 4, 2, 128, 100, 150, 1, 2); /* zigzag, GQA 2 */
        test_attention_case(types[t], 2, 2, 2, 64, 50, 100, 1, 2);   /* zigzag */
        test_attention_case(types[t], 1, 2, 1, 64, 40, 70, 1, 3);    /* rows with no visible key */
        test_attention_case(types[t], 1, 2, 2, 128, 70, 200, 1, 3);  /* same, two query tiles */
        test_attention_case(types[t], 1, 2, 2, 128, 130, 17, 0, 1);  /* q longer than k */
        test_attention_case(types[t], 1, 4, 1, 128, 300, 300, 1, 0); /* several tiles each way, MQA */
        test_attention_case(types[t], 1, 8, 2, 64, 257, 513, 1, 1);  /* queries at the end of the keys */
        test_attention_case(types[t], 1, 2, 2, 128, 1, 1, 1, 0);     /* one query, one key */
        test_attention_case(types[t], 1, 2, 2, 64, 5, 0, 0, 0);      /* no keys at all */
    }
}

/* attention_kernel: 0 (the main table G) uses tensor cores where this build and
   device allow, 2 requires them, 1 is the SIMT kernels; the bf16/f16 cases run
   again on a SIMT table so that both kernels are checked on a GPU that has both. */
static void test_attention_kernels(void) {
    par_cuda_desc d;
    par_compute_table t, saved;
    par_status st;
    memset(&d, 0, sizeof d);
    d.attention_kernel = 3;
    CHECK_ERR(par_compute_cuda(&d, &t), PAR_EINVAL, "attention_kernel");
    d.attention_kernel = 2;
    st = par_compute_cuda(&d, &t);
    if (st == PAR_OK) {
        printf("cuda_compute: bf16/f16 attention (head_dim 64, 128) ran on tensor cores; now the SIMT kernels\n");
        t.destroy(t.user);
    } else {
        CHECK_MSG(st == PAR_EUNSUPPORTED, "attention_kernel = 2: %s", par_status_string(st));
        printf("cuda_compute: no tensor-core attention (%s); both runs use the SIMT kernels\n", par_cuda_last_error());
    }
    d.attention_kernel = 1;
    CHECK_OK(par_compute_cuda(&d, &t));
    if (!t.user) return;
    saved = G;
    G = t; /* up(), down() and gfree() follow G */
    test_attention_half();
    G = saved;
    t.destroy(t.user);
}

static void test_attention(void) {
    static const int groups[][2] = {{4, 4}, {4, 2}, {4, 1}, {8, 2}}; /* GQA 1, 2, 4 and MQA */
    static const int dims[] = {16, 64, 80, 128, 256};
    par_attn_desc d;
    for (unsigned g = 0; g < 4; g++)
        for (int causal = 0; causal < 2; causal++) test_attention_case(PAR_F32, 2, groups[g][0], groups[g][1], 64, 37, 37, causal, 0);
    for (unsigned i = 0; i < sizeof dims / sizeof dims[0]; i++) test_attention_case(PAR_F32, 1, 2, 1, dims[i], 65, 130, 1, 1);
    test_attention_case(PAR_F32, 1, 3, 3, 7, 33, 1, 0, 0);   /* odd head_dim, one key */
    test_attention_case(PAR_F32, 2, 2, 2, 32, 50, 100, 1, 2); /* zigzag positions */
    test_attention_case(PAR_F32, 1, 2, 1, 64, 40, 70, 1, 3);  /* rows with no visible key */
    test_attention_case(PAR_F32, 1, 2, 2, 64, 130, 17, 0, 1); /* q longer than k */
    test_attention_case(PAR_F32, 1, 2, 2, 64, 5, 0, 0, 0);    /* no keys at all */
    test_attention_half();
    test_merge(4, 2, 64, 50, 90, 0);
    test_merge(4, 1, 32, 64, 64, 1);
    test_merge(2, 2, 128, 33, 100, 1);

    memset(&d, 0, sizeof d);
    d.batch = d.q_heads = d.head_dim = 1;
    d.kv_heads = 1;
    d.q_len = d.k_len = 4;
    d.q_heads = 3;
    d.kv_heads = 2;
    CHECK_ERR(G.attention_fwd(G.user, &d, (void *)8, (void *)8, (void *)8, (void *)8, (float *)8), PAR_EINVAL,
              "multiple");
    d.q_heads = 2;
    d.head_dim = 512;
    CHECK_ERR(G.attention_fwd(G.user, &d, (void *)8, (void *)8, (void *)8, (void *)8, (float *)8), PAR_EUNSUPPORTED,
              "head_dim");
    d.head_dim = 8;
    CHECK_ERR(G.attention_fwd(G.user, &d, NULL, (void *)8, (void *)8, (void *)8, (float *)8), PAR_EINVAL, "NULL");
    test_attention_empty();
    d.dtype = PAR_I32;
    CHECK_ERR(G.attention_bwd(G.user, &d, (void *)8, (void *)8, (void *)8, (void *)8, (float *)8, (void *)8, (void *)8,
                              (void *)8, (void *)8, 0),
              PAR_EINVAL, "dtype");
}

/* ------------------------------------------------------- fused kernels */

/* Run `gpu` on device copies of the inputs and `cpu` on host copies; compare outputs. */
static void test_rmsnorm(int64_t rows, int64_t dim) {
    const size_t n = (size_t)(rows * dim);
    float *x = falloc(n), *w = falloc((size_t)dim), *dy = falloc(n), *y = falloc(n), *ry = falloc(n);
    float *rs = falloc((size_t)rows), *rrs = falloc((size_t)rows), *dx = falloc(n), *rdx = falloc(n);
    float *dw = falloc((size_t)dim), *rdw = falloc((size_t)dim);
    void *gx, *gw, *gdy, *gy, *grs, *gdx, *gdw;
    char what[64];
    snprintf(what, sizeof what, "rmsnorm [%lld, %lld]", (long long)rows, (long long)dim);
    fill(x, n, 2.0f);
    fill(w, (size_t)dim, 1.0f);
    fill(dy, n, 1.0f);
    fill(dw, (size_t)dim, 1.0f);
    memcpy(rdw, dw, (size_t)dim * 4);
    if (!have((const void *)C.rmsnorm_fwd, "rmsnorm_fwd") || !have((const void *)C.rmsnorm_bwd, "rmsnorm_bwd")) goto done;
    gx = up(x, n * 4), gw = up(w, (size_t)dim * 4), gdy = up(dy, n * 4), gy = up(y, n * 4);
    grs = up(rs, (size_t)rows * 4), gdx = up(dx, n * 4), gdw = up(dw, (size_t)dim * 4);
    CHECK_OK(C.rmsnorm_fwd(C.user, PAR_F32, rows, dim, x, w, 1e-6f, ry, rrs));
    CHECK_OK(G.rmsnorm_fwd(G.user, PAR_F32, rows, dim, (float *)gx, (float *)gw, 1e-6f, (float *)gy, (float *)grs));
    down(y, gy, n * 4);
    down(rs, grs, (size_t)rows * 4);
    CHECK_MSG(close_to("y", y, ry, n, 1e-5, 1e-5), "%s", what);
    CHECK_MSG(close_to("rstd", rs, rrs, (size_t)rows, 1e-6, 1e-5), "%s", what);
    CHECK_OK(C.rmsnorm_bwd(C.user, PAR_F32, rows, dim, x, w, rrs, dy, rdx, rdw));
    /* dx aliasing dy on the GPU: dw must still see the original dy */
    CHECK_OK(G.rmsnorm_bwd(G.user, PAR_F32, rows, dim, (float *)gx, (float *)gw, (float *)grs, (float *)gdy,
                           (float *)gdy, (float *)gdw));
    down(dx, gdy, n * 4);
    down(dw, gdw, (size_t)dim * 4);
    CHECK_MSG(close_to("dx", dx, rdx, n, 1e-5, 1e-4), "%s", what);
    CHECK_MSG(close_to("dw", dw, rdw, (size_t)dim, 1e-4, 1e-4), "%s", what);
    gfree(gx), gfree(gw), gfree(gdy), gfree(gy), gfree(grs), gfree(gdx), gfree(gdw);
done:
    free(x), free(w), free(dy), free(y), free(ry), free(rs), free(rrs), free(dx), free(rdx), free(dw), free(rdw);
}

static void test_rope(int64_t tokens, int64_t heads, int64_t hd) {
    const size_t n = (size_t)(tokens * heads * hd);
    float *x = falloc(n), *y = falloc(n), *ry = falloc(n), *dx = falloc(n), *rdx = falloc(n);
    int64_t *pos = (int64_t *)calloc((size_t)tokens, 8);
    void *gx, *gy, *gp;
    for (int64_t t = 0; t < tokens; t++) pos[t] = (t * 37 + 5) % 4099 + (t % 3) * 100000; /* large angles too */
    fill(x, n, 1.0f);
    if (!have((const void *)C.rope_fwd, "rope_fwd") || !have((const void *)C.rope_bwd, "rope_bwd")) goto done;
    gx = up(x, n * 4), gy = up(y, n * 4), gp = up(pos, (size_t)tokens * 8);
    CHECK_OK(C.rope_fwd(C.user, PAR_F32, tokens, heads, hd, pos, 10000.0f, x, ry));
    CHECK_OK(G.rope_fwd(G.user, PAR_F32, tokens, heads, hd, (int64_t *)gp, 10000.0f, (float *)gx, (float *)gy));
    down(y, gy, n * 4);
    CHECK_MSG(close_to("rope y", y, ry, n, 1e-6, 1e-5), "rope fwd %lld %lld %lld", (long long)tokens,
              (long long)heads, (long long)hd);
    CHECK_OK(C.rope_bwd(C.user, PAR_F32, tokens, heads, hd, pos, 500000.0f, x, rdx));
    CHECK_OK(G.rope_bwd(G.user, PAR_F32, tokens, heads, hd, (int64_t *)gp, 500000.0f, (float *)gx,
                        (float *)gx)); /* in place */
    down(dx, gx, n * 4);
    CHECK_MSG(close_to("rope dx", dx, rdx, n, 1e-6, 1e-5), "rope bwd");
    CHECK_ERR(G.rope_fwd(G.user, PAR_F32, tokens, heads, 7, (int64_t *)gp, 1e4f, (float *)gx, (float *)gy),
              PAR_EINVAL, "even");
    gfree(gx), gfree(gy), gfree(gp);
done:
    free(x), free(y), free(ry), free(dx), free(rdx), free(pos);
}

static void test_swiglu(int64_t n) {
    float *g = falloc((size_t)n), *u = falloc((size_t)n), *dh = falloc((size_t)n), *h = falloc((size_t)n);
    float *rh = falloc((size_t)n), *dg = falloc((size_t)n), *rdg = falloc((size_t)n), *du = falloc((size_t)n),
          *rdu = falloc((size_t)n);
    void *gg, *gu, *gdh, *gh, *gdu;
    fill(g, (size_t)n, 6.0f);
    fill(u, (size_t)n, 1.0f);
    fill(dh, (size_t)n, 1.0f);
    if (!have((const void *)C.swiglu_fwd, "swiglu_fwd") || !have((const void *)C.swiglu_bwd, "swiglu_bwd")) goto done;
    gg = up(g, (size_t)n * 4), gu = up(u, (size_t)n * 4), gdh = up(dh, (size_t)n * 4), gh = up(h, (size_t)n * 4);
    gdu = up(du, (size_t)n * 4);
    CHECK_OK(C.swiglu_fwd(C.user, PAR_F32, n, g, u, rh));
    CHECK_OK(G.swiglu_fwd(G.user, PAR_F32, n, (float *)gg, (float *)gu, (float *)gh));
    down(h, gh, (size_t)n * 4);
    CHECK_MSG(close_to("swiglu h", h, rh, (size_t)n, 1e-6, 1e-5), "n=%lld", (long long)n);
    CHECK_OK(C.swiglu_bwd(C.user, PAR_F32, n, g, u, dh, rdg, rdu));
    CHECK_OK(G.swiglu_bwd(G.user, PAR_F32, n, (float *)gg, (float *)gu, (float *)gdh, (float *)gdh,
                          (float *)gdu)); /* dg = dh */
    down(dg, gdh, (size_t)n * 4);
    down(du, gdu, (size_t)n * 4);
    CHECK_MSG(close_to("swiglu dg", dg, rdg, (size_t)n, 1e-6, 1e-5), "n=%lld", (long long)n);
    CHECK_MSG(close_to("swiglu du", du, rdu, (size_t)n, 1e-6, 1e-5), "n=%lld", (long long)n);
    gfree(gg), gfree(gu), gfree(gdh), gfree(gh), gfree(gdu);
done:
    free(g), free(u), free(dh), free(h), free(rh), free(dg), free(rdg), free(du), free(rdu);
}

static void test_embedding(void) {
    const int64_t n = 37, dim = 19, rows = 11, start = 7;
    int32_t ids[37];
    float *table = falloc((size_t)(rows * dim)), *out = falloc((size_t)(n * dim)), *rout = falloc((size_t)(n * dim));
    float *dout = falloc((size_t)(n * dim)), *dt = falloc((size_t)(rows * dim)), *rdt = falloc((size_t)(rows * dim));
    void *gids, *gt, *go, *gdo, *gdt;
    for (int64_t t = 0; t < n; t++) ids[t] = (int32_t)((t * 5) % 23); /* 0..22: below, inside, above the shard; repeats */
    fill(table, (size_t)(rows * dim), 1.0f);
    fill(dout, (size_t)(n * dim), 1.0f);
    fill(dt, (size_t)(rows * dim), 1.0f);
    memcpy(rdt, dt, (size_t)(rows * dim) * 4);
    if (!have((const void *)C.embedding_fwd, "embedding_fwd") || !have((const void *)C.embedding_bwd, "embedding_bwd"))
        goto done;
    gids = up(ids, sizeof ids), gt = up(table, (size_t)(rows * dim) * 4), go = up(out, (size_t)(n * dim) * 4);
    gdo = up(dout, (size_t)(n * dim) * 4), gdt = up(dt, (size_t)(rows * dim) * 4);
    CHECK_OK(C.embedding_fwd(C.user, PAR_F32, n, ids, table, rows, dim, start, rout));
    CHECK_OK(G.embedding_fwd(G.user, PAR_F32, n, (int32_t *)gids, (float *)gt, rows, dim, start, (float *)go));
    down(out, go, (size_t)(n * dim) * 4);
    CHECK_MSG(close_to("embedding out", out, rout, (size_t)(n * dim), 0, 0), "exact copy expected");
    CHECK_OK(C.embedding_bwd(C.user, PAR_F32, n, ids, dout, rows, dim, start, rdt));
    CHECK_OK(G.embedding_bwd(G.user, PAR_F32, n, (int32_t *)gids, (float *)gdo, rows, dim, start, (float *)gdt));
    down(dt, gdt, (size_t)(rows * dim) * 4);
    CHECK_MSG(close_to("embedding dtable", dt, rdt, (size_t)(rows * dim), 1e-6, 1e-6), "scatter-add");
    /* A negative id is only seen by the device: the next synchronize reports it, once. */
    ids[3] = -2;
    CHECK_OK(G.memcpy(G.user, gids, ids, sizeof ids, PAR_COPY_HOST_TO_DEVICE));
    CHECK_OK(G.embedding_fwd(G.user, PAR_F32, n, (int32_t *)gids, (float *)gt, rows, dim, start, (float *)go));
    CHECK_ERR(G.synchronize(G.user), PAR_EINVAL, "negative");
    CHECK_OK(G.synchronize(G.user));
    gfree(gids), gfree(gt), gfree(go), gfree(gdo), gfree(gdt);
done:
    free(table), free(out), free(rout), free(dout), free(dt), free(rdt);
}

static void test_xent(int64_t rows, int64_t vocab) {
    const size_t n = (size_t)(rows * vocab);
    const int64_t split = vocab / 3; /* shard 0: [0, split), shard 1: [split, vocab) */
    float *x = falloc(n), *loss = falloc((size_t)rows), *rloss = falloc((size_t)rows), *d = falloc(n), *rd = falloc(n);
    float *mx[2], *se[2], *tg[2], gmax_h[64], gsum_h[64], tgt_h[64], *loss2 = falloc((size_t)rows);
    int32_t *t = (int32_t *)calloc((size_t)rows, 4);
    void *gx, *gt, *gl, *gd, *gmax, *gsum, *gtgt;
    const float scale = 1.0f / (float)rows;
    if (rows > 64) return;
    for (int64_t r = 0; r < rows; r++) t[r] = r % 5 == 3 ? -100 : (int32_t)((r * 13) % vocab);
    fill(x, n, 8.0f);
    if (!have((const void *)C.xent, "xent")) goto done;
    gx = up(x, n * 4), gt = up(t, (size_t)rows * 4), gl = up(loss, (size_t)rows * 4), gd = up(d, n * 4);
    CHECK_OK(C.xent(C.user, PAR_F32, rows, vocab, x, t, rloss, rd, scale));
    CHECK_OK(G.xent(G.user, PAR_F32, rows, vocab, (float *)gx, (int32_t *)gt, (float *)gl, (float *)gd, scale));
    down(loss, gl, (size_t)rows * 4);
    down(d, gd, n * 4);
    CHECK_MSG(close_to("xent loss", loss, rloss, (size_t)rows, 1e-5, 1e-5), "rows %lld vocab %lld", (long long)rows,
              (long long)vocab);
    CHECK_MSG(close_to("xent dlogits", d, rd, n, 1e-7, 1e-5), "rows %lld vocab %lld", (long long)rows,
              (long long)vocab);

    /* Vocab split in two shards, pieces combined here as the all-reduces would. */
    for (int s = 0; s < 2; s++) {
        mx[s] = falloc((size_t)rows);
        se[s] = falloc((size_t)rows);
        tg[s] = falloc((size_t)rows);
    }
    gmax = up(gmax_h, (size_t)rows * 4), gsum = up(gsum_h, (size_t)rows * 4), gtgt = up(tgt_h, (size_t)rows * 4);
    for (int s = 0; s < 2; s++) {
        const int64_t v0 = s ? split : 0, vl = s ? vocab - split : split;
        float *shard = falloc((size_t)(rows * vl));
        void *gs;
        for (int64_t r = 0; r < rows; r++) memcpy(shard + r * vl, x + r * vocab + v0, (size_t)vl * 4);
        gs = up(shard, (size_t)(rows * vl) * 4);
        CHECK_OK(G.xent_local_max(G.user, PAR_F32, rows, vl, (float *)gs, (float *)gmax));
        down(mx[s], gmax, (size_t)rows * 4);
        CHECK_OK(G.xent_local_target(G.user, PAR_F32, rows, vl, (float *)gs, (int32_t *)gt, v0, (float *)gtgt));
        down(tg[s], gtgt, (size_t)rows * 4);
        gfree(gs);
        free(shard);
    }
    for (int64_t r = 0; r < rows; r++) {
        gmax_h[r] = mx[0][r] > mx[1][r] ? mx[0][r] : mx[1][r];
        tgt_h[r] = tg[0][r] + tg[1][r];
    }
    CHECK_OK(G.memcpy(G.user, gmax, gmax_h, (size_t)rows * 4, PAR_COPY_HOST_TO_DEVICE));
    for (int s = 0; s < 2; s++) {
        const int64_t v0 = s ? split : 0, vl = s ? vocab - split : split;
        float *shard = falloc((size_t)(rows * vl));
        void *gs;
        for (int64_t r = 0; r < rows; r++) memcpy(shard + r * vl, x + r * vocab + v0, (size_t)vl * 4);
        gs = up(shard, (size_t)(rows * vl) * 4);
        CHECK_OK(G.xent_local_sumexp(G.user, PAR_F32, rows, vl, (float *)gs, (float *)gmax, (float *)gsum));
        down(se[s], gsum, (size_t)rows * 4);
        gfree(gs);
        free(shard);
    }
    for (int64_t r = 0; r < rows; r++) gsum_h[r] = se[0][r] + se[1][r];
    CHECK_OK(G.memcpy(G.user, gsum, gsum_h, (size_t)rows * 4, PAR_COPY_HOST_TO_DEVICE));
    CHECK_OK(G.memcpy(G.user, gtgt, tgt_h, (size_t)rows * 4, PAR_COPY_HOST_TO_DEVICE));
    CHECK_OK(G.xent_loss_from_pieces(G.user, rows, (float *)gmax, (float *)gsum, (float *)gtgt, (int32_t *)gt,
                                     (float *)gl));
    down(loss2, gl, (size_t)rows * 4);
    CHECK_MSG(close_to("split loss", loss2, rloss, (size_t)rows, 1e-5, 1e-5), "vocab-split loss vs full");
    for (int s = 0; s < 2; s++) {
        const int64_t v0 = s ? split : 0, vl = s ? vocab - split : split;
        float *shard = falloc((size_t)(rows * vl)), *want = falloc((size_t)(rows * vl));
        void *gs;
        for (int64_t r = 0; r < rows; r++) {
            memcpy(shard + r * vl, x + r * vocab + v0, (size_t)vl * 4);
            memcpy(want + r * vl, rd + r * vocab + v0, (size_t)vl * 4);
        }
        gs = up(shard, (size_t)(rows * vl) * 4);
        CHECK_OK(G.xent_bwd_split(G.user, PAR_F32, rows, vl, (float *)gs, (int32_t *)gt, v0, (float *)gmax,
                                  (float *)gsum, scale, (float *)gs)); /* in place */
        down(shard, gs, (size_t)(rows * vl) * 4);
        CHECK_MSG(close_to("split dlogits", shard, want, (size_t)(rows * vl), 1e-7, 1e-4), "shard %d", s);
        gfree(gs);
        free(shard);
        free(want);
    }
    /* dlogits aliasing logits */
    CHECK_OK(G.xent(G.user, PAR_F32, rows, vocab, (float *)gx, (int32_t *)gt, (float *)gl, (float *)gx, scale));
    down(d, gx, n * 4);
    CHECK_MSG(close_to("xent in place", d, rd, n, 1e-7, 1e-5), "dlogits == logits");
    /* a target >= vocab is reported by the next synchronize */
    t[0] = (int32_t)vocab;
    CHECK_OK(G.memcpy(G.user, gt, t, (size_t)rows * 4, PAR_COPY_HOST_TO_DEVICE));
    CHECK_OK(G.xent(G.user, PAR_F32, rows, vocab, (float *)gd, (int32_t *)gt, (float *)gl, NULL, scale));
    CHECK_ERR(G.synchronize(G.user), PAR_EINVAL, "vocab");
    gfree(gx), gfree(gt), gfree(gl), gfree(gd), gfree(gmax), gfree(gsum), gfree(gtgt);
    for (int s = 0; s < 2; s++) free(mx[s]), free(se[s]), free(tg[s]);
done:
    free(x), free(loss), free(rloss), free(d), free(rd), free(loss2), free(t);
}

static void test_optim(int64_t n) {
    float *p = falloc((size_t)n), *g = falloc((size_t)n), *m = falloc((size_t)n), *v = falloc((size_t)n);
    float *rp = falloc((size_t)n), *rm = falloc((size_t)n), *rv = falloc((size_t)n), *got = falloc((size_t)n);
    void *gp, *gg, *gm, *gv;
    double s_gpu = -1, s_cpu = -2;
    fill(p, (size_t)n, 1.0f);
    memcpy(rp, p, (size_t)n * 4);
    if (!have((const void *)C.adamw, "adamw") || !have((const void *)C.sumsq, "sumsq") ||
        !have((const void *)C.scale, "scale") || !have((const void *)C.axpy, "axpy"))
        goto done;
    gp = up(p, (size_t)n * 4), gg = up(g, (size_t)n * 4), gm = up(m, (size_t)n * 4), gv = up(v, (size_t)n * 4);
    for (int64_t step = 1; step <= 3; step++) {
        fill(g, (size_t)n, 0.1f);
        CHECK_OK(G.memcpy(G.user, gg, g, (size_t)n * 4, PAR_COPY_HOST_TO_DEVICE));
        CHECK_OK(C.adamw(C.user, n, rp, g, rm, rv, 1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, step));
        CHECK_OK(G.adamw(G.user, n, (float *)gp, (float *)gg, (float *)gm, (float *)gv, 1e-2f, 0.9f, 0.95f, 1e-8f,
                         0.1f, step));
    }
    down(got, gp, (size_t)n * 4);
    CHECK_MSG(close_to("adamw p", got, rp, (size_t)n, 1e-6, 1e-5), "n=%lld", (long long)n);
    down(got, gv, (size_t)n * 4);
    CHECK_MSG(close_to("adamw v", got, rv, (size_t)n, 1e-9, 1e-5), "n=%lld", (long long)n);
    CHECK_OK(C.scale(C.user, n, -1.5f, rp));
    CHECK_OK(G.scale(G.user, n, -1.5f, (float *)gp));
    CHECK_OK(C.axpy(C.user, PAR_F32, n, 0.25f, g, rp));
    CHECK_OK(G.axpy(G.user, PAR_F32, n, 0.25f, (float *)gg, (float *)gp));
    down(got, gp, (size_t)n * 4);
    CHECK_MSG(close_to("scale+axpy", got, rp, (size_t)n, 1e-6, 1e-6), "n=%lld", (long long)n);
    CHECK_OK(C.sumsq(C.user, n, rp, &s_cpu));
    CHECK_OK(G.sumsq(G.user, n, (float *)gp, &s_gpu));
    CHECK_MSG(fabs(s_gpu - s_cpu) <= 1e-6 * (1 + fabs(s_cpu)), "sumsq %.17g vs %.17g", s_gpu, s_cpu);
    CHECK_ERR(G.sumsq(G.user, n, (float *)gp, NULL), PAR_EINVAL, "sumsq");
    if (have((const void *)C.convert, "convert") && have((const void *)G.convert, "convert")) {
        /* the same bits as the CPU table's (both round to nearest even), each way */
        static const par_dtype types[2] = {PAR_BF16, PAR_F16};
        uint16_t *want16 = (uint16_t *)malloc((size_t)n * 2), *got16 = (uint16_t *)malloc((size_t)n * 2);
        float *back = (float *)malloc((size_t)n * 4);
        void *g16 = up(want16, (size_t)n * 2);
        for (int k = 0; k < 2; k++) {
            CHECK_OK(C.convert(C.user, n, PAR_F32, rp, types[k], want16));
            CHECK_OK(G.convert(G.user, n, PAR_F32, gp, types[k], g16));
            down(got16, g16, (size_t)n * 2);
            CHECK_MSG(!memcmp(got16, want16, (size_t)n * 2), "convert f32 -> %s differs from the CPU table's",
                      par_dtype_name(types[k]));
            CHECK_OK(G.convert(G.user, n, types[k], g16, PAR_F32, gg));
            CHECK_OK(C.convert(C.user, n, types[k], want16, PAR_F32, back));
            down(got, gg, (size_t)n * 4);
            CHECK_MSG(!memcmp(got, back, (size_t)n * 4), "convert %s -> f32 differs", par_dtype_name(types[k]));
        }
        CHECK_ERR(G.convert(G.user, n, PAR_I32, gp, PAR_F32, gg), PAR_EINVAL, "only f32, bf16 and f16 convert");
        gfree(g16), free(want16), free(got16), free(back);
    }
    CHECK_ERR(G.adamw(G.user, n, (float *)gp, (float *)gg, (float *)gm, (float *)gv, 1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f,
                      0),
              PAR_EINVAL, "step");
    gfree(gp), gfree(gg), gfree(gm), gfree(gv);
done:
    free(p), free(g), free(m), free(v), free(rp), free(rm), free(rv), free(got);
}

/* ----------------------------------------------- 16-bit activation kernels

   For each activation kernel and bf16 / f16, inputs are drawn in f32 and
   rounded to the dtype (h16: the bits, and their exact widened values). The
   GPU's 16-bit call is checked two ways:
   (1) bit for bit against the GPU's own f32 kernel run on the widened inputs,
       its outputs rounded once here (half_round, tests/half.h: not CUDA's
       converters), and its f32 outputs (rstd, loss, sumexp) equal to the f32
       call's: the 16-bit path is widen, the f32 kernel's arithmetic in the same
       order, one round-to-nearest-even store. Not for dw and dtable, which f32
       atomics add up in an order that varies run to run.
   (2) against the CPU table's f32 kernel on the same widened inputs, rounded
       once: bit for bit where both sides are exact (embedding_fwd copies rows,
       xent_local_max and xent_local_target pick a widened logit); elsewhere the
       GPU's f32 value v and the CPU's r differ by that kernel's f32 tolerance
       tol = atol + rtol |r| (the one this file uses for the kernel in f32:
       expf, FMA contraction and the reduction order differ), and the one
       rounding moves v by at most half an ulp of the 16-bit type at |v| <=
       |r| + tol, so |got - r| <= tol + ulp16(|r| + tol) / 2 (near16). Where
       tol is below half an ulp, that is RNE(r) or a neighbour: one rounding
       flip. f32 outputs: the f32 tolerance alone (sumexp: its own, below). */

typedef struct h16 {
    size_t n;
    uint16_t *h; /* the dtype's bits */
    float *f;    /* their exact widened values */
} h16;

static h16 h16_draw(par_dtype ty, size_t n, float amp) {
    h16 a;
    a.n = n;
    a.h = (uint16_t *)calloc(n ? n : 1, 2);
    a.f = falloc(n);
    for (size_t i = 0; i < n; i++) {
        a.h[i] = half_round(ty, amp * frand());
        a.f[i] = (float)half_value(ty, a.h[i]);
    }
    return a;
}
static void h16_free(h16 *a) { free(a->h), free(a->f); }

static uint16_t *down16(const void *dev, size_t n) {
    uint16_t *h = (uint16_t *)calloc(n ? n : 1, 2);
    down(h, dev, n * 2);
    return h;
}
static float *down32(const void *dev, size_t n) {
    float *f = falloc(n);
    down(f, dev, n * 4);
    return f;
}

/* The spacing of the 16-bit type's values at magnitude a (subnormals: the
   smallest). */
static double ulp16(par_dtype ty, double a) {
    const int p = ty == PAR_BF16 ? 7 : 10, emin = ty == PAR_BF16 ? -126 : -14;
    int e;
    if (a == 0) return ldexp(1.0, emin - p);
    (void)frexp(a, &e); /* a = m 2^e, m in [0.5, 1) */
    e -= 1;
    return ldexp(1.0, (e < emin ? emin : e) - p);
}

/* (1) got[i] is f32[i] rounded once, bit for bit. */
static int same16(const char *what, par_dtype ty, const uint16_t *got, const float *f32, size_t n) {
    for (size_t i = 0; i < n; i++) {
        const uint16_t want = half_round(ty, f32[i]);
        if (got[i] != want) {
            fprintf(stderr, "  %s (%s): element %zu: got 0x%04x, want 0x%04x (%.9g rounded once)\n", what,
                    par_dtype_name(ty), i, (unsigned)got[i], (unsigned)want, (double)f32[i]);
            return 0;
        }
    }
    return 1;
}

/* (2) |got[i] - r[i]| <= tol + ulp16(|r| + tol) / 2, tol = atol + rtol |r|. */
static int near16(const char *what, par_dtype ty, const uint16_t *got, const float *r, size_t n, double atol,
                  double rtol) {
    for (size_t i = 0; i < n; i++) {
        const double g = half_value(ty, got[i]), w = r[i], tol = atol + rtol * fabs(w);
        const double bound = tol + 0.5 * ulp16(ty, fabs(w) + tol);
        if (!(fabs(g - w) <= bound)) { /* a nan fails too */
            fprintf(stderr, "  %s (%s): element %zu: got %.9g, CPU f32 %.9g, bound %.3g\n", what, par_dtype_name(ty),
                    i, g, w, bound);
            return 0;
        }
    }
    return 1;
}

static void test_rmsnorm16(par_dtype ty, int64_t rows, int64_t dim) {
    const size_t n = (size_t)(rows * dim), d = (size_t)dim, r = (size_t)rows;
    h16 x = h16_draw(ty, n, 2.0f), w = h16_draw(ty, d, 1.0f), dy = h16_draw(ty, n, 1.0f);
    float *ry = falloc(n), *rrs = falloc(r), *rdx = falloc(n), *rdw = falloc(d), *dw0 = falloc(d);
    float *y32, *rs32, *rs16, *dx32, *dw16;
    uint16_t *y16, *dx16;
    void *gx, *gw, *gdy, *gy, *grs, *gdw, *gx32, *gw32, *gdy32, *gy32, *grs32, *gdx32, *gdw32;
    char what[96];
    snprintf(what, sizeof what, "rmsnorm %s [%lld, %lld]", par_dtype_name(ty), (long long)rows, (long long)dim);
    fill(dw0, d, 1.0f);
    memcpy(rdw, dw0, d * 4);
    gx = up(x.h, n * 2), gw = up(w.h, d * 2), gdy = up(dy.h, n * 2), gy = up(dy.h, n * 2);
    grs = up(rrs, r * 4), gdw = up(dw0, d * 4);
    gx32 = up(x.f, n * 4), gw32 = up(w.f, d * 4), gdy32 = up(dy.f, n * 4), gy32 = up(ry, n * 4);
    grs32 = up(rrs, r * 4), gdx32 = up(ry, n * 4), gdw32 = up(dw0, d * 4);
    CHECK_OK(C.rmsnorm_fwd(C.user, PAR_F32, rows, dim, x.f, w.f, 1e-6f, ry, rrs));
    CHECK_OK(G.rmsnorm_fwd(G.user, PAR_F32, rows, dim, gx32, gw32, 1e-6f, gy32, (float *)grs32));
    CHECK_OK(G.rmsnorm_fwd(G.user, ty, rows, dim, gx, gw, 1e-6f, gy, (float *)grs));
    y32 = down32(gy32, n), rs32 = down32(grs32, r), y16 = down16(gy, n), rs16 = down32(grs, r);
    CHECK_MSG(same16("rmsnorm y", ty, y16, y32, n), "%s: y is not the f32 kernel's rounded once", what);
    CHECK_MSG(!memcmp(rs16, rs32, r * 4), "%s: rstd differs from the f32 kernel's", what);
    CHECK_MSG(near16("rmsnorm y", ty, y16, ry, n, 1e-5, 1e-5), "%s: y vs the CPU's", what);
    CHECK_MSG(close_to("rmsnorm rstd", rs16, rrs, r, 1e-6, 1e-5), "%s: rstd vs the CPU's", what);
    /* Backward from each side's own rstd; on the 16-bit call dx overwrites dy,
       which dw must still see. */
    CHECK_OK(C.rmsnorm_bwd(C.user, PAR_F32, rows, dim, x.f, w.f, rrs, dy.f, rdx, rdw));
    CHECK_OK(G.rmsnorm_bwd(G.user, PAR_F32, rows, dim, gx32, gw32, (float *)grs32, gdy32, gdx32, (float *)gdw32));
    CHECK_OK(G.rmsnorm_bwd(G.user, ty, rows, dim, gx, gw, (float *)grs, gdy, gdy, (float *)gdw));
    dx32 = down32(gdx32, n), dx16 = down16(gdy, n), dw16 = down32(gdw, d);
    CHECK_MSG(same16("rmsnorm dx", ty, dx16, dx32, n), "%s: dx is not the f32 kernel's rounded once", what);
    CHECK_MSG(near16("rmsnorm dx", ty, dx16, rdx, n, 1e-5, 1e-4), "%s: dx vs the CPU's", what);
    CHECK_MSG(close_to("rmsnorm dw (f32)", dw16, rdw, d, 1e-4, 1e-4), "%s: dw vs the CPU's", what);
    gfree(gx), gfree(gw), gfree(gdy), gfree(gy), gfree(grs), gfree(gdw);
    gfree(gx32), gfree(gw32), gfree(gdy32), gfree(gy32), gfree(grs32), gfree(gdx32), gfree(gdw32);
    h16_free(&x), h16_free(&w), h16_free(&dy);
    free(ry), free(rrs), free(rdx), free(rdw), free(dw0), free(y32), free(rs32), free(rs16), free(dx32), free(dw16);
    free(y16), free(dx16);
}

static void test_rope16(par_dtype ty, int64_t tokens, int64_t heads, int64_t hd) {
    const size_t n = (size_t)(tokens * heads * hd);
    h16 x = h16_draw(ty, n, 1.0f);
    float *ry = falloc(n), *rdx = falloc(n), *y32, *dx32;
    uint16_t *y16, *dx16;
    int64_t *pos = (int64_t *)calloc((size_t)tokens, 8);
    void *gx, *gy, *gx32, *gy32, *gdx32, *gp;
    char what[96];
    for (int64_t t = 0; t < tokens; t++) pos[t] = (t * 37 + 5) % 4099 + (t % 3) * 100000; /* large angles too */
    snprintf(what, sizeof what, "rope %s [%lld, %lld, %lld]", par_dtype_name(ty), (long long)tokens,
             (long long)heads, (long long)hd);
    gx = up(x.h, n * 2), gy = up(x.h, n * 2), gx32 = up(x.f, n * 4), gy32 = up(x.f, n * 4), gdx32 = up(x.f, n * 4);
    gp = up(pos, (size_t)tokens * 8);
    CHECK_OK(C.rope_fwd(C.user, PAR_F32, tokens, heads, hd, pos, 10000.0f, x.f, ry));
    CHECK_OK(G.rope_fwd(G.user, PAR_F32, tokens, heads, hd, (const int64_t *)gp, 10000.0f, gx32, gy32));
    CHECK_OK(G.rope_fwd(G.user, ty, tokens, heads, hd, (const int64_t *)gp, 10000.0f, gx, gy));
    y32 = down32(gy32, n), y16 = down16(gy, n);
    CHECK_MSG(same16("rope y", ty, y16, y32, n), "%s: y is not the f32 kernel's rounded once", what);
    CHECK_MSG(near16("rope y", ty, y16, ry, n, 1e-6, 1e-5), "%s: y vs the CPU's", what);
    /* backward in place on the 16-bit call */
    CHECK_OK(C.rope_bwd(C.user, PAR_F32, tokens, heads, hd, pos, 500000.0f, x.f, rdx));
    CHECK_OK(G.rope_bwd(G.user, PAR_F32, tokens, heads, hd, (const int64_t *)gp, 500000.0f, gx32, gdx32));
    CHECK_OK(G.rope_bwd(G.user, ty, tokens, heads, hd, (const int64_t *)gp, 500000.0f, gx, gx));
    dx32 = down32(gdx32, n), dx16 = down16(gx, n);
    CHECK_MSG(same16("rope dx", ty, dx16, dx32, n), "%s: dx is not the f32 kernel's rounded once", what);
    CHECK_MSG(near16("rope dx", ty, dx16, rdx, n, 1e-6, 1e-5), "%s: dx vs the CPU's", what);
    gfree(gx), gfree(gy), gfree(gx32), gfree(gy32), gfree(gdx32), gfree(gp);
    h16_free(&x);
    free(ry), free(rdx), free(y32), free(dx32), free(y16), free(dx16), free(pos);
}

static void test_swiglu16(par_dtype ty, int64_t n) {
    const size_t m = (size_t)n;
    h16 g = h16_draw(ty, m, 6.0f), u = h16_draw(ty, m, 1.0f), dh = h16_draw(ty, m, 1.0f);
    float *rh = falloc(m), *rdg = falloc(m), *rdu = falloc(m), *h32, *dg32, *du32;
    uint16_t *h16v, *dg16, *du16;
    void *gg, *gu, *gdh, *gh, *gdu, *gg32, *gu32, *gdh32, *gh32, *gdg32, *gdu32;
    char what[64];
    snprintf(what, sizeof what, "swiglu %s n=%lld", par_dtype_name(ty), (long long)n);
    gg = up(g.h, m * 2), gu = up(u.h, m * 2), gdh = up(dh.h, m * 2), gh = up(g.h, m * 2), gdu = up(g.h, m * 2);
    gg32 = up(g.f, m * 4), gu32 = up(u.f, m * 4), gdh32 = up(dh.f, m * 4), gh32 = up(g.f, m * 4);
    gdg32 = up(g.f, m * 4), gdu32 = up(g.f, m * 4);
    CHECK_OK(C.swiglu_fwd(C.user, PAR_F32, n, g.f, u.f, rh));
    CHECK_OK(G.swiglu_fwd(G.user, PAR_F32, n, gg32, gu32, gh32));
    CHECK_OK(G.swiglu_fwd(G.user, ty, n, gg, gu, gh));
    h32 = down32(gh32, m), h16v = down16(gh, m);
    CHECK_MSG(same16("swiglu h", ty, h16v, h32, m), "%s: h is not the f32 kernel's rounded once", what);
    CHECK_MSG(near16("swiglu h", ty, h16v, rh, m, 1e-6, 1e-5), "%s: h vs the CPU's", what);
    /* dg over dh on the 16-bit call */
    CHECK_OK(C.swiglu_bwd(C.user, PAR_F32, n, g.f, u.f, dh.f, rdg, rdu));
    CHECK_OK(G.swiglu_bwd(G.user, PAR_F32, n, gg32, gu32, gdh32, gdg32, gdu32));
    CHECK_OK(G.swiglu_bwd(G.user, ty, n, gg, gu, gdh, gdh, gdu));
    dg32 = down32(gdg32, m), du32 = down32(gdu32, m), dg16 = down16(gdh, m), du16 = down16(gdu, m);
    CHECK_MSG(same16("swiglu dg", ty, dg16, dg32, m), "%s: dg is not the f32 kernel's rounded once", what);
    CHECK_MSG(same16("swiglu du", ty, du16, du32, m), "%s: du is not the f32 kernel's rounded once", what);
    CHECK_MSG(near16("swiglu dg", ty, dg16, rdg, m, 1e-6, 1e-5), "%s: dg vs the CPU's", what);
    CHECK_MSG(near16("swiglu du", ty, du16, rdu, m, 1e-6, 1e-5), "%s: du vs the CPU's", what);
    gfree(gg), gfree(gu), gfree(gdh), gfree(gh), gfree(gdu);
    gfree(gg32), gfree(gu32), gfree(gdh32), gfree(gh32), gfree(gdg32), gfree(gdu32);
    h16_free(&g), h16_free(&u), h16_free(&dh);
    free(rh), free(rdg), free(rdu), free(h32), free(dg32), free(du32), free(h16v), free(dg16), free(du16);
}

/* embedding_fwd copies rows as stored: the CPU's widened rows rounded back
   are the same bits, exactly. dtable is f32 (atomics: the f32 tolerance). */
static void test_embedding16(par_dtype ty) {
    const int64_t n = 37, dim = 19, rows = 11, start = 7;
    const size_t no = (size_t)(n * dim), nt = (size_t)(rows * dim);
    int32_t ids[37];
    h16 table = h16_draw(ty, nt, 1.0f), dout = h16_draw(ty, no, 1.0f);
    float *rout = falloc(no), *rdt = falloc(nt), *dt0 = falloc(nt), *dtab;
    uint16_t *out16;
    void *gids, *gt, *go, *gdo, *gdt;
    for (int64_t t = 0; t < n; t++) ids[t] = (int32_t)((t * 5) % 23); /* below, inside, above the shard; repeats */
    fill(dt0, nt, 1.0f);
    memcpy(rdt, dt0, nt * 4);
    gids = up(ids, sizeof ids), gt = up(table.h, nt * 2), go = up(dout.h, no * 2), gdo = up(dout.h, no * 2);
    gdt = up(dt0, nt * 4);
    CHECK_OK(C.embedding_fwd(C.user, PAR_F32, n, ids, table.f, rows, dim, start, rout));
    CHECK_OK(G.embedding_fwd(G.user, ty, n, (const int32_t *)gids, gt, rows, dim, start, go));
    out16 = down16(go, no);
    CHECK_MSG(same16("embedding out", ty, out16, rout, no), "%s: not the CPU's rows bit for bit",
              par_dtype_name(ty));
    CHECK_OK(C.embedding_bwd(C.user, PAR_F32, n, ids, dout.f, rows, dim, start, rdt));
    CHECK_OK(G.embedding_bwd(G.user, ty, n, (const int32_t *)gids, gdo, rows, dim, start, (float *)gdt));
    dtab = down32(gdt, nt);
    CHECK_MSG(close_to("embedding dtable (f32)", dtab, rdt, nt, 1e-6, 1e-6), "%s: dtable vs the CPU's",
              par_dtype_name(ty));
    gfree(gids), gfree(gt), gfree(go), gfree(gdo), gfree(gdt);
    h16_free(&table), h16_free(&dout);
    free(rout), free(rdt), free(dt0), free(dtab), free(out16);
}

/* The full cross-entropy, then the vocab-split pieces on two shards (the
   first third of the vocab, the rest), combined here as the all-reduces
   would. sumexp against the CPU: each term is an expf of the same f32
   argument (CUDA's expf within 2 ulp, glibc's within 1) of a sum of
   positive terms in double, each side rounded to f32 once: relative 1e-6. */
static void test_xent16(par_dtype ty, int64_t rows, int64_t vocab) {
    const size_t n = (size_t)(rows * vocab), nr = (size_t)rows;
    const int64_t split = vocab / 3;
    const float scale = 1.0f / (float)rows;
    h16 x = h16_draw(ty, n, 8.0f);
    int32_t *tg = (int32_t *)calloc(nr, 4);
    float *rloss = falloc(nr), *rd = falloc(n), *gmax_h = falloc(nr), *gsum_h = falloc(nr), *piece = falloc(nr);
    float *loss32, *loss16, *d32;
    uint16_t *d16, *d16b;
    void *gx, *gx32, *gt, *gl, *gl32, *gd, *gd32, *gmax, *gsum, *gpiece, *gpiece32;
    char what[96];
    for (int64_t r = 0; r < rows; r++) tg[r] = r % 5 == 3 ? -100 : (int32_t)((r * 13) % vocab);
    snprintf(what, sizeof what, "xent %s [%lld, %lld]", par_dtype_name(ty), (long long)rows, (long long)vocab);
    gx = up(x.h, n * 2), gx32 = up(x.f, n * 4), gt = up(tg, nr * 4), gl = up(rloss, nr * 4);
    gl32 = up(rloss, nr * 4), gd = up(x.h, n * 2), gd32 = up(x.f, n * 4);
    gmax = up(gmax_h, nr * 4), gsum = up(gsum_h, nr * 4), gpiece = up(piece, nr * 4), gpiece32 = up(piece, nr * 4);
    CHECK_OK(C.xent(C.user, PAR_F32, rows, vocab, x.f, tg, rloss, rd, scale));
    CHECK_OK(G.xent(G.user, PAR_F32, rows, vocab, gx32, (const int32_t *)gt, (float *)gl32, gd32, scale));
    CHECK_OK(G.xent(G.user, ty, rows, vocab, gx, (const int32_t *)gt, (float *)gl, gd, scale));
    loss32 = down32(gl32, nr), loss16 = down32(gl, nr), d32 = down32(gd32, n), d16 = down16(gd, n);
    CHECK_MSG(!memcmp(loss16, loss32, nr * 4), "%s: loss differs from the f32 kernel's", what);
    CHECK_MSG(close_to("xent loss", loss16, rloss, nr, 1e-5, 1e-5), "%s: loss vs the CPU's", what);
    CHECK_MSG(same16("xent dlogits", ty, d16, d32, n), "%s: dlogits are not the f32 kernel's rounded once", what);
    CHECK_MSG(near16("xent dlogits", ty, d16, rd, n, 1e-7, 1e-5), "%s: dlogits vs the CPU's", what);
    /* dlogits over the logits: the same bits */
    CHECK_OK(G.memcpy(G.user, gd, x.h, n * 2, PAR_COPY_HOST_TO_DEVICE));
    CHECK_OK(G.xent(G.user, ty, rows, vocab, gd, (const int32_t *)gt, (float *)gl, gd, scale));
    d16b = down16(gd, n);
    CHECK_MSG(!memcmp(d16b, d16, n * 2), "%s: dlogits over the logits differ", what);

    {
        h16 sh[2];
        void *gs[2], *gs32[2];
        float *want = falloc(n), *got = NULL;
        uint16_t *got16 = NULL;
        for (int s = 0; s < 2; s++) { /* the shards: rows of vl logits from v0 */
            const int64_t v0 = s ? split : 0, vl = s ? vocab - split : split;
            const size_t ns = (size_t)(rows * vl);
            sh[s].n = ns;
            sh[s].h = (uint16_t *)calloc(ns ? ns : 1, 2);
            sh[s].f = falloc(ns);
            for (int64_t r = 0; r < rows; r++) {
                memcpy(sh[s].h + r * vl, x.h + r * vocab + v0, (size_t)vl * 2);
                memcpy(sh[s].f + r * vl, x.f + r * vocab + v0, (size_t)vl * 4);
            }
            gs[s] = up(sh[s].h, ns * 2), gs32[s] = up(sh[s].f, ns * 4);
        }
        for (int s = 0; s < 2; s++) { /* max and target logit: exact on both sides */
            const int64_t v0 = s ? split : 0, vl = s ? vocab - split : split;
            CHECK_OK(C.xent_local_max(C.user, PAR_F32, rows, vl, sh[s].f, want));
            CHECK_OK(G.xent_local_max(G.user, ty, rows, vl, gs[s], (float *)gpiece));
            got = down32(gpiece, nr);
            CHECK_MSG(!memcmp(got, want, nr * 4), "%s shard %d: xent_local_max differs from the CPU's", what, s);
            for (int64_t r = 0; r < rows; r++) gmax_h[r] = s == 0 || want[r] > gmax_h[r] ? want[r] : gmax_h[r];
            free(got);
            CHECK_OK(C.xent_local_target(C.user, PAR_F32, rows, vl, sh[s].f, tg, v0, want));
            CHECK_OK(G.xent_local_target(G.user, ty, rows, vl, gs[s], (const int32_t *)gt, v0, (float *)gpiece));
            got = down32(gpiece, nr);
            CHECK_MSG(!memcmp(got, want, nr * 4), "%s shard %d: xent_local_target differs from the CPU's", what, s);
            free(got);
        }
        CHECK_OK(G.memcpy(G.user, gmax, gmax_h, nr * 4, PAR_COPY_HOST_TO_DEVICE));
        for (int s = 0; s < 2; s++) {
            const int64_t vl = s ? vocab - split : split;
            float *got32;
            CHECK_OK(C.xent_local_sumexp(C.user, PAR_F32, rows, vl, sh[s].f, gmax_h, want));
            CHECK_OK(G.xent_local_sumexp(G.user, PAR_F32, rows, vl, gs32[s], (const float *)gmax, (float *)gpiece32));
            CHECK_OK(G.xent_local_sumexp(G.user, ty, rows, vl, gs[s], (const float *)gmax, (float *)gpiece));
            got = down32(gpiece, nr), got32 = down32(gpiece32, nr);
            CHECK_MSG(!memcmp(got, got32, nr * 4), "%s shard %d: sumexp differs from the f32 kernel's", what, s);
            CHECK_MSG(close_to("xent_local_sumexp", got, want, nr, 0, 1e-6), "%s shard %d: sumexp vs the CPU's", what,
                      s);
            for (int64_t r = 0; r < rows; r++) gsum_h[r] = s == 0 ? want[r] : gsum_h[r] + want[r];
            free(got), free(got32);
        }
        CHECK_OK(G.memcpy(G.user, gsum, gsum_h, nr * 4, PAR_COPY_HOST_TO_DEVICE));
        for (int s = 0; s < 2; s++) { /* this shard's gradient, in place on the 16-bit call */
            const int64_t v0 = s ? split : 0, vl = s ? vocab - split : split;
            const size_t ns = (size_t)(rows * vl);
            CHECK_OK(C.xent_bwd_split(C.user, PAR_F32, rows, vl, sh[s].f, tg, v0, gmax_h, gsum_h, scale, want));
            CHECK_OK(G.xent_bwd_split(G.user, PAR_F32, rows, vl, gs32[s], (const int32_t *)gt, v0,
                                      (const float *)gmax, (const float *)gsum, scale, gs32[s]));
            CHECK_OK(G.xent_bwd_split(G.user, ty, rows, vl, gs[s], (const int32_t *)gt, v0, (const float *)gmax,
                                      (const float *)gsum, scale, gs[s]));
            got = down32(gs32[s], ns), got16 = down16(gs[s], ns);
            CHECK_MSG(same16("xent_bwd_split", ty, got16, got, ns), "%s shard %d: not the f32 kernel's rounded once",
                      what, s);
            CHECK_MSG(near16("xent_bwd_split", ty, got16, want, ns, 1e-7, 1e-5), "%s shard %d: vs the CPU's", what,
                      s);
            free(got), free(got16);
            gfree(gs[s]), gfree(gs32[s]);
            h16_free(&sh[s]);
        }
        free(want);
    }
    gfree(gx), gfree(gx32), gfree(gt), gfree(gl), gfree(gl32), gfree(gd), gfree(gd32);
    gfree(gmax), gfree(gsum), gfree(gpiece), gfree(gpiece32);
    h16_free(&x);
    free(tg), free(rloss), free(rd), free(gmax_h), free(gsum_h), free(piece), free(loss32), free(loss16), free(d32);
    free(d16), free(d16b);
}

static void test_axpy16(par_dtype ty, int64_t n) {
    const size_t m = (size_t)n;
    const float alpha = -0.3f; /* not a power of two: alpha x rounds (and FMA matters in f32) */
    h16 x = h16_draw(ty, m, 1.0f), y = h16_draw(ty, m, 1.0f);
    float *ry = falloc(m), *y32;
    uint16_t *y16;
    void *gx = up(x.h, m * 2), *gy = up(y.h, m * 2), *gx32 = up(x.f, m * 4), *gy32 = up(y.f, m * 4);
    char what[64];
    snprintf(what, sizeof what, "axpy %s n=%lld", par_dtype_name(ty), (long long)n);
    memcpy(ry, y.f, m * 4);
    CHECK_OK(C.axpy(C.user, PAR_F32, n, alpha, x.f, ry));
    CHECK_OK(G.axpy(G.user, PAR_F32, n, alpha, gx32, gy32));
    CHECK_OK(G.axpy(G.user, ty, n, alpha, gx, gy));
    y32 = down32(gy32, m), y16 = down16(gy, m);
    CHECK_MSG(same16("axpy y", ty, y16, y32, m), "%s: y is not the f32 kernel's rounded once", what);
    CHECK_MSG(near16("axpy y", ty, y16, ry, m, 1e-6, 1e-6), "%s: y vs the CPU's", what);
    gfree(gx), gfree(gy), gfree(gx32), gfree(gy32);
    h16_free(&x), h16_free(&y);
    free(ry), free(y32), free(y16);
}

/* A dtype that is not f32, bf16 or f16 fails first, before the sizes (so
   even an empty call), naming the kernel and the dtype. */
#define CHECK_DTYPE_ERR(call, kernel, ty)                                                        \
    do {                                                                                         \
        char needle_[80];                                                                        \
        snprintf(needle_, sizeof needle_, "cuda %s: dtype %s", kernel, par_dtype_name(ty));      \
        CHECK_ERR(call, PAR_EINVAL, needle_);                                                    \
    } while (0)

static void test_activation_dtypes(void) {
    static const par_dtype bad[3] = {PAR_I32, PAR_F64, PAR_DTYPE_COUNT};
    for (int b = 0; b < 3; b++) {
        const par_dtype ty = bad[b];
        CHECK_DTYPE_ERR(G.rmsnorm_fwd(G.user, ty, 0, 4, NULL, NULL, 1e-6f, NULL, NULL), "rmsnorm_fwd", ty);
        CHECK_DTYPE_ERR(G.rmsnorm_bwd(G.user, ty, 0, 4, NULL, NULL, NULL, NULL, NULL, NULL), "rmsnorm_bwd", ty);
        CHECK_DTYPE_ERR(G.rope_fwd(G.user, ty, 0, 1, 2, NULL, 1e4f, NULL, NULL), "rope_fwd", ty);
        CHECK_DTYPE_ERR(G.rope_bwd(G.user, ty, 0, 1, 2, NULL, 1e4f, NULL, NULL), "rope_bwd", ty);
        CHECK_DTYPE_ERR(G.swiglu_fwd(G.user, ty, 0, NULL, NULL, NULL), "swiglu_fwd", ty);
        CHECK_DTYPE_ERR(G.swiglu_bwd(G.user, ty, 0, NULL, NULL, NULL, NULL, NULL), "swiglu_bwd", ty);
        CHECK_DTYPE_ERR(G.embedding_fwd(G.user, ty, 0, NULL, NULL, 1, 4, 0, NULL), "embedding_fwd", ty);
        CHECK_DTYPE_ERR(G.embedding_bwd(G.user, ty, 0, NULL, NULL, 1, 4, 0, NULL), "embedding_bwd", ty);
        CHECK_DTYPE_ERR(G.xent(G.user, ty, 0, 4, NULL, NULL, NULL, NULL, 1.0f), "xent", ty);
        CHECK_DTYPE_ERR(G.xent_local_max(G.user, ty, 0, 4, NULL, NULL), "xent_local_max", ty);
        CHECK_DTYPE_ERR(G.xent_local_sumexp(G.user, ty, 0, 4, NULL, NULL, NULL), "xent_local_sumexp", ty);
        CHECK_DTYPE_ERR(G.xent_local_target(G.user, ty, 0, 4, NULL, NULL, 0, NULL), "xent_local_target", ty);
        CHECK_DTYPE_ERR(G.xent_bwd_split(G.user, ty, 0, 4, NULL, NULL, 0, NULL, NULL, 1.0f, NULL), "xent_bwd_split",
                        ty);
        CHECK_DTYPE_ERR(G.axpy(G.user, ty, 0, 1.0f, NULL, NULL), "axpy", ty);
    }
    /* the 16-bit types take the f32 rules: empty calls are fine, NULL tensors are not */
    CHECK_OK(G.swiglu_fwd(G.user, PAR_BF16, 0, NULL, NULL, NULL));
    CHECK_OK(G.axpy(G.user, PAR_F16, 0, 1.0f, NULL, NULL));
    CHECK_ERR(G.rmsnorm_fwd(G.user, PAR_BF16, 2, 4, NULL, NULL, 1e-6f, NULL, NULL), PAR_EINVAL, "NULL");
    CHECK_ERR(G.xent(G.user, PAR_F16, 2, 4, NULL, NULL, NULL, NULL, 1.0f), PAR_EINVAL, "NULL");
}

static void test_activations16(void) {
    static const par_dtype types[2] = {PAR_BF16, PAR_F16};
    for (int k = 0; k < 2; k++) {
        const par_dtype ty = types[k];
        test_rmsnorm16(ty, 1, 7);
        test_rmsnorm16(ty, 33, 4096);
        test_rmsnorm16(ty, 300, 130);
        test_rope16(ty, 5, 3, 64);
        test_rope16(ty, 70, 4, 128);
        test_swiglu16(ty, 1);
        test_swiglu16(ty, 100003);
        test_embedding16(ty);
        test_xent16(ty, 7, 50);
        test_xent16(ty, 33, 32000);
        test_axpy16(ty, 1);
        test_axpy16(ty, 300001);
    }
    test_activation_dtypes();
}

int main(void) {
    int count = 0;
    par_cpu_desc cd;
    if (par_cuda_device_info(&count, NULL, 0) != PAR_OK || count < 1) {
        printf("cuda_compute: 0 passed, 1 failed (no CUDA device: %s)\n", par_cuda_last_error());
        return 1;
    }
    memset(&cd, 0, sizeof cd);
    CHECK_OK(par_compute_cuda(NULL, &G));
    CHECK_OK(par_compute_cpu(&cd, &C));
    CHECK_STR(G.name, "cuda");
    CHECK_INT(G.device_memory, 1);
    CHECK(G.stream != NULL);
    CHECK_ERR(par_compute_cuda(NULL, NULL), PAR_EINVAL, "NULL");
    {
        par_cuda_desc bad;
        par_compute_table t;
        memset(&bad, 0, sizeof bad);
        bad.device = 9999;
        CHECK_ERR(par_compute_cuda(&bad, &t), PAR_EINVAL, "device");
    }
    test_memory();
    test_gemm();
    test_attention();
    test_attention_kernels();
    test_rmsnorm(1, 7);
    test_rmsnorm(33, 4096);
    test_rmsnorm(300, 130);
    test_rope(5, 3, 64);
    test_rope(70, 4, 128);
    test_swiglu(1);
    test_swiglu(100003);
    test_embedding();
    test_xent(7, 50);
    test_xent(33, 32000);
    test_optim(1);
    test_optim(300001);
    test_activations16();
    CHECK_OK(G.synchronize(G.user));
    {
        par_mem_report r;
        CHECK_OK(G.memory_report(G.user, &r));
        CHECK_MSG(r.current[PAR_MEM_ACTIVATIONS] == 0, "%lld bytes of test buffers still allocated",
                  (long long)r.current[PAR_MEM_ACTIVATIONS]);
    }
    G.destroy(G.user);
    if (C.destroy) C.destroy(C.user);
    return TEST_END("cuda_compute");
}
