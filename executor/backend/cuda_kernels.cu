/*
 * CUDA backend kernels: initialisation, norms, the small passes around the GEMMs,
 * activations, RoPE, embeddings, cross-entropy, reductions and AdamW, with the
 * semantics of backend.h and the formulas of the CPU kernels (cpu_norm.c,
 * cpu_loss.c, cpu_optim.c: LayerNorm and GELU backward as in llm.c train_gpt2.c,
 * RMSNorm after Zhang & Sennrich 2019, SwiGLU after Shazeer 2020, GPT-NeoX rotate-half
 * RoPE). First correct, then fast: one warp per row for the row reductions, atomics for
 * the column sums of parameter gradients (their order differs from the CPU's, so results
 * agree to rounding, not bit for bit). Causal softmax: cuda_softmax.cu.
 */
#include "cuda_kernels.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <math.h>

#include "executor/rng_mix.h"

#include "cuda_grid.cuh"
#include "pack16.h"

__device__ static inline float warp_sum(float v)
{
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ static inline float warp_max(float v)
{
    for (int o = 16; o > 0; o >>= 1)
        v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

/* ------------------------------------------------------------------ init */

__global__ static void k_init_fill(float *dst, int64_t rows, int64_t cols, int64_t gcols,
                                   int64_t r0, int64_t c0, uint64_t seed, uint64_t key, double std,
                                   double value)
{
    FOR_N(e, rows * cols)
    {
        int64_t i = e / cols, j = e % cols;
        uint64_t idx = (uint64_t)((r0 + i) * gcols + c0 + j);
        dst[e] = (float)(std > 0 ? std * dp__rng_normal_at(seed, key, idx) : value);
    }
}

extern "C" void dp__cuk_init_fill(void *stream, float *dst, int64_t rows, int64_t cols,
                                  int64_t gcols, int64_t r0, int64_t c0, uint64_t seed,
                                  uint64_t key, double std, double value)
{
    k_init_fill<<<blocks_for(rows * cols), THREADS, 0, S(stream)>>>(dst, rows, cols, gcols, r0, c0,
                                                                   seed, key, std, value);
}

/* ------------------------------------------------------------------ norms */

/* One warp per row: mean, then the variance of x - mean (two passes, as the CPU). */
__global__ static void k_norm_fwd(int ln, float *out, float *stats, const float *inp,
                                  const float *w, const float *b, int64_t N, int64_t C, float eps)
{
    int64_t n = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) / 32;
    int lane = threadIdx.x % 32;
    if (n >= N)
        return;
    const float *x = inp + n * C;
    float mean = 0, var = 0;
    if (ln) {
        for (int64_t i = lane; i < C; i += 32)
            mean += x[i];
        mean = warp_sum(mean) / (float)C;
    }
    for (int64_t i = lane; i < C; i += 32) {
        float xm = x[i] - mean;
        var += xm * xm;
    }
    var = warp_sum(var) / (float)C;
    float rstd = 1.0f / sqrtf(var + eps);
    float *y = out + n * C;
    for (int64_t i = lane; i < C; i += 32)
        y[i] = (x[i] - mean) * rstd * w[i] + (b ? b[i] : 0.0f);
    if (lane == 0) {
        stats[2 * n] = mean;
        stats[2 * n + 1] = rstd;
    }
}

extern "C" void dp__cuk_norm_fwd(void *stream, int ln, float *out, float *stats, const float *inp,
                                 const float *w, const float *b, int64_t N, int64_t C, float eps)
{
    k_norm_fwd<<<blocks_for(N * 32), THREADS, 0, S(stream)>>>(ln, out, stats, inp, w, b, N, C, eps);
}

/* Input gradient, one warp per row: LayerNorm dx = rstd (dn - mean(dn) - xhat
 * mean(dn xhat)), dn = dy w; RMSNorm without the mean(dn) term. Accumulates (+=). */
__global__ static void k_norm_bwd_inp(int ln, float *dinp, const float *dout, const float *inp,
                                      const float *w, const float *stats, int64_t N, int64_t C)
{
    int64_t n = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) / 32;
    int lane = threadIdx.x % 32;
    if (n >= N)
        return;
    const float *x = inp + n * C, *dy = dout + n * C;
    float *dx = dinp + n * C;
    const float mean = stats[2 * n], rstd = stats[2 * n + 1];
    float dm = 0, dxm = 0;
    for (int64_t i = lane; i < C; i += 32) {
        float xhat = (x[i] - mean) * rstd, dn = dy[i] * w[i];
        dm += dn;
        dxm += dn * xhat;
    }
    dm = ln ? warp_sum(dm) / (float)C : 0.0f;
    dxm = warp_sum(dxm) / (float)C;
    for (int64_t i = lane; i < C; i += 32) {
        float xhat = (x[i] - mean) * rstd, dn = dy[i] * w[i];
        dx[i] += (dn - dm - xhat * dxm) * rstd;
    }
}

/* Rows in chunks of ROWS_PER per thread, one thread per column, then one atomic. */
#define ROWS_PER 64

__global__ static void k_norm_bwd_params(float *dw, float *db, const float *dout, const float *inp,
                                         const float *stats, int64_t N, int64_t C)
{
    int64_t c = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    int64_t n0 = (int64_t)blockIdx.y * ROWS_PER, n1 = n0 + ROWS_PER < N ? n0 + ROWS_PER : N;
    if (c >= C)
        return;
    float gw = 0, gb = 0;
    for (int64_t n = n0; n < n1; n++) {
        float dy = dout[n * C + c];
        gw += dy * ((inp[n * C + c] - stats[2 * n]) * stats[2 * n + 1]);
        gb += dy;
    }
    atomicAdd(dw + c, gw);
    if (db)
        atomicAdd(db + c, gb);
}

extern "C" void dp__cuk_norm_bwd(void *stream, int ln, float *dinp, float *dw, float *db,
                                 const float *dout, const float *inp, const float *w,
                                 const float *stats, int64_t N, int64_t C)
{
    k_norm_bwd_inp<<<blocks_for(N * 32), THREADS, 0, S(stream)>>>(ln, dinp, dout, inp, w, stats, N,
                                                                 C);
    if (dw) {
        dim3 grid(blocks_for(C), (unsigned)((N + ROWS_PER - 1) / ROWS_PER));
        k_norm_bwd_params<<<grid, THREADS, 0, S(stream)>>>(dw, db, dout, inp, stats, N, C);
    }
}

/* ------------------------------------------------------------------ small ops */

__global__ static void k_bias_fill(float *out, const float *bias, int64_t N, int64_t C)
{
    FOR_N(e, N * C)
    out[e] = bias ? bias[e % C] : 0.0f;
}

extern "C" void dp__cuk_bias_fill(void *stream, float *out, const float *bias, int64_t N, int64_t C)
{
    k_bias_fill<<<blocks_for(N * C), THREADS, 0, S(stream)>>>(out, bias, N, C);
}

__global__ static void k_col_sum(float *db, const float *x, int64_t N, int64_t C)
{
    int64_t c = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    int64_t n0 = (int64_t)blockIdx.y * ROWS_PER, n1 = n0 + ROWS_PER < N ? n0 + ROWS_PER : N;
    if (c >= C)
        return;
    float s = 0;
    for (int64_t n = n0; n < n1; n++)
        s += x[n * C + c];
    atomicAdd(db + c, s);
}

extern "C" void dp__cuk_col_sum(void *stream, float *db, const float *x, int64_t N, int64_t C)
{
    if (N <= 0 || C <= 0)
        return;
    dim3 grid(blocks_for(C), (unsigned)((N + ROWS_PER - 1) / ROWS_PER));
    k_col_sum<<<grid, THREADS, 0, S(stream)>>>(db, x, N, C);
}

__global__ static void k_residual(float *out, const float *a, const float *b, const float *bias,
                                  int64_t N, int64_t C)
{
    FOR_N(e, N * C)
    out[e] = a[e] + (b ? b[e] : 0.0f) + (bias ? bias[e % C] : 0.0f);
}

extern "C" void dp__cuk_residual(void *stream, float *out, const float *a, const float *b,
                                 const float *bias, int64_t N, int64_t C)
{
    k_residual<<<blocks_for(N * C), THREADS, 0, S(stream)>>>(out, a, b, bias, N, C);
}

__global__ static void k_add(float *y, const float *x, int64_t n)
{
    FOR_N(i, n)
    y[i] += x[i];
}

extern "C" void dp__cuk_add(void *stream, float *y, const float *x, int64_t n)
{
    k_add<<<blocks_for(n), THREADS, 0, S(stream)>>>(y, x, n);
}

/* The CUDA conversions round to nearest even (the _rn suffix); fp16 overflows to inf as
 * IEEE 754 rounding does, as the CPU's round.h. */
__global__ static void k_round(float *x, int64_t n, int fp16)
{
    FOR_N(i, n)
    x[i] = fp16 ? __half2float(__float2half_rn(x[i])) : __bfloat162float(__float2bfloat16_rn(x[i]));
}

extern "C" void dp__cuk_round(void *stream, float *x, int64_t n, int fp16)
{
    k_round<<<blocks_for(n), THREADS, 0, S(stream)>>>(x, n, fp16);
}

/* 2-byte storage words: the per-element code is pack16.h's, which the CPU backend runs
 * too (cpu_round.c) and test_executor_round checks on the host. */
__global__ static void k_pack16(uint16_t *dst, const float *src, int64_t n, int fp16)
{
    FOR_N(i, n)
    dst[i] = dp__pack16(src[i], fp16 != 0);
}

__global__ static void k_unpack16(float *dst, const uint16_t *src, int64_t n, int fp16)
{
    FOR_N(i, n)
    dst[i] = dp__unpack16(src[i], fp16 != 0);
}

extern "C" void dp__cuk_pack16(void *stream, uint16_t *dst, const float *src, int64_t n, int fp16)
{
    k_pack16<<<blocks_for(n), THREADS, 0, S(stream)>>>(dst, src, n, fp16);
}

extern "C" void dp__cuk_unpack16(void *stream, float *dst, const uint16_t *src, int64_t n,
                                 int fp16)
{
    k_unpack16<<<blocks_for(n), THREADS, 0, S(stream)>>>(dst, src, n, fp16);
}

/* ------------------------------------------------------------------ activations */

#define GELU_S 0.7978845608028654f /* sqrt(2 / pi) */

__global__ static void k_gelu_fwd(float *out, const float *inp, int64_t n)
{
    FOR_N(i, n)
    {
        float x = inp[i];
        out[i] = 0.5f * x * (1.0f + tanhf(GELU_S * (x + 0.044715f * x * x * x)));
    }
}

/* gelu' = 0.5 (1 + tanh u) + 0.5 x sech^2 u sqrt(2/pi) (1 + 3 0.044715 x^2) (llm.c). */
__global__ static void k_gelu_bwd(float *dinp, const float *dout, const float *inp, int64_t n)
{
    FOR_N(i, n)
    {
        float x = inp[i], u = GELU_S * (x + 0.044715f * x * x * x), t = tanhf(u);
        float local = 0.5f * (1.0f + t) +
                      0.5f * x * (1.0f - t * t) * GELU_S * (1.0f + 3.0f * 0.044715f * x * x);
        dinp[i] = local * dout[i];
    }
}

__global__ static void k_swiglu_fwd(float *out, const float *inp, int64_t N, int64_t F)
{
    FOR_N(e, N * F)
    {
        int64_t n = e / F, i = e % F;
        float g = inp[n * 2 * F + i], u = inp[n * 2 * F + F + i];
        float sg = 1.0f / (1.0f + expf(-g));
        out[e] = g * sg * u;
    }
}

__global__ static void k_swiglu_bwd(float *dinp, const float *dout, const float *inp, int64_t N,
                                    int64_t F)
{
    FOR_N(e, N * F)
    {
        int64_t n = e / F, i = e % F;
        float g = inp[n * 2 * F + i], u = inp[n * 2 * F + F + i], dy = dout[e];
        float sg = 1.0f / (1.0f + expf(-g));
        dinp[n * 2 * F + F + i] = dy * g * sg;
        dinp[n * 2 * F + i] = dy * u * sg * (1.0f + g * (1.0f - sg));
    }
}

extern "C" void dp__cuk_act_fwd(void *stream, int gelu, float *out, const float *inp, int64_t N,
                                int64_t F)
{
    if (gelu)
        k_gelu_fwd<<<blocks_for(N * F), THREADS, 0, S(stream)>>>(out, inp, N * F);
    else
        k_swiglu_fwd<<<blocks_for(N * F), THREADS, 0, S(stream)>>>(out, inp, N, F);
}

extern "C" void dp__cuk_act_bwd(void *stream, int gelu, float *dinp, const float *dout,
                                const float *inp, int64_t N, int64_t F)
{
    if (gelu)
        k_gelu_bwd<<<blocks_for(N * F), THREADS, 0, S(stream)>>>(dinp, dout, inp, N * F);
    else
        k_swiglu_bwd<<<blocks_for(N * F), THREADS, 0, S(stream)>>>(dinp, dout, inp, N, F);
}

/* One thread per rotated pair (row n, head h, i < d/2): (i, i + d/2). */
__global__ static void k_rope(float *x, int64_t ld, int64_t N, int64_t T, int nh, int d,
                              const float *cs, float sgn)
{
    const int half = d / 2;
    FOR_N(e, N * nh * half)
    {
        int64_t n = e / ((int64_t)nh * half);
        int r = (int)(e % ((int64_t)nh * half)), h = r / half, i = r % half;
        int64_t p = n % T;
        float c = cs[p * half + i], s = sgn * cs[T * half + p * half + i];
        float *v = x + n * ld + (int64_t)h * d;
        float x1 = v[i], x2 = v[i + half];
        v[i] = x1 * c - x2 * s;
        v[i + half] = x2 * c + x1 * s;
    }
}

extern "C" void dp__cuk_rope(void *stream, float *x, int64_t ld, int64_t N, int64_t T, int nq,
                             int nk, int d, const float *cs, bool inverse)
{
    int64_t n = N * (nq + nk) * (d / 2);
    k_rope<<<blocks_for(n), THREADS, 0, S(stream)>>>(x, ld, N, T, nq + nk, d, cs,
                                                     inverse ? -1.0f : 1.0f);
}

/* ------------------------------------------------------------------ embeddings */

__global__ static void k_embed_fwd(float *out, const int32_t *tok, const float *wte, int64_t v0,
                                   int64_t nv, int64_t N, int64_t C)
{
    FOR_N(e, N * C)
    {
        int64_t n = e / C, t = tok[n] - v0;
        out[e] = t >= 0 && t < nv ? wte[t * C + e % C] : 0.0f;
    }
}

__global__ static void k_embed_bwd(float *dwte, const int32_t *tok, const float *dout, int64_t v0,
                                   int64_t nv, int64_t N, int64_t C)
{
    FOR_N(e, N * C)
    {
        int64_t n = e / C, t = tok[n] - v0;
        if (t >= 0 && t < nv)
            atomicAdd(dwte + t * C + e % C, dout[e]);
    }
}

__global__ static void k_pos(float *out, const float *wpe, int64_t n0, int64_t N, int64_t T,
                             int64_t C, int bwd)
{
    FOR_N(e, N * C)
    {
        int64_t n = e / C, at = ((n0 + n) % T) * C + e % C;
        if (bwd)
            atomicAdd(out + at, wpe[e]); /* out = dwpe, wpe = dout */
        else
            out[e] += wpe[at];
    }
}

extern "C" void dp__cuk_embed_fwd(void *stream, float *out, const int32_t *tok, const float *wte,
                                  int64_t v0, int64_t nv, int64_t N, int64_t C)
{
    k_embed_fwd<<<blocks_for(N * C), THREADS, 0, S(stream)>>>(out, tok, wte, v0, nv, N, C);
}

extern "C" void dp__cuk_embed_bwd(void *stream, float *dwte, const int32_t *tok, const float *dout,
                                  int64_t v0, int64_t nv, int64_t N, int64_t C)
{
    k_embed_bwd<<<blocks_for(N * C), THREADS, 0, S(stream)>>>(dwte, tok, dout, v0, nv, N, C);
}

extern "C" void dp__cuk_pos_fwd(void *stream, float *out, const float *wpe, int64_t n0, int64_t N,
                                int64_t T, int64_t C)
{
    k_pos<<<blocks_for(N * C), THREADS, 0, S(stream)>>>(out, wpe, n0, N, T, C, 0);
}

extern "C" void dp__cuk_pos_bwd(void *stream, float *dwpe, const float *dout, int64_t n0,
                                int64_t N, int64_t T, int64_t C)
{
    k_pos<<<blocks_for(N * C), THREADS, 0, S(stream)>>>(dwpe, dout, n0, N, T, C, 1);
}

/* ------------------------------------------------------------------ cross-entropy */

/* One block per row: the row reductions over the valid columns, as cpu_loss.c. */
__device__ static float block_reduce(float v, bool is_max)
{
    __shared__ float part[THREADS / 32];
    int lane = threadIdx.x % 32, wid = threadIdx.x / 32;
    v = is_max ? warp_max(v) : warp_sum(v);
    __syncthreads();
    if (lane == 0)
        part[wid] = v;
    __syncthreads();
    if (wid == 0) {
        v = lane < THREADS / 32 ? part[lane] : (is_max ? -INFINITY : 0.0f);
        v = is_max ? warp_max(v) : warp_sum(v);
        if (lane == 0)
            part[0] = v;
    }
    __syncthreads();
    return part[0];
}

__global__ static void k_ce_max(float *rowmax, const float *logits, int64_t nv, int64_t valid)
{
    const float *l = logits + (int64_t)blockIdx.x * nv;
    float m = -INFINITY;
    for (int64_t j = threadIdx.x; j < valid; j += blockDim.x)
        m = fmaxf(m, l[j]);
    m = block_reduce(m, true);
    if (threadIdx.x == 0)
        rowmax[blockIdx.x] = m;
}

__global__ static void k_ce_sums(float *sums, const float *logits, const float *gmax,
                                 const int32_t *tgt, int64_t N, int64_t nv, int64_t v0,
                                 int64_t valid)
{
    int64_t n = blockIdx.x;
    const float *l = logits + n * nv;
    const float m = gmax[n];
    float s = 0;
    for (int64_t j = threadIdx.x; j < valid; j += blockDim.x)
        s += expf(l[j] - m);
    s = block_reduce(s, false);
    if (threadIdx.x == 0) {
        int64_t t = tgt[n] - v0;
        sums[n] = t >= 0 && t < nv ? l[t] : 0.0f;
        sums[N + n] = s;
    }
}

__global__ static void k_ce_grad(float *logits, float *loss, const float *gmax, const float *sums,
                                 const int32_t *tgt, int64_t N, int64_t nv, int64_t v0,
                                 int64_t valid, float dloss)
{
    int64_t n = blockIdx.x;
    float *l = logits + n * nv;
    const float se = sums[N + n], m = gmax[n], inv = 1.0f / se;
    const int64_t t = tgt[n] - v0;
    for (int64_t j = threadIdx.x; j < nv; j += blockDim.x)
        l[j] = j < valid ? dloss * (expf(l[j] - m) * inv) - (j == t ? dloss : 0.0f) : 0.0f;
    if (threadIdx.x == 0)
        loss[n] = logf(se) + m - sums[n];
}

extern "C" void dp__cuk_ce_max(void *stream, float *rowmax, const float *logits, int64_t N,
                               int64_t nv, int64_t valid)
{
    if (N > 0)
        k_ce_max<<<(unsigned)N, THREADS, 0, S(stream)>>>(rowmax, logits, nv, valid);
}

extern "C" void dp__cuk_ce_sums(void *stream, float *sums, const float *logits, const float *gmax,
                                const int32_t *tgt, int64_t N, int64_t nv, int64_t v0,
                                int64_t valid)
{
    if (N > 0)
        k_ce_sums<<<(unsigned)N, THREADS, 0, S(stream)>>>(sums, logits, gmax, tgt, N, nv, v0,
                                                          valid);
}

extern "C" void dp__cuk_ce_grad(void *stream, float *logits, float *loss, const float *gmax,
                                const float *sums, const int32_t *tgt, int64_t N, int64_t nv,
                                int64_t v0, int64_t valid, float dloss)
{
    if (N > 0)
        k_ce_grad<<<(unsigned)N, THREADS, 0, S(stream)>>>(logits, loss, gmax, sums, tgt, N, nv, v0,
                                                          valid, dloss);
}

/* ------------------------------------------------------------------ reductions, AdamW */

__global__ static void k_sum(double *acc, const float *x, int64_t n, bool square)
{
    double s = 0;
    FOR_N(i, n)
    s += square ? (double)x[i] * (double)x[i] : (double)x[i];
    for (int o = 16; o > 0; o >>= 1)
        s += __shfl_xor_sync(0xffffffffu, s, o);
    if (threadIdx.x % 32 == 0)
        atomicAdd(acc, s);
}

extern "C" void dp__cuk_sum(void *stream, double *acc, const float *x, int64_t n, bool square)
{
    unsigned b = blocks_for(n);
    k_sum<<<b < 1024 ? b : 1024, THREADS, 0, S(stream)>>>(acc, x, n, square);
}

__global__ static void k_adamw(float *p, const float *grad, float *m, float *v, int64_t n,
                               float lr, float b1, float b2, float eps, float wd, float ibc1,
                               float ibc2, float gs)
{
    FOR_N(i, n)
    {
        float g = grad[i] * gs;
        float mi = b1 * m[i] + (1.0f - b1) * g, vi = b2 * v[i] + (1.0f - b2) * g * g;
        m[i] = mi;
        v[i] = vi;
        p[i] -= lr * ((mi * ibc1) / (sqrtf(vi * ibc2) + eps) + wd * p[i]);
    }
}

extern "C" void dp__cuk_adamw(void *stream, float *p, const float *grad, float *m, float *v,
                              int64_t n, float lr, float b1, float b2, float eps, float wd,
                              float ibc1, float ibc2, float gs)
{
    k_adamw<<<blocks_for(n), THREADS, 0, S(stream)>>>(p, grad, m, v, n, lr, b1, b2, eps, wd, ibc1,
                                                      ibc2, gs);
}

extern "C" void dp__cuk_move_front(void *stream, float *dst, const float *src, int64_t n)
{
    int64_t gap = src - dst;
    for (int64_t at = 0; gap > 0 && at < n; at += gap) {
        int64_t cnt = n - at < gap ? n - at : gap;
        cudaMemcpyAsync(dst + at, src + at, (size_t)cnt * sizeof(float), cudaMemcpyDeviceToDevice,
                        S(stream));
    }
}
