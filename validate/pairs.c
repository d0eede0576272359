/*
 * One choice against another, as published: the same training step measured twice by
 * one source with one thing changed. Two runs of the same model under the same layout on
 * the same number of GPUs of two kinds test what the model says of one GPU against another
 * (the question `dplan whatif` answers); two runs of one source on the same GPUs doing the
 * same work per step under two layouts test what it says of one layout against another
 * (the ranking `dplan suggest` makes). In a ratio the framework's own efficiency, which
 * both runs share, cancels.
 */
#include "validate.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* The JSON of the model's architecture (not its name) and, for GPU pairs, the layout. NULL
 * when out of memory. */
static char *key_json(const struct dp_run *r, bool with_layout)
{
    cJSON *o = cJSON_CreateObject();
    cJSON *m = dp_model_to_json(&r->model);
    cJSON *l = with_layout ? dp_layout_to_json(&r->layout) : cJSON_CreateNull();
    if (!o || !m || !l) {
        cJSON_Delete(o);
        cJSON_Delete(m);
        cJSON_Delete(l);
        return NULL;
    }
    cJSON_DeleteItemFromObjectCaseSensitive(m, "name");
    cJSON_AddItemToObject(o, "model", m);
    cJSON_AddItemToObject(o, "layout", l);
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return s;
}

static char *layout_json(const struct dp_run *r)
{
    cJSON *l = dp_layout_to_json(&r->layout);
    char *s = l ? cJSON_PrintUnformatted(l) : NULL;
    cJSON_Delete(l);
    return s;
}

/* Whether runs i and j (scored, keys set) make a pair of this kind; *swap when j's GPU
 * name sorts before i's (GPU pairs put that one first). */
static bool pairs_with(const struct dp_run *a, const struct dp_run *b, const char *ka,
                       const char *kb, const char *la, const char *lb, enum dp_pair_kind kind,
                       bool *swap)
{
    *swap = false;
    if (dp_cluster_gpus(&a->cluster) != dp_cluster_gpus(&b->cluster) || strcmp(ka, kb) != 0)
        return false;
    int c = strcmp(a->cluster.gpu.name, b->cluster.gpu.name);
    if (kind == DP_PAIR_GPU) {
        *swap = c > 0;
        return c != 0;
    }
    return c == 0 && strcmp(a->source_key, b->source_key) == 0 && a->layout.gbs == b->layout.gbs &&
           a->layout.seq_len == b->layout.seq_len && strcmp(la, lb) != 0;
}

int dp_run_pairs(const struct dp_run *runs, const struct dp_run_result *res, int n,
                 enum dp_pair_kind kind, struct dp_run_pair **out, int *npairs, struct dp_err *err)
{
    *out = NULL;
    *npairs = 0;
    size_t cnt = (size_t)(n > 0 ? n : 1);
    char **key = calloc(cnt, sizeof *key), **lay = calloc(cnt, sizeof *lay);
    int rc = key && lay ? 0 : dp_err_set(err, DP_ENOMEM, "out of memory"), cap = 0;
    for (int i = 0; i < n && !rc; i++) {
        if (!dp_run_scored(&runs[i]))
            continue;
        key[i] = key_json(&runs[i], kind == DP_PAIR_GPU);
        lay[i] = layout_json(&runs[i]);
        if (!key[i] || !lay[i])
            rc = dp_err_set(err, DP_ENOMEM, "out of memory");
    }
    for (int i = 0; i < n && !rc; i++) {
        for (int j = i + 1; j < n && key[i] && !rc; j++) {
            bool swap;
            if (!key[j] ||
                !pairs_with(&runs[i], &runs[j], key[i], key[j], lay[i], lay[j], kind, &swap))
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
            p->kind = kind;
            p->a = swap ? j : i;
            p->b = swap ? i : j;
            p->measured = res[p->a].measured_s / res[p->b].measured_s;
            p->predicted = res[p->a].predicted_s / res[p->b].predicted_s;
            p->error = p->predicted / p->measured - 1;
        }
    }
    for (int i = 0; key && lay && i < n; i++) {
        cJSON_free(key[i]);
        cJSON_free(lay[i]);
    }
    free(key);
    free(lay);
    if (rc) {
        free(*out);
        *out = NULL;
        *npairs = 0;
    }
    return rc;
}

static bool matches(const char *want, const char *have)
{
    return !want || strcmp(want, have) == 0;
}

struct dp_pair_stats dp_pair_stats(const struct dp_run *runs, const struct dp_run_pair *pairs,
                                   int n, const struct dp_pair_filter *f)
{
    struct dp_pair_stats s = {{0, 0, 0, ""}, 0, 0};
    for (int i = 0; i < n; i++) {
        const struct dp_run_pair *p = &pairs[i];
        const struct dp_run *a = &runs[p->a], *b = &runs[p->b];
        if (f &&
            !(matches(f->gpu_a, a->cluster.gpu.name) && matches(f->gpu_b, b->cluster.gpu.name) &&
              matches(f->source, a->source_key) && (!f->held_out || (a->held_out && b->held_out))))
            continue;
        double e = fabs(p->error);
        s.err.mean += e;
        s.err.n++;
        if (e > s.err.worst || s.err.n == 1) {
            s.err.worst = e;
            s.err.worst_id = b->id;
        }
        if (dp_pair_decided(p)) {
            s.decided++;
            s.right += !dp_pair_misranked(p);
        }
    }
    if (s.err.n)
        s.err.mean /= s.err.n;
    return s;
}

bool dp_pair_decided(const struct dp_run_pair *p)
{
    return fabs(log(p->measured)) > log(1 + DP_PAIR_NOISE);
}

bool dp_pair_misranked(const struct dp_run_pair *p)
{
    return dp_pair_decided(p) && (p->measured > 1) != (p->predicted > 1);
}
