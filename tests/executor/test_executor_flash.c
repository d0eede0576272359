/*
 * Flash attention on the host, in double precision (dplan_executor_f64): the tile
 * arithmetic of flash_tile.h, which the CUDA kernels (cuda_flash.cu) share with the CPU
 * backend (cpu_attention_flash.c), checked through the CPU backend against its math
 * attention (cpu_attention.c: the T x T probabilities kept), at the tile edges: T = 1,
 * one tile short of full (31), exactly one (32), one past (33), several with a partial
 * last (70, 97); GQA (4 query heads on 2 or 1 kv heads), MHA, odd head widths.
 *  - ctx against the math attention's, within 1e-12 (relative to the largest entry);
 *  - lse against the log-sum-exp summed here from its definition,
 *    log sum_{j <= t} exp(q_t . k_j / sqrt(d)), within 1e-12;
 *  - dqkv against the math backward's, within 1e-12.
 * And the online step alone: a tile wholly above the diagonal leaves the row's state
 * alone; two tiles merged equal the softmax of their union. And the fused classifier's
 * CPU equivalent (ce_online.h) against the three-pass cross-entropy.
 */
#include "check.h"
#include "executor/backend/cpu.h"

#define DP_FLASH_T real
#include "executor/backend/flash_tile.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static double worst(const real *x, const real *ref, int64_t n)
{
    double e = 0, s = 1e-300;
    for (int64_t i = 0; i < n; i++) {
        e = fmax(e, fabs(x[i] - ref[i]));
        s = fmax(s, fabs(ref[i]));
    }
    return e / s;
}

static real *rnd(int64_t n, uint32_t *x)
{
    real *p = malloc((size_t)n * sizeof *p);
    for (int64_t i = 0; i < n; i++) {
        *x = *x * 1664525u + 1013904223u;
        p[i] = (real)((*x >> 8) / 16777216.0 * 2 - 1);
    }
    return p;
}

static void check_shape(int64_t B, int64_t T, int a, int g, int d)
{
    const int64_t ld = (int64_t)(a + 2 * g) * d, qd = (int64_t)a * d;
    uint32_t seed = (uint32_t)(T * 131 + d * 7 + a + g);
    real *qkv = rnd(B * T * ld, &seed), *dctx = rnd(B * T * qd, &seed);
    /* scale the scores up so the softmax is far from uniform (sharp rows test the max) */
    for (int64_t i = 0; i < B * T * ld; i++)
        qkv[i] *= 3;
    real *ctx_m = calloc((size_t)(B * T * qd), sizeof(real));
    real *ctx_f = calloc((size_t)(B * T * qd), sizeof(real));
    real *P = calloc((size_t)(B * a * T * T), sizeof(real));
    real *dP = calloc((size_t)(B * a * T * T), sizeof(real));
    real *lse = calloc((size_t)(B * a * T), sizeof(real));
    real *D = calloc((size_t)(B * a * T), sizeof(real));
    real *dq_m = calloc((size_t)(B * T * ld), sizeof(real));
    real *dq_f = malloc((size_t)(B * T * ld) * sizeof(real));
    for (int64_t i = 0; i < B * T * ld; i++)
        dq_f[i] = 1e30; /* overwritten: nothing may survive */
    dp__cpu_attn_fwd(NULL, ctx_m, P, qkv, B, T, a, g, d);
    dp__cpu_attn_flash_fwd(NULL, ctx_f, lse, qkv, B, T, a, g, d);
    double ec = worst(ctx_f, ctx_m, B * T * qd);
    /* lse from its definition */
    double el = 0;
    for (int64_t b = 0; b < B; b++)
        for (int h = 0; h < a; h++)
            for (int64_t t = 0; t < T; t++) {
                const real *q = qkv + (b * T + t) * ld + (int64_t)h * d;
                double mx = -INFINITY, s = 0, sc[128];
                for (int64_t j = 0; j <= t; j++) {
                    const real *k = qkv + (b * T + j) * ld + qd + (int64_t)(h / (a / g)) * d;
                    double dot = 0;
                    for (int e = 0; e < d; e++)
                        dot += q[e] * k[e];
                    sc[j] = dot / sqrt((double)d);
                    mx = fmax(mx, sc[j]);
                }
                for (int64_t j = 0; j <= t; j++)
                    s += exp(sc[j] - mx);
                el = fmax(el, fabs(lse[(b * a + h) * T + t] - (mx + log(s))) / fmax(1, fabs(mx)));
            }
    dp__cpu_attn_bwd(NULL, dq_m, dP, dctx, qkv, P, B, T, a, g, d);
    dp__cpu_attn_flash_bwd(NULL, dq_f, D, dctx, qkv, ctx_f, lse, B, T, a, g, d);
    double eb = worst(dq_f, dq_m, B * T * ld);
    printf("B=%lld T=%lld a=%d g=%d d=%d: ctx %.2g, lse %.2g, dqkv %.2g\n", (long long)B,
           (long long)T, a, g, d, ec, el, eb);
    CHECK(ec < 1e-12);
    CHECK(el < 1e-12);
    CHECK(eb < 1e-12);
    free(qkv), free(dctx), free(ctx_m), free(ctx_f), free(P), free(dP), free(lse), free(D);
    free(dq_m), free(dq_f);
}

/* The online step by itself: scores {1, 2} then {3, -inf}: after both, m = 3 and
 * l = e^-2 + e^-1 + 1; the first tile's weights are rescaled by exp(2 - 3). A tile wholly
 * masked returns 1 and leaves m, l alone. */
static void check_online(void)
{
    real m = -INFINITY, l = 0;
    real s0[2] = {-INFINITY, -INFINITY};
    CHECK(dp__flash_online(s0, 2, &m, &l) == 1);
    CHECK(m == -INFINITY && l == 0 && s0[0] == 0 && s0[1] == 0);
    real s1[2] = {1, 2};
    CHECK(dp__flash_online(s1, 2, &m, &l) == 0); /* nothing merged before: o is dropped */
    CHECK(m == 2 && fabs(l - (exp(-1.0) + 1)) < 1e-15);
    real s2[2] = {3, -INFINITY};
    const real f = dp__flash_online(s2, 2, &m, &l);
    CHECK(fabs(f - exp(-1.0)) < 1e-15);
    CHECK(m == 3 && fabs(l - (exp(-2.0) + exp(-1.0) + 1)) < 1e-15);
    CHECK(s2[0] == 1 && s2[1] == 0);
    CHECK(fabs(dp__flash_lse(m, l) - log(exp(1.0) + exp(2.0) + exp(3.0))) < 1e-14);
}

/* The fused classifier's CPU equivalent (cpu_loss.c dp__cpu_ce_fused, the CUDA kernel's
 * arithmetic). By hand: logits {0, ln 2, ln 3} and target 0 give loss log(1 + 2 + 3) =
 * log 6 and gradient dloss (1/6 - 1, 2/6, 3/6). Then 7 rows of 300 columns, 290 of them
 * words (10 padding), against the three passes ce_max, ce_sums, ce_grad within 1e-12. */
static void check_ce_fused(void)
{
    real row[4] = {0, (real)log(2.0), (real)log(3.0), 99}, loss = 0;
    int32_t t0 = 0;
    dp__cpu_ce_fused(NULL, row, &loss, &t0, 1, 4, 3, (real)0.5);
    CHECK(fabs(loss - log(6.0)) < 1e-14);
    CHECK(fabs(row[0] - 0.5 * (1.0 / 6 - 1)) < 1e-14 && fabs(row[1] - 0.5 * 2 / 6) < 1e-14);
    CHECK(fabs(row[2] - 0.5 * 3 / 6) < 1e-14 && row[3] == 0);
    const int64_t N = 7, nv = 300, vocab = 290;
    uint32_t seed = 99;
    real *a = rnd(N * nv, &seed), *b = malloc((size_t)(N * nv) * sizeof(real));
    for (int64_t i = 0; i < N * nv; i++)
        a[i] *= 8;
    memcpy(b, a, (size_t)(N * nv) * sizeof(real));
    int32_t tgt[7] = {0, 289, 5, 100, 288, 17, 250};
    real mx[7], sums[14], la[7], lb[7];
    dp__cpu_ce_max(NULL, mx, b, N, nv, 0, vocab);
    dp__cpu_ce_sums(NULL, sums, b, mx, tgt, N, nv, 0, vocab);
    dp__cpu_ce_grad(NULL, b, lb, mx, sums, tgt, N, nv, 0, vocab, (real)0.125);
    dp__cpu_ce_fused(NULL, a, la, tgt, N, nv, vocab, (real)0.125);
    double el = worst(la, lb, N), eg = worst(a, b, N * nv);
    printf("ce fused against the three passes: loss %.2g, gradient %.2g\n", el, eg);
    CHECK(el < 1e-12);
    CHECK(eg < 1e-12);
    free(a), free(b);
}

int main(void)
{
    check_online();
    check_ce_fused();
    check_shape(2, 1, 2, 1, 4);
    check_shape(1, 31, 2, 2, 8);
    check_shape(2, 32, 4, 2, 16);
    check_shape(1, 33, 4, 1, 8);
    check_shape(2, 70, 4, 2, 24);
    check_shape(1, 97, 3, 3, 5);
    return check_done("test_executor_flash");
}
