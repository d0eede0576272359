/*
 * Measured-runs files and the layout fields of issue 11: the every-third held-out
 * rule and "fitted": false, throughput turned into time, runs waiting for a feature, the JSON
 * spelling of the precision and overlap knobs and the knobs that need another knob, and the error
 * statistics validate/ computes, and the runs it pairs across GPUs.
 */
#include "check.h"
#include "core/core.h"
#include "validate/validate.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char tmpdir[] = "/tmp/dplan-runs-XXXXXX";

static const char *write_file(const char *name, const char *text)
{
    static char path[512];
    snprintf(path, sizeof path, "%s/%s", tmpdir, name);
    FILE *f = fopen(path, "w");
    fputs(text, f);
    fclose(f);
    return path;
}

/* Load a runs file that must load; false (with the reason on stderr) when it does not. */
static bool load_ok(const char *file, struct dp_run **runs, int *n)
{
    struct dp_err err = {0};
    CHECK_EQ(dp_runs_load(file, runs, n, &err), 0);
    if (err.code)
        fprintf(stderr, "%s\n", err.msg);
    return err.code == 0;
}

/* One run on 8 tiny-gpt GPUs (dgx-h100: one node of 8); gbs 16 x seq 64 = 1024 tokens. */
static void add_run(char *buf, size_t cap, const char *id, const char *meas, const char *extra)
{
    size_t n = strlen(buf);
    snprintf(buf + n, cap - n,
             "%s{\"id\": \"%s\", \"source\": \"test\", \"model\": \"tiny-gpt\", "
             "\"system\": \"dgx-h100\", \"nodes\": 1, \"layout\": {\"tp\": 1, \"pp\": 1, "
             "\"dp\": 8, \"mbs\": 2, \"gbs\": 16, \"seq_len\": 64}, \"measured\": {%s}%s}",
             n && buf[n - 1] != '[' ? ", " : "", id, meas, extra);
}

static void test_held_out_rule(void)
{
    char text[8192] = "{\"dplan_runs\": 1, \"held_out_rule\": \"every-third\", \"runs\": [";
    const char *one = "\"iteration_time_s\": 1";
    add_run(text, sizeof text, "a", one, "");
    add_run(text, sizeof text, "u", one, ", \"underspecified\": true");
    add_run(text, sizeof text, "b", "\"tokens_per_s\": 4096", "");
    add_run(text, sizeof text, "c", "\"tokens_per_s_per_gpu\": 128", ", \"held_out\": true");
    add_run(text, sizeof text, "d", one, "");
    add_run(text, sizeof text, "e", one, "");
    add_run(text, sizeof text, "f", one, "");
    strcat(text, "]}");
    const char *file = write_file("rule.json", text);
    struct dp_run *runs;
    int n;
    struct dp_err err = {0};
    if (!load_ok(file, &runs, &n))
        return;
    CHECK_EQ(n, 7);
    /* Scored runs a, b, c, d, e, f: the 3rd (c) and the 6th (f) are held out; the
     * underspecified u does not count. */
    bool want[7] = {false, false, false, true, false, false, true};
    for (int i = 0; i < n; i++)
        CHECK_EQ(runs[i].held_out, want[i]);
    CHECK_STR(runs[0].source_key, "rule");
    /* 1024 tokens a step at 4096 tokens/s is 0.25 s; at 128 tokens/s on each of 8 GPUs,
     * 1024 / 1024 = 1 s. */
    CHECK_NEAR(runs[2].iteration_time_s, 0.25, 1e-12);
    CHECK_NEAR(runs[3].iteration_time_s, 1.0, 1e-12);
    free(runs);

    /* A run whose held_out disagrees with the rule is refused, naming it. */
    char bad[2048] = "{\"dplan_runs\": 1, \"held_out_rule\": \"every-third\", \"runs\": [";
    add_run(bad, sizeof bad, "a", one, ", \"held_out\": true");
    strcat(bad, "]}");
    file = write_file("bad.json", bad);
    dp_err_clear(&err);
    CHECK_EQ(dp_runs_load(file, &runs, &n, &err), DP_EINVAL);
    CHECK_CONTAINS(err.msg, "runs[0].held_out: expected false");

    /* "fitted": false holds out every run of the file, whatever its own flag; a run
     * with "needs" is printed but not scored. */
    char nofit[2048] = "{\"dplan_runs\": 1, \"fitted\": false, \"runs\": [";
    add_run(nofit, sizeof nofit, "a", one, ", \"held_out\": false");
    add_run(nofit, sizeof nofit, "b", one, ", \"needs\": [\"hsdp\"]");
    strcat(nofit, "]}");
    file = write_file("nofit.json", nofit);
    dp_err_clear(&err);
    if (!load_ok(file, &runs, &n))
        return;
    CHECK(runs[0].held_out && runs[1].held_out);
    CHECK(dp_run_scored(&runs[0]) && !dp_run_scored(&runs[1]));
    CHECK_STR(runs[1].needs, "hsdp");
    free(runs);
}

static void test_waiting_and_stats(void)
{
    /* A run waiting for a feature: its layout is not checked (pp = 3 does not divide
     * tiny-gpt's 4 layers), and it is not predicted or scored. */
    char text[4096] = "{\"dplan_runs\": 1, \"runs\": [";
    add_run(text, sizeof text, "ok", "\"iteration_time_s\": 1", "");
    strcat(text, ", {\"id\": \"w\", \"source\": \"t\", \"model\": \"tiny-gpt\", \"system\": "
                 "\"dgx-h100\", \"nodes\": 3, \"layout\": {\"tp\": 8, \"pp\": 3, \"dp\": 1, "
                 "\"mbs\": 1, \"gbs\": 3, \"seq_len\": 64}, \"measured\": "
                 "{\"iteration_time_s\": 1}, \"excluded\": \"needs uneven stages\", "
                 "\"waiting_for\": \"issue11-layout\"}]}");
    const char *file = write_file("wait.json", text);
    struct dp_run *runs;
    int n;
    struct dp_err err = {0};
    if (!load_ok(file, &runs, &n))
        return;
    CHECK_EQ(n, 2);
    CHECK(!dp_run_scored(&runs[1]));
    struct dp_run_result res[2];
    CHECK_EQ(dp_run_predict(&runs[1], &res[1], &err), 0);
    CHECK_EQ(dp_run_predict(&runs[0], &res[0], &err), 0);
    /* Statistics over hand-set errors: -10% and (unscored) +50%. */
    res[0].error = -0.10;
    res[1].error = 0.50;
    struct dp_val_stats s = dp_val_stats(runs, res, n, -1, NULL, NULL, NULL);
    CHECK_EQ(s.n, 1);
    CHECK_NEAR(s.mean, 0.10, 1e-12);
    CHECK_STR(s.worst_id, "ok");
    s = dp_val_stats(runs, res, n, 1, NULL, NULL, NULL);
    CHECK_EQ(s.n, 0);
    /* per framework profile: the run names none, so it is Megatron's */
    CHECK_EQ(dp_val_stats(runs, res, n, -1, NULL, NULL, "megatron").n, 1);
    CHECK_EQ(dp_val_stats(runs, res, n, -1, NULL, NULL, "torchtitan").n, 0);
    /* By the memory margin: the run's peak set just inside and just outside 5% of the
     * usable bytes (a dgx-h100 GPU's). */
    int64_t usable = dp_gpu_usable_bytes(&runs[0].cluster.gpu);
    CHECK(usable > 0);
    res[0].peak_bytes = (int64_t)(0.96 * (double)usable);
    CHECK_EQ(dp_val_stats_margin(runs, res, n, -1, 0.05, true).n, 1);
    CHECK_EQ(dp_val_stats_margin(runs, res, n, -1, 0.05, false).n, 0);
    CHECK_NEAR(dp_val_stats_margin(runs, res, n, -1, 0.05, true).mean, 0.10, 1e-12);
    CHECK_EQ(dp_val_stats_margin(runs, res, n, 1, 0.05, true).n, 0);
    res[0].peak_bytes = (int64_t)(0.94 * (double)usable);
    CHECK_EQ(dp_val_stats_margin(runs, res, n, -1, 0.05, true).n, 0);
    CHECK_EQ(dp_val_stats_margin(runs, res, n, -1, 0.05, false).n, 1);
    /* Over the limit (the model's out-of-memory verdict) counts as inside. */
    res[0].peak_bytes = usable + 1;
    CHECK_EQ(dp_val_stats_margin(runs, res, n, -1, 0.05, true).n, 1);
    free(runs);
}

static int layout_json(const char *text, struct dp_layout *l, struct dp_err *err)
{
    cJSON *o = cJSON_Parse(text);
    struct dp_jr jr = {.file = "plan.json", .err = err};
    snprintf(jr.path, sizeof jr.path, "layout");
    int rc = dp_layout_from_json(&jr, o, l);
    cJSON_Delete(o);
    return rc;
}

static void test_layout_knobs(void)
{
    struct dp_layout l;
    struct dp_err err = {0};
    /* "precision": "fp8" is bf16 storage with FP8 GEMMs; "tensorwise" is "current". */
    CHECK_EQ(layout_json("{\"tp\": 2, \"pp\": 1, \"dp\": 1, \"mbs\": 1, \"gbs\": 1, \"seq_len\": "
                         "8, \"precision\": \"fp8\", \"fp8_recipe\": \"tensorwise\"}",
                         &l, &err),
             0);
    CHECK_EQ(l.precision, DP_BF16);
    CHECK_EQ(dp_layout_gemm(&l), DP_GEMM_FP8);
    CHECK_EQ(l.fp8_recipe, DP_FP8_CURRENT);
    /* A plan written before the overlap knobs: overlap_param_gather follows dp_overlap,
     * TP and pipeline overlap are off, as that code modelled them. */
    CHECK(l.overlap_param_gather && !l.tp_overlap && !l.pp_overlap);
    CHECK_EQ(layout_json("{\"tp\": 1, \"pp\": 1, \"dp\": 1, \"mbs\": 1, \"gbs\": 1, \"seq_len\": "
                         "8, \"dp_overlap\": false}",
                         &l, &err),
             0);
    CHECK(!l.overlap_param_gather);
    /* Round trip: what to_json writes reads back the same. */
    l.gemm = DP_GEMM_FP8;
    l.fp8_recipe = DP_FP8_MXFP8;
    l.tp_overlap = false;
    l.pp_overlap = false;
    l.recompute_layers = 3;
    l.attn = DP_ATTN_CUDNN;
    cJSON *o = dp_layout_to_json(&l);
    struct dp_jr jr = {.file = "x", .err = &err};
    struct dp_layout back;
    CHECK_EQ(dp_layout_from_json(&jr, o, &back), 0);
    CHECK_EQ(back.gemm, DP_GEMM_FP8);
    CHECK_EQ(back.fp8_recipe, DP_FP8_MXFP8);
    CHECK_EQ(back.recompute_layers, 3);
    CHECK_EQ(back.attn, DP_ATTN_CUDNN);
    CHECK(!back.overlap_param_gather);
    cJSON_Delete(o);
    /* Knobs that need another knob: one line naming the field, DP_EUSAGE (exit 2). */
    dp_err_clear(&err);
    CHECK_EQ(layout_json("{\"tp\": 2, \"pp\": 1, \"dp\": 1, \"mbs\": 1, \"gbs\": 1, \"seq_len\": "
                         "8, \"tp_overlap\": true}",
                         &l, &err),
             DP_EUSAGE);
    CHECK_CONTAINS(err.msg, "plan.json: layout.tp_overlap: expected false without sp true");
    dp_err_clear(&err);
    CHECK_EQ(layout_json("{\"tp\": 1, \"pp\": 2, \"dp\": 1, \"mbs\": 1, \"gbs\": 2, \"seq_len\": "
                         "8, \"pp_overlap\": true}",
                         &l, &err),
             DP_EUSAGE);
    CHECK_CONTAINS(err.msg, "plan.json: layout.pp_overlap: expected false without vpp > 1");
    dp_err_clear(&err);
    CHECK_EQ(layout_json("{\"tp\": 1, \"pp\": 1, \"dp\": 1, \"mbs\": 1, \"gbs\": 1, \"seq_len\": "
                         "8, \"fp8_params\": true}",
                         &l, &err),
             DP_EUSAGE);
    CHECK(strstr(err.msg, "layout.fp8_params: expected false without gemm_precision fp8") != NULL);
}

/* Measured memory peaks (issue 12): a peak alone is a run; the every-third rule holds out
 * the 3rd, 6th, ... memory-scored peak of the file; the predicted quantity is the one
 * measured on the GPU it was read on; the allocator slack is fitted to the reserved
 * peaks. */
static void test_memory_peaks(void)
{
    char text[8192] = "{\"dplan_runs\": 1, \"held_out_rule\": \"every-third\", \"runs\": [";
    const char *alloc = "\"peak_memory\": {\"gib\": 1.5, \"quantity\": \"allocated\"}";
    const char *res = "\"peak_memory\": {\"gib\": 1.5, \"quantity\": \"reserved\"}";
    const char *dev = "\"peak_memory\": {\"gib\": 1.5, \"quantity\": \"device\", "
                      "\"aggregation\": \"last-stage\"}";
    add_run(text, sizeof text, "a", alloc, "");
    add_run(text, sizeof text, "t", "\"iteration_time_s\": 1", "");
    add_run(text, sizeof text, "b", res, "");
    add_run(text, sizeof text, "c", dev, "");
    add_run(text, sizeof text, "d", res, "");
    strcat(text, "]}");
    const char *file = write_file("mem.json", text);
    struct dp_run *runs;
    int n;
    struct dp_err err = {0};
    if (!load_ok(file, &runs, &n))
        return;
    CHECK_EQ(n, 5);
    CHECK(!runs[0].has_time && !dp_run_scored(&runs[0]) && dp_run_mem_scored(&runs[0]));
    CHECK(runs[1].has_time && !dp_run_mem_scored(&runs[1]));
    CHECK_EQ(runs[0].mem_quantity, DP_MEMQ_ALLOCATED);
    CHECK_EQ(runs[2].mem_quantity, DP_MEMQ_RESERVED);
    CHECK_EQ(runs[3].mem_quantity, DP_MEMQ_DEVICE);
    CHECK_EQ(runs[3].mem_aggregation, DP_MEMAGG_LAST_STAGE);
    CHECK_NEAR(runs[0].peak_gib, 1.5, 0);
    /* peaks a, b, c, d: the third (c) is held out */
    bool want[5] = {false, false, false, true, false};
    for (int i = 0; i < n; i++)
        CHECK_EQ(runs[i].mem_held_out, want[i]);

    /* The quantities of one run's stage, as dp_mem_stage computes them. */
    struct dp_mem_result r[5];
    for (int i = 0; i < n; i++)
        CHECK_EQ(dp_run_predict_memory(&runs[i], &r[i], &err), 0);
    struct dp_mem_stage st;
    struct dp_mem_opts o;
    dp_mem_opts_default(&o);
    dp_mem_stage(&runs[0].model, &runs[0].cluster, &runs[0].layout, &o, 0, &st);
    const double gib = 1073741824.0;
    CHECK_NEAR(r[0].predicted_gib, (double)st.allocated_bytes / gib, 1e-12);
    CHECK_NEAR(r[2].predicted_gib, (double)st.reserved_bytes / gib, 1e-12);
    CHECK_NEAR(r[3].predicted_gib, (double)st.total_bytes / gib, 1e-12);
    CHECK_NEAR(r[2].error, r[2].predicted_gib / 1.5 - 1, 1e-12);
    CHECK_NEAR(r[1].predicted_gib, 0, 0); /* no peak measured */

    /* The slack fit: b alone (d is not held out either: b and d). Set both measured
     * peaks to allocated + 0.25 (allocated - states): the fit finds 0.25. */
    double a = r[2].allocated_gib, s = r[2].states_gib;
    runs[2].peak_gib = runs[4].peak_gib = a + 0.25 * (a - s);
    int used = 0;
    CHECK_NEAR(dp_fit_alloc_slack(runs, r, n, &used), 0.25, 1e-6);
    CHECK_EQ(used, 2);
    struct dp_val_stats ms = dp_mem_stats(runs, r, n, 1, NULL, "megatron");
    CHECK_EQ(ms.n, 1);
    CHECK_STR(ms.worst_id, "c");
    ms = dp_mem_stats(runs, r, n, -1, NULL, "torchtitan");
    CHECK_EQ(ms.n, 0);
    free(runs);
}

/* Load a runs file, predict each run (into res, room for cap) and pair them: the number of
 * pairs, or -1 when the file does not load. */
static int load_pairs(const char *file, enum dp_pair_kind kind, struct dp_run **runs,
                      struct dp_run_result *res, int cap, struct dp_run_pair **p)
{
    int n, np = 0;
    if (!load_ok(file, runs, &n))
        return -1;
    struct dp_err err = {0};
    CHECK(n <= cap);
    for (int i = 0; i < n && i < cap; i++)
        CHECK_EQ(dp_run_predict(&(*runs)[i], &res[i], &err), 0);
    CHECK_EQ(dp_run_pairs(*runs, res, n < cap ? n : cap, kind, p, &np, &err), 0);
    return np;
}

/* One run of Llama 2 7B on one node of a system, ZeRO-3 over its 8 GPUs. */
static void add_node_run(char *buf, size_t cap, const char *id, const char *system, int mbs,
                         double seconds, const char *extra)
{
    size_t n = strlen(buf);
    snprintf(buf + n, cap - n,
             "%s{\"id\": \"%s\", \"source\": \"test\", \"model\": \"llama2-7b\", "
             "\"system\": \"%s\", \"nodes\": 1, \"layout\": {\"tp\": 1, \"pp\": 1, "
             "\"dp\": 8, \"mbs\": %d, \"gbs\": %d, \"seq_len\": 4096, \"zero\": 3}, "
             "\"measured\": {\"iteration_time_s\": %g}%s}",
             n && buf[n - 1] != '[' ? ", " : "", id, system, mbs, 8 * mbs, seconds, extra);
}

static void test_gpu_pairs(void)
{
    /* Pairs are runs of one configuration on two GPUs: a100 with each H100 run of the same
     * layout (not the two H100 runs with each other, not the other micro-batch size, not the
     * unscored run). */
    char text[4096] = "{\"dplan_runs\": 1, \"runs\": [";
    add_node_run(text, sizeof text, "h100", "dgx-h100", 1, 4, "");
    add_node_run(text, sizeof text, "a100", "dgx-a100-80gb", 1, 10, "");
    add_node_run(text, sizeof text, "h100-again", "dgx-h100", 1, 5, "");
    add_node_run(text, sizeof text, "h100-mbs2", "dgx-h100", 2, 7, "");
    add_node_run(text, sizeof text, "a100-unscored", "dgx-a100-80gb", 1, 9,
                 ", \"underspecified\": true");
    strcat(text, "]}");
    struct dp_run *runs;
    struct dp_run_result res[5];
    struct dp_run_pair *p = NULL;
    int np = load_pairs(write_file("pairs.json", text), DP_PAIR_GPU, &runs, res, 5, &p);
    if (np < 0)
        return;
    CHECK_EQ(np, 2);
    if (np == 2) {
        /* The A100 comes first (its profile's name sorts first): 10 s / 4 s and 10 s / 5 s. */
        CHECK_STR(runs[p[0].a].id, "a100");
        CHECK_STR(runs[p[0].b].id, "h100");
        CHECK_STR(runs[p[1].b].id, "h100-again");
        CHECK_NEAR(p[0].measured, 2.5, 1e-12);
        CHECK_NEAR(p[1].measured, 2.0, 1e-12);
        CHECK_NEAR(p[0].error, p[0].predicted / 2.5 - 1, 1e-12);
        /* The same step on the two GPUs: an H100 SXM5 is faster than an A100 80GB by no less
         * than its slowest hardware ratio (NVLink 4 over 3: 450 / 300 GB/s per direction)
         * and by no more than its largest (dense bf16 peak: 989.4 / 312 TFLOP/s). */
        CHECK(p[0].predicted > 1.5 && p[0].predicted < 989.4 / 312);
        CHECK_NEAR(p[0].predicted, p[1].predicted, 1e-12);
        struct dp_pair_filter f = {.gpu_a = "a100-sxm4-80gb", .gpu_b = "h100-sxm5-80gb"};
        CHECK_EQ(dp_pair_stats(runs, p, np, &f).err.n, 2);
        f = (struct dp_pair_filter){.gpu_a = "h100-sxm5-80gb", .gpu_b = "a100-sxm4-80gb"};
        CHECK_EQ(dp_pair_stats(runs, p, np, &f).err.n, 0);
        CHECK_EQ(dp_pair_stats(runs, p, np, NULL).err.n, 2);
        /* The file holds nothing out, so no pair has two held-out runs. */
        f = (struct dp_pair_filter){.held_out = true};
        CHECK_EQ(dp_pair_stats(runs, p, np, &f).err.n, 0);
    }
    free(p);
    free(runs);
}

static void test_layout_pairs(void)
{
    /* Layout pairs: one source's runs of Llama 2 7B on the same 8 H100s with the same work per
     * step (8 sequences of 4096 tokens) under two layouts. zero 3 vs zero 1 pair; the ZeRO-3
     * run of another source does not, nor the run with twice the batch, nor the A100 one, nor
     * the one with as many tokens in sequences half as long (less attention work). */
    char text[8192] = "{\"dplan_runs\": 1, \"fitted\": false, \"runs\": [";
    add_node_run(text, sizeof text, "z3", "dgx-h100", 1, 10, "");
    add_node_run(text, sizeof text, "z3-other-source", "dgx-h100", 1, 11,
                 ", \"source_key\": \"other\"");
    add_node_run(text, sizeof text, "z3-mbs2", "dgx-h100", 2, 19, "");
    add_node_run(text, sizeof text, "z3-a100", "dgx-a100-80gb", 1, 25, "");
    size_t len = strlen(text);
    snprintf(text + len, sizeof text - len,
             ", {\"id\": \"z1\", \"source\": \"test\", \"model\": \"llama2-7b\", \"system\": "
             "\"dgx-h100\", \"nodes\": 1, \"layout\": {\"tp\": 1, \"pp\": 1, \"dp\": 8, "
             "\"mbs\": 1, \"gbs\": 8, \"seq_len\": 4096, \"zero\": 1}, \"measured\": "
             "{\"iteration_time_s\": 8}}, {\"id\": \"z3-half-seq\", \"source\": \"test\", "
             "\"model\": \"llama2-7b\", \"system\": \"dgx-h100\", \"nodes\": 1, \"layout\": "
             "{\"tp\": 1, \"pp\": 1, \"dp\": 8, \"mbs\": 2, \"gbs\": 16, \"seq_len\": 2048, "
             "\"zero\": 3}, \"measured\": {\"iteration_time_s\": 9}}]}");
    struct dp_run *runs;
    struct dp_run_result res[6];
    struct dp_run_pair *p = NULL;
    int np = load_pairs(write_file("layouts.json", text), DP_PAIR_LAYOUT, &runs, res, 6, &p);
    if (np < 0)
        return;
    CHECK_EQ(np, 1);
    if (np == 1) {
        CHECK_STR(runs[p[0].a].id, "z3");
        CHECK_STR(runs[p[0].b].id, "z1");
        CHECK_NEAR(p[0].measured, 10.0 / 8.0, 1e-12);
        /* ZeRO-1 keeps the parameters gathered: on one NVLink node it is not slower than
         * ZeRO-3, which gathers them again every micro-batch, so the pair is ranked right. */
        CHECK(p[0].predicted >= 1);
        CHECK(dp_pair_decided(&p[0]) && !dp_pair_misranked(&p[0]));
        /* "fitted": false holds out both runs: the pair counts among the held-out ones, ranked
         * right. */
        struct dp_pair_filter held = {.held_out = true};
        struct dp_pair_stats hs = dp_pair_stats(runs, p, np, &held);
        CHECK(hs.err.n == 1 && hs.decided == 1 && hs.right == 1);
        /* A pair measured within the noise has no faster side; one measured the other way
         * round is misranked. */
        struct dp_run_pair q = p[0];
        q.measured = 1.02;
        CHECK(!dp_pair_decided(&q) && !dp_pair_misranked(&q));
        q.measured = 0.9;
        CHECK(dp_pair_misranked(&q));
    }
    free(p);
    free(runs);
}

/* One run of Llama 3 8B on one node of DGX A100 80GB, ZeRO-1 over its 8 GPUs, with full
 * recompute and the fused attention kernel `attn` ("" for the GPU's default). */
static void add_attn_run(char *buf, size_t cap, const char *id, int seq, const char *attn)
{
    size_t n = strlen(buf);
    snprintf(buf + n, cap - n,
             "%s{\"id\": \"%s\", \"source\": \"test\", \"model\": \"llama3-8b\", "
             "\"system\": \"dgx-a100-80gb\", \"nodes\": 1, \"layout\": {\"tp\": 1, \"pp\": 1, "
             "\"dp\": 8, \"mbs\": 1, \"gbs\": 8, \"seq_len\": %d, \"recompute\": \"full\"%s%s%s}, "
             "\"measured\": {\"iteration_time_s\": 1}}",
             n && buf[n - 1] != '[' ? ", " : "", id, seq, *attn ? ", \"attention\": \"" : "", attn,
             *attn ? "\"" : "");
}

static double predicted_s(const struct dp_run *r)
{
    struct dp_run_result res;
    struct dp_err err = {0};
    return dp_run_predict(r, &res, &err) == 0 ? res.predicted_s : -1;
}

static void test_calibrate_attention(void)
{
    /* Parameter recovery: runs under the Triton kernel at 2k to 32k tokens (attention's share
     * of the step grows with the sequence) and two under the default FlashAttention-2, whose
     * "measured" times are the model's on an A100 whose GEMMs sustain eff_max 0.62 and whose
     * Triton kernel runs at 0.40 of a GEMM's speed; the fit starts from the profile's figures
     * (0.70, 0.50). With the kernel's figure free it lands on both; with the curve alone it
     * cannot follow how the Triton runs' time grows with the sequence. */
    char text[8192] = "{\"dplan_runs\": 1, \"runs\": [";
    static const int seqs[] = {2048, 4096, 8192, 16384, 32768};
    char id[32];
    for (int i = 0; i < 5; i++) {
        snprintf(id, sizeof id, "triton-%d", seqs[i]);
        add_attn_run(text, sizeof text, id, seqs[i], "triton");
    }
    add_attn_run(text, sizeof text, "flash2-4096", 4096, "");
    add_attn_run(text, sizeof text, "flash2-16384", 16384, "");
    strcat(text, "]}");
    const char *file = write_file("attn.json", text);
    struct dp_run *runs;
    int n;
    if (!load_ok(file, &runs, &n))
        return;
    CHECK_EQ(n, 7);
    CHECK_EQ(dp_run_attn(&runs[0]), DP_ATTN_TRITON);
    CHECK_EQ(dp_run_attn(&runs[5]), DP_ATTN_FLASH2);
    const double prior_eff = runs[0].cluster.gpu.gemm.eff_max;
    const double prior_tr = runs[0].cluster.gpu.attn_rel[DP_ATTN_TRITON];
    for (int i = 0; i < n; i++) {
        struct dp_run r = runs[i];
        r.cluster.gpu.gemm.eff_max = 0.62;
        r.cluster.gpu.attn_rel[DP_ATTN_TRITON] = 0.40;
        runs[i].iteration_time_s = predicted_s(&r);
        CHECK(runs[i].iteration_time_s > 0);
    }
    /* The Triton runs' time grows faster than the FlashAttention-2 runs' with the sequence. */
    CHECK(runs[3].iteration_time_s / runs[1].iteration_time_s >
          runs[6].iteration_time_s / runs[5].iteration_time_s);

    /* The 8k Triton run is held out: the fit does not read it, and reports it. */
    runs[2].held_out = true;
    struct dp_fit fit;
    struct dp_err err = {0};
    CHECK_EQ(dp_calibrate_gemm(runs, n, "a100-sxm4-80gb", DP_FIT_ALL, false, 1u << DP_ATTN_TRITON,
                               &fit, &err),
             0);
    CHECK_EQ(fit.nruns, 6);
    CHECK_EQ(fit.nheld, 1);
    CHECK(fit.held_before > 0.02 && fit.held_after < 1e-4);
    CHECK_EQ(fit.attn_runs[DP_ATTN_TRITON], 4);
    CHECK_EQ(fit.attn_runs[DP_ATTN_FLASH2], 2);
    CHECK_NEAR(fit.attn_prior[DP_ATTN_TRITON], prior_tr, 1e-12);
    CHECK_NEAR(fit.bf16.eff_max, 0.62, 1e-4);
    CHECK_NEAR(fit.attn_rel[DP_ATTN_TRITON], 0.40, 1e-4);
    CHECK(fit.mean_abs_after < 1e-4 && fit.mean_abs_before > 0.02);
    /* The untouched kernel keeps the profile's figure. */
    CHECK_NEAR(fit.attn_rel[DP_ATTN_FLASH2], runs[0].cluster.gpu.attn_rel[DP_ATTN_FLASH2], 1e-12);

    /* The curve alone: the runs' clusters got the fitted figures above, so start again from
     * the profile's. */
    for (int i = 0; i < n; i++) {
        runs[i].cluster.gpu.gemm.eff_max = prior_eff;
        runs[i].cluster.gpu.attn_rel[DP_ATTN_TRITON] = prior_tr;
    }
    struct dp_fit curve_only;
    CHECK_EQ(dp_calibrate_gemm(runs, n, "a100-sxm4-80gb", DP_FIT_ALL, false, 0, &curve_only, &err),
             0);
    CHECK(curve_only.mean_abs_after > 10 * fit.mean_abs_after + 0.005);

    /* A kernel no calibration run uses: one line naming it and the GPU. */
    err = (struct dp_err){0};
    CHECK_EQ(dp_calibrate_gemm(runs, n, "a100-sxm4-80gb", DP_FIT_ALL, false, 1u << DP_ATTN_FLASH1,
                               &fit, &err),
             DP_EINVAL);
    CHECK(strstr(err.msg, "\"flash1\"") && strstr(err.msg, "a100-sxm4-80gb"));
    free(runs);
}

static void add_fp8_run(char *buf, size_t cap, const char *id, int seq, int mbs, const char *recipe)
{
    size_t n = strlen(buf);
    snprintf(buf + n, cap - n,
             "%s{\"id\": \"%s\", \"source\": \"test\", \"model\": \"llama3-8b\", "
             "\"system\": \"hgx-b200\", \"nodes\": 1, \"layout\": {\"tp\": 1, \"pp\": 1, "
             "\"dp\": 8, \"mbs\": %d, \"gbs\": 64, \"seq_len\": %d, \"gemm_precision\": \"fp8\", "
             "\"fp8_recipe\": \"%s\"}, \"measured\": {\"iteration_time_s\": 1}}",
             n && buf[n - 1] != '[' ? ", " : "", id, mbs, seq, recipe);
}

static void test_calibrate_mxfp8(void)
{
    /* Parameter recovery: FP8 runs on a B200 at several sizes, current scaling and MXFP8,
     * "measured" as the model's on a GPU whose FP8 GEMMs sustain eff_max 0.55 and whose
     * MXFP8 GEMMs cost 40 us a call beyond a per-tensor one; the fit starts from the
     * profile's figures and lands on both. With MXFP8 runs alone the fixed cost cannot be
     * told from the curve: it is kept. */
    char text[8192] = "{\"dplan_runs\": 1, \"runs\": [";
    static const int seqs[] = {2048, 4096, 8192};
    char id[32];
    for (int i = 0; i < 3; i++)
        for (int k = 0; k < 2; k++) {
            snprintf(id, sizeof id, "%s-%d", k ? "mx" : "cs", seqs[i]);
            add_fp8_run(text, sizeof text, id, seqs[i], 1 + k, k ? "mxfp8" : "current");
        }
    strcat(text, "]}");
    const char *file = write_file("fp8.json", text);
    struct dp_run *runs;
    int n;
    if (!load_ok(file, &runs, &n))
        return;
    CHECK_EQ(n, 6);
    const struct dp_gpu prior = runs[0].cluster.gpu;
    CHECK(prior.fp8_block_scaling);
    CHECK(fabs(prior.gemm_fp8.eff_max - 0.55) > 0.02 && fabs(prior.mxfp8_fixed_s - 40e-6) > 5e-6);
    for (int i = 0; i < n; i++) {
        struct dp_run r = runs[i];
        r.cluster.gpu.gemm_fp8.eff_max = 0.55;
        r.cluster.gpu.mxfp8_fixed_s = 40e-6;
        runs[i].iteration_time_s = predicted_s(&r);
        CHECK(runs[i].iteration_time_s > 0);
    }
    struct dp_fit fit;
    struct dp_err err = {0};
    CHECK_EQ(dp_calibrate_gemm(runs, n, "b200-sxm-180gb", DP_FIT_ALL, false, 0, &fit, &err), 0);
    CHECK(fit.fit_fp8 && fit.fit_mx);
    CHECK_EQ(fit.nruns_mx, 3);
    CHECK_NEAR(fit.mxfp8_prior, prior.mxfp8_fixed_s * 1e6, 1e-9);
    CHECK_NEAR(fit.fp8.eff_max, 0.55, 1e-4);
    CHECK_NEAR(fit.mxfp8_us, 40.0, 0.05);
    CHECK(fit.mean_abs_before > 0.005 && fit.mean_abs_after < 1e-4);

    /* MXFP8 runs only (the current-scaling ones held out): the curve alone is fitted. */
    for (int i = 0; i < n; i++) {
        runs[i].cluster.gpu = prior;
        runs[i].held_out = runs[i].layout.fp8_recipe != DP_FP8_MXFP8;
    }
    struct dp_fit only;
    CHECK_EQ(dp_calibrate_gemm(runs, n, "b200-sxm-180gb", DP_FIT_ALL, false, 0, &only, &err), 0);
    CHECK(only.fit_fp8 && !only.fit_mx);
    CHECK_NEAR(only.mxfp8_us, prior.mxfp8_fixed_s * 1e6, 1e-9);
    free(runs);
}

int main(void)
{
    if (!mkdtemp(tmpdir))
        return 1;
    test_held_out_rule();
    test_waiting_and_stats();
    test_layout_knobs();
    test_memory_peaks();
    test_gpu_pairs();
    test_layout_pairs();
    test_calibrate_attention();
    test_calibrate_mxfp8();
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmpdir);
    if (system(cmd) != 0)
        return 1;
    return check_done("test_core_runs");
}
