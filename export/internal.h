/*
 * export internals: the option tables every framework file is made of.
 *
 * A framework is two tables. Its checks refuse what it cannot express (one
 * function per knob, naming it). Its options map the plan to the framework's
 * names: one entry per option, {section, name, getter}, where the getter
 * returns 1 with the value to write, or 0 to leave the framework's default.
 * A new plan knob is one option entry (and, where a framework lacks it, one
 * check) in each framework file; the renderers never change.
 */
#ifndef DPLAN_EXPORT_INTERNAL_H
#define DPLAN_EXPORT_INTERNAL_H

#include "export.h"

struct dp__ctx {
    const struct dp_plan *p;
    const struct dp_model *m;
    const struct dp_layout *l;
    const struct dp_export_opts *o;
    const char *framework; /* for messages: "Megatron-LM" */
    struct dp_err *err;
};

enum dp__vkind {
    DP__INT,  /* 4 */
    DP__BOOL, /* true / True */
    DP__STR,  /* a string value: quoted where the target language needs it */
    DP__FLAG, /* a command-line switch without value (Megatron's store_true) */
    DP__CODE, /* target-language code written as is (torchtitan: FullAC.Config()) */
};

struct dp__val {
    enum dp__vkind kind;
    long long i;
    bool b;
    char s[256];
};

/* Getter helpers: fill v and return 1 (write it). */
int dp__int(struct dp__val *v, long long i);
int dp__bool(struct dp__val *v, bool b);
int dp__str(struct dp__val *v, const char *s);
int dp__flag(struct dp__val *v);
int dp__code(struct dp__val *v, const char *s);

struct dp__opt {
    const char *section; /* output group: Megatron's array, a JSON path prefix, ... */
    const char *name;    /* the framework's own name for the option */
    int (*get)(const struct dp__ctx *c, struct dp__val *v);
};

/* A check returns 0, or refuses through dp__refuse. */
typedef int (*dp__check_fn)(const struct dp__ctx *c);
int dp__run_checks(const struct dp__ctx *c, const dp__check_fn *checks, int n);

/*
 * Refuse the plan: "FILE: KNOB: WHAT" with the framework named by the caller's
 * text, e.g. dp__refuse(c, "layout.cp", "cp=%d has no %s equivalent: ...", ...).
 * Returns DP_EUSAGE (a usage error: exit 2).
 */
int dp__refuse(const struct dp__ctx *c, const char *knob, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Refuse a plan with multi-token prediction (layout mtp_layers), which only Megatron-Core
 * builds: `fw` names the format's framework, `why` what it does instead. */
int dp__refuse_mtp(const struct dp__ctx *c, const char *fw, const char *why);
/* A plan with FP8 attention (layout.fp8_attention) refused by an export that cannot write it. */
int dp__refuse_fp8_attention(const struct dp__ctx *c, const char *fw);
/* A DualPipeV plan (layout.pipeline_schedule) refused by an export without the schedule. */
int dp__refuse_dualpipev(const struct dp__ctx *c, const char *fw);

/* "# "-prefixed header lines shared by the formats: what the plan is. */
void dp__header(const struct dp__ctx *c, struct dp_buf *b, const char *comment);
/* The plan's cluster or a DP_EINVAL naming what is missing (launch formats need it). */
int dp__need_cluster(const struct dp__ctx *c, const char *format);

/* Append s quoted for a POSIX shell when it holds anything but [A-Za-z0-9_./:=,+-]. */
void dp__shell_word(struct dp_buf *b, const char *s);

/*
 * The rank-to-host map as "# " comment lines: the formula (Megatron's rank
 * order tp-cp-ep-dp-pp, TP fastest; torchtitan's device mesh [pp, dp_replicate,
 * dp_shard, cp, tp] and DeepSpeed's topology [pipe, data, model] order ranks
 * the same way), then one line per node with its ranks and the coordinates
 * they hold (the first and last 8 nodes when there are more than 32).
 */
void dp__rank_map(const struct dp__ctx *c, struct dp_buf *b);
/* The program with "python " in front when it is a .py script (mpirun, srun). */
void dp__program_cmd(const struct dp__ctx *c, char *out, size_t cap);

int dp__export_megatron(const struct dp__ctx *c, struct dp_buf *b);
int dp__export_deepspeed(const struct dp__ctx *c, struct dp_buf *b, bool json_only);
int dp__export_torchtitan(const struct dp__ctx *c, struct dp_buf *b);
int dp__export_launch(const struct dp__ctx *c, enum dp_export_format f, struct dp_buf *b);

#endif
