#define _POSIX_C_SOURCE 200809L /* nanosleep */
#include "test.h"
#include <time.h>

/* Faults of the threads backend: a rank that never arrives (timeout), a rank
   that fails or returns early (fast PAR_ECOMM everywhere, also later), bad
   arguments and mismatched collectives (count, op: PAR_EINVAL; group order: a
   named timeout), a receiver that leaves mid-exchange; every error names the op,
   the group, the rank and the collective's (or p2p op's) number; and the
   process stays usable afterwards. Rank threads record what they saw; main checks it. */

#define TIMEOUT_MS 1500

static double now_s(void) {
    struct timespec ts;
    timespec_get(&ts, TIME_UTC);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

typedef struct seen {
    par_status st[8], st2[8];
    char msg[8][512], msg2[8][512];
    double elapsed[8];
} seen;

static void keep(seen *s, int r, par_status st, double t0) {
    s->st[r] = st;
    s->elapsed[r] = now_s() - t0;
    snprintf(s->msg[r], sizeof s->msg[r], "%.400s", st ? par_last_error() : "");
}

/* Rank 3 skips the all_reduce and waits on a later barrier of a different group. */
static par_status absent_rank(par_ctx *ctx, void *arg) {
    seen *s = (seen *)arg;
    const par_comm_table *c = par_ctx_comm(ctx);
    par_comm_group *g;
    float x[16] = {0};
    int r = par_ctx_rank(ctx);
    double t0;
    par_status st = par_ctx_group(ctx, 1, &g, NULL, NULL);
    if (st != PAR_OK) return st;
    t0 = now_s();
    if (r == 3) return PAR_OK; /* leaves without joining, and without an error */
    keep(s, r, c->all_reduce(c->user, g, x, x, 16, PAR_F32, PAR_REDUCE_SUM, NULL), t0);
    return PAR_OK;
}

/* Rank 3 sleeps past the timeout instead of arriving (alive but late). */
static par_status late_rank(par_ctx *ctx, void *arg) {
    seen *s = (seen *)arg;
    const par_comm_table *c = par_ctx_comm(ctx);
    par_comm_group *g;
    float x[16] = {0};
    int r = par_ctx_rank(ctx);
    double t0;
    par_status st = par_ctx_group(ctx, 1, &g, NULL, NULL);
    if (st != PAR_OK) return st;
    t0 = now_s();
    if (r == 3) {
        struct timespec d = {(TIMEOUT_MS + 700) / 1000, ((TIMEOUT_MS + 700) % 1000) * 1000000L};
        while (nanosleep(&d, &d) != 0) {
        }
    }
    keep(s, r, c->all_reduce(c->user, g, x, x, 16, PAR_F32, PAR_REDUCE_SUM, NULL), t0);
    /* the group is broken now: the next op fails fast on every rank */
    s->st2[r] = c->barrier(c->user, g);
    snprintf(s->msg2[r], sizeof s->msg2[r], "%.400s", par_last_error());
    return PAR_OK;
}

/* Rank 2 fails (returns an error) while the others are in an all_reduce; then
   the others try another collective on a different group. */
static par_status failing_rank(par_ctx *ctx, void *arg) {
    seen *s = (seen *)arg;
    const par_comm_table *c = par_ctx_comm(ctx);
    par_comm_group *g, *pair;
    float x[64] = {0};
    int r = par_ctx_rank(ctx), other[2];
    double t0;
    par_status st = par_ctx_group(ctx, 1, &g, NULL, NULL);
    if (st != PAR_OK) return st;
    other[0] = r & ~1;
    other[1] = r | 1;
    if ((st = par_ctx_group_ranks(ctx, other, 2, &pair)) != PAR_OK) return st;
    t0 = now_s();
    if (r == 2) return par_set_error(PAR_EIO, "rank two's disk is on fire");
    keep(s, r, c->all_reduce(c->user, g, x, x, 64, PAR_F32, PAR_REDUCE_SUM, NULL), t0);
    s->st2[r] = c->all_reduce(c->user, pair, x, x, 64, PAR_F32, PAR_REDUCE_SUM, NULL);
    snprintf(s->msg2[r], sizeof s->msg2[r], "%.400s", par_last_error());
    return PAR_OK;
}

/* recv from a rank that returns without sending. */
static par_status missing_sender(par_ctx *ctx, void *arg) {
    seen *s = (seen *)arg;
    const par_comm_table *c = par_ctx_comm(ctx);
    par_comm_group *g;
    int v[4];
    double t0;
    par_status st = par_ctx_group(ctx, 1, &g, NULL, NULL);
    if (st != PAR_OK) return st;
    t0 = now_s();
    if (par_ctx_rank(ctx) == 0) keep(s, 0, c->recv(c->user, g, v, 4, PAR_I32, 1, NULL), t0);
    return PAR_OK;
}

/* Mismatched counts, ops and p2p sizes: everyone gets PAR_EINVAL naming both. */
static par_status mismatch(par_ctx *ctx, void *arg) {
    seen *s = (seen *)arg;
    const par_comm_table *c = par_ctx_comm(ctx);
    par_comm_group *g;
    float x[64] = {0};
    int r = par_ctx_rank(ctx);
    par_status st = par_ctx_group(ctx, 1, &g, NULL, NULL);
    if (st != PAR_OK) return st;
    keep(s, r, c->all_reduce(c->user, g, x, x, r == 1 ? 12 : 10, PAR_F32, PAR_REDUCE_SUM, NULL), now_s());
    if (r < 2) {
        s->st2[r] = r == 0 ? c->send(c->user, g, x, 5, PAR_F32, 1, NULL) : c->recv(c->user, g, x, 7, PAR_F32, 0, NULL);
        snprintf(s->msg2[r], sizeof s->msg2[r], "%.400s", par_last_error());
    }
    return PAR_OK;
}

/* Three good all_reduces, then rank 3 is late for the fourth: the timeout names
   the collective's number on the group, and the good ones gave the right sums. */
static par_status late_after_good(par_ctx *ctx, void *arg) {
    seen *s = (seen *)arg;
    const par_comm_table *c = par_ctx_comm(ctx);
    par_comm_group *g;
    int64_t v;
    int r = par_ctx_rank(ctx), k;
    par_status st = par_ctx_group(ctx, 1, &g, NULL, NULL);
    if (st != PAR_OK) return st;
    for (k = 0; k < 3; k++) {
        v = r + k;
        if ((st = c->all_reduce(c->user, g, &v, &v, 1, PAR_I64, PAR_REDUCE_SUM, NULL)) != PAR_OK) return st;
        if (v != 6 + 4 * k) return par_set_error(PAR_ECOMM, "all_reduce %d gave %lld, want %d", k, (long long)v, 6 + 4 * k);
    }
    if (r == 3) {
        struct timespec d = {(TIMEOUT_MS + 500) / 1000, ((TIMEOUT_MS + 500) % 1000) * 1000000L};
        while (nanosleep(&d, &d) != 0) {
        }
    }
    v = -1;
    keep(s, r, c->all_reduce(c->user, g, &v, &v, 1, PAR_I64, PAR_REDUCE_SUM, NULL), now_s());
    return PAR_OK;
}

/* Group order: on 3 ranks, rank 0 calls the world group then the pair [0,1],
   rank 1 the pair first. Neither collective can complete: both sides must get
   a named timeout, never hang. Rank 2 only joins the world collective. */
static par_status group_order(par_ctx *ctx, void *arg) {
    seen *s = (seen *)arg;
    const par_comm_table *c = par_ctx_comm(ctx);
    par_comm_group *world, *pair = NULL;
    float x[4] = {1, 1, 1, 1};
    int r = par_ctx_rank(ctx), members[2] = {0, 1};
    double t0;
    par_status st = par_ctx_group(ctx, 1, &world, NULL, NULL);
    if (st != PAR_OK) return st;
    if (r < 2 && (st = par_ctx_group_ranks(ctx, members, 2, &pair)) != PAR_OK) return st;
    t0 = now_s();
    if (r == 1) keep(s, r, c->all_reduce(c->user, pair, x, x, 4, PAR_F32, PAR_REDUCE_SUM, NULL), t0);
    else keep(s, r, c->all_reduce(c->user, world, x, x, 4, PAR_F32, PAR_REDUCE_SUM, NULL), t0);
    return PAR_OK;
}

/* Rank 1 calls all_gather while the others call all_reduce (buffers big enough
   for either): everyone gets PAR_EINVAL naming both ops and the collective's
   number, and no receive buffer is touched (no wrong result passes as one). */
static par_status op_mismatch(par_ctx *ctx, void *arg) {
    seen *s = (seen *)arg;
    const par_comm_table *c = par_ctx_comm(ctx);
    par_comm_group *g;
    float in[8], out[32];
    int r = par_ctx_rank(ctx), k;
    par_status st = par_ctx_group(ctx, 1, &g, NULL, NULL);
    if (st != PAR_OK) return st;
    for (k = 0; k < 8; k++) in[k] = (float)(r + 1);
    for (k = 0; k < 32; k++) out[k] = -7.0f;
    if ((st = c->barrier(c->user, g)) != PAR_OK) return st; /* collective #1: a good one */
    if (r == 1) keep(s, r, c->all_gather(c->user, g, in, out, 8, PAR_F32, NULL), now_s());
    else keep(s, r, c->all_reduce(c->user, g, in, out, 8, PAR_F32, PAR_REDUCE_SUM, NULL), now_s());
    for (k = 0; k < 32; k++)
        if (out[k] != -7.0f) s->st2[r] = PAR_ECOMM; /* a buffer was written although the op failed */
    return PAR_OK;
}

/* A blocking send to a rank that returns without receiving (it "dies" in the
   middle of the exchange): the sender learns it at once, by name. */
static par_status receiver_leaves(par_ctx *ctx, void *arg) {
    seen *s = (seen *)arg;
    const par_comm_table *c = par_ctx_comm(ctx);
    par_comm_group *g;
    int v[4] = {1, 2, 3, 4};
    double t0;
    par_status st = par_ctx_group(ctx, 1, &g, NULL, NULL);
    if (st != PAR_OK) return st;
    t0 = now_s();
    if (par_ctx_rank(ctx) == 0) {
        /* one message that gets through, then one nobody takes */
        if ((st = c->send(c->user, g, v, 4, PAR_I32, 1, NULL)) != PAR_OK) return st;
        keep(s, 0, c->send(c->user, g, v, 4, PAR_I32, 1, NULL), t0);
    } else {
        int w[4] = {0};
        if ((st = c->recv(c->user, g, w, 4, PAR_I32, 0, NULL)) != PAR_OK) return st;
        if (w[3] != 4) return par_set_error(PAR_ECOMM, "received %d, want 4", w[3]);
    }
    return PAR_OK;
}

static par_status healthy(par_ctx *ctx, void *arg) {
    const par_comm_table *c = par_ctx_comm(ctx);
    par_comm_group *g;
    int64_t v = par_ctx_rank(ctx) + 1;
    par_status st = par_ctx_group(ctx, 1, &g, NULL, NULL);
    (void)arg;
    if (st != PAR_OK) return st;
    if ((st = c->all_reduce(c->user, g, &v, &v, 1, PAR_I64, PAR_REDUCE_SUM, NULL)) != PAR_OK) return st;
    if (v != (int64_t)par_ctx_size(ctx) * (par_ctx_size(ctx) + 1) / 2)
        return par_set_error(PAR_ECOMM, "sum of rank+1 is %lld", (long long)v);
    return PAR_OK;
}

static par_status foreign_group(par_ctx *ctx, void *arg) {
    par_comm_group **shared = (par_comm_group **)arg;
    const par_comm_table *c = par_ctx_comm(ctx);
    par_comm_group *g;
    float x = 0;
    par_status st = par_ctx_group(ctx, 1, &g, NULL, NULL);
    if (st != PAR_OK) return st;
    if (par_ctx_rank(ctx) == 0) shared[0] = g;
    if ((st = c->barrier(c->user, g)) != PAR_OK) return st;
    if (par_ctx_rank(ctx) == 1) {
        st = c->all_reduce(c->user, shared[0], &x, &x, 1, PAR_F32, PAR_REDUCE_SUM, NULL);
        if (st != PAR_EINVAL || !strstr(par_last_error(), "not created by rank 1"))
            return par_set_error(PAR_ECOMM, "another rank's group was accepted (%s)", par_status_string(st));
    }
    return c->barrier(c->user, g);
}

int main(void) {
    static seen s;
    par_ctx_desc d;
    par_status st;
    int r;
    char want[128];
    memset(&d, 0, sizeof d);
    d.timeout_ms = TIMEOUT_MS;

    /* 1. a rank returns without joining: the others fail fast */
    memset(&s, 0, sizeof s);
    CHECK_OK(par_run_threads_desc(&d, 4, absent_rank, &s));
    for (r = 0; r < 3; r++) {
        CHECK_MSG(s.st[r] == PAR_ECOMM, "rank %d got %s", r, par_status_string(s.st[r]));
        CHECK_MSG(strstr(s.msg[r], "all_reduce on group [0,1,2,3]: rank 3 returned") != NULL, "rank %d: %s", r, s.msg[r]);
        CHECK_MSG(s.elapsed[r] < TIMEOUT_MS / 1000.0, "rank %d waited %.2f s for a rank that had left", r, s.elapsed[r]);
    }

    /* 2. a rank arrives late: timeout naming op, group and the missing rank */
    memset(&s, 0, sizeof s);
    CHECK_OK(par_run_threads_desc(&d, 4, late_rank, &s));
    for (r = 0; r < 3; r++) {
        CHECK_MSG(s.st[r] == PAR_ETIMEOUT, "rank %d got %s", r, par_status_string(s.st[r]));
        snprintf(want, sizeof want, "all_reduce on group [0,1,2,3]: rank 3 did not arrive within %d ms", TIMEOUT_MS);
        CHECK_MSG(strstr(s.msg[r], want) != NULL && strstr(s.msg[r], "(collective #1 on this group)"), "rank %d: %s", r,
                  s.msg[r]);
        CHECK_MSG(s.elapsed[r] >= TIMEOUT_MS / 1000.0 - 0.05 && s.elapsed[r] < TIMEOUT_MS / 1000.0 + 2.0,
                  "rank %d gave up after %.2f s", r, s.elapsed[r]);
        CHECK_MSG(s.st2[r] != PAR_OK && strstr(s.msg2[r], "barrier on group [0,1,2,3]") != NULL, "rank %d next op: %s",
                  r, s.msg2[r]);
    }
    CHECK_MSG(s.st[3] != PAR_OK, "the late rank itself got %s", par_status_string(s.st[3]));

    /* 3. a rank fails: the others get PAR_ECOMM at once, also on other groups later */
    memset(&s, 0, sizeof s);
    st = par_run_threads_desc(&d, 4, failing_rank, &s);
    CHECK_MSG(st == PAR_EIO, "par_run_threads returned %s", par_status_string(st));
    CHECK_MSG(strstr(par_last_error(), "rank 2: rank two's disk is on fire") != NULL, "error: %s", par_last_error());
    for (r = 0; r < 4; r++) {
        if (r == 2) continue;
        CHECK_MSG(s.st[r] == PAR_ECOMM && strstr(s.msg[r], "all_reduce on group [0,1,2,3]: rank 2 failed"), "rank %d: %s",
                  r, s.msg[r]);
        CHECK_MSG(s.elapsed[r] < 1.0, "rank %d learned of the failure after %.2f s", r, s.elapsed[r]);
        CHECK_MSG(s.st2[r] == PAR_ECOMM && strstr(s.msg2[r], "rank 2 failed"), "rank %d later op: %s", r, s.msg2[r]);
    }

    /* 4. recv from a rank that left */
    memset(&s, 0, sizeof s);
    CHECK_OK(par_run_threads_desc(&d, 2, missing_sender, &s));
    CHECK_MSG(s.st[0] == PAR_ECOMM && strstr(s.msg[0], "recv from rank 1 on group [0,1]"), "recv: %s", s.msg[0]);

    /* 5. mismatched collectives and p2p sizes */
    memset(&s, 0, sizeof s);
    CHECK_OK(par_run_threads_desc(&d, 4, mismatch, &s));
    for (r = 0; r < 4; r++)
        CHECK_MSG(s.st[r] == PAR_EINVAL && strstr(s.msg[r], "rank 0 passed count 10 but rank 1 passed count 12"),
                  "rank %d: %s", r, s.msg[r]);
    CHECK_MSG(s.st2[0] == PAR_EINVAL && strstr(s.msg2[0], "5 f32 elements sent, the matching recv expects 7"), "send: %s",
              s.msg2[0]);
    CHECK_MSG(s.st2[1] == PAR_EINVAL && strstr(s.msg2[1], "expects 7 f32 elements, the matching send has 5"), "recv: %s",
              s.msg2[1]);

    /* 5b. the error names the collective's number on the group */
    memset(&s, 0, sizeof s);
    CHECK_OK(par_run_threads_desc(&d, 4, late_after_good, &s));
    for (r = 0; r < 3; r++)
        CHECK_MSG(s.st[r] == PAR_ETIMEOUT && strstr(s.msg[r], "rank 3 did not arrive") &&
                      strstr(s.msg[r], "(collective #4 on this group)"),
                  "rank %d: %s", r, s.msg[r]);

    /* 5c. collectives called in a different group order: named timeouts, no hang */
    memset(&s, 0, sizeof s);
    CHECK_OK(par_run_threads_desc(&d, 3, group_order, &s));
    for (r = 0; r < 3; r++) {
        CHECK_MSG(s.st[r] == PAR_ETIMEOUT || s.st[r] == PAR_ECOMM, "rank %d got %s", r, par_status_string(s.st[r]));
        CHECK_MSG(s.elapsed[r] < TIMEOUT_MS / 1000.0 + 2.0, "rank %d gave up after %.2f s", r, s.elapsed[r]);
        CHECK_MSG(strstr(s.msg[r], r == 1 ? "all_reduce on group [0,1]: rank 0" : "all_reduce on group [0,1,2]: rank 1") &&
                      strstr(s.msg[r], "(collective #1 on this group)"),
                  "rank %d: %s", r, s.msg[r]);
    }

    /* 5d. different ops on one group: EINVAL naming both, buffers untouched */
    memset(&s, 0, sizeof s);
    CHECK_OK(par_run_threads_desc(&d, 4, op_mismatch, &s));
    for (r = 0; r < 4; r++) {
        CHECK_MSG(s.st[r] == PAR_EINVAL &&
                      strstr(s.msg[r], "collective mismatch on group [0,1,2,3]: rank 0 called all_reduce but rank 1 "
                                       "called all_gather (collective #2 on this group)"),
                  "rank %d: %s", r, s.msg[r]);
        CHECK_MSG(s.st2[r] == PAR_OK, "rank %d: the failed op wrote its receive buffer", r);
    }

    /* 5e. the receiver leaves in the middle of an exchange */
    memset(&s, 0, sizeof s);
    CHECK_OK(par_run_threads_desc(&d, 2, receiver_leaves, &s));
    CHECK_MSG(s.st[0] == PAR_ECOMM && strstr(s.msg[0], "send to rank 1 on group [0,1]: rank 1 returned from its function") &&
                  strstr(s.msg[0], "(p2p op #2 of this rank on the group)"),
              "send: %s", s.msg[0]);
    CHECK_MSG(s.elapsed[0] < TIMEOUT_MS / 1000.0, "the sender waited %.2f s for a rank that had left", s.elapsed[0]);

    /* 6. another rank's group */
    {
        par_comm_group *shared[1] = {NULL};
        CHECK_OK(par_run_threads_desc(&d, 2, foreign_group, shared));
    }

    /* 7. launcher arguments */
    CHECK_ERR(par_run_threads(0, healthy, NULL), PAR_EINVAL, "0 ranks, need 1..1024");
    CHECK_ERR(par_run_threads(1025, healthy, NULL), PAR_EINVAL, "1025 ranks");
    CHECK_ERR(par_run_threads(2, NULL, NULL), PAR_EINVAL, "NULL rank function");
    d.mesh = "2x4";
    CHECK_ERR(par_run_threads_desc(&d, 4, healthy, NULL), PAR_EINVAL, "has 8 devices but the world has 4 ranks");
    d.mesh = NULL;
    d.timeout_ms = -5;
    CHECK_ERR(par_run_threads_desc(&d, 4, healthy, NULL), PAR_EINVAL, "timeout_ms -5");
    d.timeout_ms = TIMEOUT_MS;
    d.kernel_threads = -2;
    CHECK_ERR(par_run_threads_desc(&d, 2, healthy, NULL), PAR_EINVAL, "kernel_threads -2 must be >= 0");
    d.kernel_threads = 0;
    {
        par_compute_table bad;
        memset(&bad, 0, sizeof bad);
        bad.version = PAR_COMPUTE_TABLE_VERSION + 1;
        d.compute = &bad;
        CHECK_ERR(par_run_threads_desc(&d, 2, healthy, NULL), PAR_EINVAL, "compute table version");
        d.compute = NULL;
    }

    /* 8. the process is still fine: fresh worlds work */
    CHECK_OK(par_run_threads_desc(&d, 8, healthy, NULL));
    CHECK_OK(par_run_threads(3, healthy, NULL));
    return TEST_END("test_comm_fault");
}
