/* tests/test_planner.c - the >>planner section: the operator graph, its costs
   and the three search modes under a memory cap.

   The oracle for the dynamic programming search is an exhaustive enumeration
   written here: every combination of the ops' candidates, cost = the ops'
   totals plus the edges' costs (read through the graph's accessors), kept
   when the summed memory fits the cap. On random chains, trees and DAGs with
   shared inputs, under random caps, the DP's cost must equal the enumeration's
   minimum, and every mode must respect the cap. */
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

/* ---- whole-plan search ---------------------------------------------------------- */

static const char *tiny_yaml = "model:\n  model_config:\n    vocab_size: 256\n    hidden_size: 64\n    num_layers: 4\n"
                               "    num_heads: 4\n    n_kv_heads: 2\n    intermediate_size: 172\n    seq_length: 64\n"
                               "runner_config:\n  batch_size: 8   # global\n";
static const char *cluster_text = "# 8 threads\ndevices: 8\ndevices_per_node: 4\nintra_node_bandwidth: 10G\n"
                                  "intra_node_latency: 5e-6\ninter_node_bandwidth: 1.25G\ninter_node_latency: 2e-5\n"
                                  "memory_per_device: 16Gi\nflops_per_device: 2e10\n";

/* A host model the test can enumerate on its own: the search must rank by it. */
static double host_step(void *user, const par_auto_plan *p) {
    (void)user;
    return 1.0 / p->config.tp + 0.3 * p->config.pp + 0.05 * p->config.micro_batches + 0.2 * p->config.cp + 0.01 * p->config.zero + (p->config.sp ? 0.001 : 0);
}
static double host_memory(void *user, const par_auto_plan *p) {
    (void)user;
    return 1000.0 / (p->config.tp * p->config.pp) + 100.0 / p->config.micro_batches - 10.0 * p->config.zero;
}

static void whole_plan(void) {
    par_auto_desc d;
    par_auto_plan plans[400];
    par_auto_cuts cuts;
    par_cluster c;
    int count = 0, i, tp, pp, m, z, sp, best_found = 0;
    double params, best = 0, smallest;
    char want[200];
    memset(&d, 0, sizeof d);
    CHECK_OK(par_model_shape_parse(tiny_yaml, &d.model));
    CHECK(d.model.layers == 4 && d.model.kv_heads == 2 && d.model.batch == 8 && d.model.ffn == 172);
    CHECK_OK(par_cluster_parse(cluster_text, &d.cluster));
    CHECK(d.cluster.devices == 8 && d.cluster.intra_bandwidth == 1e10 && d.cluster.memory_bytes == 16.0 * (1 << 30));

    /* the built-in memory model counts the Llama's parameters: checked against a
       count by tensor (embedding, q, k, v, o, gate, up, down, 2 norms, final norm, head) */
    params = 256.0 * 64 + 4 * (64.0 * 64 + 2 * 64.0 * 32 + 64.0 * 64 + 3 * 64.0 * 172 + 2 * 64) + 64 + 256.0 * 64;
    d.cluster.devices = 1;
    d.cluster.devices_per_node = 1;
    CHECK_OK(par_auto_search(&d, plans, 400, &count, &cuts));
    CHECK(count >= 1);
    for (i = 0; i < count && i < 400; i++)
        if (plans[i].config.micro_batches == 1) {
            CHECK_MSG(plans[i].predicted.weights_bytes == params * 4, "%g vs %g", plans[i].predicted.weights_bytes, params * 4);
            CHECK(plans[i].predicted.optimizer_bytes == params * 8 && plans[i].predicted.grads_bytes == params * 4);
        }
    /* ZeRO shards the optimizer state over dp (level 2 the gradients too) */
    d.cluster.devices = 8;
    d.cluster.devices_per_node = 4;
    CHECK_OK(par_auto_search(&d, plans, 400, &count, &cuts));
    CHECK(count > 400); /* more fit than the array holds: it keeps the fastest */
    for (i = 0; i < 400; i++) {
        const par_auto_plan *p = &plans[i];
        CHECK(p->config.dp * p->config.tp * p->config.cp * p->config.pp == 8);
        CHECK(i == 0 || plans[i - 1].predicted.step_time <= p->predicted.step_time);
        CHECK(p->predicted.memory_bytes <= d.cluster.memory_bytes);
        if (p->config.zero >= 1) CHECK(p->predicted.optimizer_bytes * p->config.dp * p->config.cp == p->predicted.weights_bytes * 2);
        /* ZeRO-2: this rank's gradient shard plus bucket buffers (under a pipeline: all of them) */
        if (p->config.zero == 2 && p->config.pp > 1) CHECK(p->predicted.grads_bytes == p->predicted.weights_bytes / (p->config.dp * p->config.cp) + p->predicted.weights_bytes);
        if (p->config.zero == 2 && p->config.pp == 1)
            CHECK(p->predicted.grads_bytes > p->predicted.weights_bytes / (p->config.dp * p->config.cp) &&
                  p->predicted.grads_bytes <= p->predicted.weights_bytes / (p->config.dp * p->config.cp) + p->predicted.weights_bytes);
        /* no ZeRO: the whole f32 gradient; ZeRO-1: and the shard it is reduce-scattered into */
        if (p->config.zero == 0) CHECK(p->predicted.grads_bytes == p->predicted.weights_bytes);
        if (p->config.zero == 1)
            CHECK(p->predicted.grads_bytes == p->predicted.weights_bytes + p->predicted.weights_bytes / (p->config.dp * p->config.cp));
        CHECK(p->config.pp == 1 || p->predicted.bubble > 0);
    }
    CHECK_INT(cuts.considered, cuts.ranked + cuts.not_divisible + cuts.over_memory + cuts.schedule);
    CHECK(cuts.not_divisible > 0 && strstr(cuts.not_divisible_example, "does not") != NULL);

    /* with the host's model the best plan is the enumeration's best, found here independently
       (tp, pp, micro-batches, zero, sp; no cp: the search is told so) */
    d.search = PAR_AUTO_DP | PAR_AUTO_TP | PAR_AUTO_SP | PAR_AUTO_PP | PAR_AUTO_ZERO | PAR_AUTO_ACCUMULATE;
    d.schedules = 1u << PAR_PP_1F1B;
    d.memory = host_memory;
    d.step_time = host_step;
    d.memory_cap = 300;
    for (tp = 1; tp <= 4; tp *= 2)           /* heads 4, kv 2: tp <= 2 divides both */
        for (pp = 1; pp * tp <= 8; pp *= 2)
            for (m = 1; m <= 8; m++)
                for (z = 0; z <= 2; z++)
                    for (sp = 0; sp <= (tp > 1); sp++) {
                        par_auto_plan p;
                        const int dp = 8 / tp / pp;
                        double mem, t;
                        memset(&p, 0, sizeof p);
                        p.config.dp = dp, p.config.tp = tp, p.config.pp = pp, p.config.cp = 1, p.config.micro_batches = m, p.config.zero = z, p.config.sp = sp;
                        if (4 % tp || 2 % tp || 172 % tp || 8 % (dp * m) || 4 % pp || (dp == 1 && z > 0)) continue;
                        if (sp && 64 % tp) continue;
                        mem = host_memory(NULL, &p);
                        t = host_step(NULL, &p);
                        if (mem > 300) continue;
                        if (!best_found || t < best) best = t;
                        best_found = 1;
                    }
    CHECK(best_found);
    CHECK_OK(par_auto_search(&d, plans, 400, &count, &cuts));
    CHECK(count > 0 && plans[0].predicted.step_time == best);
    CHECK(cuts.over_memory > 0 && strstr(cuts.over_memory_example, "over the cap") != NULL);
    d.memory = NULL;
    d.step_time = NULL;
    d.search = 0;
    d.schedules = 0;

    /* a cap nothing fits: the message gives the smallest plan's memory, found here among all plans */
    d.memory_cap = 0;
    CHECK_OK(par_auto_search(&d, NULL, 0, &count, &cuts));
    {
        par_auto_plan *all = (par_auto_plan *)malloc((size_t)count * sizeof *all);
        CHECK_OK(par_auto_search(&d, all, count, &count, &cuts));
        smallest = all[0].predicted.memory_bytes;
        for (i = 0; i < count; i++)
            if (all[i].predicted.memory_bytes < smallest) smallest = all[i].predicted.memory_bytes;
        free(all);
    }
    d.memory_cap = smallest * 0.99;
    snprintf(want, sizeof want, "the smallest plan needs %.4g MiB", smallest / 1048576.0);
    CHECK_ERR(par_auto_search(&d, plans, 400, &count, &cuts), PAR_ECAPACITY, want);
    d.memory_cap = smallest;
    CHECK_OK(par_auto_search(&d, plans, 400, &count, &cuts));

    /* the search modes: dynamic_programming visits every degree tuple, so nothing the
       others find is faster; sharding_propagation keeps the fixed degrees;
       recursive_programming visits fewer plans */
    {
        par_auto_plan dp_best, one[1];
        par_auto_cuts dp_cuts;
        int n2 = 0;
        d.memory_cap = 0;
        CHECK_OK(par_auto_search(&d, one, 1, &n2, &dp_cuts));
        dp_best = one[0];
        d.mode = PAR_SEARCH_SHARDING_PROPAGATION;
        d.fixed.tp = 2;
        CHECK_OK(par_auto_search(&d, plans, 400, &count, &cuts));
        for (i = 0; i < count && i < 400; i++) CHECK(plans[i].config.tp == 2);
        CHECK(plans[0].predicted.step_time >= dp_best.predicted.step_time && cuts.considered < dp_cuts.considered);
        d.mode = PAR_SEARCH_RECURSIVE_PROGRAMMING;
        d.fixed.tp = 0;
        CHECK_OK(par_auto_search(&d, plans, 400, &count, &cuts));
        CHECK(count > 0 && plans[0].predicted.step_time >= dp_best.predicted.step_time && cuts.considered < dp_cuts.considered);
        d.mode = (par_search_mode)9;
        CHECK_ERR(par_auto_search(&d, plans, 400, &count, &cuts), PAR_EINVAL, "unknown search_mode");
        d.mode = PAR_SEARCH_DYNAMIC_PROGRAMMING;
        d.memory_cap = smallest;
    }

    /* impossible clusters, each refused naming the field */
    c = d.cluster;
    c.devices_per_node = 3;
    CHECK_ERR(par_cluster_check(&c), PAR_EINVAL, "devices_per_node");
    c = d.cluster;
    c.intra_bandwidth = -1;
    CHECK_ERR(par_cluster_check(&c), PAR_EINVAL, "intra_node_bandwidth");
    c = d.cluster;
    c.flops = 0;
    CHECK_ERR(par_cluster_check(&c), PAR_EINVAL, "flops_per_device");
    c = d.cluster;
    c.memory_bytes = 1.0 / 0.0;
    CHECK_ERR(par_cluster_check(&c), PAR_EINVAL, "memory_per_device");
    c = d.cluster;
    c.inter_latency = -1e-6;
    CHECK_ERR(par_cluster_check(&c), PAR_EINVAL, "latencies");
    CHECK_ERR(par_cluster_parse("devices: 0\nintra_node_bandwidth: 1G\nmemory_per_device: 1G\nflops_per_device: 1G\n", &c),
              PAR_EINVAL, "devices is 0");
    CHECK_ERR(par_cluster_parse("devices: 8\ndevices_per_node: 3\nintra_node_bandwidth: 1G\nmemory_per_device: 1G\n"
                                "flops_per_device: 1G\ninter_node_bandwidth: 1G\n", &c),
              PAR_EINVAL, "must divide devices");
    CHECK_ERR(par_cluster_parse("devices: 8\nintra_node_bandwidth: fast\n", &c), PAR_EPARSE, "line 2");
    CHECK_ERR(par_cluster_parse("devices: 8\ngpus: 8\n", &c), PAR_EPARSE, "unknown key 'gpus'");
    CHECK_ERR(par_cluster_parse("devices: 8\nintra_node_bandwidth: 1G\nflops_per_device: 1G\n", &c), PAR_EINVAL,
              "memory_per_device is missing");
    CHECK_ERR(par_cluster_parse("devices: 2.5\n", &c), PAR_EINVAL, "whole number");
    CHECK_ERR(par_cluster_parse("devices: 1e10\n", &c), PAR_EINVAL, "whole number"); /* found by fuzz_planner */
    c = d.cluster;
    c.attention_rate = -1;
    CHECK_ERR(par_cluster_check(&c), PAR_EINVAL, "attention_rate");
    c = d.cluster;
    c.kernel_latency = 0.0 / 0.0;
    CHECK_ERR(par_cluster_check(&c), PAR_EINVAL, "kernel_latency");
    c = d.cluster;
    c.attention_row_cost = 1e9;
    CHECK_ERR(par_cluster_check(&c), PAR_EINVAL, "attention_row_cost");
    c = d.cluster;
    c.norm_rate = -1;
    CHECK_ERR(par_cluster_check(&c), PAR_EINVAL, "norm_rate is -1");
    c = d.cluster;
    c.rope_rate = 1.0 / 0.0;
    CHECK_ERR(par_cluster_check(&c), PAR_EINVAL, "rope_rate");
    CHECK_ERR(par_cluster_parse("devices: 2\nrope_rate: quick\n", &c), PAR_EPARSE, "rope_rate");
    c = d.cluster;
    c.call_latency = -1e-6;
    CHECK_ERR(par_cluster_check(&c), PAR_EINVAL, "call_latency");
    c = d.cluster;
    c.node_parallelism = -2;
    CHECK_ERR(par_cluster_check(&c), PAR_EINVAL, "node_parallelism is -2");
    CHECK_ERR(par_cluster_parse("devices: 2\nnode_parallelism: 1.5\n", &c), PAR_EINVAL, "node_parallelism is 1.5");
    CHECK_ERR(par_cluster_parse("devices: 2\nkernel_latency: soon\n", &c), PAR_EPARSE, "kernel_latency");
    CHECK_ERR(par_model_shape_parse("num_layers: 2\n", &d.model), PAR_EINVAL, "hidden_size is missing");
    /* MindFormers' reading: derived kv heads and FFN width, batch_size per data-parallel rank times the
       accumulation steps (no pipeline) or micro-batches (pipeline); the other batch_size keys ignored */
    CHECK_OK(par_model_shape_parse("seed: 0\nrunner_config:\n  batch_size: 1\n  gradient_accumulation_steps: 8\n"
                                   "train_dataset: &train_dataset\n  batch_size: 6\nparallel_config:\n  data_parallel: 8\n"
                                   "  micro_batch_num: 1\nmodel:\n  model_config:\n    batch_size: 1\n    seq_length: 4096\n"
                                   "    hidden_size: 4096\n    num_layers: 32\n    num_heads: 32\n    vocab_size: 32000\n"
                                   "    multiple_of: 256\n",
                                   &d.model));
    CHECK(d.model.ffn == 11008 && d.model.kv_heads == 32 && d.model.batch == 64);
    CHECK_OK(par_model_shape_parse("runner_config:\n  batch_size: 2\n  gradient_accumulation_steps: 8\nparallel_config:\n"
                                   "  data_parallel: 2\n  pipeline_stage: 2\n  micro_batch_num: 4\nmodel:\n  model_config:\n"
                                   "    hidden_size: 8192\n    num_layers: 8\n    num_heads: 64\n    n_kv_heads: 8\n"
                                   "    vocab_size: 256\n    seq_length: 32\n    multiple_of: 4096\n    ffn_dim_multiplier: 1.3\n",
                                   &d.model));
    CHECK(d.model.ffn == 28672 && d.model.kv_heads == 8 && d.model.batch == 16);
    CHECK_OK(par_model_shape_parse("runner_config:\n  global_batch_size: 24\n  batch_size: 3\nparallel_config:\n"
                                   "  data_parallel: 4\nhidden_size: 64\nnum_layers: 2\nnum_heads: 4\nvocab_size: 256\n"
                                   "seq_length: 8\nintermediate_size: 100\n",
                                   &d.model));
    CHECK(d.model.ffn == 100 && d.model.batch == 24);
    CHECK_ERR(par_model_shape_parse("hidden_size: 64\nnum_layers: 2\nnum_heads: 4\nvocab_size: 256\nseq_length: 8\n",
                                    &d.model),
              PAR_EINVAL, "batch_size is missing");
    d.model.hidden = 0;
    CHECK_ERR(par_auto_search(&d, plans, 400, &count, &cuts), PAR_EINVAL, "model");
}

/* ---- the step-time model's terms ------------------------------------------------------ */

static par_auto_plan predicted(const par_auto_desc *d, int dp, int tp, int m, int zero) {
    par_auto_plan p;
    memset(&p, 0, sizeof p);
    p.config.dp = dp, p.config.tp = tp, p.config.cp = 1, p.config.pp = 1, p.config.micro_batches = m, p.config.zero = zero;
    CHECK_OK(par_auto_predict(d, &p));
    return p;
}

static void time_model(void) {
    par_auto_desc d;
    par_auto_plan a, b;
    const char *extra = "memory_bandwidth: 2e10\nactivation_rate: 1e8\nattention_rate: 5e9\n";
    char text[1024];
    double calls;
    memset(&d, 0, sizeof d);
    CHECK_OK(par_model_shape_parse(tiny_yaml, &d.model));
    snprintf(text, sizeof text, "%s%s", cluster_text, extra);
    CHECK_OK(par_cluster_parse(text, &d.cluster));
    CHECK(d.cluster.attention_rate == 5e9 && d.cluster.kernel_latency == 0 && d.cluster.node_parallelism == 0);

    /* the kernel-call latency adds the same number of calls per micro-batch, plus the optimizer's */
    a = predicted(&d, 8, 1, 1, 0);
    d.cluster.kernel_latency = 1e-5;
    b = predicted(&d, 8, 1, 1, 0);
    calls = 4 * 40.0 + 12 + (4 * 9 + 3); /* 4 layers, head; AdamW per tensor */
    CHECK_MSG(fabs((b.predicted.compute_time - a.predicted.compute_time) - calls * 1e-5) < 1e-12, "%g", b.predicted.compute_time - a.predicted.compute_time);
    a = predicted(&d, 4, 2, 2, 0);
    b = predicted(&d, 4, 2, 1, 0);
    CHECK(fabs((a.predicted.compute_time - b.predicted.compute_time) - (4 * 40.0 + 12) * 1e-5) < 0.05 * (4 * 40.0 + 12) * 1e-5);

    /* attention at its own rate: half the rate, the attention time twice */
    d.cluster.kernel_latency = 0;
    a = predicted(&d, 8, 1, 1, 0);
    d.cluster.attention_rate = 2.5e9;
    b = predicted(&d, 8, 1, 1, 0);
    /* tokens per rank 8 x 64 / 8, 4 layers, 12 S d per head (the square in full, Megatron's and PaLM's
       count): 64 x 12 x 64 x 64 per layer and token */
    CHECK_MSG(fabs((b.predicted.compute_time - a.predicted.compute_time) - 64.0 * 4 * 12 * 64 * 64 / 5e9) < 1e-12,
              "%g vs %g", b.predicted.compute_time - a.predicted.compute_time, 64.0 * 4 * 12 * 64 * 64 / 5e9);
    d.cluster.attention_rate = 5e9;

    /* context parallelism splits the queries, not the keys each one sees: a rank with the same
       tokens does the same attention work as under data parallelism (plus the ring's calls) */
    a = predicted(&d, 8, 1, 1, 0);
    {
        par_auto_plan c;
        memset(&c, 0, sizeof c);
        c.config.dp = 4, c.config.tp = 1, c.config.cp = 2, c.config.pp = 1, c.config.micro_batches = 1, c.config.cp_algo = PAR_CP_ULYSSES;
        CHECK_OK(par_auto_predict(&d, &c));
        CHECK_MSG(c.predicted.compute_time >= a.predicted.compute_time, "cp %g s < dp %g s", c.predicted.compute_time, a.predicted.compute_time);
    }

    /* a cost per query row and head of each attention call: a ring step calls attention with
       every local query again (cp times), Ulysses once with all the tokens of fewer heads */
    d.cluster.attention_row_cost = 1e-6;
    b = predicted(&d, 8, 1, 1, 0);
    CHECK_MSG(fabs((b.predicted.compute_time - a.predicted.compute_time) - 64.0 * 4 * 4 * 1e-6) < 1e-12, "%g",
              b.predicted.compute_time - a.predicted.compute_time); /* 64 tokens, 4 layers, 4 heads */
    {
        par_auto_plan with[2], without[2];
        int k;
        memset(with, 0, sizeof with);
        for (k = 0; k < 2; k++) {
            with[k].config.dp = 4, with[k].config.tp = 1, with[k].config.cp = 2, with[k].config.pp = 1, with[k].config.micro_batches = 1;
            with[k].config.cp_algo = k ? PAR_CP_ULYSSES : PAR_CP_RING;
            without[k] = with[k];
        }
        for (k = 0; k < 2; k++) CHECK_OK(par_auto_predict(&d, &with[k]));
        d.cluster.attention_row_cost = 0;
        for (k = 0; k < 2; k++) CHECK_OK(par_auto_predict(&d, &without[k]));
        CHECK_MSG(fabs((with[0].predicted.compute_time - without[0].predicted.compute_time) - 2 * 64.0 * 4 * 4 * 1e-6) < 1e-12, "ring %g",
                  with[0].predicted.compute_time - without[0].predicted.compute_time);
        CHECK_MSG(fabs((with[1].predicted.compute_time - without[1].predicted.compute_time) - 64.0 * 4 * 4 * 1e-6) < 1e-12, "ulysses %g",
                  with[1].predicted.compute_time - without[1].predicted.compute_time);
    }

    /* RMSNorm (two a layer and the final one, over the residual rows: split by sequence parallel)
       and RoPE (q and k) at their own rates */
    a = predicted(&d, 8, 1, 1, 0);
    d.cluster.norm_rate = 1e8;
    b = predicted(&d, 8, 1, 1, 0);
    CHECK_MSG(fabs((b.predicted.compute_time - a.predicted.compute_time) - (2 * 4 + 1) * 64.0 * 64 / 1e8) < 1e-12, "norms %g",
              b.predicted.compute_time - a.predicted.compute_time); /* 64 tokens of hidden 64, 4 layers */
    {
        par_auto_plan t1, t2;
        memset(&t1, 0, sizeof t1);
        t1.config.dp = 4, t1.config.tp = 2, t1.config.cp = 1, t1.config.pp = 1, t1.config.micro_batches = 1;
        t2 = t1, t2.config.sp = 1;
        CHECK_OK(par_auto_predict(&d, &t1));
        CHECK_OK(par_auto_predict(&d, &t2));
        d.cluster.norm_rate = 0;
        a = t1, b = t2;
        CHECK_OK(par_auto_predict(&d, &a));
        CHECK_OK(par_auto_predict(&d, &b));
        /* 128 tokens a tp pair: sequence parallel norms half the rows */
        CHECK_MSG(fabs((t1.predicted.compute_time - a.predicted.compute_time) - 9 * 128.0 * 64 / 1e8) < 1e-12 &&
                      fabs((t2.predicted.compute_time - b.predicted.compute_time) - 9 * 64.0 * 64 / 1e8) < 1e-12,
                  "tp norms %g, sp %g", t1.predicted.compute_time - a.predicted.compute_time, t2.predicted.compute_time - b.predicted.compute_time);
    }
    a = predicted(&d, 8, 1, 1, 0);
    d.cluster.rope_rate = 1e8;
    b = predicted(&d, 8, 1, 1, 0);
    CHECK_MSG(fabs((b.predicted.compute_time - a.predicted.compute_time) - 4 * 64.0 * (64 + 32) / 1e8) < 1e-12, "rope %g",
              b.predicted.compute_time - a.predicted.compute_time); /* q 64 and k 32 wide (4 heads, 2 kv heads of 16) */
    d.cluster.rope_rate = 0;

    /* the gradient all-reduce runs bucket by bucket under the rest of the backward: a step shows
       the last bucket's share (6 buckets: 4 layers, the embedding, the head) or, when the
       reductions outlast the backward, what it cannot cover */
    a = predicted(&d, 8, 1, 1, 0);
    CHECK_MSG(a.predicted.dp_comm_time > 0 && fabs((a.predicted.step_time - a.predicted.compute_time) - a.predicted.dp_comm_time / 6) < 1e-12,
              "exposed %g of %g", a.predicted.step_time - a.predicted.compute_time, a.predicted.dp_comm_time);
    d.cluster.intra_latency = d.cluster.inter_latency = 1e-2;
    b = predicted(&d, 8, 1, 1, 0);
    CHECK_MSG(b.predicted.step_time - b.predicted.compute_time > b.predicted.dp_comm_time - b.predicted.compute_time &&
                  b.predicted.step_time - b.predicted.compute_time < b.predicted.dp_comm_time - 0.5 * b.predicted.compute_time,
              "exposed %g of %g (compute %g)", b.predicted.step_time - b.predicted.compute_time, b.predicted.dp_comm_time, b.predicted.compute_time);
    CHECK_OK(par_cluster_parse(text, &d.cluster)); /* the cluster as it was */
    d.cluster.kernel_latency = 0, d.cluster.attention_rate = 5e9;

    /* a cost per collective call, whatever its group's size: tp 2's four all-reduces a layer and
       micro-batch (4 layers, 2 micro-batches) cost 32 calls more */
    {
        par_auto_plan t1, t2;
        memset(&t1, 0, sizeof t1);
        t1.config.dp = 4, t1.config.tp = 2, t1.config.cp = 1, t1.config.pp = 1, t1.config.micro_batches = 2;
        t2 = t1;
        CHECK_OK(par_auto_predict(&d, &t1));
        d.cluster.call_latency = 1e-4;
        CHECK_OK(par_auto_predict(&d, &t2));
        d.cluster.call_latency = 0;
        CHECK_MSG(fabs((t2.predicted.tp_comm_time - t1.predicted.tp_comm_time) - 32 * 1e-4) < 1e-12, "tp calls %g",
                  t2.predicted.tp_comm_time - t1.predicted.tp_comm_time);
        /* and the gradients' reductions one a bucket (6) */
        CHECK_MSG(fabs((t2.predicted.dp_comm_time - t1.predicted.dp_comm_time) - 6 * 1e-4) < 1e-12, "dp calls %g",
                  t2.predicted.dp_comm_time - t1.predicted.dp_comm_time);
    }

    /* ZeRO-2 reduce-scatters every micro-batch's gradients; plain dp and ZeRO-1 once a step */
    a = predicted(&d, 4, 2, 1, 2);
    b = predicted(&d, 4, 2, 2, 2);
    CHECK(b.predicted.dp_comm_time > a.predicted.dp_comm_time * 1.4);
    a = predicted(&d, 4, 2, 1, 1);
    b = predicted(&d, 4, 2, 2, 1);
    CHECK(b.predicted.dp_comm_time == a.predicted.dp_comm_time);

    /* ranks sharing cores: beyond node_parallelism the node's summed work bounds the step */
    d.cluster.devices = 4;
    d.cluster.devices_per_node = 4;
    a = predicted(&d, 4, 1, 1, 0);
    CHECK(a.predicted.shared_time == 0);
    d.cluster.node_parallelism = 2;
    b = predicted(&d, 4, 1, 1, 0);
    /* the node's work (compute and the copying of collectives) over its parallelism, and the
       collectives' latency once (all ranks wait it together) */
    CHECK(b.predicted.shared_time > 2 * b.predicted.compute_time + b.predicted.dp_comm_time / 2 &&
          b.predicted.shared_time < 2 * (b.predicted.compute_time + b.predicted.dp_comm_time));
    CHECK(b.predicted.step_time == (b.predicted.shared_time > a.predicted.step_time ? b.predicted.shared_time : a.predicted.step_time));
    CHECK(b.predicted.critical_time == a.predicted.step_time);
    d.cluster.intra_latency = 0; /* then a collective is all copying */
    b = predicted(&d, 4, 1, 1, 0);
    CHECK_MSG(fabs(b.predicted.shared_time - 2 * (b.predicted.compute_time + b.predicted.dp_comm_time)) < 1e-12 * b.predicted.shared_time, "%g", b.predicted.shared_time);
    d.cluster.intra_latency = 5e-6;
    d.cluster.node_parallelism = 4; /* every rank has its cores: no bound */
    b = predicted(&d, 4, 1, 1, 0);
    CHECK(b.predicted.shared_time == 0 && b.predicted.step_time == a.predicted.step_time);
    /* one core for 4 ranks: splitting the batch 4 ways buys nothing over one rank's work */
    d.cluster.node_parallelism = 1;
    b = predicted(&d, 4, 1, 1, 0);
    d.cluster.devices = d.cluster.devices_per_node = 1;
    a = predicted(&d, 1, 1, 1, 0);
    CHECK_MSG(b.predicted.step_time >= 0.9 * a.predicted.step_time, "dp 4 on one core %g s, one rank %g s", b.predicted.step_time, a.predicted.step_time);
}

/* ---- calibration ---------------------------------------------------------------- */

typedef struct calib_arg {
    par_cluster c[2];
    par_status st[2];
    int refused[2]; /* the bad descs were refused, naming the field */
} calib_arg;

static par_status calib_rank(par_ctx *ctx, void *p) {
    calib_arg *a = (calib_arg *)p;
    par_calibrate_desc d;
    const int r = par_ctx_rank(ctx);
    memset(&d, 0, sizeof d);
    d.gemm_size = 64;
    d.bytes = 1 << 18;
    d.repeats = 3;
    d.memory_bytes = 1 << 30;
    { /* the new shape fields are range-checked before anything runs (every rank the same) */
        par_calibrate_desc bad = d;
        bad.head_dim = 512;
        a->refused[r] = par_calibrate(ctx, &bad, &a->c[r]) == PAR_EINVAL && strstr(par_last_error(), "head_dim 0..256");
        bad = d;
        bad.gemm_rows = -1;
        a->refused[r] &= par_calibrate(ctx, &bad, &a->c[r]) == PAR_EINVAL && strstr(par_last_error(), "gemm_rows");
        bad = d;
        bad.gemm_cols = 70000;
        a->refused[r] &= par_calibrate(ctx, &bad, &a->c[r]) == PAR_EINVAL && strstr(par_last_error(), "gemm_cols 0..65536");
    }
    a->st[r] = par_calibrate(ctx, &d, &a->c[r]);
    return a->st[r];
}

static void calibration(void) {
    calib_arg a;
    par_cluster back;
    char text[1024];
    memset(&a, 0, sizeof a);
    CHECK_OK(par_run_threads(2, calib_rank, &a));
    CHECK(a.st[0] == PAR_OK && a.st[1] == PAR_OK);
    CHECK_MSG(a.refused[0] && a.refused[1], "par_calibrate_desc head_dim 512 / gemm_rows -1 / gemm_cols 70000 not refused");
    CHECK(a.c[0].devices == 2 && a.c[0].devices_per_node == 2 && a.c[0].memory_bytes == (double)(1 << 30));
    /* 2 * 64^3 flops take more than a nanosecond and less than a second here */
    CHECK(a.c[0].flops > 2.0 * 64 * 64 * 64 && a.c[0].flops < 2.0 * 64 * 64 * 64 * 1e9);
    CHECK(a.c[0].intra_bandwidth > 0 && a.c[0].intra_latency >= 0);
    /* the attention and per-call figures are measured too; two rank threads on this host's cores */
    CHECK(a.c[0].attention_rate > 0 && a.c[0].kernel_latency > 0 && a.c[0].kernel_latency < 0.01);
    CHECK(a.c[0].norm_rate > 0 && a.c[0].rope_rate > 0);
    /* two ranks: the all-reduce's latency is all per call (no pair to tell it from the steps) */
    CHECK(a.c[0].call_latency >= 0 && a.c[0].intra_latency == 0);
    CHECK(a.c[0].node_parallelism >= 1 && a.c[0].node_parallelism == a.c[1].node_parallelism);
    /* every rank reports the same figures (they plan alike) */
    CHECK(a.c[0].flops == a.c[1].flops && a.c[0].intra_bandwidth == a.c[1].intra_bandwidth);
    /* the profile file reads back */
    CHECK(par_cluster_format(&a.c[0], text, sizeof text) > 0);
    CHECK_OK(par_cluster_parse(text, &back));
    CHECK(back.devices == 2 && fabs(back.flops / a.c[0].flops - 1) < 1e-5 &&
          fabs(back.intra_bandwidth / a.c[0].intra_bandwidth - 1) < 1e-5);
    CHECK(fabs(back.attention_rate / a.c[0].attention_rate - 1) < 1e-5 &&
          fabs(back.kernel_latency / a.c[0].kernel_latency - 1) < 1e-5 &&
          back.attention_row_cost >= 0 && fabs(back.attention_row_cost - a.c[0].attention_row_cost) <=
                                               1e-5 * a.c[0].attention_row_cost &&
          back.node_parallelism == a.c[0].node_parallelism);
    CHECK(fabs(back.norm_rate / a.c[0].norm_rate - 1) < 1e-5 && fabs(back.rope_rate / a.c[0].rope_rate - 1) < 1e-5);
    CHECK(fabs(back.call_latency - a.c[0].call_latency) <= 1e-5 * a.c[0].call_latency);
    /* the GEMM shape curve: fitted from 64 and 16 rows (a half dimension >= 0, the same on every rank,
       read back), none where a quarter of the rows still exceeds every width (the same smallest dims) */
    CHECK(a.c[0].gemm_half_dim >= 0 && a.c[0].gemm_half_dim == a.c[1].gemm_half_dim && a.c[0].gemm_efficiency == 0);
    CHECK(fabs(back.gemm_half_dim - a.c[0].gemm_half_dim) <= 1e-5 * a.c[0].gemm_half_dim);
    {
        par_calibrate_desc d;
        par_cluster c;
        memset(&d, 0, sizeof d);
        d.gemm_size = d.gemm_cols = 32, d.gemm_rows = 512, d.bytes = 1 << 16, d.repeats = 1;
        CHECK_OK(par_calibrate_threads(1, &d, &c, NULL));
        CHECK_MSG(c.gemm_half_dim == 0 && c.flops > 0, "%g", c.gemm_half_dim);
    }
}

/* The timed shapes of a model: its hidden size, the tokens a rank holds, its head
   dim and sequence, clamped into the ranges par_calibrate accepts; then the
   same calibration through par_calibrate_threads (rank 0's figures, the
   kernel threads a rank had). */
static void calibration_for_model(void) {
    par_model_shape m;
    par_calibrate_desc d;
    par_cluster c;
    int threads = -1;
    memset(&m, 0, sizeof m);
    m.layers = 2, m.hidden = 64, m.heads = 4, m.kv_heads = 2, m.ffn = 172, m.vocab = 256, m.seq = 64, m.batch = 8;
    memset(&d, 0, sizeof d);
    d.repeats = 2, d.bytes = 1 << 16;
    CHECK_OK(par_calibrate_desc_for_model(&m, 2, &d));
    CHECK_INT(d.gemm_size, 64);
    CHECK_INT(d.gemm_cols, 172);
    CHECK_INT(d.gemm_rows, 8 * 64 / 2);
    CHECK_INT(d.head_dim, 16);
    CHECK_INT(d.seq, 64);
    CHECK(d.repeats == 2 && d.bytes == 1 << 16); /* the rest is the caller's */
    /* a layer this small is timed whole: its own seven weights */
    CHECK(d.model.layers == 2 && d.model.hidden == 64 && d.model.ffn == 172);
    /* clamped: a wide model times 1024 x 4096 GEMMs of at most a Gflop (the three); a tiny one at
       least 16 of each */
    m.hidden = 8192, m.heads = 16, m.ffn = 28672, m.seq = 100000, m.batch = 64;
    CHECK_OK(par_calibrate_desc_for_model(&m, 1, &d));
    CHECK(d.gemm_size == 1024 && d.gemm_cols == 4096 && d.head_dim == 256 && d.seq == 8192);
    CHECK_MSG(d.model.layers == 0, "a layer of 8192 x 28672 weights is not timed whole");
    CHECK_MSG(6.0 * d.gemm_rows * 1024 * 4096 <= 1e9 && d.gemm_rows >= 16, "gemm_rows %d", d.gemm_rows);
    m.hidden = 4, m.heads = 4, m.ffn = 8, m.seq = 2, m.batch = 1;
    CHECK_OK(par_calibrate_desc_for_model(&m, 8, &d));
    CHECK(d.gemm_size == 16 && d.gemm_cols == 16 && d.gemm_rows == 16 && d.head_dim == 1 && d.seq == 2);
    m.ffn = 172;
    m.hidden = 0;
    CHECK(par_calibrate_desc_for_model(&m, 2, &d) == PAR_EINVAL && strstr(par_last_error(), "hidden 0"));
    m.hidden = 64;
    CHECK(par_calibrate_desc_for_model(&m, 0, &d) == PAR_EINVAL && strstr(par_last_error(), "ranks 0"));
    CHECK(par_calibrate_desc_for_model(NULL, 2, &d) == PAR_EINVAL);
    /* on rank threads */
    m.hidden = 64, m.heads = 4, m.seq = 64, m.batch = 8;
    CHECK_OK(par_calibrate_desc_for_model(&m, 2, &d));
    CHECK_OK(par_calibrate_threads(2, &d, &c, &threads));
    CHECK(c.devices == 2 && c.flops > 0 && c.attention_rate > 0 && c.node_parallelism >= 1);
    CHECK_MSG(threads >= 1, "kernel threads %d", threads);
    /* from 4 ranks the latency splits into a part per call and one per step (pairs against the
       world); 5: the odd last rank computes while the pairs reduce */
    {
        int ranks;
        for (ranks = 4; ranks <= 5; ranks++) {
            CHECK_OK(par_calibrate_desc_for_model(&m, ranks, &d));
            CHECK_OK(par_calibrate_threads(ranks, &d, &c, NULL));
            CHECK_MSG(c.devices == ranks && c.intra_latency >= 0 && c.call_latency >= 0 &&
                          c.intra_latency < 1 && c.call_latency < 1,
                      "%d ranks: latency %g a step, %g a call", ranks, c.intra_latency, c.call_latency);
        }
        CHECK_OK(par_calibrate_desc_for_model(&m, 2, &d));
    }
    CHECK(par_calibrate_threads(2, &d, NULL, NULL) == PAR_EINVAL);
    CHECK(par_calibrate_threads(0, &d, &c, NULL) == PAR_EINVAL && strstr(par_last_error(), "0 ranks"));
    d.head_dim = 512; /* a bad desc: refused by every rank, the message kept */
    CHECK(par_calibrate_threads(2, &d, &c, NULL) == PAR_EINVAL && strstr(par_last_error(), "head_dim 0..256"));
    d.head_dim = 16;
    d.model.heads = 3; /* hidden 64 does not divide by 3 */
    CHECK(par_calibrate_threads(1, &d, &c, NULL) == PAR_EINVAL &&
          strstr(par_last_error(), "par_calibrate_desc.model: hidden (64) must divide by heads (3)"));
    d.model.heads = 4, d.model.hidden = 4096, d.model.ffn = 16384; /* its weights exceed a buffer */
    CHECK(par_calibrate_threads(1, &d, &c, NULL) == PAR_EINVAL && strstr(par_last_error(), "floats a buffer"));
}

/* ---- recomputation in the whole-plan model ------------------------------------------- */

static par_auto_plan predicted_rc(const par_auto_desc *d, int dp, int tp, int pp, par_pp_kind kind, int m,
                                  par_recompute_mode rc) {
    par_auto_plan p;
    memset(&p, 0, sizeof p);
    p.config.dp = dp, p.config.tp = tp, p.config.cp = 1, p.config.pp = pp, p.config.micro_batches = m;
    p.config.schedule = kind, p.config.chunks = 1, p.config.recompute = rc;
    CHECK_OK(par_auto_predict(d, &p));
    return p;
}

/* Memory: a layer keeps its whole set (none), all but its norms' outputs
   and SwiGLU product (selective: 2 x 64 + 172 floats a token here), or its
   input only (full); the dropped tensors of one layer come back as the
   recompute area. Time: full runs the layers' forward again (a third of
   their forward + backward: the compute without the head's GEMMs, over 3),
   selective half the norms' and SwiGLU's measured forward + backward. The
   search takes the modes as a dimension, and a cap only recomputation
   meets is met by it. */
static void recompute_model(void) {
    const double tokens = 64.0, L = 4, h = 64, f = 172, V = 256; /* per rank at dp 8: one sample of 64 */
    par_auto_desc d;
    par_auto_plan none, sel, full, plans[64];
    par_auto_cuts cuts;
    char text[1024], name[128];
    int count = 0, i, ok;
    memset(&d, 0, sizeof d);
    CHECK_OK(par_model_shape_parse(tiny_yaml, &d.model));
    snprintf(text, sizeof text, "%s%s", cluster_text, "activation_rate: 1e8\nnorm_rate: 4e8\n");
    CHECK_OK(par_cluster_parse(text, &d.cluster));
    none = predicted_rc(&d, 8, 1, 1, PAR_PP_1F1B, 1, PAR_RECOMPUTE_NONE);
    sel = predicted_rc(&d, 8, 1, 1, PAR_PP_1F1B, 1, PAR_RECOMPUTE_SELECTIVE);
    full = predicted_rc(&d, 8, 1, 1, PAR_PP_1F1B, 1, PAR_RECOMPUTE_FULL);
    /* f32: 4 bytes an element */
    CHECK_MSG(none.predicted.activation_bytes - sel.predicted.activation_bytes == L * tokens * (2 * h + f) * 4, "%g",
              none.predicted.activation_bytes - sel.predicted.activation_bytes);
    {   /* full keeps x_in (64 floats a token) of each layer's 4 h + 2 + 2 (q + kv) + heads (lse) + 3 ffn */
        const double layer = 4 * h + 2 + 2 * h + 2 * 32 + 4 + 3 * f;
        CHECK_MSG(none.predicted.activation_bytes - full.predicted.activation_bytes == L * tokens * (layer - h) * 4, "%g vs %g",
                  none.predicted.activation_bytes - full.predicted.activation_bytes, L * tokens * (layer - h) * 4);
        /* the area: one layer's dropped tensors (and full's output, h a token) beside the same scratch */
        CHECK_MSG(fabs((full.predicted.memory_bytes - full.predicted.activation_bytes) -
                       (none.predicted.memory_bytes - none.predicted.activation_bytes) - tokens * layer * 4) < 0.5,
                  "full's recompute area");
    }
    CHECK_MSG(fabs((sel.predicted.memory_bytes - sel.predicted.activation_bytes) -
                   (none.predicted.memory_bytes - none.predicted.activation_bytes) - tokens * (2 * h + f) * 4) < 0.5,
              "selective's recompute area");
    {   /* time, without memory traffic or kernel latency (so AdamW costs nothing): GEMMs, attention, rates */
        const double head = tokens * 6 * V * h / d.cluster.flops;
        d.cluster.memory_bandwidth = 0;
        none = predicted_rc(&d, 8, 1, 1, PAR_PP_1F1B, 1, PAR_RECOMPUTE_NONE);
        full = predicted_rc(&d, 8, 1, 1, PAR_PP_1F1B, 1, PAR_RECOMPUTE_FULL);
        sel = predicted_rc(&d, 8, 1, 1, PAR_PP_1F1B, 1, PAR_RECOMPUTE_SELECTIVE);
        CHECK_MSG(fabs(full.predicted.compute_time - none.predicted.compute_time -
                       (none.predicted.compute_time - head) / 3) < 1e-12,
                  "full: %g more, want %g", full.predicted.compute_time - none.predicted.compute_time,
                  (none.predicted.compute_time - head) / 3);
        CHECK_MSG(fabs(sel.predicted.compute_time - none.predicted.compute_time -
                       (2 * L * tokens * h / 4e8 + L * tokens * f / 1e8) / 2) < 1e-12,
                  "selective: %g more", sel.predicted.compute_time - none.predicted.compute_time);
    }
    /* under ZB-H1 the weight-gradient half keeps the linears' inputs and output gradients: full
       saves less there than under 1F1B */
    {
        const par_auto_plan zb_none = predicted_rc(&d, 2, 1, 4, PAR_PP_ZB_H1, 4, PAR_RECOMPUTE_NONE);
        const par_auto_plan zb_full = predicted_rc(&d, 2, 1, 4, PAR_PP_ZB_H1, 4, PAR_RECOMPUTE_FULL);
        const par_auto_plan ob_none = predicted_rc(&d, 2, 1, 4, PAR_PP_1F1B, 4, PAR_RECOMPUTE_NONE);
        const par_auto_plan ob_full = predicted_rc(&d, 2, 1, 4, PAR_PP_1F1B, 4, PAR_RECOMPUTE_FULL);
        CHECK(zb_full.predicted.activation_bytes < zb_none.predicted.activation_bytes);
        CHECK_MSG(zb_none.predicted.activation_bytes / zb_full.predicted.activation_bytes <
                      ob_none.predicted.activation_bytes / ob_full.predicted.activation_bytes,
                  "zb-h1 saves %g, 1f1b %g", zb_none.predicted.activation_bytes / zb_full.predicted.activation_bytes,
                  ob_none.predicted.activation_bytes / ob_full.predicted.activation_bytes);
    }
    /* mixed precision: 18 bytes a parameter before ZeRO (bf16 weight, f32 gradient, master and two
       moments), 16 in f32; ZeRO-1 shards the master and moments. tiny_yaml's model: 4 layers of
       (64 x 64 x 2 + 64 x 32 x 2 + 3 x 64 x 172) + 2 x 64 norm weights, embedding and head 256 x 64, final norm */
    {
        const double params = 4 * (64.0 * 64 * 2 + 64 * 32 * 2 + 3 * 64 * 172 + 2 * 64) + 2 * 256 * 64 + 64;
        par_auto_plan p32, p16, z16;
        p32 = predicted_rc(&d, 8, 1, 1, PAR_PP_1F1B, 1, PAR_RECOMPUTE_NONE);
        d.model.dtype = PAR_BF16;
        p16 = predicted_rc(&d, 8, 1, 1, PAR_PP_1F1B, 1, PAR_RECOMPUTE_NONE);
        memset(&z16, 0, sizeof z16);
        z16.config.dp = 8, z16.config.tp = z16.config.cp = z16.config.pp = z16.config.micro_batches = 1, z16.config.zero = 1;
        CHECK_OK(par_auto_predict(&d, &z16));
        CHECK_MSG(p32.predicted.weights_bytes + p32.predicted.grads_bytes + p32.predicted.optimizer_bytes == 16 * params,
                  "f32: %g bytes a parameter", (p32.predicted.weights_bytes + p32.predicted.grads_bytes + p32.predicted.optimizer_bytes) / params);
        CHECK_MSG(p16.predicted.weights_bytes + p16.predicted.grads_bytes + p16.predicted.optimizer_bytes == 18 * params,
                  "bf16: %g bytes a parameter", (p16.predicted.weights_bytes + p16.predicted.grads_bytes + p16.predicted.optimizer_bytes) / params);
        /* ZeRO-1 keeps the whole gradient and its reduce-scattered shard (what tests/test_mixed.c measures) */
        CHECK_MSG(z16.predicted.weights_bytes + z16.predicted.grads_bytes + z16.predicted.optimizer_bytes == (2 + 4 + 16.0 / 8) * params,
                  "bf16 ZeRO-1 over 8: %g bytes a parameter", (z16.predicted.weights_bytes + z16.predicted.grads_bytes + z16.predicted.optimizer_bytes) / params);
        CHECK_MSG(p16.predicted.activation_bytes < p32.predicted.activation_bytes, "bf16 activations");
        d.model.dtype = PAR_I32;
        memset(&z16, 0, sizeof z16);
        z16.config.dp = 8, z16.config.tp = z16.config.cp = z16.config.pp = z16.config.micro_batches = 1;
        CHECK_ERR(par_auto_predict(&d, &z16), PAR_EINVAL, "model: dtype i32: a model trains in f32, bf16 or f16");
        d.model.dtype = PAR_F32;
    }
    /* the search: a cap between the least memory without recomputation and with it */
    d.recomputes = 1u << PAR_RECOMPUTE_NONE;
    CHECK_OK(par_auto_search(&d, plans, 64, &count, &cuts));
    d.memory_cap = cuts.smallest_memory - 1;
    CHECK_ERR(par_auto_search(&d, plans, 64, &count, &cuts), PAR_ECAPACITY, "");
    d.recomputes = (1u << PAR_RECOMPUTE_NONE) | (1u << PAR_RECOMPUTE_SELECTIVE) | (1u << PAR_RECOMPUTE_FULL);
    CHECK_OK(par_auto_search(&d, plans, 64, &count, &cuts));
    for (i = 0, ok = count > 0; i < count && i < 64; i++)
        ok &= plans[i].config.recompute != PAR_RECOMPUTE_NONE && plans[i].predicted.memory_bytes <= d.memory_cap;
    CHECK_MSG(ok, "%d plans under the cap: every one recomputes", count);
    par_auto_plan_format(&plans[0], name, sizeof name);
    CHECK_MSG(strstr(name, " recompute=") != NULL, "%s", name);
    d.recomputes = 8;
    CHECK_ERR(par_auto_search(&d, plans, 64, &count, &cuts), PAR_EINVAL, "par_auto_desc.recomputes = 0x8");
    d.recomputes = 0;
    memset(&none, 0, sizeof none);
    none.config.dp = 8, none.config.tp = none.config.cp = none.config.pp = none.config.micro_batches = 1;
    none.config.recompute = (par_recompute_mode)3;
    CHECK_ERR(par_auto_predict(&d, &none), PAR_EINVAL, "unknown recompute mode 3");
}

/* Mixed precision as a search dimension: a config's dtype predicts as the
   model's would; activations take 2 bytes an element but the statistics (1/rms,
   lse, losses) stay 4; under a cap only bf16 meets, the search (dtypes f32 and
   bf16) returns bf16 plans only; flops16 speeds the 16-bit GEMMs alone. */
static void dtype_model(void) {
    const double tokens = 64.0, L = 4, h = 64, q = 64, kv = 32, f = 172, V = 256; /* per rank at dp 8 */
    par_auto_desc d;
    par_auto_plan a32, a16, m16, plans[64], fast;
    par_auto_cuts cuts;
    par_cluster back;
    char text[2048], name[128];
    int count = 0, i, ok;
    memset(&d, 0, sizeof d);
    CHECK_OK(par_model_shape_parse(tiny_yaml, &d.model));
    CHECK_OK(par_cluster_parse(cluster_text, &d.cluster));
    a32 = predicted_rc(&d, 8, 1, 1, PAR_PP_1F1B, 1, PAR_RECOMPUTE_NONE);
    memset(&a16, 0, sizeof a16);
    a16.config = a32.config, a16.config.dtype = PAR_BF16;
    CHECK_OK(par_auto_predict(&d, &a16));
    d.model.dtype = PAR_BF16;
    m16 = predicted_rc(&d, 8, 1, 1, PAR_PP_1F1B, 1, PAR_RECOMPUTE_NONE);
    CHECK_INT(m16.config.dtype, PAR_BF16); /* f32 (zero) in a config: the model's */
    CHECK(m16.predicted.memory_bytes == a16.predicted.memory_bytes && m16.predicted.step_time == a16.predicted.step_time);
    /* the layer's q, k, v, o, norms' inputs and outputs, gate, up, product, and the final norm's input and
       output and the logits: 2 bytes fewer each; 1/rms, lse and losses unchanged */
    CHECK_MSG(a32.predicted.activation_bytes - a16.predicted.activation_bytes ==
                  tokens * (L * (4 * h + 2 * q + 2 * kv + 3 * f) + 2 * h + V) * 2,
              "%g", a32.predicted.activation_bytes - a16.predicted.activation_bytes);
    d.model.dtype = PAR_F32;
    /* the search over f32 and bf16 under a cap only bf16 meets */
    d.dtypes = 1u << PAR_F32;
    CHECK_OK(par_auto_search(&d, plans, 64, &count, &cuts));
    d.memory_cap = cuts.smallest_memory - 1;
    CHECK_ERR(par_auto_search(&d, plans, 64, &count, &cuts), PAR_ECAPACITY, "");
    d.dtypes = (1u << PAR_F32) | (1u << PAR_BF16);
    CHECK_OK(par_auto_search(&d, plans, 64, &count, &cuts));
    for (i = 0, ok = count > 0; i < count && i < 64; i++)
        ok &= plans[i].config.dtype == PAR_BF16 && plans[i].predicted.memory_bytes <= d.memory_cap;
    CHECK_MSG(ok, "%d plans under the cap: every one bf16", count);
    par_auto_plan_format(&plans[0], name, sizeof name);
    CHECK_MSG(strstr(name, " bf16") != NULL, "%s", name);
    d.memory_cap = 0;
    /* flops16: the bf16 GEMMs at twice the rate take half the time; f32 is untouched */
    d.cluster.memory_bandwidth = 0;
    a16 = predicted_rc(&d, 8, 1, 1, PAR_PP_1F1B, 1, PAR_RECOMPUTE_NONE);
    a16.config.dtype = PAR_BF16;
    CHECK_OK(par_auto_predict(&d, &a16));
    d.cluster.flops16 = 2 * d.cluster.flops;
    fast = a16;
    CHECK_OK(par_auto_predict(&d, &fast));
    a32 = predicted_rc(&d, 8, 1, 1, PAR_PP_1F1B, 1, PAR_RECOMPUTE_NONE);
    {
        /* and without an attention rate, attention: a causal kernel computing half of the square (12 S q
           a token and layer counted) at the GEMM rate of the dtype */
        const double gemm = tokens * (L * 6 * (2 * h * q + 2 * h * kv + 3 * h * f) + 6 * V * h) / d.cluster.flops;
        const double attn = d.cluster.attention_rate > 0 ? 0 : tokens * L * 12 * 64 * q / 2 / d.cluster.flops;
        CHECK_MSG(fabs(a16.predicted.compute_time - fast.predicted.compute_time - (gemm + attn) / 2) < 1e-12, "%g vs %g",
                  a16.predicted.compute_time - fast.predicted.compute_time, (gemm + attn) / 2);
    }
    CHECK(a32.config.dtype == PAR_F32 && a32.predicted.compute_time > fast.predicted.compute_time);
    /* flops16 in the cluster's text form, both ways */
    par_cluster_format(&d.cluster, text, sizeof text);
    CHECK_OK(par_cluster_parse(text, &back));
    CHECK(back.flops16 == d.cluster.flops16);
    d.cluster.flops16 = -1;
    CHECK_ERR(par_cluster_check(&d.cluster), PAR_EINVAL, "flops16");
    d.cluster.flops16 = 0;
    /* bad input */
    d.dtypes = 1u << PAR_I32;
    CHECK_ERR(par_auto_search(&d, plans, 64, &count, &cuts), PAR_EINVAL, "par_auto_desc.dtypes = 0x8");
    d.dtypes = 0;
    a16.config.dtype = PAR_I64;
    CHECK_ERR(par_auto_predict(&d, &a16), PAR_EINVAL, "config.dtype i64: the compute type is f32, bf16 or f16");
}

/* ---- issue 31's cost-model terms: GEMM shapes, flops, NCCL's all-reduces, pipeline buffers ---------------- */

static par_auto_plan predicted_pp(const par_auto_desc *d, int dp, int pp, par_pp_kind kind, int m, par_dtype dt) {
    par_auto_plan p;
    memset(&p, 0, sizeof p);
    p.config.dp = dp, p.config.tp = 1, p.config.cp = 1, p.config.pp = pp, p.config.micro_batches = m;
    p.config.schedule = kind, p.config.chunks = 1, p.config.dtype = dt;
    CHECK_OK(par_auto_predict(d, &p));
    return p;
}

static void cost_model_terms(void) {
    /* tiny_yaml at dp 8: one sample of 64 tokens a rank */
    const double tokens = 64.0, S = 64, L = 4, h = 64, q = 64, kv = 32, f = 172, V = 256, B = 8;
    const double layer_mm = 2 * h * q + 2 * h * kv + 3 * h * f, P = L * (layer_mm + 2 * h) + 2 * V * h + h;
    par_auto_desc d;
    par_auto_plan a, b, plans[64];
    par_auto_cuts cuts;
    par_cluster c;
    char text[2048];
    int count = 0, i, ok;
    memset(&d, 0, sizeof d);
    CHECK_OK(par_model_shape_parse(tiny_yaml, &d.model));
    snprintf(text, sizeof text, "%sattention_rate: 5e9\ngemm_efficiency: 0.5\ngemm_half_dim: 64\n", cluster_text);
    CHECK_OK(par_cluster_parse(text, &d.cluster));
    CHECK(d.cluster.gemm_efficiency == 0.5 && d.cluster.gemm_half_dim == 64);
    par_cluster_format(&d.cluster, text, sizeof text); /* the profile form keeps them */
    CHECK_OK(par_cluster_parse(text, &c));
    CHECK(c.gemm_efficiency == 0.5 && c.gemm_half_dim == 64);
    c.gemm_efficiency = 1.5;
    CHECK_ERR(par_cluster_check(&c), PAR_EINVAL, "cluster: gemm_efficiency is 1.5; it must be a fraction of the peak");
    c.gemm_efficiency = 0.5, c.gemm_half_dim = -1;
    CHECK_ERR(par_cluster_check(&c), PAR_EINVAL, "cluster: gemm_half_dim is -1; it must be a GEMM dimension");
    snprintf(text, sizeof text, "%sgemm_half_dim: lots\n", cluster_text);
    CHECK_ERR(par_cluster_parse(text, &c), PAR_EPARSE, "gemm_half_dim: 'lots' is not a number");

    /* GEMM efficiency by shape: each GEMM at 0.5 x d / (d + 64) of the peak, d its smallest dimension:
       64 rows here, so q, o, gate, up, down and the head at 0.25, k and v (32 wide) at 0.5 x 32/96 */
    a = predicted(&d, 8, 1, 1, 0);
    d.cluster.gemm_efficiency = 0, d.cluster.gemm_half_dim = 0;
    b = predicted(&d, 8, 1, 1, 0);
    {
        const double peak = tokens * 6 * (L * layer_mm + V * h) / d.cluster.flops;
        const double shaped = tokens * 6 * (L * (2 * h * q + 3 * h * f) / 0.25 + L * 2 * h * kv / (0.5 / 3) + V * h / 0.25) /
                              d.cluster.flops;
        CHECK_MSG(fabs((a.predicted.compute_time - b.predicted.compute_time) - (shaped - peak)) < 1e-12, "%g vs %g",
                  a.predicted.compute_time - b.predicted.compute_time, shaped - peak);
    }

    /* the step's flops, Megatron's count: 2 a weight and token forward, attention's square in full
       (4 S q a token and layer), x 3 with the backward; full recomputation adds the layers' forward */
    {
        const double layers_fwd = L * (2 * layer_mm + 4 * S * q), head_fwd = 2 * V * h;
        par_auto_plan r = predicted_rc(&d, 8, 1, 1, PAR_PP_1F1B, 1, PAR_RECOMPUTE_FULL);
        CHECK(b.predicted.model_flops == B * S * 3 * (layers_fwd + head_fwd));
        CHECK(b.predicted.hardware_flops == b.predicted.model_flops);
        CHECK(r.predicted.model_flops == b.predicted.model_flops);
        CHECK(r.predicted.hardware_flops == b.predicted.model_flops + B * S * layers_fwd);
    }

    /* the gradients' all-reduce over dp 8 (6 buckets: 4 layers, embedding, head), as NCCL runs it: the
       ring (2 x 7 steps, 2 x 7/8 of the f32 gradients a rank), in one node always; over 4 nodes of 2,
       when latency rules, the tree (a chain of 2 in a node, a tree over 4 nodes: 2 x (1 + 2) steps,
       twice the gradients a rank) */
    d.cluster.devices_per_node = 8, d.cluster.intra_latency = 1e-3;
    a = predicted(&d, 8, 1, 1, 0);
    CHECK_MSG(fabs(a.predicted.dp_comm_time - (6 * 2 * 7 * 1e-3 + 2.0 * 7 / 8 * P * 4 / d.cluster.intra_bandwidth)) < 1e-12,
              "%g vs %g", a.predicted.dp_comm_time, 6 * 2 * 7 * 1e-3 + 2.0 * 7 / 8 * P * 4 / d.cluster.intra_bandwidth);
    d.cluster.devices_per_node = 2, d.cluster.inter_latency = 0;
    a = predicted(&d, 8, 1, 1, 0);
    CHECK_MSG(fabs(a.predicted.dp_comm_time - 2.0 * 7 / 8 * P * 4 / d.cluster.inter_bandwidth) < 1e-15, "%g vs %g",
              a.predicted.dp_comm_time, 2.0 * 7 / 8 * P * 4 / d.cluster.inter_bandwidth);
    d.cluster.inter_latency = 1e-3;
    a = predicted(&d, 8, 1, 1, 0);
    CHECK_MSG(fabs(a.predicted.dp_comm_time - (6 * 2 * 3 * 1e-3 + 2.0 * P * 4 / d.cluster.inter_bandwidth)) < 1e-12,
              "%g vs %g", a.predicted.dp_comm_time, 6 * 2 * 3 * 1e-3 + 2.0 * P * 4 / d.cluster.inter_bandwidth);
    CHECK(a.predicted.dp_comm_time < 6 * 2 * 7 * 1e-3); /* the ring's latency alone is more */
    d.cluster.intra_latency = 5e-6, d.cluster.inter_latency = 2e-5, d.cluster.devices_per_node = 4;

    /* pipeline buffers: 4 a chunk (input, output, their gradients) of each micro-batch in flight in
       the compute type: 1F1B holds p at most (on the first stage), GPipe every micro-batch */
    d.model.batch = 32; /* dp 4 x 8 micro-batches of one sample */
    a = predicted_pp(&d, 4, 2, PAR_PP_1F1B, 8, PAR_F32);
    CHECK_MSG(a.predicted.boundary_bytes == 2 * 4 * 64 * h * 4, "%.0f", a.predicted.boundary_bytes);
    a = predicted_pp(&d, 4, 2, PAR_PP_1F1B, 8, PAR_BF16);
    CHECK(a.predicted.boundary_bytes == 2 * 4 * 64 * h * 2);
    b = predicted_pp(&d, 4, 2, PAR_PP_GPIPE, 8, PAR_BF16);
    CHECK(b.predicted.boundary_bytes == 8 * 4 * 64 * h * 2);
    CHECK(b.predicted.memory_bytes > a.predicted.memory_bytes);
    CHECK(predicted(&d, 8, 1, 1, 0).predicted.boundary_bytes == 0);

    /* a fixed micro-batch size: the micro-batches follow from dp (2 samples each: dp 1 -> 16, dp 8 -> 2) */
    d.micro_batch_size = 2, d.max_micro_batches = 4; /* the bound does not apply then */
    CHECK_OK(par_auto_search(&d, plans, 64, &count, &cuts));
    for (i = 0, ok = count > 0; i < count && i < 64; i++)
        ok &= plans[i].config.dp * plans[i].config.micro_batches * 2 == 32;
    CHECK_MSG(ok, "%d plans, each of micro-batches of 2 samples", count);
    d.micro_batch_size = 3;
    CHECK_ERR(par_auto_search(&d, plans, 64, &count, &cuts), PAR_EINVAL, "micro-batches of 3 samples");
    d.micro_batch_size = -1;
    CHECK_ERR(par_auto_search(&d, plans, 64, &count, &cuts), PAR_EINVAL, "micro_batch_size");
}

/* ---- the pipeline kinds in the whole-plan search ------------------------------------- */

static par_auto_plan predicted_v(const par_auto_desc *d, int pp, par_pp_kind kind, int chunks, int m,
                                 par_recompute_mode rc) {
    par_auto_plan p;
    memset(&p, 0, sizeof p);
    p.config.dp = 8 / pp, p.config.tp = 1, p.config.cp = 1, p.config.pp = pp, p.config.micro_batches = m;
    p.config.schedule = kind, p.config.chunks = chunks, p.config.recompute = rc;
    CHECK_OK(par_auto_predict(d, &p));
    return p;
}

/* Every kind the pipeline section generates is searched: the looped kinds
   (interleaved, looped_bfs, zb1p) over 2 to 4 chunks a rank, those that
   divide the layers, or the host's fixed.chunks; zbv and dualpipev over 2.
   zb1p splits the backward as zb-h1 does (full recomputation saves less);
   on the v placement the first rank holds the embedding and the head. */
static void pipeline_kinds(void) {
    /* tiny_yaml: 4 layers of (64 x 64 x 2 + 64 x 32 x 2 + 3 x 64 x 172 + 2 x 64 norms), vocab 256 */
    const double layer = 64.0 * 64 * 2 + 64 * 32 * 2 + 3 * 64 * 172 + 2 * 64, Vh = 256.0 * 64;
    par_auto_desc d;
    par_auto_plan plans[400];
    par_auto_cuts cuts;
    int count = 0, i, kinds_seen = 0;
    memset(&d, 0, sizeof d);
    CHECK_OK(par_model_shape_parse(tiny_yaml, &d.model));
    CHECK_OK(par_cluster_parse(cluster_text, &d.cluster));
    d.model.batch = 64; /* room for dualpipev's m >= 2p at every dp */
    {   /* zb1p keeps the linears' inputs for its W as zb-h1 does: full recomputation's area (what
           memory holds beside the activations, full minus none) is zb-h1's, smaller than interleaved's */
        par_auto_plan q[3][2];
        const par_pp_kind kinds[3] = {PAR_PP_ZB1P, PAR_PP_ZB_H1, PAR_PP_INTERLEAVED};
        double area[3];
        for (i = 0; i < 3; i++) {
            q[i][0] = predicted_v(&d, 2, kinds[i], kinds[i] == PAR_PP_ZB_H1 ? 1 : 2, 4, PAR_RECOMPUTE_NONE);
            q[i][1] = predicted_v(&d, 2, kinds[i], kinds[i] == PAR_PP_ZB_H1 ? 1 : 2, 4, PAR_RECOMPUTE_FULL);
            area[i] = (q[i][1].predicted.memory_bytes - q[i][1].predicted.activation_bytes) -
                      (q[i][0].predicted.memory_bytes - q[i][0].predicted.activation_bytes);
        }
        CHECK_MSG(fabs(area[0] - area[1]) < 0.5 && area[2] > area[0] + 0.5, "zb1p %g, zb-h1 %g, interleaved %g",
                  area[0], area[1], area[2]);
    }
    {   /* f32 weights of the busiest rank at pp 2: 1f1b's last (2 layers, head, final norm); zbv's first
           (2 layers, embedding, head, final norm) */
        const par_auto_plan ob = predicted_v(&d, 2, PAR_PP_1F1B, 1, 4, PAR_RECOMPUTE_NONE);
        const par_auto_plan zv = predicted_v(&d, 2, PAR_PP_ZBV, 2, 4, PAR_RECOMPUTE_NONE);
        const par_auto_plan dv = predicted_v(&d, 2, PAR_PP_DUALPIPEV, 2, 4, PAR_RECOMPUTE_NONE);
        CHECK_MSG(ob.predicted.weights_bytes == (2 * layer + Vh + 64) * 4, "1f1b %g", ob.predicted.weights_bytes);
        CHECK_MSG(zv.predicted.weights_bytes == (2 * layer + 2 * Vh + 64) * 4, "zbv %g", zv.predicted.weights_bytes);
        CHECK_MSG(dv.predicted.weights_bytes == (2 * layer + 2 * Vh + 64) * 4, "dualpipev %g", dv.predicted.weights_bytes);
    }
    /* the search: every kind, pp fixed at 2 (2 layers a rank: the looped kinds only at 2 chunks) */
    d.schedules = (1u << PAR_PP_KIND_COUNT) - 1;
    d.mode = PAR_SEARCH_SHARDING_PROPAGATION;
    d.fixed.pp = 2, d.fixed.tp = 1, d.fixed.cp = 1;
    d.max_micro_batches = 8;
    CHECK_OK(par_auto_search(&d, plans, 400, &count, &cuts));
    CHECK(count > 0 && count <= 400);
    for (i = 0; i < count; i++) {
        const par_pp_kind k = plans[i].config.schedule;
        const int want = k == PAR_PP_GPIPE || k == PAR_PP_1F1B || k == PAR_PP_ZB_H1 ? 1 : 2;
        CHECK_MSG(plans[i].config.chunks == want, "%s with %d chunks", par_pp_kind_name(k), plans[i].config.chunks);
        kinds_seen |= 1 << k;
    }
    CHECK_MSG(kinds_seen == (1 << PAR_PP_KIND_COUNT) - 1, "kinds found 0x%x", kinds_seen);
    /* 8 layers, dp 4 x pp 2: 4 a rank, the looped kinds over 2 and 4 chunks (not 3); fixed.chunks 4: over 4 */
    d.fixed.dp = 4;
    d.model.layers = 8;
    d.schedules = (1u << PAR_PP_ZB1P) | (1u << PAR_PP_LOOPED_BFS);
    CHECK_OK(par_auto_search(&d, plans, 400, &count, &cuts));
    {
        int seen2 = 0, seen4 = 0;
        for (i = 0; i < count; i++) {
            CHECK(plans[i].config.chunks == 2 || plans[i].config.chunks == 4);
            seen2 |= plans[i].config.chunks == 2, seen4 |= plans[i].config.chunks == 4;
        }
        CHECK_MSG(count > 0 && seen2 && seen4, "%d plans, chunks 2: %d, 4: %d", count, seen2, seen4);
    }
    d.fixed.chunks = 4;
    CHECK_OK(par_auto_search(&d, plans, 400, &count, &cuts));
    CHECK(count > 0);
    for (i = 0; i < count; i++) CHECK(plans[i].config.chunks == 4);
    d.fixed.chunks = 3; /* 8 layers do not split into 2 stages x 3 chunks: nothing */
    CHECK(par_auto_search(&d, plans, 400, &count, &cuts) != PAR_OK);
    CHECK(strstr(cuts.not_divisible_example, "8 layers do not split into 2 stages x 3 chunks"));
    d.fixed.chunks = 1;
    CHECK(par_auto_search(&d, plans, 400, &count, &cuts) == PAR_EINVAL &&
          strstr(par_last_error(), "par_auto_desc.fixed.chunks = 1: the chunks per rank of the looped kinds"));
    d.fixed.chunks = -2;
    CHECK(par_auto_search(&d, plans, 400, &count, &cuts) == PAR_EINVAL && strstr(par_last_error(), "fixed.chunks = -2"));
}

int main(void) {
    property_dp_equals_enumeration();
    errors();
    text_form();
    whole_plan();
    time_model();
    calibration();
    calibration_for_model();
    recompute_model();
    dtype_model();
    cost_model_terms();
    pipeline_kinds();
    return TEST_END("test_planner");
}
