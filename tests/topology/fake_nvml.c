/*
 * A fake libnvidia-ml.so.1 for the tests: the few NVML functions dplan calls,
 * describing a fixed 8-GPU node whose PCI addresses are those of
 * tests/topology/xml/dgx-h100-no-nvml.xml. dplan loads it with dlopen through
 * $DPLAN_NVML_LIB, so the real NVML code path runs.
 *
 * $DPLAN_FAKE_NVML_TOPO picks the NVLink layout:
 *   nvswitch (default)  8x "NVIDIA H100 80GB HBM3", 18 NVLink 4 links each (NVML
 *                       version 6), 5/4/4/5 to four NVSwitch chips at 0000:53-56:00.0
 *   pairs               8x "NVIDIA H100 PCIe", GPU 2k and 2k+1 joined by 12 direct links
 *   none                8x "NVIDIA H100 PCIe", no NVLink
 *   fail                nvmlInit_v2 fails (NVML_ERROR_DRIVER_NOT_LOADED)
 * The driver version is $DPLAN_FAKE_NVML_DRIVER or "550.54.15", the CUDA version
 * the driver supports 12040 (12.4), for `dplan check`'s versions item.
 * Return codes and structures follow nvml.h (API 13).
 */
#include <stdlib.h>
#include <string.h>

typedef int nvmlReturn_t;
typedef struct nvmlDevice_st *nvmlDevice_t;
typedef struct {
    char busIdLegacy[16];
    unsigned int domain, bus, device, pciDeviceId, pciSubSystemId;
    char busId[32];
} nvmlPciInfo_t;
typedef struct {
    unsigned long long total, free, used;
} nvmlMemory_t;

enum {
    SUCCESS = 0,
    UNINITIALIZED = 1,
    INVALID_ARGUMENT = 2,
    NOT_SUPPORTED = 3,
    DRIVER_NOT_LOADED = 9
};

#define NGPU 8
static const unsigned int gpu_bus[NGPU] = {0x13, 0x14, 0x33, 0x34, 0x93, 0x94, 0xb3, 0xb4};
static const unsigned int switch_bus[4] = {0x53, 0x54, 0x55, 0x56};
static const int per_switch[4] = {5, 4, 4, 5};
static int initialized;

/* Handles are 1-based indices disguised as pointers. */
static nvmlDevice_t handle_of(int i)
{
    return (nvmlDevice_t)(size_t)(i + 1);
}
static int index_of(nvmlDevice_t d)
{
    size_t i = (size_t)d;
    return i >= 1 && i <= NGPU ? (int)i - 1 : -1;
}

static const char *mode(void)
{
    const char *m = getenv("DPLAN_FAKE_NVML_TOPO");
    return m && m[0] ? m : "nvswitch";
}

static int links_per_gpu(void)
{
    return strcmp(mode(), "nvswitch") == 0 ? 18 : strcmp(mode(), "pairs") == 0 ? 12 : 0;
}

nvmlReturn_t nvmlInit_v2(void);
nvmlReturn_t nvmlShutdown(void);
const char *nvmlErrorString(nvmlReturn_t r);
nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *n);
nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int i, nvmlDevice_t *d);
nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t d, char *name, unsigned int len);
nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t d, nvmlPciInfo_t *p);
nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t d, nvmlMemory_t *m);
nvmlReturn_t nvmlDeviceGetNvLinkState(nvmlDevice_t d, unsigned int link, int *active);
nvmlReturn_t nvmlDeviceGetNvLinkVersion(nvmlDevice_t d, unsigned int link, unsigned int *v);
nvmlReturn_t nvmlDeviceGetNvLinkRemotePciInfo_v2(nvmlDevice_t d, unsigned int link,
                                                 nvmlPciInfo_t *p);
nvmlReturn_t nvmlDeviceGetNvLinkRemoteDeviceType(nvmlDevice_t d, unsigned int link, int *type);

nvmlReturn_t nvmlInit_v2(void)
{
    if (strcmp(mode(), "fail") == 0)
        return DRIVER_NOT_LOADED;
    initialized = 1;
    return SUCCESS;
}

nvmlReturn_t nvmlShutdown(void)
{
    initialized = 0;
    return SUCCESS;
}

const char *nvmlErrorString(nvmlReturn_t r)
{
    return r == DRIVER_NOT_LOADED ? "Driver Not Loaded"
           : r == SUCCESS         ? "Success"
                                  : "Unknown Error";
}

nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *n)
{
    if (!initialized)
        return UNINITIALIZED;
    *n = NGPU;
    return SUCCESS;
}

nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int i, nvmlDevice_t *d)
{
    if (!initialized)
        return UNINITIALIZED;
    if (i >= NGPU)
        return INVALID_ARGUMENT;
    *d = handle_of((int)i);
    return SUCCESS;
}

nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t d, char *name, unsigned int len)
{
    if (index_of(d) < 0 || len < 32)
        return INVALID_ARGUMENT;
    strcpy(name, strcmp(mode(), "nvswitch") == 0 ? "NVIDIA H100 80GB HBM3" : "NVIDIA H100 PCIe");
    return SUCCESS;
}

static void fill_pci(nvmlPciInfo_t *p, unsigned int bus, unsigned int devid)
{
    static const char hex[] = "0123456789ABCDEF";
    memset(p, 0, sizeof *p);
    p->domain = 0;
    p->bus = bus;
    p->device = 0;
    p->pciDeviceId = devid << 16 | 0x10de;
    /* "%08X:%02X:%02X.0" */
    strcpy(p->busId, "00000000:00:00.0");
    p->busId[9] = hex[bus >> 4];
    p->busId[10] = hex[bus & 15];
    memcpy(p->busIdLegacy, p->busId + 4, 12);
}

nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t d, nvmlPciInfo_t *p)
{
    int i = index_of(d);
    if (i < 0)
        return INVALID_ARGUMENT;
    fill_pci(p, gpu_bus[i], strcmp(mode(), "nvswitch") == 0 ? 0x2330 : 0x2331);
    return SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t d, nvmlMemory_t *m)
{
    if (index_of(d) < 0)
        return INVALID_ARGUMENT;
    m->total = 81559ull << 20; /* nvidia-smi's 81559 MiB for an H100 80GB */
    m->free = m->total;
    m->used = 0;
    return SUCCESS;
}

nvmlReturn_t nvmlDeviceGetNvLinkState(nvmlDevice_t d, unsigned int link, int *active)
{
    if (index_of(d) < 0)
        return INVALID_ARGUMENT;
    if (links_per_gpu() == 0)
        return NOT_SUPPORTED;
    if (link >= (unsigned int)links_per_gpu())
        return INVALID_ARGUMENT;
    *active = 1; /* NVML_FEATURE_ENABLED */
    return SUCCESS;
}

nvmlReturn_t nvmlDeviceGetNvLinkVersion(nvmlDevice_t d, unsigned int link, unsigned int *v)
{
    if (index_of(d) < 0 || link >= (unsigned int)links_per_gpu())
        return INVALID_ARGUMENT;
    *v = 6; /* NVML_NVLINK_VERSION_4_0 */
    return SUCCESS;
}

/* The NVSwitch a link goes to: links 0-4 switch 0, 5-8 switch 1, 9-12 switch 2, 13-17 switch 3. */
static int switch_of(unsigned int link)
{
    unsigned int first = 0;
    for (int s = 0; s < 4; s++) {
        if (link < first + (unsigned int)per_switch[s])
            return s;
        first += (unsigned int)per_switch[s];
    }
    return -1;
}

nvmlReturn_t nvmlDeviceGetNvLinkRemotePciInfo_v2(nvmlDevice_t d, unsigned int link,
                                                 nvmlPciInfo_t *p)
{
    int i = index_of(d);
    if (i < 0 || link >= (unsigned int)links_per_gpu())
        return INVALID_ARGUMENT;
    if (strcmp(mode(), "pairs") == 0)
        fill_pci(p, gpu_bus[i ^ 1], 0x2331);
    else
        fill_pci(p, switch_bus[switch_of(link)], 0x22a3);
    return SUCCESS;
}

nvmlReturn_t nvmlDeviceGetNvLinkRemoteDeviceType(nvmlDevice_t d, unsigned int link, int *type)
{
    if (index_of(d) < 0 || link >= (unsigned int)links_per_gpu())
        return INVALID_ARGUMENT;
    *type = strcmp(mode(), "pairs") == 0 ? 0 /* GPU */ : 2 /* SWITCH */;
    return SUCCESS;
}

nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length);
nvmlReturn_t nvmlSystemGetCudaDriverVersion(int *v);
nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int *v);

nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length)
{
    if (!initialized)
        return UNINITIALIZED;
    const char *d = getenv("DPLAN_FAKE_NVML_DRIVER");
    if (!d || !d[0])
        d = "550.54.15";
    if (!version || strlen(d) + 1 > length)
        return INVALID_ARGUMENT;
    strcpy(version, d);
    return SUCCESS;
}

nvmlReturn_t nvmlSystemGetCudaDriverVersion(int *v)
{
    if (!v)
        return INVALID_ARGUMENT;
    *v = 12040;
    return SUCCESS;
}

nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int *v)
{
    return nvmlSystemGetCudaDriverVersion(v);
}
