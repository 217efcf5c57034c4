/* tests/exec_cases.h - random redistribution cases for the executor, shared by
   tests/test_exec.c (threads backend) and tests/mpi/test_exec_mpi.c (MPI).

   exec_cases_make() builds, single-threaded and deterministically (every MPI
   process builds the same list), random layout pairs on a mesh, their optimal
   plans, and for every rank the input slice and the expected output slice as
   computed by the mesh simulator (par_sim_run), which shares no code with the
   executor. exec_cases_check() runs every plan through par_execute_plan on this
   rank and counts the elements that differ. Values are small integers, so f32,
   f64, i32 and i64 results must be bit-exact. */
#ifndef PAR_EXEC_CASES_H
#define PAR_EXEC_CASES_H
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "random_layout.h"

typedef struct exec_case {
    par_plan plan;
    int ranks;
    int64_t in_numel, out_numel;
    double *in, *out; /* ranks * in_numel, ranks * out_numel */
} exec_case;

static void exec_random_shape(int ndim, int64_t *shape) {
    static const int64_t sizes[] = {1, 2, 3, 4, 6, 8, 12, 16};
    int64_t numel;
    int t;
    do {
        numel = 1;
        for (t = 0; t < ndim; t++) numel *= shape[t] = sizes[rnd_below(8)];
    } while (numel > 4096);
}

/* `count` cases on `mesh_text`; returns the number made (plans the planner
   refuses are skipped, which the caller checks is rare). */
static int exec_cases_make(const char *mesh_text, int count, exec_case **cases_out) {
    exec_case *cases = (exec_case *)calloc((size_t)count, sizeof *cases);
    par_mesh mesh;
    int made = 0, tries = 0;
    if (!cases || par_mesh_parse(mesh_text, &mesh) != PAR_OK) {
        free(cases);
        *cases_out = NULL;
        return 0;
    }
    while (made < count && tries++ < 4 * count) {
        exec_case *c = &cases[made];
        int64_t shape[PARALLEL_MAX_DIMS], numel = 1, i;
        int ndim = 1 + rnd_below(4), t, r;
        par_layout from, to;
        double *global, **locals;
        exec_random_shape(ndim, shape);
        for (t = 0; t < ndim; t++) numel *= shape[t];
        random_layout(&from, &mesh, ndim, shape, ~0u, 0);
        random_layout(&to, &mesh, ndim, shape, 0, rnd_below(2) ? from.map.partial : 0);
        if (par_plan_redistribution(&from, &to, NULL, &c->plan) != PAR_OK) continue;
        c->ranks = par_mesh_size(&mesh);
        c->in_numel = par_layout_local_numel(&from);
        c->out_numel = par_layout_local_numel(&to);
        global = (double *)malloc(sizeof(double) * (size_t)numel);
        locals = (double **)malloc(sizeof(double *) * (size_t)c->ranks);
        c->in = (double *)malloc(sizeof(double) * (size_t)(c->in_numel * c->ranks));
        c->out = (double *)malloc(sizeof(double) * (size_t)(c->out_numel * c->ranks));
        for (r = 0; r < c->ranks; r++) locals[r] = (double *)malloc(sizeof(double) * (size_t)c->plan.max_local_numel);
        for (i = 0; i < numel; i++) global[i] = 1 + rnd_below(500);
        par_sim_scatter(&from, global, locals);
        for (r = 0; r < c->ranks; r++) memcpy(c->in + r * c->in_numel, locals[r], sizeof(double) * (size_t)c->in_numel);
        par_sim_run(&c->plan, locals);
        for (r = 0; r < c->ranks; r++) {
            memcpy(c->out + r * c->out_numel, locals[r], sizeof(double) * (size_t)c->out_numel);
            free(locals[r]);
        }
        free(locals);
        free(global);
        made++;
    }
    *cases_out = cases;
    return made;
}

static void exec_cases_free(exec_case *cases, int n) {
    int i;
    for (i = 0; i < n; i++) {
        free(cases[i].in);
        free(cases[i].out);
    }
    free(cases);
}

static void exec_store(par_dtype dtype, void *buf, int64_t i, double v) {
    switch (dtype) {
    case PAR_F32: ((float *)buf)[i] = (float)v; break;
    case PAR_F64: ((double *)buf)[i] = v; break;
    case PAR_I32: ((int32_t *)buf)[i] = (int32_t)v; break;
    default: ((int64_t *)buf)[i] = (int64_t)v; break;
    }
}

static double exec_load(par_dtype dtype, const void *buf, int64_t i) {
    switch (dtype) {
    case PAR_F32: return ((const float *)buf)[i];
    case PAR_F64: return ((const double *)buf)[i];
    case PAR_I32: return ((const int32_t *)buf)[i];
    default: return (double)((const int64_t *)buf)[i];
    }
}

/* Run every case on this rank; returns the number of failed cases and prints the
   first few. in_place: pass the same buffer as in and out. */
static int exec_cases_check(par_ctx *ctx, const exec_case *cases, int n, par_dtype dtype, int in_place) {
    const par_compute_table *ct = par_ctx_compute(ctx);
    int rank = par_ctx_rank(ctx), failed = 0, k;
    size_t elem = par_dtype_size(dtype);
    par_executor *exec = NULL;
    if (par_executor_create(ctx, &exec) != PAR_OK) return n;
    for (k = 0; k < n; k++) {
        const exec_case *c = &cases[k];
        int64_t cap = c->plan.max_local_numel > c->in_numel ? c->plan.max_local_numel : c->in_numel, i, bad = -1;
        void *in = NULL, *out = NULL, *result;
        par_status st;
        if (ct->alloc(ct->user, (size_t)cap * elem + 1, PAR_MEM_ACTIVATIONS, &in) != PAR_OK ||
            ct->alloc(ct->user, (size_t)cap * elem + 1, PAR_MEM_ACTIVATIONS, &out) != PAR_OK) {
            failed++;
            break;
        }
        for (i = 0; i < c->in_numel; i++) exec_store(dtype, in, i, c->in[rank * c->in_numel + i]);
        result = in_place ? in : out;
        st = par_execute_plan(exec, &c->plan, dtype, in, result);
        for (i = 0; st == PAR_OK && i < c->out_numel && bad < 0; i++)
            if (exec_load(dtype, result, i) != c->out[rank * c->out_numel + i]) bad = i;
        if (st != PAR_OK || bad >= 0) {
            if (failed++ < 3) {
                char text[8192];
                par_plan_format(&c->plan, text, sizeof text);
                fprintf(stderr, "rank %d case %d dtype %s%s: %s\n%s\n", rank, k, par_dtype_name(dtype),
                        in_place ? " in place" : "",
                        st != PAR_OK ? par_last_error() : "wrong value", text);
                if (st == PAR_OK)
                    fprintf(stderr, "  element %lld: got %g want %g\n", (long long)bad, exec_load(dtype, result, bad),
                            c->out[rank * c->out_numel + bad]);
            }
        }
        if (in) ct->free(ct->user, in);
        if (out) ct->free(ct->user, out);
    }
    par_executor_destroy(exec);
    return failed;
}
#endif
