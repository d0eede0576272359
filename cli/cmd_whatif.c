/*
 * dplan whatif MODEL [--systems a,b,c] [--nodes 1,2,4] [--tokens T]
 * [--price-per-gpu-hour sys=usd,...]: the buying question. For each system and
 * size, the best layout that fits, its throughput, days to train T tokens and
 * what that costs. Without --systems every shipped system, without --nodes
 * 1, 2, 4, ... 128 nodes (said in the output).
 */
#define _GNU_SOURCE /* sched_getaffinity, CPU_COUNT: the CPUs this process may use */
#include "cli.h"
#include "goodput_report.h"
#include "planner/planner.h"
#include "svg_charts.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char help_head[] =
    "usage: dplan whatif MODEL [--systems A,B,...] [--nodes N1,N2,...] [--tokens T]\n"
    "                   [--price-per-gpu-hour SYS=USD,...] [--gbs N] [--seq-len N] [--json]\n"
    "                   [--svg FILE] [--failure-rate R | --mtbf-hours H] [--ckpt-write-gbps X]\n"
    "                   [--storage-gbps X] [--restart-min M]\n\n"
    "For each system (profiles/system) and node count: does any layout fit, the\n"
    "fastest one (`dplan suggest`'s search), its tokens/s, the days to train T\n"
    "tokens without failures, the checkpoint interval that maximises goodput, the\n"
    "goodput there and the days with failures, and the cost of those days when\n"
    "prices are given. Knobs fix dimensions as in suggest.\n\n"
    "  --systems LIST            system profiles to compare [every one in\n"
    "                            profiles/system, listed by `dplan profiles`]\n"
    "  --nodes LIST              node counts to try for each system [1,2,4,...,128]\n"
    "  --network NAME            inter-node network for every system (profiles/network)\n"
    "                            [each system's own]\n"
    "  --tokens T                training tokens (e.g. 2e12, 300B, 15T), at most 1e15 [1T]\n"
    "  --price-per-gpu-hour LIST prices in USD per GPU-hour, e.g. dgx-h100=2.5,dgx-a100-80gb=1.3;\n"
    "                            the cost is the GPU-hours of the days with failures\n"
    "  --calibration FILE        a `dplan calibrate` profile: its fitted GEMM curve on the\n"
    "                            systems with its GPU, its all-reduce busbw and latency on\n"
    "                            the links it measured (\"intra\", \"inter\" or by name)\n"
    "  --jobs N                  searches run at once, one per thread [the CPUs this\n"
    "                            process may use]; the results do not depend on it\n"
    "  --json                    machine-readable output\n"
    "  --svg FILE                also draw tokens/s and the cost (days with failures without\n"
    "                            prices) per system and size as grouped bars, as SVG (\"-\": the\n"
    "                            SVG on stdout instead of the table)\n\n";

struct price {
    char system[64];
    double usd;
};

static int parse_prices(const char *s, struct price *p, int cap)
{
    int n = 0;
    char buf[1024];
    snprintf(buf, sizeof buf, "%s", s);
    for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
        char *eq = strchr(tok, '=');
        if (!eq || n == cap)
            return -1;
        *eq = '\0';
        char *end;
        double v = strtod(eq + 1, &end);
        if (end == eq + 1 || *end || !(v >= 0 && v <= 1e6) || !tok[0])
            return -1;
        for (int i = 0; i < n; i++)
            if (strcmp(p[i].system, tok) == 0)
                return -2 - i; /* a second price for system i */
        snprintf(p[n].system, sizeof p[n].system, "%s", tok);
        p[n].usd = v;
        n++;
    }
    return n;
}

/* One row of the text table, formatted. */
struct row {
    char system[64];
    int nodes, gpus;
    char layout[192];
    char tps[24], mfu[16], days[32], ckpt[32], goodput[16], fdays[32], cost[32];
    char why[sizeof((struct dp_err *)0)->msg]; /* no valid layout: the planner's reason */
};

/* The CPUs this process may run on (its affinity mask: a container's or taskset's share). */
static int usable_cpus(void)
{
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0)
        return CPU_COUNT(&set);
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

/* On a terminal, the searches done so far. */
static void search_done(const struct dp_search_job *j, int ndone, int njobs, void *ctx)
{
    (void)ctx;
    fprintf(stderr, "\rwhatif: %d of %d searches (%s x%d done)\033[K", ndone, njobs, j->cl.system,
            j->cl.nodes);
}

int cmd_whatif(int argc, char **argv)
{
    static const struct option opts[] = {CLI_KNOB_OPTIONS,
                                         {"network", required_argument, 0, OPT_NETWORK},
                                         {"calibration", required_argument, 0, OPT_CAL_FILE},
                                         {"json", no_argument, 0, OPT_JSON},
                                         {"systems", required_argument, 0, 's'},
                                         {"nodes", required_argument, 0, 'n'},
                                         {"tokens", required_argument, 0, 't'},
                                         {"price-per-gpu-hour", required_argument, 0, 'p'},
                                         {"svg", required_argument, 0, 'S'},
                                         {"jobs", required_argument, 0, 'j'},
                                         CLI_GOODPUT_OPTIONS,
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    struct cli_common c;
    cli_common_init(&c);
    char systems_buf[1024] = "";
    int nodes[64], nn = 0;
    double tokens = 1e12;
    struct price prices[32];
    int np = 0;
    const char *svg = NULL;
    int threads = usable_cpus();
    struct cli_goodput_opts go;
    cli_goodput_opts_init(&go);
    int ch;
    optind = 1;
    opterr = 0;
    while ((ch = cli_next_opt("whatif", argc, argv, ":h", opts, &c)) != -1) {
        switch (ch) {
        case 's': snprintf(systems_buf, sizeof systems_buf, "%s", optarg); break;
        case 'n':
            nn = dp_parse_int_list(optarg, nodes, 64);
            if (nn < 1)
                return cli_usage_error("whatif", "--nodes: expected a list like 1,2,4, got \"%s\"",
                                       optarg);
            for (int i = 0; i < nn; i++) {
                if (nodes[i] < 1 || nodes[i] > 1000000)
                    return cli_usage_error(
                        "whatif", "--nodes: expected counts in [1, 1000000], got %d", nodes[i]);
                for (int j = 0; j < i; j++)
                    if (nodes[j] == nodes[i])
                        return cli_usage_error("whatif", "--nodes: %d is listed twice", nodes[i]);
            }
            break;
        case 't':
            if (cli_parse_tokens(optarg, &tokens))
                return cli_usage_error("whatif",
                                       "--tokens: expected a count in (0, 1e15] like 2e12 or "
                                       "300B, got \"%s\"",
                                       optarg);
            break;
        case 'p':
            np = parse_prices(optarg, prices, 32);
            if (np <= -2)
                return cli_usage_error("whatif", "--price-per-gpu-hour: %s has two prices",
                                       prices[-2 - np].system);
            if (np < 1)
                return cli_usage_error("whatif",
                                       "--price-per-gpu-hour: expected SYSTEM=USD,... (USD in "
                                       "[0, 1e6]), got \"%s\"",
                                       optarg);
            break;
        case 'S': svg = optarg; break;
        case 'j': {
            char *end;
            long v = strtol(optarg, &end, 10);
            if (end == optarg || *end || v < 1 || v > 256)
                return cli_usage_error("whatif", "--jobs: expected a count in [1, 256], got \"%s\"",
                                       optarg);
            threads = (int)v;
            break;
        }
        case 'h': printf("%s%s\n%s", help_head, cli_plan_knob_help, cli_goodput_help); return 0;
        default: {
            int g = cli_goodput_opt("whatif", ch, optarg, &go);
            if (g <= 0)
                return 2;
            break;
        }
        }
    }
    if (cli_search_args("whatif", argc, optind, &c))
        return 2;
    struct dp_err err = {0};
    struct dp_model m;
    if (cli_output_check(&c, svg, "--svg", argv + optind, 1, &err) ||
        dp_model_load(argv[optind], &m, &err))
        return cli_fail(&err);
    /* The defaults: every shipped system, node counts doubling from 1 to 128. */
    const bool all_systems = !systems_buf[0], default_nodes = nn == 0;
    if (all_systems) {
        char **names;
        int count;
        if (dp_profile_names("system", &names, &count, &err))
            return cli_fail(&err);
        size_t len = 0;
        for (int i = 0; i < count && i < 32; i++) {
            int w = snprintf(systems_buf + len, sizeof systems_buf - len, "%s%s", i ? "," : "",
                             names[i]);
            if (w < 0 || (size_t)w >= sizeof systems_buf - len)
                break;
            len += (size_t)w;
        }
        dp_names_free(names, count);
        if (!systems_buf[0])
            return cli_usage_error("whatif", "no system profiles in %s/system: give --systems",
                                   dp_profiles_dir());
    }
    if (default_nodes)
        for (int k = 1; k <= 128; k *= 2)
            nodes[nn++] = k;
    char *systems[32];
    int ns = 0;
    for (char *tok = strtok(systems_buf, ","); tok; tok = strtok(NULL, ",")) {
        if (ns == 32)
            return cli_usage_error("whatif", "--systems: at most 32 systems");
        for (int j = 0; j < ns; j++)
            if (strcmp(systems[j], tok) == 0)
                return cli_usage_error("whatif", "--systems: %s is listed twice", tok);
        systems[ns++] = tok;
    }
    for (int i = 0; i < np; i++) {
        bool known = false;
        for (int j = 0; j < ns; j++)
            known |= strcmp(prices[i].system, systems[j]) == 0;
        if (!known)
            return cli_usage_error("whatif", "--price-per-gpu-hour: \"%s\" is not in --systems",
                                   prices[i].system);
    }
    if (cli_check_knobs(&c, NULL, NULL, &err))
        return cli_fail(&err);
    struct dp_search_opts so;
    struct cli_defaults d;
    if (cli_search_opts(&c, &m, 0, &so, &d))
        return 2;
    const int64_t header_gbs = so.gbs; /* power-of-two sizes' batch; each result has its own */
    so.top_k = 1;
    if (dp_model_check_seq_len(&m, so.seq_len, &err)) {
        dp_err_prefix(&err, "%s", m.name);
        return cli_fail(&err);
    }
    struct dp_search_job *jobs = calloc((size_t)(ns * nn), sizeof *jobs);
    struct row *tab = calloc((size_t)(ns * nn), sizeof *tab);
    struct cli_whatif_row *chart = calloc((size_t)(ns * nn), sizeof *chart);
    if (!jobs || !tab || !chart) {
        free(jobs);
        free(tab);
        free(chart);
        dp_err_set(&err, DP_ENOMEM, "out of memory for %d searches", ns * nn);
        return cli_fail(&err);
    }
    /* The clusters and each size's batch first (profiles are read here, on one thread),
     * then the searches on `threads` threads, then the table in order. */
    bool odd_batch = false;
    for (int si = 0; si < ns; si++)
        for (int ni = 0; ni < nn; ni++) {
            struct dp_search_job *j = &jobs[si * nn + ni];
            if (dp_cluster_from_system(systems[si], nodes[ni], c.network, &j->cl, &err) ||
                cli_apply_calibration(&c, &j->cl, &err)) {
                free(jobs);
                free(tab);
                free(chart);
                return cli_fail(&err);
            }
            dp_err_clear(&err);
            j->so = so;
            if (!c.gbs) { /* each size's default: a multiple of its GPU count's odd factor */
                j->so.gbs = cli_default_gbs(so.seq_len, dp_cluster_gpus(&j->cl), NULL, 0);
                odd_batch |= j->so.gbs != header_gbs;
            }
        }
    /* Where it is when a person is watching. */
    const bool progress = isatty(STDERR_FILENO) && ns * nn > 8;
    dp_plan_search_batch(&m, jobs, ns * nn, threads, progress ? search_done : NULL, NULL);
    if (progress)
        fputs("\r\033[K", stderr);
    cJSON *rows = cJSON_CreateArray();
    int rc = 0, nt = 0;
    for (int si = 0; si < ns && !rc; si++) {
        for (int ni = 0; ni < nn; ni++) {
            struct dp_search_job *j = &jobs[si * nn + ni];
            const struct dp_cluster *cl = &j->cl;
            err = j->err;
            const int s = j->rc;
            double price = -1;
            for (int i = 0; i < np; i++)
                if (strcmp(prices[i].system, systems[si]) == 0)
                    price = prices[i].usd;
            int gpus = dp_cluster_gpus(cl);
            cJSON *e = cJSON_CreateObject();
            cJSON_AddStringToObject(e, "system", systems[si]);
            cJSON_AddNumberToObject(e, "nodes", nodes[ni]);
            cJSON_AddNumberToObject(e, "gpus", gpus);
            cJSON_AddNumberToObject(e, "gbs", (double)j->so.gbs);
            bool fits = s == 0 && j->n > 0;
            cJSON_AddBoolToObject(e, "fits", fits);
            struct cli_whatif_row *cr = &chart[nt];
            cr->fits = fits;
            cr->cost_usd = -1;
            struct row *t = &tab[nt++];
            snprintf(t->system, sizeof t->system, "%s", systems[si]);
            t->nodes = nodes[ni];
            t->gpus = gpus;
            snprintf(t->tps, sizeof t->tps, "-");
            snprintf(t->mfu, sizeof t->mfu, "-");
            snprintf(t->days, sizeof t->days, "-");
            snprintf(t->ckpt, sizeof t->ckpt, "-");
            snprintf(t->goodput, sizeof t->goodput, "-");
            snprintf(t->fdays, sizeof t->fdays, "-");
            snprintf(t->cost, sizeof t->cost, "-");
            if (fits) {
                const struct dp_candidate *w = &j->best;
                dp_layout_format_model(&w->layout, &m, t->layout, sizeof t->layout);
                double days = tokens / w->cost.tokens_per_s / 86400.0;
                struct cli_goodput gp;
                if (cli_goodput_eval(&go, &m, cl, &w->layout, w->cost.step_time_s, &gp, &err)) {
                    cJSON_Delete(e);
                    rc = cli_fail(&err);
                    break;
                }
                double fdays = cli_goodput_days(&gp, tokens, w->cost.tokens_per_s);
                /* GPUs are paid for by the wall-clock day, failures included. */
                double cost = price >= 0 && isfinite(fdays) ? fdays * 24.0 * gpus * price : -1;
                cr->tokens_per_s = w->cost.tokens_per_s;
                cr->days = isfinite(fdays) ? fdays : days;
                cr->cost_usd = cost;
                cJSON_AddItemToObject(e, "layout", dp_layout_to_json(&w->layout));
                cJSON_AddNumberToObject(e, "tokens_per_s", w->cost.tokens_per_s);
                cJSON_AddNumberToObject(e, "mfu", w->cost.mfu);
                cJSON_AddNumberToObject(e, "step_time_s", w->cost.step_time_s);
                cJSON_AddNumberToObject(e, "peak_bytes", (double)w->peak_bytes);
                cJSON_AddNumberToObject(e, "days", days);
                cJSON_AddItemToObject(e, "failures",
                                      cli_goodput_json(&gp, tokens, w->cost.tokens_per_s));
                if (isfinite(fdays))
                    cJSON_AddNumberToObject(e, "days_with_failures", fdays);
                if (cost >= 0)
                    cJSON_AddNumberToObject(e, "cost_usd", cost);
                snprintf(t->tps, sizeof t->tps, "%.0f", w->cost.tokens_per_s);
                snprintf(t->mfu, sizeof t->mfu, "%.1f%%", 100 * w->cost.mfu);
                snprintf(t->days, sizeof t->days, "%.1f", days);
                if (gp.plan.every_steps > 0)
                    cli_duration(gp.plan.interval_s, t->ckpt, sizeof t->ckpt);
                snprintf(t->goodput, sizeof t->goodput, "%.1f%%", 100 * gp.plan.goodput);
                if (isfinite(fdays))
                    snprintf(t->fdays, sizeof t->fdays, "%.1f", fdays);
                if (cost >= 0)
                    snprintf(t->cost, sizeof t->cost, "%.0f", cost);
            } else if (s != 0) {
                /* no layout at all: the planner's one-line reason */
                cJSON_AddStringToObject(e, "error", err.msg);
                snprintf(t->layout, sizeof t->layout, "no valid layout (see below)");
                snprintf(t->why, sizeof t->why, "%s", err.msg);
            } else {
                cJSON_AddNumberToObject(e, "lowest_peak_bytes", (double)j->lowest_peak);
                snprintf(t->layout, sizeof t->layout, "nothing fits (best peak %.1f GiB > %.1f)",
                         cli_gib(j->lowest_peak), cli_gib(dp_search_capacity(cl, &j->so)));
                if (j->alt_gbs) {
                    cJSON_AddNumberToObject(e, "fits_with_gbs", (double)j->alt_gbs);
                    snprintf(t->layout, sizeof t->layout,
                             "nothing fits at this batch (--gbs %lld fits)", (long long)j->alt_gbs);
                }
            }
            cJSON_AddItemToArray(rows, e);
        }
    }
    free(jobs);
    if (!rc && svg) {
        struct dp_buf b = {0};
        if (cli_svg_whatif(&m, tokens, &so, systems, ns, nodes, nn, chart, np > 0, &b, &err) ||
            cli_write_text(svg, &b, &err))
            rc = cli_fail(&err);
        dp_buf_release(&b);
    }
    free(chart);
    if (rc || (svg && strcmp(svg, "-") == 0)) { /* "-": the SVG is the output */
        free(tab);
        cJSON_Delete(rows);
        return rc;
    }
    if (odd_batch) {
        snprintf(d.gbs, sizeof d.gbs,
                 "~4M tokens; on GPU counts with an odd factor (a 72-GPU rack: 9) the nearest "
                 "multiple of it");
    }
    if (c.json) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "model", m.name);
        cJSON_AddNumberToObject(o, "tokens", tokens);
        cJSON_AddNumberToObject(o, "gbs", (double)so.gbs);
        cJSON_AddNumberToObject(o, "seq_len", (double)so.seq_len);
        cli_defaults_json(o, &d);
        cJSON_AddNumberToObject(o, "memory_margin", so.memory_margin);
        cJSON *dj = cJSON_GetObjectItem(o, "defaults");
        if (all_systems)
            cJSON_AddStringToObject(dj, "systems", "every system in profiles/system");
        if (default_nodes && !cJSON_GetObjectItem(dj, "nodes"))
            cJSON_AddStringToObject(dj, "nodes", "1, 2, 4, ... 128");
        cJSON_AddItemToObject(o, "failures", cli_goodput_assumptions_json(&go));
        cJSON_AddItemToObject(o, "results", rows);
        cli_print_json(o);
    } else {
        cJSON_Delete(rows);
        printf("model %s, %.3g tokens\n", m.name, tokens);
        if (all_systems)
            printf("systems  all %d system profiles (--systems not given; `dplan profiles` lists "
                   "them)\n",
                   ns);
        if (default_nodes)
            printf("nodes    1, 2, 4, ... 128 (--nodes not given)\n");
        cli_describe_batch(stdout, so.gbs, so.seq_len, &d);
        cli_describe_margin(stdout, &c, NULL);
        printf("\n");
        /* Columns as wide as their content. */
        int sw = (int)strlen("system"), lw = (int)strlen("best layout");
        for (int i = 0; i < nt; i++) {
            if ((int)strlen(tab[i].system) > sw)
                sw = (int)strlen(tab[i].system);
            if ((int)strlen(tab[i].layout) > lw)
                lw = (int)strlen(tab[i].layout);
        }
        printf("%-*s %5s %6s  %-*s %12s %6s %9s %10s %7s %9s %12s\n", sw, "system", "nodes", "GPUs",
               lw, "best layout", "tokens/s", "MFU", "days", "ckpt every", "goodput", "days+fail",
               "cost USD");
        for (int i = 0; i < nt; i++)
            printf("%-*s %5d %6d  %-*s %12s %6s %9s %10s %7s %9s %12s\n", sw, tab[i].system,
                   tab[i].nodes, tab[i].gpus, lw, tab[i].layout, tab[i].tps, tab[i].mfu,
                   tab[i].days, tab[i].ckpt, tab[i].goodput, tab[i].fdays, tab[i].cost);
        cli_goodput_assumptions_text(stdout, &go);
        for (int i = 0; i < nt; i++)
            if (tab[i].why[0])
                printf("%s x%d: %s\n", tab[i].system, tab[i].nodes, tab[i].why);
    }
    free(tab);
    return 0;
}
