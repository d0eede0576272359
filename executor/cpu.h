/*
 * The CPU backend's kernels (kernels.c), shared with backend_cpu.c, which
 * puts them into the dp_backend_ops table. Semantics are those of
 * backend.h; these names take no backend argument.
 */
#ifndef DPLAN_EXECUTOR_CPU_H
#define DPLAN_EXECUTOR_CPU_H

#include "backend.h"

/* GEMM on the calling thread only (used inside OpenMP regions). */
void dp__cpu_gemm1(bool ta, bool tb, int m, int n, int k, real alpha, const real *a, int lda,
                   const real *b, int ldb, real beta, real *c, int ldc);
/* Threads dp__cpu_gemm uses for C[m, n] over k with nt available (1 or nt). */
int dp__cpu_gemm_threads(int m, int n, int k, int nt);
/* GEMM split by rows of C over the OpenMP threads (one thread pool: OpenBLAS runs
 * single-threaded inside each block). */
void dp__cpu_gemm(bool ta, bool tb, int m, int n, int k, real alpha, const real *a, int lda,
                  const real *b, int ldb, real beta, real *c, int ldc);

void dp__cpu_init_fill(real *dst, int64_t rows, int64_t cols, int64_t gcols, int64_t r0, int64_t c0,
                       uint64_t seed, uint64_t key, double std, double value);
void dp__cpu_norm_fwd(enum dp_norm_kind kind, real *out, real *stats, const real *inp,
                      const real *w, const real *b, int64_t N, int64_t C);
void dp__cpu_norm_bwd(enum dp_norm_kind kind, real *dinp, real *dw, real *db, const real *dout,
                      const real *inp, const real *w, const real *stats, int64_t N, int64_t C);
void dp__cpu_bias_fill(real *out, const real *bias, int64_t N, int64_t C);
void dp__cpu_bias_grad(real *db, const real *dout, int64_t N, int64_t C);
void dp__cpu_residual(real *out, const real *a, const real *b, const real *bias, int64_t N,
                      int64_t C);
void dp__cpu_add_inplace(real *y, const real *x, int64_t n);
void dp__cpu_act_fwd(enum dp_ffn_kind kind, real *out, const real *inp, int64_t N, int64_t F);
void dp__cpu_act_bwd(enum dp_ffn_kind kind, real *dinp, real *dbias, const real *dout,
                     const real *inp, int64_t N, int64_t F);
void dp__cpu_rope(real *x, int64_t ld, int64_t N, int64_t T, int nq, int nk, int d, const real *cs,
                  bool inverse);
/* ctx NULL: the probabilities only (dp__cpu_attn_probs). */
void dp__cpu_attn_fwd(real *ctx, real *probs, const real *qkv, int64_t B, int64_t T, int a, int g,
                      int d);
void dp__cpu_attn_probs(real *probs, const real *qkv, int64_t B, int64_t T, int a, int g, int d);
void dp__cpu_attn_bwd(real *dqkv, real *dprobs, const real *dctx, const real *qkv,
                      const real *probs, int64_t B, int64_t T, int a, int g, int d);
void dp__cpu_embed_fwd(real *out, const int32_t *tok, const real *wte, int64_t v0, int64_t nv,
                       int64_t N, int64_t C);
void dp__cpu_embed_bwd(real *dwte, const int32_t *tok, const real *dout, int64_t v0, int64_t nv,
                       int64_t N, int64_t C);
void dp__cpu_pos_fwd(real *out, const real *wpe, int64_t n0, int64_t N, int64_t T, int64_t C);
void dp__cpu_pos_bwd(real *dwpe, const real *dout, int64_t n0, int64_t N, int64_t T, int64_t C);
void dp__cpu_ce_max(real *rowmax, const real *logits, int64_t N, int64_t nv, int64_t v0,
                    int64_t vocab);
void dp__cpu_ce_sums(real *sums, const real *logits, const real *gmax, const int32_t *tgt,
                     int64_t N, int64_t nv, int64_t v0, int64_t vocab);
void dp__cpu_ce_grad(real *logits, real *loss, const real *gmax, const real *sums,
                     const int32_t *tgt, int64_t N, int64_t nv, int64_t v0, int64_t vocab,
                     real dloss);
double dp__cpu_sum(const real *x, int64_t n);
double dp__cpu_sumsq(const real *x, int64_t n);
void dp__cpu_adamw(real *p, const real *grad, real *m, real *v, int64_t n, double lr, double beta1,
                   double beta2, double eps, double wd, double bc1, double bc2, double gscale);

#endif
