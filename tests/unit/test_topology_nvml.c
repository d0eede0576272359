/*
 * topology: the NVML path, through tests/topology/fake_nvml.c loaded with
 * dlopen in place of libnvidia-ml.so.1 ($DPLAN_FAKE_NVML is its path). The
 * PCI tree comes from tests/topology/xml/dgx-h100-no-nvml.xml (no NVLink in
 * it); NVML adds names, memory and the NVLinks, matched by PCI bus id.
 */
#include "check.h"
#include "topology/topology.h"

#include <dlfcn.h>
#include <stdlib.h>

static const char *src_dir(void)
{
    const char *d = getenv("DPLAN_SOURCE_DIR");
    return d ? d : ".";
}

static int load_with_nvml(const char *mode, struct dp_topo *t, bool *loaded)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/tests/topology/xml/dgx-h100-no-nvml.xml", src_dir());
    struct dp_err err = {0};
    if (dp_topo_load_xml(path, t, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        return -1;
    }
    setenv("DPLAN_FAKE_NVML_TOPO", mode, 1);
    int rc = dp_topo_add_nvml(t, getenv("DPLAN_FAKE_NVML"), loaded, &err);
    if (rc)
        fprintf(stderr, "%s\n", err.msg);
    return rc;
}

static void test_nvswitch(void)
{
    struct dp_topo t;
    bool loaded = false;
    if (load_with_nvml("nvswitch", &t, &loaded)) {
        check_failures++;
        return;
    }
    CHECK(loaded);
    CHECK_EQ(t.ngpus, 8);
    CHECK_STR(t.nvlink_source, "NVML");
    CHECK_EQ(t.nvswitches, 4);
    for (int i = 0; i < 8; i++) {
        CHECK_STR(t.gpus[i].name, "NVIDIA H100 80GB HBM3");
        CHECK_EQ(t.gpus[i].mem_bytes, 81559LL << 20);
        CHECK_EQ(t.gpus[i].nvswitch_links, 18);
        CHECK_EQ(t.gpus[i].nvlink_version, 6);
        CHECK_NEAR(t.gpus[i].nvlink_gbps, 25.0, 1e-12); /* NVLink 4: 25 GB/s per link */
        CHECK(t.gpus[i].from_nvml);
    }
    char code[16];
    dp_topo_pair_code(&t, 3, 6, code, sizeof code);
    CHECK_STR(code, "NV18");
    CHECK_NEAR(dp_topo_pair_at(&t, 3, 6)->nvlink_gbps, 450.0, 1e-12);
    /* hwloc's locality is kept. */
    CHECK_EQ(t.gpus[5].numa, 1);
    CHECK_EQ(dp_topo_pair_at(&t, 0, 4)->pcie, DP_PATH_SYS);

    struct dp_cluster cl;
    struct dp_topo_choice ch;
    struct dp_topo_cluster_opts o = {.nodes = 2, .network = "roce-400"};
    struct dp_err err = {0};
    CHECK_EQ(dp_topo_cluster(&t, &o, &cl, &ch, &err), 0);
    CHECK_STR(ch.system, "dgx-h100");
    CHECK_STR(cl.inter.name, "roce-400");
    CHECK_EQ(cl.nodes, 2);
    CHECK_STR(cl.group_link[0].name, "nvlink4");
    CHECK_STR(cl.intra.name, "nvlink4");
    dp_topo_release(&t);
}

static void test_pairs(void)
{
    struct dp_topo t;
    bool loaded = false;
    if (load_with_nvml("pairs", &t, &loaded)) {
        check_failures++;
        return;
    }
    CHECK(loaded);
    char code[16];
    dp_topo_pair_code(&t, 0, 1, code, sizeof code);
    CHECK_STR(code, "NV12");
    dp_topo_pair_code(&t, 0, 2, code, sizeof code);
    CHECK_STR(code, "NODE");
    CHECK_EQ(t.gpus[0].nvswitch_links, 0);
    struct dp_cluster cl;
    struct dp_topo_choice ch;
    struct dp_topo_cluster_opts o = {.nodes = 1};
    struct dp_err err = {0};
    CHECK_EQ(dp_topo_cluster(&t, &o, &cl, &ch, &err), 0);
    CHECK_STR(ch.gpu_profile, "h100-pcie-80gb");
    CHECK_EQ(cl.group_link[0].kind, DP_LINK_NVLINK);
    CHECK_NEAR(cl.group_link[0].bw_gbps, 300.0, 1e-12);
    CHECK_NEAR(cl.group_link[0].efficiency, 0.80, 1e-12); /* no NVLink profile for PCIe H100 */
    CHECK_STR(cl.group_link[1].name, "pcie-gen5 NODE");
    CHECK_STR(cl.group_link[2].name, "pcie-gen5 SYS");
    dp_topo_release(&t);
}

static void test_absent_or_failing(void)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/tests/topology/xml/dgx-h100-no-nvml.xml", src_dir());
    struct dp_topo t;
    struct dp_err err = {0};
    bool loaded = true;
    CHECK_EQ(dp_topo_load_xml(path, &t, &err), 0);
    CHECK_EQ(dp_topo_add_nvml(&t, "/nonexistent/libnvidia-ml.so.1", &loaded, &err), 0);
    CHECK(!loaded);
    CHECK(t.nnotes >= 1);
    CHECK_CONTAINS(t.notes[t.nnotes - 1], "NVML not used");
    CHECK_STR(t.gpus[0].name, "GH100 [H100 SXM5 80GB]");
    dp_topo_release(&t);

    if (load_with_nvml("fail", &t, &loaded)) {
        check_failures++;
        return;
    }
    CHECK(!loaded);
    CHECK_CONTAINS(t.notes[t.nnotes - 1], "Driver Not Loaded");
    CHECK_STR(t.nvlink_source, "");
    dp_topo_release(&t);
}

/*
 * Live discovery of the machine running the test, with the fake NVML: its 8 GPUs
 * are at PCI addresses this machine is not expected to have, so they are added
 * with unknown locality (and a note), and keep their NVSwitch links.
 */
static void test_live(void)
{
    /*
     * hwloc's PCI plugin uses libpciaccess, which caches device names in a static
     * tree it never frees. hwloc unloads the plugin (and so libpciaccess) in
     * hwloc_topology_destroy; LeakSanitizer then no longer sees the static pointer
     * and reports the cache as leaked from "<unknown module>", a frame no
     * suppression can name. Holding the library open (never closed) keeps it
     * mapped and the cache reachable. Not our allocation; nothing else is hidden.
     */
    void *keep_pciaccess = dlopen("libpciaccess.so.0", RTLD_NOW | RTLD_GLOBAL);
    (void)keep_pciaccess;
    setenv("DPLAN_FAKE_NVML_TOPO", "nvswitch", 1);
    setenv("DPLAN_NVML_LIB", getenv("DPLAN_FAKE_NVML"), 1);
    unsetenv("HWLOC_XMLFILE");
    struct dp_topo t;
    struct dp_err err = {0};
    CHECK_EQ(dp_topo_discover(&t, &err), 0);
    if (err.code) {
        fprintf(stderr, "%s\n", err.msg);
        return;
    }
    CHECK(t.npus >= 1);
    CHECK(t.nnuma >= 1);
    CHECK_STR(t.source, "this machine");
    int fake = 0, first = -1;
    for (int i = 0; i < t.ngpus; i++)
        if (strcmp(t.gpus[i].name, "NVIDIA H100 80GB HBM3") == 0) {
            fake++;
            if (first < 0)
                first = i;
        }
    CHECK_EQ(fake, 8);
    if (first >= 0 && first + 7 < t.ngpus) {
        char code[16];
        dp_topo_pair_code(&t, first, first + 7, code, sizeof code);
        CHECK_STR(code, "NV18");
    }
    unsetenv("DPLAN_NVML_LIB");
    dp_topo_release(&t);
}

int main(void)
{
    if (!getenv("DPLAN_FAKE_NVML")) {
        fprintf(stderr, "test_topology_nvml: DPLAN_FAKE_NVML (the fake library) is not set\n");
        return 1;
    }
    test_nvswitch();
    test_pairs();
    test_absent_or_failing();
    test_live();
    return check_done("test_topology_nvml");
}
