/* tests/random_layout.h - deterministic random meshes' layouts for property tests
   and benchmarks (tests/test_redist.c, tests/test_exec.c, bench/bench_plan.c).
   One xorshift stream per program; include after parallel.h. */
#ifndef PAR_RANDOM_LAYOUT_H
#define PAR_RANDOM_LAYOUT_H
#include <string.h>

static uint64_t rng_state = 0x2545F4914F6CDD1Dull;
static uint32_t rnd(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state >> 32);
}
static int rnd_below(int n) { return (int)(rnd() % (uint32_t)n); }

/* A random valid layout: device dims in random order, each joining a random
   tensor dim when it divides, staying free, or (if allowed) being partial.
   keep_partial: dims that must stay partial (the target keeps some of the
   source's partial dims); may_partial: dims that may be partial. */
static void random_layout(par_layout *l, const par_mesh *m, int ndim, const int64_t *shape, uint32_t may_partial,
                          uint32_t keep_partial) {
    int order[PARALLEL_MAX_DIMS], i, v;
    int64_t extent[PARALLEL_MAX_DIMS];
    memset(l, 0, sizeof *l);
    l->mesh = *m;
    l->ndim = ndim;
    for (i = 0; i < ndim; i++) extent[i] = l->shape[i] = shape[i];
    for (i = 0; i < m->ndim; i++) order[i] = i;
    for (i = m->ndim - 1; i > 0; i--) {
        int j = rnd_below(i + 1), x = order[i];
        order[i] = order[j];
        order[j] = x;
    }
    for (i = 0; i < m->ndim; i++) {
        int t, n;
        v = order[i];
        n = par_mesh_dev_size(m, v);
        if ((keep_partial >> v & 1) || ((may_partial >> v & 1) && rnd_below(4) == 0)) {
            l->map.partial |= 1u << v;
            continue;
        }
        t = rnd_below(ndim + 1) - 1;
        if (t >= 0 && extent[t] % n == 0) {
            extent[t] /= n;
            l->map.dev[t][l->map.count[t]++] = (int8_t)v;
        }
    }
}
#endif
