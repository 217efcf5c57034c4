/* tests/test_exec.c - the redistribution executor on the threads backend.

   Random plans (as in the core property tests) run by par_execute_plan on 8
   rank threads, for several meshes and dtypes, out of place and in place, must
   leave every rank with exactly what the mesh simulator computes. Plus the
   executor's argument errors. */
#include "test.h"
#include "exec_cases.h"

#define CASES 120

typedef struct run_arg {
    const exec_case *cases;
    int n;
    int failed[64]; /* per rank, written only by that rank */
} run_arg;

static par_status run_cases(par_ctx *ctx, void *p) {
    run_arg *a = (run_arg *)p;
    static const par_dtype dtypes[] = {PAR_F32, PAR_F64, PAR_I32, PAR_I64};
    int d, f = 0;
    for (d = 0; d < 4; d++) f += exec_cases_check(ctx, a->cases, a->n, dtypes[d], d == 1);
    a->failed[par_ctx_rank(ctx)] = f;
    return PAR_OK;
}

/* Plans that run on MindSpore's unified shape (sub-dim collectives between two
   local reshapes): the executor must meet some of them, or this test proves
   nothing about them. */
static int unified_plans, factored_plans;

static void test_mesh(const char *mesh_text) {
    exec_case *cases = NULL;
    int n = exec_cases_make(mesh_text, CASES, &cases), r, ranks;
    run_arg arg;
    par_ctx_desc desc;
    memset(&arg, 0, sizeof arg);
    memset(&desc, 0, sizeof desc);
    CHECK_MSG(n == CASES, "mesh %s: only %d of %d cases could be planned", mesh_text, n, CASES);
    ranks = n ? cases[0].ranks : 1;
    for (r = 0; r < n; r++) {
        const par_plan *p = &cases[r].plan;
        unified_plans += p->unified_ndim > 0;
        factored_plans += p->unified_ndim > 0 && p->unified_mesh.ndim != p->from.mesh.ndim; /* groups by rank list */
    }
    arg.cases = cases;
    arg.n = n;
    desc.mesh = mesh_text;
    desc.timeout_ms = 20000;
    CHECK_OK(par_run_threads_desc(&desc, ranks, run_cases, &arg));
    for (r = 0; r < ranks; r++) CHECK_MSG(arg.failed[r] == 0, "mesh %s rank %d: %d case runs failed", mesh_text, r, arg.failed[r]);
    exec_cases_free(cases, n);
}

typedef struct err_arg {
    int ok;
} err_arg;

static par_status run_errors(par_ctx *ctx, void *p) {
    err_arg *a = (err_arg *)p;
    par_executor *exec = NULL, *dummy = NULL;
    par_mesh other;
    par_layout from, to;
    par_plan plan;
    int64_t shape[1] = {8};
    float buf[8] = {0};
    int ok = 1;
    ok &= par_executor_create(ctx, &exec) == PAR_OK;
    ok &= par_executor_create(NULL, &dummy) == PAR_EINVAL;
    par_mesh_parse("4", &other);
    par_layout_parse(&from, &other, 1, shape, "[0]");
    par_layout_parse(&to, &other, 1, shape, "[None]");
    ok &= par_plan_redistribution(&from, &to, NULL, &plan) == PAR_OK;
    ok &= par_execute_plan(exec, &plan, PAR_F32, buf, buf) == PAR_EINVAL && strstr(par_last_error(), "not the context's mesh");
    ok &= par_execute_plan(exec, &plan, PAR_F32, NULL, buf) == PAR_EINVAL && strstr(par_last_error(), "NULL");
    ok &= par_execute_plan(exec, &plan, (par_dtype)99, buf, buf) == PAR_EINVAL && strstr(par_last_error(), "dtype");
    par_executor_destroy(exec);
    if (par_ctx_rank(ctx) == 0) a->ok = ok;
    return PAR_OK;
}

int main(void) {
    err_arg e = {0};
    par_ctx_desc desc;
    test_mesh("2x2x2");
    test_mesh("2x4");
    test_mesh("8");
    test_mesh("2x3");
    CHECK_MSG(unified_plans >= 10, "only %d random plans use the unified shape", unified_plans);
    CHECK_MSG(factored_plans >= 1, "no random plan runs on a factored mesh");
    printf("executor: %d of the random plans run on the unified shape, %d of them on a factored mesh\n", unified_plans,
           factored_plans);
    memset(&desc, 0, sizeof desc);
    desc.mesh = "dp=2,tp=4";
    CHECK_OK(par_run_threads_desc(&desc, 8, run_errors, &e));
    CHECK_MSG(e.ok, "executor argument errors");
    return TEST_END("executor");
}
