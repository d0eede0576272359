/*
 * CPU backend, the block kernels of ring attention (context parallelism,
 * executor/cp.c): the local queries against one key/value block of the ring,
 * merged by online softmax in forward (Milakov & Gimelshein 2018; the
 * log-sum-exp merge of Liu et al. 2023, "Ring Attention with Blockwise
 * Transformers"), and the backward rebuilt from the saved log-sum-exp as
 * FlashAttention-2 does (Dao 2023, Algorithm 2). Plain scalar loops, one row
 * at a time: correctness first, the executor's CP runs are tiny; the sums
 * run in a fixed order per (sequence, head), so results do not depend on
 * the thread count.
 *
 * Chunk geometry (Megatron-Core's load-balanced causal split): a sequence of
 * the global length is cut into 2 cp chunks of C rows; a rank holds two of
 * them back to back (local rows [0, C) and [C, 2C)). qc and kc name the
 * global chunk of each local half of the queries and of the block.
 */
#include "cpu.h"

#include <math.h>
#include <omp.h>

/* Keys of block chunk j visible from row t of query chunk i: [0, n). */
static int64_t visible(const int qc[2], const int kc[2], int i, int j, int64_t t, int64_t C)
{
    if (kc[j] < qc[i])
        return C;
    if (kc[j] > qc[i])
        return 0;
    return t + 1;
}

static real dot(const real *x, const real *y, int d)
{
    real s = 0;
    for (int e = 0; e < d; e++)
        s += x[e] * y[e];
    return s;
}

void dp__cpu_attn_ring_fwd(struct dp_backend *be, real *acc, real *mx, real *sm, const real *qkv,
                           int64_t ldq, const real *kv, const int qc[2], const int kc[2], int64_t B,
                           int64_t C, int a, int g, int d)
{
    (void)be;
    const int64_t T = 2 * C, kvd = (int64_t)g * d, qd = (int64_t)a * d;
    const real scale = (real)(1.0 / sqrt((double)d));
#pragma omp parallel for collapse(2) schedule(static)
    for (int64_t b = 0; b < B; b++)
        for (int h = 0; h < a; h++) {
            const int hk = h / (a / g);
            const real *K = kv + b * T * 2 * kvd + (int64_t)hk * d, *V = K + kvd;
            for (int64_t r = 0; r < T; r++) {
                const int i = r < C ? 0 : 1;
                const int64_t t = r - i * C;
                const real *q = qkv + (b * T + r) * ldq + (int64_t)h * d;
                real *o = acc + (b * T + r) * qd + (int64_t)h * d;
                real *m = mx + (b * a + h) * T + r, *l = sm + (b * a + h) * T + r;
                /* Block max over the visible keys first, so each exponent is taken once
                 * against the merged max. */
                real bm = -INFINITY;
                for (int j = 0; j < 2; j++) {
                    int64_t n = visible(qc, kc, i, j, t, C);
                    for (int64_t c = 0; c < n; c++) {
                        real s = dot(q, K + (j * C + c) * 2 * kvd, d) * scale;
                        bm = s > bm ? s : bm;
                    }
                }
                if (bm == -INFINITY)
                    continue;
                /* sm 0: no block merged into this row yet (mx is not read). */
                const real m0 = *l > 0 ? *m : -INFINITY;
                const real mn = bm > m0 ? bm : m0;
                const real f = *l > 0 ? (real)exp(m0 - mn) : 0;
                *l *= f;
                for (int e = 0; e < d; e++)
                    o[e] *= f;
                for (int j = 0; j < 2; j++) {
                    int64_t n = visible(qc, kc, i, j, t, C);
                    for (int64_t c = 0; c < n; c++) {
                        const int64_t kr = (j * C + c) * 2 * kvd;
                        real p = (real)exp(dot(q, K + kr, d) * scale - mn);
                        *l += p;
                        for (int e = 0; e < d; e++)
                            o[e] += p * V[kr + e];
                    }
                }
                *m = mn;
            }
        }
}

void dp__cpu_attn_ring_done(struct dp_backend *be, real *ctx, real *mx, const real *sm, int64_t B,
                            int64_t T, int a, int d)
{
    (void)be;
    const int64_t qd = (int64_t)a * d;
#pragma omp parallel for collapse(2) schedule(static)
    for (int64_t b = 0; b < B; b++)
        for (int h = 0; h < a; h++)
            for (int64_t r = 0; r < T; r++) {
                const int64_t s = (b * a + h) * T + r;
                const real inv = (real)1 / sm[s];
                real *o = ctx + (b * T + r) * qd + (int64_t)h * d;
                for (int e = 0; e < d; e++)
                    o[e] *= inv;
                mx[s] += (real)log(sm[s]);
            }
}

void dp__cpu_attn_ring_dsum(struct dp_backend *be, real *dsum, const real *dctx, const real *ctx,
                            int64_t B, int64_t T, int a, int d)
{
    (void)be;
    const int64_t qd = (int64_t)a * d;
#pragma omp parallel for collapse(2) schedule(static)
    for (int64_t b = 0; b < B; b++)
        for (int h = 0; h < a; h++)
            for (int64_t r = 0; r < T; r++) {
                const int64_t o = (b * T + r) * qd + (int64_t)h * d;
                dsum[(b * a + h) * T + r] = dot(dctx + o, ctx + o, d);
            }
}

/*
 * Per (sequence, kv head): the q heads of its group write only their own dq rows and
 * the block's dk, dv rows of that kv head, so threads never write the same element.
 * With P = exp(s - lse): dV += P^T dO, dS = P (dO V^T - D), dQ += dS K / sqrt(d),
 * dK += dS^T Q / sqrt(d).
 */
void dp__cpu_attn_ring_bwd(struct dp_backend *be, real *dq, real *dkv, const real *dctx,
                           const real *qkv, int64_t ldq, const real *kv, const real *lse,
                           const real *dsum, const int qc[2], const int kc[2], int64_t B, int64_t C,
                           int a, int g, int d)
{
    (void)be;
    const int64_t T = 2 * C, kvd = (int64_t)g * d, qd = (int64_t)a * d;
    const int per = a / g;
    const real scale = (real)(1.0 / sqrt((double)d));
#pragma omp parallel for collapse(2) schedule(static)
    for (int64_t b = 0; b < B; b++)
        for (int hk = 0; hk < g; hk++) {
            const real *K = kv + b * T * 2 * kvd + (int64_t)hk * d, *V = K + kvd;
            real *dK = dkv + b * T * 2 * kvd + (int64_t)hk * d, *dV = dK + kvd;
            for (int h = hk * per; h < (hk + 1) * per; h++)
                for (int64_t r = 0; r < T; r++) {
                    const int i = r < C ? 0 : 1;
                    const int64_t t = r - i * C, s = (b * a + h) * T + r;
                    const real *q = qkv + (b * T + r) * ldq + (int64_t)h * d;
                    const real *dO = dctx + (b * T + r) * qd + (int64_t)h * d;
                    real *dQ = dq + (b * T + r) * ldq + (int64_t)h * d;
                    for (int j = 0; j < 2; j++) {
                        int64_t n = visible(qc, kc, i, j, t, C);
                        for (int64_t c = 0; c < n; c++) {
                            const int64_t kr = (j * C + c) * 2 * kvd;
                            real p = (real)exp(dot(q, K + kr, d) * scale - lse[s]);
                            real ds = p * (dot(dO, V + kr, d) - dsum[s]) * scale;
                            for (int e = 0; e < d; e++) {
                                dV[kr + e] += p * dO[e];
                                dQ[e] += ds * K[kr + e];
                                dK[kr + e] += ds * q[e];
                            }
                        }
                    }
                }
        }
}
