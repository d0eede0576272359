/*
 * The CUDA backend's mixture-of-experts and q/k-norm kernels (cuda_moe.cu): their C
 * launchers, and the per-row logic as inline code that both C and CUDA compile, so that
 * the host unit test (tests/executor/test_cuda_moe_host.c) checks the very code the
 * GPU runs against the CPU backend (cpu_moe.c, cpu_qknorm.c) here, where no GPU is.
 *
 * The row functions follow the CPU's arithmetic step for step (double accumulation in
 * the same order, the same float roundings, the same tie rule: among equal scores the
 * lower expert index wins), so one GPU thread per row gives the CPU's results up to the
 * last bit of the device's exp() (CUDA's double exp is within 1 ulp, the CUDA C
 * Programming Guide's table of double-precision functions), which the rounding to float
 * almost always hides.
 */
#ifndef DPLAN_EXECUTOR_CUDA_MOE_H
#define DPLAN_EXECUTOR_CUDA_MOE_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>

#include "hd.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Launchers (backend.h router_topk ... rows_dot, qk_norm_fwd/bwd), asynchronous on
 * `stream`. rows_scatter_add is one thread per column walking r = 0 .. R-1, so the sum
 * into each destination row is in the CPU's order whatever the routing. */
void dp__cuk_router_topk(void *stream, float *probs, int32_t *idx, float *w, const float *bias,
                         int64_t N, int E, int K);
void dp__cuk_router_bwd(void *stream, float *dl, const float *probs, const float *w,
                        const int32_t *idx, const int32_t *rrow, const float *dw, const float *gaux,
                        bool sigmoid, int64_t N, int E, int K);
void dp__cuk_rows_gather(void *stream, float *dst, const float *src, const int32_t *idx,
                         const float *scale, int64_t R, int64_t C);
void dp__cuk_rows_scatter_add(void *stream, float *dst, const float *src, const int32_t *idx,
                              const float *scale, int64_t R, int64_t C);
void dp__cuk_rows_dot(void *stream, float *out, const float *a, const int32_t *idx, const float *b,
                      int64_t R, int64_t C);
void dp__cuk_qk_norm_fwd(void *stream, float *x, int64_t ld, float *raw, float *rstd,
                         const float *wq, const float *wk, int64_t N, int nq, int nk, int d,
                         float eps);
void dp__cuk_qk_norm_bwd(void *stream, float *dx, int64_t ld, float *dwq, float *dwk,
                         const float *raw, const float *rstd, const float *wq, const float *wk,
                         int64_t N, int nq, int nk, int d);

#ifdef __cplusplus
}
#endif

/*
 * One token of router_topk: p [E] holds the logits and receives the softmax (bias NULL)
 * or the sigmoids (bias [E], DeepSeek-V3 report Sec. 2.1.2); ix [K] the K largest
 * scores (+ bias), largest first, the lower index on ties; w [K] their probabilities
 * renormalised to sum 1.
 */
static inline DP_HD void dp__moe_topk_row(float *p, int32_t *ix, float *w, const float *bias, int E,
                                          int K)
{
    if (bias) {
        for (int e = 0; e < E; e++)
            p[e] = (float)(1.0 / (1.0 + exp(-(double)p[e])));
    } else {
        double mx = p[0], s = 0;
        for (int e = 1; e < E; e++)
            mx = p[e] > mx ? p[e] : mx;
        for (int e = 0; e < E; e++)
            s += exp((double)p[e] - mx);
        for (int e = 0; e < E; e++)
            p[e] = (float)(exp((double)p[e] - mx) / s);
    }
    /* K passes: the largest not yet chosen; a strict > keeps the first (lowest) index
     * of a tie. */
    double ws = 0;
    for (int k = 0; k < K; k++) {
        int best = -1;
        double bv = 0;
        for (int e = 0; e < E; e++) {
            bool taken = false;
            for (int j = 0; j < k; j++)
                taken |= ix[j] == e;
            double v = bias ? (double)p[e] + (double)bias[e] : (double)p[e];
            if (!taken && (best < 0 || v > bv)) {
                best = e;
                bv = v;
            }
        }
        ix[k] = best;
        ws += p[best];
    }
    for (int k = 0; k < K; k++)
        w[k] = (float)(p[ix[k]] / ws);
}

/*
 * One token of router_bwd (backend.h; the derivation is cpu_moe.c's): d [E] the logit
 * gradient from s = p [E] (softmax or sigmoids), the combine weights wn [K] of the
 * chosen ix [K], their grouped rows rr [K] (-1: dropped) into dw, and the auxiliary
 * loss's gradient gaux [E] with respect to the scores.
 */
static inline DP_HD void dp__moe_router_bwd_row(float *d, const float *p, const float *wn,
                                                const int32_t *ix, const int32_t *rr,
                                                const float *dw, const float *gaux, bool sigmoid,
                                                int E, int K)
{
    if (sigmoid) {
        double S = 0, pg = 0, W = 0, wd = 0;
        for (int e = 0; e < E; e++) {
            S += p[e];
            pg += (double)p[e] * gaux[e];
        }
        pg /= S;
        for (int k = 0; k < K; k++) {
            W += p[ix[k]];
            wd += rr[k] >= 0 ? (double)wn[k] * dw[rr[k]] : 0.0;
        }
        for (int e = 0; e < E; e++)
            d[e] = (float)(((double)gaux[e] - pg) / S);
        for (int k = 0; k < K; k++) {
            double dwk = rr[k] >= 0 ? (double)dw[rr[k]] : 0.0;
            d[ix[k]] = (float)((double)d[ix[k]] + (dwk - wd) / W);
        }
        for (int e = 0; e < E; e++)
            d[e] = (float)((double)d[e] * (double)p[e] * (1.0 - (double)p[e]));
        return;
    }
    double pg = 0;
    for (int e = 0; e < E; e++)
        pg += (double)p[e] * gaux[e];
    for (int e = 0; e < E; e++)
        d[e] = (float)((double)p[e] * ((double)gaux[e] - pg));
    double wd = 0;
    for (int k = 0; k < K; k++)
        wd += rr[k] >= 0 ? (double)wn[k] * dw[rr[k]] : 0.0;
    for (int k = 0; k < K; k++) {
        double dwk = rr[k] >= 0 ? (double)dw[rr[k]] : 0.0;
        d[ix[k]] += (float)((double)wn[k] * (dwk - wd));
    }
}

/* The place of head r (of H = nq + nk per row) of a [N][ld] buffer. */
static inline DP_HD int64_t dp__qkn_at(int64_t r, int H, int64_t ld, int d)
{
    return (r / H) * ld + (r % H) * (int64_t)d;
}

/* qk_norm_fwd of one head: s [d] keeps the input y [d], which becomes y rstd w. */
static inline DP_HD void dp__qkn_fwd_head(float *y, float *s, float *rstd, const float *w, int d,
                                          double eps)
{
    double ss = 0;
    for (int c = 0; c < d; c++) {
        s[c] = y[c];
        ss += (double)y[c] * y[c];
    }
    double rs = 1.0 / sqrt(ss / d + eps);
    *rstd = (float)rs;
    for (int c = 0; c < d; c++)
        y[c] = (float)((double)s[c] * rs * w[c]);
}

/* qk_norm_bwd's input gradient of one head, in place on g [d]:
 * dx_c = rstd g_c w_c - rstd^3 x_c sum_j (g_j w_j x_j) / d. */
static inline DP_HD void dp__qkn_bwd_head(float *g, const float *s, const float *w, double rs,
                                          int d)
{
    double dot = 0;
    for (int c = 0; c < d; c++)
        dot += (double)g[c] * w[c] * s[c];
    for (int c = 0; c < d; c++)
        g[c] = (float)(rs * (double)g[c] * w[c] - rs * rs * rs * (double)s[c] * dot / d);
}

/* rows_scatter_add's column c: dst[idx[r]][c] += scale[r] src[r][c] for r = 0 .. R-1 in
 * order, the CPU's order of the terms of each destination row. */
static inline DP_HD void dp__moe_scatter_col(float *dst, const float *src, const int32_t *idx,
                                             const float *scale, int64_t R, int64_t C, int64_t c)
{
    for (int64_t r = 0; r < R; r++) {
        float a = scale ? scale[r] : 1.0f, *o = dst + (int64_t)idx[r] * C + c;
#ifdef __CUDA_ARCH__
        /* Rounded product, then rounded sum: nvcc would fuse them into one FMA (its
         * default --fmad=true), which the CPU (x86-64 without -mfma) does not. */
        *o = __fadd_rn(*o, __fmul_rn(a, src[r * C + c]));
#else
        *o += a * src[r * C + c];
#endif
    }
}

/* One phase of the q/k weight gradient's column c: the sum in double of g_c x_c rstd
 * over the heads of one kind (kind 0: the nq query heads, 1: the nk key heads) whose
 * position j among them (row-major over the N rows) is ph mod nph. The nph phases,
 * added in order, give dw_c's increment. */
static inline DP_HD double dp__qkn_dw_part(const float *g, int64_t ld, const float *raw,
                                           const float *rstd, int64_t N, int nq, int nk, int d,
                                           int kind, int c, int ph, int nph)
{
    const int H = nq + nk, h0 = kind ? nq : 0, nh = kind ? nk : nq;
    double s = 0;
    for (int64_t j = ph; j < N * nh; j += nph) {
        int64_t r = (j / nh) * H + h0 + j % nh;
        s += (double)g[dp__qkn_at(r, H, ld, d) + c] * raw[r * d + c] * rstd[r];
    }
    return s;
}

#endif
