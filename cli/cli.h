/*
 * cli: main() and one file per subcommand. The only code that prints or exits.
 * Shared option parsing for cluster selection and plan knobs lives in common.c.
 */
#ifndef DPLAN_CLI_H
#define DPLAN_CLI_H

#include <getopt.h>
#include <stdio.h>

#include "core/core.h"

struct cJSON;
struct dp_calibration;

/* Exit status of estimate/memory --check-fit when the layout does not fit in memory. */
#define CLI_EXIT_NOFIT 3

/* --check-fit found the layout out of memory: one line on stderr, returns CLI_EXIT_NOFIT. */
int cli_no_fit(const char *cmd, const struct dp_model *m, const struct dp_cluster *cl,
               int64_t peak_bytes, int stage);
/* Print "dplan: error: <msg>" to stderr and return the exit code for `status`. */
int cli_fail(const struct dp_err *err);
/* Usage error: "dplan <cmd>: <msg>" plus a hint; returns 2. */
int cli_usage_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/*
 * With on, cli_fail and cli_usage_error also print {"error": MSG, "exit_code": N} on
 * stdout, so that a --json caller always gets JSON (main sets it when a command that
 * takes --json is given --json).
 */
void cli_set_json_errors(bool on);

/* Option ids for the shared options (values above any short-option char). */
enum {
    OPT_SYSTEM = 1000,
    OPT_NODES,
    OPT_GPU,
    OPT_GPUS,
    OPT_GPUS_PER_NODE,
    OPT_INTRA,
    OPT_NETWORK,
    OPT_CLUSTER,
    OPT_CAL_FILE,
    OPT_TP,
    OPT_PP,
    OPT_DP,
    OPT_CP,
    OPT_EP,
    OPT_VPP,
    OPT_MBS,
    OPT_GBS,
    OPT_SEQ_LEN,
    OPT_ZERO,
    OPT_RECOMPUTE,
    OPT_SP,
    OPT_PRECISION,
    OPT_GRAD_DTYPE,
    OPT_OPTIMIZER,
    OPT_NO_FLASH,
    OPT_NO_DP_OVERLAP,
    OPT_FIRST_LAYERS,
    OPT_LAST_LAYERS,
    OPT_STAGE_LAYERS,
    OPT_PIPELINE_LAYOUT,
    OPT_ACCOUNT_EMBEDDING,
    OPT_ACCOUNT_LOSS,
    OPT_FIRST_LESS,
    OPT_LAST_LESS,
    OPT_FP8_RECIPE,
    OPT_FP8_PARAMS,
    OPT_FP8_OUTPUT,
    OPT_FP8_ATTENTION,
    OPT_TP_OVERLAP,
    OPT_NO_TP_OVERLAP,
    OPT_OPG,
    OPT_NO_OPG,
    OPT_PP_OVERLAP,
    OPT_NO_PP_OVERLAP,
    OPT_OVERHEAD,
    OPT_MEMORY_MARGIN,
    OPT_JSON,
    OPT_PLAN,
    OPT_ETP,
    OPT_MOE_CAPACITY,
    OPT_MOE_PAD,
    OPT_MOE_IMBALANCE,
    OPT_MOE_DISPATCHER,
    OPT_MOE_ROUTING,
    OPT_EP_OVERLAP,
    OPT_FRAMEWORK,
    OPT_SHARD_GROUP,
    OPT_DP_SHARD,
    OPT_DIST_OPT_INSTANCES,
    OPT_MICS_SHARD,
    OPT_RECOMPUTE_METHOD,
    OPT_RECOMPUTE_LAYERS,
    OPT_RECOMPUTE_MODULES,
    OPT_LOSS,
    OPT_LOSS_CHUNKS,
    OPT_LOCAL_BATCH,
    OPT_MTP_LAYERS,
    OPT_PP_SCHEDULE,
    OPT_FSDP_PER_MICROBATCH,
    OPT_COMMON_END,
};

/* The long options for cluster selection and knobs; commands append their own. */
// clang-format off
#define CLI_CLUSTER_OPTIONS                                                                        \
    {"system", required_argument, 0, OPT_SYSTEM},                                                  \
    {"nodes", required_argument, 0, OPT_NODES},                                                    \
    {"gpu", required_argument, 0, OPT_GPU},                                                        \
    {"gpus", required_argument, 0, OPT_GPUS},                                                      \
    {"gpus-per-node", required_argument, 0, OPT_GPUS_PER_NODE},                                    \
    {"intra", required_argument, 0, OPT_INTRA},                                                    \
    {"network", required_argument, 0, OPT_NETWORK},                                                \
    {"cluster", required_argument, 0, OPT_CLUSTER},                                                \
    {"calibration", required_argument, 0, OPT_CAL_FILE}
/* --plan FILE: estimate and memory only (suggest and whatif search; they take no plan). */
#define CLI_PLAN_OPTION {"plan", required_argument, 0, OPT_PLAN}
// clang-format on

#define CLI_KNOB_OPTIONS                                                                           \
    {"tp", required_argument, 0, OPT_TP}, {"pp", required_argument, 0, OPT_PP},                    \
        {"dp", required_argument, 0, OPT_DP}, {"cp", required_argument, 0, OPT_CP},                \
        {"ep", required_argument, 0, OPT_EP}, {"vpp", required_argument, 0, OPT_VPP},              \
        {"mbs", required_argument, 0, OPT_MBS}, {"gbs", required_argument, 0, OPT_GBS},            \
        {"seq-len", required_argument, 0, OPT_SEQ_LEN}, {"zero", required_argument, 0, OPT_ZERO},  \
        {"recompute", required_argument, 0, OPT_RECOMPUTE}, {"sp", no_argument, 0, OPT_SP},        \
        {"precision", required_argument, 0, OPT_PRECISION},                                        \
        {"grad-dtype", required_argument, 0, OPT_GRAD_DTYPE},                                      \
        {"optimizer", required_argument, 0, OPT_OPTIMIZER},                                        \
        {"no-flash-attn", no_argument, 0, OPT_NO_FLASH},                                           \
        {"first-stage-layers", required_argument, 0, OPT_FIRST_LAYERS},                            \
        {"last-stage-layers", required_argument, 0, OPT_LAST_LAYERS},                              \
        {"decoder-first-pipeline-num-layers", required_argument, 0, OPT_FIRST_LAYERS},             \
        {"decoder-last-pipeline-num-layers", required_argument, 0, OPT_LAST_LAYERS},               \
        {"stage-layers", required_argument, 0, OPT_STAGE_LAYERS},                                  \
        {"pipeline-layout", required_argument, 0, OPT_PIPELINE_LAYOUT},                            \
        {"pipeline-model-parallel-layout", required_argument, 0, OPT_PIPELINE_LAYOUT},             \
        {"account-for-embedding-in-pipeline-split", no_argument, 0, OPT_ACCOUNT_EMBEDDING},        \
        {"account-for-loss-in-pipeline-split", no_argument, 0, OPT_ACCOUNT_LOSS},                  \
        {"first-stage-less-layers", required_argument, 0, OPT_FIRST_LESS},                         \
        {"last-stage-less-layers", required_argument, 0, OPT_LAST_LESS},                           \
        {"fp8-recipe", required_argument, 0, OPT_FP8_RECIPE},                                      \
        {"fp8-params", no_argument, 0, OPT_FP8_PARAMS},                                            \
        {"fp8-output-proj", no_argument, 0, OPT_FP8_OUTPUT},                                       \
        {"fp8-attention", no_argument, 0, OPT_FP8_ATTENTION},                                      \
        {"fp8-dot-product-attention", no_argument, 0, OPT_FP8_ATTENTION},                          \
        {"tp-overlap", no_argument, 0, OPT_TP_OVERLAP},                                            \
        {"no-tp-overlap", no_argument, 0, OPT_NO_TP_OVERLAP},                                      \
        {"overlap-param-gather", no_argument, 0, OPT_OPG},                                         \
        {"no-overlap-param-gather", no_argument, 0, OPT_NO_OPG},                                   \
        {"pp-overlap", no_argument, 0, OPT_PP_OVERLAP},                                            \
        {"no-pp-overlap", no_argument, 0, OPT_NO_PP_OVERLAP},                                      \
        {"etp", required_argument, 0, OPT_ETP},                                                    \
        {"moe-capacity", required_argument, 0, OPT_MOE_CAPACITY},                                  \
        {"moe-pad", no_argument, 0, OPT_MOE_PAD},                                                  \
        {"moe-imbalance", required_argument, 0, OPT_MOE_IMBALANCE},                                \
        {"moe-dispatcher", required_argument, 0, OPT_MOE_DISPATCHER},                              \
        {"moe-routing", required_argument, 0, OPT_MOE_ROUTING},                                    \
        {"ep-overlap", no_argument, 0, OPT_EP_OVERLAP},                                            \
        {"framework", required_argument, 0, OPT_FRAMEWORK},                                        \
        {"shard-group", required_argument, 0, OPT_SHARD_GROUP},                                    \
        {"data-parallel-shard-degree", required_argument, 0, OPT_DP_SHARD},                        \
        {"num-distributed-optimizer-instances", required_argument, 0, OPT_DIST_OPT_INSTANCES},     \
        {"mics-shard-size", required_argument, 0, OPT_MICS_SHARD},                                 \
        {"recompute-method", required_argument, 0, OPT_RECOMPUTE_METHOD},                          \
        {"recompute-layers", required_argument, 0, OPT_RECOMPUTE_LAYERS},                          \
        {"recompute-modules", required_argument, 0, OPT_RECOMPUTE_MODULES},                        \
        {"loss", required_argument, 0, OPT_LOSS},                                                  \
        {"loss-chunks", required_argument, 0, OPT_LOSS_CHUNKS},                                    \
        {"local-batch", required_argument, 0, OPT_LOCAL_BATCH},                                    \
        {"mtp-layers", required_argument, 0, OPT_MTP_LAYERS},                                      \
        {"mtp-num-layers", required_argument, 0, OPT_MTP_LAYERS},                                  \
        {"pipeline-schedule", required_argument, 0, OPT_PP_SCHEDULE},                              \
        {"fsdp-per-microbatch", no_argument, 0, OPT_FSDP_PER_MICROBATCH},                          \
        {"overhead-gib", required_argument, 0, OPT_OVERHEAD},                                      \
    {                                                                                              \
        "memory-margin", required_argument, 0, OPT_MEMORY_MARGIN                                   \
    }

/* What the user typed; unset values are 0 / NULL / -1 so defaults can be derived. */
/* --pipeline-schedule auto: the searches try 1F1B and DualPipeV (suggest, whatif). */
#define CLI_SCHEDULE_AUTO 2

struct cli_common {
    /* cluster */
    const char *system, *gpu, *intra, *network, *cluster, *plan;
    const char *calibration; /* --calibration: a `dplan calibrate` profile */
    int nodes, gpus, gpus_per_node;
    /* knobs */
    int tp, pp, dp, cp, ep, vpp, zero, first_layers, last_layers, etp;
    /* the pipeline split (at most one rule): --stage-layers, --pipeline-layout,
     * --first/last-stage-layers, --account-for-*, --first/last-stage-less-layers */
    const char *stage_layers, *pipeline_layout;
    bool account_embedding, account_loss;
    int first_less, last_less; /* -1 = unset */
    long long mbs, gbs, seq_len;
    int recompute, precision, grad_fp32, optimizer, dispatcher, routing; /* -1 = unset */
    int framework, recompute_method, loss;                               /* -1 = unset */
    int shard_group;       /* 0 = unset (full sharding; the search tries HSDP) */
    int loss_chunks;       /* 0 = unset (all tokens at once) */
    long long local_batch; /* 0 = unset (one pipeline schedule a step) */
    int mtp_layers;        /* -1 = unset (none) */
    int schedule;          /* enum dp_pp_schedule, CLI_SCHEDULE_AUTO, -1 = unset (1f1b) */
    bool fsdp_per_microbatch;
    int instances;        /* --num-distributed-optimizer-instances: shard = dp*cp / it */
    int recompute_layers; /* 0 = unset */
    unsigned recompute_modules;
    int gemm;                        /* enum dp_gemm, -1 unset, -2 auto */
    int fp8_recipe;                  /* -1 = unset */
    int tp_overlap, opg, pp_overlap; /* -1 = framework default, 0 off, 1 on */
    bool sp, no_flash, no_dp_overlap, fp8_params, fp8_output, fp8_attention, json, moe_pad,
        ep_overlap;
    double overhead_gib;  /* < 0 = unset */
    double memory_margin; /* fraction of the usable bytes; < 0 = unset (DP_MEM_TIGHT_FRACTION) */
    double moe_capacity;  /* 0 = dropless */
    double moe_imbalance; /* < 0 = unset */
    bool knob_given[OPT_COMMON_END - OPT_SYSTEM];
};

/*
 * What a planning command assumed for options the user did not give, in words
 * ("" when given): printed next to the value and under "defaults" in --json, so a
 * default never silently changes the question.
 */
struct cli_defaults {
    char nodes[96]; /* --system without --nodes */
    char seq[192];  /* --seq-len: where the model's training length came from */
    char gbs[192];  /* --gbs: the planning default, ~4M tokens */
};

void cli_common_init(struct cli_common *c);
/*
 * getopt_long for a subcommand: the next command-specific option id, -1 at the
 * end of the options, or -2 after printing a usage error (missing value, unknown
 * option, bad shared-option value: exit 2). Shared options (cluster, knobs,
 * --json) go into *c when c is not NULL. `shortopts` must start with ':'.
 */
int cli_next_opt(const char *cmd, int argc, char **argv, const char *shortopts,
                 const struct option *opts, struct cli_common *c);
/* Handle a shared option: 1 = handled, 0 = not a shared option, <0 = usage error printed. */
int cli_common_opt(const char *cmd, int opt, const char *arg, struct cli_common *c);
/*
 * Resolve MODEL/--plan: with --plan FILE the model, cluster and layout come from
 * the plan (knobs may not be given with it; a --system/--gpu/--cluster replaces
 * the plan's cluster). `model_arg` may be NULL when a plan is given.
 */
int cli_resolve(const struct cli_common *c, const char *model_arg, struct dp_model *m,
                struct dp_cluster *cl, struct dp_layout *l, struct cli_defaults *d,
                struct dp_err *err);
/*
 * The --calibration profile (loaded once; NULL without the option) and its fits laid
 * over a cluster: the GEMM curve and peak of the profile's dtypes when the profile
 * measured this cluster's GPU (or is the cluster), each collective link's fitted
 * all-reduce busbw and latency onto the cluster's intra/inter link of that name ("intra",
 * "inter" or the link's profile name).
 */
int cli_calibration(const struct cli_common *c, const struct dp_calibration **out,
                    struct dp_err *err);
int cli_apply_calibration(const struct cli_common *c, struct dp_cluster *cl, struct dp_err *err);
/* A CPU profile's costs for a run of `threads` threads per rank with `concurrent` computing
 * on the node (the nearest split measured) into *costs, and its collective fits, into the
 * machine the step-time prediction prices with; false when the profile has no CPU entry. */
struct dp_exec_machine;
struct dp_exec_costs;
bool cli_calibration_machine(const struct dp_calibration *cal, int threads, int concurrent,
                             struct dp_exec_costs *costs, struct dp_exec_machine *mc);
/* The CPU step prediction by kind as JSON, the same keys wherever it is printed
 * (`estimate --json`'s cpu_executor, summary.json's cpu_prediction). */
struct dp_exec_prediction;
struct cJSON *cli_cpu_prediction_json(const struct dp_exec_prediction *p);
/* A plan file, rather than a model: its JSON has the "dplan_plan" key (within its first
 * 4 KiB). */
bool cli_is_plan_file(const char *path);
/* True if any cluster-selection option was given (a --calibration profile is one: it
 * describes the machine it measured). */
bool cli_has_cluster(const struct cli_common *c);
/* Build the cluster; usage errors (missing/contradictory options) return DP_EUSAGE. */
int cli_cluster(const struct cli_common *c, struct dp_cluster *out, struct dp_err *err);
/*
 * Fill a layout from the knobs: unset degrees default to 1, dp to what the GPU
 * count leaves, seq_len to the model's, gbs to fill the pipeline
 * (mbs * dp * pp), grad dtype to fp32 except for fp16, and the overlap knobs to
 * what Megatron-Core's training recipes turn on (cli_overlap_defaults). An overlap
 * asked for without the knob it needs, or FP8 on a GPU without FP8, is a usage
 * error (DP_EUSAGE, exit 2).
 */
int cli_layout(const struct cli_common *c, const struct dp_model *m, int gpus,
               struct dp_layout *out, struct dp_err *err);
/* The first pipeline-split option given ("--stage-layers", ...), or NULL. */
const char *cli_split_option(const struct cli_common *c);
/* The positional arguments after the options (from optind_): a search (suggest, whatif)
 * takes one MODEL and no pipeline-split option; a layout command (estimate, memory) one
 * MODEL or --plan. 0, or cli_usage_error's exit status 2 with the line printed. */
int cli_search_args(const char *cmd, int argc, int optind_, const struct cli_common *c);
int cli_layout_args(const char *cmd, int argc, int optind_, const struct cli_common *c);
/* The FP8 recipe: --fp8-recipe, else framework fw's default (rowwise under torchtitan,
 * delayed elsewhere). */
enum dp_fp8_recipe cli_fp8_recipe(const struct cli_common *c, enum dp_framework fw);
/* The overlap knobs the user left unset, as NeMo's and Megatron-Bridge's pretraining recipes
 * set them: TP overlap with sequence parallelism, the parameter all-gather overlap with the
 * gradient one, pipeline send/recv overlap with interleaving. */
void cli_overlap_defaults(const struct cli_common *c, struct dp_layout *l);
/* Check the knobs that need another knob and the GPU's support of the GEMM precision. */
int cli_check_knobs(const struct cli_common *c, const struct dp_layout *l, const struct dp_gpu *g,
                    struct dp_err *err);
/* Help text for the shared options. */
extern const char cli_cluster_help[];
extern const char cli_plan_knob_help[]; /* estimate, memory, suggest, whatif */

/* The shipped measured runs, tests/validation/runs.json. */
const char *cli_default_runs(void);

/* Memory options from the knobs (--overhead-gib), for estimate, memory and the searches. */
struct dp_mem_opts;
void cli_mem_opts(const struct cli_common *c, struct dp_mem_opts *o);
/* --memory-margin as a fraction, DP_MEM_TIGHT_FRACTION when not given; why that default. */
#define CLI_MARGIN_WHY "about the memory model's measured error"
double cli_memory_margin(const struct cli_common *c);
/* "75.20 GiB: 79.16 usable less the 5% margin" (or just the usable bytes at margin 0). */
void cli_capacity_words(const struct dp_cluster *cl, double margin, char *out, size_t cap);
/* The searches' "memory   layouts keep 5% headroom ..." line; with cl, the bytes that leaves
 * on its GPU (whatif, over several systems, passes NULL). */
void cli_describe_margin(FILE *f, const struct cli_common *c, const struct dp_cluster *cl);
/*
 * An output the command will write (`what`: "-o", "--svg", "--trace"; "-" is stdout) must
 * not be one of its inputs: the --plan, --cluster and --calibration files and `paths`
 * (the MODEL argument, validate's run files; names that are no file are skipped).
 * ckpt/ckpt.h dp_output_check decides (the same file through any link, or inside a
 * checkpoint); 0, or DP_EINVAL in err naming both.
 */
int cli_output_check(const struct cli_common *c, const char *out, const char *what,
                     char *const *paths, int npaths, struct dp_err *err);
/* The same, but `allow` (NULL: none) may be the output whatever it is: calibrate --gpu
 * rewrites the profile of the GPU it fits, which dp_output_check refuses as a profile. */
int cli_output_check_allowing(const struct cli_common *c, const char *out, const char *what,
                              char *const *paths, int npaths, const char *allow,
                              struct dp_err *err);
/*
 * The planning commands' one default global batch (estimate, memory, suggest, whatif) on
 * `gpus` GPUs: ~4M tokens, odd x 2^k sequences, odd the GPU count's odd factor (1 when
 * gpus <= 0). `why` (when not NULL) gets the description printed after "--gbs not given:".
 * estimate and memory take its nearest multiple of their layout's mbs x dp (x pp when
 * interleaving).
 */
int64_t cli_default_gbs(int64_t seq_len, int gpus, char *why, size_t cap);
/* Fill d->nodes and d->seq for what c leaves out (d->gbs is the caller's). */
void cli_defaults_fill(const struct cli_common *c, const struct dp_model *m,
                       struct cli_defaults *d);
struct dp_search_opts;
/* The search options the flags give; without --gbs the default batch on `gpus` GPUs
 * (gpus <= 0: a count that varies, whatif's header). */
int cli_search_opts(const struct cli_common *c, const struct dp_model *m, int gpus,
                    struct dp_search_opts *o, struct cli_defaults *d);
/* "batch    1024 sequences x 4096 tokens (--gbs not given: ...)" and, when --seq-len was
 * not given, "seq      4096 (--seq-len not given: ...)". */
void cli_describe_batch(FILE *f, int64_t gbs, int64_t seq_len, const struct cli_defaults *d);
/* d as a "defaults" object ({} when everything was given), added to o. */
void cli_defaults_json(struct cJSON *o, const struct cli_defaults *d);

/* Helpers for printing. */
double cli_gib(int64_t bytes);
/* "6.74B", "124.44M": a count with a unit suffix. */
const char *cli_count_short(int64_t n, char *buf, size_t cap);
void cli_print_json(struct cJSON *root); /* prints and deletes */
void cli_describe_model(FILE *f, const struct dp_model *m);
void cli_describe_cluster(FILE *f, const struct dp_cluster *c, const struct cli_defaults *d);
void cli_describe_layout(FILE *f, const struct dp_layout *l, const struct dp_model *m);
/* "framework torchtitan: 4+4+8 B/param ..., collectives per block, recompute op, unfused loss". */
void cli_describe_framework(FILE *f, const struct dp_layout *l);
/* suggest's line: the framework, what the search tries within it (recompute policies, shard
 * groups) and its loss. */
void cli_describe_search_framework(FILE *f, const struct dp_search_opts *o, bool given);

/* Subcommands. */
int cmd_calibrate(int argc, char **argv);
int cmd_check(int argc, char **argv);
int cmd_ckpt(int argc, char **argv);
int cmd_data(int argc, char **argv);
int cmd_estimate(int argc, char **argv);
int cmd_export(int argc, char **argv);
int cmd_memory(int argc, char **argv);
int cmd_model(int argc, char **argv);
int cmd_profiles(int argc, char **argv);
int cmd_run(int argc, char **argv);
int cmd_simulate(int argc, char **argv);
int cmd_suggest(int argc, char **argv);
int cmd_topo(int argc, char **argv);
int cmd_validate(int argc, char **argv);
int cmd_whatif(int argc, char **argv);

/* dplan calibrate --backend cpu (calibrate_cpu.c): measure this machine, write a profile. */
int cli_calibrate_cpu(int argc, char **argv);

#endif
