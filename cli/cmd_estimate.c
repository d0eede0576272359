/*
 * dplan estimate MODEL <cluster> <knobs> [--json]: predicted step time of one
 * layout with its breakdown, throughput, FLOP rates, links and memory.
 */
#include "cli.h"
#include "memory_report.h"
#include "split_report.h"
#include "time_report.h"

#include <cjson/cJSON.h>
#include <stdlib.h>

static const char help_head[] =
    "usage: dplan estimate MODEL <cluster> [knobs] [--json]\n"
    "       dplan estimate --plan plan.json [--json]\n\n"
    "Predict one training step of MODEL under the given layout: step time and\n"
    "its breakdown (compute, recompute, tensor/context/expert/pipeline/data-\n"
    "parallel communication, pipeline bubble, optimizer), tokens/s, TFLOP/s per\n"
    "GPU (model and hardware FLOPs), MFU, which link each parallel group uses,\n"
    "and the per-stage memory report of `dplan memory`.\n\n"
    "  --json    machine-readable output\n\n";

int cmd_estimate(int argc, char **argv)
{
    static const struct option opts[] = {CLI_CLUSTER_OPTIONS,
                                         CLI_KNOB_OPTIONS,
                                         {"json", no_argument, 0, OPT_JSON},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    struct cli_common c;
    cli_common_init(&c);
    int ch;
    optind = 1;
    opterr = 0;
    while ((ch = cli_next_opt("estimate", argc, argv, ":h", opts, &c)) != -1) {
        switch (ch) {
        case 'h': printf("%s%s\n%s", help_head, cli_cluster_help, cli_knob_help); return 0;
        default: return 2;
        }
    }
    if (argc - optind > 1 || (optind == argc && !c.plan))
        return cli_usage_error("estimate", "expected one MODEL argument (or --plan FILE)");
    struct dp_err err = {0};
    struct dp_model m;
    struct dp_cluster cl;
    struct dp_layout l;
    if (cli_resolve(&c, optind < argc ? argv[optind] : NULL, &m, &cl, &l, &err))
        return cli_fail(&err);
    struct dp_mem_opts mo;
    cli_mem_opts(&c, &mo);
    struct dp_step_cost sc;
    struct dp_mem_report *rep = malloc(sizeof *rep);
    if (!rep)
        return 1;
    if (dp_time_step(&m, &cl, &l, &sc, &err) || dp_mem_estimate(&m, &cl, &l, &mo, rep, &err)) {
        free(rep);
        return cli_fail(&err);
    }
    if (c.json) {
        cJSON *o = cli_time_json(&sc, &l);
        cJSON_AddStringToObject(o, "model", m.name);
        cJSON_AddStringToObject(o, "cluster", cl.name);
        cJSON_AddNumberToObject(o, "gpus", dp_cluster_gpus(&cl));
        cJSON_AddItemToObject(o, "layout", dp_layout_to_json(&l));
        cJSON_AddItemToObject(o, "pipeline", cli_split_json(&l, &m));
        cJSON_AddItemToObject(o, "memory", cli_mem_json(rep));
        cli_print_json(o);
    } else {
        cli_describe_model(stdout, &m);
        cli_describe_cluster(stdout, &cl);
        cli_describe_layout(stdout, &l, &m);
        printf("\n");
        cli_time_text(stdout, &sc, &l, &cl);
        printf("\n");
        cli_placement_text(stdout, &sc, &l);
        printf("\n");
        if (l.pp > 1) {
            cli_split_text(stdout, &l, &m);
            printf("\n");
        }
        cli_mem_table(stdout, rep);
        printf("\n");
        cli_mem_verdict(stdout, rep);
    }
    free(rep);
    return 0;
}
