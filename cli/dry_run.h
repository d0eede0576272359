/*
 * `dplan run --dry-run`: what the job would run, printed without starting it.
 */
#ifndef DPLAN_CLI_DRY_RUN_H
#define DPLAN_CLI_DRY_RUN_H

#include "core/core.h"

/* After the rank map (cmd_run.c): each rank's groups, each stage's schedule and the
 * predicted memory per rank of `m` under `l` (already checked by dp_exec_check); 0, or 1
 * after printing an error. */
int cli_run_dry(const struct dp_model *m, const struct dp_layout *l, bool flash);

#endif
