/*
 * The communicator split of every backend: for this rank, the colour and key of each
 * group of backend.h (MPI_Comm_split, ncclCommSplit), from the layout's degrees. One
 * definition, so the CPU and CUDA backends number their groups alike.
 *
 * Ranks in Megatron's tp-cp-dp-pp order (core/coords.c), experts refolded (below). A group's colour
 * is the coordinates its members share, as one number; its key the member's place in it. The ZeRO
 * shard and replica groups number the dp x cp ranks q = cp_rank + cp dp_rank (Megatron's
 * distributed optimizer shards over its data-parallel group with CP).
 */
#ifndef DPLAN_EXECUTOR_BACKEND_GROUPS_H
#define DPLAN_EXECUTOR_BACKEND_GROUPS_H

#include "core/core.h"
#include "executor/backend/backend.h"

/* Each group's name in errors and the dry run's table, for every backend. */
static inline const char *dp__group_name(int g)
{
    static const char *const names[DP_NGROUPS] = {[DP_GROUP_WORLD] = "world",
                                                  [DP_GROUP_TP] = "tp",
                                                  [DP_GROUP_DP] = "dp",
                                                  [DP_GROUP_PP] = "pp",
                                                  [DP_GROUP_EMB] = "emb",
                                                  [DP_GROUP_NODE] = "node",
                                                  [DP_GROUP_SHARD] = "shard",
                                                  [DP_GROUP_REPL] = "replica",
                                                  [DP_GROUP_CP] = "cp",
                                                  [DP_GROUP_DPCP] = "dp-cp",
                                                  [DP_GROUP_EP] = "ep",
                                                  [DP_GROUP_EDP] = "edp",
                                                  [DP_GROUP_ETP] = "etp",
                                                  [DP_GROUP_ESHARD] = "expert-shard",
                                                  [DP_GROUP_EREPL] = "expert-replica"};
    return g >= 0 && g < DP_NGROUPS ? names[g] : NULL;
}

/* Colour -1: not a member (MPI_UNDEFINED, NCCL_SPLIT_NOCOLOR). DP_GROUP_WORLD has colour
 * 0, key = rank; DP_GROUP_NODE is not planned (the ranks sharing a host, which MPI finds:
 * colour -1 here). */
struct dp__split {
    int color[DP_NGROUPS], key[DP_NGROUPS];
};

static inline void dp__split_plan(int rank, const struct dp_backend_cfg *cfg, struct dp__split *out)
{
    const int tp = cfg->tp, dp = cfg->dp, pp = cfg->pp, cp = cfg->cp > 1 ? cfg->cp : 1;
    const int sh = cfg->shard > 0 && (dp * cp) % cfg->shard == 0 ? cfg->shard : dp * cp;
    struct dp_coords c;
    dp_rank_coords_cp(rank, tp, cp, dp, pp, &c);
    for (int g = 0; g < DP_NGROUPS; g++)
        out->color[g] = -1, out->key[g] = 0;
    const int tc = c.tp_rank + tp * c.cp_rank; /* tp and cp coordinates together */
    const int q = c.cp_rank + cp * c.dp_rank;  /* place among the dp x cp ranks */
    out->color[DP_GROUP_WORLD] = 0, out->key[DP_GROUP_WORLD] = rank;
    out->color[DP_GROUP_TP] = c.cp_rank + cp * (c.dp_rank + dp * c.pp_rank);
    out->key[DP_GROUP_TP] = c.tp_rank;
    out->color[DP_GROUP_DP] = tc + tp * cp * c.pp_rank, out->key[DP_GROUP_DP] = c.dp_rank;
    out->color[DP_GROUP_PP] = tc + tp * cp * c.dp_rank, out->key[DP_GROUP_PP] = c.pp_rank;
    if (pp > 1 && (c.pp_rank == 0 || c.pp_rank == pp - 1))
        out->color[DP_GROUP_EMB] = tc + tp * cp * c.dp_rank, out->key[DP_GROUP_EMB] = c.pp_rank;
    out->color[DP_GROUP_SHARD] = c.tp_rank + tp * (c.pp_rank + pp * (q / sh));
    out->key[DP_GROUP_SHARD] = q % sh;
    out->color[DP_GROUP_REPL] = c.tp_rank + tp * (c.pp_rank + pp * (q % sh));
    out->key[DP_GROUP_REPL] = q / sh;
    out->color[DP_GROUP_CP] = c.tp_rank + tp * (c.dp_rank + dp * c.pp_rank);
    out->key[DP_GROUP_CP] = c.cp_rank;
    out->color[DP_GROUP_DPCP] = c.tp_rank + tp * c.pp_rank, out->key[DP_GROUP_DPCP] = q;
    /* Experts (executor/moe.c): the stage's ranks refolded as etp x ep x edp
     * (core/coords.c dp_rank_ecoords, Megatron-Core's MoE parallel folding). */
    struct dp_ecoords f;
    dp_rank_ecoords(&c, tp, cp, dp, cfg->ep, cfg->etp, &f);
    out->color[DP_GROUP_ETP] = f.ep_rank + f.ep * (f.edp_rank + f.edp * c.pp_rank);
    out->key[DP_GROUP_ETP] = f.etp_rank;
    out->color[DP_GROUP_EP] = f.etp_rank + f.etp * (f.edp_rank + f.edp * c.pp_rank);
    out->key[DP_GROUP_EP] = f.ep_rank;
    out->color[DP_GROUP_EDP] = f.etp_rank + f.etp * (f.ep_rank + f.ep * c.pp_rank);
    out->key[DP_GROUP_EDP] = f.edp_rank;
    /* ZeRO of the experts under HSDP (Megatron-Core parallel_state.py,
     * num_distributed_optimizer_instances: the expert-data-parallel ranks split into
     * instances of edp / instances consecutive ranks, the intra-partial group, whose
     * replicas form the inter-partial group); as many instances as the dense state has
     * replicas. Without HSDP one instance: the shard group is EDP. */
    const int nrep = (dp * cp) / sh, esh = f.edp % nrep == 0 ? f.edp / nrep : f.edp;
    out->color[DP_GROUP_ESHARD] =
        f.etp_rank + f.etp * (f.ep_rank + f.ep * (c.pp_rank + pp * (f.edp_rank / esh)));
    out->key[DP_GROUP_ESHARD] = f.edp_rank % esh;
    out->color[DP_GROUP_EREPL] =
        f.etp_rank + f.etp * (f.ep_rank + f.ep * (c.pp_rank + pp * (f.edp_rank % esh)));
    out->key[DP_GROUP_EREPL] = f.edp_rank / esh;
}

#endif
