/* tests/test_stacked_example.c - the third example (examples/stacked/): a host
   with its own flat, layer-stacked buffers trains in parallel like one rank,
   and its gradient reductions run while its backward still computes.

   Runs build/stacked_single (one process, no parallel.h) and build/stacked as
   a user would: one rank, dp 2, tp 2, dp 2 x tp 2, ZeRO-1 and ZeRO-2 (dp 2 and
   dp 4, dp 2 x tp 2), on threads and, when mpirun and an MPI build exist, under
   mpirun -np 4. Every run's per-step losses must equal one rank's within 1e-6
   relative and its final weights within 2e-6 (f32 summation order only; the
   bounds of tests/test_mlp_example.c), and one rank must equal the
   one-process file within the same bounds (its own AdamW loop against the
   set's). The --trace file of a dp 2 run (read by tests/trace_json.h, not the
   library) must show every layer's weights reduced as a bucket of its own,
   launched inside the backward: on every rank some bucket's collective starts
   before a later "bwd layer" compute span starts and ends after it started,
   and in every step exactly the six buckets of layers 3..1 do (launched in
   the order the backward makes them).
   Environment: STACKED, STACKED_SINGLE (default build/stacked,
   build/stacked_single), MPIRUN (as test_mlp_example.c). */
#define _POSIX_C_SOURCE 200809L
#include "test.h"
#include "trace_json.h"
#include <math.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#define STEPS 20
#define OUT_EXT ".bin"
#define NW (4 * 2 * 32 * 16) /* L x (W1 + W2) x H x D: stacked.c's whole buffer */

static const char *stacked, *single;
#include "example_runs.h"

/* Largest |a - b| over the two runs' whole weights; -1 if a file is missing or short. */
static double weights_diff(const char *a, const char *b) {
    static float x[NW + 1], y[NW + 1];
    char pa[512], pb[512];
    FILE *fa, *fb;
    size_t na = 0, nb = 0;
    double worst = 0;
    snprintf(pa, sizeof pa, "%s/%s.bin", dir, a), snprintf(pb, sizeof pb, "%s/%s.bin", dir, b);
    if ((fa = fopen(pa, "rb"))) na = fread(x, 4, NW + 1, fa), fclose(fa);
    if ((fb = fopen(pb, "rb"))) nb = fread(y, 4, NW + 1, fb), fclose(fb);
    if (na != NW || nb != NW) return -1;
    for (int i = 0; i < NW; i++) worst = fmax(worst, fabs((double)x[i] - (double)y[i]));
    return worst;
}

/* The trace of `ranks` ranks: every layer's bucket reduced, and on each rank
   reductions in flight when a later backward compute span starts: in every
   step all but layer 0's two (each launched as the backward marks it, in the
   order it makes them: w2.3 w1.3 w2.2 ...; launched in declaration order the
   w1 layers would wait for w2.0 and only three would be). Launches and spans
   are in program order on the rank's thread, so the count is exact. */
static void check_overlap(const char *path, int ranks, int buckets, const char *op) {
    tj_trace t;
    memset(&t, 0, sizeof t);
    CHECK_MSG(tj_load(path, &t) == 0, "%s: %s", path, t.error);
    for (int r = 0; r < ranks; r++) {
        int seen = 0, overlapped = 0, inflight = 0, layers = 0;
        char want[64];
        for (int b = 0; b < buckets; b++) {
            snprintf(want, sizeof want, "%s bucket %d", op, b);
            for (int i = 0; i < t.count; i++)
                if (t.events[i].pid == r && !strcmp(t.events[i].cat, "comm") && !strcmp(t.events[i].name, want)) {
                    seen++;
                    break;
                }
        }
        for (int i = 0; i < t.count && !overlapped; i++) {
            const tj_event *c = &t.events[i];
            if (c->pid != r || strcmp(c->cat, "comm") || strncmp(c->name, op, strlen(op))) continue;
            for (int j = 0; j < t.count && !overlapped; j++) {
                const tj_event *k = &t.events[j];
                overlapped = k->pid == r && !strcmp(k->cat, "compute") && !strcmp(k->name, "bwd layer") &&
                             k->ts > c->ts && k->ts < c->ts + c->dur;
            }
        }
        for (int i = 0; i < t.count; i++) {
            const tj_event *c = &t.events[i];
            int later = 0;
            layers += c->pid == r && !strcmp(c->cat, "compute") && !strcmp(c->name, "bwd layer");
            if (c->pid != r || strcmp(c->cat, "comm") || strncmp(c->name, op, strlen(op))) continue;
            for (int j = 0; j < t.count && !later; j++) {
                const tj_event *k = &t.events[j];
                later = k->pid == r && !strcmp(k->cat, "compute") && !strcmp(k->name, "bwd layer") && k->ts >= c->ts &&
                        k->ts < c->ts + c->dur; /* >=: a launch and the next layer's begin can share a clock tick */
            }
            inflight += later;
        }
        CHECK_MSG(layers > 0 && layers % 4 == 0 && inflight == (buckets - 2) * (layers / 4),
                  "%s rank %d: %d %s in flight when a later backward layer started, want %d per step of %d", path, r,
                  inflight, op, buckets - 2, layers / 4);
        CHECK_MSG(seen == buckets, "%s rank %d: %d of the %d buckets \"%s bucket B\" in the trace", path, r, seen,
                  buckets, op);
        CHECK_MSG(overlapped, "%s rank %d: no %s in flight when a later backward layer started", path, r, op);
    }
    tj_free(&t);
}

/* The count stacked.c's header quotes is the one its command gives now. */
static void check_quoted_count(void) {
    char line[512], *at;
    int quoted = -1, counted = -1;
    FILE *f = fopen("examples/stacked/stacked.c", "r"), *p;
    if (!f) {
        printf("stacked diff count: skipped (not run from the repository root)\n");
        return;
    }
    while (quoted < 0 && fgets(line, sizeof line, f))
        if ((at = strstr(line, "grep -c '^+[^+]': "))) quoted = atoi(at + strlen("grep -c '^+[^+]': "));
    fclose(f);
    if ((p = popen("diff -u examples/stacked/stacked_single.c examples/stacked/stacked.c | grep -c '^+[^+]'", "r"))) {
        if (fscanf(p, "%d", &counted) != 1) counted = -1;
        pclose(p);
    }
    CHECK_MSG(quoted > 0 && quoted == counted, "stacked.c quotes %d added lines, the diff counts %d", quoted, counted);
    printf("  stacked.c adds %d lines to stacked_single.c\n", counted);
}

int main(void) {
    static const struct {
        const char *name, *args;
    } cases[] = {{"dp2", "--dp 2"},
                 {"tp2", "--tp 2"},
                 {"dp2 x tp2", "--dp 2 --tp 2"},
                 {"dp2 zero1", "--dp 2 --zero 1"},
                 {"dp2 zero2", "--dp 2 --zero 2"},
                 {"dp4 zero2", "--dp 4 --zero 2"},
                 {"dp2 x tp2 zero2", "--dp 2 --tp 2 --zero 2"}};
    const char *mpirun = getenv("MPIRUN") && *getenv("MPIRUN") ? getenv("MPIRUN") : "mpirun --allow-run-as-root --oversubscribe";
    double base[STEPS + 1];
    char cmd[900], args[600];
    size_t i;
    int n;
    (void)tj_count_spans, (void)tj_first_malformed; /* trace_json.h's other readers */
    stacked = getenv("STACKED") && *getenv("STACKED") ? getenv("STACKED") : "build/stacked";
    single = getenv("STACKED_SINGLE") && *getenv("STACKED_SINGLE") ? getenv("STACKED_SINGLE") : "build/stacked_single";
    snprintf(dir, sizeof dir, "/tmp/par_stacked_test_XXXXXX");
    if (!mkdtemp(dir)) return printf("stacked_example: 0 passed, 1 failed\n"), 1;
    CHECK_MSG(run("", stacked, "", "one") == 0, "one-rank run failed");
    n = read_losses("one", base);
    CHECK_MSG(n == STEPS && base[STEPS - 1] < 0.25 * base[0], "one rank: %d steps, loss %g -> %g (it must learn)", n,
              n > 0 ? base[0] : -1.0, n > 0 ? base[n - 1] : -1.0);
    check_case("", single, "", "one-process file", base);
    for (i = 0; i < sizeof cases / sizeof cases[0]; i++) check_case("", stacked, cases[i].args, cases[i].name, base);
    /* the overlap, from the traces: 4 layers x 2 weights = 8 buckets */
    snprintf(args, sizeof args, "--dp 2 --trace %s/dp2.json", dir);
    CHECK_MSG(run("", stacked, args, "trace") == 0, "dp2 --trace failed");
    snprintf(cmd, sizeof cmd, "%s/dp2.json", dir);
    check_overlap(cmd, 2, 8, "all_reduce");
    snprintf(args, sizeof args, "--dp 2 --tp 2 --zero 2 --trace %s/zero2.json", dir);
    CHECK_MSG(run("", stacked, args, "trace") == 0, "dp2 x tp2 zero2 --trace failed");
    snprintf(cmd, sizeof cmd, "%s/zero2.json", dir);
    check_overlap(cmd, 4, 8, "reduce_scatter");
    /* bad input: the library's refusals end the run with its sentence */
    CHECK_MSG(run("", stacked, "--dp 3", "bad") == 1, "--dp 3 (does not divide the batch of 32) must fail");
    CHECK_MSG(run("", stacked, "--tp 3", "bad") == 1, "--tp 3 (does not divide hidden 32) must fail");
    CHECK_MSG(run("", stacked, "--bogus 1", "bad") == 2, "an unknown option must be exit 2");
    CHECK_MSG(run("", stacked, "--zero 3", "bad") == 2, "--zero 3 (par_args_take: 0..2) must be exit 2");
    check_quoted_count();
    /* under mpirun: one rank per process, the same program (par_launch) */
    snprintf(cmd, sizeof cmd, "command -v %.*s >/dev/null 2>&1 && nm %s 2>/dev/null | grep -q MPI_Init", (int)strcspn(mpirun, " "),
             mpirun, stacked);
    if (system(cmd) == 0) {
        char pre[600];
        snprintf(pre, sizeof pre, "ASAN_OPTIONS=detect_leaks=0 %s -np 4", mpirun);
        check_case(pre, stacked, "--dp 2 --tp 2", "mpirun dp2 x tp2", base);
        check_case(pre, stacked, "--dp 4 --zero 2", "mpirun dp4 zero2", base);
    } else {
        printf("stacked mpirun: skipped (no mpirun, or build/stacked was built without MPI)\n");
    }
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
    return TEST_END("stacked_example");
}
