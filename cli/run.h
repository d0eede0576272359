/*
 * `dplan run` inside the CLI: its options and state (cmd_run.c), the log
 * records (run_log.c), the checkpoint options and messages (run_ckpt.c), a
 * rank's side (run_rank.c: callbacks, end of run, summary) and the job's
 * (run_job.c: what the runner reports, printed). The executor trains, the
 * launcher starts and watches ranks; these files parse, print and exit.
 */
#ifndef DPLAN_CLI_RUN_H
#define DPLAN_CLI_RUN_H

#include <getopt.h>
#include <stdbool.h>
#include <stdio.h>

#include "cli.h"
#include "executor/executor.h"
#include "launch/launch.h"

struct cJSON;

/* ------------------------------------------------------------------ log records */

/*
 * Where records go and who writes them. A rank holds its log open (f); the process that
 * ran the job appends to `path` once the ranks are gone, ending a line a killed rank
 * left unfinished first.
 */
struct cli_log {
    FILE *f;
    const char *path;
    const char *source; /* "launcher" for the job's records, NULL for a rank's */
    int rank;           /* the writing rank (-1: not a rank) */
    int world;
    int attempt; /* the launch this record belongs to (DPLAN_RESTART_COUNT) */
};
/*
 * The one constructor of every record of the JSON log (step, checkpointing, failed,
 * restarting, finished): {"source" (the launcher's), "rank" (a rank's), "world_size",
 * "backend", "attempt", "status"}; the caller adds the status's fields.
 */
struct cJSON *cli_log_record(const struct cli_log *lg, const char *status);
/* Write `rec` as one line to the log (and to stdout with `print`), then delete it. */
void cli_log_write(const struct cli_log *lg, struct cJSON *rec, bool print);
/* The status of the log's last record ("" when none), for not saying a failure twice. */
void cli_log_last_status(const char *path, char *status, size_t cap);

/* ------------------------------------------------------------------ checkpoints */

/* Option ids, clear of cmd_run.c's (which count up from OPT_COMMON_END). */
enum {
    OPT_CKPT_DIR = 3000,
    OPT_CKPT_EVERY,
    OPT_CKPT_INTERVAL,
    OPT_CKPT_KEEP,
    OPT_RESUME,
    OPT_MAX_RESTARTS,
};

// clang-format off
#define CLI_CKPT_OPTIONS                                                                           \
    {"ckpt-dir", required_argument, 0, OPT_CKPT_DIR},                                              \
    {"ckpt-every", required_argument, 0, OPT_CKPT_EVERY},                                          \
    {"ckpt-interval", required_argument, 0, OPT_CKPT_INTERVAL},                                    \
    {"keep", required_argument, 0, OPT_CKPT_KEEP},                                                 \
    {"resume", optional_argument, 0, OPT_RESUME},                                                  \
    {"max-restarts", required_argument, 0, OPT_MAX_RESTARTS}
// clang-format on

extern const char cli_ckpt_help[];

struct cli_ckpt {
    /* options */
    const char *dir;        /* --ckpt-dir */
    int every;              /* --ckpt-every */
    double interval_min;    /* --ckpt-interval [120] */
    int keep;               /* --keep [3] */
    bool resume;            /* --resume [DIR] */
    const char *resume_dir; /* its DIR, NULL = the --ckpt-dir */
    int max_restarts;       /* --max-restarts [0] */
    bool interval_given, keep_given;
    /* this process */
    struct dp_ckpt_opts opts; /* what the executor gets */
    struct cli_log *log;      /* a rank's log (run_rank.c) */
    bool logs_here;           /* this rank prints JSON records */
    char saved_at[32];        /* checkpoint_saved_at of the last good checkpoint ("" = none) */
    int saved_step;
    struct dp_fault fault; /* DPLAN_FAULT_INJECT (TEST-ONLY; none in builds without it) */
};

void cli_ckpt_init(struct cli_ckpt *k);
/*
 * One option of the set above: 1 handled, 0 not one of them, 2 usage error (printed).
 * "--resume DIR" takes the next argument when it is a directory (optind is advanced past
 * it); "--resume=DIR" always.
 */
int cli_ckpt_opt(struct cli_ckpt *k, int opt, const char *arg, int argc, char **argv);
/* After parsing (before any rank starts): the combinations, the executor's options, the
 * launch's fault. Returns 0 or 2 (usage error printed). */
int cli_ckpt_finish(struct cli_ckpt *k, bool warn);
/* Whether the log is continued (resume, or a relaunch) rather than started afresh. */
bool cli_ckpt_append_log(const struct cli_ckpt *k);
/* dp_ckpt_opts.on_event: JSON records (status "checkpointing") and one-line messages. */
void cli_ckpt_event(const struct dp_ckpt_event *ev, void *ctx);
/* Add "checkpoint_saved_at" to a log record once a checkpoint exists. */
void cli_ckpt_annotate(const struct cli_ckpt *k, struct cJSON *rec);
/* How to go on after a failure: from the newest checkpoint of `dir`, or from the start. */
void cli_ckpt_resume_hint(const char *dir, char *buf, size_t cap);

/* ------------------------------------------------------------------ the run */

struct cli_run {
    struct cli_common c;
    const char *target, *data, *out, *log, *hostfile;
    int np, threads, fmt, ranks_per_node;
    double hang_timeout_s;
    bool log_all, dry_run;
    struct dp_exec_opts o;
    struct cli_ckpt ck; /* checkpoints, resume, restarts (run_ckpt.c) */
    /* state */
    char out_dir[4096]; /* --out, or the default (cmd_run.c) */
    char log_path[4200];
    struct dp_model m;
    struct dp_layout l;
    struct dp_plan *plan; /* NULL when run from a model */
    struct dp_rank_env env;
    int world;
    struct cli_log lg;
    bool tty, logs_here;
    double t_start;
    double cpu_pred_s; /* the step-time model's prediction for this machine (0 = none) */
    double epochs;     /* how often the steps read the data */
};

/* Train as this process's rank (run_rank.c): the exit code. */
int cli_run_rank(struct cli_run *r, struct dp_err *err);
/* Start the ranks and watch them (run_job.c): the exit code. */
int cli_run_job(struct cli_run *r, int argc, char **argv);

/* ------------------------------------------------------------------ checks */

/*
 * Refuse (DP_EINVAL, err set) when an output is an input (OUT/model.safetensors,
 * OUT/summary.json, OUT/plan.json and the logs against the plan or model file and
 * --data, by device and inode), or when --out or --ckpt-dir is or lies inside a
 * checkpoint directory (dp_output_check).
 */
int cli_run_check_outputs(const struct cli_run *r, struct dp_err *err);

#endif
