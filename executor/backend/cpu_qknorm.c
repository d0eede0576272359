/*
 * CPU backend, q/k normalisation (Qwen3's q_norm and k_norm, HF modeling_qwen3
 * Qwen3Attention; Megatron-Core qk_layernorm): RMSNorm (Zhang & Sennrich 2019) over
 * each query and key head of width d, one weight [d] shared by the query heads and one
 * by the key heads, applied after the QKV projection and before RoPE. Semantics in
 * backend.h (qk_norm_fwd, qk_norm_bwd).
 */
#include "cpu.h"

#include <math.h>
#include <omp.h>
#include <string.h>

void dp__cpu_qk_norm_fwd(struct dp_backend *be, real *x, int64_t ld, real *raw, real *rstd,
                         const real *wq, const real *wk, int64_t N, int nq, int nk, int d)
{
    (void)be;
    const int H = nq + nk;
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < N * H; r++) {
        int64_t n = r / H;
        int i = (int)(r % H);
        real *y = x + n * ld + (int64_t)i * d, *s = raw + r * d;
        const real *w = i < nq ? wq : wk;
        double ss = 0;
        for (int c = 0; c < d; c++) {
            s[c] = y[c];
            ss += (double)y[c] * y[c];
        }
        double rs = 1.0 / sqrt(ss / d + DP_NORM_EPS);
        rstd[r] = (real)rs;
        for (int c = 0; c < d; c++)
            y[c] = (real)((double)s[c] * rs * w[c]);
    }
}

void dp__cpu_qk_norm_bwd(struct dp_backend *be, real *dx, int64_t ld, real *dwq, real *dwk,
                         const real *raw, const real *rstd, const real *wq, const real *wk,
                         int64_t N, int nq, int nk, int d)
{
    (void)be;
    const int H = nq + nk;
    /* The weights' gradient first (it reads dL/dy, which the pass below overwrites), in
     * row order whatever the thread count: dw_c += g_c x_c rstd. */
    for (int64_t r = 0; r < N * H; r++) {
        int64_t n = r / H;
        int i = (int)(r % H);
        const real *g = dx + n * ld + (int64_t)i * d, *s = raw + r * d;
        real *dw = i < nq ? dwq : dwk;
        for (int c = 0; c < d; c++)
            dw[c] += (real)((double)g[c] * s[c] * rstd[r]);
    }
    /* dL/dx_c = rstd (g_c w_c) - rstd^3 x_c sum_j (g_j w_j x_j) / d. */
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < N * H; r++) {
        int64_t n = r / H;
        int i = (int)(r % H);
        real *g = dx + n * ld + (int64_t)i * d;
        const real *s = raw + r * d, *w = i < nq ? wq : wk;
        double rs = rstd[r], dot = 0;
        for (int c = 0; c < d; c++)
            dot += (double)g[c] * w[c] * s[c];
        for (int c = 0; c < d; c++)
            g[c] = (real)(rs * (double)g[c] * w[c] - rs * rs * rs * (double)s[c] * dot / d);
    }
}
