/*
 * CPU backend, the model's two ends: the vocabulary-parallel embedding
 * lookup and learned positions, and the vocabulary-parallel cross-entropy
 * over the local logits (Megatron-LM tensor_parallel/cross_entropy.py: max
 * and sums all-reduced by the caller, no gathered logits).
 */
#include "cpu.h"
#include "cpu_simd.h"

#define DP_CE_T real
#include "ce_online.h"

#include <math.h>
#include <omp.h>
#include <string.h>

/* ------------------------------------------------------------------ embeddings */

void dp__cpu_embed_fwd(struct dp_backend *be, real *out, const int32_t *tok, const real *wte,
                       int64_t v0, int64_t nv, int64_t N, int64_t C)
{
#pragma omp parallel for schedule(static)
    for (int64_t n = 0; n < N; n++) {
        int64_t t = tok[n] - v0;
        if (t >= 0 && t < nv)
            memcpy(out + n * C, wte + t * C, (size_t)C * sizeof(real));
        else
            memset(out + n * C, 0, (size_t)C * sizeof(real));
    }
}

void dp__cpu_embed_bwd(struct dp_backend *be, real *dwte, const int32_t *tok, const real *dout,
                       int64_t v0, int64_t nv, int64_t N, int64_t C)
{
#pragma omp parallel
    {
        int64_t c0, c1;
        col_range(C, &c0, &c1);
        for (int64_t n = 0; n < N; n++) {
            int64_t t = tok[n] - v0;
            if (t < 0 || t >= nv)
                continue;
            for (int64_t i = c0; i < c1; i++)
                dwte[t * C + i] += dout[n * C + i];
        }
    }
}

void dp__cpu_pos_fwd(struct dp_backend *be, real *out, const real *wpe, int64_t n0, int64_t N,
                     int64_t T, int64_t C)
{
#pragma omp parallel for schedule(static)
    for (int64_t n = 0; n < N; n++) {
        const real *p = wpe + ((n0 + n) % T) * C;
        for (int64_t i = 0; i < C; i++)
            out[n * C + i] += p[i];
    }
}

void dp__cpu_pos_bwd(struct dp_backend *be, real *dwpe, const real *dout, int64_t n0, int64_t N,
                     int64_t T, int64_t C)
{
#pragma omp parallel
    {
        int64_t c0, c1;
        col_range(C, &c0, &c1);
        for (int64_t n = 0; n < N; n++) {
            real *p = dwpe + ((n0 + n) % T) * C;
            for (int64_t i = c0; i < c1; i++)
                p[i] += dout[n * C + i];
        }
    }
}

/* ------------------------------------------------------------------ cross-entropy */

/* Rows [n0, n1) of the three passes, over the `valid` (unpadded) local columns. The
 * row maximum runs over whole vectors, the tail padded with -inf: `omp simd
 * reduction(max)` over a comparison is a loop clang 14 cannot vectorise without
 * -ffast-math (a -Wpass-failed error under -Werror at -O1 and above), and the maximum
 * does not depend on the order. NaN never wins a comparison, as in the scalar loop. */
DP_CLONES static void ce_max_rows(real *rowmax, const real *logits, int64_t n0, int64_t n1,
                                  int64_t nv, int64_t valid)
{
    for (int64_t n = n0; n < n1; n++) {
        const real *l = logits + n * nv;
        vreal vm = (vreal){0} - R_INF;
        for (int64_t j = 0; j < valid; j += AV) {
            vreal x;
            vload_part(&x, l + j, valid - j < AV ? (int)(valid - j) : AV, -R_INF);
            vm = VSEL(x > vm, x, vm);
        }
        rowmax[n] = vhmax(&vm);
    }
}

DP_CLONES static void ce_sums_rows(real *sums, const real *logits, const real *gmax,
                                   const int32_t *tgt, int64_t n0, int64_t n1, int64_t N,
                                   int64_t nv, int64_t v0, int64_t valid)
{
    for (int64_t n = n0; n < n1; n++) {
        const real *restrict l = logits + n * nv;
        const int64_t t = tgt[n] - v0;
        const real m = gmax[n];
        sums[n] = (t >= 0 && t < nv) ? l[t] : 0;
        real s = 0;
#pragma omp simd reduction(+ : s)
        for (int64_t j = 0; j < valid; j++)
            s += R_EXPV(l[j] - m);
        sums[N + n] = s;
    }
}

DP_CLONES static void ce_grad_rows(real *logits, real *loss, const real *gmax, const real *sums,
                                   const int32_t *tgt, int64_t n0, int64_t n1, int64_t N,
                                   int64_t nv, int64_t v0, int64_t valid, real dloss)
{
    for (int64_t n = n0; n < n1; n++) {
        real *restrict l = logits + n * nv;
        const real se = sums[N + n], m = gmax[n];
        loss[n] = R_LOG(se) + m - sums[n];
        const real inv = (real)1 / se;
#pragma omp simd
        for (int64_t j = 0; j < valid; j++)
            l[j] = dloss * (R_EXPV(l[j] - m) * inv);
        const int64_t t = tgt[n] - v0;
        if (t >= 0 && t < valid)
            l[t] -= dloss;
        for (int64_t j = valid; j < nv; j++)
            l[j] = 0;
    }
}

static int64_t ce_valid(int64_t nv, int64_t v0, int64_t vocab)
{
    int64_t valid = vocab - v0 < nv ? vocab - v0 : nv; /* padded columns are ignored */
    return valid < 0 ? 0 : valid;
}

void dp__cpu_ce_max(struct dp_backend *be, real *rowmax, const real *logits, int64_t N, int64_t nv,
                    int64_t v0, int64_t vocab)
{
    const int64_t valid = ce_valid(nv, v0, vocab);
#pragma omp parallel
    {
        int64_t n0, n1;
        thread_range(N, &n0, &n1);
        ce_max_rows(rowmax, logits, n0, n1, nv, valid);
    }
}

void dp__cpu_ce_sums(struct dp_backend *be, real *sums, const real *logits, const real *gmax,
                     const int32_t *tgt, int64_t N, int64_t nv, int64_t v0, int64_t vocab)
{
    const int64_t valid = ce_valid(nv, v0, vocab);
#pragma omp parallel
    {
        int64_t n0, n1;
        thread_range(N, &n0, &n1);
        ce_sums_rows(sums, logits, gmax, tgt, n0, n1, N, nv, v0, valid);
    }
}

void dp__cpu_ce_grad(struct dp_backend *be, real *logits, real *loss, const real *gmax,
                     const real *sums, const int32_t *tgt, int64_t N, int64_t nv, int64_t v0,
                     int64_t vocab, real dloss)
{
    const int64_t valid = ce_valid(nv, v0, vocab);
#pragma omp parallel
    {
        int64_t n0, n1;
        thread_range(N, &n0, &n1);
        ce_grad_rows(logits, loss, gmax, sums, tgt, n0, n1, N, nv, v0, valid, dloss);
    }
}

/* The fused classifier's CPU equivalent (backend.h ce_fused; the CUDA kernel is
 * cuda_ce.cu): not in the CPU backend's table, whose three vectorised passes above are
 * faster here than this scalar online pass; test_executor_flash checks it against them. */
void dp__cpu_ce_fused(struct dp_backend *be, real *logits, real *loss, const int32_t *tgt,
                      int64_t N, int64_t nv, int64_t vocab, real dloss)
{
    (void)be;
    const int64_t valid = ce_valid(nv, 0, vocab);
#pragma omp parallel for schedule(static)
    for (int64_t n = 0; n < N; n++) {
        real *l = logits + n * nv;
        real m = -R_INF, s = 0;
        for (int64_t j = 0; j < valid; j++)
            dp__ce_online_add(&m, &s, l[j]);
        const int64_t t = tgt[n];
        loss[n] = R_LOG(s) + m - (t >= 0 && t < valid ? l[t] : 0);
        const real inv = (real)1 / s;
        for (int64_t j = 0; j < valid; j++)
            l[j] = dp__ce_grad(l[j], m, inv, j == t, dloss);
        for (int64_t j = valid; j < nv; j++)
            l[j] = 0;
    }
}
