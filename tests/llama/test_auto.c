/* tests/llama/test_auto.c - the trainer's parallel_mode auto_parallel
   (examples/llama/auto.h over parallel.h's par_auto_search).

   Runs build/train (TRAIN overrides) as a user would and checks:
   - with a cluster file and a memory cap under every pure data-parallel plan's
     memory (worked out here with par_auto_predict), the plan printed is not
     pure dp, fits the cap, and the run trains: its first loss is the
     one-device run's (every mode computes the same step);
   - search_mode sharding_propagation keeps the model_parallel written;
   - without --cluster the machine is measured and a plan still trains;
   - bad input, exit status 2 naming the thing: a cluster file for another
     rank count, a cap nothing fits (the smallest plan's memory in the
     message), a size that is no size, --cluster without auto_parallel. */
#define _POSIX_C_SOURCE 200809L
#include "test.h"

#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <sys/wait.h>

static const char *train_bin;
static char out_text[16384], err_text[4096], dir[64];

static void slurp(const char *path, char *buf, size_t size) {
    FILE *f = fopen(path, "rb");
    size_t n = f ? fread(buf, 1, size - 1, f) : 0;
    if (f) fclose(f);
    buf[n] = 0;
}

static int run(const char *fmt, ...) PAR__PRINTF(1, 2);
static int run(const char *fmt, ...) {
    char args[2048], cmd[4096], o[128], e[128];
    va_list ap;
    int rc;
    va_start(ap, fmt);
    vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    snprintf(o, sizeof o, "%s/out.txt", dir);
    snprintf(e, sizeof e, "%s/err.txt", dir);
    snprintf(cmd, sizeof cmd, "%s --config examples/configs/tiny.yaml --data README.md %s >%s 2>%s </dev/null",
             train_bin, args, o, e);
    rc = system(cmd);
    slurp(o, out_text, sizeof out_text);
    slurp(e, err_text, sizeof err_text);
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

/* The loss the trainer prints for step 0 ("step     0 | loss 5.558957 | ..."). */
static double first_loss(void) {
    const char *p = strstr(out_text, "| loss ");
    return p ? atof(p + 7) : -1;
}

static const char *cluster4 = "devices: 4\nintra_node_bandwidth: 2G\nintra_node_latency: 2e-6\n"
                              "memory_per_device: 1Gi\nflops_per_device: 20G\n";

int main(void) {
    char cluster[128], cmd[256], want[256];
    par_auto_desc d;
    par_auto_plan p;
    double one, dp_min = 0;
    int z, m;
    FILE *f;
    train_bin = getenv("TRAIN") && *getenv("TRAIN") ? getenv("TRAIN") : "build/train";
    snprintf(dir, sizeof dir, "/tmp/par_auto_test_XXXXXX");
    if (!mkdtemp(dir)) return printf("llama_auto: 0 passed, 1 failed\n"), 1;
    snprintf(cluster, sizeof cluster, "%s/cluster.yaml", dir);
    f = fopen(cluster, "w");
    CHECK(f != NULL);
    if (!f) return TEST_END("llama_auto");
    fputs(cluster4, f);
    fclose(f);

    CHECK_INT(run("--steps 1"), 0);
    one = first_loss();
    CHECK(one > 0);

    /* the smallest memory of any pure data-parallel plan on these 4 ranks (tiny.yaml's model) */
    memset(&d, 0, sizeof d);
    d.model.layers = 2, d.model.hidden = 64, d.model.heads = 4, d.model.kv_heads = 2, d.model.ffn = 172;
    d.model.vocab = 256, d.model.seq = 64, d.model.batch = 8;
    CHECK_OK(par_cluster_parse(cluster4, &d.cluster));
    for (z = 0; z <= 2; z++)
        for (m = 1; m <= 2; m++) {
            memset(&p, 0, sizeof p);
            p.config.dp = 4, p.config.tp = p.config.cp = p.config.pp = 1, p.config.zero = z, p.config.micro_batches = m;
            CHECK_OK(par_auto_predict(&d, &p));
            if (dp_min == 0 || p.predicted.memory_bytes < dp_min) dp_min = p.predicted.memory_bytes;
        }
    CHECK(dp_min > 0);
    CHECK_INT(run("--steps 1 --set parallel.parallel_mode=auto_parallel --set parallel_config.data_parallel=4 "
                  "--set parallel.search_mode=dynamic_programming --cluster %s --max-device-memory %.0f",
                  cluster, dp_min - 1),
              0);
    CHECK_MSG(strstr(out_text, "auto_parallel (dynamic_programming) on 4 ranks") != NULL, "%s%s", out_text, err_text);
    {
        const char *c = strstr(out_text, "chose dp=");
        double mib = 0;
        const char *mm = c ? strstr(c, "s, ") : NULL;
        CHECK(c != NULL && strncmp(c, "chose dp=4 tp=1 m", 17) != 0); /* not pure data parallel */
        if (mm) mib = atof(mm + 3);
        CHECK_MSG(mm && mib * 1048576.0 <= dp_min - 1 + 0.0005 * 1048576.0, "%.4f MiB vs cap %.0f", mib, dp_min - 1);
    }
    CHECK_MSG(fabs(first_loss() - one) < 1e-5, "auto %.6f vs one device %.6f", first_loss(), one);

    /* sharding_propagation keeps the model_parallel written */
    CHECK_INT(run("--steps 1 --set parallel.parallel_mode=auto_parallel --set parallel_config.data_parallel=2 "
                  "--set parallel_config.model_parallel=2 --set parallel.search_mode=sharding_propagation "
                  "--cluster %s",
                  cluster),
              0);
    CHECK_MSG(strstr(out_text, "chose dp=2 tp=2") != NULL, "%s", out_text);
    CHECK(fabs(first_loss() - one) < 1e-5);

    /* MindFormers' enable_parallel_optimizer stays on whatever the plan, and the global
       batch stays the one the degrees as written make (batch_size 2 per rank x
       data_parallel 4 = 8, tiny.yaml's), whatever data_parallel the plan picks */
    CHECK_INT(run("--steps 1 --set parallel.parallel_mode=auto_parallel --set parallel_config.data_parallel=4 "
                  "--set parallel.enable_parallel_optimizer=true --set runner_config.global_batch_size=0 "
                  "--set runner_config.batch_size=2 --set parallel.search_mode=dynamic_programming --cluster %s",
                  cluster),
              0);
    CHECK_MSG(strstr(out_text, "ZeRO level") != NULL, "enable_parallel_optimizer dropped: %s", out_text);
    CHECK_MSG(strstr(out_text, "batch      global 8 = ") != NULL, "the global batch changed: %s", out_text);
    CHECK(fabs(first_loss() - one) < 1e-5);

    /* measured now (no --cluster), recursive_programming (the default) */
    CHECK_INT(run("--steps 1 --set parallel.parallel_mode=auto_parallel --set parallel_config.data_parallel=2"), 0);
    CHECK_MSG(strstr(out_text, "(measured now)") != NULL && strstr(out_text, "(recursive_programming)") != NULL, "%s",
              out_text);
    CHECK(fabs(first_loss() - one) < 1e-5);

    /* recomputation and mixed precision in the planner's memory model: the activations and the
       recompute area it predicts for a one-rank plan are what the trainer plans (and measures:
       test_train checks plan = peak), in f32 and in bf16 (activations in bf16, statistics f32) */
    for (int bf = 0; bf < 2; bf++) {
        static const char *const sets[3] = {"", "--set recompute_config.select_recompute=true",
                                            "--set recompute_config.recompute=true"};
        const char *dtype = bf ? "--set model.model_config.compute_dtype=bfloat16" : "";
        double planned_act[3], planned_total[3], base = 0;
        char metrics[128], line[1024];
        par_auto_desc one_rank = d;
        one_rank.cluster.devices = one_rank.cluster.devices_per_node = 1;
        one_rank.model.dtype = bf ? PAR_BF16 : PAR_F32;
        for (m = 0; m < 3; m++) {
            planned_act[m] = planned_total[m] = -1;
            snprintf(metrics, sizeof metrics, "%s/rc%d_%d.jsonl", dir, bf, m);
            CHECK_INT(run("--steps 1 %s %s --metrics %s", sets[m], dtype, metrics), 0);
            f = fopen(metrics, "r");
            while (f && fgets(line, sizeof line, f))
                if (strstr(line, "\"event\":\"memory_plan\"")) {
                    planned_act[m] = atof(strstr(line, "\"activations\":") + 14);
                    planned_total[m] = atof(strstr(line, "\"total\":") + 8);
                }
            if (f) fclose(f);
            memset(&p, 0, sizeof p);
            p.config.dp = p.config.tp = p.config.cp = p.config.pp = p.config.micro_batches = 1;
            p.config.recompute = (par_recompute_mode)m;
            CHECK_OK(par_auto_predict(&one_rank, &p));
            CHECK_MSG(p.predicted.activation_bytes == planned_act[m], "%s recompute %s: the planner predicts %.0f "
                      "activation bytes, the trainer plans %.0f", bf ? "bf16" : "f32",
                      par_recompute_mode_name((par_recompute_mode)m), p.predicted.activation_bytes, planned_act[m]);
            /* the totals differ by what only one side counts (the executor, kernel scratch bounds);
               recomputing must move both alike: the activations and the recompute area */
            if (m == 0) base = p.predicted.memory_bytes - planned_total[0];
            else CHECK_MSG(fabs(p.predicted.memory_bytes - planned_total[m] - base) < 0.5,
                           "%s recompute %s: the planner's total is %.0f bytes, the trainer's %.0f (none: %.0f apart)",
                           bf ? "bf16" : "f32", par_recompute_mode_name((par_recompute_mode)m), p.predicted.memory_bytes,
                           planned_total[m], base);
        }
    }

    /* the pipeline's boundary buffers: the trainer allocates a set (input, output and their gradients
       of each chunk) per micro-batch in flight, reused by later micro-batches, in the compute type; the
       planner predicts exactly those bytes (the runs have tp 1: the comm category holds nothing else) */
    {
        static const struct {
            const char *sets;
            par_pp_kind kind;
            int pp, chunks, m, layers, bf16;
        } runs[] = {
            {"", PAR_PP_1F1B, 2, 1, 8, 2, 0},
            {"--set parallel.pipeline_config.pipeline_scheduler=gpipe", PAR_PP_GPIPE, 2, 1, 4, 2, 0},
            {"", PAR_PP_1F1B, 4, 1, 8, 4, 1},
            {"--set parallel.pipeline_config.pipeline_interleave=true --set model.model_config.pp_interleave_num=2",
             PAR_PP_INTERLEAVED, 2, 2, 8, 4, 0},
            {"--set parallel.pipeline_config.pipeline_interleave=true --set model.model_config.pp_interleave_num=2 "
             "--set parallel.pipeline_config.pipeline_scheduler=zb1p",
             PAR_PP_ZB1P, 2, 2, 8, 4, 0},
            {"--set parallel.pipeline_config.pipeline_interleave=true --set model.model_config.pp_interleave_num=2 "
             "--set parallel.pipeline_config.pipeline_scheduler=looped_bfs",
             PAR_PP_LOOPED_BFS, 2, 2, 8, 4, 1},
        };
        for (int r = 0; r < (int)(sizeof runs / sizeof runs[0]); r++) {
            char metrics[128], line[1024];
            double planned_comm = -1;
            const double per_set = (double)runs[r].chunks * 4 * (8.0 / runs[r].m * 64) * 64 * (runs[r].bf16 ? 2 : 4);
            par_auto_desc pd = d;
            snprintf(metrics, sizeof metrics, "%s/pp%d.jsonl", dir, r);
            CHECK_INT(run("--steps 1 --set parallel_config.pipeline_stage=%d --set parallel_config.micro_batch_num=%d "
                          "--set model.model_config.num_layers=%d %s %s --metrics %s",
                          runs[r].pp, runs[r].m, runs[r].layers, runs[r].sets,
                          runs[r].bf16 ? "--set model.model_config.compute_dtype=bfloat16" : "", metrics),
                      0);
            f = fopen(metrics, "r");
            while (f && fgets(line, sizeof line, f))
                if (strstr(line, "\"event\":\"memory_plan\"")) planned_comm = atof(strstr(line, "\"comm\":") + 7);
            if (f) fclose(f);
            pd.cluster.devices = pd.cluster.devices_per_node = runs[r].pp;
            pd.model.layers = runs[r].layers;
            memset(&p, 0, sizeof p);
            p.config.dp = p.config.tp = p.config.cp = 1, p.config.pp = runs[r].pp;
            p.config.schedule = runs[r].kind, p.config.chunks = runs[r].chunks, p.config.micro_batches = runs[r].m;
            p.config.dtype = runs[r].bf16 ? PAR_BF16 : PAR_F32;
            CHECK_OK(par_auto_predict(&pd, &p));
            CHECK_MSG(p.predicted.boundary_bytes == planned_comm && planned_comm > 0,
                      "%s pp %d m %d: the planner predicts %.0f boundary bytes, the trainer plans %.0f",
                      par_pp_kind_name(runs[r].kind), runs[r].pp, runs[r].m, p.predicted.boundary_bytes, planned_comm);
            /* a set per micro-batch in flight (1F1B: p on the first stage; GPipe: every one), not per micro-batch */
            CHECK_MSG(planned_comm == (runs[r].kind == PAR_PP_GPIPE ? runs[r].m : runs[r].pp) * per_set ||
                          runs[r].chunks > 1,
                      "%s: %.0f bytes planned, %.0f a set", par_pp_kind_name(runs[r].kind), planned_comm, per_set);
            /* but GPipe and looped BFS, which run every forward before the first backward */
            if (runs[r].kind != PAR_PP_GPIPE && runs[r].kind != PAR_PP_LOOPED_BFS) CHECK(planned_comm < runs[r].m * per_set);
        }
    }

    /* bad input */
    CHECK_INT(run("--steps 1 --set parallel.parallel_mode=auto_parallel --set parallel_config.data_parallel=2 "
                  "--cluster %s",
                  cluster),
              2);
    CHECK_MSG(strstr(err_text, "describes 4 devices but this run has 2 ranks") != NULL, "%s", err_text);
    CHECK_INT(run("--steps 1 --set parallel.parallel_mode=auto_parallel --set parallel_config.data_parallel=4 "
                  "--cluster %s --max-device-memory 1000",
                  cluster),
              2);
    CHECK_MSG(strstr(err_text, "no plan fits the memory cap") && strstr(err_text, "the smallest plan needs"), "%s",
              err_text);
    CHECK_INT(run("--steps 1 --set parallel.parallel_mode=auto_parallel --max-device-memory lots"), 2);
    CHECK_MSG(strstr(err_text, "--max-device-memory lots: not a size") != NULL, "%s", err_text);
    CHECK_INT(run("--steps 1 --cluster %s", cluster), 2);
    CHECK_MSG(strstr(err_text, "--cluster is for parallel.parallel_mode auto_parallel") != NULL, "%s", err_text);
    f = fopen(cluster, "w");
    if (f) fputs("devices: 4\nintra_node_bandwidth: -5\nmemory_per_device: 1Gi\nflops_per_device: 1G\n", f), fclose(f);
    CHECK_INT(run("--steps 1 --set parallel.parallel_mode=auto_parallel --set parallel_config.data_parallel=4 "
                  "--cluster %s",
                  cluster),
              2);
    snprintf(want, sizeof want, "--cluster %s: cluster: intra_node_bandwidth is -5", cluster);
    CHECK_MSG(strstr(err_text, want) != NULL, "%s", err_text);

    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
    return TEST_END("llama_auto");
}
