/* bench_plan.c - redistribution planning speed and plan quality.

   1. Median and worst microseconds per optimal plan (A* searches on the
      tensor's own shape and on the unified shape timed: warmed-up planner, cache
      disabled) for random layout pairs on 2-, 3- and 4-dim meshes.
   2. Over a fixed random corpus (one case in five a reshape redistribution),
      how often the optimal plan is strictly cheaper than MindSpore's algorithm
      (par_plan_greedy), and the bytes it saves, with all_to_all allowed
      (enable_alltoall on) and without (off, MindSpore's default).

   Build: cc -std=c11 -O2 -Ibench bench/bench_plan.c -o build/bench_plan -lm
   Prints a table, then one JSON object per measurement. */
#define _POSIX_C_SOURCE 199309L
#include "../parallel.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CASES 2000
#define REPEATS 20

typedef struct bench_case {
    par_layout from, to;
} bench_case;

typedef struct quality {
    int cheaper;
    long long bytes_greedy, bytes_optimal;
} quality;

#include "../tests/random_layout.h"

static double now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

/* A mesh of `ndim` axes of size 2..4 with at most 64 devices. */
static void random_mesh(par_mesh *m, int ndim) {
    int dims[PARALLEL_MAX_DIMS], i, total;
    do {
        total = 1;
        for (i = 0; i < ndim; i++) total *= dims[i] = 2 + rnd_below(3);
    } while (total > 64);
    par_mesh_init(m, ndim, dims, NULL);
}

/* reshape: the target shape merges two neighbouring dims or splits one in two. */
static void random_case(bench_case *c, int mesh_ndim, int reshape) {
    static const int64_t sizes[] = {4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128};
    int64_t shape[PARALLEL_MAX_DIMS], to_shape[PARALLEL_MAX_DIMS];
    par_mesh m;
    int ndim = 2 + rnd_below(3), to_ndim = ndim, t, n = 0;
    random_mesh(&m, mesh_ndim);
    for (t = 0; t < ndim; t++) to_shape[t] = shape[t] = sizes[rnd_below(11)];
    if (reshape) {
        int at = rnd_below(ndim - 1);
        if (rnd_below(2)) { /* merge at, at+1 */
            for (t = 0; t < ndim; t++) {
                if (t == at + 1) continue;
                to_shape[n++] = t == at ? shape[t] * shape[t + 1] : shape[t];
            }
        } else { /* split at into 2 x rest (every size above is even) */
            for (t = 0; t < ndim; t++) {
                if (t == at) to_shape[n++] = 2;
                to_shape[n++] = t == at ? shape[t] / 2 : shape[t];
            }
        }
        to_ndim = n;
    }
    random_layout(&c->from, &m, ndim, shape, ~0u, 0);
    random_layout(&c->to, &m, to_ndim, to_shape, 0, rnd_below(2) ? c->from.map.partial : 0);
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

typedef struct timing {
    double median, p90, mean, worst;
} timing;

static timing time_plans(par_redist_planner *pl, const bench_case *cases, int n) {
    static double us[CASES];
    par_plan plan;
    timing r;
    double sum = 0;
    int i, k;
    for (i = 0; i < n; i++) /* warm-up: the planner's buffers reach their size */
        if (par_redist_planner_plan(pl, &cases[i].from, &cases[i].to, NULL, &plan) != PAR_OK) {
            fprintf(stderr, "plan failed: %s\n", par_last_error());
            exit(1);
        }
    for (i = 0; i < n; i++) {
        double t0 = now_us();
        for (k = 0; k < REPEATS; k++) par_redist_planner_plan(pl, &cases[i].from, &cases[i].to, NULL, &plan);
        us[i] = (now_us() - t0) / REPEATS;
        sum += us[i];
    }
    qsort(us, (size_t)n, sizeof us[0], cmp_double);
    r.median = us[n / 2];
    r.p90 = us[n * 9 / 10];
    r.mean = sum / n;
    r.worst = us[n - 1];
    return r;
}

/* Optimal against MindSpore's algorithm with one enable_alltoall setting. */
static int compare(par_redist_planner *pl, const bench_case *cases, int n, int no_all_to_all, quality *q) {
    par_cost_model cm;
    int i;
    memset(&cm, 0, sizeof cm);
    memset(q, 0, sizeof *q);
    cm.no_all_to_all = no_all_to_all;
    for (i = 0; i < n; i++) {
        par_plan best, greedy;
        if (par_redist_planner_plan(pl, &cases[i].from, &cases[i].to, &cm, &best) != PAR_OK ||
            par_plan_greedy(&cases[i].from, &cases[i].to, &cm, &greedy) != PAR_OK) {
            fprintf(stderr, "plan failed: %s\n", par_last_error());
            return 1;
        }
        q->cheaper += best.total_bytes < greedy.total_bytes;
        q->bytes_optimal += best.total_bytes;
        q->bytes_greedy += greedy.total_bytes;
    }
    return 0;
}

int main(void) {
    static bench_case cases[CASES];
    static const char *const setting[2] = {"on", "off"};
    par_redist_planner_desc desc;
    par_redist_planner *pl;
    timing t[3];
    quality q[2];
    int d, i, s;
    memset(&desc, 0, sizeof desc);
    desc.cache_entries = -1; /* time the search, not the cache */
    if (par_redist_planner_create(&desc, &pl) != PAR_OK) return 1;

    for (d = 2; d <= 4; d++) {
        for (i = 0; i < CASES; i++) random_case(&cases[i], d, rnd_below(5) == 0);
        t[d - 2] = time_plans(pl, cases, CASES);
    }

    for (i = 0; i < CASES; i++) random_case(&cases[i], 2 + rnd_below(3), rnd_below(5) == 0);
    for (s = 0; s < 2; s++)
        if (compare(pl, cases, CASES, s, &q[s])) return 1;
    par_redist_planner_destroy(pl);

    printf("redistribution planning (A* on own and unified shapes, warmed planner, cache off; %d random layout pairs "
           "per row, one in five a reshape)\n", CASES);
    printf("  mesh dims   median us   p90 us   mean us   worst us\n");
    for (d = 2; d <= 4; d++)
        printf("  %9d   %9.2f   %6.2f   %7.2f   %8.1f\n", d, t[d - 2].median, t[d - 2].p90, t[d - 2].mean, t[d - 2].worst);
    printf("optimal vs MindSpore's algorithm over %d cases (2-4 dim meshes, f32, cost = bytes)\n", CASES);
    printf("  enable_alltoall   strictly cheaper   bytes MindSpore   bytes optimal   saved\n");
    for (s = 0; s < 2; s++)
        printf("  %15s   %7d (%5.1f%%)   %15lld   %13lld   %4.1f%%\n", setting[s], q[s].cheaper, 100.0 * q[s].cheaper / CASES,
               q[s].bytes_greedy, q[s].bytes_optimal,
               q[s].bytes_greedy ? 100.0 * (double)(q[s].bytes_greedy - q[s].bytes_optimal) / (double)q[s].bytes_greedy : 0.0);
    for (d = 2; d <= 4; d++)
        printf("{\"bench\":\"plan\",\"mesh_dims\":%d,\"median_us\":%.3f,\"p90_us\":%.3f,\"mean_us\":%.3f,"
               "\"worst_us\":%.3f,\"cases\":%d}\n",
               d, t[d - 2].median, t[d - 2].p90, t[d - 2].mean, t[d - 2].worst, CASES);
    for (s = 0; s < 2; s++)
        printf("{\"bench\":\"plan_vs_greedy\",\"enable_alltoall\":\"%s\",\"cases\":%d,\"strictly_cheaper\":%d,"
               "\"bytes_greedy\":%lld,\"bytes_optimal\":%lld,\"bytes_saved\":%lld}\n",
               setting[s], CASES, q[s].cheaper, q[s].bytes_greedy, q[s].bytes_optimal, q[s].bytes_greedy - q[s].bytes_optimal);
    return 0;
}
