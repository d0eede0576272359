/*
 * Kernels around the cuBLASLt GEMMs (cuda_lt.cu, for cuda_lt.c): the 2-byte operand
 * copies, FP8 amax, scales and quantisation. Asynchronous on `stream`; launch errors are
 * left for the caller's cudaGetLastError. Matrices are row-major with a leading
 * dimension; a copy's columns past `cols` (its padding, up to ldd) are written as zeros.
 */
#ifndef DPLAN_EXECUTOR_CUDA_LT_KERNELS_H
#define DPLAN_EXECUTOR_CUDA_LT_KERNELS_H

#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* dst [rows][ldd] (bf16, or fp16 when fp16) = src [rows][cols] (leading dimension ld),
 * rounded to nearest even (exact for values already stored in that type). */
void dp__cuk_lt_copy16(void *stream, void *dst, int64_t ldd, const float *src, int64_t ld,
                       int64_t rows, int64_t cols, int fp16);
/* amax[0] = max |src| over [rows][cols] (NaN wins: its bits are above inf's). */
void dp__cuk_lt_amax(void *stream, float *amax, const float *src, int64_t ld, int64_t rows,
                     int64_t cols);
/* sc[0] = s = fp8_max / amax[0] (round.h dp__fp8_scale's rules), sc[1] = 1 / s. */
void dp__cuk_lt_scale(void *stream, float *sc, const float *amax, float fp8_max);
/* dst [drows][ldd] FP8 (E5M2 when e5m2, else E4M3) = fp8(x * sc[0]) with saturation,
 * x = src[i][j] (src leading dimension ld), or src[j][i] when transpose; columns
 * [dcols, ldd) zero. */
void dp__cuk_lt_quant(void *stream, void *dst, int64_t ldd, int64_t drows, int64_t dcols,
                      const float *src, int64_t ld, bool transpose, int e5m2, const float *sc);

#ifdef __cplusplus
}
#endif

#endif
