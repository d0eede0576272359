/*
 * Per-operation timing of a training step (optime.h says what for). Every
 * operation of backend.h that does work is forwarded through a wrapper that
 * reads the clock before and after; calls made from inside another operation
 * (a backend's kernel calling its own table) count for the outer one only.
 * One process runs at most a backend and the pricer at once: two slots.
 */
#include "optime.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum op {
    OP_UPLOAD,
    OP_DOWNLOAD,
    OP_ZERO,
    OP_COPY,
    OP_GEMM,
    OP_NORM_FWD,
    OP_NORM_BWD,
    OP_BIAS_FILL,
    OP_BIAS_GRAD,
    OP_RESIDUAL,
    OP_ADD_INPLACE,
    OP_ACT_FWD,
    OP_ACT_BWD,
    OP_QK_NORM_FWD,
    OP_QK_NORM_BWD,
    OP_ROPE,
    OP_ATTN_FWD,
    OP_ATTN_PROBS,
    OP_ATTN_BWD,
    OP_ATTN_FLASH_FWD,
    OP_ATTN_FLASH_BWD,
    OP_ATTN_RING_FWD,
    OP_ATTN_RING_DONE,
    OP_ATTN_RING_DSUM,
    OP_ATTN_RING_BWD,
    OP_EMBED_FWD,
    OP_EMBED_BWD,
    OP_POS_FWD,
    OP_POS_BWD,
    OP_CE_MAX,
    OP_CE_SUMS,
    OP_CE_GRAD,
    OP_CE_FUSED,
    OP_ROUTER_TOPK,
    OP_ROUTER_BWD,
    OP_ROWS_GATHER,
    OP_ROWS_SCATTER_ADD,
    OP_ROWS_DOT,
    OP_SUM,
    OP_SUMSQ,
    OP_ADAMW,
    OP_ALLREDUCE,
    OP_REDUCE_SCATTER,
    OP_ALLGATHER,
    OP_REDUCE_SCATTER_V,
    OP_ALLGATHER_V,
    OP_ALLTOALL_V,
    OP_ALLGATHER_V_START,
    OP_ALLGATHER_V_WAIT,
    OP_ALLREDUCE_HOST,
    OP_GATHER_HOST,
    OP_SENDRECV,
    OP_P2P,
    OP_BARRIER,
    OP_ALLREDUCE_START,
    OP_REDUCE_SCATTER_V_START,
    OP_REQ_WAIT,
    OP_ROUND_STORE,
    OP_GEMM_FP8,
    OP_GEMM_BIAS,
    OP_N
};
static const char *const op_name[OP_N] = {"upload",
                                          "download",
                                          "zero",
                                          "copy",
                                          "gemm",
                                          "norm_fwd",
                                          "norm_bwd",
                                          "bias_fill",
                                          "bias_grad",
                                          "residual",
                                          "add_inplace",
                                          "act_fwd",
                                          "act_bwd",
                                          "qk_norm_fwd",
                                          "qk_norm_bwd",
                                          "rope",
                                          "attn_fwd",
                                          "attn_probs",
                                          "attn_bwd",
                                          "attn_flash_fwd",
                                          "attn_flash_bwd",
                                          "attn_ring_fwd",
                                          "attn_ring_done",
                                          "attn_ring_dsum",
                                          "attn_ring_bwd",
                                          "embed_fwd",
                                          "embed_bwd",
                                          "pos_fwd",
                                          "pos_bwd",
                                          "ce_max",
                                          "ce_sums",
                                          "ce_grad",
                                          "ce_fused",
                                          "router_topk",
                                          "router_bwd",
                                          "rows_gather",
                                          "rows_scatter_add",
                                          "rows_dot",
                                          "sum",
                                          "sumsq",
                                          "adamw",
                                          "allreduce",
                                          "reduce_scatter",
                                          "allgather",
                                          "reduce_scatter_v",
                                          "allgather_v",
                                          "alltoall_v",
                                          "allgather_v_start",
                                          "allgather_v_wait",
                                          "allreduce_host",
                                          "gather_host",
                                          "sendrecv",
                                          "p2p",
                                          "barrier",
                                          "allreduce_start",
                                          "reduce_scatter_v_start",
                                          "req_wait",
                                          "round_store",
                                          "gemm_fp8",
                                          "gemm_bias"};

enum { NSHAPE = 48 };

struct shape {
    int m, n, k;
    bool ta, tb;
    double s; /* seconds over the steps kept */
    long n_calls;
};

struct slot {
    struct dp_backend *be;
    const struct dp_backend_ops *in;
    struct dp_backend_ops ops;
    double (*clock)(struct dp_backend *be);
    int depth;
    double acc[OP_N], gacc[NSHAPE]; /* this step */
    long cnt[OP_N], gcnt[NSHAPE];
    double *steps; /* per step kept: OP_N accounts, then the step's seconds */
    long *calls;   /* per step kept: OP_N call counts */
    int nsteps, cap;
    struct shape shp[NSHAPE];
    int nshp;
};

static struct slot slots[2];

static struct slot *S(struct dp_backend *be)
{
    return slots[0].be == be ? &slots[0] : &slots[1];
}

static double enter(struct dp_backend *be)
{
    struct slot *s = S(be);
    return s->depth++ == 0 ? s->clock(be) : 0;
}

static void leave(struct dp_backend *be, int op, double t0)
{
    struct slot *s = S(be);
    if (--s->depth == 0) {
        s->acc[op] += s->clock(be) - t0;
        s->cnt[op]++;
    }
}

static void leave_gemm(struct dp_backend *be, double t0, bool ta, bool tb, int m, int n, int k)
{
    struct slot *s = S(be);
    if (s->depth == 1) {
        double t = s->clock(be) - t0;
        int i = 0;
        while (i < s->nshp && !(s->shp[i].m == m && s->shp[i].n == n && s->shp[i].k == k &&
                                s->shp[i].ta == ta && s->shp[i].tb == tb))
            i++;
        if (i == s->nshp && i < NSHAPE)
            s->shp[s->nshp++] = (struct shape){.m = m, .n = n, .k = k, .ta = ta, .tb = tb};
        if (i < NSHAPE) {
            s->gacc[i] += t;
            s->gcnt[i]++;
        }
    }
    leave(be, OP_GEMM, t0);
}

static void w_upload(struct dp_backend *be, void *dst, const void *src, size_t bytes)
{
    double t0 = enter(be);
    S(be)->in->upload(be, dst, src, bytes);
    leave(be, OP_UPLOAD, t0);
}

static void w_download(struct dp_backend *be, void *dst, const void *src, size_t bytes)
{
    double t0 = enter(be);
    S(be)->in->download(be, dst, src, bytes);
    leave(be, OP_DOWNLOAD, t0);
}

static void w_zero(struct dp_backend *be, void *dst, size_t bytes)
{
    double t0 = enter(be);
    S(be)->in->zero(be, dst, bytes);
    leave(be, OP_ZERO, t0);
}

static void w_copy(struct dp_backend *be, void *dst, const void *src, size_t bytes)
{
    double t0 = enter(be);
    S(be)->in->copy(be, dst, src, bytes);
    leave(be, OP_COPY, t0);
}

static void w_gemm(struct dp_backend *be, bool ta, bool tb, int m, int n, int k, real alpha,
                   const real *a, int lda, const real *b, int ldb, real beta, real *c, int ldc)
{
    double t0 = enter(be);
    S(be)->in->gemm(be, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    leave_gemm(be, t0, ta, tb, m, n, k);
}

static void w_norm_fwd(struct dp_backend *be, enum dp_norm_kind kind, real *out, real *stats,
                       const real *inp, const real *w, const real *b, int64_t N, int64_t C)
{
    double t0 = enter(be);
    S(be)->in->norm_fwd(be, kind, out, stats, inp, w, b, N, C);
    leave(be, OP_NORM_FWD, t0);
}

static void w_norm_bwd(struct dp_backend *be, enum dp_norm_kind kind, real *dinp, real *dw,
                       real *db, const real *dout, const real *inp, const real *w,
                       const real *stats, int64_t N, int64_t C)
{
    double t0 = enter(be);
    S(be)->in->norm_bwd(be, kind, dinp, dw, db, dout, inp, w, stats, N, C);
    leave(be, OP_NORM_BWD, t0);
}

static void w_bias_fill(struct dp_backend *be, real *out, const real *bias, int64_t N, int64_t C)
{
    double t0 = enter(be);
    S(be)->in->bias_fill(be, out, bias, N, C);
    leave(be, OP_BIAS_FILL, t0);
}

static void w_bias_grad(struct dp_backend *be, real *db, const real *dout, int64_t N, int64_t C)
{
    double t0 = enter(be);
    S(be)->in->bias_grad(be, db, dout, N, C);
    leave(be, OP_BIAS_GRAD, t0);
}

static void w_residual(struct dp_backend *be, real *out, const real *a, const real *b,
                       const real *bias, int64_t N, int64_t C)
{
    double t0 = enter(be);
    S(be)->in->residual(be, out, a, b, bias, N, C);
    leave(be, OP_RESIDUAL, t0);
}

static void w_add_inplace(struct dp_backend *be, real *y, const real *x, int64_t n)
{
    double t0 = enter(be);
    S(be)->in->add_inplace(be, y, x, n);
    leave(be, OP_ADD_INPLACE, t0);
}

static void w_act_fwd(struct dp_backend *be, enum dp_ffn_kind kind, real *out, const real *inp,
                      int64_t N, int64_t F)
{
    double t0 = enter(be);
    S(be)->in->act_fwd(be, kind, out, inp, N, F);
    leave(be, OP_ACT_FWD, t0);
}

static void w_act_bwd(struct dp_backend *be, enum dp_ffn_kind kind, real *dinp, real *dbias,
                      const real *dout, const real *inp, int64_t N, int64_t F)
{
    double t0 = enter(be);
    S(be)->in->act_bwd(be, kind, dinp, dbias, dout, inp, N, F);
    leave(be, OP_ACT_BWD, t0);
}

static void w_qk_norm_fwd(struct dp_backend *be, real *x, int64_t ld, real *raw, real *rstd,
                          const real *wq, const real *wk, int64_t N, int nq, int nk, int d)
{
    double t0 = enter(be);
    S(be)->in->qk_norm_fwd(be, x, ld, raw, rstd, wq, wk, N, nq, nk, d);
    leave(be, OP_QK_NORM_FWD, t0);
}

static void w_qk_norm_bwd(struct dp_backend *be, real *dx, int64_t ld, real *dwq, real *dwk,
                          const real *raw, const real *rstd, const real *wq, const real *wk,
                          int64_t N, int nq, int nk, int d)
{
    double t0 = enter(be);
    S(be)->in->qk_norm_bwd(be, dx, ld, dwq, dwk, raw, rstd, wq, wk, N, nq, nk, d);
    leave(be, OP_QK_NORM_BWD, t0);
}

static void w_rope(struct dp_backend *be, real *x, int64_t ld, int64_t N, int64_t T, int nq, int nk,
                   int d, const real *cs, bool inverse)
{
    double t0 = enter(be);
    S(be)->in->rope(be, x, ld, N, T, nq, nk, d, cs, inverse);
    leave(be, OP_ROPE, t0);
}

static void w_attn_fwd(struct dp_backend *be, real *ctx, real *probs, const real *qkv, int64_t B,
                       int64_t T, int a, int g, int d)
{
    double t0 = enter(be);
    S(be)->in->attn_fwd(be, ctx, probs, qkv, B, T, a, g, d);
    leave(be, OP_ATTN_FWD, t0);
}

static void w_attn_probs(struct dp_backend *be, real *probs, const real *qkv, int64_t B, int64_t T,
                         int a, int g, int d)
{
    double t0 = enter(be);
    S(be)->in->attn_probs(be, probs, qkv, B, T, a, g, d);
    leave(be, OP_ATTN_PROBS, t0);
}

static void w_attn_bwd(struct dp_backend *be, real *dqkv, real *dprobs, const real *dctx,
                       const real *qkv, const real *probs, int64_t B, int64_t T, int a, int g,
                       int d)
{
    double t0 = enter(be);
    S(be)->in->attn_bwd(be, dqkv, dprobs, dctx, qkv, probs, B, T, a, g, d);
    leave(be, OP_ATTN_BWD, t0);
}

static void w_attn_flash_fwd(struct dp_backend *be, real *ctx, real *lse, const real *qkv,
                             int64_t B, int64_t T, int a, int g, int d)
{
    double t0 = enter(be);
    S(be)->in->attn_flash_fwd(be, ctx, lse, qkv, B, T, a, g, d);
    leave(be, OP_ATTN_FLASH_FWD, t0);
}

static void w_attn_flash_bwd(struct dp_backend *be, real *dqkv, real *dsum, const real *dctx,
                             const real *qkv, const real *ctx, const real *lse, int64_t B,
                             int64_t T, int a, int g, int d)
{
    double t0 = enter(be);
    S(be)->in->attn_flash_bwd(be, dqkv, dsum, dctx, qkv, ctx, lse, B, T, a, g, d);
    leave(be, OP_ATTN_FLASH_BWD, t0);
}

static void w_attn_ring_fwd(struct dp_backend *be, real *acc, real *mx, real *sm, const real *qkv,
                            int64_t ldq, const real *kv, const int qc[2], const int kc[2],
                            int64_t B, int64_t C, int a, int g, int d)
{
    double t0 = enter(be);
    S(be)->in->attn_ring_fwd(be, acc, mx, sm, qkv, ldq, kv, qc, kc, B, C, a, g, d);
    leave(be, OP_ATTN_RING_FWD, t0);
}

static void w_attn_ring_done(struct dp_backend *be, real *ctx, real *mx, const real *sm, int64_t B,
                             int64_t T, int a, int d)
{
    double t0 = enter(be);
    S(be)->in->attn_ring_done(be, ctx, mx, sm, B, T, a, d);
    leave(be, OP_ATTN_RING_DONE, t0);
}

static void w_attn_ring_dsum(struct dp_backend *be, real *dsum, const real *dctx, const real *ctx,
                             int64_t B, int64_t T, int a, int d)
{
    double t0 = enter(be);
    S(be)->in->attn_ring_dsum(be, dsum, dctx, ctx, B, T, a, d);
    leave(be, OP_ATTN_RING_DSUM, t0);
}

static void w_attn_ring_bwd(struct dp_backend *be, real *dq, real *dkv, const real *dctx,
                            const real *qkv, int64_t ldq, const real *kv, const real *lse,
                            const real *dsum, const int qc[2], const int kc[2], int64_t B,
                            int64_t C, int a, int g, int d)
{
    double t0 = enter(be);
    S(be)->in->attn_ring_bwd(be, dq, dkv, dctx, qkv, ldq, kv, lse, dsum, qc, kc, B, C, a, g, d);
    leave(be, OP_ATTN_RING_BWD, t0);
}

static void w_embed_fwd(struct dp_backend *be, real *out, const int32_t *tok, const real *wte,
                        int64_t v0, int64_t nv, int64_t N, int64_t C)
{
    double t0 = enter(be);
    S(be)->in->embed_fwd(be, out, tok, wte, v0, nv, N, C);
    leave(be, OP_EMBED_FWD, t0);
}

static void w_embed_bwd(struct dp_backend *be, real *dwte, const int32_t *tok, const real *dout,
                        int64_t v0, int64_t nv, int64_t N, int64_t C)
{
    double t0 = enter(be);
    S(be)->in->embed_bwd(be, dwte, tok, dout, v0, nv, N, C);
    leave(be, OP_EMBED_BWD, t0);
}

static void w_pos_fwd(struct dp_backend *be, real *out, const real *wpe, int64_t n0, int64_t N,
                      int64_t T, int64_t C)
{
    double t0 = enter(be);
    S(be)->in->pos_fwd(be, out, wpe, n0, N, T, C);
    leave(be, OP_POS_FWD, t0);
}

static void w_pos_bwd(struct dp_backend *be, real *dwpe, const real *dout, int64_t n0, int64_t N,
                      int64_t T, int64_t C)
{
    double t0 = enter(be);
    S(be)->in->pos_bwd(be, dwpe, dout, n0, N, T, C);
    leave(be, OP_POS_BWD, t0);
}

static void w_ce_max(struct dp_backend *be, real *rowmax, const real *logits, int64_t N, int64_t nv,
                     int64_t v0, int64_t vocab)
{
    double t0 = enter(be);
    S(be)->in->ce_max(be, rowmax, logits, N, nv, v0, vocab);
    leave(be, OP_CE_MAX, t0);
}

static void w_ce_sums(struct dp_backend *be, real *sums, const real *logits, const real *gmax,
                      const int32_t *tgt, int64_t N, int64_t nv, int64_t v0, int64_t vocab)
{
    double t0 = enter(be);
    S(be)->in->ce_sums(be, sums, logits, gmax, tgt, N, nv, v0, vocab);
    leave(be, OP_CE_SUMS, t0);
}

static void w_ce_grad(struct dp_backend *be, real *logits, real *loss, const real *gmax,
                      const real *sums, const int32_t *tgt, int64_t N, int64_t nv, int64_t v0,
                      int64_t vocab, real dloss)
{
    double t0 = enter(be);
    S(be)->in->ce_grad(be, logits, loss, gmax, sums, tgt, N, nv, v0, vocab, dloss);
    leave(be, OP_CE_GRAD, t0);
}

static void w_ce_fused(struct dp_backend *be, real *logits, real *loss, const int32_t *tgt,
                       int64_t N, int64_t nv, int64_t vocab, real dloss)
{
    double t0 = enter(be);
    S(be)->in->ce_fused(be, logits, loss, tgt, N, nv, vocab, dloss);
    leave(be, OP_CE_FUSED, t0);
}

static void w_router_topk(struct dp_backend *be, real *probs, int32_t *idx, real *w,
                          const real *bias, int64_t N, int E, int K)
{
    double t0 = enter(be);
    S(be)->in->router_topk(be, probs, idx, w, bias, N, E, K);
    leave(be, OP_ROUTER_TOPK, t0);
}

static void w_router_bwd(struct dp_backend *be, real *dl, const real *probs, const real *w,
                         const int32_t *idx, const int32_t *rrow, const real *dw, const real *gaux,
                         bool sigmoid, int64_t N, int E, int K)
{
    double t0 = enter(be);
    S(be)->in->router_bwd(be, dl, probs, w, idx, rrow, dw, gaux, sigmoid, N, E, K);
    leave(be, OP_ROUTER_BWD, t0);
}

static void w_rows_gather(struct dp_backend *be, real *dst, const real *src, const int32_t *idx,
                          const real *scale, int64_t R, int64_t C)
{
    double t0 = enter(be);
    S(be)->in->rows_gather(be, dst, src, idx, scale, R, C);
    leave(be, OP_ROWS_GATHER, t0);
}

static void w_rows_scatter_add(struct dp_backend *be, real *dst, const real *src,
                               const int32_t *idx, const real *scale, int64_t R, int64_t C)
{
    double t0 = enter(be);
    S(be)->in->rows_scatter_add(be, dst, src, idx, scale, R, C);
    leave(be, OP_ROWS_SCATTER_ADD, t0);
}

static void w_rows_dot(struct dp_backend *be, real *out, const real *a, const int32_t *idx,
                       const real *b, int64_t R, int64_t C)
{
    double t0 = enter(be);
    S(be)->in->rows_dot(be, out, a, idx, b, R, C);
    leave(be, OP_ROWS_DOT, t0);
}

static double w_sum(struct dp_backend *be, const real *x, int64_t n)
{
    double t0 = enter(be);
    double r = S(be)->in->sum(be, x, n);
    leave(be, OP_SUM, t0);
    return r;
}

static double w_sumsq(struct dp_backend *be, const real *x, int64_t n)
{
    double t0 = enter(be);
    double r = S(be)->in->sumsq(be, x, n);
    leave(be, OP_SUMSQ, t0);
    return r;
}

static void w_adamw(struct dp_backend *be, real *p, const real *grad, real *m, real *v, int64_t n,
                    double lr, double beta1, double beta2, double eps, double wd, double bc1,
                    double bc2, double gscale)
{
    double t0 = enter(be);
    S(be)->in->adamw(be, p, grad, m, v, n, lr, beta1, beta2, eps, wd, bc1, bc2, gscale);
    leave(be, OP_ADAMW, t0);
}

static int w_allreduce(struct dp_backend *be, enum dp_group g, real *buf, int64_t n,
                       enum dp_redop op, struct dp_err *err)
{
    double t0 = enter(be);
    int r = S(be)->in->allreduce(be, g, buf, n, op, err);
    leave(be, OP_ALLREDUCE, t0);
    return r;
}

static int w_reduce_scatter(struct dp_backend *be, enum dp_group g, real *buf, int64_t chunk,
                            struct dp_err *err)
{
    double t0 = enter(be);
    int r = S(be)->in->reduce_scatter(be, g, buf, chunk, err);
    leave(be, OP_REDUCE_SCATTER, t0);
    return r;
}

static int w_allgather(struct dp_backend *be, enum dp_group g, real *buf, int64_t chunk,
                       struct dp_err *err)
{
    double t0 = enter(be);
    int r = S(be)->in->allgather(be, g, buf, chunk, err);
    leave(be, OP_ALLGATHER, t0);
    return r;
}

static int w_reduce_scatter_v(struct dp_backend *be, enum dp_group g, real *buf, const int *counts,
                              struct dp_err *err)
{
    double t0 = enter(be);
    int r = S(be)->in->reduce_scatter_v(be, g, buf, counts, err);
    leave(be, OP_REDUCE_SCATTER_V, t0);
    return r;
}

static int w_allgather_v(struct dp_backend *be, enum dp_group g, real *buf, const int *counts,
                         struct dp_err *err)
{
    double t0 = enter(be);
    int r = S(be)->in->allgather_v(be, g, buf, counts, err);
    leave(be, OP_ALLGATHER_V, t0);
    return r;
}

static int w_alltoall_v(struct dp_backend *be, enum dp_group g, const real *sbuf,
                        const int *scounts, real *rbuf, const int *rcounts, struct dp_err *err)
{
    double t0 = enter(be);
    int r = S(be)->in->alltoall_v(be, g, sbuf, scounts, rbuf, rcounts, err);
    leave(be, OP_ALLTOALL_V, t0);
    return r;
}

static int w_allgather_v_start(struct dp_backend *be, enum dp_group g, real *buf, const int *counts,
                               struct dp_err *err)
{
    double t0 = enter(be);
    int r = S(be)->in->allgather_v_start(be, g, buf, counts, err);
    leave(be, OP_ALLGATHER_V_START, t0);
    return r;
}

static int w_allgather_v_wait(struct dp_backend *be, struct dp_err *err)
{
    double t0 = enter(be);
    int r = S(be)->in->allgather_v_wait(be, err);
    leave(be, OP_ALLGATHER_V_WAIT, t0);
    return r;
}

static int w_allreduce_host(struct dp_backend *be, enum dp_group g, double *buf, int n,
                            enum dp_redop op, struct dp_err *err)
{
    double t0 = enter(be);
    int r = S(be)->in->allreduce_host(be, g, buf, n, op, err);
    leave(be, OP_ALLREDUCE_HOST, t0);
    return r;
}

static int w_gather_host(struct dp_backend *be, enum dp_group g, const double *in, double *out,
                         int n, struct dp_err *err)
{
    double t0 = enter(be);
    int r = S(be)->in->gather_host(be, g, in, out, n, err);
    leave(be, OP_GATHER_HOST, t0);
    return r;
}

static int w_sendrecv(struct dp_backend *be, enum dp_group g, int to, const real *sbuf, int64_t sn,
                      int stag, int from, real *rbuf, int64_t rn, int rtag, struct dp_err *err)
{
    double t0 = enter(be);
    int r = S(be)->in->sendrecv(be, g, to, sbuf, sn, stag, from, rbuf, rn, rtag, err);
    leave(be, OP_SENDRECV, t0);
    return r;
}

static int w_p2p(struct dp_backend *be, enum dp_group g, const struct dp_p2p *ops, int n,
                 struct dp_err *err)
{
    double t0 = enter(be);
    int r = S(be)->in->p2p(be, g, ops, n, err);
    leave(be, OP_P2P, t0);
    return r;
}

static int w_barrier(struct dp_backend *be, enum dp_group g, struct dp_err *err)
{
    double t0 = enter(be);
    int r = S(be)->in->barrier(be, g, err);
    leave(be, OP_BARRIER, t0);
    return r;
}

static int w_allreduce_start(struct dp_backend *be, enum dp_group g, real *buf, int64_t n,
                             enum dp_redop op, int *req, struct dp_err *err)
{
    double t0 = enter(be);
    int r = S(be)->in->allreduce_start(be, g, buf, n, op, req, err);
    leave(be, OP_ALLREDUCE_START, t0);
    return r;
}

static int w_reduce_scatter_v_start(struct dp_backend *be, enum dp_group g, real *buf,
                                    const int *counts, int *req, struct dp_err *err)
{
    double t0 = enter(be);
    int r = S(be)->in->reduce_scatter_v_start(be, g, buf, counts, req, err);
    leave(be, OP_REDUCE_SCATTER_V_START, t0);
    return r;
}

static int w_req_wait(struct dp_backend *be, int req, struct dp_err *err)
{
    double t0 = enter(be);
    int r = S(be)->in->req_wait(be, req, err);
    leave(be, OP_REQ_WAIT, t0);
    return r;
}

static void w_round_store(struct dp_backend *be, real *x, int64_t n)
{
    double t0 = enter(be);
    S(be)->in->round_store(be, x, n);
    leave(be, OP_ROUND_STORE, t0);
}

static void w_gemm_fp8(struct dp_backend *be, bool ta, bool tb, int m, int n, int k, real alpha,
                       const real *a, int lda, enum dp_f8 fa, const real *b, int ldb, enum dp_f8 fb,
                       real beta, real *c, int ldc)
{
    double t0 = enter(be);
    S(be)->in->gemm_fp8(be, ta, tb, m, n, k, alpha, a, lda, fa, b, ldb, fb, beta, c, ldc);
    leave(be, OP_GEMM_FP8, t0);
}

static void w_gemm_bias(struct dp_backend *be, bool ta, bool tb, int m, int n, int k, const real *a,
                        int lda, const real *b, int ldb, const real *bias, real *c, int ldc)
{
    double t0 = enter(be);
    S(be)->in->gemm_bias(be, ta, tb, m, n, k, a, lda, b, ldb, bias, c, ldc);
    leave(be, OP_GEMM_BIAS, t0);
}

static void install(struct dp_backend_ops *t, const struct dp_backend_ops *in)
{
    t->upload = in->upload ? w_upload : NULL;
    t->download = in->download ? w_download : NULL;
    t->zero = in->zero ? w_zero : NULL;
    t->copy = in->copy ? w_copy : NULL;
    t->gemm = in->gemm ? w_gemm : NULL;
    t->norm_fwd = in->norm_fwd ? w_norm_fwd : NULL;
    t->norm_bwd = in->norm_bwd ? w_norm_bwd : NULL;
    t->bias_fill = in->bias_fill ? w_bias_fill : NULL;
    t->bias_grad = in->bias_grad ? w_bias_grad : NULL;
    t->residual = in->residual ? w_residual : NULL;
    t->add_inplace = in->add_inplace ? w_add_inplace : NULL;
    t->act_fwd = in->act_fwd ? w_act_fwd : NULL;
    t->act_bwd = in->act_bwd ? w_act_bwd : NULL;
    t->qk_norm_fwd = in->qk_norm_fwd ? w_qk_norm_fwd : NULL;
    t->qk_norm_bwd = in->qk_norm_bwd ? w_qk_norm_bwd : NULL;
    t->rope = in->rope ? w_rope : NULL;
    t->attn_fwd = in->attn_fwd ? w_attn_fwd : NULL;
    t->attn_probs = in->attn_probs ? w_attn_probs : NULL;
    t->attn_bwd = in->attn_bwd ? w_attn_bwd : NULL;
    t->attn_flash_fwd = in->attn_flash_fwd ? w_attn_flash_fwd : NULL;
    t->attn_flash_bwd = in->attn_flash_bwd ? w_attn_flash_bwd : NULL;
    t->attn_ring_fwd = in->attn_ring_fwd ? w_attn_ring_fwd : NULL;
    t->attn_ring_done = in->attn_ring_done ? w_attn_ring_done : NULL;
    t->attn_ring_dsum = in->attn_ring_dsum ? w_attn_ring_dsum : NULL;
    t->attn_ring_bwd = in->attn_ring_bwd ? w_attn_ring_bwd : NULL;
    t->embed_fwd = in->embed_fwd ? w_embed_fwd : NULL;
    t->embed_bwd = in->embed_bwd ? w_embed_bwd : NULL;
    t->pos_fwd = in->pos_fwd ? w_pos_fwd : NULL;
    t->pos_bwd = in->pos_bwd ? w_pos_bwd : NULL;
    t->ce_max = in->ce_max ? w_ce_max : NULL;
    t->ce_sums = in->ce_sums ? w_ce_sums : NULL;
    t->ce_grad = in->ce_grad ? w_ce_grad : NULL;
    t->ce_fused = in->ce_fused ? w_ce_fused : NULL;
    t->router_topk = in->router_topk ? w_router_topk : NULL;
    t->router_bwd = in->router_bwd ? w_router_bwd : NULL;
    t->rows_gather = in->rows_gather ? w_rows_gather : NULL;
    t->rows_scatter_add = in->rows_scatter_add ? w_rows_scatter_add : NULL;
    t->rows_dot = in->rows_dot ? w_rows_dot : NULL;
    t->sum = in->sum ? w_sum : NULL;
    t->sumsq = in->sumsq ? w_sumsq : NULL;
    t->adamw = in->adamw ? w_adamw : NULL;
    t->allreduce = in->allreduce ? w_allreduce : NULL;
    t->reduce_scatter = in->reduce_scatter ? w_reduce_scatter : NULL;
    t->allgather = in->allgather ? w_allgather : NULL;
    t->reduce_scatter_v = in->reduce_scatter_v ? w_reduce_scatter_v : NULL;
    t->allgather_v = in->allgather_v ? w_allgather_v : NULL;
    t->alltoall_v = in->alltoall_v ? w_alltoall_v : NULL;
    t->allgather_v_start = in->allgather_v_start ? w_allgather_v_start : NULL;
    t->allgather_v_wait = in->allgather_v_wait ? w_allgather_v_wait : NULL;
    t->allreduce_host = in->allreduce_host ? w_allreduce_host : NULL;
    t->gather_host = in->gather_host ? w_gather_host : NULL;
    t->sendrecv = in->sendrecv ? w_sendrecv : NULL;
    t->p2p = in->p2p ? w_p2p : NULL;
    t->barrier = in->barrier ? w_barrier : NULL;
    t->allreduce_start = in->allreduce_start ? w_allreduce_start : NULL;
    t->reduce_scatter_v_start = in->reduce_scatter_v_start ? w_reduce_scatter_v_start : NULL;
    t->req_wait = in->req_wait ? w_req_wait : NULL;
    t->round_store = in->round_store ? w_round_store : NULL;
    t->gemm_fp8 = in->gemm_fp8 ? w_gemm_fp8 : NULL;
    t->gemm_bias = in->gemm_bias ? w_gemm_bias : NULL;
}

const char *dp__optime_dir(void)
{
    const char *d = getenv("DPLAN_OPTIME");
    return d && *d ? d : NULL;
}

int dp__optime_wrap(struct dp_backend *be, double (*clock)(struct dp_backend *be))
{
    struct slot *s = !slots[0].be ? &slots[0] : !slots[1].be ? &slots[1] : NULL;
    if (!s)
        return -1;
    memset(s, 0, sizeof *s);
    s->be = be;
    s->in = be->ops;
    s->ops = *be->ops;
    s->clock = clock;
    install(&s->ops, s->in);
    be->ops = &s->ops;
    return 0;
}

void dp__optime_begin(struct dp_backend *be)
{
    struct slot *s = S(be);
    if (s->be != be)
        return;
    memset(s->acc, 0, sizeof s->acc);
    memset(s->cnt, 0, sizeof s->cnt);
    memset(s->gacc, 0, sizeof s->gacc);
    memset(s->gcnt, 0, sizeof s->gcnt);
}

void dp__optime_end(struct dp_backend *be, double step_s)
{
    struct slot *s = S(be);
    if (s->be != be)
        return;
    if (s->nsteps == s->cap) {
        int cap = s->cap ? 2 * s->cap : 64;
        double *st = realloc(s->steps, (size_t)cap * (OP_N + 2) * sizeof *st);
        if (!st)
            return;
        s->steps = st;
        long *ca = realloc(s->calls, (size_t)cap * OP_N * sizeof *ca);
        if (!ca)
            return;
        s->calls = ca;
        s->cap = cap;
    }
    double *row = s->steps + (size_t)s->nsteps * (OP_N + 2), sum = 0;
    memcpy(row, s->acc, sizeof s->acc);
    for (int j = 0; j < OP_N; j++)
        sum += s->acc[j];
    row[OP_N] = step_s;
    row[OP_N + 1] = step_s - sum; /* the step code's own time, and any preemption there */
    memcpy(s->calls + (size_t)s->nsteps * OP_N, s->cnt, sizeof s->cnt);
    /* GEMM shapes: summed from the second step on (the first faults pages in), or
     * the only step. */
    for (int i = 0; i < s->nshp; i++) {
        if (s->nsteps == 1)
            s->shp[i].s = 0, s->shp[i].n_calls = 0;
        s->shp[i].s += s->gacc[i];
        s->shp[i].n_calls += s->gcnt[i];
    }
    s->nsteps++;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* The median of column j over the steps kept (rows first..n-1). */
static double median_col(const struct slot *s, int first, int j, double *tmp)
{
    int n = 0;
    for (int r = first; r < s->nsteps; r++)
        tmp[n++] = s->steps[(size_t)r * (OP_N + 2) + j];
    if (!n)
        return 0;
    qsort(tmp, (size_t)n, sizeof *tmp, cmp_d);
    return n % 2 ? tmp[n / 2] : 0.5 * (tmp[n / 2 - 1] + tmp[n / 2]);
}

int dp__optime_finish(struct dp_backend *be, const char *name)
{
    struct slot *s = S(be);
    if (s->be != be)
        return 0;
    be->ops = s->in;
    const char *dir = dp__optime_dir();
    int rc = 0;
    double *tmp = malloc((size_t)(s->nsteps > 0 ? s->nsteps : 1) * sizeof *tmp);
    char path[4200];
    snprintf(path, sizeof path, "%s/%s.tsv", dir ? dir : ".", name);
    FILE *f = dir && tmp ? fopen(path, "w") : NULL;
    if (f) {
        const int first = s->nsteps >= 2 ? 1 : 0, kept = s->nsteps - first;
        fprintf(f, "# %s: %d steps kept of %d; seconds per step (median over the steps)\n", name,
                kept, s->nsteps);
        fprintf(f, "op\tcalls\ts\n");
        for (int j = 0; j < OP_N; j++) {
            long calls = kept > 0 ? s->calls[(size_t)(s->nsteps - 1) * OP_N + j] : 0;
            double t = median_col(s, first, j, tmp);
            if (calls || t > 0)
                fprintf(f, "%s\t%ld\t%.12g\n", op_name[j], calls, t);
        }
        fprintf(f, "step\t0\t%.12g\n", median_col(s, first, OP_N, tmp));
        fprintf(f, "untimed\t0\t%.12g\n", median_col(s, first, OP_N + 1, tmp));
        for (int i = 0; i < s->nshp; i++)
            if (s->shp[i].n_calls)
                fprintf(f, "gemm %c%c %dx%dx%d\t%ld\t%.12g\n", s->shp[i].ta ? 'T' : 'N',
                        s->shp[i].tb ? 'T' : 'N', s->shp[i].m, s->shp[i].n, s->shp[i].k,
                        kept > 0 ? s->shp[i].n_calls / kept : 0, kept > 0 ? s->shp[i].s / kept : 0);
        if (fclose(f))
            rc = -1;
    } else if (dir) {
        rc = -1;
    }
    free(tmp);
    free(s->steps);
    free(s->calls);
    memset(s, 0, sizeof *s);
    return rc;
}
