#define PARALLEL_IMPLEMENTATION
#include "test.h"
#include "comm_suite.h"

/* The backend-generic comm suite on the threads backend: 8 ranks as 2x2x2 and
   2x4 meshes, and small worlds of 1, 2 and 3 ranks. Each rank thread keeps its
   own counters (test.h's are not thread-safe); main adds them up afterwards. */

typedef struct suite_run {
    int quick;
    int passed[1024], failed[1024];
} suite_run;

static par_status run_suite_rank(par_ctx *ctx, void *arg) {
    suite_run *s = (suite_run *)arg;
    int r = par_ctx_rank(ctx);
    s->failed[r] = comm_suite_run(ctx, s->quick, &s->passed[r]);
    return PAR_OK;
}

static void run_suite(const char *mesh, int n, int quick) {
    static suite_run s;
    par_ctx_desc d;
    int r, passed = 0, failed = 0;
    memset(&s, 0, sizeof s);
    memset(&d, 0, sizeof d);
    s.quick = quick;
    d.mesh = mesh;
    d.timeout_ms = 5000;
    CHECK_OK(par_run_threads_desc(&d, n, run_suite_rank, &s));
    for (r = 0; r < n; r++) {
        passed += s.passed[r];
        failed += s.failed[r];
    }
    CHECK_MSG(failed == 0 && passed > 0, "mesh %s on %d threads: %d suite checks failed, %d passed",
              mesh ? mesh : "(1-D)", n, failed, passed);
    test_passed_ += passed;
    test_failed_ += failed;
    printf("  suite on %-8s %d ranks: %d passed, %d failed\n", mesh ? mesh : "1-D", n, passed, failed);
}

/* Default: the 1M-element sizes on the 2x4 mesh only (they dominate the run
   time); --quick skips them everywhere, --full runs them on every mesh. */
int main(int argc, char **argv) {
    int quick = argc > 1 && strcmp(argv[1], "--quick") == 0, full = argc > 1 && strcmp(argv[1], "--full") == 0;
    run_suite("2x2x2", 8, !full);
    run_suite("dp=2,tp=4", 8, quick);
    run_suite(NULL, 1, !full);
    run_suite(NULL, 2, !full);
    run_suite(NULL, 3, !full);
    return TEST_END("test_comm_threads");
}
