/* tests/test_tp16.c - >>tensor-parallel regions of a 16-bit dtype
   (par_tp_desc.dtype = PAR_BF16 / PAR_F16) on the threads backend, tp degree
   1, 2 and 4 (and dp 2 x tp 2), with and without sequence parallelism.

   Collectives (the default CPU table: they need no kernels):
     gather_rows, gather_columns  the exact 16-bit bits of every rank's rows /
                                  columns, any pattern (nan and inf too);
     reduce_rows                  the threads backend sums a 16-bit collective in
                                  f32, member 0 first, then adds member 1, 2, ...
                                  in group order (par__thr_reduce_block), and
                                  rounds once to nearest even: asserted bit for
                                  bit against that model built with tests/half.h;
                                  with 4 members the test also shows rounding
                                  after every addition would give other bits, so
                                  it can tell the two apart;
     workspace                    par_tp_workspace_bytes and the PAR_MEM_COMM
                                  bytes the region's executor really allocates:
                                  half of an f32 region's.
   Kernels (a staged table: each rank's hooks widen 16-bit inputs with half.h,
   run the CPU table's f32 kernel and round each 16-bit output once, which is
   what the version-4 hooks promise; the CPU table itself has no 16-bit
   activation kernels yet):
     embedding fwd  (replicated and vocabulary-parallel) the table's bits;
     embedding bwd  dtable (f32) bitwise equal to an f32 region's on the decoded dout;
     cross_entropy  losses bitwise equal to an f32 region's on the decoded
                    logits (the pieces are f32 and all-reduced in f32), dlogits
                    that region's rounded once.
   Plus: a zero dtype reads back as f32, other dtypes are refused naming
   desc.dtype, and par_tp_reduce_rows' NULL out (in place, not sequence
   parallel). Each rank counts its own checks (test.h's counters are not
   thread-safe). */
#include "test.h"
#include "half.h"
#include <pthread.h>
#include <stdlib.h>

enum { N = 8, C = 16, V = 16 }; /* rows per data rank, hidden, vocabulary */

typedef rank_counts counts; /* test.h's per-rank checks */
#define TCHECK RANK_CHECK
#define TOK RANK_OK
#define TERR(c, expr, status, needle)                                                    \
    do {                                                                                 \
        par_status s_ = (expr);                                                          \
        TCHECK(c, s_ == (status) && strstr(par_last_error(), (needle)) != NULL,          \
               "%s: got %s, want %s with \"%s\"", #expr, par_status_string(s_), par_status_string(status), (needle)); \
    } while (0)

static uint64_t mix(uint64_t a, uint64_t b, uint64_t c) {
    uint64_t z = a * 0x9e3779b97f4a7c15ull ^ (b + 0x632be59bd9b4e019ull) * 0xbf58476d1ce4e5b9ull ^ (c + 7) * 0x94d049bb133111ebull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
/* any 16-bit pattern (for the collectives that only move bits) */
static uint16_t bits(uint64_t tag, int64_t a, int64_t b) { return (uint16_t)mix(tag, (uint64_t)a, (uint64_t)b); }
/* a value in [-s, s) rounded to the dtype */
static uint16_t val(par_dtype t, uint64_t tag, int64_t a, int64_t b, double s) {
    return half_round(t, (float)(s * ((double)(mix(tag, (uint64_t)a, (uint64_t)b) >> 11) * 0x1p-53 * 2.0 - 1.0)));
}
static float dec(par_dtype t, uint16_t h) { return (float)half_value(t, h); }

/* The region: column and row strategies as tests/params_suite.h writes them. */
static par_status make_tp(par_ctx *ctx, int sp, par_dtype dt, char *col, char *row, par_tp **tp) {
    const par_mesh *m = par_ctx_mesh(ctx);
    const int D = m->ndim == 2 ? m->dims[0] : 1, T = m->dims[m->ndim - 1];
    par_tp_desc d;
    memset(&d, 0, sizeof d);
    snprintf(col, 64, "((%d,1),(%d,1))", D, T);
    snprintf(row, 64, "((%d,%d),(1,%d))", D, T, T);
    d.rows = (int64_t)N * D, d.hidden = C, d.column = col, d.row = row, d.sequence_parallel = sp, d.dtype = dt;
    return par_tp_create(ctx, &d, tp);
}

/* This rank's data-parallel index (the rows' block) and tp index. */
static void indices(par_ctx *ctx, const par_tp_info *info, int *dr, int *ti) {
    par_comm_group *g;
    int n = 1;
    *dr = 0, *ti = info->index;
    if (info->data_dims) (void)par_ctx_group(ctx, info->data_dims, &g, dr, &n);
}

static int64_t comm_bytes(par_ctx *ctx) {
    const par_compute_table *ct = par_ctx_compute(ctx);
    par_mem_report r;
    memset(&r, 0, sizeof r);
    if (ct->memory_report(ct->user, &r) != PAR_OK) return -1;
    return r.current[PAR_MEM_COMM];
}

/* ---- collectives ---------------------------------------------------------------- */

static void collectives_case(par_ctx *ctx, int sp, par_dtype dt, counts *c) {
    char col[64], row[64];
    par_tp *tp = NULL, *tp32 = NULL;
    par_tp_info info;
    par_linear head;
    int dr = 0, ti = 0, T, per_step_differs = 0;
    int64_t held, r0, r, j, k, before, mid;
    uint16_t x[N * C], work[N * C], p[N * C], p2[N * C], y[N * V + 8], full[N * V + 8];
    const void *got = NULL;
    void *out = NULL;
    const char *dn = par_dtype_name(dt);
    TOK(c, make_tp(ctx, sp, dt, col, row, &tp));
    if (!tp) return;
    TOK(c, par_tp_get_info(tp, &info));
    TCHECK(c, info.dtype == dt, "info.dtype %s, want %s", par_dtype_name(info.dtype), dn);
    T = info.degree;
    indices(ctx, &info, &dr, &ti);
    held = par_tp_rows(tp, N);
    r0 = (sp ? ti * held : 0); /* this rank's first residual row within its data rank's N */

    /* gather_rows: every rank's rows, any bits */
    for (r = 0; r < held; r++)
        for (j = 0; j < C; j++) x[r * C + j] = bits(1, dr * N + r0 + r, j);
    memset(work, 0, sizeof work);
    TOK(c, par_tp_gather_rows(tp, N, C, x, work, &got));
    TCHECK(c, got == (sp && T > 1 ? (const void *)work : (const void *)x), "%s sp %d: *full points elsewhere", dn, sp);
    if (got) {
        const uint16_t *g = (const uint16_t *)got;
        int same = 1;
        for (r = 0; r < N; r++)
            for (j = 0; j < C; j++) same &= g[r * C + j] == bits(1, dr * N + r, j);
        TCHECK(c, same, "%s sp %d T %d: gathered rows differ from the ranks' bits", dn, sp, T);
    }

    /* reduce_rows: tp rank t's partial of element (row, j) is val(t, row, j) */
    for (r = 0; r < N; r++)
        for (j = 0; j < C; j++) p[r * C + j] = val(dt, 100 + (uint64_t)ti, dr * N + r, j, 4.0);
    memcpy(p2, p, sizeof p);
    memset(work, 0, sizeof work);
    TOK(c, par_tp_reduce_rows(tp, N, C, p, work, &out));
    TCHECK(c, out == (sp && T > 1 ? (void *)work : (void *)p), "%s sp %d: *out points elsewhere", dn, sp);
    if (out) {
        const uint16_t *o = (const uint16_t *)out;
        int same = 1;
        for (r = 0; r < N; r++)
            for (j = 0; j < C; j++) {
                float once = dec(dt, val(dt, 100, dr * N + r, j, 4.0));
                uint16_t step = val(dt, 100, dr * N + r, j, 4.0);
                int t;
                for (t = 1; t < T; t++) { /* member order, f32, rounded at the end */
                    const float v = dec(dt, val(dt, 100 + (uint64_t)t, dr * N + r, j, 4.0));
                    once += v;
                    step = half_round(dt, dec(dt, step) + v);
                }
                if (r >= r0 && r < r0 + held) same &= o[(r - r0) * C + j] == half_round(dt, once);
                per_step_differs += step != half_round(dt, once);
            }
        TCHECK(c, same, "%s sp %d T %d: the sum is not the f32 sum of the decoded partials rounded once", dn, sp, T);
        if (T > 2) TCHECK(c, per_step_differs > 0, "%s: rounding per step never differs here (the test cannot tell)", dn);
    }
    if (!sp) { /* out NULL: the same sum, in p */
        TOK(c, par_tp_reduce_rows(tp, N, C, p2, NULL, NULL));
        TCHECK(c, memcmp(p, p2, sizeof p) == 0, "%s: reduce_rows with out NULL differs from with out", dn);
    } else {
        TERR(c, par_tp_reduce_rows(tp, N, C, p2, work, NULL), PAR_EINVAL, "NULL out under sequence parallelism");
    }

    /* gather_columns: y [N, out_local] of a column-parallel head -> all V columns, bits as they are */
    TOK(c, par_tp_linear(tp, "lm_head", PAR_LINEAR_COLUMN, C, V, &head));
    for (r = 0; r < N; r++)
        for (j = 0; j < head.out_local; j++) y[r * head.out_local + j] = bits(2, r, head.out_start + j);
    /* past the end stays: the copy is N*V 16-bit values (one of 4-byte elements would
       bring y's tail, 0x1234, into full's) */
    for (k = 0; k < N * V + 8; k++) full[k] = 0xabcd, y[k] = k < N * head.out_local ? y[k] : 0x1234;
    TOK(c, par_tp_gather_columns(tp, &head, N, y, full));
    {
        int same = 1;
        for (r = 0; r < N; r++)
            for (j = 0; j < V; j++) same &= full[r * V + j] == bits(2, r, j);
        for (k = N * V; k < N * V + 8; k++) same &= full[k] == 0xabcd;
        TCHECK(c, same, "%s T %d: gathered columns differ (or wrote past N*V values)", dn, T);
    }

    /* the executor's workspace: 4 buffers of the largest slice, 2 bytes an element */
    TCHECK(c, par_tp_workspace_bytes(tp, N, C) == (T > 1 ? 4 * N * C * 2 : 0), "%s: workspace %lld", dn,
           (long long)par_tp_workspace_bytes(tp, N, C));
    par_tp_destroy(tp), tp = NULL;
    before = comm_bytes(ctx);
    TOK(c, make_tp(ctx, sp, dt, col, row, &tp));
    TOK(c, make_tp(ctx, sp, PAR_F32, col, row, &tp32));
    if (!tp || !tp32) {
        par_tp_destroy(tp), par_tp_destroy(tp32);
        return;
    }
    TCHECK(c, par_tp_workspace_bytes(tp32, N, C) == 2 * par_tp_workspace_bytes(tp, N, C), "f32 workspace %lld",
           (long long)par_tp_workspace_bytes(tp32, N, C));
    memcpy(p, p2, sizeof p);
    TOK(c, sp ? par_tp_gather_rows(tp, N, C, x, work, &got) : par_tp_reduce_rows(tp, N, C, p, work, &out));
    mid = comm_bytes(ctx);
    TCHECK(c, mid - before == par_tp_workspace_bytes(tp, N, C), "%s sp %d: the executor allocated %lld PAR_MEM_COMM "
           "bytes, par_tp_workspace_bytes says %lld", dn, sp, (long long)(mid - before),
           (long long)par_tp_workspace_bytes(tp, N, C));
    {
        float xf[N * C], wf[N * C];
        const void *gf;
        void *of;
        memset(xf, 0, sizeof xf);
        TOK(c, sp ? par_tp_gather_rows(tp32, N, C, xf, wf, &gf) : par_tp_reduce_rows(tp32, N, C, xf, wf, &of));
    }
    TCHECK(c, comm_bytes(ctx) - mid == 2 * (mid - before), "f32 region: %lld PAR_MEM_COMM bytes, the %s one %lld",
           (long long)(comm_bytes(ctx) - mid), dn, (long long)(mid - before));
    par_tp_destroy(tp32);
    par_tp_destroy(tp);
    TCHECK(c, comm_bytes(ctx) == before, "PAR_MEM_COMM after destroy %lld, before %lld", (long long)comm_bytes(ctx),
           (long long)before);
}

static void bad_dtype(par_ctx *ctx, counts *c) {
    const par_mesh *m = par_ctx_mesh(ctx);
    const int D = m->ndim == 2 ? m->dims[0] : 1, T = m->dims[m->ndim - 1];
    char col[64], row[64];
    par_tp_desc d;
    par_tp *tp = NULL;
    memset(&d, 0, sizeof d);
    snprintf(col, sizeof col, "((%d,1),(%d,1))", D, T);
    snprintf(row, sizeof row, "((%d,%d),(1,%d))", D, T, T);
    d.rows = (int64_t)N * D, d.hidden = C, d.column = col, d.row = row;
    d.dtype = PAR_I32;
    TERR(c, par_tp_create(ctx, &d, &tp), PAR_EINVAL, "par_tp_create: dtype i32 (3): the activations' type (desc.dtype)");
    TCHECK(c, tp == NULL, "a refused region was returned");
    d.dtype = PAR_F64;
    TERR(c, par_tp_create(ctx, &d, &tp), PAR_EINVAL, "dtype f64 (5)");
    d.dtype = (par_dtype)77;
    TERR(c, par_tp_create(ctx, &d, &tp), PAR_EINVAL, "dtype ? (77)");
    d.dtype = (par_dtype)0; /* zero: f32 */
    TOK(c, par_tp_create(ctx, &d, &tp));
    if (tp) {
        par_tp_info info;
        TOK(c, par_tp_get_info(tp, &info));
        TCHECK(c, info.dtype == PAR_F32 && par_tp_workspace_bytes(tp, N, C) == (T > 1 ? 4 * N * C * 4 : 0),
               "zero dtype: %s, workspace %lld", par_dtype_name(info.dtype), (long long)par_tp_workspace_bytes(tp, N, C));
    }
    par_tp_destroy(tp);
}

/* ---- the staged table: 16-bit hooks over the CPU table's f32 kernels --------------- */

/* One CPU table for all rank threads (a table is used by one thread at a
   time): every stateful hook runs under the lock. The 16-bit dtypes seen by
   each hook, per rank thread, show what the helpers passed. */
static par_compute_table stg_base;
static pthread_mutex_t stg_mu = PTHREAD_MUTEX_INITIALIZER;
static _Thread_local int stg_seen[PAR_DTYPE_COUNT];

static float *widen(par_dtype t, const void *src, int64_t n) {
    float *f = (float *)malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
    int64_t i;
    if (f)
        for (i = 0; i < n; i++) f[i] = dec(t, ((const uint16_t *)src)[i]);
    return f;
}
static void narrow(par_dtype t, const float *f, void *dst, int64_t n) {
    int64_t i;
    for (i = 0; i < n; i++) ((uint16_t *)dst)[i] = half_round(t, f[i]);
}
static par_status stg_type(par_dtype t) {
    if ((unsigned)t < PAR_DTYPE_COUNT) stg_seen[t]++;
    if (t == PAR_BF16 || t == PAR_F16) return PAR_OK;
    return par_set_error(PAR_EINVAL, "staged table: dtype %d", (int)t);
}
#define STG_LOCKED(call) \
    do { par_status s_; pthread_mutex_lock(&stg_mu); s_ = (call); pthread_mutex_unlock(&stg_mu); return s_; } while (0)

static par_status stg_alloc(void *u, size_t b, par_mem_category k, void **p) { (void)u; STG_LOCKED(stg_base.alloc(stg_base.user, b, k, p)); }
static void stg_free(void *u, void *p) {
    (void)u;
    pthread_mutex_lock(&stg_mu);
    stg_base.free(stg_base.user, p);
    pthread_mutex_unlock(&stg_mu);
}
static par_status stg_report(void *u, par_mem_report *r) { (void)u; STG_LOCKED(stg_base.memory_report(stg_base.user, r)); }

static par_status stg_emb_fwd(void *u, par_dtype t, int64_t n, const int32_t *ids, const void *table, int64_t rows,
                              int64_t dim, int64_t start, void *out) {
    float *tf, *of;
    par_status st;
    (void)u;
    if (t == PAR_F32) STG_LOCKED(stg_base.embedding_fwd(stg_base.user, t, n, ids, table, rows, dim, start, out));
    if (stg_type(t) != PAR_OK) return PAR_EINVAL;
    tf = widen(t, table, rows * dim), of = (float *)malloc((size_t)(n * dim + 1) * sizeof(float));
    pthread_mutex_lock(&stg_mu);
    st = tf && of ? stg_base.embedding_fwd(stg_base.user, PAR_F32, n, ids, tf, rows, dim, start, of) : PAR_ENOMEM;
    pthread_mutex_unlock(&stg_mu);
    if (st == PAR_OK) narrow(t, of, out, n * dim);
    return free(tf), free(of), st;
}
static par_status stg_emb_bwd(void *u, par_dtype t, int64_t n, const int32_t *ids, const void *dout, int64_t rows,
                              int64_t dim, int64_t start, float *dtable) {
    float *df;
    par_status st;
    (void)u;
    if (t == PAR_F32) STG_LOCKED(stg_base.embedding_bwd(stg_base.user, t, n, ids, dout, rows, dim, start, dtable));
    if (stg_type(t) != PAR_OK) return PAR_EINVAL;
    df = widen(t, dout, n * dim);
    pthread_mutex_lock(&stg_mu);
    st = df ? stg_base.embedding_bwd(stg_base.user, PAR_F32, n, ids, df, rows, dim, start, dtable) : PAR_ENOMEM;
    pthread_mutex_unlock(&stg_mu);
    return free(df), st;
}
static par_status stg_xent(void *u, par_dtype t, int64_t rows, int64_t vocab, const void *logits, const int32_t *targets,
                           float *loss, void *dlogits, float scale) {
    float *lf;
    par_status st;
    (void)u;
    if (t == PAR_F32) STG_LOCKED(stg_base.xent(stg_base.user, t, rows, vocab, logits, targets, loss, dlogits, scale));
    if (stg_type(t) != PAR_OK) return PAR_EINVAL;
    lf = widen(t, logits, rows * vocab);
    pthread_mutex_lock(&stg_mu);
    st = lf ? stg_base.xent(stg_base.user, PAR_F32, rows, vocab, lf, targets, loss, dlogits ? lf : NULL, scale) : PAR_ENOMEM;
    pthread_mutex_unlock(&stg_mu);
    if (st == PAR_OK && dlogits) narrow(t, lf, dlogits, rows * vocab);
    return free(lf), st;
}
static par_status stg_xmax(void *u, par_dtype t, int64_t rows, int64_t v, const void *logits, float *mx) {
    float *lf;
    par_status st;
    (void)u;
    if (t == PAR_F32) STG_LOCKED(stg_base.xent_local_max(stg_base.user, t, rows, v, logits, mx));
    if (stg_type(t) != PAR_OK) return PAR_EINVAL;
    lf = widen(t, logits, rows * v);
    pthread_mutex_lock(&stg_mu);
    st = lf ? stg_base.xent_local_max(stg_base.user, PAR_F32, rows, v, lf, mx) : PAR_ENOMEM;
    pthread_mutex_unlock(&stg_mu);
    return free(lf), st;
}
static par_status stg_xsum(void *u, par_dtype t, int64_t rows, int64_t v, const void *logits, const float *gmax,
                           float *sum) {
    float *lf;
    par_status st;
    (void)u;
    if (t == PAR_F32) STG_LOCKED(stg_base.xent_local_sumexp(stg_base.user, t, rows, v, logits, gmax, sum));
    if (stg_type(t) != PAR_OK) return PAR_EINVAL;
    lf = widen(t, logits, rows * v);
    pthread_mutex_lock(&stg_mu);
    st = lf ? stg_base.xent_local_sumexp(stg_base.user, PAR_F32, rows, v, lf, gmax, sum) : PAR_ENOMEM;
    pthread_mutex_unlock(&stg_mu);
    return free(lf), st;
}
static par_status stg_xtgt(void *u, par_dtype t, int64_t rows, int64_t v, const void *logits, const int32_t *targets,
                           int64_t start, float *tgt) {
    float *lf;
    par_status st;
    (void)u;
    if (t == PAR_F32) STG_LOCKED(stg_base.xent_local_target(stg_base.user, t, rows, v, logits, targets, start, tgt));
    if (stg_type(t) != PAR_OK) return PAR_EINVAL;
    lf = widen(t, logits, rows * v);
    pthread_mutex_lock(&stg_mu);
    st = lf ? stg_base.xent_local_target(stg_base.user, PAR_F32, rows, v, lf, targets, start, tgt) : PAR_ENOMEM;
    pthread_mutex_unlock(&stg_mu);
    return free(lf), st;
}
static par_status stg_xpieces(void *u, int64_t rows, const float *gmax, const float *gsum, const float *tgt,
                              const int32_t *targets, float *loss) {
    (void)u;
    STG_LOCKED(stg_base.xent_loss_from_pieces(stg_base.user, rows, gmax, gsum, tgt, targets, loss));
}
static par_status stg_xbwd(void *u, par_dtype t, int64_t rows, int64_t v, const void *logits, const int32_t *targets,
                           int64_t start, const float *gmax, const float *gsum, float scale, void *dlogits) {
    float *lf;
    par_status st;
    (void)u;
    if (t == PAR_F32)
        STG_LOCKED(stg_base.xent_bwd_split(stg_base.user, t, rows, v, logits, targets, start, gmax, gsum, scale, dlogits));
    if (stg_type(t) != PAR_OK) return PAR_EINVAL;
    lf = widen(t, logits, rows * v);
    pthread_mutex_lock(&stg_mu);
    st = lf ? stg_base.xent_bwd_split(stg_base.user, PAR_F32, rows, v, lf, targets, start, gmax, gsum, scale, lf) : PAR_ENOMEM;
    pthread_mutex_unlock(&stg_mu);
    if (st == PAR_OK) narrow(t, lf, dlogits, rows * v);
    return free(lf), st;
}

static par_compute_table staged_table(void) {
    par_compute_table t = stg_base;
    t.name = "staged16";
    t.alloc = stg_alloc, t.free = stg_free, t.memory_report = stg_report;
    t.embedding_fwd = stg_emb_fwd, t.embedding_bwd = stg_emb_bwd;
    t.xent = stg_xent, t.xent_local_max = stg_xmax, t.xent_local_sumexp = stg_xsum, t.xent_local_target = stg_xtgt;
    t.xent_loss_from_pieces = stg_xpieces, t.xent_bwd_split = stg_xbwd;
    return t;
}

/* ---- kernels through the region: 16-bit against f32 on the decoded inputs ------------ */

static int32_t id_of(int64_t row) { return (int32_t)((row * 7 + 3) % V); }

static void kernels_case(par_ctx *ctx, int sp, int vp, par_dtype dt, counts *c) {
    char col[64], row[64];
    par_tp *tp = NULL, *tp32 = NULL;
    par_tp_info info;
    par_embedding emb, emb32;
    par_linear head;
    int dr = 0, ti = 0, seen_before = stg_seen[dt];
    int64_t held, r0, r, j, i;
    uint16_t tab[V * C], out[N * C], work[N * V], dout[N * C], lg[N * V];
    float tabf[V * C], outf[N * C], workf[N * V], doutf[N * C], lgf[N * V];
    float dtab[V * C], dtabf[V * C], loss[N], lossf[N], xw[3 * N], xwf[3 * N];
    int32_t ids[N];
    const char *dn = par_dtype_name(dt);
    TOK(c, make_tp(ctx, sp, dt, col, row, &tp));
    TOK(c, make_tp(ctx, sp, PAR_F32, col, row, &tp32));
    if (!tp || !tp32) {
        par_tp_destroy(tp), par_tp_destroy(tp32);
        return;
    }
    TOK(c, par_tp_get_info(tp, &info));
    indices(ctx, &info, &dr, &ti);
    held = par_tp_rows(tp, N);
    r0 = sp ? ti * held : 0;
    for (r = 0; r < N; r++) ids[r] = id_of(dr * N + r);

    /* embedding forward: out rows are the table's bits */
    TOK(c, par_tp_embedding(tp, "emb", V, C, vp, &emb));
    TOK(c, par_tp_embedding(tp32, "emb", V, C, vp, &emb32));
    for (i = 0; i < emb.rows_local * C; i++) tab[i] = val(dt, 3, emb.row_start + i / C, i % C, 2.0), tabf[i] = dec(dt, tab[i]);
    memset(out, 0, sizeof out);
    TOK(c, par_tp_embedding_fwd(tp, &emb, N, ids, tab, out, work));
    {
        int same = 1;
        for (r = 0; r < held; r++)
            for (j = 0; j < C; j++) same &= out[r * C + j] == val(dt, 3, ids[r0 + r], j, 2.0);
        TCHECK(c, same, "%s sp %d vp %d: embedding rows differ from the table's bits", dn, sp, vp);
    }
    TOK(c, par_tp_embedding_fwd(tp32, &emb32, N, ids, tabf, outf, workf));
    {
        int same = 1;
        for (i = 0; i < held * C; i++) same &= out[i] == half_round(dt, outf[i]);
        TCHECK(c, same, "%s sp %d vp %d: embedding differs from the f32 region's, rounded", dn, sp, vp);
    }

    /* embedding backward: dtable (f32) as the f32 region's on the decoded dout */
    for (r = 0; r < held; r++)
        for (j = 0; j < C; j++)
            dout[r * C + j] = val(dt, 4, dr * N + r0 + r, j, 1.0), doutf[r * C + j] = dec(dt, dout[r * C + j]);
    memset(dtab, 0, sizeof dtab), memset(dtabf, 0, sizeof dtabf);
    TOK(c, par_tp_embedding_bwd(tp, &emb, N, ids, dout, dtab, work));
    TOK(c, par_tp_embedding_bwd(tp32, &emb32, N, ids, doutf, dtabf, workf));
    {
        int nonzero = 0;
        for (i = 0; i < emb.rows_local * C; i++) nonzero += dtab[i] != 0.0f;
        TCHECK(c, memcmp(dtab, dtabf, sizeof dtab) == 0 && nonzero > 0, "%s sp %d vp %d: dtable differs from the f32 "
               "region's on the decoded dout (%d nonzero)", dn, sp, vp, nonzero);
    }

    /* cross-entropy: losses bitwise the f32 region's, dlogits rounded once */
    TOK(c, par_tp_linear(tp, "lm_head", PAR_LINEAR_COLUMN, C, V, &head));
    for (r = 0; r < N; r++)
        for (j = 0; j < head.out_local; j++)
            lg[r * head.out_local + j] = val(dt, 5, dr * N + r, head.out_start + j, 6.0),
            lgf[r * head.out_local + j] = dec(dt, lg[r * head.out_local + j]);
    {
        int32_t tg[N];
        int same = 1, moved = 0;
        memcpy(tg, ids, sizeof tg);
        tg[N - 1] = -1; /* an ignored row */
        TOK(c, par_tp_cross_entropy(tp, &head, N, lg, tg, loss, 0.25f, xw));
        TOK(c, par_tp_cross_entropy(tp32, &head, N, lgf, tg, lossf, 0.25f, xwf));
        TCHECK(c, memcmp(loss, lossf, sizeof loss) == 0 && loss[0] > 0.0f && loss[N - 1] == 0.0f,
               "%s sp %d: losses differ from the f32 region's on the decoded logits (%g vs %g)", dn, sp, (double)loss[0],
               (double)lossf[0]);
        for (i = 0; i < N * head.out_local; i++) {
            same &= lg[i] == half_round(dt, lgf[i]);
            moved += lgf[i] != 0.0f;
        }
        TCHECK(c, same && moved > 0, "%s sp %d: dlogits are not the f32 region's rounded once", dn, sp);
    }
    TCHECK(c, stg_seen[dt] > seen_before, "the helpers never passed %s to the kernels", dn);
    TCHECK(c, stg_seen[PAR_I32] == 0 && stg_seen[PAR_F64] == 0, "a helper passed another dtype");
    par_tp_destroy(tp32);
    par_tp_destroy(tp);
}

/* ---- the runs ------------------------------------------------------------------ */

typedef struct run {
    int kernels; /* 0: the collectives on the default table; 1: the kernels on the staged table */
    int passed[8], failed[8];
} run;

static par_status rank_body(par_ctx *ctx, void *arg) {
    run *rn = (run *)arg;
    const int k = par_ctx_rank(ctx);
    const par_dtype types[2] = {PAR_BF16, PAR_F16};
    counts c;
    int sp, t, vp;
    if (k < 0 || k >= 8) return par_set_error(PAR_EINVAL, "rank %d outside the test's table", k);
    memset(&c, 0, sizeof c);
    c.rank = k;
    for (t = 0; t < 2; t++)
        for (sp = 0; sp < 2; sp++) {
            if (!rn->kernels) collectives_case(ctx, sp, types[t], &c);
            else
                for (vp = 0; vp < 2; vp++) kernels_case(ctx, sp, vp, types[t], &c);
        }
    if (!rn->kernels) bad_dtype(ctx, &c);
    rn->passed[k] = c.passed, rn->failed[k] = c.failed;
    return PAR_OK;
}

static void on_mesh(const char *mesh, int n, int kernels) {
    static run r;
    par_ctx_desc d;
    par_compute_table staged;
    int k, p = 0, f = 0;
    memset(&r, 0, sizeof r);
    memset(&d, 0, sizeof d);
    r.kernels = kernels;
    d.mesh = mesh, d.timeout_ms = 20000, d.kernel_threads = 1;
    if (kernels) staged = staged_table(), d.compute = &staged;
    CHECK_OK(par_run_threads_desc(&d, n, rank_body, &r));
    for (k = 0; k < n; k++) p += r.passed[k], f += r.failed[k];
    CHECK_MSG(f == 0 && p > 0, "mesh %s (%s): %d failed, %d passed", mesh, kernels ? "kernels" : "collectives", f, p);
    test_passed_ += p, test_failed_ += f;
    printf("  %-10s %d ranks, %-11s: %d passed, %d failed\n", mesh, n, kernels ? "kernels" : "collectives", p, f);
}

int main(void) {
    par_cpu_desc cd;
    static const char *meshes[] = {"tp=2", "tp=4", "dp=2,tp=2", "dp=2,tp=1"};
    static const int sizes[] = {2, 4, 4, 2};
    int m;
    memset(&cd, 0, sizeof cd);
    cd.threads = 1;
    CHECK_OK(par_compute_cpu(&cd, &stg_base));
    for (m = 0; m < 4; m++) {
        on_mesh(meshes[m], sizes[m], 0);
        on_mesh(meshes[m], sizes[m], 1);
    }
    stg_base.destroy(stg_base.user);
    return TEST_END("tp16");
}
