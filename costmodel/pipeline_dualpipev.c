/*
 * The DualPipeV schedule (layout pipeline_schedule dualpipev): the V-shaped cut of
 * DeepSeek's DualPipe (DeepSeek-V3 Technical Report, arXiv 2412.19437, Sec. 3.2.1; the
 * deepseek-ai/DualPipe README: Sea AI Lab's "cut-in-half"), as PyTorch's ScheduleDualPipeV,
 * torchtitan and PithTrain run it. P ranks hold 2P stages in a V: rank r runs stage r
 * (phase 0) and stage 2P - 1 - r (phase 1), so rank 0 holds the embedding and the loss.
 * Each rank runs its passes in the order of PithTrain's DualPipeV.step, eight steps
 * (core/schedule_dualpipev.c, shared with the executor). A pass waits for its input from the
 * neighbouring rank (phase 0 flows up the ranks forward, phase 1 down; the last rank turns phase 0
 * into phase 1, rank 0 the loss into the backward). The step is the last rank to finish. F, B: a
 * stage's forward and full backward (its sends included); Fp, Bp: the same inside an overlapped
 * pair, where one micro-batch's expert all-to-alls run under the other's compute (time.c
 * ep_overlapped); Wt: the weight-gradient part of B, deferred by the zero-bubble passes.
 */
#include "costmodel.h"

#include <stdlib.h>

double dp_pipe_dualpipev_time_s(int P, int64_t M, const double *F, const double *B,
                                const double *Fp, const double *Bp, const double *Wt)
{
    if (P < 1 || M < 2 * (int64_t)P)
        return -1;
    const int64_t cap = 8 * M + 8 * (int64_t)P;
    struct dp_dpv_op *ops = malloc(sizeof *ops * (size_t)cap * (size_t)P);
    int64_t *len = calloc((size_t)P, sizeof *len), *at = calloc((size_t)P, sizeof *at);
    /* done[((r * 2 + ph) * 2 + dir) * M + i]: when rank r finished micro-batch i's
     * forward (dir 0) or backward (dir 1) of phase ph; < 0 until then */
    double *done = malloc(sizeof *done * (size_t)P * 4 * (size_t)M);
    double *clock = calloc((size_t)P, sizeof *clock);
    int64_t *cnt = calloc((size_t)P * 4, sizeof *cnt);             /* per rank, ph, dir */
    double *wq = malloc(sizeof *wq * (size_t)P * (size_t)(2 * M)); /* deferred W, FIFO */
    int64_t *wh = calloc((size_t)P, sizeof *wh), *wt = calloc((size_t)P, sizeof *wt);
    double step = -1;
    if (!ops || !len || !at || !done || !clock || !cnt || !wq || !wh || !wt)
        goto out;
    for (int64_t i = 0; i < (int64_t)P * 4 * M; i++)
        done[i] = -1;
    for (int r = 0; r < P; r++)
        len[r] = dp_dualpipev_ops(P, M, r, ops + (size_t)r * (size_t)cap);
#define DONE(r, ph, dir, i) done[(((int64_t)(r)*2 + (ph)) * 2 + (dir)) * M + (i)]
#define CNT(r, ph, dir)     cnt[((r)*2 + (ph)) * 2 + (dir)]
        /* When micro-batch i's pass of phase ph, direction dir, may start on rank r (its input
         * is ready); < 0 if not yet known. */
#define READY(r, ph, dir, i)                                                                       \
    ((dir) == 0 ? ((ph) == 0 ? ((r) == 0 ? 0.0 : DONE((r)-1, 0, 0, i))                             \
                             : ((r) == P - 1 ? DONE(r, 0, 0, i) : DONE((r) + 1, 1, 0, i)))         \
                : ((ph) == 1 ? ((r) == 0 ? DONE(r, 1, 0, i) : DONE((r)-1, 1, 1, i))                \
                             : ((r) == P - 1 ? DONE(r, 1, 1, i) : DONE((r) + 1, 0, 1, i))))
    for (bool moved = true; moved;) {
        moved = false;
        for (int r = 0; r < P; r++) {
            const struct dp_dpv_op *o = ops + (size_t)r * (size_t)cap;
            while (at[r] < len[r]) {
                struct dp_dpv_op x = o[at[r]];
                double t = clock[r];
                if (x.kind == DP_DPV_W) {
                    t += wh[r] < wt[r] ? wq[(size_t)r * (size_t)(2 * M) + (size_t)wh[r]++] : 0;
                    clock[r] = t;
                    at[r]++;
                    moved = true;
                    continue;
                }
                const int fph = x.ph, bph = x.kind == DP_DPV_FB ? x.ph2 : x.ph;
                const bool fwd = x.kind == DP_DPV_F || x.kind == DP_DPV_FB;
                const bool bwd = x.kind != DP_DPV_F;
                int64_t fi = CNT(r, fph, 0), bi = CNT(r, bph, 1);
                double rf = fwd ? READY(r, fph, 0, fi) : 0, rb = bwd ? READY(r, bph, 1, bi) : 0;
                if (rf < 0 || rb < 0)
                    break; /* waits on another rank */
                if (rf > t)
                    t = rf;
                if (rb > t)
                    t = rb;
                const int sf = dp_pipe_global_stage(P, true, r, fph),
                          sb = dp_pipe_global_stage(P, true, r, bph);
                double d;
                switch (x.kind) {
                case DP_DPV_F: d = F[sf]; break;
                case DP_DPV_B: d = B[sb]; break;
                case DP_DPV_BZ:
                    d = B[sb] - Wt[sb];
                    wq[(size_t)r * (size_t)(2 * M) + (size_t)wt[r]++] = Wt[sb];
                    break;
                default: d = Fp[sf] + Bp[sb]; break;
                }
                t += d;
                if (fwd)
                    DONE(r, fph, 0, CNT(r, fph, 0)++) = t;
                if (bwd)
                    DONE(r, bph, 1, CNT(r, bph, 1)++) = t;
                clock[r] = t;
                at[r]++;
                moved = true;
            }
        }
    }
#undef READY
#undef CNT
#undef DONE
    step = 0;
    for (int r = 0; r < P; r++) {
        if (at[r] < len[r]) { /* cannot happen with the order above: report it */
            step = -1;
            break;
        }
        if (clock[r] > step)
            step = clock[r];
    }
out:
    free(ops);
    free(len);
    free(at);
    free(done);
    free(clock);
    free(cnt);
    free(wq);
    free(wh);
    free(wt);
    return step;
}

int64_t dp_pipe_dualpipev_peak_live(int P, int64_t M, int r, const int64_t *w, int64_t *live)
{
    /* Walk rank r's passes: a forward adds a micro-batch to its phase, a backward frees
     * it (the zero-bubble passes' deferred weight gradients keep only the layers' inputs,
     * left out). An overlapped pair's forward runs before its backward has freed. */
    const int64_t cap = 8 * M + 8 * (int64_t)P;
    struct dp_dpv_op *ops = malloc(sizeof *ops * (size_t)cap);
    if (!ops || P < 1 || r < 0 || r >= P || M < 2 * (int64_t)P) {
        free(ops);
        return 0;
    }
    int64_t n = dp_dualpipev_ops(P, M, r, ops), cur[2] = {0, 0}, best = -1, at[2] = {0, 0};
    for (int64_t k = 0; k < n; k++) {
        const struct dp_dpv_op x = ops[k];
        if (x.kind == DP_DPV_F || x.kind == DP_DPV_FB)
            cur[x.ph]++;
        int64_t b = cur[0] * w[0] + cur[1] * w[1];
        if (b > best) {
            best = b;
            at[0] = cur[0];
            at[1] = cur[1];
        }
        if (x.kind == DP_DPV_B || x.kind == DP_DPV_BZ)
            cur[x.ph]--;
        else if (x.kind == DP_DPV_FB)
            cur[x.ph2]--;
    }
    free(ops);
    if (live) {
        live[0] = at[0];
        live[1] = at[1];
    }
    return best;
}
