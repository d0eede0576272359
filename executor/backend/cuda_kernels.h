/*
 * The CUDA backend's kernels (cuda_kernels.cu, cuda_softmax.cu, cuda_flash.cu,
 * cuda_ce.cu) behind a C interface
 * of plain types, so that the C side (cuda.c, cuda_ops.c) never includes C++ and the
 * kernels never include the executor's headers. Every launcher is asynchronous on
 * `stream` (a cudaStream_t) and has the semantics of the backend.h operation of the same
 * name; `norm` is 1 for LayerNorm, 0 for RMSNorm; `gelu` 1 for GELU, 0 for SwiGLU.
 * Launch errors are left for the caller's cudaGetLastError.
 */
#ifndef DPLAN_EXECUTOR_CUDA_KERNELS_H
#define DPLAN_EXECUTOR_CUDA_KERNELS_H

#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

void dp__cuk_init_fill(void *stream, float *dst, int64_t rows, int64_t cols, int64_t gcols,
                       int64_t r0, int64_t c0, uint64_t seed, uint64_t key, double std,
                       double value);
void dp__cuk_norm_fwd(void *stream, int ln, float *out, float *stats, const float *inp,
                      const float *w, const float *b, int64_t N, int64_t C, float eps);
void dp__cuk_norm_bwd(void *stream, int ln, float *dinp, float *dw, float *db, const float *dout,
                      const float *inp, const float *w, const float *stats, int64_t N, int64_t C);
void dp__cuk_bias_fill(void *stream, float *out, const float *bias, int64_t N, int64_t C);
/* db[c] += sum over rows of x[n][c] (columns, rows in parallel chunks: atomics). */
void dp__cuk_col_sum(void *stream, float *db, const float *x, int64_t N, int64_t C);
void dp__cuk_residual(void *stream, float *out, const float *a, const float *b, const float *bias,
                      int64_t N, int64_t C);
void dp__cuk_add(void *stream, float *y, const float *x, int64_t n);
/* x rounded in place to bf16 (fp16 = 0) or fp16 (fp16 = 1), to nearest even, back in fp32:
 * the storage emulation (backend.h round_store). */
void dp__cuk_round(void *stream, float *x, int64_t n, int fp16);
/* fp32 to 2-byte words and back in bf16 (fp16 = 0) or fp16 (pack16.h; backend.h pack,
 * unpack). */
void dp__cuk_pack16(void *stream, uint16_t *dst, const float *src, int64_t n, int fp16);
void dp__cuk_unpack16(void *stream, float *dst, const uint16_t *src, int64_t n, int fp16);
void dp__cuk_act_fwd(void *stream, int gelu, float *out, const float *inp, int64_t N, int64_t F);
void dp__cuk_act_bwd(void *stream, int gelu, float *dinp, const float *dout, const float *inp,
                     int64_t N, int64_t F);
void dp__cuk_rope(void *stream, float *x, int64_t ld, int64_t N, int64_t T, int nq, int nk, int d,
                  const float *cs, bool inverse);
void dp__cuk_embed_fwd(void *stream, float *out, const int32_t *tok, const float *wte, int64_t v0,
                       int64_t nv, int64_t N, int64_t C);
void dp__cuk_embed_bwd(void *stream, float *dwte, const int32_t *tok, const float *dout, int64_t v0,
                       int64_t nv, int64_t N, int64_t C);
void dp__cuk_pos_fwd(void *stream, float *out, const float *wpe, int64_t n0, int64_t N, int64_t T,
                     int64_t C);
void dp__cuk_pos_bwd(void *stream, float *dwpe, const float *dout, int64_t n0, int64_t N, int64_t T,
                     int64_t C);
void dp__cuk_ce_max(void *stream, float *rowmax, const float *logits, int64_t N, int64_t nv,
                    int64_t valid);
void dp__cuk_ce_sums(void *stream, float *sums, const float *logits, const float *gmax,
                     const int32_t *tgt, int64_t N, int64_t nv, int64_t v0, int64_t valid);
void dp__cuk_ce_grad(void *stream, float *logits, float *loss, const float *gmax, const float *sums,
                     const int32_t *tgt, int64_t N, int64_t nv, int64_t v0, int64_t valid,
                     float dloss);
/* acc[0] (a device double) += sum of x (square: of x^2). */
void dp__cuk_sum(void *stream, double *acc, const float *x, int64_t n, bool square);
void dp__cuk_adamw(void *stream, float *p, const float *grad, float *m, float *v, int64_t n,
                   float lr, float b1, float b2, float eps, float wd, float ibc1, float ibc2,
                   float gs);
/* Causal softmax in place over `rows` rows of T (row r is position r % T): entries
 * 0 .. t get softmax, those above the diagonal 0. */
void dp__cuk_causal_softmax(void *stream, float *P, int64_t rows, int64_t T);
/* Its backward in place on dP: dS = P (dP - sum_j dP_j P_j), 0 above the diagonal. */
void dp__cuk_causal_softmax_bwd(void *stream, float *dP, const float *P, int64_t rows, int64_t T);
/* Ring attention's block kernels (backend.h attn_ring_*; cuda_softmax.cu). */
void dp__cuk_ring_fwd(void *stream, float *acc, float *mx, float *sm, const float *qkv, int64_t ldq,
                      const float *kv, const int qc[2], const int kc[2], int64_t B, int64_t C,
                      int a, int g, int d);
void dp__cuk_ring_done(void *stream, float *ctx, float *mx, const float *sm, int64_t B, int64_t T,
                       int a, int d);
void dp__cuk_ring_dsum(void *stream, float *dsum, const float *dctx, const float *ctx, int64_t B,
                       int64_t T, int a, int d);
/* dq += and dkv += the block's parts (two kernels: per query row, per key row). */
void dp__cuk_ring_bwd(void *stream, float *dq, float *dkv, const float *dctx, const float *qkv,
                      int64_t ldq, const float *kv, const float *lse, const float *dsum,
                      const int qc[2], const int kc[2], int64_t B, int64_t C, int a, int g, int d);
/* The fused classifier (backend.h ce_fused; cuda_ce.cu), `valid` unpadded columns. */
void dp__cuk_ce_fused(void *stream, float *logits, float *loss, const int32_t *tgt, int64_t N,
                      int64_t nv, int64_t valid, float dloss);
/* Flash attention (backend.h attn_flash_*; cuda_flash.cu): ctx and lse; dqkv
 * overwritten, dsum [B][a][T] scratch for D. */
void dp__cuk_flash_fwd(void *stream, float *ctx, float *lse, const float *qkv, int64_t B, int64_t T,
                       int a, int g, int d);
void dp__cuk_flash_bwd(void *stream, float *dqkv, float *dsum, const float *dctx, const float *qkv,
                       const float *ctx, const float *lse, int64_t B, int64_t T, int a, int g,
                       int d);
/* Forward copy of n floats from src to dst < src in pieces of (src - dst), so that an
 * overlapping move is still correct (a reduce-scatter's piece to the front). */
void dp__cuk_move_front(void *stream, float *dst, const float *src, int64_t n);

#ifdef __cplusplus
}
#endif

#endif
