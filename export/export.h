/*
 * export: a plan (plan.json) turned into what people run it with: Megatron-LM
 * arguments, a DeepSpeed config and launcher, a torchtitan recipe function
 * and its command-line overrides, and torchrun, mpirun or Slurm launch
 * scripts with the rank-to-host map. Pure: plan in, text out, into a struct
 * dp_buf; no files, no printing. Depends on core only.
 *
 * Every option name comes from the framework's own source at the version the
 * output names (each table entry cites its file). A knob the framework cannot
 * express is an error naming the knob and the framework (DP_EUSAGE: exit 2), never
 * a silent omission.
 */
#ifndef DPLAN_EXPORT_H
#define DPLAN_EXPORT_H

#include "core/core.h"

enum dp_export_format {
    DP_EXPORT_MEGATRON = 0,
    DP_EXPORT_DEEPSPEED,
    DP_EXPORT_DEEPSPEED_JSON, /* the DeepSpeed config alone, for `> ds_config.json` */
    DP_EXPORT_TORCHTITAN,
    DP_EXPORT_TORCHRUN,
    DP_EXPORT_MPIRUN,
    DP_EXPORT_SLURM,
    DP_EXPORT_FORMATS
};

/* "megatron", "deepspeed", ...; NULL for an out-of-range value. */
const char *dp_export_format_name(enum dp_export_format f);
/* One line describing the format, for --help. */
const char *dp_export_format_help(enum dp_export_format f);
/* 0 and *out, or DP_EUSAGE naming the formats. */
int dp_export_format_parse(const char *name, enum dp_export_format *out, struct dp_err *err);

struct dp_export_opts {
    const char *plan_file; /* named in messages ("plan.json: layout.cp: ..."); NULL: "plan" */
    /* The command each rank runs (launch formats, DeepSpeed's launcher); NULL: "train.py".
     * torchrun and deepspeed take a Python script and its arguments; mpirun and srun
     * run it with "python" unless it does not end in ".py" before the arguments. */
    const char *program;
    const char *host_prefix; /* hosts are PREFIX0 .. PREFIX(N-1); NULL: "node" */
    int port;                /* rendezvous port; 0: 29500 (torchrun's default) */
};
void dp_export_opts_default(struct dp_export_opts *o);

/*
 * Write plan `p` as format `f` into `out` (appended). Returns 0, or a negative
 * status with err naming the knob (e.g. "plan.json: layout.cp: cp=2 has no
 * DeepSpeed equivalent ...") when the framework cannot express the plan, or
 * DP_EINVAL when the format needs what the plan lacks (the launchers need the
 * cluster). On failure `out` holds partial text: discard it.
 */
int dp_export(const struct dp_plan *p, enum dp_export_format f, const struct dp_export_opts *o,
              struct dp_buf *out, struct dp_err *err);

#endif
