/*
 * The measured profile (fit/profile.c): what is written reads back equal
 * (through a file too), and bad profiles fail with one line naming the
 * file, the JSON path and what was expected.
 */
#include "check.h"

#include "fit/fit.h"
#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <unistd.h>

static struct dp_calibration sample(void)
{
    struct dp_calibration c;
    memset(&c, 0, sizeof c);
    c.version = DP_CALIBRATION_VERSION;
    snprintf(c.created_by, sizeof c.created_by, "dplan 0.1.0 calibrate");
    snprintf(c.measured_at, sizeof c.measured_at, "2026-03-01T12:34:56Z");
    struct dp_cal_machine *m = &c.machine;
    snprintf(m->hostname, sizeof m->hostname, "node17");
    snprintf(m->backend, sizeof m->backend, "cuda");
    snprintf(m->cpu, sizeof m->cpu, "Intel(R) Xeon(R) Platinum 8480C");
    snprintf(m->gpu, sizeof m->gpu, "NVIDIA H100 80GB HBM3");
    m->nodes = 1;
    m->ranks = 8;
    m->cores = 112;
    struct dp_err err = {0};
    if (dp_cluster_from_system("dgx-h100", 1, NULL, &m->cluster, &err) == 0)
        m->has_cluster = true;
    else
        fprintf(stderr, "%s\n", err.msg);
    c.ngemm = 2;
    c.gemm[0] = (struct dp_cal_gemm){.dtype = DP_BF16,
                                     .peak_tflops = 989.4,
                                     .curve = {0.7123456789012345, 3.25e9},
                                     .eff_max_se = 0.0041,
                                     .half_flops_se = 2.1e8,
                                     .q = {40, 2, 0.99871, 0.0213, 0.061}};
    c.gemm[1] = (struct dp_cal_gemm){
        .dtype = DP_FP32, .peak_tflops = 66.9, .curve = {0.9, 1e8}, .q = {12, 2, -0.5, 0.3, 0.9}};
    c.ncoll = 2;
    c.coll[0] = (struct dp_cal_coll){.coll = DP_NCCL_ALL_REDUCE,
                                     .ranks_min = 2,
                                     .ranks_max = 8,
                                     .alpha_us = 6.02,
                                     .busbw_gbps = 361.7,
                                     .alpha_se_us = 0.11,
                                     .busbw_se_gbps = 2.3,
                                     .q = {33, 2, 0.9991, 0.028, 0.07}};
    snprintf(c.coll[0].link, sizeof c.coll[0].link, "nvlink4");
    c.coll[1] = (struct dp_cal_coll){.coll = DP_NCCL_SENDRECV,
                                     .ranks_min = 2,
                                     .ranks_max = 2,
                                     .alpha_us = 0,
                                     .busbw_gbps = 1e-3,
                                     .q = {3, 2, 1, 0, 0},
                                     .npoints = 3,
                                     .point_bytes = {1024, 4096, 1048576},
                                     .point_us = {1.25, 2.5, 412.75}};
    snprintf(c.coll[1].link, sizeof c.coll[1].link, "ib-ndr-400");
    c.has_membw = true;
    c.membw = (struct dp_cal_membw){2811.5, 4.25, 12.5, 0.3, {30, 2, 0.9999, 0.019, 0.05}};
    /* CPU kernel costs at three thread splits of a 2-core machine. */
    c.ncpu = 3;
    int split[3][2] = {{2, 2}, {1, 1}, {1, 2}};
    for (int i = 0; i < 3; i++)
        c.cpu[i] = (struct dp_cal_cpu){.threads = split[i][0],
                                       .concurrent = split[i][1],
                                       .seq_len = 64,
                                       .head_dim = 16,
                                       .ffn = DP_FFN_SWIGLU,
                                       .norm = DP_NORM_RMSNORM,
                                       .gemm_call_us = 0.25 + i,
                                       .gemm_gflops = 45.3,
                                       .conc_eff = 0.87,
                                       .fork_us = 1.24,
                                       .bw_gbps = {70.2, 50.1, 30.3 / (i + 1)},
                                       .l2_bytes = 524288,
                                       .l3_bytes = 16777216,
                                       .attn_fwd_us = 4.6,
                                       .attn_bwd_us = 5.3,
                                       .attn_probs_us = 2.1,
                                       .act_fwd_ns = 1.5,
                                       .act_bwd_ns = 2.5,
                                       .norm_fwd_ns = 0.7,
                                       .norm_bwd_ns = 1.1,
                                       .ce_ns = 3.3,
                                       .adamw_ns = 0.9,
                                       /* the swept probe's fields; the third entry without
                                        * them, as older profiles are */
                                       .hidden = i < 2 ? 64 : 0,
                                       .sweep_bytes = i < 2 ? 10439680 : 0,
                                       .swept_gbps = i < 2 ? 87.5 : 0};
    /* Ranks in lock step. */
    c.has_lockstep = true;
    c.lockstep = (struct dp_cal_lockstep){.ranks = 2,
                                          .n = 3,
                                          .jitter = 0.00125,
                                          .seg_s = {1.75e-5, 7.25e-5, 2.875e-4},
                                          .wait_s = {2.5e-6, 4.5e-6, 1.25e-5}};
    /* Bandwidth by reuse distance and the SGEMM model (fit/reuse.c's fields). */
    c.has_reuse = true;
    c.reuse = (struct dp_cal_reuse){.n = 3,
                                    .bytes = {262144, 8650752, 268697600},
                                    .read_gbps = {99.5, 40.25, 16.125},
                                    .write_gbps = {47.5, 19.0, 6.0625},
                                    .gemm_call_us = 0.125,
                                    .gemm_gflops = 138.5,
                                    .gemm_ab_ns = 0.1,
                                    .gemm_c_ns = 0.105,
                                    .gemm_hot_q = {24, 4, 0.998, 0.031, 0.061},
                                    .gemm_cold = 2.15,
                                    .gemm_cold_q = {6, 2, 0.5, 0.22, 0.4},
                                    .attn_fwd = 1.37,
                                    .attn_bwd = 1.21,
                                    .attn_probs = 1.5,
                                    .act_fwd = 0.88,
                                    .act_bwd = 0.68,
                                    .norm_fwd = 0.82,
                                    .norm_bwd = 0.61,
                                    .ce = 1.73,
                                    .adamw = 0.79,
                                    .sumsq = 0.5,
                                    .sumsq_ns = 0.33};
    return c;
}

static void same_quality(const struct dp_fit_quality *a, const struct dp_fit_quality *b)
{
    CHECK_EQ(a->n, b->n);
    CHECK_EQ(a->params, b->params);
    CHECK(a->r2 == b->r2 && a->rms_rel == b->rms_rel && a->max_rel == b->max_rel);
}

static void same(const struct dp_calibration *a, const struct dp_calibration *b)
{
    CHECK_EQ(a->version, b->version);
    CHECK_STR(a->created_by, b->created_by);
    CHECK_STR(a->measured_at, b->measured_at);
    CHECK_STR(a->machine.hostname, b->machine.hostname);
    CHECK_STR(a->machine.backend, b->machine.backend);
    CHECK_STR(a->machine.cpu, b->machine.cpu);
    CHECK_STR(a->machine.gpu, b->machine.gpu);
    CHECK_EQ(a->machine.nodes, b->machine.nodes);
    CHECK_EQ(a->machine.ranks, b->machine.ranks);
    CHECK_EQ(a->machine.cores, b->machine.cores);
    CHECK_EQ(a->machine.has_cluster, b->machine.has_cluster);
    if (a->machine.has_cluster) {
        CHECK_STR(a->machine.cluster.gpu.name, b->machine.cluster.gpu.name);
        CHECK_EQ(a->machine.cluster.gpus_per_node, b->machine.cluster.gpus_per_node);
        CHECK(a->machine.cluster.intra.bw_gbps == b->machine.cluster.intra.bw_gbps);
    }
    CHECK_EQ(a->ngemm, b->ngemm);
    for (int i = 0; i < a->ngemm && i < b->ngemm; i++) {
        const struct dp_cal_gemm *x = &a->gemm[i], *y = &b->gemm[i];
        CHECK_EQ(x->dtype, y->dtype);
        CHECK(x->peak_tflops == y->peak_tflops);     /* doubles print with enough digits to */
        CHECK(x->curve.eff_max == y->curve.eff_max); /* come back bit for bit */
        CHECK(x->curve.half_flops == y->curve.half_flops);
        CHECK(x->eff_max_se == y->eff_max_se && x->half_flops_se == y->half_flops_se);
        same_quality(&x->q, &y->q);
    }
    CHECK_EQ(a->ncoll, b->ncoll);
    for (int i = 0; i < a->ncoll && i < b->ncoll; i++) {
        const struct dp_cal_coll *x = &a->coll[i], *y = &b->coll[i];
        CHECK_EQ(x->coll, y->coll);
        CHECK_STR(x->link, y->link);
        CHECK_EQ(x->ranks_min, y->ranks_min);
        CHECK_EQ(x->ranks_max, y->ranks_max);
        CHECK(x->alpha_us == y->alpha_us && x->busbw_gbps == y->busbw_gbps);
        CHECK(x->alpha_se_us == y->alpha_se_us && x->busbw_se_gbps == y->busbw_se_gbps);
        same_quality(&x->q, &y->q);
        CHECK_EQ(x->npoints, y->npoints);
        for (int j = 0; j < x->npoints && j < y->npoints; j++)
            CHECK(x->point_bytes[j] == y->point_bytes[j] && x->point_us[j] == y->point_us[j]);
    }
    CHECK_EQ(a->has_membw, b->has_membw);
    CHECK(a->membw.bw_gbps == b->membw.bw_gbps && a->membw.overhead_us == b->membw.overhead_us);
    CHECK(a->membw.bw_se_gbps == b->membw.bw_se_gbps);
    same_quality(&a->membw.q, &b->membw.q);
    CHECK_EQ(a->ncpu, b->ncpu);
    for (int i = 0; i < a->ncpu && i < b->ncpu; i++) {
        const struct dp_cal_cpu *x = &a->cpu[i], *y = &b->cpu[i];
        CHECK(x->threads == y->threads && x->concurrent == y->concurrent);
        CHECK(x->seq_len == y->seq_len && x->head_dim == y->head_dim);
        CHECK(x->ffn == y->ffn && x->norm == y->norm);
        CHECK(x->gemm_call_us == y->gemm_call_us && x->gemm_gflops == y->gemm_gflops);
        CHECK(x->conc_eff == y->conc_eff && x->fork_us == y->fork_us);
        CHECK(x->bw_gbps[0] == y->bw_gbps[0] && x->bw_gbps[2] == y->bw_gbps[2]);
        CHECK(x->l2_bytes == y->l2_bytes && x->l3_bytes == y->l3_bytes);
        CHECK(x->attn_fwd_us == y->attn_fwd_us && x->attn_probs_us == y->attn_probs_us);
        CHECK(x->norm_bwd_ns == y->norm_bwd_ns && x->adamw_ns == y->adamw_ns);
        CHECK(x->hidden == y->hidden && x->sweep_bytes == y->sweep_bytes);
        CHECK(x->swept_gbps == y->swept_gbps);
    }
    CHECK_EQ(a->has_lockstep, b->has_lockstep);
    CHECK(a->lockstep.ranks == b->lockstep.ranks && a->lockstep.n == b->lockstep.n &&
          a->lockstep.jitter == b->lockstep.jitter);
    for (int i = 0; i < a->lockstep.n && i < b->lockstep.n; i++)
        CHECK(a->lockstep.seg_s[i] == b->lockstep.seg_s[i] &&
              a->lockstep.wait_s[i] == b->lockstep.wait_s[i]);
    CHECK_EQ(a->has_reuse, b->has_reuse);
    const struct dp_cal_reuse *x = &a->reuse, *y = &b->reuse;
    CHECK_EQ(x->n, y->n);
    for (int i = 0; i < x->n && i < y->n; i++)
        CHECK(x->bytes[i] == y->bytes[i] && x->read_gbps[i] == y->read_gbps[i] &&
              x->write_gbps[i] == y->write_gbps[i]);
    CHECK(x->gemm_call_us == y->gemm_call_us && x->gemm_gflops == y->gemm_gflops);
    CHECK(x->gemm_ab_ns == y->gemm_ab_ns && x->gemm_c_ns == y->gemm_c_ns);
    CHECK(x->gemm_cold == y->gemm_cold);
    same_quality(&x->gemm_hot_q, &y->gemm_hot_q);
    same_quality(&x->gemm_cold_q, &y->gemm_cold_q);
    CHECK(x->attn_fwd == y->attn_fwd && x->attn_bwd == y->attn_bwd &&
          x->attn_probs == y->attn_probs);
    CHECK(x->act_fwd == y->act_fwd && x->act_bwd == y->act_bwd && x->norm_fwd == y->norm_fwd &&
          x->norm_bwd == y->norm_bwd);
    CHECK(x->ce == y->ce && x->adamw == y->adamw && x->sumsq == y->sumsq &&
          x->sumsq_ns == y->sumsq_ns);
}

/* The CPU entry for a run's split: the exact one when measured, else the nearest in
 * log(concurrent), then in log(threads): 1 thread with 4 computing is log 2 from both
 * {1, 2} and {2, 2} in concurrency and 0 vs log 2 in threads: {1, 2}; 4 threads with 4
 * computing: {2, 2} (log 2, log 2) before {1, 2} (log 2, log 4). */
static void test_lookup(void)
{
    struct dp_calibration c = sample();
    CHECK(dp_calibration_cpu(&c, 2, 2) == &c.cpu[0]);
    CHECK(dp_calibration_cpu(&c, 1, 1) == &c.cpu[1]);
    CHECK(dp_calibration_cpu(&c, 1, 2) == &c.cpu[2]);
    CHECK(dp_calibration_cpu(&c, 1, 4) == &c.cpu[2]);
    CHECK(dp_calibration_cpu(&c, 4, 4) == &c.cpu[0]);
    c.ncpu = 0;
    CHECK(dp_calibration_cpu(&c, 1, 1) == NULL);
    c = sample();
    CHECK(dp_calibration_coll(&c, DP_NCCL_SENDRECV, NULL) == &c.coll[1]);
    CHECK(dp_calibration_coll(&c, DP_NCCL_ALL_REDUCE, "nvlink4") == &c.coll[0]);
    CHECK(dp_calibration_coll(&c, DP_NCCL_ALL_REDUCE, "ib-ndr-400") == NULL);
}

static void test_roundtrip(void)
{
    struct dp_calibration c = sample(), back;
    CHECK(c.machine.has_cluster);
    char path[64];
    snprintf(path, sizeof path, "/tmp/dplan-test-cal-%ld.json", (long)getpid());
    struct dp_err err = {0};
    CHECK_EQ(dp_calibration_save(path, &c, &err), 0);
    CHECK_EQ(dp_calibration_load(path, &back, &err), 0);
    if (err.msg[0])
        fprintf(stderr, "%s\n", err.msg);
    same(&c, &back);
    unlink(path);
    /* A profile with only a memory fit, no machine cluster: still valid. */
    struct dp_calibration m = sample();
    m.ngemm = m.ncoll = m.ncpu = 0;
    m.machine.has_cluster = false;
    cJSON *j = dp_calibration_to_json(&m);
    struct dp_jr jr = {.file = "mem.json", .err = &err};
    CHECK_EQ(dp_calibration_from_json(&jr, j, &back), 0);
    same(&m, &back);
    cJSON_Delete(j);
}

/* Parse `text` as file "p.json" and expect the exact one-line message. */
static void bad(const char *text, const char *msg)
{
    struct dp_err err = {0};
    struct dp_calibration c;
    cJSON *root = NULL;
    int rc = dp_json_parse("p.json", text, strlen(text), &root, &err);
    if (rc == 0) {
        struct dp_jr jr = {.file = "p.json", .err = &err};
        rc = dp_calibration_from_json(&jr, root, &c);
        cJSON_Delete(root);
    }
    CHECK(rc != 0);
    CHECK_STR(err.msg, msg);
}

#define HEAD    "{\"dplan_calibration\": 1, \"measured_at\": \"2026-03-01T12:00:00Z\", "
#define MACHINE "\"machine\": {\"hostname\": \"h\", \"backend\": \"cpu\"}"
#define QUAL                                                                                       \
    "\"quality\": {\"samples\": 3, \"params\": 2, \"r2\": 1, \"rms_rel\": 0, \"max_rel\": 0}"
#define GEMM(dt)                                                                                   \
    "{\"dtype\": \"" dt "\", \"peak_tflops\": 1, \"eff_max\": 0.5, \"half_flops\": 1e6, "          \
    "\"stderr\": {\"eff_max\": 0, \"half_flops\": 0}, " QUAL "}"

static void test_errors(void)
{
    /* The minimal profile is valid. */
    struct dp_err err = {0};
    const char *ok = HEAD MACHINE ", \"gemm\": [" GEMM("fp32") "]}";
    cJSON *root;
    CHECK_EQ(dp_json_parse("p.json", ok, strlen(ok), &root, &err), 0);
    struct dp_jr jr = {.file = "p.json", .err = &err};
    struct dp_calibration c;
    CHECK_EQ(dp_calibration_from_json(&jr, root, &c), 0);
    CHECK_EQ(c.ngemm, 1);
    CHECK_EQ(c.gemm[0].dtype, DP_FP32);
    cJSON_Delete(root);
    /* A standard error the fit could not determine is null (NaN in memory). */
    const char *nul =
        HEAD MACHINE ", \"gemm\": [{\"dtype\": \"fp32\", \"peak_tflops\": 1, "
                     "\"eff_max\": 1, \"half_flops\": 0, \"stderr\": {\"eff_max\": 0.1, "
                     "\"half_flops\": null}, " QUAL "}]}";
    CHECK_EQ(dp_json_parse("p.json", nul, strlen(nul), &root, &err), 0);
    CHECK_EQ(dp_calibration_from_json(&jr, root, &c), 0);
    CHECK(isnan(c.gemm[0].half_flops_se) && c.gemm[0].eff_max_se == 0.1);
    cJSON_Delete(root);

    bad("[]", "p.json: expected a calibration profile object, got array");
    bad("{\"dplan_calibration\": 2, \"measured_at\": \"2026-03-01T12:00:00Z\", " MACHINE "}",
        "p.json: dplan_calibration: expected version 1, got 2 (written by a newer dplan?)");
    bad("{\"measured_at\": \"2026-03-01T12:00:00Z\", " MACHINE "}",
        "p.json: dplan_calibration: missing required field (expected integer in [1, 1000])");
    bad("{\"dplan_calibration\": 1, \"measured_at\": \"yesterday\", " MACHINE "}",
        "p.json: measured_at: expected UTC time like \"2026-03-01T12:00:00Z\", got \"yesterday\"");
    bad(HEAD "\"machine\": {\"hostname\": \"h\", \"backend\": \"tpu\"}}",
        "p.json: machine.backend: expected one of \"cpu\", \"cuda\", got string \"tpu\"");
    bad(HEAD "\"machines\": {}}",
        "p.json: machines: unknown field (expected one of: dplan_calibration, created_by, "
        "measured_at, machine, gemm, collectives, memory, cpu, reuse, lockstep)");
    /* Bandwidth by reuse distance: farther points ascend; the SGEMM model must be there. */
#define FACTORS                                                                                    \
    "\"attn_fwd\": 1, \"attn_bwd\": 1, \"attn_probs\": 1, \"act_fwd\": 1, \"act_bwd\": 1, "        \
    "\"norm_fwd\": 1, \"norm_bwd\": 1, \"ce\": 1, \"adamw\": 1, \"sumsq\": 1, \"sumsq_ns\": 0.3"
#define SGEMM                                                                                      \
    "\"sgemm_hot\": {\"call_us\": 0, \"gflops\": 140, \"ab_ns\": 0.1, \"c_ns\": 0.1, " QUAL        \
    "}, \"sgemm_cold\": {\"factor\": 2}"
    bad(HEAD MACHINE ", \"reuse\": {\"measured\": [[262144, 100, 50], [1048576, 40, 20], "
                     "[524288, 30, 10]], " SGEMM ", " FACTORS "}}",
        "p.json: reuse.measured[2]: expected [bytes > 0, read GB/s > 0, write GB/s > 0], bytes "
        "ascending");
    bad(HEAD MACHINE ", \"reuse\": {\"measured\": [[262144, 100]], " SGEMM ", " FACTORS "}}",
        "p.json: reuse.measured: expected an array of 2 to 16 [bytes, read GB/s, write GB/s] "
        "triples");
    bad(HEAD MACHINE ", \"reuse\": {\"measured\": [[262144, 100, 50], [1048576, 40, 20]], "
                     "\"sgemm_cold\": {\"factor\": 2}, " FACTORS "}}",
        "p.json: reuse.sgemm_hot: missing required field (expected an SGEMM model object)");
    bad(HEAD MACHINE ", \"reuse\": {\"measured\": [[262144, 100, 50], [1048576, 40, 20]], " SGEMM
                     ", " FACTORS ", \"jitter\": 1}}",
        "p.json: reuse.jitter: unknown field (expected one of: measured, sgemm_hot, sgemm_cold, "
        "attn_fwd, attn_bwd, attn_probs, act_fwd, act_bwd, norm_fwd, norm_bwd, ce, adamw, sumsq, "
        "sumsq_ns)");
    bad(HEAD MACHINE
        ", \"reuse\": {\"measured\": [[262144, 100, 50], [1048576, 40, 20]], "
        "\"sgemm_hot\": {\"call_us\": 0, \"gflops\": 0, \"ab_ns\": 0.1, \"c_ns\": 0.1, " QUAL
        "}, \"sgemm_cold\": {\"factor\": 2}, " FACTORS "}}",
        "p.json: reuse.sgemm_hot.gflops: expected number >= 1e-09, got number 0");
    bad(HEAD MACHINE
        ", \"lockstep\": {\"ranks\": 1, \"jitter\": 0.001, \"measured\": [[1e-4, 1e-5]]}}",
        "p.json: lockstep.ranks: expected integer in [2, 1048576], got number 1");
    bad(HEAD MACHINE
        ", \"lockstep\": {\"ranks\": 2, \"jitter\": 0.001, \"measured\": [[0, 1e-5]]}}",
        "p.json: lockstep.measured[0]: expected [segment s > 0, wait s >= 0]");
    bad(HEAD MACHINE ", \"cpu\": [{\"threads\": 0}]}",
        "p.json: cpu[0].threads: expected integer in [1, 4096], got number 0");
    bad(HEAD MACHINE ", \"cpu\": [{\"threads\": 1, \"concurrent\": 1, \"seq_len\": 64, "
                     "\"head_dim\": 16, \"ffn\": \"relu\"}]}",
        "p.json: cpu[0].ffn: expected one of \"gelu\", \"swiglu\", got string \"relu\"");
    bad(HEAD MACHINE ", \"gemm\": {}}", "p.json: gemm: expected an array of GEMM curve objects, "
                                        "got object");
    bad(HEAD MACHINE ", \"gemm\": [" GEMM("fp32") ", " GEMM("int8") "]}",
        "p.json: gemm[1].dtype: expected one of \"bf16\", \"fp16\", \"fp32\", got string "
        "\"int8\"");
    bad(HEAD MACHINE ", \"gemm\": [" GEMM("fp32") ", " GEMM("fp32") "]}",
        "p.json: gemm[1].dtype: fp32 has a curve already (gemm[0])");
    bad(HEAD MACHINE ", \"gemm\": [{\"dtype\": \"bf16\", \"peak_tflops\": 1, \"eff_max\": 1.5, "
                     "\"half_flops\": 0}]}",
        "p.json: gemm[0].eff_max: expected number in [1e-09, 1], got number 1.5");
    bad(HEAD MACHINE ", \"gemm\": [{\"dtype\": \"bf16\", \"peak_tflops\": 1, \"eff_max\": 0.5, "
                     "\"half_flops\": 0, " QUAL "}]}",
        "p.json: gemm[0].stderr: missing required field (expected an object of standard errors)");
    bad(HEAD MACHINE ", \"memory\": {\"bw_gbps\": -3, \"overhead_us\": 1}}",
        "p.json: memory.bw_gbps: expected number in [1e-12, 1000000000], got number -3");
    bad(HEAD MACHINE ", \"collectives\": [{\"collective\": \"all_reduce\", \"link\": \"nvlink4\", "
                     "\"ranks_min\": 8, \"ranks_max\": 4, \"alpha_us\": 5, \"busbw_gbps\": 300}]}",
        "p.json: collectives[0].ranks_max: expected integer >= ranks_min 8, got 4");
    bad(HEAD MACHINE ", \"collectives\": [{\"collective\": \"all_reduce\", \"link\": \"nvlink4\", "
                     "\"ranks_min\": 2, \"ranks_max\": 8, \"alpha_us\": 5, \"busbw_gbps\": 300, "
                     "\"stderr\": {\"alpha_us\": 0, \"busbw_gbps\": 0}, \"quality\": {\"samples\": "
                     "0, \"params\": 2, \"r2\": 1, \"rms_rel\": 0, \"max_rel\": 0}}]}",
        "p.json: collectives[0].quality.samples: expected integer in [1, 100000000], got number 0");
    /* The measured times: sizes must ascend (a table read between neighbours). */
    bad(HEAD MACHINE ", \"collectives\": [{\"collective\": \"all_reduce\", \"link\": \"shm\", "
                     "\"ranks_min\": 2, \"ranks_max\": 2, \"alpha_us\": 5, \"busbw_gbps\": 3, "
                     "\"stderr\": {\"alpha_us\": 0, \"busbw_gbps\": 0}, " QUAL
                     ", \"measured\": [[4096, 2], [1024, 1]]}]}",
        "p.json: collectives[0].measured[1]: expected [bytes > 4096, us > 0], got something else");
    bad(HEAD MACHINE ", \"collectives\": [{\"collective\": \"all_reduce\", \"link\": \"shm\", "
                     "\"ranks_min\": 2, \"ranks_max\": 2, \"alpha_us\": 5, \"busbw_gbps\": 3, "
                     "\"stderr\": {\"alpha_us\": 0, \"busbw_gbps\": 0}, " QUAL
                     ", \"measured\": [[1024, 0]]}]}",
        "p.json: collectives[0].measured[0]: expected [bytes > 0, us > 0], got something else");
    bad(HEAD "\"machine\": {\"hostname\": \"h\", \"backend\": \"cpu\", \"cluster\": "
             "{\"dplan_cluster\": 1, \"nodes\": 1}}}",
        "p.json: machine.cluster.gpus_per_node: missing required field (expected integer in [1, "
        "1024])");
    bad("{\"dplan_calibration\": 1,", "p.json:1:25: JSON syntax error");
}

int main(void)
{
    test_roundtrip();
    test_lookup();
    test_errors();
    return check_done("test_fit_profile");
}
