/* par-explain - look inside parallel.h's layouts, strategies and redistribution plans.

   Build:  cc -std=c11 -O2 -Wall -Wextra -Wpedantic -Werror examples/explain.c -o build/par-explain -lm

   par-explain layout        --mesh 2,4 --shape 8,16 --map "[1,0]"
   par-explain strategy      --op matmul --devices 8 --shapes 16x32,32x64 --strategy "((2,1),(1,4))" --param 1
   par-explain strategies    --op matmul --devices 8 --shapes 16x32,32x64
   par-explain redistribute  --mesh 4 --shape 16,16 --from "[0,-1]" --to "[-1,-1]"
   par-explain tour          a guided walk through the cases above (used by `make tour`)

   Every invalid input gives one line "error: ..." on stderr and exit status 2. */
#define PARALLEL_IMPLEMENTATION
#include "../parallel.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define EXIT_USAGE 2

/* In two pieces: C99 compilers need only take string literals up to 4095 bytes. */
static const char *const usage_text =
    "usage: par-explain <command> [options]\n"
    "\n"
    "commands:\n"
    "  layout        a tensor layout: placements, slice shape, every rank's slice\n"
    "      --mesh 2,4 | dp=2,tp=4   device mesh (ranks row-major, last axis fastest)\n"
    "      --shape 8,16             global tensor shape\n"
    "      --map \"[1,0]\"            tensor map: -1 = not split, v = device dim v\n"
    "                               (counted from the right), (1,0) = several dims,\n"
    "                               \"[1,-1] partial=0\"; named meshes: \"[dp,None]\"\n"
    "      [--dtype f32]            element type for the bytes per rank\n"
    "  strategy      what an operator strategy implies\n"
    "      --op matmul              operator (matmul, batch_matmul, elementwise, rmsnorm,\n"
    "                               layernorm, softmax, gather, cross_entropy, reshape,\n"
    "                               transpose, flash_attention, reduce_sum, reduce_mean,\n"
    "                               log_softmax, l2_normalize, prelu, dropout, one_hot)\n"
    "      --devices 8              devices of the stage\n"
    "      --shapes 16x32,32x64     input shapes, comma between inputs, x between dims\n"
    "      --strategy \"((2,1),(1,4))\" one shard tuple per input (MindSpore form); with\n"
    "                               --mesh entries may be axis names: \"((dp,1),(tp,1))\"\n"
    "      [--param 1]              input index that is a trainable parameter\n"
    "                               (repeat the flag or give a list: --param 0,1)\n"
    "      [--transpose-a] [--transpose-b]   matmul / batch_matmul\n"
    "      [--axes 1]               softmax / log_softmax / l2_normalize / norm / reduce axes\n"
    "                               (list of input-0 dims)\n"
    "      [--perm 1,0]             transpose permutation\n"
    "      [--out-shape 8,2,8]      reshape target shape\n"
    "      [--out-map -1,0]         reshape: the layout the next operator wants for the output\n"
    "                               (device dims of this op's matrix); data may then move\n"
    "      [--keep-dims]            reduce_sum / reduce_mean keep reduced dims\n"
    "      [--depth 10]             one_hot classes (its strategy has one more entry, for depth)\n"
    "      [--reduce-scatter]       forward all_reduce becomes reduce_scatter\n"
    "      [--dtype f32]            element type\n"
    "      [--device-flops F] [--link-bandwidth B]   cost model (flop/s, bytes/s)\n"
    "      [--mesh dp=2,tp=4]       show layouts and groups on this mesh (axes named by the\n"
    "                               strategy by name, else its axes above 1 in order)\n"
    "  strategies    every valid strategy with its cost, cheapest first\n"
    "      the options of `strategy` without --strategy\n"
    "  redistribute  the cheapest plan turning one layout into another\n"
    "      --mesh 2,4 --shape 8,16 --from \"[1,-1]\" --to \"[-1,0]\"\n"
    "      [--to-shape 8,2,8]       target shape (a local, layout-preserving reshape)\n"
    "      [--dtype f32]            element type (bytes)\n"
    "      [--greedy]               print MindSpore's algorithm (the baseline) instead\n"
    "      [--all-to-all on|off]    may plans use all_to_all (default on; off is MindSpore's\n"
    "                               default enable_alltoall = false: all_gather + split)\n"
    "      [--latency d=x,...]      alpha per device dim (number or axis name), or one\n"
    "                               value for all dims\n"
    "      [--bandwidth d=x,...]    bytes per unit time per device dim (default 1)\n"
    "      [--independent pp,...]   device dims (numbers or axis names) whose ranks hold\n"
    "                               different tensors (pipeline stages, context slices):\n"
    "                               the plan never moves data over them\n";

static const char *const usage_text_more =
    "  pipeline      a pipeline schedule, every rank's actions, checked: bubble, memory\n"
    "      --schedule 1f1b          gpipe, 1f1b, zb-h1, or over --chunks >= 2: interleaved,\n"
    "                               looped_bfs, zb1p (interleaved zero bubble); zbv,\n"
    "                               dualpipev (2 chunks on the V placement; dualpipev\n"
    "                               needs --micro-batches >= 2 x --stages)\n"
    "      --stages 4 --micro-batches 8 [--chunks 2]\n"
    "      or --file S.txt          a schedule in the text form this command prints\n"
    "                               (edit one to write your own; PA / PG post receives ahead)\n"
    "      or --table               bubble and peak memory of every kind at 4 and 8 stages,\n"
    "                               m = p, 2p, 4p (a Markdown table; the README's)\n";
static const char *const usage_text_plan = /* a third string: C99 compilers need not take literals over 4095 */
    "  plan MODEL.yaml CLUSTER.yaml   automatic parallel: the best whole plans (dp, tp,\n"
    "                               sp, cp, pp + schedule + micro-batches, ZeRO,\n"
    "                               recomputation) for the model (MindFormers keys) on\n"
    "                               the cluster, predicted memory and step time, and why\n"
    "                               the others were cut\n"
    "      or --model FILE --cluster FILE (one leading file: the model, or the cluster\n"
    "                               when --model or all eight model flags give the model)\n"
    "      [--layers N --hidden N --heads N --kv-heads N --ffn N --vocab N --seq N\n"
    "       --global-batch N]       the model without a file (all eight); with one, each\n"
    "                               overrides the file's value (--global-batch its batch)\n"
    "      [--devices N]            the cluster file's devices, overridden (a multiple\n"
    "                               of its devices_per_node: the same machine, sized)\n"
    "      [--fix dp=8,tp=8,pp=16,cp=1]  keep these degrees (any subset; search mode\n"
    "                               sharding_propagation, the only one that keeps them)\n"
    "      [--schedule 1f1b,gpipe]  pipeline kinds searched (gpipe, 1f1b, interleaved,\n"
    "                               zb-h1, looped_bfs, zb1p, zbv, dualpipev, or all;\n"
    "                               default gpipe,1f1b)\n"
    "      [--chunks 3]             chunks per rank of interleaved, looped_bfs, zb1p\n"
    "                               (default 2 to 4 searched; zbv, dualpipev: 2)\n"
    "      [--max-zero 2] [--no-sp]  the highest ZeRO level searched (0: none); no\n"
    "                               sequence parallel (runs from before it existed)\n"
    "      [--micro-batch-size N]   samples per micro-batch and dp rank (the micro-\n"
    "                               batches follow from the batch; default searched)\n"
    "      [--max-micro-batches 16] [--search-mode dynamic_programming]  (or\n"
    "                               sharding_propagation, recursive_programming)\n"
    "      [--json]                 one JSON object a plan a line, then the cuts (with\n"
    "                               the step's flops and TFLOP/s per device, Megatron's\n"
    "                               count: model_ without, hardware_ with recomputation)\n"
    "      [--top 5] [--memory-cap BYTES]  (default: the cluster's memory_per_device)\n"
    "      [--dtype f32]            f32, or bf16 / f16: mixed precision (18 bytes a\n"
    "                               parameter before ZeRO: f32 grads, master, moments);\n"
    "                               a list (bf16,f32) or all: searched\n"
    "      [--recompute none]       none, selective, full, or all (searched)\n"
    "  calibrate     measure this machine for the planner: GEMM rate (rows x gemm x cols,\n"
    "                forward and backward),\n"
    "                memory bandwidth, activation and attention rates, kernel latency, how\n"
    "                many rank threads the cores run at once, all-reduce latency and bandwidth;\n"
    "                prints a cluster file (save it, pass it to plan or train --cluster)\n"
    "      [--ranks 2] [--memory BYTES] [--model MODEL.yaml]  (its shapes on that many\n"
    "                ranks: what train's auto_parallel times)  [--gemm 256] [--rows N]\n"
    "                [--cols N] [--head-dim 64] [--seq 256]  (each overrides the model's)\n"
    "  graph FILE    strategies for an operator graph (the >>planner text form)\n"
    "      [--search-mode dynamic_programming]  or sharding_propagation, recursive_programming\n"
    "      [--memory-cap BYTES]     per device\n"
    "  tour          a guided tour with explanations (make tour)\n"
    "\n"
    "Invalid input prints one line starting with \"error:\" and exits with status 2.\n";

/* ---------------------------------------------------------------------------
   errors
   ------------------------------------------------------------------------- */

#if defined(__GNUC__) || defined(__clang__)
#define EXPLAIN_PRINTF(f, a) __attribute__((format(printf, f, a)))
#else
#define EXPLAIN_PRINTF(f, a)
#endif

/* Print "error: ..." as ONE line (user text may hold control characters) and exit 2. */
static EXPLAIN_PRINTF(1, 2) void die(const char *fmt, ...) {
    char msg[1024];
    size_t i;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    for (i = 0; msg[i]; i++)
        if ((unsigned char)msg[i] < 0x20 || msg[i] == 0x7f) msg[i] = '?';
    fflush(stdout);
    fprintf(stderr, "error: %s\n", msg);
    exit(EXIT_USAGE);
}

/* A library call failed: say what we were doing and what the library said. */
static void check(par_status st, const char *what) {
    const char *msg;
    if (st == PAR_OK) return;
    msg = par_last_error();
    die("%s: %s", what, (msg && msg[0]) ? msg : par_status_string(st));
}

/* ---------------------------------------------------------------------------
   argument parsing: "--name value", "--name=value" and boolean "--flag"
   ------------------------------------------------------------------------- */

typedef struct opt_spec {
    const char *name;  /* without the leading "--" */
    int has_value;
    int repeatable;
} opt_spec;

#define MAX_ARGS 64

typedef struct args {
    const char *command;
    int count;
    const char *name[MAX_ARGS];
    const char *value[MAX_ARGS]; /* NULL for boolean flags */
} args;

static const opt_spec *find_spec(const opt_spec *specs, const char *name, size_t len) {
    for (; specs->name; specs++)
        if (strlen(specs->name) == len && strncmp(specs->name, name, len) == 0) return specs;
    return NULL;
}

static void parse_args(int argc, char **argv, const char *command, const opt_spec *specs, args *a) {
    int i, j;
    a->command = command;
    a->count = 0;
    for (i = 0; i < argc; i++) {
        const char *arg = argv[i], *eq, *value = NULL;
        const opt_spec *spec;
        size_t len;
        if (strncmp(arg, "--", 2) != 0 || arg[2] == 0)
            die("%s: unexpected argument '%.64s' (options start with --)", command, arg);
        arg += 2;
        eq = strchr(arg, '=');
        len = eq ? (size_t)(eq - arg) : strlen(arg);
        spec = find_spec(specs, arg, len);
        if (!spec) die("%s: unknown option '--%.*s' (see par-explain --help)", command, (int)(len > 64 ? 64 : len), arg);
        if (spec->has_value) {
            if (eq) {
                value = eq + 1;
            } else if (i + 1 < argc && strncmp(argv[i + 1], "--", 2) != 0) {
                value = argv[++i];
            } else {
                die("%s: option --%s needs a value", command, spec->name);
            }
            if (!value[0]) die("%s: option --%s has an empty value", command, spec->name);
        } else if (eq) {
            die("%s: option --%s takes no value", command, spec->name);
        }
        if (!spec->repeatable)
            for (j = 0; j < a->count; j++)
                if (strcmp(a->name[j], spec->name) == 0) die("%s: option --%s given twice", command, spec->name);
        if (a->count == MAX_ARGS) die("%s: too many options", command);
        a->name[a->count] = spec->name;
        a->value[a->count] = value;
        a->count++;
    }
}

static const char *arg_get(const args *a, const char *name) {
    int i;
    for (i = 0; i < a->count; i++)
        if (strcmp(a->name[i], name) == 0) return a->value[i] ? a->value[i] : "";
    return NULL;
}

static const char *arg_need(const args *a, const char *name) {
    const char *v = arg_get(a, name);
    if (!v) die("%s: missing required option --%s", a->command, name);
    return v;
}

static int arg_flag(const args *a, const char *name) { return arg_get(a, name) != NULL; }

/* ---------------------------------------------------------------------------
   value parsing
   ------------------------------------------------------------------------- */

/* A whole decimal integer in [lo, hi]. */
static long long parse_int(const char *text, long long lo, long long hi, const char *what) {
    char *end;
    long long v;
    errno = 0;
    v = strtoll(text, &end, 10);
    if (end == text || *end || errno == ERANGE || v < lo || v > hi)
        die("%s: '%.64s' is not an integer in [%lld, %lld]", what, text, lo, hi);
    return v;
}

static double parse_double(const char *text, const char *what) {
    char *end;
    double v;
    errno = 0;
    v = strtod(text, &end);
    if (end == text || *end || errno == ERANGE || !(v >= 0) || v > 1e300)
        die("%s: '%.64s' is not a non-negative number", what, text);
    return v;
}

/* Split `text` at any of `seps` into at most `max` integers in [lo, hi]. */
static int parse_int_list(const char *text, const char *seps, long long lo, long long hi, long long *out, int max,
                          const char *what) {
    char buf[256], *p, *tok;
    int n = 0;
    if (strlen(text) >= sizeof buf) die("%s: '%.64s...' is too long", what, text);
    strcpy(buf, text);
    p = buf;
    for (;;) {
        size_t len = strcspn(p, seps);
        char sep = p[len];
        tok = p;
        tok[len] = 0;
        if (!tok[0]) die("%s: empty entry in '%.64s'", what, text);
        if (n == max) die("%s: '%.64s' has more than %d entries", what, text, max);
        out[n++] = parse_int(tok, lo, hi, what);
        if (!sep) break;
        p = tok + len + 1;
    }
    return n;
}

/* "8,16" or "8x16". */
static int parse_shape(const char *text, int64_t *shape, const char *what) {
    long long v[PARALLEL_MAX_DIMS];
    int i, n = parse_int_list(text, ",x", 1, INT64_MAX / 2, v, PARALLEL_MAX_DIMS, what);
    for (i = 0; i < n; i++) shape[i] = (int64_t)v[i];
    return n;
}

static par_dtype parse_dtype(const args *a) {
    const char *text = arg_get(a, "dtype");
    par_dtype dt = PAR_F32;
    if (text) check(par_dtype_parse(text, &dt), "--dtype");
    return dt;
}

static void parse_mesh(const char *text, par_mesh *mesh) { check(par_mesh_parse(text, mesh), "--mesh"); }

/* ---------------------------------------------------------------------------
   formatting helpers
   ------------------------------------------------------------------------- */

static void print_dims(const int64_t *v, int n) {
    int i;
    putchar('[');
    for (i = 0; i < n; i++) printf(i ? ",%lld" : "%lld", (long long)v[i]);
    putchar(']');
}

static void print_ranks(const int *ranks, int n) {
    int i;
    putchar('[');
    for (i = 0; i < n; i++) printf(i ? ",%d" : "%d", ranks[i]);
    putchar(']');
}

static const char *layout_text(const par_layout *l, char *buf, size_t size) {
    par_layout_format(l, buf, size);
    return buf;
}

static const char *mesh_text(const par_mesh *m, char *buf, size_t size) {
    par_mesh_format(m, buf, size);
    return buf;
}

/* "device dim 0 (axis tp, size 4)" */
static void print_dev_dim(const par_mesh *mesh, int v) {
    int axis = mesh->ndim - 1 - v;
    if (mesh->names[axis][0])
        printf("device dim %d (axis %s, size %d)", v, mesh->names[axis], mesh->dims[axis]);
    else
        printf("device dim %d (axis %d, size %d)", v, axis, mesh->dims[axis]);
}

/* ---------------------------------------------------------------------------
   layout
   ------------------------------------------------------------------------- */

static void show_layout(const par_layout *l, par_dtype dtype) {
    char buf[512], mbuf[256];
    int64_t local[PARALLEL_MAX_DIMS], off[PARALLEL_MAX_DIMS];
    par_placement pl[PARALLEL_MAX_DIMS];
    int n = par_mesh_size(&l->mesh), r, t, v;
    int *ranks, *seen;
    int repeated = 0;
    par_status st;

    printf("layout: %s mesh=%s shape=", layout_text(l, buf, sizeof buf), mesh_text(&l->mesh, mbuf, sizeof mbuf));
    print_dims(l->shape, l->ndim);
    putchar('\n');

    st = par_layout_to_placements(l, pl);
    if (st == PAR_OK) {
        par_placements_format(pl, l->mesh.ndim, buf, sizeof buf);
        printf("placements: %s\n", buf);
    } else {
        printf("placements: none (%s)\n", par_last_error());
    }

    par_layout_local_shape(l, local);
    printf("slice shape: ");
    print_dims(local, l->ndim);
    printf("\nbytes per rank: %lld (%s)\n", (long long)par_layout_local_numel(l) * (long long)par_dtype_size(dtype),
           par_dtype_name(dtype));
    for (v = 0; v < l->mesh.ndim; v++) {
        if (l->map.partial & (1u << v)) {
            printf("partial: values are partial sums over ");
            print_dev_dim(&l->mesh, v);
            printf(": the slices of its group add up to the tensor\n");
        }
    }

    ranks = (int *)malloc(sizeof(int) * (size_t)n);
    seen = (int *)calloc((size_t)n, sizeof(int));
    if (!ranks || !seen) die("out of memory");
    for (r = 0; r < n; r++) {
        check(par_layout_local_offset(l, r, off), "layout");
        printf("rank %d: [", r);
        for (t = 0; t < l->ndim; t++)
            printf("%s%lld:%lld", t ? ", " : "", (long long)off[t], (long long)(off[t] + local[t]));
        printf("]\n");
    }

    /* Groups of ranks holding the same values (repeated calculation). */
    for (r = 0; r < n; r++) {
        int count = 0;
        if (seen[r]) continue;
        check(par_layout_replica_group(l, r, ranks, &count), "layout");
        for (t = 0; t < count; t++)
            if (ranks[t] >= 0 && ranks[t] < n) seen[ranks[t]] = 1;
        if (count > 1) {
            if (!repeated) printf("repeated: each slice is held by %d ranks; groups:", count);
            putchar(' ');
            print_ranks(ranks, count);
            repeated = 1;
        }
    }
    if (repeated)
        putchar('\n');
    else
        printf("repeated: none (no two ranks hold the same values)\n");
    free(ranks);
    free(seen);
}

static int cmd_layout(int argc, char **argv) {
    static const opt_spec specs[] = {{"mesh", 1, 0}, {"shape", 1, 0}, {"map", 1, 0}, {"dtype", 1, 0}, {NULL, 0, 0}};
    args a;
    par_mesh mesh;
    par_layout l;
    int64_t shape[PARALLEL_MAX_DIMS];
    int ndim;
    par_dtype dtype;

    parse_args(argc, argv, "layout", specs, &a);
    parse_mesh(arg_need(&a, "mesh"), &mesh);
    ndim = parse_shape(arg_need(&a, "shape"), shape, "--shape");
    dtype = parse_dtype(&a);
    check(par_layout_parse(&l, &mesh, ndim, shape, arg_need(&a, "map")), "--map");
    show_layout(&l, dtype);
    return 0;
}

/* ---------------------------------------------------------------------------
   strategy / strategies
   ------------------------------------------------------------------------- */

static const opt_spec op_specs[] = {
    {"op", 1, 0},          {"devices", 1, 0},     {"shapes", 1, 0},         {"strategy", 1, 0},
    {"param", 1, 1},       {"transpose-a", 0, 0}, {"transpose-b", 0, 0},    {"axes", 1, 0},
    {"perm", 1, 0},        {"out-shape", 1, 0},   {"keep-dims", 0, 0},      {"reduce-scatter", 0, 0},
    {"dtype", 1, 0},       {"device-flops", 1, 0}, {"link-bandwidth", 1, 0}, {"mesh", 1, 0},
    {"depth", 1, 0},       {"out-map", 1, 0},     {NULL, 0, 0}};

/* Fill an operator desc from the options shared by `strategy` and `strategies`. */
static void parse_op(const args *a, par_op_desc *op, int *devices) {
    const char *text;
    char buf[512], *p;
    long long v[PARALLEL_MAX_DIMS];
    int i, n;

    memset(op, 0, sizeof *op);
    check(par_op_kind_parse(arg_need(a, "op"), &op->kind), "--op");
    *devices = (int)parse_int(arg_need(a, "devices"), 1, 1 << 20, "--devices");

    /* --shapes 16x32,32x64: inputs separated by ',', dims by 'x'. */
    text = arg_need(a, "shapes");
    if (strlen(text) >= sizeof buf) die("--shapes: '%.64s...' is too long", text);
    strcpy(buf, text);
    p = buf;
    for (;;) {
        size_t len = strcspn(p, ",");
        char sep = p[len];
        p[len] = 0;
        if (op->num_inputs == PAR_MAX_INPUTS) die("--shapes: more than %d inputs", PAR_MAX_INPUTS);
        if (!p[0]) die("--shapes: empty input shape in '%.64s'", text);
        n = parse_int_list(p, "x", 1, INT64_MAX / 2, v, PARALLEL_MAX_DIMS, "--shapes");
        op->ndim[op->num_inputs] = n;
        for (i = 0; i < n; i++) op->shape[op->num_inputs][i] = (int64_t)v[i];
        op->num_inputs++;
        if (!sep) break;
        p += len + 1;
    }

    /* --param may repeat, each a list. */
    for (i = 0; i < a->count; i++) {
        int k;
        if (strcmp(a->name[i], "param") != 0) continue;
        n = parse_int_list(a->value[i], ",", 0, op->num_inputs - 1, v, PAR_MAX_INPUTS, "--param");
        for (k = 0; k < n; k++) op->params |= 1u << v[k];
    }

    op->transpose_a = arg_flag(a, "transpose-a");
    op->transpose_b = arg_flag(a, "transpose-b");
    op->keep_dims = arg_flag(a, "keep-dims");
    op->reduce_scatter = arg_flag(a, "reduce-scatter");
    op->dtype = parse_dtype(a);

    if ((text = arg_get(a, "axes")) != NULL) {
        /* Negative axes count from the end of input 0, as in numpy. */
        n = parse_int_list(text, ",", -op->ndim[0], op->ndim[0] - 1, v, PARALLEL_MAX_DIMS, "--axes");
        for (i = 0; i < n; i++) op->axes |= 1u << (v[i] < 0 ? v[i] + op->ndim[0] : v[i]);
    }
    if ((text = arg_get(a, "perm")) != NULL) {
        n = parse_int_list(text, ",", 0, PARALLEL_MAX_DIMS - 1, v, PARALLEL_MAX_DIMS, "--perm");
        if (n != op->ndim[0]) die("--perm: %d entries for an input of %d dims", n, op->ndim[0]);
        for (i = 0; i < n; i++) op->perm[i] = (int)v[i];
    }
    if ((text = arg_get(a, "out-shape")) != NULL) op->out_ndim = parse_shape(text, op->out_shape, "--out-shape");
    if ((text = arg_get(a, "depth")) != NULL) op->depth = parse_int(text, 1, INT64_MAX / 2, "--depth");
    if ((text = arg_get(a, "out-map")) != NULL) { /* reshape: the consumer's map of the output */
        static int out_map[PARALLEL_MAX_DIMS];
        n = parse_int_list(text, ",", -1, PARALLEL_MAX_DIMS - 1, v, PARALLEL_MAX_DIMS, "--out-map");
        if (n != op->out_ndim) die("--out-map: %d entries for an output of %d dims (give --out-shape first)", n, op->out_ndim);
        for (i = 0; i < n; i++) out_map[i] = (int)v[i];
        op->out_map = out_map;
    }
    if ((text = arg_get(a, "device-flops")) != NULL) op->device_flops = parse_double(text, "--device-flops");
    if ((text = arg_get(a, "link-bandwidth")) != NULL) op->link_bandwidth = parse_double(text, "--link-bandwidth");
}

static void print_cost_fields(const par_op_cost *c) {
    printf("compute_flops=%.0f comm_bytes=%.0f memory_bytes=%.0f total=%.6g", c->compute_flops, c->comm_bytes,
           c->memory_bytes, c->total);
}

static void print_comm(const char *prefix, const par_comm_op *c) {
    printf("%s%s group=%d", prefix, par_comm_kind_name(c->kind), c->group);
    if (c->count > 1) printf(" count=%d", c->count);
    putchar('\n');
}

static void show_op_info(const par_op_desc *op, const par_op_info *info) {
    char buf[512];
    int64_t local[PARALLEL_MAX_DIMS];
    int i, mirrors = 0;

    printf("device_matrix: %s", mesh_text(&info->dev_matrix, buf, sizeof buf));
    if (info->repeated > 1) printf(" (repeated calculation: %d copies, device dim 0)", info->repeated);
    putchar('\n');
    for (i = 0; i < info->num_inputs; i++) {
        par_layout_local_shape(&info->inputs[i], local);
        printf("input%d tensor_map: %s\n", i, layout_text(&info->inputs[i], buf, sizeof buf));
        printf("input%d slice: ", i);
        print_dims(local, info->inputs[i].ndim);
        putchar('\n');
    }
    for (i = 0; i < info->num_outputs; i++) {
        char name[24];
        if (info->num_outputs == 1)
            strcpy(name, "output");
        else
            snprintf(name, sizeof name, "output%d", i);
        par_layout_local_shape(&info->outputs[i], local);
        printf("%s tensor_map: %s\n", name, layout_text(&info->outputs[i], buf, sizeof buf));
        printf("%s slice: ", name);
        print_dims(local, info->outputs[i].ndim);
        putchar('\n');
    }
    if (info->output_redistribution) /* a Reshape whose consumer chose the output layout */
        printf("forward_comm: reshape redistribution (par-explain redistribute from input0 to output)\n");
    else if (info->num_forward == 0)
        printf("forward_comm: none\n");
    for (i = 0; i < info->num_forward && i < 2; i++) print_comm("forward_comm: ", &info->forward[i]);
    for (i = 0; i < info->num_inputs; i++) {
        char prefix[32];
        if (!(op->params & (1u << i))) continue;
        if (info->mirror[i].kind == PAR_COMM_NONE || info->mirror[i].group <= 1) continue;
        snprintf(prefix, sizeof prefix, "mirror: input%d ", i);
        print_comm(prefix, &info->mirror[i]);
        mirrors++;
    }
    if (!mirrors) printf("mirror: none\n");
    /* the activation gradients' all-reduce (Megatron's "f" of a column-parallel linear) */
    for (i = 0, mirrors = 0; i < info->num_inputs; i++) {
        char prefix[32];
        if (info->backward[i].kind == PAR_COMM_NONE) continue;
        snprintf(prefix, sizeof prefix, "backward: input%d ", i);
        print_comm(prefix, &info->backward[i]);
        mirrors++;
    }
    if (!mirrors) printf("backward: none\n");
    printf("cost: ");
    print_cost_fields(&info->cost);
    putchar('\n');
}

/* mesh_text: NULL, or the model's mesh to show the layouts on (--mesh dp=2,tp=4). */
static void explain_strategy(const par_op_desc *op, const char *strategy_text, int devices, const char *mesh_text_arg) {
    par_strategy s;
    par_op_info info;
    par_mesh mesh;
    /* with a mesh, the strategy may name its axes: ((dp,1),(tp,1)) */
    if (mesh_text_arg) parse_mesh(mesh_text_arg, &mesh);
    check(mesh_text_arg ? par_strategy_parse_mesh(strategy_text, &mesh, &s) : par_strategy_parse(strategy_text, &s),
          "--strategy");
    check(par_op_infer(op, &s, devices, &info), "strategy");
    if (mesh_text_arg) check(par_op_info_on_mesh(&info, &mesh, NULL, &info), "--mesh");
    show_op_info(op, &info);
}

static int cmd_strategy(int argc, char **argv) {
    args a;
    par_op_desc op;
    int devices;
    parse_args(argc, argv, "strategy", op_specs, &a);
    parse_op(&a, &op, &devices);
    explain_strategy(&op, arg_need(&a, "strategy"), devices, arg_get(&a, "mesh"));
    return 0;
}

static int cmd_strategies(int argc, char **argv) {
    args a;
    par_op_desc op;
    int devices, count = 0, capacity = 256, i;
    par_strategy *list = NULL;
    par_op_cost *costs = NULL;
    par_status st;
    char buf[512];

    parse_args(argc, argv, "strategies", op_specs, &a);
    if (arg_get(&a, "strategy")) die("strategies: --strategy is for the `strategy` command");
    if (arg_get(&a, "mesh")) die("strategies: --mesh is for the `strategy` command");
    parse_op(&a, &op, &devices);
    for (;;) {
        list = (par_strategy *)realloc(list, sizeof *list * (size_t)capacity);
        costs = (par_op_cost *)realloc(costs, sizeof *costs * (size_t)capacity);
        if (!list || !costs) die("out of memory");
        st = par_op_strategies(&op, devices, list, costs, capacity, &count);
        if (st != PAR_ECAPACITY || count <= capacity) break;
        capacity = count;
    }
    check(st, "strategies");
    for (i = 0; i < count && i < capacity; i++) {
        par_strategy_format(&list[i], buf, sizeof buf);
        printf("%s ", buf);
        print_cost_fields(&costs[i]);
        putchar('\n');
    }
    printf("count: %d\n", count);
    free(list);
    free(costs);
    return 0;
}

/* ---------------------------------------------------------------------------
   redistribute
   ------------------------------------------------------------------------- */

/* "--latency 0=1e-6,1=5e-6", "--latency tp=1e-6", or "--latency 1e-6" (every dim). */
/* --independent pp,cp or 1,2: a device-dim mask. */
static uint32_t parse_dims(const char *text, const par_mesh *mesh, const char *what) {
    char buf[256], *p = buf;
    uint32_t mask = 0;
    if (strlen(text) >= sizeof buf) die("%s: '%.64s...' is too long", what, text);
    strcpy(buf, text);
    for (;;) {
        size_t len = strcspn(p, ",");
        char sep = p[len];
        int v;
        p[len] = 0;
        v = par_mesh_dev_dim(mesh, p);
        if (v < 0) v = (int)parse_int(p, 0, mesh->ndim - 1, what);
        mask |= 1u << v;
        if (!sep) break;
        p += len + 1;
    }
    return mask;
}

static void parse_links(const char *text, const par_mesh *mesh, int bandwidth, par_cost_model *cm) {
    const char *what = bandwidth ? "--bandwidth" : "--latency";
    char buf[256], *p;
    int v;
    if (strlen(text) >= sizeof buf) die("%s: '%.64s...' is too long", what, text);
    strcpy(buf, text);
    if (!strchr(buf, '=')) {
        double x = parse_double(buf, what);
        if (bandwidth && x <= 0) die("%s: must be positive", what);
        for (v = 0; v < PARALLEL_MAX_DIMS; v++) *(bandwidth ? &cm->link[v].bandwidth : &cm->link[v].latency) = x;
        return;
    }
    p = buf;
    for (;;) {
        size_t len = strcspn(p, ",");
        char sep = p[len], *eq;
        double x;
        p[len] = 0;
        eq = strchr(p, '=');
        if (!eq || eq == p) die("%s: expected dim=value, got '%.64s'", what, p);
        *eq = 0;
        v = par_mesh_dev_dim(mesh, p);
        if (v < 0) v = (int)parse_int(p, 0, mesh->ndim - 1, what);
        x = parse_double(eq + 1, what);
        if (bandwidth && x <= 0) die("%s: must be positive", what);
        *(bandwidth ? &cm->link[v].bandwidth : &cm->link[v].latency) = x;
        if (!sep) break;
        p += len + 1;
    }
}

/* Layouts carry no dtype: the planner takes the element size from the cost model. */
static void set_elem_size(par_cost_model *cm, par_dtype dtype) { cm->elem_size = (int)par_dtype_size(dtype); }

/* Plan and print; returns the plan so callers (the tour) can compare. */
static void show_plan(const par_layout *from, const par_layout *to, const par_cost_model *cm, int greedy,
                      par_plan *plan) {
    char buf[8192];
    if (greedy)
        check(par_plan_greedy(from, to, cm, plan), "greedy plan");
    else
        check(par_plan_redistribution(from, to, cm, plan), "plan");
    par_plan_format(plan, buf, sizeof buf);
    fputs(buf, stdout);
    if (buf[0] && buf[strlen(buf) - 1] != '\n') putchar('\n');
    if (plan->unified_ndim > 0) { /* the shape the ops between the two reshapes act on */
        int i;
        printf("unified shape [");
        for (i = 0; i < plan->unified_ndim; i++) printf("%s%lld", i ? "," : "", (long long)plan->unified_shape[i]);
        printf("]\n");
    }
}

static int cmd_redistribute(int argc, char **argv) {
    static const opt_spec specs[] = {{"mesh", 1, 0},     {"shape", 1, 0},   {"from", 1, 0},      {"to", 1, 0},
                                     {"dtype", 1, 0},    {"greedy", 0, 0},  {"to-shape", 1, 0},  {"latency", 1, 0},
                                     {"bandwidth", 1, 0}, {"all-to-all", 1, 0}, {"independent", 1, 0},
                                     {NULL, 0, 0}};
    args a;
    par_mesh mesh;
    par_layout from, to;
    par_cost_model cm;
    par_plan plan;
    int64_t shape[PARALLEL_MAX_DIMS], to_shape[PARALLEL_MAX_DIMS];
    int ndim, to_ndim;
    const char *text;

    parse_args(argc, argv, "redistribute", specs, &a);
    parse_mesh(arg_need(&a, "mesh"), &mesh);
    ndim = parse_shape(arg_need(&a, "shape"), shape, "--shape");
    if ((text = arg_get(&a, "to-shape")) != NULL) {
        to_ndim = parse_shape(text, to_shape, "--to-shape");
    } else {
        to_ndim = ndim;
        memcpy(to_shape, shape, sizeof shape);
    }
    memset(&cm, 0, sizeof cm);
    set_elem_size(&cm, parse_dtype(&a));
    if ((text = arg_get(&a, "latency")) != NULL) parse_links(text, &mesh, 0, &cm);
    if ((text = arg_get(&a, "bandwidth")) != NULL) parse_links(text, &mesh, 1, &cm);
    if ((text = arg_get(&a, "all-to-all")) != NULL) {
        if (strcmp(text, "on") != 0 && strcmp(text, "off") != 0)
            die("--all-to-all: '%s' must be on or off (off = MindSpore's enable_alltoall false)", text);
        cm.no_all_to_all = strcmp(text, "off") == 0;
    }
    if ((text = arg_get(&a, "independent")) != NULL) cm.independent_dims = parse_dims(text, &mesh, "--independent");
    check(par_layout_parse(&from, &mesh, ndim, shape, arg_need(&a, "from")), "--from");
    check(par_layout_parse(&to, &mesh, to_ndim, to_shape, arg_need(&a, "to")), "--to");
    show_plan(&from, &to, &cm, arg_flag(&a, "greedy"), &plan);
    return 0;
}

/* ---------------------------------------------------------------------------
   tour
   ------------------------------------------------------------------------- */

static void say(const char *text) { printf("\n%s\n", text); }

static void tour_layout(const char *mesh_spec, const char *shape_spec, const char *map) {
    par_mesh mesh;
    par_layout l;
    int64_t shape[PARALLEL_MAX_DIMS];
    int ndim;
    parse_mesh(mesh_spec, &mesh);
    ndim = parse_shape(shape_spec, shape, "shape");
    printf("$ par-explain layout --mesh %s --shape %s --map \"%s\"\n", mesh_spec, shape_spec, map);
    check(par_layout_parse(&l, &mesh, ndim, shape, map), "layout");
    show_layout(&l, PAR_F32);
}

static void tour_redistribute(const char *mesh_spec, const char *shape_spec, const char *from_map,
                              const char *to_shape_spec, const char *to_map, int greedy, par_plan *plan) {
    par_mesh mesh;
    par_layout from, to;
    par_cost_model cm;
    int64_t shape[PARALLEL_MAX_DIMS], to_shape[PARALLEL_MAX_DIMS];
    int ndim, to_ndim;
    parse_mesh(mesh_spec, &mesh);
    ndim = parse_shape(shape_spec, shape, "shape");
    to_ndim = parse_shape(to_shape_spec ? to_shape_spec : shape_spec, to_shape, "shape");
    printf("$ par-explain redistribute --mesh %s --shape %s --from \"%s\" --to \"%s\"", mesh_spec, shape_spec,
           from_map, to_map);
    if (to_shape_spec) printf(" --to-shape %s", to_shape_spec);
    printf("%s\n", greedy ? " --greedy" : "");
    memset(&cm, 0, sizeof cm);
    set_elem_size(&cm, PAR_F32);
    check(par_layout_parse(&from, &mesh, ndim, shape, from_map), "from");
    check(par_layout_parse(&to, &mesh, to_ndim, to_shape, to_map), "to");
    show_plan(&from, &to, &cm, greedy, plan);
}

/* kind's schedule over p stages and m micro-batches with the fewest chunks
   per rank it takes (1, else 2); NULL when it refuses both. */
static par_pp_schedule *pipeline_fewest_chunks(par_pp_kind kind, int p, int m, int *chunks) {
    par_pp_schedule_desc d;
    par_pp_schedule *s = NULL;
    memset(&d, 0, sizeof d);
    d.stages = p, d.micro_batches = m, d.kind = kind;
    for (*chunks = 1; *chunks <= 2; ++*chunks)
        if (d.chunks = *chunks, par_pp_schedule_make(&d, &s) == PAR_OK) return s;
    return NULL;
}

/* --table: every kind's bubble and peak activation memory at p = 4, 8 and
   m = p, 2p, 4p, checked: the peak as whole-stage micro-batches held by the
   busiest rank (chunks in flight / chunks per rank: a chunk holds 1/v of a
   stage's layers). Kinds added to the header appear by themselves; a kind
   runs over the chunks it takes at p 4, m 16, and a cell it refuses says so. */
static int pipeline_table(void) {
    static const int ps[] = {4, 8}, ms[] = {1, 2, 4};
    int k, i, j;
    printf("| schedule | chunks |");
    for (i = 0; i < 2; i++)
        for (j = 0; j < 3; j++) printf(" p %d, m %d |", ps[i], ms[j] * ps[i]);
    printf("\n|---|---|");
    for (i = 0; i < 6; i++) printf("---|");
    printf("\n");
    for (k = 0; k < (int)PAR_PP_KIND_COUNT; k++) {
        par_pp_schedule_desc d;
        int v;
        par_pp_schedule *s = pipeline_fewest_chunks((par_pp_kind)k, 4, 16, &v);
        if (!s) die("pipeline --table: %s refuses 4 stages and 16 micro-batches", par_pp_kind_name((par_pp_kind)k));
        par_pp_schedule_destroy(s);
        printf("| %s | %d |", par_pp_kind_name((par_pp_kind)k), v);
        memset(&d, 0, sizeof d);
        d.kind = (par_pp_kind)k, d.chunks = v;
        for (i = 0; i < 2; i++)
            for (j = 0; j < 3; j++) {
                par_pp_check c;
                d.stages = ps[i], d.micro_batches = ms[j] * ps[i], s = NULL;
                if (par_pp_schedule_make(&d, &s) != PAR_OK) {
                    printf(" refused |");
                    continue;
                }
                check(par_pp_schedule_check(s, &c, NULL, 0), "pipeline --table: check");
                printf(" %.3f / %.1f |", c.bubble, (double)c.max_in_flight / v);
                par_pp_schedule_destroy(s);
            }
        printf("\n");
    }
    printf("\nEach cell: bubble (idle share of the ranks' time; F = 1, B = 2, I = W = 1 per chunk) / peak "
           "activations of the busiest rank, in whole-stage micro-batches (chunks in flight / chunks).\n");
    return 0;
}

/* Print a schedule (generated or read from a file) and the checker's verdict. */
static int cmd_pipeline(int argc, char **argv) {
    static const opt_spec specs[] = {{"schedule", 1, 0}, {"stages", 1, 0}, {"micro-batches", 1, 0},
                                     {"chunks", 1, 0},   {"file", 1, 0},   {"table", 0, 0}, {NULL, 0, 0}};
    args a;
    par_pp_schedule *s = NULL;
    par_pp_check c;
    const char *file;
    char *text;
    int r, n;
    parse_args(argc, argv, "pipeline", specs, &a);
    if (arg_flag(&a, "table")) {
        if (a.count > 1) die("pipeline: --table prints every kind; drop the other options");
        return pipeline_table();
    }
    if ((file = arg_get(&a, "file")) != NULL) {
        FILE *f = fopen(file, "rb");
        long size;
        if (arg_get(&a, "schedule") || arg_get(&a, "stages") || arg_get(&a, "micro-batches") || arg_get(&a, "chunks"))
            die("pipeline: --file takes the schedule from the file; drop --schedule, --stages, --micro-batches, --chunks");
        if (!f) die("pipeline: --file %.200s: %s", file, strerror(errno));
        fseek(f, 0, SEEK_END), size = ftell(f), fseek(f, 0, SEEK_SET);
        if (size < 0 || size > (1 << 26)) fclose(f), die("pipeline: --file %.200s: unreadable or larger than 64 MiB", file);
        text = (char *)malloc((size_t)size + 1);
        if (!text || fread(text, 1, (size_t)size, f) != (size_t)size) fclose(f), die("pipeline: --file %.200s: read failed", file);
        fclose(f);
        text[size] = 0;
        check(par_pp_schedule_parse(text, &s), "--file");
        free(text);
    } else {
        par_pp_schedule_desc d;
        memset(&d, 0, sizeof d);
        check(par_pp_kind_parse(arg_need(&a, "schedule"), &d.kind), "--schedule");
        d.stages = (int)parse_int(arg_need(&a, "stages"), 1, 4096, "--stages");
        d.micro_batches = (int)parse_int(arg_need(&a, "micro-batches"), 1, 65536, "--micro-batches");
        /* 0: the kind's own (2 for zbv and dualpipev, which run on the V placement; 1 for the rest) */
        d.chunks = arg_get(&a, "chunks") ? (int)parse_int(arg_get(&a, "chunks"), 1, 64, "--chunks") : 0;
        check(par_pp_schedule_make(&d, &s), "--schedule");
    }
    check(par_pp_schedule_check(s, &c, NULL, 0), "pipeline: check");
    n = par_pp_schedule_format(s, NULL, 0);
    text = (char *)malloc((size_t)n + 1);
    if (!text) die("pipeline: out of memory");
    par_pp_schedule_format(s, text, (size_t)n + 1);
    fputs(text, stdout);
    free(text);
    /* the figures as comments: the whole output is a schedule --file and --pp-schedule read back */
    printf("# check: ok (no deadlock; every micro-batch's forward and backward once, each after what it needs)\n");
    printf("# bubble %.4f of the ranks' time, makespan %.0f (F = 1, B = 2, I = W = 1; transfers free)\n", c.bubble,
           c.makespan);
    printf("# peak micro-batches in flight per rank:");
    for (r = 0; r < c.ranks_listed; r++) printf(" %d", c.peak_in_flight[r]);
    printf("\n");
    if (par_pp_schedule_placement(s) != PAR_PP_PLACE_LOOP || par_pp_schedule_chunks(s) > 1) {
        /* where each rank's chunks sit in the model (the placement line above, spelled out) */
        printf("# placement %s: virtual stages per rank (chunk 0, 1, ...):",
               par_pp_placement_name(par_pp_schedule_placement(s)));
        for (r = 0; r < par_pp_schedule_stages(s) && r < 64; r++) {
            int k;
            printf("%s", r ? ";" : "");
            for (k = 0; k < par_pp_schedule_chunks(s); k++) printf(" %d", par_pp_schedule_stage(s, r, k));
        }
        printf("%s\n", par_pp_schedule_stages(s) > 64 ? "; ..." : "");
    }
    par_pp_schedule_destroy(s);
    return 0;
}

/* A whole file as a string (exits on failure). */
static char *read_text_file(const char *path, const char *what) {
    FILE *f = fopen(path, "rb");
    long size;
    char *text;
    if (!f) die("%s: %.200s: %s", what, path, strerror(errno));
    fseek(f, 0, SEEK_END), size = ftell(f), fseek(f, 0, SEEK_SET);
    if (size < 0 || size > (1 << 24)) fclose(f), die("%s: %.200s: unreadable or larger than 16 MiB", what, path);
    text = (char *)malloc((size_t)size + 1);
    if (!text || fread(text, 1, (size_t)size, f) != (size_t)size) fclose(f), die("%s: %.200s: read failed", what, path);
    fclose(f);
    text[size] = 0;
    return text;
}

static void print_auto_plan(int rank, const par_auto_plan *p, int devices) {
    char name[128];
    par_auto_plan_format(p, name, sizeof name);
    printf("%2d. %-44s step %9.4g s  memory %9.4g MiB\n", rank, name, p->predicted.step_time, p->predicted.memory_bytes / 1048576.0);
    printf("    compute %.3g s, tp comm %.3g s, cp comm %.3g s, pp p2p %.3g s, dp/ZeRO comm %.3g s, bubble %.1f%%\n",
           p->predicted.compute_time, p->predicted.tp_comm_time, p->predicted.cp_comm_time, p->predicted.pp_comm_time, p->predicted.dp_comm_time, 100 * p->predicted.bubble);
    printf("    memory: weights %.4g, gradients %.4g, optimizer %.4g, activations %.4g, pipeline buffers %.4g MiB\n",
           p->predicted.weights_bytes / 1048576.0, p->predicted.grads_bytes / 1048576.0, p->predicted.optimizer_bytes / 1048576.0,
           p->predicted.activation_bytes / 1048576.0, p->predicted.boundary_bytes / 1048576.0);
    printf("    TFLOP/s per device: %.4g (model flops), %.4g (with recomputation's)\n",
           p->predicted.model_flops / p->predicted.step_time / devices / 1e12,
           p->predicted.hardware_flops / p->predicted.step_time / devices / 1e12);
}

/* ---- plan: its inputs (files or flags) and its JSON output ---------------------- */

#define PLAN_MODEL_FLAGS 8

/* The model from a file (MindFormers keys), each flag given overriding the
   file's value; without a file every flag is needed (names the missing ones). */
static void plan_model(const args *a, const char *file, par_model_shape *m) {
    const struct {
        const char *name;
        int *field;
    } flags[PLAN_MODEL_FLAGS] = {{"layers", &m->layers}, {"hidden", &m->hidden}, {"heads", &m->heads},
                                 {"kv-heads", &m->kv_heads}, {"ffn", &m->ffn}, {"vocab", &m->vocab},
                                 {"seq", &m->seq}, {"global-batch", &m->batch}};
    char missing[160] = "";
    int i;
    memset(m, 0, sizeof *m);
    if (file) {
        char *text = read_text_file(file, "plan: model");
        par_status st = par_model_shape_parse(text, m);
        free(text);
        check(st, file);
    }
    for (i = 0; i < PLAN_MODEL_FLAGS; i++) {
        char what[32];
        if (!arg_get(a, flags[i].name)) {
            if (!file) /* the list fits: 8 names of at most 15 bytes */
                snprintf(missing + strlen(missing), sizeof missing - strlen(missing), "%s--%s", missing[0] ? ", " : "",
                         flags[i].name);
            continue;
        }
        snprintf(what, sizeof what, "--%s", flags[i].name);
        *flags[i].field = (int)parse_int(arg_get(a, flags[i].name), 1, 1 << 24, what);
    }
    if (missing[0])
        die("plan: no model file, so the model needs --layers, --hidden, --heads, --kv-heads, --ffn, --vocab, --seq and "
            "--global-batch; missing %s (or give --model FILE)", missing);
}

/* 1 when every model flag is given: the model needs no file. */
static int plan_model_flags_complete(const args *a) {
    static const char *const names[PLAN_MODEL_FLAGS] = {"layers", "hidden", "heads", "kv-heads",
                                                        "ffn", "vocab", "seq", "global-batch"};
    int i;
    for (i = 0; i < PLAN_MODEL_FLAGS; i++)
        if (!arg_get(a, names[i])) return 0;
    return 1;
}

/* --fix dp=8,tp=8,pp=16,cp=1 (any subset): degrees the search keeps; each, and
   their product, must divide the cluster's devices (else nothing could match). */
static void plan_fix(const char *text, int devices, par_auto_config *fixed) {
    static const char *const names[4] = {"dp", "tp", "cp", "pp"};
    int *fields[4];
    char buf[256], *tok, *next;
    long long product = 1;
    int i, nfixed = 0;
    fields[0] = &fixed->dp, fields[1] = &fixed->tp, fields[2] = &fixed->cp, fields[3] = &fixed->pp;
    if (strlen(text) >= sizeof buf) die("--fix: '%.64s...' is too long", text);
    strcpy(buf, text);
    for (tok = buf; tok; tok = next) {
        char *eq, what[96];
        if ((next = strchr(tok, ','))) *next++ = 0;
        if (!tok[0]) die("--fix: empty entry in '%.64s' (expected NAME=N, comma-separated: dp, tp, cp, pp)", text);
        eq = strchr(tok, '=');
        if (!eq) die("--fix %.64s: expected NAME=N (dp, tp, cp, pp)", tok);
        *eq = 0;
        for (i = 0; i < 4 && strcmp(tok, names[i]); i++) {
        }
        if (i == 4) die("--fix %.32s=%.32s: unknown degree (dp, tp, cp, pp)", tok, eq + 1);
        if (*fields[i]) die("--fix %s: given twice in '%.64s'", names[i], text);
        snprintf(what, sizeof what, "--fix %s=%.64s", names[i], eq + 1);
        *fields[i] = (int)parse_int(eq + 1, 1, 1 << 24, what);
        if (devices % *fields[i]) die("%s: %d does not divide the cluster's %d devices", what, *fields[i], devices);
        product *= *fields[i];
        nfixed++;
    }
    if (devices % product)
        die("--fix %.64s: the fixed degrees multiply to %lld, which does not divide the cluster's %d devices", text,
            product, devices);
    if (nfixed == 4 && product != devices)
        die("--fix %.64s: dp x tp x cp x pp is %lld, not the cluster's %d devices", text, product, devices);
}

/* --schedule gpipe,1f1b or all: the pipeline kinds searched (bits of par_auto_desc.schedules). */
static uint32_t plan_schedules(const char *text) {
    char buf[256], *tok, *next;
    uint32_t bits = 0;
    if (!strcmp(text, "all")) return (1u << PAR_PP_KIND_COUNT) - 1;
    if (strlen(text) >= sizeof buf) die("--schedule: '%.64s...' is too long", text);
    strcpy(buf, text);
    for (tok = buf; tok; tok = next) {
        par_pp_kind kind;
        if ((next = strchr(tok, ','))) *next++ = 0;
        if (!tok[0]) die("--schedule: empty entry in '%.64s' (a comma list of gpipe, 1f1b, interleaved, zb-h1, or all)", text);
        check(par_pp_kind_parse(tok, &kind), "--schedule (a comma list, or all)");
        bits |= 1u << kind;
    }
    return bits;
}

/* A JSON number: non-finite values (never expected) as null, so every line parses. */
static void json_num(const char *key, double v) {
    if (isfinite(v))
        printf("\"%s\":%.12g", key, v);
    else
        printf("\"%s\":null", key);
}

/* A JSON string (the cut examples quote user numbers only, but escape anyway). */
static void json_str(const char *key, const char *s) {
    printf("\"%s\":\"", key);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            printf("\\%c", c);
        else if (c < 0x20 || c == 0x7f)
            printf("\\u%04x", c);
        else
            putchar(c);
    }
    putchar('"');
}

/* One plan as one JSON line, keys in a fixed order. cp_algo is null without
   cp and schedule null without pp (the table prints neither then). */
static void print_auto_plan_json(int rank, const par_auto_plan *p, int batch, int devices) {
    const par_auto_config *c = &p->config;
    const par_auto_prediction *q = &p->predicted;
    printf("{\"rank\":%d,\"dp\":%d,\"tp\":%d,\"pp\":%d,\"cp\":%d,\"sp\":%s,", rank, c->dp, c->tp, c->pp, c->cp,
           c->sp ? "true" : "false");
    if (c->cp > 1) json_str("cp_algo", par_cp_algo_name(c->cp_algo)); else printf("\"cp_algo\":null");
    putchar(',');
    if (c->pp > 1) json_str("schedule", par_pp_kind_name(c->schedule)); else printf("\"schedule\":null");
    /* the search only keeps plans whose batch splits into dp x micro-batches */
    printf(",\"chunks\":%d,\"zero\":%d,\"micro_batches\":%d,\"micro_batch_size\":%d,", c->chunks > 0 ? c->chunks : 1,
           c->zero, c->micro_batches, batch / (c->dp * c->micro_batches));
    json_str("recompute", par_recompute_mode_name(c->recompute)), putchar(',');
    json_str("dtype", par_dtype_name(c->dtype)), putchar(',');
    json_num("step_s", q->step_time), putchar(',');
    json_num("memory_bytes", q->memory_bytes), putchar(',');
    json_num("model_flops", q->model_flops), putchar(',');
    json_num("hardware_flops", q->hardware_flops), putchar(',');
    json_num("model_tflops_per_device", q->model_flops / q->step_time / devices / 1e12), putchar(',');
    json_num("hardware_tflops_per_device", q->hardware_flops / q->step_time / devices / 1e12);
    printf(",\"time\":{");
    json_num("compute", q->compute_time), putchar(',');
    json_num("tp_comm", q->tp_comm_time), putchar(',');
    json_num("cp_comm", q->cp_comm_time), putchar(',');
    json_num("pp_comm", q->pp_comm_time), putchar(',');
    json_num("dp_comm", q->dp_comm_time), putchar(',');
    json_num("critical", q->critical_time), putchar(',');
    json_num("shared", q->shared_time), putchar(',');
    json_num("bubble", q->bubble);
    printf("},\"memory\":{");
    json_num("weights", q->weights_bytes), putchar(',');
    json_num("grads", q->grads_bytes), putchar(',');
    json_num("optimizer", q->optimizer_bytes), putchar(',');
    json_num("activations", q->activation_bytes), putchar(',');
    json_num("boundaries", q->boundary_bytes);
    printf("}}\n");
}

/* The last JSON line: why the other plans were cut (par_auto_cuts). */
static void print_auto_cuts_json(const par_auto_cuts *cuts, int shown) {
    printf("{\"considered\":%lld,\"fit\":%lld,\"shown\":%d,\"over_memory\":%lld,\"not_divisible\":%lld,"
           "\"schedule_refused\":%lld,",
           (long long)cuts->considered, (long long)cuts->ranked, shown, (long long)cuts->over_memory,
           (long long)cuts->not_divisible, (long long)cuts->schedule);
    json_num("smallest_memory_bytes", cuts->smallest_memory), putchar(',');
    json_str("over_memory_example", cuts->over_memory_example), putchar(',');
    json_str("not_divisible_example", cuts->not_divisible_example), putchar(',');
    json_str("schedule_example", cuts->schedule_example);
    printf("}\n");
}

/* The whole-plan search: the model from a file and / or flags, the cluster from
   a file, the search's inputs from flags (see the usage text). */
static int cmd_plan(int argc, char **argv) {
    static const opt_spec specs[] = {
        {"top", 1, 0},           {"memory-cap", 1, 0},   {"dtype", 1, 0},      {"recompute", 1, 0},
        {"model", 1, 0},         {"cluster", 1, 0},      {"layers", 1, 0},     {"hidden", 1, 0},
        {"heads", 1, 0},         {"kv-heads", 1, 0},     {"ffn", 1, 0},        {"vocab", 1, 0},
        {"seq", 1, 0},           {"global-batch", 1, 0}, {"fix", 1, 0},        {"schedule", 1, 0},
        {"max-micro-batches", 1, 0}, {"search-mode", 1, 0}, {"json", 0, 0},    {"micro-batch-size", 1, 0},
        {"max-zero", 1, 0},      {"no-sp", 0, 0},        {"devices", 1, 0},    {"chunks", 1, 0},
        {NULL, 0, 0}};
    par_auto_desc d;
    par_auto_cuts cuts;
    par_auto_plan plans[64];
    args a;
    const char *pos[2], *model_file, *cluster_file;
    char *text;
    int top, count = 0, i, npos = 0, json;
    par_status st;
    /* MODEL.yaml CLUSTER.yaml may lead, as before the flags existed */
    while (npos < argc && strncmp(argv[npos], "--", 2)) {
        if (npos == 2) die("plan: unexpected argument '%.64s' (at most MODEL.yaml CLUSTER.yaml before the options)", argv[npos]);
        pos[npos] = argv[npos];
        npos++;
    }
    parse_args(argc - npos, argv + npos, "plan", specs, &a);
    model_file = arg_get(&a, "model");
    cluster_file = arg_get(&a, "cluster");
    if (npos == 2) {
        if (model_file || cluster_file)
            die("plan: '%.64s %.64s' name the model and cluster files, and --%s names one again", pos[0], pos[1],
                model_file ? "model" : "cluster");
        model_file = pos[0], cluster_file = pos[1];
    } else if (npos == 1) {
        /* one file: the model, unless --model or all the model flags give it (then the cluster) */
        if (model_file && cluster_file)
            die("plan: unexpected argument '%.64s': --model and --cluster already name the files", pos[0]);
        if (!model_file && (cluster_file || !plan_model_flags_complete(&a)))
            model_file = pos[0];
        else
            cluster_file = pos[0];
    }
    if (!cluster_file)
        die("plan: no cluster: give --cluster FILE (or CLUSTER.yaml after the model file); usage: par-explain plan "
            "[MODEL.yaml] [CLUSTER.yaml] [--model FILE] [--cluster FILE] [--layers N ...] [options]");
    memset(&d, 0, sizeof d);
    plan_model(&a, model_file, &d.model);
    text = read_text_file(cluster_file, "plan: cluster");
    st = par_cluster_parse(text, &d.cluster);
    free(text);
    check(st, cluster_file);
    if (arg_get(&a, "devices")) { /* the same machine at another size: the checks as the file's own count */
        d.cluster.devices = (int)parse_int(arg_get(&a, "devices"), 1, 1 << 24, "--devices");
        check(par_cluster_check(&d.cluster), "--devices");
    }
    top = arg_get(&a, "top") ? (int)parse_int(arg_get(&a, "top"), 1, 64, "--top") : 5;
    json = arg_flag(&a, "json");
    if (arg_get(&a, "dtype")) { /* one type, a comma list or all: the compute types searched */
        char list[64], *tok, *next;
        snprintf(list, sizeof list, "%s", !strcmp(arg_get(&a, "dtype"), "all") ? "f32,bf16,f16" : arg_get(&a, "dtype"));
        for (tok = list; tok; tok = next) {
            par_dtype dt;
            if ((next = strchr(tok, ','))) *next++ = 0;
            check(par_dtype_parse(tok, &dt), "--dtype (f32, bf16, f16, a comma list, or all)");
            if (dt != PAR_F32 && dt != PAR_BF16 && dt != PAR_F16) die("--dtype %s: a model trains in f32, bf16 or f16", tok);
            if (!d.dtypes) d.model.dtype = dt; /* the first named: what the model line prints */
            d.dtypes |= 1u << dt;
        }
    }
    if (arg_get(&a, "recompute") && !strcmp(arg_get(&a, "recompute"), "all")) {
        d.recomputes = (1u << PAR_RECOMPUTE_MODE_COUNT) - 1;
    } else if (arg_get(&a, "recompute")) {
        par_recompute_mode rc;
        check(par_recompute_mode_parse(arg_get(&a, "recompute"), &rc), "--recompute (or all)");
        d.recomputes = 1u << rc;
    }
    if (arg_get(&a, "memory-cap")) {
        d.memory_cap = parse_double(arg_get(&a, "memory-cap"), "--memory-cap");
        if (!(d.memory_cap > 0)) die("--memory-cap: must be a number of bytes > 0");
    }
    if (arg_get(&a, "schedule")) d.schedules = plan_schedules(arg_get(&a, "schedule"));
    if (arg_get(&a, "max-micro-batches"))
        d.max_micro_batches = (int)parse_int(arg_get(&a, "max-micro-batches"), 1, 65536, "--max-micro-batches");
    if (arg_get(&a, "max-zero")) { /* 0: ZeRO off (par_auto_desc.max_zero 0 would be its default, 2) */
        d.max_zero = (int)parse_int(arg_get(&a, "max-zero"), 0, 2, "--max-zero");
        if (d.max_zero == 0) d.search = PAR_AUTO_ALL & ~(uint32_t)PAR_AUTO_ZERO;
    }
    if (arg_flag(&a, "no-sp")) d.search = (d.search ? d.search : PAR_AUTO_ALL) & ~(uint32_t)PAR_AUTO_SP;
    if (arg_get(&a, "micro-batch-size"))
        d.micro_batch_size = (int)parse_int(arg_get(&a, "micro-batch-size"), 1, 1 << 24, "--micro-batch-size");
    if (arg_get(&a, "chunks")) /* the looped kinds' chunks per rank (par_auto_desc.fixed.chunks), any search mode */
        d.fixed.chunks = (int)parse_int(arg_get(&a, "chunks"), 2, 64, "--chunks");
    d.mode = PAR_SEARCH_DYNAMIC_PROGRAMMING;
    if (arg_get(&a, "search-mode")) check(par_search_mode_parse(arg_get(&a, "search-mode"), &d.mode), "--search-mode");
    if (arg_get(&a, "fix")) {
        /* only sharding_propagation keeps par_auto_desc.fixed: --fix picks it, and refuses another */
        if (arg_get(&a, "search-mode") && d.mode != PAR_SEARCH_SHARDING_PROPAGATION)
            die("--fix: fixed degrees need --search-mode sharding_propagation (the only mode that keeps them, and the "
                "default with --fix), not %s", par_search_mode_name(d.mode));
        d.mode = PAR_SEARCH_SHARDING_PROPAGATION;
        plan_fix(arg_get(&a, "fix"), d.cluster.devices, &d.fixed);
    }
    st = par_auto_search(&d, plans, top, &count, &cuts);
    check(st, "plan"); /* nothing fits: the message gives the smallest plan's memory */
    if (json) {
        for (i = 0; i < count && i < top; i++) print_auto_plan_json(i + 1, &plans[i], d.model.batch, d.cluster.devices);
        print_auto_cuts_json(&cuts, count < top ? count : top);
        return 0;
    }
    printf("model: %d layers, hidden %d, %d heads (%d kv), ffn %d, vocab %d, seq %d, batch %d, %s\n", d.model.layers,
           d.model.hidden, d.model.heads, d.model.kv_heads, d.model.ffn, d.model.vocab, d.model.seq, d.model.batch,
           par_dtype_name(d.model.dtype));
    printf("cluster: %d devices, %d per node, %.4g MiB and %.4g Gflop/s each\n", d.cluster.devices,
           d.cluster.devices_per_node ? d.cluster.devices_per_node : d.cluster.devices, d.cluster.memory_bytes / 1048576.0,
           d.cluster.flops / 1e9);
    printf("top %d of %d plans that fit, fastest first:\n", count < top ? count : top, count);
    for (i = 0; i < count && i < top; i++) print_auto_plan(i + 1, &plans[i], d.cluster.devices);
    printf("considered %lld plans: %lld fit, %lld over memory, %lld not divisible, %lld refused by the schedule\n",
           (long long)cuts.considered, (long long)cuts.ranked, (long long)cuts.over_memory, (long long)cuts.not_divisible,
           (long long)cuts.schedule);
    if (cuts.over_memory) printf("  over memory, e.g. %s\n", cuts.over_memory_example);
    if (cuts.not_divisible) printf("  not divisible, e.g. %s\n", cuts.not_divisible_example);
    if (cuts.schedule) printf("  schedule, e.g. %s\n", cuts.schedule_example);
    return 0;
}

/* Measure this machine on rank threads and print the profile (a cluster file). */
static int cmd_calibrate(int argc, char **argv) {
    static const opt_spec specs[] = {{"ranks", 1, 0}, {"memory", 1, 0}, {"model", 1, 0}, {"gemm", 1, 0},
                                     {"rows", 1, 0}, {"cols", 1, 0}, {"head-dim", 1, 0}, {"seq", 1, 0}, {NULL, 0, 0}};
    par_calibrate_desc desc;
    par_cluster cluster;
    args a;
    char text[1024];
    int ranks;
    parse_args(argc, argv, "calibrate", specs, &a);
    memset(&desc, 0, sizeof desc);
    ranks = arg_get(&a, "ranks") ? (int)parse_int(arg_get(&a, "ranks"), 1, 256, "--ranks") : 2;
    if (arg_get(&a, "memory")) {
        desc.memory_bytes = parse_double(arg_get(&a, "memory"), "--memory");
        if (!(desc.memory_bytes > 0)) die("--memory: must be a number of bytes > 0");
    }
    if (arg_get(&a, "model")) {
        par_model_shape model;
        char *yaml = read_text_file(arg_get(&a, "model"), "calibrate: model");
        par_status st = par_model_shape_parse(yaml, &model);
        free(yaml);
        check(st, arg_get(&a, "model"));
        check(par_calibrate_desc_for_model(&model, ranks, &desc), arg_get(&a, "model"));
    }
    /* a GEMM shape given here is what is timed, not the model's layer */
    if (arg_get(&a, "gemm") || arg_get(&a, "cols")) memset(&desc.model, 0, sizeof desc.model);
    if (arg_get(&a, "gemm")) desc.gemm_size = (int)parse_int(arg_get(&a, "gemm"), 16, 8192, "--gemm");
    if (arg_get(&a, "rows")) desc.gemm_rows = (int)parse_int(arg_get(&a, "rows"), 1, 1 << 20, "--rows");
    if (arg_get(&a, "cols")) desc.gemm_cols = (int)parse_int(arg_get(&a, "cols"), 1, 65536, "--cols");
    if (arg_get(&a, "head-dim")) desc.head_dim = (int)parse_int(arg_get(&a, "head-dim"), 1, 256, "--head-dim");
    if (arg_get(&a, "seq")) desc.seq = (int)parse_int(arg_get(&a, "seq"), 1, 8192, "--seq");
    check(par_calibrate_threads(ranks, &desc, &cluster, NULL), "calibrate");
    par_cluster_format(&cluster, text, sizeof text);
    printf("# par-explain calibrate --ranks %d: this machine, measured now (a cluster file)\n%s", ranks, text);
    return 0;
}

/* Strategies for an operator graph file. */
static int cmd_graph(int argc, char **argv) {
    static const opt_spec specs[] = {{"search-mode", 1, 0}, {"memory-cap", 1, 0}, {NULL, 0, 0}};
    par_search_mode mode = PAR_SEARCH_DYNAMIC_PROGRAMMING;
    par_graph *g = NULL;
    par_graph_result r;
    args a;
    double cap = 0;
    char *text, *out;
    int n;
    par_status st;
    if (argc < 1 || !strncmp(argv[0], "--", 2))
        die("graph: usage: par-explain graph FILE [--search-mode MODE] [--memory-cap BYTES]");
    parse_args(argc - 1, argv + 1, "graph", specs, &a);
    if (arg_get(&a, "search-mode")) check(par_search_mode_parse(arg_get(&a, "search-mode"), &mode), "--search-mode");
    if (arg_get(&a, "memory-cap")) {
        cap = parse_double(arg_get(&a, "memory-cap"), "--memory-cap");
        if (!(cap > 0)) die("--memory-cap: must be a number of bytes > 0");
    }
    text = read_text_file(argv[0], "graph");
    st = par_graph_parse(text, NULL, &g);
    free(text);
    check(st, argv[0]);
    st = par_graph_search(g, mode, cap, &r);
    if (st != PAR_OK) par_graph_destroy(g);
    check(st, par_search_mode_name(mode));
    n = par_graph_format_result(g, &r, NULL, 0);
    out = (char *)malloc((size_t)n + 1);
    if (!out) die("graph: out of memory");
    par_graph_format_result(g, &r, out, (size_t)n + 1);
    printf("%s: %d ops, %d edges on %s\n", par_search_mode_name(mode), par_graph_num_ops(g), par_graph_num_edges(g),
           argv[0]);
    fputs(out, stdout);
    free(out);
    par_graph_destroy(g);
    return 0;
}

static int cmd_tour(int argc, char **argv) {
    static const opt_spec specs[] = {{NULL, 0, 0}};
    args a;
    par_plan plan, greedy;
    par_op_desc op;
    par_mesh mesh;
    par_layout from, to;
    int64_t shape[3] = {2, 8, 32}, shape4[4] = {2, 8, 4, 8}, bad4[4] = {2, 8, 2, 16};
    char buf[256];
    par_status st;

    parse_args(argc, argv, "tour", specs, &a);
    printf("par-explain tour: layouts, strategies and redistribution in parallel.h\n");
    printf("(each step: what it shows, the command that reproduces it, then its real output)\n");

    say("1. A device mesh lays out ranks row-major, last axis fastest. A tensor map gives each\n"
        "   tensor dim the DEVICE DIM that splits it, counted from the right (MindSpore's\n"
        "   convention): on mesh [2,4], device dim 0 is the axis of size 4, device dim 1 the\n"
        "   axis of size 2. Map [1,0] splits rows 2 ways and columns 4 ways:");
    tour_layout("2,4", "8,16", "[1,0]");
    say("   Named axes read better. [dp,None] splits rows over dp and leaves columns whole, so\n"
        "   the ranks of one tp group all hold the same slice (repeated data):");
    tour_layout("dp=2,tp=4", "8,16", "[dp,None]");

    say("2. MindSpore's documented examples, Z = (X x W) x V on 4 devices, 16x16 f32.\n"
        "   a) A data-parallel output [0,-1] (rows split) feeds a consumer that needs the whole\n"
        "      tensor [-1,-1]: every rank gathers the other three row blocks, one all_gather.\n"
        "      Each rank's slice is 4x16x4 = 256 bytes; it receives 3 of them: 768 bytes.");
    tour_redistribute("4", "16,16", "[0,-1]", NULL, "[-1,-1]", 0, &plan);
    say("   b) A column-split output [-1,0] feeds a row-split input [0,-1]: one all_to_all swaps\n"
        "      which dim the device dim splits; each rank keeps 1/4 and sends 3/4 of 256 bytes.");
    tour_redistribute("4", "16,16", "[-1,0]", NULL, "[0,-1]", 0, &plan);
    say("   c) Matching layouts need nothing...");
    tour_redistribute("4", "16,16", "[0,-1]", NULL, "[0,-1]", 0, &plan);
    say("      ...but a matmul whose contraction dim K is split 4 ways, ((1,4),(4,1)), leaves\n"
        "      every rank with a partial sum of the output: its forward all_reduce over 4 ranks.\n"
        "$ par-explain strategy --op matmul --devices 4 --shapes 16x16,16x16 --strategy \"((1,4),(4,1))\"");
    memset(&op, 0, sizeof op);
    op.kind = PAR_OP_MATMUL;
    op.num_inputs = 2;
    op.ndim[0] = op.ndim[1] = 2;
    op.shape[0][0] = op.shape[0][1] = op.shape[1][0] = op.shape[1][1] = 16;
    explain_strategy(&op, "((1,4),(4,1))", 4, NULL);

    say("3. parallel.h makes partial sums explicit (DTensor's Partial), so reductions are\n"
        "   redistributions too. Partial over device dim 0 to rows split: reduce_scatter.");
    tour_redistribute("4", "16,16", "[-1,-1] partial=0", NULL, "[0,-1]", 0, &plan);
    say("   Partial to replicated: all_reduce (twice the bytes of reduce_scatter).");
    tour_redistribute("4", "16,16", "[-1,-1] partial=0", NULL, "[-1,-1]", 0, &plan);

    say("4. Megatron sequence parallel on tp=4, activation x = [s,b,h] = [16,2,8].\n"
        "   Before a column-parallel linear: Shard(seq) -> Replicate is an all_gather.");
    tour_redistribute("tp=4", "16,2,8", "[tp,None,None]", NULL, "[None,None,None]", 0, &plan);
    say("   After a row-parallel linear: Partial -> Shard(seq) is a reduce_scatter.");
    tour_redistribute("tp=4", "16,2,8", "[None,None,None] partial=tp", NULL, "[tp,None,None]", 0, &plan);
    say("   Ulysses context parallel, q = [b,s,heads,d] = [2,16,8,4]: Shard(seq) -> Shard(heads)\n"
        "   is one all_to_all.");
    tour_redistribute("cp=4", "2,16,8,4", "[None,cp,None,None]", NULL, "[None,None,cp,None]", 0, &plan);

    say("5. The planner searches for the cheapest plan (A*); MindSpore's greedy walk does not.\n"
        "   Greedy first all-reduces every partial dim and then splits; the optimal plan fuses\n"
        "   both into one reduce_scatter, half the bytes. Greedy:");
    tour_redistribute("4", "16,16", "[-1,-1] partial=0", NULL, "[0,-1]", 1, &greedy);
    say("   Optimal:");
    tour_redistribute("4", "16,16", "[-1,-1] partial=0", NULL, "[0,-1]", 0, &plan);
    say("   Swapping the two device dims of a 2x4 mesh, [0,1] -> [1,0], is a cycle. MindSpore's\n"
        "   walk breaks it with an all_gather; the planner cuts both dims at every shard\n"
        "   boundary (16 -> 2 x 2 x 4) and factors the 4-way mesh axis into 2 x 2, where four\n"
        "   all_to_alls of single sub-dims swap them. Greedy:");
    tour_redistribute("2,4", "16,16", "[0,1]", NULL, "[1,0]", 1, &greedy);
    say("   Optimal:");
    tour_redistribute("2,4", "16,16", "[0,1]", NULL, "[1,0]", 0, &plan);
    printf("   (greedy %lld bytes, optimal %lld bytes per rank)\n", (long long)greedy.total_bytes,
           (long long)plan.total_bytes);

    say("6. A layout-preserving reshape moves no data: [B,S,H*D] = [2,8,32] with H*D split by\n"
        "   tp=4 is, read row-major, [B,S,H,D] = [2,8,4,8] with the heads split by tp.");
    parse_mesh("tp=4", &mesh);
    check(par_layout_parse(&from, &mesh, 3, shape, "[None,None,tp]"), "reshape source");
    check(par_layout_reshape(&from, 4, shape4, &to), "reshape");
    printf("reshape: %s shape=[2,8,32]", layout_text(&from, buf, sizeof buf));
    printf(" -> %s shape=[2,8,4,8] (local)\n", layout_text(&to, buf, sizeof buf));
    say("   As a redistribution, it is a single local reshape step:");
    tour_redistribute("tp=4", "2,8,32", "[None,None,tp]", "2,8,4,8", "[None,None,tp,None]", 0, &plan);
    say("   With only 2 heads, the 4 shards of H*D cut through heads: not local, and the library\n"
        "   says why:");
    st = par_layout_reshape(&from, 4, bad4, &to);
    if (st == PAR_OK)
        printf("reshape: unexpectedly local: %s\n", layout_text(&to, buf, sizeof buf));
    else
        printf("reshape refused (%s): %s\n", par_status_string(st), par_last_error());

    say("Try your own: par-explain --help");
    return 0;
}

/* ---------------------------------------------------------------------------
   main
   ------------------------------------------------------------------------- */

int main(int argc, char **argv) {
    int i;
    if (argc < 2)
        die("no command given (commands: layout, strategy, strategies, redistribute, pipeline, plan, calibrate, graph, "
            "tour; see --help)");
    for (i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0 || (i == 1 && strcmp(argv[i], "help") == 0)) {
            fputs(usage_text, stdout), fputs(usage_text_more, stdout), fputs(usage_text_plan, stdout);
            return 0;
        }
    }
    if (strcmp(argv[1], "layout") == 0) return cmd_layout(argc - 2, argv + 2);
    if (strcmp(argv[1], "strategy") == 0) return cmd_strategy(argc - 2, argv + 2);
    if (strcmp(argv[1], "strategies") == 0) return cmd_strategies(argc - 2, argv + 2);
    if (strcmp(argv[1], "redistribute") == 0) return cmd_redistribute(argc - 2, argv + 2);
    if (strcmp(argv[1], "tour") == 0) return cmd_tour(argc - 2, argv + 2);
    if (strcmp(argv[1], "pipeline") == 0) return cmd_pipeline(argc - 2, argv + 2);
    if (strcmp(argv[1], "plan") == 0) return cmd_plan(argc - 2, argv + 2);
    if (strcmp(argv[1], "graph") == 0) return cmd_graph(argc - 2, argv + 2);
    if (strcmp(argv[1], "calibrate") == 0) return cmd_calibrate(argc - 2, argv + 2);
    die("unknown command '%.64s' (commands: layout, strategy, strategies, redistribute, pipeline, tour)", argv[1]);
    return EXIT_USAGE;
}
