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
#include "executor/executor.h"
#include "run_ckpt.h"

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

int cli_run_launch(int np, int argc, char **argv)
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
        return 1; /* already said */
    if (code == CLI_EXIT_STALLED)
        fprintf(stderr,
                "dplan: error: the job stalled: rank %d saw no progress for the --timeout "
                "(a rank hung; see the messages above)\n",
                rank);
    else if (rank >= 0 && sig > 0)
        fprintf(stderr,
                "dplan: error: rank %d was killed by signal %d; mpirun stopped the "
                "other ranks\n",
                rank, sig);
    else if (rank >= 0)
        fprintf(stderr,
                "dplan: error: rank %d failed with exit status %d; mpirun stopped the "
                "other ranks\n",
                rank, code >= 0 ? code : rc);
    else
        fprintf(stderr, "dplan: error: the ranks failed (mpirun exit status %d)\n", rc);
    return 1;
}
