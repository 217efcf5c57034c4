/* tests/pp_toy.h - a toy pipeline for >>pipeline's executor, on any backend:
   a chain y = w_s * x through every virtual stage s, loss = the sum of the
   last output, so dL/dw_s = sum of x0 * (product of the other weights). Each
   stage computes its weight gradients through par_pp_run; toy_expect gives
   them in double, independently. Stages live where the schedule's placement
   puts them (loop, or v for zbv and dualpipev); a hand-off between two on
   one rank arrives through the executor's copy, like a message. Used by tests/test_pipeline.c (threads) and
   tests/mpi/test_pipeline_mpi.c (mpirun). */
#ifndef PP_TOY_H
#define PP_TOY_H
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "../parallel.h"

#define TOY_N 8 /* floats per micro-batch's activation */
#define TOY_MAX_MB 16
#define TOY_MAX_VS 16

typedef struct toy {
    int p, v, m;
    par_pp_kind kind;
    const par_pp_schedule *schedule; /* run this one instead of kind's (NULL: kind's) */
    int sets;                        /* boundary buffers: micro-batch mb uses set mb % sets (0: its own) */
    double w[TOY_MAX_VS];           /* the weight of each virtual stage */
    float x0[TOY_MAX_MB][TOY_N];    /* the first stage's input per micro-batch */
    double want_dw[TOY_MAX_VS];
    double got_dw[TOY_MAX_VS];
    int vs_of[64][4]; /* [stage][chunk]: the virtual stage there (the schedule's placement) */
    int bad[64];
} toy;

/* One rank's state: its buffers per (micro-batch, chunk). */
typedef struct toy_rank {
    toy *t;
    const par_pp_schedule *s;
    int stage;
    float in[TOY_MAX_MB][4][TOY_N], out[TOY_MAX_MB][4][TOY_N], gin[TOY_MAX_MB][4][TOY_N], gout[TOY_MAX_MB][4][TOY_N];
    double dw[4];
} toy_rank;

static int toy_vs(const toy_rank *r, int chunk) { return par_pp_schedule_stage(r->s, r->stage, chunk); }

/* The buffer set of micro-batch mb. */
static int toy_set(const toy_rank *r, int mb) { return r->t->sets > 0 ? mb % r->t->sets : mb; }

/* Every stage but the first reads its input buffer: filled by a receive, or
   by the executor's copy when the previous stage is on this rank. */
static const float *toy_input(toy_rank *r, int mb, int c) {
    if (toy_vs(r, c) == 0) return r->t->x0[mb];
    return r->in[toy_set(r, mb)][c];
}

static par_status toy_fwd(void *u, int mb, int c) {
    toy_rank *r = (toy_rank *)u;
    const float *x = toy_input(r, mb, c);
    int i;
    for (i = 0; i < TOY_N; i++) r->out[toy_set(r, mb)][c][i] = (float)(r->t->w[toy_vs(r, c)] * x[i]);
    return PAR_OK;
}

/* loss = sum over micro-batches and elements of y_last: dL/dy_last = 1 */
static par_status toy_bwd(void *u, int mb, int c, par_pp_op op) {
    toy_rank *r = (toy_rank *)u;
    const int vs = toy_vs(r, c), last = r->t->p * r->t->v - 1;
    const float *x = toy_input(r, mb, c);
    float dy[TOY_N];
    int i;
    for (i = 0; i < TOY_N; i++)
        dy[i] = vs == last ? 1.0f : r->gout[toy_set(r, mb)][c][i];
    if (op != PAR_PP_W)
        for (i = 0; i < TOY_N; i++) r->gin[toy_set(r, mb)][c][i] = (float)(r->t->w[vs] * dy[i]);
    if (op != PAR_PP_I)
        for (i = 0; i < TOY_N; i++) r->dw[c] += (double)x[i] * dy[i];
    return PAR_OK;
}

static par_status toy_buf(void *u, int mb, int c, int is_grad, int is_input, void **ptr, int64_t *count) {
    toy_rank *r = (toy_rank *)u;
    const int k = toy_set(r, mb);
    *ptr = is_grad ? (is_input ? r->gin[k][c] : r->gout[k][c]) : (is_input ? r->in[k][c] : r->out[k][c]);
    *count = TOY_N;
    return PAR_OK;
}

static par_status toy_body(par_ctx *ctx, void *arg) {
    toy *t = (toy *)arg;
    toy_rank *r = (toy_rank *)calloc(1, sizeof(toy_rank));
    par_pp_schedule_desc sd;
    par_pp_schedule *s = NULL;
    par_pp_run_desc d;
    par_status st;
    int c;
    if (!r) return PAR_ENOMEM;
    r->t = t, r->stage = par_ctx_rank(ctx);
    memset(&sd, 0, sizeof sd);
    sd.stages = t->p, sd.chunks = t->v, sd.micro_batches = t->m, sd.kind = t->kind;
    st = t->schedule ? PAR_OK : par_pp_schedule_make(&sd, &s);
    r->s = t->schedule ? t->schedule : s;
    memset(&d, 0, sizeof d);
    d.schedule = t->schedule ? t->schedule : s, d.stage_dims = t->p > 1 ? 1u : 0u;
    d.callbacks.user = r, d.callbacks.forward = toy_fwd, d.callbacks.backward = toy_bwd, d.callbacks.buffer = toy_buf;
    if (st == PAR_OK) st = par_pp_run(ctx, &d);
    for (c = 0; c < t->v && r->s; c++) t->vs_of[r->stage][c] = toy_vs(r, c), t->got_dw[toy_vs(r, c)] = r->dw[c];
    t->bad[r->stage] = st != PAR_OK;
    par_pp_schedule_destroy(s);
    free(r);
    return st;
}


/* s with every rank's receives posted at the start of its list (PA / PG,
   in the order of its RA / RG, which then wait): the executor's posted
   receives, each matched in posting order. NULL on failure. */
static par_pp_schedule *toy_post_ahead(const par_pp_schedule *s) {
    const int p = par_pp_schedule_stages(s);
    par_pp_schedule *out = NULL;
    int r, k, n, g;
    if (par_pp_schedule_create(p, par_pp_schedule_chunks(s), par_pp_schedule_micro_batches(s), &out) != PAR_OK)
        return NULL;
    if (par_pp_schedule_placement(s) != PAR_PP_PLACE_LOOP) { /* the same stages on the same ranks */
        int ranks[256], st;
        for (st = 0; st < p * par_pp_schedule_chunks(s) && st < 256; st++)
            par_pp_schedule_stage_rank(s, st, &ranks[st], NULL);
        if (par_pp_schedule_set_placement(out, par_pp_schedule_placement(s),
                                          par_pp_schedule_placement(s) == PAR_PP_PLACE_LIST ? ranks : NULL) != PAR_OK)
            return par_pp_schedule_destroy(out), (par_pp_schedule *)NULL;
    }
    for (r = 0; r < p; r++) {
        const par_pp_action *a = par_pp_schedule_actions(s, r, &n);
        for (g = 0; g < 2; g++) /* activations' receives, then gradients': two channels, each in order */
            for (k = 0; k < n; k++)
                if (a[k].op == (g ? PAR_PP_RECV_GRAD : PAR_PP_RECV_ACT) &&
                    par_pp_schedule_append(out, r, g ? PAR_PP_POST_GRAD : PAR_PP_POST_ACT, a[k].micro_batch,
                                           a[k].chunk) != PAR_OK)
                    return par_pp_schedule_destroy(out), (par_pp_schedule *)NULL; /* typed: C++ (nvcc) too */
        for (k = 0; k < n; k++)
            if (par_pp_schedule_append(out, r, a[k].op, a[k].micro_batch, a[k].chunk) != PAR_OK)
                return par_pp_schedule_destroy(out), (par_pp_schedule *)NULL;
    }
    return out;
}

/* The toy's weights, inputs and the expected gradients. */
static void toy_init(toy *t, int p, int v, int m, par_pp_kind kind) {
    int s, mb, i;
    memset(t, 0, sizeof *t);
    t->p = p, t->v = v, t->m = m, t->kind = kind;
    for (s = 0; s < p * v; s++) t->w[s] = 0.5 + 0.125 * s;
    for (mb = 0; mb < m; mb++)
        for (i = 0; i < TOY_N; i++) t->x0[mb][i] = (float)(1 + mb) * 0.25f + (float)i * 0.5f;
    for (s = 0; s < p * v; s++) {
        double before = 1, after = 1, sum = 0;
        int k;
        for (k = 0; k < s; k++) before *= t->w[k];
        for (k = s + 1; k < p * v; k++) after *= t->w[k];
        for (mb = 0; mb < m; mb++)
            for (i = 0; i < TOY_N; i++) sum += (double)t->x0[mb][i] * before * after;
        t->want_dw[s] = sum;
    }
}

/* 1 when this stage's gradients match (relative 1e-5). */
static int toy_stage_ok(const toy *t, int stage) {
    int c, ok = 1;
    for (c = 0; c < t->v; c++) {
        const int s = t->vs_of[stage][c];
        ok &= fabs(t->got_dw[s] - t->want_dw[s]) <= 1e-5 * fabs(t->want_dw[s]);
    }
    return ok;
}

#endif /* PP_TOY_H */
