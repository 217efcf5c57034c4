/* examples/stacked/ - the third example: stacked_single.c on one process (no parallel.h), stacked.c in parallel.
   A host in the shape of llm.c's train_gpt2.c: L residual MLP blocks,
   x <- x + relu(x W1[l]^T) W2[l]^T, and the mean squared error against a fixed
   random teacher. The parameters are one flat buffer with each kind stacked
   over the layers, [W1: L x H x D][W2: L x D x H], the gradients a second one
   of the same layout; the forward, the backward and (in stacked_single.c)
   AdamW are plain loops of its own. stacked.c is the same file trained with
   data parallel, tensor parallel and ZeRO: W1 column-parallel and W2
   row-parallel (par_tp), and par_params over the host's own buffers: each
   kind registered once, as a stack of L layers (par_param_desc.layers), and
   each layer marked ready as the backward makes it, so its reduction runs
   while the backward goes on (--trace F shows it). What parallel training
   costs this host (par_args_take takes --dp --tp --zero --trace),
   diff -u stacked_single.c stacked.c | grep -c '^+[^+]': 40 added lines.

     build/stacked_single --steps 30 --out w.bin
     build/stacked --dp 2 --tp 2 --zero 2 --steps 30 --out w.bin --trace t.json
     mpirun -np 4 build/stacked --dp 2 --tp 2

   One line per step ("step 3 loss 0.123456789"); --out writes the whole
   parameter buffer (raw f32, the layout above; in parallel rank 0 writes it,
   gathered from every rank's slices). */
#define PARALLEL_IMPLEMENTATION
#include "parallel.h"
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { L = 4, D = 16, H = 32, BATCH = 32, DATA = 256 }; /* BATCH: samples per step, of DATA */

typedef struct config {
    int steps;
    const char *out;
    par_args par; /* --dp N --tp N --zero L --trace FILE */
} config;

typedef struct model {
    int hl, h0;                   /* hidden units held and the first one's index (H and 0 here) */
    int64_t n1, n2;               /* elements of one layer's W1 and W2 */
    float *params, *grads;
    par_tp *tp; par_params *ps; par_trace *tr;
    float *w1, *w2, *dw1, *dw2;   /* the kinds inside params and grads */
    float *x, *a, *dx, *da, *tmp; /* activations: x [L+1, n, D], a [L, n, hl] */
} model;

static double hash01(uint64_t a, uint64_t b) { /* a fixed pseudo-random value in [-1, 1) */
    uint64_t z = a * 0x9E3779B97F4A7C15ull ^ (b + 0x632BE59BD9B4E019ull) * 0xBF58476D1CE4E5B9ull;
    z ^= z >> 31, z *= 0xD6E8FEB86659FD93ull, z ^= z >> 29;
    return (double)(z >> 11) / 9007199254740992.0 * 2.0 - 1.0;
}
static float input(int64_t s, int64_t j) { return (float)hash01(1000 + (uint64_t)(s % DATA), (uint64_t)j); }
static float target(int64_t s, int64_t k) { /* the teacher: tanh of a fixed projection */
    double t = 0.0;
    for (int j = 0; j < D; j++) t += hash01(7, (uint64_t)(k * D + j)) * input(s, j);
    return (float)tanh(t);
}

/* out[r, o] = sum_i in[r, i] w[o, i] (llm.c's matmul_forward without the bias) */
static void matmul_fwd(float *out, const float *in, const float *w, int64_t n, int ni, int no) {
    for (int64_t r = 0; r < n; r++)
        for (int o = 0; o < no; o++) {
            float s = 0.0f;
            for (int i = 0; i < ni; i++) s += in[r * ni + i] * w[o * ni + i];
            out[r * no + o] = s;
        }
}

/* din[r, i] = sum_o dout[r, o] w[o, i]; dw[o, i] += sum_r dout[r, o] in[r, i] */
static void matmul_bwd(float *din, float *dw, const float *dout, const float *in, const float *w, int64_t n, int ni,
                       int no) {
    for (int64_t r = 0; r < n; r++)
        for (int i = 0; i < ni; i++) {
            float s = 0.0f;
            for (int o = 0; o < no; o++) s += dout[r * no + o] * w[o * ni + i];
            din[r * ni + i] = s;
        }
    for (int o = 0; o < no; o++)
        for (int i = 0; i < ni; i++) {
            float s = 0.0f;
            for (int64_t r = 0; r < n; r++) s += dout[r * no + o] * in[r * ni + i];
            dw[o * ni + i] += s;
        }
}

static par_status train(par_ctx *ctx, const config *c, model *m) {
    const int64_t n = BATCH / c->par.dp; /* this rank's samples */
    int shard = 0, shards = 1;
    par_param_desc w[2];
    par_linear lin[2];
    PAR_CHECK(par_trace_create(&(par_trace_desc){.rank = par_ctx_rank(ctx)}, &m->tr));
    PAR_CHECK(par_tp_create(ctx, &(par_tp_desc){.rows = BATCH, .hidden = D}, &m->tp)); /* rows over dp, H over tp */
    PAR_CHECK(par_tp_linear(m->tp, "w1", PAR_LINEAR_COLUMN, D, H, &lin[0]));
    PAR_CHECK(par_tp_linear(m->tp, "w2", PAR_LINEAR_ROW, H, D, &lin[1]));
    m->hl = (int)lin[0].out_local, m->h0 = (int)lin[0].out_start;
    m->n1 = (int64_t)m->hl * D, m->n2 = (int64_t)D * m->hl;
    m->params = calloc((size_t)(L * (m->n1 + m->n2)), 4), m->grads = calloc((size_t)(L * (m->n1 + m->n2)), 4);
    m->x = malloc((size_t)((L + 1) * n * D) * 4), m->a = malloc((size_t)(L * n * m->hl) * 4);
    m->dx = malloc((size_t)(n * D) * 4), m->da = malloc((size_t)(n * m->hl) * 4), m->tmp = malloc((size_t)(n * D) * 4);
    if (!m->params || !m->grads || !m->x || !m->a || !m->dx || !m->da || !m->tmp)
        return par_set_error(PAR_ENOMEM, "stacked: out of memory");
    m->w1 = m->params, m->w2 = m->params + L * m->n1, m->dw1 = m->grads, m->dw2 = m->grads + L * m->n1;
    for (int l = 0; l < L; l++) /* each weight from its global index: any slice of it draws the same values */
        for (int h = 0; h < m->hl; h++)
            for (int j = 0; j < D; j++) {
                m->w1[l * m->n1 + h * D + j] = (float)(0.4 * hash01(100 + l, (uint64_t)((m->h0 + h) * D + j)));
                m->w2[l * m->n2 + j * m->hl + h] = (float)(0.4 * hash01(200 + l, (uint64_t)(j * H + m->h0 + h)));
            }
    PAR_CHECK(par_tp_linear_param(&lin[0], "w1", &w[0])); /* one layer each; the set holds w1.0 .. w1.3 */
    PAR_CHECK(par_tp_linear_param(&lin[1], "w2", &w[1]));
    w[0].host_value = m->w1, w[0].host_grad = m->dw1, w[0].layers = L; /* the host's stacked buffers */
    w[1].host_value = m->w2, w[1].host_grad = m->dw2, w[1].layers = L;
    PAR_CHECK(par_params_create(ctx, &(par_params_desc){.params = w, .num_params = 2, .data_axes = "dp",
                                                        .zero_level = c->par.zero, .trace = m->tr}, &m->ps));
    PAR_CHECK(par_params_data_shard(m->ps, &shard, &shards));
    for (int step = 0; step < c->steps; step++) {
        double loss = 0.0, count = 0.0;
        PAR_CHECK(par_params_grads_begin(m->ps, 0, 1)); /* zeroes the host's gradients */
        for (int64_t r = 0; r < n; r++) /* shard s of S takes samples i*S + s (round robin) */
            for (int j = 0; j < D; j++) m->x[r * D + j] = input(step * BATCH + r * shards + shard, j);
        for (int l = 0; l < L; l++) { /* forward: x[l+1] = x[l] + relu(x[l] W1^T) W2^T */
            float *x = m->x + l * n * D, *a = m->a + l * n * m->hl, *y = m->x + (l + 1) * n * D;
            matmul_fwd(a, x, m->w1 + l * m->n1, n, D, m->hl);
            for (int64_t i = 0; i < n * m->hl; i++) a[i] = a[i] > 0.0f ? a[i] : 0.0f;
            matmul_fwd(y, a, m->w2 + l * m->n2, n, m->hl, D);
            PAR_CHECK(par_tp_reduce_rows(m->tp, n, D, y, NULL, NULL)); /* summed over tp, in y */
            for (int64_t i = 0; i < n * D; i++) y[i] += x[i];
        }
        for (int64_t r = 0; r < n; r++) /* loss 1/2 (x - t)^2, averaged over the batch's outputs */
            for (int j = 0; j < D; j++) {
                const float e = m->x[L * n * D + r * D + j] - target(step * BATCH + r * shards + shard, j);
                loss += 0.5 * e * e, count += 1.0;
                m->dx[r * D + j] = e / (float)(n * D);
            }
        for (int l = L - 1; l >= 0; l--) { /* backward, last layer first */
            const float *x = m->x + l * n * D, *a = m->a + l * n * m->hl;
            PAR_CHECK(par_trace_begin(m->tr, "bwd layer", "compute"));
            matmul_bwd(m->da, m->dw2 + l * m->n2, m->dx, a, m->w2 + l * m->n2, n, m->hl, D);
            PAR_CHECK(par_params_grad_ready(m->ps, L + l)); /* w2.l done: its reduction starts now */
            for (int64_t i = 0; i < n * m->hl; i++) m->da[i] = a[i] > 0.0f ? m->da[i] : 0.0f;
            matmul_bwd(m->tmp, m->dw1 + l * m->n1, m->da, x, m->w1 + l * m->n1, n, D, m->hl);
            PAR_CHECK(par_params_grad_ready(m->ps, l)); /* w1.l */
            PAR_CHECK(par_tp_reduce_rows(m->tp, n, D, m->tmp, NULL, NULL));
            for (int64_t i = 0; i < n * D; i++) m->dx[i] += m->tmp[i]; /* the residual's gradient */
            PAR_CHECK(par_trace_end(m->tr));
        }
        PAR_CHECK(par_params_grads_wait(m->ps));
        PAR_CHECK(par_params_reduce_loss(m->ps, &loss, &count));
        PAR_CHECK(par_params_step(m->ps, &(par_adamw){1e-2f, 0.9f, 0.999f, 1e-8f, 0.01f, 0.0f, 0}, NULL));
        par_printf0(ctx, "step %d loss %.9g\n", step, loss / count);
    }
    if (c->par.trace) PAR_CHECK(par_trace_gather_write(ctx, m->tr, c->par.trace));
    if (c->out) PAR_CHECK(par_params_write_raw(m->ps, c->out)); /* gathered from every rank's slices */
    return 0;
}

/* Train, then free what train made (whether it failed or not). */
static par_status run(par_ctx *ctx, void *c) {
    model m = {0};
    const par_status rc = train(ctx, (const config *)c, &m);
    par_params_destroy(m.ps), par_tp_destroy(m.tp), par_trace_destroy(m.tr);
    free(m.params), free(m.grads), free(m.x), free(m.a), free(m.dx), free(m.da), free(m.tmp);
    return rc;
}

int main(int argc, char **argv) {
    config c = {.steps = 30};
    if (par_args_take(&c.par, &argc, argv) != PAR_OK) return fprintf(stderr, "stacked: %s\n", par_last_error()), 2;
    for (int i = 1; i < argc; i += 2) {
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (v && !strcmp(argv[i], "--steps")) c.steps = atoi(v);
        else if (v && !strcmp(argv[i], "--out")) c.out = v;
        else return fprintf(stderr, "stacked: bad argument %s (--steps N --out FILE)\n", argv[i]), 2;
    }
    if (par_launch(&(par_ctx_desc){.mesh = c.par.mesh}, 0, run, &c) == PAR_OK) return 0;
    return fprintf(stderr, "stacked: %s\n", par_last_error()), 1;
}
