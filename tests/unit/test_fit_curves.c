/*
 * fit/curves.c on synthetic data generated here from known parameters with
 * seeded noise: each fit must recover its parameters within tolerances
 * derived from the noise, report standard errors that cover the truth as
 * often as they should, and refuse degenerate input with one line.
 *
 * Tolerances. Noise is multiplicative, time x (1 + sigma N(0,1)) (log-normal
 * for the GEMM curve), sigma 2-3%, so:
 *   - each estimate lies within 4 of its reported standard errors (a 4-sigma
 *     miss happens with probability 6e-5);
 *   - the standard errors are informative: the relative error of a
 *     parameter set by the large sizes is below sigma (n samples average it);
 *   - the rms of the relative residuals estimates sigma: within 35% of it
 *     (the sample rms of n = 30-40 draws has a relative spread of
 *     1/sqrt(2n) = 11-13%: 35% is three of those);
 *   - over 200 seeds, the interval estimate +- 1.96 SE holds the truth in
 *     88-99% of the fits: 94.4% expected (1.96 against Student's t with 38
 *     degrees of freedom, 2.02), binomial spread 1.6%, so the band is 4
 *     spreads below and 3 above. Measured with these seeds: 183, 188 (GEMM
 *     eff_max, half_flops), 185, 188 (alpha, busbw) of 200; 2,000 seeds give
 *     93.6%, 94.7%, 94.1%, 94.0%.
 * Without noise every parameter comes back to 1e-8.
 */
#include "check.h"

#include "fit/fit.h"
#include <math.h>
#include <stdint.h>

static uint64_t rng;
static double uniform01(void) /* splitmix64, in (0, 1] */
{
    uint64_t z = (rng += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    z ^= z >> 31;
    return ((double)(z >> 11) + 1.0) * 0x1.0p-53;
}
static double normal(void) /* Box-Muller */
{
    return sqrt(-2.0 * log(uniform01())) * cos(2.0 * M_PI * uniform01());
}

/* ---------------------------------------------------------------- GEMM curve */

/* A100 bf16 dense peak, 312 TFLOP/s; a curve like the shipped profiles': eff_max 0.78 of it,
 * half of that at 3e9 FLOPs. 40 sizes from 1e7 to 1e13 FLOPs, evenly in log. */
#define GEMM_PEAK 312e12
#define GEMM_EMAX 0.78
#define GEMM_HALF 3e9
#define GEMM_N    40

static void gemm_samples(struct dp_gemm_sample *s, double sigma, uint64_t seed)
{
    rng = seed;
    for (int i = 0; i < GEMM_N; i++) {
        double x = pow(10.0, 7.0 + 6.0 * i / (GEMM_N - 1));
        double t = (x + GEMM_HALF) / (GEMM_PEAK * GEMM_EMAX); /* x / (peak eff(x)) */
        s[i] = (struct dp_gemm_sample){x, t * exp(sigma * normal()), GEMM_PEAK};
    }
}

static void test_gemm_exact(void)
{
    struct dp_gemm_sample s[GEMM_N];
    gemm_samples(s, 0, 1);
    struct dp_gemm_fit f;
    struct dp_err err = {0};
    double resid[GEMM_N];
    CHECK_EQ(dp_fit_gemm(s, GEMM_N, &f, resid, &err), 0);
    CHECK_NEAR(f.curve.eff_max, GEMM_EMAX, 1e-8);
    CHECK_NEAR(f.curve.half_flops, GEMM_HALF, 1e-8);
    CHECK(f.q.rms_rel < 1e-10 && fabs(resid[GEMM_N - 1]) < 1e-10);
    CHECK_NEAR(f.q.r2, 1.0, 1e-12);
    CHECK_EQ(f.q.n, GEMM_N);
    CHECK_EQ(f.q.params, 2);
}

static void test_gemm_noise(void)
{
    const double sigma = 0.02;
    struct dp_gemm_sample s[GEMM_N];
    gemm_samples(s, sigma, 42);
    struct dp_gemm_fit f;
    struct dp_err err = {0};
    CHECK_EQ(dp_fit_gemm(s, GEMM_N, &f, NULL, &err), 0);
    CHECK(fabs(f.curve.eff_max - GEMM_EMAX) <= 4 * f.eff_max_se);
    CHECK(fabs(log10(f.curve.half_flops) - log10(GEMM_HALF)) <= 4 * f.log10_half_se);
    CHECK(f.eff_max_se / GEMM_EMAX < sigma);
    CHECK(f.eff_max_se > 0 && f.half_flops_se > 0);
    CHECK_NEAR(f.q.rms_rel, sigma, 0.35);
    CHECK(f.q.r2 > 0.99); /* efficiency spans 0.3% to 78%: noise is a sliver of it */

    /* Coverage of the reported errors over 200 data sets. */
    int hit_e = 0, hit_h = 0, runs = 200;
    for (int k = 0; k < runs; k++) {
        gemm_samples(s, sigma, 1000 + (uint64_t)k);
        if (dp_fit_gemm(s, GEMM_N, &f, NULL, &err)) {
            check_failures++;
            break;
        }
        hit_e += fabs(f.curve.eff_max - GEMM_EMAX) <= 1.96 * f.eff_max_se;
        hit_h += fabs(log10(f.curve.half_flops) - log10(GEMM_HALF)) <= 1.96 * f.log10_half_se;
    }
    CHECK(hit_e >= 0.88 * runs && hit_e <= 0.99 * runs);
    CHECK(hit_h >= 0.88 * runs && hit_h <= 0.99 * runs);
    if (hit_e < 0.88 * runs || hit_h < 0.88 * runs)
        fprintf(stderr, "coverage: eff_max %d/%d, half_flops %d/%d\n", hit_e, runs, hit_h, runs);
}

static void test_gemm_degenerate(void)
{
    struct dp_gemm_sample s[GEMM_N];
    gemm_samples(s, 0, 1);
    struct dp_gemm_fit f;
    struct dp_err err = {0};
    CHECK_EQ(dp_fit_gemm(s, 2, &f, NULL, &err), DP_EINVAL);
    CHECK_STR(err.msg, "gemm fit: 2 sample(s) for 2 parameters (eff_max, half_flops): need at "
                       "least 3");
    dp_err_clear(&err);
    struct dp_gemm_sample same[3] = {
        {1e9, 1e-5, GEMM_PEAK}, {1e9, 1.1e-5, GEMM_PEAK}, {1e9, 0.9e-5, GEMM_PEAK}};
    CHECK_EQ(dp_fit_gemm(same, 3, &f, NULL, &err), DP_EINVAL);
    CHECK_STR(err.msg, "gemm fit: all 3 samples have the same size (1e+09 FLOPs): eff_max and "
                       "half_flops cannot be told apart");
    dp_err_clear(&err);
    s[1].seconds = -1;
    CHECK_EQ(dp_fit_gemm(s, GEMM_N, &f, NULL, &err), DP_EINVAL);
    CHECK_STR(err.msg, "gemm fit: samples[1].seconds: expected number > 0, got -1");
    dp_err_clear(&err);
    gemm_samples(s, 0, 1);
    s[4].flops = NAN;
    CHECK_EQ(dp_fit_gemm(s, GEMM_N, &f, NULL, &err), DP_EINVAL);
    CHECK_CONTAINS(err.msg, "samples[4].flops: expected number > 0");
    dp_err_clear(&err);
    gemm_samples(s, 0, 1);
    s[39].seconds /= 2; /* 0.78 -> 1.56 of the peak */
    CHECK_EQ(dp_fit_gemm(s, GEMM_N, &f, NULL, &err), DP_EINVAL);
    CHECK_CONTAINS(err.msg, "faster than the peak");
    CHECK(!strchr(err.msg, '\n'));
}

/* ---------------------------------------------------------------- alpha-beta */

/* A ring all-reduce at alpha 6 us per step and 80 GB/s bus bandwidth over 2, 4 and 8 ranks,
 * 1 KiB to 1 GiB in steps of 4x: 3 x 11 = 33 samples, 3% noise. */
#define AB_ALPHA 6e-6
#define AB_BW    80e9

static int coll_samples(enum dp_nccl_coll k, struct dp_coll_sample *s, double sigma, uint64_t seed)
{
    rng = seed;
    int n = 0;
    const int ranks[3] = {2, 4, 8};
    for (int r = 0; r < 3; r++) {
        int g = k == DP_NCCL_SENDRECV ? 2 : ranks[r];
        for (int e = 10; e <= 30; e += 2) {
            double b = ldexp(1.0, e);
            double t = AB_ALPHA * dp_nccl_ring_steps(k, g) + b * dp_nccl_busbw_factor(k, g) / AB_BW;
            s[n++] = (struct dp_coll_sample){b, g, t * (1 + sigma * normal())};
        }
    }
    return n;
}

static void test_alpha_beta(void)
{
    /* The ring's constants by hand: 8 ranks, all-reduce 2 x 7 = 14 steps and 2 x 7 / 8 = 1.75;
     * all-gather 7 and 0.875; send/recv 1 and 1. */
    CHECK_EQ(dp_nccl_ring_steps(DP_NCCL_ALL_REDUCE, 8), 14);
    CHECK_NEAR(dp_nccl_busbw_factor(DP_NCCL_ALL_REDUCE, 8), 1.75, 1e-15);
    CHECK_EQ(dp_nccl_ring_steps(DP_NCCL_ALL_GATHER, 8), 7);
    CHECK_NEAR(dp_nccl_busbw_factor(DP_NCCL_REDUCE_SCATTER, 8), 0.875, 1e-15);
    CHECK_NEAR(dp_nccl_busbw_factor(DP_NCCL_ALLTOALL, 4), 0.75, 1e-15);
    CHECK_NEAR(dp_nccl_busbw_factor(DP_NCCL_SENDRECV, 2), 1.0, 0);
    CHECK_NEAR(dp_nccl_busbw_factor(DP_NCCL_BROADCAST, 8), 1.0, 0);

    struct dp_coll_sample s[40];
    struct dp_alpha_beta_fit f;
    struct dp_err err = {0};
    const enum dp_nccl_coll kinds[3] = {DP_NCCL_ALL_REDUCE, DP_NCCL_ALL_GATHER, DP_NCCL_SENDRECV};
    for (int c = 0; c < 3; c++) {
        int n = coll_samples(kinds[c], s, 0, 1);
        CHECK_EQ(dp_fit_alpha_beta(kinds[c], s, n, &f, NULL, &err), 0);
        CHECK_NEAR(f.alpha_s, AB_ALPHA, 1e-8);
        CHECK_NEAR(f.busbw_Bps, AB_BW, 1e-8);
        CHECK(f.q.rms_rel < 1e-10);

        const double sigma = 0.03;
        n = coll_samples(kinds[c], s, sigma, 7 + (uint64_t)c);
        CHECK_EQ(dp_fit_alpha_beta(kinds[c], s, n, &f, NULL, &err), 0);
        CHECK(fabs(f.alpha_s - AB_ALPHA) <= 4 * f.alpha_se_s);
        CHECK(fabs(f.busbw_Bps - AB_BW) <= 4 * f.busbw_se_Bps);
        CHECK(f.alpha_se_s / AB_ALPHA < sigma && f.busbw_se_Bps / AB_BW < sigma);
        CHECK_NEAR(f.q.rms_rel, sigma, 0.35);
        CHECK(f.q.r2 > 0.99);
    }
    int hit_a = 0, hit_b = 0, runs = 200;
    for (int k = 0; k < runs; k++) {
        int n = coll_samples(DP_NCCL_ALL_REDUCE, s, 0.03, 5000 + (uint64_t)k);
        if (dp_fit_alpha_beta(DP_NCCL_ALL_REDUCE, s, n, &f, NULL, &err)) {
            check_failures++;
            break;
        }
        hit_a += fabs(f.alpha_s - AB_ALPHA) <= 1.96 * f.alpha_se_s;
        hit_b += fabs(f.busbw_Bps - AB_BW) <= 1.96 * f.busbw_se_Bps;
    }
    CHECK(hit_a >= 0.88 * runs && hit_a <= 0.99 * runs);
    CHECK(hit_b >= 0.88 * runs && hit_b <= 0.99 * runs);
    if (hit_a < 0.88 * runs || hit_b < 0.88 * runs)
        fprintf(stderr, "coverage: alpha %d/%d, busbw %d/%d\n", hit_a, runs, hit_b, runs);
}

static void test_alpha_beta_degenerate(void)
{
    struct dp_alpha_beta_fit f;
    struct dp_err err = {0};
    struct dp_coll_sample s[3] = {{1 << 20, 8, 1e-4}, {1 << 20, 8, 1.1e-4}, {1 << 20, 8, 0.9e-4}};
    CHECK_EQ(dp_fit_alpha_beta(DP_NCCL_ALL_REDUCE, s, 2, &f, NULL, &err), DP_EINVAL);
    CHECK_STR(err.msg, "all_reduce fit: 2 sample(s) for 2 parameters (alpha, busbw): need at "
                       "least 3");
    dp_err_clear(&err);
    CHECK_EQ(dp_fit_alpha_beta(DP_NCCL_ALL_REDUCE, s, 3, &f, NULL, &err), DP_EINVAL);
    CHECK_STR(err.msg, "all_reduce fit: all 3 samples have the same size (1.04858e+06 bytes on 8 "
                       "ranks): alpha and bandwidth cannot be told apart");
    dp_err_clear(&err);
    s[1].bytes = 1 << 24;
    s[2].seconds = -2e-4;
    CHECK_EQ(dp_fit_alpha_beta(DP_NCCL_ALL_REDUCE, s, 3, &f, NULL, &err), DP_EINVAL);
    CHECK_STR(err.msg, "all_reduce fit: samples[2].seconds: expected number > 0, got -0.0002");
    dp_err_clear(&err);
    s[2].seconds = 2e-4;
    s[0].ranks = 1;
    CHECK_EQ(dp_fit_alpha_beta(DP_NCCL_ALL_GATHER, s, 3, &f, NULL, &err), DP_EINVAL);
    CHECK_STR(err.msg, "all_gather fit: samples[0].ranks: expected integer >= 2, got 1");
    dp_err_clear(&err);
    /* Times that shrink as sizes grow: no positive bandwidth explains them. */
    struct dp_coll_sample down[3] = {{1e3, 2, 1e-2}, {1e6, 2, 1e-3}, {1e9, 2, 1e-4}};
    CHECK_EQ(dp_fit_alpha_beta(DP_NCCL_SENDRECV, down, 3, &f, NULL, &err), DP_EINVAL);
    CHECK_CONTAINS(err.msg, "the fitted bandwidth is not positive");
}

/* Two launches of one sweep: each size keeps the faster launch's time; a size the other
 * launch did not time, another group size, and a bad time there leave a sample as it was. */
static void test_coll_keep_faster(void)
{
    struct dp_coll_sample s[4] = {
        {1024, 2, 2e-6}, {131072, 2, 100e-6}, {262144, 2, 60e-6}, {524288, 2, 90e-6}};
    const struct dp_coll_sample o[5] = {{131072, 2, 38e-6}, /* faster: kept */
                                        {262144, 2, 65e-6}, /* slower: not */
                                        {1024, 4, 1e-6},    /* another group */
                                        {524288, 2, -1},    /* no time */
                                        {2048, 2, 1e-9}};   /* not in s */
    CHECK_EQ(dp_coll_keep_faster(s, 4, o, 5), 1);
    CHECK_NEAR(s[0].seconds, 2e-6, 0);
    CHECK_NEAR(s[1].seconds, 38e-6, 0);
    CHECK_NEAR(s[2].seconds, 60e-6, 0);
    CHECK_NEAR(s[3].seconds, 90e-6, 0);
    const struct dp_coll_sample nan1 = {1024, 2, NAN};
    CHECK_EQ(dp_coll_keep_faster(s, 4, &nan1, 1), 0);
    CHECK_NEAR(s[0].seconds, 2e-6, 0);
}

/* ---------------------------------------------------------------- memory bandwidth */

/* 20 GB/s streaming with 2 us per pass, 30 sizes from 1e4 to 1e10 bytes, 2% noise. */
#define MB_BW 20e9
#define MB_T0 2e-6

static void mem_samples(struct dp_stream_sample *s, double sigma, uint64_t seed)
{
    rng = seed;
    for (int i = 0; i < 30; i++) {
        double b = pow(10.0, 4.0 + 6.0 * i / 29);
        s[i] = (struct dp_stream_sample){b, (MB_T0 + b / MB_BW) * (1 + sigma * normal())};
    }
}

static void test_mem_bw(void)
{
    struct dp_stream_sample s[30];
    struct dp_membw_fit f;
    struct dp_err err = {0};
    double resid[30];
    mem_samples(s, 0, 1);
    CHECK_EQ(dp_fit_mem_bw(s, 30, &f, resid, &err), 0);
    CHECK_NEAR(f.bw_Bps, MB_BW, 1e-8);
    CHECK_NEAR(f.overhead_s, MB_T0, 1e-8);
    CHECK(fabs(resid[0]) < 1e-10);
    const double sigma = 0.02;
    mem_samples(s, sigma, 99);
    CHECK_EQ(dp_fit_mem_bw(s, 30, &f, resid, &err), 0);
    CHECK(fabs(f.bw_Bps - MB_BW) <= 4 * f.bw_se_Bps);
    CHECK(fabs(f.overhead_s - MB_T0) <= 4 * f.overhead_se_s);
    CHECK(f.bw_se_Bps / MB_BW < sigma);
    CHECK_NEAR(f.q.rms_rel, sigma, 0.35);
    CHECK(f.q.r2 > 0.99);

    CHECK_EQ(dp_fit_mem_bw(s, 1, &f, NULL, &err), DP_EINVAL);
    CHECK_STR(err.msg, "memory bandwidth fit: 1 sample(s) for 2 parameters (overhead, bw): need "
                       "at least 3");
    dp_err_clear(&err);
    struct dp_stream_sample same[3] = {{1e6, 1e-4}, {1e6, 1.1e-4}, {1e6, 1.2e-4}};
    CHECK_EQ(dp_fit_mem_bw(same, 3, &f, NULL, &err), DP_EINVAL);
    CHECK_CONTAINS(err.msg, "all 3 samples have the same size");
    dp_err_clear(&err);
    same[1].bytes = 2e6;
    same[2].seconds = 0;
    CHECK_EQ(dp_fit_mem_bw(same, 3, &f, NULL, &err), DP_EINVAL);
    CHECK_STR(err.msg, "memory bandwidth fit: samples[2].seconds: expected number > 0, got 0");
}

/* ---------------------------------------------------------------- nccl-tests output */

/*
 * 1 GiB all-reduce of floats on 8 ranks in 0.1 s: algbw 1073741824 / 0.1 / 1e9 = 10.74 GB/s,
 * busbw x 2 x 7 / 8 = 18.79 GB/s, 268435456 elements, 100000.00 us. An all-gather of the same:
 * busbw x 7/8 = 9.40. A broadcast is rooted at 0, with no reduction, busbw = algbw.
 */
static void test_nccl_format(void)
{
    char buf[256];
    dp_nccl_header(buf, sizeof buf);
    CHECK_CONTAINS(buf, "size");
    CHECK_CONTAINS(buf, "algbw");
    CHECK_CONTAINS(buf, "busbw");
    CHECK_CONTAINS(buf, "(GB/s)");
    CHECK_CONTAINS(buf, "(us)");
    dp_nccl_row(DP_NCCL_ALL_REDUCE, 1073741824.0, 4, "float", 8, 0.1, buf, sizeof buf);
    CHECK_STR(buf, "   1073741824     268435456     float     sum      -1 100000.00   10.74   "
                   "18.79\n");
    dp_nccl_row(DP_NCCL_ALL_GATHER, 1073741824.0, 4, "float", 8, 0.1, buf, sizeof buf);
    CHECK_CONTAINS(buf, "    none      -1 100000.00   10.74    9.40\n");
    dp_nccl_row(DP_NCCL_BROADCAST, 1073741824.0, 2, "bfloat16", 8, 0.1, buf, sizeof buf);
    CHECK_CONTAINS(buf, "536870912  bfloat16    none       0 100000.00   10.74   10.74\n");
    CHECK_EQ(dp_nccl_coll_parse("reduce_scatter"), DP_NCCL_REDUCE_SCATTER);
    CHECK_EQ(dp_nccl_coll_parse("allreduce"), -1);
}

/* The reuse fit (fit/reuse.c) on samples made from known parameters: SGEMM hot t = 0.5 us +
 * 2 m n k / 140 GFLOP/s + 0.1 ns (m + n) k + 0.12 ns m n; cold adds 2x the extra read time
 * of A and B and the extra write time of C between a curve's ends (read 100 -> 10 GB/s,
 * write 50 -> 5); with seeded noise, relative 2% on each time. */
static void reuse_samples(struct dp_reuse_samples *s, double sigma, uint64_t seed)
{
    static const int shapes[][5] = {
        {0, 0, 256, 1024, 256}, {0, 0, 512, 192, 64},  {0, 0, 512, 64, 256}, {0, 0, 256, 256, 1024},
        {0, 1, 1024, 256, 256}, {0, 1, 128, 128, 128}, {0, 1, 512, 32, 64},  {1, 0, 512, 64, 96},
        {1, 0, 256, 256, 1024}, {1, 0, 256, 256, 256}, {1, 0, 64, 192, 512}, {1, 0, 32, 128, 512}};
    rng = seed;
    memset(s, 0, sizeof *s);
    s->n = 2;
    s->bytes[0] = 524288;
    s->bytes[1] = 268697600;
    s->read_gbps[0] = 100;
    s->read_gbps[1] = 10;
    s->write_gbps[0] = 50;
    s->write_gbps[1] = 5;
    const double drd = 1 / 10e9 - 1 / 100e9, dwr = 1 / 5e9 - 1 / 50e9;
    s->ngemm = (int)(sizeof shapes / sizeof shapes[0]);
    for (int i = 0; i < s->ngemm; i++) {
        const int *g = shapes[i];
        double m = g[2], n = g[3], k = g[4];
        double hot = 0.5e-6 + 2 * m * n * k / 140e9 + 0.1e-9 * (m + n) * k + 0.12e-9 * m * n;
        double cold = hot + 2 * (4 * (m * k + k * n) * drd + 4 * m * n * dwr);
        s->gemm[i] = (struct dp_sgemm_sample){g[0],
                                              g[1],
                                              g[2],
                                              g[3],
                                              g[4],
                                              hot * (1 + sigma * normal()),
                                              i % 2 ? cold * (1 + sigma * normal()) : 0};
    }
    /* a kernel 1.5x as sensitive as its bytes' extra time: 64 KiB read, 32 KiB written */
    double x = 65536 * drd + 32768 * dwr;
    s->act_fwd = (struct dp_reuse_kernel_sample){10e-6, 10e-6 + 1.5 * x, 65536, 32768};
    /* one that came out faster cold (noise): factor 0 */
    s->ce = (struct dp_reuse_kernel_sample){10e-6, 9e-6, 65536, 0};
    s->sumsq = (struct dp_reuse_kernel_sample){0.33e-9, 0.5e-9, 4, 0};
}

static void test_reuse(void)
{
    struct dp_reuse_samples s;
    struct dp_cal_reuse r;
    struct dp_err err = {0};
    reuse_samples(&s, 0, 1);
    CHECK_EQ(dp_fit_reuse(&s, &r, NULL, &err), 0);
    CHECK_NEAR(r.gemm_gflops, 140, 1e-6);
    CHECK_NEAR(r.gemm_call_us, 0.5, 1e-6);
    CHECK_NEAR(r.gemm_ab_ns, 0.1, 1e-6);
    CHECK_NEAR(r.gemm_c_ns, 0.12, 1e-6);
    CHECK_NEAR(r.gemm_cold, 2, 1e-6);
    CHECK(r.gemm_hot_q.rms_rel < 1e-9 && r.gemm_hot_q.n == 12 && r.gemm_cold_q.n == 6);
    CHECK(r.gemm_cold_q.rms_rel < 1e-9);
    CHECK_NEAR(r.act_fwd, 1.5, 1e-9);
    CHECK(r.ce == 0);
    CHECK_NEAR(r.sumsq_ns, 0.33, 1e-9);
    CHECK_EQ(r.n, 2);
    CHECK(r.read_gbps[1] == 10 && r.write_gbps[0] == 50);
    /* 2% noise: the rate and the factors within a few percent, the residuals about 2% */
    reuse_samples(&s, 0.02, 7);
    CHECK_EQ(dp_fit_reuse(&s, &r, NULL, &err), 0);
    CHECK_NEAR(r.gemm_gflops, 140, 0.03);
    CHECK_NEAR(r.gemm_cold, 2, 0.1);
    CHECK(r.gemm_hot_q.rms_rel > 0.005 && r.gemm_hot_q.rms_rel < 0.04);
    /* No call cost in the samples and noise on top: a negative call cost is dropped, not
     * kept, and the rest stays close. */
    reuse_samples(&s, 0, 1);
    for (int i = 0; i < s.ngemm; i++)
        s.gemm[i].hot_s -= 0.5e-6 + (i % 3 ? 0.2e-6 : -0.1e-6);
    CHECK_EQ(dp_fit_reuse(&s, &r, NULL, &err), 0);
    CHECK(r.gemm_call_us >= 0 && r.gemm_ab_ns >= 0 && r.gemm_c_ns >= 0);
    CHECK_NEAR(r.gemm_gflops, 140, 0.05);
    /* Refused in one line. */
    reuse_samples(&s, 0, 1);
    s.ngemm = 4;
    CHECK(dp_fit_reuse(&s, &r, NULL, &err) == DP_EINVAL);
    CHECK_STR(err.msg, "reuse fit: 4 SGEMM samples for 4 parameters (call, rate, packing, C): "
                       "need at least 5");
    dp_err_clear(&err);
    reuse_samples(&s, 0, 1);
    s.bytes[1] = s.bytes[0];
    CHECK(dp_fit_reuse(&s, &r, NULL, &err) == DP_EINVAL);
    CHECK_STR(err.msg, "reuse fit: curve point 1: expected bytes > 0 ascending and rates > 0");
    dp_err_clear(&err);
    reuse_samples(&s, 0, 1);
    s.gemm[3].hot_s = 0;
    CHECK(dp_fit_reuse(&s, &r, NULL, &err) == DP_EINVAL);
    CHECK_STR(err.msg, "reuse fit: SGEMM sample 3: expected positive sizes and hot time, cold "
                       "time >= 0");
}

int main(void)
{
    test_reuse();
    test_gemm_exact();
    test_gemm_noise();
    test_gemm_degenerate();
    test_alpha_beta();
    test_alpha_beta_degenerate();
    test_coll_keep_faster();
    test_mem_bw();
    test_nccl_format();
    return check_done("test_fit_curves");
}
