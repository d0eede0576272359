/*
 * dplan run: its outputs against its inputs, before any rank starts
 * (run_checks.h). A run rerunning OUT/plan.json into the same OUT, or logging
 * into its own token file, would destroy its input; --out or --ckpt-dir inside
 * a step_N checkpoint would make it look damaged.
 */
#include "run_checks.h"
#include "executor/executor.h"

#include <stdio.h>
#include <sys/stat.h>

int cli_run_check_outputs(const struct cli_run_io *io, struct dp_err *err)
{
    struct stat st;
    struct dp_io in[2];
    int nin = 0;
    if (stat(io->target, &st) == 0 && S_ISREG(st.st_mode))
        in[nin++] = (struct dp_io){io->target, io->target_is_plan ? "the plan" : "the model"};
    if (io->data)
        in[nin++] = (struct dp_io){io->data, "--data"};
    int rc = dp_output_check(io->out, "--out", NULL, 0, err);
    if (!rc && io->ckpt_dir)
        rc = dp_output_check(io->ckpt_dir, "--ckpt-dir", NULL, 0, err);
    static const char *const files[] = {"model.safetensors", "summary.json", "plan.json"};
    char path[4352];
    for (size_t i = 0; !rc && i < sizeof files / sizeof files[0]; i++) {
        snprintf(path, sizeof path, "%s/%s", io->out, files[i]);
        rc = dp_output_check(path, "--out", in, nin, err);
    }
    const char *what = io->log_given ? "--log" : "--out";
    if (!rc)
        rc = dp_output_check(io->log, what, in, nin, err);
    for (int r = 1; !rc && io->log_all && r < io->world; r++) {
        snprintf(path, sizeof path, "%s.rank%d", io->log, r);
        rc = dp_output_check(path, what, in, nin, err);
    }
    return rc;
}
