/* bench/bench_attention.h - CPU flash attention (the CPU compute table's
   attention_fwd / attention_bwd) against a naive materialized-softmax attention.
   Included by bench/bench_kernels.c after parallel.h with PARALLEL_IMPLEMENTATION;
   defines static int bench_attention(int argc, char **argv) (0 = success).

   Problem: batch 1, 8 heads, head_dim 64, q_len = k_len = S, f32, one thread;
   S = 512, 1024, 2048, 4096 (--quick: 256, 512; --attn-S=N: only N, a multiple
   of 128), causal and not.
   naive: per head S = scale Q K^T as ONE S x S GEMM (par__cpu_sgemm, the same
   GEMM the flash tiles use), mask, row softmax with the same vectorized exp/max
   row kernels, O = P V (GEMM); P of every head is kept for the backward (as a
   framework keeps the activation), which is dV = P^T dO, dP = dO V^T,
   dS = P (dP - D), dQ = scale dS K, dK = scale dS^T Q: 4 GEMMs, no recompute.
   Flash does 5 GEMMs in the backward (it recomputes S) but skips key tiles that
   causality hides; naive computes the full S x S.
   peak_bytes: naive = the P of all heads + one S x S dS scratch (what it
   allocates beyond inputs and outputs); flash = the library's own allocations
   during fwd+bwd when the includer counts them (define BENCH_ATTN_PEAK() to
   return the peak bytes since BENCH_ATTN_PEAK_RESET()), else the workspace size
   from the tile constants (-1 marks "not measured"). Times are medians. */

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Wall time; --attn-cpu-time switches to process CPU time (clock()), steadier on a
   shared, oversubscribed machine since everything here runs on one thread. */
static int battn_use_cpu_time;
static double battn_now(void) {
    struct timespec ts;
    if (battn_use_cpu_time) return (double)clock() / CLOCKS_PER_SEC;
    timespec_get(&ts, TIME_UTC);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int battn_cmp(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double battn_median(double *t, int n) {
    qsort(t, (size_t)n, sizeof *t, battn_cmp);
    return n % 2 ? t[n / 2] : 0.5 * (t[n / 2 - 1] + t[n / 2]);
}

typedef struct battn_prob {
    int64_t S;
    int H, D, causal;
    float scale;
    float *q, *k, *v, *o, *lse, *dO, *dq, *dk, *dv;
} battn_prob;

/* Naive forward: P [H][S][S] holds the probabilities afterwards. */
static void battn_naive_fwd(const battn_prob *p, float *P, int isa) {
    const int64_t S = p->S, ld = (int64_t)p->H * p->D;
    int h;
    for (h = 0; h < p->H; h++) {
        float *Ph = P + (int64_t)h * S * S;
        int64_t i, j;
        par__cpu_sgemm(0, 1, S, S, p->D, p->scale, p->q + h * p->D, ld, p->k + h * p->D, ld, 0.0f, Ph, S);
        for (i = 0; i < S; i++) {
            float *row = Ph + i * S, mx = -INFINITY, sum = 0.0f, inv;
            if (p->causal)
                for (j = i + 1; j < S; j++) row[j] = -INFINITY;
            for (j = 0; j < S; j += PAR__ATTN_BK) {
                const float m = par__attn_max(isa, row + j, PAR__ATTN_BK);
                mx = m > mx ? m : mx;
            }
            for (j = 0; j < S; j += PAR__ATTN_BK) sum += par__attn_exp_sum(isa, row + j, mx, PAR__ATTN_BK);
            inv = 1.0f / sum;
            for (j = 0; j < S; j++) row[j] *= inv;
            p->lse[h * S + i] = mx + logf(sum);
        }
        par__cpu_sgemm(0, 0, S, p->D, S, 1.0f, Ph, S, p->v + h * p->D, ld, 0.0f, p->o + h * p->D, ld);
    }
}

/* Naive backward from the stored P; dS is an S x S scratch. */
static void battn_naive_bwd(const battn_prob *p, const float *P, float *dS, int isa) {
    const int64_t S = p->S, ld = (int64_t)p->H * p->D;
    int h;
    for (h = 0; h < p->H; h++) {
        const float *Ph = P + (int64_t)h * S * S;
        const int64_t off = (int64_t)h * p->D;
        int64_t i, j;
        par__cpu_sgemm(1, 0, S, p->D, S, 1.0f, Ph, S, p->dO + off, ld, 0.0f, p->dv + off, ld);
        par__cpu_sgemm(0, 1, S, S, p->D, 1.0f, p->dO + off, ld, p->v + off, ld, 0.0f, dS, S);
        for (i = 0; i < S; i++) {
            const float *oi = p->o + i * ld + off, *doi = p->dO + i * ld + off;
            float di = 0.0f;
            int c;
            for (c = 0; c < p->D; c++) di += oi[c] * doi[c];
            for (j = 0; j < S; j += PAR__ATTN_BK) par__attn_ds(isa, dS + i * S + j, Ph + i * S + j, di, PAR__ATTN_BK);
        }
        par__cpu_sgemm(0, 0, S, p->D, S, p->scale, dS, S, p->k + off, ld, 0.0f, p->dq + off, ld);
        par__cpu_sgemm(1, 0, S, p->D, S, p->scale, dS, S, p->q + off, ld, 0.0f, p->dk + off, ld);
    }
}

static float *battn_alloc(int64_t n, int fill) {
    float *x = (float *)malloc((size_t)n * sizeof(float));
    int64_t i;
    uint64_t s = 0x9E3779B97F4A7C15ull + (uint64_t)n;
    if (!x) return NULL;
    for (i = 0; i < n; i++) {
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        x[i] = fill ? (float)((double)(s >> 11) / 9007199254740992.0 * 2.0 - 1.0) : 0.0f;
    }
    return x;
}

static int bench_attention(int argc, char **argv) {
    static const int64_t full[] = {512, 1024, 2048, 4096}, quick_sizes[] = {256, 512};
    const int64_t *sizes = full;
    int nsizes = 4, quick = 0, i, si, causal, isa = par__attn_isa(), rc = 0;
    par_compute_table t;
    par_cpu_desc cd;
    int64_t one[1];
    for (i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--quick") == 0) quick = 1;
        if (strcmp(argv[i], "--attn-cpu-time") == 0) battn_use_cpu_time = 1;
        if (strncmp(argv[i], "--attn-S=", 9) == 0) one[0] = strtoll(argv[i] + 9, NULL, 10);
    }
    if (quick) sizes = quick_sizes, nsizes = 2;
    for (i = 1; i < argc; i++)
        if (strncmp(argv[i], "--attn-S=", 9) == 0 && one[0] >= PAR__ATTN_BK && one[0] % PAR__ATTN_BK == 0)
            sizes = one, nsizes = 1;
    memset(&cd, 0, sizeof cd);
    cd.threads = 1;
    if (par_compute_cpu(&cd, &t) != PAR_OK) {
        fprintf(stderr, "bench_attention: par_compute_cpu: %s\n", par_last_error());
        return 1;
    }
    printf("\nattention, batch 1, 8 heads, head_dim 64, f32, 1 thread (row kernels: %s; %s time)\n",
           isa ? "avx512" : "portable", battn_use_cpu_time ? "cpu" : "wall");
    printf("%6s %6s %6s %10s %10s %10s %14s %10s\n", "S", "causal", "impl", "fwd_ms", "bwd_ms", "fwdbwd_ms",
           "peak_bytes", "max|diff|");
    for (si = 0; si < nsizes && rc == 0; si++)
        for (causal = 0; causal < 2 && rc == 0; causal++) {
            battn_prob p;
            par_attn_desc d;
            const int64_t S = sizes[si], n = S * 8 * 64;
            const int reps = S <= 1024 ? 5 : 3;
            double tf[2][8], tb[2][8], tt[2][8], diff = 0.0;
            long long peak[2];
            float *P, *dS, *o_ref, *dq_ref;
            int impl, r;
            memset(&p, 0, sizeof p);
            p.S = S, p.H = 8, p.D = 64, p.causal = causal;
            p.scale = (float)(1.0 / sqrt(64.0));
            p.q = battn_alloc(n, 1), p.k = battn_alloc(n, 1), p.v = battn_alloc(n, 1), p.dO = battn_alloc(n, 1);
            p.o = battn_alloc(n, 0), p.lse = battn_alloc(S * 8, 0);
            p.dq = battn_alloc(n, 0), p.dk = battn_alloc(n, 0), p.dv = battn_alloc(n, 0);
            o_ref = battn_alloc(n, 0), dq_ref = battn_alloc(n, 0);
            P = (float *)malloc((size_t)(8 * S * S) * sizeof(float));
            dS = (float *)malloc((size_t)(S * S) * sizeof(float));
            if (!p.q || !p.k || !p.v || !p.dO || !p.o || !p.lse || !p.dq || !p.dk || !p.dv || !o_ref || !dq_ref ||
                !P || !dS) {
                fprintf(stderr, "bench_attention: out of memory at S=%lld\n", (long long)S);
                rc = 1;
            }
            memset(&d, 0, sizeof d);
            d.batch = 1, d.q_heads = d.kv_heads = 8, d.head_dim = 64, d.q_len = d.k_len = S, d.causal = causal;
            peak[0] = (long long)(9 * S * S) * (long long)sizeof(float);
            peak[1] = -1;
            for (impl = 0; impl < 2 && rc == 0; impl++) {
                for (r = 0; r <= reps && rc == 0; r++) { /* r = 0 is the warm-up */
                    double t0, t1, t2;
#ifdef BENCH_ATTN_PEAK_RESET
                    if (impl == 1) BENCH_ATTN_PEAK_RESET();
#endif
                    t0 = battn_now();
                    if (impl == 0)
                        battn_naive_fwd(&p, P, isa);
                    else if (t.attention_fwd(t.user, &d, p.q, p.k, p.v, p.o, p.lse) != PAR_OK)
                        rc = 1;
                    t1 = battn_now();
                    if (impl == 0)
                        battn_naive_bwd(&p, P, dS, isa);
                    else if (t.attention_bwd(t.user, &d, p.q, p.k, p.v, p.o, p.lse, p.dO, p.dq, p.dk, p.dv, 0) !=
                             PAR_OK)
                        rc = 1;
                    t2 = battn_now();
#ifdef BENCH_ATTN_PEAK
                    if (impl == 1) peak[1] = (long long)BENCH_ATTN_PEAK();
#endif
                    if (r > 0) tf[impl][r - 1] = t1 - t0, tb[impl][r - 1] = t2 - t1, tt[impl][r - 1] = t2 - t0;
                }
                if (rc) fprintf(stderr, "bench_attention: flash failed: %s\n", par_last_error());
                if (impl == 0) {
                    memcpy(o_ref, p.o, (size_t)n * sizeof(float));
                    memcpy(dq_ref, p.dq, (size_t)n * sizeof(float));
                } else {
                    int64_t e;
                    for (e = 0; e < n; e++) {
                        const double a = fabs((double)p.o[e] - o_ref[e]), b = fabs((double)p.dq[e] - dq_ref[e]);
                        diff = a > diff ? a : diff;
                        diff = b > diff ? b : diff;
                    }
                }
            }
#ifndef BENCH_ATTN_PEAK
            /* not measured here: the workspace the kernels allocate, from the tile constants */
            peak[1] = (long long)(sizeof(int64_t) * PAR__ATTN_BK +
                                  sizeof(float) * (2 * PAR__ATTN_BQ * PAR__ATTN_BK + PAR__ATTN_BQ * 64 + 2 * PAR__ATTN_BQ));
#endif
            for (impl = 0; impl < 2 && rc == 0; impl++) {
                const char *name = impl ? "flash" : "naive";
                const double f = 1e3 * battn_median(tf[impl], reps), b = 1e3 * battn_median(tb[impl], reps);
                const double fb = 1e3 * battn_median(tt[impl], reps);
                printf("%6lld %6d %6s %10.1f %10.1f %10.1f %14lld %10.2g\n", (long long)S, causal, name, f, b, fb,
                       peak[impl], impl ? diff : 0.0);
                printf("{\"bench\":\"attention\",\"impl\":\"%s\",\"S\":%lld,\"heads\":8,\"head_dim\":64,\"causal\":%d,"
                       "\"fwd_ms\":%.2f,\"bwd_ms\":%.2f,\"fwdbwd_ms\":%.2f,\"peak_bytes\":%lld}\n",
                       name, (long long)S, causal, f, b, fb, peak[impl]);
            }
            if (rc == 0 && !(diff < 1e-3)) {
                fprintf(stderr, "bench_attention: flash and naive differ by %g at S=%lld\n", diff, (long long)S);
                rc = 1;
            }
            fflush(stdout);
            free(p.q), free(p.k), free(p.v), free(p.dO), free(p.o), free(p.lse), free(p.dq), free(p.dk), free(p.dv);
            free(o_ref), free(dq_ref), free(P), free(dS);
        }
    t.destroy(t.user);
    return rc;
}
