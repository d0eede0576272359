/*
 * Launching the ranks of `dplan run` (run_launch.c).
 */
#ifndef DPLAN_CLI_RUN_LAUNCH_H
#define DPLAN_CLI_RUN_LAUNCH_H

/* Where the launcher records a failure the ranks could not: the JSON log, and the
 * checkpoints a hint to --resume points at (NULL: none). */
struct cli_run_end {
    const char *log_path;
    const char *ckpt_dir;
};

/*
 * Re-execute `dplan run <argv[1..]>` as `np` ranks under mpirun and wait:
 * --allow-run-as-root as root, --oversubscribe (and yielding MPI waits) when np
 * exceeds the cores, --bind-to none, OMP_NUM_THREADS = cores / np unless set, the
 * OpenBLAS core type when dp_exec_blas_hint says so. mpirun's output passes through;
 * when a rank fails, one closing line names it and says how to go on (--resume from
 * the newest checkpoint of end->ckpt_dir, or from the start), and unless rank 0 logged
 * the failure itself, a "failed" record with that hint ends end->log_path. Returns the
 * exit code (0, or 1).
 */
int cli_run_launch(int np, int argc, char **argv, const struct cli_run_end *end);

/* cli_run_launch's pieces, for the restart supervisor (run_supervise.c): the mpirun
 * command line (malloc'ed, NULL-terminated; the environment is set as above), the
 * parser of mpirun's failure report (rank, exit code, signal; -1 when not seen) and
 * this program's path. */
const char **cli_run_mpirun_argv(int np, int argc, char **argv);
void cli_run_scan_line(const char *line, int *rank, int *code, int *sig);
const char *cli_run_self_exe(void);

/* Single process: re-execute once with OPENBLAS_CORETYPE set when dp_exec_blas_hint
 * asks for it (OpenBLAS reads it only at load time); returns when nothing to do. */
void cli_run_reexec_for_blas(int argc, char **argv);

#endif
