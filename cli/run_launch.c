/*
 * `dplan run` started by hand with several ranks: build the mpirun command
 * line, run it, pass its output through, and when a rank fails say which
 * one. Open MPI 4.1 behaviour this relies on (executor-notes Sec. 4-6): as
 * root mpirun needs --allow-run-as-root; more ranks than cores need
 * --oversubscribe; ranks are bound to cores unless --bind-to none (which
 * OpenMP threads need); a rank exiting non-zero makes mpirun kill the others
 * and report "Process name: [[job,1],RANK] ... Exit code: N", a rank killed
 * by a signal "process rank RANK with PID ... exited on signal N".
 */
#include "run_launch.h"
#include "cli.h"
#include "executor/ckpt.h"
#include "executor/executor.h"
#include "run_ckpt.h"

#include <cjson/cJSON.h>

#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef DPLAN_MPIEXEC
#define DPLAN_MPIEXEC "mpirun"
#endif

static int cores(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

const char *cli_run_self_exe(void)
{
    static char buf[4096];
    ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
    if (n <= 0)
        return "dplan";
    buf[n] = '\0';
    return buf;
}

void cli_run_reexec_for_blas(int argc, char **argv)
{
    const char *hint = dp_exec_blas_hint();
    if (!hint || getenv("DPLAN_NO_BLAS_HINT"))
        return;
    setenv("OPENBLAS_CORETYPE", hint, 1);
    char **av = calloc((size_t)argc + 2, sizeof *av);
    if (!av)
        return;
    av[0] = "dplan";
    for (int i = 0; i < argc; i++)
        av[i + 1] = argv[i];
    execv(cli_run_self_exe(), av);
    free(av); /* exec failed: carry on with the kernels we have */
}

/* Parse one line of mpirun's report for the failed rank and its status. */
void cli_run_scan_line(const char *line, int *rank, int *code, int *sig)
{
    const char *p;
    if ((p = strstr(line, "Process name: [[")) && *rank < 0) {
        const char *q = strstr(p, "],");
        if (q)
            *rank = atoi(q + 2);
    } else if ((p = strstr(line, "Exit code:")) && *code < 0) {
        *code = atoi(p + 10);
    } else if ((p = strstr(line, "process rank ")) && *rank < 0) {
        *rank = atoi(p + 13);
        const char *s = strstr(line, "on signal ");
        if (s)
            *sig = atoi(s + 10);
    }
}

const char **cli_run_mpirun_argv(int np, int argc, char **argv)
{
    static char npbuf[32], thr[32];
    snprintf(npbuf, sizeof npbuf, "%d", np);
    if (!getenv("OMP_NUM_THREADS")) {
        int t = cores() / np;
        snprintf(thr, sizeof thr, "%d", t < 1 ? 1 : t);
        setenv("OMP_NUM_THREADS", thr, 1);
    }
    const char *hint = dp_exec_blas_hint();
    if (hint && !getenv("DPLAN_NO_BLAS_HINT"))
        setenv("OPENBLAS_CORETYPE", hint, 1);
    if (isatty(2))
        setenv("DPLAN_TTY", "1", 1);
    setenv("DPLAN_LAUNCHER", "1", 1);

    const char *mpirun = getenv("DPLAN_MPIRUN") ? getenv("DPLAN_MPIRUN") : DPLAN_MPIEXEC;
    const char **av = calloc((size_t)argc + 40, sizeof *av);
    if (!av)
        return NULL;
    int n = 0;
    av[n++] = mpirun;
    av[n++] = "-np";
    av[n++] = npbuf;
    if (getuid() == 0)
        av[n++] = "--allow-run-as-root";
    if (np > cores()) {
        av[n++] = "--oversubscribe";
        /* Waiting ranks yield the core instead of spinning on it. */
        av[n++] = "--mca";
        av[n++] = "mpi_yield_when_idle";
        av[n++] = "1";
    }
    av[n++] = "--bind-to";
    av[n++] = "none";
    static const char *const fwd[] = {
        "OMP_NUM_THREADS",     "OPENBLAS_CORETYPE",  "DPLAN_PROFILES",       "DPLAN_TTY",
        "DPLAN_LAUNCHER",      "DPLAN_FAULT_INJECT", "DPLAN_DEFAULT_CORPUS", "DPLAN_SUPERVISED",
        "DPLAN_HEARTBEAT_DIR", "DPLAN_RESTART_COUNT"};
    for (size_t i = 0; i < sizeof fwd / sizeof fwd[0]; i++)
        if (getenv(fwd[i])) {
            av[n++] = "-x";
            av[n++] = fwd[i];
        }
    av[n++] = cli_run_self_exe();
    for (int i = 0; i < argc; i++) /* argv[0] is "run" */
        av[n++] = argv[i];
    av[n] = NULL;
    return av;
}

/* The last line of `path` parsed as JSON (NULL if none). */
static cJSON *last_record(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    char line[65536], last[65536] = "";
    while (fgets(line, sizeof line, f))
        if (line[0] == '{')
            snprintf(last, sizeof last, "%s", line);
    fclose(f);
    return last[0] ? cJSON_Parse(last) : NULL;
}

/* How to go on after the job failed: from the newest checkpoint, or from the start. */
static void resume_hint(const char *ckpt_dir, char *buf, size_t cap)
{
    struct dp_ckpt_info *list = NULL, *best = NULL;
    int n = 0;
    struct dp_err e = {0};
    if (ckpt_dir && !dp_ckpt_list(ckpt_dir, false, &list, &n, &e))
        for (int i = 0; i < n; i++)
            if (list[i].state == DP_CKPT_OK)
                best = &list[i];
    if (best)
        snprintf(buf, cap,
                 "continue from its newest checkpoint (step %d) by running the same command "
                 "with --resume %s",
                 best->step, ckpt_dir);
    else if (ckpt_dir)
        snprintf(buf, cap,
                 "no checkpoint was saved in %s before the failure: run it again from the start "
                 "(--max-restarts N relaunches a failed job by itself)",
                 ckpt_dir);
    else
        snprintf(buf, cap,
                 "no --ckpt-dir: run it again from the start; with --ckpt-dir DIR --ckpt-every N "
                 "a failed run can go on with --resume DIR");
    free(list);
}

/*
 * The job failed in a way no rank could log (a rank died or hung): end the log with a
 * "failed" record (the supervisor's fields, "source": "launcher") unless its last record
 * already says how the run ended; a line a killed rank left unfinished is ended first.
 */
static void log_failure(const struct cli_run_end *end, int np, int rank, const char *reason,
                        const char *error, const char *hint)
{
    if (!end || !end->log_path)
        return;
    cJSON *last = last_record(end->log_path);
    const cJSON *st = cJSON_GetObjectItemCaseSensitive(last, "status");
    const cJSON *step = cJSON_GetObjectItemCaseSensitive(last, "step");
    bool said = cJSON_IsString(st) && !strcmp(st->valuestring, "failed");
    double last_step = cJSON_IsNumber(step) ? step->valuedouble : 0;
    cJSON_Delete(last);
    if (said)
        return;
    FILE *f = fopen(end->log_path, "a+");
    if (!f)
        return;
    if (fseek(f, -1, SEEK_END) == 0 && fgetc(f) != '\n') {
        fseek(f, 0, SEEK_END);
        fputc('\n', f);
    }
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "source", "launcher");
    cJSON_AddNumberToObject(o, "world_size", np);
    cJSON_AddStringToObject(o, "backend", "cpu");
    cJSON_AddStringToObject(o, "status", "failed");
    if (rank >= 0)
        cJSON_AddNumberToObject(o, "rank", rank);
    cJSON_AddNumberToObject(o, "last_step", last_step);
    cJSON_AddStringToObject(o, "reason", reason);
    cJSON_AddStringToObject(o, "error", error);
    cJSON_AddStringToObject(o, "hint", hint);
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    if (s)
        fprintf(f, "%s\n", s);
    free(s);
    fclose(f);
}

int cli_run_launch(int np, int argc, char **argv, const struct cli_run_end *end)
{
    const char **av = cli_run_mpirun_argv(np, argc, argv);
    if (!av)
        return 1;
    const char *mpirun = av[0];

    int pfd[2];
    if (pipe(pfd)) {
        fprintf(stderr, "dplan: error: pipe: %s\n", strerror(errno));
        free(av);
        return 1;
    }
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) {
        fprintf(stderr, "dplan: error: fork: %s\n", strerror(errno));
        free(av);
        return 1;
    }
    if (pid == 0) {
        close(pfd[0]);
        dup2(pfd[1], 2);
        close(pfd[1]);
        execvp(mpirun, (char *const *)av);
        fprintf(stderr,
                "dplan: error: cannot run %s: %s (install openmpi-bin, or set "
                "DPLAN_MPIRUN)\n",
                mpirun, strerror(errno));
        _exit(127);
    }
    close(pfd[1]);
    free(av);
    /* Ctrl-C reaches mpirun through the process group; wait for its report. */
    signal(SIGINT, SIG_IGN);
    FILE *in = fdopen(pfd[0], "r");
    int rank = -1, code = -1, sig = -1;
    char line[4096];
    while (in && fgets(line, sizeof line, in)) {
        fputs(line, stderr);
        fflush(stderr);
        cli_run_scan_line(line, &rank, &code, &sig);
    }
    if (in)
        fclose(in);
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    signal(SIGINT, SIG_DFL);
    int rc = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    if (rc == 0)
        return 0;
    if (rc == 127 || code == CLI_EXIT_REPORTED)
        return 1; /* already said (and logged by rank 0) */
    char msg[512], hint[512];
    const char *reason = "exit";
    if (code == CLI_EXIT_STALLED) {
        reason = "stalled";
        snprintf(msg, sizeof msg,
                 "the job stalled: rank %d saw no progress for the --timeout (a rank hung; see "
                 "the messages above)",
                 rank);
    } else if (rank >= 0 && sig > 0) {
        reason = "signal";
        snprintf(msg, sizeof msg, "rank %d was killed by signal %d; mpirun stopped the other ranks",
                 rank, sig);
    } else if (rank >= 0) {
        snprintf(msg, sizeof msg,
                 "rank %d failed with exit status %d; mpirun stopped the other ranks", rank,
                 code >= 0 ? code : rc);
    } else {
        snprintf(msg, sizeof msg, "the ranks failed (mpirun exit status %d)", rc);
    }
    resume_hint(end ? end->ckpt_dir : NULL, hint, sizeof hint);
    log_failure(end, np, rank, reason, msg, hint);
    fprintf(stderr, "dplan: error: %s; %s\n", msg, hint);
    return 1;
}
