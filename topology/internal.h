/*
 * topology internals shared by hwloc.c (discovery and XML), nvml.c (the
 * dlopen'ed NVML queries), links.c (link classes, profiles, cluster) and
 * topo.c (common helpers). Not for use outside topology/.
 */
#ifndef DPLAN_TOPOLOGY_INTERNAL_H
#define DPLAN_TOPOLOGY_INTERNAL_H

#include "topology.h"

/* Append a one-line note (dropped silently past DP_TOPO_MAX_NOTES). */
void dp__topo_note(struct dp_topo *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/*
 * NVLink bandwidth per link per direction, GB/s, from the version number that
 * nvmlDeviceGetNvLinkVersion returns (nvmlNvlinkVersion_t): 1 (NVLink 1.0) 20;
 * 2..6 (2.0, 2.2, 3.0, 3.1, 4.0) 25; 7 (5.0) 50. 0 for versions not in the table.
 * The table of open-mpi/hwloc hwloc/topology-nvml.c (master, since 2.12.0).
 */
double dp__nvlink_version_gbps(int version);
/*
 * The same from the GPU's generation, for XML input that carries no version:
 * P100 20; V100, A100, H100/H200 25; B100/B200/GB200 50; for a generation not
 * known, 25 (DP_NVLINK_DEFAULT_GBPS, the common NVLink 2-4 rate).
 */
#define DP_NVLINK_DEFAULT_GBPS 25.0
double dp__nvlink_gpu_gbps(const char *name, unsigned pci_device);
/* True for A100-class GPUs, whose NVLink 3 links hwloc 2.5-2.11 counts as 50 GB/s. */
bool dp__gpu_is_a100(const char *name, unsigned pci_device);

/* PCI vendor ids. */
#define VENDOR_NVIDIA 0x10deu
#define VENDOR_AMD    0x1002u

/* The PCI ID database's name of a GPU board ("GV100GL [Tesla V100 SXM3 32GB]"), or NULL. */
const char *dp__gpu_pci_name(unsigned vendor, unsigned device);

/*
 * xml.c. The precheck: a <topology> element, of XML version <= 2, closed
 * (buf NUL-terminated). The isolation: hwloc imports buf[0, len) (len counts
 * the final NUL) in a child process and exports it again; *out (malloc'ed,
 * NUL-terminated, *out_len with the NUL) is that export. A child that
 * crashes, runs past 30 s ($DPLAN_XML_LOAD_TIMEOUT_S) or fails gives a
 * one-line error naming `file`.
 */
int dp__topo_xml_precheck(const char *file, const char *buf, struct dp_err *err);
int dp__topo_xml_isolate(const char *file, const char *buf, size_t len, char **out, size_t *out_len,
                         struct dp_err *err);

/* Index of the GPU at a PCI address, or -1. */
int dp__topo_gpu_by_bus(const struct dp_topo *t, unsigned domain, unsigned bus, unsigned dev);

/*
 * Fill the NVLink fields of every GPU pair from `direct` (ngpus x ngpus
 * direct link counts, may be NULL; need not be symmetric: a pair gets the
 * larger of direct[i][j] and direct[j][i], as each end may report the bundle)
 * and each GPU's nvswitch_links and nvlink_gbps: two GPUs on the NVSwitch
 * fabric get min of their switch links.
 */
void dp__topo_set_nvlinks(struct dp_topo *t, const int *direct);

/* Grow t->gpus / t->nics by one zeroed entry (numa/package -1); NULL on ENOMEM. */
struct dp_topo_gpu *dp__topo_add_gpu(struct dp_topo *t);
struct dp_topo_nic *dp__topo_add_nic(struct dp_topo *t);
/* (Re)allocate t->pairs for the current device counts, every pair SYS, diagonal SELF. */
int dp__topo_alloc_pairs(struct dp_topo *t);

/* "0000:1b:00.0" from parts. */
void dp__busid(char *out, size_t cap, unsigned domain, unsigned bus, unsigned dev, unsigned func);
/* Case-insensitive substring test. */
bool dp__contains(const char *hay, const char *needle);

#endif
