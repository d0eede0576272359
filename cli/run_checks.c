/*
 * dplan run: its outputs against its inputs, before any rank starts
 * (run.h). A run rerunning OUT/plan.json into the same OUT, or logging into
 * its own token file, would destroy its input; --out or --ckpt-dir inside a
 * step_N checkpoint would make it look damaged.
 */
#include "run.h"

#include <stdio.h>
#include <sys/stat.h>

int cli_run_check_outputs(const struct cli_run *r, struct dp_err *err)
{
    struct stat st;
    struct dp_io in[2];
    int nin = 0;
    if (stat(r->target, &st) == 0 && S_ISREG(st.st_mode))
        in[nin++] = (struct dp_io){r->target, r->plan ? "the plan" : "the model"};
    if (r->data)
        in[nin++] = (struct dp_io){r->data, "--data"};
    int rc = dp_output_check(r->out_dir, "--out", NULL, 0, err);
    if (!rc && r->ck.dir)
        rc = dp_output_check(r->ck.dir, "--ckpt-dir", NULL, 0, err);
    static const char *const files[] = {"model.safetensors", "summary.json", "plan.json"};
    char path[4352];
    for (size_t i = 0; !rc && i < sizeof files / sizeof files[0]; i++) {
        snprintf(path, sizeof path, "%s/%s", r->out_dir, files[i]);
        rc = dp_output_check(path, "--out", in, nin, err);
    }
    const char *what = r->log ? "--log" : "--out";
    if (!rc)
        rc = dp_output_check(r->log_path, what, in, nin, err);
    for (int k = 1; !rc && r->log_all && k < r->world; k++) {
        snprintf(path, sizeof path, "%s.rank%d", r->log_path, k);
        rc = dp_output_check(path, what, in, nin, err);
    }
    return rc;
}
