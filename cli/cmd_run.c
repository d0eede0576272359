/*
 * dplan run PLAN.json|MODEL [options]: train for real on the CPU backend.
 *
 * Started by hand with more than one rank, it re-executes itself under
 * mpirun (run_launch.c); under mpirun/srun each process is one rank. It
 * prints one JSON line per step (rank 0, or every rank with
 * --log-all-ranks) to stdout and the log file, a progress bar on a terminal,
 * and at the end a summary comparing measured step time and memory with
 * the predictions (stderr), summary.json, plan.json and model.safetensors in
 * --out. It does not plan: the layout comes from the plan or the knobs.
 */
#include "cli.h"
#include "costmodel/costmodel.h"
#include "executor/executor.h"
#include "run_checks.h"
#include "run_ckpt.h"
#include "run_launch.h"
#include "run_predict.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static const char help_head[] =
    "usage: dplan run PLAN.json [options]\n"
    "       dplan run MODEL [knobs] [options]\n\n"
    "Train the model under the plan's layout (data, tensor, sequence and pipeline\n"
    "parallel, micro-batches, recompute, ZeRO-1) on the CPU backend: MPI between\n"
    "ranks, OpenBLAS and OpenMP inside each. Started by hand it launches its ranks\n"
    "with mpirun; under mpirun or srun each process is one rank. The world size is\n"
    "tp*pp*dp*cp. Computation is fp32 whatever the plan's precision.\n\n"
    "  --np N              ranks to launch (must equal the plan's world size)\n"
    "  --steps N           optimizer steps [50]\n"
    "  --data FILE         llm.c .bin token shard or raw uint16 tokens\n"
    "                      [the texts under /usr/share/common-licenses, byte-tokenised]\n"
    "  --data-format F     auto, llmc or raw [auto: llm.c if the magic is there]\n"
    "  --out DIR           model.safetensors, log.jsonl, summary.json, plan.json [dplan-run]\n"
    "  --log FILE          the JSON log [OUT/log.jsonl]\n"
    "  --log-all-ranks     every rank logs (rank R > 0 to FILE.rankR)\n"
    "  --seed S            initialisation seed [1234]\n"
    "  --lr X              peak learning rate [1e-3]; --warmup N steps [0];\n"
    "  --min-lr-frac X     cosine decay to lr*X at the last step [0.1; 1 = constant]\n"
    "  --wd X              AdamW weight decay on 2-D weights [0.1]\n"
    "  --clip X            gradient clipping by global norm [1.0; 0 = off]\n"
    "  --backend cpu       the only backend in this build\n"
    "  --threads N         compute threads per rank [cores / ranks on the node]\n"
    "  --timeout S         abort when a rank makes no progress for S seconds [300]\n\n";

/* The plan knobs this executor runs (the planning commands take more: cli_knob_help). */
static const char run_knob_help[] =
    "Layout knobs, with a MODEL (a plan file brings its own layout):\n"
    "  --tp N --pp N --dp N  tensor, pipeline and data parallel degrees [1; --dp: --np / (tp*pp)]\n"
    "  --mbs N               micro-batch size in sequences [1]\n"
    "  --gbs N               global batch in sequences [mbs*dp*pp]; at most the windows\n"
    "                        of seq_len tokens in the data\n"
    "  --seq-len N           sequence length [the model's]\n"
    "  --zero {0,1}          1: ZeRO-1, the AdamW state sharded over dp [0]\n"
    "  --recompute {none,selective,full}  activation recomputation [none]\n"
    "  --sp                  sequence parallelism (with tp > 1)\n"
    "  --first-stage-layers N --last-stage-layers N   uneven pipeline split\n"
    "  --cp 1 --ep 1 --vpp 1 --optimizer adam         accepted: the only values it runs\n\n"
    "Refused with an error: --cp, --ep or --vpp above 1 (context and expert parallelism,\n"
    "the interleaved schedule), --zero 2 or 3, --optimizer sgd; mixture-of-experts,\n"
    "ALiBi and parallel-attention (one-norm) models; and the planning-only knobs\n"
    "--precision and --grad-dtype (other than fp32), --no-flash-attn and --overhead-gib:\n"
    "it computes in fp32 and keeps attention probabilities (a plan file's values for\n"
    "these are ignored).\n";

/* Planning knobs that would do nothing here: refused rather than silently ignored. */
static int refuse_planning_knobs(const struct cli_common *c)
{
    const bool *given = c->knob_given;
    if (given[OPT_PRECISION - OPT_SYSTEM] && c->precision != DP_FP32)
        return cli_usage_error("run", "--precision: the CPU executor computes in fp32 only");
    if (given[OPT_GRAD_DTYPE - OPT_SYSTEM] && c->grad_fp32 != 1)
        return cli_usage_error("run", "--grad-dtype: the CPU executor keeps fp32 gradients only");
    if (given[OPT_NO_FLASH - OPT_SYSTEM])
        return cli_usage_error("run", "--no-flash-attn is a planning knob: the CPU executor "
                                      "always keeps the attention probabilities");
    if (given[OPT_OVERHEAD - OPT_SYSTEM])
        return cli_usage_error("run", "--overhead-gib is a planning knob (GPU runtime memory)");
    return 0;
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
    OPT_TIMEOUT,
};

struct run {
    struct cli_common c;
    const char *target, *data, *out, *log;
    int np, steps, threads, timeout_s, fmt;
    bool log_all;
    struct dp_exec_opts o;
    struct cli_ckpt ck; /* checkpoints, resume, restarts (run_ckpt.c) */
    /* state */
    struct dp_model m;
    struct dp_layout l;
    struct dp_plan *plan; /* NULL when run from a model */
    struct dp_rank_env env;
    FILE *logf;
    bool tty, logs_here;
    double t_start;
    double cpu_pred_s; /* the step-time model's prediction for this machine (0 = none) */
    double epochs;     /* how often the steps read the data */
};

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

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

static int parse_args(struct run *r, int argc, char **argv)
{
    static const struct option opts[] = {CLI_KNOB_OPTIONS,
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
                                         {"timeout", required_argument, 0, OPT_TIMEOUT},
                                         CLI_CKPT_OPTIONS,
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    int ch;
    double v = 0;
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
            if (strcmp(optarg, "cpu") != 0)
                bad = cli_usage_error("run",
                                      "--backend: \"%s\" is not built in; this dplan has the cpu "
                                      "backend only",
                                      optarg);
            break;
        case OPT_THREADS: bad = parse_count("threads", optarg, 1, 4096, &r->threads); break;
        case OPT_TIMEOUT: bad = parse_count("timeout", optarg, 1, 100000000, &r->timeout_s); break;
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
    return cli_ckpt_finish(&r->ck);
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

static bool any_knob(const struct cli_common *c)
{
    for (int i = OPT_TP; i < OPT_COMMON_END; i++)
        if (i != OPT_JSON && c->knob_given[i - OPT_SYSTEM])
            return true;
    return false;
}

static const char *run_dir(const struct run *r)
{
    return r->out ? r->out : "dplan-run";
}

/* The JSON log of rank 0: --log, or OUT/log.jsonl. */
static void log_path(const struct run *r, char *buf, size_t cap)
{
    if (r->log)
        snprintf(buf, cap, "%s", r->log);
    else
        snprintf(buf, cap, "%s/log.jsonl", run_dir(r));
}

/* Model and layout from the plan or the knobs; the world size; the checks. */
static int resolve(struct run *r, int *world, struct dp_err *err)
{
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
    }
    r->l.precision = DP_FP32; /* what the CPU backend computes in */
    r->l.gemm = DP_GEMM_DEFAULT;
    r->l.fp8_params = false;
    r->l.grad_fp32 = true;
    *world = r->l.tp * r->l.pp * r->l.dp * r->l.cp;
    if (r->np && r->np != *world)
        return dp_err_set(err, DP_EINFEASIBLE,
                          "--np %d, but the layout needs tp*pp*dp*cp = %d*%d*%d*%d = %d ranks",
                          r->np, r->l.tp, r->l.pp, r->l.dp, r->l.cp, *world);
    int rc = dp_exec_check(&r->m, &r->l, *world, err);
    if (rc)
        dp_err_prefix(err, "%s", r->target);
    return rc;
}

static int load_data(struct run *r, struct dp_tokens *tok, struct dp_err *err)
{
    if (r->data)
        return dp_tokens_load(r->data, (enum dp_data_format)r->fmt, r->m.vocab, tok, err);
    return dp_tokens_default(getenv("DPLAN_DEFAULT_CORPUS"), r->m.vocab, tok, err);
}

/* ------------------------------------------------------------------ logging */

static void clear_bar(struct run *r)
{
    if (r->tty)
        fputs("\r\033[K", stderr);
}

static void draw_bar(struct run *r, const struct dp_step_info *in)
{
    if (!r->tty)
        return;
    const int width = 24;
    int done = (int)((double)width * in->step / in->steps);
    char bar[32];
    for (int i = 0; i < width; i++)
        bar[i] = i < done ? '#' : '.';
    bar[width] = '\0';
    double elapsed = now_s() - r->t_start;
    double eta = elapsed / in->step * (in->steps - in->step);
    fprintf(stderr, "\r\033[Kstep %d/%d [%s] loss %.4f  %.0f tok/s  ETA %d:%02d", in->step,
            in->steps, bar, in->loss, in->tokens_per_s, (int)eta / 60, (int)eta % 60);
    if (in->step == in->steps)
        fputc('\n', stderr);
    fflush(stderr);
}

static void on_step(const struct dp_step_info *in, void *ctx)
{
    struct run *r = ctx;
    if (!r->logs_here)
        return;
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "rank", in->rank);
    cJSON_AddNumberToObject(o, "world_size", in->world);
    cJSON_AddStringToObject(o, "backend", "cpu");
    cJSON_AddStringToObject(o, "status", in->step == in->steps ? "done" : "running");
    cJSON_AddNumberToObject(o, "step", in->step);
    cJSON_AddNumberToObject(o, "steps", in->steps);
    cJSON_AddNumberToObject(o, "loss", in->loss);
    cJSON_AddNumberToObject(o, "lr", in->lr);
    cJSON_AddNumberToObject(o, "grad_norm", in->grad_norm);
    cJSON_AddNumberToObject(o, "tokens_per_sec", in->tokens_per_s);
    cJSON_AddNumberToObject(o, "throughput_samples_per_sec", in->samples_per_s);
    cJSON_AddNumberToObject(o, "step_time_s", in->step_time_s);
    cJSON_AddNumberToObject(o, "memory_used_bytes", (double)in->mem_used_bytes);
    cJSON_AddNumberToObject(o, "memory_peak_bytes", (double)in->mem_peak_bytes);
    cJSON_AddNumberToObject(o, "memory_predicted_bytes", (double)in->mem_predicted_bytes);
    cJSON_AddNumberToObject(o, "rss_bytes", (double)in->rss_bytes);
    cJSON *mem = cJSON_AddObjectToObject(o, "memory_peak_by_pool");
    for (int p = 0; p < DP_NPOOLS; p++)
        cJSON_AddNumberToObject(mem, dp_pool_name((enum dp_pool)p), (double)in->pool_peak_bytes[p]);
    cJSON_AddNumberToObject(o, "stage", in->stage);
    cJSON_AddNumberToObject(o, "tp_rank", in->tp_rank);
    cJSON_AddNumberToObject(o, "dp_rank", in->dp_rank);
    cli_ckpt_annotate(&r->ck, o);
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    if (!s)
        return;
    clear_bar(r);
    printf("%s\n", s);
    fflush(stdout);
    if (r->logf) {
        fprintf(r->logf, "%s\n", s);
        fflush(r->logf);
    }
    free(s);
    if (in->rank == 0)
        draw_bar(r, in);
}

/*
 * Fault injection for tests (TEST-ONLY, run_ckpt.c): DPLAN_FAULT_INJECT="RANK:STEP:exit"
 * makes that rank exit with status 3 when the step starts, "RANK:STEP:hang" makes it stop
 * forever; also kill, ckpt-crash, enospc and an attempt number (README).
 */
static void before_step(int step, int rank, void *ctx)
{
    struct run *r = ctx;
    cli_ckpt_before_step(&r->ck, step, rank);
}

/* ------------------------------------------------------------------ watchdog */

static struct {
    int timeout_s, rank;
    atomic_bool stop;
} wd;

static void *watchdog(void *arg)
{
    const char *what;
    int step;
    uint64_t last = dp_exec_heartbeat(&what, &step);
    double since = now_s();
    while (!atomic_load(&wd.stop)) {
        struct timespec ts = {0, 200000000};
        nanosleep(&ts, NULL);
        uint64_t b = dp_exec_heartbeat(&what, &step);
        if (b != last) {
            last = b;
            since = now_s();
        } else if (now_s() - since > wd.timeout_s) {
            /* Library calls are off limits here (MPI is FUNNELED); exiting makes mpirun
             * stop every rank. */
            fprintf(stderr,
                    "dplan: error: rank %d: no progress for %d s at step %d (%s): a peer rank "
                    "died or hung; aborting the job\n",
                    wd.rank, wd.timeout_s, step, what);
            fflush(stderr);
            _exit(CLI_EXIT_STALLED);
        }
    }
    return NULL;
}

/* ------------------------------------------------------------------ summary */

static void write_summary(struct run *r, const struct dp_exec_result *res, const char *dir)
{
    /* The step-time model on this machine as probed (cli/run_predict.c). */
    /* The threads each rank used: as the CPU backend chooses them (backend_cpu.c). */
    int threads = r->o.threads;
    const char *omp = getenv("OMP_NUM_THREADS");
    if (threads <= 0 && omp && atoi(omp) > 0)
        threads = atoi(omp);
    if (threads <= 0) {
        long cores = sysconf(_SC_NPROCESSORS_ONLN);
        int local = r->env.local_world > 0 ? r->env.local_world : res->world;
        threads = cores > 0 ? (int)(cores / local) : 1;
    }
    struct dp_err pe = {0};
    struct cli_cpu_run cr = {.world = res->world,
                             .ranks_per_node =
                                 r->env.local_world > 0 ? r->env.local_world : res->world,
                             .threads = threads,
                             .allreduce_small_s = res->allreduce_small_s,
                             .allreduce_1mib_s = res->allreduce_1mib_s};
    struct cli_cpu_prediction cp;
    r->cpu_pred_s = cli_run_predict_cpu(&r->m, &r->l, &cr, &cp, &pe) ? 0 : cp.step_s;
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "model", r->m.name);
    cJSON_AddItemToObject(o, "layout", dp_layout_to_json(&r->l));
    cJSON_AddStringToObject(o, "backend", "cpu");
    cJSON_AddNumberToObject(o, "world_size", res->world);
    cJSON_AddNumberToObject(o, "steps", res->steps_done);
    cJSON_AddNumberToObject(o, "first_loss", res->first_loss);
    cJSON_AddNumberToObject(o, "final_loss", res->final_loss);
    cJSON_AddNumberToObject(o, "tokens_per_step", (double)res->tokens_per_step);
    cJSON_AddNumberToObject(o, "data_epochs", r->epochs);
    if (r->cpu_pred_s > 0) {
        cJSON_AddNumberToObject(o, "predicted_step_time_s", r->cpu_pred_s);
        /* The prediction by kind (cli/run_predict.c), for checking it against profiles. */
        cJSON *b = cJSON_AddObjectToObject(o, "predicted_step_parts_s");
        cJSON_AddNumberToObject(b, "gemm", cp.gemm_s);
        cJSON_AddNumberToObject(b, "attention", cp.attention_s);
        cJSON_AddNumberToObject(b, "elementwise", cp.elementwise_s);
        cJSON_AddNumberToObject(b, "fork_join", cp.fork_s);
        cJSON_AddNumberToObject(b, "communication", cp.comm_s);
        cJSON_AddNumberToObject(b, "optimizer", cp.optimizer_s);
        cJSON_AddNumberToObject(b, "pipeline_bubble", cp.bubble_s);
        cJSON_AddNumberToObject(b, "time_sharing", cp.timeshare_s);
        cJSON_AddNumberToObject(o, "threads_per_rank", threads);
    }
    if (r->plan && r->plan->has_prediction) {
        cJSON *p = cJSON_AddObjectToObject(o, "plan_prediction");
        cJSON_AddNumberToObject(p, "step_time_s", r->plan->prediction.step_time_s);
        cJSON_AddNumberToObject(p, "peak_bytes", (double)r->plan->prediction.peak_bytes);
    }
    cJSON *ranks = cJSON_AddArrayToObject(o, "ranks");
    for (int i = 0; i < res->world; i++) {
        const struct dp_rank_summary *s = &res->ranks[i];
        cJSON *e = cJSON_CreateObject();
        cJSON_AddNumberToObject(e, "rank", s->rank);
        cJSON_AddNumberToObject(e, "stage", s->stage);
        cJSON_AddNumberToObject(e, "tp_rank", s->tp_rank);
        cJSON_AddNumberToObject(e, "dp_rank", s->dp_rank);
        cJSON_AddNumberToObject(e, "step_time_mean_s", s->step_time_mean_s);
        cJSON_AddNumberToObject(e, "step_time_median_s", s->step_time_median_s);
        cJSON_AddNumberToObject(e, "rss_peak_bytes", (double)s->rss_peak_bytes);
        cJSON_AddNumberToObject(e, "rss_base_bytes", (double)s->rss_base_bytes);
        cJSON_AddNumberToObject(e, "rss_train_peak_bytes", (double)s->rss_train_peak_bytes);
        cJSON_AddBoolToObject(e, "rss_peak_since_base", s->rss_peak_since_base);
        cJSON_AddNumberToObject(e, "reserved_bytes", (double)s->reserved_bytes);
        cJSON *meas = cJSON_AddObjectToObject(e, "measured_peak_bytes");
        cJSON *pred = cJSON_AddObjectToObject(e, "predicted_bytes");
        for (int p = 0; p < DP_NPOOLS; p++) {
            cJSON_AddNumberToObject(meas, dp_pool_name((enum dp_pool)p),
                                    (double)s->pool_peak_bytes[p]);
            cJSON_AddNumberToObject(pred, dp_pool_name((enum dp_pool)p),
                                    (double)s->pool_predicted_bytes[p]);
        }
        cJSON_AddItemToArray(ranks, e);
    }
    char path[4200];
    snprintf(path, sizeof path, "%s/summary.json", dir);
    struct dp_err e = {0};
    if (dp_json_save_file(path, o, &e))
        fprintf(stderr, "dplan: warning: %s\n", e.msg);
    cJSON_Delete(o);
    /* The effective plan (fp32, the CPU backend's precision). */
    struct dp_plan p;
    memset(&p, 0, sizeof p);
    p.version = DP_PLAN_VERSION;
    p.model = r->m;
    p.layout = r->l;
    snprintf(p.created_by, sizeof p.created_by, "dplan %s run", DPLAN_VERSION);
    snprintf(path, sizeof path, "%s/plan.json", dir);
    dp_err_clear(&e);
    if (dp_plan_save(path, &p, NULL, &e))
        fprintf(stderr, "dplan: warning: %s\n", e.msg);
}

static void print_summary(struct run *r, const struct dp_exec_result *res, const char *dir,
                          const char *logpath)
{
    char lay[192];
    dp_layout_format(&r->l, lay, sizeof lay);
    fprintf(stderr,
            "dplan run: %s, %d step%s on %d rank%s (%s gbs=%lld seq=%lld): loss %.4f -> %.4f\n",
            r->m.name, res->steps_done, res->steps_done == 1 ? "" : "s", res->world,
            res->world == 1 ? "" : "s", lay, (long long)r->l.gbs, (long long)r->l.seq_len,
            res->first_loss, res->final_loss);
    fprintf(stderr, "%5s %5s %3s %3s %14s %14s %14s %8s %12s\n", "rank", "stage", "tp", "dp",
            "step (median)", "memory peak", "predicted", "diff", "rss peak");
    double worst = 0;
    for (int i = 0; i < res->world; i++) {
        const struct dp_rank_summary *s = &res->ranks[i];
        int64_t meas = 0, pred = 0;
        for (int p = 0; p < DP_NPOOLS; p++) {
            meas += s->pool_peak_bytes[p];
            pred += s->pool_predicted_bytes[p];
            if (s->pool_predicted_bytes[p] > 0) {
                double e =
                    fabs((double)s->pool_peak_bytes[p] / (double)s->pool_predicted_bytes[p] - 1);
                worst = e > worst ? e : worst;
            }
        }
        fprintf(stderr, "%5d %5d %3d %3d %11.1f ms %10.2f MiB %10.2f MiB %+7.2f%% %8.1f MiB\n",
                s->rank, s->stage, s->tp_rank, s->dp_rank, 1e3 * s->step_time_median_s,
                (double)meas / 1048576.0, (double)pred / 1048576.0,
                pred ? 100.0 * ((double)meas / (double)pred - 1) : 0.0,
                (double)s->rss_peak_bytes / 1048576.0);
    }
    fprintf(stderr,
            "memory: accounted pools (params, grads, optimizer, activations, comm) against the "
            "CPU memory model; worst pool differs by %.2f%%\n",
            100 * worst);
    /* The same buffers against the processes' real resident memory: what each rank grew by
     * during the steps beyond what its buffers occupy (tests/executor/compare_runs.c says
     * what that holds and bounds it). */
    int un_rank = -1;
    double un_max = 0, un_grew = 0, un_occupy = 0;
    for (int i = 0; i < res->world; i++) {
        const struct dp_rank_summary *s = &res->ranks[i];
        double grew = (double)(s->rss_train_peak_bytes - s->rss_base_bytes);
        double un = grew - (double)s->reserved_bytes;
        if (!s->rss_peak_since_base) {
            un_rank = -1;
            break;
        }
        if (un_rank < 0 || un > un_max) {
            un_rank = s->rank;
            un_max = un;
            un_grew = grew;
            un_occupy = (double)s->reserved_bytes;
        }
    }
    if (un_rank >= 0)
        fprintf(stderr,
                "resident: rank %d grew by %.2f MiB during the steps, its buffers occupy %.2f "
                "MiB (the pools in whole allocator pages): %+.2f MiB for MPI, OpenBLAS and code "
                "(the most of any rank)\n",
                un_rank, un_grew / 1048576.0, un_occupy / 1048576.0, un_max / 1048576.0);
    if (r->plan && r->plan->has_prediction)
        fprintf(stderr,
                "plan prediction (for %s): step %.3f s, peak %.2f GiB per GPU; this CPU run: step "
                "%.3f s\n",
                r->plan->has_cluster ? r->plan->cluster.gpu.name : "its GPUs",
                r->plan->prediction.step_time_s, cli_gib(r->plan->prediction.peak_bytes),
                res->ranks[0].step_time_median_s);
    if (r->cpu_pred_s > 0)
        fprintf(stderr,
                "step time: measured %.1f ms (rank 0 median), predicted %.1f ms (%+.0f%%) by "
                "the CPU step model from this machine's probe (cli/run_predict.c)\n",
                1e3 * res->ranks[0].step_time_median_s, 1e3 * r->cpu_pred_s,
                100.0 * (r->cpu_pred_s / res->ranks[0].step_time_median_s - 1));
    fprintf(stderr, "wrote %s/model.safetensors, %s, %s/summary.json, %s/plan.json\n", dir, logpath,
            dir, dir);
}

/* ------------------------------------------------------------------ main */

static int run_rank(struct run *r, int world, struct dp_err *err)
{
    struct dp_tokens tok;
    int rc = load_data(r, &tok, err);
    if (rc)
        return rc;
    const char *dir = run_dir(r);
    rc = dp_mkdirs(dir, err);
    if (rc) {
        dp_tokens_release(&tok);
        return rc;
    }
    /* Predicted pools per stage from the CPU memory model. */
    struct dp_mem_report *rep = malloc(sizeof *rep);
    int64_t *pred = calloc((size_t)r->l.pp * DP_NPOOLS, sizeof *pred);
    if (!rep || !pred || dp_mem_estimate_cpu(&r->m, &r->l, rep, err)) {
        free(rep);
        free(pred);
        dp_tokens_release(&tok);
        return err->code ? err->code : dp_err_set(err, DP_ENOMEM, "out of memory");
    }
    for (int s = 0; s < r->l.pp; s++) {
        const struct dp_mem_stage *st = &rep->stage[s];
        int64_t *q = pred + (size_t)s * DP_NPOOLS;
        q[DP_POOL_PARAMS] = st->params_bytes;
        q[DP_POOL_GRADS] = st->grads_bytes;
        q[DP_POOL_OPTIM] = st->optimizer_bytes;
        q[DP_POOL_ACT_SLOTS] = st->act_layers_bytes;
        q[DP_POOL_ACT_HEAD] = st->act_head_bytes;
        q[DP_POOL_ACT_WORK] = st->act_working_bytes;
        q[DP_POOL_COMM] = st->comm_bytes;
    }
    free(rep);

    int rank = r->env.rank;
    char logpath[4200];
    log_path(r, logpath, sizeof logpath);
    /* Batches wrap around the data (schedule.c): say so once when they will. */
    r->epochs = dp_tokens_epochs(&tok, &r->l, r->o.steps);
    if (rank == 0 && r->epochs > 1)
        fprintf(stderr,
                "dplan: note: %d steps x gbs %lld = %lld sequences of %lld tokens; %s holds "
                "%lld: the data is read %.2f times (the batches wrap around to its start)\n",
                r->o.steps, (long long)r->l.gbs, (long long)r->o.steps * r->l.gbs,
                (long long)r->l.seq_len, tok.source,
                (long long)dp_tokens_windows(&tok, r->l.seq_len), r->epochs);
    r->logs_here = rank == 0 || r->log_all;
    if (r->logs_here) {
        char path[4300];
        if (rank == 0)
            snprintf(path, sizeof path, "%s", logpath);
        else
            snprintf(path, sizeof path, "%s.rank%d", logpath, rank);
        r->logf = fopen(path, cli_ckpt_append_log(&r->ck) ? "a" : "w");
        if (!r->logf) {
            free(pred);
            dp_tokens_release(&tok);
            return dp_err_set(err, DP_EIO, "%s: cannot create: %s", path, strerror(errno));
        }
    }
    r->tty = rank == 0 && (isatty(2) || getenv("DPLAN_TTY"));
    r->o.data = &tok;
    r->o.out_dir = dir;
    r->o.threads = r->threads;
    r->o.predicted = pred;
    r->o.on_step = on_step;
    r->o.before_step = before_step;
    r->o.ctx = r;
    r->o.ckpt = &r->ck.opts;
    r->ck.rank = rank;
    r->ck.world = world;
    r->ck.logf = r->logf;
    r->ck.logs_here = r->logs_here;
    r->t_start = now_s();

    pthread_t th;
    bool have_wd = false;
    if (world > 1) {
        wd.timeout_s = r->timeout_s ? r->timeout_s : 300;
        wd.rank = rank;
        atomic_store(&wd.stop, false);
        have_wd = pthread_create(&th, NULL, watchdog, NULL) == 0;
    }
    struct dp_exec_result res;
    bool collective = false;
    cli_heartbeat_start(rank);
    rc = dp_exec_run(&r->m, &r->l, &r->o, &res, &collective, err);
    cli_heartbeat_stop();
    if (have_wd) {
        atomic_store(&wd.stop, true);
        pthread_join(th, NULL);
    }
    clear_bar(r);
    /* A run whose checkpoints all failed trained, but nothing can resume it: it fails
     * (after writing its weights and summary), every rank alike. */
    bool lost = !rc && res.ckpt_tried > 0 && res.ckpt_saved == 0;
    struct dp_err lerr = {0};
    if (lost)
        dp_err_set(&lerr, DP_EIO,
                   "--ckpt-dir %s: every checkpoint this run requested failed (%d of %d; see "
                   "the messages above): it trained, but left nothing to resume from",
                   r->ck.dir, res.ckpt_tried, res.ckpt_tried);
    if (r->logf && ((rc && (rank == 0 || !collective)) || lost)) {
        /* The log's last record says how the run ended. */
        cJSON *o = cJSON_CreateObject();
        cJSON_AddNumberToObject(o, "rank", rank);
        cJSON_AddNumberToObject(o, "world_size", world);
        cJSON_AddStringToObject(o, "backend", "cpu");
        cJSON_AddStringToObject(o, "status", "failed");
        if (lost)
            cJSON_AddNumberToObject(o, "step", res.steps_done);
        cJSON_AddStringToObject(o, "error", lost ? lerr.msg : err->msg);
        char *s = cJSON_PrintUnformatted(o);
        if (s)
            fprintf(r->logf, "%s\n", s);
        free(s);
        cJSON_Delete(o);
    }
    if (!rc && !lost && r->logs_here)
        cli_ckpt_finished(&r->ck, r->o.steps, res.final_loss);
    if (r->logf)
        fclose(r->logf);
    if (!rc && rank == 0) {
        write_summary(r, &res, dir);
        print_summary(r, &res, dir, logpath);
    }
    dp_exec_result_release(&res);
    free(pred);
    dp_tokens_release(&tok);
    if (lost) {
        *err = lerr;
        rc = lerr.code;
        collective = true;
    }
    if (rc && world > 1) {
        if (collective) {
            if (rank == 0)
                cli_fail(err);
            dp_exec_finalize();
            exit(getenv("DPLAN_LAUNCHER") ? CLI_EXIT_REPORTED : 1);
        }
        fprintf(stderr, "dplan: error: rank %d: %s\n", rank, err->msg);
        fflush(stderr);
        dp_exec_abort(1);
    }
    return rc;
}

int cmd_run(int argc, char **argv)
{
    struct run r;
    memset(&r, 0, sizeof r);
    cli_common_init(&r.c);
    cli_ckpt_init(&r.ck);
    dp_exec_opts_default(&r.o);
    int prc = parse_args(&r, argc, argv);
    if (prc)
        return prc < 0 ? 0 : prc;

    struct dp_err err = {0};
    int world = 0, rc = resolve(&r, &world, &err);
    dp_exec_detect_env(&r.env);
    if (!rc && r.env.launched && r.env.world != world)
        rc = dp_err_set(&err, DP_EINFEASIBLE,
                        "%s: launched as %d ranks (%s), but the layout needs tp*pp*dp*cp = "
                        "%d*%d*%d*%d = %d",
                        r.target, r.env.world, r.env.source, r.l.tp, r.l.pp, r.l.dp, r.l.cp, world);
    if (!rc) {
        char logpath[4200];
        log_path(&r, logpath, sizeof logpath);
        struct cli_run_io io = {.target = r.target,
                                .target_is_plan = r.plan != NULL,
                                .data = r.data,
                                .out = run_dir(&r),
                                .log = logpath,
                                .log_given = r.log != NULL,
                                .ckpt_dir = r.ck.dir,
                                .world = world,
                                .log_all = r.log_all};
        rc = cli_run_check_outputs(&io, &err);
    }
    if (rc) {
        free(r.plan);
        if (r.env.launched && r.env.rank != 0) /* one message per job */
            return dp_status_exit_code(rc);
        return cli_fail(&err);
    }

    if (!r.env.launched) {
        /* Check the data here, before any rank starts, so errors come once. */
        struct dp_tokens tok;
        rc = load_data(&r, &tok, &err);
        if (rc) {
            free(r.plan);
            return cli_fail(&err);
        }
        rc = dp_tokens_check(&tok, &r.l, &err);
        dp_tokens_release(&tok);
        if (rc) {
            free(r.plan);
            return cli_fail(&err);
        }
        /* A checkpoint that cannot be resumed is refused once, before any rank starts. */
        if (r.ck.resume && dp_ckpt_check_resume(r.ck.resume_dir, &r.m, &r.l, &err)) {
            free(r.plan);
            return cli_fail(&err);
        }
        if (cli_ckpt_supervise(&r.ck)) {
            /* --max-restarts: this process watches the job and relaunches it. */
            char logpath[4200];
            log_path(&r, logpath, sizeof logpath);
            free(r.plan);
            return cli_run_supervise(&r.ck, world, run_dir(&r), logpath, argc, argv);
        }
        if (world > 1) {
            char logpath[4200];
            log_path(&r, logpath, sizeof logpath);
            struct cli_run_end end = {logpath, r.ck.dir};
            free(r.plan);
            return cli_run_launch(world, argc, argv, &end);
        }
        cli_run_reexec_for_blas(argc, argv);
    }
    rc = run_rank(&r, world, &err);
    free(r.plan);
    dp_exec_finalize();
    return rc ? cli_fail(&err) : 0;
}
