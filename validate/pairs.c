/*
 * GPU against GPU: two runs of the same model under the same layout on the same number of
 * GPUs of two kinds, measured by one source with one software stack, differ only in the
 * hardware. Their measured speed ratio tests what the step-time model says of one GPU
 * against another (the question `dplan whatif` answers), apart from the framework's own
 * efficiency, which the ratio cancels.
 */
#include "validate.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

/* What must agree for two runs to pair: the model's architecture (not its name) and the
 * layout, as their JSON, and the GPU count. NULL when out of memory. */
static char *config_key(const struct dp_run *r)
{
    cJSON *o = cJSON_CreateObject();
    cJSON *m = dp_model_to_json(&r->model);
    cJSON *l = dp_layout_to_json(&r->layout);
    if (!o || !m || !l) {
        cJSON_Delete(o);
        cJSON_Delete(m);
        cJSON_Delete(l);
        return NULL;
    }
    cJSON_DeleteItemFromObjectCaseSensitive(m, "name");
    cJSON_AddItemToObject(o, "model", m);
    cJSON_AddItemToObject(o, "layout", l);
    cJSON_AddNumberToObject(o, "gpus", dp_cluster_gpus(&r->cluster));
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return s;
}

int dp_run_pairs(const struct dp_run *runs, const struct dp_run_result *res, int n,
                 struct dp_run_pair **out, int *npairs, struct dp_err *err)
{
    *out = NULL;
    *npairs = 0;
    char **key = calloc((size_t)(n > 0 ? n : 1), sizeof *key);
    if (!key)
        return dp_err_set(err, DP_ENOMEM, "out of memory");
    int rc = 0, cap = 0;
    for (int i = 0; i < n && !rc; i++)
        if (dp_run_scored(&runs[i]) && !(key[i] = config_key(&runs[i])))
            rc = dp_err_set(err, DP_ENOMEM, "out of memory");
    for (int i = 0; i < n && !rc; i++) {
        for (int j = i + 1; j < n && key[i] && !rc; j++) {
            if (!key[j] || strcmp(key[i], key[j]) != 0)
                continue;
            int c = strcmp(runs[i].cluster.gpu.name, runs[j].cluster.gpu.name);
            if (c == 0)
                continue;
            if (*npairs == cap) {
                int ncap = cap ? 2 * cap : 16;
                struct dp_run_pair *p = realloc(*out, (size_t)ncap * sizeof *p);
                if (!p) {
                    rc = dp_err_set(err, DP_ENOMEM, "out of memory");
                    break;
                }
                *out = p;
                cap = ncap;
            }
            struct dp_run_pair *p = &(*out)[(*npairs)++];
            p->a = c < 0 ? i : j;
            p->b = c < 0 ? j : i;
            p->measured = res[p->a].measured_s / res[p->b].measured_s;
            p->predicted = res[p->a].predicted_s / res[p->b].predicted_s;
            p->error = p->predicted / p->measured - 1;
        }
    }
    for (int i = 0; i < n; i++)
        cJSON_free(key[i]);
    free(key);
    if (rc) {
        free(*out);
        *out = NULL;
        *npairs = 0;
    }
    return rc;
}

struct dp_val_stats dp_pair_stats(const struct dp_run *runs, const struct dp_run_pair *pairs, int n,
                                  const char *gpu_a, const char *gpu_b)
{
    struct dp_val_stats s = {0, 0, 0, ""};
    for (int i = 0; i < n; i++) {
        const struct dp_run_pair *p = &pairs[i];
        if (gpu_a && (strcmp(runs[p->a].cluster.gpu.name, gpu_a) != 0 ||
                      strcmp(runs[p->b].cluster.gpu.name, gpu_b) != 0))
            continue;
        double e = p->error < 0 ? -p->error : p->error;
        s.mean += e;
        s.n++;
        if (e > s.worst || s.n == 1) {
            s.worst = e;
            s.worst_id = runs[p->b].id;
        }
    }
    if (s.n)
        s.mean /= s.n;
    return s;
}
