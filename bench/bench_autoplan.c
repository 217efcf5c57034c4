/* bench/bench_autoplan.c - the planner's predictions against the trainer's
   measurements, on this machine (threads backend).

   For each configuration below the trainer (build/train, built first) runs
   examples/configs/tiny.yaml with 4 layers for a few steps with --metrics;
   measured = the peak memory over the ranks (the trainer's allocator count)
   and the median step time after the first step; predicted =
   par_auto_predict for the same plan on a cluster measured by par_calibrate
   on that many rank threads (what auto_parallel does). Printed: the table,
   the worst memory error, and Spearman's rank correlation of the step times.

   Then the capped case: 8 ranks and a memory cap just under the smallest pure
   data-parallel plan's predicted memory. The trainer runs with parallel_mode
   auto_parallel (dynamic_programming) under that cap; the plan it picks is
   measured beside the other plans that fit (the predicted fastest few), and
   the bench prints how far the pick is from the best measured one.

   usage: build/bench_autoplan [--steps N] [--candidates K] [--rounds R] [--model tiny|medium] [--verbose 1]
   (--verbose 1: each calibration's figures and each prediction's parts)
   [--save FILE] the table's measurements; [--load FILE] predict against a saved
   table (same --rounds) without running the trainer or the capped case: for work
   on the step-time model, whose calibration still runs here and now)
   (defaults 8, 8, 8 (at most 32), tiny; medium: hidden 128, 8 heads, seq 128, batch 16, 16x the work)
   Every configuration runs once per round (R rounds) and a run's time is its
   median step. The machine is shared and its speed drifts by tens of percent
   over minutes as neighbours come and go, while the configurations of one
   round see about the same machine: so each round is a block, and a
   configuration's measured time is the median over rounds of its time over
   its round's geometric mean, times the geometric mean of all the rounds
   (drift_corrected). Drift common to a round cancels; one disturbed run moves
   one sample of one configuration. */
#define _DEFAULT_SOURCE
#include "../parallel.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct conf {
    int dp, tp, sp, cp, ulysses, pp, gpipe, m, zero;
} conf;

static const conf confs[] = {
    {1, 1, 0, 1, 0, 1, 0, 1, 0}, {2, 1, 0, 1, 0, 1, 0, 1, 0}, {4, 1, 0, 1, 0, 1, 0, 1, 0}, {1, 1, 0, 1, 0, 1, 0, 2, 0},
    {2, 1, 0, 1, 0, 1, 0, 1, 1}, {2, 1, 0, 1, 0, 1, 0, 1, 2}, {1, 2, 0, 1, 0, 1, 0, 1, 0}, {1, 2, 1, 1, 0, 1, 0, 1, 0},
    {2, 2, 0, 1, 0, 1, 0, 1, 0}, {1, 1, 0, 2, 0, 1, 0, 1, 0}, {1, 1, 0, 2, 1, 1, 0, 1, 0}, {1, 1, 0, 1, 0, 2, 0, 2, 0},
    {1, 1, 0, 1, 0, 2, 1, 4, 0}, {2, 1, 0, 1, 0, 2, 0, 2, 1}, {1, 2, 1, 2, 0, 1, 0, 1, 0}, {4, 1, 0, 1, 0, 1, 0, 2, 2},
    {1, 1, 0, 1, 0, 1, 0, 4, 0}, {1, 1, 0, 4, 1, 1, 0, 1, 0}, {1, 1, 0, 1, 0, 4, 0, 4, 0}, {1, 1, 0, 1, 0, 4, 1, 1, 0},
    {8, 1, 0, 1, 0, 1, 0, 1, 0}, {4, 2, 1, 1, 0, 1, 0, 1, 0}, {2, 1, 0, 1, 0, 4, 0, 2, 1}, {1, 1, 0, 8, 0, 1, 0, 1, 0},
    {2, 2, 1, 1, 0, 2, 0, 2, 0},
};

#define MAX_ROUNDS 32
static int steps = 8, rounds = 8, verbose;
static const char *save_path, *load_path; /* the table's measurements to a file, or from one */
static par_model_shape model;
static par_cluster clusters[9];
static par_compute_table tables[9]; /* the CPU table a rank gets on that many ranks: its GEMM scratch */
static int have_cluster[9];

static const par_cluster *cluster_for(int world, const par_compute_table **table) {
    if (!have_cluster[world]) {
        par_calibrate_desc d;
        par_cpu_desc cd;
        int threads = 1;
        memset(&d, 0, sizeof d);
        d.repeats = 9; /* the fastest of more runs: this machine's timings scatter by tens of percent */
        if (par_calibrate_desc_for_model(&model, world, &d) != PAR_OK ||
            par_calibrate_threads(world, &d, &clusters[world], &threads) != PAR_OK) {
            fprintf(stderr, "calibration failed: %s\n", par_last_error());
            exit(1);
        }
        memset(&cd, 0, sizeof cd);
        cd.threads = threads;
        if (par_compute_cpu(&cd, &tables[world]) != PAR_OK) exit(1);
        have_cluster[world] = 1;
        if (verbose) {
            const par_cluster *c = &clusters[world];
            printf("calibrated on %d rank thread(s), %d kernel thread(s) each: GEMM %.2f Gflop/s, attention %.2f "
                   "Gflop/s + %.2f us a row, SwiGLU %.1f M/s, copies %.1f GB/s, call %.2f us, all-reduce %.1f us + "
                   "%.2f GB/s, norm %.0f M/s, rope %.0f M/s, node_parallelism %d\n",
                   world, threads, c->flops / 1e9, c->attention_rate / 1e9, c->attention_row_cost * 1e6,
                   c->activation_rate / 1e6, c->memory_bandwidth / 1e9, c->kernel_latency * 1e6, c->intra_latency * 1e6,
                   c->intra_bandwidth / 1e9, c->norm_rate / 1e6, c->rope_rate / 1e6, c->node_parallelism);
        }
    }
    *table = &tables[world];
    return &clusters[world];
}

static void plan_of(const conf *c, par_auto_plan *p) {
    memset(p, 0, sizeof *p);
    p->config.dp = c->dp, p->config.tp = c->tp, p->config.sp = c->sp, p->config.cp = c->cp, p->config.pp = c->pp;
    p->config.cp_algo = c->ulysses ? PAR_CP_ULYSSES : PAR_CP_RING;
    p->config.schedule = c->gpipe ? PAR_PP_GPIPE : PAR_PP_1F1B;
    p->config.chunks = 1, p->config.micro_batches = c->m, p->config.zero = c->zero;
}

static int cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Run the trainer; measured peak bytes (max over ranks) and median step seconds. */
static int measure(const char *extra, double *peak, double *step_s, char *chosen, size_t chosen_size) {
    char cmd[2048], line[1024];
    double t[256];
    int n = 0;
    FILE *f;
    snprintf(cmd, sizeof cmd,
             "build/train --config examples/configs/tiny.yaml --data README.md --steps %d --quiet "
             "--set model.model_config.num_layers=%d --set model.model_config.hidden_size=%d "
             "--set model.model_config.num_heads=%d --set model.model_config.n_kv_heads=%d "
             "--set model.model_config.intermediate_size=%d --set model.model_config.seq_length=%d "
             "--set runner_config.global_batch_size=%d --metrics /tmp/bench_autoplan.jsonl %s 2>&1",
             steps, model.layers, model.hidden, model.heads, model.kv_heads, model.ffn, model.seq, model.batch, extra);
    f = popen(cmd, "r");
    if (!f) return -1;
    if (chosen) chosen[0] = 0;
    while (fgets(line, sizeof line, f)) {
        const char *c = strstr(line, "chose ");
        if (c && chosen) snprintf(chosen, chosen_size, "%.*s", (int)strcspn(c + 6, ":\n"), c + 6);
    }
    if (pclose(f) != 0) return -1;
    f = fopen("/tmp/bench_autoplan.jsonl", "r");
    if (!f) return -1;
    *peak = 0;
    while (fgets(line, sizeof line, f)) {
        const char *p = strstr(line, "\"peak_mem_bytes\":"), *s = strstr(line, "\"step_s\":");
        if (p && atof(p + 17) > *peak) *peak = atof(p + 17);
        if (s && strstr(line, "\"step\":0,") == NULL && n < 256) t[n++] = atof(s + 9);
    }
    fclose(f);
    if (!n) return -1;
    qsort(t, (size_t)n, sizeof t[0], cmp_double);
    *step_s = t[n / 2];
    return 0;
}

static void conf_args(const par_auto_plan *p, char *buf, size_t size) {
    const int interleaved = p->config.pp > 1 && p->config.schedule == PAR_PP_INTERLEAVED;
    snprintf(buf, size,
             "--set parallel_config.data_parallel=%d --set parallel_config.model_parallel=%d "
             "--set parallel_config.use_seq_parallel=%s --set parallel_config.context_parallel=%d "
             "--set parallel_config.context_parallel_algo=%s --set parallel_config.pipeline_stage=%d "
             "--set parallel.pipeline_config.pipeline_scheduler=%s --set parallel_config.micro_batch_num=%d "
             "--set parallel.enable_parallel_optimizer=%s --set parallel.parallel_optimizer_config.optimizer_level=%s "
             "--set model.model_config.pp_interleave_num=%d --set parallel.pipeline_config.pipeline_interleave=%s",
             p->config.dp, p->config.tp, p->config.sp ? "true" : "false", p->config.cp, p->config.cp_algo == PAR_CP_ULYSSES ? "ulysses_cp" : "colossalai_cp",
             p->config.pp, p->config.schedule == PAR_PP_GPIPE ? "gpipe" : p->config.schedule == PAR_PP_ZB_H1 ? "zb-h1" : "1f1b",
             p->config.micro_batches, p->config.zero ? "true" : "false", p->config.zero == 2 ? "level2" : "level1",
             interleaved ? (p->config.chunks > 1 ? p->config.chunks : 2) : 1, interleaved ? "true" : "false");
}

/* Spearman's rho with average ranks for ties. */
static void ranks(const double *x, int n, double *r) {
    int i, j;
    for (i = 0; i < n; i++) {
        double less = 0, same = 0;
        for (j = 0; j < n; j++) less += x[j] < x[i], same += x[j] == x[i];
        r[i] = less + (same + 1) / 2;
    }
}

static double spearman(const double *a, const double *b, int n) {
    double ra[64], rb[64], ma = 0, mb = 0, sab = 0, saa = 0, sbb = 0;
    int i;
    ranks(a, n, ra);
    ranks(b, n, rb);
    for (i = 0; i < n; i++) ma += ra[i] / n, mb += rb[i] / n;
    for (i = 0; i < n; i++)
        sab += (ra[i] - ma) * (rb[i] - mb), saa += (ra[i] - ma) * (ra[i] - ma), sbb += (rb[i] - mb) * (rb[i] - mb);
    return sab / sqrt(saa * sbb);
}

static double median_of(double *v, int n) {
    qsort(v, (size_t)n, sizeof v[0], cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* t[i][r]: configuration i's time in round r (<= 0: no run). out[i]: the median
   over rounds of t[i][r] / (round r's geometric mean over the configurations
   that ran), times the geometric mean of the rounds' means. */
static void drift_corrected(double t[][MAX_ROUNDS], int n, double *out) {
    double mean[MAX_ROUNDS], all = 0, rel[MAX_ROUNDS];
    int i, r, used = 0;
    for (r = 0; r < rounds; r++) {
        double logs = 0;
        int k = 0;
        for (i = 0; i < n; i++)
            if (t[i][r] > 0) logs += log(t[i][r]), k++;
        mean[r] = k ? exp(logs / k) : 0;
        if (k) all += logs / k, used++;
    }
    all = used ? exp(all / used) : 0;
    for (i = 0; i < n; i++) {
        int k = 0;
        for (r = 0; r < rounds; r++)
            if (t[i][r] > 0 && mean[r] > 0) rel[k++] = t[i][r] / mean[r];
        out[i] = k ? median_of(rel, k) * all : 0;
    }
}

/* Every configuration once per round; measured times drift-corrected. */
static void table(void) {
    enum { N = (int)(sizeof confs / sizeof confs[0]) };
    par_auto_plan pred[N];
    double peak[N], times[N][MAX_ROUNDS], corrected[N], pt[N], mt[N], worst = 0;
    int ok[N], i, r, good = 0;
    for (i = 0; i < N; i++) {
        const conf *c = &confs[i];
        par_auto_desc d;
        memset(&d, 0, sizeof d);
        d.model = model;
        d.cluster = *cluster_for(c->dp * c->tp * c->cp * c->pp, &d.compute);
        plan_of(c, &pred[i]);
        ok[i] = par_auto_predict(&d, &pred[i]) == PAR_OK;
        if (!ok[i]) printf("predict failed: %s\n", par_last_error());
    }
    memset(times, 0, sizeof times);
    if (load_path) { /* a saved table's measurements: predictions only (for work on the model) */
        FILE *f = fopen(load_path, "r");
        int n = 0;
        if (!f) fprintf(stderr, "cannot read %s\n", load_path), exit(1);
        for (i = 0; i < N && fscanf(f, "%lf", &peak[i]) == 1; i++, n++)
            for (r = 0; r < rounds; r++)
                if (fscanf(f, "%lf", &times[i][r]) != 1) fprintf(stderr, "%s: short\n", load_path), exit(1);
        fclose(f);
        if (n != N) fprintf(stderr, "%s: %d configurations, want %d\n", load_path, n, N), exit(1);
    }
    for (r = 0; r < rounds && !load_path; r++)
        for (i = 0; i < N; i++) {
            char args[1024];
            double pk, st;
            if (!ok[i]) continue;
            conf_args(&pred[i], args, sizeof args);
            if (measure(args, &pk, &st, NULL, 0) != 0) {
                ok[i] = 0;
                continue;
            }
            peak[i] = pk, times[i][r] = st;
        }
    for (i = 0; i < N; i++)
        if (!ok[i]) memset(times[i], 0, sizeof times[i]); /* a configuration that failed leaves the means */
    drift_corrected(times, N, corrected);
    if (save_path) { /* per configuration: its peak, then its time in each round */
        FILE *f = fopen(save_path, "w");
        if (!f) fprintf(stderr, "cannot write %s\n", save_path), exit(1);
        for (i = 0; i < N; i++) {
            fprintf(f, "%.17g", ok[i] ? peak[i] : 0);
            for (r = 0; r < rounds; r++) fprintf(f, " %.17g", times[i][r]);
            fprintf(f, "\n");
        }
        fclose(f);
    }
    printf("| plan | ranks | predicted MiB | measured MiB | error | predicted step ms | measured step ms |\n");
    printf("|---|---|---|---|---|---|---|\n");
    for (i = 0; i < N; i++) {
        char name[128];
        double err;
        par_auto_plan_format(&pred[i], name, sizeof name);
        if (!ok[i]) {
            printf("| %s | trainer run failed |\n", name);
            continue;
        }
        err = pred[i].predicted.memory_bytes / peak[i] - 1;
        if (fabs(err) > worst) worst = fabs(err);
        pt[good] = pred[i].predicted.step_time, mt[good] = corrected[i], good++;
        printf("| %s | %d | %.3f | %.3f | %+.1f%% | %.2f | %.2f |\n", name,
               pred[i].config.dp * pred[i].config.tp * pred[i].config.cp * pred[i].config.pp, pred[i].predicted.memory_bytes / 1048576.0,
               peak[i] / 1048576.0, 100 * err, 1e3 * pred[i].predicted.step_time, 1e3 * mt[good - 1]);
    }
    if (verbose) {
        printf("\nthe predictions' parts, ms (critical: the busiest rank's path; shared: the node's summed work)\n");
        for (i = 0; i < N; i++) {
            char name[128];
            const par_auto_plan *p = &pred[i];
            par_auto_plan_format(p, name, sizeof name);
            printf("  %-36s compute %6.2f tp %5.2f cp %5.2f pp %5.2f dp %5.2f bubble %.2f critical %6.2f shared %6.2f\n",
                   name, 1e3 * p->predicted.compute_time, 1e3 * p->predicted.tp_comm_time, 1e3 * p->predicted.cp_comm_time, 1e3 * p->predicted.pp_comm_time,
                   1e3 * p->predicted.dp_comm_time, p->predicted.bubble, 1e3 * p->predicted.critical_time, 1e3 * p->predicted.shared_time);
        }
    }
    printf("\n%d configurations: worst memory error %.1f%%, Spearman rho of step times %.3f (%d rounds of %d steps, "
           "median step each, drift-corrected)\n",
           good, 100 * worst, spearman(pt, mt, good), rounds, steps);
}

static void capped(int candidates) {
    par_auto_desc d;
    par_auto_plan all[512], p;
    par_auto_cuts cuts;
    char args[1024], name[128], chosen[128], cap_text[64];
    double cap, dp_min = 0, peak, step_s, pick_s = 0, best_s = 0;
    int count = 0, i, z, m, measured = 0;
    memset(&d, 0, sizeof d);
    d.model = model;
    d.cluster = *cluster_for(8, &d.compute);
    for (z = 0; z <= 2; z++)
        for (m = 1; m <= 8; m++) {
            if (model.batch % (8 * m)) continue;
            memset(&p, 0, sizeof p);
            p.config.dp = 8, p.config.tp = p.config.cp = p.config.pp = 1, p.config.zero = z, p.config.micro_batches = m;
            if (par_auto_predict(&d, &p) == PAR_OK && (dp_min == 0 || p.predicted.memory_bytes < dp_min)) dp_min = p.predicted.memory_bytes;
        }
    cap = floor(dp_min) - 1;
    d.memory_cap = cap;
    /* the four kinds this table has always measured (the trainer's auto_parallel also
       searches looped_bfs and zb1p; kept out so that the figures stay comparable run to run) */
    d.schedules = (1u << PAR_PP_1F1B) | (1u << PAR_PP_GPIPE) | (1u << PAR_PP_INTERLEAVED) | (1u << PAR_PP_ZB_H1);
    if (par_auto_search(&d, all, 512, &count, &cuts) != PAR_OK) {
        printf("capped search failed: %s\n", par_last_error());
        return;
    }
    printf("\n8 ranks, cap %.0f bytes (pure dp needs at least %.0f): %d plans fit\n", cap, dp_min, count);
    snprintf(cap_text, sizeof cap_text, "%.0f", cap);
    snprintf(args, sizeof args,
             "--set parallel.parallel_mode=auto_parallel --set parallel_config.data_parallel=8 "
             "--set parallel.search_mode=dynamic_programming --max-device-memory %s",
             cap_text);
    if (measure(args, &peak, &pick_s, chosen, sizeof chosen) != 0) {
        printf("auto_parallel run failed\n");
        return;
    }
    printf("auto_parallel chose %s (its own run: %.2f ms a step, peak %.3f MiB)\n", chosen, 1e3 * pick_s,
           peak / 1048576.0);
    {
        enum { K = 32 };
        double t[K][MAX_ROUNDS], med[K];
        int idx[K], nk = 0, pick = -1, r, k;
        char names[K][128];
        for (i = 0; i < count && i < 512 && nk < candidates && nk < K; i++) idx[nk++] = i;
        for (i = 0; i < count && i < 512 && pick < 0; i++) { /* the pick, wherever it ranks */
            par_auto_plan_format(&all[i], name, sizeof name);
            if (strcmp(name, chosen) != 0) continue;
            for (k = 0; k < nk; k++)
                if (idx[k] == i) pick = k;
            if (pick < 0 && nk < K) idx[nk] = i, pick = nk++;
        }
        for (k = 0; k < nk; k++) par_auto_plan_format(&all[idx[k]], names[k], sizeof names[k]);
        for (r = 0; r < rounds; r++)
            for (k = 0; k < nk; k++) {
                conf_args(&all[idx[k]], args, sizeof args);
                /* a plan the trainer refuses has no time (0) and stays out of the means */
                t[k][r] = measure(args, &peak, &step_s, NULL, 0) == 0 ? step_s : 0;
            }
        printf("| plan | predicted step ms | measured step ms |\n|---|---|---|\n");
        drift_corrected(t, nk, med);
        for (k = 0; k < nk; k++) {
            if (med[k] <= 0) {
                printf("| %s | %.2f | the trainer refused it |\n", names[k], 1e3 * all[idx[k]].predicted.step_time);
                continue;
            }
            if (best_s == 0 || med[k] < best_s) best_s = med[k];
            printf("| %s%s | %.2f | %.2f |\n", names[k], k == pick ? " (auto_parallel's pick)" : "",
                   1e3 * all[idx[k]].predicted.step_time, 1e3 * med[k]);
            measured++;
        }
        if (pick < 0 || med[pick] <= 0) {
            printf("the pick is not among the plans that fit, or the trainer refused it: %s\n", chosen);
            return;
        }
        printf("auto_parallel's pick: %.2f ms; best of the %d measured: %.2f ms; the pick is %.1f%% slower (%d rounds "
               "of %d steps, median step each, drift-corrected)\n",
               1e3 * med[pick], measured, 1e3 * best_s, 100 * (med[pick] / best_s - 1), rounds, steps);
    }
}

int main(int argc, char **argv) {
    int i, candidates = 8, medium = 0, skip_capped = 0;
    for (i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--steps")) steps = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--candidates")) candidates = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--rounds")) rounds = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--model")) medium = !strcmp(argv[i + 1], "medium");
        else if (!strcmp(argv[i], "--verbose")) verbose = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--save")) save_path = argv[i + 1];
        else if (!strcmp(argv[i], "--load")) load_path = argv[i + 1], skip_capped = 1;
    }
    if (steps < 2) steps = 2;
    if (rounds < 1 || rounds > MAX_ROUNDS) rounds = 8;
    model.layers = 4, model.hidden = 64, model.heads = 4, model.kv_heads = 2, model.ffn = 172;
    model.vocab = 256, model.seq = 64, model.batch = 8;
    if (medium) /* 16x the tiny model's work per step: compute, not per-call overheads, dominates */
        model.hidden = 128, model.heads = 8, model.kv_heads = 4, model.ffn = 344, model.seq = 128, model.batch = 16;
    printf("model: %d layers, hidden %d, %d heads (%d kv), ffn %d, seq %d, batch %d\n\n", model.layers, model.hidden,
           model.heads, model.kv_heads, model.ffn, model.seq, model.batch);
    table();
    if (!skip_capped) capped(candidates);
    return 0;
}
