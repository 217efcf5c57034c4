/* tests/test_cp.c - >>context-parallel on the threads backend.

   Every configuration (ring contiguous / zigzag, Ulysses, hybrid, with and
   without all-to-all, GQA with fewer kv heads than the Ulysses degree, MQA,
   causal and full attention, cp 1..8, with a data-parallel axis beside cp)
   runs forward and backward on random q, k, v, dO; each rank's o, dq, dk, dv
   rows are compared with a naive attention in double precision written here
   (softmax of the masked scores, its gradient by the chain rule): not the
   library's flash kernels. Then the bad inputs, each with its message. */
#include "test.h"
#include "cp_suite.h"

static void run(const cp_cfg *c, const char *label) {
    cp_world *w = cp_world_new(c);
    par_ctx_desc pd;
    double worst = 0;
    int r, bad = 0;
    CHECK_MSG(w != NULL, "%s: out of memory", label);
    if (!w) return;
    memset(&pd, 0, sizeof pd);
    pd.mesh = c->mesh, pd.timeout_ms = 20000, pd.kernel_threads = 1;
    CHECK_MSG(par_run_threads_desc(&pd, c->ranks, cp_rank_run, w) == PAR_OK, "%s", label);
    for (r = 0; r < c->ranks; r++) {
        bad |= w->bad[r];
        if (w->max_err[r] > worst) worst = w->max_err[r];
    }
    CHECK_MSG(!bad && worst < CP_TOL, "%s: worst relative error %.3g", label, worst);
    printf("  %-44s worst err %.2e\n", label, worst);
    cp_world_free(w);
}

/* ---- bad input ----------------------------------------------------------------------- */

typedef struct bad_case {
    cp_cfg c;
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

static void bad(const cp_cfg *c, par_status want, const char *needle) {
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
    cp_cfg c;
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
    RETURN_IF_ERR(par_layout_parse(&tokens, par_ctx_mesh(ctx), 2, shape, p->c.tokens));
    memset(&d, 0, sizeof d);
    d.tokens = &tokens, d.algo = p->c.algo, d.ulysses_degree = p->c.ulysses, d.contiguous = p->c.contiguous;
    d.batch = 1, d.heads = p->c.heads, d.kv_heads = p->c.kv_heads, d.head_dim = p->c.head_dim;
    RETURN_IF_ERR(par_cp_create(ctx, &d, &cp));
    RETURN_IF_ERR(par_cp_get_info(cp, &info));
    p->nlocal[rank] = (int)info.seq_local;
    if (info.seq_local == 4) RETURN_IF_ERR(par_cp_positions(cp, p->got[rank]));
    par_cp_destroy(cp);
    return PAR_OK;
}

static void positions(const cp_cfg *c, const int64_t want[4][4], const char *label) {
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
        cp_cfg c;
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
        /* K/V blocks of 256 KiB: the threads backend's copier thread moves them */
        {"cp4 ring zigzag, 256 KiB blocks", {"cp=4", "[None,cp]", 4, PAR_CP_RING, 0, 0, 0, 0, 1, 4, 2, 64, 1024}},
        {"cp4 hybrid 2x2, 128 KiB blocks", {"cp=4", "[None,cp]", 4, PAR_CP_HYBRID, 2, 0, 0, 0, 1, 4, 2, 64, 512}},
        {"cp2 x tp2 (cp outer) hybrid-free ring", {"cp=2,tp=2", "[None,cp]", 4, PAR_CP_RING, 0, 0, 0, 0, 1, 2, 1, 8, 16}},
    };
    size_t i;
    cp_cfg c;
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
