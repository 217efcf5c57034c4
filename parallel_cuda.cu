/* parallel_cuda.cu - CUDA side of parallel.h: the CUDA compute table (cuBLAS
   GEMM, flash attention, fused kernels) and the NCCL comm table.
   License: the same as parallel.h (MIT-0 or public domain, full text at its end).

   BUILD
   Two ways, pick one per program:

   (B) Its own translation unit next to ONE file of yours that defines
       PARALLEL_IMPLEMENTATION (this file then only sees parallel.h's
       declarations):

           nvcc -std=c++17 -c parallel_cuda.cu -I<dir of parallel.h>
           ... link with -lcublas -lnccl -lcudart

       In that implementation file, also include this file's declarations
       (after parallel.h):
           #define PARALLEL_IMPLEMENTATION
           #include "parallel.h"
           #define PARALLEL_CUDA_DECLARATIONS_ONLY
           #include "parallel_cuda.cu"
       which adds two small pieces of glue that need the implementation's
       private functions: the bridge that puts this file's error sentences into
       par_last_error(), and par_ctx_init_nccl (with PARALLEL_WITH_MPI).
       Without the glue everything still works; error sentences are then only
       in par_cuda_last_error().

   (A) As the implementation file itself: compile it with -DPARALLEL_IMPLEMENTATION
       (and no other file defines it). The glue is then in this file.

   The NCCL comm table and par_ctx_init_nccl need PARALLEL_WITH_MPI (bootstrap
   over MPI): define it for this file and for the implementation file, add
   `mpicc --showme:compile` flags and link `mpicc --showme:link` flags. The file
   never calls MPI_Finalize (the host does, after destroying its contexts).

   ERRORS
   Every function returns par_status with a sentence (par_last_error() via the
   glue, and always par_cuda_last_error()):
     PAR_EUNSUPPORTED  no usable CUDA device or driver, or a size this code
                       does not handle (named in the message)
     PAR_ENOMEM        device or host allocation failed
     PAR_ECOMM         an NCCL or MPI call failed
     PAR_ETIMEOUT      an NCCL op did not finish within the timeout
     PAR_EIO           any other CUDA runtime or cuBLAS failure
     PAR_EINVAL        bad arguments
   Kernels run asynchronously on the table's stream, so a few data errors that
   only the device sees (a negative embedding id, a cross-entropy target >= vocab)
   are reported by the next `synchronize` (or sumsq / a host copy), as
   PAR_EINVAL naming the kernel.

   To get only the declarations below (e.g. in a test), define
   PARALLEL_CUDA_DECLARATIONS_ONLY before including this file. */
#ifndef PARALLEL_CUDA_API
#define PARALLEL_CUDA_API

#include "parallel.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------- smoke API */

/* Number of visible CUDA devices and the name of device 0 (written to `name`,
   NUL-terminated, truncated to name_size; name may be NULL). PAR_EUNSUPPORTED
   if there is no device or no driver. */
par_status par_cuda_device_info(int *device_count, char *name, size_t name_size);

/* Multiply two n x n f32 matrices of small integers with cublasSgemm on device 0
   and compare against a CPU reference computed here in double precision.
   *max_err = largest absolute difference (0 expected: every product and sum is
   exactly representable). n in 1..1024, else PAR_EINVAL. */
par_status par_cuda_gemm_smoke(int n, double *max_err);

/* NCCL library version as ncclGetVersion reports it (e.g. 22703 = 2.27.3).
   Needs no GPU. */
par_status par_cuda_nccl_version(int *version);

/* The sentence of the latest failure of a function of this file on the calling
   thread ("" if none). Same text as par_last_error() when the glue is linked. */
const char *par_cuda_last_error(void);

/* ---------------------------------------------------------- compute table */

/* Zero-initialised = device 0, a new stream owned by the table, exact f32 GEMM. */
typedef struct par_cuda_desc {
    int device;     /* CUDA device ordinal */
    void *stream;   /* cudaStream_t to run on (the host's, not destroyed); NULL = a new one */
    int allow_tf32; /* nonzero: f32 GEMM may use TF32 tensor cores (about 10 mantissa bits) */
    int attention_kernel; /* 0 = auto (tensor cores where supported), 1 = portable SIMT kernels only,
                             2 = tensor cores required (PAR_EUNSUPPORTED where this build/device lacks them) */
} par_cuda_desc;

/* Fill `table` with the CUDA kernels (the table of parallel.h's >>compute) on one device. Semantics
   are those of the CPU table (parallel.h >>compute), with these CUDA specifics:
   - every pointer, including par_attn_desc.q_pos / k_pos (int64, NULL = 0..len-1)
     and the rope `pos`, ids and targets, is DEVICE memory; sumsq's `out` is host;
   - kernels are asynchronous on table->stream; memcpy involving host memory and
     sumsq return after the stream finished (so host buffers may be reused);
     alloc returns zeroed memory and synchronizes;
   - gemm: a_type f32, bf16 or f16; c_type f32 or a_type; f32 accumulation
     (exact f32 unless allow_tf32). Sizes and leading dims must fit in int;
   - attention: dtype f32, bf16 or f16 (o likewise; lse, merge in f32),
     head_dim <= 256 (else PAR_EUNSUPPORTED); backward is deterministic (no atomics);
   - attention kernels (par_cuda_desc.attention_kernel): bf16/f16 with head_dim
     64 or 128 and 16-byte aligned tensors run FlashAttention-2 style kernels on
     the tensor cores (mma.sync m16n8k16, f32 accumulation and softmax) when the
     device is sm_80+ AND this file was compiled for sm_80+ (e.g. -arch=sm_90;
     nvcc's default target gets the SIMT kernels everywhere). They round the
     probabilities P and dS to the dtype before multiplying them (as
     FlashAttention-2 does); everything else, f32 and other head_dims use the
     portable SIMT kernels, which attention_kernel = 1 selects for every case;
   - embedding_bwd and rmsnorm_bwd's dw use float atomics (order of additions
     varies run to run at the last bit);
   - activation kernels (rmsnorm .. xent_bwd_split, axpy): dtype f32, bf16 or
     f16 (else PAR_EINVAL naming the kernel and dtype), read in place (no
     staging: scratch_bound ignores act_type / act_cols), f32 arithmetic as the
     f32 kernels, a 16-bit output rounded to nearest even once; rstd, loss, the
     cross-entropy pieces, dw and dtable are f32 for every dtype.
   Release with table->destroy(table->user) after freeing what it allocated
   (anything still allocated is freed by destroy). */
par_status par_compute_cuda(const par_cuda_desc *desc, par_compute_table *table);

/* ------------------------------------------------ many ranks on one GPU */

/* par_run_threads with every rank a thread on ONE GPU: the threads backend
   (parallel.h >>comm-threads: same groups, rendezvous, async requests,
   timeouts and fault reports) moving device memory through a data mover
   (par_thr_mover), and each rank its own CUDA compute table
   (par_compute_cuda with `cuda`, NULL = device 0 and the defaults) on its own
   stream; the context owns neither: both live for the run. Collectives and
   p2p work on device buffers: copies are cudaMemcpyAsync device to device on
   the stream of the rank doing them, reductions a kernel there (f32, bf16,
   f16, f64, i32, i64; sum, avg, max with the threads backend's arithmetic:
   16-bit values summed in f32 in member order and rounded once, so results
   are bitwise those of the CPU threads backend on the same bytes). A rank's
   stream is synchronized before it publishes its buffers to an op (its
   kernels that produce or read them have finished) and after its share,
   before the op completes. This is for developing and debugging parallel
   layouts on the GPU one has (tp x cp x pp on one device): the ranks share
   the GPU's memory and SMs, so it is not a way to go faster.
   Errors: PAR_EINVAL (n outside 1..256, desc->compute set, cuda->stream set,
   NULL fn), par_compute_cuda's (no device), then as par_run_threads: the
   first failing rank's status and sentence. */
par_status par_run_cuda_threads(const par_ctx_desc *desc, const par_cuda_desc *cuda, int n, par_rank_fn fn,
                                void *arg);

/* ------------------------------------------------------------- comm table */

/* Zero-initialised = MPI_COMM_WORLD, device = local rank on its host modulo the
   visible devices, $PARALLEL_TIMEOUT_MS or 600000 ms. */
typedef struct par_nccl_desc {
    const void *mpi_comm; /* pointer to an MPI_Comm to bootstrap over (duplicated); NULL = world */
    int set_device;       /* nonzero: use `device` instead of the local rank */
    int device;
    int timeout_ms;       /* bound on every wait for an NCCL op; 0 = default */
    int group_init;       /* how group_create makes a communicator: PAR_NCCL_GROUP_AUTO (0) or _INIT */
    int group_streams;    /* 1: a stream per group; -1: one stream; 0 = $PARALLEL_NCCL_GROUP_STREAMS (unset: one) */
} par_nccl_desc;

/* par_nccl_desc.group_init. AUTO: a group whose members are the whole world (in
   any order) is split from the world communicator with ncclCommSplit when NCCL
   is 2.18 or newer (compiled and loaded): collective over the world, which is
   then exactly the members, and no unique id travels; any other group, or an
   older NCCL, gets its own ncclCommInitRank (unique id broadcast over an MPI
   communicator of its members). Split is not used for smaller groups because
   group_create is collective over the members only and ncclCommSplit over every
   rank of its parent. INIT: ncclCommInitRank for every group.
   par_comm_nccl_group_split tells which one a group got. */
enum { PAR_NCCL_GROUP_AUTO = 0, PAR_NCCL_GROUP_INIT = 1 };

/* Fill `table` with an NCCL transport for this MPI process: one GPU per rank,
   ranks = MPI ranks of the communicator. Collective over all its processes
   (calls MPI_Init if needed). Buffers are device memory of that GPU; ops are
   ordered on the table's stream (set_stream; default: its own stream). Specifics:
   - group_create makes a new NCCL communicator per group: split from the world
     communicator when the members are the whole world and NCCL >= 2.18, else
     its own init (unique id broadcast over an MPI sub-communicator of the
     members only); see par_nccl_desc.group_init;
   - with group_streams, each group's ops run on a stream of its own instead of
     the table's: at issue that stream waits for an event recorded on the
     table's stream (so an op follows the kernels that produced its input),
     and a completed wait/test makes the table's stream wait for the op's event
     (so kernels launched after it see its result). An async op then runs
     while kernels issued after it run on the table's stream: gradient buckets
     reduced during backward overlap the compute. Buffers must stay untouched
     until wait/test, as the contract says; one stream per group because NCCL
     runs a communicator's ops in order anyway, so more streams would not add
     concurrency, and a pending op of one group no longer holds back another
     group's (activations vs gradients of a pipeline, p2p vs collectives).
     Off by default: the one-stream path is the one run on GPUs so far;
   - bf16/f16 reductions are NCCL's (pairwise in the type), not f32-accumulated;
   - avg: ncclAvg for floating types (NCCL may compute it as the sum of
     x * (1/n), so it can differ from sum / n in the last bits, and a sum that
     cancels may give a tiny nonzero), sum then truncating division for integers;
   - a blocking send completes only when the peer posted its recv;
   - async send/recv posted one after another form a run that is fused into
     one NCCL group (ncclGroupStart/ncclGroupEnd), where its ops progress
     together: a rank may post recv(prev) then send(next) around a ring, or
     every recv before every send. The table's next call other than an async
     send/recv launches the run (any op, wait, test, set_stream, group_create,
     group_destroy, destroy); a blocking send or recv joins it, is launched
     with it and returns when all of it completed (so an async recv then a
     blocking send is an exchange too). The requests complete only after the
     launch: wait or test them (or make another call) before expecting
     progress. A send to oneself must be async, with its matching recv from
     oneself in the same run (NCCL pairs them only within a group), else both
     fail with PAR_EINVAL at the launch; a blocking send or recv to oneself is
     PAR_EINVAL. Make the table's calls from the thread that posted the run (a
     call from another thread while it is queued is PAR_EINVAL and changes
     nothing). If the launch fails, every request of the run reports PAR_ECOMM
     and the communicators involved are aborted;
   - receives posted ahead: NCCL runs a communicator's ops in order and
     completes a fused group as a whole, so a receive launched before this
     rank's later sends on its group holds them back (and the wait of every op
     fused with it) until its message came, which never happens if the
     message needs one of them (a pipeline's PA / PG). With group_streams, a
     receive posted in a run that has no send of its group therefore stays
     queued until it is needed: its own wait or test, a later receive from the
     same peer on the group being launched, a collective or barrier on its
     group, or group_create, group_destroy, set_stream, destroy -- it runs
     where the program waits for it, like a blocking receive, while the
     peer's send to it holds only the peer's stream of that group. With one
     stream every queued op is launched at the next call (any op on the one
     stream would wait behind the peer's held send), so receives posted ahead
     of this rank's own sends that their messages need time out there, and
     the timeout's error says when an async receive of the group was pending;
   - wait bounds the op by the timeout: on expiry the group's communicator is
     aborted (later ops on the group fail with PAR_ECOMM, and so do its requests
     that complete afterwards, their results being undefined) and PAR_ETIMEOUT
     returned.
   Needs PARALLEL_WITH_MPI; otherwise PAR_EUNSUPPORTED. */
par_status par_comm_nccl(const par_nccl_desc *desc, par_comm_table *table);

/* The CUDA device an NCCL table (from par_comm_nccl) runs on. */
par_status par_comm_nccl_device(const par_comm_table *table, int *device);

/* *split = 1 when `group` of an NCCL table was made by ncclCommSplit from the
   world communicator, 0 when by its own ncclCommInitRank (see group_init).
   Errors: PAR_EINVAL (not an NCCL table, NULL group or split). */
par_status par_comm_nccl_group_split(const par_comm_table *table, const par_comm_group *group, int *split);

/* A context whose comm table is NCCL (par_comm_nccl with the context's timeout)
   and, unless desc->compute is given, whose compute table is a CUDA table on
   the same device sharing one stream with the comm table (with
   $PARALLEL_NCCL_GROUP_STREAMS=1 the comm table's groups run on streams of their
   own, ordered after that one by events: see par_comm_nccl); the context owns and
   destroys both. A given desc->compute stays the caller's, and the comm table
   runs on its stream (when it has one), so collectives follow its kernels.
   desc->comm must be NULL. Defined by the glue (see BUILD), so
   only with PARALLEL_WITH_MPI. */
PARALLEL_DEF par_status par_ctx_init_nccl(const par_ctx_desc *desc, par_ctx **ctx);

#ifdef __cplusplus
}
#endif
#endif /* PARALLEL_CUDA_API */

/* ------------------------------------------------------------------ glue
   Emitted once, in the translation unit that has parallel.h's implementation. */
#if defined(PARALLEL_IMPLEMENTATION_DONE) && !defined(PARALLEL_CUDA_GLUE_DONE)
#define PARALLEL_CUDA_GLUE_DONE
#ifdef __cplusplus
extern "C" {
#endif
void par_cuda__error_bridge(par_status status, const char *text);
/* Called by parallel_cuda.cu's functions to set par_last_error() (per thread). */
void par_cuda__error_bridge(par_status status, const char *text) { (void)par__fail(status, "%s", text); }

#ifdef PARALLEL_WITH_MPI
PARALLEL_DEF par_status par_ctx_init_nccl(const par_ctx_desc *desc, par_ctx **ctx) {
    par_ctx_desc d;
    par_nccl_desc nd;
    par_cuda_desc cd;
    par_comm_table comm;
    par_compute_table compute;
    int own_compute = 0, timeout = 0;
    par_status st;
    if (!ctx) return par__fail(PAR_EINVAL, "par_ctx_init_nccl: NULL ctx");
    *ctx = NULL;
    if (desc)
        d = *desc;
    else
        memset(&d, 0, sizeof d);
    if (d.comm)
        return par__fail(PAR_EINVAL, "par_ctx_init_nccl: desc->comm must be NULL (this launcher makes the NCCL "
                                     "transport; use par_ctx_init for your own)");
    if ((st = par__ctx_timeout(&d, &timeout)) != PAR_OK) return st;
    memset(&nd, 0, sizeof nd);
    nd.timeout_ms = timeout;
    if ((st = par_comm_nccl(&nd, &comm)) != PAR_OK) return st;
    if (!d.compute) {
        memset(&cd, 0, sizeof cd);
        if ((st = par_comm_nccl_device(&comm, &cd.device)) != PAR_OK ||
            (st = par_compute_cuda(&cd, &compute)) != PAR_OK) {
            comm.destroy(comm.user);
            return st;
        }
        own_compute = 1;
        /* One stream: collectives then follow the kernels that produced their input. */
        if ((st = comm.set_stream(comm.user, compute.stream)) != PAR_OK) {
            compute.destroy(compute.user);
            comm.destroy(comm.user);
            return st;
        }
        d.compute = &compute;
    } else if (d.compute->stream &&
               (st = comm.set_stream(comm.user, d.compute->stream)) != PAR_OK) {
        /* The caller's table: its stream too, or collectives would race its kernels. */
        comm.destroy(comm.user);
        return st;
    }
    st = par__ctx_create(&d, &comm, 1, ctx); /* destroys comm itself on failure */
    if (st != PAR_OK) {
        if (own_compute) compute.destroy(compute.user);
        return st;
    }
    (*ctx)->owns_compute = own_compute;
    return PAR_OK;
}
#endif /* PARALLEL_WITH_MPI */
#ifdef __cplusplus
}
#endif
#endif /* glue */

#ifndef PARALLEL_CUDA_DECLARATIONS_ONLY
#ifndef PARALLEL_CUDA_DEFINED
#define PARALLEL_CUDA_DEFINED

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <nccl.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <chrono>
#include <thread>

#if defined(PARALLEL_WITH_MPI)
#ifndef OMPI_SKIP_MPICXX
#define OMPI_SKIP_MPICXX 1 /* C bindings only */
#endif
#ifndef MPICH_SKIP_MPICXX
#define MPICH_SKIP_MPICXX 1
#endif
#include <mpi.h>
#endif

/* Host allocator: the implementation's macros when this is the implementation
   file, else the C library (the macros only matter in the implementation file). */
#ifndef PARALLEL_MALLOC
#define PAR_CUDA__MALLOC(sz) malloc(sz)
#define PAR_CUDA__REALLOC(p, sz) realloc(p, sz)
#define PAR_CUDA__FREE(p) free(p)
#else
#define PAR_CUDA__MALLOC(sz) PARALLEL_MALLOC(sz)
#define PAR_CUDA__REALLOC(p, sz) PARALLEL_REALLOC(p, sz)
#define PAR_CUDA__FREE(p) PARALLEL_FREE(p)
#endif

/* ======================================================================
   >>cuda-errors
   ==================================================================== */

static thread_local char par_cuda__error_text[512];

#if !defined(PARALLEL_IMPLEMENTATION_DONE) && (defined(__GNUC__) || defined(__clang__))
/* Defined by the glue in the implementation file when it includes our
   declarations; weak so that a program without the glue still links. */
extern "C" __attribute__((weak)) void par_cuda__error_bridge(par_status status, const char *text);
#endif

extern "C" const char *par_cuda_last_error(void) { return par_cuda__error_text; }

/* Record a failure sentence (here and in par_last_error()) and return status. */
static PAR__PRINTF(2, 3) par_status par_cuda__fail(par_status status, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(par_cuda__error_text, sizeof par_cuda__error_text, fmt, ap);
    va_end(ap);
#if defined(PARALLEL_IMPLEMENTATION_DONE)
    (void)par__fail(status, "%s", par_cuda__error_text);
#elif defined(__GNUC__) || defined(__clang__)
    if (par_cuda__error_bridge) par_cuda__error_bridge(status, par_cuda__error_text);
#endif
    return status;
}

static par_status par_cuda__status_of(cudaError_t err) {
    switch (err) {
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
    case cudaErrorInvalidDevice:
        return PAR_EUNSUPPORTED;
    case cudaErrorMemoryAllocation:
        return PAR_ENOMEM;
    default:
        return PAR_EIO;
    }
}

/* Map a CUDA runtime error to a status, with "what: CUDA's text". */
static par_status par_cuda__runtime(cudaError_t err, const char *what) {
    return par_cuda__fail(par_cuda__status_of(err), "%s: %s", what, cudaGetErrorString(err));
}

static par_status par_cuda__blas(cublasStatus_t s, const char *what) {
    return par_cuda__fail(s == CUBLAS_STATUS_ALLOC_FAILED ? PAR_ENOMEM
                          : s == CUBLAS_STATUS_NOT_SUPPORTED || s == CUBLAS_STATUS_ARCH_MISMATCH
                              ? PAR_EUNSUPPORTED
                              : PAR_EIO,
                          "%s: cuBLAS: %s", what, cublasGetStatusString(s));
}

/* ======================================================================
   >>cuda-smoke
   ==================================================================== */

extern "C" par_status par_cuda_device_info(int *device_count, char *name, size_t name_size) {
    cudaDeviceProp prop;
    cudaError_t err;
    if (!device_count) return par_cuda__fail(PAR_EINVAL, "par_cuda_device_info: NULL device_count");
    *device_count = 0;
    if (name && name_size) name[0] = 0;
    err = cudaGetDeviceCount(device_count);
    if (err != cudaSuccess) {
        *device_count = 0;
        return par_cuda__runtime(err, "cudaGetDeviceCount");
    }
    if (*device_count == 0) return par_cuda__fail(PAR_EUNSUPPORTED, "par_cuda_device_info: no CUDA device");
    err = cudaGetDeviceProperties(&prop, 0);
    if (err != cudaSuccess) return par_cuda__runtime(err, "cudaGetDeviceProperties");
    if (name && name_size) snprintf(name, name_size, "%s", prop.name);
    return PAR_OK;
}

extern "C" par_status par_cuda_gemm_smoke(int n, double *max_err) {
    par_status st = PAR_OK;
    size_t count, bytes;
    float *a = NULL, *b = NULL, *c = NULL;
    float *da = NULL, *db = NULL, *dc = NULL;
    cublasHandle_t handle = NULL;
    cublasStatus_t bst;
    cudaError_t err;
    const float one = 1.0f, zero = 0.0f;
    int i, j, k;
    double worst = 0;

    if (!max_err || n < 1 || n > 1024)
        return par_cuda__fail(PAR_EINVAL, "par_cuda_gemm_smoke: need n in 1..1024 and max_err (n = %d)", n);
    *max_err = INFINITY;
    count = (size_t)n * (size_t)n;
    bytes = count * sizeof(float);
    a = (float *)malloc(bytes);
    b = (float *)malloc(bytes);
    c = (float *)malloc(bytes);
    if (!a || !b || !c) {
        st = par_cuda__fail(PAR_ENOMEM, "par_cuda_gemm_smoke: out of host memory");
        goto done;
    }
    /* Integers in -2..2: products and sums of up to 1024 terms are exact in f32
       (and in TF32), so any difference is a real error, not rounding. */
    for (i = 0; i < (int)count; i++) {
        a[i] = (float)(i % 5 - 2);
        b[i] = (float)((i * 7) % 5 - 2);
    }

#define PAR_CUDA__TRY(call)                                  \
    do {                                                     \
        err = (call);                                        \
        if (err != cudaSuccess) {                            \
            st = par_cuda__runtime(err, #call);              \
            goto done;                                       \
        }                                                    \
    } while (0)
    PAR_CUDA__TRY(cudaSetDevice(0));
    PAR_CUDA__TRY(cudaMalloc((void **)&da, bytes));
    PAR_CUDA__TRY(cudaMalloc((void **)&db, bytes));
    PAR_CUDA__TRY(cudaMalloc((void **)&dc, bytes));
    PAR_CUDA__TRY(cudaMemcpy(da, a, bytes, cudaMemcpyHostToDevice));
    PAR_CUDA__TRY(cudaMemcpy(db, b, bytes, cudaMemcpyHostToDevice));

    bst = cublasCreate(&handle);
    if (bst == CUBLAS_STATUS_SUCCESS) /* column-major: C = A * B */
        bst = cublasSgemm(handle, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, da, n, db, n, &zero, dc, n);
    if (bst != CUBLAS_STATUS_SUCCESS) {
        st = par_cuda__blas(bst, "par_cuda_gemm_smoke");
        goto done;
    }
    PAR_CUDA__TRY(cudaMemcpy(c, dc, bytes, cudaMemcpyDeviceToHost)); /* synchronizes */
#undef PAR_CUDA__TRY

    for (j = 0; j < n; j++) {
        for (i = 0; i < n; i++) {
            double ref = 0;
            for (k = 0; k < n; k++) ref += (double)a[i + (size_t)k * n] * b[k + (size_t)j * n];
            worst = fmax(worst, fabs(ref - c[i + (size_t)j * n]));
        }
    }
    *max_err = worst;

done:
    if (handle) cublasDestroy(handle);
    cudaFree(da); /* cudaFree(NULL) is a no-op */
    cudaFree(db);
    cudaFree(dc);
    free(a);
    free(b);
    free(c);
    return st;
}

extern "C" par_status par_cuda_nccl_version(int *version) {
    ncclResult_t r;
    if (!version) return par_cuda__fail(PAR_EINVAL, "par_cuda_nccl_version: NULL version");
    r = ncclGetVersion(version);
    if (r != ncclSuccess) return par_cuda__fail(PAR_ECOMM, "ncclGetVersion: %s", ncclGetErrorString(r));
    return PAR_OK;
}

/* ======================================================================
   >>cuda-kernels   device helpers and kernels (f32 unless templated)
   ==================================================================== */

#define PAR_CUDA__THREADS 256
#define PAR_CUDA__FULL 0xffffffffu

__device__ __forceinline__ float par_cuda__ld(float x) { return x; }
__device__ __forceinline__ float par_cuda__ld(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ __forceinline__ float par_cuda__ld(__half x) { return __half2float(x); }

template <typename T> __device__ __forceinline__ T par_cuda__st(float x);
template <> __device__ __forceinline__ float par_cuda__st<float>(float x) { return x; }
template <> __device__ __forceinline__ __nv_bfloat16 par_cuda__st<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }
template <> __device__ __forceinline__ __half par_cuda__st<__half>(float x) { return __float2half_rn(x); }

/* The data mover's element access (>>cuda-threads): 16-bit types widened to
   float and rounded back once, the others as they are. */
template <typename T> __device__ __forceinline__ T par_cuda__mv_ld(T x) { return x; }
__device__ __forceinline__ float par_cuda__mv_ld(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ __forceinline__ float par_cuda__mv_ld(__half x) { return __half2float(x); }
template <typename T, typename A> __device__ __forceinline__ T par_cuda__mv_st_as(A x) { return (T)x; }
template <> __device__ __forceinline__ __nv_bfloat16 par_cuda__mv_st_as<__nv_bfloat16, float>(float x) {
    return __float2bfloat16_rn(x);
}
template <> __device__ __forceinline__ __half par_cuda__mv_st_as<__half, float>(float x) { return __float2half_rn(x); }

template <typename T> __device__ __forceinline__ T par_cuda__warp_sum(T v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(PAR_CUDA__FULL, v, o);
    return v;
}

__device__ __forceinline__ float par_cuda__warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(PAR_CUDA__FULL, v, o));
    return v;
}

/* Sum over the block (blockDim.x a multiple of 32), returned to every thread.
   Must be reached by all threads of the block. */
__device__ double par_cuda__block_sum(double v) {
    __shared__ double part[32];
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = (int)(blockDim.x >> 5);
    double t = 0;
    v = par_cuda__warp_sum(v);
    __syncthreads(); /* a previous call may still be reading part[] */
    if (lane == 0) part[w] = v;
    __syncthreads();
    for (int i = 0; i < nw; i++) t += part[i];
    return t;
}

__device__ float par_cuda__block_max(float v) {
    __shared__ float part[32];
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = (int)(blockDim.x >> 5);
    float t = -INFINITY;
    v = par_cuda__warp_max(v);
    __syncthreads();
    if (lane == 0) part[w] = v;
    __syncthreads();
    for (int i = 0; i < nw; i++) t = fmaxf(t, part[i]);
    return t;
}

/* Flags kernels raise for data errors only the device sees (see synchronize). */
#define PAR_CUDA__FLAG_EMB_NEGATIVE 1
#define PAR_CUDA__FLAG_XENT_TARGET 2

#define PAR_CUDA__GRID_STRIDE(i, n)                                                        \
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n);              \
         i += (int64_t)blockDim.x * gridDim.x)

/* The activation kernels are templates on the element type T of their
   activation tensors (float, __nv_bfloat16, __half): every element is read
   through par_cuda__ld (widened exactly), the arithmetic is the f32 kernel's,
   and a T result is written once through par_cuda__st (rounded to nearest
   even). For T = float both are the identity, so the f32 numerics are the
   f32 kernels' as they were. Statistics (rstd, the cross-entropy pieces,
   loss) and weight gradients (dw, dtable) stay float whatever T is, so every
   atomicAdd is on f32. */

/* ------------------------------------------------------------ rmsnorm */

template <typename T>
__global__ void par_cuda__rmsnorm_fwd_k(int64_t rows, int64_t dim, const T *x, const T *w, float eps, T *y,
                                        float *rstd) {
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
        const T *xr = x + r * dim;
        T *yr = y + r * dim;
        double ss = 0;
        for (int64_t j = threadIdx.x; j < dim; j += blockDim.x) {
            const float v = par_cuda__ld(xr[j]);
            ss += (double)v * v;
        }
        ss = par_cuda__block_sum(ss); /* every x read before any y (may alias) is written */
        const float s = (float)(1.0 / sqrt(ss / (double)dim + (double)eps));
        if (rstd && threadIdx.x == 0) rstd[r] = s;
        for (int64_t j = threadIdx.x; j < dim; j += blockDim.x)
            yr[j] = par_cuda__st<T>(par_cuda__ld(w[j]) * (par_cuda__ld(xr[j]) * s));
    }
}

/* dw[j] (f32) += sum over a chunk of rows of dy x rstd; grid.y splits the rows. */
template <typename T>
__global__ void par_cuda__rmsnorm_dw_k(int64_t rows, int64_t dim, const T *x, const float *rstd, const T *dy,
                                       float *dw) {
    const int64_t j = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    const int64_t chunk = (rows + gridDim.y - 1) / gridDim.y;
    const int64_t r0 = (int64_t)blockIdx.y * chunk, r1 = r0 + chunk < rows ? r0 + chunk : rows;
    float acc = 0.0f;
    if (j >= dim || r0 >= r1) return;
    for (int64_t r = r0; r < r1; r++) acc += par_cuda__ld(dy[r * dim + j]) * par_cuda__ld(x[r * dim + j]) * rstd[r];
    atomicAdd(dw + j, acc);
}

template <typename T>
__global__ void par_cuda__rmsnorm_dx_k(int64_t rows, int64_t dim, const T *x, const T *w, const float *rstd,
                                       const T *dy, T *dx) {
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
        const T *xr = x + r * dim, *dyr = dy + r * dim;
        T *dxr = dx + r * dim;
        const float s = rstd[r];
        double dot = 0;
        for (int64_t j = threadIdx.x; j < dim; j += blockDim.x)
            dot += (double)par_cuda__ld(dyr[j]) * par_cuda__ld(w[j]) * par_cuda__ld(xr[j]);
        dot = par_cuda__block_sum(dot); /* dy read before dx (may alias) is written */
        const float c = (float)(dot * (double)s * s * s / (double)dim);
        for (int64_t j = threadIdx.x; j < dim; j += blockDim.x)
            dxr[j] = par_cuda__st<T>(s * par_cuda__ld(w[j]) * par_cuda__ld(dyr[j]) - par_cuda__ld(xr[j]) * c);
    }
}

/* --------------------------------------------------------------- rope */

/* One thread per (token, pair index i); angle in double as on the CPU. The
   thread reads both halves of a pair before writing them: y may equal x. */
template <typename T>
__global__ void par_cuda__rope_k(int64_t tokens, int64_t heads, int64_t head_dim, const int64_t *pos, float theta,
                                 const T *x, T *y, double sign) {
    const int64_t half = head_dim / 2;
    PAR_CUDA__GRID_STRIDE(idx, tokens * half) {
        const int64_t t = idx / half, i = idx % half;
        const double a = (double)pos[t] * pow((double)theta, -2.0 * (double)i / (double)head_dim);
        const float c = (float)cos(a), s = (float)(sign * sin(a));
        for (int64_t hh = 0; hh < heads; hh++) {
            const T *xv = x + (t * heads + hh) * head_dim;
            T *yv = y + (t * heads + hh) * head_dim;
            const float x0 = par_cuda__ld(xv[i]), x1 = par_cuda__ld(xv[i + half]);
            yv[i] = par_cuda__st<T>(x0 * c - x1 * s);
            yv[i + half] = par_cuda__st<T>(x1 * c + x0 * s);
        }
    }
}

/* ------------------------------------------------------------- swiglu */

template <typename T> __global__ void par_cuda__swiglu_fwd_k(int64_t n, const T *g, const T *u, T *h) {
    PAR_CUDA__GRID_STRIDE(i, n) {
        const float gi = par_cuda__ld(g[i]);
        h[i] = par_cuda__st<T>(gi / (1.0f + expf(-gi)) * par_cuda__ld(u[i]));
    }
}

/* Every input of element i is read before dg[i], du[i] are written (they may equal g, u). */
template <typename T>
__global__ void par_cuda__swiglu_bwd_k(int64_t n, const T *g, const T *u, const T *dh, T *dg, T *du) {
    PAR_CUDA__GRID_STRIDE(i, n) {
        const float gi = par_cuda__ld(g[i]), ui = par_cuda__ld(u[i]), d = par_cuda__ld(dh[i]);
        const float s = 1.0f / (1.0f + expf(-gi));
        dg[i] = par_cuda__st<T>(d * ui * (s * (1.0f + gi * (1.0f - s))));
        du[i] = par_cuda__st<T>(d * gi * s);
    }
}

/* ---------------------------------------------------------- embedding */

/* A row of the shard is copied as stored (T to T: no rounding at all). */
template <typename T>
__global__ void par_cuda__embedding_fwd_k(int64_t n, const int32_t *ids, const T *table, int64_t rows, int64_t dim,
                                          int64_t start, T *out, int *flags) {
    PAR_CUDA__GRID_STRIDE(idx, n * dim) {
        const int64_t t = idx / dim, j = idx % dim;
        const int64_t id = ids[t], r = id - start;
        if (id < 0 && j == 0) atomicOr(flags, PAR_CUDA__FLAG_EMB_NEGATIVE);
        if (id >= 0 && r >= 0 && r < rows)
            out[idx] = table[r * dim + j];
        else
            out[idx] = par_cuda__st<T>(0.0f);
    }
}

/* dtable is f32 whatever T is: the widened dout is added with an f32 atomicAdd. */
template <typename T>
__global__ void par_cuda__embedding_bwd_k(int64_t n, const int32_t *ids, const T *dout, int64_t rows, int64_t dim,
                                          int64_t start, float *dtable, int *flags) {
    PAR_CUDA__GRID_STRIDE(idx, n * dim) {
        const int64_t t = idx / dim, j = idx % dim;
        const int64_t id = ids[t], r = id - start;
        if (id < 0) {
            if (j == 0) atomicOr(flags, PAR_CUDA__FLAG_EMB_NEGATIVE);
        } else if (r >= 0 && r < rows) {
            atomicAdd(dtable + r * dim + j, par_cuda__ld(dout[idx]));
        }
    }
}

/* ------------------------------------------------------ cross-entropy */

/* One block per row. Every read of a row's logits but x[j] by the thread that
   writes d[j] happens before the block_sum barrier, so dlogits may alias
   logits (same T). */
template <typename T>
__global__ void par_cuda__xent_k(int64_t rows, int64_t vocab, const T *logits, const int32_t *targets, float *loss,
                                 T *dlogits, float scale, int *flags) {
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
        const T *x = logits + r * vocab;
        T *d = dlogits ? dlogits + r * vocab : NULL;
        const int32_t tg = targets[r];
        if (tg < 0 || tg >= vocab) { /* the same branch for the whole block */
            __syncthreads();         /* the previous row's reads of x are done */
            if (threadIdx.x == 0) {
                loss[r] = tg < 0 ? 0.0f : NAN;
                if (tg >= vocab) atomicOr(flags, PAR_CUDA__FLAG_XENT_TARGET);
            }
            if (d)
                for (int64_t j = threadIdx.x; j < vocab; j += blockDim.x) d[j] = par_cuda__st<T>(0.0f);
            continue;
        }
        float mx = -INFINITY;
        for (int64_t j = threadIdx.x; j < vocab; j += blockDim.x) mx = fmaxf(mx, par_cuda__ld(x[j]));
        mx = par_cuda__block_max(mx);
        const float xt = par_cuda__ld(x[tg]);
        double s = 0;
        for (int64_t j = threadIdx.x; j < vocab; j += blockDim.x) s += (double)expf(par_cuda__ld(x[j]) - mx);
        s = par_cuda__block_sum(s);
        if (threadIdx.x == 0) loss[r] = (float)(log(s) + (double)mx - (double)xt);
        if (d) {
            const float inv = (float)(1.0 / s);
            for (int64_t j = threadIdx.x; j < vocab; j += blockDim.x) {
                const float v = expf(par_cuda__ld(x[j]) - mx) * inv * scale;
                d[j] = par_cuda__st<T>(j == tg ? (expf(xt - mx) * inv - 1.0f) * scale : v);
            }
        }
    }
}

template <typename T> __global__ void par_cuda__xent_max_k(int64_t rows, int64_t v, const T *logits, float *out) {
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
        float mx = -INFINITY;
        for (int64_t j = threadIdx.x; j < v; j += blockDim.x) mx = fmaxf(mx, par_cuda__ld(logits[r * v + j]));
        mx = par_cuda__block_max(mx);
        if (threadIdx.x == 0) out[r] = mx;
    }
}

template <typename T>
__global__ void par_cuda__xent_sumexp_k(int64_t rows, int64_t v, const T *logits, const float *gmax, float *out) {
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
        const float mx = gmax[r];
        double s = 0;
        for (int64_t j = threadIdx.x; j < v; j += blockDim.x) s += (double)expf(par_cuda__ld(logits[r * v + j]) - mx);
        s = par_cuda__block_sum(s);
        if (threadIdx.x == 0) out[r] = (float)s;
    }
}

template <typename T>
__global__ void par_cuda__xent_target_k(int64_t rows, int64_t v, const T *logits, const int32_t *targets,
                                        int64_t start, float *out) {
    PAR_CUDA__GRID_STRIDE(r, rows) {
        const int64_t j = (int64_t)targets[r] - start;
        out[r] = (targets[r] >= 0 && j >= 0 && j < v) ? par_cuda__ld(logits[r * v + j]) : 0.0f;
    }
}

__global__ void par_cuda__xent_pieces_k(int64_t rows, const float *gmax, const float *gsum, const float *tgt,
                                        const int32_t *targets, float *loss) {
    PAR_CUDA__GRID_STRIDE(r, rows) {
        loss[r] = targets[r] < 0 ? 0.0f : (float)(log((double)gsum[r]) + (double)gmax[r] - (double)tgt[r]);
    }
}

/* Element idx is read and written by one thread: d may alias logits. */
template <typename T>
__global__ void par_cuda__xent_bwd_split_k(int64_t rows, int64_t v, const T *logits, const int32_t *targets,
                                           int64_t start, const float *gmax, const float *gsum, float scale, T *d) {
    PAR_CUDA__GRID_STRIDE(idx, rows * v) {
        const int64_t r = idx / v, j = idx % v;
        const int32_t tg = targets[r];
        if (tg < 0) {
            d[idx] = par_cuda__st<T>(0.0f);
        } else {
            const float inv = (float)(1.0 / (double)gsum[r]);
            float val = expf(par_cuda__ld(logits[idx]) - gmax[r]) * inv * scale;
            if ((int64_t)tg - start == j) val -= scale;
            d[idx] = par_cuda__st<T>(val);
        }
    }
}

/* ------------------------------------------------- optimizer, blas-1 */

/* dst = src between float types (f32, bf16, f16): through f32, rounded to nearest even on store. */
template <typename S, typename D> __global__ void par_cuda__convert_k(int64_t n, const S *src, D *dst) {
    PAR_CUDA__GRID_STRIDE(i, n) { dst[i] = par_cuda__st<D>(par_cuda__ld(src[i])); }
}

__global__ void par_cuda__adamw_k(int64_t n, float *p, const float *g, float *m, float *v, float beta1, float beta2,
                                  float eps, float step_size, float inv_sqrt_bc2, float decay) {
    PAR_CUDA__GRID_STRIDE(i, n) {
        const float gi = g[i];
        const float mi = beta1 * m[i] + (1.0f - beta1) * gi;
        const float vi = beta2 * v[i] + (1.0f - beta2) * gi * gi;
        m[i] = mi;
        v[i] = vi;
        p[i] = p[i] * decay - step_size * mi / (sqrtf(vi) * inv_sqrt_bc2 + eps);
    }
}

__global__ void par_cuda__scale_k(int64_t n, float alpha, float *x) {
    PAR_CUDA__GRID_STRIDE(i, n) x[i] *= alpha;
}

/* y = y + alpha x in f32 (as y[i] += alpha * x[i] for T = float), y rounded once. */
template <typename T> __global__ void par_cuda__axpy_k(int64_t n, float alpha, const T *x, T *y) {
    PAR_CUDA__GRID_STRIDE(i, n) y[i] = par_cuda__st<T>(par_cuda__ld(y[i]) + alpha * par_cuda__ld(x[i]));
}

/* Two passes (fixed grid, then one block) so the sum is deterministic. */
__global__ void par_cuda__sumsq_part_k(int64_t n, const float *x, double *part) {
    double s = 0;
    PAR_CUDA__GRID_STRIDE(i, n) s += (double)x[i] * x[i];
    s = par_cuda__block_sum(s);
    if (threadIdx.x == 0) part[blockIdx.x] = s;
}

__global__ void par_cuda__sum_parts_k(int parts, const double *part, double *out) {
    double s = 0;
    for (int i = threadIdx.x; i < parts; i += blockDim.x) s += part[i];
    s = par_cuda__block_sum(s);
    if (threadIdx.x == 0) *out = s;
}

/* --------------------------------------------------------- attention

   Layouts as par_attn_desc: q, o, do [b, q_len, q_heads, d], k, v [b, k_len,
   kv_heads, d], lse and the backward's D [b, q_heads, q_len]. One warp owns one
   row (a query in forward and dq, a key in dk/dv); a block of PAR_CUDA__AW warps
   shares tiles of the other side in shared memory (converted to f32), and in
   the tile each lane owns one key (or query) for the dot products, then the
   lanes own channels c = lane + 32*cc (cc < NC, NC = ceil(d/32)) for the
   accumulations. Tiles are BT rows; rows are padded to DP+1 floats so that
   lanes reading different rows at the same channel hit different banks.
   Causal tiles that no row of the block can see are skipped block-wide. */

#define PAR_CUDA__AW 4 /* warps per attention block */

struct par_cuda__attn_args {
    int batch, q_heads, kv_heads, head_dim, group, causal;
    int64_t q_len, k_len;
    float scale;
    const int64_t *q_pos, *k_pos;
};

__device__ __forceinline__ int64_t par_cuda__pos(const int64_t *pos, int64_t i) { return pos ? pos[i] : i; }

template <typename T, int NC, int BT>
__global__ void __launch_bounds__(PAR_CUDA__AW * 32)
    par_cuda__attn_fwd_k(par_cuda__attn_args a, const T *q, const T *k, const T *v, T *o, float *lse) {
    constexpr int DP = NC * 32;
    __shared__ float ks[BT][DP + 1];
    __shared__ float vs[BT][DP];
    __shared__ float qs[PAR_CUDA__AW][DP];
    __shared__ long long kp[BT];
    __shared__ long long qp_w[PAR_CUDA__AW];
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, D = a.head_dim;
    const int b = blockIdx.z, h = blockIdx.y, g = h / a.group;
    const int64_t i = (int64_t)blockIdx.x * PAR_CUDA__AW + w;
    const bool active = i < a.q_len;
    const int64_t qstride = (int64_t)a.q_heads * D, kstride = (int64_t)a.kv_heads * D;
    const T *kb = k + (int64_t)b * a.k_len * kstride + (int64_t)g * D;
    const T *vb = v + (int64_t)b * a.k_len * kstride + (int64_t)g * D;
    const int64_t qrow = ((int64_t)b * a.q_len + i) * qstride + (int64_t)h * D;
    const long long qp = active ? (long long)par_cuda__pos(a.q_pos, i) : LLONG_MIN;
    float m = -INFINITY, l = 0.0f, acc[NC];
    long long qmax = LLONG_MIN;

    for (int c = lane; c < DP; c += 32) qs[w][c] = active && c < D ? par_cuda__ld(q[qrow + c]) : 0.0f;
    for (int cc = 0; cc < NC; cc++) acc[cc] = 0.0f;
    if (lane == 0) qp_w[w] = qp;
    __syncthreads();
    for (int ww = 0; ww < PAR_CUDA__AW; ww++) qmax = qp_w[ww] > qmax ? qp_w[ww] : qmax;

    for (int64_t j0 = 0; j0 < a.k_len; j0 += BT) {
        const int nk = (int)(a.k_len - j0 < BT ? a.k_len - j0 : BT);
        const int t = threadIdx.x;
        __syncthreads(); /* everyone is done with the previous tile */
        if (a.causal) {
            const int vis = t < nk && (long long)par_cuda__pos(a.k_pos, j0 + t) <= qmax;
            if (!__syncthreads_or(vis)) continue;
        }
        for (int idx = t; idx < nk * D; idx += blockDim.x) {
            const int jj = idx / D, c = idx % D;
            ks[jj][c] = par_cuda__ld(kb[(j0 + jj) * kstride + c]);
            vs[jj][c] = par_cuda__ld(vb[(j0 + jj) * kstride + c]);
        }
        if (t < BT) kp[t] = t < nk ? (long long)par_cuda__pos(a.k_pos, j0 + t) : 0;
        __syncthreads();
        if (active) { /* warp-uniform */
            float s = -INFINITY;
            if (lane < nk && (!a.causal || kp[lane] <= qp)) {
                float dot = 0.0f;
                for (int c = 0; c < D; c++) dot += qs[w][c] * ks[lane][c];
                s = dot * a.scale;
            }
            const float mx = par_cuda__warp_max(s);
            if (mx != -INFINITY) {
                const float mn = fmaxf(m, mx);
                const float alpha = expf(m - mn); /* 0 while m is -inf */
                const float p = s == -INFINITY ? 0.0f : expf(s - mn);
                l = l * alpha + par_cuda__warp_sum(p);
                m = mn;
                for (int cc = 0; cc < NC; cc++) acc[cc] *= alpha;
                for (int jj = 0; jj < nk; jj++) {
                    const float pj = __shfl_sync(PAR_CUDA__FULL, p, jj);
                    for (int cc = 0; cc < NC; cc++) {
                        const int c = lane + 32 * cc;
                        if (c < D) acc[cc] += pj * vs[jj][c];
                    }
                }
            }
        }
    }
    if (active) {
        const float inv = l > 0.0f ? 1.0f / l : 0.0f;
        for (int cc = 0; cc < NC; cc++) {
            const int c = lane + 32 * cc;
            if (c < D) o[qrow + c] = par_cuda__st<T>(l > 0.0f ? acc[cc] * inv : 0.0f);
        }
        if (lane == 0) lse[((int64_t)b * a.q_heads + h) * a.q_len + i] = l > 0.0f ? m + logf(l) : -INFINITY;
    }
}

/* D[b,h,i] = sum_c dO * O, one warp per (b, i, h) row. */
template <typename T>
__global__ void par_cuda__attn_dsum_k(par_cuda__attn_args a, const T *o, const T *dout, float *dsum) {
    const int64_t rows = (int64_t)a.batch * a.q_len * a.q_heads;
    const int lane = threadIdx.x & 31, D = a.head_dim;
    const int64_t warps = (int64_t)gridDim.x * (blockDim.x >> 5);
    for (int64_t r = (int64_t)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5); r < rows; r += warps) {
        const int64_t h = r % a.q_heads, i = (r / a.q_heads) % a.q_len, b = r / ((int64_t)a.q_heads * a.q_len);
        float s = 0.0f;
        for (int c = lane; c < D; c += 32) s += par_cuda__ld(dout[r * D + c]) * par_cuda__ld(o[r * D + c]);
        s = par_cuda__warp_sum(s);
        if (lane == 0) dsum[(b * a.q_heads + h) * a.q_len + i] = s;
    }
}

/* dQ = scale * sum_j dS_ij k_j with dS = P (dP - D), P = exp(S - lse). */
template <typename T, int NC, int BT>
__global__ void __launch_bounds__(PAR_CUDA__AW * 32)
    par_cuda__attn_dq_k(par_cuda__attn_args a, const T *q, const T *k, const T *v, const float *lse,
                        const float *dsum, const T *dout, T *dq, int accumulate) {
    constexpr int DP = NC * 32;
    __shared__ float ks[BT][DP + 1];
    __shared__ float vs[BT][DP + 1];
    __shared__ float qs[PAR_CUDA__AW][DP];
    __shared__ float dos[PAR_CUDA__AW][DP];
    __shared__ long long kp[BT];
    __shared__ long long qp_w[PAR_CUDA__AW];
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, D = a.head_dim;
    const int b = blockIdx.z, h = blockIdx.y, g = h / a.group;
    const int64_t i = (int64_t)blockIdx.x * PAR_CUDA__AW + w;
    const bool active = i < a.q_len;
    const int64_t qstride = (int64_t)a.q_heads * D, kstride = (int64_t)a.kv_heads * D;
    const T *kb = k + (int64_t)b * a.k_len * kstride + (int64_t)g * D;
    const T *vb = v + (int64_t)b * a.k_len * kstride + (int64_t)g * D;
    const int64_t qrow = ((int64_t)b * a.q_len + i) * qstride + (int64_t)h * D;
    const int64_t lrow = ((int64_t)b * a.q_heads + h) * a.q_len + i;
    const float L = active ? lse[lrow] : -INFINITY;
    const float Di = active ? dsum[lrow] : 0.0f;
    const bool live = active && L != -INFINITY; /* a row that saw no key has zero gradients */
    const long long qp = live ? (long long)par_cuda__pos(a.q_pos, i) : LLONG_MIN;
    float acc[NC];
    long long qmax = LLONG_MIN;

    for (int c = lane; c < DP; c += 32) {
        qs[w][c] = active && c < D ? par_cuda__ld(q[qrow + c]) : 0.0f;
        dos[w][c] = active && c < D ? par_cuda__ld(dout[qrow + c]) : 0.0f;
    }
    for (int cc = 0; cc < NC; cc++) acc[cc] = 0.0f;
    if (lane == 0) qp_w[w] = qp;
    __syncthreads();
    for (int ww = 0; ww < PAR_CUDA__AW; ww++) qmax = qp_w[ww] > qmax ? qp_w[ww] : qmax;

    for (int64_t j0 = 0; j0 < a.k_len; j0 += BT) {
        const int nk = (int)(a.k_len - j0 < BT ? a.k_len - j0 : BT);
        const int t = threadIdx.x;
        __syncthreads();
        {
            /* Skip tiles no live row of the block can see (all rows dead: every tile). */
            const int vis = t < nk && qmax != LLONG_MIN &&
                            (!a.causal || (long long)par_cuda__pos(a.k_pos, j0 + t) <= qmax);
            if (!__syncthreads_or(vis)) continue;
        }
        for (int idx = t; idx < nk * D; idx += blockDim.x) {
            const int jj = idx / D, c = idx % D;
            ks[jj][c] = par_cuda__ld(kb[(j0 + jj) * kstride + c]);
            vs[jj][c] = par_cuda__ld(vb[(j0 + jj) * kstride + c]);
        }
        if (t < BT) kp[t] = t < nk ? (long long)par_cuda__pos(a.k_pos, j0 + t) : 0;
        __syncthreads();
        if (live) { /* warp-uniform */
            float ds = 0.0f;
            if (lane < nk && (!a.causal || kp[lane] <= qp)) {
                float dot = 0.0f, dp = 0.0f;
                for (int c = 0; c < D; c++) {
                    dot += qs[w][c] * ks[lane][c];
                    dp += dos[w][c] * vs[lane][c];
                }
                const float p = expf(dot * a.scale - L);
                ds = p * (dp - Di);
            }
            for (int jj = 0; jj < nk; jj++) {
                const float dsj = __shfl_sync(PAR_CUDA__FULL, ds, jj);
                for (int cc = 0; cc < NC; cc++) {
                    const int c = lane + 32 * cc;
                    if (c < D) acc[cc] += dsj * ks[jj][c];
                }
            }
        }
    }
    if (active) {
        for (int cc = 0; cc < NC; cc++) {
            const int c = lane + 32 * cc;
            if (c < D) {
                float val = acc[cc] * a.scale;
                if (accumulate) val += par_cuda__ld(dq[qrow + c]);
                dq[qrow + c] = par_cuda__st<T>(val);
            }
        }
    }
}

/* dV_j = sum_i P_ij dO_i and dK_j = scale * sum_i dS_ij q_i over every query i of
   every q head of kv head g: one warp per key, so no two blocks write one row. */
template <typename T, int NC, int BT>
__global__ void __launch_bounds__(PAR_CUDA__AW * 32)
    par_cuda__attn_dkdv_k(par_cuda__attn_args a, const T *q, const T *k, const T *v, const float *lse,
                          const float *dsum, const T *dout, T *dk, T *dv, int accumulate) {
    constexpr int DP = NC * 32;
    __shared__ float qt[BT][DP + 1];
    __shared__ float dot_t[BT][DP + 1];
    __shared__ float kw[PAR_CUDA__AW][DP];
    __shared__ float vw[PAR_CUDA__AW][DP];
    __shared__ float lt[BT], dt[BT];
    __shared__ long long qpt[BT];
    __shared__ long long kp_w[PAR_CUDA__AW];
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, D = a.head_dim;
    const int b = blockIdx.z, g = blockIdx.y;
    const int64_t j = (int64_t)blockIdx.x * PAR_CUDA__AW + w;
    const bool active = j < a.k_len;
    const int64_t qstride = (int64_t)a.q_heads * D, kstride = (int64_t)a.kv_heads * D;
    const int64_t krow = ((int64_t)b * a.k_len + j) * kstride + (int64_t)g * D;
    const long long kpj = active ? (long long)par_cuda__pos(a.k_pos, j) : LLONG_MAX;
    float dka[NC], dva[NC];
    long long kmin = LLONG_MAX;

    for (int c = lane; c < DP; c += 32) {
        kw[w][c] = active && c < D ? par_cuda__ld(k[krow + c]) : 0.0f;
        vw[w][c] = active && c < D ? par_cuda__ld(v[krow + c]) : 0.0f;
    }
    for (int cc = 0; cc < NC; cc++) dka[cc] = dva[cc] = 0.0f;
    if (lane == 0) kp_w[w] = kpj;
    __syncthreads();
    for (int ww = 0; ww < PAR_CUDA__AW; ww++) kmin = kp_w[ww] < kmin ? kp_w[ww] : kmin;

    for (int hq = 0; hq < a.group; hq++) {
        const int h = g * a.group + hq;
        const T *qb = q + (int64_t)b * a.q_len * qstride + (int64_t)h * D;
        const T *db = dout + (int64_t)b * a.q_len * qstride + (int64_t)h * D;
        const float *lb = lse + ((int64_t)b * a.q_heads + h) * a.q_len;
        const float *dsb = dsum + ((int64_t)b * a.q_heads + h) * a.q_len;
        for (int64_t i0 = 0; i0 < a.q_len; i0 += BT) {
            const int nq = (int)(a.q_len - i0 < BT ? a.q_len - i0 : BT);
            const int t = threadIdx.x;
            __syncthreads();
            {
                const int vis = t < nq && kmin != LLONG_MAX && lb[i0 + t] != -INFINITY &&
                                (!a.causal || (long long)par_cuda__pos(a.q_pos, i0 + t) >= kmin);
                if (!__syncthreads_or(vis)) continue;
            }
            for (int idx = t; idx < nq * D; idx += blockDim.x) {
                const int ii = idx / D, c = idx % D;
                qt[ii][c] = par_cuda__ld(qb[(i0 + ii) * qstride + c]);
                dot_t[ii][c] = par_cuda__ld(db[(i0 + ii) * qstride + c]);
            }
            if (t < BT) {
                lt[t] = t < nq ? lb[i0 + t] : -INFINITY;
                dt[t] = t < nq ? dsb[i0 + t] : 0.0f;
                qpt[t] = t < nq ? (long long)par_cuda__pos(a.q_pos, i0 + t) : LLONG_MIN;
            }
            __syncthreads();
            if (active) { /* warp-uniform */
                float p = 0.0f, ds = 0.0f;
                if (lane < nq && lt[lane] != -INFINITY && (!a.causal || kpj <= qpt[lane])) {
                    float dot = 0.0f, dp = 0.0f;
                    for (int c = 0; c < D; c++) {
                        dot += qt[lane][c] * kw[w][c];
                        dp += dot_t[lane][c] * vw[w][c];
                    }
                    p = expf(dot * a.scale - lt[lane]);
                    ds = p * (dp - dt[lane]);
                }
                for (int ii = 0; ii < nq; ii++) {
                    const float pi = __shfl_sync(PAR_CUDA__FULL, p, ii);
                    const float dsi = __shfl_sync(PAR_CUDA__FULL, ds, ii);
                    for (int cc = 0; cc < NC; cc++) {
                        const int c = lane + 32 * cc;
                        if (c < D) {
                            dva[cc] += pi * dot_t[ii][c];
                            dka[cc] += dsi * qt[ii][c];
                        }
                    }
                }
            }
        }
    }
    if (active) {
        for (int cc = 0; cc < NC; cc++) {
            const int c = lane + 32 * cc;
            if (c < D) {
                float kval = dka[cc] * a.scale, vval = dva[cc];
                if (accumulate) {
                    kval += par_cuda__ld(dk[krow + c]);
                    vval += par_cuda__ld(dv[krow + c]);
                }
                dk[krow + c] = par_cuda__st<T>(kval);
                dv[krow + c] = par_cuda__st<T>(vval);
            }
        }
    }
}

/* ------------------------------------------- attention on tensor cores

   FlashAttention-2 style kernels for bf16/f16 with head_dim 64 or 128 on
   sm_80+: warp-level mma.sync.m16n8k16 (bf16/f16 in, f32 accumulate). Same
   contract and masking as the SIMT kernels above; only the arithmetic order
   and one rounding differ: the probabilities P (forward, dV) and dS (dQ, dK)
   are rounded to the dtype before they enter the tensor cores, as in
   FlashAttention-2; scores, the online softmax, l, m and every accumulator
   stay f32, and outputs are rounded to the dtype once.

   Blocks are 4 warps. Forward and dQ: a block owns 64 queries (16 per warp) of
   one q head and walks 64-key tiles staged in shared memory. dK/dV: a block
   owns 64 keys (16 per warp) of one kv head and walks 32-query tiles of every
   q head of its group. Every output row is written by exactly one warp, so the
   backward is deterministic (no atomics). Tiles are staged as raw 16-bit
   values, rows padded to D + 8 elements (row pitch = 4 banks mod 32, which
   makes the fragment reads below conflict-free); rows past q_len / k_len are
   zero-filled and masked.

   mma.m16n8k16 fragments (PTX ISA, "Matrix Fragments for mma.m16n8k16 with
   floating point type"), lane = 4 * g + t (g = groupID 0..7, t = 0..3):
     A 16x16 (row-major), 4 regs of 2 elements (low half = lower column):
       a0 = A[g][2t, 2t+1]   a1 = A[g+8][2t, 2t+1]
       a2 = A[g][2t+8, +9]   a3 = A[g+8][2t+8, +9]
     B 16x8 (k x n), 2 regs:  b0 = B[2t, 2t+1][g]   b1 = B[2t+8, 2t+9][g]
     C 16x8 f32, 4 floats:    c0, c1 = C[g][2t, 2t+1]   c2, c3 = C[g+8][2t, 2t+1]
   Example, lane 13 (g = 3, t = 1): a0 holds A[3][2..3], a3 holds A[11][10..11],
   b1 holds B[10..11][3], c2 holds C[11][2]. */

#define PAR_CUDA__FA_BQ 64 /* queries per block (forward, dQ) */
#define PAR_CUDA__FA_BK 64 /* keys per tile (forward, dQ) and per block (dK/dV) */
#define PAR_CUDA__FA_BQ2 32 /* queries per tile in dK/dV (fewer live registers) */
#define PAR_CUDA__FA_THREADS 128
#define PAR_CUDA__LOG2E 1.4426950408889634f
#define PAR_CUDA__LN2 0.6931471805599453f

typedef unsigned short par_cuda__u16;

/* Two consecutive 16-bit elements (p 4-byte aligned) as one mma register. */
__host__ __device__ __forceinline__ uint32_t par_cuda__ld2(const par_cuda__u16 *p) {
#ifdef __CUDA_ARCH__
    return *(const uint32_t *)p;
#else
    return (uint32_t)p[0] | ((uint32_t)p[1] << 16);
#endif
}
__host__ __device__ __forceinline__ uint32_t par_cuda__pack2(par_cuda__u16 lo, par_cuda__u16 hi) {
    return (uint32_t)lo | ((uint32_t)hi << 16);
}

/* A fragment of rows r0..r0+15, columns k0..k0+15 of a row-major tile s
   (pitch elements per row): see the layout above. */
__host__ __device__ __forceinline__ void par_cuda__frag_a(const par_cuda__u16 *s, int pitch, int r0, int k0,
                                                          int lane, uint32_t a[4]) {
    const par_cuda__u16 *p = s + (r0 + (lane >> 2)) * pitch + k0 + 2 * (lane & 3);
    a[0] = par_cuda__ld2(p);
    a[1] = par_cuda__ld2(p + 8 * pitch);
    a[2] = par_cuda__ld2(p + 8);
    a[3] = par_cuda__ld2(p + 8 * pitch + 8);
}

/* B fragment (k0..k0+15) x (n0..n0+7) where B[kk][nn] = s[n0 + nn][k0 + kk]:
   the tile's rows are B's columns (K for Q K^T, Q for K Q^T), so the two
   elements of a register are adjacent in memory. */
__host__ __device__ __forceinline__ void par_cuda__frag_b_rows_n(const par_cuda__u16 *s, int pitch, int n0, int k0,
                                                                 int lane, uint32_t b[2]) {
    const par_cuda__u16 *p = s + (n0 + (lane >> 2)) * pitch + k0 + 2 * (lane & 3);
    b[0] = par_cuda__ld2(p);
    b[1] = par_cuda__ld2(p + 8);
}

/* B fragment where B[kk][nn] = s[k0 + kk][n0 + nn]: the tile's rows are B's
   rows (V for P V, K for dS K, Q and dO for dK and dV), so a register's two
   elements come from two rows. Lane 13 (g = 3, t = 1): b0 = (s[k0+2][n0+3],
   s[k0+3][n0+3]), b1 = (s[k0+10][n0+3], s[k0+11][n0+3]). */
__host__ __device__ __forceinline__ void par_cuda__frag_b_rows_k(const par_cuda__u16 *s, int pitch, int k0, int n0,
                                                                 int lane, uint32_t b[2]) {
    const par_cuda__u16 *p = s + (k0 + 2 * (lane & 3)) * pitch + n0 + (lane >> 2);
    b[0] = par_cuda__pack2(p[0], p[pitch]);
    b[1] = par_cuda__pack2(p[8 * pitch], p[9 * pitch]);
}

/* Round two floats to the dtype and pack them (lo in the low half). */
template <typename T> __host__ __device__ __forceinline__ uint32_t par_cuda__pack_f2(float lo, float hi);
template <> __host__ __device__ __forceinline__ uint32_t par_cuda__pack_f2<__nv_bfloat16>(float lo, float hi) {
    __nv_bfloat16_raw a = __float2bfloat16_rn(lo), b = __float2bfloat16_rn(hi);
    return par_cuda__pack2(a.x, b.x);
}
template <> __host__ __device__ __forceinline__ uint32_t par_cuda__pack_f2<__half>(float lo, float hi) {
    __half_raw a = __float2half_rn(lo), b = __float2half_rn(hi);
    return par_cuda__pack2(a.x, b.x);
}

/* Accumulator tiles -> A fragment: C tiles c0 (columns 0..7) and c1 (columns
   8..15) of a 16-row result become the A operand of the next product, 16 wide:
   a0 = (row g, cols 2t, 2t+1) = c0[0], c0[1]; a1 = row g+8 = c0[2], c0[3];
   a2 = (row g, cols 8+2t, 9+2t) = c1[0], c1[1]; a3 = c1[2], c1[3]. */
template <typename T>
__host__ __device__ __forceinline__ void par_cuda__frag_c_to_a(const float c0[4], const float c1[4], uint32_t a[4]) {
    a[0] = par_cuda__pack_f2<T>(c0[0], c0[1]);
    a[1] = par_cuda__pack_f2<T>(c0[2], c0[3]);
    a[2] = par_cuda__pack_f2<T>(c1[0], c1[1]);
    a[3] = par_cuda__pack_f2<T>(c1[2], c1[3]);
}

/* c += A B on the tensor cores (one warp, all lanes). Only reached on sm_80+:
   the host picks these kernels only when they were compiled for sm_80+. */
template <typename T> __device__ __forceinline__ void par_cuda__mma(float c[4], const uint32_t a[4], const uint32_t b[2]);
template <>
__device__ __forceinline__ void par_cuda__mma<__nv_bfloat16>(float c[4], const uint32_t a[4], const uint32_t b[2]) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#else
    (void)c, (void)a, (void)b;
    __trap();
#endif
}
template <> __device__ __forceinline__ void par_cuda__mma<__half>(float c[4], const uint32_t a[4], const uint32_t b[2]) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#else
    (void)c, (void)a, (void)b;
    __trap();
#endif
}

/* Two products side by side over the head dim, for this warp's 16 rows from r0
   and NT tiles of 8 columns: c1 = A1 B1^T and c2 = A2 B2^T (row-major tiles of
   pitch P; B's rows are the columns). The backward needs S and dP (dQ kernel:
   Q K^T and dO V^T) or their transposes (dK/dV kernel: K Q^T and V dO^T). */
template <typename T, int NT, int KD>
__device__ __forceinline__ void par_cuda__mma_pair(const par_cuda__u16 *a1, const par_cuda__u16 *b1,
                                                   const par_cuda__u16 *a2, const par_cuda__u16 *b2, int P, int r0,
                                                   int lane, float c1[NT][4], float c2[NT][4]) {
    for (int nt = 0; nt < NT; nt++) {
        c1[nt][0] = c1[nt][1] = c1[nt][2] = c1[nt][3] = 0.0f;
        c2[nt][0] = c2[nt][1] = c2[nt][2] = c2[nt][3] = 0.0f;
        for (int kk = 0; kk < KD; kk++) {
            uint32_t af[4], bf[2];
            par_cuda__frag_a(a1, P, r0, kk * 16, lane, af);
            par_cuda__frag_b_rows_n(b1, P, nt * 8, kk * 16, lane, bf);
            par_cuda__mma<T>(c1[nt], af, bf);
            par_cuda__frag_a(a2, P, r0, kk * 16, lane, af);
            par_cuda__frag_b_rows_n(b2, P, nt * 8, kk * 16, lane, bf);
            par_cuda__mma<T>(c2[nt], af, bf);
        }
    }
}

/* Copy rows r0..r0+rows-1 of a [len, stride] tensor (D elements from src) into
   a [rows][D + 8] tile, 16 bytes per thread and step; rows >= len become zero. */
template <typename T, int D>
__device__ __forceinline__ void par_cuda__fa_stage(par_cuda__u16 *dst, const T *src, int64_t stride, int64_t r0,
                                                   int64_t len, int rows) {
    constexpr int CH = D / 8;
    for (int idx = threadIdx.x; idx < rows * CH; idx += blockDim.x) {
        const int r = idx / CH, c = (idx % CH) * 8;
        uint4 val = make_uint4(0u, 0u, 0u, 0u);
        if (r0 + r < len) val = *(const uint4 *)(src + (r0 + r) * stride + c);
        *(uint4 *)(dst + r * (D + 8) + c) = val;
    }
}

/* Store an output pair (columns c, c+1 of one row) rounded to T, optionally
   adding what is there. */
template <typename T>
__device__ __forceinline__ void par_cuda__fa_put2(T *p, float x0, float x1, int accumulate) {
    if (accumulate) {
        x0 += par_cuda__ld(p[0]);
        x1 += par_cuda__ld(p[1]);
    }
    *(uint32_t *)p = par_cuda__pack_f2<T>(x0, x1);
}

__device__ __forceinline__ long long par_cuda__warp_max_ll(long long v) {
    for (int o = 16; o > 0; o >>= 1) {
        const long long u = __shfl_xor_sync(PAR_CUDA__FULL, v, o);
        v = u > v ? u : v;
    }
    return v;
}
__device__ __forceinline__ long long par_cuda__warp_min_ll(long long v) {
    for (int o = 16; o > 0; o >>= 1) {
        const long long u = __shfl_xor_sync(PAR_CUDA__FULL, v, o);
        v = u < v ? u : v;
    }
    return v;
}

/* Max over the 4 lanes of a quad (the lanes holding one accumulator row). */
__device__ __forceinline__ float par_cuda__quad_max(float v) {
    v = fmaxf(v, __shfl_xor_sync(PAR_CUDA__FULL, v, 1));
    return fmaxf(v, __shfl_xor_sync(PAR_CUDA__FULL, v, 2));
}
__device__ __forceinline__ float par_cuda__quad_sum(float v) {
    v += __shfl_xor_sync(PAR_CUDA__FULL, v, 1);
    return v + __shfl_xor_sync(PAR_CUDA__FULL, v, 2);
}

/* Bytes of dynamic shared memory of each kernel (tiles + positions/stats). */
template <int D> static constexpr size_t par_cuda__fa_fwd_smem() {
    return (size_t)(PAR_CUDA__FA_BQ + 2 * PAR_CUDA__FA_BK) * (D + 8) * 2 + PAR_CUDA__FA_BK * 8;
}
template <int D> static constexpr size_t par_cuda__fa_dq_smem() {
    return (size_t)(2 * PAR_CUDA__FA_BQ + 2 * PAR_CUDA__FA_BK) * (D + 8) * 2 + PAR_CUDA__FA_BK * 8;
}
template <int D> static constexpr size_t par_cuda__fa_dkdv_smem() {
    return (size_t)(2 * PAR_CUDA__FA_BK + 2 * PAR_CUDA__FA_BQ2) * (D + 8) * 2 + PAR_CUDA__FA_BQ2 * 16;
}

/* Forward. Warp w owns block rows w*16 .. w*16+15; its lane holds rows
   rr[0] = w*16 + g and rr[1] = rr[0] + 8, i.e. accumulator elements 0,1 (row
   rr[0]) and 2,3 (row rr[1]) of every 8-column tile. Scores are kept in log2
   units (s * scale * log2 e) so that exp2f gives the exponentials. */
template <typename T, int D>
__global__ void __launch_bounds__(PAR_CUDA__FA_THREADS)
    par_cuda__fa_fwd_k(par_cuda__attn_args a, const T *q, const T *k, const T *v, T *o, float *lse) {
    constexpr int P = D + 8, BQ = PAR_CUDA__FA_BQ, BK = PAR_CUDA__FA_BK;
    constexpr int NT = BK / 8, KD = D / 16, ND = D / 8;
    extern __shared__ uint4 par_cuda__fa_smem[];
    par_cuda__u16 *qs = (par_cuda__u16 *)par_cuda__fa_smem;
    par_cuda__u16 *ks = qs + BQ * P, *vs = ks + BK * P;
    long long *kp = (long long *)(vs + BK * P); /* byte offset (BQ + 2 BK) P 2: a multiple of 8 */
    __shared__ long long red[PAR_CUDA__FA_THREADS / 32];
    const int tid = threadIdx.x, lane = tid & 31, w = tid >> 5, g = lane >> 2, t = lane & 3;
    const int b = blockIdx.z, h = blockIdx.y, kvh = h / a.group;
    /* Last query tile first: under a causal mask it has the most keys to visit. */
    const int64_t i0 = (int64_t)(gridDim.x - 1 - blockIdx.x) * BQ;
    const int64_t qstride = (int64_t)a.q_heads * D, kstride = (int64_t)a.kv_heads * D;
    const T *qb = q + (int64_t)b * a.q_len * qstride + (int64_t)h * D;
    const T *kb = k + (int64_t)b * a.k_len * kstride + (int64_t)kvh * D;
    const T *vb = v + (int64_t)b * a.k_len * kstride + (int64_t)kvh * D;
    const float sl2 = a.scale * PAR_CUDA__LOG2E;
    int64_t rr[2];
    long long qp[2], qmax;
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f}, acc[ND][4];
    uint32_t qf[KD][4];

    for (int r = 0; r < 2; r++) {
        rr[r] = i0 + w * 16 + g + 8 * r;
        qp[r] = rr[r] < a.q_len ? (long long)par_cuda__pos(a.q_pos, rr[r]) : LLONG_MIN;
    }
    qmax = par_cuda__warp_max_ll(qp[0] > qp[1] ? qp[0] : qp[1]);
    if (lane == 0) red[w] = qmax;
    par_cuda__fa_stage<T, D>(qs, qb, qstride, i0, a.q_len, BQ);
    for (int dn = 0; dn < ND; dn++) acc[dn][0] = acc[dn][1] = acc[dn][2] = acc[dn][3] = 0.0f;
    __syncthreads();
    for (int ww = 0; ww < PAR_CUDA__FA_THREADS / 32; ww++) qmax = red[ww] > qmax ? red[ww] : qmax;
    for (int kk = 0; kk < KD; kk++) par_cuda__frag_a(qs, P, w * 16, kk * 16, lane, qf[kk]);

    for (int64_t j0 = 0; j0 < a.k_len; j0 += BK) {
        const int nk = (int)(a.k_len - j0 < BK ? a.k_len - j0 : BK);
        float s[NT][4], mx[2] = {-INFINITY, -INFINITY}, base[2], alpha[2], psum[2] = {0.0f, 0.0f};
        __syncthreads(); /* everyone is done with the previous tile */
        if (a.causal) { /* skip a tile no query of the block can see */
            const int vis = tid < nk && (long long)par_cuda__pos(a.k_pos, j0 + tid) <= qmax;
            if (!__syncthreads_or(vis)) continue;
        }
        par_cuda__fa_stage<T, D>(ks, kb, kstride, j0, a.k_len, BK);
        par_cuda__fa_stage<T, D>(vs, vb, kstride, j0, a.k_len, BK);
        if (tid < BK) kp[tid] = tid < nk ? (long long)par_cuda__pos(a.k_pos, j0 + tid) : LLONG_MAX;
        __syncthreads();

        /* S = Q K^T: tile nt holds keys nt*8 .. nt*8+7. */
        for (int nt = 0; nt < NT; nt++) {
            s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.0f;
            for (int kk = 0; kk < KD; kk++) {
                uint32_t bf[2];
                par_cuda__frag_b_rows_n(ks, P, nt * 8, kk * 16, lane, bf);
                par_cuda__mma<T>(s[nt], qf[kk], bf);
            }
        }
        /* Mask: element e of tile nt is (row rr[e >> 1], key nt*8 + 2t + (e & 1)). */
        for (int nt = 0; nt < NT; nt++)
            for (int e = 0; e < 4; e++) {
                const int jj = nt * 8 + 2 * t + (e & 1), r = e >> 1;
                const bool ok = jj < nk && (!a.causal || kp[jj] <= qp[r]);
                s[nt][e] = ok ? s[nt][e] * sl2 : -INFINITY;
                mx[r] = fmaxf(mx[r], s[nt][e]);
            }
        for (int r = 0; r < 2; r++) {
            const float mn = fmaxf(m[r], par_cuda__quad_max(mx[r]));
            base[r] = mn == -INFINITY ? 0.0f : mn; /* a row that has seen nothing yet stays at p = 0 */
            alpha[r] = exp2f(m[r] - base[r]);     /* 0 while m is -inf */
            m[r] = mn;
        }
        for (int nt = 0; nt < NT; nt++)
            for (int e = 0; e < 4; e++) {
                const float p = exp2f(s[nt][e] - base[e >> 1]); /* -inf -> 0 */
                s[nt][e] = p;
                psum[e >> 1] += p;
            }
        for (int r = 0; r < 2; r++) l[r] = l[r] * alpha[r] + psum[r]; /* this lane's columns; quad-summed at the end */
        for (int dn = 0; dn < ND; dn++) {
            acc[dn][0] *= alpha[0], acc[dn][1] *= alpha[0];
            acc[dn][2] *= alpha[1], acc[dn][3] *= alpha[1];
        }
        /* O += P V: P's 16-key slices (tiles 2ks, 2ks+1) are the A operand. */
        for (int ks2 = 0; ks2 < BK / 16; ks2++) {
            uint32_t pf[4];
            par_cuda__frag_c_to_a<T>(s[2 * ks2], s[2 * ks2 + 1], pf);
            for (int dn = 0; dn < ND; dn++) {
                uint32_t bf[2];
                par_cuda__frag_b_rows_k(vs, P, ks2 * 16, dn * 8, lane, bf);
                par_cuda__mma<T>(acc[dn], pf, bf);
            }
        }
    }
    for (int r = 0; r < 2; r++) {
        const float lr = par_cuda__quad_sum(l[r]);
        if (rr[r] < a.q_len) {
            const float inv = lr > 0.0f ? 1.0f / lr : 0.0f;
            T *orow = o + ((int64_t)b * a.q_len + rr[r]) * qstride + (int64_t)h * D;
            for (int dn = 0; dn < ND; dn++)
                par_cuda__fa_put2<T>(orow + dn * 8 + 2 * t, acc[dn][2 * r] * inv, acc[dn][2 * r + 1] * inv, 0);
            if (t == 0)
                lse[((int64_t)b * a.q_heads + h) * a.q_len + rr[r]] =
                    lr > 0.0f ? m[r] * PAR_CUDA__LN2 + logf(lr) : -INFINITY;
        }
    }
}

/* dQ = scale * dS K with P = exp(S - lse), dS = P (dO V^T - D). Rows as in the
   forward (warp w: block rows w*16.., lane: rr[0], rr[1]). */
template <typename T, int D>
__global__ void __launch_bounds__(PAR_CUDA__FA_THREADS)
    par_cuda__fa_dq_k(par_cuda__attn_args a, const T *q, const T *k, const T *v, const float *lse, const float *dsum,
                      const T *dout, T *dq, int accumulate) {
    constexpr int P = D + 8, BQ = PAR_CUDA__FA_BQ, BK = PAR_CUDA__FA_BK;
    constexpr int NT = BK / 8, KD = D / 16, ND = D / 8;
    extern __shared__ uint4 par_cuda__fa_smem[];
    par_cuda__u16 *qs = (par_cuda__u16 *)par_cuda__fa_smem;
    par_cuda__u16 *dos = qs + BQ * P, *ks = dos + BQ * P, *vs = ks + BK * P;
    long long *kp = (long long *)(vs + BK * P);
    __shared__ long long red[PAR_CUDA__FA_THREADS / 32];
    const int tid = threadIdx.x, lane = tid & 31, w = tid >> 5, g = lane >> 2, t = lane & 3;
    const int b = blockIdx.z, h = blockIdx.y, kvh = h / a.group;
    const int64_t i0 = (int64_t)(gridDim.x - 1 - blockIdx.x) * BQ;
    const int64_t qstride = (int64_t)a.q_heads * D, kstride = (int64_t)a.kv_heads * D;
    const T *qb = q + (int64_t)b * a.q_len * qstride + (int64_t)h * D;
    const T *db = dout + (int64_t)b * a.q_len * qstride + (int64_t)h * D;
    const T *kb = k + (int64_t)b * a.k_len * kstride + (int64_t)kvh * D;
    const T *vb = v + (int64_t)b * a.k_len * kstride + (int64_t)kvh * D;
    const float sl2 = a.scale * PAR_CUDA__LOG2E;
    int64_t rr[2];
    long long qp[2], qmax;
    float l2[2], di[2], acc[ND][4];

    for (int r = 0; r < 2; r++) {
        rr[r] = i0 + w * 16 + g + 8 * r;
        const int64_t li = ((int64_t)b * a.q_heads + h) * a.q_len + rr[r];
        l2[r] = rr[r] < a.q_len ? lse[li] * PAR_CUDA__LOG2E : -INFINITY;
        di[r] = rr[r] < a.q_len ? dsum[li] : 0.0f;
        /* A row that saw no key (lse = -inf) has zero gradients: it sees nothing. */
        qp[r] = l2[r] != -INFINITY ? (long long)par_cuda__pos(a.q_pos, rr[r]) : LLONG_MIN;
    }
    qmax = par_cuda__warp_max_ll(qp[0] > qp[1] ? qp[0] : qp[1]);
    if (lane == 0) red[w] = qmax;
    par_cuda__fa_stage<T, D>(qs, qb, qstride, i0, a.q_len, BQ);
    par_cuda__fa_stage<T, D>(dos, db, qstride, i0, a.q_len, BQ);
    for (int dn = 0; dn < ND; dn++) acc[dn][0] = acc[dn][1] = acc[dn][2] = acc[dn][3] = 0.0f;
    __syncthreads();
    for (int ww = 0; ww < PAR_CUDA__FA_THREADS / 32; ww++) qmax = red[ww] > qmax ? red[ww] : qmax;

    for (int64_t j0 = 0; j0 < a.k_len; j0 += BK) {
        const int nk = (int)(a.k_len - j0 < BK ? a.k_len - j0 : BK);
        float s[NT][4], dp[NT][4];
        __syncthreads();
        {
            /* Skip tiles no live row of the block can see (all rows dead: every tile). */
            const int vis = tid < nk && qmax != LLONG_MIN &&
                            (!a.causal || (long long)par_cuda__pos(a.k_pos, j0 + tid) <= qmax);
            if (!__syncthreads_or(vis)) continue;
        }
        par_cuda__fa_stage<T, D>(ks, kb, kstride, j0, a.k_len, BK);
        par_cuda__fa_stage<T, D>(vs, vb, kstride, j0, a.k_len, BK);
        if (tid < BK) kp[tid] = tid < nk ? (long long)par_cuda__pos(a.k_pos, j0 + tid) : LLONG_MAX;
        __syncthreads();

        /* S = Q K^T and dP = dO V^T, tile nt = keys nt*8 .. nt*8+7. */
        par_cuda__mma_pair<T, NT, KD>(qs, ks, dos, vs, P, w * 16, lane, s, dp);
        /* dS in place of S (element e: row rr[e >> 1], key nt*8 + 2t + (e & 1)). */
        for (int nt = 0; nt < NT; nt++)
            for (int e = 0; e < 4; e++) {
                const int jj = nt * 8 + 2 * t + (e & 1), r = e >> 1;
                const bool ok = jj < nk && l2[r] != -INFINITY && (!a.causal || kp[jj] <= qp[r]);
                const float p = ok ? exp2f(s[nt][e] * sl2 - l2[r]) : 0.0f;
                s[nt][e] = p * (dp[nt][e] - di[r]);
            }
        /* dQ += dS K (K's rows are the reduction index). */
        for (int ks2 = 0; ks2 < BK / 16; ks2++) {
            uint32_t af[4];
            par_cuda__frag_c_to_a<T>(s[2 * ks2], s[2 * ks2 + 1], af);
            for (int dn = 0; dn < ND; dn++) {
                uint32_t bf[2];
                par_cuda__frag_b_rows_k(ks, P, ks2 * 16, dn * 8, lane, bf);
                par_cuda__mma<T>(acc[dn], af, bf);
            }
        }
    }
    for (int r = 0; r < 2; r++) {
        if (rr[r] >= a.q_len) continue;
        T *row = dq + ((int64_t)b * a.q_len + rr[r]) * qstride + (int64_t)h * D;
        for (int dn = 0; dn < ND; dn++)
            par_cuda__fa_put2<T>(row + dn * 8 + 2 * t, acc[dn][2 * r] * a.scale, acc[dn][2 * r + 1] * a.scale,
                                 accumulate);
    }
}

/* dV = P^T dO and dK = scale * dS^T Q over every query of every q head of kv
   head kvh. Warp w owns block keys w*16 ..; its lane holds keys kr[0] = w*16 + g
   and kr[1] = kr[0] + 8: the transposed scores S^T = K Q^T have keys as rows,
   so the same accumulator layout serves (element e of query tile nt: key
   kr[e >> 1], query nt*8 + 2t + (e & 1)). */
template <typename T, int D>
__global__ void __launch_bounds__(PAR_CUDA__FA_THREADS)
    par_cuda__fa_dkdv_k(par_cuda__attn_args a, const T *q, const T *k, const T *v, const float *lse,
                        const float *dsum, const T *dout, T *dk, T *dv, int accumulate) {
    constexpr int P = D + 8, BK = PAR_CUDA__FA_BK, BQ = PAR_CUDA__FA_BQ2;
    constexpr int NT = BQ / 8, KD = D / 16, ND = D / 8;
    extern __shared__ uint4 par_cuda__fa_smem[];
    par_cuda__u16 *ks = (par_cuda__u16 *)par_cuda__fa_smem;
    par_cuda__u16 *vs = ks + BK * P, *qs = vs + BK * P, *dos = qs + BQ * P;
    long long *qpt = (long long *)(dos + BQ * P);
    float *lt = (float *)(qpt + BQ), *dt = lt + BQ;
    __shared__ long long red[PAR_CUDA__FA_THREADS / 32];
    const int tid = threadIdx.x, lane = tid & 31, w = tid >> 5, g = lane >> 2, t = lane & 3;
    const int b = blockIdx.z, kvh = blockIdx.y;
    const int64_t j0 = (int64_t)blockIdx.x * BK;
    const int64_t qstride = (int64_t)a.q_heads * D, kstride = (int64_t)a.kv_heads * D;
    const T *kb = k + (int64_t)b * a.k_len * kstride + (int64_t)kvh * D;
    const T *vb = v + (int64_t)b * a.k_len * kstride + (int64_t)kvh * D;
    const float sl2 = a.scale * PAR_CUDA__LOG2E;
    int64_t kr[2];
    long long kpos[2], kmin;
    float dka[ND][4], dva[ND][4];

    for (int r = 0; r < 2; r++) {
        kr[r] = j0 + w * 16 + g + 8 * r;
        kpos[r] = kr[r] < a.k_len ? (long long)par_cuda__pos(a.k_pos, kr[r]) : LLONG_MAX;
    }
    kmin = par_cuda__warp_min_ll(kpos[0] < kpos[1] ? kpos[0] : kpos[1]);
    if (lane == 0) red[w] = kmin;
    par_cuda__fa_stage<T, D>(ks, kb, kstride, j0, a.k_len, BK);
    par_cuda__fa_stage<T, D>(vs, vb, kstride, j0, a.k_len, BK);
    for (int dn = 0; dn < ND; dn++)
        for (int e = 0; e < 4; e++) dka[dn][e] = dva[dn][e] = 0.0f;
    __syncthreads();
    for (int ww = 0; ww < PAR_CUDA__FA_THREADS / 32; ww++) kmin = red[ww] < kmin ? red[ww] : kmin;

    for (int hq = 0; hq < a.group; hq++) {
        const int h = kvh * a.group + hq;
        const T *qb = q + (int64_t)b * a.q_len * qstride + (int64_t)h * D;
        const T *db = dout + (int64_t)b * a.q_len * qstride + (int64_t)h * D;
        const float *lb = lse + ((int64_t)b * a.q_heads + h) * a.q_len;
        const float *dsb = dsum + ((int64_t)b * a.q_heads + h) * a.q_len;
        for (int64_t i0 = 0; i0 < a.q_len; i0 += BQ) {
            const int nq = (int)(a.q_len - i0 < BQ ? a.q_len - i0 : BQ);
            float st[NT][4], dpt[NT][4];
            __syncthreads();
            {
                const int vis = tid < nq && lb[i0 + tid] != -INFINITY &&
                                (!a.causal || (long long)par_cuda__pos(a.q_pos, i0 + tid) >= kmin);
                if (!__syncthreads_or(vis)) continue;
            }
            par_cuda__fa_stage<T, D>(qs, qb, qstride, i0, a.q_len, BQ);
            par_cuda__fa_stage<T, D>(dos, db, qstride, i0, a.q_len, BQ);
            if (tid < BQ) {
                qpt[tid] = tid < nq ? (long long)par_cuda__pos(a.q_pos, i0 + tid) : LLONG_MIN;
                lt[tid] = tid < nq ? lb[i0 + tid] * PAR_CUDA__LOG2E : -INFINITY;
                dt[tid] = tid < nq ? dsb[i0 + tid] : 0.0f;
            }
            __syncthreads();

            /* S^T = K Q^T and dP^T = V dO^T: tile nt = queries nt*8 .. nt*8+7. */
            par_cuda__mma_pair<T, NT, KD>(ks, qs, vs, dos, P, w * 16, lane, st, dpt);
            /* P^T in st, dS^T in dpt. */
            for (int nt = 0; nt < NT; nt++)
                for (int e = 0; e < 4; e++) {
                    const int ii = nt * 8 + 2 * t + (e & 1), r = e >> 1;
                    const bool ok = ii < nq && kr[r] < a.k_len && lt[ii] != -INFINITY &&
                                    (!a.causal || kpos[r] <= qpt[ii]);
                    const float p = ok ? exp2f(st[nt][e] * sl2 - lt[ii]) : 0.0f;
                    st[nt][e] = p;
                    dpt[nt][e] = p * (dpt[nt][e] - dt[ii]);
                }
            /* dV += P^T dO and dK += dS^T Q (queries are the reduction index). */
            for (int ks2 = 0; ks2 < BQ / 16; ks2++) {
                uint32_t pf[4], sf[4];
                par_cuda__frag_c_to_a<T>(st[2 * ks2], st[2 * ks2 + 1], pf);
                par_cuda__frag_c_to_a<T>(dpt[2 * ks2], dpt[2 * ks2 + 1], sf);
                for (int dn = 0; dn < ND; dn++) {
                    uint32_t bf[2];
                    par_cuda__frag_b_rows_k(dos, P, ks2 * 16, dn * 8, lane, bf);
                    par_cuda__mma<T>(dva[dn], pf, bf);
                    par_cuda__frag_b_rows_k(qs, P, ks2 * 16, dn * 8, lane, bf);
                    par_cuda__mma<T>(dka[dn], sf, bf);
                }
            }
        }
    }
    for (int r = 0; r < 2; r++) {
        if (kr[r] >= a.k_len) continue;
        const int64_t off = ((int64_t)b * a.k_len + kr[r]) * kstride + (int64_t)kvh * D;
        for (int dn = 0; dn < ND; dn++) {
            par_cuda__fa_put2<T>(dk + off + dn * 8 + 2 * t, dka[dn][2 * r] * a.scale, dka[dn][2 * r + 1] * a.scale,
                                 accumulate);
            par_cuda__fa_put2<T>(dv + off + dn * 8 + 2 * t, dva[dn][2 * r], dva[dn][2 * r + 1], accumulate);
        }
    }
}

/* Merge one block's (o_b, lse_b) into (o, lse): one warp per (b, s, h) row. */
__global__ void par_cuda__attn_merge_k(par_cuda__attn_args a, float *o, float *lse, const float *o_b,
                                       const float *lse_b) {
    const int64_t rows = (int64_t)a.batch * a.q_len * a.q_heads;
    const int lane = threadIdx.x & 31, D = a.head_dim;
    const int64_t warps = (int64_t)gridDim.x * (blockDim.x >> 5);
    for (int64_t r = (int64_t)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5); r < rows; r += warps) {
        const int64_t h = r % a.q_heads, i = (r / a.q_heads) % a.q_len, b = r / ((int64_t)a.q_heads * a.q_len);
        const int64_t li = (b * a.q_heads + h) * a.q_len + i;
        const float la = lse[li], lb = lse_b[li];
        float *oa = o + r * D;
        const float *ob = o_b + r * D;
        if (lb == -INFINITY) continue; /* the block saw no key for this row */
        if (la == -INFINITY) {
            for (int c = lane; c < D; c += 32) oa[c] = ob[c];
            if (lane == 0) lse[li] = lb;
            continue;
        }
        const float mx = fmaxf(la, lb);
        const float ln = mx + log1pf(expf(-fabsf(la - lb)));
        const float wa = expf(la - ln), wb = expf(lb - ln);
        for (int c = lane; c < D; c += 32) oa[c] = wa * oa[c] + wb * ob[c];
        if (lane == 0) lse[li] = ln; /* every lane read la above */
    }
}

/* GEMM with nothing to multiply (k == 0 or alpha == 0): C = beta * C on each
   m x n block of the batch; beta == 0 writes zeros without reading C. */
template <typename T>
__global__ void par_cuda__gemm_scale_c_k(int64_t batch, int64_t m, int64_t n, int64_t ldc, int64_t stride_c,
                                         float beta, T *c) {
    const int64_t per = m * n;
    PAR_CUDA__GRID_STRIDE(idx, batch * per) {
        const int64_t b = idx / per, r = idx % per;
        T *p = c + b * stride_c + (r / n) * ldc + r % n;
        *p = par_cuda__st<T>(beta == 0.0f ? 0.0f : beta * par_cuda__ld(*p));
    }
}

/* Integer average after an NCCL sum: C division truncates toward zero. */
template <typename I> __global__ void par_cuda__div_k(int64_t n, I *x, I d) {
    PAR_CUDA__GRID_STRIDE(i, n) x[i] = x[i] / d;
}

/* ======================================================================
   >>cuda-compute   the compute table
   ==================================================================== */

typedef struct par_cuda__alloc {
    void *ptr;
    size_t bytes;
    int category;
} par_cuda__alloc;

typedef struct par_cuda__compute {
    int device;
    cudaStream_t stream;
    int own_stream;
    cublasHandle_t blas;
    cublasComputeType_t f32_compute;
    par_cuda__alloc *allocs; /* live allocations, unordered */
    size_t num_allocs, cap_allocs;
    par_mem_report report;
    void *work; /* attention backward's D, grown on demand (counted as workspace) */
    size_t work_bytes;
    double *parts; /* sumsq partials [PAR_CUDA__PARTS + 1] */
    int *flags;    /* device data-error flags */
    int tensor_attn; /* 1: bf16/f16 attention may use the tensor-core kernels (par_cuda__fa_*) */
} par_cuda__compute;

#define PAR_CUDA__PARTS 1024

static void par_cuda__count(par_cuda__compute *cu, int category, int64_t delta) {
    par_mem_report *r = &cu->report;
    r->current[category] += delta;
    r->current_total += delta;
    if (r->current[category] > r->peak[category]) r->peak[category] = r->current[category];
    if (r->current_total > r->peak_total) r->peak_total = r->current_total;
}

/* Every hook starts here: the calling thread may have another current device. */
#define PAR_CUDA__ENTER(cu, fn)                                                   \
    do {                                                                          \
        cudaError_t e_ = cudaSetDevice((cu)->device);                             \
        if (e_ != cudaSuccess) return par_cuda__runtime(e_, fn ": cudaSetDevice"); \
    } while (0)

#define PAR_CUDA__NEED(cond, ...)                                    \
    do {                                                             \
        if (!(cond)) return par_cuda__fail(PAR_EINVAL, __VA_ARGS__); \
    } while (0)

#define PAR_CUDA__CALL(call, what)                                \
    do {                                                          \
        cudaError_t e_ = (call);                                  \
        if (e_ != cudaSuccess) return par_cuda__runtime(e_, what); \
    } while (0)

/* After a launch: configuration errors show up here, execution errors later. */
static par_status par_cuda__launched(const char *what) {
    cudaError_t e = cudaGetLastError();
    return e == cudaSuccess ? PAR_OK : par_cuda__runtime(e, what);
}

static unsigned par_cuda__blocks(int64_t n, int64_t per_block) {
    int64_t b = (n + per_block - 1) / per_block;
    if (b < 1) b = 1;
    if (b > 65535 * 4) b = 65535 * 4; /* grid-stride loops cover the rest */
    return (unsigned)b;
}

static unsigned par_cuda__row_blocks(int64_t rows) { return (unsigned)(rows < 65535 ? (rows < 1 ? 1 : rows) : 65535); }

static par_status par_cuda__alloc_hook(void *user, size_t bytes, par_mem_category category, void **ptr) {
    par_cuda__compute *cu = (par_cuda__compute *)user;
    void *p = NULL;
    cudaError_t e;
    PAR_CUDA__NEED(ptr, "cuda alloc: NULL ptr");
    *ptr = NULL;
    PAR_CUDA__NEED((int)category >= 0 && category < PAR_MEM_CATEGORY_COUNT, "cuda alloc: unknown category %d",
                   (int)category);
    PAR_CUDA__ENTER(cu, "cuda alloc");
    if (cu->num_allocs == cu->cap_allocs) {
        size_t cap = cu->cap_allocs ? 2 * cu->cap_allocs : 64;
        par_cuda__alloc *n = (par_cuda__alloc *)PAR_CUDA__REALLOC(cu->allocs, cap * sizeof *n);
        if (!n) return par_cuda__fail(PAR_ENOMEM, "cuda alloc: out of host memory for the allocation list");
        cu->allocs = n;
        cu->cap_allocs = cap;
    }
    e = cudaMalloc(&p, bytes ? bytes : 1); /* a unique pointer even for 0 bytes */
    if (e != cudaSuccess) {
        (void)cudaGetLastError(); /* an allocation failure is not sticky; clear it */
        return par_cuda__fail(par_cuda__status_of(e), "cuda alloc of %zu bytes (%s) on device %d: %s", bytes,
                              par_mem_category_name(category), cu->device, cudaGetErrorString(e));
    }
    /* Zeroed and finished before returning, so any stream may use it next. */
    e = cudaMemsetAsync(p, 0, bytes, cu->stream);
    if (e == cudaSuccess) e = cudaStreamSynchronize(cu->stream);
    if (e != cudaSuccess) {
        cudaFree(p);
        return par_cuda__runtime(e, "cuda alloc: zero-fill");
    }
    cu->allocs[cu->num_allocs].ptr = p;
    cu->allocs[cu->num_allocs].bytes = bytes;
    cu->allocs[cu->num_allocs].category = (int)category;
    cu->num_allocs++;
    par_cuda__count(cu, (int)category, (int64_t)bytes);
    *ptr = p;
    return PAR_OK;
}

static void par_cuda__free_hook(void *user, void *ptr) {
    par_cuda__compute *cu = (par_cuda__compute *)user;
    size_t i;
    if (!ptr) return;
    /* Newest first: short-lived buffers are usually the latest. */
    for (i = cu->num_allocs; i-- > 0;) {
        if (cu->allocs[i].ptr == ptr) {
            par_cuda__count(cu, cu->allocs[i].category, -(int64_t)cu->allocs[i].bytes);
            cu->allocs[i] = cu->allocs[cu->num_allocs - 1];
            cu->num_allocs--;
            (void)cudaSetDevice(cu->device);
            /* Kernels queued on the (non-blocking) stream may still use it. */
            (void)cudaStreamSynchronize(cu->stream);
            cudaFree(ptr);
            return;
        }
    }
    /* Not ours: leave it alone rather than free foreign memory. */
}

/* Raised data-error flags become PAR_EINVAL here (called after the stream finished). */
static par_status par_cuda__check_flags(par_cuda__compute *cu) {
    int flags = 0;
    /* On the table's stream: the legacy stream does not order with a non-blocking one. */
    PAR_CUDA__CALL(cudaMemcpyAsync(&flags, cu->flags, sizeof flags, cudaMemcpyDeviceToHost, cu->stream),
                   "cuda: reading error flags");
    PAR_CUDA__CALL(cudaStreamSynchronize(cu->stream), "cuda: reading error flags");
    if (!flags) return PAR_OK;
    PAR_CUDA__CALL(cudaMemsetAsync(cu->flags, 0, sizeof(int), cu->stream), "cuda: clearing error flags");
    if (flags & PAR_CUDA__FLAG_EMB_NEGATIVE)
        return par_cuda__fail(PAR_EINVAL, "cuda embedding_fwd/bwd: a token id was negative (its row was zeroed "
                                          "or skipped)");
    return par_cuda__fail(PAR_EINVAL, "cuda xent: a target was >= vocab (its loss is NaN)");
}

static par_status par_cuda__sync(par_cuda__compute *cu, const char *what) {
    cudaError_t e = cudaStreamSynchronize(cu->stream);
    if (e != cudaSuccess) return par_cuda__runtime(e, what);
    return par_cuda__check_flags(cu);
}

static par_status par_cuda__memcpy_hook(void *user, void *dst, const void *src, size_t bytes, par_copy_kind kind) {
    par_cuda__compute *cu = (par_cuda__compute *)user;
    cudaMemcpyKind k;
    if (!bytes) return PAR_OK;
    PAR_CUDA__NEED(dst && src, "cuda memcpy: NULL dst or src");
    switch (kind) {
    case PAR_COPY_HOST_TO_HOST:
        memmove(dst, src, bytes);
        return PAR_OK;
    case PAR_COPY_HOST_TO_DEVICE: k = cudaMemcpyHostToDevice; break;
    case PAR_COPY_DEVICE_TO_HOST: k = cudaMemcpyDeviceToHost; break;
    case PAR_COPY_DEVICE_TO_DEVICE: k = cudaMemcpyDeviceToDevice; break;
    default: return par_cuda__fail(PAR_EINVAL, "cuda memcpy: unknown copy kind %d", (int)kind);
    }
    PAR_CUDA__ENTER(cu, "cuda memcpy");
    PAR_CUDA__CALL(cudaMemcpyAsync(dst, src, bytes, k, cu->stream), "cuda memcpy");
    /* Host memory involved: finish, so the host may read dst or reuse src. */
    if (kind != PAR_COPY_DEVICE_TO_DEVICE) return par_cuda__sync(cu, "cuda memcpy");
    return PAR_OK;
}

static par_status par_cuda__memset_hook(void *user, void *dst, int value, size_t bytes) {
    par_cuda__compute *cu = (par_cuda__compute *)user;
    if (!bytes) return PAR_OK;
    PAR_CUDA__NEED(dst, "cuda memset: NULL dst");
    PAR_CUDA__ENTER(cu, "cuda memset");
    PAR_CUDA__CALL(cudaMemsetAsync(dst, value, bytes, cu->stream), "cuda memset");
    return PAR_OK;
}

static par_status par_cuda__memcpy_2d_hook(void *user, void *dst, size_t dst_pitch, const void *src,
                                           size_t src_pitch, size_t width, size_t height) {
    par_cuda__compute *cu = (par_cuda__compute *)user;
    if (!width || !height) return PAR_OK;
    PAR_CUDA__NEED(dst && src, "cuda memcpy_2d: NULL dst or src");
    PAR_CUDA__NEED(width <= dst_pitch && width <= src_pitch,
                   "cuda memcpy_2d: width %zu exceeds a pitch (dst %zu, src %zu)", width, dst_pitch, src_pitch);
    PAR_CUDA__ENTER(cu, "cuda memcpy_2d");
    PAR_CUDA__CALL(cudaMemcpy2DAsync(dst, dst_pitch, src, src_pitch, width, height, cudaMemcpyDeviceToDevice,
                                     cu->stream),
                   "cuda memcpy_2d");
    return PAR_OK;
}

static par_status par_cuda__memory_report_hook(void *user, par_mem_report *report) {
    par_cuda__compute *cu = (par_cuda__compute *)user;
    PAR_CUDA__NEED(report, "cuda memory_report: NULL report");
    *report = cu->report;
    return PAR_OK;
}

/* The table's one kept scratch is attention backward's row sums (one float per
   query row, par_cuda__workspace); cuBLAS's own workspace is cuBLAS's. The
   activation kernels read and write 16-bit tensors in place (par_cuda__ld /
   par_cuda__st), so act_type and act_cols add nothing. */
static par_status par_cuda__scratch_bound_hook(void *user, const par_scratch_query *q, size_t *bytes) {
    (void)user;
    PAR_CUDA__NEED(q && bytes, "cuda scratch_bound: NULL query or bytes");
    *bytes = 0;
    PAR_CUDA__NEED(q->gemm_m >= 0 && q->gemm_n >= 0 && q->gemm_k >= 0 && q->attn_rows >= 0,
                   "cuda scratch_bound: gemm m %lld, n %lld, k %lld and attn_rows %lld must be >= 0",
                   (long long)q->gemm_m, (long long)q->gemm_n, (long long)q->gemm_k, (long long)q->attn_rows);
    *bytes = (size_t)q->attn_rows * sizeof(float);
    return PAR_OK;
}

static par_status par_cuda__synchronize_hook(void *user) {
    par_cuda__compute *cu = (par_cuda__compute *)user;
    PAR_CUDA__ENTER(cu, "cuda synchronize");
    return par_cuda__sync(cu, "cuda synchronize");
}

/* ---------------------------------------------------------------- gemm */

static int par_cuda__gemm_type(par_dtype t, cudaDataType_t *out) {
    switch (t) {
    case PAR_F32: *out = CUDA_R_32F; return 1;
    case PAR_BF16: *out = CUDA_R_16BF; return 1;
    case PAR_F16: *out = CUDA_R_16F; return 1;
    default: return 0;
    }
}

/* The argument rules of the CPU table's gemm (parallel.h), plus the types. */
static par_status par_cuda__gemm_hook(void *user, const par_gemm_desc *d, const void *a, const void *b, void *c) {
    par_cuda__compute *cu = (par_cuda__compute *)user;
    cudaDataType_t at = CUDA_R_32F, ct = CUDA_R_32F; /* set below; initialized for -O1 -Wmaybe-uninitialized */
    int64_t lda, ldb, ldc, batch, need_a, need_b;
    cublasStatus_t s;
    PAR_CUDA__NEED(d, "cuda gemm: NULL desc");
    PAR_CUDA__NEED(par_cuda__gemm_type(d->a_type, &at), "cuda gemm: a_type %s (need f32, bf16 or f16)",
                   par_dtype_name(d->a_type));
    PAR_CUDA__NEED(d->c_type == PAR_F32 || d->c_type == d->a_type,
                   "cuda gemm: c_type %s with a_type %s (c_type must be f32 or a_type)", par_dtype_name(d->c_type),
                   par_dtype_name(d->a_type));
    (void)par_cuda__gemm_type(d->c_type, &ct);
    PAR_CUDA__NEED(d->transa == 0 || d->transa == 1, "cuda gemm: transa is %d (must be 0 or 1)", d->transa);
    PAR_CUDA__NEED(d->transb == 0 || d->transb == 1, "cuda gemm: transb is %d (must be 0 or 1)", d->transb);
    PAR_CUDA__NEED(d->m >= 0 && d->n >= 0 && d->k >= 0 && d->batch >= 0,
                   "cuda gemm: m %lld, n %lld, k %lld, batch %lld must be >= 0", (long long)d->m, (long long)d->n,
                   (long long)d->k, (long long)d->batch);
    batch = d->batch ? d->batch : 1;
    need_a = d->transa ? d->m : d->k; /* stored row lengths */
    need_b = d->transb ? d->k : d->n;
    lda = d->lda ? d->lda : need_a;
    ldb = d->ldb ? d->ldb : need_b;
    ldc = d->ldc ? d->ldc : d->n;
    PAR_CUDA__NEED(lda >= need_a && ldb >= need_b && ldc >= d->n,
                   "cuda gemm: leading dims lda %lld, ldb %lld, ldc %lld are shorter than the stored rows (%lld, "
                   "%lld, %lld with transa = %d, transb = %d)",
                   (long long)lda, (long long)ldb, (long long)ldc, (long long)need_a, (long long)need_b,
                   (long long)d->n, d->transa, d->transb);
    PAR_CUDA__NEED(d->stride_a >= 0, "cuda gemm: stride_a is %lld (must be >= 0)", (long long)d->stride_a);
    PAR_CUDA__NEED(d->stride_b >= 0, "cuda gemm: stride_b is %lld (must be >= 0)", (long long)d->stride_b);
    PAR_CUDA__NEED(d->stride_c >= 0, "cuda gemm: stride_c is %lld (must be >= 0)", (long long)d->stride_c);
    if (d->m == 0 || d->n == 0) return PAR_OK;
    PAR_CUDA__NEED(batch == 1 || d->stride_c >= (d->m - 1) * ldc + d->n,
                   "cuda gemm: stride_c is %lld, so the C matrices of the batch overlap (need >= %lld)",
                   (long long)d->stride_c, (long long)((d->m - 1) * ldc + d->n));
    PAR_CUDA__NEED(c, "cuda gemm: c is NULL");
    if (d->k == 0 || d->alpha == 0.0f) { /* A and B are not read (they may be NULL) */
        const int64_t total = batch * d->m * d->n;
        if (d->beta == 1.0f) return PAR_OK;
        PAR_CUDA__ENTER(cu, "cuda gemm");
        if (d->c_type == PAR_F32)
            par_cuda__gemm_scale_c_k<float><<<par_cuda__blocks(total, PAR_CUDA__THREADS), PAR_CUDA__THREADS, 0,
                                              cu->stream>>>(batch, d->m, d->n, ldc, d->stride_c, d->beta, (float *)c);
        else if (d->c_type == PAR_BF16)
            par_cuda__gemm_scale_c_k<__nv_bfloat16><<<par_cuda__blocks(total, PAR_CUDA__THREADS), PAR_CUDA__THREADS,
                                                      0, cu->stream>>>(batch, d->m, d->n, ldc, d->stride_c, d->beta,
                                                                       (__nv_bfloat16 *)c);
        else
            par_cuda__gemm_scale_c_k<__half><<<par_cuda__blocks(total, PAR_CUDA__THREADS), PAR_CUDA__THREADS, 0,
                                               cu->stream>>>(batch, d->m, d->n, ldc, d->stride_c, d->beta,
                                                             (__half *)c);
        return par_cuda__launched("cuda gemm: C = beta * C");
    }
    PAR_CUDA__NEED(a, "cuda gemm: a is NULL");
    PAR_CUDA__NEED(b, "cuda gemm: b is NULL");
    if (d->m > INT_MAX || d->n > INT_MAX || d->k > INT_MAX || lda > INT_MAX || ldb > INT_MAX || ldc > INT_MAX ||
        batch > INT_MAX)
        return par_cuda__fail(PAR_EUNSUPPORTED, "cuda gemm: a size or leading dim exceeds INT_MAX");
    PAR_CUDA__ENTER(cu, "cuda gemm");
    /* Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: the row-major
       arrays are the transposes, so swap the operands and keep the flags. */
    s = cublasGemmStridedBatchedEx(cu->blas, d->transb ? CUBLAS_OP_T : CUBLAS_OP_N,
                                   d->transa ? CUBLAS_OP_T : CUBLAS_OP_N, (int)d->n, (int)d->m, (int)d->k, &d->alpha,
                                   b, at, (int)ldb, (long long)d->stride_b, a, at, (int)lda, (long long)d->stride_a,
                                   &d->beta, c, ct, (int)ldc, (long long)d->stride_c, (int)batch,
                                   d->a_type == PAR_F32 ? cu->f32_compute : CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    if (s != CUBLAS_STATUS_SUCCESS) return par_cuda__blas(s, "cuda gemm");
    return PAR_OK;
}

/* ----------------------------------------------------------- attention */

/* A tensor's pointer may be NULL only when it has no elements (as on the CPU). */
#define PAR_CUDA__ATTN_PTR(fn, p, rows) PAR_CUDA__NEED((p) || (rows) == 0, "%s: %s is NULL", fn, #p)

/* The desc (pointers are checked by each entry). */
static par_status par_cuda__attn_check(const char *fn, const par_attn_desc *d, par_cuda__attn_args *a) {
    PAR_CUDA__NEED(d, "%s: NULL desc", fn);
    PAR_CUDA__NEED(d->batch >= 1 && d->q_heads >= 1 && d->kv_heads >= 1 && d->head_dim >= 1,
                   "%s: batch %d, q_heads %d, kv_heads %d, head_dim %d must all be >= 1", fn, d->batch, d->q_heads,
                   d->kv_heads, d->head_dim);
    PAR_CUDA__NEED(d->q_len >= 0 && d->k_len >= 0, "%s: q_len %lld and k_len %lld must be >= 0", fn,
                   (long long)d->q_len, (long long)d->k_len);
    PAR_CUDA__NEED(d->q_heads % d->kv_heads == 0, "%s: q_heads %d is not a multiple of kv_heads %d", fn,
                   d->q_heads, d->kv_heads);
    PAR_CUDA__NEED(isfinite(d->scale), "%s: scale is not finite", fn);
    PAR_CUDA__NEED(d->dtype == PAR_F32 || d->dtype == PAR_BF16 || d->dtype == PAR_F16,
                   "%s: dtype %s (need f32, bf16 or f16)", fn, par_dtype_name(d->dtype));
    if (d->head_dim > 256)
        return par_cuda__fail(PAR_EUNSUPPORTED, "%s: head_dim %d > 256 is not supported by the CUDA kernel", fn,
                              d->head_dim);
    if ((int64_t)d->batch > 65535 || d->q_heads > 65535)
        return par_cuda__fail(PAR_EUNSUPPORTED, "%s: batch %d or q_heads %d exceeds 65535", fn, d->batch,
                              d->q_heads);
    a->batch = d->batch;
    a->q_heads = d->q_heads;
    a->kv_heads = d->kv_heads;
    a->head_dim = d->head_dim;
    a->group = d->q_heads / d->kv_heads;
    a->causal = d->causal != 0;
    a->q_len = d->q_len;
    a->k_len = d->k_len;
    a->scale = d->scale != 0.0f ? d->scale : (float)(1.0 / sqrt((double)d->head_dim));
    a->q_pos = d->q_pos;
    a->k_pos = d->k_pos;
    return PAR_OK;
}

/* Tile rows: 32 (one per lane) up to head_dim 128, 16 above so that shared
   memory stays under the 48 KiB static limit. */
template <typename T, int NC>
static void par_cuda__attn_fwd_launch(const par_cuda__attn_args &a, cudaStream_t s, const void *q, const void *k,
                                      const void *v, void *o, float *lse) {
    constexpr int BT = NC > 4 ? 16 : 32;
    dim3 grid((unsigned)((a.q_len + PAR_CUDA__AW - 1) / PAR_CUDA__AW), (unsigned)a.q_heads, (unsigned)a.batch);
    par_cuda__attn_fwd_k<T, NC, BT><<<grid, PAR_CUDA__AW * 32, 0, s>>>(a, (const T *)q, (const T *)k, (const T *)v,
                                                                       (T *)o, lse);
}

template <typename T, int NC>
static void par_cuda__attn_bwd_launch(const par_cuda__attn_args &a, cudaStream_t s, const void *q, const void *k,
                                      const void *v, const float *lse, const float *dsum, const void *dout, void *dq,
                                      void *dk, void *dv, int accumulate) {
    constexpr int BT = NC > 4 ? 16 : 32;
    if (a.q_len > 0) {
        dim3 grid((unsigned)((a.q_len + PAR_CUDA__AW - 1) / PAR_CUDA__AW), (unsigned)a.q_heads, (unsigned)a.batch);
        par_cuda__attn_dq_k<T, NC, BT><<<grid, PAR_CUDA__AW * 32, 0, s>>>(
            a, (const T *)q, (const T *)k, (const T *)v, lse, dsum, (const T *)dout, (T *)dq, accumulate);
    }
    if (a.k_len > 0) {
        dim3 grid((unsigned)((a.k_len + PAR_CUDA__AW - 1) / PAR_CUDA__AW), (unsigned)a.kv_heads, (unsigned)a.batch);
        par_cuda__attn_dkdv_k<T, NC, BT><<<grid, PAR_CUDA__AW * 32, 0, s>>>(
            a, (const T *)q, (const T *)k, (const T *)v, lse, dsum, (const T *)dout, (T *)dk, (T *)dv, accumulate);
    }
}

/* The tensor-core kernels: bf16/f16, head_dim 64 or 128, every tensor 16-byte
   aligned (tiles are staged 8 elements at a time), on a table that enabled them. */
static bool par_cuda__fa_fits(const par_cuda__compute *cu, const par_attn_desc *d, const void *const *ptrs, int n) {
    if (!cu->tensor_attn || (d->dtype != PAR_BF16 && d->dtype != PAR_F16) || (d->head_dim != 64 && d->head_dim != 128))
        return false;
    for (int i = 0; i < n; i++)
        if ((uintptr_t)ptrs[i] % 16 != 0) return false;
    return true;
}

/* Dynamic shared memory above 48 KiB must be opted into per kernel. */
template <typename K> static par_status par_cuda__fa_smem_opt_in(K kernel, size_t bytes, const char *what) {
    cudaError_t e = cudaFuncSetAttribute((const void *)kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes);
    return e == cudaSuccess ? PAR_OK : par_cuda__runtime(e, what);
}

template <typename T, int D>
static par_status par_cuda__fa_fwd_launch(const par_cuda__attn_args &a, cudaStream_t s, const void *q, const void *k,
                                          const void *v, void *o, float *lse) {
    const size_t smem = par_cuda__fa_fwd_smem<D>();
    dim3 grid((unsigned)((a.q_len + PAR_CUDA__FA_BQ - 1) / PAR_CUDA__FA_BQ), (unsigned)a.q_heads, (unsigned)a.batch);
    par_status st = par_cuda__fa_smem_opt_in(par_cuda__fa_fwd_k<T, D>, smem, "cuda attention_fwd: shared memory");
    if (st != PAR_OK) return st;
    par_cuda__fa_fwd_k<T, D><<<grid, PAR_CUDA__FA_THREADS, smem, s>>>(a, (const T *)q, (const T *)k, (const T *)v,
                                                                      (T *)o, lse);
    return PAR_OK;
}

template <typename T, int D>
static par_status par_cuda__fa_bwd_launch(const par_cuda__attn_args &a, cudaStream_t s, const void *q, const void *k,
                                          const void *v, const float *lse, const float *dsum, const void *dout,
                                          void *dq, void *dk, void *dv, int accumulate) {
    const size_t smem_dq = par_cuda__fa_dq_smem<D>(), smem_kv = par_cuda__fa_dkdv_smem<D>();
    par_status st;
    if ((st = par_cuda__fa_smem_opt_in(par_cuda__fa_dq_k<T, D>, smem_dq, "cuda attention_bwd: shared memory")) !=
            PAR_OK ||
        (st = par_cuda__fa_smem_opt_in(par_cuda__fa_dkdv_k<T, D>, smem_kv, "cuda attention_bwd: shared memory")) !=
            PAR_OK)
        return st;
    if (a.q_len > 0) {
        dim3 grid((unsigned)((a.q_len + PAR_CUDA__FA_BQ - 1) / PAR_CUDA__FA_BQ), (unsigned)a.q_heads,
                  (unsigned)a.batch);
        par_cuda__fa_dq_k<T, D><<<grid, PAR_CUDA__FA_THREADS, smem_dq, s>>>(
            a, (const T *)q, (const T *)k, (const T *)v, lse, dsum, (const T *)dout, (T *)dq, accumulate);
    }
    if (a.k_len > 0) {
        dim3 grid((unsigned)((a.k_len + PAR_CUDA__FA_BK - 1) / PAR_CUDA__FA_BK), (unsigned)a.kv_heads,
                  (unsigned)a.batch);
        par_cuda__fa_dkdv_k<T, D><<<grid, PAR_CUDA__FA_THREADS, smem_kv, s>>>(
            a, (const T *)q, (const T *)k, (const T *)v, lse, dsum, (const T *)dout, (T *)dk, (T *)dv, accumulate);
    }
    return PAR_OK;
}

template <typename T>
static par_status par_cuda__fa_fwd_dispatch(const par_cuda__attn_args &a, cudaStream_t s, const void *q,
                                            const void *k, const void *v, void *o, float *lse) {
    return a.head_dim == 64 ? par_cuda__fa_fwd_launch<T, 64>(a, s, q, k, v, o, lse)
                            : par_cuda__fa_fwd_launch<T, 128>(a, s, q, k, v, o, lse);
}

template <typename T>
static par_status par_cuda__fa_bwd_dispatch(const par_cuda__attn_args &a, cudaStream_t s, const void *q,
                                            const void *k, const void *v, const void *o, const float *lse,
                                            float *dsum, const void *dout, void *dq, void *dk, void *dv,
                                            int accumulate) {
    const int64_t rows = (int64_t)a.batch * a.q_len * a.q_heads;
    if (rows > 0)
        par_cuda__attn_dsum_k<T><<<par_cuda__blocks(rows, PAR_CUDA__THREADS / 32), PAR_CUDA__THREADS, 0, s>>>(
            a, (const T *)o, (const T *)dout, dsum);
    return a.head_dim == 64 ? par_cuda__fa_bwd_launch<T, 64>(a, s, q, k, v, lse, dsum, dout, dq, dk, dv, accumulate)
                            : par_cuda__fa_bwd_launch<T, 128>(a, s, q, k, v, lse, dsum, dout, dq, dk, dv, accumulate);
}

/* 1 if this build's tensor-core kernels can run on `device`: the device is
   sm_80+ and the kernels were compiled (or JIT-compiled from PTX) for sm_80+,
   which a build for nvcc's default target is not. */
static int par_cuda__fa_available(int device, char *why, size_t why_size) {
    cudaDeviceProp prop;
    cudaFuncAttributes fa;
    cudaError_t e = cudaGetDeviceProperties(&prop, device);
    if (e == cudaSuccess) e = cudaFuncGetAttributes(&fa, (const void *)par_cuda__fa_fwd_k<__nv_bfloat16, 64>);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        snprintf(why, why_size, "cannot query the device or kernel: %s", cudaGetErrorString(e));
        return 0;
    }
    if (prop.major < 8) {
        snprintf(why, why_size, "device %d is sm_%d%d (tensor-core attention needs sm_80+)", device, prop.major,
                 prop.minor);
        return 0;
    }
    if (fa.ptxVersion < 80) {
        snprintf(why, why_size,
                 "parallel_cuda.cu was compiled for sm_%d (build with e.g. -arch=sm_80 or -arch=sm_90 for "
                 "tensor-core attention)",
                 fa.ptxVersion);
        return 0;
    }
    return 1;
}

template <typename T>
static void par_cuda__attn_fwd_dispatch(const par_cuda__attn_args &a, cudaStream_t s, const void *q, const void *k,
                                        const void *v, void *o, float *lse) {
    if (a.head_dim <= 32)
        par_cuda__attn_fwd_launch<T, 1>(a, s, q, k, v, o, lse);
    else if (a.head_dim <= 64)
        par_cuda__attn_fwd_launch<T, 2>(a, s, q, k, v, o, lse);
    else if (a.head_dim <= 128)
        par_cuda__attn_fwd_launch<T, 4>(a, s, q, k, v, o, lse);
    else
        par_cuda__attn_fwd_launch<T, 8>(a, s, q, k, v, o, lse);
}

template <typename T>
static void par_cuda__attn_bwd_dispatch(const par_cuda__attn_args &a, cudaStream_t s, const void *q, const void *k,
                                        const void *v, const void *o, const float *lse, float *dsum,
                                        const void *dout, void *dq, void *dk, void *dv, int accumulate) {
    const int64_t rows = (int64_t)a.batch * a.q_len * a.q_heads;
    if (rows > 0)
        par_cuda__attn_dsum_k<T><<<par_cuda__blocks(rows, PAR_CUDA__THREADS / 32), PAR_CUDA__THREADS, 0, s>>>(
            a, (const T *)o, (const T *)dout, dsum);
    if (a.head_dim <= 32)
        par_cuda__attn_bwd_launch<T, 1>(a, s, q, k, v, lse, dsum, dout, dq, dk, dv, accumulate);
    else if (a.head_dim <= 64)
        par_cuda__attn_bwd_launch<T, 2>(a, s, q, k, v, lse, dsum, dout, dq, dk, dv, accumulate);
    else if (a.head_dim <= 128)
        par_cuda__attn_bwd_launch<T, 4>(a, s, q, k, v, lse, dsum, dout, dq, dk, dv, accumulate);
    else
        par_cuda__attn_bwd_launch<T, 8>(a, s, q, k, v, lse, dsum, dout, dq, dk, dv, accumulate);
}

static par_status par_cuda__attention_fwd_hook(void *user, const par_attn_desc *d, const void *q, const void *k,
                                               const void *v, void *o, float *lse) {
    par_cuda__compute *cu = (par_cuda__compute *)user;
    par_cuda__attn_args a;
    static const char fn[] = "cuda attention_fwd";
    par_status st = par_cuda__attn_check(fn, d, &a);
    if (st != PAR_OK) return st;
    PAR_CUDA__ATTN_PTR(fn, q, a.q_len);
    PAR_CUDA__ATTN_PTR(fn, k, a.k_len);
    PAR_CUDA__ATTN_PTR(fn, v, a.k_len);
    PAR_CUDA__ATTN_PTR(fn, o, a.q_len);
    PAR_CUDA__ATTN_PTR(fn, lse, a.q_len);
    if (a.q_len == 0) return PAR_OK; /* k_len == 0: o = 0, lse = -inf, k and v unread */
    PAR_CUDA__ENTER(cu, "cuda attention_fwd");
    if (a.k_len > 0) {
        const void *ptrs[4] = {q, k, v, o};
        if (par_cuda__fa_fits(cu, d, ptrs, 4)) {
            st = d->dtype == PAR_BF16 ? par_cuda__fa_fwd_dispatch<__nv_bfloat16>(a, cu->stream, q, k, v, o, lse)
                                      : par_cuda__fa_fwd_dispatch<__half>(a, cu->stream, q, k, v, o, lse);
            if (st != PAR_OK) return st;
            return par_cuda__launched("cuda attention_fwd");
        }
    }
    if (d->dtype == PAR_F32)
        par_cuda__attn_fwd_dispatch<float>(a, cu->stream, q, k, v, o, lse);
    else if (d->dtype == PAR_BF16)
        par_cuda__attn_fwd_dispatch<__nv_bfloat16>(a, cu->stream, q, k, v, o, lse);
    else
        par_cuda__attn_fwd_dispatch<__half>(a, cu->stream, q, k, v, o, lse);
    return par_cuda__launched("cuda attention_fwd");
}

/* The workspace grows by reallocation. */
static par_status par_cuda__workspace(par_cuda__compute *cu, size_t bytes, void **out) {
    if (bytes > cu->work_bytes) {
        void *p = NULL;
        cudaError_t e;
        if (cu->work) {
            (void)cudaStreamSynchronize(cu->stream); /* an earlier backward may still read it */
            cudaFree(cu->work);
            par_cuda__count(cu, PAR_MEM_WORKSPACE, -(int64_t)cu->work_bytes);
            cu->work = NULL;
            cu->work_bytes = 0;
        }
        e = cudaMalloc(&p, bytes);
        if (e != cudaSuccess) {
            (void)cudaGetLastError();
            return par_cuda__fail(par_cuda__status_of(e), "cuda workspace of %zu bytes: %s", bytes,
                                  cudaGetErrorString(e));
        }
        cu->work = p;
        cu->work_bytes = bytes;
        par_cuda__count(cu, PAR_MEM_WORKSPACE, (int64_t)bytes);
    }
    *out = cu->work;
    return PAR_OK;
}

static par_status par_cuda__attention_bwd_hook(void *user, const par_attn_desc *d, const void *q, const void *k,
                                               const void *v, const void *o, const float *lse, const void *do_,
                                               void *dq, void *dk, void *dv, int accumulate) {
    par_cuda__compute *cu = (par_cuda__compute *)user;
    par_cuda__attn_args a;
    void *dsum = NULL;
    static const char fn[] = "cuda attention_bwd";
    par_status st = par_cuda__attn_check(fn, d, &a);
    if (st != PAR_OK) return st;
    PAR_CUDA__ATTN_PTR(fn, q, a.q_len);
    PAR_CUDA__ATTN_PTR(fn, k, a.k_len);
    PAR_CUDA__ATTN_PTR(fn, v, a.k_len);
    PAR_CUDA__ATTN_PTR(fn, o, a.q_len);
    PAR_CUDA__ATTN_PTR(fn, lse, a.q_len);
    PAR_CUDA__ATTN_PTR(fn, do_, a.q_len);
    PAR_CUDA__ATTN_PTR(fn, dq, a.q_len);
    PAR_CUDA__ATTN_PTR(fn, dk, a.k_len);
    PAR_CUDA__ATTN_PTR(fn, dv, a.k_len);
    if (a.q_len == 0 && a.k_len == 0) return PAR_OK;
    PAR_CUDA__ENTER(cu, "cuda attention_bwd");
    if (a.q_len == 0) { /* no query: dk = dv = 0 (or unchanged) */
        if (!accumulate) {
            const size_t bytes = (size_t)a.batch * (size_t)a.k_len * (size_t)a.kv_heads * (size_t)a.head_dim *
                                 par_dtype_size(d->dtype);
            PAR_CUDA__CALL(cudaMemsetAsync(dk, 0, bytes, cu->stream), "cuda attention_bwd");
            PAR_CUDA__CALL(cudaMemsetAsync(dv, 0, bytes, cu->stream), "cuda attention_bwd");
        }
        return PAR_OK;
    }
    st = par_cuda__workspace(cu, (size_t)a.batch * (size_t)a.q_heads * (size_t)a.q_len * sizeof(float), &dsum);
    if (st != PAR_OK) return st;
    {
        const void *ptrs[8] = {q, k, v, o, do_, dq, dk, dv};
        if (par_cuda__fa_fits(cu, d, ptrs, 8)) { /* NULL (no keys) counts as aligned */
            st = d->dtype == PAR_BF16
                     ? par_cuda__fa_bwd_dispatch<__nv_bfloat16>(a, cu->stream, q, k, v, o, lse, (float *)dsum, do_,
                                                                dq, dk, dv, accumulate)
                     : par_cuda__fa_bwd_dispatch<__half>(a, cu->stream, q, k, v, o, lse, (float *)dsum, do_, dq, dk,
                                                         dv, accumulate);
            if (st != PAR_OK) return st;
            return par_cuda__launched("cuda attention_bwd");
        }
    }
    if (d->dtype == PAR_F32)
        par_cuda__attn_bwd_dispatch<float>(a, cu->stream, q, k, v, o, lse, (float *)dsum, do_, dq, dk, dv,
                                           accumulate);
    else if (d->dtype == PAR_BF16)
        par_cuda__attn_bwd_dispatch<__nv_bfloat16>(a, cu->stream, q, k, v, o, lse, (float *)dsum, do_, dq, dk, dv,
                                                   accumulate);
    else
        par_cuda__attn_bwd_dispatch<__half>(a, cu->stream, q, k, v, o, lse, (float *)dsum, do_, dq, dk, dv,
                                            accumulate);
    return par_cuda__launched("cuda attention_bwd");
}

static par_status par_cuda__attention_merge_hook(void *user, const par_attn_desc *d, float *o, float *lse,
                                                 const float *o_b, const float *lse_b) {
    par_cuda__compute *cu = (par_cuda__compute *)user;
    par_cuda__attn_args a;
    int64_t rows;
    static const char fn[] = "cuda attention_merge";
    par_status st = par_cuda__attn_check(fn, d, &a);
    if (st != PAR_OK) return st;
    PAR_CUDA__ATTN_PTR(fn, o, a.q_len);
    PAR_CUDA__ATTN_PTR(fn, lse, a.q_len);
    PAR_CUDA__ATTN_PTR(fn, o_b, a.q_len);
    PAR_CUDA__ATTN_PTR(fn, lse_b, a.q_len);
    rows = (int64_t)a.batch * a.q_len * a.q_heads;
    if (rows == 0) return PAR_OK;
    PAR_CUDA__ENTER(cu, "cuda attention_merge");
    par_cuda__attn_merge_k<<<par_cuda__blocks(rows, PAR_CUDA__THREADS / 32), PAR_CUDA__THREADS, 0, cu->stream>>>(
        a, o, lse, o_b, lse_b);
    return par_cuda__launched("cuda attention_merge");
}

/* ------------------------------------------------------- fused kernels */

static int par_cuda__float_type(par_dtype t) { return t == PAR_F32 || t == PAR_BF16 || t == PAR_F16; }

/* The activation hooks' `dtype` (compute table version 4): the type of their
   void tensors, f32, bf16 or f16; checked first, so that even an empty call
   with a bad dtype fails. */
#define PAR_CUDA__ACT_TYPE(fn, dt)                                                                         \
    PAR_CUDA__NEED(par_cuda__float_type(dt), "%s: dtype %s (%d): the activation tensors are f32, bf16 or f16", \
                   fn, par_dtype_name(dt), (int)(dt))

/* Launch kernel<T> on cu's stream for the element type T of dtype (checked by
   PAR_CUDA__ACT_TYPE): the arguments name T to cast the void tensors. */
#define PAR_CUDA__LAUNCH_T(dt, kernel, grid, ...)                                  \
    do {                                                                           \
        if ((dt) == PAR_BF16) {                                                    \
            typedef __nv_bfloat16 T;                                               \
            kernel<T><<<(grid), PAR_CUDA__THREADS, 0, cu->stream>>>(__VA_ARGS__);  \
        } else if ((dt) == PAR_F16) {                                              \
            typedef __half T;                                                      \
            kernel<T><<<(grid), PAR_CUDA__THREADS, 0, cu->stream>>>(__VA_ARGS__);  \
        } else {                                                                   \
            typedef float T;                                                       \
            kernel<T><<<(grid), PAR_CUDA__THREADS, 0, cu->stream>>>(__VA_ARGS__);  \
        }                                                                          \
    } while (0)

static par_status par_cuda__rmsnorm_fwd_hook(void *user, par_dtype dtype, int64_t rows, int64_t dim, const void *x,
                                             const void *w, float eps, void *y, float *rstd) {
    par_cuda__compute *cu = (par_cuda__compute *)user;
    PAR_CUDA__ACT_TYPE("cuda rmsnorm_fwd", dtype);
    PAR_CUDA__NEED(rows >= 0 && dim > 0, "cuda rmsnorm_fwd: bad shape [%lld, %lld]", (long long)rows,
                   (long long)dim);
    PAR_CUDA__NEED(rows == 0 || (x && w && y), "cuda rmsnorm_fwd: NULL argument");
    if (rows == 0) return PAR_OK;
    PAR_CUDA__ENTER(cu, "cuda rmsnorm_fwd");
    PAR_CUDA__LAUNCH_T(dtype, par_cuda__rmsnorm_fwd_k, par_cuda__row_blocks(rows), rows, dim, (const T *)x,
                       (const T *)w, eps, (T *)y, rstd);
    return par_cuda__launched("cuda rmsnorm_fwd");
}

static par_status par_cuda__rmsnorm_bwd_hook(void *user, par_dtype dtype, int64_t rows, int64_t dim, const void *x,
                                             const void *w, const float *rstd, const void *dy, void *dx, float *dw) {
    par_cuda__compute *cu = (par_cuda__compute *)user;
    PAR_CUDA__ACT_TYPE("cuda rmsnorm_bwd", dtype);
    PAR_CUDA__NEED(rows >= 0 && dim > 0, "cuda rmsnorm_bwd: bad shape [%lld, %lld]", (long long)rows,
                   (long long)dim);
    PAR_CUDA__NEED(rows == 0 || (x && w && rstd && dy && dx && dw), "cuda rmsnorm_bwd: NULL argument");
    if (rows == 0) return PAR_OK;
    PAR_CUDA__ENTER(cu, "cuda rmsnorm_bwd");
    {
        /* dw first: it reads dy, which dx may overwrite. */
        const int64_t cols = (dim + PAR_CUDA__THREADS - 1) / PAR_CUDA__THREADS;
        int64_t ychunks = (rows + 63) / 64;
        if (ychunks > 256) ychunks = 256;
        if (cols > 65535 * 64) return par_cuda__fail(PAR_EUNSUPPORTED, "cuda rmsnorm_bwd: dim too large");
        dim3 grid((unsigned)cols, (unsigned)ychunks);
        PAR_CUDA__LAUNCH_T(dtype, par_cuda__rmsnorm_dw_k, grid, rows, dim, (const T *)x, rstd, (const T *)dy, dw);
    }
    PAR_CUDA__LAUNCH_T(dtype, par_cuda__rmsnorm_dx_k, par_cuda__row_blocks(rows), rows, dim, (const T *)x,
                       (const T *)w, rstd, (const T *)dy, (T *)dx);
    return par_cuda__launched("cuda rmsnorm_bwd");
}

static par_status par_cuda__rope(void *user, const char *fn, par_dtype dtype, int64_t tokens, int64_t heads,
                                 int64_t head_dim, const int64_t *pos, float theta, const void *x, void *y,
                                 double sign) {
    par_cuda__compute *cu = (par_cuda__compute *)user;
    PAR_CUDA__ACT_TYPE(fn, dtype);
    PAR_CUDA__NEED(tokens >= 0 && heads >= 0 && head_dim > 0 && head_dim % 2 == 0,
                   "%s: bad shape [%lld, %lld, %lld] (head_dim must be even and positive)", fn, (long long)tokens,
                   (long long)heads, (long long)head_dim);
    PAR_CUDA__NEED(theta > 0.0f, "%s: theta must be positive", fn);
    PAR_CUDA__NEED(tokens == 0 || heads == 0 || (x && y && pos), "%s: NULL argument", fn);
    if (tokens == 0 || heads == 0) return PAR_OK;
    PAR_CUDA__ENTER(cu, "cuda rope");
    PAR_CUDA__LAUNCH_T(dtype, par_cuda__rope_k, par_cuda__blocks(tokens * (head_dim / 2), PAR_CUDA__THREADS), tokens,
                       heads, head_dim, pos, theta, (const T *)x, (T *)y, sign);
    return par_cuda__launched(fn);
}

static par_status par_cuda__rope_fwd_hook(void *user, par_dtype dtype, int64_t tokens, int64_t heads,
                                          int64_t head_dim, const int64_t *pos, float theta, const void *x, void *y) {
    return par_cuda__rope(user, "cuda rope_fwd", dtype, tokens, heads, head_dim, pos, theta, x, y, 1.0);
}

static par_status par_cuda__rope_bwd_hook(void *user, par_dtype dtype, int64_t tokens, int64_t heads,
                                          int64_t head_dim, const int64_t *pos, float theta, const void *dy,
                                          void *dx) {
    return par_cuda__rope(user, "cuda rope_bwd", dtype, tokens, heads, head_dim, pos, theta, dy, dx, -1.0);
}

static par_status par_cuda__swiglu_fwd_hook(void *user, par_dtype dtype, int64_t n, const void *g, const void *u,
                                            void *h) {
    par_cuda__compute *cu = (par_cuda__compute *)user;
    PAR_CUDA__ACT_TYPE("cuda swiglu_fwd", dtype);
    PAR_CUDA__NEED(n >= 0, "cuda swiglu_fwd: negative size");
    PAR_CUDA__NEED(n == 0 || (g && u && h), "cuda swiglu_fwd: NULL argument");
    if (n == 0) return PAR_OK;
    PAR_CUDA__ENTER(cu, "cuda swiglu_fwd");
    PAR_CUDA__LAUNCH_T(dtype, par_cuda__swiglu_fwd_k, par_cuda__blocks(n, PAR_CUDA__THREADS), n, (const T *)g,
                       (const T *)u, (T *)h);
    return par_cuda__launched("cuda swiglu_fwd");
}

static par_status par_cuda__swiglu_bwd_hook(void *user, par_dtype dtype, int64_t n, const void *g, const void *u,
                                            const void *dh, void *dg, void *du) {
    par_cuda__compute *cu = (par_cuda__compute *)user;
    PAR_CUDA__ACT_TYPE("cuda swiglu_bwd", dtype);
    PAR_CUDA__NEED(n >= 0, "cuda swiglu_bwd: negative size");
    PAR_CUDA__NEED(n == 0 || (g && u && dh && dg && du), "cuda swiglu_bwd: NULL argument");
    if (n == 0) return PAR_OK;
    PAR_CUDA__ENTER(cu, "cuda swiglu_bwd");
    PAR_CUDA__LAUNCH_T(dtype, par_cuda__swiglu_bwd_k, par_cuda__blocks(n, PAR_CUDA__THREADS), n, (const T *)g,
                       (const T *)u, (const T *)dh, (T *)dg, (T *)du);
    return par_cuda__launched("cuda swiglu_bwd");
}

static par_status par_cuda__embedding_fwd_hook(void *user, par_dtype dtype, int64_t n, const int32_t *ids,
                                               const void *table, int64_t rows, int64_t dim, int64_t start,
                                               void *out) {
    par_cuda__compute *cu = (par_cuda__compute *)user;
    PAR_CUDA__ACT_TYPE("cuda embedding_fwd", dtype);
    PAR_CUDA__NEED(n >= 0 && rows >= 0 && dim > 0 && start >= 0, "cuda embedding_fwd: bad sizes");
    PAR_CUDA__NEED(n == 0 || (ids && out && (rows == 0 || table)), "cuda embedding_fwd: NULL argument");
    if (n == 0) return PAR_OK;
    PAR_CUDA__ENTER(cu, "cuda embedding_fwd");
    PAR_CUDA__LAUNCH_T(dtype, par_cuda__embedding_fwd_k, par_cuda__blocks(n * dim, PAR_CUDA__THREADS), n, ids,
                       (const T *)table, rows, dim, start, (T *)out, cu->flags);
    return par_cuda__launched("cuda embedding_fwd");
}

static par_status par_cuda__embedding_bwd_hook(void *user, par_dtype dtype, int64_t n, const int32_t *ids,
                                               const void *dout, int64_t rows, int64_t dim, int64_t start,
                                               float *dtable) {
    par_cuda__compute *cu = (par_cuda__compute *)user;
    PAR_CUDA__ACT_TYPE("cuda embedding_bwd", dtype);
    PAR_CUDA__NEED(n >= 0 && rows >= 0 && dim > 0 && start >= 0, "cuda embedding_bwd: bad sizes");
    PAR_CUDA__NEED(n == 0 || (ids && dout && (rows == 0 || dtable)), "cuda embedding_bwd: NULL argument");
    if (n == 0 || rows == 0) return PAR_OK;
    PAR_CUDA__ENTER(cu, "cuda embedding_bwd");
    PAR_CUDA__LAUNCH_T(dtype, par_cuda__embedding_bwd_k, par_cuda__blocks(n * dim, PAR_CUDA__THREADS), n, ids,
                       (const T *)dout, rows, dim, start, dtable, cu->flags);
    return par_cuda__launched("cuda embedding_bwd");
}

static par_status par_cuda__xent_hook(void *user, par_dtype dtype, int64_t rows, int64_t vocab, const void *logits,
                                      const int32_t *targets, float *loss, void *dlogits, float scale) {
    par_cuda__compute *cu = (par_cuda__compute *)user;
    PAR_CUDA__ACT_TYPE("cuda xent", dtype);
    PAR_CUDA__NEED(rows >= 0 && vocab > 0, "cuda xent: bad shape [%lld, %lld]", (long long)rows, (long long)vocab);
    PAR_CUDA__NEED(rows == 0 || (logits && targets && loss), "cuda xent: NULL argument");
    if (rows == 0) return PAR_OK;
    PAR_CUDA__ENTER(cu, "cuda xent");
    PAR_CUDA__LAUNCH_T(dtype, par_cuda__xent_k, par_cuda__row_blocks(rows), rows, vocab, (const T *)logits, targets,
                       loss, (T *)dlogits, scale, cu->flags);
    return par_cuda__launched("cuda xent");
}

static par_status par_cuda__xent_local_max_hook(void *user, par_dtype dtype, int64_t rows, int64_t v_local,
                                                const void *logits, float *max_out) {
    par_cuda__compute *cu = (par_cuda__compute *)user;
    PAR_CUDA__ACT_TYPE("cuda xent_local_max", dtype);
    PAR_CUDA__NEED(rows >= 0 && v_local >= 0, "cuda xent_local_max: negative size");
    PAR_CUDA__NEED(rows == 0 || (max_out && (v_local == 0 || logits)), "cuda xent_local_max: NULL argument");
    if (rows == 0) return PAR_OK;
    PAR_CUDA__ENTER(cu, "cuda xent_local_max");
    PAR_CUDA__LAUNCH_T(dtype, par_cuda__xent_max_k, par_cuda__row_blocks(rows), rows, v_local, (const T *)logits,
                       max_out);
    return par_cuda__launched("cuda xent_local_max");
}

static par_status par_cuda__xent_local_sumexp_hook(void *user, par_dtype dtype, int64_t rows, int64_t v_local,
                                                   const void *logits, const float *gmax, float *sum_out) {
    par_cuda__compute *cu = (par_cuda__compute *)user;
    PAR_CUDA__ACT_TYPE("cuda xent_local_sumexp", dtype);
    PAR_CUDA__NEED(rows >= 0 && v_local >= 0, "cuda xent_local_sumexp: negative size");
    PAR_CUDA__NEED(rows == 0 || (gmax && sum_out && (v_local == 0 || logits)),
                   "cuda xent_local_sumexp: NULL argument");
    if (rows == 0) return PAR_OK;
    PAR_CUDA__ENTER(cu, "cuda xent_local_sumexp");
    PAR_CUDA__LAUNCH_T(dtype, par_cuda__xent_sumexp_k, par_cuda__row_blocks(rows), rows, v_local, (const T *)logits,
                       gmax, sum_out);
    return par_cuda__launched("cuda xent_local_sumexp");
}

static par_status par_cuda__xent_local_target_hook(void *user, par_dtype dtype, int64_t rows, int64_t v_local,
                                                   const void *logits, const int32_t *targets, int64_t start,
                                                   float *tgt_out) {
    par_cuda__compute *cu = (par_cuda__compute *)user;
    PAR_CUDA__ACT_TYPE("cuda xent_local_target", dtype);
    PAR_CUDA__NEED(rows >= 0 && v_local >= 0 && start >= 0, "cuda xent_local_target: bad sizes");
    PAR_CUDA__NEED(rows == 0 || (targets && tgt_out && (v_local == 0 || logits)),
                   "cuda xent_local_target: NULL argument");
    if (rows == 0) return PAR_OK;
    PAR_CUDA__ENTER(cu, "cuda xent_local_target");
    PAR_CUDA__LAUNCH_T(dtype, par_cuda__xent_target_k, par_cuda__blocks(rows, PAR_CUDA__THREADS), rows, v_local,
                       (const T *)logits, targets, start, tgt_out);
    return par_cuda__launched("cuda xent_local_target");
}

static par_status par_cuda__xent_loss_from_pieces_hook(void *user, int64_t rows, const float *gmax,
                                                       const float *gsum, const float *tgt, const int32_t *targets,
                                                       float *loss) {
    par_cuda__compute *cu = (par_cuda__compute *)user;
    PAR_CUDA__NEED(rows >= 0, "cuda xent_loss_from_pieces: negative size");
    PAR_CUDA__NEED(rows == 0 || (gmax && gsum && tgt && targets && loss), "cuda xent_loss_from_pieces: NULL argument");
    if (rows == 0) return PAR_OK;
    PAR_CUDA__ENTER(cu, "cuda xent_loss_from_pieces");
    par_cuda__xent_pieces_k<<<par_cuda__blocks(rows, PAR_CUDA__THREADS), PAR_CUDA__THREADS, 0, cu->stream>>>(
        rows, gmax, gsum, tgt, targets, loss);
    return par_cuda__launched("cuda xent_loss_from_pieces");
}

static par_status par_cuda__xent_bwd_split_hook(void *user, par_dtype dtype, int64_t rows, int64_t v_local,
                                                const void *logits, const int32_t *targets, int64_t start,
                                                const float *gmax, const float *gsum, float scale, void *dlogits) {
    par_cuda__compute *cu = (par_cuda__compute *)user;
    PAR_CUDA__ACT_TYPE("cuda xent_bwd_split", dtype);
    PAR_CUDA__NEED(rows >= 0 && v_local >= 0 && start >= 0, "cuda xent_bwd_split: bad sizes");
    PAR_CUDA__NEED(rows == 0 || v_local == 0 || (logits && targets && gmax && gsum && dlogits),
                   "cuda xent_bwd_split: NULL argument");
    if (rows == 0 || v_local == 0) return PAR_OK;
    PAR_CUDA__ENTER(cu, "cuda xent_bwd_split");
    PAR_CUDA__LAUNCH_T(dtype, par_cuda__xent_bwd_split_k, par_cuda__blocks(rows * v_local, PAR_CUDA__THREADS), rows,
                       v_local, (const T *)logits, targets, start, gmax, gsum, scale, (T *)dlogits);
    return par_cuda__launched("cuda xent_bwd_split");
}

static par_status par_cuda__adamw_hook(void *user, int64_t n, float *p, const float *g, float *m, float *v, float lr,
                                       float beta1, float beta2, float eps, float weight_decay, int64_t step) {
    par_cuda__compute *cu = (par_cuda__compute *)user;
    float bc1, bc2, step_size, inv_sqrt_bc2, decay;
    PAR_CUDA__NEED(n >= 0, "cuda adamw: negative size");
    PAR_CUDA__NEED(step >= 1, "cuda adamw: step is %lld; steps count from 1", (long long)step);
    PAR_CUDA__NEED(beta1 >= 0.0f && beta1 < 1.0f && beta2 >= 0.0f && beta2 < 1.0f,
                   "cuda adamw: betas (%g, %g) must be in [0, 1)", (double)beta1, (double)beta2);
    PAR_CUDA__NEED(n == 0 || (p && g && m && v), "cuda adamw: NULL argument");
    if (n == 0) return PAR_OK;
    /* The scalars exactly as the CPU table computes them. */
    bc1 = (float)(1.0 - pow((double)beta1, (double)step));
    bc2 = (float)(1.0 - pow((double)beta2, (double)step));
    step_size = lr / bc1;
    inv_sqrt_bc2 = (float)(1.0 / sqrt((double)bc2));
    decay = 1.0f - lr * weight_decay;
    PAR_CUDA__ENTER(cu, "cuda adamw");
    par_cuda__adamw_k<<<par_cuda__blocks(n, PAR_CUDA__THREADS), PAR_CUDA__THREADS, 0, cu->stream>>>(
        n, p, g, m, v, beta1, beta2, eps, step_size, inv_sqrt_bc2, decay);
    return par_cuda__launched("cuda adamw");
}

static par_status par_cuda__scale_hook(void *user, int64_t n, float alpha, float *x) {
    par_cuda__compute *cu = (par_cuda__compute *)user;
    PAR_CUDA__NEED(n >= 0 && (n == 0 || x), "cuda scale: bad arguments");
    if (n == 0) return PAR_OK;
    PAR_CUDA__ENTER(cu, "cuda scale");
    par_cuda__scale_k<<<par_cuda__blocks(n, PAR_CUDA__THREADS), PAR_CUDA__THREADS, 0, cu->stream>>>(n, alpha, x);
    return par_cuda__launched("cuda scale");
}

static par_status par_cuda__axpy_hook(void *user, par_dtype dtype, int64_t n, float alpha, const void *x, void *y) {
    par_cuda__compute *cu = (par_cuda__compute *)user;
    PAR_CUDA__ACT_TYPE("cuda axpy", dtype);
    PAR_CUDA__NEED(n >= 0 && (n == 0 || (x && y)), "cuda axpy: bad arguments");
    if (n == 0) return PAR_OK;
    PAR_CUDA__ENTER(cu, "cuda axpy");
    PAR_CUDA__LAUNCH_T(dtype, par_cuda__axpy_k, par_cuda__blocks(n, PAR_CUDA__THREADS), n, alpha, (const T *)x,
                       (T *)y);
    return par_cuda__launched("cuda axpy");
}

static par_status par_cuda__sumsq_hook(void *user, int64_t n, const float *x, double *out) {
    par_cuda__compute *cu = (par_cuda__compute *)user;
    unsigned blocks;
    par_status st;
    PAR_CUDA__NEED(n >= 0 && out && (n == 0 || x), "cuda sumsq: bad arguments");
    *out = 0.0;
    if (n == 0) return PAR_OK;
    PAR_CUDA__ENTER(cu, "cuda sumsq");
    blocks = par_cuda__blocks(n, PAR_CUDA__THREADS);
    if (blocks > PAR_CUDA__PARTS) blocks = PAR_CUDA__PARTS;
    par_cuda__sumsq_part_k<<<blocks, PAR_CUDA__THREADS, 0, cu->stream>>>(n, x, cu->parts);
    par_cuda__sum_parts_k<<<1, PAR_CUDA__THREADS, 0, cu->stream>>>((int)blocks, cu->parts,
                                                                   cu->parts + PAR_CUDA__PARTS);
    if ((st = par_cuda__launched("cuda sumsq")) != PAR_OK) return st;
    PAR_CUDA__CALL(cudaMemcpyAsync(out, cu->parts + PAR_CUDA__PARTS, sizeof(double), cudaMemcpyDeviceToHost,
                                   cu->stream),
                   "cuda sumsq");
    return par_cuda__sync(cu, "cuda sumsq");
}

template <typename S>
static void par_cuda__convert_to(par_cuda__compute *cu, int64_t n, const S *src, par_dtype dst_type, void *dst) {
    const unsigned blocks = par_cuda__blocks(n, PAR_CUDA__THREADS);
    if (dst_type == PAR_BF16)
        par_cuda__convert_k<<<blocks, PAR_CUDA__THREADS, 0, cu->stream>>>(n, src, (__nv_bfloat16 *)dst);
    else if (dst_type == PAR_F16)
        par_cuda__convert_k<<<blocks, PAR_CUDA__THREADS, 0, cu->stream>>>(n, src, (__half *)dst);
    else
        par_cuda__convert_k<<<blocks, PAR_CUDA__THREADS, 0, cu->stream>>>(n, src, (float *)dst);
}

static par_status par_cuda__convert_hook(void *user, int64_t n, par_dtype src_type, const void *src,
                                         par_dtype dst_type, void *dst) {
    par_cuda__compute *cu = (par_cuda__compute *)user;
    PAR_CUDA__NEED(par_cuda__float_type(src_type) && par_cuda__float_type(dst_type),
                   "cuda convert: %s to %s: only f32, bf16 and f16 convert", par_dtype_name(src_type),
                   par_dtype_name(dst_type));
    PAR_CUDA__NEED(n >= 0 && (n == 0 || (src && dst)), "cuda convert: bad arguments");
    if (n == 0) return PAR_OK;
    PAR_CUDA__ENTER(cu, "cuda convert");
    if (src_type == PAR_BF16) par_cuda__convert_to(cu, n, (const __nv_bfloat16 *)src, dst_type, dst);
    else if (src_type == PAR_F16) par_cuda__convert_to(cu, n, (const __half *)src, dst_type, dst);
    else par_cuda__convert_to(cu, n, (const float *)src, dst_type, dst);
    return par_cuda__launched("cuda convert");
}

static void par_cuda__compute_destroy(void *user) {
    par_cuda__compute *cu = (par_cuda__compute *)user;
    size_t i;
    if (!cu) return;
    (void)cudaSetDevice(cu->device);
    if (cu->stream) (void)cudaStreamSynchronize(cu->stream);
    for (i = 0; i < cu->num_allocs; i++) cudaFree(cu->allocs[i].ptr);
    PAR_CUDA__FREE(cu->allocs);
    cudaFree(cu->work);
    cudaFree(cu->parts);
    cudaFree(cu->flags);
    if (cu->blas) cublasDestroy(cu->blas);
    if (cu->own_stream && cu->stream) cudaStreamDestroy(cu->stream);
    PAR_CUDA__FREE(cu);
}

extern "C" par_status par_compute_cuda(const par_cuda_desc *desc, par_compute_table *table) {
    par_cuda__compute *cu;
    int count = 0, device = desc ? desc->device : 0;
    cudaError_t e;
    cublasStatus_t bs;
    par_status st;
    if (!table) return par_cuda__fail(PAR_EINVAL, "par_compute_cuda: NULL table");
    memset(table, 0, sizeof *table);
    e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess) return par_cuda__runtime(e, "par_compute_cuda: cudaGetDeviceCount");
    if (device < 0 || device >= count)
        return par_cuda__fail(count ? PAR_EINVAL : PAR_EUNSUPPORTED,
                              "par_compute_cuda: device %d does not exist (%d visible)", device, count);
    cu = (par_cuda__compute *)PAR_CUDA__MALLOC(sizeof *cu);
    if (!cu) return par_cuda__fail(PAR_ENOMEM, "par_compute_cuda: out of host memory");
    memset(cu, 0, sizeof *cu);
    cu->device = device;
    cu->f32_compute = desc && desc->allow_tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
    if (desc && (desc->attention_kernel < 0 || desc->attention_kernel > 2)) {
        st = par_cuda__fail(PAR_EINVAL, "par_compute_cuda: attention_kernel %d (need 0 auto, 1 SIMT, 2 tensor cores)",
                            desc->attention_kernel);
        goto fail;
    }
#define PAR_CUDA__INIT(call, what)                     \
    do {                                               \
        e = (call);                                    \
        if (e != cudaSuccess) {                        \
            st = par_cuda__runtime(e, what);           \
            goto fail;                                 \
        }                                              \
    } while (0)
    PAR_CUDA__INIT(cudaSetDevice(device), "par_compute_cuda: cudaSetDevice");
    if (!desc || desc->attention_kernel != 1) {
        char why[200];
        cu->tensor_attn = par_cuda__fa_available(device, why, sizeof why);
        if (!cu->tensor_attn && desc && desc->attention_kernel == 2) {
            st = par_cuda__fail(PAR_EUNSUPPORTED, "par_compute_cuda: tensor-core attention unavailable: %s", why);
            goto fail;
        }
    }
    if (desc && desc->stream) {
        cu->stream = (cudaStream_t)desc->stream;
    } else {
        PAR_CUDA__INIT(cudaStreamCreateWithFlags(&cu->stream, cudaStreamNonBlocking), "par_compute_cuda: stream");
        cu->own_stream = 1;
    }
    PAR_CUDA__INIT(cudaMalloc((void **)&cu->parts, (PAR_CUDA__PARTS + 1) * sizeof(double)), "par_compute_cuda");
    PAR_CUDA__INIT(cudaMalloc((void **)&cu->flags, sizeof(int)), "par_compute_cuda");
    PAR_CUDA__INIT(cudaMemset(cu->flags, 0, sizeof(int)), "par_compute_cuda");
    PAR_CUDA__INIT(cudaDeviceSynchronize(), "par_compute_cuda"); /* the legacy-stream memset is done */
#undef PAR_CUDA__INIT
    bs = cublasCreate(&cu->blas);
    if (bs == CUBLAS_STATUS_SUCCESS) bs = cublasSetStream(cu->blas, cu->stream);
    if (bs != CUBLAS_STATUS_SUCCESS) {
        st = par_cuda__blas(bs, "par_compute_cuda: cublasCreate");
        goto fail;
    }

    table->version = PAR_COMPUTE_TABLE_VERSION;
    table->name = "cuda";
    table->user = cu;
    table->device_memory = 1;
    table->stream = (void *)cu->stream;
    table->alloc = par_cuda__alloc_hook;
    table->free = par_cuda__free_hook;
    table->memcpy = par_cuda__memcpy_hook;
    table->memset = par_cuda__memset_hook;
    table->memcpy_2d = par_cuda__memcpy_2d_hook;
    table->memory_report = par_cuda__memory_report_hook;
    table->scratch_bound = par_cuda__scratch_bound_hook;
    table->synchronize = par_cuda__synchronize_hook;
    table->gemm = par_cuda__gemm_hook;
    table->attention_fwd = par_cuda__attention_fwd_hook;
    table->attention_bwd = par_cuda__attention_bwd_hook;
    table->attention_merge = par_cuda__attention_merge_hook;
    table->rmsnorm_fwd = par_cuda__rmsnorm_fwd_hook;
    table->rmsnorm_bwd = par_cuda__rmsnorm_bwd_hook;
    table->rope_fwd = par_cuda__rope_fwd_hook;
    table->rope_bwd = par_cuda__rope_bwd_hook;
    table->swiglu_fwd = par_cuda__swiglu_fwd_hook;
    table->swiglu_bwd = par_cuda__swiglu_bwd_hook;
    table->embedding_fwd = par_cuda__embedding_fwd_hook;
    table->embedding_bwd = par_cuda__embedding_bwd_hook;
    table->xent = par_cuda__xent_hook;
    table->xent_local_max = par_cuda__xent_local_max_hook;
    table->xent_local_sumexp = par_cuda__xent_local_sumexp_hook;
    table->xent_local_target = par_cuda__xent_local_target_hook;
    table->xent_loss_from_pieces = par_cuda__xent_loss_from_pieces_hook;
    table->xent_bwd_split = par_cuda__xent_bwd_split_hook;
    table->adamw = par_cuda__adamw_hook;
    table->scale = par_cuda__scale_hook;
    table->axpy = par_cuda__axpy_hook;
    table->sumsq = par_cuda__sumsq_hook;
    table->convert = par_cuda__convert_hook;
    table->destroy = par_cuda__compute_destroy;
    return PAR_OK;
fail:
    par_cuda__compute_destroy(cu);
    memset(table, 0, sizeof *table);
    return st;
}

/* ======================================================================
   >>cuda-threads   many ranks as threads on one GPU: the threads backend's
                    data mover over device memory (par_run_cuda_threads)
   ==================================================================== */

#define PAR_CUDA__MOVER_MAX 256 /* ranks: the reduce kernel takes every source pointer as a parameter (2 KiB) */

typedef struct par_cuda__srcs {
    const void *p[PAR_CUDA__MOVER_MAX];
} par_cuda__srcs;

/* Sums wrap for the integer types (added as unsigned), as the threads backend. */
template <typename T> __device__ __forceinline__ T par_cuda__mv_add(T a, T b) { return a + b; }
template <> __device__ __forceinline__ int32_t par_cuda__mv_add<int32_t>(int32_t a, int32_t b) {
    return (int32_t)((uint32_t)a + (uint32_t)b);
}
template <> __device__ __forceinline__ long long par_cuda__mv_add<long long>(long long a, long long b) {
    return (long long)((unsigned long long)a + (unsigned long long)b);
}

/* dst[i] = op over the n sources' element i, in member order, accumulated in
   A (float for f32 / bf16 / f16, the type itself otherwise) and stored once;
   op 1 (avg) divides by n (integers truncate), 2 (max) keeps x > acc. One
   thread per element reads every source before writing, so dst may be one
   of them (in place). */
template <typename T, typename A>
__global__ void par_cuda__mv_reduce_k(T *dst, par_cuda__srcs s, int n, int64_t count, int op) {
    PAR_CUDA__GRID_STRIDE(i, count) {
        A acc = (A)par_cuda__mv_ld(((const T *)s.p[0])[i]);
        for (int m = 1; m < n; m++) {
            const A x = (A)par_cuda__mv_ld(((const T *)s.p[m])[i]);
            acc = op == 2 ? (x > acc ? x : acc) : par_cuda__mv_add<A>(acc, x);
        }
        if (op == 1) acc = acc / (A)n;
        dst[i] = par_cuda__mv_st_as<T, A>(acc);
    }
}

typedef struct par_cuda__mover {
    par_cuda_desc cuda;      /* each rank's compute table: this, on its own stream */
    int n;
    cudaStream_t *streams;   /* [n]: rank r's table's stream, set by r's rank_compute */
} par_cuda__mover;

static par_status par_cuda__mv_enter(par_cuda__mover *mv, int rank, const char *fn, cudaStream_t *stream) {
    cudaError_t e;
    if (rank < 0 || rank >= mv->n || !mv->streams[rank])
        return par_cuda__fail(PAR_EINVAL, "%s: rank %d has no stream (not a rank of this run, or before its table)", fn,
                              rank);
    if ((e = cudaSetDevice(mv->cuda.device)) != cudaSuccess) return par_cuda__runtime(e, fn);
    *stream = mv->streams[rank];
    return PAR_OK;
}

static par_status par_cuda__mv_copy(void *user, int rank, void *dst, const void *src, size_t bytes) {
    par_cuda__mover *mv = (par_cuda__mover *)user;
    cudaStream_t stream = 0;
    cudaError_t e;
    par_status st = par_cuda__mv_enter(mv, rank, "cuda-threads copy", &stream);
    if (st != PAR_OK) return st;
    e = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream);
    return e == cudaSuccess ? PAR_OK : par_cuda__runtime(e, "cuda-threads copy: cudaMemcpyAsync");
}

template <typename T, typename A>
static par_status par_cuda__mv_launch(cudaStream_t stream, void *dst, const par_cuda__srcs &s, int n, int64_t count,
                                      int op) {
    par_cuda__mv_reduce_k<T, A><<<par_cuda__blocks(count, PAR_CUDA__THREADS), PAR_CUDA__THREADS, 0, stream>>>(
        (T *)dst, s, n, count, op);
    return par_cuda__launched("cuda-threads reduce");
}

static par_status par_cuda__mv_reduce(void *user, int rank, void *dst, const void *const *srcs, int n, int64_t count,
                                      par_dtype dtype, par_reduce_op op) {
    par_cuda__mover *mv = (par_cuda__mover *)user;
    par_cuda__srcs s;
    cudaStream_t stream = 0;
    int k = op == PAR_REDUCE_AVG ? 1 : op == PAR_REDUCE_MAX ? 2 : 0;
    par_status st = par_cuda__mv_enter(mv, rank, "cuda-threads reduce", &stream);
    if (st != PAR_OK) return st;
    if (n < 1 || n > PAR_CUDA__MOVER_MAX)
        return par_cuda__fail(PAR_EINVAL, "cuda-threads reduce: %d sources, need 1..%d", n, PAR_CUDA__MOVER_MAX);
    memset(&s, 0, sizeof s);
    memcpy(s.p, srcs, sizeof(void *) * (size_t)n);
    switch (dtype) {
    case PAR_F32: return par_cuda__mv_launch<float, float>(stream, dst, s, n, count, k);
    case PAR_BF16: return par_cuda__mv_launch<__nv_bfloat16, float>(stream, dst, s, n, count, k);
    case PAR_F16: return par_cuda__mv_launch<__half, float>(stream, dst, s, n, count, k);
    case PAR_F64: return par_cuda__mv_launch<double, double>(stream, dst, s, n, count, k);
    case PAR_I32: return par_cuda__mv_launch<int32_t, int32_t>(stream, dst, s, n, count, k);
    case PAR_I64: return par_cuda__mv_launch<long long, long long>(stream, dst, s, n, count, k);
    default: return par_cuda__fail(PAR_EINVAL, "cuda-threads reduce: unknown dtype %d", (int)dtype);
    }
}

static par_status par_cuda__mv_sync(void *user, int rank) {
    par_cuda__mover *mv = (par_cuda__mover *)user;
    cudaStream_t stream = 0;
    cudaError_t e;
    par_status st = par_cuda__mv_enter(mv, rank, "cuda-threads sync", &stream);
    if (st != PAR_OK) return st;
    e = cudaStreamSynchronize(stream);
    return e == cudaSuccess ? PAR_OK : par_cuda__runtime(e, "cuda-threads sync: cudaStreamSynchronize");
}

/* Rank `rank`'s CUDA table, on a stream of its own, which its copies and
   reductions then use too: a collective follows the kernels that made its input. */
static par_status par_cuda__mv_rank_compute(void *user, int rank, par_compute_table *table) {
    par_cuda__mover *mv = (par_cuda__mover *)user;
    par_status st = par_compute_cuda(&mv->cuda, table);
    if (st == PAR_OK) mv->streams[rank] = (cudaStream_t)table->stream;
    return st;
}

extern "C" par_status par_run_cuda_threads(const par_ctx_desc *desc, const par_cuda_desc *cuda, int n, par_rank_fn fn,
                                           void *arg) {
    par_cuda__mover mv;
    par_thr_mover hooks;
    int count = 0;
    cudaError_t e;
    par_status st;
    if (n < 1 || n > PAR_CUDA__MOVER_MAX)
        return par_cuda__fail(PAR_EINVAL, "par_run_cuda_threads: %d ranks, need 1..%d", n, PAR_CUDA__MOVER_MAX);
    if (!fn) return par_cuda__fail(PAR_EINVAL, "par_run_cuda_threads: NULL rank function");
    if (desc && desc->compute)
        return par_cuda__fail(PAR_EINVAL, "par_run_cuda_threads: desc->compute must be NULL (every rank gets its own "
                                          "CUDA table, on its own stream)");
    if (cuda && cuda->stream)
        return par_cuda__fail(PAR_EINVAL, "par_run_cuda_threads: cuda->stream must be NULL (every rank gets a stream "
                                          "of its own)");
    memset(&mv, 0, sizeof mv);
    if (cuda) mv.cuda = *cuda;
    if ((e = cudaGetDeviceCount(&count)) != cudaSuccess) return par_cuda__runtime(e, "par_run_cuda_threads");
    if (mv.cuda.device < 0 || mv.cuda.device >= count)
        return par_cuda__fail(count ? PAR_EINVAL : PAR_EUNSUPPORTED,
                              "par_run_cuda_threads: device %d does not exist (%d visible)", mv.cuda.device, count);
    mv.n = n;
    mv.streams = (cudaStream_t *)PAR_CUDA__MALLOC(sizeof(cudaStream_t) * (size_t)n);
    if (!mv.streams) return par_cuda__fail(PAR_ENOMEM, "par_run_cuda_threads: out of host memory");
    memset(mv.streams, 0, sizeof(cudaStream_t) * (size_t)n);
    memset(&hooks, 0, sizeof hooks);
    hooks.user = &mv;
    hooks.copy = par_cuda__mv_copy;
    hooks.reduce = par_cuda__mv_reduce;
    hooks.sync = par_cuda__mv_sync;
    hooks.rank_compute = par_cuda__mv_rank_compute;
    st = par_run_threads_mover(desc, &hooks, n, fn, arg);
    PAR_CUDA__FREE(mv.streams);
    return st;
}

/* ======================================================================
   >>cuda-nccl   the NCCL comm table (PARALLEL_WITH_MPI)
   ==================================================================== */

#if defined(PARALLEL_WITH_MPI)

struct par_comm_group {
    ncclComm_t comm; /* NULL once aborted */
    int count, index;
    int *ranks;      /* world ranks, member order */
    int *scratch;    /* one device int for barrier */
    char name[96];   /* "group [0 1 2 3]" for messages */
    int split;       /* made by ncclCommSplit from the world (else ncclCommInitRank) */
    int pending_recvs; /* async recvs launched and not yet completed by wait/test (for the timeout's hint) */
    /* With group_streams: the group's own stream, and the event that orders it
       after the table's stream at each issue; NULL otherwise. */
    cudaStream_t stream;
    cudaEvent_t issued;
};

struct par_request {
    cudaEvent_t done; /* recorded behind the op (for async send/recv: when their group is launched) */
    par_comm_group *group;
    const char *op;
    /* Async send/recv only, while queued (see par_cuda__nccl_launch). */
    par_request *next;    /* the table's queue, in posting order */
    par_request *partner; /* a send to oneself and the recv from oneself it feeds */
    void *buf;
    int64_t count;
    size_t bytes;
    ncclDataType_t type;
    int is_send, self, peer;
    unsigned run; /* the table's run it was posted in */
    int pick;     /* chosen by the launch under way */
    int pending; /* counted in group->pending_recvs */
    par_status status; /* not PAR_OK: the op failed before it ran; wait/test report error[] */
    char error[320];
};

typedef struct par_cuda__nccl {
    int device, rank, size, timeout_ms;
    int group_init, group_streams; /* par_nccl_desc's, resolved */
    cudaStream_t stream;     /* what ops are ordered on (with group_streams: after) */
    cudaStream_t own_stream;
    MPI_Comm mpi;            /* duplicate of the bootstrap communicator */
    par_comm_group *world;
    /* Async send/recv queued, not yet given to NCCL (see par_cuda__nccl_pick),
       oldest first, and the thread that posted them; NULL when none. */
    par_request *queue, *queue_tail;
    const void *group_thread;
    unsigned run; /* counts launches: the posts since the last one are the current run */
} par_cuda__nccl;

/* par_cuda__nccl_launch's all_of for "every queued op". */
#define PAR_CUDA__NCCL_ALL ((const par_comm_group *)-1)

static const char *par_cuda__nccl_magic = "nccl";

static thread_local char par_cuda__thread_mark; /* its address identifies the calling thread */

static const void *par_cuda__this_thread(void) { return &par_cuda__thread_mark; }

static par_status par_cuda__mpi(int rc, const char *what) {
    char text[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (rc == MPI_SUCCESS) return PAR_OK;
    if (MPI_Error_string(rc, text, &len) != MPI_SUCCESS) snprintf(text, sizeof text, "MPI error %d", rc);
    return par_cuda__fail(PAR_ECOMM, "%s: %s", what, text);
}

static par_status par_cuda__nccl_err(par_cuda__nccl *nc, par_comm_group *g, const char *op, ncclResult_t r) {
    const char *detail = g && g->comm ? ncclGetLastError(g->comm) : "";
    return par_cuda__fail(PAR_ECOMM, "nccl %s on %s (rank %d): %s%s%s", op, g ? g->name : "?", nc->rank,
                          ncclGetErrorString(r), detail && *detail ? ": " : "", detail ? detail : "");
}

static void par_cuda__nccl_abort(par_comm_group *g) {
    if (g->comm) {
        (void)ncclCommAbort(g->comm);
        g->comm = NULL;
    }
}

/* The stream a group's ops run on: its own with group_streams, else the table's. */
static cudaStream_t par_cuda__nccl_stream(par_cuda__nccl *nc, par_comm_group *g) {
    return g->stream ? g->stream : nc->stream;
}

/* With group_streams, at each issue: the group's stream waits for what is on
   the table's stream now (the kernels that produced the op's input). One event
   per group is enough: cudaStreamWaitEvent takes the event's state when called. */
static cudaError_t par_cuda__nccl_order(par_cuda__nccl *nc, par_comm_group *g) {
    cudaError_t e;
    if (!g->stream) return cudaSuccess;
    e = cudaEventRecord(g->issued, nc->stream);
    return e == cudaSuccess ? cudaStreamWaitEvent(g->stream, g->issued, 0) : e;
}

/* With group_streams, after an op completed for the caller: kernels launched on
   the table's stream from now on follow it. The host saw the event complete,
   so this only matters to work the device still queues; it is cheap and keeps
   the rule explicit. */
static void par_cuda__nccl_join(par_cuda__nccl *nc, par_comm_group *g, cudaEvent_t done) {
    if (g->stream) (void)cudaStreamWaitEvent(nc->stream, done, 0);
}

/* An op whose completion was seen after its communicator had been aborted (by a
   failure or timeout of another op): it may have been cut short. */
static par_status par_cuda__nccl_aborted(par_cuda__nccl *nc, par_comm_group *g, const char *op) {
    return par_cuda__fail(PAR_ECOMM, "nccl %s on %s (rank %d): the communicator was aborted after another op failed "
                                     "or timed out, so this op may not have completed (its buffers are undefined)",
                          op, g->name, nc->rank);
}

static void par_cuda__req_free(par_request *q) {
    if (q->pending) q->group->pending_recvs--;
    cudaEventDestroy(q->done); /* also for an event never recorded */
    PAR_CUDA__FREE(q);
}

/* A queued request failed before it ran: wait/test report `status` and the
   sentence. The first reason is kept. */
static PAR__PRINTF(3, 4) void par_cuda__req_fail(par_request *q, par_status status, const char *fmt, ...) {
    va_list ap;
    if (q->status != PAR_OK) return;
    q->status = status;
    va_start(ap, fmt);
    vsnprintf(q->error, sizeof q->error, fmt, ap);
    va_end(ap);
}

/* Which queued async send/recv a launch starts (q->pick).

   One stream (the default): all of them, as soon as the table's next call
   other than an async send/recv comes: every op on the stream then runs in the
   order the program asked for it.

   A stream per group: every send, every send/recv to oneself, and the receives
   posted in the same run as a send of their group (a run: the posts since the
   table's last other call; recv(prev) + send(next) of a ring step must progress
   together). A receive posted in a run without such a send waits in the queue
   until it is needed: its own wait or test, a later receive from the same peer
   on the same group being launched (NCCL matches a peer's messages in order),
   a collective or barrier on its group, or any other call (group_create,
   group_destroy, set_stream, destroy: all_of == everything). Why: NCCL runs a
   communicator's ops in order and completes a fused group as a whole, so a
   receive posted ahead (a pipeline's PA / PG) that were launched at once would
   hold back this rank's later sends on its group (one of which its message may
   need) and the wait of every op fused with it, until the timeout. Waiting in
   the queue it is issued where the program waits for it, which is what a
   blocking receive does; the peer's send to it is held on the peer's stream of
   that group meanwhile, not on its other groups'. all_of == (void *)-1: pick
   everything. */
static void par_cuda__nccl_pick(par_cuda__nccl *nc, const par_comm_group *all_of, const par_request *want) {
    par_request *q, *p, **v;
    int n = 0, i, j;
    for (q = nc->queue; q; q = q->next) {
        int tied = 0;
        if (!q->is_send && !q->self && q->run == nc->run)
            for (p = nc->queue; p && !tied; p = p->next) tied = p->is_send && p->run == nc->run && p->group == q->group;
        q->pick = !nc->group_streams || all_of == PAR_CUDA__NCCL_ALL || q->is_send || q->self || tied ||
                  q == want || q->group == all_of;
        n++;
    }
    /* A picked receive takes the earlier ones from the same peer on its group. */
    v = (par_request **)PAR_CUDA__MALLOC(sizeof *v * (size_t)n);
    if (!v) { /* cannot keep the order cheaply: launch everything */
        for (q = nc->queue; q; q = q->next) q->pick = 1;
        return;
    }
    for (i = 0, q = nc->queue; q; q = q->next) v[i++] = q;
    for (i = n - 1; i >= 0; i--)
        if (v[i]->pick && !v[i]->is_send && !v[i]->self)
            for (j = 0; j < i; j++)
                if (!v[j]->is_send && !v[j]->self && v[j]->group == v[i]->group && v[j]->peer == v[i]->peer)
                    v[j]->pick = 1;
    PAR_CUDA__FREE(v);
}

/* Launch async send/recv queued on `nc` (see par_cuda__nccl_pick for which).

   Why a group: NCCL's send and recv each block on the GPU until the peer's
   matching call runs, and calls that must progress together have to be fused
   between ncclGroupStart and ncclGroupEnd, inside which they progress
   independently (calls to the same peer still run in order) -- NCCL user guide,
   "Point-to-point communication". As separate launches on one stream, a
   recv(prev) posted before a send(next) would wait forever around a ring.

   Sends to oneself are paired here: NCCL pairs a send to oneself with a recv
   from oneself only within one group, and an unmatched one makes ncclGroupEnd
   fail the whole group ("Trying to send to self without a matching recv",
   ncclInvalidUsage). So they are paired first, i-th send with i-th recv of the
   same group in posting order, and only pairs of equal size reach NCCL; the
   others fail alone (PAR_EINVAL).

   ncclGroupEnd then enqueues the picked ops on their streams, and each one's
   event is recorded behind them; until then it was never recorded, and
   cudaEventQuery reads an unrecorded event as complete, which is why wait and
   test launch first. Failures are kept in the requests for wait/test. A failed
   ncclGroupEnd has cancelled the whole group, so all its requests fail and the
   communicators involved are aborted: their peers' matching ops cannot complete,
   and later ops on them fail at once (PAR_ECOMM) instead of at the timeout.
   The picked requests leave the queue (they are the caller's, for wait/test);
   the others stay for a later launch, and a new run begins. */
static void par_cuda__nccl_launch(par_cuda__nccl *nc, const par_comm_group *all_of, const par_request *want) {
    par_request *q, *p, **link;
    ncclResult_t r = ncclSuccess, end = ncclSuccess;
    int saved = -1, any = 0;
    if (!nc->queue) return;
    if (cudaGetDevice(&saved) != cudaSuccess) saved = -1;
    (void)cudaSetDevice(nc->device);
    par_cuda__nccl_pick(nc, all_of, want);
    for (q = nc->queue; q; q = q->next) {
        if (!q->pick || !q->self || !q->is_send || q->partner) continue;
        for (p = nc->queue; p; p = p->next)
            if (p->pick && p->self && !p->is_send && !p->partner && p->group == q->group) break;
        if (p) q->partner = p, p->partner = q;
    }
    for (q = nc->queue; q; q = q->next) {
        if (!q->pick) continue;
        if (q->self && !q->partner)
            par_cuda__req_fail(q, PAR_EINVAL,
                               "nccl %s on %s (rank %d): a %s this rank itself needs its matching %s posted before "
                               "the table's next call (NCCL pairs them within one group)",
                               q->op, q->group->name, nc->rank, q->is_send ? "send to" : "recv from",
                               q->is_send ? "recv" : "send");
        else if (q->self && q->bytes != q->partner->bytes)
            par_cuda__req_fail(q, PAR_EINVAL,
                               "nccl %s on %s (rank %d): this %s of %zu bytes with itself meets a %s of %zu bytes "
                               "(the counts of a matching send and recv must agree)",
                               q->op, q->group->name, nc->rank, q->op, q->bytes, q->partner->op, q->partner->bytes);
        else if (!q->group->comm)
            par_cuda__req_fail(q, PAR_ECOMM, "nccl %s on %s (rank %d): the communicator was aborted", q->op,
                               q->group->name, nc->rank);
        else if (q->count > 0 && r == ncclSuccess) {
            if (!any && (r = ncclGroupStart()) != ncclSuccess) break;
            any = 1;
            r = q->is_send ? ncclSend(q->buf, (size_t)q->count, q->type, q->peer, q->group->comm,
                                      par_cuda__nccl_stream(nc, q->group))
                           : ncclRecv(q->buf, (size_t)q->count, q->type, q->peer, q->group->comm,
                                      par_cuda__nccl_stream(nc, q->group));
        }
    }
    if (any) end = ncclGroupEnd(); /* always once opened: the group must be closed on this thread */
    if (r == ncclSuccess) r = end;
    for (q = nc->queue; q; q = q->next) {
        if (!q->pick) continue;
        if (r != ncclSuccess) {
            const char *detail = q->group->comm ? ncclGetLastError(q->group->comm) : "";
            par_cuda__req_fail(q, PAR_ECOMM,
                               "nccl %s on %s (rank %d): launching the fused async send/recv failed: %s%s%s; the "
                               "communicator was aborted",
                               q->op, q->group->name, nc->rank, ncclGetErrorString(r), detail && *detail ? ": " : "",
                               detail ? detail : "");
        } else if (q->status == PAR_OK) {
            cudaError_t e = cudaEventRecord(q->done, par_cuda__nccl_stream(nc, q->group));
            if (e != cudaSuccess)
                par_cuda__req_fail(q, par_cuda__status_of(e), "nccl %s on %s (rank %d): recording its completion: %s",
                                   q->op, q->group->name, nc->rank, cudaGetErrorString(e));
            else if (!q->is_send && !q->self)
                q->pending = 1, q->group->pending_recvs++;
        }
    }
    if (r != ncclSuccess)
        for (q = nc->queue; q; q = q->next)
            if (q->pick) par_cuda__nccl_abort(q->group);
    /* Unlink the picked ones (the caller's now, for wait/test); the rest stay, in order. */
    nc->queue_tail = NULL;
    for (link = &nc->queue; (q = *link) != NULL;) {
        if (q->pick) {
            *link = q->next;
            q->next = q->partner = NULL;
            q->pick = 0;
        } else {
            nc->queue_tail = q;
            link = &q->next;
        }
    }
    nc->run++;
    if (!nc->queue) nc->group_thread = NULL;
    if (saved >= 0) (void)cudaSetDevice(saved);
}

/* PAR_EINVAL when this table's queued async send/recv were posted on another
   thread: make the table's calls from that thread. */
static par_status par_cuda__nccl_same_thread(par_cuda__nccl *nc, const char *what) {
    if (nc->group_thread && nc->group_thread != par_cuda__this_thread())
        return par_cuda__fail(PAR_EINVAL, "nccl %s (rank %d): this table's async send/recv were posted on another "
                                          "thread and are not launched yet: make the table's calls from that thread",
                              what, nc->rank);
    return PAR_OK;
}

/* First step of every call except a send/recv (which joins the queue): launch
   what the call needs launched (see par_cuda__nccl_pick). Nothing is done on
   PAR_EINVAL. */
static par_status par_cuda__nccl_flush(par_cuda__nccl *nc, const char *what, const par_comm_group *all_of,
                                       const par_request *want) {
    par_status st = par_cuda__nccl_same_thread(nc, what);
    if (st != PAR_OK) return st;
    par_cuda__nccl_launch(nc, all_of, want);
    return PAR_OK;
}

static void par_cuda__group_free(par_comm_group *g) {
    if (!g) return;
    if (g->issued) cudaEventDestroy(g->issued);
    if (g->stream) cudaStreamDestroy(g->stream); /* returns at once; freed when its work is done */
    cudaFree(g->scratch);
    PAR_CUDA__FREE(g->ranks);
    PAR_CUDA__FREE(g);
}

/* A group's own stream (non-blocking: it must not sync with the legacy default
   stream) and its ordering event. */
static cudaError_t par_cuda__nccl_group_stream(par_comm_group *g) {
    cudaError_t e = cudaStreamCreateWithFlags(&g->stream, cudaStreamNonBlocking);
    if (e != cudaSuccess) {
        g->stream = NULL;
        return e;
    }
    e = cudaEventCreateWithFlags(&g->issued, cudaEventDisableTiming);
    if (e != cudaSuccess) g->issued = NULL;
    return e;
}

/* ncclCommSplit exists from NCCL 2.18: the header must have it and the loaded
   library must be that new (a program built on a newer header can load an
   older libnccl.so.2, which would then lack the symbol's behaviour). */
static int par_cuda__nccl_split_available(void) {
#if defined(NCCL_VERSION_CODE) && NCCL_VERSION_CODE >= NCCL_VERSION(2, 18, 0)
    int v = 0;
    return ncclGetVersion(&v) == ncclSuccess && v >= NCCL_VERSION(2, 18, 0);
#else
    return 0;
#endif
}

/* The automatic rule of par_nccl_desc.group_init: split when the members are the
   whole world (they are distinct world ranks, so count == size says it) and
   NCCL can. Every member decides the same: count is the same on all (the
   table's contract), group_init and the library should be too. A rank whose
   world communicator was aborted fails in ncclCommSplit rather than falling
   back to init, so that no rank inits while the others split. A world of one
   keeps its own init: that is the path the one-GPU runs verified. */
static int par_cuda__nccl_can_split(par_cuda__nccl *nc, int count) {
    return nc->group_init == PAR_NCCL_GROUP_AUTO && nc->world && count == nc->size && count > 1 &&
           par_cuda__nccl_split_available();
}

static par_status par_cuda__nccl_group_create(void *user, const int *ranks, int count, par_comm_group **out) {
    par_cuda__nccl *nc = (par_cuda__nccl *)user;
    par_comm_group *g;
    MPI_Group world_group = MPI_GROUP_NULL, sub_group = MPI_GROUP_NULL;
    MPI_Comm sub = MPI_COMM_NULL;
    ncclUniqueId id;
    ncclResult_t r;
    cudaError_t e;
    par_status st = PAR_OK;
    int i, index = -1, rc;
    size_t len;
    PAR_CUDA__NEED(out, "nccl group_create: NULL group");
    *out = NULL;
    if ((st = par_comm_check_ranks("nccl", ranks, count, nc->size, nc->rank, &index)) != PAR_OK) return st;
    /* ncclCommInitRank cannot be part of a group with other calls. */
    if ((st = par_cuda__nccl_flush(nc, "group_create", PAR_CUDA__NCCL_ALL, NULL)) != PAR_OK) return st;
    g = (par_comm_group *)PAR_CUDA__MALLOC(sizeof *g);
    if (!g) return par_cuda__fail(PAR_ENOMEM, "nccl group_create: out of host memory");
    memset(g, 0, sizeof *g);
    g->ranks = (int *)PAR_CUDA__MALLOC(sizeof(int) * (size_t)count);
    if (!g->ranks) {
        PAR_CUDA__FREE(g);
        return par_cuda__fail(PAR_ENOMEM, "nccl group_create: out of host memory");
    }
    memcpy(g->ranks, ranks, sizeof(int) * (size_t)count);
    g->count = count;
    g->index = index;
    len = (size_t)snprintf(g->name, sizeof g->name, "group [");
    for (i = 0; i < count && len + 16 < sizeof g->name; i++)
        len += (size_t)snprintf(g->name + len, sizeof g->name - len, i ? " %d" : "%d", ranks[i]);
    snprintf(g->name + len, sizeof g->name - len, i < count ? " ...]" : "]");

    if ((e = cudaSetDevice(nc->device)) != cudaSuccess ||
        (e = cudaMalloc((void **)&g->scratch, sizeof(int))) != cudaSuccess ||
        (nc->group_streams && (e = par_cuda__nccl_group_stream(g)) != cudaSuccess)) {
        par_cuda__group_free(g);
        return par_cuda__runtime(e, "nccl group_create");
    }
    if (par_cuda__nccl_can_split(nc, count)) {
        /* Every world rank is a member, so every rank of the parent calls this. */
        if ((r = ncclCommSplit(nc->world->comm, 0, index, &g->comm, NULL)) != ncclSuccess) {
            g->comm = NULL;
            st = par_cuda__nccl_err(nc, g, "ncclCommSplit", r);
            par_cuda__group_free(g);
            return st;
        }
        g->split = 1;
        *out = g;
        return PAR_OK;
    }
    /* The unique id travels over an MPI communicator of the members only, so
       that non-members need not take part (the table's contract). */
    memset(&id, 0, sizeof id);
    if (index == 0 && (r = ncclGetUniqueId(&id)) != ncclSuccess) {
        /* The others would wait in the broadcast: send them an all-zero id, which
           ncclCommInitRank rejects, rather than leave them hanging. */
        st = par_cuda__nccl_err(nc, g, "ncclGetUniqueId", r);
    }
    rc = MPI_Comm_group(nc->mpi, &world_group);
    if (rc == MPI_SUCCESS) rc = MPI_Group_incl(world_group, count, ranks, &sub_group);
    if (rc == MPI_SUCCESS) rc = MPI_Comm_create_group(nc->mpi, sub_group, 0x7a11, &sub);
    if (rc == MPI_SUCCESS) rc = MPI_Bcast(&id, (int)sizeof id, MPI_BYTE, 0, sub);
    if (sub != MPI_COMM_NULL) MPI_Comm_free(&sub);
    if (sub_group != MPI_GROUP_NULL) MPI_Group_free(&sub_group);
    if (world_group != MPI_GROUP_NULL) MPI_Group_free(&world_group);
    if (st == PAR_OK && rc != MPI_SUCCESS) st = par_cuda__mpi(rc, "nccl group_create: broadcasting the unique id");
    if (st == PAR_OK && (r = ncclCommInitRank(&g->comm, count, id, index)) != ncclSuccess) {
        g->comm = NULL;
        st = par_cuda__nccl_err(nc, g, "ncclCommInitRank", r);
    }
    if (st != PAR_OK) {
        par_cuda__group_free(g);
        return st;
    }
    *out = g;
    return PAR_OK;
}

static void par_cuda__nccl_group_destroy(void *user, par_comm_group *g) {
    par_cuda__nccl *nc = (par_cuda__nccl *)user;
    if (!g) return;
    /* Queued send/recv may use g: launch them first (finalize then waits for them).
       From a thread that cannot launch them, g is left alone (the error says why). */
    if (par_cuda__nccl_flush(nc, "group_destroy", PAR_CUDA__NCCL_ALL, NULL) != PAR_OK) return;
    (void)cudaSetDevice(nc->device);
    if (g->comm) {
        /* Finalize flushes what is still queued; then destroy frees. */
        (void)ncclCommFinalize(g->comm);
        (void)ncclCommDestroy(g->comm);
    }
    par_cuda__group_free(g);
}

static int par_cuda__nccl_type(par_dtype t, ncclDataType_t *out) {
    switch (t) {
    case PAR_F32: *out = ncclFloat32; return 1;
    case PAR_BF16: *out = ncclBfloat16; return 1;
    case PAR_F16: *out = ncclFloat16; return 1;
    case PAR_I32: *out = ncclInt32; return 1;
    case PAR_I64: *out = ncclInt64; return 1;
    case PAR_F64: *out = ncclFloat64; return 1;
    default: return 0;
    }
}

/* Common steps of every op: the argument rules every backend shares
   (par_comm_check_args); launching this thread's open group of queued async
   send/recv, which a send/recv joins instead (par_cuda__nccl_post); a live
   communicator. */
static par_status par_cuda__nccl_begin(par_cuda__nccl *nc, par_comm_group *g, par_comm_call call, const void *send,
                                       const void *recv, int64_t count, par_dtype dtype, par_reduce_op rop, int peer,
                                       ncclDataType_t *type, par_request **req) {
    const char *op = par_comm_call_name(call);
    par_comm_args a;
    par_status st;
    cudaError_t e;
    if (req) *req = NULL;
    PAR_CUDA__NEED(g, "nccl %s: NULL group", op);
    a.call = call, a.send = send, a.recv = recv, a.count = count, a.dtype = dtype, a.op = rop, a.peer = peer;
    if ((st = par_comm_check_args("nccl", g->name, g->count, g->index, &a)) != PAR_OK) return st;
    PAR_CUDA__NEED(par_cuda__nccl_type(dtype, type), "nccl %s: unknown dtype %d", op, (int)dtype);
    if (call == PAR_CALL_SEND || call == PAR_CALL_RECV)
        st = par_cuda__nccl_same_thread(nc, op);
    else
        st = par_cuda__nccl_flush(nc, op, g, NULL); /* so that this op runs after them, in order */
    if (st != PAR_OK) return st;
    if (!g->comm)
        return par_cuda__fail(PAR_ECOMM, "nccl %s on %s (rank %d): the communicator was aborted after an earlier "
                                         "failure", op, g->name, nc->rank);
    e = cudaSetDevice(nc->device);
    if (e != cudaSuccess) return par_cuda__runtime(e, "nccl: cudaSetDevice");
    if ((e = par_cuda__nccl_order(nc, g)) != cudaSuccess)
        return par_cuda__runtime(e, "nccl: ordering the group's stream");
    return PAR_OK;
}

/* Wait for `done` with the timeout, watching the communicator for async errors. */
static par_status par_cuda__nccl_wait_event(par_cuda__nccl *nc, par_comm_group *g, cudaEvent_t done, const char *op,
                                            int self_pending) {
    const auto start = std::chrono::steady_clock::now();
    long spins = 0;
    for (;;) {
        cudaError_t e = cudaEventQuery(done);
        ncclResult_t ar = ncclSuccess;
        /* After an abort (another op's failure or timeout) the event completes
           whether or not the op did. */
        if (e == cudaSuccess) return g->comm ? PAR_OK : par_cuda__nccl_aborted(nc, g, op);
        if (e != cudaErrorNotReady) return par_cuda__runtime(e, "nccl wait");
        if (g->comm && ncclCommGetAsyncError(g->comm, &ar) == ncclSuccess && ar != ncclSuccess &&
            ar != ncclInProgress) {
            par_status st = par_cuda__nccl_err(nc, g, op, ar);
            par_cuda__nccl_abort(g);
            return st;
        }
        if (std::chrono::steady_clock::now() - start > std::chrono::milliseconds(nc->timeout_ms)) {
            /* NCCL runs a communicator's ops in order: say so when an async recv of
               this group was pending (other than this op itself), the one hang this
               table's fused p2p cannot prevent. */
            const int hint = g->pending_recvs > (self_pending ? 1 : 0);
            par_cuda__nccl_abort(g);
            return par_cuda__fail(PAR_ETIMEOUT, "nccl %s on %s (rank %d) did not complete within %d ms (a member "
                                                "did not arrive?%s); the communicator was aborted",
                                  op, g->name, nc->rank, nc->timeout_ms,
                                  hint ? " or an async receive launched earlier on this group held it back: NCCL "
                                         "runs a group's ops in order, so post a receive after this rank's own "
                                         "sends that its message needs" : "");
        }
        if (++spins > 1000) std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
}

/* After enqueueing: record completion, then hand out a request or wait here. */
static par_status par_cuda__nccl_finish(par_cuda__nccl *nc, par_comm_group *g, const char *op, par_request **req) {
    cudaEvent_t ev = NULL;
    cudaError_t e = cudaEventCreateWithFlags(&ev, cudaEventDisableTiming);
    par_status st;
    if (e == cudaSuccess) e = cudaEventRecord(ev, par_cuda__nccl_stream(nc, g));
    if (e != cudaSuccess) {
        if (ev) cudaEventDestroy(ev);
        return par_cuda__runtime(e, "nccl: recording the completion event");
    }
    if (req) {
        par_request *r = (par_request *)PAR_CUDA__MALLOC(sizeof *r);
        if (!r) {
            /* Cannot hand out a request: complete it here instead. */
            st = par_cuda__nccl_wait_event(nc, g, ev, op, 0);
            cudaEventDestroy(ev);
            return st != PAR_OK ? st : par_cuda__fail(PAR_ENOMEM, "nccl %s: out of host memory for a request", op);
        }
        memset(r, 0, sizeof *r); /* status PAR_OK, not queued */
        r->done = ev;
        r->group = g;
        r->op = op;
        *req = r;
        return PAR_OK;
    }
    st = par_cuda__nccl_wait_event(nc, g, ev, op, 0);
    if (st == PAR_OK) par_cuda__nccl_join(nc, g, ev);
    cudaEventDestroy(ev);
    return st;
}

/* Complete a launched request and free it: the failure recorded in it, or its
   event waited for. */
static par_status par_cuda__nccl_complete(par_cuda__nccl *nc, par_request *q) {
    par_status st;
    (void)cudaSetDevice(nc->device);
    if (q->status != PAR_OK)
        st = par_cuda__fail(q->status, "%s", q->error);
    else
        st = par_cuda__nccl_wait_event(nc, q->group, q->done, q->op, q->pending);
    if (st == PAR_OK) par_cuda__nccl_join(nc, q->group, q->done);
    par_cuda__req_free(q);
    return st;
}

static ncclRedOp_t par_cuda__nccl_op(par_reduce_op op, par_dtype t) {
    if (op == PAR_REDUCE_MAX) return ncclMax;
    if (op == PAR_REDUCE_AVG && (t == PAR_F32 || t == PAR_BF16 || t == PAR_F16 || t == PAR_F64)) return ncclAvg;
    return ncclSum; /* integer avg: sum, then par_cuda__div_k */
}

static par_status par_cuda__nccl_int_avg(par_cuda__nccl *nc, par_comm_group *g, void *buf, int64_t count,
                                         par_dtype t, par_reduce_op op) {
    cudaStream_t s = par_cuda__nccl_stream(nc, g);
    if (op != PAR_REDUCE_AVG || count == 0 || g->count == 1) return PAR_OK;
    if (t == PAR_I32)
        par_cuda__div_k<int32_t><<<par_cuda__blocks(count, PAR_CUDA__THREADS), PAR_CUDA__THREADS, 0, s>>>(
            count, (int32_t *)buf, (int32_t)g->count);
    else if (t == PAR_I64)
        par_cuda__div_k<int64_t><<<par_cuda__blocks(count, PAR_CUDA__THREADS), PAR_CUDA__THREADS, 0, s>>>(
            count, (int64_t *)buf, (int64_t)g->count);
    else
        return PAR_OK;
    return par_cuda__launched("nccl avg: integer division");
}

/* A reduction over a group of one rank is a copy (sum, max and avg of one value
   are the value). Done here, not by NCCL: on the first H100 run (2026-11-27,
   the machine's own libnccl) bf16 ncclAvg on a one-rank communicator left the
   last element of an odd count unwritten out of place (all_reduce and
   reduce_scatter, n=1048577; f32/f16 avg and every sum were right), and a copy
   is cheaper anyway. */
static par_status par_cuda__nccl_one_rank(par_cuda__nccl *nc, par_comm_group *g, const void *send, void *recv,
                                          int64_t count, par_dtype dtype, const char *op, par_request **req) {
    if (send != recv) {
        cudaError_t e = cudaMemcpyAsync(recv, send, (size_t)count * par_dtype_size(dtype), cudaMemcpyDeviceToDevice,
                                        par_cuda__nccl_stream(nc, g));
        if (e != cudaSuccess) return par_cuda__runtime(e, op);
    }
    return par_cuda__nccl_finish(nc, g, op, req);
}

static par_status par_cuda__nccl_all_reduce(void *user, par_comm_group *g, const void *send, void *recv,
                                            int64_t count, par_dtype dtype, par_reduce_op op, par_request **req) {
    par_cuda__nccl *nc = (par_cuda__nccl *)user;
    ncclDataType_t t;
    par_status st = par_cuda__nccl_begin(nc, g, PAR_CALL_ALL_REDUCE, send, recv, count, dtype, op, 0, &t, req);
    if (st != PAR_OK) return st;
    if (count > 0) {
        ncclResult_t r;
        if (g->count == 1) return par_cuda__nccl_one_rank(nc, g, send, recv, count, dtype, "all_reduce", req);
        r = ncclAllReduce(send, recv, (size_t)count, t, par_cuda__nccl_op(op, dtype), g->comm,
            par_cuda__nccl_stream(nc, g));
        if (r != ncclSuccess) return par_cuda__nccl_err(nc, g, "all_reduce", r);
        if ((st = par_cuda__nccl_int_avg(nc, g, recv, count, dtype, op)) != PAR_OK) return st;
    }
    return par_cuda__nccl_finish(nc, g, "all_reduce", req);
}

static par_status par_cuda__nccl_all_gather(void *user, par_comm_group *g, const void *send, void *recv,
                                            int64_t count, par_dtype dtype, par_request **req) {
    par_cuda__nccl *nc = (par_cuda__nccl *)user;
    ncclDataType_t t;
    par_status st =
        par_cuda__nccl_begin(nc, g, PAR_CALL_ALL_GATHER, send, recv, count, dtype, PAR_REDUCE_SUM, 0, &t, req);
    if (st != PAR_OK) return st;
    if (count > 0) {
        /* NCCL is in place exactly when send == recv + index*count, as the contract. */
        ncclResult_t r = ncclAllGather(send, recv, (size_t)count, t, g->comm, par_cuda__nccl_stream(nc, g));
        if (r != ncclSuccess) return par_cuda__nccl_err(nc, g, "all_gather", r);
    }
    return par_cuda__nccl_finish(nc, g, "all_gather", req);
}

static par_status par_cuda__nccl_reduce_scatter(void *user, par_comm_group *g, const void *send, void *recv,
                                                int64_t count, par_dtype dtype, par_reduce_op op,
                                                par_request **req) {
    par_cuda__nccl *nc = (par_cuda__nccl *)user;
    ncclDataType_t t;
    par_status st = par_cuda__nccl_begin(nc, g, PAR_CALL_REDUCE_SCATTER, send, recv, count, dtype, op, 0, &t, req);
    if (st != PAR_OK) return st;
    if (count > 0) {
        ncclResult_t r;
        if (g->count == 1) return par_cuda__nccl_one_rank(nc, g, send, recv, count, dtype, "reduce_scatter", req);
        r = ncclReduceScatter(send, recv, (size_t)count, t, par_cuda__nccl_op(op, dtype), g->comm,
            par_cuda__nccl_stream(nc, g));
        if (r != ncclSuccess) return par_cuda__nccl_err(nc, g, "reduce_scatter", r);
        if ((st = par_cuda__nccl_int_avg(nc, g, recv, count, dtype, op)) != PAR_OK) return st;
    }
    return par_cuda__nccl_finish(nc, g, "reduce_scatter", req);
}

static par_status par_cuda__nccl_all_to_all(void *user, par_comm_group *g, const void *send, void *recv,
                                            int64_t count, par_dtype dtype, par_request **req) {
    par_cuda__nccl *nc = (par_cuda__nccl *)user;
    ncclDataType_t t;
    size_t block;
    int j;
    par_status st =
        par_cuda__nccl_begin(nc, g, PAR_CALL_ALL_TO_ALL, send, recv, count, dtype, PAR_REDUCE_SUM, 0, &t, req);
    if (st != PAR_OK) return st;
    block = (size_t)count * par_dtype_size(dtype);
    if (count > 0) {
        ncclResult_t r = ncclGroupStart(), r2;
        for (j = 0; j < g->count && r == ncclSuccess; j++) {
            r = ncclSend((const char *)send + (size_t)j * block, (size_t)count, t, j, g->comm,
                par_cuda__nccl_stream(nc, g));
            if (r == ncclSuccess)
                r = ncclRecv((char *)recv + (size_t)j * block, (size_t)count, t, j, g->comm,
                    par_cuda__nccl_stream(nc, g));
        }
        r2 = ncclGroupEnd(); /* always close the group, even after a failed call */
        if (r == ncclSuccess) r = r2;
        if (r != ncclSuccess) return par_cuda__nccl_err(nc, g, "all_to_all", r);
    }
    return par_cuda__nccl_finish(nc, g, "all_to_all", req);
}

static par_status par_cuda__nccl_broadcast(void *user, par_comm_group *g, void *buf, int64_t count, par_dtype dtype,
                                           int root, par_request **req) {
    par_cuda__nccl *nc = (par_cuda__nccl *)user;
    ncclDataType_t t;
    par_status st = par_cuda__nccl_begin(nc, g, PAR_CALL_BROADCAST, buf, buf, count, dtype, PAR_REDUCE_SUM, root, &t, req);
    if (st != PAR_OK) return st;
    if (count > 0) {
        ncclResult_t r = ncclBroadcast(buf, buf, (size_t)count, t, root, g->comm, par_cuda__nccl_stream(nc, g));
        if (r != ncclSuccess) return par_cuda__nccl_err(nc, g, "broadcast", r);
    }
    return par_cuda__nccl_finish(nc, g, "broadcast", req);
}

/* A send/recv joins the table's queue; par_cuda__nccl_launch gives it to NCCL
   at once for a blocking one, else at a later call (see par_cuda__nccl_pick).
   The request's event is created now and recorded then. */
static par_status par_cuda__nccl_post(par_cuda__nccl *nc, par_comm_group *g, void *buf, int64_t count,
                                      par_dtype dtype, ncclDataType_t t, int peer, int is_send, const char *op,
                                      par_request **req) {
    par_request *q;
    cudaError_t e;
    q = (par_request *)PAR_CUDA__MALLOC(sizeof *q);
    if (!q) return par_cuda__fail(PAR_ENOMEM, "nccl %s: out of host memory for a request", op);
    memset(q, 0, sizeof *q);
    e = cudaEventCreateWithFlags(&q->done, cudaEventDisableTiming);
    if (e != cudaSuccess) {
        PAR_CUDA__FREE(q);
        return par_cuda__runtime(e, "nccl: creating the completion event");
    }
    q->group = g;
    q->op = op;
    q->buf = buf;
    q->count = count;
    q->bytes = (size_t)count * par_dtype_size(dtype);
    q->type = t;
    q->is_send = is_send;
    q->peer = peer;
    q->self = peer == g->index;
    q->run = nc->run;
    q->status = PAR_OK;
    nc->group_thread = par_cuda__this_thread();
    if (nc->queue_tail)
        nc->queue_tail->next = q;
    else
        nc->queue = q;
    nc->queue_tail = q;
    *req = q;
    return PAR_OK;
}

static par_status par_cuda__nccl_p2p(void *user, par_comm_group *g, void *buf, int64_t count, par_dtype dtype,
                                     int peer, par_request **req, int is_send) {
    par_cuda__nccl *nc = (par_cuda__nccl *)user;
    const char *op = is_send ? "send" : "recv";
    ncclDataType_t t;
    par_status st = par_cuda__nccl_begin(nc, g, is_send ? PAR_CALL_SEND : PAR_CALL_RECV, buf, buf, count, dtype,
                                         PAR_REDUCE_SUM, peer, &t, req);
    if (st != PAR_OK) return st;
    if (req) return par_cuda__nccl_post(nc, g, buf, count, dtype, t, peer, is_send, op, req);
    PAR_CUDA__NEED(peer != g->index, "nccl %s: peer %d is this rank itself (NCCL would wait forever)", op, peer);
    /* Blocking: it joins the async send/recv queued before it, all are launched
       together, then it waits. Launching those first would queue this op behind
       them on the stream, where a recv(prev) posted async and a blocking
       send(next) around a ring would wait for each other forever. */
    {
        par_request *q = NULL;
        if ((st = par_cuda__nccl_post(nc, g, buf, count, dtype, t, peer, is_send, op, &q)) != PAR_OK) return st;
        par_cuda__nccl_launch(nc, NULL, q);
        return par_cuda__nccl_complete(nc, q);
    }
}

static par_status par_cuda__nccl_send(void *user, par_comm_group *g, const void *buf, int64_t count, par_dtype dtype,
                                      int peer, par_request **req) {
    return par_cuda__nccl_p2p(user, g, (void *)buf, count, dtype, peer, req, 1);
}

static par_status par_cuda__nccl_recv(void *user, par_comm_group *g, void *buf, int64_t count, par_dtype dtype,
                                      int peer, par_request **req) {
    return par_cuda__nccl_p2p(user, g, buf, count, dtype, peer, req, 0);
}

static par_status par_cuda__nccl_barrier(void *user, par_comm_group *g) {
    par_cuda__nccl *nc = (par_cuda__nccl *)user;
    ncclDataType_t t;
    ncclResult_t r;
    par_status st = par_cuda__nccl_begin(nc, g, PAR_CALL_BARRIER, NULL, NULL, 0, PAR_I32, PAR_REDUCE_SUM, 0, &t, NULL);
    if (st != PAR_OK) return st;
    r = ncclAllReduce(g->scratch, g->scratch, 1, ncclInt32, ncclSum, g->comm, par_cuda__nccl_stream(nc, g));
    if (r != ncclSuccess) return par_cuda__nccl_err(nc, g, "barrier", r);
    return par_cuda__nccl_finish(nc, g, "barrier", NULL);
}

/* wait and test launch the open group first: a queued request's event is not
   recorded before, and an unrecorded event reads as complete. On PAR_EINVAL from
   that step (wrong thread) the request is left as it was. */
static par_status par_cuda__nccl_wait(void *user, par_request *req) {
    par_cuda__nccl *nc = (par_cuda__nccl *)user;
    par_status st;
    PAR_CUDA__NEED(req, "nccl wait: NULL request");
    if ((st = par_cuda__nccl_flush(nc, "wait", NULL, req)) != PAR_OK) return st;
    return par_cuda__nccl_complete(nc, req);
}

static par_status par_cuda__nccl_test(void *user, par_request *req, int *done) {
    par_cuda__nccl *nc = (par_cuda__nccl *)user;
    par_comm_group *g;
    cudaError_t e;
    par_status st;
    PAR_CUDA__NEED(req && done, "nccl test: NULL request or done");
    *done = 0;
    if ((st = par_cuda__nccl_flush(nc, "test", NULL, req)) != PAR_OK) return st;
    (void)cudaSetDevice(nc->device);
    g = req->group;
    if (req->status != PAR_OK) {
        st = par_cuda__fail(req->status, "%s", req->error);
    } else {
        e = cudaEventQuery(req->done);
        if (e == cudaErrorNotReady) {
            ncclResult_t ar = ncclSuccess;
            if (!(g->comm && ncclCommGetAsyncError(g->comm, &ar) == ncclSuccess && ar != ncclSuccess &&
                  ar != ncclInProgress))
                return PAR_OK; /* still running */
            st = par_cuda__nccl_err(nc, g, req->op, ar);
            par_cuda__nccl_abort(g);
        } else if (e != cudaSuccess) {
            st = par_cuda__runtime(e, "nccl test");
        } else {
            st = g->comm ? PAR_OK : par_cuda__nccl_aborted(nc, g, req->op);
            if (st == PAR_OK) par_cuda__nccl_join(nc, g, req->done);
        }
    }
    *done = 1;
    par_cuda__req_free(req);
    return st;
}

static par_status par_cuda__nccl_set_stream(void *user, void *stream) {
    par_cuda__nccl *nc = (par_cuda__nccl *)user;
    /* Queued send/recv were given the current stream: launch them on it. */
    par_status st = par_cuda__nccl_flush(nc, "set_stream", PAR_CUDA__NCCL_ALL, NULL);
    if (st != PAR_OK) return st;
    nc->stream = stream ? (cudaStream_t)stream : nc->own_stream;
    return PAR_OK;
}

static void par_cuda__nccl_destroy(void *user) {
    par_cuda__nccl *nc = (par_cuda__nccl *)user;
    int finalized = 0;
    if (!nc) return;
    /* Queued send/recv are launched (their peers wait for them). If they sit in
       another thread's NCCL group, nothing can be freed safely here: that group
       still points at this table and its communicators. */
    if (par_cuda__nccl_flush(nc, "destroy", PAR_CUDA__NCCL_ALL, NULL) != PAR_OK) return;
    if (nc->world) par_cuda__nccl_group_destroy(nc, nc->world);
    (void)cudaSetDevice(nc->device);
    if (nc->own_stream) cudaStreamDestroy(nc->own_stream);
    MPI_Finalized(&finalized);
    if (!finalized && nc->mpi != MPI_COMM_NULL) MPI_Comm_free(&nc->mpi);
    PAR_CUDA__FREE(nc);
}

/* par_nccl_desc.group_streams resolved: 1 or -1 as given, 0 from
   $PARALLEL_NCCL_GROUP_STREAMS ("1" on, "0" or unset off, anything else refused
   so that a typo does not silently change what runs). */
static par_status par_cuda__nccl_streams_wanted(const par_nccl_desc *desc, int *on) {
    const char *env = getenv("PARALLEL_NCCL_GROUP_STREAMS");
    int v = desc ? desc->group_streams : 0;
    *on = 0;
    if (v < -1 || v > 1)
        return par_cuda__fail(PAR_EINVAL, "par_comm_nccl: group_streams %d must be 1 (a stream per group), -1 (one "
                                          "stream) or 0 ($PARALLEL_NCCL_GROUP_STREAMS)", v);
    if (v) {
        *on = v == 1;
        return PAR_OK;
    }
    if (!env || !*env || !strcmp(env, "0")) return PAR_OK;
    if (strcmp(env, "1"))
        return par_cuda__fail(PAR_EINVAL, "par_comm_nccl: $PARALLEL_NCCL_GROUP_STREAMS is \"%s\"; it must be 1 (a "
                                          "stream per group) or 0 (one stream)", env);
    *on = 1;
    return PAR_OK;
}

extern "C" par_status par_comm_nccl(const par_nccl_desc *desc, par_comm_table *table) {
    par_cuda__nccl *nc;
    MPI_Comm base = MPI_COMM_WORLD, local = MPI_COMM_NULL;
    int inited = 0, ndev = 0, local_rank = 0, rc, i, *all = NULL, streams = 0;
    cudaError_t e;
    par_status st;
    if (!table) return par_cuda__fail(PAR_EINVAL, "par_comm_nccl: NULL table");
    memset(table, 0, sizeof *table);
    if (desc && desc->timeout_ms < 0)
        return par_cuda__fail(PAR_EINVAL, "par_comm_nccl: timeout_ms %d must be >= 0", desc->timeout_ms);
    if (desc && desc->group_init != PAR_NCCL_GROUP_AUTO && desc->group_init != PAR_NCCL_GROUP_INIT)
        return par_cuda__fail(PAR_EINVAL, "par_comm_nccl: group_init %d must be PAR_NCCL_GROUP_AUTO (0) or "
                                          "PAR_NCCL_GROUP_INIT (1)", desc->group_init);
    if ((st = par_cuda__nccl_streams_wanted(desc, &streams)) != PAR_OK) return st;
    MPI_Initialized(&inited);
    if (!inited && (rc = MPI_Init(NULL, NULL)) != MPI_SUCCESS) return par_cuda__mpi(rc, "par_comm_nccl: MPI_Init");
    if (desc && desc->mpi_comm) base = *(const MPI_Comm *)desc->mpi_comm;
    nc = (par_cuda__nccl *)PAR_CUDA__MALLOC(sizeof *nc);
    if (!nc) return par_cuda__fail(PAR_ENOMEM, "par_comm_nccl: out of host memory");
    memset(nc, 0, sizeof *nc);
    nc->mpi = MPI_COMM_NULL;
    if ((rc = MPI_Comm_dup(base, &nc->mpi)) != MPI_SUCCESS) {
        nc->mpi = MPI_COMM_NULL;
        st = par_cuda__mpi(rc, "par_comm_nccl: MPI_Comm_dup");
        goto fail;
    }
    MPI_Comm_rank(nc->mpi, &nc->rank);
    MPI_Comm_size(nc->mpi, &nc->size);
    nc->timeout_ms = desc && desc->timeout_ms > 0 ? desc->timeout_ms : 0;
    nc->group_init = desc ? desc->group_init : PAR_NCCL_GROUP_AUTO;
    nc->group_streams = streams;
    if (!nc->timeout_ms) {
        const char *env = getenv("PARALLEL_TIMEOUT_MS");
        long v = env && *env ? strtol(env, NULL, 10) : 0;
        nc->timeout_ms = v > 0 && v <= INT_MAX ? (int)v : 600000;
    }
    /* Local rank from MPI itself (ranks sharing a node), whatever the launcher. */
    rc = MPI_Comm_split_type(nc->mpi, MPI_COMM_TYPE_SHARED, nc->rank, MPI_INFO_NULL, &local);
    if (rc == MPI_SUCCESS) rc = MPI_Comm_rank(local, &local_rank);
    if (local != MPI_COMM_NULL) MPI_Comm_free(&local);
    if (rc != MPI_SUCCESS) {
        st = par_cuda__mpi(rc, "par_comm_nccl: finding the local rank");
        goto fail;
    }
    e = cudaGetDeviceCount(&ndev);
    if (e != cudaSuccess || ndev == 0) {
        st = e != cudaSuccess ? par_cuda__runtime(e, "par_comm_nccl: cudaGetDeviceCount")
                              : par_cuda__fail(PAR_EUNSUPPORTED, "par_comm_nccl: rank %d sees no CUDA device", nc->rank);
        goto fail;
    }
    nc->device = desc && desc->set_device ? desc->device : local_rank % ndev;
    if (nc->device < 0 || nc->device >= ndev) {
        st = par_cuda__fail(PAR_EINVAL, "par_comm_nccl: device %d does not exist (%d visible)", nc->device, ndev);
        goto fail;
    }
    if ((e = cudaSetDevice(nc->device)) != cudaSuccess ||
        (e = cudaStreamCreateWithFlags(&nc->own_stream, cudaStreamNonBlocking)) != cudaSuccess) {
        nc->own_stream = NULL;
        st = par_cuda__runtime(e, "par_comm_nccl: device setup");
        goto fail;
    }
    nc->stream = nc->own_stream;
    all = (int *)PAR_CUDA__MALLOC(sizeof(int) * (size_t)nc->size);
    if (!all) {
        st = par_cuda__fail(PAR_ENOMEM, "par_comm_nccl: out of host memory");
        goto fail;
    }
    for (i = 0; i < nc->size; i++) all[i] = i;
    st = par_cuda__nccl_group_create(nc, all, nc->size, &nc->world);
    PAR_CUDA__FREE(all);
    if (st != PAR_OK) goto fail;

    table->version = PAR_COMM_TABLE_VERSION;
    table->name = par_cuda__nccl_magic;
    table->user = nc;
    table->rank = nc->rank;
    table->size = nc->size;
    table->group_create = par_cuda__nccl_group_create;
    table->group_destroy = par_cuda__nccl_group_destroy;
    table->all_reduce = par_cuda__nccl_all_reduce;
    table->all_gather = par_cuda__nccl_all_gather;
    table->reduce_scatter = par_cuda__nccl_reduce_scatter;
    table->all_to_all = par_cuda__nccl_all_to_all;
    table->broadcast = par_cuda__nccl_broadcast;
    table->send = par_cuda__nccl_send;
    table->recv = par_cuda__nccl_recv;
    table->barrier = par_cuda__nccl_barrier;
    table->wait = par_cuda__nccl_wait;
    table->test = par_cuda__nccl_test;
    table->set_stream = par_cuda__nccl_set_stream;
    table->destroy = par_cuda__nccl_destroy;
    return PAR_OK;
fail:
    par_cuda__nccl_destroy(nc);
    return st;
}

extern "C" par_status par_comm_nccl_device(const par_comm_table *table, int *device) {
    if (!table || !device || table->name != par_cuda__nccl_magic || !table->user)
        return par_cuda__fail(PAR_EINVAL, "par_comm_nccl_device: not a table made by par_comm_nccl");
    *device = ((const par_cuda__nccl *)table->user)->device;
    return PAR_OK;
}

extern "C" par_status par_comm_nccl_group_split(const par_comm_table *table, const par_comm_group *group, int *split) {
    if (!table || table->name != par_cuda__nccl_magic || !table->user)
        return par_cuda__fail(PAR_EINVAL, "par_comm_nccl_group_split: not a table made by par_comm_nccl");
    if (!group || !split) return par_cuda__fail(PAR_EINVAL, "par_comm_nccl_group_split: NULL group or split");
    *split = group->split;
    return PAR_OK;
}

#else /* !PARALLEL_WITH_MPI */

extern "C" par_status par_comm_nccl(const par_nccl_desc *desc, par_comm_table *table) {
    (void)desc;
    if (table) memset(table, 0, sizeof *table);
    return par_cuda__fail(PAR_EUNSUPPORTED, "par_comm_nccl: parallel_cuda.cu was built without PARALLEL_WITH_MPI "
                                            "(NCCL is bootstrapped over MPI)");
}

extern "C" par_status par_comm_nccl_device(const par_comm_table *table, int *device) {
    (void)table;
    (void)device;
    return par_cuda__fail(PAR_EUNSUPPORTED, "par_comm_nccl_device: built without PARALLEL_WITH_MPI");
}

extern "C" par_status par_comm_nccl_group_split(const par_comm_table *table, const par_comm_group *group, int *split) {
    (void)table;
    (void)group;
    (void)split;
    return par_cuda__fail(PAR_EUNSUPPORTED, "par_comm_nccl_group_split: built without PARALLEL_WITH_MPI");
}

#endif /* PARALLEL_WITH_MPI */

#if defined(PARALLEL_WITH_MPI)
#undef PAR_CUDA__NCCL_ALL
#endif
#undef PAR_CUDA__ATTN_PTR
#undef PAR_CUDA__ENTER
#undef PAR_CUDA__NEED
#undef PAR_CUDA__CALL

#endif /* PARALLEL_CUDA_DEFINED */
#endif /* PARALLEL_CUDA_DECLARATIONS_ONLY */
