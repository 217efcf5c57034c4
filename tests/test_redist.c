#define PARALLEL_IMPLEMENTATION
/* Count the library's allocations (all three macros, as the header requires) so
   the tests can show that a warmed-up planner allocates nothing. */
#include <stdlib.h>
static long test_allocations;
static void *test_malloc(size_t n) { test_allocations++; return malloc(n); }
static void *test_realloc(void *p, size_t n) { test_allocations++; return realloc(p, n); }
static void test_free(void *p) { free(p); }
#define PARALLEL_MALLOC(sz) test_malloc(sz)
#define PARALLEL_REALLOC(p, sz) test_realloc(p, sz)
#define PARALLEL_FREE(p) test_free(p)
#include "test.h"
#include "random_layout.h"

#include <math.h>
#include <stdint.h>

/* Redistribution planner, greedy baseline and mesh simulator.

   Every optimal plan is checked against an exhaustive uniform-cost search written
   here from the op definitions alone (own state type, no planner code), and every
   plan is executed by the simulator on real values for every rank. */

#define MAXD PARALLEL_MAX_DIMS

/* ---- small helpers ------------------------------------------------------ */

static par_mesh make_mesh(const char *text) {
    par_mesh m;
    par_status st = par_mesh_parse(text, &m);
    if (st != PAR_OK) fprintf(stderr, "bad test mesh %s: %s\n", text, par_last_error());
    return m;
}

static par_layout make_layout(const par_mesh *m, int ndim, const int64_t *shape, const char *text) {
    par_layout l;
    par_status st = par_layout_parse(&l, m, ndim, shape, text);
    if (st != PAR_OK) fprintf(stderr, "bad test layout %s: %s\n", text, par_last_error());
    return l;
}

static const char *plan_text(const par_plan *plan) {
    static char buf[8192];
    par_plan_format(plan, buf, sizeof buf);
    return buf;
}

/* Kind of the first op that is not a local reshape (-1 if none). */
static int first_collective(const par_plan *plan) {
    int i;
    for (i = 0; i < plan->num_ops; i++)
        if (plan->ops[i].kind != PAR_REDIST_RESHAPE) return (int)plan->ops[i].kind;
    return -1;
}

static int close_to(double a, double b) { return fabs(a - b) <= 1e-9 * (fabs(a) > 1 ? fabs(a) : 1); }

/* ---- simulation helpers ------------------------------------------------- */

typedef struct sim_buffers {
    int ranks;
    double *global;
    double *data;
    double *locals[64];
} sim_buffers;

static void sim_alloc(sim_buffers *b, const par_layout *l, int64_t per_rank) {
    int64_t numel = 1, i;
    int t, r;
    for (t = 0; t < l->ndim; t++) numel *= l->shape[t];
    b->ranks = par_mesh_size(&l->mesh);
    b->global = (double *)malloc(sizeof(double) * (size_t)numel);
    b->data = (double *)malloc(sizeof(double) * (size_t)(per_rank * b->ranks));
    for (i = 0; i < numel; i++) b->global[i] = 100 + rnd_below(900);
    for (r = 0; r < b->ranks; r++) b->locals[r] = b->data + r * per_rank;
}

static void sim_free(sim_buffers *b) {
    free(b->global);
    free(b->data);
}

/* Sum every rank's slice over the layout's partial group, the way a test would
   check a result that is meant to stay partial. */
static void sum_partial_groups(const par_layout *l, sim_buffers *b) {
    int64_t numel = par_layout_local_numel(l), i;
    double *sums = (double *)malloc(sizeof(double) * (size_t)(numel * b->ranks));
    int group[64], count, r, j;
    for (r = 0; r < b->ranks; r++) {
        par_mesh_group(&l->mesh, r, l->map.partial, group, &count);
        for (i = 0; i < numel; i++) {
            double s = 0;
            for (j = 0; j < count; j++) s += b->locals[group[j]][i];
            sums[r * numel + i] = s;
        }
    }
    for (r = 0; r < b->ranks; r++) memcpy(b->locals[r], sums + r * numel, sizeof(double) * (size_t)numel);
    free(sums);
}

/* Scatter the source, run the plan, check every rank holds its target slice. */
static int simulate_ok(const par_plan *plan) {
    sim_buffers b;
    par_layout target = plan->to;
    int ok;
    sim_alloc(&b, &plan->from, plan->max_local_numel);
    ok = par_sim_scatter(&plan->from, b.global, b.locals) == PAR_OK && par_sim_run(plan, b.locals) == PAR_OK;
    if (ok && target.map.partial) {
        sum_partial_groups(&target, &b);
        target.map.partial = 0;
    }
    ok = ok && par_sim_matches(&target, b.global, b.locals);
    sim_free(&b);
    return ok;
}

/* ---- seed cases: MindSpore / DTensor transitions with hand-computed bytes - */

static void check_plan_text(const par_layout *from, const par_layout *to, const char *want) {
    par_plan plan;
    CHECK_OK(par_plan_redistribution(from, to, NULL, &plan));
    CHECK_STR(plan_text(&plan), want);
    CHECK(simulate_ok(&plan));
}

static void test_seed_cases(void) {
    par_mesh m = make_mesh("4");
    int64_t shape[2] = {16, 16};
    /* 16x16 f32 = 1024 bytes; a [4]-split slice is 256 bytes */
    par_layout row = make_layout(&m, 2, shape, "[0,-1]"), col = make_layout(&m, 2, shape, "[-1,0]");
    par_layout rep = make_layout(&m, 2, shape, "[-1,-1]"), part = make_layout(&m, 2, shape, "[-1,-1] partial=0");
    check_plan_text(&row, &rep, "all_gather tensor_dim=0 device_dim=0 group=4 bytes=768\ntotal bytes=768 ops=1\n");
    check_plan_text(&col, &row,
                    "all_to_all tensor_dim=1 to_dim=0 device_dim=0 group=4 bytes=192\ntotal bytes=192 ops=1\n");
    check_plan_text(&row, &row, "total bytes=0 ops=0\n");
    check_plan_text(&part, &row,
                    "reduce_scatter tensor_dim=0 device_dim=0 group=4 bytes=768\ntotal bytes=768 ops=1\n");
    check_plan_text(&part, &rep, "all_reduce device_dim=0 group=4 bytes=1536\ntotal bytes=1536 ops=1\n");
    check_plan_text(&rep, &col, "split tensor_dim=1 device_dim=0 group=4 bytes=0\ntotal bytes=0 ops=1\n");
}

/* MindSpore's Z = (X x W) x V examples and Megatron's sequence-parallel moves. */
static void test_framework_cases(void) {
    par_mesh m = make_mesh("dp=2,tp=4");
    int64_t sbh[3] = {8, 4, 16}, bshd[4] = {2, 8, 4, 8}, bsh[3] = {2, 8, 32};
    par_plan plan;
    /* sequence parallel, batch split by dp: Shard(seq) -> Replicate before a
       column-parallel linear; the slice is 2*2*16*4 = 256 B */
    par_layout seq = make_layout(&m, 3, sbh, "[tp,dp,None]"), rep = make_layout(&m, 3, sbh, "[None,dp,None]");
    par_layout part = make_layout(&m, 3, sbh, "[None,dp,None] partial=tp");
    check_plan_text(&seq, &rep, "all_gather tensor_dim=0 device_dim=0 group=4 bytes=768\ntotal bytes=768 ops=1\n");
    /* Partial -> Shard(seq) after a row-parallel linear: 3/4 of the 1024-byte slice */
    check_plan_text(&part, &seq,
                    "reduce_scatter tensor_dim=0 device_dim=0 group=4 bytes=768\ntotal bytes=768 ops=1\n");
    {   /* Ulysses: Shard(seq) -> Shard(heads); slice 1*2*4*8*4 = 256 B */
        par_layout a = make_layout(&m, 4, bshd, "[dp,tp,None,None]"), b = make_layout(&m, 4, bshd, "[dp,None,tp,None]");
        check_plan_text(&a, &b, "all_to_all tensor_dim=1 to_dim=2 device_dim=0 group=4 bytes=192\ntotal bytes=192 ops=1\n");
    }
    {   /* with dp free instead, the optimum borrows it: split by dp, reduce-scatter the
           half-size slice (3/4 of 1024 B), all_gather dp back (256 B) beats 1536 B */
        par_layout p2 = make_layout(&m, 3, sbh, "[None,None,None] partial=tp"), s2 = make_layout(&m, 3, sbh, "[tp,None,None]");
        CHECK_OK(par_plan_redistribution(&p2, &s2, NULL, &plan));
        CHECK_INT(plan.total_bytes, 1024);
        CHECK_INT(plan.num_ops, 3);
        CHECK(simulate_ok(&plan));
    }
    {   /* data-parallel output feeding a model-parallel matmul input: all_gather over dp */
        int64_t xw[2] = {8, 16};
        par_layout out = make_layout(&m, 2, xw, "[dp,tp]"), in = make_layout(&m, 2, xw, "[None,tp]");
        check_plan_text(&out, &in, "all_gather tensor_dim=0 device_dim=1 group=2 bytes=64\ntotal bytes=64 ops=1\n");
    }
    {   /* column-split output feeding a row-split input: all_to_all */
        int64_t xw[2] = {8, 16};
        par_layout out = make_layout(&m, 2, xw, "[None,tp]"), in = make_layout(&m, 2, xw, "[tp,None]");
        check_plan_text(&out, &in, "all_to_all tensor_dim=1 to_dim=0 device_dim=0 group=4 bytes=96\ntotal bytes=96 ops=1\n");
    }
    {   /* a local reshape: [B,S,H*D] split on H*D -> [B,S,H,D] split on H */
        par_layout a = make_layout(&m, 3, bsh, "[None,None,tp]"), b = make_layout(&m, 4, bshd, "[None,None,tp,None]");
        check_plan_text(&a, &b, "reshape group=1 bytes=0\ntotal bytes=0 ops=1\n");
        CHECK_OK(par_plan_redistribution(&a, &b, NULL, &plan));
        CHECK_INT(plan.ops[0].on_to_shape, 1);
    }
    {   /* size-1 device dims split nothing: layouts differing only in them need no op */
        par_mesh m41 = make_mesh("4,1");
        int64_t s[2] = {8, 8};
        par_layout a = make_layout(&m41, 2, s, "[1,-1] partial=0"), b = make_layout(&m41, 2, s, "[(1,0),-1]");
        check_plan_text(&a, &b, "total bytes=0 ops=0\n");
    }
    {   /* elem_size scales bytes: bf16 halves the all_gather */
        par_cost_model cm;
        memset(&cm, 0, sizeof cm);
        cm.elem_size = 2;
        CHECK_OK(par_plan_redistribution(&seq, &rep, &cm, &plan));
        CHECK_INT(plan.total_bytes, 384);
    }
}

/* The greedy baseline breaks the [0,1] -> [1,0] cycle with a forced all_gather,
   as MindSpore does (32 bytes). On the tensor's own shape that is also the
   optimum; on the unified shape [2,2,2,2] ([0,-1,1,-1] -> [1,-1,0,-1]) three
   all_to_alls of 8 bytes each do it for 24. With partial sources the optimum
   is strictly cheaper too. */
static void test_greedy_cycle(void) {
    par_mesh m = make_mesh("2,2");
    int64_t shape[2] = {4, 4}; /* 64 bytes; a 2x2-split slice is 16 bytes */
    par_layout a = make_layout(&m, 2, shape, "[0,1]"), b = make_layout(&m, 2, shape, "[1,0]");
    par_plan greedy, best;
    CHECK_OK(par_plan_greedy(&a, &b, NULL, &greedy));
    /* MindSpore's loop (same shape, one device dim per dim: no expansion):
       nothing splits, permutes or concats, so the round gathers the first
       pending dim (0); then dim 0 is free and dim 1 holds the device dim it
       wants: an all_to_all; then dim 1 splits locally */
    CHECK_STR(plan_text(&greedy), "all_gather tensor_dim=0 device_dim=0 group=2 bytes=16\n"
                                  "all_to_all tensor_dim=1 to_dim=0 device_dim=1 group=2 bytes=16\n"
                                  "split tensor_dim=1 device_dim=0 group=2 bytes=0\n"
                                  "total bytes=32 ops=3\n");
    CHECK_INT(greedy.greedy, 1);
    CHECK(simulate_ok(&greedy));
    CHECK_OK(par_plan_redistribution(&a, &b, NULL, &best));
    CHECK_INT(best.total_bytes, 24);
    CHECK_INT(best.unified_ndim, 4);
    CHECK(simulate_ok(&best));
    {   /* partial source: greedy all-reduces first, the optimum reduce-scatters */
        par_layout p = make_layout(&m, 2, shape, "[-1,-1] partial=(1,0)"), t = make_layout(&m, 2, shape, "[0,1]");
        CHECK_OK(par_plan_greedy(&p, &t, NULL, &greedy));
        CHECK_OK(par_plan_redistribution(&p, &t, NULL, &best));
        CHECK_INT(first_collective(&greedy), PAR_REDIST_ALL_REDUCE);
        CHECK_INT(first_collective(&best), PAR_REDIST_REDUCE_SCATTER);
        CHECK(best.cost < greedy.cost);
        CHECK(simulate_ok(&greedy) && simulate_ok(&best));
    }
}

/* Issue 14's two cases, from MindSpore's own unit tests: collectives on the
   unified shape beat every plan on the tensor's own shape. */
static void test_unified_cases(void) {
    par_mesh m3 = make_mesh("2,4,4"), m2 = make_mesh("8,4");
    int64_t shape[2] = {512, 1024}, wide[2] = {128, 4096};
    par_plan plan, own;
    par_cost_model no_a2a;
    /* 512x1024 f32 on 32 ranks: 64 KiB slices. 1024 = 4 (dim 1) x 4 (dim 0) x 64
       in the target; two all_to_alls of 3/4 x 64 KiB: 98,304 bytes. */
    par_layout a = make_layout(&m3, 2, shape, "[(2,1),0]"), b = make_layout(&m3, 2, shape, "[2,(1,0)]");
    par_layout c = make_layout(&m2, 2, shape, "[1,0]"), d = make_layout(&m2, 2, wide, "[1,0]");
    CHECK_OK(par_plan_redistribution(&a, &b, NULL, &plan));
    CHECK_INT(plan.total_bytes, 98304);
    CHECK_INT(plan.unified_ndim, 6);
    CHECK_STR(plan_text(&plan), "reshape group=1 bytes=0\n"
                                "all_to_all tensor_dim=3 to_dim=4 device_dim=0 group=4 bytes=49152\n"
                                "all_to_all tensor_dim=1 to_dim=3 device_dim=1 group=4 bytes=49152\n"
                                "reshape group=1 bytes=0\n"
                                "total bytes=98304 ops=4\n");
    CHECK(simulate_ok(&plan));
    /* the same request seen only on its own shape costs 393,216 bytes (the old
       planner's answer): the unified view is what wins */
    {
        par_layout here;
        CHECK_OK(par_plan_layout_after(&plan, 0, &here));
        CHECK_INT(here.ndim, 6);
        CHECK_INT(here.shape[0] * here.shape[1] * here.shape[2], 512);
    }
    /* a reshape redistribution: 512x1024 -> 128x4096, one all_to_all on the
       common shape [8,16,4,4,256] moves 3/4 of a 64 KiB slice */
    CHECK_OK(par_plan_redistribution(&c, &d, NULL, &plan));
    CHECK_INT(plan.total_bytes, 49152);
    CHECK(simulate_ok(&plan));
    /* without all_to_all the unified view still helps: gather dim 0's split
       on the sub-dim, split the other */
    memset(&no_a2a, 0, sizeof no_a2a);
    no_a2a.no_all_to_all = 1;
    CHECK_OK(par_plan_redistribution(&c, &d, &no_a2a, &own));
    CHECK(own.total_bytes >= plan.total_bytes);
    CHECK(simulate_ok(&own));
}

/* ---- MindSpore's own unit tests (tests/ut/cpp/parallel/tensor_layout/) ---
   Ported expectations. MindSpore lets the two layouts of a redistribution use
   different device arrangements ([8,4] and [2,16]); here both live on one mesh,
   MindSpore's unified device arrangement, and a device dim of an arrangement
   that the unified one splits becomes a tuple of mesh dims ([8,4] on mesh
   2,4,4: the 8 is (2,1), the 4 is 0). Device dims count from the right, as in
   MindSpore. For every case: our plans for both enable_alltoall settings are
   correct on the simulator and move no more bytes than MindSpore's algorithm
   (par_plan_greedy) with the same setting. */

static int plan_consistent(const par_plan *plan, const par_cost_model *cm); /* below, with the property test */

typedef struct ms_case {
    const char *source;  /* "file: test" */
    const char *mesh;    /* the unified device arrangement */
    int ndim, to_ndim;
    int64_t shape[MAXD], to_shape[MAXD];
    const char *from, *to;
    /* MindSpore's expected unified tensor shape and maps (0 dims: none given) */
    int u_ndim;
    int64_t u_shape[MAXD];
    int u_from[MAXD], u_to[MAXD];
    /* MindSpore's expected operator names with enable_alltoall off, in our op
       kinds (AllGather + Split + Concat is one all_gather; StridedSlice a split);
       NULL: none given */
    const char *ops_off;
} ms_case;

static const ms_case ms_cases[] = {
    {"redistribution_layout_transfer_test.cc: RedistributionLayoutTransfer1 (in [8,4] [1,0], out [2,16] [1,0])",
     "2,4,4", 2, 2, {512, 1024}, {512, 1024}, "[(2,1),0]", "[2,(1,0)]",
     4, {2, 256, 4, 256}, {2, 1, 0, -1}, {2, -1, 1, 0}, NULL},
    {"redistribution_layout_transfer_test.cc: RedistributionLayoutTransfer2 (in [8,4] [1,0], out [2,16] [0,1])",
     "2,2,2,4", 2, 2, {512, 1024}, {512, 1024}, "[(3,2,1),0]", "[(2,1,0),3]",
     4, {2, 2, 128, 1024}, {3, 2, 1, 0}, {2, 1, 0, 3}, NULL},
    {"redistribution_layout_transfer_test.cc: RedistributionLayoutTransfer3 (in [8] [0,-1], out [2,2,2] [2,1])",
     "2,2,2", 2, 2, {512, 1024}, {512, 1024}, "[(2,1,0),-1]", "[2,1]",
     4, {2, 2, 128, 1024}, {2, 1, 0, -1}, {2, -1, -1, 1}, NULL},
    {"redistribution_layout_transfer_test.cc: RedistributionLayoutTransfer4 (in [16,1,1] [2,0], out [1,16,1] [2,1])",
     "16", 2, 2, {512, 1024}, {512, 1024}, "[0,-1]", "[-1,0]",
     2, {512, 1024}, {0, -1}, {-1, 0}, NULL},
    {"redistribution_layout_transfer_test.cc: RedistributionLayoutTransfer5", "16", 2, 2, {512, 1024}, {512, 1024},
     "[0,-1]", "[-1,0]", 2, {512, 1024}, {0, -1}, {-1, 0}, NULL},
    {"reshape_layout_transfer_test.cc: InferUnifiedLayout1", "8,4", 2, 2, {512, 1024}, {128, 4096}, "[1,0]", "[1,0]",
     3, {128, 4, 1024}, {1, -1, 0}, {1, 0, -1}, NULL},
    {"reshape_layout_transfer_test.cc: InferUnifiedLayout2 (arrangement [8,4] unified to [4,2,4])", "4,2,4", 2, 2,
     {512, 1024}, {128, 4096}, "[(2,1),0]", "[0,(2,1)]", 4, {4, 32, 4, 1024}, {2, 1, -1, 0}, {0, -1, 2, 1}, NULL},
    {"reshape_layout_transfer_test.cc: ValidInferUnifiedLayoutCheck1", "8,4", 2, 2, {512, 1024}, {128, 4096}, "[1,0]",
     "[0,1]", 0, {0}, {0}, {0}, NULL},
    {"reshape_layout_transfer_test.cc: ValidInferUnifiedLayoutCheck2", "8,4", 2, 2, {512, 1024}, {128, 4096}, "[1,-1]",
     "[0,-1]", 0, {0}, {0}, {0}, NULL},
    {"reshape_layout_transfer_test.cc: ValidInferUnifiedLayoutCheck3", "2", 2, 2, {4, 2}, {2, 4}, "[-1,-1]", "[-1,-1]",
     0, {0}, {0}, {0}, NULL},
    {"reshape_layout_transfer_test.cc: ValidInferUnifiedLayoutCheck4", "4,8", 3, 3, {8, 2, 2}, {2, 2, 8}, "[-1,-1,-1]",
     "[-1,-1,0]", 0, {0}, {0}, {0}, NULL},
    {"reshape_layout_transfer_test.cc: ValidInferUnifiedLayoutCheck5", "2,2", 2, 2, {2, 2}, {2, 2}, "[0,-1]", "[0,-1]",
     0, {0}, {0}, {0}, NULL},
    {"reshape_layout_transfer_test.cc: ValidInferUnifiedLayoutCheck6", "2,2", 2, 2, {2, 8}, {2, 8}, "[0,1]", "[0,1]",
     0, {0}, {0}, {0}, NULL},
    {"reshape_layout_transfer_test.cc: ValidInferUnifiedLayoutCheck7", "2,4,4", 3, 3, {2, 4, 4}, {2, 2, 8},
     "[-1,0,-1]", "[-1,-1,0]", 0, {0}, {0}, {0}, NULL},
    {"reshape_layout_transfer_test.cc: ValidInferUnifiedLayoutCheck8", "4,2,4", 3, 3, {4, 4, 2}, {2, 4, 4}, "[2,0,1]",
     "[-1,-1,-1]", 0, {0}, {0}, {0}, NULL},
    {"reshape_layout_transfer_test.cc: ValidInferUnifiedLayoutCheck9", "2,2,2", 4, 2, {2, 2, 128, 1024}, {512, 1024},
     "[2,1,0,-1]", "[2,1]", 0, {0}, {0}, {0}, NULL},
    {"reshape_layout_transfer_test.cc: ValidInferUnifiedLayoutCheck10", "2,2,2", 4, 2, {2, 2, 2, 2}, {8, 2},
     "[2,1,0,-1]", "[2,1]", 0, {0}, {0}, {0}, NULL},
    {"reshape_layout_transfer_test.cc: ValidInferUnifiedLayoutCheck11", "2", 2, 1, {2, 2}, {4}, "[0,-1]", "[0]", 0,
     {0}, {0}, {0}, NULL},
    {"tensor_redistribution_test.cc: TestInferRedistribution1 (in [2,4,2] [2,0], out [4,2,2] [2,1])", "2,2,2,2", 2, 2,
     {512, 1024}, {512, 1024}, "[3,0]", "[(3,2),1]", 0, {0}, {0}, {0}, "reshape split all_gather split reshape"},
    {"tensor_redistribution_test.cc: TestInferRedistribution2 (in [16,1,1] [2,0], out [1,16,1] [2,1])", "16", 2, 2,
     {512, 1024}, {512, 1024}, "[0,-1]", "[-1,0]", 0, {0}, {0}, {0}, "all_gather split"},
    {"tensor_redistribution_test.cc: TestInferRedistribution3", "8", 4, 2, {128, 64, 1, 1}, {128, 64}, "[0,-1,-1,-1]",
     "[0,-1]", 0, {0}, {0}, {0}, "reshape"},
};

static void plan_kinds(const par_plan *plan, char *buf, size_t size) {
    size_t len = 0;
    int i;
    buf[0] = 0;
    for (i = 0; i < plan->num_ops && len < size; i++)
        len += (size_t)snprintf(buf + len, size - len, "%s%s", i ? " " : "", par_redist_kind_name(plan->ops[i].kind));
}

static void ms_check_case(const ms_case *c) {
    par_mesh m = make_mesh(c->mesh);
    par_layout from = make_layout(&m, c->ndim, c->shape, c->from), to = make_layout(&m, c->to_ndim, c->to_shape, c->to);
    int setting;
    if (c->u_ndim) { /* MindSpore's unified layouts are local views of ours: same slices on every rank */
        par_layout uf, ut, want_f, want_t;
        CHECK_OK(par_layout_init(&want_f, &m, c->u_ndim, c->u_shape, c->u_from, 0));
        CHECK_OK(par_layout_init(&want_t, &m, c->u_ndim, c->u_shape, c->u_to, 0));
        CHECK_MSG(par_layout_reshape(&from, c->u_ndim, c->u_shape, &uf) == PAR_OK && par_layout_equal(&uf, &want_f),
                  "%s: the source does not view as MindSpore's unified source", c->source);
        CHECK_MSG(par_layout_reshape(&to, c->u_ndim, c->u_shape, &ut) == PAR_OK && par_layout_equal(&ut, &want_t),
                  "%s: the target does not view as MindSpore's unified target", c->source);
        for (setting = 0; setting < 2; setting++) { /* MindSpore's loop on its own unified layout */
            par_cost_model cm;
            par_plan ms, best;
            memset(&cm, 0, sizeof cm);
            cm.no_all_to_all = setting;
            CHECK_OK(par_plan_greedy(&want_f, &want_t, &cm, &ms));
            CHECK_OK(par_plan_redistribution(&from, &to, &cm, &best));
            CHECK_MSG(best.total_bytes <= ms.total_bytes, "%s, enable_alltoall %s: ours %lld bytes, MindSpore's %lld",
                      c->source, setting ? "off" : "on", (long long)best.total_bytes, (long long)ms.total_bytes);
        }
    }
    for (setting = 0; setting < 2; setting++) {
        par_cost_model cm;
        par_plan best, greedy;
        char kinds[512];
        memset(&cm, 0, sizeof cm);
        cm.no_all_to_all = setting;
        CHECK_OK(par_plan_redistribution(&from, &to, &cm, &best));
        CHECK_OK(par_plan_greedy(&from, &to, &cm, &greedy));
        CHECK_MSG(simulate_ok(&best) && simulate_ok(&greedy), "%s: a plan simulates wrong: %s", c->source,
                  par_last_error());
        CHECK_MSG(plan_consistent(&best, &cm) && plan_consistent(&greedy, &cm), "%s: a plan is inconsistent", c->source);
        CHECK_MSG(best.total_bytes <= greedy.total_bytes, "%s, enable_alltoall %s: ours %lld bytes, MindSpore's %lld",
                  c->source, setting ? "off" : "on", (long long)best.total_bytes, (long long)greedy.total_bytes);
        if (setting == 1 && c->ops_off) {
            plan_kinds(&greedy, kinds, sizeof kinds);
            CHECK_MSG(strcmp(kinds, c->ops_off) == 0, "%s: MindSpore's ops are \"%s\", ours \"%s\"", c->source,
                      c->ops_off, kinds);
        }
    }
}

/* redistribution_operator_infer_test.cc: TestInferOperatorAll. Every pair of
   valid tensor maps of a [2,2,2] tensor on device matrix [2,2,2]: the operator
   list must turn one into the other (here: simulated on real values), for both
   enable_alltoall settings; and our optimum is never dearer. */
static void test_mindspore_infer_all(void) {
    par_mesh m = make_mesh("2,2,2");
    int64_t shape[3] = {2, 2, 2};
    int maps[64][3], count = 0, a, b, c, i, j, setting, cheaper = 0;
    for (a = -1; a < 3; a++)
        for (b = -1; b < 3; b++)
            for (c = -1; c < 3; c++)
                if ((a < 0 || (a != b && a != c)) && (b < 0 || b != c)) {
                    maps[count][0] = a, maps[count][1] = b, maps[count][2] = c;
                    count++;
                }
    CHECK_INT(count, 34);
    for (i = 0; i < count; i++)
        for (j = 0; j < count; j++) {
            par_layout from, to;
            if (i == j) continue;
            CHECK_OK(par_layout_init(&from, &m, 3, shape, maps[i], 0));
            CHECK_OK(par_layout_init(&to, &m, 3, shape, maps[j], 0));
            for (setting = 0; setting < 2; setting++) {
                par_cost_model cm;
                par_plan best, greedy;
                memset(&cm, 0, sizeof cm);
                cm.no_all_to_all = setting;
                if (par_plan_greedy(&from, &to, &cm, &greedy) != PAR_OK ||
                    par_plan_redistribution(&from, &to, &cm, &best) != PAR_OK) {
                    CHECK_MSG(0, "pair %d -> %d: %s", i, j, par_last_error());
                    continue;
                }
                if (!simulate_ok(&greedy) || !plan_consistent(&greedy, &cm) || best.total_bytes > greedy.total_bytes)
                    CHECK_MSG(0, "pair %d -> %d, enable_alltoall %s: greedy wrong or cheaper", i, j, setting ? "off" : "on");
                cheaper += best.total_bytes < greedy.total_bytes;
            }
        }
    printf("MindSpore TestInferOperatorAll: %d pairs x 2 settings, optimum strictly cheaper in %d\n", count * (count - 1),
           cheaper);
}

/* reshape_layout_transfer_test.cc: InferUnifiedLayout2 on MindSpore's own
   arrangement [8,4], not on the unified [4,2,4] the table above starts from
   (tests/ut/cpp/parallel/tensor_layout/reshape_layout_transfer_test.cc, commit
   19e45ccdb1bc5f210ee7b2a30f5630e8907ebcfd). 512 x 1024 [1,0] -> 128 x 4096
   [0,1]: MindSpore unifies to [4,32,4,1024] on [4,2,4], [2,1,-1,0] ->
   [0,-1,2,1], and its loop (redistribution_operator_infer.cc) permutes three
   times on 64 KiB slices (f32, 32 ranks): device dim 2 (4 ways) dim 0 -> 2,
   device dim 0 (4 ways) dim 3 -> 0, device dim 1 (2 ways) dim 1 -> 3:
   3/4 + 3/4 + 1/2 of 65,536 = 131,072 bytes per rank. par_plan_greedy must be
   that plan, on that unified layout; the optimum may only be cheaper. */
static void test_mindspore_reshape_arrangement(void) {
    static const int64_t want_shape[4] = {4, 32, 4, 1024};
    static const int want_mesh[3] = {4, 2, 4}, want_from[4] = {2, 1, -1, 0};
    const int64_t ms_bytes = 3 * 65536 / 4 + 3 * 65536 / 4 + 65536 / 2;
    par_mesh m = make_mesh("8,4"), um;
    int64_t shape[2] = {512, 1024}, wide[2] = {128, 4096};
    par_layout from = make_layout(&m, 2, shape, "[1,0]"), to = make_layout(&m, 2, wide, "[0,1]"), entered, want;
    par_plan best, greedy;
    char kinds[256];
    CHECK_INT(ms_bytes, 131072);
    CHECK_OK(par_plan_greedy(&from, &to, NULL, &greedy));
    CHECK_OK(par_plan_redistribution(&from, &to, NULL, &best));
    CHECK_MSG(simulate_ok(&greedy) && simulate_ok(&best), "InferUnifiedLayout2 on [8,4]: a plan simulates wrong: %s",
              par_last_error());
    CHECK(plan_consistent(&greedy, NULL) && plan_consistent(&best, NULL));
    CHECK_INT(greedy.total_bytes, ms_bytes);
    CHECK_MSG(best.total_bytes <= ms_bytes, "InferUnifiedLayout2 on [8,4]: optimum %lld bytes, MindSpore's %lld",
              (long long)best.total_bytes, (long long)ms_bytes);
    plan_kinds(&greedy, kinds, sizeof kinds);
    CHECK_STR(kinds, "reshape all_to_all all_to_all all_to_all reshape");
    /* the greedy walk ran on MindSpore's unified layout */
    CHECK_INT(greedy.unified_ndim, 4);
    CHECK(memcmp(greedy.unified_shape, want_shape, sizeof want_shape) == 0);
    CHECK_OK(par_mesh_init(&um, 3, want_mesh, NULL));
    CHECK(par__mesh_same_shape(&greedy.unified_mesh, &um));
    CHECK_OK(par_plan_layout_after(&greedy, 0, &entered));
    CHECK_OK(par_layout_init(&want, &um, 4, want_shape, want_from, 0));
    CHECK_MSG(par_layout_equal(&entered, &want), "InferUnifiedLayout2 on [8,4]: greedy did not enter MindSpore's "
              "unified source [2,1,-1,0] on [4,32,4,1024]");
    { /* enable_alltoall off (MindSpore's default): each permute is an AllGather
         of the 64 KiB slice, (n-1) x 65,536, then a local split */
        const int64_t ms_off = 3 * 65536 + 3 * 65536 + 65536;
        par_cost_model off;
        memset(&off, 0, sizeof off);
        off.no_all_to_all = 1;
        CHECK_OK(par_plan_greedy(&from, &to, &off, &greedy));
        CHECK_OK(par_plan_redistribution(&from, &to, &off, &best));
        CHECK(simulate_ok(&greedy) && simulate_ok(&best));
        CHECK_INT(greedy.total_bytes, ms_off);
        CHECK(best.total_bytes <= ms_off);
        plan_kinds(&greedy, kinds, sizeof kinds);
        CHECK_STR(kinds, "reshape all_gather split all_gather split all_gather split reshape");
    }
}

static void test_mindspore_cases(void) {
    size_t i;
    for (i = 0; i < sizeof ms_cases / sizeof ms_cases[0]; i++) ms_check_case(&ms_cases[i]);
    test_mindspore_reshape_arrangement();
    test_mindspore_infer_all();
}

/* ---- errors ------------------------------------------------------------- */

static void test_errors(void) {
    par_mesh m4 = make_mesh("4"), m22 = make_mesh("2,2");
    int64_t s16[2] = {16, 16}, s8[2] = {8, 8};
    par_layout a = make_layout(&m4, 2, s16, "[0,-1]"), rep = make_layout(&m4, 2, s16, "[-1,-1]");
    par_layout other_mesh = make_layout(&m22, 2, s16, "[1,-1]"), small = make_layout(&m4, 2, s8, "[0,-1]");
    par_layout part = make_layout(&m4, 2, s16, "[-1,-1] partial=0"), bad = a;
    par_plan plan;
    par_cost_model cm;
    par_redist_planner *pl = NULL;
    par_redist_planner_desc desc;
    CHECK_ERR(par_plan_redistribution(&a, &other_mesh, NULL, &plan), PAR_EINVAL, "one mesh");
    CHECK_ERR(par_plan_greedy(&a, &other_mesh, NULL, &plan), PAR_EINVAL, "one mesh");
    CHECK_ERR(par_plan_redistribution(&a, &small, NULL, &plan), PAR_ESHAPE, "element count");
    CHECK_ERR(par_plan_redistribution(&rep, &part, NULL, &plan), PAR_EUNSUPPORTED, "creates partial sums");
    CHECK_ERR(par_plan_greedy(&rep, &part, NULL, &plan), PAR_EUNSUPPORTED, "creates partial sums");
    bad.shape[0] = 15;
    CHECK_ERR(par_plan_redistribution(&bad, &a, NULL, &plan), PAR_ELAYOUT, "invalid source layout");
    CHECK_ERR(par_plan_redistribution(&a, &bad, NULL, &plan), PAR_ELAYOUT, "invalid target layout");
    CHECK_ERR(par_plan_redistribution(NULL, &a, NULL, &plan), PAR_EINVAL, "NULL");
    memset(&cm, 0, sizeof cm);
    cm.link[0].bandwidth = -1;
    CHECK_ERR(par_plan_redistribution(&a, &rep, &cm, &plan), PAR_EINVAL, "bandwidth");
    cm.link[0].bandwidth = 0;
    cm.link[0].latency = NAN;
    CHECK_ERR(par_plan_redistribution(&a, &rep, &cm, &plan), PAR_EINVAL, "latency");
    cm.link[0].latency = 0;
    cm.elem_size = -2;
    CHECK_ERR(par_plan_redistribution(&a, &rep, &cm, &plan), PAR_EINVAL, "elem_size");
    {   /* byte counts must fit in int64 */
        int64_t huge[1] = {(int64_t)1 << 40};
        par_layout h1 = make_layout(&m4, 1, huge, "[0]"), h2 = make_layout(&m4, 1, huge, "[-1]");
        cm.elem_size = 1 << 20;
        CHECK_ERR(par_plan_redistribution(&h1, &h2, &cm, &plan), PAR_EINVAL, "overflow");
        CHECK_ERR(par_plan_greedy(&h1, &h2, &cm, &plan), PAR_EINVAL, "overflow");
        cm.elem_size = 0;
    }
    memset(&desc, 0, sizeof desc);
    desc.max_states = 1;
    CHECK_OK(par_redist_planner_create(&desc, &pl));
    CHECK_ERR(par_redist_planner_plan(pl, &a, &rep, NULL, &plan), PAR_ECAPACITY, "max_states");
    par_redist_planner_destroy(pl);
    desc.max_states = -5;
    CHECK_ERR(par_redist_planner_create(&desc, &pl), PAR_EINVAL, "max_states");
    CHECK(pl == NULL);
    CHECK_OK(par_plan_redistribution(&a, &rep, NULL, &plan));
    CHECK_ERR(par_plan_layout_after(&plan, 1, &bad), PAR_EINVAL, "outside");
    CHECK_STR(par_redist_kind_name(PAR_REDIST_REDUCE_SCATTER), "reduce_scatter");
    CHECK_STR(par_redist_kind_name(PAR_REDIST_RESHAPE), "reshape");
    {   /* a reshape no local step can bridge when the target stays partial: gathering cannot help */
        int64_t s4[2] = {4, 64}, t4[2] = {64, 4};
        par_mesh m2 = make_mesh("2");
        par_layout p = make_layout(&m2, 2, s4, "[-1,-1] partial=0"), q = make_layout(&m2, 2, t4, "[-1,-1] partial=0");
        /* replicated + partial always reshapes, so this one succeeds with a single reshape */
        CHECK_OK(par_plan_redistribution(&p, &q, NULL, &plan));
        CHECK_STR(plan_text(&plan), "reshape group=1 bytes=0\ntotal bytes=0 ops=1\n");
    }
}

/* The simulator itself must catch wrong plans: a missed reduction, a doubled
   one, and a corrupted element. */
static void test_simulator_detects(void) {
    par_mesh m = make_mesh("4");
    int64_t shape[2] = {8, 4};
    par_layout part = make_layout(&m, 2, shape, "[-1,-1] partial=0"), rep = make_layout(&m, 2, shape, "[-1,-1]");
    par_plan plan, broken;
    sim_buffers b;
    CHECK_OK(par_plan_redistribution(&part, &rep, NULL, &plan));
    sim_alloc(&b, &part, plan.max_local_numel);
    broken = plan;
    broken.num_ops = 0; /* missed reduction */
    CHECK_OK(par_sim_scatter(&part, b.global, b.locals));
    CHECK_OK(par_sim_run(&broken, b.locals));
    CHECK(!par_sim_matches(&rep, b.global, b.locals));
    broken.num_ops = 2; /* doubled reduction */
    broken.ops[1] = broken.ops[0];
    CHECK_OK(par_sim_scatter(&part, b.global, b.locals));
    CHECK_OK(par_sim_run(&broken, b.locals));
    CHECK(!par_sim_matches(&rep, b.global, b.locals));
    CHECK_OK(par_sim_scatter(&part, b.global, b.locals));
    CHECK_OK(par_sim_run(&plan, b.locals));
    CHECK(par_sim_matches(&rep, b.global, b.locals));
    b.locals[3][5] += 1;
    CHECK(!par_sim_matches(&rep, b.global, b.locals));
    CHECK(strstr(par_last_error(), "rank 3") != NULL);
    CHECK(!par_sim_matches(&part, b.global, b.locals));
    CHECK(strstr(par_last_error(), "partial") != NULL);
    sim_free(&b);
}


/* ---- views: the same distribution on another shape or a factored mesh ------ */

static int64_t layout_numel(const par_layout *l) {
    int64_t n = 1;
    int t;
    for (t = 0; t < l->ndim; t++) n *= l->shape[t];
    return n;
}

/* Global flat index of every element of rank r's slice, in slice order. */
static void slice_indices(const par_layout *l, int r, int64_t *out) {
    int64_t local[MAXD], off[MAXD], n = par_layout_local_numel(l), i;
    par_layout_local_shape(l, local);
    par_layout_local_offset(l, r, off);
    for (i = 0; i < n; i++) {
        int64_t rest = i, index = 0, stride = 1;
        int t;
        for (t = l->ndim - 1; t >= 0; t--) {
            index += (off[t] + rest % local[t]) * stride;
            rest /= local[t];
            stride *= l->shape[t];
        }
        out[i] = index;
    }
}

/* 1 if a and b (same ranks, any shapes and meshes) give every rank the same
   elements in the same order, and the same partial groups: a local view. */
static int same_distribution(const par_layout *a, const par_layout *b) {
    static int64_t ia[1 << 19], ib[1 << 19];
    int ranks = par_mesh_size(&a->mesh), r, k;
    int64_t n = par_layout_local_numel(a);
    if (ranks != par_mesh_size(&b->mesh) || n != par_layout_local_numel(b) || n > (1 << 19) ||
        layout_numel(a) != layout_numel(b))
        return 0;
    for (r = 0; r < ranks; r++) {
        int ga[64], gb[64], na = 0, nb = 0;
        slice_indices(a, r, ia);
        slice_indices(b, r, ib);
        if (memcmp(ia, ib, sizeof(int64_t) * (size_t)n) != 0) return 0;
        par_mesh_group(&a->mesh, r, a->map.partial, ga, &na);
        par_mesh_group(&b->mesh, r, b->map.partial, gb, &nb);
        if (na != nb) return 0;
        for (k = 0; k < na; k++) /* both ascending by rank */
            if (ga[k] != gb[k]) return 0;
    }
    return 1;
}

/* Device dim of `mesh` that device dim u of its refinement `fine` belongs to. */
static int parent_dim(const par_mesh *mesh, const par_mesh *fine, int u) {
    int a, b = 0, target = fine->ndim - 1 - u;
    for (a = 0; a < mesh->ndim; a++) {
        int64_t prod = 1;
        do {
            if (b == target) return mesh->ndim - 1 - a;
            prod *= fine->dims[b++];
        } while (prod < mesh->dims[a] && b < fine->ndim);
    }
    return -1;
}

/* ---- the independent reference: uniform-cost search over all plans ------ */

typedef struct ref_state { /* zero-filled so states compare bytewise */
    int8_t on_target_shape;
    int8_t count[MAXD];
    int8_t dev[MAXD][MAXD];
    uint8_t partial;
} ref_state;

typedef struct ref_problem {
    const par_layout *from, *to;
    int size[MAXD]; /* per device dim */
    int reshape;
    double latency[MAXD], bandwidth[MAXD];
    int elem_size;
} ref_problem;

typedef struct ref_search {
    ref_state *states;
    double *dist;
    int *done;
    int n, cap;
    int *table;
    int *slot; /* table slot of each state, to reset the table cheaply */
    int table_size;
    int *heap; /* state indices; dist may only shrink while queued, so re-push */
    double *heap_key;
    int heap_len, heap_cap;
} ref_search;

static ref_state ref_from_layout(const par_layout *l, int on_target_shape) {
    ref_state s;
    int t, k, v;
    memset(&s, 0, sizeof s);
    s.on_target_shape = (int8_t)on_target_shape;
    for (t = 0; t < l->ndim; t++)
        for (k = 0; k < l->map.count[t]; k++)
            if (par_mesh_dev_size(&l->mesh, l->map.dev[t][k]) > 1) s.dev[t][s.count[t]++] = l->map.dev[t][k];
    for (v = 0; v < l->mesh.ndim; v++)
        if ((l->map.partial >> v & 1) && par_mesh_dev_size(&l->mesh, v) > 1) s.partial |= (uint8_t)(1u << v);
    return s;
}

static const par_layout *ref_shape_of(const ref_problem *p, const ref_state *s) {
    return s->on_target_shape ? p->to : p->from;
}

static uint32_t ref_hash(const ref_state *s) {
    const unsigned char *b = (const unsigned char *)s;
    uint32_t h = 2166136261u;
    size_t i;
    for (i = 0; i < sizeof *s; i++) h = (h ^ b[i]) * 16777619u;
    return h;
}

static int ref_find_or_add(ref_search *r, const ref_state *s) {
    uint32_t i = ref_hash(s) & (uint32_t)(r->table_size - 1);
    while (r->table[i] >= 0) {
        if (memcmp(&r->states[r->table[i]], s, sizeof *s) == 0) return r->table[i];
        i = (i + 1) & (uint32_t)(r->table_size - 1);
    }
    if (r->n == r->cap) return -1;
    r->states[r->n] = *s;
    r->dist[r->n] = HUGE_VAL;
    r->done[r->n] = 0;
    r->table[i] = r->n;
    r->slot[r->n] = (int)i;
    return r->n++;
}

static void ref_push(ref_search *r, int idx, double key) {
    int i = r->heap_len++;
    if (r->heap_len > r->heap_cap) {
        r->heap_cap *= 2;
        r->heap = (int *)realloc(r->heap, sizeof(int) * (size_t)r->heap_cap);
        r->heap_key = (double *)realloc(r->heap_key, sizeof(double) * (size_t)r->heap_cap);
    }
    while (i > 0 && r->heap_key[(i - 1) / 2] > key) {
        r->heap[i] = r->heap[(i - 1) / 2];
        r->heap_key[i] = r->heap_key[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    r->heap[i] = idx;
    r->heap_key[i] = key;
}

static int ref_pop(ref_search *r) {
    int top = r->heap[0], i = 0, last = r->heap[--r->heap_len];
    double key = r->heap_key[r->heap_len];
    for (;;) {
        int c = 2 * i + 1;
        if (c >= r->heap_len) break;
        if (c + 1 < r->heap_len && r->heap_key[c + 1] < r->heap_key[c]) c++;
        if (r->heap_key[c] >= key) break;
        r->heap[i] = r->heap[c];
        r->heap_key[i] = r->heap_key[c];
        i = c;
    }
    r->heap[i] = last;
    r->heap_key[i] = key;
    return top;
}

/* Bytes sent per rank, straight from the op definitions (B = local bytes before). */
static double ref_cost(const ref_problem *p, int v, int kind, int64_t local_bytes) {
    int n = p->size[v];
    int64_t bytes = kind == PAR_REDIST_ALL_GATHER ? (n - 1) * local_bytes
                    : kind == PAR_REDIST_ALL_REDUCE ? 2 * (n - 1) * local_bytes / n
                                                    : (n - 1) * local_bytes / n;
    return p->latency[v] + (double)bytes / p->bandwidth[v];
}

/* At most: each dim split into any tensor dim, or reduced in 1 + ndim ways;
   each tensor dim's minor-most gathered or moved; one reshape. */
#define REF_MAX_NEXT (3 * MAXD * (MAXD + 1) + 1)
typedef struct ref_neighbors {
    ref_state next[REF_MAX_NEXT];
    double cost[REF_MAX_NEXT];
    int n;
} ref_neighbors;

static void ref_add(ref_neighbors *nb, const ref_state *s, double cost) {
    nb->next[nb->n] = *s;
    nb->cost[nb->n++] = cost;
}

static void ref_successors(const ref_problem *p, const ref_state *s, ref_neighbors *nb) {
    const par_layout *shape = ref_shape_of(p, s);
    int64_t extent[MAXD], numel = 1, split = 1, local_bytes;
    uint32_t used = s->partial;
    int t, t2, k, v;
    nb->n = 0;
    for (t = 0; t < shape->ndim; t++) {
        extent[t] = shape->shape[t];
        numel *= shape->shape[t];
        for (k = 0; k < s->count[t]; k++) {
            extent[t] /= p->size[s->dev[t][k]];
            split *= p->size[s->dev[t][k]];
            used |= 1u << s->dev[t][k];
        }
    }
    local_bytes = numel / split * p->elem_size;
    for (v = 0; v < shape->mesh.ndim; v++) {
        int n = p->size[v];
        if (n == 1) continue;
        if (!(used >> v & 1)) { /* free: split any tensor dim that stays divisible */
            for (t = 0; t < shape->ndim; t++)
                if (extent[t] % n == 0) {
                    ref_state x = *s;
                    x.dev[t][x.count[t]++] = (int8_t)v;
                    ref_add(nb, &x, 0);
                }
        }
        if (s->partial >> v & 1) { /* reduce: all_reduce, or reduce_scatter onto a tensor dim */
            ref_state x = *s;
            x.partial &= (uint8_t)~(1u << v);
            ref_add(nb, &x, ref_cost(p, v, PAR_REDIST_ALL_REDUCE, local_bytes));
            for (t = 0; t < shape->ndim; t++)
                if (extent[t] % n == 0) {
                    ref_state y = x;
                    y.dev[t][y.count[t]++] = (int8_t)v;
                    ref_add(nb, &y, ref_cost(p, v, PAR_REDIST_REDUCE_SCATTER, local_bytes));
                }
        }
    }
    for (t = 0; t < shape->ndim; t++) { /* the minor-most split: gather it or move it */
        ref_state x = *s;
        int n;
        if (!s->count[t]) continue;
        v = x.dev[t][--x.count[t]];
        x.dev[t][x.count[t]] = 0;
        n = p->size[v];
        ref_add(nb, &x, ref_cost(p, v, PAR_REDIST_ALL_GATHER, local_bytes));
        for (t2 = 0; t2 < shape->ndim; t2++)
            if (t2 != t && extent[t2] % n == 0) {
                ref_state y = x;
                y.dev[t2][y.count[t2]++] = (int8_t)v;
                ref_add(nb, &y, ref_cost(p, v, PAR_REDIST_ALL_TO_ALL, local_bytes));
            }
    }
    if (p->reshape && !s->on_target_shape) { /* the library decides which reshapes are local */
        par_layout a, b;
        memset(&a, 0, sizeof a);
        a.mesh = shape->mesh;
        a.ndim = shape->ndim;
        memcpy(a.shape, shape->shape, sizeof a.shape);
        for (t = 0; t < shape->ndim; t++) {
            a.map.count[t] = (uint8_t)s->count[t];
            memcpy(a.map.dev[t], s->dev[t], MAXD);
        }
        a.map.partial = s->partial;
        if (par_layout_reshape(&a, p->to->ndim, p->to->shape, &b) == PAR_OK) {
            ref_state x = ref_from_layout(&b, 1);
            ref_add(nb, &x, 0);
        }
    }
}

/* Cheapest plan cost from p->from to p->to, or -1 if more than REF_CAP states.
   The buffers live for the whole run; only the table slots a search used are reset. */
#define REF_CAP 50000
static double ref_optimum(const ref_problem *p, int *states_seen) {
    static ref_search r;
    static ref_neighbors nb;
    ref_state start = ref_from_layout(p->from, 0), goal = ref_from_layout(p->to, p->reshape);
    double result = -2;
    int i, s;
    if (!r.states) {
        r.cap = REF_CAP;
        r.states = (ref_state *)malloc(sizeof(ref_state) * REF_CAP);
        r.dist = (double *)malloc(sizeof(double) * REF_CAP);
        r.done = (int *)malloc(sizeof(int) * REF_CAP);
        r.slot = (int *)malloc(sizeof(int) * REF_CAP);
        for (r.table_size = 1; r.table_size < 2 * REF_CAP; r.table_size *= 2) {}
        r.table = (int *)malloc(sizeof(int) * (size_t)r.table_size);
        for (i = 0; i < r.table_size; i++) r.table[i] = -1;
        r.heap_cap = 1024;
        r.heap = (int *)malloc(sizeof(int) * (size_t)r.heap_cap);
        r.heap_key = (double *)malloc(sizeof(double) * (size_t)r.heap_cap);
    }
    r.n = 0;
    r.heap_len = 0;
    s = ref_find_or_add(&r, &start);
    r.dist[s] = 0;
    ref_push(&r, s, 0);
    while (r.heap_len > 0 && result == -2) {
        int u = ref_pop(&r);
        if (r.done[u]) continue;
        r.done[u] = 1;
        if (memcmp(&r.states[u], &goal, sizeof goal) == 0) {
            result = r.dist[u];
            break;
        }
        ref_successors(p, &r.states[u], &nb);
        for (i = 0; i < nb.n; i++) {
            int x = ref_find_or_add(&r, &nb.next[i]);
            if (x < 0) {
                result = -1;
                break;
            }
            if (r.dist[u] + nb.cost[i] < r.dist[x]) {
                r.dist[x] = r.dist[u] + nb.cost[i];
                ref_push(&r, x, r.dist[x]);
            }
        }
    }
    *states_seen = r.n;
    for (i = 0; i < r.n; i++) r.table[r.slot[i]] = -1;
    return result;
}

/* The extended move set (issue 14, MindSpore's unified layout): the same moves
   on the tensor viewed with every dim cut at each dim and shard boundary of
   either layout. Written here from that definition: a cut is a flat-index
   stride (elements per step of a dim or of a shard); the unified shape is the
   chain of cuts, largest first, and exists only when each cut divides the one
   above it. The library's par_layout_reshape decides, as above, whether a layout
   views onto it locally. 0 when there is no unified view or it adds nothing. */
static int ref_cuts(const par_layout *l, int fine, int64_t *cuts, int n) {
    int64_t numel = 1, after;
    int t, k;
    for (t = 0; t < l->ndim; t++) numel *= l->shape[t];
    after = numel;
    cuts[n++] = numel;
    for (t = 0; t < l->ndim; t++) { /* outer to inner: a dim of extent S with A elements above it */
        int64_t piece = after;
        /* fine: every shard boundary; coarse (MindSpore's): all but the minor-most split's */
        for (k = 0; k < l->map.count[t] - (fine ? 0 : 1); k++)
            cuts[n++] = piece /= par_mesh_dev_size(&l->mesh, l->map.dev[t][k]);
        after /= l->shape[t];
        cuts[n++] = after;
    }
    return n;
}

/* When a cut falls inside a device dim's shard range, that mesh axis is
   factored (MindSpore unifies device arrangements): the cut at c inside v's
   range [pos/n, pos) asks for v's major part to be pos/c ways. Every axis's
   asked-for parts, with its size, must form a divisibility chain; the axis then
   becomes its consecutive ratios, major first. The layouts are rebuilt on the
   unified shape, each factor splitting the unified dim at its position, and
   must give every rank the same elements as the originals. */
typedef struct ref_factoring {
    int64_t points[MAXD][2 * MAXD];
    int npoints[MAXD];
    int sub[MAXD][MAXD], nsub[MAXD]; /* device dims of the factored mesh, major first */
    int64_t size[MAXD][MAXD];
} ref_factoring;

static int ref_points(const par_layout *l, const int64_t *cut, int ncut, ref_factoring *f) {
    int64_t after = layout_numel(l);
    int t, k, c;
    for (t = 0; t < l->ndim; t++) {
        int64_t pos = after;
        for (k = 0; k < l->map.count[t]; k++) {
            int v = l->map.dev[t][k];
            int64_t n = par_mesh_dev_size(&l->mesh, v), lo = pos / n;
            for (c = 0; c < ncut; c++)
                if (cut[c] > lo && cut[c] < pos) {
                    if (pos % cut[c] || n % (pos / cut[c]) || f->npoints[v] == 2 * MAXD) return 0;
                    f->points[v][f->npoints[v]++] = pos / cut[c];
                }
            pos = lo;
        }
        after /= l->shape[t];
    }
    return 1;
}

static int ref_rebuild(const par_layout *l, const par_mesh *fine, const int64_t *cut, int ndim, const int64_t *shape,
                       const ref_factoring *f, par_layout *out) {
    int64_t after = layout_numel(l);
    int t, k, j, v;
    memset(out, 0, sizeof *out);
    out->mesh = *fine;
    out->ndim = ndim;
    memcpy(out->shape, shape, sizeof(int64_t) * (size_t)ndim);
    for (t = 0; t < l->ndim; t++) {
        int64_t pos = after;
        for (k = 0; k < l->map.count[t]; k++)
            for (v = l->map.dev[t][k], j = 0; j < f->nsub[v] && par_mesh_dev_size(&l->mesh, v) > 1; j++) {
                int u;
                for (u = 0; u < ndim && !(cut[u] >= pos && cut[u + 1] < pos); u++) {}
                if (u == ndim || (out->map.count[u] == 0 && cut[u] != pos)) return 0;
                out->map.dev[u][out->map.count[u]++] = (int8_t)f->sub[v][j];
                pos /= f->size[v][j];
            }
        after /= l->shape[t];
    }
    for (v = 0; v < l->mesh.ndim; v++)
        if (l->map.partial >> v & 1u)
            for (j = 0; j < f->nsub[v]; j++) out->map.partial |= 1u << f->sub[v][j];
    return par_layout_check(out) == PAR_OK;
}

static int ref_factored(const par_layout *from, const par_layout *to, int ndim, const int64_t *shape,
                        par_layout *ufrom, par_layout *uto) {
    ref_factoring f;
    par_mesh fine;
    int64_t cut[MAXD + 1];
    int dims[MAXD], nd = 0, a, i, j, v;
    memset(&f, 0, sizeof f);
    for (cut[ndim] = 1, i = ndim - 1; i >= 0; i--) cut[i] = cut[i + 1] * shape[i];
    if (!ref_points(from, cut, ndim + 1, &f) || !ref_points(to, cut, ndim + 1, &f)) return 0;
    for (a = 0; a < from->mesh.ndim; a++) {
        int64_t n = from->mesh.dims[a], prev = 1;
        v = from->mesh.ndim - 1 - a;
        f.points[v][f.npoints[v]++] = n;
        for (;;) { /* the smallest point above prev: the next factor boundary */
            int64_t next = 0;
            for (j = 0; j < f.npoints[v]; j++)
                if (f.points[v][j] > prev && (next == 0 || f.points[v][j] < next)) next = f.points[v][j];
            if (next == 0) break;
            if (next % prev || nd == MAXD) return 0;
            f.size[v][f.nsub[v]] = next / prev;
            f.sub[v][f.nsub[v]++] = nd;
            dims[nd++] = (int)(next / prev);
            prev = next;
        }
        if (n == 1) { /* a size-1 axis stays */
            if (nd == MAXD) return 0;
            f.size[v][f.nsub[v]] = 1;
            f.sub[v][f.nsub[v]++] = nd;
            dims[nd++] = 1;
        }
    }
    for (v = 0; v < from->mesh.ndim; v++)
        for (j = 0; j < f.nsub[v]; j++) f.sub[v][j] = nd - 1 - f.sub[v][j]; /* axis index -> device dim */
    if (par_mesh_init(&fine, nd, dims, NULL) != PAR_OK) return 0;
    if (!ref_rebuild(from, &fine, cut, ndim, shape, &f, ufrom) || !ref_rebuild(to, &fine, cut, ndim, shape, &f, uto))
        return 0;
    CHECK_MSG(same_distribution(from, ufrom) && same_distribution(to, uto), "reference: a factored view is wrong");
    return 1;
}

static int ref_unified(const par_layout *from, const par_layout *to, int fine, par_layout *ufrom, par_layout *uto) {
    int64_t cuts[4 * MAXD * (MAXD + 2)], shape[MAXD], cur;
    int n = ref_cuts(to, fine, cuts, ref_cuts(from, fine, cuts, 0)), ndim = 0, i;
    cur = cuts[0];
    for (;;) { /* the next cut: the largest one below cur */
        int64_t next = 0;
        for (i = 0; i < n; i++)
            if (cuts[i] < cur && cuts[i] > next) next = cuts[i];
        if (next == 0) break;
        if (cur % next || ndim == MAXD) return 0;
        shape[ndim++] = cur / next;
        cur = next;
    }
    if (ndim == 0) return 0;
    if (par_layout_reshape(from, ndim, shape, ufrom) != PAR_OK || par_layout_reshape(to, ndim, shape, uto) != PAR_OK)
        return ref_factored(from, to, ndim, shape, ufrom, uto);
    if (ndim == from->ndim && ndim == to->ndim && !memcmp(shape, from->shape, sizeof(int64_t) * (size_t)ndim) &&
        !memcmp(shape, to->shape, sizeof(int64_t) * (size_t)ndim))
        return 0;
    return 1;
}

/* MindSpore does not stop at one round: once an axis is factored (8 -> 4 x 2),
   a dim split by both parts is cut between them too, and so on until the two
   layouts agree (ReshapeLayoutTransfer::UnifyDeviceArrangementAndTensorShape,
   mindspore/ccsrc/frontend/parallel/tensor_layout/reshape_layout_transfer.cc,
   commit a5e8c1eab3df81163e77a796a6a2d6fca01e1307).
   Here: ref_unified on its own result until it adds nothing. A round that
   fails leaves the last view. */
static int ref_settled(const par_layout *from, const par_layout *to, int fine, par_layout *ufrom, par_layout *uto) {
    par_layout a, b;
    int round;
    if (!ref_unified(from, to, fine, ufrom, uto)) return 0;
    for (round = 0; round < 2 * MAXD && ref_unified(ufrom, uto, fine, &a, &b); round++) {
        if (a.ndim == ufrom->ndim && !memcmp(a.shape, ufrom->shape, sizeof(int64_t) * (size_t)a.ndim) &&
            a.mesh.ndim == ufrom->mesh.ndim && !memcmp(a.mesh.dims, ufrom->mesh.dims, sizeof(int) * (size_t)a.mesh.ndim))
            break;
        *ufrom = a;
        *uto = b;
    }
    return 1;
}

/* The optimum over the extended move set: plans on the tensor's own shapes
   (one reshape), or plans on the fine or the coarse unified shape, after one
   round or settled (entered and left by local reshapes, which are free). -1
   if a search gave up. */
static double ref_optimum_extended(const ref_problem *p, int *states_seen) {
    double best = ref_optimum(p, states_seen);
    int view;
    for (view = 0; view < 4 && best >= 0; view++) {
        par_layout uf, ut;
        ref_problem u = *p;
        double unified;
        int seen = 0, fine = view & 1;
        int w;
        if (!(view < 2 ? ref_unified : ref_settled)(p->from, p->to, fine, &uf, &ut)) continue;
        u.from = &uf;
        u.to = &ut;
        u.reshape = 0;
        for (w = 0; w < uf.mesh.ndim; w++) { /* a factor of an axis keeps the axis's link */
            int v = parent_dim(&p->from->mesh, &uf.mesh, w);
            u.size[w] = par_mesh_dev_size(&uf.mesh, w);
            u.latency[w] = p->latency[v];
            u.bandwidth[w] = p->bandwidth[v];
        }
        unified = ref_optimum(&u, &seen);
        if (seen > *states_seen) *states_seen = seen;
        if (unified < 0) return -1;
        if (unified < best) best = unified;
    }
    return best;
}

/* ---- random cases ------------------------------------------------------- */

/* Mostly 1-4 dims and up to 16 devices; one mesh in five up to 6 dims and 64
   devices, where the exhaustive reference may give up. */
static void random_mesh(par_mesh *m) {
    static const int sizes[] = {1, 2, 2, 3, 4};
    int large = rnd_below(5) == 0, max_ndim = large ? 6 : 4, max_devices = large ? 64 : 16;
    int dims[MAXD], ndim, i, total;
    do {
        ndim = 1 + rnd_below(max_ndim);
        total = 1;
        for (i = 0; i < ndim; i++) total *= dims[i] = sizes[rnd_below(5)];
    } while (total > max_devices || total < 2);
    par_mesh_init(m, ndim, dims, NULL);
}

static void random_shape(int ndim, int64_t *shape, int64_t max_numel) {
    static const int64_t sizes[] = {1, 2, 3, 4, 6, 8, 12, 16, 24};
    int64_t numel;
    int t;
    do {
        numel = 1;
        for (t = 0; t < ndim; t++) numel *= shape[t] = sizes[rnd_below(9)];
    } while (numel > max_numel);
}

/* A different shape with the same element count: merge two neighbours, or
   split one dim into two factors. */
static int reshape_of(int ndim, const int64_t *shape, int64_t *out) {
    int t = rnd_below(ndim), i, n = 0;
    if (ndim >= 2 && (ndim == MAXD || rnd_below(2) == 0)) {
        if (t == ndim - 1) t--;
        for (i = 0; i < ndim; i++) {
            if (i == t + 1) continue;
            out[n++] = i == t ? shape[t] * shape[t + 1] : shape[i];
        }
        return n;
    }
    for (i = 0; i < ndim; i++) {
        if (i == t) {
            int64_t f = shape[t] % 2 == 0 ? 2 : shape[t] % 3 == 0 ? 3 : 1;
            out[n++] = f;
            out[n++] = shape[t] / f;
        } else {
            out[n++] = shape[i];
        }
    }
    return n;
}

/* Random latencies and bandwidths; one model in three is latency-heavy with
   slow links, where a bound that overestimates latency shows at once. */
static void random_cost_model(par_cost_model *cm, const par_mesh *m) {
    int v, latency_heavy = rnd_below(3) == 0;
    memset(cm, 0, sizeof *cm);
    for (v = 0; v < m->ndim; v++) {
        if (latency_heavy) {
            cm->link[v].latency = 100 * (1 + rnd_below(20));
            cm->link[v].bandwidth = 0.05 * (1 + rnd_below(20));
            continue;
        }
        if (rnd_below(2)) cm->link[v].latency = rnd_below(200);
        if (rnd_below(2)) cm->link[v].bandwidth = 0.25 * (1 + rnd_below(32));
    }
    cm->elem_size = (int)(rnd_below(3) * 2); /* 0 (f32), 2 or 4 */
}

/* ---- per-plan checks ---------------------------------------------------- */

/* What an op does to the layout, from its definition. */
static int op_transition_ok(const par_layout *before, const par_redist_op *op, const par_layout *after) {
    par_layout want = *before;
    int t = op->tensor_dim, v = op->device_dim, n;
    if (op->kind == PAR_REDIST_RESHAPE) /* a view change: shape and maybe a factored mesh */
        return same_distribution(before, after);
    n = v >= 0 && v < before->mesh.ndim ? par_mesh_dev_size(&before->mesh, v) : 0;
    if (op->group != n || n < 2) return 0;
    switch (op->kind) {
    case PAR_REDIST_SPLIT:
        want.map.dev[t][want.map.count[t]++] = (int8_t)v;
        break;
    case PAR_REDIST_ALL_GATHER:
        if (!want.map.count[t] || want.map.dev[t][want.map.count[t] - 1] != v) return 0;
        want.map.count[t]--;
        break;
    case PAR_REDIST_ALL_TO_ALL:
        if (!want.map.count[t] || want.map.dev[t][want.map.count[t] - 1] != v) return 0;
        want.map.count[t]--;
        want.map.dev[op->to_dim][want.map.count[op->to_dim]++] = (int8_t)v;
        break;
    case PAR_REDIST_ALL_REDUCE:
    case PAR_REDIST_REDUCE_SCATTER:
        if (!(want.map.partial >> v & 1)) return 0;
        want.map.partial &= ~(1u << v);
        if (op->kind == PAR_REDIST_REDUCE_SCATTER) want.map.dev[t][want.map.count[t]++] = (int8_t)v;
        break;
    default:
        return 0;
    }
    return par_layout_check(&want) == PAR_OK && par_layout_equal(&want, after);
}

static int64_t expected_bytes(const par_redist_op *op, const par_layout *before, int elem_size) {
    int64_t b = par_layout_local_numel(before) * elem_size;
    int n = op->group;
    switch (op->kind) {
    case PAR_REDIST_ALL_GATHER: return (n - 1) * b;
    case PAR_REDIST_ALL_TO_ALL:
    case PAR_REDIST_REDUCE_SCATTER: return (n - 1) * b / n;
    case PAR_REDIST_ALL_REDUCE: return 2 * (n - 1) * b / n;
    default: return 0;
    }
}

/* The layout with size-1 device dims dropped: plans never name them. */
static par_layout without_unit_dims(const par_layout *l) {
    par_layout out = *l;
    int t, k, v;
    for (t = 0; t < l->ndim; t++) {
        out.map.count[t] = 0;
        for (k = 0; k < l->map.count[t]; k++)
            if (par_mesh_dev_size(&l->mesh, l->map.dev[t][k]) > 1) out.map.dev[t][out.map.count[t]++] = l->map.dev[t][k];
    }
    for (v = 0; v < l->mesh.ndim; v++)
        if (par_mesh_dev_size(&l->mesh, v) == 1) out.map.partial &= ~(1u << v);
    return out;
}

/* Structure of a plan: each op a legal move between valid layouts with the
   right bytes and cost, totals adding up, ending at the target. */
static int plan_consistent(const par_plan *plan, const par_cost_model *cm) {
    par_layout before, after;
    double cost = 0;
    int64_t bytes = 0, max_numel = par_layout_local_numel(&plan->from);
    int es = cm && cm->elem_size ? cm->elem_size : 4, i;
    par_plan_layout_after(plan, -1, &before);
    before = without_unit_dims(&before);
    for (i = 0; i < plan->num_ops; i++) {
        const par_redist_op *op = &plan->ops[i];
        double lat = 0, bw = 1;
        if (par_plan_layout_after(plan, i, &after) != PAR_OK || par_layout_check(&after) != PAR_OK) return 0;
        if (!op_transition_ok(&before, op, &after)) return 0;
        if (op->bytes_sent != expected_bytes(op, &before, es) || op->bytes_recv != op->bytes_sent) return 0;
        if (cm && op->device_dim >= 0) { /* on a factored mesh a sub-dim keeps its axis's link */
            int v = op->on_unified ? parent_dim(&plan->from.mesh, &plan->unified_mesh, op->device_dim) : op->device_dim;
            if (v < 0) return 0;
            lat = cm->link[v].latency;
            bw = cm->link[v].bandwidth > 0 ? cm->link[v].bandwidth : 1;
        }
        if (op->kind == PAR_REDIST_SPLIT || op->kind == PAR_REDIST_RESHAPE) lat = 0;
        if (!close_to(op->cost, lat + (double)op->bytes_sent / bw)) return 0;
        cost += op->cost;
        bytes += op->bytes_sent;
        if (par_layout_local_numel(&after) > max_numel) max_numel = par_layout_local_numel(&after);
        before = after;
    }
    return par_layout_equal(&before, &plan->to) && close_to(cost, plan->cost) && bytes == plan->total_bytes &&
           max_numel == plan->max_local_numel && plan->lower_bound <= plan->cost + 1e-9 * (1 + plan->cost);
}

/* ---- the property test -------------------------------------------------- */

/* Every layout on an optimal plan's path is a fresh query whose optimum is the
   rest of that plan: the planner must find that cost again, and its lower
   bound (the heuristic where the slack is smallest) must not exceed it. */
static int suffixes_ok(par_redist_planner *pl, const par_plan *best, const par_cost_model *cm) {
    double rest = best->cost;
    int i;
    /* a mid-plan layout on a factored mesh is no query (its mesh is not the target's) */
    if (best->unified_ndim && (best->unified_mesh.ndim != best->from.mesh.ndim ||
                               memcmp(best->unified_mesh.dims, best->from.mesh.dims, sizeof(int) * (size_t)best->from.mesh.ndim)))
        return 1;
    for (i = 0; i < best->num_ops; i++) {
        par_layout here;
        par_plan again;
        rest -= best->ops[i].cost;
        if (par_plan_layout_after(best, i, &here) != PAR_OK ||
            par_redist_planner_plan(pl, &here, &best->to, cm, &again) != PAR_OK)
            return 0;
        /* The unified view is fixed by the two layouts of a query, and a mid-plan
           layout may cut the tensor finer than the source did: such a suffix
           query searches a larger set and may only come out cheaper. */
        int exact = !best->unified_ndim && !again.unified_ndim;
        if ((exact ? !close_to(again.cost, rest) : again.cost > rest + 1e-9 * (1 + rest)) ||
            again.lower_bound > rest + 1e-9 * (1 + rest)) {
            fprintf(stderr, "  after op %d: rest %.6f, replanned %.6f, lower bound %.6f\n", i, rest, again.cost,
                    again.lower_bound);
            return 0;
        }
    }
    return 1;
}

typedef struct property_stats {
    int cases, exhaustive, reshapes, custom_costs, greedy_worse, failures, largest_search;
} property_stats;

static void describe_case(const par_layout *from, const par_layout *to, const par_cost_model *cm) {
    char a[256], b[256], m[64];
    par_mesh_format(&from->mesh, m, sizeof m);
    par_layout_format(from, a, sizeof a);
    par_layout_format(to, b, sizeof b);
    fprintf(stderr, "  case: mesh %s, %s (ndim %d) -> %s (ndim %d), %s cost model\n", m, a, from->ndim, b, to->ndim,
            cm ? "custom" : "default");
}

static void property_case(par_redist_planner *pl, property_stats *st) {
    par_mesh m;
    par_layout from, to;
    par_cost_model cm, *cmp = NULL;
    par_plan best, greedy;
    ref_problem rp;
    int64_t shape[MAXD], to_shape[MAXD];
    int ndim = 1 + rnd_below(4), to_ndim = ndim, v, seen = 0, ok = 1;
    double want;
    random_mesh(&m);
    random_shape(ndim, shape, rnd_below(4) ? 1024 : 48); /* small tensors leave bounds little slack */
    memcpy(to_shape, shape, sizeof shape);
    if (rnd_below(5) == 0) to_ndim = reshape_of(ndim, shape, to_shape);
    random_layout(&from, &m, ndim, shape, 0xffu, 0);
    random_layout(&to, &m, to_ndim, to_shape, 0, rnd_below(2) ? from.map.partial & (uint32_t)rnd() : 0);
    if (rnd_below(2)) {
        random_cost_model(&cm, &m);
        cmp = &cm;
        st->custom_costs++;
    }
    st->cases++;
    st->reshapes += to_ndim != ndim || memcmp(shape, to_shape, sizeof shape) != 0;
    if (par_redist_planner_plan(pl, &from, &to, cmp, &best) != PAR_OK || par_plan_greedy(&from, &to, cmp, &greedy) != PAR_OK) {
        CHECK_MSG(0, "planning failed");
        describe_case(&from, &to, cmp);
        st->failures++;
        return;
    }
    if (!plan_consistent(&best, cmp)) ok = 0, fprintf(stderr, "  optimal plan is inconsistent\n");
    if (!plan_consistent(&greedy, cmp)) ok = 0, fprintf(stderr, "  greedy plan is inconsistent\n");
    if (!simulate_ok(&best)) ok = 0, fprintf(stderr, "  optimal plan simulates wrong: %s\n", par_last_error());
    if (!simulate_ok(&greedy)) ok = 0, fprintf(stderr, "  greedy plan simulates wrong: %s\n", par_last_error());
    if (!(best.cost <= greedy.cost + 1e-9 * (1 + greedy.cost))) ok = 0, fprintf(stderr, "  greedy is cheaper\n");
    if (!suffixes_ok(pl, &best, cmp)) ok = 0, fprintf(stderr, "  a suffix of the optimal plan is not optimal\n");
    st->greedy_worse += best.cost < greedy.cost - 1e-9 * (1 + greedy.cost);
    { /* MindSpore's enable_alltoall off (its default): both planners without all_to_all */
        par_cost_model off;
        par_plan best_off, greedy_off;
        int k;
        if (cmp) off = cm;
        else memset(&off, 0, sizeof off);
        off.no_all_to_all = 1;
        if (par_redist_planner_plan(pl, &from, &to, &off, &best_off) != PAR_OK ||
            par_plan_greedy(&from, &to, &off, &greedy_off) != PAR_OK) {
            ok = 0, fprintf(stderr, "  planning without all_to_all failed: %s\n", par_last_error());
        } else {
            for (k = 0; k < greedy_off.num_ops; k++)
                if (greedy_off.ops[k].kind == PAR_REDIST_ALL_TO_ALL || (k < best_off.num_ops && best_off.ops[k].kind == PAR_REDIST_ALL_TO_ALL))
                    ok = 0, fprintf(stderr, "  an all_to_all with enable_alltoall off\n");
            if (!plan_consistent(&greedy_off, &off) || !simulate_ok(&greedy_off))
                ok = 0, fprintf(stderr, "  greedy plan without all_to_all is wrong\n");
            if (!(best_off.cost <= greedy_off.cost + 1e-9 * (1 + greedy_off.cost)))
                ok = 0, fprintf(stderr, "  greedy without all_to_all is cheaper\n");
            if (!(best.cost <= best_off.cost + 1e-9 * (1 + best_off.cost)))
                ok = 0, fprintf(stderr, "  all_to_all made the optimum dearer\n");
        }
    }
    memset(&rp, 0, sizeof rp);
    rp.from = &from;
    rp.to = &to;
    rp.reshape = to_ndim != ndim || memcmp(shape, to_shape, sizeof shape) != 0;
    rp.elem_size = cmp && cm.elem_size ? cm.elem_size : 4;
    for (v = 0; v < m.ndim; v++) {
        rp.size[v] = par_mesh_dev_size(&m, v);
        rp.latency[v] = cmp ? cm.link[v].latency : 0;
        rp.bandwidth[v] = cmp && cm.link[v].bandwidth > 0 ? cm.link[v].bandwidth : 1;
    }
    want = ref_optimum_extended(&rp, &seen);
    if (seen > st->largest_search) st->largest_search = seen;
    if (want >= 0) {
        st->exhaustive++;
        ok &= close_to(best.cost, want);
        if (!close_to(best.cost, want)) fprintf(stderr, "  optimum %.6f, planner %.6f\n", want, best.cost);
    }
    CHECK_MSG(ok, "property case %d", st->cases);
    if (!ok) {
        describe_case(&from, &to, cmp);
        fprintf(stderr, "  optimal:\n%s  greedy:\n%s", plan_text(&best), plan_text(&greedy));
        st->failures++;
    }
}

static void test_property(void) {
    property_stats st;
    par_redist_planner *pl;
    par_redist_planner_desc desc;
    int i;
    memset(&st, 0, sizeof st);
    memset(&desc, 0, sizeof desc);
    desc.cache_entries = 16;
    CHECK_OK(par_redist_planner_create(&desc, &pl));
    for (i = 0; i < 10000 && st.failures < 10; i++) property_case(pl, &st);
    par_redist_planner_destroy(pl);
    CHECK(st.exhaustive * 10 >= st.cases * 9);
    printf("redistribute property: %d cases (%d with a reshape, %d with custom costs), %d checked against "
           "exhaustive search (largest %d states), optimal strictly cheaper than greedy in %d\n",
           st.cases, st.reshapes, st.custom_costs, st.exhaustive, st.largest_search, st.greedy_worse);
}

/* ---- cache and allocation ----------------------------------------------- */

static void test_cache_and_allocation(void) {
    par_mesh m = make_mesh("2,3,2");
    int64_t shape[3] = {12, 12, 8};
    par_layout cases[40][2];
    par_redist_planner *pl;
    par_redist_planner_desc desc;
    par_plan first, again, fresh;
    par_cost_model half;
    char want[8192];
    long before;
    int i, pass;
    for (i = 0; i < 40; i++) {
        random_layout(&cases[i][0], &m, 3, shape, 0xffu, 0);
        do random_layout(&cases[i][1], &m, 3, shape, 0, 0);
        while (par_layout_equal(&cases[i][0], &cases[i][1]));
    }
    /* the same query twice: the same plan, and the hit allocates nothing */
    memset(&desc, 0, sizeof desc);
    CHECK_OK(par_redist_planner_create(&desc, &pl));
    CHECK_OK(par_redist_planner_plan(pl, &cases[0][0], &cases[0][1], NULL, &first));
    snprintf(want, sizeof want, "%s", plan_text(&first));
    before = test_allocations;
    CHECK_OK(par_redist_planner_plan(pl, &cases[0][0], &cases[0][1], NULL, &again));
    CHECK_INT(test_allocations - before, 0);
    CHECK_STR(plan_text(&again), want);
    CHECK(again.cost == first.cost && par_layout_equal(&again.from, &first.from) && par_layout_equal(&again.to, &first.to));
    /* the cost model is part of the key: f16 elements halve every byte count */
    memset(&half, 0, sizeof half);
    half.elem_size = 2;
    CHECK_OK(par_redist_planner_plan(pl, &cases[0][0], &cases[0][1], &half, &again));
    CHECK_INT(again.total_bytes * 2, first.total_bytes);
    par_redist_planner_destroy(pl);

    /* LRU of two entries: after A, B, C the entry for A is gone, yet A still plans right */
    desc.cache_entries = 2;
    CHECK_OK(par_redist_planner_create(&desc, &pl));
    for (i = 0; i < 3; i++) CHECK_OK(par_redist_planner_plan(pl, &cases[i][0], &cases[i][1], NULL, &again));
    CHECK_OK(par_redist_planner_plan(pl, &cases[0][0], &cases[0][1], NULL, &again));
    CHECK_STR(plan_text(&again), want);
    CHECK_OK(par_redist_planner_plan(pl, &cases[2][0], &cases[2][1], NULL, &again));
    CHECK_OK(par_plan_redistribution(&cases[2][0], &cases[2][1], NULL, &fresh));
    snprintf(want, sizeof want, "%s", plan_text(&fresh));
    CHECK_STR(plan_text(&again), want);
    par_redist_planner_destroy(pl);

    /* no cache: every query searches, and after one pass nothing is allocated */
    desc.cache_entries = -1;
    CHECK_OK(par_redist_planner_create(&desc, &pl));
    for (pass = 0; pass < 2; pass++) {
        before = test_allocations;
        for (i = 0; i < 40; i++) CHECK_OK(par_redist_planner_plan(pl, &cases[i][0], &cases[i][1], NULL, &again));
        if (pass == 1) CHECK_INT(test_allocations - before, 0);
    }
    par_redist_planner_destroy(pl);
}

/* MindSpore's enable_alltoall: false: the same transitions without all_to_all
   (an all_gather then a local split), still correct, never cheaper, and
   identical when the optimal plan had no all_to_all. */
static void test_no_all_to_all(void) {
    static const char *const cases[][3] = {{"4", "[0,-1]", "[-1,0]"},
                                           {"2,4", "[1,0]", "[0,1]"},
                                           {"2,4", "[(1,0),-1]", "[-1,(1,0)]"},
                                           {"2,4", "[1,-1] partial=0", "[-1,0]"},
                                           {"2,4", "[1,-1]", "[-1,-1]"}};
    const int64_t shape[2] = {16, 24};
    size_t i;
    int k, any_a2a = 0;
    for (i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        par_mesh mesh;
        par_layout from, to;
        par_plan with, without;
        par_cost_model cost;
        int has = 0;
        memset(&cost, 0, sizeof cost);
        cost.no_all_to_all = 1;
        CHECK_OK(par_mesh_parse(cases[i][0], &mesh));
        CHECK_OK(par_layout_parse(&from, &mesh, 2, shape, cases[i][1]));
        CHECK_OK(par_layout_parse(&to, &mesh, 2, shape, cases[i][2]));
        CHECK_OK(par_plan_redistribution(&from, &to, NULL, &with));
        CHECK_OK(par_plan_redistribution(&from, &to, &cost, &without));
        for (k = 0; k < with.num_ops; k++) has |= with.ops[k].kind == PAR_REDIST_ALL_TO_ALL;
        any_a2a |= has;
        for (k = 0; k < without.num_ops; k++)
            CHECK_MSG(without.ops[k].kind != PAR_REDIST_ALL_TO_ALL, "%s -> %s: op %d is an all_to_all", cases[i][1],
                      cases[i][2], k);
        CHECK_MSG(without.cost >= with.cost && (has || without.cost == with.cost), "%s -> %s: cost %g without, %g with",
                  cases[i][1], cases[i][2], without.cost, with.cost);
        CHECK(simulate_ok(&without));
    }
    CHECK_MSG(any_a2a, "no case used all_to_all by default: the test would prove nothing");
}

/* Op k of plan moves data over more than the mesh's last axis (device dim 0)?
   On a unified mesh that axis may be factored: the op's device dims from 0 up
   to its own must multiply to at most the last axis's size. Local ops move
   nothing. */
static int moves_beyond_last_axis(const par_plan *plan, int k, const par_mesh *mesh) {
    const par_redist_op *op = &plan->ops[k];
    const par_mesh *m = op->on_unified ? &plan->unified_mesh : mesh;
    int64_t prod = 1;
    int v;
    if (op->kind == PAR_REDIST_RESHAPE || op->kind == PAR_REDIST_SPLIT || op->device_dim < 0) return 0;
    for (v = 0; v <= op->device_dim; v++) prod *= par_mesh_dev_size(m, v);
    return prod > mesh->dims[mesh->ndim - 1];
}

/* par_cost_model.independent_dims: the tp x pp hang of the llama trainer. On
   mesh pp=2,tp=4 a partial sum over tp is cheapest as split over pp, a 2x
   smaller all_reduce over tp, all_gather over pp: a plan that runs a
   collective across pipeline stages (which hold different activations and
   are busy elsewhere). Named independent, pp must never be used; every
   other dim still may be (and the plan still simulates correctly). */
static void test_independent_dims(void) {
    static const char *const cases[][3] = {{"pp=2,tp=4", "[-1,-1] partial=0", "[-1,-1]"},
                                           {"pp=2,tp=4", "[-1,-1] partial=0", "[tp,None]"},
                                           {"cp=2,pp=2,tp=4", "[-1,-1] partial=0", "[-1,-1]"},
                                           {"pp=2,tp=4", "[tp,None]", "[None,tp]"}};
    const int64_t shape[2] = {64, 64};
    size_t i;
    int k, borrowed = 0;
    for (i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        par_mesh mesh;
        par_layout from, to;
        par_plan free_plan, kept;
        par_cost_model cost;
        uint32_t tp_dim;
        memset(&cost, 0, sizeof cost);
        CHECK_OK(par_mesh_parse(cases[i][0], &mesh));
        tp_dim = 1u << par_mesh_dev_dim(&mesh, "tp");
        cost.independent_dims = ((1u << mesh.ndim) - 1) & ~tp_dim;
        CHECK_OK(par_layout_parse(&from, &mesh, 2, shape, cases[i][1]));
        CHECK_OK(par_layout_parse(&to, &mesh, 2, shape, cases[i][2]));
        CHECK_OK(par_plan_redistribution(&from, &to, NULL, &free_plan));
        CHECK_OK(par_plan_redistribution(&from, &to, &cost, &kept));
        for (k = 0; k < free_plan.num_ops; k++)
            borrowed |= free_plan.ops[k].kind != PAR_REDIST_RESHAPE && free_plan.ops[k].device_dim >= 0 &&
                        !(tp_dim >> free_plan.ops[k].device_dim & 1u);
        for (k = 0; k < kept.num_ops; k++)
            CHECK_MSG(!moves_beyond_last_axis(&kept, k, &mesh), "%s %s -> %s: op %d (%s) runs over device dim %d, which is independent", cases[i][0],
                      cases[i][1], cases[i][2], k, par_redist_kind_name(kept.ops[k].kind), kept.ops[k].device_dim);
        CHECK_MSG(kept.cost >= free_plan.cost, "%s -> %s: restricted plan cheaper (%g < %g)", cases[i][1], cases[i][2],
                  kept.cost, free_plan.cost);
        CHECK(simulate_ok(&kept));
    }
    CHECK_MSG(borrowed, "no unrestricted plan borrowed an idle dim: the test would prove nothing");
    { /* a layout split over an independent dim is refused, naming the dim */
        par_mesh mesh;
        par_layout from, to;
        par_plan plan;
        par_cost_model cost;
        memset(&cost, 0, sizeof cost);
        CHECK_OK(par_mesh_parse("pp=2,tp=4", &mesh));
        cost.independent_dims = 2u;
        CHECK_OK(par_layout_parse(&from, &mesh, 2, shape, "[pp,None]"));
        CHECK_OK(par_layout_parse(&to, &mesh, 2, shape, "[-1,-1]"));
        CHECK_ERR(par_plan_redistribution(&from, &to, &cost, &plan), PAR_EINVAL,
                  "device dim 1, which the cost model names independent");
        cost.independent_dims = 4u;
        CHECK_ERR(par_plan_redistribution(&from, &to, &cost, &plan), PAR_EINVAL, "independent_dims 0x4 names device dims");
    }
}

int main(void) {
    test_seed_cases();
    test_framework_cases();
    test_greedy_cycle();
    test_unified_cases();
    test_mindspore_cases();
    test_no_all_to_all();
    test_independent_dims();
    test_errors();
    test_simulator_detects();
    test_cache_and_allocation();
    test_property();
    return TEST_END("redistribute");
}
