/* tests/llama/test_train.c - end-to-end tests of build/train.

   Runs the trainer as a user would (a child process per run) and checks:
   - reference: the PyTorch fixtures of tests/ref/ (made by tests/ref/make_ref.py
     once with PyTorch): per-step loss and grad norm within 1e-4
     relative over 10 steps, final weights close to PyTorch's;
   - equivalence: dp 2, dp 4, dp 4 + ZeRO-1, dp 4 + ZeRO-2, gradient accumulation
     and dp 2 under mpirun train like one device over 20 steps;
   - memory: optimizer bytes per rank about 1/dp under ZeRO, planned and measured;
   - round trip: --save then --init-from continues bit-identically under the same
     degree, and a checkpoint re-saved under another degree is byte-identical;
   - sharded checkpoints (--save-dir, par_params_save/load): an 8-pair save -> load
     matrix across dp / tp / sp / cp / ZeRO levels (re-exported weights and AdamW
     state byte-identical, continued losses within EQ_LOSS_REL of one device),
     10 + 10 steps bit-identical to 20, a save by mpirun loads on threads, damaged,
     partial and foreign checkpoints refused by name, a SIGKILLed trainer's latest
     loads; the consolidated export gives PyTorch's next-step loss (skipped without
     torch). LLAMA_TEST_ONLY=checkpoints runs just these;
   - bad input: exit status 2, a message naming the thing, nothing overwritten;
   - trace: --trace under dp 2 + ZeRO (threads, and mpirun when MPIRUN is set)
     writes valid Chrome trace JSON (tests/trace_json.h, an independent parser)
     with each rank's compute and comm spans, one per layer/bucket and step.
   - q/k/v biases (qkv_has_bias, Qwen2): the PyTorch fixtures tests/ref/qkvb_*
     (tests/ref/make_bias_ref.py, a Qwen2 model written in torch on its own) on
     one rank, dp 2 + ZeRO-2, tp 2 + sp and cp 2; dp / tp / sp / cp / ZeRO,
     pipelines (1F1B, zero bubble), multi-copy and fine-grained slices like one
     device from random biases; the biases' Hugging Face names in --save, a
     sharded save re-exported byte-identical under another configuration, a
     resume like the uninterrupted run, and bias / no-bias mismatches refused.
     LLAMA_TEST_ONLY=qkv_bias runs just these.
   - recomputation (recompute_config): full and selective train the same bits
     as keeping every activation in every parallel mode (dp, ZeRO, tp, sp,
     cp ring and Ulysses, every pipeline schedule, multi-copy, fine-grained
     slices), with less activation memory, the plan holding; per-stage lists;
     lists that do not match the stages refused. LLAMA_TEST_ONLY=recompute.
   - mixed precision (compute_dtype, runner_wrapper.scale_sense): bf16 against
     PyTorch's CPU autocast over 50 steps (tests/ref/make_lowp_ref.py), f16 with
     a forced overflow skipping the steps GradScaler's rule skips, every row of
     the recomputation table in bf16 (and two mpirun rows) against one device in
     bf16, bf16 checkpoints loading into f32 under tp, bad dtypes and f16 without
     a loss scale refused. LLAMA_TEST_ONLY=mixed.

   Environment: TRAIN (default build/train; may be a command line, e.g.
   "mpirun -np 1 build/train_cuda --backend nccl"), MPIRUN (the launcher of the
   MPI runs; unset or empty, or its program not installed, and each MPI run prints
   "<run>: skipped (no mpirun: <why>)", which tests/run.sh counts; MPIRUN_SKIP is
   the why for an empty MPIRUN), LLAMA_TEST_ONLY=reference (just the PyTorch
   reference and the mixed-precision oracles, one rank: what `make test-cuda` runs on a
   GPU), LLAMA_TEST_ONLY=gpu-table (make test-cuda with TRAIN="build/train_cuda
   --backend cuda-threads": every parallel mode as threads on one GPU against one
   device on it, and a few rows against the CPU trainer, TRAIN_CPU, default
   build/train: per-step losses within 1e-5 relative), LLAMA_TEST_ONLY=nccl-table
   (the same rows with TRAIN="build/train_cuda --backend nccl", each launched by
   MPIRUN with -np its world, one rank per GPU; LLAMA_NCCL_GPUS=<GPUs>, rows
   needing more are skipped by name: docs/multi-gpu.md). */
#define _POSIX_C_SOURCE 200809L
#include "test.h"
#include "test_files.h"
#include "half.h"
#include "trace_json.h"

#include <math.h>
#include <time.h>
#include <stdarg.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

/* f32 tolerances between parallel configurations (see check_equivalent). */
#define EQ_LOSS_REL 1e-6
#define EQ_WEIGHT_ABS 2e-5
#define EQ_GNORM_REL 2e-6

static const char *train_bin, *mpirun;
static char mpirun_why[512]; /* why the MPI runs are skipped; "" = they run */
static int only_reference; /* LLAMA_TEST_ONLY=reference: make test-cuda's GPU check */
static char out_text[1 << 16], err_text[1 << 16];

static void read_file_text(const char *path, char *buf, size_t size) {
    FILE *f = fopen(path, "rb");
    size_t n = 0;
    if (f) n = fread(buf, 1, size - 1, f), fclose(f);
    buf[n] = 0;
}

/* Run `args` (appended to the trainer path, or a full command when raw); keep
   stdout/stderr; return the exit status (-1 if it did not exit normally). */
/* LLAMA_TEST_ONLY=nccl-table: the GPUs of the node (LLAMA_NCCL_GPUS); 0 = off.
   Then every trainer run is launched as "$MPIRUN -np <its world> $TRAIN", one
   rank per GPU, and a row needing more GPUs is skipped by name. */
static int nccl_gpus;

/* The ranks a run's arguments ask for: the product of the parallel degrees set
   with --set (the test's base configs leave them at 1). */
static int run_world(const char *args) {
    static const char *keys[] = {"parallel_config.data_parallel=", "parallel_config.model_parallel=",
                                 "parallel_config.context_parallel=", "parallel_config.pipeline_stage="};
    int world = 1;
    for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++) {
        const char *at = strstr(args, keys[k]);
        if (at) world *= atoi(at + strlen(keys[k]));
    }
    return world;
}

/* 1 (and the skip line) when the NCCL table cannot run the row on its GPUs. */
static int row_skipped(const char *name, const char *sets) {
    const int world = run_world(sets);
    if (!nccl_gpus || world <= nccl_gpus) return 0;
    printf("%s: skipped (needs %d GPUs, found %d)\n", name, world, nccl_gpus);
    return 1;
}

static int run_cmd(int raw, const char *fmt, ...) PAR__PRINTF(2, 3);
static int run_cmd(int raw, const char *fmt, ...) {
    char args[4096], cmd[8192], o[512], e[512], launch[512] = "";
    va_list ap;
    int rc;
    va_start(ap, fmt);
    vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    snprintf(o, sizeof o, "%s/out.txt", test_dir);
    snprintf(e, sizeof e, "%s/err.txt", test_dir);
    if (!raw && nccl_gpus) snprintf(launch, sizeof launch, "%s -np %d ", mpirun ? mpirun : "mpirun", run_world(args));
    snprintf(cmd, sizeof cmd, "%s%s%s%s >%s 2>%s </dev/null", launch, raw ? "" : train_bin, raw ? "" : " ", args, o,
             e);
    rc = system(cmd);
    read_file_text(o, out_text, sizeof out_text);
    read_file_text(e, err_text, sizeof err_text);
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

/* Whether MPIRUN can launch the MPI runs; if not, mpirun_why says why. */
static void find_mpirun(void) {
    char words[1024], cmd[1200], *w;
    const char *why = getenv("MPIRUN_SKIP");
    if (!mpirun || !*mpirun) {
        snprintf(mpirun_why, sizeof mpirun_why, "%s", why && *why ? why : "MPIRUN is not set");
        return;
    }
    /* the program is the first word that is not a VAR=value assignment */
    snprintf(words, sizeof words, "%s", mpirun);
    for (w = strtok(words, " \t"); w && strchr(w, '='); w = strtok(NULL, " \t")) {
    }
    if (!w) {
        snprintf(mpirun_why, sizeof mpirun_why, "MPIRUN (%s) names no program", mpirun);
        return;
    }
    snprintf(cmd, sizeof cmd, "command -v '%s' >/dev/null 2>&1", w);
    if (strchr(w, '\'') || system(cmd) != 0)
        snprintf(mpirun_why, sizeof mpirun_why, "%s (from MPIRUN) is not installed or not on PATH", w);
}

/* 1 if the MPI run `what` can go ahead; else reports it as skipped, with why. */
static int mpi_run(const char *what) {
    if (!mpirun_why[0]) return 1;
    printf("%s: skipped (no mpirun: %s)\n", what, mpirun_why);
    return 0;
}

/* Losses and grad norms of the step lines of a metrics file. */
static int read_metrics(const char *path, double *loss, double *gnorm, int max) {
    FILE *f = fopen(path, "r");
    char line[1024];
    int n = 0;
    if (!f) return -1;
    while (fgets(line, sizeof line, f) && n < max) {
        const char *l = strstr(line, "\"loss\":"), *g = strstr(line, "\"grad_norm\":");
        if (!strstr(line, "\"step\":") || !l || !g) continue;
        loss[n] = strtod(l + 7, NULL), gnorm[n] = strtod(g + 12, NULL);
        n++;
    }
    fclose(f);
    return n;
}

/* One number of a "memory_plan"/"memory_peak" line of a metrics file. */
static int64_t read_memory(const char *path, const char *event, const char *category) {
    FILE *f = fopen(path, "r");
    char line[1024], ev[64], key[64];
    int64_t v = -1;
    if (!f) return -1;
    snprintf(ev, sizeof ev, "\"event\":\"%s\"", event);
    snprintf(key, sizeof key, "\"%s\":", category);
    while (fgets(line, sizeof line, f))
        if (strstr(line, ev) && strstr(line, key)) v = strtoll(strstr(line, key) + strlen(key), NULL, 10);
    fclose(f);
    return v;
}

/* The start-up plan holds what the run used: every category equal to the
   measured peak, except the workspace, where the compute table's own scratch
   is planned from its upper bound (scratch_bound), so the plan may be larger. */
static void check_plan_holds(const char *what, const char *metrics) {
    static const char *const cats[] = {"params", "grads", "optimizer", "activations", "comm", "workspace"};
    size_t c;
    for (c = 0; c < sizeof cats / sizeof cats[0]; c++) {
        const int64_t plan = read_memory(metrics, "memory_plan", cats[c]), peak = read_memory(metrics, "memory_peak", cats[c]);
        const int bound_only = strcmp(cats[c], "workspace") == 0;
        CHECK_MSG(plan >= 0 && peak >= 0 && (bound_only ? peak <= plan : peak == plan),
                  "%s: %s planned %lld bytes, measured peak %lld", what, cats[c], (long long)plan, (long long)peak);
    }
}

/* Largest |a - b| over every tensor of two weight files with the same names. */
static double weights_max_diff(const char *a, const char *b) {
    par_st_file *fa = NULL, *fb = NULL;
    double worst = -1.0;
    int i;
    if (par_st_open(a, &fa) != PAR_OK || par_st_open(b, &fb) != PAR_OK) goto done;
    if (par_st_count(fa) != par_st_count(fb)) goto done;
    worst = 0.0;
    for (i = 0; i < par_st_count(fa); i++) {
        const par_st_tensor *t = par_st_tensor_at(fa, i), *u = par_st_find(fb, t->name);
        float *x, *y;
        int64_t k;
        if (!u || u->numel != t->numel) { worst = -1.0; goto done; }
        x = (float *)malloc((size_t)t->numel * 4 + 4), y = (float *)malloc((size_t)t->numel * 4 + 4);
        if (!x || !y || par_st_read(fa, t->name, t->ndim, t->shape, 0, t->numel, PAR_F32, x) != PAR_OK ||
            par_st_read(fb, t->name, t->ndim, t->shape, 0, t->numel, PAR_F32, y) != PAR_OK) {
            free(x), free(y);
            worst = -1.0;
            goto done;
        }
        for (k = 0; k < t->numel; k++)
            if (fabs((double)x[k] - (double)y[k]) > worst) worst = fabs((double)x[k] - (double)y[k]);
        free(x), free(y);
    }
done:
    if (fa) par_st_close(fa);
    if (fb) par_st_close(fb);
    return worst;
}


/* ---- reference ------------------------------------------------------------ */

/* A run's per-step losses (and grad norms when with_gnorm) against PyTorch's,
   within 1e-4 relative (about one unit of the 6th decimal PyTorch prints). */
static void check_against_pytorch(const char *tag, const char *metrics, const double *want_loss,
                                  const double *want_gnorm, int n, int with_gnorm) {
    double loss[16], gnorm[16];
    const int got = read_metrics(metrics, loss, gnorm, 16);
    int i;
    CHECK_INT(got, n);
    for (i = 0; i < n && i < got; i++) {
        CHECK_MSG(fabs(loss[i] - want_loss[i]) <= 1e-4 * fabs(want_loss[i]), "%s step %d loss %.7f, PyTorch %.6f", tag,
                  i, loss[i], want_loss[i]);
        if (with_gnorm)
            CHECK_MSG(fabs(gnorm[i] - want_gnorm[i]) <= 1e-4 * fabs(want_gnorm[i]),
                      "%s step %d grad norm %.7f, PyTorch %.6f", tag, i, gnorm[i], want_gnorm[i]);
    }
}

/* Final weights after 10 AdamW steps of lr 1e-3 (each moves an element by about
   lr per step, so one step taken differently shows as ~1e-3): measured 4.2e-6
   from PyTorch's; 2e-5 leaves room for another CPU's GEMM kernel. */
static void check_weights_against_pytorch(const char *tag, const char *weights) {
    const double wdiff = weights_max_diff(weights, "tests/ref/gqa_final.safetensors");
    CHECK_MSG(wdiff >= 0 && wdiff <= 2e-5, "%s final weights differ from PyTorch's by %g", tag, wdiff);
}

/* The reference run under `sets`, saved and compared whole with PyTorch's. */
static void reference_whole(const char *tag, const char *sets, const double *want_loss, const double *want_gnorm, int n) {
    int rc = run_cmd(0, "--config examples/configs/gqa_ref.yaml --init-from tests/ref/gqa_init.safetensors "
                        "--data tests/ref/gqa_data.txt --steps 10 --quiet --metrics %s --save %s %s",
                     test_path("refw.jsonl"), test_path("refw.safetensors"), sets);
    CHECK_MSG(rc == 0, "reference run %s failed: %s", tag, err_text);
    check_against_pytorch(tag, test_path("refw.jsonl"), want_loss, want_gnorm, n, 1);
    check_weights_against_pytorch(tag, test_path("refw.safetensors"));
}

static void test_reference(void) {
    double want_loss[16], want_gnorm[16];
    FILE *f = fopen("tests/ref/gqa_expected.txt", "r");
    int n = 0, rc;
    CHECK_MSG(f != NULL, "tests/ref/gqa_expected.txt missing");
    if (!f) return;
    while (n < 16 && fscanf(f, " step %*d loss %lf gnorm %lf", &want_loss[n], &want_gnorm[n]) == 2) n++;
    fclose(f);
    CHECK_INT(n, 10);
    rc = run_cmd(0, "--config examples/configs/gqa_ref.yaml --init-from tests/ref/gqa_init.safetensors "
                    "--data tests/ref/gqa_data.txt --steps 10 --quiet --metrics %s --save %s",
                 test_path("ref.jsonl"), test_path("ref.safetensors"));
    CHECK_MSG(rc == 0, "reference run failed: %s", err_text);
    check_against_pytorch("dp1", test_path("ref.jsonl"), want_loss, want_gnorm, n, 1);
    check_weights_against_pytorch("dp1", test_path("ref.safetensors"));
    if (only_reference) return; /* one GPU: no dp 2 */
    /* the same with ZeRO-2 over 2 ranks */
    rc = run_cmd(0, "--config examples/configs/gqa_ref.yaml --init-from tests/ref/gqa_init.safetensors "
                    "--data tests/ref/gqa_data.txt --steps 10 --quiet --metrics %s --set parallel_config.data_parallel=2 "
                    "--set parallel.enable_parallel_optimizer=true --set parallel.parallel_optimizer_config.optimizer_level=level2",
                 test_path("ref2.jsonl"));
    CHECK_MSG(rc == 0, "reference run dp 2 failed: %s", err_text);
    check_against_pytorch("dp2", test_path("ref2.jsonl"), want_loss, want_gnorm, n, 0);
    /* tensor parallel 2 + sequence parallel (vocabulary-split loss), and context
       parallel 2 (zigzag ring, Ulysses): losses, grad norms and the whole weights */
    reference_whole("tp2", "--set parallel_config.model_parallel=2 --set parallel_config.use_seq_parallel=true",
                    want_loss, want_gnorm, n);
    reference_whole("cp2 zigzag", "--set parallel_config.context_parallel=2", want_loss, want_gnorm, n);
    reference_whole("cp2 ulysses",
                    "--set parallel_config.context_parallel=2 --set parallel_config.context_parallel_algo=ulysses_cp",
                    want_loss, want_gnorm, n);
}

/* ---- equivalence -------------------------------------------------------------- */

#define EQ_STEPS 20
/* clipping on (the grad norm is ~1-2 here), so the norm must count every parameter once */
static const char *eq_base = "--config examples/configs/tiny.yaml --data tests/data/train.txt --quiet --set max_grad_norm=0.5";

/* Tolerance: the runs differ only in f32 summation order (gradients summed
   over different token splits and through the all-reduce), which perturbs
   each gradient by a few ulps; AdamW then moves every weight by at most ~lr
   per step whatever the gradient's size. Measured over 20 steps of lr 1e-3:
   losses within 1e-8 relative (below one f32 ulp of the loss, 1.2e-7, since
   per-token losses are summed in double) and weights within 2e-6. The bounds
   allow ~10 ulps of the loss and 10x the weight difference (docs/results.md:
   Equivalence with one device). */
static double max_rel_diff(const double *a, const double *b, int n) {
    double worst = 0.0;
    int i;
    for (i = 0; i < n; i++)
        if (fabs(a[i] - b[i]) / fabs(b[i]) > worst) worst = fabs(a[i] - b[i]) / fabs(b[i]);
    return worst;
}

static void check_equivalent(const char *name, const char *metrics, const char *weights, const double *base_loss,
                             const double *base_gnorm, const char *base_weights) {
    double loss[EQ_STEPS + 1], gnorm[EQ_STEPS + 1], dl, dg, wdiff;
    int got = read_metrics(metrics, loss, gnorm, EQ_STEPS + 1);
    CHECK_MSG(got == EQ_STEPS, "%s: %d steps in %s", name, got, metrics);
    if (got != EQ_STEPS) return;
    dl = max_rel_diff(loss, base_loss, got), dg = max_rel_diff(gnorm, base_gnorm, got);
    CHECK_MSG(dl <= EQ_LOSS_REL, "%s: losses differ from one device by %g relative", name, dl);
    CHECK_MSG(dg <= EQ_GNORM_REL, "%s: grad norms differ from one device by %g relative", name, dg);
    if (!weights) { /* no weights to compare: the losses and the norm of every gradient, each step */
        printf("  %-22s loss rel diff %.2e, grad norm rel diff %.2e\n", name, dl, dg);
        return;
    }
    wdiff = weights_max_diff(weights, base_weights);
    CHECK_MSG(wdiff >= 0 && wdiff <= EQ_WEIGHT_ABS, "%s: final weights differ from one device by %g", name, wdiff);
    printf("  %-22s loss rel diff %.2e, grad norm rel diff %.2e, weight diff %.2e\n", name, dl, dg, wdiff);
}

typedef struct eq_case {
    const char *name, *sets;
} eq_case;

/* One device on `base` (20 steps, saved as <tag>1.safetensors; its losses and
   grad norms into bl, bg), then every case against it: losses, grad norms and
   final weights within the bounds, and (plan) the memory plan equal to the
   measured peak. */
static void equivalence_table(const char *base, const char *tag, const eq_case *cases, size_t count, int plan,
                              double *bl, double *bg) {
    char one_m[64], one_w[64], m[64], w[64];
    size_t i;
    int rc;
    snprintf(one_m, sizeof one_m, "%s1.jsonl", tag), snprintf(one_w, sizeof one_w, "%s1.safetensors", tag);
    snprintf(m, sizeof m, "%s.jsonl", tag), snprintf(w, sizeof w, "%s.safetensors", tag);
    rc = run_cmd(0, "%s --steps 20 --metrics %s --save %s", base, test_path(one_m), test_path(one_w));
    CHECK_MSG(rc == 0, "single-device run failed: %s", err_text);
    CHECK_INT(read_metrics(test_path(one_m), bl, bg, EQ_STEPS + 1), EQ_STEPS);
    for (i = 0; i < count; i++) {
        if (row_skipped(cases[i].name, cases[i].sets)) continue;
        rc = run_cmd(0, "%s --steps 20 %s --metrics %s --save %s", base, cases[i].sets, test_path(m), test_path(w));
        CHECK_MSG(rc == 0, "%s failed: %s", cases[i].name, err_text);
        if (rc != 0) continue;
        check_equivalent(cases[i].name, test_path(m), test_path(w), bl, bg, test_path(one_w));
        if (plan) check_plan_holds(cases[i].name, test_path(m));
    }
}

static void test_equivalence(void) {
    static const eq_case cases[] = {
        {"dp2", "--set parallel_config.data_parallel=2"},
        {"dp4", "--set parallel_config.data_parallel=4"},
        {"dp4 zero1", "--set parallel_config.data_parallel=4 --set parallel.enable_parallel_optimizer=true"},
        {"dp4 zero2", "--set parallel_config.data_parallel=4 --set parallel.enable_parallel_optimizer=true "
                      "--set parallel.parallel_optimizer_config.optimizer_level=level2"},
        {"dp2 zero2 micro2", "--set parallel_config.data_parallel=2 --set parallel_config.micro_batch_num=2 "
                             "--set parallel.enable_parallel_optimizer=true "
                             "--set parallel.parallel_optimizer_config.optimizer_level=level2"},
        {"dp1 micro4", "--set parallel_config.micro_batch_num=4"},
    };
    double base_loss[EQ_STEPS + 1], base_gnorm[EQ_STEPS + 1];
    int rc;
    equivalence_table(eq_base, "eq", cases, sizeof cases / sizeof cases[0], 0, base_loss, base_gnorm);
    /* --shuffle: the same permutation on every rank, so dp 4 still equals one device;
       and it is really on (the first batch differs) */
    rc = run_cmd(0, "%s --steps 20 --shuffle --metrics %s --save %s", eq_base, test_path("sh1.jsonl"),
                 test_path("sh1.safetensors"));
    CHECK_MSG(rc == 0, "shuffled run failed: %s", err_text);
    {
        double sl[EQ_STEPS + 1], sg[EQ_STEPS + 1];
        CHECK_INT(read_metrics(test_path("sh1.jsonl"), sl, sg, EQ_STEPS + 1), EQ_STEPS);
        CHECK_MSG(sl[0] != base_loss[0], "--shuffle did not change the first batch (loss %.9g)", sl[0]);
        rc = run_cmd(0, "%s --steps 20 --shuffle --set parallel_config.data_parallel=4 --metrics %s --save %s", eq_base,
                     test_path("sh4.jsonl"), test_path("sh4.safetensors"));
        CHECK_MSG(rc == 0, "shuffled dp 4 run failed: %s", err_text);
        if (rc == 0) check_equivalent("dp4 shuffle", test_path("sh4.jsonl"), test_path("sh4.safetensors"), sl, sg,
                                      test_path("sh1.safetensors"));
    }
    if (mpi_run("dp2 mpirun -np 2")) {
        char cmd[2048];
        /* OpenMPI leaks at exit: a sanitized build checks leaks without MPI only */
        snprintf(cmd, sizeof cmd, "ASAN_OPTIONS=detect_leaks=0 %s -np 2 %s --backend mpi %s --steps 20 --set parallel_config.data_parallel=2 --metrics %s --save %s",
                 mpirun, train_bin, eq_base, test_path("eqm.jsonl"), test_path("eqm.safetensors"));
        rc = run_cmd(1, "%s", cmd);
        CHECK_MSG(rc == 0, "mpirun -np 2 failed: %s", err_text);
        if (rc == 0) check_equivalent("dp2 mpirun -np 2", test_path("eqm.jsonl"), test_path("eqm.safetensors"), base_loss,
                                      base_gnorm, test_path("eq1.safetensors"));
    }
}

/* ---- memory ---------------------------------------------------------------- */

static void test_memory(void) {
    const char *cats[2] = {"memory_plan", "memory_peak"};
    int k, rc;
    rc = run_cmd(0, "%s --steps 2 --metrics %s", eq_base, test_path("m1.jsonl"));
    CHECK_MSG(rc == 0, "dp1 run failed: %s", err_text);
    rc = run_cmd(0, "%s --steps 2 --metrics %s --set parallel_config.data_parallel=4 "
                    "--set parallel.enable_parallel_optimizer=true", eq_base, test_path("m4.jsonl"));
    CHECK_MSG(rc == 0, "dp4 zero run failed: %s", err_text);
    check_plan_holds("dp1", test_path("m1.jsonl"));
    check_plan_holds("dp4 ZeRO-1", test_path("m4.jsonl"));
    rc = run_cmd(0, "%s --steps 2 --metrics %s --set parallel_config.data_parallel=2 --set parallel_config.micro_batch_num=2 "
                    "--set parallel.enable_parallel_optimizer=true --set parallel.parallel_optimizer_config.optimizer_level=level2",
                 eq_base, test_path("m2.jsonl"));
    CHECK_MSG(rc == 0, "dp2 ZeRO-2 micro-batch run failed: %s", err_text);
    check_plan_holds("dp2 ZeRO-2 micro 2", test_path("m2.jsonl"));
    for (k = 0; k < 2; k++) {
        const int64_t one = read_memory(test_path("m1.jsonl"), cats[k], "optimizer");
        const int64_t four = read_memory(test_path("m4.jsonl"), cats[k], "optimizer");
        /* padding: each of the (layers + 2) buckets pads to a multiple of 4, two moments */
        CHECK_MSG(one > 0 && four > 0 && 4 * four >= one && 4 * four <= one + 4 * 2 * 4 * 3 * 4,
                  "%s optimizer bytes: dp1 %lld, dp4 ZeRO %lld (want about a quarter)", cats[k], (long long)one,
                  (long long)four);
    }
}

/* ---- round trip ------------------------------------------------------------------ */

static void test_round_trip(void) {
    const char *sets2 = "--set parallel_config.data_parallel=2";
    const char *sets4 = "--set parallel_config.data_parallel=4 --set parallel.enable_parallel_optimizer=true "
                        "--set parallel.parallel_optimizer_config.optimizer_level=level2";
    double lu[EQ_STEPS + 1], lr_[EQ_STEPS + 1], g[EQ_STEPS + 1];
    char a[512], b[512];
    int rc, i, n;
    rc = run_cmd(0, "%s --steps 20 %s --metrics %s --save %s", eq_base, sets2, test_path("u.jsonl"), test_path("u.safetensors"));
    CHECK_MSG(rc == 0, "uninterrupted run failed: %s", err_text);
    /* the first half also saves sharded (test_sharded_resume continues from it) */
    snprintf(a, sizeof a, "%s/rt_dir", test_dir);
    rc = run_cmd(0, "%s %s --steps 10 --save %s --save-dir %s", eq_base, sets2, test_path("s.safetensors"), a);
    CHECK_MSG(rc == 0, "first half failed: %s", err_text);
    rc = run_cmd(0, "%s %s --steps 10 --init-from %s --metrics %s --save %s", eq_base, sets2, test_path("s.safetensors"),
                 test_path("r.jsonl"), test_path("r.safetensors"));
    CHECK_MSG(rc == 0, "resumed run failed: %s", err_text);
    read_metrics(test_path("u.jsonl"), lu, g, EQ_STEPS + 1);
    n = read_metrics(test_path("r.jsonl"), lr_, g, EQ_STEPS + 1);
    CHECK_INT(n, 10);
    for (i = 0; i < n && i < 10; i++) CHECK_MSG(lr_[i] == lu[10 + i], "resumed step %d: %.9g vs %.9g", 10 + i, lr_[i], lu[10 + i]);
    CHECK_MSG(test_files_identical(test_path("r.safetensors"), test_path("u.safetensors")), "resumed weights are not bit-identical");
    snprintf(a, sizeof a, "%s", test_path("r.optimizer.safetensors"));
    snprintf(b, sizeof b, "%s", test_path("u.optimizer.safetensors"));
    CHECK_MSG(test_files_identical(a, b), "resumed optimizer state is not bit-identical");
    /* another degree (dp 4, ZeRO-2: moments loaded as shards and gathered back) */
    rc = run_cmd(0, "%s %s --steps 0 --init-from %s --save %s", eq_base, sets4, test_path("s.safetensors"),
                 test_path("s4.safetensors"));
    CHECK_MSG(rc == 0, "re-save under dp 4 failed: %s", err_text);
    CHECK_MSG(test_files_identical(test_path("s4.safetensors"), test_path("s.safetensors")), "weights changed through dp 4");
    snprintf(a, sizeof a, "%s", test_path("s4.optimizer.safetensors"));
    snprintf(b, sizeof b, "%s", test_path("s.optimizer.safetensors"));
    CHECK_MSG(test_files_identical(a, b), "optimizer state changed through dp 4");
    rc = run_cmd(0, "%s %s --steps 10 --init-from %s --metrics %s --save %s", eq_base, sets4, test_path("s.safetensors"),
                 test_path("r4.jsonl"), test_path("r4.safetensors"));
    CHECK_MSG(rc == 0, "resumed run under dp 4 failed: %s", err_text);
    n = read_metrics(test_path("r4.jsonl"), lr_, g, EQ_STEPS + 1);
    CHECK_INT(n, 10);
    for (i = 0; i < n && i < 10; i++)
        CHECK_MSG(fabs(lr_[i] - lu[10 + i]) <= EQ_LOSS_REL * fabs(lu[10 + i]), "dp4 resumed step %d: %.9g vs %.9g",
                  10 + i, lr_[i], lu[10 + i]);
}

/* ---- bad input -------------------------------------------------------------------- */

/* A bad run: exit status 2, stderr names `needle`, the sentinel files that
   --save and --metrics point at are untouched. */
static void bad(const char *name, const char *needle, const char *fmt, ...) PAR__PRINTF(3, 4);
static void bad(const char *name, const char *needle, const char *fmt, ...) {
    char args[4096], keep[64];
    va_list ap;
    int rc;
    test_write_file(test_path("keep.safetensors"), "KEEP", 4);
    test_write_file(test_path("keep.jsonl"), "KEEP", 4);
    va_start(ap, fmt);
    vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    rc = run_cmd(0, "%s --save %s --metrics %s", args, test_path("keep.safetensors"), test_path("keep.jsonl"));
    CHECK_MSG(rc == 2, "%s: exit status %d, want 2 (stderr: %s)", name, rc, err_text);
    CHECK_MSG(strstr(err_text, needle) != NULL, "%s: stderr lacks \"%s\": %s", name, needle, err_text);
    read_file_text(test_path("keep.safetensors"), keep, sizeof keep);
    CHECK_MSG(strcmp(keep, "KEEP") == 0, "%s: --save file was overwritten", name);
    read_file_text(test_path("keep.jsonl"), keep, sizeof keep);
    CHECK_MSG(strcmp(keep, "KEEP") == 0, "%s: --metrics file was overwritten", name);
}

/* ---- tensor and sequence parallel ---------------------------------------------- */

/* A model every tp degree up to 8 divides: 16 heads, 8 kv heads (GQA), hidden 64,
   ffn 176, vocab 256, seq 64. */
static const char *tp_base = "--config examples/configs/tiny.yaml --data tests/data/train.txt --quiet --set max_grad_norm=0.5 "
                             "--set model.model_config.num_heads=16 --set model.model_config.n_kv_heads=8 "
                             "--set model.model_config.intermediate_size=176";

static void test_tensor_parallel(void) {
    static const int meshes[][2] = {{1, 2}, {1, 4}, {1, 8}, {2, 2}, {2, 4}};
    double base_loss[EQ_STEPS + 1], base_gnorm[EQ_STEPS + 1];
    size_t i;
    int sp, zero, rc = run_cmd(0, "%s --steps 20 --metrics %s --save %s", tp_base, test_path("tp1.jsonl"),
                               test_path("tp1.safetensors"));
    CHECK_MSG(rc == 0, "single-device run failed: %s", err_text);
    CHECK_INT(read_metrics(test_path("tp1.jsonl"), base_loss, base_gnorm, EQ_STEPS + 1), EQ_STEPS);
    for (i = 0; i < sizeof meshes / sizeof meshes[0]; i++)
        for (sp = 0; sp < 2; sp++)
            for (zero = 0; zero < 2; zero++) {
                char name[64];
                snprintf(name, sizeof name, "dp%d x tp%d%s%s", meshes[i][0], meshes[i][1], sp ? " sp" : "",
                         zero ? " zero1" : "");
                rc = run_cmd(0,
                             "%s --steps 20 --set parallel_config.data_parallel=%d --set parallel_config.model_parallel=%d "
                             "--set parallel_config.use_seq_parallel=%s --set parallel.enable_parallel_optimizer=%s "
                             "--metrics %s --save %s",
                             tp_base, meshes[i][0], meshes[i][1], sp ? "true" : "false", zero ? "true" : "false",
                             test_path("tp.jsonl"), test_path("tp.safetensors"));
                CHECK_MSG(rc == 0, "%s failed: %s", name, err_text);
                if (rc == 0)
                    check_equivalent(name, test_path("tp.jsonl"), test_path("tp.safetensors"), base_loss, base_gnorm,
                                     test_path("tp1.safetensors"));
            }
    /* a replicated embedding vs a vocabulary-split one, ZeRO-2, micro-batches */
    rc = run_cmd(0, "%s --steps 20 --set parallel_config.data_parallel=2 --set parallel_config.model_parallel=2 "
                    "--set parallel_config.use_seq_parallel=true --set parallel_config.vocab_emb_dp=false "
                    "--set parallel.enable_parallel_optimizer=true --set parallel.parallel_optimizer_config.optimizer_level=level2 "
                    "--set parallel_config.micro_batch_num=2 --metrics %s --save %s",
                 tp_base, test_path("tp.jsonl"), test_path("tp.safetensors"));
    CHECK_MSG(rc == 0, "dp2 x tp2 vocab-split failed: %s", err_text);
    if (rc == 0)
        check_equivalent("dp2xtp2 sp vocab zero2 mb2", test_path("tp.jsonl"), test_path("tp.safetensors"), base_loss,
                         base_gnorm, test_path("tp1.safetensors"));
    if (mpi_run("dp2 x tp2 sp mpirun -np 4")) {
        char cmd[2048];
        snprintf(cmd, sizeof cmd,
                 "ASAN_OPTIONS=detect_leaks=0 %s -np 4 %s --backend mpi %s --steps 20 --set parallel_config.data_parallel=2 "
                 "--set parallel_config.model_parallel=2 --set parallel_config.use_seq_parallel=true --metrics %s --save %s",
                 mpirun, train_bin, tp_base, test_path("tpm.jsonl"), test_path("tpm.safetensors"));
        rc = run_cmd(1, "%s", cmd);
        CHECK_MSG(rc == 0, "mpirun -np 4 dp2 x tp2 failed: %s", err_text);
        if (rc == 0)
            check_equivalent("dp2 x tp2 sp mpirun -np 4", test_path("tpm.jsonl"), test_path("tpm.safetensors"), base_loss,
                             base_gnorm, test_path("tp1.safetensors"));
    }
    /* sampling under tp + sp: every context length 16..56 is its own set of
       redistributions; the same bytes as one device's sample (same draws) */
    {
        char one[256] = "", two[256] = "";
        const char *p;
        rc = run_cmd(0, "%s --steps 2 --sample 40", tp_base);
        CHECK_MSG(rc == 0 && (p = strstr(out_text, "sample (prompt")) != NULL, "one-device sample: %s", err_text);
        if (rc == 0 && (p = strstr(out_text, "sample (prompt"))) snprintf(one, sizeof one, "%s", p);
        rc = run_cmd(0, "%s --steps 2 --sample 40 --set parallel_config.model_parallel=2 "
                        "--set parallel_config.use_seq_parallel=true --set parallel_config.data_parallel=2",
                     tp_base);
        CHECK_MSG(rc == 0 && (p = strstr(out_text, "sample (prompt")) != NULL, "dp2 x tp2 sp sample: %s", err_text);
        if (rc == 0 && (p = strstr(out_text, "sample (prompt"))) snprintf(two, sizeof two, "%s", p);
        CHECK_MSG(one[0] && strcmp(one, two) == 0, "samples differ:\n%s\nvs\n%s", one, two);
    }
    /* a tp checkpoint resumes under another layout with the same state: re-saved
       through dp 1 x tp 4 (sp) it is byte-identical */
    rc = run_cmd(0, "%s --steps 0 --set parallel_config.model_parallel=4 --set parallel_config.use_seq_parallel=true "
                    "--init-from %s --save %s",
                 tp_base, test_path("tp.safetensors"), test_path("tp4.safetensors"));
    CHECK_MSG(rc == 0, "re-save under tp 4 failed: %s", err_text);
    CHECK_MSG(test_files_identical(test_path("tp.safetensors"), test_path("tp4.safetensors")), "weights changed through tp 4");
    {
        char a[512], b[512];
        snprintf(a, sizeof a, "%s", test_path("tp.optimizer.safetensors"));
        snprintf(b, sizeof b, "%s", test_path("tp4.optimizer.safetensors"));
        CHECK_MSG(test_files_identical(a, b), "optimizer state changed through tp 4");
    }
}

/* ---- context parallel ----------------------------------------------------------- */

/* 8 heads and 2 kv heads (GQA: fewer kv heads than Ulysses degrees 4 and 8, so
   they are replicated), head dim 8, seq 64: every cp degree up to 8 splits it
   into 2 x cp zigzag chunks. */
static const char *cp_base = "--config examples/configs/tiny.yaml --data tests/data/train.txt --quiet --set max_grad_norm=0.5 "
                             "--set model.model_config.num_heads=8 --set model.model_config.n_kv_heads=2";

static void test_context_parallel(void) {
    static const eq_case cases[] = {
        {"cp2 ring contiguous", "--set parallel_config.context_parallel=2 --set parallel_config.context_parallel_zigzag=false"},
        {"cp2 ring zigzag", "--set parallel_config.context_parallel=2 --set model.model_config.use_ring_attention=true"},
        {"cp2 ulysses", "--set parallel_config.context_parallel=2 --set parallel_config.context_parallel_algo=ulysses_cp"},
        {"cp4 ring contiguous", "--set parallel_config.context_parallel=4 --set parallel_config.context_parallel_zigzag=false"},
        {"cp4 ring zigzag", "--set parallel_config.context_parallel=4"},
        {"cp4 ulysses (kv 2 < 4)", "--set parallel_config.context_parallel=4 --set parallel_config.context_parallel_algo=ulysses_cp"},
        {"cp4 hybrid 2x2", "--set parallel_config.context_parallel=4 --set parallel_config.context_parallel_algo=hybrid_cp "
                           "--set parallel_config.ulysses_degree_in_cp=2"},
        {"cp4 ulysses no all_to_all", "--set parallel_config.context_parallel=4 --set parallel_config.context_parallel_algo=ulysses_cp "
                                      "--set parallel.enable_alltoall=false"},
        {"cp8 ring contiguous", "--set parallel_config.context_parallel=8 --set parallel_config.context_parallel_zigzag=false"},
        {"cp8 ring zigzag", "--set parallel_config.context_parallel=8"},
        {"cp8 ulysses (kv 2 < 8)", "--set parallel_config.context_parallel=8 --set parallel_config.context_parallel_algo=ulysses_cp"},
        {"cp8 hybrid 2x4", "--set parallel_config.context_parallel=8 --set parallel_config.context_parallel_algo=hybird_cp "
                           "--set parallel_config.ulysses_degree_in_cp=2"},
        {"cp8 hybrid 4x2", "--set parallel_config.context_parallel=8 --set parallel_config.context_parallel_algo=hybrid_cp "
                           "--set parallel_config.ulysses_degree_in_cp=4"},
        {"dp2 x cp2", "--set parallel_config.data_parallel=2 --set parallel_config.context_parallel=2"},
        {"dp2 x cp2 ulysses", "--set parallel_config.data_parallel=2 --set parallel_config.context_parallel=2 "
                              "--set parallel_config.context_parallel_algo=ulysses_cp"},
        {"tp2 x cp2 sp", "--set parallel_config.model_parallel=2 --set parallel_config.context_parallel=2 "
                         "--set parallel_config.use_seq_parallel=true"},
        {"tp2 x cp2 sp ulysses", "--set parallel_config.model_parallel=2 --set parallel_config.context_parallel=2 "
                                 "--set parallel_config.use_seq_parallel=true --set parallel_config.context_parallel_algo=ulysses_cp"},
        {"dp2 x tp2 x cp2 zero2", "--set parallel_config.data_parallel=2 --set parallel_config.model_parallel=2 "
                                  "--set parallel_config.context_parallel=2 --set parallel_config.use_seq_parallel=true "
                                  "--set parallel.enable_parallel_optimizer=true "
                                  "--set parallel.parallel_optimizer_config.optimizer_level=level2"},
        {"dp2 x cp2 micro2 zero1", "--set parallel_config.data_parallel=2 --set parallel_config.context_parallel=2 "
                                          "--set parallel_config.micro_batch_num=2 --set parallel.enable_parallel_optimizer=true"},
    };
    double base_loss[EQ_STEPS + 1], base_gnorm[EQ_STEPS + 1];
    int rc;
    equivalence_table(cp_base, "cp", cases, sizeof cases / sizeof cases[0], 1, base_loss, base_gnorm);
    if (mpi_run("cp2 zigzag mpirun -np 2")) {
        char cmd[2048];
        snprintf(cmd, sizeof cmd, "ASAN_OPTIONS=detect_leaks=0 %s -np 2 %s --backend mpi %s --steps 20 "
                                  "--set parallel_config.context_parallel=2 --metrics %s --save %s",
                 mpirun, train_bin, cp_base, test_path("cpm.jsonl"), test_path("cpm.safetensors"));
        rc = run_cmd(1, "%s", cmd);
        CHECK_MSG(rc == 0, "mpirun -np 2 cp2 failed: %s", err_text);
        if (rc == 0)
            check_equivalent("cp2 zigzag mpirun -np 2", test_path("cpm.jsonl"), test_path("cpm.safetensors"), base_loss,
                             base_gnorm, test_path("cp1.safetensors"));
    }
    if (mpi_run("dp2 x cp2 ulysses mpirun -np 4")) {
        char cmd[2048];
        snprintf(cmd, sizeof cmd, "ASAN_OPTIONS=detect_leaks=0 %s -np 4 %s --backend mpi %s --steps 20 "
                                  "--set parallel_config.data_parallel=2 --set parallel_config.context_parallel=2 "
                                  "--set parallel_config.context_parallel_algo=ulysses_cp --metrics %s --save %s",
                 mpirun, train_bin, cp_base, test_path("cpm.jsonl"), test_path("cpm.safetensors"));
        rc = run_cmd(1, "%s", cmd);
        CHECK_MSG(rc == 0, "mpirun -np 4 dp2 x cp2 ulysses failed: %s", err_text);
        if (rc == 0)
            check_equivalent("dp2 x cp2 ulysses mpirun -np 4", test_path("cpm.jsonl"), test_path("cpm.safetensors"),
                             base_loss, base_gnorm, test_path("cp1.safetensors"));
    }
    /* sampling under cp runs the forward at the training shape; the same bytes as one device */
    {
        char one[256] = "", two[256] = "";
        const char *p;
        rc = run_cmd(0, "%s --steps 2 --sample 40", cp_base);
        if (rc == 0 && (p = strstr(out_text, "sample (prompt"))) snprintf(one, sizeof one, "%s", p);
        rc = run_cmd(0, "%s --steps 2 --sample 40 --set parallel_config.context_parallel=2 "
                        "--set parallel_config.model_parallel=2 --set parallel_config.use_seq_parallel=true",
                     cp_base);
        if (rc == 0 && (p = strstr(out_text, "sample (prompt"))) snprintf(two, sizeof two, "%s", p);
        CHECK_MSG(one[0] && strcmp(one, two) == 0, "cp samples differ:\n%s\nvs\n%s", one, two);
    }
    /* activations per rank fall as 1/cp: the planned activation bytes of cp 1, 2, 4, 8 */
    {
        int64_t act[4];
        int k;
        for (k = 0; k < 4; k++) {
            rc = run_cmd(0, "%s --steps 1 --set parallel_config.context_parallel=%d --metrics %s", cp_base, 1 << k,
                         test_path("cpmem.jsonl"));
            CHECK_MSG(rc == 0, "cp %d memory run failed: %s", 1 << k, err_text);
            act[k] = read_memory(test_path("cpmem.jsonl"), "memory_peak", "activations");
            CHECK_MSG(act[k] > 0, "cp %d: no measured activation peak", 1 << k);
        }
        for (k = 1; k < 4; k++)
            CHECK_MSG(act[k] > 0 && fabs((double)act[0] / (double)act[k] / (double)(1 << k) - 1.0) <= 0.15,
                      "cp %d: activations %lld bytes vs %lld at cp 1: ratio %.3f, want %d within 15%%", 1 << k,
                      (long long)act[k], (long long)act[0], (double)act[0] / (double)(act[k] > 0 ? act[k] : 1), 1 << k);
        printf("  activations per rank, cp 1/2/4/8: %lld %lld %lld %lld bytes\n", (long long)act[0], (long long)act[1],
               (long long)act[2], (long long)act[3]);
    }
}

/* ---- pipeline parallel ------------------------------------------------------------- */

/* 4 layers (so 2 and 4 stages split them, and 2 stages x 2 chunks), seq 16 and a
   batch of 24 samples, which every micro-batch count below divides (also per
   data-parallel rank). */
static const char *pp_base = "--config examples/configs/tiny.yaml --data tests/data/train.txt --quiet --set max_grad_norm=0.5 "
                             "--set model.model_config.num_layers=4 --set model.model_config.seq_length=16 "
                             "--set runner_config.global_batch_size=24";

/* The final weights of a pipelined run as one file: it saves sharded (each
   stage its own layers; a consolidated --save is refused under pp) and one
   rank loads that and re-exports it (byte-identical, test_sharded_pipeline). */
static int pp_final_weights(const char *base, int mb, const char *dir, const char *out) {
    int rc = run_cmd(0, "%s --steps 0 --set parallel_config.micro_batch_num=%d --init-from %s --save %s", base, mb,
                     dir, out);
    CHECK_MSG(rc == 0, "re-export of %s failed: %s", dir, err_text);
    return rc;
}

/* A pipelined run against one device with the same micro-batches (gradient
   accumulation: the same sums; "dp1 micro4" above ties accumulation to the
   whole batch). Losses and grad norms every step, the final weights, the
   memory plan. */
static void pp_row(const char *name, const char *base, int mb, const char *sets) {
    /* the one-device runs, once per (base, micro-batches) */
    static const char *cached_base[16];
    static int cached_mb[16], ncached, rows;
    static double cl[16][EQ_STEPS + 1], cg[16][EQ_STEPS + 1];
    static char cw[16][512];
    double *bl = NULL, *bg = NULL;
    const char *bw = NULL;
    char dir[512];
    int rc, k;
    if (row_skipped(name, sets)) return;
    for (k = 0; k < ncached; k++)
        if (cached_base[k] == base && cached_mb[k] == mb) bl = cl[k], bg = cg[k], bw = cw[k];
    if (!bl && ncached < 16) {
        snprintf(cw[ncached], sizeof cw[ncached], "%s/pp1_%d.safetensors", test_dir, ncached);
        rc = run_cmd(0, "%s --steps 20 --set parallel_config.micro_batch_num=%d --metrics %s --save %s", base, mb,
                     test_path("pp1.jsonl"), cw[ncached]);
        CHECK_MSG(rc == 0, "%s: one-device run failed: %s", name, err_text);
        CHECK_INT(read_metrics(test_path("pp1.jsonl"), cl[ncached], cg[ncached], EQ_STEPS + 1), EQ_STEPS);
        cached_base[ncached] = base, cached_mb[ncached] = mb, bl = cl[ncached], bg = cg[ncached], bw = cw[ncached];
        ncached++;
    }
    if (!bl) return;
    snprintf(dir, sizeof dir, "%s/pprow%d", test_dir, rows++);
    rc = run_cmd(0, "%s --steps 20 --set parallel_config.micro_batch_num=%d %s --metrics %s --save-dir %s", base, mb,
                 sets, test_path("pp.jsonl"), dir);
    CHECK_MSG(rc == 0, "%s failed: %s", name, err_text);
    if (rc == 0 && pp_final_weights(base, mb, dir, test_path("ppw.safetensors")) == 0)
        check_equivalent(name, test_path("pp.jsonl"), test_path("ppw.safetensors"), bl, bg, bw);
    if (rc == 0) check_plan_holds(name, test_path("pp.jsonl"));
}

/* The same under mpirun -np np (one process per rank, the MPI backend). */
static void pp_mpi_row_on(const char *name, const char *base, int np, int mb, const char *sets) {
    double bl[EQ_STEPS + 1], bg[EQ_STEPS + 1];
    char cmd[2048], dir[512];
    int rc = run_cmd(0, "%s --steps 20 --set parallel_config.micro_batch_num=%d --metrics %s --save %s", base, mb,
                     test_path("pp1.jsonl"), test_path("ppm1.safetensors"));
    CHECK_MSG(rc == 0 && read_metrics(test_path("pp1.jsonl"), bl, bg, EQ_STEPS + 1) == EQ_STEPS, "one-device run");
    static int rows;
    snprintf(dir, sizeof dir, "%s/ppmpi%d", test_dir, rows++);
    snprintf(cmd, sizeof cmd, "ASAN_OPTIONS=detect_leaks=0 %s -np %d %s --backend mpi %s --steps 20 "
                              "--set parallel_config.micro_batch_num=%d %s --metrics %s --save-dir %s",
             mpirun, np, train_bin, base, mb, sets, test_path("ppm.jsonl"), dir);
    rc = run_cmd(1, "%s", cmd);
    CHECK_MSG(rc == 0, "%s failed: %s", name, err_text);
    if (rc == 0 && pp_final_weights(base, mb, dir, test_path("ppmw.safetensors")) == 0)
        check_equivalent(name, test_path("ppm.jsonl"), test_path("ppmw.safetensors"), bl, bg,
                         test_path("ppm1.safetensors"));
}

static void pp_mpi_row(const char *name, int mb, const char *sets) { pp_mpi_row_on(name, pp_base, 4, mb, sets); }

/* Tensor parallel 4 and 8 inside pipeline stages (issue: tp >= 4 with any
   pipeline hung: the residual add's all-reduce was planned as a split over
   the pipeline dim, an all-reduce over tp and an all-gather across stages).
   The tp table's model (16 heads, 8 kv heads, ffn 176: every degree up to 8
   divides them; 4 layers for pp 4). vocab_emb_dp false splits the
   embedding's vocabulary over tp (MindFormers' VocabEmbedding). */
static void test_pipeline_wide_tp(void) {
    static char base4l[1024], base4lsv[1200];
    static const struct {
        const char *name;
        int mb;
        const char *sets;
    } cases[] = {
        {"tp4 x pp2", 2, "--set parallel_config.pipeline_stage=2 --set parallel_config.model_parallel=4"},
        {"tp4 x pp2 sp", 2, "--set parallel_config.pipeline_stage=2 --set parallel_config.model_parallel=4 "
                               "--set parallel_config.use_seq_parallel=true"},
        {"tp4 x pp2 vocab split", 2, "--set parallel_config.pipeline_stage=2 --set parallel_config.model_parallel=4 "
                                        "--set parallel_config.vocab_emb_dp=false"},
        {"tp2 x pp2 vocab split", 2, "--set parallel_config.pipeline_stage=2 --set parallel_config.model_parallel=2 "
                                        "--set parallel_config.vocab_emb_dp=false"},
        {"tp4 x pp2 zb-h1 mb4", 4, "--set parallel_config.pipeline_stage=2 --set parallel_config.model_parallel=4 "
                                      "--set parallel.pipeline_config.pipeline_scheduler=zb-h1"},
        {"tp4 x cp2 x pp2 sp", 2, "--set parallel_config.pipeline_stage=2 --set parallel_config.model_parallel=4 "
                                     "--set parallel_config.context_parallel=2 --set parallel_config.use_seq_parallel=true"},
        {"dp2 x tp4 x pp2 zero2", 2, "--set parallel_config.pipeline_stage=2 --set parallel_config.model_parallel=4 "
                                        "--set parallel_config.data_parallel=2 --set parallel.enable_parallel_optimizer=true "
                                        "--set parallel.parallel_optimizer_config.optimizer_level=level2"},
        {"tp8 x pp2", 2, "--set parallel_config.pipeline_stage=2 --set parallel_config.model_parallel=8"},
        {"tp8 x pp2 sp vocab split", 2, "--set parallel_config.pipeline_stage=2 --set parallel_config.model_parallel=8 "
                                           "--set parallel_config.use_seq_parallel=true "
                                           "--set parallel_config.vocab_emb_dp=false"},
    };
    size_t i;
    for (i = 0; i < sizeof cases / sizeof cases[0]; i++) pp_row(cases[i].name, tp_base, cases[i].mb, cases[i].sets);
    /* pp 4 needs 4 layers; on 4 layers tp 4 ALONE already leaves one device's
       grad norm by 2.2e-6 at step 19 (the bound, 2e-6, was measured on 2): so
       these rows are held to the tp 4 run without a pipeline, where a pipeline
       must change nothing at all (0.00e+00 expected) */
    snprintf(base4l, sizeof base4l, "%s --set model.model_config.num_layers=4 --set parallel_config.model_parallel=4",
             tp_base);
    pp_row("tp4 x pp4 (vs tp4)", base4l, 4, "--set parallel_config.pipeline_stage=4");
    snprintf(base4lsv, sizeof base4lsv, "%s --set parallel_config.use_seq_parallel=true "
             "--set parallel_config.vocab_emb_dp=false", base4l);
    pp_row("tp4 x pp4 sp vocab split (vs tp4)", base4lsv, 4, "--set parallel_config.pipeline_stage=4");
    if (mpi_run("tp4 x pp2 mpirun -np 8")) {
        pp_mpi_row_on("tp4 x pp2 mpirun -np 8", tp_base, 8, 2,
                      "--set parallel_config.pipeline_stage=2 --set parallel_config.model_parallel=4");
        pp_mpi_row_on("tp4 x pp2 sp vocab split mpirun -np 8", tp_base, 8, 2,
                      "--set parallel_config.pipeline_stage=2 --set parallel_config.model_parallel=4 "
                      "--set parallel_config.use_seq_parallel=true --set parallel_config.vocab_emb_dp=false");
    }
}

/* Looped BFS and ZB1P (over 2 chunks per rank) against one device: pp 2 on
   the 4 layers, pp 4 on 8; m = p, 2p and an odd count (ZB1P's rounds allow
   3: one round), with dp and with tp; one mpirun row each. */
static void test_pipeline_chunked_kinds(void) {
    static const char *const kinds[] = {"looped_bfs", "zb1p"};
    static char base8[1024], sets[512], name[96];
    const int mbs[3] = {1, 2, 0}; /* x p; 0: the odd count 3 */
    int k, p, j;
    snprintf(base8, sizeof base8, "%s --set model.model_config.num_layers=8", pp_base);
    for (k = 0; k < 2; k++)
        for (p = 2; p <= 4; p += 2)
            for (j = 0; j < 3; j++) {
                const int mb = mbs[j] ? mbs[j] * p : 3;
                snprintf(name, sizeof name, "pp%d %s mb%d", p, kinds[k], mb);
                snprintf(sets, sizeof sets, "--set parallel_config.pipeline_stage=%d --set model.model_config.pp_interleave_num=2 "
                         "--set parallel.pipeline_config.pipeline_interleave=true "
                         "--set parallel.pipeline_config.pipeline_scheduler=%s", p, kinds[k]);
                pp_row(name, p == 2 ? pp_base : base8, mb, sets);
            }
    for (k = 0; k < 2; k++) {
        snprintf(name, sizeof name, "dp2 x pp2 %s mb4", kinds[k]);
        snprintf(sets, sizeof sets, "--set parallel_config.pipeline_stage=2 --set parallel_config.data_parallel=2 "
                 "--set model.model_config.pp_interleave_num=2 --set parallel.pipeline_config.pipeline_interleave=true "
                 "--set parallel.pipeline_config.pipeline_scheduler=%s", kinds[k]);
        pp_row(name, pp_base, 4, sets);
        snprintf(name, sizeof name, "tp2 x pp2 sp %s mb4", kinds[k]);
        snprintf(sets, sizeof sets, "--set parallel_config.pipeline_stage=2 --set parallel_config.model_parallel=2 "
                 "--set parallel_config.use_seq_parallel=true --set model.model_config.pp_interleave_num=2 "
                 "--set parallel.pipeline_config.pipeline_interleave=true "
                 "--set parallel.pipeline_config.pipeline_scheduler=%s", kinds[k]);
        pp_row(name, pp_base, 4, sets);
    }
    if (mpi_run("pp4 looped_bfs / zb1p mpirun -np 4"))
        for (k = 0; k < 2; k++) {
            snprintf(name, sizeof name, "pp4 %s mb8 mpirun -np 4", kinds[k]);
            snprintf(sets, sizeof sets, "--set parallel_config.pipeline_stage=4 --set model.model_config.pp_interleave_num=2 "
                     "--set parallel.pipeline_config.pipeline_interleave=true "
                     "--set parallel.pipeline_config.pipeline_scheduler=%s", kinds[k]);
            pp_mpi_row_on(name, base8, 4, 8, sets);
        }
}

static void test_pipeline(void) {
    static const struct {
        const char *name;
        int mb;
        const char *sets;
    } cases[] = {
        {"pp2 1f1b mb2", 2, "--set parallel_config.pipeline_stage=2"},
        {"pp2 1f1b mb4", 4, "--set parallel_config.pipeline_stage=2"},
        {"pp2 1f1b mb3", 3, "--set parallel_config.pipeline_stage=2"},
        {"pp2 gpipe mb2", 2, "--set parallel_config.pipeline_stage=2 --set parallel.pipeline_config.pipeline_scheduler=gpipe"},
        {"pp2 gpipe mb3", 3, "--set parallel_config.pipeline_stage=2 --set parallel.pipeline_config.pipeline_scheduler=gpipe"},
        {"pp2 gpipe mb4", 4, "--set parallel_config.pipeline_stage=2 --set parallel.pipeline_config.pipeline_scheduler=gpipe"},
        {"pp2 zb-h1 mb2", 2, "--set parallel_config.pipeline_stage=2 --set parallel.pipeline_config.pipeline_scheduler=zb-h1"},
        {"pp2 zb-h1 mb4", 4, "--set parallel_config.pipeline_stage=2 --set parallel.pipeline_config.pipeline_scheduler=zb-h1"},
        {"pp2 zb-h1 mb3", 3, "--set parallel_config.pipeline_stage=2 --set parallel.pipeline_config.pipeline_scheduler=zb-h1"},
        {"pp2 interleaved mb2", 2, "--set parallel_config.pipeline_stage=2 --set model.model_config.pp_interleave_num=2 "
                                   "--set parallel.pipeline_config.pipeline_interleave=true"},
        {"pp2 interleaved mb4", 4, "--set parallel_config.pipeline_stage=2 --set model.model_config.pp_interleave_num=2 "
                                   "--set parallel.pipeline_config.pipeline_interleave=true"},
        {"pp4 1f1b mb4", 4, "--set parallel_config.pipeline_stage=4"},
        {"pp4 1f1b mb8", 8, "--set parallel_config.pipeline_stage=4"},
        {"pp4 1f1b mb3 (< stages)", 3, "--set parallel_config.pipeline_stage=4"},
        {"pp4 gpipe mb4", 4, "--set parallel_config.pipeline_stage=4 --set parallel.pipeline_config.pipeline_scheduler=gpipe"},
        {"pp4 gpipe mb3", 3, "--set parallel_config.pipeline_stage=4 --set parallel.pipeline_config.pipeline_scheduler=gpipe"},
        {"pp4 gpipe mb8", 8, "--set parallel_config.pipeline_stage=4 --set parallel.pipeline_config.pipeline_scheduler=gpipe"},
        {"pp4 zb-h1 mb4", 4, "--set parallel_config.pipeline_stage=4 --set parallel.pipeline_config.pipeline_scheduler=zb-h1"},
        {"pp4 zb-h1 mb8", 8, "--set parallel_config.pipeline_stage=4 --set parallel.pipeline_config.pipeline_scheduler=zb-h1"},
        {"pp4 zb-h1 mb3 (< stages)", 3, "--set parallel_config.pipeline_stage=4 --set parallel.pipeline_config.pipeline_scheduler=zb-h1"},
        {"pp2 offset 1 (1+3 layers)", 2, "--set parallel_config.pipeline_stage=2 --set model.model_config.offset=1"},
        {"dp2 x pp2", 2, "--set parallel_config.pipeline_stage=2 --set parallel_config.data_parallel=2"},
        {"tp2 x pp2 sp", 2, "--set parallel_config.pipeline_stage=2 --set parallel_config.model_parallel=2 "
                            "--set parallel_config.use_seq_parallel=true"},
        {"dp2 x tp2 x pp2 zero2", 2, "--set parallel_config.pipeline_stage=2 --set parallel_config.data_parallel=2 "
                                     "--set parallel_config.model_parallel=2 --set parallel_config.use_seq_parallel=true "
                                     "--set parallel.enable_parallel_optimizer=true "
                                     "--set parallel.parallel_optimizer_config.optimizer_level=level2"},
        {"cp2 x pp2", 2, "--set parallel_config.pipeline_stage=2 --set parallel_config.context_parallel=2"},
        {"tp2 x pp2 sp zb-h1", 4, "--set parallel_config.pipeline_stage=2 --set parallel_config.model_parallel=2 "
                                  "--set parallel_config.use_seq_parallel=true "
                                  "--set parallel.pipeline_config.pipeline_scheduler=zb-h1"},
        {"dp2 x cp2 x pp2 zb-h1 zero1", 2, "--set parallel_config.pipeline_stage=2 --set parallel_config.data_parallel=2 "
                                           "--set parallel_config.context_parallel=2 "
                                           "--set parallel.enable_parallel_optimizer=true "
                                           "--set parallel.pipeline_config.pipeline_scheduler=zb-h1"},
    };
    static char base8[1024];
    size_t i;
    for (i = 0; i < sizeof cases / sizeof cases[0]; i++) pp_row(cases[i].name, pp_base, cases[i].mb, cases[i].sets);
    /* 8 layers: 4 stages x 2 chunks */
    snprintf(base8, sizeof base8, "%s --set model.model_config.num_layers=8", pp_base);
    pp_row("pp4 interleaved mb4", base8, 4, "--set parallel_config.pipeline_stage=4 --set model.model_config.pp_interleave_num=2 "
                                            "--set parallel.pipeline_config.pipeline_interleave=true");
    pp_row("pp4 interleaved mb8", base8, 8, "--set parallel_config.pipeline_stage=4 --set model.model_config.pp_interleave_num=2 "
                                            "--set parallel.pipeline_config.pipeline_interleave=true");
    /* interleaved in rounds (PyTorch's order for any m): fewer micro-batches than stages, and a count
       that is no multiple of them (one round of 6) */
    pp_row("pp4 interleaved mb3 (< stages)", base8, 3, "--set parallel_config.pipeline_stage=4 "
                                                       "--set model.model_config.pp_interleave_num=2 "
                                                       "--set parallel.pipeline_config.pipeline_interleave=true");
    pp_row("pp4 interleaved mb6 (one round)", base8, 6, "--set parallel_config.pipeline_stage=4 "
                                                        "--set model.model_config.pp_interleave_num=2 "
                                                        "--set parallel.pipeline_config.pipeline_interleave=true");
    /* a schedule of one's own (--pp-schedule): B on one rank, I and W on the other, a W out of
       micro-batch order; and files the trainer refuses before any rank starts */
    {
        static const char own[] = "pipeline stages=2 chunks=1 micro_batches=2\n"
                                  "# rank 0 splits its backward, defers W and runs W 1 before W 0\n"
                                  "rank 0: F 0 0, SA 0 0, F 1 0, SA 1 0, RG 0 0, I 0 0, RG 1 0, I 1 0, W 1 0, W 0 0\n"
                                  "rank 1: RA 0 0, F 0 0, B 0 0, SG 0 0, RA 1 0, F 1 0, I 1 0, SG 1 0, W 1 0\n";
        /* every receive posted ahead (PA / PG: the executor's async receives), waited for by RA / RG
           (PyTorch's lowering of its simple_2_rank_2_stage case posts rank 1's both at the start) */
        static const char posted[] = "pipeline stages=2 chunks=1 micro_batches=2\n"
                                     "rank 0: F 0 0, SA 0 0, F 1 0, SA 1 0, PG 0 0, PG 1 0, RG 0 0, B 0 0, RG 1 0, B 1 0\n"
                                     "rank 1: PA 0 0, PA 1 0, RA 0 0, F 0 0, B 0 0, SG 0 0, RA 1 0, F 1 0, B 1 0, SG 1 0\n";
        static const char deadlock[] = "pipeline stages=2 chunks=1 micro_batches=1\n"
                                       "rank 0: F 0 0, RG 0 0, SA 0 0, B 0 0\n"
                                       "rank 1: RA 0 0, F 0 0, B 0 0, SG 0 0\n";
        static const char vodd[] = "pipeline stages=2 chunks=1 micro_batches=1\nplacement v\n"
                                   "rank 0: F 0 0, SA 0 0, RG 0 0, B 0 0\nrank 1: RA 0 0, F 0 0, B 0 0, SG 0 0\n";
        static char sets[600];
        struct {
            const char *name, *file, *extra, *needle;
        } bads[] = {
            {"schedule that deadlocks", "dead.txt", "--set parallel_config.micro_batch_num=1",
             "deadlock: every unfinished rank waits for a message no rank will send: rank 0 step 1 (RG 0 0)"},
            {"schedule for other micro-batches", "own.txt", "--set parallel_config.micro_batch_num=4",
             "stages=2 chunks=1 micro_batches=2, but the config has parallel_config.pipeline_stage 2"},
            {"schedule that does not parse", "junk.txt", "--set parallel_config.micro_batch_num=2", "--pp-schedule"},
            {"schedule without a pipeline", "own.txt", "--set parallel_config.pipeline_stage=1", "needs parallel_config.pipeline_stage > 1"},
            {"schedule with a V over one chunk", "vodd.txt", "--set parallel_config.micro_batch_num=1",
             "line 2: pipeline placement v: 1 chunks per rank, but the V goes down the ranks and back up"},
        };
        size_t b;
        test_write_file(test_path("own.txt"), own, sizeof own - 1);
        test_write_file(test_path("dead.txt"), deadlock, sizeof deadlock - 1);
        test_write_file(test_path("junk.txt"), "pipeline stages=2\nrank 0: X 0 0\n", 31);
        test_write_file(test_path("vodd.txt"), vodd, sizeof vodd - 1);
        snprintf(sets, sizeof sets, "--set parallel_config.pipeline_stage=2 --pp-schedule %s", test_path("own.txt"));
        pp_row("pp2 own schedule file", pp_base, 2, sets);
        test_write_file(test_path("posted.txt"), posted, sizeof posted - 1);
        snprintf(sets, sizeof sets, "--set parallel_config.pipeline_stage=2 --pp-schedule %s", test_path("posted.txt"));
        pp_row("pp2 receives posted ahead", pp_base, 2, sets);
        for (b = 0; b < sizeof bads / sizeof bads[0]; b++) {
            const int rc = run_cmd(0, "%s --steps 1 --set parallel_config.pipeline_stage=2 %s --pp-schedule %s", pp_base,
                                   bads[b].extra, test_path(bads[b].file));
            CHECK_MSG(rc == 2, "%s: exit status %d, want 2 (stderr: %s)", bads[b].name, rc, err_text);
            CHECK_MSG(strstr(err_text, bads[b].needle) != NULL, "%s: stderr lacks \"%s\": %s", bads[b].name,
                      bads[b].needle, err_text);
        }
    }
    /* multi-copy: micro-batch_num 2 x copies K against one device with 2K micro-batches */
    pp_row("tp2 copies 2", pp_base, 4, "--set parallel_config.micro_batch_num=2 --set micro_batch_interleave_num=2 "
                                       "--set parallel_config.model_parallel=2");
    pp_row("tp2 sp copies 2", pp_base, 4, "--set parallel_config.micro_batch_num=2 --set micro_batch_interleave_num=2 "
                                          "--set parallel_config.model_parallel=2 --set parallel_config.use_seq_parallel=true");
    pp_row("tp2 sp copies 3", pp_base, 6, "--set parallel_config.micro_batch_num=2 --set micro_batch_interleave_num=3 "
                                          "--set parallel_config.model_parallel=2 --set parallel_config.use_seq_parallel=true");
    pp_row("tp2 sp fine-grain 2", pp_base, 4, "--set parallel_config.micro_batch_num=2 "
                                              "--set parallel_config.fine_grain_interleave=2 "
                                              "--set parallel_config.model_parallel=2 --set parallel_config.use_seq_parallel=true");
    pp_row("dp2 x tp2 sp fine-grain 3 zero2", pp_base, 6,
           "--set parallel_config.micro_batch_num=2 --set model.model_config.fine_grain_interleave=3 "
           "--set parallel_config.data_parallel=2 --set parallel_config.model_parallel=2 "
           "--set parallel_config.use_seq_parallel=true --set parallel.enable_parallel_optimizer=true "
           "--set parallel.parallel_optimizer_config.optimizer_level=level2");
    pp_row("dp2 x tp2 sp copies 2 zero2", pp_base, 4,
           "--set parallel_config.micro_batch_num=2 --set micro_batch_interleave_num=2 "
           "--set parallel_config.data_parallel=2 --set parallel_config.model_parallel=2 "
           "--set parallel_config.use_seq_parallel=true --set parallel.enable_parallel_optimizer=true "
           "--set parallel.parallel_optimizer_config.optimizer_level=level2");
    if (mpi_run("dp2 x pp2 mpirun -np 4")) {
        pp_mpi_row("dp2 x pp2 zb-h1 mpirun -np 4", 3, "--set parallel_config.pipeline_stage=2 "
                   "--set parallel_config.data_parallel=2 --set parallel.pipeline_config.pipeline_scheduler=zb-h1");
        pp_mpi_row("pp4 1f1b mpirun -np 4", 8, "--set parallel_config.pipeline_stage=4");
        pp_mpi_row("dp2 x tp2 sp copies 2 mpirun -np 4", 4, "--set parallel_config.micro_batch_num=2 "
                   "--set micro_batch_interleave_num=2 --set parallel_config.data_parallel=2 "
                   "--set parallel_config.model_parallel=2 --set parallel_config.use_seq_parallel=true");
    }
    test_pipeline_chunked_kinds();
}

/* The V schedules (>>pipeline's v placement: rank 0 holds the first and the
   last virtual stage, so the embedding and the head; the V's turn on the
   last rank is a local copy): zbv and dualpipev, 2 chunks per rank, against
   one device with the same micro-batches: m = p, 2p and odd where the kind
   allows (dualpipev needs m >= 2p; 24 samples split into 3, a batch of 20
   into 5), with dp and with tp, and one mpirun row per kind. */
#define PP_V(k) "--set model.model_config.pp_interleave_num=2 --set parallel.pipeline_config.pipeline_interleave=true " \
                "--set parallel.pipeline_config.pipeline_scheduler=" k
static void test_pipeline_v(void) {
    static char base8[1024], base20[1024];
    snprintf(base8, sizeof base8, "%s --set model.model_config.num_layers=8", pp_base);
    snprintf(base20, sizeof base20, "%s --set runner_config.global_batch_size=20", pp_base);
    pp_row("pp2 zbv mb2", pp_base, 2, "--set parallel_config.pipeline_stage=2 " PP_V("zbv"));
    pp_row("pp2 zbv mb4", pp_base, 4, "--set parallel_config.pipeline_stage=2 " PP_V("zbv"));
    pp_row("pp2 zbv mb3", pp_base, 3, "--set parallel_config.pipeline_stage=2 " PP_V("zero_bubble_v"));
    pp_row("pp4 zbv mb4", base8, 4, "--set parallel_config.pipeline_stage=4 " PP_V("zbv"));
    pp_row("pp4 zbv mb8", base8, 8, "--set parallel_config.pipeline_stage=4 " PP_V("zbv"));
    pp_row("pp4 zbv mb3 (< stages)", base8, 3, "--set parallel_config.pipeline_stage=4 " PP_V("zbv"));
    pp_row("pp2 dualpipev mb4", pp_base, 4, "--set parallel_config.pipeline_stage=2 " PP_V("dualpipev"));
    pp_row("pp2 dualpipev mb5", base20, 5, "--set parallel_config.pipeline_stage=2 " PP_V("dualpipev"));
    pp_row("pp4 dualpipev mb8", base8, 8, "--set parallel_config.pipeline_stage=4 " PP_V("dualpipev"));
    pp_row("pp4 dualpipev mb12", base8, 12, "--set parallel_config.pipeline_stage=4 " PP_V("dualpipev"));
    pp_row("dp2 x pp2 zbv mb4", pp_base, 4, "--set parallel_config.pipeline_stage=2 --set parallel_config.data_parallel=2 "
                                            PP_V("zbv"));
    pp_row("tp2 x pp2 sp dualpipev mb4", pp_base, 4, "--set parallel_config.pipeline_stage=2 "
                                                     "--set parallel_config.model_parallel=2 "
                                                     "--set parallel_config.use_seq_parallel=true " PP_V("dualpipev"));
    { /* a placement of one's own (--pp-schedule): ZBV's p 2 m 2 order with the ranks swapped, placement
         1,0,0,1, so rank 1 holds the embedding, the first and the last stage and the head */
        par_pp_schedule_desc sd;
        par_pp_schedule *zs = NULL;
        static char text[8192], swapped[8192], sets[700];
        char *r0, *r1;
        memset(&sd, 0, sizeof sd);
        sd.stages = 2, sd.micro_batches = 2, sd.kind = PAR_PP_ZBV;
        CHECK_OK(par_pp_schedule_make(&sd, &zs));
        if (zs) par_pp_schedule_format(zs, text, sizeof text);
        par_pp_schedule_destroy(zs);
        r0 = strstr(text, "rank 0:"), r1 = strstr(text, "rank 1:");
        CHECK(r0 && r1 && strstr(text, "placement v\n") && r1 > r0);
        if (r0 && r1 && r1 > r0) {
            snprintf(swapped, sizeof swapped, "pipeline stages=2 chunks=2 micro_batches=2\nplacement 1,0,0,1\n"
                     "rank 1:%.*srank 0:%s", (int)(r1 - r0 - 7), r0 + 7, r1 + 7);
            test_write_file(test_path("swapped.txt"), swapped, strlen(swapped));
            snprintf(sets, sizeof sets, "--set parallel_config.pipeline_stage=2 "
                     "--set model.model_config.pp_interleave_num=2 --set parallel.pipeline_config.pipeline_interleave=true "
                     "--pp-schedule %s", test_path("swapped.txt"));
            pp_row("pp2 own schedule, placement 1,0,0,1", pp_base, 2, sets);
        }
    }
    if (mpi_run("V schedules mpirun -np 4")) {
        pp_mpi_row("dp2 x pp2 zbv mpirun -np 4", 3, "--set parallel_config.pipeline_stage=2 "
                   "--set parallel_config.data_parallel=2 " PP_V("zbv"));
        pp_mpi_row_on("pp4 dualpipev mpirun -np 4", base8, 4, 8, "--set parallel_config.pipeline_stage=4 " PP_V("dualpipev"));
    }
}

/* ---- recomputation ------------------------------------------------------------- */

#define RC_STEPS 4
static const char *const rc_modes[3] = {"none", "full", "selective"};
static const char *const rc_sets[3] = {"", "--set recompute_config.recompute=true",
                                       "--set recompute_config.select_recompute=true"};

/* One configuration three times: keeping every activation, with full and
   with selective recomputation. The recomputed runs must train the same
   bits (every step's loss and gradient norm as printed, and the final
   weights, saved sharded and exported on one rank, byte for byte), each
   run's memory plan must hold, activations must shrink, and at full
   recomputation (layers L) they must be at most 1/L of none plus one
   layer's working set (the recompute area, counted as workspace) - except
   with a split backward (`split`: zero bubble), whose weight-gradient half
   holds each layer's linear inputs and output gradients from I to W
   whatever is recomputed: what zero bubble costs in memory. */
static void rc_row(const char *name, const char *base, int L, int split, const char *sets, double *none_loss) {
    static int rows;
    double loss[3][RC_STEPS + 1], gnorm[3][RC_STEPS + 1];
    int64_t act[3] = {0}, work[3] = {0};
    char metrics[3][512], weights[3][512], dir[512];
    int k, rc, ok[3] = {0};
    for (k = 0; k < 3; k++) {
        snprintf(metrics[k], sizeof metrics[k], "%s/rc%d_%d.jsonl", test_dir, rows, k);
        snprintf(weights[k], sizeof weights[k], "%s/rc%d_%d.safetensors", test_dir, rows, k);
        snprintf(dir, sizeof dir, "%s/rc%d_%d", test_dir, rows, k);
        rc = run_cmd(0, "%s --steps %d %s %s --metrics %s --save-dir %s", base, RC_STEPS, sets, rc_sets[k], metrics[k], dir);
        CHECK_MSG(rc == 0, "%s recompute %s failed: %s", name, rc_modes[k], err_text);
        if (rc != 0) continue;
        /* the one-rank export of the sharded checkpoint: the same file whatever saved it */
        rc = run_cmd(0, "%s --steps 0 --init-from %s --save %s", base, dir, weights[k]);
        CHECK_MSG(rc == 0, "%s recompute %s: export failed: %s", name, rc_modes[k], err_text);
        ok[k] = rc == 0 && read_metrics(metrics[k], loss[k], gnorm[k], RC_STEPS + 1) == RC_STEPS;
        CHECK_MSG(ok[k], "%s recompute %s: no %d steps in %s", name, rc_modes[k], RC_STEPS, metrics[k]);
        check_plan_holds(name, metrics[k]);
        act[k] = read_memory(metrics[k], "memory_plan", "activations");
        work[k] = read_memory(metrics[k], "memory_plan", "workspace");
    }
    rows++;
    if (none_loss) memcpy(none_loss, loss[0], sizeof loss[0]);
    if (none_loss && !ok[0]) none_loss[0] = NAN;
    for (k = 1; k < 3; k++) {
        if (!ok[0] || !ok[k]) continue;
        CHECK_MSG(!memcmp(loss[0], loss[k], RC_STEPS * sizeof(double)) && !memcmp(gnorm[0], gnorm[k], RC_STEPS * sizeof(double)),
                  "%s: recompute %s changed a loss or grad norm (step 0: %.9g vs %.9g)", name, rc_modes[k], loss[k][0],
                  loss[0][0]);
        CHECK_MSG(test_files_identical(weights[0], weights[k]), "%s: recompute %s trained other weights than none (%s, %s)",
                  name, rc_modes[k], weights[k], weights[0]);
        CHECK_MSG(act[k] < act[0], "%s: recompute %s keeps %lld activation bytes, none %lld", name, rc_modes[k],
                  (long long)act[k], (long long)act[0]);
    }
    if (ok[0] && ok[1] && !split)
        CHECK_MSG((double)act[1] <= (double)act[0] / L + (double)(work[1] - work[0]),
                  "%s: full recompute keeps %lld activation bytes > none's %lld / %d layers + the recompute area %lld",
                  name, (long long)act[1], (long long)act[0], L, (long long)(work[1] - work[0]));
    printf("  %-30s activations MiB none %.3f, full %.3f, selective %.3f; recompute area full %.3f, selective %.3f\n",
           name, act[0] / 1048576.0, act[1] / 1048576.0, act[2] / 1048576.0, (work[1] - work[0]) / 1048576.0,
           (work[2] - work[0]) / 1048576.0);
}

static const struct {
    const char *name, *sets;
} rc_cases[] = {
        {"one device", ""},
        {"dp2 zero2 micro2", "--set parallel_config.data_parallel=2 --set parallel_config.micro_batch_num=2 "
                             "--set parallel.enable_parallel_optimizer=true "
                             "--set parallel.parallel_optimizer_config.optimizer_level=level2"},
        {"tp2 sp", "--set parallel_config.model_parallel=2 --set parallel_config.use_seq_parallel=true"},
        {"tp2 (no sp)", "--set parallel_config.model_parallel=2"},
        {"cp2 ring zigzag", "--set parallel_config.context_parallel=2"},
        {"cp2 ulysses", "--set parallel_config.context_parallel=2 --set parallel_config.context_parallel_algo=ulysses_cp"},
        {"pp2 1f1b mb2", "--set parallel_config.pipeline_stage=2 --set parallel_config.micro_batch_num=2"},
        {"pp2 gpipe mb3", "--set parallel_config.pipeline_stage=2 --set parallel_config.micro_batch_num=3 "
                          "--set parallel.pipeline_config.pipeline_scheduler=gpipe"},
        {"pp2 zb-h1 mb4", "--set parallel_config.pipeline_stage=2 --set parallel_config.micro_batch_num=4 "
                          "--set parallel.pipeline_config.pipeline_scheduler=zb-h1"},
        {"pp2 interleaved mb2", "--set parallel_config.pipeline_stage=2 --set parallel_config.micro_batch_num=2 "
                                "--set model.model_config.pp_interleave_num=2 --set parallel.pipeline_config.pipeline_interleave=true"},
        {"tp2 sp copies 2", "--set parallel_config.micro_batch_num=2 --set micro_batch_interleave_num=2 "
                            "--set parallel_config.model_parallel=2 --set parallel_config.use_seq_parallel=true"},
        {"tp2 sp fine-grain 2", "--set parallel_config.micro_batch_num=2 --set parallel_config.fine_grain_interleave=2 "
                                "--set parallel_config.model_parallel=2 --set parallel_config.use_seq_parallel=true"},
        {"tp2 x pp2 sp zb-h1 mb4", "--set parallel_config.pipeline_stage=2 --set parallel_config.model_parallel=2 "
                                   "--set parallel_config.use_seq_parallel=true --set parallel_config.micro_batch_num=4 "
                                   "--set parallel.pipeline_config.pipeline_scheduler=zb-h1"},
        {"dp2 x cp2 x pp2 zb-h1 zero1", "--set parallel_config.pipeline_stage=2 --set parallel_config.data_parallel=2 "
                                        "--set parallel_config.context_parallel=2 --set parallel_config.micro_batch_num=2 "
                                        "--set parallel.enable_parallel_optimizer=true "
                                        "--set parallel.pipeline_config.pipeline_scheduler=zb-h1"},
        {"pp2 looped_bfs mb3", "--set parallel_config.pipeline_stage=2 --set parallel_config.micro_batch_num=3 "
                               "--set model.model_config.pp_interleave_num=2 --set parallel.pipeline_config.pipeline_interleave=true "
                               "--set parallel.pipeline_config.pipeline_scheduler=looped_bfs"},
        {"pp2 zb1p mb4", "--set parallel_config.pipeline_stage=2 --set parallel_config.micro_batch_num=4 "
                         "--set model.model_config.pp_interleave_num=2 --set parallel.pipeline_config.pipeline_interleave=true "
                         "--set parallel.pipeline_config.pipeline_scheduler=zb1p"},
};

/* A schedule that splits its backward (I, then W later): a layer keeps what W reads whatever the mode. */
static int rc_splits(const char *sets) { return strstr(sets, "zb-h1") != NULL || strstr(sets, "zb1p") != NULL; }

static void test_recompute(void) {
    size_t i;
    int rc;
    for (i = 0; i < sizeof rc_cases / sizeof rc_cases[0]; i++)
        rc_row(rc_cases[i].name, pp_base, 4, rc_splits(rc_cases[i].sets), rc_cases[i].sets, NULL);
    /* MindFormers' lists: per stage (stage 0 recomputes its first layer fully, stage 1 its first
       fully and its second selectively) and per chunk under the interleaved schedule (one layer a
       virtual stage: chunk 0's stage 0 and chunk 1's stage 1 fully, the other two selectively):
       every mode in one run, still the same bits */
    {
        static const struct {
            const char *name, *pp, *lists;
        } lists[] = {
            {"pp2 lists", "--set parallel_config.pipeline_stage=2 --set parallel_config.micro_batch_num=2",
             "--set recompute_config.recompute=[1,1] --set recompute_config.select_recompute=[0,2]"},
            {"pp2 interleaved chunk lists",
             "--set parallel_config.pipeline_stage=2 --set parallel_config.micro_batch_num=2 "
             "--set model.model_config.pp_interleave_num=2 --set parallel.pipeline_config.pipeline_interleave=true",
             "--set recompute_config.recompute=[[1,0],[0,1]] --set recompute_config.select_recompute=[[0,1],[1,0]]"}};
        size_t li;
        for (li = 0; li < sizeof lists / sizeof lists[0]; li++) {
            double a[RC_STEPS + 1], ag[RC_STEPS + 1], b[RC_STEPS + 1], bg[RC_STEPS + 1];
            rc = run_cmd(0, "%s --steps %d %s --metrics %s", pp_base, RC_STEPS, lists[li].pp, test_path("rcl0.jsonl"));
            CHECK_MSG(rc == 0, "%s, none: %s", lists[li].name, err_text);
            rc = run_cmd(0, "%s --steps %d %s %s --metrics %s", pp_base, RC_STEPS, lists[li].pp, lists[li].lists,
                         test_path("rcl1.jsonl"));
            CHECK_MSG(rc == 0, "%s: %s", lists[li].name, err_text);
            CHECK_MSG(read_metrics(test_path("rcl0.jsonl"), a, ag, RC_STEPS + 1) == RC_STEPS &&
                          read_metrics(test_path("rcl1.jsonl"), b, bg, RC_STEPS + 1) == RC_STEPS &&
                          !memcmp(a, b, RC_STEPS * sizeof(double)) && !memcmp(ag, bg, RC_STEPS * sizeof(double)),
                      "%s: losses or grad norms differ from none", lists[li].name);
            check_plan_holds(lists[li].name, test_path("rcl1.jsonl"));
            CHECK_MSG(read_memory(test_path("rcl1.jsonl"), "memory_plan", "activations") <
                          read_memory(test_path("rcl0.jsonl"), "memory_plan", "activations"),
                      "%s: the lists saved no activation memory", lists[li].name);
        }
    }
    /* bad lists: refused before any rank starts, naming the key and the rule */
    {
        static const struct {
            const char *sets, *needle;
        } bads[] = {
            {"--set parallel_config.pipeline_stage=2 --set recompute_config.recompute=[1,1,1]",
             "recompute_config.recompute: full recompute: a list of 3 counts for 2 pipeline stages x 1 chunk"},
            {"--set parallel_config.pipeline_stage=2 --set recompute_config.select_recompute=[1,3]",
             "recompute_config.select_recompute: selective recompute counts[1] = 3: virtual stage 1 (stage 1, chunk 0) has 2 layers"},
            {"--set recompute_config.recompute=[[1],[1]]",
             "recompute_config.recompute: 2 chunk lists for 1 chunk per stage"},
            {"--set parallel_config.pipeline_stage=2 --set parallel_config.micro_batch_num=2 "
             "--set model.model_config.pp_interleave_num=2 --set parallel.pipeline_config.pipeline_interleave=true "
             "--set recompute_config.recompute=[[1,1],[1,2]]",
             "recompute_config.recompute: full recompute counts[3] = 2: virtual stage 3 (stage 1, chunk 1) has 1 layer"},
            {"--set recompute_config.recompute=[1,x]", "--set recompute_config.recompute=[1,x]: not a layer count ('x')"},
            {"--set recompute_config.select_recompute=[]", "an empty list (use false)"},
            {"--set recompute_config.recompute=[-1]", "a count of layers is in [0, 1000000]"},
        };
        for (i = 0; i < sizeof bads / sizeof bads[0]; i++) {
            rc = run_cmd(0, "%s --steps 1 %s", pp_base, bads[i].sets);
            CHECK_MSG(rc == 2 && strstr(err_text, bads[i].needle), "%s: exit %d, want 2 with \"%s\": %s", bads[i].sets,
                      rc, bads[i].needle, err_text);
        }
    }
}

/* Activation bytes per layer: the inventory behind Megatron's formulas in
   Korthikanti et al. 2022 ("Reducing Activation Recomputation in Large
   Transformer Models"), each term a parameter, so one derivation covers
   the 16-bit GPT it was written for and this f32 Llama.
   Per token, a layer keeps
   - whole on every tp rank, split over tp under sequence parallel: the two
     norm inputs and the two norm outputs (the q/k/v and MLP inputs), 4 h
     elements; dropout masks; the norms' statistics;
   - split over tp: q and the attention output (h each), k and v (kv each), the
     MLP's ffn-wide tensors; per head, the attention scores kept for backward
     (per key) and the softmax statistics. */
typedef struct act_terms {
    double elem;        /* bytes per stored element: 2 (16-bit), 4 (f32) */
    double kv;          /* width of k and of v: h, or kv heads x head dim (GQA) */
    double mlp_tensors; /* ffn-wide tensors kept: 2 (GeLU in, out), 3 (SwiGLU gate, up, product) */
    double ffn;         /* 4 h for GPT */
    double mask_bytes;  /* dropout mask bytes per token per unit of h: 2 (after attention, after MLP) */
    double score_bytes; /* per head, key and token: 5 (scores 2, softmax 2, dropout mask 1); 0 in flash form */
    double norm_stats;  /* bytes per token (Megatron leaves them out) */
    double head_stats;  /* bytes per token and head: the LSE a flash backward needs */
} act_terms;

static double layer_act_bytes(const act_terms *m, double s, double b, double h, double a, double t, int sp) {
    const double whole = m->elem * 4 * h + m->mask_bytes * h + m->norm_stats;
    const double split = m->elem * (2 * h + 2 * m->kv + m->mlp_tensors * m->ffn) + a * (m->score_bytes * s + m->head_stats);
    return s * b * (sp ? whole / t : whole) + s * b * split / t;
}

/* GPT as the paper's formulas count it */
static const act_terms gpt16 = {2, -1 /* = h */, 2, -1 /* = 4 h */, 2, 5, 0, 0};

static double gpt16_layer_bytes(double s, double b, double h, double a, double t, int sp) {
    act_terms m = gpt16;
    m.kv = h, m.ffn = 4 * h;
    return layer_act_bytes(&m, s, b, h, a, t, sp);
}

/* Memory under tensor and sequence parallel, on the tp test model (hidden 64,
   16 heads of 4, 8 kv heads, ffn 176, 8 x 64 tokens per micro-batch):
   parameter bytes per rank fall as 1/tp except the replicated tensors; planned
   activations equal the measured ones; with sequence parallel they fall as 1/tp;
   per layer (the difference of 2-layer and 1-layer runs) they are what the
   paper's derivation gives with this model's terms. */
static void test_tp_memory(void) {
    static const int cases[][2] = {{1, 0}, {2, 0}, {2, 1}, {4, 0}, {4, 1}, {8, 0}, {8, 1}};
    const double s = 64, b = 8, h = 64, a = 16;
    const act_terms ours = {4, 8 * 4, 3, 176, 0, 0, 2 * 4, 4};
    const int64_t replicated = (256 * 64 + 5 * 64) * 4; /* embedding (vocab_emb_dp) and the 5 norms */
    int64_t p1 = -1, a1 = -1;
    size_t i;
    int k;
    /* the derivation with GPT's terms is the paper's formulas, term for term */
    for (k = 0; k < 4; k++) {
        const double ss = 512 << k, bb = 1 + k, hh = 1024 << k, aa = 8 << k, t = 1 << k;
        const double tp_alone = ss * bb * hh * (10 + 24 / t + 5 * aa * ss / (hh * t));
        const double tp_sp = ss * bb * hh / t * (34 + 5 * aa * ss / hh);
        CHECK_MSG(fabs(gpt16_layer_bytes(ss, bb, hh, aa, t, 0) / tp_alone - 1) < 1e-12 &&
                      fabs(gpt16_layer_bytes(ss, bb, hh, aa, t, 1) / tp_sp - 1) < 1e-12,
                  "GPT terms give %.0f / %.0f, the paper %.0f / %.0f", gpt16_layer_bytes(ss, bb, hh, aa, t, 0),
                  gpt16_layer_bytes(ss, bb, hh, aa, t, 1), tp_alone, tp_sp);
    }
    printf("  %-9s %12s %12s %14s %14s %16s\n", "tp memory", "params", "activations", "per layer", "formula (ours)",
           "formula (GPT16)");
    for (i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const int tp = cases[i][0], sp = cases[i][1];
        int64_t pp = 0, act[2] = {0, 0};
        double per_layer, formula;
        int layers;
        for (layers = 1; layers <= 2; layers++) {
            int64_t ap, am;
            int rc = run_cmd(0, "%s --steps 1 --set model.model_config.num_layers=%d --set parallel_config.model_parallel=%d "
                                "--set parallel_config.use_seq_parallel=%s --metrics %s",
                             tp_base, layers, tp, sp ? "true" : "false", test_path("tpmem.jsonl"));
            CHECK_MSG(rc == 0, "tp %d sp %d layers %d memory run failed: %s", tp, sp, layers, err_text);
            pp = read_memory(test_path("tpmem.jsonl"), "memory_plan", "params");
            ap = read_memory(test_path("tpmem.jsonl"), "memory_plan", "activations");
            am = read_memory(test_path("tpmem.jsonl"), "memory_peak", "activations");
            CHECK_MSG(ap == am && ap > 0, "tp %d sp %d layers %d: activations planned %lld, measured %lld", tp, sp,
                      layers, (long long)ap, (long long)am);
            act[layers - 1] = am;
            {
                char what[64];
                snprintf(what, sizeof what, "tp %d sp %d layers %d", tp, sp, layers);
                check_plan_holds(what, test_path("tpmem.jsonl"));
            }
        }
        if (tp == 1) p1 = pp, a1 = act[1];
        CHECK_MSG(pp * tp - p1 == (tp - 1) * replicated, "tp %d: %lld parameter bytes per rank (tp 1: %lld)", tp,
                  (long long)pp, (long long)p1);
        if (sp)
            CHECK_MSG(fabs((double)(act[1] * tp) / (double)a1 - 1.0) < 0.05,
                      "tp %d + sp: %lld activation bytes per rank, x%d = %.3f of tp 1's %lld", tp, (long long)act[1], tp,
                      (double)(act[1] * tp) / (double)a1, (long long)a1);
        per_layer = (double)(act[1] - act[0]);
        formula = layer_act_bytes(&ours, s, b, h, a, tp, sp);
        CHECK_MSG(fabs(per_layer / formula - 1.0) < 0.10, "tp %d sp %d: %.0f activation bytes per layer, formula %.0f",
                  tp, sp, per_layer, formula);
        printf("  tp %d %-4s %12lld %12lld %14.0f %14.0f %16.0f\n", tp, sp ? "sp" : "", (long long)pp,
               (long long)act[1], per_layer, formula, gpt16_layer_bytes(s, b, h, a, tp, sp));
    }
}

static void test_bad_input(void) {
    const char *base = "--config examples/configs/gqa_ref.yaml --data tests/ref/gqa_data.txt --steps 1";
    const char *init = "tests/ref/gqa_init.safetensors";
    char buf[4096];
    FILE *f;
    size_t n;
    int rc;
    test_write_file(test_path("bad.yaml"), "model:\n  model_config: [1, 2\n", 30);
    bad("malformed yaml", "bad.yaml", "--config %s --data tests/ref/gqa_data.txt", test_path("bad.yaml"));
    test_write_file(test_path("badval.yaml"), "model:\n  model_config:\n    num_layers: two\n", 43);
    bad("invalid yaml value", "num_layers", "--config %s --data tests/ref/gqa_data.txt", test_path("badval.yaml"));
    bad("missing config", "nope.yaml", "--config %s --data tests/ref/gqa_data.txt", test_path("nope.yaml"));
    bad("invalid --set", "num_layers", "%s --set model.model_config.num_layers=abc", base);
    bad("unknown --set key", "hiden_size", "%s --set model.model_config.hiden_size=8", base);
    bad("batch not divisible by dp", "batch_size", "%s --set parallel_config.data_parallel=3 --set runner_config.global_batch_size=4", base);
    bad("not implemented", "pipeline_stage", "%s --set parallel_config.pipeline_stage=2", base);
    /* tensor-parallel degrees must divide every split dim (gqa_ref: 4 heads, 2 kv heads, hidden 32,
       ffn 88, vocab 256, seq 16) */
    bad("tp vs heads", "num_heads = 4 is not divisible", "%s --set parallel_config.model_parallel=3", base);
    bad("tp vs kv heads", "n_kv_heads = 2 is smaller than", "%s --set parallel_config.model_parallel=4", base);
    /* (hidden = heads x head dim, so a degree dividing the heads divides hidden too) */
    bad("tp vs ffn", "intermediate_size = 87 is not divisible",
        "%s --set parallel_config.model_parallel=2 --set model.model_config.intermediate_size=87", base);
    bad("tp vs vocab", "vocab_size = 257 is not divisible",
        "%s --set parallel_config.model_parallel=2 --set model.model_config.vocab_size=257", base);
    bad("tp vs seq", "seq_length = 15 is not divisible",
        "%s --set parallel_config.model_parallel=2 --set model.model_config.seq_length=15 "
        "--set parallel_config.use_seq_parallel=true", base);
    /* context parallel (gqa_ref: seq 16, 4 heads, 2 kv heads) */
    bad("cp vs seq", "seq_length = 16 is not divisible by parallel_config.context_parallel (3)",
        "%s --set parallel_config.context_parallel=3", base);
    bad("cp zigzag chunks", "does not split into 2 x 16 = 32 zigzag chunks",
        "%s --set parallel_config.context_parallel=16", base);
    bad("cp ulysses vs heads", "4 heads per rank are not divisible by the Ulysses degree 8",
        "%s --set parallel_config.context_parallel=8 --set parallel_config.context_parallel_algo=ulysses_cp", base);
    bad("cp algorithm", "not one of colossalai_cp, ulysses_cp, hybrid_cp",
        "%s --set parallel_config.context_parallel=2 --set parallel_config.context_parallel_algo=ring_cp", base);
    bad("cp ulysses degree", "context_parallel = 4 is not divisible by parallel_config.ulysses_degree_in_cp (3)",
        "%s --set parallel_config.context_parallel=4 --set parallel_config.context_parallel_algo=hybrid_cp "
        "--set parallel_config.ulysses_degree_in_cp=3", base);
    bad("unknown option", "--bogus", "%s --bogus", base);
    bad("nccl backend", "nccl", "%s --backend nccl", base);
    bad("cuda-threads backend", "--backend cuda-threads needs the CUDA build of the trainer",
        "%s --backend cuda-threads", base);
    bad("unknown backend", "--backend gloo: must be threads, mpi, nccl or cuda-threads", "%s --backend gloo", base);
    bad("missing data", "nope.txt", "--config examples/configs/gqa_ref.yaml --data %s --steps 1", test_path("nope.txt"));
    test_write_file(test_path("short.txt"), "0123456789", 10);
    bad("short data", "short.txt", "--config examples/configs/gqa_ref.yaml --data %s --steps 1", test_path("short.txt"));
    bad("no data", "--data", "--config examples/configs/gqa_ref.yaml --steps 1");
    bad("unwritable --trace", "--trace /nonexistent_dir_par/t.json: its directory is not writable",
        "%s --trace /nonexistent_dir_par/t.json", base);
    /* corrupt checkpoints */
    f = fopen(init, "rb");
    n = f ? fread(buf, 1, sizeof buf, f) : 0;
    if (f) fclose(f);
    CHECK(n == sizeof buf);
    test_write_file(test_path("trunc.safetensors"), buf, sizeof buf);
    bad("truncated safetensors", "trunc.safetensors", "%s --init-from %s", base, test_path("trunc.safetensors"));
    test_write_file(test_path("hdr.safetensors"), "\x10\0\0\0\0\0\0\0{not json at all", 24);
    bad("bad header", "hdr.safetensors", "%s --init-from %s", base, test_path("hdr.safetensors"));
    {   /* one flipped bit in the last tensor's data of a file we wrote (PyTorch's carry
           no checksums): caught by its checksum before any rank starts */
        size_t len = 0;
        unsigned char *whole = NULL;
        rc = run_cmd(0, "%s --save %s", base, test_path("flip.safetensors"));
        CHECK_MSG(rc == 0, "saving the file to damage: %s", err_text);
        whole = test_read_file(test_path("flip.safetensors"), &len);
        CHECK(whole != NULL && len > 100);
        if (whole && len > 100) {
            whole[len - 3] ^= 0x10;
            test_write_file(test_path("flip.safetensors"), whole, len);
            bad("damaged tensor data", "checksum mismatch in tensor", "%s --init-from %s", base,
                test_path("flip.safetensors"));
        }
        free(whole);
    }
    bad("wrong shapes", "shape", "%s --init-from %s --set model.model_config.intermediate_size=96", base, init);
    bad("missing tensor", "model.layers.2", "%s --init-from %s --set model.model_config.num_layers=3", base, init);
    bad("unexpected tensor", "unexpected tensor model.layers.1", "%s --init-from %s --set model.model_config.num_layers=1",
        base, init);
    /* unknown keys in a file are warnings: the run goes on */
    test_write_file(test_path("warn.yaml"), "model:\n  model_config:\n    hiden_size: 32\n", 41);
    rc = run_cmd(0, "--config %s --data tests/ref/gqa_data.txt --steps 1 --quiet", test_path("warn.yaml"));
    CHECK_MSG(rc == 0 && strstr(err_text, "hiden_size"), "unknown YAML key: exit %d, stderr %s", rc, err_text);
    if (mpi_run("world-size mismatch mpirun -np 3")) {
        char cmd[2048];
        snprintf(cmd, sizeof cmd, "ASAN_OPTIONS=detect_leaks=0 %s -np 3 %s --backend mpi %s --set parallel_config.data_parallel=2", mpirun,
                 train_bin, base);
        rc = run_cmd(1, "%s", cmd);
        CHECK_MSG(rc == 2 && strstr(err_text, "mpirun -np 2"), "world-size mismatch: exit %d, stderr %s", rc, err_text);
    }
}

/* ---- MindSpore keys that change what a run computes -------------------------------- */

static void nap_50ms(void) {
    struct timespec ts = {0, 50000000};
    nanosleep(&ts, NULL);
}

/* One run per checkpoint directory (issue 27): while a run trains into a
   --save-dir, a second run on it is refused at start naming the first, and a
   resume from it is refused (it could mix two checkpoints); once the first is
   killed its lock is stale, and the resume loads the newest complete
   checkpoint. */
static void test_one_run_per_dir(void) {
    char cmd[4096], lock[600], pidtext[64] = "", dir[512];
    int rc, i;
    snprintf(dir, sizeof dir, "%s", test_path("owned")); /* test_path's buffer is reused */
    snprintf(lock, sizeof lock, "%s/.lock", dir);
    snprintf(cmd, sizeof cmd, "%s %s --steps 100000 --save-dir %s --save-every 50 >/dev/null 2>&1 </dev/null & echo $! > %s",
             train_bin, eq_base, dir, test_path("owner.pid"));
    CHECK(system(cmd) == 0);
    for (i = 0; i < 200 && access(lock, F_OK) != 0; i++) nap_50ms(); /* its start-up */
    CHECK_MSG(access(lock, F_OK) == 0, "the first run took no lock on %s", dir);
    read_file_text(test_path("owner.pid"), pidtext, sizeof pidtext);
    rc = run_cmd(0, "%s --steps 2 --save-dir %s", eq_base, dir);
    CHECK_MSG(rc != 0 && strstr(err_text, "belongs to another run (pid=") && strstr(err_text, dir),
              "a second run on the same --save-dir: exit %d, %s", rc, err_text);
    for (i = 0; i < 200 && !test_file_exists(test_path("owned/latest")); i++) nap_50ms();
    rc = run_cmd(0, "%s --steps 1 --init-from %s", eq_base, dir);
    CHECK_MSG(rc != 0 && strstr(err_text, "is being written by another run (pid="),
              "a resume while the owner saves: exit %d, %s", rc, err_text);
    snprintf(cmd, sizeof cmd, "kill -9 %ld; while kill -0 %ld 2>/dev/null; do sleep 0.05; done", atol(pidtext), atol(pidtext));
    CHECK(atol(pidtext) > 0 && system(cmd) == 0);
    rc = run_cmd(0, "%s --steps 1 --init-from %s --save-dir %s", eq_base, dir, dir);
    CHECK_MSG(rc == 0, "after the owner was killed, its lock is stale: resume failed: %s", err_text);
    CHECK_MSG(access(lock, F_OK) != 0, "the resumed run left its lock behind");
}

/* Divergence stops the run: learning_rate 1e30 makes step 1's loss nan on
   every rank; the trainer exits non-zero naming the step and the quantity,
   writes no checkpoint of that state and keeps --metrics valid JSON. */
static void test_divergence(void) {
    char line[1024];
    int rc = run_cmd(0, "%s --steps 5 --set optimizer.learning_rate=1e30 --set parallel_config.data_parallel=2 "
                        "--metrics %s --save-dir %s",
                     eq_base, test_path("nan.jsonl"), test_path("nan_ckpt"));
    CHECK_MSG(rc != 0, "learning_rate 1e30 trained on (exit 0)");
    CHECK_MSG(strstr(err_text, "step 1: the loss (the mean over the global batch) is") && strstr(err_text, "nan") &&
                  strstr(err_text, "training diverged"),
              "the error does not name the step and the value: %s", err_text);
    FILE *f = fopen(test_path("nan.jsonl"), "r");
    int lines = 0;
    while (f && fgets(line, sizeof line, f)) {
        lines++;
        CHECK_MSG(strstr(line, "nan") == NULL && strstr(line, "inf") == NULL, "--metrics holds a non-JSON number: %s", line);
    }
    if (f) fclose(f);
    CHECK_MSG(lines >= 2, "--metrics has %d lines (the plan and step 0 expected)", lines);
    char latest[512];
    snprintf(latest, sizeof latest, "%s/latest", test_path("nan_ckpt"));
    CHECK_MSG(access(latest, F_OK) != 0, "a checkpoint was written after the divergence (%s exists)", latest);
}

/* MindFormers' own Llama 2 7B pretraining file (tests/data/mindformers),
   shrunk in size only, trains as written: data_parallel 8, batch_size 1 per
   rank, gradient_accumulation_steps 8 (global batch 64), FP32StateAdamWeightDecay
   (no bias correction), use_clip_grad with MindFormers' norm 1.0, warmup_ratio,
   the FFN width and kv heads MindFormers derives (hidden 64: 256 and 4). Its
   grad norm equals one device's within 1e-4 at every step (one device: the
   same 64 samples as batch_size 8 x 8 accumulation steps). */
static const char *mf_7b = "--config tests/data/mindformers/pretrain_llama2_7b.yaml --data tests/data/train.txt "
                           "--set model.model_config.hidden_size=64 --set model.model_config.num_heads=4 "
                           "--set model.model_config.num_layers=2 --set model.model_config.vocab_size=256 "
                           "--set model.model_config.seq_length=32";

static void test_mindformers_llama2_7b(void) {
    double l8[8], g8[8], l1[8], g1[8];
    int rc = run_cmd(0, "%s --steps 4 --metrics %s", mf_7b, test_path("mf8.jsonl"));
    CHECK_MSG(rc == 0, "the Llama 2 7B file as written failed: %s", err_text);
    CHECK_MSG(strstr(out_text, "heads 4 (kv 4, head dim 16), ffn 256") != NULL, "MindFormers' derived shape: %s", out_text);
    CHECK_MSG(strstr(out_text, "global 64 = 8 data-parallel shard(s) x 8 micro-batch(es) x 1 samples") != NULL,
              "MindFormers' global batch: %s", out_text);
    CHECK_MSG(strstr(out_text, "AdamWeightDecay (MindSpore's: no bias correction), gradients clipped to norm 1") != NULL,
              "optimizer and clipping: %s", out_text);
    rc = run_cmd(0, "%s --steps 4 --set parallel_config.data_parallel=1 --set runner_config.batch_size=8 --metrics %s",
                 mf_7b, test_path("mf1.jsonl"));
    CHECK_MSG(rc == 0, "the Llama 2 7B file on one device failed: %s", err_text);
    CHECK_INT(read_metrics(test_path("mf8.jsonl"), l8, g8, 8), 4);
    CHECK_INT(read_metrics(test_path("mf1.jsonl"), l1, g1, 8), 4);
    printf("  MindFormers pretrain_llama2_7b.yaml, dp 8 x accumulation 8 vs one device:\n");
    for (int i = 0; i < 4; i++) {
        const double dg = fabs(g8[i] - g1[i]) / g1[i], dl = fabs(l8[i] - l1[i]) / l1[i];
        printf("    step %d  grad norm %.7f vs %.7f (rel %.1e), loss rel %.1e\n", i, g8[i], g1[i], dg, dl);
        CHECK_MSG(dg <= 1e-4, "step %d: dp 8 grad norm %.9g vs one device %.9g", i, g8[i], g1[i]);
        CHECK_MSG(dl <= 1e-5, "step %d: dp 8 loss %.9g vs one device %.9g", i, l8[i], l1[i]);
    }
    CHECK_MSG(g8[0] > 1.0, "step 0's grad norm %.9g should exceed the clipping norm 1 (the test must exercise it)", g8[0]);
}

/* MindSpore's gradient semantics: in semi_auto_parallel the loss is the
   global batch's mean, so the gradient is one device's whatever
   gradients_mean says (MindFormers' files all say false: the grad norm must
   not double under dp 2); in data_parallel mode false sums the ranks'
   gradients (2x the grad norm under dp 2). MindFormers' batch: batch_size per
   data-parallel rank (dp 2 x 4 = the global 8 of tiny.yaml's
   global_batch_size); parameter_broadcast and enable_alltoall change nothing. */
static void test_config_semantics(void) {
    double l1[8], g1[8], l2[8], g2[8], ls[8], gs[8];
    int rc, i;
    rc = run_cmd(0, "%s --steps 3 --set parallel_config.data_parallel=2 --metrics %s", eq_base, test_path("gm1.jsonl"));
    CHECK_MSG(rc == 0, "dp2 run failed: %s", err_text);
    rc = run_cmd(0, "%s --steps 3 --set parallel_config.data_parallel=2 --set parallel.gradients_mean=false --metrics %s",
                 eq_base, test_path("gm2.jsonl"));
    CHECK_MSG(rc == 0, "dp2 gradients_mean=false failed: %s", err_text);
    CHECK_INT(read_metrics(test_path("gm1.jsonl"), l1, g1, 8), 3);
    CHECK_INT(read_metrics(test_path("gm2.jsonl"), l2, g2, 8), 3);
    for (i = 0; i < 3; i++)
        CHECK_MSG(l2[i] == l1[i] && g2[i] == g1[i], "semi_auto dp 2: gradients_mean=false must be one device's gradient "
                  "(step %d: grad norm %.9g vs %.9g)", i, g2[i], g1[i]);
    rc = run_cmd(0, "%s --steps 3 --set parallel.parallel_mode=data_parallel --set parallel.full_batch=false "
                    "--set parallel_config.data_parallel=2 --set parallel.gradients_mean=false --metrics %s",
                 eq_base, test_path("gm3.jsonl"));
    CHECK_MSG(rc == 0, "data_parallel dp2 gradients_mean=false failed: %s", err_text);
    CHECK_INT(read_metrics(test_path("gm3.jsonl"), l2, g2, 8), 3);
    CHECK_MSG(fabs(g2[0] / g1[0] - 2.0) < 1e-6,
              "data_parallel mode, gradients_mean=false under dp 2: step-0 grad norm %.9g vs %.9g (want 2x)", g2[0], g1[0]);
    CHECK_MSG(l2[0] == l1[0], "the first loss does not depend on gradients_mean: %.9g vs %.9g", l2[0], l1[0]);
    rc = run_cmd(0, "%s --steps 3 --set parallel.parallel_mode=data_parallel --set parallel.full_batch=false "
                    "--set parallel_config.data_parallel=2 --set parallel.gradients_mean=true --metrics %s",
                 eq_base, test_path("gm4.jsonl"));
    CHECK_MSG(rc == 0, "data_parallel dp2 gradients_mean=true failed: %s", err_text);
    CHECK_INT(read_metrics(test_path("gm4.jsonl"), ls, gs, 8), 3);
    for (i = 0; i < 3; i++)
        CHECK_MSG(ls[i] == l1[i] && gs[i] == g1[i], "data_parallel mode, gradients_mean=true: one device's (step %d)", i);
    /* MindFormers' batch_size: per data-parallel rank */
    rc = run_cmd(0, "%s --steps 3 --set parallel_config.data_parallel=2 --set runner_config.global_batch_size=0 "
                    "--set runner_config.batch_size=4 --metrics %s", eq_base, test_path("fb.jsonl"));
    CHECK_MSG(rc == 0, "batch_size per rank failed: %s", err_text);
    CHECK_INT(read_metrics(test_path("fb.jsonl"), ls, gs, 8), 3);
    for (i = 0; i < 3; i++)
        CHECK_MSG(ls[i] == l1[i] && gs[i] == g1[i], "batch_size 4 per rank x dp 2, step %d: %.9g vs %.9g", i, ls[i], l1[i]);
    /* parameter_broadcast and enable_alltoall: the same numbers */
    rc = run_cmd(0, "%s --steps 3 --set parallel_config.data_parallel=2 --set parallel.parameter_broadcast=true "
                    "--set parallel.enable_alltoall=true --metrics %s", eq_base, test_path("pb.jsonl"));
    CHECK_MSG(rc == 0, "parameter_broadcast=true failed: %s", err_text);
    CHECK_INT(read_metrics(test_path("pb.jsonl"), ls, gs, 8), 3);
    for (i = 0; i < 3; i++) CHECK_MSG(ls[i] == l1[i], "parameter_broadcast changed step %d: %.9g vs %.9g", i, ls[i], l1[i]);
}

/* ---- trace ------------------------------------------------------------------------ */

static int count_named(const tj_trace *tr, long long pid, const char *name) {
    int i, n = 0;
    for (i = 0; i < tr->count; i++)
        if (!strcmp(tr->events[i].ph, "X") && tr->events[i].pid == pid && !strcmp(tr->events[i].name, name)) n++;
    return n;
}


/* ---- sharded checkpoints ------------------------------------------------------- */

/* Save under one configuration (--save-dir, sharded: each rank its own pieces)
   and load under another: re-exported at once (--steps 0 --save, the gathered
   consolidated files) the weights and AdamW state equal the source's own
   consolidated export bit for bit, and 5 more steps give the losses of the
   uninterrupted one-device run within the equivalence tolerance. The model
   (tp_base: 16 heads, 8 kv heads) admits tp 4 and cp 2. */
static void test_sharded_matrix(void) {
    static const struct {
        const char *name, *sets;
    } cfg[] = {
        {"1 rank", ""},
        {"dp8", "--set parallel_config.data_parallel=8"},
        {"dp4 zero2", "--set parallel_config.data_parallel=4 --set parallel.enable_parallel_optimizer=true "
                      "--set parallel.parallel_optimizer_config.optimizer_level=level2"},
        {"dp2", "--set parallel_config.data_parallel=2"},
        {"dp4 zero1", "--set parallel_config.data_parallel=4 --set parallel.enable_parallel_optimizer=true"},
        {"tp2", "--set parallel_config.model_parallel=2"},
        {"tp4 sp", "--set parallel_config.model_parallel=4 --set parallel_config.use_seq_parallel=true"},
        {"tp2 sp", "--set parallel_config.model_parallel=2 --set parallel_config.use_seq_parallel=true"},
        {"cp2", "--set parallel_config.context_parallel=2"},
        {"dp2 x tp2 zero2", "--set parallel_config.data_parallel=2 --set parallel_config.model_parallel=2 "
                            "--set parallel.enable_parallel_optimizer=true "
                            "--set parallel.parallel_optimizer_config.optimizer_level=level2"},
    };
    /* source -> target: 1 rank <-> dp 8, ZeRO-2 dp 4 -> dp 2, dp 2 -> ZeRO-1 dp 4, tp 2 -> dp 2,
       dp 2 -> tp 4 + sp, tp 2 + sp -> cp 2, cp 2 -> dp 2 x tp 2 ZeRO-2 */
    static const int pairs[][2] = {{0, 1}, {1, 0}, {2, 3}, {3, 4}, {5, 3}, {3, 6}, {7, 8}, {8, 9}};
    double base[16], g[16], loss[16];
    char dir[512], a[512], b[512];
    int saved[16] = {0};
    size_t k;
    int rc, i, n;
    rc = run_cmd(0, "%s --steps 15 --metrics %s", tp_base, test_path("shb.jsonl"));
    CHECK_MSG(rc == 0, "one-device run failed: %s", err_text);
    CHECK_INT(read_metrics(test_path("shb.jsonl"), base, g, 16), 15);
    for (k = 0; k < sizeof pairs / sizeof pairs[0]; k++) {
        const int s = pairs[k][0], t = pairs[k][1];
        char what[128], src[64];
        snprintf(what, sizeof what, "%s -> %s", cfg[s].name, cfg[t].name);
        snprintf(src, sizeof src, "shs%d.safetensors", s);
        snprintf(dir, sizeof dir, "%s/shd%d", test_dir, s);
        if (!saved[s]) { /* the source: 10 steps, saved sharded and (independently, gathered) consolidated */
            rc = run_cmd(0, "%s --steps 10 %s --save-dir %s --save %s", tp_base, cfg[s].sets, dir, test_path(src));
            CHECK_MSG(rc == 0, "%s: source run failed: %s", what, err_text);
            saved[s] = 1;
        }
        rc = run_cmd(0, "%s --steps 0 %s --init-from %s --save %s", tp_base, cfg[t].sets, dir, test_path("sht.safetensors"));
        CHECK_MSG(rc == 0, "%s: load + re-export failed: %s", what, err_text);
        CHECK_MSG(test_files_identical(test_path("sht.safetensors"), test_path(src)), "%s: weights differ after the load",
                  what);
        snprintf(a, sizeof a, "%s", test_path("sht.optimizer.safetensors"));
        snprintf(b, sizeof b, "%s/shs%d.optimizer.safetensors", test_dir, s);
        CHECK_MSG(test_files_identical(a, b), "%s: AdamW state or step differs after the load", what);
        rc = run_cmd(0, "%s --steps 5 %s --init-from %s --metrics %s", tp_base, cfg[t].sets, dir, test_path("shc.jsonl"));
        CHECK_MSG(rc == 0, "%s: continued run failed: %s", what, err_text);
        n = read_metrics(test_path("shc.jsonl"), loss, g, 16);
        CHECK_MSG(n == 5, "%s: %d steps after the load", what, n);
        for (i = 0; i < n && i < 5; i++)
            CHECK_MSG(fabs(loss[i] - base[10 + i]) <= EQ_LOSS_REL * fabs(base[10 + i]),
                      "%s: step %d loss %.9g, one device %.9g", what, 10 + i, loss[i], base[10 + i]);
        printf("  sharded %-26s weights and moments identical, continued losses within %.0e\n", what, EQ_LOSS_REL);
    }
}

/* A pipelined run saves sharded (each stage its own layers) and loads into
   another configuration: into one rank it re-exports exactly what one rank
   with the same micro-batches trained (the pipeline's sums are those of
   gradient accumulation), and into pp 2 x tp 2 it continues with the same
   losses. */
static void test_sharded_pipeline(void) {
    const char *mb2 = "--set parallel_config.micro_batch_num=2";
    double base[16], g[16], loss[16];
    char dir[512];
    int rc, i, n;
    snprintf(dir, sizeof dir, "%s/shpp", test_dir);
    rc = run_cmd(0, "%s %s --steps 15 --metrics %s", tp_base, mb2, test_path("shpb.jsonl"));
    CHECK_MSG(rc == 0 && read_metrics(test_path("shpb.jsonl"), base, g, 16) == 15, "one-device run: %s", err_text);
    rc = run_cmd(0, "%s %s --steps 10 --save %s", tp_base, mb2, test_path("shp1.safetensors"));
    CHECK_MSG(rc == 0, "one-device 10 steps: %s", err_text);
    rc = run_cmd(0, "%s %s --steps 10 --set parallel_config.pipeline_stage=2 --save-dir %s", tp_base, mb2, dir);
    CHECK_MSG(rc == 0, "pp2 save: %s", err_text);
    rc = run_cmd(0, "%s %s --steps 0 --init-from %s --save %s", tp_base, mb2, dir, test_path("shp2.safetensors"));
    CHECK_MSG(rc == 0, "pp2 -> 1 rank load: %s", err_text);
    CHECK_MSG(test_files_identical(test_path("shp1.safetensors"), test_path("shp2.safetensors")),
              "pp2 -> 1 rank: the weights differ from one rank's");
    rc = run_cmd(0, "%s %s --steps 5 --set parallel_config.pipeline_stage=2 --set parallel_config.model_parallel=2 "
                    "--init-from %s --metrics %s", tp_base, mb2, dir, test_path("shpc.jsonl"));
    CHECK_MSG(rc == 0, "pp2 -> pp2 x tp2 continued run: %s", err_text);
    n = read_metrics(test_path("shpc.jsonl"), loss, g, 16);
    CHECK_MSG(n == 5, "pp2 -> pp2 x tp2: %d steps", n);
    for (i = 0; i < n && i < 5; i++)
        CHECK_MSG(fabs(loss[i] - base[10 + i]) <= EQ_LOSS_REL * fabs(base[10 + i]),
                  "pp2 -> pp2 x tp2: step %d loss %.9g, one device %.9g", 10 + i, loss[i], base[10 + i]);
    bad("consolidated save under pp", "a consolidated checkpoint (one .safetensors file) of a pipelined run",
        "%s %s --steps 1 --set parallel_config.pipeline_stage=2", tp_base, mb2);
    printf("  sharded pp2 -> 1 rank: weights identical; pp2 -> pp2 x tp2: continued losses within %.0e\n", EQ_LOSS_REL);
}

/* Resume (sharded) in the same configuration is bit-identical to running
   straight through (test_round_trip checks the consolidated path and made
   the first half's --save-dir); a damaged, partial or foreign checkpoint is
   refused by name; a trainer killed (SIGKILL) while saving every step leaves
   a checkpoint that loads. */
static void test_sharded_resume(void) {
    const char *sets2 = "--set parallel_config.data_parallel=2";
    double lu[EQ_STEPS + 1], lr_[EQ_STEPS + 1], g[EQ_STEPS + 1];
    char dir[512], p[1400], cmd[2048];
    int rc, i, n;
    snprintf(dir, sizeof dir, "%s/rt_dir", test_dir);
    rc = run_cmd(0, "%s %s --steps 10 --init-from %s --metrics %s --save %s", eq_base, sets2, dir, test_path("rs.jsonl"),
                 test_path("rs.safetensors"));
    CHECK_MSG(rc == 0, "sharded resume failed: %s", err_text);
    read_metrics(test_path("u.jsonl"), lu, g, EQ_STEPS + 1);
    n = read_metrics(test_path("rs.jsonl"), lr_, g, EQ_STEPS + 1);
    CHECK_INT(n, 10);
    for (i = 0; i < n && i < 10; i++)
        CHECK_MSG(lr_[i] == lu[10 + i], "sharded resume step %d: %.9g vs %.9g", 10 + i, lr_[i], lu[10 + i]);
    CHECK_MSG(test_files_identical(test_path("rs.safetensors"), test_path("u.safetensors")),
              "sharded resume: weights not bit-identical to 20 straight steps");
    snprintf(p, sizeof p, "%s", test_path("rs.optimizer.safetensors"));
    CHECK_MSG(test_files_identical(p, test_path("u.optimizer.safetensors")), "sharded resume: AdamW state differs");
    /* one flipped byte in a tensor: the checksum error names the file and the tensor */
    snprintf(p, sizeof p, "%s/step-00000010/shard-00001-of-00002.safetensors", dir);
    {
        size_t len;
        unsigned char *bytes = test_read_file(p, &len);
        CHECK_MSG(bytes && len > 100, "no shard %s", p);
        if (bytes && len > 100) {
            bytes[len - 5] ^= 0x10;
            test_write_file(p, bytes, len);
            rc = run_cmd(0, "%s %s --steps 1 --init-from %s", eq_base, sets2, dir);
            CHECK_MSG(rc == 1 && strstr(err_text, "shard-00001-of-00002.safetensors: checksum mismatch in tensor \""),
                      "damaged shard: exit %d, stderr %s", rc, err_text);
            bytes[len - 5] ^= 0x10;
            test_write_file(p, bytes, len);
        }
        free(bytes);
    }
    /* a partial checkpoint (its index is written last): refused, naming what is missing */
    snprintf(p, sizeof p, "mv %s/step-00000010/model.safetensors.index.json %s/idx.json", dir, test_dir);
    CHECK(system(p) == 0);
    bad("partial sharded checkpoint", "which has no model.safetensors.index.json (incomplete or removed)",
        "%s --steps 1 --init-from %s", eq_base, dir);
    snprintf(p, sizeof p, "mv %s/idx.json %s/step-00000010/model.safetensors.index.json", test_dir, dir);
    CHECK(system(p) == 0);
    bad("sharded checkpoint of another model", "the checkpoint is of another model",
        "%s --steps 1 --init-from %s --set model.model_config.num_layers=3", eq_base, dir);
    bad("not a checkpoint", "not a checkpoint (no model.safetensors.index.json and no latest)",
        "%s --steps 1 --init-from %s", eq_base, test_dir);
    test_write_file(test_path("afile"), "x", 1);
    bad("--save-dir on a file", "--save-dir", "%s --steps 1 --save-dir %s", eq_base, test_path("afile"));
    bad("--save-dir without a parent", "its parent directory is not writable", "%s --steps 1 --save-dir %s/no/such",
        eq_base, test_dir);
    /* saved by 2 MPI processes (each writes its shard, rank 0 the index), loaded by one thread */
    if (mpi_run("sharded save under mpirun -np 2")) {
        snprintf(dir, sizeof dir, "%s/mpi_ck", test_dir);
        snprintf(cmd, sizeof cmd, "ASAN_OPTIONS=detect_leaks=0 %s -np 2 %s --backend mpi %s %s --steps 4 --save-dir %s --save %s",
                 mpirun, train_bin, eq_base, sets2, dir, test_path("mpi.safetensors"));
        rc = run_cmd(1, "%s", cmd);
        CHECK_MSG(rc == 0, "mpirun sharded save failed: %s", err_text);
        rc = run_cmd(0, "%s --steps 0 --init-from %s --save %s", eq_base, dir, test_path("mpi1.safetensors"));
        CHECK_MSG(rc == 0, "loading the MPI-saved checkpoint failed: %s", err_text);
        CHECK_MSG(test_files_identical(test_path("mpi1.safetensors"), test_path("mpi.safetensors")),
                  "the MPI-saved checkpoint loads different weights");
        snprintf(p, sizeof p, "%s", test_path("mpi1.optimizer.safetensors"));
        CHECK_MSG(test_files_identical(p, test_path("mpi.optimizer.safetensors")),
                  "the MPI-saved checkpoint loads different AdamW state");
    }
    /* killed mid-run while saving every step (keep 2): whatever it was doing, latest loads */
    snprintf(dir, sizeof dir, "%s/killed", test_dir);
    snprintf(cmd, sizeof cmd, "timeout -s KILL 3 %s %s %s --steps 100000 --save-dir %s --save-every 1 --keep 2", train_bin,
             eq_base, sets2, dir);
    rc = run_cmd(1, "%s", cmd);
    CHECK_MSG(rc == -1 || rc == 137, "the trainer was not killed (exit %d)", rc);
    rc = run_cmd(0, "%s --steps 0 --init-from %s --save %s", eq_base, dir, test_path("k.safetensors"));
    CHECK_MSG(rc == 0, "the checkpoint left by a killed trainer does not load: %s", err_text);
    {
        const char *at = strstr(out_text, "continuing at step");
        long long step = -1;
        if (at) sscanf(at, "continuing at step %lld", &step);
        CHECK_MSG(step > 0, "the killed trainer saved no step");
        printf("  sharded resume bit-identical; damaged, partial and foreign checkpoints refused; a trainer killed "
               "while saving every step left step %lld, which loads\n", step);
    }
}

/* The consolidated export loads, by its Hugging Face names and strictly, in
   the project's own PyTorch model (tests/ref/make_bias_ref.py, written from
   the Hugging Face definition, not from the trainer) and gives the same
   next-step loss and grad norm as build/train from the same file. */
/* One step of the trainer from the weights file `weights` (a fresh start: no
   optimizer file beside it) against the project's PyTorch model's next step
   from the same file: loss and grad norm within 1e-4 relative. */
static void next_step_against_pytorch(const char *what, const char *weights, const char *metrics) {
    double loss[4], g[4], tl = 0, tg = 0;
    const char *line;
    int rc = run_cmd(0, "--config examples/configs/gqa_ref.yaml --init-from %s --data tests/ref/gqa_data.txt --steps 1 "
                        "--quiet --metrics %s", weights, metrics);
    CHECK_MSG(rc == 0, "%s: build/train from it failed: %s", what, err_text);
    CHECK_INT(read_metrics(metrics, loss, g, 4), 1);
    rc = run_cmd(1, "/usr/bin/python3 tests/ref/make_bias_ref.py --next-step %s", weights);
    CHECK_MSG(rc == 0, "%s: the PyTorch reference failed: %s", what, err_text);
    line = strstr(out_text, "step 0 loss");
    CHECK_MSG(line && sscanf(line, "step 0 loss %lf gnorm %lf", &tl, &tg) == 2, "no step line from PyTorch: %s", out_text);
    CHECK_MSG(fabs(loss[0] - tl) <= 1e-4 * fabs(tl), "%s: next-step loss %.7f, PyTorch %.6f", what, loss[0], tl);
    CHECK_MSG(fabs(g[0] - tg) <= 1e-4 * fabs(tg), "%s: next-step grad norm %.7f, PyTorch %.6f", what, g[0], tg);
    printf("  %s: next-step loss %.7f, PyTorch %.6f (grad norm %.6f vs %.6f)\n", what, loss[0], tl, g[0], tg);
}

static void test_hf_export(void) {
    char cmd[1024];
    int rc;
    if (system("/usr/bin/python3 -c 'import torch' >/dev/null 2>&1") != 0) {
        printf("hf export in PyTorch: skipped (/usr/bin/python3 lacks torch: apt-get install python3-torch)\n");
        return;
    }
    /* test_reference's weights after 10 steps, without the optimizer file beside them: a fresh start */
    snprintf(cmd, sizeof cmd, "cp %s %s", test_path("ref.safetensors"), test_path("hf.safetensors"));
    CHECK(system(cmd) == 0);
    next_step_against_pytorch("hf export", test_path("hf.safetensors"), test_path("hf.jsonl"));
    /* the same from a bf16 export (--save-dtype): the reference widens BF16 itself; both start from
       the same rounded weights (no optimizer file: a fresh start) */
    rc = run_cmd(0, "--config examples/configs/gqa_ref.yaml --init-from %s --data tests/ref/gqa_data.txt --steps 0 "
                    "--quiet --save %s --save-dtype bf16", test_path("hf.safetensors"), test_path("hf16.safetensors"));
    CHECK_MSG(rc == 0, "the bf16 export failed: %s", err_text);
    snprintf(cmd, sizeof cmd, "rm -f %s", test_path("hf16.optimizer.safetensors"));
    CHECK(system(cmd) == 0);
    next_step_against_pytorch("hf export bf16", test_path("hf16.safetensors"), test_path("hf16.jsonl"));
}

/* --save-dtype: the weights file in bf16 / f16, each value the f32 save's rounded to
   nearest even (the rounding written here from the formats), the AdamW file beside it
   still f32 and the same; and the trainer starts again from the 16-bit file. */
static void test_save_dtype(void) {
    static const par_dtype types[2] = {PAR_BF16, PAR_F16};
    const char *base = "--config examples/configs/tiny.yaml --data tests/data/train.txt --quiet --steps 3";
    char p32[512], p16[512], o32[600], o16[600];
    int k, rc;
    snprintf(p32, sizeof p32, "%s", test_path("sd32.safetensors"));
    rc = run_cmd(0, "%s --save %s", base, p32);
    CHECK_MSG(rc == 0, "f32 save: %s", err_text);
    for (k = 0; k < 2; k++) {
        par_st_file *a = NULL, *b = NULL;
        int64_t i, n, bad = 0, total = 0;
        snprintf(p16, sizeof p16, "%s/sd16_%d.safetensors", test_dir, k);
        rc = run_cmd(0, "%s --save %s --save-dtype %s", base, p16, par_dtype_name(types[k]));
        CHECK_MSG(rc == 0, "%s save: %s", par_dtype_name(types[k]), err_text);
        if (rc != 0) continue;
        CHECK_OK(par_st_open(p32, &a));
        CHECK_OK(par_st_open(p16, &b));
        if (a && b) {
            n = par_st_count(a);
            CHECK_INT(par_st_count(b), n);
            for (i = 0; i < n && i < par_st_count(b); i++) {
                const par_st_tensor *ta = par_st_tensor_at(a, (int)i), *tb = par_st_tensor_at(b, (int)i);
                int64_t e;
                float *fa;
                uint16_t *hb;
                CHECK(ta && tb && !strcmp(ta->name, tb->name) && tb->dtype == types[k] && ta->dtype == PAR_F32);
                if (!ta || !tb) continue;
                fa = (float *)malloc((size_t)ta->numel * 4), hb = (uint16_t *)malloc((size_t)ta->numel * 2);
                CHECK_OK(par_st_read(a, ta->name, 0, NULL, 0, ta->numel, PAR_F32, fa));
                CHECK_OK(par_st_read(b, tb->name, 0, NULL, 0, ta->numel, types[k], hb));
                for (e = 0; e < ta->numel; e++, total++) bad += hb[e] != half_round(types[k], fa[e]);
                free(fa), free(hb);
            }
            CHECK_MSG(bad == 0 && total > 0, "%s: %lld of %lld weights are not the f32 save's rounded",
                      par_dtype_name(types[k]), (long long)bad, (long long)total);
        }
        if (a) par_st_close(a);
        if (b) par_st_close(b);
        /* the AdamW file is the f32 run's, byte for byte */
        snprintf(o32, sizeof o32, "%s", test_path("sd32.optimizer.safetensors"));
        snprintf(o16, sizeof o16, "%s/sd16_%d.optimizer.safetensors", test_dir, k);
        CHECK_MSG(test_files_identical(o32, o16), "%s: the optimizer file differs from the f32 save's", o16);
        rc = run_cmd(0, "--config examples/configs/tiny.yaml --data tests/data/train.txt --quiet --steps 1 --init-from %s",
                     p16);
        CHECK_MSG(rc == 0, "--init-from a %s save: %s", par_dtype_name(types[k]), err_text);
    }
    rc = run_cmd(0, "%s --save %s --save-dtype int8", base, p32);
    CHECK_MSG(rc == 2 && strstr(err_text, "--save-dtype int8: not one of f32, bf16, f16"), "bad --save-dtype: %s", err_text);
}

/* The file of a 3-step dp 2 ZeRO-1 run: both ranks, every kind of span, 3 of each per rank. */
static void check_trace_file(const char *what, const char *path) {
    static const char *const per_step[] = {"fwd embedding", "fwd block 0",   "fwd head+loss",
                                           "bwd head+loss", "bwd block 0",   "bwd embedding",
                                           "reduce_scatter bucket 0", "all_gather bucket 0", "adamw (ZeRO shard)",
                                           "load micro-batch 0", "all_reduce loss"};
    tj_trace tr;
    long long pid;
    size_t k;
    int rc = tj_load(path, &tr);
    CHECK_MSG(rc == 0, "%s: %s is not valid JSON: %s", what, path, tr.error);
    if (rc != 0) return;
    CHECK_MSG(tj_first_malformed(&tr) < 0, "%s: event %d lacks a field", what, tj_first_malformed(&tr));
    for (pid = 0; pid < 2; pid++) {
        CHECK_MSG(tj_count_spans(&tr, pid, "compute") > 0, "%s: no compute spans for pid %lld", what, pid);
        CHECK_MSG(tj_count_spans(&tr, pid, "comm") > 0, "%s: no comm spans for pid %lld", what, pid);
        for (k = 0; k < sizeof per_step / sizeof per_step[0]; k++)
            CHECK_MSG(count_named(&tr, pid, per_step[k]) == 3, "%s: pid %lld has %d \"%s\" spans, want 3", what, pid,
                      count_named(&tr, pid, per_step[k]), per_step[k]);
        CHECK_MSG(count_named(&tr, pid, "step 2") == 1, "%s: pid %lld lacks \"step 2\"", what, pid);
    }
    CHECK_INT(tj_count_spans(&tr, 2, NULL), 0);
    tj_free(&tr);
}

static void test_trace(void) {
    const char *sets = "--set parallel_config.data_parallel=2 --set parallel.enable_parallel_optimizer=true";
    int rc = run_cmd(0, "%s %s --steps 3 --trace %s", eq_base, sets, test_path("t.json"));
    CHECK_MSG(rc == 0, "--trace run failed: %s", err_text);
    CHECK_MSG(strstr(out_text, "communication: ") && strstr(out_text, "% of step time"),
              "no communication share line: %s", out_text);
    check_trace_file("threads", test_path("t.json"));
    if (mpi_run("--trace under mpirun -np 2")) {
        char cmd[2048];
        snprintf(cmd, sizeof cmd, "ASAN_OPTIONS=detect_leaks=0 %s -np 2 %s --backend mpi %s %s --steps 3 --trace %s",
                 mpirun, train_bin, eq_base, sets, test_path("tm.json"));
        rc = run_cmd(1, "%s", cmd);
        CHECK_MSG(rc == 0, "--trace under mpirun -np 2 failed: %s", err_text);
        if (rc == 0) check_trace_file("mpirun", test_path("tm.json"));
    }
}

/* ---- q/k/v biases (model.model_config.qkv_has_bias, Qwen2) ------------------------ */

#define QB_ON "--set model.model_config.qkv_has_bias=true"

/* The PyTorch fixtures of the biases (tests/ref/make_bias_ref.py, an
   independent Qwen2 model in torch with large initial biases): losses and
   grad norms per step within 1e-4 relative, final weights (biases included)
   within 2e-5, on one rank and under dp + ZeRO-2, tp + sp and cp. */
static void test_reference_bias(void) {
    static const eq_case cases[] = {
        {"qkv bias 1 rank", ""},
        {"qkv bias dp2 zero2", "--set parallel_config.data_parallel=2 --set parallel.enable_parallel_optimizer=true "
                               "--set parallel.parallel_optimizer_config.optimizer_level=level2"},
        {"qkv bias tp2 sp", "--set parallel_config.model_parallel=2 --set parallel_config.use_seq_parallel=true"},
        {"qkv bias cp2 zigzag", "--set parallel_config.context_parallel=2"},
    };
    double want_loss[16], want_gnorm[16];
    FILE *f = fopen("tests/ref/qkvb_expected.txt", "r");
    size_t i;
    int n = 0, rc;
    CHECK_MSG(f != NULL, "tests/ref/qkvb_expected.txt missing");
    if (!f) return;
    while (n < 16 && fscanf(f, " step %*d loss %lf gnorm %lf", &want_loss[n], &want_gnorm[n]) == 2) n++;
    fclose(f);
    CHECK_INT(n, 10);
    for (i = 0; i < (only_reference ? 1 : sizeof cases / sizeof cases[0]); i++) {
        double wdiff;
        rc = run_cmd(0, "--config examples/configs/gqa_ref.yaml " QB_ON " --init-from tests/ref/qkvb_init.safetensors "
                        "--data tests/ref/gqa_data.txt --steps 10 --quiet --metrics %s --save %s %s",
                     test_path("qbref.jsonl"), test_path("qbref.safetensors"), cases[i].sets);
        CHECK_MSG(rc == 0, "%s failed: %s", cases[i].name, err_text);
        if (rc != 0) continue;
        check_against_pytorch(cases[i].name, test_path("qbref.jsonl"), want_loss, want_gnorm, n, 1);
        wdiff = weights_max_diff(test_path("qbref.safetensors"), "tests/ref/qkvb_final.safetensors");
        CHECK_MSG(wdiff >= 0 && wdiff <= 2e-5, "%s: final weights differ from PyTorch's by %g", cases[i].name, wdiff);
        printf("  %-22s PyTorch's losses and grad norms within 1e-4, weights within %.2e\n", cases[i].name, wdiff);
    }
}

/* src's tensors into dst with every bias replaced by uniform(-0.5, 0.5)
   draws: the trainer starts biases at 0, where a bias dropped from the
   forward or split wrongly would not show in the first steps. Returns the
   number of biases, -1 on failure. */
static int randomize_biases(const char *src, const char *dst) {
    par_st_file *f = NULL;
    par_st_writer *w = NULL;
    float *bufs[256] = {0};
    uint64_t rng = 0x9E3779B97F4A7C15ull;
    int i, n, biases = 0, ok;
    if (par_st_open(src, &f) != PAR_OK) return -1;
    n = par_st_count(f);
    ok = n <= 256 && par_st_writer_create(dst, &w) == PAR_OK;
    for (i = 0; ok && i < n; i++) {
        const par_st_tensor *t = par_st_tensor_at(f, i);
        const size_t len = strlen(t->name);
        int64_t k;
        ok = (bufs[i] = (float *)malloc((size_t)t->numel * 4 + 4)) != NULL &&
             par_st_read(f, t->name, t->ndim, t->shape, 0, t->numel, PAR_F32, bufs[i]) == PAR_OK;
        if (ok && len > 5 && strcmp(t->name + len - 5, ".bias") == 0) {
            for (k = 0; k < t->numel; k++) {
                rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
                bufs[i][k] = (float)((double)(rng >> 11) / 9007199254740992.0 - 0.5);
            }
            biases++;
        }
        ok = ok && par_st_writer_add(w, t->name, PAR_F32, t->ndim, t->shape, bufs[i]) == PAR_OK;
    }
    if (ok) ok = par_st_writer_finish(w) == PAR_OK;
    else par_st_writer_abort(w);
    for (i = 0; i < n && i < 256; i++) free(bufs[i]);
    par_st_close(f);
    return ok ? biases : -1;
}

/* One device against a parallel run with the same micro-batches, both from
   the sharded checkpoint init_dir (pipelines refuse a consolidated
   --init-from); the parallel run saves sharded and one rank re-exports it. */
static void bias_sharded_row(const char *name, const char *base, const char *init_dir, int mb, const char *sets) {
    double bl[EQ_STEPS + 1], bg[EQ_STEPS + 1];
    char dir[512];
    static int rows;
    int rc = run_cmd(0, "%s --init-from %s --steps 20 --set parallel_config.micro_batch_num=%d --metrics %s --save %s",
                     base, init_dir, mb, test_path("qbp1.jsonl"), test_path("qbp1.safetensors"));
    CHECK_MSG(rc == 0 && read_metrics(test_path("qbp1.jsonl"), bl, bg, EQ_STEPS + 1) == EQ_STEPS,
              "%s: one-device run failed: %s", name, err_text);
    if (rc != 0) return;
    snprintf(dir, sizeof dir, "%s/qbrow%d", test_dir, rows++);
    rc = run_cmd(0, "%s --init-from %s --steps 20 --set parallel_config.micro_batch_num=%d %s --metrics %s --save-dir %s",
                 base, init_dir, mb, sets, test_path("qbp.jsonl"), dir);
    CHECK_MSG(rc == 0, "%s failed: %s", name, err_text);
    if (rc == 0 && pp_final_weights(base, mb, dir, test_path("qbpw.safetensors")) == 0)
        check_equivalent(name, test_path("qbp.jsonl"), test_path("qbpw.safetensors"), bl, bg, test_path("qbp1.safetensors"));
    if (rc == 0) check_plan_holds(name, test_path("qbp.jsonl"));
}

/* Every parallel configuration trains a model with q/k/v biases like one
   device (from random biases: see randomize_biases); checkpoints carry the
   biases under Hugging Face Qwen2's names and round-trip across
   configurations; a checkpoint with biases and a model without them (and the
   reverse) are refused by name. */
static void test_qkv_bias(void) {
    static const eq_case cases[] = {
        {"qkv bias dp2", "--set parallel_config.data_parallel=2"},
        {"qkv bias dp2 zero2 mb2", "--set parallel_config.data_parallel=2 --set parallel_config.micro_batch_num=2 "
                                   "--set parallel.enable_parallel_optimizer=true "
                                   "--set parallel.parallel_optimizer_config.optimizer_level=level2"},
        {"qkv bias tp2", "--set parallel_config.model_parallel=2"},
        {"qkv bias tp2 sp", "--set parallel_config.model_parallel=2 --set parallel_config.use_seq_parallel=true"},
        {"qkv bias tp4 sp zero1", "--set parallel_config.model_parallel=4 --set parallel_config.use_seq_parallel=true "
                                  "--set parallel.enable_parallel_optimizer=true"},
        {"qkv bias dp2xtp2 sp zero2", "--set parallel_config.data_parallel=2 --set parallel_config.model_parallel=2 "
                                      "--set parallel_config.use_seq_parallel=true --set parallel.enable_parallel_optimizer=true "
                                      "--set parallel.parallel_optimizer_config.optimizer_level=level2"},
        {"qkv bias cp2 zigzag", "--set parallel_config.context_parallel=2"},
        {"qkv bias cp2 ulysses", "--set parallel_config.context_parallel=2 --set parallel_config.context_parallel_algo=ulysses_cp"},
        {"qkv bias tp2 x cp2 sp", "--set parallel_config.model_parallel=2 --set parallel_config.context_parallel=2 "
                                  "--set parallel_config.use_seq_parallel=true"},
    };
    static char base[2048], plain[1024], ppb[1024], ppdir[512], dir[512];
    double bl[EQ_STEPS + 1], bg[EQ_STEPS + 1], loss[EQ_STEPS + 1] = {0}, g[EQ_STEPS + 1] = {0};
    char a[512], b[512];
    int rc, i, n;
    /* the trainer's own init (same seed as tp_base's runs), then random biases */
    snprintf(plain, sizeof plain, "%s " QB_ON, tp_base);
    rc = run_cmd(0, "%s --steps 0 --save %s", plain, test_path("qb0.safetensors"));
    CHECK_MSG(rc == 0, "qkv bias init run failed: %s", err_text);
    n = randomize_biases(test_path("qb0.safetensors"), test_path("qbi.safetensors"));
    CHECK_MSG(n == 6, "%d biases in the trainer's checkpoint, want 3 per layer x 2 layers", n);
    snprintf(base, sizeof base, "%s --init-from %s", plain, test_path("qbi.safetensors"));
    equivalence_table(base, "qb", cases, sizeof cases / sizeof cases[0], 1, bl, bg);
    /* the biases are in the forward: without them the same weights give another first loss */
    rc = run_cmd(0, "%s --steps 1 --metrics %s", tp_base, test_path("qbn.jsonl"));
    CHECK_MSG(rc == 0 && read_metrics(test_path("qbn.jsonl"), loss, g, 2) == 1 && loss[0] != bl[0],
              "the first loss with biases (%.9g) equals the one without (%.9g)", bl[0], loss[0]);
    /* pipelines (zero bubble: the biases' gradients in the input half), multi-copy, fine-grained slices */
    snprintf(ppb, sizeof ppb, "%s " QB_ON, pp_base);
    snprintf(ppdir, sizeof ppdir, "%s/qbppi", test_dir);
    rc = run_cmd(0, "%s --steps 0 --save %s", ppb, test_path("qbpp0.safetensors"));
    CHECK_MSG(rc == 0, "pipeline init run failed: %s", err_text);
    CHECK_INT(randomize_biases(test_path("qbpp0.safetensors"), test_path("qbppi.safetensors")), 12);
    rc = run_cmd(0, "%s --steps 0 --init-from %s --save-dir %s", ppb, test_path("qbppi.safetensors"), ppdir);
    CHECK_MSG(rc == 0, "sharded pipeline init failed: %s", err_text);
    bias_sharded_row("qkv bias pp2 1f1b mb2", ppb, ppdir, 2, "--set parallel_config.pipeline_stage=2");
    bias_sharded_row("qkv bias pp2 zb-h1 mb4", ppb, ppdir, 4,
                     "--set parallel_config.pipeline_stage=2 --set parallel.pipeline_config.pipeline_scheduler=zb-h1");
    bias_sharded_row("qkv bias tp2xpp2 sp zb-h1", ppb, ppdir, 4,
                     "--set parallel_config.pipeline_stage=2 --set parallel_config.model_parallel=2 "
                     "--set parallel_config.use_seq_parallel=true --set parallel.pipeline_config.pipeline_scheduler=zb-h1");
    bias_sharded_row("qkv bias tp2 sp copies 2", ppb, ppdir, 4,
                     "--set parallel_config.micro_batch_num=2 --set micro_batch_interleave_num=2 "
                     "--set parallel_config.model_parallel=2 --set parallel_config.use_seq_parallel=true");
    bias_sharded_row("qkv bias tp2 sp fine-grain 2", ppb, ppdir, 4,
                     "--set parallel_config.micro_batch_num=2 --set parallel_config.fine_grain_interleave=2 "
                     "--set parallel_config.model_parallel=2 --set parallel_config.use_seq_parallel=true");
    /* checkpoints: 10 steps under tp 2 + sp saved both ways; the sharded one
       loaded under dp 2 + ZeRO-2 re-exports the same bytes (weights, moments,
       step); one device continues from the consolidated one like the
       uninterrupted run */
    snprintf(dir, sizeof dir, "%s/qbdir", test_dir);
    rc = run_cmd(0, "%s --steps 10 --set parallel_config.model_parallel=2 --set parallel_config.use_seq_parallel=true "
                    "--save-dir %s --save %s", base, dir, test_path("qbs.safetensors"));
    CHECK_MSG(rc == 0, "qkv bias save run failed: %s", err_text);
    rc = run_cmd(0, "%s --steps 0 --set parallel_config.data_parallel=2 --set parallel.enable_parallel_optimizer=true "
                    "--set parallel.parallel_optimizer_config.optimizer_level=level2 --init-from %s --save %s",
                 plain, dir, test_path("qbs2.safetensors"));
    CHECK_MSG(rc == 0, "qkv bias sharded load failed: %s", err_text);
    CHECK_MSG(test_files_identical(test_path("qbs2.safetensors"), test_path("qbs.safetensors")),
              "qkv bias: weights differ after the sharded load under dp 2 ZeRO-2");
    snprintf(a, sizeof a, "%s", test_path("qbs2.optimizer.safetensors"));
    snprintf(b, sizeof b, "%s", test_path("qbs.optimizer.safetensors"));
    CHECK_MSG(test_files_identical(a, b), "qkv bias: AdamW state differs after the sharded load");
    rc = run_cmd(0, "%s --steps 10 --init-from %s --metrics %s", plain, test_path("qbs.safetensors"), test_path("qbr.jsonl"));
    CHECK_MSG(rc == 0, "qkv bias resume failed: %s", err_text);
    n = read_metrics(test_path("qbr.jsonl"), loss, g, EQ_STEPS + 1);
    CHECK_INT(n, 10);
    for (i = 0; i < n && i < 10; i++)
        CHECK_MSG(fabs(loss[i] - bl[10 + i]) <= EQ_LOSS_REL * fabs(bl[10 + i]), "qkv bias resumed step %d: %.9g vs %.9g",
                  10 + i, loss[i], bl[10 + i]);
    { /* Hugging Face Qwen2's names and shapes, trained values */
        static const char *const which[3] = {"q", "k", "v"};
        const int64_t want[3] = {64, 32, 32}; /* 16 heads and 8 kv heads of head dim 4 */
        par_st_file *f = NULL, *f0 = NULL;
        CHECK_OK(par_st_open(test_path("qbs.safetensors"), &f));
        CHECK_OK(par_st_open(test_path("qbi.safetensors"), &f0));
        for (i = 0; f && f0 && i < 6; i++) {
            char name[96];
            const par_st_tensor *t;
            float now[64], then[64];
            snprintf(name, sizeof name, "model.layers.%d.self_attn.%s_proj.bias", i / 3, which[i % 3]);
            t = par_st_find(f, name);
            CHECK_MSG(t && t->ndim == 1 && t->shape[0] == want[i % 3], "%s: missing or of the wrong shape", name);
            if (!t || t->ndim != 1 || t->shape[0] != want[i % 3]) continue;
            CHECK_OK(par_st_read(f, name, 1, t->shape, 0, t->numel, PAR_F32, now));
            CHECK_OK(par_st_read(f0, name, 1, t->shape, 0, t->numel, PAR_F32, then));
            CHECK_MSG(memcmp(now, then, (size_t)t->numel * 4) != 0, "%s did not train", name);
        }
        if (f) par_st_close(f);
        if (f0) par_st_close(f0);
    }
    /* a model and a checkpoint that disagree about the biases */
    rc = run_cmd(0, "%s --steps 0 --save %s", tp_base, test_path("qbnone.safetensors"));
    CHECK_MSG(rc == 0, "no-bias save failed: %s", err_text);
    bad("biases into a model without", "unexpected tensor model.layers.0.self_attn.k_proj.bias",
        "%s --steps 1 --init-from %s", tp_base, test_path("qbs.safetensors"));
    bad("no biases into a model with", "tensor model.layers.0.self_attn.q_proj.bias is missing",
        "%s --steps 1 --init-from %s", plain, test_path("qbnone.safetensors"));
    bad("sharded biases into a model without", "the checkpoint is of another model", "%s --steps 1 --init-from %s",
        tp_base, dir);
}

/* ---- token files ---------------------------------------------------------------- */

/* A token file in llm.c's format: 256 little-endian int32 (magic, version,
   count), then `count` tokens of 2 (magic 20240520) or 4 bytes (20240801),
   drawn by a fixed generator below `vocab` (token `bad_at` set to `vocab`
   when >= 0: one token outside the vocabulary). */
static void write_tokens(const char *path, int32_t magic, int32_t version, int64_t count, int64_t vocab, int64_t bad_at,
                         int64_t drop_bytes) {
    FILE *f = fopen(path, "wb");
    unsigned char h[1024];
    uint64_t st = 0x746F6B656E73ull;
    const int tb = magic == 20240801 ? 4 : 2;
    int64_t i, written = 0, total = 1024 + count * tb - drop_bytes;
    int k;
    if (!f) return;
    memset(h, 0, sizeof h);
    for (k = 0; k < 4; k++) {
        h[k] = (unsigned char)((uint32_t)magic >> (8 * k));
        h[4 + k] = (unsigned char)((uint32_t)version >> (8 * k));
        h[8 + k] = (unsigned char)((uint64_t)count >> (8 * k));
    }
    fwrite(h, 1, sizeof h, f), written = 1024;
    for (i = 0; i < count && written < total; i++) {
        uint32_t v;
        unsigned char b[4];
        st = st * 6364136223846793005ull + 1442695040888963407ull;
        v = (uint32_t)((st >> 33) % (uint64_t)(i % 3 ? 300 : vocab)); /* small ids often: something to learn */
        if (i == bad_at) v = (uint32_t)vocab;
        for (k = 0; k < tb; k++) b[k] = (unsigned char)(v >> (8 * k));
        fwrite(b, 1, (size_t)(tb < total - written ? tb : total - written), f), written += tb;
    }
    fclose(f);
}

/* A 32,000-token vocabulary from a token file: one device and dp 2 x tp 2 with
   sequence parallel (the vocabulary-parallel embedding and loss split it over
   tp) train alike; the uint32 form of the same tokens trains the same bits as
   the uint16 one; damaged files are refused by name. */
static void test_token_files(void) {
    const char *base = "--config examples/configs/tiny.yaml --quiet --set max_grad_norm=0.5 "
                       "--set model.model_config.vocab_size=32000 --steps 6";
    char t16[512], t32[512], bad[512];
    double l1[8], g1[8], l4[8], g4[8], l32[8], g32[8];
    int rc, i;
    snprintf(t16, sizeof t16, "%s/tok16.bin", test_dir), snprintf(t32, sizeof t32, "%s/tok32.bin", test_dir);
    snprintf(bad, sizeof bad, "%s/tokbad.bin", test_dir);
    write_tokens(t16, 20240520, 1, 20000, 32000, -1, 0);
    write_tokens(t32, 20240801, 1, 20000, 32000, -1, 0);
    rc = run_cmd(0, "%s --data %s --metrics %s", base, t16, test_path("tok1.jsonl"));
    CHECK_MSG(rc == 0, "token file, one device: %s", err_text);
    rc = run_cmd(0, "%s --data %s --metrics %s --set parallel_config.data_parallel=2 --set parallel_config.model_parallel=2 "
                    "--set parallel_config.use_seq_parallel=true", base, t16, test_path("tok4.jsonl"));
    CHECK_MSG(rc == 0, "token file, dp2 x tp2 sp: %s", err_text);
    rc = run_cmd(0, "%s --data %s --metrics %s", base, t32, test_path("tok32.jsonl"));
    CHECK_MSG(rc == 0, "uint32 token file: %s", err_text);
    CHECK_INT(read_metrics(test_path("tok1.jsonl"), l1, g1, 8), 6);
    CHECK_INT(read_metrics(test_path("tok4.jsonl"), l4, g4, 8), 6);
    CHECK_INT(read_metrics(test_path("tok32.jsonl"), l32, g32, 8), 6);
    CHECK_MSG(l1[0] > 9.5 && l1[0] < 11.0, "the first loss %.4f is not about ln 32000", l1[0]);
    for (i = 0; i < 6; i++) {
        CHECK_MSG(fabs(l4[i] - l1[i]) <= EQ_LOSS_REL * fabs(l1[i]) && fabs(g4[i] - g1[i]) <= EQ_GNORM_REL * fabs(g1[i]),
                  "vocab 32000 dp2 x tp2 sp step %d: loss %.9g vs %.9g, grad norm %.9g vs %.9g", i, l4[i], l1[i], g4[i], g1[i]);
        CHECK_MSG(l32[i] == l1[i] && g32[i] == g1[i], "uint32 tokens step %d: %.9g vs %.9g", i, l32[i], l1[i]);
    }
    /* damaged files: the name, the rule, exit 2, nothing trained */
    write_tokens(bad, 20240520, 1, 20000, 32000, -1, 3);
    rc = run_cmd(0, "%s --data %s", base, bad);
    CHECK_MSG(rc == 2 && strstr(err_text, "its header says 20000 tokens of 2 bytes (41024 bytes with the header) but "
                                          "the file has 41021 bytes: truncated"), "truncated: %d %s", rc, err_text);
    write_tokens(bad, 20240520, 1, 20000, 32000, 12345, 0);
    rc = run_cmd(0, "%s --data %s", base, bad);
    CHECK_MSG(rc == 2 && strstr(err_text, "token 12345 is 32000, outside model.model_config.vocab_size = 32000"),
              "token outside the vocabulary: %d %s", rc, err_text);
    write_tokens(bad, 20240801, 2, 20000, 32000, -1, 0);
    rc = run_cmd(0, "%s --data %s", base, bad);
    CHECK_MSG(rc == 2 && strstr(err_text, "a token file of version 2"), "version 2: %d %s", rc, err_text);
    write_tokens(bad, 20240520, 1, 40, 32000, -1, 0);
    rc = run_cmd(0, "%s --data %s", base, bad);
    CHECK_MSG(rc == 2 && strstr(err_text, "has 40 tokens; model.model_config.seq_length = 64 needs at least 65"),
              "too few tokens: %d %s", rc, err_text);
    rc = run_cmd(0, "%s --data %s --sample 8", base, t16);
    CHECK_MSG(rc == 2 && strstr(err_text, "--sample with a token file"), "--sample: %d %s", rc, err_text);
}

/* ---- mixed precision ------------------------------------------------------------ */

#define LP_STEPS 50
#define LP_BASE "--config examples/configs/gqa_ref.yaml --data tests/ref/gqa_data.txt --quiet"
static const char *lp_ref = LP_BASE " --init-from tests/ref/gqa_init.safetensors";

/* tests/ref/lowp_KIND_expected.txt (tests/ref/make_lowp_ref.py): per-step loss,
   grad norm, the loss scale the step ran with and whether it was skipped. */
static int read_lowp(const char *kind, double *loss, double *gnorm, double *scale, int *skipped) {
    char path[256];
    FILE *f;
    int n = 0;
    snprintf(path, sizeof path, "tests/ref/lowp_%s_expected.txt", kind);
    if (!(f = fopen(path, "r"))) return -1;
    while (n < LP_STEPS && fscanf(f, " step %*d loss %lf gnorm %lf scale %lf skipped %d", &loss[n], &gnorm[n], &scale[n],
                                  &skipped[n]) == 4)
        n++;
    fclose(f);
    return n;
}

/* One number of every step line of a metrics file ("key":value), -1 if absent. */
static int read_metric_key(const char *path, const char *key, double *v, int max) {
    FILE *f = fopen(path, "r");
    char line[1024], k[64];
    int n = 0;
    if (!f) return -1;
    snprintf(k, sizeof k, "\"%s\":", key);
    while (fgets(line, sizeof line, f) && n < max)
        if (strstr(line, "\"step\":")) v[n++] = strstr(line, k) ? strtod(strstr(line, k) + strlen(k), NULL) : -1.0;
    fclose(f);
    return n;
}

/* The bf16 trainer against PyTorch's CPU autocast (tests/ref/make_lowp_ref.py),
   50 steps from the same weights and data.
   The bound. Both runs store the same tensors in bf16 at the same points, so
   they differ only where they round differently: PyTorch's autocast rounds
   each linear's weight gradient to bf16 before the f32 master sees it (ours
   accumulates it in f32), and accumulation orders differ inside f32 sums
   (which may flip a bf16 rounding). Each such difference is a subset of the
   rounding that bf16 does to the whole computation, whose effect on this
   run's losses PyTorch itself measures: its bf16 run against its f32 run,
   the largest per-step |loss difference| over the 50 steps, D (1.4e-3 here).
   So: every step |ours - PyTorch bf16| <= D. And it must really be bf16:
   ours is nearer PyTorch's bf16 losses than its f32 ones (root mean square
   over the steps), which an f32 run would not be. */
static void lowp_bf16_oracle(void) {
    double f32l[LP_STEPS], f32g[LP_STEPS], f32s[LP_STEPS], bfl[LP_STEPS], bfg[LP_STEPS], bfs[LP_STEPS];
    double loss[LP_STEPS + 1], gnorm[LP_STEPS + 1], d = 0.0, to_bf = 0.0, to_f32 = 0.0, worst = 0.0;
    int skipped[LP_STEPS], i, rc;
    CHECK_MSG(read_lowp("f32", f32l, f32g, f32s, skipped) == LP_STEPS && read_lowp("bf16", bfl, bfg, bfs, skipped) == LP_STEPS,
              "tests/ref/lowp_{f32,bf16}_expected.txt: %d steps each expected", LP_STEPS);
    for (i = 0; i < LP_STEPS; i++) d = fmax(d, fabs(bfl[i] - f32l[i]));
    /* the fixture's f32 run is the trainer's f32 run (as the 10-step reference) */
    rc = run_cmd(0, "%s --steps %d --metrics %s", lp_ref, LP_STEPS, test_path("lp32.jsonl"));
    CHECK_MSG(rc == 0, "f32 50 steps: %s", err_text);
    CHECK_INT(read_metrics(test_path("lp32.jsonl"), loss, gnorm, LP_STEPS + 1), LP_STEPS);
    for (i = 0; i < LP_STEPS; i++)
        CHECK_MSG(fabs(loss[i] - f32l[i]) <= 1e-4 * fabs(f32l[i]), "f32 step %d loss %.7f, PyTorch %.6f", i, loss[i], f32l[i]);
    rc = run_cmd(0, "%s --steps %d --metrics %s --set model.model_config.compute_dtype=bfloat16", lp_ref, LP_STEPS,
                 test_path("lp16.jsonl"));
    CHECK_MSG(rc == 0, "bf16 50 steps: %s", err_text);
    CHECK_INT(read_metrics(test_path("lp16.jsonl"), loss, gnorm, LP_STEPS + 1), LP_STEPS);
    for (i = 0; i < LP_STEPS; i++) {
        CHECK_MSG(fabs(loss[i] - bfl[i]) <= d, "bf16 step %d loss %.7f, PyTorch bf16 %.6f: beyond D = %.2e", i, loss[i],
                  bfl[i], d);
        worst = fmax(worst, fabs(loss[i] - bfl[i]));
        to_bf += (loss[i] - bfl[i]) * (loss[i] - bfl[i]), to_f32 += (loss[i] - f32l[i]) * (loss[i] - f32l[i]);
    }
    CHECK_MSG(to_bf < to_f32, "bf16 losses nearer PyTorch's f32 run (rms %.2e) than its bf16 one (rms %.2e)",
              sqrt(to_f32 / LP_STEPS), sqrt(to_bf / LP_STEPS));
    printf("  bf16 vs PyTorch autocast, 50 steps: largest |loss diff| %.2e (bound D %.2e); rms to PyTorch bf16 %.2e, "
           "to PyTorch f32 %.2e\n", worst, d, sqrt(to_bf / LP_STEPS), sqrt(to_f32 / LP_STEPS));
    check_plan_holds("bf16 reference", test_path("lp16.jsonl"));
}

/* f16 with a forced overflow: an initial loss scale of 2^24 makes the f16
   gradients overflow, and GradScaler's rule (backoff 0.5, growth 2 after 4
   good steps: scale_window 4) must skip the same steps with the same scales
   as PyTorch's run (tests/ref/make_lowp_ref.py writes the rule out). The
   losses: within the bf16 bound D scaled to f16's 3 more bits (D / 8). */
static void lowp_f16_overflow(void) {
    double rl[LP_STEPS], rg[LP_STEPS], rs[LP_STEPS], bfl[LP_STEPS], f32l[LP_STEPS], x[LP_STEPS];
    double loss[LP_STEPS + 1], gnorm[LP_STEPS + 1], scale[LP_STEPS + 1], skip[LP_STEPS + 1], d = 0.0, worst = 0.0;
    int rskip[LP_STEPS], none[LP_STEPS], i, rc, nskip = 0;
    CHECK_INT(read_lowp("f16", rl, rg, rs, rskip), LP_STEPS);
    CHECK_INT(read_lowp("bf16", bfl, x, x, none), LP_STEPS);
    CHECK_INT(read_lowp("f32", f32l, x, x, none), LP_STEPS);
    for (i = 0; i < LP_STEPS; i++) d = fmax(d, fabs(bfl[i] - f32l[i]));
    rc = run_cmd(0, "%s --steps %d --metrics %s --set model.model_config.compute_dtype=float16 "
                    "--set runner_wrapper.scale_sense.type=DynamicLossScaleUpdateCell "
                    "--set runner_wrapper.scale_sense.loss_scale_value=16777216 "
                    "--set runner_wrapper.scale_sense.scale_window=4",
                 lp_ref, LP_STEPS, test_path("lph.jsonl"));
    CHECK_MSG(rc == 0, "f16 50 steps: %s", err_text);
    CHECK_INT(read_metrics(test_path("lph.jsonl"), loss, gnorm, LP_STEPS + 1), LP_STEPS);
    CHECK_INT(read_metric_key(test_path("lph.jsonl"), "loss_scale", scale, LP_STEPS + 1), LP_STEPS);
    CHECK_INT(read_metric_key(test_path("lph.jsonl"), "skipped", skip, LP_STEPS + 1), LP_STEPS);
    for (i = 0; i < LP_STEPS; i++) {
        nskip += rskip[i];
        CHECK_MSG((int)skip[i] == rskip[i] && scale[i] == rs[i], "f16 step %d: skipped %d scale %g, GradScaler: %d, %g", i,
                  (int)skip[i], scale[i], rskip[i], rs[i]);
        CHECK_MSG(fabs(loss[i] - rl[i]) <= d / 8, "f16 step %d loss %.7f, PyTorch f16 %.6f: beyond D / 8 = %.2e", i,
                  loss[i], rl[i], d / 8);
        worst = fmax(worst, fabs(loss[i] - rl[i]));
    }
    CHECK_MSG(nskip > 0, "the f16 fixture skips no step: the overflow was not forced");
    printf("  f16 loss scaling, 50 steps: %d skipped as GradScaler; largest |loss diff| %.2e (bound %.2e)\n", nskip,
           worst, d / 8);
}

/* Every row of the recomputation table (dp, ZeRO, tp, sp, cp ring and
   Ulysses, every pipeline schedule, multi-copy, fine-grained) in bf16: none,
   full and selective bit-identical with plans that hold (rc_row), and each
   row's losses against one device in bf16. The bound: the rows round at
   other points than one device (a tensor-parallel partial product is
   rounded to bf16 before the reduction sums it; a pipeline boundary is a
   bf16 tensor; ...), a subset of bf16's rounding again: D' = 2^-8 x loss,
   one bf16 unit roundoff of the loss itself, per step, over these 4 steps. */
static void lowp_table(void) {
    char base[1024];
    double one[RC_STEPS + 1], row[RC_STEPS + 1], worst = 0.0;
    size_t i;
    int k;
    snprintf(base, sizeof base, "%s --set model.model_config.compute_dtype=bfloat16", pp_base);
    for (i = 0; i < sizeof rc_cases / sizeof rc_cases[0]; i++) {
        char name[96];
        snprintf(name, sizeof name, "bf16 %s", rc_cases[i].name);
        rc_row(name, base, 4, rc_splits(rc_cases[i].sets), rc_cases[i].sets, i ? row : one);
        for (k = 0; i && k < RC_STEPS; k++) {
            CHECK_MSG(fabs(row[k] - one[k]) <= ldexp(fabs(one[k]), -8), "%s step %d loss %.7f, one device %.7f", name, k,
                      row[k], one[k]);
            if (isfinite(row[k])) worst = fmax(worst, fabs(row[k] - one[k]) / fabs(one[k]));
        }
    }
    /* the MPI backend's 16-bit collectives (reduced in f32 there too) */
    {
        static const struct {
            const char *name, *sets;
        } mpi_rows[] = {{"bf16 dp2 x tp2 sp mpirun -np 4", "--set parallel_config.data_parallel=2 "
                                                          "--set parallel_config.model_parallel=2 "
                                                          "--set parallel_config.use_seq_parallel=true"},
                        {"bf16 dp2 x pp2 mpirun -np 4", "--set parallel_config.data_parallel=2 "
                                                        "--set parallel_config.pipeline_stage=2 "
                                                        "--set parallel_config.micro_batch_num=2"}};
        for (i = 0; i < sizeof mpi_rows / sizeof mpi_rows[0]; i++) {
            char cmd[2048];
            double gn[RC_STEPS + 1];
            int rc;
            if (!mpi_run(mpi_rows[i].name)) continue;
            snprintf(cmd, sizeof cmd, "ASAN_OPTIONS=detect_leaks=0 %s -np 4 %s --backend mpi %s --steps %d %s --metrics %s",
                     mpirun, train_bin, base, RC_STEPS, mpi_rows[i].sets, test_path("lpm.jsonl"));
            rc = run_cmd(1, "%s", cmd);
            CHECK_MSG(rc == 0, "%s: %s", mpi_rows[i].name, err_text);
            if (rc != 0) continue;
            CHECK_INT(read_metrics(test_path("lpm.jsonl"), row, gn, RC_STEPS + 1), RC_STEPS);
            for (k = 0; k < RC_STEPS; k++) {
                CHECK_MSG(fabs(row[k] - one[k]) <= ldexp(fabs(one[k]), -8), "%s step %d loss %.7f, one device %.7f",
                          mpi_rows[i].name, k, row[k], one[k]);
                if (isfinite(row[k])) worst = fmax(worst, fabs(row[k] - one[k]) / fabs(one[k]));
            }
        }
    }
    printf("  bf16 table: largest relative loss difference from one device %.2e (bound 2^-8 = %.2e)\n", worst,
           ldexp(1.0, -8));
}

/* compute_dtype's values, and f16 without a loss scale, refused by name. */
static void lowp_bad_input(void) {
    int rc = run_cmd(0, "%s --steps 1 --set model.model_config.compute_dtype=float16", lp_ref);
    CHECK_MSG(rc == 2 && strstr(err_text, "compute_dtype = float16 needs a loss scale"), "f16 without scale: %d %s", rc,
              err_text);
    rc = run_cmd(0, "%s --steps 1 --set model.model_config.compute_dtype=float64", lp_ref);
    CHECK_MSG(rc == 2 && strstr(err_text, "model.model_config.compute_dtype"), "float64: %d %s", rc, err_text);
    rc = run_cmd(0, "%s --steps 1 --set model.model_config.compute_dtype=float16 "
                    "--set runner_wrapper.scale_sense.type=DynamicLossScaleUpdateCell "
                    "--set runner_wrapper.scale_sense.scale_factor=1",
                 lp_ref);
    CHECK_MSG(rc == 2 && strstr(err_text, "runner_wrapper.scale_sense.scale_factor"), "scale_factor 1: %d %s", rc, err_text);
}

/* Checkpoints hold the f32 masters: a bf16 run's sharded save (dp 2 + ZeRO-1) loads
   into an f32 run under tensor parallel and into a bf16 one, and both export the same
   bytes; an f32 run's save continues in bf16. */
static void lowp_checkpoints(void) {
    char dir[512], a[512], b[512], dir32[512];
    int rc;
    snprintf(dir, sizeof dir, "%s/lpck", test_dir), snprintf(dir32, sizeof dir32, "%s/lpck32", test_dir);
    snprintf(a, sizeof a, "%s/lpck_a.safetensors", test_dir), snprintf(b, sizeof b, "%s/lpck_b.safetensors", test_dir);
    rc = run_cmd(0, "%s --steps 3 --save-dir %s --set model.model_config.compute_dtype=bfloat16 "
                    "--set parallel_config.data_parallel=2 --set parallel.enable_parallel_optimizer=true",
                 lp_ref, dir);
    CHECK_MSG(rc == 0, "bf16 save: %s", err_text);
    rc = run_cmd(0, LP_BASE " --steps 0 --init-from %s --save %s --set model.model_config.compute_dtype=bfloat16", dir, a);
    CHECK_MSG(rc == 0, "bf16 export: %s", err_text);
    rc = run_cmd(0, LP_BASE " --steps 0 --init-from %s --save %s --set parallel_config.model_parallel=2", dir, b);
    CHECK_MSG(rc == 0, "f32 tp 2 export of a bf16 checkpoint: %s", err_text);
    CHECK_MSG(test_files_identical(a, b), "a bf16 checkpoint exported in bf16 and in f32 x tp 2 differs (%s, %s)", a, b);
    rc = run_cmd(0, "%s --steps 2 --save-dir %s", lp_ref, dir32);
    CHECK_MSG(rc == 0, "f32 save: %s", err_text);
    rc = run_cmd(0, LP_BASE " --steps 3 --init-from %s --set model.model_config.compute_dtype=bfloat16", dir32);
    CHECK_MSG(rc == 0, "an f32 checkpoint continued in bf16: %s", err_text);
}

static void test_mixed(void) {
    lowp_bad_input();
    lowp_checkpoints();
    lowp_bf16_oracle();
    lowp_f16_overflow();
    lowp_table();
}

/* ---- one GPU, many ranks (make test-cuda) ----------------------------------------- */

/* f32 tolerance between the same configuration trained on the CPU (build/train)
   and on the GPU: the GPU's kernels sum in other orders (cuBLAS, the attention
   and reduction kernels), a few ulps per value that the steps carry on. */
#define GPU_CPU_LOSS_REL 1e-5

/* The same row on the CPU trainer (TRAIN_CPU, default build/train) and on TRAIN
   (the GPU one): every step's loss within GPU_CPU_LOSS_REL relative. */
static void cpu_gpu_row(const char *name, const char *base, const char *sets) {
    const char *cpu = getenv("TRAIN_CPU") && *getenv("TRAIN_CPU") ? getenv("TRAIN_CPU") : "build/train";
    double cl[EQ_STEPS + 1], cg[EQ_STEPS + 1], gl[EQ_STEPS + 1], gg[EQ_STEPS + 1], d;
    int rc;
    if (row_skipped(name, sets)) return;
    rc = run_cmd(1, "%s %s --steps 20 %s --metrics %s", cpu, base, sets, test_path("cg_cpu.jsonl"));
    CHECK_MSG(rc == 0, "%s on the CPU (%s) failed: %s", name, cpu, err_text);
    if (rc != 0) return;
    rc = run_cmd(0, "%s --steps 20 %s --metrics %s", base, sets, test_path("cg_gpu.jsonl"));
    CHECK_MSG(rc == 0, "%s on the GPU failed: %s", name, err_text);
    if (rc != 0) return;
    CHECK_INT(read_metrics(test_path("cg_cpu.jsonl"), cl, cg, EQ_STEPS + 1), EQ_STEPS);
    CHECK_INT(read_metrics(test_path("cg_gpu.jsonl"), gl, gg, EQ_STEPS + 1), EQ_STEPS);
    d = max_rel_diff(gl, cl, EQ_STEPS);
    CHECK_MSG(d <= GPU_CPU_LOSS_REL, "%s: the GPU's losses differ from the CPU's by %g relative", name, d);
    printf("  %-30s GPU vs CPU loss rel diff %.2e\n", name, d);
}

/* LLAMA_TEST_ONLY=gpu-table with TRAIN="build/train_cuda --backend cuda-threads":
   every parallel mode as threads on one GPU against one device on that GPU,
   within the CPU table's bounds (data parallel and ZeRO, tensor + sequence
   parallel and the vocabulary-split loss, context parallel ring / Ulysses /
   hybrid, pipelines, multi-copy and fine-grained slices), then a few rows
   trained on the CPU too, per-step losses within GPU_CPU_LOSS_REL. */
static void test_gpu_table(void) {
    static const eq_case dp[] = {
        {"dp2", "--set parallel_config.data_parallel=2"},
        {"dp4 zero1", "--set parallel_config.data_parallel=4 --set parallel.enable_parallel_optimizer=true"},
        {"dp2 zero2 micro2", "--set parallel_config.data_parallel=2 --set parallel_config.micro_batch_num=2 "
                             "--set parallel.enable_parallel_optimizer=true "
                             "--set parallel.parallel_optimizer_config.optimizer_level=level2"},
    };
    static const eq_case tp[] = {
        {"tp2", "--set parallel_config.model_parallel=2"},
        {"tp4 sp", "--set parallel_config.model_parallel=4 --set parallel_config.use_seq_parallel=true"},
        {"dp2 x tp2 sp zero1", "--set parallel_config.data_parallel=2 --set parallel_config.model_parallel=2 "
                               "--set parallel_config.use_seq_parallel=true --set parallel.enable_parallel_optimizer=true"},
        {"dp2xtp2 sp vocab zero2 mb2", "--set parallel_config.data_parallel=2 --set parallel_config.model_parallel=2 "
                                      "--set parallel_config.use_seq_parallel=true --set parallel_config.vocab_emb_dp=false "
                                      "--set parallel.enable_parallel_optimizer=true "
                                      "--set parallel.parallel_optimizer_config.optimizer_level=level2 "
                                      "--set parallel_config.micro_batch_num=2"},
    };
    static const eq_case cp[] = {
        {"cp2 ring zigzag", "--set parallel_config.context_parallel=2"},
        {"cp4 ulysses", "--set parallel_config.context_parallel=4 --set parallel_config.context_parallel_algo=ulysses_cp"},
        {"cp4 hybrid 2x2", "--set parallel_config.context_parallel=4 --set parallel_config.context_parallel_algo=hybrid_cp "
                           "--set parallel_config.ulysses_degree_in_cp=2"},
        {"tp2 x cp2 sp", "--set parallel_config.model_parallel=2 --set parallel_config.context_parallel=2 "
                         "--set parallel_config.use_seq_parallel=true"},
        {"dp2 x tp2 x cp2 zero2", "--set parallel_config.data_parallel=2 --set parallel_config.model_parallel=2 "
                                  "--set parallel_config.context_parallel=2 --set parallel_config.use_seq_parallel=true "
                                  "--set parallel.enable_parallel_optimizer=true "
                                  "--set parallel.parallel_optimizer_config.optimizer_level=level2"},
    };
    double bl[EQ_STEPS + 1], bg[EQ_STEPS + 1];
    equivalence_table(eq_base, "geq", dp, sizeof dp / sizeof dp[0], 0, bl, bg);
    equivalence_table(tp_base, "gtp", tp, sizeof tp / sizeof tp[0], 0, bl, bg);
    equivalence_table(cp_base, "gcp", cp, sizeof cp / sizeof cp[0], 0, bl, bg);
    pp_row("pp2 1f1b mb2", pp_base, 2, "--set parallel_config.pipeline_stage=2");
    pp_row("pp4 zb-h1 mb8", pp_base, 8, "--set parallel_config.pipeline_stage=4 "
                                         "--set parallel.pipeline_config.pipeline_scheduler=zb-h1");
    pp_row("pp2 interleaved mb4", pp_base, 4, "--set parallel_config.pipeline_stage=2 "
                                              "--set model.model_config.pp_interleave_num=2 "
                                              "--set parallel.pipeline_config.pipeline_interleave=true");
    pp_row("tp2 x pp2 sp zb-h1", pp_base, 4, "--set parallel_config.pipeline_stage=2 --set parallel_config.model_parallel=2 "
                                             "--set parallel_config.use_seq_parallel=true "
                                             "--set parallel.pipeline_config.pipeline_scheduler=zb-h1");
    pp_row("dp2 x cp2 x pp2 zb-h1 zero1", pp_base, 2, "--set parallel_config.pipeline_stage=2 "
                                                      "--set parallel_config.data_parallel=2 "
                                                      "--set parallel_config.context_parallel=2 "
                                                      "--set parallel.enable_parallel_optimizer=true "
                                                      "--set parallel.pipeline_config.pipeline_scheduler=zb-h1");
    pp_row("tp2 sp copies 2", pp_base, 4, "--set parallel_config.micro_batch_num=2 --set micro_batch_interleave_num=2 "
                                          "--set parallel_config.model_parallel=2 --set parallel_config.use_seq_parallel=true");
    pp_row("dp2 x tp2 sp fine-grain 3 zero2", pp_base, 6,
           "--set parallel_config.micro_batch_num=2 --set model.model_config.fine_grain_interleave=3 "
           "--set parallel_config.data_parallel=2 --set parallel_config.model_parallel=2 "
           "--set parallel_config.use_seq_parallel=true --set parallel.enable_parallel_optimizer=true "
           "--set parallel.parallel_optimizer_config.optimizer_level=level2");
    /* the same rows on the CPU trainer */
    cpu_gpu_row("one device", eq_base, "");
    cpu_gpu_row("dp2 zero2 micro2", eq_base, dp[2].sets);
    cpu_gpu_row("dp2 x tp2 sp zero1", tp_base, tp[2].sets);
    cpu_gpu_row("tp2 x cp2 sp", cp_base, cp[3].sets);
    cpu_gpu_row("pp2 1f1b mb2", pp_base, "--set parallel_config.micro_batch_num=2 --set parallel_config.pipeline_stage=2");
}

/* LLAMA_TEST_ONLY=nccl-table: the gpu-table's rows with one rank per GPU,
   TRAIN="build/train_cuda --backend nccl" launched by MPIRUN with each row's
   world, LLAMA_NCCL_GPUS=<GPUs of the node> (rows needing more are skipped by
   name). See docs/multi-gpu.md. */
static void test_nccl_table(void) {
    const char *g = getenv("LLAMA_NCCL_GPUS");
    nccl_gpus = g && *g ? atoi(g) : 0;
    if (nccl_gpus < 1) {
        printf("nccl-table: skipped (LLAMA_NCCL_GPUS is not set to the number of GPUs)\n");
        return;
    }
    test_gpu_table();
    nccl_gpus = 0;
}

int main(void) {
    char tmpl[] = "/tmp/par_train_test_XXXXXX";
    char cmd[600];
    train_bin = getenv("TRAIN") && *getenv("TRAIN") ? getenv("TRAIN") : "build/train";
    mpirun = getenv("MPIRUN");
    find_mpirun();
    if (!mkdtemp(tmpl)) return printf("llama_train: 0 passed, 1 failed\n"), 1;
    snprintf(test_dir, sizeof test_dir, "%s", tmpl);
    only_reference = getenv("LLAMA_TEST_ONLY") && strcmp(getenv("LLAMA_TEST_ONLY"), "reference") == 0;
    if (getenv("LLAMA_TEST_ONLY") && strcmp(getenv("LLAMA_TEST_ONLY"), "checkpoints") == 0) {
        /* just the checkpoint tests (and the runs they build on) */
        double t0 = (double)time(NULL), t1;
        test_reference();
        test_round_trip();
        t1 = (double)time(NULL);
        test_sharded_matrix();
        test_sharded_pipeline();
        test_sharded_resume();
        test_hf_export();
        test_save_dtype();
        printf("  checkpoint tests: %.0f s (the sharded and export ones: %.0f s)\n", (double)time(NULL) - t0,
               (double)time(NULL) - t1);
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", test_dir);
        if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", test_dir);
        return TEST_END("llama_train");
    }
    { /* developers' shortcuts: LLAMA_TEST_ONLY=NAME runs one group of tests */
        static const struct {
            const char *name;
            void (*run[3])(void);
        } groups[] = {{"wide-tp", {test_pipeline_wide_tp, NULL}},
                      {"mindformers", {test_config_semantics, test_mindformers_llama2_7b}},
                      {"divergence", {test_divergence, test_one_run_per_dir}},
                      {"qkv_bias", {test_reference_bias, test_qkv_bias}},
                      {"pipeline", {test_pipeline, test_pipeline_wide_tp, test_pipeline_v}},
                      {"pipeline-kinds", {test_pipeline_chunked_kinds, NULL}},
                      {"pipeline_v", {test_pipeline_v, NULL}},
                      {"recompute", {test_recompute, test_save_dtype}},
                      {"mixed", {test_mixed, NULL}},
                      {"gpu-table", {test_gpu_table, NULL}},
                      {"nccl-table", {test_nccl_table, NULL}},
                      {"tokens", {test_token_files, NULL}}};
        const char *only = getenv("LLAMA_TEST_ONLY");
        for (size_t g = 0; only && g < sizeof groups / sizeof groups[0]; g++) {
            if (strcmp(only, groups[g].name) != 0) continue;
            for (int k = 0; k < 3 && groups[g].run[k]; k++) groups[g].run[k]();
            snprintf(cmd, sizeof cmd, "rm -rf '%s'", test_dir);
            if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", test_dir);
            return TEST_END("llama_train");
        }
    }
    if (!only_reference) test_bad_input();
    test_reference();
    test_reference_bias();
    if (only_reference) { /* make test-cuda: the mixed-precision oracles run on one rank too */
        lowp_bf16_oracle();
        lowp_f16_overflow();
    }
    if (!only_reference) {
        test_equivalence();
        test_config_semantics();
        test_mindformers_llama2_7b();
        test_divergence();
        test_one_run_per_dir();
        test_memory();
        test_round_trip();
        test_trace();
        test_tensor_parallel();
        test_tp_memory();
        test_context_parallel();
        test_pipeline();
        test_pipeline_wide_tp();
        test_pipeline_v();
        test_sharded_matrix();
        test_sharded_pipeline();
        test_sharded_resume();
        test_hf_export();
        test_save_dtype();
        test_mixed();
        test_token_files();
        test_qkv_bias();
        test_recompute();
    }
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", test_dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", test_dir);
    return TEST_END("llama_train");
}
