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

/* Default: the 1M-element sizes on the 2x4 mesh only (they dominate the run
   time); --quick skips them everywhere, --full runs them on every mesh. */
int main(int argc, char **argv) {
    int quick = argc > 1 && strcmp(argv[1], "--quick") == 0, full = argc > 1 && strcmp(argv[1], "--full") == 0;
    test_check_helpers();
    run_suite("2x2x2", 8, !full);
    run_suite("dp=2,tp=4", 8, quick);
    run_suite(NULL, 1, !full);
    run_suite(NULL, 2, !full);
    run_suite(NULL, 3, !full);
    return TEST_END("test_comm_threads");
}
