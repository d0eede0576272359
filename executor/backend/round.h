/*
 * Round-to-nearest-even of an fp32 value to bf16 or fp16, returned as the fp32 value it
 * stands for: the CPU backend's emulation of 2-byte storage (backend.h round_store).
 * Only the rounding; no packing into 16-bit words (the emulated tensors stay in fp32
 * buffers), no FP8.
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

#endif
