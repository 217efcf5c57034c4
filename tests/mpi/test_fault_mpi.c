/* tests/mpi/test_fault_mpi.c - faults of the MPI backend under mpirun -np 4.

   What the library itself can see and must report, on every surviving rank,
   within the context timeout and never as a success:
     1. a rank late by more than the timeout (after two good collectives):
        PAR_ETIMEOUT naming op, group, rank and the collective's number; the
        group refuses later ops; the late rank, once there, times out too
        (its peers have left), with the same names;
     2. mismatched counts on one all_reduce: PAR_EINVAL on every rank naming
        the field and its range, receive buffers not taken as a result;
     3. mismatched ops (all_reduce against all_gather): PAR_EINVAL naming both;
     4. a rank that leaves early (returns an error instead of joining): the
        others time out by name;
     5. collectives called in a different group order (world, then a pair;
        the pair first on rank 1): named timeouts on both sides, no hang.
   A rank that crashes is MPI's business, not the library's: mpirun notices the
   dead process and kills the job (tests/mpi/crash.sh checks that it does so
   quickly, under --crash below).

   Every rank runs the checks; rank 0 prints ONE summary line with the counts
   summed over ranks (the other MPI tests' convention). */
#define _POSIX_C_SOURCE 200809L
#include <mpi.h>
#include "test.h"
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#define TIMEOUT_MS 400

static par_ctx *make_ctx(void) {
    par_ctx_desc desc;
    par_ctx *ctx = NULL;
    memset(&desc, 0, sizeof desc);
    desc.timeout_ms = TIMEOUT_MS;
    desc.mpi_keep_alive = 1; /* these faults are checked one after another in one job */
    CHECK_OK(par_ctx_init_mpi(&desc, &ctx));
    return ctx;
}

static void late_rank(int n) {
    par_ctx *ctx = make_ctx();
    par_comm_group *g = NULL;
    const par_comm_table *c;
    int64_t v;
    int rank, k;
    if (!ctx) return;
    c = par_ctx_comm(ctx);
    rank = par_ctx_rank(ctx);
    CHECK_OK(par_ctx_group(ctx, 1, &g, NULL, NULL));
    for (k = 0; k < 2; k++) {
        v = rank + k;
        CHECK_OK(c->all_reduce(c->user, g, &v, &v, 1, PAR_I64, PAR_REDUCE_SUM, NULL));
        CHECK_INT(v, (int64_t)n * (n - 1) / 2 + (int64_t)n * k);
    }
    v = 1;
    if (rank == n - 1) {
        poll(NULL, 0, TIMEOUT_MS + 600);
        /* the others posted the signature before giving up, so it completes;
           the data part then finds nobody: a named timeout here too */
        CHECK_ERR(c->all_reduce(c->user, g, &v, &v, 1, PAR_I64, PAR_REDUCE_SUM, NULL), PAR_ETIMEOUT,
                  "collective #3 on this group) timed out after 400 ms");
        CHECK_INT(v, 1);
    } else {
        double t0 = MPI_Wtime(), dt;
        char want[160];
        CHECK_ERR(c->all_reduce(c->user, g, &v, &v, 1, PAR_I64, PAR_REDUCE_SUM, NULL), PAR_ETIMEOUT,
                  "collective #3 on this group) timed out after 400 ms");
        dt = MPI_Wtime() - t0;
        snprintf(want, sizeof want, "mpi all_reduce on group [0,1,2,3] (rank %d, collective #3", rank);
        CHECK_MSG(strstr(par_last_error(), want) != NULL, "want \"%s\"", want);
        CHECK_MSG(dt >= TIMEOUT_MS / 1000.0 - 0.01 && dt < TIMEOUT_MS / 1000.0 + 1.5, "gave up after %.2f s", dt);
        CHECK_ERR(c->barrier(c->user, g), PAR_ECOMM, "unusable after an earlier timeout or mismatch");
    }
    MPI_Barrier(MPI_COMM_WORLD);
    par_ctx_destroy(ctx);
}

static void count_mismatch(void) {
    par_ctx *ctx = make_ctx();
    par_comm_group *g = NULL;
    const par_comm_table *c;
    float in[16], out[16];
    int rank, k;
    if (!ctx) return;
    c = par_ctx_comm(ctx);
    rank = par_ctx_rank(ctx);
    CHECK_OK(par_ctx_group(ctx, 1, &g, NULL, NULL));
    for (k = 0; k < 16; k++) in[k] = 1.0f, out[k] = -7.0f;
    CHECK_ERR(c->all_reduce(c->user, g, in, out, rank == 1 ? 12 : 10, PAR_F32, PAR_REDUCE_SUM, NULL), PAR_EINVAL,
              "collective mismatch: the members passed count from 10 to 12");
    CHECK_MSG(strstr(par_last_error(), "(rank ") && strstr(par_last_error(), "collective #1 on this group"), "%s",
              par_last_error());
    CHECK_ERR(c->barrier(c->user, g), PAR_ECOMM, "unusable");
    MPI_Barrier(MPI_COMM_WORLD);
    par_ctx_destroy(ctx);
}

static void op_mismatch(void) {
    par_ctx *ctx = make_ctx();
    par_comm_group *g = NULL;
    const par_comm_table *c;
    float in[4] = {1, 1, 1, 1}, out[16];
    int rank;
    if (!ctx) return;
    c = par_ctx_comm(ctx);
    rank = par_ctx_rank(ctx);
    CHECK_OK(par_ctx_group(ctx, 1, &g, NULL, NULL));
    CHECK_OK(c->barrier(c->user, g));
    if (rank == 1)
        CHECK_ERR(c->all_gather(c->user, g, in, out, 4, PAR_F32, NULL), PAR_EINVAL,
                  "collective mismatch: the members passed op from all_reduce to all_gather (this rank: all_gather)");
    else
        CHECK_ERR(c->all_reduce(c->user, g, in, out, 4, PAR_F32, PAR_REDUCE_SUM, NULL), PAR_EINVAL,
                  "collective mismatch: the members passed op from all_reduce to all_gather (this rank: all_reduce)");
    CHECK_MSG(strstr(par_last_error(), "collective #2 on this group"), "%s", par_last_error());
    MPI_Barrier(MPI_COMM_WORLD);
    par_ctx_destroy(ctx);
}

static void early_exit(int n) {
    par_ctx *ctx = make_ctx();
    par_comm_group *g = NULL;
    const par_comm_table *c;
    float x = 1;
    int rank;
    if (!ctx) return;
    c = par_ctx_comm(ctx);
    rank = par_ctx_rank(ctx);
    CHECK_OK(par_ctx_group(ctx, 1, &g, NULL, NULL));
    if (rank != 2) {
        double t0 = MPI_Wtime();
        CHECK_ERR(c->all_reduce(c->user, g, &x, &x, 1, PAR_F32, PAR_REDUCE_SUM, NULL), PAR_ETIMEOUT, "timed out");
        CHECK_MSG(MPI_Wtime() - t0 < TIMEOUT_MS / 1000.0 + 1.5, "gave up after %.2f s", MPI_Wtime() - t0);
    }
    /* rank 2 "returned its error" without joining. Should it call the op
       after all, it finds its peers gone: a named timeout, not a result. */
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 2) {
        float y = 1;
        (void)n;
        CHECK_ERR(c->all_reduce(c->user, g, &y, &y, 1, PAR_F32, PAR_REDUCE_SUM, NULL), PAR_ETIMEOUT,
                  "(rank 2, collective #1 on this group) timed out");
        CHECK(y == 1);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    par_ctx_destroy(ctx);
}

static void group_order(void) {
    par_ctx *ctx = make_ctx();
    par_comm_group *world = NULL, *pair = NULL;
    const par_comm_table *c;
    float x[4] = {1, 1, 1, 1};
    int rank, members[2] = {0, 1};
    double t0;
    if (!ctx) return;
    c = par_ctx_comm(ctx);
    rank = par_ctx_rank(ctx);
    CHECK_OK(par_ctx_group(ctx, 1, &world, NULL, NULL));
    if (rank < 2) CHECK_OK(par_ctx_group_ranks(ctx, members, 2, &pair));
    t0 = MPI_Wtime();
    if (rank == 1) {
        CHECK_ERR(c->all_reduce(c->user, pair, x, x, 4, PAR_F32, PAR_REDUCE_SUM, NULL), PAR_ETIMEOUT,
                  "mpi all_reduce on group [0,1] (rank 1, collective #1 on this group) timed out");
    } else {
        CHECK_ERR(c->all_reduce(c->user, world, x, x, 4, PAR_F32, PAR_REDUCE_SUM, NULL), PAR_ETIMEOUT,
                  "on group [0,1,2,3]");
    }
    CHECK_MSG(MPI_Wtime() - t0 < TIMEOUT_MS / 1000.0 + 1.5, "gave up after %.2f s", MPI_Wtime() - t0);
    MPI_Barrier(MPI_COMM_WORLD);
    /* the missing halves, through fresh groups? No: the broken groups refuse
       ops, and MPI cannot cancel the pending ones. They stay pending; the
       context is destroyed and the host finalizes (OpenMPI does not wait for
       them). */
    par_ctx_destroy(ctx);
}

/* --crash: rank 1 posts an all_reduce and dies (abort) before it completes;
   rank 0 waits in it. Run by tests/mpi/crash.sh with -np 2, which checks that
   mpirun ends the job (non-zero, well within the timeout) instead of hanging. */
static int crash_mode(void) {
    par_ctx_desc desc;
    par_ctx *ctx = NULL;
    par_comm_group *g = NULL;
    const par_comm_table *c;
    par_request *req = NULL;
    float x[1024];
    int i;
    memset(&desc, 0, sizeof desc);
    desc.timeout_ms = 60000;
    for (i = 0; i < 1024; i++) x[i] = 1;
    if (par_ctx_init_mpi(&desc, &ctx) != PAR_OK || par_ctx_group(ctx, 1, &g, NULL, NULL) != PAR_OK) return 2;
    c = par_ctx_comm(ctx);
    if (par_ctx_rank(ctx) == 1) {
        poll(NULL, 0, 200);
        if (c->all_reduce(c->user, g, x, x, 1024, PAR_F32, PAR_REDUCE_SUM, &req) != PAR_OK) return 2;
        fprintf(stderr, "rank 1: crashing in the middle of an all_reduce\n");
        abort();
    }
    if (c->all_reduce(c->user, g, x, x, 1024, PAR_F32, PAR_REDUCE_SUM, NULL) == PAR_OK)
        printf("rank 0: all_reduce returned PAR_OK with x[0] = %g: a crashed peer passed as success\n", x[0]);
    else
        printf("rank 0: %s\n", par_last_error());
    par_ctx_destroy(ctx);
    return 0;
}

/* --stall: rank 1 stops itself for good (SIGSTOP) before an all_reduce;
   rank 0 times out (2 s), names the op, and par_ctx_destroy ends the job with
   MPI_Abort (the default: no finalize waiting forever, no MPI call touching
   the abandoned request). Run by tests/mpi/crash.sh with -np 2. */
static int stall_mode(void) {
    par_ctx_desc desc;
    par_ctx *ctx = NULL;
    par_comm_group *g = NULL;
    const par_comm_table *c;
    float x[1024];
    int i;
    memset(&desc, 0, sizeof desc);
    desc.timeout_ms = 2000;
    for (i = 0; i < 1024; i++) x[i] = 1;
    if (par_ctx_init_mpi(&desc, &ctx) != PAR_OK || par_ctx_group(ctx, 1, &g, NULL, NULL) != PAR_OK) return 2;
    c = par_ctx_comm(ctx);
    if (c->all_reduce(c->user, g, x, x, 1024, PAR_F32, PAR_REDUCE_SUM, NULL) != PAR_OK) return 2;
    if (par_ctx_rank(ctx) == 1) {
        fprintf(stderr, "rank 1: stopping for good\n");
        kill(getpid(), SIGSTOP);
    }
    if (c->all_reduce(c->user, g, x, x, 1024, PAR_F32, PAR_REDUCE_SUM, NULL) == PAR_OK)
        printf("rank 0: all_reduce returned PAR_OK: a stopped peer passed as success\n");
    else
        fprintf(stderr, "rank 0: %s\n", par_last_error());
    par_ctx_destroy(ctx); /* MPI_Abort: does not return */
    printf("rank 0: par_ctx_destroy returned after a timeout\n");
    return 0;
}

int main(int argc, char **argv) {
    int provided = 0, rank = 0, size = 1, counts[2], sums[2] = {0, 0};
    MPI_Init_thread(&argc, &argv, MPI_THREAD_SERIALIZED, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (argc > 1 && strcmp(argv[1], "--crash") == 0) {
        int rc = crash_mode();
        MPI_Finalize();
        return rc;
    }
    if (argc > 1 && strcmp(argv[1], "--stall") == 0) return stall_mode();
    if (size != 4) {
        if (rank == 0) printf("test_fault_mpi: needs mpirun -np 4 (got %d)\nfault_mpi: 0 passed, 1 failed\n", size);
        MPI_Finalize();
        return 1;
    }
    late_rank(size);
    count_mismatch();
    op_mismatch();
    early_exit(size);
    group_order();
    counts[0] = test_passed_;
    counts[1] = test_failed_;
    MPI_Reduce(counts, sums, 2, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD);
    MPI_Finalize();
    if (rank != 0) return test_failed_ ? 1 : 0;
    test_passed_ = sums[0];
    test_failed_ = sums[1];
    return TEST_END("fault_mpi");
}
