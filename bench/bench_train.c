/* bench/bench_train.c - the trainer against PyTorch on the bench model, and the
   cost of data parallelism, measured side by side in one run.

   Model (examples/configs/bench.yaml): hidden 256, 4 layers, 8 heads, 4 kv heads,
   intermediate 688, seq 256, global batch 8; data: parallel.h itself.
     1. build/train on one rank (threads backend): median tokens/s over the steps
        after the first, and the process's CPU time;
     2. the project's PyTorch model (tests/ref/make_bias_ref.py time) with the same
        shape and 2 threads (when /usr/bin/python3 has torch; TORCH_LLAMA names another
        script taking the same arguments);
     3. build/train with data_parallel 4 on the same global batch: tokens/s and CPU
        time against the one-rank run (the cost of splitting the batch four ways);
     4. the other 4-rank layouts, dp 2 x tp 2 and tp 4 with and without sequence
        parallel, each with --trace: tokens/s and the share of step time exposed to
        communication that the trainer computes from its trace (rank 0);
     5. activation recomputation on one rank (recompute_config: none, selective,
        full): tokens/s and the activation memory the trainer plans (= its peak);
     6. mixed precision on one rank (model_config.compute_dtype bfloat16, and
        float16 with a dynamic loss scale) beside float32, each run next to the
        others: tokens/s and planned activation memory;
     7. Llama 3's vocabulary (128,256 tokens, a uint32 token file in llm.c's
        format that this bench writes) on the tiny model: one device against
        dp 2 x tp 2 + sp (vocabulary-parallel embedding and loss), tokens/s and
        the largest relative difference of the per-step losses and gradient
        norms (the equivalence table's bounds are 1e-6 and 2e-6).
   Prints a table and JSON lines {"bench":"train",...}.
   Usage: build/bench_train [steps] [vocab]   (vocab: section 7 alone) */
#define _DEFAULT_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAX_STEPS 256

typedef struct run_result {
    double tokens_per_s; /* median over steps 1.. */
    double loss[MAX_STEPS], grad_norm[MAX_STEPS];
    int steps;           /* step lines read */
    double cpu_s, wall_s;
    double comm_share;   /* from the trace; -1 when not traced */
    double act_mib;      /* planned activation memory (the memory_plan line) */
    int ok;
} run_result;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static double children_cpu_s(void) {
    struct rusage ru;
    getrusage(RUSAGE_CHILDREN, &ru);
    return (double)ru.ru_utime.tv_sec + 1e-6 * (double)ru.ru_utime.tv_usec + (double)ru.ru_stime.tv_sec +
           1e-6 * (double)ru.ru_stime.tv_usec;
}

static int cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Run a shell command, timing it and the CPU time of everything it ran. */
static int timed_system(const char *cmd, double *cpu_s, double *wall_s) {
    const double c0 = children_cpu_s(), t0 = now_s();
    int rc = system(cmd);
    *wall_s = now_s() - t0;
    *cpu_s = children_cpu_s() - c0;
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

#define BENCH_MODEL "--config examples/configs/bench.yaml --data parallel.h"

static run_result run_model(const char *model, int dp, int tp, int sp, int trace, int steps, const char *extra) {
    run_result r;
    char cmd[1024], line[1024];
    double tps[MAX_STEPS];
    int n = 0;
    FILE *f;
    memset(&r, 0, sizeof r), r.comm_share = -1;
    snprintf(cmd, sizeof cmd,
             "build/train %s --steps %d --quiet "
             "--set parallel_config.data_parallel=%d --set parallel_config.model_parallel=%d "
             "--set parallel_config.use_seq_parallel=%s %s %s --metrics build/bench_train.jsonl >/dev/null",
             model, steps, dp, tp, sp ? "true" : "false", trace ? "--trace build/bench_train_trace.json" : "", extra);
    if (timed_system(cmd, &r.cpu_s, &r.wall_s) != 0) return r;
    if (!(f = fopen("build/bench_train.jsonl", "r"))) return r;
    while (fgets(line, sizeof line, f) && n < MAX_STEPS) {
        const char *p = strstr(line, "\"tokens_per_s\":"), *c = strstr(line, "\"share\":");
        const char *l = strstr(line, "\"loss\":"), *g = strstr(line, "\"grad_norm\":");
        if (p && strstr(line, "\"step\":")) {
            r.loss[n] = l ? strtod(l + 7, NULL) : 0.0, r.grad_norm[n] = g ? strtod(g + 12, NULL) : 0.0;
            tps[n++] = strtod(p + 15, NULL);
        }
        if (c && strstr(line, "comm_share")) r.comm_share = strtod(c + 8, NULL);
        if (strstr(line, "\"event\":\"memory_plan\"") && strstr(line, "\"activations\":"))
            r.act_mib = strtod(strstr(line, "\"activations\":") + 14, NULL) / 1048576.0;
    }
    fclose(f);
    r.steps = n;
    if (n < 2) return r;
    qsort(tps + 1, (size_t)(n - 1), sizeof(double), cmp_double); /* step 0 warms up */
    r.tokens_per_s = tps[1 + (n - 1) / 2];
    r.ok = 1;
    return r;
}

static run_result run_trainer(int dp, int tp, int sp, int trace, int steps, const char *extra) {
    return run_model(BENCH_MODEL, dp, tp, sp, trace, steps, extra);
}

/* A token file in llm.c's format for a vocabulary beyond 16 bits: 256
   little-endian int32 (magic 20240801 = uint32 tokens, version 1, count),
   then the tokens, drawn by a fixed generator (mostly small ids, so there is
   something to learn, and every tenth anywhere in the vocabulary). */
static int write_tokens32(const char *path, int64_t count, uint32_t vocab) {
    FILE *f = fopen(path, "wb");
    unsigned char h[1024] = {0}, b[4];
    const uint32_t head[3] = {20240801u, 1u, (uint32_t)count};
    uint64_t st = 0x766F636162ull;
    int64_t i;
    int k, j;
    if (!f) return -1;
    for (j = 0; j < 3; j++)
        for (k = 0; k < 4; k++) h[4 * j + k] = (unsigned char)(head[j] >> (8 * k));
    fwrite(h, 1, sizeof h, f);
    for (i = 0; i < count; i++) {
        uint32_t v;
        st = st * 6364136223846793005ull + 1442695040888963407ull;
        v = (uint32_t)((st >> 33) % (i % 10 ? 500u : vocab));
        for (k = 0; k < 4; k++) b[k] = (unsigned char)(v >> (8 * k));
        fwrite(b, 1, 4, f);
    }
    return fclose(f) == 0 ? 0 : -1;
}

/* The largest |a - b| / |b| over the steps both runs have. */
static double max_rel_diff(const double *a, const double *b, int n) {
    double m = 0.0;
    int i;
    for (i = 0; i < n; i++) {
        double d = b[i] != 0.0 ? (a[i] - b[i]) / b[i] : a[i] - b[i];
        if (d < 0) d = -d;
        if (d > m) m = d;
    }
    return m;
}

static run_result run_torch(const char *script, int steps) {
    run_result r;
    memset(&r, 0, sizeof r), r.comm_share = -1;
    char cmd[1024], line[512];
    FILE *p;
    snprintf(cmd, sizeof cmd,
             "/usr/bin/python3 %s time --dim 256 --layers 4 --heads 8 --kv 4 --hidden 688 --seq 256 --batch 8 "
             "--threads 2 --steps %d 2>/dev/null",
             script, steps);
    if (!(p = popen(cmd, "r"))) return r;
    while (fgets(line, sizeof line, p)) {
        const char *t = strstr(line, "tokens_per_s ");
        if (t) r.tokens_per_s = strtod(t + 13, NULL), r.ok = 1;
    }
    if (pclose(p) != 0) r.ok = 0;
    return r;
}

/* One row of a one-rank table: tokens/s, the ratio to `base`, planned activations. */
static void print_one_rank_row(const char *name, const run_result *r, const run_result *base) {
    if (!r->ok) {
        printf("%-34s %12s\n", name, "failed");
        return;
    }
    printf("%-34s %12.0f %9.2fx %14.2f\n", name, r->tokens_per_s, base->ok ? r->tokens_per_s / base->tokens_per_s : 0.0,
           r->act_mib);
}

/* Section 7: the 128,256-token vocabulary, one device against dp 2 x tp 2 + sp. */
static int bench_vocab(int steps) {
    static run_result voc[2];
    const char *vocab_model = "--config examples/configs/tiny.yaml --data build/bench_tokens_128256.bin "
                              "--set model.model_config.vocab_size=128256";
    if (write_tokens32("build/bench_tokens_128256.bin", 200000, 128256u) != 0)
        return fprintf(stderr, "bench_train: cannot write build/bench_tokens_128256.bin\n"), 1;
    voc[0] = run_model(vocab_model, 1, 1, 0, 0, steps, "");
    voc[1] = run_model(vocab_model, 2, 2, 1, 0, steps, "");
    printf("Llama 3's vocabulary, 128,256 tokens (uint32 token file; tiny model: hidden 64, 2 layers, seq 64, batch 8):\n");
    printf("%-34s %12s %14s %14s\n", "layout", "tokens/s", "loss rel diff", "gnorm rel diff");
    if (voc[0].ok) printf("%-34s %12.0f %14s %14s\n", "1 device", voc[0].tokens_per_s, "-", "-");
    else printf("%-34s %12s\n", "1 device", "failed");
    if (voc[0].ok && voc[1].ok && voc[1].steps == voc[0].steps)
        printf("%-34s %12.0f %14.2e %14.2e\n", "dp 2 x tp 2 + sp (vocab-parallel)", voc[1].tokens_per_s,
               max_rel_diff(voc[1].loss, voc[0].loss, voc[0].steps), max_rel_diff(voc[1].grad_norm, voc[0].grad_norm, voc[0].steps));
    else printf("%-34s %12s\n", "dp 2 x tp 2 + sp (vocab-parallel)", "failed");
    if (voc[0].ok && voc[1].ok && voc[1].steps == voc[0].steps)
        printf("{\"bench\":\"train\",\"impl\":\"parallel.h\",\"vocab\":128256,\"ranks\":4,\"dp\":2,\"tp\":2,\"sp\":true,"
               "\"tokens_per_s\":%.1f,\"one_device_tokens_per_s\":%.1f,\"loss_rel_diff\":%.3e,\"grad_norm_rel_diff\":%.3e}\n",
               voc[1].tokens_per_s, voc[0].tokens_per_s, max_rel_diff(voc[1].loss, voc[0].loss, voc[0].steps),
               max_rel_diff(voc[1].grad_norm, voc[0].grad_norm, voc[0].steps));
    return voc[0].ok && voc[1].ok ? 0 : 1;
}

int main(int argc, char **argv) {
    const int steps = argc > 1 ? atoi(argv[1]) : 8;
    const char *script = getenv("TORCH_LLAMA") ? getenv("TORCH_LLAMA") : "tests/ref/make_bias_ref.py";
    static const struct { const char *name; int dp, tp, sp; } layouts[] = {
        {"dp 4", 4, 1, 0}, {"dp 2 x tp 2", 2, 2, 0}, {"dp 2 x tp 2 + sp", 2, 2, 1}, {"tp 4", 1, 4, 0}, {"tp 4 + sp", 1, 4, 1}};
    static const struct { const char *name, *sets; } recompute[] = {
        {"none", ""}, {"selective", "--set recompute_config.select_recompute=true"},
        {"full", "--set recompute_config.recompute=true"}};
    static const struct { const char *name, *sets; } precision[] = {
        {"bfloat16", "--set model.model_config.compute_dtype=bfloat16"},
        {"float16", "--set model.model_config.compute_dtype=float16 "
                    "--set runner_wrapper.scale_sense.type=DynamicLossScaleUpdateCell"}};
    static run_result one, four, torch, traced[5], rc[3], lp[2];
    size_t i;
    int have_torch;
    if (steps < 2 || steps > MAX_STEPS) return fprintf(stderr, "bench_train: steps must be 2..%d\n", MAX_STEPS), 2;
    if (argc > 2 && strcmp(argv[2], "vocab") == 0) return bench_vocab(steps); /* section 7 alone */
    if (access("build/train", X_OK) != 0)
        return fprintf(stderr, "bench_train: build/train is missing (make build/train; needs libyaml)\n"), 1;
    have_torch = access(script, R_OK) == 0 && system("/usr/bin/python3 -c 'import torch' >/dev/null 2>&1") == 0;
    one = run_trainer(1, 1, 0, 0, steps, "");
    if (have_torch) torch = run_torch(script, steps - 1);
    four = run_trainer(4, 1, 0, 0, steps, "");
    for (i = 0; i < sizeof layouts / sizeof layouts[0]; i++)
        traced[i] = run_trainer(layouts[i].dp, layouts[i].tp, layouts[i].sp, 1, steps, "");
    for (i = 0; i < 3; i++) rc[i] = run_trainer(1, 1, 0, 0, steps, recompute[i].sets);
    for (i = 0; i < 2; i++) lp[i] = run_trainer(1, 1, 0, 0, steps, precision[i].sets);
    if (!one.ok || !four.ok) return fprintf(stderr, "bench_train: a trainer run failed\n"), 1;

    printf("bench model: hidden 256, 4 layers, 8 heads (4 kv), ffn 688, seq 256, global batch 8; %d steps\n", steps);
    printf("%-34s %12s %10s %10s\n", "run", "tokens/s", "cpu s", "wall s");
    printf("%-34s %12.0f %10.2f %10.2f\n", "parallel.h, 1 rank", one.tokens_per_s, one.cpu_s, one.wall_s);
    if (torch.ok) printf("%-34s %12.0f %10s %10s\n", "PyTorch (tests/ref, 2 threads)", torch.tokens_per_s, "-", "-");
    else printf("%-34s %12s\n", "PyTorch", "skipped (no /usr/bin/python3 with torch)");
    printf("%-34s %12.0f %10.2f %10.2f\n", "parallel.h, dp 4 (4 ranks)", four.tokens_per_s, four.cpu_s, four.wall_s);
    if (torch.ok) printf("speed vs PyTorch: %.2fx (target >= 3x)\n", one.tokens_per_s / torch.tokens_per_s);
    printf("dp 4 CPU time vs 1 rank on the same global batch: %.2fx (target <= 1.25x)\n", four.cpu_s / one.cpu_s);
    printf("4 ranks, traced (--trace; comm = share of step time exposed to communication on rank 0):\n");
    printf("%-34s %12s %10s\n", "layout", "tokens/s", "comm");
    for (i = 0; i < sizeof layouts / sizeof layouts[0]; i++) {
        if (!traced[i].ok) {
            printf("%-34s %12s\n", layouts[i].name, "failed");
            continue;
        }
        printf("%-34s %12.0f %9.1f%%\n", layouts[i].name, traced[i].tokens_per_s, 100.0 * traced[i].comm_share);
    }
    printf("1 rank, activation recomputation (recompute_config):\n");
    printf("%-34s %12s %10s %14s\n", "recompute", "tokens/s", "vs none", "activations MiB");
    for (i = 0; i < 3; i++) print_one_rank_row(recompute[i].name, &rc[i], &rc[0]);
    printf("1 rank, mixed precision (model_config.compute_dtype; float32 = the recompute table's none):\n");
    printf("%-34s %12s %10s %14s\n", "compute_dtype", "tokens/s", "vs f32", "activations MiB");
    print_one_rank_row("float32", &rc[0], &rc[0]);
    for (i = 0; i < 2; i++) print_one_rank_row(precision[i].name, &lp[i], &rc[0]);

    printf("{\"bench\":\"train\",\"impl\":\"parallel.h\",\"ranks\":1,\"tokens_per_s\":%.1f,\"cpu_s\":%.3f,\"wall_s\":%.3f}\n",
           one.tokens_per_s, one.cpu_s, one.wall_s);
    if (torch.ok)
        printf("{\"bench\":\"train\",\"impl\":\"pytorch\",\"threads\":2,\"tokens_per_s\":%.1f,\"speedup\":%.3f}\n",
               torch.tokens_per_s, one.tokens_per_s / torch.tokens_per_s);
    printf("{\"bench\":\"train\",\"impl\":\"parallel.h\",\"ranks\":4,\"dp\":4,\"tokens_per_s\":%.1f,\"cpu_s\":%.3f,"
           "\"wall_s\":%.3f,\"cpu_ratio\":%.3f}\n",
           four.tokens_per_s, four.cpu_s, four.wall_s, four.cpu_s / one.cpu_s);
    for (i = 0; i < sizeof layouts / sizeof layouts[0]; i++)
        if (traced[i].ok)
            printf("{\"bench\":\"train\",\"impl\":\"parallel.h\",\"ranks\":4,\"dp\":%d,\"tp\":%d,\"sp\":%s,"
                   "\"tokens_per_s\":%.1f,\"comm_share\":%.4f}\n",
                   layouts[i].dp, layouts[i].tp, layouts[i].sp ? "true" : "false", traced[i].tokens_per_s,
                   traced[i].comm_share);
    for (i = 0; i < 3; i++)
        if (rc[i].ok)
            printf("{\"bench\":\"train\",\"impl\":\"parallel.h\",\"ranks\":1,\"recompute\":\"%s\",\"tokens_per_s\":%.1f,"
                   "\"activations_mib\":%.3f}\n", recompute[i].name, rc[i].tokens_per_s, rc[i].act_mib);
    for (i = 0; i < 2; i++)
        if (lp[i].ok)
            printf("{\"bench\":\"train\",\"impl\":\"parallel.h\",\"ranks\":1,\"compute_dtype\":\"%s\",\"tokens_per_s\":%.1f,"
                   "\"activations_mib\":%.3f}\n", precision[i].name, lp[i].tokens_per_s, lp[i].act_mib);
    return bench_vocab(steps);
}
