/* bench/bench_pipeline.c - the pipeline executor's bubble, measured against the
   checker's prediction.

   4 stages as rank threads (threads backend), 8 micro-batches, every schedule
   kind in par_pp_kind, each over the fewest chunks per rank it takes (1, else
   2: interleaved, looped_bfs, zb1p, zbv and dualpipev at half the time per
   chunk; zbv and dualpipev on the V placement; a kind added to the header is
   measured without a change here). A stage's
   work is a sleep of fixed length (F = 20 ms, B = 40 ms, I = W = 20 ms; a chunk
   of 2 half of that), so the ranks do not compete for
   this machine's 2 cores and the figure is the schedule's and the executor's,
   not the CPU's; each boundary tensor is 64 KiB, moved through the comm
   table. Measured bubble = 1 - (sum over ranks of the time in forward and
   backward callbacks) / (ranks x the step's wall time), median of 3 steps;
   predicted = par_pp_schedule_check's bubble for the same costs (transfers
   free). Prints a table and JSON lines {"bench":"pipeline",...}.

   Activation memory: each forward allocates the activations its backward
   needs (SAVED_FLOATS per micro-batch on a stage, half per chunk of the
   interleaved schedule) and the last backward pass over them (B, or W after
   I) frees them; measured = the most bytes a stage held at once during the
   run, per stage, against the checker's peak in flight x those bytes.
   Run: make build/bench_pipeline && build/bench_pipeline */
#define _DEFAULT_SOURCE
#include "../parallel.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define STAGES 4
#define MB 8
#define UNIT_MS 20.0
#define ACT_FLOATS (16 * 1024)
#define SAVED_FLOATS (256 * 1024) /* 1 MiB of saved activations per micro-batch and stage */

/* Return a failing status of `call` (the implementation's PAR__CHECK is private). */
#define BENCH_TRY(call) do { par_status t_ = (call); if (t_ != PAR_OK) return t_; } while (0)

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void work(double ms) {
    struct timespec ts;
    ts.tv_sec = (time_t)(ms / 1000.0), ts.tv_nsec = (long)((ms - 1000.0 * (double)ts.tv_sec) * 1e6);
    while (nanosleep(&ts, &ts) != 0) {
    }
}

typedef struct run {
    par_pp_kind kind;
    int chunks;
    double busy[STAGES], wall[STAGES];
    float *bufs[STAGES];
    int64_t peak_bytes[STAGES];
} run;

typedef struct stage {
    run *r;
    int rank;
    double busy;
    float *saved[MB * 2];     /* per (micro-batch, chunk): what its backward needs */
    int64_t live, peak;       /* bytes of saved activations held now, at most */
} stage;

static int64_t saved_floats(const stage *s) { return SAVED_FLOATS / s->r->chunks; }

static double unit(const stage *s) { return UNIT_MS / (double)s->r->chunks; }

static par_status fwd(void *u, int mb, int c) {
    stage *s = (stage *)u;
    const double t0 = now_s();
    float **saved = &s->saved[mb * s->r->chunks + c];
    if (!(*saved = (float *)malloc((size_t)saved_floats(s) * sizeof(float))))
        return par_set_error(PAR_ENOMEM, "bench_pipeline: out of memory");
    memset(*saved, 0, (size_t)saved_floats(s) * sizeof(float)); /* touched: real pages */
    s->live += saved_floats(s) * (int64_t)sizeof(float);
    if (s->live > s->peak) s->peak = s->live;
    work(unit(s));
    s->busy += now_s() - t0;
    return PAR_OK;
}

static par_status bwd(void *u, int mb, int c, par_pp_op op) {
    stage *s = (stage *)u;
    const double t0 = now_s();
    float **saved = &s->saved[mb * s->r->chunks + c];
    if (!*saved) return par_set_error(PAR_EINVAL, "bench_pipeline: backward of micro-batch %d chunk %d before its forward", mb, c);
    work(op == PAR_PP_B ? 2 * unit(s) : unit(s));
    if (op != PAR_PP_I) { /* its last use: freed */
        free(*saved), *saved = NULL;
        s->live -= saved_floats(s) * (int64_t)sizeof(float);
    }
    s->busy += now_s() - t0;
    return PAR_OK;
}

static par_status buffer(void *u, int mb, int c, int is_grad, int is_input, void **ptr, int64_t *count) {
    stage *s = (stage *)u;
    *ptr = s->r->bufs[s->rank] + (((int64_t)mb * s->r->chunks + c) * 4 + is_grad * 2 + is_input) * ACT_FLOATS;
    *count = ACT_FLOATS;
    return PAR_OK;
}

static par_status body(par_ctx *ctx, void *arg) {
    run *r = (run *)arg;
    const int rank = par_ctx_rank(ctx);
    par_pp_schedule_desc sd;
    par_pp_schedule *s = NULL;
    par_pp_run_desc d;
    stage st;
    double t0;
    par_status rc;
    memset(&sd, 0, sizeof sd);
    sd.stages = STAGES, sd.chunks = r->chunks, sd.micro_batches = MB, sd.kind = r->kind;
    BENCH_TRY(par_pp_schedule_make(&sd, &s));
    memset(&st, 0, sizeof st);
    st.r = r, st.rank = rank;
    memset(&d, 0, sizeof d);
    d.schedule = s, d.stage_dims = 1u;
    d.callbacks.user = &st, d.callbacks.forward = fwd, d.callbacks.backward = bwd, d.callbacks.buffer = buffer;
    rc = par_barrier(ctx, NULL);
    t0 = now_s();
    if (rc == PAR_OK) rc = par_pp_run(ctx, &d);
    if (rc == PAR_OK) rc = par_barrier(ctx, NULL); /* the step ends when the last stage is done */
    r->wall[rank] = now_s() - t0, r->busy[rank] = st.busy, r->peak_bytes[rank] = st.peak;
    par_pp_schedule_destroy(s);
    return rc;
}

static int cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The fewest chunks per rank kind takes at STAGES x MB (1, else 2), with
   its checked schedule's figures; 0 when it takes neither. */
static int kind_chunks(par_pp_kind kind, par_pp_check *c) {
    par_pp_schedule_desc sd;
    int v;
    for (v = 1; v <= 2; v++) {
        par_pp_schedule *s = NULL;
        memset(&sd, 0, sizeof sd);
        sd.stages = STAGES, sd.chunks = v, sd.micro_batches = MB, sd.kind = kind;
        if (par_pp_schedule_make(&sd, &s) != PAR_OK) continue;
        if (par_pp_schedule_check(s, c, NULL, 0) != PAR_OK) v = 3; /* a generator the checker refuses: say so */
        par_pp_schedule_destroy(s);
        return v < 3 ? v : 0;
    }
    return 0;
}

int main(void) {
    struct {
        par_pp_kind kind;
        int chunks;
        par_pp_check c;
    } kinds[PAR_PP_KIND_COUNT];
    par_ctx_desc pd;
    double measured_1f1b = 0, measured_zb = 0, measured_zbv = 0;
    int64_t peak_measured[PAR_PP_KIND_COUNT][STAGES], peak_predicted[PAR_PP_KIND_COUNT][STAGES];
    size_t k;
    int i;
    for (k = 0; k < PAR_PP_KIND_COUNT; k++) {
        kinds[k].kind = (par_pp_kind)k;
        if ((kinds[k].chunks = kind_chunks(kinds[k].kind, &kinds[k].c)) == 0)
            return fprintf(stderr, "bench_pipeline: %s: %s\n", par_pp_kind_name((par_pp_kind)k), par_last_error()), 1;
    }
    memset(&pd, 0, sizeof pd);
    pd.mesh = "pp=4", pd.kernel_threads = 1, pd.timeout_ms = 600000;
    printf("pipeline: %d stages, %d micro-batches, F = %.0f ms, B = 2F, I = W = F (a chunk: half); sleeps, so the "
           "ranks do not compete for cores\n", STAGES, MB, UNIT_MS);
    printf("%-12s %6s %10s %10s %10s\n", "schedule", "chunks", "predicted", "measured", "diff");
    for (k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
        const par_pp_check c = kinds[k].c;
        double bubbles[3];
        int rep;
        for (rep = 0; rep < 3; rep++) {
            run r;
            double busy = 0, wall = 0;
            memset(&r, 0, sizeof r);
            r.kind = kinds[k].kind, r.chunks = kinds[k].chunks;
            for (i = 0; i < STAGES; i++)
                r.bufs[i] = (float *)calloc((size_t)MB * (size_t)r.chunks * 4 * ACT_FLOATS, sizeof(float));
            if (par_run_threads_desc(&pd, STAGES, body, &r) != PAR_OK)
                return fprintf(stderr, "bench_pipeline: %s\n", par_last_error()), 1;
            for (i = 0; i < STAGES; i++) {
                busy += r.busy[i], wall = r.wall[i] > wall ? r.wall[i] : wall;
                free(r.bufs[i]);
                peak_measured[k][i] = r.peak_bytes[i];
                peak_predicted[k][i] = (int64_t)c.peak_in_flight[i] * (SAVED_FLOATS / kinds[k].chunks) * 4;
            }
            bubbles[rep] = 1.0 - busy / (STAGES * wall);
        }
        qsort(bubbles, 3, sizeof(double), cmp_double);
        printf("%-12s %6d %10.3f %10.3f %+10.3f\n", par_pp_kind_name(kinds[k].kind), kinds[k].chunks, c.bubble,
               bubbles[1], bubbles[1] - c.bubble);
        printf("{\"bench\":\"pipeline\",\"schedule\":\"%s\",\"stages\":%d,\"chunks\":%d,\"micro_batches\":%d,"
               "\"predicted\":%.4f,\"measured\":%.4f}\n", par_pp_kind_name(kinds[k].kind), STAGES, kinds[k].chunks, MB,
               c.bubble, bubbles[1]);
        if (kinds[k].kind == PAR_PP_1F1B) measured_1f1b = bubbles[1];
        if (kinds[k].kind == PAR_PP_ZB_H1) measured_zb = bubbles[1];
        if (kinds[k].kind == PAR_PP_ZBV) measured_zbv = bubbles[1];
    }
    printf("zb-h1 / 1f1b measured bubble: %.2f (target <= 0.5; the published ideal is 1/3)\n",
           measured_1f1b > 0 ? measured_zb / measured_1f1b : 0.0);
    printf("zbv / zb-h1 measured bubble: %.2f (target <= 1: the ZB paper's ZB-V below ZB-H1 at 1F1B's memory)\n",
           measured_zb > 0 ? measured_zbv / measured_zb : 0.0);
    printf("\npeak saved activations per stage, MiB (1 MiB per micro-batch; measured / checker's prediction)\n");
    printf("%-12s", "schedule");
    for (i = 0; i < STAGES; i++) printf("    stage %d", i);
    printf("\n");
    for (k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
        printf("%-12s", par_pp_kind_name(kinds[k].kind));
        for (i = 0; i < STAGES; i++)
            printf("  %4.1f/%4.1f", (double)peak_measured[k][i] / 1048576.0, (double)peak_predicted[k][i] / 1048576.0);
        printf("\n");
        for (i = 0; i < STAGES; i++)
            printf("{\"bench\":\"pipeline_memory\",\"schedule\":\"%s\",\"stage\":%d,\"measured_bytes\":%lld,"
                   "\"predicted_bytes\":%lld}\n", par_pp_kind_name(kinds[k].kind), i, (long long)peak_measured[k][i],
                   (long long)peak_predicted[k][i]);
    }
    return 0;
}
