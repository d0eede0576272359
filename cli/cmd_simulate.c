/*
 * dplan simulate MODEL <cluster> <knobs> | --plan plan.json: the event
 * simulation of one training step (sim/), its report, and optionally a Chrome
 * Trace Event / Perfetto trace (--trace) and the pipeline Gantt chart (--svg).
 */
#include "cli.h"
#include "sim_report.h"
#include "svg_charts.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

static const char help_head[] =
    "usage: dplan simulate MODEL <cluster> [knobs] [--schedule S] [--json]\n"
    "                      [--trace FILE [--ranks LIST] [--trace-passes]] [--svg FILE]\n"
    "       dplan simulate --plan plan.json [options]\n\n"
    "Simulate one training step event by event: every pipeline stage, model chunk\n"
    "and micro-batch, each layer's attention and MLP blocks on the GPU's compute\n"
    "stream and their tensor/context/expert-parallel collectives, pipeline sends and\n"
    "data-parallel gathers and reductions on streams of their own (overlapped as\n"
    "the layout's overlap knobs say), then the optimizer step. Costs are the cost\n"
    "model's own terms (those `dplan estimate` adds up); the simulation decides only\n"
    "when each runs, so on uniform stages the two agree, and where they differ\n"
    "(uneven stages, bucket timing, contention between streams) the simulation is\n"
    "the finer answer. One GPU per pipeline stage is simulated: a stage's tensor,\n"
    "context and data-parallel ranks run alike.\n\n"
    "Prints the step time (and the analytic estimate), the pipeline span and\n"
    "bubble, where the busiest stage's compute stream spent the step, and per stage\n"
    "its busy time, bubble, exposed communication and simulated peak memory.\n\n"
    "  --plan FILE       model, cluster and layout of a plan (`dplan suggest -o`)\n"
    "  --schedule S      auto (the layout's: DualPipeV with --pipeline-schedule\n"
    "                    dualpipev, interleaved 1F1B with --vpp > 1, else 1F1B),\n"
    "                    gpipe, 1f1b, interleaved or dualpipev. DualPipeV runs its\n"
    "                    overlapped forward-backward pairs (a MoE layer's all-to-alls\n"
    "                    under the partner pass's compute) and its deferred\n"
    "                    weight-gradient passes (W, grey in --svg)\n"
    "  --json            machine-readable output\n"
    "  --trace FILE      write the step as Chrome Trace Event JSON (open it in\n"
    "                    ui.perfetto.dev or chrome://tracing): a process per GPU, a\n"
    "                    thread per stream, slices named by pass, micro-batch, chunk,\n"
    "                    layer and operation, memory counters; \"-\" for stdout\n"
    "  --ranks LIST      with --trace: these global ranks (\"0,8-15\"), each with its\n"
    "                    stage's timeline; default one process per stage\n"
    "  --trace-passes    with --trace: passes and communication only, no layers\n"
    "                    (a full trace holds every layer's operations: llama2-70b\n"
    "                    with pp=8 vpp=5 and 1024 micro-batches writes 216 MB, 27 MB\n"
    "                    with --trace-passes; --ranks also cuts it down)\n"
    "  --svg FILE        draw the pipeline Gantt chart of the step; \"-\" for stdout\n\n";

enum { OPT_SCHEDULE = OPT_COMMON_END + 1, OPT_TRACE, OPT_RANKS, OPT_TRACE_PASSES, OPT_SVG };

int cmd_simulate(int argc, char **argv)
{
    static const struct option opts[] = {CLI_CLUSTER_OPTIONS,
                                         CLI_PLAN_OPTION,
                                         CLI_KNOB_OPTIONS,
                                         {"json", no_argument, 0, OPT_JSON},
                                         {"schedule", required_argument, 0, OPT_SCHEDULE},
                                         {"trace", required_argument, 0, OPT_TRACE},
                                         {"ranks", required_argument, 0, OPT_RANKS},
                                         {"trace-passes", no_argument, 0, OPT_TRACE_PASSES},
                                         {"svg", required_argument, 0, OPT_SVG},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    struct cli_common c;
    cli_common_init(&c);
    struct dp_sim_opts so;
    dp_sim_opts_default(&so);
    const char *trace = NULL, *svg = NULL, *ranks_arg = NULL;
    bool passes_only = false;
    struct dp_err err = {0};
    int ch;
    optind = 1;
    opterr = 0;
    while ((ch = cli_next_opt("simulate", argc, argv, ":h", opts, &c)) != -1) {
        switch (ch) {
        case OPT_SCHEDULE:
            if (dp_sim_schedule_parse(optarg, &so.schedule, &err))
                return cli_usage_error("simulate", "%s", err.msg);
            break;
        case OPT_TRACE: trace = optarg; break;
        case OPT_RANKS: ranks_arg = optarg; break;
        case OPT_TRACE_PASSES: passes_only = true; break;
        case OPT_SVG: svg = optarg; break;
        case 'h': printf("%s%s\n%s", help_head, cli_cluster_help, cli_plan_knob_help); return 0;
        default: return 2;
        }
    }
    if (argc - optind > 1 || (optind == argc && !c.plan))
        return cli_usage_error("simulate", "expected one MODEL argument (or --plan FILE)");
    if ((ranks_arg || passes_only) && !trace)
        return cli_usage_error("simulate", "--ranks and --trace-passes go with --trace FILE");
    int to_stdout = (trace && !strcmp(trace, "-")) + (svg && !strcmp(svg, "-")) + c.json;
    if (to_stdout > 1)
        return cli_usage_error("simulate", "only one of --json, --trace - and --svg - can use "
                                           "stdout");
    if (cli_output_check(&c, trace, "--trace", argv + optind, argc - optind, &err) ||
        cli_output_check(&c, svg, "--svg", argv + optind, argc - optind, &err))
        return cli_fail(&err);
    long *ranks = NULL;
    size_t nranks = 0;
    if (ranks_arg && cli_parse_ranks(ranks_arg, &ranks, &nranks, &err))
        return cli_usage_error("simulate", "%s", err.msg);

    struct dp_model m;
    struct dp_cluster cl;
    struct dp_layout l;
    struct cli_defaults d;
    int rc = cli_resolve(&c, optind < argc ? argv[optind] : NULL, &m, &cl, &l, &d, &err);
    cli_mem_opts(&c, &so.mem);
    struct dp_sim_input *in = malloc(sizeof *in);
    struct dp_sim_result r = {0};
    struct dp_step_cost est;
    bool *rec = NULL;
    if (!in) {
        free(ranks);
        return 1;
    }
    if (!rc)
        rc = dp_sim_build(&m, &cl, &l, &so, in, &err);
    else
        memset(in, 0, sizeof *in);
    if (!rc && trace && !passes_only) {
        /* record the operations of the stages the trace shows */
        so.record = true;
        if (ranks) {
            rec = calloc((size_t)l.pp, sizeof *rec);
            if (!rec)
                rc = dp_err_set(&err, DP_ENOMEM, "out of memory");
            long per = in->ranks_per_stage;
            for (size_t i = 0; !rc && i < nranks; i++)
                if (ranks[i] / per < l.pp)
                    rec[ranks[i] / per] = true;
            so.record_stage = rec;
        }
    }
    if (!rc)
        rc = dp_sim_engine(in, &so, &r, &err);
    if (!rc)
        rc = dp_time_step(&m, &cl, &l, &est, &err);
    if (!rc && trace) {
        struct dp_buf b = {0};
        char title[256];
        snprintf(title, sizeof title, "dplan simulate %s on %d x %s", m.name, dp_cluster_gpus(&cl),
                 cl.gpu.name);
        struct dp_sim_trace_opts to = {ranks, nranks, passes_only, title};
        rc = dp_sim_trace(&r, in, &to, &b, &err);
        if (!rc)
            rc = cli_write_text(trace, &b, &err);
        dp_buf_release(&b);
    }
    if (!rc && svg) {
        struct dp_buf b = {0};
        rc = cli_svg_gantt(&m, &cl, &l, &r, &b, &err);
        if (!rc)
            rc = cli_write_text(svg, &b, &err);
        dp_buf_release(&b);
    }
    if (!rc && to_stdout == 0) {
        cli_describe_model(stdout, &m);
        cli_describe_cluster(stdout, &cl, &d);
        cli_describe_layout(stdout, &l, &m);
        cli_describe_batch(stdout, l.gbs, l.seq_len, &d);
        printf("\n");
        cli_sim_text(stdout, &r, &l, &est, dp_gpu_usable_bytes(&cl.gpu));
    } else if (!rc && c.json) {
        cJSON *o = cli_sim_json(&r, &est);
        cJSON_AddBoolToObject(o, "fits", r.peak_bytes <= dp_gpu_usable_bytes(&cl.gpu));
        cJSON_AddNumberToObject(o, "capacity_bytes", (double)dp_gpu_usable_bytes(&cl.gpu));
        cJSON_AddStringToObject(o, "model", m.name);
        cJSON_AddStringToObject(o, "cluster", cl.name);
        cJSON_AddNumberToObject(o, "gpus", dp_cluster_gpus(&cl));
        cJSON_AddItemToObject(o, "layout", dp_layout_to_json(&l));
        cli_defaults_json(o, &d);
        cli_print_json(o);
    }
    dp_sim_result_release(&r);
    dp_sim_input_release(in);
    free(in);
    free(rec);
    free(ranks);
    return rc ? cli_fail(&err) : 0;
}
