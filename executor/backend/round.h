/*
 * Round-to-nearest-even of an fp32 value to bf16 or fp16, returned as the fp32 value it
 * stands for: the CPU backend's emulation of 2-byte storage (backend.h round_store).
 * Only the rounding; no packing into 16-bit or 8-bit words (the emulated tensors stay in
 * fp32 buffers).
 *
 * bf16 (1 sign, 8 exponent, 7 mantissa bits) keeps fp32's exponent range, so rounding
 * is on the 16 low bits alone, subnormals included (Intel's "BFLOAT16 - Hardware
 * Numerics Definition", 2018, Sec. 2.2: RNE, subnormals kept); a carry out of the
 * mantissa moves the exponent, past the largest finite value to inf.
 * fp16 (IEEE 754 binary16: 1, 5, 10 bits) has the largest finite value 65504 and the
 * smallest subnormal 2^-24; a value at or above 65520 (the midpoint to 2^16) rounds to
 * inf, as IEEE 754-2008 Sec. 4.3.1 rounds an overflowing result under RNE.
 * NaN stays NaN.
 */
#ifndef DPLAN_EXECUTOR_ROUND_H
#define DPLAN_EXECUTOR_ROUND_H

#include <math.h>
#include <stdint.h>
#include <string.h>

static inline float dp__round_bf16(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return x; /* NaN */
    /* Add half an ulp of bf16, minus one when the kept last bit is even: ties to even. */
    u += 0x7fffu + ((u >> 16) & 1u);
    u &= 0xffff0000u;
    memcpy(&x, &u, sizeof u);
    return x;
}

static inline float dp__round_fp16(float x)
{
    float a = fabsf(x);
    if (isnan(x))
        return x;
    if (a >= 65520.0f)
        return copysignf(INFINITY, x);
    if (a < 0x1p-14f) {
        /* Subnormal fp16: multiples of 2^-24. The scaling by 2^24 is exact, and
         * nearbyintf rounds ties to even in the default rounding mode. */
        return copysignf(nearbyintf(a * 0x1p24f) * 0x1p-24f, x);
    }
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    /* Normal fp16 keeps 10 of fp32's 23 mantissa bits: drop 13, ties to even. */
    u += 0x0fffu + ((u >> 13) & 1u);
    u &= 0xffffe000u;
    memcpy(&x, &u, sizeof u);
    return x;
}

/*
 * FP8 (OCP 8-bit Floating Point Specification 1.0, 2023; Micikevicius et al., "FP8
 * Formats for Deep Learning", 2022): E4M3 (bias 7, 3 mantissa bits, largest finite 448 =
 * 1.75 2^8, no inf, smallest normal 2^-6, subnormal step 2^-9) and E5M2 (bias 15, 2
 * mantissa bits, largest finite 57344 = 1.75 2^15, smallest normal 2^-14, subnormal step
 * 2^-16). Round to nearest even, saturating as Transformer Engine's casts do (cuda_fp8.h
 * __nv_fp8_e4m3(float) converts with __NV_SATFINITE; PTX cvt .satfinite maps a finite
 * overflow and +-inf to the largest finite value): anything of magnitude above the
 * largest finite becomes it, signed. NaN stays NaN.
 */
static inline float dp__round_fp8(float x, int mbits, int emin, float maxv)
{
    if (isnan(x))
        return x;
    float a = fabsf(x);
    if (a >= maxv)
        return copysignf(maxv, x);
    if (a < ldexpf(1.0f, emin)) {
        /* Subnormal: multiples of 2^(emin - mbits); the division by a power of two is
         * exact and nearbyintf rounds ties to even in the default rounding mode. */
        float step = ldexpf(1.0f, emin - mbits);
        return copysignf(nearbyintf(a / step) * step, x);
    }
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    const int drop = 23 - mbits; /* fp32 mantissa bits dropped */
    u += ((1u << (drop - 1)) - 1u) + ((u >> drop) & 1u);
    u &= ~((1u << drop) - 1u);
    memcpy(&x, &u, sizeof u);
    return fabsf(x) > maxv ? copysignf(maxv, x) : x;
}

/*
 * Per-tensor scale of current scaling (Transformer Engine Float8CurrentScaling,
 * common/recipe/recipe_common.cuh compute_scale_from_amax, margin 0, no power-of-2
 * forcing): fp8_max / amax, so the tensor's largest magnitude lands on the format's
 * largest finite value; 1 when amax is 0, inf or NaN; FLT_MAX when the quotient overflows.
 * The GEMM multiplies by the reciprocals (TE's scale_inv) after accumulating.
 */
static inline float dp__fp8_scale(float amax, float maxv)
{
    if (!(amax > 0.0f) || isinf(amax))
        return 1.0f;
    float s = maxv / amax;
    return isinf(s) ? 0x1.fffffep127f : s;
}

#define DP_E4M3_MAX 448.0f
#define DP_E5M2_MAX 57344.0f

static inline float dp__round_e4m3(float x)
{
    return dp__round_fp8(x, 3, -6, DP_E4M3_MAX);
}

static inline float dp__round_e5m2(float x)
{
    return dp__round_fp8(x, 2, -14, DP_E5M2_MAX);
}

#endif
