/*
 * Failures priced in, for the planning commands (whatif, suggest): the
 * options that set the failure rate, storage bandwidth and restart time, and
 * the report of the checkpoint interval that maximises goodput
 * (costmodel/goodput.c does the arithmetic).
 */
#ifndef DPLAN_CLI_GOODPUT_REPORT_H
#define DPLAN_CLI_GOODPUT_REPORT_H

#include <stdio.h>

#include "costmodel/costmodel.h"

struct cJSON;

/* Option ids, above cli.h's shared ones and any short option. */
enum {
    OPT_FAILURE_RATE = 3000,
    OPT_MTBF_HOURS,
    OPT_CKPT_WRITE_GBPS,
    OPT_STORAGE_GBPS,
    OPT_RESTART_MIN,
};

// clang-format off
#define CLI_GOODPUT_OPTIONS                                                                        \
    {"failure-rate", required_argument, 0, OPT_FAILURE_RATE},                                      \
    {"mtbf-hours", required_argument, 0, OPT_MTBF_HOURS},                                          \
    {"ckpt-write-gbps", required_argument, 0, OPT_CKPT_WRITE_GBPS},                                \
    {"storage-gbps", required_argument, 0, OPT_STORAGE_GBPS},                                      \
    {"restart-min", required_argument, 0, OPT_RESTART_MIN}
// clang-format on

/* What the user gave; the defaults are costmodel.h's DP_FAILURES_PER_GPU_HOUR etc. */
struct cli_goodput_opts {
    double per_gpu_hour; /* failures per GPU-hour */
    double mtbf_h;       /* > 0: the job's MTBF instead, whatever its size */
    double node_gbps, storage_gbps, restart_s;
    bool rate_given, node_given, storage_given, restart_given;
};
void cli_goodput_opts_init(struct cli_goodput_opts *o);
/* 1 = one of CLI_GOODPUT_OPTIONS, handled; 0 = not one; -2 = usage error printed. */
int cli_goodput_opt(const char *cmd, int opt, const char *arg, struct cli_goodput_opts *o);
extern const char cli_goodput_help[];

/* The failure-priced view of one layout at one step time. */
struct cli_goodput {
    int gpus;
    struct dp_ckpt_size size;
    double write_s;
    struct dp_failure_model f;
    struct dp_goodput_plan plan;
    double mtbf_h; /* INFINITY without failures */
};
/* Megatron-style checkpoints (DP_CKPT_BALANCED): what GPU clusters run. */
int cli_goodput_eval(const struct cli_goodput_opts *o, const struct dp_model *m,
                     const struct dp_cluster *cl, const struct dp_layout *l, double step_time_s,
                     struct cli_goodput *out, struct dp_err *err);
/* Days to train `tokens` at tokens_per_s with failures; INFINITY when goodput is 0. */
double cli_goodput_days(const struct cli_goodput *g, double tokens, double tokens_per_s);
/* {"mtbf_hours", "checkpoint_bytes", ..., "goodput", "days"}: one layout's numbers. */
struct cJSON *cli_goodput_json(const struct cli_goodput *g, double tokens, double tokens_per_s);
/* The assumptions, with where each came from: {"failures_per_gpu_hour", ...}. */
struct cJSON *cli_goodput_assumptions_json(const struct cli_goodput_opts *o);
/* One line: "failures: ... (--failure-rate ...); restart ...; storage ...". */
void cli_goodput_assumptions_text(FILE *f, const struct cli_goodput_opts *o);
/* suggest's block for the winner. */
void cli_goodput_text(FILE *f, const struct cli_goodput *g, double tokens, double tokens_per_s,
                      const char *tokens_default);
/* "3.1 d", "2.61 h", "14.2 min", "38.0 s": a duration for tables ("-" if infinite). */
const char *cli_duration(double s, char *buf, size_t cap);

/* --tokens: "2e12", "300B", "15T" (K, M, B/G, T suffixes), in (0, 1e15]. 0 or -1. */
#define CLI_MAX_TOKENS 1e15
int cli_parse_tokens(const char *s, double *out);

#endif
