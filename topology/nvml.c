/*
 * NVML, loaded at run time: GPU names, memory and NVLinks (state, version and
 * remote end of each link), matched to hwloc's GPUs by PCI bus id.
 *
 * There is no build dependency: the few prototypes and enums are declared
 * here from NVML's nvml.h (API version 13, as vendored by NVIDIA/go-nvml
 * gen/nvml/nvml.h) and the library is dlopen'ed, "libnvidia-ml.so.1" unless
 * $DPLAN_NVML_LIB names another (the tests load a fake one). Without it,
 * nothing fails: a note says NVML was not used. This file does not print.
 */
#include "internal.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- from nvml.h: only what is called ---- */
typedef int nvmlReturn_t; /* enum nvmlReturn_enum */
enum {
    NVML_SUCCESS = 0,
    NVML_ERROR_INVALID_ARGUMENT = 2,
    NVML_ERROR_NOT_SUPPORTED = 3,
};
typedef struct nvmlDevice_st *nvmlDevice_t;
typedef struct nvmlPciInfo_st { /* nvmlPciInfo_t, as filled by the _v3 / _v2 calls */
    char busIdLegacy[16];
    unsigned int domain;
    unsigned int bus;
    unsigned int device;
    unsigned int pciDeviceId; /* device << 16 | vendor */
    unsigned int pciSubSystemId;
    char busId[32];
} nvmlPciInfo_t;
typedef struct nvmlMemory_st { /* nvmlMemory_t (v1) */
    unsigned long long total;
    unsigned long long free;
    unsigned long long used;
} nvmlMemory_t;
enum { NVML_FEATURE_ENABLED = 1 }; /* nvmlEnableState_t */
enum {
    NVML_NVLINK_DEVICE_TYPE_GPU = 0,
    NVML_NVLINK_DEVICE_TYPE_IBMNPU = 1,
    NVML_NVLINK_DEVICE_TYPE_SWITCH = 2
}; /* nvmlIntNvLinkDeviceType_t */
#define NVML_DEVICE_NAME_V2_BUFFER_SIZE 96
#define DP_NVLINK_MAX_LINKS                                                                        \
    64 /* nvml.h has 36 (NVML_NVLINK_MAX_LINKS); we stop at the first                              \
          INVALID_ARGUMENT or NOT_SUPPORTED, as hwloc does */

struct nvml {
    void *lib;
    nvmlReturn_t (*init)(void);
    nvmlReturn_t (*shutdown)(void);
    const char *(*error_string)(nvmlReturn_t);
    nvmlReturn_t (*count)(unsigned int *);
    nvmlReturn_t (*handle)(unsigned int, nvmlDevice_t *);
    nvmlReturn_t (*name)(nvmlDevice_t, char *, unsigned int);
    nvmlReturn_t (*pci)(nvmlDevice_t, nvmlPciInfo_t *);
    nvmlReturn_t (*memory)(nvmlDevice_t, nvmlMemory_t *);
    nvmlReturn_t (*link_state)(nvmlDevice_t, unsigned int, int *);
    nvmlReturn_t (*link_version)(nvmlDevice_t, unsigned int, unsigned int *);
    nvmlReturn_t (*link_remote_pci)(nvmlDevice_t, unsigned int, nvmlPciInfo_t *);
    nvmlReturn_t (*link_remote_type)(nvmlDevice_t, unsigned int, int *); /* optional */
};

/* dlsym into a function pointer without a data-to-function pointer cast. */
static bool sym(void *lib, const char *name, void *fnp)
{
    void *p = dlsym(lib, name);
    memcpy(fnp, &p, sizeof p);
    return p != NULL;
}

static const char *nvml_err(const struct nvml *n, nvmlReturn_t r)
{
    static char buf[32];
    if (n->error_string)
        return n->error_string(r);
    snprintf(buf, sizeof buf, "error %d", r);
    return buf;
}

/* Insert `add` GPU entries before the NICs, keeping every known pair. */
static int grow_gpus(struct dp_topo *t, int add)
{
    int og = t->ngpus, on = t->nnics, od = og + on;
    struct dp_topo_pair *old = t->pairs;
    t->pairs = NULL;
    for (int i = 0; i < add; i++)
        if (!dp__topo_add_gpu(t)) {
            free(old);
            return DP_ENOMEM;
        }
    if (dp__topo_alloc_pairs(t)) {
        free(old);
        return DP_ENOMEM;
    }
    int nd = t->ngpus + on;
    for (int a = 0; a < od; a++)
        for (int b = 0; b < od; b++) {
            int na = a < og ? a : a + add, nb = b < og ? b : b + add;
            t->pairs[na * nd + nb] = old[a * od + b];
        }
    free(old);
    return 0;
}

static int query(struct nvml *n, struct dp_topo *t, struct dp_err *err)
{
    unsigned int count = 0;
    nvmlReturn_t r = n->count(&count);
    if (r != NVML_SUCCESS) {
        dp__topo_note(t, "NVML: nvmlDeviceGetCount failed: %s", nvml_err(n, r));
        return 0;
    }
    if (count == 0)
        return 0;
    if (count > 1024)
        count = 1024;
    nvmlDevice_t *dev = calloc(count, sizeof *dev);
    nvmlPciInfo_t *pci = calloc(count, sizeof *pci);
    int *idx = calloc(count, sizeof *idx);
    int *direct = NULL;
    int rc = 0;
    if (!dev || !pci || !idx) {
        rc = dp_err_set(err, DP_ENOMEM, "out of memory");
        goto out;
    }
    int missing = 0;
    for (unsigned int i = 0; i < count; i++) {
        idx[i] = -1;
        if (n->handle(i, &dev[i]) != NVML_SUCCESS || n->pci(dev[i], &pci[i]) != NVML_SUCCESS) {
            dev[i] = NULL;
            continue;
        }
        idx[i] = dp__topo_gpu_by_bus(t, pci[i].domain, pci[i].bus, pci[i].device);
        if (idx[i] < 0)
            missing++;
    }
    if (missing) {
        /* GPUs NVML sees but hwloc's PCI tree does not: no locality known. */
        int first = t->ngpus;
        if (grow_gpus(t, missing)) {
            rc = dp_err_set(err, DP_ENOMEM, "out of memory");
            goto out;
        }
        for (unsigned int i = 0; i < count; i++)
            if (dev[i] && idx[i] < 0) {
                struct dp_topo_gpu *g = &t->gpus[first];
                dp__busid(g->busid, sizeof g->busid, pci[i].domain, pci[i].bus, pci[i].device, 0);
                g->pci_vendor = pci[i].pciDeviceId & 0xffff;
                g->pci_device = pci[i].pciDeviceId >> 16;
                snprintf(g->vendor, sizeof g->vendor, "nvidia");
                idx[i] = first++;
            }
        dp__topo_note(t,
                      "NVML reports %d GPU%s that hwloc did not find on the PCI bus: "
                      "their locality is unknown (classed SYS)",
                      missing, missing == 1 ? "" : "s");
    }
    int ng = t->ngpus;
    direct = calloc((size_t)ng * (size_t)ng, sizeof *direct);
    if (!direct) {
        rc = dp_err_set(err, DP_ENOMEM, "out of memory");
        goto out;
    }
    unsigned int switch_bus[64];
    int nswitch = 0, unknown_version = 0;
    bool any = false;
    for (unsigned int i = 0; i < count; i++) {
        if (!dev[i])
            continue;
        struct dp_topo_gpu *g = &t->gpus[idx[i]];
        char name[NVML_DEVICE_NAME_V2_BUFFER_SIZE];
        if (n->name(dev[i], name, sizeof name) == NVML_SUCCESS)
            snprintf(g->name, sizeof g->name, "%s", name);
        nvmlMemory_t mem;
        if (n->memory(dev[i], &mem) == NVML_SUCCESS)
            g->mem_bytes = (int64_t)mem.total;
        g->from_nvml = true;
        g->nvswitch_links = 0;
        for (unsigned int l = 0; l < DP_NVLINK_MAX_LINKS; l++) {
            int state = 0;
            r = n->link_state(dev[i], l, &state);
            if (r == NVML_ERROR_INVALID_ARGUMENT || r == NVML_ERROR_NOT_SUPPORTED)
                break;
            if (r != NVML_SUCCESS || state != NVML_FEATURE_ENABLED)
                continue;
            unsigned int version = 0;
            double per = 0;
            if (n->link_version(dev[i], l, &version) == NVML_SUCCESS) {
                per = dp__nvlink_version_gbps((int)version);
                if ((int)version > g->nvlink_version)
                    g->nvlink_version = (int)version;
                if (per == 0 && version > 7) {
                    per = 50.0; /* newer than the table: at least NVLink 5's rate */
                    unknown_version = (int)version;
                }
            }
            if (per == 0)
                per = dp__nvlink_gpu_gbps(g->name, g->pci_device);
            nvmlPciInfo_t rp;
            if (n->link_remote_pci(dev[i], l, &rp) != NVML_SUCCESS)
                continue;
            int type = -1;
            if (n->link_remote_type && n->link_remote_type(dev[i], l, &type) != NVML_SUCCESS)
                type = -1;
            int peer = dp__topo_gpu_by_bus(t, rp.domain, rp.bus, rp.device);
            if (type < 0) /* older NVML: tell a GPU from an NVSwitch by address and vendor */
                type = peer >= 0 ? NVML_NVLINK_DEVICE_TYPE_GPU
                       : (rp.pciDeviceId & 0xffff) == VENDOR_NVIDIA
                           ? NVML_NVLINK_DEVICE_TYPE_SWITCH
                           : NVML_NVLINK_DEVICE_TYPE_IBMNPU;
            if (type == NVML_NVLINK_DEVICE_TYPE_GPU && peer >= 0 && peer != idx[i]) {
                direct[idx[i] * ng + peer]++;
            } else if (type == NVML_NVLINK_DEVICE_TYPE_SWITCH) {
                g->nvswitch_links++;
                unsigned int key = rp.domain << 16 | rp.bus << 8 | rp.device;
                bool seen = false;
                for (int k = 0; k < nswitch; k++)
                    seen |= switch_bus[k] == key;
                if (!seen && nswitch < 64)
                    switch_bus[nswitch++] = key;
            } else {
                continue; /* an IBM NPU (POWER CPU) link: not GPU-to-GPU */
            }
            g->nvlink_gbps = per;
            any = true;
        }
    }
    if (any) {
        dp__topo_set_nvlinks(t, direct);
        if (nswitch > 0)
            t->nvswitches = nswitch;
        snprintf(t->nvlink_source, sizeof t->nvlink_source, "NVML");
    }
    if (unknown_version)
        dp__topo_note(t,
                      "NVML reports NVLink version %d, newer than dplan's table: assumed "
                      "50 GB/s per link per direction",
                      unknown_version);
out:
    free(direct);
    free(idx);
    free(pci);
    free(dev);
    return rc;
}

int dp_topo_add_nvml(struct dp_topo *t, const char *lib, bool *loaded, struct dp_err *err)
{
    *loaded = false;
    if (!lib)
        lib = getenv("DPLAN_NVML_LIB");
    if (!lib || !lib[0])
        lib = "libnvidia-ml.so.1";
    struct nvml n = {0};
    n.lib = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
    if (!n.lib) {
        const char *why = dlerror();
        dp__topo_note(t, "NVML not used: %s", why ? why : lib);
        return 0;
    }
    if (!sym(n.lib, "nvmlInit_v2", &n.init) || !sym(n.lib, "nvmlShutdown", &n.shutdown) ||
        !sym(n.lib, "nvmlDeviceGetCount_v2", &n.count) ||
        !sym(n.lib, "nvmlDeviceGetHandleByIndex_v2", &n.handle) ||
        !sym(n.lib, "nvmlDeviceGetName", &n.name) ||
        !sym(n.lib, "nvmlDeviceGetPciInfo_v3", &n.pci) ||
        !sym(n.lib, "nvmlDeviceGetMemoryInfo", &n.memory) ||
        !sym(n.lib, "nvmlDeviceGetNvLinkState", &n.link_state) ||
        !sym(n.lib, "nvmlDeviceGetNvLinkVersion", &n.link_version) ||
        !sym(n.lib, "nvmlDeviceGetNvLinkRemotePciInfo_v2", &n.link_remote_pci)) {
        dp__topo_note(t, "NVML not used: %s lacks a function dplan needs (driver too old?)", lib);
        dlclose(n.lib);
        return 0;
    }
    sym(n.lib, "nvmlErrorString", &n.error_string);
    sym(n.lib, "nvmlDeviceGetNvLinkRemoteDeviceType", &n.link_remote_type);
    nvmlReturn_t r = n.init();
    if (r != NVML_SUCCESS) {
        dp__topo_note(t, "NVML not used: nvmlInit failed: %s", nvml_err(&n, r));
        dlclose(n.lib);
        return 0;
    }
    int rc = query(&n, t, err);
    n.shutdown();
    dlclose(n.lib);
    *loaded = rc == 0;
    return rc;
}
