/*
 * Options shared by the planning subcommands: cluster selection and plan
 * knobs, their defaults, and small printing helpers.
 */
#include "cli.h"
#include "planner/planner.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

static bool json_errors;

void cli_set_json_errors(bool on)
{
    json_errors = on;
}

/* With --json, programs read stdout: the error goes there too, as {"error", "exit_code"}. */
static void json_error(const char *msg, int code)
{
    if (!json_errors)
        return;
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "error", msg);
    cJSON_AddNumberToObject(o, "exit_code", code);
    cli_print_json(o);
    fflush(stdout);
}

int cli_fail(const struct dp_err *err)
{
    const char *msg = err->msg[0] ? err->msg : "unknown error";
    int code = dp_status_exit_code(err->code ? err->code : DP_EINVAL);
    fprintf(stderr, "dplan: error: %s\n", msg);
    json_error(msg, code);
    return code;
}

int cli_no_fit(const char *cmd, const struct dp_model *m, const struct dp_cluster *cl,
               int64_t peak_bytes, int stage)
{
    fprintf(stderr, "dplan %s: does not fit: %s stage %d needs %.2f GiB per GPU, %s has %.2f GiB\n",
            cmd, m->name, stage, cli_gib(peak_bytes), cl->gpu.name,
            cli_gib(dp_gpu_usable_bytes(&cl->gpu)));
    return CLI_EXIT_NOFIT;
}

int cli_usage_error(const char *cmd, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fprintf(stderr, "dplan %s: %s (see `dplan %s --help`)\n", cmd, msg, cmd);
    json_error(msg, 2);
    return 2;
}

const char cli_cluster_help[] =
    "Cluster (one of):\n"
    "  --system NAME --nodes N     a node type from profiles/system (e.g. dgx-h100)\n"
    "  --gpu NAME --gpus N         GPUs from profiles/gpu; --gpus-per-node K (default 8),\n"
    "                              --intra LINK (default: the GPU's own link)\n"
    "  --cluster FILE.json         a cluster file (from `dplan topo -o`)\n"
    "  --network NAME              inter-node network (profiles/network)\n";

/* The pipeline-split options, in both knob helps. */
#define CLI_SPLIT_HELP                                                                             \
    "Pipeline split (at most one rule; the default is even):\n"                                    \
    "  --stage-layers LIST         layers per stage, or per model chunk with vpp > 1 in model\n"   \
    "                              order (chunk 0 of every stage, then chunk 1, ...): e.g.\n"      \
    "                              1,2*62,1 (N*K repeats N K times); 0 is allowed only for\n"      \
    "                              the first (embedding) and last (loss) entries; the count\n"     \
    "                              sets vpp when --vpp is not given\n"                             \
    "  --pipeline-layout STR       Megatron's --pipeline-model-parallel-layout (alias):\n"         \
    "                              E embedding, t layer, L loss, | between virtual stages,\n"      \
    "                              (..)*n and t*n repeats, e.g. \"Et|(tt|)*62,tL\"\n"              \
    "  --first-stage-layers N --last-stage-layers N  Megatron --decoder-first/last-\n"             \
    "                              pipeline-num-layers (aliases); the middle stages share\n"       \
    "                              the rest evenly\n"                                              \
    "  --account-for-embedding-in-pipeline-split, --account-for-loss-in-pipeline-split\n"          \
    "                              Megatron: the embedding/loss counts as a layer\n"               \
    "  --first-stage-less-layers N --last-stage-less-layers N  torchtitan's split (each\n"         \
    "                              defaults to 1 when the other is given): the\n"                  \
    "                              embedding/output weigh N layers, the rest spreads\n"

// clang-format off
/* The knobs as the planning commands read them: their --gbs and --seq-len defaults differ
 * from `dplan run`'s (cli_knob_help). */
const char cli_plan_knob_help[] =
    "Plan knobs (defaults in brackets):\n"
    "  --tp N --pp N --cp N --ep N parallel degrees [1]; --dp N [what the GPU count leaves]\n"
    "  --vpp N                     model chunks per pipeline rank (interleaved 1F1B) [1]\n"
    "  --mbs N                     micro-batch size in sequences [1]\n"
    "  --gbs N                     global batch in sequences [~4M tokens, 2^k sequences;\n"
    "                              estimate and memory: its nearest multiple of mbs*dp]\n"
    "  --seq-len N                 sequence length [the model's training length: model.json's\n"
    "                              seq_len; for a config.json rope_scaling's original length,\n"
    "                              else max_position_embeddings capped at 8192]\n"
    "  --zero {0,1,2,3}            ZeRO stage; 1 = Megatron distributed optimizer [0]\n"
    "  --recompute {none,selective,full,op}  activation recomputation: op = torchtitan's\n"
    "                              per-op selective checkpointing [none]\n"
    "  --sp                        sequence parallelism (with tp > 1)\n"
    "  --precision {bf16,fp16,fp32} [bf16]; --grad-dtype {fp32,half} [fp32; half for fp16\n"
    "                              and deepspeed]\n"
    "  --optimizer {adam,sgd}      [adam]\n"
    "  --no-flash-attn             attention stores the s^2 score matrices\n"
    "  --no-dp-overlap             gradient reduction after backward, not overlapped\n"
    "  --overhead-gib X            runtime memory per GPU, replacing the CUDA context, NCCL\n"
    "                              buffers, workspaces and allocator slack [computed]\n"
    CLI_SPLIT_HELP
    "Framework and sharding (never searched but --shard-group):\n"
    "  --framework {megatron,torchtitan,deepspeed}  the stack that runs the plan: its bytes\n"
    "                              per parameter, collectives, recompute policies, loss and\n"
    "                              allocator [megatron]\n"
    "  --shard-group N             HSDP: ZeRO/FSDP shards within groups of N of the dp x cp\n"
    "                              ranks and replicates across them; also\n"
    "                              --data-parallel-shard-degree N (torchtitan), --mics-shard-size "
    "N\n"
    "                              (DeepSpeed), --num-distributed-optimizer-instances M "
    "(Megatron:\n"
    "                              N = dp x cp / M) [all ranks; suggest also tries groups]\n"
    "  --recompute-method {block,uniform,every}  with --recompute full: the first N layers of\n"
    "                              each stage, every layer in chunks of N, or every N-th layer\n"
    "                              (torchtitan selective_ac_option N) [block]\n"
    "  --recompute-layers N        that N [block: all layers]\n"
    "  --recompute-modules LIST    with --recompute selective: Megatron's recompute_modules\n"
    "                              (core_attn,mlp,layernorm,moe_act,moe,shared_experts,\n"
    "                              mla_up_proj) [core_attn]\n"
    "  --loss {vocab-parallel,fused,unfused,fused-native,compiled}  cross entropy: fused =\n"
    "                              TE's in-place kernel, fused-native = Megatron's native\n"
    "                              fusion, compiled = torchtitan's under torch.compile\n"
    "                              [megatron: vocab-parallel; torchtitan, deepspeed: unfused]\n"
    "The defaults taken are printed (\"--nodes not given: ...\") and listed under\n"
    "\"defaults\" in --json.\n";

const char cli_knob_help[] =
    "Plan knobs (defaults in brackets):\n"
    "  --tp N --pp N --cp N --ep N parallel degrees [1]; --dp N [what the GPU count leaves]\n"
    "  --vpp N                     model chunks per pipeline rank (interleaved 1F1B) [1]\n"
    "  --mbs N                     micro-batch size in sequences [1]\n"
    "  --gbs N                     global batch in sequences [mbs*dp*pp: fills the pipeline]\n"
    "  --seq-len N                 sequence length [the model's]\n"
    "  --zero {0,1,2,3}            ZeRO stage; 1 = Megatron distributed optimizer [0]\n"
    "  --recompute {none,selective,full,op}  activation recomputation: op = torchtitan's\n"
    "                              per-op selective checkpointing [none]\n"
    "  --sp                        sequence parallelism (with tp > 1)\n"
    "  --precision {bf16,fp16,fp32,fp8} [bf16]: fp8 = bf16 weights and activations with the\n"
    "                              linear layers' GEMMs in FP8 (attention, norms and the output\n"
    "                              layer stay bf16); `suggest --precision auto` also tries fp8\n"
    "  --fp8-recipe {delayed,current,rowwise,blockwise,mxfp8}  FP8 scaling [delayed];\n"
    "                              current = per-tensor current scaling (torchao tensorwise)\n"
    "  --fp8-params                weights kept and gathered in FP8 (--fp8-param-gather)\n"
    "  --grad-dtype {fp32,half}    gradient accumulation [fp32; half for fp16]\n"
    "  --optimizer {adam,sgd}      [adam]\n"
    "  --no-flash-attn             attention stores the s^2 score matrices\n"
    "  --no-dp-overlap             gradient reduction after backward, not overlapped\n"
    "  --[no-]overlap-param-gather distributed-optimizer/FSDP weight all-gather overlapped\n"
    "                              with the forward [on, off with --no-dp-overlap]\n"
    "  --[no-]tp-overlap           TP collectives pipelined with their GEMMs (Megatron\n"
    "                              --tp-comm-overlap; needs --sp) [on with --sp]\n"
    "  --[no-]pp-overlap           pipeline send/recv overlapped with compute (Megatron\n"
    "                              overlap_p2p_comm; needs --vpp > 1) [on with --vpp > 1]\n"
    "  --overhead-gib X            runtime memory per GPU, replacing the CUDA context, NCCL\n"
    "                              buffers, workspaces and allocator slack [computed]\n"
    CLI_SPLIT_HELP
    "Framework and sharding (never searched but --shard-group):\n"
    "  --framework {megatron,torchtitan,deepspeed}  the stack that runs the plan: its bytes\n"
    "                              per parameter, collectives, recompute policies, loss and\n"
    "                              allocator [megatron]\n"
    "  --shard-group N             HSDP: ZeRO/FSDP shards within groups of N of the dp x cp\n"
    "                              ranks and replicates across them; also\n"
    "                              --data-parallel-shard-degree N (torchtitan), --mics-shard-size "
    "N\n"
    "                              (DeepSpeed), --num-distributed-optimizer-instances M "
    "(Megatron:\n"
    "                              N = dp x cp / M) [all ranks; suggest also tries groups]\n"
    "  --recompute-method {block,uniform,every}  with --recompute full: the first N layers of\n"
    "                              each stage, every layer in chunks of N, or every N-th layer\n"
    "                              (torchtitan selective_ac_option N) [block]\n"
    "  --recompute-layers N        that N [block: all layers]\n"
    "  --recompute-modules LIST    with --recompute selective: Megatron's recompute_modules\n"
    "                              (core_attn,mlp,layernorm,moe_act,moe,shared_experts,\n"
    "                              mla_up_proj) [core_attn]\n"
    "  --loss {vocab-parallel,fused,unfused,fused-native,compiled}  cross entropy: fused =\n"
    "                              TE's in-place kernel, fused-native = Megatron's native\n"
    "                              fusion, compiled = torchtitan's under torch.compile\n"
    "                              [megatron: vocab-parallel; torchtitan, deepspeed: unfused]\n"
    "Mixture of experts (never searched):\n"
    "  --etp N                     expert tensor parallel size [tp]; the expert layers\n"
    "                              regroup each stage's tp*cp*dp ranks as etp*ep*edp\n"
    "  --moe-capacity F            expert capacity factor (tokens beyond it are dropped)\n"
    "                              [0: dropless]; --moe-pad pads every expert to it\n"
    "  --moe-imbalance F           dropless: the busiest EP rank's routed tokens over the\n"
    "                              mean [balanced routing's sampling spread, 1 + sqrt(2 ln ep\n"
    "                              (1 - 1/ep) / (T k)); 1 for forced-balanced routing]\n"
    "  --moe-dispatcher {alltoall,dedup}  token dispatch: one copy per (token, expert), or\n"
    "                              one per destination GPU and node (DeepEP, HybridEP)\n"
    "                              [alltoall]\n";

// clang-format on

void cli_common_init(struct cli_common *c)
{
    memset(c, 0, sizeof *c);
    c->recompute = c->precision = c->grad_fp32 = c->optimizer = c->dispatcher = -1;
    c->framework = c->recompute_method = c->loss = -1;
    c->gemm = c->fp8_recipe = -1;
    c->tp_overlap = c->opg = c->pp_overlap = -1;
    c->overhead_gib = -1;
    c->moe_imbalance = -1;
    c->zero = -1;
    c->first_less = c->last_less = -1;
}

static int parse_double(const char *cmd, const char *opt, const char *arg, double lo, double hi,
                        const char *what, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(arg, &end);
    if (end == arg || *end || errno || !(v >= lo && v <= hi)) {
        cli_usage_error(cmd, "--%s: expected %s, got \"%s\"", opt, what, arg);
        return -2;
    }
    *out = v;
    return 0;
}

static int parse_long(const char *cmd, const char *opt, const char *arg, long long lo, long long hi,
                      long long *out)
{
    char *end;
    errno = 0;
    long long v = strtoll(arg, &end, 10);
    if (end == arg || *end || errno || v < lo || v > hi)
        return cli_usage_error(cmd, "--%s: expected integer in [%lld, %lld], got \"%s\"", opt, lo,
                               hi, arg),
               -2;
    *out = v;
    return 0;
}

static int parse_int(const char *cmd, const char *opt, const char *arg, int lo, int hi, int *out)
{
    long long v;
    if (parse_long(cmd, opt, arg, lo, hi, &v))
        return -2;
    *out = (int)v;
    return 0;
}

static int parse_choice(const char *cmd, const char *opt, const char *arg, const char *const *names,
                        int n, int *out)
{
    for (int i = 0; i < n; i++)
        if (strcmp(arg, names[i]) == 0) {
            *out = i;
            return 0;
        }
    char list[256] = "";
    size_t len = 0;
    for (int i = 0; i < n; i++)
        len += (size_t)snprintf(list + len, sizeof list - len, "%s%s", i ? ", " : "", names[i]);
    cli_usage_error(cmd, "--%s: expected one of %s, got \"%s\"", opt, list, arg);
    return -2;
}

int cli_common_opt(const char *cmd, int opt, const char *arg, struct cli_common *c)
{
    static const char *const rc_names[] = {"none", "selective", "full", "op"};
    static const char *const fw_names[] = {"megatron", "torchtitan", "deepspeed"};
    static const char *const method_names[] = {"block", "uniform", "every"};
    static const char *const loss_names[] = {"vocab-parallel", "fused", "unfused", "fused-native",
                                             "compiled"};
    static const char *const prec_names[] = {"bf16", "fp16", "fp32", "fp8", "auto"};
    static const char *const recipe_names[] = {"delayed",   "current", "rowwise",
                                               "blockwise", "mxfp8",   "tensorwise"};
    static const char *const grad_names[] = {"half", "fp32"};
    static const char *const opt_names[] = {"adam", "sgd"};
    static const char *const disp_names[] = {"alltoall", "dedup"};
    if (opt < OPT_SYSTEM || opt >= OPT_COMMON_END)
        return 0;
    c->knob_given[opt - OPT_SYSTEM] = true;
    int r = 0;
    switch (opt) {
    case OPT_SYSTEM: c->system = arg; break;
    case OPT_GPU: c->gpu = arg; break;
    case OPT_INTRA: c->intra = arg; break;
    case OPT_NETWORK: c->network = arg; break;
    case OPT_CLUSTER: c->cluster = arg; break;
    case OPT_PLAN: c->plan = arg; break;
    case OPT_NODES: r = parse_int(cmd, "nodes", arg, 1, 1000000, &c->nodes); break;
    case OPT_GPUS: r = parse_int(cmd, "gpus", arg, 1, 100000000, &c->gpus); break;
    case OPT_GPUS_PER_NODE:
        r = parse_int(cmd, "gpus-per-node", arg, 1, 1024, &c->gpus_per_node);
        break;
    case OPT_TP: r = parse_int(cmd, "tp", arg, 1, 1 << 20, &c->tp); break;
    case OPT_PP: r = parse_int(cmd, "pp", arg, 1, 1 << 20, &c->pp); break;
    case OPT_DP: r = parse_int(cmd, "dp", arg, 1, 1 << 26, &c->dp); break;
    case OPT_CP: r = parse_int(cmd, "cp", arg, 1, 1 << 20, &c->cp); break;
    case OPT_EP: r = parse_int(cmd, "ep", arg, 1, 1 << 20, &c->ep); break;
    case OPT_VPP: r = parse_int(cmd, "vpp", arg, 1, 1 << 20, &c->vpp); break;
    case OPT_MBS: r = parse_long(cmd, "mbs", arg, 1, 1 << 24, &c->mbs); break;
    case OPT_GBS: r = parse_long(cmd, "gbs", arg, 1, 1LL << 40, &c->gbs); break;
    case OPT_SEQ_LEN: r = parse_long(cmd, "seq-len", arg, 1, 1LL << 30, &c->seq_len); break;
    case OPT_ZERO: r = parse_int(cmd, "zero", arg, 0, 3, &c->zero); break;
    case OPT_RECOMPUTE: r = parse_choice(cmd, "recompute", arg, rc_names, 4, &c->recompute); break;
    case OPT_FRAMEWORK: r = parse_choice(cmd, "framework", arg, fw_names, 3, &c->framework); break;
    case OPT_SHARD_GROUP:
        r = parse_int(cmd, "shard-group", arg, 1, 1 << 24, &c->shard_group);
        break;
    case OPT_DP_SHARD:
        r = parse_int(cmd, "data-parallel-shard-degree", arg, 1, 1 << 24, &c->shard_group);
        break;
    case OPT_MICS_SHARD:
        r = parse_int(cmd, "mics-shard-size", arg, 1, 1 << 24, &c->shard_group);
        break;
    case OPT_DIST_OPT_INSTANCES:
        r = parse_int(cmd, "num-distributed-optimizer-instances", arg, 1, 1 << 24, &c->instances);
        break;
    case OPT_RECOMPUTE_METHOD:
        r = parse_choice(cmd, "recompute-method", arg, method_names, 3, &c->recompute_method);
        break;
    case OPT_RECOMPUTE_LAYERS:
        r = parse_int(cmd, "recompute-layers", arg, 1, 100000, &c->recompute_layers);
        break;
    case OPT_RECOMPUTE_MODULES: {
        /* a comma-separated list of Megatron-Core recompute_modules */
        char buf[256];
        snprintf(buf, sizeof buf, "%s", arg);
        c->recompute_modules = 0;
        for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok;
             tok = strtok_r(NULL, ",", &save)) {
            int bit = dp_recompute_module_parse(tok);
            if (bit < 0) {
                cli_usage_error(cmd,
                                "--recompute-modules: expected a comma-separated list of "
                                "core_attn, mlp, layernorm, moe_act, moe, shared_experts, "
                                "mla_up_proj, got \"%s\"",
                                tok);
                return -2;
            }
            c->recompute_modules |= (unsigned)bit;
        }
        if (!c->recompute_modules) {
            cli_usage_error(cmd, "--recompute-modules: expected at least one module");
            return -2;
        }
        break;
    }
    case OPT_LOSS: {
        int v = -1;
        r = parse_choice(cmd, "loss", arg, loss_names, 5, &v);
        c->loss = v < 0 ? -1 : v + 1;
        break;
    }
    case OPT_SP: c->sp = true; break;
    case OPT_PRECISION: {
        int v = -1;
        r = parse_choice(cmd, "precision", arg, prec_names, 5, &v);
        if (r)
            break;
        if (v == 3) { /* fp8: bf16 storage, FP8 GEMMs */
            c->precision = DP_BF16;
            c->gemm = DP_GEMM_FP8;
        } else if (v == 4) {
            c->precision = DP_BF16;
            c->gemm = -2;
        } else {
            c->precision = v;
            c->gemm = -1;
        }
        break;
    }
    case OPT_FP8_RECIPE: {
        int v = -1;
        r = parse_choice(cmd, "fp8-recipe", arg, recipe_names, 6, &v);
        c->fp8_recipe = v == 5 ? DP_FP8_CURRENT : v;
        break;
    }
    case OPT_FP8_PARAMS: c->fp8_params = true; break;
    case OPT_TP_OVERLAP: c->tp_overlap = 1; break;
    case OPT_NO_TP_OVERLAP: c->tp_overlap = 0; break;
    case OPT_OPG: c->opg = 1; break;
    case OPT_NO_OPG: c->opg = 0; break;
    case OPT_PP_OVERLAP: c->pp_overlap = 1; break;
    case OPT_NO_PP_OVERLAP: c->pp_overlap = 0; break;
    case OPT_GRAD_DTYPE:
        r = parse_choice(cmd, "grad-dtype", arg, grad_names, 2, &c->grad_fp32);
        break;
    case OPT_OPTIMIZER: r = parse_choice(cmd, "optimizer", arg, opt_names, 2, &c->optimizer); break;
    case OPT_NO_FLASH: c->no_flash = true; break;
    case OPT_NO_DP_OVERLAP: c->no_dp_overlap = true; break;
    case OPT_FIRST_LAYERS:
        r = parse_int(cmd, "first-stage-layers", arg, 1, 100000, &c->first_layers);
        break;
    case OPT_LAST_LAYERS:
        r = parse_int(cmd, "last-stage-layers", arg, 1, 100000, &c->last_layers);
        break;
    case OPT_STAGE_LAYERS: c->stage_layers = arg; break;
    case OPT_PIPELINE_LAYOUT: c->pipeline_layout = arg; break;
    case OPT_ACCOUNT_EMBEDDING: c->account_embedding = true; break;
    case OPT_ACCOUNT_LOSS: c->account_loss = true; break;
    case OPT_FIRST_LESS:
        r = parse_int(cmd, "first-stage-less-layers", arg, 0, 100000, &c->first_less);
        break;
    case OPT_LAST_LESS:
        r = parse_int(cmd, "last-stage-less-layers", arg, 0, 100000, &c->last_less);
        break;
    case OPT_OVERHEAD:
        r = parse_double(cmd, "overhead-gib", arg, 0, 1e6, "number >= 0", &c->overhead_gib);
        break;
    case OPT_ETP: r = parse_int(cmd, "etp", arg, 1, 1 << 20, &c->etp); break;
    case OPT_MOE_CAPACITY:
        r = parse_double(cmd, "moe-capacity", arg, 0, 1000, "capacity factor >= 0 (0: dropless)",
                         &c->moe_capacity);
        break;
    case OPT_MOE_PAD: c->moe_pad = true; break;
    case OPT_MOE_DISPATCHER:
        r = parse_choice(cmd, "moe-dispatcher", arg, disp_names, 2, &c->dispatcher);
        break;
    case OPT_MOE_IMBALANCE:
        r = parse_double(cmd, "moe-imbalance", arg, 1, 1000, "number >= 1", &c->moe_imbalance);
        break;
    case OPT_JSON: c->json = true; break;
    default: return 0;
    }
    return r ? -2 : 1;
}

int cli_next_opt(const char *cmd, int argc, char **argv, const char *shortopts,
                 const struct option *opts, struct cli_common *c)
{
    for (;;) {
        int ch = getopt_long(argc, argv, shortopts, opts, NULL);
        if (ch == -1)
            return -1;
        if (ch == ':') {
            cli_usage_error(cmd, "option \"%s\" needs a value", argv[optind - 1]);
            return -2;
        }
        if (ch == '?') {
            cli_usage_error(cmd, "unknown option \"%s\"", argv[optind - 1]);
            return -2;
        }
        if (c) {
            int r = cli_common_opt(cmd, ch, optarg, c);
            if (r < 0)
                return -2;
            if (r > 0)
                continue;
        }
        return ch;
    }
}

bool cli_has_cluster(const struct cli_common *c)
{
    return c->system || c->gpu || c->cluster;
}

int cli_cluster(const struct cli_common *c, struct dp_cluster *out, struct dp_err *err)
{
    int kinds = !!c->system + !!c->gpu + !!c->cluster;
    if (kinds == 0)
        return dp_err_set(err, DP_EUSAGE,
                          "no cluster given: use --system NAME --nodes N, --gpu NAME --gpus N, or "
                          "--cluster FILE.json (list: `dplan profiles`)");
    if (kinds > 1)
        return dp_err_set(err, DP_EUSAGE,
                          "--system, --gpu and --cluster are alternatives: give only one");
    if (c->system) {
        if (c->gpus || c->gpus_per_node || c->intra)
            return dp_err_set(err, DP_EUSAGE,
                              "--gpus/--gpus-per-node/--intra go with --gpu, not --system (use "
                              "--nodes)");
        return dp_cluster_from_system(c->system, c->nodes ? c->nodes : 1, c->network, out, err);
    }
    if (c->gpu) {
        if (c->nodes)
            return dp_err_set(err, DP_EUSAGE, "--nodes goes with --system; with --gpu use --gpus");
        if (!c->gpus)
            return dp_err_set(err, DP_EUSAGE, "--gpu needs --gpus N");
        return dp_cluster_from_gpu(c->gpu, c->gpus, c->gpus_per_node, c->intra, c->network, out,
                                   err);
    }
    int rc = dp_cluster_load(c->cluster, out, err);
    if (rc)
        return rc;
    if (c->nodes) {
        out->nodes = c->nodes; /* plan a cluster file's node type at another size */
        if ((rc = dp_cluster_check_nics(c->cluster, "nics_per_node", out, err)))
            return rc;
    }
    if (c->network) {
        rc = dp_network_load(c->network, &out->inter, err);
        if (rc)
            return rc;
    }
    return 0;
}

const char *cli_split_option(const struct cli_common *c)
{
    if (c->stage_layers)
        return "--stage-layers";
    if (c->pipeline_layout)
        return "--pipeline-layout";
    if (c->first_layers || c->last_layers)
        return c->first_layers ? "--first-stage-layers" : "--last-stage-layers";
    if (c->account_embedding || c->account_loss)
        return c->account_embedding ? "--account-for-embedding-in-pipeline-split"
                                    : "--account-for-loss-in-pipeline-split";
    if (c->first_less >= 0 || c->last_less >= 0)
        return c->first_less >= 0 ? "--first-stage-less-layers" : "--last-stage-less-layers";
    return NULL;
}

/* The pipeline split from the split options: one rule at most, expanded here (the
 * model's layer count is known) into the explicit per-chunk counts the layout keeps.
 * Every complaint is a usage error naming the option. */
static int cli_split(const struct cli_common *c, const struct dp_model *m, struct dp_layout *l,
                     struct dp_err *err)
{
    int rules = !!c->stage_layers + !!c->pipeline_layout + !!(c->first_layers || c->last_layers) +
                !!(c->account_embedding || c->account_loss) +
                !!(c->first_less >= 0 || c->last_less >= 0);
    if (rules == 0)
        return 0;
    const char *what = cli_split_option(c);
    if (rules > 1)
        return dp_err_set(err, DP_EUSAGE,
                          "%s: one pipeline split at a time (--stage-layers, --pipeline-layout, "
                          "--first/last-stage-layers, --account-for-*-in-pipeline-split and "
                          "--first/last-stage-less-layers are alternatives)",
                          what);
    if (l->pp < 2)
        return dp_err_set(err, DP_EUSAGE, "%s: a pipeline split needs --pp > 1, got pp=%d", what,
                          l->pp);
    int counts[DP_MAX_CHUNKS], n = 0, rc;
    if (c->stage_layers || c->pipeline_layout) {
        rc = c->stage_layers
                 ? dp_split_parse_list(c->stage_layers, counts, DP_MAX_CHUNKS, &n, what, err)
                 : dp_split_parse_megatron(c->pipeline_layout, l->pp, counts, DP_MAX_CHUNKS, &n,
                                           what, DP_EUSAGE, err);
        if (rc)
            return rc;
        if (!c->vpp) {
            if (n % l->pp)
                return dp_err_set(err, DP_EUSAGE,
                                  "%s: expected a multiple of pp=%d counts (pp x vpp), got %d",
                                  what, l->pp, n);
            l->vpp = n / l->pp;
        }
    } else {
        if ((int64_t)l->pp * l->vpp > DP_MAX_CHUNKS)
            return dp_err_set(err, DP_EUSAGE,
                              "%s: pp x vpp = %d x %d model chunks exceeds the supported %d", what,
                              l->pp, l->vpp, DP_MAX_CHUNKS);
        n = l->pp * l->vpp;
        if (c->first_layers || c->last_layers)
            rc = dp_split_first_last(m->layers, l->pp, l->vpp, c->first_layers, c->last_layers,
                                     counts, what, DP_EUSAGE, err);
        else if (c->account_embedding || c->account_loss)
            rc = dp_split_account(m->layers, l->pp, l->vpp, c->account_embedding, c->account_loss,
                                  counts, what, DP_EUSAGE, err);
        else /* torchtitan's defaults are 1 and 1 */
            rc = dp_split_torchtitan(
                m->layers, l->pp, l->vpp, c->first_less >= 0 ? c->first_less : 1,
                c->last_less >= 0 ? c->last_less : 1, counts, what, DP_EUSAGE, err);
        if (rc)
            return rc;
    }
    rc = dp_split_check(counts, n, m->layers, l->pp, l->vpp, what, DP_EUSAGE, err);
    if (rc)
        return rc;
    dp_layout_set_chunks(l, counts, n);
    return 0;
}

int cli_layout(const struct cli_common *c, const struct dp_model *m, int gpus, struct dp_layout *l,
               struct dp_err *err)
{
    dp_layout_default(l);
    if (c->gemm == -2)
        return dp_err_set(err, DP_EUSAGE,
                          "--precision auto: expected bf16, fp16, fp32 or fp8 (only `dplan "
                          "suggest` and `dplan whatif` search the precision)");
    l->tp = c->tp ? c->tp : 1;
    l->pp = c->pp ? c->pp : 1;
    l->cp = c->cp ? c->cp : 1;
    l->ep = c->ep ? c->ep : 1;
    l->vpp = c->vpp ? c->vpp : 1;
    int64_t mp = (int64_t)l->tp * l->pp * l->cp;
    if (c->dp) {
        l->dp = c->dp;
    } else {
        if (gpus % mp)
            return dp_err_set(err, DP_EINFEASIBLE,
                              "tp*pp*cp = %d*%d*%d = %lld does not divide the %d GPUs of the "
                              "cluster",
                              l->tp, l->pp, l->cp, (long long)mp, gpus);
        l->dp = (int)(gpus / mp);
    }
    l->mbs = c->mbs ? c->mbs : 1;
    l->gbs = c->gbs ? c->gbs : l->mbs * l->dp * l->pp;
    l->seq_len = c->seq_len ? c->seq_len : m->seq_len;
    l->zero = c->zero >= 0 ? c->zero : 0;
    if (c->recompute >= 0)
        l->recompute = (enum dp_recompute)c->recompute;
    if (c->framework >= 0)
        l->framework = (enum dp_framework)c->framework;
    if (c->recompute_method >= 0)
        l->recompute_method = (enum dp_recompute_method)c->recompute_method;
    l->recompute_layers = c->recompute_layers;
    l->recompute_modules = c->recompute_modules;
    if (c->loss >= 0)
        l->loss = (enum dp_loss)c->loss;
    l->shard_group = c->shard_group;
    if (c->instances > 0) {
        int n = l->dp * l->cp;
        if (n % c->instances)
            return dp_err_set(err, DP_EUSAGE,
                              "--num-distributed-optimizer-instances: megatron needs instances "
                              "that divide the dp x cp = %d data-parallel ranks, got %d",
                              n, c->instances);
        l->shard_group = n / c->instances;
    }
    l->sp = c->sp;
    if (c->precision >= 0)
        l->precision = (enum dp_precision)c->precision;
    /* DeepSpeed accumulates gradients in the model dtype unless told otherwise
     * (data_types.grad_accum_dtype); Megatron and torchtitan in fp32. */
    l->grad_fp32 = c->grad_fp32 >= 0 ? c->grad_fp32 == 1
                                     : l->precision != DP_FP16 && c->framework != DP_FW_DEEPSPEED;
    if (c->optimizer >= 0)
        l->optimizer = (enum dp_optimizer)c->optimizer;
    l->flash_attn = !c->no_flash;
    l->dp_overlap = !c->no_dp_overlap;
    if (c->gemm >= 0)
        l->gemm = (enum dp_gemm)c->gemm;
    if (c->fp8_recipe >= 0)
        l->fp8_recipe = (enum dp_fp8_recipe)c->fp8_recipe;
    l->fp8_params = c->fp8_params;
    l->etp = c->etp;
    l->moe_capacity = c->moe_capacity;
    l->moe_pad = c->moe_pad;
    if (c->moe_imbalance >= 0)
        l->moe_imbalance = c->moe_imbalance;
    if (c->dispatcher >= 0)
        l->moe_dispatcher = (enum dp_moe_dispatcher)c->dispatcher;
    /* the split first: a list's length may set vpp, which the overlap defaults read */
    int rc = cli_split(c, m, l, err);
    if (rc)
        return rc;
    cli_overlap_defaults(c, l);
    return 0;
}

void cli_overlap_defaults(const struct cli_common *c, struct dp_layout *l)
{
    l->tp_overlap = c->tp_overlap >= 0 ? c->tp_overlap == 1 : (l->sp && l->tp > 1);
    l->overlap_param_gather = c->opg >= 0 ? c->opg == 1 : l->dp_overlap;
    l->pp_overlap = c->pp_overlap >= 0 ? c->pp_overlap == 1 : l->vpp > 1;
}

int cli_check_knobs(const struct cli_common *c, const struct dp_layout *l, const struct dp_gpu *g,
                    struct dp_err *err)
{
    if (c->recompute_modules && c->recompute != DP_RECOMPUTE_SELECTIVE)
        return dp_err_set(err, DP_EUSAGE,
                          "--recompute-modules: expected --recompute selective as well");
    if ((c->recompute_method >= 0 || c->recompute_layers) && c->recompute != DP_RECOMPUTE_FULL)
        return dp_err_set(err, DP_EUSAGE, "--recompute-%s: expected --recompute full as well",
                          c->recompute_method >= 0 ? "method" : "layers");
    if (l) {
        int rc = dp_layout_check_framework(l, NULL, err);
        if (rc)
            return rc;
    }
    if ((c->fp8_recipe >= 0 || c->fp8_params) && c->gemm != DP_GEMM_FP8 && c->gemm != -2)
        return dp_err_set(err, DP_EUSAGE, "--%s: expected --precision fp8 as well",
                          c->fp8_params ? "fp8-params" : "fp8-recipe");
    if (!l) { /* a search: check the fixed GEMM precision against the GPU */
        struct dp_layout p;
        dp_layout_default(&p);
        p.gemm = c->gemm >= 0 ? (enum dp_gemm)c->gemm : DP_GEMM_DEFAULT;
        p.fp8_recipe = c->fp8_recipe >= 0 ? (enum dp_fp8_recipe)c->fp8_recipe : DP_FP8_DELAYED;
        if (c->tp_overlap == 1 && !c->sp)
            return dp_err_set(err, DP_EUSAGE,
                              "--tp-overlap: expected --sp as well (TP communication overlap "
                              "needs sequence parallelism, as Megatron-LM's --tp-comm-overlap "
                              "does)");
        /* The fixed knobs against the framework (what the search leaves free is searched
         * within what the framework offers). */
        p.framework = c->framework >= 0 ? (enum dp_framework)c->framework : DP_FW_MEGATRON;
        p.zero = c->zero >= 0 ? c->zero : p.framework == DP_FW_TORCHTITAN ? 3 : 1;
        p.pp = c->pp ? c->pp : 1;
        p.cp = c->cp ? c->cp : 1;
        p.vpp = c->vpp ? c->vpp : 1;
        p.recompute = c->recompute >= 0 ? (enum dp_recompute)c->recompute : DP_RECOMPUTE_NONE;
        if (c->precision >= 0)
            p.precision = (enum dp_precision)c->precision;
        p.grad_fp32 = c->grad_fp32 != 0;
        int frc = dp_layout_check_framework(&p, NULL, err);
        if (frc)
            return frc;
        return g && c->gemm >= 0 ? dp_layout_check_gpu(&p, g, "--precision", err) : 0;
    }
    if (c->tp_overlap == 1 && l->tp > 1 && !l->sp)
        return dp_err_set(err, DP_EUSAGE,
                          "--tp-overlap: expected --sp as well (TP communication overlap needs "
                          "sequence parallelism, as Megatron-LM's --tp-comm-overlap does)");
    if (c->pp_overlap == 1 && l->vpp < 2)
        return dp_err_set(err, DP_EUSAGE,
                          "--pp-overlap: expected --vpp > 1 (Megatron overlaps pipeline "
                          "send/recv only in the interleaved schedule), got vpp=%d",
                          l->vpp);
    if (g && c->gemm >= 0)
        return dp_layout_check_gpu(l, g, "--precision", err);
    return 0;
}

void cli_mem_opts(const struct cli_common *c, struct dp_mem_opts *o)
{
    dp_mem_opts_default(o);
    if (c->overhead_gib >= 0)
        o->overhead_bytes = (int64_t)(c->overhead_gib * 1073741824.0);
}

/*
 * The global batch when none is given: ~4M tokens (Llama 2 and Llama 3 405B's initial
 * batch, Touvron et al. 2023 Sec. 2.2, Dubey et al. 2024 Sec. 3.4.1), a power of two in
 * sequences; then the nearest multiple of `unit`.
 */
int64_t cli_default_gbs(int64_t seq_len, int64_t unit)
{
    double want = 4.0 * 1024 * 1024 / (double)seq_len;
    int64_t g = 1;
    while ((double)(g * 2) <= want * 1.42)
        g *= 2;
    if (unit > 1) {
        int64_t k = (g + unit / 2) / unit;
        g = (k < 1 ? 1 : k) * unit;
    }
    return g;
}

void cli_defaults_fill(const struct cli_common *c, const struct dp_model *m, struct cli_defaults *d)
{
    memset(d, 0, sizeof *d);
    if (c->system && !c->nodes)
        snprintf(d->nodes, sizeof d->nodes, "1 node");
    if (!c->seq_len && m)
        snprintf(d->seq, sizeof d->seq, "%s",
                 m->seq_len_from[0] ? m->seq_len_from : "the model's seq_len");
}

void cli_describe_batch(FILE *f, int64_t gbs, int64_t seq_len, const struct cli_defaults *d)
{
    fprintf(f, "batch    %lld sequences x %lld tokens", (long long)gbs, (long long)seq_len);
    if (d && d->gbs[0])
        fprintf(f, " (--gbs not given: %s)", d->gbs);
    fputc('\n', f);
    if (d && d->seq[0])
        fprintf(f, "seq      %lld (--seq-len not given: %s)\n", (long long)seq_len, d->seq);
}

void cli_defaults_json(cJSON *o, const struct cli_defaults *d)
{
    cJSON *e = cJSON_AddObjectToObject(o, "defaults");
    if (d->nodes[0])
        cJSON_AddStringToObject(e, "nodes", d->nodes);
    if (d->seq[0])
        cJSON_AddStringToObject(e, "seq_len", d->seq);
    if (d->gbs[0])
        cJSON_AddStringToObject(e, "gbs", d->gbs);
}

int cli_search_opts(const struct cli_common *c, const struct dp_model *m, struct dp_search_opts *o,
                    struct cli_defaults *d)
{
    dp_search_opts_default(o);
    o->tp = c->tp;
    o->pp = c->pp;
    o->dp = c->dp;
    o->cp = c->cp;
    o->ep = c->ep;
    o->vpp = c->vpp;
    o->mbs = c->mbs;
    o->zero = c->zero;
    o->recompute = c->recompute;
    if (c->framework >= 0)
        o->framework = (enum dp_framework)c->framework;
    if (c->loss >= 0)
        o->loss = (enum dp_loss)c->loss;
    if (c->shard_group > 0)
        o->shard_group = c->shard_group;
    if (c->instances > 0)
        return cli_usage_error("suggest",
                               "--num-distributed-optimizer-instances: the search varies dp; give "
                               "the shard group instead (--shard-group N)");
    if (c->recompute_method >= 0 || c->recompute_layers || c->recompute_modules)
        return cli_usage_error("suggest", "--recompute-method, --recompute-layers and "
                                          "--recompute-modules fix a layout; the search tries "
                                          "each framework's named policies");
    o->sp = c->sp ? 1 : -1;
    o->seq_len = c->seq_len ? c->seq_len : m->seq_len;
    o->gbs = c->gbs ? c->gbs : cli_default_gbs(o->seq_len, 1);
    if (d) {
        cli_defaults_fill(c, m, d);
        if (!c->gbs)
            snprintf(d->gbs, sizeof d->gbs, "~4M tokens");
    }
    if (c->precision >= 0)
        o->precision = (enum dp_precision)c->precision;
    o->gemm = c->gemm == -2 ? -1 : c->gemm >= 0 ? c->gemm : DP_GEMM_DEFAULT;
    o->fp8_recipe = c->fp8_recipe >= 0 ? (enum dp_fp8_recipe)c->fp8_recipe : DP_FP8_DELAYED;
    o->fp8_params = c->fp8_params;
    o->grad_fp32 = c->grad_fp32;
    o->flash_attn = !c->no_flash;
    o->dp_overlap = !c->no_dp_overlap;
    o->tp_overlap = c->tp_overlap;
    o->overlap_param_gather = c->opg;
    o->pp_overlap = c->pp_overlap;
    if (c->optimizer >= 0)
        o->optimizer = (enum dp_optimizer)c->optimizer;
    o->etp = c->etp;
    o->moe_capacity = c->moe_capacity;
    o->moe_pad = c->moe_pad;
    if (c->moe_imbalance >= 0)
        o->moe_imbalance = c->moe_imbalance;
    if (c->dispatcher >= 0)
        o->moe_dispatcher = (enum dp_moe_dispatcher)c->dispatcher;
    cli_mem_opts(c, &o->mem);
    return 0;
}

const char *cli_count_short(int64_t n, char *buf, size_t cap)
{
    double v = (double)n;
    if (v >= 1e12)
        snprintf(buf, cap, "%.2fT", v / 1e12);
    else if (v >= 1e9)
        snprintf(buf, cap, "%.2fB", v / 1e9);
    else if (v >= 1e6)
        snprintf(buf, cap, "%.2fM", v / 1e6);
    else if (v >= 1e3)
        snprintf(buf, cap, "%.2fK", v / 1e3);
    else
        snprintf(buf, cap, "%lld", (long long)n);
    return buf;
}

int cli_resolve(const struct cli_common *c, const char *model_arg, struct dp_model *m,
                struct dp_cluster *cl, struct dp_layout *l, struct cli_defaults *d,
                struct dp_err *err)
{
    struct cli_defaults dd;
    if (!d)
        d = &dd;
    cli_defaults_fill(c, NULL, d);
    if (!c->plan) {
        if (!model_arg)
            return dp_err_set(err, DP_EUSAGE, "expected a MODEL argument (or --plan FILE)");
        int rc = dp_model_load(model_arg, m, err);
        if (!rc)
            rc = cli_cluster(c, cl, err);
        if (!rc)
            rc = cli_layout(c, m, dp_cluster_gpus(cl), l, err);
        if (!rc && (rc = dp_model_check_seq_len(m, l->seq_len, err)))
            dp_err_prefix(err, "%s", m->name);
        if (!rc)
            rc = cli_check_knobs(c, l, &cl->gpu, err);
        if (rc)
            return rc;
        cli_defaults_fill(c, m, d);
        if (!c->gbs) {
            /* suggest's default batch, rounded so that this layout divides it */
            int64_t unit = l->mbs * l->dp * (l->vpp > 1 ? l->pp : 1);
            int64_t want = cli_default_gbs(l->seq_len, 1);
            l->gbs = cli_default_gbs(l->seq_len, unit);
            if (l->gbs == want)
                snprintf(d->gbs, sizeof d->gbs, "~4M tokens");
            else
                snprintf(d->gbs, sizeof d->gbs,
                         "~4M tokens, %lld rounded to the nearest multiple of mbs x dp%s = %lld",
                         (long long)want, l->vpp > 1 ? " x pp" : "", (long long)unit);
        }
        return 0;
    }
    if (model_arg)
        return dp_err_set(err, DP_EUSAGE, "give either MODEL or --plan, not both");
    for (int k = OPT_TP; k < OPT_COMMON_END; k++)
        if (k != OPT_OVERHEAD && k != OPT_JSON && k != OPT_PLAN && c->knob_given[k - OPT_SYSTEM])
            return dp_err_set(err, DP_EUSAGE,
                              "layout options cannot be combined with --plan (the plan fixes the "
                              "layout; edit the plan or use MODEL and knobs)");
    struct dp_plan *p = malloc(sizeof *p);
    if (!p)
        return dp_err_set(err, DP_ENOMEM, "out of memory");
    int rc = dp_plan_load(c->plan, p, err);
    if (rc) {
        free(p);
        return rc;
    }
    *m = p->model;
    *l = p->layout;
    if (cli_has_cluster(c))
        rc = cli_cluster(c, cl, err);
    else if (p->has_cluster)
        *cl = p->cluster;
    else
        rc = dp_err_set(err, DP_EUSAGE,
                        "%s has no cluster: add --system NAME --nodes N, --gpu NAME --gpus N or "
                        "--cluster FILE",
                        c->plan);
    free(p);
    if (!rc && dp_cluster_gpus(cl) != l->tp * l->pp * l->dp * l->cp)
        rc = dp_err_set(err, DP_EINFEASIBLE,
                        "the plan's layout needs tp*pp*dp*cp = %d GPUs, the cluster has %d",
                        l->tp * l->pp * l->dp * l->cp, dp_cluster_gpus(cl));
    if (!rc) {
        char field[4200];
        snprintf(field, sizeof field, "%s: layout.gemm_precision", c->plan);
        rc = dp_layout_check_gpu(l, &cl->gpu, field, err);
    }
    return rc;
}

double cli_gib(int64_t bytes)
{
    return (double)bytes / (1024.0 * 1024.0 * 1024.0);
}

void cli_print_json(cJSON *root)
{
    char *s = cJSON_Print(root);
    if (s) {
        fputs(s, stdout);
        fputc('\n', stdout);
        free(s);
    }
    cJSON_Delete(root);
}

void cli_describe_model(FILE *f, const struct dp_model *m)
{
    char cnt[32];
    struct dp_param_count pc;
    dp_model_count(m, &pc);
    fprintf(f, "model    %s: %s params, %lld layers, hidden %lld\n", m->name,
            cli_count_short(pc.total, cnt, sizeof cnt), (long long)m->layers, (long long)m->hidden);
}

void cli_describe_cluster(FILE *f, const struct dp_cluster *c, const struct cli_defaults *d)
{
    fprintf(f, "cluster  %s: %d node%s x %d %s (%.1f GiB, %.1f GiB usable), %s %.0f GB/s/dir",
            c->name, c->nodes, c->nodes == 1 ? "" : "s", c->gpus_per_node, c->gpu.name,
            cli_gib(c->gpu.mem_bytes), cli_gib(dp_gpu_usable_bytes(&c->gpu)), c->intra.name,
            c->intra.bw_gbps);
    if (c->nodes > 1)
        fprintf(f, ", %d x %s per node", c->nics_per_node, c->inter.name);
    if (d && d->nodes[0])
        fprintf(f, " (--nodes not given: %s)", d->nodes);
    fputc('\n', f);
}

void cli_describe_framework(FILE *f, const struct dp_layout *l)
{
    int pb, gb, ob;
    dp_mem_bytes_per_param(l, &pb, &gb, &ob);
    const char *gran = l->framework == DP_FW_TORCHTITAN ? "collectives per block"
                       : l->framework == DP_FW_DEEPSPEED
                           ? (l->zero >= 3 ? "gathers per sub-module, "
                                             "5e8-element reduce buckets"
                                           : "5e8-element buckets")
                       : l->zero >= 2 ? "collectives per layer (Megatron-FSDP)"
                                      : "40M-parameter buckets";
    char hsdp[96] = "";
    if (dp_layout_replicas(l) > 1)
        snprintf(hsdp, sizeof hsdp, ", HSDP %d x %d (shard x replicate)", dp_layout_shard(l),
                 dp_layout_replicas(l));
    char rc[96];
    if (l->recompute == DP_RECOMPUTE_SELECTIVE) {
        char mods[96];
        dp_recompute_modules_format(l->recompute_modules, mods, sizeof mods);
        snprintf(rc, sizeof rc, "selective (%s)", mods);
    } else if (l->recompute == DP_RECOMPUTE_FULL && l->recompute_method == DP_RC_EVERY)
        snprintf(rc, sizeof rc, "full, every %d-th layer", l->recompute_layers);
    else if (l->recompute == DP_RECOMPUTE_FULL && l->recompute_method == DP_RC_UNIFORM)
        snprintf(rc, sizeof rc, "full, uniform chunks of %d",
                 l->recompute_layers > 1 ? l->recompute_layers : 1);
    else if (l->recompute == DP_RECOMPUTE_FULL && l->recompute_layers > 0)
        snprintf(rc, sizeof rc, "full, first %d layers per stage", l->recompute_layers);
    else
        snprintf(rc, sizeof rc, "%s",
                 l->recompute == DP_RECOMPUTE_OP ? "per-op SAC" : dp_recompute_name(l->recompute));
    fprintf(f, "framework %s: %d+%d+%d B/param%s, %s%s, recompute %s, %s loss\n",
            dp_framework_name(l->framework), pb, gb, ob, l->zero ? " before sharding" : "", gran,
            hsdp, rc, dp_loss_name(dp_layout_loss(l)));
}

void cli_describe_search_framework(FILE *f, const struct dp_search_opts *o, bool given)
{
    int rcs[DP_RECOMPUTES];
    int n = dp_recompute_choices(o->framework, rcs);
    char rc[96] = "";
    size_t k = 0;
    for (int i = 0; i < n && k < sizeof rc; i++)
        k += (size_t)snprintf(rc + k, sizeof rc - k, "%s%s", i ? ", " : "",
                              dp_recompute_name((enum dp_recompute)rcs[i]));
    char sg[64];
    if (o->shard_group > 0)
        snprintf(sg, sizeof sg, "shard group %d", o->shard_group);
    else
        snprintf(sg, sizeof sg, "full sharding and node-sized HSDP groups");
    struct dp_layout l;
    dp_layout_default(&l);
    l.framework = o->framework;
    l.loss = o->loss;
    fprintf(f, "framework %s%s: recompute searched over %s; %s; %s loss\n",
            dp_framework_name(o->framework), given ? "" : " (--framework not given)", rc, sg,
            dp_loss_name(dp_layout_loss(&l)));
}

void cli_describe_layout(FILE *f, const struct dp_layout *l, const struct dp_model *m)
{
    char buf[256];
    dp_layout_format_model(l, m, buf, sizeof buf);
    char prec[96];
    enum dp_gemm g = dp_layout_gemm(l);
    if (g == DP_GEMM_FP8)
        snprintf(prec, sizeof prec, "%s with fp8 GEMMs (%s scaling%s)",
                 dp_precision_name(l->precision), dp_fp8_recipe_name(l->fp8_recipe),
                 l->fp8_params ? ", fp8 weights" : "");
    else if (l->gemm != DP_GEMM_DEFAULT)
        snprintf(prec, sizeof prec, "%s with %s GEMMs", dp_precision_name(l->precision),
                 dp_gemm_name(g));
    else
        snprintf(prec, sizeof prec, "%s", dp_precision_name(l->precision));
    fprintf(f, "layout   %s gbs=%lld seq=%lld %s, %lld micro-batch%s per step\n", buf,
            (long long)l->gbs, (long long)l->seq_len, prec, (long long)dp_layout_microbatches(l),
            dp_layout_microbatches(l) == 1 ? "" : "es");
    char ov[160] = "";
    size_t n = 0;
    if (l->tp > 1 && l->sp)
        n += (size_t)snprintf(ov + n, sizeof ov - n, "%stp %s", n ? ", " : "",
                              l->tp_overlap ? "overlapped" : "exposed");
    if (l->dp * l->cp > 1)
        n += (size_t)snprintf(ov + n, sizeof ov - n, "%sgradient reduction %s", n ? ", " : "",
                              l->dp_overlap ? "overlapped" : "exposed");
    if (l->zero >= 1 && l->dp * l->cp > 1)
        n += (size_t)snprintf(ov + n, sizeof ov - n, "%sparameter gather %s", n ? ", " : "",
                              l->overlap_param_gather ? "overlapped" : "exposed");
    if (l->vpp > 1)
        snprintf(ov + n, sizeof ov - n, "%spipeline send/recv %s", n ? ", " : "",
                 l->pp_overlap ? "overlapped" : "exposed");
    if (ov[0])
        fprintf(f, "overlap  %s\n", ov);
    cli_describe_framework(f, l);
    if (m->experts > 0) {
        char route[96];
        if (l->moe_capacity > 0)
            snprintf(route, sizeof route, "capacity factor %.2f%s", l->moe_capacity,
                     l->moe_pad ? ", padded" : "");
        else
            snprintf(route, sizeof route, "dropless, imbalance %.3f%s", dp_moe_load(m, l),
                     l->moe_imbalance > 0 ? "" : " (routing statistics)");
        fprintf(f,
                "experts  etp=%d ep=%d edp=%d, %s, %s dispatch: %.0f token copies per GPU per "
                "micro-batch (load %.2f)\n",
                dp_layout_etp(l), l->ep, dp_layout_edp(l), route,
                dp_dispatcher_name(l->moe_dispatcher), dp_moe_rows(m, l), dp_moe_load(m, l));
    }
}
