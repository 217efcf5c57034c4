/* bench/bench_cp.c - context parallel (parallel.h >>context-parallel) on this machine.

   1. balance: per-rank causal attention work at cp 4, S = 8192 (1 sample, 4 q
      heads, 2 kv heads, head dim 64). Each rank's ring blocks (its queries
      against every ring rank's keys, forward and backward, through the CPU
      table's flash kernels with the ranks' real positions) are timed one rank
      after the other on one thread, so ranks do not steal each other's cores;
      median of 3 timings per rank; max / mean over the ranks, zigzag beside
      contiguous.
   2. overlap: the ring itself at cp 4 on threads (4 ranks, S = 8192), forward
      and backward with a trace per rank: the share of K/V (and dK/dV) transfer
      time hidden behind compute = 1 - exposed / in flight of the "p2p" spans,
      hidden by the "compute" spans (par_trace_coverage), per rank.
   3. memory: build/train's start-up plan and measured peak of activations per
      rank for cp 1, 2, 4, 8 at seq 2048 (ratio to cp 1 against 1/cp).
   4. long sequence: S = 32768 trains at cp 8 on threads (1 layer, 2 steps);
      the memory plan of cp 1 and cp 8 against a cap of CAP_MIB per rank.
   Parts 3-4 need build/train (libyaml). Prints a table and JSON lines
   {"bench":"cp",...}. Usage: build/bench_cp [parts, e.g. 12 or 34; default 1234] */
#define _DEFAULT_SOURCE
#include "../parallel.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define SEQ 8192
#define CP 4
#define HEADS 4
#define KV 2
#define HD 64
#define CAP_MIB 512.0

/* Return a failing status of `call` (the implementation's PAR__CHECK is private). */
#define BENCH_TRY(call) do { par_status t_ = (call); if (t_ != PAR_OK) return t_; } while (0)

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void fill(float *x, int64_t n, uint64_t seed) {
    int64_t i;
    for (i = 0; i < n; i++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        x[i] = (float)((double)(seed >> 11) / 9007199254740992.0 - 0.5);
    }
}

/* ---- 1. balance ----------------------------------------------------------------- */

typedef struct balance_run {
    int contiguous;
    double rank_s[CP]; /* median seconds of each rank's blocks */
    int ok;
} balance_run;

/* Rank 0 times every rank's blocks in turn; the others wait at the barrier. */
static par_status balance_body(par_ctx *ctx, void *arg) {
    balance_run *b = (balance_run *)arg;
    const par_compute_table *ct = par_ctx_compute(ctx);
    const int64_t shape[2] = {CP, SEQ}, S = SEQ / CP, n = S * HEADS * HD, kn = S * KV * HD;
    par_layout tokens;
    par_cp_desc d;
    par_cp *cp = NULL;
    par_status st;
    int64_t *pos = NULL;
    float *q = NULL, *k = NULL, *v = NULL, *o = NULL, *lse = NULL, *ob = NULL, *lb = NULL, *dq = NULL, *dk = NULL,
          *dv = NULL, *dout = NULL;
    int r, src, rep;
    BENCH_TRY(par_layout_parse(&tokens, par_ctx_mesh(ctx), 2, shape, "[None,cp]"));
    memset(&d, 0, sizeof d);
    d.tokens = &tokens, d.algo = PAR_CP_RING, d.contiguous = b->contiguous;
    d.batch = 1, d.heads = HEADS, d.kv_heads = KV, d.head_dim = HD;
    BENCH_TRY(par_cp_create(ctx, &d, &cp));
    st = par_barrier(ctx, NULL);
    if (st == PAR_OK && par_ctx_rank(ctx) == 0) {
        pos = (int64_t *)malloc(sizeof(int64_t) * (size_t)SEQ);
        q = (float *)calloc((size_t)(5 * n + 4 * kn * CP + 2 * S * HEADS), sizeof(float));
        if (!pos || !q) st = PAR_ENOMEM;
        for (r = 0; r < CP && st == PAR_OK; r++) st = par_cp_positions_of(cp, r, pos + r * S);
        if (st == PAR_OK) { /* q o ob dout dq | k v dk dv of every rank | lse lb */
            o = q + n, ob = o + n, dout = ob + n, dq = dout + n, k = dq + n, v = k + kn * CP, dk = v + kn * CP;
            dv = dk + kn * CP, lse = dv + kn * CP, lb = lse + S * HEADS;
            fill(q, n, 1), fill(k, kn * CP, 2), fill(v, kn * CP, 3), fill(dout, n, 4);
        }
        for (r = 0; r < CP && st == PAR_OK; r++) {
            double t[3];
            for (rep = 0; rep < 3 && st == PAR_OK; rep++) {
                const double t0 = now_s();
                for (src = 0; src < CP && st == PAR_OK; src++) { /* forward: its queries over every rank's keys */
                    par_attn_desc a;
                    memset(&a, 0, sizeof a);
                    a.batch = 1, a.q_heads = HEADS, a.kv_heads = KV, a.head_dim = HD, a.q_len = a.k_len = S;
                    a.causal = 1, a.dtype = PAR_F32, a.q_pos = pos + r * S, a.k_pos = pos + src * S;
                    st = ct->attention_fwd(ct->user, &a, q, k + src * kn, v + src * kn, src ? ob : o, src ? lb : lse);
                    if (st == PAR_OK && src) st = ct->attention_merge(ct->user, &a, o, lse, ob, lb);
                }
                for (src = 0; src < CP && st == PAR_OK; src++) { /* backward with the merged o and lse */
                    par_attn_desc a;
                    memset(&a, 0, sizeof a);
                    a.batch = 1, a.q_heads = HEADS, a.kv_heads = KV, a.head_dim = HD, a.q_len = a.k_len = S;
                    a.causal = 1, a.dtype = PAR_F32, a.q_pos = pos + r * S, a.k_pos = pos + src * S;
                    st = ct->attention_bwd(ct->user, &a, q, k + src * kn, v + src * kn, o, lse, dout, dq, dk + src * kn,
                                           dv + src * kn, 1);
                }
                t[rep] = now_s() - t0;
            }
            qsort(t, 3, sizeof(double), cmp_double);
            b->rank_s[r] = t[1];
        }
        b->ok = st == PAR_OK;
        free(q), free(pos);
    }
    if (st == PAR_OK) st = par_barrier(ctx, NULL);
    par_cp_destroy(cp);
    return st;
}

/* ---- 2. overlap ------------------------------------------------------------------ */

typedef struct overlap_run {
    double hidden[CP], in_flight_s[CP], exposed_s[CP], step_s;
    int ok[CP];
} overlap_run;

static par_status overlap_body(par_ctx *ctx, void *arg) {
    overlap_run *w = (overlap_run *)arg;
    const int rank = par_ctx_rank(ctx);
    const int64_t shape[2] = {CP, SEQ}, S = SEQ / CP, n = S * HEADS * HD, kn = S * KV * HD;
    static const char *const hidden_by[1] = {"compute"};
    par_layout tokens;
    par_cp_desc d;
    par_cp *cp = NULL;
    par_trace *tr = NULL;
    par_trace_desc td;
    par_status st;
    float *buf;
    double t0, t1, busy = 0, exposed = 0;
    memset(&td, 0, sizeof td);
    td.rank = rank;
    BENCH_TRY(par_trace_create(&td, &tr));
    BENCH_TRY(par_layout_parse(&tokens, par_ctx_mesh(ctx), 2, shape, "[None,cp]"));
    memset(&d, 0, sizeof d);
    d.tokens = &tokens, d.algo = PAR_CP_RING, d.batch = 1, d.heads = HEADS, d.kv_heads = KV, d.head_dim = HD;
    d.trace = tr;
    st = par_cp_create(ctx, &d, &cp);
    buf = (float *)calloc((size_t)(4 * n + 4 * kn + S * HEADS), sizeof(float));
    if (st == PAR_OK && !buf) st = PAR_ENOMEM;
    if (st == PAR_OK) {
        float *q = buf, *o = q + n, *dout = o + n, *dq = dout + n, *k = dq + n, *v = k + kn, *dk = v + kn, *dv = dk + kn;
        float *lse = dv + kn;
        fill(q, n, 10 + (uint64_t)rank), fill(k, kn, 20 + (uint64_t)rank), fill(v, kn, 30 + (uint64_t)rank);
        fill(dout, n, 40 + (uint64_t)rank);
        st = par_barrier(ctx, NULL);
        t0 = par_trace_now_us();
        if (st == PAR_OK) st = par_cp_attention_fwd(cp, q, k, v, o, lse, NULL);
        if (st == PAR_OK) st = par_cp_attention_bwd(cp, q, k, v, o, lse, NULL, dout, dq, dk, dv);
        t1 = par_trace_now_us();
        if (st == PAR_OK) st = par_trace_coverage(tr, "p2p", hidden_by, 1, t0, t1, &busy, &exposed);
        if (st == PAR_OK && rank < CP) {
            w->in_flight_s[rank] = busy * 1e-6, w->exposed_s[rank] = exposed * 1e-6;
            w->hidden[rank] = busy > 0 ? 1.0 - exposed / busy : 0.0, w->ok[rank] = 1;
            if (rank == 0) w->step_s = (t1 - t0) * 1e-6;
        }
    }
    free(buf);
    par_cp_destroy(cp);
    par_trace_destroy(tr);
    return st;
}

/* ---- 3-4. the trainer --------------------------------------------------------------- */

/* One number of a "memory_plan"/"memory_peak" line of a metrics file (-1 if absent). */
static double read_memory(const char *path, const char *event, const char *category) {
    FILE *f = fopen(path, "r");
    char line[2048], ev[64], key[64];
    double v = -1;
    if (!f) return -1;
    snprintf(ev, sizeof ev, "\"event\":\"%s\"", event);
    snprintf(key, sizeof key, "\"%s\":", category);
    while (fgets(line, sizeof line, f))
        if (strstr(line, ev) && strstr(line, key)) v = strtod(strstr(line, key) + strlen(key), NULL);
    fclose(f);
    return v;
}

static int last_loss(const char *path, double *first, double *last) {
    FILE *f = fopen(path, "r");
    char line[2048];
    int n = 0;
    if (!f) return 0;
    while (fgets(line, sizeof line, f)) {
        const char *l = strstr(line, "\"loss\":");
        if (!l || !strstr(line, "\"step\":")) continue;
        if (!n) *first = strtod(l + 7, NULL);
        *last = strtod(l + 7, NULL), n++;
    }
    fclose(f);
    return n;
}

static const char *mem_model = "--config examples/configs/bench.yaml --data parallel.h --quiet "
                               "--set model.model_config.num_layers=2 --set model.model_config.n_kv_heads=2 "
                               "--set runner_config.global_batch_size=1 --set model.model_config.seq_length=2048";

int main(int argc, char **argv) {
    const char *parts = argc > 1 ? argv[1] : "1234";
    par_ctx_desc pd;
    char mesh[32];
    int i;
    snprintf(mesh, sizeof mesh, "cp=%d", CP);
    memset(&pd, 0, sizeof pd);
    pd.mesh = mesh, pd.kernel_threads = 1, pd.timeout_ms = 600000;
    printf("context parallel: cp %d, S = %d, 1 sample, %d q heads, %d kv heads, head dim %d (one rank's heads)\n", CP,
           SEQ, HEADS, KV, HD);
    if (strchr(parts, '1')) {
        balance_run zig, con;
        double mz = 0, sz = 0, mc = 0, sc = 0;
        memset(&zig, 0, sizeof zig), memset(&con, 0, sizeof con);
        con.contiguous = 1;
        if (par_run_threads_desc(&pd, CP, balance_body, &zig) != PAR_OK || !zig.ok ||
            par_run_threads_desc(&pd, CP, balance_body, &con) != PAR_OK || !con.ok)
            return fprintf(stderr, "bench_cp: balance failed: %s\n", par_last_error()), 1;
        printf("1. causal attention work per rank (fwd + bwd over its ring blocks, one thread, median of 3), s:\n");
        printf("   %-12s", "order");
        for (i = 0; i < CP; i++) printf("   rank %d", i);
        printf("   max/mean\n");
        for (i = 0; i < CP; i++) mz = zig.rank_s[i] > mz ? zig.rank_s[i] : mz, sz += zig.rank_s[i];
        for (i = 0; i < CP; i++) mc = con.rank_s[i] > mc ? con.rank_s[i] : mc, sc += con.rank_s[i];
        printf("   %-12s", "zigzag");
        for (i = 0; i < CP; i++) printf(" %8.3f", zig.rank_s[i]);
        printf("   %8.3f (target <= 1.10)\n", mz / (sz / CP));
        printf("   %-12s", "contiguous");
        for (i = 0; i < CP; i++) printf(" %8.3f", con.rank_s[i]);
        printf("   %8.3f\n", mc / (sc / CP));
        printf("{\"bench\":\"cp\",\"part\":\"balance\",\"cp\":%d,\"seq\":%d,\"zigzag_max_over_mean\":%.4f,"
               "\"contiguous_max_over_mean\":%.4f}\n",
               CP, SEQ, mz / (sz / CP), mc / (sc / CP));
    }
    if (strchr(parts, '2')) {
        overlap_run w;
        double lo = 1.0, mean = 0;
        memset(&w, 0, sizeof w);
        if (par_run_threads_desc(&pd, CP, overlap_body, &w) != PAR_OK)
            return fprintf(stderr, "bench_cp: overlap failed: %s\n", par_last_error()), 1;
        printf("2. ring at cp %d on threads (%d rank threads on this machine's cores), fwd + bwd %.2f s:\n", CP, CP,
               w.step_s);
        printf("   %-6s %14s %12s %8s\n", "rank", "in flight s", "exposed s", "hidden");
        for (i = 0; i < CP; i++) {
            printf("   %-6d %14.4f %12.4f %7.1f%%\n", i, w.in_flight_s[i], w.exposed_s[i], 100.0 * w.hidden[i]);
            lo = w.hidden[i] < lo ? w.hidden[i] : lo, mean += w.hidden[i] / CP;
        }
        printf("   share of K/V transfer time hidden behind compute: min %.1f%%, mean %.1f%% (target >= 80%%)\n",
               100.0 * lo, 100.0 * mean);
        printf("{\"bench\":\"cp\",\"part\":\"overlap\",\"cp\":%d,\"seq\":%d,\"hidden_min\":%.4f,\"hidden_mean\":%.4f}\n", CP,
               SEQ, lo, mean);
    }
    if ((strchr(parts, '3') || strchr(parts, '4')) && access("build/train", X_OK) != 0) {
        printf("3-4. skipped: build/train is missing (make build/train; needs libyaml)\n");
        return 0;
    }
    if (strchr(parts, '3')) {
        double act[4], plan[4];
        char cmd[2048];
        printf("3. activations per rank (build/train, bench model with 2 layers, 2 kv heads, seq 2048, 1 sample):\n");
        printf("   %-4s %14s %14s %12s %10s\n", "cp", "planned MiB", "measured MiB", "cp1/cp", "want");
        for (i = 0; i < 4; i++) {
            snprintf(cmd, sizeof cmd, "build/train %s --steps 1 --set parallel_config.context_parallel=%d "
                     "--metrics build/bench_cp.jsonl >/dev/null", mem_model, 1 << i);
            if (system(cmd) != 0) return fprintf(stderr, "bench_cp: %s failed\n", cmd), 1;
            plan[i] = read_memory("build/bench_cp.jsonl", "memory_plan", "activations");
            act[i] = read_memory("build/bench_cp.jsonl", "memory_peak", "activations");
            printf("   %-4d %14.2f %14.2f %12.3f %10d%s\n", 1 << i, plan[i] / 1048576.0, act[i] / 1048576.0,
                   act[0] / act[i], 1 << i, plan[i] == act[i] ? "  (plan = measured)" : "  (plan != measured)");
            printf("{\"bench\":\"cp\",\"part\":\"memory\",\"cp\":%d,\"activations_planned\":%.0f,"
                   "\"activations_measured\":%.0f}\n", 1 << i, plan[i], act[i]);
        }
    }
    if (strchr(parts, '4')) {
        static const char *longseq = "--config examples/configs/bench.yaml --data parallel.h --quiet "
                                     "--set model.model_config.num_layers=1 --set model.model_config.num_heads=4 "
                                     "--set model.model_config.n_kv_heads=2 --set runner_config.global_batch_size=1 "
                                     "--set model.model_config.seq_length=32768";
        char cmd[2048];
        double tot1 = 0, tot8 = 0, first = 0, last = 0, t0;
        const char *cats[] = {"params", "grads", "optimizer", "activations", "comm", "workspace"};
        int c, steps;
        snprintf(cmd, sizeof cmd, "build/train %s --steps 0 --metrics build/bench_cp.jsonl >/dev/null", longseq);
        if (system(cmd) != 0) return fprintf(stderr, "bench_cp: %s failed\n", cmd), 1;
        for (c = 0; c < 6; c++) tot1 += read_memory("build/bench_cp.jsonl", "memory_plan", cats[c]);
        snprintf(cmd, sizeof cmd, "build/train %s --steps 2 --set parallel_config.context_parallel=8 "
                 "--metrics build/bench_cp.jsonl >/dev/null", longseq);
        t0 = now_s();
        if (system(cmd) != 0) return fprintf(stderr, "bench_cp: %s failed\n", cmd), 1;
        t0 = now_s() - t0;
        for (c = 0; c < 6; c++) tot8 += read_memory("build/bench_cp.jsonl", "memory_plan", cats[c]);
        steps = last_loss("build/bench_cp.jsonl", &first, &last);
        printf("4. S = 32768 (bench model, 1 layer, 4 heads, 2 kv heads, 1 sample), cap %.0f MiB per rank:\n", CAP_MIB);
        printf("   cp 1: memory plan %.1f MiB per rank%s\n", tot1 / 1048576.0,
               tot1 / 1048576.0 > CAP_MIB ? " -- over the cap" : " -- under the cap");
        printf("   cp 8: memory plan %.1f MiB per rank%s; trained %d steps in %.1f s (8 rank threads), loss %.4f -> %.4f\n",
               tot8 / 1048576.0, tot8 / 1048576.0 > CAP_MIB ? " -- over the cap" : " -- under the cap", steps, t0,
               first, last);
        printf("{\"bench\":\"cp\",\"part\":\"long\",\"seq\":32768,\"cap_mib\":%.0f,\"cp1_plan_mib\":%.1f,"
               "\"cp8_plan_mib\":%.1f,\"cp8_steps\":%d,\"cp8_seconds\":%.1f}\n",
               CAP_MIB, tot1 / 1048576.0, tot8 / 1048576.0, steps, t0);
    }
    return 0;
}
