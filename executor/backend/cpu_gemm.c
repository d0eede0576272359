/*
 * CPU backend, GEMM glue: C = alpha op(A) op(B) + beta C through CBLAS
 * (OpenBLAS), on the calling thread or split by rows of C over the rank's
 * OpenMP threads. OpenBLAS itself runs single-threaded (cpu.c), so the two
 * libraries never run thread pools side by side.
 */
#include "cpu.h"
#include "cpu_simd.h"

#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <string.h>

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

void dp__cpu_gemm(struct dp_backend *be, bool ta, bool tb, int m, int n, int k, real alpha,
                  const real *a, int lda, const real *b, int ldb, real beta, real *c, int ldc)
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
