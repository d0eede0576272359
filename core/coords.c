/*
 * A rank's coordinates in the layout and back (core.h): Megatron's default
 * order tp-cp-ep-dp-pp with TP fastest (parallel_state.initialize_model_
 * parallel): rank = tp_rank + tp (cp_rank + cp (dp_rank + dp pp_rank)), ep = 1
 * (expert parallelism is not a factor of the world: the expert coordinates refold each
 * stage's tp x cp x dp ranks, dp_rank_ecoords). The executor's process groups, the
 * checkpoints' file names and the launcher's rank map all use it; the functions without
 * _cp are the cp = 1 case.
 */
#include "core.h"

void dp_rank_coords_cp(int rank, int tp, int cp, int dp, int pp, struct dp_coords *out)
{
    out->tp_rank = rank % tp;
    cp = cp > 1 ? cp : 1;
    out->cp_rank = (rank / tp) % cp;
    out->dp_rank = (rank / (tp * cp)) % dp;
    out->pp_rank = rank / (tp * cp * dp);
    (void)pp;
}

int dp_rank_of_cp(const struct dp_coords *c, int tp, int cp, int dp, int pp)
{
    (void)pp;
    cp = cp > 1 ? cp : 1;
    return c->tp_rank + tp * (c->cp_rank + cp * (c->dp_rank + dp * c->pp_rank));
}

void dp_rank_coords(int rank, int tp, int dp, int pp, struct dp_coords *out)
{
    dp_rank_coords_cp(rank, tp, 1, dp, pp, out);
}

int dp_rank_of(const struct dp_coords *c, int tp, int dp, int pp)
{
    return dp_rank_of_cp(c, tp, 1, dp, pp);
}

void dp_rank_ecoords(const struct dp_coords *c, int tp, int cp, int dp, int ep, int etp,
                     struct dp_ecoords *out)
{
    cp = cp > 1 ? cp : 1;
    ep = ep > 0 ? ep : 1;
    etp = etp > 0 ? etp : tp;
    const int n = tp * cp * dp;
    if (n % (ep * etp))
        ep = 1, etp = tp;
    const int i = c->tp_rank + tp * (c->cp_rank + cp * c->dp_rank);
    out->etp = etp, out->ep = ep, out->edp = n / (ep * etp);
    out->etp_rank = i % etp;
    out->ep_rank = (i / etp) % ep;
    out->edp_rank = i / (etp * ep);
}

void dp_rank_of_ecoords(int tp, int cp, int etp, int ep, int etp_rank, int ep_rank, int edp_rank,
                        struct dp_coords *c)
{
    cp = cp > 1 ? cp : 1;
    const int i = etp_rank + etp * (ep_rank + ep * edp_rank);
    c->tp_rank = i % tp;
    c->cp_rank = (i / tp) % cp;
    c->dp_rank = i / (tp * cp);
}
