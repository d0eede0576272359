/*
 * Rank placement: which global ranks form each parallel group, numbered as
 * Megatron-Core numbers them (megatron/core/parallel_state.py: RankGenerator
 * with the default order "tp-cp-ep-dp-pp"; the decoder generator has ep = 1,
 * the expert generator cp = 1, tp = etp and dp = edp). Geometry
 * only: what the groups cost is costmodel/comm.c.
 */
#include "costmodel.h"

void dp_place_shape(const struct dp_layout *l, enum dp_place_kind k, int *n, long *stride)
{
    const long tp = l->tp, cp = l->cp, dp = l->dp, pp = l->pp, ep = l->ep;
    const long etp = dp_layout_etp(l);
    long nn = 1, s = 1;
    switch (k) {
    case DP_PLACE_TP: nn = tp, s = 1; break;
    case DP_PLACE_CP: nn = cp, s = tp; break;
    case DP_PLACE_DP: nn = dp, s = tp * cp; break;
    case DP_PLACE_DPCP: nn = dp * cp, s = tp; break;
    case DP_PLACE_ETP: nn = etp, s = 1; break;
    case DP_PLACE_EP: nn = ep, s = etp; break;
    case DP_PLACE_EDP: nn = ep * etp > 0 ? tp * cp * dp / (ep * etp) : 1, s = etp * ep; break;
    case DP_PLACE_PP: nn = pp, s = tp * cp * dp; break;
    case DP_PLACE_EMB: nn = pp > 1 ? 2 : 1, s = (pp > 1 ? pp - 1 : 1) * tp * cp * dp; break;
    case DP_PLACE_KINDS: break;
    }
    *n = nn < 1 ? 1 : (int)nn;
    *stride = s < 1 ? 1 : s;
}

int dp_place_ranks(const struct dp_layout *l, enum dp_place_kind k, int rank, int *out, int cap)
{
    long world = (long)l->tp * l->cp * l->dp * l->pp;
    if (rank < 0 || rank >= world || k < 0 || k >= DP_PLACE_KINDS)
        return -1;
    int n;
    long s;
    dp_place_shape(l, k, &n, &s);
    long base;
    if (k == DP_PLACE_EMB) {
        long stage_size = (long)l->tp * l->cp * l->dp, stage = rank / stage_size;
        if (l->pp > 1 && stage != 0 && stage != l->pp - 1)
            return 0;
        base = rank % stage_size;
    } else {
        /* The member index is the rank's coordinate along this group's dimension(s),
         * which sit contiguously in the order: (rank / stride) mod n. */
        base = rank - ((rank / s) % n) * s;
    }
    if (n > cap)
        return -1;
    for (int i = 0; i < n; i++)
        out[i] = (int)(base + i * s);
    return n;
}
