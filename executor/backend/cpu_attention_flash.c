/*
 * CPU backend, flash attention (backend.h attn_flash_fwd / attn_flash_bwd): causal
 * attention tiled over query and key blocks with the online softmax, keeping only the
 * context and the rows' log-sum-exp L; the backward rebuilds the probabilities tile by
 * tile from L and D = rowsum(dctx * ctx) (Dao 2023, FlashAttention-2, Alg. 1 and 2).
 * The per-tile arithmetic is flash_tile.h's, the same the CUDA kernels run
 * (cuda_flash.cu). Scalar loops: what the executor needs of it is the memory it saves
 * and a host check of the tile arithmetic, not speed (cpu_attention.c's math kernels
 * are register-blocked; these are not).
 *
 * Forward: one task per (sequence, head), the context accumulated in place in ctx.
 * Backward: one task per (sequence, kv head) over its a/g query heads (GQA), so dK and
 * dV of a kv head have one writer; within a task the key tiles run in order and so does
 * each dq sum, so results do not depend on the thread count.
 */
#include "cpu.h"

#define DP_FLASH_T real
#include "flash_tile.h"

#include <omp.h>
#include <string.h>

static inline int64_t lmin(int64_t a, int64_t b)
{
    return a < b ? a : b;
}

/* One (sequence, head): q, k, v rows of stride ld, c (the context, row stride qd) and
 * the head's L [T]. */
static void flash_fwd_head(real *c, int64_t qd, real *L, const real *q, const real *k,
                           const real *v, int64_t ld, int64_t T, int d, real scale)
{
    real s[DP_FLASH_BQ][DP_FLASH_BK], m[DP_FLASH_BQ], l[DP_FLASH_BQ];
    for (int64_t q0 = 0; q0 < T; q0 += DP_FLASH_BQ) {
        const int nq = (int)lmin(DP_FLASH_BQ, T - q0);
        for (int r = 0; r < nq; r++) {
            m[r] = -INFINITY;
            l[r] = 0;
        }
        const int64_t nkt = dp__flash_key_tiles(q0, nq);
        for (int64_t kt = 0; kt < nkt; kt++) {
            const int64_t k0 = kt * DP_FLASH_BK;
            const int nk = (int)lmin(DP_FLASH_BK, T - k0);
            for (int r = 0; r < nq; r++) {
                const int64_t t = q0 + r;
                for (int j = 0; j < nk; j++)
                    s[r][j] = dp__flash_score(q + t * ld, k + (k0 + j) * ld, d, scale, t, k0 + j);
                const real f = dp__flash_online(s[r], nk, &m[r], &l[r]);
                real *o = c + t * qd;
                /* the first tile writes (ctx holds anything on entry), the others rescale */
                for (int e = 0; e < d; e++)
                    o[e] = dp__flash_acc(kt ? o[e] : 0, f, s[r], nk, v + k0 * ld + e, ld);
            }
        }
        for (int r = 0; r < nq; r++) {
            real *o = c + (q0 + r) * qd;
            const real inv = 1 / l[r];
            for (int e = 0; e < d; e++)
                o[e] *= inv;
            L[q0 + r] = dp__flash_lse(m[r], l[r]);
        }
    }
}

void dp__cpu_attn_flash_fwd(struct dp_backend *be, real *ctx, real *lse, const real *qkv, int64_t B,
                            int64_t T, int a, int g, int d)
{
    (void)be;
    const int64_t qd = (int64_t)a * d, kvd = (int64_t)g * d, ld = qd + 2 * kvd;
    const int per = a / g;
    const real scale = (real)(1.0 / sqrt((double)d));
#pragma omp parallel for collapse(2) schedule(static)
    for (int64_t b = 0; b < B; b++)
        for (int h = 0; h < a; h++) {
            const real *q = qkv + b * T * ld + (int64_t)h * d;
            const real *k = qkv + b * T * ld + qd + (int64_t)(h / per) * d;
            flash_fwd_head(ctx + b * T * qd + (int64_t)h * d, qd, lse + (b * a + h) * T, q, k,
                           k + kvd, ld, T, d, scale);
        }
}

/* One query head's part of a kv head's backward: dq (row stride ld) written, dk and dv
 * (row stride ld) accumulated; dc, c: dctx and ctx (row stride qd); L, D the head's
 * log-sum-exp and scratch for D [T]. */
static void flash_bwd_head(real *dq, real *dk, real *dv, real *D, const real *dc, const real *c,
                           int64_t qd, const real *L, const real *q, const real *k, const real *v,
                           int64_t ld, int64_t T, int d, real scale)
{
    real P[DP_FLASH_BQ][DP_FLASH_BK], dS[DP_FLASH_BQ][DP_FLASH_BK];
    for (int64_t t = 0; t < T; t++) {
        D[t] = dp__flash_dot(dc + t * qd, c + t * qd, d); /* FlashAttention-2 Alg. 2 line 4 */
        memset(dq + t * ld, 0, (size_t)d * sizeof(real));
    }
    for (int64_t k0 = 0; k0 < T; k0 += DP_FLASH_BK) {
        const int nk = (int)lmin(DP_FLASH_BK, T - k0);
        for (int64_t q0 = dp__flash_first_qtile(k0) * DP_FLASH_BQ; q0 < T; q0 += DP_FLASH_BQ) {
            const int nq = (int)lmin(DP_FLASH_BQ, T - q0);
            for (int r = 0; r < nq; r++) {
                const int64_t t = q0 + r;
                for (int j = 0; j < nk; j++) {
                    const int64_t kj = k0 + j;
                    const real p = dp__flash_prob(
                        dp__flash_score(q + t * ld, k + kj * ld, d, scale, t, kj), L[t]);
                    const real dp = dp__flash_dot(dc + t * qd, v + kj * ld, d);
                    P[r][j] = p;
                    dS[r][j] = dp__flash_dscore(p, dp, D[t]);
                }
            }
            /* dV += P^T dctx, dK += scale dS^T q (key rows), dQ += scale dS k (query rows) */
            for (int j = 0; j < nk; j++) {
                real *dvj = dv + (k0 + j) * ld, *dkj = dk + (k0 + j) * ld;
                for (int r = 0; r < nq; r++) {
                    const real *dcr = dc + (q0 + r) * qd, *qr = q + (q0 + r) * ld;
                    const real p = P[r][j], ds = scale * dS[r][j];
                    for (int e = 0; e < d; e++) {
                        dvj[e] += p * dcr[e];
                        dkj[e] += ds * qr[e];
                    }
                }
            }
            for (int r = 0; r < nq; r++) {
                real *dqr = dq + (q0 + r) * ld;
                for (int j = 0; j < nk; j++) {
                    const real ds = scale * dS[r][j];
                    const real *kj = k + (k0 + j) * ld;
                    for (int e = 0; e < d; e++)
                        dqr[e] += ds * kj[e];
                }
            }
        }
    }
}

void dp__cpu_attn_flash_bwd(struct dp_backend *be, real *dqkv, real *dsum, const real *dctx,
                            const real *qkv, const real *ctx, const real *lse, int64_t B, int64_t T,
                            int a, int g, int d)
{
    (void)be;
    const int64_t qd = (int64_t)a * d, kvd = (int64_t)g * d, ld = qd + 2 * kvd;
    const int per = a / g;
    const real scale = (real)(1.0 / sqrt((double)d));
#pragma omp parallel for collapse(2) schedule(static)
    for (int64_t b = 0; b < B; b++)
        for (int kh = 0; kh < g; kh++) {
            const int64_t row = b * T * ld, koff = qd + (int64_t)kh * d;
            real *dk = dqkv + row + koff, *dv = dk + kvd;
            for (int64_t t = 0; t < T; t++) {
                memset(dk + t * ld, 0, (size_t)d * sizeof(real));
                memset(dv + t * ld, 0, (size_t)d * sizeof(real));
            }
            for (int j = 0; j < per; j++) {
                const int h = kh * per + j;
                const int64_t hq = (int64_t)h * d, bh = (b * a + h) * T;
                flash_bwd_head(dqkv + row + hq, dk, dv, dsum + bh, dctx + b * T * qd + hq,
                               ctx + b * T * qd + hq, qd, lse + bh, qkv + row + hq,
                               qkv + row + koff, qkv + row + koff + kvd, ld, T, d, scale);
            }
        }
}
