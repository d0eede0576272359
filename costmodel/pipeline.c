/*
 * The pipeline schedule with unequal model chunks: the step time of 1F1B and
 * interleaved 1F1B, and the activations a stage holds at its peak. Both follow
 * the order in which Megatron-LM runs one rank's passes
 * (megatron/core/pipeline_parallel/schedules.py, get_pp_rank_microbatches and
 * get_schedule_table, microbatch_group_size_per_vp_stage = pp):
 *
 *  - forward pass k of every rank runs chunk (k / p) mod v of the micro-batch
 *    group k / (p v): groups of p micro-batches go through chunk 0, then 1, ...;
 *    backward pass j runs chunk v - 1 - (that of forward j);
 *  - rank r first runs W_r warm-up forwards, W_r = p - r - 1 without
 *    interleaving and 2 (p - r - 1) + (v - 1) p with it (at most M v), then
 *    alternates one forward and one backward, then the remaining backwards.
 *
 * Virtual stage s = c p + r is chunk c of rank r; F[s] and B[s] are its forward
 * and backward time for one micro-batch (with its sends). No I/O; pure.
 */
#include "costmodel.h"

#include <string.h>

struct sched {
    int p, v;
    int64_t M, tot;    /* micro-batches; passes each way per rank (M v) */
    int64_t full;      /* complete groups of p micro-batches */
    int64_t q0, qlast; /* micro-batches in the first and the last group */
};

static void sched_init(struct sched *s, int p, int v, int64_t M)
{
    s->p = p;
    s->v = v;
    s->M = M;
    s->tot = M * v;
    s->full = M / p;
    s->q0 = M < p ? M : p;
    s->qlast = M % p ? M % p : (M < p ? M : p);
}

static int64_t warmup(const struct sched *s, int r)
{
    int64_t w = s->v == 1 ? s->p - r - 1 : 2 * (int64_t)(s->p - r - 1) + (int64_t)(s->v - 1) * s->p;
    return w < s->tot ? w : s->tot;
}

/* Chunk of forward pass k, and the first pass after k that runs another chunk. */
static int fwd_chunk(const struct sched *s, int64_t k, int64_t *block_end)
{
    int64_t span = (int64_t)s->p * s->v, base = s->full * span;
    if (k < base) {
        *block_end = (k / s->p + 1) * s->p;
        return (int)((k % span) / s->p);
    }
    int64_t q = s->M - s->full * s->p; /* the partial last group */
    *block_end = base + ((k - base) / q + 1) * q;
    return (int)((k - base) / q);
}

/* Passes among forwards [0, n) per chunk. */
static void fwd_counts(const struct sched *s, int64_t n, int64_t *cnt)
{
    int64_t span = (int64_t)s->p * s->v;
    int64_t g = n / span < s->full ? n / span : s->full;
    for (int c = 0; c < s->v; c++)
        cnt[c] = g * s->p;
    for (int64_t k = g * span; k < n;) {
        int64_t end;
        int c = fwd_chunk(s, k, &end);
        if (end > n)
            end = n;
        cnt[c] += end - k;
        k = end;
    }
}

/* Sum over forward passes [a, b) of rank d's X[chunk * p + d] (rev: backward passes,
 * whose chunk is reversed); X points at rank d's chunk 0. */
static double pass_sum(const struct sched *s, const double *X, int64_t a, int64_t b, bool rev)
{
    if (a < 0)
        a = 0;
    if (b > s->tot)
        b = s->tot;
    if (s->v == 1)
        return a < b ? (double)(b - a) * X[0] : 0;
    double t = 0;
    if (a < b && s->full * s->p == s->M) {
        /* whole groups: runs of p passes, chunk 0, 1, .., v-1, 0, ... */
        int64_t end = (a / s->p + 1) * s->p;
        int c = (int)((a / s->p) % s->v);
        while (a < b) {
            int64_t e = end < b ? end : b;
            t += (double)(e - a) * X[(rev ? s->v - 1 - c : c) * s->p];
            a = e;
            end += s->p;
            if (++c == s->v)
                c = 0;
        }
        return t;
    }
    while (a < b) {
        int64_t end;
        int c = fwd_chunk(s, a, &end);
        if (rev)
            c = s->v - 1 - c;
        if (end > b)
            end = b;
        t += (double)(end - a) * X[c * s->p];
        a = end;
    }
    return t;
}

/* Rank d's passes strictly between two of its forwards (ff) or two of its backwards (bb):
 * after the warm-up, backward j runs right after forward W + j. */
struct rank {
    const struct sched *s;
    const double *F, *B; /* at chunk 0 of rank d */
    int64_t W;
};
static double between_ff(const struct rank *k, int64_t a, int64_t b)
{
    double t = pass_sum(k->s, k->F, a + 1, b, false);
    if (k->W < k->s->tot)
        t += pass_sum(k->s, k->B, a - k->W, b - k->W, true);
    return t;
}
static double between_bb(const struct rank *k, int64_t a, int64_t b)
{
    double t = pass_sum(k->s, k->B, a + 1, b, true);
    if (k->W < k->s->tot)
        t += pass_sum(k->s, k->F, k->W + a + 1, k->W + b + 1, false);
    return t;
}

static double max2(double a, double b)
{
    return a > b ? a : b;
}
#define NEVER (-1e300)

double dp_pipe_time_s(int p, int v, int64_t M, const double *F, const double *B, int *crit)
{
    /*
     * A step lasts at least as long as any chain of passes each of which waits for the
     * one before it (on its rank, or for its input); the result is the longest of the
     * following chains, so it never exceeds the exact length of the schedule with these
     * pass times.
     *
     * Rank d runs all its passes, M D_d; before its first one, micro-batch 0 passes
     * chunk 0 of the ranks before it (fill), after its last one the last micro-batch's
     * gradient passes them back (drain). For equal chunks the last rank's chain is the
     * whole step and its fill + drain the (p - 1)/(v m) bubble of Narayanan et al. 2021
     * (SC'21), Sec. 2.2; for v = 1 and unequal stages, Alpa's objective (Zheng et al.
     * 2022, Eq. 2) is the same chain with every other stage counted in the bubble.
     *
     * The chain of rank d leaves its sequence where a pass waits for a round trip
     * elsewhere, and takes the trip instead of the passes d runs meanwhile:
     *  - warm-up: the first backward (chunk v-1 of micro-batch 0) waits for that
     *    micro-batch to pass chunk v-1 of the later ranks and come back (RT_d);
     *  - cool-down: likewise for the last micro-batch after the last forward;
     *  - chunk boundaries of the first and the last group of p micro-batches: its
     *    forward (backward) in chunk c waits for the micro-batch to pass the p - 1
     *    virtual stages between chunk c-1 and c of rank d; the first or the last
     *    micro-batch of the group, whichever chain is longer and still in order;
     *  - pacing (interleaved): the first group arrives no faster than the slowest
     *    earlier rank runs chunk 0, and the last group's gradients leave no faster.
     * A small dynamic programme keeps the chosen detours in the order rank d runs them.
     * tests/unit/test_costmodel_pipeline.c checks it against an event simulation of
     * the schedule: equal for equal chunks and for the hand-worked 2-rank cases, never
     * above it, within 0.7% on torchtitan-style splits of 30 to 126 layers.
     */
    struct sched s;
    sched_init(&s, p, v, M);
    const int S = p * v;
    if (S > DP_MAX_CHUNKS || p < 1 || v < 1 || M < 1)
        return 0;
    double PF[DP_MAX_CHUNKS + 1], PB[DP_MAX_CHUNKS + 1]; /* prefix sums in model order */
    PF[0] = PB[0] = 0;
    for (int k = 0; k < S; k++) {
        PF[k + 1] = PF[k] + F[k];
        PB[k + 1] = PB[k] + B[k];
    }
    const int64_t q0 = s.q0, ql = s.qlast, tot = s.tot;
    double maxF0 = 0, maxB0 = 0, best = NEVER;
    int bestd = 0;
    for (int d = 0; d < p; d++) {
        double D = 0;
        for (int c = 0; c < v; c++)
            D += F[c * p + d] + B[c * p + d];
        double val = PF[d] + (double)M * D + PB[d];
        if (p > 1) {
            struct rank k = {.s = &s, .F = F + d, .B = B + d, .W = warmup(&s, d)};
            const int64_t W = k.W;
            /* Round trip through chunk v-1 of ranks d+1 .. p-1. */
            int first_last = (v - 1) * p + d + 1;
            double RT = (PF[S] - PF[first_last]) + (PB[S] - PB[first_last]);
            int64_t k0 = (int64_t)(v - 1) * q0;  /* forward of (micro-batch 0, chunk v-1) */
            int64_t nfb = W < tot ? W + 1 : tot; /* forwards before the first backward */
            double eb = RT - pass_sum(&s, k.F, k0 + 1, nfb, false);
            int64_t jb = tot - (int64_t)(v - 1) * ql - 1; /* backward of (last, chunk v-1) */
            int64_t start = W < tot ? tot - W - 1 : 0; /* first backward after the last forward */
            double ec = RT - pass_sum(&s, k.B, start, jb, true);
            double up = 0, dn = 0;
            if (v >= 2 && d > 0) {
                up = maxF0 > F[d] ? (double)(q0 - 1) * (maxF0 - F[d]) : 0;
                dn = maxB0 > B[d] ? (double)(ql - 1) * (maxB0 - B[d]) : 0;
            }
            /* Warm-up: state L = at the start of the current chunk's block of group 0,
             * H = at its last micro-batch. */
            double sL = 0, sH = v >= 2 ? up : NEVER;
            for (int c = 1; c < v; c++) {
                double wr = PF[c * p + d] - PF[(c - 1) * p + d + 1];
                double g0 = wr - between_ff(&k, (c - 1) * q0, c * q0);
                double gH = wr - between_ff(&k, (c - 1) * q0 + q0 - 1, c * q0 + q0 - 1);
                double nL = max2(max2(sL, sH), sL + g0);
                sH = max2(sL + gH, sH + gH);
                sL = nL;
            }
            double st_eb = sL + eb, st_no = max2(sL, sH);
            /* Cool-down, over the last group's blocks (chunk v-1 first); with ec the
             * chain is at the last micro-batch of chunk v-1's block. */
            double g0[DP_MAX_CHUNKS], gH[DP_MAX_CHUNKS], end[2];
            for (int c = v - 1; c >= 1; c--) {
                double wr = PB[c * p + d] - PB[(c - 1) * p + d + 1];
                g0[c] = wr - between_bb(&k, tot - (c + 1) * ql, tot - c * ql);
                gH[c] = wr - between_bb(&k, tot - c * ql - 1, tot - (c - 1) * ql - 1);
            }
            for (int with_ec = 0; with_ec < 2; with_ec++) {
                double eL = with_ec ? NEVER : 0, eH = with_ec ? ec : NEVER;
                for (int c = v - 1; c >= 1; c--) {
                    double nL = max2(max2(eL, eH), eL + g0[c]);
                    eH = max2(eL + gH[c], eH + gH[c]);
                    eL = nL;
                }
                end[with_ec] = max2(max2(eL + dn, eL), eH);
            }
            double g;
            if (W + 1 < tot) /* the first backward precedes the last forward */
                g = max2(st_eb, st_no) + max2(end[0], end[1]);
            else
                g = max2(st_eb + end[0], st_no + max2(end[0], end[1]));
            val += max2(g, 0);
        }
        if (val > best) {
            best = val;
            bestd = d;
        }
        if (F[d] > maxF0)
            maxF0 = F[d];
        if (B[d] > maxB0)
            maxB0 = B[d];
    }
    if (crit)
        *crit = bestd;
    return best;
}

int64_t dp_pipe_peak_live(int p, int v, int64_t M, int r, const int64_t *w, int64_t *live)
{
    /*
     * Activations of a micro-batch in chunk c of rank r live from its forward to its
     * backward (Korthikanti et al. 2022, Sec. 4.2.3, counts them for equal chunks:
     * 1 + (p - 1)/(p v) stages' worth on the first rank). After the warm-up each step
     * adds one forward and frees one backward, so the live bytes after forward W + i,
     * S(i) = sum of w over forwards [0, W + i] - sum over backwards [0, i), walk with a
     * slope that changes only where a pass switches chunk: the peak is at the end of
     * one of those runs, and the pattern repeats every p v steps.
     */
    struct sched s;
    sched_init(&s, p, v, M);
    int64_t W = warmup(&s, r);
    int64_t cf[DP_MAX_CHUNKS], cb[DP_MAX_CHUNKS];
    if (v > DP_MAX_CHUNKS)
        return 0;
    if (W >= s.tot) {
        fwd_counts(&s, s.tot, cf);
        int64_t t = 0;
        for (int c = 0; c < v; c++) {
            if (live)
                live[c] = cf[c];
            t += cf[c] * w[c];
        }
        return t;
    }
    bool equal = true;
    for (int c = 1; c < v; c++)
        equal &= w[c] == w[0];
    if (equal) {
        /* W + 1 passes live after every forward of the steady state */
        if (live) {
            fwd_counts(&s, W + 1, cf);
            for (int c = 0; c < v; c++)
                live[c] = cf[c];
        }
        return (W + 1) * w[0];
    }
    int64_t R = s.tot - W;
    int64_t imax = R - 1;
    if (M % p == 0) {
        /* Whole groups: S(i) = SF(W + i + 1) - SB(i) in O(1) from the chunk prefix sums
         * (a period of p v passes adds p sum(w) to both). */
        int64_t pre[DP_MAX_CHUNKS + 1], rpre[DP_MAX_CHUNKS + 1];
        pre[0] = rpre[0] = 0;
        for (int c = 0; c < v; c++) {
            pre[c + 1] = pre[c] + w[c];
            rpre[c + 1] = rpre[c] + w[v - 1 - c];
        }
        const int64_t span = (int64_t)p * v;
        if (imax > span)
            imax = span;
#define PSUM(P, n)                                                                                 \
    ((n) / span * p * P[v] + p * P[(n) % span / p] +                                               \
     (n) % p * (P[(n) % span / p + 1] - P[(n) % span / p]))
        /* S(0), then run by run: within a run both the forward's and the backward's
         * chunks stay, so S moves by w[forward chunk] - w[backward chunk] per step. */
        int64_t nf = W + 1;
        int64_t S0 = PSUM(pre, nf);
        int64_t best = S0, besti = 0, cur = S0;
        int cf_ = (int)(nf % span / p), cb_ = v - 1; /* chunks of forward W + 1, backward 0 */
        int64_t rf = p - nf % p, rb = p;             /* passes left in their runs */
        for (int64_t i = 0; i < imax;) {
            int64_t len = rf < rb ? rf : rb;
            if (len > imax - i)
                len = imax - i;
            cur += len * (w[cf_] - w[cb_]);
            i += len;
            if (cur > best) {
                best = cur;
                besti = i;
            }
            if ((rf -= len) == 0) {
                rf = p;
                cf_ = cf_ + 1 == v ? 0 : cf_ + 1;
            }
            if ((rb -= len) == 0) {
                rb = p;
                cb_ = cb_ == 0 ? v - 1 : cb_ - 1;
            }
        }
#undef PSUM
        if (live) {
            fwd_counts(&s, W + besti + 1, cf);
            fwd_counts(&s, besti, cb);
            for (int c = 0; c < v; c++)
                live[c] = cf[c] - cb[v - 1 - c];
        }
        return best;
    }
    /* A partial last group (Megatron allows one of at least p micro-batches; dplan's
     * layouts never have one with v > 1): walk every step, counting passes. */
    int64_t best = -1, besti = 0;
    for (int64_t i = 0; i <= imax; i++) {
        fwd_counts(&s, W + i + 1, cf);
        fwd_counts(&s, i, cb);
        int64_t t = 0;
        for (int c = 0; c < v; c++)
            t += (cf[c] - cb[v - 1 - c]) * w[c];
        if (t > best) {
            best = t;
            besti = i;
        }
    }
    fwd_counts(&s, W + besti + 1, cf);
    fwd_counts(&s, besti, cb);
    for (int c = 0; c < v && live; c++)
        live[c] = cf[c] - cb[v - 1 - c];
    return best;
}
