/*
 * CPU backend, parameters: the seeded initialisation fill, the host sums
 * behind the loss and the gradient norm, and AdamW (Loshchilov & Hutter
 * 2019), vectorised (the file is built without errno, so sqrt is one
 * instruction).
 */
#include "cpu.h"
#include "cpu_simd.h"
#include "executor/internal.h"

#include <math.h>
#include <omp.h>
#include <string.h>

/* ------------------------------------------------------------------ init */

void dp__cpu_init_fill(struct dp_backend *be, real *dst, int64_t rows, int64_t cols, int64_t gcols,
                       int64_t r0, int64_t c0, uint64_t seed, uint64_t key, double std,
                       double value)
{
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < rows; i++)
        for (int64_t j = 0; j < cols; j++) {
            uint64_t idx = (uint64_t)((r0 + i) * gcols + c0 + j);
            dst[i * cols + j] = (real)(std > 0 ? std * dp__rng_normal(seed, key, idx) : value);
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

double dp__cpu_sum(struct dp_backend *be, const real *x, int64_t n)
{
    return reduce_sum(x, n, false);
}

double dp__cpu_sumsq(struct dp_backend *be, const real *x, int64_t n)
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

void dp__cpu_adamw(struct dp_backend *be, real *p, const real *grad, real *m, real *v, int64_t n,
                   double lr, double beta1, double beta2, double eps, double wd, double bc1,
                   double bc2, double gscale)
{
    const real b1 = (real)beta1, b2 = (real)beta2, gs = (real)gscale;
    const real rlr = (real)lr, reps = (real)eps, rwd = (real)wd;
    const real ibc1 = (real)(1.0 / bc1), ibc2 = (real)(1.0 / bc2);
    FOR_BLOCKS(n, adamw_range(p + i0, grad + i0, m + i0, v + i0, cnt, rlr, b1, b2, reps, rwd, ibc1,
                              ibc2, gs));
}
