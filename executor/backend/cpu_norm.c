/*
 * CPU backend, norms and activations: LayerNorm and RMSNorm forward and
 * backward, the bias, residual and add passes around the GEMMs, GELU and
 * SwiGLU, and RoPE. Formulas: LayerNorm and GELU backward as in llm.c
 * train_gpt2.c (layernorm_backward, gelu_backward); RMSNorm (Zhang &
 * Sennrich 2019); SwiGLU (Shazeer 2020); RoPE with GPT-NeoX's rotate-half
 * pairing (i, i+d/2) and base 10000 (Su et al. 2021).
 */
#include "cpu.h"
#include "cpu_simd.h"

#include <math.h>
#include <omp.h>
#include <string.h>

/* ------------------------------------------------------------------ norms */

/* Rows [n0, n1): mean and variance by two vectorised passes (the variance of x - mean,
 * not E[x^2] - mean^2), then the scaled output. */
DP_CLONES static void norm_fwd_rows(bool ln, real *out, real *stats, const real *inp, const real *w,
                                    const real *b, int64_t n0, int64_t n1, int64_t C)
{
    for (int64_t n = n0; n < n1; n++) {
        const real *restrict x = inp + n * C;
        real *restrict y = out + n * C;
        real mean = 0, var = 0;
        if (ln) {
#pragma omp simd reduction(+ : mean)
            for (int64_t i = 0; i < C; i++)
                mean += x[i];
            mean /= (real)C;
        }
#pragma omp simd reduction(+ : var)
        for (int64_t i = 0; i < C; i++) {
            real xm = x[i] - mean;
            var += xm * xm;
        }
        var /= (real)C;
        real rstd = (real)1 / R_SQRT(var + (real)DP_NORM_EPS);
        if (b) {
#pragma omp simd
            for (int64_t i = 0; i < C; i++)
                y[i] = (x[i] - mean) * rstd * w[i] + b[i];
        } else {
#pragma omp simd
            for (int64_t i = 0; i < C; i++)
                y[i] = (x[i] - mean) * rstd * w[i];
        }
        stats[2 * n] = mean;
        stats[2 * n + 1] = rstd;
    }
}

void dp__cpu_norm_fwd(struct dp_backend *be, enum dp_norm_kind kind, real *out, real *stats,
                      const real *inp, const real *w, const real *b, int64_t N, int64_t C)
{
    const bool ln = kind == DP_NORM_LAYERNORM;
#pragma omp parallel
    {
        int64_t n0, n1;
        thread_range(N, &n0, &n1);
        norm_fwd_rows(ln, out, stats, inp, w, b, n0, n1, C);
    }
}

/* Input gradient of rows [n0, n1):
 * LayerNorm: dx = rstd (dn - mean(dn) - xhat mean(dn xhat)), dn = dy w;
 * RMSNorm:   dx = rstd (dn - xhat mean(dn xhat)).
 * With dw != NULL the same sweep also accumulates dw += dy xhat (and db += dy), row by
 * row: the order of norm_bwd_params, so one thread gives the same gradients as several. */
DP_CLONES static void norm_bwd_rows(bool ln, real *dinp, real *dw, real *db, const real *dout,
                                    const real *inp, const real *w, const real *stats, int64_t n0,
                                    int64_t n1, int64_t C)
{
    for (int64_t n = n0; n < n1; n++) {
        const real *restrict x = inp + n * C, *restrict dy = dout + n * C;
        real *restrict dx = dinp + n * C;
        const real mean = stats[2 * n], rstd = stats[2 * n + 1];
        real dn_mean = 0, dn_xhat_mean = 0;
#pragma omp simd reduction(+ : dn_mean, dn_xhat_mean)
        for (int64_t i = 0; i < C; i++) {
            real xhat = (x[i] - mean) * rstd;
            real dn = dy[i] * w[i];
            dn_mean += dn;
            dn_xhat_mean += dn * xhat;
        }
        dn_mean = ln ? dn_mean / (real)C : 0;
        dn_xhat_mean /= (real)C;
        if (dw && db) {
            real *restrict gw = dw, *restrict gb = db;
#pragma omp simd
            for (int64_t i = 0; i < C; i++) {
                real xhat = (x[i] - mean) * rstd;
                real dn = dy[i] * w[i];
                dx[i] += (dn - dn_mean - xhat * dn_xhat_mean) * rstd;
                gw[i] += dy[i] * xhat;
                gb[i] += dy[i];
            }
        } else if (dw) {
            real *restrict gw = dw;
#pragma omp simd
            for (int64_t i = 0; i < C; i++) {
                real xhat = (x[i] - mean) * rstd;
                real dn = dy[i] * w[i];
                dx[i] += (dn - dn_mean - xhat * dn_xhat_mean) * rstd;
                gw[i] += dy[i] * xhat;
            }
        } else {
#pragma omp simd
            for (int64_t i = 0; i < C; i++) {
                real xhat = (x[i] - mean) * rstd;
                real dn = dy[i] * w[i];
                dx[i] += (dn - dn_mean - xhat * dn_xhat_mean) * rstd;
            }
        }
    }
}

/* Weight and bias gradients of columns [c0, c1), rows in order. */
DP_CLONES static void norm_bwd_params(real *dw, real *db, const real *dout, const real *inp,
                                      const real *stats, int64_t N, int64_t c0, int64_t c1,
                                      int64_t C)
{
    real *restrict gw = dw;
    for (int64_t n = 0; n < N; n++) {
        const real *restrict x = inp + n * C, *restrict dy = dout + n * C;
        const real mean = stats[2 * n], rstd = stats[2 * n + 1];
#pragma omp simd
        for (int64_t i = c0; i < c1; i++)
            gw[i] += dy[i] * ((x[i] - mean) * rstd); /* as in norm_bwd_rows */
        if (db) {
            real *restrict gb = db;
#pragma omp simd
            for (int64_t i = c0; i < c1; i++)
                gb[i] += dy[i];
        }
    }
}

void dp__cpu_norm_bwd(struct dp_backend *be, enum dp_norm_kind kind, real *dinp, real *dw, real *db,
                      const real *dout, const real *inp, const real *w, const real *stats,
                      int64_t N, int64_t C)
{
    const bool ln = kind == DP_NORM_LAYERNORM;
    if (omp_get_max_threads() <= 1 || omp_in_parallel()) {
        norm_bwd_rows(ln, dinp, dw, db, dout, inp, w, stats, 0, N, C);
        return;
    }
    /* Several threads: rows split for the input gradient, then the parameter gradients
     * split by columns (rows in order, whatever the thread count). */
#pragma omp parallel
    {
        int64_t n0, n1, c0, c1;
        thread_range(N, &n0, &n1);
        norm_bwd_rows(ln, dinp, NULL, NULL, dout, inp, w, stats, n0, n1, C);
        col_range(C, &c0, &c1);
        norm_bwd_params(dw, db, dout, inp, stats, N, c0, c1, C);
    }
}

/* ------------------------------------------------------------------ small ops */

DP_CLONES static void fill_rows(real *out, const real *row, int64_t n0, int64_t n1, int64_t C)
{
    for (int64_t n = n0; n < n1; n++) {
        real *restrict y = out + n * C;
        if (row) {
#pragma omp simd
            for (int64_t i = 0; i < C; i++)
                y[i] = row[i];
        } else {
            memset(y, 0, (size_t)C * sizeof(real));
        }
    }
}

void dp__cpu_bias_fill(struct dp_backend *be, real *out, const real *bias, int64_t N, int64_t C)
{
#pragma omp parallel
    {
        int64_t n0, n1;
        thread_range(N, &n0, &n1);
        fill_rows(out, bias, n0, n1, C);
    }
}

DP_CLONES static void bias_grad_cols(real *db, const real *dout, int64_t N, int64_t c0, int64_t c1,
                                     int64_t C)
{
    real *restrict g = db;
    for (int64_t n = 0; n < N; n++) {
        const real *restrict dy = dout + n * C;
#pragma omp simd
        for (int64_t i = c0; i < c1; i++)
            g[i] += dy[i];
    }
}

void dp__cpu_bias_grad(struct dp_backend *be, real *db, const real *dout, int64_t N, int64_t C)
{
#pragma omp parallel
    {
        int64_t c0, c1;
        col_range(C, &c0, &c1);
        bias_grad_cols(db, dout, N, c0, c1, C);
    }
}

DP_CLONES static void residual_rows(real *out, const real *a, const real *b, const real *bias,
                                    int64_t n0, int64_t n1, int64_t C)
{
    for (int64_t n = n0; n < n1; n++) {
        real *y = out + n * C; /* may alias a */
        const real *x = a + n * C, *restrict z = b ? b + n * C : NULL;
        if (z && bias) {
#pragma omp simd
            for (int64_t i = 0; i < C; i++)
                y[i] = x[i] + z[i] + bias[i];
        } else if (z) {
#pragma omp simd
            for (int64_t i = 0; i < C; i++)
                y[i] = x[i] + z[i];
        } else if (bias) {
#pragma omp simd
            for (int64_t i = 0; i < C; i++)
                y[i] = x[i] + bias[i];
        } else if (y != x) {
            memcpy(y, x, (size_t)C * sizeof(real));
        }
    }
}

void dp__cpu_residual(struct dp_backend *be, real *out, const real *a, const real *b,
                      const real *bias, int64_t N, int64_t C)
{
#pragma omp parallel
    {
        int64_t n0, n1;
        thread_range(N, &n0, &n1);
        residual_rows(out, a, b, bias, n0, n1, C);
    }
}

void dp__cpu_add_inplace(struct dp_backend *be, real *y, const real *x, int64_t n)
{
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; i++)
        y[i] += x[i];
}

/* ------------------------------------------------------------------ activations */

#define GELU_S ((real)0.7978845608028654) /* sqrt(2 / pi) */

/*
 * GELU (tanh form) with e = exp(2u), u = sqrt(2/pi) (x + 0.044715 x^3), q = 1 / (e + 1):
 * tanh u = 1 - 2q, so gelu = x (1 - q) and, with sech^2 u = 4 q (1 - q),
 * gelu' = (1 - q) (1 + 2 x q sqrt(2/pi) (1 + 3 0.044715 x^2)). One exponential and one
 * division per element, on whole vectors (the tail through a partial vector).
 */
static inline __attribute__((always_inline)) void gelu_q(const vreal *x, vreal *q)
{
    const real c2 = (real)2 * GELU_S, c3 = (real)2 * GELU_S * (real)0.044715;
    /* 2u, within +-80: tanh is +-1 in float long before, and q stays a normal number
     * (no slow denormal arithmetic); NaN stays NaN through x */
    const vreal lim = (vreal){0} + (real)80;
    vreal e = *x * (*x * *x * c3 + c2);
    e = VSEL(e < lim, e, lim);
    e = VSEL(e > -lim, e, -lim);
    vexp(&e);
    *q = (real)1 / (e + (real)1);
}

DP_CLONES static void gelu_fwd(real *out, const real *inp, int64_t n)
{
    for (int64_t i = 0; i < n; i += AV) {
        const int m = (int)(n - i < AV ? n - i : AV);
        vreal x, q;
        vload_part(&x, inp + i, m, 0);
        gelu_q(&x, &q);
        x -= x * q;
        vstore_part(out + i, &x, m);
    }
}

/* Columns [c0, c1) of every row: dinp = gelu'(inp) dout, and db += dinp row by row (the
 * fused bias gradient, in the row order of bias_grad). */
DP_CLONES static void gelu_bwd_cols(real *dinp, real *db, const real *dout, const real *inp,
                                    int64_t N, int64_t F, int64_t c0, int64_t c1)
{
    const real k1 = (real)2 * GELU_S, k3 = (real)2 * GELU_S * (real)3 * (real)0.044715;
    for (int64_t n = 0; n < N; n++) {
        const real *x = inp + n * F, *dy = dout + n * F;
        real *dx = dinp + n * F;
        for (int64_t i = c0; i < c1; i += AV) {
            const int m = (int)(c1 - i < AV ? c1 - i : AV);
            vreal xv, q, g;
            vload_part(&xv, x + i, m, 0);
            vload_part(&g, dy + i, m, 0);
            gelu_q(&xv, &q);
            vreal local = ((real)1 - q) * (xv * q * (xv * xv * k3 + k1) + (real)1);
            g *= local;
            vstore_part(dx + i, &g, m);
        }
        if (db) {
            real *restrict gb = db;
#pragma omp simd
            for (int64_t i = c0; i < c1; i++)
                gb[i] += dx[i];
        }
    }
}

/* SwiGLU on rows [gate (F) | up (F)]: out = silu(gate) * up. */
DP_CLONES static void swiglu_fwd(real *out, const real *gt, const real *up, int64_t F)
{
    for (int64_t i = 0; i < F; i++) {
        real sg = (real)1 / ((real)1 + R_EXPV(-gt[i]));
        out[i] = gt[i] * sg * up[i];
    }
}

/* Columns [c0, c1) of the gate and of the up half of every row; db = [gate | up] bias. */
DP_CLONES static void swiglu_bwd_cols(real *dinp, real *db, const real *dout, const real *inp,
                                      int64_t N, int64_t F, int64_t c0, int64_t c1)
{
    for (int64_t n = 0; n < N; n++) {
        const real *restrict gt = inp + n * 2 * F, *restrict up = gt + F,
                             *restrict dy = dout + n * F;
        real *restrict dg = dinp + n * 2 * F, *restrict du = dg + F;
        for (int64_t i = c0; i < c1; i++) {
            real sg = (real)1 / ((real)1 + R_EXPV(-gt[i]));
            du[i] = dy[i] * gt[i] * sg;
            dg[i] = dy[i] * up[i] * sg * ((real)1 + gt[i] * ((real)1 - sg));
        }
        if (db) {
            real *restrict gg = db, *restrict gu = db + F;
#pragma omp simd
            for (int64_t i = c0; i < c1; i++) {
                gg[i] += dg[i];
                gu[i] += du[i];
            }
        }
    }
}

void dp__cpu_act_fwd(struct dp_backend *be, enum dp_ffn_kind kind, real *out, const real *inp,
                     int64_t N, int64_t F)
{
    if (kind == DP_FFN_GELU) {
        FOR_BLOCKS(N * F, gelu_fwd(out + i0, inp + i0, cnt));
        return;
    }
#pragma omp parallel for schedule(static)
    for (int64_t n = 0; n < N; n++)
        swiglu_fwd(out + n * F, inp + n * 2 * F, inp + n * 2 * F + F, F);
}

void dp__cpu_act_bwd(struct dp_backend *be, enum dp_ffn_kind kind, real *dinp, real *dbias,
                     const real *dout, const real *inp, int64_t N, int64_t F)
{
    /* Split by columns so that the fused bias gradient sums rows in order on every thread. */
#pragma omp parallel
    {
        int64_t c0, c1;
        col_range(F, &c0, &c1);
        if (kind == DP_FFN_GELU)
            gelu_bwd_cols(dinp, dbias, dout, inp, N, F, c0, c1);
        else
            swiglu_bwd_cols(dinp, dbias, dout, inp, N, F, c0, c1);
    }
}

void dp__cpu_rope(struct dp_backend *be, real *x, int64_t ld, int64_t N, int64_t T, int nq, int nk,
                  int d, const real *cs, bool inverse)
{
    const int half = d / 2;
    const real *cosv = cs, *sinv = cs + T * half;
    const real sgn = inverse ? (real)-1 : (real)1;
#pragma omp parallel for schedule(static)
    for (int64_t n = 0; n < N; n++) {
        int64_t p = n % T;
        real *row = x + n * ld;
        for (int hh = 0; hh < nq + nk; hh++) {
            real *v = row + (int64_t)hh * d;
            for (int i = 0; i < half; i++) {
                real c = cosv[p * half + i], s = sgn * sinv[p * half + i];
                real x1 = v[i], x2 = v[i + half];
                v[i] = x1 * c - x2 * s;
                v[i + half] = x2 * c + x1 * s;
            }
        }
    }
}
