/*
 * Mixture-of-experts load: how many token copies the busiest GPU's experts
 * process per micro-batch, from the routing (top-k), the capacity factor or
 * dropless routing with its load imbalance, and the expert-parallel folding
 * (Megatron-Core's etp x ep x edp regrouping of each stage's ranks). The
 * memory and time models both size the expert GEMMs, their activations and
 * the dispatch all-to-alls from it. Geometry and counts only: no costs here.
 */
#include "costmodel.h"

double dp_moe_load(const struct dp_model *m, const struct dp_layout *l)
{
    if (m->experts == 0)
        return 1;
    /*
     * Dropless routing sends every token copy where the router says: the busiest
     * EP rank receives moe_imbalance x the mean. With one EP rank every expert is
     * local and the rank's total is fixed (T k copies). A capacity factor c caps
     * each expert at c x its mean share (Megatron moe_expert_capacity_factor;
     * dropped copies skip the expert), and padding fills every expert to exactly
     * that (moe_pad_expert_input_to_capacity).
     */
    double rho = l->ep > 1 ? l->moe_imbalance : 1.0;
    if (l->moe_capacity <= 0)
        return rho;
    if (l->moe_pad)
        return l->moe_capacity;
    return rho < l->moe_capacity ? rho : l->moe_capacity;
}

double dp_moe_rows(const struct dp_model *m, const struct dp_layout *l)
{
    if (m->experts == 0)
        return 0;
    /*
     * A stage's dp x cp replicas route dp cp T k token copies (T = s/cp x mbs tokens
     * per CP rank); each of the edp = tp cp dp / (ep etp) expert replicas gets 1/edp
     * of them and spreads them over its ep x etp GPUs, each etp group computing its
     * E/ep experts' share on the same rows. Per GPU: T k etp / tp, times the load
     * factor. With etp = tp (Megatron's default) that is T k: the TP group gathers
     * its sequence-parallel shards (Megatron MoEAlltoAllTokenDispatcher).
     */
    double T = (double)l->seq_len / l->cp * (double)l->mbs;
    return dp_moe_load(m, l) * T * (double)m->top_k * dp_layout_etp(l) / l->tp;
}
