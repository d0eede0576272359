/*
 * From a discovered node to what the cost model reads: the GPU profile of the
 * detected GPUs, the link class of each aligned group of GPUs (group_link[]),
 * the node type (profiles/system) it matches, the network its NICs imply,
 * and the dp_cluster for N such nodes.
 *
 * Bandwidths per class (README.md in this directory gives the derivation):
 *   NVLink   links x per-link rate (NVML version table), efficiency and latency
 *            of the GPU's NVLink interconnect profile (nvlink3/4/5);
 *   PIX, PXB the GPU's host PCIe link (its profile's host_link), efficiency 0.76:
 *            NCCL credits an x16 link with 24 of 31.5 GB/s (Gen4) and 48 of 63
 *            (Gen5) (NVIDIA/nccl src/graph/topo.cc kvDictPciGen);
 *   PHB,NODE the host link at the PCIe profile's own efficiency (0.70: rings
 *            through a CPU root complex, see profiles/interconnect/pcie-gen*.json);
 *   SYS      the host link, efficiency capped by what NCCL's topology search
 *            credits the CPU-to-CPU link (NVIDIA/nccl src/graph/topo.cc
 *            ncclTopoGetInterCpuBw and topo.h): Intel by family 6 model number,
 *            >= 0xCF Emerald Rapids 40 GB/s, >= 0x8F Sapphire Rapids 22,
 *            >= 0x55 Skylake 10, older 6; AMD 16.
 * No I/O beyond loading profiles; nothing is printed.
 */
#include "internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* NCCL's credit for a PCIe x16 link: 24/31.5 (Gen4) = 48/63 (Gen5) = 0.76. */
#define PCIE_SWITCH_EFFICIENCY 0.76
/* NCCL topo.h: GB/s its search assigns to the inter-socket link. */
#define ERP_QPI_GBPS 40.0 /* ERP_QPI_BW: Emerald Rapids */
#define SRP_QPI_GBPS 22.0 /* SRP_QPI_BW: Sapphire Rapids */
#define SKL_QPI_GBPS 10.0 /* SKL_QPI_BW: Skylake .. Ice Lake */
#define BDW_QPI_GBPS 6.0  /* BDW_QPI_BW: Broadwell and older */
#define AMD_GBPS     16.0 /* AMD_BW */
/* NCCL topo.h SM80_NVLINK_BW 20 of 25 GB/s, for NVLinks of GPUs whose profile is not NVLink. */
#define NVLINK_DEFAULT_EFFICIENCY 0.80
#define NVLINK_DEFAULT_LATENCY_US 2.0

int dp_topo_gpu_profile(const struct dp_topo_gpu *g, char *out, size_t cap)
{
    const char *n = g->name;
    unsigned dev =
        g->pci_vendor == VENDOR_NVIDIA || g->pci_vendor == VENDOR_AMD ? g->pci_device : 0;
    double gib = (double)g->mem_bytes / (1024.0 * 1024 * 1024);
    const char *p = NULL;
    if (dp__contains(n, "MI300X") || (g->pci_vendor == VENDOR_AMD && dev == 0x74a1))
        p = "mi300x-192gb";
    else if ((dp__contains(n, "B200") && !dp__contains(n, "GB200")) || dev == 0x2901)
        p = "b200-sxm-180gb";
    else if ((dp__contains(n, "H200") && !dp__contains(n, "NVL")) || dev == 0x2335)
        p = "h200-sxm-141gb";
    else if (dp__contains(n, "H100")) {
        /* NVML: "NVIDIA H100 80GB HBM3" (SXM5), "NVIDIA H100 PCIe", "NVIDIA H100 NVL". */
        if (dp__contains(n, "NVL"))
            p = NULL;
        else if (dp__contains(n, "PCIe") || dev == 0x2331)
            p = "h100-pcie-80gb";
        else if (dp__contains(n, "HBM3") || dp__contains(n, "SXM") || dev == 0x2330)
            p = "h100-sxm5-80gb";
    } else if (dp__contains(n, "A100") || dev == 0x20b0 || dev == 0x20b2 || dev == 0x20b5 ||
               dev == 0x20f1) {
        /* "NVIDIA A100-SXM4-80GB", "NVIDIA A100-SXM4-40GB", "NVIDIA A100 80GB PCIe". */
        bool big = dp__contains(n, "80GB") || gib > 60 || dev == 0x20b2 || dev == 0x20b5;
        bool small = dp__contains(n, "40GB") || (gib > 0 && gib <= 60) || dev == 0x20b0;
        if (dp__contains(n, "PCIe") || dev == 0x20b5 || dev == 0x20f1)
            p = big ? "a100-pcie-80gb" : NULL;
        else
            p = big ? "a100-sxm4-80gb" : small ? "a100-sxm4-40gb" : NULL;
    } else if (dp__contains(n, "L40S") || dev == 0x26b9)
        p = "l40s-48gb";
    else if (dp__contains(n, "RTX 4090") || dev == 0x2684)
        p = "rtx4090-24gb";
    if (!p)
        return DP_ENOENT;
    snprintf(out, cap, "%s", p);
    return 0;
}

/* The link classes of one node, loaded once per derivation. */
struct classes {
    struct dp_link host;  /* the GPU's PCIe link profile */
    struct dp_link nvl;   /* the GPU's NVLink profile, or defaults */
    bool nvl_is_profile;  /* nvl came from an nvlink interconnect profile */
    double cpu_link_gbps; /* inter-socket credit for SYS */
};

static int load_classes(const struct dp_topo *t, const struct dp_gpu *gpu, struct classes *c,
                        struct dp_err *err)
{
    memset(c, 0, sizeof *c);
    int rc = dp_link_load(gpu->host_link, &c->host, err);
    if (rc) {
        dp_err_prefix(err, "GPU profile %s: host_link", gpu->name);
        return rc;
    }
    struct dp_err sub = {0};
    if (dp_link_load(gpu->intra_link, &c->nvl, &sub) == 0 && c->nvl.kind == DP_LINK_NVLINK) {
        c->nvl_is_profile = true;
    } else {
        memset(&c->nvl, 0, sizeof c->nvl);
        snprintf(c->nvl.name, sizeof c->nvl.name, "nvlink");
        c->nvl.kind = DP_LINK_NVLINK;
        c->nvl.efficiency = NVLINK_DEFAULT_EFFICIENCY;
        c->nvl.latency_us = NVLINK_DEFAULT_LATENCY_US;
    }
    /* NCCL's ncclTopoGetInterCpuBw: by vendor, and for Intel by family 6 model. */
    if (strcmp(t->cpu_vendor, "AuthenticAMD") == 0) {
        c->cpu_link_gbps = AMD_GBPS;
    } else if (strcmp(t->cpu_vendor, "GenuineIntel") == 0 && t->cpu_family == 6) {
        int m = t->cpu_model_id;
        c->cpu_link_gbps = m >= 0xCF   ? ERP_QPI_GBPS
                           : m >= 0x8F ? SRP_QPI_GBPS
                           : m >= 0x55 ? SKL_QPI_GBPS
                                       : BDW_QPI_GBPS;
    } else {
        c->cpu_link_gbps = SKL_QPI_GBPS; /* unknown CPU: a mid-range figure */
    }
    return 0;
}

/* The link of one GPU pair. */
static void pair_link(const struct dp_topo *t, const struct classes *c, int a, int b,
                      struct dp_link *l)
{
    const struct dp_topo_pair *p = dp_topo_pair_at(t, a, b);
    memset(l, 0, sizeof *l);
    if (p->nvlinks > 0) {
        l->kind = DP_LINK_NVLINK;
        l->bw_gbps = p->nvlink_gbps;
        l->efficiency = c->nvl.efficiency;
        l->latency_us = c->nvl.latency_us;
        snprintf(l->name, sizeof l->name, "nvlink NV%d", p->nvlinks);
        return;
    }
    l->kind = DP_LINK_PCIE;
    l->bw_gbps = c->host.bw_gbps;
    l->latency_us = c->host.latency_us;
    switch (p->pcie) {
    case DP_PATH_SELF:
    case DP_PATH_PIX:
    case DP_PATH_PXB: l->efficiency = PCIE_SWITCH_EFFICIENCY; break;
    case DP_PATH_PHB:
    case DP_PATH_NODE: l->efficiency = c->host.efficiency; break;
    case DP_PATH_SYS: {
        double cap = round(c->cpu_link_gbps / c->host.bw_gbps * 1000) / 1000;
        l->efficiency = cap < c->host.efficiency ? cap : c->host.efficiency;
        break;
    }
    }
    snprintf(l->name, sizeof l->name, "%s %s", c->host.name, dp_topo_path_name(p->pcie));
}

static double effective(const struct dp_link *l)
{
    return l->bw_gbps * l->efficiency;
}

/* Is there a ring through members[0..n) using only NVLink edges? (n <= 8: exhaustive) */
static bool nvlink_ring(const struct dp_topo *t, const int *m, int n)
{
    if (n == 2)
        return dp_topo_pair_at(t, m[0], m[1])->nvlinks > 0;
    if (n > 8) {
        for (int i = 0; i < n; i++)
            for (int j = i + 1; j < n; j++)
                if (dp_topo_pair_at(t, m[i], m[j])->nvlinks == 0)
                    return false;
        return true;
    }
    /* Permutations of m[1..n) with m[0] fixed, in lexicographic order of positions. */
    int perm[8];
    for (int i = 0; i < n; i++)
        perm[i] = i;
    for (;;) {
        bool ok = true;
        for (int i = 0; i < n && ok; i++)
            ok = dp_topo_pair_at(t, m[perm[i]], m[perm[(i + 1) % n]])->nvlinks > 0;
        if (ok)
            return true;
        /* next permutation of perm[1..n) */
        int i = n - 2;
        while (i >= 1 && perm[i] > perm[i + 1])
            i--;
        if (i < 1)
            return false;
        int j = n - 1;
        while (perm[j] < perm[i])
            j--;
        int tmp = perm[i];
        perm[i] = perm[j];
        perm[j] = tmp;
        for (int a = i + 1, b = n - 1; a < b; a++, b--) {
            tmp = perm[a];
            perm[a] = perm[b];
            perm[b] = tmp;
        }
    }
}

static void group_link(const struct dp_topo *t, const struct classes *c, int first, int n,
                       struct dp_link *out)
{
    int m[1024];
    if (n > 1024)
        n = 1024;
    for (int i = 0; i < n; i++)
        m[i] = first + i;
    memset(out, 0, sizeof *out);
    if (n == 1) {
        snprintf(out->name, sizeof out->name, "local");
        out->kind = DP_LINK_LOCAL;
        out->bw_gbps = 1e6;
        out->efficiency = 1;
        return;
    }
    /* 1. NVSwitch: every GPU reaches every other at its own full NVLink rate. */
    bool fabric = true;
    double sw_bw = 1e300;
    int sw_links = 1 << 30;
    for (int i = 0; i < n && fabric; i++) {
        const struct dp_topo_gpu *g = &t->gpus[m[i]];
        fabric = g->nvswitch_links > 0 && g->nvlink_gbps > 0;
        if (fabric && g->nvswitch_links * g->nvlink_gbps < sw_bw) {
            sw_bw = g->nvswitch_links * g->nvlink_gbps;
            sw_links = g->nvswitch_links;
        }
    }
    if (fabric) {
        if (c->nvl_is_profile && fabs(c->nvl.bw_gbps - sw_bw) <= 0.01 * sw_bw) {
            *out = c->nvl;
        } else {
            out->kind = DP_LINK_NVLINK;
            out->bw_gbps = sw_bw;
            out->efficiency = c->nvl.efficiency;
            out->latency_us = c->nvl.latency_us;
            snprintf(out->name, sizeof out->name, "nvlink NV%d via NVSwitch", sw_links);
        }
        out->p2p_bw_gbps = 0;
        return;
    }
    /* 2. A direct NVLink mesh with a ring through the group: each GPU drives all its links. */
    if (nvlink_ring(t, m, n)) {
        double worst = 1e300;
        int worst_links = 0;
        for (int i = 0; i < n; i++) {
            double sum = 0;
            int links = 0;
            for (int j = 0; j < n; j++)
                if (j != i) {
                    sum += dp_topo_pair_at(t, m[i], m[j])->nvlink_gbps;
                    links += dp_topo_pair_at(t, m[i], m[j])->nvlinks;
                }
            if (sum < worst) {
                worst = sum;
                worst_links = links;
            }
        }
        out->kind = DP_LINK_NVLINK;
        out->bw_gbps = worst;
        out->efficiency = c->nvl.efficiency;
        out->latency_us = c->nvl.latency_us;
        snprintf(out->name, sizeof out->name, "nvlink NV%d direct", worst_links);
        return;
    }
    /* 3. Otherwise the slowest pair: on a PCIe tree every ring through the group
     * crosses its top-level boundary, which is the slowest pair's class. */
    bool have = false;
    for (int i = 0; i < n; i++)
        for (int j = i + 1; j < n; j++) {
            struct dp_link l;
            pair_link(t, c, m[i], m[j], &l);
            if (!have || effective(&l) < effective(out)) {
                *out = l;
                have = true;
            }
        }
}

int dp_topo_group_link(const struct dp_topo *t, const struct dp_gpu *gpu, int first, int n,
                       struct dp_link *out, struct dp_err *err)
{
    if (first < 0 || n < 1 || first + n > t->ngpus)
        return dp_err_set(err, DP_EINVAL, "GPU group [%d, %d) outside the node's %d GPUs", first,
                          first + n, t->ngpus);
    struct classes c;
    int rc = load_classes(t, gpu, &c, err);
    if (rc)
        return rc;
    group_link(t, &c, first, n, out);
    return 0;
}

int dp_topo_node_links(const struct dp_topo *t, const struct dp_gpu *gpu, struct dp_link *group,
                       int *ngroup, struct dp_link *intra, struct dp_err *err)
{
    *ngroup = 0;
    if (t->ngpus < 1)
        return dp_err_set(err, DP_EINVAL, "no GPUs in the topology");
    struct classes c;
    int rc = load_classes(t, gpu, &c, err);
    if (rc)
        return rc;
    int k = 0;
    while (k < 8 && (2 << k) <= t->ngpus) {
        int size = 2 << k;
        for (int g = 0; g + size <= t->ngpus; g += size) {
            struct dp_link l;
            group_link(t, &c, g, size, &l);
            if (g == 0 || effective(&l) < effective(&group[k]))
                group[k] = l;
        }
        k++;
    }
    *ngroup = k;
    group_link(t, &c, 0, t->ngpus, intra);
    return 0;
}

/* ------------------------------------------------------------ choices */

/* Rate and link layer of the node's compute NICs -> a profiles/network name. */
static bool network_from_nics(const struct dp_topo *t, char *name, size_t cap, char *why,
                              size_t wcap)
{
    bool any_near = false, any_rdma = false;
    for (int i = 0; i < t->nnics; i++) {
        any_near |= t->nics[i].near_gpu;
        any_rdma |= t->nics[i].rdma;
    }
    for (int i = 0; i < t->nnics; i++) {
        const struct dp_topo_nic *n = &t->nics[i];
        if ((any_near && !n->near_gpu) || (!any_near && any_rdma && !n->rdma))
            continue;
        double rate = n->rate_gbit;
        const char *from = "port rate";
        if (rate <= 0 && n->pci_vendor == 0x15b3) {
            /* Mellanox/NVIDIA ConnectX generations by PCI device id. */
            rate = n->pci_device == 0x1021 ? 400 : n->pci_device == 0x101b ? 200 : 0;
            from = n->pci_device == 0x1021 ? "ConnectX-7" : "ConnectX-6";
        }
        const char *net = NULL;
        if (n->infiniband)
            net = rate >= 400 ? "ib-ndr-400" : rate >= 200 ? "ib-hdr-200" : NULL;
        else if (n->rdma && rate >= 400)
            net = "roce-400";
        else if (rate >= 100 && rate < 200)
            net = "eth-100";
        if (!net)
            continue;
        snprintf(name, cap, "%s", net);
        snprintf(why, wcap, "from %s: %s %.0f Gb/s, %s%s", n->name, from, rate,
                 n->infiniband ? "InfiniBand" : "Ethernet",
                 !n->infiniband && n->rdma ? " with RDMA (RoCE)" : "");
        return true;
    }
    return false;
}

/*
 * Find the shipped node type this node is: its name and why into ch, and the
 * profile into *matched; false (ch->system "", the closest miss in system_why)
 * when none matches.
 */
static bool match_system(const struct dp_topo *t, const char *gpu_profile,
                         const struct dp_link *intra, int nics, struct dp_topo_choice *ch,
                         struct dp_system *matched)
{
    char **names = NULL;
    int n = 0;
    ch->system[0] = ch->system_why[0] = '\0';
    if (dp_profile_names("system", &names, &n, NULL) != 0)
        return false;
    char closest[256] = "";
    for (int i = 0; i < n; i++) {
        struct dp_system s;
        struct dp_link sl;
        struct dp_err e = {0};
        if (dp_system_load(names[i], &s, &e) || strcmp(s.gpu, gpu_profile) != 0 ||
            s.gpus_per_node != t->ngpus || dp_link_load(s.intra, &sl, &e))
            continue;
        bool link_ok =
            sl.kind == intra->kind &&
            (sl.kind != DP_LINK_NVLINK || fabs(sl.bw_gbps - intra->bw_gbps) <= 0.01 * sl.bw_gbps);
        if (link_ok && s.nics_per_node == nics) {
            snprintf(ch->system, sizeof ch->system, "%s", s.name);
            snprintf(ch->system_why, sizeof ch->system_why,
                     "%d x %s, %s, %d compute NIC%s, as profiles/system/%s.json", s.gpus_per_node,
                     s.gpu, s.intra, s.nics_per_node, s.nics_per_node == 1 ? "" : "s", s.name);
            *matched = s;
            break;
        }
        if (closest[0])
            continue;
        if (!link_ok)
            snprintf(closest, sizeof closest,
                     "closest is %s, whose GPUs use %s (%.0f GB/s); here the node's GPUs use %s",
                     s.name, sl.name, sl.bw_gbps, intra->name);
        else
            snprintf(closest, sizeof closest,
                     "closest is %s, which has %d compute NICs; this node has %d", s.name,
                     s.nics_per_node, nics);
    }
    dp_names_free(names, n);
    if (!ch->system[0])
        snprintf(ch->system_why, sizeof ch->system_why, "no shipped node type matches%s%s",
                 closest[0] ? ": " : "", closest);
    return ch->system[0] != '\0';
}

int dp_topo_cluster(const struct dp_topo *t, const struct dp_topo_cluster_opts *o,
                    struct dp_cluster *out, struct dp_topo_choice *choice, struct dp_err *err)
{
    struct dp_topo_choice local;
    struct dp_topo_choice *ch = choice ? choice : &local;
    memset(ch, 0, sizeof *ch);
    memset(out, 0, sizeof *out);
    if (t->ngpus == 0)
        return dp_err_set(err, DP_EINVAL,
                          "%s: no GPUs found, so no cluster to describe (give --topology "
                          "FILE.xml of a GPU node, or use --system NAME in the planning "
                          "commands)",
                          t->source);
    if (o->nodes < 1)
        return dp_err_set(err, DP_EUSAGE, "--nodes: expected integer >= 1, got %d", o->nodes);
    const struct dp_topo_gpu *g0 = &t->gpus[0];
    if (o->gpu_profile && o->gpu_profile[0]) {
        snprintf(ch->gpu_profile, sizeof ch->gpu_profile, "%s", o->gpu_profile);
        snprintf(ch->gpu_why, sizeof ch->gpu_why, "given with --gpu-profile");
    } else if (dp_topo_gpu_profile(g0, ch->gpu_profile, sizeof ch->gpu_profile) == 0) {
        snprintf(ch->gpu_why, sizeof ch->gpu_why, "from \"%s\"", g0->name);
    } else {
        return dp_err_set(err, DP_EINVAL,
                          "no GPU profile is known for \"%s\" (PCI %04x:%04x): pass "
                          "--gpu-profile NAME (list: `dplan profiles`)",
                          g0->name, g0->pci_vendor, g0->pci_device);
    }
    for (int i = 1; i < t->ngpus; i++) {
        char other[64];
        if (strcmp(t->gpus[i].name, g0->name) != 0 &&
            (dp_topo_gpu_profile(&t->gpus[i], other, sizeof other) != 0 ||
             strcmp(other, ch->gpu_profile) != 0)) {
            size_t len = strlen(ch->gpu_why);
            snprintf(ch->gpu_why + len, sizeof ch->gpu_why - len,
                     "; GPU%d is \"%s\": one GPU type per node is modelled", i, t->gpus[i].name);
            break;
        }
    }
    int rc = dp_gpu_load(ch->gpu_profile, &out->gpu, err);
    if (rc)
        return rc;
    if ((rc = dp_topo_node_links(t, &out->gpu, out->group_link, &out->ngroup_links, &out->intra,
                                 err)))
        return rc;
    out->nodes = o->nodes;
    out->gpus_per_node = t->ngpus;
    /* The same bounds as a cluster file's (dp_cluster_check_nics), said in topo's terms. */
    int most = DP_MAX_NICS_PER_GPU * t->ngpus;
    if (o->nics_per_node && (o->nics_per_node < 1 || o->nics_per_node > most))
        return dp_err_set(err, DP_EUSAGE,
                          "--nics-per-node: expected integer 1..%d (at most %d NICs per GPU, %d "
                          "GPUs here), got %d",
                          most, DP_MAX_NICS_PER_GPU, t->ngpus, o->nics_per_node);
    out->nics_per_node = o->nics_per_node ? o->nics_per_node : dp_topo_compute_nics(t);
    if (out->nics_per_node > most)
        return dp_err_set(err, DP_EUSAGE,
                          "%s: %d compute NICs found for %d GPUs, more than the %d per GPU dplan "
                          "models: pass --nics-per-node N (the NICs the GPUs' traffic uses)",
                          t->source, out->nics_per_node, t->ngpus, DP_MAX_NICS_PER_GPU);
    if (o->nodes > 1 && out->nics_per_node < 1)
        return dp_err_set(err, DP_EUSAGE,
                          "%s: no NICs found, so %d such nodes could not talk: pass "
                          "--nics-per-node N (the node's compute NICs, 1..%d)%s",
                          t->source, o->nodes, most,
                          o->network && o->network[0] ? "" : " and --network NAME");
    struct dp_system sys;
    bool have_sys = match_system(t, ch->gpu_profile, &out->intra, out->nics_per_node, ch, &sys);
    if (o->network && o->network[0]) {
        snprintf(ch->network, sizeof ch->network, "%s", o->network);
        snprintf(ch->network_why, sizeof ch->network_why, "given with --network");
    } else if (network_from_nics(t, ch->network, sizeof ch->network, ch->network_why,
                                 sizeof ch->network_why)) {
    } else if (have_sys) {
        snprintf(ch->network, sizeof ch->network, "%s", sys.network);
        snprintf(ch->network_why, sizeof ch->network_why, "the default of node type %s", sys.name);
    } else if (o->nodes == 1) {
        snprintf(ch->network, sizeof ch->network, "eth-100");
        snprintf(ch->network_why, sizeof ch->network_why,
                 "placeholder: the NICs do not tell, and one node has no inter-node traffic");
    } else {
        return dp_err_set(err, DP_EUSAGE,
                          "cannot tell the inter-node network from this node's NICs: pass "
                          "--network NAME (list: `dplan profiles`)");
    }
    if ((rc = dp_network_load(ch->network, &out->inter, err)))
        return rc;
    const char *base = ch->system[0] ? ch->system : t->hostname[0] ? t->hostname : "node";
    /* No node count in the name: --nodes may change it when the file is used. */
    snprintf(out->name, sizeof out->name, "%s (topology)", base);
    snprintf(out->system, sizeof out->system, "%s", ch->system[0] ? ch->system : "topology");
    return 0;
}
