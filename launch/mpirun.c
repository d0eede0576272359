/*
 * How the ranks are started (launch.h): mpirun's command line and the
 * environment the ranks get, this program's path, and the reading of
 * mpirun's failure report. Open MPI 4.1 behaviour this relies on
 * (executor-notes Sec. 4-6): as root mpirun needs --allow-run-as-root; more
 * ranks than cores need --oversubscribe; ranks are bound to cores unless
 * --bind-to none (which OpenMP threads need); a rank exiting non-zero makes
 * mpirun kill the others and report "Process name: [[job,1],RANK] ... Exit
 * code: N", a rank killed by a signal "process rank RANK with PID ... exited
 * on signal N".
 */
#include "launch.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifndef DPLAN_MPIEXEC
#define DPLAN_MPIEXEC "mpirun"
#endif

const char *const dp_launch_forward_env[] = {DP_ENV_LAUNCHER,        DP_ENV_HEARTBEAT_DIR,
                                             DP_ENV_RESTART_COUNT,   DP_ENV_TTY,
                                             DP_ENV_FAULT_INJECT,    "DPLAN_PROFILES",
                                             "DPLAN_DEFAULT_CORPUS", "OMP_NUM_THREADS",
                                             "OPENBLAS_CORETYPE",    NULL};

static int cores(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

const char *dp_launch_self_exe(void)
{
    static char buf[4096];
    ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
    if (n <= 0)
        return "dplan";
    buf[n] = '\0';
    return buf;
}

/* Set "NAME=VALUE"; false when `kv` is NULL or not of that form. */
static bool set_kv(const char *kv)
{
    const char *eq = kv ? strchr(kv, '=') : NULL;
    if (!eq || eq == kv)
        return false;
    char name[64];
    snprintf(name, sizeof name, "%.*s", (int)(eq - kv), kv);
    setenv(name, eq + 1, 1);
    return true;
}

void dp_launch_setenv(const struct dp_launch_job *job, int attempt, bool tty)
{
    char buf[16];
    snprintf(buf, sizeof buf, "%d", attempt);
    setenv(DP_ENV_LAUNCHER, "1", 1);
    setenv(DP_ENV_RESTART_COUNT, buf, 1);
    if (job->heartbeat_dir)
        setenv(DP_ENV_HEARTBEAT_DIR, job->heartbeat_dir, 1);
    if (tty)
        setenv(DP_ENV_TTY, "1", 1);
    if (!getenv(DP_ENV_NO_BLAS_HINT))
        set_kv(job->rank_env);
}

void dp_launch_reexec(int argc, char **argv, const char *rank_env)
{
    if (!rank_env || getenv(DP_ENV_NO_BLAS_HINT) || !set_kv(rank_env))
        return;
    char **av = calloc((size_t)argc + 2, sizeof *av);
    if (!av)
        return;
    av[0] = "dplan";
    for (int i = 0; i < argc; i++)
        av[i + 1] = argv[i];
    execv(dp_launch_self_exe(), av);
    free(av); /* exec failed: carry on with the kernels we have */
}

const char **dp_launch_mpirun_argv(const struct dp_launch_job *job, int *n)
{
    static char np[32], ppr[48];
    snprintf(np, sizeof np, "%d", job->world);
    const char *mpirun = getenv(DP_ENV_MPIRUN) ? getenv(DP_ENV_MPIRUN) : DPLAN_MPIEXEC;
    const char **av = calloc((size_t)job->argc + 48, sizeof *av);
    if (!av)
        return NULL;
    int k = 0;
    av[k++] = mpirun;
    av[k++] = "-np";
    av[k++] = np;
    if (getuid() == 0)
        av[k++] = "--allow-run-as-root";
    if (job->hostfile) {
        av[k++] = "--hostfile";
        av[k++] = job->hostfile;
        if (job->ranks_per_node > 0) {
            snprintf(ppr, sizeof ppr, "ppr:%d:node", job->ranks_per_node);
            av[k++] = "--map-by";
            av[k++] = ppr;
        }
    } else if (job->world > cores()) {
        av[k++] = "--oversubscribe";
        /* Waiting ranks yield the core instead of spinning on it. */
        av[k++] = "--mca";
        av[k++] = "mpi_yield_when_idle";
        av[k++] = "1";
    }
    av[k++] = "--bind-to";
    av[k++] = "none";
    for (int i = 0; dp_launch_forward_env[i]; i++)
        if (getenv(dp_launch_forward_env[i])) {
            av[k++] = "-x";
            av[k++] = dp_launch_forward_env[i];
        }
    av[k++] = dp_launch_self_exe();
    for (int i = 0; i < job->argc; i++)
        av[k++] = job->argv[i];
    av[k] = NULL;
    *n = k;
    return av;
}

void dp_launch_scan_line(const char *line, int *rank, int *code, int *sig)
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
