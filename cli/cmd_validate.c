/*
 * dplan validate [RUNS...]: predicted against measured step times of
 * published (or your own) training runs; each run's error, then the mean and
 * worst absolute percentage error of the scored runs, overall, for the runs
 * the GPU curves were fitted on and for the held-out ones, per source, per
 * GPU and per framework profile. tests/validation/ is the shipped data set.
 */
#include "cli.h"
#include "svg_charts.h"
#include "validate/validate.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static const char help[] =
    "usage: dplan validate [RUNS.json|DIR ...] [--json] [--verbose] [--svg FILE] [bars]\n"
    "       dplan validate [RUNS.json|DIR ...] --memory|--pairs [--json] [bars]\n\n"
    "Compare the step-time model with measured training runs. Each run names a\n"
    "model, a system and node count (or a cluster object), the layout it used\n"
    "(GEMM precision and overlap knobs included), and what was measured:\n"
    "\"iteration_time_s\", \"tokens_per_s\" or \"tokens_per_s_per_gpu\" (step time =\n"
    "gbs x seq / tokens per second), or \"tflops_per_gpu\" with the FLOP convention\n"
    "the source used (\"narayanan21\": Eq. 3 of Narayanan et al. 2021, hardware FLOPs\n"
    "with full recompute; \"model\": model FLOPs without recompute). Times are\n"
    "compared, not TFLOP/s. Runs marked \"underspecified\" (their source omits\n"
    "layout details), \"excluded\" (with the reason) or with \"needs\" (knobs dplan\n"
    "does not model yet, e.g. [\"hsdp\"]; the layout holds the nearest expressible\n"
    "one) are shown but not scored.\n"
    "Held-out runs (a file's \"held_out_rule\": \"every-third\") were not used to fit\n"
    "any GPU curve and are summarised separately. The summary groups the runs by\n"
    "source, by GPU and by the framework profile they are expressed in (torchtitan:\n"
    "PyTorch FSDP runs, torchtitan's or not); one line sets the runs whose predicted\n"
    "peak is inside suggest's 5% memory margin (layouts it would not pick) against\n"
    "the rest. A directory means all of its *.json files; default: the shipped\n"
    "tests/validation/.\n\n"
    "  --memory                  the memory model instead: each measured per-GPU peak\n"
    "                            (\"peak_memory\": {gib, quantity allocated|reserved|device,\n"
    "                            aggregation max|last-stage}) against the prediction of the\n"
    "                            same quantity; mean and worst per source and per framework,\n"
    "                            and the allocator slack that fits the fitted reserved peaks;\n"
    "                            the bars then apply to these errors\n"
    "  --pairs                   one choice against another: the measured time ratio of two\n"
    "                            scored runs that differ in one thing against the predicted\n"
    "                            one. GPU pairs: the same model architecture, layout and GPU\n"
    "                            count on two GPU profiles (what whatif compares). Layout\n"
    "                            pairs: one source's runs of the same model on the same GPUs\n"
    "                            with the same batch (gbs, sequence length) under two layouts\n"
    "                            (what suggest ranks), and how often the faster one is\n"
    "                            predicted faster where they are measured more than 3% apart.\n"
    "                            The framework's own efficiency cancels in a ratio; the pairs\n"
    "                            whose two runs are both held out are summarised apart.\n"
    "                            --max-mean-error then applies to all pairs' errors,\n"
    "                            --max-held-out-mean to those held-out pairs'\n"
    "  --json                    machine-readable results\n"
    "  --verbose                 the predicted breakdown of each run\n"
    "  --svg FILE                also draw each scored run's error against its measured step\n"
    "                            time, held-out and fitted runs apart, lines at 0 and +-the\n"
    "                            held-out worst bar (15% without one), the worst held-out\n"
    "                            runs marked; \"-\" for stdout (then nothing else is printed)\n"
    "bars (exit 1 when exceeded, percent):\n"
    "  --max-mean-error PCT      mean |error| of all scored runs\n"
    "  --max-fitted-mean PCT     mean |error| of the runs the curves were fitted on\n"
    "  --max-held-out-mean PCT   mean |error| of the held-out runs\n"
    "  --max-held-out-worst PCT  worst |error| of the held-out runs\n"
    "  --min-rank-agreement PCT  with --pairs: the share of the layout pairs measured more\n"
    "                            than 3% apart whose faster run is predicted faster (exit 1\n"
    "                            below it)\n";

const char *cli_default_runs(void)
{
    static char path[4096];
    snprintf(path, sizeof path, "%s/../tests/validation", dp_profiles_dir());
    return path;
}

static void print_stats(const char *label, struct dp_val_stats s)
{
    if (s.n)
        printf("%-28s %3d runs: mean |error| %5.2f%%, worst %5.2f%% (%s)\n", label, s.n,
               100 * s.mean, 100 * s.worst, s.worst_id);
}

/*
 * The scored runs by how close to the memory limit the model puts them: those inside
 * suggest's margin (DP_MEM_TIGHT_FRACTION of the usable bytes; the planner would not
 * have picked them) against the rest, all and held out. Near the limit PyTorch's caching
 * allocator frees its cache and retries cudaMalloc (composer PR #1632 raises the
 * gradient accumulation when it does, for the throughput it loses), which no term
 * prices: the line shows how much less the step time can be trusted there.
 */
static void print_margin(const struct dp_run *runs, const struct dp_run_result *res, int n)
{
    const double mg = DP_MEM_TIGHT_FRACTION;
    struct dp_val_stats in = dp_val_stats_margin(runs, res, n, -1, mg, true);
    if (!in.n)
        return;
    struct dp_val_stats out = dp_val_stats_margin(runs, res, n, -1, mg, false);
    struct dp_val_stats hin = dp_val_stats_margin(runs, res, n, 1, mg, true);
    struct dp_val_stats hout = dp_val_stats_margin(runs, res, n, 1, mg, false);
    printf("inside the %g%% memory margin %3d runs: mean |error| %5.2f%% (held out %d: %.2f%%); "
           "the other %d: %.2f%% (held out %d: %.2f%%)\n",
           100 * mg, in.n, 100 * in.mean, hin.n, 100 * hin.mean, out.n, 100 * out.mean, hout.n,
           100 * hout.mean);
}

/* What the summary tables group the scored runs by. */
enum group { BY_SOURCE, BY_GPU, BY_FRAMEWORK };
static const char *const group_names[] = {"source", "GPU", "framework"};
static const char *const group_json[] = {"per_source", "per_gpu", "per_framework"};

static const char *group_key(const struct dp_run *r, enum group g)
{
    return g == BY_GPU         ? r->cluster.gpu.name
           : g == BY_FRAMEWORK ? dp_framework_name(r->layout.framework)
                               : r->source_key;
}

static struct dp_val_stats group_stats(const struct dp_run *runs, const struct dp_run_result *res,
                                       int n, int held, enum group g, const char *key)
{
    return dp_val_stats(runs, res, n, held, g == BY_SOURCE ? key : NULL, g == BY_GPU ? key : NULL,
                        g == BY_FRAMEWORK ? key : NULL);
}

/* The distinct values of a run field (source, GPU or framework) among the scored runs, in
 * first-seen order; *out holds borrowed pointers. */
static int distinct(const struct dp_run *runs, int n, enum group g, const char **out)
{
    int k = 0;
    for (int i = 0; i < n; i++) {
        if (!dp_run_scored(&runs[i]))
            continue;
        const char *v = group_key(&runs[i], g);
        int j = 0;
        while (j < k && strcmp(out[j], v) != 0)
            j++;
        if (j == k)
            out[k++] = v;
    }
    return k;
}

static void print_groups(const struct dp_run *runs, const struct dp_run_result *res, int n,
                         enum group g)
{
    const char **keys = malloc((size_t)(n > 0 ? n : 1) * sizeof *keys);
    if (!keys)
        return;
    int k = distinct(runs, n, g, keys);
    printf("\nper %s%*s  runs  mean    worst    fitted: mean worst   held out: mean worst\n",
           group_names[g], 28 - (int)strlen(group_names[g]), "");
    for (int j = 0; j < k; j++) {
        struct dp_val_stats a = group_stats(runs, res, n, -1, g, keys[j]);
        struct dp_val_stats f = group_stats(runs, res, n, 0, g, keys[j]);
        struct dp_val_stats h = group_stats(runs, res, n, 1, g, keys[j]);
        char fs[40] = "  0       -       -", hs[40] = "  0       -       -";
        if (f.n)
            snprintf(fs, sizeof fs, "%3d %6.2f%% %6.2f%%", f.n, 100 * f.mean, 100 * f.worst);
        if (h.n)
            snprintf(hs, sizeof hs, "%3d %6.2f%% %6.2f%%", h.n, 100 * h.mean, 100 * h.worst);
        printf("  %-26s %4d %6.2f%% %6.2f%%   %s   %s\n", keys[j], a.n, 100 * a.mean, 100 * a.worst,
               fs, hs);
    }
    free(keys);
}

static cJSON *stats_json(struct dp_val_stats s)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "runs", s.n);
    cJSON_AddNumberToObject(o, "mean_abs_error", s.mean);
    cJSON_AddNumberToObject(o, "worst_abs_error", s.worst);
    cJSON_AddStringToObject(o, "worst_run", s.worst_id);
    return o;
}

static cJSON *groups_json(const struct dp_run *runs, const struct dp_run_result *res, int n,
                          enum group g)
{
    cJSON *o = cJSON_CreateObject();
    const char **keys = malloc((size_t)(n > 0 ? n : 1) * sizeof *keys);
    if (!keys)
        return o;
    int k = distinct(runs, n, g, keys);
    for (int j = 0; j < k; j++) {
        cJSON *e = cJSON_AddObjectToObject(o, keys[j]);
        cJSON_AddItemToObject(e, "all", stats_json(group_stats(runs, res, n, -1, g, keys[j])));
        cJSON_AddItemToObject(e, "fitted", stats_json(group_stats(runs, res, n, 0, g, keys[j])));
        cJSON_AddItemToObject(e, "held_out", stats_json(group_stats(runs, res, n, 1, g, keys[j])));
    }
    free(keys);
    return o;
}

static int parse_pct(const char *opt, const char *arg, double *out)
{
    char *end;
    double v = strtod(arg, &end);
    if (end == arg || *end || !(v >= 0))
        return cli_usage_error("validate", "--%s: expected percent >= 0, got \"%s\"", opt, arg);
    *out = v;
    return 0;
}

static int over_bar(const char *what, double value, double bar)
{
    if (bar < 0 || 100 * value <= bar)
        return 0;
    fprintf(stderr, "dplan: error: %s %.2f%% exceeds the bar of %.2f%%\n", what, 100 * value, bar);
    return 1;
}

/* The distinct frameworks (or sources) of the memory-scored runs, in first-seen order. */
static int mem_keys(const struct dp_run *runs, int n, bool fw, const char **out)
{
    int k = 0;
    for (int i = 0; i < n; i++) {
        if (!dp_run_mem_scored(&runs[i]))
            continue;
        const char *v = fw ? dp_framework_name(runs[i].layout.framework) : runs[i].source_key;
        int j = 0;
        while (j < k && strcmp(out[j], v) != 0)
            j++;
        if (j == k)
            out[k++] = v;
    }
    return k;
}

static void mem_groups(const struct dp_run *runs, const struct dp_mem_result *res, int n, bool fw,
                       cJSON *json)
{
    const char **keys = malloc((size_t)(n > 0 ? n : 1) * sizeof *keys);
    if (!keys)
        return;
    int k = mem_keys(runs, n, fw, keys);
    if (!json)
        printf("\nper %s%*s  runs  mean    worst    fitted: mean worst   held out: mean worst\n",
               fw ? "framework" : "source", fw ? 19 : 22, "");
    for (int j = 0; j < k; j++) {
        const char *src = fw ? NULL : keys[j], *f = fw ? keys[j] : NULL;
        struct dp_val_stats a = dp_mem_stats(runs, res, n, -1, src, f);
        struct dp_val_stats ft = dp_mem_stats(runs, res, n, 0, src, f);
        struct dp_val_stats h = dp_mem_stats(runs, res, n, 1, src, f);
        if (json) {
            cJSON *e = cJSON_AddObjectToObject(json, keys[j]);
            cJSON_AddItemToObject(e, "all", stats_json(a));
            cJSON_AddItemToObject(e, "fitted", stats_json(ft));
            cJSON_AddItemToObject(e, "held_out", stats_json(h));
            continue;
        }
        char fs[40] = "  0       -       -", hs[40] = "  0       -       -";
        if (ft.n)
            snprintf(fs, sizeof fs, "%3d %6.2f%% %6.2f%%", ft.n, 100 * ft.mean, 100 * ft.worst);
        if (h.n)
            snprintf(hs, sizeof hs, "%3d %6.2f%% %6.2f%%", h.n, 100 * h.mean, 100 * h.worst);
        printf("  %-26s %4d %6.2f%% %6.2f%%   %s   %s\n", keys[j], a.n, 100 * a.mean, 100 * a.worst,
               fs, hs);
    }
    free(keys);
}

/* `dplan validate --memory`: the memory model against the measured peaks. */
static int validate_memory(struct dp_run *runs, int n, bool json, double bars[4])
{
    struct dp_err err = {0};
    struct dp_mem_result *res = calloc((size_t)(n > 0 ? n : 1), sizeof *res);
    if (!res)
        return cli_fail(&(struct dp_err){DP_ENOMEM, "out of memory"});
    for (int i = 0; i < n; i++)
        if (dp_run_predict_memory(&runs[i], &res[i], &err)) {
            free(res);
            return cli_fail(&err);
        }
    struct dp_val_stats all = dp_mem_stats(runs, res, n, -1, NULL, NULL);
    struct dp_val_stats fit = dp_mem_stats(runs, res, n, 0, NULL, NULL);
    struct dp_val_stats held = dp_mem_stats(runs, res, n, 1, NULL, NULL);
    int nslack = 0;
    double slack = dp_fit_alloc_slack(runs, res, n, &nslack);
    if (json) {
        cJSON *o = cJSON_CreateObject();
        cJSON *a = cJSON_AddArrayToObject(o, "runs");
        for (int i = 0; i < n; i++) {
            if (runs[i].peak_gib <= 0)
                continue;
            cJSON *e = cJSON_CreateObject();
            cJSON_AddStringToObject(e, "id", runs[i].id);
            cJSON_AddStringToObject(e, "source", runs[i].source_key);
            cJSON_AddStringToObject(e, "framework", dp_framework_name(runs[i].layout.framework));
            cJSON_AddStringToObject(e, "quantity", dp_mem_quantity_name(runs[i].mem_quantity));
            cJSON_AddNumberToObject(e, "stage", res[i].stage);
            cJSON_AddNumberToObject(e, "measured_gib", res[i].measured_gib);
            cJSON_AddNumberToObject(e, "predicted_gib", res[i].predicted_gib);
            cJSON_AddNumberToObject(e, "error", res[i].error);
            cJSON_AddBoolToObject(e, "scored", dp_run_mem_scored(&runs[i]));
            cJSON_AddBoolToObject(e, "held_out", runs[i].mem_held_out);
            cJSON_AddItemToArray(a, e);
        }
        cJSON_AddItemToObject(o, "all", stats_json(all));
        cJSON_AddItemToObject(o, "fitted", stats_json(fit));
        cJSON_AddItemToObject(o, "held_out", stats_json(held));
        mem_groups(runs, res, n, false, cJSON_AddObjectToObject(o, "per_source"));
        mem_groups(runs, res, n, true, cJSON_AddObjectToObject(o, "per_framework"));
        cJSON_AddNumberToObject(o, "allocator_slack", DP_ALLOC_SLACK);
        if (slack >= 0)
            cJSON_AddNumberToObject(o, "allocator_slack_best_fit", slack);
        cli_print_json(o);
    } else {
        printf("%-50s %-10s %6s %9s %9s %8s\n", "run", "quantity", "stage", "measured", "predicted",
               "error");
        for (int i = 0; i < n; i++) {
            if (runs[i].peak_gib <= 0)
                continue;
            char mark[192] = "";
            if (runs[i].needs[0])
                snprintf(mark, sizeof mark, "  (needs %s: not scored)", runs[i].needs);
            else if (runs[i].underspecified || runs[i].excluded)
                snprintf(mark, sizeof mark, "  (not scored)");
            else if (runs[i].mem_held_out)
                snprintf(mark, sizeof mark, "  (held out)");
            printf("%-50s %-10s %6d %9.2f %9.2f %+7.2f%%%s\n", runs[i].id,
                   dp_mem_quantity_name(runs[i].mem_quantity), res[i].stage, res[i].measured_gib,
                   res[i].predicted_gib, 100 * res[i].error, mark);
        }
        printf("\nGiB per GPU; allocated = torch max_memory_allocated, reserved = "
               "max_memory_reserved, device = nvidia-smi\n");
        print_stats("scored (all)", all);
        print_stats("fitted (slack)", fit);
        print_stats("held out", held);
        mem_groups(runs, res, n, false, NULL);
        mem_groups(runs, res, n, true, NULL);
        if (slack >= 0)
            printf("\nallocator slack: %.3f in use (costmodel DP_ALLOC_SLACK); %.3f fits the %d "
                   "fitted reserved peaks best\n",
                   DP_ALLOC_SLACK, slack, nslack);
    }
    if ((bars[2] >= 0 || bars[3] >= 0) && held.n == 0) {
        fprintf(stderr, "dplan: error: held-out bars given, but no scored peak is held out\n");
        free(res);
        return 1;
    }
    int rc = over_bar("memory: mean absolute error", all.mean, bars[0]) ||
             over_bar("memory: mean absolute error of the fitted peaks", fit.mean, bars[1]) ||
             over_bar("memory: mean absolute error of the held-out peaks", held.mean, bars[2]) ||
             over_bar("memory: worst absolute error of the held-out peaks", held.worst, bars[3]);
    free(res);
    return rc;
}

static bool same_str(const char *a, const char *b)
{
    return a == b || (a && b && strcmp(a, b) == 0);
}

/* The groups the pairs fall into, in first-seen order, each as the filter that selects it:
 * GPU pairs by (first GPU, second GPU), layout pairs by source. *out has room for np. */
static int pair_groups(const struct dp_run *runs, const struct dp_run_pair *p, int np,
                       struct dp_pair_filter *out)
{
    int k = 0;
    for (int i = 0; i < np; i++) {
        struct dp_pair_filter f = {0};
        if (p[i].kind == DP_PAIR_GPU) {
            f.gpu_a = runs[p[i].a].cluster.gpu.name;
            f.gpu_b = runs[p[i].b].cluster.gpu.name;
        } else {
            f.source = runs[p[i].a].source_key;
        }
        int j = 0;
        while (j < k && !(same_str(out[j].gpu_a, f.gpu_a) && same_str(out[j].gpu_b, f.gpu_b) &&
                          same_str(out[j].source, f.source)))
            j++;
        if (j == k)
            out[k++] = f;
    }
    return k;
}

static cJSON *pairs_json(const struct dp_run *runs, const struct dp_run_pair *p, int np)
{
    cJSON *a = cJSON_CreateArray();
    for (int i = 0; i < np; i++) {
        cJSON *e = cJSON_CreateObject();
        cJSON_AddStringToObject(e, "first", runs[p[i].a].id);
        cJSON_AddStringToObject(e, "second", runs[p[i].b].id);
        if (p[i].kind == DP_PAIR_GPU) {
            cJSON_AddStringToObject(e, "first_gpu", runs[p[i].a].cluster.gpu.name);
            cJSON_AddStringToObject(e, "second_gpu", runs[p[i].b].cluster.gpu.name);
        } else {
            cJSON_AddStringToObject(e, "source", runs[p[i].a].source_key);
            cJSON_AddBoolToObject(e, "decided", dp_pair_decided(&p[i]));
            cJSON_AddBoolToObject(e, "misranked", dp_pair_misranked(&p[i]));
        }
        cJSON_AddNumberToObject(e, "measured_ratio", p[i].measured);
        cJSON_AddNumberToObject(e, "predicted_ratio", p[i].predicted);
        cJSON_AddNumberToObject(e, "error", p[i].error);
        cJSON_AddItemToArray(a, e);
    }
    return a;
}

static void print_pairs(const struct dp_run *runs, const struct dp_run_pair *p, int np)
{
    printf("%-50s %-50s %8s %9s %8s\n", "first run", "second run", "measured", "predicted",
           "error");
    for (int i = 0; i < np; i++)
        printf("%-50s %-50s %7.3fx %8.3fx %+7.2f%%%s\n", runs[p[i].a].id, runs[p[i].b].id,
               p[i].measured, p[i].predicted, 100 * p[i].error,
               dp_pair_misranked(&p[i]) ? "  misranked" : "");
    if (np == 0)
        printf("(no two scored runs pair)\n");
}

static void print_pair_stats(const char *label, struct dp_pair_stats s)
{
    if (s.err.n)
        printf("%-28s %3d pairs: mean |error| %5.2f%%, worst %5.2f%% (%s)\n", label, s.err.n,
               100 * s.err.mean, 100 * s.err.worst, s.err.worst_id);
}

/* The pairs of both kinds together: the mean weighted by count, the worst of the two. */
static struct dp_val_stats both_kinds(struct dp_val_stats g, struct dp_val_stats l)
{
    struct dp_val_stats s = l.worst > g.worst ? l : g;
    s.n = g.n + l.n;
    s.mean = s.n ? (g.mean * g.n + l.mean * l.n) / s.n : 0;
    return s;
}

/* `dplan validate --pairs`: measured against predicted time ratios of the same step with one
 * thing changed, the GPU or the layout. */
static int validate_pairs(const struct dp_run *runs, const struct dp_run_result *res, int n,
                          bool json, double bar_mean, double bar_hmean, double bar_rank)
{
    struct dp_err err = {0};
    struct dp_run_pair *pg = NULL, *pl = NULL;
    int ng = 0, nl = 0;
    if (dp_run_pairs(runs, res, n, DP_PAIR_GPU, &pg, &ng, &err) ||
        dp_run_pairs(runs, res, n, DP_PAIR_LAYOUT, &pl, &nl, &err)) {
        free(pg);
        return cli_fail(&err);
    }
    struct dp_pair_filter *gg = malloc((size_t)(ng > 0 ? ng : 1) * sizeof *gg);
    struct dp_pair_filter *lg = malloc((size_t)(nl > 0 ? nl : 1) * sizeof *lg);
    if (!gg || !lg) {
        free(gg);
        free(lg);
        free(pg);
        free(pl);
        return cli_fail(&(struct dp_err){DP_ENOMEM, "out of memory"});
    }
    int kg = pair_groups(runs, pg, ng, gg), kl = pair_groups(runs, pl, nl, lg);
    struct dp_pair_stats sg = dp_pair_stats(runs, pg, ng, NULL);
    struct dp_pair_stats sl = dp_pair_stats(runs, pl, nl, NULL);
    struct dp_val_stats sa = both_kinds(sg.err, sl.err);
    /* The pairs whose two runs no fit has seen. */
    const struct dp_pair_filter held = {.held_out = true};
    struct dp_pair_stats hg = dp_pair_stats(runs, pg, ng, &held);
    struct dp_pair_stats hl = dp_pair_stats(runs, pl, nl, &held);
    struct dp_val_stats ha = both_kinds(hg.err, hl.err);
    double rank = sl.decided ? (double)sl.right / sl.decided : 0;
    if (json) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddItemToObject(o, "gpu_pairs", pairs_json(runs, pg, ng));
        cJSON_AddItemToObject(o, "gpu", stats_json(sg.err));
        cJSON *g = cJSON_AddObjectToObject(o, "per_gpu_pair");
        for (int j = 0; j < kg; j++) {
            char name[160];
            snprintf(name, sizeof name, "%s/%s", gg[j].gpu_a, gg[j].gpu_b);
            cJSON_AddItemToObject(g, name, stats_json(dp_pair_stats(runs, pg, ng, &gg[j]).err));
        }
        cJSON_AddItemToObject(o, "layout_pairs", pairs_json(runs, pl, nl));
        cJSON_AddItemToObject(o, "layout", stats_json(sl.err));
        cJSON *r = cJSON_AddObjectToObject(o, "layout_ranking");
        cJSON_AddNumberToObject(r, "noise", DP_PAIR_NOISE);
        cJSON_AddNumberToObject(r, "decided", sl.decided);
        cJSON_AddNumberToObject(r, "right", sl.right);
        cJSON_AddNumberToObject(r, "fraction", rank);
        cJSON_AddItemToObject(o, "all", stats_json(sa));
        cJSON *h = cJSON_AddObjectToObject(o, "held_out");
        cJSON_AddItemToObject(h, "gpu", stats_json(hg.err));
        cJSON_AddItemToObject(h, "layout", stats_json(hl.err));
        cJSON_AddNumberToObject(h, "layout_decided", hl.decided);
        cJSON_AddNumberToObject(h, "layout_right", hl.right);
        cJSON_AddItemToObject(h, "all", stats_json(ha));
        cli_print_json(o);
    } else {
        printf("GPU against GPU: the same model, layout and GPU count measured on two GPUs;\n"
               "time on the first over time on the second (the second's speed-up)\n\n");
        print_pairs(runs, pg, ng);
        printf("\n");
        print_pair_stats("GPU pairs", sg);
        print_pair_stats("  both runs held out", hg);
        for (int j = 0; j < kg; j++) {
            char name[160];
            snprintf(name, sizeof name, "%s -> %s", gg[j].gpu_a, gg[j].gpu_b);
            struct dp_val_stats s = dp_pair_stats(runs, pg, ng, &gg[j]).err;
            printf("  %-46s %5d pairs: mean |error| %5.2f%%, worst %5.2f%%\n", name, s.n,
                   100 * s.mean, 100 * s.worst);
        }
        printf("\nLayout against layout: one source's runs of the same model on the same GPUs\n"
               "with the same batch (gbs, sequence length) under two layouts; time of the first\n"
               "over time of the second\n\n");
        print_pairs(runs, pl, nl);
        printf("\n");
        print_pair_stats("layout pairs", sl);
        print_pair_stats("  both runs held out", hl);
        if (sl.decided)
            printf("the faster layout predicted faster in %d of the %d pairs measured more than "
                   "%.0f%% apart (%.1f%%); in %d of %d with both runs held out\n",
                   sl.right, sl.decided, 100 * DP_PAIR_NOISE, 100 * rank, hl.right, hl.decided);
        if (kl)
            printf("\nper source%*s pairs  mean    ranked right\n", 20, "");
        for (int j = 0; j < kl; j++) {
            struct dp_pair_stats s = dp_pair_stats(runs, pl, nl, &lg[j]);
            printf("  %-26s %5d %6.2f%%   %d of %d\n", lg[j].source, s.err.n, 100 * s.err.mean,
                   s.right, s.decided);
        }
    }
    free(gg);
    free(lg);
    free(pg);
    free(pl);
    if (bar_mean >= 0 && sa.n == 0) {
        fprintf(stderr, "dplan: error: --max-mean-error given, but no two runs pair\n");
        return 1;
    }
    if (bar_rank >= 0 && sl.decided == 0) {
        fprintf(stderr,
                "dplan: error: --min-rank-agreement given, but no two layouts of a source "
                "differ by more than %.0f%%\n",
                100 * DP_PAIR_NOISE);
        return 1;
    }
    if (bar_hmean >= 0 && ha.n == 0) {
        fprintf(stderr, "dplan: error: --max-held-out-mean given, but no pair has both runs held "
                        "out\n");
        return 1;
    }
    if (over_bar("pairs: mean absolute error of the time ratios", sa.mean, bar_mean) ||
        over_bar("pairs: mean absolute error of the time ratios of held-out runs", ha.mean,
                 bar_hmean))
        return 1;
    if (bar_rank >= 0 && 100 * rank < bar_rank) {
        fprintf(stderr,
                "dplan: error: pairs: the faster layout predicted faster in %.2f%% of the "
                "decided pairs, under the bar of %.2f%%\n",
                100 * rank, bar_rank);
        return 1;
    }
    return 0;
}

int cmd_validate(int argc, char **argv)
{
    enum { O_MEAN = 'e', O_FIT = 1, O_HMEAN, O_HWORST, O_RANK };
    static const struct option opts[] = {{"json", no_argument, 0, 'j'},
                                         {"max-mean-error", required_argument, 0, O_MEAN},
                                         {"max-fitted-mean", required_argument, 0, O_FIT},
                                         {"max-held-out-mean", required_argument, 0, O_HMEAN},
                                         {"max-held-out-worst", required_argument, 0, O_HWORST},
                                         {"min-rank-agreement", required_argument, 0, O_RANK},
                                         {"verbose", no_argument, 0, 'v'},
                                         {"memory", no_argument, 0, 'm'},
                                         {"pairs", no_argument, 0, 'p'},
                                         {"svg", required_argument, 0, 'S'},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    bool json = false, verbose = false, memory = false, pairs = false;
    const char *svg = NULL;
    double bar_all = -1, bar_fit = -1, bar_hmean = -1, bar_hworst = -1, bar_rank = -1;
    int ch;
    optind = 1;
    opterr = 0;
    while ((ch = cli_next_opt("validate", argc, argv, ":hv", opts, NULL)) != -1) {
        int rc = 0;
        switch (ch) {
        case 'j': json = true; break;
        case 'v': verbose = true; break;
        case 'm': memory = true; break;
        case 'p': pairs = true; break;
        case 'S': svg = optarg; break;
        case O_MEAN: rc = parse_pct("max-mean-error", optarg, &bar_all); break;
        case O_FIT: rc = parse_pct("max-fitted-mean", optarg, &bar_fit); break;
        case O_HMEAN: rc = parse_pct("max-held-out-mean", optarg, &bar_hmean); break;
        case O_HWORST: rc = parse_pct("max-held-out-worst", optarg, &bar_hworst); break;
        case O_RANK: rc = parse_pct("min-rank-agreement", optarg, &bar_rank); break;
        case 'h': fputs(help, stdout); return 0;
        default: return 2;
        }
        if (rc)
            return rc;
    }
    if (svg && memory)
        return cli_usage_error("validate", "--svg draws the step-time errors, not --memory's");
    if (pairs && (memory || svg))
        return cli_usage_error("validate", "--pairs compares step times: not with %s",
                               memory ? "--memory" : "--svg");
    if (pairs && (bar_fit >= 0 || bar_hworst >= 0))
        return cli_usage_error("validate", "--pairs takes --max-mean-error, --max-held-out-mean "
                                           "(pairs of two held-out runs) and --min-rank-agreement "
                                           "only");
    if (!pairs && bar_rank >= 0)
        return cli_usage_error("validate", "--min-rank-agreement ranks the layout pairs: it needs "
                                           "--pairs");
    bool svg_stdout = svg && strcmp(svg, "-") == 0;
    if (svg_stdout && json)
        return cli_usage_error("validate", "--svg - and --json both want stdout");
    struct dp_err err = {0};
    if (cli_output_check(NULL, svg, "--svg", argv + optind, argc - optind, &err))
        return cli_fail(&err);
    struct dp_run *runs = NULL;
    int n = 0;
    if (optind == argc) {
        if (dp_runs_load(cli_default_runs(), &runs, &n, &err))
            return cli_fail(&err);
    }
    for (int i = optind; i < argc; i++)
        if (dp_runs_append(argv[i], &runs, &n, &err)) {
            free(runs);
            return cli_fail(&err);
        }
    if (memory) {
        double bars[4] = {bar_all, bar_fit, bar_hmean, bar_hworst};
        int mrc = validate_memory(runs, n, json, bars);
        free(runs);
        return mrc;
    }
    struct dp_run_result *res = calloc((size_t)n, sizeof *res);
    if (!res) {
        free(runs);
        err.code = DP_ENOMEM;
        snprintf(err.msg, sizeof err.msg, "out of memory");
        return cli_fail(&err);
    }
    for (int i = 0; i < n; i++)
        if (dp_run_predict(&runs[i], &res[i], &err)) {
            free(res);
            free(runs);
            return cli_fail(&err);
        }
    if (pairs) {
        int prc = validate_pairs(runs, res, n, json, bar_all, bar_hmean, bar_rank);
        free(res);
        free(runs);
        return prc;
    }
    struct dp_val_stats all = dp_val_stats(runs, res, n, -1, NULL, NULL, NULL);
    struct dp_val_stats fit = dp_val_stats(runs, res, n, 0, NULL, NULL, NULL);
    struct dp_val_stats held = dp_val_stats(runs, res, n, 1, NULL, NULL, NULL);
    if (svg) {
        struct dp_buf b = {0};
        const char **keys = malloc((size_t)(n > 0 ? n : 1) * sizeof *keys);
        int src = keys ? 0 : dp_err_set(&err, DP_ENOMEM, "out of memory");
        if (!src)
            src = cli_svg_validate(runs, res, n, held, fit, distinct(runs, n, BY_SOURCE, keys),
                                   bar_hworst >= 0 ? bar_hworst : 15, &b, &err);
        free(keys);
        if (!src)
            src = cli_write_text(svg, &b, &err);
        dp_buf_release(&b);
        if (src) {
            free(res);
            free(runs);
            return cli_fail(&err);
        }
    }
    if (svg_stdout) {
        /* the picture is the output */
    } else if (json) {
        cJSON *o = cJSON_CreateObject();
        cJSON *a = cJSON_AddArrayToObject(o, "runs");
        for (int i = 0; i < n; i++) {
            if (!runs[i].has_time)
                continue;
            cJSON *e = cJSON_CreateObject();
            cJSON_AddStringToObject(e, "id", runs[i].id);
            cJSON_AddStringToObject(e, "source", runs[i].source_key);
            cJSON_AddStringToObject(e, "gpu", runs[i].cluster.gpu.name);
            cJSON_AddNumberToObject(e, "measured_s", res[i].measured_s);
            cJSON_AddNumberToObject(e, "predicted_s", res[i].predicted_s);
            cJSON_AddNumberToObject(e, "error", res[i].error);
            /* The memory model's peak for the layout (it ran, so it fit): how tight it was. */
            cJSON_AddNumberToObject(e, "predicted_peak_gib", cli_gib(res[i].peak_bytes));
            cJSON_AddNumberToObject(e, "usable_gib",
                                    cli_gib(dp_gpu_usable_bytes(&runs[i].cluster.gpu)));
            cJSON_AddBoolToObject(e, "held_out", runs[i].held_out);
            cJSON_AddBoolToObject(e, "underspecified", runs[i].underspecified);
            if (runs[i].waiting_for[0])
                cJSON_AddStringToObject(e, "waiting_for", runs[i].waiting_for);
            if (runs[i].excluded)
                cJSON_AddStringToObject(e, "excluded", runs[i].excluded_why);
            if (runs[i].needs[0])
                cJSON_AddStringToObject(e, "needs", runs[i].needs);
            cJSON_AddItemToArray(a, e);
        }
        cJSON_AddNumberToObject(o, "scored_runs", all.n);
        cJSON_AddNumberToObject(o, "mean_abs_error", all.mean);
        cJSON_AddNumberToObject(o, "worst_abs_error", all.worst);
        cJSON_AddItemToObject(o, "fitted", stats_json(fit));
        cJSON_AddItemToObject(o, "held_out", stats_json(held));
        cJSON *mg = cJSON_AddObjectToObject(o, "memory_margin");
        cJSON_AddNumberToObject(mg, "margin", DP_MEM_TIGHT_FRACTION);
        static const char *const mg_keys[] = {"inside", "inside_held_out", "outside",
                                              "outside_held_out"};
        for (int k = 0; k < 4; k++)
            cJSON_AddItemToObject(mg, mg_keys[k],
                                  stats_json(dp_val_stats_margin(runs, res, n, k % 2 ? 1 : -1,
                                                                 DP_MEM_TIGHT_FRACTION, k < 2)));
        for (enum group g = BY_SOURCE; g <= BY_FRAMEWORK; g++)
            cJSON_AddItemToObject(o, group_json[g], groups_json(runs, res, n, g));
        cli_print_json(o);
    } else {
        printf("%-48s %11s %11s %8s\n", "run", "measured s", "predicted s", "error");
        for (int i = 0; i < n; i++) {
            if (!runs[i].has_time)
                continue; /* a memory peak alone: `dplan validate --memory` */
            if (runs[i].waiting_for[0]) {
                printf("%-48s %11.3f %11s %8s  (waiting for %s: not expressible yet)\n", runs[i].id,
                       dp_run_measured_s(&runs[i]), "-", "-", runs[i].waiting_for);
                continue;
            }
            char mark[192] = "";
            if (runs[i].needs[0])
                snprintf(mark, sizeof mark, "  (needs %s%s: not scored)", runs[i].needs,
                         runs[i].underspecified ? "; underspecified" : "");
            else if (runs[i].underspecified)
                snprintf(mark, sizeof mark, "  (underspecified: not scored)");
            else if (runs[i].excluded)
                snprintf(mark, sizeof mark, "  (excluded: not scored)");
            else if (runs[i].held_out)
                snprintf(mark, sizeof mark, "  (held out)");
            printf("%-48s %11.3f %11.3f %+7.2f%%%s\n", runs[i].id, res[i].measured_s,
                   res[i].predicted_s, 100 * res[i].error, mark);
            if (verbose) {
                const struct dp_step_cost *c = &res[i].cost;
                printf("    compute %.3f recompute %.3f tp %.3f pp %.3f bubble %.3f dp %.3f "
                       "(of %.3f) opt %.3f other %.3f cp %.3f ep %.3f | MFU %.1f%% HFU %.1f%%\n",
                       c->compute_s, c->recompute_s, c->tp_comm_s, c->pp_comm_s, c->bubble_s,
                       c->dp_comm_s, c->dp_comm_total_s, c->optimizer_s, c->other_s, c->cp_comm_s,
                       c->ep_comm_s, 100 * c->mfu, 100 * c->hfu);
                if (runs[i].excluded)
                    printf("    excluded: %s\n", runs[i].excluded_why);
            }
        }
        int oom = 0;
        for (int i = 0; i < n; i++)
            if (dp_run_scored(&runs[i]) && !res[i].fits) {
                if (!oom++)
                    printf("\n");
                printf("memory model says out of memory (it ran): %s, %.2f GiB of %.2f\n",
                       runs[i].id, cli_gib(res[i].peak_bytes),
                       cli_gib(dp_gpu_usable_bytes(&runs[i].cluster.gpu)));
            }
        printf("\n");
        print_stats("scored (all)", all);
        print_stats("used to fit GPU curves", fit);
        print_stats("held out", held);
        print_margin(runs, res, n);
        for (enum group g = BY_SOURCE; g <= BY_FRAMEWORK; g++)
            print_groups(runs, res, n, g);
    }
    /* A bar over no run would pass whatever the model predicts. */
    const char *empty =
        (bar_hmean >= 0 || bar_hworst >= 0) && held.n == 0
            ? "held-out bars given, but no scored run is held out"
        : bar_fit >= 0 && fit.n == 0 ? "--max-fitted-mean given, but no scored run was used to fit"
        : bar_all >= 0 && all.n == 0 ? "--max-mean-error given, but no run is scored"
                                     : NULL;
    if (empty) {
        fprintf(stderr, "dplan: error: %s\n", empty);
        free(res);
        free(runs);
        return 1;
    }
    int rc = over_bar("mean absolute error", all.mean, bar_all) ||
             over_bar("mean absolute error of the fitted runs", fit.mean, bar_fit) ||
             over_bar("mean absolute error of the held-out runs", held.mean, bar_hmean) ||
             over_bar("worst absolute error of the held-out runs", held.worst, bar_hworst);
    free(res);
    free(runs);
    return rc;
}
