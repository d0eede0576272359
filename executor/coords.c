/*
 * A rank's coordinates in the layout and back (backend.h): plain arithmetic,
 * built with or without the CPU backend.
 */
#include "backend.h"

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
