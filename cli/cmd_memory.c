/*
 * dplan memory MODEL <cluster> <knobs> [--json] [--min-gpus]: per-GPU memory per
 * pipeline stage, the FITS/OOM verdict, and the changes that make it fit.
 */
#include "cli.h"
#include "memory_report.h"
#include "planner/planner.h"
#include "split_report.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

static const char help_head[] =
    "usage: dplan memory MODEL <cluster> [knobs] [--json] [--min-gpus]\n"
    "       dplan memory --plan plan.json [--json]\n\n"
    "Per-GPU memory of one training step, per pipeline stage: parameters,\n"
    "gradients, optimizer states, activations and other (runtime, buffers);\n"
    "FITS or OOM against the GPU's usable memory; when it does not fit, the\n"
    "changes that would make it fit, cheapest first, with the peak each reaches.\n\n"
    "  --json        machine-readable report\n"
    "  --min-gpus    find the fewest GPUs of this node type on which some layout fits\n\n";

static void fix_json(cJSON *arr, const struct dp_fix *fx)
{
    cJSON *e = cJSON_CreateObject();
    cJSON_AddStringToObject(e, "change", fx->change);
    cJSON_AddNumberToObject(e, "gpus", fx->gpus);
    cJSON_AddNumberToObject(e, "peak_bytes", (double)fx->peak_bytes);
    cJSON_AddBoolToObject(e, "fits", fx->fits);
    cJSON_AddStringToObject(e, "cost", fx->cost);
    cJSON_AddNumberToObject(e, "extra_flops_fraction", fx->extra_flops);
    cJSON_AddItemToObject(e, "layout", dp_layout_to_json(&fx->layout));
    cJSON_AddItemToArray(arr, e);
}

static void print_min_gpus(const struct dp_min_gpus *mg, const struct dp_cluster *cl)
{
    char lay[160];
    if (mg->found) {
        dp_layout_format(&mg->layout, lay, sizeof lay);
        printf("fewest GPUs: %d x %s", mg->gpus, cl->gpu.name);
        if (mg->nodes)
            printf(" (%d node%s of %s)", mg->nodes, mg->nodes == 1 ? "" : "s", cl->system);
        printf(" with %s, peak %.2f GiB of %.2f GiB\n", lay, cli_gib(mg->peak_bytes),
               cli_gib(dp_gpu_usable_bytes(&cl->gpu)));
    } else {
        printf("fits on no count of %s up to the search limit", cl->gpu.name);
        if (mg->best_peak_bytes >= 0) {
            dp_layout_format(&mg->best_layout, lay, sizeof lay);
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
                                         CLI_KNOB_OPTIONS,
                                         {"json", no_argument, 0, OPT_JSON},
                                         {"min-gpus", no_argument, 0, 'm'},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    struct cli_common c;
    cli_common_init(&c);
    bool min_gpus = false;
    int ch;
    optind = 1;
    opterr = 0;
    while ((ch = cli_next_opt("memory", argc, argv, ":h", opts, &c)) != -1) {
        switch (ch) {
        case 'm': min_gpus = true; break;
        case 'h': printf("%s%s\n%s", help_head, cli_cluster_help, cli_knob_help); return 0;
        default: return 2;
        }
    }
    if (argc - optind > 1 || (optind == argc && !c.plan))
        return cli_usage_error("memory", "expected one MODEL argument (or --plan FILE)");
    struct dp_err err = {0};
    struct dp_model m;
    struct dp_cluster cl;
    struct dp_layout l;
    if (min_gpus) {
        if (c.plan)
            return cli_usage_error("memory", "--min-gpus takes MODEL and a cluster, not --plan");
        if (cli_split_option(&c))
            return cli_usage_error("memory",
                                   "%s fixes the pipeline split of one layout; --min-gpus searches "
                                   "the layouts itself",
                                   cli_split_option(&c));
        if (dp_model_load(argv[optind], &m, &err) || cli_cluster(&c, &cl, &err))
            return cli_fail(&err);
    }
    struct dp_mem_opts mo;
    cli_mem_opts(&c, &mo);

    if (min_gpus) {
        struct dp_layout base;
        struct cli_common c1 = c;
        c1.tp = c1.pp = c1.dp = c1.cp = 0; /* the search picks the degrees */
        if (cli_layout(&c1, &m, 1, &base, &err))
            return cli_fail(&err);
        struct dp_min_gpus mg;
        if (dp_plan_min_gpus(&m, &cl, &base, c.gbs > 0, &mo, 1 << 17, &mg, &err))
            return cli_fail(&err);
        if (c.json) {
            cJSON *o = cJSON_CreateObject();
            cJSON_AddBoolToObject(o, "found", mg.found);
            cJSON_AddNumberToObject(o, "gpus", mg.gpus);
            cJSON_AddNumberToObject(o, "nodes", mg.nodes);
            cJSON_AddNumberToObject(o, "peak_bytes", (double)mg.peak_bytes);
            cJSON_AddNumberToObject(o, "capacity_bytes", (double)dp_gpu_usable_bytes(&cl.gpu));
            cJSON_AddNumberToObject(o, "layouts_tried", (double)mg.layouts_tried);
            if (mg.found)
                cJSON_AddItemToObject(o, "layout", dp_layout_to_json(&mg.layout));
            else if (mg.best_peak_bytes >= 0) {
                cJSON_AddNumberToObject(o, "best_peak_bytes", (double)mg.best_peak_bytes);
                cJSON_AddItemToObject(o, "best_layout", dp_layout_to_json(&mg.best_layout));
            }
            cli_print_json(o);
        } else {
            print_min_gpus(&mg, &cl);
        }
        return mg.found ? 0 : 1;
    }

    if (cli_resolve(&c, optind < argc ? argv[optind] : NULL, &m, &cl, &l, &err))
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
    if (!rep->fits && dp_plan_fixes(&m, &cl, &l, &mo, fixes, 8, &nfix, &err)) {
        free(rep);
        return cli_fail(&err);
    }
    if (c.json) {
        cJSON *o = cli_mem_json(rep);
        cJSON_AddStringToObject(o, "model", m.name);
        cJSON_AddStringToObject(o, "cluster", cl.name);
        cJSON_AddNumberToObject(o, "gpus", dp_cluster_gpus(&cl));
        cJSON_AddItemToObject(o, "layout", dp_layout_to_json(&l));
        cJSON_AddItemToObject(o, "pipeline", cli_split_json(&l, &m));
        if (!rep->fits) {
            cJSON *a = cJSON_AddArrayToObject(o, "fixes");
            for (int i = 0; i < nfix; i++)
                fix_json(a, &fixes[i]);
        }
        cli_print_json(o);
    } else {
        cli_describe_model(stdout, &m);
        cli_describe_cluster(stdout, &cl);
        cli_describe_layout(stdout, &l, &m);
        printf("\n");
        if (l.pp > 1) {
            cli_split_text(stdout, &l, &m);
            printf("\n");
        }
        cli_mem_table(stdout, rep);
        printf("\n");
        cli_mem_verdict(stdout, rep);
        cli_mem_derivation(stdout, &l, rep);
        if (!rep->fits) {
            printf("\nfixes (fitting first, then cheapest):\n");
            printf("  %9s  %-4s  %s\n", "peak GiB", "fits", "change -> cost");
            for (int i = 0; i < nfix; i++)
                printf("  %9.2f  %-4s  %s -> %s\n", cli_gib(fixes[i].peak_bytes),
                       fixes[i].fits ? "yes" : "no", fixes[i].change, fixes[i].cost);
            if (nfix == 0)
                printf("  none found on this node type; try a GPU with more memory\n");
        }
    }
    /* An out-of-memory layout is a result, not an error: exit 0 either way. */
    free(rep);
    return 0;
}
