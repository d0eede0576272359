/*
 * Counter-based random numbers for initialisation: element `idx` of tensor
 * `key` is a pure function of (seed, key, idx), so a rank can fill any slice
 * of a tensor and get exactly the single-process values whatever the
 * layout. The mixer is splitmix64's finaliser (Steele, Lea, Flood 2014,
 * "Fast splittable pseudorandom number generators"); normals come from the
 * Box-Muller transform (the code: rng_mix.h, shared with the CUDA kernels).
 */
#include "internal.h"

#include "rng_mix.h"

double dp__rng_normal(uint64_t seed, uint64_t key, uint64_t idx)
{
    return dp__rng_normal_at(seed, key, idx);
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
