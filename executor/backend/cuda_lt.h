/*
 * The CUDA backend's cuBLASLt GEMMs (cuda_lt.c), for cuda.c (setup) and cuda_ops.c
 * (gemm and gemm_fp8 in the ops table).
 */
#ifndef DPLAN_EXECUTOR_CUDA_LT_H
#define DPLAN_EXECUTOR_CUDA_LT_H

#include "cuda.h"
#include "cuda_lt_host.h"

/* The handle and the FP8 scalars (cb->lt); with fp8, refuses a GPU below sm_89. Leaves
 * cb->lt NULL with DPLAN_CUDA_LT=0 (no FP8 then). */
int dp__cuda_lt_init(struct cuda_backend *cb, bool fp8, struct dp_err *err);
void dp__cuda_lt_destroy(struct cuda_backend *cb);
/* C = alpha op(A) op(B) + beta C (+ bias [n] on every row, when not NULL, in the
 * epilogue) through cuBLASLt in the run's dtype; false when cuBLASLt is off or has no
 * algorithm for the shape (the caller composes it with cublasGemmEx). */
bool dp__cuda_lt_gemm(struct cuda_backend *cb, bool ta, bool tb, int m, int n, int k, float alpha,
                      const float *a, int lda, const float *b, int ldb, float beta, float *c,
                      int ldc, const float *bias);
/* backend.h gemm_fp8. */
void dp__cuda_lt_gemm_fp8(struct dp_backend *be, bool ta, bool tb, int m, int n, int k, real alpha,
                          const real *a, int lda, enum dp_f8 fa, const real *b, int ldb,
                          enum dp_f8 fb, real beta, real *c, int ldc);

#endif
