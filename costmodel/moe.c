/*
 * Mixture-of-experts load: how many token copies the busiest GPU's experts
 * process per micro-batch, from the routing (top-k), the capacity factor or
 * dropless routing with its load imbalance, and the expert-parallel folding
 * (Megatron-Core's etp x ep x edp regrouping of each stage's ranks). The
 * memory and time models both size the expert GEMMs, their activations and
 * the dispatch all-to-alls from it. Geometry and counts only: no costs here.
 */
#include "costmodel.h"

#include <math.h>

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
    double rho = 1.0;
    if (l->ep > 1 && l->moe_imbalance >= 1) {
        rho = l->moe_imbalance;
    } else if (l->ep > 1) {
        /*
         * Balanced routing still loads the EP ranks unevenly in each micro-batch: a rank's
         * share of the group's N ep copies (N = T k per rank) is binomial with p = 1/ep,
         * sd sqrt(N (1 - 1/ep)), and the expected largest of ep such shares is at most the
         * mean plus sqrt(2 ln ep) sd (the Gaussian maximal inequality): rho = 1 +
         * sqrt(2 ln ep (1 - 1/ep) / N). Copies of one token go to distinct experts, which
         * only lowers the variance.
         */
        double N = (double)l->seq_len / l->cp * (double)l->mbs * (double)m->top_k;
        double ep = l->ep;
        rho = 1.0 + sqrt(2.0 * log(ep) * (1.0 - 1.0 / ep) / N);
    }
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

/* P(a token's k experts, drawn uniformly without replacement from E, include at least
 * one of m given ones) = 1 - C(E - m, k) / C(E, k). */
static double hit(double E, double m, double k)
{
    double miss = 1;
    for (int i = 0; i < (int)k; i++) {
        double left = E - m - i;
        if (left <= 0)
            return 1;
        miss *= left / (E - i);
    }
    return 1 - miss;
}

void dp_moe_dispatch_copies(const struct dp_model *m, const struct dp_layout *l, int n, int g,
                            double *in, double *net)
{
    *in = *net = 0;
    if (m->experts == 0 || n <= 1)
        return;
    if (g < 1)
        g = 1;
    if (g > n)
        g = n;
    const double E = (double)m->experts, k = (double)m->top_k;
    if (l->moe_dispatcher == DP_DISPATCH_ALLTOALL) {
        /* Every (token, expert) pair is one copy, spread evenly over the n ranks. */
        *in = k * (g - 1) / n;
        *net = k * (double)(n - g) / n;
        return;
    }
    /*
     * DeepEP normal kernels (deepseek-ai/DeepEP README: intranode over NVLink,
     * internode RDMA to the same-index GPU of each destination node, then NVLink
     * forwarding): a token goes once to each GPU hosting one of its experts (E/n
     * each) and once to each remote node hosting one (E g / n each); on each of the
     * N = n/g nodes, the GPUs it reaches other than the landing one receive it over
     * NVLink: N (g - 1) q_gpu copies in all, carried symmetrically by the nodes'
     * links.
     */
    double N = (double)n / g;
    double q_gpu = hit(E, E / n, k), q_node = hit(E, E * g / n, k);
    *in = N * (g - 1) * q_gpu;
    *net = (N - 1) * q_node;
}
