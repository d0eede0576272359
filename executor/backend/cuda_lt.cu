/*
 * Kernels around the cuBLASLt GEMMs (cuda_lt_kernels.h): 2-byte operand copies for the
 * bf16 / fp16 GEMMs, and FP8's amax, scale and quantisation (Transformer Engine's current
 * scaling, the CPU's cpu_fp8.c: the same roundings, cuda_fp8.h's __NV_SATFINITE
 * conversions, round to nearest even). First correct: one thread per element; the
 * transposed quantisation reads with a stride (a tiled transpose is later work).
 */
#include "cuda_lt_kernels.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>
#include <math.h>

#include "cuda_grid.cuh"

__global__ static void k_copy16(void *dst, int64_t ldd, const float *src, int64_t ld, int64_t rows,
                                int64_t cols, int fp16)
{
    FOR_N(e, rows * ldd)
    {
        int64_t i = e / ldd, j = e % ldd;
        float v = j < cols ? src[i * ld + j] : 0.0f;
        if (fp16)
            ((__half *)dst)[e] = __float2half_rn(v);
        else
            ((__nv_bfloat16 *)dst)[e] = __float2bfloat16_rn(v);
    }
}

void dp__cuk_lt_copy16(void *stream, void *dst, int64_t ldd, const float *src, int64_t ld,
                       int64_t rows, int64_t cols, int fp16)
{
    k_copy16<<<blocks_for(rows * ldd), THREADS, 0, S(stream)>>>(dst, ldd, src, ld, rows, cols,
                                                                fp16);
}

/* |x|'s bits order as the magnitudes do for non-negative floats, NaN above inf. */
__global__ static void k_amax(unsigned *amax, const float *src, int64_t ld, int64_t rows,
                              int64_t cols)
{
    unsigned best = 0;
    FOR_N(e, rows * cols)
    {
        int64_t i = e / cols, j = e % cols;
        unsigned u = __float_as_uint(fabsf(src[i * ld + j]));
        best = u > best ? u : best;
    }
    for (int o = 16; o > 0; o >>= 1) {
        unsigned v = __shfl_xor_sync(0xffffffffu, best, o);
        best = v > best ? v : best;
    }
    if ((threadIdx.x & 31) == 0)
        atomicMax(amax, best);
}

void dp__cuk_lt_amax(void *stream, float *amax, const float *src, int64_t ld, int64_t rows,
                     int64_t cols)
{
    cudaMemsetAsync(amax, 0, sizeof *amax, S(stream));
    k_amax<<<blocks_for(rows * cols), THREADS, 0, S(stream)>>>((unsigned *)amax, src, ld, rows,
                                                               cols);
}

/* round.h dp__fp8_scale (Transformer Engine's compute_scale_from_amax). */
__global__ static void k_scale(float *sc, const float *amax, float fp8_max)
{
    float a = amax[0], s = 1.0f;
    if (a > 0.0f && !isinf(a)) {
        s = __fdiv_rn(fp8_max, a);
        if (isinf(s))
            s = 3.40282347e38f;
    }
    sc[0] = s;
    sc[1] = __fdiv_rn(1.0f, s);
}

void dp__cuk_lt_scale(void *stream, float *sc, const float *amax, float fp8_max)
{
    k_scale<<<1, 1, 0, S(stream)>>>(sc, amax, fp8_max);
}

__global__ static void k_quant(unsigned char *dst, int64_t ldd, int64_t drows, int64_t dcols,
                               const float *src, int64_t ld, bool transpose, int e5m2,
                               const float *sc)
{
    const float s = sc[0];
    FOR_N(e, drows * ldd)
    {
        int64_t i = e / ldd, j = e % ldd;
        float v = 0.0f;
        if (j < dcols)
            v = (transpose ? src[j * ld + i] : src[i * ld + j]) * s;
        dst[e] =
            (unsigned char)__nv_cvt_float_to_fp8(v, __NV_SATFINITE, e5m2 ? __NV_E5M2 : __NV_E4M3);
    }
}

void dp__cuk_lt_quant(void *stream, void *dst, int64_t ldd, int64_t drows, int64_t dcols,
                      const float *src, int64_t ld, bool transpose, int e5m2, const float *sc)
{
    k_quant<<<blocks_for(drows * ldd), THREADS, 0, S(stream)>>>(
        (unsigned char *)dst, ldd, drows, dcols, src, ld, transpose, e5m2, sc);
}
