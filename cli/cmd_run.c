/*
 * dplan run PLAN.json|MODEL [options]: train for real on the CPU backend.
 *
 * Started by hand with more than one rank (or with --max-restarts), it has
 * the launcher start its ranks (launch/, run_job.c); under mpirun or srun,
 * and as a rank of the launcher, each process is one rank (run_rank.c). It
 * prints one JSON line per step (rank 0, or every rank with --log-all-ranks)
 * to stdout and the log file, a progress bar on a terminal, and at the end a
 * summary comparing measured step time and memory with the predictions
 * (stderr), summary.json, plan.json and model.safetensors in the output
 * directory. It does not plan: the layout comes from the plan or the knobs.
 * --dry-run prints the rank map and what to set on real clusters instead.
 */
#include "cli.h"
#include "dry_run.h"
#include "fit/fit.h"
#include "run.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static const char help_head[] =
    "usage: dplan run PLAN.json [options]\n"
    "       dplan run MODEL [knobs] [options]\n\n"
    "Train the model under the plan's layout (data, tensor, sequence and pipeline\n"
    "parallel, micro-batches, recompute, ZeRO-1/2/3, HSDP) on the CPU backend: MPI between\n"
    "ranks, OpenBLAS and OpenMP inside each. Started by hand it launches its ranks\n"
    "with mpirun; under mpirun or srun each process is one rank. The world size is\n"
    "tp*pp*dp*cp. It stores in fp32 unless --precision says bf16, fp16 or fp8 (a plan\n"
    "file's precision too: runs as fp32 without the option).\n\n"
    "  --np N              ranks to launch (must equal the plan's world size)\n"
    "  --steps N           optimizer steps [50]\n"
    "  --data FILE         llm.c .bin token shard or raw uint16 tokens\n"
    "                      [the texts under /usr/share/common-licenses, byte-tokenised]\n"
    "  --data-format F     auto, llmc or raw [auto: llm.c if the magic is there]\n"
    "  --out DIR           model.safetensors, log.jsonl, summary.json, plan.json\n"
    "                      [$XDG_STATE_HOME/dplan/runs/MODEL-DATE-TIME, said when used;\n"
    "                      never the current directory; given explicitly under mpirun/srun]\n"
    "  --log FILE          the JSON log [OUT/log.jsonl]\n"
    "  --log-all-ranks     every rank logs (rank R > 0 to FILE.rankR)\n"
    "  --seed S            initialisation seed [1234]\n"
    "  --lr X              peak learning rate [1e-3]; --warmup N steps [0];\n"
    "  --min-lr-frac X     cosine decay to lr*X at the last step [0.1; 1 = constant]\n"
    "  --wd X              AdamW weight decay on 2-D weights [0.1]\n"
    "  --clip X            gradient clipping by global norm [1.0; 0 = off]\n"
    "  --precision P       fp32, bf16 or fp16: what the working copy of the weights, the\n"
    "                      activations, their gradients and the TP/PP messages are stored\n"
    "                      in (2-byte words: the working weights but under ZeRO-3, the\n"
    "                      activations kept for backward but with experts or full\n"
    "                      recompute; the rest rounded to nearest even in fp32 buffers);\n"
    "                      master weights, gradients and AdamW state stay fp32 [fp32,\n"
    "                      with a plan file too]; fp8: bf16 storage with the\n"
    "                      transformer layers' linear GEMMs in FP8\n"
    "                      (Transformer Engine's current per-tensor scaling, E4M3\n"
    "                      activations and weights, E5M2 gradients; the attention core,\n"
    "                      norms and output layer stay bf16; exact emulation on the cpu)\n"
    "  --fp8-recipe current  the only FP8 recipe the executor runs [current]\n"
    "  --initial-loss-scale X  fp16: the dynamic loss scale to start from (then halved\n"
    "                      after 2 overflows in a row, doubled after 1000 clean steps:\n"
    "                      Megatron's defaults) [4294967296 = 2^32]\n"
    "  --overlap-grad-reduce on|off  reduce the data-parallel gradients in buckets while\n"
    "                      the backward runs (ZeRO 0 and 1; Megatron's --overlap-grad-reduce),\n"
    "                      or after it; on refuses a layout it cannot overlap [the layout's\n"
    "                      dp_overlap: on unless the plan or --no-dp-overlap says otherwise;\n"
    "                      blocking under zero 2/3]\n"
    "  --ddp-bucket-size N elements per gradient bucket, consecutive layers from the last\n"
    "                      [Megatron's max(40000000, 1000000*dp*cp)]\n"
    "  --backend NAME      cpu (the default); cuda (NCCL), cuda-mpi (collectives staged over\n"
    "                      MPI, ranks may share a GPU) in builds with CUDA: docs/gpu.md\n"
    "  --attention A       math: softmax(q k^T) kept as T x T probabilities for backward;\n"
    "                      flash: tiled with an online softmax, only each row's log-sum-exp\n"
    "                      kept, the probabilities rebuilt in backward (FlashAttention-2);\n"
    "                      auto: the backend's (cpu math, cuda flash); with --cp the ring\n"
    "                      attention either way [auto]\n"
    "  --threads N         compute threads per rank [OMP_NUM_THREADS, else the node's\n"
    "                      cores / its ranks]\n"
    "  --timeout S         a rank that makes no progress for S seconds ends the job (and\n"
    "                      with --max-restarts is relaunched) [300; 60 before step 1]\n"
    "  --hang-timeout S    the same as --timeout (deprecated; goes in a later release)\n"
    "  --calibration FILE  predict the step time from a `dplan calibrate --backend cpu`\n"
    "                      profile of this machine (its kernel costs at the run's thread\n"
    "                      split, its fitted collectives) instead of a probe after the run\n"
    "  --hostfile FILE     launch the ranks on the hosts of FILE (mpirun --hostfile)\n"
    "  --ranks-per-node K  ranks per host with --hostfile and in --dry-run's lines\n"
    "                      [the plan's GPUs per node, else all on one]\n"
    "  --dry-run           print the rank map, each rank's groups, each stage's 1F1B order\n"
    "                      (interleaved: micro-batch and model chunk of each pass),\n"
    "                      the predicted memory per rank, and the hostfile, mpirun and\n"
    "                      Slurm lines that run this on a cluster; start nothing, write nothing\n"
    "\nThe environment variables and exit codes of the ranks: docs/rank-protocol.md.\n\n";

static const char run_knob_help[] =
    "Layout knobs, with a MODEL (a plan file brings its own layout):\n"
    "  --tp N --pp N --dp N  tensor, pipeline and data parallel degrees [1; --dp: --np / "
    "(tp*pp*cp)]\n"
    "  --mbs N               micro-batch size in sequences [1]\n"
    "  --gbs N               global batch in sequences [mbs*dp*pp]; at most the windows\n"
    "                        of seq_len tokens in the data\n"
    "  --seq-len N           sequence length [the model's]\n"
    "  --zero {0,1,2,3}      ZeRO stage: 1 shards the AdamW state over dp, 2 also the\n"
    "                        gradients (reduce-scattered per layer), 3 also the parameters\n"
    "                        (gathered per layer before forward and backward) [0]\n"
    "  --shard-group N       HSDP: shard within groups of N dp ranks, all-reduce across\n"
    "                        the groups (zero >= 1; N divides dp*cp) [dp*cp]\n"
    "  --recompute {none,selective,full}  activation recomputation [none]\n"
    "  --sp                  sequence parallelism (with tp > 1)\n"
    "  --first-stage-layers N --last-stage-layers N   uneven pipeline split\n"
    "  --vpp N               interleaved 1F1B: N model chunks per stage (micro-batches a\n"
    "                        multiple of pp; at least one layer in every chunk) [1]\n"
    "  --stage-layers LIST   layers per stage, or per model chunk with vpp > 1\n"
    "  --cp N                context parallelism: each sequence in 2*cp chunks (rank i\n"
    "                        holds chunks i and 2*cp-1-i), ring attention over the cp\n"
    "                        ranks; seq_len a multiple of 2*cp; ZeRO shards span dp*cp [1]\n"
    "  --ep N                mixture-of-experts models: expert parallel degree; with\n"
    "                        --etp, ep*etp divides tp*cp*dp (Megatron-Core's folding of\n"
    "                        each stage's ranks into etp x ep x edp); with --zero the\n"
    "                        expert state is sharded over the edp ranks [1]\n"
    "  --etp N               expert tensor parallel degree: divides tp, below tp with\n"
    "                        --sp only [tp]\n"
    "  --moe-capacity F      expert capacity factor; 0: dropless (with etp < tp: 0 only)\n"
    "                        [0]\n"
    "  --optimizer adam      accepted: the only value it runs\n\n"
    "Refused with an error naming the knob: a model chunk without layers, --optimizer\n"
    "sgd; for MoE models a capacity with etp < tp, --etp not dividing tp or below tp\n"
    "without --sp, --shard-group whose replicas do not divide the edp ranks, MLP\n"
    "biases with shared experts, and router biases, shared-expert gates and expert\n"
    "biases with etp < tp;\n"
    "ALiBi, MLA and parallel-attention (one-norm) models; a plan's recompute_layers below\n"
    "the stage's layers; --precision auto, fp8 recipes other than current, --fp8-params,\n"
    "--fp8-output-proj, --fp8-attention (--fp8-dot-product-attention), and bf16/fp16/fp8 with\n"
    "MoE models; multi-token prediction (--mtp-layers, --mtp-num-layers: it trains the\n"
    "next-token loss only); --pipeline-schedule auto (it takes a layout);\n"
    "and the planning-only knobs --grad-dtype (other than fp32),\n"
    "--no-flash-attn and --overhead-gib: it keeps fp32 gradients, and its attention is\n"
    "--attention's (a plan file's values for these, and its overlap and kernel knobs,\n"
    "run the backend's one way: executor/README.md \"What runs\").\n\n"
    "Accepted as a plan file's values are (executor/README.md \"What runs\" says which\n"
    "run as planned and which the backend's one way): the split rules of `dplan estimate\n"
    "--help` (--pipeline-layout, --pipeline-model-parallel-layout,\n"
    "--decoder-first-pipeline-num-layers, --decoder-last-pipeline-num-layers,\n"
    "--account-for-embedding-in-pipeline-split, --account-for-loss-in-pipeline-split,\n"
    "--first-stage-less-layers, --last-stage-less-layers), --shard-group's aliases\n"
    "(--data-parallel-shard-degree, --num-distributed-optimizer-instances,\n"
    "--mics-shard-size), --recompute-method, --recompute-layers, --recompute-modules,\n"
    "--framework, --loss, --loss-chunks, --local-batch, --fsdp-per-microbatch,\n"
    "--[no-]tp-overlap, --[no-]pp-overlap,\n"
    "--[no-]overlap-param-gather, --moe-pad, --moe-imbalance, --moe-dispatcher,\n"
    "--moe-routing and --ep-overlap.\n";

/* Planning knobs that would do nothing here: refused rather than silently ignored. */
static int refuse_planning_knobs(const struct cli_common *c)
{
    const bool *given = c->knob_given;
    if (given[OPT_PRECISION - OPT_SYSTEM] && c->gemm == -2)
        return cli_usage_error("run", "--precision auto: expected fp32, bf16, fp16 or fp8 (auto "
                                      "is a planning value: `dplan suggest` searches it)");
    if (c->fp8_params)
        return cli_usage_error("run", "--fp8-params: the executor keeps bf16 weights and "
                                      "quantises them per GEMM");
    if (c->fp8_output)
        return cli_usage_error("run", "--fp8-output-proj: the executor runs its output layer in "
                                      "the storage precision");
    if (c->fp8_attention)
        return cli_usage_error("run", "--fp8-attention: the executor runs its attention in the "
                                      "storage precision");
    if (c->fp8_recipe >= 0 && c->fp8_recipe != DP_FP8_CURRENT)
        return cli_usage_error("run", "--fp8-recipe: the executor runs current (per-tensor "
                                      "current scaling) only");
    if (given[OPT_GRAD_DTYPE - OPT_SYSTEM] && c->grad_fp32 != 1)
        return cli_usage_error("run", "--grad-dtype: the CPU executor keeps fp32 gradients only");
    if (given[OPT_NO_FLASH - OPT_SYSTEM])
        return cli_usage_error("run", "--no-flash-attn is a planning knob: the executor's "
                                      "attention is --attention math or flash");
    if (given[OPT_OVERHEAD - OPT_SYSTEM])
        return cli_usage_error("run", "--overhead-gib is a planning knob (GPU runtime memory)");
    if (given[OPT_MEMORY_MARGIN - OPT_SYSTEM])
        return cli_usage_error("run", "--memory-margin is a planning knob (GPU memory headroom)");
    return 0;
}

/* Planning knobs the executor takes as a plan's values but runs its one way (executor/
 * README.md "What runs"): given on the command line, each is said once, so that nobody
 * believes the run tested it. */
static void note_planning_knobs(const struct cli_common *c)
{
    /* Each knob, its --no- form where it has one (0: none), and what the executor does. */
    static const struct {
        int opt, no;
        const char *name, *how;
    } k[] = {
        {OPT_TP_OVERLAP, OPT_NO_TP_OVERLAP, "tp-overlap", "its TP collectives are blocking"},
        {OPT_OPG, OPT_NO_OPG, "overlap-param-gather", "its parameter gathers are blocking"},
        {OPT_PP_OVERLAP, OPT_NO_PP_OVERLAP, "pp-overlap",
         "its pipeline messages move between passes"},
        {OPT_FRAMEWORK, 0, "framework", "it is its own stack"},
        {OPT_LOSS, 0, "loss", "its cross entropy is its own"},
        {OPT_LOSS_CHUNKS, 0, "loss-chunks", "its loss runs on all tokens at once"},
        {OPT_LOCAL_BATCH, 0, "local-batch", "one pipeline schedule runs the step"},
        {OPT_FSDP_PER_MICROBATCH, 0, "fsdp-per-microbatch",
         "its sharded data parallelism syncs as its zero stage does"},
        {OPT_MOE_DISPATCHER, 0, "moe-dispatcher", "it sends one copy per (token, expert)"},
        {OPT_MOE_ROUTING, 0, "moe-routing", "its router picks the experts"},
        {OPT_MOE_IMBALANCE, 0, "moe-imbalance", "the router's load is what it is"},
        {OPT_EP_OVERLAP, 0, "ep-overlap", "its all-to-alls are blocking"},
        {OPT_RECOMPUTE_MODULES, 0, "recompute-modules",
         "selective recompute redoes the attention core"},
    };
    for (size_t i = 0; i < sizeof k / sizeof k[0]; i++)
        for (int neg = 0; neg < 2; neg++) {
            int opt = neg ? k[i].no : k[i].opt;
            if (opt && c->knob_given[opt - OPT_SYSTEM])
                fprintf(stderr,
                        "dplan run: note: --%s%s is kept in the run's plan.json, but the CPU "
                        "executor runs one way (%s: executor/README.md \"What runs\")\n",
                        neg ? "no-" : "", k[i].name, k[i].how);
        }
}

enum {
    OPT_NP = OPT_COMMON_END + 1,
    OPT_STEPS,
    OPT_DATA,
    OPT_DATA_FORMAT,
    OPT_OUT,
    OPT_LOG,
    OPT_LOG_ALL,
    OPT_SEED,
    OPT_LR,
    OPT_WARMUP,
    OPT_MIN_LR,
    OPT_WD,
    OPT_CLIP,
    OPT_BACKEND,
    OPT_THREADS,
    OPT_HANG_TIMEOUT,
    OPT_TIMEOUT,
    OPT_HOSTFILE,
    OPT_RANKS_PER_NODE,
    OPT_DRY_RUN,
    OPT_CALIBRATION,
    OPT_LOSS_SCALE,
    OPT_OVERLAP_GRAD,
    OPT_BUCKET,
    OPT_ATTENTION,
};

static int parse_num(const char *opt, const char *arg, double lo, double hi, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(arg, &end);
    if (end == arg || *end || errno || !(v >= lo && v <= hi))
        return cli_usage_error("run", "--%s: expected a number in [%g, %g], got \"%s\"", opt, lo,
                               hi, arg);
    *out = v;
    return 0;
}

static int parse_count(const char *opt, const char *arg, long lo, long hi, int *out)
{
    double v = 0;
    if (parse_num(opt, arg, (double)lo, (double)hi, &v))
        return 2;
    if (v != floor(v))
        return cli_usage_error("run", "--%s: expected an integer, got \"%s\"", opt, arg);
    *out = (int)v;
    return 0;
}

static int parse_args(struct cli_run *r, int argc, char **argv)
{
    static const struct option opts[] = {
        CLI_KNOB_OPTIONS,
        {"np", required_argument, 0, OPT_NP},
        {"steps", required_argument, 0, OPT_STEPS},
        {"data", required_argument, 0, OPT_DATA},
        {"data-format", required_argument, 0, OPT_DATA_FORMAT},
        {"out", required_argument, 0, OPT_OUT},
        {"log", required_argument, 0, OPT_LOG},
        {"log-all-ranks", no_argument, 0, OPT_LOG_ALL},
        {"seed", required_argument, 0, OPT_SEED},
        {"lr", required_argument, 0, OPT_LR},
        {"warmup", required_argument, 0, OPT_WARMUP},
        {"min-lr-frac", required_argument, 0, OPT_MIN_LR},
        {"wd", required_argument, 0, OPT_WD},
        {"clip", required_argument, 0, OPT_CLIP},
        {"backend", required_argument, 0, OPT_BACKEND},
        {"threads", required_argument, 0, OPT_THREADS},
        {"hang-timeout", required_argument, 0, OPT_HANG_TIMEOUT},
        {"timeout", required_argument, 0, OPT_TIMEOUT},
        {"calibration", required_argument, 0, OPT_CALIBRATION},
        {"initial-loss-scale", required_argument, 0, OPT_LOSS_SCALE},
        {"overlap-grad-reduce", required_argument, 0, OPT_OVERLAP_GRAD},
        {"ddp-bucket-size", required_argument, 0, OPT_BUCKET},
        {"attention", required_argument, 0, OPT_ATTENTION},
        {"hostfile", required_argument, 0, OPT_HOSTFILE},
        {"ranks-per-node", required_argument, 0, OPT_RANKS_PER_NODE},
        {"dry-run", no_argument, 0, OPT_DRY_RUN},
        CLI_CKPT_OPTIONS,
        {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0}};
    int ch;
    double v = 0;
    bool deprecated_timeout = false;
    optind = 1;
    opterr = 0;
    while ((ch = cli_next_opt("run", argc, argv, ":h", opts, &r->c)) != -1) {
        int cr;
        if (ch == -2)
            return 2;
        if ((cr = cli_ckpt_opt(&r->ck, ch, optarg, argc, argv)) == 2)
            return 2;
        if (cr)
            continue;
        int bad = 0;
        switch (ch) {
        case OPT_NP: bad = parse_count("np", optarg, 1, 1 << 20, &r->np); break;
        case OPT_STEPS: bad = parse_count("steps", optarg, 1, 100000000, &r->o.steps); break;
        case OPT_DATA: r->data = optarg; break;
        case OPT_DATA_FORMAT:
            if (!strcmp(optarg, "auto"))
                r->fmt = DP_DATA_AUTO;
            else if (!strcmp(optarg, "llmc"))
                r->fmt = DP_DATA_LLMC;
            else if (!strcmp(optarg, "raw"))
                r->fmt = DP_DATA_RAW;
            else
                bad = cli_usage_error(
                    "run", "--data-format: expected auto, llmc or raw, got \"%s\"", optarg);
            break;
        case OPT_OUT: r->out = optarg; break;
        case OPT_LOG: r->log = optarg; break;
        case OPT_LOG_ALL: r->log_all = true; break;
        case OPT_SEED:
            bad = parse_num("seed", optarg, 0, 9007199254740992.0, &v);
            r->o.seed = (uint64_t)v;
            break;
        case OPT_LR: bad = parse_num("lr", optarg, 0, 1e300, &r->o.lr); break;
        case OPT_WARMUP:
            bad = parse_count("warmup", optarg, 0, 100000000, &r->o.warmup_steps);
            break;
        case OPT_MIN_LR: bad = parse_num("min-lr-frac", optarg, 0, 1, &r->o.min_lr_frac); break;
        case OPT_WD: bad = parse_num("wd", optarg, 0, 1e6, &r->o.weight_decay); break;
        case OPT_CLIP: bad = parse_num("clip", optarg, 0, 1e300, &r->o.grad_clip); break;
        case OPT_BACKEND:
            if (!dp_exec_backend_known(optarg))
                bad = cli_usage_error("run",
                                      "--backend: \"%s\" is not built in; this dplan has the %s "
                                      "backend%s",
                                      optarg, dp_exec_backend_names(),
                                      strchr(dp_exec_backend_names(), ',') ? "s" : " only");
            else
                r->o.backend = optarg;
            break;
        case OPT_ATTENTION:
            if (dp_exec_attn_parse(optarg, &r->o.attention))
                bad = cli_usage_error(
                    "run", "--attention: expected auto, math or flash, got \"%s\"", optarg);
            break;
        case OPT_THREADS: bad = parse_count("threads", optarg, 1, 4096, &r->threads); break;
        case OPT_CALIBRATION: r->calibration = optarg; break;
        case OPT_LOSS_SCALE:
            bad = parse_num("initial-loss-scale", optarg, 1, 1e38, &r->o.loss_scale_init);
            break;
        case OPT_OVERLAP_GRAD:
            if (!strcmp(optarg, "on"))
                r->o.overlap_grad_reduce = DP_OVERLAP_ON;
            else if (!strcmp(optarg, "off"))
                r->o.overlap_grad_reduce = DP_OVERLAP_OFF;
            else
                bad = cli_usage_error(
                    "run", "--overlap-grad-reduce: expected on or off, got \"%s\"", optarg);
            break;
        case OPT_BUCKET:
            bad = parse_num("ddp-bucket-size", optarg, 1, 1e15, &v);
            if (!bad && v != floor(v))
                bad = cli_usage_error("run", "--ddp-bucket-size: expected an integer, got \"%s\"",
                                      optarg);
            r->o.bucket_elems = (int64_t)v;
            break;
        case OPT_HANG_TIMEOUT: /* the same option, by its old --max-restarts name */
        case OPT_TIMEOUT:
            deprecated_timeout |= ch == OPT_HANG_TIMEOUT;
            bad = parse_num(ch == OPT_TIMEOUT ? "timeout" : "hang-timeout", optarg, 1, 1e8,
                            &r->hang_timeout_s);
            break;
        case OPT_HOSTFILE: r->hostfile = optarg; break;
        case OPT_RANKS_PER_NODE:
            bad = parse_count("ranks-per-node", optarg, 1, 1 << 20, &r->ranks_per_node);
            break;
        case OPT_DRY_RUN: r->dry_run = true; break;
        case 'h': printf("%s%s%s", help_head, cli_ckpt_help, run_knob_help); return -1;
        default: return 2;
        }
        if (bad)
            return 2;
    }
    if (refuse_planning_knobs(&r->c))
        return 2;
    if (optind != argc - 1)
        return cli_usage_error("run", "expected one PLAN.json or MODEL argument");
    r->target = argv[optind];
    /* Said once, by the process the user started. */
    struct dp_rank_env env;
    dp_launch_detect_env(&env);
    bool user = !dp_launch_is_rank() && !env.launched;
    if (deprecated_timeout && user)
        fprintf(stderr, "dplan: warning: --hang-timeout is deprecated: it is --timeout, which "
                        "a later release keeps alone\n");
    if (user)
        note_planning_knobs(&r->c);
    return cli_ckpt_finish(&r->ck, user);
}

/* A plan file is a JSON object with "dplan_plan"; anything else is a model. */
static bool is_plan_file(const char *path)
{
    struct stat st;
    if (stat(path, &st) || !S_ISREG(st.st_mode))
        return false;
    struct cJSON *root = NULL;
    struct dp_err e = {0};
    if (dp_json_load_file(path, &root, &e))
        return false;
    bool yes = cJSON_IsObject(root) && cJSON_GetObjectItemCaseSensitive(root, "dplan_plan");
    cJSON_Delete(root);
    return yes;
}

/* --precision is the run's storage, so it goes with a plan file too. */
static bool any_knob(const struct cli_common *c)
{
    for (int i = OPT_TP; i < OPT_COMMON_END; i++)
        if (i != OPT_JSON && i != OPT_PRECISION && c->knob_given[i - OPT_SYSTEM])
            return true;
    return false;
}

/*
 * Where the run writes without --out: never the current directory (a run there would
 * scatter weights and logs into whatever directory the user stands in), but
 * $XDG_STATE_HOME/dplan/runs/MODEL-YYYYmmdd-HHMMSS (the XDG Base Directory spec's place
 * for state that outlives a process: logs, and the weights and checkpoints a later run
 * resumes), ~/.local/state when XDG_STATE_HOME is unset, with -2, -3, ... when the name is
 * taken. `create`: claim the name with mkdir (two runs in one second get two).
 */
static int default_out(const struct cli_run *r, char *buf, size_t cap, bool create,
                       struct dp_err *err)
{
    const char *xdg = getenv("XDG_STATE_HOME"), *home = getenv("HOME");
    char base[4096];
    if (xdg && xdg[0] == '/')
        snprintf(base, sizeof base, "%s/dplan/runs", xdg);
    else if (home && *home)
        snprintf(base, sizeof base, "%s/.local/state/dplan/runs", home);
    else
        return dp_err_set(err, DP_EUSAGE,
                          "no --out, and neither XDG_STATE_HOME nor HOME says where runs go: "
                          "give --out DIR");
    char stamp[32];
    time_t t = time(NULL);
    struct tm tm;
    localtime_r(&t, &tm);
    strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", &tm);
    if (create && dp_mkdirs(base, err))
        return err->code;
    for (int k = 1; k < 1000; k++) {
        char sfx[16] = "";
        if (k > 1)
            snprintf(sfx, sizeof sfx, "-%d", k);
        snprintf(buf, cap, "%s/%s-%s%s", base, r->m.name, stamp, sfx);
        struct stat st;
        if (!create ? stat(buf, &st) != 0 : mkdir(buf, 0777) == 0)
            return 0;
        if (create && errno != EEXIST)
            return dp_err_set(err, DP_EIO, "%s: cannot create directory: %s", buf, strerror(errno));
    }
    return dp_err_set(err, DP_EIO, "%s/%s-%s: every name is taken", base, r->m.name, stamp);
}

/* The output directory and the log; under mpirun or srun the ranks cannot agree on a
 * default, so --out is required there. */
static int resolve_out(struct cli_run *r, bool user, struct dp_err *err)
{
    if (r->out) {
        snprintf(r->out_dir, sizeof r->out_dir, "%s", r->out);
    } else if (r->env.launched && !dp_launch_is_rank()) {
        return dp_err_set(err, DP_EUSAGE,
                          "%s: started by %s: give --out DIR (a directory every rank can see): "
                          "the ranks cannot agree on a default",
                          r->target, r->env.source);
    } else {
        int rc = default_out(r, r->out_dir, sizeof r->out_dir, user && !r->dry_run, err);
        if (rc)
            return rc;
    }
    if (r->log)
        snprintf(r->log_path, sizeof r->log_path, "%s", r->log);
    else
        snprintf(r->log_path, sizeof r->log_path, "%s/log.jsonl", r->out_dir);
    return 0;
}

/* Model and layout from the plan or the knobs; the world size; the checks. */
static int resolve(struct cli_run *r, int *world, struct dp_err *err)
{
    if (r->calibration && !r->cal) {
        if (!(r->cal = malloc(sizeof *r->cal)))
            return dp_err_set(err, DP_ENOMEM, "out of memory");
        int rc = dp_calibration_load(r->calibration, r->cal, err);
        if (rc)
            return rc;
        if (r->cal->ncpu == 0)
            return dp_err_set(err, DP_EINVAL,
                              "%s: cpu: the profile has no CPU kernel costs (measure them with "
                              "`dplan calibrate --backend cpu`)",
                              r->calibration);
    }
    if (is_plan_file(r->target)) {
        if (any_knob(&r->c))
            return dp_err_set(err, DP_EUSAGE,
                              "plan knobs (--tp, --mbs, ...) go with a MODEL, not with the plan "
                              "file %s: edit its layout instead",
                              r->target);
        r->plan = malloc(sizeof *r->plan);
        if (!r->plan)
            return dp_err_set(err, DP_ENOMEM, "out of memory");
        int rc = dp_plan_load(r->target, r->plan, err);
        if (rc)
            return rc;
        r->m = r->plan->model;
        r->l = r->plan->layout;
    } else {
        int rc = dp_model_load(r->target, &r->m, err);
        if (rc)
            return rc;
        int tp = r->c.tp ? r->c.tp : 1, pp = r->c.pp ? r->c.pp : 1, cp = r->c.cp ? r->c.cp : 1;
        int gpus = r->np;
        if (!gpus)
            gpus = tp * pp * cp * (r->c.dp ? r->c.dp : 1);
        else if (!r->c.dp && gpus % (tp * pp * cp))
            return dp_err_set(err, DP_EINFEASIBLE,
                              "--np %d is not a multiple of tp*pp*cp = %d*%d*%d = %d", gpus, tp, pp,
                              cp, tp * pp * cp);
        rc = cli_layout(&r->c, &r->m, gpus, &r->l, err);
        if (rc)
            return rc;
        /* The plan.json the run writes must be one `dplan run PLAN` reads back, so the
         * layout keeps to its framework's rules as the plan reader does. */
        rc = dp_layout_check_framework(&r->l, NULL, err);
        if (rc)
            return rc;
    }
    /* What the run stores in: --precision, else fp32 (a plan's bf16 would otherwise change
     * the numbers of every plan file run so far). The plan.json it writes says so. */
    r->o.precision = r->c.knob_given[OPT_PRECISION - OPT_SYSTEM] ? r->c.precision : DP_FP32;
    r->l.precision = r->o.precision;
    /* --precision fp8: bf16 storage (r->c.precision) with FP8 GEMMs under the recipe the
     * executor runs, current scaling (a plan's delayed is replaced, as its precision is). */
    const bool fp8 = r->c.knob_given[OPT_PRECISION - OPT_SYSTEM] && r->c.gemm == DP_GEMM_FP8;
    r->l.gemm = fp8 ? DP_GEMM_FP8 : DP_GEMM_DEFAULT;
    if (fp8)
        r->l.fp8_recipe = DP_FP8_CURRENT;
    r->l.fp8_params = false;
    if (!fp8) /* the plan's FP8 knobs go with its FP8 GEMMs; with them, checked below */
        r->l.fp8_attention = false;
    r->l.grad_fp32 = true;
    *world = r->l.tp * r->l.pp * r->l.dp * r->l.cp;
    if (r->np && r->np != *world)
        return dp_err_set(err, DP_EINFEASIBLE,
                          "--np %d, but the layout needs tp*pp*dp*cp = %d*%d*%d*%d = %d ranks",
                          r->np, r->l.tp, r->l.pp, r->l.dp, r->l.cp, *world);
    /* --overlap-grad-reduce overrides the layout's dp_overlap; the plan.json written says
     * what ran. */
    if (r->o.overlap_grad_reduce != DP_OVERLAP_PLAN)
        r->l.dp_overlap = r->o.overlap_grad_reduce == DP_OVERLAP_ON;
    int rc = dp_exec_check(&r->m, &r->l, *world, err);
    if (!rc)
        rc = dp_exec_check_precision(&r->m, &r->l, r->o.precision, err);
    if (!rc)
        rc = dp_exec_check_overlap(&r->l, r->o.overlap_grad_reduce, err);
    if (rc)
        dp_err_prefix(err, "%s", r->target);
    return rc;
}

/* ------------------------------------------------------------------ --dry-run */

/* `a` quoted for a POSIX shell when it needs it. */
static void shell_word(const char *a)
{
    if (*a && !strpbrk(a, " \t\n'\"\\$`!*?[]{}()<>|&;#~")) {
        fputs(a, stdout);
        return;
    }
    putchar('\'');
    for (const char *p = a; *p; p++)
        if (*p == '\'')
            fputs("'\\''", stdout);
        else
            putchar(*p);
    putchar('\'');
}

/* " run ARGS... --out DIR" of the command the ranks run: the user's arguments without
 * the ones that only concern this launch. */
static void rank_command(const struct cli_run *r, int argc, char **argv)
{
    static const char *const drop[] = {"--dry-run", "--hostfile", "--ranks-per-node",
                                       "--np",      "--out",      "--max-restarts"};
    fputs(" run", stdout);
    for (int i = 1; i < argc; i++) {
        bool skip = false;
        for (size_t k = 0; k < sizeof drop / sizeof drop[0]; k++) {
            size_t n = strlen(drop[k]);
            if (!strncmp(argv[i], drop[k], n) && (argv[i][n] == '\0' || argv[i][n] == '=')) {
                skip = true;
                if (argv[i][n] == '\0' && strcmp(drop[k], "--dry-run"))
                    i++; /* its value */
            }
        }
        if (skip)
            continue;
        putchar(' ');
        shell_word(argv[i]);
    }
    fputs(" --out ", stdout);
    shell_word(r->out_dir);
}

/*
 * What this run is on a cluster: the ranks (Megatron order, TP fastest) and the host
 * each gets with K ranks per host, then what to set: a hostfile and the mpirun line, or a
 * Slurm allocation and srun (each process finds its rank itself: launch.h).
 */
static int dry_run(const struct cli_run *r, int argc, char **argv)
{
    const struct dp_layout *l = &r->l;
    int K = r->ranks_per_node;
    if (K <= 0 && r->plan && r->plan->has_cluster && r->plan->cluster.gpus_per_node > 0)
        K = r->plan->cluster.gpus_per_node;
    if (K <= 0 || K > r->world)
        K = r->world;
    const int nodes = (r->world + K - 1) / K;
    char lay[192];
    dp_layout_format(l, lay, sizeof lay);
    printf("dplan run %s: %s (%s) on %d rank%s, %d per node: %d node%s\n", r->target, r->m.name,
           lay, r->world, r->world == 1 ? "" : "s", K, nodes, nodes == 1 ? "" : "s");
    /* The cp column only with context parallelism (Megatron order tp-cp-dp-pp). */
    const bool cp = l->cp > 1;
    printf("%6s %6s %6s %4s %s%4s %4s  %s\n", "rank", "node", "local", "tp", cp ? "  cp " : "",
           "dp", "pp", "layers");
    for (int k = 0; k < r->world; k++) {
        struct dp_coords c;
        dp_rank_coords_cp(k, l->tp, l->cp, l->dp, l->pp, &c);
        /* "0-3", or with interleaving the chunks' ranges "0-1,4-5" */
        char ranges[256];
        int first = dp_layout_stage_first_layer(l, &r->m, c.pp_rank);
        int n = dp_layout_stage_layers(l, &r->m, c.pp_rank);
        snprintf(ranges, sizeof ranges, "%d-%d", first, first + n - 1);
        if (l->vpp > 1)
            dp_layout_stage_ranges(l, &r->m, c.pp_rank, ranges, sizeof ranges);
        char cpc[16] = "";
        if (cp)
            snprintf(cpc, sizeof cpc, "%4d ", c.cp_rank);
        printf("%6d %6d %6d %4d %s%4d %4d  %s%s%s\n", k, k / K, k % K, c.tp_rank, cpc, c.dp_rank,
               c.pp_rank, ranges, c.pp_rank == 0 ? " +embedding" : "",
               c.pp_rank == l->pp - 1 ? " +head" : "");
    }
    /* groups, schedule, memory (dry_run.c) */
    int prc = cli_run_dry(&r->m, l, dp_exec_attn_flash(r->o.backend, r->o.attention));
    if (prc)
        return prc;
    printf("\noutput: %s%s\n", r->out_dir, r->out ? "" : " (the default: --out DIR to choose)");
    printf("\nOpen MPI: a hostfile of the %d node%s (names as the cluster has them), then\n", nodes,
           nodes == 1 ? "" : "s");
    for (int i = 0; i < nodes; i++)
        printf("  node%d slots=%d\n", i, K);
    printf("  mpirun -np %d --hostfile HOSTFILE --map-by ppr:%d:node --bind-to none", r->world, K);
    for (int i = 0; dp_launch_forward_env[i]; i++)
        if (getenv(dp_launch_forward_env[i]))
            printf(" -x %s", dp_launch_forward_env[i]);
    printf(" %s", dp_launch_self_exe());
    rank_command(r, argc, argv);
    printf("\n  (or: dplan run ... --hostfile HOSTFILE --ranks-per-node %d, which adds restarts "
           "and the hang check)\n",
           K);
    printf("\nSlurm: an allocation of %d node%s with %d tasks each, then\n", nodes,
           nodes == 1 ? "" : "s", K);
    printf("  #SBATCH --nodes=%d --ntasks-per-node=%d%s\n", nodes, K,
           r->threads > 0 ? "" : " --cpus-per-task=<cores per node / tasks per node>");
    if (r->threads > 0)
        printf("  #SBATCH --cpus-per-task=%d\n", r->threads);
    printf("  srun --ntasks=%d --ntasks-per-node=%d --cpu-bind=none %s", r->world, K,
           dp_launch_self_exe());
    rank_command(r, argc, argv);
    printf("\n\n--out and --ckpt-dir must be on a filesystem every node sees; each rank reads "
           "its place from the launcher (OMPI_COMM_WORLD_*, SLURM_PROCID, ...: "
           "docs/rank-protocol.md).\n");
    return 0;
}

/* ------------------------------------------------------------------ main */

int cmd_run(int argc, char **argv)
{
    struct cli_run r;
    memset(&r, 0, sizeof r);
    cli_common_init(&r.c);
    cli_ckpt_init(&r.ck);
    dp_exec_opts_default(&r.o);
    r.hang_timeout_s = 300;
    int prc = parse_args(&r, argc, argv);
    if (prc)
        return prc < 0 ? 0 : prc;

    struct dp_err err = {0};
    int rc = resolve(&r, &r.world, &err);
    dp_launch_detect_env(&r.env);
    /* The process the user started: it checks, and launches unless it is the only rank. */
    const bool user = !r.env.launched && !dp_launch_is_rank();
    if (!rc && r.env.launched && r.env.world != r.world)
        rc = dp_err_set(&err, DP_EINFEASIBLE,
                        "%s: launched as %d ranks (%s), but the layout needs tp*pp*dp*cp = "
                        "%d*%d*%d*%d = %d",
                        r.target, r.env.world, r.env.source, r.l.tp, r.l.pp, r.l.dp, r.l.cp,
                        r.world);
    if (!rc)
        rc = resolve_out(&r, user, &err);
    if (!rc)
        rc = cli_run_check_outputs(&r, &err);
    if (!rc && user) {
        /* The data and the checkpoint to resume are checked here, before any rank starts,
         * so that errors come once. */
        struct dp_tokens tok;
        rc = r.data ? dp_tokens_load(r.data, (enum dp_data_format)r.fmt, r.m.vocab, &tok, &err)
                    : dp_tokens_default(getenv("DPLAN_DEFAULT_CORPUS"), r.m.vocab, &tok, &err);
        if (!rc) {
            rc = dp_tokens_check(&tok, &r.l, &err);
            dp_tokens_release(&tok);
        }
        if (!rc && r.ck.resume)
            rc = dp_ckpt_check_resume(r.ck.resume_dir, &r.m, &r.l, dp_exec_dtype(), &err);
    }
    if (rc) {
        free(r.plan);
        free(r.cal);
        if (r.out_dir[0] && user && !r.out && !r.dry_run)
            rmdir(r.out_dir); /* the default directory claimed above, still empty */
        if (r.env.launched && r.env.rank != 0) /* one message per job */
            return dp_status_exit_code(rc);
        return cli_fail(&err);
    }
    if (r.dry_run) {
        rc = dry_run(&r, argc, argv);
        free(r.plan);
        free(r.cal);
        return rc;
    }
    /* Said once the inputs passed their checks, so an error stays the one line. */
    if (user && !r.out)
        fprintf(stderr, "dplan run: writing to %s (--out DIR to choose)\n", r.out_dir);
    if (user && (r.world > 1 || r.ck.max_restarts > 0)) {
        /* The ranks get the output directory this process chose. */
        char **av = calloc((size_t)argc + 2, sizeof *av);
        char outarg[4200];
        if (!av) {
            free(r.plan);
            free(r.cal);
            return cli_fail(&(struct dp_err){DP_ENOMEM, "out of memory"});
        }
        memcpy(av, argv, (size_t)argc * sizeof *av);
        int n = argc;
        if (!r.out) {
            snprintf(outarg, sizeof outarg, "--out=%s", r.out_dir);
            av[n++] = outarg;
        }
        rc = cli_run_job(&r, n, av);
        free(av);
        free(r.plan);
        free(r.cal);
        return rc;
    }
    if (user)
        dp_launch_reexec(argc, argv, dp_exec_rank_env(r.o.backend));
    rc = cli_run_rank(&r, &err);
    free(r.plan);
    free(r.cal);
    return rc;
}
