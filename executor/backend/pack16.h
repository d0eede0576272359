/*
 * fp32 <-> 2-byte storage words (bf16, IEEE binary16), the per-element code of the
 * backends' pack / unpack (backend.h): the CPU backend (cpu_round.c) and the CUDA kernels
 * (cuda_kernels.cu) both run these functions, so the host unit test
 * (test_executor_round) covers the arithmetic the GPU threads do.
 *
 * Packing rounds to nearest, ties to even, exactly as round.h's dp__round_bf16 /
 * dp__round_fp16 (the storage emulation): unpack(pack(x)) is round(x) bit for bit for
 * every non-NaN x, so a tensor stored in 2 bytes holds the values the emulation held.
 * Integer arithmetic only (no rounding mode, no libm), so host and device agree:
 *  - bf16 (Intel, "BFLOAT16 - Hardware Numerics Definition", 2018, Sec. 2.2): the high
 *    half of the fp32 word after adding half an ulp (0x7fff plus the kept last bit);
 *    subnormals kept, a carry past the largest finite becomes inf.
 *  - binary16 (IEEE 754-2008 Sec. 3.6: bias 15, 10 fraction bits): normal when
 *    |x| >= 2^-14, subnormal multiples of 2^-24 below; |x| >= 65520 (the midpoint from
 *    the largest finite 65504 to 2^16) rounds to inf (Sec. 4.3.1, RNE overflow).
 *  - NaN stays NaN: the quiet bit is set, so a payload held only in dropped bits cannot
 *    turn into inf (round.h returns a NaN unchanged; its payload is not kept here).
 */
#ifndef DPLAN_EXECUTOR_BACKEND_PACK16_H
#define DPLAN_EXECUTOR_BACKEND_PACK16_H

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "hd.h"

DP_HD static inline uint32_t dp__f32_bits(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

DP_HD static inline float dp__f32_from(uint32_t u)
{
    float x;
    memcpy(&x, &u, sizeof u);
    return x;
}

DP_HD static inline uint16_t dp__pack_bf16(float x)
{
    uint32_t u = dp__f32_bits(x);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((u >> 16) | 0x0040u); /* NaN, quiet */
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

DP_HD static inline float dp__unpack_bf16(uint16_t h)
{
    return dp__f32_from((uint32_t)h << 16);
}

DP_HD static inline uint16_t dp__pack_fp16(float x)
{
    const uint32_t u = dp__f32_bits(x), a = u & 0x7fffffffu;
    const uint16_t s = (uint16_t)((u >> 16) & 0x8000u);
    if (a > 0x7f800000u) /* NaN: quiet, the top fraction bits kept */
        return (uint16_t)(s | 0x7e00u | ((a >> 13) & 0x03ffu));
    if (a >= 0x477ff000u) /* 65520 = 0x477ff000 and above, inf included */
        return (uint16_t)(s | 0x7c00u);
    if (a < 0x38800000u) { /* below 2^-14: a subnormal or zero, q 2^-24 */
        const uint32_t e = a >> 23;
        if (e < 102) /* below 2^-25 (fp32 subnormals too): 0 */
            return s;
        /* a = m 2^(e - 150), so q = m 2^(e - 126): m shifted right by 126 - e (14 to 24),
         * to nearest, ties to even; q = 1024 is the smallest normal's encoding. */
        const uint32_t m = (a & 0x7fffffu) | 0x800000u, sh = 126u - e;
        uint32_t q = m >> sh;
        const uint32_t rem = m & ((1u << sh) - 1u), half = 1u << (sh - 1u);
        if (rem > half || (rem == half && (q & 1u)))
            q++;
        return (uint16_t)(s | q);
    }
    /* Normal: drop 13 fraction bits to nearest even (a carry moves the exponent, at most
     * to 65504's: 0x477ff000 and above were sent to inf), then rebias 127 -> 15. */
    const uint32_t r = (a + 0x0fffu + ((a >> 13) & 1u)) >> 13;
    return (uint16_t)(s | (r - (112u << 10)));
}

DP_HD static inline float dp__unpack_fp16(uint16_t h)
{
    const uint32_t s = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x03ffu;
    if (e == 0x1f)
        return dp__f32_from(s | 0x7f800000u | (m << 13)); /* inf, NaN */
    if (e == 0) /* m 2^-24 (the literal is 2^-24): exact in fp32, m < 2^10 */
        return dp__f32_from(s | dp__f32_bits((float)m * 5.9604644775390625e-08f));
    return dp__f32_from(s | ((e + 112u) << 23) | (m << 13));
}

/* The run's storage type: fp16 (true) or bf16. */
DP_HD static inline uint16_t dp__pack16(float x, bool fp16)
{
    return fp16 ? dp__pack_fp16(x) : dp__pack_bf16(x);
}

DP_HD static inline float dp__unpack16(uint16_t h, bool fp16)
{
    return fp16 ? dp__unpack_fp16(h) : dp__unpack_bf16(h);
}

#endif
