/*
 * The CUDA backend's mixture-of-experts and q/k-norm operations (backend.h): thin
 * wrappers over the kernels of cuda_moe.cu, queued on the backend's one stream. Kept
 * apart from cuda_ops.c so that the two families change independently.
 */
#include "cuda.h"
#include "cuda_moe.h"

#define ST(be) ((void *)dp__cu(be)->stream)

static void cu_router_topk(struct dp_backend *be, real *probs, int32_t *idx, real *w,
                           const real *bias, int64_t N, int E, int K)
{
    dp__cuk_router_topk(ST(be), probs, idx, w, bias, N, E, K);
}

static void cu_router_bwd(struct dp_backend *be, real *dl, const real *probs, const real *w,
                          const int32_t *idx, const int32_t *rrow, const real *dw, const real *gaux,
                          bool sigmoid, int64_t N, int E, int K)
{
    dp__cuk_router_bwd(ST(be), dl, probs, w, idx, rrow, dw, gaux, sigmoid, N, E, K);
}

static void cu_rows_gather(struct dp_backend *be, real *dst, const real *src, const int32_t *idx,
                           const real *scale, int64_t R, int64_t C)
{
    dp__cuk_rows_gather(ST(be), dst, src, idx, scale, R, C);
}

static void cu_rows_scatter_add(struct dp_backend *be, real *dst, const real *src,
                                const int32_t *idx, const real *scale, int64_t R, int64_t C)
{
    dp__cuk_rows_scatter_add(ST(be), dst, src, idx, scale, R, C);
}

static void cu_rows_dot(struct dp_backend *be, real *out, const real *a, const int32_t *idx,
                        const real *b, int64_t R, int64_t C)
{
    dp__cuk_rows_dot(ST(be), out, a, idx, b, R, C);
}

static void cu_qk_norm_fwd(struct dp_backend *be, real *x, int64_t ld, real *raw, real *rstd,
                           const real *wq, const real *wk, int64_t N, int nq, int nk, int d)
{
    dp__cuk_qk_norm_fwd(ST(be), x, ld, raw, rstd, wq, wk, N, nq, nk, d, (float)DP_NORM_EPS);
}

static void cu_qk_norm_bwd(struct dp_backend *be, real *dx, int64_t ld, real *dwq, real *dwk,
                           const real *raw, const real *rstd, const real *wq, const real *wk,
                           int64_t N, int nq, int nk, int d)
{
    dp__cuk_qk_norm_bwd(ST(be), dx, ld, dwq, dwk, raw, rstd, wq, wk, N, nq, nk, d);
}

void dp__cuda_fill_moe(struct dp_backend_ops *o)
{
    o->router_topk = cu_router_topk;
    o->router_bwd = cu_router_bwd;
    o->rows_gather = cu_rows_gather;
    o->rows_scatter_add = cu_rows_scatter_add;
    o->rows_dot = cu_rows_dot;
    o->qk_norm_fwd = cu_qk_norm_fwd;
    o->qk_norm_bwd = cu_qk_norm_bwd;
}
