/*
 * dplan run --max-restarts: the supervisor, and the heartbeat files its ranks
 * write. torchrun's model (executor-notes Sec. 4): any failure ends the
 * whole job and every rank is relaunched, here from the newest checkpoint
 * (Open MPI has no ULFM, so a job cannot shrink or repair itself in place).
 *
 * Failures it sees: mpirun exits non-zero because a rank exited or was
 * killed (mpirun's report names the rank: run_launch.c parses it), or a
 * rank's heartbeat stops changing for --hang-timeout seconds (MPI never
 * notices a hung peer: the others wait in a collective forever). Each rank
 * publishes, from a thread, its executor heartbeat (dp_exec_heartbeat: a
 * counter bumped at every micro-batch and collective), its step and when
 * the counter last moved in DIR/rank_%05d under --out; the rank whose
 * counter stopped first is named as the one that hung.
 *
 * It does not checkpoint (the executor does) and does not restart errors
 * that every rank reported alike (a bad plan, a NaN loss): those would
 * fail again.
 */
#include "cli.h"
#include "executor/executor.h"
#include "run_ckpt.h"
#include "run_launch.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define HB_RECORD 160 /* bytes of one heartbeat line */

static long long real_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static double mono_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ------------------------------------------------------------------ heartbeats (ranks) */

static struct {
    pthread_t th;
    bool running;
    atomic_bool stop;
    int fd;
    pthread_mutex_t mu;
    uint64_t count;
    int step;
    long long last_ns; /* when the counter (or the step) last moved */
    double written_s;
    uint64_t step_base; /* the counter when the current step started (cli_heartbeat_step) */
} hb = {.fd = -1, .mu = PTHREAD_MUTEX_INITIALIZER};

/* "PID COUNT STEP STEP_BEATS LAST_NS WHAT", padded to one fixed-size record; STEP_BEATS
 * counts the beats since the step started. Caller holds hb.mu. */
static void hb_write(void)
{
    const char *what = "";
    int step = 0;
    uint64_t c = dp_exec_heartbeat(&what, &step);
    if (c != hb.count || step != hb.step) {
        hb.count = c;
        hb.step = step;
        hb.last_ns = real_ns();
    }
    char line[HB_RECORD];
    int n = snprintf(line, sizeof line, "%d %llu %d %llu %lld %.60s", (int)getpid(),
                     (unsigned long long)c, step,
                     (unsigned long long)(c >= hb.step_base ? c - hb.step_base : 0), hb.last_ns,
                     what ? what : "");
    if (n < 0 || n >= HB_RECORD)
        n = HB_RECORD - 1;
    memset(line + n, ' ', (size_t)(HB_RECORD - 1 - n));
    line[HB_RECORD - 1] = '\n';
    if (pwrite(hb.fd, line, HB_RECORD, 0) != HB_RECORD) {
        /* A full disk must not stop training; the supervisor then sees no progress. */
    }
    hb.written_s = mono_s();
}

static void *hb_thread(void *arg)
{
    (void)arg;
    while (!atomic_load(&hb.stop)) {
        struct timespec ts = {0, 5000000}; /* 5 ms: the first rank to stop is the one named */
        nanosleep(&ts, NULL);
        pthread_mutex_lock(&hb.mu);
        const char *what;
        int step;
        uint64_t c = dp_exec_heartbeat(&what, &step);
        if (c != hb.count || step != hb.step) {
            hb.count = c;
            hb.step = step;
            hb.last_ns = real_ns();
            if (mono_s() - hb.written_s > 0.1)
                hb_write();
        } else if (mono_s() - hb.written_s > 0.5) {
            hb_write();
        }
        pthread_mutex_unlock(&hb.mu);
    }
    return NULL;
}

void cli_heartbeat_start(int rank)
{
    const char *dir = getenv("DPLAN_HEARTBEAT_DIR");
    if (!dir || !*dir || hb.running)
        return;
    char path[4200];
    snprintf(path, sizeof path, "%s/rank_%05d", dir, rank);
    hb.fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (hb.fd < 0) {
        fprintf(stderr,
                "dplan: warning: %s: cannot create: %s (no heartbeat for the "
                "supervisor)\n",
                path, strerror(errno));
        return;
    }
    hb.last_ns = real_ns();
    pthread_mutex_lock(&hb.mu);
    hb_write();
    pthread_mutex_unlock(&hb.mu);
    atomic_store(&hb.stop, false);
    hb.running = pthread_create(&hb.th, NULL, hb_thread, NULL) == 0;
}

void cli_heartbeat_step(int step)
{
    if (hb.fd < 0)
        return;
    (void)step; /* dp_exec_heartbeat already reports it */
    pthread_mutex_lock(&hb.mu);
    hb.step_base = dp_exec_heartbeat(NULL, NULL); /* no beat of this step yet */
    hb_write();
    pthread_mutex_unlock(&hb.mu);
}

void cli_heartbeat_stop(void)
{
    if (hb.running) {
        atomic_store(&hb.stop, true);
        pthread_join(hb.th, NULL);
        hb.running = false;
    }
    if (hb.fd >= 0) {
        pthread_mutex_lock(&hb.mu);
        hb_write();
        pthread_mutex_unlock(&hb.mu);
        close(hb.fd);
        hb.fd = -1;
    }
}

/* ------------------------------------------------------------------ the supervisor */

struct rank_hb {
    bool seen;
    int pid, step;
    unsigned long long count, step_beats;
    long long last_ns;
    char what[64];
    double moved_at; /* supervisor's clock */
};

static volatile sig_atomic_t got_signal;
static volatile pid_t child_pgid;

static void on_signal(int sig)
{
    got_signal = sig;
    if (child_pgid > 0)
        kill(-child_pgid, sig);
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

static void read_heartbeats(const char *dir, struct rank_hb *h, int world, double now)
{
    for (int r = 0; r < world; r++) {
        char p[4400], line[HB_RECORD + 1];
        snprintf(p, sizeof p, "%s/rank_%05d", dir, r);
        int fd = open(p, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
            continue;
        ssize_t n = read(fd, line, HB_RECORD);
        close(fd);
        if (n < 20)
            continue;
        line[n] = '\0';
        int pid = 0, step = 0, k = 0;
        unsigned long long count = 0, beats = 0;
        long long last = 0;
        if (sscanf(line, "%d %llu %d %llu %lld %n", &pid, &count, &step, &beats, &last, &k) < 5)
            continue;
        struct rank_hb *x = &h[r];
        if (!x->seen || count != x->count || step != x->step)
            x->moved_at = now;
        x->seen = true;
        x->pid = pid;
        x->count = count;
        x->step_beats = beats;
        x->step = step;
        x->last_ns = last;
        snprintf(x->what, sizeof x->what, "%s", line + k);
        for (char *q = x->what + strlen(x->what); q > x->what && (q[-1] == ' ' || q[-1] == '\n');)
            *--q = '\0';
    }
}

/*
 * The rank that hung: the one furthest behind, by step, then by beats within the step
 * (a rank stuck at the start of a step has none, while its peers beat before they block
 * waiting for it), then by when its counter last moved; ranks of different pipeline
 * stages beat differently, so this is a suspicion, and the record lists every rank.
 */
static int suspect(const struct rank_hb *h, int world)
{
    int best = -1;
    for (int r = 0; r < world; r++) {
        if (!h[r].seen)
            continue;
        const struct rank_hb *a = &h[r], *b = best >= 0 ? &h[best] : NULL;
        if (!b || a->step < b->step ||
            (a->step == b->step && (a->step_beats < b->step_beats ||
                                    (a->step_beats == b->step_beats && a->last_ns < b->last_ns))))
            best = r;
    }
    return best;
}

/* Kill a leftover rank process, but only one of this job: its environment holds this
 * supervisor's heartbeat directory (a recycled pid does not). */
static void kill_rank(int pid)
{
    if (pid <= 1 || kill(pid, 0))
        return;
    char p[64], want[4300];
    snprintf(p, sizeof p, "/proc/%d/environ", pid);
    snprintf(want, sizeof want, "DPLAN_HEARTBEAT_DIR=%s", getenv("DPLAN_HEARTBEAT_DIR"));
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

/* End the job: SIGTERM to the launcher's process group (mpirun stops its ranks), SIGKILL
 * after 5 s, then any rank still alive. Returns the wait status. */
static int end_job(pid_t pid, const struct rank_hb *h, int world)
{
    int status = 0;
    kill(-pid, SIGTERM);
    double t0 = mono_s();
    while (waitpid(pid, &status, WNOHANG) == 0) {
        if (mono_s() - t0 > 5) {
            kill(-pid, SIGKILL);
            while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
                ;
            break;
        }
        struct timespec ts = {0, 50000000};
        nanosleep(&ts, NULL);
    }
    for (int r = 0; r < world; r++)
        if (h[r].seen)
            kill_rank(h[r].pid);
    return status;
}

/* The child's command line: the user's arguments without --resume, plus --resume=DIR. */
static char **child_args(const struct cli_ckpt *k, int argc, char **argv, const char *resume,
                         int *nout)
{
    char **av = calloc((size_t)argc + 2, sizeof *av);
    if (!av)
        return NULL;
    static char resume_arg[4200];
    int n = 0;
    for (int i = 0; i < argc; i++) {
        if (resume && (!strcmp(argv[i], "--resume") || !strncmp(argv[i], "--resume=", 9))) {
            if (!strcmp(argv[i], "--resume") && i + 1 < argc && argv[i + 1] == k->resume_dir)
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

/* Newest published checkpoint under dir (presence and sizes only: the ranks verify). */
static bool newest_ckpt(const char *dir, struct dp_ckpt_info *out)
{
    struct dp_ckpt_info *list;
    int n;
    struct dp_err e = {0};
    if (!dir || dp_ckpt_list(dir, false, &list, &n, &e))
        return false;
    bool found = false;
    for (int i = n - 1; i >= 0 && !found; i--)
        if (list[i].state == DP_CKPT_OK) {
            *out = list[i];
            found = true;
        }
    free(list);
    return found;
}

/* Whether the job's stdout (passed through) ended its last line. */
static bool out_at_line_start = true;

/* Append a record; a line a killed rank left unfinished is ended first, so that every
 * line stays one JSON object. */
static void log_record(const char *log_path, cJSON *rec)
{
    FILE *f = fopen(log_path, "a+");
    if (f && fseek(f, -1, SEEK_END) == 0 && fgetc(f) != '\n') {
        fseek(f, 0, SEEK_END);
        fputc('\n', f);
    }
    if (!out_at_line_start)
        putchar('\n');
    out_at_line_start = true;
    cli_ckpt_record(f, rec);
    if (f)
        fclose(f);
}

static cJSON *sup_record(const char *status, int world)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "source", "supervisor");
    cJSON_AddNumberToObject(o, "world_size", world);
    cJSON_AddStringToObject(o, "backend", "cpu");
    cJSON_AddStringToObject(o, "status", status);
    return o;
}

struct failure {
    int rank, step, code, sig;
    bool hang, restartable;
    char reason[256];
    char ranks[512]; /* hang: "RANK:STEP+BEATS(WHAT)" of every rank */
};

/* Run one attempt; returns 0 when the job finished, else fills *f. */
static int run_once(const struct cli_ckpt *k, int world, const char *hbdir, char **av,
                    struct failure *f)
{
    memset(f, 0, sizeof *f);
    f->rank = f->step = f->code = f->sig = -1;
    int pfd[2], ofd[2]; /* the job's stderr (scanned for mpirun's report) and stdout */
    if (pipe(pfd)) {
        snprintf(f->reason, sizeof f->reason, "pipe: %s", strerror(errno));
        return 1;
    }
    if (pipe(ofd)) {
        snprintf(f->reason, sizeof f->reason, "pipe: %s", strerror(errno));
        close(pfd[0]);
        close(pfd[1]);
        return 1;
    }
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) {
        snprintf(f->reason, sizeof f->reason, "fork: %s", strerror(errno));
        close(pfd[0]);
        close(pfd[1]);
        close(ofd[0]);
        close(ofd[1]);
        return 1;
    }
    if (pid == 0) {
        /* Its own process group, so that ending the job reaches mpirun and its helpers;
         * no terminal input (a background group reading it would be stopped). */
        setpgid(0, 0);
        int nul = open("/dev/null", O_RDONLY);
        if (nul >= 0) {
            dup2(nul, 0);
            close(nul);
        }
        close(pfd[0]);
        close(ofd[0]);
        dup2(pfd[1], 2);
        dup2(ofd[1], 1);
        close(pfd[1]);
        close(ofd[1]);
        execvp(av[0], av);
        fprintf(stderr, "dplan: error: cannot run %s: %s\n", av[0], strerror(errno));
        _exit(127);
    }
    setpgid(pid, pid);
    child_pgid = pid;
    close(pfd[1]);
    close(ofd[1]);
    struct rank_hb *h = calloc((size_t)world, sizeof *h);
    if (!h) {
        snprintf(f->reason, sizeof f->reason, "out of memory");
        f->restartable = false;
        kill(-pid, SIGKILL);
        waitpid(pid, NULL, 0);
        close(pfd[0]);
        close(ofd[0]);
        return 1;
    }
    char buf[8192], line[4096];
    size_t ll = 0;
    int status = 0;
    bool exited = false, eof = false, oeof = false;
    double exited_at = 0;
    double timeout = k->hang_timeout_s;
    while (!exited || !eof || !oeof) {
        struct pollfd p[2] = {{.fd = eof ? -1 : pfd[0], .events = POLLIN},
                              {.fd = oeof ? -1 : ofd[0], .events = POLLIN}};
        int pr = eof && oeof ? 0 : poll(p, 2, 100);
        if (eof && oeof) {
            struct timespec ts = {0, 100000000};
            nanosleep(&ts, NULL);
        }
        if (pr > 0 && p[1].revents) {
            ssize_t n = read(ofd[0], buf, sizeof buf);
            if (n <= 0) {
                oeof = true;
            } else {
                fwrite(buf, 1, (size_t)n, stdout);
                fflush(stdout);
                out_at_line_start = buf[n - 1] == '\n';
            }
        }
        if (pr > 0 && p[0].revents) {
            ssize_t n = read(pfd[0], buf, sizeof buf);
            if (n <= 0) {
                eof = true;
            } else {
                fwrite(buf, 1, (size_t)n, stderr);
                fflush(stderr);
                for (ssize_t i = 0; i < n; i++) {
                    if (ll < sizeof line - 1)
                        line[ll++] = buf[i];
                    if (buf[i] == '\n') {
                        line[ll] = '\0';
                        cli_run_scan_line(line, &f->rank, &f->code, &f->sig);
                        ll = 0;
                    }
                }
            }
        }
        if (!exited && waitpid(pid, &status, WNOHANG) == pid)
            exited = true;
        if (exited) {
            /* mpirun is gone; its ranks may still hold the pipe for an instant. */
            if (!exited_at)
                exited_at = mono_s();
            if (mono_s() - exited_at > 3)
                break;
            continue;
        }
        if (got_signal)
            continue;
        double now = mono_s();
        read_heartbeats(hbdir, h, world, now);
        for (int r = 0; r < world && h && !f->hang; r++) {
            /* Before the first step (start-up, checkpoint loading) allow at least a minute. */
            double limit = h[r].step > 0 ? timeout : (timeout > 60 ? timeout : 60);
            if (h[r].seen && now - h[r].moved_at > limit) {
                int s = suspect(h, world);
                f->hang = true;
                f->rank = s;
                f->step = h[s].step;
                snprintf(f->reason, sizeof f->reason,
                         "no progress for %.0f s (rank %d is furthest behind: step %d, last "
                         "activity %s)",
                         limit, s, h[s].step, h[s].what[0] ? h[s].what : "start-up");
                for (int q = 0; q < world; q++) {
                    size_t len = strlen(f->ranks);
                    if (h[q].seen && len + 80 < sizeof f->ranks)
                        snprintf(f->ranks + len, sizeof f->ranks - len, "%s%d:%d+%llu(%s)",
                                 len ? " " : "", q, h[q].step, h[q].step_beats, h[q].what);
                }
                fprintf(stderr,
                        "dplan: error: rank %d made no progress for %.0f s at step %d (%s); "
                        "ending the job\n",
                        s, limit, h[s].step, h[s].what[0] ? h[s].what : "start-up");
                fflush(stderr);
                status = end_job(pid, h, world);
                exited = true;
            }
        }
    }
    close(pfd[0]);
    close(ofd[0]);
    child_pgid = 0;
    if (h) {
        read_heartbeats(hbdir, h, world, mono_s());
        for (int r = 0; r < world; r++)
            if (h[r].seen)
                kill_rank(h[r].pid);
    }
    int rc = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    if (f->hang && rc == 0) {
        /* Every rank exited 0 while the job was being ended: it was slow, not hung. */
        fprintf(stderr, "dplan run: the job completed while it was being ended; not restarting\n");
        f->hang = false;
    }
    if (!f->hang && rc == 0) {
        free(h);
        return 0;
    }
    f->restartable = true;
    if (!f->hang) {
        if (world == 1) {
            f->rank = 0;
            if (WIFSIGNALED(status))
                f->sig = WTERMSIG(status);
            else
                f->code = rc;
        }
        if (f->rank >= 0 && h && h[f->rank].seen)
            f->step = h[f->rank].step;
        if (f->code == CLI_EXIT_REPORTED || rc == 127 || (world == 1 && rc == 2)) {
            f->restartable = false;
            snprintf(f->reason, sizeof f->reason,
                     "an error every rank reported (see above): restarting would not help");
        } else if (f->rank >= 0 && f->sig > 0) {
            snprintf(f->reason, sizeof f->reason, "killed by signal %d (%s)", f->sig,
                     strsignal(f->sig));
        } else if (f->code == CLI_EXIT_STALLED) {
            snprintf(f->reason, sizeof f->reason,
                     "its watchdog saw no progress for the --timeout (a peer died or hung)");
        } else if (f->rank >= 0) {
            snprintf(f->reason, sizeof f->reason, "exit status %d", f->code >= 0 ? f->code : rc);
        } else {
            snprintf(f->reason, sizeof f->reason, "the launcher exited with status %d", rc);
        }
        if (f->step < 0 && h)
            for (int r = 0; r < world; r++)
                f->step = h[r].seen && h[r].step > f->step ? h[r].step : f->step;
    }
    free(h);
    return 1;
}

int cli_run_supervise(struct cli_ckpt *k, int world, const char *out_dir, const char *log_path,
                      int argc, char **argv)
{
    char hbdir[4200];
    snprintf(hbdir, sizeof hbdir, "%s/heartbeat", out_dir);
    /* No dp_err: the message names hbdir whichever mkdir failed, with mkdir's errno. */
    if (dp_mkdirs(out_dir, NULL) || dp_mkdirs(hbdir, NULL)) {
        fprintf(stderr, "dplan: error: %s: cannot create directory: %s\n", hbdir, strerror(errno));
        return 1;
    }
    if (!k->hang_given)
        k->hang_timeout_s = 300;
    setenv("DPLAN_SUPERVISED", "1", 1);
    setenv("DPLAN_HEARTBEAT_DIR", hbdir, 1);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    int result = 1;
    for (int attempt = 0;; attempt++) {
        char cnt[16];
        snprintf(cnt, sizeof cnt, "%d", attempt);
        setenv("DPLAN_RESTART_COUNT", cnt, 1);
        clear_heartbeats(hbdir);
        /* Relaunches resume from the newest checkpoint of --ckpt-dir, or of the directory
         * the first launch resumed from while --ckpt-dir has none. */
        const char *resume = NULL;
        struct dp_ckpt_info ci;
        bool have = false;
        if (attempt > 0) {
            if ((have = newest_ckpt(k->dir, &ci)))
                resume = k->dir;
            else if (k->resume && (have = newest_ckpt(k->resume_dir, &ci)))
                resume = k->resume_dir;
        }
        int na = 0;
        char **args = child_args(k, argc, argv, resume, &na);
        const char **av = NULL;
        const char *self_av[2] = {cli_run_self_exe(), NULL};
        if (args && world > 1) {
            av = cli_run_mpirun_argv(world, na, args);
        } else if (args) {
            av = calloc((size_t)na + 2, sizeof *av);
            if (av) {
                av[0] = self_av[0];
                for (int i = 0; i < na; i++)
                    av[i + 1] = args[i];
            }
        }
        if (!av) {
            free(args);
            fprintf(stderr, "dplan: error: out of memory\n");
            break;
        }
        struct failure f;
        int rc = run_once(k, world, hbdir, (char **)av, &f);
        free(av);
        free(args);
        if (rc == 0) {
            if (attempt > 0)
                fprintf(stderr, "dplan run: finished after %d restart%s\n", attempt,
                        attempt == 1 ? "" : "s");
            result = 0;
            break;
        }
        if (got_signal) {
            fprintf(stderr, "dplan run: interrupted; not restarting\n");
            result = 130;
            break;
        }
        bool again = f.restartable && attempt < k->max_restarts;
        cJSON *o = sup_record("failed", world);
        if (f.rank >= 0)
            cJSON_AddNumberToObject(o, "rank", f.rank);
        if (f.step >= 0)
            cJSON_AddNumberToObject(o, "step", f.step);
        cJSON_AddStringToObject(o, "reason", f.hang ? "hang" : f.sig > 0 ? "signal" : "exit");
        cJSON_AddStringToObject(o, "error", f.reason);
        if (f.ranks[0])
            cJSON_AddStringToObject(o, "ranks", f.ranks); /* rank:step+beats(last activity) */
        cJSON_AddNumberToObject(o, "attempt", attempt);
        cJSON_AddNumberToObject(o, "max_restarts", k->max_restarts);
        cJSON_AddBoolToObject(o, "will_restart", again);
        struct dp_ckpt_info last;
        bool have_last = newest_ckpt(k->dir, &last);
        if (have_last)
            cJSON_AddStringToObject(o, "checkpoint_saved_at", last.saved_at);
        log_record(log_path, o);
        if (!again) {
            if (f.restartable)
                fprintf(stderr,
                        "dplan: error: giving up after %d restart%s: rank %d, step %d: %s\n",
                        attempt, attempt == 1 ? "" : "s", f.rank, f.step, f.reason);
            else
                fprintf(stderr, "dplan: error: not restarting: %s\n", f.reason);
            break;
        }
        int backoff = attempt < 5 ? 1 << attempt : 30;
        backoff = backoff > 30 ? 30 : backoff;
        o = sup_record("restarting", world);
        cJSON_AddNumberToObject(o, "restart", attempt + 1);
        cJSON_AddNumberToObject(o, "max_restarts", k->max_restarts);
        cJSON_AddNumberToObject(o, "backoff_s", backoff);
        if (have_last) {
            cJSON_AddStringToObject(o, "resume_from", last.path);
            cJSON_AddNumberToObject(o, "resume_step", last.step);
            cJSON_AddStringToObject(o, "checkpoint_saved_at", last.saved_at);
        } else {
            cJSON_AddNullToObject(o, "resume_from");
            cJSON_AddNumberToObject(o, "resume_step", 0);
        }
        log_record(log_path, o);
        fprintf(stderr,
                "dplan run: rank %d failed at step %d (%s); restart %d of %d in %d s from %s\n",
                f.rank, f.step, f.reason, attempt + 1, k->max_restarts, backoff,
                have_last ? last.path : "the start (no checkpoint yet)");
        fflush(stderr);
        for (double t0 = mono_s(); mono_s() - t0 < backoff && !got_signal;) {
            struct timespec ts = {0, 100000000};
            nanosleep(&ts, NULL);
        }
        if (got_signal) {
            result = 130;
            break;
        }
    }
    clear_heartbeats(hbdir);
    rmdir(hbdir);
    return result;
}
