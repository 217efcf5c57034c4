/* tests/test_mlp_example.c - the second example (examples/mlp/mlp.c, build/mlp)
   trains like one rank under every parallel configuration it offers.

   Runs build/mlp as a user would: one rank, then dp 2, dp 4, tp 2, dp 2 x tp 2,
   ZeRO-1 and ZeRO-2 (dp 2 and dp 4, ZeRO-2 with micro-batches), on threads and,
   when mpirun and an MPI build exist, under mpirun -np 4. Every run's per-step
   losses must equal one rank's within 1e-6 relative and its final weights
   within 2e-6 (f32 summation order only: the same tolerances' reasoning as
   the trainer's equivalence table, for a model 10x smaller).
   Environment: MLP (default build/mlp), MPIRUN (default "mpirun
   --allow-run-as-root --oversubscribe"; runs under it are skipped with the
   reason when mpirun is missing or the binary has no MPI). */
#define _POSIX_C_SOURCE 200809L
#include "test.h"
#include "test_files.h"
#include <math.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#define STEPS 20
#define OUT_EXT ".st"

static const char *mlp;
#include "example_runs.h"

static double weights_diff(const char *a, const char *b) {
    char pa[512], pb[512];
    par_st_file *fa = NULL, *fb = NULL;
    double worst = -1;
    static const char *const names[2] = {"w1", "w2"};
    snprintf(pa, sizeof pa, "%s/%s.st", dir, a), snprintf(pb, sizeof pb, "%s/%s.st", dir, b);
    if (par_st_open(pa, &fa) == PAR_OK && par_st_open(pb, &fb) == PAR_OK) {
        worst = 0;
        for (int k = 0; k < 2; k++) {
            const par_st_tensor *t = par_st_find(fa, names[k]);
            float x[256], y[256];
            if (!t || t->numel > 256 || par_st_read(fa, names[k], 0, NULL, 0, t->numel, PAR_F32, x) != PAR_OK ||
                par_st_read(fb, names[k], 0, NULL, 0, t->numel, PAR_F32, y) != PAR_OK) {
                worst = -1;
                break;
            }
            for (int64_t i = 0; i < t->numel; i++) worst = fmax(worst, fabs((double)x[i] - (double)y[i]));
        }
    }
    par_st_close(fa), par_st_close(fb);
    return worst;
}

int main(void) {
    static const struct {
        const char *name, *args;
    } cases[] = {{"dp2", "--dp 2"},
                 {"dp4", "--dp 4"},
                 {"tp2", "--tp 2"},
                 {"dp2 x tp2", "--dp 2 --tp 2"},
                 {"dp2 zero1", "--dp 2 --zero 1"},
                 {"dp4 zero2", "--dp 4 --zero 2"},
                 {"dp2 x tp2 zero2 micro2", "--dp 2 --tp 2 --zero 2 --micro 2"},
                 {"dp4 zero1 micro2", "--dp 4 --zero 1 --micro 2"}};
    const char *mpirun = getenv("MPIRUN") && *getenv("MPIRUN") ? getenv("MPIRUN") : "mpirun --allow-run-as-root --oversubscribe";
    double base[STEPS + 1];
    char cmd[600];
    size_t i;
    int n;
    mlp = getenv("MLP") && *getenv("MLP") ? getenv("MLP") : "build/mlp";
    snprintf(dir, sizeof dir, "/tmp/par_mlp_test_XXXXXX");
    if (!mkdtemp(dir)) return printf("mlp_example: 0 passed, 1 failed\n"), 1;
    CHECK_MSG(run("", mlp, "", "one") == 0, "one-rank run failed");
    n = read_losses("one", base);
    CHECK_MSG(n == STEPS && base[STEPS - 1] < 0.5 * base[0], "one rank: %d steps, loss %g -> %g (it must learn)", n,
              n > 0 ? base[0] : -1.0, n > 0 ? base[n - 1] : -1.0);
    for (i = 0; i < sizeof cases / sizeof cases[0]; i++) check_case("", mlp, cases[i].args, cases[i].name, base);
    /* bad input */
    CHECK_MSG(run("", mlp, "--dp 3", "bad") == 2, "--dp 3 (does not divide the batch) must be exit 2");
    CHECK_MSG(run("", mlp, "--tp 3", "bad") == 1, "--tp 3 (does not divide hidden 16) must fail with the strategy's error");
    /* under mpirun: one rank per process, the same program (par_launch) */
    snprintf(cmd, sizeof cmd, "command -v %.*s >/dev/null 2>&1 && %s --help 2>&1 | grep -q mpi", (int)strcspn(mpirun, " "),
             mpirun, mlp);
    if (system(cmd) == 0) {
        char pre[600];
        snprintf(pre, sizeof pre, "ASAN_OPTIONS=detect_leaks=0 %s -np 4", mpirun);
        check_case(pre, mlp, "--dp 2 --tp 2", "mpirun dp2 x tp2", base);
        check_case(pre, mlp, "--dp 4 --zero 2", "mpirun dp4 zero2", base);
        check_case(pre, mlp, "--dp 2 --tp 2 --zero 1 --micro 2", "mpirun dp2 x tp2 zero1 mb2", base);
    } else {
        printf("mlp mpirun: skipped (no mpirun, or build/mlp was built without MPI)\n");
    }
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
    return TEST_END("mlp_example");
}
