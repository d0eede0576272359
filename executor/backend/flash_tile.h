/*
 * The per-tile arithmetic of flash attention (Dao et al. 2022, FlashAttention, Alg. 1;
 * Dao 2023, FlashAttention-2, Alg. 1 and 2), shared by the CPU backend
 * (cpu_attention_flash.c) and the CUDA kernels (cuda_flash.cu), so that the
 * arithmetic a GPU runs is the one the CPU tests check (tests/executor/
 * test_flash_tile.c runs it on the host against the CPU backend's math attention).
 *
 * A query tile of DP_FLASH_BQ rows meets key tiles of DP_FLASH_BK keys; causal: the
 * key tiles up to the one holding the tile's last query, keys above a row's diagonal
 * scored -inf. Forward keeps per row a running max m and sum l of exp(s - m) and an
 * unnormalised accumulator o, rescaled by exp(m_old - m_new) when m grows (the online
 * softmax of Milakov & Gimelshein 2018); at the end ctx = o / l and the log-sum-exp
 * L = m + log l is all that is kept. Backward rebuilds P = exp(s - L) tile by tile,
 * with D = rowsum(dctx * ctx): dS = P (dP - D), dP = dctx v^T (FlashAttention-2,
 * Alg. 2, lines 10-13).
 *
 * Plain C (C11 and CUDA C++): the includer defines DP_FLASH_T, the element type
 * (real on the CPU, float in CUDA). DP_HD marks the functions __host__ __device__
 * under nvcc and is empty elsewhere.
 */
#ifndef DPLAN_EXECUTOR_FLASH_TILE_H
#define DPLAN_EXECUTOR_FLASH_TILE_H

#include <math.h>
#include <stdint.h>

#ifndef DP_FLASH_T
#error "define DP_FLASH_T (the element type) before including flash_tile.h"
#endif

#include "hd.h"

#define DP_FLASH_BQ 32 /* query rows of a tile */
#define DP_FLASH_BK 32 /* keys of a tile */

/* Key tiles a query tile [q0, q0 + nq) meets under the causal mask. */
static inline DP_HD int64_t dp__flash_key_tiles(int64_t q0, int64_t nq)
{
    return (q0 + nq - 1) / DP_FLASH_BK + 1;
}

/* The first query tile that sees key tile [k0, ...): the one holding query k0. */
static inline DP_HD int64_t dp__flash_first_qtile(int64_t k0)
{
    return k0 / DP_FLASH_BQ;
}

static inline DP_HD DP_FLASH_T dp__flash_dot(const DP_FLASH_T *x, const DP_FLASH_T *y, int d)
{
    DP_FLASH_T s = 0;
    for (int e = 0; e < d; e++)
        s += x[e] * y[e];
    return s;
}

/* The score of query row t against key j: scale q.k, -inf above the diagonal (j > t). */
static inline DP_HD DP_FLASH_T dp__flash_score(const DP_FLASH_T *q, const DP_FLASH_T *k, int d,
                                               DP_FLASH_T scale, int64_t t, int64_t j)
{
    return j > t ? (DP_FLASH_T)-INFINITY : scale * dp__flash_dot(q, k, d);
}

/*
 * One row's online-softmax step over a tile's scores s[0, nk) (masked: -inf): the running
 * max *m and sum *l (start: -inf and 0) take the tile in, s becomes p = exp(s - m_new),
 * and the return value is the factor exp(m_old - m_new) that rescales the row's
 * accumulator (0 while nothing was merged: o holds nothing yet). A tile wholly masked
 * for this row leaves m and l alone, zeroes s and returns 1.
 */
static inline DP_HD DP_FLASH_T dp__flash_online(DP_FLASH_T *s, int nk, DP_FLASH_T *m, DP_FLASH_T *l)
{
    DP_FLASH_T mt = (DP_FLASH_T)-INFINITY;
    for (int j = 0; j < nk; j++)
        mt = s[j] > mt ? s[j] : mt;
    if (mt == (DP_FLASH_T)-INFINITY) {
        for (int j = 0; j < nk; j++)
            s[j] = 0;
        return 1;
    }
    const DP_FLASH_T mn = mt > *m ? mt : *m;
    const DP_FLASH_T f = *m == (DP_FLASH_T)-INFINITY ? (DP_FLASH_T)0 : (DP_FLASH_T)exp(*m - mn);
    DP_FLASH_T sum = 0;
    for (int j = 0; j < nk; j++) {
        s[j] = s[j] == (DP_FLASH_T)-INFINITY ? (DP_FLASH_T)0 : (DP_FLASH_T)exp(s[j] - mn);
        sum += s[j];
    }
    *l = *l * f + sum;
    *m = mn;
    return f;
}

/* One element of a row's accumulator after a tile: o f + sum_j p[j] v[j ldv]. */
static inline DP_HD DP_FLASH_T dp__flash_acc(DP_FLASH_T o, DP_FLASH_T f, const DP_FLASH_T *p,
                                             int nk, const DP_FLASH_T *v, int64_t ldv)
{
    DP_FLASH_T s = 0;
    for (int j = 0; j < nk; j++)
        s += p[j] * v[j * ldv];
    return o * f + s;
}

/* The kept statistic of a finished row: L = m + log l. */
static inline DP_HD DP_FLASH_T dp__flash_lse(DP_FLASH_T m, DP_FLASH_T l)
{
    return m + (DP_FLASH_T)log(l);
}

/* Backward: the probability rebuilt from a score (masked: -inf -> 0) and the row's L. */
static inline DP_HD DP_FLASH_T dp__flash_prob(DP_FLASH_T s, DP_FLASH_T lse)
{
    return s == (DP_FLASH_T)-INFINITY ? (DP_FLASH_T)0 : (DP_FLASH_T)exp(s - lse);
}

/* Backward: dS = P (dP - D), D = rowsum(dctx * ctx) = sum_j P dP (FlashAttention-2, Alg. 2
 * line 13, with D from line 4). */
static inline DP_HD DP_FLASH_T dp__flash_dscore(DP_FLASH_T p, DP_FLASH_T dp, DP_FLASH_T D)
{
    return p * (dp - D);
}

#endif
