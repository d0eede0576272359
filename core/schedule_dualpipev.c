/*
 * DualPipeV's pass order (layout pipeline_schedule dualpipev), one place for the cost
 * model's simulation (costmodel/pipeline_dualpipev.c), and, numbered into passes
 * (dp_dualpipev_passes), for the executor's run (executor/interleave.c) and the event
 * simulation (sim/schedule.c). P ranks hold 2P stages in a V: rank r runs stage r (phase 0)
 * and stage 2P - 1 - r (phase 1). Rank r's passes are the eight steps of PithTrain's
 * DualPipeV.step (pithtrain/dualpipe/dualpipev.py, from deepseek-ai/DualPipe's
 * dualpipev.py):
 *   1. 2 (P - r - 1) forwards of phase 0
 *   2. r + 1 x (forward 0, forward 1)
 *   3. P - r - 1 x (backward 1 for inputs only, its weight gradients, forward 1)
 *   4. M - 2P + r + 1 x (forward 0 overlapped with backward 1, forward 1 with backward 0);
 *      the last rank runs its first pair apart
 *   5. P - r - 1 x (backward 1, forward 1 overlapped with backward 0)
 *   6. r + 1 x (backward 1, backward 0), the second half for inputs only
 *   7. P - r - 1 x (a deferred weight gradient, backward 0 for inputs only)
 *   8. r + 1 deferred weight gradients
 * Each phase's forwards take its micro-batches in order, and so do its backwards.
 */
#include "core.h"

#include <stdlib.h>

int64_t dp_dualpipev_ops(int P, int64_t M, int r, struct dp_dpv_op *ops)
{
    if (P < 1 || r < 0 || r >= P || M < 2 * (int64_t)P)
        return -1;
    int64_t n = 0;
#define PUT(k, a, b)                                                                               \
    (ops[n++] = (struct dp_dpv_op){(unsigned char)(k), (unsigned char)(a), (unsigned char)(b)})
    for (int64_t i = 0; i < 2 * (int64_t)(P - r - 1); i++)
        PUT(DP_DPV_F, 0, 0);
    for (int64_t i = 0; i < r + 1; i++) {
        PUT(DP_DPV_F, 0, 0);
        PUT(DP_DPV_F, 1, 0);
    }
    for (int64_t i = 0; i < P - r - 1; i++) {
        PUT(DP_DPV_BZ, 1, 0);
        PUT(DP_DPV_W, 0, 0);
        PUT(DP_DPV_F, 1, 0);
    }
    for (int64_t i = 0; i < M - 2 * (int64_t)P + r + 1; i++) {
        if (i == 0 && r == P - 1) {
            PUT(DP_DPV_F, 0, 0);
            PUT(DP_DPV_B, 1, 0);
        } else {
            PUT(DP_DPV_FB, 0, 1);
        }
        PUT(DP_DPV_FB, 1, 0);
    }
    for (int64_t i = 0; i < P - r - 1; i++) {
        PUT(DP_DPV_B, 1, 0);
        PUT(DP_DPV_FB, 1, 0);
    }
    const int64_t s6 = r + 1;
    bool zb = false;
    for (int64_t i = 0; i < s6; i++) {
        if (i == s6 / 2 && r % 2 == 1)
            zb = true;
        PUT(zb ? DP_DPV_BZ : DP_DPV_B, 1, 0);
        if (i == s6 / 2 && r % 2 == 0)
            zb = true;
        PUT(zb ? DP_DPV_BZ : DP_DPV_B, 0, 0);
    }
    for (int64_t i = 0; i < P - r - 1; i++) {
        PUT(DP_DPV_W, 0, 0);
        PUT(DP_DPV_BZ, 0, 0);
    }
    for (int64_t i = 0; i < r + 1; i++)
        PUT(DP_DPV_W, 0, 0);
#undef PUT
    return n;
}

int64_t dp_dualpipev_passes(int P, int64_t M, int r, struct dp_dpv_pass *out)
{
    if (P < 1 || r < 0 || r >= P || M < 2 * (int64_t)P)
        return -1;
    struct dp_dpv_op *ops = malloc((size_t)(8 * (M + P)) * sizeof *ops);
    struct dp_dpv_pass *wq = malloc((size_t)(2 * M) * sizeof *wq); /* BZs waiting for a W */
    int64_t nops = ops && wq ? dp_dualpipev_ops(P, M, r, ops) : -1, n = 0, wh = 0, wt = 0;
    int32_t next[2][2] = {{0, 0}, {0, 0}}; /* per phase, forward and backward */
    for (int64_t i = 0; i < nops; i++) {
        const struct dp_dpv_op o = ops[i];
        struct dp_dpv_pass x = {0};
        if (o.kind == DP_DPV_W) {
            if (wh < wt && out)
                out[n] = wq[wh];
            n += wh < wt;
            wh += wh < wt;
            continue;
        }
        if (o.kind == DP_DPV_F || o.kind == DP_DPV_FB) {
            x = (struct dp_dpv_pass){next[o.ph][0]++, o.ph, DP_DPV_F, o.kind == DP_DPV_FB};
            if (out)
                out[n] = x;
            n++;
        }
        if (o.kind != DP_DPV_F) {
            const unsigned char ph = o.kind == DP_DPV_FB ? o.ph2 : o.ph;
            x = (struct dp_dpv_pass){next[ph][1]++, ph, o.kind == DP_DPV_BZ ? DP_DPV_BZ : DP_DPV_B,
                                     o.kind == DP_DPV_FB};
            if (o.kind == DP_DPV_BZ)
                wq[wt++] = (struct dp_dpv_pass){x.mb, ph, DP_DPV_W, false};
            if (out)
                out[n] = x;
            n++;
        }
    }
    free(ops);
    free(wq);
    return nops < 0 ? -1 : n;
}
