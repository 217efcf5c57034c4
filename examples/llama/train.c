/* examples/llama/train.c - a Llama trainer on parallel.h (build/train).

   Reads like llm.c's train_gpt2.c, top to bottom:
     1. data: byte tokens, deterministic sample order, data-parallel sharding
     2. parameters: the table of Hugging Face tensors, gradient buckets, layouts
     3. memory plan: every buffer sized from the dims before anything runs
     4. init: counter-based normal(0, std) keyed by (seed, name, element)
     5. checkpoints: safetensors in/out (weights + AdamW state)
     6. the training step: micro-batches, bucketed gradient reduction
        overlapped with backward, ZeRO-1/2, clipping, AdamW
     7. reporting: start-up summary, per-step lines, JSON metrics
     8. sampling, the rank body, main (input checks before any rank starts)

   --trace FILE.json records every rank's timeline (par_trace, Chrome trace
   JSON for Perfetto): compute spans per layer and micro-batch, each gradient
   bucket's collective from issue to the end of its wait, the optimizer, the
   batch loading and the checkpoint save; with tracing off every hook is one
   NULL test.

   One device is the 1x1 mesh; the mesh is "dp=D,tp=T". Every parameter has a
   layout derived from its operator's strategy (layouts.h): replicated over dp,
   split over tp for the Megatron column/row-parallel linears and the
   vocabulary-parallel head; the ZeRO shards are the layouts of the flat
   buckets split over dp; groups come from layouts, and the layers' tensor-
   parallel collectives are planned redistributions run by the executor.
   Exit status: 0 done, 2 bad input (nothing written), 1 failure while running. */
#define _POSIX_C_SOURCE 200809L
#define PARALLEL_IMPLEMENTATION
#include "parallel.h"
#ifdef LLAMA_WITH_CUDA /* build/train_cuda: the CUDA compute table and NCCL (--backend nccl) */
#define PARALLEL_CUDA_DECLARATIONS_ONLY
#include "parallel_cuda.cu"
#endif
#define LLAMA_CONFIG_IMPLEMENTATION
#include "examples/llama/config.h"
#include "examples/llama/model.h"
#include "examples/llama/layouts.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

enum { EXIT_BAD_INPUT = 2, EXIT_RUN_FAILED = 1 };

/* ============================================================================
   1. data
   ========================================================================== */

typedef struct llama_data {
    unsigned char *bytes;
    int64_t len, num_samples; /* sample i: inputs [i*T, i*T+T), targets shifted by one */
    int64_t *order;           /* --shuffle: a permutation of the samples; NULL = identity */
} llama_data;

static uint64_t splitmix64(uint64_t *state) {
    uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Global sample used by slot j of step s: s*B + j modulo the sample count
   (restarting from the beginning when the data runs short). */
static int64_t data_sample(const llama_data *d, int64_t step, int64_t global_batch, int64_t j) {
    int64_t i = (step * global_batch + j) % d->num_samples;
    return d->order ? d->order[i] : i;
}

/* Fisher-Yates with the seed: the same permutation on every rank. */
static int data_shuffle(llama_data *d, uint64_t seed) {
    int64_t i;
    uint64_t st = seed ^ 0x53485546464C45ull;
    d->order = (int64_t *)malloc((size_t)d->num_samples * sizeof(int64_t));
    if (!d->order) return -1;
    for (i = 0; i < d->num_samples; i++) d->order[i] = i;
    for (i = d->num_samples - 1; i > 0; i--) {
        int64_t j = (int64_t)(splitmix64(&st) % (uint64_t)(i + 1)), t = d->order[i];
        d->order[i] = d->order[j], d->order[j] = t;
    }
    return 0;
}

static int data_load(const char *path, int64_t seq, llama_data *d, char *err, size_t errsize) {
    FILE *f = fopen(path, "rb");
    long n;
    memset(d, 0, sizeof *d);
    if (!f) return snprintf(err, errsize, "--data %s: cannot open: %s", path, strerror(errno)), -1;
    if (fseek(f, 0, SEEK_END) != 0 || (n = ftell(f)) < 0 || fseek(f, 0, SEEK_SET) != 0) {
        snprintf(err, errsize, "--data %s: cannot read its size (not a regular file?)", path);
        return fclose(f), -1;
    }
    if (n < seq + 1) {
        snprintf(err, errsize, "--data %s has %ld bytes; model.model_config.seq_length = %lld needs at least %lld",
                 path, n, (long long)seq, (long long)seq + 1);
        return fclose(f), -1;
    }
    d->bytes = (unsigned char *)malloc((size_t)n);
    if (!d->bytes || fread(d->bytes, 1, (size_t)n, f) != (size_t)n) {
        snprintf(err, errsize, "--data %s: read failed", path);
        free(d->bytes), d->bytes = NULL;
        return fclose(f), -1;
    }
    fclose(f);
    d->len = n;
    d->num_samples = (n - 1) / seq;
    return 0;
}

/* ============================================================================
   2. parameters
   ========================================================================== */

typedef struct llama_bucket {
    int64_t start, count, padded; /* flat range (elements); padded to a multiple of dp */
    par_layout shard;             /* [padded] split over dp: the ZeRO shard of this bucket */
    int64_t chunk, chunk_begin;   /* this rank's shard: elements and offset inside the bucket */
    int64_t shard_offset;         /* where this rank's chunk lives in the shard buffers */
    int first_tensor, num_tensors;
    par_request *req;             /* pending gradient reduction */
    const char *req_op;           /* --trace: its collective ("all_reduce", ...) */
    double req_issued_us;         /* --trace: when it was issued */
} llama_bucket;

typedef struct llama_params {
    llama_dims dims;      /* the model's */
    llama_dims local;     /* what this rank holds (dims_local) */
    int tp;               /* tensor-parallel degree */
    int sp;               /* sequence parallel (with tp > 1) */
    int num_tensors, num_buckets;
    llama_tensor *tensors;
    llama_bucket *buckets;
    int64_t total;        /* padded flat length */
    int64_t shard_total;  /* sum of this rank's chunks */
    int64_t max_padded, max_chunk;
    int64_t num_params;   /* unpadded, this rank's slices */
    int64_t global_params; /* of the whole model */
} llama_params;

/* Global dimensions of the model. */
static llama_dims dims_from_config(const llama_config *c) {
    llama_dims d;
    memset(&d, 0, sizeof d);
    d.vocab = c->vocab_size, d.dim = c->hidden_size, d.layers = c->num_layers, d.heads = c->num_heads;
    d.kv_heads = c->n_kv_heads ? c->n_kv_heads : c->num_heads, d.head_dim = c->hidden_size / c->num_heads;
    d.ffn = c->intermediate_size, d.seq = c->seq_length, d.eps = c->rms_norm_eps, d.theta = c->theta;
    d.emb_rows = d.vocab;
    return d;
}

/* The dimensions one rank holds, read off the layouts of its tensors: the
   q_proj slice gives its heads, k_proj its kv heads, gate_proj its ffn
   columns, lm_head its vocabulary shard, the embedding its rows. */
static llama_dims dims_local(const llama_params *p) {
    llama_dims d = p->dims;
    const llama_tensor *b0 = &p->tensors[LLAMA_BLOCK_FIRST], *emb = &p->tensors[LLAMA_T_EMBED];
    const llama_tensor *head = &p->tensors[p->num_tensors - 1];
    if (d.layers > 0) {
        d.heads = b0[1].local[0] / d.head_dim, d.kv_heads = b0[2].local[0] / d.head_dim;
        d.ffn = b0[6].local[0];
    }
    d.vocab = head->local[0], d.vocab_start = head->start[0];
    d.emb_rows = emb->local[0], d.emb_start = emb->start[0], d.emb_split = emb->tp_split;
    return d;
}

static void tensor_set(llama_tensor *t, const char *name, int64_t rows, int64_t cols, llama_tensor_kind kind) {
    snprintf(t->name, sizeof t->name, "%s", name);
    t->ndim = cols ? 2 : 1;
    t->shape[0] = rows, t->shape[1] = cols;
    t->numel = cols ? rows * cols : rows;
    t->kind = (int)kind;
}

/* Place a tensor on the mesh from its operator's strategy (layouts.h): its
   slice, where the slice starts, and how its gradient is reduced. */
static int tensor_place(llama_tensor *t, const llama_mesh_info *mi, int rank, char *err, size_t errsize) {
    llama_tensor_place pl;
    int64_t off[PARALLEL_MAX_DIMS] = {0}, loc[PARALLEL_MAX_DIMS] = {0};
    const int tp_dim = par_mesh_dev_dim(&mi->mesh, "tp");
    const uint32_t tp_bit = tp_dim >= 0 && mi->tp > 1 ? 1u << tp_dim : 0u;
    if (llama_place_tensor(mi, (llama_tensor_kind)t->kind, t->shape, &pl) != PAR_OK ||
        par_layout_local_offset(&pl.layout, rank, off) != PAR_OK)
        return snprintf(err, errsize, "layout of %s: %s", t->name, par_last_error()), -1;
    t->layout = pl.layout;
    par_layout_local_shape(&pl.layout, loc);
    t->local[0] = loc[0], t->local[1] = t->ndim == 2 ? loc[1] : 0;
    t->start[0] = off[0], t->start[1] = t->ndim == 2 ? off[1] : 0;
    t->numel = par_layout_local_numel(&pl.layout);
    t->tp_split = (par_layout_split_dims(&pl.layout) & tp_bit) != 0;
    t->tp_partial = (pl.partial_mask & tp_bit) != 0;
    return 0;
}

/* Buckets: the embedding, each block, and the final norm + lm_head, i.e. the
   units whose gradients are complete at one moment of backward. */
static int params_build(llama_params *p, const llama_config *cfg, const llama_mesh_info *mi, int rank,
                        char *err, size_t errsize) {
    const llama_dims d = dims_from_config(cfg);
    const int64_t qd = d.heads * d.head_dim, kvd = d.kv_heads * d.head_dim;
    static const char *const block_names[LLAMA_PER_BLOCK] = {
        "input_layernorm.weight", "self_attn.q_proj.weight", "self_attn.k_proj.weight",
        "self_attn.v_proj.weight", "self_attn.o_proj.weight", "post_attention_layernorm.weight",
        "mlp.gate_proj.weight", "mlp.up_proj.weight", "mlp.down_proj.weight"};
    const int64_t shapes[LLAMA_PER_BLOCK][2] = {{d.dim, 0}, {qd, d.dim},    {kvd, d.dim},  {kvd, d.dim}, {d.dim, qd},
                                                {d.dim, 0}, {d.ffn, d.dim}, {d.ffn, d.dim}, {d.dim, d.ffn}};
    static const llama_tensor_kind block_kinds[LLAMA_PER_BLOCK] = {
        LLAMA_KIND_NORM,   LLAMA_KIND_COLUMN, LLAMA_KIND_COLUMN, LLAMA_KIND_COLUMN, LLAMA_KIND_ROW,
        LLAMA_KIND_NORM,   LLAMA_KIND_COLUMN, LLAMA_KIND_COLUMN, LLAMA_KIND_ROW};
    const par_mesh *mesh = &mi->mesh;
    const int dp_dim = par_mesh_dev_dim(mesh, "dp"), dp = mi->dp;
    int i, b, l, k;
    memset(p, 0, sizeof *p);
    p->dims = d;
    p->num_tensors = 3 + (int)d.layers * LLAMA_PER_BLOCK;
    p->num_buckets = 2 + (int)d.layers;
    p->tensors = (llama_tensor *)calloc((size_t)p->num_tensors, sizeof(llama_tensor));
    p->buckets = (llama_bucket *)calloc((size_t)p->num_buckets, sizeof(llama_bucket));
    if (!p->tensors || !p->buckets) return snprintf(err, errsize, "out of host memory"), -1;
    tensor_set(&p->tensors[LLAMA_T_EMBED], "model.embed_tokens.weight", d.vocab, d.dim, LLAMA_KIND_EMBED);
    p->tensors[LLAMA_T_EMBED].bucket = 0;
    for (l = 0; l < d.layers; l++)
        for (k = 0; k < LLAMA_PER_BLOCK; k++) {
            llama_tensor *t = &p->tensors[LLAMA_BLOCK_FIRST + l * LLAMA_PER_BLOCK + k];
            char name[80];
            snprintf(name, sizeof name, "model.layers.%d.%s", l, block_names[k]);
            tensor_set(t, name, shapes[k][0], shapes[k][1], block_kinds[k]);
            t->bucket = 1 + l;
        }
    tensor_set(&p->tensors[p->num_tensors - 2], "model.norm.weight", d.dim, 0, LLAMA_KIND_NORM);
    tensor_set(&p->tensors[p->num_tensors - 1], "lm_head.weight", d.vocab, d.dim, LLAMA_KIND_COLUMN);
    p->tensors[p->num_tensors - 2].bucket = p->tensors[p->num_tensors - 1].bucket = p->num_buckets - 1;

    /* flat offsets: tensors packed in order, each bucket padded to a multiple of dp */
    for (i = 0, b = -1; i < p->num_tensors; i++) {
        llama_tensor *t = &p->tensors[i];
        p->global_params += t->numel;
        if (tensor_place(t, mi, rank, err, errsize) != 0) return -1;
        if (t->bucket != b) {
            if (b >= 0) p->total += p->buckets[b].padded;
            b = t->bucket;
            p->buckets[b].start = p->total, p->buckets[b].first_tensor = i;
        }
        t->offset = p->buckets[b].start + p->buckets[b].count;
        p->buckets[b].count += t->numel, p->buckets[b].num_tensors++;
        p->buckets[b].padded = (p->buckets[b].count + dp - 1) / dp * dp;
        p->num_params += t->numel;
    }
    p->total += p->buckets[b].padded;
    for (b = 0; b < p->num_buckets; b++) {
        llama_bucket *bk = &p->buckets[b];
        int map[1];
        int64_t off;
        map[0] = dp_dim;
        if (par_layout_init(&bk->shard, mesh, 1, &bk->padded, map, 0) != PAR_OK ||
            par_layout_local_offset(&bk->shard, rank, &off) != PAR_OK)
            return snprintf(err, errsize, "shard layout of bucket %d: %s", b, par_last_error()), -1;
        bk->chunk = par_layout_local_numel(&bk->shard), bk->chunk_begin = off;
        bk->shard_offset = p->shard_total;
        p->shard_total += bk->chunk;
        if (bk->padded > p->max_padded) p->max_padded = bk->padded;
        if (bk->chunk > p->max_chunk) p->max_chunk = bk->chunk;
    }
    p->local = dims_local(p);
    p->tp = mi->tp;
    p->sp = mi->tp > 1 && mi->sp;
    return 0;
}

static void params_free(llama_params *p) {
    free(p->tensors);
    free(p->buckets);
}

/* Bind block l's pointers into `base`, a buffer laid out like bucket 1+l
   starting at that bucket's start (the flat buffer itself, or a ZeRO-2 slot). */
static llama_block block_bind(const llama_params *p, int l, float *base, int64_t base_start) {
    const llama_tensor *t = &p->tensors[LLAMA_BLOCK_FIRST + l * LLAMA_PER_BLOCK];
    llama_block b;
    float **f[LLAMA_PER_BLOCK];
    int k;
    f[0] = &b.ln1, f[1] = &b.wq, f[2] = &b.wk, f[3] = &b.wv, f[4] = &b.wo;
    f[5] = &b.ln2, f[6] = &b.wg, f[7] = &b.wu, f[8] = &b.wd;
    for (k = 0; k < LLAMA_PER_BLOCK; k++) *f[k] = base + (t[k].offset - base_start);
    return b;
}

/* ============================================================================
   3. memory plan
   ========================================================================== */

typedef enum { ZERO_OFF = 0, ZERO_1 = 1, ZERO_2 = 2 } zero_level;

typedef struct mem_plan {
    int64_t bytes[PAR_MEM_CATEGORY_COUNT];
} mem_plan;

typedef struct llama_sizes {
    int64_t batch, seq, n; /* micro-batch samples, tokens per sample, rows */
} llama_sizes;

/* Floats of one activation slot (what a micro-batch keeps for backward), with
   n tokens of which this rank keeps `rows` rows of the residual stream and the
   norm outputs (n/tp under sequence parallel, else n); the heads' and ffn's
   activations are this rank's columns of all n rows. */
static int64_t acts_floats(const llama_dims *d, int64_t n, int64_t rows, int64_t batch) {
    const int64_t qd = d->heads * d->head_dim, kvd = d->kv_heads * d->head_dim;
    const int64_t per_block =
        rows * (4 * d->dim + 2) + n * (2 * qd + 2 * kvd + 3 * d->ffn) + batch * d->heads * d->seq;
    return d->layers * per_block + rows * (2 * d->dim + 1) + n * (d->vocab + 1);
}

/* Backward scratch; tensor parallelism needs one more [n, dim] temporary and
   sequence parallel another (the norm outputs gathered to full rows). */
static int64_t scratch_floats(const llama_dims *d, int64_t n, int tp, int sp) {
    const int64_t qd = d->heads * d->head_dim, kvd = d->kv_heads * d->head_dim;
    return n * (2 * d->dim + 2 * qd + 2 * kvd + 3 * d->ffn + (tp > 1 ? d->dim : 0) + (tp > 1 && sp ? d->dim : 0));
}

static mem_plan plan_memory(const llama_params *p, const llama_sizes *s, zero_level zero, int dp) {
    mem_plan m;
    const int64_t f = (int64_t)sizeof(float);
    memset(&m, 0, sizeof m);
    m.bytes[PAR_MEM_PARAMS] = p->total * f;
    if (zero == ZERO_OFF) {
        m.bytes[PAR_MEM_GRADS] = p->total * f;
        m.bytes[PAR_MEM_OPTIMIZER] = 2 * p->total * f;
    } else {
        /* level 1 keeps full gradients plus the reduced shard; level 2 only
           two bucket slots (double buffering) plus the shard */
        m.bytes[PAR_MEM_GRADS] = (zero == ZERO_1 ? p->total : 2 * p->max_padded) * f + p->shard_total * f;
        m.bytes[PAR_MEM_OPTIMIZER] = 2 * p->shard_total * f;
        if (zero == ZERO_2 && dp > 0) m.bytes[PAR_MEM_COMM] = 2 * p->max_chunk * f;
    }
    m.bytes[PAR_MEM_ACTIVATIONS] = acts_floats(&p->local, s->n, p->sp ? s->n / p->tp : s->n, s->batch) * f +
                                   s->n * (int64_t)(2 * sizeof(int32_t) + sizeof(int64_t));
    m.bytes[PAR_MEM_WORKSPACE] = scratch_floats(&p->local, s->n, p->tp, p->sp) * f;
    /* the executor running the tp redistributions keeps 4 buffers of the largest
       one's local size: full rows of the [tokens, hidden] activations */
    if (p->tp > 1) m.bytes[PAR_MEM_COMM] += 4 * s->n * p->local.dim * f;
    m.bytes[PAR_MEM_COMM] += 8; /* the scalar staged for loss, norm and status collectives */
    return m;
}

/* Side of the square GEMM that measures the machine's peak at start-up: 384,
   or less while its three matrices do not fit in the backward scratch. */
static int64_t gemm_probe_side(const llama_params *p, const llama_sizes *s) {
    const int64_t room = scratch_floats(&p->local, s->n, p->tp, p->sp);
    int64_t n = 384;
    while (n > 16 && 3 * n * n > room) n -= 16;
    return n;
}

/* The scratch the compute table keeps for itself (the CPU table's GEMM packing,
   the CUDA table's attention row sums) for this rank's work, from the table's
   own bound: the model's GEMMs are [rows, in] x [out, in]^T and its two
   backward products (model.h), so m is a row count or a feature count, n a
   feature count and k any of them; plus the peak probe. */
static par_status plan_table_scratch(const par_compute_table *ct, const llama_params *p, const llama_sizes *s,
                                     int64_t *bytes) {
    const llama_dims *d = &p->local;
    const int64_t probe = gemm_probe_side(p, s);
    int64_t feat = d->dim;
    par_scratch_query q;
    size_t b = 0;
    *bytes = 0;
    if (!ct->scratch_bound) return PAR_OK;
    if (d->heads * d->head_dim > feat) feat = d->heads * d->head_dim;
    if (d->kv_heads * d->head_dim > feat) feat = d->kv_heads * d->head_dim;
    if (d->ffn > feat) feat = d->ffn;
    if (d->vocab > feat) feat = d->vocab;
    if (probe > feat) feat = probe;
    q.gemm_m = q.gemm_k = s->n > feat ? s->n : feat;
    q.gemm_n = feat;
    q.attn_rows = s->batch * d->heads * d->seq;
    LLAMA_CHECK(ct->scratch_bound(ct->user, &q, &b));
    *bytes = (int64_t)b;
    return PAR_OK;
}

/* ============================================================================
   the trainer state of one rank
   ========================================================================== */

typedef struct shared_run {
    const llama_config *cfg;
    const llama_options *opt;
    const llama_data *data;
    int world;
    const char *backend; /* "threads", "mpi" or "nccl" */
    int64_t init_step; /* --init-from: the step its optimizer file records (0 without one) */
    int init_has_optimizer;
} shared_run;

typedef struct trainer {
    par_ctx *ctx;
    const par_compute_table *ct;
    const par_comm_table *cm;
    const llama_config *cfg;
    const llama_options *opt;
    const llama_data *data;
    par_mesh mesh;
    int rank, world, dp, dp_index, tp_index;
    par_comm_group *dp_group, *world_group, *tp_group;
    par_layout tokens_layout; /* [global batch, seq] split over dp */
    llama_mesh_info mi;       /* the mesh and degrees the tensors are placed on */
    llama_tp tp;              /* tensor-parallel plumbing for the layers */
    int tp_on;                /* tp degree > 1 */
    double tp_comm_us;        /* --trace: time in the layers' blocking tp collectives */
    par_planner *planner;     /* plans the layers' redistributions (tensor parallel; its cache) */
    par_executor *exec;       /* and runs them */
    par_plan tp_plan;         /* the redistribution being run */
    zero_level zero;
    llama_params p;
    llama_sizes sz;
    int micro_batches;
    mem_plan plan;

    float *params, *grads, *m, *v; /* flat (m, v: full or the shard) */
    float *gshard;                 /* ZeRO: this rank's reduced gradient chunks */
    float *slot[2], *rs_tmp[2];    /* ZeRO-2: bucket gradient slots, reduce-scatter receive buffers */
    llama_acts acts;
    llama_scratch scratch;
    float *acts_base, *scratch_base; /* the two allocations acts and scratch are carved from */
    void *scalar;                    /* 8 bytes of table memory for scalar collectives (device tables) */
    int32_t *host_ids, *host_tgt;
    int64_t *host_pos;
    float *host_losses;

    int64_t step;         /* steps done (from a checkpoint: continues there) */
    double gemm_gflops;   /* the machine's measured GEMM peak, summed over ranks */
    FILE *metrics;
    par_trace *trace;     /* --trace: this rank's timeline; NULL = tracing off */
} trainer;

/* ---- --trace hooks: with t->trace NULL each is a single test ---------------- */

static double trace_now(const trainer *t) { return t->trace ? par_trace_now_us() : 0.0; }

/* A span [t0_us, now] named by the format (only formatted when tracing). The
   status is not checked: the categories are fixed, so the only failure would
   be a programming error, which par_trace_gather_write reports at the end. */
static void trace_span(trainer *t, const char *category, double t0_us, const char *fmt, ...) PAR__PRINTF(4, 5);
static void trace_span(trainer *t, const char *category, double t0_us, const char *fmt, ...) {
    char name[PAR_TRACE_NAME_MAX];
    va_list ap;
    if (!t->trace) return;
    va_start(ap, fmt);
    vsnprintf(name, sizeof name, fmt, ap);
    va_end(ap);
    (void)par_trace_span(t->trace, name, category, t0_us, par_trace_now_us());
}

/* A bucket's collective was just issued (async): remember what and when. */
static void trace_issue(trainer *t, llama_bucket *bk, const char *op) {
    if (!t->trace) return;
    bk->req_op = op;
    bk->req_issued_us = par_trace_now_us();
}

/* ... and its wait returned: one comm span from issue to completion. */
static void trace_complete(trainer *t, const llama_bucket *bk) {
    if (t->trace) trace_span(t, "comm", bk->req_issued_us, "%s bucket %d", bk->req_op, (int)(bk - t->p.buckets));
}

static par_status alloc_floats(trainer *t, int64_t n, par_mem_category cat, float **ptr) {
    void *v = NULL;
    par_status st;
    *ptr = NULL;
    if (n <= 0) return PAR_OK;
    st = t->ct->alloc(t->ct->user, (size_t)n * sizeof(float), cat, &v);
    *ptr = (float *)v;
    return st;
}

static par_status alloc_bytes(trainer *t, int64_t bytes, par_mem_category cat, void **ptr) {
    return t->ct->alloc(t->ct->user, (size_t)bytes, cat, ptr);
}

/* All-reduce (or broadcast from rank 0) one host scalar over `group`. Device
   transports (NCCL) need device memory, so it goes through t->scalar there. */
static par_status scalar_collective(trainer *t, par_comm_group *group, void *value, par_dtype dtype, par_reduce_op op,
                                    int broadcast) {
    const par_compute_table *ct = t->ct;
    const size_t n = par_dtype_size(dtype);
    void *buf = ct->device_memory ? t->scalar : value;
    par_status st;
    if (ct->device_memory) LLAMA_CHECK(ct->memcpy(ct->user, buf, value, n, PAR_COPY_HOST_TO_DEVICE));
    st = broadcast ? t->cm->broadcast(t->cm->user, group, buf, 1, dtype, 0, NULL)
                   : t->cm->all_reduce(t->cm->user, group, buf, buf, 1, dtype, op, NULL);
    if (st == PAR_OK && ct->device_memory) st = ct->memcpy(ct->user, value, buf, n, PAR_COPY_DEVICE_TO_HOST);
    return st;
}

static par_status acts_alloc(trainer *t) {
    const llama_dims *d = &t->p.local;
    const int64_t n = t->sz.n, qd = d->heads * d->head_dim, kvd = d->kv_heads * d->head_dim;
    const int64_t rows = t->p.sp ? n / t->p.tp : n; /* residual-stream rows this rank keeps */
    llama_acts *a = &t->acts;
    llama_scratch *s = &t->scratch;
    float *base, *q;
    int l;
    LLAMA_CHECK(alloc_bytes(t, n * (int64_t)sizeof(int32_t), PAR_MEM_ACTIVATIONS, (void **)&a->ids));
    LLAMA_CHECK(alloc_bytes(t, n * (int64_t)sizeof(int32_t), PAR_MEM_ACTIVATIONS, (void **)&a->targets));
    LLAMA_CHECK(alloc_bytes(t, n * (int64_t)sizeof(int64_t), PAR_MEM_ACTIVATIONS, (void **)&a->pos));
    LLAMA_CHECK(alloc_bytes(t, 8, PAR_MEM_COMM, &t->scalar));
    LLAMA_CHECK(alloc_floats(t, acts_floats(d, n, rows, t->sz.batch), PAR_MEM_ACTIVATIONS, &t->acts_base));
    base = t->acts_base;
    a->blocks = (llama_block_acts *)calloc((size_t)d->layers, sizeof(llama_block_acts));
    if (!a->blocks) return par_set_error(PAR_ENOMEM, "out of host memory");
    q = base;
#define TAKE(ptr, count) ((ptr) = q, q += (count))
    for (l = 0; l < d->layers; l++) {
        llama_block_acts *b = &a->blocks[l];
        TAKE(b->x_in, rows * d->dim), TAKE(b->rstd1, rows), TAKE(b->h1, rows * d->dim), TAKE(b->q, n * qd);
        TAKE(b->k, n * kvd), TAKE(b->v, n * kvd), TAKE(b->o, n * qd), TAKE(b->lse, t->sz.batch * d->heads * d->seq);
        TAKE(b->x_mid, rows * d->dim), TAKE(b->rstd2, rows), TAKE(b->h2, rows * d->dim), TAKE(b->g, n * d->ffn);
        TAKE(b->u, n * d->ffn), TAKE(b->m, n * d->ffn);
    }
    TAKE(a->x_final, rows * d->dim), TAKE(a->rstdf, rows), TAKE(a->hf, rows * d->dim), TAKE(a->logits, n * d->vocab);
    TAKE(a->losses, n);
    LLAMA_CHECK(alloc_floats(t, scratch_floats(d, n, t->p.tp, t->p.sp), PAR_MEM_WORKSPACE, &t->scratch_base));
    q = t->scratch_base;
    TAKE(s->dx, n * d->dim), TAKE(s->dh, n * d->dim), TAKE(s->dattn, n * qd), TAKE(s->dq, n * qd);
    TAKE(s->dk, n * kvd), TAKE(s->dv, n * kvd), TAKE(s->dg, n * d->ffn), TAKE(s->du, n * d->ffn);
    TAKE(s->dm, n * d->ffn);
    if (t->p.tp > 1) TAKE(s->dl, n * d->dim);
    if (t->p.sp) TAKE(s->gath, n * d->dim);
#undef TAKE
    t->host_ids = (int32_t *)malloc((size_t)n * sizeof(int32_t));
    t->host_tgt = (int32_t *)malloc((size_t)n * sizeof(int32_t));
    t->host_pos = (int64_t *)malloc((size_t)n * sizeof(int64_t));
    t->host_losses = (float *)malloc((size_t)n * sizeof(float));
    if (!t->host_ids || !t->host_tgt || !t->host_pos || !t->host_losses) return par_set_error(PAR_ENOMEM, "out of host memory");
    return PAR_OK;
}

static par_status state_alloc(trainer *t) {
    const llama_params *p = &t->p;
    LLAMA_CHECK(alloc_floats(t, p->total, PAR_MEM_PARAMS, &t->params));
    if (t->zero == ZERO_OFF) {
        LLAMA_CHECK(alloc_floats(t, p->total, PAR_MEM_GRADS, &t->grads));
        LLAMA_CHECK(alloc_floats(t, p->total, PAR_MEM_OPTIMIZER, &t->m));
        LLAMA_CHECK(alloc_floats(t, p->total, PAR_MEM_OPTIMIZER, &t->v));
    } else {
        if (t->zero == ZERO_1) LLAMA_CHECK(alloc_floats(t, p->total, PAR_MEM_GRADS, &t->grads));
        else {
            LLAMA_CHECK(alloc_floats(t, p->max_padded, PAR_MEM_GRADS, &t->slot[0]));
            LLAMA_CHECK(alloc_floats(t, p->max_padded, PAR_MEM_GRADS, &t->slot[1]));
            LLAMA_CHECK(alloc_floats(t, p->max_chunk, PAR_MEM_COMM, &t->rs_tmp[0]));
            LLAMA_CHECK(alloc_floats(t, p->max_chunk, PAR_MEM_COMM, &t->rs_tmp[1]));
        }
        LLAMA_CHECK(alloc_floats(t, p->shard_total, PAR_MEM_GRADS, &t->gshard));
        LLAMA_CHECK(alloc_floats(t, p->shard_total, PAR_MEM_OPTIMIZER, &t->m));
        LLAMA_CHECK(alloc_floats(t, p->shard_total, PAR_MEM_OPTIMIZER, &t->v));
    }
    return acts_alloc(t);
}

static void trainer_free(trainer *t) {
    const par_compute_table *ct = t->ct;
    void *ptrs[] = {t->params, t->grads, t->m, t->v, t->gshard, t->slot[0], t->slot[1], t->rs_tmp[0], t->rs_tmp[1],
                    t->acts.ids, t->acts.targets, t->acts.pos, t->acts_base, t->scratch_base, t->scalar};
    size_t i;
    if (ct)
        for (i = 0; i < sizeof ptrs / sizeof ptrs[0]; i++)
            if (ptrs[i]) ct->free(ct->user, ptrs[i]);
    free(t->acts.blocks);
    free(t->host_ids), free(t->host_tgt), free(t->host_pos), free(t->host_losses);
    if (t->exec) par_executor_destroy(t->exec);
    if (t->planner) par_planner_destroy(t->planner);
    params_free(&t->p);
}

/* ============================================================================
   4. init: normal(0, std) from a counter-based generator
   ========================================================================== */

static uint64_t name_key(uint64_t seed, const char *name) {
    uint64_t h = 1469598103934665603ull; /* FNV-1a of the name, mixed with the seed */
    for (; *name; name++) h = (h ^ (unsigned char)*name) * 1099511628211ull;
    return h ^ (seed * 0x9E3779B97F4A7C15ull);
}

/* Element i of a tensor: Box-Muller over two uniforms drawn at counters 2i, 2i+1
   of the tensor's stream, so any rank can draw any slice on its own. */
static float init_normal(uint64_t key, int64_t i, float std) {
    uint64_t s1 = key + 2 * (uint64_t)i, s2 = key + 2 * (uint64_t)i + 1;
    const double u1 = ((double)(splitmix64(&s1) >> 11) + 1.0) / 9007199254740993.0; /* (0, 1] */
    const double u2 = (double)(splitmix64(&s2) >> 11) / 9007199254740992.0;
    return (float)((double)std * sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

static par_status init_params(trainer *t, uint64_t seed) {
    const llama_params *p = &t->p;
    float *host = (float *)calloc((size_t)p->total, sizeof(float));
    int i;
    int64_t e;
    par_status st;
    if (!host) return par_set_error(PAR_ENOMEM, "out of host memory for the initial weights");
    for (i = 0; i < p->num_tensors; i++) {
        const llama_tensor *tn = &p->tensors[i];
        const uint64_t key = name_key(seed, tn->name);
        float *w = host + tn->offset;
        if (tn->ndim == 1) {
            for (e = 0; e < tn->numel; e++) w[e] = 1.0f;
            continue;
        }
        /* the slice's element (i, j) is element (start0 + i, start1 + j) of the tensor */
        for (e = 0; e < tn->numel; e++) {
            const int64_t i = tn->start[0] + e / tn->local[1], j = tn->start[1] + e % tn->local[1];
            w[e] = init_normal(key, i * tn->shape[1] + j, t->cfg->initializer_range);
        }
    }
    st = t->ct->memcpy(t->ct->user, t->params, host, (size_t)p->total * sizeof(float), PAR_COPY_HOST_TO_DEVICE);
    free(host);
    return st;
}

/* ============================================================================
   5. checkpoints
   ========================================================================== */

/* "out.safetensors" -> "out.optimizer.safetensors" (AdamW state and step). */
static void optimizer_path(const char *weights, char *out, size_t size) {
    const char *ext = ".safetensors";
    size_t n = strlen(weights), e = strlen(ext);
    if (n > e && strcmp(weights + n - e, ext) == 0)
        snprintf(out, size, "%.*s.optimizer%s", (int)(n - e), weights, ext);
    else
        snprintf(out, size, "%s.optimizer.safetensors", weights);
}

/* Check a file against the model before anything runs: for each prefix ("" for
   weights; "exp_avg." and "exp_avg_sq." for the optimizer file) every tensor is
   present with the right shape and a float dtype, and nothing else is there. */
static int check_tensor_file(par_st_file *f, const llama_params *p, const char *path, const char *const *prefixes,
                             int num_prefixes, char *err, size_t errsize) {
    int i, k, n = par_st_count(f);
    for (k = 0; k < num_prefixes; k++)
        for (i = 0; i < p->num_tensors; i++) {
            const llama_tensor *tn = &p->tensors[i];
            const par_st_tensor *s;
            char name[128], got[96] = "[", *w = got + 1;
            int j;
            snprintf(name, sizeof name, "%s%s", prefixes[k], tn->name);
            if (!(s = par_st_find(f, name))) return snprintf(err, errsize, "%s: tensor %s is missing", path, name), -1;
            if (s->dtype != PAR_F32 && s->dtype != PAR_BF16 && s->dtype != PAR_F16 && s->dtype != PAR_F64)
                return snprintf(err, errsize, "%s: tensor %s has dtype %s, expected a float type", path, name,
                                par_dtype_name(s->dtype)), -1;
            if (s->ndim == tn->ndim && s->shape[0] == tn->shape[0] && (tn->ndim == 1 || s->shape[1] == tn->shape[1]))
                continue;
            for (j = 0; j < s->ndim && j < 4; j++) w += snprintf(w, 22, "%s%lld", j ? "," : "", (long long)s->shape[j]);
            snprintf(w, 2, "]");
            if (tn->ndim == 2)
                snprintf(err, errsize, "%s: tensor %s has shape %s, the model needs [%lld,%lld]", path, name, got,
                         (long long)tn->shape[0], (long long)tn->shape[1]);
            else
                snprintf(err, errsize, "%s: tensor %s has shape %s, the model needs [%lld]", path, name, got,
                         (long long)tn->shape[0]);
            return -1;
        }
    /* every prefix found all model tensors, so a count above that is an extra tensor */
    if (n != num_prefixes * p->num_tensors)
        for (i = 0; i < n; i++) {
            const char *nm = par_st_tensor_at(f, i)->name;
            int known = 0, j;
            for (k = 0; k < num_prefixes && !known; k++) {
                size_t pl = strlen(prefixes[k]);
                for (j = 0; j < p->num_tensors && !known; j++)
                    known = strncmp(nm, prefixes[k], pl) == 0 && strcmp(nm + pl, p->tensors[j].name) == 0;
            }
            if (!known) return snprintf(err, errsize, "%s: unexpected tensor %s (not part of this model)", path, nm), -1;
        }
    return 0;
}

static int check_one_file(const char *path, const llama_params *p, const char *const *prefixes, int num_prefixes,
                          int64_t *step_out, char *err, size_t errsize) {
    par_st_file *f = NULL;
    int rc;
    if (par_st_open(path, &f) != PAR_OK) return snprintf(err, errsize, "--init-from: %s", par_last_error()), -1;
    rc = check_tensor_file(f, p, path, prefixes, num_prefixes, err, errsize);
    /* every checksum now, so a damaged file stops here (ranks read only slices) */
    if (rc == 0 && par_st_verify(f, NULL) != PAR_OK)
        rc = -1, snprintf(err, errsize, "--init-from: %s", par_last_error());
    if (rc == 0 && step_out) {
        const char *step = par_st_metadata(f, "step");
        char *end = NULL;
        long long v = -1;
        if (step) errno = 0, v = strtoll(step, &end, 10);
        if (!step || v < 0 || *end || errno) {
            snprintf(err, errsize, "%s: metadata \"step\" is missing or not a non-negative integer", path);
            rc = -1;
        } else {
            *step_out = v;
        }
    }
    par_st_close(f);
    return rc;
}

/* Validate --init-from (and the optimizer file beside it, when present) up
   front, so a bad file is a clean exit 2 before any rank starts. */
static int check_init_files(const char *path, const llama_config *cfg, int64_t *step_out, int *has_opt, char *err,
                            size_t errsize) {
    static const char *const weights[1] = {""}, *const moments[2] = {"exp_avg.", "exp_avg_sq."};
    llama_params p;
    llama_mesh_info mi; /* one device: every tensor whole */
    char opath[1024];
    int rc;
    *step_out = 0, *has_opt = 0;
    memset(&mi, 0, sizeof mi);
    mi.dp = mi.tp = 1, mi.vocab_emb_dp = 1, mi.tokens = (int64_t)cfg->batch_size * cfg->seq_length;
    if (par_mesh_parse("dp=1,tp=1", &mi.mesh) != PAR_OK || params_build(&p, cfg, &mi, 0, err, errsize) != 0) return -1;
    rc = check_one_file(path, &p, weights, 1, NULL, err, errsize);
    optimizer_path(path, opath, sizeof opath);
    if (rc == 0 && access(opath, F_OK) == 0) {
        rc = check_one_file(opath, &p, moments, 2, step_out, err, errsize);
        *has_opt = rc == 0;
    }
    params_free(&p);
    return rc;
}

static par_status upload(trainer *t, float *dst, const float *host, int64_t n) {
    return t->ct->memcpy(t->ct->user, dst, host, (size_t)n * sizeof(float), PAR_COPY_HOST_TO_DEVICE);
}

/* Where a rank's slice of tensor tn lies in the whole (row-major) tensor:
   `rows` runs of `cols` elements, run r starting at first + r * ld. */
typedef struct slice_runs {
    int64_t rows, cols, ld, first;
} slice_runs;

static slice_runs slice_of(const llama_tensor *tn) {
    slice_runs s;
    s.rows = tn->ndim == 2 ? tn->local[0] : 1;
    s.cols = tn->ndim == 2 ? tn->local[1] : tn->local[0];
    s.ld = tn->ndim == 2 ? tn->shape[1] : tn->shape[0];
    s.first = tn->ndim == 2 ? tn->start[0] * s.ld + tn->start[1] : tn->start[0];
    return s;
}

/* Put a rank's slice of tensor tn (packed) in its place in `whole`. */
static void place_slice(const llama_tensor *tn, float *whole, const float *slice) {
    const slice_runs s = slice_of(tn);
    int64_t r;
    for (r = 0; r < s.rows; r++) memcpy(whole + s.first + r * s.ld, slice + r * s.cols, (size_t)s.cols * sizeof(float));
}

static int64_t max_tensor_numel(const llama_params *p) {
    int64_t m = 0;
    int i;
    for (i = 0; i < p->num_tensors; i++) {
        const int64_t g = p->tensors[i].ndim == 2 ? p->tensors[i].shape[0] * p->tensors[i].shape[1] : p->tensors[i].shape[0];
        if (g > m) m = g;
    }
    return m;
}

/* Every tensor of `prefix` from the file, this rank's slice of each, into a
   host buffer laid out like the flat parameters. Only the slice is read from
   disk: one read when its rows are whole, else one per row (main verified
   the checksums of the whole file before any rank started). */
static par_status load_slices(trainer *t, par_st_file *f, const char *prefix, float *flat_host) {
    int i;
    for (i = 0; i < t->p.num_tensors; i++) {
        const llama_tensor *tn = &t->p.tensors[i];
        const slice_runs s = slice_of(tn);
        float *dst = flat_host + tn->offset;
        char name[128];
        int64_t r;
        snprintf(name, sizeof name, "%s%s", prefix, tn->name);
        if (s.cols == s.ld) { /* whole rows: one contiguous range */
            LLAMA_CHECK(par_st_read(f, name, tn->ndim, tn->shape, s.first, s.rows * s.cols, PAR_F32, dst));
            continue;
        }
        for (r = 0; r < s.rows; r++)
            LLAMA_CHECK(par_st_read(f, name, tn->ndim, tn->shape, s.first + r * s.ld, s.cols, PAR_F32, dst + r * s.cols));
    }
    return PAR_OK;
}

/* Weights into the flat buffer (this rank's slices); AdamW moments into the
   flat buffers or, under ZeRO, this rank's chunks of them. */
static par_status load_checkpoint(trainer *t, const char *path, int has_opt) {
    const llama_params *p = &t->p;
    float *host = (float *)calloc((size_t)p->total, sizeof(float));
    float *chunks = (float *)calloc((size_t)(p->shard_total ? p->shard_total : 1), sizeof(float));
    par_st_file *f = NULL;
    char opath[1024];
    par_status st;
    int b, k;
    if (!host || !chunks) {
        st = par_set_error(PAR_ENOMEM, "out of host memory loading %s", path);
        goto done;
    }
    if ((st = par_st_open(path, &f)) != PAR_OK) goto done;
    st = load_slices(t, f, "", host);
    par_st_close(f);
    if (st != PAR_OK || (st = upload(t, t->params, host, p->total)) != PAR_OK || !has_opt) goto done;
    optimizer_path(path, opath, sizeof opath);
    if ((st = par_st_open(opath, &f)) != PAR_OK) goto done;
    for (k = 0; k < 2 && st == PAR_OK; k++) {
        float *dst = k ? t->v : t->m;
        memset(host, 0, (size_t)p->total * sizeof(float));
        if ((st = load_slices(t, f, k ? "exp_avg_sq." : "exp_avg.", host)) != PAR_OK) break;
        if (t->zero == ZERO_OFF) {
            st = upload(t, dst, host, p->total);
            continue;
        }
        for (b = 0; b < p->num_buckets; b++) { /* this rank's chunk of each bucket (padding is zero) */
            const llama_bucket *bk = &p->buckets[b];
            memcpy(chunks + bk->shard_offset, host + bk->start + bk->chunk_begin, (size_t)bk->chunk * sizeof(float));
        }
        st = upload(t, dst, chunks, p->shard_total);
    }
    par_st_close(f);
done:
    free(host), free(chunks);
    return st;
}

/* Gather a ZeRO-sharded moment buffer into a full flat buffer (collective). */
static par_status gather_shards(trainer *t, const float *shard, float *full) {
    int b;
    for (b = 0; b < t->p.num_buckets; b++) {
        const llama_bucket *bk = &t->p.buckets[b];
        LLAMA_CHECK(t->ct->memcpy(t->ct->user, full + bk->start + bk->chunk_begin, shard + bk->shard_offset,
                                  (size_t)bk->chunk * sizeof(float), PAR_COPY_DEVICE_TO_DEVICE));
        LLAMA_CHECK(t->cm->all_gather(t->cm->user, t->dp_group, full + bk->start + bk->chunk_begin, full + bk->start,
                                      bk->chunk, PAR_F32, NULL));
    }
    return PAR_OK;
}

/* The whole tensor tn of a flat device buffer on rank 0's host (`whole`):
   tensor-parallel shards are all-gathered over the tp group (collective over
   it) and put in place; `tmp` is device memory for tp x the slice. */
static par_status gather_tensor(trainer *t, const llama_tensor *tn, const float *flat, float *tmp, float *staging,
                                float *whole) {
    int r;
    if (!tn->tp_split) {
        if (t->rank != 0) return PAR_OK;
        return t->ct->memcpy(t->ct->user, whole, flat + tn->offset, (size_t)tn->numel * 4, PAR_COPY_DEVICE_TO_HOST);
    }
    LLAMA_CHECK(t->cm->all_gather(t->cm->user, t->tp_group, flat + tn->offset, tmp, tn->numel, PAR_F32, NULL));
    if (t->rank != 0) return PAR_OK;
    LLAMA_CHECK(t->ct->memcpy(t->ct->user, staging, tmp, (size_t)(tn->numel * t->mi.tp) * 4, PAR_COPY_DEVICE_TO_HOST));
    for (r = 0; r < t->mi.tp; r++) { /* member r holds the r-th block along the split dim */
        llama_tensor at = *tn;
        const int split_rows = tn->ndim == 1 || tn->local[0] < tn->shape[0];
        if (split_rows) at.start[0] = r * tn->local[0], at.start[1] = 0;
        else at.start[0] = 0, at.start[1] = r * tn->local[1];
        place_slice(&at, whole, staging + r * tn->numel);
    }
    return PAR_OK;
}

/* --save: weights (Hugging Face names, loadable by torch) and, beside them,
   the AdamW state with the step count. Shards are gathered (ZeRO over dp,
   tensor parallel over tp); rank 0 writes; each file is atomic. */
static par_status save_checkpoint(trainer *t, const char *path) {
    const llama_params *p = &t->p;
    const int64_t n = p->total, g = p->global_params;
    float *full_m = t->m, *full_v = t->v, *host = NULL, *tmp = NULL, *staging = NULL;
    const float *src[3];
    int64_t *goff = (int64_t *)calloc((size_t)p->num_tensors, sizeof(int64_t)), acc = 0;
    char opath[1024], step[32];
    par_status st = PAR_OK;
    int32_t status = 0;
    int i, k;
    if (!goff) return par_set_error(PAR_ENOMEM, "out of host memory saving %s", path);
    for (i = 0; i < p->num_tensors; i++) {
        const llama_tensor *tn = &p->tensors[i];
        goff[i] = acc;
        acc += tn->ndim == 2 ? tn->shape[0] * tn->shape[1] : tn->shape[0];
    }
    if (t->zero != ZERO_OFF) {
        if ((st = alloc_floats(t, n, PAR_MEM_WORKSPACE, &full_m)) != PAR_OK) goto done;
        if ((st = alloc_floats(t, n, PAR_MEM_WORKSPACE, &full_v)) != PAR_OK) goto done;
        if ((st = gather_shards(t, t->m, full_m)) != PAR_OK || (st = gather_shards(t, t->v, full_v)) != PAR_OK)
            goto done;
    }
    if (t->tp_on && (st = alloc_floats(t, max_tensor_numel(p), PAR_MEM_WORKSPACE, &tmp)) != PAR_OK) goto done;
    if (t->rank == 0) {
        host = (float *)malloc((size_t)g * 3 * sizeof(float));
        staging = (float *)malloc((size_t)max_tensor_numel(p) * sizeof(float));
        if (!host || !staging) {
            st = par_set_error(PAR_ENOMEM, "out of host memory saving %s", path);
            goto done; /* the other ranks then fail in the gather below with a timeout, never hang */
        }
    }
    src[0] = t->params, src[1] = full_m, src[2] = full_v;
    for (k = 0; k < 3 && st == PAR_OK; k++)
        for (i = 0; i < p->num_tensors && st == PAR_OK; i++)
            st = gather_tensor(t, &p->tensors[i], src[k], tmp, staging, host ? host + k * g + goff[i] : NULL);
    if (st == PAR_OK && t->rank == 0) {
        par_st_writer *w = NULL;
        snprintf(step, sizeof step, "%lld", (long long)t->step);
        optimizer_path(path, opath, sizeof opath);
        st = par_st_writer_create(path, &w);
        for (i = 0; i < p->num_tensors && st == PAR_OK; i++)
            st = par_st_writer_add(w, p->tensors[i].name, PAR_F32, p->tensors[i].ndim, p->tensors[i].shape, host + goff[i]);
        if (st == PAR_OK) st = par_st_writer_finish(w);
        else if (w) par_st_writer_abort(w);
        w = NULL;
        /* one file with both moments, under two prefixes */
        if (st == PAR_OK) st = par_st_writer_create(opath, &w);
        for (i = 0; i < p->num_tensors && st == PAR_OK; i++) {
            const llama_tensor *tn = &p->tensors[i];
            char a[128], b[128];
            snprintf(a, sizeof a, "exp_avg.%s", tn->name);
            snprintf(b, sizeof b, "exp_avg_sq.%s", tn->name);
            st = par_st_writer_add(w, a, PAR_F32, tn->ndim, tn->shape, host + g + goff[i]);
            if (st == PAR_OK) st = par_st_writer_add(w, b, PAR_F32, tn->ndim, tn->shape, host + 2 * g + goff[i]);
        }
        if (st == PAR_OK) st = par_st_writer_metadata(w, "step", step);
        if (st == PAR_OK) st = par_st_writer_finish(w);
        else if (w) par_st_writer_abort(w);
    }
    status = (int32_t)st;
done:
    if (t->zero != ZERO_OFF) {
        if (full_m && full_m != t->m) t->ct->free(t->ct->user, full_m);
        if (full_v && full_v != t->v) t->ct->free(t->ct->user, full_v);
    }
    if (tmp) t->ct->free(t->ct->user, tmp);
    free(host), free(staging), free(goff);
    if (st != PAR_OK && t->rank != 0) return st;
    /* every rank learns whether rank 0's write worked; only rank 0 reports it */
    {
        par_status bst = scalar_collective(t, t->world_group, &status, PAR_I32, PAR_REDUCE_SUM, 1);
        if (bst != PAR_OK) return bst;
    }
    return t->rank == 0 ? st : PAR_OK;
}

/* ============================================================================
   6. the training step
   ========================================================================== */

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static float lr_at(const llama_config *c, int64_t step, int64_t total_steps) {
    const int64_t warm = c->warmup_steps;
    if (warm > 0 && step < warm) return c->learning_rate * (float)(step + 1) / (float)warm;
    if (strcmp(c->lr_schedule, "cosine") == 0) {
        const int64_t total = c->total_steps > 0 ? c->total_steps : total_steps;
        double progress = total > warm ? (double)(step - warm) / (double)(total - warm) : 1.0;
        if (progress > 1.0) progress = 1.0;
        return (float)(c->min_lr + 0.5 * (c->learning_rate - c->min_lr) * (1.0 + cos(3.141592653589793 * progress)));
    }
    return c->learning_rate;
}

/* Micro-batch `mb` of this rank at step `step`: rank r of d takes global slots
   j = i*d + r (MindSpore's num_shards/shard_id: round-robin over the batch). */
static par_status load_micro_batch(trainer *t, int64_t step, int mb) {
    const int64_t T = t->sz.seq, B = t->cfg->batch_size;
    int64_t i, k;
    for (i = 0; i < t->sz.batch; i++) {
        const int64_t local = (int64_t)mb * t->sz.batch + i, j = local * t->dp + t->dp_index;
        const int64_t s = data_sample(t->data, step, B, j);
        const unsigned char *src = t->data->bytes + s * T;
        for (k = 0; k < T; k++) {
            t->host_ids[i * T + k] = src[k], t->host_tgt[i * T + k] = src[k + 1];
            t->host_pos[i * T + k] = k;
        }
    }
    LLAMA_CHECK(t->ct->memcpy(t->ct->user, t->acts.ids, t->host_ids, (size_t)t->sz.n * 4, PAR_COPY_HOST_TO_DEVICE));
    LLAMA_CHECK(t->ct->memcpy(t->ct->user, t->acts.targets, t->host_tgt, (size_t)t->sz.n * 4, PAR_COPY_HOST_TO_DEVICE));
    return t->ct->memcpy(t->ct->user, t->acts.pos, t->host_pos, (size_t)t->sz.n * 8, PAR_COPY_HOST_TO_DEVICE);
}

/* `tp` is the tensor-parallel plumbing (NULL on one device of the tp dim). */
static par_status forward(trainer *t, const llama_tp *tp, int64_t batch, int64_t seq) {
    const llama_params *p = &t->p;
    const llama_dims *d = &p->local;
    llama_acts *a = &t->acts;
    const int64_t n = batch * seq;
    double t0 = trace_now(t);
    int l;
    LLAMA_CHECK(llama_embed_fwd(t->ct, d, tp, t->params + p->tensors[LLAMA_T_EMBED].offset, a->ids, n,
                                d->layers ? a->blocks[0].x_in : a->x_final, &t->scratch));
    trace_span(t, "compute", t0, "fwd embedding");
    for (l = 0; l < d->layers; l++) {
        const llama_block w = block_bind(p, l, t->params, 0);
        float *out = l + 1 < d->layers ? a->blocks[l + 1].x_in : a->x_final;
        t0 = trace_now(t);
        LLAMA_CHECK(llama_block_fwd_tp(t->ct, d, tp, &w, &a->blocks[l], a->pos, batch, seq, out, &t->scratch));
        trace_span(t, "compute", t0, "fwd block %d", l);
    }
    t0 = trace_now(t);
    LLAMA_CHECK(llama_head_fwd_tp(t->ct, d, tp, t->params + p->tensors[p->num_tensors - 2].offset,
                                  t->params + p->tensors[p->num_tensors - 1].offset, a, n, &t->scratch));
    trace_span(t, "compute", t0, "fwd head+loss");
    return PAR_OK;
}

/* Where bucket b's gradients are accumulated during backward. */
static float *bucket_grads(trainer *t, int b) {
    return t->zero == ZERO_2 ? t->slot[b & 1] : t->grads + t->p.buckets[b].start;
}

static par_reduce_op grad_op(const trainer *t) { return t->cfg->gradients_mean ? PAR_REDUCE_AVG : PAR_REDUCE_SUM; }

/* ZeRO-2: finish bucket b's reduce-scatter and add it into the shard. */
static par_status finish_rs(trainer *t, int b) {
    llama_bucket *bk = &t->p.buckets[b];
    if (!bk->req) return PAR_OK;
    LLAMA_CHECK(t->cm->wait(t->cm->user, bk->req));
    bk->req = NULL;
    trace_complete(t, bk);
    return t->ct->axpy(t->ct->user, bk->chunk, 1.0f, t->rs_tmp[b & 1], t->gshard + bk->shard_offset);
}

/* Gradients that are partial sums over the tp group (the norms', and a
   replicated embedding's, under sequence parallelism: each rank saw its rows)
   are summed over it before the data-parallel reduction. */
static par_status sum_tp_partials(trainer *t, int b, float *g) {
    const llama_bucket *bk = &t->p.buckets[b];
    int i;
    for (i = bk->first_tensor; i < bk->first_tensor + bk->num_tensors; i++) {
        const llama_tensor *tn = &t->p.tensors[i];
        if (!tn->tp_partial) continue;
        LLAMA_CHECK(t->cm->all_reduce(t->cm->user, t->tp_group, g + (tn->offset - bk->start), g + (tn->offset - bk->start),
                                      tn->numel, PAR_F32, PAR_REDUCE_SUM, NULL));
    }
    return PAR_OK;
}

/* Bucket b's gradients are complete for this micro-batch: start its reduction
   (async, so it overlaps the backward of the layers below). */
static par_status bucket_ready(trainer *t, int b, int last_mb) {
    llama_bucket *bk = &t->p.buckets[b];
    const par_comm_table *cm = t->cm;
    float *g = bucket_grads(t, b);
    if (t->zero == ZERO_2 || last_mb) LLAMA_CHECK(sum_tp_partials(t, b, g));
    if (t->zero == ZERO_2) {
        trace_issue(t, bk, "reduce_scatter");
        return cm->reduce_scatter(cm->user, t->dp_group, g, t->rs_tmp[b & 1], bk->chunk, PAR_F32, grad_op(t), &bk->req);
    }
    if (!last_mb) return PAR_OK;
    if (t->zero == ZERO_1) {
        trace_issue(t, bk, "reduce_scatter");
        return cm->reduce_scatter(cm->user, t->dp_group, g, t->gshard + bk->shard_offset, bk->chunk, PAR_F32,
                                  grad_op(t), &bk->req);
    }
    if (t->dp == 1) return PAR_OK;
    trace_issue(t, bk, "all_reduce");
    return cm->all_reduce(cm->user, t->dp_group, g, g, bk->padded, PAR_F32, grad_op(t), &bk->req);
}

/* Before bucket b's backward writes its gradients (ZeRO-2: its slot must be
   free again, i.e. bucket b+2's reduce-scatter done; then cleared). */
static par_status bucket_begin(trainer *t, int b) {
    if (t->zero != ZERO_2) return PAR_OK;
    if (b + 2 < t->p.num_buckets) LLAMA_CHECK(finish_rs(t, b + 2));
    return t->ct->memset(t->ct->user, t->slot[b & 1], 0, (size_t)t->p.buckets[b].padded * sizeof(float));
}

static par_status backward(trainer *t, float scale, int last_mb) {
    const llama_params *p = &t->p;
    const llama_dims *d = &p->local;
    const llama_tp *tp = t->tp_on ? &t->tp : NULL;
    llama_acts *a = &t->acts;
    const int nb = p->num_buckets, head = nb - 1;
    const llama_tensor *tn = p->tensors;
    const int tnorm = p->num_tensors - 2, tlm = p->num_tensors - 1;
    float *g;
    double t0;
    int l;
    LLAMA_CHECK(bucket_begin(t, head));
    g = bucket_grads(t, head);
    t0 = trace_now(t);
    LLAMA_CHECK(llama_head_bwd_tp(t->ct, d, tp, t->params + tn[tnorm].offset, t->params + tn[tlm].offset,
                                  g + (tn[tnorm].offset - p->buckets[head].start),
                                  g + (tn[tlm].offset - p->buckets[head].start), a, t->sz.n, scale, &t->scratch));
    trace_span(t, "compute", t0, "bwd head+loss");
    LLAMA_CHECK(bucket_ready(t, head, last_mb));
    for (l = (int)d->layers - 1; l >= 0; l--) {
        const llama_block w = block_bind(p, l, t->params, 0);
        llama_block gb;
        LLAMA_CHECK(bucket_begin(t, 1 + l));
        gb = block_bind(p, l, bucket_grads(t, 1 + l), p->buckets[1 + l].start);
        t0 = trace_now(t);
        LLAMA_CHECK(llama_block_bwd_tp(t->ct, d, tp, &w, &gb, &a->blocks[l], a->pos, t->sz.batch, t->sz.seq,
                                       &t->scratch));
        trace_span(t, "compute", t0, "bwd block %d", l);
        LLAMA_CHECK(bucket_ready(t, 1 + l, last_mb));
    }
    LLAMA_CHECK(bucket_begin(t, 0));
    t0 = trace_now(t);
    LLAMA_CHECK(llama_embed_bwd(t->ct, d, tp, a->ids, t->sz.n, bucket_grads(t, 0), &t->scratch));
    trace_span(t, "compute", t0, "bwd embedding");
    return bucket_ready(t, 0, last_mb);
}

static par_status wait_reductions(trainer *t) {
    int b;
    for (b = t->p.num_buckets - 1; b >= 0; b--) {
        llama_bucket *bk = &t->p.buckets[b];
        if (t->zero == ZERO_2) LLAMA_CHECK(finish_rs(t, b));
        else if (bk->req) {
            par_request *r = bk->req;
            bk->req = NULL;
            LLAMA_CHECK(t->cm->wait(t->cm->user, r));
            trace_complete(t, bk);
        }
    }
    return PAR_OK;
}

/* Global gradient norm: every parameter counted once (the shards are disjoint;
   without ZeRO every rank holds the same reduced gradients). */
/* Sum of squares of the gradients in [flat_begin, flat_begin+count) (g points
   at flat_begin), counting a tensor's tp copies once: tensor-parallel shards
   on every tp rank, replicated tensors on tp rank 0 only. */
static par_status sumsq_range(trainer *t, int64_t flat_begin, int64_t count, const float *g, double *out) {
    int i;
    for (i = 0; i < t->p.num_tensors; i++) {
        const llama_tensor *tn = &t->p.tensors[i];
        const int64_t b = tn->offset > flat_begin ? tn->offset : flat_begin;
        const int64_t e = tn->offset + tn->numel < flat_begin + count ? tn->offset + tn->numel : flat_begin + count;
        double part = 0.0;
        if (b >= e || (!tn->tp_split && t->tp_index != 0)) continue;
        LLAMA_CHECK(t->ct->sumsq(t->ct->user, e - b, g + (b - flat_begin), &part));
        *out += part;
    }
    return PAR_OK;
}

static par_status grad_norm(trainer *t, double *norm) {
    double ss = 0.0, t0 = trace_now(t);
    int b;
    if (t->zero == ZERO_OFF && !t->tp_on) {
        LLAMA_CHECK(t->ct->sumsq(t->ct->user, t->p.total, t->grads, &ss));
        trace_span(t, "optimizer", t0, "grad norm");
    } else if (t->zero == ZERO_OFF) { /* dp replicas hold the same gradients: sum over tp only */
        LLAMA_CHECK(sumsq_range(t, 0, t->p.total, t->grads, &ss));
        trace_span(t, "optimizer", t0, "grad norm");
        t0 = trace_now(t);
        LLAMA_CHECK(scalar_collective(t, t->tp_group, &ss, PAR_F64, PAR_REDUCE_SUM, 0));
        trace_span(t, "comm", t0, "all_reduce grad norm");
    } else { /* ZeRO: the dp shards are disjoint too */
        if (!t->tp_on) {
            LLAMA_CHECK(t->ct->sumsq(t->ct->user, t->p.shard_total, t->gshard, &ss));
        } else {
            for (b = 0; b < t->p.num_buckets; b++) {
                const llama_bucket *bk = &t->p.buckets[b];
                LLAMA_CHECK(sumsq_range(t, bk->start + bk->chunk_begin, bk->chunk, t->gshard + bk->shard_offset, &ss));
            }
        }
        trace_span(t, "optimizer", t0, "grad norm");
        t0 = trace_now(t);
        LLAMA_CHECK(scalar_collective(t, t->tp_on ? t->world_group : t->dp_group, &ss, PAR_F64, PAR_REDUCE_SUM, 0));
        trace_span(t, "comm", t0, "all_reduce grad norm");
    }
    *norm = sqrt(ss);
    return PAR_OK;
}

/* AdamW over [flat_begin, flat_begin+count) of the flat layout, tensor by
   tensor (weight decay only on rank >= 2); p/g/m/v point at flat_begin. */
static par_status adamw_range(trainer *t, int64_t flat_begin, int64_t count, float *p, const float *g, float *m,
                              float *v, float lr, int64_t step) {
    const llama_config *c = t->cfg;
    int i;
    for (i = 0; i < t->p.num_tensors; i++) {
        const llama_tensor *tn = &t->p.tensors[i];
        const int64_t b = tn->offset > flat_begin ? tn->offset : flat_begin;
        const int64_t e = tn->offset + tn->numel < flat_begin + count ? tn->offset + tn->numel : flat_begin + count;
        const int64_t o = b - flat_begin;
        if (b >= e) continue;
        LLAMA_CHECK(t->ct->adamw(t->ct->user, e - b, p + o, g + o, m + o, v + o, lr, c->beta1, c->beta2, c->eps,
                                 tn->ndim >= 2 ? c->weight_decay : 0.0f, step));
    }
    return PAR_OK;
}

static par_status optimizer_step(trainer *t, float lr, float clip) {
    const llama_params *p = &t->p;
    const int64_t step = t->step + 1;
    const double t0 = trace_now(t);
    int b;
    if (t->zero == ZERO_OFF) {
        if (clip != 1.0f) LLAMA_CHECK(t->ct->scale(t->ct->user, p->total, clip, t->grads));
        LLAMA_CHECK(adamw_range(t, 0, p->total, t->params, t->grads, t->m, t->v, lr, step));
        trace_span(t, "optimizer", t0, "adamw");
        return PAR_OK;
    }
    if (clip != 1.0f) LLAMA_CHECK(t->ct->scale(t->ct->user, p->shard_total, clip, t->gshard));
    for (b = 0; b < p->num_buckets; b++) {
        const llama_bucket *bk = &p->buckets[b];
        const int64_t begin = bk->start + bk->chunk_begin, so = bk->shard_offset;
        LLAMA_CHECK(adamw_range(t, begin, bk->chunk, t->params + begin, t->gshard + so, t->m + so, t->v + so, lr, step));
    }
    trace_span(t, "optimizer", t0, "adamw (ZeRO shard)");
    /* every rank updated its chunk: gather the new parameters (async, all buckets) */
    for (b = 0; b < p->num_buckets; b++) {
        llama_bucket *bk = &t->p.buckets[b];
        float *full = t->params + bk->start;
        trace_issue(t, bk, "all_gather");
        LLAMA_CHECK(t->cm->all_gather(t->cm->user, t->dp_group, full + bk->chunk_begin, full, bk->chunk, PAR_F32,
                                      &bk->req));
    }
    return wait_reductions(t);
}

typedef struct step_stats {
    double loss, grad_norm, seconds;
    float lr;
} step_stats;

static par_status train_step(trainer *t, int64_t total_steps, step_stats *out) {
    const llama_params *p = &t->p;
    const float scale = 1.0f / (float)(t->sz.n * t->micro_batches);
    double loss = 0.0, norm = 0.0, t0 = now_s(), step_us = trace_now(t), t1;
    float clip = 1.0f, lr = lr_at(t->cfg, t->step, total_steps);
    int mb;
    int64_t i;
    if (t->grads) LLAMA_CHECK(t->ct->memset(t->ct->user, t->grads, 0, (size_t)p->total * sizeof(float)));
    if (t->gshard) LLAMA_CHECK(t->ct->memset(t->ct->user, t->gshard, 0, (size_t)p->shard_total * sizeof(float)));
    for (mb = 0; mb < t->micro_batches; mb++) {
        t1 = trace_now(t);
        LLAMA_CHECK(load_micro_batch(t, t->step, mb));
        trace_span(t, "io", t1, "load micro-batch %d", mb);
        LLAMA_CHECK(forward(t, t->tp_on ? &t->tp : NULL, t->sz.batch, t->sz.seq));
        LLAMA_CHECK(backward(t, scale, mb == t->micro_batches - 1));
        /* ZeRO-2 reuses the slots and receive buffers in the next micro-batch */
        if (t->zero == ZERO_2 && mb + 1 < t->micro_batches) LLAMA_CHECK(wait_reductions(t));
        LLAMA_CHECK(t->ct->memcpy(t->ct->user, t->host_losses, t->acts.losses, (size_t)t->sz.n * 4,
                                  PAR_COPY_DEVICE_TO_HOST));
        for (i = 0; i < t->sz.n; i++) loss += t->host_losses[i];
    }
    LLAMA_CHECK(wait_reductions(t));
    loss /= (double)(t->sz.n * t->micro_batches);
    if (t->dp > 1) {
        t1 = trace_now(t);
        LLAMA_CHECK(scalar_collective(t, t->dp_group, &loss, PAR_F64, PAR_REDUCE_AVG, 0));
        trace_span(t, "comm", t1, "all_reduce loss");
    }
    LLAMA_CHECK(grad_norm(t, &norm));
    if (t->cfg->max_grad_norm > 0.0f) {
        /* PyTorch's clip_grad_norm_: coefficient max/(norm+1e-6), clamped to 1 */
        const double c = (double)t->cfg->max_grad_norm / (norm + 1e-6);
        if (c < 1.0) clip = (float)c;
    }
    LLAMA_CHECK(optimizer_step(t, lr, clip));
    LLAMA_CHECK(t->ct->synchronize(t->ct->user));
    trace_span(t, "step", step_us, "step %lld", (long long)t->step);
    t->step++;
    out->loss = loss, out->grad_norm = norm, out->lr = lr, out->seconds = now_s() - t0;
    return PAR_OK;
}

/* ============================================================================
   7. reporting
   ========================================================================== */

/* Model FLOPs of one training step over the global batch (forward + backward
   = 3x forward; causal attention counts the visible half of the scores). */
static double step_flops(const llama_params *p, int64_t global_batch) {
    const llama_dims *d = &p->dims;
    const double tokens = (double)global_batch * (double)d->seq;
    const double matmul_params = (double)(p->global_params - d->vocab * d->dim) -
                                 (double)d->dim * (double)(2 * d->layers + 1);
    const double attn = (double)d->layers * 2.0 * (double)d->seq * (double)(d->heads * d->head_dim);
    return 6.0 * tokens * matmul_params + 3.0 * tokens * attn;
}

/* The GEMM throughput of the whole machine, as the ranks share it: every rank
   runs the same GEMMs at once between two barriers, and the total FLOPs over
   the slowest rank's time is the peak MFU is measured against. Runs in the
   backward scratch (free now): as large a square as fits, up to 384. */
static par_status measure_gemm_peak(trainer *t, double *gflops) {
    const int reps = 8;
    const int64_t n = gemm_probe_side(&t->p, &t->sz);
    float *a = t->scratch_base;
    par_gemm_desc d = {0};
    double t0, dt, flops;
    int i;
    d.m = d.n = d.k = n, d.alpha = 1.0f;
    LLAMA_CHECK(t->ct->memset(t->ct->user, a, 0, (size_t)(3 * n * n) * sizeof(float)));
    LLAMA_CHECK(t->ct->gemm(t->ct->user, &d, a, a + n * n, a + 2 * n * n)); /* warm up */
    LLAMA_CHECK(t->ct->synchronize(t->ct->user));
    LLAMA_CHECK(t->cm->barrier(t->cm->user, t->world_group));
    t0 = now_s();
    for (i = 0; i < reps; i++) LLAMA_CHECK(t->ct->gemm(t->ct->user, &d, a, a + n * n, a + 2 * n * n));
    LLAMA_CHECK(t->ct->synchronize(t->ct->user));
    /* up to the moment the last rank is done: ranks sharing cores may not
       really have run at the same time */
    LLAMA_CHECK(t->cm->barrier(t->cm->user, t->world_group));
    dt = now_s() - t0;
    flops = 2.0 * (double)(n * n * n) * reps;
    LLAMA_CHECK(scalar_collective(t, t->world_group, &dt, PAR_F64, PAR_REDUCE_MAX, 0));
    LLAMA_CHECK(scalar_collective(t, t->world_group, &flops, PAR_F64, PAR_REDUCE_SUM, 0));
    *gflops = dt > 0 ? flops / dt * 1e-9 : 0.0;
    return PAR_OK;
}

static double mib(int64_t bytes) { return (double)bytes / (1024.0 * 1024.0); }

static void print_memory_row(const char *what, const int64_t *bytes, int64_t total) {
    int c;
    printf("  %-9s", what);
    for (c = 0; c < PAR_MEM_CATEGORY_COUNT; c++) printf(" %11.2f", mib(bytes[c]));
    printf(" %11.2f\n", mib(total));
}

static void print_memory_header(void) {
    int c;
    printf("  %-9s", "MiB/rank");
    for (c = 0; c < PAR_MEM_CATEGORY_COUNT; c++) printf(" %11s", par_mem_category_name((par_mem_category)c));
    printf(" %11s\n", "total");
}

/* {"event":"memory_plan"|"memory_peak","params":bytes,...,"total":bytes} */
static void metrics_memory(FILE *f, const char *event, const int64_t *bytes, int64_t total) {
    int c;
    if (!f) return;
    fprintf(f, "{\"event\":\"%s\"", event);
    for (c = 0; c < PAR_MEM_CATEGORY_COUNT; c++)
        fprintf(f, ",\"%s\":%lld", par_mem_category_name((par_mem_category)c), (long long)bytes[c]);
    fprintf(f, ",\"total\":%lld}\n", (long long)total);
    fflush(f);
}

static int64_t plan_total(const mem_plan *m) {
    int64_t total = 0;
    int c;
    for (c = 0; c < PAR_MEM_CATEGORY_COUNT; c++) total += m->bytes[c];
    return total;
}

static void print_summary(const trainer *t, const char *backend) {
    const llama_dims *d = &t->p.dims;
    const llama_tensor *e = &t->p.tensors[LLAMA_T_EMBED], *b0 = &t->p.tensors[LLAMA_BLOCK_FIRST];
    char mesh[128], lay[128], tok[128], col[128] = "-", row[128] = "-";
    par_mesh_format(&t->mesh, mesh, sizeof mesh);
    par_layout_format(&e->layout, lay, sizeof lay);
    par_layout_format(&t->tokens_layout, tok, sizeof tok);
    if (d->layers) par_layout_format(&b0[1].layout, col, sizeof col), par_layout_format(&b0[4].layout, row, sizeof row);
    printf("parallel.h llama trainer\n");
    printf("  model      vocab %lld, hidden %lld, layers %lld, heads %lld (kv %lld, head dim %lld), ffn %lld, seq %lld\n",
           (long long)d->vocab, (long long)d->dim, (long long)d->layers, (long long)d->heads, (long long)d->kv_heads,
           (long long)d->head_dim, (long long)d->ffn, (long long)d->seq);
    printf("  parameters %lld in %d tensors (%lld on this rank), %d gradient buckets\n", (long long)t->p.global_params,
           t->p.num_tensors, (long long)t->p.num_params, t->p.num_buckets);
    printf("  ranks      %d (%s backend), mesh %s, %d kernel thread(s) per rank\n", t->world, backend, mesh,
           par_ctx_kernel_threads(t->ctx));
    printf("  layouts    q/k/v/gate/up/lm_head %s, o/down %s, embedding %s, tokens [batch,seq] %s\n", col, row, lay,
           tok);
    if (t->tp_on)
        printf("  tensor     tp %d: %lld of %lld heads, %lld kv heads, %lld ffn columns, vocab rows %lld..%lld on rank 0%s\n",
               t->mi.tp, (long long)t->p.local.heads, (long long)d->heads, (long long)t->p.local.kv_heads,
               (long long)t->p.local.ffn, (long long)t->p.local.vocab_start,
               (long long)(t->p.local.vocab_start + t->p.local.vocab - 1),
               t->mi.sp ? "; sequence parallel (norms and residual split by tokens)" : "");
    printf("  batch      global %d = dp %d x micro_batch_num %d x %lld samples of %lld tokens\n", t->cfg->batch_size,
           t->dp, t->micro_batches, (long long)t->sz.batch, (long long)t->sz.seq);
    if (t->zero != ZERO_OFF)
        printf("  optimizer  AdamW, ZeRO level %d over dp %d: each rank updates %lld of %lld elements\n", (int)t->zero,
               t->dp, (long long)t->p.shard_total, (long long)t->p.total);
    else
        printf("  optimizer  AdamW, replicated%s\n", t->dp > 1 ? " (gradients all-reduced in buckets)" : "");
    printf("  memory plan per rank:\n");
    print_memory_header();
    print_memory_row("planned", t->plan.bytes, plan_total(&t->plan));
    fflush(stdout);
}

static void report_step(trainer *t, const step_stats *s, int64_t peak_bytes) {
    const double tokens = (double)t->cfg->batch_size * (double)t->sz.seq;
    const double tps = s->seconds > 0 ? tokens / s->seconds : 0.0;
    const double mfu = s->seconds > 0 && t->gemm_gflops > 0
                           ? step_flops(&t->p, t->cfg->batch_size) / s->seconds / (t->gemm_gflops * 1e9)
                           : 0.0;
    if (!t->opt->quiet)
        printf("step %5lld | loss %.6f | grad norm %.6f | lr %.3e | %8.0f tok/s | MFU %5.1f%% | peak %.1f MiB\n",
               (long long)t->step - 1, s->loss, s->grad_norm, (double)s->lr, tps, 100.0 * mfu, mib(peak_bytes));
    if (t->metrics) {
        fprintf(t->metrics,
                "{\"step\":%lld,\"loss\":%.9g,\"grad_norm\":%.9g,\"lr\":%.9g,\"tokens_per_s\":%.1f,\"mfu\":%.5f,"
                "\"peak_mem_bytes\":%lld,\"step_s\":%.6f}\n",
                (long long)t->step - 1, s->loss, s->grad_norm, (double)s->lr, tps, mfu, (long long)peak_bytes,
                s->seconds);
        fflush(t->metrics);
    }
    fflush(stdout);
}

/* ============================================================================
   8. sampling, the rank body, main
   ========================================================================== */

/* The last row of the logits, whole, on the host: under tensor parallelism
   each rank holds its vocabulary shard, gathered over the tp group (in place,
   in the scratch). */
static par_status last_logits_row(trainer *t, int64_t n, float *row) {
    const int64_t vl = t->p.local.vocab;
    const float *src = t->acts.logits + (n - 1) * vl;
    float *buf = t->scratch.dh;
    if (!t->tp_on) return t->ct->memcpy(t->ct->user, row, src, (size_t)vl * 4, PAR_COPY_DEVICE_TO_HOST);
    LLAMA_CHECK(t->ct->memcpy(t->ct->user, buf + t->tp_index * vl, src, (size_t)vl * 4, PAR_COPY_DEVICE_TO_DEVICE));
    LLAMA_CHECK(t->cm->all_gather(t->cm->user, t->tp_group, buf + t->tp_index * vl, buf, vl, PAR_F32, NULL));
    return t->ct->memcpy(t->ct->user, row, buf, (size_t)(vl * t->mi.tp) * 4, PAR_COPY_DEVICE_TO_HOST);
}

/* The ranks of the first data-parallel replica (one rank without tensor
   parallelism) continue a prompt from the data, one byte at a time
   (temperature 0.8, the same draws on every rank), re-running the forward over
   the last seq_length bytes; rank 0 prints. */
static par_status generate(trainer *t, int count) {
    const llama_dims *d = &t->p.dims;
    const int prompt = 16;
    const int64_t T = t->sz.seq < t->sz.n ? t->sz.seq : t->sz.n;
    int64_t len = prompt < T ? prompt : T, i, k;
    unsigned char *text = (unsigned char *)malloc((size_t)(len + count));
    float *row = (float *)malloc((size_t)d->vocab * sizeof(float));
    uint64_t rng = 0x53414D504C45ull ^ t->cfg->seed;
    par_status st = PAR_OK;
    if (!text || !row) return free(text), free(row), par_set_error(PAR_ENOMEM, "out of host memory");
    memcpy(text, t->data->bytes, (size_t)len);
    for (i = 0; i < count && st == PAR_OK; i++) {
        const int64_t n = len < T ? len : T;
        /* sequence parallel splits the rows over tp: pad the context at the end to a
           multiple of it (causal attention keeps the padding out of the real rows) */
        const int64_t n_run = t->p.sp ? (n + t->p.tp - 1) / t->p.tp * t->p.tp : n;
        const unsigned char *ctx = text + len - n;
        double mx = -1e30, sum = 0.0, r;
        for (k = 0; k < n_run; k++) t->host_ids[k] = k < n ? ctx[k] : 0, t->host_pos[k] = k;
        st = t->ct->memcpy(t->ct->user, t->acts.ids, t->host_ids, (size_t)n_run * 4, PAR_COPY_HOST_TO_DEVICE);
        if (st == PAR_OK)
            st = t->ct->memcpy(t->ct->user, t->acts.pos, t->host_pos, (size_t)n_run * 8, PAR_COPY_HOST_TO_DEVICE);
        if (st == PAR_OK) st = forward(t, t->tp_on ? &t->tp : NULL, 1, n_run);
        if (st == PAR_OK) st = last_logits_row(t, n, row);
        if (st != PAR_OK) break;
        for (k = 0; k < d->vocab && k < 256; k++) mx = row[k] > mx ? row[k] : mx;
        for (k = 0; k < d->vocab && k < 256; k++) sum += exp(((double)row[k] - mx) / 0.8);
        r = (double)(splitmix64(&rng) >> 11) / 9007199254740992.0 * sum;
        for (k = 0; k < 255 && k < d->vocab - 1; k++) {
            r -= exp(((double)row[k] - mx) / 0.8);
            if (r <= 0) break;
        }
        text[len++] = (unsigned char)k;
    }
    if (st == PAR_OK && t->rank == 0) {
        const int64_t shown = prompt < T ? prompt : T;
        printf("sample (prompt | generated):\n");
        for (k = 0; k < len; k++) {
            int ch = text[k];
            if (k == shown) printf(" | ");
            putchar(ch == '\n' || ch == '\t' || (ch >= 32 && ch < 127) ? ch : '.');
        }
        printf("\n");
    }
    free(text), free(row);
    return st;
}

/* ---- tensor-parallel collectives: the comm table over the tp group ---------- */

/* The layers' tensor-parallel collectives are redistributions of a flat view
   of the activation, [dp x tp x count] elements over the dp x tp mesh:
     TP_REDUCE   partial over tp, split over dp   -> split over dp            (all-reduce)
     TP_GATHER   split over (dp, tp)              -> split over dp            (all-gather)
     TP_SCATTER  partial over tp, split over dp   -> split over (dp, tp)      (reduce-scatter)
   planned by the library's planner (its cache) and run by the executor. */
enum { TP_REDUCE = 0, TP_GATHER, TP_SCATTER };

static par_status tp_flat_layout(const trainer *t, int64_t numel, int split_tp, int partial_tp, par_layout *l) {
    const int dp_dim = par_mesh_dev_dim(&t->mesh, "dp"), tp_dim = par_mesh_dev_dim(&t->mesh, "tp");
    int map[1];
    map[0] = dp_dim;
    LLAMA_CHECK(par_layout_init(l, &t->mesh, 1, &numel, map, partial_tp ? 1u << tp_dim : 0u));
    if (split_tp) l->map.count[0] = 2, l->map.dev[0][0] = (int8_t)dp_dim, l->map.dev[0][1] = (int8_t)tp_dim;
    return par_layout_check(l);
}

/* count: floats of this rank's input; the flat tensor has dp x (full rows)
   elements. The planner's cache makes a repeated size a lookup. */
static par_status tp_redistribute(trainer *t, int kind, int64_t count, const float *in, float *out) {
    const int64_t global = (kind == TP_GATHER ? count * t->mi.tp : count) * t->dp;
    par_layout from, to;
    LLAMA_CHECK(tp_flat_layout(t, global, kind == TP_GATHER, kind != TP_GATHER, &from));
    LLAMA_CHECK(tp_flat_layout(t, global, kind == TP_SCATTER, 0, &to));
    LLAMA_CHECK(par_planner_plan(t->planner, &from, &to, NULL, &t->tp_plan));
    return par_execute_plan(t->exec, &t->tp_plan, PAR_F32, in, out);
}

/* Each one blocks the layer, so under --trace its time is a comm span (inside
   the layer's compute span) and is counted as exposed communication. */
static par_status tp_done(trainer *t, double t0, const char *what, par_status st) {
    if (t->trace) {
        trace_span(t, "comm", t0, "tp %s", what);
        t->tp_comm_us += par_trace_now_us() - t0;
    }
    return st;
}
static par_status tp_sum(void *u, float *x, int64_t n) {
    trainer *t = (trainer *)u;
    const double t0 = trace_now(t);
    return tp_done(t, t0, "all_reduce", tp_redistribute(t, TP_REDUCE, n, x, x));
}
static par_status tp_max(void *u, float *x, int64_t n) {
    trainer *t = (trainer *)u;
    const double t0 = trace_now(t);
    return tp_done(t, t0, "all_reduce max", t->cm->all_reduce(t->cm->user, t->tp_group, x, x, n, PAR_F32, PAR_REDUCE_MAX, NULL));
}
static par_status tp_gather(void *u, const float *x_local, float *x, int64_t n_local) {
    trainer *t = (trainer *)u;
    const double t0 = trace_now(t);
    return tp_done(t, t0, "all_gather", tp_redistribute(t, TP_GATHER, n_local, x_local, x));
}
static par_status tp_reduce_scatter(void *u, const float *x, float *x_local, int64_t n_local) {
    trainer *t = (trainer *)u;
    const double t0 = trace_now(t);
    return tp_done(t, t0, "reduce_scatter", tp_redistribute(t, TP_SCATTER, n_local * t->mi.tp, x, x_local));
}

static par_status trainer_setup(trainer *t, par_ctx *ctx, const shared_run *sh) {
    const llama_config *c = sh->cfg;
    const int64_t shape[2] = {c->batch_size, c->seq_length};
    int map[2];
    uint32_t tp_mask;
    char err[512];
    int64_t table_scratch = 0;
    t->ctx = ctx, t->ct = par_ctx_compute(ctx), t->cm = par_ctx_comm(ctx);
    t->cfg = c, t->opt = sh->opt, t->data = sh->data;
    t->mesh = *par_ctx_mesh(ctx);
    t->rank = par_ctx_rank(ctx), t->world = par_ctx_size(ctx);
    t->micro_batches = c->micro_batch_num;
    t->zero = !c->enable_parallel_optimizer ? ZERO_OFF : c->optimizer_level >= 2 ? ZERO_2 : ZERO_1;
    /* activations: [batch, seq] split over dp; the dp group is the layout's split dims */
    map[0] = par_mesh_dev_dim(&t->mesh, "dp"), map[1] = -1;
    LLAMA_CHECK(par_layout_init(&t->tokens_layout, &t->mesh, 2, shape, map, 0));
    {
        int64_t local[2] = {0, 0};
        par_layout_local_shape(&t->tokens_layout, local);
        t->dp = (int)par_layout_shards(&t->tokens_layout, 0);
        t->sz.batch = local[0] / t->micro_batches, t->sz.seq = local[1], t->sz.n = t->sz.batch * t->sz.seq;
    }
    LLAMA_CHECK(par_ctx_group(ctx, par_layout_split_dims(&t->tokens_layout), &t->dp_group, &t->dp_index, NULL));
    LLAMA_CHECK(par_ctx_group(ctx, (1u << t->mesh.ndim) - 1u, &t->world_group, NULL, NULL));
    t->mi.mesh = t->mesh, t->mi.dp = t->dp, t->mi.tp = c->model_parallel, t->mi.sp = c->use_seq_parallel;
    t->mi.vocab_emb_dp = c->vocab_emb_dp, t->mi.tokens = (int64_t)c->batch_size * c->seq_length;
    if (params_build(&t->p, c, &t->mi, t->rank, err, sizeof err) != 0) return par_set_error(PAR_EINVAL, "%s", err);
    /* the tp group: where the row-parallel projections' partial sums are reduced
       (o_proj's forward collective, derived from its strategy) */
    tp_mask = par_layout_split_dims(&t->p.tensors[LLAMA_BLOCK_FIRST + 4].layout);
    if (!c->num_layers || t->mi.tp == 1) tp_mask = 0u;
    LLAMA_CHECK(par_ctx_group(ctx, tp_mask, &t->tp_group, &t->tp_index, NULL));
    t->tp_on = t->mi.tp > 1;
    t->tp.degree = t->mi.tp, t->tp.index = t->tp_index, t->tp.sp = c->use_seq_parallel, t->tp.user = t;
    t->tp.all_reduce = tp_sum, t->tp.all_reduce_max = tp_max, t->tp.all_gather = tp_gather;
    t->tp.reduce_scatter = tp_reduce_scatter;
    if (t->tp_on) {
        LLAMA_CHECK(par_planner_create(NULL, &t->planner));
        LLAMA_CHECK(par_executor_create(ctx, &t->exec));
    }
    t->plan = plan_memory(&t->p, &t->sz, t->zero, t->dp);
    LLAMA_CHECK(plan_table_scratch(t->ct, &t->p, &t->sz, &table_scratch));
    t->plan.bytes[PAR_MEM_WORKSPACE] += table_scratch;
    return state_alloc(t);
}

/* --trace: rank 0's share of step time spent waiting in communication.
   "Exposed" communication is the time a collective of this rank was in flight
   (a comm span: from issue to the end of its wait, or a blocking scalar
   collective) while the rank ran no compute, optimizer or io span, i.e. the
   communication that backward did not hide, plus the time in the layers'
   blocking tensor-parallel collectives (inside compute spans, but stalling
   them); the share is that time summed over the traced steps divided by the
   summed step time. Reported for rank 0
   (one rank's view; in data parallel the ranks wait about equally). Spans
   dropped for lack of capacity make it an underestimate; the line says so. */
static void report_comm_share(trainer *t, double loop_t0_us, double loop_t1_us, double step_seconds) {
    static const char *const hiding[3] = {"compute", "optimizer", "io"};
    double busy = 0.0, exposed = 0.0, share;
    if (par_trace_coverage(t->trace, "comm", hiding, 3, loop_t0_us, loop_t1_us, &busy, &exposed) != PAR_OK ||
        step_seconds <= 0)
        return;
    exposed += t->tp_comm_us; /* the layers' tp collectives block them: never hidden */
    share = exposed * 1e-6 / step_seconds;
    printf("communication: %.1f%% of step time on rank 0 waiting for collectives (exposed %.3f s, in flight %.3f s, "
           "steps %.3f s)%s\n",
           100.0 * share, exposed * 1e-6, busy * 1e-6, step_seconds,
           par_trace_dropped(t->trace) ? " -- trace full, spans were dropped: an underestimate" : "");
    if (t->metrics)
        fprintf(t->metrics,
                "{\"event\":\"comm_share\",\"rank\":0,\"share\":%.6f,\"exposed_s\":%.6f,\"in_flight_s\":%.6f,"
                "\"step_s\":%.6f,\"dropped_spans\":%lld}\n",
                share, exposed * 1e-6, busy * 1e-6, step_seconds, (long long)par_trace_dropped(t->trace));
}

static par_status rank_main(par_ctx *ctx, void *arg) {
    const shared_run *sh = (const shared_run *)arg;
    const llama_options *o = sh->opt;
    trainer t;
    par_status st;
    int64_t i, peak = 0;
    double t0, loop_t0_us = 0.0, loop_t1_us = 0.0, step_seconds = 0.0;
    memset(&t, 0, sizeof t);
    if (o->trace_path) {
        par_trace_desc td = {0};
        td.rank = par_ctx_rank(ctx);
        if ((st = par_trace_create(&td, &t.trace)) != PAR_OK) return st;
    }
    st = trainer_setup(&t, ctx, sh);
    if (st == PAR_OK && o->init_from) {
        /* main checked the files; a rank only reads its part */
        if ((st = load_checkpoint(&t, o->init_from, sh->init_has_optimizer)) == PAR_OK) t.step = sh->init_step;
    } else if (st == PAR_OK && t.dp_index == 0) {
        /* replicas get these weights from the broadcast below */
        st = init_params(&t, sh->cfg->seed);
    }
    /* data parallel: every replica starts from rank 0's weights */
    if (st == PAR_OK && t.dp > 1)
        st = t.cm->broadcast(t.cm->user, t.dp_group, t.params, t.p.total, PAR_F32, 0, NULL);
    if (st == PAR_OK) st = measure_gemm_peak(&t, &t.gemm_gflops);
    if (st == PAR_OK && t.rank == 0) {
        print_summary(&t, sh->backend);
        if (o->init_from)
            printf("  init       %s, continuing at step %lld\n", o->init_from, (long long)t.step);
        printf("  GEMM peak  %.1f GFLOP/s over all ranks (measured now; MFU is relative to it)\n", t.gemm_gflops);
        if (o->metrics_path && !(t.metrics = fopen(o->metrics_path, "w")))
            st = par_set_error(PAR_EIO, "--metrics %s: cannot open for writing: %s", o->metrics_path, strerror(errno));
        metrics_memory(t.metrics, "memory_plan", t.plan.bytes, plan_total(&t.plan));
    }
    t0 = now_s();
    loop_t0_us = trace_now(&t);
    for (i = 0; i < o->steps && st == PAR_OK; i++) {
        step_stats s;
        par_mem_report r;
        int64_t pk;
        st = train_step(&t, t.step - i + o->steps, &s);
        if (st == PAR_OK) st = t.ct->memory_report(t.ct->user, &r);
        if (st != PAR_OK) break;
        step_seconds += s.seconds;
        pk = r.peak_total;
        if (t.world > 1) st = scalar_collective(&t, t.world_group, &pk, PAR_I64, PAR_REDUCE_MAX, 0);
        if (pk > peak) peak = pk;
        if (st == PAR_OK && t.rank == 0) report_step(&t, &s, pk);
    }
    loop_t1_us = trace_now(&t);
    if (st == PAR_OK && t.rank == 0 && o->steps > 0) {
        par_mem_report r;
        if (t.ct->memory_report(t.ct->user, &r) == PAR_OK) {
            printf("  memory, planned vs measured peak on rank 0:\n");
            print_memory_header();
            print_memory_row("planned", t.plan.bytes, plan_total(&t.plan));
            print_memory_row("measured", r.peak, r.peak_total);
            metrics_memory(t.metrics, "memory_peak", r.peak, r.peak_total);
        }
        printf("trained %d steps in %.2f s\n", o->steps, now_s() - t0);
        if (t.trace) report_comm_share(&t, loop_t0_us, loop_t1_us, step_seconds);
    }
    if (st == PAR_OK && o->save_path) {
        const double s0 = trace_now(&t);
        st = save_checkpoint(&t, o->save_path);
        trace_span(&t, "io", s0, "save checkpoint");
        if (st == PAR_OK && t.rank == 0) printf("saved %s (+ optimizer state)\n", o->save_path);
    }
    /* every rank's timeline to rank 0, which writes the file (threads and mpi alike) */
    if (st == PAR_OK && t.trace) {
        st = par_trace_gather_write(ctx, t.trace, o->trace_path);
        if (st == PAR_OK && t.rank == 0)
            printf("trace: wrote %s (%d rank%s; open it in https://ui.perfetto.dev or chrome://tracing)\n",
                   o->trace_path, t.world, t.world == 1 ? "" : "s");
    }
    if (st == PAR_OK && t.dp_index == 0 && o->sample_tokens > 0) st = generate(&t, o->sample_tokens);
    if (t.metrics) fclose(t.metrics);
    fflush(stdout);
    trainer_free(&t);
    par_trace_destroy(t.trace);
    return st;
}

/* ---- main: every input checked before any rank starts ----------------------- */

static int dir_writable(const char *path) {
    char dir[1024];
    const char *slash = strrchr(path, '/');
    if (!slash) return access(".", W_OK) == 0;
    snprintf(dir, sizeof dir, "%.*s", (int)(slash - path) ? (int)(slash - path) : 1, path);
    return access(dir, W_OK) == 0;
}

static int bad_input(int quiet, const char *fmt, ...) PAR__PRINTF(2, 3);
static int bad_input(int quiet, const char *fmt, ...) {
    va_list ap;
    if (!quiet) {
        fprintf(stderr, "train: error: ");
        va_start(ap, fmt);
        vfprintf(stderr, fmt, ap);
        va_end(ap);
        fprintf(stderr, "\n");
    }
    return EXIT_BAD_INPUT;
}

int main(int argc, char **argv) {
    llama_options opt;
    llama_config cfg;
    llama_data data;
    shared_run sh;
    par_ctx_desc desc = {0};
    char err[1024], mesh[64];
    int world, launch_rank = 0, launch_size = 1, mpi = 0, nccl = 0, silent, has_opt = 0;
    int64_t step0 = 0;
    par_status st;
    memset(&data, 0, sizeof data);
    if (llama_parse_args(argc, argv, &opt, err, sizeof err) != 0) {
        fprintf(stderr, "train: error: %s (see --help)\n", err);
        return EXIT_BAD_INPUT;
    }
    if (opt.help) return llama_print_usage(stdout), 0;
    nccl = strcmp(opt.backend, "nccl") == 0;
    mpi = nccl || strcmp(opt.backend, "mpi") == 0; /* NCCL is launched by mpirun too */
    /* under mpirun only rank 0 reports input errors (all ranks find the same) */
    if (mpi && par_launch_env(&launch_rank, &launch_size, NULL) != PAR_OK) launch_rank = 0, launch_size = 1;
    silent = launch_rank != 0;
#if !defined(LLAMA_WITH_CUDA) || !defined(PARALLEL_WITH_MPI)
    if (nccl)
        return bad_input(silent, "--backend nccl needs the CUDA build of the trainer (build/train_cuda, made when "
                                 "nvcc, NCCL and mpicc exist); this build has the threads and mpi backends");
#endif
#ifndef PARALLEL_WITH_MPI
    if (mpi) return bad_input(silent, "--backend mpi: this build has no MPI (rebuild with mpicc)");
#endif
    if (llama_config_load(opt.config_path, opt.sets, opt.num_sets, &cfg, silent ? NULL : stderr, err, sizeof err) != 0)
        return bad_input(silent, "%s", err);
    if (opt.seed >= 0) cfg.seed = (uint64_t)opt.seed;
    world = cfg.data_parallel * cfg.model_parallel * cfg.pipeline_stage * cfg.context_parallel;
    if (!mpi && world > 256)
        return bad_input(silent, "the parallel degrees ask for %d ranks; the threads backend runs at most 256", world);
    if (mpi && launch_size != world)
        return bad_input(silent,
                         "the MPI world has %d ranks but parallel_config asks for %d (data_parallel %d x "
                         "model_parallel %d x pipeline_stage %d x context_parallel %d); run mpirun -np %d",
                         launch_size, world, cfg.data_parallel, cfg.model_parallel, cfg.pipeline_stage,
                         cfg.context_parallel, world);
    if (opt.steps > 0 || opt.sample_tokens > 0) {
        if (!opt.data_path) return bad_input(silent, "--data FILE is required to train or sample");
        if (data_load(opt.data_path, cfg.seq_length, &data, err, sizeof err) != 0) return bad_input(silent, "%s", err);
        if (opt.shuffle && data_shuffle(&data, cfg.seed) != 0) return bad_input(silent, "out of host memory");
    }
    if (opt.init_from) {
        if (check_init_files(opt.init_from, &cfg, &step0, &has_opt, err, sizeof err) != 0)
            return free(data.bytes), free(data.order), bad_input(silent, "%s", err);
    }
    if (opt.save_path && !dir_writable(opt.save_path))
        return free(data.bytes), free(data.order), bad_input(silent, "--save %s: its directory is not writable", opt.save_path);
    if (opt.metrics_path && !dir_writable(opt.metrics_path))
        return free(data.bytes), free(data.order),
               bad_input(silent, "--metrics %s: its directory is not writable", opt.metrics_path);
    if (opt.trace_path && !dir_writable(opt.trace_path))
        return free(data.bytes), free(data.order),
               bad_input(silent, "--trace %s: its directory is not writable", opt.trace_path);

    sh.cfg = &cfg, sh.opt = &opt, sh.data = &data, sh.world = world, sh.backend = opt.backend;
    sh.init_step = step0, sh.init_has_optimizer = has_opt;
    snprintf(mesh, sizeof mesh, "dp=%d,tp=%d", cfg.data_parallel, cfg.model_parallel);
    desc.mesh = mesh;
    if (mpi) {
        par_ctx *ctx = NULL;
#if defined(LLAMA_WITH_CUDA) && defined(PARALLEL_WITH_MPI)
        st = nccl ? par_ctx_init_nccl(&desc, &ctx) : par_ctx_init_mpi(&desc, &ctx);
#else
        st = par_ctx_init_mpi(&desc, &ctx);
#endif
        if (st == PAR_OK) {
            st = rank_main(ctx, &sh);
            if (st != PAR_OK) fprintf(stderr, "train: rank %d: %s\n", par_ctx_rank(ctx), par_last_error());
            par_ctx_destroy(ctx);
        } else {
            fprintf(stderr, "train: %s\n", par_last_error());
        }
#if defined(LLAMA_WITH_CUDA) && defined(PARALLEL_WITH_MPI)
        { /* the NCCL context leaves MPI_Finalize to its host */
            int finalized = 0;
            MPI_Finalized(&finalized);
            if (nccl && !finalized) MPI_Finalize();
        }
#endif
    } else {
        st = par_run_threads_desc(&desc, world, rank_main, &sh);
        if (st != PAR_OK) fprintf(stderr, "train: %s\n", par_last_error());
    }
    free(data.bytes), free(data.order);
    return st == PAR_OK ? 0 : EXIT_RUN_FAILED;
}
