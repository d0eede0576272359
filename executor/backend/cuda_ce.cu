/*
 * CUDA backend: the fused classifier (backend.h ce_fused) for an unsplit vocabulary
 * (tp = 1): one block per row; each thread runs the online maximum and sum
 * (ce_online.h) over its strided columns, the block merges the threads' (m, s) pairs in
 * a tree in shared memory, and the same threads then overwrite the row with its
 * gradient: the row is read twice and written once, against ce_max, ce_sums and
 * ce_grad's three reads and one write (llm.c's fused_classifier does likewise).
 * Compiled; never run on a GPU by its author. The per-row arithmetic is the CPU
 * equivalent's (cpu_loss.c dp__cpu_ce_fused), which test_executor_flash checks against
 * the three-pass kernels.
 */
#include "cuda_kernels.h"

#include <cuda_runtime.h>

#define DP_CE_T float
#include "ce_online.h"

#define CE_THREADS 256 /* a power of two: the tree below halves it */

__global__ static void k_ce_fused(float *logits, float *loss, const int32_t *tgt, int64_t nv,
                                  int64_t valid, float dloss)
{
    __shared__ float sm[CE_THREADS], ss[CE_THREADS];
    const int64_t n = blockIdx.x;
    float *l = logits + n * nv;
    float m = -INFINITY, s = 0.0f;
    for (int64_t j = threadIdx.x; j < valid; j += blockDim.x)
        dp__ce_online_add(&m, &s, l[j]);
    sm[threadIdx.x] = m;
    ss[threadIdx.x] = s;
    __syncthreads();
    for (int w = blockDim.x / 2; w > 0; w /= 2) {
        if (threadIdx.x < w)
            dp__ce_online_merge(&sm[threadIdx.x], &ss[threadIdx.x], sm[threadIdx.x + w],
                                ss[threadIdx.x + w]);
        __syncthreads();
    }
    m = sm[0];
    s = ss[0];
    const int64_t t = tgt[n];
    if (threadIdx.x == 0) /* before the target's logit is overwritten below */
        loss[n] = logf(s) + m - (t >= 0 && t < valid ? l[t] : 0.0f);
    __syncthreads();
    const float inv = 1.0f / s;
    for (int64_t j = threadIdx.x; j < nv; j += blockDim.x)
        l[j] = j < valid ? dp__ce_grad(l[j], m, inv, j == t, dloss) : 0.0f;
}

extern "C" void dp__cuk_ce_fused(void *stream, float *logits, float *loss, const int32_t *tgt,
                                 int64_t N, int64_t nv, int64_t valid, float dloss)
{
    if (N <= 0)
        return;
    k_ce_fused<<<(unsigned)N, CE_THREADS, 0, (cudaStream_t)stream>>>(logits, loss, tgt, nv, valid,
                                                                      dloss);
}
