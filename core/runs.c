/*
 * Measured-runs files: published (or the user's own) training runs with the
 * layout each used and what was measured. Only reading and checking here;
 * comparison with the cost model is planner/validate.c.
 */
#include "core.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* "needs": ["fp8", "hsdp"]: short lowercase names of what the run used that dplan does
 * not model yet, joined into out->needs. */
static int needs_from_json(struct dp_jr *jr, const cJSON *r, struct dp_run *out)
{
    const cJSON *nd = cJSON_GetObjectItemCaseSensitive(r, "needs");
    if (!nd)
        return 0;
    size_t old = dp_jr_push(jr, "needs", 0);
    if (!cJSON_IsArray(nd) || cJSON_GetArraySize(nd) == 0)
        return dp_err_set(jr->err, DP_EINVAL, "%s: %s: expected a non-empty array of names",
                          jr->file, jr->path);
    size_t len = 0;
    int i = 0;
    for (const cJSON *e = nd->child; e; e = e->next, i++) {
        bool ok = cJSON_IsString(e) && e->valuestring[0] && strlen(e->valuestring) <= 24;
        for (const char *c = ok ? e->valuestring : ""; *c; c++)
            ok &= (*c >= 'a' && *c <= 'z') || (*c >= '0' && *c <= '9') || *c == '-';
        if (!ok) {
            char got[128];
            dp_json_describe(e, got, sizeof got);
            return dp_err_set(jr->err, DP_EINVAL,
                              "%s: %s[%d]: expected a name of [a-z0-9-], at most 24 characters, "
                              "got %s",
                              jr->file, jr->path, i, got);
        }
        if (len + strlen(e->valuestring) + 3 > sizeof out->needs)
            return dp_err_set(jr->err, DP_EINVAL, "%s: %s: too many names", jr->file, jr->path);
        len += (size_t)snprintf(out->needs + len, sizeof out->needs - len, "%s%s", len ? ", " : "",
                                e->valuestring);
    }
    dp_jr_pop(jr, old);
    return 0;
}

static int run_from_json(struct dp_jr *jr, const cJSON *r, struct dp_run *out)
{
    static const char *const keys[] = {"id",       "source",         "model",  "system",   "nodes",
                                       "network",  "cluster",        "layout", "measured", "notes",
                                       "held_out", "underspecified", "needs",  NULL};
    static const char *const conv[] = {"narayanan21", "model"};
    memset(out, 0, sizeof *out);
    if (dp_jr_expect_object(jr, r, "a run object") || dp_jr_check_keys(jr, r, keys) ||
        dp_jr_string(jr, r, "id", true, out->id, sizeof out->id) ||
        dp_jr_bool(jr, r, "held_out", false, &out->held_out) ||
        dp_jr_bool(jr, r, "underspecified", false, &out->underspecified))
        return jr->err->code;
    if (needs_from_json(jr, r, out))
        return jr->err->code;
    const cJSON *mo = cJSON_GetObjectItemCaseSensitive(r, "model");
    size_t old = dp_jr_push(jr, "model", 0);
    if (cJSON_IsString(mo)) {
        struct dp_err sub = {0};
        if (dp_model_load(mo->valuestring, &out->model, &sub))
            return dp_err_set(jr->err, sub.code, "%s: %s: %s", jr->file, jr->path, sub.msg);
    } else if (!mo) {
        return dp_err_set(jr->err, DP_EINVAL,
                          "%s: %s: missing required field (expected model name or object)",
                          jr->file, jr->path);
    } else if (dp_model_from_json(jr, mo, &out->model)) {
        return jr->err->code;
    }
    dp_jr_pop(jr, old);
    const cJSON *co = cJSON_GetObjectItemCaseSensitive(r, "cluster");
    if (co) {
        old = dp_jr_push(jr, "cluster", 0);
        if (dp_cluster_from_json(jr, co, &out->cluster))
            return jr->err->code;
        dp_jr_pop(jr, old);
    } else {
        char sys[64], net[64] = "";
        int64_t nodes = 1;
        if (dp_jr_string(jr, r, "system", true, sys, sizeof sys) ||
            dp_jr_int(jr, r, "nodes", true, 1, 1000000, &nodes) ||
            dp_jr_string(jr, r, "network", false, net, sizeof net))
            return jr->err->code;
        struct dp_err sub = {0};
        if (dp_cluster_from_system(sys, (int)nodes, net[0] ? net : NULL, &out->cluster, &sub))
            return dp_err_set(jr->err, sub.code, "%s: %s: %s", jr->file, jr->path, sub.msg);
    }
    const cJSON *lo = cJSON_GetObjectItemCaseSensitive(r, "layout");
    if (!lo)
        return dp_err_set(jr->err, DP_EINVAL,
                          "%s: %s: layout: missing required field (expected a layout object)",
                          jr->file, jr->path);
    old = dp_jr_push(jr, "layout", 0);
    if (dp_layout_from_json(jr, lo, &out->layout))
        return jr->err->code;
    dp_jr_pop(jr, old);
    const cJSON *me = cJSON_GetObjectItemCaseSensitive(r, "measured");
    old = dp_jr_push(jr, "measured", 0);
    static const char *const mkeys[] = {"iteration_time_s", "tflops_per_gpu", "flops",
                                        "tokens_per_s_per_gpu", NULL};
    int c = 0;
    if (dp_jr_expect_object(jr, me,
                            "an object {iteration_time_s}, {tflops_per_gpu, flops} or "
                            "{tokens_per_s_per_gpu}") ||
        dp_jr_check_keys(jr, me, mkeys) ||
        dp_jr_number(jr, me, "iteration_time_s", false, 1e-6, 1e7, &out->iteration_time_s) ||
        dp_jr_number(jr, me, "tflops_per_gpu", false, 1e-3, 1e6, &out->tflops_per_gpu) ||
        dp_jr_number(jr, me, "tokens_per_s_per_gpu", false, 1e-3, 1e9,
                     &out->tokens_per_s_per_gpu) ||
        (out->tflops_per_gpu > 0 && dp_jr_enum(jr, me, "flops", true, conv, 2, &c)))
        return jr->err->code;
    if ((out->iteration_time_s > 0) + (out->tflops_per_gpu > 0) + (out->tokens_per_s_per_gpu > 0) !=
        1)
        return dp_err_set(jr->err, DP_EINVAL,
                          "%s: %s: expected exactly one of iteration_time_s, tflops_per_gpu and "
                          "tokens_per_s_per_gpu",
                          jr->file, jr->path);
    out->flops = out->tflops_per_gpu > 0 ? (enum dp_flops_convention)(c + 1) : DP_FLOPS_NONE;
    dp_jr_pop(jr, old);
    struct dp_err lerr = {0};
    if (dp_layout_validate(&out->layout, &out->model, dp_cluster_gpus(&out->cluster), &lerr))
        return dp_err_set(jr->err, DP_EINVAL, "%s: %s.layout: %s", jr->file, jr->path, lerr.msg);
    return 0;
}

int dp_runs_load(const char *file, struct dp_run **runs, int *n, struct dp_err *err)
{
    *runs = NULL;
    *n = 0;
    cJSON *root;
    int rc = dp_json_load_file(file, &root, err);
    if (rc)
        return rc;
    struct dp_jr jr = {.file = file, .err = err};
    static const char *const keys[] = {"dplan_runs", "description", "runs", NULL};
    int64_t ver;
    const cJSON *arr = cJSON_GetObjectItemCaseSensitive(root, "runs");
    if (dp_jr_expect_object(&jr, root, "a runs object") || dp_jr_check_keys(&jr, root, keys) ||
        dp_jr_int(&jr, root, "dplan_runs", true, 1, 1, &ver)) {
        rc = err->code;
        goto out;
    }
    if (!cJSON_IsArray(arr) || cJSON_GetArraySize(arr) == 0) {
        rc = dp_err_set(err, DP_EINVAL, "%s: runs: expected a non-empty array of runs", file);
        goto out;
    }
    int count = cJSON_GetArraySize(arr);
    struct dp_run *rs = calloc((size_t)count, sizeof *rs);
    if (!rs) {
        rc = dp_err_set(err, DP_ENOMEM, "%s: out of memory", file);
        goto out;
    }
    int i = 0;
    for (const cJSON *r = arr->child; r; r = r->next, i++) {
        size_t old = dp_jr_push(&jr, "runs", 0);
        dp_jr_push(&jr, NULL, i);
        if (run_from_json(&jr, r, &rs[i])) {
            free(rs);
            rc = err->code;
            goto out;
        }
        dp_jr_pop(&jr, old);
    }
    *runs = rs;
    *n = count;
out:
    cJSON_Delete(root);
    return rc;
}
