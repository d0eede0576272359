/*
 * Rank placement and the paths it implies. The rank maps are written out by
 * hand from Megatron-Core's numbering (parallel_state.py: order
 * "tp-cp-ep-dp-pp"; its docstrings give the tp=2 pp=4 and tp=4 cp=2 maps
 * used below), not computed; the paths are checked against hop counts and
 * bandwidths worked out by hand, and against a brute-force walk over every
 * group of many small layouts.
 */
#include "check.h"
#include "costmodel/costmodel.h"

#include <stdlib.h>

static struct dp_layout lay(int tp, int cp, int dp, int pp, int ep)
{
    struct dp_layout l;
    dp_layout_default(&l);
    l.tp = tp;
    l.cp = cp;
    l.dp = dp;
    l.pp = pp;
    l.ep = ep;
    return l;
}

/* One kind's groups of a layout, each terminated by -1, the list by -2. */
static void check_map(const struct dp_layout *l, enum dp_place_kind k, const int *groups,
                      const char *what)
{
    int world = l->tp * l->cp * l->dp * l->pp, covered = 0;
    const int *g = groups;
    while (*g != -2) {
        int n = 0;
        while (g[n] >= 0)
            n++;
        for (int i = 0; i < n; i++) {
            int got[64];
            int m = dp_place_ranks(l, k, g[i], got, 64);
            if (m != n) {
                fprintf(stderr, "%s: rank %d: group of %d, want %d\n", what, g[i], m, n);
                check_failures++;
                continue;
            }
            for (int j = 0; j < n; j++)
                if (got[j] != g[j]) {
                    fprintf(stderr, "%s: rank %d: member %d is %d, want %d\n", what, g[i], j,
                            got[j], g[j]);
                    check_failures++;
                }
        }
        covered += n;
        g += n + 1;
    }
    if (k != DP_PLACE_EMB)
        CHECK_EQ(covered, world); /* the table is a partition of all ranks */
}

#define E -1 /* end of a group */
#define Z -2 /* end of the table */

static void test_rank_maps(void)
{
    /* Megatron-Core's docstring: 16 GPUs, tp=2, pp=4 (so dp=2). */
    struct dp_layout a = lay(2, 1, 2, 4, 1);
    static const int a_tp[] = {0, 1, E,  2,  3, E,  4,  5, E,  6,  7, E, 8,
                               9, E, 10, 11, E, 12, 13, E, 14, 15, E, Z};
    static const int a_dp[] = {0,  2, E, 1,  3, E,  4,  6, E,  5,  7, E, 8,
                               10, E, 9, 11, E, 12, 14, E, 13, 15, E, Z};
    static const int a_pp[] = {0, 4, 8, 12, E, 1, 5, 9, 13, E, 2, 6, 10, 14, E, 3, 7, 11, 15, E, Z};
    static const int a_emb[] = {0, 12, E, 1, 13, E, 2, 14, E, 3, 15, E, Z};
    check_map(&a, DP_PLACE_TP, a_tp, "tp2 pp4: tp");
    check_map(&a, DP_PLACE_DP, a_dp, "tp2 pp4: dp");
    check_map(&a, DP_PLACE_DPCP, a_dp, "tp2 pp4: dp x cp");
    check_map(&a, DP_PLACE_PP, a_pp, "tp2 pp4: pp");
    check_map(&a, DP_PLACE_EMB, a_emb, "tp2 pp4: embedding");
    int got[8];
    CHECK_EQ(dp_place_ranks(&a, DP_PLACE_EMB, 5, got, 8), 0); /* stage 1 holds no embedding */
    CHECK_EQ(dp_place_ranks(&a, DP_PLACE_TP, 16, got, 8), -1);

    /* Its context-parallel docstring: 8 GPUs, tp=4, cp=2: CP pairs [0,4] [1,5] [2,6] [3,7]. */
    struct dp_layout b = lay(4, 2, 1, 1, 1);
    static const int b_tp[] = {0, 1, 2, 3, E, 4, 5, 6, 7, E, Z};
    static const int b_cp[] = {0, 4, E, 1, 5, E, 2, 6, E, 3, 7, E, Z};
    check_map(&b, DP_PLACE_TP, b_tp, "tp4 cp2: tp");
    check_map(&b, DP_PLACE_CP, b_cp, "tp4 cp2: cp");
    check_map(&b, DP_PLACE_DPCP, b_cp, "tp4 cp2: dp x cp");

    /* tp=2 cp=2 dp=2 pp=2: rank = t + 2 (c + 2 (d + 2 p)). */
    struct dp_layout c = lay(2, 2, 2, 2, 1);
    static const int c_cp[] = {0,  2, E, 1,  3, E,  4,  6, E,  5,  7, E, 8,
                               10, E, 9, 11, E, 12, 14, E, 13, 15, E, Z};
    static const int c_dp[] = {0,  4, E, 1,  5, E,  2,  6, E,  3,  7, E, 8,
                               12, E, 9, 13, E, 10, 14, E, 11, 15, E, Z};
    static const int c_dpcp[] = {0,  2,  4,  6, E, 1,  3,  5,  7, E, 8,
                                 10, 12, 14, E, 9, 11, 13, 15, E, Z};
    static const int c_pp[] = {0,  8, E, 1,  9, E, 2,  10, E, 3,  11, E, 4,
                               12, E, 5, 13, E, 6, 14, E,  7, 15, E,  Z};
    check_map(&c, DP_PLACE_CP, c_cp, "tp2 cp2 dp2 pp2: cp");
    check_map(&c, DP_PLACE_DP, c_dp, "tp2 cp2 dp2 pp2: dp");
    check_map(&c, DP_PLACE_DPCP, c_dpcp, "tp2 cp2 dp2 pp2: dp x cp");
    check_map(&c, DP_PLACE_EDP, c_dpcp, "tp2 cp2 dp2 pp2: expert dp (ep=1)");
    check_map(&c, DP_PLACE_PP, c_pp, "tp2 cp2 dp2 pp2: pp");

    /* Mixtral on one 8-GPU node, tp=1 cp=2 dp=4 ep=8: the experts span the node. */
    struct dp_layout d = lay(1, 2, 4, 1, 8);
    static const int d_cp[] = {0, 1, E, 2, 3, E, 4, 5, E, 6, 7, E, Z};
    static const int d_dp[] = {0, 2, 4, 6, E, 1, 3, 5, 7, E, Z};
    static const int d_ep[] = {0, 1, 2, 3, 4, 5, 6, 7, E, Z};
    static const int d_edp[] = {0, E, 1, E, 2, E, 3, E, 4, E, 5, E, 6, E, 7, E, Z};
    check_map(&d, DP_PLACE_CP, d_cp, "cp2 dp4 ep8: cp");
    check_map(&d, DP_PLACE_DP, d_dp, "cp2 dp4 ep8: dp");
    check_map(&d, DP_PLACE_DPCP, d_ep, "cp2 dp4 ep8: dp x cp");
    check_map(&d, DP_PLACE_EP, d_ep, "cp2 dp4 ep8: ep");
    check_map(&d, DP_PLACE_EDP, d_edp, "cp2 dp4 ep8: expert dp");

    /* tp=2 dp=4 pp=2 ep=2: experts r = t + 2 (e + 2 (edp + 2 p)). */
    struct dp_layout e = lay(2, 1, 4, 2, 2);
    static const int e_ep[] = {0,  2, E, 1,  3, E,  4,  6, E,  5,  7, E, 8,
                               10, E, 9, 11, E, 12, 14, E, 13, 15, E, Z};
    static const int e_edp[] = {0,  4, E, 1,  5, E,  2,  6, E,  3,  7, E, 8,
                                12, E, 9, 13, E, 10, 14, E, 11, 15, E, Z};
    static const int e_dp[] = {0, 2, 4, 6, E, 1, 3, 5, 7, E, 8, 10, 12, 14, E, 9, 11, 13, 15, E, Z};
    check_map(&e, DP_PLACE_EP, e_ep, "tp2 dp4 pp2 ep2: ep");
    check_map(&e, DP_PLACE_EDP, e_edp, "tp2 dp4 pp2 ep2: expert dp");
    check_map(&e, DP_PLACE_DP, e_dp, "tp2 dp4 pp2 ep2: dp");

    /* ep > dp: tp=2 cp=2 dp=2 ep=4 takes all of a stage's dp x cp ranks. */
    struct dp_layout f = lay(2, 2, 2, 1, 4);
    static const int f_ep[] = {0, 2, 4, 6, E, 1, 3, 5, 7, E, Z};
    static const int f_cp[] = {0, 2, E, 1, 3, E, 4, 6, E, 5, 7, E, Z};
    check_map(&f, DP_PLACE_EP, f_ep, "tp2 cp2 dp2 ep4: ep");
    check_map(&f, DP_PLACE_CP, f_cp, "tp2 cp2 dp2 ep4: cp");

    /* Three stages: the embedding pairs skip the middle one. */
    struct dp_layout g = lay(1, 1, 2, 3, 1);
    static const int g_pp[] = {0, 2, 4, E, 1, 3, 5, E, Z};
    static const int g_emb[] = {0, 4, E, 1, 5, E, Z};
    check_map(&g, DP_PLACE_PP, g_pp, "dp2 pp3: pp");
    check_map(&g, DP_PLACE_EMB, g_emb, "dp2 pp3: embedding");
}

static struct dp_cluster cluster(int nodes, int gpn)
{
    struct dp_cluster c = {0};
    c.nodes = nodes;
    c.gpus_per_node = gpn;
    c.intra = (struct dp_link){"nvl", DP_LINK_NVLINK, 200, 1, 1.0, 0};
    c.inter = (struct dp_link){"net", DP_LINK_NET, 25, 5, 1.0, 0};
    c.nics_per_node = gpn;
    return c;
}

static void test_paths_by_reach(void)
{
    struct dp_path p;
    /* The README's llama2-70b layout, 4 nodes of 8: tp=2 cp=2 dp=1 pp=8. Stages sit 4
     * ranks apart, two per node: hops 0-4, 8-12, 16-20, 24-28 stay inside, 4-8, 12-16,
     * 20-24 cross. Four GPUs of a node send across at once over their own NICs: 25. */
    struct dp_cluster c = cluster(4, 8);
    struct dp_layout l = lay(2, 2, 1, 8, 1);
    dp_place_path(&c, &l, DP_PLACE_PP, &p);
    CHECK(p.inter_node);
    CHECK_EQ(p.hops, 7);
    CHECK_EQ(p.hops_inter, 3);
    CHECK_NEAR(p.busbw_gbps, 25, 1e-12);
    CHECK_NEAR(p.latency_us, 5, 1e-12);
    CHECK_STR(p.link, "net");
    CHECK(strstr(p.desc, "net across nodes (7 hops: 3 across nodes, 4 inside a node") != NULL);
    /* Its CP pairs (0,2) and DP x CP groups (0,2) stay inside a node. */
    dp_place_path(&c, &l, DP_PLACE_CP, &p);
    CHECK(!p.inter_node);
    CHECK_NEAR(p.busbw_gbps, 200, 1e-12);
    dp_place_path(&c, &l, DP_PLACE_DPCP, &p);
    CHECK(!p.inter_node);
    /* With interleaving the last stage feeds the first: an eighth hop, across nodes. */
    l.vpp = 2;
    dp_place_path(&c, &l, DP_PLACE_PP, &p);
    CHECK_EQ(p.hops, 8);
    CHECK_EQ(p.hops_inter, 4);

    /* A ring of 16 CP ranks 2 apart over 4 nodes: 4 members per node, the ring leaves
     * each node once (3 boundaries and the closing hop 30 -> 0): 4 of 16 hops cross. */
    l = lay(2, 16, 1, 1, 1);
    dp_place_path(&c, &l, DP_PLACE_CP, &p);
    CHECK(p.inter_node);
    CHECK_EQ(p.hops, 16);
    CHECK_EQ(p.hops_inter, 4);
    CHECK_EQ(p.nodes, 4);
    CHECK_NEAR(p.busbw_gbps, 25, 1e-12);
    CHECK(strstr(p.desc, "16 ring hops: 4 across nodes, 12 inside a node over nvl") != NULL);

    /* Mixtral's experts on one node with cp=2: ep=8 are ranks 0..7, NVLink. */
    struct dp_cluster one = cluster(1, 8);
    l = lay(1, 2, 4, 1, 8);
    dp_place_path(&one, &l, DP_PLACE_EP, &p);
    CHECK(!p.inter_node);
    CHECK_EQ(p.members_per_node, 8);
    CHECK_NEAR(p.busbw_gbps, 200, 1e-12);
    CHECK(strstr(p.desc, "inside a node") != NULL);

    /* Misaligned data parallelism: dp=3 groups 2 apart, 3 nodes of 8 (tp=2, pp=4). The
     * group {6, 8, 10} has one member on node 0: the ring gets one GPU's NIC, 25. */
    struct dp_cluster three = cluster(3, 8);
    l = lay(2, 1, 3, 4, 1);
    dp_place_path(&three, &l, DP_PLACE_DP, &p);
    CHECK(p.inter_node);
    CHECK_EQ(p.members_per_node, 1);
    CHECK_NEAR(p.busbw_gbps, 25, 1e-12);

    /* NIC sharing: 2 NICs for 8 GPUs (4 GPUs per NIC). Stages 4 apart: the 4 GPUs at
     * places 4..7 send across at once through one NIC: 25 / 4 each. Stages 8 apart:
     * all 8 send, over both NICs: 2 x 25 / 8. Stages 1 apart: one GPU per node sends
     * and has a NIC to itself: 25. */
    c.nics_per_node = 2;
    l = lay(2, 2, 1, 8, 1);
    dp_place_path(&c, &l, DP_PLACE_PP, &p);
    CHECK_NEAR(p.busbw_gbps, 25.0 / 4, 1e-12);
    l = lay(8, 1, 1, 4, 1);
    dp_place_path(&c, &l, DP_PLACE_PP, &p);
    CHECK_NEAR(p.busbw_gbps, 2 * 25.0 / 8, 1e-12);
    l = lay(1, 1, 1, 32, 1);
    dp_place_path(&c, &l, DP_PLACE_PP, &p);
    CHECK_NEAR(p.busbw_gbps, 25, 1e-12);
    CHECK_EQ(p.hops, 31);
    CHECK_EQ(p.hops_inter, 3);

    /* A measured PCIe box of 4 (pairs on a switch, then the host bridge): a pipeline
     * over ranks 0..3 crosses the host bridge between 1 and 2, the slowest hop. */
    struct dp_cluster pc = cluster(1, 4);
    pc.ngroup_links = 2;
    pc.group_link[0] = (struct dp_link){"pix", DP_LINK_PCIE, 24, 1, 1.0, 0};
    pc.group_link[1] = (struct dp_link){"phb", DP_LINK_PCIE, 12, 2, 1.0, 0};
    l = lay(1, 1, 1, 4, 1);
    dp_place_path(&pc, &l, DP_PLACE_PP, &p);
    CHECK(!p.inter_node);
    CHECK_NEAR(p.busbw_gbps, 12, 1e-12);
    CHECK_STR(p.link, "phb");
    /* A CP ring of 2 on one switch stays on it. */
    l = lay(1, 2, 2, 1, 1);
    dp_place_path(&pc, &l, DP_PLACE_CP, &p);
    CHECK_NEAR(p.busbw_gbps, 24, 1e-12);
}

/* The brute-force view of one kind: walk every group from the rank map. */
struct walk {
    bool inter;
    int kmin;   /* fewest members on a node, over groups that cross nodes */
    int hops_x; /* most hops across nodes in one group */
};

static void walk(const struct dp_layout *l, enum dp_place_kind k, int gpn, bool ring,
                 struct walk *w)
{
    int world = l->tp * l->cp * l->dp * l->pp;
    w->inter = false;
    w->kmin = 1 << 30;
    w->hops_x = 0;
    int *g = malloc(sizeof(int) * (size_t)world);
    int *per = calloc((size_t)world, sizeof(int));
    for (int r = 0; r < world; r++) {
        int n = dp_place_ranks(l, k, r, g, world);
        if (n <= 1 || g[0] != r)
            continue; /* each group once, from its first member */
        memset(per, 0, sizeof(int) * (size_t)world);
        int nodes = 0, x = 0;
        for (int i = 0; i < n; i++) {
            if (per[g[i] / gpn]++ == 0)
                nodes++;
            if (i + 1 < n && g[i] / gpn != g[i + 1] / gpn)
                x++;
        }
        if (ring && n > 1 && g[n - 1] / gpn != g[0] / gpn)
            x++;
        if (x > w->hops_x)
            w->hops_x = x;
        if (nodes > 1) {
            w->inter = true;
            for (int j = 0; j < world / gpn + 1; j++)
                if (per[j] > 0 && per[j] < w->kmin)
                    w->kmin = per[j];
        }
    }
    free(g);
    free(per);
}

static void test_paths_against_walk(void)
{
    static const int gpns[] = {4, 6, 8};
    long cases = 0;
    for (int gi = 0; gi < 3; gi++)
        for (int tp = 1; tp <= 4; tp++)
            for (int cp = 1; cp <= 4; cp++)
                for (int dp = 1; dp <= 4; dp++)
                    for (int pp = 1; pp <= 5; pp++)
                        for (int ep = 1; ep <= dp * cp; ep++) {
                            int gpn = gpns[gi], world = tp * cp * dp * pp;
                            if ((dp * cp) % ep || world % gpn)
                                continue;
                            struct dp_cluster c = cluster(world / gpn, gpn);
                            struct dp_layout l = lay(tp, cp, dp, pp, ep);
                            for (int k = 0; k < DP_PLACE_KINDS; k++) {
                                bool p2p =
                                    k == DP_PLACE_CP || k == DP_PLACE_PP || k == DP_PLACE_EMB;
                                bool ring = k == DP_PLACE_CP;
                                struct walk w;
                                walk(&l, (enum dp_place_kind)k, gpn, ring, &w);
                                struct dp_path p;
                                dp_place_path(&c, &l, (enum dp_place_kind)k, &p);
                                cases++;
                                if (p.inter_node != w.inter || (p2p && p.hops_inter != w.hops_x) ||
                                    (!p2p && w.inter && p.members_per_node != w.kmin)) {
                                    fprintf(stderr,
                                            "gpn=%d tp=%d cp=%d dp=%d pp=%d ep=%d kind %d: "
                                            "path inter=%d hops_x=%d k=%d, walk inter=%d "
                                            "hops_x=%d k=%d\n",
                                            gpn, tp, cp, dp, pp, ep, k, p.inter_node, p.hops_inter,
                                            p.members_per_node, w.inter, w.hops_x, w.kmin);
                                    check_failures++;
                                }
                            }
                        }
    CHECK(cases > 1000);
}

/* A GB200 NVL72 rack is one NVLink domain of 72 GPUs (profiles/system/gb200-nvl72.json):
 * an expert-parallel group of 24 (ranks 0-23 with tp = cp = 1) stays on NVLink 5 there,
 * where on DGX H100 nodes of 8 the same group's all-to-all spans 3 nodes and their NICs. */
static void test_nvl72(void)
{
    struct dp_cluster rack, dgx;
    struct dp_err err = {0};
    CHECK_EQ(dp_cluster_from_system("gb200-nvl72", 2, NULL, &rack, &err), 0);
    CHECK_EQ(dp_cluster_from_system("dgx-h100", 18, NULL, &dgx, &err), 0);
    CHECK_EQ(rack.gpus_per_node, 72);
    CHECK_EQ(rack.nics_per_node, 72);
    struct dp_layout l = lay(1, 1, 72, 2, 24);
    struct dp_path p;
    dp_place_path(&rack, &l, DP_PLACE_EP, &p);
    CHECK(!p.inter_node);
    CHECK_EQ(p.members_per_node, 24);
    CHECK_STR(p.link, "nvlink5");
    dp_place_path(&dgx, &l, DP_PLACE_EP, &p);
    CHECK(p.inter_node);
    CHECK_EQ(p.nodes, 3);
    /* The pipeline's two stages sit 72 ranks apart: one rack each, across the NICs. */
    dp_place_path(&rack, &l, DP_PLACE_PP, &p);
    CHECK(p.inter_node);
}

int main(void)
{
    test_rank_maps();
    test_paths_by_reach();
    test_paths_against_walk();
    test_nvl72();
    return check_done("test_costmodel_place");
}
