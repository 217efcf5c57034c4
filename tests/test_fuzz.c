/* tests/test_fuzz.c - deterministic fuzz of parallel.h's public entry points.

   Tens of thousands of random and malformed inputs (mesh, layout and strategy text;
   random shapes, maps, operators, redistribution pairs and reshapes). Every call must
   return PAR_OK or a clean error: a status from PAR_STATUS_LIST and a non-empty
   par_last_error() sentence. Never a crash (run it under -fsanitize=address,undefined).
   Where a call succeeds, cheap consistency properties are checked too (text form
   round-trips, enumerated strategies infer, plans simulate to their target).

   Checks are aggregated: one CHECK per block of 1000 calls of a category (all clean),
   plus one per category at the end. */
#include "test.h"

#include <stdarg.h>
#include <stdlib.h>

/* ---------------------------------------------------------------------------
   deterministic random numbers
   ------------------------------------------------------------------------- */

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;

static uint64_t rnd(void) {
    /* xorshift64* */
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return rng_state * 0x2545F4914F6CDD1Dull;
}

/* Uniform in [lo, hi]. */
static int rint_(int lo, int hi) { return lo + (int)(rnd() % (uint64_t)(hi - lo + 1)); }

static int chance(int percent) { return (int)(rnd() % 100) < percent; }

/* ---------------------------------------------------------------------------
   bookkeeping: per category, calls, unclean calls and the current 1000-block
   ------------------------------------------------------------------------- */

enum {
    CAT_MESH_PARSE,
    CAT_LAYOUT_PARSE,
    CAT_STRATEGY_PARSE,
    CAT_NAME_PARSE,
    CAT_LAYOUT_INIT,
    CAT_LAYOUT_RAW_MESH,
    CAT_OP_INFER,
    CAT_OP_STRATEGIES,
    CAT_PLAN,
    CAT_RESHAPE,
    CAT_COMM_ARGS,
    CAT_PROPERTY,
    CAT_COUNT
};

static const char *const cat_names[CAT_COUNT] = {
    "mesh_parse", "layout_parse", "strategy_parse", "dtype/op name parse", "layout_init", "layout_init raw mesh",
    "op_infer", "op_strategies", "plan_redistribution", "layout_reshape", "comm_check_args/ranks",
    "properties of successful calls"};

typedef struct cat_stats {
    long calls, bad, block_calls, block_bad, ok;
} cat_stats;

static cat_stats stats[CAT_COUNT];
static int reports_left = 20;

static int status_known(par_status st) {
    switch (st) {
#define FUZZ_STATUS_CASE(name, value, text) \
    case name:                              \
        return 1;
        PAR_STATUS_LIST(FUZZ_STATUS_CASE)
#undef FUZZ_STATUS_CASE
    default:
        return 0;
    }
}

static void close_block(int cat) {
    cat_stats *s = &stats[cat];
    CHECK_MSG(s->block_bad == 0, "%s: %ld of %ld calls in a block were not clean", cat_names[cat], s->block_bad,
              s->block_calls);
    s->block_calls = s->block_bad = 0;
}

/* Record one outcome. `clean` is the verdict, `what` describes the input. */
static void record(int cat, int clean, const char *what) {
    cat_stats *s = &stats[cat];
    s->calls++;
    s->block_calls++;
    if (!clean) {
        s->bad++;
        s->block_bad++;
        if (reports_left > 0) {
            reports_left--;
            fprintf(stderr, "fuzz: %s: not clean: %s (last error: \"%s\")\n", cat_names[cat], what, par_last_error());
        }
    }
    if (s->block_calls == 1000) close_block(cat);
}

/* Check a status the way every category does, and count it. Returns 1 on PAR_OK. */
static int outcome(int cat, par_status st, const char *what) {
    int clean = st == PAR_OK || (status_known(st) && st != PAR_OK && par_last_error()[0] != 0);
    char buf[600];
    if (!clean) {
        snprintf(buf, sizeof buf, "status %d (%s) for %s", (int)st, par_status_string(st), what);
        record(cat, 0, buf);
    } else {
        record(cat, 1, what);
    }
    if (st == PAR_OK) stats[cat].ok++;
    return st == PAR_OK;
}

static void property(int ok, const char *what) { record(CAT_PROPERTY, ok, what); }

/* ---------------------------------------------------------------------------
   string mutation
   ------------------------------------------------------------------------- */

#define TEXT_MAX 6000

static const char interesting[] = "[](),=-0123456789 xX,()[]partial=None dp tp cp_";

static void mutate(char *s) {
    size_t len = strlen(s);
    int kind = rint_(0, 11), i, n;
    switch (kind) {
    case 0: /* flip a byte to something interesting */
        if (len) s[rnd() % len] = interesting[rnd() % (sizeof interesting - 1)];
        break;
    case 1: /* flip a byte to anything but NUL */
        if (len) s[rnd() % len] = (char)rint_(1, 255);
        break;
    case 2: /* insert */
        if (len + 2 < TEXT_MAX) {
            size_t at = len ? rnd() % (len + 1) : 0;
            memmove(s + at + 1, s + at, len - at + 1);
            s[at] = chance(70) ? interesting[rnd() % (sizeof interesting - 1)] : (char)rint_(1, 255);
        }
        break;
    case 3: /* delete */
        if (len) {
            size_t at = rnd() % len;
            memmove(s + at, s + at + 1, len - at);
        }
        break;
    case 4: /* truncate */
        if (len) s[rnd() % len] = 0;
        break;
    case 5: { /* huge number */
        static const char *const huge[] = {"99999999999999999999999", "2147483648", "-2147483649", "4294967296",
                                           "9223372036854775807",     "-9223372036854775808", "1e9", "0x10",
                                           "00000000000000000000001", "-0", "+3", "18446744073709551617"};
        const char *h = huge[rnd() % (sizeof huge / sizeof huge[0])];
        size_t hl = strlen(h), at = len ? rnd() % (len + 1) : 0;
        if (len + hl + 1 < TEXT_MAX) {
            memmove(s + at + hl, s + at, len - at + 1);
            memcpy(s + at, h, hl);
        }
        break;
    }
    case 6: /* deep parentheses */
        n = rint_(1, 2000);
        if ((size_t)(2 * n) + len + 1 < TEXT_MAX) {
            memmove(s + n, s, len + 1);
            memset(s, chance(50) ? '(' : '[', (size_t)n);
            len += (size_t)n;
            if (chance(50)) {
                memset(s + len, chance(50) ? ')' : ']', (size_t)n);
                s[len + (size_t)n] = 0;
            }
        }
        break;
    case 7: /* empty */
        s[0] = 0;
        break;
    case 8: /* duplicate a chunk */
        if (len) {
            size_t at = rnd() % len, l = 1 + rnd() % (len - at);
            if (len + l + 1 < TEXT_MAX) {
                /* shifting the tail right by l leaves the chunk twice */
                memmove(s + at + l, s + at, len - at + 1);
            }
        }
        break;
    case 9: /* very long repetition */
        n = rint_(1, 40);
        for (i = 0; i < n && len * 2 + 1 < TEXT_MAX; i++) {
            memmove(s + len, s, len + 1);
            len *= 2;
        }
        break;
    case 10: /* whitespace */
        if (len + 2 < TEXT_MAX) {
            size_t at = rnd() % (len + 1);
            memmove(s + at + 1, s + at, len - at + 1);
            s[at] = " \t\n"[rnd() % 3];
        }
        break;
    default: /* swap two bytes */
        if (len > 1) {
            size_t a = rnd() % len, b = rnd() % len;
            char c = s[a];
            s[a] = s[b];
            s[b] = c;
        }
        break;
    }
}

/* A mutated (or, now and then, pristine) copy of a random seed. */
static void make_text(char *out, const char *const *seeds, int nseeds) {
    int m, i;
    strcpy(out, seeds[rnd() % (uint64_t)nseeds]);
    m = chance(20) ? 0 : rint_(1, 3);
    for (i = 0; i < m; i++) mutate(out);
}

/* Printable summary of a (possibly binary, possibly huge) input for reports. */
static const char *show(const char *s, char *buf, size_t size) {
    size_t i, j = 0;
    for (i = 0; s[i] && j + 5 < size; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c >= 32 && c < 127) {
            buf[j++] = (char)c;
        } else {
            j += (size_t)snprintf(buf + j, size - j, "\\x%02x", c);
        }
    }
    buf[j < size ? j : size - 1] = 0;
    return buf;
}

/* A tiny string builder for input descriptions (snprintf over a moving cursor). */
typedef struct sbuf {
    char *p;
    size_t size, len;
} sbuf;

static void sb_init(sbuf *b, char *p, size_t size) {
    b->p = p;
    b->size = size;
    b->len = 0;
    p[0] = 0;
}

#if defined(__GNUC__) || defined(__clang__)
__attribute__((format(printf, 2, 3)))
#endif
static void sb_printf(sbuf *b, const char *fmt, ...) {
    va_list ap;
    int n;
    if (b->len >= b->size) return;
    va_start(ap, fmt);
    n = vsnprintf(b->p + b->len, b->size - b->len, fmt, ap);
    va_end(ap);
    if (n > 0) b->len += (size_t)n;
}

/* ---------------------------------------------------------------------------
   text parsers
   ------------------------------------------------------------------------- */

static const char *const mesh_seeds[] = {"2,4", "2x4", "dp=2,tp=4", "8", "1", "dp=2,cp=2,tp=2", "2,2,2,2,2,2,2,2",
                                         "a=3,b=5", "3x1x2", "dp=1"};

static void fuzz_mesh_parse(int n) {
    static char text[TEXT_MAX], buf[TEXT_MAX], shown[300];
    int i;
    for (i = 0; i < n; i++) {
        par_mesh m, m2;
        make_text(text, mesh_seeds, (int)(sizeof mesh_seeds / sizeof mesh_seeds[0]));
        par_clear_error();
        if (outcome(CAT_MESH_PARSE, par_mesh_parse(text, &m), show(text, shown, sizeof shown))) {
            /* the formatted mesh ("[dp=2,tp=4]") without brackets parses back the same */
            int len = par_mesh_format(&m, buf, sizeof buf), ok;
            ok = len >= 2 && (size_t)len < sizeof buf && buf[0] == '[' && buf[len - 1] == ']';
            if (ok) {
                buf[len - 1] = 0;
                ok = par_mesh_parse(buf + 1, &m2) == PAR_OK && m2.ndim == m.ndim &&
                     memcmp(m2.dims, m.dims, sizeof(int) * (size_t)m.ndim) == 0 &&
                     par_mesh_size(&m2) == par_mesh_size(&m);
            }
            property(ok, "mesh format/parse round trip");
        }
    }
}

static const char *const layout_seeds[] = {"[1,-1]",
                                           "[(1,0),-1]",
                                           "[1,-1] partial=0",
                                           "[-1,-1] partial=(1,0)",
                                           "[0,1]",
                                           "[-1,0]",
                                           "[-1,-1]",
                                           "[dp,None]",
                                           "[(dp,tp),None]",
                                           "[None,None] partial=tp",
                                           "[None,tp]",
                                           "[tp,dp]",
                                           "[(0,1),-1]",
                                           "[1,-1] partial=(0)",
                                           "[]",
                                           "[-1,-1,-1]"};

/* Entries of a map text "[a,(b,c),d]" (top-level commas + 1; 0 for "[]"). */
static int map_entries(const char *s) {
    int depth = 0, n = 0, any = 0;
    for (; *s; s++) {
        if (*s == '[' || *s == '(') {
            depth++;
        } else if (*s == ']' || *s == ')') {
            depth--;
            if (depth <= 0) break;
        } else if (depth == 1 && *s == ',') {
            n++;
        } else if (depth >= 1 && *s != ' ') {
            any = 1;
        }
    }
    n = any || n ? n + 1 : 0;
    return n > PARALLEL_MAX_DIMS ? PARALLEL_MAX_DIMS : n;
}

static void fuzz_layout_parse(int n) {
    static char text[TEXT_MAX], buf[TEXT_MAX], shown[300];
    par_mesh meshes[4];
    static const char *const mesh_text[4] = {"2,4", "dp=2,tp=4", "8", "dp=2,cp=2,tp=2"};
    int i, k;
    for (k = 0; k < 4; k++) CHECK_OK(par_mesh_parse(mesh_text[k], &meshes[k]));
    for (i = 0; i < n; i++) {
        const par_mesh *mesh = &meshes[rnd() % 4];
        int64_t shape[PARALLEL_MAX_DIMS];
        int ndim, t;
        par_layout l, l2;
        for (t = 0; t < PARALLEL_MAX_DIMS; t++) shape[t] = chance(90) ? 8 * rint_(1, 3) : rint_(1, 9);
        make_text(text, layout_seeds, (int)(sizeof layout_seeds / sizeof layout_seeds[0]));
        ndim = chance(80) ? map_entries(text) : rint_(0, 3);
        par_clear_error();
        if (outcome(CAT_LAYOUT_PARSE, par_layout_parse(&l, mesh, ndim, shape, text), show(text, shown, sizeof shown))) {
            /* the numeric text form parses back to an equal layout and is valid */
            int len = par_layout_format(&l, buf, sizeof buf);
            property(len > 0 && (size_t)len < sizeof buf && par_layout_check(&l) == PAR_OK &&
                         par_layout_parse(&l2, mesh, ndim, shape, buf) == PAR_OK && par_layout_equal(&l, &l2),
                     "layout format/parse round trip");
        }
    }
}

static const char *const strategy_seeds[] = {"((2,1),(1,4))", "((8,),)", "((1,4),(4,1))", "((2,2),(2,2))",
                                             "((1,1,2,1),(1,1,2,1),(1,1,2,1))", "((4,1),)", "((2,1,4),(2,4,1))",
                                             "()", "((1),(1))", "((3,5),(5,7),(7,1),(1,1))"};

static void fuzz_strategy_parse(int n) {
    static char text[TEXT_MAX], buf[TEXT_MAX], shown[300];
    int i;
    for (i = 0; i < n; i++) {
        par_strategy s, s2;
        make_text(text, strategy_seeds, (int)(sizeof strategy_seeds / sizeof strategy_seeds[0]));
        par_clear_error();
        if (outcome(CAT_STRATEGY_PARSE, par_strategy_parse(text, &s), show(text, shown, sizeof shown))) {
            int len = par_strategy_format(&s, buf, sizeof buf), ok, k;
            ok = len > 0 && (size_t)len < sizeof buf && par_strategy_parse(buf, &s2) == PAR_OK &&
                 s2.num_inputs == s.num_inputs && s.num_inputs >= 0 && s.num_inputs <= PAR_MAX_INPUTS;
            for (k = 0; ok && k < s.num_inputs; k++)
                ok = s2.ndim[k] == s.ndim[k] && s.ndim[k] >= 0 && s.ndim[k] <= PARALLEL_MAX_DIMS &&
                     memcmp(s2.shard[k], s.shard[k], sizeof(int64_t) * (size_t)s.ndim[k]) == 0;
            property(ok, "strategy format/parse round trip");
        }
    }
}

static const char *const name_seeds[] = {"f32",     "bf16",          "i64",  "matmul", "MatMul", "BatchMatMul",
                                          "Add",     "reduce_mean",   "flash_attention", "FlashAttentionScore",
                                          "softmax", "SoftmaxCrossEntropyWithLogits"};

static void fuzz_names(int n) {
    static char text[TEXT_MAX], shown[300];
    int i;
    for (i = 0; i < n; i++) {
        par_dtype dt = PAR_DTYPE_COUNT; /* out of range until a successful parse sets it */
        par_op_kind kind = PAR_OP_COUNT;
        make_text(text, name_seeds, (int)(sizeof name_seeds / sizeof name_seeds[0]));
        par_clear_error();
        if (outcome(CAT_NAME_PARSE, par_dtype_parse(text, &dt), show(text, shown, sizeof shown)))
            property(dt >= 0 && dt < PAR_DTYPE_COUNT && par_dtype_size(dt) > 0, "dtype in range");
        par_clear_error();
        if (outcome(CAT_NAME_PARSE, par_op_kind_parse(text, &kind), show(text, shown, sizeof shown)))
            property(kind >= 0 && kind < PAR_OP_COUNT, "op kind in range");
    }
}

/* ---------------------------------------------------------------------------
   random structured inputs
   ------------------------------------------------------------------------- */

/* A valid random mesh with at most `max_devices` devices. */
static void random_mesh(par_mesh *m, int max_devices) {
    int dims[PARALLEL_MAX_DIMS], ndim = rint_(1, 4), i, prod = 1;
    static const char *const names[] = {"dp", "tp", "cp", "pp"};
    for (i = 0; i < ndim; i++) {
        dims[i] = rint_(1, 4);
        if (prod * dims[i] > max_devices) dims[i] = 1;
        prod *= dims[i];
    }
    if (par_mesh_init(m, ndim, dims, chance(30) ? (const char *const *)names : NULL) != PAR_OK) {
        fprintf(stderr, "fuzz: par_mesh_init failed on a valid mesh: %s\n", par_last_error());
        dims[0] = 1;
        par_mesh_init(m, 1, dims, NULL);
    }
}

/* A random tensor map over the mesh: usually valid (each device dim used at most
   once, some tuples, some partial), sometimes not. */
static void random_map(const par_mesh *m, int ndim, int *map, uint32_t *partial) {
    int used[PARALLEL_MAX_DIMS] = {0}, t;
    *partial = 0;
    for (t = 0; t < ndim; t++) {
        int v = rint_(-1, m->ndim - 1);
        if (chance(5)) v = rint_(-5, PARALLEL_MAX_DIMS + 2); /* out of range or repeated */
        if (v >= 0 && v < m->ndim && used[v] && chance(90)) v = -1;
        if (v >= 0 && v < m->ndim) used[v] = 1;
        map[t] = v;
    }
    if (chance(30)) {
        int v = rint_(0, m->ndim - 1);
        if (!used[v] || chance(5)) *partial |= 1u << v;
    }
    if (chance(2)) *partial |= 1u << rint_(0, 31);
}

/* A shape that each map entry's shard usually divides. */
static void random_shape(const par_mesh *m, int ndim, const int *map, int64_t *shape) {
    int t;
    for (t = 0; t < ndim; t++) {
        int64_t shard = (map[t] >= 0 && map[t] < m->ndim) ? m->dims[m->ndim - 1 - map[t]] : 1;
        shape[t] = shard * rint_(1, 3);
        if (chance(5)) shape[t] = rint_(-2, 7);
        if (chance(1)) shape[t] = (int64_t)1 << rint_(40, 62);
    }
}

static void describe_layout_args(char *buf, size_t size, const par_mesh *m, int ndim, const int64_t *shape,
                                 const int *map, uint32_t partial) {
    sbuf b;
    int t;
    sb_init(&b, buf, size);
    sb_printf(&b, "mesh ndim=%d [", m->ndim);
    for (t = 0; t < m->ndim && t < PARALLEL_MAX_DIMS; t++) sb_printf(&b, t ? ",%d" : "%d", m->dims[t]);
    sb_printf(&b, "] ndim=%d shape [", ndim);
    for (t = 0; t < ndim && t < PARALLEL_MAX_DIMS; t++) sb_printf(&b, t ? ",%lld" : "%lld", (long long)shape[t]);
    sb_printf(&b, "] map [");
    for (t = 0; t < ndim && t < PARALLEL_MAX_DIMS; t++) sb_printf(&b, t ? ",%d" : "%d", map ? map[t] : -1);
    sb_printf(&b, "] partial=0x%x", partial);
}

/* Properties of a layout the library accepted. */
static void check_layout_props(const par_layout *l) {
    int64_t local[PARALLEL_MAX_DIMS], off[PARALLEL_MAX_DIMS], numel = 1;
    int t, ok = par_layout_check(l) == PAR_OK, n = par_mesh_size(&l->mesh), r = (int)(rnd() % (uint64_t)n);
    par_layout_local_shape(l, local);
    for (t = 0; t < l->ndim; t++) {
        ok = ok && local[t] >= 1 && local[t] * par_layout_shards(l, t) == l->shape[t];
        numel *= local[t];
    }
    ok = ok && numel == par_layout_local_numel(l) && par_layout_local_offset(l, r, off) == PAR_OK;
    for (t = 0; ok && t < l->ndim; t++) ok = off[t] >= 0 && off[t] + local[t] <= l->shape[t] && off[t] % local[t] == 0;
    property(ok, "accepted layout: check, local shape, offsets");
}

static void fuzz_layout_init(int n) {
    static char what[600];
    int i;
    for (i = 0; i < n; i++) {
        par_mesh m;
        par_layout l;
        int64_t shape[PARALLEL_MAX_DIMS + 4];
        int map[PARALLEL_MAX_DIMS + 4];
        uint32_t partial;
        int ndim = rint_(0, 4);
        random_mesh(&m, 64);
        if (chance(3)) ndim = chance(50) ? -1 : PARALLEL_MAX_DIMS + 1;
        random_map(&m, ndim < 0 ? 0 : ndim, map, &partial);
        random_shape(&m, ndim < 0 ? 0 : ndim, map, shape);
        describe_layout_args(what, sizeof what, &m, ndim, shape, map, partial);
        par_clear_error();
        if (outcome(CAT_LAYOUT_INIT,
                    par_layout_init(&l, &m, ndim, shape, chance(5) ? NULL : map, partial), what))
            check_layout_props(&l);
    }
}

/* A hand-filled (possibly nonsense) mesh struct: the library must validate it. */
static void fuzz_layout_raw_mesh(int n) {
    static char what[600];
    int i, t;
    for (i = 0; i < n; i++) {
        par_mesh m;
        par_layout l;
        int64_t shape[PARALLEL_MAX_DIMS];
        int map[PARALLEL_MAX_DIMS];
        int ndim = rint_(0, 3);
        memset(&m, 0, sizeof m);
        m.ndim = rint_(-1, PARALLEL_MAX_DIMS + 1);
        for (t = 0; t < PARALLEL_MAX_DIMS; t++) m.dims[t] = chance(85) ? rint_(1, 4) : rint_(-3, 0);
        if (chance(3)) m.dims[rnd() % PARALLEL_MAX_DIMS] = INT32_MAX;
        for (t = 0; t < ndim; t++) {
            map[t] = rint_(-1, 3);
            shape[t] = 12 * rint_(1, 2);
        }
        describe_layout_args(what, sizeof what, &m, ndim, shape, map, 0);
        par_clear_error();
        if (outcome(CAT_LAYOUT_RAW_MESH, par_layout_init(&l, &m, ndim, shape, map, 0), what)) check_layout_props(&l);
    }
}

/* ---------------------------------------------------------------------------
   operators
   ------------------------------------------------------------------------- */

static int natural_inputs(par_op_kind k) {
    switch (k) {
    case PAR_OP_MATMUL:
    case PAR_OP_BATCH_MATMUL:
    case PAR_OP_ELEMENTWISE:
    case PAR_OP_RMSNORM:
    case PAR_OP_GATHER:
    case PAR_OP_CROSS_ENTROPY: return 2;
    case PAR_OP_LAYERNORM:
    case PAR_OP_FLASH_ATTENTION: return 3;
    default: return 1;
    }
}

static int64_t pick_dim(void) {
    static const int64_t dims[] = {1, 2, 4, 6, 8, 12, 16, 24, 32};
    if (chance(3)) return rint_(-1, 0);
    if (chance(1)) return (int64_t)1 << 61;
    return dims[rnd() % (sizeof dims / sizeof dims[0])];
}

/* A plausible operator desc: shapes that fit the operator most of the time. */
static void random_op(par_op_desc *op) {
    int i, t, nd;
    memset(op, 0, sizeof *op);
    op->kind = (par_op_kind)(chance(3) ? rint_(-1, PAR_OP_COUNT + 1) : rint_(0, PAR_OP_COUNT - 1));
    op->num_inputs = natural_inputs(op->kind);
    if (op->kind == PAR_OP_ELEMENTWISE) op->num_inputs = rint_(1, PAR_MAX_INPUTS);
    if (chance(5)) op->num_inputs = rint_(-1, PAR_MAX_INPUTS);
    if (chance(20)) op->num_inputs = 0; /* natural count */
    nd = rint_(1, 4);
    for (i = 0; i < PAR_MAX_INPUTS; i++) {
        op->ndim[i] = chance(97) ? nd : rint_(-1, PARALLEL_MAX_DIMS + 1);
        for (t = 0; t < PARALLEL_MAX_DIMS; t++) op->shape[i][t] = pick_dim();
    }
    /* Make the common cases consistent. */
    switch (op->kind) {
    case PAR_OP_MATMUL:
        op->ndim[0] = op->ndim[1] = 2;
        if (chance(80)) op->shape[1][0] = op->shape[0][1];
        break;
    case PAR_OP_BATCH_MATMUL:
        if (nd < 3) op->ndim[0] = op->ndim[1] = nd = 3;
        if (chance(80)) {
            for (t = 0; t < nd - 2; t++) op->shape[1][t] = op->shape[0][t];
            op->shape[1][nd - 2] = op->shape[0][nd - 1];
        }
        break;
    case PAR_OP_ELEMENTWISE:
        for (i = 1; i < PAR_MAX_INPUTS; i++)
            if (chance(80)) memcpy(op->shape[i], op->shape[0], sizeof op->shape[0]);
        break;
    case PAR_OP_RMSNORM:
    case PAR_OP_LAYERNORM:
        if (chance(80)) {
            op->ndim[1] = op->ndim[2] = 1;
            op->shape[1][0] = op->shape[2][0] =
                op->shape[0][op->ndim[0] > 0 && op->ndim[0] <= PARALLEL_MAX_DIMS ? op->ndim[0] - 1 : 0];
        }
        break;
    case PAR_OP_GATHER:
        op->ndim[0] = 2;
        if (chance(30)) op->shape[1][0] = rint_(0, 3); /* indices of another rank */
        break;
    case PAR_OP_CROSS_ENTROPY:
        if (chance(80)) {
            op->ndim[1] = op->ndim[0] - 1 > 0 ? op->ndim[0] - 1 : 1;
            memcpy(op->shape[1], op->shape[0], sizeof op->shape[0]);
        }
        break;
    case PAR_OP_FLASH_ATTENTION:
        op->ndim[0] = op->ndim[1] = op->ndim[2] = 4;
        if (chance(80)) {
            memcpy(op->shape[1], op->shape[0], sizeof op->shape[0]);
            memcpy(op->shape[2], op->shape[0], sizeof op->shape[0]);
        }
        break;
    default: break;
    }
    op->dtype = (par_dtype)(chance(95) ? rint_(0, PAR_DTYPE_COUNT - 1) : rint_(-2, PAR_DTYPE_COUNT + 2));
    op->params = (uint32_t)rnd() & (chance(95) ? 0xFu : 0xFFFFFFFFu);
    op->transpose_a = chance(20);
    op->transpose_b = chance(20);
    op->axes = chance(60) ? 0 : (uint32_t)rnd() & (chance(90) ? 0xFu : 0xFFFFFFFFu);
    op->keep_dims = chance(30);
    op->reduce_scatter = chance(20);
    if (op->kind == PAR_OP_TRANSPOSE || chance(5)) {
        /* a permutation of input 0's dims, or nonsense */
        nd = op->ndim[0] > 0 && op->ndim[0] <= PARALLEL_MAX_DIMS ? op->ndim[0] : 1;
        for (t = 0; t < nd; t++) op->perm[t] = t;
        for (t = nd - 1; t > 0; t--) {
            int j = rint_(0, t), tmp = op->perm[t];
            op->perm[t] = op->perm[j];
            op->perm[j] = tmp;
        }
        if (chance(10)) op->perm[rnd() % (uint64_t)nd] = rint_(-2, PARALLEL_MAX_DIMS + 2);
    }
    if (op->kind == PAR_OP_RESHAPE || chance(5)) {
        /* same element count regrouped, or something random */
        int64_t numel = 1;
        nd = op->ndim[0] > 0 && op->ndim[0] <= PARALLEL_MAX_DIMS ? op->ndim[0] : 1;
        for (t = 0; t < nd; t++) numel *= op->shape[0][t] > 0 && op->shape[0][t] < (1 << 20) ? op->shape[0][t] : 1;
        if (chance(80) && numel > 0 && numel < (1 << 20)) {
            int64_t rest = numel;
            op->out_ndim = 0;
            while (rest > 1 && op->out_ndim < PARALLEL_MAX_DIMS - 1) {
                int64_t f = chance(50) ? 2 : (rest % 3 == 0 ? 3 : rest);
                if (rest % f) f = rest;
                op->out_shape[op->out_ndim++] = f;
                rest /= f;
            }
            op->out_shape[op->out_ndim++] = rest;
        } else {
            op->out_ndim = rint_(-1, PARALLEL_MAX_DIMS + 1);
            for (t = 0; t < PARALLEL_MAX_DIMS; t++) op->out_shape[t] = pick_dim();
        }
    }
    if (chance(5)) op->device_flops = chance(50) ? -1.0 : 1e15;
    if (chance(5)) op->link_bandwidth = chance(50) ? -1.0 : 0.5;
}

static void random_strategy(const par_op_desc *op, par_strategy *s) {
    int i, t;
    static const int64_t shards[] = {1, 1, 1, 2, 2, 4, 3, 8};
    memset(s, 0, sizeof *s);
    s->num_inputs = op->num_inputs > 0 ? op->num_inputs : natural_inputs(op->kind);
    if (s->num_inputs > PAR_MAX_INPUTS) s->num_inputs = PAR_MAX_INPUTS;
    if (chance(5)) s->num_inputs = rint_(-1, PAR_MAX_INPUTS);
    for (i = 0; i < PAR_MAX_INPUTS; i++) {
        s->ndim[i] = op->ndim[i] >= 0 && op->ndim[i] <= PARALLEL_MAX_DIMS ? op->ndim[i] : 1;
        if (chance(3)) s->ndim[i] = rint_(-1, PARALLEL_MAX_DIMS + 1);
        for (t = 0; t < PARALLEL_MAX_DIMS; t++) {
            s->shard[i][t] = shards[rnd() % (sizeof shards / sizeof shards[0])];
            if (chance(2)) s->shard[i][t] = chance(50) ? rint_(-3, 0) : ((int64_t)1 << 62);
        }
    }
}

static void describe_op(char *buf, size_t size, const par_op_desc *op, const par_strategy *s, int devices) {
    sbuf b;
    int i, t;
    sb_init(&b, buf, size);
    sb_printf(&b, "op kind=%d inputs=%d devices=%d shapes", (int)op->kind, op->num_inputs, devices);
    for (i = 0; i < PAR_MAX_INPUTS && i < (op->num_inputs > 0 ? op->num_inputs : 3); i++) {
        sb_printf(&b, " [");
        for (t = 0; t < op->ndim[i] && t < PARALLEL_MAX_DIMS; t++)
            sb_printf(&b, t ? ",%lld" : "%lld", (long long)op->shape[i][t]);
        sb_printf(&b, "]");
    }
    sb_printf(&b, " ta=%d tb=%d axes=0x%x keep=%d rs=%d params=0x%x", op->transpose_a, op->transpose_b, op->axes,
                 op->keep_dims, op->reduce_scatter, op->params);
    if (s) {
        sb_printf(&b, " strategy ");
        if (s->num_inputs >= 0 && s->num_inputs <= PAR_MAX_INPUTS) {
            int ok = 1;
            for (i = 0; i < s->num_inputs; i++) ok = ok && s->ndim[i] >= 0 && s->ndim[i] <= PARALLEL_MAX_DIMS;
            if (ok) {
                char tmp[256];
                par_strategy_format(s, tmp, sizeof tmp);
                sb_printf(&b, "%s", tmp);
            } else {
                sb_printf(&b, "(bad ndim)");
            }
        } else {
            sb_printf(&b, "(num_inputs %d)", s->num_inputs);
        }
    }
}

/* Properties of an op_info the library produced. */
static void check_info_props(const par_op_info *info, int devices, const char *what) {
    const char *why = NULL;
    char buf[1400];
    int i;
    if (info->num_inputs < 1 || info->num_inputs > PAR_MAX_INPUTS || info->num_outputs < 1 ||
        info->num_outputs > PAR_MAX_OUTPUTS || info->num_forward < 0 || info->num_forward > 2)
        why = "counts out of range";
    else if (par_mesh_size(&info->dev_matrix) != devices)
        why = "device matrix does not cover the devices";
    else if (info->repeated < 1)
        why = "repeated < 1";
    for (i = 0; !why && i < info->num_inputs; i++)
        if (par_layout_check(&info->inputs[i]) != PAR_OK) why = "an input layout is invalid";
    for (i = 0; !why && i < info->num_outputs; i++)
        if (par_layout_check(&info->outputs[i]) != PAR_OK) why = "an output layout is invalid";
    if (!why && !(info->cost.compute_flops >= 0 && info->cost.comm_bytes >= 0 && info->cost.memory_bytes >= 0 &&
                  info->cost.total >= 0))
        why = "a cost is negative or NaN";
    snprintf(buf, sizeof buf, "inferred op info: %s: %s", why ? why : "ok", what);
    property(why == NULL, buf);
}

static void fuzz_op_infer(int n) {
    static char what[1200];
    int i;
    for (i = 0; i < n; i++) {
        par_op_desc op;
        par_strategy s;
        par_op_info info;
        int devices = chance(97) ? rint_(1, 16) : (chance(50) ? rint_(-2, 0) : (1 << 30));
        random_op(&op);
        random_strategy(&op, &s);
        if (chance(40)) { /* same tuple for every input: fits element-wise-like operators */
            int k;
            for (k = 1; k < PAR_MAX_INPUTS; k++)
                if (s.ndim[k] == s.ndim[0]) memcpy(s.shard[k], s.shard[0], sizeof s.shard[0]);
        }
        describe_op(what, sizeof what, &op, &s, devices);
        par_clear_error();
        if (outcome(CAT_OP_INFER, par_op_infer(&op, &s, devices, &info), what)) check_info_props(&info, devices, what);
    }
}

static void fuzz_op_strategies(int n) {
    static char what[1200];
    enum { CAP = 64 };
    static par_strategy list[CAP];
    static par_op_cost costs[CAP];
    int i;
    for (i = 0; i < n; i++) {
        par_op_desc op;
        par_op_info info;
        int devices = chance(97) ? rint_(1, 12) : rint_(-1, 0), count = -1, k, ok;
        int capacity = chance(90) ? CAP : rint_(0, 3);
        par_status st;
        random_op(&op);
        describe_op(what, sizeof what, &op, NULL, devices);
        par_clear_error();
        st = par_op_strategies(&op, devices, list, chance(80) ? costs : NULL, capacity, &count);
        if (st == PAR_ECAPACITY) {
            /* the listed prefix is valid; treat as success for the properties */
            outcome(CAT_OP_STRATEGIES, st, what);
            st = PAR_OK;
        } else if (!outcome(CAT_OP_STRATEGIES, st, what)) {
            continue;
        }
        /* every listed strategy must infer, with the listed cost order */
        ok = count >= 0;
        for (k = 0; ok && k < count && k < capacity && k < 4; k++) {
            par_clear_error();
            ok = par_op_infer(&op, &list[k], devices, &info) == PAR_OK;
            if (ok) check_info_props(&info, devices, what);
        }
        property(ok, what);
    }
}

/* ---------------------------------------------------------------------------
   redistribution and reshape
   ------------------------------------------------------------------------- */

/* A random layout the library accepts on mesh m with the given shape (or 0). */
static int random_valid_layout(const par_mesh *m, int ndim, const int64_t *shape, par_layout *l) {
    int map[PARALLEL_MAX_DIMS], tries;
    uint32_t partial;
    for (tries = 0; tries < 20; tries++) {
        random_map(m, ndim, map, &partial);
        par_clear_error();
        if (par_layout_init(l, m, ndim, shape, map, partial) == PAR_OK) return 1;
    }
    return par_layout_init(l, m, ndim, shape, NULL, 0) == PAR_OK;
}

static void fuzz_plan(int n) {
    static char what[1200];
    static double global[4096], bufs[64][4096];
    double *locals[64];
    int i, r;
    for (r = 0; r < 64; r++) locals[r] = bufs[r];
    for (i = 0; i < n; i++) {
        par_mesh m, m2;
        par_layout from, to;
        par_plan plan;
        par_cost_model cm, *cmp = NULL;
        int64_t shape[PARALLEL_MAX_DIMS], shape2[PARALLEL_MAX_DIMS];
        int ndim = rint_(1, 3), t, v;
        char a[256], b[256];
        random_mesh(&m, 16);
        /* shapes divisible by every mesh axis product so most maps are valid */
        for (t = 0; t < ndim; t++) shape[t] = (int64_t)par_mesh_size(&m) * rint_(1, 2);
        if (chance(10)) shape[rnd() % (uint64_t)ndim] = rint_(1, 5);
        if (!random_valid_layout(&m, ndim, shape, &from)) continue;
        memcpy(shape2, shape, sizeof shape);
        if (chance(5)) { /* a different mesh or shape: must be refused cleanly */
            random_mesh(&m2, 16);
            if (chance(50)) shape2[0] *= 2;
            if (!random_valid_layout(&m2, ndim, shape2, &to)) continue;
        } else if (!random_valid_layout(&m, ndim, shape, &to)) {
            continue;
        }
        if (chance(40)) {
            memset(&cm, 0, sizeof cm);
            for (v = 0; v < PARALLEL_MAX_DIMS; v++) {
                cm.link[v].latency = chance(50) ? 0 : rint_(0, 1000);
                cm.link[v].bandwidth = chance(50) ? 0 : rint_(1, 100) / 10.0;
                if (chance(2)) cm.link[v].bandwidth = -1;
                if (chance(2)) cm.link[v].latency = -5;
            }
            cmp = &cm;
        }
        par_layout_format(&from, a, sizeof a);
        par_layout_format(&to, b, sizeof b);
        snprintf(what, sizeof what, "plan mesh size %d ndim %d from %s to %s", par_mesh_size(&m), ndim, a, b);
        par_clear_error();
        if (outcome(CAT_PLAN, chance(15) ? par_plan_greedy(&from, &to, cmp, &plan)
                                         : par_plan_redistribution(&from, &to, cmp, &plan),
                    what)) {
            int ok = plan.num_ops >= 0 && plan.num_ops <= PAR_MAX_PLAN_OPS && plan.total_bytes >= 0;
            char text[8192];
            int len = par_plan_format(&plan, text, sizeof text);
            ok = ok && len > 0 && (size_t)len < sizeof text && strstr(text, "total bytes=") != NULL;
            /* Run small plans for all ranks and compare with the target slices. */
            if (ok && !to.map.partial && par_mesh_size(&m) <= 64 && plan.max_local_numel <= 4096 &&
                par_layout_local_numel(&from) <= 4096) {
                int64_t numel = 1;
                for (t = 0; t < ndim; t++) numel *= shape[t];
                if (numel <= 4096) {
                    for (t = 0; t < numel; t++) global[t] = (double)rint_(-50, 50);
                    ok = par_sim_scatter(&from, global, locals) == PAR_OK && par_sim_run(&plan, locals) == PAR_OK &&
                         par_sim_matches(&to, global, locals);
                }
            }
            property(ok, what);
        }
    }
}

static void fuzz_reshape(int n) {
    static char what[1200];
    int i;
    for (i = 0; i < n; i++) {
        par_mesh m;
        par_layout from, to;
        int64_t shape[PARALLEL_MAX_DIMS], target[PARALLEL_MAX_DIMS + 2], numel = 1, rest;
        int ndim = rint_(1, 4), tnd = 0, t;
        char a[256];
        random_mesh(&m, 16);
        for (t = 0; t < ndim; t++) {
            shape[t] = (int64_t)rint_(1, 3) * (chance(50) ? 4 : 2);
            numel *= shape[t];
        }
        if (!random_valid_layout(&m, ndim, shape, &from)) continue;
        /* target: a random factorization of numel (same count), or nonsense */
        rest = numel;
        while (rest > 1 && tnd < PARALLEL_MAX_DIMS - 1) {
            int64_t f = rint_(2, 8);
            if (rest % f) f = rest % 2 == 0 ? 2 : rest;
            target[tnd++] = f;
            rest /= f;
            if (chance(30)) break;
        }
        target[tnd++] = rest;
        if (chance(10)) target[rnd() % (uint64_t)tnd] += rint_(1, 3);
        if (chance(3)) tnd = chance(50) ? -1 : PARALLEL_MAX_DIMS + 1;
        if (chance(3)) target[0] = rint_(-2, 0);
        par_layout_format(&from, a, sizeof a);
        snprintf(what, sizeof what, "reshape %s of %d dims -> %d dims", a, ndim, tnd);
        par_clear_error();
        if (outcome(CAT_RESHAPE, par_layout_reshape(&from, tnd, target, &to), what))
            property(par_layout_check(&to) == PAR_OK && to.ndim == tnd &&
                         par_layout_local_numel(&to) == par_layout_local_numel(&from),
                     what);
    }
}

/* ---------------------------------------------------------------------------
   NULL and degenerate arguments to the text entry points
   ------------------------------------------------------------------------- */

/* ---------------------------------------------------------------------------
   comm argument rules: random calls, buffers at random offsets of one arena
   (so they overlap in every way), counts, dtypes, ops, peers and rank lists.
   Property: the verdict equals an independent reading of the table's rules.
   ------------------------------------------------------------------------- */

static int span_overlap(size_t a, size_t an, size_t b, size_t bn) { return an && bn && a < b + bn && b < a + an; }

/* The rules of par_comm_table's comment, written again from it (offsets in one arena). */
static int comm_args_valid(const par_comm_args *a, int size, int index, int send_null, int recv_null, size_t so,
                           size_t ro) {
    const int reduces = a->call == PAR_CALL_ALL_REDUCE || a->call == PAR_CALL_REDUCE_SCATTER;
    size_t b;
    if ((unsigned)a->call >= PAR_CALL_COUNT || size < 1 || index < 0 || index >= size) return 0;
    if (a->call == PAR_CALL_BARRIER) return 1;
    if (a->count < 0 || (unsigned)a->dtype >= PAR_DTYPE_COUNT) return 0;
    if (reduces && (unsigned)a->op > PAR_REDUCE_MAX) return 0;
    if (a->count > (int64_t)(INT64_MAX / 16) / (int64_t)par_dtype_size(a->dtype) / size) return 0;
    b = (size_t)a->count * par_dtype_size(a->dtype);
    if (a->call == PAR_CALL_BROADCAST || a->call == PAR_CALL_SEND || a->call == PAR_CALL_RECV)
        return !(a->count > 0 && (a->call == PAR_CALL_RECV ? recv_null : send_null)) && a->peer >= 0 && a->peer < size;
    if (a->count > 0 && (send_null || recv_null)) return 0;
    if (send_null || recv_null) return 1; /* count 0: nothing overlaps */
    switch (a->call) {
    case PAR_CALL_ALL_REDUCE: return so == ro || !span_overlap(so, b, ro, b);
    case PAR_CALL_ALL_GATHER: return !span_overlap(so, b, ro, b * (size_t)size) || so == ro + b * (size_t)index;
    case PAR_CALL_REDUCE_SCATTER: return !span_overlap(so, b * (size_t)size, ro, b) || ro == so + b * (size_t)index;
    default: return !span_overlap(so, b * (size_t)size, ro, b * (size_t)size); /* all_to_all */
    }
}

static void fuzz_comm_args(int n) {
    static char arena[1 << 12];
    int i;
    for (i = 0; i < n; i++) {
        par_comm_args a;
        const int size = chance(5) ? rint_(-1, 0) : rint_(1, 8), index = chance(5) ? rint_(-1, 9) : rint_(0, size > 0 ? size - 1 : 0);
        const int send_null = chance(5), recv_null = chance(5);
        const size_t so = (size_t)rint_(0, 2047), ro = chance(30) ? so : (size_t)rint_(0, 2047);
        char what[200];
        par_status st;
        int valid;
        memset(&a, 0, sizeof a);
        a.call = (par_comm_call)(chance(3) ? rint_(-2, 12) : rint_(0, PAR_CALL_COUNT - 1));
        a.count = chance(3) ? (int64_t)(rnd() >> rint_(0, 63)) * (chance(50) ? 1 : -1) : rint_(0, 64);
        a.dtype = (par_dtype)(chance(3) ? rint_(-1, 9) : rint_(0, PAR_DTYPE_COUNT - 1));
        a.op = (par_reduce_op)(chance(3) ? rint_(-1, 5) : rint_(0, 2));
        a.peer = chance(10) ? rint_(-2, 10) : rint_(0, size > 0 ? size - 1 : 0);
        a.send = send_null ? NULL : arena + so;
        a.recv = recv_null ? NULL : arena + ro;
        snprintf(what, sizeof what, "%s count %lld dtype %d op %d peer %d size %d index %d send %s+%zu recv %s+%zu",
                 par_comm_call_name(a.call), (long long)a.count, (int)a.dtype, (int)a.op, a.peer, size, index,
                 send_null ? "NULL" : "arena", so, recv_null ? "NULL" : "arena", ro);
        par_clear_error();
        st = par_comm_check_args(chance(2) ? NULL : "fuzz", chance(2) ? NULL : "g", size, index, &a);
        outcome(CAT_COMM_ARGS, st, what);
        valid = comm_args_valid(&a, size, index, send_null, recv_null, so, ro);
        property((st == PAR_OK) == valid && (st == PAR_OK || st == PAR_EINVAL), what);
    }
    for (i = 0; i < n / 4; i++) { /* rank lists */
        int ranks[10], count = rint_(-1, 10), world = rint_(0, 9), me = rint_(-1, 9), j, k, index = -2, valid;
        char what[120];
        par_status st;
        for (j = 0; j < 10; j++) ranks[j] = chance(80) ? rint_(0, world > 0 ? world - 1 : 0) : rint_(-3, 12);
        valid = count >= 1 && count <= world;
        for (j = 0; valid && j < count; j++) {
            valid = ranks[j] >= 0 && ranks[j] < world;
            for (k = 0; valid && k < j; k++) valid = ranks[k] != ranks[j];
        }
        for (j = 0, k = 0; valid && j < count; j++) k |= ranks[j] == me;
        valid = valid && k;
        snprintf(what, sizeof what, "group_create count %d world %d me %d", count, world, me);
        par_clear_error();
        st = par_comm_check_ranks(chance(2) ? NULL : "fuzz", chance(5) ? NULL : ranks, count, world, me, &index);
        outcome(CAT_COMM_ARGS, st, what);
        property(st != PAR_OK || (valid && index >= 0 && ranks[index] == me), what);
        property(st == PAR_OK || st == PAR_EINVAL, what);
    }
}

static void fuzz_nulls(void) {
    par_mesh m;
    par_layout l;
    par_strategy s;
    par_dtype dt;
    par_op_kind k;
    int64_t shape[2] = {8, 8};
    char buf[4];
    CHECK_OK(par_mesh_parse("2,4", &m));
    par_clear_error();
    outcome(CAT_MESH_PARSE, par_mesh_parse(NULL, &m), "NULL mesh text");
    par_clear_error();
    outcome(CAT_LAYOUT_PARSE, par_layout_parse(&l, &m, 2, shape, NULL), "NULL layout text");
    par_clear_error();
    outcome(CAT_STRATEGY_PARSE, par_strategy_parse(NULL, &s), "NULL strategy text");
    par_clear_error();
    outcome(CAT_NAME_PARSE, par_dtype_parse(NULL, &dt), "NULL dtype text");
    par_clear_error();
    outcome(CAT_NAME_PARSE, par_op_kind_parse(NULL, &k), "NULL op text");
    /* formatting into tiny buffers stays in bounds and terminated */
    CHECK_OK(par_layout_parse(&l, &m, 2, shape, "[(1,0),-1]"));
    CHECK(par_layout_format(&l, buf, sizeof buf) > (int)sizeof buf && buf[sizeof buf - 1] == 0);
    CHECK(par_mesh_format(&m, buf, 1) > 0 && buf[0] == 0);
    CHECK(par_layout_format(&l, NULL, 0) > 0);
}

int main(void) {
    int c;
    fuzz_nulls();
    fuzz_mesh_parse(5000);
    fuzz_layout_parse(15000);
    fuzz_strategy_parse(8000);
    fuzz_names(2000);
    fuzz_layout_init(8000);
    fuzz_layout_raw_mesh(2000);
    fuzz_op_infer(20000);
    fuzz_op_strategies(3000);
    fuzz_plan(10000);
    fuzz_reshape(6000);
    fuzz_comm_args(8000);
    for (c = 0; c < CAT_COUNT; c++) {
        if (stats[c].block_calls) close_block(c);
        CHECK_MSG(stats[c].calls > 0 && stats[c].bad == 0, "%s: %ld of %ld calls not clean", cat_names[c],
                  stats[c].bad, stats[c].calls);
    }
    {
        long total = 0;
        for (c = 0; c < CAT_COUNT; c++)
            if (c != CAT_PROPERTY) total += stats[c].calls;
        CHECK_MSG(total >= 10000, "only %ld fuzzed calls", total);
        /* the fuzz must reach the success paths too, not only errors */
        CHECK_MSG(stats[CAT_LAYOUT_PARSE].ok > 100 && stats[CAT_OP_INFER].ok > 100 && stats[CAT_PLAN].ok > 100 &&
                      stats[CAT_RESHAPE].ok > 10 && stats[CAT_COMM_ARGS].ok > 100,
                  "too few accepted inputs: layout %ld infer %ld plan %ld reshape %ld", stats[CAT_LAYOUT_PARSE].ok,
                  stats[CAT_OP_INFER].ok, stats[CAT_PLAN].ok, stats[CAT_RESHAPE].ok);
        printf("fuzzed %ld calls (", total);
        for (c = 0; c < CAT_COUNT; c++)
            if (c != CAT_PROPERTY) printf("%s%s %ld/%ld ok", c ? ", " : "", cat_names[c], stats[c].ok, stats[c].calls);
        printf("); %ld properties\n", stats[CAT_PROPERTY].calls);
    }
    return TEST_END("fuzz");
}
