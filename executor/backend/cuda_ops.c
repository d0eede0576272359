/*
 * The CUDA backend's compute operations (backend.h): GEMMs through cuBLASLt first
 * (cuda_lt.c: TF32, bf16 / fp16 copies, FP8, the bias epilogue), else cuBLAS in TF32
 * (cublasGemmStridedBatchedEx, CUBLAS_COMPUTE_32F_FAST_TF32: fp32 storage and
 * accumulation, inputs rounded to TF32 in the tensor cores; DPLAN_CUDA_GEMM=fp32 asks
 * for CUBLAS_COMPUTE_32F, exact fp32), causal attention as batched
 * GEMMs around the masked softmax of cuda_softmax.cu, ring attention's block kernels
 * (cuda_softmax.cu too), and the element-wise kernels of cuda_kernels.cu. Everything is queued on
 * the backend's one stream; only sum and sumsq wait for it (their results are host doubles).
 */
#include "cuda.h"
#include "cuda_kernels.h"
#include "cuda_lt.h"

#include <math.h>

#define ST(be) ((void *)dp__cu(be)->stream)

/*
 * Row-major C[m, n] = alpha op(A) op(B) + beta C as cuBLAS's column-major
 * C^T[n, m] = op(B)^T op(A)^T: the row-major buffers read as their transposes, so the
 * operands swap and each keeps its own transpose flag. `count` products with element
 * strides sa, sb, sc between them.
 */
static void gemm_rm(struct dp_backend *be, bool ta, bool tb, int m, int n, int k, float alpha,
                    const float *a, int lda, long long sa, const float *b, int ldb, long long sb,
                    float beta, float *c, int ldc, long long sc, int count)
{
    struct cuda_backend *cb = dp__cu(be);
    if (m <= 0 || n <= 0 || count <= 0)
        return;
    cublasStatus_t st = cublasGemmStridedBatchedEx(
        cb->blas, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N, n, m, k, &alpha,
        b, CUDA_R_32F, ldb, sb, a, CUDA_R_32F, lda, sa, &beta, c, CUDA_R_32F, ldc, sc, count,
        cb->compute, CUBLAS_GEMM_DEFAULT);
    if (st != CUBLAS_STATUS_SUCCESS)
        dp__cuda_note(cb, "cublasGemmStridedBatchedEx", (int)st, cublasGetStatusString(st));
}

static void cu_gemm(struct dp_backend *be, bool ta, bool tb, int m, int n, int k, real alpha,
                    const real *a, int lda, const real *b, int ldb, real beta, real *c, int ldc)
{
    /* cuBLASLt first (cuda_lt.c: TF32, or bf16 / fp16 operands in those runs). */
    if (m > 0 && n > 0 && k > 0 &&
        dp__cuda_lt_gemm(dp__cu(be), ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, NULL))
        return;
    gemm_rm(be, ta, tb, m, n, k, alpha, a, lda, 0, b, ldb, 0, beta, c, ldc, 0, 1);
}

static void cu_bias_fill(struct dp_backend *be, real *out, const real *bias, int64_t N, int64_t C);

/* The bias in cuBLASLt's epilogue; without an algorithm for it, bias_fill and beta 1. */
static void cu_gemm_bias(struct dp_backend *be, bool ta, bool tb, int m, int n, int k,
                         const real *a, int lda, const real *b, int ldb, const real *bias, real *c,
                         int ldc)
{
    if (m > 0 && n > 0 && k > 0 &&
        dp__cuda_lt_gemm(dp__cu(be), ta, tb, m, n, k, 1, a, lda, b, ldb, 0, c, ldc, bias))
        return;
    cu_bias_fill(be, c, bias, m, n);
    cu_gemm(be, ta, tb, m, n, k, 1, a, lda, b, ldb, 1, c, ldc);
}

static void cu_init_fill(struct dp_backend *be, real *dst, int64_t rows, int64_t cols,
                         int64_t gcols, int64_t r0, int64_t c0, uint64_t seed, uint64_t key,
                         double std, double value)
{
    if (rows > 0 && cols > 0)
        dp__cuk_init_fill(ST(be), dst, rows, cols, gcols, r0, c0, seed, key, std, value);
}

static void cu_norm_fwd(struct dp_backend *be, enum dp_norm_kind kind, real *out, real *stats,
                        const real *inp, const real *w, const real *b, int64_t N, int64_t C)
{
    if (N > 0)
        dp__cuk_norm_fwd(ST(be), kind == DP_NORM_LAYERNORM, out, stats, inp, w, b, N, C,
                         (float)DP_NORM_EPS);
}

static void cu_norm_bwd(struct dp_backend *be, enum dp_norm_kind kind, real *dinp, real *dw,
                        real *db, const real *dout, const real *inp, const real *w,
                        const real *stats, int64_t N, int64_t C)
{
    if (N > 0)
        dp__cuk_norm_bwd(ST(be), kind == DP_NORM_LAYERNORM, dinp, dw, db, dout, inp, w, stats, N,
                         C);
}

static void cu_bias_fill(struct dp_backend *be, real *out, const real *bias, int64_t N, int64_t C)
{
    if (N > 0 && C > 0)
        dp__cuk_bias_fill(ST(be), out, bias, N, C);
}

static void cu_bias_grad(struct dp_backend *be, real *db, const real *dout, int64_t N, int64_t C)
{
    dp__cuk_col_sum(ST(be), db, dout, N, C);
}

static void cu_residual(struct dp_backend *be, real *out, const real *a, const real *b,
                        const real *bias, int64_t N, int64_t C)
{
    if (N > 0 && C > 0)
        dp__cuk_residual(ST(be), out, a, b, bias, N, C);
}

static void cu_add_inplace(struct dp_backend *be, real *y, const real *x, int64_t n)
{
    if (n > 0)
        dp__cuk_add(ST(be), y, x, n);
}

/* The storage emulation, as the CPU backend's (fp32 buffers holding rounded values). The
 * GEMMs' TF32 inputs keep 10 significand bits, so bf16 (7) and fp16 (10) values enter
 * them exactly: a TF32 GEMM of rounded values is a bf16 / fp16 GEMM with fp32 compute. */
static void cu_round_store(struct dp_backend *be, real *x, int64_t n)
{
    if (n > 0 && be->dtype != DP_DT_FP32)
        dp__cuk_round(ST(be), x, n, be->dtype == DP_DT_FP16);
}

static void cu_pack(struct dp_backend *be, uint16_t *dst, const real *src, int64_t n)
{
    if (n > 0 && be->dtype != DP_DT_FP32)
        dp__cuk_pack16(ST(be), dst, src, n, be->dtype == DP_DT_FP16);
}

static void cu_unpack(struct dp_backend *be, real *dst, const uint16_t *src, int64_t n)
{
    if (n > 0 && be->dtype != DP_DT_FP32)
        dp__cuk_unpack16(ST(be), dst, src, n, be->dtype == DP_DT_FP16);
}

static void cu_act_fwd(struct dp_backend *be, enum dp_ffn_kind kind, real *out, const real *inp,
                       int64_t N, int64_t F)
{
    if (N > 0 && F > 0)
        dp__cuk_act_fwd(ST(be), kind == DP_FFN_GELU, out, inp, N, F);
}

static void cu_act_bwd(struct dp_backend *be, enum dp_ffn_kind kind, real *dinp, real *dbias,
                       const real *dout, const real *inp, int64_t N, int64_t F)
{
    if (N <= 0 || F <= 0)
        return;
    const bool gelu = kind == DP_FFN_GELU;
    dp__cuk_act_bwd(ST(be), gelu, dinp, dout, inp, N, F);
    if (dbias)
        dp__cuk_col_sum(ST(be), dbias, dinp, N, gelu ? F : 2 * F);
}

static void cu_rope(struct dp_backend *be, real *x, int64_t ld, int64_t N, int64_t T, int nq,
                    int nk, int d, const real *cs, bool inverse)
{
    if (N > 0 && nq + nk > 0 && d >= 2)
        dp__cuk_rope(ST(be), x, ld, N, T, nq, nk, d, cs, inverse);
}

/* ------------------------------------------------------------------ attention */

/*
 * Per head h (kv head j = h / (a / g)), batched over the B sequences:
 *   S = q_h k_j^T / sqrt(d) -> P = causal softmax(S) -> ctx_h = P v_j.
 * qkv rows have ld = (a + 2g) d; probs [B][a][T][T]; ctx rows a d.
 */
static void attn(struct dp_backend *be, real *ctx, real *probs, const real *qkv, int64_t B,
                 int64_t T, int a, int g, int d)
{
    const int64_t ld = (int64_t)(a + 2 * g) * d, sq = T * ld, sp = (int64_t)a * T * T;
    const float scale = 1.0f / sqrtf((float)d);
    const int r = a / g;
    for (int h = 0; h < a; h++) {
        const int j = h / r;
        const real *q = qkv + (int64_t)h * d, *k = qkv + (int64_t)(a + j) * d;
        real *P = probs + (int64_t)h * T * T;
        gemm_rm(be, false, true, (int)T, (int)T, d, scale, q, (int)ld, sq, k, (int)ld, sq, 0, P,
                (int)T, sp, (int)B);
    }
    dp__cuk_causal_softmax(ST(be), probs, B * a * T, T);
    if (!ctx)
        return;
    for (int h = 0; h < a; h++) {
        const real *v = qkv + (int64_t)(a + g + h / r) * d;
        gemm_rm(be, false, false, (int)T, d, (int)T, 1, probs + (int64_t)h * T * T, (int)T, sp, v,
                (int)ld, sq, 0, ctx + (int64_t)h * d, a * d, T * a * d, (int)B);
    }
}

static void cu_attn_fwd(struct dp_backend *be, real *ctx, real *probs, const real *qkv, int64_t B,
                        int64_t T, int a, int g, int d)
{
    attn(be, ctx, probs, qkv, B, T, a, g, d);
}

static void cu_attn_probs(struct dp_backend *be, real *probs, const real *qkv, int64_t B, int64_t T,
                          int a, int g, int d)
{
    attn(be, NULL, probs, qkv, B, T, a, g, d);
}

/*
 * dP = dctx_h v_j^T; dv_j += P^T dctx_h; dS = softmax backward (dP); dq_h = dS k_j / sqrt(d);
 * dk_j += dS^T q_h / sqrt(d). The heads of one kv group accumulate into the same dk_j,
 * dv_j, so heads run one after another (batched over the sequences only).
 */
static void cu_attn_bwd(struct dp_backend *be, real *dqkv, real *dprobs, const real *dctx,
                        const real *qkv, const real *probs, int64_t B, int64_t T, int a, int g,
                        int d)
{
    struct cuda_backend *cb = dp__cu(be);
    const int64_t ld = (int64_t)(a + 2 * g) * d, sq = T * ld, sp = (int64_t)a * T * T;
    const int64_t sc = T * a * d;
    const float scale = 1.0f / sqrtf((float)d);
    const int r = a / g;
    cudaMemsetAsync(dqkv, 0, (size_t)(B * T * ld) * sizeof(real), cb->stream);
    for (int h = 0; h < a; h++) {
        const int j = h / r;
        const real *dc = dctx + (int64_t)h * d, *v = qkv + (int64_t)(a + g + j) * d;
        const real *P = probs + (int64_t)h * T * T;
        real *dP = dprobs + (int64_t)h * T * T, *dv = dqkv + (int64_t)(a + g + j) * d;
        gemm_rm(be, false, true, (int)T, (int)T, d, 1, dc, a * d, sc, v, (int)ld, sq, 0, dP, (int)T,
                sp, (int)B);
        gemm_rm(be, true, false, (int)T, d, (int)T, 1, P, (int)T, sp, dc, a * d, sc, 1, dv, (int)ld,
                sq, (int)B);
    }
    dp__cuk_causal_softmax_bwd(ST(be), dprobs, probs, B * a * T, T);
    for (int h = 0; h < a; h++) {
        const int j = h / r;
        const real *dS = dprobs + (int64_t)h * T * T;
        const real *q = qkv + (int64_t)h * d, *k = qkv + (int64_t)(a + j) * d;
        real *dq = dqkv + (int64_t)h * d, *dk = dqkv + (int64_t)(a + j) * d;
        gemm_rm(be, false, false, (int)T, d, (int)T, scale, dS, (int)T, sp, k, (int)ld, sq, 0, dq,
                (int)ld, sq, (int)B);
        gemm_rm(be, true, false, (int)T, d, (int)T, scale, dS, (int)T, sp, q, (int)ld, sq, 1, dk,
                (int)ld, sq, (int)B);
    }
}

/* Flash attention: the tiled kernels of cuda_flash.cu (no T x T buffer). */
static void cu_attn_flash_fwd(struct dp_backend *be, real *ctx, real *lse, const real *qkv,
                              int64_t B, int64_t T, int a, int g, int d)
{
    dp__cuk_flash_fwd(ST(be), ctx, lse, qkv, B, T, a, g, d);
}

static void cu_attn_flash_bwd(struct dp_backend *be, real *dqkv, real *dsum, const real *dctx,
                              const real *qkv, const real *ctx, const real *lse, int64_t B,
                              int64_t T, int a, int g, int d)
{
    dp__cuk_flash_bwd(ST(be), dqkv, dsum, dctx, qkv, ctx, lse, B, T, a, g, d);
}

/* Ring attention (context parallelism): the block kernels of cuda_softmax.cu, which
 * mirror the CPU's cpu_attention_cp.c. */
static void cu_attn_ring_fwd(struct dp_backend *be, real *acc, real *mx, real *sm, const real *qkv,
                             int64_t ldq, const real *kv, const int qc[2], const int kc[2],
                             int64_t B, int64_t C, int a, int g, int d)
{
    dp__cuk_ring_fwd(ST(be), acc, mx, sm, qkv, ldq, kv, qc, kc, B, C, a, g, d);
}

static void cu_attn_ring_done(struct dp_backend *be, real *ctx, real *mx, const real *sm, int64_t B,
                              int64_t T, int a, int d)
{
    dp__cuk_ring_done(ST(be), ctx, mx, sm, B, T, a, d);
}

static void cu_attn_ring_dsum(struct dp_backend *be, real *dsum, const real *dctx, const real *ctx,
                              int64_t B, int64_t T, int a, int d)
{
    dp__cuk_ring_dsum(ST(be), dsum, dctx, ctx, B, T, a, d);
}

static void cu_attn_ring_bwd(struct dp_backend *be, real *dq, real *dkv, const real *dctx,
                             const real *qkv, int64_t ldq, const real *kv, const real *lse,
                             const real *dsum, const int qc[2], const int kc[2], int64_t B,
                             int64_t C, int a, int g, int d)
{
    dp__cuk_ring_bwd(ST(be), dq, dkv, dctx, qkv, ldq, kv, lse, dsum, qc, kc, B, C, a, g, d);
}

/* ------------------------------------------------------------------ the two ends */

static void cu_embed_fwd(struct dp_backend *be, real *out, const int32_t *tok, const real *wte,
                         int64_t v0, int64_t nv, int64_t N, int64_t C)
{
    if (N > 0 && C > 0)
        dp__cuk_embed_fwd(ST(be), out, tok, wte, v0, nv, N, C);
}

static void cu_embed_bwd(struct dp_backend *be, real *dwte, const int32_t *tok, const real *dout,
                         int64_t v0, int64_t nv, int64_t N, int64_t C)
{
    if (N > 0 && C > 0)
        dp__cuk_embed_bwd(ST(be), dwte, tok, dout, v0, nv, N, C);
}

static void cu_pos_fwd(struct dp_backend *be, real *out, const real *wpe, int64_t n0, int64_t N,
                       int64_t T, int64_t C)
{
    if (N > 0 && C > 0)
        dp__cuk_pos_fwd(ST(be), out, wpe, n0, N, T, C);
}

static void cu_pos_bwd(struct dp_backend *be, real *dwpe, const real *dout, int64_t n0, int64_t N,
                       int64_t T, int64_t C)
{
    if (N > 0 && C > 0)
        dp__cuk_pos_bwd(ST(be), dwpe, dout, n0, N, T, C);
}

static int64_t ce_valid(int64_t nv, int64_t v0, int64_t vocab)
{
    int64_t valid = vocab - v0 < nv ? vocab - v0 : nv; /* padded columns are ignored */
    return valid < 0 ? 0 : valid;
}

static void cu_ce_max(struct dp_backend *be, real *rowmax, const real *logits, int64_t N,
                      int64_t nv, int64_t v0, int64_t vocab)
{
    dp__cuk_ce_max(ST(be), rowmax, logits, N, nv, ce_valid(nv, v0, vocab));
}

static void cu_ce_sums(struct dp_backend *be, real *sums, const real *logits, const real *gmax,
                       const int32_t *tgt, int64_t N, int64_t nv, int64_t v0, int64_t vocab)
{
    dp__cuk_ce_sums(ST(be), sums, logits, gmax, tgt, N, nv, v0, ce_valid(nv, v0, vocab));
}

/* tp = 1: the fused classifier of cuda_ce.cu (model.c picks it over the three above). */
static void cu_ce_fused(struct dp_backend *be, real *logits, real *loss, const int32_t *tgt,
                        int64_t N, int64_t nv, int64_t vocab, real dloss)
{
    int64_t valid = vocab < nv ? vocab : nv;
    dp__cuk_ce_fused(ST(be), logits, loss, tgt, N, nv, valid < 0 ? 0 : valid, dloss);
}

static void cu_ce_grad(struct dp_backend *be, real *logits, real *loss, const real *gmax,
                       const real *sums, const int32_t *tgt, int64_t N, int64_t nv, int64_t v0,
                       int64_t vocab, real dloss)
{
    dp__cuk_ce_grad(ST(be), logits, loss, gmax, sums, tgt, N, nv, v0, ce_valid(nv, v0, vocab),
                    dloss);
}

/* ------------------------------------------------------------------ reductions, AdamW */

static double reduce(struct dp_backend *be, const real *x, int64_t n, bool square)
{
    struct cuda_backend *cb = dp__cu(be);
    double s = 0;
    if (n <= 0)
        return 0;
    cudaMemsetAsync(cb->dsum, 0, sizeof *cb->dsum, cb->stream);
    dp__cuk_sum(ST(be), cb->dsum, x, n, square);
    cudaMemcpyAsync(&s, cb->dsum, sizeof s, cudaMemcpyDeviceToHost, cb->stream);
    cudaError_t rc = cudaStreamSynchronize(cb->stream);
    if (rc != cudaSuccess) {
        dp__cuda_note(cb, "cudaStreamSynchronize", (int)rc, cudaGetErrorString(rc));
        return NAN; /* the step's loss or norm check stops the run; the next call says why */
    }
    return s;
}

static double cu_sum(struct dp_backend *be, const real *x, int64_t n)
{
    return reduce(be, x, n, false);
}

static double cu_sumsq(struct dp_backend *be, const real *x, int64_t n)
{
    return reduce(be, x, n, true);
}

static void cu_adamw(struct dp_backend *be, real *p, const real *grad, real *m, real *v, int64_t n,
                     double lr, double beta1, double beta2, double eps, double wd, double bc1,
                     double bc2, double gscale)
{
    if (n > 0)
        dp__cuk_adamw(ST(be), p, grad, m, v, n, (float)lr, (float)beta1, (float)beta2, (float)eps,
                      (float)wd, (float)(1.0 / bc1), (float)(1.0 / bc2), (float)gscale);
}

void dp__cuda_fill_ops(struct dp_backend_ops *o)
{
    o->gemm = cu_gemm;
    o->init_fill = cu_init_fill;
    o->norm_fwd = cu_norm_fwd;
    o->norm_bwd = cu_norm_bwd;
    o->bias_fill = cu_bias_fill;
    o->bias_grad = cu_bias_grad;
    o->residual = cu_residual;
    o->add_inplace = cu_add_inplace;
    o->round_store = cu_round_store;
    o->pack = cu_pack;
    o->unpack = cu_unpack;
    o->act_fwd = cu_act_fwd;
    o->act_bwd = cu_act_bwd;
    o->rope = cu_rope;
    o->attn_fwd = cu_attn_fwd;
    o->attn_probs = cu_attn_probs;
    o->attn_bwd = cu_attn_bwd;
    o->attn_flash_fwd = cu_attn_flash_fwd;
    o->attn_flash_bwd = cu_attn_flash_bwd;
    o->attn_ring_fwd = cu_attn_ring_fwd;
    o->attn_ring_done = cu_attn_ring_done;
    o->attn_ring_dsum = cu_attn_ring_dsum;
    o->attn_ring_bwd = cu_attn_ring_bwd;
    o->embed_fwd = cu_embed_fwd;
    o->embed_bwd = cu_embed_bwd;
    o->pos_fwd = cu_pos_fwd;
    o->pos_bwd = cu_pos_bwd;
    o->ce_max = cu_ce_max;
    o->ce_sums = cu_ce_sums;
    o->ce_grad = cu_ce_grad;
    o->ce_fused = cu_ce_fused;
    o->sum = cu_sum;
    o->sumsq = cu_sumsq;
    o->adamw = cu_adamw;
    o->gemm_fp8 = dp__cuda_lt_gemm_fp8; /* cuda_lt.c */
    o->gemm_bias = cu_gemm_bias;
}
