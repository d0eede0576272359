/*
 * plan.json reading and writing. The prediction object is open: readers take
 * the numbers they know (step_time_s, tokens_per_s, mfu, peak_bytes,
 * stage_peak_bytes) and ignore the rest, so planners can add detail.
 */
#include "core.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <string.h>

static void read_prediction(const cJSON *o, struct dp_prediction *p)
{
    const cJSON *v;
    if ((v = cJSON_GetObjectItemCaseSensitive(o, "step_time_s")) && cJSON_IsNumber(v))
        p->step_time_s = v->valuedouble;
    if ((v = cJSON_GetObjectItemCaseSensitive(o, "tokens_per_s")) && cJSON_IsNumber(v))
        p->tokens_per_s = v->valuedouble;
    if ((v = cJSON_GetObjectItemCaseSensitive(o, "mfu")) && cJSON_IsNumber(v))
        p->mfu = v->valuedouble;
    if ((v = cJSON_GetObjectItemCaseSensitive(o, "peak_bytes")) && cJSON_IsNumber(v))
        p->peak_bytes = (int64_t)v->valuedouble;
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(o, "stage_peak_bytes");
    if (cJSON_IsArray(a)) {
        int i = 0;
        for (const cJSON *it = a->child; it && i < DP_PLAN_MAX_STAGES_RECORDED; it = it->next)
            if (cJSON_IsNumber(it))
                p->stage_peak_bytes[i++] = (int64_t)it->valuedouble;
        p->nstages = i;
    }
}

int dp_plan_from_json(struct dp_jr *jr, const cJSON *obj, struct dp_plan *out)
{
    static const char *const keys[] = {"dplan_plan", "created_by", "model",   "cluster",
                                       "layout",     "prediction", "explain", NULL};
    memset(out, 0, sizeof *out);
    int64_t ver = 0;
    if (dp_jr_expect_object(jr, obj, "a plan object") || dp_jr_check_keys(jr, obj, keys) ||
        dp_jr_int(jr, obj, "dplan_plan", true, 1, 1000, &ver) ||
        dp_jr_string(jr, obj, "created_by", false, out->created_by, sizeof out->created_by))
        return jr->err->code;
    if (ver != DP_PLAN_VERSION)
        return dp_err_set(jr->err, DP_EINVAL,
                          "%s: dplan_plan: expected version %d, got %lld (written by a newer "
                          "dplan?)",
                          jr->file, DP_PLAN_VERSION, (long long)ver);
    out->version = (int)ver;
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(obj, "model");
    const cJSON *l = cJSON_GetObjectItemCaseSensitive(obj, "layout");
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(obj, "cluster");
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(obj, "prediction");
    if (!m)
        return dp_err_set(jr->err, DP_EINVAL,
                          "%s: model: missing required field (expected a model object)", jr->file);
    if (!l)
        return dp_err_set(jr->err, DP_EINVAL,
                          "%s: layout: missing required field (expected a layout object)",
                          jr->file);
    size_t old = dp_jr_push(jr, "model", 0);
    if (dp_model_from_json(jr, m, &out->model))
        return jr->err->code;
    dp_jr_pop(jr, old);
    old = dp_jr_push(jr, "layout", 0);
    if (dp_layout_from_json(jr, l, &out->layout))
        return jr->err->code;
    dp_jr_pop(jr, old);
    if (c && !cJSON_IsNull(c)) {
        old = dp_jr_push(jr, "cluster", 0);
        if (dp_cluster_from_json(jr, c, &out->cluster))
            return jr->err->code;
        dp_jr_pop(jr, old);
        out->has_cluster = true;
    }
    if (p && !cJSON_IsNull(p)) {
        old = dp_jr_push(jr, "prediction", 0);
        if (dp_jr_expect_object(jr, p, "a prediction object"))
            return jr->err->code;
        dp_jr_pop(jr, old);
        read_prediction(p, &out->prediction);
        out->has_prediction = true;
    }
    struct dp_err lerr = {0};
    int gpus = out->has_cluster ? dp_cluster_gpus(&out->cluster) : 0;
    if (dp_layout_validate(&out->layout, &out->model, gpus, &lerr))
        return dp_err_set(jr->err, DP_EINVAL, "%s: layout: %s", jr->file, lerr.msg);
    return 0;
}

int dp_plan_load(const char *file, struct dp_plan *out, struct dp_err *err)
{
    cJSON *root;
    int rc = dp_json_load_file(file, &root, err);
    if (rc)
        return rc;
    struct dp_jr jr = {.file = file, .err = err};
    rc = dp_plan_from_json(&jr, root, out);
    cJSON_Delete(root);
    return rc;
}

cJSON *dp_plan_to_json(const struct dp_plan *p, cJSON *prediction_extra)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "dplan_plan", DP_PLAN_VERSION);
    if (p->created_by[0])
        cJSON_AddStringToObject(o, "created_by", p->created_by);
    cJSON_AddItemToObject(o, "model", dp_model_to_json(&p->model));
    if (p->has_cluster)
        cJSON_AddItemToObject(o, "cluster", dp_cluster_to_json(&p->cluster));
    /* The split spelled out for every plan (the even one too), so that whoever runs it
     * reads the stage and chunk layer counts rather than re-deriving them. */
    struct dp_layout l = p->layout;
    if (dp_layout_make_explicit(&l, &p->model))
        l = p->layout;
    cJSON_AddItemToObject(o, "layout", dp_layout_to_json(&l));
    if (p->has_prediction || prediction_extra) {
        cJSON *pr = prediction_extra ? prediction_extra : cJSON_CreateObject();
        const struct dp_prediction *d = &p->prediction;
        if (p->has_prediction) {
            cJSON_DeleteItemFromObjectCaseSensitive(pr, "step_time_s");
            cJSON_DeleteItemFromObjectCaseSensitive(pr, "tokens_per_s");
            cJSON_DeleteItemFromObjectCaseSensitive(pr, "mfu");
            cJSON_DeleteItemFromObjectCaseSensitive(pr, "peak_bytes");
            cJSON_DeleteItemFromObjectCaseSensitive(pr, "stage_peak_bytes");
            cJSON_AddNumberToObject(pr, "step_time_s", d->step_time_s);
            cJSON_AddNumberToObject(pr, "tokens_per_s", d->tokens_per_s);
            cJSON_AddNumberToObject(pr, "mfu", d->mfu);
            cJSON_AddNumberToObject(pr, "peak_bytes", (double)d->peak_bytes);
            cJSON *a = cJSON_AddArrayToObject(pr, "stage_peak_bytes");
            for (int i = 0; i < d->nstages; i++)
                cJSON_AddItemToArray(a, cJSON_CreateNumber((double)d->stage_peak_bytes[i]));
        }
        cJSON_AddItemToObject(o, "prediction", pr);
    }
    return o;
}

int dp_plan_save(const char *file, const struct dp_plan *p, cJSON *prediction_extra,
                 struct dp_err *err)
{
    cJSON *o = dp_plan_to_json(p, prediction_extra);
    int rc = dp_json_save_file(file, o, err);
    cJSON_Delete(o);
    return rc;
}
