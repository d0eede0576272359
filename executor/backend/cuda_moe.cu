/*
 * CUDA backend kernels for mixture of experts (the router's scores and top-k, its
 * backward, the row gathers and scatters of dispatch and combine) and for Qwen3's q/k
 * RMSNorm: the semantics of backend.h, the arithmetic of cpu_moe.c and cpu_qknorm.c
 * (the per-row code is shared with the host test through cuda_moe.h).
 *
 * First correct, then fast: one thread per router row (E and K are small: 8-256
 * experts, top 1-8) and per q/k head; rows_scatter_add is one thread per column walking
 * the rows in order, which is deterministic and sums each destination in the CPU's
 * order but uses only C threads (a sorted inverse map would use R C; docs/gpu.md).
 * The q/k weights' gradient is a fixed-shape block reduction in double (deterministic;
 * its order differs from the CPU's row order, so results agree to rounding).
 */
#include "cuda_moe.h"

#include <cuda_runtime.h>

#include "cuda_grid.cuh"

/* ------------------------------------------------------------------ router */

__global__ static void k_router_topk(float *probs, int32_t *idx, float *w, const float *bias,
                                     int64_t N, int E, int K)
{
    FOR_N(n, N)
    dp__moe_topk_row(probs + n * E, idx + n * K, w + n * K, bias, E, K);
}

extern "C" void dp__cuk_router_topk(void *stream, float *probs, int32_t *idx, float *w,
                                    const float *bias, int64_t N, int E, int K)
{
    if (N > 0 && E > 0 && K > 0)
        k_router_topk<<<blocks_for(N, 128), 128, 0, S(stream)>>>(probs, idx, w, bias, N, E, K);
}

__global__ static void k_router_bwd(float *dl, const float *probs, const float *w,
                                    const int32_t *idx, const int32_t *rrow, const float *dw,
                                    const float *gaux, bool sigmoid, int64_t N, int E, int K)
{
    FOR_N(n, N)
    dp__moe_router_bwd_row(dl + n * E, probs + n * E, w + n * K, idx + n * K, rrow + n * K, dw,
                           gaux, sigmoid, E, K);
}

extern "C" void dp__cuk_router_bwd(void *stream, float *dl, const float *probs, const float *w,
                                   const int32_t *idx, const int32_t *rrow, const float *dw,
                                   const float *gaux, bool sigmoid, int64_t N, int E, int K)
{
    if (N > 0 && E > 0 && K > 0)
        k_router_bwd<<<blocks_for(N, 128), 128, 0, S(stream)>>>(dl, probs, w, idx, rrow, dw, gaux,
                                                              sigmoid, N, E, K);
}

/* ------------------------------------------------------------------ rows */

/* dst may be src with idx the identity (the shared expert's gate, moe.c): each element
 * is read and written by the same thread. */
__global__ static void k_rows_gather(float *dst, const float *src, const int32_t *idx,
                                     const float *scale, int64_t R, int64_t C)
{
    FOR_N(e, R * C)
    {
        int64_t r = e / C, c = e % C;
        float v = src[(int64_t)idx[r] * C + c];
        dst[e] = scale ? scale[r] * v : v;
    }
}

extern "C" void dp__cuk_rows_gather(void *stream, float *dst, const float *src, const int32_t *idx,
                                    const float *scale, int64_t R, int64_t C)
{
    if (R > 0 && C > 0)
        k_rows_gather<<<blocks_for(R * C), THREADS, 0, S(stream)>>>(dst, src, idx, scale, R, C);
}

/* Column c of every destination row gets its rows' terms in r order: the CPU's sum
 * (cpu_moe.c splits the columns among threads the same way). */
__global__ static void k_rows_scatter_add(float *dst, const float *src, const int32_t *idx,
                                          const float *scale, int64_t R, int64_t C)
{
    FOR_N(c, C)
    dp__moe_scatter_col(dst, src, idx, scale, R, C, c);
}

extern "C" void dp__cuk_rows_scatter_add(void *stream, float *dst, const float *src,
                                         const int32_t *idx, const float *scale, int64_t R,
                                         int64_t C)
{
    if (R > 0 && C > 0)
        k_rows_scatter_add<<<blocks_for(C, 128), 128, 0, S(stream)>>>(dst, src, idx, scale, R, C);
}

/* One warp per row, in double (the CPU's sum is sequential in double: the orders differ
 * in double's last bits, which the rounding to float almost always hides). */
__global__ static void k_rows_dot(float *out, const float *a, const int32_t *idx, const float *b,
                                  int64_t R, int64_t C)
{
    int64_t r = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) / 32;
    int lane = threadIdx.x % 32;
    if (r >= R)
        return;
    const float *x = a + (int64_t)idx[r] * C, *y = b + r * C;
    double s = 0;
    for (int64_t c = lane; c < C; c += 32)
        s += (double)x[c] * y[c];
    for (int o = 16; o > 0; o >>= 1)
        s += __shfl_xor_sync(0xffffffffu, s, o);
    if (lane == 0)
        out[r] = (float)s;
}

extern "C" void dp__cuk_rows_dot(void *stream, float *out, const float *a, const int32_t *idx,
                                 const float *b, int64_t R, int64_t C)
{
    if (R > 0)
        k_rows_dot<<<blocks_for(R * 32), THREADS, 0, S(stream)>>>(out, a, idx, b, R, C);
}

/* ------------------------------------------------------------------ q/k norm */

__global__ static void k_qkn_fwd(float *x, int64_t ld, float *raw, float *rstd, const float *wq,
                                 const float *wk, int64_t N, int nq, int nk, int d, double eps)
{
    const int H = nq + nk;
    FOR_N(r, N * H)
    dp__qkn_fwd_head(x + dp__qkn_at(r, H, ld, d), raw + r * d, rstd + r, (r % H) < nq ? wq : wk,
                     d, eps);
}

extern "C" void dp__cuk_qk_norm_fwd(void *stream, float *x, int64_t ld, float *raw, float *rstd,
                                    const float *wq, const float *wk, int64_t N, int nq, int nk,
                                    int d, float eps)
{
    if (N > 0 && nq + nk > 0 && d > 0)
        k_qkn_fwd<<<blocks_for(N * (nq + nk), 128), 128, 0, S(stream)>>>(x, ld, raw, rstd, wq, wk, N,
                                                                       nq, nk, d, (double)eps);
}

/* dw_c += sum over the heads of one kind (query: i < nq, key: i >= nq) of g_c x_c rstd.
 * Block (32 columns x 8 row phases) per (kind, tile of 32 columns); each thread sums
 * every 8th head in double, then the 8 partials are added in a fixed order. */
#define QKN_PH 8
__global__ static void k_qkn_dw(float *dwq, float *dwk, const float *g, int64_t ld,
                                const float *raw, const float *rstd, int64_t N, int nq, int nk,
                                int d)
{
    __shared__ double part[QKN_PH][32];
    const int tiles = (d + 31) / 32, kind = blockIdx.x / tiles;
    const int c = (blockIdx.x % tiles) * 32 + threadIdx.x, ph = threadIdx.y;
    if ((kind ? nk : nq) == 0)
        return; /* the whole block: no heads of this kind (and maybe no weight) */
    double s = c < d ? dp__qkn_dw_part(g, ld, raw, rstd, N, nq, nk, d, kind, c, ph, QKN_PH) : 0;
    part[ph][threadIdx.x] = s;
    __syncthreads();
    if (ph == 0 && c < d) {
        for (int p = 1; p < QKN_PH; p++)
            s += part[p][threadIdx.x];
        float *dw = kind ? dwk : dwq;
        dw[c] += (float)s;
    }
}

__global__ static void k_qkn_dx(float *dx, int64_t ld, const float *raw, const float *rstd,
                                const float *wq, const float *wk, int64_t N, int nq, int nk, int d)
{
    const int H = nq + nk;
    FOR_N(r, N * H)
    dp__qkn_bwd_head(dx + dp__qkn_at(r, H, ld, d), raw + r * d, (r % H) < nq ? wq : wk,
                     (double)rstd[r], d);
}

extern "C" void dp__cuk_qk_norm_bwd(void *stream, float *dx, int64_t ld, float *dwq, float *dwk,
                                    const float *raw, const float *rstd, const float *wq,
                                    const float *wk, int64_t N, int nq, int nk, int d)
{
    if (N <= 0 || nq + nk <= 0 || d <= 0)
        return;
    /* The weights' gradient first: it reads dL/dy, which the second kernel overwrites. */
    const int tiles = (d + 31) / 32;
    k_qkn_dw<<<2 * tiles, dim3(32, QKN_PH), 0, S(stream)>>>(dwq, dwk, dx, ld, raw, rstd, N, nq, nk,
                                                            d);
    k_qkn_dx<<<blocks_for(N * (nq + nk), 128), 128, 0, S(stream)>>>(dx, ld, raw, rstd, wq, wk, N, nq,
                                                                  nk, d);
}
