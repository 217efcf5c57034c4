/* tests/cuda/test_cuda_smoke.cu - smoke test of parallel_cuda.cu on a real GPU
   (`make test-cuda`). CI has no GPU: there `make test` only links this program,
   proving parallel_cuda.cu compiles and links against cuBLAS, NCCL and cudart.
   parallel_cuda.cu carries no implementation of parallel.h, so this file does. */
#define PARALLEL_IMPLEMENTATION
#include "../test.h"
#define PARALLEL_CUDA_DECLARATIONS_ONLY
#include "../../parallel_cuda.cu"

int main(void) {
    int count = -1, version = 0;
    char name[256];
    double err = -1;

    /* Needs no GPU: the library loads and reports a 2.x version (2.x encodes as
       major*10000 + minor*100 + patch since NCCL 2.9). */
    CHECK_OK(par_cuda_nccl_version(&version));
    CHECK_MSG(version >= 20900 && version < 30000, "NCCL version %d", version);
    CHECK_INT(par_cuda_nccl_version(NULL), PAR_EINVAL);
    printf("NCCL %d\n", version);

    CHECK_OK(par_cuda_device_info(&count, name, sizeof name));
    CHECK_MSG(count >= 1, "%d CUDA devices", count);
    CHECK_MSG(name[0] != 0, "empty device name");
    if (count >= 1) printf("device 0: %s (%d visible)\n", name, count);

    /* Odd sizes too: cuBLAS picks different kernels, and n=1 is the edge. */
    {
        int sizes[] = {1, 17, 64, 256};
        unsigned i;
        for (i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
            err = -1;
            CHECK_OK(par_cuda_gemm_smoke(sizes[i], &err));
            CHECK_MSG(err == 0.0, "n=%d: max |cuBLAS - CPU| = %g", sizes[i], err);
        }
    }
    CHECK_INT(par_cuda_gemm_smoke(0, &err), PAR_EINVAL);
    CHECK_INT(par_cuda_gemm_smoke(2000, &err), PAR_EINVAL);
    CHECK_INT(par_cuda_gemm_smoke(8, NULL), PAR_EINVAL);

    return TEST_END("cuda");
}
