/*
 * dplan validate [RUNS.json]: predicted against measured step times of
 * published (or your own) training runs; the table, mean and worst absolute
 * percentage error. tests/validation/runs.json is the shipped data set.
 */
#include "cli.h"
#include "planner/planner.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static const char help[] =
    "usage: dplan validate [RUNS.json] [--json] [--max-mean-error PCT] [--verbose]\n\n"
    "Compare the step-time model with measured training runs. Each run names a\n"
    "model, a system and node count (or a cluster object), the layout it used,\n"
    "and what was measured: \"iteration_time_s\", or \"tflops_per_gpu\" with the\n"
    "FLOP convention the source used (\"narayanan21\": Eq. 3 of Narayanan et al.\n"
    "2021, hardware FLOPs with full recompute; \"model\": model FLOPs without\n"
    "recompute), or \"tokens_per_s_per_gpu\". Times are compared, not TFLOP/s.\n"
    "Runs marked \"underspecified\" (their source omits layout details) or with\n"
    "\"needs\" (knobs dplan does not model yet, e.g. [\"fp8\"]; the layout holds\n"
    "the nearest expressible one) are shown but not scored. Default RUNS.json:\n"
    "the shipped tests/validation/runs.json (tests/validation/moe.json: MoE runs).\n\n"
    "  --json                 machine-readable results\n"
    "  --max-mean-error PCT   exit 1 if the mean absolute error of the scored runs\n"
    "                         exceeds PCT percent\n"
    "  --verbose              the predicted breakdown of each run\n";

const char *cli_default_runs(void)
{
    static char path[4096];
    snprintf(path, sizeof path, "%s/../tests/validation/runs.json", dp_profiles_dir());
    return path;
}

struct stats {
    int n;
    double mean, worst;
    const char *worst_id;
};

static struct stats stats_of(const struct dp_run *runs, const struct dp_run_result *res, int n,
                             int held)
{
    struct stats s = {0, 0, 0, ""};
    for (int i = 0; i < n; i++) {
        if (runs[i].underspecified || runs[i].needs[0] ||
            (held >= 0 && runs[i].held_out != (held == 1)))
            continue;
        double e = fabs(res[i].error);
        s.mean += e;
        s.n++;
        if (e > s.worst) {
            s.worst = e;
            s.worst_id = runs[i].id;
        }
    }
    if (s.n)
        s.mean /= s.n;
    return s;
}

static void print_stats(const char *label, struct stats s)
{
    if (s.n)
        printf("%-26s %2d runs: mean |error| %5.2f%%, worst %5.2f%% (%s)\n", label, s.n,
               100 * s.mean, 100 * s.worst, s.worst_id);
}

int cmd_validate(int argc, char **argv)
{
    static const struct option opts[] = {{"json", no_argument, 0, 'j'},
                                         {"max-mean-error", required_argument, 0, 'e'},
                                         {"verbose", no_argument, 0, 'v'},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    bool json = false, verbose = false;
    double max_err = -1;
    int ch;
    optind = 1;
    opterr = 0;
    while ((ch = cli_next_opt("validate", argc, argv, ":hv", opts, NULL)) != -1) {
        switch (ch) {
        case 'j': json = true; break;
        case 'v': verbose = true; break;
        case 'e': {
            char *end;
            max_err = strtod(optarg, &end);
            if (end == optarg || *end || !(max_err >= 0))
                return cli_usage_error(
                    "validate", "--max-mean-error: expected percent >= 0, got \"%s\"", optarg);
            break;
        }
        case 'h': fputs(help, stdout); return 0;
        default: return 2;
        }
    }
    if (argc - optind > 1)
        return cli_usage_error("validate", "expected at most one RUNS.json");
    const char *file = optind < argc ? argv[optind] : cli_default_runs();
    struct dp_err err = {0};
    struct dp_run *runs;
    int n;
    if (dp_runs_load(file, &runs, &n, &err))
        return cli_fail(&err);
    struct dp_run_result *res = calloc((size_t)n, sizeof *res);
    for (int i = 0; i < n; i++)
        if (dp_run_predict(&runs[i], &res[i], &err)) {
            free(res);
            free(runs);
            return cli_fail(&err);
        }
    struct stats all = stats_of(runs, res, n, -1);
    if (json) {
        cJSON *o = cJSON_CreateObject();
        cJSON *a = cJSON_AddArrayToObject(o, "runs");
        for (int i = 0; i < n; i++) {
            cJSON *e = cJSON_CreateObject();
            cJSON_AddStringToObject(e, "id", runs[i].id);
            cJSON_AddNumberToObject(e, "measured_s", res[i].measured_s);
            cJSON_AddNumberToObject(e, "predicted_s", res[i].predicted_s);
            cJSON_AddNumberToObject(e, "error", res[i].error);
            cJSON_AddBoolToObject(e, "held_out", runs[i].held_out);
            cJSON_AddBoolToObject(e, "underspecified", runs[i].underspecified);
            if (runs[i].needs[0])
                cJSON_AddStringToObject(e, "needs", runs[i].needs);
            cJSON_AddItemToArray(a, e);
        }
        cJSON_AddNumberToObject(o, "scored_runs", all.n);
        cJSON_AddNumberToObject(o, "mean_abs_error", all.mean);
        cJSON_AddNumberToObject(o, "worst_abs_error", all.worst);
        cli_print_json(o);
    } else {
        printf("%-36s %11s %11s %8s\n", "run", "measured s", "predicted s", "error");
        for (int i = 0; i < n; i++) {
            char tag[192] = "";
            if (runs[i].needs[0])
                snprintf(tag, sizeof tag, "  (needs %s%s: not scored)", runs[i].needs,
                         runs[i].underspecified ? "; underspecified" : "");
            else if (runs[i].underspecified)
                snprintf(tag, sizeof tag, "  (underspecified: not scored)");
            else if (runs[i].held_out)
                snprintf(tag, sizeof tag, "  (held out)");
            printf("%-36s %11.3f %11.3f %+7.2f%%%s\n", runs[i].id, res[i].measured_s,
                   res[i].predicted_s, 100 * res[i].error, tag);
            if (verbose) {
                const struct dp_step_cost *c = &res[i].cost;
                printf("    compute %.3f recompute %.3f tp %.3f pp %.3f bubble %.3f dp %.3f "
                       "(of %.3f) opt %.3f other %.3f cp %.3f ep %.3f | MFU %.1f%% HFU %.1f%%\n",
                       c->compute_s, c->recompute_s, c->tp_comm_s, c->pp_comm_s, c->bubble_s,
                       c->dp_comm_s, c->dp_comm_total_s, c->optimizer_s, c->other_s, c->cp_comm_s,
                       c->ep_comm_s, 100 * c->mfu, 100 * c->hfu);
            }
        }
        printf("\n");
        print_stats("scored (all)", all);
        print_stats("used to fit GPU curves", stats_of(runs, res, n, 0));
        print_stats("held out", stats_of(runs, res, n, 1));
    }
    free(res);
    free(runs);
    if (max_err >= 0 && 100 * all.mean > max_err) {
        fprintf(stderr, "dplan: error: mean absolute error %.2f%% exceeds the bar of %.2f%%\n",
                100 * all.mean, max_err);
        return 1;
    }
    return 0;
}
