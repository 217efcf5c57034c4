#define _POSIX_C_SOURCE 200809L /* setenv: par_launch reads the launchers' variables */
#include "test.h"
#include "comm_suite.h"
#include <sched.h>
#include <stdlib.h>

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

/* The argument rules a host transport can call (the suite sees them through
   the backends): each rule's words, and the in-place forms accepted. */
static void test_check_helpers(void) {
    float y[64];
    const int ok[3] = {4, 1, 7}, twice[3] = {1, 4, 1}, outside[2] = {1, 9};
    int index = -1;
    par_comm_args a;
    CHECK_OK(par_comm_check_ranks("host", ok, 3, 8, 1, &index));
    CHECK(index == 1);
    CHECK_ERR(par_comm_check_ranks("host", twice, 3, 8, 1, &index), PAR_EINVAL, "host group_create: rank 1 is listed twice");
    CHECK_ERR(par_comm_check_ranks("host", outside, 2, 8, 1, NULL), PAR_EINVAL, "rank 9 (entry 1) is outside the world of 8");
    CHECK_ERR(par_comm_check_ranks("host", ok, 3, 8, 2, NULL), PAR_EINVAL, "rank 2 is not among the 3 ranks listed");
    CHECK_ERR(par_comm_check_ranks("host", ok, 0, 8, 1, NULL), PAR_EINVAL, "0 ranks listed, need 1..8");
    CHECK_ERR(par_comm_check_ranks("host", NULL, 3, 8, 1, NULL), PAR_EINVAL, "NULL rank list");
    memset(&a, 0, sizeof a);
    a.call = PAR_CALL_ALL_GATHER, a.send = y + 8, a.recv = y, a.count = 4, a.dtype = PAR_F32;
    CHECK_OK(par_comm_check_args("host", "tp", 4, 2, &a)); /* member 2 of 4 gathers in place */
    CHECK_ERR(par_comm_check_args("host", "tp", 4, 1, &a), PAR_EINVAL,
              "host all_gather on group tp: send overlaps recv but is not recv + index*count");
    a.call = PAR_CALL_REDUCE_SCATTER, a.send = y, a.recv = y + 12, a.op = PAR_REDUCE_AVG;
    CHECK_OK(par_comm_check_args("host", "tp", 4, 3, &a));
    CHECK_ERR(par_comm_check_args("host", "tp", 4, 0, &a), PAR_EINVAL, "recv overlaps send but is not send + index*count");
    a.op = (par_reduce_op)9;
    CHECK_ERR(par_comm_check_args("host", "tp", 4, 3, &a), PAR_EINVAL, "unknown reduce op 9");
    a.call = PAR_CALL_ALL_REDUCE, a.send = a.recv = y, a.op = PAR_REDUCE_MAX;
    CHECK_OK(par_comm_check_args("host", "tp", 4, 3, &a));
    a.recv = y + 3;
    CHECK_ERR(par_comm_check_args("host", "tp", 4, 3, &a), PAR_EINVAL, "send and recv overlap without being equal");
    a.call = PAR_CALL_ALL_TO_ALL, a.send = y, a.recv = y + 16;
    CHECK_OK(par_comm_check_args("host", "tp", 4, 0, &a)); /* 16 floats each: adjacent, not overlapping */
    a.recv = y + 15;
    CHECK_ERR(par_comm_check_args("host", "tp", 4, 0, &a), PAR_EINVAL, "send and recv overlap");
    a.call = PAR_CALL_BROADCAST, a.send = y, a.recv = NULL, a.peer = 4;
    CHECK_ERR(par_comm_check_args("host", "tp", 4, 0, &a), PAR_EINVAL, "root 4 is outside the group's 4 members");
    a.call = PAR_CALL_RECV, a.peer = 1;
    CHECK_ERR(par_comm_check_args("host", "tp", 4, 0, &a), PAR_EINVAL, "host recv on group tp: NULL buf with count 4");
    a.call = PAR_CALL_SEND, a.count = -2;
    CHECK_ERR(par_comm_check_args("host", "tp", 4, 0, &a), PAR_EINVAL, "count -2 is negative");
    a.count = INT64_MAX / 8;
    CHECK_ERR(par_comm_check_args("host", "tp", 4, 0, &a), PAR_EINVAL, "is too large");
    a.call = PAR_CALL_BARRIER, a.send = NULL;
    CHECK_OK(par_comm_check_args("host", "tp", 4, 0, &a)); /* a barrier moves nothing */
    CHECK(strcmp(par_comm_call_name(PAR_CALL_REDUCE_SCATTER), "reduce_scatter") == 0);
    CHECK(strcmp(par_comm_call_name((par_comm_call)42), "?") == 0);
}

/* The ctx-level wrappers (par_all_reduce, ...) on dp=2,tp=4 as 8 threads. Each
   rank counts its own failures (test.h's counters are not thread-safe). */
typedef struct wrap_run {
    int ran[8], failed[8], passed[8], size[8];
} wrap_run;

#define RCHECK(cond)                                                                          \
    do {                                                                                      \
        if (cond) {                                                                           \
            w->passed[r]++;                                                                   \
        } else {                                                                              \
            w->failed[r]++;                                                                   \
            fprintf(stderr, "rank %d: %s:%d: FAILED: %s (last error: %s)\n", r, __FILE__, __LINE__, #cond, \
                    par_last_error());                                                        \
        }                                                                                     \
    } while (0)

static par_status wrappers_rank(par_ctx *ctx, void *arg) {
    wrap_run *w = (wrap_run *)arg;
    int r = par_ctx_rank(ctx), i, index = -1, count = 0, done = 0, tries;
    int dp = r / 4, tp = r % 4; /* dp = device dim 1, tp = device dim 0 */
    par_comm_group *tpg = NULL, *dpg = NULL;
    par_request *req = NULL;
    float x[8], y[32], z[8];
    int64_t big[4], got;
    w->ran[r] = 1;
    w->size[r] = par_ctx_size(ctx);
    RCHECK(par_ctx_group(ctx, 1u << 0, &tpg, &index, &count) == PAR_OK && index == tp && count == 4);
    RCHECK(par_ctx_group(ctx, 1u << 1, &dpg, NULL, NULL) == PAR_OK);

    /* all_reduce over tp: sum of tp indices 0..3 = 6, plus 4 * (10 * dp) */
    for (i = 0; i < 8; i++) x[i] = (float)(tp + 10 * dp + i);
    RCHECK(par_all_reduce(ctx, tpg, x, z, 8, PAR_F32, PAR_REDUCE_SUM, NULL) == PAR_OK);
    RCHECK(z[0] == (float)(6 + 40 * dp) && z[7] == (float)(6 + 40 * dp + 28));
    /* NULL group = the world: sum of ranks 0..7 = 28 */
    got = r;
    RCHECK(par_all_reduce(ctx, NULL, &got, &got, 1, PAR_I64, PAR_REDUCE_SUM, NULL) == PAR_OK && got == 28);
    /* max, async, completed by par_wait */
    got = r;
    RCHECK(par_all_reduce(ctx, dpg, &got, &got, 1, PAR_I64, PAR_REDUCE_MAX, &req) == PAR_OK);
    RCHECK(par_wait(ctx, req) == PAR_OK && got == 4 + tp);
    /* all_gather over tp: member j's value j */
    x[0] = (float)(100 * dp + tp);
    RCHECK(par_all_gather(ctx, tpg, x, y, 1, PAR_F32, NULL) == PAR_OK);
    RCHECK(y[0] == (float)(100 * dp) && y[3] == (float)(100 * dp + 3));
    /* reduce_scatter over tp: block j of every member is j + member; block tp sums to 4 tp + 6 */
    for (i = 0; i < 4; i++) y[i] = (float)(i + tp);
    RCHECK(par_reduce_scatter(ctx, tpg, y, z, 1, PAR_F32, PAR_REDUCE_SUM, NULL) == PAR_OK && z[0] == (float)(4 * tp + 6));
    /* all_to_all over tp: send block j = 10 * tp + j; receive block j = 10 * j + tp */
    for (i = 0; i < 4; i++) y[i] = (float)(10 * tp + i);
    RCHECK(par_all_to_all(ctx, tpg, y, z, 1, PAR_F32, NULL) == PAR_OK);
    RCHECK(z[0] == (float)tp && z[3] == (float)(30 + tp));
    /* broadcast from tp member 2, async, completed by polling par_test */
    big[0] = tp == 2 ? 4242 : -1;
    RCHECK(par_broadcast(ctx, tpg, big, 1, PAR_I64, 2, &req) == PAR_OK);
    {
        par_status st = PAR_OK;
        /* poll (yielding the core to the other rank threads); after ~1e6 polls wait */
        for (tries = 0; tries < 1000000 && !done && st == PAR_OK; tries++)
            if ((st = par_test(ctx, req, &done)) == PAR_OK && !done) sched_yield();
        if (st == PAR_OK && !done) st = par_wait(ctx, req);
        RCHECK(st == PAR_OK && big[0] == 4242);
    }
    /* a ring over tp: send to the next, receive from the previous (both async) */
    {
        par_request *sr = NULL, *rr = NULL;
        int64_t out = 1000 * dp + tp, in = -1;
        RCHECK(par_send(ctx, tpg, &out, 1, PAR_I64, (tp + 1) % 4, &sr) == PAR_OK);
        RCHECK(par_recv(ctx, tpg, &in, 1, PAR_I64, (tp + 3) % 4, &rr) == PAR_OK);
        RCHECK(par_wait(ctx, sr) == PAR_OK && par_wait(ctx, rr) == PAR_OK);
        RCHECK(in == 1000 * dp + (tp + 3) % 4);
    }
    RCHECK(par_barrier(ctx, NULL) == PAR_OK);
    RCHECK(par_barrier(ctx, dpg) == PAR_OK);
    /* errors: the backend's words come through; NULL requests are complete */
    RCHECK(par_all_reduce(ctx, tpg, x, z, -1, PAR_F32, PAR_REDUCE_SUM, NULL) == PAR_EINVAL &&
           strstr(par_last_error(), "count -1 is negative") != NULL);
    RCHECK(par_broadcast(ctx, tpg, big, 1, PAR_I64, 4, NULL) == PAR_EINVAL &&
           strstr(par_last_error(), "root 4") != NULL);
    RCHECK(par_wait(ctx, NULL) == PAR_OK);
    done = 0;
    RCHECK(par_test(ctx, NULL, &done) == PAR_OK && done == 1);
    RCHECK(par_test(ctx, NULL, NULL) == PAR_EINVAL && strstr(par_last_error(), "par_test: NULL done") != NULL);
    return PAR_OK;
}

static par_status count_rank(par_ctx *ctx, void *arg) {
    wrap_run *w = (wrap_run *)arg;
    int r = par_ctx_rank(ctx);
    if (r < 0 || r >= 8) return par_set_error(PAR_EINVAL, "rank %d out of the test's range", r);
    w->ran[r] = 1;
    w->size[r] = par_ctx_size(ctx);
    return PAR_OK;
}

static par_status fail_rank(par_ctx *ctx, void *arg) {
    (void)arg;
    return par_ctx_rank(ctx) == 1 ? par_set_error(PAR_EIO, "rank one could not read its data") : PAR_OK;
}

static void test_wrappers_and_launch(void) {
    static wrap_run w;
    par_ctx_desc d;
    int r, passed = 0, failed = 0, ran = 0;
    float x = 1;
    memset(&d, 0, sizeof d);
    d.mesh = "dp=2,tp=4";
    d.timeout_ms = 5000;
    /* no launcher variables here (the test may itself run under one) */
    unsetenv("OMPI_COMM_WORLD_SIZE"), unsetenv("OMPI_COMM_WORLD_RANK"), unsetenv("RANK"), unsetenv("WORLD_SIZE");
    unsetenv("PMI_RANK"), unsetenv("PMI_SIZE");

    /* par_launch without a launcher: threads, 0 = the mesh's 8 */
    memset(&w, 0, sizeof w);
    CHECK_OK(par_launch(&d, 0, wrappers_rank, &w));
    for (r = 0; r < 8; r++) passed += w.passed[r], failed += w.failed[r], ran += w.ran[r] && w.size[r] == 8;
    CHECK_MSG(failed == 0 && passed == 8 * 25, "wrappers: %d passed, %d failed on 8 ranks", passed, failed);
    CHECK_INT(ran, 8);
    test_passed_ += passed;
    test_failed_ += failed;
    /* explicit count, no mesh */
    memset(&w, 0, sizeof w);
    CHECK_OK(par_launch(NULL, 3, count_rank, &w));
    CHECK(w.ran[0] && w.ran[2] && !w.ran[3] && w.size[1] == 3);
    /* a single-rank launcher environment is no multi-process job */
    setenv("RANK", "0", 1), setenv("WORLD_SIZE", "1", 1);
    memset(&w, 0, sizeof w);
    CHECK_OK(par_launch(NULL, 2, count_rank, &w));
    CHECK(w.ran[1] && w.size[0] == 2);
    /* a failing rank's status and words come back */
    CHECK_ERR(par_launch(NULL, 2, fail_rank, NULL), PAR_EIO, "rank 1: rank one could not read its data");
    /* argument errors */
    CHECK_ERR(par_launch(NULL, 0, count_rank, &w), PAR_EINVAL, "par_launch: threads is 0 and there is no desc->mesh");
    CHECK_ERR(par_launch(&d, -2, count_rank, &w), PAR_EINVAL, "par_launch: threads is -2; it must be >= 0");
    CHECK_ERR(par_launch(&d, 0, NULL, &w), PAR_EINVAL, "par_launch: NULL rank function");
    CHECK_ERR(par_launch(&d, 4, count_rank, &w), PAR_EINVAL, "mesh [dp=2,tp=4] has 8 devices but the world has 4 ranks");
    /* launched as one of several processes, in a build without MPI */
    setenv("RANK", "1", 1), setenv("WORLD_SIZE", "4", 1);
    CHECK_ERR(par_launch(&d, 0, count_rank, &w), PAR_EUNSUPPORTED,
              "one of 4 (mpirun?), but this build has no MPI backend: build with mpicc -DPARALLEL_WITH_MPI");
    unsetenv("RANK"), unsetenv("WORLD_SIZE");
    setenv("OMPI_COMM_WORLD_SIZE", "2", 1); /* mpirun's variable alone is enough */
    CHECK_ERR(par_launch(&d, 0, count_rank, &w), PAR_EUNSUPPORTED, "build with mpicc -DPARALLEL_WITH_MPI");
    unsetenv("OMPI_COMM_WORLD_SIZE");
    /* wrappers need a context */
    CHECK_ERR(par_all_reduce(NULL, NULL, &x, &x, 1, PAR_F32, PAR_REDUCE_SUM, NULL), PAR_EINVAL, "par_all_reduce: NULL ctx");
    CHECK_ERR(par_barrier(NULL, NULL), PAR_EINVAL, "par_barrier: NULL ctx");
    CHECK_ERR(par_wait(NULL, NULL), PAR_EINVAL, "par_wait: NULL ctx");
    CHECK_ERR(par_recv(NULL, NULL, &x, 1, PAR_F32, 0, NULL), PAR_EINVAL, "par_recv: NULL ctx");
}

/* Default: the 1M-element sizes on the 2x4 mesh only (they dominate the run
   time); --quick skips them everywhere, --full runs them on every mesh. */
/* PAR_CHECK passes a failure up with its sentence and goes on after success;
   par_printf0 prints on rank 0 only. */
static par_status parse_then_mark(const char *text, int *reached) {
    par_mesh m;
    PAR_CHECK(par_mesh_parse(text, &m));
    *reached = 1;
    return PAR_OK;
}

static par_status print_body(par_ctx *ctx, void *arg) {
    int *printed = (int *)arg;
    printed[par_ctx_rank(ctx)] = par_printf0(ctx, "  (par_printf0 from rank %d of %d)\n", par_ctx_rank(ctx),
                                             par_ctx_size(ctx));
    return PAR_OK;
}

static void test_host_helpers(void) {
    int reached = 0, printed[3] = {-1, -1, -1};
    CHECK_INT(parse_then_mark("dp=2", &reached), PAR_OK);
    CHECK(reached == 1);
    reached = 0;
    CHECK(parse_then_mark("dp=", &reached) != PAR_OK && reached == 0 && par_last_error()[0] != 0);
    CHECK_OK(par_run_threads(3, print_body, printed));
    CHECK_MSG(printed[0] == (int)strlen("  (par_printf0 from rank 0 of 3)\n") && printed[1] == 0 && printed[2] == 0,
              "printed %d %d %d", printed[0], printed[1], printed[2]);
    CHECK_INT(par_printf0(NULL, "x"), 0);
}

int main(int argc, char **argv) {
    int quick = argc > 1 && strcmp(argv[1], "--quick") == 0, full = argc > 1 && strcmp(argv[1], "--full") == 0;
    test_check_helpers();
    test_host_helpers();
    test_wrappers_and_launch();
    run_suite("2x2x2", 8, !full);
    run_suite("dp=2,tp=4", 8, quick);
    run_suite(NULL, 1, !full);
    run_suite(NULL, 2, !full);
    run_suite(NULL, 3, !full);
    return TEST_END("test_comm_threads");
}
