/* tests/test_cp.c - >>context-parallel on the threads backend.

   Every configuration (ring contiguous / zigzag, Ulysses, hybrid, with and
   without all-to-all, GQA with fewer kv heads than the Ulysses degree, MQA,
   causal and full attention, cp 1..8, with a data-parallel axis beside cp)
   runs forward and backward on random q, k, v, dO; each rank's o, dq, dk, dv
   rows are compared with a naive attention in double precision written here
   (softmax of the masked scores, its gradient by the chain rule): not the
   library's flash kernels. Then the same in bf16 and f16 (par_cp_desc.dtype;
   ring, Ulysses and hybrid, contiguous and zigzag, cp 2 and 4, copied kv
   heads) against the one-device table attention in the same type on the
   gathered sequence, within a bound derived at run16; per rank the bytes sent
   (a counting comm table) and the memory reported against the f32 run of the
   same configuration. Then the bad inputs, each with its message. */
#include "test.h"
#include "cp_suite.h"
#include "half.h"

static void run(const cp_cfg *c, const char *label) {
    cp_world *w = cp_world_new(c);
    par_ctx_desc pd;
    double worst = 0;
    int r, bad = 0;
    CHECK_MSG(w != NULL, "%s: out of memory", label);
    if (!w) return;
    memset(&pd, 0, sizeof pd);
    pd.mesh = c->mesh, pd.timeout_ms = 20000, pd.kernel_threads = 1;
    CHECK_MSG(par_run_threads_desc(&pd, c->ranks, cp_rank_run, w) == PAR_OK, "%s", label);
    for (r = 0; r < c->ranks; r++) {
        bad |= w->bad[r];
        if (w->max_err[r] > worst) worst = w->max_err[r];
    }
    CHECK_MSG(!bad && worst < CP_TOL, "%s: worst relative error %.3g", label, worst);
    printf("  %-44s worst err %.2e\n", label, worst);
    cp_world_free(w);
}

/* ---- 16-bit compute types ------------------------------------------------------------ */

/* A comm table over the threads backend's that counts the bytes each rank
   hands to the transport (count x the dtype's size per call), f32 and 16-bit
   apart. */
typedef struct cnt_comm {
    par_comm_table in;
    int64_t b16, b32;
} cnt_comm;

static void cnt_add(void *u, int64_t count, par_dtype t) {
    cnt_comm *c = (cnt_comm *)u;
    if (t == PAR_F32) c->b32 += count * 4;
    else c->b16 += count * (int64_t)par_dtype_size(t);
}
static par_status cnt_group_create(void *u, const int *ranks, int n, par_comm_group **g) {
    return ((cnt_comm *)u)->in.group_create(((cnt_comm *)u)->in.user, ranks, n, g);
}
static void cnt_group_destroy(void *u, par_comm_group *g) { ((cnt_comm *)u)->in.group_destroy(((cnt_comm *)u)->in.user, g); }
static par_status cnt_all_reduce(void *u, par_comm_group *g, const void *s, void *r, int64_t n, par_dtype t,
                                 par_reduce_op op, par_request **q) {
    cnt_add(u, n, t);
    return ((cnt_comm *)u)->in.all_reduce(((cnt_comm *)u)->in.user, g, s, r, n, t, op, q);
}
static par_status cnt_all_gather(void *u, par_comm_group *g, const void *s, void *r, int64_t n, par_dtype t,
                                 par_request **q) {
    cnt_add(u, n, t);
    return ((cnt_comm *)u)->in.all_gather(((cnt_comm *)u)->in.user, g, s, r, n, t, q);
}
static par_status cnt_reduce_scatter(void *u, par_comm_group *g, const void *s, void *r, int64_t n, par_dtype t,
                                     par_reduce_op op, par_request **q) {
    cnt_add(u, n, t);
    return ((cnt_comm *)u)->in.reduce_scatter(((cnt_comm *)u)->in.user, g, s, r, n, t, op, q);
}
static par_status cnt_all_to_all(void *u, par_comm_group *g, const void *s, void *r, int64_t n, par_dtype t,
                                 par_request **q) {
    cnt_add(u, n, t);
    return ((cnt_comm *)u)->in.all_to_all(((cnt_comm *)u)->in.user, g, s, r, n, t, q);
}
static par_status cnt_broadcast(void *u, par_comm_group *g, void *b, int64_t n, par_dtype t, int root, par_request **q) {
    cnt_add(u, n, t);
    return ((cnt_comm *)u)->in.broadcast(((cnt_comm *)u)->in.user, g, b, n, t, root, q);
}
static par_status cnt_send(void *u, par_comm_group *g, const void *b, int64_t n, par_dtype t, int peer, par_request **q) {
    cnt_add(u, n, t);
    return ((cnt_comm *)u)->in.send(((cnt_comm *)u)->in.user, g, b, n, t, peer, q);
}
static par_status cnt_recv(void *u, par_comm_group *g, void *b, int64_t n, par_dtype t, int peer, par_request **q) {
    return ((cnt_comm *)u)->in.recv(((cnt_comm *)u)->in.user, g, b, n, t, peer, q);
}
static par_status cnt_barrier(void *u, par_comm_group *g) { return ((cnt_comm *)u)->in.barrier(((cnt_comm *)u)->in.user, g); }
static par_status cnt_wait(void *u, par_request *q) { return ((cnt_comm *)u)->in.wait(((cnt_comm *)u)->in.user, q); }
static par_status cnt_test(void *u, par_request *q, int *done) {
    return ((cnt_comm *)u)->in.test(((cnt_comm *)u)->in.user, q, done);
}
static void cnt_destroy(void *u) { (void)u; } /* the threads context owns the inner table */

static par_comm_table cnt_table(cnt_comm *c) {
    par_comm_table t = c->in;
    t.name = "counting", t.user = c;
    t.group_create = cnt_group_create, t.group_destroy = cnt_group_destroy, t.all_reduce = cnt_all_reduce;
    t.all_gather = cnt_all_gather, t.reduce_scatter = cnt_reduce_scatter, t.all_to_all = cnt_all_to_all;
    t.broadcast = cnt_broadcast, t.send = cnt_send, t.recv = cnt_recv, t.barrier = cnt_barrier, t.wait = cnt_wait;
    t.test = cnt_test, t.set_stream = NULL, t.destroy = cnt_destroy;
    return t;
}

/* The ulp of a 16-bit type at |x| (the spacing of its values in x's binade). */
static double ulp16(par_dtype t, double x) {
    int e;
    x = fabs(x);
    if (x == 0) return ldexp(1.0, t == PAR_BF16 ? -133 : -24);
    (void)frexp(x, &e); /* x in [2^(e-1), 2^e) */
    e -= 1;
    return t == PAR_BF16 ? ldexp(1.0, (e < -126 ? -126 : e) - 7) : ldexp(1.0, (e < -14 ? -14 : e) - 10);
}

/* One configuration in a 16-bit type: the inputs (random, exactly
   representable), what the cp ranks produced (gathered at their tokens'
   positions), and per rank the bytes sent and the memory reported, for the
   16-bit run and for the same run in f32. */
typedef struct h16_case {
    cp_cfg c;
    par_dtype t;
    int no_convert;                     /* the ranks' table lacks convert: create must refuse */
    uint16_t *q, *k, *v, *dout;         /* [B, T, heads, D] */
    float *qf, *kf, *vf, *doutf;        /* the same values in f32 (for the f32 run) */
    uint16_t *o, *dq, *dk, *dv;         /* gathered from the cp ranks */
    float *lse;                         /* gathered [B, H, T] */
    int64_t fwd16[8][2], bwd16[8][2], fwd32[8][2], bwd32[8][2]; /* bytes sent: [16-bit, f32] */
    int64_t mem16[8][PAR_MEM_CATEGORY_COUNT], mem32[8][PAR_MEM_CATEGORY_COUNT];
    par_cp_info info16[8], info32[8];
    par_status got[8];
    char msg[8][300];
} h16_case;

/* Rows [b, t, H*D] of a global tensor (es bytes an element) <-> this rank's, in its token order. */
static void h16_rows(const cp_cfg *c, int H, size_t es, const int64_t *pos, int64_t S, void *global, void *local,
                     int to_global) {
    const size_t row = (size_t)H * (size_t)c->head_dim * es;
    int b;
    int64_t t;
    for (b = 0; b < c->batch; b++)
        for (t = 0; t < S; t++) {
            char *g = (char *)global + ((size_t)b * (size_t)c->seq + (size_t)pos[t]) * row;
            char *l = (char *)local + ((size_t)b * (size_t)S + (size_t)t) * row;
            if (to_global) memcpy(g, l, row);
            else memcpy(l, g, row);
        }
}

/* lse [B, H/U, U x S] of this rank's heads (Ulysses index u) and its ring
   rank's tokens (the U cp ranks' in order) -> the global [B, H, T]. */
static par_status h16_put_lse(const par_cp *cp, const par_cp_info *in, const cp_cfg *c, const float *lse, float *g) {
    const int U = in->ulysses_degree, hh = c->heads / U;
    const int64_t S = in->seq_local, Sr = S * U;
    int64_t *rpos = (int64_t *)malloc(sizeof(int64_t) * (size_t)Sr), t;
    int j, b, h;
    par_status st = rpos ? PAR_OK : par_set_error(PAR_ENOMEM, "h16_put_lse: out of host memory");
    for (j = 0; j < U && st == PAR_OK; j++) st = par_cp_positions_of(cp, in->ring_index * U + j, rpos + j * S);
    for (b = 0; st == PAR_OK && b < c->batch; b++)
        for (h = 0; h < hh; h++)
            for (t = 0; t < Sr; t++)
                g[((int64_t)b * c->heads + in->ulysses_index * hh + h) * c->seq + rpos[t]] =
                    lse[((int64_t)b * hh + h) * Sr + t];
    free(rpos);
    return st;
}

/* One run on this rank in type t (16-bit from w->q.., f32 from w->qf..): bytes
   sent by forward and backward, memory and info; the 16-bit run's results go
   to the gathered tensors. Host pointers: the CPU table's memory is the host's. */
static par_status h16_one(par_ctx *ctx, h16_case *w, cnt_comm *cc, par_dtype t, int64_t fwd[2], int64_t bwd[2],
                          int64_t mem[PAR_MEM_CATEGORY_COUNT], par_cp_info *info) {
    const cp_cfg *c = &w->c;
    const size_t es = par_dtype_size(t);
    const int is16 = t != PAR_F32;
    int64_t shape[2], S, qn, kvn, *pos = NULL;
    par_layout tokens;
    par_cp_desc d;
    par_cp *cp = NULL;
    par_status st;
    char *h = NULL;
    shape[0] = c->batch, shape[1] = c->seq;
    RETURN_IF_ERR(par_layout_parse(&tokens, par_ctx_mesh(ctx), 2, shape, c->tokens));
    memset(&d, 0, sizeof d);
    d.tokens = &tokens, d.algo = c->algo, d.ulysses_degree = c->ulysses, d.contiguous = c->contiguous;
    d.batch = c->batch, d.heads = c->heads, d.kv_heads = c->kv_heads, d.head_dim = c->head_dim;
    d.full_attention = c->full, d.no_all_to_all = c->no_a2a, d.dtype = t;
    RETURN_IF_ERR(par_cp_create(ctx, &d, &cp));
    st = par_cp_get_info(cp, info);
    if (st == PAR_OK) st = par_cp_memory(cp, mem);
    S = info->seq_local;
    qn = (int64_t)c->batch * S * c->heads * c->head_dim, kvn = (int64_t)c->batch * S * c->kv_heads * c->head_dim;
    pos = (int64_t *)malloc(sizeof(int64_t) * (size_t)S);
    h = (char *)calloc((size_t)((4 * qn + 4 * kvn) * (int64_t)es + (info->lse_floats + info->saved_floats) * 4), 1);
    if (st == PAR_OK && (!pos || !h)) st = par_set_error(PAR_ENOMEM, "h16_one: out of host memory");
    if (st == PAR_OK) st = par_cp_positions(cp, pos);
    if (st == PAR_OK) {
        /* q k v o dout dq dk dv (type t), lse, saved (f32) */
        char *q = h, *k = q + qn * (int64_t)es, *v = k + kvn * (int64_t)es, *o = v + kvn * (int64_t)es;
        char *dout = o + qn * (int64_t)es, *dq = dout + qn * (int64_t)es, *dk = dq + qn * (int64_t)es;
        char *dv = dk + kvn * (int64_t)es;
        float *lse = (float *)(void *)(dv + kvn * (int64_t)es), *saved = info->saved_floats ? lse + info->lse_floats : NULL;
        h16_rows(c, c->heads, es, pos, S, is16 ? (void *)w->q : (void *)w->qf, q, 0);
        h16_rows(c, c->kv_heads, es, pos, S, is16 ? (void *)w->k : (void *)w->kf, k, 0);
        h16_rows(c, c->kv_heads, es, pos, S, is16 ? (void *)w->v : (void *)w->vf, v, 0);
        h16_rows(c, c->heads, es, pos, S, is16 ? (void *)w->dout : (void *)w->doutf, dout, 0);
        fwd[0] = cc->b16, fwd[1] = cc->b32;
        st = par_cp_attention_fwd(cp, q, k, v, o, lse, saved);
        fwd[0] = cc->b16 - fwd[0], fwd[1] = cc->b32 - fwd[1];
        bwd[0] = cc->b16, bwd[1] = cc->b32;
        if (st == PAR_OK) st = par_cp_attention_bwd(cp, q, k, v, o, lse, saved, dout, dq, dk, dv);
        bwd[0] = cc->b16 - bwd[0], bwd[1] = cc->b32 - bwd[1];
        if (st == PAR_OK && is16) {
            h16_rows(c, c->heads, es, pos, S, w->o, o, 1), h16_rows(c, c->heads, es, pos, S, w->dq, dq, 1);
            h16_rows(c, c->kv_heads, es, pos, S, w->dk, dk, 1), h16_rows(c, c->kv_heads, es, pos, S, w->dv, dv, 1);
            st = h16_put_lse(cp, info, c, lse, w->lse);
        }
    }
    free(pos), free(h);
    par_cp_destroy(cp);
    return st;
}

/* Every rank: a context over the counting table (and the rank's compute table,
   without convert for no_convert), then the 16-bit run and the f32 run. */
static par_status h16_body(par_ctx *outer, void *arg) {
    h16_case *w = (h16_case *)arg;
    const int rank = par_ctx_rank(outer);
    cnt_comm cc;
    par_comm_table ct;
    par_compute_table kt = *par_ctx_compute(outer);
    par_ctx_desc pd;
    par_ctx *ctx = NULL;
    par_status st;
    memset(&cc, 0, sizeof cc);
    cc.in = *par_ctx_comm(outer), ct = cnt_table(&cc);
    if (w->no_convert) kt.convert = NULL;
    memset(&pd, 0, sizeof pd);
    pd.mesh = w->c.mesh, pd.timeout_ms = 20000, pd.kernel_threads = 1, pd.comm = &ct, pd.compute = &kt;
    st = par_ctx_init(&pd, &ctx);
    if (st == PAR_OK) st = h16_one(ctx, w, &cc, w->t, w->fwd16[rank], w->bwd16[rank], w->mem16[rank], &w->info16[rank]);
    if (st == PAR_OK) st = h16_one(ctx, w, &cc, PAR_F32, w->fwd32[rank], w->bwd32[rank], w->mem32[rank], &w->info32[rank]);
    w->got[rank] = st;
    snprintf(w->msg[rank], sizeof w->msg[rank], "%s", st == PAR_OK ? "" : par_last_error());
    par_ctx_destroy(ctx);
    return PAR_OK;
}

/* The Ulysses degree of a configuration (cp = ranks: no data-parallel axis here). */
static int h16_udeg(const cp_cfg *c) {
    return c->algo == PAR_CP_ULYSSES ? c->ranks : c->algo == PAR_CP_HYBRID ? c->ulysses : 1;
}

/* The worst |x - y| / bound over n elements of two 16-bit tensors, bound =
   ulp(max(|x|, |y|)) + CP_TOL (1 + |y|) + extra[i] (extra may be NULL); the
   share of bitwise-equal elements in *same. */
static double h16_worst(par_dtype t, const uint16_t *x, const uint16_t *y, const double *extra, int64_t n, double *same) {
    double worst = 0;
    int64_t i, eq = 0;
    for (i = 0; i < n; i++) {
        const double a = half_value(t, x[i]), b = half_value(t, y[i]);
        const double bound = ulp16(t, fabs(a) > fabs(b) ? a : b) + CP_TOL * (1 + fabs(b)) + (extra ? extra[i] : 0);
        const double r = fabs(a - b) / bound;
        eq += x[i] == y[i];
        if (r > worst || r != r) worst = r != r ? 1e30 : r;
    }
    *same = n ? (double)eq / (double)n : 1;
    return worst;
}

/* Copied kv heads (fewer kv heads than the Ulysses degree U): Ulysses rank j
   computes, for its q heads j*H/U.., the gradient a_j of kv head j*KV/U in
   f32 and rounds it once; the copies are summed in f32 and rounded again. So
   |cp - ref| <= ulp(max) + |sum_j round(a_j) - sum_j a_j| + f32 terms, and
   |round(a_j) - a_j| <= ulp(a_j) / 2. extra[i] = sum over the copies of
   ulp(|a_j| + tol_j) / 2 + tol_j (tol_j = CP_TOL (1 + |a_j|)), from the
   partial gradients recomputed here: one-device f32 attention over each
   rank's heads (q, k, v, o, dO as the cp run had them). */
static int h16_copy_terms(const h16_case *w, const par_compute_table *ct, double *xk, double *xv) {
    const cp_cfg *c = &w->c;
    const int U = h16_udeg(c), hh = c->heads / U, D = c->head_dim, T = c->seq, B = c->batch;
    const int64_t nq = (int64_t)B * T * hh * D, nk = (int64_t)B * T * D;
    float *buf = (float *)malloc(sizeof(float) * (size_t)(4 * nq + 4 * nk + (int64_t)B * hh * T));
    int j, ok = 1;
    if (!buf) return 0;
    for (j = 0; j < U && ok; j++) {
        float *q = buf, *o = q + nq, *dout = o + nq, *dq = dout + nq, *k = dq + nq, *v = k + nk, *dk = v + nk;
        float *dv = dk + nk, *lse = dv + nk;
        const int kh = j * c->kv_heads / U;
        int64_t b, t, h, e;
        par_attn_desc a;
        for (b = 0; b < B; b++)
            for (t = 0; t < T; t++) {
                for (h = 0; h < hh; h++)
                    for (e = 0; e < D; e++) {
                        const int64_t src = cp_at(c, (int)b, (int)t, j * hh + (int)h, c->heads, (int)e);
                        const int64_t dst = ((b * T + t) * hh + h) * D + e;
                        q[dst] = w->qf[src], dout[dst] = w->doutf[src], o[dst] = (float)half_value(w->t, w->o[src]);
                    }
                for (e = 0; e < D; e++) {
                    k[(b * T + t) * D + e] = w->kf[cp_at(c, (int)b, (int)t, kh, c->kv_heads, (int)e)];
                    v[(b * T + t) * D + e] = w->vf[cp_at(c, (int)b, (int)t, kh, c->kv_heads, (int)e)];
                }
            }
        memset(&a, 0, sizeof a);
        a.batch = B, a.q_heads = hh, a.kv_heads = 1, a.head_dim = D, a.q_len = a.k_len = T, a.causal = !c->full;
        a.dtype = PAR_F32;
        ok = ct->attention_fwd(ct->user, &a, q, k, v, dq, lse) == PAR_OK; /* dq: a scratch o (the lse is what counts) */
        ok = ok && ct->attention_bwd(ct->user, &a, q, k, v, o, lse, dout, dq, dk, dv, 0) == PAR_OK;
        for (b = 0; ok && b < B; b++)
            for (t = 0; t < T; t++)
                for (e = 0; e < D; e++) {
                    const int64_t i = cp_at(c, (int)b, (int)t, kh, c->kv_heads, (int)e), l = (b * T + t) * D + e;
                    const double tk = CP_TOL * (1 + fabs(dk[l])), tv = CP_TOL * (1 + fabs(dv[l]));
                    xk[i] += ulp16(w->t, fabs(dk[l]) + tk) / 2 + tk, xv[i] += ulp16(w->t, fabs(dv[l]) + tv) / 2 + tv;
                }
    }
    free(buf);
    return ok;
}

/* Per rank: bytes sent and memory against the f32 run of the same
   configuration. Everything that travels is in the type (half the bytes)
   but the ring backward's dK/dV accumulators (f32: R turns of 2 x kv
   elements of the ring rank); the memory differs by the same buffers halved
   plus the staging (ring: q, o, do, dq and a k|v block in f32; copied kv
   heads: two f32 blocks of batch x seq_local x head_dim). */
static int h16_bytes_ok(const h16_case *w, int r, char *why, size_t size) {
    const cp_cfg *c = &w->c;
    const par_cp_info *i16 = &w->info16[r], *i32 = &w->info32[r];
    const int64_t U = i16->ulysses_degree, R = i16->ring_degree, S = i16->seq_local, Sr = S * U, B = c->batch;
    const int64_t D = c->head_dim, hqh = c->heads / U, hkvh = c->kv_heads >= U ? c->kv_heads / U : 1;
    const int64_t qn = B * Sr * hqh * D, kvn = B * Sr * hkvh * D, blk = B * S * (hqh + 2 * hkvh) * D;
    const int64_t acc = R > 1 ? R * 2 * kvn * 4 : 0;
    const int64_t staging = (R > 1 ? (4 * qn + 2 * kvn) * 4 : 0) + (U > 1 && c->kv_heads < U ? 2 * B * S * D * 4 : 0);
    const int64_t comm32 = (R > 1 ? 2 * 2 * kvn * 4 : 0) + (U > 1 ? U * blk * (1 + (c->no_a2a ? U : 1)) * 4 : 0);
    const int64_t ws32 = U > 1 ? (2 * qn + 2 * kvn) * 4 : 0; /* Ulysses' do, dq, dk, dv in the type */
    const int64_t *f16 = w->fwd16[r], *b16 = w->bwd16[r], *f32 = w->fwd32[r], *b32 = w->bwd32[r];
    const int64_t *m16 = w->mem16[r], *m32 = w->mem32[r];
    if (f32[0] || b32[0] || f32[1] <= 0 || b32[1] <= 0)
        return snprintf(why, size, "the f32 run sent %lld + %lld 16-bit, %lld + %lld f32 bytes", (long long)f32[0],
                        (long long)b32[0], (long long)f32[1], (long long)b32[1]), 0;
    if (f16[1] != 0 || 2 * f16[0] != f32[1])
        return snprintf(why, size, "forward sent %lld 16-bit + %lld f32 bytes, the f32 run %lld", (long long)f16[0],
                        (long long)f16[1], (long long)f32[1]), 0;
    if (b16[1] != acc || 2 * b16[0] + acc != b32[1])
        return snprintf(why, size, "backward sent %lld 16-bit + %lld f32 bytes (want %lld f32), the f32 run %lld",
                        (long long)b16[0], (long long)b16[1], (long long)acc, (long long)b32[1]), 0;
    if (i16->dtype != w->t || i32->dtype != PAR_F32 || i32->staging_bytes != 0 || i16->staging_bytes != staging)
        return snprintf(why, size, "info: dtype %s, staging %lld bytes (want %lld)", par_dtype_name(i16->dtype),
                        (long long)i16->staging_bytes, (long long)staging), 0;
    if (i16->lse_floats != i32->lse_floats || 2 * i16->saved_floats != i32->saved_floats)
        return snprintf(why, size, "info: lse %lld / saved %lld floats, f32 %lld / %lld", (long long)i16->lse_floats,
                        (long long)i16->saved_floats, (long long)i32->lse_floats, (long long)i32->saved_floats), 0;
    if (m16[PAR_MEM_COMM] != m32[PAR_MEM_COMM] - comm32 / 2 ||
        m16[PAR_MEM_WORKSPACE] != m32[PAR_MEM_WORKSPACE] - ws32 / 2 + staging)
        return snprintf(why, size, "memory: comm %lld, workspace %lld bytes; f32 %lld, %lld",
                        (long long)m16[PAR_MEM_COMM], (long long)m16[PAR_MEM_WORKSPACE], (long long)m32[PAR_MEM_COMM],
                        (long long)m32[PAR_MEM_WORKSPACE]), 0;
    return 1;
}

static uint16_t *h16_alloc(int64_t n) { return (uint16_t *)calloc((size_t)n, sizeof(uint16_t)); }

/* Run one configuration in type t on the threads backend and check it
   against the one-device table attention in the same type on the gathered
   sequence. The bound: both compute in f32 on the same 16-bit values
   (widened exactly) and round once; they differ only in f32 summation order
   (the ring's blocks and merges against one pass) and so, after rounding,
   by at most one rounding flip: |x - y| <= ulp(max(|x|, |y|)) + CP_TOL (1 +
   |y|) (two half-ulp roundings, and the f32 tolerance of the f32 cp tests
   for the pre-rounding difference). Backward is the table's on the cp's
   own o (gathered), so o's flips do not feed the reference; lse (f32)
   within CP_TOL (1 + |lse|). Copied kv heads add h16_copy_terms. */
static void run16(const cp_cfg *cfg, par_dtype t, const char *label) {
    h16_case *w = (h16_case *)calloc(1, sizeof(h16_case));
    const cp_cfg *c = &w->c;
    par_ctx_desc pd;
    par_cpu_desc cd;
    par_compute_table ct;
    par_attn_desc a;
    int64_t n1, n2, nl, i;
    uint64_t seed;
    uint16_t *oref, *dqref, *dkref, *dvref;
    float *lref;
    double *xk, *xv, worst[4], same[4], lworst = 0, lsame = 0;
    int r, ok = 1;
    char why[300] = "";
    if (!w) { CHECK_MSG(0, "%s: out of memory", label); return; }
    w->c = *cfg, w->t = t;
    n1 = (int64_t)c->batch * c->seq * c->heads * c->head_dim, n2 = (int64_t)c->batch * c->seq * c->kv_heads * c->head_dim;
    nl = (int64_t)c->batch * c->heads * c->seq;
    w->q = h16_alloc(2 * n1 + 2 * n2), w->o = h16_alloc(2 * n1 + 2 * n2), oref = h16_alloc(2 * n1 + 2 * n2);
    w->qf = (float *)calloc((size_t)(2 * n1 + 2 * n2 + 2 * nl), sizeof(float));
    xk = (double *)calloc((size_t)(2 * n2), sizeof(double));
    if (!w->q || !w->o || !oref || !w->qf || !xk) {
        CHECK_MSG(0, "%s: out of memory", label);
        free(w->q), free(w->o), free(oref), free(w->qf), free(xk), free(w);
        return;
    }
    w->k = w->q + n1, w->v = w->k + n2, w->dout = w->v + n2;
    w->dq = w->o + n1, w->dk = w->dq + n1, w->dv = w->dk + n2;
    dqref = oref + n1, dkref = dqref + n1, dvref = dkref + n2;
    w->kf = w->qf + n1, w->vf = w->kf + n2, w->doutf = w->vf + n2, w->lse = w->doutf + n1, lref = w->lse + nl;
    xv = xk + n2;
    seed = 0x5eedull + (uint64_t)c->seq * 131u + (uint64_t)c->ranks * 7u + (uint64_t)t;
    for (i = 0; i < 2 * n1 + 2 * n2; i++) /* q k v dout, exactly representable in t */
        w->q[i] = half_round(t, (float)cp_urand(&seed)), w->qf[i] = (float)half_value(t, w->q[i]);
    memset(&pd, 0, sizeof pd);
    pd.mesh = c->mesh, pd.timeout_ms = 20000, pd.kernel_threads = 1;
    CHECK_MSG(par_run_threads_desc(&pd, c->ranks, h16_body, w) == PAR_OK, "%s %s", par_dtype_name(t), label);
    for (r = 0; r < c->ranks; r++) ok &= w->got[r] == PAR_OK;
    CHECK_MSG(ok, "%s %s: rank 0: %s", par_dtype_name(t), label, w->msg[0]);
    for (r = 0; ok && r < c->ranks; r++) {
        ok &= h16_bytes_ok(w, r, why, sizeof why);
        CHECK_MSG(ok, "%s %s: rank %d: %s", par_dtype_name(t), label, r, why);
    }
    /* the one-device reference in the same type */
    memset(&cd, 0, sizeof cd);
    cd.threads = 1;
    CHECK_OK(par_compute_cpu(&cd, &ct));
    memset(&a, 0, sizeof a);
    a.batch = c->batch, a.q_heads = c->heads, a.kv_heads = c->kv_heads, a.head_dim = c->head_dim;
    a.q_len = a.k_len = c->seq, a.causal = !c->full, a.dtype = t;
    if (ok) {
        ok = ct.attention_fwd(ct.user, &a, w->q, w->k, w->v, oref, lref) == PAR_OK;
        ok = ok && ct.attention_bwd(ct.user, &a, w->q, w->k, w->v, w->o, lref, w->dout, dqref, dkref, dvref, 0) == PAR_OK;
        ok = ok && (h16_udeg(c) <= c->kv_heads || h16_copy_terms(w, &ct, xk, xv));
        CHECK_MSG(ok, "%s %s: the reference failed", par_dtype_name(t), label);
    }
    if (ok) {
        worst[0] = h16_worst(t, w->o, oref, NULL, n1, &same[0]);
        worst[1] = h16_worst(t, w->dq, dqref, NULL, n1, &same[1]);
        worst[2] = h16_worst(t, w->dk, dkref, xk, n2, &same[2]);
        worst[3] = h16_worst(t, w->dv, dvref, xv, n2, &same[3]);
        for (i = 0; i < nl; i++) {
            const double e = fabs((double)w->lse[i] - lref[i]) / (CP_TOL * (1 + fabs(lref[i])));
            if (e > lworst || e != e) lworst = e != e ? 1e30 : e;
            lsame += w->lse[i] == lref[i];
        }
        lsame /= (double)nl;
        CHECK_MSG(worst[0] <= 1 && worst[1] <= 1 && worst[2] <= 1 && worst[3] <= 1 && lworst <= 1,
                  "%s %s: worst |cp - one device| / bound: o %.3g, dq %.3g, dk %.3g, dv %.3g, lse %.3g",
                  par_dtype_name(t), label, worst[0], worst[1], worst[2], worst[3], lworst);
        printf("  %-4s %-40s of the bound: o %.2f dq %.2f dk %.2f dv %.2f lse %.2f; "
               "bitwise %.0f%% %.0f%% %.0f%% %.0f%% %.0f%%\n", par_dtype_name(t), label, worst[0], worst[1], worst[2], worst[3], lworst, 100 * same[0], 100 * same[1],
               100 * same[2], 100 * same[3], 100 * lsame);
    }
    ct.destroy(ct.user);
    free(w->q), free(w->o), free(oref), free(w->qf), free(xk), free(w);
}

/* A 16-bit ring on a table without convert (the f32 staging) is refused. */
static void no_convert16(const cp_cfg *cfg) {
    h16_case *w = (h16_case *)calloc(1, sizeof(h16_case));
    par_ctx_desc pd;
    int r, ok = 1;
    if (!w) { CHECK_MSG(0, "out of memory"); return; }
    w->c = *cfg, w->t = PAR_BF16, w->no_convert = 1;
    memset(&pd, 0, sizeof pd);
    pd.mesh = cfg->mesh, pd.timeout_ms = 20000, pd.kernel_threads = 1;
    CHECK_OK(par_run_threads_desc(&pd, cfg->ranks, h16_body, w));
    for (r = 0; r < cfg->ranks; r++)
        ok &= w->got[r] == PAR_EUNSUPPORTED && strstr(w->msg[r], "a bf16 dtype needs the compute table's convert hook");
    CHECK_MSG(ok, "want PAR_EUNSUPPORTED naming the convert hook; rank 0: %s: %s", par_status_string(w->got[0]), w->msg[0]);
    free(w);
}

/* ---- bad input ----------------------------------------------------------------------- */

typedef struct bad_case {
    cp_cfg c;
    par_dtype dtype;
    par_status want;
    const char *needle;
    par_status got[8];
    char msg[8][512];
} bad_case;

static par_status bad_body(par_ctx *ctx, void *arg) {
    bad_case *b = (bad_case *)arg;
    const int rank = par_ctx_rank(ctx);
    int64_t shape[2];
    par_layout tokens;
    par_cp_desc d;
    par_cp *cp = NULL;
    shape[0] = b->c.batch, shape[1] = b->c.seq;
    /* a sequence the cp ranks cannot split is already an invalid tokens layout */
    if ((b->got[rank] = par_layout_parse(&tokens, par_ctx_mesh(ctx), 2, shape, b->c.tokens)) != PAR_OK) {
        snprintf(b->msg[rank], sizeof b->msg[rank], "%s", par_last_error());
        return PAR_OK;
    }
    memset(&d, 0, sizeof d);
    d.tokens = &tokens, d.algo = b->c.algo, d.ulysses_degree = b->c.ulysses, d.contiguous = b->c.contiguous;
    d.batch = b->c.batch, d.heads = b->c.heads, d.kv_heads = b->c.kv_heads, d.head_dim = b->c.head_dim;
    d.dtype = b->dtype;
    b->got[rank] = par_cp_create(ctx, &d, &cp);
    snprintf(b->msg[rank], sizeof b->msg[rank], "%s", par_last_error());
    par_cp_destroy(cp);
    return PAR_OK;
}

static void bad_typed(const cp_cfg *c, par_dtype dtype, par_status want, const char *needle) {
    bad_case b;
    par_ctx_desc pd;
    int r, ok = 1;
    memset(&b, 0, sizeof b);
    b.c = *c, b.dtype = dtype, b.want = want, b.needle = needle;
    memset(&pd, 0, sizeof pd);
    pd.mesh = c->mesh, pd.timeout_ms = 20000, pd.kernel_threads = 1;
    CHECK_OK(par_run_threads_desc(&pd, c->ranks, bad_body, &b));
    for (r = 0; r < c->ranks; r++) ok &= b.got[r] == want && strstr(b.msg[r], needle) != NULL;
    CHECK_MSG(ok, "want %s with \"%s\"; rank 0 got %s: %s", par_status_string(want), needle,
              par_status_string(b.got[0]), b.msg[0]);
}

static void bad(const cp_cfg *c, par_status want, const char *needle) { bad_typed(c, PAR_F32, want, needle); }

typedef struct pos_case {
    cp_cfg c;
    int64_t got[8][4];
    int nlocal[8];
} pos_case;

static par_status pos_body(par_ctx *ctx, void *arg) {
    pos_case *p = (pos_case *)arg;
    const int rank = par_ctx_rank(ctx);
    int64_t shape[2];
    par_layout tokens;
    par_cp_desc d;
    par_cp_info info;
    par_cp *cp = NULL;
    shape[0] = 1, shape[1] = p->c.seq;
    RETURN_IF_ERR(par_layout_parse(&tokens, par_ctx_mesh(ctx), 2, shape, p->c.tokens));
    memset(&d, 0, sizeof d);
    d.tokens = &tokens, d.algo = p->c.algo, d.ulysses_degree = p->c.ulysses, d.contiguous = p->c.contiguous;
    d.batch = 1, d.heads = p->c.heads, d.kv_heads = p->c.kv_heads, d.head_dim = p->c.head_dim;
    RETURN_IF_ERR(par_cp_create(ctx, &d, &cp));
    RETURN_IF_ERR(par_cp_get_info(cp, &info));
    p->nlocal[rank] = (int)info.seq_local;
    if (info.seq_local == 4) RETURN_IF_ERR(par_cp_positions(cp, p->got[rank]));
    par_cp_destroy(cp);
    return PAR_OK;
}

static void positions(const cp_cfg *c, const int64_t want[4][4], const char *label) {
    pos_case p;
    par_ctx_desc pd;
    int r, ok = 1;
    memset(&p, 0, sizeof p);
    p.c = *c;
    memset(&pd, 0, sizeof pd);
    pd.mesh = c->mesh, pd.timeout_ms = 20000, pd.kernel_threads = 1;
    CHECK_OK(par_run_threads_desc(&pd, 4, pos_body, &p));
    for (r = 0; r < 4; r++) ok &= p.nlocal[r] == 4 && memcmp(p.got[r], want[r], sizeof p.got[r]) == 0;
    CHECK_MSG(ok, "%s positions: rank 1 holds %lld %lld %lld %lld", label, (long long)p.got[1][0],
              (long long)p.got[1][1], (long long)p.got[1][2], (long long)p.got[1][3]);
}

int main(void) {
    /*  mesh            tokens      ranks algo           U  contig a2a full  B  H  KV D  T */
    static const struct {
        const char *label;
        cp_cfg c;
    } cases[] = {
        {"cp1 ring", {"cp=1", "[None,cp]", 1, PAR_CP_RING, 0, 0, 0, 0, 2, 4, 2, 8, 16}},
        {"cp2 ring contiguous", {"cp=2", "[None,cp]", 2, PAR_CP_RING, 0, 1, 0, 0, 2, 4, 2, 8, 16}},
        {"cp2 ring zigzag", {"cp=2", "[None,cp]", 2, PAR_CP_RING, 0, 0, 0, 0, 2, 4, 2, 8, 16}},
        {"cp4 ring contiguous", {"cp=4", "[None,cp]", 4, PAR_CP_RING, 0, 1, 0, 0, 1, 4, 2, 8, 32}},
        {"cp4 ring zigzag", {"cp=4", "[None,cp]", 4, PAR_CP_RING, 0, 0, 0, 0, 2, 4, 2, 8, 32}},
        {"cp8 ring zigzag", {"cp=8", "[None,cp]", 8, PAR_CP_RING, 0, 0, 0, 0, 1, 2, 1, 8, 48}},
        {"cp3 ring zigzag", {"cp=3", "[None,cp]", 3, PAR_CP_RING, 0, 0, 0, 0, 2, 2, 2, 4, 18}},
        {"cp4 ring zigzag full attention", {"cp=4", "[None,cp]", 4, PAR_CP_RING, 0, 0, 0, 1, 1, 2, 1, 8, 16}},
        {"cp2 ulysses", {"cp=2", "[None,cp]", 2, PAR_CP_ULYSSES, 0, 0, 0, 0, 2, 4, 2, 8, 16}},
        {"cp4 ulysses GQA kv 2 < 4", {"cp=4", "[None,cp]", 4, PAR_CP_ULYSSES, 0, 0, 0, 0, 2, 8, 2, 8, 16}},
        {"cp4 ulysses MQA kv 1", {"cp=4", "[None,cp]", 4, PAR_CP_ULYSSES, 0, 0, 0, 0, 1, 4, 1, 8, 16}},
        {"cp8 ulysses GQA kv 2 < 8", {"cp=8", "[None,cp]", 8, PAR_CP_ULYSSES, 0, 0, 0, 0, 1, 8, 2, 4, 16}},
        {"cp4 ulysses kv 8 > 4", {"cp=4", "[None,cp]", 4, PAR_CP_ULYSSES, 0, 0, 0, 0, 1, 8, 8, 4, 8}},
        {"cp4 ulysses without all_to_all", {"cp=4", "[None,cp]", 4, PAR_CP_ULYSSES, 0, 0, 1, 0, 1, 8, 2, 4, 16}},
        {"cp4 hybrid 2x2", {"cp=4", "[None,cp]", 4, PAR_CP_HYBRID, 2, 0, 0, 0, 2, 4, 2, 8, 16}},
        {"cp8 hybrid 2x4 (U 2, ring 4)", {"cp=8", "[None,cp]", 8, PAR_CP_HYBRID, 2, 0, 0, 0, 1, 4, 2, 4, 32}},
        {"cp8 hybrid 4x2 (U 4, ring 2) GQA kv 2", {"cp=8", "[None,cp]", 8, PAR_CP_HYBRID, 4, 0, 0, 0, 1, 8, 2, 4, 32}},
        {"cp4 hybrid 2x2 contiguous no a2a", {"cp=4", "[None,cp]", 4, PAR_CP_HYBRID, 2, 1, 1, 0, 1, 4, 1, 4, 16}},
        {"dp2 x cp2 ring zigzag", {"dp=2,cp=2", "[dp,cp]", 4, PAR_CP_RING, 0, 0, 0, 0, 1, 4, 2, 8, 16}},
        {"dp2 x cp2 ulysses", {"dp=2,cp=2", "[dp,cp]", 4, PAR_CP_ULYSSES, 0, 0, 0, 0, 1, 4, 2, 8, 16}},
        /* K/V blocks of 256 KiB: the threads backend's copier thread moves them */
        {"cp4 ring zigzag, 256 KiB blocks", {"cp=4", "[None,cp]", 4, PAR_CP_RING, 0, 0, 0, 0, 1, 4, 2, 64, 1024}},
        {"cp4 hybrid 2x2, 128 KiB blocks", {"cp=4", "[None,cp]", 4, PAR_CP_HYBRID, 2, 0, 0, 0, 1, 4, 2, 64, 512}},
        {"cp2 x tp2 (cp outer) hybrid-free ring", {"cp=2,tp=2", "[None,cp]", 4, PAR_CP_RING, 0, 0, 0, 0, 1, 2, 1, 8, 16}},
    };
    size_t i;
    cp_cfg c;
    par_cp_algo a;
    for (i = 0; i < sizeof cases / sizeof cases[0]; i++) run(&cases[i].c, cases[i].label);

    /* bf16 and f16: ring, Ulysses and hybrid, contiguous and zigzag, cp 2 and 4 */
    {
        static const struct {
            const char *label;
            cp_cfg c;
        } c16[] = {
            {"cp2 ring contiguous", {"cp=2", "[None,cp]", 2, PAR_CP_RING, 0, 1, 0, 0, 2, 4, 2, 8, 16}},
            {"cp2 ring zigzag", {"cp=2", "[None,cp]", 2, PAR_CP_RING, 0, 0, 0, 0, 2, 4, 2, 8, 16}},
            {"cp4 ring contiguous", {"cp=4", "[None,cp]", 4, PAR_CP_RING, 0, 1, 0, 0, 1, 4, 2, 8, 32}},
            {"cp4 ring zigzag", {"cp=4", "[None,cp]", 4, PAR_CP_RING, 0, 0, 0, 0, 2, 4, 2, 8, 32}},
            {"cp4 ring zigzag full attention", {"cp=4", "[None,cp]", 4, PAR_CP_RING, 0, 0, 0, 1, 1, 2, 1, 8, 16}},
            {"cp2 ulysses", {"cp=2", "[None,cp]", 2, PAR_CP_ULYSSES, 0, 0, 0, 0, 2, 4, 2, 8, 16}},
            {"cp4 ulysses kv 4", {"cp=4", "[None,cp]", 4, PAR_CP_ULYSSES, 0, 0, 0, 0, 2, 8, 4, 8, 16}},
            {"cp4 ulysses without all_to_all", {"cp=4", "[None,cp]", 4, PAR_CP_ULYSSES, 0, 0, 1, 0, 1, 8, 4, 4, 16}},
            {"cp4 ulysses GQA kv 2 < 4 (copies)", {"cp=4", "[None,cp]", 4, PAR_CP_ULYSSES, 0, 0, 0, 0, 2, 8, 2, 8, 16}},
            {"cp4 hybrid 2x2 zigzag", {"cp=4", "[None,cp]", 4, PAR_CP_HYBRID, 2, 0, 0, 0, 2, 4, 2, 8, 16}},
            {"cp4 hybrid 2x2 contiguous no a2a", {"cp=4", "[None,cp]", 4, PAR_CP_HYBRID, 2, 1, 1, 0, 1, 4, 2, 4, 16}},
            {"cp4 hybrid 2x2 MQA kv 1 (copies)", {"cp=4", "[None,cp]", 4, PAR_CP_HYBRID, 2, 0, 0, 0, 1, 4, 1, 8, 16}},
        };
        for (i = 0; i < sizeof c16 / sizeof c16[0]; i++) {
            run16(&c16[i].c, PAR_BF16, c16[i].label);
            run16(&c16[i].c, PAR_F16, c16[i].label);
        }
    }

    /* token order, written out by hand: zigzag cp 4 over 16 tokens gives rank r
       the chunks r and 7-r of 2 tokens; hybrid U 2 x ring 2 cuts ring rank r's
       chunks (r, 3-r) of 4 into two pieces of 4 */
    {
        static const int64_t zig[4][4] = {{0, 1, 14, 15}, {2, 3, 12, 13}, {4, 5, 10, 11}, {6, 7, 8, 9}};
        static const int64_t hyb[4][4] = {{0, 1, 2, 3}, {12, 13, 14, 15}, {4, 5, 6, 7}, {8, 9, 10, 11}};
        static const int64_t con[4][4] = {{0, 1, 2, 3}, {4, 5, 6, 7}, {8, 9, 10, 11}, {12, 13, 14, 15}};
        c = cases[4].c, c.seq = 16, c.batch = 1;
        positions(&c, zig, "zigzag");
        c.contiguous = 1;
        positions(&c, con, "contiguous");
        c = cases[14].c, c.seq = 16, c.batch = 1;
        positions(&c, hyb, "hybrid");
        c = cases[9].c, c.seq = 16, c.batch = 1; /* Ulysses: one ring rank, so contiguous */
        positions(&c, con, "ulysses");
    }
    /* names */
    CHECK_OK(par_cp_algo_parse("colossalai_cp", &a));
    CHECK(a == PAR_CP_RING);
    CHECK_OK(par_cp_algo_parse("Ulysses_CP", &a));
    CHECK(a == PAR_CP_ULYSSES);
    CHECK_OK(par_cp_algo_parse("hybird_cp", &a));
    CHECK(a == PAR_CP_HYBRID);
    CHECK_ERR(par_cp_algo_parse("megatron_cp", &a), PAR_EINVAL, "accepted: ring (colossalai_cp), ulysses");
    CHECK_STR(par_cp_algo_name(PAR_CP_HYBRID), "hybrid");

    /* bad input, each on every rank with the rule in the message */
    c = cases[4].c, c.seq = 20; /* 20 % (2 x 4) */
    bad(&c, PAR_ESHAPE, "does not split into 2 x 4 = 8 zigzag chunks");
    c = cases[3].c, c.seq = 18; /* 18 % 4 */
    bad(&c, PAR_ELAYOUT, "tensor dim 1 (size 18) is not divisible by its shard 4");
    c = cases[9].c, c.heads = 6, c.kv_heads = 2; /* 6 % 4 */
    bad(&c, PAR_ESHAPE, "6 q heads (this rank's) are not divisible by the Ulysses degree 4");
    c = cases[11].c, c.heads = 24, c.kv_heads = 3; /* 3 vs 8 */
    bad(&c, PAR_ESHAPE, "3 kv heads (this rank's) and the Ulysses degree 8: one must divide the other");
    c = cases[14].c, c.ulysses = 3;
    bad(&c, PAR_EINVAL, "ulysses_degree 3 does not divide the context-parallel degree 4");
    c = cases[0].c, c.heads = 3, c.kv_heads = 2;
    bad(&c, PAR_ESHAPE, "3 q heads are not a multiple of 2 kv heads");
    bad_typed(&cases[4].c, PAR_I32, PAR_EINVAL, "par_cp_create: desc->dtype i32 (3) is not a compute type: f32, bf16 or f16");
    bad_typed(&cases[8].c, PAR_F64, PAR_EINVAL, "desc->dtype f64 (5) is not a compute type");
    bad_typed(&cases[8].c, (par_dtype)42, PAR_EINVAL, "desc->dtype ? (42) is not a compute type");
    no_convert16(&cases[2].c);
    return TEST_END("cp");
}
