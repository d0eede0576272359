/*
 * Collective and point-to-point communication: which link a group uses
 * under Megatron's rank placement, and the alpha-beta time of NCCL's ring
 * and tree algorithms with the bus-bandwidth factors of nccl-tests
 * (doc/PERFORMANCE.md: all-reduce 2(n-1)/n, all-gather and reduce-scatter
 * (n-1)/n).
 */
#include "costmodel.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* NCCL's tree all-reduce reaches a lower bus bandwidth than its ring on large
 * messages; its tuning model credits trees with roughly 0.9 of the ring's
 * per-channel bandwidth on NVLink/IB systems (NVIDIA/nccl src/graph/tuning.cc). */
#define TREE_BW_FRACTION 0.9

/* The link a block of `span` consecutive GPUs of one node crosses. */
static const struct dp_link *intra_link(const struct dp_cluster *cl, int span)
{
    if (cl->ngroup_links > 0 && span >= 2) {
        int k = 0;
        while ((2 << k) < span)
            k++;
        if (k >= cl->ngroup_links)
            k = cl->ngroup_links - 1;
        return &cl->group_link[k];
    }
    return &cl->intra;
}

/* Per-GPU bandwidth inside a node for a group of n: a full mesh (xGMI) gives each
 * GPU (n - 1) direct links; a switch (NVSwitch, PCIe switch) the full per-GPU rate. */
static double intra_bw(const struct dp_link *lk, int n)
{
    double bw = lk->bw_gbps;
    if (lk->p2p_bw_gbps > 0 && n >= 2) {
        double mesh = (n - 1) * lk->p2p_bw_gbps;
        if (mesh < bw)
            bw = mesh;
    }
    return bw * lk->efficiency;
}

/* Each GPU's share of its node's NICs, per direction. */
static double nic_share(const struct dp_cluster *cl)
{
    int nics = cl->nics_per_node > 0 ? cl->nics_per_node : 1;
    return (double)nics * cl->inter.bw_gbps / cl->gpus_per_node;
}

static void group_path(const struct dp_cluster *cl, int n, int stride, struct dp_path *out,
                       bool describe)
{
    out->desc[0] = '\0';
    out->inter_node = false;
    int gpn = cl->gpus_per_node;
    long span = (long)n * stride;
    if (n <= 1) {
        out->busbw_gbps = 1e9;
        out->latency_us = 0;
        out->members_per_node = 1;
        if (describe)
            snprintf(out->desc, sizeof out->desc, "none (1 rank)");
        return;
    }
    if (span <= gpn) {
        const struct dp_link *lk = intra_link(cl, (int)span);
        out->busbw_gbps = intra_bw(lk, n);
        out->latency_us = lk->latency_us;
        out->members_per_node = n;
        if (describe)
            snprintf(out->desc, sizeof out->desc, "%s, inside a node", lk->name);
        return;
    }
    /*
     * Across nodes: k members share each node. NCCL's rings cross every node
     * boundary once per channel and spread channels over the node's NICs, so the
     * group's bus bandwidth is k times each GPU's NIC share (a full 8-GPU ring on a
     * DGX with 8 x 200 Gb/s reaches ~8 x 25 GB/s), capped by the intra-node link.
     */
    int k = stride >= gpn ? 1 : gpn / stride;
    if (k > n)
        k = n;
    double net = k * nic_share(cl) * cl->inter.efficiency;
    double in = k > 1 ? intra_bw(intra_link(cl, k * stride), k) : 1e18;
    out->busbw_gbps = net < in ? net : in;
    out->latency_us = cl->inter.latency_us;
    out->inter_node = true;
    out->members_per_node = k;
    if (describe)
        snprintf(out->desc, sizeof out->desc, "%s across nodes, %d per node", cl->inter.name, k);
}

static void p2p_path(const struct dp_cluster *cl, int stride, struct dp_path *out, bool describe)
{
    out->desc[0] = '\0';
    out->inter_node = false;
    if (stride >= cl->gpus_per_node) {
        out->busbw_gbps = nic_share(cl) * cl->inter.efficiency;
        out->latency_us = cl->inter.latency_us;
        out->inter_node = true;
        out->members_per_node = 1;
        if (describe)
            snprintf(out->desc, sizeof out->desc, "%s across nodes", cl->inter.name);
        return;
    }
    const struct dp_link *lk = intra_link(cl, 2 * stride);
    double bw = lk->p2p_bw_gbps > 0 ? lk->p2p_bw_gbps : lk->bw_gbps;
    out->busbw_gbps = bw * lk->efficiency;
    out->latency_us = lk->latency_us;
    out->members_per_node = 2;
    if (describe)
        snprintf(out->desc, sizeof out->desc, "%s, inside a node", lk->name);
}

void dp_group_path(const struct dp_cluster *cl, int n, int stride, struct dp_path *out)
{
    group_path(cl, n, stride, out, true);
}
void dp_group_path_fast(const struct dp_cluster *cl, int n, int stride, struct dp_path *out)
{
    group_path(cl, n, stride, out, false);
}
void dp_p2p_path(const struct dp_cluster *cl, int stride, struct dp_path *out)
{
    p2p_path(cl, stride, out, true);
}
void dp_p2p_path_fast(const struct dp_cluster *cl, int stride, struct dp_path *out)
{
    p2p_path(cl, stride, out, false);
}

double dp_coll_time_s(enum dp_coll_kind k, double bytes, int n, const struct dp_path *p)
{
    if (bytes <= 0)
        return 0;
    double bw = p->busbw_gbps * 1e9, a = p->latency_us * 1e-6;
    if (k == DP_P2P)
        return a + bytes / bw;
    if (n <= 1)
        return 0;
    double frac = (double)(n - 1) / n;
    switch (k) {
    case DP_ALLREDUCE: {
        double ring = 2.0 * (n - 1) * a + 2.0 * frac * bytes / bw;
        double tree =
            2.0 * ceil(log2((double)n)) * a + 2.0 * frac * bytes / (bw * TREE_BW_FRACTION);
        return ring < tree ? ring : tree;
    }
    case DP_REDUCE_SCATTER:
    case DP_ALLGATHER:
    case DP_ALLTOALL: return (n - 1) * a + frac * bytes / bw;
    default: return 0;
    }
}
