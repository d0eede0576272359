/*
 * The CPU executor's predicted step time: this machine probed
 * (executor/probe.h), described as a device profile, and handed to the
 * step-time model like any GPU.
 */
#ifndef DPLAN_CLI_RUN_PREDICT_H
#define DPLAN_CLI_RUN_PREDICT_H

#include "core/core.h"

/* Predict one step of `l` for `m` on `world` CPU ranks of this machine, each using
 * `threads` compute threads. Fills *step_s; fails only if the probe fails. */
int cli_run_predict_cpu(const struct dp_model *m, const struct dp_layout *l, int world, int threads,
                        double *step_s, struct dp_err *err);

#endif
