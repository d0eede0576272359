/*
 * CPU backend, mixture of experts: the router's softmax and top-k, its
 * backward, and the row gathers and scatters of dispatch and combine
 * (semantics in backend.h, conventions and sources in executor/moe.c).
 * Everything is computed in double and in a fixed order, so the routing is
 * the same on every rank that sees the same logits.
 */
#include "cpu.h"

#include <math.h>
#include <omp.h>
#include <string.h>

void dp__cpu_router_topk(struct dp_backend *be, real *probs, int32_t *idx, real *w,
                         const real *bias, int64_t N, int E, int K)
{
    (void)be;
#pragma omp parallel for schedule(static)
    for (int64_t n = 0; n < N; n++) {
        real *p = probs + n * E;
        if (bias) { /* sigmoid scores (DeepSeek-V3 report, Sec. 2.1.2) */
            for (int e = 0; e < E; e++)
                p[e] = (real)(1.0 / (1.0 + exp(-(double)p[e])));
        } else {
            double mx = p[0], s = 0;
            for (int e = 1; e < E; e++)
                mx = p[e] > mx ? p[e] : mx;
            for (int e = 0; e < E; e++)
                s += exp((double)p[e] - mx);
            for (int e = 0; e < E; e++)
                p[e] = (real)(exp((double)p[e] - mx) / s);
        }
        /* K passes of selection: the largest (score + bias) not yet chosen, the lowest
         * index on ties. */
        int32_t *ix = idx + n * K;
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
            w[n * K + k] = (real)(p[ix[k]] / ws);
    }
}

/* One token of the sigmoid router's backward: s = p (the sigmoids), the combine weights
 * w_k = s_k / W over the chosen (W their sum), the auxiliary scores P_e = s_e / S (S the
 * sum over all E). dL/ds_j = (dw_j - sum_k w_k dw_k) / W for a chosen j (dw_j = 0 when
 * dropped), plus (g_e - sum_i P_i g_i) / S from the auxiliary loss; then dz = ds s (1 - s). */
static void router_bwd_sigmoid(real *d, const real *s, const real *wn, const int32_t *ix,
                               const int32_t *rr, const real *dw, const real *gaux, int E, int K)
{
    double S = 0, pg = 0, W = 0, wd = 0;
    for (int e = 0; e < E; e++) {
        S += s[e];
        pg += (double)s[e] * gaux[e];
    }
    pg /= S;
    for (int k = 0; k < K; k++) {
        W += s[ix[k]];
        wd += rr[k] >= 0 ? (double)wn[k] * dw[rr[k]] : 0.0;
    }
    for (int e = 0; e < E; e++)
        d[e] = (real)(((double)gaux[e] - pg) / S);
    for (int k = 0; k < K; k++) {
        double dwk = rr[k] >= 0 ? (double)dw[rr[k]] : 0.0;
        d[ix[k]] = (real)((double)d[ix[k]] + (dwk - wd) / W);
    }
    for (int e = 0; e < E; e++)
        d[e] = (real)((double)d[e] * (double)s[e] * (1.0 - (double)s[e]));
}

void dp__cpu_router_bwd(struct dp_backend *be, real *dl, const real *probs, const real *w,
                        const int32_t *idx, const int32_t *rrow, const real *dw, const real *gaux,
                        bool sigmoid, int64_t N, int E, int K)
{
    (void)be;
#pragma omp parallel for schedule(static)
    for (int64_t n = 0; n < N; n++) {
        const real *p = probs + n * E;
        real *d = dl + n * E;
        if (sigmoid) {
            router_bwd_sigmoid(d, p, w + n * K, idx + n * K, rrow + n * K, dw, gaux, E, K);
            continue;
        }
        /* Auxiliary term through the full softmax: dz_e = p_e (g_e - sum_i p_i g_i). */
        double pg = 0;
        for (int e = 0; e < E; e++)
            pg += (double)p[e] * gaux[e];
        for (int e = 0; e < E; e++)
            d[e] = (real)((double)p[e] * ((double)gaux[e] - pg));
        /* Combine weights, a softmax over the chosen logits: dz_j = w_j (dw_j - sum_i w_i
         * dw_i) for the chosen j; a dropped choice has dw_j = 0. */
        const real *wn = w + n * K;
        const int32_t *rr = rrow + n * K, *ix = idx + n * K;
        double wd = 0;
        for (int k = 0; k < K; k++)
            wd += rr[k] >= 0 ? (double)wn[k] * dw[rr[k]] : 0.0;
        for (int k = 0; k < K; k++) {
            double dwk = rr[k] >= 0 ? (double)dw[rr[k]] : 0.0;
            d[ix[k]] += (real)((double)wn[k] * (dwk - wd));
        }
    }
}

void dp__cpu_rows_gather(struct dp_backend *be, real *dst, const real *src, const int32_t *idx,
                         const real *scale, int64_t R, int64_t C)
{
    (void)be;
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < R; r++) {
        const real *s = src + (int64_t)idx[r] * C;
        real *o = dst + r * C;
        if (!scale)
            memcpy(o, s, (size_t)C * sizeof(real));
        else
            for (int64_t c = 0; c < C; c++)
                o[c] = scale[r] * s[c];
    }
}

void dp__cpu_rows_scatter_add(struct dp_backend *be, real *dst, const real *src, const int32_t *idx,
                              const real *scale, int64_t R, int64_t C)
{
    (void)be;
    /* Threads split the columns, each walking the rows in order: the sum into a token's
     * row is in row order whatever the thread count. */
#pragma omp parallel
    {
        int nt = omp_get_num_threads(), t = omp_get_thread_num();
        int64_t c0 = C * t / nt, c1 = C * (t + 1) / nt;
        for (int64_t r = 0; r < R; r++) {
            real *o = dst + (int64_t)idx[r] * C;
            const real *s = src + r * C;
            real a = scale ? scale[r] : (real)1;
            for (int64_t c = c0; c < c1; c++)
                o[c] += a * s[c];
        }
    }
}

void dp__cpu_rows_dot(struct dp_backend *be, real *out, const real *a, const int32_t *idx,
                      const real *b, int64_t R, int64_t C)
{
    (void)be;
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < R; r++) {
        const real *x = a + (int64_t)idx[r] * C, *y = b + r * C;
        double s = 0;
        for (int64_t c = 0; c < C; c++)
            s += (double)x[c] * y[c];
        out[r] = (real)s;
    }
}
