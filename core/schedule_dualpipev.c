/*
 * DualPipeV's pass order (layout pipeline_schedule dualpipev), one place for the cost
 * model's simulation (costmodel/pipeline_dualpipev.c) and the executor's run
 * (executor/interleave.c). P ranks hold 2P stages in a V: rank r runs stage r (phase 0)
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
