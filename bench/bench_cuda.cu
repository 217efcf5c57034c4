/* bench/bench_cuda.cu - the CUDA compute table (parallel_cuda.cu) on a real GPU:
   GEMM and flash-attention throughput through the table's hooks, the way the
   trainer calls them (`make bench-cuda`; needs a GPU, CI only links it).

   Rows (each the median of `reps` timed calls after two warm-ups, timed with
   CUDA events on the table's stream):
     gemm    M=N=K: f32 exact, f32 with TF32 tensor cores, bf16 in / f32 out,
             bf16 in / bf16 out; TFLOP/s = 2MNK / time;
     attn    causal flash attention, batch 1, 32 query heads, 8 kv heads (GQA),
             head dim 128, bf16 and f32, forward and backward; TFLOP/s counts the
             causal half of the score matrix: forward 4 * s^2/2 * heads * d, backward
             2.5x the forward (the FlashAttention papers' convention). Each row
             names its kernel: "tc" = a table with attention_kernel = 2 (the
             tensor-core kernels for bf16/f16, head dim 128; absent when this
             build or GPU lacks them, e.g. nvcc's default arch), "simt" = a
             table with attention_kernel = 1 (the portable kernels; f32 always
             runs these).
   bench/bench_cuda_torch.py times the same attention shapes with PyTorch's
   scaled_dot_product_attention on the same GPU for the side-by-side ratio.
   Prints a table and JSON lines {"bench":"cuda",...}.
   Usage: build/bench_cuda [reps]   (default 10) */
#define PARALLEL_IMPLEMENTATION
#include "../parallel.h"
#define PARALLEL_CUDA_DECLARATIONS_ONLY
#include "../parallel_cuda.cu"

#include <cuda_fp16.h>
#include <stdio.h>
#include <stdlib.h>

static int reps = 10;

#define TRY(call)                                                                                            \
    do {                                                                                                     \
        par_status st_ = (call);                                                                             \
        if (st_ != PAR_OK) {                                                                                 \
            fprintf(stderr, "bench_cuda: %s failed: %s (%s)\n", #call, par_status_string(st_), par_last_error()); \
            exit(1);                                                                                         \
        }                                                                                                    \
    } while (0)

static int cmp_float(const void *a, const void *b) {
    const float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

/* Times `reps` runs of fn(arg) on the table's stream; returns the median in ms.
   An error inside fn exits (TRY), so a figure always means the work ran. */
typedef void (*work_fn)(void *arg);
static float time_median_ms(par_compute_table *t, work_fn fn, void *arg) {
    cudaStream_t s = (cudaStream_t)t->stream;
    cudaEvent_t e0, e1;
    float ms[64];
    int i, n = reps < 64 ? reps : 64;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    fn(arg);
    fn(arg);
    TRY(t->synchronize(t->user));
    for (i = 0; i < n; i++) {
        cudaEventRecord(e0, s);
        fn(arg);
        cudaEventRecord(e1, s);
        cudaEventSynchronize(e1);
        cudaEventElapsedTime(&ms[i], e0, e1);
    }
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    qsort(ms, (size_t)n, sizeof ms[0], cmp_float);
    return ms[n / 2];
}

/* Device buffer of n elements of `bytes_each`, filled with small values (a random
   f32 pattern written as the dtype), so tensor cores see realistic data. */
static void *device_random(par_compute_table *t, size_t n, par_dtype dtype) {
    size_t esz = par_dtype_size(dtype), i;
    unsigned char *h = (unsigned char *)malloc(n * esz);
    uint64_t r = 0x9E3779B97F4A7C15ull ^ n;
    void *d = NULL;
    for (i = 0; i < n; i++) {
        float f;
        uint32_t u;
        r = r * 6364136223846793005ull + 1442695040888963407ull;
        f = (float)((double)(r >> 40) / 16777216.0 - 0.5);
        memcpy(&u, &f, 4);
        if (esz == 4) memcpy(h + 4 * i, &f, 4);
        else if (dtype == PAR_BF16) { uint16_t b = (uint16_t)(u >> 16); memcpy(h + 2 * i, &b, 2); }
        else { __half x = __float2half_rn(f); memcpy(h + 2 * i, &x, 2); }
    }
    TRY(t->alloc(t->user, n * esz, PAR_MEM_ACTIVATIONS, &d));
    TRY(t->memcpy(t->user, d, h, n * esz, PAR_COPY_HOST_TO_DEVICE));
    free(h);
    return d;
}

/* ---------------------------------------------------------------- GEMM */

typedef struct gemm_run {
    par_compute_table *t;
    par_gemm_desc d;
    void *a, *b, *c;
} gemm_run;

static void gemm_once(void *arg) {
    gemm_run *g = (gemm_run *)arg;
    TRY(g->t->gemm(g->t->user, &g->d, g->a, g->b, g->c));
}

static void bench_gemm(par_compute_table *t, const char *label, int n, par_dtype a_type, par_dtype c_type) {
    gemm_run g;
    float ms;
    double tflops;
    memset(&g, 0, sizeof g);
    g.t = t;
    g.d.m = g.d.n = g.d.k = n;
    g.d.lda = g.d.ldb = g.d.ldc = n;
    g.d.alpha = 1.0f;
    g.d.a_type = a_type;
    g.d.c_type = c_type;
    g.a = device_random(t, (size_t)n * n, a_type);
    g.b = device_random(t, (size_t)n * n, a_type);
    g.c = device_random(t, (size_t)n * n, c_type);
    ms = time_median_ms(t, gemm_once, &g);
    tflops = 2.0 * n * (double)n * n / (ms * 1e-3) / 1e12;
    printf("  gemm %-22s n=%-6d %9.3f ms %8.1f TFLOP/s\n", label, n, ms, tflops);
    printf("{\"bench\":\"cuda\",\"op\":\"gemm\",\"variant\":\"%s\",\"n\":%d,\"ms\":%.4f,\"tflops\":%.2f}\n", label, n,
           ms, tflops);
    t->free(t->user, g.a);
    t->free(t->user, g.b);
    t->free(t->user, g.c);
}

/* ----------------------------------------------------------- attention */

typedef struct attn_run {
    par_compute_table *t;
    par_attn_desc d;
    void *q, *k, *v, *o, *dout, *dq, *dk, *dv;
    float *lse;
} attn_run;

static void attn_fwd_once(void *arg) {
    attn_run *a = (attn_run *)arg;
    TRY(a->t->attention_fwd(a->t->user, &a->d, a->q, a->k, a->v, a->o, a->lse));
}
static void attn_bwd_once(void *arg) {
    attn_run *a = (attn_run *)arg;
    TRY(a->t->attention_bwd(a->t->user, &a->d, a->q, a->k, a->v, a->o, a->lse, a->dout, a->dq, a->dk, a->dv, 0));
}

static void bench_attention(par_compute_table *t, const char *kernel, int64_t seq, par_dtype dtype) {
    attn_run a;
    size_t nq, nkv;
    float fwd_ms, bwd_ms;
    double fwd_flop, fwd_tf, bwd_tf;
    memset(&a, 0, sizeof a);
    a.t = t;
    a.d.batch = 1;
    a.d.q_heads = 32;
    a.d.kv_heads = 8;
    a.d.head_dim = 128;
    a.d.q_len = a.d.k_len = seq;
    a.d.causal = 1;
    a.d.dtype = dtype;
    nq = (size_t)seq * 32 * 128;
    nkv = (size_t)seq * 8 * 128;
    a.q = device_random(t, nq, dtype);
    a.k = device_random(t, nkv, dtype);
    a.v = device_random(t, nkv, dtype);
    a.o = device_random(t, nq, dtype);
    a.dout = device_random(t, nq, dtype);
    a.dq = device_random(t, nq, dtype);
    a.dk = device_random(t, nkv, dtype);
    a.dv = device_random(t, nkv, dtype);
    TRY(t->alloc(t->user, (size_t)seq * 32 * sizeof(float), PAR_MEM_ACTIVATIONS, (void **)&a.lse));
    fwd_ms = time_median_ms(t, attn_fwd_once, &a);
    bwd_ms = time_median_ms(t, attn_bwd_once, &a);
    fwd_flop = 4.0 * (double)seq * (double)seq / 2.0 * 32 * 128;
    fwd_tf = fwd_flop / (fwd_ms * 1e-3) / 1e12;
    bwd_tf = 2.5 * fwd_flop / (bwd_ms * 1e-3) / 1e12;
    printf("  attn %-4s %-5s causal seq %-6lld fwd %9.3f ms %7.1f TFLOP/s | bwd %9.3f ms %7.1f TFLOP/s\n", kernel,
           par_dtype_name(dtype), (long long)seq, fwd_ms, fwd_tf, bwd_ms, bwd_tf);
    printf("{\"bench\":\"cuda\",\"op\":\"attention\",\"kernel\":\"%s\",\"dtype\":\"%s\",\"seq\":%lld,\"heads\":32,"
           "\"kv_heads\":8,\"head_dim\":128,\"fwd_ms\":%.4f,\"fwd_tflops\":%.2f,\"bwd_ms\":%.4f,\"bwd_tflops\":%.2f}\n",
           kernel, par_dtype_name(dtype), (long long)seq, fwd_ms, fwd_tf, bwd_ms, bwd_tf);
    t->free(t->user, a.q);
    t->free(t->user, a.k);
    t->free(t->user, a.v);
    t->free(t->user, a.o);
    t->free(t->user, a.dout);
    t->free(t->user, a.dq);
    t->free(t->user, a.dk);
    t->free(t->user, a.dv);
    t->free(t->user, a.lse);
}

int main(int argc, char **argv) {
    par_compute_table exact, tf32, simt, tc;
    int have_tc;
    par_cuda_desc desc;
    char name[256];
    int count = 0;
    if (argc > 1) reps = atoi(argv[1]) > 0 ? atoi(argv[1]) : 10;
    TRY(par_cuda_device_info(&count, name, sizeof name));
    printf("bench_cuda: %s (%d visible), %d timed reps per row (median)\n", name, count, reps);
    memset(&desc, 0, sizeof desc);
    TRY(par_compute_cuda(&desc, &exact));
    desc.allow_tf32 = 1;
    TRY(par_compute_cuda(&desc, &tf32));
    desc.allow_tf32 = 0;
    desc.attention_kernel = 1;
    TRY(par_compute_cuda(&desc, &simt));
    desc.attention_kernel = 2;
    have_tc = par_compute_cuda(&desc, &tc) == PAR_OK;
    if (!have_tc) printf("  (no tensor-core attention rows: %s)\n", par_last_error());

    bench_gemm(&exact, "f32", 4096, PAR_F32, PAR_F32);
    bench_gemm(&tf32, "f32-tf32", 4096, PAR_F32, PAR_F32);
    bench_gemm(&exact, "bf16-in-f32-out", 4096, PAR_BF16, PAR_F32);
    bench_gemm(&exact, "bf16", 4096, PAR_BF16, PAR_BF16);
    bench_gemm(&exact, "bf16", 8192, PAR_BF16, PAR_BF16);
    bench_gemm(&exact, "f16", 8192, PAR_F16, PAR_F16);

    if (have_tc) {
        bench_attention(&tc, "tc", 1024, PAR_BF16);
        bench_attention(&tc, "tc", 4096, PAR_BF16);
        bench_attention(&tc, "tc", 16384, PAR_BF16);
        bench_attention(&tc, "tc", 4096, PAR_F16);
    }
    bench_attention(&simt, "simt", 1024, PAR_BF16);
    bench_attention(&simt, "simt", 4096, PAR_BF16);
    bench_attention(&simt, "simt", 16384, PAR_BF16);
    bench_attention(&simt, "simt", 4096, PAR_F32);

    exact.destroy(exact.user);
    tf32.destroy(tf32.user);
    simt.destroy(simt.user);
    if (have_tc) tc.destroy(tc.user);
    return 0;
}
