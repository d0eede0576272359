/*
 * The CPU kernels' shared vocabulary (cpu_*.c): the element type's libm
 * names, the multiversioned clones of hot loops, a vectorisable exp, 64-byte
 * vectors with lane selection, horizontal sums and partial loads, and how a
 * parallel region splits rows, columns and blocks over its threads. Header
 * only; nothing here touches MPI or BLAS.
 *
 * Determinism: every reduction that produces a parameter gradient is split
 * by columns over the threads (col_range) and runs over rows in order, so
 * gradients do not depend on the thread count. Host sums (loss, norm) add
 * per-thread partials in thread order.
 */
#ifndef DPLAN_EXECUTOR_CPU_SIMD_H
#define DPLAN_EXECUTOR_CPU_SIMD_H

#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <string.h>

#include "executor/real.h"

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

/* Columns [c0, c1) of C handled by the calling thread of a parallel region: whole
 * 64-byte lines where C allows, so that threads do not share cache lines. */
static inline void col_range(int64_t C, int64_t *c0, int64_t *c1)
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
static inline void thread_range(int64_t N, int64_t *n0, int64_t *n1)
{
    int t = omp_get_thread_num(), T = omp_get_num_threads();
    *n0 = N * t / T;
    *n1 = N * (t + 1) / T;
}

/* Split [0, n) over the threads in blocks of 4096 elements (whole vectors). */
#define FOR_BLOCKS(n, body)                                                                        \
    _Pragma("omp parallel for schedule(static)") for (int64_t b0_ = 0; b0_ < (n); b0_ += 4096)     \
    {                                                                                              \
        int64_t i0 = b0_, cnt = (n)-b0_ < 4096 ? (n)-b0_ : 4096;                                   \
        body;                                                                                      \
    }

#endif
