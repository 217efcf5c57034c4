/* examples/llama/model.h - the Llama model on the compute hook table.

   Hugging Face Llama math (LlamaForCausalLM): token embedding; per block
   RMSNorm -> q/k/v projections (GQA) -> RoPE (rotate-half) -> causal attention
   -> o_proj -> residual; RMSNorm -> SwiGLU MLP (gate, up, down) -> residual;
   final RMSNorm; untied lm_head; mean next-token cross-entropy.

   As in llm.c, every layer has one forward and one backward written out by
   hand, and all memory is planned before the first step (llama_acts_carve and
   llama_scratch_carve are the one list of what a micro-batch keeps and what
   backward needs: the same function sizes the buffers and carves them). All
   kernels go through `par_compute_table`, so the same code runs on the CPU
   table or the CUDA one.

   Parallelism is parallel.h's >>tensor-parallel region (par_tp): q/k/v, gate,
   up and lm_head are column-parallel linears, o_proj and down_proj
   row-parallel ones; par_tp_gather_rows before a column-parallel linear and
   par_tp_reduce_rows after a row-parallel one (and the reverse in backward)
   are all the communication, and with one device they move nothing. Under
   sequence parallelism the residual stream and the norms hold this rank's
   block of rows (par_tp_rows); everything else holds all n rows. Under
   context parallelism (llama_model.cp, parallel.h's >>context-parallel) a
   rank holds some of each sample's tokens (their positions come with them)
   and attention is par_cp_attention_fwd / _bwd; every other layer works
   token by token and does not notice.

   Shapes (row-major): a micro-batch is B samples of T tokens, n = B*T rows.
   Linear weights are stored as Hugging Face does, [out, in], so y = x W^T.
   With llama_dims.qkv_bias (Qwen2) q/k/v are y = x W^T + b: the bias is a
   rank-1 GEMM update with a ones column (y += 1 b^T) and its gradient a GEMM
   with it too (db += dy^T 1), so the compute table needs no kernel of its own
   for either (llama_scratch.ones holds the column). */
#ifndef LLAMA_MODEL_H
#define LLAMA_MODEL_H

#include "parallel.h"

#include <stdlib.h>
#include <string.h>

/* Every function is static (the header is included by the trainer and by the
   tests, each using a part); LLAMA_PRINTF checks printf-style arguments. */
#if defined(__GNUC__) || defined(__clang__)
#define LLAMA_FN static __attribute__((unused))
#define LLAMA_PRINTF(f, a) __attribute__((format(printf, f, a)))
#else
#define LLAMA_FN static
#define LLAMA_PRINTF(f, a)
#endif

#define LLAMA_CHECK(call) PAR_CHECK(call) /* parallel.h's idiom, under the trainer's older name */

/* Model dimensions: the model's, or (llama_model.local) what one rank
   computes: its heads, kv heads, ffn columns and vocabulary shard. */
typedef struct llama_dims {
    int64_t vocab, dim, layers, heads, kv_heads, head_dim, ffn, seq;
    float eps, theta;
    int qkv_bias; /* q_proj, k_proj and v_proj have biases (Qwen2) */
} llama_dims;

/* The model placed on the mesh: one placement per kind of linear (every
   block's are alike) and the embedding, from the strategies of the tp region. */
typedef struct llama_model {
    const par_compute_table *ct;
    par_tp *tp;
    llama_dims dims, local;
    int tp_degree, sp;      /* the tp region's degree and sequence parallelism */
    par_linear q, k, v, o, gate, up, down, head;
    par_embedding emb;
    par_cp *cp;             /* context parallelism, or NULL: the table's attention on whole samples */
    int split_backward;     /* backward may run as input gradient, then weight gradient later (zero-bubble
                               pipelines): a micro-batch's slot also keeps the output gradients W needs */
    int64_t cp_lse, cp_saved; /* floats of attention state per layer under cp (par_cp_info) */
    const par_recompute_mode *recompute; /* per local layer what it keeps (parallel.h's >>recompute), or NULL:
                                            every layer keeps everything; read when activations are carved */
    par_dtype dtype;        /* the compute type (llama_model_place): weights as the layers read them (the
                               parameter set's compute copies), activations and their gradients; f32
                               arithmetic inside every kernel, rounded once on store. rstd, lse, the
                               losses and the weight gradients are f32 whatever it is */
    int64_t esize;          /* bytes of one element of dtype */
} llama_model;

/* Attention goes through a context-parallel object from now on (NULL: none). */
LLAMA_FN par_status llama_model_set_cp(llama_model *m, par_cp *cp) {
    par_cp_info info;
    m->cp = cp, m->cp_lse = m->cp_saved = 0;
    if (!cp) return PAR_OK;
    LLAMA_CHECK(par_cp_get_info(cp, &info));
    m->cp_lse = info.lse_floats, m->cp_saved = info.saved_floats;
    return PAR_OK;
}

/* Place every kind of tensor; errors name the tensor and the rule. */
LLAMA_FN par_status llama_model_place(llama_model *m, const par_compute_table *ct, par_tp *tp, const llama_dims *d,
                                      int vocab_parallel_embedding) {
    const int64_t qd = d->heads * d->head_dim, kvd = d->kv_heads * d->head_dim;
    par_tp_info info;
    memset(m, 0, sizeof *m);
    m->ct = ct, m->tp = tp, m->dims = *d, m->local = *d;
    LLAMA_CHECK(par_tp_get_info(tp, &info));
    m->dtype = info.dtype, m->esize = (int64_t)par_dtype_size(info.dtype); /* the tp region moves this type */
    m->tp_degree = info.degree, m->sp = info.sequence_parallel && info.degree > 1;
    LLAMA_CHECK(par_tp_heads(tp, d->heads, d->kv_heads, &m->local.heads, &m->local.kv_heads));
    LLAMA_CHECK(par_tp_linear(tp, "q_proj", PAR_LINEAR_COLUMN, d->dim, qd, &m->q));
    LLAMA_CHECK(par_tp_linear(tp, "k_proj", PAR_LINEAR_COLUMN, d->dim, kvd, &m->k));
    LLAMA_CHECK(par_tp_linear(tp, "v_proj", PAR_LINEAR_COLUMN, d->dim, kvd, &m->v));
    LLAMA_CHECK(par_tp_linear(tp, "o_proj", PAR_LINEAR_ROW, qd, d->dim, &m->o));
    LLAMA_CHECK(par_tp_linear(tp, "gate_proj", PAR_LINEAR_COLUMN, d->dim, d->ffn, &m->gate));
    LLAMA_CHECK(par_tp_linear(tp, "up_proj", PAR_LINEAR_COLUMN, d->dim, d->ffn, &m->up));
    LLAMA_CHECK(par_tp_linear(tp, "down_proj", PAR_LINEAR_ROW, d->ffn, d->dim, &m->down));
    LLAMA_CHECK(par_tp_linear(tp, "lm_head", PAR_LINEAR_COLUMN, d->dim, d->vocab, &m->head));
    LLAMA_CHECK(par_tp_embedding(tp, "embed_tokens", d->vocab, d->dim, vocab_parallel_embedding, &m->emb));
    m->local.ffn = m->gate.out_local, m->local.vocab = m->head.out_local;
    return PAR_OK;
}

/* Pointers to one block's tensors: its weights (in the model's dtype) or
   their gradients (f32); bq, bk, bv ([local q/kv columns]) only with
   dims.qkv_bias. */
typedef struct llama_block {
    void *ln1, *wq, *wk, *wv, *wo, *ln2, *wg, *wu, *wd;
    void *bq, *bk, *bv;
} llama_block;

/* What one micro-batch keeps from forward for backward. With a split
   backward the input-gradient half leaves the weight-gradient half its
   linears' output gradients: dq, dk, dv, dg, du over q, k, v, g, u (dead by
   then) and o_proj's and down_proj's in dy_o, dy_down (split_backward only).
   Under recomputation (`mode`, see llama_keeps) a tensor the layer does not
   keep is NULL here and lives in the lane's recompute area
   (llama_scratch.work) while its forward or backward runs. */
typedef struct llama_block_acts {
    void *x_in, *h1, *q, *k, *v, *o, *x_mid, *h2, *g, *u, *m, *dy_o, *dy_down; /* the model's dtype */
    float *rstd1, *lse, *cp_saved, *rstd2;                                     /* f32 */
    par_recompute_mode mode;
} llama_block_acts;

typedef struct llama_acts {
    int32_t *ids, *targets; /* [n] in the table's memory */
    int64_t *pos;           /* [n] global position of each token (RoPE) */
    llama_block_acts *blocks;
    void *x_final, *hf, *logits; /* the model's dtype */
    float *rstdf, *losses;
} llama_acts;

/* Backward scratch, shared by all layers (dx holds dL/d residual on this
   rank's rows). Forward uses dh and dl as temporaries too (dl only under
   tensor parallelism); gath receives a norm output gathered to all n rows
   under sequence parallelism. ones: n ones (qkv_bias only; set by
   llama_scratch_init), the column the biases' GEMMs multiply by. work: the
   recompute area, one layer's tensors its layers do not keep (NULL fields
   where every layer keeps them), and work_out the output of a full
   recompute's forward (thrown away: the next layer's input is kept). */
typedef struct llama_scratch {
    void *dx, *dh, *dattn, *dq, *dk, *dv, *dg, *du, *dm, *dl, *gath; /* the model's dtype */
    void *ones;
    llama_block_acts work;
    void *work_out;
    float *xent; /* the vocabulary-parallel cross-entropy's 3n floats (tensor parallel only) */
} llama_scratch;

/* ---- memory: one list sizes and carves --------------------------------------- */

/* Hands out consecutive pieces of `base` (bytes); with base NULL it only
   counts. esize: bytes of an element of the model's dtype. Every piece
   starts 4-byte aligned (f32 pieces follow 16-bit ones of odd length): a
   pad of 2 bytes at most, none in f32. */
typedef struct llama_carver {
    char *base;
    int64_t used, esize;
} llama_carver;

LLAMA_FN void *llama_carve_bytes(llama_carver *c, int64_t bytes) {
    void *p;
    c->used = (c->used + 3) / 4 * 4;
    p = c->base ? c->base + c->used : NULL;
    c->used += bytes;
    return p;
}

/* count elements of the model's dtype. */
LLAMA_FN void *llama_carve(llama_carver *c, int64_t count) { return llama_carve_bytes(c, count * c->esize); }

/* count floats (statistics). */
LLAMA_FN float *llama_carve_f32(llama_carver *c, int64_t count) {
    return (float *)llama_carve_bytes(c, count * (int64_t)sizeof(float));
}

/* A piece only if `take`: NULL and nothing counted otherwise. */
LLAMA_FN void *llama_carve_if(llama_carver *c, int take, int64_t count) {
    return take ? llama_carve(c, count) : NULL;
}

LLAMA_FN float *llama_carve_f32_if(llama_carver *c, int take, int64_t count) {
    return take ? llama_carve_f32(c, count) : NULL;
}

/* Does a layer under `mode` keep a tensor for its backward? Selective drops
   the `cheap` ones (the norms' outputs h1, h2 and the SwiGLU product m:
   re-derived elementwise from x_in, x_mid, g, u); full keeps none but the
   layer's input (never asked here: always kept). With a split backward the
   weight-gradient half, which runs later with other layers' work between,
   reads the tensors `w_reads` (o, m, x_mid to re-derive h2, and q, k, v, g,
   u, which hold the input half's output gradients by then): kept whatever
   the mode. */
LLAMA_FN int llama_keeps(par_recompute_mode mode, int split_backward, int cheap, int w_reads) {
    if (mode == PAR_RECOMPUTE_NONE || (split_backward && w_reads)) return 1;
    return mode == PAR_RECOMPUTE_SELECTIVE && !cheap;
}

/* Floats of one layer's attention log-sum-exp (and its cp state in cp_saved). */
LLAMA_FN int64_t llama_lse_floats(const llama_model *m, int64_t n) { return m->cp ? m->cp_lse : n * m->local.heads; }

/* One block's tensors of n rows: those the layer keeps under `mode` (work 0:
   its slot), or those it does not (work 1: the recompute area; x_in and the
   split backward's dy_o, dy_down are always the slot's). */
LLAMA_FN void llama_block_carve(const llama_model *m, int64_t n, par_recompute_mode mode, int work, llama_carver *c,
                                llama_block_acts *b) {
    const llama_dims *d = &m->local;
    const int64_t rows = par_tp_rows(m->tp, n), qd = d->heads * d->head_dim, kvd = d->kv_heads * d->head_dim;
    const int sb = m->split_backward;
#define LLAMA_TAKE(cheap, w_reads) (llama_keeps(mode, sb, cheap, w_reads) != work)
    b->mode = work ? PAR_RECOMPUTE_NONE : mode;
    b->x_in = llama_carve_if(c, !work, rows * d->dim);
    b->rstd1 = llama_carve_f32_if(c, LLAMA_TAKE(0, 0), rows), b->h1 = llama_carve_if(c, LLAMA_TAKE(1, 0), rows * d->dim);
    b->q = llama_carve_if(c, LLAMA_TAKE(0, 1), n * qd), b->k = llama_carve_if(c, LLAMA_TAKE(0, 1), n * kvd);
    b->v = llama_carve_if(c, LLAMA_TAKE(0, 1), n * kvd), b->o = llama_carve_if(c, LLAMA_TAKE(0, 1), n * qd);
    b->lse = llama_carve_f32_if(c, LLAMA_TAKE(0, 0), llama_lse_floats(m, n));
    b->cp_saved = llama_carve_f32_if(c, LLAMA_TAKE(0, 0), m->cp_saved);
    b->x_mid = llama_carve_if(c, LLAMA_TAKE(0, 1), rows * d->dim), b->rstd2 = llama_carve_f32_if(c, LLAMA_TAKE(0, 0), rows);
    b->h2 = llama_carve_if(c, LLAMA_TAKE(1, 0), rows * d->dim);
    b->g = llama_carve_if(c, LLAMA_TAKE(0, 1), n * d->ffn), b->u = llama_carve_if(c, LLAMA_TAKE(0, 1), n * d->ffn);
    b->m = llama_carve_if(c, LLAMA_TAKE(1, 1), n * d->ffn);
    b->dy_o = llama_carve_if(c, !work && sb, n * d->dim), b->dy_down = llama_carve_if(c, !work && sb, n * d->dim);
#undef LLAMA_TAKE
}

/* The recompute mode of local layer l, and the most any layer recomputes. */
LLAMA_FN par_recompute_mode llama_layer_mode(const llama_model *m, int64_t l) {
    return m->recompute ? m->recompute[l] : PAR_RECOMPUTE_NONE;
}

LLAMA_FN par_recompute_mode llama_max_mode(const llama_model *m) {
    par_recompute_mode worst = PAR_RECOMPUTE_NONE;
    int64_t l;
    for (l = 0; l < m->local.layers; l++)
        if (llama_layer_mode(m, l) > worst) worst = llama_layer_mode(m, l);
    return worst;
}

/* A layer's whole set while it runs: the tensors it keeps from its slot,
   the others from the recompute area. */
LLAMA_FN void llama_block_bind(const llama_block_acts *kept, const llama_block_acts *work, llama_block_acts *out) {
#define LLAMA_BIND(f) out->f = kept->f ? kept->f : work->f
    LLAMA_BIND(x_in), LLAMA_BIND(rstd1), LLAMA_BIND(h1), LLAMA_BIND(q), LLAMA_BIND(k), LLAMA_BIND(v), LLAMA_BIND(o);
    LLAMA_BIND(lse), LLAMA_BIND(cp_saved), LLAMA_BIND(x_mid), LLAMA_BIND(rstd2), LLAMA_BIND(h2), LLAMA_BIND(g);
    LLAMA_BIND(u), LLAMA_BIND(m), LLAMA_BIND(dy_o), LLAMA_BIND(dy_down);
#undef LLAMA_BIND
    out->mode = PAR_RECOMPUTE_NONE; /* complete now */
}

/* The activation slot of a micro-batch of n rows (batch samples): every block's
   saved tensors, then (head != 0) the head's: a pipeline stage without the
   head keeps none (its pointers NULL). blocks[] must hold m->local.layers
   entries (unused when base is NULL). Returns the bytes it spans. */
LLAMA_FN int64_t llama_acts_carve(const llama_model *m, int64_t n, int64_t batch, int head, void *base, llama_acts *a) {
    const llama_dims *d = &m->local;
    const int64_t rows = par_tp_rows(m->tp, n);
    llama_carver c = {(char *)base, 0, m->esize};
    llama_block_acts dummy;
    llama_acts count_only; /* counting: the same list, written nowhere that matters */
    int64_t l;
    (void)batch; /* n = batch x seq rows say it all */
    if (!base) a = &count_only;
    for (l = 0; l < d->layers; l++) llama_block_carve(m, n, llama_layer_mode(m, l), 0, &c, base ? &a->blocks[l] : &dummy);
    a->x_final = a->hf = a->logits = NULL, a->rstdf = a->losses = NULL;
    if (head) {
        a->x_final = llama_carve(&c, rows * d->dim), a->rstdf = llama_carve_f32(&c, rows);
        a->hf = llama_carve(&c, rows * d->dim), a->logits = llama_carve(&c, n * d->vocab);
        a->losses = llama_carve_f32(&c, n);
    }
    return (c.used + 3) / 4 * 4;
}

/* The backward scratch for n rows. Returns the bytes it spans. */
LLAMA_FN int64_t llama_scratch_carve(const llama_model *m, int64_t n, void *base, llama_scratch *s) {
    const llama_dims *d = &m->local;
    const int64_t qd = d->heads * d->head_dim, kvd = d->kv_heads * d->head_dim;
    llama_carver c = {(char *)base, 0, m->esize};
    llama_scratch dummy;
    if (!base) s = &dummy;
    s->dx = llama_carve(&c, n * d->dim), s->dh = llama_carve(&c, n * d->dim), s->dattn = llama_carve(&c, n * qd);
    s->dq = llama_carve(&c, n * qd), s->dk = llama_carve(&c, n * kvd), s->dv = llama_carve(&c, n * kvd);
    s->dg = llama_carve(&c, n * d->ffn), s->du = llama_carve(&c, n * d->ffn), s->dm = llama_carve(&c, n * d->ffn);
    s->dl = llama_carve(&c, m->tp_degree > 1 ? n * d->dim : 0), s->gath = llama_carve(&c, m->sp ? n * d->dim : 0);
    s->ones = llama_carve(&c, d->qkv_bias ? n : 0);
    llama_block_carve(m, n, llama_max_mode(m), 1, &c, &s->work); /* nothing when every layer keeps everything */
    s->work_out = llama_carve_if(&c, llama_max_mode(m) == PAR_RECOMPUTE_FULL, par_tp_rows(m->tp, n) * d->dim);
    /* the cross-entropy's pieces live in dl, unless a row of it is shorter than 3 floats */
    s->xent = d->dim * m->esize >= 12 ? (float *)s->dl : llama_carve_f32(&c, m->tp_degree > 1 ? 3 * n : 0);
    return (c.used + 3) / 4 * 4;
}

/* Fill what a carved scratch of n rows must hold before the first layer
   runs (the ones column of the biases); nothing without qkv_bias. */
LLAMA_FN par_status llama_scratch_init(const llama_model *m, int64_t n, llama_scratch *s) {
    const par_compute_table *ct = m->ct;
    float *host;
    int64_t i;
    par_status st;
    if (!m->local.qkv_bias) return PAR_OK;
    if (!s->ones || n < 1) return par_set_error(PAR_EINVAL, "llama_scratch_init: no ones column for %lld rows", (long long)n);
    if (!(host = (float *)malloc((size_t)n * 2 * sizeof(float)))) return par_set_error(PAR_ENOMEM, "out of host memory");
    for (i = 0; i < n; i++) host[i] = 1.0f;
    st = par_dtype_convert(n, PAR_F32, host, m->dtype, host + n); /* 1 is exact in every type */
    if (st == PAR_OK) st = ct->memcpy(ct->user, s->ones, host + n, (size_t)(n * m->esize), PAR_COPY_HOST_TO_DEVICE);
    if (st == PAR_OK) st = ct->synchronize(ct->user); /* host is freed next: a device table may copy it later */
    free(host);
    return st;
}

/* ---- helpers --------------------------------------------------------------- */

/* A GEMM of the model's activations: A and B in its dtype, C too
   (grad_c: C is an f32 weight gradient, accumulated into). */
LLAMA_FN par_gemm_desc llama_gemm_desc(const llama_model *m, int grad_c) {
    par_gemm_desc d;
    memset(&d, 0, sizeof d);
    d.alpha = 1.0f, d.a_type = m->dtype, d.c_type = grad_c ? PAR_F32 : m->dtype;
    return d;
}

/* y[n,out] = x[n,in] W^T. */
LLAMA_FN par_status llama_linear_fwd(const llama_model *m, const void *x, const void *w, void *y, int64_t n, int64_t in,
                                     int64_t out) {
    par_gemm_desc d = llama_gemm_desc(m, 0);
    d.transb = 1, d.m = n, d.n = out, d.k = in;
    return m->ct->gemm(m->ct->user, &d, x, w, y);
}

/* dW[out,in] += dy[n,out]^T x[n,in] (dW f32). */
LLAMA_FN par_status llama_linear_bwd_weight(const llama_model *m, const void *x, const void *dy, void *dw, int64_t n,
                                            int64_t in, int64_t out) {
    par_gemm_desc e = llama_gemm_desc(m, 1);
    e.transa = 1, e.m = out, e.n = in, e.k = n, e.beta = 1.0f;
    return m->ct->gemm(m->ct->user, &e, dy, x, dw);
}

/* dx[n,in] (+)= dy[n,out] W; then dW += dy^T x, or, with keep_dy, dy is kept
   there for a later llama_linear_bwd_weight (a split backward). */
LLAMA_FN par_status llama_linear_bwd(const llama_model *m, const void *x, const void *w, const void *dy, void *dx,
                                     void *dw, int64_t n, int64_t in, int64_t out, int accumulate_dx, void *keep_dy) {
    const par_compute_table *ct = m->ct;
    par_gemm_desc d = llama_gemm_desc(m, 0);
    d.m = n, d.n = in, d.k = out, d.beta = accumulate_dx ? 1.0f : 0.0f;
    LLAMA_CHECK(ct->gemm(ct->user, &d, dy, w, dx));
    if (!keep_dy) return llama_linear_bwd_weight(m, x, dy, dw, n, in, out);
    if (keep_dy == dy) return PAR_OK;
    return ct->memcpy(ct->user, keep_dy, dy, (size_t)(n * out * m->esize), PAR_COPY_DEVICE_TO_DEVICE);
}

/* y[n,out] += 1 b^T: the bias on every row (a rank-1 GEMM update; ones [n]). */
LLAMA_FN par_status llama_bias_fwd(const llama_model *m, const void *ones, const void *b, void *y, int64_t n,
                                   int64_t out) {
    par_gemm_desc d = llama_gemm_desc(m, 0);
    d.m = n, d.n = out, d.k = 1, d.beta = 1.0f;
    return m->ct->gemm(m->ct->user, &d, ones, b, y);
}

/* db[out] += dy[n,out]^T 1: the column sums of dy (db f32). */
LLAMA_FN par_status llama_bias_bwd(const llama_model *m, const void *ones, const void *dy, void *db, int64_t n,
                                   int64_t out) {
    par_gemm_desc e = llama_gemm_desc(m, 1);
    e.transa = 1, e.m = out, e.n = 1, e.k = n, e.beta = 1.0f;
    return m->ct->gemm(m->ct->user, &e, dy, ones, db);
}

LLAMA_FN par_attn_desc llama_attn_desc(const llama_model *m, int64_t batch, int64_t seq) {
    const llama_dims *d = &m->local;
    par_attn_desc a = {0};
    a.batch = (int)batch, a.q_heads = (int)d->heads, a.kv_heads = (int)d->kv_heads, a.head_dim = (int)d->head_dim;
    a.q_len = a.k_len = seq, a.causal = 1, a.dtype = m->dtype;
    return a;
}

/* out = residual + the sum over the tp ranks of the row-parallel output p
   [n, C], on this rank's rows. */
LLAMA_FN par_status llama_residual_add(const llama_model *m, void *p, void *work, const void *residual, void *out,
                                       int64_t n, int64_t C) {
    const par_compute_table *ct = m->ct;
    const int64_t rows = par_tp_rows(m->tp, n);
    void *sum;
    LLAMA_CHECK(par_tp_reduce_rows(m->tp, n, C, p, work, &sum));
    LLAMA_CHECK(ct->memcpy(ct->user, out, residual, (size_t)(rows * C * m->esize), PAR_COPY_DEVICE_TO_DEVICE));
    return ct->axpy(ct->user, m->dtype, rows * C, 1.0f, sum, out);
}

/* The gradient dh [n, C] of a norm output feeding column-parallel linears is
   partial over the tp ranks: sum it onto this rank's rows, run the norm's
   backward there (dw accumulates) and add the result into the residual
   gradient dx. */
LLAMA_FN par_status llama_norm_bwd(const llama_model *m, const void *x, const void *w, const float *rstd, void *dh,
                                   void *work, void *dw, void *dx, int64_t n, int64_t C) {
    const par_compute_table *ct = m->ct;
    const int64_t rows = par_tp_rows(m->tp, n);
    void *g;
    LLAMA_CHECK(par_tp_reduce_rows(m->tp, n, C, dh, work, &g));
    LLAMA_CHECK(ct->rmsnorm_bwd(ct->user, m->dtype, rows, C, x, w, rstd, g, g, (float *)dw));
    return ct->axpy(ct->user, m->dtype, rows * C, 1.0f, g, dx);
}

/* ---- forward ------------------------------------------------------------------ */

/* One decoder block: a->x_in holds the input (this rank's rows); the output
   goes to `out`; s holds temporaries (and what the layer does not keep). */
LLAMA_FN par_status llama_block_fwd(const llama_model *m, const llama_block *w, llama_block_acts *a, const int64_t *pos,
                                    int64_t batch, int64_t seq, void *out, llama_scratch *s) {
    const par_compute_table *ct = m->ct;
    const llama_dims *d = &m->local;
    const int64_t n = batch * seq, rows = par_tp_rows(m->tp, n), C = d->dim;
    const int64_t qd = d->heads * d->head_dim, kvd = d->kv_heads * d->head_dim;
    const par_attn_desc ad = llama_attn_desc(m, batch, seq);
    void *u = ct->user;
    const void *h;
    llama_block_acts whole;
    if (a->mode != PAR_RECOMPUTE_NONE) llama_block_bind(a, &s->work, &whole), a = &whole;
    LLAMA_CHECK(ct->rmsnorm_fwd(u, m->dtype, rows, C, a->x_in, w->ln1, d->eps, a->h1, a->rstd1));
    LLAMA_CHECK(par_tp_gather_rows(m->tp, n, C, a->h1, s->gath, &h));
    LLAMA_CHECK(llama_linear_fwd(m, h, w->wq, a->q, n, C, qd));
    LLAMA_CHECK(llama_linear_fwd(m, h, w->wk, a->k, n, C, kvd));
    LLAMA_CHECK(llama_linear_fwd(m, h, w->wv, a->v, n, C, kvd));
    if (d->qkv_bias) { /* before RoPE, as Hugging Face Qwen2 (the bias is part of the projection) */
        LLAMA_CHECK(llama_bias_fwd(m, s->ones, w->bq, a->q, n, qd));
        LLAMA_CHECK(llama_bias_fwd(m, s->ones, w->bk, a->k, n, kvd));
        LLAMA_CHECK(llama_bias_fwd(m, s->ones, w->bv, a->v, n, kvd));
    }
    LLAMA_CHECK(ct->rope_fwd(u, m->dtype, n, d->heads, d->head_dim, pos, d->theta, a->q, a->q));
    LLAMA_CHECK(ct->rope_fwd(u, m->dtype, n, d->kv_heads, d->head_dim, pos, d->theta, a->k, a->k));
    if (m->cp) LLAMA_CHECK(par_cp_attention_fwd(m->cp, a->q, a->k, a->v, a->o, a->lse, a->cp_saved));
    else LLAMA_CHECK(ct->attention_fwd(u, &ad, a->q, a->k, a->v, a->o, a->lse));
    LLAMA_CHECK(llama_linear_fwd(m, a->o, w->wo, s->dh, n, qd, C));
    LLAMA_CHECK(llama_residual_add(m, s->dh, s->dl, a->x_in, a->x_mid, n, C));
    LLAMA_CHECK(ct->rmsnorm_fwd(u, m->dtype, rows, C, a->x_mid, w->ln2, d->eps, a->h2, a->rstd2));
    LLAMA_CHECK(par_tp_gather_rows(m->tp, n, C, a->h2, s->gath, &h));
    LLAMA_CHECK(llama_linear_fwd(m, h, w->wg, a->g, n, C, d->ffn));
    LLAMA_CHECK(llama_linear_fwd(m, h, w->wu, a->u, n, C, d->ffn));
    LLAMA_CHECK(ct->swiglu_fwd(u, m->dtype, n * d->ffn, a->g, a->u, a->m));
    LLAMA_CHECK(llama_linear_fwd(m, a->m, w->wd, s->dh, n, d->ffn, C));
    return llama_residual_add(m, s->dh, s->dl, a->x_mid, out, n, C);
}

/* Final norm and lm_head: logits [n, this rank's vocabulary shard] from x_final. */
LLAMA_FN par_status llama_head_fwd(const llama_model *m, const void *norm_w, const void *lm_head, llama_acts *a,
                                   int64_t n, llama_scratch *s) {
    const par_compute_table *ct = m->ct;
    const llama_dims *d = &m->local;
    const void *h;
    LLAMA_CHECK(ct->rmsnorm_fwd(ct->user, m->dtype, par_tp_rows(m->tp, n), d->dim, a->x_final, norm_w, d->eps, a->hf, a->rstdf));
    LLAMA_CHECK(par_tp_gather_rows(m->tp, n, d->dim, a->hf, s->gath, &h));
    return llama_linear_fwd(m, h, lm_head, a->logits, n, d->dim, d->vocab);
}

/* ---- backward ----------------------------------------------------------------- */

/* Before a recomputed layer's backward: its whole set in *whole, what it did
   not keep computed again from what it did. Full runs the block's forward
   again (its collectives too, on every rank of the tp and cp groups alike);
   selective only the norms (h1, h2 from x_in, x_mid) and SwiGLU (m from g,
   u) it dropped. `weight_half`: for the weight-gradient half of a split
   backward, which needs only the norms' outputs (m and the rest are kept
   for it). The same kernels on the same inputs: the same bits as when the
   forward first ran. */
LLAMA_FN par_status llama_block_recompute(const llama_model *m, const llama_block *w, const llama_block_acts *a,
                                          const int64_t *pos, int64_t batch, int64_t seq, llama_scratch *s,
                                          int weight_half, llama_block_acts *whole) {
    const par_compute_table *ct = m->ct;
    const llama_dims *d = &m->local;
    const int64_t n = batch * seq, rows = par_tp_rows(m->tp, n);
    llama_block_bind(a, &s->work, whole);
    if (a->mode == PAR_RECOMPUTE_FULL && !weight_half)
        return llama_block_fwd(m, w, whole, pos, batch, seq, s->work_out, s);
    if (!a->h1) LLAMA_CHECK(ct->rmsnorm_fwd(ct->user, m->dtype, rows, d->dim, whole->x_in, w->ln1, d->eps, whole->h1, NULL));
    if (!a->h2) LLAMA_CHECK(ct->rmsnorm_fwd(ct->user, m->dtype, rows, d->dim, whole->x_mid, w->ln2, d->eps, whole->h2, NULL));
    if (!a->m && !weight_half) LLAMA_CHECK(ct->swiglu_fwd(ct->user, m->dtype, n * d->ffn, whole->g, whole->u, whole->m));
    return PAR_OK;
}

/* dx holds dL/d(block output) on entry and dL/d(block input) on return (this
   rank's rows). Weight gradients accumulate into g, or (defer_w, a split
   backward: the model's split_backward) wait in a for llama_block_bwd_weight;
   the norms' weight gradients, small reductions, are always done here. */
LLAMA_FN par_status llama_block_bwd_part(const llama_model *m, const llama_block *w, const llama_block *g,
                                         llama_block_acts *a, const int64_t *pos, int64_t batch, int64_t seq,
                                         llama_scratch *s, int defer_w) {
    const par_compute_table *ct = m->ct;
    const llama_dims *d = &m->local;
    const int64_t n = batch * seq, C = d->dim, qd = d->heads * d->head_dim, kvd = d->kv_heads * d->head_dim;
    const par_attn_desc ad = llama_attn_desc(m, batch, seq);
    void *u = ct->user;
    const void *dy, *h = NULL;
    llama_block_acts whole;
    if (defer_w && !m->split_backward)
        return par_set_error(PAR_EINVAL, "llama: a split backward needs the model's split_backward set before the "
                                         "activations are carved");
    if (a->mode != PAR_RECOMPUTE_NONE) {
        LLAMA_CHECK(llama_block_recompute(m, w, a, pos, batch, seq, s, 0, &whole));
        a = &whole;
    }
    /* MLP: out = x_mid + down(silu(gate h2) * up h2) */
    LLAMA_CHECK(par_tp_gather_rows(m->tp, n, C, s->dx, s->dh, &dy));
    LLAMA_CHECK(llama_linear_bwd(m, a->m, w->wd, dy, s->dm, g->wd, n, d->ffn, C, 0, defer_w ? a->dy_down : NULL));
    LLAMA_CHECK(ct->swiglu_bwd(u, m->dtype, n * d->ffn, a->g, a->u, s->dm, s->dg, s->du));
    if (!defer_w) LLAMA_CHECK(par_tp_gather_rows(m->tp, n, C, a->h2, s->gath, &h)); /* gathered again, not kept */
    LLAMA_CHECK(llama_linear_bwd(m, h, w->wg, s->dg, s->dh, g->wg, n, C, d->ffn, 0, defer_w ? a->g : NULL));
    LLAMA_CHECK(llama_linear_bwd(m, h, w->wu, s->du, s->dh, g->wu, n, C, d->ffn, 1, defer_w ? a->u : NULL));
    LLAMA_CHECK(llama_norm_bwd(m, a->x_mid, w->ln2, a->rstd2, s->dh, s->dl, g->ln2, s->dx, n, C));
    /* attention: x_mid = x_in + o_proj(attn(rope(q h1), rope(k h1), v h1)) */
    LLAMA_CHECK(par_tp_gather_rows(m->tp, n, C, s->dx, s->dh, &dy));
    LLAMA_CHECK(llama_linear_bwd(m, a->o, w->wo, dy, s->dattn, g->wo, n, qd, C, 0, defer_w ? a->dy_o : NULL));
    if (m->cp)
        LLAMA_CHECK(par_cp_attention_bwd(m->cp, a->q, a->k, a->v, a->o, a->lse, a->cp_saved, s->dattn, s->dq, s->dk, s->dv));
    else LLAMA_CHECK(ct->attention_bwd(u, &ad, a->q, a->k, a->v, a->o, a->lse, s->dattn, s->dq, s->dk, s->dv, 0));
    LLAMA_CHECK(ct->rope_bwd(u, m->dtype, n, d->heads, d->head_dim, pos, d->theta, s->dq, s->dq));
    LLAMA_CHECK(ct->rope_bwd(u, m->dtype, n, d->kv_heads, d->head_dim, pos, d->theta, s->dk, s->dk));
    if (d->qkv_bias) { /* small reductions: done here even in a split backward, as the norms' */
        LLAMA_CHECK(llama_bias_bwd(m, s->ones, s->dq, g->bq, n, qd));
        LLAMA_CHECK(llama_bias_bwd(m, s->ones, s->dk, g->bk, n, kvd));
        LLAMA_CHECK(llama_bias_bwd(m, s->ones, s->dv, g->bv, n, kvd));
    }
    if (!defer_w) LLAMA_CHECK(par_tp_gather_rows(m->tp, n, C, a->h1, s->gath, &h));
    LLAMA_CHECK(llama_linear_bwd(m, h, w->wq, s->dq, s->dh, g->wq, n, C, qd, 0, defer_w ? a->q : NULL));
    LLAMA_CHECK(llama_linear_bwd(m, h, w->wk, s->dk, s->dh, g->wk, n, C, kvd, 1, defer_w ? a->k : NULL));
    LLAMA_CHECK(llama_linear_bwd(m, h, w->wv, s->dv, s->dh, g->wv, n, C, kvd, 1, defer_w ? a->v : NULL));
    return llama_norm_bwd(m, a->x_in, w->ln1, a->rstd1, s->dh, s->dl, g->ln1, s->dx, n, C);
}

/* The whole backward of a block. */
LLAMA_FN par_status llama_block_bwd(const llama_model *m, const llama_block *w, const llama_block *g,
                                    llama_block_acts *a, const int64_t *pos, int64_t batch, int64_t seq,
                                    llama_scratch *s) {
    return llama_block_bwd_part(m, w, g, a, pos, batch, seq, s, 0);
}

/* The weight-gradient half of a split backward: the linears' dW += dy^T x
   from what llama_block_bwd_part(defer_w) kept (the inputs gathered again
   under sequence parallelism; the norms' outputs computed again from w's
   norm weights when the layer recomputes). */
LLAMA_FN par_status llama_block_bwd_weight(const llama_model *m, const llama_block *w, const llama_block *g,
                                           const llama_block_acts *a, const int64_t *pos, int64_t batch, int64_t seq,
                                           llama_scratch *s) {
    const llama_dims *d = &m->local;
    const int64_t n = batch * seq, C = d->dim, qd = d->heads * d->head_dim, kvd = d->kv_heads * d->head_dim;
    const void *h;
    llama_block_acts whole;
    if (a->mode != PAR_RECOMPUTE_NONE) {
        LLAMA_CHECK(llama_block_recompute(m, w, a, pos, batch, seq, s, 1, &whole));
        a = &whole;
    }
    LLAMA_CHECK(llama_linear_bwd_weight(m, a->m, a->dy_down, g->wd, n, d->ffn, C));
    LLAMA_CHECK(par_tp_gather_rows(m->tp, n, C, a->h2, s->gath, &h));
    LLAMA_CHECK(llama_linear_bwd_weight(m, h, a->g, g->wg, n, C, d->ffn));
    LLAMA_CHECK(llama_linear_bwd_weight(m, h, a->u, g->wu, n, C, d->ffn));
    LLAMA_CHECK(llama_linear_bwd_weight(m, a->o, a->dy_o, g->wo, n, qd, C));
    LLAMA_CHECK(par_tp_gather_rows(m->tp, n, C, a->h1, s->gath, &h));
    LLAMA_CHECK(llama_linear_bwd_weight(m, h, a->q, g->wq, n, C, qd));
    LLAMA_CHECK(llama_linear_bwd_weight(m, h, a->k, g->wk, n, C, kvd));
    return llama_linear_bwd_weight(m, h, a->v, g->wv, n, C, kvd);
}

/* Loss and the head's backward: per-row losses into a->losses (the
   vocabulary-parallel cross-entropy: the full logits never exist on one
   rank), dlogits scaled by `scale` in place of the logits, then s->dx =
   dL/d x_final on this rank's rows. With defer_w lm_head's weight gradient
   waits (dlogits stay in a->logits) for llama_head_bwd_weight. */
LLAMA_FN par_status llama_head_bwd_part(const llama_model *m, const void *norm_w, const void *lm_head, float *g_norm,
                                        float *g_lm_head, llama_acts *a, int64_t n, float scale, llama_scratch *s,
                                        int defer_w) {
    const par_compute_table *ct = m->ct;
    const llama_dims *d = &m->local;
    const int64_t C = d->dim, rows = par_tp_rows(m->tp, n);
    const void *h = NULL;
    LLAMA_CHECK(par_tp_cross_entropy(m->tp, &m->head, n, a->logits, a->targets, a->losses, scale, s->xent));
    if (!defer_w) LLAMA_CHECK(par_tp_gather_rows(m->tp, n, C, a->hf, s->gath, &h));
    LLAMA_CHECK(llama_linear_bwd(m, h, lm_head, a->logits, s->dh, g_lm_head, n, C, d->vocab, 0,
                                 defer_w ? a->logits : NULL));
    LLAMA_CHECK(ct->memset(ct->user, s->dx, 0, (size_t)(rows * C * m->esize)));
    return llama_norm_bwd(m, a->x_final, norm_w, a->rstdf, s->dh, s->dl, g_norm, s->dx, n, C);
}

LLAMA_FN par_status llama_head_bwd(const llama_model *m, const void *norm_w, const void *lm_head, float *g_norm,
                                   float *g_lm_head, llama_acts *a, int64_t n, float scale, llama_scratch *s) {
    return llama_head_bwd_part(m, norm_w, lm_head, g_norm, g_lm_head, a, n, scale, s, 0);
}

/* lm_head's weight gradient from the dlogits llama_head_bwd_part(defer_w) left. */
LLAMA_FN par_status llama_head_bwd_weight(const llama_model *m, float *g_lm_head, const llama_acts *a, int64_t n,
                                          llama_scratch *s) {
    const void *h;
    LLAMA_CHECK(par_tp_gather_rows(m->tp, n, m->local.dim, a->hf, s->gath, &h));
    return llama_linear_bwd_weight(m, h, a->logits, g_lm_head, n, m->local.dim, m->local.vocab);
}

#endif /* LLAMA_MODEL_H */
