/*
 * What `dplan run` checks before any rank trains (run_checks.c): that none of
 * its outputs would overwrite one of its inputs or land inside a checkpoint.
 * The data and memory checks are the executor's (dp_tokens_check, and the
 * memory check of dp_exec_run), since ranks started by an external launcher
 * need them too.
 */
#ifndef DPLAN_CLI_RUN_CHECKS_H
#define DPLAN_CLI_RUN_CHECKS_H

#include <stdbool.h>

#include "core/core.h"

struct cli_run_io {
    const char *target; /* the PLAN.json or MODEL argument */
    bool target_is_plan;
    const char *data;     /* --data, or NULL (the default corpus) */
    const char *out;      /* --out directory */
    const char *log;      /* the log file: --log, or OUT/log.jsonl */
    bool log_given;       /* --log was given */
    const char *ckpt_dir; /* --ckpt-dir, or NULL */
    int world;            /* ranks (for FILE.rankR logs) */
    bool log_all;         /* --log-all-ranks */
};

/*
 * Refuse (DP_EINVAL, err set) when an output is an input (OUT/model.safetensors,
 * OUT/summary.json, OUT/plan.json and the logs against the plan or model file and
 * --data, by device and inode), or when --out or --ckpt-dir is or lies inside a
 * checkpoint directory (dp_output_check).
 */
int cli_run_check_outputs(const struct cli_run_io *io, struct dp_err *err);

#endif
