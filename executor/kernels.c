/*
 * CPU kernels: matrix products through CBLAS (OpenBLAS), everything else
 * as OpenMP loops. Written over `real` so that the same code runs in float
 * (training) and double (the gradient check).
 *
 * Determinism: every reduction that produces a parameter gradient is split
 * by columns over the threads and runs over rows in order, so gradients do
 * not depend on the thread count. Host sums (loss, norm) add per-thread
 * partials in thread order.
 *
 * Formulas: LayerNorm and GELU backward as in llm.c train_gpt2.c
 * (layernorm_backward, gelu_backward); RMSNorm (Zhang & Sennrich 2019);
 * SwiGLU (Shazeer 2020); RoPE with GPT-NeoX's rotate-half pairing (i, i+d/2)
 * and base 10000 (Su et al. 2021); vocabulary-parallel cross-entropy as
 * Megatron-LM tensor_parallel/cross_entropy.py.
 */
#include "cpu.h"
#include "internal.h"

#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <string.h>

#ifdef DP_REAL_DOUBLE
#define CBLAS_GEMM cblas_dgemm
#define R_LOG      log
#define R_SQRT     sqrt
#define R_INF      ((real)INFINITY)
#else
#define CBLAS_GEMM cblas_sgemm
#define R_LOG      logf
#define R_SQRT     sqrtf
#define R_INF      INFINITY
#endif

#define MAX_THREADS 256

/*
 * The hot element-wise loops are compiled for AVX-512, AVX2 and baseline x86-64 and
 * picked at load time (GCC/Clang function multiversioning), so one binary runs anywhere
 * and uses the wide vectors where they exist. Reductions use `omp simd`, which lets the
 * compiler vectorise the sum in a fixed (layout-independent) order.
 */
#if defined(__x86_64__) && !defined(DP_REAL_DOUBLE) && defined(__has_attribute)
#if __has_attribute(target_clones)
#define DP_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#endif
#endif
#ifndef DP_CLONES
#define DP_CLONES
#endif

/*
 * exp for the element-wise kernels. In float, a branch-free version the compiler can
 * vectorise (glibc's expf is a scalar call, and GELU, softmax, SiLU and the cross-entropy
 * spend most of their time in it): exp(x) = 2^n p(r), n = round(x / ln 2),
 * r = x - n ln 2 in two parts, p the degree-6 minimax polynomial of Cephes expf
 * (Moshier, "Methods and Programs for Mathematical Functions"), within 2 ulp on
 * [-87, 88]; other inputs are clamped to that range (+inf gives 1.6e38), NaN stays NaN.
 * The double build keeps libm.
 */
#ifdef DP_REAL_DOUBLE
#define R_EXPV exp
#else
static inline float R_EXPV(float x0)
{
    /* NaN fails both comparisons and becomes -87 here, so the conversion to int below is
     * always defined; the NaN itself is returned at the end (it must reach the loss). */
    float x = x0 > -87.0f ? x0 : -87.0f;
    x = x < 88.0f ? x : 88.0f;
    /* round to nearest by adding and subtracting 1.5 * 2^23 (no libm call) */
    float n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
    float r = x - n * 0.693359375f + n * 2.12194440e-4f;
    float p = 1.9875691500E-4f;
    p = p * r + 1.3981999507E-3f;
    p = p * r + 8.3334519073E-3f;
    p = p * r + 4.1665795894E-2f;
    p = p * r + 1.6666665459E-1f;
    p = p * r + 5.0000001201E-1f;
    p = p * r * r + r + 1.0f;
    int32_t e = ((int32_t)n + 127) << 23;
    float scale;
    memcpy(&scale, &e, sizeof scale);
    return x0 != x0 ? x0 : p * scale;
}
#endif

/* tanh(u) = 1 - 2 / (exp(2u) + 1): one exponential, no cancellation problem for GELU,
 * which only uses 1 + tanh. */
static inline real tanh_e(real u)
{
    return (real)1 - (real)2 / (R_EXPV((real)2 * u) + (real)1);
}

/* ------------------------------------------------------------------ GEMM */

void dp__cpu_gemm1(bool ta, bool tb, int m, int n, int k, real alpha, const real *a, int lda,
                   const real *b, int ldb, real beta, real *c, int ldc)
{
    if (m <= 0 || n <= 0)
        return;
    CBLAS_GEMM(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, m, n,
               k, alpha, a, lda, b, ldb, beta, c, ldc);
}

void dp__cpu_gemm(bool ta, bool tb, int m, int n, int k, real alpha, const real *a, int lda,
                  const real *b, int ldb, real beta, real *c, int ldc)
{
    int nt = omp_get_max_threads();
    /* Rows per block: a multiple of 16 so each block's kernel sees whole micro-panels. */
    if (nt <= 1 || omp_in_parallel() || m < 32 * nt || (double)m * n * k < 4e6) {
        dp__cpu_gemm1(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
        return;
    }
#pragma omp parallel num_threads(nt)
    {
        int t = omp_get_thread_num(), T = omp_get_num_threads();
        int per = ((m + T - 1) / T + 15) / 16 * 16;
        int r0 = t * per, r1 = r0 + per < m ? r0 + per : m;
        if (r0 < r1) {
            /* Rows r0.. of op(A): row r0 of A, or column r0 of A when transposed. */
            const real *ab = ta ? a + r0 : a + (size_t)r0 * lda;
            dp__cpu_gemm1(ta, tb, r1 - r0, n, k, alpha, ab, lda, b, ldb, beta, c + (size_t)r0 * ldc,
                          ldc);
        }
    }
}

/* Columns [c0, c1) of C handled by the calling thread of a parallel region. */
static void col_range(int64_t C, int64_t *c0, int64_t *c1)
{
    int t = omp_get_thread_num(), T = omp_get_num_threads();
    *c0 = C * t / T;
    *c1 = C * (t + 1) / T;
}

/* ------------------------------------------------------------------ init */

void dp__cpu_init_fill(real *dst, int64_t rows, int64_t cols, int64_t gcols, int64_t r0, int64_t c0,
                       uint64_t seed, uint64_t key, double std, double value)
{
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < rows; i++)
        for (int64_t j = 0; j < cols; j++) {
            uint64_t idx = (uint64_t)((r0 + i) * gcols + c0 + j);
            dst[i * cols + j] = (real)(std > 0 ? std * dp__rng_normal(seed, key, idx) : value);
        }
}

/* ------------------------------------------------------------------ norms */

void dp__cpu_norm_fwd(enum dp_norm_kind kind, real *out, real *stats, const real *inp,
                      const real *w, const real *b, int64_t N, int64_t C)
{
#pragma omp parallel for schedule(static)
    for (int64_t n = 0; n < N; n++) {
        const real *x = inp + n * C;
        real *y = out + n * C;
        real mean = 0, var = 0;
        if (kind == DP_NORM_LAYERNORM) {
            for (int64_t i = 0; i < C; i++)
                mean += x[i];
            mean /= (real)C;
        }
        for (int64_t i = 0; i < C; i++) {
            real xm = x[i] - mean;
            var += xm * xm;
        }
        var /= (real)C;
        real rstd = (real)1 / R_SQRT(var + (real)DP_NORM_EPS);
        for (int64_t i = 0; i < C; i++) {
            real v = (x[i] - mean) * rstd * w[i];
            y[i] = b ? v + b[i] : v;
        }
        stats[2 * n] = mean;
        stats[2 * n + 1] = rstd;
    }
}

void dp__cpu_norm_bwd(enum dp_norm_kind kind, real *dinp, real *dw, real *db, const real *dout,
                      const real *inp, const real *w, const real *stats, int64_t N, int64_t C)
{
    /* Input gradient, row by row:
     * LayerNorm: dx = rstd (dn - mean(dn) - xhat mean(dn xhat)), dn = dy w;
     * RMSNorm:   dx = rstd (dn - xhat mean(dn xhat)). */
#pragma omp parallel for schedule(static)
    for (int64_t n = 0; n < N; n++) {
        const real *x = inp + n * C, *dy = dout + n * C;
        real *dx = dinp + n * C;
        real mean = stats[2 * n], rstd = stats[2 * n + 1];
        real dn_mean = 0, dn_xhat_mean = 0;
        for (int64_t i = 0; i < C; i++) {
            real xhat = (x[i] - mean) * rstd;
            real dn = dy[i] * w[i];
            dn_mean += dn;
            dn_xhat_mean += dn * xhat;
        }
        dn_mean /= (real)C;
        dn_xhat_mean /= (real)C;
        if (kind == DP_NORM_RMSNORM)
            dn_mean = 0;
        for (int64_t i = 0; i < C; i++) {
            real xhat = (x[i] - mean) * rstd;
            real dn = dy[i] * w[i];
            dx[i] += (dn - dn_mean - xhat * dn_xhat_mean) * rstd;
        }
    }
    /* Weight and bias gradients: columns split over threads, rows in order. */
#pragma omp parallel
    {
        int64_t c0, c1;
        col_range(C, &c0, &c1);
        for (int64_t n = 0; n < N; n++) {
            const real *x = inp + n * C, *dy = dout + n * C;
            real mean = stats[2 * n], rstd = stats[2 * n + 1];
            for (int64_t i = c0; i < c1; i++) {
                dw[i] += dy[i] * (x[i] - mean) * rstd;
                if (db)
                    db[i] += dy[i];
            }
        }
    }
}

/* ------------------------------------------------------------------ small ops */

void dp__cpu_bias_add(real *out, const real *bias, int64_t N, int64_t C)
{
#pragma omp parallel for schedule(static)
    for (int64_t n = 0; n < N; n++)
        for (int64_t i = 0; i < C; i++)
            out[n * C + i] += bias[i];
}

void dp__cpu_bias_grad(real *db, const real *dout, int64_t N, int64_t C)
{
#pragma omp parallel
    {
        int64_t c0, c1;
        col_range(C, &c0, &c1);
        for (int64_t n = 0; n < N; n++)
            for (int64_t i = c0; i < c1; i++)
                db[i] += dout[n * C + i];
    }
}

void dp__cpu_residual(real *out, const real *a, const real *b, const real *bias, int64_t N,
                      int64_t C)
{
#pragma omp parallel for schedule(static)
    for (int64_t n = 0; n < N; n++)
        for (int64_t i = 0; i < C; i++)
            out[n * C + i] = a[n * C + i] + b[n * C + i] + (bias ? bias[i] : 0);
}

void dp__cpu_add_inplace(real *y, const real *x, int64_t n)
{
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; i++)
        y[i] += x[i];
}

/* ------------------------------------------------------------------ activations */

#define GELU_S ((real)0.7978845608028654) /* sqrt(2 / pi) */

DP_CLONES static void gelu_fwd(real *out, const real *inp, int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        real x = inp[i];
        real cube = (real)0.044715 * x * x * x;
        out[i] = (real)0.5 * x * ((real)1 + tanh_e(GELU_S * (x + cube)));
    }
}

DP_CLONES static void gelu_bwd(real *dinp, const real *dout, const real *inp, int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        real x = inp[i];
        real cube = (real)0.044715 * x * x * x;
        real th = tanh_e(GELU_S * (x + cube));
        real sech2 = (real)1 - th * th; /* d tanh = sech^2 = 1 - tanh^2 */
        real local = (real)0.5 * ((real)1 + th) +
                     x * (real)0.5 * sech2 * GELU_S * ((real)1 + (real)3 * (real)0.044715 * x * x);
        dinp[i] = local * dout[i];
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

DP_CLONES static void swiglu_bwd(real *dg, real *du, const real *dy, const real *gt, const real *up,
                                 int64_t F)
{
    for (int64_t i = 0; i < F; i++) {
        real sg = (real)1 / ((real)1 + R_EXPV(-gt[i]));
        du[i] = dy[i] * gt[i] * sg;
        dg[i] = dy[i] * up[i] * sg * ((real)1 + gt[i] * ((real)1 - sg));
    }
}

/* Split [0, n) over the threads in blocks of 4096 elements (whole vectors). */
#define FOR_BLOCKS(n, body)                                                                        \
    _Pragma("omp parallel for schedule(static)") for (int64_t b0_ = 0; b0_ < (n); b0_ += 4096)     \
    {                                                                                              \
        int64_t i0 = b0_, cnt = (n)-b0_ < 4096 ? (n)-b0_ : 4096;                                   \
        body;                                                                                      \
    }

void dp__cpu_act_fwd(enum dp_ffn_kind kind, real *out, const real *inp, int64_t N, int64_t F)
{
    if (kind == DP_FFN_GELU) {
        FOR_BLOCKS(N * F, gelu_fwd(out + i0, inp + i0, cnt));
        return;
    }
#pragma omp parallel for schedule(static)
    for (int64_t n = 0; n < N; n++)
        swiglu_fwd(out + n * F, inp + n * 2 * F, inp + n * 2 * F + F, F);
}

void dp__cpu_act_bwd(enum dp_ffn_kind kind, real *dinp, const real *dout, const real *inp,
                     int64_t N, int64_t F)
{
    if (kind == DP_FFN_GELU) {
        FOR_BLOCKS(N * F, gelu_bwd(dinp + i0, dout + i0, inp + i0, cnt));
        return;
    }
#pragma omp parallel for schedule(static)
    for (int64_t n = 0; n < N; n++)
        swiglu_bwd(dinp + n * 2 * F, dinp + n * 2 * F + F, dout + n * F, inp + n * 2 * F,
                   inp + n * 2 * F + F, F);
}

void dp__cpu_rope(real *x, int64_t ld, int64_t N, int64_t T, int nq, int nk, int d, const real *cs,
                  bool inverse)
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

/* ------------------------------------------------------------------ attention */

/* Row-wise causal softmax of a T x T block in place (entries above the diagonal -> 0). */
DP_CLONES static void softmax_causal(real *P, int64_t T)
{
    for (int64_t t = 0; t < T; t++) {
        real *row = P + t * T;
        real mx = -R_INF;
        for (int64_t j = 0; j <= t; j++)
            mx = row[j] > mx ? row[j] : mx;
        real sum = 0;
#pragma omp simd reduction(+ : sum)
        for (int64_t j = 0; j <= t; j++) {
            row[j] = R_EXPV(row[j] - mx);
            sum += row[j];
        }
        real inv = (real)1 / sum;
        for (int64_t j = 0; j <= t; j++)
            row[j] *= inv;
        for (int64_t j = t + 1; j < T; j++)
            row[j] = 0;
    }
}

/* Softmax backward on a causal T x T block: dS = P * (dP - sum_j dP P), in place in dP. */
DP_CLONES static void softmax_causal_bwd(real *dP, const real *P, int64_t T)
{
    for (int64_t t = 0; t < T; t++) {
        const real *pr = P + t * T;
        real *dr = dP + t * T;
        real s = 0;
#pragma omp simd reduction(+ : s)
        for (int64_t u = 0; u <= t; u++)
            s += dr[u] * pr[u];
        for (int64_t u = 0; u <= t; u++)
            dr[u] = pr[u] * (dr[u] - s);
        for (int64_t u = t + 1; u < T; u++)
            dr[u] = 0;
    }
}

/*
 * Causal attention per (sequence, head) with the products cut into row blocks of ATT_BS:
 * block i (rows r0 .. r0 + rows) only needs keys 0 .. r0 + rows, so the masked upper
 * triangle is never computed (5/8 of the full work at T = 128). Softmax rows read only
 * their causal entries and write zeros above the diagonal.
 */
#define ATT_BS 32

/* S = scale q k^T for the causal blocks, then row softmax, into P [T][T]. */
static void probs_one(real *P, const real *q, const real *k, int64_t ld, int64_t T, int d,
                      real scale)
{
    for (int64_t r0 = 0; r0 < T; r0 += ATT_BS) {
        int64_t rows = T - r0 < ATT_BS ? T - r0 : ATT_BS, cols = r0 + rows;
        dp__cpu_gemm1(false, true, (int)rows, (int)cols, d, scale, q + r0 * ld, (int)ld, k, (int)ld,
                      0, P + r0 * T, (int)T);
    }
    softmax_causal(P, T);
}

void dp__cpu_attn_probs(real *probs, const real *qkv, int64_t B, int64_t T, int a, int g, int d)
{
    const int64_t qd = (int64_t)a * d, kvd = (int64_t)g * d, ld = qd + 2 * kvd;
    const int per = a / g;
    const real scale = (real)1 / R_SQRT((real)d);
#pragma omp parallel for collapse(2) schedule(static)
    for (int64_t b = 0; b < B; b++)
        for (int h = 0; h < a; h++) {
            const real *q = qkv + b * T * ld + (int64_t)h * d;
            const real *k = qkv + b * T * ld + qd + (int64_t)(h / per) * d;
            probs_one(probs + (b * a + h) * T * T, q, k, ld, T, d, scale);
        }
}

void dp__cpu_attn_fwd(real *ctx, real *probs, const real *qkv, int64_t B, int64_t T, int a, int g,
                      int d)
{
    const int64_t qd = (int64_t)a * d, kvd = (int64_t)g * d, ld = qd + 2 * kvd;
    const int per = a / g;
    const real scale = (real)1 / R_SQRT((real)d);
    /* The per-head products write strided column blocks; OpenBLAS would clear each one
     * row by row for beta = 0, so clear the whole buffer once and accumulate. */
    memset(ctx, 0, (size_t)(B * T * qd) * sizeof(real));
#pragma omp parallel for collapse(2) schedule(static)
    for (int64_t b = 0; b < B; b++)
        for (int h = 0; h < a; h++) {
            const real *q = qkv + b * T * ld + (int64_t)h * d;
            const real *k = qkv + b * T * ld + qd + (int64_t)(h / per) * d;
            const real *v = k + kvd;
            real *P = probs + (b * a + h) * T * T;
            real *c = ctx + b * T * qd + (int64_t)h * d;
            probs_one(P, q, k, ld, T, d, scale);
            for (int64_t r0 = 0; r0 < T; r0 += ATT_BS) {
                int64_t rows = T - r0 < ATT_BS ? T - r0 : ATT_BS, cols = r0 + rows;
                dp__cpu_gemm1(false, false, (int)rows, d, (int)cols, 1, P + r0 * T, (int)T, v,
                              (int)ld, 1, c + r0 * qd, (int)qd);
            }
        }
}

void dp__cpu_attn_bwd(real *dqkv, real *dprobs, const real *dctx, const real *qkv,
                      const real *probs, int64_t B, int64_t T, int a, int g, int d)
{
    const int64_t qd = (int64_t)a * d, kvd = (int64_t)g * d, ld = qd + 2 * kvd;
    const int per = a / g;
    const real scale = (real)1 / R_SQRT((real)d);
    memset(dqkv, 0, (size_t)(B * T * ld) * sizeof(real)); /* see attn_fwd: beta = 1 below */
    /* One task per (sequence, kv head): the q heads of a group add into the same dK, dV. */
#pragma omp parallel for collapse(2) schedule(static)
    for (int64_t b = 0; b < B; b++)
        for (int kh = 0; kh < g; kh++) {
            const real *k = qkv + b * T * ld + qd + (int64_t)kh * d;
            const real *v = k + kvd;
            real *dk = dqkv + b * T * ld + qd + (int64_t)kh * d;
            real *dv = dk + kvd;
            for (int j = 0; j < per; j++) {
                int h = kh * per + j;
                const real *q = qkv + b * T * ld + (int64_t)h * d;
                real *dq = dqkv + b * T * ld + (int64_t)h * d;
                const real *P = probs + (b * a + h) * T * T;
                real *dP = dprobs + (b * a + h) * T * T;
                const real *dc = dctx + b * T * qd + (int64_t)h * d;
                /* dP = dctx V^T and dV += P^T dctx, causal blocks only. */
                for (int64_t r0 = 0; r0 < T; r0 += ATT_BS) {
                    int64_t rows = T - r0 < ATT_BS ? T - r0 : ATT_BS, cols = r0 + rows;
                    dp__cpu_gemm1(false, true, (int)rows, (int)cols, d, 1, dc + r0 * qd, (int)qd, v,
                                  (int)ld, 0, dP + r0 * T, (int)T);
                    dp__cpu_gemm1(true, false, (int)cols, d, (int)rows, 1, P + r0 * T, (int)T,
                                  dc + r0 * qd, (int)qd, 1, dv, (int)ld);
                }
                softmax_causal_bwd(dP, P, T);
                /* dQ = scale dS K; dK += scale dS^T Q */
                for (int64_t r0 = 0; r0 < T; r0 += ATT_BS) {
                    int64_t rows = T - r0 < ATT_BS ? T - r0 : ATT_BS, cols = r0 + rows;
                    dp__cpu_gemm1(false, false, (int)rows, d, (int)cols, scale, dP + r0 * T, (int)T,
                                  k, (int)ld, 1, dq + r0 * ld, (int)ld);
                    dp__cpu_gemm1(true, false, (int)cols, d, (int)rows, scale, dP + r0 * T, (int)T,
                                  q + r0 * ld, (int)ld, 1, dk, (int)ld);
                }
            }
        }
}

/* ------------------------------------------------------------------ embeddings */

void dp__cpu_embed_fwd(real *out, const int32_t *tok, const real *wte, int64_t v0, int64_t nv,
                       int64_t N, int64_t C)
{
#pragma omp parallel for schedule(static)
    for (int64_t n = 0; n < N; n++) {
        int64_t t = tok[n] - v0;
        if (t >= 0 && t < nv)
            memcpy(out + n * C, wte + t * C, (size_t)C * sizeof(real));
        else
            memset(out + n * C, 0, (size_t)C * sizeof(real));
    }
}

void dp__cpu_embed_bwd(real *dwte, const int32_t *tok, const real *dout, int64_t v0, int64_t nv,
                       int64_t N, int64_t C)
{
#pragma omp parallel
    {
        int64_t c0, c1;
        col_range(C, &c0, &c1);
        for (int64_t n = 0; n < N; n++) {
            int64_t t = tok[n] - v0;
            if (t < 0 || t >= nv)
                continue;
            for (int64_t i = c0; i < c1; i++)
                dwte[t * C + i] += dout[n * C + i];
        }
    }
}

void dp__cpu_pos_fwd(real *out, const real *wpe, int64_t n0, int64_t N, int64_t T, int64_t C)
{
#pragma omp parallel for schedule(static)
    for (int64_t n = 0; n < N; n++) {
        const real *p = wpe + ((n0 + n) % T) * C;
        for (int64_t i = 0; i < C; i++)
            out[n * C + i] += p[i];
    }
}

void dp__cpu_pos_bwd(real *dwpe, const real *dout, int64_t n0, int64_t N, int64_t T, int64_t C)
{
#pragma omp parallel
    {
        int64_t c0, c1;
        col_range(C, &c0, &c1);
        for (int64_t n = 0; n < N; n++) {
            real *p = dwpe + ((n0 + n) % T) * C;
            for (int64_t i = c0; i < c1; i++)
                p[i] += dout[n * C + i];
        }
    }
}

/* ------------------------------------------------------------------ cross-entropy */

void dp__cpu_ce_max(real *rowmax, const real *logits, int64_t N, int64_t nv, int64_t v0,
                    int64_t vocab)
{
    int64_t valid = vocab - v0 < nv ? vocab - v0 : nv; /* padded columns are ignored */
#pragma omp parallel for schedule(static)
    for (int64_t n = 0; n < N; n++) {
        const real *l = logits + n * nv;
        real mx = -R_INF;
        for (int64_t j = 0; j < valid; j++)
            mx = l[j] > mx ? l[j] : mx;
        rowmax[n] = mx;
    }
}

void dp__cpu_ce_sums(real *sums, const real *logits, const real *gmax, const int32_t *tgt,
                     int64_t N, int64_t nv, int64_t v0, int64_t vocab)
{
    int64_t valid = vocab - v0 < nv ? vocab - v0 : nv;
#pragma omp parallel for schedule(static)
    for (int64_t n = 0; n < N; n++) {
        const real *l = logits + n * nv;
        int64_t t = tgt[n] - v0;
        sums[n] = (t >= 0 && t < nv) ? l[t] : 0;
        real s = 0;
        for (int64_t j = 0; j < valid; j++)
            s += R_EXPV(l[j] - gmax[n]);
        sums[N + n] = s;
    }
}

void dp__cpu_ce_grad(real *logits, real *loss, const real *gmax, const real *sums,
                     const int32_t *tgt, int64_t N, int64_t nv, int64_t v0, int64_t vocab,
                     real dloss)
{
    int64_t valid = vocab - v0 < nv ? vocab - v0 : nv;
    if (valid < 0)
        valid = 0;
#pragma omp parallel for schedule(static)
    for (int64_t n = 0; n < N; n++) {
        real *l = logits + n * nv;
        real se = sums[N + n];
        loss[n] = R_LOG(se) + gmax[n] - sums[n];
        real inv = (real)1 / se;
        int64_t t = tgt[n] - v0;
        for (int64_t j = 0; j < valid; j++)
            l[j] = dloss * (R_EXPV(l[j] - gmax[n]) * inv - (j == t ? (real)1 : (real)0));
        for (int64_t j = valid; j < nv; j++)
            l[j] = 0;
    }
}

/* ------------------------------------------------------------------ reductions */

static double reduce_sum(const real *x, int64_t n, bool square)
{
    double part[MAX_THREADS] = {0};
    int used = 1;
#pragma omp parallel
    {
        int t = omp_get_thread_num(), T = omp_get_num_threads();
        if (T > MAX_THREADS)
            T = MAX_THREADS;
        if (t < T) {
            int64_t i0 = n * t / T, i1 = n * (t + 1) / T;
            double s = 0;
            for (int64_t i = i0; i < i1; i++)
                s += square ? (double)x[i] * (double)x[i] : (double)x[i];
            part[t] = s;
        }
#pragma omp single
        used = T;
    }
    double s = 0;
    for (int t = 0; t < used; t++)
        s += part[t];
    return s;
}

double dp__cpu_sum(const real *x, int64_t n)
{
    return reduce_sum(x, n, false);
}

double dp__cpu_sumsq(const real *x, int64_t n)
{
    return reduce_sum(x, n, true);
}

DP_CLONES static void adamw_range(real *p, const real *grad, real *m, real *v, int64_t n, real rlr,
                                  real b1, real b2, real reps, real rwd, real ibc1, real ibc2,
                                  real gs)
{
    for (int64_t i = 0; i < n; i++) {
        real gi = grad[i] * gs;
        real mi = b1 * m[i] + ((real)1 - b1) * gi;
        real vi = b2 * v[i] + ((real)1 - b2) * gi * gi;
        m[i] = mi;
        v[i] = vi;
        real mhat = mi * ibc1, vhat = vi * ibc2;
        p[i] -= rlr * (mhat / (R_SQRT(vhat) + reps) + rwd * p[i]);
    }
}

void dp__cpu_adamw(real *p, const real *grad, real *m, real *v, int64_t n, double lr, double beta1,
                   double beta2, double eps, double wd, double bc1, double bc2, double gscale)
{
    const real b1 = (real)beta1, b2 = (real)beta2, gs = (real)gscale;
    const real rlr = (real)lr, reps = (real)eps, rwd = (real)wd;
    const real ibc1 = (real)(1.0 / bc1), ibc2 = (real)(1.0 / bc2);
    FOR_BLOCKS(n, adamw_range(p + i0, grad + i0, m + i0, v + i0, cnt, rlr, b1, b2, reps, rwd, ibc1,
                              ibc2, gs));
}
