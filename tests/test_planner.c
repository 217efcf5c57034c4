/* tests/test_planner.c - the >>planner section: the operator graph, its costs
   and the three search modes under a memory cap.

   The oracle for the dynamic programming search is an exhaustive enumeration
   written here: every combination of the ops' candidates, cost = the ops'
   totals plus the edges' costs (read through the graph's accessors), kept
   when the summed memory fits the cap. On random chains, trees and DAGs with
   shared inputs, under random caps, the DP's cost must equal the enumeration's
   minimum, and every mode must respect the cap. */
#define PARALLEL_IMPLEMENTATION
#include "test.h"
#include <math.h>
#include <stdlib.h>

static unsigned rng_state = 12345u;
static unsigned rnd(unsigned n) {
    rng_state = rng_state * 1103515245u + 12345u;
    return (rng_state >> 8) % n;
}

enum { M = 16, H = 8, MAX_OPS = 7 };

/* One random op on [M,H] activations; returns its input count. */
static int random_op(par_op_desc *d, int kind_pick) {
    memset(d, 0, sizeof *d);
    switch (kind_pick) {
    case 0: /* x[M,H] . W[H,H] */
        d->kind = PAR_OP_MATMUL;
        d->num_inputs = 2;
        d->ndim[0] = d->ndim[1] = 2;
        d->shape[0][0] = M, d->shape[0][1] = H, d->shape[1][0] = H, d->shape[1][1] = H;
        d->params = 2u;
        return 1;
    case 1:
        d->kind = PAR_OP_RMSNORM;
        d->num_inputs = 2;
        d->ndim[0] = 2, d->ndim[1] = 1;
        d->shape[0][0] = M, d->shape[0][1] = H, d->shape[1][0] = H;
        d->params = 2u;
        return 1;
    case 2:
        d->kind = PAR_OP_SOFTMAX;
        d->num_inputs = 1;
        d->ndim[0] = 2;
        d->shape[0][0] = M, d->shape[0][1] = H;
        return 1;
    default: /* x + y: two activation inputs */
        d->kind = PAR_OP_ELEMENTWISE;
        d->num_inputs = 2;
        d->ndim[0] = d->ndim[1] = 2;
        d->shape[0][0] = d->shape[1][0] = M, d->shape[0][1] = d->shape[1][1] = H;
        return 2;
    }
}

typedef struct oracle {
    par_graph *g;
    int n, ne, cand[MAX_OPS], pick[MAX_OPS];
    double cap, best, best_mem, min_sum, max_sum;
    int found;
} oracle;

static double assignment_cost(oracle *o, const int *pick, double *mem) {
    double c = 0;
    int i, e;
    *mem = 0;
    for (i = 0; i < o->n; i++) {
        par_op_cost k;
        par_graph_candidate(o->g, i, pick[i], NULL, &k);
        c += k.total;
        *mem += k.memory_bytes;
    }
    for (e = 0; e < o->ne; e++) {
        int from = 0, to = 0;
        double ec = 0;
        par_graph_edge(o->g, e, &from, NULL, &to, NULL);
        par_graph_edge_cost(o->g, e, pick[from], pick[to], &ec);
        c += ec;
    }
    return c;
}

static void enumerate(oracle *o, int i) {
    if (i == o->n) {
        double mem, c = assignment_cost(o, o->pick, &mem);
        if (o->cap > 0 && mem > o->cap) return;
        if (!o->found || c < o->best) o->best = c, o->best_mem = mem;
        o->found = 1;
        return;
    }
    for (o->pick[i] = 0; o->pick[i] < o->cand[i]; o->pick[i]++) enumerate(o, i + 1);
}

static int close_to(double a, double b) { return fabs(a - b) <= 1e-9 * (fabs(a) + fabs(b)) + 1e-15; }

/* shape: 0 chain, 1 out-tree (an output shared by several consumers), 2 DAG */
static par_graph *random_graph(int shape, int devices, int *n_out) {
    par_graph_desc gd;
    par_graph *g = NULL;
    int n = 3 + (int)rnd(MAX_OPS - 2), i;
    memset(&gd, 0, sizeof gd);
    gd.devices = devices;
    gd.max_candidates = 2 + (int)rnd(3);
    gd.link_latency = rnd(2) ? 1e-6 : 0;
    if (par_graph_create(&gd, &g) != PAR_OK) return NULL;
    for (i = 0; i < n; i++) {
        par_op_desc d;
        int ins = random_op(&d, shape == 2 ? (int)rnd(4) : (int)rnd(3)), id, k;
        if (par_graph_add_op(g, &d, NULL, &id) != PAR_OK) break;
        if (i == 0) continue;
        for (k = 0; k < ins; k++) {
            int from = shape == 0 ? i - 1 : (int)rnd((unsigned)i);
            if (shape == 2 && k == 1 && rnd(3) == 0) from = i - 1; /* often the same producer as input 0 */
            if (par_graph_add_edge(g, from, 0, i, k) != PAR_OK) break;
        }
    }
    *n_out = par_graph_num_ops(g);
    return g;
}

static void property_dp_equals_enumeration(void) {
    int trial, mismatches = 0, checked = 0, capped = 0;
    for (trial = 0; trial < 150; trial++) {
        const int shape = trial % 3, devices = trial % 5 == 4 ? 6 : (rnd(2) ? 4 : 8);
        oracle o;
        par_graph_result r[PAR_SEARCH_MODE_COUNT];
        int i, mode;
        memset(&o, 0, sizeof o);
        o.g = random_graph(shape, devices, &o.n);
        CHECK(o.g != NULL);
        if (!o.g) continue;
        o.ne = par_graph_num_edges(o.g);
        for (i = 0; i < o.n; i++) {
            double lo = 0, hi = 0;
            int k;
            o.cand[i] = par_graph_num_candidates(o.g, i);
            for (k = 0; k < o.cand[i]; k++) {
                par_op_cost c;
                par_graph_candidate(o.g, i, k, NULL, &c);
                if (k == 0 || c.memory_bytes < lo) lo = c.memory_bytes;
                if (k == 0 || c.memory_bytes > hi) hi = c.memory_bytes;
            }
            o.min_sum += lo, o.max_sum += hi;
        }
        /* caps: none, or random between the smallest and the largest plan */
        o.cap = trial % 4 == 0 ? 0 : o.min_sum + (o.max_sum - o.min_sum) * (double)rnd(1000) / 1000.0;
        capped += o.cap > 0 && o.cap < o.max_sum;
        enumerate(&o, 0);
        CHECK(o.found);
        for (mode = 0; mode < PAR_SEARCH_MODE_COUNT; mode++) {
            int pick[MAX_OPS];
            double mem, c;
            CHECK_OK(par_graph_search(o.g, (par_search_mode)mode, o.cap, &r[mode]));
            for (i = 0; i < o.n; i++) pick[i] = par_graph_chosen(o.g, i);
            c = assignment_cost(&o, pick, &mem);
            /* the reported totals are the chosen plan's */
            CHECK_MSG(close_to(c, r[mode].cost) && close_to(mem, r[mode].memory_bytes), "mode %d: %g vs %g", mode, c,
                      r[mode].cost);
            CHECK_MSG(o.cap <= 0 || mem <= o.cap, "mode %d over the cap: %g > %g", mode, mem, o.cap);
            CHECK_MSG(c >= o.best * (1 - 1e-9), "mode %d cheaper than the exhaustive optimum", mode);
        }
        checked++;
        if (!close_to(r[0].cost, o.best)) {
            mismatches++;
            fprintf(stderr, "trial %d (shape %d, %d ops, %d devices, cap %g): dp %.12g, exhaustive %.12g\n", trial,
                    shape, o.n, devices, o.cap, r[0].cost, o.best);
        }
        par_graph_destroy(o.g);
    }
    CHECK_INT(mismatches, 0);
    CHECK(checked == 150);
    CHECK(capped > 50); /* most trials had a cap that binds somewhere */
}

/* a -> b -> c -> (back to b's second input): a cycle */
static void errors(void) {
    par_graph_desc gd;
    par_graph *g = NULL;
    par_graph_result r;
    par_op_desc add;
    par_search_mode mode;
    int a, b, c, k;
    double smallest = 0;
    char want[160];
    memset(&gd, 0, sizeof gd);
    gd.devices = 4;
    CHECK_OK(par_graph_create(&gd, &g));
    random_op(&add, 3);
    add.name = "a";
    CHECK_OK(par_graph_add_op(g, &add, NULL, &a));
    add.name = "b";
    CHECK_OK(par_graph_add_op(g, &add, NULL, &b));
    add.name = "c";
    CHECK_OK(par_graph_add_op(g, &add, NULL, &c));
    CHECK_ERR(par_graph_add_op(g, &add, NULL, NULL), PAR_EINVAL, "used twice");
    CHECK_OK(par_graph_add_edge(g, a, 0, b, 0));
    CHECK_OK(par_graph_add_edge(g, b, 0, c, 0));
    CHECK_ERR(par_graph_add_edge(g, a, 0, b, 0), PAR_EINVAL, "already fed");
    CHECK_ERR(par_graph_add_edge(g, a, 0, 7, 0), PAR_EINVAL, "dangling edge");
    CHECK_ERR(par_graph_add_edge(g, a, 1, c, 1), PAR_EINVAL, "dangling edge");
    CHECK_ERR(par_graph_add_edge(g, a, 0, c, 2), PAR_EINVAL, "has 2 input(s)");
    CHECK_OK(par_graph_search(g, PAR_SEARCH_DYNAMIC_PROGRAMMING, 0, &r));
    /* nothing fits: the message names the smallest plan's memory, summed here */
    for (k = 0; k < 3; k++) {
        double lo = 0;
        int j;
        for (j = 0; j < par_graph_num_candidates(g, k); j++) {
            par_op_cost cst;
            par_graph_candidate(g, k, j, NULL, &cst);
            if (j == 0 || cst.memory_bytes < lo) lo = cst.memory_bytes;
        }
        smallest += lo;
    }
    snprintf(want, sizeof want, "the smallest plan needs %.0f bytes", smallest);
    for (k = 0; k < PAR_SEARCH_MODE_COUNT; k++) {
        CHECK_ERR(par_graph_search(g, (par_search_mode)k, smallest - 1, &r), PAR_ECAPACITY, want);
        CHECK_INT(par_graph_chosen(g, 0), -1);
        CHECK_OK(par_graph_search(g, (par_search_mode)k, smallest, &r)); /* exactly the smallest fits */
        CHECK(close_to(r.memory_bytes, smallest));
    }
    CHECK_OK(par_graph_add_edge(g, c, 0, b, 1)); /* b -> c -> b */
    CHECK_ERR(par_graph_search(g, PAR_SEARCH_DYNAMIC_PROGRAMMING, 0, &r), PAR_EINVAL, "cycle through op");
    CHECK_ERR(par_graph_search(g, PAR_SEARCH_SHARDING_PROPAGATION, 0, &r), PAR_EINVAL, "cycle");
    CHECK_ERR(par_graph_search(g, (par_search_mode)7, 0, &r), PAR_EINVAL, "unknown search_mode");
    par_graph_destroy(g);
    CHECK_ERR(par_search_mode_parse("greedy", &mode), PAR_EINVAL, "unknown search_mode 'greedy'");
    CHECK_OK(par_search_mode_parse("Sharding_Propagation", &mode));
    CHECK_INT(mode, PAR_SEARCH_SHARDING_PROPAGATION);
    CHECK_OK(par_search_mode_parse("recursive_programming", &mode));
    CHECK_INT(mode, PAR_SEARCH_RECURSIVE_PROGRAMMING);
    CHECK_STR(par_search_mode_name(PAR_SEARCH_DYNAMIC_PROGRAMMING), "dynamic_programming");
    gd.devices = 0;
    CHECK_OK(par_graph_create(&gd, &g));
    CHECK_ERR(par_graph_add_op(g, &add, NULL, NULL), PAR_EINVAL, "no device count");
    par_graph_destroy(g);
    gd.link_bandwidth = -1;
    CHECK_ERR(par_graph_create(&gd, &g), PAR_EINVAL, "link_bandwidth");
}

/* The text form, semi-auto (a fixed op keeps its strategy), propagation
   following the fixed op, and an edge whose two ends agree costing nothing. */
static void text_form(void) {
    static const char *text = "# an MLP block\n"
                              "devices 4\n"
                              "op up   matmul [16,8] [8,32] params=1\n"
                              "op act  elementwise [16,32] [16,32]\n"
                              "op down matmul [16,32] [32,8] params=1 strategy=((1,4),(4,1))\n"
                              "edge up -> act.0\n"
                              "edge up.0 -> act.1\n"
                              "edge act -> down.0\n";
    par_graph *g = NULL;
    par_graph_result r;
    par_strategy s, want;
    char buf[2048];
    int mode, e;
    CHECK_OK(par_graph_parse(text, NULL, &g));
    CHECK_INT(par_graph_num_ops(g), 3);
    CHECK_INT(par_graph_num_edges(g), 3);
    CHECK_INT(par_graph_num_candidates(g, 2), 1);
    CHECK_OK(par_strategy_parse("((1,4),(4,1))", &want));
    for (mode = 0; mode < PAR_SEARCH_MODE_COUNT; mode++) {
        CHECK_OK(par_graph_search(g, (par_search_mode)mode, 0, &r));
        CHECK_OK(par_graph_candidate(g, 2, par_graph_chosen(g, 2), &s, NULL));
        CHECK(s.shard[0][1] == 4 && s.shard[1][0] == 4);
        CHECK(par_graph_format_result(g, &r, buf, sizeof buf) > 0 && strstr(buf, "(fixed)") != NULL);
    }
    /* every edge whose producer's output layout equals the consumer's input layout costs 0 */
    for (e = 0; e < par_graph_num_edges(g); e++) {
        int from = 0, to = 0, in = 0, ka, kb, zero = 0, pairs = 0;
        par_graph_edge(g, e, &from, NULL, &to, &in);
        for (ka = 0; ka < par_graph_num_candidates(g, from); ka++)
            for (kb = 0; kb < par_graph_num_candidates(g, to); kb++) {
                par_strategy sa, sb;
                double c = -1;
                CHECK_OK(par_graph_edge_cost(g, e, ka, kb, &c));
                CHECK(c >= 0);
                par_graph_candidate(g, from, ka, &sa, NULL);
                par_graph_candidate(g, to, kb, &sb, NULL);
                /* elementwise x + x split like the matmul's row split of its output: same layout */
                if (sa.shard[0][0] == 4 && sa.shard[0][1] == 1 && sa.shard[1][1] == 1 && sb.ndim[0] == 2 &&
                    sb.shard[in][0] == 4 && sb.shard[in][1] == 1 && to == 1) {
                    zero += c == 0;
                    pairs++;
                }
            }
        CHECK(zero == pairs);
    }
    par_graph_destroy(g);
    CHECK_ERR(par_graph_parse("devices 4\nop a softmax [4,4]\nedge a -> b.0\n", NULL, &g), PAR_EINVAL,
              "line 3");
    CHECK_OK(par_graph_parse("devices 4\nop a softmax [4,4]\nop b softmax [4,4]\nedge a -> b.0\nedge b -> a.0\n",
                             NULL, &g));
    CHECK_ERR(par_graph_search(g, PAR_SEARCH_RECURSIVE_PROGRAMMING, 0, &r), PAR_EINVAL, "cycle");
    par_graph_destroy(g);
    g = NULL;
    CHECK_ERR(par_graph_parse("devices 4\nop a frobnicate [4,4]\n", NULL, &g), PAR_EPARSE, "line 2");
    CHECK_ERR(par_graph_parse("devices 4\nop a softmax [4,4] strategy=((3,1),)\n", NULL, &g), PAR_ESTRATEGY,
              "line 2");
    CHECK_ERR(par_graph_parse("op a softmax [4,4]\n", NULL, &g), PAR_EINVAL, "devices");
    CHECK(g == NULL);
}

int main(void) {
    property_dp_equals_enumeration();
    errors();
    text_form();
    return TEST_END("test_planner");
}
