/* tests/test_cp.c - >>context-parallel on the threads backend.

   Every configuration (ring contiguous / zigzag, Ulysses, hybrid, with and
   without all-to-all, GQA with fewer kv heads than the Ulysses degree, MQA,
   causal and full attention, cp 1..8, with a data-parallel axis beside cp)
   runs forward and backward on random q, k, v, dO; each rank's o, dq, dk, dv
   rows are compared with a naive attention in double precision written here
   (softmax of the masked scores, its gradient by the chain rule): not the
   library's flash kernels. Then the bad inputs, each with its message. */
#define PARALLEL_IMPLEMENTATION
#include "test.h"

#include <math.h>
#include <stdlib.h>

#define TOL 2e-5

typedef struct cfg {
    const char *mesh, *tokens; /* mesh, tokens layout */
    int ranks;
    par_cp_algo algo;
    int ulysses, contiguous, no_a2a, full;
    int batch, heads, kv_heads, head_dim, seq;
} cfg;

/* ---- the oracle ------------------------------------------------------------------- */

static double urand(uint64_t *s) {
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return (double)(*s >> 11) / 9007199254740992.0 * 2.0 - 1.0;
}

/* Global tensors [B, T, H, D] (row-major) and the reference results. */
typedef struct world {
    cfg c;
    float *q, *k, *v, *dout;
    double *o, *dq, *dk, *dv;
    double max_err[64];
    int bad[64];
} world;

static int64_t at(const cfg *c, int b, int t, int h, int H, int d) {
    return (((int64_t)b * c->seq + t) * H + h) * c->head_dim + d;
}

/* Attention of every query over all keys (causal unless c->full), and its gradients. */
static void reference(world *w) {
    const cfg *c = &w->c;
    const int T = c->seq, D = c->head_dim, g = c->heads / c->kv_heads;
    const double scale = 1.0 / sqrt((double)D);
    double *p = (double *)malloc(sizeof(double) * (size_t)T), *dp = (double *)malloc(sizeof(double) * (size_t)T);
    int b, h, i, j, d;
    for (b = 0; b < c->batch; b++)
        for (h = 0; h < c->heads; h++)
            for (i = 0; i < T; i++) {
                const int kh = h / g;
                double m = -1e300, sum = 0, dsum = 0;
                for (j = 0; j < T; j++) {
                    double s = 0;
                    if (!c->full && j > i) { p[j] = -1e300; continue; }
                    for (d = 0; d < D; d++) s += (double)w->q[at(c, b, i, h, c->heads, d)] * w->k[at(c, b, j, kh, c->kv_heads, d)];
                    p[j] = s * scale;
                    if (p[j] > m) m = p[j];
                }
                for (j = 0; j < T; j++) p[j] = p[j] <= -1e299 ? 0 : exp(p[j] - m), sum += p[j];
                for (j = 0; j < T; j++) p[j] /= sum;
                for (d = 0; d < D; d++) {
                    double o = 0;
                    for (j = 0; j < T; j++) o += p[j] * w->v[at(c, b, j, kh, c->kv_heads, d)];
                    w->o[at(c, b, i, h, c->heads, d)] = o;
                }
                /* dP = dO V^T, dS = P (dP - sum(P dP)), dQ = dS K scale, dK += dS^T Q scale, dV += P^T dO */
                for (j = 0; j < T; j++) {
                    double s = 0;
                    for (d = 0; d < D; d++) s += (double)w->dout[at(c, b, i, h, c->heads, d)] * w->v[at(c, b, j, kh, c->kv_heads, d)];
                    dp[j] = s, dsum += p[j] * s;
                }
                for (j = 0; j < T; j++) {
                    const double ds = p[j] * (dp[j] - dsum) * scale;
                    for (d = 0; d < D; d++) {
                        w->dq[at(c, b, i, h, c->heads, d)] += ds * w->k[at(c, b, j, kh, c->kv_heads, d)];
                        w->dk[at(c, b, j, kh, c->kv_heads, d)] += ds * w->q[at(c, b, i, h, c->heads, d)];
                        w->dv[at(c, b, j, kh, c->kv_heads, d)] += p[j] * w->dout[at(c, b, i, h, c->heads, d)];
                    }
                }
            }
    free(p), free(dp);
}

/* ---- one rank ---------------------------------------------------------------------- */

/* This rank's rows of a global [B, T, H*D] tensor, in its token order. */
static void take(const cfg *c, const float *g, int H, const int64_t *pos, int64_t S, int b0, float *dst) {
    int b;
    int64_t t;
    const int64_t row = (int64_t)H * c->head_dim;
    for (b = 0; b < c->batch; b++)
        for (t = 0; t < S; t++) memcpy(dst + ((int64_t)b * S + t) * row, g + ((int64_t)(b0 + b) * c->seq + pos[t]) * row, sizeof(float) * (size_t)row);
}

static double compare(const cfg *c, const float *mine, const double *ref, int H, const int64_t *pos, int64_t S, int b0) {
    const int64_t row = (int64_t)H * c->head_dim;
    double worst = 0;
    int b;
    int64_t t, e;
    for (b = 0; b < c->batch; b++)
        for (t = 0; t < S; t++)
            for (e = 0; e < row; e++) {
                const double r = ref[((int64_t)(b0 + b) * c->seq + pos[t]) * row + e];
                const double err = fabs(mine[((int64_t)b * S + t) * row + e] - r) / (1.0 + fabs(r));
                if (err > worst || err != err) worst = err != err ? 1e30 : err;
            }
    return worst;
}

static par_status rank_body(par_ctx *ctx, void *arg) {
    world *w = (world *)arg;
    const cfg *c = &w->c;
    const int rank = par_ctx_rank(ctx);
    const int64_t shape[2] = {0, c->seq};
    int64_t gshape[2], start[2];
    par_layout tokens;
    par_cp_desc d;
    par_cp_info info;
    par_cp *cp = NULL;
    par_status st;
    float *q, *k, *v, *o, *dout, *dq, *dk, *dv, *lse, *saved;
    int64_t *pos, S, qn, kvn;
    int b0;
    double err = 0, e;
    gshape[0] = (int64_t)c->batch * (par_mesh_size(par_ctx_mesh(ctx)) / 1), gshape[1] = shape[1];
    /* the global batch is split over the layout's batch dims; each rank's samples start at b0 */
    PAR__CHECK(par_layout_parse(&tokens, par_ctx_mesh(ctx), 2, gshape, c->tokens));
    tokens.shape[0] = (int64_t)c->batch * par_layout_shards(&tokens, 0);
    PAR__CHECK(par_layout_local_offset(&tokens, rank, start));
    b0 = (int)start[0];
    memset(&d, 0, sizeof d);
    d.tokens = &tokens, d.algo = c->algo, d.ulysses_degree = c->ulysses, d.contiguous = c->contiguous;
    d.batch = c->batch, d.heads = c->heads, d.kv_heads = c->kv_heads, d.head_dim = c->head_dim;
    d.full_attention = c->full, d.no_all_to_all = c->no_a2a;
    PAR__CHECK(par_cp_create(ctx, &d, &cp));
    PAR__CHECK(par_cp_get_info(cp, &info));
    S = info.seq_local;
    qn = (int64_t)c->batch * S * c->heads * c->head_dim, kvn = (int64_t)c->batch * S * c->kv_heads * c->head_dim;
    pos = (int64_t *)malloc(sizeof(int64_t) * (size_t)S);
    q = (float *)malloc(sizeof(float) * (size_t)(4 * qn + 4 * kvn + info.lse_floats + info.saved_floats + 1));
    k = q + qn, v = k + kvn, o = v + kvn, dout = o + qn, dq = dout + qn, dk = dq + qn, dv = dk + kvn, lse = dv + kvn;
    saved = lse + info.lse_floats;
    st = par_cp_positions(cp, pos);
    take(c, w->q, c->heads, pos, S, b0, q), take(c, w->k, c->kv_heads, pos, S, b0, k);
    take(c, w->v, c->kv_heads, pos, S, b0, v), take(c, w->dout, c->heads, pos, S, b0, dout);
    if (st == PAR_OK) st = par_cp_attention_fwd(cp, q, k, v, o, lse, info.saved_floats ? saved : NULL);
    if (st == PAR_OK) st = par_cp_attention_bwd(cp, q, k, v, o, lse, info.saved_floats ? saved : NULL, dout, dq, dk, dv);
    if (st == PAR_OK) {
        e = compare(c, o, w->o, c->heads, pos, S, b0), err = e > err ? e : err;
        e = compare(c, dq, w->dq, c->heads, pos, S, b0), err = e > err ? e : err;
        e = compare(c, dk, w->dk, c->kv_heads, pos, S, b0), err = e > err ? e : err;
        e = compare(c, dv, w->dv, c->kv_heads, pos, S, b0), err = e > err ? e : err;
    }
    w->max_err[rank] = err, w->bad[rank] = st != PAR_OK;
    free(pos), free(q);
    par_cp_destroy(cp);
    return st;
}

static void run(const cfg *c, const char *label) {
    world w;
    par_ctx_desc pd;
    int64_t n1, n2, i;
    uint64_t s = 0x1234567ull + (uint64_t)c->seq * 31u + (uint64_t)c->ranks;
    double worst = 0;
    int r, bad = 0, samples = c->batch * (c->ranks / 1);
    memset(&w, 0, sizeof w);
    w.c = *c;
    /* enough samples for every data-parallel rank: batch x ranks (more than needed is harmless) */
    n1 = (int64_t)samples * c->seq * c->heads * c->head_dim, n2 = (int64_t)samples * c->seq * c->kv_heads * c->head_dim;
    w.q = (float *)malloc(sizeof(float) * (size_t)(2 * n1 + 2 * n2));
    w.k = w.q + n1, w.v = w.k + n2, w.dout = w.v + n2;
    w.o = (double *)calloc((size_t)(2 * n1 + 2 * n2), sizeof(double));
    w.dq = w.o + n1, w.dk = w.dq + n1, w.dv = w.dk + n2;
    for (i = 0; i < 2 * n1 + 2 * n2; i++) w.q[i] = (float)urand(&s);
    w.c.batch = samples;
    reference(&w);
    w.c.batch = c->batch;
    memset(&pd, 0, sizeof pd);
    pd.mesh = c->mesh, pd.timeout_ms = 20000, pd.kernel_threads = 1;
    CHECK_MSG(par_run_threads_desc(&pd, c->ranks, rank_body, &w) == PAR_OK, "%s", label);
    for (r = 0; r < c->ranks; r++) {
        bad |= w.bad[r];
        if (w.max_err[r] > worst) worst = w.max_err[r];
    }
    CHECK_MSG(!bad && worst < TOL, "%s: worst relative error %.3g", label, worst);
    printf("  %-44s worst err %.2e\n", label, worst);
    free(w.q), free(w.o);
}

/* ---- bad input ----------------------------------------------------------------------- */

typedef struct bad_case {
    cfg c;
    par_status want;
    const char *needle;
    par_status got[8];
    char msg[8][512];
} bad_case;

static par_status bad_body(par_ctx *ctx, void *arg) {
    bad_case *b = (bad_case *)arg;
    const int rank = par_ctx_rank(ctx);
    int64_t shape[2];
    par_layout tokens;
    par_cp_desc d;
    par_cp *cp = NULL;
    shape[0] = b->c.batch, shape[1] = b->c.seq;
    /* a sequence the cp ranks cannot split is already an invalid tokens layout */
    if ((b->got[rank] = par_layout_parse(&tokens, par_ctx_mesh(ctx), 2, shape, b->c.tokens)) != PAR_OK) {
        snprintf(b->msg[rank], sizeof b->msg[rank], "%s", par_last_error());
        return PAR_OK;
    }
    memset(&d, 0, sizeof d);
    d.tokens = &tokens, d.algo = b->c.algo, d.ulysses_degree = b->c.ulysses, d.contiguous = b->c.contiguous;
    d.batch = b->c.batch, d.heads = b->c.heads, d.kv_heads = b->c.kv_heads, d.head_dim = b->c.head_dim;
    b->got[rank] = par_cp_create(ctx, &d, &cp);
    snprintf(b->msg[rank], sizeof b->msg[rank], "%s", par_last_error());
    par_cp_destroy(cp);
    return PAR_OK;
}

static void bad(const cfg *c, par_status want, const char *needle) {
    bad_case b;
    par_ctx_desc pd;
    int r, ok = 1;
    memset(&b, 0, sizeof b);
    b.c = *c, b.want = want, b.needle = needle;
    memset(&pd, 0, sizeof pd);
    pd.mesh = c->mesh, pd.timeout_ms = 20000, pd.kernel_threads = 1;
    CHECK_OK(par_run_threads_desc(&pd, c->ranks, bad_body, &b));
    for (r = 0; r < c->ranks; r++) ok &= b.got[r] == want && strstr(b.msg[r], needle) != NULL;
    CHECK_MSG(ok, "want %s with \"%s\"; rank 0 got %s: %s", par_status_string(want), needle,
              par_status_string(b.got[0]), b.msg[0]);
}

typedef struct pos_case {
    cfg c;
    int64_t got[8][4];
    int nlocal[8];
} pos_case;

static par_status pos_body(par_ctx *ctx, void *arg) {
    pos_case *p = (pos_case *)arg;
    const int rank = par_ctx_rank(ctx);
    int64_t shape[2];
    par_layout tokens;
    par_cp_desc d;
    par_cp_info info;
    par_cp *cp = NULL;
    shape[0] = 1, shape[1] = p->c.seq;
    PAR__CHECK(par_layout_parse(&tokens, par_ctx_mesh(ctx), 2, shape, p->c.tokens));
    memset(&d, 0, sizeof d);
    d.tokens = &tokens, d.algo = p->c.algo, d.ulysses_degree = p->c.ulysses, d.contiguous = p->c.contiguous;
    d.batch = 1, d.heads = p->c.heads, d.kv_heads = p->c.kv_heads, d.head_dim = p->c.head_dim;
    PAR__CHECK(par_cp_create(ctx, &d, &cp));
    PAR__CHECK(par_cp_get_info(cp, &info));
    p->nlocal[rank] = (int)info.seq_local;
    if (info.seq_local == 4) PAR__CHECK(par_cp_positions(cp, p->got[rank]));
    par_cp_destroy(cp);
    return PAR_OK;
}

static void positions(const cfg *c, const int64_t want[4][4], const char *label) {
    pos_case p;
    par_ctx_desc pd;
    int r, ok = 1;
    memset(&p, 0, sizeof p);
    p.c = *c;
    memset(&pd, 0, sizeof pd);
    pd.mesh = c->mesh, pd.timeout_ms = 20000, pd.kernel_threads = 1;
    CHECK_OK(par_run_threads_desc(&pd, 4, pos_body, &p));
    for (r = 0; r < 4; r++) ok &= p.nlocal[r] == 4 && memcmp(p.got[r], want[r], sizeof p.got[r]) == 0;
    CHECK_MSG(ok, "%s positions: rank 1 holds %lld %lld %lld %lld", label, (long long)p.got[1][0],
              (long long)p.got[1][1], (long long)p.got[1][2], (long long)p.got[1][3]);
}

int main(void) {
    /*  mesh            tokens      ranks algo           U  contig a2a full  B  H  KV D  T */
    static const struct {
        const char *label;
        cfg c;
    } cases[] = {
        {"cp1 ring", {"cp=1", "[None,cp]", 1, PAR_CP_RING, 0, 0, 0, 0, 2, 4, 2, 8, 16}},
        {"cp2 ring contiguous", {"cp=2", "[None,cp]", 2, PAR_CP_RING, 0, 1, 0, 0, 2, 4, 2, 8, 16}},
        {"cp2 ring zigzag", {"cp=2", "[None,cp]", 2, PAR_CP_RING, 0, 0, 0, 0, 2, 4, 2, 8, 16}},
        {"cp4 ring contiguous", {"cp=4", "[None,cp]", 4, PAR_CP_RING, 0, 1, 0, 0, 1, 4, 2, 8, 32}},
        {"cp4 ring zigzag", {"cp=4", "[None,cp]", 4, PAR_CP_RING, 0, 0, 0, 0, 2, 4, 2, 8, 32}},
        {"cp8 ring zigzag", {"cp=8", "[None,cp]", 8, PAR_CP_RING, 0, 0, 0, 0, 1, 2, 1, 8, 48}},
        {"cp3 ring zigzag", {"cp=3", "[None,cp]", 3, PAR_CP_RING, 0, 0, 0, 0, 2, 2, 2, 4, 18}},
        {"cp4 ring zigzag full attention", {"cp=4", "[None,cp]", 4, PAR_CP_RING, 0, 0, 0, 1, 1, 2, 1, 8, 16}},
        {"cp2 ulysses", {"cp=2", "[None,cp]", 2, PAR_CP_ULYSSES, 0, 0, 0, 0, 2, 4, 2, 8, 16}},
        {"cp4 ulysses GQA kv 2 < 4", {"cp=4", "[None,cp]", 4, PAR_CP_ULYSSES, 0, 0, 0, 0, 2, 8, 2, 8, 16}},
        {"cp4 ulysses MQA kv 1", {"cp=4", "[None,cp]", 4, PAR_CP_ULYSSES, 0, 0, 0, 0, 1, 4, 1, 8, 16}},
        {"cp8 ulysses GQA kv 2 < 8", {"cp=8", "[None,cp]", 8, PAR_CP_ULYSSES, 0, 0, 0, 0, 1, 8, 2, 4, 16}},
        {"cp4 ulysses kv 8 > 4", {"cp=4", "[None,cp]", 4, PAR_CP_ULYSSES, 0, 0, 0, 0, 1, 8, 8, 4, 8}},
        {"cp4 ulysses without all_to_all", {"cp=4", "[None,cp]", 4, PAR_CP_ULYSSES, 0, 0, 1, 0, 1, 8, 2, 4, 16}},
        {"cp4 hybrid 2x2", {"cp=4", "[None,cp]", 4, PAR_CP_HYBRID, 2, 0, 0, 0, 2, 4, 2, 8, 16}},
        {"cp8 hybrid 2x4 (U 2, ring 4)", {"cp=8", "[None,cp]", 8, PAR_CP_HYBRID, 2, 0, 0, 0, 1, 4, 2, 4, 32}},
        {"cp8 hybrid 4x2 (U 4, ring 2) GQA kv 2", {"cp=8", "[None,cp]", 8, PAR_CP_HYBRID, 4, 0, 0, 0, 1, 8, 2, 4, 32}},
        {"cp4 hybrid 2x2 contiguous no a2a", {"cp=4", "[None,cp]", 4, PAR_CP_HYBRID, 2, 1, 1, 0, 1, 4, 1, 4, 16}},
        {"dp2 x cp2 ring zigzag", {"dp=2,cp=2", "[dp,cp]", 4, PAR_CP_RING, 0, 0, 0, 0, 1, 4, 2, 8, 16}},
        {"dp2 x cp2 ulysses", {"dp=2,cp=2", "[dp,cp]", 4, PAR_CP_ULYSSES, 0, 0, 0, 0, 1, 4, 2, 8, 16}},
        {"cp2 x tp2 (cp outer) hybrid-free ring", {"cp=2,tp=2", "[None,cp]", 4, PAR_CP_RING, 0, 0, 0, 0, 1, 2, 1, 8, 16}},
    };
    size_t i;
    cfg c;
    par_cp_algo a;
    for (i = 0; i < sizeof cases / sizeof cases[0]; i++) run(&cases[i].c, cases[i].label);

    /* token order, written out by hand: zigzag cp 4 over 16 tokens gives rank r
       the chunks r and 7-r of 2 tokens; hybrid U 2 x ring 2 cuts ring rank r's
       chunks (r, 3-r) of 4 into two pieces of 4 */
    {
        static const int64_t zig[4][4] = {{0, 1, 14, 15}, {2, 3, 12, 13}, {4, 5, 10, 11}, {6, 7, 8, 9}};
        static const int64_t hyb[4][4] = {{0, 1, 2, 3}, {12, 13, 14, 15}, {4, 5, 6, 7}, {8, 9, 10, 11}};
        static const int64_t con[4][4] = {{0, 1, 2, 3}, {4, 5, 6, 7}, {8, 9, 10, 11}, {12, 13, 14, 15}};
        c = cases[4].c, c.seq = 16, c.batch = 1;
        positions(&c, zig, "zigzag");
        c.contiguous = 1;
        positions(&c, con, "contiguous");
        c = cases[14].c, c.seq = 16, c.batch = 1;
        positions(&c, hyb, "hybrid");
        c = cases[9].c, c.seq = 16, c.batch = 1; /* Ulysses: one ring rank, so contiguous */
        positions(&c, con, "ulysses");
    }
    /* names */
    CHECK_OK(par_cp_algo_parse("colossalai_cp", &a));
    CHECK(a == PAR_CP_RING);
    CHECK_OK(par_cp_algo_parse("Ulysses_CP", &a));
    CHECK(a == PAR_CP_ULYSSES);
    CHECK_OK(par_cp_algo_parse("hybird_cp", &a));
    CHECK(a == PAR_CP_HYBRID);
    CHECK_ERR(par_cp_algo_parse("megatron_cp", &a), PAR_EINVAL, "accepted: ring (colossalai_cp), ulysses");
    CHECK_STR(par_cp_algo_name(PAR_CP_HYBRID), "hybrid");

    /* bad input, each on every rank with the rule in the message */
    c = cases[4].c, c.seq = 20; /* 20 % (2 x 4) */
    bad(&c, PAR_ESHAPE, "does not split into 2 x 4 = 8 zigzag chunks");
    c = cases[3].c, c.seq = 18; /* 18 % 4 */
    bad(&c, PAR_ELAYOUT, "tensor dim 1 (size 18) is not divisible by its shard 4");
    c = cases[9].c, c.heads = 6, c.kv_heads = 2; /* 6 % 4 */
    bad(&c, PAR_ESHAPE, "6 q heads (this rank's) are not divisible by the Ulysses degree 4");
    c = cases[11].c, c.heads = 24, c.kv_heads = 3; /* 3 vs 8 */
    bad(&c, PAR_ESHAPE, "3 kv heads (this rank's) and the Ulysses degree 8: one must divide the other");
    c = cases[14].c, c.ulysses = 3;
    bad(&c, PAR_EINVAL, "ulysses_degree 3 does not divide the context-parallel degree 4");
    c = cases[0].c, c.heads = 3, c.kv_heads = 2;
    bad(&c, PAR_ESHAPE, "3 q heads are not a multiple of 2 kv heads");
    return TEST_END("cp");
}
