/*
 * CUDA backend: the causal softmax of attention and its backward, one warp per row of
 * T scores (the row's position t = row % T keeps columns 0 .. t; the rest become 0, as
 * the CPU's probs). The GEMMs around them are cuBLAS calls in cuda_ops.c. This is the
 * "first correct" attention of the issue: the T x T probabilities are materialised
 * (what the backend interface's attn_fwd returns); a fused flash-style kernel is later
 * work (docs/gpu.md).
 */
#include "cuda_kernels.h"

#include <cuda_runtime.h>
#include <math.h>

__device__ static inline float wsum(float v)
{
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ static inline float wmax(float v)
{
    for (int o = 16; o > 0; o >>= 1)
        v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

__global__ static void k_causal_softmax(float *P, int64_t rows, int64_t T)
{
    int64_t r = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) / 32;
    int lane = threadIdx.x % 32;
    if (r >= rows)
        return;
    float *p = P + r * T;
    const int64_t t = r % T;
    float m = -INFINITY;
    for (int64_t j = lane; j <= t; j += 32)
        m = fmaxf(m, p[j]);
    m = wmax(m);
    float s = 0;
    for (int64_t j = lane; j <= t; j += 32) {
        float e = expf(p[j] - m);
        p[j] = e;
        s += e;
    }
    const float inv = 1.0f / wsum(s);
    for (int64_t j = lane; j < T; j += 32)
        p[j] = j <= t ? p[j] * inv : 0.0f;
}

__global__ static void k_causal_softmax_bwd(float *dP, const float *P, int64_t rows, int64_t T)
{
    int64_t r = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) / 32;
    int lane = threadIdx.x % 32;
    if (r >= rows)
        return;
    float *d = dP + r * T;
    const float *p = P + r * T;
    const int64_t t = r % T;
    float s = 0;
    for (int64_t j = lane; j <= t; j += 32)
        s += d[j] * p[j];
    s = wsum(s);
    for (int64_t j = lane; j < T; j += 32)
        d[j] = j <= t ? p[j] * (d[j] - s) : 0.0f;
}

extern "C" void dp__cuk_causal_softmax(void *stream, float *P, int64_t rows, int64_t T)
{
    if (rows > 0)
        k_causal_softmax<<<(unsigned)((rows * 32 + 255) / 256), 256, 0, (cudaStream_t)stream>>>(
            P, rows, T);
}

extern "C" void dp__cuk_causal_softmax_bwd(void *stream, float *dP, const float *P, int64_t rows,
                                           int64_t T)
{
    if (rows > 0)
        k_causal_softmax_bwd<<<(unsigned)((rows * 32 + 255) / 256), 256, 0,
                               (cudaStream_t)stream>>>(dP, P, rows, T);
}
