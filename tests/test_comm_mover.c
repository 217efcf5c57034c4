/* tests/test_comm_mover.c - the threads backend over a data mover
   (par_run_threads_mover), with a mock "device" on the host.

   The mock is a device whose memory the host must not touch: every buffer its
   compute table allocates has a visible part (the pointer the program and the
   backend see) that stays zero, and a shadow elsewhere that holds the bytes.
   Only the mock's own hooks translate a pointer to its shadow: the compute
   table's memcpy (host <-> device) and the mover's copy and reduce. So a byte
   the backend moved with a plain memcpy, or reduced with its own loop, is lost
   (it lands in, or is read from, the zero visible part) and the comm suite's
   exact expectations fail; and a visible part found non-zero when freed is
   counted. The mover queues its work per rank and does it only at sync, so a
   backend that released a buffer, or reported an op done, before syncing
   would be seen with stale bytes too. Its reduce is written here, from the
   rule of the declaration (f32 accumulation in member order, one rounding),
   with tests/half.h's converters, not the library's.

   Then: every rank makes its own compute table through rank_compute (one
   made, one destroyed per rank); hooks fail on purpose (copy on one rank,
   sync before a send) and every member reports PAR_ECOMM naming the rank and
   the hook, the group refusing later collectives; bad movers are refused.
   Usage: test_comm_mover [--quick] (the suite's 1M-element sizes left out). */
#include "test.h"
#include "comm_suite.h"
#include "half.h"
#include <pthread.h>
#include <stdlib.h>

/* ---- the mock device ----------------------------------------------------- */

typedef struct mock_alloc {
    unsigned char *vis, *shadow;
    size_t bytes;
    struct mock_alloc *next;
} mock_alloc;

typedef struct mock_op {
    int is_reduce, n;
    void *dst;
    const void *srcs[1024];
    int64_t count;
    size_t bytes;
    par_dtype dtype;
    par_reduce_op op;
    struct mock_op *next;
} mock_op;

typedef struct mock_dev {
    pthread_mutex_t mu;
    mock_alloc *allocs;
    mock_op *head[64], *tail[64]; /* per rank: queued, done at sync */
    int nranks;
    /* counters (under mu) */
    long copies, reduces, syncs, deferred, bad_rank, bad_pointer, dirty, tables_made, tables_destroyed;
    long long copy_bytes, reduce_elems;
    /* failure injection: hook `fail_hook` ("copy", "sync") fails on rank
       fail_rank (-1: any) at its fail_after-th call there (1-based) */
    const char *fail_hook;
    int fail_rank;
    long fail_after, fail_calls;
} mock_dev;

typedef struct mock_table_user {
    mock_dev *dev;
    int rank;
} mock_table_user;

/* The shadow of device address p (interior pointers too), or NULL. */
static unsigned char *mock_shadow(mock_dev *d, const void *p, size_t bytes) {
    mock_alloc *a;
    const unsigned char *q = (const unsigned char *)p;
    for (a = d->allocs; a; a = a->next)
        if (q >= a->vis && q + bytes <= a->vis + a->bytes) return a->shadow + (q - a->vis);
    d->bad_pointer++;
    return NULL;
}

static int mock_should_fail(mock_dev *d, const char *hook, int rank) {
    if (!d->fail_hook || strcmp(d->fail_hook, hook) != 0 || (d->fail_rank >= 0 && rank != d->fail_rank)) return 0;
    return ++d->fail_calls == d->fail_after;
}

/* f32 accumulation in member order, one rounding for 16 bits; the integer
   sums wrap; avg divides by n (integers truncating). */
static void mock_reduce_now(mock_dev *d, const mock_op *o) {
    unsigned char *dst = mock_shadow(d, o->dst, (size_t)o->count * par_dtype_size(o->dtype));
    const unsigned char *src[1024];
    int64_t k;
    int i;
    if (!dst) return;
    for (i = 0; i < o->n; i++)
        if ((src[i] = mock_shadow(d, o->srcs[i], (size_t)o->count * par_dtype_size(o->dtype))) == NULL) return;
    for (k = 0; k < o->count; k++) {
        if (o->dtype == PAR_F32 || o->dtype == PAR_BF16 || o->dtype == PAR_F16) {
            float acc = 0, x;
            for (i = 0; i < o->n; i++) {
                if (o->dtype == PAR_F32) memcpy(&x, src[i] + 4 * k, 4);
                else {
                    uint16_t h;
                    memcpy(&h, src[i] + 2 * k, 2);
                    x = (float)half_value(o->dtype, h);
                }
                acc = i == 0 ? x : o->op == PAR_REDUCE_MAX ? (x > acc ? x : acc) : acc + x;
            }
            if (o->op == PAR_REDUCE_AVG) acc /= (float)o->n;
            if (o->dtype == PAR_F32) memcpy(dst + 4 * k, &acc, 4);
            else {
                uint16_t h = half_round(o->dtype, acc);
                memcpy(dst + 2 * k, &h, 2);
            }
        } else if (o->dtype == PAR_F64) {
            double acc = 0, x;
            for (i = 0; i < o->n; i++) {
                memcpy(&x, src[i] + 8 * k, 8);
                acc = i == 0 ? x : o->op == PAR_REDUCE_MAX ? (x > acc ? x : acc) : acc + x;
            }
            if (o->op == PAR_REDUCE_AVG) acc /= o->n;
            memcpy(dst + 8 * k, &acc, 8);
        } else if (o->dtype == PAR_I32) {
            int32_t acc = 0, x;
            for (i = 0; i < o->n; i++) {
                memcpy(&x, src[i] + 4 * k, 4);
                acc = i == 0 ? x : o->op == PAR_REDUCE_MAX ? (x > acc ? x : acc) : (int32_t)((uint32_t)acc + (uint32_t)x);
            }
            if (o->op == PAR_REDUCE_AVG) acc /= o->n;
            memcpy(dst + 4 * k, &acc, 4);
        } else {
            int64_t acc = 0, x;
            for (i = 0; i < o->n; i++) {
                memcpy(&x, src[i] + 8 * k, 8);
                acc = i == 0 ? x : o->op == PAR_REDUCE_MAX ? (x > acc ? x : acc) : (int64_t)((uint64_t)acc + (uint64_t)x);
            }
            if (o->op == PAR_REDUCE_AVG) acc /= o->n;
            memcpy(dst + 8 * k, &acc, 8);
        }
    }
}

static par_status mock_enqueue(mock_dev *d, int rank, mock_op *o, const char *hook) {
    pthread_mutex_lock(&d->mu);
    if (rank < 0 || rank >= d->nranks) {
        d->bad_rank++;
        pthread_mutex_unlock(&d->mu);
        free(o);
        return par_set_error(PAR_EINVAL, "mock %s: rank %d outside the world", hook, rank);
    }
    if (mock_should_fail(d, hook, rank)) {
        pthread_mutex_unlock(&d->mu);
        free(o);
        return par_set_error(PAR_EIO, "mock device: injected %s failure", hook);
    }
    o->next = NULL;
    if (d->tail[rank]) d->tail[rank]->next = o;
    else d->head[rank] = o;
    d->tail[rank] = o;
    if (o->is_reduce) d->reduces++, d->reduce_elems += o->count;
    else d->copies++, d->copy_bytes += (long long)o->bytes;
    pthread_mutex_unlock(&d->mu);
    return PAR_OK;
}

static par_status mock_copy(void *user, int rank, void *dst, const void *src, size_t bytes) {
    mock_op *o = (mock_op *)calloc(1, sizeof *o);
    if (!o) return par_set_error(PAR_ENOMEM, "mock copy: out of memory");
    o->dst = dst, o->srcs[0] = src, o->bytes = bytes;
    return mock_enqueue((mock_dev *)user, rank, o, "copy");
}

static par_status mock_reduce(void *user, int rank, void *dst, const void *const *srcs, int n, int64_t count,
                              par_dtype dtype, par_reduce_op op) {
    mock_op *o = (mock_op *)calloc(1, sizeof *o);
    if (!o) return par_set_error(PAR_ENOMEM, "mock reduce: out of memory");
    o->is_reduce = 1, o->dst = dst, o->n = n, o->count = count, o->dtype = dtype, o->op = op;
    memcpy(o->srcs, srcs, sizeof(void *) * (size_t)n);
    return mock_enqueue((mock_dev *)user, rank, o, "reduce");
}

/* The rank's queue, in order; the work of the copies and reductions happens only here. */
static par_status mock_sync(void *user, int rank) {
    mock_dev *d = (mock_dev *)user;
    mock_op *o;
    pthread_mutex_lock(&d->mu);
    if (rank < 0 || rank >= d->nranks) {
        d->bad_rank++;
        pthread_mutex_unlock(&d->mu);
        return par_set_error(PAR_EINVAL, "mock sync: rank %d outside the world", rank);
    }
    d->syncs++;
    if (mock_should_fail(d, "sync", rank)) {
        pthread_mutex_unlock(&d->mu);
        return par_set_error(PAR_EIO, "mock device: injected sync failure");
    }
    while ((o = d->head[rank]) != NULL) {
        d->head[rank] = o->next;
        if (!o->next) d->tail[rank] = NULL;
        d->deferred++;
        if (o->is_reduce) mock_reduce_now(d, o);
        else {
            unsigned char *to = mock_shadow(d, o->dst, o->bytes), *from = mock_shadow(d, o->srcs[0], o->bytes);
            if (to && from) memmove(to, from, o->bytes);
        }
        free(o);
    }
    pthread_mutex_unlock(&d->mu);
    return PAR_OK;
}

/* ---- the mock's compute table: memory only ------------------------------- */

static par_status mock_t_alloc(void *user, size_t bytes, par_mem_category category, void **ptr) {
    mock_dev *d = ((mock_table_user *)user)->dev;
    mock_alloc *a = (mock_alloc *)calloc(1, sizeof *a);
    (void)category;
    if (!a || !(a->vis = (unsigned char *)calloc(1, bytes)) || !(a->shadow = (unsigned char *)calloc(1, bytes))) {
        if (a) free(a->vis), free(a);
        return par_set_error(PAR_ENOMEM, "mock alloc: out of memory");
    }
    a->bytes = bytes;
    pthread_mutex_lock(&d->mu);
    a->next = d->allocs;
    d->allocs = a;
    pthread_mutex_unlock(&d->mu);
    *ptr = a->vis;
    return PAR_OK;
}

static void mock_t_free(void *user, void *ptr) {
    mock_dev *d = ((mock_table_user *)user)->dev;
    mock_alloc **p, *a = NULL;
    size_t k;
    pthread_mutex_lock(&d->mu);
    for (p = &d->allocs; *p; p = &(*p)->next)
        if ((*p)->vis == ptr) {
            a = *p;
            *p = a->next;
            break;
        }
    if (a)
        for (k = 0; k < a->bytes; k++)
            if (a->vis[k]) {
                d->dirty++; /* somebody wrote device memory without the hooks */
                break;
            }
    pthread_mutex_unlock(&d->mu);
    if (a) free(a->vis), free(a->shadow), free(a);
}

static par_status mock_t_memcpy(void *user, void *dst, const void *src, size_t bytes, par_copy_kind kind) {
    mock_dev *d = ((mock_table_user *)user)->dev;
    unsigned char *to = (unsigned char *)dst;
    const unsigned char *from = (const unsigned char *)src;
    pthread_mutex_lock(&d->mu);
    if (kind == PAR_COPY_HOST_TO_DEVICE || kind == PAR_COPY_DEVICE_TO_DEVICE) to = mock_shadow(d, dst, bytes);
    if (kind == PAR_COPY_DEVICE_TO_HOST || kind == PAR_COPY_DEVICE_TO_DEVICE) from = mock_shadow(d, src, bytes);
    if (to && from) memmove(to, from, bytes);
    pthread_mutex_unlock(&d->mu);
    return to && from ? PAR_OK : par_set_error(PAR_EINVAL, "mock memcpy: not device memory");
}

static par_status mock_t_memset(void *user, void *dst, int value, size_t bytes) {
    mock_dev *d = ((mock_table_user *)user)->dev;
    unsigned char *to;
    pthread_mutex_lock(&d->mu);
    if ((to = mock_shadow(d, dst, bytes)) != NULL) memset(to, value, bytes);
    pthread_mutex_unlock(&d->mu);
    return to ? PAR_OK : par_set_error(PAR_EINVAL, "mock memset: not device memory");
}

static void mock_t_destroy(void *user) {
    mock_table_user *u = (mock_table_user *)user;
    pthread_mutex_lock(&u->dev->mu);
    u->dev->tables_destroyed++;
    pthread_mutex_unlock(&u->dev->mu);
    free(u);
}

static par_status mock_rank_compute(void *user, int rank, par_compute_table *t) {
    mock_dev *d = (mock_dev *)user;
    mock_table_user *u = (mock_table_user *)calloc(1, sizeof *u);
    if (!u) return par_set_error(PAR_ENOMEM, "mock rank_compute: out of memory");
    u->dev = d, u->rank = rank;
    memset(t, 0, sizeof *t);
    t->version = PAR_COMPUTE_TABLE_VERSION;
    t->name = "mockdev";
    t->user = u;
    t->device_memory = 1;
    t->alloc = mock_t_alloc;
    t->free = mock_t_free;
    t->memcpy = mock_t_memcpy;
    t->memset = mock_t_memset;
    t->destroy = mock_t_destroy;
    pthread_mutex_lock(&d->mu);
    d->tables_made++;
    pthread_mutex_unlock(&d->mu);
    return PAR_OK;
}

static void mock_init(mock_dev *d, int nranks, par_thr_mover *mv) {
    memset(d, 0, sizeof *d);
    pthread_mutex_init(&d->mu, NULL);
    d->nranks = nranks;
    memset(mv, 0, sizeof *mv);
    mv->user = d;
    mv->copy = mock_copy;
    mv->reduce = mock_reduce;
    mv->sync = mock_sync;
    mv->rank_compute = mock_rank_compute;
}

static void mock_done(mock_dev *d) {
    int r;
    for (r = 0; r < d->nranks; r++) CHECK_MSG(d->head[r] == NULL, "rank %d's queue was left with work in it", r);
    CHECK_MSG(d->allocs == NULL, "device memory left allocated");
    pthread_mutex_destroy(&d->mu);
}

/* ---- the comm suite through the mover ------------------------------------ */

typedef struct suite_run {
    int quick;
    int passed[64], failed[64];
    const char *table_name[64];
} suite_run;

static par_status run_suite_rank(par_ctx *ctx, void *arg) {
    suite_run *s = (suite_run *)arg;
    int r = par_ctx_rank(ctx);
    s->table_name[r] = par_ctx_compute(ctx)->name;
    s->failed[r] = comm_suite_run(ctx, s->quick, &s->passed[r]);
    return PAR_OK;
}

static void run_suite(const char *mesh, int n, int quick) {
    static suite_run s;
    static mock_dev dev;
    par_thr_mover mv;
    par_ctx_desc d;
    int r, passed = 0, failed = 0;
    memset(&s, 0, sizeof s);
    memset(&d, 0, sizeof d);
    mock_init(&dev, n, &mv);
    s.quick = quick;
    d.mesh = mesh;
    d.timeout_ms = 20000;
    CHECK_OK(par_run_threads_mover(&d, &mv, n, run_suite_rank, &s));
    for (r = 0; r < n; r++) {
        passed += s.passed[r];
        failed += s.failed[r];
        CHECK_MSG(s.table_name[r] && strcmp(s.table_name[r], "mockdev") == 0, "rank %d computed on %s", r,
                  s.table_name[r] ? s.table_name[r] : "(nothing)");
    }
    CHECK_MSG(failed == 0 && passed > 0, "mesh %s on %d threads: %d suite checks failed, %d passed",
              mesh ? mesh : "(1-D)", n, failed, passed);
    test_passed_ += passed;
    test_failed_ += failed;
    /* the work went through the hooks, was deferred to the syncs, and nothing
       touched device memory any other way */
    CHECK_MSG(dev.copies > 0 && (dev.reduces > 0 || n == 1), "%ld copies, %ld reductions through the mover", dev.copies, dev.reduces);
    CHECK_MSG(dev.deferred == dev.copies + dev.reduces, "%ld of %ld queued ops done at a sync", dev.deferred,
              dev.copies + dev.reduces);
    CHECK_INT(dev.bad_pointer, 0);
    CHECK_INT(dev.bad_rank, 0);
    CHECK_INT(dev.dirty, 0);
    CHECK_INT(dev.tables_made, n);
    CHECK_INT(dev.tables_destroyed, n);
    mock_done(&dev);
    printf("  suite on %-8s %d ranks: %d passed, %d failed (mover: %ld copies of %lld bytes, %ld reductions of "
           "%lld elements, %ld syncs)\n", mesh ? mesh : "1-D", n, passed, failed, dev.copies, dev.copy_bytes,
           dev.reduces, dev.reduce_elems, dev.syncs);
}

/* ---- exact hook traffic of single ops ------------------------------------ */

enum { OP_GATHER, OP_REDUCE, OP_P2P };

typedef struct traffic_run {
    int op;
    rank_counts c[4];
} traffic_run;

/* One op on 4 ranks over 256 f32 per rank, its result checked. */
static par_status traffic_rank(par_ctx *ctx, void *arg) {
    traffic_run *t = (traffic_run *)arg;
    int r = par_ctx_rank(ctx), i;
    rank_counts *c = &t->c[r];
    const par_compute_table *m = par_ctx_compute(ctx);
    float host[4 * 256];
    void *a = NULL, *b = NULL;
    c->rank = r;
    RETURN_IF_ERR(m->alloc(m->user, sizeof host, PAR_MEM_COMM, &a));
    RETURN_IF_ERR(m->alloc(m->user, sizeof host, PAR_MEM_COMM, &b));
    for (i = 0; i < 256; i++) host[i] = (float)(r * 1000 + i);
    RETURN_IF_ERR(m->memcpy(m->user, a, host, 256 * sizeof(float), PAR_COPY_HOST_TO_DEVICE));
    if (t->op == OP_GATHER) {
        RANK_OK(c, par_all_gather(ctx, NULL, a, b, 256, PAR_F32, NULL));
        RETURN_IF_ERR(m->memcpy(m->user, host, b, sizeof host, PAR_COPY_DEVICE_TO_HOST));
        for (i = 0; i < 4 * 256 && host[i] == (float)((i / 256) * 1000 + i % 256); i++) {
        }
        RANK_CHECK(c, i == 4 * 256, "all_gather: element %d is %g", i, i < 4 * 256 ? host[i] : 0.0);
    } else if (t->op == OP_REDUCE) {
        RANK_OK(c, par_all_reduce(ctx, NULL, a, a, 256, PAR_F32, PAR_REDUCE_SUM, NULL)); /* in place */
        RETURN_IF_ERR(m->memcpy(m->user, host, a, 256 * sizeof(float), PAR_COPY_DEVICE_TO_HOST));
        for (i = 0; i < 256 && host[i] == (float)(6000 + 4 * i); i++) {
        }
        RANK_CHECK(c, i == 256, "all_reduce: element %d is %g", i, i < 256 ? host[i] : 0.0);
    } else if (r < 2) { /* rank 0 sends 100 floats to rank 1: async send, blocking recv */
        par_request *q = NULL;
        if (r == 0) {
            RANK_OK(c, par_send(ctx, NULL, a, 100, PAR_F32, 1, &q));
            RANK_OK(c, par_ctx_comm(ctx)->wait(par_ctx_comm(ctx)->user, q));
        } else {
            RANK_OK(c, par_recv(ctx, NULL, b, 100, PAR_F32, 0, NULL));
            RETURN_IF_ERR(m->memcpy(m->user, host, b, 100 * sizeof(float), PAR_COPY_DEVICE_TO_HOST));
            for (i = 0; i < 100 && host[i] == (float)i; i++) {
            }
            RANK_CHECK(c, i == 100, "recv: element %d is %g", i, i < 100 ? host[i] : 0.0);
        }
    }
    m->free(m->user, a);
    m->free(m->user, b);
    return PAR_OK;
}

/* The bytes through the mover are exactly those the op must move: nothing
   moved twice, nothing moved around the hooks. */
static void test_traffic(void) {
    static const struct {
        int op;
        const char *name;
        long copies, reduces;
        long long bytes, elems;
    } cases[] = {
        /* every rank copies the 4 blocks (none is in place) */
        {OP_GATHER, "all_gather", 16, 0, 16 * 1024, 0},
        /* every rank reduces its 64-element slice in place and copies it to the 3 others */
        {OP_REDUCE, "all_reduce", 12, 4, 12 * 256, 256},
        {OP_P2P, "send/recv", 1, 0, 400, 0},
    };
    size_t k;
    int r;
    for (k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        static mock_dev dev;
        traffic_run t;
        par_thr_mover mv;
        memset(&t, 0, sizeof t);
        t.op = cases[k].op;
        mock_init(&dev, 4, &mv);
        CHECK_OK(par_run_threads_mover(NULL, &mv, 4, traffic_rank, &t));
        for (r = 0; r < 4; r++) test_passed_ += t.c[r].passed, test_failed_ += t.c[r].failed;
        CHECK_MSG(dev.copies == cases[k].copies && dev.copy_bytes == cases[k].bytes,
                  "%s: %ld copies of %lld bytes, want %ld of %lld", cases[k].name, dev.copies, dev.copy_bytes,
                  cases[k].copies, cases[k].bytes);
        CHECK_MSG(dev.reduces == cases[k].reduces && dev.reduce_elems == cases[k].elems,
                  "%s: %ld reductions of %lld elements, want %ld of %lld", cases[k].name, dev.reduces,
                  dev.reduce_elems, cases[k].reduces, cases[k].elems);
        CHECK_INT(dev.dirty, 0);
        mock_done(&dev);
    }
}

/* ---- failing hooks ------------------------------------------------------- */

typedef struct fault_run {
    int op; /* OP_REDUCE: two all_reduces; OP_P2P: a send and recv */
    par_status st[4], again[4];
    char msg[4][512], again_msg[4][512];
} fault_run;

static par_status fault_rank(par_ctx *ctx, void *arg) {
    fault_run *f = (fault_run *)arg;
    int r = par_ctx_rank(ctx);
    const par_compute_table *m = par_ctx_compute(ctx);
    void *a = NULL;
    RETURN_IF_ERR(m->alloc(m->user, 4096, PAR_MEM_COMM, &a));
    if (f->op == OP_REDUCE) {
        f->st[r] = par_all_reduce(ctx, NULL, a, a, 1024, PAR_F32, PAR_REDUCE_SUM, NULL);
        snprintf(f->msg[r], sizeof f->msg[r], "%s", par_last_error());
        f->again[r] = par_all_reduce(ctx, NULL, a, a, 1024, PAR_F32, PAR_REDUCE_SUM, NULL);
        snprintf(f->again_msg[r], sizeof f->again_msg[r], "%s", par_last_error());
    } else if (r < 2) {
        f->st[r] = r == 0 ? par_send(ctx, NULL, a, 1024, PAR_F32, 1, NULL) : par_recv(ctx, NULL, a, 1024, PAR_F32, 0, NULL);
        snprintf(f->msg[r], sizeof f->msg[r], "%s", par_last_error());
    }
    m->free(m->user, a);
    return PAR_OK;
}

static void test_faults(void) {
    static mock_dev dev;
    static fault_run f;
    par_thr_mover mv;
    par_ctx_desc d;
    int r;
    memset(&d, 0, sizeof d);
    d.timeout_ms = 2000;
    /* rank 2's first copy fails inside the all_reduce: every member fails with
       its words, and the group refuses the next collective */
    memset(&f, 0, sizeof f);
    f.op = OP_REDUCE;
    mock_init(&dev, 4, &mv);
    dev.fail_hook = "copy", dev.fail_rank = 2, dev.fail_after = 1;
    CHECK_OK(par_run_threads_mover(&d, &mv, 4, fault_rank, &f));
    for (r = 0; r < 4; r++) {
        CHECK_MSG(f.st[r] == PAR_ECOMM && strstr(f.msg[r], "all_reduce on group [0,1,2,3]: rank 2's data mover failed "
                                                          "in copy: mock device: injected copy failure"),
                  "rank %d: %s: %s", r, par_status_string(f.st[r]), f.msg[r]);
        CHECK_MSG(f.again[r] == PAR_ECOMM && strstr(f.again_msg[r], "the group is unusable after an earlier failure"),
                  "rank %d again: %s: %s", r, par_status_string(f.again[r]), f.again_msg[r]);
    }
    mock_done(&dev);
    /* the copy of a send/recv pair fails: both sides say so */
    memset(&f, 0, sizeof f);
    f.op = OP_P2P;
    mock_init(&dev, 4, &mv);
    dev.fail_hook = "copy", dev.fail_rank = -1, dev.fail_after = 1; /* whichever rank posts second copies */
    CHECK_OK(par_run_threads_mover(&d, &mv, 4, fault_rank, &f));
    CHECK_MSG(f.st[0] == PAR_ECOMM && strstr(f.msg[0], "send to rank 1 on group [0,1,2,3]: rank ") &&
                  strstr(f.msg[0], "'s data mover failed in copy: mock device: injected copy failure"),
              "rank 0: %s: %s", par_status_string(f.st[0]), f.msg[0]);
    CHECK_MSG(f.st[1] == PAR_ECOMM && strstr(f.msg[1], "recv from rank 0 on group [0,1,2,3]: rank ") &&
                  strstr(f.msg[1], "'s data mover failed in copy: mock device: injected copy failure"),
              "rank 1: %s: %s", par_status_string(f.st[1]), f.msg[1]);
    mock_done(&dev);
    /* rank 0's sync before its send fails: rank 0 is told, rank 1's recv
       that rank 0 went away without sending */
    memset(&f, 0, sizeof f);
    f.op = OP_P2P;
    mock_init(&dev, 4, &mv);
    dev.fail_hook = "sync", dev.fail_rank = 0, dev.fail_after = 1;
    CHECK_OK(par_run_threads_mover(&d, &mv, 4, fault_rank, &f));
    CHECK_MSG(f.st[0] == PAR_ECOMM && strstr(f.msg[0], "send on group [0,1,2,3]: rank 0's data mover failed in sync "
                                                     "before the op: mock device: injected sync failure"),
              "rank 0: %s: %s", par_status_string(f.st[0]), f.msg[0]);
    CHECK_MSG(f.st[1] == PAR_ECOMM && strstr(f.msg[1], "recv from rank 0 on group [0,1,2,3]: rank 0 returned from its "
                                                     "function"),
              "rank 1: %s: %s", par_status_string(f.st[1]), f.msg[1]);
    mock_done(&dev);
}

/* ---- refused movers ------------------------------------------------------ */

static par_status noop_rank(par_ctx *ctx, void *arg) {
    (void)ctx, (void)arg;
    return PAR_OK;
}

static void test_refused(void) {
    static mock_dev dev;
    par_thr_mover mv, bad;
    par_compute_table cpu;
    par_ctx_desc d;
    mock_init(&dev, 2, &mv);
    bad = mv, bad.copy = NULL;
    CHECK_ERR(par_run_threads_mover(NULL, &bad, 2, noop_rank, NULL), PAR_EINVAL, "the mover's copy hook is NULL");
    bad = mv, bad.reduce = NULL;
    CHECK_ERR(par_run_threads_mover(NULL, &bad, 2, noop_rank, NULL), PAR_EINVAL, "the mover's reduce hook is NULL");
    bad = mv, bad.sync = NULL;
    CHECK_ERR(par_run_threads_mover(NULL, &bad, 2, noop_rank, NULL), PAR_EINVAL, "the mover's sync hook is NULL");
    CHECK_OK(par_compute_cpu(NULL, &cpu));
    memset(&d, 0, sizeof d);
    d.compute = &cpu;
    CHECK_ERR(par_run_threads_mover(&d, &mv, 2, noop_rank, NULL), PAR_EINVAL,
              "desc->compute and the mover's rank_compute both give the ranks a compute table");
    /* without rank_compute the ranks take desc->compute */
    bad = mv, bad.rank_compute = NULL;
    CHECK_OK(par_run_threads_mover(&d, &bad, 2, noop_rank, NULL));
    CHECK_INT(dev.tables_made, 0);
    /* NULL mover: par_run_threads_desc */
    CHECK_OK(par_run_threads_mover(NULL, NULL, 2, noop_rank, NULL));
    CHECK_ERR(par_run_threads_mover(NULL, &mv, 0, noop_rank, NULL), PAR_EINVAL, "0 ranks, need 1..");
    cpu.destroy(cpu.user);
    mock_done(&dev);
}

int main(int argc, char **argv) {
    int quick = argc > 1 && strcmp(argv[1], "--quick") == 0;
    run_suite("dp=2,tp=2", 4, quick);
    run_suite(NULL, 3, quick);
    run_suite(NULL, 1, 1);
    run_suite("a=2,b=2,c=2", 8, 1);
    test_traffic();
    test_faults();
    test_refused();
    return TEST_END("comm_mover");
}
