/*
 * CPU kernels: matrix products through CBLAS (OpenBLAS), everything else
 * as OpenMP loops. Written over `real` so that the same code runs in float
 * (training) and double (the gradient check). The exception is causal
 * attention at head sizes up to 256, where the products of one head are
 * register-blocked loops here (see "attention"): at T = 128, d = 32 a BLAS
 * call per 32 x 32 tile costs more than its arithmetic.
 *
 * Determinism: every reduction that produces a parameter gradient is split
 * by columns over the threads and runs over rows in order, so gradients do
 * not depend on the thread count (one thread may fuse such a sweep into the
 * row loop that precedes it: same order, same result). Host sums (loss,
 * norm) add per-thread partials in thread order.
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

/*
 * Explicit 64-byte vectors (GCC/Clang vector extensions: 16 floats or 8 doubles, lowered
 * to AVX-512, AVX2 or SSE registers by each DP_CLONES target) where the compiler's own
 * vectorisation falls short: rows of varying length (causal softmax) and register blocks.
 * Vectors are loaded and stored with memcpy (any alignment) and never passed by value.
 */
#define AV ((int)(64 / sizeof(real)))
typedef real vreal __attribute__((vector_size(64)));
#ifdef DP_REAL_DOUBLE
typedef int64_t lane_int; /* an integer as wide as real */
#else
typedef int32_t lane_int;
#endif
typedef lane_int vint __attribute__((vector_size(64)));
/* Lane-wise m ? a : b for a comparison mask m (C has no vector ?:). */
#define VSEL(m, a, b) ((vreal)(((vint)(a) & (m)) | ((vint)(b) & ~(m))))

/* *v = R_EXPV(*v), lane by lane: the same steps on whole vectors. */
static inline __attribute__((always_inline)) void vexp(vreal *v)
{
#ifdef DP_REAL_DOUBLE
    for (int l = 0; l < AV; l++)
        (*v)[l] = exp((*v)[l]);
#else
    const vreal x0 = *v, lo = (vreal){0} - 87.0f, hi = (vreal){0} + 88.0f;
    vreal x = VSEL(x0 > lo, x0, lo); /* NaN and -inf -> -87: the conversion below is defined */
    x = VSEL(x < hi, x, hi);
    vreal n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
    vreal r = x - n * 0.693359375f + n * 2.12194440e-4f;
    vreal p = r * 1.9875691500E-4f + 1.3981999507E-3f;
    p = p * r + 8.3334519073E-3f;
    p = p * r + 4.1665795894E-2f;
    p = p * r + 1.6666665459E-1f;
    p = p * r + 5.0000001201E-1f;
    p = p * r * r + r + 1.0f;
    vint e = (__builtin_convertvector(n, vint) + 127) << 23;
    vreal y = p * (vreal)e;
    *v = VSEL(x0 != x0, x0, y); /* NaN stays NaN */
#endif
}

/* Horizontal sum and maximum of a vector, by halves (log2 AV dependent steps). */
typedef real vreal_h __attribute__((vector_size(32)));
typedef real vreal_q __attribute__((vector_size(16)));
typedef lane_int vint_h __attribute__((vector_size(32)));
typedef lane_int vint_q __attribute__((vector_size(16)));
static inline __attribute__((always_inline)) real vhsum(const vreal *v)
{
    vreal_h a, b;
    memcpy(&a, v, sizeof a);
    memcpy(&b, (const char *)v + sizeof a, sizeof b);
    a += b;
    vreal_q c, d;
    memcpy(&c, &a, sizeof c);
    memcpy(&d, (const char *)&a + sizeof c, sizeof d);
    c += d;
    real s = 0;
    for (int l = 0; l < (int)(sizeof c / sizeof(real)); l++)
        s += c[l];
    return s;
}

static inline __attribute__((always_inline)) real vhmax(const vreal *v)
{
    vreal_h a, b;
    memcpy(&a, v, sizeof a);
    memcpy(&b, (const char *)v + sizeof a, sizeof b);
    vint_h mh = a > b;
    a = (vreal_h)(((vint_h)a & mh) | ((vint_h)b & ~mh));
    vreal_q c, d;
    memcpy(&c, &a, sizeof c);
    memcpy(&d, (const char *)&a + sizeof c, sizeof d);
    vint_q mq = c > d;
    c = (vreal_q)(((vint_q)c & mq) | ((vint_q)d & ~mq));
    real m = c[0];
    for (int l = 1; l < (int)(sizeof c / sizeof(real)); l++)
        m = c[l] > m ? c[l] : m;
    return m;
}

/* Lanes [0, n) of a vector from p (n <= AV), the others `fill`. */
static inline __attribute__((always_inline)) void vload_part(vreal *v, const real *p, int n,
                                                             real fill)
{
    if (n >= AV) {
        memcpy(v, p, sizeof *v);
        return;
    }
    for (int l = 0; l < AV; l++)
        (*v)[l] = l < n ? p[l] : fill;
}

static inline __attribute__((always_inline)) void vstore_part(real *p, const vreal *v, int n)
{
    if (n >= AV)
        memcpy(p, v, sizeof *v);
    else
        for (int l = 0; l < n; l++)
            p[l] = (*v)[l];
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

int dp__cpu_gemm_threads(int m, int n, int k, int nt)
{
    /* Below 32 rows per thread or 4 M multiply-adds the fork, join and the packing each
     * block repeats cost more than the second thread gains. */
    return nt <= 1 || m < 32 * nt || (double)m * n * k < 4e6 ? 1 : nt;
}

void dp__cpu_gemm(bool ta, bool tb, int m, int n, int k, real alpha, const real *a, int lda,
                  const real *b, int ldb, real beta, real *c, int ldc)
{
    int nt = omp_get_max_threads();
    /* Rows per block: a multiple of 16 so each block's kernel sees whole micro-panels. */
    if (omp_in_parallel() || dp__cpu_gemm_threads(m, n, k, nt) == 1) {
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

/* Columns [c0, c1) of C handled by the calling thread of a parallel region: whole
 * 64-byte lines where C allows, so that threads do not share cache lines. */
static void col_range(int64_t C, int64_t *c0, int64_t *c1)
{
    int t = omp_get_thread_num(), T = omp_get_num_threads();
    const int64_t q = 64 / (int64_t)sizeof(real);
    if (C >= q * T) {
        int64_t lines = (C + q - 1) / q;
        *c0 = lines * t / T * q;
        *c1 = t + 1 == T ? C : lines * (t + 1) / T * q;
        return;
    }
    *c0 = C * t / T;
    *c1 = C * (t + 1) / T;
}

/* Rows [n0, n1) of N handled by the calling thread of a parallel region. */
static void thread_range(int64_t N, int64_t *n0, int64_t *n1)
{
    int t = omp_get_thread_num(), T = omp_get_num_threads();
    *n0 = N * t / T;
    *n1 = N * (t + 1) / T;
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

void dp__cpu_norm_fwd(enum dp_norm_kind kind, real *out, real *stats, const real *inp,
                      const real *w, const real *b, int64_t N, int64_t C)
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

void dp__cpu_norm_bwd(enum dp_norm_kind kind, real *dinp, real *dw, real *db, const real *dout,
                      const real *inp, const real *w, const real *stats, int64_t N, int64_t C)
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

void dp__cpu_bias_fill(real *out, const real *bias, int64_t N, int64_t C)
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

void dp__cpu_bias_grad(real *db, const real *dout, int64_t N, int64_t C)
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

void dp__cpu_residual(real *out, const real *a, const real *b, const real *bias, int64_t N,
                      int64_t C)
{
#pragma omp parallel
    {
        int64_t n0, n1;
        thread_range(N, &n0, &n1);
        residual_rows(out, a, b, bias, n0, n1, C);
    }
}

void dp__cpu_add_inplace(real *y, const real *x, int64_t n)
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

void dp__cpu_act_bwd(enum dp_ffn_kind kind, real *dinp, real *dbias, const real *dout,
                     const real *inp, int64_t N, int64_t F)
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

/* Lane indices 0 .. AV-1. */
static inline __attribute__((always_inline)) void viota(vint *v)
{
    for (int l = 0; l < AV; l++)
        (*v)[l] = l;
}

/* Row t of the causal softmax over whole vectors [0, je), je = t + 1 rounded up to a
 * vector, the lanes past t masked; `full`: T is a whole number of vectors, so every
 * vector of the row can be loaded and stored as a whole. */
static inline __attribute__((always_inline)) void softmax_row(real *row, int64_t T, int64_t t,
                                                              const vint *iota, bool full)
{
    const int64_t je = (t + AV) / AV * AV;
    vreal vm = (vreal){0} - R_INF;
    for (int64_t j = 0; j < je; j += AV) {
        vreal x;
        if (full)
            memcpy(&x, row + j, sizeof x);
        else
            vload_part(&x, row + j, (int)(T - j), -R_INF);
        x = VSEL(*iota + (lane_int)(j - t) <= 0, x, (vreal){0} - R_INF);
        vm = VSEL(x > vm, x, vm);
    }
    const real mx = vhmax(&vm);
    vreal vs = {0};
    for (int64_t j = 0; j < je; j += AV) {
        vreal x;
        if (full)
            memcpy(&x, row + j, sizeof x);
        else
            vload_part(&x, row + j, (int)(T - j), 0);
        x -= mx;
        vexp(&x);
        x = VSEL(*iota + (lane_int)(j - t) <= 0, x, (vreal){0});
        vs += x;
        if (full)
            memcpy(row + j, &x, sizeof x);
        else
            vstore_part(row + j, &x, (int)(T - j));
    }
    const real inv = (real)1 / vhsum(&vs);
    for (int64_t j = 0; j < je; j += AV) {
        vreal x;
        if (full) {
            memcpy(&x, row + j, sizeof x);
            x *= inv;
            memcpy(row + j, &x, sizeof x);
        } else {
            vload_part(&x, row + j, (int)(T - j), 0);
            x *= inv;
            vstore_part(row + j, &x, (int)(T - j));
        }
    }
    if (je < T)
        memset(row + je, 0, (size_t)(T - je) * sizeof(real));
}

/* Row-wise causal softmax of a T x T block in place (entries above the diagonal -> 0;
 * they are never read, so they may hold anything on entry). Rows are 1 to T long and
 * run over whole vectors with masked lanes: scalar remainders would cost as much as
 * the vector loops. */
DP_CLONES static void softmax_causal(real *P, int64_t T)
{
    vint iota;
    viota(&iota);
    if (T % AV == 0)
        for (int64_t t = 0; t < T; t++)
            softmax_row(P + t * T, T, t, &iota, true);
    else
        for (int64_t t = 0; t < T; t++)
            softmax_row(P + t * T, T, t, &iota, false);
}

/* Softmax backward on a causal T x T block: dS = P * (dP - sum_j dP P), in place in dP
 * (entries above the diagonal of dP are not read and become 0). */
DP_CLONES static void softmax_causal_bwd(real *dP, const real *P, int64_t T)
{
    vint iota;
    viota(&iota);
    for (int64_t t = 0; t < T; t++) {
        const real *pr = P + t * T;
        real *dr = dP + t * T;
        const int64_t je = t + 1;
        vreal vs = {0};
        for (int64_t u = 0; u < je; u += AV) {
            vreal p, d;
            vload_part(&p, pr + u, (int)(je - u), 0);
            vload_part(&d, dr + u, (int)(je - u), 0);
            vs += p * d;
        }
        const real s = vhsum(&vs);
        int64_t u = 0;
        for (; u < je; u += AV) {
            vreal p, d;
            vload_part(&p, pr + u, (int)(T - u), 0);
            vload_part(&d, dr + u, (int)(T - u), 0);
            d = p * (d - s);
            d = VSEL(iota + (lane_int)(u - t) <= 0, d, (vreal){0});
            vstore_part(dr + u, &d, (int)(T - u));
        }
        if (u < T)
            memset(dr + u, 0, (size_t)(T - u) * sizeof(real));
    }
}

/*
 * Heads wider than ATT_DMAX: OpenBLAS per (sequence, head), the products cut into row
 * blocks of ATT_BS:
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

static void attn_fwd_blas(real *ctx, real *probs, const real *qkv, int64_t B, int64_t T, int a,
                          int g, int d)
{
    const int64_t qd = (int64_t)a * d, kvd = (int64_t)g * d, ld = qd + 2 * kvd;
    const int per = a / g;
    const real scale = (real)1 / R_SQRT((real)d);
    /* The per-head products write strided column blocks; OpenBLAS would clear each one
     * row by row for beta = 0, so clear the whole buffer once and accumulate. */
    if (ctx)
        memset(ctx, 0, (size_t)(B * T * qd) * sizeof(real));
#pragma omp parallel for collapse(2) schedule(static)
    for (int64_t b = 0; b < B; b++)
        for (int h = 0; h < a; h++) {
            const real *q = qkv + b * T * ld + (int64_t)h * d;
            const real *k = qkv + b * T * ld + qd + (int64_t)(h / per) * d;
            const real *v = k + kvd;
            real *P = probs + (b * a + h) * T * T;
            probs_one(P, q, k, ld, T, d, scale);
            if (!ctx)
                continue; /* probabilities only */
            real *c = ctx + b * T * qd + (int64_t)h * d;
            for (int64_t r0 = 0; r0 < T; r0 += ATT_BS) {
                int64_t rows = T - r0 < ATT_BS ? T - r0 : ATT_BS, cols = r0 + rows;
                dp__cpu_gemm1(false, false, (int)rows, d, (int)cols, 1, P + r0 * T, (int)T, v,
                              (int)ld, 1, c + r0 * qd, (int)qd);
            }
        }
}

static void attn_bwd_blas(real *dqkv, real *dprobs, const real *dctx, const real *qkv,
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

/*
 * Causal attention at small head sizes (T = 128, d = 32 in the benchmark) is dominated by
 * the cost of BLAS calls on 32 x 32 tiles and by packing, so heads up to ATT_DMAX wide
 * run these kernels instead: every product of a head is a sum of rank-1 updates of an
 * ATT_RB x (1 or 2) AV register block (AV = one 64-byte vector: 16 floats, 8 doubles).
 * Scores x y^T take y in chunks of ATT_KB keys, transposed into a scratch array on the
 * stack; the products with P or P^T read their right-hand operand in place when d is a
 * whole number of vectors, else chunk by chunk padded to whole vectors in the scratch.
 * Only blocks that touch the causal triangle are computed; what they compute above the
 * diagonal is never read (the softmax and its backward write zeros there). Per head the
 * sums run in a fixed order, so results do not depend on the thread count. Wider heads
 * use OpenBLAS (attn_*_blas below).
 */
#define ATT_KB   32  /* keys (or queries) per scratch chunk; a multiple of ATT_RB and AV */
#define ATT_RB   8   /* rows of a register block */
#define ATT_DMAX 256 /* widest head for these kernels: scratch ATT_KB x ATT_DMAX reals */

/*
 * The register blocks: for r < ATT_RB and one or two vectors (nc <= AV or 2 AV columns),
 *   acc[r] = sum_{k < nk} a[r ars + k aks] y[k ldy + (0 .. AV or 2 AV)]
 *   c[r ldc + (0 .. nc)] = (add ? c : 0) + scale acc[r]
 * All ATT_RB rows of a and the whole vectors of each y row must be readable. (Plain
 * arrays of vectors indexed by constants, which the compilers keep in registers.)
 */
/* c[0 .. n) = (add ? c : 0) + scale acc (n <= AV lanes; n >= AV: the whole vector). */
static inline __attribute__((always_inline)) void att_put(real *c, const vreal *acc, int n,
                                                          real scale, bool add)
{
    vreal out = *acc * scale;
    if (n >= AV) {
        if (add) {
            vreal old;
            memcpy(&old, c, sizeof old);
            out += old;
        }
        memcpy(c, &out, sizeof out);
    } else {
        for (int l = 0; l < n; l++)
            c[l] = (add ? c[l] : 0) + out[l];
    }
}

static inline __attribute__((always_inline)) void
att_block1(const real *a, int64_t ars, int64_t aks, const real *y, int64_t ldy, int nk, real *c,
           int64_t ldc, int nc, real scale, bool add)
{
    vreal acc[ATT_RB];
    for (int r = 0; r < ATT_RB; r++)
        acc[r] = (vreal){0};
    for (int k = 0; k < nk; k++) {
        vreal yv;
        memcpy(&yv, y + k * ldy, sizeof yv);
        for (int r = 0; r < ATT_RB; r++)
            acc[r] += a[r * ars + k * aks] * yv;
    }
    for (int r = 0; r < ATT_RB; r++)
        att_put(c + r * ldc, &acc[r], nc, scale, add);
}

static inline __attribute__((always_inline)) void
att_block2(const real *a, int64_t ars, int64_t aks, const real *y, int64_t ldy, int nk, real *c,
           int64_t ldc, int nc, real scale, bool add)
{
    vreal lo[ATT_RB], hi[ATT_RB];
    for (int r = 0; r < ATT_RB; r++)
        lo[r] = hi[r] = (vreal){0};
    for (int k = 0; k < nk; k++) {
        vreal y0, y1;
        memcpy(&y0, y + k * ldy, sizeof y0);
        memcpy(&y1, y + k * ldy + AV, sizeof y1);
        for (int r = 0; r < ATT_RB; r++) {
            const real ar = a[r * ars + k * aks];
            lo[r] += ar * y0;
            hi[r] += ar * y1;
        }
    }
    for (int r = 0; r < ATT_RB; r++) {
        att_put(c + r * ldc, &lo[r], AV, scale, add);
        att_put(c + r * ldc + AV, &hi[r], nc - AV, scale, add);
    }
}

/* One row, nc <= 2 AV columns, vector by vector. */
static inline __attribute__((always_inline)) void att_row(const real *a, int64_t aks, const real *y,
                                                          int64_t ldy, int nk, real *c, int nc,
                                                          real scale, bool add)
{
    for (int v = 0; v * AV < nc; v++) {
        vreal acc = {0};
        for (int k = 0; k < nk; k++) {
            vreal yv;
            memcpy(&yv, y + k * ldy + v * AV, sizeof yv);
            acc += a[k * aks] * yv;
        }
        att_put(c + v * AV, &acc, nc - v * AV, scale, add);
    }
}

/* nr <= ATT_RB rows and nc <= 2 AV columns: a register block, or row by row at the edges. */
static inline __attribute__((always_inline)) void att_rows(int nr, const real *a, int64_t ars,
                                                           int64_t aks, const real *y, int64_t ldy,
                                                           int nk, real *c, int64_t ldc, int nc,
                                                           real scale, bool add)
{
    if (nr == ATT_RB && nc > AV)
        att_block2(a, ars, aks, y, ldy, nk, c, ldc, nc, scale, add);
    else if (nr == ATT_RB)
        att_block1(a, ars, aks, y, ldy, nk, c, ldc, nc, scale, add);
    else
        for (int r = 0; r < nr; r++)
            att_row(a + r * ars, aks, y, ldy, nk, c + r * ldc, nc, scale, add);
}

static inline int imin(int64_t a, int64_t b)
{
    return (int)(a < b ? a : b);
}

/* sc [d][ATT_KB] = y^T for a whole chunk (kc = ATT_KB keys) of y [kc][d] (row stride ldy)
 * in 16 x 16 tiles of shuffles (floats, d a multiple of 16); returns false where it does
 * not apply, and the caller copies element by element. */
#if !defined(DP_REAL_DOUBLE) && defined(__has_builtin)
#if __has_builtin(__builtin_shufflevector)
#define ATT_TILES 1
#endif
#endif
#ifdef ATT_TILES
#define SHUF __builtin_shufflevector
/* In place: m[r] lane l <- m[l] lane r, by swapping off-diagonal blocks of 8, 4, 2, 1. */
static inline __attribute__((always_inline)) void transpose16(vreal *m)
{
    for (int r = 0; r < 8; r++) {
        vreal a = m[r], b = m[r + 8];
        m[r] = SHUF(a, b, 0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23);
        m[r + 8] = SHUF(a, b, 8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31);
    }
    for (int q = 0; q < 16; q += 8)
        for (int r = q; r < q + 4; r++) {
            vreal a = m[r], b = m[r + 4];
            m[r] = SHUF(a, b, 0, 1, 2, 3, 16, 17, 18, 19, 8, 9, 10, 11, 24, 25, 26, 27);
            m[r + 4] = SHUF(a, b, 4, 5, 6, 7, 20, 21, 22, 23, 12, 13, 14, 15, 28, 29, 30, 31);
        }
    for (int q = 0; q < 16; q += 4)
        for (int r = q; r < q + 2; r++) {
            vreal a = m[r], b = m[r + 2];
            m[r] = SHUF(a, b, 0, 1, 16, 17, 4, 5, 20, 21, 8, 9, 24, 25, 12, 13, 28, 29);
            m[r + 2] = SHUF(a, b, 2, 3, 18, 19, 6, 7, 22, 23, 10, 11, 26, 27, 14, 15, 30, 31);
        }
    for (int r = 0; r < 16; r += 2) {
        vreal a = m[r], b = m[r + 1];
        m[r] = SHUF(a, b, 0, 16, 2, 18, 4, 20, 6, 22, 8, 24, 10, 26, 12, 28, 14, 30);
        m[r + 1] = SHUF(a, b, 1, 17, 3, 19, 5, 21, 7, 23, 9, 25, 11, 27, 13, 29, 15, 31);
    }
}
#undef SHUF
#endif

static inline __attribute__((always_inline)) bool att_transpose_tiles(real *sc, const real *y,
                                                                      int64_t ldy, int kc, int d)
{
#ifdef ATT_TILES
    if (kc != ATT_KB || d % 16 != 0)
        return false;
    for (int j0 = 0; j0 < ATT_KB; j0 += 16)
        for (int i0 = 0; i0 < d; i0 += 16) {
            vreal m[16];
            for (int r = 0; r < 16; r++)
                memcpy(&m[r], y + (j0 + r) * ldy + i0, sizeof m[r]);
            transpose16(m);
            for (int r = 0; r < 16; r++)
                memcpy(sc + (i0 + r) * ATT_KB + j0, &m[r], sizeof m[r]);
        }
    return true;
#else
    (void)sc, (void)y, (void)ldy, (void)kc, (void)d;
    return false;
#endif
}

/* Causal blocks of S = scale x y^T into S [T][T] (row stride T): x, y [T][d] with row
 * strides ldx, ldy. Chunk by chunk of keys, y^T goes to the scratch ([d][ATT_KB]). */
static inline __attribute__((always_inline)) void att_scores(real *S, const real *x, int64_t ldx,
                                                             const real *y, int64_t ldy, int64_t T,
                                                             int d, real scale, real *sc)
{
    for (int64_t c0 = 0; c0 < T; c0 += ATT_KB) {
        const int kc = imin(ATT_KB, T - c0);
        if (!att_transpose_tiles(sc, y + c0 * ldy, ldy, kc, d))
            for (int i = 0; i < d; i++)
                for (int j = 0; j < ATT_KB; j++)
                    sc[i * ATT_KB + j] = j < kc ? y[(c0 + j) * ldy + i] : 0;
        for (int64_t t0 = c0; t0 < T; t0 += ATT_RB) {
            const int nr = imin(ATT_RB, T - t0);
            /* two vectors of keys at a time, one where the second would lie wholly above
             * the diagonal */
            for (int jv = 0; jv < kc && c0 + jv < t0 + nr; jv += 2 * AV) {
                const int nc = imin(c0 + jv + AV < t0 + nr ? 2 * AV : AV, kc - jv);
                att_rows(nr, x + t0 * ldx, ldx, 1, sc + jv, ATT_KB, d, S + t0 * T + c0 + jv, T, nc,
                         scale, false);
            }
        }
    }
}

/* o [T][d] (row stride ldo) = (add ? o : 0) + scale P y for a causal P [T][T] (zeros above
 * the diagonal), y [T][d] (row stride ldy). Chunk by chunk of keys, y padded to dp columns
 * in the scratch ([ATT_KB][dp]); the first chunk writes o, the others add. */
static inline __attribute__((always_inline)) void att_apply(real *o, int64_t ldo, const real *P,
                                                            const real *y, int64_t ldy, int64_t T,
                                                            int d, real scale, bool add, real *sc)
{
    /* Whole vectors of d: read y in place, all keys at once; else chunk by chunk through
     * the padded copy. */
    const bool direct = d % AV == 0;
    const int dp = (d + 2 * AV - 1) / (2 * AV) * (2 * AV);
    const int64_t kb = direct ? T : ATT_KB;
    for (int64_t c0 = 0; c0 < T; c0 += kb) {
        const int kc = imin(kb, T - c0);
        const real *yc = y + c0 * ldy;
        int64_t ldyc = ldy;
        if (!direct) {
            for (int j = 0; j < kc; j++)
                for (int i = 0; i < dp; i++)
                    sc[j * dp + i] = i < d ? yc[j * ldy + i] : 0;
            yc = sc;
            ldyc = dp;
        }
        for (int64_t t0 = c0; t0 < T; t0 += ATT_RB) {
            const int nr = imin(ATT_RB, T - t0), nk = imin(kc, t0 + nr - c0);
            for (int dv = 0; dv < d; dv += 2 * AV)
                att_rows(nr, P + t0 * T + c0, T, 1, yc + dv, ldyc, nk, o + t0 * ldo + dv, ldo,
                         imin(2 * AV, d - dv), scale, add || c0 > 0);
        }
    }
}

/* z [T][d] (row stride ldz) = (add ? z : 0) + scale P^T x for a causal P [T][T], x [T][d]
 * (row stride ldx): z[j] += scale sum_{t >= j} P[t][j] x[t]. All queries at once when x
 * is read in place, else chunk by chunk of queries through the padded scratch. */
static inline __attribute__((always_inline)) void att_apply_t(real *z, int64_t ldz, const real *P,
                                                              const real *x, int64_t ldx, int64_t T,
                                                              int d, real scale, bool add, real *sc)
{
    const bool direct = d % AV == 0;
    const int dp = (d + 2 * AV - 1) / (2 * AV) * (2 * AV);
    const int64_t kb = direct ? T : ATT_KB;
    for (int64_t c0 = 0; c0 < T; c0 += kb) {
        const int kc = imin(kb, T - c0);
        const real *xc = x + c0 * ldx;
        int64_t ldxc = ldx;
        if (!direct) {
            for (int t = 0; t < kc; t++)
                for (int i = 0; i < dp; i++)
                    sc[t * dp + i] = i < d ? xc[t * ldx + i] : 0;
            xc = sc;
            ldxc = dp;
        }
        /* keys j0.. of a block see the queries t >= j0 of this chunk; the chunk holding
         * j0 is their first (written unless add), the later ones add */
        for (int64_t j0 = 0; j0 < c0 + kc; j0 += ATT_RB) {
            const int nr = imin(ATT_RB, T - j0);
            const int tt0 = j0 > c0 ? (int)(j0 - c0) : 0;
            for (int dv = 0; dv < d; dv += 2 * AV)
                att_rows(nr, P + (c0 + tt0) * T + j0, 1, T, xc + tt0 * ldxc + dv, ldxc, kc - tt0,
                         z + j0 * ldz + dv, ldz, imin(2 * AV, d - dv), scale, add || j0 < c0);
        }
    }
}

/* One (sequence, head): P = softmax(scale q k^T) (causal), ctx = P v unless ctx is NULL. */
DP_CLONES static void attn_fwd_head(real *ctx, int64_t ldc, real *P, const real *q, const real *k,
                                    const real *v, int64_t ld, int64_t T, int d, real scale)
{
    real sc[ATT_KB * ATT_DMAX];
    att_scores(P, q, ld, k, ld, T, d, scale, sc);
    softmax_causal(P, T);
    if (ctx)
        att_apply(ctx, ldc, P, v, ld, T, d, 1, false, sc);
}

/* One (sequence, kv head) and its `per` q heads (GQA): dq written, dk and dv written by
 * the first q head and summed over the others. q, k, v, dq, dk, dv have row stride ld; dctx and its
 * head offsets stride qd; P per q head [T][T]; dP one [T][T] scratch, reused by each q head. */
DP_CLONES static void attn_bwd_group(real *dq, real *dk, real *dv, real *dP, const real *dctx,
                                     int64_t qd, const real *q, const real *k, const real *v,
                                     const real *P, int64_t ld, int64_t T, int d, int per,
                                     real scale)
{
    real sc[ATT_KB * ATT_DMAX];
    for (int j = 0; j < per; j++) {
        const int64_t off = (int64_t)j * d, po = (int64_t)j * T * T;
        const real *dc = dctx + off, *qh = q + off, *Ph = P + po;
        real *dPh = dP;
        att_scores(dPh, dc, qd, v, ld, T, d, 1, sc);                 /* dP = dctx v^T */
        att_apply_t(dv, ld, Ph, dc, qd, T, d, 1, j > 0, sc);         /* dv += P^T dctx */
        softmax_causal_bwd(dPh, Ph, T);                              /* dS, in place */
        att_apply(dq + off, ld, dPh, k, ld, T, d, scale, false, sc); /* dq = scale dS k */
        att_apply_t(dk, ld, dPh, qh, ld, T, d, scale, j > 0, sc);    /* dk += scale dS^T q */
    }
}

void dp__cpu_attn_probs(real *probs, const real *qkv, int64_t B, int64_t T, int a, int g, int d)
{
    dp__cpu_attn_fwd(NULL, probs, qkv, B, T, a, g, d);
}

void dp__cpu_attn_fwd(real *ctx, real *probs, const real *qkv, int64_t B, int64_t T, int a, int g,
                      int d)
{
    if (d > ATT_DMAX) {
        attn_fwd_blas(ctx, probs, qkv, B, T, a, g, d);
        return;
    }
    const int64_t qd = (int64_t)a * d, kvd = (int64_t)g * d, ld = qd + 2 * kvd;
    const int per = a / g;
    const real scale = (real)1 / R_SQRT((real)d);
#pragma omp parallel for collapse(2) schedule(static)
    for (int64_t b = 0; b < B; b++)
        for (int h = 0; h < a; h++) {
            const real *q = qkv + b * T * ld + (int64_t)h * d;
            const real *k = qkv + b * T * ld + qd + (int64_t)(h / per) * d;
            real *c = ctx ? ctx + b * T * qd + (int64_t)h * d : NULL;
            attn_fwd_head(c, qd, probs + (b * a + h) * T * T, q, k, k + kvd, ld, T, d, scale);
        }
}

void dp__cpu_attn_bwd(real *dqkv, real *dprobs, const real *dctx, const real *qkv,
                      const real *probs, int64_t B, int64_t T, int a, int g, int d)
{
    if (d > ATT_DMAX) {
        attn_bwd_blas(dqkv, dprobs, dctx, qkv, probs, B, T, a, g, d);
        return;
    }
    const int64_t qd = (int64_t)a * d, kvd = (int64_t)g * d, ld = qd + 2 * kvd;
    const int per = a / g;
    const real scale = (real)1 / R_SQRT((real)d);
    /* One task per (sequence, kv head): the q heads of a group add into the same dk, dv.
     * dP is needed only within a head, so each thread reuses one [T][T] slice of dprobs,
     * which stays in cache (with more threads than heads, each task its own slice). */
#pragma omp parallel
    {
        const int tid = omp_get_thread_num(), nth = omp_get_num_threads();
#pragma omp for collapse(2) schedule(static)
        for (int64_t b = 0; b < B; b++)
            for (int kh = 0; kh < g; kh++) {
                const int64_t row = b * T * ld, h0 = (int64_t)kh * per;
                const int64_t koff = qd + (int64_t)kh * d;
                const int64_t slice = nth <= B * a ? tid : b * a + h0;
                attn_bwd_group(dqkv + row + h0 * d, dqkv + row + koff, dqkv + row + koff + kvd,
                               dprobs + slice * T * T, dctx + b * T * qd + h0 * d, qd,
                               qkv + row + h0 * d, qkv + row + koff, qkv + row + koff + kvd,
                               probs + (b * a + h0) * T * T, ld, T, d, per, scale);
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

/* Rows [n0, n1) of the three passes, over the `valid` (unpadded) local columns. */
DP_CLONES static void ce_max_rows(real *rowmax, const real *logits, int64_t n0, int64_t n1,
                                  int64_t nv, int64_t valid)
{
    for (int64_t n = n0; n < n1; n++) {
        const real *restrict l = logits + n * nv;
        real mx = -R_INF;
#pragma omp simd reduction(max : mx)
        for (int64_t j = 0; j < valid; j++)
            mx = l[j] > mx ? l[j] : mx;
        rowmax[n] = mx;
    }
}

DP_CLONES static void ce_sums_rows(real *sums, const real *logits, const real *gmax,
                                   const int32_t *tgt, int64_t n0, int64_t n1, int64_t N,
                                   int64_t nv, int64_t v0, int64_t valid)
{
    for (int64_t n = n0; n < n1; n++) {
        const real *restrict l = logits + n * nv;
        const int64_t t = tgt[n] - v0;
        const real m = gmax[n];
        sums[n] = (t >= 0 && t < nv) ? l[t] : 0;
        real s = 0;
#pragma omp simd reduction(+ : s)
        for (int64_t j = 0; j < valid; j++)
            s += R_EXPV(l[j] - m);
        sums[N + n] = s;
    }
}

DP_CLONES static void ce_grad_rows(real *logits, real *loss, const real *gmax, const real *sums,
                                   const int32_t *tgt, int64_t n0, int64_t n1, int64_t N,
                                   int64_t nv, int64_t v0, int64_t valid, real dloss)
{
    for (int64_t n = n0; n < n1; n++) {
        real *restrict l = logits + n * nv;
        const real se = sums[N + n], m = gmax[n];
        loss[n] = R_LOG(se) + m - sums[n];
        const real inv = (real)1 / se;
#pragma omp simd
        for (int64_t j = 0; j < valid; j++)
            l[j] = dloss * (R_EXPV(l[j] - m) * inv);
        const int64_t t = tgt[n] - v0;
        if (t >= 0 && t < valid)
            l[t] -= dloss;
        for (int64_t j = valid; j < nv; j++)
            l[j] = 0;
    }
}

static int64_t ce_valid(int64_t nv, int64_t v0, int64_t vocab)
{
    int64_t valid = vocab - v0 < nv ? vocab - v0 : nv; /* padded columns are ignored */
    return valid < 0 ? 0 : valid;
}

void dp__cpu_ce_max(real *rowmax, const real *logits, int64_t N, int64_t nv, int64_t v0,
                    int64_t vocab)
{
    const int64_t valid = ce_valid(nv, v0, vocab);
#pragma omp parallel
    {
        int64_t n0, n1;
        thread_range(N, &n0, &n1);
        ce_max_rows(rowmax, logits, n0, n1, nv, valid);
    }
}

void dp__cpu_ce_sums(real *sums, const real *logits, const real *gmax, const int32_t *tgt,
                     int64_t N, int64_t nv, int64_t v0, int64_t vocab)
{
    const int64_t valid = ce_valid(nv, v0, vocab);
#pragma omp parallel
    {
        int64_t n0, n1;
        thread_range(N, &n0, &n1);
        ce_sums_rows(sums, logits, gmax, tgt, n0, n1, N, nv, v0, valid);
    }
}

void dp__cpu_ce_grad(real *logits, real *loss, const real *gmax, const real *sums,
                     const int32_t *tgt, int64_t N, int64_t nv, int64_t v0, int64_t vocab,
                     real dloss)
{
    const int64_t valid = ce_valid(nv, v0, vocab);
#pragma omp parallel
    {
        int64_t n0, n1;
        thread_range(N, &n0, &n1);
        ce_grad_rows(logits, loss, gmax, sums, tgt, n0, n1, N, nv, v0, valid, dloss);
    }
}

/* ------------------------------------------------------------------ reductions */

DP_CLONES static double sum_range(const real *x, int64_t n, bool square)
{
    double s = 0;
    if (square) {
#pragma omp simd reduction(+ : s)
        for (int64_t i = 0; i < n; i++)
            s += (double)x[i] * (double)x[i];
    } else {
#pragma omp simd reduction(+ : s)
        for (int64_t i = 0; i < n; i++)
            s += (double)x[i];
    }
    return s;
}

static double reduce_sum(const real *x, int64_t n, bool square)
{
    if (omp_get_max_threads() <= 1 || omp_in_parallel() || n < 65536)
        return sum_range(x, n, square);
    double part[MAX_THREADS] = {0};
    int used = 1;
#pragma omp parallel
    {
        int t = omp_get_thread_num(), T = omp_get_num_threads();
        if (T > MAX_THREADS)
            T = MAX_THREADS;
        if (t < T) {
            int64_t i0 = n * t / T, i1 = n * (t + 1) / T;
            part[t] = sum_range(x + i0, i1 - i0, square);
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

/* Vectorised: kernels.c is built without errno, so sqrt is one instruction. */
DP_CLONES static void adamw_range(real *restrict p, const real *restrict grad, real *restrict m,
                                  real *restrict v, int64_t n, real rlr, real b1, real b2,
                                  real reps, real rwd, real ibc1, real ibc2, real gs)
{
#pragma omp simd
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
