/* tests/mpi/test_launch_mpi.c - par_launch's MPI path and the ctx-level
   collectives (par_all_reduce, ...) over the MPI backend. Run under
   mpirun -np 4: par_launch sees the launcher's variables, makes an MPI context
   on "dp=2,tp=2", runs the body once per process and finalizes MPI. The body
   adds up every rank's failures and rank 0 prints
   "launch_mpi: N passed, N failed". A run that never reaches the body (a
   launch error) prints "launch_mpi: 0 passed, 1 failed" on every rank. */
#include "../../parallel.h"
#include <stdio.h>
#include <string.h>

#ifndef PARALLEL_WITH_MPI
#error "tests/mpi/ programs are built with mpicc -DPARALLEL_WITH_MPI (see the Makefile)"
#endif

typedef struct result {
    int passed, failed;
} result;

#define RCHECK(cond)                                                                                               \
    do {                                                                                                           \
        if (cond) {                                                                                                \
            res->passed++;                                                                                         \
        } else {                                                                                                   \
            res->failed++;                                                                                         \
            fprintf(stderr, "rank %d: %s:%d: FAILED: %s (last error: %s)\n", r, __FILE__, __LINE__, #cond,         \
                    par_last_error());                                                                             \
        }                                                                                                          \
    } while (0)

static par_status body(par_ctx *ctx, void *arg) {
    result *res = (result *)arg;
    int r = par_ctx_rank(ctx), dp = r / 2, tp = r % 2, index = -1, count = 0;
    par_comm_group *tpg = NULL;
    par_request *req = NULL;
    float x[4], y[4];
    int64_t v, sums[2];
    RCHECK(par_ctx_size(ctx) == 4 && strcmp(par_ctx_comm(ctx)->name, "mpi") == 0);
    RCHECK(par_ctx_group(ctx, 1u << 0, &tpg, &index, &count) == PAR_OK && index == tp && count == 2);
    /* all_reduce over tp, then over the world (NULL group) */
    x[0] = (float)(10 * dp + tp);
    RCHECK(par_all_reduce(ctx, tpg, x, y, 1, PAR_F32, PAR_REDUCE_SUM, NULL) == PAR_OK && y[0] == (float)(20 * dp + 1));
    v = r;
    RCHECK(par_all_reduce(ctx, NULL, &v, &v, 1, PAR_I64, PAR_REDUCE_SUM, &req) == PAR_OK);
    RCHECK(par_wait(ctx, req) == PAR_OK && v == 6);
    /* all_gather and all_to_all over tp */
    x[0] = (float)r;
    RCHECK(par_all_gather(ctx, tpg, x, y, 1, PAR_F32, NULL) == PAR_OK && y[0] == (float)(2 * dp) &&
           y[1] == (float)(2 * dp + 1));
    x[0] = (float)(10 * tp), x[1] = (float)(10 * tp + 1);
    RCHECK(par_all_to_all(ctx, tpg, x, y, 1, PAR_F32, NULL) == PAR_OK && y[0] == (float)tp && y[1] == (float)(10 + tp));
    /* broadcast from world member 3 */
    v = r == 3 ? 77 : -1;
    RCHECK(par_broadcast(ctx, NULL, &v, 1, PAR_I64, 3, NULL) == PAR_OK && v == 77);
    /* a tp pair exchanges values */
    {
        par_request *sr = NULL, *rr = NULL;
        int64_t out = r, in = -1;
        int done = 0;
        RCHECK(par_send(ctx, tpg, &out, 1, PAR_I64, 1 - tp, &sr) == PAR_OK);
        RCHECK(par_recv(ctx, tpg, &in, 1, PAR_I64, 1 - tp, &rr) == PAR_OK);
        RCHECK(par_wait(ctx, sr) == PAR_OK);
        while (!done)
            if (par_test(ctx, rr, &done) != PAR_OK) break;
        RCHECK(done && in == 2 * dp + (1 - tp));
    }
    RCHECK(par_barrier(ctx, NULL) == PAR_OK);
    /* every rank's counts, summed; rank 0 reports */
    sums[0] = res->passed + 1, sums[1] = res->failed; /* +1: this sum itself */
    if (par_all_reduce(ctx, NULL, sums, sums, 2, PAR_I64, PAR_REDUCE_SUM, NULL) != PAR_OK) sums[0] = 0, sums[1] = 1;
    if (r == 0) printf("launch_mpi: %lld passed, %lld failed\n", (long long)sums[0], (long long)sums[1]);
    fflush(stdout);
    return sums[1] ? PAR_ECOMM : PAR_OK;
}

int main(void) {
    par_ctx_desc d;
    result res;
    par_status st;
    memset(&d, 0, sizeof d);
    memset(&res, 0, sizeof res);
    d.mesh = "dp=2,tp=2";
    d.timeout_ms = 60000;
    /* a thread count that disagrees with mpirun's is refused before MPI starts */
    st = par_launch(&d, 3, body, &res);
    if (st != PAR_EINVAL || !strstr(par_last_error(), "threads is 3 but the launcher started 4 processes")) {
        fprintf(stderr, "par_launch(threads 3) under mpirun -np 4: %s (%s)\n", par_status_string(st), par_last_error());
        res.failed++;
    } else {
        res.passed++;
    }
    st = par_launch(&d, 0, body, &res);
    if (st != PAR_OK && res.passed <= 1) { /* the body never ran */
        fprintf(stderr, "par_launch: %s\n", par_last_error());
        printf("launch_mpi: 0 passed, 1 failed\n");
    }
    return st == PAR_OK ? 0 : 1;
}
