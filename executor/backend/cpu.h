/*
 * The CPU backend's kernels, one family per file (cpu_gemm.c, cpu_norm.c,
 * cpu_attention.c, cpu_loss.c, cpu_optim.c), which cpu.c puts into the
 * dp_backend_ops table as they are. Semantics are those of backend.h; the
 * backend argument is not used (the probe passes NULL).
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
void dp__cpu_gemm(struct dp_backend *be, bool ta, bool tb, int m, int n, int k, real alpha,
                  const real *a, int lda, const real *b, int ldb, real beta, real *c, int ldc);

void dp__cpu_init_fill(struct dp_backend *be, real *dst, int64_t rows, int64_t cols, int64_t gcols,
                       int64_t r0, int64_t c0, uint64_t seed, uint64_t key, double std,
                       double value);
void dp__cpu_norm_fwd(struct dp_backend *be, enum dp_norm_kind kind, real *out, real *stats,
                      const real *inp, const real *w, const real *b, int64_t N, int64_t C);
void dp__cpu_norm_bwd(struct dp_backend *be, enum dp_norm_kind kind, real *dinp, real *dw, real *db,
                      const real *dout, const real *inp, const real *w, const real *stats,
                      int64_t N, int64_t C);
void dp__cpu_bias_fill(struct dp_backend *be, real *out, const real *bias, int64_t N, int64_t C);
void dp__cpu_bias_grad(struct dp_backend *be, real *db, const real *dout, int64_t N, int64_t C);
void dp__cpu_residual(struct dp_backend *be, real *out, const real *a, const real *b,
                      const real *bias, int64_t N, int64_t C);
void dp__cpu_add_inplace(struct dp_backend *be, real *y, const real *x, int64_t n);
void dp__cpu_act_fwd(struct dp_backend *be, enum dp_ffn_kind kind, real *out, const real *inp,
                     int64_t N, int64_t F);
void dp__cpu_act_bwd(struct dp_backend *be, enum dp_ffn_kind kind, real *dinp, real *dbias,
                     const real *dout, const real *inp, int64_t N, int64_t F);
void dp__cpu_rope(struct dp_backend *be, real *x, int64_t ld, int64_t N, int64_t T, int nq, int nk,
                  int d, const real *cs, bool inverse);
/* ctx NULL: the probabilities only (dp__cpu_attn_probs). */
void dp__cpu_attn_fwd(struct dp_backend *be, real *ctx, real *probs, const real *qkv, int64_t B,
                      int64_t T, int a, int g, int d);
void dp__cpu_attn_probs(struct dp_backend *be, real *probs, const real *qkv, int64_t B, int64_t T,
                        int a, int g, int d);
void dp__cpu_attn_bwd(struct dp_backend *be, real *dqkv, real *dprobs, const real *dctx,
                      const real *qkv, const real *probs, int64_t B, int64_t T, int a, int g,
                      int d);
/* The fused classifier (backend.h ce_fused), left out of the CPU table (cpu_loss.c). */
void dp__cpu_ce_fused(struct dp_backend *be, real *logits, real *loss, const int32_t *tgt,
                      int64_t N, int64_t nv, int64_t vocab, real dloss);
/* Flash attention (cpu_attention_flash.c; backend.h attn_flash_*). */
void dp__cpu_attn_flash_fwd(struct dp_backend *be, real *ctx, real *lse, const real *qkv, int64_t B,
                            int64_t T, int a, int g, int d);
void dp__cpu_attn_flash_bwd(struct dp_backend *be, real *dqkv, real *dsum, const real *dctx,
                            const real *qkv, const real *ctx, const real *lse, int64_t B, int64_t T,
                            int a, int g, int d);
/* Ring attention's block kernels (cpu_attention_cp.c; backend.h attn_ring_*). */
void dp__cpu_attn_ring_fwd(struct dp_backend *be, real *acc, real *mx, real *sm, const real *qkv,
                           int64_t ldq, const real *kv, const int qc[2], const int kc[2], int64_t B,
                           int64_t C, int a, int g, int d);
void dp__cpu_attn_ring_done(struct dp_backend *be, real *ctx, real *mx, const real *sm, int64_t B,
                            int64_t T, int a, int d);
void dp__cpu_attn_ring_dsum(struct dp_backend *be, real *dsum, const real *dctx, const real *ctx,
                            int64_t B, int64_t T, int a, int d);
void dp__cpu_attn_ring_bwd(struct dp_backend *be, real *dq, real *dkv, const real *dctx,
                           const real *qkv, int64_t ldq, const real *kv, const real *lse,
                           const real *dsum, const int qc[2], const int kc[2], int64_t B, int64_t C,
                           int a, int g, int d);
void dp__cpu_embed_fwd(struct dp_backend *be, real *out, const int32_t *tok, const real *wte,
                       int64_t v0, int64_t nv, int64_t N, int64_t C);
void dp__cpu_embed_bwd(struct dp_backend *be, real *dwte, const int32_t *tok, const real *dout,
                       int64_t v0, int64_t nv, int64_t N, int64_t C);
void dp__cpu_pos_fwd(struct dp_backend *be, real *out, const real *wpe, int64_t n0, int64_t N,
                     int64_t T, int64_t C);
void dp__cpu_pos_bwd(struct dp_backend *be, real *dwpe, const real *dout, int64_t n0, int64_t N,
                     int64_t T, int64_t C);
void dp__cpu_ce_max(struct dp_backend *be, real *rowmax, const real *logits, int64_t N, int64_t nv,
                    int64_t v0, int64_t vocab);
void dp__cpu_ce_sums(struct dp_backend *be, real *sums, const real *logits, const real *gmax,
                     const int32_t *tgt, int64_t N, int64_t nv, int64_t v0, int64_t vocab);
void dp__cpu_ce_grad(struct dp_backend *be, real *logits, real *loss, const real *gmax,
                     const real *sums, const int32_t *tgt, int64_t N, int64_t nv, int64_t v0,
                     int64_t vocab, real dloss);
double dp__cpu_sum(struct dp_backend *be, const real *x, int64_t n);
double dp__cpu_sumsq(struct dp_backend *be, const real *x, int64_t n);
void dp__cpu_adamw(struct dp_backend *be, real *p, const real *grad, real *m, real *v, int64_t n,
                   double lr, double beta1, double beta2, double eps, double wd, double bc1,
                   double bc2, double gscale);
/* Storage emulation: x rounded to be->dtype (cpu_round.c). */
void dp__cpu_round_store(struct dp_backend *be, real *x, int64_t n);
void dp__cpu_pack(struct dp_backend *be, uint16_t *dst, const real *src, int64_t n);
void dp__cpu_unpack(struct dp_backend *be, real *dst, const uint16_t *src, int64_t n);
/* FP8 GEMM with current per-tensor scaling, emulated exactly (cpu_fp8.c). */
void dp__cpu_gemm_fp8(struct dp_backend *be, bool ta, bool tb, int m, int n, int k, real alpha,
                      const real *a, int lda, enum dp_f8 fa, const real *b, int ldb, enum dp_f8 fb,
                      real beta, real *c, int ldc);
void dp__cpu_qk_norm_fwd(struct dp_backend *be, real *x, int64_t ld, real *raw, real *rstd,
                         const real *wq, const real *wk, int64_t N, int nq, int nk, int d);
void dp__cpu_qk_norm_bwd(struct dp_backend *be, real *dx, int64_t ld, real *dwq, real *dwk,
                         const real *raw, const real *rstd, const real *wq, const real *wk,
                         int64_t N, int nq, int nk, int d);
void dp__cpu_router_topk(struct dp_backend *be, real *probs, int32_t *idx, real *w,
                         const real *bias, int64_t N, int E, int K);
void dp__cpu_router_bwd(struct dp_backend *be, real *dl, const real *probs, const real *w,
                        const int32_t *idx, const int32_t *rrow, const real *dw, const real *gaux,
                        bool sigmoid, int64_t N, int E, int K);
void dp__cpu_rows_gather(struct dp_backend *be, real *dst, const real *src, const int32_t *idx,
                         const real *scale, int64_t R, int64_t C);
void dp__cpu_rows_scatter_add(struct dp_backend *be, real *dst, const real *src, const int32_t *idx,
                              const real *scale, int64_t R, int64_t C);
void dp__cpu_rows_dot(struct dp_backend *be, real *out, const real *a, const int32_t *idx,
                      const real *b, int64_t R, int64_t C);

#endif
