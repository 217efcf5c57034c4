/* tests/test_alloc.c - par_allocator: host memory of a context through the hooks.

   A counting allocator (a header on every block: magic and owner, so a block
   freed by the wrong allocator is caught) serves a context run by
   par_run_threads_desc on 8 rank threads with 2 kernel threads each. The rank
   body creates groups (enough that the group cache grows by realloc), runs a
   redistribution plan through the executor and checks the result, issues an
   async collective, plans with a planner made for the context, runs a GEMM and
   an attention call of the CPU table, and gathers a trace. Meanwhile the
   PARALLEL_MALLOC/REALLOC/FREE macros are counting wrappers too: none of the
   library's allocations may go around the hooks, and every hooked block must
   be freed once the run returns. Then a sharded checkpoint (par_params_save
   twice with pruning, par_params_load from the root) through a context with
   the counting hooks: the same rules, the only macro calls being the loaded
   par_ckpt_info's metadata copy and its par_ckpt_info_free (it outlives the
   call and is freed without a context). Plus: partial hook sets are
   PAR_EINVAL naming the missing hook, for every desc that takes an allocator. */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "count_alloc.h" /* counting PARALLEL_MALLOC/REALLOC/FREE and hooks */

#define PARALLEL_IMPLEMENTATION
#include "test.h"

/* the counting allocator: tests/count_alloc.h */

static par_allocator counting(counter *c) {
    par_allocator a;
    memset(&a, 0, sizeof a);
    a.user = c;
    a.malloc = hook_malloc;
    a.realloc = hook_realloc;
    a.free = hook_free;
    return a;
}

/* ---- partial hook sets ---------------------------------------------------- */

static par_status never_run(par_ctx *ctx, void *arg) {
    (void)ctx, (void)arg;
    return PAR_ECOMM;
}

static void test_partial_sets(void) {
    counter c;
    par_ctx_desc desc;
    par_cpu_desc cpu;
    par_redist_planner_desc pd;
    par_compute_table table;
    par_redist_planner *pl = (par_redist_planner *)&pd; /* must come back NULL */
    memset(&c, 0, sizeof c);
    pthread_mutex_init(&c.mu, NULL);

    memset(&desc, 0, sizeof desc);
    desc.allocator = counting(&c);
    desc.allocator.realloc = NULL;
    CHECK_ERR(par_run_threads_desc(&desc, 2, never_run, NULL), PAR_EINVAL, "par_ctx_desc.allocator: realloc is NULL");
    desc.allocator = counting(&c);
    desc.allocator.malloc = NULL;
    desc.allocator.free = NULL;
    CHECK_ERR(par_run_threads_desc(&desc, 2, never_run, NULL), PAR_EINVAL, "malloc is NULL");
    desc.allocator = counting(&c);
    desc.allocator.free = NULL;
    CHECK_ERR(par_run_threads_desc(&desc, 2, never_run, NULL), PAR_EINVAL, "free is NULL");
    /* the same check behind par_ctx_init (and so every launcher) */
    {
        par_ctx *ctx = (par_ctx *)&desc;
        par_comm_table comm;
        memset(&comm, 0, sizeof comm);
        desc.comm = &comm;
        CHECK(par_ctx_init(&desc, &ctx) != PAR_OK && ctx == NULL);
        desc.comm = NULL;
    }

    memset(&cpu, 0, sizeof cpu);
    cpu.allocator = counting(&c);
    cpu.allocator.free = NULL;
    CHECK_ERR(par_compute_cpu(&cpu, &table), PAR_EINVAL, "par_cpu_desc.allocator: free is NULL");

    memset(&pd, 0, sizeof pd);
    pd.allocator.malloc = hook_malloc;
    CHECK_ERR(par_redist_planner_create(&pd, &pl), PAR_EINVAL, "par_redist_planner_desc.allocator: realloc is NULL");
    CHECK(pl == NULL);

    CHECK_INT(c.mallocs + c.reallocs + c.frees + c.bad, 0); /* rejected before any allocation */
    pthread_mutex_destroy(&c.mu);
}

/* ---- a full threads run ---------------------------------------------------- */

#define RANKS 8
#define SIDE 16

typedef struct run_arg {
    const par_plan *plan;
    counter *c;
    const char *trace_path;
    int failed[RANKS]; /* per rank: checks that failed inside the rank */
} run_arg;

/* Global flat index of local element i of `rank`'s slice of l (2-D). */
static float global_value(const par_layout *l, int rank, int64_t i) {
    int64_t shape[PARALLEL_MAX_DIMS], off[PARALLEL_MAX_DIMS];
    par_layout_local_shape(l, shape);
    par_layout_local_offset(l, rank, off);
    return (float)((off[0] + i / shape[1]) * SIDE + off[1] + i % shape[1]);
}

static par_status rank_body(par_ctx *ctx, void *p) {
    run_arg *a = (run_arg *)p;
    const int rank = par_ctx_rank(ctx);
    const par_compute_table *ct = par_ctx_compute(ctx);
    const par_comm_table *cm = par_ctx_comm(ctx);
    const par_allocator *al = par_ctx_allocator(ctx);
    par_comm_group *g = NULL;
    par_executor *exec = NULL;
    par_redist_planner *pl = NULL;
    par_request *req = NULL;
    par_trace *tr = NULL;
    par_trace_desc td;
    par_plan again;
    float *in = NULL, *out = NULL, sum[4] = {1, 2, 3, 4};
    int64_t nin = par_layout_local_numel(&a->plan->from), nout = par_layout_local_numel(&a->plan->to), i;
    int world[RANKS], bad = 0, mask;
    par_status st;

    bad += al == NULL || al->malloc != hook_malloc || al->user != a->c;
    /* every group along mesh dims (8 on a 3-D mesh), then the world in reverse
       order: a ninth cached group, so the cache grows by realloc */
    for (mask = 0; mask < 8; mask++) bad += par_ctx_group(ctx, (uint32_t)mask, &g, NULL, NULL) != PAR_OK;
    for (i = 0; i < RANKS; i++) world[i] = RANKS - 1 - (int)i;
    bad += par_ctx_group_ranks(ctx, world, RANKS, &g) != PAR_OK;

    /* a plan through the executor, buffers from the CPU table */
    if ((st = ct->alloc(ct->user, (size_t)nin * sizeof *in, PAR_MEM_ACTIVATIONS, (void **)&in)) != PAR_OK) return st;
    if ((st = ct->alloc(ct->user, (size_t)nout * sizeof *out, PAR_MEM_ACTIVATIONS, (void **)&out)) != PAR_OK) return st;
    /* the source is partial over b: the b = 0 ranks hold the values, the others 0 */
    for (i = 0; i < nin; i++) in[i] = rank / 2 % 2 == 0 ? global_value(&a->plan->from, rank, i) : 0.0f;
    if ((st = par_executor_create(ctx, &exec)) != PAR_OK) return st;
    if ((st = par_execute_plan(exec, a->plan, PAR_F32, in, out)) != PAR_OK) return st;
    for (i = 0; i < nout; i++) bad += out[i] != global_value(&a->plan->to, rank, i);
    par_executor_destroy(exec);

    /* an async collective: its request lives in hooked memory */
    if ((st = par_ctx_group(ctx, 7u, &g, NULL, NULL)) != PAR_OK) return st;
    if ((st = cm->all_reduce(cm->user, g, sum, sum, 4, PAR_F32, PAR_REDUCE_SUM, &req)) != PAR_OK) return st;
    if ((st = cm->wait(cm->user, req)) != PAR_OK) return st;
    bad += sum[0] != 1.0f * RANKS || sum[3] != 4.0f * RANKS;

    /* a planner made for the context, grown by a search */
    if ((st = par__ctx_planner_create(ctx, NULL, &pl)) != PAR_OK) return st;
    st = par_redist_planner_plan(pl, &a->plan->from, &a->plan->to, NULL, &again);
    par_redist_planner_destroy(pl);
    if (st != PAR_OK) return st;
    bad += again.num_ops != a->plan->num_ops;

    /* kernels that keep or take scratch: a GEMM big enough for packing space and
       the kernel threads, and an attention call (tiles, internal SGEMM) */
    {
        enum { M = 96, D = 64 };
        par_gemm_desc gd;
        par_attn_desc ad;
        float *x = NULL, *y = NULL, *z = NULL, *lse = NULL;
        if ((st = ct->alloc(ct->user, sizeof(float) * M * M * 3 + sizeof(float) * M, PAR_MEM_WORKSPACE,
                            (void **)&x)) != PAR_OK)
            return st;
        y = x + M * M, z = y + M * M, lse = z + M * M;
        for (i = 0; i < M * M; i++) x[i] = (float)(i % 7) * 0.25f, y[i] = (float)(i % 5) * 0.5f;
        memset(&gd, 0, sizeof gd);
        gd.m = gd.n = gd.k = M;
        gd.alpha = 1.0f;
        bad += ct->gemm(ct->user, &gd, x, y, z) != PAR_OK;
        memset(&ad, 0, sizeof ad);
        ad.batch = 1, ad.q_heads = ad.kv_heads = 1, ad.head_dim = D, ad.q_len = ad.k_len = M, ad.causal = 1;
        bad += ct->attention_fwd(ct->user, &ad, x, y, y, z, lse) != PAR_OK;
        ct->free(ct->user, x);
    }

    /* a trace gathered over the context (its buffers through the hooks); the
       trace object has no context and uses the macros, which the caller
       accounts for */
    memset(&td, 0, sizeof td);
    td.rank = rank;
    if ((st = par_trace_create(&td, &tr)) != PAR_OK) return st;
    par_trace_span(tr, "step", "compute", 0.0, 1.0);
    st = par_trace_gather_write(ctx, tr, rank == 0 ? a->trace_path : NULL);
    par_trace_destroy(tr);
    if (st != PAR_OK) return st;

    /* the host's own per-context memory through the same hooks */
    {
        void *mine = al->malloc(100, al->user);
        bad += mine == NULL;
        if (mine) al->free(mine, al->user);
    }

    ct->free(ct->user, in);
    ct->free(ct->user, out);
    a->failed[rank] = bad;
    return PAR_OK;
}

static void test_threads_run(void) {
    counter c;
    par_ctx_desc desc;
    par_mesh mesh;
    par_layout from, to;
    par_plan plan;
    run_arg arg;
    int64_t shape[2] = {SIDE, SIDE};
    long before, trace_macro_calls;
    const char *tmp = getenv("TMPDIR");
    char path[512];
    int r;
    memset(&c, 0, sizeof c);
    pthread_mutex_init(&c.mu, NULL);
    memset(&arg, 0, sizeof arg);
    CHECK_OK(par_mesh_parse("a=2,b=2,c=2", &mesh));
    CHECK_OK(par_layout_parse(&from, &mesh, 2, shape, "[a,c] partial=b"));
    CHECK_OK(par_layout_parse(&to, &mesh, 2, shape, "[(c,a),None]"));
    CHECK_OK(par_plan_redistribution(&from, &to, NULL, &plan));
    CHECK(plan.num_ops >= 2);
    snprintf(path, sizeof path, "%s/par_alloc_trace_%ld.json", tmp && tmp[0] ? tmp : "/tmp", (long)getpid());
    arg.plan = &plan;
    arg.c = &c;
    arg.trace_path = path;

    memset(&desc, 0, sizeof desc);
    desc.mesh = "a=2,b=2,c=2";
    desc.timeout_ms = 30000;
    desc.kernel_threads = 2;
    desc.allocator = counting(&c);

    /* The trace objects are not the context's: measure what they take from the
       macros alone, with the same calls, then expect exactly that below. */
    before = macro_count();
    {
        par_trace *tr[RANKS];
        par_trace_desc td;
        memset(&td, 0, sizeof td);
        for (r = 0; r < RANKS; r++) {
            td.rank = r;
            CHECK_OK(par_trace_create(&td, &tr[r]));
            par_trace_span(tr[r], "step", "compute", 0.0, 1.0);
        }
        for (r = 0; r < RANKS; r++) par_trace_destroy(tr[r]);
    }
    trace_macro_calls = macro_count() - before;

    before = macro_count();
    CHECK_OK(par_run_threads_desc(&desc, RANKS, rank_body, &arg));
    CHECK_MSG(macro_count() - before == trace_macro_calls,
              "%ld allocator macro calls during the run, %ld of them the trace objects'",
              macro_count() - before, trace_macro_calls);
    for (r = 0; r < RANKS; r++) CHECK_MSG(arg.failed[r] == 0, "rank %d: %d checks failed", r, arg.failed[r]);
    CHECK_MSG(c.mallocs > 100, "only %ld allocations went through the hooks", c.mallocs);
    CHECK_MSG(c.reallocs > 0, "no realloc went through the hooks");
    CHECK_MSG(c.live == 0, "%ld hooked blocks still allocated after the run", c.live);
    CHECK_INT(c.bad, 0);
    CHECK_INT(c.frees, c.mallocs);
    remove(path);
    pthread_mutex_destroy(&c.mu);
}

/* ---- a sharded checkpoint through the hooks ------------------------------- */

#define CKPT_RANKS 4
#define CKPT_NP 3

static const char *const ckpt_name[CKPT_NP] = {"w", "b", "e"};
static const int ckpt_ndim[CKPT_NP] = {2, 1, 2};
static const int64_t ckpt_shape[CKPT_NP][2] = {{8, 6}, {6, 0}, {5, 4}};
static const char *const ckpt_map[CKPT_NP] = {"[tp,None]", "[None]", "[None,tp]"};

typedef struct ckpt_arg {
    const char *dir;
    int failed[CKPT_RANKS]; /* per rank: checks that failed inside the rank */
} ckpt_arg;

/* Element g (global flat index) of parameter i's `field` in version v. */
static float ckpt_value(int v, int i, int field, int64_t g) { return (float)(v * 1000 + i * 100 + field * 10) + 0.5f * (float)g; }

/* Global flat index of local element k of parameter i on this rank. */
static int64_t ckpt_global(const par_param_info *in, int64_t k) {
    if (in->layout.ndim == 1) return in->start[0] + k;
    return (in->start[0] + k / in->local_shape[1]) * in->layout.shape[1] + in->start[1] + k % in->local_shape[1];
}

/* dp=2 x tp=2 with ZeRO-1, so the moments are saved as per-rank pieces. */
static par_status ckpt_set(par_ctx *ctx, par_params **ps) {
    const par_mesh *m = par_ctx_mesh(ctx);
    par_param_desc pd[CKPT_NP];
    par_params_desc d;
    par_layout batch;
    int64_t bshape[2] = {8, 4};
    int i;
    memset(pd, 0, sizeof pd), memset(&d, 0, sizeof d);
    for (i = 0; i < CKPT_NP; i++) {
        pd[i].name = ckpt_name[i];
        PAR__CHECK(par_layout_parse(&pd[i].layout, m, ckpt_ndim[i], ckpt_shape[i], ckpt_map[i]));
    }
    PAR__CHECK(par_layout_parse(&batch, m, 2, bshape, "[dp,None]"));
    d.params = pd, d.num_params = CKPT_NP, d.batch = &batch, d.zero_level = 1, d.bucket_bytes = 64;
    return par_params_create(ctx, &d, ps);
}

/* Set every field of every parameter of ps to version v. */
static par_status ckpt_fill(par_params *ps, int v) {
    float buf[64];
    int i, f;
    int64_t k;
    for (i = 0; i < CKPT_NP; i++) {
        par_param_info in;
        PAR__CHECK(par_params_get_info(ps, i, &in));
        for (f = 0; f < 3; f++) {
            for (k = 0; k < in.numel; k++) buf[k] = ckpt_value(v, i, f, ckpt_global(&in, k));
            PAR__CHECK(par_params_set_local(ps, (par_param_field)f, i, buf));
        }
    }
    return PAR_OK;
}

static par_status ckpt_body(par_ctx *ctx, void *p) {
    ckpt_arg *a = (ckpt_arg *)p;
    const int rank = par_ctx_rank(ctx);
    static const char *const keys[1] = {"data.position"};
    static const char *const values[1] = {"batch 17"};
    par_params *ps = NULL, *back = NULL;
    par_ckpt_desc cd;
    par_ckpt_info info;
    par_status st;
    int bad = 0, i, v;
    int64_t k;
    if ((st = ckpt_set(ctx, &ps)) != PAR_OK) return st;
    memset(&cd, 0, sizeof cd);
    cd.dir = a->dir, cd.keep = 1, cd.meta_keys = keys, cd.meta_values = values, cd.num_meta = 1;
    for (v = 1; v <= 2; v++) { /* two saves: the second prunes the first (keep 1) */
        if ((st = ckpt_fill(ps, v)) == PAR_OK) st = par_params_set_step(ps, 10 * v);
        cd.step = 10 * v;
        if (st == PAR_OK) st = par_params_save(ps, &cd);
        if (st != PAR_OK) return par_params_destroy(ps), st;
    }
    par_params_destroy(ps);

    memset(&info, 0, sizeof info);
    if ((st = ckpt_set(ctx, &back)) != PAR_OK) return st;
    if ((st = par_params_load(back, a->dir, &info)) != PAR_OK) return par_params_destroy(back), st;
    bad += info.step != 20 || !info.has_moments || info.num_shards != CKPT_RANKS;
    bad += par_ckpt_metadata(&info, "data.position") == NULL ||
           strcmp(par_ckpt_metadata(&info, "data.position"), "batch 17") != 0;
    bad += par_params_step_count(back) != 20;
    for (i = 0; i < CKPT_NP; i++) { /* the values of the second save, element by element */
        par_param_info in;
        const float *val = par_params_value(back, i);
        bad += par_params_get_info(back, i, &in) != PAR_OK || val == NULL;
        for (k = 0; val && k < in.numel; k++) bad += val[k] != ckpt_value(2, i, 0, ckpt_global(&in, k));
    }
    par_ckpt_info_free(&info);
    par_params_destroy(back);
    a->failed[rank] = bad;
    return PAR_OK;
}

static void test_ckpt_run(void) {
    counter c;
    par_ctx_desc desc;
    ckpt_arg arg;
    const char *tmp = getenv("TMPDIR");
    char dir[512], cmd[600];
    long before;
    int r;
    memset(&c, 0, sizeof c);
    pthread_mutex_init(&c.mu, NULL);
    memset(&arg, 0, sizeof arg);
    snprintf(dir, sizeof dir, "%s/par_alloc_ckpt_%ld", tmp && tmp[0] ? tmp : "/tmp", (long)getpid());
    arg.dir = dir;
    memset(&desc, 0, sizeof desc);
    desc.mesh = "dp=2,tp=2";
    desc.timeout_ms = 30000;
    desc.kernel_threads = 1;
    desc.allocator = counting(&c);

    before = macro_count();
    CHECK_OK(par_run_threads_desc(&desc, CKPT_RANKS, ckpt_body, &arg));
    /* per rank: the info's metadata, copied by the load and freed by par_ckpt_info_free */
    CHECK_MSG(macro_count() - before == 2 * CKPT_RANKS,
              "%ld allocator macro calls during the save and load, want %d (the par_ckpt_info metadata's)",
              macro_count() - before, 2 * CKPT_RANKS);
    for (r = 0; r < CKPT_RANKS; r++) CHECK_MSG(arg.failed[r] == 0, "rank %d: %d checks failed", r, arg.failed[r]);
    CHECK_MSG(c.mallocs > 200, "only %ld allocations went through the hooks", c.mallocs);
    CHECK_MSG(c.reallocs > 0, "no realloc went through the hooks");
    CHECK_MSG(c.live == 0, "%ld hooked blocks still allocated after the run", c.live);
    CHECK_INT(c.bad, 0);
    CHECK_INT(c.frees, c.mallocs);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    CHECK(system(cmd) == 0);
    pthread_mutex_destroy(&c.mu);
}

/* A context's default hooks are callable and wrap the macros. */
static par_status default_body(par_ctx *ctx, void *p) {
    const par_allocator *al = par_ctx_allocator(ctx);
    void *q;
    (void)p;
    if (!al || !al->malloc || !al->realloc || !al->free) return par_set_error(PAR_EINVAL, "hooks not all set");
    if (!(q = al->malloc(16, al->user))) return PAR_ENOMEM;
    if (!(q = al->realloc(q, 64, al->user))) return PAR_ENOMEM;
    al->free(q, al->user);
    return PAR_OK;
}

static void test_defaults(void) {
    long before = macro_count();
    CHECK_OK(par_run_threads(2, default_body, NULL));
    CHECK_MSG(macro_count() > before, "the default hooks did not go through PARALLEL_MALLOC");
    CHECK(par_ctx_allocator(NULL) == NULL);
}

int main(void) {
    test_partial_sets();
    test_threads_run();
    test_ckpt_run();
    test_defaults();
    return TEST_END("test_alloc");
}
