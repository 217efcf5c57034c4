/* examples/llama/config.h - the trainer's configuration: MindFormers-style YAML
   (read with libyaml), `--set key.path=value` overrides, and the command line.

   Every key the trainer knows is in one table (llama__keys below): its dotted
   path, type, default, range and help text. Loading a file walks the YAML
   mapping, flattens it to dotted paths, and looks each one up: unknown keys
   are warned about (and ignored), known keys are parsed and range-checked.
   Each MindFormers key in the table is honoured, or accepted and ignored where
   it means nothing here (the help text says why), or, for a feature that has
   not landed, accepted at its default and refused otherwise by
   llama_config_validate with the key's name and the reason. MindFormers' files
   mean here what they mean to MindFormers r1.5.0 (docs/mindformers.md: the
   global batch, the gradient, derived shapes, optimizers, clipping, warm-up).
   Loading reports every problem at once (the config report): each error one
   line naming the file and line (or the --set) and the key, warnings for
   values that change training against MindFormers, one line for unknown keys. */
#ifndef LLAMA_CONFIG_H
#define LLAMA_CONFIG_H

#include <stdint.h>
#include <stdio.h>

/* A recompute_config switch as MindFormers writes it: false, true (every
   layer), or how many first layers of each pipeline stage recompute ([2, 1];
   with pp_interleave_num > 1 one such list per chunk, [[2, 1], [1, 0]]). */
#define LLAMA_MAX_LAYER_COUNTS 64
typedef struct llama_layer_counts {
    int all;   /* true */
    int num;   /* > 0: a list of num counts (flattened chunk by chunk) */
    int rows;  /* the list's inner lists (0: flat) */
    int counts[LLAMA_MAX_LAYER_COUNTS];
} llama_layer_counts;

typedef struct llama_config {
    /* model.model_config */
    int vocab_size;        /* 256: byte-level tokens need >= 256 */
    int hidden_size;       /* model width C */
    int num_layers;        /* decoder blocks */
    int num_heads;         /* query heads; hidden_size % num_heads == 0 */
    int n_kv_heads;        /* key/value heads (GQA); absent or 0 = num_heads (MindFormers' None); divides num_heads */
    int intermediate_size; /* SwiGLU width; absent or 0 = MindFormers' rule from hidden_size, multiple_of and
                              ffn_dim_multiplier (llama_config_ffn_width; 11008 for Llama 2 7B) */
    int multiple_of;       /* 256: the derived FFN width is rounded up to a multiple of this */
    float ffn_dim_multiplier; /* 0 = none (MindFormers' None); scales 4 x hidden_size before the 2/3 */
    int seq_length;        /* tokens per sample T */
    float rms_norm_eps;    /* 1e-5 */
    float theta;           /* RoPE base, 10000 */
    float initializer_range; /* std of the normal init, 0.02 */
    int qkv_has_bias;      /* bool, default false: q_proj, k_proj and v_proj have biases (Qwen2) */
    int compute_dtype;     /* model_config.compute_dtype: 0 float32 (default), 1 bfloat16, 2 float16 (parallel.h's
                              PAR_F32, PAR_BF16, PAR_F16): weights copied from f32 masters, activations in it */

    /* parallel_config */
    int data_parallel;     /* dp degree */
    int model_parallel;    /* tp degree */
    int pipeline_stage;    /* pp degree: the layers split into this many stages */
    int micro_batch_num;   /* micro-batches per step per rank: gradient accumulation while pipeline_stage is 1 */
    int context_parallel;  /* cp degree: the sequence split over ranks */
    char context_parallel_algo[32]; /* "colossalai_cp" (ring), "ulysses_cp", "hybrid_cp" ("hybird_cp" read as hybrid_cp) */
    int ulysses_degree_in_cp;       /* 1 */
    int context_parallel_zigzag;    /* bool, default true: ring ranks hold chunks r and 2R-1-r (ours, not MindFormers') */
    int use_seq_parallel;  /* bool: sequence parallel over the model_parallel group */
    int vocab_emb_dp;      /* bool, default true */

    /* parallel */
    int parallel_mode;             /* LLAMA_PARALLEL_MODE_*: semi_auto_parallel (default), data_parallel, stand_alone */
    int full_batch;                /* bool, default true: how MindSpore feeds the batch (every rank reads all of it,
                                      or its own share); the same samples either way, so no effect on training */
    int parameter_broadcast;       /* bool, default false: true = broadcast the initial weights from the first
                                      rank of each replica group; false = each rank draws its own (identical) */
    int gradients_mean;            /* bool, default false: parallel_mode data_parallel only: true averages the
                                      ranks' gradients, false sums them; semi/auto parallel: the loss is the global
                                      batch's mean, so the gradient is one device's either way */
    int enable_parallel_optimizer; /* bool: ZeRO over the dp group */
    int optimizer_level;           /* parallel_optimizer_config.optimizer_level: 1 or 2 ("level1"/"level2") */
    int enable_alltoall;           /* bool, default false: the redistribution planner may use all_to_all (false:
                                      all-gather + local split instead) */
    char search_mode[24];          /* auto_parallel: "recursive_programming" (default), "dynamic_programming" or
                                      "sharding_propagation" (parallel.h's par_auto_desc.mode) */

    /* optimizer */
    int optimizer_type;    /* LLAMA_OPTIMIZER_*: AdamW (bias-corrected) or AdamWeightDecay (MindSpore's, without) */
    float learning_rate;   /* 1e-3 */
    float beta1, beta2;    /* 0.9, 0.999 (MindFormers' AdamW; optimizer.betas: [beta1, beta2] sets both) */
    float eps;             /* 1e-8 */
    float weight_decay;    /* 0.0 (MindFormers' default), only on tensors of rank >= 2 */

    /* lr_schedule */
    char lr_schedule[16];  /* "constant" (default) or "cosine" (linear warmup + cosine decay) */
    int warmup_steps;      /* 0 */
    float warmup_ratio;    /* 0 = unused; > 0: warmup_steps = (int)(total steps x warmup_ratio), as MindFormers */
    int total_steps;       /* cosine: decay length; 0 = the run's --steps */
    float min_lr;          /* cosine floor, 0 */

    /* runner_config */
    int batch_size;        /* MindFormers' batch_size: samples per data-parallel rank per micro-batch (pipeline)
                              or per accumulation step; read the global batch with llama_config_global_batch() */
    int global_batch_size; /* ours (Megatron's --global-batch-size): > 0 = the global batch as such, batch_size
                              unused; 0 = MindFormers' product (llama_config_global_batch) */
    int gradient_accumulation_steps; /* 1; without pipeline: micro-batches accumulated per step (they multiply
                              the global batch, as in MindFormers); under pipeline no effect (as in MindFormers) */

    /* runner_wrapper, top level */
    int use_clip_grad;     /* runner_wrapper.use_clip_grad: bool, false */
    float wrapper_max_grad_norm; /* runner_wrapper.max_grad_norm: 1.0 (MFTrainOneStepCell's default) */
    int scale_sense;       /* runner_wrapper.scale_sense.type: 0 none (no loss scaling), 1 DynamicLossScaleUpdateCell,
                              2 FixedLossScaleUpdateCell */
    float loss_scale_value; /* runner_wrapper.scale_sense.loss_scale_value: the initial scale, 65536 */
    float scale_factor;    /* runner_wrapper.scale_sense.scale_factor: dynamic growth (and 1 / backoff), 2 */
    int scale_window;      /* runner_wrapper.scale_sense.scale_window: good steps before growing, 1000 */
    float scale_sense_number; /* runner_wrapper.scale_sense given as a number (MindSpore's fixed Tensor scale):
                              llama_config_load folds it into the three above (FixedLossScaleUpdateCell of that
                              value) and leaves 0 here */
    float max_grad_norm;   /* ours, top level: 0 = no clipping; with use_clip_grad the effective norm is
                              runner_wrapper.max_grad_norm (llama_config_load stores it here) */
    char load_checkpoint[256]; /* "" = none; a .safetensors file or a --save-dir directory: --init-from */
    int resume_training;   /* bool: with load_checkpoint, continue its step count and optimizer state */
    uint64_t seed;         /* init and shuffle seed */

    /* MindFormers switches of features that have not landed. Stored (rather than
       refused while parsing) so that a --set can undo a file's value;
       llama_config_validate refuses anything but the default, naming the key. */
    int use_ring_attention;          /* model_config (or parallel_config): bool, false */
    int fine_grain_interleave;       /* model_config (or parallel_config): 1 */
    int pp_interleave_num;           /* model_config: 1 (virtual pipeline stages) */
    int offset;                      /* model_config: 0 (layers moved between pipeline stages) */
    int pipeline_interleave;         /* parallel.pipeline_config: bool, false */
    char pipeline_scheduler[16];     /* parallel.pipeline_config: "1f1b" (default), "gpipe", "zb-h1"; over
                                        chunks "1f1b" (interleaved), "looped_bfs" or "zb1p" */
    int micro_batch_interleave_num;  /* top level (or parallel_config): 1 (multi-copy interleave) */

    /* recompute_config (parallel.h's >>recompute; the trainer resolves them per layer) */
    llama_layer_counts recompute;        /* full recomputation: false */
    llama_layer_counts select_recompute; /* selective recomputation: false */
} llama_config;

/* optimizer.type */
enum {
    LLAMA_OPTIMIZER_ADAMW = 0,          /* AdamW, FusedAdamWeightDecay: PyTorch's AdamW (bias corrections) */
    LLAMA_OPTIMIZER_ADAMWEIGHTDECAY = 1 /* AdamWeightDecay, FP32StateAdamWeightDecay: MindSpore's, without them */
};

/* parallel.parallel_mode; 0..3 are MindFormers' integer spellings. */
enum {
    LLAMA_PARALLEL_MODE_DATA = 0,      /* data_parallel: pure data parallel (other degrees 1), batch per rank */
    LLAMA_PARALLEL_MODE_SEMI_AUTO = 1, /* semi_auto_parallel: the layouts of parallel_config (default) */
    LLAMA_PARALLEL_MODE_AUTO = 2,      /* auto_parallel: the planner picks the degrees (examples/llama/auto.h) */
    LLAMA_PARALLEL_MODE_HYBRID = 3,    /* hybrid_parallel: refused */
    LLAMA_PARALLEL_MODE_STAND_ALONE = 4 /* stand_alone: one device */
};

/* Command line of build/train. */
#define LLAMA_MAX_SETS 64
typedef struct llama_options {
    const char *config_path;          /* --config FILE.yaml (NULL: built-in defaults) */
    const char *sets[LLAMA_MAX_SETS]; /* --set key.path=value, in order */
    int num_sets;
    int steps;                        /* --steps N (default 10) */
    const char *data_path;            /* --data FILE (required unless --steps 0) */
    const char *init_from;            /* --init-from FILE.safetensors */
    const char *save_path;            /* --save FILE.safetensors */
    const char *save_dtype;           /* --save-dtype f32|bf16|f16: --save's weights (default f32) */
    const char *save_dir;             /* --save-dir DIR: sharded checkpoints (par_params_save) */
    int save_every;                   /* --save-every N: also every N steps (0 = only at the end) */
    int keep;                         /* --keep K: step directories kept (default 2; 0 = all) */
    const char *backend;              /* --backend threads|mpi|nccl|cuda-threads (default threads) */
    const char *metrics_path;         /* --metrics FILE.jsonl */
    const char *trace_path;           /* --trace FILE.json: per-rank timeline (Chrome trace JSON) */
    const char *pp_schedule_path;     /* --pp-schedule FILE: the pipeline schedule in parallel.h's text form */
    const char *cluster_path;         /* --cluster FILE: auto_parallel's cluster description (NULL: measure) */
    const char *max_device_memory;    /* --max-device-memory SIZE: auto_parallel's cap per rank ("64MiB") */
    int64_t seed;                     /* --seed N (-1: the config's seed) */
    int shuffle;                      /* --shuffle */
    int sample_tokens;                /* --sample N: generate N bytes after training (0 = none) */
    int quiet;                        /* --quiet: no per-step lines */
    int help;                         /* --help was given */
} llama_options;

/* Defaults (a small model that trains in seconds). */
void llama_config_defaults(llama_config *cfg);

/* Parse argv into opts. 0 on success; otherwise -1 with a sentence in err
   naming the argument. */
int llama_parse_args(int argc, char **argv, llama_options *opts, char *err, size_t errsize);

/* Print --help to f. */
void llama_print_usage(FILE *f);

/* Load: defaults, then the YAML file (if path != NULL), then the --set
   overrides in order, then MindFormers' derived values (n_kv_heads,
   intermediate_size), then validation (llama_config_validate). The config
   report: every problem at once. Errors go to err, one per line, each starting
   with where it comes from (FILE:LINE, or "--set KEY=VALUE"; a cross-key rule
   names where its other keys came from), "(N errors)" last when there are
   several; a value refused by its own key does not also fail the rules that
   read it. Warnings go to `warn` (may be NULL): one line per value that
   changes training against MindFormers (a float16 compute_dtype, a
   load_checkpoint without resume_training, ...), one per likely typo (an
   unknown key close to a known one), and one line summing up the other
   unknown keys. 0 on success; -1 with cfg untouched. */
int llama_config_load(const char *path, const char *const *sets, int num_sets, llama_config *cfg, FILE *warn,
                      char *err, size_t errsize);

/* Every stored key's own range, then (when those pass) the cross-key rules:
   the parallel mode (data_parallel: model/context/pipeline degrees 1 and
   full_batch false; stand_alone: one rank; hybrid_parallel refused;
   auto_parallel passes, its degrees then come from llama_auto_parallel in
   auto.h); divisibility (hidden % heads, heads % kv heads, even head dim, the
   global batch into data_parallel x micro-batches x copies; heads, kv heads,
   ffn, vocab and, with use_seq_parallel, seq_length by model_parallel);
   pipeline stages; clipping norms; load_checkpoint; and the switches of
   features that are not here (ZeRO level3, recomputation) refused by name
   with the reason. Every broken rule is reported, one line each in err. */
int llama_config_validate(const llama_config *cfg, char *err, size_t errsize);

/* Samples per optimizer step over all ranks: runner_config.global_batch_size
   if set, else MindFormers' product of runner_config.batch_size (per
   data-parallel rank) with data_parallel, micro_batch_interleave_num and
   micro_batch_num (pipeline) or gradient_accumulation_steps (no pipeline).
   For a config that passed llama_config_validate (which bounds it by 1048576);
   -1 for NULL or a product past INT_MAX. */
int llama_config_global_batch(const llama_config *c);

/* Micro-batches each rank runs per optimizer step (gradients accumulated):
   micro_batch_num under pipeline, else gradient_accumulation_steps x
   micro_batch_num (the latter only splits each accumulation step further). */
int llama_config_micro_batches(const llama_config *c);

/* The SwiGLU width: intermediate_size, or MindFormers' rule from hidden_size,
   multiple_of and ffn_dim_multiplier when it is 0 (llama_config_load stores
   the result in intermediate_size). */
int llama_config_ffn_width(const llama_config *c);

/* The gradient norm clipped to (0 = none): runner_wrapper.max_grad_norm with
   use_clip_grad, else the top-level max_grad_norm. */
float llama_config_clip_norm(const llama_config *c);

/* Warm-up steps for a run of total_steps: warmup_ratio's share if > 0, else
   warmup_steps. */
int64_t llama_config_warmup_steps(const llama_config *c, int64_t total_steps);

/* The device mesh the parallel_config degrees describe, as par_mesh_parse
   reads it: one named axis per degree, outermost first ("dp=2,tp=4"; the
   data-parallel axis "dp" and the tensor-parallel axis "tp" are always there,
   size 1 when unused, since the trainer's layouts and strategies name them). */
void llama_config_mesh(const llama_config *c, char *buf, size_t size);

/* Write the effective configuration as YAML (for the start-up summary). */
void llama_config_print(const llama_config *cfg, FILE *f);

/* The key table as a Markdown reference (docs/config.md, the Configuration
   reference, holds it). */
void llama_config_print_reference(FILE *f);

#endif /* LLAMA_CONFIG_H */

/* ------------------------------------------------------------------------- */
#ifdef LLAMA_CONFIG_IMPLEMENTATION
#include <yaml.h>
#include <errno.h>
#include <float.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <ctype.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

/* Features whose switch exists in the YAML but whose code has not landed.
   One place, so that the messages follow the issue tracker. */
#define LLAMA__TODO_ZERO3 "optimizer level3 (parameter sharding) is not implemented yet; use level1 or level2"
#define LLAMA__NO_HYBRID                                                                                    \
    "hybrid_parallel (communication written by hand in the network) is not supported: the trainer derives " \
    "its communication from parallel_config's layouts; use semi_auto_parallel"

#define LLAMA__MAX_PATH 128          /* longest dotted key path */
#define LLAMA__MAX_FILE (1 << 20)    /* a config larger than 1 MiB is not a config */

/* ---- the key table ------------------------------------------------------ */

/* TEXT: any scalar, for keys accepted and ignored (never stored). */
/* PAIR: two floats stored side by side ("[0.9, 0.95]", optimizer.betas); STRING: text stored in a char
   array of `size` bytes. */
enum {
    LLAMA__T_INT,
    LLAMA__T_U64,
    LLAMA__T_FLOAT,
    LLAMA__T_BOOL,
    LLAMA__T_CHOICE,
    LLAMA__T_TEXT,
    LLAMA__T_ALIAS,
    LLAMA__T_PAIR,
    LLAMA__T_STRING,
    LLAMA__T_LAYERS /* a llama_layer_counts: true, false, [2, 1] or [[2, 1], [1, 0]] */
};

enum {
    LLAMA__MIN_OPEN = 1,  /* value must be > min (not >=) */
    LLAMA__MAX_OPEN = 2,  /* value must be < max (not <=) */
    LLAMA__NEG1_ZERO = 4, /* MindFormers writes -1 for "the whole run": read it as 0 */
    LLAMA__CHANGES = 8,   /* accepted and not honoured: a value other than the default changes training against
                             MindFormers, which the config report lists (the help text says how) */
    LLAMA__FOLDED = 16    /* read, then folded into other keys by llama_config_load (llama__derive; never printed) */
};

/* One accepted spelling of an enumerated value: `name` is what the YAML may
   say, `canon` what is stored/printed, `value` what an int field stores. */
typedef struct llama__choice {
    const char *name;
    const char *canon;
    int value;
} llama__choice;

typedef struct llama__key {
    const char *path;   /* dotted path, e.g. "model.model_config.hidden_size" */
    int type;           /* LLAMA__T_* */
    size_t offset;      /* offsetof in llama_config; LLAMA__NONE: accepted, checked, ignored */
    size_t size;        /* CHOICE stored as text: the char array's size; 0: stored as int */
    double min, max;    /* range of INT/FLOAT keys */
    int flags;          /* LLAMA__MIN_OPEN | LLAMA__MAX_OPEN | LLAMA__NEG1_ZERO */
    const llama__choice *choices; /* CHOICE: the accepted spellings, NULL-terminated */
    const char *def;    /* default as YAML text (NULL for aliases) */
    const char *target; /* ALIAS: the key it stands for */
    const char *help;   /* one line for the reference */
} llama__key;

#define LLAMA__NONE ((size_t)-1)
#define LLAMA__AT(field) offsetof(llama_config, field)
#define LLAMA__NOMAX 1e300 /* "no upper bound" for FLOAT keys (finite and <= FLT_MAX is still checked) */
#define LLAMA__DEG 65536.0 /* largest parallel degree */
#define LLAMA__MAX_BATCH 1048576 /* largest batch_size, and largest global batch */

static const llama__choice llama__pp_schedulers[] = {{"1f1b", "1f1b", 0},   {"gpipe", "gpipe", 1},
                                                     {"zb-h1", "zb-h1", 2}, {"zbh1", "zb-h1", 2},
                                                     {"zero_bubble", "zb-h1", 2}, {"looped_bfs", "looped_bfs", 3},
                                                     {"loopedbfs", "looped_bfs", 3}, {"bfs", "looped_bfs", 3},
                                                     {"zb1p", "zb1p", 4}, {"interleaved_zb", "zb1p", 4},
                                                     {"interleaved_zero_bubble", "zb1p", 4}, {"zbv", "zbv", 5},
                                                     {"zero_bubble_v", "zbv", 5}, {"dualpipev", "dualpipev", 6},
                                                     {NULL, NULL, 0}};
static const llama__choice llama__scale_senses[] = {{"none", "none", 0},
                                                    {"DynamicLossScaleUpdateCell", "DynamicLossScaleUpdateCell", 1},
                                                    {"FixedLossScaleUpdateCell", "FixedLossScaleUpdateCell", 2},
                                                    {NULL, NULL, 0}};
/* MindFormers' dtype names (mindformers/tools/utils.py convert_mstype takes exactly these) */
static const llama__choice llama__dtypes[] = {{"float32", "float32", 0}, {"bfloat16", "bfloat16", 1},
                                              {"float16", "float16", 2}, {NULL, NULL, 0}};
static const llama__choice llama__cp_algos[] = {{"colossalai_cp", "colossalai_cp", 0},
                                                {"ulysses_cp", "ulysses_cp", 1},
                                                {"hybrid_cp", "hybrid_cp", 2},
                                                {"hybird_cp", "hybrid_cp", 2}, /* MindFormers' documented spelling */
                                                {NULL, NULL, 0}};
static const llama__choice llama__levels[] = {{"level1", "level1", 1}, {"level2", "level2", 2}, {"level3", "level3", 3},
                                              {"1", "level1", 1},      {"2", "level2", 2},      {"3", "level3", 3},
                                              {NULL, NULL, 0}};
static const llama__choice llama__schedules[] = {{"constant", "constant", 0},
                                                 {"cosine", "cosine", 1},
                                                 {"ConstantWarmUpLR", "constant", 0},
                                                 {"CosineWithWarmUpLR", "cosine", 1},
                                                 {NULL, NULL, 0}};
/* MindFormers' optimizers by their update (mindformers/core/optim at r1.5.0): AdamW (adamw.py) and
   FusedAdamWeightDecay (optim.py _update_run_op) divide by the bias corrections; FP32StateAdamWeightDecay
   (optim.py) is MindSpore's nn.AdamWeightDecay, which does not (ops.AdamWeightDecay's formula). */
static const llama__choice llama__optimizers[] = {
    {"AdamW", "AdamW", LLAMA_OPTIMIZER_ADAMW},
    {"adamw", "AdamW", LLAMA_OPTIMIZER_ADAMW},
    {"FusedAdamWeightDecay", "AdamW", LLAMA_OPTIMIZER_ADAMW},
    {"AdamWeightDecay", "AdamWeightDecay", LLAMA_OPTIMIZER_ADAMWEIGHTDECAY},
    {"FP32StateAdamWeightDecay", "AdamWeightDecay", LLAMA_OPTIMIZER_ADAMWEIGHTDECAY},
    {NULL, NULL, 0}};
static const llama__choice llama__parallel_modes[] = {
    {"semi_auto_parallel", "semi_auto_parallel", LLAMA_PARALLEL_MODE_SEMI_AUTO},
    {"data_parallel", "data_parallel", LLAMA_PARALLEL_MODE_DATA},
    {"stand_alone", "stand_alone", LLAMA_PARALLEL_MODE_STAND_ALONE},
    {"auto_parallel", "auto_parallel", LLAMA_PARALLEL_MODE_AUTO},
    {"hybrid_parallel", "hybrid_parallel", LLAMA_PARALLEL_MODE_HYBRID},
    {"0", "data_parallel", LLAMA_PARALLEL_MODE_DATA}, /* MindFormers' integers */
    {"1", "semi_auto_parallel", LLAMA_PARALLEL_MODE_SEMI_AUTO},
    {"2", "auto_parallel", LLAMA_PARALLEL_MODE_AUTO},
    {"3", "hybrid_parallel", LLAMA_PARALLEL_MODE_HYBRID},
    {NULL, NULL, 0}};
static const llama__choice llama__search_modes[] = {{"recursive_programming", "recursive_programming", 0},
                                                    {"dynamic_programming", "dynamic_programming", 1},
                                                    {"sharding_propagation", "sharding_propagation", 2},
                                                    {NULL, NULL, 0}};
static const llama__choice llama__run_modes[] = {{"train", "train", 0}, {"finetune", "finetune", 0}, {NULL, NULL, 0}};
static const llama__choice llama__archs[] = {{"LlamaForCausalLM", "LlamaForCausalLM", 0}, {NULL, NULL, 0}};
static const llama__choice llama__model_types[] = {{"LlamaConfig", "LlamaConfig", 0}, {NULL, NULL, 0}};

/* Every key the trainer knows. Keys of one section are contiguous (the YAML
   printer relies on it). Order: path, type, offset, size, min, max, flags,
   choices, default, alias target, help. */
static const llama__key llama__keys[] = {
    /* model */
    {"model.arch.type", LLAMA__T_CHOICE, LLAMA__NONE, 0, 0, 0, 0, llama__archs, "LlamaForCausalLM", NULL,
     "MindFormers model class; accepted and ignored (the trainer is always Llama)"},
    {"model.model_config.type", LLAMA__T_CHOICE, LLAMA__NONE, 0, 0, 0, 0, llama__model_types, "LlamaConfig", NULL,
     "MindFormers config class; accepted and ignored"},
    {"model.model_config.vocab_size", LLAMA__T_INT, LLAMA__AT(vocab_size), 0, 256, 16777216, 0, NULL, "256", NULL,
     "vocabulary size; the byte-level data needs at least 256"},
    {"model.model_config.hidden_size", LLAMA__T_INT, LLAMA__AT(hidden_size), 0, 1, 65536, 0, NULL, "64", NULL,
     "model width; a multiple of num_heads with an even head dim (RoPE rotates halves)"},
    {"model.model_config.num_layers", LLAMA__T_INT, LLAMA__AT(num_layers), 0, 1, 4096, 0, NULL, "2", NULL,
     "decoder blocks"},
    {"model.model_config.num_heads", LLAMA__T_INT, LLAMA__AT(num_heads), 0, 1, 4096, 0, NULL, "4", NULL,
     "query heads; must divide hidden_size"},
    {"model.model_config.n_kv_heads", LLAMA__T_INT, LLAMA__AT(n_kv_heads), 0, 0, 4096, 0, NULL, "0", NULL,
     "key/value heads (grouped-query attention); must divide num_heads; absent or 0 = num_heads (multi-head), as MindFormers reads None"},
    {"model.model_config.intermediate_size", LLAMA__T_INT, LLAMA__AT(intermediate_size), 0, 0, 1048576, 0, NULL,
     "0", NULL,
     "SwiGLU MLP width; absent or 0 = MindFormers' LlamaFeedForward rule: h = 4 x hidden_size, times (ffn_dim_multiplier + 0.01) if set, then int(2h/3) rounded up to a multiple of multiple_of (Llama 2 7B: 11008)"},
    {"model.model_config.multiple_of", LLAMA__T_INT, LLAMA__AT(multiple_of), 0, 1, 1048576, 0, NULL, "256", NULL,
     "the derived FFN width (intermediate_size absent) is rounded up to a multiple of this"},
    {"model.model_config.ffn_dim_multiplier", LLAMA__T_FLOAT, LLAMA__AT(ffn_dim_multiplier), 0, 0, 64, 0, NULL, "0",
     NULL, "scales 4 x hidden_size (by the value + 0.01, as MindFormers) before the 2/3 of the derived FFN width; 0 = none (Llama 3 70B: 1.3)"},
    {"model.model_config.seq_length", LLAMA__T_INT, LLAMA__AT(seq_length), 0, 1, 1048576, 0, NULL, "64", NULL,
     "tokens per sample"},
    {"model.model_config.rms_norm_eps", LLAMA__T_FLOAT, LLAMA__AT(rms_norm_eps), 0, 0, LLAMA__NOMAX, LLAMA__MIN_OPEN,
     NULL, "1e-5", NULL, "RMSNorm epsilon"},
    {"model.model_config.theta", LLAMA__T_FLOAT, LLAMA__AT(theta), 0, 0, LLAMA__NOMAX, LLAMA__MIN_OPEN, NULL, "10000",
     NULL, "RoPE base"},
    {"model.model_config.initializer_range", LLAMA__T_FLOAT, LLAMA__AT(initializer_range), 0, 0, LLAMA__NOMAX, 0, NULL,
     "0.02", NULL, "standard deviation of the normal weight init (norm weights start at 1)"},
    {"model.model_config.qkv_has_bias", LLAMA__T_BOOL, LLAMA__AT(qkv_has_bias), 0, 0, 0, 0, NULL, "false", NULL,
     "biases on q_proj, k_proj and v_proj (Qwen2): added after each projection, before RoPE; split over tensor parallel with the projections' output columns; never weight-decayed; start at 0; checkpoints name them model.layers.N.self_attn.{q,k,v}_proj.bias as Hugging Face Qwen2 does"},
    {"model.model_config.compute_dtype", LLAMA__T_CHOICE, LLAMA__AT(compute_dtype), 0, 0, 0, 0, llama__dtypes, "float32", NULL,
     "the type the layers compute in: bfloat16 / float16 = mixed precision (Megatron's --bf16 / --fp16): f32 master weights and AdamW state (what checkpoints hold), their bf16/f16 copy for the GEMMs, activations and their gradients stored in it (each kernel computes in f32 and rounds once on store), f32 weight gradients; float16 needs runner_wrapper.scale_sense"},
    {"model.model_config.layernorm_compute_type", LLAMA__T_CHOICE, LLAMA__NONE, 0, 0, 0, LLAMA__CHANGES, llama__dtypes, "float32",
     NULL, "RMSNorm computes in float32 inside the kernel (its output is stored in compute_dtype); another value changes training against MindFormers, which would compute the norm in it"},
    {"model.model_config.softmax_compute_type", LLAMA__T_CHOICE, LLAMA__NONE, 0, 0, 0, LLAMA__CHANGES, llama__dtypes, "float32",
     NULL, "the attention's softmax is float32 inside the flash kernel; another value changes training against MindFormers"},
    {"model.model_config.rotary_dtype", LLAMA__T_CHOICE, LLAMA__NONE, 0, 0, 0, LLAMA__CHANGES, llama__dtypes, "float32", NULL,
     "RoPE computes in float32 inside the kernel (its output is stored in compute_dtype); another value changes training against MindFormers"},
    {"model.model_config.param_init_type", LLAMA__T_CHOICE, LLAMA__NONE, 0, 0, 0, LLAMA__CHANGES, llama__dtypes, "float32", NULL,
     "the master weights (and AdamW state) stay float32 here, their compute copy is compute_dtype's; another value changes training against MindFormers, which would keep the parameters in it"},
    {"model.model_config.embedding_init_type", LLAMA__T_CHOICE, LLAMA__NONE, 0, 0, 0, LLAMA__CHANGES, llama__dtypes, "float32",
     NULL, "a value other than float32 changes training: the embedding here is float32"},
    {"model.model_config.scaling_factor", LLAMA__T_FLOAT, LLAMA__NONE, 0, 0, LLAMA__NOMAX, LLAMA__CHANGES, NULL, "1.0",
     NULL, "RoPE position scaling; a value other than 1 changes training (not implemented: positions are unscaled)"},
    {"model.model_config.extend_method", LLAMA__T_TEXT, LLAMA__NONE, 0, 0, 0, LLAMA__CHANGES, NULL, "None", NULL,
     "RoPE extension (PI, NTK); a value other than None changes training: RoPE is not extended here"},
    {"model.model_config.tie_word_embeddings", LLAMA__T_BOOL, LLAMA__NONE, 0, 0, 0, LLAMA__CHANGES, NULL, "false", NULL,
     "true changes training: lm_head and the embedding are separate weights here"},
    {"model.model_config.checkpoint_name_or_path", LLAMA__T_TEXT, LLAMA__NONE, 0, 0, 0, LLAMA__CHANGES, NULL, "", NULL,
     "a pretrained checkpoint to load changes training: nothing is downloaded or loaded here (use load_checkpoint or --init-from with a .safetensors file)"},
    {"model.model_config.use_flash_attention", LLAMA__T_BOOL, LLAMA__NONE, 0, 0, 0, 0, NULL, "false", NULL,
     "accepted either way: attention is always exact (flash-style online softmax), the same numbers as MindFormers' flash attention up to rounding"},
    {"model.model_config.use_attn_mask_compression", LLAMA__T_BOOL, LLAMA__NONE, 0, 0, 0, 0, NULL, "false", NULL,
     "accepted either way: attention never builds an S x S mask (causal masking comes from the token positions, which is what true asks for), so false changes nothing"},
    {"model.model_config.use_ring_attention", LLAMA__T_BOOL, LLAMA__AT(use_ring_attention), 0, 0, 0, 0, NULL, "false",
     NULL, "ring attention over the context-parallel group: true asks for context_parallel_algo colossalai_cp (the default; the other algorithms are an error with true); false changes nothing (context_parallel_algo decides)"},
    {"model.model_config.fine_grain_interleave", LLAMA__T_INT, LLAMA__AT(fine_grain_interleave), 0, 1, LLAMA__DEG, 0,
     NULL, "1", NULL,
     "fine-grained interleave: each micro-batch's samples cut into this many slices that run every layer interleaved (one slice computes while another's all-gather or reduce-scatter is in flight) and rejoin after it, as MindFormers' interleaved decoder layer; needs use_seq_parallel true, not with micro_batch_interleave_num > 1, pipeline_stage or context_parallel > 1"},
    {"model.model_config.pp_interleave_num", LLAMA__T_INT, LLAMA__AT(pp_interleave_num), 0, 1, LLAMA__DEG, 0, NULL, "1",
     NULL,
     "model chunks per pipeline rank (Megatron's virtual stages: rank r holds chunks r, r + pipeline_stage, ...; the interleaved 1F1B schedule, or pipeline_scheduler looped_bfs, zb1p; exactly 2 on a V for zbv, dualpipev); > 1 needs parallel.pipeline_config.pipeline_interleave true and, but for looped_bfs, zbv and dualpipev, micro_batch_num splitting into micro_batch_num / pipeline_stage rounds of equal size (any count when it is below 2 pipeline_stage)"},
    {"model.model_config.offset", LLAMA__T_INT, LLAMA__AT(offset), 0, -4096, 4096, 0, NULL, "0", NULL,
     "layers moved from the first pipeline stage (virtual stage) to the last: num_layers / (pipeline_stage x pp_interleave_num) per stage, the first offset fewer, the last offset more (negative: the other way); every stage keeps at least one layer (MindFormers also takes a per-stage list: not here)"},

    /* parallel_config */
    {"parallel_config.data_parallel", LLAMA__T_INT, LLAMA__AT(data_parallel), 0, 1, LLAMA__DEG, 0, NULL, "1", NULL,
     "data-parallel degree (ranks = data_parallel x model_parallel x pipeline_stage x context_parallel)"},
    {"parallel_config.model_parallel", LLAMA__T_INT, LLAMA__AT(model_parallel), 0, 1, LLAMA__DEG, 0, NULL, "1", NULL,
     "tensor-parallel degree (Megatron column/row parallel linears, heads and vocabulary split); must divide num_heads, n_kv_heads (kv heads are not replicated), intermediate_size and vocab_size"},
    {"parallel_config.pipeline_stage", LLAMA__T_INT, LLAMA__AT(pipeline_stage), 0, 1, LLAMA__DEG, 0, NULL, "1", NULL,
     "pipeline stages: the layers split into this many consecutive stages (parallel.h >>pipeline), the embedding on the first, the final norm, lm_head and the loss on the last; num_layers must split (see offset); schedule by parallel.pipeline_config"},
    {"parallel_config.micro_batch_num", LLAMA__T_INT, LLAMA__AT(micro_batch_num), 0, 1, LLAMA__DEG, 0, NULL, "1", NULL,
     "micro-batches per step on each rank; with pipeline_stage 1 this is gradient accumulation, each rank's share of the batch split into micro_batch_num parts (MindFormers uses it only for pipeline micro-batches and accumulates with runner_config.gradient_accumulation_steps, which multiplies the batch)"},
    {"parallel_config.context_parallel", LLAMA__T_INT, LLAMA__AT(context_parallel), 0, 1, LLAMA__DEG, 0, NULL, "1",
     NULL, "context-parallel degree: each sample's tokens split over this many ranks, attention by context_parallel_algo (parallel.h >>context-parallel); seq_length must be divisible by it"},
    {"parallel_config.context_parallel_algo", LLAMA__T_CHOICE, LLAMA__AT(context_parallel_algo),
     sizeof(((llama_config *)0)->context_parallel_algo), 0, 0, 0, llama__cp_algos, "colossalai_cp", NULL,
     "context-parallel algorithm: colossalai_cp (ring attention, K/V blocks passed around the ring), ulysses_cp (all-to-all between tokens and heads: num_heads / model_parallel must be divisible by context_parallel; kv heads fewer than it are replicated), hybrid_cp (Ulysses inside groups of ulysses_degree_in_cp, ring across them); no effect while context_parallel is 1"},
    {"parallel_config.ulysses_degree_in_cp", LLAMA__T_INT, LLAMA__AT(ulysses_degree_in_cp), 0, 1, LLAMA__DEG, 0, NULL,
     "1", NULL, "Ulysses part of context_parallel under hybrid_cp; must divide context_parallel"},
    {"parallel_config.context_parallel_zigzag", LLAMA__T_BOOL, LLAMA__AT(context_parallel_zigzag), 0, 0, 0, 0, NULL,
     "true", NULL,
     "our key, not MindFormers': true cuts the sequence into 2 x ring degree chunks and gives ring rank r chunks r and 2R-1-r, so every rank does the same causal work (seq_length must then also be divisible by 2 x the ring degree); false: contiguous blocks"},
    {"parallel_config.use_seq_parallel", LLAMA__T_BOOL, LLAMA__AT(use_seq_parallel), 0, 0, 0, 0, NULL, "false", NULL,
     "sequence parallel: norms and residual split by tokens over the model_parallel group (all-gather before column-parallel linears, reduce-scatter after row-parallel ones); needs seq_length divisible by model_parallel"},
    {"parallel_config.vocab_emb_dp", LLAMA__T_BOOL, LLAMA__AT(vocab_emb_dp), 0, 0, 0, 0, NULL, "true", NULL,
     "true: embedding replicated over model_parallel; false: split by vocabulary over it (lm_head and the loss are always vocabulary-parallel)"},
    {"parallel_config.gradient_aggregation_group", LLAMA__T_TEXT, LLAMA__NONE, 0, 0, 0, 0, NULL, "4", NULL,
     "accepted: how many gradients MindSpore fuses into one all-reduce; gradient buckets decide here (par_params_desc.bucket_bytes); the same numbers"},
    {"parallel_config.use_ring_attention", LLAMA__T_ALIAS, LLAMA__NONE, 0, 0, 0, 0, NULL, NULL,
     "model.model_config.use_ring_attention", "MindFormers keeps it in model_config"},
    {"parallel_config.use_attn_mask_compression", LLAMA__T_ALIAS, LLAMA__NONE, 0, 0, 0, 0, NULL, NULL,
     "model.model_config.use_attn_mask_compression", "MindFormers keeps it in model_config"},
    {"parallel_config.fine_grain_interleave", LLAMA__T_ALIAS, LLAMA__NONE, 0, 0, 0, 0, NULL, NULL,
     "model.model_config.fine_grain_interleave", "MindFormers keeps it in model_config"},
    {"parallel_config.micro_batch_interleave_num", LLAMA__T_ALIAS, LLAMA__NONE, 0, 0, 0, 0, NULL, NULL,
     "micro_batch_interleave_num", "MindFormers keeps it at the top level"},

    /* parallel */
    {"parallel.parallel_mode", LLAMA__T_CHOICE, LLAMA__AT(parallel_mode), 0, 0, 0, 0, llama__parallel_modes,
     "semi_auto_parallel", NULL,
     "semi_auto_parallel: the layouts of parallel_config; data_parallel: pure data parallel (model_parallel, context_parallel and pipeline_stage 1, and full_batch false: each rank reads its own batch_size samples, as in MindSpore); stand_alone: one device (every degree 1); auto_parallel: the planner (parallel.h >>planner) picks data_parallel, model_parallel, use_seq_parallel, context_parallel (+ algo), pipeline_stage (+ scheduler), micro_batch_num and the ZeRO level for the ranks the degrees as written ask for, under --max-device-memory, from --cluster FILE or a short measurement, prints the plan and trains; hybrid_parallel is not supported"},
    {"parallel.full_batch", LLAMA__T_BOOL, LLAMA__AT(full_batch), 0, 0, 0, 0, NULL, "true", NULL,
     "how MindSpore feeds the batch (every rank reads the whole global batch, or only its share); the samples and the global batch are the same either way (runner_config.batch_size), so no effect here; data_parallel mode needs false, as in MindSpore"},
    {"parallel.parameter_broadcast", LLAMA__T_BOOL, LLAMA__AT(parameter_broadcast), 0, 0, 0, 0, NULL, "false", NULL,
     "true: the initial weights are broadcast from the first rank of each replica group; false: every rank draws its own, identical by construction (counter-based init from the seed)"},
    {"parallel.gradients_mean", LLAMA__T_BOOL, LLAMA__AT(gradients_mean), 0, 0, 0, 0, NULL, "false", NULL,
     "parallel_mode data_parallel: true averages the ranks' gradients, false sums them (each rank's loss is the mean of its own samples); semi_auto_parallel and auto_parallel: the loss is the global batch's mean, so the summed gradient is one device's whatever this says (MindFormers' files set false for that reason)"},
    {"parallel.enable_parallel_optimizer", LLAMA__T_BOOL, LLAMA__AT(enable_parallel_optimizer), 0, 0, 0, 0, NULL,
     "false", NULL, "shard optimizer state over the data-parallel group (ZeRO)"},
    {"parallel.enable_alltoall", LLAMA__T_BOOL, LLAMA__AT(enable_alltoall), 0, 0, 0, 0, NULL, "false", NULL,
     "passed to the redistribution planner: false = plans never use all_to_all (all-gather + local split instead); true = all_to_all where it is cheaper"},
    {"parallel.parallel_optimizer_config.optimizer_level", LLAMA__T_CHOICE, LLAMA__AT(optimizer_level), 0, 0, 0, 0,
     llama__levels, "level1", NULL,
     "with enable_parallel_optimizer: level1 shards optimizer state, level2 also gradients; level3 not yet"},
    {"parallel.parallel_optimizer_config.parallel_optimizer_threshold", LLAMA__T_TEXT, LLAMA__NONE, 0, 0, 0, 0, NULL, "64",
     NULL, "accepted: MindSpore leaves parameters smaller than this many KB unsharded by the parallel optimizer; here every parameter is sharded, which changes memory, not the numbers"},
    {"parallel.parallel_optimizer_config.gradient_accumulation_shard", LLAMA__T_BOOL, LLAMA__NONE, 0, 0, 0, 0, NULL,
     "false", NULL, "accepted: where MindSpore keeps accumulated gradients under the parallel optimizer (optimizer_level level2 decides here); the same numbers"},
    {"parallel.pipeline_config.pipeline_interleave", LLAMA__T_BOOL, LLAMA__AT(pipeline_interleave), 0, 0, 0, 0, NULL,
     "false", NULL,
     "interleaved pipeline schedule (Megatron's interleaved 1F1B over model_config.pp_interleave_num chunks per rank); true needs pp_interleave_num > 1 and the reverse"},
    {"parallel.pipeline_config.pipeline_scheduler", LLAMA__T_CHOICE, LLAMA__AT(pipeline_scheduler),
     sizeof(((llama_config *)0)->pipeline_scheduler), 0, 0, 0, llama__pp_schedulers, "1f1b", NULL,
     "pipeline schedule: 1f1b (warm-up forwards, one forward one backward, cool-down), gpipe (all forwards, then all backwards) or zb-h1 (zero bubble: backward split into input and weight gradients, the weight ones deferred into 1F1B's bubbles; also zbh1, zero_bubble); with pipeline_interleave (over model chunks) 1f1b is the interleaved 1F1B, looped_bfs (also loopedbfs, bfs) every forward chunk by chunk then the backwards, as PyTorch's ScheduleLoopedBFS, and zb1p (also interleaved_zb, interleaved_zero_bubble) the interleaved zero bubble of PyTorch's ScheduleInterleavedZeroBubble, in the interleaved schedule's rounds; with pipeline_interleave and pp_interleave_num 2 also zbv (zero bubble on a V: rank 0 holds the first and the last virtual stage; also zero_bubble_v, MindFormers' name) or dualpipev (DeepSeek's DualPipe on the same V, micro_batch_num >= 2 x pipeline_stage); no effect while pipeline_stage is 1"},
    {"parallel.search_mode", LLAMA__T_CHOICE, LLAMA__AT(search_mode), sizeof(((llama_config *)0)->search_mode), 0, 0,
     0, llama__search_modes, "recursive_programming", NULL,
     "auto_parallel's search over the degrees (parallel.h par_auto_search): dynamic_programming visits every dp x tp x cp x pp, sharding_propagation keeps the parallel_config degrees set above 1 and searches the rest, recursive_programming moves data-parallel factors to tp, cp or pp while the predicted step time falls"},
    {"parallel.strategy_ckpt_save_file", LLAMA__T_TEXT, LLAMA__NONE, 0, 0, 0, 0, NULL, "./ckpt_strategy.ckpt", NULL,
     "accepted and ignored: no strategy file is written; checkpoints are saved whole, so they load into any layout without one"},

    /* recompute_config */
    {"recompute_config.recompute", LLAMA__T_LAYERS, LLAMA__AT(recompute), 0, 0, 0, 0, NULL, "false", NULL,
     "full recomputation: a layer keeps only its input and runs its forward again (collectives included) before its backward; true for every layer, or MindFormers' list of how many first layers of each pipeline stage ([2, 1]; per chunk with pp_interleave_num > 1: [[2, 1], [1, 0]]); bit-identical training, less activation memory (the memory plan shows it)"},
    {"recompute_config.select_recompute", LLAMA__T_LAYERS, LLAMA__AT(select_recompute), 0, 0, 0, 0, NULL, "false", NULL,
     "selective recomputation: a layer drops its norms' outputs and its SwiGLU product and computes them again (elementwise, no GEMM, no communication) before its backward; true or per-stage counts as recompute (which wins where both pick a layer); MindFormers' operator-pattern lists are refused: the set is fixed here"},
    {"recompute_config.select_comm_recompute", LLAMA__T_LAYERS, LLAMA__NONE, 0, 0, 0, 0, NULL, "false", NULL,
     "accepted, any value: the tensor-parallel gather of a norm output is never kept here but run again in the backward (what this key asks MindFormers to do for the layers it picks)"},
    {"recompute_config.parallel_optimizer_comm_recompute", LLAMA__T_LAYERS, LLAMA__NONE, 0, 0, 0, 0, NULL, "false", NULL,
     "accepted, any value: the ZeRO all-gather is of the updated weights after the step, never of a layer's input, so there is nothing for it to recompute"},
    {"recompute_config.mp_comm_recompute", LLAMA__T_BOOL, LLAMA__NONE, 0, 0, 0, 0, NULL, "true", NULL,
     "accepted, either value: a recomputed layer's tensor-parallel collectives are always run again (true's behaviour); no layer keeps a gathered tensor for its backward"},
    {"recompute_config.recompute_slice_activation", LLAMA__T_BOOL, LLAMA__NONE, 0, 0, 0, 0, NULL, "false", NULL,
     "accepted, either value: what a layer keeps is already this rank's slice (its rows under use_seq_parallel, its heads and ffn columns otherwise), true's behaviour"},

    /* optimizer */
    {"optimizer.type", LLAMA__T_CHOICE, LLAMA__AT(optimizer_type), 0, 0, 0, 0, llama__optimizers, "AdamW", NULL,
     "AdamW (also FusedAdamWeightDecay): decoupled weight decay with bias correction, PyTorch's update; AdamWeightDecay (also FP32StateAdamWeightDecay): MindSpore's, the same without the bias corrections (m / (sqrt(v) + eps)); optimizer state is float32 either way"},
    {"optimizer.betas", LLAMA__T_PAIR, LLAMA__AT(beta1), 0, 0, 1, LLAMA__MAX_OPEN, NULL, "[0.9, 0.999]", NULL,
     "[beta1, beta2] in one list (MindFormers' AdamW spelling); sets optimizer.beta1 and optimizer.beta2"},
    {"optimizer.learning_rate", LLAMA__T_FLOAT, LLAMA__AT(learning_rate), 0, 0, LLAMA__NOMAX, 0, NULL, "1e-3", NULL,
     "peak learning rate"},
    {"optimizer.beta1", LLAMA__T_FLOAT, LLAMA__AT(beta1), 0, 0, 1, LLAMA__MAX_OPEN, NULL, "0.9", NULL,
     "AdamW first-moment decay"},
    {"optimizer.beta2", LLAMA__T_FLOAT, LLAMA__AT(beta2), 0, 0, 1, LLAMA__MAX_OPEN, NULL, "0.999", NULL,
     "AdamW second-moment decay"},
    {"optimizer.eps", LLAMA__T_FLOAT, LLAMA__AT(eps), 0, 0, LLAMA__NOMAX, LLAMA__MIN_OPEN, NULL, "1e-8", NULL,
     "AdamW epsilon"},
    {"optimizer.weight_decay", LLAMA__T_FLOAT, LLAMA__AT(weight_decay), 0, 0, LLAMA__NOMAX, 0, NULL, "0", NULL,
     "decoupled weight decay, applied to tensors of rank >= 2 only (not norms or biases); 0 when absent, as MindFormers' optimizers"},

    /* lr_schedule */
    {"lr_schedule.type", LLAMA__T_CHOICE, LLAMA__AT(lr_schedule), sizeof(((llama_config *)0)->lr_schedule), 0, 0, 0,
     llama__schedules, "constant", NULL,
     "constant: linear warmup then flat; cosine: linear warmup then cosine decay to min_lr"},
    {"lr_schedule.learning_rate", LLAMA__T_ALIAS, LLAMA__NONE, 0, 0, 0, 0, NULL, NULL, "optimizer.learning_rate",
     "MindFormers spelling"},
    {"lr_schedule.warmup_steps", LLAMA__T_INT, LLAMA__AT(warmup_steps), 0, 0, INT_MAX, 0, NULL, "0", NULL,
     "steps of linear warmup from 0 to the learning rate"},
    {"lr_schedule.warmup_ratio", LLAMA__T_FLOAT, LLAMA__AT(warmup_ratio), 0, 0, 1, 0, NULL, "0", NULL,
     "> 0: warmup_steps = int(total steps x warmup_ratio), replacing warmup_steps (MindFormers' lr_schedule.py _get_warmup_steps); total steps = total_steps, or the run's --steps"},
    {"lr_schedule.total_steps", LLAMA__T_INT, LLAMA__AT(total_steps), 0, 0, INT_MAX, LLAMA__NEG1_ZERO, NULL, "0", NULL,
     "cosine: steps from start to min_lr (warmup included); 0 or -1 = the run's --steps"},
    {"lr_schedule.min_lr", LLAMA__T_FLOAT, LLAMA__AT(min_lr), 0, 0, LLAMA__NOMAX, 0, NULL, "0", NULL,
     "cosine: final learning rate, at most the learning rate"},
    {"lr_schedule.lr_end", LLAMA__T_ALIAS, LLAMA__NONE, 0, 0, 0, 0, NULL, NULL, "lr_schedule.min_lr",
     "MindFormers spelling"},

    /* runner_config */
    {"runner_config.batch_size", LLAMA__T_INT, LLAMA__AT(batch_size), 0, 1, LLAMA__MAX_BATCH, 0, NULL, "8", NULL,
     "MindFormers' batch_size: samples per data-parallel rank per pipeline micro-batch, or per accumulation step; the global batch is batch_size x data_parallel x micro_batch_interleave_num x micro_batch_num (pipeline_stage > 1) or x gradient_accumulation_steps (pipeline_stage 1), as MindFormers' base_trainer.py computes it (parallel_mode data_parallel: batch_size x ranks x gradient_accumulation_steps)"},
    {"runner_config.global_batch_size", LLAMA__T_INT, LLAMA__AT(global_batch_size), 0, 0, LLAMA__MAX_BATCH, 0, NULL,
     "0", NULL,
     "ours, not MindFormers' (Megatron's --global-batch-size): > 0 gives the global batch directly, split evenly over data_parallel, micro-batches and copies, and batch_size is then not used; 0 = batch_size's product"},
    {"runner_config.gradient_accumulation_steps", LLAMA__T_INT, LLAMA__AT(gradient_accumulation_steps), 0, 1, 1048576, 0,
     NULL, "1", NULL,
     "gradient accumulation without pipeline: this many micro-batches of batch_size per rank are accumulated into one optimizer step (the global batch grows by it); under pipeline_stage > 1 no effect, as in MindFormers (micro_batch_num accumulates there)"},
    {"runner_config.epochs", LLAMA__T_INT, LLAMA__NONE, 0, 1, INT_MAX, 0, NULL, "1", NULL,
     "accepted and ignored: the run length is --steps"},
    {"runner_config.sink_mode", LLAMA__T_BOOL, LLAMA__NONE, 0, 0, 0, 0, NULL, "true", NULL, "accepted and ignored"},
    {"runner_config.sink_size", LLAMA__T_INT, LLAMA__NONE, 0, -1, INT_MAX, 0, NULL, "1", NULL, "accepted and ignored"},

    /* runner_wrapper */
    {"runner_wrapper.type", LLAMA__T_TEXT, LLAMA__NONE, 0, 0, 0, 0, NULL, "MFTrainOneStepCell", NULL,
     "accepted and ignored: one training step is forward, backward, clipping (use_clip_grad) and the optimizer"},
    {"runner_wrapper.scale_sense", LLAMA__T_FLOAT, LLAMA__AT(scale_sense_number), 0, 0, LLAMA__NOMAX, LLAMA__FOLDED, NULL,
     "0", NULL,
     "the number form (MFTrainOneStepCell's Tensor scale_sense): a fixed loss scale of that value, read as scale_sense.type FixedLossScaleUpdateCell with loss_scale_value (when the section gives no type); 0 = none"},
    {"runner_wrapper.scale_sense.type", LLAMA__T_CHOICE, LLAMA__AT(scale_sense), 0, 0, 0, 0, llama__scale_senses, "none",
     NULL, "loss scaling (MindSpore's update cells): DynamicLossScaleUpdateCell = GradScaler's rule (an inf/nan gradient on any rank skips the step on every rank and divides the scale by scale_factor; scale_window good steps multiply it), FixedLossScaleUpdateCell = a fixed scale (an overflowing step is still skipped), none = no scaling (bfloat16 and float32 need none)"},
    {"runner_wrapper.scale_sense.loss_scale_value", LLAMA__T_FLOAT, LLAMA__AT(loss_scale_value), 0, 0, LLAMA__NOMAX,
     LLAMA__MIN_OPEN, NULL, "65536", NULL, "the initial loss scale"},
    {"runner_wrapper.scale_sense.scale_factor", LLAMA__T_FLOAT, LLAMA__AT(scale_factor), 0, 1, LLAMA__NOMAX,
     LLAMA__MIN_OPEN, NULL, "2", NULL, "DynamicLossScaleUpdateCell: growth factor; the backoff is its inverse"},
    {"runner_wrapper.scale_sense.scale_window", LLAMA__T_INT, LLAMA__AT(scale_window), 0, 1, INT_MAX, 0, NULL, "1000",
     NULL, "DynamicLossScaleUpdateCell: consecutive good steps before the scale grows"},
    {"runner_wrapper.use_clip_grad", LLAMA__T_BOOL, LLAMA__AT(use_clip_grad), 0, 0, 0, 0, NULL, "false", NULL,
     "clip the global gradient norm to runner_wrapper.max_grad_norm (MFTrainOneStepCell)"},
    {"runner_wrapper.max_grad_norm", LLAMA__T_FLOAT, LLAMA__AT(wrapper_max_grad_norm), 0, 0, LLAMA__NOMAX,
     LLAMA__MIN_OPEN, NULL, "1.0", NULL, "the clipping norm when use_clip_grad is true (MFTrainOneStepCell's default 1.0)"},

    /* top level */
    {"max_grad_norm", LLAMA__T_FLOAT, LLAMA__AT(max_grad_norm), 0, 0, LLAMA__NOMAX, 0, NULL, "0", NULL,
     "ours: clip the global gradient norm to this; 0 = no clipping (MindFormers: runner_wrapper.use_clip_grad and max_grad_norm, which win when use_clip_grad is true)"},
    {"load_checkpoint", LLAMA__T_STRING, LLAMA__AT(load_checkpoint), sizeof(((llama_config *)0)->load_checkpoint), 0,
     0, 0, NULL, "", NULL,
     "a .safetensors file (Hugging Face names) or a --save-dir step directory to start from, as --init-from; MindSpore .ckpt files cannot be read (convert them to safetensors first)"},
    {"resume_training", LLAMA__T_BOOL, LLAMA__AT(resume_training), 0, 0, 0, 0, NULL, "false", NULL,
     "true: continue load_checkpoint's step count and optimizer state; false: its weights only would be MindFormers' reading, but a checkpoint with optimizer state resumes here (the report warns)"},
    {"src_strategy_path_or_dir", LLAMA__T_TEXT, LLAMA__NONE, 0, 0, 0, 0, NULL, "", NULL,
     "accepted and ignored: checkpoints here are whole or self-describing shards, loadable into any layout"},
    {"auto_trans_ckpt", LLAMA__T_BOOL, LLAMA__NONE, 0, 0, 0, 0, NULL, "false", NULL,
     "accepted and ignored: any checkpoint loads into any layout here (see src_strategy_path_or_dir)"},
    {"only_save_strategy", LLAMA__T_BOOL, LLAMA__NONE, 0, 0, 0, LLAMA__CHANGES, NULL, "false", NULL,
     "true changes training: MindFormers would stop after writing the strategy files; here the run trains (no strategy files exist)"},
    {"output_dir", LLAMA__T_TEXT, LLAMA__NONE, 0, 0, 0, 0, NULL, "./output", NULL,
     "accepted and ignored: --save and --save-dir name the outputs"},
    {"lr_scale", LLAMA__T_BOOL, LLAMA__NONE, 0, 0, 0, LLAMA__CHANGES, NULL, "false", NULL,
     "true changes training: MindFormers would scale the learning rate by the global batch / lr_scale_factor; not done here"},
    {"lr_scale_factor", LLAMA__T_TEXT, LLAMA__NONE, 0, 0, 0, 0, NULL, "256", NULL, "accepted and ignored (see lr_scale)"},
    {"layer_scale", LLAMA__T_BOOL, LLAMA__NONE, 0, 0, 0, LLAMA__CHANGES, NULL, "false", NULL,
     "true changes training: MindFormers would decay the learning rate layer by layer (layer_decay); not done here"},
    {"layer_decay", LLAMA__T_TEXT, LLAMA__NONE, 0, 0, 0, 0, NULL, "0.65", NULL, "accepted and ignored (see layer_scale)"},
    {"seed", LLAMA__T_U64, LLAMA__AT(seed), 0, 0, 0, 0, NULL, "1234", NULL, "seed of the weight init and the data shuffle"},
    {"micro_batch_interleave_num", LLAMA__T_INT, LLAMA__AT(micro_batch_interleave_num), 0, 1, LLAMA__DEG, 0, NULL, "1",
     NULL,
     "multi-copy interleave: each micro-batch's samples split into this many copies, each on its own thread; one copy computes while another's tensor-parallel collective is in flight (parallel.h par_copies); losses equal those of micro_batch_num x this many micro-batches; needs pipeline_stage and context_parallel 1"},
    {"run_mode", LLAMA__T_CHOICE, LLAMA__NONE, 0, 0, 0, 0, llama__run_modes, "train", NULL, "accepted and ignored"},
    {"use_parallel", LLAMA__T_BOOL, LLAMA__NONE, 0, 0, 0, 0, NULL, "false", NULL,
     "accepted and ignored: --backend and the launcher decide"},
};
#define LLAMA__NUM_KEYS ((int)(sizeof(llama__keys) / sizeof(llama__keys[0])))

/* ---- small helpers ------------------------------------------------------ */

#if defined(__GNUC__) || defined(__clang__)
__attribute__((format(printf, 3, 4)))
#endif
static int llama__fail(char *err, size_t errsize, const char *fmt, ...) {
    if (err && errsize) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errsize, fmt, ap);
        va_end(ap);
    }
    return -1;
}

static const llama__key *llama__find(const char *path, size_t len) {
    for (int i = 0; i < LLAMA__NUM_KEYS; i++)
        if (strlen(llama__keys[i].path) == len && memcmp(llama__keys[i].path, path, len) == 0) return &llama__keys[i];
    return NULL;
}

static const llama__key *llama__resolve_alias(const llama__key *k) {
    if (k->type != LLAMA__T_ALIAS) return k;
    return llama__find(k->target, strlen(k->target));
}

/* A section is a proper prefix of some key, ending at a dot ("model",
   "model.model_config"). The first key under it is returned as an example. */
static const llama__key *llama__section_example(const char *path, size_t len) {
    const llama__key *any = NULL;
    if (len == 0) return NULL;
    for (int i = 0; i < LLAMA__NUM_KEYS; i++) {
        const char *p = llama__keys[i].path;
        if (!(strlen(p) > len && memcmp(p, path, len) == 0 && p[len] == '.')) continue;
        if (llama__keys[i].offset != LLAMA__NONE) return &llama__keys[i]; /* a key that does something */
        if (!any) any = &llama__keys[i];
    }
    return any;
}

/* Levenshtein distance, capped inputs (paths are short). */
static int llama__edit_distance(const char *a, const char *b) {
    int row[LLAMA__MAX_PATH + 1];
    int la = (int)strlen(a), lb = (int)strlen(b);
    if (la > LLAMA__MAX_PATH) la = LLAMA__MAX_PATH;
    if (lb > LLAMA__MAX_PATH) lb = LLAMA__MAX_PATH;
    for (int j = 0; j <= lb; j++) row[j] = j;
    for (int i = 1; i <= la; i++) {
        int diag = row[0];
        row[0] = i;
        for (int j = 1; j <= lb; j++) {
            int up = row[j];
            int best = diag + (a[i - 1] != b[j - 1]);
            if (up + 1 < best) best = up + 1;
            if (row[j - 1] + 1 < best) best = row[j - 1] + 1;
            row[j] = best;
            diag = up;
        }
    }
    return row[lb];
}

static const char *llama__last_component(const char *path) {
    const char *dot = strrchr(path, '.');
    return dot ? dot + 1 : path;
}

/* The known key (or section) an unknown path was most likely meant to be:
   the closest by edit distance when it is close, else the one key with the
   same last name in another section ("batch_size" -> runner_config.batch_size).
   Writes "" when nothing fits. */
static void llama__suggest(const char *unknown, char *out, size_t outsize) {
    int best = INT_MAX;
    const char *best_path = NULL;
    out[0] = 0;
    for (int i = 0; i < LLAMA__NUM_KEYS; i++) {
        /* candidates: the key and each of its sections */
        char cand[LLAMA__MAX_PATH + 1];
        snprintf(cand, sizeof cand, "%s", llama__keys[i].path);
        for (;;) {
            int d = llama__edit_distance(unknown, cand);
            if (d < best) {
                best = d;
                best_path = llama__keys[i].path;
                snprintf(out, outsize, "%s", cand);
            }
            char *dot = strrchr(cand, '.');
            if (!dot) break;
            *dot = 0;
        }
    }
    int len = (int)strlen(unknown);
    if (best_path && best <= 3 && best * 4 <= len) return;
    out[0] = 0;
    const char *last = llama__last_component(unknown);
    const char *match = NULL;
    for (int i = 0; i < LLAMA__NUM_KEYS; i++) {
        if (llama__keys[i].type == LLAMA__T_ALIAS || llama__keys[i].offset == LLAMA__NONE) continue;
        if (strcmp(llama__last_component(llama__keys[i].path), last) != 0) continue;
        if (match) return; /* ambiguous: say nothing rather than guess */
        match = llama__keys[i].path;
    }
    if (match) snprintf(out, outsize, "%s", match);
}

/* Shortest text that reads back as the same float; "1.0e-05" rather than
   "1e-05" so that YAML 1.1 readers (PyYAML) see a number too. */
static void llama__format_float(float v, char *buf, size_t size) {
    if (v == floorf(v) && fabsf(v) < 1e9f) { /* 10000, not 1e+04 */
        snprintf(buf, size, "%.0f", (double)v);
        return;
    }
    for (int prec = 1; prec <= 9; prec++) {
        snprintf(buf, size, "%.*g", prec, (double)v);
        if ((float)strtod(buf, NULL) == v) break;
    }
    char *e = strchr(buf, 'e');
    if (e && !memchr(buf, '.', (size_t)(e - buf)) && strlen(buf) + 3 <= size) {
        memmove(e + 2, e, strlen(e) + 1);
        e[0] = '.';
        e[1] = '0';
    }
}

/* The range of an INT/FLOAT key in words: "in [1, 65536]", ">= 0", "> 0",
   "in [0, 1)". */
static void llama__range_text(const llama__key *k, char *buf, size_t size) {
    char lo[24], hi[24];
    snprintf(lo, sizeof lo, "%.10g", k->min);
    snprintf(hi, sizeof hi, "%.10g", k->max);
    int unbounded = k->type == LLAMA__T_FLOAT ? k->max >= LLAMA__NOMAX : k->max >= (double)INT_MAX;
    if (unbounded)
        snprintf(buf, size, "%s %s%s", (k->flags & LLAMA__MIN_OPEN) ? ">" : ">=", lo,
                 (k->flags & LLAMA__NEG1_ZERO) ? " (or -1, read as 0)" : "");
    else
        snprintf(buf, size, "in %c%s, %s%c", (k->flags & LLAMA__MIN_OPEN) ? '(' : '[', lo, hi,
                 (k->flags & LLAMA__MAX_OPEN) ? ')' : ']');
}

static void llama__choice_list(const llama__choice *c, char *buf, size_t size) {
    size_t used = 0;
    buf[0] = 0;
    for (int i = 0; c[i].name && used < size; i++)
        used += (size_t)snprintf(buf + used, size - used, "%s%s", i ? ", " : "", c[i].name);
}

/* ---- value parsing (shared by YAML and --set) ---------------------------- */

/* Decimal digits only; -1 not a number, -2 overflow, -3 a leading zero. */
static int llama__parse_u64(const char *s, uint64_t *out) {
    if (!(*s >= '0' && *s <= '9')) return -1;
    if (s[0] == '0' && s[1]) return (s[1] >= '0' && s[1] <= '9') ? -3 : -1;
    uint64_t v = 0;
    int overflow = 0;
    for (; *s; s++) {
        if (!(*s >= '0' && *s <= '9')) return -1;
        unsigned d = (unsigned)(*s - '0');
        if (v > (UINT64_MAX - d) / 10) overflow = 1;
        else v = v * 10 + d;
    }
    if (overflow) return -2;
    *out = v;
    return 0;
}

static int llama__int_error(int rc, char *why, size_t whysize) {
    if (rc == -3) return llama__fail(why, whysize, "not an integer (a leading zero means octal in YAML 1.1; drop it)");
    if (rc == -2) return llama__fail(why, whysize, "integer too large");
    return llama__fail(why, whysize, "not an integer");
}

static int llama__parse_ll(const char *s, long long *out, char *why, size_t whysize) {
    int neg = 0;
    if (*s == '+' || *s == '-') neg = *s++ == '-';
    uint64_t u;
    int rc = llama__parse_u64(s, &u);
    if (rc) return llama__int_error(rc, why, whysize);
    if (u > (uint64_t)LLONG_MAX) return llama__int_error(-2, why, whysize);
    *out = neg ? -(long long)u : (long long)u;
    return 0;
}

static int llama__check_int(const llama__key *k, long long v, char *why, size_t whysize) {
    if ((double)v < k->min || (double)v > k->max) {
        char range[64];
        llama__range_text(k, range, sizeof range);
        return llama__fail(why, whysize, "must be %s", range);
    }
    return 0;
}

static int llama__check_float(const llama__key *k, double v, char *why, size_t whysize) {
    if (!isfinite(v)) return llama__fail(why, whysize, "must be a finite number");
    if (fabs(v) > FLT_MAX) return llama__fail(why, whysize, "out of the float range");
    int below = (k->flags & LLAMA__MIN_OPEN) ? v <= k->min : v < k->min;
    int above = (k->flags & LLAMA__MAX_OPEN) ? v >= k->max : v > k->max;
    if (below || above) {
        char range[64];
        llama__range_text(k, range, sizeof range);
        return llama__fail(why, whysize, "must be %s", range);
    }
    return 0;
}

/* YAML 1.1 booleans as PyYAML (and so MindFormers) reads them, plus 1/0 for
   the command line. y/n are not booleans there, so not here either. */
static int llama__parse_bool(const char *s, int *out) {
    static const char *const yes[] = {"true", "True", "TRUE", "yes", "Yes", "YES", "on", "On", "ON", "1"};
    static const char *const no[] = {"false", "False", "FALSE", "no", "No", "NO", "off", "Off", "OFF", "0"};
    for (size_t i = 0; i < sizeof yes / sizeof yes[0]; i++) {
        if (strcmp(s, yes[i]) == 0 || strcmp(s, no[i]) == 0) {
            *out = strcmp(s, yes[i]) == 0;
            return 0;
        }
    }
    return -1;
}

static void *llama__field(llama_config *cfg, const llama__key *k) { return (char *)cfg + k->offset; }

/* A recompute_config switch: "true", "false", "[2, 1]" or "[[2, 1], [1, 0]]"
   (the YAML loader hands a sequence over in this form). */
static int llama__parse_layers(const char *s, llama_layer_counts *out, char *why, size_t whysize) {
    llama_layer_counts v;
    int b, depth = 0, flat = 0, row = 0, row_len = -1;
    memset(&v, 0, sizeof v);
    if (!llama__parse_bool(s, &b)) return v.all = b, *out = v, 0;
    for (const char *p = s; *p;) {
        char *end;
        if (*p == ' ' || *p == ',') {
            p++;
        } else if (*p == '[') {
            if (++depth > 2) return llama__fail(why, whysize, "nested deeper than a list of lists (one per chunk)");
            row = 0, p++;
        } else if (*p == ']') {
            if (depth == 0) return llama__fail(why, whysize, "a ']' without its '['");
            if (depth-- == 2) {
                if (row_len >= 0 && row != row_len)
                    return llama__fail(why, whysize, "chunk lists of %d and %d counts: one count per pipeline stage in each",
                                       row_len, row);
                row_len = row, v.rows++;
            }
            p++;
        } else {
            errno = 0;
            long n = strtol(p, &end, 10);
            if ((end == p || (*end && !strchr(" ,]", *end))) && depth == 0)
                return llama__fail(why, whysize, "not a boolean (use true or false) or a list of layer counts");
            if (end == p || (*end && !strchr(" ,]", *end)))
                return llama__fail(why, whysize, "not a layer count ('%.*s'): operator patterns are not supported, the "
                                                 "selective set is fixed here (the norms' outputs and the SwiGLU "
                                                 "product); use true, false or a count of first layers per pipeline "
                                                 "stage", (int)(strcspn(p, ",]") < 40 ? strcspn(p, ",]") : 40), p);
            if (n < 0 || n > 1000000 || errno) return llama__fail(why, whysize, "a count of layers is in [0, 1000000]");
            if (v.num == LLAMA_MAX_LAYER_COUNTS) return llama__fail(why, whysize, "more than %d counts", LLAMA_MAX_LAYER_COUNTS);
            v.counts[v.num++] = (int)n, row++, flat |= depth < 2, p = end;
        }
    }
    if (depth != 0) return llama__fail(why, whysize, "a '[' without its ']'");
    if (v.num == 0) return llama__fail(why, whysize, "an empty list (use false)");
    if (v.rows && flat) return llama__fail(why, whysize, "counts beside chunk lists: either [2, 1] or [[2, 1], [1, 0]]");
    *out = v;
    return 0;
}
static const void *llama__cfield(const llama_config *cfg, const llama__key *k) {
    return (const char *)cfg + k->offset;
}

/* Parse `s` as the value of key k (not an alias) and store it in cfg (keys
   without storage are only checked). On failure, `why` gets the reason
   ("not an integer", "must be >= 1") and cfg is unchanged. */
static int llama__parse_value(const llama__key *k, const char *s, llama_config *cfg, char *why, size_t whysize) {
    int store = k->offset != LLAMA__NONE;
    if (!*s && k->type != LLAMA__T_STRING && k->type != LLAMA__T_TEXT) return llama__fail(why, whysize, "has no value");
    switch (k->type) {
    case LLAMA__T_INT: {
        long long v;
        if (llama__parse_ll(s, &v, why, whysize)) return -1;
        if ((k->flags & LLAMA__NEG1_ZERO) && v == -1) v = 0;
        if (llama__check_int(k, v, why, whysize)) return -1;
        if (store) *(int *)llama__field(cfg, k) = (int)v;
        return 0;
    }
    case LLAMA__T_U64: {
        uint64_t v = 0;
        int rc = (*s == '-') ? -4 : llama__parse_u64(*s == '+' ? s + 1 : s, &v);
        if (rc == -4) return llama__fail(why, whysize, "must be >= 0");
        if (rc) return llama__int_error(rc, why, whysize);
        if (store) *(uint64_t *)llama__field(cfg, k) = v;
        return 0;
    }
    case LLAMA__T_FLOAT: {
        /* strtod also reads hex floats, "inf" and "nan"; the first is not
           YAML and the others are caught by the finiteness check */
        if (strchr(s, 'x') || strchr(s, 'X') || *s == ' ' || *s == '\t') return llama__fail(why, whysize, "not a number");
        char *end;
        errno = 0;
        double v = strtod(s, &end);
        if (end == s || *end) return llama__fail(why, whysize, "not a number");
        if (errno == ERANGE && fabs(v) > 1) return llama__fail(why, whysize, "out of the float range");
        if (llama__check_float(k, v, why, whysize)) return -1;
        if (v != 0 && (float)v == 0) return llama__fail(why, whysize, "too small for a float (use 0)");
        if (store) *(float *)llama__field(cfg, k) = (float)v;
        return 0;
    }
    case LLAMA__T_BOOL: {
        int v;
        if (llama__parse_bool(s, &v)) return llama__fail(why, whysize, "not a boolean (use true or false)");
        if (store) *(int *)llama__field(cfg, k) = v;
        return 0;
    }
    case LLAMA__T_CHOICE:
        for (int i = 0; k->choices[i].name; i++) {
            if (strcmp(s, k->choices[i].name) != 0) continue;
            if (store && k->size) snprintf((char *)llama__field(cfg, k), k->size, "%s", k->choices[i].canon);
            else if (store) *(int *)llama__field(cfg, k) = k->choices[i].value;
            return 0;
        }
        {
            char list[256];
            llama__choice_list(k->choices, list, sizeof list);
            return llama__fail(why, whysize, "not one of %s", list);
        }
    case LLAMA__T_TEXT:
        if (store) return llama__fail(why, whysize, "internal error: a text key cannot be stored");
        return 0;
    case LLAMA__T_STRING:
        if (strlen(s) >= k->size) return llama__fail(why, whysize, "longer than %zu characters", k->size - 1);
        if (store) snprintf((char *)llama__field(cfg, k), k->size, "%s", s);
        return 0;
    case LLAMA__T_LAYERS: {
        llama_layer_counts v;
        if (llama__parse_layers(s, &v, why, whysize)) return -1;
        if (store) *(llama_layer_counts *)llama__field(cfg, k) = v;
        return 0;
    }
    case LLAMA__T_PAIR: {
        /* "[a, b]", "a, b" or "a,b": two numbers, each in the key's range */
        char buf[128], *end;
        const char *p = s;
        double v[2];
        while (*p == ' ' || *p == '[') p++;
        snprintf(buf, sizeof buf, "%s", p);
        for (int i = 0; i < 2; i++) {
            char *q = i == 0 ? buf : end;
            while (*q == ' ' || (i == 1 && *q == ',')) q++;
            errno = 0;
            v[i] = strtod(q, &end);
            if (end == q || strchr("xX", *q)) return llama__fail(why, whysize, "needs two numbers, [beta1, beta2]");
            if (llama__check_float(k, v[i], why, whysize)) return -1;
        }
        while (*end == ' ' || *end == ']') end++;
        if (*end) return llama__fail(why, whysize, "needs exactly two numbers, [beta1, beta2]");
        if (store) ((float *)llama__field(cfg, k))[0] = (float)v[0], ((float *)llama__field(cfg, k))[1] = (float)v[1];
        return 0;
    }
    default:
        return llama__fail(why, whysize, "internal error: bad key type");
    }
}

/* Does the stored value of key k in cfg pass the key's own rules? Used by
   validate, so that a config built in code gets the same checks. */
static int llama__check_stored(const llama__key *k, const llama_config *cfg, char *why, size_t whysize) {
    const void *p = llama__cfield(cfg, k);
    switch (k->type) {
    case LLAMA__T_INT: return llama__check_int(k, *(const int *)p, why, whysize);
    case LLAMA__T_FLOAT: return llama__check_float(k, *(const float *)p, why, whysize);
    case LLAMA__T_BOOL:
        if (*(const int *)p != 0 && *(const int *)p != 1) return llama__fail(why, whysize, "must be 0 or 1 (a boolean)");
        return 0;
    case LLAMA__T_CHOICE: {
        for (int i = 0; k->choices[i].name; i++) {
            if (k->size && memchr(p, 0, k->size) && strcmp((const char *)p, k->choices[i].canon) == 0) return 0;
            if (!k->size && *(const int *)p == k->choices[i].value) return 0;
        }
        char list[256];
        llama__choice_list(k->choices, list, sizeof list);
        return llama__fail(why, whysize, "must be one of %s", list);
    }
    case LLAMA__T_PAIR:
        if (llama__check_float(k, ((const float *)p)[0], why, whysize)) return -1;
        return llama__check_float(k, ((const float *)p)[1], why, whysize);
    case LLAMA__T_STRING:
        return memchr(p, 0, k->size) ? 0 : llama__fail(why, whysize, "not terminated");
    case LLAMA__T_LAYERS: {
        const llama_layer_counts *v = (const llama_layer_counts *)p;
        if (v->all != 0 && v->all != 1) return llama__fail(why, whysize, "all must be 0 or 1");
        if (v->num < 0 || v->num > LLAMA_MAX_LAYER_COUNTS || v->rows < 0 || (v->rows && v->num % v->rows))
            return llama__fail(why, whysize, "%d counts in %d chunk lists", v->num, v->rows);
        for (int i = 0; i < v->num; i++)
            if (v->counts[i] < 0) return llama__fail(why, whysize, "a count of layers is >= 0 (counts[%d] = %d)", i, v->counts[i]);
        return 0;
    }
    default: return 0; /* U64: every value is valid */
    }
}

/* A recompute_config switch as YAML text: true, false, [2, 1], [[2, 1], [1, 0]]. */
static void llama__layers_text(const llama_layer_counts *v, char *buf, size_t size) {
    size_t used = 0;
    const int per = v->rows ? v->num / v->rows : v->num;
    if (!v->num) {
        snprintf(buf, size, "%s", v->all ? "true" : "false");
        return;
    }
    buf[0] = 0;
    for (int i = 0; i < v->num && used + 1 < size; i++)
        used += (size_t)snprintf(buf + used, size - used, "%s%s%d%s", i ? ", " : "", v->rows && i % per == 0 ? "[" : "",
                                 v->counts[i], v->rows && i % per == per - 1 ? "]" : "");
    if (used + 3 < size) memmove(buf + 1, buf, used + 1), buf[0] = '[', buf[used + 1] = ']', buf[used + 2] = 0;
}

/* The stored value of k as YAML text. */
static void llama__value_text(const llama__key *k, const llama_config *cfg, char *buf, size_t size) {
    const void *p = llama__cfield(cfg, k);
    switch (k->type) {
    case LLAMA__T_INT: snprintf(buf, size, "%d", *(const int *)p); break;
    case LLAMA__T_U64: snprintf(buf, size, "%" PRIu64, *(const uint64_t *)p); break;
    case LLAMA__T_FLOAT: llama__format_float(*(const float *)p, buf, size); break;
    case LLAMA__T_BOOL: snprintf(buf, size, "%s", *(const int *)p ? "true" : "false"); break;
    case LLAMA__T_CHOICE:
        if (k->size) {
            snprintf(buf, size, "%.*s", (int)k->size, (const char *)p);
        } else {
            snprintf(buf, size, "%d", *(const int *)p);
            for (int i = 0; k->choices[i].name; i++)
                if (k->choices[i].value == *(const int *)p) {
                    snprintf(buf, size, "%s", k->choices[i].canon);
                    break;
                }
        }
        break;
    case LLAMA__T_PAIR: {
        char a[32], b[32];
        llama__format_float(((const float *)p)[0], a, sizeof a);
        llama__format_float(((const float *)p)[1], b, sizeof b);
        snprintf(buf, size, "[%s, %s]", a, b);
        break;
    }
    case LLAMA__T_STRING: snprintf(buf, size, "\"%.*s\"", (int)k->size, (const char *)p); break;
    case LLAMA__T_LAYERS: llama__layers_text((const llama_layer_counts *)p, buf, size); break;
    default: snprintf(buf, size, "?"); break;
    }
}

/* ---- defaults, validation ------------------------------------------------ */

void llama_config_defaults(llama_config *cfg) {
    char why[128];
    memset(cfg, 0, sizeof *cfg);
    for (int i = 0; i < LLAMA__NUM_KEYS; i++) {
        const llama__key *k = &llama__keys[i];
        if (k->type == LLAMA__T_ALIAS || k->offset == LLAMA__NONE || !k->def) continue;
        /* defaults are table text read by the same parser (the tests check
           that each one parses) */
        (void)llama__parse_value(k, k->def, cfg, why, sizeof why);
    }
}

/* MindFormers' global batch (mindformers/trainer/base_trainer.py,
   _check_global_batch_size_for_auto_parallel, r1.5.0 ece44cc): batch_size per
   data-parallel rank, times micro_batch_num under pipeline (where
   gradient_accumulation_steps "will not take effect") or times
   gradient_accumulation_steps without, times micro_batch_interleave_num;
   data_parallel mode: batch_size x device_num x gradient_accumulation_steps. */
int llama_config_global_batch(const llama_config *c) {
    if (!c) return -1;
    if (c->global_batch_size > 0) return c->global_batch_size;
    long long b = (long long)c->batch_size * c->data_parallel;
    if (c->parallel_mode == LLAMA_PARALLEL_MODE_DATA) b *= c->gradient_accumulation_steps;
    else if (c->pipeline_stage > 1) b *= (long long)c->micro_batch_num * c->micro_batch_interleave_num;
    else b *= (long long)c->micro_batch_interleave_num * c->gradient_accumulation_steps;
    return b > INT_MAX ? -1 : (int)b;
}

int llama_config_micro_batches(const llama_config *c) {
    if (!c) return -1;
    long long m = c->pipeline_stage > 1 ? (long long)c->micro_batch_num
                                        : (long long)c->micro_batch_num * c->gradient_accumulation_steps;
    return m > INT_MAX ? -1 : (int)m;
}

/* MindFormers' LlamaFeedForward (mindformers/models/llama/llama_layer.py,
   r1.5.0): intermediate_size if given, else h = 4 x hidden_size, scaled by
   (ffn_dim_multiplier + 0.01) if given, int(2h / 3), rounded up to a multiple
   of multiple_of. In double, as Python's floats. */
int llama_config_ffn_width(const llama_config *c) {
    if (!c) return -1;
    if (c->intermediate_size > 0) return c->intermediate_size;
    long long h = 4LL * c->hidden_size;
    if (c->ffn_dim_multiplier > 0) h = (long long)(((double)c->ffn_dim_multiplier + 0.01) * (double)h);
    h = (long long)(2.0 * (double)h / 3.0);
    long long m = c->multiple_of > 0 ? c->multiple_of : 1;
    h = m * ((h + m - 1) / m);
    return h > INT_MAX ? -1 : (int)h;
}

float llama_config_clip_norm(const llama_config *c) {
    if (!c) return 0.0f;
    return c->use_clip_grad ? c->wrapper_max_grad_norm : c->max_grad_norm;
}

int64_t llama_config_warmup_steps(const llama_config *c, int64_t total_steps) {
    if (!c) return 0;
    if (c->warmup_ratio > 0) {
        /* the ratio as written (0.03, not float's 0.0299999993), as Python reads it */
        char text[32];
        snprintf(text, sizeof text, "%.7g", (double)c->warmup_ratio);
        return (int64_t)((double)total_steps * strtod(text, NULL));
    }
    return c->warmup_steps;
}

/* ---- the config report ---------------------------------------------------- */

/* Every problem of one load at once: errors (one line each, into the caller's
   err buffer), warnings of values that change training against MindFormers
   (one line each, to `warn`), and the unknown keys (one summary line). Each
   line says where: FILE:LINE for the file, "--set K=V" for an override. */
typedef struct llama__report {
    char *err;
    size_t errsize, used;
    int errors, changes;
    FILE *warn;
    const char *file;                      /* NULL: no file */
    const char *const *sets;               /* the --set arguments */
    int line[LLAMA__NUM_KEYS];             /* each key's line in the file (0: not there) */
    int set_arg[LLAMA__NUM_KEYS];          /* 1 + the --set that gave each key (0: none) */
    unsigned char bad[LLAMA__NUM_KEYS];    /* values refused: cross-key rules naming them stay silent */
    char unknown[2304];                    /* the one-line summary of the file's unknown keys */
} llama__report;

static void llama__report_line(llama__report *r, const char *text) {
    r->errors++;
    if (!r->err || r->errsize == 0 || r->used + 1 >= r->errsize) return;
    int n = snprintf(r->err + r->used, r->errsize - r->used, "%s%s", r->used ? "\n" : "", text);
    if (n < 0) return;
    r->used += (size_t)n;
    if (r->used >= r->errsize) r->used = r->errsize - 1;
}

#if defined(__GNUC__) || defined(__clang__)
__attribute__((format(printf, 2, 3)))
#endif
static int llama__report_error(llama__report *r, const char *fmt, ...) {
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    llama__report_line(r, msg);
    return -1;
}

/* Where key i was given: "FILE:LINE", "--set ARG", or "" (its default). */
static void llama__origin(const llama__report *r, int i, char *buf, size_t size) {
    buf[0] = 0;
    if (r->line[i] && r->file) snprintf(buf, size, "%s:%d", r->file, r->line[i]);
    else if (r->set_arg[i] && r->sets) snprintf(buf, size, "--set %s", r->sets[r->set_arg[i] - 1]);
}

/* Does `path` occur in msg as a whole key (not inside a longer one)? */
static const char *llama__names_key(const char *msg, const char *path) {
    size_t n = strlen(path);
    for (const char *p = strstr(msg, path); p; p = strstr(p + 1, path)) {
        const char before = p == msg ? ' ' : p[-1], after = p[n];
        if (before != '.' && before != '_' && !(before >= 'a' && before <= 'z') && after != '.' && after != '_' &&
            !(after >= 'a' && after <= 'z'))
            return p;
    }
    return NULL;
}

/* A message that names keys by path, prefixed with where the first of them
   that the file or a --set gave came from, and naming where the others came
   from. Silent (returns 0) when a named key's own value was refused: the rule
   then saw a default, not what the user wrote. */
static int llama__locate(const llama__report *r, const char *msg, char *line, size_t size) {
    char where[320], also[640];
    int first = -1;
    const char *first_at = NULL;
    for (int i = 0; i < LLAMA__NUM_KEYS; i++) {
        if (llama__keys[i].type == LLAMA__T_ALIAS) continue;
        const char *at = llama__names_key(msg, llama__keys[i].path);
        if (!at) continue;
        if (r->bad[i]) return 0;
        if (!r->line[i] && !r->set_arg[i]) continue;
        if (!first_at || at < first_at) first = i, first_at = at;
    }
    size_t used = 0;
    also[0] = 0;
    for (int i = 0; i < LLAMA__NUM_KEYS && first >= 0; i++) {
        if (i == first || llama__keys[i].type == LLAMA__T_ALIAS || (!r->line[i] && !r->set_arg[i]) ||
            !llama__names_key(msg, llama__keys[i].path) || used + 1 >= sizeof also)
            continue;
        llama__origin(r, i, where, sizeof where);
        used += (size_t)snprintf(also + used, sizeof also - used, "%s%s at %s", used ? ", " : " [", llama__keys[i].path,
                                 where);
    }
    if (used && used + 1 < sizeof also) snprintf(also + used, sizeof also - used, "]");
    if (first >= 0) {
        llama__origin(r, first, where, sizeof where);
        snprintf(line, size, "%s: %s%s", where, msg, also);
    } else {
        snprintf(line, size, "%s", msg);
    }
    return 1;
}

/* A located line: an error (a cross-key rule broke) or a warning (a value
   that trains differently from MindFormers). */
static void llama__vlocated(llama__report *r, int warning, const char *fmt, va_list ap) {
    char msg[1024], line[2048];
    vsnprintf(msg, sizeof msg, fmt, ap);
    if (!llama__locate(r, msg, line, sizeof line)) return;
    if (!warning) {
        llama__report_line(r, line);
    } else {
        r->changes++;
        if (r->warn) fprintf(r->warn, "warning: %s\n", line);
    }
}

#if defined(__GNUC__) || defined(__clang__)
__attribute__((format(printf, 2, 3)))
#endif
static int llama__rule(llama__report *r, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    llama__vlocated(r, 0, fmt, ap);
    va_end(ap);
    return -1;
}

#if defined(__GNUC__) || defined(__clang__)
__attribute__((format(printf, 2, 3)))
#endif
static void llama__changes(llama__report *r, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    llama__vlocated(r, 1, fmt, ap);
    va_end(ap);
}

#define LLAMA__K(name) "model.model_config." name
#define LLAMA__P(name) "parallel_config." name

/* ---- the rules between keys ------------------------------------------------- */

/* Each key's own rules (range, choices) are the key table's, checked by
   llama__check_stored. The rules between keys are the rows of llama__rules,
   walked in order by llama__check_rules: a row names the key the rule is
   about, its condition (a small predicate on the config and the numbers
   derived from it, true when the rule is broken) and its error sentence: a
   printf format whose conversions, all %lld, print the numbers `args` names
   in order (tests/llama/test_config.c checks every row), or, for the few
   sentences whose words depend on the config, a small function that reports
   it. Rows of one `group` form a chain: once a row with `ends` set breaks,
   the rest of its chain is skipped (a later rule of it would restate or divide
   by what broke); a row without a sentence is a gate (its condition skips the
   rest of the chain silently). */

/* The numbers the sentences print: indexes into llama__vctx.n. */
enum {
    LLAMA__N_NONE, /* an unused argument */
    LLAMA__N_DP, LLAMA__N_TP, LLAMA__N_CP, LLAMA__N_PP,
    LLAMA__N_HIDDEN, LLAMA__N_HEADS, LLAMA__N_HEAD_DIM, LLAMA__N_KV, LLAMA__N_MULTIPLE_OF, LLAMA__N_FFN,
    LLAMA__N_VOCAB, LLAMA__N_SEQ,
    LLAMA__N_UDEG,       /* ulysses_degree_in_cp */
    LLAMA__N_U,          /* the Ulysses degree the algorithm uses: context_parallel (ulysses_cp), ulysses_degree_in_cp
                            (hybrid_cp) or 1 */
    LLAMA__N_RING, LLAMA__N_RING2, LLAMA__N_CP2, /* the ring degree context_parallel / U, twice it, twice context_parallel */
    LLAMA__N_HEADS_RANK, LLAMA__N_KV_RANK,       /* heads and kv heads per tensor-parallel rank */
    LLAMA__N_MBI, LLAMA__N_FG, LLAMA__N_COPIES,  /* micro_batch_interleave_num, fine_grain_interleave, the copies used */
    LLAMA__N_MBN, LLAMA__N_GAS, LLAMA__N_MICRO, LLAMA__N_MAX_BATCH, /* micro-batches per step: MBN (x GAS without pp) */
    LLAMA__N_CHUNKS, LLAMA__N_STAGES, LLAMA__N_LAYERS, LLAMA__N_OFFSET, /* pp_interleave_num, PP x CHUNKS */
    LLAMA__N_LPS, LLAMA__N_FIRST, LLAMA__N_LAST, /* layers per stage; the first stage's and the last's */
    LLAMA__N_WARMUP, LLAMA__N_TOTAL,
    LLAMA__N_COUNT
};

/* What the rules read: the config (its keys' own rules hold, so no divisor
   below is 0) and the numbers derived from it, each computed once. */
typedef struct llama__vctx {
    const llama_config *c;
    int hybrid;      /* context_parallel_algo is hybrid_cp */
    int global;      /* llama_config_global_batch */
    long long parts; /* the global batch's split: DP x MICRO x COPIES (0 when MICRO is past the limit) */
    long long n[LLAMA__N_COUNT];
} llama__vctx;

static void llama__vctx_init(llama__vctx *v, const llama_config *c) {
    long long *n = v->n;
    memset(v, 0, sizeof *v);
    v->c = c;
    v->hybrid = strcmp(c->context_parallel_algo, "hybrid_cp") == 0;
    v->global = llama_config_global_batch(c);
    n[LLAMA__N_DP] = c->data_parallel, n[LLAMA__N_TP] = c->model_parallel, n[LLAMA__N_CP] = c->context_parallel;
    n[LLAMA__N_PP] = c->pipeline_stage;
    n[LLAMA__N_HIDDEN] = c->hidden_size, n[LLAMA__N_HEADS] = c->num_heads;
    n[LLAMA__N_HEAD_DIM] = c->hidden_size / c->num_heads;
    n[LLAMA__N_KV] = c->n_kv_heads ? c->n_kv_heads : c->num_heads;
    n[LLAMA__N_MULTIPLE_OF] = c->multiple_of, n[LLAMA__N_FFN] = llama_config_ffn_width(c);
    n[LLAMA__N_VOCAB] = c->vocab_size, n[LLAMA__N_SEQ] = c->seq_length;
    n[LLAMA__N_UDEG] = c->ulysses_degree_in_cp;
    n[LLAMA__N_U] = strcmp(c->context_parallel_algo, "ulysses_cp") == 0 ? c->context_parallel
                    : v->hybrid                                         ? c->ulysses_degree_in_cp
                                                                        : 1;
    n[LLAMA__N_RING] = n[LLAMA__N_CP] / n[LLAMA__N_U], n[LLAMA__N_RING2] = 2 * n[LLAMA__N_RING];
    n[LLAMA__N_CP2] = 2 * n[LLAMA__N_CP];
    n[LLAMA__N_HEADS_RANK] = c->num_heads / c->model_parallel, n[LLAMA__N_KV_RANK] = n[LLAMA__N_KV] / c->model_parallel;
    n[LLAMA__N_MBI] = c->micro_batch_interleave_num, n[LLAMA__N_FG] = c->fine_grain_interleave;
    n[LLAMA__N_COPIES] = c->fine_grain_interleave > 1 ? c->fine_grain_interleave : c->micro_batch_interleave_num;
    n[LLAMA__N_MBN] = c->micro_batch_num, n[LLAMA__N_GAS] = c->gradient_accumulation_steps;
    n[LLAMA__N_MICRO] = c->pipeline_stage > 1 ? n[LLAMA__N_MBN] : n[LLAMA__N_MBN] * n[LLAMA__N_GAS];
    n[LLAMA__N_MAX_BATCH] = LLAMA__MAX_BATCH;
    if (n[LLAMA__N_MICRO] <= LLAMA__MAX_BATCH) v->parts = n[LLAMA__N_DP] * n[LLAMA__N_MICRO] * n[LLAMA__N_COPIES];
    n[LLAMA__N_CHUNKS] = c->pp_interleave_num, n[LLAMA__N_STAGES] = n[LLAMA__N_PP] * n[LLAMA__N_CHUNKS];
    n[LLAMA__N_LAYERS] = c->num_layers, n[LLAMA__N_OFFSET] = c->offset;
    n[LLAMA__N_LPS] = n[LLAMA__N_LAYERS] / n[LLAMA__N_STAGES];
    n[LLAMA__N_FIRST] = n[LLAMA__N_LPS] - c->offset, n[LLAMA__N_LAST] = n[LLAMA__N_LPS] + c->offset;
    n[LLAMA__N_WARMUP] = c->warmup_steps, n[LLAMA__N_TOTAL] = c->total_steps;
}

/* ---- conditions: true when the rule is broken ---- */

static int llama__when_mode_hybrid(const llama__vctx *v) { return v->c->parallel_mode == LLAMA_PARALLEL_MODE_HYBRID; }
static int llama__when_data_splits(const llama__vctx *v) {
    const llama_config *c = v->c;
    return c->parallel_mode == LLAMA_PARALLEL_MODE_DATA &&
           (c->model_parallel > 1 || c->context_parallel > 1 || c->pipeline_stage > 1);
}
static int llama__when_data_full_batch(const llama__vctx *v) {
    return v->c->parallel_mode == LLAMA_PARALLEL_MODE_DATA && v->c->full_batch;
}
static int llama__when_alone_splits(const llama__vctx *v) {
    const llama_config *c = v->c;
    return c->parallel_mode == LLAMA_PARALLEL_MODE_STAND_ALONE &&
           (c->data_parallel > 1 || c->model_parallel > 1 || c->pipeline_stage > 1 || c->context_parallel > 1);
}
static int llama__when_level3(const llama__vctx *v) { return v->c->optimizer_level == 3; }
static int llama__when_f16_unscaled(const llama__vctx *v) { return v->c->compute_dtype == 2 && v->c->scale_sense == 0; }

static int llama__when_hidden_by_heads(const llama__vctx *v) { return v->c->hidden_size % v->c->num_heads != 0; }
static int llama__when_head_dim_odd(const llama__vctx *v) { return v->n[LLAMA__N_HEAD_DIM] % 2 != 0; }
static int llama__when_heads_by_kv(const llama__vctx *v) { return v->c->num_heads % v->n[LLAMA__N_KV] != 0; }
static int llama__when_ffn_range(const llama__vctx *v) { return v->n[LLAMA__N_FFN] < 1 || v->n[LLAMA__N_FFN] > 1048576; }
static int llama__when_no_tp(const llama__vctx *v) { return v->c->model_parallel == 1; }
static int llama__when_heads_by_tp(const llama__vctx *v) { return v->c->num_heads % v->c->model_parallel != 0; }
static int llama__when_kv_below_tp(const llama__vctx *v) { return v->n[LLAMA__N_KV] < v->c->model_parallel; }
static int llama__when_kv_by_tp(const llama__vctx *v) {
    return !llama__when_kv_below_tp(v) && v->n[LLAMA__N_KV] % v->c->model_parallel != 0;
}
static int llama__when_hidden_by_tp(const llama__vctx *v) { return v->c->hidden_size % v->c->model_parallel != 0; }
static int llama__when_ffn_key_by_tp(const llama__vctx *v) {
    return v->c->intermediate_size > 0 && v->n[LLAMA__N_FFN] % v->c->model_parallel != 0;
}
static int llama__when_ffn_rule_by_tp(const llama__vctx *v) {
    return v->c->intermediate_size <= 0 && v->n[LLAMA__N_FFN] % v->c->model_parallel != 0;
}
static int llama__when_vocab_by_tp(const llama__vctx *v) { return v->c->vocab_size % v->c->model_parallel != 0; }
static int llama__when_seq_by_tp(const llama__vctx *v) {
    return v->c->use_seq_parallel && v->c->context_parallel == 1 && v->c->seq_length % v->c->model_parallel != 0;
}
static int llama__when_seq_rank_by_tp(const llama__vctx *v) {
    return v->c->use_seq_parallel && (v->c->seq_length / v->c->context_parallel) % v->c->model_parallel != 0;
}

static int llama__when_cp_by_udeg(const llama__vctx *v) {
    return v->c->context_parallel % v->c->ulysses_degree_in_cp != 0;
}
static int llama__when_no_cp(const llama__vctx *v) { return v->c->context_parallel == 1; }
static int llama__when_ring_algo(const llama__vctx *v) {
    return v->c->use_ring_attention && strcmp(v->c->context_parallel_algo, "colossalai_cp") != 0;
}
static int llama__when_seq_by_cp(const llama__vctx *v) { return v->c->seq_length % v->c->context_parallel != 0; }
static int llama__when_zigzag(const llama__vctx *v) {
    return v->c->context_parallel_zigzag && v->n[LLAMA__N_RING] > 1 && v->c->seq_length % v->n[LLAMA__N_RING2] != 0;
}
static int llama__when_heads_by_u(const llama__vctx *v) {
    return v->n[LLAMA__N_U] > 1 && v->n[LLAMA__N_HEADS_RANK] % v->n[LLAMA__N_U] != 0;
}
static int llama__when_heads_by_udeg(const llama__vctx *v) { return v->hybrid && llama__when_heads_by_u(v); }
static int llama__when_heads_by_ucp(const llama__vctx *v) { return !v->hybrid && llama__when_heads_by_u(v); }
static int llama__when_kv_vs_u(const llama__vctx *v) {
    const long long u = v->n[LLAMA__N_U], kvh = v->n[LLAMA__N_KV_RANK];
    return u > 1 && kvh % u != 0 && u % kvh != 0; /* kvh 0: the first test is false, so u % kvh is never taken */
}

static int llama__when_two_copy_kinds(const llama__vctx *v) {
    return v->c->fine_grain_interleave > 1 && v->c->micro_batch_interleave_num > 1;
}
static int llama__when_fg_no_sp(const llama__vctx *v) {
    return v->c->fine_grain_interleave > 1 && !v->c->use_seq_parallel;
}
static int llama__when_copies_split(const llama__vctx *v) {
    return v->n[LLAMA__N_COPIES] > 1 && (v->c->pipeline_stage > 1 || v->c->context_parallel > 1);
}

static int llama__when_micro_range(const llama__vctx *v) { return v->n[LLAMA__N_MICRO] > LLAMA__MAX_BATCH; }
static int llama__when_batch_range(const llama__vctx *v) { return v->global < 0 || v->global > LLAMA__MAX_BATCH; }
static int llama__when_batch_split(const llama__vctx *v) { return v->global % v->parts != 0; }

static int llama__when_interleave_on(const llama__vctx *v) {
    return v->c->pipeline_interleave && !(v->c->pp_interleave_num > 1);
}
static int llama__when_interleave_off(const llama__vctx *v) {
    return !v->c->pipeline_interleave && v->c->pp_interleave_num > 1;
}
/* The schedules that run over model chunks: interleaved 1F1B ("1f1b" with
   chunks), looped BFS and ZB1P; the others over one (but the V kinds). */
static int llama__over_chunks(const char *scheduler) {
    return !strcmp(scheduler, "1f1b") || !strcmp(scheduler, "looped_bfs") || !strcmp(scheduler, "zb1p");
}
static int llama__v_scheduler(const llama_config *c) { /* >>pipeline's V kinds: 2 chunks per rank */
    return !strcmp(c->pipeline_scheduler, "zbv") || !strcmp(c->pipeline_scheduler, "dualpipev");
}
static int llama__when_scheduler(const llama__vctx *v) {
    return v->c->pp_interleave_num > 1 && !llama__over_chunks(v->c->pipeline_scheduler) && !llama__v_scheduler(v->c);
}
static int llama__when_scheduler_chunks(const llama__vctx *v) {
    return v->c->pipeline_stage > 1 && v->c->pp_interleave_num == 1 && strcmp(v->c->pipeline_scheduler, "1f1b") &&
           llama__over_chunks(v->c->pipeline_scheduler);
}
static int llama__when_v_chunks(const llama__vctx *v) {
    return v->c->pipeline_stage > 1 && llama__v_scheduler(v->c) && v->c->pp_interleave_num != 2;
}
static int llama__when_dualpipev_micro(const llama__vctx *v) {
    return v->c->pipeline_stage > 1 && !strcmp(v->c->pipeline_scheduler, "dualpipev") &&
           v->c->pp_interleave_num == 2 && v->c->micro_batch_num < 2 * v->c->pipeline_stage;
}
static int llama__when_chunks_no_pp(const llama__vctx *v) {
    return v->c->pipeline_stage == 1 && v->c->pp_interleave_num > 1;
}
static int llama__when_offset_no_pp(const llama__vctx *v) { return v->c->pipeline_stage == 1 && v->c->offset != 0; }
static int llama__when_no_pp(const llama__vctx *v) { return v->c->pipeline_stage == 1; }
static int llama__when_layers_by_stages(const llama__vctx *v) { return v->c->num_layers % v->n[LLAMA__N_STAGES] != 0; }
static int llama__when_empty_stage(const llama__vctx *v) { return v->n[LLAMA__N_FIRST] < 1 || v->n[LLAMA__N_LAST] < 1; }
static int llama__when_micro_by_pp(const llama__vctx *v) { /* >>pipeline's interleaved rounds */
    const int m = v->c->micro_batch_num, rounds = m / v->c->pipeline_stage > 1 ? m / v->c->pipeline_stage : 1;
    return v->c->pp_interleave_num > 1 && strcmp(v->c->pipeline_scheduler, "looped_bfs") &&
           !llama__v_scheduler(v->c) && m % rounds != 0;
}

static int llama__when_two_clips(const llama__vctx *v) {
    const llama_config *c = v->c;
    return c->use_clip_grad && c->max_grad_norm > 0 && c->max_grad_norm != c->wrapper_max_grad_norm;
}
static int llama__when_warmup_past(const llama__vctx *v) {
    const llama_config *c = v->c;
    return c->total_steps > 0 && c->warmup_ratio <= 0 && c->warmup_steps > c->total_steps;
}
static int llama__when_min_lr(const llama__vctx *v) {
    return strcmp(v->c->lr_schedule, "cosine") == 0 && v->c->min_lr > v->c->learning_rate;
}
static int llama__when_ckpt_file(const llama__vctx *v) {
    const size_t n = strlen(v->c->load_checkpoint);
    return n >= 5 && strcmp(v->c->load_checkpoint + n - 5, ".ckpt") == 0;
}
static int llama__when_resume_nothing(const llama__vctx *v) { return v->c->resume_training && !v->c->load_checkpoint[0]; }

/* ---- the sentences whose words depend on the config ---- */

static void llama__say_ring_algo(const llama__vctx *v, llama__report *r) {
    llama__rule(r,
                LLAMA__K("use_ring_attention") " = true asks for ring attention, but " LLAMA__P("context_parallel_algo")
                " = %s; use colossalai_cp or set use_ring_attention false",
                v->c->context_parallel_algo);
}

static void llama__say_copies_split(const llama__vctx *v, llama__report *r) {
    const llama_config *c = v->c;
    const int pp = c->pipeline_stage > 1;
    llama__rule(r,
                "%s = %lld with " LLAMA__P("%s") " = %d: the copies run the tensor-parallel layers and are not "
                "supported with %s yet; use 1 there, or 1 copy",
                c->fine_grain_interleave > 1 ? LLAMA__K("fine_grain_interleave") " (or parallel_config.fine_grain_interleave)"
                                             : "micro_batch_interleave_num (or parallel_config.micro_batch_interleave_num)",
                v->n[LLAMA__N_COPIES], pp ? "pipeline_stage" : "context_parallel",
                pp ? c->pipeline_stage : c->context_parallel, pp ? "pipeline parallelism" : "context parallelism");
}

/* The global batch as the keys that make it (llama_config_global_batch), with its value. */
static void llama__batch_formula(const llama__vctx *v, char *formula, size_t size) {
    const llama_config *c = v->c;
    if (c->global_batch_size > 0)
        snprintf(formula, size, "runner_config.global_batch_size = %d", v->global);
    else if (c->parallel_mode == LLAMA_PARALLEL_MODE_DATA)
        snprintf(formula, size,
                 "the global batch runner_config.batch_size x " LLAMA__P("data_parallel")
                 " x runner_config.gradient_accumulation_steps = %d x %d x %d = %lld",
                 c->batch_size, c->data_parallel, c->gradient_accumulation_steps,
                 (long long)c->batch_size * c->data_parallel * c->gradient_accumulation_steps);
    else if (c->pipeline_stage > 1)
        snprintf(formula, size,
                 "the global batch runner_config.batch_size x " LLAMA__P("data_parallel") " x " LLAMA__P("micro_batch_num")
                 " x micro_batch_interleave_num = %d x %d x %d x %d = %lld",
                 c->batch_size, c->data_parallel, c->micro_batch_num, c->micro_batch_interleave_num,
                 (long long)c->batch_size * c->data_parallel * c->micro_batch_num * c->micro_batch_interleave_num);
    else
        snprintf(formula, size,
                 "the global batch runner_config.batch_size x " LLAMA__P("data_parallel") " x micro_batch_interleave_num"
                 " x runner_config.gradient_accumulation_steps = %d x %d x %d x %d = %lld",
                 c->batch_size, c->data_parallel, c->micro_batch_interleave_num, c->gradient_accumulation_steps,
                 (long long)c->batch_size * c->data_parallel * c->micro_batch_interleave_num *
                     c->gradient_accumulation_steps);
}

static void llama__say_batch_range(const llama__vctx *v, llama__report *r) {
    char formula[320];
    llama__batch_formula(v, formula, sizeof formula);
    llama__rule(r, "%s is larger than %d", formula, LLAMA__MAX_BATCH);
}

/* The global batch splits into data_parallel x micro-batches x copies, spelled
   out as MindFormers' keys make it. */
static void llama__say_batch_split(const llama__vctx *v, llama__report *r) {
    const llama_config *c = v->c;
    const char *copies = c->fine_grain_interleave > 1 ? LLAMA__K("fine_grain_interleave") : "micro_batch_interleave_num";
    char formula[320], split[320];
    llama__batch_formula(v, formula, sizeof formula);
    if (c->pipeline_stage > 1)
        snprintf(split, sizeof split, LLAMA__P("data_parallel") " x " LLAMA__P("micro_batch_num") " x %s = %d x %d x %lld",
                 copies, c->data_parallel, c->micro_batch_num, v->n[LLAMA__N_COPIES]);
    else
        snprintf(split, sizeof split,
                 LLAMA__P("data_parallel") " x runner_config.gradient_accumulation_steps x " LLAMA__P("micro_batch_num")
                 " x %s = %d x %d x %d x %lld",
                 copies, c->data_parallel, c->gradient_accumulation_steps, c->micro_batch_num, v->n[LLAMA__N_COPIES]);
    llama__rule(r, "%s does not split into %s = %lld equal parts of whole samples%s", formula, split, v->parts,
                c->pipeline_stage == 1 && c->micro_batch_num > 1 && c->global_batch_size == 0
                    ? " (MindFormers uses " LLAMA__P("micro_batch_num") " only under pipeline; 1 trains the same)"
                    : "");
}

static void llama__say_scheduler(const llama__vctx *v, llama__report *r) {
    llama__rule(r,
                "parallel.pipeline_config.pipeline_interleave = true with parallel.pipeline_config.pipeline_scheduler = "
                "%s: over model chunks the schedule is 1f1b (interleaved 1F1B), looped_bfs or zb1p (or zbv, dualpipev "
                "with 2 chunks); use one of them, or no interleave", v->c->pipeline_scheduler);
}

static void llama__say_scheduler_chunks(const llama__vctx *v, llama__report *r) {
    llama__rule(r,
                "parallel.pipeline_config.pipeline_scheduler = %s runs over model chunks: it needs "
                "parallel.pipeline_config.pipeline_interleave = true and model.model_config.pp_interleave_num > 1",
                v->c->pipeline_scheduler);
}

static void llama__say_v_chunks(const llama__vctx *v, llama__report *r) {
    llama__rule(r,
                "parallel.pipeline_config.pipeline_scheduler = %s with " LLAMA__K("pp_interleave_num") " = %d: the "
                "schedule runs on a V of exactly 2 model chunks per rank (pipeline_interleave = true and "
                "pp_interleave_num = 2)", v->c->pipeline_scheduler, v->c->pp_interleave_num);
}

static void llama__say_dualpipev_micro(const llama__vctx *v, llama__report *r) {
    llama__rule(r,
                LLAMA__P("micro_batch_num") " = %d with pipeline_scheduler dualpipev: it needs at least as many "
                "micro-batches as virtual stages, 2 x " LLAMA__P("pipeline_stage") " = %d (PyTorch's rule)",
                v->c->micro_batch_num, 2 * v->c->pipeline_stage);
}

static void llama__say_two_clips(const llama__vctx *v, llama__report *r) {
    char a[32], b[32];
    llama__format_float(v->c->max_grad_norm, a, sizeof a);
    llama__format_float(v->c->wrapper_max_grad_norm, b, sizeof b);
    llama__rule(r, "max_grad_norm = %s and runner_wrapper.max_grad_norm = %s with runner_wrapper.use_clip_grad = "
                   "true: two clipping norms; keep one",
                a, b);
}

static void llama__say_min_lr(const llama__vctx *v, llama__report *r) {
    char lo[32], hi[32];
    llama__format_float(v->c->min_lr, lo, sizeof lo);
    llama__format_float(v->c->learning_rate, hi, sizeof hi);
    llama__rule(r, "lr_schedule.min_lr = %s is larger than optimizer.learning_rate (%s)", lo, hi);
}

static void llama__say_ckpt_file(const llama__vctx *v, llama__report *r) {
    llama__rule(r,
                "load_checkpoint = %s: MindSpore .ckpt files cannot be read here; convert it to a Hugging Face "
                ".safetensors file (MindFormers ships convert_weight.py for Llama) and name that",
                v->c->load_checkpoint);
}

/* ---- the table ---- */

enum { LLAMA__G_NONE, LLAMA__G_HEAD_DIM, LLAMA__G_TP, LLAMA__G_CP, LLAMA__G_BATCH, LLAMA__G_PP };
#define LLAMA__RULE_ARGS 6

typedef struct llama__vrule {
    const char *key;                   /* what the rule is about (its sentence names it) */
    int group, ends;                   /* its chain; 1: once broken, the rest of the chain is skipped */
    int (*when)(const llama__vctx *v); /* the rule is broken */
    const char *sentence;              /* its error: conversions %lld only, filled from args */
    unsigned char args[LLAMA__RULE_ARGS]; /* LLAMA__N_* in order; LLAMA__N_NONE after the last */
    void (*say)(const llama__vctx *v, llama__report *r); /* instead of sentence; neither: a gate */
} llama__vrule;

#define LLAMA__MP_DIV " is not divisible by " LLAMA__P("model_parallel") " (%lld)"

static const llama__vrule llama__rules[] = {
    {"model.model_config.compute_dtype", 0, 0, llama__when_f16_unscaled,
     "model.model_config.compute_dtype = float16 needs a loss scale (runner_wrapper.scale_sense.type "
     "DynamicLossScaleUpdateCell, or FixedLossScaleUpdateCell): f16 gradients below 2^-24 flush to zero and the step "
     "learns nothing from them; bfloat16 has f32's range and needs none",
     {0}, NULL},
    /* the parallel mode, and MindFormers' switches of features that are not here */
    {"parallel.parallel_mode", 0, 0, llama__when_mode_hybrid, "parallel.parallel_mode = hybrid_parallel: " LLAMA__NO_HYBRID,
     {0}, NULL},
    {"parallel.parallel_mode", 0, 0, llama__when_data_splits,
     "parallel.parallel_mode = data_parallel is pure data parallel: " LLAMA__P("model_parallel") " (%lld), "
     LLAMA__P("context_parallel") " (%lld) and " LLAMA__P("pipeline_stage") " (%lld) must be 1; use semi_auto_parallel "
     "to combine data parallel with other splits",
     {LLAMA__N_TP, LLAMA__N_CP, LLAMA__N_PP}, NULL},
    {"parallel.parallel_mode", 0, 0, llama__when_data_full_batch,
     "parallel.parallel_mode = data_parallel needs parallel.full_batch = false: in data_parallel mode each rank reads "
     "its own runner_config.batch_size samples (as in MindSpore)",
     {0}, NULL},
    {"parallel.parallel_mode", 0, 0, llama__when_alone_splits,
     "parallel.parallel_mode = stand_alone runs on one device, but " LLAMA__P("data_parallel") " x model_parallel x "
     "pipeline_stage x context_parallel = %lld x %lld x %lld x %lld ranks",
     {LLAMA__N_DP, LLAMA__N_TP, LLAMA__N_PP, LLAMA__N_CP}, NULL},
    {"parallel.parallel_optimizer_config.optimizer_level", 0, 0, llama__when_level3,
     "parallel.parallel_optimizer_config.optimizer_level = level3: " LLAMA__TODO_ZERO3, {0}, NULL},

    /* heads, head dim, kv heads, the FFN width */
    {LLAMA__K("hidden_size"), LLAMA__G_HEAD_DIM, 1, llama__when_hidden_by_heads,
     LLAMA__K("hidden_size") " = %lld is not divisible by " LLAMA__K("num_heads") " (%lld)",
     {LLAMA__N_HIDDEN, LLAMA__N_HEADS}, NULL},
    {LLAMA__K("hidden_size"), LLAMA__G_HEAD_DIM, 0, llama__when_head_dim_odd,
     "the head dim " LLAMA__K("hidden_size") " / " LLAMA__K("num_heads") " = %lld / %lld = %lld is odd; RoPE rotates "
     "the two halves of each head, so it must be even",
     {LLAMA__N_HIDDEN, LLAMA__N_HEADS, LLAMA__N_HEAD_DIM}, NULL},
    {LLAMA__K("num_heads"), 0, 0, llama__when_heads_by_kv,
     LLAMA__K("num_heads") " = %lld is not divisible by " LLAMA__K("n_kv_heads") " (%lld)",
     {LLAMA__N_HEADS, LLAMA__N_KV}, NULL},
    {LLAMA__K("hidden_size"), 0, 0, llama__when_ffn_range,
     "the FFN width from " LLAMA__K("hidden_size") " = %lld, " LLAMA__K("multiple_of") " = %lld and "
     LLAMA__K("ffn_dim_multiplier") " is %lld, outside [1, 1048576]; give " LLAMA__K("intermediate_size"),
     {LLAMA__N_HIDDEN, LLAMA__N_MULTIPLE_OF, LLAMA__N_FFN}, NULL},

    /* tensor parallel: every dim it splits (checked before anything is
       allocated); kv heads are not replicated across its ranks */
    {LLAMA__P("model_parallel"), LLAMA__G_TP, 1, llama__when_no_tp, NULL, {0}, NULL},
    {LLAMA__K("num_heads"), LLAMA__G_TP, 0, llama__when_heads_by_tp, LLAMA__K("num_heads") " = %lld" LLAMA__MP_DIV,
     {LLAMA__N_HEADS, LLAMA__N_TP}, NULL},
    {LLAMA__K("n_kv_heads"), LLAMA__G_TP, 0, llama__when_kv_below_tp,
     LLAMA__K("n_kv_heads") " = %lld is smaller than " LLAMA__P("model_parallel") " (%lld): each tensor-parallel rank "
     "needs its own kv heads (kv heads are not replicated); use model_parallel <= %lld",
     {LLAMA__N_KV, LLAMA__N_TP, LLAMA__N_KV}, NULL},
    {LLAMA__K("n_kv_heads"), LLAMA__G_TP, 0, llama__when_kv_by_tp, LLAMA__K("n_kv_heads") " = %lld" LLAMA__MP_DIV,
     {LLAMA__N_KV, LLAMA__N_TP}, NULL},
    {LLAMA__K("hidden_size"), LLAMA__G_TP, 0, llama__when_hidden_by_tp, LLAMA__K("hidden_size") " = %lld" LLAMA__MP_DIV,
     {LLAMA__N_HIDDEN, LLAMA__N_TP}, NULL},
    {LLAMA__K("intermediate_size"), LLAMA__G_TP, 0, llama__when_ffn_key_by_tp,
     LLAMA__K("intermediate_size") " = %lld" LLAMA__MP_DIV, {LLAMA__N_FFN, LLAMA__N_TP}, NULL},
    {LLAMA__K("multiple_of"), LLAMA__G_TP, 0, llama__when_ffn_rule_by_tp,
     "the FFN width (from " LLAMA__K("hidden_size") " and " LLAMA__K("multiple_of") ") = %lld" LLAMA__MP_DIV,
     {LLAMA__N_FFN, LLAMA__N_TP}, NULL},
    {LLAMA__K("vocab_size"), LLAMA__G_TP, 0, llama__when_vocab_by_tp, LLAMA__K("vocab_size") " = %lld" LLAMA__MP_DIV,
     {LLAMA__N_VOCAB, LLAMA__N_TP}, NULL},
    {LLAMA__K("seq_length"), LLAMA__G_TP, 1, llama__when_seq_by_tp,
     LLAMA__K("seq_length") " = %lld" LLAMA__MP_DIV ", which " LLAMA__P("use_seq_parallel") " splits it over",
     {LLAMA__N_SEQ, LLAMA__N_TP}, NULL},
    {LLAMA__K("seq_length"), LLAMA__G_TP, 0, llama__when_seq_rank_by_tp,
     LLAMA__K("seq_length") " / " LLAMA__P("context_parallel") " = %lld / %lld tokens per rank are not divisible by "
     LLAMA__P("model_parallel") " (%lld), which " LLAMA__P("use_seq_parallel") " splits them over",
     {LLAMA__N_SEQ, LLAMA__N_CP, LLAMA__N_TP}, NULL},

    /* context parallel: the Ulysses degree, the sequence split (zigzag needs
       2 x ring degree chunks), the heads against the Ulysses degree (this
       rank's, after model_parallel), use_ring_attention against the algorithm */
    {LLAMA__P("context_parallel"), LLAMA__G_CP, 1, llama__when_cp_by_udeg,
     LLAMA__P("context_parallel") " = %lld is not divisible by " LLAMA__P("ulysses_degree_in_cp") " (%lld)",
     {LLAMA__N_CP, LLAMA__N_UDEG}, NULL},
    {LLAMA__P("context_parallel"), LLAMA__G_CP, 1, llama__when_no_cp, NULL, {0}, NULL},
    {LLAMA__K("use_ring_attention"), LLAMA__G_CP, 1, llama__when_ring_algo, NULL, {0}, llama__say_ring_algo},
    {LLAMA__K("seq_length"), LLAMA__G_CP, 1, llama__when_seq_by_cp,
     LLAMA__K("seq_length") " = %lld is not divisible by " LLAMA__P("context_parallel") " (%lld): each rank holds "
     "seq_length / context_parallel tokens (no padding)",
     {LLAMA__N_SEQ, LLAMA__N_CP}, NULL},
    {LLAMA__K("seq_length"), LLAMA__G_CP, 1, llama__when_zigzag,
     LLAMA__K("seq_length") " = %lld does not split into 2 x %lld = %lld zigzag chunks (ring degree %lld); use a "
     "multiple of %lld or " LLAMA__P("context_parallel_zigzag") " = false",
     {LLAMA__N_SEQ, LLAMA__N_RING, LLAMA__N_RING2, LLAMA__N_RING, LLAMA__N_CP2}, NULL},
    {LLAMA__K("num_heads"), LLAMA__G_CP, 1, llama__when_heads_by_udeg,
     LLAMA__K("num_heads") " / " LLAMA__P("model_parallel") " = %lld heads per rank are not divisible by the Ulysses "
     "degree %lld (" LLAMA__P("ulysses_degree_in_cp") ")",
     {LLAMA__N_HEADS_RANK, LLAMA__N_U}, NULL},
    {LLAMA__K("num_heads"), LLAMA__G_CP, 1, llama__when_heads_by_ucp,
     LLAMA__K("num_heads") " / " LLAMA__P("model_parallel") " = %lld heads per rank are not divisible by the Ulysses "
     "degree %lld (" LLAMA__P("context_parallel") " under ulysses_cp)",
     {LLAMA__N_HEADS_RANK, LLAMA__N_U}, NULL},
    {LLAMA__K("n_kv_heads"), LLAMA__G_CP, 1, llama__when_kv_vs_u,
     LLAMA__K("n_kv_heads") " / " LLAMA__P("model_parallel") " = %lld kv heads per rank and the Ulysses degree %lld: "
     "one must divide the other (kv heads are split, or replicated)",
     {LLAMA__N_KV_RANK, LLAMA__N_U}, NULL},

    /* multi-copy and fine-grained interleave: copies of the tensor-parallel
       layers (no pipeline or cp collectives inside), one kind at a time */
    {"micro_batch_interleave_num", 0, 0, llama__when_two_copy_kinds,
     "micro_batch_interleave_num = %lld and " LLAMA__K("fine_grain_interleave") " = %lld: use one of them (both cut "
     "the micro-batch into copies)",
     {LLAMA__N_MBI, LLAMA__N_FG}, NULL},
    {LLAMA__K("fine_grain_interleave"), 0, 0, llama__when_fg_no_sp,
     LLAMA__K("fine_grain_interleave") " (or parallel_config.fine_grain_interleave) = %lld needs "
     LLAMA__P("use_seq_parallel") " true (as in MindFormers: the slices' all-gathers and reduce-scatters are what it "
     "overlaps)",
     {LLAMA__N_COPIES}, NULL},
    {"micro_batch_interleave_num", 0, 0, llama__when_copies_split, NULL, {0}, llama__say_copies_split},

    /* the batch: the global batch (llama_config_global_batch) split into whole
       samples over data_parallel x micro-batches x copies */
    {LLAMA__P("micro_batch_num"), LLAMA__G_BATCH, 1, llama__when_micro_range,
     LLAMA__P("micro_batch_num") " x runner_config.gradient_accumulation_steps = %lld x %lld = %lld micro-batches per "
     "step is more than %lld",
     {LLAMA__N_MBN, LLAMA__N_GAS, LLAMA__N_MICRO, LLAMA__N_MAX_BATCH}, NULL},
    {"runner_config.batch_size", LLAMA__G_BATCH, 1, llama__when_batch_range, NULL, {0}, llama__say_batch_range},
    {"runner_config.batch_size", LLAMA__G_BATCH, 1, llama__when_batch_split, NULL, {0}, llama__say_batch_split},

    /* pipeline: the interleave switches agreeing, the layers split into
       pipeline_stage x pp_interleave_num virtual stages (offset moving layers
       from the first to the last), the interleaved schedule's micro-batches */
    {"parallel.pipeline_config.pipeline_interleave", LLAMA__G_PP, 1, llama__when_interleave_on,
     "parallel.pipeline_config.pipeline_interleave = true with " LLAMA__K("pp_interleave_num") " = %lld: the "
     "interleaved schedule needs both (true and more than 1 chunk per rank), or neither",
     {LLAMA__N_CHUNKS}, NULL},
    {"parallel.pipeline_config.pipeline_interleave", LLAMA__G_PP, 1, llama__when_interleave_off,
     "parallel.pipeline_config.pipeline_interleave = false with " LLAMA__K("pp_interleave_num") " = %lld: the "
     "interleaved schedule needs both (true and more than 1 chunk per rank), or neither",
     {LLAMA__N_CHUNKS}, NULL},
    {"parallel.pipeline_config.pipeline_scheduler", LLAMA__G_PP, 1, llama__when_scheduler, NULL, {0},
     llama__say_scheduler},
    {"parallel.pipeline_config.pipeline_scheduler", LLAMA__G_PP, 1, llama__when_scheduler_chunks, NULL, {0},
     llama__say_scheduler_chunks},
    {"parallel.pipeline_config.pipeline_scheduler", LLAMA__G_PP, 1, llama__when_v_chunks, NULL, {0},
     llama__say_v_chunks},
    {LLAMA__P("micro_batch_num"), LLAMA__G_PP, 1, llama__when_dualpipev_micro, NULL, {0},
     llama__say_dualpipev_micro},
    {LLAMA__K("pp_interleave_num"), LLAMA__G_PP, 1, llama__when_chunks_no_pp,
     LLAMA__K("pp_interleave_num") " = %lld needs " LLAMA__P("pipeline_stage") " > 1", {LLAMA__N_CHUNKS}, NULL},
    {LLAMA__K("offset"), LLAMA__G_PP, 1, llama__when_offset_no_pp,
     LLAMA__K("offset") " = %lld needs " LLAMA__P("pipeline_stage") " > 1", {LLAMA__N_OFFSET}, NULL},
    {LLAMA__P("pipeline_stage"), LLAMA__G_PP, 1, llama__when_no_pp, NULL, {0}, NULL},
    {LLAMA__K("num_layers"), LLAMA__G_PP, 1, llama__when_layers_by_stages,
     LLAMA__K("num_layers") " = %lld does not split into " LLAMA__P("pipeline_stage") " x " LLAMA__K("pp_interleave_num")
     " = %lld x %lld = %lld stages of equal size (layers are never dropped: use a multiple of %lld, and offset to make "
     "stages uneven)",
     {LLAMA__N_LAYERS, LLAMA__N_PP, LLAMA__N_CHUNKS, LLAMA__N_STAGES, LLAMA__N_STAGES}, NULL},
    {LLAMA__K("offset"), LLAMA__G_PP, 1, llama__when_empty_stage,
     LLAMA__K("offset") " = %lld leaves a stage without layers: %lld layers per stage, the first gets %lld and the "
     "last %lld",
     {LLAMA__N_OFFSET, LLAMA__N_LPS, LLAMA__N_FIRST, LLAMA__N_LAST}, NULL},
    {LLAMA__P("micro_batch_num"), LLAMA__G_PP, 1, llama__when_micro_by_pp,
     LLAMA__P("micro_batch_num") " = %lld does not split into micro_batch_num / " LLAMA__P("pipeline_stage")
     " (%lld) rounds of equal size: the interleaved and zb1p schedules run it in rounds (PyTorch's constraint)",
     {LLAMA__N_MBN, LLAMA__N_PP}, NULL},

    /* training: clipping, the schedule, the checkpoint to start from */
    {"max_grad_norm", 0, 0, llama__when_two_clips, NULL, {0}, llama__say_two_clips},
    {"lr_schedule.warmup_steps", 0, 0, llama__when_warmup_past,
     "lr_schedule.warmup_steps = %lld is larger than lr_schedule.total_steps (%lld)", {LLAMA__N_WARMUP, LLAMA__N_TOTAL},
     NULL},
    {"lr_schedule.min_lr", 0, 0, llama__when_min_lr, NULL, {0}, llama__say_min_lr},
    {"load_checkpoint", 0, 0, llama__when_ckpt_file, NULL, {0}, llama__say_ckpt_file},
    {"resume_training", 0, 0, llama__when_resume_nothing,
     "resume_training = true needs load_checkpoint: the checkpoint (a --save-dir step directory or a .safetensors "
     "file) to resume",
     {0}, NULL},
};

/* llama__rule for a sentence of the table (a format only known at run time,
   checked by the test instead of the compiler). */
static void llama__rule_numbers(llama__report *r, const char *sentence, ...) {
    va_list ap;
    va_start(ap, sentence);
    llama__vlocated(r, 0, sentence, ap);
    va_end(ap);
}

static void llama__check_rules(const llama__vctx *v, llama__report *r) {
    int skip = LLAMA__G_NONE; /* the chain a broken rule ended */
    for (size_t i = 0; i < sizeof llama__rules / sizeof llama__rules[0]; i++) {
        const llama__vrule *k = &llama__rules[i];
        if ((k->group != LLAMA__G_NONE && k->group == skip) || !k->when(v)) continue;
        if (k->say) {
            k->say(v, r);
        } else if (k->sentence) {
            long long a[LLAMA__RULE_ARGS];
            for (int j = 0; j < LLAMA__RULE_ARGS; j++) a[j] = v->n[k->args[j]];
            llama__rule_numbers(r, k->sentence, a[0], a[1], a[2], a[3], a[4], a[5]);
        }
        if (k->ends) skip = k->group;
    }
}

static void llama__validate(const llama_config *c, llama__report *r) {
    char why[256], val[300];
    int out_of_range = 0;
    for (int i = 0; i < LLAMA__NUM_KEYS; i++) {
        const llama__key *k = &llama__keys[i];
        if (k->type == LLAMA__T_ALIAS || k->offset == LLAMA__NONE || r->bad[i]) continue;
        if (llama__check_stored(k, c, why, sizeof why)) {
            llama__value_text(k, c, val, sizeof val);
            llama__report_error(r, "%s = %s: %s", k->path, val, why);
            out_of_range = 1;
        }
    }
    if (out_of_range) return; /* the rules between keys divide by these values */
    llama__vctx v;
    llama__vctx_init(&v, c);
    llama__check_rules(&v, r);
}

int llama_config_validate(const llama_config *c, char *err, size_t errsize) {
    if (!c) return llama__fail(err, errsize, "llama_config_validate: config is NULL");
    llama__report *r = (llama__report *)calloc(1, sizeof *r);
    if (!r) return llama__fail(err, errsize, "llama_config_validate: out of memory");
    r->err = err, r->errsize = errsize;
    if (err && errsize) err[0] = 0;
    llama__validate(c, r);
    int rc = r->errors ? -1 : 0;
    free(r);
    return rc;
}

/* ---- YAML file ------------------------------------------------------------- */

typedef struct llama__loader {
    const char *file;
    llama_config *cfg;
    llama__report *rep;
    yaml_parser_t parser;
    char **seen;      /* every path met in the file, for duplicate keys */
    int *seen_line;
    int num_seen, cap_seen;
    int set_by[LLAMA__NUM_KEYS]; /* key index + 1 that set this field in the file */
    char unknown[2048];          /* the unknown keys' summary, grouped by section */
    int num_unknown;
    int depth;                   /* open mappings and sequences */
} llama__loader;

/* Deeper nesting than any configuration needs (MindFormers' go 4 deep) is
   refused as it arrives: libyaml's scanner is quadratic in the depth. */
#define LLAMA__MAX_DEPTH 64

static int llama__next(llama__loader *l, yaml_event_t *ev) {
    if (yaml_parser_parse(&l->parser, ev)) {
        if (ev->type == YAML_MAPPING_START_EVENT || ev->type == YAML_SEQUENCE_START_EVENT) l->depth++;
        if (ev->type == YAML_MAPPING_END_EVENT || ev->type == YAML_SEQUENCE_END_EVENT) l->depth--;
        if (l->depth <= LLAMA__MAX_DEPTH) return 0;
        llama__report_error(l->rep, "%s:%d: nested deeper than %d levels; a config is a few sections deep", l->file,
                            (int)ev->start_mark.line + 1, LLAMA__MAX_DEPTH);
        yaml_event_delete(ev);
        return -1;
    }
    const yaml_parser_t *p = &l->parser;
    const char *problem = p->problem ? p->problem : "unknown error";
    if (p->error == YAML_READER_ERROR)
        return llama__report_error(l->rep, "%s: malformed YAML: %s at byte %zu", l->file, problem, p->problem_offset);
    if (p->context)
        return llama__report_error(l->rep, "%s:%zu:%zu: malformed YAML: %s %s", l->file, p->problem_mark.line + 1,
                                   p->problem_mark.column + 1, p->context, problem);
    return llama__report_error(l->rep, "%s:%zu:%zu: malformed YAML: %s", l->file, p->problem_mark.line + 1,
                               p->problem_mark.column + 1, problem);
}

static int llama__line(const yaml_event_t *ev) { return (int)ev->start_mark.line + 1; }

static const char *llama__node_kind(yaml_event_type_t t) {
    return t == YAML_SEQUENCE_START_EVENT ? "a sequence" : t == YAML_MAPPING_START_EVENT ? "a mapping" : "an alias";
}

/* Skip the rest of a value whose first event was just read (nothing to skip
   for a scalar or an alias). */
static int llama__skip_value(llama__loader *l, const yaml_event_t *first) {
    if (first->type != YAML_MAPPING_START_EVENT && first->type != YAML_SEQUENCE_START_EVENT) return 0;
    int depth = 1;
    while (depth > 0) {
        yaml_event_t ev;
        if (llama__next(l, &ev)) return -1;
        if (ev.type == YAML_MAPPING_START_EVENT || ev.type == YAML_SEQUENCE_START_EVENT) depth++;
        if (ev.type == YAML_MAPPING_END_EVENT || ev.type == YAML_SEQUENCE_END_EVENT) depth--;
        yaml_event_delete(&ev);
    }
    return 0;
}

/* Record a path; 1 (an error reported: skip the value) if the file already had it. */
static int llama__note_path(llama__loader *l, const char *path, int line) {
    for (int i = 0; i < l->num_seen; i++)
        if (strcmp(l->seen[i], path) == 0) {
            llama__report_error(l->rep, "%s:%d: duplicate key '%s' (first at line %d)", l->file, line, path,
                                l->seen_line[i]);
            return 1;
        }
    if (l->num_seen == l->cap_seen) {
        int cap = l->cap_seen ? 2 * l->cap_seen : 32;
        char **s = (char **)realloc(l->seen, (size_t)cap * sizeof *s);
        if (s) l->seen = s;
        int *n = (int *)realloc(l->seen_line, (size_t)cap * sizeof *n);
        if (n) l->seen_line = n;
        if (!s || !n) return llama__report_error(l->rep, "%s: out of memory", l->file);
        l->cap_seen = cap;
    }
    size_t len = strlen(path) + 1;
    char *copy = (char *)malloc(len);
    if (!copy) return llama__report_error(l->rep, "%s: out of memory", l->file);
    memcpy(copy, path, len);
    l->seen[l->num_seen] = copy;
    l->seen_line[l->num_seen++] = line;
    return 0;
}

/* The sections the trainer reads: an unknown key there is listed by name in
   the summary; elsewhere (datasets, callbacks, context, ...) by section. */
static int llama__read_section(const char *path) {
    static const char *const read[] = {"model.",          "parallel.",      "parallel_config.", "optimizer.",
                                       "lr_schedule.",    "runner_config.", "runner_wrapper.",  "recompute_config.",
                                       NULL};
    for (int i = 0; read[i]; i++)
        if (strncmp(path, read[i], strlen(read[i])) == 0) return 1;
    return !strchr(path, '.');
}

/* MindFormers' model_config keys for inference, tokens and fused kernels:
   nothing to train differently, so never taken for a typo of a known key. */
static int llama__mindformers_harmless(const char *path) {
    static const char *const keys[] = {
        "model.model_config.batch_size", "model.model_config.top_k", "model.model_config.top_p",
        "model.model_config.do_sample", "model.model_config.repetition_penalty", "model.model_config.max_decode_length",
        "model.model_config.use_past", "model.model_config.is_dynamic", "model.model_config.bos_token_id",
        "model.model_config.eos_token_id", "model.model_config.pad_token_id", "model.model_config.ignore_token_id",
        "model.model_config.block_size", "model.model_config.num_blocks", "model.model_config.use_rope_slice",
        "model.model_config.qkv_concat", "model.model_config.use_fused_rms_norm", "model.model_config.use_fused_rope",
        "model.model_config.use_fused_swiglu", "model.model_config.fused_rms_norm", "model.model_config.auto_map",
        "model.model_config.use_past_shard", "model.model_config.parallel_decoding", NULL};
    for (int i = 0; keys[i]; i++)
        if (strcmp(path, keys[i]) == 0) return 1;
    return 0;
}

/* An unknown key: a likely typo (a close known key) gets its own warning;
   the rest go into the one-line summary. */
static void llama__unknown(llama__loader *l, const char *path, int line) {
    char hint[LLAMA__MAX_PATH + 1], group[LLAMA__MAX_PATH + 1];
    hint[0] = 0;
    if (!llama__mindformers_harmless(path)) llama__suggest(path, hint, sizeof hint);
    if (hint[0]) {
        if (l->rep->warn)
            fprintf(l->rep->warn, "warning: %s:%d: unknown key '%s' ignored (did you mean '%s'?)\n", l->file, line, path,
                    hint);
        return;
    }
    l->num_unknown++;
    const char *dot = strchr(path, '.');
    if (llama__read_section(path)) snprintf(group, sizeof group, "'%s'", path);
    else snprintf(group, sizeof group, "'%.*s.*'", (int)(dot - path), path);
    /* one entry per group: "train_dataset.*" once, however many keys */
    size_t n = strlen(group), used = strlen(l->unknown);
    for (const char *p = strstr(l->unknown, group); p; p = strstr(p + 1, group))
        if (p[n] == ',' || p[n] == 0) return;
    if (used + n + 3 < sizeof l->unknown) snprintf(l->unknown + used, sizeof l->unknown - used, "%s%s", used ? ", " : "", group);
}

static int llama__is_null(const yaml_event_t *ev) {
    const char *v = (const char *)ev->data.scalar.value;
    if (ev->data.scalar.style != YAML_PLAIN_SCALAR_STYLE) return 0;
    return !*v || !strcmp(v, "~") || !strcmp(v, "null") || !strcmp(v, "Null") || !strcmp(v, "NULL");
}

static int llama__same_text(const char *a, const char *b) {
    for (; *a && *b; a++, b++)
        if (tolower((unsigned char)*a) != tolower((unsigned char)*b)) return 0;
    return *a == *b;
}

/* A known key that is accepted but not honoured (LLAMA__CHANGES): does this
   value differ from its default, so that training differs from MindFormers'? */
static int llama__differs_from_default(const llama__key *k, const char *text) {
    if (k->type == LLAMA__T_BOOL) {
        int a = 0, b = 0;
        return llama__parse_bool(text, &a) == 0 && llama__parse_bool(k->def, &b) == 0 && a != b;
    }
    if (k->type == LLAMA__T_FLOAT) return strtod(text, NULL) != strtod(k->def, NULL);
    return !llama__same_text(text, k->def);
}

/* Key index k took `text` from `where` (a file line or a --set): report a
   value that changes training. */
static void llama__note_changes(llama__report *r, const llama__key *k, const char *text) {
    if (!(k->flags & LLAMA__CHANGES) || !llama__differs_from_default(k, text)) return;
    llama__changes(r, "%s = %.60s: %s", k->path, text, k->help);
}

/* A scalar value at `path`. Problems are reported and loading goes on. */
static void llama__file_scalar(llama__loader *l, const char *path, const yaml_event_t *ev) {
    int line = llama__line(ev);
    const char *text = (const char *)ev->data.scalar.value;
    const llama__key *k = llama__find(path, strlen(path));
    if (!k) {
        const llama__key *ex = llama__section_example(path, strlen(path));
        if (ex && llama__is_null(ev)) return; /* "parallel:" with nothing under it */
        if (ex)
            llama__report_error(l->rep, "%s:%d: '%s' is a section and needs keys under it (e.g. %s), not '%.40s'", l->file,
                                line, path, ex->path, text);
        else
            llama__unknown(l, path, line);
        return;
    }
    const llama__key *t = llama__resolve_alias(k);
    const int ti = (int)(t - llama__keys), ki = (int)(k - llama__keys);
    char why[320];
    if (llama__is_null(ev)) {
        if (t->type == LLAMA__T_STRING || t->type == LLAMA__T_TEXT) return; /* "load_checkpoint:" = none */
        if (!strcmp(t->path, LLAMA__K("n_kv_heads")) || !strcmp(t->path, LLAMA__K("intermediate_size")) ||
            !strcmp(t->path, LLAMA__K("ffn_dim_multiplier")))
            return; /* MindFormers' None: derived (the default) */
        llama__report_error(l->rep, "%s:%d: %s has no value", l->file, line, path);
        l->rep->bad[ti] = 1;
        return;
    }
    /* Parse into a copy: an alias that contradicts its target (both spelled
       out in the file with different values) is an error, not a silent win. */
    llama_config before = *l->cfg;
    if (llama__parse_value(t, text, l->cfg, why, sizeof why)) {
        llama__report_error(l->rep, "%s:%d: %s = %.40s: %s", l->file, line, path, text, why);
        if (t->offset != LLAMA__NONE) l->rep->bad[ti] = 1;
        return;
    }
    if (t->offset == LLAMA__NONE) {
        l->rep->line[ti] = line;
        llama__note_changes(l->rep, t, text);
        return;
    }
    if (l->set_by[ti] && l->set_by[ti] != ki + 1) {
        size_t n = t->size                    ? t->size
                   : t->type == LLAMA__T_U64  ? sizeof(uint64_t)
                   : t->type == LLAMA__T_PAIR ? 2 * sizeof(float)
                                              : sizeof(int);
        if (memcmp(llama__cfield(&before, t), llama__cfield(l->cfg, t), n) != 0) {
            char old[300];
            llama__value_text(t, &before, old, sizeof old);
            *l->cfg = before;
            llama__report_error(l->rep, "%s:%d: %s = %.40s contradicts %s = %s at line %d; keep one", l->file, line, path,
                                text, llama__keys[l->set_by[ti] - 1].path, old, l->rep->line[ti]);
            return;
        }
    }
    l->set_by[ti] = ki + 1;
    l->rep->line[ti] = line;
    if (t->type == LLAMA__T_PAIR) /* betas: both halves were given here */
        for (int i = 0; i < LLAMA__NUM_KEYS; i++)
            if (llama__keys[i].offset == t->offset + sizeof(float) || (llama__keys[i].offset == t->offset && i != ti))
                l->rep->line[i] = line;
}

/* MindFormers also takes a list for a few keys: per-stage or per-operator
   forms of features that are not here. Such a list is refused with the
   feature's reason rather than as a shape error. NULL for other keys. */
static const char *llama__list_refusal(const llama__key *k) {
    static const struct {
        const char *path, *reason;
    } lists[] = {
        {"model.model_config.offset", "a per-stage list of offsets is not supported; give one integer (layers moved from the first stage to the last)"},
    };
    for (size_t i = 0; i < sizeof lists / sizeof lists[0]; i++)
        if (strcmp(lists[i].path, k->path) == 0) return lists[i].reason;
    return NULL;
}

/* A sequence's items, joined into `text` by the caller, handed to the key's
   own parser as if the file had written them as one scalar at `line`. */
static void llama__file_text(llama__loader *l, const char *path, int line, char *text, size_t used) {
    yaml_event_t fake;
    memset(&fake, 0, sizeof fake);
    fake.type = YAML_SCALAR_EVENT;
    fake.start_mark.line = (size_t)(line - 1);
    fake.data.scalar.value = (yaml_char_t *)text;
    fake.data.scalar.length = used;
    fake.data.scalar.style = YAML_PLAIN_SCALAR_STYLE;
    llama__file_scalar(l, path, &fake);
}

/* A PAIR key written as a YAML list ("betas: [0.9, 0.95]"): the sequence's
   scalars joined with commas and read as the --set text would be. */
static int llama__file_pair(llama__loader *l, const char *path, int line) {
    char text[128] = "";
    size_t used = 0;
    int items = 0, ok = 1;
    for (;;) {
        yaml_event_t ev;
        if (llama__next(l, &ev)) return -1;
        if (ev.type == YAML_SEQUENCE_END_EVENT) {
            yaml_event_delete(&ev);
            break;
        }
        if (ev.type != YAML_SCALAR_EVENT) {
            ok = 0;
            int rc = llama__skip_value(l, &ev);
            yaml_event_delete(&ev);
            if (rc) return -1;
            continue;
        }
        if (used + 1 < sizeof text)
            used += (size_t)snprintf(text + used, sizeof text - used, "%s%s", items ? "," : "",
                                     (const char *)ev.data.scalar.value);
        items++;
        yaml_event_delete(&ev);
    }
    if (!ok) {
        llama__report_error(l->rep, "%s:%d: %s needs a list of numbers", l->file, line, path);
        return 0;
    }
    llama__file_text(l, path, line, text, used);
    return 0;
}

/* A recompute_config list (its start event just read), nested once at most,
   handed to the key's parser as the text "[2, 1]" or "[[2, 1], [1, 0]]"
   (a scalar item as written: an operator pattern is the parser's error). */
static int llama__file_layers(llama__loader *l, const char *path, int line) {
    char text[1024] = "[";
    size_t used = 1;
    int depth = 1, first = 1, bad = 0;
    while (depth > 0) {
        yaml_event_t ev;
        const char *piece = NULL;
        if (llama__next(l, &ev)) return -1;
        if (ev.type == YAML_SEQUENCE_START_EVENT) depth++, piece = "[";
        else if (ev.type == YAML_SEQUENCE_END_EVENT) depth--, piece = "]";
        else if (ev.type == YAML_SCALAR_EVENT) piece = (const char *)ev.data.scalar.value;
        if (!piece) { /* a mapping or an alias inside the list: skipped, the rest of the list read */
            int rc = llama__skip_value(l, &ev);
            yaml_event_delete(&ev);
            if (rc) return -1;
            bad = 1;
            continue;
        }
        if (used + 1 < sizeof text)
            used += (size_t)snprintf(text + used, sizeof text - used, "%s%s", !first && *piece != ']' ? ", " : "", piece);
        first = *piece == '[';
        yaml_event_delete(&ev);
    }
    if (bad) return llama__report_error(l->rep, "%s:%d: %s needs true, false or a list of layer counts", l->file, line, path), 0;
    llama__file_text(l, path, line, text, used);
    return 0;
}

/* The body of a mapping whose start event was just read; `path` is its
   dotted path ("" at the top). -1 only for malformed YAML (or no memory):
   every other problem is reported and the load goes on. */
static int llama__file_mapping(llama__loader *l, const char *path) {
    for (;;) {
        yaml_event_t key, val;
        if (llama__next(l, &key)) return -1;
        if (key.type == YAML_MAPPING_END_EVENT) {
            yaml_event_delete(&key);
            return 0;
        }
        int line = llama__line(&key);
        if (key.type != YAML_SCALAR_EVENT) {
            const char *kind = llama__node_kind(key.type);
            int rc = llama__skip_value(l, &key);
            yaml_event_delete(&key);
            if (rc) return -1;
            llama__report_error(l->rep, "%s:%d: a key must be a plain name, not %s", l->file, line, kind);
            if (llama__next(l, &val)) return -1; /* and its value */
            rc = llama__skip_value(l, &val);
            yaml_event_delete(&val);
            if (rc) return -1;
            continue;
        }
        char child[LLAMA__MAX_PATH + 1];
        int n = snprintf(child, sizeof child, "%s%s%s", path, *path ? "." : "", (const char *)key.data.scalar.value);
        yaml_event_delete(&key);
        int skip = 0;
        if (n < 0 || n >= (int)sizeof child) {
            llama__report_error(l->rep, "%s:%d: key path '%.60s...' is too long", l->file, line, child);
            skip = 1;
        } else if ((skip = llama__note_path(l, child, line)) < 0) {
            return -1;
        }
        if (llama__next(l, &val)) return -1;
        int rc = 0;
        const llama__key *k = skip ? NULL : llama__find(child, strlen(child));
        const llama__key *t = k ? llama__resolve_alias(k) : NULL;
        const llama__key *section = skip ? NULL : llama__section_example(child, strlen(child));
        if (skip) {
            rc = llama__skip_value(l, &val);
        } else if (val.type == YAML_SCALAR_EVENT) {
            llama__file_scalar(l, child, &val);
        } else if (val.type == YAML_ALIAS_EVENT && !k && !section) {
            llama__unknown(l, child, line); /* "dataset_config: *train_dataset" under a section we do not read */
        } else if (val.type == YAML_ALIAS_EVENT) {
            llama__report_error(l->rep, "%s:%d: %s: YAML aliases (*name) are not supported for keys the trainer reads; "
                                "write the value out", l->file, line, child);
        } else if (t && t->type == LLAMA__T_PAIR && val.type == YAML_SEQUENCE_START_EVENT) {
            rc = llama__file_pair(l, child, line);
        } else if (t && t->type == LLAMA__T_LAYERS && val.type == YAML_SEQUENCE_START_EVENT && t->offset == LLAMA__NONE) {
            l->rep->line[t - llama__keys] = line; /* accepted whatever it lists (the reference says why) */
            rc = llama__skip_value(l, &val);
        } else if (t && t->type == LLAMA__T_LAYERS && val.type == YAML_SEQUENCE_START_EVENT) {
            rc = llama__file_layers(l, child, line); /* MindFormers' per-stage (per chunk) lists */
        } else if (t && val.type == YAML_SEQUENCE_START_EVENT && llama__list_refusal(t)) {
            llama__report_error(l->rep, "%s:%d: %s = [a list]: %s", l->file, line, child, llama__list_refusal(t));
            l->rep->line[t - llama__keys] = line;
            rc = llama__skip_value(l, &val);
        } else if (k && section && val.type == YAML_MAPPING_START_EVENT) {
            rc = llama__file_mapping(l, child); /* a key with keys under it too (runner_wrapper.scale_sense) */
        } else if (k) {
            llama__report_error(l->rep, "%s:%d: %s needs a single value, not %s", l->file, line, child,
                                llama__node_kind(val.type));
            rc = llama__skip_value(l, &val);
        } else if (section && val.type == YAML_MAPPING_START_EVENT) {
            rc = llama__file_mapping(l, child);
        } else if (section) {
            llama__report_error(l->rep, "%s:%d: '%s' is a section and needs a mapping of keys, not %s", l->file, line,
                                child, llama__node_kind(val.type));
            rc = llama__skip_value(l, &val);
        } else {
            llama__unknown(l, child, line);
            rc = llama__skip_value(l, &val);
        }
        yaml_event_delete(&val);
        if (rc) return -1;
    }
}

/* The whole stream: nothing (an empty file), or one document whose root is a
   mapping (or null). */
static int llama__file_stream(llama__loader *l) {
    yaml_event_t ev;
    int documents = 0;
    if (llama__next(l, &ev)) return -1; /* STREAM-START */
    yaml_event_delete(&ev);
    for (;;) {
        if (llama__next(l, &ev)) return -1;
        if (ev.type == YAML_STREAM_END_EVENT) {
            yaml_event_delete(&ev);
            return 0;
        }
        int line = llama__line(&ev);
        yaml_event_delete(&ev); /* DOCUMENT-START */
        if (++documents > 1)
            return llama__report_error(l->rep, "%s:%d: a config is one YAML document; found a second '---'", l->file,
                                       line);
        if (llama__next(l, &ev)) return -1;
        line = llama__line(&ev);
        int rc = 0;
        if (ev.type == YAML_MAPPING_START_EVENT)
            rc = llama__file_mapping(l, "");
        else if (!(ev.type == YAML_SCALAR_EVENT && llama__is_null(&ev)))
            rc = llama__report_error(l->rep,
                                     "%s:%d: the top level must be a mapping of sections (model:, parallel_config:, ...), "
                                     "not %s",
                                     l->file, line, ev.type == YAML_SCALAR_EVENT ? "a scalar" : llama__node_kind(ev.type));
        yaml_event_delete(&ev);
        if (rc) return -1;
        if (llama__next(l, &ev)) return -1; /* DOCUMENT-END */
        yaml_event_delete(&ev);
    }
}

/* The file's bytes, NUL-terminated; errors name the file and errno. */
static char *llama__read_file(const char *path, size_t *size, char *err, size_t errsize) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        llama__fail(err, errsize, "%s: cannot open the config: %s", path, strerror(errno));
        return NULL;
    }
    size_t cap = 4096, len = 0;
    char *buf = (char *)malloc(cap + 1);
    while (buf) {
        size_t got = fread(buf + len, 1, cap - len, f);
        len += got;
        if (got == 0) break;
        if (len == cap) {
            if (cap >= LLAMA__MAX_FILE) {
                free(buf);
                fclose(f);
                llama__fail(err, errsize, "%s: larger than %d bytes; that is not a config", path, LLAMA__MAX_FILE);
                return NULL;
            }
            char *bigger = (char *)realloc(buf, 2 * cap + 1);
            if (!bigger) free(buf);
            buf = bigger;
            cap *= 2;
        }
    }
    int failed = !buf || ferror(f);
    int saved = errno;
    fclose(f);
    if (!buf) {
        llama__fail(err, errsize, "%s: out of memory", path);
        return NULL;
    }
    if (failed) {
        free(buf);
        llama__fail(err, errsize, "%s: cannot read the config: %s", path, strerror(saved));
        return NULL;
    }
    buf[len] = 0;
    *size = len;
    return buf;
}

/* The file into cfg; -1 only when it could not be read or parsed as YAML
   (everything else is in the report). */
static int llama__load_file(const char *path, llama_config *cfg, llama__report *rep) {
    size_t size = 0;
    char why[512];
    char *text = llama__read_file(path, &size, why, sizeof why);
    if (!text) return llama__report_error(rep, "%s", why);
    llama__loader *l = (llama__loader *)calloc(1, sizeof *l);
    if (!l) {
        free(text);
        return llama__report_error(rep, "%s: out of memory", path);
    }
    l->file = path;
    l->cfg = cfg;
    l->rep = rep;
    int rc = -1;
    if (!yaml_parser_initialize(&l->parser)) {
        llama__report_error(rep, "%s: cannot initialize the YAML parser", path);
    } else {
        yaml_parser_set_input_string(&l->parser, (const unsigned char *)text, size);
        rc = llama__file_stream(l);
        yaml_parser_delete(&l->parser);
    }
    if (l->num_unknown) /* printed last, after the lines that matter */
        snprintf(rep->unknown, sizeof rep->unknown, "warning: %s: %d key%s this trainer does not read, ignored: %s\n",
                 path, l->num_unknown, l->num_unknown == 1 ? "" : "s", l->unknown);
    for (int i = 0; i < l->num_seen; i++) free(l->seen[i]);
    free(l->seen);
    free(l->seen_line);
    free(l);
    free(text);
    return rc;
}

/* ---- --set ---------------------------------------------------------------- */

static void llama__apply_set(const char *arg, int index, llama_config *cfg, llama__report *r) {
    const char *eq = strchr(arg, '=');
    if (!eq) {
        llama__report_error(r, "--set %s: expected key.path=value", arg);
        return;
    }
    size_t klen = (size_t)(eq - arg);
    if (klen == 0) {
        llama__report_error(r, "--set %s: the key before '=' is missing", arg);
        return;
    }
    const llama__key *k = llama__find(arg, klen);
    if (!k) {
        const llama__key *ex = llama__section_example(arg, klen);
        char key[LLAMA__MAX_PATH + 1], hint[LLAMA__MAX_PATH + 1];
        snprintf(key, sizeof key, "%.*s", (int)klen, arg);
        llama__suggest(key, hint, sizeof hint);
        if (ex)
            llama__report_error(r, "--set %s: '%.*s' is a section, not a key; set one of its keys (e.g. %s)", arg,
                                (int)klen, arg, ex->path);
        else if (hint[0])
            llama__report_error(r, "--set %s: unknown key '%s' (did you mean '%s'?)", arg, key, hint);
        else
            llama__report_error(r, "--set %s: unknown key '%s'", arg, key);
        return;
    }
    const llama__key *t = llama__resolve_alias(k);
    const int ti = (int)(t - llama__keys);
    char why[320];
    if (llama__parse_value(t, eq + 1, cfg, why, sizeof why)) {
        llama__report_error(r, "--set %s: %s", arg, why);
        return;
    }
    r->bad[ti] = 0; /* a good value replaces a refused one */
    r->line[ti] = 0, r->set_arg[ti] = index + 1;
    if (t->type == LLAMA__T_PAIR)
        for (int i = 0; i < LLAMA__NUM_KEYS; i++)
            if (i != ti && llama__keys[i].type == LLAMA__T_FLOAT &&
                (llama__keys[i].offset == t->offset || llama__keys[i].offset == t->offset + sizeof(float)))
                r->line[i] = 0, r->set_arg[i] = index + 1;
    llama__note_changes(r, t, eq + 1);
}

/* Values derived as MindFormers derives them, and cross-key notes that are
   warnings, not errors. */
static void llama__derive(llama_config *c, llama__report *r) {
    if (c->n_kv_heads == 0) c->n_kv_heads = c->num_heads;
    if (c->scale_sense_number > 0 && c->scale_sense == 0) /* "scale_sense: 1024": MindSpore's fixed Tensor scale */
        c->scale_sense = 2, c->loss_scale_value = c->scale_sense_number;
    c->scale_sense_number = 0; /* folded (LLAMA__FOLDED): the section says it all from here */
    const int ffn = llama_config_ffn_width(c);
    if (c->intermediate_size == 0 && ffn >= 1 && ffn <= 1048576) c->intermediate_size = ffn;
    if (c->pipeline_stage > 1 && c->gradient_accumulation_steps > 1)
        llama__changes(r,
                       "runner_config.gradient_accumulation_steps = %d has no effect with " LLAMA__P("pipeline_stage")
                       " = %d: " LLAMA__P("micro_batch_num") " (%d) accumulates, as in MindFormers",
                       c->gradient_accumulation_steps, c->pipeline_stage, c->micro_batch_num);
    if (c->load_checkpoint[0] && !c->resume_training)
        llama__changes(r, "load_checkpoint = %s with resume_training = false: MindFormers would load the weights only; "
                          "here a checkpoint that holds a step count and optimizer state continues them",
                       c->load_checkpoint);
}

int llama_config_load(const char *path, const char *const *sets, int num_sets, llama_config *cfg, FILE *warn, char *err,
                      size_t errsize) {
    if (!cfg) return llama__fail(err, errsize, "llama_config_load: cfg is NULL");
    if (num_sets < 0 || (num_sets > 0 && !sets))
        return llama__fail(err, errsize, "llama_config_load: %d --set overrides but no array", num_sets);
    for (int i = 0; i < num_sets; i++)
        if (!sets[i]) return llama__fail(err, errsize, "llama_config_load: --set override %d is NULL", i);
    llama__report *r = (llama__report *)calloc(1, sizeof *r);
    if (!r) return llama__fail(err, errsize, "llama_config_load: out of memory");
    r->err = err, r->errsize = errsize, r->warn = warn, r->file = path, r->sets = sets;
    if (err && errsize) err[0] = 0;
    llama_config c;
    llama_config_defaults(&c);
    const int fatal = path && llama__load_file(path, &c, r) != 0; /* unreadable, or not YAML */
    for (int i = 0; i < num_sets && !fatal; i++) llama__apply_set(sets[i], i, &c, r);
    if (!fatal) {
        llama__derive(&c, r);
        llama__validate(&c, r);
    }
    if (r->unknown[0] && warn) fputs(r->unknown, warn);
    int rc = r->errors ? -1 : 0;
    if (rc && r->errors > 1 && err && errsize > 64) { /* the count last, over the tail of a full buffer */
        size_t at = r->used + 24 < errsize ? r->used : errsize - 24;
        snprintf(err + at, errsize - at, "\n(%d errors)", r->errors);
    }
    free(r);
    if (rc == 0) *cfg = c;
    return rc;
}

/* ---- printing ------------------------------------------------------------ */

/* Number of leading section names two paths share ("a.b.x" and "a.c.y": 1). */
static int llama__common_sections(const char *a, const char *b) {
    int common = 0;
    for (;;) {
        const char *da = strchr(a, '.'), *db = strchr(b, '.');
        if (!da || !db || da - a != db - b || memcmp(a, b, (size_t)(da - a)) != 0) return common;
        common++;
        a = da + 1;
        b = db + 1;
    }
}

void llama_config_print(const llama_config *cfg, FILE *f) {
    const char *prev = "";
    for (int i = 0; i < LLAMA__NUM_KEYS; i++) {
        const llama__key *k = &llama__keys[i];
        if (k->type == LLAMA__T_ALIAS || k->offset == LLAMA__NONE || k->type == LLAMA__T_PAIR || (k->flags & LLAMA__FOLDED))
            continue;
        int depth = llama__common_sections(prev, k->path);
        const char *p = k->path;
        for (int d = 0; d < depth; d++) p = strchr(p, '.') + 1;
        for (const char *dot; (dot = strchr(p, '.')) != NULL; p = dot + 1, depth++)
            fprintf(f, "%*s%.*s:\n", 2 * depth, "", (int)(dot - p), p);
        char val[300];
        llama__value_text(k, cfg, val, sizeof val);
        fprintf(f, "%*s%s: %s\n", 2 * depth, "", p, val);
        prev = k->path;
    }
}

/* Markdown cell text: a '|' would end the cell. */
static void llama__md(FILE *f, const char *s) {
    for (; *s; s++) {
        if (*s == '|') fputc('\\', f);
        fputc(*s, f);
    }
}

static void llama__type_text(const llama__key *k, char *buf, size_t size) {
    char range[64];
    switch (k->type) {
    case LLAMA__T_INT: llama__range_text(k, range, sizeof range); snprintf(buf, size, "int %s", range); break;
    case LLAMA__T_FLOAT: llama__range_text(k, range, sizeof range); snprintf(buf, size, "float %s", range); break;
    case LLAMA__T_U64: snprintf(buf, size, "int >= 0 (64-bit)"); break;
    case LLAMA__T_BOOL: snprintf(buf, size, "bool"); break;
    case LLAMA__T_TEXT: snprintf(buf, size, "text"); break;
    case LLAMA__T_STRING: snprintf(buf, size, "text"); break;
    case LLAMA__T_LAYERS: snprintf(buf, size, "bool or layer counts"); break;
    case LLAMA__T_PAIR: llama__range_text(k, range, sizeof range); snprintf(buf, size, "[float, float] %s", range); break;
    case LLAMA__T_ALIAS: snprintf(buf, size, "alias"); break;
    case LLAMA__T_CHOICE: {
        size_t used = 0;
        buf[0] = 0;
        for (int i = 0; k->choices[i].name && used < size; i++) {
            if (strcmp(k->choices[i].name, k->choices[i].canon) != 0) continue;
            used += (size_t)snprintf(buf + used, size - used, "%s`%s`", used ? " | " : "", k->choices[i].name);
        }
        break;
    }
    default: snprintf(buf, size, "?"); break;
    }
}

void llama_config_print_reference(FILE *f) {
    fprintf(f, "| key | type | default | meaning |\n|---|---|---|---|\n");
    for (int i = 0; i < LLAMA__NUM_KEYS; i++) {
        const llama__key *k = &llama__keys[i];
        char type[256];
        llama__type_text(k, type, sizeof type);
        fprintf(f, "| `%s` | ", k->path);
        llama__md(f, type);
        fprintf(f, " | ");
        if (k->def) fprintf(f, "`%s`", k->def);
        else fprintf(f, "-");
        fprintf(f, " | ");
        if (k->type == LLAMA__T_ALIAS) fprintf(f, "same as `%s` (", k->target);
        llama__md(f, k->help);
        if (k->type == LLAMA__T_ALIAS) fprintf(f, ")");
        if (k->type == LLAMA__T_CHOICE) {
            int first = 1;
            for (int c = 0; k->choices[c].name; c++) {
                if (strcmp(k->choices[c].name, k->choices[c].canon) == 0) continue;
                fprintf(f, "%s`%s` = `%s`", first ? "; also accepted: " : ", ", k->choices[c].name, k->choices[c].canon);
                first = 0;
            }
        }
        fprintf(f, " |\n");
    }
}

/* ---- command line ---------------------------------------------------------- */

void llama_print_usage(FILE *f) {
    fprintf(f,
            "usage: build/train [--config FILE.yaml] [--set key.path=value ...] [--data FILE] [--steps N] [options]\n"
            "\n"
            "Trains a Llama model on the bytes of a file, with the parallel layout given by the\n"
            "MindFormers-style config. Every rank runs the same command.\n"
            "\n"
            "options (each also as --option=value):\n"
            "  --config FILE.yaml     model / parallel / optimizer settings (default: built-in, = examples/configs/tiny.yaml)\n"
            "  --set key.path=value   override one config key after the file, e.g. --set optimizer.learning_rate=3e-4\n"
            "                         (repeatable, up to %d; an unknown key is an error)\n"
            "  --steps N              optimizer steps to run (default 10; 0 = just load/save/sample)\n"
            "  --data FILE            training text, read as bytes, or a token file in llm.c's format\n"
            "                         (uint16 or uint32 tokens; any vocab_size) (required unless --steps 0)\n"
            "  --init-from PATH       start from these weights: a .safetensors file (Hugging Face Llama names;\n"
            "                         if its .optimizer.safetensors sibling exists, resume AdamW and the step),\n"
            "                         or a sharded checkpoint (a --save-dir DIR, meaning its latest step, or\n"
            "                         one DIR/step-N): resume weights, AdamW, the step and the data position,\n"
            "                         under any parallel configuration\n"
            "  --save FILE            write the final weights (.safetensors) and the AdamW state beside them\n"
            "                         (FILE with .optimizer.safetensors); each file written atomically\n"
            "  --save-dtype T         --save's weights in f32 (default), bf16 or f16 (rounded to nearest\n"
            "                         even; also bfloat16, float16, float32); the AdamW state stays f32\n"
            "  --save-dir DIR         sharded checkpoint at the end: each rank writes its own shard to\n"
            "                         DIR/step-N/ (no gather), DIR/latest names the newest; crash-safe\n"
            "  --save-every N         with --save-dir: also after every N steps\n"
            "  --keep K               with --save-dir: keep the newest K step directories (default 2; 0 = all)\n"
            "  --backend NAME         threads (default: one process, a thread per rank), mpi (under mpirun),\n"
            "                         nccl (GPUs, under mpirun; needs the CUDA build, not this one),\n"
            "                         cuda-threads (a thread per rank, all on one GPU; the CUDA build)\n"
            "  --metrics FILE         JSON lines: the memory plan, one line per step, the measured peaks\n"
            "  --seed N               override the config's seed (N >= 0)\n"
            "  --shuffle              visit the training samples in a seeded random order\n"
            "  --sample N             after training, generate N bytes from the model\n"
            "  --quiet                no per-step lines\n"
            "  --trace FILE.json      Chrome trace of every rank's compute and comm spans (Perfetto)\n"
            "  --pp-schedule FILE     run this pipeline schedule (the text form `par-explain pipeline` prints:\n"
            "                         edit one or write your own); its stages, chunks and micro-batches must\n"
            "                         be the config's; checked before training; replaces pipeline_scheduler\n"
            "  --cluster FILE         parallel_mode auto_parallel: the cluster description (par-explain plan's\n"
            "                         format; default: measure this machine's ranks for a moment)\n"
            "  --max-device-memory S  parallel_mode auto_parallel: memory cap per rank (bytes, or 64MiB, 1GB, ...)\n"
            "  -h, --help             this text\n"
            "\n"
            "examples:\n"
            "  build/train --config examples/configs/tiny.yaml --data README.md --steps 50\n"
            "  build/train --config examples/configs/demo.yaml --data README.md --steps 200 --sample 200\n"
            "  mpirun -np 2 build/train --backend mpi --set parallel_config.data_parallel=2 --data README.md\n"
            "\n"
            "Config keys (dotted paths of the YAML, the same for --set) are listed in docs/config.md,\n"
            "the Configuration reference. Unknown keys in a file are warned about and ignored;\n"
            "switches of parallel modes that have not landed yet are rejected by name.\n",
            LLAMA_MAX_SETS);
}

/* A non-negative integer option value. */
static int llama__arg_int(const char *opt, const char *v, long long max, long long *out, char *err, size_t errsize) {
    char why[128];
    long long n;
    if (llama__parse_ll(v, &n, why, sizeof why)) return llama__fail(err, errsize, "%s %s: %s", opt, v, why);
    if (n < 0 || n > max) return llama__fail(err, errsize, "%s %s: must be in [0, %lld]", opt, v, max);
    *out = n;
    return 0;
}

int llama_parse_args(int argc, char **argv, llama_options *opts, char *err, size_t errsize) {
    enum { O_CONFIG, O_SET, O_STEPS, O_DATA, O_INIT, O_SAVE, O_BACKEND, O_METRICS, O_TRACE, O_SEED, O_SHUFFLE,
           O_SAMPLE, O_QUIET, O_HELP, O_SAVE_DIR, O_SAVE_EVERY, O_KEEP, O_PP_SCHEDULE, O_CLUSTER, O_MAX_MEM,
           O_SAVE_DTYPE, O_COUNT };
    static const struct {
        const char *name;
        int takes_value;
    } table[O_COUNT] = {{"--config", 1},  {"--set", 1},     {"--steps", 1},   {"--data", 1},    {"--init-from", 1},
                        {"--save", 1},    {"--backend", 1}, {"--metrics", 1}, {"--trace", 1},   {"--seed", 1},
                        {"--shuffle", 0}, {"--sample", 1},  {"--quiet", 0},   {"--help", 0},
                        {"--save-dir", 1}, {"--save-every", 1}, {"--keep", 1}, {"--pp-schedule", 1},
                        {"--cluster", 1}, {"--max-device-memory", 1}, {"--save-dtype", 1}};
    int given[O_COUNT] = {0};
    llama_options o;
    if (!opts) return llama__fail(err, errsize, "llama_parse_args: opts is NULL");
    memset(&o, 0, sizeof o);
    o.steps = 10;
    o.backend = "threads";
    o.seed = -1;
    o.keep = 2;
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        if (!arg) return llama__fail(err, errsize, "argument %d is NULL", i);
        if (strcmp(arg, "-h") == 0) arg = "--help";
        const char *eq = strncmp(arg, "--", 2) == 0 ? strchr(arg, '=') : NULL;
        size_t nlen = eq ? (size_t)(eq - arg) : strlen(arg);
        int id = -1;
        for (int t = 0; t < O_COUNT; t++)
            if (strlen(table[t].name) == nlen && strncmp(arg, table[t].name, nlen) == 0) id = t;
        if (id < 0) {
            char name[LLAMA__MAX_PATH + 1];
            snprintf(name, sizeof name, "%.*s", (int)nlen, arg);
            int best = 3, near = -1; /* the closest option within 2 edits */
            for (int t = 0; t < O_COUNT && arg[0] == '-'; t++) {
                int d = llama__edit_distance(name, table[t].name);
                if (d < best) {
                    best = d;
                    near = t;
                }
            }
            if (near >= 0)
                return llama__fail(err, errsize, "unknown option '%s' (did you mean %s? see --help)", arg,
                                   table[near].name);
            if (arg[0] == '-') return llama__fail(err, errsize, "unknown option '%s' (see --help)", arg);
            return llama__fail(err, errsize, "unexpected argument '%s' (options start with --; see --help)", arg);
        }
        const char *name = table[id].name, *v = NULL;
        if (!table[id].takes_value) {
            if (eq) return llama__fail(err, errsize, "%s takes no value (got '%s')", name, arg);
        } else if (eq) {
            v = eq + 1;
        } else {
            if (i + 1 >= argc || !argv[i + 1]) return llama__fail(err, errsize, "%s needs a value", name);
            v = argv[++i];
            if (strncmp(v, "--", 2) == 0)
                return llama__fail(err, errsize, "%s needs a value (got the option '%s'; write %s=%s if you mean it)",
                                   name, v, name, v);
        }
        if (v && !*v) return llama__fail(err, errsize, "%s needs a value (got an empty one)", name);
        if (id != O_SET && id != O_HELP && given[id]++)
            return llama__fail(err, errsize, "%s given twice", name);
        long long n;
        switch (id) {
        case O_CONFIG: o.config_path = v; break;
        case O_SET:
            if (o.num_sets == LLAMA_MAX_SETS)
                return llama__fail(err, errsize, "--set %s: too many --set options (at most %d)", v, LLAMA_MAX_SETS);
            if (!strchr(v, '=')) return llama__fail(err, errsize, "--set %s: expected key.path=value", v);
            o.sets[o.num_sets++] = v;
            break;
        case O_STEPS:
            if (llama__arg_int(name, v, INT_MAX, &n, err, errsize)) return -1;
            o.steps = (int)n;
            break;
        case O_DATA: o.data_path = v; break;
        case O_INIT: o.init_from = v; break;
        case O_SAVE: o.save_path = v; break;
        case O_SAVE_DTYPE: {
            static const char *const names[][2] = {{"f32", "f32"},   {"float32", "f32"}, {"bf16", "bf16"},
                                                   {"bfloat16", "bf16"}, {"f16", "f16"},  {"float16", "f16"}};
            o.save_dtype = NULL;
            for (size_t k = 0; k < sizeof names / sizeof names[0]; k++)
                if (!strcmp(v, names[k][0])) o.save_dtype = names[k][1];
            if (!o.save_dtype)
                return llama__fail(err, errsize, "--save-dtype %s: not one of f32, bf16, f16 (or float32, bfloat16, "
                                                 "float16)", v);
            break;
        }
        case O_SAVE_DIR: o.save_dir = v; break;
        case O_SAVE_EVERY:
            if (llama__arg_int(name, v, INT_MAX, &n, err, errsize)) return -1;
            if (n == 0) return llama__fail(err, errsize, "--save-every 0: must be at least 1 (leave it out to save only at the end)");
            o.save_every = (int)n;
            break;
        case O_KEEP:
            if (llama__arg_int(name, v, 1000000, &n, err, errsize)) return -1;
            o.keep = (int)n;
            break;
        case O_BACKEND:
            if (strcmp(v, "threads") && strcmp(v, "mpi") && strcmp(v, "nccl") && strcmp(v, "cuda-threads"))
                return llama__fail(err, errsize, "--backend %s: must be threads, mpi, nccl or cuda-threads", v);
            o.backend = v;
            break;
        case O_METRICS: o.metrics_path = v; break;
        case O_TRACE: o.trace_path = v; break;
        case O_PP_SCHEDULE: o.pp_schedule_path = v; break;
        case O_CLUSTER: o.cluster_path = v; break;
        case O_MAX_MEM: o.max_device_memory = v; break;
        case O_SEED:
            if (llama__arg_int(name, v, LLONG_MAX, &n, err, errsize)) return -1;
            o.seed = (int64_t)n;
            break;
        case O_SHUFFLE: o.shuffle = 1; break;
        case O_SAMPLE:
            if (llama__arg_int(name, v, 1 << 24, &n, err, errsize)) return -1;
            o.sample_tokens = (int)n;
            break;
        case O_QUIET: o.quiet = 1; break;
        case O_HELP:
            /* --help wins over everything else on the line */
            *opts = o;
            opts->help = 1;
            return 0;
        default: break;
        }
    }
    if (given[O_SAVE_DTYPE] && !o.save_path)
        return llama__fail(err, errsize, "--save-dtype needs --save (it is the type of that file's weights)");
    if ((given[O_SAVE_EVERY] || given[O_KEEP]) && !o.save_dir)
        return llama__fail(err, errsize, "%s needs --save-dir DIR (they set how sharded checkpoints are saved)",
                           given[O_SAVE_EVERY] ? "--save-every" : "--keep");
    if (o.steps > 0 && !o.data_path)
        return llama__fail(err, errsize, "--data FILE is required to train (--steps %d); use --steps 0 to only load, save or sample",
                           o.steps);
    *opts = o;
    return 0;
}

#undef LLAMA__K
#undef LLAMA__P

void llama_config_mesh(const llama_config *c, char *buf, size_t size) {
    const struct {
        const char *name;
        int degree, always;
    } axes[] = {{"dp", c->data_parallel, 1}, {"pp", c->pipeline_stage, 0}, {"cp", c->context_parallel, 0},
                {"tp", c->model_parallel, 1}};
    size_t used = 0, k;
    if (!size) return;
    buf[0] = 0;
    for (k = 0; k < sizeof axes / sizeof axes[0] && used < size; k++)
        if (axes[k].always || axes[k].degree > 1)
            used += (size_t)snprintf(buf + used, size - used, "%s%s=%d", used ? "," : "", axes[k].name, axes[k].degree);
}

#endif /* LLAMA_CONFIG_IMPLEMENTATION */
