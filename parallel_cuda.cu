/* parallel_cuda.cu - CUDA side of parallel.h: cuBLAS compute and NCCL comm.

   Build it as its own translation unit next to ONE file of yours that defines
   PARALLEL_IMPLEMENTATION (this file only includes the declarations):

       nvcc -std=c++17 -c parallel_cuda.cu -I<dir of parallel.h>
       ... link with -lcublas -lnccl -lcudart

   STATUS: so far only a smoke-test API that proves the toolchain, cuBLAS and
   NCCL are usable; the compute and comm hook tables (DESIGN.md 3.6, 3.7) come
   later. Errors are returned as par_status and described on stderr (the
   library's par_last_error() text lives in the implementation TU, which this
   file does not have):
     PAR_EUNSUPPORTED  no usable CUDA device or driver
     PAR_ENOMEM        device or host allocation failed
     PAR_ECOMM         an NCCL call failed
     PAR_EIO           any other CUDA runtime or cuBLAS failure
     PAR_EINVAL        bad arguments

   To get only the declarations below (e.g. in a test), define
   PARALLEL_CUDA_DECLARATIONS_ONLY before including this file. */
#ifndef PARALLEL_CUDA_API
#define PARALLEL_CUDA_API

#include "parallel.h"

#ifdef __cplusplus
extern "C" {
#endif

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

#ifdef __cplusplus
}
#endif
#endif /* PARALLEL_CUDA_API */

#ifndef PARALLEL_CUDA_DECLARATIONS_ONLY
#ifndef PARALLEL_CUDA_DEFINED
#define PARALLEL_CUDA_DEFINED

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <nccl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Map a CUDA runtime error to a status, after saying what failed. */
static par_status par_cuda__runtime(cudaError_t err, const char *what) {
    fprintf(stderr, "parallel_cuda: %s: %s\n", what, cudaGetErrorString(err));
    switch (err) {
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
        return PAR_EUNSUPPORTED;
    case cudaErrorMemoryAllocation:
        return PAR_ENOMEM;
    default:
        return PAR_EIO;
    }
}

extern "C" par_status par_cuda_device_info(int *device_count, char *name, size_t name_size) {
    cudaDeviceProp prop;
    cudaError_t err;
    if (!device_count) return PAR_EINVAL;
    *device_count = 0;
    if (name && name_size) name[0] = 0;
    err = cudaGetDeviceCount(device_count);
    if (err != cudaSuccess) {
        *device_count = 0;
        return par_cuda__runtime(err, "cudaGetDeviceCount");
    }
    if (*device_count == 0) {
        fprintf(stderr, "parallel_cuda: no CUDA device\n");
        return PAR_EUNSUPPORTED;
    }
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

    if (!max_err || n < 1 || n > 1024) return PAR_EINVAL;
    *max_err = INFINITY;
    count = (size_t)n * (size_t)n;
    bytes = count * sizeof(float);
    a = (float *)malloc(bytes);
    b = (float *)malloc(bytes);
    c = (float *)malloc(bytes);
    if (!a || !b || !c) {
        st = PAR_ENOMEM;
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
        fprintf(stderr, "parallel_cuda: cuBLAS: %s\n", cublasGetStatusString(bst));
        st = bst == CUBLAS_STATUS_ALLOC_FAILED ? PAR_ENOMEM : PAR_EIO;
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
    if (!version) return PAR_EINVAL;
    r = ncclGetVersion(version);
    if (r != ncclSuccess) {
        fprintf(stderr, "parallel_cuda: ncclGetVersion: %s\n", ncclGetErrorString(r));
        return PAR_ECOMM;
    }
    return PAR_OK;
}

#endif /* PARALLEL_CUDA_DEFINED */
#endif /* PARALLEL_CUDA_DECLARATIONS_ONLY */
