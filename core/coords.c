/*
 * A rank's coordinates in the layout and back (core.h): Megatron's default
 * order tp-cp-ep-dp-pp with TP fastest (parallel_state.initialize_model_
 * parallel), with cp = ep = 1. The executor's process groups, the
 * checkpoints' file names and the launcher's rank map all use it.
 */
#include "core.h"

void dp_rank_coords(int rank, int tp, int dp, int pp, struct dp_coords *out)
{
    out->tp_rank = rank % tp;
    out->dp_rank = (rank / tp) % dp;
    out->pp_rank = rank / (tp * dp);
    (void)pp;
}

int dp_rank_of(const struct dp_coords *c, int tp, int dp, int pp)
{
    (void)pp;
    return c->tp_rank + tp * (c->dp_rank + dp * c->pp_rank);
}
