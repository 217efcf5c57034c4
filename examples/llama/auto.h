/* examples/llama/auto.h - parallel.parallel_mode: auto_parallel for the trainer.

   The planner lives in parallel.h (>>planner: par_auto_search); this file only
   maps the trainer's config onto it and back:
     - the ranks: the product of the parallel_config degrees as written (e.g.
       data_parallel: 8 asks for 8 ranks), or the MPI world;
     - the cluster: --cluster FILE (par_cluster_parse's form), else measured
       now on that many rank threads (par_calibrate: a GEMM and two
       all-reduces, well under a second);
     - the cap: --max-device-memory, else the cluster's memory per device;
     - the modes the trainer runs: dp, tp (+ sp), cp (ring = colossalai_cp,
       ulysses = ulysses_cp), pp (1f1b, gpipe, zb-h1; over 2 to 4 chunks a rank
       interleaved, looped_bfs, zb1p; not yet zbv and dualpipev, below), the
       micro-batches, ZeRO level 1/2;
     - parallel.search_mode: how the degrees are searched (par_auto_desc.mode);
       sharding_propagation keeps the degrees written above 1.
   The fastest predicted plan that also passes llama_config_validate becomes
   the config's parallel_config; it is printed before training. */
#ifndef LLAMA_AUTO_H
#define LLAMA_AUTO_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "parallel.h" /* and examples/llama/config.h before this file (its implementation is not guarded) */


/* "64MiB", "1GB", "123456" -> bytes; -1 if it is no size. */
static double llama__auto_size(const char *t) {
    char *end;
    double v = strtod(t, &end), scale = 1;
    if (end == t || !(v > 0)) return -1;
    if (*end == 'K' || *end == 'M' || *end == 'G' || *end == 'T') {
        const int pow = *end == 'K' ? 1 : *end == 'M' ? 2 : *end == 'G' ? 3 : 4;
        const double base = end[1] == 'i' ? 1024.0 : 1000.0;
        for (int i = 0; i < pow; i++) scale *= base;
        end += end[1] == 'i' ? 2 : 1;
    }
    if (*end == 'B') end++;
    return *end ? -1 : v * scale;
}

/* The plan's degrees written into a copy of the config. */
static void llama__auto_apply(const par_auto_plan *p, llama_config *c) {
    /* the global batch stays what the file's degrees made it (MindFormers'
       product would change with the plan's data_parallel); the plan's
       micro-batches are all the accumulation there is */
    c->global_batch_size = llama_config_global_batch(c);
    c->gradient_accumulation_steps = 1;
    c->parallel_mode = LLAMA_PARALLEL_MODE_SEMI_AUTO;
    c->data_parallel = p->config.dp, c->model_parallel = p->config.tp, c->context_parallel = p->config.cp, c->pipeline_stage = p->config.pp;
    c->use_seq_parallel = p->config.sp;
    c->micro_batch_num = p->config.micro_batches;
    c->ulysses_degree_in_cp = 1;
    snprintf(c->context_parallel_algo, sizeof c->context_parallel_algo, "%s",
             p->config.cp > 1 && p->config.cp_algo == PAR_CP_ULYSSES ? "ulysses_cp" : "colossalai_cp");
    /* the trainer's pipeline_scheduler names are par_pp_kind's, but for the interleaved 1F1B:
       "1f1b" with pipeline_interleave over the chunks */
    snprintf(c->pipeline_scheduler, sizeof c->pipeline_scheduler, "%s",
             p->config.pp > 1 && p->config.schedule != PAR_PP_INTERLEAVED ? par_pp_kind_name(p->config.schedule) : "1f1b");
    c->pipeline_interleave = p->config.pp > 1 && p->config.chunks > 1;
    c->pp_interleave_num = c->pipeline_interleave ? p->config.chunks : 1;
    /* the plan may shard more than the file asked (less memory), never less:
       MindFormers keeps enable_parallel_optimizer under auto_parallel too */
    if (p->config.zero > 0 && (!c->enable_parallel_optimizer || p->config.zero > c->optimizer_level)) c->optimizer_level = p->config.zero > 1 ? 2 : 1;
    c->enable_parallel_optimizer = c->enable_parallel_optimizer || p->config.zero > 0;
}

/* Pick the degrees for cfg (parallel_mode auto_parallel); print the plan to
   `out` (may be NULL). 0 on success, -1 with a sentence in err. */
static int llama_auto_parallel(llama_config *cfg, int world, const char *cluster_path, const char *max_memory,
                               FILE *out, char *err, size_t errsize) {
    enum { TOP = 64 };
    par_auto_desc d;
    par_auto_plan plans[TOP];
    par_auto_cuts cuts;
    int count = 0, i, threads = 1, rc = -1;
    char name[128], why[512] = "";
    par_cpu_desc cd;
    par_compute_table table;
    memset(&d, 0, sizeof d);
    if (world <= 0) world = cfg->data_parallel * cfg->model_parallel * cfg->context_parallel * cfg->pipeline_stage;
    if (max_memory && (d.memory_cap = llama__auto_size(max_memory)) <= 0)
        return snprintf(err, errsize, "--max-device-memory %s: not a size (bytes, or e.g. 64MiB, 1GB)", max_memory), -1;
    d.model.layers = cfg->num_layers, d.model.hidden = cfg->hidden_size, d.model.heads = cfg->num_heads;
    d.model.kv_heads = cfg->n_kv_heads ? cfg->n_kv_heads : cfg->num_heads, d.model.ffn = cfg->intermediate_size;
    d.model.vocab = cfg->vocab_size, d.model.seq = cfg->seq_length, d.model.batch = llama_config_global_batch(cfg);
    d.model.dtype = (par_dtype)cfg->compute_dtype; /* the bytes the trainer will hold */
    if (cluster_path) {
        FILE *f = fopen(cluster_path, "rb");
        char text[4096];
        size_t n;
        if (!f) return snprintf(err, errsize, "--cluster %s: cannot open it", cluster_path), -1;
        n = fread(text, 1, sizeof text - 1, f);
        fclose(f);
        text[n] = 0;
        if (par_cluster_parse(text, &d.cluster) != PAR_OK)
            return snprintf(err, errsize, "--cluster %s: %s", cluster_path, par_last_error()), -1;
        if (d.cluster.devices != world)
            return snprintf(err, errsize,
                            "--cluster %s describes %d devices but this run has %d ranks (the product of the "
                            "parallel_config degrees as written)",
                            cluster_path, d.cluster.devices, world),
                   -1;
    } else { /* measure this machine on `world` rank threads, at the model's shapes */
        par_calibrate_desc cal;
        memset(&cal, 0, sizeof cal);
        cal.memory_bytes = d.memory_cap > 0 ? d.memory_cap : 0;
        cal.repeats = 9; /* the fastest of more runs: shared machines' timings scatter */
        if (par_calibrate_desc_for_model(&d.model, world, &cal) != PAR_OK ||
            par_calibrate_threads(world, &cal, &d.cluster, &threads) != PAR_OK)
            return snprintf(err, errsize, "auto_parallel: measuring this machine failed: %s", par_last_error()), -1;
    }
    /* the CPU table a rank will have: its GEMM scratch counts in the memory prediction */
    memset(&cd, 0, sizeof cd);
    cd.threads = threads;
    if (par_compute_cpu(&cd, &table) == PAR_OK) d.compute = &table;
    /* every kind but the two on the v placement: the trainer's run of zbv and dualpipev stops at
       rank 0's first forward of its second chunk (par_pp_run: "memcpy: dst is NULL", pp 2, CPU) */
    d.schedules = ((1u << PAR_PP_KIND_COUNT) - 1) & ~(1u << PAR_PP_ZBV) & ~(1u << PAR_PP_DUALPIPEV);
    d.cp_algos = (1u << PAR_CP_RING) | (1u << PAR_CP_ULYSSES);
    /* recomputation on every layer is a knob the plan keeps (a per-stage list depends on the
       pipeline the plan picks: planned as keeping everything, the conservative side) */
    d.recomputes = 1u << (cfg->recompute.all && !cfg->recompute.num                 ? PAR_RECOMPUTE_FULL
                          : cfg->select_recompute.all && !cfg->select_recompute.num ? PAR_RECOMPUTE_SELECTIVE
                                                                                     : PAR_RECOMPUTE_NONE);
    if (par_search_mode_parse(cfg->search_mode, &d.mode) != PAR_OK)
        return snprintf(err, errsize, "parallel.search_mode = %s: %s", cfg->search_mode, par_last_error()), -1;
    if (d.mode == PAR_SEARCH_SHARDING_PROPAGATION) { /* the degrees written above 1 stay */
        d.fixed.dp = cfg->data_parallel > 1 && cfg->data_parallel != world ? cfg->data_parallel : 0;
        d.fixed.tp = cfg->model_parallel > 1 ? cfg->model_parallel : 0;
        d.fixed.cp = cfg->context_parallel > 1 ? cfg->context_parallel : 0;
        d.fixed.pp = cfg->pipeline_stage > 1 ? cfg->pipeline_stage : 0;
    }
    if (par_auto_search(&d, plans, TOP, &count, &cuts) != PAR_OK) {
        snprintf(err, errsize, "auto_parallel: %s", par_last_error());
        goto done;
    }
    for (i = 0; i < count && i < TOP; i++) {
        llama_config c = *cfg;
        llama__auto_apply(&plans[i], &c);
        if (llama_config_validate(&c, why, sizeof why) != 0) continue; /* a rule of the trainer's the model lacks */
        par_auto_plan_format(&plans[i], name, sizeof name);
        if (out) {
            fprintf(out, "auto_parallel (%s) on %d ranks: %lld plans considered, %lld fit%s%s\n",
                     par_search_mode_name(d.mode), world, (long long)cuts.considered, (long long)cuts.ranked,
                     d.memory_cap > 0 ? ", cap " : "", d.memory_cap > 0 ? max_memory : "");
            fprintf(out, "  chose %s: predicted step %.4g s, %.3f MiB per rank\n", name, plans[i].predicted.step_time,
                    plans[i].predicted.memory_bytes / 1048576.0);
            fprintf(out, "  cluster: %.4g Gflop/s per rank (attention %.3g), all-reduce %.4g GB/s and %.3g us per step%s\n",
                    d.cluster.flops / 1e9, d.cluster.attention_rate / 1e9, d.cluster.intra_bandwidth / 1e9,
                    d.cluster.intra_latency * 1e6, cluster_path ? " (--cluster)" : " (measured now)");
            if (d.cluster.node_parallelism > 0 && d.cluster.node_parallelism < world)
                fprintf(out, "  the cores run %d of the %d ranks at once: the step is at least the node's work over %d\n",
                        d.cluster.node_parallelism, world, d.cluster.node_parallelism);
        }
        *cfg = c;
        rc = 0;
        goto done;
    }
    snprintf(err, errsize, "auto_parallel: none of the %d plans that fit passes the trainer's rules (last: %s)", count,
             why);
done:
    if (d.compute) table.destroy(table.user);
    return rc;
}

#endif /* LLAMA_AUTO_H */
