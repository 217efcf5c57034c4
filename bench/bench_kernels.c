/* bench_kernels.c - CPU compute kernels: GEMM GFLOP/s of the built-in kernel
   (par_compute_cpu's table) against OpenBLAS in the SAME binary, then the
   attention section (bench/bench_attention.h).

   GEMM: C = A B (NN, f32, beta = 0) at m = n = k = 256, 512, 1024, 2048; median
   of several repetitions after a warm-up. Both sides run on ONE core (table
   threads = 1, openblas_set_num_threads(1)), so it is a per-core comparison; a
   second built-in row with threads = 2 shows the pool. Prints a table, one JSON
   line per measurement, and the builtin/OpenBLAS ratio at 1024.

   Build (the library itself WITHOUT PARALLEL_WITH_CBLAS; OpenBLAS only for the
   reference):
     cc -std=c11 -O2 -DNDEBUG -I. bench/bench_kernels.c -o build/bench_kernels -lm -lpthread
     cc -std=c11 -O2 -DNDEBUG -DBENCH_HAVE_CBLAS -I. bench/bench_kernels.c \
        -o build/bench_kernels -lopenblas -lm -lpthread
   Run: build/bench_kernels [--quick]   (--quick: small sizes, for CI smoke) */
#define _POSIX_C_SOURCE 199309L
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

/* Every host allocation of the library is counted (16-byte size header), so the
   attention section reports MEASURED peak bytes of flash fwd+bwd (its tile
   workspace and GEMM packing), not an estimate. Single-threaded use only. */
static size_t bench_heap_now, bench_heap_peak;
static void *bench_malloc(size_t n) {
    size_t *p = (size_t *)malloc(n + 16);
    if (!p) return NULL;
    p[0] = n;
    bench_heap_now += n;
    if (bench_heap_now > bench_heap_peak) bench_heap_peak = bench_heap_now;
    return (char *)p + 16;
}
static void bench_free(void *q) {
    if (!q) return;
    bench_heap_now -= *(size_t *)((char *)q - 16);
    free((char *)q - 16);
}
static void *bench_realloc(void *q, size_t n) {
    void *r = bench_malloc(n);
    if (r && q) {
        size_t old = *(size_t *)((char *)q - 16);
        memcpy(r, q, old < n ? old : n);
        bench_free(q);
    }
    return r;
}
#define PARALLEL_MALLOC(n) bench_malloc(n)
#define PARALLEL_REALLOC(p, n) bench_realloc(p, n)
#define PARALLEL_FREE(p) bench_free(p)
#define BENCH_ATTN_PEAK_RESET() (bench_heap_peak = bench_heap_now)
#define BENCH_ATTN_PEAK() (bench_heap_peak - bench_heap_now)
#define PARALLEL_IMPLEMENTATION
#include "../parallel.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifdef BENCH_HAVE_CBLAS
#include <cblas.h>
#endif

static double bench_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int bench_cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double bench_median(double *t, int n) {
    qsort(t, (size_t)n, sizeof *t, bench_cmp);
    return n % 2 ? t[n / 2] : 0.5 * (t[n / 2 - 1] + t[n / 2]);
}

/* Median seconds of one n^3 GEMM through a compute table. */
static double bench_table_gemm(par_compute_table *t, int64_t n, const float *A, const float *B, float *C, int reps) {
    par_gemm_desc d;
    double times[16];
    int r;
    memset(&d, 0, sizeof d);
    d.m = d.n = d.k = n;
    d.alpha = 1.0f;
    if (t->gemm(t->user, &d, A, B, C) != PAR_OK) { /* warm-up: workspace, pool, caches */
        fprintf(stderr, "gemm failed: %s\n", par_last_error());
        exit(1);
    }
    for (r = 0; r < reps; r++) {
        double t0 = bench_now();
        t->gemm(t->user, &d, A, B, C);
        times[r] = bench_now() - t0;
    }
    return bench_median(times, reps);
}

#ifdef BENCH_HAVE_CBLAS
static double bench_cblas_gemm(int64_t n, const float *A, const float *B, float *C, int reps) {
    double times[16];
    int r;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)n, (int)n, (int)n, 1.0f, A, (int)n, B, (int)n, 0.0f,
                C, (int)n);
    for (r = 0; r < reps; r++) {
        double t0 = bench_now();
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)n, (int)n, (int)n, 1.0f, A, (int)n, B, (int)n,
                    0.0f, C, (int)n);
        times[r] = bench_now() - t0;
    }
    return bench_median(times, reps);
}
#endif

static void bench_json(const char *impl, int threads, int64_t n, double gflops) {
    printf("{\"bench\":\"gemm\",\"impl\":\"%s\",\"threads\":%d,\"m\":%lld,\"n\":%lld,\"k\":%lld,\"gflops\":%.2f}\n",
           impl, threads, (long long)n, (long long)n, (long long)n, gflops);
}

static int bench_gemm(int quick) {
    static const int64_t full[] = {256, 512, 1024, 2048}, small[] = {64, 128, 256};
    const int64_t *sizes = quick ? small : full;
    const int count = quick ? 3 : 4;
    double gf[4][3]; /* builtin 1 thread, builtin 2 threads, OpenBLAS (0 = not built) */
    double ratio_1024 = 0.0;
    par_compute_table t1, t2;
    par_cpu_desc d1, d2;
    int i;
    const par__cpu_gemm_isa *isa = par__cpu_gemm_best();
    memset(&d1, 0, sizeof d1); /* desc structs: zero fields are defaults */
    memset(&d2, 0, sizeof d2);
    d1.threads = 1;
    d2.threads = 2;
    if (par_compute_cpu(&d1, &t1) != PAR_OK || par_compute_cpu(&d2, &t2) != PAR_OK) {
        fprintf(stderr, "par_compute_cpu: %s\n", par_last_error());
        return 1;
    }
#ifdef BENCH_HAVE_CBLAS
    openblas_set_num_threads(1);
#endif
    for (i = 0; i < count; i++) {
        const int64_t n = sizes[i];
        const int reps = quick ? 3 : (n >= 2048 ? 3 : n >= 1024 ? 5 : 9);
        const double flops = 2.0 * (double)n * (double)n * (double)n;
        float *A = (float *)malloc((size_t)(n * n) * sizeof(float));
        float *B = (float *)malloc((size_t)(n * n) * sizeof(float));
        float *C = (float *)malloc((size_t)(n * n) * sizeof(float));
        int64_t j;
        if (!A || !B || !C) {
            fprintf(stderr, "out of memory\n");
            return 1;
        }
        for (j = 0; j < n * n; j++) {
            A[j] = (float)((j * 7 % 13) - 6) / 8.0f;
            B[j] = (float)((j * 5 % 11) - 5) / 8.0f;
        }
        gf[i][0] = flops / bench_table_gemm(&t1, n, A, B, C, reps) * 1e-9;
        gf[i][1] = flops / bench_table_gemm(&t2, n, A, B, C, reps) * 1e-9;
        gf[i][2] = 0.0;
#ifdef BENCH_HAVE_CBLAS
        {
            /* same answer? (a wrong fast GEMM would be a useless benchmark) */
            float *C2 = (float *)malloc((size_t)(n * n) * sizeof(float));
            double worst = 0.0;
            if (!C2) return 1;
            gf[i][2] = flops / bench_cblas_gemm(n, A, B, C2, reps) * 1e-9;
            for (j = 0; j < n * n; j++) {
                double e = fabs((double)C[j] - (double)C2[j]) / (1.0 + fabs((double)C2[j]));
                if (!(e <= worst)) worst = e;
            }
            if (!(worst < 1e-4)) {
                fprintf(stderr, "builtin and OpenBLAS disagree at n=%lld (rel err %g)\n", (long long)n, worst);
                return 1;
            }
            free(C2);
        }
#endif
        if (n == 1024 && gf[i][2] > 0.0) ratio_1024 = gf[i][0] / gf[i][2];
        free(A);
        free(B);
        free(C);
    }
    printf("GEMM f32 NN, C = A B, GFLOP/s (median); built-in micro-kernel: %s\n", isa->name);
    printf("%8s %14s %14s %14s %10s\n", "m=n=k", "builtin 1thr", "builtin 2thr", "OpenBLAS 1thr", "ratio");
    for (i = 0; i < count; i++) {
        if (gf[i][2] > 0.0)
            printf("%8lld %14.1f %14.1f %14.1f %9.2fx\n", (long long)sizes[i], gf[i][0], gf[i][1], gf[i][2],
                   gf[i][0] / gf[i][2]);
        else
            printf("%8lld %14.1f %14.1f %14s %10s\n", (long long)sizes[i], gf[i][0], gf[i][1], "(not built)", "-");
    }
    for (i = 0; i < count; i++) {
        bench_json("builtin", 1, sizes[i], gf[i][0]);
        bench_json("builtin", 2, sizes[i], gf[i][1]);
        if (gf[i][2] > 0.0) bench_json("openblas", 1, sizes[i], gf[i][2]);
    }
    if (ratio_1024 > 0.0) {
        printf("builtin / OpenBLAS at 1024 (1 thread each): %.2f\n", ratio_1024);
        printf("{\"bench\":\"gemm_ratio\",\"m\":1024,\"n\":1024,\"k\":1024,\"ratio\":%.3f}\n", ratio_1024);
    } else if (!quick) {
        printf("(OpenBLAS not built in: compile with -DBENCH_HAVE_CBLAS -lopenblas for the comparison)\n");
    }
    t1.destroy(t1.user);
    t2.destroy(t2.user);
    return 0;
}

/* >>> attention benchmark section (helper-A): bench/bench_attention.h defines
   static int bench_attention(int argc, char **argv); returning 0 on success. */
#include "bench_attention.h"

int main(int argc, char **argv) {
    int quick = 0, i, rc;
    for (i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--quick") == 0) {
            quick = 1;
        } else if (strncmp(argv[i], "--", 2) != 0) {
            fprintf(stderr, "usage: %s [--quick]\n", argv[0]);
            return 2;
        }
    }
    rc = bench_gemm(quick);
    if (rc != 0) return rc;
    fflush(stdout);
    return bench_attention(argc, argv);
}
