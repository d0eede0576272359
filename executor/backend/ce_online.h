/*
 * The per-row arithmetic of the fused classifier (backend.h ce_fused): cross-entropy and
 * its logit gradient in one read of the row for the maximum and sum together, then one
 * in-place write, instead of ce_max, ce_sums and ce_grad's three reads (llm.c's
 * fused_classifier kernel does the same on the GPU). The running maximum m and sum
 * s = sum exp(x - m) take one logit at a time, rescaling s when m grows (Milakov &
 * Gimelshein 2018, "Online normalizer calculation for softmax", Alg. 3), and two partial
 * (m, s) merge, as a GPU block's threads do. Shared by the CPU (cpu_loss.c) and CUDA
 * (cuda_ce.cu) kernels; the includer defines DP_CE_T (real, float).
 */
#ifndef DPLAN_EXECUTOR_CE_ONLINE_H
#define DPLAN_EXECUTOR_CE_ONLINE_H

#include <math.h>

#ifndef DP_CE_T
#error "define DP_CE_T (the element type) before including ce_online.h"
#endif

#include "hd.h"

/* (m, s) takes x in (start: -inf, 0). */
static inline DP_HD void dp__ce_online_add(DP_CE_T *m, DP_CE_T *s, DP_CE_T x)
{
    if (x > *m) {
        *s = *s * (DP_CE_T)exp(*m - x) + 1; /* m = -inf: exp(-inf) = 0 */
        *m = x;
    } else {
        *s += (DP_CE_T)exp(x - *m);
    }
}

/* (m, s) takes in another partial (m2, s2). */
static inline DP_HD void dp__ce_online_merge(DP_CE_T *m, DP_CE_T *s, DP_CE_T m2, DP_CE_T s2)
{
    if (m2 == (DP_CE_T)-INFINITY)
        return;
    if (*m == (DP_CE_T)-INFINITY) {
        *m = m2;
        *s = s2;
        return;
    }
    const DP_CE_T M = m2 > *m ? m2 : *m;
    *s = *s * (DP_CE_T)exp(*m - M) + s2 * (DP_CE_T)exp(m2 - M);
    *m = M;
}

/* The gradient of dloss * loss at logit x: dloss (softmax - onehot). */
static inline DP_HD DP_CE_T dp__ce_grad(DP_CE_T x, DP_CE_T m, DP_CE_T inv_s, int target,
                                        DP_CE_T dloss)
{
    return dloss * ((DP_CE_T)exp(x - m) * inv_s - (target ? (DP_CE_T)1 : (DP_CE_T)0));
}

#endif
