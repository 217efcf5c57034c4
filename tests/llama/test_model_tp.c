/* tests/llama/test_model_tp.c - the Llama layers under tensor and sequence
   parallelism equal the single-device layers.

   One embedding, one decoder block (GQA) and the head with the loss run once on
   one device (the reference) and then on tp = 2 and 4 rank threads, with and
   without sequence parallelism, with a replicated and a vocabulary-split
   embedding. Each rank holds its shards (q/k/v, gate, up and lm_head rows; o
   and down columns; its heads), and the collectives are the comm table's over
   the tp group. Checked: every row's loss, every weight gradient shard (norm
   weights and a replicated embedding summed over the group under sequence
   parallelism, where they are partial), against the reference within f32
   reduction-order tolerance. The layers run in a par_tp region (parallel.h
   >>tensor-parallel) made from the trainer's strategies on a "dp=1,tp=T"
   mesh; the one-device reference is the same code on "dp=1,tp=1".
   Everything runs twice: without and with q/k/v biases (llama_dims.qkv_bias,
   Qwen2), whose gradient shards are compared too; with biases the one-device
   bias gradients are also checked against central finite differences of the
   loss. */
#include "test.h"
#include "examples/llama/model.h"

#include <math.h>
#include <stdlib.h>

enum { B = 2, S = 8, N = B * S, C = 32, H = 8, KV = 4, HD = 4, F = 48, V = 64 };
#define QD (H * HD)
#define KVD (KV * HD)

/* Global weights, ids and the reference results. */
typedef struct model {
    float *emb, *ln1, *wq, *wk, *wv, *wo, *ln2, *wg, *wu, *wd, *norm, *lm, *bq, *bk, *bv;
} model;
#define NT 15 /* tensors of a model */

static int use_bias; /* this pass runs with q/k/v biases */

static model W, G; /* weights, reference gradients */
static int32_t ids[N], tgt[N];
static float ref_loss[N];

static uint64_t rng = 0x243F6A8885A308D3ull;
static float frand(void) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (float)((double)(rng >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

static float *fa(int64_t n) { return (float *)calloc((size_t)n, sizeof(float)); }

static void model_alloc(model *m, int random) {
    float **f[NT] = {&m->emb, &m->ln1, &m->wq, &m->wk, &m->wv, &m->wo, &m->ln2, &m->wg, &m->wu, &m->wd, &m->norm, &m->lm,
                     &m->bq,  &m->bk,  &m->bv};
    const int64_t sz[NT] = {V * C, C, QD * C, KVD * C, KVD * C, C * QD, C, F * C, F * C, C * F, C, V * C, QD, KVD, KVD};
    int i;
    int64_t k;
    for (i = 0; i < NT; i++) {
        *f[i] = fa(sz[i]);
        if (random) /* norms near 1, biases larger than the weights so they matter */
            for (k = 0; k < sz[i]; k++) (*f[i])[k] = (i >= 12 ? 0.5f : sz[i] == C ? 0.1f : 0.2f) * frand() + (sz[i] == C ? 1.0f : 0.0f);
    }
}

typedef struct buffers {
    llama_block_acts ba;
    llama_acts a;
    llama_scratch s;
} buffers;

static void buffers_alloc(buffers *b) {
    memset(b, 0, sizeof *b);
    b->ba.x_in = fa(N * C), b->ba.rstd1 = fa(N), b->ba.h1 = fa(N * C), b->ba.q = fa(N * QD), b->ba.k = fa(N * KVD);
    b->ba.v = fa(N * KVD), b->ba.o = fa(N * QD), b->ba.lse = fa(B * H * S), b->ba.x_mid = fa(N * C);
    b->ba.rstd2 = fa(N), b->ba.h2 = fa(N * C), b->ba.g = fa(N * F), b->ba.u = fa(N * F), b->ba.m = fa(N * F);
    b->a.ids = ids, b->a.targets = tgt, b->a.pos = (int64_t *)calloc(N, sizeof(int64_t));
    b->a.blocks = &b->ba;
    b->a.x_final = fa(N * C), b->a.rstdf = fa(N), b->a.hf = fa(N * C), b->a.logits = fa(N * V), b->a.losses = fa(N);
    b->s.dx = fa(N * C), b->s.dh = fa(N * C), b->s.dl = fa(N * C), b->s.dattn = fa(N * QD), b->s.dq = fa(N * QD);
    b->s.dk = fa(N * KVD), b->s.dv = fa(N * KVD), b->s.dg = fa(N * F), b->s.du = fa(N * F), b->s.dm = fa(N * F);
    b->s.gath = fa(N * C), b->s.ones = fa(N), b->s.xent = (float *)b->s.dl; /* the loss's 3N floats: dl's N x C */
    for (int i = 0; i < N; i++) b->a.pos[i] = i % S, ((float *)b->s.ones)[i] = 1.0f;
}

static void buffers_free(buffers *b) {
    float *f[] = {b->ba.x_in, b->ba.rstd1, b->ba.h1, b->ba.q, b->ba.k, b->ba.v, b->ba.o, b->ba.lse, b->ba.x_mid,
                  b->ba.rstd2, b->ba.h2, b->ba.g, b->ba.u, b->ba.m, b->a.x_final, b->a.rstdf, b->a.hf, b->a.logits,
                  b->a.losses, b->s.dx, b->s.dh, b->s.dl, b->s.dattn, b->s.dq, b->s.dk, b->s.dv, b->s.dg, b->s.du,
                  b->s.dm, b->s.gath, b->s.ones};
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++) free(f[i]);
    free(b->a.pos);
}

/* Forward, loss and backward of embedding -> block -> head on one rank. */
static par_status run_model(const llama_model *m, const model *w, model *g, buffers *b) {
    llama_block bw = {w->ln1, w->wq, w->wk, w->wv, w->wo, w->ln2, w->wg, w->wu, w->wd, w->bq, w->bk, w->bv};
    llama_block bg = {g->ln1, g->wq, g->wk, g->wv, g->wo, g->ln2, g->wg, g->wu, g->wd, g->bq, g->bk, g->bv};
    LLAMA_CHECK(par_tp_embedding_fwd(m->tp, &m->emb, N, ids, w->emb, b->ba.x_in, b->s.dh));
    LLAMA_CHECK(llama_block_fwd(m, &bw, &b->ba, b->a.pos, B, S, b->a.x_final, &b->s));
    LLAMA_CHECK(llama_head_fwd(m, w->norm, w->lm, &b->a, N, &b->s));
    LLAMA_CHECK(llama_head_bwd(m, w->norm, w->lm, g->norm, g->lm, &b->a, N, 1.0f / N, &b->s));
    LLAMA_CHECK(llama_block_bwd(m, &bw, &bg, &b->ba, b->a.pos, B, S, &b->s));
    return par_tp_embedding_bwd(m->tp, &m->emb, N, ids, b->s.dx, g->emb, b->s.dh);
}

static llama_dims global_dims(void) {
    llama_dims d;
    memset(&d, 0, sizeof d);
    d.vocab = V, d.dim = C, d.layers = 1, d.heads = H, d.kv_heads = KV, d.head_dim = HD, d.ffn = F, d.seq = S;
    d.eps = 1e-5f, d.theta = 10000.0f, d.qkv_bias = use_bias;
    return d;
}

/* The region of a "dp=1,tp=T" mesh with the trainer's column/row strategies. */
static par_status make_region(par_ctx *ctx, int T, int sp, par_tp **tp) {
    char col[32], row[32];
    par_tp_desc d;
    memset(&d, 0, sizeof d);
    snprintf(col, sizeof col, "((1,1),(%d,1))", T);
    snprintf(row, sizeof row, "((1,%d),(1,%d))", T, T);
    d.rows = N, d.hidden = C, d.column = col, d.row = row, d.sequence_parallel = sp;
    return par_tp_create(ctx, &d, tp);
}

/* ---- one tp configuration ---------------------------------------------------- */

typedef struct tp_case {
    int degree, sp, emb_split;
    double worst[4]; /* per rank */
} tp_case;

/* rows [r0, r0+nr) of a [rows, cols] matrix; cols [c0, c0+nc) */
static void take(const float *src, int64_t cols, int64_t r0, int64_t nr, int64_t c0, int64_t nc, float *dst) {
    for (int64_t i = 0; i < nr; i++) memcpy(dst + i * nc, src + (r0 + i) * cols + c0, (size_t)nc * sizeof(float));
}

static double max_diff(const float *got, const float *want, int64_t n) {
    double w = 0.0;
    for (int64_t i = 0; i < n; i++) {
        const double e = fabs((double)got[i] - (double)want[i]) / (1e-3 + fabs((double)want[i]));
        if (e > w) w = e;
    }
    return w;
}

static void model_free(model *m) {
    float *f[NT] = {m->emb, m->ln1, m->wq, m->wk, m->wv, m->wo, m->ln2, m->wg, m->wu, m->wd, m->norm, m->lm, m->bq, m->bk, m->bv};
    for (int i = 0; i < NT; i++) free(f[i]);
}

/* The one-device reference: weights W, gradients G, losses. */
static par_status ref_rank(par_ctx *ctx, void *arg) {
    const llama_dims d = global_dims();
    llama_model m;
    buffers b;
    par_tp *tp = NULL;
    par_status st;
    (void)arg;
    if ((st = make_region(ctx, 1, 0, &tp)) != PAR_OK) return st;
    if ((st = llama_model_place(&m, par_ctx_compute(ctx), tp, &d, 0)) == PAR_OK) {
        buffers_alloc(&b);
        st = run_model(&m, &W, &G, &b);
        memcpy(ref_loss, b.a.losses, sizeof ref_loss);
        buffers_free(&b);
    }
    par_tp_destroy(tp);
    return st;
}

/* The bias gradients of the reference against central differences of the
   mean loss, for a spread of elements of bq, bk and bv: the largest error
   relative to the largest gradient of that bias into *arg (double). h = 1e-2:
   the f32 loss's rounding (~1e-7 of ~4) over 2h stays near 1e-5, the
   truncation (h^2 times the third derivative) below that. */
static par_status fd_rank(par_ctx *ctx, void *arg) {
    const llama_dims d = global_dims();
    const float h = 1e-2f;
    float *bias[3] = {W.bq, W.bk, W.bv}, *grad[3] = {G.bq, G.bk, G.bv};
    const int64_t len[3] = {QD, KVD, KVD};
    double *worst = (double *)arg;
    llama_model m;
    model g;
    buffers b;
    par_tp *tp = NULL;
    par_status st;
    *worst = 1e30;
    if ((st = make_region(ctx, 1, 0, &tp)) != PAR_OK) return st;
    if ((st = llama_model_place(&m, par_ctx_compute(ctx), tp, &d, 0)) != PAR_OK) return par_tp_destroy(tp), st;
    model_alloc(&g, 0), buffers_alloc(&b);
    *worst = 0.0;
    for (int t = 0; t < 3 && st == PAR_OK; t++) {
        double gmax = 0.0, err = 0.0;
        for (int64_t j = 0; j < len[t]; j++) gmax = fmax(gmax, fabs((double)grad[t][j]));
        for (int64_t j = 0; j < len[t] && st == PAR_OK; j += 3) {
            const float keep = bias[t][j];
            double l[2] = {0.0, 0.0};
            for (int side = 0; side < 2 && st == PAR_OK; side++) {
                bias[t][j] = keep + (side ? -h : h);
                st = run_model(&m, &W, &g, &b);
                for (int i = 0; i < N; i++) l[side] += (double)b.a.losses[i] / N;
            }
            bias[t][j] = keep;
            err = fmax(err, fabs((l[0] - l[1]) / (2.0 * (double)h) - (double)grad[t][j]));
        }
        err /= gmax > 0 ? gmax : 1.0;
        printf("  finite differences: %s_proj bias gradient within %.2e of the largest (%.3e)\n", t == 0 ? "q" : t == 1 ? "k" : "v",
               err, gmax);
        if (err > *worst || gmax == 0.0) *worst = gmax == 0.0 ? 1e30 : err;
    }
    buffers_free(&b), model_free(&g);
    par_tp_destroy(tp);
    return st;
}

static par_status tp_rank(par_ctx *ctx, void *arg) {
    tp_case *tc = (tp_case *)arg;
    const int T = tc->degree, r = par_ctx_rank(ctx);
    const int64_t Hl = H / T, KVl = KV / T, Fl = F / T, Vl = V / T;
    const par_comm_table *cm = par_ctx_comm(ctx);
    const llama_dims d = global_dims();
    par_comm_group *grp = NULL;
    par_tp *tp = NULL;
    llama_model m;
    model w, g, want;
    buffers b;
    double worst = 0.0;
    par_status st;
    if ((st = par_ctx_group(ctx, 1u, &grp, NULL, NULL)) != PAR_OK || (st = make_region(ctx, T, tc->sp, &tp)) != PAR_OK)
        return st;
    if ((st = llama_model_place(&m, par_ctx_compute(ctx), tp, &d, tc->emb_split)) != PAR_OK) return par_tp_destroy(tp), st;
    /* the placement the region derived is the one this test takes by hand */
    if (m.local.heads != Hl || m.local.kv_heads != KVl || m.local.ffn != Fl || m.local.vocab != Vl ||
        m.head.out_start != r * Vl || m.emb.rows_local != (tc->emb_split ? Vl : V))
        worst = 1e30;
    model_alloc(&w, 0), model_alloc(&g, 0), model_alloc(&want, 0);
    /* this rank's shards of the weights and of the reference gradients */
    {
        const model *src[2] = {&W, &G};
        model *dst[2] = {&w, &want};
        for (int k = 0; k < 2; k++) {
            const model *s = src[k];
            model *t = dst[k];
            take(s->emb, C, tc->emb_split ? r * Vl : 0, tc->emb_split ? Vl : V, 0, C, t->emb);
            memcpy(t->ln1, s->ln1, C * sizeof(float)), memcpy(t->ln2, s->ln2, C * sizeof(float));
            memcpy(t->norm, s->norm, C * sizeof(float));
            take(s->wq, C, r * Hl * HD, Hl * HD, 0, C, t->wq);
            take(s->wk, C, r * KVl * HD, KVl * HD, 0, C, t->wk);
            take(s->wv, C, r * KVl * HD, KVl * HD, 0, C, t->wv);
            take(s->wo, QD, 0, C, r * Hl * HD, Hl * HD, t->wo);
            take(s->wg, C, r * Fl, Fl, 0, C, t->wg), take(s->wu, C, r * Fl, Fl, 0, C, t->wu);
            take(s->wd, F, 0, C, r * Fl, Fl, t->wd);
            take(s->lm, C, r * Vl, Vl, 0, C, t->lm);
            take(s->bq, 1, r * Hl * HD, Hl * HD, 0, 1, t->bq); /* a bias goes with its W's rows */
            take(s->bk, 1, r * KVl * HD, KVl * HD, 0, 1, t->bk), take(s->bv, 1, r * KVl * HD, KVl * HD, 0, 1, t->bv);
        }
    }
    buffers_alloc(&b);
    st = run_model(&m, &w, &g, &b);
    /* partial gradients (sequence parallel: norms, replicated embedding) summed over tp */
    if (st == PAR_OK && tc->sp) {
        float *part[4] = {g.ln1, g.ln2, g.norm, g.emb};
        const int64_t cnt[4] = {C, C, C, tc->emb_split ? 0 : V * C};
        for (int k = 0; k < 4 && st == PAR_OK; k++)
            if (cnt[k]) st = cm->all_reduce(cm->user, grp, part[k], part[k], cnt[k], PAR_F32, PAR_REDUCE_SUM, NULL);
    }
    if (st == PAR_OK) {
        const float *gw[NT] = {g.emb, g.ln1, g.wq, g.wk, g.wv, g.wo, g.ln2, g.wg, g.wu, g.wd, g.norm, g.lm, g.bq, g.bk, g.bv};
        const float *ww[NT] = {want.emb, want.ln1, want.wq, want.wk, want.wv, want.wo, want.ln2, want.wg, want.wu,
                               want.wd, want.norm, want.lm, want.bq, want.bk, want.bv};
        const int64_t sz[NT] = {(tc->emb_split ? Vl : V) * C, C, Hl * HD * C, KVl * HD * C, KVl * HD * C,
                                C * Hl * HD, C, Fl * C, Fl * C, C * Fl, C, Vl * C, Hl * HD, KVl * HD, KVl * HD};
        double e = max_diff(b.a.losses, ref_loss, N);
        if (e > worst) worst = e;
        for (int k = 0; k < (use_bias ? NT : 12); k++) {
            e = max_diff(gw[k], ww[k], sz[k]);
            if (e > worst) worst = e;
        }
    }
    tc->worst[r] = worst;
    buffers_free(&b);
    model_free(&w), model_free(&g), model_free(&want);
    par_tp_destroy(tp);
    return st;
}

int main(void) {
    static const int cases[][3] = {{2, 0, 0}, {2, 1, 0}, {2, 0, 1}, {2, 1, 1}, {4, 0, 0}, {4, 1, 0}, {4, 1, 1}};
    par_ctx_desc one = {0};
    model_alloc(&W, 1);
    for (int i = 0; i < N; i++) ids[i] = (int32_t)((frand() + 1.0f) * 0.5f * V) % V, tgt[i] = (int32_t)((i * 7 + 3) % V);
    one.mesh = "dp=1,tp=1", one.kernel_threads = 1;
    for (use_bias = 0; use_bias < 2; use_bias++) {
        printf(" %s q/k/v biases:\n", use_bias ? "with" : "without");
        model_alloc(&G, 0); /* gradients accumulate: a fresh reference each pass */
        CHECK_OK(par_run_threads_desc(&one, 1, ref_rank, NULL));
        if (use_bias) {
            double fd = 1e30;
            CHECK_OK(par_run_threads_desc(&one, 1, fd_rank, &fd));
            CHECK_MSG(fd <= 2e-3, "bias gradients differ from finite differences by %g of the largest", fd);
        }
        for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
            tp_case tc = {cases[i][0], cases[i][1], cases[i][2], {1e30, 1e30, 1e30, 1e30}};
            par_ctx_desc desc = {0};
            char mesh[32];
            double worst = 0.0;
            snprintf(mesh, sizeof mesh, "dp=1,tp=%d", tc.degree);
            desc.mesh = mesh, desc.kernel_threads = 1;
            CHECK_OK(par_run_threads_desc(&desc, tc.degree, tp_rank, &tc));
            for (int r = 0; r < tc.degree; r++) worst = tc.worst[r] > worst ? tc.worst[r] : worst;
            /* f32 sums in another order (split contractions, all-reduce): a few ulps,
               relative to max(|value|, 1e-3) */
            CHECK_MSG(worst <= 2e-4, "tp %d sp %d emb_split %d: worst relative difference %g", tc.degree, tc.sp,
                      tc.emb_split, worst);
            printf("  tp %d sp %d embedding %-10s worst relative difference %.2e\n", tc.degree, tc.sp,
                   tc.emb_split ? "split" : "replicated", worst);
        }
        model_free(&G);
    }
    model_free(&W);
    return TEST_END("llama_model_tp");
}
