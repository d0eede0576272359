/*
 * dplan suggest MODEL <cluster> [--gbs N] [--seq-len N] [--top K] [--json]
 * [-o plan.json]: search every layout, rank those that fit, explain the choice,
 * write the winner as plan.json.
 */
#include "cli.h"
#include "goodput_report.h"
#include "memory_report.h"
#include "planner/planner.h"
#include "svg_charts.h"
#include "time_report.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const char help_head[] =
    "usage: dplan suggest MODEL <cluster> [--gbs N] [--seq-len N] [--top K] [--json]\n"
    "                     [-o plan.json] [--svg FILE] [--tokens T] [failure options]\n"
    "                     [knobs]\n\n"
    "Search every parallel layout of MODEL on the cluster (tp, cp, pp with even and\n"
    "uneven splits, interleaving, dp, ep, micro-batch, ZeRO stage, recompute, sequence\n"
    "parallelism), drop those that do not fit in memory, rank the rest by predicted\n"
    "step time (memory balance breaks near-ties), explain the choice, and write the\n"
    "winner as plan.json for `dplan run`. Knobs given on the command line (--tp 8,\n"
    "--zero 1, --recompute full, ...) fix that dimension instead of searching it.\n"
    "For the winner it also prices in failures: the checkpoint interval that\n"
    "maximises goodput, the goodput there and the days to train T tokens.\n\n"
    "  --gbs N         global batch in sequences [about 4M tokens: 2^k sequences, times the\n"
    "                  GPU count's odd factor (72 GPUs: 9 x 2^k)]\n"
    "  --top K         rows in the ranking (1..64) [10]\n"
    "  --no-uneven     do not try uneven first/last pipeline stages\n"
    "  --all-splits    rank every pipeline split and interleaving degree (vpp) of a\n"
    "                  layout [one row per layout, at its best split and vpp]\n"
    "  --timing        also print how long the search took\n"
    "  --tokens T      training tokens for the days to train (2e12, 300B, 15T) [1T]\n"
    "  --json          machine-readable output\n"
    "  -o FILE         write the winning plan (plan.json schema: README)\n"
    "  --svg FILE      also draw step time against peak memory of every layout that fits,\n"
    "                  the chosen one and the runners-up marked, as SVG (\"-\": the SVG on\n"
    "                  stdout instead of the report)\n\n";

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* Which alternatives to show: every tp, recompute and ZeRO choice, interleaving on/off,
 * cp=1 (or the best cp > 1 when the winner has none), and the three closest pp. */
static int pick_alternatives(const struct dp_search_result *r, const struct dp_candidate *w,
                             int *idx)
{
    int n = 0, npp = 0;
    int order[32];
    int no = 0;
    for (int i = 0; i < r->nalt; i++)
        order[no++] = i;
    /* closest first */
    for (int i = 1; i < no; i++)
        for (int j = i; j > 0 && r->alt[order[j]].best.cost.step_time_s <
                                     r->alt[order[j - 1]].best.cost.step_time_s;
             j--) {
            int t = order[j];
            order[j] = order[j - 1];
            order[j - 1] = t;
        }
    bool cp_shown = false;
    for (int k = 0; k < no; k++) {
        const struct dp_alternative *a = &r->alt[order[k]];
        if (dp_layout_equal(&a->best.layout, &w->layout))
            continue;
        bool show = false;
        switch (a->dim) {
        case DP_ALT_TP:
        case DP_ALT_RECOMPUTE:
        case DP_ALT_ZERO:
        case DP_ALT_VPP:
        case DP_ALT_GEMM:
        case DP_ALT_SCHEDULE: show = true; break;
        case DP_ALT_PP:
            if (npp < 3) {
                show = true;
                npp++;
            }
            break;
        case DP_ALT_CP:
            if (!cp_shown && (a->value == 1 || w->layout.cp == 1)) {
                show = true;
                cp_shown = true;
            }
            break;
        }
        if (show)
            idx[n++] = order[k];
    }
    return n;
}

static cJSON *candidate_json(const struct dp_candidate *c, int64_t cap, int rank)
{
    cJSON *e = cli_time_json(&c->cost, &c->layout);
    cJSON_AddNumberToObject(e, "rank", rank);
    cJSON_AddItemToObject(e, "layout", dp_layout_to_json(&c->layout));
    cJSON_AddNumberToObject(e, "peak_bytes", (double)c->peak_bytes);
    cJSON_AddNumberToObject(e, "min_stage_bytes", (double)c->min_bytes);
    cJSON_AddNumberToObject(e, "headroom_bytes", (double)(cap - c->peak_bytes));
    return e;
}

/* Nothing fits at this batch: the smallest peak, and the batch that would fit if any. */
static int nothing_fits(const struct dp_model *m, const struct dp_cluster *cl,
                        const struct dp_search_result *r, const struct dp_search_opts *o,
                        struct dp_err *err)
{
    char lay[160], against[96];
    cli_capacity_words(cl, o->memory_margin, against, sizeof against);
    int64_t gbs = o->gbs;
    dp_layout_format_model(&r->lowest_layout, m, lay, sizeof lay);
    if (r->alt_gbs) {
        char alt[160];
        dp_layout_format_model(&r->alt_layout, m, alt, sizeof alt);
        return dp_err_set(err, DP_EINFEASIBLE,
                          "%s fits no layout on %d x %s that divides the global batch %lld (the "
                          "smallest peak is %.2f GiB per GPU, %s, against %s); --gbs %lld "
                          "fits %s",
                          m->name, dp_cluster_gpus(cl), cl->gpu.name, (long long)gbs,
                          cli_gib(r->lowest_peak), lay, against, (long long)r->alt_gbs, alt);
    }
    /* torchtitan's own remedies for the loss's buffers (planner/fixes.c offers them too) */
    const bool tt = o->framework == DP_FW_TORCHTITAN && o->loss_chunks <= 1;
    return dp_err_set(
        err, DP_EINFEASIBLE,
        "%s fits no layout on %d x %s: the smallest peak is %.2f GiB per GPU (%s) "
        "against %s; try more GPUs (`dplan memory %s ... --min-gpus`), a GPU "
        "with more memory, %sor a shorter --seq-len",
        m->name, dp_cluster_gpus(cl), cl->gpu.name, cli_gib(r->lowest_peak), lay, against, m->name,
        tt ? "torchtitan's chunked loss (--loss-chunks 8, with --loss compiled), " : "");
}

int cmd_suggest(int argc, char **argv)
{
    static const struct option opts[] = {CLI_CLUSTER_OPTIONS,
                                         CLI_KNOB_OPTIONS,
                                         {"json", no_argument, 0, OPT_JSON},
                                         {"top", required_argument, 0, 'k'},
                                         {"no-uneven", no_argument, 0, 'u'},
                                         {"all-splits", no_argument, 0, 'A'},
                                         {"timing", no_argument, 0, 'T'},
                                         {"tokens", required_argument, 0, 'n'},
                                         {"svg", required_argument, 0, 'S'},
                                         CLI_GOODPUT_OPTIONS,
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    struct cli_common c;
    cli_common_init(&c);
    int top = 10;
    bool no_uneven = false, all_splits = false, timing = false;
    const char *outfile = NULL, *svg = NULL;
    double tokens = 1e12;
    const char *tokens_default = "1T";
    struct cli_goodput_opts go;
    cli_goodput_opts_init(&go);
    int ch;
    optind = 1;
    opterr = 0;
    while ((ch = cli_next_opt("suggest", argc, argv, ":ho:", opts, &c)) != -1) {
        switch (ch) {
        case 'k': {
            char *end;
            long v = strtol(optarg, &end, 10);
            if (end == optarg || *end || v < 1 || v > DP_MAX_TOP)
                return cli_usage_error("suggest", "--top: expected integer in [1, %d], got \"%s\"",
                                       DP_MAX_TOP, optarg);
            top = (int)v;
            break;
        }
        case 'u': no_uneven = true; break;
        case 'A': all_splits = true; break;
        case 'T': timing = true; break;
        case 'o': outfile = optarg; break;
        case 'S': svg = optarg; break;
        case 'n':
            if (cli_parse_tokens(optarg, &tokens))
                return cli_usage_error("suggest",
                                       "--tokens: expected a count in (0, 1e15] like 2e12 or "
                                       "300B, got \"%s\"",
                                       optarg);
            tokens_default = NULL;
            break;
        case 'h':
            printf("%s%s\n%s\n%s", help_head, cli_cluster_help, cli_plan_knob_help,
                   cli_goodput_help);
            return 0;
        default: {
            int g = cli_goodput_opt("suggest", ch, optarg, &go);
            if (g <= 0)
                return 2;
            break;
        }
        }
    }
    if (cli_search_args("suggest", argc, optind, &c))
        return 2;
    struct dp_err err = {0};
    struct dp_model m;
    struct dp_cluster cl;
    if (cli_output_check(&c, outfile, "-o", argv + optind, 1, &err) ||
        cli_output_check(&c, svg, "--svg", argv + optind, 1, &err) ||
        dp_model_load(argv[optind], &m, &err) || cli_cluster(&c, &cl, &err) ||
        cli_check_knobs(&c, NULL, &cl.gpu, &err))
        return cli_fail(&err);
    struct dp_search_opts so;
    struct cli_defaults d;
    if (cli_search_opts(&c, &m, dp_cluster_gpus(&cl), &so, &d))
        return 2;
    so.top_k = top;
    so.no_uneven = no_uneven;
    so.all_splits = all_splits;
    /* Only --svg collects the evaluated layouts: without it the search pays nothing. */
    struct cli_scatter pts = {0};
    if (svg) {
        so.on_fit = cli_scatter_collect;
        so.on_fit_ctx = &pts;
    }
    struct dp_search_result *r = malloc(sizeof *r);
    if (!r)
        return 1;
    double t0 = now_s();
    int rc = dp_plan_search(&m, &cl, &so, r, &err);
    double secs = now_s() - t0;
    if (rc) {
        free(r);
        cli_scatter_release(&pts);
        return cli_fail(&err);
    }
    int64_t cap = dp_gpu_usable_bytes(&cl.gpu);
    if (r->n == 0) {
        nothing_fits(&m, &cl, r, &so, &err);
        free(r);
        cli_scatter_release(&pts);
        return cli_fail(&err);
    }
    const struct dp_candidate *w = &r->top[0];
    /* The winner's full memory report, for the plan and the JSON. */
    struct dp_mem_report *rep = malloc(sizeof *rep);
    if (!rep || dp_mem_estimate(&m, &cl, &w->layout, &so.mem, rep, &err)) {
        free(rep);
        free(r);
        cli_scatter_release(&pts);
        return rep ? cli_fail(&err) : 1;
    }
    char shares[256], buf[256], lay[160];
    dp_explain_shares(&w->cost, shares, sizeof shares);
    struct cli_goodput gp;
    if (cli_goodput_eval(&go, &m, &cl, &w->layout, w->cost.step_time_s, &gp, &err)) {
        free(rep);
        free(r);
        cli_scatter_release(&pts);
        return cli_fail(&err);
    }
    /* The plan first: a failure to write it is the command's one result (and, with
     * --json, its one JSON object). */
    if (outfile) {
        struct dp_plan plan = {0};
        plan.version = DP_PLAN_VERSION;
        plan.model = m;
        plan.cluster = cl;
        plan.has_cluster = true;
        plan.layout = w->layout;
        plan.has_prediction = true;
        snprintf(plan.created_by, sizeof plan.created_by, "dplan %s suggest", DPLAN_VERSION);
        plan.prediction.step_time_s = w->cost.step_time_s;
        plan.prediction.tokens_per_s = w->cost.tokens_per_s;
        plan.prediction.mfu = w->cost.mfu;
        plan.prediction.peak_bytes = rep->peak_bytes;
        plan.prediction.nstages = rep->nstages;
        for (int i = 0; i < rep->nstages && i < DP_PLAN_MAX_STAGES_RECORDED; i++)
            plan.prediction.stage_peak_bytes[i] = rep->stage[i].total_bytes;
        cJSON *extra = cli_time_json(&w->cost, &w->layout);
        cJSON_AddItemToObject(extra, "memory", cli_mem_json(rep, &w->layout, &m));
        cJSON_AddStringToObject(extra, "why", shares);
        cJSON_AddItemToObject(extra, "failures",
                              cli_goodput_json(&gp, tokens, w->cost.tokens_per_s));
        if (dp_plan_save(outfile, &plan, extra, &err)) {
            free(rep);
            free(r);
            cli_scatter_release(&pts);
            return cli_fail(&err);
        }
    }
    if (svg) {
        struct dp_buf b = {0};
        rc = cli_svg_suggest(&m, &cl, &so, r, &pts, &b, &err);
        if (!rc)
            rc = cli_write_text(svg, &b, &err);
        dp_buf_release(&b);
        cli_scatter_release(&pts);
        if (rc) {
            free(rep);
            free(r);
            return cli_fail(&err);
        }
    }
    bool svg_on_stdout = svg && strcmp(svg, "-") == 0;
    if (svg_on_stdout) {
        /* the SVG is the output; -o wrote the plan above */
    } else if (c.json) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "model", m.name);
        cJSON_AddStringToObject(o, "cluster", cl.name);
        cJSON_AddNumberToObject(o, "gpus", dp_cluster_gpus(&cl));
        cJSON_AddNumberToObject(o, "gbs", (double)so.gbs);
        cJSON_AddNumberToObject(o, "seq_len", (double)so.seq_len);
        cli_defaults_json(o, &d);
        cJSON_AddNumberToObject(o, "memory_margin", so.memory_margin);
        if (c.memory_margin < 0) {
            char words[96];
            snprintf(words, sizeof words, "%g%%: " CLI_MARGIN_WHY, 100 * so.memory_margin);
            cJSON_AddStringToObject(cJSON_GetObjectItemCaseSensitive(o, "defaults"),
                                    "memory_margin", words);
        }
        cJSON *se = cJSON_AddObjectToObject(o, "search");
        cJSON_AddNumberToObject(se, "evaluated", (double)r->evaluated);
        cJSON_AddNumberToObject(se, "fitting", (double)r->fitting);
        cJSON_AddNumberToObject(se, "out_of_memory", (double)r->oom);
        if (r->bad_time)
            cJSON_AddNumberToObject(se, "skipped_model_bug", (double)r->bad_time);
        cJSON_AddBoolToObject(se, "one_row_per_layout", !all_splits);
        if (timing)
            cJSON_AddNumberToObject(se, "seconds", secs);
        cJSON *pr = cJSON_AddArrayToObject(se, "pruned");
        for (int i = 0; i < r->nnotes; i++)
            cJSON_AddItemToArray(pr, cJSON_CreateString(r->notes[i]));
        cJSON *a = cJSON_AddArrayToObject(o, "top");
        for (int i = 0; i < r->n; i++) {
            cJSON *e = candidate_json(&r->top[i], cap, i + 1);
            if (i > 0) {
                dp_explain_delta(w, &r->top[i], buf, sizeof buf);
                cJSON_AddStringToObject(e, "vs_best", buf);
            }
            cJSON_AddItemToArray(a, e);
        }
        cJSON *ex = cJSON_AddObjectToObject(o, "explanation");
        cJSON_AddStringToObject(ex, "winner_time", shares);
        cJSON *alts = cJSON_AddArrayToObject(ex, "alternatives");
        int idx[32];
        int na = pick_alternatives(r, w, idx);
        for (int k = 0; k < na; k++) {
            const struct dp_alternative *al = &r->alt[idx[k]];
            cJSON *e = cJSON_CreateObject();
            cJSON_AddStringToObject(e, "choice", al->label);
            dp_explain_delta(w, &al->best, buf, sizeof buf);
            cJSON_AddStringToObject(e, "vs_best", buf);
            cJSON_AddItemToObject(e, "layout", dp_layout_to_json(&al->best.layout));
            cJSON_AddItemToArray(alts, e);
        }
        cJSON_AddItemToObject(o, "memory", cli_mem_json(rep, &w->layout, &m));
        cJSON_AddNumberToObject(o, "tokens", tokens);
        if (tokens_default)
            cJSON_AddStringToObject(cJSON_GetObjectItemCaseSensitive(o, "defaults"), "tokens",
                                    tokens_default);
        cJSON *fj = cli_goodput_json(&gp, tokens, w->cost.tokens_per_s);
        cJSON_AddItemToObject(fj, "assumptions", cli_goodput_assumptions_json(&go));
        cJSON_AddItemToObject(o, "failures", fj);
        cli_print_json(o);
    } else {
        cli_describe_model(stdout, &m);
        cli_describe_cluster(stdout, &cl, &d);
        cli_describe_batch(stdout, so.gbs, so.seq_len, &d);
        cli_describe_search_framework(stdout, &so, c.framework >= 0);
        cli_describe_margin(stdout, &c, &cl);
        printf("search   %lld layouts evaluated: %lld fit, %lld out of memory", r->evaluated,
               r->fitting, r->oom);
        if (r->bad_time)
            printf(", %lld skipped (the cost model gave no positive time: a bug)", r->bad_time);
        printf("\n");
        if (timing)
            printf("time     %.3f s, %.2f M layouts/s\n", secs, (double)r->evaluated / secs / 1e6);
        if (r->nnotes) {
            printf("pruned before evaluation:\n");
            for (int i = 0; i < r->nnotes; i++)
                printf("  %s\n", r->notes[i]);
        }
        /* The layout column is as wide as the longest layout shown. */
        int lw = (int)strlen("layout");
        for (int i = 0; i < r->n; i++) {
            dp_layout_format_model(&r->top[i].layout, &m, lay, sizeof lay);
            if ((int)strlen(lay) > lw)
                lw = (int)strlen(lay);
        }
        printf("\n %2s  %-*s %9s %12s %6s %9s %9s\n", "#", lw, "layout", "step s", "tokens/s",
               "MFU", "peak GiB", "headroom");
        for (int i = 0; i < r->n; i++) {
            const struct dp_candidate *cd = &r->top[i];
            dp_layout_format_model(&cd->layout, &m, lay, sizeof lay);
            printf(" %2d  %-*s %9.3f %12.0f %5.1f%% %9.2f %9.2f\n", i + 1, lw, lay,
                   cd->cost.step_time_s, cd->cost.tokens_per_s, 100 * cd->cost.mfu,
                   cli_gib(cd->peak_bytes), cli_gib(cap - cd->peak_bytes));
        }
        if (r->folded_splits)
            printf("(one row per layout, at its best pipeline split and interleaving; "
                   "--all-splits ranks each)\n");
        printf("\nwhy #1: the fastest of %lld layouts that fit; its step goes to %s; MFU %.1f%%; "
               "fullest stage %d at %.2f GiB (%.2f GiB headroom), stages within %.1f%%\n",
               r->fitting, shares, 100 * w->cost.mfu, w->peak_stage, cli_gib(w->peak_bytes),
               cli_gib(cap - w->peak_bytes),
               100.0 * (double)(w->peak_bytes - w->min_bytes) / (double)w->peak_bytes);
        if (r->n > 1) {
            printf("runner-ups:\n");
            for (int i = 1; i < r->n && i < 4; i++) {
                dp_explain_delta(w, &r->top[i], buf, sizeof buf);
                printf("  #%d %s\n", i + 1, buf);
            }
        }
        printf("best layout for other choices (what each loses against #1):\n");
        int idx[32];
        int na = pick_alternatives(r, w, idx);
        /* Choices whose best layout is the same one share a line: "zero=1, pp=2". */
        char labels[32][128];
        int nl = 0, first[32];
        for (int k = 0; k < na; k++) {
            const struct dp_alternative *al = &r->alt[idx[k]];
            int j = 0;
            while (j < nl && !dp_layout_equal(&r->alt[idx[first[j]]].best.layout, &al->best.layout))
                j++;
            if (j == nl) {
                first[nl] = k;
                snprintf(labels[nl++], sizeof labels[0], "%s", al->label);
            } else {
                size_t used = strlen(labels[j]);
                snprintf(labels[j] + used, sizeof labels[0] - used, ", %s", al->label);
            }
        }
        int aw = 0, dw = 0;
        for (int j = 0; j < nl; j++) {
            dp_explain_delta(w, &r->alt[idx[first[j]]].best, buf, sizeof buf);
            if ((int)strlen(labels[j]) > aw)
                aw = (int)strlen(labels[j]);
            if ((int)strlen(buf) > dw)
                dw = (int)strlen(buf);
        }
        for (int j = 0; j < nl; j++) {
            const struct dp_alternative *al = &r->alt[idx[first[j]]];
            dp_explain_delta(w, &al->best, buf, sizeof buf);
            dp_layout_format_model(&al->best.layout, &m, lay, sizeof lay);
            printf("  %-*s  %-*s  [%s]\n", aw, labels[j], dw, buf, lay);
        }
        printf("\n");
        cli_placement_text(stdout, &w->cost, &w->layout);
        printf("\n");
        cli_goodput_text(stdout, &gp, tokens, w->cost.tokens_per_s, tokens_default);
        cli_goodput_assumptions_text(stdout, &go);
    }
    if (outfile && !c.json && !svg_on_stdout)
        printf("\nwrote %s\n", outfile);
    free(rep);
    free(r);
    return 0;
}
