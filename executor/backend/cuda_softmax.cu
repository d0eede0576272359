/*
 * CUDA backend: the causal softmax of attention and its backward, one warp per row of
 * T scores (the row's position t = row % T keeps columns 0 .. t; the rest become 0, as
 * the CPU's probs). The GEMMs around them are cuBLAS calls in cuda_ops.c. This is the
 * "first correct" attention of the issue: the T x T probabilities are materialised
 * (what the backend interface's attn_fwd returns); a fused flash-style kernel is later
 * work (docs/gpu.md).
 *
 * Also the block kernels of ring attention (context parallelism, backend.h
 * attn_ring_*): the CPU's scalar loops (cpu_attention_cp.c) with one thread per
 * (sequence, head, query row), and for dK, dV one thread per (sequence, kv head, key
 * row), so that no two threads write one element (no atomics: the sums run in the
 * CPU's order). Correctness first, as on the CPU: the executor's CP runs are tiny.
 */
#include "cuda_kernels.h"

#include <cuda_runtime.h>
#include <math.h>

__device__ static inline float wsum(float v)
{
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ static inline float wmax(float v)
{
    for (int o = 16; o > 0; o >>= 1)
        v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

__global__ static void k_causal_softmax(float *P, int64_t rows, int64_t T)
{
    int64_t r = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) / 32;
    int lane = threadIdx.x % 32;
    if (r >= rows)
        return;
    float *p = P + r * T;
    const int64_t t = r % T;
    float m = -INFINITY;
    for (int64_t j = lane; j <= t; j += 32)
        m = fmaxf(m, p[j]);
    m = wmax(m);
    float s = 0;
    for (int64_t j = lane; j <= t; j += 32) {
        float e = expf(p[j] - m);
        p[j] = e;
        s += e;
    }
    const float inv = 1.0f / wsum(s);
    for (int64_t j = lane; j < T; j += 32)
        p[j] = j <= t ? p[j] * inv : 0.0f;
}

__global__ static void k_causal_softmax_bwd(float *dP, const float *P, int64_t rows, int64_t T)
{
    int64_t r = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) / 32;
    int lane = threadIdx.x % 32;
    if (r >= rows)
        return;
    float *d = dP + r * T;
    const float *p = P + r * T;
    const int64_t t = r % T;
    float s = 0;
    for (int64_t j = lane; j <= t; j += 32)
        s += d[j] * p[j];
    s = wsum(s);
    for (int64_t j = lane; j < T; j += 32)
        d[j] = j <= t ? p[j] * (d[j] - s) : 0.0f;
}

extern "C" void dp__cuk_causal_softmax(void *stream, float *P, int64_t rows, int64_t T)
{
    if (rows > 0)
        k_causal_softmax<<<(unsigned)((rows * 32 + 255) / 256), 256, 0, (cudaStream_t)stream>>>(
            P, rows, T);
}

extern "C" void dp__cuk_causal_softmax_bwd(void *stream, float *dP, const float *P, int64_t rows,
                                           int64_t T)
{
    if (rows > 0)
        k_causal_softmax_bwd<<<(unsigned)((rows * 32 + 255) / 256), 256, 0,
                               (cudaStream_t)stream>>>(dP, P, rows, T);
}

/* ------------------------------------------------------------------ ring attention */

/* Keys of block chunk j visible from row t of query chunk i: [0, n) (cpu_attention_cp.c). */
__device__ static inline int64_t ring_visible(int qc0, int qc1, int kc0, int kc1, int i, int j,
                                              int64_t t, int64_t C)
{
    const int q = i ? qc1 : qc0, k = j ? kc1 : kc0;
    return k < q ? C : k > q ? 0 : t + 1;
}

__device__ static inline float ring_dot(const float *x, const float *y, int d)
{
    float s = 0;
    for (int e = 0; e < d; e++)
        s += x[e] * y[e];
    return s;
}

__global__ static void k_ring_fwd(float *acc, float *mx, float *sm, const float *qkv, int64_t ldq,
                                  const float *kv, int qc0, int qc1, int kc0, int kc1, int64_t B,
                                  int64_t C, int a, int g, int d, float scale)
{
    const int64_t T = 2 * C, kvd = (int64_t)g * d, qd = (int64_t)a * d;
    const int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= B * a * T)
        return;
    const int64_t r = idx % T, b = idx / ((int64_t)a * T);
    const int h = (int)((idx / T) % a), hk = h / (a / g);
    const float *K = kv + b * T * 2 * kvd + (int64_t)hk * d, *V = K + kvd;
    const int i = r < C ? 0 : 1;
    const int64_t t = r - i * C;
    const float *q = qkv + (b * T + r) * ldq + (int64_t)h * d;
    float *o = acc + (b * T + r) * qd + (int64_t)h * d;
    float *m = mx + (b * a + h) * T + r, *l = sm + (b * a + h) * T + r;
    float bm = -INFINITY;
    for (int j = 0; j < 2; j++) {
        const int64_t n = ring_visible(qc0, qc1, kc0, kc1, i, j, t, C);
        for (int64_t c = 0; c < n; c++)
            bm = fmaxf(bm, ring_dot(q, K + (j * C + c) * 2 * kvd, d) * scale);
    }
    if (bm == -INFINITY)
        return; /* no visible key in this block */
    const float m0 = *l > 0 ? *m : -INFINITY, mn = fmaxf(bm, m0);
    const float f = *l > 0 ? expf(m0 - mn) : 0.0f;
    *l *= f;
    for (int e = 0; e < d; e++)
        o[e] *= f;
    for (int j = 0; j < 2; j++) {
        const int64_t n = ring_visible(qc0, qc1, kc0, kc1, i, j, t, C);
        for (int64_t c = 0; c < n; c++) {
            const int64_t kr = (j * C + c) * 2 * kvd;
            const float p = expf(ring_dot(q, K + kr, d) * scale - mn);
            *l += p;
            for (int e = 0; e < d; e++)
                o[e] += p * V[kr + e];
        }
    }
    *m = mn;
}

__global__ static void k_ring_done(float *ctx, float *mx, const float *sm, int64_t B, int64_t T,
                                   int a, int d)
{
    const int64_t s = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (s >= B * a * T)
        return;
    const int64_t r = s % T, b = s / ((int64_t)a * T);
    const int h = (int)((s / T) % a);
    float *o = ctx + (b * T + r) * a * d + (int64_t)h * d;
    const float inv = 1.0f / sm[s];
    for (int e = 0; e < d; e++)
        o[e] *= inv;
    mx[s] += logf(sm[s]);
}

__global__ static void k_ring_dsum(float *dsum, const float *dctx, const float *ctx, int64_t B,
                                   int64_t T, int a, int d)
{
    const int64_t s = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (s >= B * a * T)
        return;
    const int64_t r = s % T, b = s / ((int64_t)a * T);
    const int h = (int)((s / T) % a);
    const int64_t o = (b * T + r) * a * d + (int64_t)h * d;
    dsum[s] = ring_dot(dctx + o, ctx + o, d);
}

/* With P = exp(s - lse), dS = P (dO V^T - D): dQ += dS K / sqrt(d), per query row. */
__global__ static void k_ring_dq(float *dq, const float *dctx, const float *qkv, int64_t ldq,
                                 const float *kv, const float *lse, const float *dsum, int qc0,
                                 int qc1, int kc0, int kc1, int64_t B, int64_t C, int a, int g,
                                 int d, float scale)
{
    const int64_t T = 2 * C, kvd = (int64_t)g * d, qd = (int64_t)a * d;
    const int64_t s = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (s >= B * a * T)
        return;
    const int64_t r = s % T, b = s / ((int64_t)a * T);
    const int h = (int)((s / T) % a), hk = h / (a / g);
    const float *K = kv + b * T * 2 * kvd + (int64_t)hk * d, *V = K + kvd;
    const int i = r < C ? 0 : 1;
    const int64_t t = r - i * C;
    const float *q = qkv + (b * T + r) * ldq + (int64_t)h * d;
    const float *dO = dctx + (b * T + r) * qd + (int64_t)h * d;
    float *dQ = dq + (b * T + r) * ldq + (int64_t)h * d;
    for (int j = 0; j < 2; j++) {
        const int64_t n = ring_visible(qc0, qc1, kc0, kc1, i, j, t, C);
        for (int64_t c = 0; c < n; c++) {
            const int64_t kr = (j * C + c) * 2 * kvd;
            const float p = expf(ring_dot(q, K + kr, d) * scale - lse[s]);
            const float ds = p * (ring_dot(dO, V + kr, d) - dsum[s]) * scale;
            for (int e = 0; e < d; e++)
                dQ[e] += ds * K[kr + e];
        }
    }
}

/* dV += P^T dO, dK += dS^T Q / sqrt(d), per key row of the block: the thread loops over
 * the q heads of its kv head and the query rows that see the key, in the CPU's order. */
__global__ static void k_ring_dkv(float *dkv, const float *dctx, const float *qkv, int64_t ldq,
                                  const float *kv, const float *lse, const float *dsum, int qc0,
                                  int qc1, int kc0, int kc1, int64_t B, int64_t C, int a, int g,
                                  int d, float scale)
{
    const int64_t T = 2 * C, kvd = (int64_t)g * d, qd = (int64_t)a * d;
    const int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= B * g * T)
        return;
    const int64_t kr_row = idx % T, b = idx / ((int64_t)g * T);
    const int hk = (int)((idx / T) % g), per = a / g;
    const int j = kr_row < C ? 0 : 1;
    const int64_t c = kr_row - j * C, kr = kr_row * 2 * kvd;
    const float *K = kv + b * T * 2 * kvd + (int64_t)hk * d, *V = K + kvd;
    float *dK = dkv + b * T * 2 * kvd + (int64_t)hk * d, *dV = dK + kvd;
    for (int h = hk * per; h < (hk + 1) * per; h++)
        for (int64_t r = 0; r < T; r++) {
            const int i = r < C ? 0 : 1;
            const int64_t t = r - i * C, s = (b * a + h) * T + r;
            if (c >= ring_visible(qc0, qc1, kc0, kc1, i, j, t, C))
                continue;
            const float *q = qkv + (b * T + r) * ldq + (int64_t)h * d;
            const float *dO = dctx + (b * T + r) * qd + (int64_t)h * d;
            const float p = expf(ring_dot(q, K + kr, d) * scale - lse[s]);
            const float ds = p * (ring_dot(dO, V + kr, d) - dsum[s]) * scale;
            for (int e = 0; e < d; e++) {
                dV[kr + e] += p * dO[e];
                dK[kr + e] += ds * q[e];
            }
        }
}

static unsigned ring_blocks(int64_t n)
{
    return (unsigned)((n + 127) / 128);
}

extern "C" void dp__cuk_ring_fwd(void *stream, float *acc, float *mx, float *sm, const float *qkv,
                                 int64_t ldq, const float *kv, const int qc[2], const int kc[2],
                                 int64_t B, int64_t C, int a, int g, int d)
{
    const int64_t n = B * a * 2 * C;
    if (n > 0)
        k_ring_fwd<<<ring_blocks(n), 128, 0, (cudaStream_t)stream>>>(
            acc, mx, sm, qkv, ldq, kv, qc[0], qc[1], kc[0], kc[1], B, C, a, g, d,
            (float)(1.0 / sqrt((double)d)));
}

extern "C" void dp__cuk_ring_done(void *stream, float *ctx, float *mx, const float *sm, int64_t B,
                                  int64_t T, int a, int d)
{
    const int64_t n = B * a * T;
    if (n > 0)
        k_ring_done<<<ring_blocks(n), 128, 0, (cudaStream_t)stream>>>(ctx, mx, sm, B, T, a, d);
}

extern "C" void dp__cuk_ring_dsum(void *stream, float *dsum, const float *dctx, const float *ctx,
                                  int64_t B, int64_t T, int a, int d)
{
    const int64_t n = B * a * T;
    if (n > 0)
        k_ring_dsum<<<ring_blocks(n), 128, 0, (cudaStream_t)stream>>>(dsum, dctx, ctx, B, T, a, d);
}

extern "C" void dp__cuk_ring_bwd(void *stream, float *dq, float *dkv, const float *dctx,
                                 const float *qkv, int64_t ldq, const float *kv, const float *lse,
                                 const float *dsum, const int qc[2], const int kc[2], int64_t B,
                                 int64_t C, int a, int g, int d)
{
    const float scale = (float)(1.0 / sqrt((double)d));
    const int64_t nq = B * a * 2 * C, nk = B * g * 2 * C;
    if (nq <= 0)
        return;
    k_ring_dq<<<ring_blocks(nq), 128, 0, (cudaStream_t)stream>>>(
        dq, dctx, qkv, ldq, kv, lse, dsum, qc[0], qc[1], kc[0], kc[1], B, C, a, g, d, scale);
    k_ring_dkv<<<ring_blocks(nk), 128, 0, (cudaStream_t)stream>>>(
        dkv, dctx, qkv, ldq, kv, lse, dsum, qc[0], qc[1], kc[0], kc[1], B, C, a, g, d, scale);
}
