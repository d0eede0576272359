/*
 * preflight: every item of `dplan check` passing and failing on faked
 * inputs (gathered versions, environment strings, free bytes, XML
 * topologies from tests/topology/xml, hand-built memory reports), with the
 * expected numbers worked out by hand in the comments.
 */
#include "check.h"
#include "preflight/preflight.h"

#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *src_dir(void)
{
    const char *d = getenv("DPLAN_SOURCE_DIR");
    return d ? d : ".";
}

/* The status of the last item added, after clearing the report. */
static struct dp_pf_report rep;
static const struct dp_pf_item *last(void)
{
    return &rep.item[rep.n - 1];
}

static void test_report(void)
{
    struct dp_pf_report r = {0};
    CHECK_EQ(dp_pf_verdict(&r), DP_PF_PASS);
    dp_pf_add(&r, "a", DP_PF_PASS, "x");
    dp_pf_add(&r, "b", DP_PF_WARN, "y %d", 2);
    CHECK_EQ(dp_pf_verdict(&r), DP_PF_WARN);
    dp_pf_add(&r, "c", DP_PF_FAIL, "z");
    CHECK_EQ(dp_pf_verdict(&r), DP_PF_FAIL);
    CHECK_STR(r.item[1].detail, "y 2");
    CHECK_STR(dp_pf_status_name(DP_PF_FAIL), "FAIL");
}

static void test_versions(void)
{
    struct dp_pf_versions v[3] = {{"n0", "550.54.15", 12040, 12040, ""},
                                  {"n1", "550.54.15", 12040, 12040, ""},
                                  {"n2", "550.54.15", 12040, 12040, ""}};
    rep.n = 0;
    dp_pf_check_versions(v, 3, &rep);
    CHECK_EQ(last()->status, DP_PF_PASS);
    /* 12040 = 12 x 1000 + 4 x 10: CUDA 12.4 */
    CHECK_CONTAINS(last()->detail, "driver 550.54.15, CUDA 12.4, runtime 12.4 on every rank");
    /* One node on another driver. */
    snprintf(v[2].driver, sizeof v[2].driver, "535.104.05");
    dp_pf_check_versions(v, 3, &rep);
    CHECK_EQ(last()->status, DP_PF_FAIL);
    CHECK_CONTAINS(last()->detail, "rank 2 (n2): driver 535.104.05");
    /* Same driver, another runtime. */
    snprintf(v[2].driver, sizeof v[2].driver, "550.54.15");
    v[1].cudart = 12010;
    dp_pf_check_versions(v, 3, &rep);
    CHECK_EQ(last()->status, DP_PF_FAIL);
    CHECK_CONTAINS(last()->detail, "rank 1 (n1)");
    CHECK_CONTAINS(last()->detail, "runtime 12.1");
    /* No driver anywhere: no GPU, skipped. */
    struct dp_pf_versions none[2] = {{"a", "", 0, 0, "libnvidia-ml.so.1 not found"},
                                     {"b", "", 0, 0, "libnvidia-ml.so.1 not found"}};
    dp_pf_check_versions(none, 2, &rep);
    CHECK_EQ(last()->status, DP_PF_WARN);
    CHECK_CONTAINS(last()->detail, "no GPU: skipped (libnvidia-ml.so.1 not found");
    /* A driver on some ranks only. */
    none[1] = v[0];
    dp_pf_check_versions(none, 2, &rep);
    CHECK_EQ(last()->status, DP_PF_FAIL);
}

static void test_busbw(void)
{
    /* 70% and 40% of 100 GB/s */
    CHECK_EQ(dp_pf_busbw_status(70.0, 100.0), DP_PF_PASS);
    CHECK_EQ(dp_pf_busbw_status(69.9, 100.0), DP_PF_WARN);
    CHECK_EQ(dp_pf_busbw_status(40.0, 100.0), DP_PF_WARN);
    CHECK_EQ(dp_pf_busbw_status(39.9, 100.0), DP_PF_FAIL);
    CHECK_EQ(dp_pf_busbw_status(5.0, 0.0), DP_PF_WARN);

    struct dp_cluster cl;
    struct dp_err err = {0};
    CHECK_EQ(dp_cluster_from_system("dgx-h100", 2, NULL, &cl, &err), 0);
    struct dp_layout l;
    dp_layout_default(&l);
    l.tp = 8;
    l.dp = 2;
    l.gbs = 16;
    char from[128];
    /* TP 8 inside a DGX H100: NVLink 4, 450 GB/s x 0.82 efficiency = 369 GB/s
     * (profiles/interconnect/nvlink4.json). */
    double want = dp_pf_busbw_expected(&cl, &l, DP_PLACE_TP, NULL, from, sizeof from);
    CHECK_NEAR(want, 450.0 * 0.82, 1e-9);
    CHECK_CONTAINS(from, "nvlink4");
    /* A calibration profile's all-reduce on nvlink4 overrides it. */
    static struct dp_calibration cal;
    memset(&cal, 0, sizeof cal);
    cal.ncoll = 1;
    cal.coll[0].coll = DP_NCCL_ALL_REDUCE;
    snprintf(cal.coll[0].link, sizeof cal.coll[0].link, "nvlink4");
    cal.coll[0].busbw_gbps = 361.7;
    want = dp_pf_busbw_expected(&cl, &l, DP_PLACE_TP, &cal, from, sizeof from);
    CHECK_NEAR(want, 361.7, 1e-12);
    CHECK_CONTAINS(from, "calibration");

    /* 8 ranks: busbw = algbw x 2 x 7 / 8; a measured 300 of 361.7 = 83% passes,
     * 100 = 28% fails. */
    struct dp_pf_busbw b = {DP_PLACE_TP, 8, {0}, {50, 200, 300}};
    rep.n = 0;
    dp_pf_check_busbw(&b, 361.7, from, &rep);
    CHECK_EQ(last()->status, DP_PF_PASS);
    CHECK_STR(last()->id, "busbw.tp");
    CHECK_CONTAINS(last()->detail, "busbw 300 GB/s at 64 MiB, 82.9% of 361.7");
    b.busbw_gbps[2] = 100;
    dp_pf_check_busbw(&b, 361.7, from, &rep);
    CHECK_EQ(last()->status, DP_PF_FAIL);
}

static void env_case_n(const char *const *env, int node_gpus, int plan_gpus, int per_node, int want,
                       const char *text)
{
    rep.n = 0;
    dp_pf_check_env(env, node_gpus, plan_gpus, per_node, &rep);
    CHECK_EQ(last()->status, want);
    CHECK_CONTAINS(last()->detail, text);
}

/* Plans of 8 GPUs per node (or fewer GPUs in all). */
static void env_case(const char *const *env, int node_gpus, int plan_gpus, int want,
                     const char *text)
{
    rep.n = 0;
    dp_pf_check_env(env, node_gpus, plan_gpus, plan_gpus < 8 ? plan_gpus : 8, &rep);
    CHECK_EQ(last()->status, want);
    CHECK_CONTAINS(last()->detail, text);
}

static void test_env(void)
{
    const char *torchrun[] = {
        "RANK=9", "WORLD_SIZE=16", "LOCAL_RANK=1", "LOCAL_WORLD_SIZE=8", "PATH=/bin", NULL};
    env_case(torchrun, 8, 16, DP_PF_PASS, "torchrun: RANK 9 of WORLD_SIZE 16");
    env_case(torchrun, 8, 32, DP_PF_FAIL, "WORLD_SIZE 16 but the plan has 32 GPUs");
    /* LOCAL_RANK 1 on a node with one visible GPU (0 only). */
    env_case(torchrun, 1, 16, DP_PF_FAIL, "LOCAL_RANK 1 but this node has 1 GPUs");
    const char *incomplete[] = {"RANK=0", "WORLD_SIZE=2", NULL};
    env_case(incomplete, 8, 2, DP_PF_FAIL, "LOCAL_RANK not set");
    const char *bad[] = {"RANK=zero", "WORLD_SIZE=2", "LOCAL_RANK=0", NULL};
    env_case(bad, 8, 2, DP_PF_FAIL, "RANK=\"zero\": expected an integer");
    const char *past[] = {"RANK=2", "WORLD_SIZE=2", "LOCAL_RANK=0", NULL};
    env_case(past, 8, 2, DP_PF_FAIL, "RANK 2 is not below WORLD_SIZE 2");
    /* OpenMPI launched by srun: both sets describe the same 4 ranks and must agree. */
    const char *srun_ok[] = {"OMPI_COMM_WORLD_RANK=3",
                             "OMPI_COMM_WORLD_SIZE=4",
                             "OMPI_COMM_WORLD_LOCAL_RANK=1",
                             "OMPI_COMM_WORLD_LOCAL_SIZE=2",
                             "SLURM_PROCID=3",
                             "SLURM_NTASKS=4",
                             "SLURM_LOCALID=1",
                             "SLURM_STEP_ID=0",
                             NULL};
    /* 2 ranks per node of a plan with 2 GPUs per node passes, with 4 per node fails. */
    env_case_n(srun_ok, 2, 4, 2, DP_PF_PASS, "OpenMPI: OMPI_COMM_WORLD_RANK 3");
    env_case_n(srun_ok, 2, 4, 4, DP_PF_FAIL,
               "OMPI_COMM_WORLD_LOCAL_SIZE 2 but the plan has 4 GPUs per node");
    const char *srun_bad[] = {"OMPI_COMM_WORLD_RANK=3",
                              "OMPI_COMM_WORLD_SIZE=4",
                              "OMPI_COMM_WORLD_LOCAL_RANK=1",
                              "SLURM_PROCID=2",
                              "SLURM_NTASKS=4",
                              "SLURM_LOCALID=1",
                              "SLURM_STEPID=0",
                              NULL};
    env_case(srun_bad, 2, 4, DP_PF_FAIL, "SLURM_PROCID 2 differs from OMPI_COMM_WORLD_RANK 3");
    /* mpirun inside an allocation of 1 task: Slurm's numbers describe the batch step. */
    const char *mpirun_in_alloc[] = {"OMPI_COMM_WORLD_RANK=3",
                                     "OMPI_COMM_WORLD_SIZE=4",
                                     "OMPI_COMM_WORLD_LOCAL_RANK=1",
                                     "SLURM_PROCID=0",
                                     "SLURM_NTASKS=1",
                                     "SLURM_LOCALID=0",
                                     "SLURM_STEP_ID=0",
                                     NULL};
    env_case(mpirun_in_alloc, 2, 4, DP_PF_PASS, "OpenMPI");
    const char *slurm[] = {"SLURM_PROCID=5", "SLURM_NTASKS=8", "SLURM_LOCALID=5", "SLURM_STEP_ID=3",
                           NULL};
    env_case(slurm, 8, 8, DP_PF_PASS, "Slurm: SLURM_PROCID 5 of SLURM_NTASKS 8");
    env_case(slurm, 4, 8, DP_PF_FAIL, "SLURM_LOCALID 5 but this node has 4 GPUs");
    /* A batch script: Slurm's variables without a step id. */
    const char *batch[] = {"SLURM_PROCID=0", "SLURM_NTASKS=8", "SLURM_LOCALID=0", NULL};
    env_case(batch, 8, 8, DP_PF_WARN, "this is the batch script, not a task");
    const char *nothing[] = {"PATH=/bin", "HOME=/root", NULL};
    env_case(nothing, 8, 8, DP_PF_WARN, "no launcher variables");

    /* CUDA_VISIBLE_DEVICES limits what a process sees. */
    const char *vis2[] = {"CUDA_VISIBLE_DEVICES=0,3", NULL};
    CHECK_EQ(dp_pf_visible_gpus(vis2, 8), 2);
    const char *vis0[] = {"CUDA_VISIBLE_DEVICES=", NULL};
    CHECK_EQ(dp_pf_visible_gpus(vis0, 8), 0);
    const char *visneg[] = {"CUDA_VISIBLE_DEVICES=1,-1,2", NULL};
    CHECK_EQ(dp_pf_visible_gpus(visneg, 8), 1);
    CHECK_EQ(dp_pf_visible_gpus(nothing, 8), 8);
}

static void test_loss_scale(void)
{
    rep.n = 0;
    dp_pf_check_loss_scale(DP_FP16, DP_PF_LS_DYNAMIC, 0, &rep);
    CHECK_EQ(last()->status, DP_PF_PASS);
    dp_pf_check_loss_scale(DP_FP16, DP_PF_LS_STATIC, 65536, &rep);
    CHECK_EQ(last()->status, DP_PF_PASS);
    CHECK_CONTAINS(last()->detail, "65536");
    dp_pf_check_loss_scale(DP_FP16, DP_PF_LS_NONE, 0, &rep);
    CHECK_EQ(last()->status, DP_PF_FAIL);
    dp_pf_check_loss_scale(DP_FP16, DP_PF_LS_UNSET, 0, &rep);
    CHECK_EQ(last()->status, DP_PF_WARN);
    dp_pf_check_loss_scale(DP_BF16, DP_PF_LS_NONE, 0, &rep);
    CHECK_EQ(last()->status, DP_PF_PASS);
}

static void test_ckpt_dir(void)
{
    /* Room: this node writes 10 GiB of a 100 GiB checkpoint. */
    struct dp_ckpt_size s = {0};
    s.node_bytes = 10LL << 30;
    s.total_bytes = 100LL << 30;
    CHECK_EQ(dp_pf_ckpt_room(5LL << 30, &s), DP_PF_FAIL);
    CHECK_EQ(dp_pf_ckpt_room(50LL << 30, &s), DP_PF_WARN);
    CHECK_EQ(dp_pf_ckpt_room(100LL << 30, &s), DP_PF_PASS);

    /* A writable directory, and one below it that does not exist yet. */
    char dir[] = "/tmp/dplan-pf-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    struct dp_ckpt_size tiny = {0};
    tiny.node_bytes = tiny.total_bytes = 1;
    rep.n = 0;
    dp_pf_check_ckpt_dir(dir, &tiny, &rep);
    CHECK_EQ(last()->status, DP_PF_PASS);
    CHECK_CONTAINS(last()->detail, "writable");
    char sub[64];
    snprintf(sub, sizeof sub, "%s/a/b", dir);
    dp_pf_check_ckpt_dir(sub, &tiny, &rep);
    CHECK_EQ(last()->status, DP_PF_PASS);
    CHECK_CONTAINS(last()->detail, "to be created below");
    /* More than any disk holds (2^62 bytes = 4 EiB): FAIL. */
    struct dp_ckpt_size huge = {0};
    huge.node_bytes = huge.total_bytes = 1LL << 62;
    dp_pf_check_ckpt_dir(dir, &huge, &rep);
    CHECK_EQ(last()->status, DP_PF_FAIL);
    CHECK_CONTAINS(last()->detail, "less than the");
    /* Below a regular file: not a directory. */
    char file[64], below[80];
    snprintf(file, sizeof file, "%s/f", dir);
    FILE *f = fopen(file, "w");
    CHECK(f != NULL);
    if (f)
        fclose(f);
    snprintf(below, sizeof below, "%s/ckpt", file);
    dp_pf_check_ckpt_dir(below, &tiny, &rep);
    CHECK_EQ(last()->status, DP_PF_FAIL);
    CHECK_CONTAINS(last()->detail, "not a directory");
    /* /proc takes no new files, even from root. */
    dp_pf_check_ckpt_dir("/proc/dplan-ckpt", &tiny, &rep);
    CHECK_EQ(last()->status, DP_PF_FAIL);
    CHECK_CONTAINS(last()->detail, "cannot create a file");
    dp_pf_check_ckpt_dir(NULL, &tiny, &rep);
    CHECK_EQ(last()->status, DP_PF_WARN);
    unlink(file);
    snprintf(sub, sizeof sub, "%s", dir);
    rmdir(sub);
}

static void test_ckpt_every(void)
{
    /*
     * MTBF 10 h = 36000 s, 60 s per write, no restart time. Daly: x = 60 / 72000
     * = 8.333e-4, sqrt(2 x 60 x 36000) = 2078.46 s, x (1 + sqrt(x) / 3 + x / 9)
     * = x 1.009716 = 2098.66, minus 60 = 2038.66 s: 203.9 steps of 10 s, so the
     * best whole count is 204 (or 203).
     */
    struct dp_failure_model f = {1.0 / 36000.0, 60.0, 0.0};
    rep.n = 0;
    dp_pf_check_ckpt_every(200, 10.0, &f, &rep);
    CHECK_EQ(last()->status, DP_PF_PASS);
    CHECK_CONTAINS(last()->detail, "every 200 steps = 33.3 min");
    /* 20 steps is 0.098x the best: far. */
    dp_pf_check_ckpt_every(20, 10.0, &f, &rep);
    CHECK_EQ(last()->status, DP_PF_WARN);
    CHECK_CONTAINS(last()->detail, "optimum of 20");
    /* 1000 steps = 10000 s > 7200 s. */
    dp_pf_check_ckpt_every(1000, 10.0, &f, &rep);
    CHECK_EQ(last()->status, DP_PF_FAIL);
    CHECK_CONTAINS(last()->detail, "over the 2-hour limit: at most 720 steps");
    dp_pf_check_ckpt_every(0, 10.0, &f, &rep);
    CHECK_EQ(last()->status, DP_PF_WARN);
    /* MTBF 1000 h, 250 s writes: Daly ~ sqrt(2 x 250 x 3.6e6) = 42426 s, past the
     * 2-hour limit of 720 steps of 10 s: 700 steps passes, 300 (under half) warns. */
    struct dp_failure_model rare = {1.0 / 3.6e6, 250.0, 0.0};
    dp_pf_check_ckpt_every(700, 10.0, &rare, &rep);
    CHECK_EQ(last()->status, DP_PF_PASS);
    CHECK_CONTAINS(last()->detail, "within the 2-hour limit of 720 steps");
    dp_pf_check_ckpt_every(300, 10.0, &rare, &rep);
    CHECK_EQ(last()->status, DP_PF_WARN);
    /* Without failures only the 2-hour bar applies: 700 x 10 s = 1.94 h passes. */
    struct dp_failure_model none = {0, 60.0, 0};
    dp_pf_check_ckpt_every(700, 10.0, &none, &rep);
    CHECK_EQ(last()->status, DP_PF_PASS);
}

static void test_memory(void)
{
    static struct dp_mem_report r;
    memset(&r, 0, sizeof r);
    r.nstages = 2;
    r.capacity_bytes = 80LL << 30;
    r.stage[0].stage = 0;
    r.stage[1].stage = 1;
    r.stage[0].total_bytes = 60LL << 30;
    r.stage[1].total_bytes = 50LL << 30;
    rep.n = 0;
    dp_pf_check_memory(&r, DP_MEM_TIGHT_FRACTION, &rep);
    CHECK_EQ(last()->status, DP_PF_PASS);
    /* 20 GiB of 80 = 25% headroom */
    CHECK_CONTAINS(last()->detail, "stage 0, needs 60.0 GiB of 80.0 GiB usable (20.0 GiB, 25%");
    /* 77 GiB: 3 GiB = 3.75% < 5% */
    r.stage[1].total_bytes = 77LL << 30;
    dp_pf_check_memory(&r, DP_MEM_TIGHT_FRACTION, &rep);
    CHECK_EQ(last()->status, DP_PF_WARN);
    CHECK_CONTAINS(last()->detail, "stage 1: 77.0 GiB of 80.0 GiB usable, 3.0 GiB (3.8%)");
    r.stage[1].total_bytes = 81LL << 30;
    dp_pf_check_memory(&r, DP_MEM_TIGHT_FRACTION, &rep);
    CHECK_EQ(last()->status, DP_PF_FAIL);
    CHECK_CONTAINS(last()->detail, "1 of 2 stages do not fit: stage 1");
    /* --memory-margin 10: 75 GiB of 80 leaves 6.25%, under 10% */
    r.stage[1].total_bytes = 75LL << 30;
    dp_pf_check_memory(&r, 0.10, &rep);
    CHECK_EQ(last()->status, DP_PF_WARN);
    CHECK_CONTAINS(last()->detail, "5.0 GiB (6.2%) headroom, under 10%");
    dp_pf_check_memory(&r, DP_MEM_TIGHT_FRACTION, &rep);
    CHECK_EQ(last()->status, DP_PF_PASS);
}

static void topo_case(const char *xml, int tp, int want, const char *text)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/tests/topology/xml/%s", src_dir(), xml);
    struct dp_topo t;
    struct dp_err err = {0};
    if (dp_topo_load_xml(path, &t, &err)) {
        fprintf(stderr, "%s: %s\n", xml, err.msg);
        check_failures++;
        return;
    }
    struct dp_cluster cl;
    CHECK_EQ(dp_cluster_from_system("dgx-h100", 1, NULL, &cl, &err), 0);
    struct dp_layout l;
    dp_layout_default(&l);
    l.tp = tp;
    l.dp = 8 / tp;
    l.gbs = 8;
    rep.n = 0;
    dp_pf_check_topology(&t, &cl, &l, &rep);
    CHECK_EQ(last()->status, want);
    CHECK_CONTAINS(last()->detail, text);
    dp_topo_release(&t);
}

static void test_topology(void)
{
    topo_case("dgx-h100.xml", 8, DP_PF_PASS, "each TP group of 8 GPUs is joined by NVLink");
    /* 8 L40S on PCIe where the DGX plan puts TP 2 on NVLink 4. */
    topo_case("pcie-8x-l40s.xml", 2, DP_PF_FAIL, "where the plan assumes nvlink4");
    /* 3 GPUs where the plan has 8 per node. */
    topo_case("pcie-24core-3gpu.xml", 1, DP_PF_FAIL, "3 GPUs found, the plan assumes 8");
    struct dp_topo empty;
    memset(&empty, 0, sizeof empty);
    snprintf(empty.source, sizeof empty.source, "this machine");
    struct dp_cluster cl;
    struct dp_err err = {0};
    CHECK_EQ(dp_cluster_from_system("dgx-h100", 1, NULL, &cl, &err), 0);
    struct dp_layout l;
    dp_layout_default(&l);
    rep.n = 0;
    dp_pf_check_topology(&empty, &cl, &l, &rep);
    CHECK_EQ(last()->status, DP_PF_WARN);
    CHECK_CONTAINS(last()->detail, "no GPUs found");
}

static void test_versions_local(void)
{
    /* Without NVML (a path that does not exist) nothing is found and the note says why. */
    setenv("DPLAN_NVML_LIB", "/nonexistent/libnvidia-ml.so.1", 1);
    setenv("DPLAN_CUDART_LIB", "/nonexistent/libcudart.so", 1);
    struct dp_pf_versions v;
    dp_pf_versions_local(&v);
    CHECK_STR(v.driver, "");
    CHECK_EQ(v.cudart, 0);
    CHECK_CONTAINS(v.note, "not found");
    /* The fake NVML of tests/topology reports driver 550.54.15 and CUDA 12040. */
    const char *fake = getenv("DPLAN_FAKE_NVML");
    if (fake) {
        setenv("DPLAN_NVML_LIB", fake, 1);
        setenv("DPLAN_FAKE_NVML_DRIVER", "999.1", 1);
        dp_pf_versions_local(&v);
        CHECK_STR(v.driver, "999.1");
        CHECK_EQ(v.cuda_driver, 12040);
    }
}

int main(void)
{
    test_report();
    test_versions();
    test_busbw();
    test_env();
    test_loss_scale();
    test_ckpt_dir();
    test_ckpt_every();
    test_memory();
    test_topology();
    test_versions_local();
    return check_failures ? 1 : 0;
}
