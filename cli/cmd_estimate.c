/*
 * dplan estimate MODEL <cluster> <knobs> [--json]: predicted step time of one
 * layout with its breakdown, throughput, FLOP rates, links and memory.
 */
#include "cli.h"
#include "executor/executor.h"
#include "fit/fit.h"
#include "memory_report.h"
#include "sim/sim.h"
#include "split_report.h"
#include "time_report.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

static const char help_head[] =
    "usage: dplan estimate MODEL <cluster> [knobs] [--json] [--check-fit]\n"
    "       dplan estimate --plan plan.json [--json] [--check-fit]\n\n"
    "Predict one training step of MODEL under the given layout: whether it fits\n"
    "in memory (first), the step time and its breakdown (compute, recompute,\n"
    "tensor/context/expert/pipeline/data-parallel communication, pipeline bubble,\n"
    "optimizer), tokens/s, TFLOP/s per GPU (model and hardware FLOPs), MFU, which\n"
    "link each parallel group uses, and the per-stage memory report of\n"
    "`dplan memory`. A layout that does not fit is still timed (as if it fit).\n\n"
    "  --plan FILE   model, cluster and layout of a plan (`dplan suggest -o`)\n"
    "  --json        machine-readable output (\"fits\" first)\n"
    "  --check-fit   exit status 3, and one line on stderr, when the layout does not\n"
    "                fit in memory\n"
    "  --simulate    take the step time and its breakdown (the busiest stage's) from the\n"
    "                event simulation of the step (`dplan simulate`), the finer answer\n"
    "                for uneven stages, bucket timing and contention between streams\n\n"
    "Exit status: 0 (with --check-fit: and it fits), 3 with --check-fit when it does\n"
    "not fit, 1 on errors, 2 on usage errors.\n\n";

/* The step-time object with "fits" as its first member. */
static cJSON *with_fits_first(cJSON *t, bool fits)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddBoolToObject(o, "fits", fits);
    while (t->child) {
        cJSON *it = cJSON_DetachItemViaPointer(t, t->child);
        cJSON_AddItemToObject(o, it->string, it);
    }
    cJSON_Delete(t);
    return o;
}

/*
 * --simulate: the step time and its breakdown from the event simulation (the busiest
 * stage's compute stream, whose terms sum to the step), the rates scaled to it.
 */
static int use_simulation(const struct dp_model *m, const struct dp_cluster *cl,
                          const struct dp_layout *l, const struct dp_mem_opts *mo,
                          struct dp_step_cost *sc, struct dp_err *err)
{
    struct dp_sim_opts so;
    dp_sim_opts_default(&so);
    so.mem = *mo;
    struct dp_sim_result r;
    int rc = dp_sim_run(m, cl, l, &so, &r, err);
    if (rc)
        return rc;
    if (r.caveat) { /* the analytic step is the one that prices what the simulation lacks */
        rc = dp_err_set(err, DP_EINFEASIBLE, "--simulate: %s (drop --simulate for the estimate)",
                        r.caveat);
        dp_sim_result_release(&r);
        return rc;
    }
    const struct dp_sim_breakdown *b = &r.stage[r.busiest].b;
    double k = r.step_s > 0 ? sc->step_time_s / r.step_s : 1;
    sc->step_time_s = r.step_s;
    sc->compute_s = b->compute;
    sc->recompute_s = b->recompute;
    sc->tp_comm_s = b->tp;
    sc->cp_comm_s = b->cp;
    sc->ep_comm_s = b->ep;
    sc->pp_comm_s = b->pp;
    sc->bubble_s = b->bubble;
    sc->dp_comm_s = b->dp;
    sc->optimizer_s = b->optimizer;
    sc->other_s = b->other;
    sc->slowest_stage = r.busiest;
    sc->tokens_per_s *= k;
    sc->model_tflops_per_gpu *= k;
    sc->hardware_tflops_per_gpu *= k;
    sc->mfu *= k;
    sc->hfu *= k;
    dp_sim_result_release(&r);
    return 0;
}

int cmd_estimate(int argc, char **argv)
{
    static const struct option opts[] = {CLI_CLUSTER_OPTIONS,
                                         CLI_PLAN_OPTION,
                                         CLI_KNOB_OPTIONS,
                                         {"json", no_argument, 0, OPT_JSON},
                                         {"check-fit", no_argument, 0, 'c'},
                                         {"simulate", no_argument, 0, 's'},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    struct cli_common c;
    cli_common_init(&c);
    bool check_fit = false, simulate = false;
    int ch;
    optind = 1;
    opterr = 0;
    while ((ch = cli_next_opt("estimate", argc, argv, ":h", opts, &c)) != -1) {
        switch (ch) {
        case 'c': check_fit = true; break;
        case 's': simulate = true; break;
        case 'h': printf("%s%s\n%s", help_head, cli_cluster_help, cli_plan_knob_help); return 0;
        default: return 2;
        }
    }
    if (cli_layout_args("estimate", argc, optind, &c))
        return 2;
    struct dp_err err = {0};
    struct dp_model m;
    struct dp_cluster cl;
    struct dp_layout l;
    struct cli_defaults d;
    if (cli_resolve(&c, optind < argc ? argv[optind] : NULL, &m, &cl, &l, &d, &err))
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
    double analytic_s = sc.step_time_s;
    if (simulate && use_simulation(&m, &cl, &l, &mo, &sc, &err)) {
        free(rep);
        return cli_fail(&err);
    }
    /* A profile of this machine's CPU backend, estimating this machine (the cluster is the
     * one the profile measured): also the executor's step as `dplan run` would take it here
     * (executor/predict.c, priced with the profile's kernel costs). On another cluster
     * (--system with the profile's collective fits laid over it) that step answers nothing
     * asked, and for a large model pricing it walks every granule of its weights. */
    const struct dp_calibration *cal = NULL;
    struct dp_exec_prediction cp = {0};
    if (cli_calibration(&c, &cal, &err)) {
        free(rep);
        return cli_fail(&err);
    }
    if (cal && cal->ncpu > 0 && strcmp(cal->machine.backend, "cpu") == 0 &&
        cal->machine.has_cluster && strcmp(cal->machine.cluster.name, cl.name) == 0) {
        int world = l.tp * l.pp * l.dp * l.cp;
        int cores = cal->machine.cores > 0 ? cal->machine.cores : 1;
        /* The launcher's split: OMP_NUM_THREADS = cores / ranks (launch/mpirun.c). */
        int th = cores / world > 1 ? cores / world : 1;
        struct dp_exec_machine cr = {.world = world, .ranks_per_node = world, .threads = th};
        struct dp_exec_costs costs;
        cli_calibration_machine(cal, th, th * world, &costs, &cr);
        struct dp_layout lc = l;
        lc.precision = DP_FP32; /* what the CPU backend computes in */
        if (dp_exec_predict(&m, &lc, &cr, &cp, &err)) {
            /* A layout the CPU backend does not run: the GPU model's answer stands. */
            fprintf(stderr, "dplan estimate: note: no CPU executor step: %s\n", err.msg);
            dp_err_clear(&err);
            memset(&cp, 0, sizeof cp);
        }
    }
    if (c.json) {
        cJSON *o = with_fits_first(cli_time_json(&sc, &l), rep->fits);
        if (cp.step_s > 0) {
            cJSON_AddItemToObject(o, "cpu_executor", cli_cpu_prediction_json(&cp));
        }
        if (simulate) {
            cJSON_AddBoolToObject(o, "simulated", true);
            cJSON_AddNumberToObject(o, "analytic_step_time_s", analytic_s);
        }
        cJSON_AddStringToObject(o, "model", m.name);
        cJSON_AddStringToObject(o, "cluster", cl.name);
        cJSON_AddNumberToObject(o, "gpus", dp_cluster_gpus(&cl));
        cJSON_AddItemToObject(o, "layout", dp_layout_to_json(&l));
        cli_defaults_json(o, &d);
        cJSON_AddItemToObject(o, "pipeline", cli_split_json(&l, &m));
        cJSON_AddItemToObject(o, "memory", cli_mem_json(rep, &l, &m));
        cli_print_json(o);
    } else {
        cli_describe_model(stdout, &m);
        cli_describe_cluster(stdout, &cl, &d);
        cli_describe_layout(stdout, &l, &m);
        cli_describe_batch(stdout, l.gbs, l.seq_len, &d);
        printf("\n");
        /* The verdict first: a layout that does not fit does not run, however fast. */
        cli_mem_verdict(stdout, rep, cli_memory_margin(&c));
        if (!rep->fits)
            printf("the times below are what it would take if it fit; `dplan memory` with the "
                   "same options lists fixes\n");
        printf("\n");
        if (simulate)
            printf("step time from the event simulation (`dplan simulate`), its busiest stage's "
                   "breakdown; analytic estimate %.4f s (%+.2f%%)\n",
                   analytic_s, 100 * (sc.step_time_s - analytic_s) / analytic_s);
        cli_time_text(stdout, &sc, &l, &cl);
        if (dp_model_attn_pair_ratio(&m, l.seq_len) < 1)
            printf("sliding window: %lld of %lld layers attend to the last %lld tokens; the "
                   "attention's time and FLOPs count the query-key pairs kept, %.1f%% of full "
                   "causal attention's\n",
                   (long long)m.window_layers, (long long)m.layers, (long long)m.window,
                   100 * dp_model_attn_pair_ratio(&m, l.seq_len));
        printf("\n");
        cli_placement_text(stdout, &sc, &l);
        printf("\n");
        if (cli_split_shown(&l)) {
            cli_split_text(stdout, &l, &m);
            printf("\n");
        }
        cli_mem_table(stdout, rep, &l, &m);
        cli_mem_balance(stdout, rep);
        cli_mem_quantity(stdout, &l, rep);
        if (cp.step_s > 0)
            printf("\nCPU executor (`dplan run` here, priced by %s, executor/predict.c): step %.2f "
                   "ms = gemm %.2f, "
                   "attention %.2f, element-wise %.2f, communication %.2f, optimizer %.2f, "
                   "bubble %.2f, time-sharing %.2f ms\n",
                   c.calibration, 1e3 * cp.step_s, 1e3 * cp.gemm_s, 1e3 * cp.attention_s,
                   1e3 * cp.elementwise_s, 1e3 * cp.comm_s, 1e3 * cp.optimizer_s, 1e3 * cp.bubble_s,
                   1e3 * cp.timeshare_s);
    }
    bool fits = rep->fits;
    int64_t peak = rep->peak_bytes;
    int stage = rep->peak_stage;
    free(rep);
    return check_fit && !fits ? cli_no_fit("estimate", &m, &cl, peak, stage) : 0;
}
