/*
 * The per-row logic of the CUDA backend's MoE and q/k-norm kernels (executor/backend/
 * cuda_moe.h, the code each GPU thread runs) compiled for the host and checked here,
 * where no GPU is: against values worked out by hand (ties in the router's top-k,
 * whose rule is the lower expert index first), and against the CPU backend
 * (cpu_moe.c, cpu_qknorm.c) on the same inputs, bit for bit where the arithmetic is
 * the same sequence of operations and to a stated tolerance where the order differs.
 */
#include "check.h"
#include "executor/backend/cpu.h"
#include "executor/backend/cuda_moe.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static uint64_t lcg = 0x2545f4914f6cdd1dULL;
static double urand(void) /* [0, 1) */
{
    lcg = lcg * 6364136223846793005ULL + 1442695040888963407ULL;
    return (double)(lcg >> 11) * 0x1p-53;
}

/* Logits from a set of 4 values, so that most rows of 8 experts hold ties. */
static float tie_logit(void)
{
    static const float v[4] = {-1.0f, 0.0f, 0.5f, 1.0f};
    return v[(int)(urand() * 4)];
}

static int same_bits(const float *a, const float *b, int64_t n)
{
    return memcmp(a, b, (size_t)n * sizeof *a) == 0;
}

/* Hand cases of the top-k tie rule. */
static void topk_hand(void)
{
    /* softmax over [1, 3, 3, 0, 3, -1, 2, 2], K = 3: three logits of 3 tie for the top;
     * they are taken in index order 1, 2, 4 and share the weight equally (1/3 each). */
    float p[8] = {1, 3, 3, 0, 3, -1, 2, 2}, w[3];
    int32_t ix[3];
    dp__moe_topk_row(p, ix, w, NULL, 8, 3);
    CHECK_EQ(ix[0], 1);
    CHECK_EQ(ix[1], 2);
    CHECK_EQ(ix[2], 4);
    for (int k = 0; k < 3; k++)
        CHECK_NEAR(w[k], 1.0 / 3, 1e-7);
    /* softmax value of a logit of 3: e^3 / (e^1 + 3 e^3 + e^0 + e^-1 + 2 e^2). */
    double den = exp(1.0) + 3 * exp(3.0) + 1 + exp(-1.0) + 2 * exp(2.0);
    CHECK_NEAR(p[1], exp(3.0) / den, 1e-7);
    /* sigmoid with bias: logits all 0 give s = 1/2 for every expert; bias [0, .1, .1, 0, 0,
     * .1] makes experts 1, 2, 5 tie at 0.6 (taken in that order) ahead of 0, 3, 4 (0.5).
     * K = 4: the fourth is the lowest index among the 0.5s, expert 0. The weights are the
     * unbiased s renormalised: 1/2 / 2 = 1/4 each. */
    float q[6] = {0, 0, 0, 0, 0, 0}, wq[4];
    const float bias[6] = {0, 0.1f, 0.1f, 0, 0, 0.1f};
    int32_t iq[4];
    dp__moe_topk_row(q, iq, wq, bias, 6, 4);
    CHECK_EQ(iq[0], 1);
    CHECK_EQ(iq[1], 2);
    CHECK_EQ(iq[2], 5);
    CHECK_EQ(iq[3], 0);
    for (int k = 0; k < 4; k++)
        CHECK_NEAR(wq[k], 0.25, 1e-7);
    CHECK_NEAR(q[3], 0.5, 1e-7);
}

/* Rows of tied and random logits through the row function and the CPU backend. */
static void topk_vs_cpu(bool sigmoid)
{
    enum { N = 64, E = 8, K = 3 };
    float lg[N * E], a[N * E], b[N * E], wa[N * K], wb[N * K], bias[E];
    int32_t ia[N * K], ib[N * K];
    for (int i = 0; i < N * E; i++)
        lg[i] = i < N * E / 2 ? tie_logit() : (float)(4 * urand() - 2);
    for (int e = 0; e < E; e++)
        bias[e] = e % 3 == 0 ? 0.25f : 0.0f; /* ties among the biased ones too */
    memcpy(a, lg, sizeof lg);
    memcpy(b, lg, sizeof lg);
    for (int n = 0; n < N; n++)
        dp__moe_topk_row(a + n * E, ia + n * K, wa + n * K, sigmoid ? bias : NULL, E, K);
    dp__cpu_router_topk(NULL, b, ib, wb, sigmoid ? bias : NULL, N, E, K);
    CHECK(same_bits(a, b, N * E));
    CHECK(memcmp(ia, ib, sizeof ia) == 0);
    CHECK(same_bits(wa, wb, N * K));
    /* Not vacuous: some row among the tied ones must have a tie inside its top K. */
    int tied = 0;
    for (int n = 0; n < N / 2; n++)
        for (int k = 1; k < K; k++)
            tied += a[n * E + ia[n * K + k]] == a[n * E + ia[n * K + k - 1]];
    CHECK(tied > 0);
}

static void router_bwd_hand(void)
{
    /* softmax, E = 2, K = 1, p = [1/4, 3/4], gaux = [1, 0], the top choice dropped
     * (rrow -1): only the auxiliary term, dz_e = p_e (g_e - sum_i p_i g_i) with
     * sum = 1/4: dz = [1/4 * 3/4, 3/4 * -1/4] = [3/16, -3/16]. */
    const float p[2] = {0.25f, 0.75f}, wn[1] = {1}, dw[1] = {5}, ga[2] = {1, 0};
    const int32_t ix[1] = {1}, rr[1] = {-1};
    float d[2];
    dp__moe_router_bwd_row(d, p, wn, ix, rr, dw, ga, false, 2, 1);
    CHECK_NEAR(d[0], 3.0 / 16, 1e-7);
    CHECK_NEAR(d[1], -3.0 / 16, 1e-7);
    /* With K = 1 the combine weight is 1 whatever the logits: kept (rrow 0) it adds
     * w (dw - w dw) = 0, so the same gradient. */
    const int32_t r0[1] = {0};
    dp__moe_router_bwd_row(d, p, wn, ix, r0, dw, ga, false, 2, 1);
    CHECK_NEAR(d[0], 3.0 / 16, 1e-7);
    CHECK_NEAR(d[1], -3.0 / 16, 1e-7);
}

static void router_bwd_vs_cpu(bool sigmoid)
{
    enum { N = 48, E = 8, K = 2 };
    float p[N * E], w[N * K], dw[N * K], ga[E], da[N * E], db[N * E], bias[E] = {0};
    int32_t ix[N * K], rr[N * K];
    for (int i = 0; i < N * E; i++)
        p[i] = tie_logit();
    dp__cpu_router_topk(NULL, p, ix, w, sigmoid ? bias : NULL, N, E, K);
    for (int i = 0; i < N * K; i++) {
        rr[i] = i % 5 == 4 ? -1 : (int32_t)((i * 7) % (N * K)); /* some dropped */
        dw[i] = (float)(urand() - 0.5);
    }
    for (int e = 0; e < E; e++)
        ga[e] = (float)(0.1 * e);
    for (int n = 0; n < N; n++)
        dp__moe_router_bwd_row(da + n * E, p + n * E, w + n * K, ix + n * K, rr + n * K, dw, ga,
                               sigmoid, E, K);
    dp__cpu_router_bwd(NULL, db, p, w, ix, rr, dw, ga, sigmoid, N, E, K);
    CHECK(same_bits(da, db, N * E));
    double nrm = 0;
    for (int i = 0; i < N * E; i++)
        nrm += fabs(da[i]);
    CHECK(nrm > 0);
}

/* The scatter's per-column loop over all columns is the CPU's sum, bit for bit; rows
 * that share a destination make the order matter. */
static void scatter_vs_cpu(void)
{
    enum { R = 40, C = 5, D = 7 };
    float src[R * C], sc[R], a[D * C], b[D * C];
    int32_t idx[R];
    for (int r = 0; r < R; r++) {
        idx[r] = (int32_t)((r * 3) % D);
        sc[r] = (float)urand();
        for (int c = 0; c < C; c++)
            src[r * C + c] = (float)(1e4 * (urand() - 0.5)) * (r % 2 ? 1e-4f : 1.0f);
    }
    for (int i = 0; i < D * C; i++)
        a[i] = b[i] = (float)urand();
    for (int c = 0; c < C; c++)
        dp__moe_scatter_col(a, src, idx, sc, R, C, c);
    dp__cpu_rows_scatter_add(NULL, b, src, idx, sc, R, C);
    CHECK(same_bits(a, b, D * C));
    /* Hand case: two rows into destination 0, scale NULL: 1 + 2 + 3 = 6. */
    float d1[2] = {1, 0}, s1[4] = {2, 10, 3, 20};
    const int32_t i1[2] = {0, 0};
    dp__moe_scatter_col(d1, s1, i1, NULL, 2, 2, 0);
    dp__moe_scatter_col(d1, s1, i1, NULL, 2, 2, 1);
    CHECK_NEAR(d1[0], 6, 0);
    CHECK_NEAR(d1[1], 30, 0);
}

static void qk_norm_vs_cpu(void)
{
    enum { N = 5, NQ = 3, NK = 2, D = 6, LD = (NQ + NK + 2) * D }; /* two v heads after */
    const int H = NQ + NK;
    float x[N * LD], xa[N * LD], xb[N * LD], ra[N * H * D], rb[N * H * D], sa[N * H], sb[N * H];
    float wq[D], wk[D], g[N * LD], ga[N * LD], gb[N * LD];
    float dwqa[D] = {0}, dwka[D] = {0}, dwqb[D] = {0}, dwkb[D] = {0};
    for (int i = 0; i < N * LD; i++) {
        x[i] = (float)(2 * urand() - 1);
        g[i] = (float)(urand() - 0.5);
    }
    for (int c = 0; c < D; c++) {
        wq[c] = (float)(0.5 + urand());
        wk[c] = (float)(0.5 + urand());
    }
    memcpy(xa, x, sizeof x);
    memcpy(xb, x, sizeof x);
    for (int64_t r = 0; r < N * H; r++)
        dp__qkn_fwd_head(xa + dp__qkn_at(r, H, LD, D), ra + r * D, sa + r, r % H < NQ ? wq : wk, D,
                         DP_NORM_EPS);
    dp__cpu_qk_norm_fwd(NULL, xb, LD, rb, sb, wq, wk, N, NQ, NK, D);
    CHECK(same_bits(xa, xb, N * LD)); /* the v heads untouched on both */
    CHECK(same_bits(ra, rb, N * H * D));
    CHECK(same_bits(sa, sb, N * H));

    memcpy(ga, g, sizeof g);
    memcpy(gb, g, sizeof g);
    /* The kernel's weight gradient: 8 phases per column, added in phase order. */
    for (int kind = 0; kind < 2; kind++)
        for (int c = 0; c < D; c++) {
            double s = 0;
            for (int ph = 0; ph < 8; ph++)
                s += dp__qkn_dw_part(ga, LD, ra, sa, N, NQ, NK, D, kind, c, ph, 8);
            (kind ? dwka : dwqa)[c] += (float)s;
        }
    for (int64_t r = 0; r < N * H; r++)
        dp__qkn_bwd_head(ga + dp__qkn_at(r, H, LD, D), ra + r * D, r % H < NQ ? wq : wk,
                         (double)sa[r], D);
    dp__cpu_qk_norm_bwd(NULL, gb, LD, dwqb, dwkb, rb, sb, wq, wk, N, NQ, NK, D);
    CHECK(same_bits(ga, gb, N * LD));
    /* The weight gradient sums N NQ (or N NK) terms rounded to float one by one into a
     * float on the CPU, in double here: each rounding errs by at most 2^-24 relative, so
     * with at most 2 x 15 roundings the two differ by < 30 2^-24 sum |term| < 2e-6 of
     * the terms' absolute sum (they cancel, so the sum's own relative error is larger). */
    for (int c = 0; c < D; c++) {
        double aq = 0, ak = 0;
        for (int64_t r = 0; r < N * H; r++) {
            double t = fabs((double)g[dp__qkn_at(r, H, LD, D) + c] * ra[r * D + c] * sa[r]);
            *(r % H < NQ ? &aq : &ak) += t;
        }
        CHECK(fabs((double)dwqa[c] - dwqb[c]) <= 2e-6 * aq);
        CHECK(fabs((double)dwka[c] - dwkb[c]) <= 2e-6 * ak);
        CHECK(aq > 0 && ak > 0);
    }
    /* Hand case: a head [3, 4, 0, 0] with w = 1: mean square 25/4, rstd = 1 /
     * sqrt(6.25 + 1e-5) = 0.39999968, output [1.2, 1.6, 0, 0] to 1e-6. */
    float h[4] = {3, 4, 0, 0}, hs[4], hr, one[4] = {1, 1, 1, 1};
    dp__qkn_fwd_head(h, hs, &hr, one, 4, 1e-5);
    CHECK_NEAR(hr, 1.0 / sqrt(6.25 + 1e-5), 1e-7);
    CHECK_NEAR(h[0], 1.2, 1e-6);
    CHECK_NEAR(h[1], 1.6, 1e-6);
}

int main(void)
{
    topk_hand();
    topk_vs_cpu(false);
    topk_vs_cpu(true);
    router_bwd_hand();
    router_bwd_vs_cpu(false);
    router_bwd_vs_cpu(true);
    scatter_vs_cpu();
    qk_norm_vs_cpu();
    if (check_failures)
        fprintf(stderr, "%d check(s) failed\n", check_failures);
    return check_failures ? 1 : 0;
}
