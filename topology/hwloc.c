/*
 * hwloc side of discovery: packages, NUMA nodes, cores, the PCI tree, GPUs
 * and NICs with their locality, the PCIe path class of every device pair, and
 * the NVLinkBandwidth distances matrix when the topology carries one (XML
 * exported by an hwloc with its NVML backend). Works on the running machine
 * or on an hwloc 2.x XML export, which xml.c first has hwloc import in a child
 * process: this file loads only hwloc's own export of it.
 *
 * It does not talk to NVML (nvml.c does) or choose bandwidths (links.c).
 * hwloc's XML error messages only appear with HWLOC_XML_VERBOSE set, so the
 * errors here are our own, one line each.
 */
#include "internal.h"

#include <errno.h>
#include <hwloc.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/*
 * hwloc 3.0 turns osdev.type into a bitmask (osdev.types); Debian 12 ships
 * 2.9.0. Only these predicates touch the field.
 */
#if HWLOC_API_VERSION >= 0x00030000
#define OSDEV_IS_NET(o)  (((o)->attr->osdev.types & HWLOC_OBJ_OSDEV_NETWORK) != 0)
#define OSDEV_IS_OFED(o) (((o)->attr->osdev.types & HWLOC_OBJ_OSDEV_OPENFABRICS) != 0)
#define OSDEV_IS_GPU(o)                                                                            \
    (((o)->attr->osdev.types & (HWLOC_OBJ_OSDEV_GPU | HWLOC_OBJ_OSDEV_COPROC)) != 0)
#else
#define OSDEV_IS_NET(o)  ((o)->attr->osdev.type == HWLOC_OBJ_OSDEV_NETWORK)
#define OSDEV_IS_OFED(o) ((o)->attr->osdev.type == HWLOC_OBJ_OSDEV_OPENFABRICS)
#define OSDEV_IS_GPU(o)                                                                            \
    ((o)->attr->osdev.type == HWLOC_OBJ_OSDEV_GPU ||                                               \
     (o)->attr->osdev.type == HWLOC_OBJ_OSDEV_COPROC)
#endif

/* Devices found so far, with the hwloc PCI object of each (GPUs first, then NICs). */
struct scan {
    hwloc_topology_t topo;
    struct dp_topo *t;
    hwloc_obj_t *gpu_obj, *nic_obj;
    int *gpu_rank; /* how good each GPU's name source is (see name_rank) */
    int gpu_cap, nic_cap;
};

static bool starts_with(const char *s, const char *p)
{
    return strncmp(s, p, strlen(p)) == 0;
}

static const char *info(hwloc_obj_t o, const char *name)
{
    const char *v = o ? hwloc_obj_get_info_by_name(o, name) : NULL;
    return v ? v : "";
}

/*
 * A PCI device that is a GPU by its class alone: a compute part of a GPU
 * vendor. From NVIDIA or AMD, class 0x0302 (3D controller: NVIDIA's datacenter
 * boards), any other 0x03xx but VGA (0x0380, display controller: AMD Instinct
 * before MI300) and 0x12xx (processing accelerator: MI300). A VGA controller
 * (0x0300) counts only from NVIDIA, every one of whose VGA parts is a CUDA GPU
 * (GeForce and RTX workstation boards). AMD's VGA parts include the BMC
 * display chips of many servers (ATI ES1000, 1002:515e): such a device is a
 * GPU only with a compute OS device (rsmi, OpenCL), see scan_osdev. Other
 * vendors' display devices (ASPEED, Matrox BMCs, Intel iGPUs) never are.
 */
static bool is_gpu_class(unsigned class_id, unsigned vendor)
{
    unsigned base = class_id >> 8;
    if (vendor == VENDOR_NVIDIA)
        return base == 0x03 || base == 0x12;
    if (vendor == VENDOR_AMD)
        return (base == 0x03 && class_id != 0x0300) || base == 0x12;
    return false;
}

/* OS-device names that mean "a compute GPU", whatever type hwloc gives them. */
static bool is_compute_gpu_osdev(const char *name)
{
    return starts_with(name, "nvml") || starts_with(name, "cuda") || starts_with(name, "rsmi") ||
           starts_with(name, "ze");
}
/*
 * OpenCL devices are GPUs only when the PCI vendor is NVIDIA or AMD (a CPU or
 * FPGA can be an OpenCL device too). Linux DRM devices (card0, renderD128)
 * say only that a display driver is loaded, which BMC display chips have too:
 * they are recorded for a GPU found otherwise but make none.
 */
static bool is_opencl_osdev(const char *name)
{
    return starts_with(name, "opencl");
}
static bool is_drm_osdev(const char *name)
{
    return starts_with(name, "card") || starts_with(name, "renderD");
}

/* Preference for the GPU's display name: nvml > cuda > rsmi > others > PCI name. */
static int name_rank(const char *osdev)
{
    if (starts_with(osdev, "nvml"))
        return 5;
    if (starts_with(osdev, "cuda"))
        return 4;
    if (starts_with(osdev, "rsmi"))
        return 3;
    return 2;
}

static hwloc_obj_t pci_ancestor(hwloc_obj_t o)
{
    for (; o; o = o->parent)
        if (o->type == HWLOC_OBJ_PCI_DEVICE)
            return o;
    return NULL;
}

static void set_locality(struct scan *s, hwloc_obj_t pci, int *numa, int *package, char *cpus,
                         size_t cap)
{
    hwloc_obj_t anc = hwloc_get_non_io_ancestor_obj(s->topo, pci);
    *numa = *package = -1;
    cpus[0] = '\0';
    if (!anc)
        return;
    if (anc->cpuset)
        hwloc_bitmap_list_snprintf(cpus, cap, anc->cpuset);
    /* The NUMA node: the only one whose nodeset the ancestor covers. */
    int found = 0, os = -1;
    hwloc_obj_t n = NULL;
    while ((n = hwloc_get_next_obj_by_type(s->topo, HWLOC_OBJ_NUMANODE, n)))
        if (anc->nodeset && hwloc_bitmap_isincluded(n->nodeset, anc->nodeset)) {
            found++;
            os = (int)n->os_index;
        }
    if (found == 1)
        *numa = os;
    hwloc_obj_t p = anc->type == HWLOC_OBJ_PACKAGE
                        ? anc
                        : hwloc_get_ancestor_obj_by_type(s->topo, HWLOC_OBJ_PACKAGE, anc);
    if (p)
        *package = (int)p->os_index;
    else if (hwloc_get_nbobjs_by_type(s->topo, HWLOC_OBJ_PACKAGE) == 1)
        *package = (int)hwloc_get_obj_by_type(s->topo, HWLOC_OBJ_PACKAGE, 0)->os_index;
}

static int add_gpu(struct scan *s, hwloc_obj_t pci)
{
    if (s->t->ngpus == s->gpu_cap) {
        int cap = s->gpu_cap ? s->gpu_cap * 2 : 8;
        hwloc_obj_t *o = realloc(s->gpu_obj, (size_t)cap * sizeof *o);
        if (!o)
            return DP_ENOMEM;
        s->gpu_obj = o;
        int *r = realloc(s->gpu_rank, (size_t)cap * sizeof *r);
        if (!r)
            return DP_ENOMEM;
        s->gpu_rank = r;
        s->gpu_cap = cap;
    }
    struct dp_topo_gpu *g = dp__topo_add_gpu(s->t);
    if (!g)
        return DP_ENOMEM;
    int i = s->t->ngpus - 1;
    s->gpu_obj[i] = pci;
    s->gpu_rank[i] = 0;
    struct hwloc_pcidev_attr_s *a = &pci->attr->pcidev;
    g->pci_vendor = a->vendor_id;
    g->pci_device = a->device_id;
    snprintf(g->vendor, sizeof g->vendor, "%s",
             a->vendor_id == VENDOR_NVIDIA ? "nvidia"
             : a->vendor_id == VENDOR_AMD  ? "amd"
                                           : "other");
    dp__busid(g->busid, sizeof g->busid, a->domain, a->bus, a->dev, a->func);
    g->pcie_gbps = a->linkspeed;
    const char *pname = info(pci, "PCIDevice");
    if (!pname[0] && dp__gpu_pci_name(a->vendor_id, a->device_id))
        pname = dp__gpu_pci_name(a->vendor_id, a->device_id);
    if (pname[0])
        snprintf(g->name, sizeof g->name, "%s", pname);
    else
        snprintf(g->name, sizeof g->name, "PCI %04x:%04x", a->vendor_id, a->device_id);
    set_locality(s, pci, &g->numa, &g->package, g->cpus, sizeof g->cpus);
    return 0;
}

static int add_nic(struct scan *s, hwloc_obj_t pci)
{
    if (s->t->nnics == s->nic_cap) {
        int cap = s->nic_cap ? s->nic_cap * 2 : 8;
        hwloc_obj_t *o = realloc(s->nic_obj, (size_t)cap * sizeof *o);
        if (!o)
            return DP_ENOMEM;
        s->nic_obj = o;
        s->nic_cap = cap;
    }
    struct dp_topo_nic *n = dp__topo_add_nic(s->t);
    if (!n)
        return DP_ENOMEM;
    s->nic_obj[s->t->nnics - 1] = pci;
    struct hwloc_pcidev_attr_s *a = &pci->attr->pcidev;
    n->pci_vendor = a->vendor_id;
    n->pci_device = a->device_id;
    n->pci_class = a->class_id;
    /* 0x0207: InfiniBand controller; 0x0c06: InfiniBand on older HCAs. */
    n->infiniband = a->class_id == 0x0207 || a->class_id == 0x0c06;
    dp__busid(n->busid, sizeof n->busid, a->domain, a->bus, a->dev, a->func);
    snprintf(n->model, sizeof n->model, "%s", info(pci, "PCIDevice"));
    set_locality(s, pci, &n->numa, &n->package, n->cpus, sizeof n->cpus);
    return 0;
}

static int find_obj(hwloc_obj_t *objs, int n, hwloc_obj_t o)
{
    for (int i = 0; i < n; i++)
        if (objs[i] == o)
            return i;
    return -1;
}

static void append_word(char *buf, size_t cap, const char *w)
{
    size_t len = strlen(buf);
    snprintf(buf + len, cap - len, "%s%s", len ? " " : "", w);
}

/* Attach an OS device to its GPU or NIC, creating the device when its PCI class did not. */
static int scan_osdev(struct scan *s, hwloc_obj_t os)
{
    hwloc_obj_t pci = pci_ancestor(os);
    const char *name = os->name ? os->name : "";
    if (!pci)
        return 0; /* CPU OpenCL devices, block devices of virtual disks... */
    unsigned vendor = pci->attr->pcidev.vendor_id;
    const char *sub = os->subtype ? os->subtype : "";
    /* The same NVIDIA GPU is a GPU or a CoProc OS device depending on the hwloc
     * version and backend, so decide by name, subtype and infos; the type counts
     * only together with an NVIDIA/AMD PCI vendor. */
    bool compute = is_compute_gpu_osdev(name) || strcmp(sub, "CUDA") == 0 ||
                   strcmp(sub, "NVML") == 0 || strcmp(sub, "RSMI") == 0 ||
                   strcmp(sub, "LevelZero") == 0;
    bool gpu_vendor = vendor == VENDOR_NVIDIA || vendor == VENDOR_AMD;
    bool opencl =
        is_opencl_osdev(name) || strcmp(sub, "OpenCL") == 0 || info(os, "GPUModel")[0] != '\0';
    int known = find_obj(s->gpu_obj, s->t->ngpus, pci);
    /* A DRM device, or any GPU-typed OS device, of a device already a GPU. */
    bool of_gpu = known >= 0 && (is_drm_osdev(name) || OSDEV_IS_GPU(os));
    if (compute || (opencl && gpu_vendor) || of_gpu) {
        int i = known;
        if (i < 0) {
            int rc = add_gpu(s, pci);
            if (rc)
                return rc;
            i = s->t->ngpus - 1;
        }
        struct dp_topo_gpu *g = &s->t->gpus[i];
        if (!starts_with(name, "renderD"))
            append_word(g->osdevs, sizeof g->osdevs, name);
        const char *model = info(os, "GPUModel");
        int rank = name_rank(name);
        if (model[0] && rank > s->gpu_rank[i]) {
            snprintf(g->name, sizeof g->name, "%s", model);
            s->gpu_rank[i] = rank;
        }
        /* hwloc's CUDA backend writes CUDAGlobalMemorySize in KiB. */
        const char *mem = info(os, "CUDAGlobalMemorySize");
        if (mem[0] && g->mem_bytes == 0)
            g->mem_bytes = strtoll(mem, NULL, 10) * 1024;
        return 0;
    }
    if (OSDEV_IS_OFED(os) || OSDEV_IS_NET(os)) {
        int i = find_obj(s->nic_obj, s->t->nnics, pci);
        if (i < 0) {
            int rc = add_nic(s, pci);
            if (rc)
                return rc;
            i = s->t->nnics - 1;
        }
        struct dp_topo_nic *n = &s->t->nics[i];
        if (OSDEV_IS_OFED(os)) {
            n->rdma = true;
            snprintf(n->name, sizeof n->name, "%s", name);
        } else {
            if (!n->netdev[0])
                snprintf(n->netdev, sizeof n->netdev, "%s", name);
            if (starts_with(name, "ib"))
                n->infiniband = true;
        }
    }
    return 0;
}

static hwloc_obj_t common_ancestor(hwloc_obj_t a, hwloc_obj_t b)
{
    for (hwloc_obj_t x = a; x; x = x->parent)
        for (hwloc_obj_t y = b; y; y = y->parent)
            if (x == y)
                return x;
    return NULL;
}

static int bridges_between(hwloc_obj_t dev, hwloc_obj_t anc)
{
    int n = 0;
    for (hwloc_obj_t x = dev->parent; x && x != anc; x = x->parent)
        n += x->type == HWLOC_OBJ_BRIDGE;
    return n;
}

/*
 * The nvidia-smi class of the PCIe path between two PCI devices. A PCIe
 * switch is an upstream bridge with one downstream bridge per port, so two
 * devices on one switch cross one bridge each below their common ancestor:
 * PIX; more bridges: PXB; the common ancestor a host bridge: PHB; no common
 * I/O ancestor: NODE within one NUMA node, else SYS.
 */
static enum dp_topo_path classify(hwloc_obj_t a, hwloc_obj_t b, int numa_a, int numa_b)
{
    if (a == b)
        return DP_PATH_SELF;
    if (!a || !b)
        return DP_PATH_SYS;
    hwloc_obj_t c = common_ancestor(a, b);
    if (!c)
        return DP_PATH_SYS;
    if (c->type == HWLOC_OBJ_BRIDGE) {
        if (c->attr->bridge.upstream_type == HWLOC_OBJ_BRIDGE_HOST)
            return DP_PATH_PHB;
        return bridges_between(a, c) <= 1 && bridges_between(b, c) <= 1 ? DP_PATH_PIX : DP_PATH_PXB;
    }
    if (c->type == HWLOC_OBJ_PCI_DEVICE)
        return DP_PATH_PIX;
    return numa_a >= 0 && numa_a == numa_b ? DP_PATH_NODE : DP_PATH_SYS;
}

static int dev_numa(const struct dp_topo *t, int i)
{
    return i < t->ngpus ? t->gpus[i].numa : t->nics[i - t->ngpus].numa;
}

/* Sort GPUs and NICs by PCI address (NVML's default order is by bus id too). */
static void sort_devices(struct scan *s)
{
    struct dp_topo *t = s->t;
    for (int i = 1; i < t->ngpus; i++)
        for (int j = i; j > 0 && strcmp(t->gpus[j - 1].busid, t->gpus[j].busid) > 0; j--) {
            struct dp_topo_gpu g = t->gpus[j];
            t->gpus[j] = t->gpus[j - 1];
            t->gpus[j - 1] = g;
            hwloc_obj_t o = s->gpu_obj[j];
            s->gpu_obj[j] = s->gpu_obj[j - 1];
            s->gpu_obj[j - 1] = o;
        }
    for (int i = 1; i < t->nnics; i++)
        for (int j = i; j > 0 && strcmp(t->nics[j - 1].busid, t->nics[j].busid) > 0; j--) {
            struct dp_topo_nic n = t->nics[j];
            t->nics[j] = t->nics[j - 1];
            t->nics[j - 1] = n;
            hwloc_obj_t o = s->nic_obj[j];
            s->nic_obj[j] = s->nic_obj[j - 1];
            s->nic_obj[j - 1] = o;
        }
}

/*
 * An NVSwitch chip's PCI endpoint: what hwloc's NVML backend marks with the
 * subtype "NVSwitch" (it found the device at the far end of an NVLink), or an
 * NVIDIA bridge-class (0x06xx) device. The subtype alone suffices: an endpoint
 * whose config space could not be read shows class and ids 0000, and on a
 * DGX-2 one of the 12 switches can look so (tests/topology/xml/dgx-2.xml).
 */
static bool is_nvswitch(hwloc_obj_t o)
{
    if (!o || o->type != HWLOC_OBJ_PCI_DEVICE)
        return false;
    if (o->subtype && strcmp(o->subtype, "NVSwitch") == 0)
        return true;
    return o->attr->pcidev.vendor_id == VENDOR_NVIDIA && (o->attr->pcidev.class_id >> 8) == 0x06;
}

/* hwloc version "2.9.0" -> 20900; 0 if unknown. */
static int version_code(const char *v)
{
    int a = 0, b = 0, c = 0;
    if (sscanf(v, "%d.%d.%d", &a, &b, &c) < 2)
        return 0;
    return a * 10000 + b * 100 + c;
}

/*
 * NVLinkBandwidth (hwloc's NVML backend): unidirectional MB/s between GPUs
 * (nvml OS devices) and NVSwitch PCI devices or POWER packages; 0 = no link,
 * links summed. Link counts come from the per-link rate of the GPU's
 * generation. hwloc 2.5-2.11 count an A100 (NVLink 3) link as 50000 MB/s and
 * skip H100 links (fixed in 2.12.0), so A100 figures from those versions
 * are halved.
 */
static int read_nvlink_distances(struct scan *s)
{
    struct dp_topo *t = s->t;
    unsigned nr = 4;
    struct hwloc_distances_s *d[4];
    if (t->ngpus == 0 || hwloc_distances_get_by_name(s->topo, "NVLinkBandwidth", &nr, d, 0) != 0 ||
        nr == 0)
        return 0;
    if (nr > 4)
        nr = 4;
    int ng = t->ngpus;
    int *direct = calloc((size_t)ng * (size_t)ng, sizeof *direct);
    int *gpu_of = NULL;
    int rc = 0;
    if (!direct) {
        rc = DP_ENOMEM;
        goto out;
    }
    int ver = version_code(t->hwloc_version);
    bool old_table = ver >= 20500 && ver < 21200;
    bool halved = false, any = false;
    for (unsigned k = 0; k < nr; k++) {
        struct hwloc_distances_s *m = d[k];
        free(gpu_of);
        gpu_of = malloc(m->nbobjs * sizeof *gpu_of);
        if (!gpu_of) {
            rc = DP_ENOMEM;
            goto out;
        }
        int switches = 0;
        for (unsigned i = 0; i < m->nbobjs; i++) {
            hwloc_obj_t o = m->objs[i];
            hwloc_obj_t pci = o && o->type == HWLOC_OBJ_OS_DEVICE ? pci_ancestor(o) : o;
            gpu_of[i] = pci ? find_obj(s->gpu_obj, ng, pci) : -1;
            if (gpu_of[i] < 0 && is_nvswitch(pci)) {
                gpu_of[i] = -2;
                switches++;
            }
        }
        if (switches > t->nvswitches)
            t->nvswitches = switches;
        for (unsigned i = 0; i < m->nbobjs; i++) {
            int gi = gpu_of[i];
            if (gi < 0)
                continue;
            struct dp_topo_gpu *g = &t->gpus[gi];
            double per = dp__nvlink_gpu_gbps(g->name, g->pci_device);
            double per_reported = per;
            if (old_table && dp__gpu_is_a100(g->name, g->pci_device)) {
                per_reported = 50.0;
                halved = true;
            }
            for (unsigned j = 0; j < m->nbobjs; j++) {
                if (i == j)
                    continue;
                double mbps = (double)m->values[i * m->nbobjs + j];
                if (mbps <= 0)
                    continue;
                int links = (int)lround(mbps / (per_reported * 1000.0));
                if (links < 1)
                    links = 1;
                any = true;
                if (gpu_of[j] >= 0)
                    direct[gi * ng + gpu_of[j]] += links;
                else if (gpu_of[j] == -2)
                    g->nvswitch_links += links;
            }
            g->nvlink_gbps = per;
        }
    }
    if (any) {
        dp__topo_set_nvlinks(t, direct);
        snprintf(t->nvlink_source, sizeof t->nvlink_source, "hwloc NVLinkBandwidth");
        if (halved)
            dp__topo_note(t,
                          "NVLinkBandwidth was written by hwloc %s, which counts an NVLink 3 "
                          "(A100) link as 50 GB/s; corrected to 25 GB/s per link per direction",
                          t->hwloc_version);
    }
out:
    free(gpu_of);
    free(direct);
    for (unsigned k = 0; k < nr; k++)
        hwloc_distances_release(s->topo, d[k]);
    return rc;
}

static int read_topology(hwloc_topology_t topo, struct dp_topo *t, struct dp_err *err)
{
    struct scan s = {.topo = topo, .t = t};
    int rc = 0;
    hwloc_obj_t root = hwloc_get_root_obj(topo);
    snprintf(t->hostname, sizeof t->hostname, "%s", info(root, "HostName"));
    const char *hv = info(root, "hwlocVersion");
    if (hv[0])
        snprintf(t->hwloc_version, sizeof t->hwloc_version, "%s", hv);
    t->npackages = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_PACKAGE);
    t->ncores = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_CORE);
    t->npus = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_PU);
    t->mem_bytes = (int64_t)root->total_memory;
    hwloc_obj_t pk = hwloc_get_obj_by_type(topo, HWLOC_OBJ_PACKAGE, 0);
    snprintf(t->cpu_model, sizeof t->cpu_model, "%s", info(pk, "CPUModel"));
    snprintf(t->cpu_vendor, sizeof t->cpu_vendor, "%s", info(pk, "CPUVendor"));
    t->cpu_family = atoi(info(pk, "CPUFamilyNumber"));
    t->cpu_model_id = atoi(info(pk, "CPUModelNumber"));

    int nnuma = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_NUMANODE);
    if (nnuma > 0) {
        t->numa = calloc((size_t)nnuma, sizeof *t->numa);
        if (!t->numa)
            return dp_err_set(err, DP_ENOMEM, "out of memory");
        for (int i = 0; i < nnuma; i++) {
            hwloc_obj_t n = hwloc_get_obj_by_type(topo, HWLOC_OBJ_NUMANODE, (unsigned)i);
            struct dp_topo_numa *d = &t->numa[t->nnuma++];
            d->os_index = (int)n->os_index;
            d->mem_bytes = (int64_t)n->attr->numanode.local_memory;
            hwloc_obj_t p = hwloc_get_ancestor_obj_by_type(topo, HWLOC_OBJ_PACKAGE, n);
            d->package = p ? (int)p->os_index : -1;
            if (n->cpuset)
                hwloc_bitmap_list_snprintf(d->cpus, sizeof d->cpus, n->cpuset);
        }
    }

    for (hwloc_obj_t o = NULL; (o = hwloc_get_next_pcidev(topo, o));) {
        unsigned cls = o->attr->pcidev.class_id;
        if (is_gpu_class(cls, o->attr->pcidev.vendor_id))
            rc = add_gpu(&s, o);
        else if ((cls >> 8) == 0x02)
            rc = add_nic(&s, o);
        if (rc)
            goto oom;
    }
    for (hwloc_obj_t o = NULL; (o = hwloc_get_next_osdev(topo, o));)
        if ((rc = scan_osdev(&s, o)))
            goto oom;
    for (int i = 0; i < t->nnics; i++) {
        struct dp_topo_nic *n = &t->nics[i];
        if (!n->name[0])
            snprintf(n->name, sizeof n->name, "%s", n->netdev[0] ? n->netdev : n->busid);
    }
    sort_devices(&s);

    if ((rc = dp__topo_alloc_pairs(t)))
        goto oom;
    int nd = t->ngpus + t->nnics;
    for (int a = 0; a < nd; a++)
        for (int b = 0; b < nd; b++) {
            hwloc_obj_t oa = a < t->ngpus ? s.gpu_obj[a] : s.nic_obj[a - t->ngpus];
            hwloc_obj_t ob = b < t->ngpus ? s.gpu_obj[b] : s.nic_obj[b - t->ngpus];
            t->pairs[a * nd + b].pcie = classify(oa, ob, dev_numa(t, a), dev_numa(t, b));
        }
    for (int i = 0; i < t->nnics; i++)
        for (int g = 0; g < t->ngpus; g++) {
            enum dp_topo_path p = dp_topo_pair_at(t, t->ngpus + i, g)->pcie;
            if (p == DP_PATH_PIX || p == DP_PATH_PXB)
                t->nics[i].near_gpu = true;
        }
    /* The PCI tree's shape: host bridges, and switches. Below a host bridge
     * (depth 0) come root ports (1), then a switch's upstream port (2) over its
     * downstream ports (3), whose own upstream ports are at 4, and so on: an
     * upstream port is a bridge at an even depth >= 2 with bridges below. */
    for (hwloc_obj_t o = NULL; (o = hwloc_get_next_bridge(topo, o));) {
        if (o->attr->bridge.upstream_type == HWLOC_OBJ_BRIDGE_HOST) {
            t->host_bridges++;
            continue;
        }
        bool upstream = o->attr->bridge.depth >= 2 && o->attr->bridge.depth % 2 == 0;
        bool has_ports = false;
        for (hwloc_obj_t c = o->io_first_child; c; c = c->next_sibling)
            has_ports |= c->type == HWLOC_OBJ_BRIDGE;
        t->pcie_switches += upstream && has_ports;
    }
    /* NVSwitch PCI endpoints (their NVLink view comes from distances or NVML). */
    int nvs = 0;
    for (hwloc_obj_t o = NULL; (o = hwloc_get_next_pcidev(topo, o));)
        nvs += is_nvswitch(o);
    t->nvswitches = nvs;
    if ((rc = read_nvlink_distances(&s)))
        goto oom;
    free(s.gpu_obj);
    free(s.gpu_rank);
    free(s.nic_obj);
    return 0;
oom:
    free(s.gpu_obj);
    free(s.gpu_rank);
    free(s.nic_obj);
    return dp_err_set(err, DP_ENOMEM, "out of memory while reading the topology");
}

/* ------------------------------------------------------------------ XML */

int dp_topo_load_xml(const char *file, struct dp_topo *t, struct dp_err *err)
{
    memset(t, 0, sizeof *t);
    char *buf = NULL;
    size_t len = 0;
    int rc = dp_read_file(file, &buf, &len, 256u << 20, err);
    if (rc)
        return rc;
    /* hwloc reads the file in a child (xml.c); here it reads only its own export of it. */
    char *canon = NULL;
    size_t canon_len = 0;
    rc = dp__topo_xml_precheck(file, buf, err);
    if (!rc)
        rc = dp__topo_xml_isolate(file, buf, len + 1, &canon, &canon_len, err);
    free(buf);
    if (rc)
        return rc;
    buf = canon;
    hwloc_topology_t topo;
    if (hwloc_topology_init(&topo) != 0) {
        free(buf);
        return dp_err_set(err, DP_ENOMEM, "%s: hwloc_topology_init failed", file);
    }
    /* Keep every I/O object the file has: bridges give the PCIe paths. */
    hwloc_topology_set_io_types_filter(topo, HWLOC_TYPE_FILTER_KEEP_ALL);
    if (canon_len > (size_t)INT_MAX ||
        hwloc_topology_set_xmlbuffer(topo, buf, (int)canon_len) != 0 ||
        hwloc_topology_load(topo) != 0) {
        rc = dp_err_set(err, DP_EINVAL,
                        "%s: hwloc cannot read this XML topology (malformed or truncated)", file);
        goto out;
    }
    snprintf(t->source, sizeof t->source, "%s", file);
    rc = read_topology(topo, t, err);
    if (!rc && !t->hwloc_version[0])
        snprintf(t->hwloc_version, sizeof t->hwloc_version, "unknown");
out:
    hwloc_topology_destroy(topo);
    free(buf);
    if (rc)
        dp_topo_release(t);
    return rc;
}

/* ------------------------------------------------------------------ live */

/* Port rate and link layer from sysfs (Linux): "400 Gb/sec (4X NDR)", "InfiniBand". */
static void nic_sysfs(struct dp_topo_nic *n)
{
    char path[256], line[128];
    FILE *f;
    if (n->rdma) {
        snprintf(path, sizeof path, "/sys/class/infiniband/%s/ports/1/rate", n->name);
        if ((f = fopen(path, "r"))) {
            if (fgets(line, sizeof line, f))
                n->rate_gbit = atof(line);
            fclose(f);
        }
        snprintf(path, sizeof path, "/sys/class/infiniband/%s/ports/1/link_layer", n->name);
        if ((f = fopen(path, "r"))) {
            if (fgets(line, sizeof line, f))
                n->infiniband = strncmp(line, "InfiniBand", 10) == 0;
            fclose(f);
        }
    }
    if (n->rate_gbit == 0 && n->netdev[0]) {
        snprintf(path, sizeof path, "/sys/class/net/%s/speed", n->netdev);
        if ((f = fopen(path, "r"))) {
            if (fgets(line, sizeof line, f) && atof(line) > 0)
                n->rate_gbit = atof(line) / 1000.0; /* Mb/s */
            fclose(f);
        }
    }
}

int dp_topo_discover(struct dp_topo *t, struct dp_err *err)
{
    memset(t, 0, sizeof *t);
    hwloc_topology_t topo;
    if (hwloc_topology_init(&topo) != 0)
        return dp_err_set(err, DP_ENOMEM, "hwloc_topology_init failed");
    /* I/O discovery is off by default: GPUs, NICs and the bridges above them. */
    hwloc_topology_set_io_types_filter(topo, HWLOC_TYPE_FILTER_KEEP_IMPORTANT);
    if (hwloc_topology_load(topo) != 0) {
        int e = errno;
        hwloc_topology_destroy(topo);
        return dp_err_set(err, DP_EIO, "hwloc could not read this machine's topology: %s",
                          strerror(e));
    }
    const char *xmlenv = getenv("HWLOC_XMLFILE");
    if (xmlenv && xmlenv[0])
        snprintf(t->source, sizeof t->source, "this machine (as given by HWLOC_XMLFILE=%s)",
                 xmlenv);
    else
        snprintf(t->source, sizeof t->source, "this machine");
    int rc = read_topology(topo, t, err);
    hwloc_topology_destroy(topo);
    if (rc) {
        dp_topo_release(t);
        return rc;
    }
    if (!t->hwloc_version[0]) {
        /* hwloc records its release in the root's hwlocVersion info; else the API level. */
        unsigned v = hwloc_get_api_version();
        snprintf(t->hwloc_version, sizeof t->hwloc_version, "API %u.%u", v >> 16, (v >> 8) & 0xff);
    }
    if (!(xmlenv && xmlenv[0]))
        for (int i = 0; i < t->nnics; i++)
            nic_sysfs(&t->nics[i]);
    bool loaded = false;
    if ((rc = dp_topo_add_nvml(t, NULL, &loaded, err))) {
        dp_topo_release(t);
        return rc;
    }
    return 0;
}
