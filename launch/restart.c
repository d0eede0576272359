/*
 * The restart policy (launch.h): run the job, and when an attempt fails in a
 * way another attempt may survive (a rank died, was killed or hung), wait
 * 1, 2, 4, ... (at most 30) seconds and relaunch every rank with --resume
 * from the newest checkpoint of --ckpt-dir (or of the directory the first
 * launch resumed from, while --ckpt-dir has none), up to --max-restarts
 * times. Without restarts it is the same loop, once.
 */
#include "ckpt/ckpt.h"
#include "internal.h"

#include <dirent.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

int dp_launch_backoff_s(int attempt)
{
    int b = attempt < 5 ? 1 << attempt : 30;
    return b > 30 ? 30 : b;
}

char **dp_launch_resume_args(int argc, char **argv, const char *resume_dir, const char *resume,
                             int *nout)
{
    char **av = calloc((size_t)argc + 2, sizeof *av);
    if (!av)
        return NULL;
    static char resume_arg[4200];
    int n = 0;
    for (int i = 0; i < argc; i++) {
        if (resume && (!strcmp(argv[i], "--resume") || !strncmp(argv[i], "--resume=", 9))) {
            if (!strcmp(argv[i], "--resume") && i + 1 < argc && argv[i + 1] == resume_dir)
                i++; /* "--resume DIR": DIR was consumed with it */
            continue;
        }
        av[n++] = argv[i];
    }
    if (resume) {
        snprintf(resume_arg, sizeof resume_arg, "--resume=%s", resume);
        av[n++] = resume_arg;
    }
    av[n] = NULL;
    *nout = n;
    return av;
}

static void clear_heartbeats(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return;
    struct dirent *e;
    char p[4400];
    while ((e = readdir(d)))
        if (!strncmp(e->d_name, "rank_", 5)) {
            snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
            unlink(p);
        }
    closedir(d);
}

/* Sleep `s` seconds unless interrupted (the runner's handler records the signal). */
static bool wait_s(int s)
{
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (;;) {
        struct timespec now, ts = {0, 100000000};
        clock_gettime(CLOCK_MONOTONIC, &now);
        if ((double)(now.tv_sec - t0.tv_sec) + 1e-9 * (double)(now.tv_nsec - t0.tv_nsec) >= s)
            return true;
        nanosleep(&ts, NULL);
        if (dp__launch_signal())
            return false;
    }
}

int dp_launch_supervise(const struct dp_launch_job *job0, const struct dp_launch_policy *pol,
                        const char *user_resume_dir,
                        void (*on_event)(const struct dp_launch_event *ev, void *ctx), void *ctx,
                        struct dp_err *err)
{
    const char *hbdir = job0->heartbeat_dir;
    /* The directory's parents, then itself: mkdir's errno names the failure. */
    if (hbdir && dp_mkdirs(hbdir, err))
        return DP_EXIT_FAILED;
    int result = DP_EXIT_FAILED;
    dp__launch_catch(true);
    for (int attempt = 0;; attempt++) {
        if (hbdir)
            clear_heartbeats(hbdir);
        const char *resume = NULL;
        struct dp_ckpt_info ci;
        if (attempt > 0) {
            if (dp_ckpt_newest(pol->ckpt_dir, &ci))
                resume = pol->ckpt_dir;
            else if (pol->resume_dir && dp_ckpt_newest(pol->resume_dir, &ci))
                resume = pol->resume_dir;
        }
        struct dp_launch_job job = *job0;
        job.argv = resume ? dp_launch_resume_args(job0->argc, job0->argv, user_resume_dir, resume,
                                                  &job.argc)
                          : job0->argv;
        if (!job.argv) {
            dp_err_set(err, DP_ENOMEM, "out of memory");
            break;
        }
        struct dp_launch_failure f;
        int rc = dp_launch_run(&job, attempt, &f);
        if (job.argv != job0->argv)
            free(job.argv);
        struct dp_launch_event ev = {.attempt = attempt, .max_restarts = pol->max_restarts};
        if (rc == 0) {
            ev.kind = DP_LAUNCH_FINISHED;
            on_event(&ev, ctx);
            result = DP_EXIT_OK;
            break;
        }
        if (rc == DP_EXIT_INTERRUPTED) {
            ev.kind = DP_LAUNCH_INTERRUPTED;
            on_event(&ev, ctx);
            result = DP_EXIT_INTERRUPTED;
            break;
        }
        struct dp_ckpt_info last;
        bool have_last = dp_ckpt_newest(pol->ckpt_dir, &last);
        ev.kind = DP_LAUNCH_FAILED;
        ev.f = &f;
        ev.will_restart = f.restartable && attempt < pol->max_restarts;
        ev.saved_at = have_last ? last.saved_at : "";
        on_event(&ev, ctx);
        if (!ev.will_restart)
            break;
        ev.kind = DP_LAUNCH_RESTARTING;
        ev.backoff_s = dp_launch_backoff_s(attempt);
        ev.resume_path = have_last ? last.path : NULL;
        ev.resume_step = have_last ? last.step : 0;
        on_event(&ev, ctx);
        if (!wait_s(ev.backoff_s)) {
            ev.kind = DP_LAUNCH_INTERRUPTED;
            on_event(&ev, ctx);
            result = DP_EXIT_INTERRUPTED;
            break;
        }
    }
    dp__launch_catch(false);
    if (hbdir) {
        clear_heartbeats(hbdir);
        rmdir(hbdir);
    }
    return result;
}
