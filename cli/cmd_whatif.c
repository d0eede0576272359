/*
 * dplan whatif MODEL --systems a,b,c --nodes 1,2,4 [--tokens T]
 * [--price-per-gpu-hour sys=usd,...]: the buying question. For each system and
 * size, the best layout that fits, its throughput, days to train T tokens and
 * what that costs.
 */
#include "cli.h"
#include "planner/planner.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

static const char help_head[] =
    "usage: dplan whatif MODEL --systems A,B,... --nodes N1,N2,... [--tokens T]\n"
    "                   [--price-per-gpu-hour SYS=USD,...] [--gbs N] [--seq-len N] [--json]\n\n"
    "For each system (profiles/system) and node count: does any layout fit, the\n"
    "fastest one (`dplan suggest`'s search), its tokens/s, the days to train T\n"
    "tokens, and the cost when prices are given. Knobs fix dimensions as in suggest.\n\n"
    "  --systems LIST            system profiles to compare\n"
    "  --nodes LIST              node counts to try for each system\n"
    "  --tokens T                training tokens (e.g. 2e12, 300B, 15T) [1T]\n"
    "  --price-per-gpu-hour LIST prices in USD per GPU-hour, e.g. dgx-h100=2.5,dgx-a100-80gb=1.3\n"
    "  --json                    machine-readable output\n\n";

static int parse_tokens(const char *s, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (end == s || errno || v <= 0)
        return -1;
    switch (*end) {
    case 'K':
    case 'k':
        v *= 1e3;
        end++;
        break;
    case 'M':
    case 'm':
        v *= 1e6;
        end++;
        break;
    case 'B':
    case 'b':
    case 'G':
    case 'g':
        v *= 1e9;
        end++;
        break;
    case 'T':
    case 't':
        v *= 1e12;
        end++;
        break;
    default: break;
    }
    if (*end)
        return -1;
    *out = v;
    return 0;
}

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
        if (end == eq + 1 || *end || v < 0 || !tok[0])
            return -1;
        snprintf(p[n].system, sizeof p[n].system, "%s", tok);
        p[n].usd = v;
        n++;
    }
    return n;
}

int cmd_whatif(int argc, char **argv)
{
    static const struct option opts[] = {CLI_KNOB_OPTIONS,
                                         {"network", required_argument, 0, OPT_NETWORK},
                                         {"json", no_argument, 0, OPT_JSON},
                                         {"systems", required_argument, 0, 's'},
                                         {"nodes", required_argument, 0, 'n'},
                                         {"tokens", required_argument, 0, 't'},
                                         {"price-per-gpu-hour", required_argument, 0, 'p'},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    struct cli_common c;
    cli_common_init(&c);
    char systems_buf[1024] = "";
    int nodes[64], nn = 0;
    double tokens = 1e12;
    struct price prices[32];
    int np = 0;
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
            break;
        case 't':
            if (parse_tokens(optarg, &tokens))
                return cli_usage_error("whatif",
                                       "--tokens: expected a count like 2e12 or 300B, "
                                       "got \"%s\"",
                                       optarg);
            break;
        case 'p':
            np = parse_prices(optarg, prices, 32);
            if (np < 1)
                return cli_usage_error(
                    "whatif", "--price-per-gpu-hour: expected SYSTEM=USD,..., got \"%s\"", optarg);
            break;
        case 'h': printf("%s%s", help_head, cli_knob_help); return 0;
        default: return 2;
        }
    }
    if (optind != argc - 1)
        return cli_usage_error("whatif", "expected one MODEL argument");
    if (cli_split_option(&c))
        return cli_usage_error("whatif",
                               "%s fixes the pipeline split of one layout (give it to `dplan "
                               "estimate` or `dplan memory`); whatif searches the splits itself",
                               cli_split_option(&c));
    if (!systems_buf[0] || nn == 0)
        return cli_usage_error("whatif", "--systems and --nodes are required");
    struct dp_err err = {0};
    struct dp_model m;
    if (dp_model_load(argv[optind], &m, &err))
        return cli_fail(&err);
    char *systems[32];
    int ns = 0;
    for (char *tok = strtok(systems_buf, ","); tok && ns < 32; tok = strtok(NULL, ","))
        systems[ns++] = tok;
    for (int i = 0; i < np; i++) {
        bool known = false;
        for (int j = 0; j < ns; j++)
            known |= strcmp(prices[i].system, systems[j]) == 0;
        if (!known)
            return cli_usage_error("whatif", "--price-per-gpu-hour: \"%s\" is not in --systems",
                                   prices[i].system);
    }
    struct dp_search_opts so;
    cli_search_opts(&c, &m, &so);
    so.top_k = 1;
    struct dp_search_result *r = malloc(sizeof *r);
    if (!r) {
        dp_err_set(&err, DP_ENOMEM, "out of memory for the search results (%zu bytes)", sizeof *r);
        return cli_fail(&err);
    }
    cJSON *rows = cJSON_CreateArray();
    if (!c.json) {
        printf("model %s, %.3g tokens, batch %lld x %lld tokens\n\n", m.name, tokens,
               (long long)so.gbs, (long long)so.seq_len);
        printf("%-16s %5s %6s  %-46s %12s %6s %9s %12s\n", "system", "nodes", "GPUs", "best layout",
               "tokens/s", "MFU", "days", "cost USD");
    }
    int rc = 0;
    for (int si = 0; si < ns && !rc; si++) {
        for (int ni = 0; ni < nn; ni++) {
            struct dp_cluster cl;
            if (dp_cluster_from_system(systems[si], nodes[ni], c.network, &cl, &err)) {
                rc = cli_fail(&err);
                break;
            }
            dp_err_clear(&err);
            int s = dp_plan_search(&m, &cl, &so, r, &err);
            double price = -1;
            for (int i = 0; i < np; i++)
                if (strcmp(prices[i].system, systems[si]) == 0)
                    price = prices[i].usd;
            int gpus = dp_cluster_gpus(&cl);
            cJSON *e = cJSON_CreateObject();
            cJSON_AddStringToObject(e, "system", systems[si]);
            cJSON_AddNumberToObject(e, "nodes", nodes[ni]);
            cJSON_AddNumberToObject(e, "gpus", gpus);
            bool fits = s == 0 && r->n > 0;
            cJSON_AddBoolToObject(e, "fits", fits);
            char lay[160] = "nothing fits";
            if (s != 0)
                snprintf(lay, sizeof lay, "no valid layout");
            if (fits) {
                const struct dp_candidate *w = &r->top[0];
                dp_layout_format(&w->layout, lay, sizeof lay);
                double days = tokens / w->cost.tokens_per_s / 86400.0;
                double cost = price >= 0 ? days * 24.0 * gpus * price : -1;
                cJSON_AddItemToObject(e, "layout", dp_layout_to_json(&w->layout));
                cJSON_AddNumberToObject(e, "tokens_per_s", w->cost.tokens_per_s);
                cJSON_AddNumberToObject(e, "mfu", w->cost.mfu);
                cJSON_AddNumberToObject(e, "step_time_s", w->cost.step_time_s);
                cJSON_AddNumberToObject(e, "peak_bytes", (double)w->peak_bytes);
                cJSON_AddNumberToObject(e, "days", days);
                if (cost >= 0)
                    cJSON_AddNumberToObject(e, "cost_usd", cost);
                if (!c.json) {
                    char costs[32] = "-";
                    if (cost >= 0)
                        snprintf(costs, sizeof costs, "%.0f", cost);
                    printf("%-16s %5d %6d  %-46s %12.0f %5.1f%% %9.1f %12s\n", systems[si],
                           nodes[ni], gpus, lay, w->cost.tokens_per_s, 100 * w->cost.mfu, days,
                           costs);
                }
            } else {
                if (s == 0 && r->lowest_peak >= 0)
                    cJSON_AddNumberToObject(e, "lowest_peak_bytes", (double)r->lowest_peak);
                if (!c.json) {
                    if (s == 0 && r->lowest_peak >= 0)
                        snprintf(lay, sizeof lay, "nothing fits (best peak %.1f GiB > %.1f)",
                                 cli_gib(r->lowest_peak), cli_gib(dp_gpu_usable_bytes(&cl.gpu)));
                    printf("%-16s %5d %6d  %-46s %12s %6s %9s %12s\n", systems[si], nodes[ni], gpus,
                           lay, "-", "-", "-", "-");
                }
            }
            cJSON_AddItemToArray(rows, e);
        }
    }
    free(r);
    if (rc) {
        cJSON_Delete(rows);
        return rc;
    }
    if (c.json) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "model", m.name);
        cJSON_AddNumberToObject(o, "tokens", tokens);
        cJSON_AddNumberToObject(o, "gbs", (double)so.gbs);
        cJSON_AddNumberToObject(o, "seq_len", (double)so.seq_len);
        cJSON_AddItemToObject(o, "results", rows);
        cli_print_json(o);
    } else {
        cJSON_Delete(rows);
    }
    return 0;
}
