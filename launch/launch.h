/*
 * launch: the job of `dplan run`. It starts the ranks (mpirun, or this
 * program for one rank), passes their output through, watches them, tells
 * how they failed and, under a restart policy, relaunches the job from its
 * newest checkpoint. Inside each rank an agent thread writes the heartbeat
 * and ends a rank that stops making progress. Depends on ckpt (to find the
 * checkpoint to resume) and core; it never trains and never prints: the CLI
 * gets events and renders them.
 *
 * This header is the one definition of the rank protocol, the contract
 * between the process a user starts and the ranks it starts: the
 * environment variables, the exit codes and the heartbeat record
 * (docs/rank-protocol.md says the same for users).
 */
#ifndef DPLAN_LAUNCH_H
#define DPLAN_LAUNCH_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "core/core.h"

/* ------------------------------------------------------------------ environment */

/* Set by the runner for the ranks it starts. */
#define DP_ENV_LAUNCHER      "DPLAN_LAUNCHER"      /* "1": a rank of dplan's runner */
#define DP_ENV_HEARTBEAT_DIR "DPLAN_HEARTBEAT_DIR" /* the agent writes DIR/rank_%05d */
#define DP_ENV_RESTART_COUNT "DPLAN_RESTART_COUNT" /* the attempt: 0, then 1, 2, ... */
#define DP_ENV_TTY           "DPLAN_TTY"           /* the user's stderr is a terminal */
/* Set by the user. */
#define DP_ENV_MPIRUN       "DPLAN_MPIRUN"       /* the mpirun to use [the build's] */
#define DP_ENV_NO_BLAS_HINT "DPLAN_NO_BLAS_HINT" /* do not set OPENBLAS_CORETYPE */
#define DP_ENV_FAULT_INJECT "DPLAN_FAULT_INJECT" /* TEST-ONLY, see "faults" below */

/* The variables the runner forwards to every rank (mpirun -x) when they are set: the
 * protocol's, the user's profile and corpus locations, the threads and BLAS kernels. */
extern const char *const dp_launch_forward_env[];

/* ------------------------------------------------------------------ exit codes */

enum dp_launch_exit {
    DP_EXIT_OK = 0,
    DP_EXIT_FAILED = 1,       /* an error, reported on stderr */
    DP_EXIT_USAGE = 2,        /* a bad command line */
    DP_EXIT_FAULT = 3,        /* TEST-ONLY: an injected "exit" fault */
    DP_EXIT_REPORTED = 64,    /* a rank of the runner: every rank saw this error, rank 0 said it */
    DP_EXIT_STALLED = 124,    /* a rank's agent saw no progress for --timeout */
    DP_EXIT_NOEXEC = 127,     /* mpirun (or this program) could not be started */
    DP_EXIT_SIGNAL = 128,     /* + N: ended by signal N (mpirun reports 137 for SIGKILL) */
    DP_EXIT_INTERRUPTED = 130 /* the runner was interrupted (SIGINT, SIGTERM) */
};

/* ------------------------------------------------------------------ heartbeat */

/*
 * One rank's heartbeat: DIR/rank_%05d holds one record of DP_HB_RECORD bytes at offset 0,
 * rewritten in place (pwrite) at most every 0.1 s while the counter moves and every
 * 0.5 s while it does not: "PID COUNT STEP STEP_BEATS LAST_NS WHAT", space-padded, ending
 * in a newline. COUNT is the executor's progress counter (one beat per completed
 * collective and micro-batch), STEP_BEATS the beats since STEP started, LAST_NS the
 * CLOCK_REALTIME nanoseconds of the last move, WHAT what the rank does ("forward").
 */
#define DP_HB_RECORD 160

struct dp_heartbeat {
    bool seen;
    int pid, step;
    unsigned long long count, step_beats;
    long long last_ns;
    char what[64];
};
/* "DIR/rank_%05d". */
void dp_launch_hb_path(char *buf, size_t cap, const char *dir, int rank);
/* The record for `h` (DP_HB_RECORD bytes, not NUL-terminated). */
void dp_launch_hb_format(const struct dp_heartbeat *h, char out[DP_HB_RECORD]);
/* Parse a record; false when it is not one. */
bool dp_launch_hb_parse(const char *rec, size_t n, struct dp_heartbeat *out);
/* Read DIR/rank_%05d of ranks [0, world) into h (seen = false where missing). */
void dp_launch_hb_read(const char *dir, struct dp_heartbeat *h, int world);
/*
 * The rank that hung: the one furthest behind, by step, then by beats within the step (a
 * rank stuck at the start of a step has none, while its peers beat before they block
 * waiting for it), then by when its counter last moved; ranks of different pipeline
 * stages beat differently, so this is a suspicion. -1 when no heartbeat was seen.
 */
int dp_launch_hb_suspect(const struct dp_heartbeat *h, int world);

/* ------------------------------------------------------------------ this rank */

/*
 * Where this process's rank came from, in the order checked (executor-notes Sec. 5):
 * OpenMPI (OMPI_COMM_WORLD_*), MPICH/Hydra (PMI_RANK/PMI_SIZE), Slurm srun
 * (SLURM_PROCID/SLURM_NTASKS with a step id), torchrun (RANK/WORLD_SIZE/LOCAL_RANK).
 * `launched` is false when none is present (started by hand).
 */
struct dp_rank_env {
    bool launched;
    char source[16]; /* "openmpi", "pmi", "slurm", "torchrun", "none" */
    int rank, world, local_rank, local_world;
};
void dp_launch_detect_env(struct dp_rank_env *out);
/* DPLAN_LAUNCHER: a rank of dplan's runner (never launches ranks of its own). */
bool dp_launch_is_rank(void);
/* DPLAN_RESTART_COUNT: the attempt this rank belongs to (0 = the first launch). */
int dp_launch_attempt(void);

/*
 * The agent: one thread in the rank that reads the executor's progress counter (`beat`)
 * every 5 ms, writes the heartbeat record when DPLAN_HEARTBEAT_DIR is set, and, with
 * `enforce`, ends the rank with DP_EXIT_STALLED when the counter has not moved for
 * hang_timeout_s (--timeout; at least 60 s before the first step: start-up and checkpoint loading),
 * after calling on_stall (which may print; it runs on the agent's thread, so it must not
 * call MPI). Library calls of the rank are never made from the agent.
 */
struct dp_agent_opts {
    int rank;
    double hang_timeout_s;
    bool enforce;
    uint64_t (*beat)(const char **what, int *step);
    void (*on_stall)(int rank, double seconds, int step, const char *what);
};
/* Start the agent (a no-op when it has nothing to do). Returns 0, or a negative status
 * with err set when the heartbeat file cannot be created (the rank may go on). */
int dp_launch_agent_start(const struct dp_agent_opts *o, struct dp_err *err);
/* At the start of each step: the record is written at once, so the step a rank dies in
 * is exact, and the step's beats count from here. */
void dp_launch_agent_step(void);
void dp_launch_agent_stop(void);

/* ------------------------------------------------------------------ the job */

struct dp_launch_job {
    int world; /* ranks: mpirun -np (1: this program alone) */
    int argc;  /* dplan's arguments, argv[0] = "run" */
    char **argv;
    const char *hostfile;      /* mpirun --hostfile, or NULL (this machine) */
    int ranks_per_node;        /* with a hostfile: --map-by ppr:K:node (0: mpirun's default) */
    const char *heartbeat_dir; /* created by the runner; DPLAN_HEARTBEAT_DIR of the ranks */
    const char *rank_env;      /* "NAME=VALUE" the ranks start with (the backend's), or NULL */
    FILE *out, *err;           /* where the ranks' stdout and stderr pass through */
};

/* How an attempt failed. */
enum dp_launch_reason {
    DP_FAIL_EXIT = 0, /* a rank exited non-zero */
    DP_FAIL_SIGNAL,   /* a rank was killed by a signal */
    DP_FAIL_HANG,     /* a rank's agent saw no progress (the suspect is named) */
    DP_FAIL_REPORTED, /* an error every rank saw, already reported: restarting would not help */
    DP_FAIL_LAUNCH,   /* mpirun could not start or ran no rank */
};
struct dp_launch_failure {
    enum dp_launch_reason reason;
    int rank, step; /* -1 when unknown */
    int code, sig;  /* the rank's exit status or signal (-1: unknown) */
    int status;     /* the launcher's exit status */
    bool restartable;
    char what[256];  /* "exit status 3", "killed by signal 9 (Killed)", "no progress ..." */
    char ranks[512]; /* hang: "RANK:STEP+BEATS(WHAT)" of every rank */
};

/* The mpirun command line the runner uses (malloc'ed, NULL-terminated; *n its length):
 * --allow-run-as-root as root, --oversubscribe and yielding waits when world exceeds this
 * machine's cores, --bind-to none (OpenMP threads), -x for each forwarded variable. The
 * caller sets the environment (dp_launch_setenv) before running it. */
const char **dp_launch_mpirun_argv(const struct dp_launch_job *job, int *n);
/* The environment the ranks get: the protocol's variables, job->rank_env (unless
 * DPLAN_NO_BLAS_HINT), DPLAN_TTY when `tty`. */
void dp_launch_setenv(const struct dp_launch_job *job, int attempt, bool tty);
/* This program's path (/proc/self/exe). */
const char *dp_launch_self_exe(void);
/* One process, no runner: re-execute once with job->rank_env set when it is not (the
 * BLAS library reads it only at load time); returns when there is nothing to do. */
void dp_launch_reexec(int argc, char **argv, const char *rank_env);
/* Parse one line of mpirun's report for the failed rank and its status (-1 when not
 * seen): "Process name: [[job,1],RANK] ... Exit code: N", "process rank RANK with PID
 * ... exited on signal N" (Open MPI 4.1). */
void dp_launch_scan_line(const char *line, int *rank, int *code, int *sig);

/*
 * Run the job once and watch it until every rank is gone: output passes through (the
 * stdout stream is left at a line start before returning), mpirun's report names the
 * failed rank, the heartbeats give the step and, for a stall, the rank that hung; ranks
 * left behind are killed (only this job's: their environment holds its heartbeat
 * directory). SIGINT and SIGTERM are forwarded to the job and end it. Returns 0 when the
 * job finished, 1 when it failed (*f says how), DP_EXIT_INTERRUPTED when interrupted.
 */
int dp_launch_run(const struct dp_launch_job *job, int attempt, struct dp_launch_failure *f);

/* ------------------------------------------------------------------ restarts */

/* torchrun's model (executor-notes Sec. 4): any failure ends the whole job and every rank
 * is relaunched, here from the newest checkpoint (Open MPI has no ULFM, so a job cannot
 * shrink or repair itself in place). Errors every rank reported alike (a bad plan, a NaN
 * loss) are not restarted: they would fail again. */
struct dp_launch_policy {
    int max_restarts;       /* 0: run once */
    const char *ckpt_dir;   /* relaunches resume from its newest checkpoint */
    const char *resume_dir; /* ... or from this one's while ckpt_dir has none (NULL: none) */
};

enum dp_launch_event_kind {
    DP_LAUNCH_FAILED = 0, /* an attempt failed (f); will_restart says what follows */
    DP_LAUNCH_RESTARTING, /* the next attempt starts after backoff_s, from resume (NULL: start) */
    DP_LAUNCH_FINISHED,   /* the job finished (attempt: the restarts it took) */
    DP_LAUNCH_INTERRUPTED,
};
struct dp_launch_event {
    enum dp_launch_event_kind kind;
    int attempt, max_restarts;
    const struct dp_launch_failure *f;
    bool will_restart;
    int backoff_s;
    const char *resume_path; /* RESTARTING: the checkpoint, NULL = from the start */
    int resume_step;
    const char *saved_at; /* the newest checkpoint's save time ("" = none) */
};

/* Seconds to wait before restart `attempt + 1`: 1, 2, 4, ..., at most 30. */
int dp_launch_backoff_s(int attempt);
/* The arguments of a relaunch: argv without --resume [DIR], plus --resume=DIR when
 * resume is not NULL (malloc'ed; *n its length). `resume_dir` is the DIR the user's
 * --resume consumed, if any. */
char **dp_launch_resume_args(int argc, char **argv, const char *resume_dir, const char *resume,
                             int *n);
/*
 * Run the job under `pol` (one attempt with max_restarts 0), reporting to on_event, and
 * return the exit code: 0 finished, 1 failed (restarts exhausted, or an error every rank
 * reported), DP_EXIT_INTERRUPTED. The heartbeat directory is created first and removed
 * at the end; user_resume_dir is the DIR of the user's own --resume (or NULL).
 */
int dp_launch_supervise(const struct dp_launch_job *job, const struct dp_launch_policy *pol,
                        const char *user_resume_dir,
                        void (*on_event)(const struct dp_launch_event *ev, void *ctx), void *ctx,
                        struct dp_err *err);

/* ------------------------------------------------------------------ faults (TEST-ONLY) */

/*
 * DPLAN_FAULT_INJECT=RANK:STEP:MODE[:ATTEMPT] makes rank RANK, at the start of step STEP of
 * launch ATTEMPT (0, the first, by default; "*": every launch), exit with DP_EXIT_FAULT
 * ("exit"), kill itself with SIGKILL ("kill") or stop forever ("hang"); "ckpt-crash" and
 * "enospc" make its checkpoint file of that step fail halfway (a SIGKILL, or ENOSPC).
 * Compiled only with -DDPLAN_FAULT_INJECTION=ON (the default when tests are built): a
 * build without it ignores the variable.
 */
enum dp_fault_mode {
    DP_FAULT_NONE = 0,
    DP_FAULT_EXIT,
    DP_FAULT_KILL,
    DP_FAULT_HANG,
    DP_FAULT_CKPT_CRASH,
    DP_FAULT_ENOSPC
};
struct dp_fault {
    enum dp_fault_mode mode;
    int rank, step;
};
#ifdef DPLAN_FAULT_INJECTION
/* The fault of this launch (mode NONE when none or another attempt's); a malformed value
 * is DP_EINVAL with err saying what is expected. */
int dp_launch_fault_get(int attempt, struct dp_fault *out, struct dp_err *err);
/* At the start of `step` on `rank`: fire exit, kill or hang when they are this one's. */
void dp_launch_fault_before_step(const struct dp_fault *f, int step, int rank);
#else
static inline int dp_launch_fault_get(int attempt, struct dp_fault *out, struct dp_err *err)
{
    (void)attempt, (void)err;
    out->mode = DP_FAULT_NONE;
    out->rank = out->step = -1;
    return 0;
}
static inline void dp_launch_fault_before_step(const struct dp_fault *f, int step, int rank)
{
    (void)f, (void)step, (void)rank;
}
#endif

#endif
