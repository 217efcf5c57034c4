/* tests/example_runs.h - run an example program as a user would and compare
   it with its one-rank run: shared by tests/test_mlp_example.c and
   tests/test_stacked_example.c. The includer defines STEPS (the steps a run
   trains) and OUT_EXT (the extension of what --out writes: ".st", ".bin"),
   and defines weights_diff (the largest |a - b| over two runs' final
   weights, -1 if a file is missing or short; the formats differ). Runs write
   into `dir` (the includer makes it): `tag`.txt (the step lines), `tag`.err,
   `tag` OUT_EXT. */
#ifndef PAR_TEST_EXAMPLE_RUNS_H
#define PAR_TEST_EXAMPLE_RUNS_H
#include <math.h>
#include <stdlib.h>
#include <sys/wait.h>

static char dir[256];
static double weights_diff(const char *a, const char *b);

/* Run `prog` with args (prefix: a launcher or ""); the exit status. */
static int run(const char *prefix, const char *prog, const char *args, const char *tag) {
    char cmd[2048];
    int rc;
    snprintf(cmd, sizeof cmd, "%s%s%s %s --steps %d --out %s/%s%s > %s/%s.txt 2>%s/%s.err </dev/null", prefix,
             *prefix ? " " : "", prog, args, STEPS, dir, tag, OUT_EXT, dir, tag, dir, tag);
    rc = system(cmd);
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

/* The per-step losses ("step 3 loss 0.123") of run `tag`: how many were read, -1 without the file. */
static int read_losses(const char *tag, double *loss) {
    char path[512];
    FILE *f;
    int n = 0, step;
    snprintf(path, sizeof path, "%s/%s.txt", dir, tag);
    if (!(f = fopen(path, "r"))) return -1;
    while (n < STEPS + 1 && fscanf(f, " step %d loss %lf", &step, &loss[n]) == 2) n++;
    fclose(f);
    return n;
}

/* One configuration against the one-rank run "one" (its losses in base):
   losses within 1e-6 relative, final weights within 2e-6. */
static void check_case(const char *prefix, const char *prog, const char *args, const char *name, const double *base) {
    double loss[STEPS + 1], worst = 0, w;
    int n, i, rc = run(prefix, prog, args, "case");
    char err[512] = "";
    if (rc != 0) {
        char path[512];
        FILE *f;
        snprintf(path, sizeof path, "%s/case.err", dir);
        if ((f = fopen(path, "r"))) err[fread(err, 1, sizeof err - 1, f)] = 0, fclose(f);
    }
    CHECK_MSG(rc == 0, "%s (%s): exit %d: %s", name, args, rc, err);
    if (rc) return;
    n = read_losses("case", loss);
    CHECK_MSG(n == STEPS, "%s: %d loss lines", name, n);
    for (i = 0; i < n && i < STEPS; i++) worst = fmax(worst, fabs(loss[i] - base[i]) / fabs(base[i]));
    w = weights_diff("case", "one");
    CHECK_MSG(worst <= 1e-6, "%s: losses differ from one rank by %g relative", name, worst);
    CHECK_MSG(w >= 0 && w <= 2e-6, "%s: final weights differ from one rank by %g", name, w);
    printf("  %-24s loss rel diff %.2e, weight diff %.2e\n", name, worst, w);
}
#endif
