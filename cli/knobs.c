/*
 * The options every planning subcommand shares: the cluster and plan-knob help
 * texts, the knob defaults (cli_common_init), the parsing of each knob option
 * (cli_common_opt) and the getopt loop that hands them over (cli_next_opt).
 */
#include "cli.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

const char cli_cluster_help[] =
    "Cluster (one of):\n"
    "  --system NAME --nodes N     a node type from profiles/system (e.g. dgx-h100)\n"
    "  --gpu NAME --gpus N         GPUs from profiles/gpu; --gpus-per-node K (default 8),\n"
    "                              --intra LINK (default: the GPU's own link)\n"
    "  --cluster FILE.json         a cluster file (from `dplan topo -o`)\n"
    "  --calibration FILE.json     a `dplan calibrate` profile: alone, the machine it\n"
    "                              measured (e.g. N CPU ranks of this host); with another\n"
    "                              cluster option, its fitted GEMM curve (same GPU) and\n"
    "                              all-reduce busbw and latency (same link) laid over it\n"
    "                              (check: only the busbw expectation, see above)\n"
    "  (none)                      this machine, read as `dplan topo` reads it (hwloc, then\n"
    "                              NVML), at --nodes N of its kind, when it has GPUs\n"
    "  --network NAME              inter-node network (profiles/network)\n";

/* The pipeline-split options. */
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
    "  --first-stage-layers N --last-stage-layers N  the first/last stage's layers (Megatron's\n"  \
    "                              --decoder-first-pipeline-num-layers and\n"                      \
    "                              --decoder-last-pipeline-num-layers, aliases); the middle\n"     \
    "                              stages share the rest evenly\n"                                 \
    "  --account-for-embedding-in-pipeline-split, --account-for-loss-in-pipeline-split\n"          \
    "                              Megatron: the embedding/loss counts as a layer\n"               \
    "  --first-stage-less-layers N --last-stage-less-layers N  torchtitan's split (each\n"         \
    "                              defaults to 1 when the other is given): the\n"                  \
    "                              embedding/output weigh N layers, the rest spreads\n"

/* The framework and sharding options. */
#define CLI_FRAMEWORK_HELP                                                                         \
    "Framework and sharding (never searched but --shard-group, --pipeline-schedule auto):\n"       \
    "  --framework {megatron,torchtitan,deepspeed}  the stack that runs the plan: its bytes\n"     \
    "                              per parameter, collectives, recompute policies, loss and\n"     \
    "                              allocator [megatron]\n"                                         \
    "  --shard-group N             HSDP: ZeRO/FSDP shards within groups of N of the dp x cp\n"     \
    "                              ranks and replicates across them; also\n"                       \
    "                              --data-parallel-shard-degree N (torchtitan), "                  \
    "--mics-shard-size "                                                                           \
    "N\n"                                                                                          \
    "                              (DeepSpeed), --num-distributed-optimizer-instances M "          \
    "(Megatron:\n"                                                                                 \
    "                              N = dp x cp / M) [all ranks; suggest also tries groups]\n"      \
    "  --recompute-method {block,uniform,every}  with --recompute full: the first N layers of\n"   \
    "                              each stage, every layer in chunks of N, or every N-th layer\n"  \
    "                              (torchtitan selective_ac_option N) [block]\n"                   \
    "  --recompute-layers N        that N [block: all layers]\n"                                   \
    "  --recompute-modules LIST    with --recompute selective: Megatron's recompute_modules\n"     \
    "                              (core_attn,mlp,layernorm,moe_act,moe,shared_experts,\n"         \
    "                              mla_up_proj) [core_attn]\n"                                     \
    "  --loss {vocab-parallel,fused,unfused,fused-native,compiled}  cross entropy: fused =\n"      \
    "                              TE's in-place kernel, fused-native = Megatron's native\n"       \
    "                              fusion, compiled = torchtitan's under torch.compile\n"          \
    "                              [megatron: vocab-parallel; torchtitan, deepspeed: unfused]\n"   \
    "  --loss-chunks N             torchtitan: the output layer and loss on N equal slices\n"      \
    "                              of the tokens in turn (ChunkedLossWrapper) [1]\n"               \
    "  --local-batch N             torchtitan with pp > 1: one pipeline schedule per N\n"          \
    "                              sequences of a data-parallel rank, each a gradient-\n"          \
    "                              accumulation step with its own fill and drain [gbs / dp]\n"     \
    "  --mtp-layers N              Megatron: N multi-token-prediction layers on the loss's\n"      \
    "                              stage (--mtp-num-layers; DeepSeek-V3 trains with 1),\n"         \
    "                              each a 2h -> h projection, one more layer, the output\n"        \
    "                              layer and a loss again [0]\n"                                   \
    "  --pipeline-schedule {1f1b,dualpipev,auto}  [1f1b: Megatron's, interleaved with --vpp];\n"   \
    "                              dualpipev (torchtitan, PithTrain): --vpp 2 in a V, the\n"       \
    "                              embedding and loss on rank 0, overlapped forward-backward\n"    \
    "                              pairs hiding the expert all-to-alls; auto: `suggest`,\n"        \
    "                              `whatif` try both (torchtitan)\n"                               \
    "  --fsdp-per-microbatch       torchtitan with pp > 1: FSDP gathers and reduce-scatters\n"     \
    "                              every micro-batch, as NeMo Automodel's pipeline stages do\n"    \
    "                              (their root is not the FSDP module) [once per schedule]\n"

/* Precision, overlap and mixture-of-experts options. */
#define CLI_PRECISION_HELP                                                                         \
    "  --precision {bf16,fp16,fp32,fp8} [bf16]: fp8 = bf16 weights and activations with the\n"     \
    "                              linear layers' GEMMs in FP8 (attention, norms and the output\n" \
    "                              layer stay bf16); `suggest --precision auto` also tries fp8\n"  \
    "  --fp8-recipe {delayed,current,rowwise,blockwise,mxfp8}  FP8 scaling [delayed;\n"            \
    "                              rowwise under --framework torchtitan];\n"                       \
    "                              current = per-tensor current scaling (torchao tensorwise)\n"    \
    "  --fp8-params                weights kept and gathered in FP8 (--fp8-param-gather)\n"        \
    "  --fp8-output-proj           with mxfp8: the output layer's GEMMs in FP8 too\n"              \
    "  --fp8-attention             with fp8 (megatron, cudnn attention): the attention's dot\n"    \
    "                              products in FP8 too (--fp8-dot-product-attention)\n"            \
    "  --grad-dtype {fp32,half}    gradient accumulation [fp32; half for fp16 and deepspeed];\n"   \
    "                              torchtitan: FSDP2's reduce_dtype (half: bf16, as Automodel)\n"  \
    "  --optimizer {adam,sgd,muon} [adam]; muon: Newton-Schulz-orthogonalized momentum for the\n"  \
    "                              layers' matrices, Adam for embedding and output layer\n"        \
    "  --no-flash-attn             attention stores the s^2 score matrices\n"

#define CLI_OVERLAP_HELP                                                                           \
    "  --no-dp-overlap             gradient reduction after backward, not overlapped\n"            \
    "  --[no-]overlap-param-gather distributed-optimizer/FSDP weight all-gather overlapped\n"      \
    "                              with the forward [on, off with --no-dp-overlap]\n"              \
    "  --[no-]tp-overlap           TP collectives pipelined with their GEMMs (Megatron\n"          \
    "                              --tp-comm-overlap; needs --sp) [on with --sp]\n"                \
    "  --[no-]pp-overlap           pipeline send/recv overlapped with compute (Megatron\n"         \
    "                              overlap_p2p_comm; needs --vpp > 1) [on with --vpp > 1]\n"       \
    "  --overhead-gib X            runtime memory per GPU, replacing the CUDA context, NCCL\n"     \
    "                              buffers, workspaces and allocator slack [computed]\n"           \
    "  --memory-margin PCT         headroom a layout keeps, in % of the usable memory: the\n"      \
    "                              searches (suggest, whatif, --min-gpus) count only layouts\n"    \
    "                              that keep it as fitting, estimate and memory call a layout\n"   \
    "                              that fits without it tight; 0 = the memory model's bare\n"      \
    "                              verdict [5: about the model's measured error]\n"

#define CLI_MOE_HELP                                                                               \
    "Mixture of experts (never searched):\n"                                                       \
    "  --etp N                     expert tensor parallel size [tp]; the expert layers\n"          \
    "                              regroup each stage's tp*cp*dp ranks as etp*ep*edp\n"            \
    "  --moe-capacity F            expert capacity factor (tokens beyond it are dropped)\n"        \
    "                              [0: dropless]; --moe-pad pads every expert to it\n"             \
    "  --moe-imbalance F           dropless: the busiest EP rank's routed tokens over the\n"       \
    "                              mean [balanced routing's sampling spread, 1 + sqrt(2 ln ep\n"   \
    "                              (1 - 1/ep) / (T k)); 1 for forced-balanced routing]\n"          \
    "  --moe-dispatcher {alltoall,dedup}  token dispatch: one copy per (token, expert), or\n"      \
    "                              one per destination GPU and node (DeepEP, HybridEP)\n"          \
    "                              [alltoall]\n"                                                   \
    "  --moe-routing {random,round-robin}  which experts a token's copies reach: k drawn at\n"     \
    "                              random, or k neighbouring ones (NeMo Automodel's\n"             \
    "                              FakeBalancedGate); decides dedup's copies [random]\n"           \
    "  --ep-overlap                Megatron --overlap-moe-expert-parallel-comm: in the 1F1B\n"     \
    "                              steady state each all-to-all runs beside the compute of\n"      \
    "                              another micro-batch (needs vpp > 1 with pp > 1) [off]\n"

// clang-format off
/* The knobs as the planning commands read them (`dplan run` documents what the executor
 * runs in its own help, cmd_run.c). */
const char cli_plan_knob_help[] =
    "Plan knobs (defaults in brackets):\n"
    "  --tp N --pp N --cp N --ep N parallel degrees [1]; --dp N [what the GPU count leaves]\n"
    "  --vpp N                     model chunks per pipeline rank (interleaved 1F1B) [1]\n"
    "  --mbs N                     micro-batch size in sequences [1]\n"
    "  --gbs N                     global batch in sequences [~4M tokens, 2^k sequences\n"
    "                              times the GPU count's odd factor (72 GPUs: 9 x 2^k);\n"
    "                              estimate and memory: its nearest multiple of mbs*dp]\n"
    "  --seq-len N                 sequence length [the model's training length: model.json's\n"
    "                              seq_len; for a config.json rope_scaling's original length,\n"
    "                              else max_position_embeddings capped at 8192]\n"
    "  --zero {0,1,2,3}            ZeRO stage; 1 = Megatron distributed optimizer [0]\n"
    "  --recompute {none,selective,full,op}  activation recomputation: op = torchtitan's\n"
    "                              per-op selective checkpointing [none]\n"
    "  --sp                        sequence parallelism (with tp > 1)\n"
    CLI_PRECISION_HELP
    CLI_OVERLAP_HELP
    CLI_SPLIT_HELP
    CLI_FRAMEWORK_HELP
    CLI_MOE_HELP
    "The defaults taken are printed (\"--nodes not given: ...\") and listed under\n"
    "\"defaults\" in --json.\n";

// clang-format on

void cli_common_init(struct cli_common *c)
{
    memset(c, 0, sizeof *c);
    c->recompute = c->precision = c->grad_fp32 = c->optimizer = c->dispatcher = c->routing = -1;
    c->framework = c->recompute_method = c->loss = -1;
    c->gemm = c->fp8_recipe = -1;
    c->tp_overlap = c->opg = c->pp_overlap = -1;
    c->overhead_gib = -1;
    c->memory_margin = -1;
    c->moe_imbalance = -1;
    c->zero = -1;
    c->first_less = c->last_less = -1;
    c->mtp_layers = -1;
    c->schedule = -1;
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
    static const char *const opt_names[] = {"adam", "sgd", "muon"};
    static const char *const disp_names[] = {"alltoall", "dedup"};
    static const char *const routing_names[] = {"random", "round-robin"};
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
    case OPT_CAL_FILE: c->calibration = arg; break;
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
    case OPT_LOCAL_BATCH:
        r = parse_long(cmd, "local-batch", arg, 1, 1LL << 40, &c->local_batch);
        break;
    case OPT_LOSS_CHUNKS:
        r = parse_int(cmd, "loss-chunks", arg, 1, 1 << 16, &c->loss_chunks);
        break;
    case OPT_FSDP_PER_MICROBATCH: c->fsdp_per_microbatch = true; break;
    case OPT_PP_SCHEDULE: {
        static const char *const sched_names[] = {"1f1b", "dualpipev", "auto"};
        r = parse_choice(cmd, "pipeline-schedule", arg, sched_names, 3, &c->schedule);
        break;
    }
    case OPT_MTP_LAYERS:
        r = parse_int(cmd, "mtp-layers", arg, 0, DP_MAX_MTP, &c->mtp_layers);
        break;
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
    case OPT_FP8_OUTPUT: c->fp8_output = true; break;
    case OPT_FP8_ATTENTION: c->fp8_attention = true; break;
    case OPT_TP_OVERLAP: c->tp_overlap = 1; break;
    case OPT_NO_TP_OVERLAP: c->tp_overlap = 0; break;
    case OPT_OPG: c->opg = 1; break;
    case OPT_NO_OPG: c->opg = 0; break;
    case OPT_PP_OVERLAP: c->pp_overlap = 1; break;
    case OPT_NO_PP_OVERLAP: c->pp_overlap = 0; break;
    case OPT_GRAD_DTYPE:
        r = parse_choice(cmd, "grad-dtype", arg, grad_names, 2, &c->grad_fp32);
        break;
    case OPT_OPTIMIZER: r = parse_choice(cmd, "optimizer", arg, opt_names, 3, &c->optimizer); break;
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
    case OPT_MEMORY_MARGIN:
        r = parse_double(cmd, "memory-margin", arg, 0, 50, "percent in [0, 50]", &c->memory_margin);
        if (r == 0)
            c->memory_margin /= 100;
        break;
    case OPT_ETP: r = parse_int(cmd, "etp", arg, 1, 1 << 20, &c->etp); break;
    case OPT_MOE_CAPACITY:
        r = parse_double(cmd, "moe-capacity", arg, 0, 1000, "capacity factor >= 0 (0: dropless)",
                         &c->moe_capacity);
        break;
    case OPT_MOE_PAD: c->moe_pad = true; break;
    case OPT_EP_OVERLAP: c->ep_overlap = true; break;
    case OPT_MOE_DISPATCHER:
        r = parse_choice(cmd, "moe-dispatcher", arg, disp_names, 2, &c->dispatcher);
        break;
    case OPT_MOE_ROUTING:
        r = parse_choice(cmd, "moe-routing", arg, routing_names, 2, &c->routing);
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
