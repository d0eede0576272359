/*
 * The counter-based normal generator of rng.c as inline code that both C and CUDA
 * compile, so the CPU and the GPU backends fill a tensor with the same draws: element
 * `idx` of tensor `key` is a pure function of (seed, key, idx). The mixer is splitmix64's
 * finaliser (Steele, Lea, Flood 2014, "Fast splittable pseudorandom number generators");
 * normals come from the Box-Muller transform, in double. Not for cryptography.
 */
#ifndef DPLAN_EXECUTOR_RNG_MIX_H
#define DPLAN_EXECUTOR_RNG_MIX_H

#include <math.h>
#include <stdint.h>

#ifdef __CUDACC__
#define DP_HOSTDEV __host__ __device__
#else
#define DP_HOSTDEV
#endif

static inline DP_HOSTDEV uint64_t dp__mix64(uint64_t z)
{
    z += 0x9e3779b97f4a7c15ULL;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static inline DP_HOSTDEV double dp__rng_normal_at(uint64_t seed, uint64_t key, uint64_t idx)
{
    uint64_t base = dp__mix64(seed ^ dp__mix64(key));
    uint64_t a = dp__mix64(base ^ dp__mix64(2 * idx));
    uint64_t b = dp__mix64(base ^ dp__mix64(2 * idx + 1));
    double u1 = ((double)(a >> 11) + 1.0) * (1.0 / 9007199254740992.0); /* (0, 1], 2^-53 */
    double u2 = (double)(b >> 11) * (1.0 / 9007199254740992.0);         /* [0, 1) */
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

#endif
