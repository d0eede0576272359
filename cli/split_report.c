/*
 * The pipeline split report shared by `dplan estimate` and `dplan memory`
 * (split_report.h). Layer indices are 0-based, as Megatron and torchtitan
 * number them.
 */
#include "split_report.h"

#include <cjson/cJSON.h>
#include <string.h>

/* "E 0", "15-16", "125 L", "E" (no layers), appended to buf. */
static void chunk_text(const struct dp_layout *l, const struct dp_model *m, int r, int c, char *buf,
                       size_t cap)
{
    int S = l->pp * l->vpp, s = dp_layout_global_stage(l, r, c), a, n;
    dp_layout_chunk_layers(l, m, r, c, &a, &n);
    size_t at = strlen(buf);
    if (at >= cap)
        return;
    const char *e = s == 0 ? (n ? "E " : "E") : "", *lo = "";
    if (s == S - 1) /* the loss's chunk, its MTP layers (Megatron's 'm') before the loss */
        lo = l->mtp_layers > 0 ? (n ? " MTP L" : "MTP L") : (n ? " L" : "L");
    if (n == 0)
        snprintf(buf + at, cap - at, "%s%s", e, lo);
    else if (n == 1)
        snprintf(buf + at, cap - at, "%s%d%s", e, a, lo);
    else
        snprintf(buf + at, cap - at, "%s%d-%d%s", e, a, a + n - 1, lo);
}

bool cli_split_shown(const struct dp_layout *l)
{
    return l->pp > 1 &&
           (l->vpp > 1 || l->nchunks > 0 || l->first_stage_layers || l->last_stage_layers);
}

static bool same_shape(const struct dp_layout *l, const struct dp_model *m, int r1, int r2)
{
    for (int c = 0; c < l->vpp; c++)
        if (dp_layout_chunk_count(l, m, r1, c) != dp_layout_chunk_count(l, m, r2, c))
            return false;
    return true;
}

void cli_split_text(FILE *f, const struct dp_layout *l, const struct dp_model *m)
{
    if (l->pp < 2)
        return;
    int c[DP_MAX_CHUNKS], n = dp_layout_expand(l, m, c, DP_MAX_CHUNKS);
    if (n < 1)
        return;
    char meg[512];
    dp_split_format_megatron(c, n, l->mtp_layers, meg, sizeof meg);
    fprintf(f, "pipeline split: %lld layers over pp=%d", (long long)m->layers, l->pp);
    if (l->vpp > 1)
        fprintf(f, " x vpp=%d model chunks", l->vpp);
    if (l->schedule == DP_SCHED_DUALPIPEV)
        fprintf(f, " in a V (DualPipeV: rank r holds stages r and %d - r, the loss on rank 0)\n",
                2 * l->pp - 1);
    else
        fprintf(f, " (Megatron --pipeline-model-parallel-layout \"%s\")\n", meg);
    if (l->vpp == 1)
        return; /* the memory table's stage labels give the ranges */
    for (int r = 0; r < l->pp; r++) {
        int run = 1;
        if (l->pp > 16 && r > 0)
            while (r + run < l->pp - 1 && same_shape(l, m, r, r + run))
                run++;
        char line[1024] = "";
        if (run > 3) {
            int per = dp_layout_stage_layers(l, m, r);
            int a0, n0;
            dp_layout_chunk_layers(l, m, r, 0, &a0, &n0);
            fprintf(f, "  stages %d-%d %3d layers each:", r, r + run - 1, per);
            for (int k = 0; k < l->vpp; k++)
                fprintf(f, "%s%d", k ? "+" : " ", dp_layout_chunk_count(l, m, r, k));
            fprintf(f, " per chunk, from layer %d\n", a0);
            r += run - 1;
            continue;
        }
        for (int k = 0; k < l->vpp; k++) {
            if (k)
                strncat(line, " | ", sizeof line - strlen(line) - 1);
            chunk_text(l, m, r, k, line, sizeof line);
        }
        fprintf(f, "  stage %-3d %3d layers: %s\n", r, dp_layout_stage_layers(l, m, r), line);
    }
}

cJSON *cli_split_json(const struct dp_layout *l, const struct dp_model *m)
{
    cJSON *o = cJSON_CreateObject();
    int c[DP_MAX_CHUNKS], n = dp_layout_expand(l, m, c, DP_MAX_CHUNKS);
    cJSON_AddNumberToObject(o, "pp", l->pp);
    cJSON_AddNumberToObject(o, "vpp", l->vpp);
    cJSON_AddNumberToObject(o, "layers", (double)m->layers);
    if (n < 1)
        return o;
    cJSON *a = cJSON_AddArrayToObject(o, "stage_layers");
    for (int s = 0; s < n; s++)
        cJSON_AddItemToArray(a, cJSON_CreateNumber(c[s]));
    char meg[4096];
    dp_split_format_megatron(c, n, l->mtp_layers, meg, sizeof meg);
    if (l->schedule == DP_SCHED_DUALPIPEV)
        cJSON_AddStringToObject(o, "schedule", "dualpipev"); /* stages r and 2 pp - 1 - r a rank */
    else
        cJSON_AddStringToObject(o, "megatron_layout", meg);
    return o;
}
