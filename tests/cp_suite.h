/* tests/cp_suite.h - >>context-parallel against an oracle, on any backend.

   USAGE:
       cp_world *w = cp_world_new(&cfg);   (one thread: global tensors, reference)
       cp_rank_run(ctx, w);                (every rank: collective)
       ... w->max_err[rank], w->bad[rank] ...;  cp_world_free(w);

   The oracle is a naive attention in double precision written here (softmax of
   the masked scores and its gradient by the chain rule), not the library's
   flash kernels. A rank takes its tokens (par_cp_positions) of random q, k, v
   and dO, runs par_cp_attention_fwd / _bwd in the compute table's memory
   (device memory is filled and read back through the table) and records the
   worst relative error of its o, dq, dk, dv rows. Used by tests/test_cp.c
   (threads) and tests/cuda/test_cuda_cp.cu (NCCL). C and C++. */
#ifndef PAR_CP_SUITE_H
#define PAR_CP_SUITE_H
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "../parallel.h"

#define CP_TOL 2e-5

typedef struct cp_cfg {
    const char *mesh, *tokens; /* mesh, tokens layout */
    int ranks;
    par_cp_algo algo;
    int ulysses, contiguous, no_a2a, full;
    int batch, heads, kv_heads, head_dim, seq;
} cp_cfg;

/* ---- the oracle ------------------------------------------------------------------- */

static double cp_urand(uint64_t *s) {
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return (double)(*s >> 11) / 9007199254740992.0 * 2.0 - 1.0;
}

/* Global tensors [B, T, H, D] (row-major) and the reference results. */
typedef struct cp_world {
    cp_cfg c;
    float *q, *k, *v, *dout;
    double *o, *dq, *dk, *dv;
    double max_err[64];
    int bad[64];
} cp_world;

static int64_t cp_at(const cp_cfg *c, int b, int t, int h, int H, int d) {
    return (((int64_t)b * c->seq + t) * H + h) * c->head_dim + d;
}

/* Attention of every query over all keys (causal unless c->full), and its gradients. */
static void cp_reference(cp_world *w) {
    const cp_cfg *c = &w->c;
    const int T = c->seq, D = c->head_dim, g = c->heads / c->kv_heads;
    const double scale = 1.0 / sqrt((double)D);
    double *p = (double *)malloc(sizeof(double) * (size_t)T), *dp = (double *)malloc(sizeof(double) * (size_t)T);
    int b, h, i, j, d;
    for (b = 0; b < c->batch; b++)
        for (h = 0; h < c->heads; h++)
            for (i = 0; i < T; i++) {
                const int kh = h / g;
                double m = -1e300, sum = 0, dsum = 0;
                for (j = 0; j < T; j++) {
                    double s = 0;
                    if (!c->full && j > i) { p[j] = -1e300; continue; }
                    for (d = 0; d < D; d++) s += (double)w->q[cp_at(c, b, i, h, c->heads, d)] * w->k[cp_at(c, b, j, kh, c->kv_heads, d)];
                    p[j] = s * scale;
                    if (p[j] > m) m = p[j];
                }
                for (j = 0; j < T; j++) p[j] = p[j] <= -1e299 ? 0 : exp(p[j] - m), sum += p[j];
                for (j = 0; j < T; j++) p[j] /= sum;
                for (d = 0; d < D; d++) {
                    double o = 0;
                    for (j = 0; j < T; j++) o += p[j] * w->v[cp_at(c, b, j, kh, c->kv_heads, d)];
                    w->o[cp_at(c, b, i, h, c->heads, d)] = o;
                }
                /* dP = dO V^T, dS = P (dP - sum(P dP)), dQ = dS K scale, dK += dS^T Q scale, dV += P^T dO */
                for (j = 0; j < T; j++) {
                    double s = 0;
                    for (d = 0; d < D; d++) s += (double)w->dout[cp_at(c, b, i, h, c->heads, d)] * w->v[cp_at(c, b, j, kh, c->kv_heads, d)];
                    dp[j] = s, dsum += p[j] * s;
                }
                for (j = 0; j < T; j++) {
                    const double ds = p[j] * (dp[j] - dsum) * scale;
                    for (d = 0; d < D; d++) {
                        w->dq[cp_at(c, b, i, h, c->heads, d)] += ds * w->k[cp_at(c, b, j, kh, c->kv_heads, d)];
                        w->dk[cp_at(c, b, j, kh, c->kv_heads, d)] += ds * w->q[cp_at(c, b, i, h, c->heads, d)];
                        w->dv[cp_at(c, b, j, kh, c->kv_heads, d)] += p[j] * w->dout[cp_at(c, b, i, h, c->heads, d)];
                    }
                }
            }
    free(p), free(dp);
}

/* ---- one rank ---------------------------------------------------------------------- */

/* This rank's rows of a global [B, T, H*D] tensor, in its token order. */
static void cp_take(const cp_cfg *c, const float *g, int H, const int64_t *pos, int64_t S, int b0, float *dst) {
    int b;
    int64_t t;
    const int64_t row = (int64_t)H * c->head_dim;
    for (b = 0; b < c->batch; b++)
        for (t = 0; t < S; t++) memcpy(dst + ((int64_t)b * S + t) * row, g + ((int64_t)(b0 + b) * c->seq + pos[t]) * row, sizeof(float) * (size_t)row);
}

static double cp_compare(const cp_cfg *c, const float *mine, const double *ref, int H, const int64_t *pos, int64_t S, int b0) {
    const int64_t row = (int64_t)H * c->head_dim;
    double worst = 0;
    int b;
    int64_t t, e;
    for (b = 0; b < c->batch; b++)
        for (t = 0; t < S; t++)
            for (e = 0; e < row; e++) {
                const double r = ref[((int64_t)(b0 + b) * c->seq + pos[t]) * row + e];
                const double err = fabs(mine[((int64_t)b * S + t) * row + e] - r) / (1.0 + fabs(r));
                if (err > worst || err != err) worst = err != err ? 1e30 : err;
            }
    return worst;
}

/* The global tensors (enough samples for every data-parallel rank: batch x
   ranks) and the reference results. NULL when out of memory. */
static cp_world *cp_world_new(const cp_cfg *c) {
    cp_world *w = (cp_world *)calloc(1, sizeof(cp_world));
    const int samples = c->batch * c->ranks;
    const int64_t n1 = (int64_t)samples * c->seq * c->heads * c->head_dim;
    const int64_t n2 = (int64_t)samples * c->seq * c->kv_heads * c->head_dim;
    uint64_t s = 0x1234567ull + (uint64_t)c->seq * 31u + (uint64_t)c->ranks;
    int64_t i;
    if (!w) return NULL;
    w->c = *c;
    w->q = (float *)malloc(sizeof(float) * (size_t)(2 * n1 + 2 * n2));
    w->o = (double *)calloc((size_t)(2 * n1 + 2 * n2), sizeof(double));
    if (!w->q || !w->o) return free(w->q), free(w->o), free(w), (cp_world *)NULL;
    w->k = w->q + n1, w->v = w->k + n2, w->dout = w->v + n2;
    w->dq = w->o + n1, w->dk = w->dq + n1, w->dv = w->dk + n2;
    for (i = 0; i < 2 * n1 + 2 * n2; i++) w->q[i] = (float)cp_urand(&s);
    w->c.batch = samples;
    cp_reference(w);
    w->c.batch = c->batch;
    return w;
}

static void cp_world_free(cp_world *w) {
    if (w) free(w->q), free(w->o), free(w);
}

/* Host buffers <-> the compute table's memory. */
static par_status cp_to_table(const par_compute_table *ct, void *dst, const void *src, int64_t floats, int to_table) {
    const par_copy_kind kind = !ct->device_memory ? PAR_COPY_HOST_TO_HOST
                               : to_table        ? PAR_COPY_HOST_TO_DEVICE
                                                 : PAR_COPY_DEVICE_TO_HOST;
    return ct->memcpy(ct->user, dst, src, (size_t)floats * sizeof(float), kind);
}

static par_status cp_rank_run(par_ctx *ctx, void *arg) {
    cp_world *w = (cp_world *)arg;
    const cp_cfg *c = &w->c;
    const par_compute_table *ct = par_ctx_compute(ctx);
    const int rank = par_ctx_rank(ctx);
    int64_t shape[2], start[2], total, *pos = NULL, S, qn, kvn;
    par_layout tokens;
    par_cp_desc d;
    par_cp_info info;
    par_cp *cp = NULL;
    par_status st;
    float *h = NULL, *g = NULL; /* host and table copies of [q k v o dout dq dk dv lse saved] */
    double err = 0, e;
    void *mem = NULL;
    /* the global batch is split over the layout's batch dims; each rank's samples start at start[0] */
    shape[0] = (int64_t)c->batch * c->ranks, shape[1] = c->seq;
    if ((st = par_layout_parse(&tokens, par_ctx_mesh(ctx), 2, shape, c->tokens)) != PAR_OK) return st;
    tokens.shape[0] = (int64_t)c->batch * par_layout_shards(&tokens, 0);
    if ((st = par_layout_local_offset(&tokens, rank, start)) != PAR_OK) return st;
    memset(&d, 0, sizeof d);
    d.tokens = &tokens, d.algo = c->algo, d.ulysses_degree = c->ulysses, d.contiguous = c->contiguous;
    d.batch = c->batch, d.heads = c->heads, d.kv_heads = c->kv_heads, d.head_dim = c->head_dim;
    d.full_attention = c->full, d.no_all_to_all = c->no_a2a;
    if ((st = par_cp_create(ctx, &d, &cp)) != PAR_OK) return st;
    st = par_cp_get_info(cp, &info);
    S = info.seq_local;
    qn = (int64_t)c->batch * S * c->heads * c->head_dim, kvn = (int64_t)c->batch * S * c->kv_heads * c->head_dim;
    total = 4 * qn + 4 * kvn + info.lse_floats + info.saved_floats + 1;
    pos = (int64_t *)malloc(sizeof(int64_t) * (size_t)S);
    h = (float *)malloc(sizeof(float) * (size_t)total);
    if (st == PAR_OK && (!pos || !h)) st = par_set_error(PAR_ENOMEM, "cp_rank_run: out of host memory");
    if (h) memset(h, 0, sizeof(float) * (size_t)total);
    if (st == PAR_OK) st = ct->alloc(ct->user, (size_t)total * sizeof(float), PAR_MEM_WORKSPACE, &mem);
    if (st == PAR_OK) st = par_cp_positions(cp, pos);
    if (st == PAR_OK) {
        /* layout of both copies: q k v o dout dq dk dv lse saved */
        float *hq = h, *hk = hq + qn, *hv = hk + kvn, *hd = hv + kvn + qn;
        const int b0 = (int)start[0];
        g = (float *)mem;
        cp_take(c, w->q, c->heads, pos, S, b0, hq), cp_take(c, w->k, c->kv_heads, pos, S, b0, hk);
        cp_take(c, w->v, c->kv_heads, pos, S, b0, hv), cp_take(c, w->dout, c->heads, pos, S, b0, hd);
        st = cp_to_table(ct, g, h, 3 * qn + 2 * kvn, 1); /* q k v o (zeros) dout: one copy */
    }
    if (st == PAR_OK) {
        float *q = g, *k = q + qn, *v = k + kvn, *o = v + kvn, *dout = o + qn, *dq = dout + qn, *dk = dq + qn;
        float *dv = dk + kvn, *lse = dv + kvn, *saved = info.saved_floats ? lse + info.lse_floats : NULL;
        st = par_cp_attention_fwd(cp, q, k, v, o, lse, saved);
        if (st == PAR_OK) st = par_cp_attention_bwd(cp, q, k, v, o, lse, saved, dout, dq, dk, dv);
        if (st == PAR_OK && ct->synchronize) st = ct->synchronize(ct->user);
        if (st == PAR_OK) st = cp_to_table(ct, h, g, 4 * qn + 4 * kvn, 0);
    }
    if (st == PAR_OK) {
        const float *o = h + qn + 2 * kvn, *dq = o + 2 * qn, *dk = dq + qn, *dv = dk + kvn;
        const int b0 = (int)start[0];
        e = cp_compare(c, o, w->o, c->heads, pos, S, b0), err = e > err ? e : err;
        e = cp_compare(c, dq, w->dq, c->heads, pos, S, b0), err = e > err ? e : err;
        e = cp_compare(c, dk, w->dk, c->kv_heads, pos, S, b0), err = e > err ? e : err;
        e = cp_compare(c, dv, w->dv, c->kv_heads, pos, S, b0), err = e > err ? e : err;
    }
    if (rank >= 0 && rank < 64) w->max_err[rank] = err, w->bad[rank] = st != PAR_OK;
    if (mem) ct->free(ct->user, mem);
    free(pos), free(h);
    par_cp_destroy(cp);
    return st;
}

#endif /* PAR_CP_SUITE_H */
