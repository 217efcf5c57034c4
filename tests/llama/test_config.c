/* tests/llama/test_config.c - the Llama trainer's configuration layer
   (examples/llama/config.h): YAML loading, --set overrides, validation, the
   command line, printing and the reference table.

   Expected values are written out here, independently of the key table in
   config.h; where the test loops over that table it only does so to prove
   that its own lists cover every key. Runs from the repository root (it loads
   every .yaml in examples/configs). Temporary files live in a mkdtemp directory that
   is removed at the end. */
#define _POSIX_C_SOURCE 200809L
#define LLAMA_CONFIG_IMPLEMENTATION
#include "examples/llama/config.h"

#include <dirent.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- harness: tests/test.h (which needs the library linked in) plus two checks */

#include "test.h"

#define CHECK_HAS(text, needle) \
    CHECK_MSG(strstr((text), (needle)) != NULL, "\"%s\" does not contain \"%s\"", (text), (needle))
#define CHECK_FLT(got, want)                                                   \
    do {                                                                       \
        float g_ = (got), w_ = (float)(want);                                  \
        CHECK_MSG(g_ == w_, "got %.9g, want %.9g", (double)g_, (double)w_);    \
    } while (0)
/* ---- temp files ---------------------------------------------------------- */

static char dir_[64];
static char files_[64][128];
static int num_files_;

/* Write `text` to a file named `name` in the temp dir; returns its path. */
static const char *write_file(const char *name, const char *text) {
    int slot = -1;
    char path[128];
    snprintf(path, sizeof path, "%s/%s", dir_, name);
    for (int i = 0; i < num_files_; i++)
        if (strcmp(files_[i], path) == 0) slot = i;
    if (slot < 0 && num_files_ < 64) {
        slot = num_files_++;
        snprintf(files_[slot], sizeof files_[slot], "%s", path);
    }
    if (slot < 0) return "/nonexistent/too-many-files";
    FILE *f = fopen(files_[slot], "wb");
    if (!f) return "/nonexistent/cannot-write";
    fputs(text, f);
    fclose(f);
    return files_[slot];
}

static void remove_files(void) {
    for (int i = 0; i < num_files_; i++) unlink(files_[i]);
    rmdir(dir_);
}

/* Read everything written to a tmpfile() into buf. */
static void slurp(FILE *f, char *buf, size_t size) {
    size_t n = 0;
    rewind(f);
    if (size) n = fread(buf, 1, size - 1, f);
    buf[n] = 0;
}

/* Load YAML text (through a file named cfg.yaml) with the given --set
   overrides; warnings land in warn[], the error in err[]. */
static char warn_[8192], err_[1024];
static int load_text(const char *yaml, const char *const *sets, int num_sets, llama_config *cfg) {
    const char *path = yaml ? write_file("cfg.yaml", yaml) : NULL;
    FILE *w = tmpfile();
    err_[0] = 0;
    int rc = llama_config_load(path, sets, num_sets, cfg, w, err_, sizeof err_);
    if (w) {
        slurp(w, warn_, sizeof warn_);
        fclose(w);
    } else {
        warn_[0] = 0;
    }
    return rc;
}

static int load_set(const char *set, llama_config *cfg) {
    const char *sets[1] = {set};
    return load_text(NULL, sets, 1, cfg);
}

/* A YAML document that sets one dotted key, written nested ("a.b.c" ->
   "a:\n  b:\n    c: value\n"). */
static void nested_yaml(const char *path, const char *value, char *out, size_t size) {
    size_t used = 0;
    int depth = 0;
    const char *p = path;
    for (const char *dot; (dot = strchr(p, '.')) != NULL; p = dot + 1, depth++)
        used += (size_t)snprintf(out + used, size - used, "%*s%.*s:\n", 2 * depth, "", (int)(dot - p), p);
    snprintf(out + used, size - used, "%*s%s: %s\n", 2 * depth, "", p, value);
}

static int same_config(const llama_config *a, const llama_config *b) {
    return a->vocab_size == b->vocab_size && a->hidden_size == b->hidden_size && a->num_layers == b->num_layers &&
           a->num_heads == b->num_heads && a->n_kv_heads == b->n_kv_heads &&
           a->intermediate_size == b->intermediate_size && a->seq_length == b->seq_length &&
           a->rms_norm_eps == b->rms_norm_eps && a->theta == b->theta && a->initializer_range == b->initializer_range &&
           a->qkv_has_bias == b->qkv_has_bias &&
           a->data_parallel == b->data_parallel && a->model_parallel == b->model_parallel &&
           a->pipeline_stage == b->pipeline_stage && a->micro_batch_num == b->micro_batch_num &&
           a->context_parallel == b->context_parallel &&
           strcmp(a->context_parallel_algo, b->context_parallel_algo) == 0 &&
           a->ulysses_degree_in_cp == b->ulysses_degree_in_cp && a->context_parallel_zigzag == b->context_parallel_zigzag &&
           a->use_seq_parallel == b->use_seq_parallel &&
           a->vocab_emb_dp == b->vocab_emb_dp && a->gradients_mean == b->gradients_mean &&
           a->enable_parallel_optimizer == b->enable_parallel_optimizer && a->optimizer_level == b->optimizer_level &&
           a->enable_alltoall == b->enable_alltoall && a->learning_rate == b->learning_rate && a->beta1 == b->beta1 &&
           a->beta2 == b->beta2 && a->eps == b->eps && a->weight_decay == b->weight_decay &&
           strcmp(a->lr_schedule, b->lr_schedule) == 0 && a->warmup_steps == b->warmup_steps &&
           a->total_steps == b->total_steps && a->min_lr == b->min_lr && a->batch_size == b->batch_size &&
           a->max_grad_norm == b->max_grad_norm && a->seed == b->seed && a->parallel_mode == b->parallel_mode &&
           a->full_batch == b->full_batch && a->parameter_broadcast == b->parameter_broadcast &&
           a->use_ring_attention == b->use_ring_attention && a->fine_grain_interleave == b->fine_grain_interleave &&
           a->pp_interleave_num == b->pp_interleave_num && a->offset == b->offset &&
           a->pipeline_interleave == b->pipeline_interleave &&
           a->micro_batch_interleave_num == b->micro_batch_interleave_num &&
           !memcmp(&a->recompute, &b->recompute, sizeof a->recompute) &&
           !memcmp(&a->select_recompute, &b->select_recompute, sizeof a->select_recompute) &&
           a->gradient_accumulation_steps == b->gradient_accumulation_steps && a->multiple_of == b->multiple_of &&
           a->ffn_dim_multiplier == b->ffn_dim_multiplier && a->optimizer_type == b->optimizer_type &&
           a->warmup_ratio == b->warmup_ratio && a->global_batch_size == b->global_batch_size &&
           a->use_clip_grad == b->use_clip_grad && a->wrapper_max_grad_norm == b->wrapper_max_grad_norm &&
           strcmp(a->load_checkpoint, b->load_checkpoint) == 0 && a->resume_training == b->resume_training;
}

/* ---- defaults -------------------------------------------------------------- */

static void test_defaults(void) {
    llama_config c;
    char err[256];
    llama_config_defaults(&c);
    CHECK_INT(c.vocab_size, 256);
    CHECK_INT(c.hidden_size, 64);
    CHECK_INT(c.num_layers, 2);
    CHECK_INT(c.num_heads, 4);
    CHECK_INT(c.n_kv_heads, 0);        /* MindFormers' None: num_heads */
    CHECK_INT(c.intermediate_size, 0); /* MindFormers' rule: 256 for hidden 64 */
    CHECK_INT(c.multiple_of, 256);
    CHECK_FLT(c.ffn_dim_multiplier, 0.0f);
    CHECK_INT(llama_config_ffn_width(&c), 256);
    CHECK_INT(c.seq_length, 64);
    CHECK_FLT(c.rms_norm_eps, 1e-5f);
    CHECK_FLT(c.theta, 10000.0f);
    CHECK_FLT(c.initializer_range, 0.02f);
    CHECK_INT(c.qkv_has_bias, 0);
    CHECK_INT(c.data_parallel, 1);
    CHECK_INT(c.model_parallel, 1);
    CHECK_INT(c.pipeline_stage, 1);
    CHECK_INT(c.micro_batch_num, 1);
    CHECK_INT(c.context_parallel, 1);
    CHECK_STR(c.context_parallel_algo, "colossalai_cp");
    CHECK_INT(c.ulysses_degree_in_cp, 1);
    CHECK_INT(c.use_seq_parallel, 0);
    CHECK_INT(c.vocab_emb_dp, 1);
    CHECK_INT(c.gradients_mean, 0);
    CHECK_INT(c.enable_parallel_optimizer, 0);
    CHECK_INT(c.optimizer_level, 1);
    CHECK_INT(c.enable_alltoall, 0);
    CHECK_FLT(c.learning_rate, 1e-3f);
    CHECK_FLT(c.beta1, 0.9f);
    CHECK_FLT(c.beta2, 0.999f);
    CHECK_FLT(c.eps, 1e-8f);
    CHECK_FLT(c.weight_decay, 0.0f);
    CHECK_INT(c.optimizer_type, LLAMA_OPTIMIZER_ADAMW);
    CHECK_FLT(c.warmup_ratio, 0.0f);
    CHECK_INT(c.global_batch_size, 0);
    CHECK_INT(c.use_clip_grad, 0);
    CHECK_FLT(c.wrapper_max_grad_norm, 1.0f);
    CHECK_FLT(llama_config_clip_norm(&c), 0.0f);
    CHECK_STR(c.load_checkpoint, "");
    CHECK_INT(c.resume_training, 0);
    CHECK_STR(c.lr_schedule, "constant");
    CHECK_INT(c.warmup_steps, 0);
    CHECK_INT(c.total_steps, 0);
    CHECK_FLT(c.min_lr, 0.0f);
    CHECK_INT(c.batch_size, 8);
    CHECK_FLT(c.max_grad_norm, 0.0f);
    CHECK(c.seed == 1234);
    CHECK_INT(c.parallel_mode, LLAMA_PARALLEL_MODE_SEMI_AUTO);
    CHECK_INT(c.parallel_mode, 1); /* MindFormers' integer for semi_auto_parallel */
    CHECK_INT(c.full_batch, 1);
    CHECK_INT(c.parameter_broadcast, 0);
    CHECK_INT(c.use_ring_attention, 0);
    CHECK_INT(c.fine_grain_interleave, 1);
    CHECK_INT(c.pp_interleave_num, 1);
    CHECK_INT(c.offset, 0);
    CHECK_INT(c.pipeline_interleave, 0);
    CHECK_INT(c.micro_batch_interleave_num, 1);
    CHECK_INT(c.recompute.all + c.recompute.num, 0);
    CHECK_INT(c.select_recompute.all + c.select_recompute.num, 0);
    CHECK_INT(c.gradient_accumulation_steps, 1);
    CHECK_INT(llama_config_global_batch(&c), 8);
    CHECK_MSG(llama_config_validate(&c, err, sizeof err) == 0, "%s", err);

    /* loading nothing is the defaults, with the derived kv heads and FFN width stored */
    llama_config d;
    CHECK_MSG(load_text(NULL, NULL, 0, &d) == 0, "%s", err_);
    CHECK_INT(d.n_kv_heads, 4);
    CHECK_INT(d.intermediate_size, 256);
    d.n_kv_heads = 0, d.intermediate_size = 0;
    CHECK(same_config(&c, &d));

    /* every default in the table (also those of ignored keys) parses with its own rules */
    for (int i = 0; i < LLAMA__NUM_KEYS; i++) {
        const llama__key *k = &llama__keys[i];
        if (k->type == LLAMA__T_ALIAS) {
            CHECK_MSG(k->def == NULL && llama__find(k->target, strlen(k->target)) != NULL, "alias %s", k->path);
            continue;
        }
        char why[256];
        llama_config scratch;
        llama_config_defaults(&scratch);
        CHECK_MSG(k->def && llama__parse_value(k, k->def, &scratch, why, sizeof why) == 0, "default of %s", k->path);
    }
}

/* ---- the ready configs ----------------------------------------------------- */

static void test_ready_configs(void) {
    DIR *d = opendir("examples/configs");
    CHECK_MSG(d != NULL, "run from the repository root: examples/configs not found");
    if (!d) return;
    int count = 0;
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        size_t n = strlen(e->d_name);
        if (n < 6 || strcmp(e->d_name + n - 5, ".yaml") != 0) continue;
        char path[512];
        snprintf(path, sizeof path, "examples/configs/%s", e->d_name);
        llama_config c;
        FILE *w = tmpfile();
        char err[512] = "";
        int rc = llama_config_load(path, NULL, 0, &c, w, err, sizeof err);
        char warn[2048] = "";
        if (w) {
            slurp(w, warn, sizeof warn);
            fclose(w);
        }
        CHECK_MSG(rc == 0, "%s: %s", path, err);
        CHECK_MSG(warn[0] == 0, "%s warns: %s", path, warn);
        count++;
    }
    closedir(d);
    CHECK_MSG(count >= 4, "only %d configs", count);

    llama_config c, def;
    char err[512];
    llama_config_defaults(&def);
    CHECK_MSG(llama_config_load("examples/configs/tiny.yaml", NULL, 0, &c, NULL, err, sizeof err) == 0, "%s", err);
    /* tiny.yaml: the tests' model, written out in full (the global batch as such) */
    CHECK_INT(c.n_kv_heads, 2);
    CHECK_INT(c.intermediate_size, 172);
    CHECK_INT(c.global_batch_size, 8);
    CHECK_INT(llama_config_global_batch(&c), 8);
    CHECK_INT(c.gradients_mean, 1);
    CHECK_FLT(c.weight_decay, 0.1f);
    CHECK_FLT(c.beta2, 0.95f);
    CHECK_INT(c.hidden_size, def.hidden_size);

    CHECK_MSG(llama_config_load("examples/configs/demo.yaml", NULL, 0, &c, NULL, err, sizeof err) == 0, "%s", err);
    CHECK_INT(c.hidden_size, 128);
    CHECK_INT(c.num_layers, 4);
    CHECK_INT(c.num_heads, 4);
    CHECK_INT(c.n_kv_heads, 2);
    CHECK_INT(c.intermediate_size, 344);
    CHECK_INT(c.seq_length, 128);
    CHECK_INT(c.batch_size, 8);
    CHECK_INT(llama_config_global_batch(&c), 16); /* 8 per data-parallel rank x 2 */
    CHECK_FLT(c.learning_rate, 3e-3f);
    CHECK_STR(c.lr_schedule, "cosine");
    CHECK_INT(c.warmup_steps, 10);
    CHECK_FLT(c.max_grad_norm, 1.0f);
    CHECK_INT(c.data_parallel, 2);
    CHECK_INT(c.model_parallel, 2);
    CHECK_INT(c.use_seq_parallel, 1);
    CHECK_INT(c.enable_parallel_optimizer, 1);

    CHECK_MSG(llama_config_load("examples/configs/bench.yaml", NULL, 0, &c, NULL, err, sizeof err) == 0, "%s", err);
    CHECK_INT(c.hidden_size, 256);
    CHECK_INT(c.num_layers, 4);
    CHECK_INT(c.num_heads, 8);
    CHECK_INT(c.n_kv_heads, 4);
    CHECK_INT(c.intermediate_size, 688);
    CHECK_INT(c.seq_length, 256);
    CHECK_INT(c.batch_size, 8);
    CHECK_INT(c.data_parallel, 1);

    CHECK_MSG(llama_config_load("examples/configs/gqa_ref.yaml", NULL, 0, &c, NULL, err, sizeof err) == 0, "%s", err);
    CHECK_INT(c.hidden_size, 32);
    CHECK_INT(c.num_layers, 2);
    CHECK_INT(c.num_heads, 4);
    CHECK_INT(c.n_kv_heads, 2);
    CHECK_INT(c.intermediate_size, 88);
    CHECK_INT(c.seq_length, 16);
    CHECK_INT(llama_config_global_batch(&c), 4);
    CHECK_FLT(c.learning_rate, 1e-3f);
    CHECK_FLT(c.beta1, 0.9f);
    CHECK_FLT(c.beta2, 0.95f);
    CHECK_FLT(c.eps, 1e-8f);
    CHECK_FLT(c.weight_decay, 0.1f);
    CHECK_FLT(c.max_grad_norm, 1.0f);
}

/* ---- every key, through --set and YAML ---------------------------------------- */

/* K_CHANGES: accepted, not stored, and (for a value other than the default)
   a warning that training differs from MindFormers'; K_PAIR: optimizer.betas,
   two floats at offset (want, want2). */
enum { K_INT, K_FLT, K_BOOL, K_U64, K_STR, K_IGNORED, K_CHANGES, K_PAIR };
typedef struct {
    const char *path;
    const char *text;   /* a value other than the default */
    int kind;
    size_t offset;      /* written here, not taken from config.h's table */
    double want;        /* numeric result */
    const char *want_s; /* K_STR result */
} key_case;

#define AT(f) offsetof(llama_config, f)
static const key_case key_cases[] = {
    {"model.arch.type", "LlamaForCausalLM", K_IGNORED, 0, 0, NULL},
    {"model.model_config.type", "LlamaConfig", K_IGNORED, 0, 0, NULL},
    {"model.model_config.vocab_size", "300", K_INT, AT(vocab_size), 300, NULL},
    {"model.model_config.hidden_size", "96", K_INT, AT(hidden_size), 96, NULL},
    {"model.model_config.num_layers", "3", K_INT, AT(num_layers), 3, NULL},
    {"model.model_config.num_heads", "8", K_INT, AT(num_heads), 8, NULL},
    {"model.model_config.n_kv_heads", "4", K_INT, AT(n_kv_heads), 4, NULL},
    {"model.model_config.intermediate_size", "100", K_INT, AT(intermediate_size), 100, NULL},
    {"model.model_config.multiple_of", "128", K_INT, AT(multiple_of), 128, NULL},
    {"model.model_config.ffn_dim_multiplier", "1.3", K_FLT, AT(ffn_dim_multiplier), 1.3, NULL},
    {"model.model_config.compute_dtype", "bfloat16", K_INT, AT(compute_dtype), 1, NULL},
    {"model.model_config.layernorm_compute_type", "float16", K_CHANGES, 0, 0, NULL},
    {"model.model_config.softmax_compute_type", "float16", K_CHANGES, 0, 0, NULL},
    {"model.model_config.rotary_dtype", "bfloat16", K_CHANGES, 0, 0, NULL},
    {"model.model_config.param_init_type", "float16", K_CHANGES, 0, 0, NULL},
    {"model.model_config.embedding_init_type", "bfloat16", K_CHANGES, 0, 0, NULL},
    {"model.model_config.scaling_factor", "2.0", K_CHANGES, 0, 0, NULL},
    {"model.model_config.extend_method", "NTK", K_CHANGES, 0, 0, NULL},
    {"model.model_config.tie_word_embeddings", "True", K_CHANGES, 0, 0, NULL},
    {"model.model_config.checkpoint_name_or_path", "llama2_7b", K_CHANGES, 0, 0, NULL},
    {"model.model_config.use_flash_attention", "True", K_IGNORED, 0, 0, NULL},
    {"model.model_config.seq_length", "32", K_INT, AT(seq_length), 32, NULL},
    {"model.model_config.rms_norm_eps", "1e-6", K_FLT, AT(rms_norm_eps), 1e-6, NULL},
    {"model.model_config.theta", "500000.0", K_FLT, AT(theta), 500000.0, NULL},
    {"model.model_config.initializer_range", "0.01", K_FLT, AT(initializer_range), 0.01, NULL},
    {"model.model_config.qkv_has_bias", "True", K_BOOL, AT(qkv_has_bias), 1, NULL},
    {"model.model_config.use_attn_mask_compression", "True", K_IGNORED, 0, 0, NULL},
    {"model.model_config.use_ring_attention", "true", K_BOOL, AT(use_ring_attention), 1, NULL},
    {"model.model_config.fine_grain_interleave", "2", K_INT, AT(fine_grain_interleave), 2, NULL},
    {"model.model_config.pp_interleave_num", "2", K_INT, AT(pp_interleave_num), 2, NULL},
    {"model.model_config.offset", "-1", K_INT, AT(offset), -1, NULL},
    {"parallel_config.data_parallel", "2", K_INT, AT(data_parallel), 2, NULL},
    {"parallel_config.model_parallel", "2", K_INT, AT(model_parallel), 2, NULL},
    {"parallel_config.pipeline_stage", "3", K_INT, AT(pipeline_stage), 3, NULL},
    {"parallel_config.micro_batch_num", "4", K_INT, AT(micro_batch_num), 4, NULL},
    {"parallel_config.context_parallel", "2", K_INT, AT(context_parallel), 2, NULL},
    {"parallel_config.context_parallel_algo", "ulysses_cp", K_STR, AT(context_parallel_algo), 0, "ulysses_cp"},
    {"parallel_config.ulysses_degree_in_cp", "2", K_INT, AT(ulysses_degree_in_cp), 2, NULL},
    {"parallel_config.context_parallel_zigzag", "false", K_BOOL, AT(context_parallel_zigzag), 0, NULL},
    {"parallel_config.use_seq_parallel", "yes", K_BOOL, AT(use_seq_parallel), 1, NULL},
    {"parallel_config.vocab_emb_dp", "False", K_BOOL, AT(vocab_emb_dp), 0, NULL},
    {"parallel_config.gradient_aggregation_group", "4", K_IGNORED, 0, 0, NULL},
    {"parallel_config.use_ring_attention", "on", K_BOOL, AT(use_ring_attention), 1, NULL},
    {"parallel_config.use_attn_mask_compression", "False", K_IGNORED, 0, 0, NULL},
    {"parallel_config.fine_grain_interleave", "4", K_INT, AT(fine_grain_interleave), 4, NULL},
    {"parallel_config.micro_batch_interleave_num", "3", K_INT, AT(micro_batch_interleave_num), 3, NULL},
    {"parallel.parallel_mode", "data_parallel", K_INT, AT(parallel_mode), 0, NULL},
    {"parallel.full_batch", "false", K_BOOL, AT(full_batch), 0, NULL},
    {"parallel.parameter_broadcast", "True", K_BOOL, AT(parameter_broadcast), 1, NULL},
    {"parallel.gradients_mean", "on", K_BOOL, AT(gradients_mean), 1, NULL},
    {"parallel.enable_parallel_optimizer", "true", K_BOOL, AT(enable_parallel_optimizer), 1, NULL},
    {"parallel.enable_alltoall", "True", K_BOOL, AT(enable_alltoall), 1, NULL},
    {"parallel.parallel_optimizer_config.optimizer_level", "level2", K_INT, AT(optimizer_level), 2, NULL},
    {"parallel.parallel_optimizer_config.parallel_optimizer_threshold", "64", K_IGNORED, 0, 0, NULL},
    {"parallel.parallel_optimizer_config.gradient_accumulation_shard", "True", K_IGNORED, 0, 0, NULL},
    {"parallel.pipeline_config.pipeline_interleave", "true", K_BOOL, AT(pipeline_interleave), 1, NULL},
    {"parallel.pipeline_config.pipeline_scheduler", "gpipe", K_STR, AT(pipeline_scheduler), 0, "gpipe"},
    {"parallel.search_mode", "sharding_propagation", K_STR, AT(search_mode), 0, "sharding_propagation"},
    {"parallel.strategy_ckpt_save_file", "./strategy/ckpt_strategy.ckpt", K_IGNORED, 0, 0, NULL},
    {"recompute_config.recompute", "True", K_BOOL, AT(recompute), 1, NULL},
    {"recompute_config.select_recompute", "yes", K_BOOL, AT(select_recompute), 1, NULL},
    {"recompute_config.select_comm_recompute", "[8, 8, 10]", K_IGNORED, 0, 0, NULL},
    {"recompute_config.parallel_optimizer_comm_recompute", "True", K_IGNORED, 0, 0, NULL},
    {"recompute_config.mp_comm_recompute", "False", K_IGNORED, 0, 0, NULL},
    {"recompute_config.recompute_slice_activation", "True", K_IGNORED, 0, 0, NULL},
    {"optimizer.type", "FP32StateAdamWeightDecay", K_INT, AT(optimizer_type), 1, NULL},
    {"optimizer.betas", "[0.8, 0.9]", K_PAIR, AT(beta1), 0.8, NULL},
    {"optimizer.learning_rate", "3e-4", K_FLT, AT(learning_rate), 3e-4, NULL},
    {"optimizer.beta1", "0.8", K_FLT, AT(beta1), 0.8, NULL},
    {"optimizer.beta2", "0.98", K_FLT, AT(beta2), 0.98, NULL},
    {"optimizer.eps", "1.e-6", K_FLT, AT(eps), 1e-6, NULL},
    {"optimizer.weight_decay", "0.05", K_FLT, AT(weight_decay), 0.05, NULL},
    {"lr_schedule.type", "CosineWithWarmUpLR", K_STR, AT(lr_schedule), 0, "cosine"},
    {"lr_schedule.learning_rate", "2e-3", K_FLT, AT(learning_rate), 2e-3, NULL},
    {"lr_schedule.warmup_steps", "7", K_INT, AT(warmup_steps), 7, NULL},
    {"lr_schedule.warmup_ratio", "0.03", K_FLT, AT(warmup_ratio), 0.03, NULL},
    {"lr_schedule.total_steps", "100", K_INT, AT(total_steps), 100, NULL},
    {"lr_schedule.min_lr", "1e-5", K_FLT, AT(min_lr), 1e-5, NULL},
    {"lr_schedule.lr_end", "2e-5", K_FLT, AT(min_lr), 2e-5, NULL},
    {"runner_config.batch_size", "32", K_INT, AT(batch_size), 32, NULL},
    {"runner_config.global_batch_size", "64", K_INT, AT(global_batch_size), 64, NULL},
    {"runner_config.gradient_accumulation_steps", "8", K_INT, AT(gradient_accumulation_steps), 8, NULL},
    {"runner_config.epochs", "3", K_IGNORED, 0, 0, NULL},
    {"runner_config.sink_mode", "True", K_IGNORED, 0, 0, NULL},
    {"runner_config.sink_size", "2", K_IGNORED, 0, 0, NULL},
    {"runner_wrapper.type", "MFTrainOneStepCell", K_IGNORED, 0, 0, NULL},
    {"runner_wrapper.use_clip_grad", "True", K_BOOL, AT(use_clip_grad), 1, NULL},
    {"runner_wrapper.max_grad_norm", "0.5", K_FLT, AT(wrapper_max_grad_norm), 0.5, NULL},
    {"runner_wrapper.scale_sense", "1024", K_FLT, AT(scale_sense_number), 1024, NULL},
    {"runner_wrapper.scale_sense.type", "DynamicLossScaleUpdateCell", K_INT, AT(scale_sense), 1, NULL},
    {"runner_wrapper.scale_sense.loss_scale_value", "4096", K_FLT, AT(loss_scale_value), 4096, NULL},
    {"runner_wrapper.scale_sense.scale_factor", "4", K_FLT, AT(scale_factor), 4, NULL},
    {"runner_wrapper.scale_sense.scale_window", "20", K_INT, AT(scale_window), 20, NULL},
    {"max_grad_norm", "1.0", K_FLT, AT(max_grad_norm), 1.0, NULL},
    {"load_checkpoint", "/ckpt/llama.safetensors", K_STR, AT(load_checkpoint), 0, "/ckpt/llama.safetensors"},
    {"resume_training", "True", K_BOOL, AT(resume_training), 1, NULL},
    {"src_strategy_path_or_dir", "./strategy", K_IGNORED, 0, 0, NULL},
    {"auto_trans_ckpt", "True", K_IGNORED, 0, 0, NULL},
    {"only_save_strategy", "True", K_CHANGES, 0, 0, NULL},
    {"output_dir", "./out", K_IGNORED, 0, 0, NULL},
    {"lr_scale", "True", K_CHANGES, 0, 0, NULL},
    {"lr_scale_factor", "128", K_IGNORED, 0, 0, NULL},
    {"layer_scale", "True", K_CHANGES, 0, 0, NULL},
    {"layer_decay", "0.5", K_IGNORED, 0, 0, NULL},
    {"seed", "18446744073709551615", K_U64, AT(seed), 0, NULL},
    {"micro_batch_interleave_num", "2", K_INT, AT(micro_batch_interleave_num), 2, NULL},
    {"run_mode", "finetune", K_IGNORED, 0, 0, NULL},
    {"use_parallel", "True", K_IGNORED, 0, 0, NULL},
};
#define NUM_KEY_CASES ((int)(sizeof key_cases / sizeof key_cases[0]))

/* Did key case kc land in c (and nothing else change)? */
static void check_key_case(const key_case *kc, const llama_config *c, const char *how) {
    llama_config def;
    llama_config_defaults(&def);
    if (kc->kind == K_IGNORED || kc->kind == K_CHANGES) {
        CHECK_MSG(same_config(c, &def), "%s %s changed the config", how, kc->path);
        return;
    }
    const char *p = (const char *)c + kc->offset;
    llama_config expect = def; /* the default with only this field replaced */
    char *q = (char *)&expect + kc->offset;
    switch (kc->kind) {
    case K_INT:
    case K_BOOL:
        CHECK_MSG(*(const int *)p == (int)kc->want, "%s %s: got %d want %g", how, kc->path, *(const int *)p, kc->want);
        *(int *)q = (int)kc->want;
        break;
    case K_FLT:
        CHECK_MSG(*(const float *)p == (float)kc->want, "%s %s: got %g want %g", how, kc->path,
                  (double)*(const float *)p, kc->want);
        *(float *)q = (float)kc->want;
        break;
    case K_U64:
        CHECK_MSG(*(const uint64_t *)p == UINT64_MAX, "%s %s", how, kc->path);
        *(uint64_t *)q = UINT64_MAX;
        break;
    case K_STR:
        CHECK_MSG(strcmp(p, kc->want_s) == 0, "%s %s: got %s want %s", how, kc->path, p, kc->want_s);
        strcpy(q, kc->want_s);
        break;
    case K_PAIR: /* [0.8, 0.9]: beta1 and the float after it */
        CHECK_MSG(((const float *)p)[0] == 0.8f && ((const float *)p)[1] == 0.9f, "%s %s: got [%g, %g]", how, kc->path,
                  (double)((const float *)p)[0], (double)((const float *)p)[1]);
        ((float *)q)[0] = 0.8f, ((float *)q)[1] = 0.9f;
        break;
    }
    CHECK_MSG(same_config(c, &expect), "%s %s changed other fields", how, kc->path);
}

static void test_every_key(void) {
    /* the test's list and the table name the same keys */
    for (int i = 0; i < LLAMA__NUM_KEYS; i++) {
        int found = 0;
        for (int j = 0; j < NUM_KEY_CASES; j++) found += strcmp(key_cases[j].path, llama__keys[i].path) == 0;
        CHECK_MSG(found == 1, "table key %s is covered %d times by the test", llama__keys[i].path, found);
    }
    CHECK_INT(NUM_KEY_CASES, LLAMA__NUM_KEYS);

    /* Each key through --set and through a nested YAML file. The loader's
       inner functions are used so that one key can be set without the
       cross-key validation (model_parallel = 2 is parsed fine, then rejected
       by validate, which has its own tests below). */
    for (int j = 0; j < NUM_KEY_CASES; j++) {
        const key_case *kc = &key_cases[j];
        char set[256], err[512] = "", yaml[512];
        llama_config c;

        llama_config_defaults(&c);
        snprintf(set, sizeof set, "%s=%s", kc->path, kc->text);
        llama__report *r = (llama__report *)calloc(1, sizeof *r);
        if (!r) continue;
        r->err = err, r->errsize = sizeof err;
        llama__apply_set(set, 0, &c, r);
        CHECK_MSG(r->errors == 0, "--set %s: %s", set, err);
        check_key_case(kc, &c, "--set");

        llama_config_defaults(&c);
        nested_yaml(kc->path, kc->text, yaml, sizeof yaml);
        const char *path = write_file("key.yaml", yaml);
        FILE *w = tmpfile();
        memset(r, 0, sizeof *r);
        r->err = err, r->errsize = sizeof err, r->warn = w, r->file = path;
        CHECK_MSG(llama__load_file(path, &c, r) == 0 && r->errors == 0, "yaml %s: %s", kc->path, err);
        free(r);
        char warn[1024] = "";
        if (w) {
            slurp(w, warn, sizeof warn);
            fclose(w);
        }
        char at[16];
        int depth = 1;
        for (const char *d = kc->path; (d = strchr(d, '.')) != NULL; d++) depth++;
        snprintf(at, sizeof at, ":%d:", depth); /* nested_yaml puts the value on the line after its sections */
        if (kc->kind == K_CHANGES)
            CHECK_MSG(strstr(warn, "changes training") && strstr(warn, kc->path) && strstr(warn, at),
                      "yaml %s: no located 'changes training' warning: %s", kc->path, warn);
        else
            CHECK_MSG(warn[0] == 0, "yaml %s warns: %s", kc->path, warn);
        check_key_case(kc, &c, "yaml");
    }

    /* the public path: all valid ones at once */
    const char *sets[] = {"model.model_config.hidden_size=96", "model.model_config.num_heads=8",
                          "model.model_config.n_kv_heads=0", "parallel_config.data_parallel=2",
                          "parallel_config.micro_batch_num=2", "runner_config.batch_size=12",
                          "lr_schedule.type=cosine", "lr_schedule.lr_end=1e-4", "seed=7"};
    llama_config c;
    CHECK_MSG(load_text(NULL, sets, 9, &c) == 0, "%s", err_);
    CHECK_INT(c.hidden_size, 96);
    CHECK_INT(c.n_kv_heads, 8); /* 0 = num_heads, resolved by load */
    CHECK_INT(c.batch_size, 12);
    CHECK_STR(c.lr_schedule, "cosine");
    CHECK_FLT(c.min_lr, 1e-4f);
    CHECK(c.seed == 7);

    /* spellings */
    static const char *const trues[] = {"true", "True", "TRUE", "yes", "Yes", "YES", "on", "On", "ON", "1"};
    static const char *const falses[] = {"false", "False", "FALSE", "no", "No", "NO", "off", "Off", "OFF", "0"};
    for (int i = 0; i < 10; i++) {
        char set[128];
        snprintf(set, sizeof set, "parallel.enable_alltoall=%s", trues[i]);
        CHECK_MSG(load_set(set, &c) == 0 && c.enable_alltoall == 1, "%s: %s", set, err_);
        snprintf(set, sizeof set, "parallel_config.vocab_emb_dp=%s", falses[i]);
        CHECK_MSG(load_set(set, &c) == 0 && c.vocab_emb_dp == 0, "%s: %s", set, err_);
    }
    CHECK(load_set("parallel.parallel_optimizer_config.optimizer_level=1", &c) == 0 && c.optimizer_level == 1);
    CHECK(load_set("parallel.parallel_optimizer_config.optimizer_level=2", &c) == 0 && c.optimizer_level == 2);
    CHECK(load_set("lr_schedule.type=ConstantWarmUpLR", &c) == 0 && strcmp(c.lr_schedule, "constant") == 0);
    CHECK(load_set("parallel_config.context_parallel_algo=hybrid_cp", &c) == 0 &&
          strcmp(c.context_parallel_algo, "hybrid_cp") == 0);
    /* MindFormers' documented spelling hybird_cp is hybrid_cp */
    CHECK_MSG(load_set("parallel_config.context_parallel_algo=hybird_cp", &c) == 0, "%s", err_);
    CHECK_STR(c.context_parallel_algo, "hybrid_cp");
    CHECK_MSG(load_text("parallel_config:\n  context_parallel_algo: hybird_cp\n", NULL, 0, &c) == 0, "%s", err_);
    CHECK_STR(c.context_parallel_algo, "hybrid_cp");
    static const char *const adams[] = {"AdamW", "adamw", "AdamWeightDecay", "FusedAdamWeightDecay"};
    for (int i = 0; i < 4; i++) {
        char set[128];
        snprintf(set, sizeof set, "optimizer.type=%s", adams[i]);
        CHECK_MSG(load_set(set, &c) == 0, "%s: %s", set, err_);
    }
    CHECK(load_set("parallel.parallel_mode=1", &c) == 0);
    CHECK(load_set("parallel.parallel_mode=semi_auto_parallel", &c) == 0);
    /* MindFormers' total_steps: -1 means the whole run, stored as 0 */
    const char *tot[] = {"lr_schedule.total_steps=50", "lr_schedule.total_steps=-1"};
    CHECK(load_text(NULL, tot, 2, &c) == 0 && c.total_steps == 0);
    /* a later --set wins over an earlier one and over the file */
    const char *twice[] = {"seed=5", "seed=6"};
    CHECK(load_text("seed: 4\n", twice, 2, &c) == 0 && c.seed == 6);
    /* the value may contain '=' (and is then not a number) */
    CHECK(load_set("seed=1=2", &c) == -1);
    CHECK_HAS(err_, "seed");
    /* flat dotted keys and quoted values in YAML */
    CHECK_MSG(load_text("model.model_config.hidden_size: 32\nseed: \"42\"\noptimizer: {learning_rate: 2.5e-3}\n",
                        NULL, 0, &c) == 0, "%s", err_);
    CHECK_INT(c.hidden_size, 32);
    CHECK(c.seed == 42);
    CHECK_FLT(c.learning_rate, 2.5e-3f);
}

/* ---- YAML errors ---------------------------------------------------------------- */

static void test_malformed(void) {
    llama_config c;
    static const char *const bad[] = {
        "a: b: c\n",
        "model:\n  model_config: {hidden_size: 32\n",
        "seed: \"unterminated\n",
        "model:\n\thidden_size: 3\n",
        "{seed: 1\n",
        "seed: 1\n- 2\n",
        "seed: \xff\xfe bad utf8\n",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        CHECK_MSG(load_text(bad[i], NULL, 0, &c) == -1, "case %zu loaded", i);
        CHECK_HAS(err_, "malformed YAML");
        CHECK_HAS(err_, "cfg.yaml");
    }
    /* the line of the problem is named */
    CHECK(load_text("seed: 1\nmax_grad_norm: 1\nmodel: a: b\n", NULL, 0, &c) == -1);
    CHECK_HAS(err_, "cfg.yaml:3:");

    /* structural errors */
    CHECK(load_text("- 1\n- 2\n", NULL, 0, &c) == -1);
    CHECK_HAS(err_, "top level");
    CHECK(load_text("just a scalar\n", NULL, 0, &c) == -1);
    CHECK_HAS(err_, "top level");
    CHECK(load_text("seed: 1\n---\nseed: 2\n", NULL, 0, &c) == -1);
    CHECK_HAS(err_, "one YAML document");
    CHECK(load_text("? [a, b]\n: 1\n", NULL, 0, &c) == -1);
    CHECK_HAS(err_, "key");
    CHECK(load_text("anchor: &x 5\nseed: *x\n", NULL, 0, &c) == -1);
    CHECK_HAS(err_, "seed");
    CHECK_HAS(err_, "alias");

    /* empty files and empty documents are the defaults */
    llama_config def;
    llama_config_defaults(&def);
    def.n_kv_heads = def.num_heads, def.intermediate_size = llama_config_ffn_width(&def); /* what a load derives */
    static const char *const empty[] = {"", "# only a comment\n", "---\n", "~\n", "\n\n"};
    for (size_t i = 0; i < sizeof empty / sizeof empty[0]; i++) {
        CHECK_MSG(load_text(empty[i], NULL, 0, &c) == 0, "empty case %zu: %s", i, err_);
        CHECK(same_config(&c, &def));
        CHECK(warn_[0] == 0);
    }
    /* an empty section is fine too */
    CHECK_MSG(load_text("parallel:\nseed: 3\n", NULL, 0, &c) == 0 && c.seed == 3, "%s", err_);

    /* missing, unreadable, too large */
    char err[512];
    char missing[160];
    snprintf(missing, sizeof missing, "%s/no-such.yaml", dir_);
    CHECK(llama_config_load(missing, NULL, 0, &c, NULL, err, sizeof err) == -1);
    CHECK_HAS(err, "no-such.yaml");
    CHECK_HAS(err, "cannot open");
    CHECK(llama_config_load(dir_, NULL, 0, &c, NULL, err, sizeof err) == -1);
    CHECK_HAS(err, dir_);
    size_t big = (1u << 20) + 100;
    char *huge = (char *)malloc(big + 1);
    if (huge) {
        for (size_t i = 0; i < big; i++) huge[i] = (i % 64 == 63) ? '\n' : '#';
        huge[big] = 0;
        CHECK(load_text(huge, NULL, 0, &c) == -1);
        CHECK_HAS(err_, "larger than");
        free(huge);
    }
}

/* ---- unknown keys --------------------------------------------------------------- */

static void test_unknown_keys(void) {
    llama_config c, def;
    llama_config_defaults(&def);
    def.n_kv_heads = def.num_heads, def.intermediate_size = llama_config_ffn_width(&def);

    CHECK_MSG(load_text("seed: 1234\nmodel:\n  model_config:\n    hiden_size: 32\n", NULL, 0, &c) == 0, "%s", err_);
    CHECK(same_config(&c, &def));
    CHECK_HAS(warn_, "warning: ");
    CHECK_HAS(warn_, "cfg.yaml:4:");
    CHECK_HAS(warn_, "'model.model_config.hiden_size'");
    CHECK_HAS(warn_, "did you mean 'model.model_config.hidden_size'");

    /* a key in the wrong section: suggested by its name */
    CHECK(load_text("batch_size: 4\n", NULL, 0, &c) == 0);
    CHECK_HAS(warn_, "'batch_size'");
    CHECK_HAS(warn_, "runner_config.batch_size");
    CHECK(c.batch_size == 8);

    /* an unknown section (MindFormers has many) is one warning, its body skipped */
    CHECK_MSG(load_text("context:\n  mode: 0\n  device_target: Ascend\n  list: [1, {a: b}]\nseed: 5\n", NULL, 0, &c) == 0,
              "%s", err_);
    CHECK(c.seed == 5);
    CHECK_HAS(warn_, "'context'");
    CHECK(strstr(warn_, "device_target") == NULL);
    CHECK(load_text("callbacks:\n  - type: MFLossMonitor\n  - type: CheckpointMonitor\n", NULL, 0, &c) == 0);
    CHECK_HAS(warn_, "'callbacks'");
    /* nothing close: no suggestion */
    CHECK(load_text("zzzzqqqq: 1\n", NULL, 0, &c) == 0);
    CHECK_HAS(warn_, "'zzzzqqqq'");
    CHECK(strstr(warn_, "did you mean") == NULL);

    /* warn == NULL: still loads */
    char err[256];
    const char *path = write_file("unk.yaml", "foo: 1\n");
    CHECK(llama_config_load(path, NULL, 0, &c, NULL, err, sizeof err) == 0);

    /* on the command line it is an error */
    CHECK(load_set("model.model_config.hiden_size=32", &c) == -1);
    CHECK_HAS(err_, "model.model_config.hiden_size");
    CHECK_HAS(err_, "did you mean 'model.model_config.hidden_size'");
    CHECK(load_set("optimizer.lr=1", &c) == -1);
    CHECK_HAS(err_, "optimizer.lr");
    CHECK(load_set("model.model_config=3", &c) == -1);
    CHECK_HAS(err_, "section");
    CHECK(load_set("noequals", &c) == -1);
    CHECK_HAS(err_, "noequals");
    CHECK(load_set("=5", &c) == -1);
    CHECK_HAS(err_, "key");
}

/* ---- wrong types and ranges ------------------------------------------------------ */

typedef struct {
    const char *path, *value, *reason;
} bad_case;

static const bad_case bad_values[] = {
    {"model.model_config.num_layers", "abc", "not an integer"},
    {"model.model_config.num_layers", "1.5", "not an integer"},
    {"model.model_config.num_layers", "1e3", "not an integer"},
    {"model.model_config.num_layers", "0x10", "not an integer"},
    {"model.model_config.num_layers", "007", "leading zero"},
    {"model.model_config.num_layers", "99999999999999999999", "too large"},
    {"model.model_config.num_layers", "3000000000", "must be"},
    {"model.model_config.num_layers", "", "no value"},
    {"optimizer.learning_rate", "fast", "not a number"},
    {"optimizer.learning_rate", "1e-3x", "not a number"},
    {"optimizer.learning_rate", "nan", "finite"},
    {"optimizer.learning_rate", "inf", "finite"},
    {"optimizer.learning_rate", ".inf", "not a number"},
    {"optimizer.learning_rate", "1e39", "float"},
    {"optimizer.learning_rate", "1e-60", "too small"},
    {"optimizer.learning_rate", "0x1p3", "not a number"},
    {"parallel.enable_parallel_optimizer", "maybe", "not a boolean"},
    {"parallel.enable_parallel_optimizer", "y", "not a boolean"},
    {"parallel.enable_parallel_optimizer", "2", "not a boolean"},
    {"optimizer.type", "SGD", "not one of"},
    {"lr_schedule.type", "linear", "not one of"},
    {"parallel_config.context_parallel_algo", "ring", "not one of"},
    {"parallel.parallel_optimizer_config.optimizer_level", "level4", "not one of"},
    {"parallel.parallel_mode", "manual_parallel", "not one of"},
    {"parallel.parallel_mode", "4", "not one of"},
    {"parallel.full_batch", "sometimes", "not a boolean"},
    {"parallel.parameter_broadcast", "2", "not a boolean"},
    {"parallel.search_mode", "greedy", "not one of"},
    {"parallel_config.context_parallel_algo", "hybird", "not one of"},
    {"recompute_config.recompute", "full", "not a boolean"},
    {"model.model_config.compute_dtype", "bfloat17", "not one of float32, bfloat16, float16"},
    {"model.model_config.param_init_type", "fp16", "not one of float32, bfloat16, float16"},
    {"recompute_config.mp_comm_recompute", "maybe", "not a boolean"},
    {"model.model_config.use_attn_mask_compression", "1.0", "not a boolean"},
    {"parallel_config.use_attn_mask_compression", "yesno", "not a boolean"},
    {"parallel_config.use_ring_attention", "2", "not a boolean"},
    {"model.model_config.offset", "0.5", "not an integer"},
    {"model.arch.type", "GPT2", "not one of"},
    {"run_mode", "predict", "not one of"},
    {"seed", "-1", ">= 0"},
    {"seed", "1.5", "not an integer"},
    {"seed", "18446744073709551616", "too large"},
    {"runner_config.sink_mode", "sometimes", "not a boolean"},
};

/* Below and above the range of every numeric key (NULL: no upper bound to cross). */
static const bad_case range_cases[] = {
    {"model.model_config.vocab_size", "255", "16777217"},
    {"model.model_config.hidden_size", "0", "65537"},
    {"model.model_config.num_layers", "0", "4097"},
    {"model.model_config.num_heads", "0", "4097"},
    {"model.model_config.n_kv_heads", "-1", "4097"},
    {"model.model_config.intermediate_size", "-1", "1048577"},
    {"model.model_config.multiple_of", "0", "1048577"},
    {"model.model_config.ffn_dim_multiplier", "-1", "65"},
    {"model.model_config.scaling_factor", "-1", "1e39"},
    {"lr_schedule.warmup_ratio", "-0.1", "1.5"},
    {"runner_config.global_batch_size", "-1", "1048577"},
    {"runner_wrapper.max_grad_norm", "0", "1e39"},
    {"runner_wrapper.scale_sense", "-1", "1e39"},
    {"runner_wrapper.scale_sense.loss_scale_value", "0", "1e39"},
    {"runner_wrapper.scale_sense.scale_factor", "1", "1e39"},
    {"runner_wrapper.scale_sense.scale_window", "0", "2147483648"},
    {"optimizer.betas", "[0.9, 1.0]", "[-0.1, 0.9]"},
    {"model.model_config.seq_length", "-4", "1048577"},
    {"model.model_config.rms_norm_eps", "0", "1e39"},
    {"model.model_config.theta", "-1", "1e39"},
    {"model.model_config.initializer_range", "-0.01", "1e39"},
    {"parallel_config.data_parallel", "0", "65537"},
    {"parallel_config.model_parallel", "0", "65537"},
    {"parallel_config.pipeline_stage", "0", "65537"},
    {"parallel_config.micro_batch_num", "0", "65537"},
    {"parallel_config.context_parallel", "0", "65537"},
    {"parallel_config.ulysses_degree_in_cp", "0", "65537"},
    {"model.model_config.fine_grain_interleave", "0", "65537"},
    {"parallel_config.fine_grain_interleave", "-1", "65537"},
    {"model.model_config.pp_interleave_num", "0", "65537"},
    {"model.model_config.offset", "-4097", "4097"},
    {"micro_batch_interleave_num", "0", "65537"},
    {"parallel_config.micro_batch_interleave_num", "0", "65537"},
    {"runner_config.gradient_accumulation_steps", "0", "1048577"},
    {"optimizer.learning_rate", "-1e-3", "1e39"},
    {"optimizer.beta1", "-0.1", "1"},
    {"optimizer.beta2", "-1", "1.5"},
    {"optimizer.eps", "0", "1e39"},
    {"optimizer.weight_decay", "-0.1", "1e39"},
    {"lr_schedule.learning_rate", "-1", "1e39"},
    {"lr_schedule.warmup_steps", "-1", "2147483648"},
    {"lr_schedule.total_steps", "-2", "2147483648"},
    {"lr_schedule.min_lr", "-1e-5", "1e39"},
    {"lr_schedule.lr_end", "-1", "1e39"},
    {"runner_config.batch_size", "0", "1048577"},
    {"runner_config.epochs", "0", "2147483648"},
    {"runner_config.sink_size", "-2", "2147483648"},
    {"max_grad_norm", "-1", "1e39"},
    {"seed", "-5", "18446744073709551616"},
};

static void expect_bad(const char *path, const char *value, const char *reason) {
    llama_config c;
    memset(&c, 0x5a, sizeof c);
    llama_config before = c;
    char set[256], yaml[512];
    snprintf(set, sizeof set, "%s=%s", path, value);
    CHECK_MSG(load_set(set, &c) == -1, "--set %s loaded", set);
    CHECK_HAS(err_, "--set");
    CHECK_HAS(err_, path);
    if (reason) CHECK_HAS(err_, reason);
    CHECK_MSG(memcmp(&c, &before, sizeof c) == 0, "--set %s changed cfg on failure", set);

    /* the same in a file; the empty value is a null there */
    nested_yaml(path, *value ? value : "\"\"", yaml, sizeof yaml);
    CHECK_MSG(load_text(yaml, NULL, 0, &c) == -1, "yaml %s: %s loaded", path, value);
    CHECK_HAS(err_, "cfg.yaml:");
    CHECK_HAS(err_, path);
    if (reason) CHECK_HAS(err_, reason);
    CHECK_MSG(memcmp(&c, &before, sizeof c) == 0, "yaml %s changed cfg on failure", path);
}

static void test_types_and_ranges(void) {
    for (size_t i = 0; i < sizeof bad_values / sizeof bad_values[0]; i++)
        expect_bad(bad_values[i].path, bad_values[i].value, bad_values[i].reason);
    for (size_t i = 0; i < sizeof range_cases / sizeof range_cases[0]; i++) {
        expect_bad(range_cases[i].path, range_cases[i].value, NULL);
        if (range_cases[i].reason) expect_bad(range_cases[i].path, range_cases[i].reason, NULL);
    }
    /* every numeric key of the table has a range case */
    for (int i = 0; i < LLAMA__NUM_KEYS; i++) {
        const llama__key *k = &llama__keys[i];
        const llama__key *t = llama__resolve_alias(k);
        if (t->type != LLAMA__T_INT && t->type != LLAMA__T_FLOAT && t->type != LLAMA__T_U64) continue;
        int found = 0;
        for (size_t j = 0; j < sizeof range_cases / sizeof range_cases[0]; j++)
            found |= strcmp(range_cases[j].path, k->path) == 0;
        CHECK_MSG(found, "no range case for %s", k->path);
    }
    /* YAML trims plain scalars; the command line does not */
    llama_config c;
    CHECK(load_set("model.model_config.num_layers=2 ", &c) == -1);
    CHECK_HAS(err_, "not an integer");
    CHECK(load_set("optimizer.eps= 1e-8", &c) == -1);
    CHECK_HAS(err_, "optimizer.eps");

    /* edges that are inside */
    CHECK(load_set("optimizer.beta1=0", &c) == 0 && c.beta1 == 0.0f);
    CHECK(load_set("optimizer.beta2=0.9999", &c) == 0);
    CHECK(load_set("optimizer.learning_rate=0", &c) == 0 && c.learning_rate == 0.0f);
    CHECK(load_set("model.model_config.vocab_size=256", &c) == 0);
    CHECK(load_set("seed=0", &c) == 0 && c.seed == 0);
    CHECK(load_set("seed=+9", &c) == 0 && c.seed == 9);
    CHECK(load_set("model.model_config.num_layers=+3", &c) == 0 && c.num_layers == 3);

    /* sequences and mappings where a value is expected, and the reverse */
    CHECK(load_text("seed: [1, 2]\n", NULL, 0, &c) == -1);
    CHECK_HAS(err_, "seed");
    CHECK_HAS(err_, "sequence");
    CHECK(load_text("model:\n  model_config:\n    hidden_size:\n      value: 3\n", NULL, 0, &c) == -1);
    CHECK_HAS(err_, "model.model_config.hidden_size");
    CHECK_HAS(err_, "mapping");
    CHECK_HAS(err_, "cfg.yaml:3:");
    CHECK(load_text("model: 3\n", NULL, 0, &c) == -1);
    CHECK_HAS(err_, "'model'");
    CHECK_HAS(err_, "section");
    CHECK(load_text("parallel_config: [1, 2]\n", NULL, 0, &c) == -1);
    CHECK_HAS(err_, "parallel_config");
    CHECK(load_text("seed:\n", NULL, 0, &c) == -1);
    CHECK_HAS(err_, "seed");
    CHECK_HAS(err_, "no value");
    CHECK(load_text("optimizer:\n  beta1: ~\n", NULL, 0, &c) == -1);
    CHECK_HAS(err_, "optimizer.beta1");
}

/* ---- duplicates ------------------------------------------------------------------ */

static void test_duplicates(void) {
    llama_config c;
    CHECK(load_text("seed: 1\nseed: 2\n", NULL, 0, &c) == -1);
    CHECK_HAS(err_, "duplicate");
    CHECK_HAS(err_, "'seed'");
    CHECK_HAS(err_, "cfg.yaml:2:");
    CHECK(load_text("model:\n  model_config:\n    num_layers: 2\n    num_layers: 2\n", NULL, 0, &c) == -1);
    CHECK_HAS(err_, "model.model_config.num_layers");
    CHECK(load_text("optimizer:\n  beta1: 0.9\noptimizer:\n  beta2: 0.9\n", NULL, 0, &c) == -1);
    CHECK_HAS(err_, "'optimizer'");
    CHECK(load_text("model.model_config.num_layers: 2\nmodel:\n  model_config:\n    num_layers: 3\n", NULL, 0, &c) == -1);
    CHECK_HAS(err_, "model.model_config.num_layers");
    /* duplicate unknown keys are still duplicates (a YAML error in any reader) */
    CHECK(load_text("foo: 1\nfoo: 2\n", NULL, 0, &c) == -1);
    CHECK_HAS(err_, "'foo'");

    /* an alias and its key: the same value is fine, different ones are not */
    CHECK_MSG(load_text("optimizer:\n  learning_rate: 2.0e-3\nlr_schedule:\n  learning_rate: 0.002\n", NULL, 0, &c) == 0,
              "%s", err_);
    CHECK_FLT(c.learning_rate, 2e-3f);
    CHECK(load_text("optimizer:\n  learning_rate: 1.0e-3\nlr_schedule:\n  learning_rate: 2.0e-3\n", NULL, 0, &c) == -1);
    CHECK_HAS(err_, "lr_schedule.learning_rate");
    CHECK_HAS(err_, "optimizer.learning_rate");
    CHECK_HAS(err_, "cfg.yaml:4:");
    CHECK(load_text("lr_schedule:\n  lr_end: 0\n  min_lr: 1e-5\n", NULL, 0, &c) == -1);
    CHECK_HAS(err_, "lr_schedule.min_lr");
    CHECK_HAS(err_, "lr_schedule.lr_end");
    /* on the command line a later --set simply wins */
    const char *sets[] = {"optimizer.learning_rate=1e-3", "lr_schedule.learning_rate=5e-4"};
    CHECK(load_text(NULL, sets, 2, &c) == 0 && c.learning_rate == 5e-4f);
}

/* ---- cross-key rules and unsupported switches --------------------------------------- */

static void expect_rule(const char *const *sets, int n, const char *k1, const char *k2) {
    llama_config c;
    CHECK_MSG(load_text(NULL, sets, n, &c) == -1, "%s loaded", sets[0]);
    if (k1) CHECK_HAS(err_, k1);
    if (k2) CHECK_HAS(err_, k2);
}

static void test_cross_rules(void) {
    const char *a[] = {"model.model_config.hidden_size=66"};
    expect_rule(a, 1, "model.model_config.hidden_size = 66", "model.model_config.num_heads (4)");
    const char *b[] = {"model.model_config.hidden_size=72", "model.model_config.num_heads=8"};
    expect_rule(b, 2, "model.model_config.hidden_size", "odd");
    const char *d[] = {"model.model_config.n_kv_heads=3"};
    expect_rule(d, 1, "model.model_config.n_kv_heads", "model.model_config.num_heads");
    const char *d2[] = {"model.model_config.n_kv_heads=8"}; /* more kv heads than heads */
    expect_rule(d2, 1, "model.model_config.n_kv_heads", "model.model_config.num_heads");
    const char *e[] = {"runner_config.global_batch_size=6", "parallel_config.data_parallel=4"};
    expect_rule(e, 2, "--set runner_config.global_batch_size=6: runner_config.global_batch_size = 6 does not split",
                "= 4 x 1 x 1 x 1 = 4 equal parts");
    CHECK_HAS(err_, "[parallel_config.data_parallel at --set parallel_config.data_parallel=4]");
    const char *f[] = {"runner_config.batch_size=3", "parallel_config.micro_batch_num=2"};
    expect_rule(f, 2, "= 3 x 1 x 1 x 1 = 3 does not split", "MindFormers uses parallel_config.micro_batch_num only under pipeline");
    const char *g[] = {"parallel_config.ulysses_degree_in_cp=2"};
    expect_rule(g, 1, "parallel_config.ulysses_degree_in_cp", "parallel_config.context_parallel");
    const char *h[] = {"lr_schedule.warmup_steps=20", "lr_schedule.total_steps=10"};
    expect_rule(h, 2, "lr_schedule.warmup_steps = 20", "lr_schedule.total_steps (10)");
    const char *i[] = {"lr_schedule.type=cosine", "lr_schedule.min_lr=0.01"};
    expect_rule(i, 2, "lr_schedule.min_lr", "optimizer.learning_rate");

    /* the same values where the rule does not apply */
    llama_config c;
    const char *ok1[] = {"lr_schedule.min_lr=0.01"}; /* constant schedule: min_lr unused */
    CHECK_MSG(load_text(NULL, ok1, 1, &c) == 0, "%s", err_);
    const char *ok2[] = {"lr_schedule.warmup_steps=20"}; /* total 0 = the run */
    CHECK_MSG(load_text(NULL, ok2, 1, &c) == 0, "%s", err_);
    const char *ok3[] = {"runner_config.batch_size=16", "parallel_config.data_parallel=4",
                         "parallel_config.micro_batch_num=2"};
    CHECK_MSG(load_text(NULL, ok3, 3, &c) == 0, "%s", err_);
    const char *ok4[] = {"model.model_config.n_kv_heads=0", "model.model_config.num_heads=2"};
    CHECK_MSG(load_text(NULL, ok4, 2, &c) == 0 && c.n_kv_heads == 2, "%s", err_);
    const char *ok5[] = {"parallel_config.vocab_emb_dp=false", "parallel.gradients_mean=false",
                         "parallel.enable_alltoall=true", "parallel_config.context_parallel_algo=ulysses_cp"};
    CHECK_MSG(load_text(NULL, ok5, 4, &c) == 0, "%s", err_);

    /* tensor parallel: every split dim divisible (defaults: 4 heads, 4 kv heads, hidden 64,
       ffn 256 (MindFormers' rule), vocab 256, seq 64) */
    const char *tp2[] = {"parallel_config.model_parallel=2", "parallel_config.use_seq_parallel=true"};
    CHECK_MSG(load_text(NULL, tp2, 2, &c) == 0 && c.model_parallel == 2 && c.use_seq_parallel == 1, "%s", err_);
    const char *sp1[] = {"parallel_config.use_seq_parallel=true"}; /* a no-op at tp 1, accepted */
    CHECK_MSG(load_text(NULL, sp1, 1, &c) == 0, "%s", err_);
    const char *tp3[] = {"parallel_config.model_parallel=3"};
    expect_rule(tp3, 1, "model.model_config.num_heads = 4 is not divisible by parallel_config.model_parallel (3)", NULL);
    const char *tp4[] = {"parallel_config.model_parallel=4", "model.model_config.n_kv_heads=2"};
    expect_rule(tp4, 2, "model.model_config.n_kv_heads = 2 is smaller than parallel_config.model_parallel (4)", NULL);
    const char *tpf[] = {"parallel_config.model_parallel=2", "model.model_config.intermediate_size=171"};
    expect_rule(tpf, 2, "model.model_config.intermediate_size = 171 is not divisible", NULL);
    const char *tpv[] = {"parallel_config.model_parallel=2", "model.model_config.vocab_size=257"};
    expect_rule(tpv, 2, "model.model_config.vocab_size = 257 is not divisible", NULL);
    const char *tps[] = {"parallel_config.model_parallel=2", "parallel_config.use_seq_parallel=true",
                         "model.model_config.seq_length=63"};
    expect_rule(tps, 3, "model.model_config.seq_length = 63 is not divisible", "use_seq_parallel");

    /* context parallel (defaults: 4 heads, 2 kv heads, seq 64): the split and the heads */
    const char *cp2[] = {"parallel_config.context_parallel=2"};
    CHECK_MSG(load_text(NULL, cp2, 1, &c) == 0 && c.context_parallel == 2 && c.context_parallel_zigzag == 1, "%s", err_);
    const char *cps[] = {"parallel_config.context_parallel=3"};
    expect_rule(cps, 1, "model.model_config.seq_length = 64 is not divisible by parallel_config.context_parallel (3)",
                "no padding");
    const char *cpz[] = {"parallel_config.context_parallel=4", "model.model_config.seq_length=36"};
    expect_rule(cpz, 2, "seq_length = 36 does not split into 2 x 4 = 8 zigzag chunks", "context_parallel_zigzag = false");
    const char *cpc[] = {"parallel_config.context_parallel=4", "model.model_config.seq_length=36",
                         "parallel_config.context_parallel_zigzag=false"};
    CHECK_MSG(load_text(NULL, cpc, 3, &c) == 0, "%s", err_);
    const char *cpu[] = {"parallel_config.context_parallel=8", "parallel_config.context_parallel_algo=ulysses_cp"};
    expect_rule(cpu, 2, "num_heads / parallel_config.model_parallel = 4 heads per rank are not divisible by the Ulysses degree 8",
                "context_parallel under ulysses_cp");
    const char *cpk[] = {"parallel_config.context_parallel=4", "parallel_config.context_parallel_algo=ulysses_cp",
                         "model.model_config.num_heads=12", "model.model_config.n_kv_heads=3",
                         "model.model_config.hidden_size=96"};
    expect_rule(cpk, 5, "n_kv_heads / parallel_config.model_parallel = 3 kv heads per rank and the Ulysses degree 4",
                "one must divide the other");
    const char *cph[] = {"parallel_config.context_parallel=4", "parallel_config.context_parallel_algo=hybrid_cp",
                         "parallel_config.ulysses_degree_in_cp=3"};
    expect_rule(cph, 3, "parallel_config.context_parallel = 4 is not divisible by parallel_config.ulysses_degree_in_cp (3)",
                NULL);
    const char *cpr[] = {"parallel_config.context_parallel=2", "parallel_config.context_parallel_algo=ulysses_cp",
                         "model.model_config.use_ring_attention=true"};
    expect_rule(cpr, 3, "use_ring_attention = true asks for ring attention", "context_parallel_algo = ulysses_cp");
    const char *cpt[] = {"parallel_config.context_parallel=2", "parallel_config.model_parallel=2",
                         "parallel_config.use_seq_parallel=true", "model.model_config.seq_length=4",
                         "parallel_config.context_parallel_zigzag=false"};
    CHECK_MSG(load_text(NULL, cpt, 5, &c) == 0, "%s", err_);
    const char *cpt3[] = {"parallel_config.context_parallel=2", "parallel_config.model_parallel=2",
                          "parallel_config.use_seq_parallel=true", "model.model_config.seq_length=6",
                          "parallel_config.context_parallel_zigzag=false"};
    expect_rule(cpt3, 5, "seq_length / parallel_config.context_parallel = 6 / 2 tokens per rank are not divisible", NULL);

    /* features that have not landed: rejected by name (MindFormers' switches: test_not_landed) */
    /* pipeline (defaults: 2 layers, micro_batch_num 1) */
    const char *pp2[] = {"parallel_config.pipeline_stage=2"};
    CHECK_MSG(load_text(NULL, pp2, 1, &c) == 0 && c.pipeline_stage == 2, "%s", err_);
    const char *pp3[] = {"parallel_config.pipeline_stage=3"};
    expect_rule(pp3, 1, "model.model_config.num_layers = 2 does not split into parallel_config.pipeline_stage x "
                        "model.model_config.pp_interleave_num = 3 x 1 = 3 stages", "layers are never dropped");
    const char *ppo[] = {"parallel_config.pipeline_stage=2", "model.model_config.num_layers=4", "model.model_config.offset=2"};
    expect_rule(ppo, 3, "offset = 2 leaves a stage without layers: 2 layers per stage, the first gets 0 and the last 4",
                NULL);
    const char *ppo1[] = {"parallel_config.pipeline_stage=2", "model.model_config.num_layers=4", "model.model_config.offset=-1"};
    CHECK_MSG(load_text(NULL, ppo1, 3, &c) == 0 && c.offset == -1, "%s", err_);
    const char *ppi[] = {"parallel_config.pipeline_stage=2", "model.model_config.num_layers=4",
                         "model.model_config.pp_interleave_num=2"};
    expect_rule(ppi, 3, "pipeline_interleave = false with model.model_config.pp_interleave_num = 2", "or neither");
    const char *ppm[] = {"parallel_config.pipeline_stage=2", "model.model_config.num_layers=4",
                         "model.model_config.pp_interleave_num=2", "parallel.pipeline_config.pipeline_interleave=true",
                         "parallel_config.micro_batch_num=5"};
    expect_rule(ppm, 5, "parallel_config.micro_batch_num = 5 does not split into micro_batch_num / "
                "parallel_config.pipeline_stage (2) rounds", "PyTorch's constraint");
    const char *ppl[] = {"parallel_config.pipeline_stage=2", "model.model_config.num_layers=2",
                         "model.model_config.pp_interleave_num=2", "parallel.pipeline_config.pipeline_interleave=true",
                         "parallel_config.micro_batch_num=2"};
    expect_rule(ppl, 5, "num_layers = 2 does not split into parallel_config.pipeline_stage x "
                        "model.model_config.pp_interleave_num = 2 x 2 = 4 stages", NULL);
    const char *ppz[] = {"parallel_config.pipeline_stage=2", "model.model_config.num_layers=4",
                         "model.model_config.pp_interleave_num=2", "parallel.pipeline_config.pipeline_interleave=true",
                         "parallel_config.micro_batch_num=2", "parallel.pipeline_config.pipeline_scheduler=zero_bubble"};
    expect_rule(ppz, 6, "parallel.pipeline_config.pipeline_scheduler = zb-h1: over model chunks the schedule is 1f1b "
                "(interleaved 1F1B), looped_bfs or zb1p", "use one of them, or no interleave");
    /* looped_bfs and zb1p run over chunks: refused without them; looped_bfs
       takes any micro-batch count, zb1p the interleaved rounds */
    const char *ppb1[] = {"parallel_config.pipeline_stage=2", "model.model_config.num_layers=4",
                          "parallel_config.micro_batch_num=2", "parallel.pipeline_config.pipeline_scheduler=bfs"};
    expect_rule(ppb1, 4, "parallel.pipeline_config.pipeline_scheduler = looped_bfs runs over model chunks: it needs "
                "parallel.pipeline_config.pipeline_interleave = true and model.model_config.pp_interleave_num > 1", NULL);
    const char *ppz1[] = {"parallel_config.pipeline_stage=2", "model.model_config.num_layers=4",
                          "parallel_config.micro_batch_num=2", "parallel.pipeline_config.pipeline_scheduler=zb1p"};
    expect_rule(ppz1, 4, "pipeline_scheduler = zb1p runs over model chunks", NULL);
    const char *ppz5[] = {"parallel_config.pipeline_stage=2", "model.model_config.num_layers=4",
                          "model.model_config.pp_interleave_num=2", "parallel.pipeline_config.pipeline_interleave=true",
                          "parallel_config.micro_batch_num=5",
                          "parallel.pipeline_config.pipeline_scheduler=interleaved_zero_bubble"};
    expect_rule(ppz5, 6, "parallel_config.micro_batch_num = 5 does not split into micro_batch_num / "
                "parallel_config.pipeline_stage (2) rounds", "the interleaved and zb1p schedules");
    const char *ppb5[] = {"parallel_config.pipeline_stage=2", "model.model_config.num_layers=4",
                          "model.model_config.pp_interleave_num=2", "parallel.pipeline_config.pipeline_interleave=true",
                          "parallel_config.micro_batch_num=5", "parallel.pipeline_config.pipeline_scheduler=loopedbfs"};
    CHECK_MSG(load_text(NULL, ppb5, 6, &c) == 0 && !strcmp(c.pipeline_scheduler, "looped_bfs"), "looped_bfs m 5: %s",
              err_);
    const char *ppz6[] = {"parallel_config.pipeline_stage=2", "model.model_config.num_layers=4",
                          "model.model_config.pp_interleave_num=2", "parallel.pipeline_config.pipeline_interleave=true",
                          "parallel_config.micro_batch_num=6", "parallel.pipeline_config.pipeline_scheduler=interleaved_zb"};
    CHECK_MSG(load_text(NULL, ppz6, 6, &c) == 0 && !strcmp(c.pipeline_scheduler, "zb1p"), "zb1p m 6: %s", err_);
    /* the V schedules: 2 chunks per rank (pp_interleave_num 4 or 1 refused), dualpipev m >= 2 x pipeline_stage;
       m = 5 with 2 stages is fine for zbv (the interleaved rounds rule is 1F1B's) */
    const char *ppv4[] = {"parallel_config.pipeline_stage=2", "model.model_config.num_layers=8",
                          "model.model_config.pp_interleave_num=4", "parallel.pipeline_config.pipeline_interleave=true",
                          "parallel_config.micro_batch_num=4", "parallel.pipeline_config.pipeline_scheduler=zero_bubble_v"};
    expect_rule(ppv4, 6, "parallel.pipeline_config.pipeline_scheduler = zbv with model.model_config.pp_interleave_num "
                "= 4: the schedule runs on a V of exactly 2 model chunks per rank", NULL);
    const char *ppv1[] = {"parallel_config.pipeline_stage=2", "model.model_config.num_layers=4",
                          "parallel_config.micro_batch_num=4", "parallel.pipeline_config.pipeline_scheduler=dualpipev"};
    expect_rule(ppv1, 4, "pipeline_scheduler = dualpipev with model.model_config.pp_interleave_num = 1", NULL);
    const char *ppdm[] = {"parallel_config.pipeline_stage=2", "model.model_config.num_layers=4",
                          "model.model_config.pp_interleave_num=2", "parallel.pipeline_config.pipeline_interleave=true",
                          "parallel_config.micro_batch_num=3", "parallel.pipeline_config.pipeline_scheduler=dualpipev"};
    expect_rule(ppdm, 6, "parallel_config.micro_batch_num = 3 with pipeline_scheduler dualpipev: it needs at least as "
                "many micro-batches as virtual stages, 2 x parallel_config.pipeline_stage = 4", NULL);
    const char *ppv5[] = {"parallel_config.pipeline_stage=2", "model.model_config.num_layers=4",
                          "model.model_config.pp_interleave_num=2", "parallel.pipeline_config.pipeline_interleave=true",
                          "parallel_config.micro_batch_num=5", "parallel.pipeline_config.pipeline_scheduler=zbv"};
    CHECK_MSG(load_text(NULL, ppv5, 6, &c) == 0 && !strcmp(c.pipeline_scheduler, "zbv"), "%s", err_);
    /* the largest degrees: 2^32 virtual stages counted as such (as an int
       product they were 0, and the layer split divided by it) */
    const char *ppbig[] = {"parallel_config.pipeline_stage=65536", "model.model_config.pp_interleave_num=65536",
                           "parallel.pipeline_config.pipeline_interleave=true", "parallel_config.micro_batch_num=65536"};
    expect_rule(ppbig, 4, "model.model_config.num_layers = 2 does not split into parallel_config.pipeline_stage x "
                          "model.model_config.pp_interleave_num = 65536 x 65536 = 4294967296 stages", NULL);
    /* multi-copy: whole samples per copy; not with pp or cp */
    const char *mc_ok[] = {"micro_batch_interleave_num=2", "runner_config.batch_size=4"};
    CHECK_MSG(load_text(NULL, mc_ok, 2, &c) == 0 && c.micro_batch_interleave_num == 2, "multi-copy 2: %s", err_);
    const char *mc_b[] = {"micro_batch_interleave_num=3", "runner_config.global_batch_size=4"};
    expect_rule(mc_b, 2, "runner_config.global_batch_size = 4 does not split into parallel_config.data_parallel x "
                         "runner_config.gradient_accumulation_steps x parallel_config.micro_batch_num x "
                         "micro_batch_interleave_num = 1 x 1 x 1 x 3 = 3", "whole samples");
    const char *mc_pp[] = {"parallel_config.micro_batch_interleave_num=2", "parallel_config.pipeline_stage=2",
                           "model.model_config.num_layers=2", "parallel_config.micro_batch_num=2"};
    expect_rule(mc_pp, 4, "micro_batch_interleave_num (or parallel_config.micro_batch_interleave_num) = 2 with "
                          "parallel_config.pipeline_stage = 2", "not supported with pipeline parallelism");
    const char *mc_cp[] = {"micro_batch_interleave_num=2", "parallel_config.context_parallel=2"};
    expect_rule(mc_cp, 2, "parallel_config.context_parallel = 2", "not supported with context parallelism");
    /* fine-grained interleave: needs sequence parallel; one kind of copies at a time */
    const char *fg_ok[] = {"parallel_config.fine_grain_interleave=2", "runner_config.batch_size=4",
                           "parallel_config.model_parallel=2", "parallel_config.use_seq_parallel=true"};
    CHECK_MSG(load_text(NULL, fg_ok, 4, &c) == 0 && c.fine_grain_interleave == 2, "fine grain 2: %s", err_);
    const char *fg_sp[] = {"model.model_config.fine_grain_interleave=2", "runner_config.batch_size=4"};
    expect_rule(fg_sp, 2, "model.model_config.fine_grain_interleave (or parallel_config.fine_grain_interleave) = 2 "
                          "needs parallel_config.use_seq_parallel true", "MindFormers");
    const char *fg_both[] = {"parallel_config.fine_grain_interleave=2", "micro_batch_interleave_num=2",
                             "parallel_config.use_seq_parallel=true", "runner_config.batch_size=8"};
    expect_rule(fg_both, 4, "micro_batch_interleave_num = 2 and model.model_config.fine_grain_interleave = 2: use one",
                NULL);
    const char *fg_b[] = {"parallel_config.fine_grain_interleave=3", "parallel_config.use_seq_parallel=true",
                          "runner_config.batch_size=4"};
    expect_rule(fg_b, 3, "x model.model_config.fine_grain_interleave = 1 x 1 x 1 x 3 = 3 equal parts of whole samples", NULL);
    const char *pps[] = {"parallel.pipeline_config.pipeline_scheduler=zb-v"};
    CHECK(load_text(NULL, pps, 1, &c) == -1);
    CHECK_HAS(err_, "not one of 1f1b, gpipe, zb-h1");
    const char *z3[] = {"parallel.parallel_optimizer_config.optimizer_level=level3"};
    expect_rule(z3, 1, "parallel.parallel_optimizer_config.optimizer_level", "not implemented");
    /* ... also from a file */
    CHECK(load_text("parallel_config:\n  model_parallel: 8\n", NULL, 0, &c) == -1);
    CHECK_HAS(err_, "cfg.yaml:2: model.model_config.num_heads = 4 is not divisible by parallel_config.model_parallel (8)");
    CHECK_HAS(err_, "cfg.yaml:2: model.model_config.n_kv_heads = 4 is smaller than parallel_config.model_parallel (8)");
    CHECK_HAS(err_, "(2 errors)");

    /* validate on configs built in code */
    char err[256];
    llama_config v;
    llama_config_defaults(&v);
    v.use_seq_parallel = 2;
    CHECK(llama_config_validate(&v, err, sizeof err) == -1);
    CHECK_HAS(err, "parallel_config.use_seq_parallel");
    llama_config_defaults(&v);
    strcpy(v.lr_schedule, "linear");
    CHECK(llama_config_validate(&v, err, sizeof err) == -1);
    CHECK_HAS(err, "lr_schedule.type");
    llama_config_defaults(&v);
    v.optimizer_level = 7;
    CHECK(llama_config_validate(&v, err, sizeof err) == -1);
    CHECK_HAS(err, "optimizer_level");
    llama_config_defaults(&v);
    v.beta2 = 1.0f;
    CHECK(llama_config_validate(&v, err, sizeof err) == -1);
    CHECK_HAS(err, "optimizer.beta2");
    llama_config_defaults(&v);
    v.num_heads = 0; /* no division by zero */
    CHECK(llama_config_validate(&v, err, sizeof err) == -1);
    CHECK_HAS(err, "model.model_config.num_heads");
    llama_config_defaults(&v);
    v.n_kv_heads = 0;
    CHECK(llama_config_validate(&v, err, sizeof err) == 0);
    CHECK(llama_config_validate(NULL, err, sizeof err) == -1);
    CHECK(llama_config_validate(&v, NULL, 0) == 0);

    /* load's other argument errors, and nothing overwritten on failure */
    memset(&c, 0x33, sizeof c);
    llama_config before = c;
    CHECK(llama_config_load(NULL, NULL, 2, &c, NULL, err, sizeof err) == -1);
    const char *null_set[] = {NULL};
    CHECK(llama_config_load(NULL, null_set, 1, &c, NULL, err, sizeof err) == -1);
    CHECK(load_text("seed: 3\n", tp3, 1, &c) == -1);
    CHECK(memcmp(&c, &before, sizeof c) == 0);
    CHECK(llama_config_load(NULL, NULL, 0, NULL, NULL, err, sizeof err) == -1);
    CHECK(llama_config_load(NULL, tp3, 1, &c, NULL, NULL, 0) == -1);
}

/* The rule table (config.h's llama__rules), row by row: a sentence's
   conversions are all %lld, as many as the numbers its row names (the
   compiler cannot check a format kept in a table); a row has a sentence, a
   function that says it, or neither (then it is a gate and must end a chain);
   a sentence names the key its row is about. */
static void test_rule_table(void) {
    const size_t n = sizeof llama__rules / sizeof llama__rules[0];
    CHECK_MSG(n > 30, "only %zu rules", n);
    for (size_t i = 0; i < n; i++) {
        const llama__vrule *k = &llama__rules[i];
        int args = 0, convs = 0, bad = 0;
        while (args < LLAMA__RULE_ARGS && k->args[args] != LLAMA__N_NONE) args++;
        for (int j = 0; j < LLAMA__RULE_ARGS; j++) bad += k->args[j] >= LLAMA__N_COUNT || (j >= args && k->args[j]);
        for (const char *p = k->sentence ? k->sentence : ""; *p; p++) {
            if (*p != '%') continue;
            if (p[1] == '%') p++;
            else if (strncmp(p, "%lld", 4) == 0) convs++, p += 3;
            else bad++;
        }
        CHECK_MSG(k->key && k->when && bad == 0 && convs == args,
                  "rule %zu (%s): %d conversions for %d numbers, %d bad", i, k->key, convs, args, bad);
        CHECK_MSG(!(k->sentence && k->say), "rule %zu (%s): both a sentence and a function", i, k->key);
        CHECK_MSG(k->sentence || k->say || (k->group != LLAMA__G_NONE && k->ends), "rule %zu (%s): a gate of no chain",
                  i, k->key);
        CHECK_MSG(!k->sentence || strstr(k->sentence, k->key), "rule %zu: its sentence does not name %s", i, k->key);
    }
}

/* ---- MindFormers' parallel modes, batch meaning and switches of features to come ---- */

static void test_parallel_mode(void) {
    llama_config c;
    /* semi_auto_parallel (default) and its integer */
    CHECK(load_set("parallel.parallel_mode=1", &c) == 0 && c.parallel_mode == LLAMA_PARALLEL_MODE_SEMI_AUTO);
    CHECK(load_set("parallel.parallel_mode=semi_auto_parallel", &c) == 0 && c.parallel_mode == 1);

    /* auto_parallel passes validation (examples/llama/auto.h then picks the degrees);
       hybrid_parallel: parsed (a later --set may undo it), then refused by name */
    static const char *const autos[] = {"parallel.parallel_mode=auto_parallel", "parallel.parallel_mode=2"};
    for (int i = 0; i < 2; i++)
        CHECK_MSG(load_set(autos[i], &c) == 0 && c.parallel_mode == LLAMA_PARALLEL_MODE_AUTO, "%s", err_);
    static const char *const hybrids[] = {"parallel.parallel_mode=hybrid_parallel", "parallel.parallel_mode=3"};
    for (int i = 0; i < 2; i++) {
        expect_rule(&hybrids[i], 1, "parallel.parallel_mode = hybrid_parallel: ", "is not supported");
        CHECK_HAS(err_, "use semi_auto_parallel");
    }
    const char *undo[] = {"parallel.parallel_mode=semi_auto_parallel"};
    CHECK_MSG(load_text("parallel:\n  parallel_mode: 2\n", undo, 1, &c) == 0 && c.parallel_mode == 1, "%s", err_);
    CHECK(load_text("parallel:\n  parallel_mode: auto_parallel\n  search_mode: dynamic_programming\n", NULL, 0, &c) == 0);
    CHECK(c.parallel_mode == LLAMA_PARALLEL_MODE_AUTO && strcmp(c.search_mode, "dynamic_programming") == 0);
    CHECK(load_text("parallel:\n  parallel_mode: auto_parallel\n  search_mode: greedy\n", NULL, 0, &c) == -1);
    CHECK_HAS(err_, "not one of");

    /* data_parallel: pure data parallel, batch per rank */
    const char *dp_ok[] = {"parallel.parallel_mode=data_parallel", "parallel.full_batch=false",
                           "parallel_config.data_parallel=4", "runner_config.batch_size=3"};
    CHECK_MSG(load_text(NULL, dp_ok, 4, &c) == 0, "%s", err_);
    CHECK_INT(c.parallel_mode, LLAMA_PARALLEL_MODE_DATA);
    CHECK_INT(c.full_batch, 0);
    CHECK_INT(llama_config_global_batch(&c), 12);
    const char *dp_int[] = {"parallel.parallel_mode=0", "parallel.full_batch=false"};
    CHECK_MSG(load_text(NULL, dp_int, 2, &c) == 0 && c.parallel_mode == LLAMA_PARALLEL_MODE_DATA, "%s", err_);
    const char *dp_full[] = {"parallel.parallel_mode=data_parallel"}; /* full_batch true (the default) */
    expect_rule(dp_full, 1, "parallel.parallel_mode = data_parallel needs parallel.full_batch = false",
                "each rank reads its own runner_config.batch_size samples");
    const char *dp_tp[] = {"parallel.parallel_mode=data_parallel", "parallel.full_batch=false",
                           "parallel_config.model_parallel=2"};
    expect_rule(dp_tp, 3, "parallel.parallel_mode = data_parallel is pure data parallel",
                "parallel_config.model_parallel (2), parallel_config.context_parallel (1) and "
                "parallel_config.pipeline_stage (1) must be 1");
    /* named before the "not implemented" of context and pipeline parallel */
    const char *dp_cp[] = {"parallel.parallel_mode=data_parallel", "parallel.full_batch=false",
                           "parallel_config.context_parallel=2"};
    expect_rule(dp_cp, 3, "pure data parallel", "parallel_config.context_parallel (2)");
    const char *dp_pp[] = {"parallel.parallel_mode=data_parallel", "parallel.full_batch=false",
                           "parallel_config.pipeline_stage=3"};
    expect_rule(dp_pp, 3, "pure data parallel", "parallel_config.pipeline_stage (3) must be 1");
    /* the same degrees are fine in semi_auto_parallel */
    const char *semi_tp[] = {"parallel_config.model_parallel=2"};
    CHECK_MSG(load_text(NULL, semi_tp, 1, &c) == 0, "%s", err_);

    /* stand_alone: one device */
    CHECK_MSG(load_set("parallel.parallel_mode=stand_alone", &c) == 0, "%s", err_);
    CHECK_INT(c.parallel_mode, LLAMA_PARALLEL_MODE_STAND_ALONE);
    const char *sa_dp[] = {"parallel.parallel_mode=stand_alone", "parallel_config.data_parallel=2"};
    expect_rule(sa_dp, 2, "parallel.parallel_mode = stand_alone runs on one device",
                "parallel_config.data_parallel x model_parallel x pipeline_stage x context_parallel = 2 x 1 x 1 x 1 ranks");
    const char *sa_tp[] = {"parallel.parallel_mode=stand_alone", "parallel_config.model_parallel=2"};
    expect_rule(sa_tp, 2, "stand_alone", "= 1 x 2 x 1 x 1 ranks");

    /* the mode prints by name and reads back */
    llama_config_defaults(&c);
    c.parallel_mode = LLAMA_PARALLEL_MODE_STAND_ALONE;
    char text[8192];
    FILE *f = tmpfile();
    if (!f) return;
    llama_config_print(&c, f);
    slurp(f, text, sizeof text);
    fclose(f);
    CHECK_HAS(text, "parallel:\n  parallel_mode: stand_alone\n  full_batch: true\n  parameter_broadcast: false\n");

    /* validate on a config built in code */
    char err[512];
    llama_config_defaults(&c);
    c.parallel_mode = 9;
    CHECK(llama_config_validate(&c, err, sizeof err) == -1);
    CHECK_HAS(err, "parallel.parallel_mode = 9: must be one of");
    llama_config_defaults(&c);
    c.parallel_mode = LLAMA_PARALLEL_MODE_AUTO;
    CHECK_MSG(llama_config_validate(&c, err, sizeof err) == 0, "%s", err);
}

/* MindFormers' batch: runner_config.batch_size per data-parallel rank,
   times micro_batch_num under pipeline or gradient_accumulation_steps
   without, times micro_batch_interleave_num (base_trainer.py); full_batch
   changes nothing; global_batch_size (ours) gives the global batch itself. */
static void test_batch_semantics(void) {
    llama_config c;
    const char *dp[] = {"parallel_config.data_parallel=2", "runner_config.batch_size=3"};
    CHECK_MSG(load_text(NULL, dp, 2, &c) == 0, "%s", err_);
    CHECK_INT(llama_config_global_batch(&c), 6);
    CHECK_INT(llama_config_micro_batches(&c), 1);
    const char *fb[] = {"parallel_config.data_parallel=2", "runner_config.batch_size=3", "parallel.full_batch=false"};
    CHECK_MSG(load_text(NULL, fb, 3, &c) == 0 && llama_config_global_batch(&c) == 6, "%s", err_);
    /* accumulation without pipeline multiplies the batch */
    const char *ga[] = {"parallel_config.data_parallel=8", "runner_config.batch_size=1",
                        "runner_config.gradient_accumulation_steps=8"};
    CHECK_MSG(load_text(NULL, ga, 3, &c) == 0, "%s", err_);
    CHECK_INT(llama_config_global_batch(&c), 64);
    CHECK_INT(llama_config_micro_batches(&c), 8);
    /* pipeline: micro_batch_num multiplies, accumulation has no effect (a warning) */
    const char *pp[] = {"parallel_config.pipeline_stage=2", "parallel_config.micro_batch_num=4",
                        "runner_config.batch_size=2", "runner_config.gradient_accumulation_steps=8",
                        "parallel_config.data_parallel=2"};
    CHECK_MSG(load_text(NULL, pp, 5, &c) == 0, "%s", err_);
    CHECK_INT(llama_config_global_batch(&c), 16);
    CHECK_INT(llama_config_micro_batches(&c), 4);
    CHECK_HAS(warn_, "--set runner_config.gradient_accumulation_steps=8: runner_config.gradient_accumulation_steps = 8 "
                     "has no effect with parallel_config.pipeline_stage = 2");
    /* copies multiply the batch, each copy gets batch_size samples */
    const char *mc[] = {"micro_batch_interleave_num=2", "runner_config.batch_size=3", "parallel_config.model_parallel=2"};
    CHECK_MSG(load_text(NULL, mc, 3, &c) == 0 && llama_config_global_batch(&c) == 6, "%s", err_);
    /* micro_batch_num without pipeline only splits each step further (MindFormers ignores it) */
    const char *mb[] = {"runner_config.batch_size=4", "parallel_config.micro_batch_num=2"};
    CHECK_MSG(load_text(NULL, mb, 2, &c) == 0, "%s", err_);
    CHECK_INT(llama_config_global_batch(&c), 4);
    CHECK_INT(llama_config_micro_batches(&c), 2);
    /* data_parallel mode: batch_size x ranks x accumulation */
    const char *dm[] = {"parallel.parallel_mode=data_parallel", "parallel.full_batch=false",
                        "parallel_config.data_parallel=4", "runner_config.batch_size=2",
                        "runner_config.gradient_accumulation_steps=3", "micro_batch_interleave_num=5"};
    CHECK_MSG(load_text(NULL, dm, 5, &c) == 0 && llama_config_global_batch(&c) == 24, "%s", err_);
    /* the global batch as such */
    const char *gb[] = {"runner_config.global_batch_size=12", "parallel_config.data_parallel=2",
                        "parallel_config.micro_batch_num=3", "runner_config.batch_size=5"};
    CHECK_MSG(load_text(NULL, gb, 4, &c) == 0 && llama_config_global_batch(&c) == 12, "%s", err_);
    /* bounds */
    const char *big[] = {"parallel_config.data_parallel=2", "runner_config.batch_size=1048576"};
    expect_rule(big, 2, "= 1048576 x 2 x 1 x 1 = 2097152 is larger than 1048576", NULL);
    const char *edge[] = {"parallel_config.data_parallel=2", "runner_config.batch_size=524288"};
    CHECK_MSG(load_text(NULL, edge, 2, &c) == 0 && llama_config_global_batch(&c) == 1048576, "%s", err_);
    CHECK_INT(llama_config_global_batch(NULL), -1);
    CHECK_INT(llama_config_micro_batches(NULL), -1);
    llama_config_defaults(&c);
    c.batch_size = 1 << 20;
    c.data_parallel = 1 << 12;
    CHECK_INT(llama_config_global_batch(&c), -1); /* past INT_MAX */

    /* parameter_broadcast, full_batch: stored, checked as booleans */
    CHECK(load_set("parallel.parameter_broadcast=true", &c) == 0 && c.parameter_broadcast == 1);
    char err[256];
    llama_config_defaults(&c);
    c.full_batch = 2;
    CHECK(llama_config_validate(&c, err, sizeof err) == -1);
    CHECK_HAS(err, "parallel.full_batch");
    llama_config_defaults(&c);
    c.parameter_broadcast = -1;
    CHECK(llama_config_validate(&c, err, sizeof err) == -1);
    CHECK_HAS(err, "parallel.parameter_broadcast");
}

/* MindFormers' model shape for absent keys (llama_config.py, llama_layer.py):
   kv heads = num_heads, the FFN width from 4h by 2/3, ffn_dim_multiplier and
   multiple_of. Figures are the published models'. */
static void test_model_shape(void) {
    llama_config c;
    const char *l2[] = {"model.model_config.hidden_size=4096", "model.model_config.num_heads=32"};
    CHECK_MSG(load_text(NULL, l2, 2, &c) == 0, "%s", err_);
    CHECK_INT(c.intermediate_size, 11008); /* Llama 2 7B */
    CHECK_INT(c.n_kv_heads, 32);
    const char *l13[] = {"model.model_config.hidden_size=5120", "model.model_config.num_heads=40"};
    CHECK_MSG(load_text(NULL, l13, 2, &c) == 0 && c.intermediate_size == 13824, "13B: %d %s", c.intermediate_size, err_);
    const char *l70[] = {"model.model_config.hidden_size=8192", "model.model_config.num_heads=64",
                         "model.model_config.ffn_dim_multiplier=1.3", "model.model_config.multiple_of=4096",
                         "model.model_config.n_kv_heads=8"};
    CHECK_MSG(load_text(NULL, l70, 5, &c) == 0 && c.intermediate_size == 28672 && c.n_kv_heads == 8, "70B: %d %s",
              c.intermediate_size, err_);
    const char *l3[] = {"model.model_config.hidden_size=4096", "model.model_config.num_heads=32",
                        "model.model_config.ffn_dim_multiplier=1.3", "model.model_config.multiple_of=1024"};
    CHECK_MSG(load_text(NULL, l3, 4, &c) == 0 && c.intermediate_size == 14336, "Llama 3 8B: %d %s", c.intermediate_size,
              err_);
    /* a given width wins; a null in YAML is MindFormers' None */
    CHECK_MSG(load_text("model:\n  model_config:\n    hidden_size: 128\n    intermediate_size: 300\n    n_kv_heads: null\n",
                        NULL, 0, &c) == 0 && c.intermediate_size == 300 && c.n_kv_heads == c.num_heads, "%s", err_);
    /* the derived width is what tensor parallel must divide */
    const char *tp[] = {"model.model_config.multiple_of=3", "parallel_config.model_parallel=2"};
    expect_rule(tp, 2, "model.model_config.intermediate_size = 171 is not divisible by parallel_config.model_parallel (2)",
                NULL);
    CHECK_INT(llama_config_ffn_width(NULL), -1);
}

/* Optimizer, clipping, warm-up and the checkpoint as MindFormers reads them. */
static void test_training_keys(void) {
    llama_config c;
    CHECK_MSG(load_text("optimizer:\n  type: FP32StateAdamWeightDecay\n  betas: [0.8, 0.95]\n", NULL, 0, &c) == 0, "%s",
              err_);
    CHECK_INT(c.optimizer_type, LLAMA_OPTIMIZER_ADAMWEIGHTDECAY);
    CHECK_FLT(c.beta1, 0.8f);
    CHECK_FLT(c.beta2, 0.95f);
    CHECK_FLT(c.weight_decay, 0.0f); /* absent: MindFormers' 0 */
    const char *ad[] = {"optimizer.type=AdamW"}; /* --set undoes the file's type */
    CHECK_MSG(load_text("optimizer:\n  type: FP32StateAdamWeightDecay\n", ad, 1, &c) == 0 &&
                  c.optimizer_type == LLAMA_OPTIMIZER_ADAMW, "%s", err_);
    CHECK(load_text("optimizer:\n  betas: [0.9]\n", NULL, 0, &c) == -1);
    CHECK_HAS(err_, "cfg.yaml:2: optimizer.betas");
    /* clipping: MFTrainOneStepCell's switch and norm (1.0 when absent) */
    CHECK_MSG(load_text("runner_wrapper:\n  use_clip_grad: True\n", NULL, 0, &c) == 0, "%s", err_);
    CHECK_FLT(llama_config_clip_norm(&c), 1.0f);
    CHECK_MSG(load_text("runner_wrapper:\n  use_clip_grad: False\n  max_grad_norm: 0.3\n", NULL, 0, &c) == 0, "%s", err_);
    CHECK_FLT(llama_config_clip_norm(&c), 0.0f);
    const char *two[] = {"max_grad_norm=0.5"};
    CHECK(load_text("runner_wrapper:\n  use_clip_grad: True\n", two, 1, &c) == -1);
    CHECK_HAS(err_, "--set max_grad_norm=0.5: max_grad_norm = 0.5 and runner_wrapper.max_grad_norm = 1");
    CHECK_HAS(err_, "runner_wrapper.use_clip_grad at ");
    /* warm-up as a ratio of the run */
    CHECK_MSG(load_text("lr_schedule:\n  warmup_ratio: 0.03\n  warmup_steps: 5\n", NULL, 0, &c) == 0, "%s", err_);
    CHECK(llama_config_warmup_steps(&c, 1000) == 30);
    CHECK(llama_config_warmup_steps(&c, 10) == 0);
    c.warmup_ratio = 0;
    CHECK(llama_config_warmup_steps(&c, 1000) == 5);
    /* checkpoints: a MindSpore .ckpt cannot be read; resume needs one */
    CHECK(load_text("load_checkpoint: /data/llama2_7b.ckpt\nresume_training: False\n", NULL, 0, &c) == -1);
    CHECK_HAS(err_, "cfg.yaml:1: load_checkpoint = /data/llama2_7b.ckpt: MindSpore .ckpt files cannot be read");
    CHECK(load_text("load_checkpoint: ''\nresume_training: True\n", NULL, 0, &c) == -1);
    CHECK_HAS(err_, "cfg.yaml:2: resume_training = true needs load_checkpoint");
    CHECK_MSG(load_text("load_checkpoint: /data/w.safetensors\n", NULL, 0, &c) == 0, "%s", err_);
    CHECK(strcmp(c.load_checkpoint, "/data/w.safetensors") == 0);
    CHECK_HAS(warn_, "cfg.yaml:1: load_checkpoint = /data/w.safetensors with resume_training = false");
    CHECK_MSG(load_text("load_checkpoint:\nresume_training: False\n", NULL, 0, &c) == 0 && !c.load_checkpoint[0], "%s",
              err_);
    char longer[320] = "load_checkpoint=";
    memset(longer + 16, 'a', 300);
    longer[316] = 0;
    const char *lp[] = {longer};
    CHECK(load_text(NULL, lp, 1, &c) == -1);
    CHECK_HAS(err_, "longer than 255 characters");
}

/* The config report: every error at once, each located, a refused value
   not echoed by the rules that read it, aliases under sections the trainer
   does not read skipped, the unknown keys in one line. */
/* runner_wrapper.scale_sense: MindFormers writes a section (an update cell) or
   a number (a fixed scale); the number is folded into the section at load,
   and float16 without either is refused (its gradients would flush to zero). */
static void test_loss_scale(void) {
    llama_config c;
    CHECK(load_text("runner_wrapper:\n  scale_sense: 1024\n", NULL, 0, &c) == 0);
    CHECK_INT(c.scale_sense, 2);
    CHECK(c.loss_scale_value == 1024.0f && c.scale_sense_number == 0.0f);
    CHECK(load_text("runner_wrapper:\n  scale_sense:\n    type: DynamicLossScaleUpdateCell\n    scale_window: 7\n",
                    NULL, 0, &c) == 0);
    CHECK(c.scale_sense == 1 && c.scale_window == 7 && c.loss_scale_value == 65536.0f);
    CHECK(load_text("model:\n  model_config:\n    compute_dtype: float16\n", NULL, 0, &c) == -1);
    CHECK_HAS(err_, "cfg.yaml:3: model.model_config.compute_dtype = float16 needs a loss scale");
    CHECK(load_text("model:\n  model_config:\n    compute_dtype: float16\nrunner_wrapper:\n  scale_sense: 4096\n", NULL, 0,
                    &c) == 0);
    CHECK(c.compute_dtype == 2 && c.scale_sense == 2 && c.loss_scale_value == 4096.0f);
}

static void test_report(void) {
    llama_config c;
    const char *yaml = "model:\n"
                       "  model_config:\n"
                       "    hidden_size: 70\n"          /* 3: not divisible by 4 heads */
                       "    num_layers: many\n"         /* 4: not an integer */
                       "    rotary_dtype: bfloat16\n"   /* 5: changes training */
                       "    bos_token_id: 1\n"
                       "parallel_config:\n"
                       "  pipeline_stage: 3\n"          /* 8: 2 layers do not split into 3 (not reported: layers refused) */
                       "  model_parallel: 8\n"          /* 9: kv heads fewer than it */
                       "train_dataset: &train_dataset\n"
                       "  batch_size: 6\n"
                       "train_dataset_task:\n"
                       "  dataset_config: *train_dataset\n"
                       "callbacks:\n"
                       "  - type: MFLossMonitor\n"
                       "runner_config:\n"
                       "  gradient_accumulation_steps: 0\n"; /* 17: out of range */
    CHECK(load_text(yaml, NULL, 0, &c) == -1);
    CHECK_HAS(err_, "cfg.yaml:4: model.model_config.num_layers = many: not an integer");
    CHECK_HAS(err_, "cfg.yaml:17: runner_config.gradient_accumulation_steps = 0");
    CHECK_HAS(err_, "cfg.yaml:3: model.model_config.hidden_size = 70 is not divisible by model.model_config.num_heads (4)");
    CHECK_HAS(err_, "cfg.yaml:9: model.model_config.n_kv_heads = 4 is smaller than parallel_config.model_parallel (8)");
    CHECK(strstr(err_, "does not split into") == NULL); /* the pipeline rule read a refused num_layers */
    CHECK_HAS(err_, "errors)");
    CHECK_HAS(warn_, "cfg.yaml:5: model.model_config.rotary_dtype = bfloat16: RoPE computes in float32 inside the kernel");
    CHECK_HAS(warn_, "4 keys this trainer does not read, ignored: 'model.model_config.bos_token_id', 'train_dataset', "
                     "'train_dataset_task', 'callbacks'");
    /* nesting deeper than any config is refused as it arrives (libyaml's scanner is quadratic in it) */
    {
        static char deep[512];
        size_t k = 0;
        k += (size_t)snprintf(deep, sizeof deep, "x: ");
        for (int d = 0; d < 70; d++) deep[k++] = '[';
        for (int d = 0; d < 70; d++) deep[k++] = ']';
        deep[k++] = '\n', deep[k] = 0;
        CHECK(load_text(deep, NULL, 0, &c) == -1);
        CHECK_HAS(err_, "cfg.yaml:1: nested deeper than 64 levels");
    }
    /* an alias where the trainer reads the value is still an error */
    CHECK(load_text("a: &x 5\nseed: *x\n", NULL, 0, &c) == -1);
    CHECK_HAS(err_, "cfg.yaml:2: seed: YAML aliases");
}

/* recompute_config's switches in every form MindFormers writes them: a
   bool, a per-stage list, a per-chunk list of them (YAML or --set), no
   warning; the value printed back as written; operator patterns, mixed
   nesting and mappings refused by name. (Which layers they pick, and that
   a list matches the stages, is the trainer's: tests/llama/test_train.c.) */
/* Does llama_config_print write this line? */
static int printed(const llama_config *c, const char *line) {
    static char text[65536];
    FILE *f = tmpfile();
    if (!f) return 0;
    llama_config_print(c, f);
    slurp(f, text, sizeof text);
    fclose(f);
    return strstr(text, line) != NULL;
}

static void test_recompute_keys(void) {
    llama_config c;
    static const char *const keys[] = {"recompute_config.recompute", "recompute_config.select_recompute"};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        char set[256], yaml[512], text[128];
        const llama_layer_counts *v = i == 0 ? &c.recompute : &c.select_recompute;
        snprintf(set, sizeof set, "%s=true", keys[i]);
        const char *sets[] = {set};
        CHECK_MSG(load_text(NULL, sets, 1, &c) == 0 && v->all == 1 && v->num == 0, "--set %s: %s", set, err_);
        CHECK_MSG(warn_[0] == 0, "--set %s warns: %s", set, warn_);
        nested_yaml(keys[i], "[8, 8, 4]", yaml, sizeof yaml);
        CHECK_MSG(load_text(yaml, NULL, 0, &c) == 0 && v->num == 3 && v->rows == 0 && v->counts[0] == 8 &&
                      v->counts[1] == 8 && v->counts[2] == 4 && !v->all,
                  "yaml %s: %s", keys[i], err_);
        CHECK_MSG(warn_[0] == 0, "yaml %s warns: %s", keys[i], warn_);
        snprintf(text, sizeof text, "  %s: [8, 8, 4]\n", strchr(keys[i], '.') + 1);
        CHECK_MSG(printed(&c, text), "llama_config_print lacks %s", text);
        nested_yaml(keys[i], "[[1, 2], [3, 0]]", yaml, sizeof yaml);
        CHECK_MSG(load_text(yaml, NULL, 0, &c) == 0 && v->num == 4 && v->rows == 2 && v->counts[2] == 3, "yaml %s: %s",
                  keys[i], err_);
        snprintf(text, sizeof text, "  %s: [[1, 2], [3, 0]]\n", strchr(keys[i], '.') + 1);
        CHECK_MSG(printed(&c, text), "llama_config_print lacks %s", text);
        snprintf(set, sizeof set, "%s=[[2,1],[1,1]]", keys[i]);
        CHECK_MSG(load_text(NULL, sets, 1, &c) == 0 && v->num == 4 && v->rows == 2 && v->counts[0] == 2, "--set %s: %s",
                  set, err_);
        const char *undo[] = {"recompute_config.recompute=false", "recompute_config.select_recompute=false"};
        CHECK_MSG(load_text(yaml, undo, 2, &c) == 0 && !c.recompute.all && !c.recompute.num &&
                      !c.select_recompute.all && !c.select_recompute.num, "%s", err_);
    }
    CHECK(load_text("recompute_config:\n  select_recompute: ['feed_forward\\.mul']\n", NULL, 0, &c) == -1);
    CHECK_HAS(err_, "cfg.yaml:2: recompute_config.select_recompute = [feed_forward\\.mul]: not a layer count "
                    "('feed_forward\\.mul'): operator patterns are not supported");
    CHECK(load_text("recompute_config:\n  recompute: [1, [2, 3]]\n", NULL, 0, &c) == -1);
    CHECK_HAS(err_, "counts beside chunk lists");
    CHECK(load_text("recompute_config:\n  recompute: [[1, 2], [3]]\n", NULL, 0, &c) == -1);
    CHECK_HAS(err_, "chunk lists of 2 and 1 counts");
    CHECK(load_text("recompute_config:\n  recompute: [[[1]]]\n", NULL, 0, &c) == -1);
    CHECK_HAS(err_, "nested deeper than a list of lists");
    CHECK(load_text("recompute_config:\n  recompute: [{a: 1}]\n", NULL, 0, &c) == -1);
    CHECK_HAS(err_, "recompute_config.recompute needs true, false or a list of layer counts");
    /* MindFormers' comm-recompute switches take lists too (accepted: see their reference lines) */
    CHECK_MSG(load_text("recompute_config:\n  select_comm_recompute: [8, 8, 10]\n  parallel_optimizer_comm_recompute: [true]\n",
                        NULL, 0, &c) == 0 && !warn_[0],
              "%s %s", err_, warn_);
}

/* Switches of modes that have not landed, and their neighbours. */
static void test_not_landed(void) {
    llama_config c;

    /* validate on a config built in code */
    char err[512];
    llama_config_defaults(&c);
    c.offset = 3;
    CHECK(llama_config_validate(&c, err, sizeof err) == -1);
    CHECK_HAS(err, "model.model_config.offset = 3 needs parallel_config.pipeline_stage > 1");
    llama_config_defaults(&c);
    c.recompute.all = 1;
    CHECK_MSG(llama_config_validate(&c, err, sizeof err) == 0, "%s", err);
    llama_config_defaults(&c);
    c.fine_grain_interleave = 0;
    CHECK(llama_config_validate(&c, err, sizeof err) == -1);
    CHECK_HAS(err, "model.model_config.fine_grain_interleave = 0: must be in [1, 65536]");

    /* MindFormers' list forms: refused with the feature's reason, not as a shape error */
    CHECK(load_text("model:\n  model_config:\n    offset: [1, -1]\n", NULL, 0, &c) == -1);
    CHECK_HAS(err_, "cfg.yaml:3: model.model_config.offset = [a list]: a per-stage list of offsets is not supported");
    /* other keys keep the shape error, also for a mapping under a list-taking key */
    CHECK(load_text("recompute_config:\n  recompute: {a: 1}\n", NULL, 0, &c) == -1);
    CHECK_HAS(err_, "recompute_config.recompute needs a single value, not a mapping");
    CHECK(load_text("recompute_config:\n  mp_comm_recompute: [true]\n", NULL, 0, &c) == -1);
    CHECK_HAS(err_, "recompute_config.mp_comm_recompute needs a single value, not a sequence");

    /* qualifiers of recomputation: either value, accepted (what they ask for is what happens here) */
    const char *quals[] = {"recompute_config.mp_comm_recompute=true", "recompute_config.recompute_slice_activation=true",
                           "recompute_config.parallel_optimizer_comm_recompute=true"};
    CHECK_MSG(load_text(NULL, quals, 3, &c) == 0, "%s", err_);
    /* mask compression: either value, either spelling */
    const char *masks[] = {"model.model_config.use_attn_mask_compression=true",
                           "parallel_config.use_attn_mask_compression=false"};
    CHECK_MSG(load_text(NULL, masks, 2, &c) == 0, "%s", err_);
    /* an alias and its key disagreeing in one file */
    CHECK(load_text("model:\n  model_config:\n    fine_grain_interleave: 1\nparallel_config:\n  fine_grain_interleave: 2\n",
                    NULL, 0, &c) == -1);
    CHECK_HAS(err_, "parallel_config.fine_grain_interleave = 2 contradicts model.model_config.fine_grain_interleave");

    /* a MindFormers-style parallel section with every key of this kind loads without a warning */
    static const char seed[] =
        "parallel:\n"
        "  parallel_mode: 0\n"
        "  gradients_mean: False\n"
        "  enable_alltoall: False\n"
        "  full_batch: False\n"
        "  search_mode: \"sharding_propagation\"\n"
        "  enable_parallel_optimizer: False\n"
        "  strategy_ckpt_save_file: \"./ckpt_strategy.ckpt\"\n"
        "  parameter_broadcast: True\n"
        "  pipeline_config:\n"
        "    pipeline_interleave: False\n"
        "parallel_config:\n"
        "  data_parallel: 2\n"
        "  model_parallel: 1\n"
        "  pipeline_stage: 1\n"
        "  context_parallel: 1\n"
        "  context_parallel_algo: hybird_cp\n"
        "  use_seq_parallel: False\n"
        "  micro_batch_num: 1\n"
        "  vocab_emb_dp: True\n"
        "micro_batch_interleave_num: 1\n"
        "recompute_config:\n"
        "  recompute: False\n"
        "  select_recompute: False\n"
        "  parallel_optimizer_comm_recompute: False\n"
        "  mp_comm_recompute: True\n"
        "  recompute_slice_activation: True\n"
        "runner_config:\n"
        "  batch_size: 2\n"
        "  gradient_accumulation_steps: 1\n"
        "model:\n"
        "  model_config:\n"
        "    use_attn_mask_compression: True\n"
        "    use_ring_attention: False\n"
        "    fine_grain_interleave: 1\n"
        "    pp_interleave_num: 1\n"
        "    offset: 0\n";
    CHECK_MSG(load_text(seed, NULL, 0, &c) == 0, "%s", err_);
    CHECK_MSG(warn_[0] == 0, "warns: %s", warn_);
    CHECK_INT(c.parallel_mode, LLAMA_PARALLEL_MODE_DATA);
    CHECK_INT(c.full_batch, 0);
    CHECK_INT(c.parameter_broadcast, 1);
    CHECK_INT(c.gradients_mean, 0);
    CHECK_STR(c.context_parallel_algo, "hybrid_cp");
    CHECK_INT(llama_config_global_batch(&c), 4);
}

/* ---- printing -------------------------------------------------------------------- */

static void test_print(void) {
    const char *sets[] = {"model.model_config.hidden_size=48", "model.model_config.rms_norm_eps=1e-6",
                          "parallel_config.data_parallel=2", "parallel.enable_parallel_optimizer=true",
                          "parallel.parallel_optimizer_config.optimizer_level=level2", "optimizer.learning_rate=3e-4",
                          "optimizer.beta2=0.999", "lr_schedule.type=cosine", "lr_schedule.min_lr=1.5e-5",
                          "runner_config.batch_size=4", "seed=18446744073709551615", "max_grad_norm=0.5",
                          "parallel_config.context_parallel_algo=hybrid_cp", "model.model_config.theta=500000"};
    int n = (int)(sizeof sets / sizeof sets[0]);
    llama_config c, back;
    CHECK_MSG(load_text(NULL, sets, n, &c) == 0, "%s", err_);
    char text[8192];
    FILE *f = tmpfile();
    CHECK(f != NULL);
    if (!f) return;
    llama_config_print(&c, f);
    slurp(f, text, sizeof text);
    fclose(f);
    CHECK_HAS(text, "model:\n  model_config:\n    vocab_size: 256\n    hidden_size: 48\n");
    CHECK_HAS(text, "parallel_config:\n  data_parallel: 2\n");
    CHECK_HAS(text, "  parallel_optimizer_config:\n    optimizer_level: level2\n");
    CHECK_HAS(text, "\nseed: 18446744073709551615\n");
    CHECK_HAS(text, "    theta: 500000\n");
    /* it reads back as the same config, without warnings */
    CHECK_MSG(load_text(text, NULL, 0, &back) == 0, "%s", err_);
    CHECK(warn_[0] == 0);
    CHECK(same_config(&c, &back));
    /* so do the defaults */
    llama_config def;
    llama_config_defaults(&def);
    def.n_kv_heads = def.num_heads, def.intermediate_size = llama_config_ffn_width(&def); /* what a load derives */
    f = tmpfile();
    if (!f) return;
    llama_config_print(&def, f);
    slurp(f, text, sizeof text);
    fclose(f);
    CHECK_MSG(load_text(text, NULL, 0, &back) == 0, "%s", err_);
    CHECK(same_config(&def, &back));

    /* the reference: one row per key, every key named */
    static char ref[32768];
    f = tmpfile();
    if (!f) return;
    llama_config_print_reference(f);
    slurp(f, ref, sizeof ref);
    fclose(f);
    CHECK(strncmp(ref, "| key | type | default | meaning |\n|---|---|---|---|\n", 52) == 0);
    int rows = 0;
    for (const char *p = ref; (p = strstr(p, "\n| `")) != NULL; p++) rows++;
    CHECK_INT(rows, NUM_KEY_CASES);
    for (int j = 0; j < NUM_KEY_CASES; j++) {
        char cell[160];
        snprintf(cell, sizeof cell, "| `%s` |", key_cases[j].path);
        CHECK_HAS(ref, cell);
    }
    CHECK_HAS(ref, "| `model.model_config.hidden_size` | int in [1, 65536] | `64` |");
    CHECK_HAS(ref, "`CosineWithWarmUpLR` = `cosine`");
    CHECK_HAS(ref, "same as `optimizer.learning_rate`");
    CHECK_HAS(ref, "| `lr_schedule.total_steps` | int >= 0 (or -1, read as 0) | `0` |");
    CHECK_HAS(ref, "`hybird_cp` = `hybrid_cp`");
    CHECK_HAS(ref, "| `parallel.parallel_mode` | `semi_auto_parallel` \\| `data_parallel` \\| `stand_alone` \\| "
                   "`auto_parallel` \\| `hybrid_parallel` | `semi_auto_parallel` |");
    CHECK_HAS(ref, "`0` = `data_parallel`, `1` = `semi_auto_parallel`, `2` = `auto_parallel`, `3` = `hybrid_parallel`");
    CHECK_HAS(ref, "| `parallel.strategy_ckpt_save_file` | text | `./ckpt_strategy.ckpt` |");
    CHECK_HAS(ref, "| `parallel_config.fine_grain_interleave` | alias | - | same as `model.model_config.fine_grain_interleave`");
    /* every line is a table row of 4 cells (pipes inside cells escaped) */
    int lines = 0, bad_rows = 0;
    for (const char *p = ref; *p; lines++) {
        const char *nl = strchr(p, '\n');
        if (!nl) break;
        int pipes = 0;
        for (const char *q = p; q < nl; q++) pipes += *q == '|' && (q == p || q[-1] != '\\');
        bad_rows += pipes != 5;
        p = nl + 1;
    }
    CHECK_INT(bad_rows, 0);
    CHECK_INT(lines, NUM_KEY_CASES + 2);

    /* usage */
    static char usage[8192];
    f = tmpfile();
    if (!f) return;
    llama_print_usage(f);
    slurp(f, usage, sizeof usage);
    fclose(f);
    static const char *const opts[] = {"usage:", "--config", "--set", "--steps", "--data", "--init-from", "--save",
                                       "--backend", "threads", "mpi", "nccl", "--metrics", "--seed", "--shuffle",
                                       "--sample", "--quiet", "--help", "--save-dir", "--save-every", "--keep",
                                       "build/train --config examples/configs/tiny.yaml --data README.md --steps 50",
                                       "mpirun -np 2 build/train --backend mpi --set parallel_config.data_parallel=2"};
    for (size_t i = 0; i < sizeof opts / sizeof opts[0]; i++) CHECK_HAS(usage, opts[i]);
}

/* docs/config.md (the Configuration reference) holds the printed table, byte for
   byte (regenerate it with `build/llama_test_config --reference`). */
static void test_doc_reference(void) {
    static char ref[65536];
    FILE *f = tmpfile();
    if (!f) return;
    llama_config_print_reference(f);
    slurp(f, ref, sizeof ref);
    fclose(f);
    FILE *r = fopen("docs/config.md", "rb");
    CHECK_MSG(r != NULL, "run from the repository root: docs/config.md not found");
    if (!r) return;
    size_t cap = 1 << 20, n = 0;
    char *doc = (char *)malloc(cap + 1);
    if (doc) n = fread(doc, 1, cap, r);
    fclose(r);
    if (!doc) return;
    doc[n] = 0;
    CHECK_MSG(n < cap, "docs/config.md larger than %zu bytes", cap);
    const char *at = strstr(doc, "\n| key | type | default | meaning |\n");
    CHECK_MSG(at != NULL, "docs/config.md has no configuration reference table");
    if (at) {
        at++;
        size_t same = 0;
        while (ref[same] && ref[same] == at[same]) same++;
        const char *line = ref + same; /* the first line that differs */
        while (line > ref && line[-1] != '\n') line--;
        CHECK_MSG(ref[same] == 0 && at[same] == '\n',
                  "docs/config.md's reference differs from llama_config_print_reference() from: %.200s"
                  " (regenerate it with build/llama_test_config --reference)",
                  line);
    }
    free(doc);
}

/* ---- command line ----------------------------------------------------------------- */

/* Parse a NULL-terminated argument list (argv[0] = "train"). */
static int parse(llama_options *o, char *err, size_t errsize, ...) {
    char *argv[80];
    int argc = 1;
    va_list ap;
    va_start(ap, errsize);
    argv[0] = (char *)"train";
    for (char *a; argc < 79 && (a = va_arg(ap, char *)) != NULL;) argv[argc++] = a;
    va_end(ap);
    argv[argc] = NULL;
    err[0] = 0;
    return llama_parse_args(argc, argv, o, err, errsize);
}

static void expect_arg_error(int rc, const char *err, const char *needle) {
    CHECK_MSG(rc == -1, "parsed, want error with %s", needle);
    CHECK_HAS(err, needle);
}

static void test_args(void) {
    llama_options o;
    char err[512];

    CHECK_MSG(parse(&o, err, sizeof err, "--data", "x.txt", NULL) == 0, "%s", err);
    CHECK_INT(o.steps, 10);
    CHECK_STR(o.backend, "threads");
    CHECK_INT(o.seed, -1);
    CHECK(o.config_path == NULL && o.num_sets == 0 && !o.shuffle && !o.quiet && !o.help && o.sample_tokens == 0);
    CHECK_STR(o.data_path, "x.txt");

    CHECK_MSG(parse(&o, err, sizeof err, "--config", "a.yaml", "--set", "seed=1", "--set=optimizer.beta1=0.8",
                    "--steps", "50", "--data=d.txt", "--init-from", "i.safetensors", "--save=s.safetensors",
                    "--backend", "mpi", "--metrics", "m.jsonl", "--seed=0", "--shuffle", "--sample", "100", "--quiet",
                    "--trace", "t.json", "--steps-ignored-typo-check-not-here", NULL) == -1,
              "an unknown option at the end must fail");
    CHECK_HAS(err, "--steps-ignored-typo-check-not-here");

    CHECK_MSG(parse(&o, err, sizeof err, "--config", "a.yaml", "--set", "seed=1", "--set=optimizer.beta1=0.8",
                    "--steps", "50", "--data=d.txt", "--init-from", "i.safetensors", "--save=s.safetensors",
                    "--backend", "mpi", "--metrics", "m.jsonl", "--seed=0", "--shuffle", "--sample", "100", "--quiet",
                    "--trace", "t.json", NULL) == 0,
              "%s", err);
    CHECK_STR(o.config_path, "a.yaml");
    CHECK_INT(o.num_sets, 2);
    CHECK_STR(o.sets[0], "seed=1");
    CHECK_STR(o.sets[1], "optimizer.beta1=0.8");
    CHECK_INT(o.steps, 50);
    CHECK_STR(o.data_path, "d.txt");
    CHECK_STR(o.init_from, "i.safetensors");
    CHECK_STR(o.save_path, "s.safetensors");
    CHECK_STR(o.backend, "mpi");
    CHECK_STR(o.metrics_path, "m.jsonl");
    CHECK_STR(o.trace_path, "t.json");
    CHECK_INT(o.seed, 0);
    CHECK_INT(o.shuffle, 1);
    CHECK_INT(o.sample_tokens, 100);
    CHECK_INT(o.quiet, 1);
    CHECK_INT(o.help, 0);

    CHECK(parse(&o, err, sizeof err, "--steps", "0", NULL) == 0 && o.steps == 0 && o.data_path == NULL);
    CHECK(o.save_dir == NULL && o.save_every == 0 && o.keep == 2); /* sharded checkpoints: off; keep 2 */
    CHECK_MSG(parse(&o, err, sizeof err, "--steps", "0", "--save-dir", "ck", "--save-every=5", "--keep", "0", NULL) == 0,
              "%s", err);
    CHECK(o.save_dir && strcmp(o.save_dir, "ck") == 0 && o.save_every == 5 && o.keep == 0);
    expect_arg_error(parse(&o, err, sizeof err, "--steps", "0", "--save-every", "5", NULL), err,
                     "--save-every needs --save-dir DIR");
    expect_arg_error(parse(&o, err, sizeof err, "--steps", "0", "--keep", "3", NULL), err, "--keep needs --save-dir DIR");
    expect_arg_error(parse(&o, err, sizeof err, "--steps", "0", "--save-dir", "d", "--save-every", "0", NULL), err,
                     "--save-every 0: must be at least 1");
    expect_arg_error(parse(&o, err, sizeof err, "--steps", "0", "--save-dir", "d", "--keep", "-1", NULL), err, "--keep");
    expect_arg_error(parse(&o, err, sizeof err, "--steps", "0", "--save-dir", "d", "--save-dir", "e", NULL), err,
                     "--save-dir given twice");
    CHECK(parse(&o, err, sizeof err, "--backend", "nccl", NULL) == -1); /* no --data */
    CHECK_HAS(err, "--data");
    CHECK(parse(&o, err, sizeof err, "-h", NULL) == 0 && o.help == 1);
    CHECK(parse(&o, err, sizeof err, "--steps", "5", "--help", NULL) == 0 && o.help == 1);
    CHECK(parse(&o, err, sizeof err, "--help", "--bogus", NULL) == 0 && o.help == 1);

    /* errors name the argument; opts untouched on failure */
    memset(&o, 0x77, sizeof o);
    llama_options before = o;
    expect_arg_error(parse(&o, err, sizeof err, "--bogus", NULL), err, "--bogus");
    CHECK(memcmp(&o, &before, sizeof o) == 0);
    expect_arg_error(parse(&o, err, sizeof err, "--dat=x", NULL), err, "did you mean --data");
    expect_arg_error(parse(&o, err, sizeof err, "-x", NULL), err, "-x");
    expect_arg_error(parse(&o, err, sizeof err, "stray", NULL), err, "stray");
    expect_arg_error(parse(&o, err, sizeof err, "--data", NULL), err, "--data");
    expect_arg_error(parse(&o, err, sizeof err, "--data", "--steps", NULL), err, "--data");
    expect_arg_error(parse(&o, err, sizeof err, "--data=", NULL), err, "--data");
    expect_arg_error(parse(&o, err, sizeof err, "--data", "d", "--steps", "abc", NULL), err, "--steps abc");
    expect_arg_error(parse(&o, err, sizeof err, "--data", "d", "--steps", "-1", NULL), err, "--steps");
    expect_arg_error(parse(&o, err, sizeof err, "--data", "d", "--steps", "1.5", NULL), err, "--steps");
    expect_arg_error(parse(&o, err, sizeof err, "--data", "d", "--steps", "99999999999", NULL), err, "--steps");
    expect_arg_error(parse(&o, err, sizeof err, "--data", "d", "--seed", "-1", NULL), err, "--seed");
    expect_arg_error(parse(&o, err, sizeof err, "--data", "d", "--seed", "x", NULL), err, "--seed");
    expect_arg_error(parse(&o, err, sizeof err, "--data", "d", "--sample", "many", NULL), err, "--sample");
    expect_arg_error(parse(&o, err, sizeof err, "--data", "d", "--backend", "gloo", NULL), err, "--backend gloo");
    expect_arg_error(parse(&o, err, sizeof err, "--data", "d", "--set", "noequals", NULL), err, "noequals");
    expect_arg_error(parse(&o, err, sizeof err, "--data", "d", "--quiet=1", NULL), err, "--quiet");
    expect_arg_error(parse(&o, err, sizeof err, "--data", "d", "--data", "e", NULL), err, "--data given twice");
    expect_arg_error(parse(&o, err, sizeof err, "--steps", NULL), err, "--steps");

    /* --set: up to LLAMA_MAX_SETS */
    char *argv[2 * LLAMA_MAX_SETS + 6];
    int argc = 0;
    argv[argc++] = (char *)"train";
    argv[argc++] = (char *)"--steps=0";
    for (int i = 0; i < LLAMA_MAX_SETS; i++) {
        argv[argc++] = (char *)"--set";
        argv[argc++] = (char *)"seed=1";
    }
    CHECK(llama_parse_args(argc, argv, &o, err, sizeof err) == 0 && o.num_sets == LLAMA_MAX_SETS);
    argv[argc++] = (char *)"--set";
    argv[argc++] = (char *)"seed=2";
    CHECK(llama_parse_args(argc, argv, &o, err, sizeof err) == -1);
    CHECK_HAS(err, "--set");
    CHECK(llama_parse_args(1, argv, NULL, err, sizeof err) == -1);
}

int main(int argc, char **argv) {
    /* the reference table that docs/config.md (the Configuration reference) holds */
    if (argc == 2 && strcmp(argv[1], "--reference") == 0) {
        llama_config_print_reference(stdout);
        return fflush(stdout) == 0 ? 0 : 1;
    }
    snprintf(dir_, sizeof dir_, "/tmp/llama_test_config_XXXXXX");
    if (!mkdtemp(dir_)) {
        perror("mkdtemp");
        printf("llama_config: 0 passed, 1 failed\n");
        return 1;
    }
    test_defaults();
    test_ready_configs();
    test_every_key();
    test_loss_scale();
    test_malformed();
    test_unknown_keys();
    test_types_and_ranges();
    test_duplicates();
    test_cross_rules();
    test_rule_table();
    test_parallel_mode();
    test_batch_semantics();
    test_model_shape();
    test_training_keys();
    test_report();
    test_recompute_keys();
    test_not_landed();
    test_print();
    test_doc_reference();
    test_args();
    remove_files();
    return TEST_END("llama_config");
}
