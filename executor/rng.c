/*
 * Counter-based random numbers for initialisation: element `idx` of tensor
 * `key` is a pure function of (seed, key, idx), so a rank can fill any slice
 * of a tensor and get exactly the single-process values whatever the
 * layout. The mixer is splitmix64's finaliser (Steele, Lea, Flood 2014,
 * "Fast splittable pseudorandom number generators"); normals come from the
 * Box-Muller transform. Not for cryptography.
 */
#include "internal.h"

#include <math.h>

static uint64_t mix64(uint64_t z)
{
    z += 0x9e3779b97f4a7c15ULL;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

double dp__rng_normal(uint64_t seed, uint64_t key, uint64_t idx)
{
    uint64_t base = mix64(seed ^ mix64(key));
    uint64_t a = mix64(base ^ mix64(2 * idx));
    uint64_t b = mix64(base ^ mix64(2 * idx + 1));
    double u1 = ((double)(a >> 11) + 1.0) * 0x1.0p-53; /* (0, 1] */
    double u2 = (double)(b >> 11) * 0x1.0p-53;         /* [0, 1) */
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

/* FNV-1a, 64 bit: a tensor's key is the hash of its global name. */
uint64_t dp__hash_name(const char *s)
{
    uint64_t h = 0xcbf29ce484222325ULL;
    for (; *s; s++) {
        h ^= (unsigned char)*s;
        h *= 0x100000001b3ULL;
    }
    return h;
}
