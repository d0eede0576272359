/*
 * topology: what one node looks like, read from the running machine (hwloc for
 * packages, NUMA nodes, PCI and NICs; NVML, loaded at run time with dlopen, for
 * GPU names, memory and NVLinks) or from an `lstopo --of xml` export of
 * another machine, and the dp_cluster the planner uses, derived from it.
 *
 * It does not print or exit (cli/cmd_topo.c does), and it never links NVML:
 * a machine without libnvidia-ml.so.1 is described from hwloc alone. It uses
 * only core/. How link classes become bandwidths is explained, with sources,
 * in topology/README.md.
 */
#ifndef DPLAN_TOPOLOGY_H
#define DPLAN_TOPOLOGY_H

#include "core/core.h"

#include <stdbool.h>
#include <stdint.h>

struct cJSON;

/*
 * How two devices of a node reach each other, nearest first. The PCIe classes
 * are those of `nvidia-smi topo -m` (and of NVML's nvmlGpuTopologyLevel_t).
 */
enum dp_topo_path {
    DP_PATH_SELF = 0, /* X: the device itself */
    DP_PATH_PIX = 1,  /* at most one PCIe bridge: the same PCIe switch */
    DP_PATH_PXB = 2,  /* several PCIe bridges, below one host bridge */
    DP_PATH_PHB = 3,  /* through a PCIe host bridge (the CPU's root complex) */
    DP_PATH_NODE = 4, /* between host bridges of one NUMA node */
    DP_PATH_SYS = 5,  /* across NUMA nodes / sockets (UPI, Infinity Fabric) */
};
/* "X", "PIX", "PXB", "PHB", "NODE", "SYS". */
const char *dp_topo_path_name(enum dp_topo_path p);

/* One pair of devices (GPUs first, then NICs). */
struct dp_topo_pair {
    enum dp_topo_path pcie; /* the PCIe/CPU path, used when there is no NVLink */
    int nvlinks;            /* NVLinks joining the two GPUs, direct or via NVSwitch; 0 = none */
    double nvlink_gbps;     /* their bandwidth per direction, GB/s; 0 = none */
};

struct dp_topo_gpu {
    char name[96];   /* NVML/hwloc model ("NVIDIA H100 80GB HBM3"), else the PCI name */
    char vendor[16]; /* "nvidia", "amd" */
    char busid[16];  /* PCI "dddd:bb:dd.f", lowercase hex; "" if unknown */
    char osdevs[64]; /* hwloc OS devices seen for it, "nvml0 cuda0" */
    unsigned pci_vendor, pci_device;
    int64_t mem_bytes;  /* 0 = unknown (then the GPU profile's) */
    double pcie_gbps;   /* PCIe link as hwloc reports it, GB/s; 0 = unknown */
    int numa;           /* OS index of the local NUMA node, -1 = unknown or several */
    int package;        /* OS index of the local package, -1 = unknown */
    char cpus[128];     /* CPU affinity, as a list "0-55,112-167" */
    int nvswitch_links; /* NVLinks to NVSwitches */
    int nvlink_version; /* NVML's version number of its links, 0 = unknown */
    double nvlink_gbps; /* per link per direction, GB/s; 0 = no NVLink */
    bool from_nvml;     /* name/memory/links came from NVML */
};

struct dp_topo_nic {
    char name[32];   /* RDMA device ("mlx5_0") if any, else the interface ("eth0") */
    char netdev[32]; /* the network interface, "" if none */
    char busid[16];
    char model[96]; /* PCI device name when known ("MT2910 Family [ConnectX-7]") */
    unsigned pci_vendor, pci_device, pci_class;
    bool rdma;         /* has an OpenFabrics (verbs) device */
    bool infiniband;   /* InfiniBand link layer (else Ethernet) */
    double rate_gbit;  /* port rate, Gb/s; 0 = unknown */
    int numa, package; /* as for GPUs */
    char cpus[128];
    bool near_gpu; /* on a PCIe switch with a GPU (PIX or PXB to one): a compute NIC */
};

struct dp_topo_numa {
    int os_index;
    int package; /* -1 if unknown */
    int64_t mem_bytes;
    char cpus[128];
};

#define DP_TOPO_MAX_NOTES 8

struct dp_topo {
    char source[512];       /* "this machine" or the XML file */
    char hostname[64];      /* "" if unknown */
    char hwloc_version[32]; /* the exporting hwloc (XML) or the one linked */
    char cpu_model[96];
    char cpu_vendor[32]; /* "GenuineIntel", "AuthenticAMD", "" */
    int cpu_family;      /* x86 family and model numbers (hwloc CPUFamilyNumber,
                            CPUModelNumber); 0 = unknown */
    int cpu_model_id;
    int npackages, ncores, npus;
    int host_bridges;  /* PCI host bridges (root complexes) with devices below */
    int pcie_switches; /* PCIe switches: upstream ports below a bridge, with ports below */
    int64_t mem_bytes;
    int nnuma;
    struct dp_topo_numa *numa;
    int ngpus;
    struct dp_topo_gpu *gpus;
    int nnics;
    struct dp_topo_nic *nics;
    /* (ngpus + nnics)^2, row-major; device i < ngpus is GPU i, else NIC i - ngpus. */
    struct dp_topo_pair *pairs;
    int nvswitches;         /* NVSwitch chips seen (hwloc PCI or NVML remote ends) */
    char nvlink_source[48]; /* "NVML", "hwloc NVLinkBandwidth", or "" */
    int nnotes;
    char notes[DP_TOPO_MAX_NOTES][256]; /* things the user should know, one line each */
};

/*
 * Discover this machine: hwloc with I/O discovery, then NVML when
 * libnvidia-ml.so.1 (or $DPLAN_NVML_LIB) loads. Fills *t; on failure *t is
 * empty. A machine without GPUs is not an error (t->ngpus == 0).
 */
int dp_topo_discover(struct dp_topo *t, struct dp_err *err);
/*
 * Load an hwloc 2.x XML export (`lstopo --of xml`). GPU OS devices and the
 * NVLinkBandwidth distances matrix are used when present. Errors, one line:
 * unreadable file, not an hwloc topology or truncated, XML version > 2.
 */
int dp_topo_load_xml(const char *file, struct dp_topo *t, struct dp_err *err);
/*
 * Add NVML's view (names, memory, NVLinks) to a topology, matching GPUs by
 * PCI bus id; GPUs NVML sees that hwloc did not are appended. `lib` NULL
 * means $DPLAN_NVML_LIB or libnvidia-ml.so.1. Returns 0 with *loaded false
 * when the library is absent or has no GPUs (a note says why).
 */
int dp_topo_add_nvml(struct dp_topo *t, const char *lib, bool *loaded, struct dp_err *err);
void dp_topo_release(struct dp_topo *t);

static inline const struct dp_topo_pair *dp_topo_pair_at(const struct dp_topo *t, int a, int b)
{
    return &t->pairs[a * (t->ngpus + t->nnics) + b];
}
/* The nvidia-smi code of a pair: "X", "NV18", "PIX", ... */
void dp_topo_pair_code(const struct dp_topo *t, int a, int b, char *out, size_t cap);
/* Compute NICs: those near a GPU, else the RDMA ones, else all. */
int dp_topo_compute_nics(const struct dp_topo *t);

/* ------------------------------------------------------------ node -> cluster */

/*
 * The GPU profile (profiles/gpu) for a detected GPU, from its name, PCI id and
 * memory, e.g. "NVIDIA H100 80GB HBM3" -> "h100-sxm5-80gb". Returns 0, or
 * DP_ENOENT when no shipped profile is known to match.
 */
int dp_topo_gpu_profile(const struct dp_topo_gpu *g, char *out, size_t cap);

/*
 * The link an aligned group of GPUs [first, first + n) of the node uses for
 * its collectives: NVSwitch -> the per-GPU NVLink rate; a direct NVLink mesh
 * that has a ring through the group -> the smallest per-GPU sum of its links;
 * otherwise the slowest pair, whose PCIe class (PIX ... SYS) sets bandwidth
 * and efficiency from the GPU's host-link profile. `gpu` is the GPU profile.
 */
int dp_topo_group_link(const struct dp_topo *t, const struct dp_gpu *gpu, int first, int n,
                       struct dp_link *out, struct dp_err *err);

/*
 * group_link[k] for groups of 2^(k+1) consecutive GPUs (the slowest aligned
 * group of that size), ngroup_links = floor(log2(ngpus)) (at most 8), and
 * `intra` = the link of the whole node.
 */
int dp_topo_node_links(const struct dp_topo *t, const struct dp_gpu *gpu, struct dp_link *group,
                       int *ngroup, struct dp_link *intra, struct dp_err *err);

struct dp_topo_cluster_opts {
    const char *gpu_profile; /* NULL: from the detected GPU name */
    int nodes;               /* >= 1 */
    const char *network;     /* NULL: from the NICs, else the node type's */
    int nics_per_node;       /* 0: the compute NICs found; else 1..DP_MAX_NICS_PER_GPU x GPUs */
};

/* What dp_topo_cluster decided, and why, for the user. */
struct dp_topo_choice {
    char gpu_profile[64];
    char gpu_why[160];
    char system[64]; /* matched profiles/system entry, "" if none */
    char system_why[256];
    char network[64];
    char network_why[160];
};

/*
 * The cluster for `nodes` nodes like this one: GPU profile (matched or
 * given), gpus_per_node, nics_per_node (given, else the compute NICs), intra
 * and group_link[] from the topology, network from the option, the NICs or
 * the node type. Fails with DP_EINVAL when there are no GPUs or no GPU
 * profile is known, DP_EUSAGE when several nodes would have no NIC, or the
 * NICs given or found exceed DP_MAX_NICS_PER_GPU per GPU.
 * *choice (may be NULL) says what was picked.
 */
int dp_topo_cluster(const struct dp_topo *t, const struct dp_topo_cluster_opts *o,
                    struct dp_cluster *out, struct dp_topo_choice *choice, struct dp_err *err);

/* The node as JSON (devices, per-pair matrix, notes), for the cluster file's "topology". */
struct cJSON *dp_topo_to_json(const struct dp_topo *t);

#endif
