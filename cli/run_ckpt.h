/*
 * `dplan run`'s checkpoint, resume, restart and fault-injection options
 * (run_ckpt.c), the heartbeat files its ranks write for the supervisor, and
 * the supervisor that relaunches a failed job from its last checkpoint
 * (run_supervise.c). README.md, "Checkpoints and restarts".
 */
#ifndef DPLAN_CLI_RUN_CKPT_H
#define DPLAN_CLI_RUN_CKPT_H

#include <getopt.h>
#include <stdbool.h>
#include <stdio.h>

#include "executor/executor.h"

struct cJSON;

/* Option ids, clear of cmd_run.c's (which count up from OPT_COMMON_END). */
enum {
    OPT_CKPT_DIR = 3000,
    OPT_CKPT_EVERY,
    OPT_CKPT_INTERVAL,
    OPT_CKPT_KEEP,
    OPT_RESUME,
    OPT_MAX_RESTARTS,
    OPT_HANG_TIMEOUT,
};

// clang-format off
#define CLI_CKPT_OPTIONS                                                                           \
    {"ckpt-dir", required_argument, 0, OPT_CKPT_DIR},                                              \
    {"ckpt-every", required_argument, 0, OPT_CKPT_EVERY},                                          \
    {"ckpt-interval", required_argument, 0, OPT_CKPT_INTERVAL},                                    \
    {"keep", required_argument, 0, OPT_CKPT_KEEP},                                                 \
    {"resume", optional_argument, 0, OPT_RESUME},                                                  \
    {"max-restarts", required_argument, 0, OPT_MAX_RESTARTS},                                      \
    {"hang-timeout", required_argument, 0, OPT_HANG_TIMEOUT}
// clang-format on

extern const char cli_ckpt_help[];

/* Exit status of ranks whose error every rank saw and rank 0 reported, and of a rank
 * whose watchdog saw no progress for --timeout (cmd_run.c); the launcher and the
 * supervisor read them. */
#define CLI_EXIT_REPORTED 64
#define CLI_EXIT_STALLED  124

struct cli_ckpt {
    /* options */
    const char *dir;        /* --ckpt-dir */
    int every;              /* --ckpt-every */
    double interval_min;    /* --ckpt-interval [120] */
    int keep;               /* --keep [3] */
    bool resume;            /* --resume [DIR] */
    const char *resume_dir; /* its DIR, NULL = the --ckpt-dir */
    int max_restarts;       /* --max-restarts [0] */
    double hang_timeout_s;  /* --hang-timeout [the --timeout, 300] */
    bool hang_given, interval_given, keep_given;
    /* this process */
    struct dp_ckpt_opts opts; /* what the executor gets */
    int rank, world;
    FILE *logf;        /* the JSON log (rank 0, or every rank with --log-all-ranks) */
    bool logs_here;    /* this rank prints JSON records */
    char saved_at[32]; /* checkpoint_saved_at of the last good checkpoint ("" = none) */
    int saved_step;
    /* DPLAN_FAULT_INJECT (TEST-ONLY) */
    int fault_rank, fault_step;
    char fault_mode[16];
};

void cli_ckpt_init(struct cli_ckpt *k);
/*
 * One option of the set above: 1 handled, 0 not one of them, 2 usage error
 * (printed). "--resume DIR" takes the next argument when it is a directory
 * (optind is advanced past it); "--resume=DIR" always.
 */
int cli_ckpt_opt(struct cli_ckpt *k, int opt, const char *arg, int argc, char **argv);
/* After parsing (before any rank starts): the combinations, the executor's options,
 * DPLAN_FAULT_INJECT. Returns 0 or 2 (usage error printed). */
int cli_ckpt_finish(struct cli_ckpt *k);
/* Supervise this launch: --max-restarts > 0 and not already under a supervisor. */
bool cli_ckpt_supervise(const struct cli_ckpt *k);
/* Whether the log is continued (resume, or a relaunch) rather than started afresh. */
bool cli_ckpt_append_log(const struct cli_ckpt *k);

/* dp_ckpt_opts.on_event: JSON records (status "checkpointing") and one-line messages. */
void cli_ckpt_event(const struct dp_ckpt_event *ev, void *ctx);
/* Add "checkpoint_saved_at" to a log record once a checkpoint exists. */
void cli_ckpt_annotate(const struct cli_ckpt *k, struct cJSON *rec);
/* Print a JSON record (and delete it) to stdout and `logf` (may be NULL). */
void cli_ckpt_record(FILE *logf, struct cJSON *rec);
/* The last record of a run that completed: status "finished". */
void cli_ckpt_finished(const struct cli_ckpt *k, int step, double final_loss);
/* At the start of each step: the heartbeat's step, then DPLAN_FAULT_INJECT's exit, kill
 * or hang when it names this rank, step and attempt. */
void cli_ckpt_before_step(struct cli_ckpt *k, int step, int rank);

/* ------------------------------------------------------------------ run_supervise.c */

/* Ranks under a supervisor (DPLAN_HEARTBEAT_DIR set) publish their progress in
 * DIR/rank_%05d every few hundred ms from a thread; no-ops otherwise. */
void cli_heartbeat_start(int rank);
void cli_heartbeat_step(int step); /* written at once (the step a rank dies in is exact) */
void cli_heartbeat_stop(void);

/*
 * Run the job (mpirun for world > 1, else this program) and watch it; when a
 * rank dies or the heartbeats stop for --hang-timeout, end it, log a "failed"
 * record and relaunch it with --resume from the newest checkpoint, up to
 * --max-restarts times with a back-off of 1, 2, 4, ... (at most 30) seconds.
 * `out_dir` holds the heartbeat directory; records go to `log_path` and stdout.
 * Returns the exit code: 0 finished, 1 failed (restarts exhausted or an error every
 * rank reported), 130 interrupted.
 */
int cli_run_supervise(struct cli_ckpt *k, int world, const char *out_dir, const char *log_path,
                      int argc, char **argv);

#endif
