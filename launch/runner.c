/*
 * The runner (launch.h): start the job, pass its output through, and wait
 * for every rank; then say how it ended. One runner serves a single launch
 * and each attempt under restarts (restart.c).
 *
 * Failures it tells apart: a rank that exits non-zero or is killed (mpirun
 * names it in its report; for one rank the wait status does), a rank whose
 * agent saw no progress for --timeout (exit DP_EXIT_STALLED: the
 * heartbeat records then name the rank furthest behind as the one that
 * hung), an error every rank reported alike (exit DP_EXIT_REPORTED from
 * the ranks, or a usage error of a single rank: restarting would not help),
 * and a launcher that cannot start.
 */
#include "internal.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static volatile sig_atomic_t got_signal;
static volatile pid_t child_pgid;

static void on_signal(int sig)
{
    got_signal = sig;
    if (child_pgid > 0)
        kill(-child_pgid, sig);
}

void dp__launch_catch(bool on)
{
    static struct sigaction old_int, old_term;
    static int depth;
    if (on && depth++ == 0) {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_signal;
        sigemptyset(&sa.sa_mask);
        got_signal = 0;
        sigaction(SIGINT, &sa, &old_int);
        sigaction(SIGTERM, &sa, &old_term);
    } else if (!on && depth > 0 && --depth == 0) {
        sigaction(SIGINT, &old_int, NULL);
        sigaction(SIGTERM, &old_term, NULL);
    }
}

int dp__launch_signal(void)
{
    return got_signal;
}

static double mono_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Kill a leftover rank process, but only one of this job: its environment holds this
 * job's heartbeat directory (a recycled pid does not). */
static void kill_rank(int pid, const char *hbdir)
{
    if (pid <= 1 || !hbdir || kill(pid, 0))
        return;
    char p[64], want[4300];
    snprintf(p, sizeof p, "/proc/%d/environ", pid);
    snprintf(want, sizeof want, "%s=%s", DP_ENV_HEARTBEAT_DIR, hbdir);
    FILE *f = fopen(p, "r");
    if (!f)
        return;
    bool ours = false;
    char var[4300];
    size_t n = 0;
    for (int c; !ours && (c = fgetc(f)) != EOF;) {
        if (c && n < sizeof var - 1) {
            var[n++] = (char)c;
            continue;
        }
        var[n] = '\0';
        ours = !strcmp(var, want);
        n = 0;
    }
    fclose(f);
    if (ours)
        kill(pid, SIGKILL);
}

/* A process that is still running (not gone, not a zombie). */
static bool running(int pid)
{
    char p[64], st[512];
    snprintf(p, sizeof p, "/proc/%d/stat", pid);
    FILE *f = fopen(p, "r");
    if (!f)
        return false;
    size_t n = fread(st, 1, sizeof st - 1, f);
    fclose(f);
    st[n] = '\0';
    const char *q = strrchr(st, ')'); /* "PID (COMM) STATE ..." */
    return q && q[1] == ' ' && q[2] != 'Z' && q[2] != 'X';
}

/* Whether any rank that wrote a heartbeat still runs (true when none wrote one yet). */
static bool ranks_alive(const struct dp_launch_job *job, struct dp_heartbeat *h)
{
    dp_launch_hb_read(job->heartbeat_dir, h, job->world);
    bool seen = false;
    for (int r = 0; r < job->world; r++) {
        if (h[r].seen && running(h[r].pid))
            return true;
        seen |= h[r].seen;
    }
    return !seen;
}

/* Pass one read of a child's stream through; *at_start tracks whether it ended a line. */
static bool pass(int fd, FILE *to, bool *at_start, char *line, size_t *ll,
                 struct dp_launch_failure *f)
{
    char buf[8192];
    ssize_t n = read(fd, buf, sizeof buf);
    if (n <= 0)
        return false;
    fwrite(buf, 1, (size_t)n, to);
    fflush(to);
    if (at_start)
        *at_start = buf[n - 1] == '\n';
    for (ssize_t i = 0; line && i < n; i++) {
        if (*ll < 4095)
            line[(*ll)++] = buf[i];
        if (buf[i] == '\n') {
            line[*ll] = '\0';
            dp_launch_scan_line(line, &f->rank, &f->code, &f->sig);
            *ll = 0;
        }
    }
    return true;
}

/* Start argv with stdout and stderr into the two pipes, in a process group of its own (so
 * that ending the job reaches mpirun and its helpers) and without terminal input (a
 * background group reading it would be stopped). */
static pid_t spawn(char *const *argv, int out[2], int err[2])
{
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid != 0)
        return pid;
    setpgid(0, 0);
    int nul = open("/dev/null", O_RDONLY);
    if (nul >= 0) {
        dup2(nul, 0);
        close(nul);
    }
    close(out[0]);
    close(err[0]);
    dup2(out[1], 1);
    dup2(err[1], 2);
    close(out[1]);
    close(err[1]);
    execvp(argv[0], argv);
    fprintf(stderr, "dplan: error: cannot run %s: %s (install openmpi-bin, or set %s)\n", argv[0],
            strerror(errno), DP_ENV_MPIRUN);
    _exit(DP_EXIT_NOEXEC);
}

/* What the wait status, mpirun's report and the heartbeats say. */
static void classify(const struct dp_launch_job *job, int status, const struct dp_heartbeat *h,
                     struct dp_launch_failure *f)
{
    int rc = WIFEXITED(status) ? WEXITSTATUS(status) : DP_EXIT_SIGNAL + WTERMSIG(status);
    f->status = rc;
    f->restartable = true;
    if (job->world == 1) {
        f->rank = 0;
        if (WIFSIGNALED(status))
            f->sig = WTERMSIG(status);
        else
            f->code = rc;
    }
    if (f->rank >= 0 && h[f->rank].seen)
        f->step = h[f->rank].step;
    if (f->code == DP_EXIT_STALLED) {
        f->reason = DP_FAIL_HANG;
        int s = dp_launch_hb_suspect(h, job->world);
        int by = f->rank;
        if (s >= 0) {
            f->rank = s;
            f->step = h[s].step;
        }
        snprintf(f->what, sizeof f->what,
                 "no progress for the --timeout (rank %d's agent ended it; rank %d is "
                 "furthest behind: step %d, last activity %s)",
                 by, f->rank, f->step,
                 f->rank >= 0 && h[f->rank].what[0] ? h[f->rank].what : "start-up");
        for (int q = 0; q < job->world; q++) {
            size_t len = strlen(f->ranks);
            if (h[q].seen && len + 80 < sizeof f->ranks)
                snprintf(f->ranks + len, sizeof f->ranks - len, "%s%d:%d+%llu(%s)", len ? " " : "",
                         q, h[q].step, h[q].step_beats, h[q].what);
        }
    } else if (f->code == DP_EXIT_REPORTED || rc == DP_EXIT_NOEXEC ||
               (job->world == 1 && rc == DP_EXIT_USAGE)) {
        f->reason = rc == DP_EXIT_NOEXEC ? DP_FAIL_LAUNCH : DP_FAIL_REPORTED;
        f->restartable = false;
        snprintf(f->what, sizeof f->what,
                 "an error every rank reported (see above): restarting would not help");
    } else if (f->rank >= 0 && f->sig > 0) {
        f->reason = DP_FAIL_SIGNAL;
        snprintf(f->what, sizeof f->what, "killed by signal %d (%s)", f->sig, strsignal(f->sig));
    } else if (f->rank >= 0) {
        f->reason = DP_FAIL_EXIT;
        snprintf(f->what, sizeof f->what, "exit status %d", f->code >= 0 ? f->code : rc);
    } else {
        f->reason = DP_FAIL_LAUNCH;
        snprintf(f->what, sizeof f->what, "the launcher exited with status %d", rc);
    }
    if (f->step < 0)
        for (int r = 0; r < job->world; r++)
            f->step = h[r].seen && h[r].step > f->step ? h[r].step : f->step;
}

int dp_launch_run(const struct dp_launch_job *job, int attempt, struct dp_launch_failure *f)
{
    memset(f, 0, sizeof *f);
    f->rank = f->step = f->code = f->sig = -1;
    f->reason = DP_FAIL_LAUNCH;
    int n = 0;
    const char **av = NULL;
    /* First: mpirun's -x list forwards the protocol's variables only when they are set. */
    dp_launch_setenv(job, attempt, isatty(2));
    if (job->world > 1) {
        av = dp_launch_mpirun_argv(job, &n);
    } else if ((av = calloc((size_t)job->argc + 2, sizeof *av))) {
        av[0] = dp_launch_self_exe();
        for (int i = 0; i < job->argc; i++)
            av[i + 1] = job->argv[i];
    }
    struct dp_heartbeat *h = calloc((size_t)job->world, sizeof *h);
    int out[2] = {-1, -1}, err[2] = {-1, -1};
    if (!av || !h || pipe(out) || pipe(err)) {
        snprintf(f->what, sizeof f->what, "cannot start the job: %s",
                 !av || !h ? "out of memory" : strerror(errno));
        for (int i = 0; i < 2; i++) {
            if (out[i] >= 0)
                close(out[i]);
            if (err[i] >= 0)
                close(err[i]);
        }
        free(av);
        free(h);
        return 1;
    }
    dp__launch_catch(true);
    pid_t pid = spawn((char *const *)av, out, err);
    free(av);
    close(out[1]);
    close(err[1]);
    if (pid < 0) {
        snprintf(f->what, sizeof f->what, "fork: %s", strerror(errno));
        dp__launch_catch(false);
        close(out[0]);
        close(err[0]);
        free(h);
        return 1;
    }
    setpgid(pid, pid);
    child_pgid = pid;
    char line[4096];
    size_t ll = 0;
    bool out_start = true, oeof = false, eeof = false, exited = false;
    int status = 0;
    double exited_at = 0, checked_at = mono_s(), ranks_gone_at = 0;
    while (!exited || !oeof || !eeof) {
        struct pollfd p[2] = {{.fd = oeof ? -1 : out[0], .events = POLLIN},
                              {.fd = eeof ? -1 : err[0], .events = POLLIN}};
        if (oeof && eeof) {
            struct timespec ts = {0, 100000000};
            nanosleep(&ts, NULL);
        } else if (poll(p, 2, 100) > 0) {
            if (p[0].revents && !pass(out[0], job->out, &out_start, NULL, NULL, f))
                oeof = true;
            if (p[1].revents && !pass(err[0], job->err, NULL, line, &ll, f))
                eeof = true;
        }
        if (!exited && waitpid(pid, &status, WNOHANG) == pid)
            exited = true;
        /* mpirun is gone; its ranks may still hold the pipes for an instant. */
        if (exited && !exited_at)
            exited_at = mono_s();
        if (exited && mono_s() - exited_at > 3)
            break;
        /* Every rank gone but mpirun still there: under load Open MPI 4.1 was seen to wait
         * forever for a rank that never reached its PMIx server, with the others left as
         * zombies. After 10 s of that the job is ended (its report is already out). Only
         * with every rank on this machine: a heartbeat's pid means nothing elsewhere. */
        if (!exited && job->heartbeat_dir && !job->hostfile && mono_s() - checked_at > 1) {
            checked_at = mono_s();
            if (!ranks_alive(job, h))
                ranks_gone_at = ranks_gone_at ? ranks_gone_at : checked_at;
            else
                ranks_gone_at = 0;
            if (ranks_gone_at && checked_at - ranks_gone_at > 10)
                kill(-pid, SIGKILL);
        }
    }
    close(out[0]);
    close(err[0]);
    child_pgid = 0;
    dp__launch_catch(false);
    if (!out_start)
        fputc('\n', job->out);
    if (job->heartbeat_dir) {
        dp_launch_hb_read(job->heartbeat_dir, h, job->world);
        for (int r = 0; r < job->world; r++)
            if (h[r].seen)
                kill_rank(h[r].pid, job->heartbeat_dir);
    }
    int rc = 0;
    if (got_signal)
        rc = DP_EXIT_INTERRUPTED;
    else if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        rc = 1;
    if (rc == 1)
        classify(job, status, h, f);
    free(h);
    return rc;
}
