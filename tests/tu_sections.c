/* tests/tu_sections.c - the program tests/conventions.sh builds with each
   PARALLEL_NO_* macro that leaves a section out (defined before this file is
   included). What stays must compile warning-free and work: two rank threads
   make a context, reduce over the world and run a redistribution plan through
   the executor, with buffers from the context's CPU table. What a macro leaves
   out must be gone, declarations included: the typedefs below reuse the
   omitted sections' type names, a compile error if the header still declared
   them. Prints "sections: ok" and exits 0 when every check holds. */
#define PARALLEL_IMPLEMENTATION
#include "../parallel.h"
#include <stdio.h>
#include <string.h>

#ifdef PARALLEL_NO_TRACE
typedef int par_trace_desc; /* the >>trace declarations are gone */
#endif
#ifdef PARALLEL_NO_CHECKPOINT
typedef int par_st_file; /* the >>checkpoint declarations are gone */
#endif

typedef struct sections_arg {
    const par_plan *plan;
    int failed[2];
} sections_arg;

static par_status body(par_ctx *ctx, void *p) {
    sections_arg *a = (sections_arg *)p;
    const par_compute_table *ct = par_ctx_compute(ctx);
    const par_comm_table *cm = par_ctx_comm(ctx);
    const int rank = par_ctx_rank(ctx);
    par_comm_group *world = NULL;
    par_executor *exec = NULL;
    float sum[2] = {1.0f, 2.0f}, *buf = NULL;
    int bad = 0, i;
    par_status st;
    if ((st = par_ctx_group(ctx, 1u, &world, NULL, NULL)) != PAR_OK) return st;
    if ((st = cm->all_reduce(cm->user, world, sum, sum, 2, PAR_F32, PAR_REDUCE_SUM, NULL)) != PAR_OK) return st;
    bad += sum[0] != 2.0f || sum[1] != 4.0f;
    /* plan: [0] -> [-1] on 2 ranks, 4 elements (an all_gather) */
    if ((st = ct->alloc(ct->user, 6 * sizeof(float), PAR_MEM_ACTIVATIONS, (void **)&buf)) != PAR_OK) return st;
    buf[0] = (float)(2 * rank), buf[1] = (float)(2 * rank + 1);
    if ((st = par_executor_create(ctx, &exec)) == PAR_OK) st = par_execute_plan(exec, a->plan, PAR_F32, buf, buf + 2);
    par_executor_destroy(exec);
    for (i = 0; i < 4 && st == PAR_OK; i++) bad += buf[2 + i] != (float)i;
    ct->free(ct->user, buf);
#ifdef PARALLEL_NO_CPU_KERNELS
    bad += ct->gemm != NULL || ct->attention_fwd != NULL; /* a memory-only table */
#else
    bad += ct->gemm == NULL || ct->attention_fwd == NULL;
#endif
#ifndef PARALLEL_NO_TRACE
    {
        par_trace *tr = NULL;
        par_trace_desc td;
        memset(&td, 0, sizeof td);
        td.rank = rank;
        bad += par_trace_create(&td, &tr) != PAR_OK || par_trace_span(tr, "x", "compute", 0.0, 1.0) != PAR_OK;
        par_trace_destroy(tr);
    }
#endif
    a->failed[rank] = bad;
    return st;
}

int main(void) {
    par_mesh mesh;
    par_layout from, to;
    par_plan plan;
    sections_arg arg;
    int64_t shape[1] = {4};
    int failed = 0;
    memset(&arg, 0, sizeof arg);
    if (par_mesh_parse("2", &mesh) != PAR_OK || par_layout_parse(&from, &mesh, 1, shape, "[0]") != PAR_OK ||
        par_layout_parse(&to, &mesh, 1, shape, "[-1]") != PAR_OK ||
        par_plan_redistribution(&from, &to, NULL, &plan) != PAR_OK) {
        printf("sections: setup failed: %s\n", par_last_error());
        return 1;
    }
    arg.plan = &plan;
    if (par_run_threads(2, body, &arg) != PAR_OK) {
        printf("sections: run failed: %s\n", par_last_error());
        return 1;
    }
    failed = arg.failed[0] + arg.failed[1];
#ifndef PARALLEL_NO_CHECKPOINT
    {
        par_st_file *f = NULL;
        failed += par_st_open("/nonexistent/dir/x.safetensors", &f) != PAR_EIO || f != NULL;
    }
#endif
    printf("sections: %s\n", failed ? "FAILED" : "ok");
    return failed ? 1 : 0;
}
