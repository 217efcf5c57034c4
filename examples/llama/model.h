/* examples/llama/model.h - the Llama model on the compute hook table.

   Hugging Face Llama math (DESIGN.md section 4): token embedding; per block
   RMSNorm -> q/k/v projections (GQA) -> RoPE (rotate-half) -> causal attention
   -> o_proj -> residual; RMSNorm -> SwiGLU MLP (gate, up, down) -> residual;
   final RMSNorm; untied lm_head; mean next-token cross-entropy.

   As in llm.c, every layer has one forward and one backward written out by
   hand, and all memory is planned before the first step: the parameter table
   fixes where each tensor lives in one flat buffer, and the activation slot
   (what one micro-batch keeps for its backward) is sized from the dimensions.
   All kernels go through `par_compute_table`, so the same code runs on the CPU
   table or the CUDA one; host<->device traffic goes through its memcpy.

   Shapes (row-major): a micro-batch is B samples of T tokens, N = B*T rows.
   Linear weights are stored as Hugging Face does, [out, in], so y = x W^T. */
#ifndef LLAMA_MODEL_H
#define LLAMA_MODEL_H

#include "parallel.h"

typedef struct llama_dims {
    int64_t vocab, dim, layers, heads, kv_heads, head_dim, ffn, seq;
    float eps, theta;
} llama_dims;

/* Pointers to one block's tensors (weights, or their gradients). */
typedef struct llama_block {
    float *ln1, *wq, *wk, *wv, *wo, *ln2, *wg, *wu, *wd;
} llama_block;

/* Tensors of the parameter table, in flat-buffer order. A block's tensors are
   consecutive: LLAMA_BLOCK_FIRST + b * LLAMA_PER_BLOCK + k. */
enum { LLAMA_T_EMBED = 0, LLAMA_BLOCK_FIRST = 1, LLAMA_PER_BLOCK = 9 };

typedef struct llama_tensor {
    char name[80];        /* Hugging Face name, e.g. model.layers.3.self_attn.q_proj.weight */
    int ndim;
    int64_t shape[2];
    int64_t numel;
    int64_t offset;       /* in the flat buffer (elements), padded per bucket */
    int bucket;           /* the gradient bucket it belongs to */
    par_layout layout;    /* its layout on the trainer's mesh */
} llama_tensor;

/* What one micro-batch keeps from forward for backward. */
typedef struct llama_block_acts {
    float *x_in, *rstd1, *h1, *q, *k, *v, *o, *lse, *x_mid, *rstd2, *h2, *g, *u, *m;
} llama_block_acts;

typedef struct llama_acts {
    int32_t *ids, *targets; /* [N] in the table's memory */
    int64_t *pos;           /* [N] global position of each token (RoPE) */
    llama_block_acts *blocks;
    float *x_final, *rstdf, *hf, *logits, *losses;
} llama_acts;

/* Backward scratch, shared by all layers. */
typedef struct llama_scratch {
    float *dx, *dh, *dattn, *dq, *dk, *dv, *dg, *du, *dm;
} llama_scratch;

/* ---- helpers --------------------------------------------------------------- */

#define LLAMA_CHECK(call)                       \
    do {                                        \
        par_status st_ = (call);                \
        if (st_ != PAR_OK) return st_;          \
    } while (0)

/* y[n,out] = x[n,in] W^T, or y += when accumulate. */
static par_status llama_linear_fwd(const par_compute_table *ct, const float *x, const float *w, float *y, int64_t n,
                                   int64_t in, int64_t out, int accumulate) {
    par_gemm_desc d = {0};
    d.transb = 1, d.m = n, d.n = out, d.k = in, d.alpha = 1.0f, d.beta = accumulate ? 1.0f : 0.0f;
    return ct->gemm(ct->user, &d, x, w, y);
}

/* dx[n,in] (+)= dy[n,out] W;  dW[out,in] += dy^T x. */
static par_status llama_linear_bwd(const par_compute_table *ct, const float *x, const float *w, const float *dy,
                                   float *dx, float *dw, int64_t n, int64_t in, int64_t out, int accumulate_dx) {
    par_gemm_desc d = {0}, e = {0};
    d.m = n, d.n = in, d.k = out, d.alpha = 1.0f, d.beta = accumulate_dx ? 1.0f : 0.0f;
    LLAMA_CHECK(ct->gemm(ct->user, &d, dy, w, dx));
    e.transa = 1, e.m = out, e.n = in, e.k = n, e.alpha = 1.0f, e.beta = 1.0f;
    return ct->gemm(ct->user, &e, dy, x, dw);
}

static par_attn_desc llama_attn_desc(const llama_dims *d, int64_t batch, int64_t seq) {
    par_attn_desc a = {0};
    a.batch = (int)batch, a.q_heads = (int)d->heads, a.kv_heads = (int)d->kv_heads, a.head_dim = (int)d->head_dim;
    a.q_len = a.k_len = seq, a.causal = 1, a.dtype = PAR_F32;
    return a;
}

/* ---- forward ------------------------------------------------------------------ */

/* One decoder block: a->x_in holds the input; the output goes to `out`. */
static par_status llama_block_fwd(const par_compute_table *ct, const llama_dims *d, const llama_block *w,
                                  llama_block_acts *a, const int64_t *pos, int64_t batch, int64_t seq, float *out) {
    const int64_t n = batch * seq, C = d->dim, qd = d->heads * d->head_dim, kvd = d->kv_heads * d->head_dim;
    const par_attn_desc ad = llama_attn_desc(d, batch, seq);
    void *u = ct->user;
    LLAMA_CHECK(ct->rmsnorm_fwd(u, n, C, a->x_in, w->ln1, d->eps, a->h1, a->rstd1));
    LLAMA_CHECK(llama_linear_fwd(ct, a->h1, w->wq, a->q, n, C, qd, 0));
    LLAMA_CHECK(llama_linear_fwd(ct, a->h1, w->wk, a->k, n, C, kvd, 0));
    LLAMA_CHECK(llama_linear_fwd(ct, a->h1, w->wv, a->v, n, C, kvd, 0));
    LLAMA_CHECK(ct->rope_fwd(u, n, d->heads, d->head_dim, pos, d->theta, a->q, a->q));
    LLAMA_CHECK(ct->rope_fwd(u, n, d->kv_heads, d->head_dim, pos, d->theta, a->k, a->k));
    LLAMA_CHECK(ct->attention_fwd(u, &ad, a->q, a->k, a->v, a->o, a->lse));
    /* x_mid = x_in + o Wo^T: copy the residual, then accumulate the projection */
    LLAMA_CHECK(ct->memcpy(u, a->x_mid, a->x_in, (size_t)(n * C) * sizeof(float), PAR_COPY_DEVICE_TO_DEVICE));
    LLAMA_CHECK(llama_linear_fwd(ct, a->o, w->wo, a->x_mid, n, qd, C, 1));
    LLAMA_CHECK(ct->rmsnorm_fwd(u, n, C, a->x_mid, w->ln2, d->eps, a->h2, a->rstd2));
    LLAMA_CHECK(llama_linear_fwd(ct, a->h2, w->wg, a->g, n, C, d->ffn, 0));
    LLAMA_CHECK(llama_linear_fwd(ct, a->h2, w->wu, a->u, n, C, d->ffn, 0));
    LLAMA_CHECK(ct->swiglu_fwd(u, n * d->ffn, a->g, a->u, a->m));
    LLAMA_CHECK(ct->memcpy(u, out, a->x_mid, (size_t)(n * C) * sizeof(float), PAR_COPY_DEVICE_TO_DEVICE));
    return llama_linear_fwd(ct, a->m, w->wd, out, n, d->ffn, C, 1);
}

/* Final norm and lm_head: logits [n, vocab] from x_final. */
static par_status llama_head_fwd(const par_compute_table *ct, const llama_dims *d, const float *norm_w,
                                 const float *lm_head, llama_acts *a, int64_t n) {
    LLAMA_CHECK(ct->rmsnorm_fwd(ct->user, n, d->dim, a->x_final, norm_w, d->eps, a->hf, a->rstdf));
    return llama_linear_fwd(ct, a->hf, lm_head, a->logits, n, d->dim, d->vocab, 0);
}

/* ---- backward ----------------------------------------------------------------- */

/* dx holds dL/d(block output) on entry and dL/d(block input) on return.
   Weight gradients accumulate into g. */
static par_status llama_block_bwd(const par_compute_table *ct, const llama_dims *d, const llama_block *w,
                                  const llama_block *g, const llama_block_acts *a, const int64_t *pos, int64_t batch,
                                  int64_t seq, llama_scratch *s) {
    const int64_t n = batch * seq, C = d->dim, qd = d->heads * d->head_dim, kvd = d->kv_heads * d->head_dim;
    const par_attn_desc ad = llama_attn_desc(d, batch, seq);
    void *u = ct->user;
    /* MLP: out = x_mid + down(silu(gate h2) * up h2) */
    LLAMA_CHECK(llama_linear_bwd(ct, a->m, w->wd, s->dx, s->dm, g->wd, n, d->ffn, C, 0));
    LLAMA_CHECK(ct->swiglu_bwd(u, n * d->ffn, a->g, a->u, s->dm, s->dg, s->du));
    LLAMA_CHECK(llama_linear_bwd(ct, a->h2, w->wg, s->dg, s->dh, g->wg, n, C, d->ffn, 0));
    LLAMA_CHECK(llama_linear_bwd(ct, a->h2, w->wu, s->du, s->dh, g->wu, n, C, d->ffn, 1));
    LLAMA_CHECK(ct->rmsnorm_bwd(u, n, C, a->x_mid, w->ln2, a->rstd2, s->dh, s->dh, g->ln2));
    LLAMA_CHECK(ct->axpy(u, n * C, 1.0f, s->dh, s->dx));
    /* attention: x_mid = x_in + o_proj(attn(rope(q h1), rope(k h1), v h1)) */
    LLAMA_CHECK(llama_linear_bwd(ct, a->o, w->wo, s->dx, s->dattn, g->wo, n, qd, C, 0));
    LLAMA_CHECK(ct->attention_bwd(u, &ad, a->q, a->k, a->v, a->o, a->lse, s->dattn, s->dq, s->dk, s->dv, 0));
    LLAMA_CHECK(ct->rope_bwd(u, n, d->heads, d->head_dim, pos, d->theta, s->dq, s->dq));
    LLAMA_CHECK(ct->rope_bwd(u, n, d->kv_heads, d->head_dim, pos, d->theta, s->dk, s->dk));
    LLAMA_CHECK(llama_linear_bwd(ct, a->h1, w->wq, s->dq, s->dh, g->wq, n, C, qd, 0));
    LLAMA_CHECK(llama_linear_bwd(ct, a->h1, w->wk, s->dk, s->dh, g->wk, n, C, kvd, 1));
    LLAMA_CHECK(llama_linear_bwd(ct, a->h1, w->wv, s->dv, s->dh, g->wv, n, C, kvd, 1));
    LLAMA_CHECK(ct->rmsnorm_bwd(u, n, C, a->x_in, w->ln1, a->rstd1, s->dh, s->dh, g->ln1));
    return ct->axpy(u, n * C, 1.0f, s->dh, s->dx);
}

/* Loss and the head's backward: per-row losses into a->losses, dlogits (in
   place of the logits) scaled by `scale`, then dx = dL/d x_final. */
static par_status llama_head_bwd(const par_compute_table *ct, const llama_dims *d, const float *norm_w,
                                 const float *lm_head, float *g_norm, float *g_lm_head, llama_acts *a, int64_t n,
                                 float scale, llama_scratch *s) {
    void *u = ct->user;
    LLAMA_CHECK(ct->xent(u, n, d->vocab, a->logits, a->targets, a->losses, a->logits, scale));
    LLAMA_CHECK(llama_linear_bwd(ct, a->hf, lm_head, a->logits, s->dx, g_lm_head, n, d->dim, d->vocab, 0));
    return ct->rmsnorm_bwd(u, n, d->dim, a->x_final, norm_w, a->rstdf, s->dx, s->dx, g_norm);
}

#endif /* LLAMA_MODEL_H */
