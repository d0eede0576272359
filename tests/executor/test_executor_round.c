/*
 * The bf16 / fp16 store rounding (executor/backend/round.h), the 2-byte words of
 * pack16.h (the CPU backend's and the CUDA kernels' pack / unpack) and the CPU backend's
 * round_store, pack and unpack ops over a buffer, against values worked out by hand
 * from the formats:
 * bf16 keeps 8 significant bits (ulp 2^-7 at 1), fp16 11 (ulp 2^-10 at 1, largest
 * finite 65504 = (2 - 2^-10) 2^15, smallest subnormal 2^-24). Each expectation is
 * written as the exact binary value it must be, compared bit for bit.
 */
#include "check.h"
#include "executor/backend/cpu.h"
#include "executor/backend/pack16.h"
#include "executor/backend/round.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

static uint32_t bits(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}
static float from_bits(uint32_t u)
{
    float x;
    memcpy(&x, &u, sizeof u);
    return x;
}
#define SAME(got, want)                                                                            \
    do {                                                                                           \
        float g_ = (got), w_ = (want);                                                             \
        if (bits(g_) != bits(w_)) {                                                                \
            fprintf(stderr, "%s:%d: %s = %a (0x%08x), expected %a (0x%08x)\n", __FILE__, __LINE__, \
                    #got, (double)g_, bits(g_), (double)w_, bits(w_));                             \
            check_failures++;                                                                      \
        }                                                                                          \
    } while (0)

static void bf16(void)
{
    SAME(dp__round_bf16(1.0f), 1.0f);
    /* 1 + 2^-8 lies halfway between 1 (last kept bit 0) and 1 + 2^-7: to even, 1. */
    SAME(dp__round_bf16(1.0f + 0x1p-8f), 1.0f);
    /* 1 + 3 2^-8 lies halfway between 1 + 2^-7 (odd) and 1 + 2^-6 (even): up. */
    SAME(dp__round_bf16(1.0f + 3 * 0x1p-8f), 1.0f + 0x1p-6f);
    /* Just above the tie rounds up, just below down. */
    SAME(dp__round_bf16(1.0f + 0x1p-8f + 0x1p-20f), 1.0f + 0x1p-7f);
    SAME(dp__round_bf16(1.0f + 0x1p-8f - 0x1p-20f), 1.0f);
    SAME(dp__round_bf16(-(1.0f + 3 * 0x1p-8f)), -(1.0f + 0x1p-6f));
    /* pi = 0x40490fdb: the low half 0x0fdb is below 0x8000, so 0x40490000 = 3.140625. */
    SAME(dp__round_bf16(3.14159265f), 3.140625f);
    /* 0.1f = 0x3dcccccd: low half 0xcccd above the tie: 0x3dcd0000 = 0.10009765625. */
    SAME(dp__round_bf16(0.1f), 0.10009765625f);
    /* Subnormals keep fp32's grid's top bits: 2^-134 = 0x00008000 is the tie between 0
     * and 2^-133 (0x00010000, odd): 0; 3 2^-134 between 2^-133 (odd) and 2^-132: up. */
    SAME(dp__round_bf16(0x1p-134f), 0.0f);
    SAME(dp__round_bf16(3 * 0x1p-134f), 0x1p-132f);
    SAME(dp__round_bf16(0x1p-133f + 0x1p-140f), 0x1p-133f);
    /* The largest float 0x7f7fffff carries into the exponent: inf. 0x7f7f7fff does not:
     * the largest finite bf16 0x7f7f0000 = (2 - 2^-7) 2^127. */
    SAME(dp__round_bf16(from_bits(0x7f7fffffu)), INFINITY);
    SAME(dp__round_bf16(from_bits(0x7f7f7fffu)), (2.0f - 0x1p-7f) * 0x1p127f);
    SAME(dp__round_bf16(-INFINITY), -INFINITY);
    CHECK(isnan(dp__round_bf16(NAN)));
    SAME(dp__round_bf16(-0.0f), -0.0f);
}

static void fp16(void)
{
    SAME(dp__round_fp16(1.0f), 1.0f);
    /* ulp 2^-10 at 1: 1 + 2^-11 is the tie between 1 and 1 + 2^-10 (odd): 1. */
    SAME(dp__round_fp16(1.0f + 0x1p-11f), 1.0f);
    SAME(dp__round_fp16(1.0f + 3 * 0x1p-11f), 1.0f + 0x1p-9f);
    /* ulp 2 in [2048, 4096): 2049 ties to 2048, 2051 to 2052 (2050 is odd). */
    SAME(dp__round_fp16(2049.0f), 2048.0f);
    SAME(dp__round_fp16(2051.0f), 2052.0f);
    /* 0.1 is 0x2e66 in fp16: 1638/16384 = 0.0999755859375 (0.1 * 2^14 = 1638.4). */
    SAME(dp__round_fp16(0.1f), 0.0999755859375f);
    /* Overflow: ulp 32 at the top; 65504 stays, 65519 is below the midpoint 65520 to
     * 2^16, 65520 is the tie and its even neighbour 2^16 is past the range: inf. */
    SAME(dp__round_fp16(65504.0f), 65504.0f);
    SAME(dp__round_fp16(65519.0f), 65504.0f);
    SAME(dp__round_fp16(65520.0f), INFINITY);
    SAME(dp__round_fp16(1e5f), INFINITY);
    SAME(dp__round_fp16(-70000.0f), -INFINITY);
    /* Subnormals: multiples of 2^-24. 2^-25 ties to 0, 3 2^-25 to 2 2^-24 (1 is odd),
     * 2^-25 + 2^-30 is above the tie: 2^-24; 5e-8 = 0.8389 2^-24: 2^-24. */
    SAME(dp__round_fp16(0x1p-24f), 0x1p-24f);
    SAME(dp__round_fp16(0x1p-25f), 0.0f);
    SAME(dp__round_fp16(3 * 0x1p-25f), 0x1p-23f);
    SAME(dp__round_fp16(0x1p-25f + 0x1p-30f), 0x1p-24f);
    SAME(dp__round_fp16(5e-8f), 0x1p-24f);
    SAME(dp__round_fp16(-3 * 0x1p-25f), -0x1p-23f);
    /* The smallest normal 2^-14 stays; 2^-14 - 2^-26 (1023.75 subnormal steps) rounds up
     * to it; 1.5 2^-14 + 2^-26 is normal with ulp 2^-24: 1.5 2^-14 + 0 (2^-26 < half). */
    SAME(dp__round_fp16(0x1p-14f), 0x1p-14f);
    SAME(dp__round_fp16(0x1p-14f - 0x1p-26f), 0x1p-14f);
    SAME(dp__round_fp16(1.5f * 0x1p-14f + 0x1p-26f), 1.5f * 0x1p-14f);
    CHECK(isnan(dp__round_fp16(NAN)));
}

/* The backend op rounds every element of a buffer (the OpenMP loop above its size
 * threshold too), and does nothing in fp32. */
static void op(void)
{
    enum { N = 40000 };
    static real x[N];
    struct dp_backend be = {.dtype = DP_DT_BF16};
    for (int i = 0; i < N; i++)
        x[i] = (real)(1.0f + 3 * 0x1p-8f);
    dp__cpu_round_store(&be, x, N);
    int wrong = 0;
    for (int i = 0; i < N; i++)
        wrong += bits((float)x[i]) != bits(1.0f + 0x1p-6f);
    CHECK_EQ(wrong, 0);
    be.dtype = DP_DT_FP16;
    x[0] = 65520.0f;
    x[1] = 0x1p-25f;
    dp__cpu_round_store(&be, x, 2);
    SAME((float)x[0], INFINITY);
    SAME((float)x[1], 0.0f);
    be.dtype = DP_DT_FP32;
    x[0] = (real)(1.0f + 0x1p-20f);
    dp__cpu_round_store(&be, x, 1);
    SAME((float)x[0], 1.0f + 0x1p-20f);
}

#define WORD(got, want)                                                                            \
    do {                                                                                           \
        unsigned g_ = (got), w_ = (want);                                                          \
        if (g_ != w_) {                                                                            \
            fprintf(stderr, "%s:%d: %s = 0x%04x, expected 0x%04x\n", __FILE__, __LINE__, #got, g_, \
                    w_);                                                                           \
            check_failures++;                                                                      \
        }                                                                                          \
    } while (0)

/* bf16 words: sign, 8 exponent bits (bias 127), 7 fraction bits; the fp32 word's top half. */
static void pack_bf16(void)
{
    WORD(dp__pack_bf16(1.0f), 0x3f80);
    WORD(dp__pack_bf16(-2.0f), 0xc000);
    WORD(dp__pack_bf16(1.0f + 0x1p-8f), 0x3f80);     /* tie to even: down */
    WORD(dp__pack_bf16(1.0f + 3 * 0x1p-8f), 0x3f82); /* tie to even: up, 1 + 2^-6 */
    WORD(dp__pack_bf16(1.0f + 0x1p-8f + 0x1p-20f), 0x3f81);
    WORD(dp__pack_bf16(3.14159265f), 0x4049);            /* 0x40490fdb */
    WORD(dp__pack_bf16(0.1f), 0x3dcd);                   /* 0x3dcccccd, low half above the tie */
    WORD(dp__pack_bf16(0x1p-133f), 0x0001);              /* the smallest bf16 subnormal */
    WORD(dp__pack_bf16(0x1p-134f), 0x0000);              /* its half: tie to even 0 */
    WORD(dp__pack_bf16(3 * 0x1p-134f), 0x0002);          /* tie between 1 (odd) and 2 */
    WORD(dp__pack_bf16(from_bits(0x7f7fffffu)), 0x7f80); /* FLT_MAX carries to inf */
    WORD(dp__pack_bf16(from_bits(0x7f7f7fffu)), 0x7f7f); /* the largest finite bf16 */
    WORD(dp__pack_bf16(-INFINITY), 0xff80);
    WORD(dp__pack_bf16(-0.0f), 0x8000);
    /* NaN: quiet, never inf, even with its payload only in the dropped low bits. */
    WORD(dp__pack_bf16(from_bits(0x7f800001u)), 0x7fc0);
    WORD(dp__pack_bf16(from_bits(0xffc00000u)), 0xffc0);
    SAME(dp__unpack_bf16(0x3f82), 1.0f + 0x1p-6f);
    SAME(dp__unpack_bf16(0x0001), 0x1p-133f);
    SAME(dp__unpack_bf16(0xff80), -INFINITY);
    CHECK(isnan(dp__unpack_bf16(0x7fc0)));
}

/* binary16 words: sign, 5 exponent bits (bias 15), 10 fraction bits. */
static void pack_fp16(void)
{
    WORD(dp__pack_fp16(1.0f), 0x3c00);
    WORD(dp__pack_fp16(-2.0f), 0xc000);
    WORD(dp__pack_fp16(1.0f + 0x1p-11f), 0x3c00);     /* tie to even: down */
    WORD(dp__pack_fp16(1.0f + 3 * 0x1p-11f), 0x3c02); /* tie to even: up */
    WORD(dp__pack_fp16(2049.0f), 0x6800);             /* 2048 = 2^11: (11 + 15) << 10 */
    WORD(dp__pack_fp16(2051.0f), 0x6802);             /* 2052 = 2048 + 2 ulp */
    WORD(dp__pack_fp16(0.1f), 0x2e66);                /* 1638 / 16384 */
    WORD(dp__pack_fp16(65504.0f), 0x7bff);            /* the largest finite */
    WORD(dp__pack_fp16(65519.0f), 0x7bff);            /* below the midpoint 65520 */
    WORD(dp__pack_fp16(65520.0f), 0x7c00);            /* the midpoint: inf */
    WORD(dp__pack_fp16(-1e5f), 0xfc00);
    WORD(dp__pack_fp16(INFINITY), 0x7c00);
    WORD(dp__pack_fp16(0x1p-14f), 0x0400);            /* the smallest normal */
    WORD(dp__pack_fp16(0x1p-14f - 0x1p-26f), 0x0400); /* 1023.75 steps: up to it */
    WORD(dp__pack_fp16(1.5f * 0x1p-14f + 0x1p-26f), 0x0600);
    WORD(dp__pack_fp16(0x1p-24f), 0x0001);            /* the smallest subnormal */
    WORD(dp__pack_fp16(0x1p-25f), 0x0000);            /* its half: tie to even 0 */
    WORD(dp__pack_fp16(0x1p-25f + 0x1p-30f), 0x0001); /* above the tie */
    WORD(dp__pack_fp16(3 * 0x1p-25f), 0x0002);        /* 1.5 steps: to even 2 */
    WORD(dp__pack_fp16(5 * 0x1p-25f), 0x0002);        /* 2.5 steps: to even 2 */
    WORD(dp__pack_fp16(-3 * 0x1p-25f), 0x8002);
    WORD(dp__pack_fp16(1023.5f * 0x1p-24f), 0x0400); /* tie 1023 / 1024: even 1024 */
    WORD(dp__pack_fp16(1022.5f * 0x1p-24f), 0x03fe); /* tie 1022 / 1023: even 1022 */
    WORD(dp__pack_fp16(0x1p-126f), 0x0000);          /* fp32's smallest normal: 0 */
    WORD(dp__pack_fp16(-0.0f), 0x8000);
    WORD(dp__pack_fp16(from_bits(0x7f800001u)), 0x7e00); /* NaN: quiet, not inf */
    SAME(dp__unpack_fp16(0x0001), 0x1p-24f);
    SAME(dp__unpack_fp16(0x83ff), -1023 * 0x1p-24f);
    SAME(dp__unpack_fp16(0x7bff), 65504.0f);
    SAME(dp__unpack_fp16(0x3555), 0x1.554p-2f); /* (1 + 0x155 / 1024) 2^-2 */
    SAME(dp__unpack_fp16(0xfc00), -INFINITY);
    CHECK(isnan(dp__unpack_fp16(0x7e00)));
}

/* Every 16-bit word but the NaNs is a value of its format: unpack then pack gives it back
 * (the round trip is the identity on rounded values), and unpack(pack(x)) is round.h's
 * rounding bit for bit on fp32 words spread over the whole range (a stride coprime to
 * 2^32, so every exponent and many fraction patterns, ties included near each). */
static void round_trip(void)
{
    int bad_b = 0, bad_h = 0;
    for (uint32_t w = 0; w < 65536; w++) {
        uint16_t h = (uint16_t)w;
        if (!isnan(dp__unpack_bf16(h)))
            bad_b += dp__pack_bf16(dp__unpack_bf16(h)) != h;
        if (!isnan(dp__unpack_fp16(h)))
            bad_h += dp__pack_fp16(dp__unpack_fp16(h)) != h;
    }
    CHECK_EQ(bad_b, 0);
    CHECK_EQ(bad_h, 0);
    int64_t tried = 0, wrong_b = 0, wrong_h = 0;
    for (uint64_t k = 0; k < (1ULL << 32); k += 4093) {
        float x = from_bits((uint32_t)k);
        if (isnan(x))
            continue;
        tried++;
        wrong_b += bits(dp__unpack_bf16(dp__pack_bf16(x))) != bits(dp__round_bf16(x));
        wrong_h += bits(dp__unpack_fp16(dp__pack_fp16(x))) != bits(dp__round_fp16(x));
        /* the words of ties and their neighbours: the low halves 0x7fff, 0x8000, 0x8001 */
        for (uint32_t lo = 0x7fff; lo <= 0x8001; lo++) {
            float t = from_bits(((uint32_t)k & 0xffff0000u) | lo);
            if (isnan(t))
                continue;
            wrong_b += bits(dp__unpack_bf16(dp__pack_bf16(t))) != bits(dp__round_bf16(t));
        }
        for (uint32_t lo = 0x0fff; lo <= 0x1001; lo++) {
            float t = from_bits(((uint32_t)k & 0xffffe000u) | lo);
            if (isnan(t))
                continue;
            wrong_h += bits(dp__unpack_fp16(dp__pack_fp16(t))) != bits(dp__round_fp16(t));
        }
    }
    CHECK(tried > 1000000);
    CHECK_EQ(wrong_b, 0);
    CHECK_EQ(wrong_h, 0);
}

/* The CPU backend's pack / unpack over a buffer larger than the OpenMP threshold. */
static void pack_op(void)
{
    enum { N = 40000 };
    static real x[N], y[N];
    static uint16_t w[N];
    struct dp_backend be = {.dtype = DP_DT_FP16};
    for (int i = 0; i < N; i++)
        x[i] = (real)((float)(i - N / 2) * 0x1p-13f); /* -2.44 to 2.44, most not fp16 values */
    x[1] = 65520.0f;
    dp__cpu_pack(&be, w, x, N);
    dp__cpu_unpack(&be, y, w, N);
    WORD(w[1], 0x7c00);
    SAME((float)y[1], INFINITY);
    int wrong = 0;
    for (int i = 2; i < N; i++)
        wrong += bits((float)y[i]) != bits(dp__round_fp16((float)x[i]));
    CHECK_EQ(wrong, 0);
    WORD(w[N / 2 + 1], 0x0800); /* 2^-13: (-13 + 15) << 10 */
    be.dtype = DP_DT_BF16;
    for (int i = 0; i < N; i++)
        x[i] = (real)(1.0f + 3 * 0x1p-8f);
    dp__cpu_pack(&be, w, x, N);
    dp__cpu_unpack(&be, y, w, N);
    wrong = 0;
    for (int i = 0; i < N; i++)
        wrong += w[i] != 0x3f82 || bits((float)y[i]) != bits(1.0f + 0x1p-6f);
    CHECK_EQ(wrong, 0);
}

int main(void)
{
    bf16();
    fp16();
    op();
    pack_bf16();
    pack_fp16();
    round_trip();
    pack_op();
    return check_done("test_executor_round");
}
