/*
 * topology: what each XML fixture (tests/topology/xml, see the README there)
 * yields: devices, locality, the nvidia-smi class of device pairs, NVLink
 * counts (including hwloc 2.9's A100 double count), the link class of each
 * aligned GPU group with its bandwidth and efficiency, the node type, the
 * network, the cluster and its JSON round trip; hand-built NVLink meshes for
 * the direct-link rules; and the XML error messages.
 */
#include "check.h"
#include "topology/topology.h"

#include <cjson/cJSON.h>
#include <stdlib.h>

static const char *src_dir(void)
{
    const char *d = getenv("DPLAN_SOURCE_DIR");
    return d ? d : ".";
}

static int load(const char *name, struct dp_topo *t)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/tests/topology/xml/%s", src_dir(), name);
    struct dp_err err = {0};
    int rc = dp_topo_load_xml(path, t, &err);
    if (rc)
        fprintf(stderr, "%s: %s\n", name, err.msg);
    return rc;
}

static const char *code(const struct dp_topo *t, int a, int b)
{
    static char buf[8][16];
    static int k;
    char *s = buf[k++ % 8];
    dp_topo_pair_code(t, a, b, s, 16);
    return s;
}

static void cluster_of(const struct dp_topo *t, struct dp_cluster *cl, struct dp_topo_choice *ch)
{
    struct dp_topo_cluster_opts o = {.nodes = 1};
    struct dp_err err = {0};
    CHECK_EQ(dp_topo_cluster(t, &o, cl, ch, &err), 0);
    if (err.code)
        fprintf(stderr, "cluster: %s\n", err.msg);
}

static void test_dgx_h100(void)
{
    struct dp_topo t;
    if (load("dgx-h100.xml", &t)) {
        check_failures++;
        return;
    }
    CHECK_EQ(t.npackages, 2);
    CHECK_EQ(t.nnuma, 2);
    CHECK_EQ(t.ncores, 112);
    CHECK_EQ(t.ngpus, 8);
    CHECK_EQ(t.nnics, 12);
    CHECK_EQ(dp_topo_compute_nics(&t), 8);
    CHECK_EQ(t.nvswitches, 4);
    CHECK_EQ(t.host_bridges, 7); /* 4 GPU complexes, NVSwitch, 2 storage */
    CHECK_EQ(t.pcie_switches, 5);
    CHECK_STR(t.nvlink_source, "hwloc NVLinkBandwidth");
    CHECK_STR(t.gpus[0].name, "NVIDIA H100 80GB HBM3");
    CHECK_STR(t.gpus[0].busid, "0000:13:00.0");
    CHECK_EQ(t.gpus[0].mem_bytes, 81559LL << 20);
    CHECK_EQ(t.gpus[0].nvswitch_links, 18);
    CHECK_EQ(t.gpus[4].numa, 1);
    CHECK_STR(code(&t, 0, 7), "NV18");
    CHECK_NEAR(dp_topo_pair_at(&t, 0, 7)->nvlink_gbps, 450.0, 1e-9);
    /* Underneath NVLink: same switch PIX, same socket NODE, across sockets SYS. */
    CHECK_EQ(dp_topo_pair_at(&t, 0, 1)->pcie, DP_PATH_PIX);
    CHECK_EQ(dp_topo_pair_at(&t, 0, 2)->pcie, DP_PATH_NODE);
    CHECK_EQ(dp_topo_pair_at(&t, 0, 4)->pcie, DP_PATH_SYS);
    CHECK_STR(code(&t, 0, 8), "PIX"); /* GPU0 - mlx5_0 */
    CHECK_STR(t.nics[0].name, "mlx5_0");
    CHECK(t.nics[0].infiniband && t.nics[0].rdma && t.nics[0].near_gpu);
    CHECK(!t.nics[4].near_gpu); /* storage */

    struct dp_cluster cl;
    struct dp_topo_choice ch;
    cluster_of(&t, &cl, &ch);
    CHECK_STR(ch.gpu_profile, "h100-sxm5-80gb");
    CHECK_STR(ch.system, "dgx-h100");
    CHECK_STR(ch.network, "ib-ndr-400");
    CHECK_EQ(cl.ngroup_links, 3);
    for (int k = 0; k < 3; k++) {
        CHECK_STR(cl.group_link[k].name, "nvlink4");
        CHECK_EQ(cl.group_link[k].kind, DP_LINK_NVLINK);
        CHECK_NEAR(cl.group_link[k].bw_gbps, 450.0, 1e-9);
    }
    CHECK_STR(cl.intra.name, "nvlink4");
    CHECK_EQ(cl.nics_per_node, 8);
    CHECK_EQ(cl.gpus_per_node, 8);
    CHECK_STR(cl.system, "dgx-h100");

    /* JSON round trip through core's cluster reader. */
    cJSON *j = dp_cluster_to_json(&cl);
    cJSON_AddItemToObject(j, "topology", dp_topo_to_json(&t));
    struct dp_err err = {0};
    struct dp_jr jr = {.file = "mem", .err = &err};
    struct dp_cluster back;
    CHECK_EQ(dp_cluster_from_json(&jr, j, &back), 0);
    CHECK_EQ(back.ngroup_links, 3);
    CHECK_STR(back.group_link[2].name, "nvlink4");
    CHECK_NEAR(back.group_link[0].efficiency, cl.group_link[0].efficiency, 1e-12);
    CHECK_STR(back.gpu.name, "h100-sxm5-80gb");
    CHECK_STR(back.inter.name, "ib-ndr-400");
    CHECK_EQ(back.nics_per_node, 8);
    cJSON_Delete(j);
    dp_topo_release(&t);
}

static void test_dgx_a100(void)
{
    struct dp_topo t;
    if (load("dgx-a100.xml", &t)) {
        check_failures++;
        return;
    }
    CHECK_EQ(t.nnuma, 8);
    CHECK_EQ(t.ngpus, 8);
    CHECK_EQ(t.pcie_switches, 4 * 3 + 1); /* per complex: top + GPU + NIC switch; NVSwitch's */
    CHECK_EQ(t.gpus[0].numa, 3);
    CHECK_EQ(t.gpus[2].numa, 1);
    CHECK_EQ(t.gpus[4].numa, 7);
    CHECK_EQ(t.gpus[6].numa, 5);
    /* hwloc 2.9.0 wrote 50000 MB/s per NVLink 3 link: 12 links at 25 GB/s, not 24. */
    CHECK_STR(code(&t, 0, 5), "NV12");
    CHECK_NEAR(dp_topo_pair_at(&t, 0, 5)->nvlink_gbps, 300.0, 1e-9);
    CHECK(t.nnotes >= 1);
    CHECK_CONTAINS(t.notes[0], "corrected to 25 GB/s");
    CHECK_STR(code(&t, 0, 8), "PXB"); /* two-level switch tree */
    CHECK_STR(code(&t, 0, 10), "SYS");
    CHECK_EQ(dp_topo_pair_at(&t, 0, 1)->pcie, DP_PATH_PIX);
    struct dp_cluster cl;
    struct dp_topo_choice ch;
    cluster_of(&t, &cl, &ch);
    CHECK_STR(ch.gpu_profile, "a100-sxm4-80gb");
    CHECK_STR(ch.system, "dgx-a100-80gb");
    CHECK_STR(ch.network, "ib-hdr-200");
    CHECK_STR(cl.intra.name, "nvlink3");
    CHECK_NEAR(cl.intra.bw_gbps, 300.0, 1e-9);
    dp_topo_release(&t);
}

static void test_l40s(void)
{
    struct dp_topo t;
    if (load("pcie-8x-l40s.xml", &t)) {
        check_failures++;
        return;
    }
    CHECK_EQ(t.ngpus, 8);
    CHECK_STR(t.gpus[0].name, "AD102GL [L40S]");
    CHECK_EQ(t.gpus[0].mem_bytes, 0);
    CHECK_STR(t.nvlink_source, "");
    CHECK_STR(code(&t, 0, 1), "PIX");
    CHECK_STR(code(&t, 0, 2), "PHB");
    CHECK_STR(code(&t, 0, 4), "SYS");
    CHECK_EQ(t.nnics, 5);
    CHECK_EQ(dp_topo_compute_nics(&t), 4);
    CHECK(!t.nics[0].infiniband && t.nics[0].rdma);

    struct dp_cluster cl;
    struct dp_topo_choice ch;
    cluster_of(&t, &cl, &ch);
    CHECK_STR(ch.gpu_profile, "l40s-48gb");
    CHECK_STR(ch.system, "8x-l40s");
    CHECK_STR(ch.network, "roce-400");
    CHECK_EQ(cl.ngroup_links, 3);
    /* pairs: one PCIe switch; 4: across the host bridge; 8: across the sockets. */
    CHECK_STR(cl.group_link[0].name, "pcie-gen4 PIX");
    CHECK_STR(cl.group_link[1].name, "pcie-gen4 PHB");
    CHECK_STR(cl.group_link[2].name, "pcie-gen4 SYS");
    for (int k = 0; k < 3; k++) {
        CHECK_EQ(cl.group_link[k].kind, DP_LINK_PCIE);
        CHECK_NEAR(cl.group_link[k].bw_gbps, 31.5, 1e-9);
    }
    CHECK_NEAR(cl.group_link[0].efficiency, 0.76, 1e-9);
    CHECK_NEAR(cl.group_link[1].efficiency, 0.70, 1e-9);
    /* Sapphire Rapids (family 6, model 143): NCCL credits UPI 22 GB/s = 0.698 of 31.5. */
    CHECK_NEAR(cl.group_link[2].efficiency, 0.698, 1e-9);
    CHECK(cl.group_link[0].bw_gbps * cl.group_link[0].efficiency >
          cl.group_link[1].bw_gbps * cl.group_link[1].efficiency);
    CHECK_STR(cl.intra.name, "pcie-gen4 SYS");
    dp_topo_release(&t);
}

static void test_no_nvlink_h100(void)
{
    struct dp_topo t;
    if (load("dgx-h100-no-nvml.xml", &t)) {
        check_failures++;
        return;
    }
    CHECK_STR(t.gpus[0].name, "GH100 [H100 SXM5 80GB]");
    CHECK_STR(code(&t, 0, 1), "PIX");
    CHECK_STR(code(&t, 0, 2), "NODE");
    CHECK_EQ(t.nvswitches, 4);
    struct dp_cluster cl;
    struct dp_topo_choice ch;
    cluster_of(&t, &cl, &ch);
    CHECK_STR(ch.gpu_profile, "h100-sxm5-80gb");
    CHECK_STR(ch.system, "");
    CHECK_CONTAINS(ch.system_why, "closest is dgx-h100");
    CHECK_STR(cl.system, "topology");
    CHECK_STR(cl.group_link[0].name, "pcie-gen5 PIX");
    CHECK_STR(cl.group_link[1].name, "pcie-gen5 NODE");
    CHECK_STR(cl.group_link[2].name, "pcie-gen5 SYS");
    CHECK_NEAR(cl.group_link[2].efficiency, 0.349, 1e-9); /* 22 / 63 */
    dp_topo_release(&t);
}

static void test_cpu_only(void)
{
    struct dp_topo t;
    if (load("synthetic-2pack.xml", &t)) {
        check_failures++;
        return;
    }
    CHECK_EQ(t.npackages, 2);
    CHECK_EQ(t.nnuma, 2);
    CHECK_EQ(t.ncores, 8);
    CHECK_EQ(t.ngpus, 0);
    CHECK_EQ(t.nnics, 0);
    struct dp_cluster cl;
    struct dp_topo_cluster_opts o = {.nodes = 1};
    struct dp_err err = {0};
    CHECK_EQ(dp_topo_cluster(&t, &o, &cl, NULL, &err), DP_EINVAL);
    CHECK_CONTAINS(err.msg, "no GPUs found");
    dp_topo_release(&t);

    if (load("this-machine.xml", &t)) {
        check_failures++;
        return;
    }
    CHECK_EQ(t.ngpus, 0);
    CHECK_EQ(t.nnics, 1);
    CHECK_STR(t.nics[0].name, "eth0");
    CHECK(!t.nics[0].rdma);
    dp_topo_release(&t);
}

/*
 * DGX-2 (issue 10, item 12): 16 V100 on two baseboards of 8, each with 6
 * NVSwitch chips; each GPU has 6 NVLink 2 links, one to each switch of its
 * baseboard, so 12 chips and NV6 = 6 x 25 = 150 GB/s per direction between
 * any two GPUs. One switch's PCI class and ids read 0000: only its NVSwitch
 * subtype says what it is, and missing it gave 11 chips and NV5 for GPUs 0-7.
 */
static void test_dgx2(void)
{
    struct dp_topo t;
    if (load("dgx-2.xml", &t)) {
        check_failures++;
        return;
    }
    CHECK_EQ(t.ngpus, 16);
    CHECK_STR(t.gpus[0].name, "Tesla V100-SXM3-32GB");
    CHECK_EQ(t.nvswitches, 12);
    for (int i = 0; i < t.ngpus; i++) {
        CHECK_EQ(t.gpus[i].nvswitch_links, 6);
        CHECK_NEAR(t.gpus[i].nvlink_gbps, 25.0, 1e-9);
    }
    CHECK_STR(code(&t, 0, 1), "NV6");
    CHECK_STR(code(&t, 0, 8), "NV6");
    CHECK_STR(code(&t, 7, 15), "NV6");
    CHECK_NEAR(dp_topo_pair_at(&t, 0, 15)->nvlink_gbps, 150.0, 1e-9);
    CHECK_EQ(t.nnics, 0);
    dp_topo_release(&t);
}

/*
 * A 24-PU PCIe node (issue 10, item 12): three Tesla M2070 without PCI names
 * in the file, and the BMC's ATI ES1000 (AMD's vendor id, VGA class, a DRM
 * card0), which is not a GPU. Linux's interleaved PU numbering gives each
 * socket a 35-character CPU list.
 */
static void test_pcie_24core(void)
{
    struct dp_topo t;
    if (load("pcie-24core-3gpu.xml", &t)) {
        check_failures++;
        return;
    }
    CHECK_EQ(t.ngpus, 3);
    for (int i = 0; i < t.ngpus; i++) {
        CHECK_STR(t.gpus[i].name, "GF100GL [Tesla M2070]");
        CHECK_EQ(t.gpus[i].pci_vendor, 0x10de);
    }
    CHECK_STR(t.gpus[0].cpus, "0,2,4,6,8,10,12,14,16,18,20,22");
    CHECK_EQ(t.gpus[0].numa, 0);
    CHECK_EQ(t.gpus[1].numa, 1);
    CHECK_STR(code(&t, 0, 1), "SYS");
    CHECK_STR(code(&t, 1, 2), "PHB");
    CHECK_EQ(t.nnics, 3);
    dp_topo_release(&t);
}

/* A node built by hand: n GPUs on one PCIe switch, with given direct NVLink counts. */
static void hand_node(struct dp_topo *t, int n, const int *links)
{
    memset(t, 0, sizeof *t);
    snprintf(t->source, sizeof t->source, "hand");
    snprintf(t->cpu_vendor, sizeof t->cpu_vendor, "AuthenticAMD");
    t->ngpus = n;
    t->gpus = calloc((size_t)n, sizeof *t->gpus);
    t->pairs = calloc((size_t)(n * n), sizeof *t->pairs);
    for (int i = 0; i < n; i++) {
        snprintf(t->gpus[i].name, sizeof t->gpus[i].name, "NVIDIA A100-SXM4-80GB");
        t->gpus[i].nvlink_gbps = 25.0;
        for (int j = 0; j < n; j++) {
            struct dp_topo_pair *p = &t->pairs[i * n + j];
            p->pcie = i == j ? DP_PATH_SELF : (i / 4 == j / 4 ? DP_PATH_PIX : DP_PATH_SYS);
            p->nvlinks = i == j ? 0 : links[i * n + j];
            p->nvlink_gbps = p->nvlinks * 25.0;
        }
    }
}

static void test_direct_nvlink(void)
{
    struct dp_gpu gpu;
    struct dp_err err = {0};
    CHECK_EQ(dp_gpu_load("a100-sxm4-80gb", &gpu, &err), 0);
    if (err.code)
        return;
    /* 4 GPUs in a ring 0-1-2-3-0, 2 links per edge, no diagonals: a ring exists, so
     * the group of 4 runs on NVLink at each GPU's 2 x 2 x 25 = 100 GB/s. */
    int ring[16] = {0, 2, 0, 2, 2, 0, 2, 0, 0, 2, 0, 2, 2, 0, 2, 0};
    struct dp_topo t;
    hand_node(&t, 4, ring);
    struct dp_link l;
    CHECK_EQ(dp_topo_group_link(&t, &gpu, 0, 2, &l, &err), 0);
    CHECK_EQ(l.kind, DP_LINK_NVLINK);
    CHECK_NEAR(l.bw_gbps, 50.0, 1e-9);
    CHECK_STR(l.name, "nvlink NV2 direct");
    CHECK_NEAR(l.efficiency, 0.78, 1e-9); /* the nvlink3 profile's */
    CHECK_EQ(dp_topo_group_link(&t, &gpu, 0, 4, &l, &err), 0);
    CHECK_EQ(l.kind, DP_LINK_NVLINK);
    CHECK_NEAR(l.bw_gbps, 100.0, 1e-9);
    dp_topo_release(&t);

    /* Bridged pairs (0-1, 2-3) only: pairs use NVLink, the group of 4 falls back to PCIe,
     * and 8 GPUs across two sockets to SYS. */
    int pairs[64] = {0};
    for (int i = 0; i < 8; i++)
        pairs[i * 8 + (i ^ 1)] = 4;
    hand_node(&t, 8, pairs);
    struct dp_link group[8], intra;
    int ng = 0;
    CHECK_EQ(dp_topo_node_links(&t, &gpu, group, &ng, &intra, &err), 0);
    CHECK_EQ(ng, 3);
    CHECK_EQ(group[0].kind, DP_LINK_NVLINK);
    CHECK_NEAR(group[0].bw_gbps, 100.0, 1e-9);
    CHECK_STR(group[1].name, "pcie-gen4 PIX");
    CHECK_STR(group[2].name, "pcie-gen4 SYS");
    CHECK_NEAR(group[2].efficiency, 0.508, 1e-9); /* AMD: NCCL AMD_BW 16 / 31.5 */
    CHECK_STR(intra.name, group[2].name);

    /* One pair without its bridge: group_link[0] is the slowest aligned pair. */
    pairs[2 * 8 + 3] = pairs[3 * 8 + 2] = 0;
    dp_topo_release(&t);
    hand_node(&t, 8, pairs);
    CHECK_EQ(dp_topo_node_links(&t, &gpu, group, &ng, &intra, &err), 0);
    CHECK_STR(group[0].name, "pcie-gen4 PIX");
    CHECK_EQ(dp_topo_group_link(&t, &gpu, 0, 2, &l, &err), 0);
    CHECK_EQ(l.kind, DP_LINK_NVLINK);
    CHECK_EQ(dp_topo_group_link(&t, &gpu, 6, 4, &l, &err), DP_EINVAL);
    dp_topo_release(&t);

    /* One GPU: no groups; the node's link is the GPU itself, which the cluster
     * reader accepts. */
    int none[1] = {0};
    hand_node(&t, 1, none);
    dp_err_clear(&err);
    CHECK_EQ(dp_topo_node_links(&t, &gpu, group, &ng, &intra, &err), 0);
    CHECK_EQ(ng, 0);
    CHECK_EQ(intra.kind, DP_LINK_LOCAL);
    struct dp_cluster cl = {.name = "one",
                            .system = "topology",
                            .nodes = 1,
                            .gpus_per_node = 1,
                            .gpu = gpu,
                            .intra = intra};
    CHECK_EQ(dp_network_load("eth-100", &cl.inter, &err), 0);
    cJSON *j = dp_cluster_to_json(&cl);
    struct dp_jr jr = {.file = "mem", .err = &err};
    struct dp_cluster back;
    CHECK_EQ(dp_cluster_from_json(&jr, j, &back), 0);
    CHECK_EQ(back.intra.kind, DP_LINK_LOCAL);
    cJSON_Delete(j);
    dp_topo_release(&t);

    /* 6 GPUs: pairs and one aligned group of 4; the node's link covers all 6. */
    int six[36] = {0};
    hand_node(&t, 6, six);
    CHECK_EQ(dp_topo_node_links(&t, &gpu, group, &ng, &intra, &err), 0);
    CHECK_EQ(ng, 2);
    CHECK_STR(group[0].name, "pcie-gen4 PIX");
    CHECK_STR(group[1].name, "pcie-gen4 PIX");
    CHECK_STR(intra.name, "pcie-gen4 SYS");
    dp_topo_release(&t);
}

static void test_gpu_names(void)
{
    static const struct {
        const char *name;
        unsigned dev;
        int64_t mem;
        const char *want;
    } cases[] = {
        {"NVIDIA H100 80GB HBM3", 0, 0, "h100-sxm5-80gb"},
        {"GH100 [H100 SXM5 80GB]", 0x2330, 0, "h100-sxm5-80gb"},
        {"NVIDIA H100 PCIe", 0, 0, "h100-pcie-80gb"},
        {"NVIDIA H100 NVL", 0, 0, NULL},
        {"NVIDIA H200", 0, 0, "h200-sxm-141gb"},
        {"NVIDIA A100-SXM4-80GB", 0, 0, "a100-sxm4-80gb"},
        {"NVIDIA A100-SXM4-40GB", 0, 0, "a100-sxm4-40gb"},
        {"PCI 10de:20b0", 0x20b0, 0, "a100-sxm4-40gb"},
        {"NVIDIA A100 80GB PCIe", 0, 0, "a100-pcie-80gb"},
        {"NVIDIA A100-PCIE-40GB", 0, 0, NULL},
        {"NVIDIA B200", 0, 0, "b200-sxm-180gb"},
        {"NVIDIA L40S", 0, 0, "l40s-48gb"},
        {"AD102GL [L40S]", 0x26b9, 0, "l40s-48gb"},
        {"NVIDIA GeForce RTX 4090", 0, 0, "rtx4090-24gb"},
        {"AMD Instinct MI300X", 0, 0, "mi300x-192gb"},
        {"Tesla T4", 0x1eb8, 0, NULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct dp_topo_gpu g = {0};
        snprintf(g.name, sizeof g.name, "%s", cases[i].name);
        g.pci_vendor = strstr(cases[i].name, "AMD") ? 0x1002 : 0x10de;
        g.pci_device = cases[i].dev;
        g.mem_bytes = cases[i].mem;
        char got[64] = "";
        int rc = dp_topo_gpu_profile(&g, got, sizeof got);
        if (cases[i].want) {
            CHECK_EQ(rc, 0);
            CHECK_STR(got, cases[i].want);
        } else {
            CHECK_EQ(rc, DP_ENOENT);
        }
    }
}

static void test_xml_errors(void)
{
    struct dp_topo t;
    struct dp_err err = {0};
    char path[4096];
    CHECK_EQ(dp_topo_load_xml("/nonexistent/dir/x.xml", &t, &err), DP_ENOENT);
    CHECK_CONTAINS(err.msg, "cannot open");
    snprintf(path, sizeof path, "%s/tests/errors/topo_truncated/truncated.xml", src_dir());
    dp_err_clear(&err);
    CHECK_EQ(dp_topo_load_xml(path, &t, &err), DP_EINVAL);
    CHECK_CONTAINS(err.msg, "truncated");
    snprintf(path, sizeof path, "%s/tests/errors/topo_version3/v3.xml", src_dir());
    dp_err_clear(&err);
    CHECK_EQ(dp_topo_load_xml(path, &t, &err), DP_EINVAL);
    CHECK_CONTAINS(err.msg, "version 3.0");
    snprintf(path, sizeof path, "%s/tests/errors/topo_malformed/malformed.xml", src_dir());
    dp_err_clear(&err);
    CHECK_EQ(dp_topo_load_xml(path, &t, &err), DP_EINVAL);
    CHECK_CONTAINS(err.msg, "hwloc cannot read");
    /* hwloc's loader segfaults on this file: the child that ran it did (issue 10, item 7). */
    snprintf(path, sizeof path, "%s/tests/topology/xml/crash-l3-no-complete-cpuset.xml", src_dir());
    dp_err_clear(&err);
    CHECK_EQ(dp_topo_load_xml(path, &t, &err), DP_EINVAL);
    CHECK_CONTAINS(err.msg, "hwloc could not read it (its loader crashed)");
}

int main(void)
{
    test_dgx_h100();
    test_dgx_a100();
    test_l40s();
    test_no_nvlink_h100();
    test_dgx2();
    test_pcie_24core();
    test_cpu_only();
    test_direct_nvlink();
    test_gpu_names();
    test_xml_errors();
    return check_done("test_topology_links");
}
