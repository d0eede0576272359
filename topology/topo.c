/*
 * Common parts of a discovered topology: allocation and release, notes,
 * nvidia-smi style pair codes, NVLink per-link rates, compute-NIC count, and
 * the JSON form written into cluster files. No discovery happens here.
 */
#include "internal.h"

#include <cjson/cJSON.h>
#include <ctype.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const path_names[] = {"X", "PIX", "PXB", "PHB", "NODE", "SYS"};

const char *dp_topo_path_name(enum dp_topo_path p)
{
    return (unsigned)p < sizeof path_names / sizeof path_names[0] ? path_names[p] : "?";
}

void dp__topo_note(struct dp_topo *t, const char *fmt, ...)
{
    if (t->nnotes >= DP_TOPO_MAX_NOTES)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(t->notes[t->nnotes], sizeof t->notes[0], fmt, ap);
    va_end(ap);
    t->nnotes++;
}

void dp_topo_release(struct dp_topo *t)
{
    if (!t)
        return;
    free(t->numa);
    free(t->gpus);
    free(t->nics);
    free(t->pairs);
    memset(t, 0, sizeof *t);
}

/* Grow *arr (n entries of `size` bytes) by one zeroed entry; NULL on ENOMEM. */
static void *grow_one(void **arr, int *n, size_t size)
{
    char *p = realloc(*arr, (size_t)(*n + 1) * size);
    if (!p)
        return NULL;
    *arr = p;
    p += (size_t)(*n)++ * size;
    memset(p, 0, size);
    return p;
}

struct dp_topo_gpu *dp__topo_add_gpu(struct dp_topo *t)
{
    void *arr = t->gpus;
    struct dp_topo_gpu *g = grow_one(&arr, &t->ngpus, sizeof *g);
    t->gpus = arr;
    if (g)
        g->numa = g->package = -1;
    return g;
}

struct dp_topo_nic *dp__topo_add_nic(struct dp_topo *t)
{
    void *arr = t->nics;
    struct dp_topo_nic *n = grow_one(&arr, &t->nnics, sizeof *n);
    t->nics = arr;
    if (n)
        n->numa = n->package = -1;
    return n;
}

int dp__topo_alloc_pairs(struct dp_topo *t)
{
    int n = t->ngpus + t->nnics;
    free(t->pairs);
    t->pairs = calloc(n > 0 ? (size_t)n * (size_t)n : 1, sizeof *t->pairs);
    if (!t->pairs)
        return DP_ENOMEM;
    for (int a = 0; a < n; a++)
        for (int b = 0; b < n; b++)
            t->pairs[a * n + b].pcie = a == b ? DP_PATH_SELF : DP_PATH_SYS;
    return 0;
}

void dp__busid(char *out, size_t cap, unsigned domain, unsigned bus, unsigned dev, unsigned func)
{
    snprintf(out, cap, "%04x:%02x:%02x.%x", domain & 0xffffu, bus & 0xffu, dev & 0x1fu, func & 7u);
}

bool dp__contains(const char *hay, const char *needle)
{
    size_t n = strlen(needle);
    for (; *hay; hay++)
        if (strncasecmp(hay, needle, n) == 0)
            return true;
    return n == 0;
}

int dp__topo_gpu_by_bus(const struct dp_topo *t, unsigned domain, unsigned bus, unsigned dev)
{
    char want[16];
    dp__busid(want, sizeof want, domain, bus, dev, 0);
    for (int i = 0; i < t->ngpus; i++)
        if (strcmp(t->gpus[i].busid, want) == 0)
            return i;
    return -1;
}

double dp__nvlink_version_gbps(int version)
{
    if (version == 1)
        return 20.0;
    if (version >= 2 && version <= 6)
        return 25.0;
    if (version == 7)
        return 50.0;
    return 0;
}

/*
 * Board names by PCI id, as the PCI ID database (pciutils/pciids, pci.ids)
 * spells them, for exports made where that database did not know the board:
 * hwloc then records no PCIDevice name. Datacenter GPUs from Fermi on, the
 * boards of profiles/gpu, and AMD Instinct.
 */
// clang-format off
static const struct { unsigned vendor, device; const char *name; } pci_gpu_names[] = {
    {VENDOR_NVIDIA, 0x06d1, "GF100GL [Tesla C2050 / C2070]"},
    {VENDOR_NVIDIA, 0x06d2, "GF100GL [Tesla M2070]"},
    {VENDOR_NVIDIA, 0x06de, "GF100GL [Tesla T20 Processor]"},
    {VENDOR_NVIDIA, 0x15f7, "GP100GL [Tesla P100 PCIe 12GB]"},
    {VENDOR_NVIDIA, 0x15f8, "GP100GL [Tesla P100 PCIe 16GB]"},
    {VENDOR_NVIDIA, 0x1b38, "GP102GL [Tesla P40]"},
    {VENDOR_NVIDIA, 0x1db1, "GV100GL [Tesla V100 SXM2 16GB]"},
    {VENDOR_NVIDIA, 0x1db4, "GV100GL [Tesla V100 PCIe 16GB]"},
    {VENDOR_NVIDIA, 0x1db5, "GV100GL [Tesla V100 SXM2 32GB]"},
    {VENDOR_NVIDIA, 0x1db6, "GV100GL [Tesla V100 PCIe 32GB]"},
    {VENDOR_NVIDIA, 0x1db8, "GV100GL [Tesla V100 SXM3 32GB]"},
    {VENDOR_NVIDIA, 0x1df6, "GV100GL [Tesla V100S PCIe 32GB]"},
    {VENDOR_NVIDIA, 0x1eb8, "TU104GL [Tesla T4]"},
    {VENDOR_NVIDIA, 0x20b0, "GA100 [A100 SXM4 40GB]"},
    {VENDOR_NVIDIA, 0x20b2, "GA100 [A100 SXM4 80GB]"},
    {VENDOR_NVIDIA, 0x20b5, "GA100 [A100 PCIe 80GB]"},
    {VENDOR_NVIDIA, 0x20f1, "GA100 [A100 PCIe 40GB]"},
    {VENDOR_NVIDIA, 0x2230, "GA102GL [RTX A6000]"},
    {VENDOR_NVIDIA, 0x2236, "GA102GL [A10]"},
    {VENDOR_NVIDIA, 0x2321, "GH100 [H100L 94GB]"},
    {VENDOR_NVIDIA, 0x2322, "GH100 [H800 PCIe]"},
    {VENDOR_NVIDIA, 0x2324, "GH100 [H800]"},
    {VENDOR_NVIDIA, 0x2330, "GH100 [H100 SXM5 80GB]"},
    {VENDOR_NVIDIA, 0x2331, "GH100 [H100 PCIe]"},
    {VENDOR_NVIDIA, 0x2335, "GH100 [H200 SXM 141GB]"},
    {VENDOR_NVIDIA, 0x2336, "GH100 [H100]"},
    {VENDOR_NVIDIA, 0x2684, "AD102 [GeForce RTX 4090]"},
    {VENDOR_NVIDIA, 0x26b5, "AD102GL [L40]"},
    {VENDOR_NVIDIA, 0x26b9, "AD102GL [L40S]"},
    {VENDOR_NVIDIA, 0x27b8, "AD104GL [L4]"},
    {VENDOR_NVIDIA, 0x2901, "GB100 [B200]"},
    {VENDOR_AMD,    0x738c, "Arcturus GL-XL [Instinct MI100]"},
    {VENDOR_AMD,    0x740c, "Aldebaran/MI200 [Instinct MI250X/MI250]"},
    {VENDOR_AMD,    0x740f, "Aldebaran/MI200 [Instinct MI210]"},
    {VENDOR_AMD,    0x74a1, "Aqua Vanjaram [Instinct MI300X]"},
    {VENDOR_AMD,    0x74a5, "Aqua Vanjaram [Instinct MI325X]"},
};
// clang-format on

const char *dp__gpu_pci_name(unsigned vendor, unsigned device)
{
    for (size_t i = 0; i < sizeof pci_gpu_names / sizeof pci_gpu_names[0]; i++)
        if (pci_gpu_names[i].vendor == vendor && pci_gpu_names[i].device == device)
            return pci_gpu_names[i].name;
    return NULL;
}

bool dp__gpu_is_a100(const char *name, unsigned pci_device)
{
    return dp__contains(name, "A100") || dp__contains(name, "A800") ||
           dp__contains(name, "GA100") || (pci_device >= 0x20b0 && pci_device <= 0x20ff);
}

double dp__nvlink_gpu_gbps(const char *name, unsigned pci_device)
{
    /* Blackwell first: "GB200" also contains "B200". */
    static const char *const gen50[] = {"B100", "B200", "B300", NULL};
    static const char *const gen25[] = {"V100", "A100",  "A800",  "H100",  "H200", "H800",
                                        "H20",  "GH100", "GA100", "GV100", NULL};
    for (int i = 0; gen50[i]; i++)
        if (dp__contains(name, gen50[i]))
            return 50.0;
    for (int i = 0; gen25[i]; i++)
        if (dp__contains(name, gen25[i]))
            return 25.0;
    if (dp__contains(name, "P100"))
        return 20.0;
    if (dp__gpu_is_a100(name, pci_device) || (pci_device >= 0x2330 && pci_device <= 0x233f))
        return 25.0;
    return DP_NVLINK_DEFAULT_GBPS;
}

void dp__topo_set_nvlinks(struct dp_topo *t, const int *direct)
{
    for (int i = 0; i < t->ngpus; i++)
        for (int j = 0; j < t->ngpus; j++) {
            struct dp_topo_pair *p = &t->pairs[i * (t->ngpus + t->nnics) + j];
            if (i == j) {
                p->nvlinks = 0;
                p->nvlink_gbps = 0;
                continue;
            }
            const struct dp_topo_gpu *a = &t->gpus[i], *b = &t->gpus[j];
            /* Each end may report the bundle: take the larger count. */
            int links = 0;
            if (direct) {
                int ij = direct[i * t->ngpus + j], ji = direct[j * t->ngpus + i];
                links = ij > ji ? ij : ji;
            }
            if (a->nvswitch_links > 0 && b->nvswitch_links > 0)
                links +=
                    a->nvswitch_links < b->nvswitch_links ? a->nvswitch_links : b->nvswitch_links;
            double per = a->nvlink_gbps < b->nvlink_gbps ? a->nvlink_gbps : b->nvlink_gbps;
            p->nvlinks = per > 0 ? links : 0;
            p->nvlink_gbps = per > 0 ? links * per : 0;
        }
}

void dp_topo_pair_code(const struct dp_topo *t, int a, int b, char *out, size_t cap)
{
    const struct dp_topo_pair *p = dp_topo_pair_at(t, a, b);
    if (a == b)
        snprintf(out, cap, "X");
    else if (p->nvlinks > 0)
        snprintf(out, cap, "NV%d", p->nvlinks);
    else
        snprintf(out, cap, "%s", dp_topo_path_name(p->pcie));
}

int dp_topo_compute_nics(const struct dp_topo *t)
{
    int near = 0, rdma = 0;
    for (int i = 0; i < t->nnics; i++) {
        near += t->nics[i].near_gpu;
        rdma += t->nics[i].rdma;
    }
    return near ? near : rdma ? rdma : t->nnics;
}

static cJSON *device_json(const struct dp_topo *t, int i)
{
    cJSON *o = cJSON_CreateObject();
    if (i < t->ngpus) {
        const struct dp_topo_gpu *g = &t->gpus[i];
        char id[16];
        snprintf(id, sizeof id, "GPU%d", i);
        cJSON_AddStringToObject(o, "id", id);
        cJSON_AddStringToObject(o, "name", g->name);
        cJSON_AddStringToObject(o, "pci", g->busid);
        if (g->mem_bytes > 0)
            cJSON_AddNumberToObject(o, "mem_bytes", (double)g->mem_bytes);
        if (g->pcie_gbps > 0)
            cJSON_AddNumberToObject(o, "pcie_gbps", round(g->pcie_gbps * 100) / 100);
        cJSON_AddNumberToObject(o, "numa", g->numa);
        cJSON_AddStringToObject(o, "cpus", g->cpus);
        if (g->osdevs[0])
            cJSON_AddStringToObject(o, "os_devices", g->osdevs);
        if (g->nvswitch_links)
            cJSON_AddNumberToObject(o, "nvswitch_links", g->nvswitch_links);
        if (g->nvlink_gbps > 0)
            cJSON_AddNumberToObject(o, "nvlink_gbps_per_link", g->nvlink_gbps);
    } else {
        const struct dp_topo_nic *n = &t->nics[i - t->ngpus];
        char id[16];
        snprintf(id, sizeof id, "NIC%d", i - t->ngpus);
        cJSON_AddStringToObject(o, "id", id);
        cJSON_AddStringToObject(o, "name", n->name);
        if (n->netdev[0])
            cJSON_AddStringToObject(o, "netdev", n->netdev);
        cJSON_AddStringToObject(o, "pci", n->busid);
        if (n->model[0])
            cJSON_AddStringToObject(o, "model", n->model);
        cJSON_AddStringToObject(o, "link_layer", n->infiniband ? "infiniband" : "ethernet");
        cJSON_AddBoolToObject(o, "rdma", n->rdma);
        if (n->rate_gbit > 0)
            cJSON_AddNumberToObject(o, "rate_gbit", n->rate_gbit);
        cJSON_AddNumberToObject(o, "numa", n->numa);
        cJSON_AddBoolToObject(o, "near_gpu", n->near_gpu);
    }
    return o;
}

cJSON *dp_topo_to_json(const struct dp_topo *t)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "source", t->source);
    if (t->hostname[0])
        cJSON_AddStringToObject(o, "hostname", t->hostname);
    cJSON_AddStringToObject(o, "hwloc_version", t->hwloc_version);
    cJSON_AddNumberToObject(o, "packages", t->npackages);
    cJSON_AddNumberToObject(o, "numa_nodes", t->nnuma);
    cJSON_AddNumberToObject(o, "cores", t->ncores);
    cJSON_AddNumberToObject(o, "pus", t->npus);
    cJSON_AddNumberToObject(o, "host_bridges", t->host_bridges);
    cJSON_AddNumberToObject(o, "pcie_switches", t->pcie_switches);
    if (t->nvlink_source[0])
        cJSON_AddStringToObject(o, "nvlink_source", t->nvlink_source);
    int n = t->ngpus + t->nnics;
    cJSON *devs = cJSON_AddArrayToObject(o, "devices");
    for (int i = 0; i < n; i++)
        cJSON_AddItemToArray(devs, device_json(t, i));
    /* The nvidia-smi matrix, row by row, GPUs then NICs. */
    cJSON *m = cJSON_AddArrayToObject(o, "matrix");
    for (int a = 0; a < n; a++) {
        cJSON *row = cJSON_CreateArray();
        for (int b = 0; b < n; b++) {
            char code[16];
            dp_topo_pair_code(t, a, b, code, sizeof code);
            cJSON_AddItemToArray(row, cJSON_CreateString(code));
        }
        cJSON_AddItemToArray(m, row);
    }
    /* GPU pairs: link type, NVLink count, NVLink GB/s per direction. */
    cJSON *pairs = cJSON_AddArrayToObject(o, "gpu_pairs");
    for (int a = 0; a < t->ngpus; a++)
        for (int b = a + 1; b < t->ngpus; b++) {
            const struct dp_topo_pair *p = dp_topo_pair_at(t, a, b);
            cJSON *e = cJSON_CreateObject();
            cJSON_AddNumberToObject(e, "a", a);
            cJSON_AddNumberToObject(e, "b", b);
            cJSON_AddStringToObject(e, "type", p->nvlinks ? "nvlink" : dp_topo_path_name(p->pcie));
            cJSON_AddStringToObject(e, "pcie", dp_topo_path_name(p->pcie));
            cJSON_AddNumberToObject(e, "nvlinks", p->nvlinks);
            if (p->nvlinks)
                cJSON_AddNumberToObject(e, "nvlink_gbps", p->nvlink_gbps);
            cJSON_AddItemToArray(pairs, e);
        }
    if (t->nnotes) {
        cJSON *notes = cJSON_AddArrayToObject(o, "notes");
        for (int i = 0; i < t->nnotes; i++)
            cJSON_AddItemToArray(notes, cJSON_CreateString(t->notes[i]));
    }
    return o;
}
