/*
 * CUDA backend: flash attention (backend.h attn_flash_fwd / attn_flash_bwd), fp32
 * compute and storage. Compiled in every CUDA build; never run on a GPU by its author
 * (no GPU where it was written): tests/executor/test_cuda_backend.c compares it with the
 * CPU backend where a GPU is present. The per-tile arithmetic is flash_tile.h's, which
 * the CPU backend (cpu_attention_flash.c) runs too and the host tests check against
 * the math attention, tile edges included (test_executor_flash.c).
 *
 * Forward (Dao 2023, FlashAttention-2, Alg. 1): one block per (query tile, head,
 * sequence); the query tile, each key/value tile in turn, the score tile and the
 * unnormalised output tile live in shared memory; one thread per row runs the online
 * softmax step, then the block updates the output tile element by element.
 * Backward (Alg. 2), without atomics so that the sums run in a fixed order: a kernel for
 * dK, dV with one block per (key tile, kv head, sequence) that walks the query tiles of
 * each of its a/g query heads (GQA), and one for dQ with one block per (query tile,
 * head, sequence) that walks its key tiles; each rebuilds P from the kept log-sum-exp
 * (FlashAttention-2 splits the same way in its deterministic mode, at the price of
 * recomputing the score tiles twice). D = rowsum(dctx * ctx) comes first.
 */
#include "cuda_kernels.h"

#include <cuda_runtime.h>

#define DP_FLASH_T float
#include "flash_tile.h"

#define FT 128 /* threads per block */

/* Rows [r0, r0 + n) of a head (row stride ld) into a dense tile [n][d]; rows past n: 0. */
__device__ static void load_tile(float *dst, const float *src, int64_t ld, int64_t r0, int n,
                                 int rows, int d)
{
    for (int i = threadIdx.x; i < rows * d; i += blockDim.x) {
        int r = i / d, e = i % d;
        dst[i] = r < n ? src[(r0 + r) * ld + e] : 0.0f;
    }
}

__global__ static void k_flash_fwd(float *ctx, float *lse, const float *qkv, int64_t T, int a,
                                   int g, int d, float scale)
{
    extern __shared__ float sh[];
    float *Qs = sh, *Ks = Qs + DP_FLASH_BQ * d, *Vs = Ks + DP_FLASH_BK * d;
    float *Os = Vs + DP_FLASH_BK * d, *S = Os + DP_FLASH_BQ * d;
    float *m = S + DP_FLASH_BQ * DP_FLASH_BK, *l = m + DP_FLASH_BQ, *f = l + DP_FLASH_BQ;
    const int h = blockIdx.y, hk = h / (a / g);
    const int64_t b = blockIdx.z, q0 = (int64_t)blockIdx.x * DP_FLASH_BQ;
    const int nq = (int)(T - q0 < DP_FLASH_BQ ? T - q0 : DP_FLASH_BQ);
    const int64_t qd = (int64_t)a * d, kvd = (int64_t)g * d, ld = qd + 2 * kvd;
    const float *q = qkv + b * T * ld + (int64_t)h * d;
    const float *k = qkv + b * T * ld + qd + (int64_t)hk * d, *v = k + kvd;
    load_tile(Qs, q, ld, q0, nq, DP_FLASH_BQ, d);
    for (int i = threadIdx.x; i < DP_FLASH_BQ * d; i += blockDim.x)
        Os[i] = 0.0f;
    for (int r = threadIdx.x; r < DP_FLASH_BQ; r += blockDim.x) {
        m[r] = -INFINITY;
        l[r] = 0.0f;
    }
    const int64_t nkt = dp__flash_key_tiles(q0, nq);
    for (int64_t kt = 0; kt < nkt; kt++) {
        const int64_t k0 = kt * DP_FLASH_BK;
        const int nk = (int)(T - k0 < DP_FLASH_BK ? T - k0 : DP_FLASH_BK);
        __syncthreads(); /* the previous tile's readers are done */
        load_tile(Ks, k, ld, k0, nk, DP_FLASH_BK, d);
        load_tile(Vs, v, ld, k0, nk, DP_FLASH_BK, d);
        __syncthreads();
        for (int i = threadIdx.x; i < nq * DP_FLASH_BK; i += blockDim.x) {
            int r = i / DP_FLASH_BK, j = i % DP_FLASH_BK;
            if (j < nk)
                S[r * DP_FLASH_BK + j] =
                    dp__flash_score(Qs + r * d, Ks + j * d, d, scale, q0 + r, k0 + j);
        }
        __syncthreads();
        for (int r = threadIdx.x; r < nq; r += blockDim.x)
            f[r] = dp__flash_online(S + r * DP_FLASH_BK, nk, &m[r], &l[r]);
        __syncthreads();
        for (int i = threadIdx.x; i < nq * d; i += blockDim.x) {
            int r = i / d, e = i % d;
            Os[i] = dp__flash_acc(Os[i], f[r], S + r * DP_FLASH_BK, nk, Vs + e, d);
        }
    }
    __syncthreads();
    float *c = ctx + b * T * qd + (int64_t)h * d;
    for (int i = threadIdx.x; i < nq * d; i += blockDim.x) {
        int r = i / d, e = i % d;
        c[(q0 + r) * qd + e] = Os[i] / l[r];
    }
    for (int r = threadIdx.x; r < nq; r += blockDim.x)
        lse[((int64_t)b * a + h) * T + q0 + r] = dp__flash_lse(m[r], l[r]);
}

/* D [B][a][T] = rowsum(dctx * ctx), one thread per row of a head. */
__global__ static void k_flash_dsum(float *D, const float *dctx, const float *ctx, int64_t B,
                                    int64_t T, int a, int d)
{
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= B * a * T)
        return;
    const int64_t t = i % T, h = (i / T) % a, b = i / (T * a);
    const int64_t off = (b * T + t) * (int64_t)a * d + h * d;
    D[i] = dp__flash_dot(dctx + off, ctx + off, d);
}

/* P and dS of a (query tile, key tile) pair into P, dS [BQ][BK] (0 outside the tiles). */
__device__ static void bwd_tile(float *P, float *dS, const float *Qs, const float *dOs,
                                const float *Ks, const float *Vs, const float *L, const float *Dr,
                                int64_t q0, int nq, int64_t k0, int nk, int d, float scale)
{
    for (int i = threadIdx.x; i < DP_FLASH_BQ * DP_FLASH_BK; i += blockDim.x) {
        int r = i / DP_FLASH_BK, j = i % DP_FLASH_BK;
        float p = 0.0f, ds = 0.0f;
        if (r < nq && j < nk) {
            p = dp__flash_prob(dp__flash_score(Qs + r * d, Ks + j * d, d, scale, q0 + r, k0 + j),
                               L[r]);
            ds = dp__flash_dscore(p, dp__flash_dot(dOs + r * d, Vs + j * d, d), Dr[r]);
        }
        P[i] = p;
        dS[i] = ds;
    }
}

/* Shared layout of both backward kernels: Qs, dOs [BQ][d], Ks, Vs [BK][d], the two
 * accumulators [BK][d] (dK, dV; the dQ kernel uses the first as [BQ][d]), P, dS, L, D. */
struct bwd_sh {
    float *Qs, *dOs, *Ks, *Vs, *A0, *A1, *P, *dS, *L, *Dr;
};

__device__ static struct bwd_sh bwd_carve(float *sh, int d)
{
    struct bwd_sh s;
    s.Qs = sh;
    s.dOs = s.Qs + DP_FLASH_BQ * d;
    s.Ks = s.dOs + DP_FLASH_BQ * d;
    s.Vs = s.Ks + DP_FLASH_BK * d;
    s.A0 = s.Vs + DP_FLASH_BK * d;
    s.A1 = s.A0 + (DP_FLASH_BK > DP_FLASH_BQ ? DP_FLASH_BK : DP_FLASH_BQ) * d;
    s.P = s.A1 + DP_FLASH_BK * d;
    s.dS = s.P + DP_FLASH_BQ * DP_FLASH_BK;
    s.L = s.dS + DP_FLASH_BQ * DP_FLASH_BK;
    s.Dr = s.L + DP_FLASH_BQ;
    return s;
}

/* Rows [q0, q0 + nq) of L or D of one head into a tile of BQ. */
__device__ static void load_rows(float *dst, const float *src, int64_t q0, int nq)
{
    for (int r = threadIdx.x; r < DP_FLASH_BQ; r += blockDim.x)
        dst[r] = r < nq ? src[q0 + r] : 0.0f;
}

__global__ static void k_flash_bwd_kv(float *dqkv, const float *D, const float *dctx,
                                      const float *qkv, const float *lse, int64_t T, int a, int g,
                                      int d, float scale)
{
    extern __shared__ float sh[];
    struct bwd_sh s = bwd_carve(sh, d);
    const int kh = blockIdx.y, per = a / g;
    const int64_t b = blockIdx.z, k0 = (int64_t)blockIdx.x * DP_FLASH_BK;
    const int nk = (int)(T - k0 < DP_FLASH_BK ? T - k0 : DP_FLASH_BK);
    const int64_t qd = (int64_t)a * d, kvd = (int64_t)g * d, ld = qd + 2 * kvd;
    const float *k = qkv + b * T * ld + qd + (int64_t)kh * d, *v = k + kvd;
    load_tile(s.Ks, k, ld, k0, nk, DP_FLASH_BK, d);
    load_tile(s.Vs, v, ld, k0, nk, DP_FLASH_BK, d);
    for (int i = threadIdx.x; i < DP_FLASH_BK * d; i += blockDim.x)
        s.A0[i] = s.A1[i] = 0.0f; /* dK, dV */
    for (int j = 0; j < per; j++) {
        const int h = kh * per + j;
        const float *q = qkv + b * T * ld + (int64_t)h * d, *dc = dctx + b * T * qd + (int64_t)h * d;
        const float *Lh = lse + ((int64_t)b * a + h) * T, *Dh = D + ((int64_t)b * a + h) * T;
        for (int64_t q0 = dp__flash_first_qtile(k0) * DP_FLASH_BQ; q0 < T; q0 += DP_FLASH_BQ) {
            const int nq = (int)(T - q0 < DP_FLASH_BQ ? T - q0 : DP_FLASH_BQ);
            __syncthreads();
            load_tile(s.Qs, q, ld, q0, nq, DP_FLASH_BQ, d);
            load_tile(s.dOs, dc, qd, q0, nq, DP_FLASH_BQ, d);
            load_rows(s.L, Lh, q0, nq);
            load_rows(s.Dr, Dh, q0, nq);
            __syncthreads();
            bwd_tile(s.P, s.dS, s.Qs, s.dOs, s.Ks, s.Vs, s.L, s.Dr, q0, nq, k0, nk, d, scale);
            __syncthreads();
            /* dV += P^T dctx, dK += scale dS^T q: element (key c, e), rows in order */
            for (int i = threadIdx.x; i < nk * d; i += blockDim.x) {
                int c = i / d, e = i % d;
                float sv = 0.0f, sk = 0.0f;
                for (int r = 0; r < nq; r++) {
                    sv += s.P[r * DP_FLASH_BK + c] * s.dOs[r * d + e];
                    sk += s.dS[r * DP_FLASH_BK + c] * s.Qs[r * d + e];
                }
                s.A1[i] += sv;
                s.A0[i] += scale * sk;
            }
        }
    }
    __syncthreads();
    float *dk = dqkv + b * T * ld + qd + (int64_t)kh * d, *dv = dk + kvd;
    for (int i = threadIdx.x; i < nk * d; i += blockDim.x) {
        int c = i / d, e = i % d;
        dk[(k0 + c) * ld + e] = s.A0[i];
        dv[(k0 + c) * ld + e] = s.A1[i];
    }
}

__global__ static void k_flash_bwd_q(float *dqkv, const float *D, const float *dctx,
                                     const float *qkv, const float *lse, int64_t T, int a, int g,
                                     int d, float scale)
{
    extern __shared__ float sh[];
    struct bwd_sh s = bwd_carve(sh, d);
    const int h = blockIdx.y, hk = h / (a / g);
    const int64_t b = blockIdx.z, q0 = (int64_t)blockIdx.x * DP_FLASH_BQ;
    const int nq = (int)(T - q0 < DP_FLASH_BQ ? T - q0 : DP_FLASH_BQ);
    const int64_t qd = (int64_t)a * d, kvd = (int64_t)g * d, ld = qd + 2 * kvd;
    const float *q = qkv + b * T * ld + (int64_t)h * d, *dc = dctx + b * T * qd + (int64_t)h * d;
    const float *k = qkv + b * T * ld + qd + (int64_t)hk * d, *v = k + kvd;
    load_tile(s.Qs, q, ld, q0, nq, DP_FLASH_BQ, d);
    load_tile(s.dOs, dc, qd, q0, nq, DP_FLASH_BQ, d);
    load_rows(s.L, lse + ((int64_t)b * a + h) * T, q0, nq);
    load_rows(s.Dr, D + ((int64_t)b * a + h) * T, q0, nq);
    for (int i = threadIdx.x; i < DP_FLASH_BQ * d; i += blockDim.x)
        s.A0[i] = 0.0f; /* dQ */
    const int64_t nkt = dp__flash_key_tiles(q0, nq);
    for (int64_t kt = 0; kt < nkt; kt++) {
        const int64_t k0 = kt * DP_FLASH_BK;
        const int nk = (int)(T - k0 < DP_FLASH_BK ? T - k0 : DP_FLASH_BK);
        __syncthreads();
        load_tile(s.Ks, k, ld, k0, nk, DP_FLASH_BK, d);
        load_tile(s.Vs, v, ld, k0, nk, DP_FLASH_BK, d);
        __syncthreads();
        bwd_tile(s.P, s.dS, s.Qs, s.dOs, s.Ks, s.Vs, s.L, s.Dr, q0, nq, k0, nk, d, scale);
        __syncthreads();
        for (int i = threadIdx.x; i < nq * d; i += blockDim.x) {
            int r = i / d, e = i % d;
            float sq = 0.0f;
            for (int c = 0; c < nk; c++)
                sq += s.dS[r * DP_FLASH_BK + c] * s.Ks[c * d + e];
            s.A0[i] += scale * sq;
        }
    }
    __syncthreads();
    float *dq = dqkv + b * T * ld + (int64_t)h * d;
    for (int i = threadIdx.x; i < nq * d; i += blockDim.x) {
        int r = i / d, e = i % d;
        dq[(q0 + r) * ld + e] = s.A0[i];
    }
}

static size_t fwd_bytes(int d)
{
    return sizeof(float) * ((size_t)(2 * DP_FLASH_BQ + 2 * DP_FLASH_BK) * d +
                            DP_FLASH_BQ * DP_FLASH_BK + 3 * DP_FLASH_BQ);
}

static size_t bwd_bytes(int d)
{
    const int acc = DP_FLASH_BK > DP_FLASH_BQ ? DP_FLASH_BK : DP_FLASH_BQ;
    return sizeof(float) * ((size_t)(2 * DP_FLASH_BQ + 3 * DP_FLASH_BK + acc) * d +
                            2 * DP_FLASH_BQ * DP_FLASH_BK + 2 * DP_FLASH_BQ);
}

/* Above 48 KiB a kernel must opt in to its dynamic shared memory (CUDA C++ Programming
 * Guide, "Shared Memory": cudaFuncAttributeMaxDynamicSharedMemorySize). */
template <typename K> static void opt_in(K kernel, size_t bytes)
{
    if (bytes > 48 * 1024)
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes);
}

extern "C" void dp__cuk_flash_fwd(void *stream, float *ctx, float *lse, const float *qkv, int64_t B,
                                  int64_t T, int a, int g, int d)
{
    if (B <= 0 || T <= 0 || a <= 0)
        return;
    const size_t bytes = fwd_bytes(d);
    opt_in(k_flash_fwd, bytes);
    dim3 grid((unsigned)((T + DP_FLASH_BQ - 1) / DP_FLASH_BQ), (unsigned)a, (unsigned)B);
    k_flash_fwd<<<grid, FT, bytes, (cudaStream_t)stream>>>(ctx, lse, qkv, T, a, g, d,
                                                           1.0f / sqrtf((float)d));
}

extern "C" void dp__cuk_flash_bwd(void *stream, float *dqkv, float *dsum, const float *dctx,
                                  const float *qkv, const float *ctx, const float *lse, int64_t B,
                                  int64_t T, int a, int g, int d)
{
    if (B <= 0 || T <= 0 || a <= 0)
        return;
    cudaStream_t st = (cudaStream_t)stream;
    const int64_t rows = B * a * T;
    k_flash_dsum<<<(unsigned)((rows + 255) / 256), 256, 0, st>>>(dsum, dctx, ctx, B, T, a, d);
    const size_t bytes = bwd_bytes(d);
    const float scale = 1.0f / sqrtf((float)d);
    opt_in(k_flash_bwd_kv, bytes);
    opt_in(k_flash_bwd_q, bytes);
    dim3 gkv((unsigned)((T + DP_FLASH_BK - 1) / DP_FLASH_BK), (unsigned)g, (unsigned)B);
    k_flash_bwd_kv<<<gkv, FT, bytes, st>>>(dqkv, dsum, dctx, qkv, lse, T, a, g, d, scale);
    dim3 gq((unsigned)((T + DP_FLASH_BQ - 1) / DP_FLASH_BQ), (unsigned)a, (unsigned)B);
    k_flash_bwd_q<<<gq, FT, bytes, st>>>(dqkv, dsum, dctx, qkv, lse, T, a, g, d, scale);
}
