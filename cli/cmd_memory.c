/*
 * dplan memory MODEL <cluster> <knobs> [--json] [--min-gpus]: per-GPU memory per
 * pipeline stage, the FITS/OOM verdict, and the changes that make it fit.
 */
#include "cli.h"
#include "memory_report.h"
#include "planner/planner.h"
#include "split_report.h"
#include "svg_charts.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

static const char help_head[] =
    "usage: dplan memory MODEL <cluster> [knobs] [--json] [--check-fit] [--svg FILE]\n"
    "       dplan memory MODEL <cluster> --min-gpus [--json]\n"
    "       dplan memory --plan plan.json [--json] [--check-fit] [--svg FILE]\n\n"
    "Per-GPU memory of one training step, per pipeline stage: FITS or OOM against\n"
    "the GPU's usable memory (first), then parameters, gradients, optimizer states,\n"
    "activations and other (runtime, buffers) per stage with its layers; when it\n"
    "does not fit, the changes that would make it fit, cheapest first, with the\n"
    "peak each reaches.\n\n"
    "  --plan FILE   model, cluster and layout of a plan (`dplan suggest -o`)\n"
    "  --json        machine-readable report\n"
    "  --check-fit   exit status 3, and one line on stderr, when the layout does not fit\n"
    "  --min-gpus    find the fewest GPUs of this node type on which some layout fits,\n"
    "                searching what suggest searches (knobs given stay fixed; without\n"
    "                --gbs the batch is 2 x mbs sequences per GPU), and print the\n"
    "                fastest layout that fits there (exit status 1 when none does)\n"
    "  --svg FILE    also draw each stage's memory, stacked by kind, against the GPU's\n"
    "                usable memory, as SVG (\"-\": the SVG on stdout instead of the report)\n\n"
    "Exit status: 0 (with --check-fit: and it fits), 3 with --check-fit when it does\n"
    "not fit, 1 on errors, 2 on usage errors.\n\n";

static void fix_json(cJSON *arr, const struct dp_fix *fx)
{
    cJSON *e = cJSON_CreateObject();
    cJSON_AddStringToObject(e, "change", fx->change);
    cJSON_AddNumberToObject(e, "gpus", fx->gpus);
    cJSON_AddNumberToObject(e, "peak_bytes", (double)fx->peak_bytes);
    cJSON_AddBoolToObject(e, "fits", fx->fits);
    cJSON_AddBoolToObject(e, "tight", fx->tight);
    cJSON_AddStringToObject(e, "cost", fx->cost);
    cJSON_AddNumberToObject(e, "extra_flops_fraction", fx->extra_flops);
    cJSON_AddItemToObject(e, "layout", dp_layout_to_json(&fx->layout));
    cJSON_AddItemToArray(arr, e);
}

static void print_min_gpus(const struct dp_min_gpus *mg, const struct dp_model *m,
                           const struct dp_cluster *cl)
{
    char lay[160];
    if (mg->found) {
        dp_layout_format_model(&mg->layout, m, lay, sizeof lay);
        printf("fewest GPUs: %d x %s", mg->gpus, cl->gpu.name);
        if (mg->nodes)
            printf(" (%d node%s of %s)", mg->nodes, mg->nodes == 1 ? "" : "s", cl->system);
        printf(" with %s gbs=%lld, peak %.2f GiB of %.2f GiB\n", lay, (long long)mg->layout.gbs,
               cli_gib(mg->peak_bytes), cli_gib(dp_gpu_usable_bytes(&cl->gpu)));
    } else {
        printf("fits on no count of %s up to the search limit", cl->gpu.name);
        if (mg->best_peak_bytes >= 0) {
            dp_layout_format_model(&mg->best_layout, m, lay, sizeof lay);
            printf("; the smallest peak reached is %.2f GiB (%s)", cli_gib(mg->best_peak_bytes),
                   lay);
        }
        printf("\n");
    }
    printf("(searched %lld layouts)\n", mg->layouts_tried);
}

int cmd_memory(int argc, char **argv)
{
    static const struct option opts[] = {CLI_CLUSTER_OPTIONS,
                                         CLI_PLAN_OPTION,
                                         CLI_KNOB_OPTIONS,
                                         {"json", no_argument, 0, OPT_JSON},
                                         {"check-fit", no_argument, 0, 'c'},
                                         {"min-gpus", no_argument, 0, 'm'},
                                         {"svg", required_argument, 0, 'S'},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    struct cli_common c;
    cli_common_init(&c);
    bool min_gpus = false, check_fit = false;
    const char *svg = NULL;
    int ch;
    optind = 1;
    opterr = 0;
    while ((ch = cli_next_opt("memory", argc, argv, ":h", opts, &c)) != -1) {
        switch (ch) {
        case 'm': min_gpus = true; break;
        case 'c': check_fit = true; break;
        case 'S': svg = optarg; break;
        case 'h': printf("%s%s\n%s", help_head, cli_cluster_help, cli_plan_knob_help); return 0;
        default: return 2;
        }
    }
    if (cli_layout_args("memory", argc, optind, &c))
        return 2;
    struct dp_err err = {0};
    struct dp_model m;
    struct dp_cluster cl;
    struct dp_layout l;
    if (cli_output_check(&c, svg, "--svg", argv + optind, argc - optind, &err))
        return cli_fail(&err);
    if (min_gpus) {
        if (c.plan)
            return cli_usage_error("memory", "--min-gpus takes MODEL and a cluster, not --plan");
        if (cli_split_option(&c))
            return cli_usage_error("memory",
                                   "%s fixes the pipeline split of one layout; --min-gpus searches "
                                   "the layouts itself",
                                   cli_split_option(&c));
        if (check_fit)
            return cli_usage_error("memory", "--check-fit tests one layout, not --min-gpus");
        if (svg)
            return cli_usage_error("memory", "--svg draws one layout's stages, not --min-gpus");
        if (dp_model_load(argv[optind], &m, &err) || cli_cluster(&c, &cl, &err))
            return cli_fail(&err);
    }
    struct dp_mem_opts mo;
    cli_mem_opts(&c, &mo);

    if (min_gpus) {
        /* Knobs given fix their dimension, as in suggest; dp is what the count leaves,
         * and without --gbs the batch follows the count. */
        struct dp_search_opts so;
        if (cli_search_opts(&c, &m, dp_cluster_gpus(&cl), &so, NULL))
            return 2;
        so.gbs = c.gbs;
        if (dp_model_check_seq_len(&m, so.seq_len, &err)) {
            dp_err_prefix(&err, "%s", m.name);
            return cli_fail(&err);
        }
        struct dp_min_gpus mg;
        if (dp_plan_min_gpus(&m, &cl, &so, 1 << 17, &mg, &err))
            return cli_fail(&err);
        if (c.json) {
            cJSON *o = cJSON_CreateObject();
            cJSON_AddBoolToObject(o, "found", mg.found);
            cJSON_AddNumberToObject(o, "gpus", mg.gpus);
            cJSON_AddNumberToObject(o, "nodes", mg.nodes);
            cJSON_AddNumberToObject(o, "peak_bytes", (double)mg.peak_bytes);
            cJSON_AddNumberToObject(o, "capacity_bytes", (double)dp_gpu_usable_bytes(&cl.gpu));
            cJSON_AddNumberToObject(o, "memory_margin", so.memory_margin);
            cJSON_AddNumberToObject(o, "layouts_tried", (double)mg.layouts_tried);
            if (mg.found)
                cJSON_AddItemToObject(o, "layout", dp_layout_to_json(&mg.layout));
            else if (mg.best_peak_bytes >= 0) {
                cJSON_AddNumberToObject(o, "best_peak_bytes", (double)mg.best_peak_bytes);
                cJSON_AddItemToObject(o, "best_layout", dp_layout_to_json(&mg.best_layout));
            }
            cli_print_json(o);
        } else {
            cli_describe_margin(stdout, &c, &cl);
            print_min_gpus(&mg, &m, &cl);
        }
        return mg.found ? 0 : 1;
    }

    struct cli_defaults d;
    if (cli_resolve(&c, optind < argc ? argv[optind] : NULL, &m, &cl, &l, &d, &err))
        return cli_fail(&err);
    struct dp_mem_report *rep = malloc(sizeof *rep);
    if (!rep)
        return 1;
    int rc = dp_mem_estimate(&m, &cl, &l, &mo, rep, &err);
    if (rc) {
        free(rep);
        return cli_fail(&err);
    }
    struct dp_fix fixes[DP_MAX_FIXES];
    int nfix = 0;
    if (!rep->fits &&
        dp_plan_fixes(&m, &cl, &l, &mo, cli_memory_margin(&c), fixes, 8, &nfix, &err)) {
        free(rep);
        return cli_fail(&err);
    }
    bool svg_only = svg && strcmp(svg, "-") == 0; /* the SVG is the output */
    if (svg) {
        struct dp_buf b = {0};
        rc = cli_svg_memory(&m, &cl, &l, rep, &b, &err);
        if (!rc)
            rc = cli_write_text(svg, &b, &err);
        dp_buf_release(&b);
        if (rc) {
            free(rep);
            return cli_fail(&err);
        }
    }
    if (svg_only) {
        /* nothing else on stdout */
    } else if (c.json) {
        cJSON *o = cli_mem_json(rep, &l, &m);
        cJSON_AddStringToObject(o, "model", m.name);
        cJSON_AddStringToObject(o, "cluster", cl.name);
        cJSON_AddNumberToObject(o, "gpus", dp_cluster_gpus(&cl));
        cJSON_AddItemToObject(o, "layout", dp_layout_to_json(&l));
        cli_defaults_json(o, &d);
        cJSON_AddItemToObject(o, "pipeline", cli_split_json(&l, &m));
        if (!rep->fits) {
            cJSON *a = cJSON_AddArrayToObject(o, "fixes");
            for (int i = 0; i < nfix; i++)
                fix_json(a, &fixes[i]);
        }
        cli_print_json(o);
    } else {
        cli_describe_model(stdout, &m);
        cli_describe_cluster(stdout, &cl, &d);
        cli_describe_layout(stdout, &l, &m);
        cli_describe_batch(stdout, l.gbs, l.seq_len, &d);
        if (cli_split_shown(&l)) {
            printf("\n");
            cli_split_text(stdout, &l, &m);
        }
        printf("\n");
        cli_mem_verdict(stdout, rep, cli_memory_margin(&c));
        printf("\n");
        cli_mem_table(stdout, rep, &l, &m);
        cli_mem_balance(stdout, rep);
        cli_mem_quantity(stdout, &l, rep);
        cli_mem_derivation(stdout, &l, rep);
        if (!rep->fits) {
            printf("\nfixes (fitting first, then cheapest; fits = leaves %g%% headroom, "
                   "--memory-margin):\n",
                   100 * cli_memory_margin(&c));
            printf("  %9s  %-5s  %s\n", "peak GiB", "fits", "change -> cost");
            for (int i = 0; i < nfix; i++)
                printf("  %9.2f  %-5s  %s -> %s\n", cli_gib(fixes[i].peak_bytes),
                       fixes[i].fits    ? "yes"
                       : fixes[i].tight ? "tight"
                                        : "no",
                       fixes[i].change, fixes[i].cost);
            if (nfix == 0)
                printf("  none found on this node type; try a GPU with more memory\n");
        }
    }
    /* An out-of-memory layout is a result, not an error: exit 0 unless --check-fit asks. */
    bool fits = rep->fits;
    int64_t peak = rep->peak_bytes;
    int stage = rep->peak_stage;
    free(rep);
    return check_fit && !fits ? cli_no_fit("memory", &m, &cl, peak, stage) : 0;
}
