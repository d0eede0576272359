/*
 * The CPU backend's FP8 GEMM (backend.h gemm_fp8): an exact emulation of Transformer
 * Engine's current-scaling recipe (Float8CurrentScaling) on fp32 buffers. Each operand's
 * amax is taken over the elements the GEMM reads, its scale is fp8_max / amax
 * (round.h dp__fp8_scale), every element x becomes fp8(x s) (round to nearest even,
 * saturating: round.h dp__round_e4m3 / dp__round_e5m2) in a packed scratch copy, and the
 * fp32 GEMM of the two copies is descaled by alpha / (s_A s_B). The product of two FP8
 * values has at most 4 + 4 significant bits, so every product is exact in fp32 and only
 * the fp32 accumulation order differs from a tensor core's (Hopper's FP8 MMA keeps fewer
 * accumulator bits than fp32: DeepSeek-V3 report, 2024, Sec. 3.3.2; not emulated).
 * The copies are freed after the call: nothing FP8 is held between GEMMs
 * (executor/README.md "Mixed precision").
 */
#include "cpu.h"
#include "round.h"

#include <math.h>
#include <stdlib.h>

/* The r x c matrix at x (leading dimension ld) quantised into q (packed, ld = c); *inv
 * gets 1 / s. */
static void quantise(real *q, float *inv, const real *x, int r, int c, int ld, enum dp_f8 f)
{
    const float maxv = f == DP_F8_E5M2 ? DP_E5M2_MAX : DP_E4M3_MAX;
    const int64_t n = (int64_t)r * c;
    float amax = 0;
    bool nan = false;
#pragma omp parallel for schedule(static) reduction(max : amax) reduction(|| : nan) if (n > 32768)
    for (int i = 0; i < r; i++)
        for (int j = 0; j < c; j++) {
            float a = fabsf((float)x[(size_t)i * ld + j]);
            if (isnan(a))
                nan = true;
            else if (a > amax)
                amax = a;
        }
    const float s = dp__fp8_scale(nan ? NAN : amax, maxv);
    *inv = 1.0f / s;
#pragma omp parallel for schedule(static) if (n > 32768)
    for (int i = 0; i < r; i++)
        for (int j = 0; j < c; j++) {
            float v = (float)x[(size_t)i * ld + j] * s;
            q[(size_t)i * c + j] = (real)(f == DP_F8_E5M2 ? dp__round_e5m2(v) : dp__round_e4m3(v));
        }
}

void dp__cpu_gemm_fp8(struct dp_backend *be, bool ta, bool tb, int m, int n, int k, real alpha,
                      const real *a, int lda, enum dp_f8 fa, const real *b, int ldb, enum dp_f8 fb,
                      real beta, real *c, int ldc)
{
    if (m <= 0 || n <= 0)
        return;
    /* op(A) is m x k: A is stored m x k, or k x m when transposed; op(B) k x n likewise. */
    const int ar = ta ? k : m, ac = ta ? m : k, br = tb ? n : k, bc = tb ? k : n;
    real *qa = malloc(((size_t)ar * ac + (size_t)br * bc) * sizeof(real) + 1);
    if (!qa) {
        /* Out of host memory for a transient copy: nothing sensible is left to compute
         * with; the caller sees NaN in C and the run stops on a non-finite loss. */
        for (int i = 0; i < m; i++)
            for (int j = 0; j < n; j++)
                c[(size_t)i * ldc + j] = (real)NAN;
        return;
    }
    real *qb = qa + (size_t)ar * ac;
    float ia, ib;
    quantise(qa, &ia, a, ar, ac, lda, fa);
    quantise(qb, &ib, b, br, bc, ldb, fb);
    dp__cpu_gemm(be, ta, tb, m, n, k, (real)((float)alpha * ia * ib), qa, ac, qb, bc, beta, c, ldc);
    free(qa);
}
