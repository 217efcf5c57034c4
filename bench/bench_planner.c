/* bench/bench_planner.c - how fast the planner searches.

   1. The whole-plan search (par_auto_search) for a 64-layer Llama (hidden
      8192, 64 heads / 8 kv heads, ffn 28672, vocab 128256, seq 4096, global
      batch 512) on 1024 devices, 8 per node, 80 GiB each: every dp x tp x cp
      x pp with sp, the cp algorithm, all four pipeline schedules, micro-batches
      up to 16 and ZeRO 0-2. Target: under 1 s (MindSpore's docs speak of
      minutes for 100 cards).
   2. The graph search (par_graph_search, all three modes) on a chain of
      Llama decoder ops (norm, q/k/v/o and MLP matmuls, elementwise) of
      `layers` layers on 8 devices.
   Median of 5 runs each, wall time. */
#define _DEFAULT_SOURCE
#include "../parallel.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median5(double *t) {
    qsort(t, 5, sizeof *t, cmp_double);
    return t[2];
}

static void whole_plan(void) {
    par_auto_desc d;
    par_auto_plan best[3];
    par_auto_cuts cuts;
    double t[5];
    char name[128];
    int i, count = 0;
    memset(&d, 0, sizeof d);
    d.model.layers = 64, d.model.hidden = 8192, d.model.heads = 64, d.model.kv_heads = 8;
    d.model.ffn = 28672, d.model.vocab = 128256, d.model.seq = 4096, d.model.batch = 512;
    d.model.dtype = PAR_BF16;
    d.cluster.devices = 1024, d.cluster.devices_per_node = 8;
    d.cluster.intra_bandwidth = 300e9, d.cluster.intra_latency = 5e-6;
    d.cluster.inter_bandwidth = 25e9, d.cluster.inter_latency = 2e-5;
    d.cluster.memory_bytes = 80.0 * (1u << 30), d.cluster.flops = 400e12;
    d.schedules = (1u << PAR_PP_KIND_COUNT) - 1;
    for (i = 0; i < 5; i++) {
        const double t0 = now_s();
        if (par_auto_search(&d, best, 3, &count, &cuts) != PAR_OK) {
            printf("whole-plan search failed: %s\n", par_last_error());
            exit(1);
        }
        t[i] = now_s() - t0;
    }
    par_auto_plan_format(&best[0], name, sizeof name);
    printf("whole plan, 64-layer Llama on 1024 devices (8 per node): %.3f s median of 5 (target < 1 s)\n", median5(t));
    printf("  %lld plans considered, %lld fit 80 GiB, best %s: step %.3g s, %.3g GiB per rank\n",
           (long long)cuts.considered, (long long)cuts.ranked, name, best[0].predicted.step_time,
           best[0].predicted.memory_bytes / (1u << 30));
}

/* One decoder layer as a chain of ops on [tokens, hidden] activations. */
static void add_layer(par_graph *g, int *prev, int tokens, int h, int f) {
    par_op_desc d;
    int id;
    struct { par_op_kind kind; int k, n; } ops[] = {
        {PAR_OP_RMSNORM, h, h}, {PAR_OP_MATMUL, h, h}, {PAR_OP_MATMUL, h, h}, {PAR_OP_ELEMENTWISE, h, h},
        {PAR_OP_RMSNORM, h, h}, {PAR_OP_MATMUL, h, f}, {PAR_OP_MATMUL, f, h}, {PAR_OP_ELEMENTWISE, h, h}};
    int i;
    for (i = 0; i < 8; i++) {
        memset(&d, 0, sizeof d);
        d.kind = ops[i].kind;
        d.num_inputs = 2;
        d.ndim[0] = 2, d.shape[0][0] = tokens, d.shape[0][1] = ops[i].k;
        if (d.kind == PAR_OP_MATMUL) {
            d.ndim[1] = 2, d.shape[1][0] = ops[i].k, d.shape[1][1] = ops[i].n, d.params = 2u;
        } else if (d.kind == PAR_OP_RMSNORM) {
            d.ndim[1] = 1, d.shape[1][0] = h, d.params = 2u;
        } else {
            d.ndim[1] = 2, d.shape[1][0] = tokens, d.shape[1][1] = h;
        }
        if (par_graph_add_op(g, &d, NULL, &id) != PAR_OK) {
            printf("add_op: %s\n", par_last_error());
            exit(1);
        }
        if (*prev >= 0 && par_graph_add_edge(g, *prev, 0, id, 0) != PAR_OK) {
            printf("add_edge: %s\n", par_last_error());
            exit(1);
        }
        *prev = id;
    }
}

static void graph(int layers) {
    par_graph_desc gd;
    par_graph *g = NULL;
    par_graph_result r;
    double t[5];
    int prev = -1, i, mode;
    memset(&gd, 0, sizeof gd);
    gd.devices = 8;
    gd.max_candidates = 16;
    if (par_graph_create(&gd, &g) != PAR_OK) exit(1);
    for (i = 0; i < layers; i++) add_layer(g, &prev, 4096, 1024, 2816);
    for (mode = 0; mode < PAR_SEARCH_MODE_COUNT; mode++) {
        for (i = 0; i < 5; i++) {
            const double t0 = now_s();
            if (par_graph_search(g, (par_search_mode)mode, 0, &r) != PAR_OK) {
                printf("graph search: %s\n", par_last_error());
                exit(1);
            }
            t[i] = now_s() - t0;
        }
        printf("graph, %d layers (%d ops), 8 devices, %-21s %.4f s median of 5 (the first also builds the edge "
               "tables), cost %.4g s, %lld states\n",
               layers, par_graph_num_ops(g), par_search_mode_name((par_search_mode)mode), median5(t), r.cost,
               (long long)r.states);
    }
    par_graph_destroy(g);
}

int main(void) {
    whole_plan();
    graph(16);
    return 0;
}
