/*
 * Failures priced in for whatif and suggest: parse the failure, storage and
 * restart options, evaluate a layout's checkpoint size, write time, best
 * interval and goodput (costmodel/goodput.c), and print them.
 */
#include "goodput_report.h"
#include "cli.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

const char cli_goodput_help[] =
    "Failures (the checkpoint interval that maximises goodput, Young 1974 / Daly 2006,\n"
    "and the days to train with failures):\n"
    "  --failure-rate R     job failures per GPU-hour [1.97e-5: Llama 3 405B, 419 unexpected\n"
    "                       interruptions in 54 days on 16,384 H100 (Dubey et al. 2024,\n"
    "                       Sec. 3.3.4); OPT-175B (7.4e-5), BLOOM (2.3e-5) and Meta's RSC-1\n"
    "                       (3.4e-5) were worse]; 0 = no failures\n"
    "  --mtbf-hours H       instead: the job's mean time between failures, at any size\n"
    "  --ckpt-write-gbps X  checkpoint write bandwidth per node, GB/s [0.98: Llama 3's\n"
    "                       storage, 2 TB/s sustained, shared by 2,048 nodes (Sec. 3.3.1)]\n"
    "  --storage-gbps X     the storage's total write bandwidth, GB/s [2000: the same]\n"
    "  --restart-min M      minutes from a failure to training again [10: 5-20 on Meta's\n"
    "                       RSC clusters (Kokolis et al. 2024); Daly's examples use 10]\n"
    "A checkpoint holds the weights and optimizer states (bf16 + Adam: 14 bytes per\n"
    "parameter), each tensor once, spread over the ranks (Megatron's distributed\n"
    "checkpoint with fully parallel save); training waits while it is written.\n";

void cli_goodput_opts_init(struct cli_goodput_opts *o)
{
    memset(o, 0, sizeof *o);
    o->per_gpu_hour = DP_FAILURES_PER_GPU_HOUR;
    o->node_gbps = DP_NODE_WRITE_GBPS;
    o->storage_gbps = DP_STORAGE_WRITE_GBPS;
    o->restart_s = DP_RESTART_S;
}

static int number(const char *s, double lo, double hi, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (end == s || *end || errno || !(v >= lo && v <= hi))
        return -1;
    *out = v;
    return 0;
}

int cli_goodput_opt(const char *cmd, int opt, const char *arg, struct cli_goodput_opts *o)
{
    double v;
    switch (opt) {
    case OPT_FAILURE_RATE:
        if (number(arg, 0, 1, &v))
            goto bad;
        if (o->mtbf_h > 0) {
            cli_usage_error(cmd, "--failure-rate and --mtbf-hours are alternatives: give one");
            return -2;
        }
        o->per_gpu_hour = v;
        o->rate_given = true;
        return 1;
    case OPT_MTBF_HOURS:
        if (number(arg, 1e-3, 1e7, &v))
            goto bad;
        if (o->rate_given) {
            cli_usage_error(cmd, "--failure-rate and --mtbf-hours are alternatives: give one");
            return -2;
        }
        o->mtbf_h = v;
        return 1;
    case OPT_CKPT_WRITE_GBPS:
        if (number(arg, 1e-6, 1e6, &v) || v <= 0)
            goto bad;
        o->node_gbps = v;
        o->node_given = true;
        return 1;
    case OPT_STORAGE_GBPS:
        if (number(arg, 1e-6, 1e9, &v) || v <= 0)
            goto bad;
        o->storage_gbps = v;
        o->storage_given = true;
        return 1;
    case OPT_RESTART_MIN:
        if (number(arg, 0, 1e5, &v))
            goto bad;
        o->restart_s = 60.0 * v;
        o->restart_given = true;
        return 1;
    default: return 0;
    }
bad:;
    static const char *const what[] = {"a rate in [0, 1] per GPU-hour", "hours in [0.001, 1e7]",
                                       "GB/s in (0, 1e6]", "GB/s in (0, 1e9]",
                                       "minutes in [0, 1e5]"};
    static const char *const name[] = {"--failure-rate", "--mtbf-hours", "--ckpt-write-gbps",
                                       "--storage-gbps", "--restart-min"};
    int i = opt - OPT_FAILURE_RATE;
    cli_usage_error(cmd, "%s: expected %s, got \"%s\"", name[i], what[i], arg);
    return -2;
}

int cli_goodput_eval(const struct cli_goodput_opts *o, const struct dp_model *m,
                     const struct dp_cluster *cl, const struct dp_layout *l, double step_time_s,
                     struct cli_goodput *out, struct dp_err *err)
{
    memset(out, 0, sizeof *out);
    out->gpus = l->tp * l->pp * l->dp * l->cp;
    int rc = dp_ckpt_size(m, l, cl->gpus_per_node, DP_CKPT_BALANCED, &out->size, err);
    if (rc)
        return rc;
    out->write_s = dp_ckpt_write_s(&out->size, o->node_gbps, o->storage_gbps);
    out->f.rate_per_s = o->mtbf_h > 0 ? 1.0 / (3600.0 * o->mtbf_h)
                                      : dp_failure_rate_per_s(o->per_gpu_hour, out->gpus);
    out->f.ckpt_write_s = out->write_s;
    out->f.restart_s = o->restart_s;
    out->mtbf_h = out->f.rate_per_s > 0 ? 1.0 / out->f.rate_per_s / 3600.0 : INFINITY;
    return dp_goodput_plan(&out->f, step_time_s, &out->plan, err);
}

double cli_goodput_days(const struct cli_goodput *g, double tokens, double tokens_per_s)
{
    if (!(g->plan.goodput > 0))
        return INFINITY;
    return tokens / tokens_per_s / g->plan.goodput / 86400.0;
}

cJSON *cli_goodput_json(const struct cli_goodput *g, double tokens, double tokens_per_s)
{
    cJSON *o = cJSON_CreateObject();
    if (isfinite(g->mtbf_h))
        cJSON_AddNumberToObject(o, "mtbf_hours", g->mtbf_h);
    cJSON_AddNumberToObject(o, "failures_per_day", g->plan.failures_per_day);
    cJSON_AddNumberToObject(o, "checkpoint_bytes", (double)g->size.total_bytes);
    cJSON_AddNumberToObject(o, "checkpoint_rank_bytes", (double)g->size.rank_bytes);
    cJSON_AddNumberToObject(o, "checkpoint_bytes_per_param", g->size.bytes_per_param);
    cJSON_AddNumberToObject(o, "checkpoint_write_s", g->write_s);
    cJSON_AddNumberToObject(o, "restart_s", g->f.restart_s);
    if (isfinite(g->plan.daly_s)) {
        cJSON_AddNumberToObject(o, "daly_interval_s", g->plan.daly_s);
        cJSON_AddNumberToObject(o, "young_interval_s", g->plan.young_s);
        cJSON_AddNumberToObject(o, "ckpt_every_steps", (double)g->plan.every_steps);
        cJSON_AddNumberToObject(o, "ckpt_interval_s", g->plan.interval_s);
    }
    cJSON_AddNumberToObject(o, "goodput", g->plan.goodput);
    double days = cli_goodput_days(g, tokens, tokens_per_s);
    if (isfinite(days))
        cJSON_AddNumberToObject(o, "days", days);
    return o;
}

cJSON *cli_goodput_assumptions_json(const struct cli_goodput_opts *o)
{
    cJSON *e = cJSON_CreateObject();
    if (o->mtbf_h > 0) {
        cJSON_AddNumberToObject(e, "mtbf_hours", o->mtbf_h);
        cJSON_AddStringToObject(e, "mtbf_hours_source", "--mtbf-hours");
    } else {
        cJSON_AddNumberToObject(e, "failures_per_gpu_hour", o->per_gpu_hour);
        cJSON_AddStringToObject(e, "failures_per_gpu_hour_source",
                                o->rate_given ? "--failure-rate"
                                              : "Llama 3 405B: 419 unexpected interruptions in 54 "
                                                "days on 16,384 H100 (Dubey et al. 2024, Sec. "
                                                "3.3.4)");
    }
    cJSON_AddNumberToObject(e, "ckpt_write_gbps_per_node", o->node_gbps);
    cJSON_AddStringToObject(e, "ckpt_write_gbps_per_node_source",
                            o->node_given ? "--ckpt-write-gbps"
                                          : "Llama 3's storage: 2 TB/s sustained for 2,048 nodes "
                                            "(Dubey et al. 2024, Sec. 3.3.1)");
    cJSON_AddNumberToObject(e, "storage_write_gbps", o->storage_gbps);
    cJSON_AddStringToObject(e, "storage_write_gbps_source",
                            o->storage_given ? "--storage-gbps"
                                             : "Llama 3's storage: 2 TB/s sustained (Dubey et al. "
                                               "2024, Sec. 3.3.1)");
    cJSON_AddNumberToObject(e, "restart_s", o->restart_s);
    cJSON_AddStringToObject(e, "restart_s_source",
                            o->restart_given ? "--restart-min"
                                             : "5-20 min on Meta's RSC clusters (Kokolis et al. "
                                               "2024); Daly 2006's examples use 10 min");
    cJSON_AddStringToObject(e, "interval", "Daly 2006 (higher-order), whole steps");
    cJSON_AddStringToObject(e, "checkpoint",
                            "weights + optimizer states, each tensor once, spread over the ranks "
                            "(Megatron distributed checkpoint, fully parallel save)");
    return e;
}

const char *cli_duration(double s, char *buf, size_t cap)
{
    if (!isfinite(s))
        snprintf(buf, cap, "-");
    else if (s >= 2 * 86400.0)
        snprintf(buf, cap, "%.1f d", s / 86400.0);
    else if (s >= 2 * 3600.0)
        snprintf(buf, cap, "%.2f h", s / 3600.0);
    else if (s >= 120.0)
        snprintf(buf, cap, "%.1f min", s / 60.0);
    else
        snprintf(buf, cap, "%.1f s", s);
    return buf;
}

void cli_goodput_assumptions_text(FILE *f, const struct cli_goodput_opts *o)
{
    if (o->mtbf_h > 0)
        fprintf(f, "failures: one every %.3g h (--mtbf-hours)", o->mtbf_h);
    else
        fprintf(f, "failures: %.3g per GPU-hour (%s)", o->per_gpu_hour,
                o->rate_given ? "--failure-rate" : "Llama 3 405B's rate; --failure-rate");
    fprintf(f,
            "; restart %.3g min; checkpoints of weights + optimizer states written at %.3g GB/s "
            "per node, %.4g GB/s in all; interval: Daly 2006 (see --help)\n",
            o->restart_s / 60.0, o->node_gbps, o->storage_gbps);
}

void cli_goodput_text(FILE *f, const struct cli_goodput *g, double tokens, double tokens_per_s,
                      const char *tokens_default)
{
    char a[32], b[32], c[32];
    if (isfinite(g->mtbf_h))
        fprintf(f, "failures a failure every %s (%d GPUs, %.3g a day); restart %s\n",
                cli_duration(g->mtbf_h * 3600.0, a, sizeof a), g->gpus, g->plan.failures_per_day,
                cli_duration(g->f.restart_s, b, sizeof b));
    else
        fprintf(f, "failures none (--failure-rate 0)\n");
    char tot[32], rank[32];
    dp_fmt_bytes(g->size.total_bytes, tot, sizeof tot);
    dp_fmt_bytes(g->size.rank_bytes, rank, sizeof rank);
    fprintf(f,
            "         checkpoint %s (weights + optimizer states, %d B per parameter), %s per GPU: "
            "%s to write\n",
            tot, g->size.bytes_per_param, rank, cli_duration(g->write_s, a, sizeof a));
    double days = cli_goodput_days(g, tokens, tokens_per_s);
    double clean = tokens / tokens_per_s / 86400.0;
    if (g->plan.every_steps > 0)
        fprintf(f, "         checkpoint every %lld steps = %s (Daly %s, Young %s): goodput %.1f%%",
                (long long)g->plan.every_steps, cli_duration(g->plan.interval_s, a, sizeof a),
                cli_duration(g->plan.daly_s, b, sizeof b),
                cli_duration(g->plan.young_s, c, sizeof c), 100 * g->plan.goodput);
    else
        fprintf(f, "         no checkpoint needed: goodput %.1f%%", 100 * g->plan.goodput);
    if (isfinite(days))
        fprintf(f, "; %.3g tokens in %.1f days (%.1f without failures)", tokens, days, clean);
    else
        fprintf(f, "; training makes no progress");
    if (tokens_default && tokens_default[0])
        fprintf(f, " (--tokens not given: %s)", tokens_default);
    fputc('\n', f);
}

int cli_parse_tokens(const char *s, double *out)
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
    if (*end || !(v <= CLI_MAX_TOKENS))
        return -1;
    *out = v;
    return 0;
}
