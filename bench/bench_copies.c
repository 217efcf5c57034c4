/* bench/bench_copies.c - multi-copy (micro_batch_interleave_num): how much of the
   tensor-parallel communication one copy's collectives spend behind another
   copy's compute, and the step time beside the run without copies.

   build/train on the bench model (examples/configs/bench.yaml: hidden 256, 4
   layers, seq 256, global batch 8) at tp 2 on the threads backend, with and
   without sequence parallel, for 1 and 2 copies (micro_batch_interleave_num)
   and, with sequence parallel, 2 slices rejoined after every layer
   (fine_grain_interleave), each with --trace. Hidden =
   the share of the time a collective of rank 0 was in flight during which
   another copy held the turn and computed (the trainer's "copies_overlap"
   line, from its trace: 1 - exposed / in flight); with one copy the layers'
   collectives block, nothing is hidden. Step time = the median over the steps
   after the first. The runs alternate (1, 2, 1, 2 copies ...) so a noisy
   neighbour hurts both alike; each figure is the median of the repeats.
   Prints a table and JSON lines {"bench":"copies",...}.
   Usage: build/bench_copies [steps] [repeats] */
#define _DEFAULT_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct result {
    double step_s, hidden, exposed_share;
    int ok;
} result;

static int cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n) {
    if (n < 1) return 0.0;
    qsort(v, (size_t)n, sizeof(double), cmp_double);
    return v[(n - 1) / 2];
}

static double json_number(const char *line, const char *key) {
    char k[64];
    const char *p;
    snprintf(k, sizeof k, "\"%s\":", key);
    p = strstr(line, k);
    return p ? strtod(p + strlen(k), NULL) : -1.0;
}

static result run(int copies, int fine, int sp, int steps) {
    result r = {0, 0, 0, 0};
    char cmd[1024], line[2048];
    double step[256];
    int n = 0;
    FILE *f;
    snprintf(cmd, sizeof cmd,
             "build/train --config examples/configs/bench.yaml --data parallel.h --steps %d --quiet "
             "--set parallel_config.model_parallel=2 --set parallel_config.use_seq_parallel=%s "
             "--set %s=%d --trace build/bench_copies_trace.json "
             "--metrics build/bench_copies.jsonl >/dev/null",
             steps, sp ? "true" : "false", fine ? "parallel_config.fine_grain_interleave" : "micro_batch_interleave_num",
             copies);
    if (system(cmd) != 0) return r;
    if (!(f = fopen("build/bench_copies.jsonl", "r"))) return r;
    while (fgets(line, sizeof line, f)) {
        if (strstr(line, "\"step\":") && strstr(line, "\"step_s\":") && n < 256) step[n++] = json_number(line, "step_s");
        if (strstr(line, "copies_overlap")) r.hidden = json_number(line, "hidden_share");
        if (strstr(line, "comm_share")) r.exposed_share = json_number(line, "share");
    }
    fclose(f);
    if (n < 2) return r;
    r.step_s = median(step + 1, n - 1); /* step 0 warms up */
    r.ok = 1;
    return r;
}

int main(int argc, char **argv) {
    const int steps = argc > 1 ? atoi(argv[1]) : 6, reps = argc > 2 ? atoi(argv[2]) : 3;
    int sp;
    if (steps < 2 || reps < 1 || reps > 16) return fprintf(stderr, "usage: bench_copies [steps >= 2] [repeats 1..16]\n"), 2;
    printf("multi-copy at tp 2 (threads backend, bench model, %d steps, median of %d runs each)\n", steps, reps);
    printf("%-22s %12s %12s %14s %10s\n", "run", "step s", "tp comm", "exposed comm", "speed-up");
    printf("%-22s %12s %12s %14s %10s\n", "", "", "hidden", "share of step", "");
    for (sp = 0; sp < 2; sp++) {
        /* the variants: 1 copy, 2 copies, and (sp) 2 fine-grained slices */
        const int nv = sp ? 3 : 2;
        double step[3][16], hidden[3][16], exposed[3][16], base = 0.0;
        int v, rep, ok = 1;
        for (rep = 0; rep < reps && ok; rep++)
            for (v = 0; v < nv && ok; v++) {
                const result r = run(v ? 2 : 1, v == 2, sp, steps);
                ok = r.ok;
                step[v][rep] = r.step_s, hidden[v][rep] = r.hidden, exposed[v][rep] = r.exposed_share;
            }
        if (!ok) return fprintf(stderr, "bench_copies: build/train failed (sp %d)\n", sp), 1;
        for (v = 0; v < nv; v++) {
            const double st = median(step[v], reps), h = median(hidden[v], reps), e = median(exposed[v], reps);
            char name[64];
            if (v == 0) base = st;
            snprintf(name, sizeof name, "tp2%s, %s", sp ? " sp" : "", v == 0 ? "1 copy" : v == 1 ? "2 copies" : "fine-grain 2");
            printf("%-22s %12.3f %11.1f%% %13.1f%% %9.2fx\n", name, st, 100.0 * h, 100.0 * e, st > 0 ? base / st : 0.0);
            printf("{\"bench\":\"copies\",\"tp\":2,\"sp\":%d,\"copies\":%d,\"fine_grain\":%d,\"step_s\":%.6f,"
                   "\"tp_comm_hidden\":%.4f,\"exposed_share\":%.4f}\n", sp, v ? 2 : 1, v == 2, st, h, e);
        }
    }
    return 0;
}
