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

/* Every function is static (the header is included by the trainer and by the
   tests, each using a part). */
#define LLAMA_FN static PAR__MAYBE_UNUSED

/* Model dimensions as ONE RANK holds them: under tensor parallelism heads,
   kv_heads, ffn and vocab (the lm_head rows) are this rank's shares and
   vocab_start is its first vocabulary id; emb_rows/emb_start describe its
   embedding rows (all of them when the embedding is replicated). */
typedef struct llama_dims {
    int64_t vocab, dim, layers, heads, kv_heads, head_dim, ffn, seq;
    float eps, theta;
    int64_t vocab_start, emb_rows, emb_start; /* read only with a llama_tp */
    int emb_split;                            /* 1: the embedding rows are split over the group */
} llama_dims;

/* Tensor parallelism inside the layers (NULL = one device). The model calls
   these on activations; the trainer implements them as redistributions over
   the tensor-parallel group (layouts Partial -> Replicate, Shard(rows) ->
   Replicate, Partial -> Shard(rows)). With `sp` (Megatron sequence parallel)
   the residual stream, the norms and the embedding output are split by rows
   (tokens) over the group: a rank holds rows [index*n/degree, ...). */
typedef struct llama_tp {
    int degree, index, sp;
    void *user;
    par_status (*all_reduce)(void *user, float *x, int64_t n);     /* sum over the group, in place */
    par_status (*all_reduce_max)(void *user, float *x, int64_t n); /* max over the group, in place */
    /* x_local (n_local floats per member) -> x, the members' blocks in order */
    par_status (*all_gather)(void *user, const float *x_local, float *x, int64_t n_local);
    /* x (degree * n_local floats, partial sums) -> this member's block of the sum */
    par_status (*reduce_scatter)(void *user, const float *x, float *x_local, int64_t n_local);
} llama_tp;

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
    int64_t shape[2];     /* global shape */
    int64_t local[2];     /* this rank's slice (the layout's local shape) */
    int64_t start[2];     /* where the slice starts in the global tensor */
    int64_t numel;        /* elements of the slice (what the flat buffer holds) */
    int64_t offset;       /* in the flat buffer (elements), padded per bucket */
    int bucket;           /* the gradient bucket it belongs to */
    par_layout layout;    /* its layout on the trainer's mesh */
    int kind;             /* llama_tensor_kind (layouts.h) */
    int tp_split;         /* the slice is a tensor-parallel shard (not a copy) */
    int tp_partial;       /* its gradient is a partial sum over the tp group (sum it) */
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

/* Backward scratch, shared by all layers (dx holds dL/d residual: this rank's
   rows under sequence parallelism). Under tensor parallelism forward uses dx,
   dh and dl as temporaries too; dl ([n, dim]) is needed only then. */
typedef struct llama_scratch {
    float *dx, *dh, *dattn, *dq, *dk, *dv, *dg, *du, *dm, *dl;
    float *gath; /* [n, dim], sequence parallel only: a norm output all-gathered to full rows */
} llama_scratch;

/* ---- helpers --------------------------------------------------------------- */

#define LLAMA_CHECK(call)                       \
    do {                                        \
        par_status st_ = (call);                \
        if (st_ != PAR_OK) return st_;          \
    } while (0)

/* y[n,out] = x[n,in] W^T, or y += when accumulate. */
LLAMA_FN par_status llama_linear_fwd(const par_compute_table *ct, const float *x, const float *w, float *y, int64_t n,
                                   int64_t in, int64_t out, int accumulate) {
    par_gemm_desc d = {0};
    d.transb = 1, d.m = n, d.n = out, d.k = in, d.alpha = 1.0f, d.beta = accumulate ? 1.0f : 0.0f;
    return ct->gemm(ct->user, &d, x, w, y);
}

/* dx[n,in] (+)= dy[n,out] W;  dW[out,in] += dy^T x. */
LLAMA_FN par_status llama_linear_bwd(const par_compute_table *ct, const float *x, const float *w, const float *dy,
                                   float *dx, float *dw, int64_t n, int64_t in, int64_t out, int accumulate_dx) {
    par_gemm_desc d = {0}, e = {0};
    d.m = n, d.n = in, d.k = out, d.alpha = 1.0f, d.beta = accumulate_dx ? 1.0f : 0.0f;
    LLAMA_CHECK(ct->gemm(ct->user, &d, dy, w, dx));
    e.transa = 1, e.m = out, e.n = in, e.k = n, e.alpha = 1.0f, e.beta = 1.0f;
    return ct->gemm(ct->user, &e, dy, x, dw);
}

LLAMA_FN par_attn_desc llama_attn_desc(const llama_dims *d, int64_t batch, int64_t seq) {
    par_attn_desc a = {0};
    a.batch = (int)batch, a.q_heads = (int)d->heads, a.kv_heads = (int)d->kv_heads, a.head_dim = (int)d->head_dim;
    a.q_len = a.k_len = seq, a.causal = 1, a.dtype = PAR_F32;
    return a;
}

/* ---- tensor-parallel plumbing --------------------------------------------------- */

LLAMA_FN int llama_tp_on(const llama_tp *tp) { return tp && tp->degree > 1; }
LLAMA_FN int llama_sp_on(const llama_tp *tp) { return llama_tp_on(tp) && tp->sp; }

/* Rows of the residual stream this rank holds (all n without sequence parallel). */
LLAMA_FN int64_t llama_rows_local(const llama_tp *tp, int64_t n) { return llama_sp_on(tp) ? n / tp->degree : n; }

/* out = residual + (sum over the group of the partial projection p [n, C]) on
   this rank's rows: all-reduce, or reduce-scatter under sequence parallel
   (`tmp` receives the rows). */
LLAMA_FN par_status llama_row_parallel_sum(const par_compute_table *ct, const llama_tp *tp, float *p, float *tmp,
                                         const float *residual, float *out, int64_t n, int64_t C) {
    const int64_t nl = llama_rows_local(tp, n);
    float *sum = p;
    if (llama_sp_on(tp)) {
        LLAMA_CHECK(tp->reduce_scatter(tp->user, p, tmp, nl * C));
        sum = tmp;
    } else {
        LLAMA_CHECK(tp->all_reduce(tp->user, p, n * C));
    }
    LLAMA_CHECK(ct->memcpy(ct->user, out, residual, (size_t)(nl * C) * sizeof(float), PAR_COPY_DEVICE_TO_DEVICE));
    return ct->axpy(ct->user, nl * C, 1.0f, sum, out);
}

/* Rows of a [n, C] activation of which this rank holds its block `x`: x
   itself, or, under sequence parallel, x all-gathered into `full`. */
LLAMA_FN par_status llama_full_rows(const llama_tp *tp, const float *x, float *full, int64_t n, int64_t C,
                                  const float **out) {
    if (!llama_sp_on(tp)) return *out = x, PAR_OK;
    *out = full;
    return tp->all_gather(tp->user, x, full, llama_rows_local(tp, n) * C);
}

/* RMSNorm of this rank's rows of x into y (kept for backward: under sequence
   parallel only this rank's rows, as Megatron does, and backward gathers them
   again); *full is the full-row input of the next column-parallel projection. */
LLAMA_FN par_status llama_norm_rows(const par_compute_table *ct, const llama_tp *tp, const float *x, const float *w,
                                  float eps, float *y, float *rstd, float *gath, int64_t n, int64_t C,
                                  const float **full) {
    LLAMA_CHECK(ct->rmsnorm_fwd(ct->user, llama_rows_local(tp, n), C, x, w, eps, y, rstd));
    return llama_full_rows(tp, y, gath, n, C, full);
}

/* A column-parallel input's gradient dh [n, C] is partial over the group: sum
   it (this rank's rows under sequence parallel, into `tmp`), run the norm's
   backward on those rows, and add the result into the residual gradient dx. */
LLAMA_FN par_status llama_norm_bwd_sum(const par_compute_table *ct, const llama_tp *tp, const float *x, const float *w,
                                     const float *rstd, float *dh, float *tmp, float *dw, float *dx, int64_t n,
                                     int64_t C) {
    const int64_t nl = llama_rows_local(tp, n);
    float *g = dh;
    if (llama_sp_on(tp)) {
        LLAMA_CHECK(tp->reduce_scatter(tp->user, dh, tmp, nl * C));
        g = tmp;
    } else if (llama_tp_on(tp)) {
        LLAMA_CHECK(tp->all_reduce(tp->user, dh, n * C));
    }
    LLAMA_CHECK(ct->rmsnorm_bwd(ct->user, nl, C, x, w, rstd, g, g, dw));
    return ct->axpy(ct->user, nl * C, 1.0f, g, dx);
}

/* ---- forward ------------------------------------------------------------------ */

/* One decoder block: a->x_in holds the input (this rank's rows under sequence
   parallel); the output goes to `out`. Under tensor parallelism q/k/v, gate and
   up are column-parallel (this rank's heads and ffn columns), o and down
   row-parallel; s (the backward scratch) holds temporaries. */
LLAMA_FN par_status llama_block_fwd_tp(const par_compute_table *ct, const llama_dims *d, const llama_tp *tp,
                                     const llama_block *w, llama_block_acts *a, const int64_t *pos, int64_t batch,
                                     int64_t seq, float *out, llama_scratch *s) {
    const int64_t n = batch * seq, C = d->dim, qd = d->heads * d->head_dim, kvd = d->kv_heads * d->head_dim;
    const par_attn_desc ad = llama_attn_desc(d, batch, seq);
    void *u = ct->user;
    const float *h1 = a->h1, *h2 = a->h2;
    if (!llama_tp_on(tp)) {
        LLAMA_CHECK(ct->rmsnorm_fwd(u, n, C, a->x_in, w->ln1, d->eps, a->h1, a->rstd1));
    } else {
        LLAMA_CHECK(llama_norm_rows(ct, tp, a->x_in, w->ln1, d->eps, a->h1, a->rstd1, s->gath, n, C, &h1));
    }
    LLAMA_CHECK(llama_linear_fwd(ct, h1, w->wq, a->q, n, C, qd, 0));
    LLAMA_CHECK(llama_linear_fwd(ct, h1, w->wk, a->k, n, C, kvd, 0));
    LLAMA_CHECK(llama_linear_fwd(ct, h1, w->wv, a->v, n, C, kvd, 0));
    LLAMA_CHECK(ct->rope_fwd(u, n, d->heads, d->head_dim, pos, d->theta, a->q, a->q));
    LLAMA_CHECK(ct->rope_fwd(u, n, d->kv_heads, d->head_dim, pos, d->theta, a->k, a->k));
    LLAMA_CHECK(ct->attention_fwd(u, &ad, a->q, a->k, a->v, a->o, a->lse));
    if (!llama_tp_on(tp)) {
        /* x_mid = x_in + o Wo^T: copy the residual, then accumulate the projection */
        LLAMA_CHECK(ct->memcpy(u, a->x_mid, a->x_in, (size_t)(n * C) * sizeof(float), PAR_COPY_DEVICE_TO_DEVICE));
        LLAMA_CHECK(llama_linear_fwd(ct, a->o, w->wo, a->x_mid, n, qd, C, 1));
        LLAMA_CHECK(ct->rmsnorm_fwd(u, n, C, a->x_mid, w->ln2, d->eps, a->h2, a->rstd2));
    } else {
        LLAMA_CHECK(llama_linear_fwd(ct, a->o, w->wo, s->dh, n, qd, C, 0));
        LLAMA_CHECK(llama_row_parallel_sum(ct, tp, s->dh, s->dl, a->x_in, a->x_mid, n, C));
        LLAMA_CHECK(llama_norm_rows(ct, tp, a->x_mid, w->ln2, d->eps, a->h2, a->rstd2, s->gath, n, C, &h2));
    }
    LLAMA_CHECK(llama_linear_fwd(ct, h2, w->wg, a->g, n, C, d->ffn, 0));
    LLAMA_CHECK(llama_linear_fwd(ct, h2, w->wu, a->u, n, C, d->ffn, 0));
    LLAMA_CHECK(ct->swiglu_fwd(u, n * d->ffn, a->g, a->u, a->m));
    if (llama_tp_on(tp)) {
        LLAMA_CHECK(llama_linear_fwd(ct, a->m, w->wd, s->dh, n, d->ffn, C, 0));
        return llama_row_parallel_sum(ct, tp, s->dh, s->dl, a->x_mid, out, n, C);
    }
    LLAMA_CHECK(ct->memcpy(u, out, a->x_mid, (size_t)(n * C) * sizeof(float), PAR_COPY_DEVICE_TO_DEVICE));
    return llama_linear_fwd(ct, a->m, w->wd, out, n, d->ffn, C, 1);
}

LLAMA_FN par_status llama_block_fwd(const par_compute_table *ct, const llama_dims *d, const llama_block *w,
                                  llama_block_acts *a, const int64_t *pos, int64_t batch, int64_t seq, float *out) {
    return llama_block_fwd_tp(ct, d, NULL, w, a, pos, batch, seq, out, NULL);
}

/* Final norm and lm_head: logits [n, vocab] (this rank's vocabulary shard
   under tensor parallelism) from x_final. */
LLAMA_FN par_status llama_head_fwd_tp(const par_compute_table *ct, const llama_dims *d, const llama_tp *tp,
                                    const float *norm_w, const float *lm_head, llama_acts *a, int64_t n,
                                    llama_scratch *s) {
    const float *hf = a->hf;
    if (!llama_tp_on(tp)) LLAMA_CHECK(ct->rmsnorm_fwd(ct->user, n, d->dim, a->x_final, norm_w, d->eps, a->hf, a->rstdf));
    else LLAMA_CHECK(llama_norm_rows(ct, tp, a->x_final, norm_w, d->eps, a->hf, a->rstdf, s->gath, n, d->dim, &hf));
    return llama_linear_fwd(ct, hf, lm_head, a->logits, n, d->dim, d->vocab, 0);
}

LLAMA_FN par_status llama_head_fwd(const par_compute_table *ct, const llama_dims *d, const float *norm_w,
                                 const float *lm_head, llama_acts *a, int64_t n) {
    return llama_head_fwd_tp(ct, d, NULL, norm_w, lm_head, a, n, NULL);
}

/* Token embedding into x (this rank's rows under sequence parallel). A
   replicated table gathers the rows directly; a vocabulary-split one
   (d->emb_rows rows from d->emb_start) gives partial rows that are summed
   over the group. */
LLAMA_FN par_status llama_embed_fwd(const par_compute_table *ct, const llama_dims *d, const llama_tp *tp,
                                  const float *table, const int32_t *ids, int64_t n, float *x, llama_scratch *s) {
    const int64_t nl = llama_rows_local(tp, n), C = d->dim;
    if (!llama_tp_on(tp)) return ct->embedding_fwd(ct->user, n, ids, table, d->vocab, C, 0, x);
    if (!d->emb_split) /* replicated table */
        return ct->embedding_fwd(ct->user, nl, ids + (llama_sp_on(tp) ? tp->index * nl : 0), table, d->emb_rows, C,
                                 0, x);
    LLAMA_CHECK(ct->embedding_fwd(ct->user, n, ids, table, d->emb_rows, C, d->emb_start, s->dh));
    if (llama_sp_on(tp)) return tp->reduce_scatter(tp->user, s->dh, x, nl * C);
    LLAMA_CHECK(tp->all_reduce(tp->user, s->dh, n * C));
    return ct->memcpy(ct->user, x, s->dh, (size_t)(n * C) * sizeof(float), PAR_COPY_DEVICE_TO_DEVICE);
}

/* ---- backward ----------------------------------------------------------------- */

/* dx holds dL/d(block output) on entry and dL/d(block input) on return (this
   rank's rows under sequence parallel). Weight gradients accumulate into g;
   under sequence parallel the norm weights' are partial over the group. */
LLAMA_FN par_status llama_block_bwd_tp(const par_compute_table *ct, const llama_dims *d, const llama_tp *tp,
                                     const llama_block *w, const llama_block *g, const llama_block_acts *a,
                                     const int64_t *pos, int64_t batch, int64_t seq, llama_scratch *s) {
    const int64_t n = batch * seq, C = d->dim, qd = d->heads * d->head_dim, kvd = d->kv_heads * d->head_dim;
    const par_attn_desc ad = llama_attn_desc(d, batch, seq);
    void *u = ct->user;
    const float *dy, *h;
    /* MLP: out = x_mid + down(silu(gate h2) * up h2) */
    LLAMA_CHECK(llama_full_rows(tp, s->dx, s->dh, n, C, &dy));
    LLAMA_CHECK(llama_linear_bwd(ct, a->m, w->wd, dy, s->dm, g->wd, n, d->ffn, C, 0));
    LLAMA_CHECK(ct->swiglu_bwd(u, n * d->ffn, a->g, a->u, s->dm, s->dg, s->du));
    LLAMA_CHECK(llama_full_rows(tp, a->h2, s->gath, n, C, &h)); /* gathered again, not kept */
    LLAMA_CHECK(llama_linear_bwd(ct, h, w->wg, s->dg, s->dh, g->wg, n, C, d->ffn, 0));
    LLAMA_CHECK(llama_linear_bwd(ct, h, w->wu, s->du, s->dh, g->wu, n, C, d->ffn, 1));
    LLAMA_CHECK(llama_norm_bwd_sum(ct, tp, a->x_mid, w->ln2, a->rstd2, s->dh, s->dl, g->ln2, s->dx, n, C));
    /* attention: x_mid = x_in + o_proj(attn(rope(q h1), rope(k h1), v h1)) */
    LLAMA_CHECK(llama_full_rows(tp, s->dx, s->dh, n, C, &dy));
    LLAMA_CHECK(llama_linear_bwd(ct, a->o, w->wo, dy, s->dattn, g->wo, n, qd, C, 0));
    LLAMA_CHECK(ct->attention_bwd(u, &ad, a->q, a->k, a->v, a->o, a->lse, s->dattn, s->dq, s->dk, s->dv, 0));
    LLAMA_CHECK(ct->rope_bwd(u, n, d->heads, d->head_dim, pos, d->theta, s->dq, s->dq));
    LLAMA_CHECK(ct->rope_bwd(u, n, d->kv_heads, d->head_dim, pos, d->theta, s->dk, s->dk));
    LLAMA_CHECK(llama_full_rows(tp, a->h1, s->gath, n, C, &h));
    LLAMA_CHECK(llama_linear_bwd(ct, h, w->wq, s->dq, s->dh, g->wq, n, C, qd, 0));
    LLAMA_CHECK(llama_linear_bwd(ct, h, w->wk, s->dk, s->dh, g->wk, n, C, kvd, 1));
    LLAMA_CHECK(llama_linear_bwd(ct, h, w->wv, s->dv, s->dh, g->wv, n, C, kvd, 1));
    return llama_norm_bwd_sum(ct, tp, a->x_in, w->ln1, a->rstd1, s->dh, s->dl, g->ln1, s->dx, n, C);
}

LLAMA_FN par_status llama_block_bwd(const par_compute_table *ct, const llama_dims *d, const llama_block *w,
                                  const llama_block *g, const llama_block_acts *a, const int64_t *pos, int64_t batch,
                                  int64_t seq, llama_scratch *s) {
    return llama_block_bwd_tp(ct, d, NULL, w, g, a, pos, batch, seq, s);
}

/* Vocabulary-parallel softmax cross-entropy: per-row losses into a->losses and
   this shard's dlogits (in place of the logits), from the pieces all-reduced
   over the group; the full logits never exist on one rank. `work` holds 3n floats. */
LLAMA_FN par_status llama_xent_tp(const par_compute_table *ct, const llama_dims *d, const llama_tp *tp, llama_acts *a,
                                int64_t n, float scale, float *work) {
    float *gmax = work, *gsum = work + n, *tgt = work + 2 * n;
    void *u = ct->user;
    LLAMA_CHECK(ct->xent_local_max(u, n, d->vocab, a->logits, gmax));
    LLAMA_CHECK(tp->all_reduce_max(tp->user, gmax, n));
    LLAMA_CHECK(ct->xent_local_sumexp(u, n, d->vocab, a->logits, gmax, gsum));
    LLAMA_CHECK(tp->all_reduce(tp->user, gsum, n));
    LLAMA_CHECK(ct->xent_local_target(u, n, d->vocab, a->logits, a->targets, d->vocab_start, tgt));
    LLAMA_CHECK(tp->all_reduce(tp->user, tgt, n));
    LLAMA_CHECK(ct->xent_loss_from_pieces(u, n, gmax, gsum, tgt, a->targets, a->losses));
    return ct->xent_bwd_split(u, n, d->vocab, a->logits, a->targets, d->vocab_start, gmax, gsum, scale, a->logits);
}

/* Loss and the head's backward: per-row losses into a->losses, dlogits (in
   place of the logits) scaled by `scale`, then s->dx = dL/d x_final (this
   rank's rows under sequence parallel). */
LLAMA_FN par_status llama_head_bwd_tp(const par_compute_table *ct, const llama_dims *d, const llama_tp *tp,
                                    const float *norm_w, const float *lm_head, float *g_norm, float *g_lm_head,
                                    llama_acts *a, int64_t n, float scale, llama_scratch *s) {
    void *u = ct->user;
    const int64_t C = d->dim, nl = llama_rows_local(tp, n);
    if (!llama_tp_on(tp)) {
        LLAMA_CHECK(ct->xent(u, n, d->vocab, a->logits, a->targets, a->losses, a->logits, scale));
        LLAMA_CHECK(llama_linear_bwd(ct, a->hf, lm_head, a->logits, s->dx, g_lm_head, n, C, d->vocab, 0));
        return ct->rmsnorm_bwd(u, n, C, a->x_final, norm_w, a->rstdf, s->dx, s->dx, g_norm);
    }
    const float *hf;
    LLAMA_CHECK(llama_xent_tp(ct, d, tp, a, n, scale, s->dl));
    LLAMA_CHECK(llama_full_rows(tp, a->hf, s->gath, n, C, &hf));
    LLAMA_CHECK(llama_linear_bwd(ct, hf, lm_head, a->logits, s->dh, g_lm_head, n, C, d->vocab, 0));
    LLAMA_CHECK(ct->memset(u, s->dx, 0, (size_t)(nl * C) * sizeof(float)));
    return llama_norm_bwd_sum(ct, tp, a->x_final, norm_w, a->rstdf, s->dh, s->dl, g_norm, s->dx, n, C);
}

LLAMA_FN par_status llama_head_bwd(const par_compute_table *ct, const llama_dims *d, const float *norm_w,
                                 const float *lm_head, float *g_norm, float *g_lm_head, llama_acts *a, int64_t n,
                                 float scale, llama_scratch *s) {
    return llama_head_bwd_tp(ct, d, NULL, norm_w, lm_head, g_norm, g_lm_head, a, n, scale, s);
}

/* The embedding's backward from s->dx (this rank's rows under sequence
   parallel): a replicated table's gradient is partial over the group under
   sequence parallel (identical on every member without); a split table takes
   the full rows' gradient for its own vocabulary rows. */
LLAMA_FN par_status llama_embed_bwd(const par_compute_table *ct, const llama_dims *d, const llama_tp *tp,
                                  const int32_t *ids, int64_t n, float *dtable, llama_scratch *s) {
    const int64_t nl = llama_rows_local(tp, n), C = d->dim;
    const float *dy;
    if (!llama_tp_on(tp)) return ct->embedding_bwd(ct->user, n, ids, s->dx, d->vocab, C, 0, dtable);
    if (!d->emb_split)
        return ct->embedding_bwd(ct->user, nl, ids + (llama_sp_on(tp) ? tp->index * nl : 0), s->dx, d->emb_rows, C,
                                 0, dtable);
    LLAMA_CHECK(llama_full_rows(tp, s->dx, s->dh, n, C, &dy));
    return ct->embedding_bwd(ct->user, n, ids, dy, d->emb_rows, C, d->emb_start, dtable);
}

#endif /* LLAMA_MODEL_H */
