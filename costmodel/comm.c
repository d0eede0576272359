/*
 * Communication: the path each parallel group uses, found from where its
 * members sit (Megatron-Core's numbering, costmodel/place.c, on nodes of
 * consecutive ranks), and the alpha-beta time of NCCL's ring and tree
 * algorithms with the bus-bandwidth factors of nccl-tests
 * (doc/PERFORMANCE.md: all-reduce 2(n-1)/n, all-gather and reduce-scatter
 * (n-1)/n). All-to-alls (MoE dispatch) split each GPU's traffic between the
 * intra-node link and its NIC share by where the group's members sit.
 */
#include "costmodel.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

/* NCCL's tree all-reduce reaches a lower bus bandwidth than its ring on large
 * messages; its tuning model credits trees with roughly 0.9 of the ring's
 * per-channel bandwidth on NVLink/IB systems (NVIDIA/nccl src/graph/tuning.cc). */
#define TREE_BW_FRACTION  0.9
#define LL128_BW_FRACTION 0.92

/* The link a block of `span` consecutive GPUs of one node crosses (rounded up to an
 * aligned power of two). */
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

/*
 * What one GPU sends across nodes per direction when `senders` consecutive GPUs
 * of its node do so at the same step. NCCL sends through the NIC nearest the GPU
 * (its topology search pairs GPUs with their closest NICs): one per GPU on a DGX,
 * one per GPU pair in the PCIe-optimized 2-8-5 server (profiles/system), so the
 * senders reach ceil(senders x nics / gpus_per_node) NICs and share them.
 */
static double net_p2p_bw(const struct dp_cluster *cl, int senders)
{
    int gpn = cl->gpus_per_node, nics = cl->nics_per_node > 0 ? cl->nics_per_node : 1;
    if (senders > gpn)
        senders = gpn;
    if (senders < 1)
        senders = 1;
    long reach = ((long)senders * nics + gpn - 1) / gpn;
    if (reach > nics)
        reach = nics;
    return (double)reach * cl->inter.bw_gbps / senders * cl->inter.efficiency;
}

static long ceil_div(long a, long b)
{
    return a >= 0 ? (a + b - 1) / b : -((-a) / b);
}

static long gcd(long a, long b)
{
    while (b) {
        long t = a % b;
        a = b;
        b = t;
    }
    return a;
}

/* The smallest aligned block (a power of two of GPUs) holding node places x and y. */
static int block_of(long x, long y)
{
    int b = 1;
    while (x / b != y / b)
        b *= 2;
    return b;
}

enum pattern { COLLECTIVE, CHAIN, RING, ALLTOALL };

/*
 * A kind of group: n members `s` ranks apart; the groups start at a + b * period
 * for a in [0, lanes), b in [0, blocks). In one p2p step `senders` GPUs of a node
 * send across nodes (one per group passing through it: the stride, for groups
 * laid along consecutive ranks).
 */
struct family {
    int n;
    long s, lanes, period, blocks;
    int senders;
    enum pattern pat;
};

/* Where one group lies: its members at c + i s, c its first member's place in its node. */
struct geo {
    int nodes;        /* nodes it touches */
    int kmin;         /* fewest members on one of them */
    int hops, hops_x; /* p2p hops, and those crossing nodes */
    int block;        /* collective inside a node: the block its members span; p2p: the
                         largest block an intra-node hop spans (0: no such hop) */
};

static void geometry(const struct family *f, long c, int gpn, bool blocks_matter, struct geo *g)
{
    const int n = f->n;
    const long s = f->s;
    g->hops = f->pat == RING ? n : n - 1;
    g->block = 0;
    if (s >= gpn) {
        /* Members at least a node apart: each on its own node. */
        g->nodes = n;
        g->kmin = 1;
        g->hops_x = g->hops;
        return;
    }
    long last = c + (long)(n - 1) * s;
    g->nodes = (int)(last / gpn + 1); /* hops shorter than a node skip no node */
    g->hops_x = g->nodes - 1 + (f->pat == RING && g->nodes > 1 ? 1 : 0);
    if (g->nodes == 1) {
        g->kmin = n;
    } else {
        long first = (gpn - 1 - c) / s + 1;
        long lastn = n - ceil_div((long)(g->nodes - 1) * gpn - c, s);
        long k = first < lastn ? first : lastn;
        /* Interior nodes: the count repeats every s / gcd(s, gpn) nodes. */
        long jmax = g->nodes - 2 < s ? g->nodes - 2 : s;
        for (long j = 1; j <= jmax; j++) {
            long cnt = ceil_div((j + 1) * gpn - c, s) - ceil_div(j * gpn - c, s);
            if (cnt < k)
                k = cnt;
        }
        g->kmin = (int)k;
    }
    if (!blocks_matter)
        return;
    if (f->pat == COLLECTIVE || f->pat == ALLTOALL) {
        if (g->nodes == 1)
            g->block = block_of(c, last);
        return;
    }
    /* Hop i joins c + i s and c + (i + 1) s; their places in a node repeat every
     * gpn / gcd(s, gpn) hops. */
    long period = gpn / gcd(s, gpn), nh = n - 1 < period ? n - 1 : period;
    for (long i = 0; i < nh; i++) {
        long x = c + i * s, y = x + s;
        if (x / gpn == y / gpn) {
            int b = block_of(x % gpn, y % gpn);
            if (b > g->block)
                g->block = b;
        }
    }
    if (f->pat == RING && g->nodes == 1 && n > 2) {
        int b = block_of(c, last); /* the hop closing the ring */
        if (b > g->block)
            g->block = b;
    }
}

/*
 * NCCL's per-hop ring latency grows from the LL128 to the Simple protocol by
 * (hwLat Ring Simple - LL128, NVIDIA/nccl src/graph/tuning.cc): NVLink 3.4 - 1.9,
 * PCIe 5.7 - 2.5, network 14.0 - 4.0 us; the profiles' latency_us is the LL128 one.
 */
static double simple_gap_us(const struct dp_link *lk)
{
    switch (lk->kind) {
    case DP_LINK_NET: return 10.0;
    case DP_LINK_PCIE: return 3.2;
    default: return 1.5;
    }
}

/* A path candidate: one group's bandwidth and latency, and the links it names. */
struct cand {
    double bw, lat;
    double a2a_in, a2a_net; /* all-to-alls: the two per-GPU rates */
    struct geo g;
    const struct dp_link *slow, *in; /* slowest link; p2p: the link of the intra-node hops */
};

static void cost(const struct dp_cluster *cl, const struct family *f, const struct geo *g,
                 struct cand *o)
{
    o->g = *g;
    o->in = NULL;
    if (f->pat == ALLTOALL && g->nodes > 1) {
        /*
         * All-to-all (MoE token dispatch and combine): each GPU sends 1/n of its buffer
         * to every member, the k - 1 on its own node over the intra-node link and the
         * n - k elsewhere through its own share of the node's NICs (every GPU of the
         * node sends across at once, so nothing aggregates as in a ring). The slower
         * of the two paces the step; the node holding the fewest members sends the
         * most across. As a bus bandwidth for dp_coll_time_s's (n - 1)/n factor:
         * busbw = ((n - 1)/n) / max(((k - 1)/n) / bw_in, ((n - k)/n) / bw_net).
         */
        int n = f->n, k = g->kmin;
        double net = nic_share(cl) * cl->inter.efficiency;
        const struct dp_link *lk = intra_link(cl, (int)(k * f->s));
        double in = k > 1 ? intra_bw(lk, k) : 1e18;
        double t_in = (double)(k - 1) / n / in, t_net = (double)(n - k) / n / net;
        o->bw = ((double)(n - 1) / n) / (t_in > t_net ? t_in : t_net);
        o->lat = cl->inter.latency_us;
        o->slow = t_in > t_net ? lk : &cl->inter;
        o->a2a_in = k > 1 ? in : intra_bw(lk, 2);
        o->a2a_net = net;
        return;
    }
    if (f->pat == COLLECTIVE || f->pat == ALLTOALL) {
        if (g->nodes == 1) {
            const struct dp_link *lk = intra_link(cl, g->block > 0 ? g->block : (int)(f->n * f->s));
            o->bw = intra_bw(lk, f->n);
            o->lat = lk->latency_us;
            o->slow = lk;
            o->a2a_in = o->a2a_net = o->bw;
            return;
        }
        /*
         * Across nodes: k members share a node. NCCL's rings cross every node
         * boundary once per channel and spread channels over the node's NICs, so
         * the group's bus bandwidth is k times each GPU's NIC share (a full 8-GPU
         * ring on a DGX with 8 x 200 Gb/s reaches ~8 x 25 GB/s), capped by the
         * intra-node link; the node holding the fewest members paces the ring.
         */
        int k = g->kmin;
        double net = k * nic_share(cl) * cl->inter.efficiency;
        double in = k > 1 ? intra_bw(intra_link(cl, (int)(k * f->s)), k) : 1e18;
        o->bw = net < in ? net : in;
        o->lat = cl->inter.latency_us;
        o->slow = &cl->inter;
        return;
    }
    /* Point-to-point: every hop moves at once, the slowest one paces the step. */
    o->bw = 1e18;
    o->lat = 0;
    o->slow = NULL;
    if (g->hops_x < g->hops) {
        const struct dp_link *lk = intra_link(cl, g->block > 0 ? g->block : 2);
        double bw = (lk->p2p_bw_gbps > 0 ? lk->p2p_bw_gbps : lk->bw_gbps) * lk->efficiency;
        o->bw = bw;
        o->lat = lk->latency_us;
        o->slow = o->in = lk;
    }
    if (g->hops_x > 0) {
        double bw = net_p2p_bw(cl, f->senders);
        if (bw <= o->bw) {
            o->bw = bw;
            o->slow = &cl->inter;
        }
        if (cl->inter.latency_us > o->lat)
            o->lat = cl->inter.latency_us;
    }
}

static bool worse(const struct cand *a, const struct cand *b)
{
    if (a->bw != b->bw)
        return a->bw < b->bw;
    if (a->g.hops_x != b->g.hops_x)
        return a->g.hops_x > b->g.hops_x;
    return a->lat > b->lat;
}

static void describe(const struct dp_cluster *cl, const struct family *f, const struct cand *w,
                     struct dp_path *out)
{
    const struct geo *g = &w->g;
    snprintf(out->link, sizeof out->link, "%s", w->slow->name);
    if (f->pat == COLLECTIVE || f->pat == ALLTOALL) {
        if (g->nodes == 1)
            snprintf(out->desc, sizeof out->desc, "%s, inside a node", w->slow->name);
        else
            snprintf(out->desc, sizeof out->desc, "%s across nodes, %d per node", cl->inter.name,
                     g->kmin);
        return;
    }
    const char *what = f->pat == RING ? "ring hop" : "hop", *pl = g->hops == 1 ? "" : "s";
    int in = g->hops - g->hops_x;
    if (g->hops_x == 0)
        snprintf(out->desc, sizeof out->desc, "%s, inside a node", w->slow->name);
    else if (in == 0)
        snprintf(out->desc, sizeof out->desc, "%s across nodes (%d %s%s, %sacross nodes)",
                 cl->inter.name, g->hops, what, pl, g->hops == 1 ? "" : "all ");
    else if (w->slow == &cl->inter)
        snprintf(out->desc, sizeof out->desc,
                 "%s across nodes (%d %s%s: %d across nodes, %d inside a node over %s)",
                 cl->inter.name, g->hops, what, pl, g->hops_x, in, w->in->name);
    else
        snprintf(out->desc, sizeof out->desc,
                 "%s, inside a node (%d %s%s: %d inside a node, the slowest; %d across nodes "
                 "over %s)",
                 w->slow->name, g->hops, what, pl, in, g->hops_x, cl->inter.name);
}

static void family_path(const struct dp_cluster *cl, const struct family *f, bool desc,
                        struct dp_path *out)
{
    out->desc[0] = out->link[0] = '\0';
    out->latency_us = out->simple_us = 0;
    out->hops = out->hops_inter = 0;
    out->inter_node = false;
    if (f->n <= 1) {
        out->busbw_gbps = out->in_gbps = out->net_gbps = 1e9;
        out->members_per_node = 1;
        out->nodes = 1;
        if (desc)
            snprintf(out->desc, sizeof out->desc, "none (1 rank)");
        return;
    }
    const int gpn = cl->gpus_per_node > 0 ? cl->gpus_per_node : 1;
    const bool blocks_matter = cl->ngroup_links > 0;
    struct cand w = {0}, c;
    struct geo g;
    bool have = false;
    if (f->s >= gpn) {
        geometry(f, 0, gpn, blocks_matter, &g);
        cost(cl, f, &g, &w);
        have = true;
    } else {
        /* The places in a node where groups start: (a + b period) mod gpn. */
        uint64_t seen[16] = {0};
        bool track = gpn <= 64 * 16;
        long step = f->period % gpn, nb = gpn / gcd(step, gpn);
        if (nb > f->blocks)
            nb = f->blocks;
        for (long b = 0; b < (nb > 0 ? nb : 1); b++)
            for (long a = 0; a < f->lanes; a++) {
                long r = (a + b * step) % gpn;
                if (track) {
                    if (seen[r / 64] >> (r % 64) & 1)
                        continue;
                    seen[r / 64] |= (uint64_t)1 << (r % 64);
                }
                geometry(f, r, gpn, blocks_matter, &g);
                cost(cl, f, &g, &c);
                if (!have || worse(&c, &w))
                    w = c;
                have = true;
            }
    }
    out->busbw_gbps = w.bw;
    out->latency_us = w.lat;
    out->simple_us = w.slow ? w.lat + simple_gap_us(w.slow) : w.lat;
    out->in_gbps = f->pat == ALLTOALL ? w.a2a_in : 0;
    out->net_gbps = f->pat == ALLTOALL ? w.a2a_net : 0;
    out->inter_node = w.g.nodes > 1;
    out->members_per_node = w.g.kmin;
    out->nodes = w.g.nodes;
    if (f->pat == CHAIN || f->pat == RING) {
        out->hops = w.g.hops;
        out->hops_inter = w.g.hops_x;
    }
    if (desc)
        describe(cl, f, &w, out);
}

static struct family tiling(const struct dp_cluster *cl, int n, long s, long world,
                            enum pattern pat)
{
    struct family f = {.n = n, .s = s, .lanes = s, .period = (long)n * s, .pat = pat};
    f.blocks = world / f.period > 0 ? world / f.period : 1;
    f.senders = (int)(s < cl->gpus_per_node ? s : cl->gpus_per_node);
    return f;
}

void dp_group_path(const struct dp_cluster *cl, int n, long stride, struct dp_path *out)
{
    struct family f = tiling(cl, n, stride, dp_cluster_gpus(cl), COLLECTIVE);
    family_path(cl, &f, true, out);
}

void dp_group_path_fast(const struct dp_cluster *cl, int n, long stride, struct dp_path *out)
{
    struct family f = tiling(cl, n, stride, dp_cluster_gpus(cl), COLLECTIVE);
    family_path(cl, &f, false, out);
}

void dp_p2p_path(const struct dp_cluster *cl, int n, long stride, bool ring, struct dp_path *out)
{
    struct family f = tiling(cl, n, stride, dp_cluster_gpus(cl), ring ? RING : CHAIN);
    family_path(cl, &f, true, out);
}

void dp_alltoall_path(const struct dp_cluster *cl, int n, long stride, struct dp_path *out)
{
    struct family f = tiling(cl, n, stride, dp_cluster_gpus(cl), ALLTOALL);
    family_path(cl, &f, true, out);
}

static void layout_path(const struct dp_cluster *cl, const struct dp_layout *l,
                        enum dp_place_kind k, bool desc, struct dp_path *out)
{
    int n;
    long s;
    dp_place_shape(l, k, &n, &s);
    long stage = (long)l->tp * l->cp * l->dp, world = stage * l->pp;
    enum pattern pat = COLLECTIVE;
    if (k == DP_PLACE_CP)
        pat = RING; /* ring attention sends to (cp_rank + 1) mod cp (TransformerEngine) */
    else if (k == DP_PLACE_EP)
        pat = ALLTOALL; /* token dispatch and combine (Megatron MoEAlltoAllTokenDispatcher) */
    else if (k == DP_PLACE_PP || k == DP_PLACE_EMB)
        pat = k == DP_PLACE_PP && l->vpp > 1 ? RING : CHAIN;
    struct family f = tiling(cl, n, s, world, pat);
    if (k == DP_PLACE_EMB) {
        /* One pair per rank of the first stage, with its counterpart on the last. */
        f.lanes = stage;
        f.period = world;
        f.blocks = 1;
        f.senders = (int)(stage < cl->gpus_per_node ? stage : cl->gpus_per_node);
    }
    family_path(cl, &f, desc, out);
}

void dp_place_path(const struct dp_cluster *cl, const struct dp_layout *l, enum dp_place_kind k,
                   struct dp_path *out)
{
    layout_path(cl, l, k, true, out);
}

void dp_place_path_fast(const struct dp_cluster *cl, const struct dp_layout *l,
                        enum dp_place_kind k, struct dp_path *out)
{
    layout_path(cl, l, k, false, out);
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
    double as = p->simple_us > 0 ? p->simple_us * 1e-6 : a;
    /* LL128 reaches 120/128 of the bus bandwidth (tuning.cc: busBw * 0.92); without a
     * Simple latency (hand-made paths) the one latency goes with full bandwidth. */
    double f128 = p->simple_us > 0 ? LL128_BW_FRACTION : 1.0;
    switch (k) {
    case DP_ALLREDUCE: {
        double vol = 2.0 * frac * bytes / bw;
        double ring = 2.0 * (n - 1) * a + vol / f128, ring_s = 2.0 * (n - 1) * as + vol;
        double tree = 2.0 * ceil(log2((double)n)) * a + vol / TREE_BW_FRACTION;
        double r = ring < ring_s ? ring : ring_s;
        return r < tree ? r : tree;
    }
    case DP_REDUCE_SCATTER:
    case DP_ALLGATHER: {
        double vol = frac * bytes / bw;
        double ll = (n - 1) * a + vol / f128, simple = (n - 1) * as + vol;
        return ll < simple ? ll : simple;
    }
    case DP_ALLTOALL: return (n - 1) * a + frac * bytes / bw;
    default: return 0;
    }
}
