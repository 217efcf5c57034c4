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
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { L = 4, D = 16, H = 32, BATCH = 32, DATA = 256 }; /* BATCH: samples per step, of DATA */

typedef struct config {
    int steps;
    const char *out;
} config;

typedef struct model {
    int hl, h0;                   /* hidden units held and the first one's index (H and 0 here) */
    int64_t n1, n2;               /* elements of one layer's W1 and W2 */
    float *params, *grads;
    float *m, *v;                 /* AdamW's moments, laid out as params (adamw makes them) */
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

/* PyTorch's AdamW (decoupled weight decay, bias corrections), llm.c's gpt2_update: as there, the
   moments are allocated on the first call. 0, or 1 when out of memory. */
static int adamw(model *m, int64_t count, int step, float lr, float b1, float b2, float eps, float wd) {
    if (!m->m) m->m = calloc((size_t)count, 4), m->v = calloc((size_t)count, 4);
    if (!m->m || !m->v) return fprintf(stderr, "stacked: out of memory\n"), 1;
    const float bc1 = (float)(1.0 - pow(b1, step)), inv_sqrt_bc2 = (float)(1.0 / sqrt(1.0 - pow(b2, step)));
    for (int64_t i = 0; i < count; i++) {
        const float g = m->grads[i], mi = b1 * m->m[i] + (1.0f - b1) * g, vi = b2 * m->v[i] + (1.0f - b2) * g * g;
        m->m[i] = mi, m->v[i] = vi;
        m->params[i] = m->params[i] * (1.0f - lr * wd) - lr / bc1 * mi / (sqrtf(vi) * inv_sqrt_bc2 + eps);
    }
    return 0;
}

static int train(const config *c, model *m) {
    const int64_t n = BATCH; /* this process's samples */
    int shard = 0, shards = 1;
    m->hl = H, m->h0 = 0;
    m->n1 = (int64_t)m->hl * D, m->n2 = (int64_t)D * m->hl;
    m->params = calloc((size_t)(L * (m->n1 + m->n2)), 4), m->grads = calloc((size_t)(L * (m->n1 + m->n2)), 4);
    m->x = malloc((size_t)((L + 1) * n * D) * 4), m->a = malloc((size_t)(L * n * m->hl) * 4);
    m->dx = malloc((size_t)(n * D) * 4), m->da = malloc((size_t)(n * m->hl) * 4), m->tmp = malloc((size_t)(n * D) * 4);
    if (!m->params || !m->grads || !m->x || !m->a || !m->dx || !m->da || !m->tmp)
        return fprintf(stderr, "stacked: out of memory\n"), 1;
    m->w1 = m->params, m->w2 = m->params + L * m->n1, m->dw1 = m->grads, m->dw2 = m->grads + L * m->n1;
    for (int l = 0; l < L; l++) /* each weight from its global index: any slice of it draws the same values */
        for (int h = 0; h < m->hl; h++)
            for (int j = 0; j < D; j++) {
                m->w1[l * m->n1 + h * D + j] = (float)(0.4 * hash01(100 + l, (uint64_t)((m->h0 + h) * D + j)));
                m->w2[l * m->n2 + j * m->hl + h] = (float)(0.4 * hash01(200 + l, (uint64_t)(j * H + m->h0 + h)));
            }
    for (int step = 0; step < c->steps; step++) {
        double loss = 0.0, count = 0.0;
        memset(m->grads, 0, (size_t)(L * (m->n1 + m->n2)) * 4);
        for (int64_t r = 0; r < n; r++) /* shard s of S takes samples i*S + s (round robin) */
            for (int j = 0; j < D; j++) m->x[r * D + j] = input(step * BATCH + r * shards + shard, j);
        for (int l = 0; l < L; l++) { /* forward: x[l+1] = x[l] + relu(x[l] W1^T) W2^T */
            float *x = m->x + l * n * D, *a = m->a + l * n * m->hl, *y = m->x + (l + 1) * n * D;
            matmul_fwd(a, x, m->w1 + l * m->n1, n, D, m->hl);
            for (int64_t i = 0; i < n * m->hl; i++) a[i] = a[i] > 0.0f ? a[i] : 0.0f;
            matmul_fwd(y, a, m->w2 + l * m->n2, n, m->hl, D);
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
            matmul_bwd(m->da, m->dw2 + l * m->n2, m->dx, a, m->w2 + l * m->n2, n, m->hl, D);
            for (int64_t i = 0; i < n * m->hl; i++) m->da[i] = a[i] > 0.0f ? m->da[i] : 0.0f;
            matmul_bwd(m->tmp, m->dw1 + l * m->n1, m->da, x, m->w1 + l * m->n1, n, D, m->hl);
            for (int64_t i = 0; i < n * D; i++) m->dx[i] += m->tmp[i]; /* the residual's gradient */
        }
        if (adamw(m, L * (m->n1 + m->n2), step + 1, 1e-2f, 0.9f, 0.999f, 1e-8f, 0.01f)) return 1;
        printf("step %d loss %.9g\n", step, loss / count);
    }
    if (c->out) { /* the whole parameter buffer */
        const float *all = m->params;
        FILE *f = fopen(c->out, "wb");
        int ok = f && fwrite(all, 4, (size_t)L * 2 * H * D, f) == (size_t)L * 2 * H * D;
        if (f) ok &= fclose(f) == 0;
        if (!ok) return fprintf(stderr, "stacked: cannot write %s\n", c->out), 1;
    }
    return 0;
}

/* Train, then free what train made (whether it failed or not). */
static int run(const config *c) {
    model m = {0};
    const int rc = train(c, &m);
    free(m.params), free(m.grads), free(m.x), free(m.a), free(m.dx), free(m.da), free(m.tmp);
    free(m.m), free(m.v);
    return rc;
}

int main(int argc, char **argv) {
    config c = {.steps = 30};
    for (int i = 1; i < argc; i += 2) {
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (v && !strcmp(argv[i], "--steps")) c.steps = atoi(v);
        else if (v && !strcmp(argv[i], "--out")) c.out = v;
        else return fprintf(stderr, "stacked: bad argument %s (--steps N --out FILE)\n", argv[i]), 2;
    }
    return run(&c);
}
