/*
 * dplan run: the checkpoint options (--ckpt-dir, --ckpt-every,
 * --ckpt-interval, --keep, --resume, --max-restarts), what the ranks say
 * when checkpoints are saved, fail or are skipped (JSON log records and
 * one-line messages), and how to go on after a failure. The executor does
 * the checkpointing (executor/ckpt_save.c, ckpt_load.c), the launcher the
 * restarts (launch/restart.c).
 */
#include "run.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

const char cli_ckpt_help[] =
    "Checkpoints and restarts (README \"Checkpoints and restarts\"):\n"
    "  --ckpt-dir DIR      write checkpoints to DIR/step_N (every rank its shard, a manifest)\n"
    "  --ckpt-every N      after every N-th step (and after the last step) [0: off]\n"
    "  --ckpt-interval M   also when M minutes passed since the last one [120; 0 = off]\n"
    "  --keep K            complete checkpoints kept, older ones deleted [3; 0 = all]\n"
    "  --resume [DIR]      continue from the newest complete checkpoint under DIR\n"
    "                      [--ckpt-dir], or from DIR when it is one step_N; any layout\n"
    "                      (dp, tp, pp, ZeRO) may resume it. New checkpoints go to DIR\n"
    "                      (not into a step_N: give --ckpt-dir)\n"
    "  --max-restarts N    supervise the job: when a rank dies or hangs, end the job and\n"
    "                      relaunch it from the last checkpoint, up to N times [0]\n\n";

void cli_ckpt_init(struct cli_ckpt *k)
{
    memset(k, 0, sizeof *k);
    k->interval_min = 120;
    k->keep = 3;
    k->fault.rank = k->fault.step = -1;
    dp_ckpt_opts_default(&k->opts);
}

static int count_arg(const char *opt, const char *arg, double lo, double hi, bool integer,
                     double *out)
{
    char *end;
    errno = 0;
    double v = strtod(arg, &end);
    if (end == arg || *end || errno || !(v >= lo && v <= hi) || (integer && v != floor(v)))
        return cli_usage_error("run", "--%s: expected %s in [%g, %g], got \"%s\"", opt,
                               integer ? "an integer" : "a number", lo, hi, arg);
    *out = v;
    return 0;
}

static bool is_dir(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

int cli_ckpt_opt(struct cli_ckpt *k, int opt, const char *arg, int argc, char **argv)
{
    double v = 0;
    switch (opt) {
    case OPT_CKPT_DIR: k->dir = arg; return 1;
    case OPT_CKPT_EVERY:
        if (count_arg("ckpt-every", arg, 0, 1e8, true, &v))
            return 2;
        k->every = (int)v;
        return 1;
    case OPT_CKPT_INTERVAL:
        if (count_arg("ckpt-interval", arg, 0, 1e7, false, &v))
            return 2;
        k->interval_min = v;
        k->interval_given = true;
        return 1;
    case OPT_CKPT_KEEP:
        if (count_arg("keep", arg, 0, 1e6, true, &v))
            return 2;
        k->keep = (int)v;
        k->keep_given = true;
        return 1;
    case OPT_RESUME:
        k->resume = true;
        if (arg) {
            k->resume_dir = arg;
        } else if (optind < argc && argv[optind][0] != '-' && is_dir(argv[optind])) {
            k->resume_dir = argv[optind++];
        }
        return 1;
    case OPT_MAX_RESTARTS:
        if (count_arg("max-restarts", arg, 0, 1000, true, &v))
            return 2;
        k->max_restarts = (int)v;
        return 1;
    default: return 0;
    }
}

/* The launch's fault (TEST-ONLY, launch.h): the checkpoint ones go to the executor. */
static void take_fault(struct cli_ckpt *k, bool warn)
{
    struct dp_err e = {0};
    if (dp_launch_fault_get(dp_launch_attempt(), &k->fault, &e)) {
        if (warn)
            fprintf(stderr, "dplan: warning: %s\n", e.msg);
        return;
    }
    if (k->fault.mode == DP_FAULT_CKPT_CRASH || k->fault.mode == DP_FAULT_ENOSPC) {
        k->opts.fault =
            k->fault.mode == DP_FAULT_ENOSPC ? DP_CKPT_FAULT_ENOSPC : DP_CKPT_FAULT_CRASH;
        k->opts.fault_rank = k->fault.rank;
        k->opts.fault_step = k->fault.step;
    }
}

int cli_ckpt_finish(struct cli_ckpt *k, bool warn)
{
    if (k->resume && !k->resume_dir)
        k->resume_dir = k->dir;
    if (k->resume && !k->resume_dir)
        return cli_usage_error("run",
                               "--resume needs a directory: --resume DIR, or --ckpt-dir DIR");
    /* New checkpoints go where the old ones are, unless DIR is one checkpoint: a run
     * resumed from it (maybe under another layout) must not overwrite its siblings. */
    char mf[4200];
    snprintf(mf, sizeof mf, "%s/manifest.json", k->resume ? k->resume_dir : "");
    if (!k->dir && k->resume && access(mf, F_OK) != 0)
        k->dir = k->resume_dir;
    const char *needs_dir = k->every            ? "ckpt-every"
                            : k->interval_given ? "ckpt-interval"
                            : k->keep_given     ? "keep"
                            : k->max_restarts   ? "max-restarts"
                                                : NULL;
    if (!k->dir && needs_dir)
        return cli_usage_error("run", "--%s needs --ckpt-dir DIR", needs_dir);
    k->opts.dir = k->dir;
    k->opts.every = k->every;
    k->opts.interval_s = 60.0 * k->interval_min;
    k->opts.keep = k->keep;
    k->opts.resume = k->resume ? k->resume_dir : NULL;
    k->opts.on_event = cli_ckpt_event;
    k->opts.ctx = k;
    take_fault(k, warn);
    return 0;
}

bool cli_ckpt_append_log(const struct cli_ckpt *k)
{
    return k->resume || dp_launch_attempt() > 0;
}

/* ------------------------------------------------------------------ records and messages */

void cli_ckpt_annotate(const struct cli_ckpt *k, cJSON *rec)
{
    if (k->saved_at[0])
        cJSON_AddStringToObject(rec, "checkpoint_saved_at", k->saved_at);
}

static cJSON *record(const struct cli_ckpt *k, const char *status, int step)
{
    cJSON *o = cli_log_record(k->log, status);
    cJSON_AddNumberToObject(o, "step", step);
    return o;
}

void cli_ckpt_event(const struct dp_ckpt_event *ev, void *ctx)
{
    struct cli_ckpt *k = ctx;
    switch (ev->kind) {
    case DP_CKPT_SAVED: {
        snprintf(k->saved_at, sizeof k->saved_at, "%s", ev->saved_at);
        k->saved_step = ev->step;
        if (!k->logs_here)
            break;
        cJSON *o = record(k, "checkpointing", ev->step);
        cJSON_AddStringToObject(o, "checkpoint", ev->path);
        cJSON_AddNumberToObject(o, "checkpoint_bytes", (double)ev->bytes);
        cJSON_AddNumberToObject(o, "checkpoint_write_s", ev->seconds);
        cli_ckpt_annotate(k, o);
        cli_log_write(k->log, o, true);
        break;
    }
    case DP_CKPT_SAVE_FAILED:
        if (ev->local) {
            fprintf(stderr, "dplan: error: rank %d: checkpoint of step %d: %s\n", ev->rank,
                    ev->step, ev->msg);
            break;
        }
        if (k->saved_step > 0)
            fprintf(stderr,
                    "dplan: error: checkpoint of step %d failed: %s; training continues, the "
                    "checkpoint of step %d is kept\n",
                    ev->step, ev->msg, k->saved_step);
        else
            fprintf(stderr, "dplan: error: checkpoint of step %d failed: %s; training continues\n",
                    ev->step, ev->msg);
        if (k->logs_here) {
            cJSON *o = record(k, "checkpointing", ev->step);
            cJSON_AddStringToObject(o, "checkpoint", ev->path);
            cJSON_AddStringToObject(o, "checkpoint_error", ev->msg);
            cli_ckpt_annotate(k, o);
            cli_log_write(k->log, o, true);
        }
        break;
    case DP_CKPT_SKIPPED:
        fprintf(stderr, "dplan: warning: skipping checkpoint %s: %s; trying an older one\n",
                ev->path, ev->msg);
        break;
    case DP_CKPT_RESUMED:
        snprintf(k->saved_at, sizeof k->saved_at, "%s", ev->saved_at ? ev->saved_at : "");
        k->saved_step = ev->step;
        fprintf(stderr, "dplan run: resuming from %s (step %d, saved at %s)\n", ev->path, ev->step,
                ev->saved_at ? ev->saved_at : "?");
        break;
    case DP_CKPT_NOTE: fprintf(stderr, "dplan: note: %s: %s\n", ev->path, ev->msg); break;
    }
    fflush(stderr);
}

void cli_ckpt_resume_hint(const char *dir, char *buf, size_t cap)
{
    struct dp_ckpt_info best;
    if (dp_ckpt_newest(dir, &best))
        snprintf(buf, cap,
                 "continue from its newest checkpoint (step %d) by running the same command "
                 "with --resume %s",
                 best.step, dir);
    else if (dir)
        snprintf(buf, cap,
                 "no checkpoint was saved in %s before the failure: run it again from the start "
                 "(--max-restarts N relaunches a failed job by itself)",
                 dir);
    else
        snprintf(buf, cap,
                 "no --ckpt-dir: run it again from the start; with --ckpt-dir DIR --ckpt-every N "
                 "a failed run can go on with --resume DIR");
}
