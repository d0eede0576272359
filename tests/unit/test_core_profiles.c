/*
 * Every shipped profile loads, and cites a source for every number it holds
 * (the "sources" object has an entry per numeric field or numeric group).
 * Also: clusters built from systems carry the system's counts.
 */
#include "check.h"
#include "core/core.h"

#include <cjson/cJSON.h>
#include <stdlib.h>

static void check_sources(const char *kind, const char *name)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s/%s.json", dp_profiles_dir(), kind, name);
    cJSON *root;
    struct dp_err err = {0};
    if (dp_json_load_file(path, &root, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        check_failures++;
        return;
    }
    const cJSON *src = cJSON_GetObjectItemCaseSensitive(root, "sources");
    for (const cJSON *it = root->child; it; it = it->next) {
        bool numeric = cJSON_IsNumber(it);
        if (cJSON_IsObject(it) && strcmp(it->string, "sources") != 0)
            for (const cJSON *c = it->child; c; c = c->next)
                numeric |= cJSON_IsNumber(c);
        if (!numeric)
            continue;
        if (!cJSON_GetObjectItemCaseSensitive(src, it->string)) {
            fprintf(stderr, "%s: %s has no entry in \"sources\"\n", path, it->string);
            check_failures++;
        }
    }
    cJSON_Delete(root);
}

static void each(const char *kind)
{
    char **names;
    int n;
    struct dp_err err = {0};
    CHECK_EQ(dp_profile_names(kind, &names, &n, &err), 0);
    CHECK(n >= 4);
    for (int i = 0; i < n; i++) {
        struct dp_err e = {0};
        int rc;
        if (strcmp(kind, "gpu") == 0) {
            struct dp_gpu g;
            rc = dp_gpu_load(names[i], &g, &e);
            /* Dense peaks: bf16 is the tensor-core rate, above the plain fp32 rate. */
            if (!rc)
                CHECK(g.peak_tflops[DP_BF16] > g.peak_tflops[DP_FP32]);
        } else if (strcmp(kind, "interconnect") == 0) {
            struct dp_link l;
            rc = dp_link_load(names[i], &l, &e);
        } else if (strcmp(kind, "network") == 0) {
            struct dp_link l;
            rc = dp_network_load(names[i], &l, &e);
        } else {
            struct dp_system s;
            rc = dp_system_load(names[i], &s, &e);
            if (!rc) {
                struct dp_cluster c;
                struct dp_err e2 = {0};
                CHECK_EQ(dp_cluster_from_system(names[i], 3, NULL, &c, &e2), 0);
                CHECK_EQ(dp_cluster_gpus(&c), 3 * s.gpus_per_node);
                CHECK_EQ(c.nics_per_node, s.nics_per_node);
            }
        }
        if (rc) {
            fprintf(stderr, "%s\n", e.msg);
            check_failures++;
        }
        check_sources(kind, names[i]);
    }
    dp_names_free(names, n);
}

int main(void)
{
    each("gpu");
    each("interconnect");
    each("network");
    each("system");
    /* The figures the brief insists on: dense, not 2:4-sparse, H100 SXM bf16. */
    struct dp_gpu h100;
    struct dp_err err = {0};
    CHECK_EQ(dp_gpu_load("h100-sxm5-80gb", &h100, &err), 0);
    CHECK_NEAR(h100.peak_tflops[DP_BF16], 989.4, 1e-3);
    /* A cluster round-trips through its JSON form. */
    struct dp_cluster c, c2;
    CHECK_EQ(dp_cluster_from_system("dgx-h100", 4, "roce-400", &c, &err), 0);
    cJSON *o = dp_cluster_to_json(&c);
    struct dp_jr jr = {.file = "roundtrip", .err = &err};
    CHECK_EQ(dp_cluster_from_json(&jr, o, &c2), 0);
    cJSON_Delete(o);
    CHECK_EQ(c2.nodes, 4);
    CHECK_STR(c2.inter.name, "roce-400");
    CHECK_NEAR(c2.gpu.mem_bw_gbps, c.gpu.mem_bw_gbps, 0);
    CHECK_NEAR(c2.intra.bw_gbps, c.intra.bw_gbps, 0);
    CHECK_EQ(c2.gpu.mxfp8_fixed_s, 0); /* Hopper: no MXFP8 */

    /* MXFP8's fixed cost per GEMM: a fitted figure kept through the cluster's JSON form,
     * none where a profile has none, refused on a GPU without block scaling or out of its
     * range. */
    struct dp_gpu b;
    CHECK_EQ(dp_gpu_load("gb300-279gb", &b, &err), 0);
    CHECK(b.fp8_block_scaling && b.mxfp8_fixed_s > 0);
    struct dp_cluster g3, g3b;
    CHECK_EQ(dp_cluster_from_system("gb300-nvl72", 1, NULL, &g3, &err), 0);
    o = dp_cluster_to_json(&g3);
    CHECK_EQ(dp_cluster_from_json(&jr, o, &g3b), 0);
    CHECK_NEAR(g3b.gpu.mxfp8_fixed_s, b.mxfp8_fixed_s, 1e-15);
    cJSON *gj = cJSON_GetObjectItemCaseSensitive(o, "gpu");
    CHECK(gj != NULL);
    cJSON_DeleteItemFromObjectCaseSensitive(gj, "mxfp8_gemm_us");
    CHECK_EQ(dp_cluster_from_json(&jr, o, &g3b), 0);
    CHECK_EQ(g3b.gpu.mxfp8_fixed_s, 0);
    cJSON_AddNumberToObject(gj, "mxfp8_gemm_us", -1);
    CHECK(dp_cluster_from_json(&jr, o, &g3b) != 0);
    CHECK_CONTAINS(err.msg, "mxfp8_gemm_us");
    dp_err_clear(&err);
    cJSON_Delete(o);
    o = dp_cluster_to_json(&c);
    gj = cJSON_GetObjectItemCaseSensitive(o, "gpu");
    cJSON_AddNumberToObject(gj, "mxfp8_gemm_us", 10);
    CHECK(dp_cluster_from_json(&jr, o, &c2) != 0);
    CHECK_CONTAINS(err.msg, "mxfp8_gemm_us: expected none without \"fp8_block_scaling\"");
    cJSON_Delete(o);
    return check_done("test_core_profiles");
}
