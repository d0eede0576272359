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

#define DP_MOE_MAX_GROUPS 4096

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

/*
 * Expected number of the n groups of consecutive experts (group j holds experts j E/n ..
 * (j + 1) E/n - 1: EP rank j's, or with n nodes a node's) a token's k experts reach.
 * random: n x P(one given group is reached). round-robin: NeMo Automodel's
 * FakeBalancedGate gives token i experts (i k + j) mod E, j < k (indices = arange(T k)
 * .view(T, k) % E, nemo_automodel/components/moe/layers.py), so over a rank's tokens the
 * first expert s = i k mod E runs through the multiples of gcd(k, E), each as often:
 * the mean over those starts of the groups that experts s .. s + k - 1 (mod E) fall in.
 */
static double groups_reached(const struct dp_model *m, const struct dp_layout *l, int n)
{
    const int E = (int)m->experts, k = (int)m->top_k;
    if (l->moe_routing != DP_ROUTING_ROUND_ROBIN || k < 1 || E < n || n > DP_MOE_MAX_GROUPS)
        return n * hit(E, (double)E / n, k);
    int step = k, r = E;
    while (r) { /* gcd(k, E) */
        int t = step % r;
        step = r;
        r = t;
    }
    double sum = 0;
    int starts = 0;
    for (int s = 0; s < E; s += step, starts++) {
        unsigned char seen[DP_MOE_MAX_GROUPS] = {0};
        int count = 0;
        for (int j = 0; j < k && j < E; j++) {
            int grp = (int)((int64_t)((s + j) % E) * n / E); /* E/n experts per group */
            count += !seen[grp];
            seen[grp] = 1;
        }
        sum += count;
    }
    return sum / starts;
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
     * forwarding): a token goes once to each GPU hosting one of its experts and once to
     * each remote node hosting one. Of the G GPUs it reaches, each is the landing GPU of
     * its node (the sender's same-index GPU, or the sender itself) with probability 1/g,
     * so G (g - 1)/g copies move over NVLink; of the D nodes it reaches, (N - 1)/N are
     * remote (N = n/g nodes). Random experts: G = n q_gpu, D = N q_node with q the
     * chance that a given GPU's E/n (node's E g/n) experts are among the k, which gives
     * N (g - 1) q_gpu and (N - 1) q_node, carried symmetrically by the nodes' links.
     */
    double N = (double)n / g;
    double G = groups_reached(m, l, n);
    double D = n % g == 0 ? groups_reached(m, l, n / g) : N * hit(E, E * g / n, k);
    *in = G * (g - 1) / g;
    *net = D * (N - 1) / N;
}
