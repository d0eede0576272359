/*
 * dplan topo [--topology FILE.xml] [--json] [-o cluster.json] [--nodes N]
 *            [--network NAME] [--gpu-profile NAME] [--nics-per-node N]
 *
 * Describes this machine (hwloc + NVML) or an hwloc XML export: a summary,
 * the GPU/NIC matrix in the style of `nvidia-smi topo -m`, and the links the
 * cost model will use; --json / -o write the cluster file that --cluster
 * reads in every planning command.
 */
#include "cli.h"
#include "topology/topology.h"

#include <cjson/cJSON.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

static const char help[] =
    "usage: dplan topo [--topology FILE.xml] [--json] [-o cluster.json] [--nodes N]\n"
    "                  [--network NAME] [--gpu-profile NAME] [--nics-per-node N]\n\n"
    "Describe a node: packages, NUMA nodes, GPUs with memory, NICs, and the GPU/NIC\n"
    "matrix of `nvidia-smi topo -m` (NV#, PIX, PXB, PHB, NODE, SYS), then the link\n"
    "each aligned group of GPUs uses in the cost model. Without --topology, this\n"
    "machine is read with hwloc, and with NVML (libnvidia-ml.so.1, or $DPLAN_NVML_LIB)\n"
    "when it loads.\n\n"
    "  --topology FILE.xml   an hwloc 2.x export (`lstopo --of xml FILE.xml`) of any node\n"
    "  --json                print the cluster description (JSON) instead\n"
    "  -o, --output FILE     also write it to FILE, for `--cluster FILE` when planning\n"
    "  --nodes N             nodes of this kind in the cluster [1]\n"
    "  --network NAME        inter-node network (profiles/network) [from the NICs]\n"
    "  --gpu-profile NAME    GPU profile when the GPU name is not recognised\n"
    "  --nics-per-node N     NICs per node for inter-node traffic, 1 to 4 per GPU\n"
    "                        [the compute NICs found: those on a PCIe switch with a\n"
    "                        GPU, else the RDMA ones, else all]; needed with --nodes > 1\n"
    "                        when the topology shows no NIC\n\n"
    "A name given with --gpu-profile or --network must be a profile (`dplan profiles`).\n";

enum { OPT_TOPOLOGY = OPT_COMMON_END + 1, OPT_GPU_PROFILE, OPT_NICS_PER_NODE };

static double gib(int64_t b)
{
    return cli_gib(b);
}

static void print_machine(const struct dp_topo *t)
{
    if (strncmp(t->source, "this machine", 12) == 0)
        printf("topology  %s%s%s, hwloc %s\n", t->source, t->hostname[0] ? ", host " : "",
               t->hostname, t->hwloc_version);
    else
        printf("topology  %s (hwloc XML, exported by hwloc %s%s%s)\n", t->source, t->hwloc_version,
               t->hostname[0] ? " on " : "", t->hostname);
    printf("machine   %d package%s, %d NUMA node%s, %d cores, %d PUs, %.1f GiB\n", t->npackages,
           t->npackages == 1 ? "" : "s", t->nnuma, t->nnuma == 1 ? "" : "s", t->ncores, t->npus,
           gib(t->mem_bytes));
    if (t->cpu_model[0])
        printf("CPU       %s%s%s%s\n", t->cpu_model, t->cpu_vendor[0] ? " (" : "", t->cpu_vendor,
               t->cpu_vendor[0] ? ")" : "");
    if (t->host_bridges)
        printf("PCI       %d host bridge%s, %d PCIe switch%s\n", t->host_bridges,
               t->host_bridges == 1 ? "" : "s", t->pcie_switches,
               t->pcie_switches == 1 ? "" : "es");
    for (int i = 0; i < t->nnuma; i++) {
        const struct dp_topo_numa *n = &t->numa[i];
        printf("%-10snode %d: %.1f GiB", i == 0 ? "NUMA" : "", n->os_index, gib(n->mem_bytes));
        if (n->package >= 0)
            printf(", package %d", n->package);
        printf(", CPUs %s\n", n->cpus);
    }
}

static void print_devices(const struct dp_topo *t)
{
    if (t->ngpus == 0) {
        printf("GPUs      none found\n");
    } else {
        printf("GPUs      %d", t->ngpus);
        bool same = true;
        for (int i = 1; i < t->ngpus; i++)
            same &= strcmp(t->gpus[i].name, t->gpus[0].name) == 0;
        if (same)
            printf(" x %s", t->gpus[0].name);
        if (t->nvlink_source[0])
            printf("; NVLink from %s", t->nvlink_source);
        else
            printf("; no NVLink information");
        if (t->nvswitches)
            printf(", %d NVSwitch chip%s", t->nvswitches, t->nvswitches == 1 ? "" : "s");
        printf("\n");
    }
    int compute = 0;
    for (int i = 0; i < t->nnics; i++)
        compute += t->nics[i].near_gpu;
    if (t->nnics == 0)
        printf("NICs      none found\n");
    else if (compute)
        printf("NICs      %d, %d of them on a PCIe switch with a GPU (compute NICs)\n", t->nnics,
               compute);
    else
        printf("NICs      %d\n", t->nnics);

    if (t->ngpus) {
        printf("\n      %-13s %4s %10s %11s  %s\n", "PCI", "NUMA", "memory", "PCIe", "name");
        for (int i = 0; i < t->ngpus; i++) {
            const struct dp_topo_gpu *g = &t->gpus[i];
            char mem[32] = "?", link[32] = "?", numa[16] = "?";
            if (g->mem_bytes > 0)
                snprintf(mem, sizeof mem, "%.1f GiB", gib(g->mem_bytes));
            if (g->pcie_gbps > 0)
                snprintf(link, sizeof link, "%.1f GB/s", g->pcie_gbps);
            if (g->numa >= 0)
                snprintf(numa, sizeof numa, "%d", g->numa);
            char label[16];
            snprintf(label, sizeof label, "GPU%d", i);
            printf("%-5s %-13s %4s %10s %11s  %s", label, g->busid[0] ? g->busid : "?", numa, mem,
                   link, g->name);
            if (g->osdevs[0])
                printf(" (%s)", g->osdevs);
            printf("\n");
        }
    }
    if (t->nnics) {
        printf("\n      %-13s %4s %-22s %s\n", "PCI", "NUMA", "kind", "name");
        for (int i = 0; i < t->nnics; i++) {
            const struct dp_topo_nic *n = &t->nics[i];
            char numa[16] = "?", kind[48], label[16];
            if (n->numa >= 0)
                snprintf(numa, sizeof numa, "%d", n->numa);
            snprintf(kind, sizeof kind, "%s%s", n->infiniband ? "InfiniBand" : "Ethernet",
                     n->rdma ? ", RDMA" : "");
            if (n->rate_gbit > 0) {
                size_t len = strlen(kind);
                snprintf(kind + len, sizeof kind - len, ", %.0f Gb/s", n->rate_gbit);
            }
            snprintf(label, sizeof label, "NIC%d", i);
            printf("%-5s %-13s %4s %-22s %s", label, n->busid, numa, kind, n->name);
            if (n->netdev[0] && strcmp(n->netdev, n->name) != 0)
                printf(" (%s)", n->netdev);
            if (n->model[0])
                printf(" %s", n->model);
            printf("\n");
        }
    }
}

/* Append printf output to a line buffer. */
static void cat(char *line, size_t cap, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void cat(char *line, size_t cap, const char *fmt, ...)
{
    size_t len = strlen(line);
    va_list ap;
    va_start(ap, fmt);
    if (len < cap)
        vsnprintf(line + len, cap - len, fmt, ap);
    va_end(ap);
}

static void put_line(char *line)
{
    size_t len = strlen(line);
    while (len && line[len - 1] == ' ')
        line[--len] = '\0';
    puts(line);
}

static void device_label(const struct dp_topo *t, int i, char *out, size_t cap)
{
    if (i < t->ngpus)
        snprintf(out, cap, "GPU%d", i);
    else
        snprintf(out, cap, "NIC%d", i - t->ngpus);
}

/* The matrix of `nvidia-smi topo -m`, with our own legend text. */
static void print_matrix(const struct dp_topo *t)
{
    int nd = t->ngpus + t->nnics;
    if (t->ngpus == 0 || nd < 2)
        return;
    char line[4096] = "", label[16];
    /* The CPU column fits the longest list ("0,2,4,...,22" on Linux's interleaved
     * numbering), with at least two spaces before the NUMA column. */
    int cpu_w = 17;
    for (int i = 0; i < t->ngpus; i++) {
        int w = (int)strlen(t->gpus[i].cpus[0] ? t->gpus[i].cpus : "N/A") + 2;
        if (w > cpu_w)
            cpu_w = w;
    }
    cat(line, sizeof line, "%-6s", "");
    for (int i = 0; i < nd; i++) {
        device_label(t, i, label, sizeof label);
        cat(line, sizeof line, "%-6s", label);
    }
    cat(line, sizeof line, "%-*s", cpu_w, "CPU Affinity");
    cat(line, sizeof line, "%s", "NUMA Affinity");
    printf("\n");
    put_line(line);
    for (int a = 0; a < nd; a++) {
        line[0] = '\0';
        device_label(t, a, label, sizeof label);
        cat(line, sizeof line, "%-6s", label);
        for (int b = 0; b < nd; b++) {
            char code[16];
            dp_topo_pair_code(t, a, b, code, sizeof code);
            cat(line, sizeof line, "%-6s", a == b ? " X" : code);
        }
        if (a < t->ngpus) {
            const struct dp_topo_gpu *g = &t->gpus[a];
            char numa[16] = "N/A";
            if (g->numa >= 0)
                snprintf(numa, sizeof numa, "%d", g->numa);
            cat(line, sizeof line, "%-*s", cpu_w, g->cpus[0] ? g->cpus : "N/A");
            cat(line, sizeof line, "%s", numa);
        }
        put_line(line);
    }
    printf("\nLegend:\n\n"
           "  X    = the device itself\n"
           "  SYS  = through PCIe and the link between NUMA nodes or sockets (UPI, Infinity "
           "Fabric)\n"
           "  NODE = through PCIe and between PCIe host bridges of one NUMA node\n"
           "  PHB  = through PCIe and a PCIe host bridge (the CPU's root complex)\n"
           "  PXB  = through several PCIe bridges, without a host bridge\n"
           "  PIX  = through at most one PCIe bridge (one PCIe switch)\n"
           "  NV#  = through a bonded set of # NVLinks (direct, or via NVSwitch)\n");
    if (t->nnics) {
        printf("\nNIC Legend:\n\n");
        for (int i = 0; i < t->nnics; i++)
            printf("  NIC%d: %s\n", i, t->nics[i].name);
    }
}

static void print_link(const char *label, const struct dp_link *l)
{
    printf("  %-8s %-26s %6.1f GB/s x %.3f = %6.1f GB/s per direction, %.1f us\n", label, l->name,
           l->bw_gbps, l->efficiency, l->bw_gbps * l->efficiency, l->latency_us);
}

static void print_plan_view(const struct dp_topo *t, const struct dp_cluster *cl,
                            const struct dp_topo_choice *ch)
{
    printf("\nGPU profile  %s (%s)\n", ch->gpu_profile, ch->gpu_why);
    if (ch->system[0])
        printf("node type    %s (%s)\n", ch->system, ch->system_why);
    else
        printf("node type    none: %s\n", ch->system_why);
    printf("network      %s (%s)\n", ch->network, ch->network_why);
    printf("NICs/node    %d\n", cl->nics_per_node);
    printf("links the cost model uses for aligned groups of GPUs:\n");
    for (int k = 0; k < cl->ngroup_links; k++) {
        char label[32];
        snprintf(label, sizeof label, "%d GPUs", 2 << k);
        print_link(label, &cl->group_link[k]);
    }
    if (cl->ngroup_links == 0 || (2 << (cl->ngroup_links - 1)) != t->ngpus) {
        char label[32];
        snprintf(label, sizeof label, "%d GPU%s", t->ngpus, t->ngpus == 1 ? "" : "s");
        print_link(label, &cl->intra);
    }
}

static void print_notes(const struct dp_topo *t, const char *extra)
{
    if (!t->nnotes && !extra)
        return;
    printf("\nnotes:\n");
    for (int i = 0; i < t->nnotes; i++)
        printf("  - %s\n", t->notes[i]);
    if (extra)
        printf("  - %s\n", extra);
}

/* A note when an SXM-class GPU shows no NVLink: the input lacked it, not the machine. */
static void nvlink_hint(const struct dp_topo *t, const struct dp_cluster *cl, char *out, size_t cap)
{
    out[0] = '\0';
    if (t->nvlink_source[0] || cl->gpu.intra_link[0] == '\0')
        return;
    struct dp_link l;
    struct dp_err e = {0};
    if (dp_link_load(cl->gpu.intra_link, &l, &e) == 0 && l.kind == DP_LINK_NVLINK)
        snprintf(out, cap, "%s GPUs normally talk over %s, but %s: the links above are PCIe",
                 cl->gpu.name, l.name,
                 strncmp(t->source, "this machine", 12) == 0
                     ? "NVML reported no NVLinks (or was not used)"
                     : "this file has no NVLink information (its hwloc had no NVML backend)");
}

int cmd_topo(int argc, char **argv)
{
    static const struct option opts[] = {{"topology", required_argument, 0, OPT_TOPOLOGY},
                                         {"json", no_argument, 0, OPT_JSON},
                                         {"output", required_argument, 0, 'o'},
                                         {"nodes", required_argument, 0, OPT_NODES},
                                         {"network", required_argument, 0, OPT_NETWORK},
                                         {"gpu-profile", required_argument, 0, OPT_GPU_PROFILE},
                                         {"nics-per-node", required_argument, 0, OPT_NICS_PER_NODE},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    struct cli_common c;
    cli_common_init(&c);
    const char *xml = NULL, *output = NULL, *gpu_profile = NULL;
    int ch, nics = 0;
    optind = 1;
    opterr = 0;
    while ((ch = cli_next_opt("topo", argc, argv, ":ho:", opts, &c)) != -1) {
        switch (ch) {
        case OPT_TOPOLOGY: xml = optarg; break;
        case OPT_GPU_PROFILE: gpu_profile = optarg; break;
        case OPT_NICS_PER_NODE: {
            char *end;
            long v = strtol(optarg, &end, 10);
            if (end == optarg || *end || v < 1 || v > 1 << 20)
                return cli_usage_error("topo", "--nics-per-node: expected integer >= 1, got \"%s\"",
                                       optarg);
            nics = (int)v;
            break;
        }
        case 'o': output = optarg; break;
        case 'h': printf("%s", help); return 0;
        default: return 2; /* -2: cli_next_opt printed the usage error */
        }
    }
    if (optind != argc)
        return cli_usage_error("topo", "unexpected argument \"%s\"", argv[optind]);

    struct dp_err err = {0};
    /* -o must not be the --topology XML it is made from. */
    char *inputs[1] = {(char *)xml};
    if (output && xml && cli_output_check(NULL, output, "-o", inputs, 1, &err))
        return cli_fail(&err);
    /* Names the user gave must exist, whatever the topology turns out to be. */
    struct dp_gpu gp;
    struct dp_link net;
    if ((gpu_profile && dp_gpu_load(gpu_profile, &gp, &err)) ||
        (c.network && dp_network_load(c.network, &net, &err)))
        return cli_fail(&err);
    struct dp_topo t;
    int rc = xml ? dp_topo_load_xml(xml, &t, &err) : dp_topo_discover(&t, &err);
    if (rc)
        return cli_fail(&err);

    struct dp_topo_cluster_opts o = {.gpu_profile = gpu_profile,
                                     .nodes = c.nodes ? c.nodes : 1,
                                     .network = c.network,
                                     .nics_per_node = nics};
    struct dp_cluster cl;
    struct dp_topo_choice choice;
    struct dp_err cerr = {0};
    /* With no GPUs this fails (DP_EINVAL, "no GPUs found") without looking further. */
    int crc = dp_topo_cluster(&t, &o, &cl, &choice, &cerr);
    if (crc && (c.json || output)) {
        dp_topo_release(&t);
        return cli_fail(&cerr);
    }
    if (crc == DP_EUSAGE) {
        dp_topo_release(&t);
        return cli_fail(&cerr);
    }
    if (!crc && (c.json || output)) {
        cJSON *root = dp_cluster_to_json(&cl);
        cJSON_AddItemToObject(root, "topology", dp_topo_to_json(&t));
        if (output && dp_json_save_file(output, root, &err)) {
            cJSON_Delete(root);
            dp_topo_release(&t);
            return cli_fail(&err);
        }
        if (c.json) {
            cli_print_json(root);
            dp_topo_release(&t);
            return 0;
        }
        cJSON_Delete(root);
    }

    print_machine(&t);
    print_devices(&t);
    print_matrix(&t);
    char hint[512] = "";
    if (!crc) {
        nvlink_hint(&t, &cl, hint, sizeof hint);
        print_plan_view(&t, &cl, &choice);
    } else if (t.ngpus) {
        printf("\nGPU profile  unknown: %s\n", cerr.msg);
    }
    print_notes(&t, hint[0] ? hint : NULL);
    if (!t.ngpus) {
        printf("\nNo GPUs here, so there is no cluster to plan on. To plan for a GPU node, export "
               "its\ntopology there (`lstopo --of xml node.xml`) and run `dplan topo --topology "
               "node.xml`,\nor plan for a shipped node type with --system NAME (list: `dplan "
               "profiles`).\n");
    } else if (output) {
        printf("\nwrote %s (%s); plan with --cluster %s\n", output, cl.name, output);
    } else if (!crc) {
        printf("\nwrite it with -o cluster.json (or print it with --json), then plan with "
               "--cluster cluster.json\n");
    }
    dp_topo_release(&t);
    return 0;
}
