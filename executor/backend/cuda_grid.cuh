/*
 * Launch helpers of the element-wise CUDA kernels (cuda_kernels.cu, cuda_moe.cu,
 * cuda_lt.cu): the stream handle the C side passes as void *, the block size, a grid
 * that covers n items (capped below the grid's x limit; the kernels stride over the
 * rest) and the grid-stride loop.
 */
#ifndef DPLAN_EXECUTOR_CUDA_GRID_CUH
#define DPLAN_EXECUTOR_CUDA_GRID_CUH

#include <cuda_runtime.h>
#include <stdint.h>

#define S(stream) ((cudaStream_t)(stream))
#define THREADS   256

static inline unsigned blocks_for(int64_t n, int per = THREADS)
{
    int64_t b = (n + per - 1) / per;
    if (b < 1)
        b = 1;
    return (unsigned)(b > 65535LL * 512 ? 65535LL * 512 : b);
}

/* Grid-stride loop over [0, n). */
#define FOR_N(i, n)                                                                                \
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n);                      \
         i += (int64_t)gridDim.x * blockDim.x)

#endif
