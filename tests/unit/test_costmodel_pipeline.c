/*
 * The pipeline schedule (costmodel/pipeline.c) against an event simulation
 * written here from Megatron-LM's schedule rules alone: each rank's order of
 * passes (warm-up forwards, one-forward-one-backward, cool-down backwards;
 * groups of p micro-batches through chunk 0, 1, ...), every pass starting when
 * its rank is free and its input has arrived. The simulation gives the exact
 * step of those pass times; the model must equal it for equal chunks and for
 * the hand-worked cases, never exceed it, and stay close on real splits. The
 * in-flight activations are compared with the simulation's live set.
 */
#include "check.h"
#include "costmodel/costmodel.h"

#include <stdlib.h>

#define MAXOPS 4096

struct op {
    int fwd, mb, s; /* forward?, micro-batch, virtual stage */
};

/* Rank r's passes in Megatron's order (schedules.py, forward_backward_pipelining_with/
 * without_interleaving, get_schedule_table with groups of p micro-batches). */
static int rank_ops(int p, int v, int M, int r, struct op *ops)
{
    int tot = M * v, mbk[MAXOPS], ck[MAXOPS], n = 0;
    /* the schedule table: virtual micro-batch k -> (micro-batch, chunk) */
    for (int g = 0; g < M; g += p) {
        int q = g + p <= M ? p : M - g;
        for (int c = 0; c < v; c++)
            for (int i = 0; i < q; i++) {
                mbk[n] = g + i;
                ck[n] = c;
                n++;
            }
    }
    int W = v == 1 ? p - r - 1 : 2 * (p - r - 1) + (v - 1) * p;
    if (W > tot)
        W = tot;
    int k = 0;
    for (int i = 0; i < W; i++, k++)
        ops[k] = (struct op){1, mbk[i], ck[i] * p + r};
    for (int i = 0; i < tot - W; i++) {
        ops[k++] = (struct op){1, mbk[W + i], ck[W + i] * p + r};
        ops[k++] = (struct op){0, mbk[i], (v - 1 - ck[i]) * p + r};
    }
    for (int i = tot - W; i < tot; i++)
        ops[k++] = (struct op){0, mbk[i], (v - 1 - ck[i]) * p + r};
    return k;
}

/* Exact step time of the schedule with these pass times (no waiting but for data). */
static double simulate(int p, int v, int M, const double *F, const double *B)
{
    static struct op ops[16][MAXOPS];
    static double done_f[64][64], done_b[64][64]; /* [micro-batch][virtual stage], -1 = not yet */
    int n[16], at[16] = {0}, S = p * v;
    double free_at[16] = {0};
    for (int m = 0; m < M; m++)
        for (int s = 0; s < S; s++)
            done_f[m][s] = done_b[m][s] = -1;
    int left = 0;
    for (int r = 0; r < p; r++)
        left += n[r] = rank_ops(p, v, M, r, ops[r]);
    while (left > 0) {
        int progressed = 0;
        for (int r = 0; r < p; r++)
            while (at[r] < n[r]) {
                struct op o = ops[r][at[r]];
                double ready;
                if (o.fwd)
                    ready = o.s == 0 ? 0 : done_f[o.mb][o.s - 1];
                else {
                    double a = done_f[o.mb][o.s];
                    double b = o.s == S - 1 ? 0 : done_b[o.mb][o.s + 1];
                    ready = a < 0 || b < 0 ? -1 : a > b ? a : b;
                }
                if (ready < 0)
                    break;
                double t0 = ready > free_at[r] ? ready : free_at[r];
                free_at[r] = t0 + (o.fwd ? F[o.s] : B[o.s]);
                (o.fwd ? done_f : done_b)[o.mb][o.s] = free_at[r];
                at[r]++;
                left--;
                progressed = 1;
            }
        if (!progressed) {
            CHECK(!"simulation deadlocked");
            return -1;
        }
    }
    double t = 0;
    for (int r = 0; r < p; r++)
        t = free_at[r] > t ? free_at[r] : t;
    return t;
}

/* Largest live sum of w over rank r's passes in order (activations of chunk c of a
 * micro-batch live from its forward to its backward). */
static int64_t simulate_live(int p, int v, int M, int r, const int64_t *w)
{
    static struct op ops[MAXOPS];
    int n = rank_ops(p, v, M, r, ops);
    int64_t live = 0, peak = 0;
    for (int i = 0; i < n; i++) {
        int c = ops[i].s / p;
        live += ops[i].fwd ? w[c] : -w[c];
        if (live > peak)
            peak = live;
    }
    return peak;
}

static uint64_t rng = 88172645463325252ULL;
static int rnd(int n)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (int)(rng % (uint64_t)n);
}

static void test_equal_chunks(void)
{
    /* Narayanan et al. 2021, Sec. 2.2: with equal chunks of forward f and backward b
     * the step is m v (f + b) + (p - 1)(f + b): the bubble (p - 1)/(v m) of the ideal.
     * p = 4, v = 2, m = 8, f = 1, b = 2: 8 * 2 * 3 + 3 * 3 = 57. */
    double F[64], B[64];
    for (int i = 0; i < 64; i++) {
        F[i] = 1;
        B[i] = 2;
    }
    CHECK_NEAR(dp_pipe_time_s(4, 2, 8, F, B, NULL), 57, 1e-12);
    CHECK_NEAR(simulate(4, 2, 8, F, B), 57, 1e-12);
    /* 1F1B, p = 8, m = 16: (16 + 7) * 3 = 69. */
    CHECK_NEAR(dp_pipe_time_s(8, 1, 16, F, B, NULL), 69, 1e-12);
    CHECK_NEAR(simulate(8, 1, 16, F, B), 69, 1e-12);
    /* Fewer micro-batches than stages: (m + p - 1)(f + b) still, (3 + 7) * 3 = 30. */
    CHECK_NEAR(dp_pipe_time_s(8, 1, 3, F, B, NULL), 30, 1e-12);
    for (int p = 2; p <= 8; p *= 2)
        for (int v = 1; v <= 4; v++)
            for (int g = 1; g <= 3; g++) {
                int M = g * p;
                double want = (double)M * v * 3 + (p - 1) * 3;
                CHECK_NEAR(dp_pipe_time_s(p, v, M, F, B, NULL), want, 1e-12);
                CHECK_NEAR(simulate(p, v, M, F, B), want, 1e-12);
            }
}

static void test_two_by_two(void)
{
    /*
     * p = 2 ranks, v = 2 chunks, m = 4; virtual stages s0 (rank 0, chunk 0), s1 (rank
     * 1, chunk 0), s2 (rank 0, chunk 1), s3 (rank 1, chunk 1) with forwards 1, 3, 2, 1
     * and backwards twice that. Rank 0 warms up with 2(p-1) + (v-1)p = 4 forwards,
     * rank 1 with 2. Worked by hand (pass, start-end):
     *   rank 0: F0s0 0-1, F1s0 1-2, F0s2 4-6, F1s2 7-9, F2s0 9-10, B0s2 10-14,
     *           F3s0 14-15, B1s2 15-19, F2s2 19-21, B0s0 22-24, F3s2 25-27, B1s0 31-33,
     *           B2s2 34-38, B3s2 38-42, B2s0 44-46, B3s0 50-52
     *   rank 1: F0s1 1-4, F1s1 4-7, F0s3 7-8, B0s3 8-10, F1s3 10-11, B1s3 11-13,
     *           F2s1 13-16, B0s1 16-22, F3s1 22-25, B1s1 25-31, F2s3 31-32, B2s3 32-34,
     *           F3s3 34-35, B3s3 35-37, B2s1 38-44, B3s1 44-50
     * The step is 52. The model's longest chain is rank 1's: the fill F0s0 (1), rank
     * 1's passes, 4 x (3 + 6 + 1 + 2) = 48, and the drain B3s0 (2), with one detour at
     * the last group's chunk boundary: after B2s3 the chain takes B2s2 on rank 0 (4)
     * instead of rank 1's F3s3 and B3s3 (1 + 2): 1 + 48 - 3 + 4 + 2 = 52.
     */
    double F[4] = {1, 3, 2, 1}, B[4] = {2, 6, 4, 2};
    CHECK_NEAR(simulate(2, 2, 4, F, B), 52, 1e-12);
    int crit = -1;
    CHECK_NEAR(dp_pipe_time_s(2, 2, 4, F, B, &crit), 52, 1e-12);
    CHECK_EQ(crit, 1);
    /*
     * Heavy ends (the embedding's and the loss's virtual stages): s0..s3 forwards 2, 1,
     * 1, 2, backwards twice, m = 2. By hand:
     *   rank 0: F0s0 0-2, F1s0 2-4, F0s2 4-5, F1s2 5-6, B0s2 11-13, B1s2 17-19,
     *           B0s0 19-23, B1s0 23-27
     *   rank 1: F0s1 2-3, F1s1 4-5, F0s3 5-7, B0s3 7-11, F1s3 11-13, B1s3 13-17,
     *           B0s1 17-19, B1s1 19-21
     * The step is 27: rank 0's chunk-0 forwards pace rank 1's (2 instead of 1: the
     * fill 2 + (2 - 1) more), rank 1's chunk-1 passes 2 x 6 = 12 follow F1s1 (1), and
     * the last group's gradient goes back through rank 0's B1s2 (2), B0s0 and B1s0
     * (4 + 4): 2 + 2 + 1 + 12 + 2 + 8 = 27, rank 1's chain with its pacing, warm-up
     * and cool-down detours in the model.
     */
    double F2[4] = {2, 1, 1, 2}, B2[4] = {4, 2, 2, 4};
    CHECK_NEAR(simulate(2, 2, 2, F2, B2), 27, 1e-12);
    CHECK_NEAR(dp_pipe_time_s(2, 2, 2, F2, B2, NULL), 27, 1e-12);
}

/* The planner's and the frameworks' splits: chunk counts differing by one layer, the
 * embedding (0.05 layers) on virtual stage 0 and the output layer and loss (0.65
 * layers, Llama 3's vocabulary over its hidden size) on the last; backward = 2x. */
static void test_real_splits(void)
{
    static const struct {
        int L, p, v, M;
    } cases[] = {{126, 8, 8, 16}, {126, 8, 2, 32}, {126, 16, 1, 64}, {126, 16, 2, 32},
                 {94, 8, 4, 32},  {94, 8, 4, 8},   {61, 4, 2, 16},   {126, 4, 4, 16},
                 {30, 4, 2, 8},   {80, 8, 5, 16},  {96, 8, 3, 24}};
    double worst = 0;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        for (int w = 0; w < 3; w++) {
            int p = cases[i].p, v = cases[i].v, M = cases[i].M, S = p * v, c[256];
            double F[256], B[256];
            struct dp_err err = {0};
            int in = w == 1 ? 0 : 1, out = w == 2 ? 0 : 1;
            if (dp_split_torchtitan(cases[i].L, p, v, in, out, c, "t", DP_EINVAL, &err))
                continue;
            for (int s = 0; s < S; s++)
                F[s] = c[s];
            F[0] += 0.05;
            F[S - 1] += 0.65;
            for (int s = 0; s < S; s++)
                B[s] = 2 * F[s];
            double sim = simulate(p, v, M, F, B), model = dp_pipe_time_s(p, v, M, F, B, NULL);
            CHECK(model <= sim * (1 + 1e-12));
            double e = (sim - model) / sim;
            worst = e > worst ? e : worst;
        }
    /* Measured: 0.69% at most (96 layers, p = 8, v = 3, m = 24); the bar is 1%. */
    CHECK(worst < 0.01);
}

static void test_random_lower_bound(void)
{
    /* Any pass times: the model is a chain of the schedule, never longer than it. */
    for (int t = 0; t < 400; t++) {
        int p = 2 + rnd(4), v = 1 + rnd(3), M = p * (1 + rnd(3)), S = p * v;
        double F[64], B[64];
        for (int s = 0; s < S; s++) {
            F[s] = 1 + rnd(3);
            B[s] = 1 + rnd(6);
        }
        double sim = simulate(p, v, M, F, B), model = dp_pipe_time_s(p, v, M, F, B, NULL);
        CHECK(model <= sim * (1 + 1e-12));
        /* and it is at least the busiest rank's work */
        for (int d = 0; d < p; d++) {
            double D = 0;
            for (int c = 0; c < v; c++)
                D += F[c * p + d] + B[c * p + d];
            CHECK(model >= M * D * (1 - 1e-12));
        }
    }
}

static void test_live(void)
{
    /* Korthikanti et al. 2022, Sec. 4.2.3: the first rank holds 1 + (p - 1)/(p v) of its
     * layers' activations under interleaving: p = 4, v = 2, m = 8, one unit per chunk:
     * (1 + 3/8) * 2 chunks * 4 = 11 chunk activations. */
    int64_t w[8] = {1, 1, 1, 1, 1, 1, 1, 1}, live[8];
    CHECK_EQ(dp_pipe_peak_live(4, 2, 8, 0, w, live), 11);
    /* by chunk: chunk 0 of micro-batches 0-3 and 4-6, chunk 1 of 0-3 */
    CHECK_EQ(live[0], 7);
    CHECK_EQ(live[1], 4);
    /* 1F1B: rank r holds p - r micro-batches. */
    CHECK_EQ(dp_pipe_peak_live(8, 1, 16, 3, w, live), 5);
    /* Unequal chunks: chunk 0 of rank 0 weighs 3, chunk 1 weighs 1 (p = 2, v = 2, m =
     * 4). Rank 0 runs F0c0 F1c0 F0c1 F1c1 (warm-up), F2c0 B0c1 F3c0 B1c1 F2c1 B0c0 F3c1
     * B1c0, then B2c1 B3c1 B2c0 B3c0: live 3 6 7 8 11 10 13 12 13 10 11 8 7 6 3 0. The
     * peak, 13, is chunk 0 of micro-batches 0-3 and chunk 1 of micro-batch 1. */
    int64_t w2[2] = {3, 1};
    CHECK_EQ(dp_pipe_peak_live(2, 2, 4, 0, w2, live), 13);
    CHECK_EQ(live[0], 4);
    CHECK_EQ(live[1], 1);
    CHECK_EQ(simulate_live(2, 2, 4, 0, w2), 13);
    for (int t = 0; t < 300; t++) {
        int p = 1 + rnd(6), v = p > 1 ? 1 + rnd(4) : 1, M = p * (1 + rnd(4)), r = rnd(p);
        int64_t ww[8];
        for (int c = 0; c < v; c++)
            ww[c] = 1 + rnd(9);
        int64_t got = dp_pipe_peak_live(p, v, M, r, ww, live), want = simulate_live(p, v, M, r, ww);
        CHECK_EQ(got, want);
        int64_t sum = 0;
        for (int c = 0; c < v; c++)
            sum += live[c] * ww[c];
        CHECK_EQ(sum, got);
    }
}

/*
 * DualPipeV (costmodel/pipeline_dualpipev.c) against the bubble the DualPipe README
 * publishes for it: (PP/2 - 1)(F&B + B - 3W) over PP stages, here PP = 2P on P ranks, on top
 * of the 2M (F + B) each rank computes. With F = 1, B = 2 (full backward), W = 1 (its weight
 * half) and no overlap gain (F&B = F + B) the schedule's step is exactly 2M x 3 + (P - 1) x 2,
 * for every P and M >= 2P. With a gain (an overlapped pair costing 2.5, not 3) the steady
 * pairs shorten the step and the warm-up/cool-down passes do not. Activations: every rank
 * holds 2P + 1 stage-micro-batches at its peak, the README's PP + 1.
 */
static void test_dualpipev(void)
{
    double F[64], B[64], W[64], Fp[64], Bp[64];
    for (int P = 2; P <= 16; P *= 2)
        for (int M = 2 * P; M <= 6 * P; M += P) {
            for (int s = 0; s < 2 * P; s++) {
                F[s] = Fp[s] = 1.0;
                B[s] = Bp[s] = 2.0;
                W[s] = 1.0;
            }
            double t = dp_pipe_dualpipev_time_s(P, M, F, B, Fp, Bp, W);
            CHECK_NEAR(t, 2.0 * M * 3 + (P - 1) * 2.0, 1e-9);
            for (int s = 0; s < 2 * P; s++) {
                Fp[s] = 0.75;
                Bp[s] = 1.75;
            }
            double u = dp_pipe_dualpipev_time_s(P, M, F, B, Fp, Bp, W);
            CHECK(u < t && u > 2.0 * M * 2.5);
        }
    /* too few micro-batches: DualPipeV asserts M >= 2P */
    CHECK(dp_pipe_dualpipev_time_s(4, 7, F, B, F, B, W) < 0);
    int64_t w[2] = {1, 1}, live[2];
    for (int r = 0; r < 4; r++) {
        CHECK_EQ(dp_pipe_dualpipev_peak_live(4, 16, r, w, live), 9);
        CHECK_EQ(live[0] + live[1], 9);
    }
}

/*
 * Uneven DualPipeV stages (a stage list in model order, stage s on rank s or 2P - 1 - s):
 * the simulation is a fixed-order schedule with dependencies, so its step can be no
 * shorter than the busiest rank's own passes (M forwards and backwards of each of its two
 * stages) and no longer than the same schedule with every stage at the slowest stage's
 * times (a max-plus system is monotone in its durations).
 */
static void test_dualpipev_uneven(void)
{
    double F[32], B[32], W[32], Fp[32], Bp[32], Fm[32], Bm[32], Wm[32], Fpm[32], Bpm[32];
    unsigned seed = 12345;
    for (int trial = 0; trial < 200; trial++) {
        int P = 2 << (trial % 3); /* 2, 4, 8 */
        int M = 2 * P + (trial % 5) * P;
        double fmax = 0, bmax = 0, wmax = 0, fpmax = 0, bpmax = 0;
        for (int s = 0; s < 2 * P; s++) {
            seed = seed * 1103515245u + 12345u;
            double n = 1 + (seed >> 16) % 4; /* 1..4 layers */
            F[s] = n;
            B[s] = 2 * n;
            W[s] = n;
            Fp[s] = 0.9 * n;
            Bp[s] = 1.9 * n;
            fmax = F[s] > fmax ? F[s] : fmax;
            bmax = B[s] > bmax ? B[s] : bmax;
            wmax = W[s] > wmax ? W[s] : wmax;
            fpmax = Fp[s] > fpmax ? Fp[s] : fpmax;
            bpmax = Bp[s] > bpmax ? Bp[s] : bpmax;
        }
        for (int s = 0; s < 2 * P; s++) {
            Fm[s] = fmax;
            Bm[s] = bmax;
            Wm[s] = wmax;
            Fpm[s] = fpmax;
            Bpm[s] = bpmax;
        }
        double t = dp_pipe_dualpipev_time_s(P, M, F, B, Fp, Bp, W);
        double busiest = 0;
        for (int r = 0; r < P; r++) {
            int a = r, b = 2 * P - 1 - r;
            /* paired passes may run a forward and a backward together (Fp + Bp) */
            double own = M * (Fp[a] + Bp[a] + Fp[b] + Bp[b]);
            busiest = own > busiest ? own : busiest;
        }
        CHECK(t >= busiest - 1e-9);
        CHECK(t <= dp_pipe_dualpipev_time_s(P, M, Fm, Bm, Fpm, Bpm, Wm) + 1e-9);
    }
}

int main(void)
{
    test_dualpipev();
    test_dualpipev_uneven();
    test_equal_chunks();
    test_two_by_two();
    test_real_splits();
    test_random_lower_bound();
    test_live();
    return check_done("test_costmodel_pipeline");
}
