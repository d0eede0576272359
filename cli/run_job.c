/*
 * dplan run started by hand with several ranks or with --max-restarts
 * (run.h): the launcher (launch/) starts the ranks and watches them; here
 * is what the user sees of it: one closing line when the job fails (which
 * rank, how, and how to go on), the launcher's records at the end of the
 * JSON log, and the messages of each restart.
 */
#include "run.h"

#include <cjson/cJSON.h>
#include <string.h>

struct job_ctx {
    struct cli_run *r;
    struct cli_log lg;
};

/* "rank 3 at step 5", "rank 3 before its first step", or, when the launcher failed before
 * any rank said who it was, "the launch (no rank started)". */
static void where_text(const struct dp_launch_failure *f, char *out, size_t cap)
{
    if (f->rank < 0 && f->step < 0)
        snprintf(out, cap, "the launch (no rank started)");
    else if (f->rank < 0)
        snprintf(out, cap, "an unknown rank at step %d", f->step);
    else if (f->step < 0)
        snprintf(out, cap, "rank %d before its first step", f->rank);
    else
        snprintf(out, cap, "rank %d at step %d", f->rank, f->step);
}

/* The closing line of a job without restarts, and the message of its record. */
static void failure_text(const struct dp_launch_failure *f, char *msg, size_t cap)
{
    switch (f->reason) {
    case DP_FAIL_HANG:
        snprintf(msg, cap,
                 "the job stalled: no progress for the --timeout; rank %d is furthest "
                 "behind (step %d; see the messages above)",
                 f->rank, f->step);
        break;
    case DP_FAIL_SIGNAL:
        snprintf(msg, cap, "rank %d was killed by signal %d; mpirun stopped the other ranks",
                 f->rank, f->sig);
        break;
    case DP_FAIL_EXIT:
        snprintf(msg, cap, "rank %d failed with exit status %d; mpirun stopped the other ranks",
                 f->rank, f->code >= 0 ? f->code : f->status);
        break;
    default: snprintf(msg, cap, "the ranks failed (launcher exit status %d)", f->status); break;
    }
}

static const char *reason_name(enum dp_launch_reason r)
{
    switch (r) {
    case DP_FAIL_SIGNAL: return "signal";
    case DP_FAIL_HANG: return "hang";
    case DP_FAIL_REPORTED: return "reported";
    case DP_FAIL_LAUNCH: return "launch";
    default: return "exit";
    }
}

static void on_failed(struct job_ctx *j, const struct dp_launch_event *ev)
{
    const struct dp_launch_failure *f = ev->f;
    const bool supervised = ev->max_restarts > 0;
    char msg[512], hint[512];
    /* Without restarts an error the ranks reported themselves is said already (and
     * logged by rank 0). */
    if (!supervised && !f->restartable)
        return;
    failure_text(f, msg, sizeof msg);
    cli_ckpt_resume_hint(j->r->ck.dir, hint, sizeof hint);
    char last[32];
    cli_log_last_status(j->lg.path, last, sizeof last);
    j->lg.attempt = ev->attempt;
    if (supervised || strcmp(last, "failed")) {
        cJSON *o = cli_log_record(&j->lg, "failed");
        if (f->rank >= 0)
            cJSON_AddNumberToObject(o, "rank", f->rank);
        if (f->step >= 0)
            cJSON_AddNumberToObject(o, "step", f->step);
        cJSON_AddStringToObject(o, "reason", reason_name(f->reason));
        cJSON_AddStringToObject(o, "error", supervised ? f->what : msg);
        if (f->ranks[0])
            cJSON_AddStringToObject(o, "ranks", f->ranks); /* rank:step+beats(last activity) */
        cJSON_AddNumberToObject(o, "max_restarts", ev->max_restarts);
        cJSON_AddBoolToObject(o, "will_restart", ev->will_restart);
        if (ev->saved_at[0])
            cJSON_AddStringToObject(o, "checkpoint_saved_at", ev->saved_at);
        if (!ev->will_restart)
            cJSON_AddStringToObject(o, "hint", hint);
        cli_log_write(&j->lg, o, supervised);
    }
    if (!supervised)
        fprintf(stderr, "dplan: error: %s; %s\n", msg, hint);
    else if (!ev->will_restart && f->restartable) {
        char where[96];
        where_text(f, where, sizeof where);
        fprintf(stderr, "dplan: error: giving up after %d restart%s: %s: %s\n", ev->attempt,
                ev->attempt == 1 ? "" : "s", where, f->what);
    } else if (!ev->will_restart)
        fprintf(stderr, "dplan: error: not restarting: %s\n", f->what);
}

static void on_event(const struct dp_launch_event *ev, void *ctx)
{
    struct job_ctx *j = ctx;
    switch (ev->kind) {
    case DP_LAUNCH_FAILED: on_failed(j, ev); break;
    case DP_LAUNCH_RESTARTING: {
        j->lg.attempt = ev->attempt;
        cJSON *o = cli_log_record(&j->lg, "restarting");
        cJSON_AddNumberToObject(o, "restart", ev->attempt + 1);
        cJSON_AddNumberToObject(o, "max_restarts", ev->max_restarts);
        cJSON_AddNumberToObject(o, "backoff_s", ev->backoff_s);
        if (ev->resume_path) {
            cJSON_AddStringToObject(o, "resume_from", ev->resume_path);
            cJSON_AddNumberToObject(o, "resume_step", ev->resume_step);
            cJSON_AddStringToObject(o, "checkpoint_saved_at", ev->saved_at);
        } else {
            cJSON_AddNullToObject(o, "resume_from");
            cJSON_AddNumberToObject(o, "resume_step", 0);
        }
        cli_log_write(&j->lg, o, true);
        char where[96];
        where_text(ev->f, where, sizeof where);
        fprintf(stderr, "dplan run: %s failed (%s); restart %d of %d in %d s from %s\n", where,
                ev->f->what, ev->attempt + 1, ev->max_restarts, ev->backoff_s,
                ev->resume_path ? ev->resume_path : "the start (no checkpoint yet)");
        break;
    }
    case DP_LAUNCH_FINISHED:
        if (ev->attempt > 0)
            fprintf(stderr, "dplan run: finished after %d restart%s\n", ev->attempt,
                    ev->attempt == 1 ? "" : "s");
        break;
    case DP_LAUNCH_INTERRUPTED:
        if (ev->max_restarts > 0)
            fprintf(stderr, "dplan run: interrupted; not restarting\n");
        break;
    }
    fflush(stderr);
}

int cli_run_job(struct cli_run *r, int argc, char **argv)
{
    char hbdir[4200];
    snprintf(hbdir, sizeof hbdir, "%s/heartbeat", r->out_dir);
    struct dp_launch_job job = {.world = r->world,
                                .argc = argc,
                                .argv = argv,
                                .hostfile = r->hostfile,
                                .ranks_per_node = r->ranks_per_node,
                                .heartbeat_dir = hbdir,
                                .rank_env = dp_exec_rank_env(r->o.backend),
                                .out = stdout,
                                .err = stderr};
    struct dp_launch_policy pol = {.max_restarts = r->ck.max_restarts,
                                   .ckpt_dir = r->ck.dir,
                                   .resume_dir = r->ck.resume ? r->ck.resume_dir : NULL};
    struct job_ctx j = {
        .r = r, .lg = {.path = r->log_path, .source = "launcher", .rank = -1, .world = r->world}};
    struct dp_err err = {0};
    int rc = dp_launch_supervise(&job, &pol, r->ck.resume_dir, on_event, &j, &err);
    if (err.code)
        return cli_fail(&err);
    return rc;
}
