/* examples/llama/train.c - a Llama trainer on parallel.h (build/train).

   Reads like llm.c's train_gpt2.c, top to bottom:
     1. data: byte tokens, deterministic sample order, data-parallel sharding
     2. the model's tensors: Hugging Face names and shapes, placed on the mesh
     3. memory plan: every buffer sized from the dims before anything runs
     4. init: counter-based normal(0, std) keyed by (seed, name, element)
     5. checkpoints: safetensors in/out (weights + AdamW state), consolidated
        (Hugging Face names, one file) or sharded (par_params_save/load)
     6. the training step: micro-batches, forward, backward, optimizer
     7. reporting: start-up summary, per-step lines, JSON metrics
     8. sampling, the rank body, main (input checks before any rank starts)

   The trainer holds the model math (model.h) and the configuration
   (config.h); the parallelism is parallel.h's: the parameters are a
   par_params set (buffers, bucketed gradient reduction overlapped with
   backward, ZeRO-1/2, the global norm, AdamW, gather for checkpoints) and the
   layers run in a par_tp region (column/row-parallel linears from MindSpore
   strategies, sequence parallelism, the vocabulary-parallel loss). The
   trainer never computes a group, a shard size or a bucket.

   --trace FILE.json records every rank's timeline (par_trace, Chrome trace
   JSON for Perfetto): compute spans per layer and micro-batch, each gradient
   bucket's collective from issue to the end of its wait, the optimizer, the
   batch loading and the checkpoint save; with tracing off every hook is one
   NULL test.
   Exit status: 0 done, 2 bad input (nothing written), 1 failure while running. */
#define _POSIX_C_SOURCE 200809L
#define PARALLEL_IMPLEMENTATION
#include "parallel.h"
#ifdef LLAMA_WITH_CUDA /* build/train_cuda: the CUDA compute table and NCCL (--backend nccl), or every
                         rank a thread on one GPU (--backend cuda-threads) */
#define PARALLEL_CUDA_DECLARATIONS_ONLY
#include "parallel_cuda.cu"
#endif
#define LLAMA_CONFIG_IMPLEMENTATION
#include "examples/llama/config.h"
#include "examples/llama/model.h"
#include "examples/llama/auto.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

enum { EXIT_BAD_INPUT = 2, EXIT_RUN_FAILED = 1 };

/* ============================================================================
   1. data
   ========================================================================== */

/* --data FILE: text read as bytes (tokens 0..255), or a token file in
   llm.c's format (the tokens stay on disk; each rank reads the samples it
   trains on, when it trains on them): a header of 256 little-endian int32,
   [0] the magic (20240520: uint16 tokens, GPT-2's files; 20240801: uint32,
   Llama 3's), [1] the version 1, [2] the token count, then the tokens. */
#define LLAMA_TOKENS_U16 20240520
#define LLAMA_TOKENS_U32 20240801
#define LLAMA_TOKENS_HEADER 1024 /* bytes */

typedef struct llama_data {
    unsigned char *bytes;     /* text: the whole file */
    FILE *tokens;             /* a token file, read with pread (thread-safe: every rank thread reads its own) */
    int token_bytes;          /* 2 or 4 (a token file), 0 (text) */
    int64_t len, num_samples; /* tokens; sample i: inputs [i*T, i*T+T), targets shifted by one */
    int64_t *order;           /* --shuffle: a permutation of the samples; NULL = identity */
} llama_data;

static void data_free(llama_data *d) {
    free(d->bytes), free(d->order);
    if (d->tokens) fclose(d->tokens);
    memset(d, 0, sizeof *d);
}

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

/* A token file's little-endian values: int32 k of the header, and token i of
   a buffer of tb-byte tokens (2: uint16, 4: uint32). */
static uint32_t le32(const unsigned char *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static int32_t tokens_header_word(const unsigned char *h, int k) { return (int32_t)le32(h + 4 * k); }
static uint32_t token_at(const unsigned char *buf, int tb, int64_t i) {
    return tb == 2 ? (uint32_t)buf[2 * i] | (uint32_t)buf[2 * i + 1] << 8 : le32(buf + 4 * i);
}

/* A token file (its header read into h): check the header against the file's
   size and every token against the vocabulary, streaming (the file is never
   held whole); it stays open for the ranks' reads. */
static int tokens_open(const char *path, FILE *f, const unsigned char *h, long size, int64_t seq, int64_t vocab,
                       llama_data *d, char *err, size_t errsize) {
    const int32_t magic = tokens_header_word(h, 0), version = tokens_header_word(h, 1), count = tokens_header_word(h, 2);
    const int tb = magic == LLAMA_TOKENS_U16 ? 2 : 4;
    unsigned char buf[1 << 16];
    int64_t at = 0, want;
    if (version != 1)
        return snprintf(err, errsize, "--data %s: a token file of version %d; version 1 is read (llm.c's format)", path,
                        (int)version), -1;
    if (count < 0 || (int64_t)size != LLAMA_TOKENS_HEADER + (int64_t)count * tb)
        return snprintf(err, errsize, "--data %s: its header says %d tokens of %d bytes (%lld bytes with the header) "
                                      "but the file has %ld bytes: truncated or not a token file",
                        path, (int)count, tb, (long long)(LLAMA_TOKENS_HEADER + (int64_t)count * tb), size), -1;
    if (count < seq + 1)
        return snprintf(err, errsize, "--data %s has %d tokens; model.model_config.seq_length = %lld needs at least %lld",
                        path, (int)count, (long long)seq, (long long)seq + 1), -1;
    for (want = count; at < want;) { /* every token inside the vocabulary, said where it is not */
        const int64_t n = want - at < (int64_t)sizeof buf / tb ? want - at : (int64_t)sizeof buf / tb;
        int64_t i;
        if (fread(buf, (size_t)tb, (size_t)n, f) != (size_t)n)
            return snprintf(err, errsize, "--data %s: read failed at token %lld", path, (long long)at), -1;
        for (i = 0; i < n; i++) {
            const uint32_t v = token_at(buf, tb, i);
            if ((int64_t)v >= vocab)
                return snprintf(err, errsize, "--data %s: token %lld is %u, outside model.model_config.vocab_size = %lld",
                                path, (long long)(at + i), v, (long long)vocab), -1;
        }
        at += n;
    }
    d->tokens = f, d->token_bytes = tb, d->len = count;
    d->num_samples = (count - 1) / seq;
    return 0;
}

/* Sample s's T + 1 tokens (inputs and the targets one further) into ids. */
static int data_window(const llama_data *d, int64_t s, int64_t T, int32_t *ids) {
    int64_t k;
    if (!d->tokens) {
        for (k = 0; k <= T; k++) ids[k] = d->bytes[s * T + k];
        return 0;
    }
    {
        unsigned char buf[4 * 4096];
        const int tb = d->token_bytes;
        for (k = 0; k <= T;) {
            const int64_t n = T + 1 - k < 4096 ? T + 1 - k : 4096;
            const off_t at = (off_t)(LLAMA_TOKENS_HEADER + (s * T + k) * tb);
            int64_t i;
            if (pread(fileno(d->tokens), buf, (size_t)(n * tb), at) != (ssize_t)(n * tb)) return -1;
            for (i = 0; i < n; i++) ids[k + i] = (int32_t)token_at(buf, tb, i); /* < vocab: checked at load */
            k += n;
        }
    }
    return 0;
}

static int data_load(const char *path, int64_t seq, int64_t vocab, llama_data *d, char *err, size_t errsize) {
    struct stat sb;
    FILE *f;
    long n;
    unsigned char head[LLAMA_TOKENS_HEADER];
    memset(d, 0, sizeof *d);
    if (stat(path, &sb) == 0 && !S_ISREG(sb.st_mode)) /* a FIFO would block the open, a directory reads nothing */
        return snprintf(err, errsize, "--data %s: not a regular file", path), -1;
    f = fopen(path, "rb");
    if (!f) return snprintf(err, errsize, "--data %s: cannot open: %s", path, strerror(errno)), -1;
    if (fseek(f, 0, SEEK_END) != 0 || (n = ftell(f)) < 0 || fseek(f, 0, SEEK_SET) != 0) {
        snprintf(err, errsize, "--data %s: cannot read its size (not a regular file?)", path);
        return fclose(f), -1;
    }
    if (n >= LLAMA_TOKENS_HEADER && fread(head, 1, sizeof head, f) == sizeof head &&
        (tokens_header_word(head, 0) == LLAMA_TOKENS_U16 || tokens_header_word(head, 0) == LLAMA_TOKENS_U32)) {
        if (tokens_open(path, f, head, n, seq, vocab, d, err, errsize) != 0) return fclose(f), -1;
        return 0; /* f stays open: the ranks read their samples from it */
    }
    if (fseek(f, 0, SEEK_SET) != 0) return snprintf(err, errsize, "--data %s: cannot read it", path), fclose(f), -1;
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
   2. the model's tensors
   ========================================================================== */

/* Tensor i: 0 the embedding, 1 + P l + k block l's k-th (P = per_block: the 9
   weights of every Llama block, then with qkv_bias the 3 biases of q/k/v, so a
   block's tensors stay consecutive: one gradient bucket), then the final norm
   and lm_head (Hugging Face names). */
enum { LLAMA_PER_BLOCK = 9, LLAMA_QKV_BIASES = 3 };

typedef struct tensor_spec {
    char name[80];
    int ndim;
    int64_t shape[2];
    int zero_init; /* starts at 0 (biases, as Hugging Face initializes them), not at 1 like a norm */
} tensor_spec;

static llama_dims dims_from_config(const llama_config *c) {
    llama_dims d;
    memset(&d, 0, sizeof d);
    d.vocab = c->vocab_size, d.dim = c->hidden_size, d.layers = c->num_layers, d.heads = c->num_heads;
    d.kv_heads = c->n_kv_heads ? c->n_kv_heads : c->num_heads, d.head_dim = c->hidden_size / c->num_heads;
    d.ffn = c->intermediate_size, d.seq = c->seq_length, d.eps = c->rms_norm_eps, d.theta = c->theta;
    d.qkv_bias = c->qkv_has_bias;
    return d;
}

static int per_block(const llama_dims *d) { return LLAMA_PER_BLOCK + (d->qkv_bias ? LLAMA_QKV_BIASES : 0); }
static int num_tensors(const llama_dims *d) { return 3 + (int)d->layers * per_block(d); }
static int t_block(const llama_dims *d, int l, int k) { return 1 + l * per_block(d) + k; }

static const char *const block_names[LLAMA_PER_BLOCK + LLAMA_QKV_BIASES] = {
    "input_layernorm.weight", "self_attn.q_proj.weight", "self_attn.k_proj.weight",
    "self_attn.v_proj.weight", "self_attn.o_proj.weight", "post_attention_layernorm.weight",
    "mlp.gate_proj.weight",   "mlp.up_proj.weight",      "mlp.down_proj.weight",
    "self_attn.q_proj.bias",  "self_attn.k_proj.bias",   "self_attn.v_proj.bias"};

/* Every tensor's name and global shape; returns their count (specs holds num_tensors). */
static int tensor_specs(const llama_dims *d, tensor_spec *specs) {
    const int64_t qd = d->heads * d->head_dim, kvd = d->kv_heads * d->head_dim, n = num_tensors(d);
    const int64_t shapes[LLAMA_PER_BLOCK + LLAMA_QKV_BIASES][2] = {
        {d->dim, 0}, {qd, d->dim},     {kvd, d->dim},    {kvd, d->dim},    {d->dim, qd}, {d->dim, 0},
        {d->ffn, d->dim}, {d->ffn, d->dim}, {d->dim, d->ffn}, {qd, 0},     {kvd, 0},     {kvd, 0}};
    int l, k;
    tensor_spec *s;
    memset(specs, 0, (size_t)n * sizeof *specs);
    snprintf(specs[0].name, sizeof specs[0].name, "model.embed_tokens.weight");
    specs[0].ndim = 2, specs[0].shape[0] = d->vocab, specs[0].shape[1] = d->dim;
    for (l = 0; l < d->layers; l++)
        for (k = 0; k < per_block(d); k++) {
            s = &specs[t_block(d, l, k)];
            snprintf(s->name, sizeof s->name, "model.layers.%d.%s", l, block_names[k]);
            s->ndim = shapes[k][1] ? 2 : 1, s->shape[0] = shapes[k][0], s->shape[1] = shapes[k][1];
            s->zero_init = k >= LLAMA_PER_BLOCK;
        }
    s = &specs[n - 2];
    snprintf(s->name, sizeof s->name, "model.norm.weight");
    s->ndim = 1, s->shape[0] = d->dim;
    s = &specs[n - 1];
    snprintf(s->name, sizeof s->name, "lm_head.weight");
    s->ndim = 2, s->shape[0] = d->vocab, s->shape[1] = d->dim;
    return (int)n;
}

static int64_t spec_numel(const tensor_spec *s) { return s->ndim == 2 ? s->shape[0] * s->shape[1] : s->shape[0]; }

/* ============================================================================
   3. memory plan
   ========================================================================== */

typedef struct mem_plan {
    int64_t bytes[PAR_MEM_CATEGORY_COUNT];
} mem_plan;

typedef struct llama_sizes {
    int64_t batch, seq, n; /* micro-batch samples on this rank, tokens per sample, rows */
} llama_sizes;

/* Side of the square GEMM that measures the machine's peak at start-up: 384,
   or less while its three matrices do not fit in the backward scratch. */
static int64_t gemm_probe_side(const llama_model *m, const llama_sizes *s) {
    const int64_t room = llama_scratch_carve(m, s->n, NULL, NULL);
    /* A GPU runs a 384-square GEMM in microseconds, bound by the launch, not the
       arithmetic (an H100 gave 4.7 TFLOP/s there against 50 at 4096, and MFUs
       over 100%): on a device table probe as large a square as the scratch holds. */
    const llama_dims *d = &m->local;
    int64_t n = m->ct->device_memory ? 4096 : 384, widest = d->dim;
    /* and no wider than the model's own GEMMs: the table's scratch (its bound planned from
       the model's shapes) then does not grow with the probe */
    if (d->heads * d->head_dim > widest) widest = d->heads * d->head_dim;
    if (d->ffn > widest) widest = d->ffn;
    if (d->vocab > widest) widest = d->vocab;
    if (n > widest) n = widest / 16 * 16 > 16 ? widest / 16 * 16 : 16;
    while (n > 16 && 3 * n * n * m->esize > room) n -= 16;
    return n;
}

/* The scratch the compute table keeps for itself (the CPU table's GEMM packing,
   the CUDA table's attention row sums) for this rank's work, from the table's
   own bound: the model's GEMMs are [rows, in] x [out, in]^T and its two
   backward products (model.h), so m is a row count or a feature count, n a
   feature count and k any of them; plus the peak probe. */
static par_status plan_table_scratch(const llama_model *m, const llama_sizes *s, int64_t *bytes) {
    const par_compute_table *ct = m->ct;
    const llama_dims *d = &m->local;
    const int64_t probe = gemm_probe_side(m, s);
    int64_t feat = d->dim;
    par_scratch_query q;
    size_t b = 0;
    *bytes = 0;
    if (!ct->scratch_bound) return PAR_OK;
    memset(&q, 0, sizeof q);
    if (d->heads * d->head_dim > feat) feat = d->heads * d->head_dim;
    if (d->kv_heads * d->head_dim > feat) feat = d->kv_heads * d->head_dim;
    if (d->ffn > feat) feat = d->ffn;
    if (d->vocab > feat) feat = d->vocab;
    if (probe > feat) feat = probe;
    q.gemm_m = q.gemm_k = s->n > feat ? s->n : feat;
    q.gemm_n = feat;
    q.attn_rows = s->batch * d->heads * d->seq;
    if (m->dtype != PAR_F32) { /* what a 16-bit model asks of the table's staging */
        q.gemm_type = q.attn_type = q.act_type = m->dtype;
        q.attn_q_elems = s->batch * d->seq * d->heads * d->head_dim;
        q.attn_kv_elems = s->batch * d->seq * d->kv_heads * d->head_dim;
        q.act_cols = feat > d->heads * d->head_dim ? feat : d->heads * d->head_dim;
    }
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
    const char *backend; /* "threads", "mpi", "nccl" or "cuda-threads" */
    int64_t init_step; /* --init-from: the step its optimizer file records (0 without one) */
    int init_has_optimizer;
    int init_sharded;  /* --init-from names a sharded checkpoint directory */
    const char *init_root; /* ... under this root (checked idle: no other run writing it) */
} shared_run;

/* What one copy of a micro-batch runs on (multi-copy: micro_batch_interleave_num):
   the model placed on its own tensor-parallel region, its activations and scratch. */
typedef struct lane {
    llama_model model;
    llama_acts acts;
    llama_scratch scratch;
    void *acts_base, *scratch_base;
} lane;

typedef struct trainer {
    par_ctx *ctx;
    const par_compute_table *ct;
    const llama_config *cfg;
    const llama_options *opt;
    const llama_data *data;
    int rank, world;
    uint32_t all_dims;        /* every device dim of the mesh (metrics over all ranks) */
    par_layout tokens_layout; /* [global batch, seq] split over the data-parallel ranks */
    int shard_id, num_shards; /* this rank's shard of the batch (MindSpore shard_id / num_shards) */
    int global_batch;
    par_tp *tp;               /* the tensor-parallel region the layers run in */
    par_cp *cp;               /* context parallelism (attention over split samples), or NULL */
    /* pipeline (pipeline_stage > 1): this rank's stage of the layers, run by
       parallel.h's >>pipeline executor; with one stage every map is the identity */
    int pp, chunks, stage;    /* stages, model chunks per rank, this rank's stage */
    uint32_t pp_dims;         /* the mesh dims of the pp axis */
    int *layer_of;            /* this rank's layer j -> the model's layer */
    par_recompute_mode *recompute; /* this rank's layer j -> what it keeps (recompute_config) */
    int chunk_first[65];      /* chunk c holds this rank's layers [chunk_first[c], chunk_first[c+1]) */
    int *pidx;                /* the model's tensor i -> its index in this rank's parameter set, -1: another stage */
    par_pp_schedule *sched;
    int nslots;               /* activation slots: micro-batches in flight on this rank at most */
    llama_acts *slots;        /* slot k (slots[0] is `acts`) */
    void **slot_base;
    int *slot_of, *slot_busy; /* micro-batch -> slot (-1 none); slot in use */
    int *chunks_left;         /* per micro-batch: chunk backwards still to run on this rank */
    int *bwd_done;            /* per chunk: input-gradient passes (B or I) run this step, then (at V + chunk)
                                 weight-gradient passes (B or W): each chunk's gradients are complete
                                 at the m-th of its kind (a schedule may mix B with I and W) */
    char *bnd;                /* boundary tensors [set][chunk][4][rows x hidden] of the compute type */
    int nbnd;                 /* boundary sets: micro-batch mb uses set mb % nbnd (par_pp_schedule_buffer_sets) */
    double pp_loss, pp_count; /* this step's summed losses and tokens (the last stage's) */
    int64_t *cp_pos;          /* positions of this rank's tokens in a sample (context parallel) */
    llama_model model;
    par_params *ps;           /* the parameters, their gradients and AdamW state */
    int ntensors;
    tensor_spec *specs;
    llama_sizes sz;
    int micro_batches;
    mem_plan plan;

    llama_acts acts;
    llama_scratch scratch;
    void *acts_base, *scratch_base; /* the two allocations acts and scratch are carved from */
    int copies;               /* micro_batch_interleave_num or fine_grain_interleave: lanes[k] (lanes[0]
                                 mirrors the above) */
    int fine_grain;           /* the copies rejoin after every pass (fine_grain_interleave) */
    int pass;                 /* fine-grained: the pass the slices run now */
    par_copies *mc;
    lane *lanes;
    int32_t *host_ids, *host_tgt, *host_window; /* host_window: one sample's seq_length + 1 tokens */
    int64_t *host_pos;
    float *host_losses;

    par_loss_scale ls;    /* runner_wrapper.scale_sense (use_ls): the loss is scaled by ls.scale in backward */
    int use_ls;
    int64_t step;         /* steps done (from a checkpoint: continues there) */
    double gemm_gflops;   /* the machine's measured GEMM peak, summed over ranks */
    FILE *metrics;
    par_trace *trace;     /* --trace: this rank's timeline; NULL = tracing off */
} trainer;

/* This rank's parameter index of the model's tensor i (its own stage's). */
static int local_param(const trainer *t, int i) { return t->pidx[i]; }

/* ---- --trace hooks: with t->trace NULL each is a single test ---------------- */

static double trace_now(const trainer *t) { return t->trace ? par_trace_now_us() : 0.0; }

/* A span [t0_us, now] named by the format (only formatted when tracing). The
   status is not checked: the categories are fixed, so the only failure would
   be a programming error, which par_trace_gather_write reports at the end. */
static void trace_span(trainer *t, const char *category, double t0_us, const char *fmt, ...) LLAMA_PRINTF(4, 5);
static void trace_span(trainer *t, const char *category, double t0_us, const char *fmt, ...) {
    char name[PAR_TRACE_NAME_MAX];
    va_list ap;
    if (!t->trace) return;
    va_start(ap, fmt);
    vsnprintf(name, sizeof name, fmt, ap);
    va_end(ap);
    (void)par_trace_span(t->trace, name, category, t0_us, par_trace_now_us());
}

static par_status alloc_bytes(trainer *t, int64_t bytes, par_mem_category cat, void **ptr) {
    *ptr = NULL;
    return bytes > 0 ? t->ct->alloc(t->ct->user, (size_t)bytes, cat, ptr) : PAR_OK;
}

/* Context parallel: each rank holds some tokens of every sample (the tokens
   layout splits seq over cp) and attention runs through par_cp with this
   rank's heads; the positions say which tokens to load. */
static par_status make_cp(trainer *t) {
    const llama_config *c = t->cfg;
    const llama_model *m = &t->model;
    par_cp_desc d;
    if (c->context_parallel == 1) return PAR_OK;
    memset(&d, 0, sizeof d);
    d.tokens = &t->tokens_layout, d.contiguous = !c->context_parallel_zigzag;
    LLAMA_CHECK(par_cp_algo_parse(c->context_parallel_algo, &d.algo));
    d.ulysses_degree = c->ulysses_degree_in_cp, d.no_all_to_all = !c->enable_alltoall, d.trace = t->trace;
    d.batch = (int)t->sz.batch, d.heads = (int)m->local.heads, d.kv_heads = (int)m->local.kv_heads;
    d.head_dim = (int)m->local.head_dim, d.dtype = m->dtype;
    LLAMA_CHECK(par_cp_create(t->ctx, &d, &t->cp));
    if (!(t->cp_pos = (int64_t *)malloc((size_t)t->sz.seq * sizeof(int64_t)))) return par_set_error(PAR_ENOMEM, "out of host memory");
    LLAMA_CHECK(par_cp_positions(t->cp, t->cp_pos));
    return llama_model_set_cp(&t->model, t->cp);
}

/* Whether a schedule splits backward in I and W (then the model must too). */
static int schedule_splits_backward(const par_pp_schedule *s) {
    int r, k, n;
    for (r = 0; r < par_pp_schedule_stages(s); r++) {
        const par_pp_action *a = par_pp_schedule_actions(s, r, &n);
        for (k = 0; k < n; k++)
            if (a[k].op == PAR_PP_I || a[k].op == PAR_PP_W) return 1;
    }
    return 0;
}

/* The strategies of the model's operators, MindSpore style: the
   column-parallel MatMuls (q/k/v, gate, up, lm_head) split the rows of x over
   dp and W's output over tp; the row-parallel ones (o, down) split the
   contraction over tp. Placing every tensor from them is par_tp's job. */
static par_status place_model(trainer *t) {
    const llama_config *c = t->cfg;
    const llama_dims d = dims_from_config(c);
    par_tp_desc td;
    memset(&td, 0, sizeof td);
    /* the region's rows are the tokens of one context-parallel slice of the batch */
    td.rows = (int64_t)t->global_batch / t->micro_batches * c->seq_length / c->context_parallel, td.hidden = d.dim;
    td.column = "((dp,1),(tp,1))", td.row = "((dp,tp),(1,tp))", td.sequence_parallel = c->use_seq_parallel && c->model_parallel > 1;
    td.no_all_to_all = !c->enable_alltoall, td.trace = t->trace;
    td.dtype = (par_dtype)c->compute_dtype; /* activations move in the compute type */
    if (t->copies > 1) { /* multi-copy: every copy its own region over its share of the rows */
        int k;
        td.rows /= t->copies;
        LLAMA_CHECK(par_copies_create(t->ctx, t->copies, t->trace, &t->mc));
        if (!(t->lanes = (lane *)calloc((size_t)t->copies, sizeof(lane))))
            return par_set_error(PAR_ENOMEM, "out of host memory");
        for (k = 1; k < t->copies; k++) {
            par_tp *tp;
            td.copies = t->mc, td.copy = k;
            LLAMA_CHECK(par_tp_create(t->ctx, &td, &tp));
            if (llama_model_place(&t->lanes[k].model, t->ct, tp, &d, !c->vocab_emb_dp) != PAR_OK)
                return par_tp_destroy(tp), PAR_EINVAL;
        }
        td.copies = t->mc, td.copy = 0;
    }
    LLAMA_CHECK(par_tp_create(t->ctx, &td, &t->tp));
    LLAMA_CHECK(llama_model_place(&t->model, t->ct, t->tp, &d, !c->vocab_emb_dp));
    /* zero bubble: backward runs as I then W, the slot keeps what W needs */
    t->model.split_backward = t->sched && schedule_splits_backward(t->sched);
    t->model.recompute = t->recompute; /* read when the activations are carved */
    return make_cp(t);
}

/* --pp-schedule FILE: a schedule in par_pp_schedule_format's text form, for
   P stages, V chunks and m micro-batches, which must pass the checker (its
   message and grid are the error). main checks it before any rank starts
   (a bad file is bad input); each rank then loads it for itself. */
static par_status load_schedule(const char *path, int P, int V, int m, par_pp_schedule **out) {
    FILE *f = fopen(path, "rb");
    char *text = NULL, grid[4096], why[512];
    long size;
    par_status st;
    *out = NULL;
    if (!f) return par_set_error(PAR_EIO, "--pp-schedule %s: cannot open: %s", path, strerror(errno));
    if (fseek(f, 0, SEEK_END) != 0 || (size = ftell(f)) < 0 || fseek(f, 0, SEEK_SET) != 0 || size > (64l << 20))
        return fclose(f), par_set_error(PAR_EIO, "--pp-schedule %s: cannot read it (or larger than 64 MiB)", path);
    if (!(text = (char *)malloc((size_t)size + 1))) return fclose(f), par_set_error(PAR_ENOMEM, "out of host memory");
    if (fread(text, 1, (size_t)size, f) != (size_t)size)
        return free(text), fclose(f), par_set_error(PAR_EIO, "--pp-schedule %s: read failed", path);
    fclose(f);
    text[size] = 0;
    st = par_pp_schedule_parse(text, out);
    free(text);
    snprintf(why, sizeof why, "%s", par_last_error()); /* par_set_error below writes where it points */
    if (st != PAR_OK) return par_set_error(st, "--pp-schedule %s: %s", path, why);
    if (par_pp_schedule_stages(*out) != P || par_pp_schedule_chunks(*out) != V ||
        par_pp_schedule_micro_batches(*out) != m)
        st = par_set_error(PAR_EINVAL, "--pp-schedule %s: stages=%d chunks=%d micro_batches=%d, but the config has "
                                       "parallel_config.pipeline_stage %d, pp_interleave_num %d and "
                                       "parallel_config.micro_batch_num %d", path, par_pp_schedule_stages(*out),
                           par_pp_schedule_chunks(*out), par_pp_schedule_micro_batches(*out), P, V, m);
    grid[0] = 0;
    if (st == PAR_OK && (st = par_pp_schedule_check(*out, NULL, grid, sizeof grid)) != PAR_OK) {
        snprintf(why, sizeof why, "%s", par_last_error());
        st = par_set_error(st, "--pp-schedule %s: %s\n%s", path, why, grid);
    }
    if (st != PAR_OK) par_pp_schedule_destroy(*out), *out = NULL;
    return st;
}


/* Layers of virtual stage vs (in model order; which rank and chunk hold it
   is the schedule's placement): an equal share, offset moving layers from
   the first to the last. */
static int stage_layers(const llama_config *c, int vs) {
    const int P = c->pipeline_stage, V = P > 1 ? c->pp_interleave_num : 1, per = c->num_layers / (P * V);
    return per - (vs == 0 && P * V > 1 ? c->offset : 0) + (vs == P * V - 1 && P * V > 1 ? c->offset : 0);
}

/* A recompute_config switch as parallel.h's rule. */
static void layer_rule(const llama_layer_counts *v, par_recompute_rule *r) {
    memset(r, 0, sizeof *r);
    r->all = v->all && !v->num, r->counts = v->counts, r->num_counts = v->num;
}

/* What each of the model's layers keeps (modes[num_layers]): recompute_config
   through par_recompute_layers, with the virtual stages' sizes; errors name
   the key. Checked in main before any rank starts, then used by each. */
static par_status recompute_modes(const llama_config *c, par_recompute_mode *modes) {
    const int P = c->pipeline_stage, V = P > 1 ? c->pp_interleave_num : 1;
    const llama_layer_counts *const keys[2] = {&c->recompute, &c->select_recompute};
    static const char *const names[2] = {"recompute_config.recompute", "recompute_config.select_recompute"};
    par_recompute_desc d;
    par_status st = PAR_OK;
    char why[512];
    int k, vs, *sizes = (int *)malloc(sizeof(int) * (size_t)(P * V));
    if (!sizes) return par_set_error(PAR_ENOMEM, "out of host memory");
    for (vs = 0; vs < P * V; vs++) sizes[vs] = stage_layers(c, vs);
    for (k = 0; k < 2 && st == PAR_OK; k++) { /* each alone first, so an error names its key */
        memset(&d, 0, sizeof d);
        d.stage_layers = sizes, d.stages = P, d.chunks = V;
        layer_rule(keys[k], k == 0 ? &d.full : &d.selective);
        if (keys[k]->rows && keys[k]->rows != V)
            st = par_set_error(PAR_EINVAL, "%s: %d chunk lists for %d chunk%s per stage (model.model_config.pp_interleave_num)",
                               names[k], keys[k]->rows, V, V == 1 ? "" : "s");
        else if ((st = par_recompute_layers(&d, modes, c->num_layers)) != PAR_OK)
            snprintf(why, sizeof why, "%s", par_last_error()), st = par_set_error(st, "%s: %s", names[k], why);
    }
    if (st == PAR_OK) {
        layer_rule(&c->recompute, &d.full), layer_rule(&c->select_recompute, &d.selective);
        st = par_recompute_layers(&d, modes, c->num_layers);
    }
    free(sizes);
    return st;
}

/* The pipeline's shape on this rank (identity maps with one stage): the
   model's layers split into pipeline_stage x pp_interleave_num virtual
   stages (offset moves layers from the first to the last), the schedule,
   this rank's chunks (the virtual stages its placement puts here: stage,
   stage + P, ... on loop; stage and 2P-1-stage on a V), which tensors live
   here (the embedding with virtual stage 0, the norm and head with the last,
   wherever they are) and how many micro-batches it keeps in flight here. */
static par_status pipeline_setup(trainer *t) {
    const llama_config *c = t->cfg;
    const int P = c->pipeline_stage, V = P > 1 ? c->pp_interleave_num : 1, L = c->num_layers;
    const llama_dims dims = dims_from_config(c); /* the model is placed after this */
    int start = 0, vs, ch, j = 0, i, k, *owned;
    par_recompute_mode *modes;
    t->pp = P, t->chunks = V;
    t->layer_of = (int *)malloc(sizeof(int) * (size_t)(L ? L : 1));
    t->recompute = (par_recompute_mode *)malloc(sizeof(par_recompute_mode) * (size_t)(L ? L : 1));
    t->pidx = (int *)malloc(sizeof(int) * (size_t)t->ntensors);
    owned = (int *)calloc((size_t)(L ? L : 1), sizeof(int));
    modes = (par_recompute_mode *)malloc(sizeof(par_recompute_mode) * (size_t)(L ? L : 1));
    if (!t->layer_of || !t->recompute || !t->pidx || !owned || !modes)
        return free(owned), free(modes), par_set_error(PAR_ENOMEM, "out of host memory");
    if (recompute_modes(c, modes) != PAR_OK) return free(owned), free(modes), PAR_EINVAL;
    if (P > 1) {
        const par_mesh *mesh = par_ctx_mesh(t->ctx);
        const int dim = par_mesh_dev_dim(mesh, "pp");
        int coords[PARALLEL_MAX_DIMS];
        LLAMA_CHECK(par_mesh_coords(mesh, t->rank, coords));
        t->pp_dims = 1u << dim, t->stage = coords[mesh->ndim - 1 - dim];
    }
    t->nslots = 1;
    if (P > 1) { /* the schedule first: its placement says where the layers go */
        par_pp_schedule_desc sd;
        par_status st;
        memset(&sd, 0, sizeof sd);
        sd.stages = P, sd.chunks = V, sd.micro_batches = t->micro_batches;
        st = par_pp_kind_parse(c->pipeline_scheduler, &sd.kind);
        if (V > 1 && sd.kind == PAR_PP_1F1B) sd.kind = PAR_PP_INTERLEAVED; /* pipeline_interleave's 1F1B */
        if (st == PAR_OK)
            st = t->opt->pp_schedule_path /* the user's own */
                     ? load_schedule(t->opt->pp_schedule_path, P, V, t->micro_batches, &t->sched)
                     : par_pp_schedule_make(&sd, &t->sched);
        if (st != PAR_OK) return free(owned), free(modes), st;
    }
    /* virtual stage vs holds layers [start, start + size) and lives where the
       schedule's placement says (a rank's chunks are its stages in model order) */
    for (ch = 0; ch < V; ch++) t->chunk_first[ch] = -1;
    for (vs = 0; vs < P * V; vs++) {
        const int size = stage_layers(c, vs);
        int rank = 0, chunk = vs;
        if (t->sched) (void)par_pp_schedule_stage_rank(t->sched, vs, &rank, &chunk); /* vs is in range */
        if (rank == t->stage) {
            t->chunk_first[chunk] = j;
            for (i = start; i < start + size; i++) t->recompute[j] = modes[i], t->layer_of[j++] = i, owned[i] = 1;
        }
        start += size;
    }
    free(modes);
    t->chunk_first[V] = j;
    { /* the embedding with the first virtual stage, the final norm and head with the last (with a V both on rank 0) */
        int first = 0, last = 0;
        if (t->sched) {
            (void)par_pp_schedule_stage_rank(t->sched, 0, &first, NULL);
            (void)par_pp_schedule_stage_rank(t->sched, P * V - 1, &last, NULL);
        }
        for (i = 0, k = 0; i < t->ntensors; i++) {
            const int layer = i >= 1 && i < t->ntensors - 2 ? (i - 1) / per_block(&dims) : -1;
            const int here = i == 0 ? t->stage == first : layer >= 0 ? owned[layer] : t->stage == last;
            t->pidx[i] = here ? k++ : -1;
        }
    }
    free(owned);
    if (P > 1) {
        int peak;
        /* a micro-batch holds a slot from its first forward here to its last backward */
        LLAMA_CHECK(par_pp_schedule_slots(t->sched, t->stage, &peak));
        t->nslots = peak > 0 ? peak : 1;
        /* boundary buffers for the micro-batches in flight only: mb uses set mb % nbnd
           (parallel.h's rule, safe for any schedule the checker passes) */
        LLAMA_CHECK(par_pp_schedule_buffer_sets(t->sched, &t->nbnd));
        t->slot_of = (int *)malloc(sizeof(int) * (size_t)t->micro_batches);
        t->chunks_left = (int *)malloc(sizeof(int) * (size_t)t->micro_batches);
        t->slot_busy = (int *)calloc((size_t)t->nslots, sizeof(int));
        t->bwd_done = (int *)calloc(2 * (size_t)V, sizeof(int));
        if (!t->slot_of || !t->chunks_left || !t->slot_busy || !t->bwd_done) return par_set_error(PAR_ENOMEM, "out of host memory");
    }
    return PAR_OK;
}

/* The parameter set: every tensor's layout from its operator's placement,
   a gradient bucket per layer (the embedding, each block, the head), ZeRO
   from the config. */
static par_status make_params(trainer *t) {
    const llama_config *c = t->cfg;
    const llama_model *m = &t->model;
    par_param_desc *pd = (par_param_desc *)calloc((size_t)t->ntensors, sizeof *pd);
    par_params_desc desc;
    par_status st = PAR_OK;
    int l, k, buckets;
    if (!pd) return par_set_error(PAR_ENOMEM, "out of host memory");
    st = par_tp_embedding_param(&m->emb, t->specs[0].name, &pd[0]);
    for (l = 0; l < m->dims.layers && st == PAR_OK; l++) {
        const par_linear *lin[LLAMA_PER_BLOCK + LLAMA_QKV_BIASES] = {NULL,     &m->q,  &m->k,    &m->v,
                                                                     &m->o,    NULL,   &m->gate, &m->up,
                                                                     &m->down, &m->q,  &m->k,    &m->v};
        for (k = 0; k < per_block(&m->dims) && st == PAR_OK; k++) {
            const int i = t_block(&m->dims, l, k);
            const tensor_spec *s = &t->specs[i];
            st = k >= LLAMA_PER_BLOCK ? par_tp_linear_bias_param(t->tp, lin[k], s->name, &pd[i])
                 : lin[k]             ? par_tp_linear_param(lin[k], s->name, &pd[i])
                                      : par_tp_norm_param(t->tp, s->name, s->shape[0], &pd[i]);
        }
        pd[t_block(&m->dims, l, 0)].new_bucket = 1;
    }
    if (st == PAR_OK) st = par_tp_norm_param(t->tp, t->specs[t->ntensors - 2].name, m->dims.dim, &pd[t->ntensors - 2]);
    if (st == PAR_OK) st = par_tp_linear_param(&m->head, t->specs[t->ntensors - 1].name, &pd[t->ntensors - 1]);
    pd[t->ntensors - 2].new_bucket = 1;
    /* a pipeline stage describes only its own tensors (pidx says which), in the
       model's order; the other stages' are theirs */
    for (l = 0, k = 0, buckets = 0; l < t->ntensors; l++)
        if (t->pidx[l] >= 0) buckets += k == 0 || pd[l].new_bucket, pd[k++] = pd[l];
    memset(&desc, 0, sizeof desc);
    desc.params = pd, desc.num_params = k, desc.batch = &t->tokens_layout, desc.stage_dims = t->pp_dims;
    /* a pipelined step is one accumulation window: every bucket's gradient
       stays until the last micro-batch's backward (ZeRO-2 then holds them all);
       so it does under multi-copy, whose copies' gradients complete together */
    desc.grad_slots = t->pp > 1 || c->micro_batch_interleave_num > 1 ? buckets : 0;
    if (c->fine_grain_interleave > 1) desc.grad_slots = 0; /* its layers' gradients complete one by one */
    desc.zero_level = !c->enable_parallel_optimizer ? 0 : c->optimizer_level >= 2 ? 2 : 1;
    /* MindSpore's semantics: in data_parallel mode each rank's loss is the
       mean of its own samples and gradients_mean false sums the ranks'
       gradients; in semi/auto parallel the loss is the global batch's mean,
       so the gradient is one device's whatever gradients_mean says */
    desc.sum_gradients = c->parallel_mode == LLAMA_PARALLEL_MODE_DATA && !c->gradients_mean;
    desc.bucket_bytes = -1, desc.trace = t->trace;
    desc.compute_dtype = (par_dtype)c->compute_dtype; /* f32 masters and AdamW state, gradients f32 */
    if (st == PAR_OK) st = par_params_create(t->ctx, &desc, &t->ps);
    if (st == PAR_OK && c->scale_sense) { /* MindSpore's update cells as par_loss_scale */
        memset(&t->ls, 0, sizeof t->ls);
        t->ls.scale = c->loss_scale_value;
        t->ls.growth_factor = c->scale_factor, t->ls.backoff_factor = 1.0f / c->scale_factor;
        t->ls.growth_interval = c->scale_sense == 2 ? -1 : c->scale_window; /* Fixed: never changes */
        t->use_ls = 1;
        st = par_loss_scale_init(&t->ls);
    }
    free(pd);
    return st;
}

/* Elements of one boundary tensor of the pipeline: the residual stream this
   rank holds, in the compute type; and its bytes. */
static int64_t boundary_elems(const trainer *t) { return par_tp_rows(t->tp, t->sz.n) * t->model.local.dim; }
static int64_t boundary_bytes(const trainer *t) { return boundary_elems(t) * t->model.esize; }

/* Whether activation slot k holds the head's tensors: on the rank with the
   last (virtual) stage, and slot 0 everywhere (t->acts, what the rest of the
   trainer reads); a pipeline's other slots on the other stages never run the
   head, so 1F1B's first stage keeps p - 1 slots without it. */
/* Every slot of the rank holding the last virtual stage (the last rank on the
   loop placement, the first on the V) keeps the head's tensors; elsewhere
   only slot 0 (the trainer keeps the first whole). */
static int slot_has_head(const trainer *t, int k) {
    int head = t->pp - 1;
    if (t->pp > 1 && t->sched) par_pp_schedule_stage_rank(t->sched, t->pp * t->chunks - 1, &head, NULL);
    return k == 0 || t->pp == 1 || t->stage == head;
}

/* One activation slot: what a micro-batch keeps from forward to backward on
   this rank (all its layers, and the head's when slot_has_head). */
static par_status slot_alloc(trainer *t, llama_acts *a, void **base, int head) {
    const llama_model *m = &t->model;
    const int64_t n = t->sz.n;
    LLAMA_CHECK(alloc_bytes(t, n * (int64_t)sizeof(int32_t), PAR_MEM_ACTIVATIONS, (void **)&a->ids));
    LLAMA_CHECK(alloc_bytes(t, n * (int64_t)sizeof(int32_t), PAR_MEM_ACTIVATIONS, (void **)&a->targets));
    LLAMA_CHECK(alloc_bytes(t, n * (int64_t)sizeof(int64_t), PAR_MEM_ACTIVATIONS, (void **)&a->pos));
    a->blocks = (llama_block_acts *)calloc((size_t)(m->local.layers ? m->local.layers : 1), sizeof(llama_block_acts));
    if (!a->blocks) return par_set_error(PAR_ENOMEM, "out of host memory");
    LLAMA_CHECK(alloc_bytes(t, llama_acts_carve(m, n, t->sz.batch, head, NULL, NULL), PAR_MEM_ACTIVATIONS, base));
    llama_acts_carve(m, n, t->sz.batch, head, *base, a);
    return PAR_OK;
}

static par_status acts_alloc(trainer *t) {
    const llama_model *m = &t->model;
    const int64_t n = t->sz.n;
    int k;
    t->slots = (llama_acts *)calloc((size_t)t->nslots, sizeof(llama_acts));
    t->slot_base = (void **)calloc((size_t)t->nslots, sizeof(void *));
    if (!t->slots || !t->slot_base) return par_set_error(PAR_ENOMEM, "out of host memory");
    for (k = 0; k < t->nslots; k++) LLAMA_CHECK(slot_alloc(t, &t->slots[k], &t->slot_base[k], slot_has_head(t, k)));
    t->acts = t->slots[0], t->acts_base = t->slot_base[0];
    if (t->pp > 1)
        LLAMA_CHECK(alloc_bytes(t, (int64_t)t->nbnd * t->chunks * 4 * boundary_bytes(t), PAR_MEM_COMM,
                                (void **)&t->bnd));
    LLAMA_CHECK(alloc_bytes(t, llama_scratch_carve(m, n, NULL, NULL), PAR_MEM_WORKSPACE, &t->scratch_base));
    llama_scratch_carve(m, n, t->scratch_base, &t->scratch);
    LLAMA_CHECK(llama_scratch_init(m, n, &t->scratch));
    for (k = 1; k < t->copies; k++) { /* the other copies' activations and scratch */
        lane *l = &t->lanes[k];
        l->model.local.layers = m->local.layers, l->model.recompute = m->recompute;
        LLAMA_CHECK(slot_alloc(t, &l->acts, &l->acts_base, 1));
        LLAMA_CHECK(alloc_bytes(t, llama_scratch_carve(m, n, NULL, NULL), PAR_MEM_WORKSPACE, &l->scratch_base));
        llama_scratch_carve(m, n, l->scratch_base, &l->scratch);
        LLAMA_CHECK(llama_scratch_init(m, n, &l->scratch));
    }
    if (t->copies > 1) t->lanes[0].model = t->model, t->lanes[0].acts = t->acts, t->lanes[0].scratch = t->scratch;
    t->host_ids = (int32_t *)malloc((size_t)n * sizeof(int32_t));
    t->host_tgt = (int32_t *)malloc((size_t)n * sizeof(int32_t));
    t->host_pos = (int64_t *)malloc((size_t)n * sizeof(int64_t));
    t->host_losses = (float *)malloc((size_t)n * sizeof(float));
    t->host_window = (int32_t *)malloc((size_t)(t->cfg->seq_length + 1) * sizeof(int32_t));
    if (!t->host_ids || !t->host_tgt || !t->host_pos || !t->host_losses || !t->host_window)
        return par_set_error(PAR_ENOMEM, "out of host memory");
    return PAR_OK;
}

/* What this rank holds, per category, before anything is allocated past the
   parameter set: its own count plus the activations and scratch (the same
   carve functions that lay them out), the tp region's executor and the
   compute table's scratch. */
static par_status plan_memory(trainer *t) {
    const llama_model *m = &t->model;
    const int64_t n = t->sz.n;
    int64_t table = 0;
    int k;
    LLAMA_CHECK(par_params_memory(t->ps, t->plan.bytes));
    for (k = 0; k < t->nslots; k++)
        t->plan.bytes[PAR_MEM_ACTIVATIONS] += llama_acts_carve(m, n, t->sz.batch, slot_has_head(t, k), NULL, NULL) +
                                              n * (int64_t)(2 * sizeof(int32_t) + sizeof(int64_t));
    if (t->pp > 1) t->plan.bytes[PAR_MEM_COMM] += (int64_t)t->nbnd * t->chunks * 4 * boundary_bytes(t);
    /* multi-copy: every copy holds a micro-batch's share of activations, scratch and tp workspace */
    t->plan.bytes[PAR_MEM_ACTIVATIONS] += (t->copies - 1) * (llama_acts_carve(m, n, t->sz.batch, 1, NULL, NULL) +
                                                             n * (int64_t)(2 * sizeof(int32_t) + sizeof(int64_t)));
    t->plan.bytes[PAR_MEM_WORKSPACE] += t->copies * llama_scratch_carve(m, n, NULL, NULL);
    t->plan.bytes[PAR_MEM_COMM] += t->copies * par_tp_workspace_bytes(t->tp, n, m->local.dim);
    if (t->cp) {
        int64_t cp_bytes[PAR_MEM_CATEGORY_COUNT];
        int k;
        LLAMA_CHECK(par_cp_memory(t->cp, cp_bytes));
        for (k = 0; k < PAR_MEM_CATEGORY_COUNT; k++) t->plan.bytes[k] += cp_bytes[k];
    }
    LLAMA_CHECK(plan_table_scratch(m, &t->sz, &table));
    t->plan.bytes[PAR_MEM_WORKSPACE] += table;
    return PAR_OK;
}

static void trainer_free(trainer *t) {
    const par_compute_table *ct = t->ct;
    int k;
    for (k = 0; t->slots && k < t->nslots; k++) {
        void *ptrs[] = {t->slots[k].ids, t->slots[k].targets, t->slots[k].pos, t->slot_base[k]};
        size_t i;
        for (i = 0; ct && i < sizeof ptrs / sizeof ptrs[0]; i++)
            if (ptrs[i]) ct->free(ct->user, ptrs[i]);
        free(t->slots[k].blocks);
    }
    if (ct && t->scratch_base) ct->free(ct->user, t->scratch_base);
    for (k = 1; t->lanes && k < t->copies; k++) {
        lane *l = &t->lanes[k];
        void *ptrs[] = {l->acts.ids, l->acts.targets, l->acts.pos, l->acts_base, l->scratch_base};
        size_t i;
        for (i = 0; ct && i < sizeof ptrs / sizeof ptrs[0]; i++)
            if (ptrs[i]) ct->free(ct->user, ptrs[i]);
        free(l->acts.blocks);
        par_tp_destroy(l->model.tp);
    }
    free(t->lanes);
    if (ct && t->bnd) ct->free(ct->user, t->bnd);
    free(t->slots), free(t->slot_base), free(t->slot_of), free(t->slot_busy), free(t->chunks_left), free(t->bwd_done);
    free(t->layer_of), free(t->pidx), free(t->recompute);
    par_pp_schedule_destroy(t->sched);
    free(t->host_ids), free(t->host_tgt), free(t->host_pos), free(t->host_losses), free(t->host_window);
    par_params_destroy(t->ps);
    par_cp_destroy(t->cp);
    free(t->cp_pos);
    par_tp_destroy(t->tp);
    par_copies_destroy(t->mc);
    free(t->specs);
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

/* Every rank draws its own slice of every tensor (norms start at 1): the same
   weights in any configuration. */
static par_status init_params(trainer *t, uint64_t seed) {
    int i;
    par_status st = PAR_OK;
    for (i = 0; i < t->ntensors && st == PAR_OK; i++) {
        const tensor_spec *s = &t->specs[i];
        const uint64_t key = name_key(seed, s->name);
        par_param_info in;
        float *w;
        int64_t e;
        if (local_param(t, i) < 0) continue; /* another pipeline stage's */
        if ((st = par_params_get_info(t->ps, local_param(t, i), &in)) != PAR_OK) break;
        if (!(w = (float *)malloc((size_t)(in.numel ? in.numel : 1) * sizeof(float))))
            return par_set_error(PAR_ENOMEM, "out of host memory for the initial weights");
        for (e = 0; e < in.numel; e++) {
            /* the slice's element (r, c) is element (start0 + r, start1 + c) of the tensor */
            const int64_t r = s->ndim == 2 ? in.start[0] + e / in.local_shape[1] : 0;
            const int64_t c = s->ndim == 2 ? in.start[1] + e % in.local_shape[1] : 0;
            w[e] = s->zero_init ? 0.0f : s->ndim == 1 ? 1.0f : init_normal(key, r * s->shape[1] + c, t->cfg->initializer_range);
        }
        st = par_params_set_local(t->ps, PAR_PARAM_VALUE, local_param(t, i), w);
        free(w);
    }
    /* parallel.parameter_broadcast: copies take their group's first rank's
       weights (they are equal already: the draw is counter-based) */
    if (st == PAR_OK && t->cfg->parameter_broadcast) st = par_params_broadcast(t->ps);
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
static int check_tensor_file(par_st_file *f, const tensor_spec *specs, int count, const char *path,
                             const char *const *prefixes, int num_prefixes, char *err, size_t errsize) {
    int i, k, n = par_st_count(f);
    for (k = 0; k < num_prefixes; k++)
        for (i = 0; i < count; i++) {
            const tensor_spec *tn = &specs[i];
            const par_st_tensor *s;
            char name[128], got[96], want[96];
            snprintf(name, sizeof name, "%s%s", prefixes[k], tn->name);
            if (!(s = par_st_find(f, name))) return snprintf(err, errsize, "%s: tensor %s is missing", path, name), -1;
            if (s->dtype != PAR_F32 && s->dtype != PAR_BF16 && s->dtype != PAR_F16 && s->dtype != PAR_F64)
                return snprintf(err, errsize, "%s: tensor %s has dtype %s, expected a float type", path, name,
                                par_dtype_name(s->dtype)), -1;
            if (s->ndim == tn->ndim && s->shape[0] == tn->shape[0] && (tn->ndim == 1 || s->shape[1] == tn->shape[1]))
                continue;
            snprintf(got, sizeof got, "[");
            for (int j = 0; j < s->ndim && j < 4; j++)
                snprintf(got + strlen(got), sizeof got - strlen(got), "%s%lld", j ? "," : "", (long long)s->shape[j]);
            snprintf(got + strlen(got), sizeof got - strlen(got), "]");
            if (tn->ndim == 2) snprintf(want, sizeof want, "[%lld,%lld]", (long long)tn->shape[0], (long long)tn->shape[1]);
            else snprintf(want, sizeof want, "[%lld]", (long long)tn->shape[0]);
            return snprintf(err, errsize, "%s: tensor %s has shape %s, the model needs %s", path, name, got, want), -1;
        }
    /* every prefix found all model tensors, so a count above that is an extra tensor */
    if (n != num_prefixes * count)
        for (i = 0; i < n; i++) {
            const char *nm = par_st_tensor_at(f, i)->name;
            int known = 0, j;
            for (k = 0; k < num_prefixes && !known; k++) {
                size_t pl = strlen(prefixes[k]);
                for (j = 0; j < count && !known; j++)
                    known = strncmp(nm, prefixes[k], pl) == 0 && strcmp(nm + pl, specs[j].name) == 0;
            }
            if (!known) return snprintf(err, errsize, "%s: unexpected tensor %s (not part of this model)", path, nm), -1;
        }
    return 0;
}

static int check_one_file(const char *path, const tensor_spec *specs, int count, const char *const *prefixes,
                          int num_prefixes, int64_t *step_out, char *err, size_t errsize) {
    par_st_file *f = NULL;
    int rc;
    if (par_st_open(path, &f) != PAR_OK) return snprintf(err, errsize, "--init-from: %s", par_last_error()), -1;
    rc = check_tensor_file(f, specs, count, path, prefixes, num_prefixes, err, errsize);
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
    const llama_dims d = dims_from_config(cfg);
    tensor_spec *specs = (tensor_spec *)calloc((size_t)num_tensors(&d), sizeof *specs);
    char opath[1024];
    int rc, n;
    *step_out = 0, *has_opt = 0;
    if (!specs) return snprintf(err, errsize, "out of host memory"), -1;
    n = tensor_specs(&d, specs);
    rc = check_one_file(path, specs, n, weights, 1, NULL, err, errsize);
    optimizer_path(path, opath, sizeof opath);
    if (rc == 0 && access(opath, F_OK) == 0) {
        rc = check_one_file(opath, specs, n, moments, 2, step_out, err, errsize);
        *has_opt = rc == 0;
    }
    free(specs);
    return rc;
}

/* Every tensor's slice for this rank from the file (only its bytes are read;
   main verified the checksums), weights and, when present, the moments. */
static par_status load_checkpoint(trainer *t, const char *path, int has_opt) {
    static const char *const prefix[3] = {"", "exp_avg.", "exp_avg_sq."};
    char opath[1024], name[128];
    par_st_file *f = NULL;
    par_status st = PAR_OK;
    int k, i;
    optimizer_path(path, opath, sizeof opath);
    for (k = 0; k < (has_opt ? 3 : 1) && st == PAR_OK; k++) {
        if ((k == 0 || k == 1) && (st = par_st_open(k ? opath : path, &f)) != PAR_OK) break;
        for (i = 0; i < t->ntensors && st == PAR_OK; i++) {
            par_param_info in;
            float *buf;
            if ((st = par_params_get_info(t->ps, i, &in)) != PAR_OK) break;
            if (!(buf = (float *)malloc((size_t)(in.numel ? in.numel : 1) * sizeof(float)))) {
                st = par_set_error(PAR_ENOMEM, "out of host memory loading %s", path);
                break;
            }
            snprintf(name, sizeof name, "%s%s", prefix[k], t->specs[i].name);
            st = par_st_read_slice(f, name, &in.layout, t->rank, PAR_F32, buf);
            if (st == PAR_OK) st = par_params_set_local(t->ps, (par_param_field)k, i, buf);
            free(buf);
        }
        if (k != 1) par_st_close(f), f = NULL;
    }
    if (f) par_st_close(f);
    return st;
}

/* --save: weights (Hugging Face names, loadable by torch) and, beside them,
   the AdamW state with the step count. The parameter set gathers each tensor
   whole (ZeRO shards and tensor-parallel slices); rank 0 writes; each file is
   atomic. */
static par_status save_checkpoint(trainer *t, const char *path, par_dtype dt) {
    int64_t g = 0, *goff = (int64_t *)calloc((size_t)t->ntensors, sizeof(int64_t));
    float *host = NULL;
    char opath[1024], step[32];
    par_status st = PAR_OK;
    int32_t status = 0;
    int i, k;
    if (!goff) return par_set_error(PAR_ENOMEM, "out of host memory saving %s", path);
    for (i = 0; i < t->ntensors; i++) goff[i] = g, g += spec_numel(&t->specs[i]);
    if (t->rank == 0 && !(host = (float *)malloc((size_t)g * 3 * sizeof(float))))
        st = par_set_error(PAR_ENOMEM, "out of host memory saving %s", path); /* the others then time out, never hang */
    for (k = 0; k < 3 && st == PAR_OK; k++)
        for (i = 0; i < t->ntensors && st == PAR_OK; i++)
            st = par_params_gather(t->ps, (par_param_field)k, i, host ? host + k * g + goff[i] : NULL);
    if (st == PAR_OK && t->rank == 0) {
        par_st_writer *w = NULL;
        void *weights = host; /* --save-dtype: the weights rounded to it (the AdamW state stays f32) */
        snprintf(step, sizeof step, "%lld", (long long)t->step);
        optimizer_path(path, opath, sizeof opath);
        st = par_st_writer_create(path, &w);
        if (st == PAR_OK && dt != PAR_F32 && !(weights = malloc((size_t)g * par_dtype_size(dt))))
            st = par_set_error(PAR_ENOMEM, "out of host memory saving %s", path);
        if (st == PAR_OK && dt != PAR_F32) st = par_dtype_convert(g, PAR_F32, host, dt, weights);
        for (i = 0; i < t->ntensors && st == PAR_OK; i++)
            st = par_st_writer_add(w, t->specs[i].name, dt, t->specs[i].ndim, t->specs[i].shape,
                                   (const char *)weights + goff[i] * (int64_t)par_dtype_size(dt));
        if (st == PAR_OK) st = par_st_writer_finish(w);
        else if (w) par_st_writer_abort(w);
        if (weights != host) free(weights);
        w = NULL;
        /* one file with both moments, under two prefixes */
        if (st == PAR_OK) st = par_st_writer_create(opath, &w);
        for (i = 0; i < t->ntensors && st == PAR_OK; i++) {
            const tensor_spec *tn = &t->specs[i];
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
    free(host), free(goff);
    if (st != PAR_OK && t->rank != 0) return st;
    /* every rank learns whether rank 0's write worked (the others add 0); only rank 0 reports it */
    if (t->rank != 0) status = 0;
    LLAMA_CHECK(par_ctx_all_reduce_host(t->ctx, t->all_dims, PAR_REDUCE_SUM, PAR_I32, &status, 1));
    return t->rank == 0 ? st : PAR_OK;
}

/* The model's dimensions as text: stored in sharded checkpoints so that a
   resume under another model is refused by name before any rank starts. */
static void model_text(const llama_config *c, char *buf, size_t size) {
    const llama_dims d = dims_from_config(c);
    snprintf(buf, size, "vocab=%lld dim=%lld layers=%lld heads=%lld kv_heads=%lld ffn=%lld seq=%lld%s",
             (long long)d.vocab, (long long)d.dim, (long long)d.layers, (long long)d.heads, (long long)d.kv_heads,
             (long long)d.ffn, (long long)d.seq, d.qkv_bias ? " qkv_bias" : ""); /* absent when off: older checkpoints match */
}

/* --save-dir: every rank writes its own shard (parallel.h's sharded
   checkpoint); the host metadata is what a resume needs to continue the same
   data stream: the step (the data position is a function of it), the seed
   (and whether the order is shuffled with it), and the model. */
static par_status save_sharded(trainer *t) {
    char step[32], seed[32], shuffle[8], model[256];
    const char *keys[4] = {"train.step", "train.seed", "train.shuffle", "train.model"};
    const char *vals[4];
    par_ckpt_desc d = {0};
    snprintf(step, sizeof step, "%lld", (long long)t->step);
    snprintf(seed, sizeof seed, "%llu", (unsigned long long)t->cfg->seed);
    snprintf(shuffle, sizeof shuffle, "%d", t->opt->shuffle);
    model_text(t->cfg, model, sizeof model);
    vals[0] = step, vals[1] = seed, vals[2] = shuffle, vals[3] = model;
    d.dir = t->opt->save_dir, d.step = t->step, d.keep = t->opt->keep ? t->opt->keep : -1;
    d.meta_keys = keys, d.meta_values = vals, d.num_meta = 4;
    LLAMA_CHECK(par_params_save(t->ps, &d));
    if (t->rank == 0) printf("saved %s/step-%08lld (sharded, %d rank%s)\n", t->opt->save_dir, (long long)t->step,
                             t->world, t->world == 1 ? "" : "s");
    return PAR_OK;
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
    const int64_t warm = llama_config_warmup_steps(c, c->total_steps > 0 ? c->total_steps : total_steps);
    if (warm > 0 && step < warm) return c->learning_rate * (float)(step + 1) / (float)warm;
    if (strcmp(c->lr_schedule, "cosine") == 0) {
        const int64_t total = c->total_steps > 0 ? c->total_steps : total_steps;
        double progress = total > warm ? (double)(step - warm) / (double)(total - warm) : 1.0;
        if (progress > 1.0) progress = 1.0;
        return (float)(c->min_lr + 0.5 * (c->learning_rate - c->min_lr) * (1.0 + cos(3.141592653589793 * progress)));
    }
    return c->learning_rate;
}

/* Micro-batch `mb` of this rank at step `step`: shard s of S takes global slots
   j = i*S + s (MindSpore's num_shards/shard_id: round-robin over the batch);
   under context parallelism only this rank's tokens of each sample. */
static par_status load_micro_batch_into(trainer *t, int64_t step, int mb, llama_acts *a) {
    const int64_t T = t->sz.seq, L = t->cfg->seq_length;
    int64_t i, k;
    for (i = 0; i < t->sz.batch; i++) {
        const int64_t local = (int64_t)mb * t->sz.batch + i, j = local * t->num_shards + t->shard_id;
        const int64_t s = data_sample(t->data, step, t->global_batch, j);
        int32_t *src = t->host_window; /* the sample's L + 1 tokens: this rank reads only its own samples */
        if (data_window(t->data, s, L, src) != 0)
            return par_set_error(PAR_EIO, "--data: reading sample %lld failed: %s", (long long)s, strerror(errno));
        for (k = 0; k < T; k++) {
            const int64_t p = t->cp_pos ? t->cp_pos[k] : k;
            t->host_ids[i * T + k] = src[p], t->host_tgt[i * T + k] = src[p + 1];
            t->host_pos[i * T + k] = p;
        }
    }
    LLAMA_CHECK(t->ct->memcpy(t->ct->user, a->ids, t->host_ids, (size_t)t->sz.n * 4, PAR_COPY_HOST_TO_DEVICE));
    LLAMA_CHECK(t->ct->memcpy(t->ct->user, a->targets, t->host_tgt, (size_t)t->sz.n * 4, PAR_COPY_HOST_TO_DEVICE));
    return t->ct->memcpy(t->ct->user, a->pos, t->host_pos, (size_t)t->sz.n * 8, PAR_COPY_HOST_TO_DEVICE);
}


/* Block l's tensors (l: this rank's layer index): the weights, or (grads)
   where its gradients accumulate. */
static par_status bind_block(trainer *t, int l, int grads, llama_block *b) {
    void **f[LLAMA_PER_BLOCK + LLAMA_QKV_BIASES] = {&b->ln1, &b->wq, &b->wk, &b->wv, &b->wo, &b->ln2,
                                                    &b->wg,  &b->wu, &b->wd, &b->bq, &b->bk, &b->bv};
    int k;
    memset(b, 0, sizeof *b);
    for (k = 0; k < per_block(&t->model.dims); k++) {
        const int i = local_param(t, t_block(&t->model.dims, t->layer_of[l], k));
        if (grads) LLAMA_CHECK(par_params_grad_ptr(t->ps, i, f[k])); /* f32 */
        else if (!(*f[k] = par_params_compute_value(t->ps, i))) return PAR_EINVAL;
    }
    return PAR_OK;
}

/* The gradients of the model's tensors [first, first+count) are complete: the
   parameter set starts their bucket's reduction (async: it overlaps the
   layers below). */
static par_status grads_ready(trainer *t, int first, int count) {
    int i;
    for (i = first; i < first + count; i++) LLAMA_CHECK(par_params_grad_ready(t->ps, local_param(t, i)));
    return PAR_OK;
}

/* The layers' own spans: off inside multi-copy, where a layer's wall time
   includes the other copies' turns (par_copies traces each copy's turns). */
static double layer_now(trainer *t) { return t->copies > 1 ? 0.0 : trace_now(t); }

static void layer_span(trainer *t, double t0, const char *what, int l) {
    if (t->copies > 1) return;
    if (l < 0) trace_span(t, "compute", t0, "%s", what);
    else trace_span(t, "compute", t0, "%s %d", what, l);
}

/* The passes of a micro-batch (or copy) through the model, in step order:
   0 the embedding, 1..L block p - 1, L + 1 the head and loss (forward);
   L + 2 the loss and head, L + 3 .. 2L + 2 block 2L + 2 - p, 2L + 3 the
   embedding (backward). One pass = one layer's forward or backward. */
static int num_passes(const llama_model *m) { return 2 * (int)m->local.layers + 4; }

/* The gradients backward pass p (of a model of L local layers) completes are
   ready: their bucket's reduction starts. Forward passes complete none. */
static par_status pass_grads_ready(trainer *t, int L, int p) {
    if (p == L + 2) return grads_ready(t, t->ntensors - 2, 2);
    if (p > L + 2 && p < 2 * L + 3) return grads_ready(t, t_block(&t->model.dims, t->layer_of[2 * L + 2 - p], 0), per_block(&t->model.dims));
    if (p == 2 * L + 3) return grads_ready(t, 0, 1);
    return PAR_OK;
}

/* Pass p on (m, a, s); scale: the loss's; ready: a backward pass marks the
   gradients it completed ready. */
static par_status model_pass(trainer *t, const llama_model *m, llama_acts *a, llama_scratch *s, int64_t batch,
                             int64_t seq, int p, float scale, int ready) {
    const int L = (int)m->local.layers, tn = local_param(t, t->ntensors - 2), th = local_param(t, t->ntensors - 1);
    const int64_t n = batch * seq;
    const double t0 = layer_now(t);
    if (p == 0) {
        LLAMA_CHECK(par_tp_embedding_fwd(m->tp, &m->emb, n, a->ids, par_params_compute_value(t->ps, local_param(t, 0)),
                                         L ? a->blocks[0].x_in : a->x_final, s->dh));
        layer_span(t, t0, "fwd embedding", -1);
    } else if (p <= L) {
        const int l = p - 1;
        llama_block w;
        LLAMA_CHECK(bind_block(t, l, 0, &w));
        LLAMA_CHECK(llama_block_fwd(m, &w, &a->blocks[l], a->pos, batch, seq, l + 1 < L ? a->blocks[l + 1].x_in : a->x_final, s));
        layer_span(t, t0, "fwd block", l);
    } else if (p == L + 1) {
        LLAMA_CHECK(llama_head_fwd(m, par_params_compute_value(t->ps, tn), par_params_compute_value(t->ps, th), a, n, s));
        layer_span(t, t0, "fwd head+loss", -1);
    } else if (p == L + 2) {
        float *g_norm, *g_head;
        LLAMA_CHECK(par_params_grad(t->ps, tn, &g_norm));
        LLAMA_CHECK(par_params_grad(t->ps, th, &g_head));
        LLAMA_CHECK(llama_head_bwd(m, par_params_compute_value(t->ps, tn), par_params_compute_value(t->ps, th), g_norm, g_head, a, n,
                                   scale, s));
        layer_span(t, t0, "bwd head+loss", -1);
    } else if (p < 2 * L + 3) {
        const int l = 2 * L + 2 - p;
        llama_block w, g;
        LLAMA_CHECK(bind_block(t, l, 0, &w));
        LLAMA_CHECK(bind_block(t, l, 1, &g));
        LLAMA_CHECK(llama_block_bwd(m, &w, &g, &a->blocks[l], a->pos, batch, seq, s));
        layer_span(t, t0, "bwd block", l);
    } else {
        float *g_emb;
        LLAMA_CHECK(par_params_grad(t->ps, local_param(t, 0), &g_emb));
        LLAMA_CHECK(par_tp_embedding_bwd(m->tp, &m->emb, n, a->ids, s->dx, g_emb, s->dh));
        layer_span(t, t0, "bwd embedding", -1);
    }
    return ready ? pass_grads_ready(t, L, p) : PAR_OK;
}

static par_status forward(trainer *t, const llama_model *m, llama_acts *a, llama_scratch *s, int64_t batch,
                          int64_t seq) {
    int p;
    for (p = 0; p <= (int)m->local.layers + 1; p++) LLAMA_CHECK(model_pass(t, m, a, s, batch, seq, p, 0.0f, 0));
    return PAR_OK;
}

static par_status backward(trainer *t, const llama_model *m, llama_acts *a, llama_scratch *s, float scale, int ready) {
    int p;
    for (p = (int)m->local.layers + 2; p < num_passes(m); p++)
        LLAMA_CHECK(model_pass(t, m, a, s, t->sz.batch, t->sz.seq, p, scale, ready));
    return PAR_OK;
}

/* The backward's seed dL/dloss_row: 1 / the rows of a step's mean, times the
   loss scale when there is one (f16: small gradients stay above f16's
   smallest value; par_params_step_scaled divides it out). */
static float loss_grad_scale(const trainer *t, int64_t rows) {
    return (t->use_ls ? t->ls.scale : 1.0f) / (float)rows;
}

/* Multi-copy: copy k of the current micro-batch, forward and backward on its
   lane (par_copies_run calls this on copy k's thread). */
static par_status copy_step(void *u, int k) {
    trainer *t = (trainer *)u;
    lane *l = &t->lanes[k];
    const float scale = loss_grad_scale(t, t->sz.n * t->micro_batches * t->copies);
    LLAMA_CHECK(forward(t, &l->model, &l->acts, &l->scratch, t->sz.batch, t->sz.seq));
    return backward(t, &l->model, &l->acts, &l->scratch, scale, 0);
}

/* Fine-grained interleave: copy k's slice through pass t->pass only; the
   slices rejoin after every layer (MindFormers' interleaved decoder layer). */
static par_status slice_pass(void *u, int k) {
    trainer *t = (trainer *)u;
    lane *l = &t->lanes[k];
    const float scale = loss_grad_scale(t, t->sz.n * t->micro_batches * t->copies);
    return model_pass(t, &l->model, &l->acts, &l->scratch, t->sz.batch, t->sz.seq, t->pass, scale, 0);
}

/* One micro-batch's copies (or slices): interleaved by par_copies_run; the
   gradients are marked ready on this thread, after the copies of their pass
   (fine-grained) or of the whole step (multi-copy). */
static par_status copies_step(trainer *t) {
    int p;
    if (!t->fine_grain) {
        LLAMA_CHECK(par_copies_run(t->mc, copy_step, t));
        return grads_ready(t, 0, t->ntensors);
    }
    for (p = 0; p < num_passes(&t->model); p++) {
        t->pass = p;
        LLAMA_CHECK(par_copies_run(t->mc, slice_pass, t));
        LLAMA_CHECK(pass_grads_ready(t, (int)t->model.local.layers, p));
    }
    return PAR_OK;
}

/* ---- pipeline: the executor's callbacks -------------------------------------- */

/* Boundary tensor `kind` (0 input, 1 output, 2 input gradient, 3 output
   gradient) of micro-batch mb's chunk c. */
static void *boundary(trainer *t, int mb, int c, int kind) {
    return t->bnd + (((int64_t)(mb % t->nbnd) * t->chunks + c) * 4 + kind) * boundary_bytes(t);
}

static par_status pp_buffer(void *u, int mb, int c, int is_grad, int is_input, void **ptr, int64_t *count) {
    trainer *t = (trainer *)u;
    *ptr = boundary(t, mb, c, is_grad * 2 + !is_input), *count = boundary_elems(t);
    return PAR_OK;
}

/* The slot of micro-batch mb: taken at its first forward here, its data loaded. */
static par_status pp_slot(trainer *t, int mb, llama_acts **a) {
    int k;
    if (t->slot_of[mb] < 0) {
        for (k = 0; k < t->nslots && t->slot_busy[k]; k++) {
        }
        if (k == t->nslots) return par_set_error(PAR_EINVAL, "pipeline: no free activation slot for micro-batch %d", mb);
        t->slot_busy[k] = 1, t->slot_of[mb] = k, t->chunks_left[mb] = t->chunks;
        LLAMA_CHECK(load_micro_batch_into(t, t->step, mb, &t->slots[k]));
    }
    *a = &t->slots[t->slot_of[mb]];
    return PAR_OK;
}

/* Chunk c of this rank's layers for micro-batch mb: input from the embedding
   (virtual stage 0) or the previous stage, output to the next stage or, on
   the last virtual stage, through the head to the logits. */
static par_status pp_forward(void *u, int mb, int c) {
    trainer *t = (trainer *)u;
    const llama_model *m = &t->model;
    const int j0 = t->chunk_first[c], j1 = t->chunk_first[c + 1], vs = par_pp_schedule_stage(t->sched, t->stage, c);
    const int last = vs == t->pp * t->chunks - 1;
    const double t0 = trace_now(t);
    llama_acts *a;
    int j;
    LLAMA_CHECK(pp_slot(t, mb, &a));
    if (vs == 0)
        LLAMA_CHECK(par_tp_embedding_fwd(t->tp, &m->emb, t->sz.n, a->ids, par_params_compute_value(t->ps, local_param(t, 0)),
                                         a->blocks[j0].x_in, t->scratch.dh));
    else
        LLAMA_CHECK(t->ct->memcpy(t->ct->user, a->blocks[j0].x_in, boundary(t, mb, c, 0),
                                  (size_t)boundary_bytes(t), PAR_COPY_DEVICE_TO_DEVICE));
    for (j = j0; j < j1; j++) {
        void *out = j + 1 < j1 ? a->blocks[j + 1].x_in : last ? a->x_final : boundary(t, mb, c, 1);
        llama_block w;
        LLAMA_CHECK(bind_block(t, j, 0, &w));
        LLAMA_CHECK(llama_block_fwd(m, &w, &a->blocks[j], a->pos, t->sz.batch, t->sz.seq, out, &t->scratch));
    }
    if (last)
        LLAMA_CHECK(llama_head_fwd(m, par_params_compute_value(t->ps, local_param(t, t->ntensors - 2)),
                                   par_params_compute_value(t->ps, local_param(t, t->ntensors - 1)), a, t->sz.n, &t->scratch));
    trace_span(t, "compute", t0, "fwd mb %d chunk %d", mb, c);
    return PAR_OK;
}

/* The weight-gradient half (W) of a split backward of chunk c: the blocks'
   and the head's linears from what the input half kept in the slot; the last
   micro-batch's marks their gradients ready and frees nothing else (the
   embedding's and the norms' gradients were done by I). */
static par_status pp_backward_weight(trainer *t, int mb, int c, llama_acts *a) {
    const llama_model *m = &t->model;
    const int j0 = t->chunk_first[c], j1 = t->chunk_first[c + 1], vs = par_pp_schedule_stage(t->sched, t->stage, c);
    const int final = ++t->bwd_done[t->chunks + c] == t->micro_batches;
    int j;
    (void)mb; /* every micro-batch's I came before its W: the norms' gradients are complete too */
    if (vs == t->pp * t->chunks - 1) {
        float *g_head;
        LLAMA_CHECK(par_params_grad(t->ps, local_param(t, t->ntensors - 1), &g_head));
        LLAMA_CHECK(llama_head_bwd_weight(m, g_head, a, t->sz.n, &t->scratch));
        if (final) LLAMA_CHECK(grads_ready(t, t->ntensors - 2, 2));
    }
    for (j = j1 - 1; j >= j0; j--) {
        llama_block w, g;
        LLAMA_CHECK(bind_block(t, j, 0, &w));
        LLAMA_CHECK(bind_block(t, j, 1, &g));
        LLAMA_CHECK(llama_block_bwd_weight(m, &w, &g, &a->blocks[j], a->pos, t->sz.batch, t->sz.seq, &t->scratch));
        if (final) LLAMA_CHECK(grads_ready(t, t_block(&t->model.dims, t->layer_of[j], 0), per_block(&t->model.dims)));
    }
    return PAR_OK;
}

/* Its backward: op B the whole of it, I the input gradient only (the weight
   gradients wait for W). The last micro-batch's marks the chunk's gradients
   ready (under I: only the embedding's, W does the rest). */
static par_status pp_backward(void *u, int mb, int c, par_pp_op op) {
    trainer *t = (trainer *)u;
    const llama_model *m = &t->model;
    const int j0 = t->chunk_first[c], j1 = t->chunk_first[c + 1], defer = op == PAR_PP_I;
    const int vs = par_pp_schedule_stage(t->sched, t->stage, c);
    const int last = vs == t->pp * t->chunks - 1;
    const float scale = loss_grad_scale(t, t->sz.n * t->micro_batches);
    const double t0 = trace_now(t);
    llama_acts *a;
    int j, final, final_w = 0;
    int64_t i;
    if (op != PAR_PP_B && !(m->split_backward && (op == PAR_PP_I || op == PAR_PP_W)))
        return par_set_error(PAR_EINVAL, "pipeline: backward op %d needs a split backward (the zb-h1 or zb1p schedule)",
                             (int)op);
    LLAMA_CHECK(pp_slot(t, mb, &a));
    if (op == PAR_PP_W) {
        LLAMA_CHECK(pp_backward_weight(t, mb, c, a));
        if (--t->chunks_left[mb] == 0) t->slot_busy[t->slot_of[mb]] = 0; /* W was its last use here */
        trace_span(t, "compute", t0, "wgrad mb %d chunk %d", mb, c);
        return PAR_OK;
    }
    final = ++t->bwd_done[c] == t->micro_batches;                     /* the embedding's gradient */
    if (!defer) final_w = ++t->bwd_done[t->chunks + c] == t->micro_batches; /* the layers' and the head's */
    if (last) {
        const int tn = local_param(t, t->ntensors - 2), th = local_param(t, t->ntensors - 1);
        float *g_norm, *g_head;
        LLAMA_CHECK(par_params_grad(t->ps, tn, &g_norm));
        LLAMA_CHECK(par_params_grad(t->ps, th, &g_head));
        LLAMA_CHECK(llama_head_bwd_part(m, par_params_compute_value(t->ps, tn), par_params_compute_value(t->ps, th), g_norm, g_head,
                                        a, t->sz.n, scale, &t->scratch, defer));
        LLAMA_CHECK(t->ct->memcpy(t->ct->user, t->host_losses, a->losses, (size_t)t->sz.n * 4, PAR_COPY_DEVICE_TO_HOST));
        for (i = 0; i < t->sz.n; i++) t->pp_loss += t->host_losses[i];
        t->pp_count += (double)t->sz.n;
        if (final_w) LLAMA_CHECK(grads_ready(t, t->ntensors - 2, 2));
    } else {
        LLAMA_CHECK(t->ct->memcpy(t->ct->user, t->scratch.dx, boundary(t, mb, c, 3),
                                  (size_t)boundary_bytes(t), PAR_COPY_DEVICE_TO_DEVICE));
    }
    for (j = j1 - 1; j >= j0; j--) {
        llama_block w, g;
        LLAMA_CHECK(bind_block(t, j, 0, &w));
        LLAMA_CHECK(bind_block(t, j, 1, &g));
        LLAMA_CHECK(llama_block_bwd_part(m, &w, &g, &a->blocks[j], a->pos, t->sz.batch, t->sz.seq, &t->scratch, defer));
        if (final_w) LLAMA_CHECK(grads_ready(t, t_block(&t->model.dims, t->layer_of[j], 0), per_block(&t->model.dims)));
    }
    if (vs == 0) {
        float *g_emb;
        LLAMA_CHECK(par_params_grad(t->ps, local_param(t, 0), &g_emb));
        LLAMA_CHECK(par_tp_embedding_bwd(t->tp, &m->emb, t->sz.n, a->ids, t->scratch.dx, g_emb, t->scratch.dh));
        if (final) LLAMA_CHECK(grads_ready(t, 0, 1));
    } else {
        LLAMA_CHECK(t->ct->memcpy(t->ct->user, boundary(t, mb, c, 2), t->scratch.dx,
                                  (size_t)boundary_bytes(t), PAR_COPY_DEVICE_TO_DEVICE));
    }
    /* after its last backward here the slot is free (after I it still holds what W needs) */
    if (!defer && --t->chunks_left[mb] == 0) t->slot_busy[t->slot_of[mb]] = 0;
    trace_span(t, "compute", t0, "%s mb %d chunk %d", defer ? "igrad" : "bwd", mb, c);
    return PAR_OK;
}

/* One pipelined step's micro-batches: the whole step is one accumulation
   window of the parameter set; the executor runs this rank's schedule. */
static par_status pp_step(trainer *t, double *loss, double *count) {
    par_pp_run_desc d;
    int k;
    for (k = 0; k < t->micro_batches; k++) t->slot_of[k] = -1;
    for (k = 0; k < t->nslots; k++) t->slot_busy[k] = 0;
    for (k = 0; k < 2 * t->chunks; k++) t->bwd_done[k] = 0;
    t->pp_loss = t->pp_count = 0;
    memset(&d, 0, sizeof d);
    d.schedule = t->sched, d.stage_dims = t->pp_dims, d.trace = t->trace, d.dtype = t->model.dtype;
    d.callbacks.user = t, d.callbacks.forward = pp_forward, d.callbacks.backward = pp_backward;
    d.callbacks.buffer = pp_buffer;
    LLAMA_CHECK(par_params_grads_begin(t->ps, 0, 1));
    LLAMA_CHECK(par_pp_run(t->ctx, &d));
    LLAMA_CHECK(par_params_grads_wait(t->ps));
    *loss = t->pp_loss, *count = t->pp_count;
    return PAR_OK;
}

typedef struct step_stats {
    double loss, grad_norm, seconds;
    float lr, loss_scale; /* loss_scale: the scale the step ran with (1 without loss scaling) */
    int skipped;          /* loss scaling: an inf/nan gradient skipped the update */
} step_stats;

static par_status train_step(trainer *t, int64_t total_steps, step_stats *out) {
    const llama_config *c = t->cfg;
    const float scale = loss_grad_scale(t, t->sz.n * t->micro_batches * t->copies);
    double loss = 0.0, count = 0.0, t0 = now_s(), step_us = trace_now(t), t1;
    const float lr = lr_at(c, t->step, total_steps);
    par_adamw opt;
    par_step_stats st;
    int mb;
    int64_t i;
    if (t->pp > 1) LLAMA_CHECK(pp_step(t, &loss, &count));
    for (mb = 0; mb < t->micro_batches && t->pp == 1; mb++) {
        int k;
        t1 = trace_now(t);
        /* copy k of micro-batch mb: the samples micro-batch mb x copies + k would have */
        for (k = 0; k < t->copies; k++)
            LLAMA_CHECK(load_micro_batch_into(t, t->step, mb * t->copies + k, k ? &t->lanes[k].acts : &t->acts));
        trace_span(t, "io", t1, "load micro-batch %d", mb);
        LLAMA_CHECK(par_params_grads_begin(t->ps, mb, t->micro_batches));
        if (t->copies > 1) {
            LLAMA_CHECK(copies_step(t));
        } else {
            LLAMA_CHECK(forward(t, &t->model, &t->acts, &t->scratch, t->sz.batch, t->sz.seq));
            LLAMA_CHECK(backward(t, &t->model, &t->acts, &t->scratch, scale, 1));
        }
        LLAMA_CHECK(par_params_grads_wait(t->ps));
        for (k = 0; k < t->copies; k++) {
            LLAMA_CHECK(t->ct->memcpy(t->ct->user, t->host_losses, k ? t->lanes[k].acts.losses : t->acts.losses,
                                      (size_t)t->sz.n * 4, PAR_COPY_DEVICE_TO_HOST));
            for (i = 0; i < t->sz.n; i++) loss += t->host_losses[i];
            count += (double)t->sz.n;
        }
    }
    t1 = trace_now(t);
    LLAMA_CHECK(par_params_reduce_loss(t->ps, &loss, &count)); /* over the whole global batch */
    trace_span(t, "comm", t1, "all_reduce loss");
    if (!isfinite(loss)) /* the same on every rank (all-reduced): all stop, nothing applied or saved */
        return par_set_error(PAR_ENONFINITE,
                             "step %lld: the loss (the mean over the global batch) is %g: training diverged; stopped "
                             "before the update, no checkpoint of this state is written",
                             (long long)t->step, count > 0 ? loss / count : loss);
    opt.lr = lr, opt.beta1 = c->beta1, opt.beta2 = c->beta2, opt.eps = c->eps, opt.weight_decay = c->weight_decay;
    opt.max_grad_norm = llama_config_clip_norm(c);
    opt.no_bias_correction = c->optimizer_type == LLAMA_OPTIMIZER_ADAMWEIGHTDECAY;
    out->loss_scale = t->use_ls ? t->ls.scale : 1.0f;
    LLAMA_CHECK(par_params_step_scaled(t->ps, &opt, t->use_ls ? &t->ls : NULL, &st));
    LLAMA_CHECK(t->ct->synchronize(t->ct->user));
    trace_span(t, "step", step_us, "step %lld", (long long)t->step);
    t->step++; /* a skipped step still consumed its batch (GradScaler's loop) */
    out->loss = loss / count, out->grad_norm = st.grad_norm, out->lr = lr, out->seconds = now_s() - t0;
    out->skipped = st.skipped;
    return PAR_OK;
}

/* ============================================================================
   7. reporting
   ========================================================================== */

/* Model FLOPs of one training step over the global batch (forward + backward
   = 3x forward; causal attention counts the visible half of the scores). */
static double step_flops(const trainer *t) {
    const llama_dims *d = &t->model.dims;
    const double tokens = (double)t->global_batch * (double)d->seq;
    double matmul_params = 0.0, attn;
    int i;
    for (i = 1; i < t->ntensors; i++) /* every matrix but the embedding (a lookup) */
        if (t->specs[i].ndim == 2) matmul_params += (double)spec_numel(&t->specs[i]);
    attn = (double)d->layers * 2.0 * (double)d->seq * (double)(d->heads * d->head_dim);
    return 6.0 * tokens * matmul_params + 3.0 * tokens * attn;
}

static int64_t global_params(const trainer *t) {
    int64_t n = 0;
    int i;
    for (i = 0; i < t->ntensors; i++) n += spec_numel(&t->specs[i]);
    return n;
}

/* The GEMM throughput of the whole machine, as the ranks share it: every rank
   runs the same GEMMs at once between two synchronizing reductions, and the
   total FLOPs over the slowest rank's time is the peak MFU is measured
   against. Runs in the backward scratch (free now): as large a square as
   fits, up to 384 (4096 on a device table, see gemm_probe_side). */
static par_status measure_gemm_peak(trainer *t, double *gflops) {
    const int reps = 8;
    const int64_t n = gemm_probe_side(&t->model, &t->sz);
    const int64_t bytes = n * n * t->model.esize;
    char *a = (char *)t->scratch_base;
    par_gemm_desc d = llama_gemm_desc(&t->model, 0); /* the peak of the compute type's GEMMs */
    double t0, dt, flops, sync = 0.0;
    int i;
    d.m = d.n = d.k = n;
    LLAMA_CHECK(t->ct->memset(t->ct->user, a, 0, (size_t)(3 * bytes)));
    LLAMA_CHECK(t->ct->gemm(t->ct->user, &d, a, a + bytes, a + 2 * bytes)); /* warm up */
    LLAMA_CHECK(t->ct->synchronize(t->ct->user));
    LLAMA_CHECK(par_ctx_all_reduce_host(t->ctx, t->all_dims, PAR_REDUCE_MAX, PAR_F64, &sync, 1));
    t0 = now_s();
    for (i = 0; i < reps; i++) LLAMA_CHECK(t->ct->gemm(t->ct->user, &d, a, a + bytes, a + 2 * bytes));
    LLAMA_CHECK(t->ct->synchronize(t->ct->user));
    /* up to the moment the last rank is done: ranks sharing cores may not
       really have run at the same time */
    LLAMA_CHECK(par_ctx_all_reduce_host(t->ctx, t->all_dims, PAR_REDUCE_MAX, PAR_F64, &sync, 1));
    dt = now_s() - t0;
    flops = 2.0 * (double)(n * n * n) * reps;
    LLAMA_CHECK(par_ctx_all_reduce_host(t->ctx, t->all_dims, PAR_REDUCE_MAX, PAR_F64, &dt, 1));
    LLAMA_CHECK(par_ctx_all_reduce_host(t->ctx, t->all_dims, PAR_REDUCE_SUM, PAR_F64, &flops, 1));
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
    const llama_model *m = &t->model;
    const llama_dims *d = &m->dims;
    char mesh[128], lay[128], tok[128], col[128], row[128];
    int64_t mine = 0;
    int i, buckets = 0;
    par_tp_info ti;
    par_param_info in;
    for (i = 0; i < t->ntensors; i++)
        if (par_params_get_info(t->ps, i, &in) == PAR_OK) mine += in.numel, buckets = in.bucket + 1;
    par_tp_get_info(t->tp, &ti);
    par_mesh_format(par_ctx_mesh(t->ctx), mesh, sizeof mesh);
    par_layout_format(&m->emb.table, lay, sizeof lay);
    par_layout_format(&t->tokens_layout, tok, sizeof tok);
    par_layout_format(&m->q.weight, col, sizeof col), par_layout_format(&m->o.weight, row, sizeof row);
    printf("parallel.h llama trainer\n");
    printf("  model      vocab %lld, hidden %lld, layers %lld, heads %lld (kv %lld, head dim %lld), ffn %lld, seq %lld%s\n",
           (long long)d->vocab, (long long)d->dim, (long long)d->layers, (long long)d->heads, (long long)d->kv_heads,
           (long long)d->head_dim, (long long)d->ffn, (long long)d->seq, d->qkv_bias ? ", q/k/v biases" : "");
    printf("  parameters %lld in %d tensors (%lld on this rank), %d gradient buckets\n", (long long)global_params(t),
           t->ntensors, (long long)mine, buckets);
    printf("  ranks      %d (%s backend), mesh %s, %d kernel thread(s) per rank\n", t->world, backend, mesh,
           par_ctx_kernel_threads(t->ctx));
    printf("  layouts    q/k/v/gate/up/lm_head %s, o/down %s, embedding %s, tokens [batch,seq] %s\n", col, row, lay,
           tok);
    if (ti.degree > 1)
        printf("  tensor     tp %d: %lld of %lld heads, %lld kv heads, %lld ffn columns, vocab rows %lld..%lld on rank 0%s\n",
               ti.degree, (long long)m->local.heads, (long long)d->heads, (long long)m->local.kv_heads,
               (long long)m->local.ffn, (long long)m->head.out_start, (long long)(m->head.out_start + m->local.vocab - 1),
               ti.sequence_parallel ? "; sequence parallel (norms and residual split by tokens)" : "");
    if (t->cp) {
        par_cp_info ci;
        par_cp_get_info(t->cp, &ci);
        printf("  context    cp %d, %s attention (ring %d x Ulysses %d%s), %lld of %lld tokens per sample on each "
               "rank, %s\n",
               ci.degree, par_cp_algo_name(ci.algo), ci.ring_degree, ci.ulysses_degree,
               ci.ulysses_degree > 1 && !t->cfg->enable_alltoall ? ", all-gather for all-to-all" : "",
               (long long)ci.seq_local, (long long)ci.seq, ci.zigzag ? "zigzag chunks" : "contiguous blocks");
    }
    if (t->pp > 1) {
        par_pp_check pc;
        char layers[96] = "";
        size_t used = 0;
        int c;
        for (c = 0; c < t->chunks; c++)
            used += (size_t)snprintf(layers + used, used < sizeof layers ? sizeof layers - used : 0, "%s%d..%d",
                                     c ? ", " : "", t->layer_of[t->chunk_first[c]],
                                     t->layer_of[t->chunk_first[c + 1] - 1]);
        par_pp_schedule_check(t->sched, &pc, NULL, 0);
        printf("  pipeline   pp %d, %s, %d micro-batches, %d chunk(s) per rank: layers %s on rank 0; bubble %.3f "
               "predicted (F = 1, B = 2, I = W = 1); %d micro-batch(es) of activations in flight on rank 0\n",
               t->pp, t->opt->pp_schedule_path                                          ? t->opt->pp_schedule_path
                      : t->chunks > 1 && !strcmp(t->cfg->pipeline_scheduler, "1f1b") ? "interleaved 1F1B"
                                                                                       : t->cfg->pipeline_scheduler,
               t->micro_batches, t->chunks,
               layers, pc.bubble, t->nslots);
    }
    printf("  attention  causal from token positions: no [seq, seq] mask is built (what use_attn_mask_compression "
           "asks for); a dense f32 one would add %.2f MiB\n",
           mib((int64_t)t->cfg->seq_length * t->cfg->seq_length * 4));
    printf("  batch      global %d = %d data-parallel shard(s) x %d micro-batch(es) x %lld samples of %lld tokens%s\n",
           t->global_batch, t->num_shards, t->micro_batches, (long long)t->sz.batch, (long long)t->sz.seq,
           t->cp ? " (this rank's share of each)" : "");
    {
        const char *name = t->cfg->optimizer_type == LLAMA_OPTIMIZER_ADAMWEIGHTDECAY
                               ? "AdamWeightDecay (MindSpore's: no bias correction)"
                               : "AdamW";
        char clip[64] = "";
        if (llama_config_clip_norm(t->cfg) > 0)
            snprintf(clip, sizeof clip, ", gradients clipped to norm %g", (double)llama_config_clip_norm(t->cfg));
        if (t->cfg->enable_parallel_optimizer)
            printf("  optimizer  %s%s, ZeRO level %d over the %d data-parallel ranks: %.2f MiB of state per rank\n", name,
                   clip, t->cfg->optimizer_level >= 2 ? 2 : 1, t->num_shards, mib(t->plan.bytes[PAR_MEM_OPTIMIZER]));
        else
            printf("  optimizer  %s%s, replicated%s\n", name, clip,
                   t->num_shards > 1 ? " (gradients all-reduced in buckets)" : "");
    }
    printf("  memory plan per rank:\n");
    print_memory_header();
    print_memory_row("planned", t->plan.bytes, plan_total(&t->plan));
    fflush(stdout);
}

static void report_step(trainer *t, const step_stats *s, int64_t peak_bytes) {
    const double tokens = (double)t->global_batch * (double)t->cfg->seq_length;
    const double tps = s->seconds > 0 ? tokens / s->seconds : 0.0;
    const double mfu = s->seconds > 0 && t->gemm_gflops > 0 ? step_flops(t) / s->seconds / (t->gemm_gflops * 1e9) : 0.0;
    char scaled[96] = "", gnorm[32] = "null"; /* JSON has no inf or nan: a skipped f16 step's norm is null */
    if (isfinite(s->grad_norm)) snprintf(gnorm, sizeof gnorm, "%.9g", s->grad_norm);
    if (t->use_ls) /* loss scaling: the scale the step ran with, and whether an overflow skipped it */
        snprintf(scaled, sizeof scaled, ",\"loss_scale\":%.9g,\"skipped\":%d", (double)s->loss_scale, s->skipped);
    if (!t->opt->quiet)
        printf("step %5lld | loss %.6f | grad norm %.6f | lr %.3e | %8.0f tok/s | MFU %5.1f%% | peak %.1f MiB%s\n",
               (long long)t->step - 1, s->loss, s->grad_norm, (double)s->lr, tps, 100.0 * mfu, mib(peak_bytes),
               s->skipped ? " | skipped: inf/nan gradients, loss scale backed off" : "");
    if (t->metrics) {
        fprintf(t->metrics,
                "{\"step\":%lld,\"loss\":%.9g,\"grad_norm\":%s,\"lr\":%.9g,\"tokens_per_s\":%.1f,\"mfu\":%.5f,"
                "\"peak_mem_bytes\":%lld,\"step_s\":%.6f%s}\n",
                (long long)t->step - 1, s->loss, gnorm, (double)s->lr, tps, mfu, (long long)peak_bytes, s->seconds,
                scaled);
        fflush(t->metrics);
    }
    fflush(stdout);
}

/* ============================================================================
   8. sampling, the rank body, main
   ========================================================================== */

/* Row r of this rank's logits, all its vocabulary gathered over the tp
   ranks, as f32 in host memory (row [vocab]). */
static par_status logits_row_to_host(trainer *t, int64_t r, float *row) {
    const llama_model *m = &t->model;
    const int64_t V = m->dims.vocab;
    void *host = m->dtype == PAR_F32 ? (void *)row : malloc((size_t)(V * m->esize));
    par_status st;
    if (!host) return par_set_error(PAR_ENOMEM, "out of host memory");
    st = par_tp_gather_columns(t->tp, &m->head, 1, (char *)t->acts.logits + r * m->local.vocab * m->esize,
                               t->scratch.dh);
    if (st == PAR_OK) st = t->ct->memcpy(t->ct->user, host, t->scratch.dh, (size_t)(V * m->esize), PAR_COPY_DEVICE_TO_HOST);
    if (st == PAR_OK && host != row) st = par_dtype_convert(V, m->dtype, host, PAR_F32, row);
    if (host != row) free(host);
    return st;
}

/* The logits row (whole vocabulary, host memory) after the n bytes of ctx:
   the forward over just them (padded at the end to what sequence parallel
   splits: causal attention keeps the padding out of the real rows). */
static par_status next_logits(trainer *t, const unsigned char *ctx, int64_t n, float *row) {
    const int64_t n_run = par_tp_pad_rows(t->tp, n);
    int64_t k;
    for (k = 0; k < n_run; k++) t->host_ids[k] = k < n ? ctx[k] : 0, t->host_pos[k] = k;
    LLAMA_CHECK(t->ct->memcpy(t->ct->user, t->acts.ids, t->host_ids, (size_t)n_run * 4, PAR_COPY_HOST_TO_DEVICE));
    LLAMA_CHECK(t->ct->memcpy(t->ct->user, t->acts.pos, t->host_pos, (size_t)n_run * 8, PAR_COPY_HOST_TO_DEVICE));
    LLAMA_CHECK(forward(t, &t->model, &t->acts, &t->scratch, 1, n_run));
    return logits_row_to_host(t, n - 1, row);
}

/* The same under context parallel, whose attention is planned for whole
   training samples: the context fills the start of sample 0 (zeros after it
   and in the other samples, which causality keeps out of it), each rank
   loads its tokens, and the one cp rank holding the last context token
   shares its row over the cp group (the others add zeros). */
static par_status next_logits_cp(trainer *t, const unsigned char *ctx, int64_t n, float *row) {
    const int64_t T = t->sz.seq, V = t->model.dims.vocab;
    par_cp_info ci;
    int64_t k, at = -1;
    for (k = 0; k < t->sz.n; k++) {
        const int64_t p = t->cp_pos[k % T];
        t->host_ids[k] = k < T && p < n ? ctx[p] : 0, t->host_pos[k] = p;
        if (k < T && p == n - 1) at = k;
    }
    LLAMA_CHECK(t->ct->memcpy(t->ct->user, t->acts.ids, t->host_ids, (size_t)t->sz.n * 4, PAR_COPY_HOST_TO_DEVICE));
    LLAMA_CHECK(t->ct->memcpy(t->ct->user, t->acts.pos, t->host_pos, (size_t)t->sz.n * 8, PAR_COPY_HOST_TO_DEVICE));
    LLAMA_CHECK(forward(t, &t->model, &t->acts, &t->scratch, t->sz.batch, T));
    memset(row, 0, (size_t)V * sizeof(float));
    if (at >= 0) LLAMA_CHECK(logits_row_to_host(t, at, row)); /* the tp ranks of one cp rank hold the same tokens: all gather */
    LLAMA_CHECK(par_cp_get_info(t->cp, &ci));
    return par_ctx_all_reduce_host(t->ctx, ci.cp_dims, PAR_REDUCE_SUM, PAR_F32, row, (int)V);
}

/* The ranks of the first data-parallel shard continue a prompt from the data,
   one byte at a time (temperature 0.8, the same draws on every rank),
   re-running the forward over the last seq_length bytes; rank 0 prints. */
static par_status generate(trainer *t, int count) {
    const llama_dims *d = &t->model.dims;
    const int prompt = 16;
    const int64_t T = t->cfg->seq_length < t->sz.n * t->cfg->context_parallel ? t->cfg->seq_length : t->sz.n;
    int64_t len = prompt < T ? prompt : T, i, k;
    unsigned char *text = (unsigned char *)malloc((size_t)(len + count));
    float *row = (float *)malloc((size_t)d->vocab * sizeof(float));
    uint64_t rng = 0x53414D504C45ull ^ t->cfg->seed;
    par_status st = PAR_OK;
    if (!text || !row) return free(text), free(row), par_set_error(PAR_ENOMEM, "out of host memory");
    memcpy(text, t->data->bytes, (size_t)len);
    for (i = 0; i < count && st == PAR_OK; i++) {
        const int64_t n = len < T ? len : T;
        double mx = -1e30, sum = 0.0, r;
        st = t->cp ? next_logits_cp(t, text + len - n, n, row) : next_logits(t, text + len - n, n, row);
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

static par_status trainer_setup(trainer *t, par_ctx *ctx, const shared_run *sh) {
    const llama_config *c = sh->cfg;
    const llama_dims d = dims_from_config(c);
    int64_t shape[2], local[2] = {0, 0};
    t->ctx = ctx, t->ct = par_ctx_compute(ctx);
    t->cfg = c, t->opt = sh->opt, t->data = sh->data;
    t->rank = par_ctx_rank(ctx), t->world = par_ctx_size(ctx);
    t->all_dims = (1u << par_ctx_mesh(ctx)->ndim) - 1u;
    t->micro_batches = llama_config_micro_batches(c);
    t->global_batch = llama_config_global_batch(c);
    /* the tokens [global batch, seq], split over dp (the data-parallel ranks)
       and seq over cp: gradients are partial over both, the loss a sum over both */
    shape[0] = t->global_batch, shape[1] = c->seq_length;
    LLAMA_CHECK(par_layout_parse(&t->tokens_layout, par_ctx_mesh(ctx), 2, shape,
                                 c->context_parallel > 1 ? "[dp,cp]" : "[dp,None]"));
    par_layout_local_shape(&t->tokens_layout, local);
    t->copies = c->micro_batch_interleave_num * c->fine_grain_interleave; /* one of them is 1 (config rule) */
    t->fine_grain = c->fine_grain_interleave > 1;
    t->sz.batch = local[0] / (t->micro_batches * t->copies), t->sz.seq = local[1], t->sz.n = t->sz.batch * t->sz.seq;
    t->ntensors = num_tensors(&d);
    if (!(t->specs = (tensor_spec *)calloc((size_t)t->ntensors, sizeof *t->specs)))
        return par_set_error(PAR_ENOMEM, "out of host memory");
    tensor_specs(&d, t->specs);
    LLAMA_CHECK(pipeline_setup(t));
    LLAMA_CHECK(place_model(t));
    t->model.local.layers = t->chunk_first[t->chunks]; /* this rank's layers */
    LLAMA_CHECK(make_params(t));
    LLAMA_CHECK(par_params_data_shard(t->ps, &t->shard_id, &t->num_shards));
    LLAMA_CHECK(plan_memory(t));
    return acts_alloc(t);
}

/* --trace: rank 0's share of step time spent waiting in communication.
   "Exposed" communication is the time a collective of this rank was in flight
   (a comm span: from issue to the end of its wait, or a blocking scalar
   collective) while the rank ran no compute, optimizer or io span, i.e. the
   communication that backward did not hide, plus the time in the layers'
   blocking tensor-parallel collectives (inside compute spans, but stalling
   them); the share is that time summed over the traced steps divided by the
   summed step time. Reported for rank 0 (one rank's view; in data parallel
   the ranks wait about equally). Spans dropped for lack of capacity make it
   an underestimate; the line says so. */
static void report_comm_share(trainer *t, double loop_t0_us, double loop_t1_us, double step_seconds) {
    static const char *const hiding[3] = {"compute", "optimizer", "io"};
    double busy = 0.0, exposed = 0.0, share;
    par_tp_info ti;
    if (par_trace_coverage(t->trace, "comm", hiding, 3, loop_t0_us, loop_t1_us, &busy, &exposed) != PAR_OK ||
        step_seconds <= 0 || par_tp_get_info(t->tp, &ti) != PAR_OK)
        return;
    if (t->copies > 1) { /* multi-copy: a copy's tp collective overlaps the other copies' turns (compute spans) */
        const double hidden = busy > 0 ? 1.0 - exposed / busy : 0.0;
        printf("multi-copy: %d copies; %.1f%% of the time collectives were in flight on rank 0 another copy computed "
               "(in flight %.3f s, exposed %.3f s)\n", t->copies, 100.0 * hidden, busy * 1e-6, exposed * 1e-6);
        if (t->metrics)
            fprintf(t->metrics, "{\"event\":\"copies_overlap\",\"rank\":0,\"copies\":%d,\"hidden_share\":%.6f,"
                                "\"in_flight_s\":%.6f,\"exposed_s\":%.6f}\n",
                    t->copies, hidden, busy * 1e-6, exposed * 1e-6);
    } else {
        exposed += ti.comm_us; /* the layers' tp collectives block them: never hidden */
    }
    if (t->cp) {
        par_cp_info ci;
        if (par_cp_get_info(t->cp, &ci) == PAR_OK) exposed += ci.comm_us; /* all-to-alls and ring waits: likewise */
    }
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

/* One run per checkpoint root (parallel.h par_ckpt_lock): rank 0 claims
   --save-dir for this run and checks that the --init-from root, if another
   directory, is not being written by a live run; every rank gets the verdict
   (and rank 0's reason in the message, on the threads backend's shared
   process as under mpirun, where rank 0 prints it). */
static par_status claim_checkpoint_dirs(trainer *t, const llama_options *o, const shared_run *sh) {
    par_status st = PAR_OK, cs;
    int32_t bad;
    if (t->rank == 0) {
        if (o->save_dir) st = par_ckpt_lock(o->save_dir);
        if (st == PAR_OK && sh->init_root && !(o->save_dir && strcmp(o->save_dir, sh->init_root) == 0))
            st = par_ckpt_check_idle(sh->init_root);
    }
    bad = st != PAR_OK;
    cs = par_ctx_all_reduce_host(t->ctx, t->all_dims, PAR_REDUCE_MAX, PAR_I32, &bad, 1);
    if (st != PAR_OK) return st;
    if (cs != PAR_OK) return cs;
    return bad ? par_set_error(PAR_EIO, "rank 0 found the checkpoint directory in use by another run (its error says "
                                        "which)")
               : PAR_OK;
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
    if (st == PAR_OK) st = claim_checkpoint_dirs(&t, o, sh);
    if (st == PAR_OK && o->init_from) {
        /* main checked the files; a rank only reads its part */
        if (sh->init_sharded) {
            if ((st = par_params_load(t.ps, o->init_from, NULL)) == PAR_OK) t.step = sh->init_step;
        } else {
            if ((st = load_checkpoint(&t, o->init_from, sh->init_has_optimizer)) == PAR_OK) t.step = sh->init_step;
            if (st == PAR_OK) st = par_params_set_step(t.ps, t.step);
        }
    } else if (st == PAR_OK) {
        st = init_params(&t, sh->cfg->seed);
    }
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
        step_stats s = {0};
        par_mem_report r;
        int64_t pk;
        st = train_step(&t, t.step - i + o->steps, &s);
        if (st == PAR_OK) st = t.ct->memory_report(t.ct->user, &r);
        if (st != PAR_OK) break;
        step_seconds += s.seconds;
        pk = r.peak_total;
        st = par_ctx_all_reduce_host(ctx, t.all_dims, PAR_REDUCE_MAX, PAR_I64, &pk, 1);
        if (pk > peak) peak = pk;
        if (st == PAR_OK && t.rank == 0) report_step(&t, &s, pk);
        if (st == PAR_OK && o->save_dir && o->save_every && t.step % o->save_every == 0) {
            const double s0 = trace_now(&t);
            st = save_sharded(&t);
            trace_span(&t, "io", s0, "save sharded checkpoint");
        }
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
        par_dtype dt = PAR_F32;
        if (o->save_dtype) (void)par_dtype_parse(o->save_dtype, &dt); /* checked by llama_parse_args */
        st = save_checkpoint(&t, o->save_path, dt);
        trace_span(&t, "io", s0, "save checkpoint");
        if (st == PAR_OK && t.rank == 0) printf("saved %s (+ optimizer state)\n", o->save_path);
    }
    if (st == PAR_OK && o->save_dir && !(o->save_every && o->steps > 0 && t.step % o->save_every == 0)) {
        const double s0 = trace_now(&t);
        st = save_sharded(&t); /* at the end, unless the last step just saved */
        trace_span(&t, "io", s0, "save sharded checkpoint");
    }
    /* every rank's timeline to rank 0, which writes the file (threads and mpi alike) */
    if (st == PAR_OK && t.trace) {
        st = par_trace_gather_write(ctx, t.trace, o->trace_path);
        if (st == PAR_OK && t.rank == 0)
            printf("trace: wrote %s (%d rank%s; open it in https://ui.perfetto.dev or chrome://tracing)\n",
                   o->trace_path, t.world, t.world == 1 ? "" : "s");
    }
    if (st == PAR_OK && t.shard_id == 0 && o->sample_tokens > 0 && t.pp > 1 && t.rank == 0)
        printf("sample: skipped (pipeline parallel: sampling runs the whole model on one stage)\n");
    else if (st == PAR_OK && t.shard_id == 0 && o->sample_tokens > 0 && t.pp == 1) st = generate(&t, o->sample_tokens);
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

static int is_dir(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0 && S_ISDIR(sb.st_mode);
}

static int is_file(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0 && !S_ISDIR(sb.st_mode);
}

/* --init-from DIR: a sharded checkpoint of this model. The step and the seed
   come from its host metadata (the seed only when --seed was not given), so
   the data stream continues where it stopped. */
/* A sharded --init-from: its step directory resolved once (a root's
   `latest` is read here only; every rank then loads exactly `resolved`, so
   the step, the data position and the weights come from one checkpoint),
   the model checked, the step and seed taken from its metadata, each value
   range-checked. */
static int check_sharded(const char *path, llama_config *cfg, int seed_given, int64_t *step_out, char *resolved,
                         size_t rsize, char *err, size_t errsize) {
    par_ckpt_info info = {0};
    const char *v;
    char model[256], *end;
    int rc = 0;
    if (par_ckpt_inspect(path, 0, &info) != PAR_OK) return snprintf(err, errsize, "--init-from: %s", par_last_error()), -1;
    snprintf(resolved, rsize, "%s", info.dir);
    model_text(cfg, model, sizeof model);
    *step_out = info.step;
    if ((v = par_ckpt_metadata(&info, "train.step"))) {
        errno = 0;
        long long s = strtoll(v, &end, 10);
        if (end == v || *end || errno || s < 0 || s > ((long long)1 << 40) || (info.has_moments && s != info.step))
            rc = -1, snprintf(err, errsize,
                              "--init-from %.300s: its train.step \"%.40s\" is not the checkpoint's step (par.step %lld): "
                              "the metadata is damaged or from another save",
                              info.dir, v, (long long)info.step);
        *step_out = s;
    }
    if ((v = par_ckpt_metadata(&info, "train.model")) && strcmp(v, model) != 0)
        rc = -1, snprintf(err, errsize, "--init-from %.300s: the checkpoint is of another model (%.200s; this run: %s)", info.dir, v,
                          model);
    if (rc == 0 && !seed_given && (v = par_ckpt_metadata(&info, "train.seed"))) {
        errno = 0;
        unsigned long long seed = strtoull(v, &end, 10);
        if (end == v || *end || errno || *v == '-')
            rc = -1, snprintf(err, errsize, "--init-from %.300s: its train.seed \"%.40s\" is not a seed", info.dir, v);
        cfg->seed = seed;
    }
    par_ckpt_info_free(&info);
    return rc;
}

static int bad_input(int quiet, const char *fmt, ...) LLAMA_PRINTF(2, 3);
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
    shared_run sh = {0};
    par_ctx_desc desc = {0};
    static char err[16384]; /* the config report: every error, one line each */
    char mesh[64];
    int world, launch_rank = 0, launch_size = 1, mpi = 0, nccl = 0, cuda_threads = 0, silent, has_opt = 0, sharded = 0;
    int64_t step0 = 0;
    par_status st;
    memset(&data, 0, sizeof data);
    if (llama_parse_args(argc, argv, &opt, err, sizeof err) != 0) {
        fprintf(stderr, "train: error: %s (see --help)\n", err);
        return EXIT_BAD_INPUT;
    }
    if (opt.help) return llama_print_usage(stdout), 0;
    nccl = strcmp(opt.backend, "nccl") == 0;
    cuda_threads = strcmp(opt.backend, "cuda-threads") == 0; /* the threads backend's rules, on one GPU */
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
#ifndef LLAMA_WITH_CUDA
    if (cuda_threads)
        return bad_input(silent, "--backend cuda-threads needs the CUDA build of the trainer (build/train_cuda, made "
                                 "when nvcc, NCCL and mpicc exist); this build has the threads and mpi backends");
#endif
    if (llama_config_load(opt.config_path, opt.sets, opt.num_sets, &cfg, silent ? NULL : stderr, err, sizeof err) != 0) {
        for (char *line = err, *next; line && !silent; line = next) { /* "train: error: " before each one */
            if ((next = strchr(line, '\n')) != NULL) *next++ = 0;
            fprintf(stderr, "train: %s%s\n", line[0] == '(' ? "" : "error: ", line);
        }
        return EXIT_BAD_INPUT;
    }
    if (cfg.load_checkpoint[0] && opt.init_from && strcmp(opt.init_from, cfg.load_checkpoint) != 0)
        return bad_input(silent, "--init-from %s and load_checkpoint = %s name two starting points; keep one",
                         opt.init_from, cfg.load_checkpoint);
    if (cfg.load_checkpoint[0]) opt.init_from = cfg.load_checkpoint; /* MindFormers' spelling of --init-from */
    if (opt.seed >= 0) cfg.seed = (uint64_t)opt.seed;
    if (cfg.parallel_mode != LLAMA_PARALLEL_MODE_AUTO && (opt.cluster_path || opt.max_device_memory))
        return bad_input(silent, "%s is for parallel.parallel_mode auto_parallel (this config is not)",
                         opt.cluster_path ? "--cluster" : "--max-device-memory");
    if (cfg.parallel_mode == LLAMA_PARALLEL_MODE_AUTO && (mpi || cuda_threads) && !opt.cluster_path)
        return bad_input(silent, "auto_parallel under --backend %s needs --cluster FILE (it measures this machine "
                                 "only on the threads backend)", opt.backend);
    if (cfg.parallel_mode == LLAMA_PARALLEL_MODE_AUTO &&
        llama_auto_parallel(&cfg, mpi ? launch_size : 0, opt.cluster_path, opt.max_device_memory,
                            silent ? NULL : stdout, err, sizeof err) != 0)
        return bad_input(silent, "%s", err);
    world = cfg.data_parallel * cfg.model_parallel * cfg.pipeline_stage * cfg.context_parallel;
    if (!mpi && world > 256)
        return bad_input(silent, "the parallel degrees ask for %d ranks; the %s backend runs at most 256", world,
                         opt.backend);
    if (mpi && launch_size != world)
        return bad_input(silent,
                         "the MPI world has %d ranks but parallel_config asks for %d (data_parallel %d x "
                         "model_parallel %d x pipeline_stage %d x context_parallel %d); run mpirun -np %d",
                         launch_size, world, cfg.data_parallel, cfg.model_parallel, cfg.pipeline_stage,
                         cfg.context_parallel, world);
    if (opt.init_from && is_dir(opt.init_from)) {
        /* a sharded checkpoint: its structure now (the pieces are verified as the
           ranks read them); the seed it was trained with, unless --seed says otherwise */
        static char resolved[1100], root[1100];
        if (check_sharded(opt.init_from, &cfg, opt.seed >= 0, &step0, resolved, sizeof resolved, err, sizeof err) != 0)
            return data_free(&data), bad_input(silent, "%s", err);
        sharded = 1, has_opt = 1;
        /* the root whose lock says whether another run writes it: the path given,
           or the directory above the step directory given */
        snprintf(root, sizeof root, "%s", opt.init_from);
        if (strcmp(resolved, opt.init_from) == 0 && strrchr(root, '/')) *strrchr(root, '/') = 0;
        else if (strcmp(resolved, opt.init_from) == 0) snprintf(root, sizeof root, ".");
        sh.init_root = root;
        opt.init_from = resolved;
    }
    if (opt.steps > 0 || opt.sample_tokens > 0) {
        if (!opt.data_path) return bad_input(silent, "--data FILE is required to train or sample");
        if (data_load(opt.data_path, cfg.seq_length, cfg.vocab_size, &data, err, sizeof err) != 0)
            return bad_input(silent, "%s", err);
        if (opt.shuffle && data_shuffle(&data, cfg.seed) != 0) return data_free(&data), bad_input(silent, "out of host memory");
        if (data.tokens && opt.sample_tokens > 0)
            return data_free(&data), bad_input(silent, "--sample with a token file (--data %s): sampling prints bytes; "
                                                       "it needs text data (a byte-level model)", opt.data_path);
    }
    if (cfg.pipeline_stage > 1 && ((opt.init_from && !sharded) || opt.save_path))
        return data_free(&data),
               bad_input(silent, "%s with parallel_config.pipeline_stage = %d: a consolidated checkpoint (one "
                                 ".safetensors file) of a pipelined run is not supported yet; use a sharded one "
                                 "(--save-dir, --init-from DIR), which each stage writes and reads for its own layers",
                         opt.init_from ? "--init-from" : "--save", cfg.pipeline_stage);
    if (opt.init_from && !sharded) {
        if (check_init_files(opt.init_from, &cfg, &step0, &has_opt, err, sizeof err) != 0)
            return data_free(&data), bad_input(silent, "%s", err);
    }
    if (opt.save_dir && is_file(opt.save_dir))
        return data_free(&data), bad_input(silent, "--save-dir %s: a file is there, not a directory",
                                                             opt.save_dir);
    if (opt.save_dir && !dir_writable(opt.save_dir))
        return data_free(&data),
               bad_input(silent, "--save-dir %s: its parent directory is not writable", opt.save_dir);
    if (opt.save_path && !dir_writable(opt.save_path))
        return data_free(&data), bad_input(silent, "--save %s: its directory is not writable", opt.save_path);
    if (opt.metrics_path && !dir_writable(opt.metrics_path))
        return data_free(&data),
               bad_input(silent, "--metrics %s: its directory is not writable", opt.metrics_path);
    if (opt.trace_path && !dir_writable(opt.trace_path))
        return data_free(&data),
               bad_input(silent, "--trace %s: its directory is not writable", opt.trace_path);
    { /* recompute_config against the pipeline's stages: bad input before any rank starts */
        par_recompute_mode *modes = (par_recompute_mode *)malloc(sizeof(par_recompute_mode) * (size_t)cfg.num_layers);
        st = modes ? recompute_modes(&cfg, modes) : par_set_error(PAR_ENOMEM, "out of host memory");
        free(modes);
        if (st != PAR_OK) return data_free(&data), bad_input(silent, "%s", par_last_error());
    }
    if (opt.pp_schedule_path) { /* checked here, so a bad file is bad input before any rank starts */
        par_pp_schedule *s = NULL;
        if (cfg.pipeline_stage == 1)
            return data_free(&data),
                   bad_input(silent, "--pp-schedule %s needs parallel_config.pipeline_stage > 1", opt.pp_schedule_path);
        if (load_schedule(opt.pp_schedule_path, cfg.pipeline_stage, cfg.pp_interleave_num, cfg.micro_batch_num, &s) !=
            PAR_OK)
            return data_free(&data), bad_input(silent, "%s", par_last_error());
        par_pp_schedule_destroy(s);
    }

    sh.cfg = &cfg, sh.opt = &opt, sh.data = &data, sh.world = world, sh.backend = opt.backend;
    sh.init_step = step0, sh.init_has_optimizer = has_opt, sh.init_sharded = sharded; /* init_root: above */
    llama_config_mesh(&cfg, mesh, sizeof mesh);
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
        { /* the NCCL context leaves MPI_Finalize to its host; after a failure (a
             timeout: NCCL aborted its communicators) a collective finalize could
             wait forever for the rank that never came: end the job instead */
            int finalized = 0;
            MPI_Finalized(&finalized);
            if (nccl && !finalized && st != PAR_OK) MPI_Abort(MPI_COMM_WORLD, 1);
            if (nccl && !finalized) MPI_Finalize();
        }
#endif
    } else {
#ifdef LLAMA_WITH_CUDA
        st = cuda_threads ? par_run_cuda_threads(&desc, NULL, world, rank_main, &sh)
                          : par_run_threads_desc(&desc, world, rank_main, &sh);
#else
        st = par_run_threads_desc(&desc, world, rank_main, &sh);
#endif
        if (st != PAR_OK) fprintf(stderr, "train: %s\n", par_last_error());
    }
    if (opt.save_dir) par_ckpt_unlock(opt.save_dir); /* if this process holds it (rank 0's) */
    data_free(&data);
    return st == PAR_OK ? 0 : EXIT_RUN_FAILED;
}
