/* tests/test_params.c - >>params and >>tensor-parallel on the threads backend
   (tests/params_suite.h): data parallel over 1, 3 and 4 ranks, a 3-D mesh
   with parameters copied over several axes, dp x tp meshes. */
#include "test.h"
#include "params_suite.h"

typedef struct run {
    int passed[64], failed[64];
} run;

static par_status rank_body(par_ctx *ctx, void *arg) {
    run *r = (run *)arg;
    const int k = par_ctx_rank(ctx);
    if (k < 0 || k >= 64) return par_set_error(PAR_EINVAL, "rank %d outside the test's table", k);
    r->failed[k] = params_suite_run(ctx, &r->passed[k]);
    return PAR_OK;
}

static void on_mesh(const char *mesh, int n) {
    static run r;
    par_ctx_desc d;
    int k, p = 0, f = 0;
    memset(&r, 0, sizeof r);
    memset(&d, 0, sizeof d);
    d.mesh = mesh, d.timeout_ms = 20000, d.kernel_threads = 1;
    CHECK_OK(par_run_threads_desc(&d, n, rank_body, &r));
    for (k = 0; k < n; k++) p += r.passed[k], f += r.failed[k];
    CHECK_MSG(f == 0 && p > 0, "mesh %s: %d failed, %d passed", mesh, f, p);
    test_passed_ += p, test_failed_ += f;
    printf("  %-14s %d ranks: %d passed, %d failed\n", mesh, n, p, f);
}

int main(void) {
    on_mesh("dp=1", 1);
    on_mesh("dp=3", 3);
    on_mesh("dp=4", 4);
    on_mesh("a=2,b=2,c=2", 8);
    on_mesh("dp=2,tp=2", 4);
    on_mesh("dp=1,tp=4", 4);
    on_mesh("dp=4,tp=1", 4);
    on_mesh("tp=2", 2);
    return TEST_END("params");
}
