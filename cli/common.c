/*
 * What the planning subcommands share once their options are read: the error
 * exits, the cluster, calibration, layout and search options built from the
 * knobs, the defaults taken, and small printing helpers. The knob help texts
 * and option parsing are in knobs.c.
 */
#include "ckpt/ckpt.h"
#include "cli.h"
#include "executor/executor.h"
#include "fit/fit.h"
#include "planner/planner.h"
#include "topology/topology.h"

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

bool cli_is_plan_file(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return false;
    char buf[4096];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    return strstr(buf, "\"dplan_plan\"") != NULL;
}

bool cli_has_cluster(const struct cli_common *c)
{
    return c->system || c->gpu || c->cluster || c->calibration;
}

static int cli_cluster_base(const struct cli_common *c, struct dp_cluster *out, struct dp_err *err);

int cli_calibration(const struct cli_common *c, const struct dp_calibration **out,
                    struct dp_err *err)
{
    /* One profile per process: the commands take one --calibration. */
    static struct dp_calibration *cal;
    static char file[4096];
    *out = NULL;
    if (!c->calibration)
        return 0;
    if (cal && strcmp(file, c->calibration) == 0) {
        *out = cal;
        return 0;
    }
    if (!cal && !(cal = malloc(sizeof *cal)))
        return dp_err_set(err, DP_ENOMEM, "out of memory");
    int rc = dp_calibration_load(c->calibration, cal, err);
    if (rc) {
        file[0] = 0;
        return rc;
    }
    snprintf(file, sizeof file, "%s", c->calibration);
    *out = cal;
    return 0;
}

int cli_apply_calibration(const struct cli_common *c, struct dp_cluster *cl, struct dp_err *err)
{
    const struct dp_calibration *cal;
    int rc = cli_calibration(c, &cal, err);
    if (rc || !cal)
        return rc;
    /* The profile is this cluster (its machine's cluster, whose per-rank peak already
     * counts the rank's threads), or it measured this cluster's GPU (its peak is the GPU's). */
    bool is_machine =
        cal->machine.has_cluster && strcmp(cal->machine.cluster.gpu.name, cl->gpu.name) == 0;
    bool same_gpu = cal->machine.gpu[0] && strcmp(cal->machine.gpu, cl->gpu.name) == 0;
    for (int i = 0; (is_machine || same_gpu) && i < cal->ngemm; i++) {
        const struct dp_cal_gemm *g = &cal->gemm[i];
        if (same_gpu && !is_machine)
            cl->gpu.peak_tflops[g->dtype] = g->peak_tflops;
        cl->gpu.gemm = g->curve;
    }
    if (same_gpu && !is_machine && cal->has_membw)
        cl->gpu.mem_bw_gbps = cal->membw.bw_gbps;
    struct dp_link *links[2] = {&cl->intra, &cl->inter};
    static const char *const cls[2] = {"intra", "inter"};
    for (int k = 0; k < 2; k++) {
        const struct dp_cal_coll *ar = dp_calibration_coll(cal, DP_NCCL_ALL_REDUCE, cls[k]);
        if (!ar)
            ar = dp_calibration_coll(cal, DP_NCCL_ALL_REDUCE, links[k]->name);
        if (!ar)
            continue;
        /* The fit is busbw as measured: the link's achievable rate, efficiency 1. */
        links[k]->bw_gbps = ar->busbw_gbps;
        links[k]->efficiency = 1;
        links[k]->latency_us = ar->alpha_us;
    }
    return 0;
}

struct cJSON *cli_cpu_prediction_json(const struct dp_exec_prediction *p)
{
    cJSON *o = cJSON_CreateObject();
    if (!o)
        return NULL;
    cJSON_AddNumberToObject(o, "step_time_s", p->step_s);
    cJSON_AddNumberToObject(o, "gemm_s", p->gemm_s);
    cJSON_AddNumberToObject(o, "attention_s", p->attention_s);
    cJSON_AddNumberToObject(o, "elementwise_s", p->elementwise_s);
    cJSON_AddNumberToObject(o, "fork_join_s", p->fork_s);
    cJSON_AddNumberToObject(o, "communication_s", p->comm_s);
    cJSON_AddNumberToObject(o, "optimizer_s", p->optimizer_s);
    cJSON_AddNumberToObject(o, "pipeline_bubble_s", p->bubble_s);
    cJSON_AddNumberToObject(o, "time_sharing_s", p->timeshare_s);
    return o;
}

bool cli_calibration_machine(const struct dp_calibration *cal, int threads, int concurrent,
                             struct dp_exec_costs *o, struct dp_exec_machine *mc)
{
    const struct dp_cal_cpu *p = cal ? dp_calibration_cpu(cal, threads, concurrent) : NULL;
    if (!p)
        return false;
    memset(o, 0, sizeof *o);
    o->threads = p->threads;
    o->concurrent = p->concurrent;
    o->seq_len = p->seq_len;
    o->head_dim = p->head_dim;
    o->ffn = p->ffn;
    o->norm = p->norm;
    o->gemm_call_s = p->gemm_call_us * 1e-6;
    o->gemm_gflops = p->gemm_gflops;
    o->conc_eff = p->conc_eff;
    o->fork_s = p->fork_us * 1e-6;
    memcpy(o->bw_gbps, p->bw_gbps, sizeof o->bw_gbps);
    o->cache_bytes[0] = (int64_t)p->l2_bytes;
    o->cache_bytes[1] = (int64_t)p->l3_bytes;
    o->attn_fwd_s = p->attn_fwd_us * 1e-6;
    o->attn_bwd_s = p->attn_bwd_us * 1e-6;
    o->attn_probs_s = p->attn_probs_us * 1e-6;
    o->act_fwd_ns = p->act_fwd_ns;
    o->act_bwd_ns = p->act_bwd_ns;
    o->norm_fwd_ns = p->norm_fwd_ns;
    o->norm_bwd_ns = p->norm_bwd_ns;
    o->ce_ns = p->ce_ns;
    o->adamw_ns = p->adamw_ns;
    o->hidden = p->hidden;
    o->sweep_bytes = (int64_t)p->sweep_bytes;
    o->swept_gbps = p->swept_gbps;
    if (cal->has_reuse) {
        const struct dp_cal_reuse *r = &cal->reuse;
        struct dp_exec_reuse *x = &o->reuse;
        x->n = r->n < DP_EXEC_REUSE_POINTS ? r->n : DP_EXEC_REUSE_POINTS;
        memcpy(x->bytes, r->bytes, (size_t)x->n * sizeof *x->bytes);
        memcpy(x->read_gbps, r->read_gbps, (size_t)x->n * sizeof *x->read_gbps);
        memcpy(x->write_gbps, r->write_gbps, (size_t)x->n * sizeof *x->write_gbps);
        x->gemm_call_s = r->gemm_call_us * 1e-6;
        x->gemm_gflops = r->gemm_gflops;
        x->gemm_ab_s = r->gemm_ab_ns * 1e-9;
        x->gemm_c_s = r->gemm_c_ns * 1e-9;
        x->gemm_cold = r->gemm_cold;
        x->attn_fwd = r->attn_fwd;
        x->attn_bwd = r->attn_bwd;
        x->attn_probs = r->attn_probs;
        x->act_fwd = r->act_fwd;
        x->act_bwd = r->act_bwd;
        x->norm_fwd = r->norm_fwd;
        x->norm_bwd = r->norm_bwd;
        x->ce = r->ce;
        x->adamw = r->adamw;
        x->sumsq = r->sumsq;
        x->sumsq_s = r->sumsq_ns * 1e-9;
    }
    mc->costs = o;
    mc->lockstep_jitter = cal->has_lockstep ? cal->lockstep.jitter : 0;
    if (cal->has_lockstep) {
        mc->lockstep_ranks = cal->lockstep.ranks;
        mc->lockstep_n =
            cal->lockstep.n < DP_EXEC_LOCKSTEP_POINTS ? cal->lockstep.n : DP_EXEC_LOCKSTEP_POINTS;
        for (int i = 0; i < mc->lockstep_n; i++) {
            mc->lockstep_seg_s[i] = cal->lockstep.seg_s[i];
            mc->lockstep_wait_s[i] = cal->lockstep.wait_s[i];
        }
    }
    /* dp_exec_machine's order: all-reduce, reduce-scatter, all-gather, send/recv. */
    static const enum dp_nccl_coll kind[4] = {DP_NCCL_ALL_REDUCE, DP_NCCL_REDUCE_SCATTER,
                                              DP_NCCL_ALL_GATHER, DP_NCCL_SENDRECV};
    for (int i = 0; i < 4; i++) {
        const struct dp_cal_coll *f = dp_calibration_coll(cal, kind[i], NULL);
        mc->coll_alpha_s[i] = f ? f->alpha_us * 1e-6 : 0;
        mc->coll_busbw_Bps[i] = f ? f->busbw_gbps * 1e9 : 0;
        mc->coll_ranks[i] = f ? f->ranks_min : 0;
        int np = f ? f->npoints : 0;
        np = np < DP_EXEC_COLL_POINTS ? np : DP_EXEC_COLL_POINTS;
        mc->coll_npoints[i] = f && f->ranks_min == f->ranks_max ? np : 0;
        for (int j = 0; j < mc->coll_npoints[i]; j++) {
            mc->coll_point_bytes[i][j] = f->point_bytes[j];
            mc->coll_point_s[i][j] = f->point_us[j] * 1e-6;
        }
    }
    return true;
}

int cli_cluster(const struct cli_common *c, struct dp_cluster *out, struct dp_err *err)
{
    int rc = cli_cluster_base(c, out, err);
    return rc ? rc : cli_apply_calibration(c, out, err);
}

/*
 * No cluster option: the machine dplan runs on, read as `dplan topo` reads it (hwloc, then
 * NVML), at --nodes of its kind, when it has GPUs; said on stderr, since the report's own
 * cluster line names it only as "this machine".
 */
static int live_cluster(const struct cli_common *c, struct dp_cluster *out, struct dp_err *err)
{
    static const char alternatives[] =
        "use --system NAME --nodes N, --gpu NAME --gpus N, or --cluster FILE.json (from `dplan "
        "topo -o` on a GPU node; list: `dplan profiles`)";
    if (c->gpus || c->gpus_per_node || c->intra)
        return dp_err_set(err, DP_EUSAGE, "--gpus/--gpus-per-node/--intra go with --gpu NAME");
    struct dp_topo t;
    struct dp_err terr = {0};
    if (dp_topo_discover(&t, &terr))
        return dp_err_set(err, DP_EUSAGE,
                          "no cluster given, and this machine could not be read "
                          "(%s): %s",
                          terr.msg, alternatives);
    if (t.ngpus == 0) {
        dp_topo_release(&t);
        return dp_err_set(err, DP_EUSAGE, "no cluster given, and this machine has no GPUs: %s",
                          alternatives);
    }
    struct dp_topo_cluster_opts o = {.nodes = c->nodes ? c->nodes : 1, .network = c->network};
    struct dp_topo_choice ch;
    int rc = dp_topo_cluster(&t, &o, out, &ch, &terr);
    dp_topo_release(&t);
    if (rc)
        return dp_err_set(err, rc == DP_EUSAGE ? DP_EUSAGE : DP_EINVAL,
                          "no cluster given, and this machine's GPUs make none (%s): %s", terr.msg,
                          alternatives);
    fprintf(stderr,
            "dplan: cluster: this machine, %d node%s of %d x %s (found by hwloc/NVML as `dplan "
            "topo` shows it; --system, --gpu or --cluster to plan for another)\n",
            out->nodes, out->nodes == 1 ? "" : "s", out->gpus_per_node, ch.gpu_profile);
    return 0;
}

static int cli_cluster_base(const struct cli_common *c, struct dp_cluster *out, struct dp_err *err)
{
    int kinds = !!c->system + !!c->gpu + !!c->cluster;
    if (kinds == 0 && c->calibration) {
        const struct dp_calibration *cal;
        int rc = cli_calibration(c, &cal, err);
        if (rc)
            return rc;
        if (!cal->machine.has_cluster)
            return dp_err_set(err, DP_EUSAGE,
                              "%s: machine.cluster: the profile describes no cluster: add "
                              "--system, --gpu or --cluster",
                              c->calibration);
        if (c->nodes || c->gpus || c->gpus_per_node || c->intra || c->network)
            return dp_err_set(err, DP_EUSAGE,
                              "--calibration alone is the machine it measured: --nodes, --gpus, "
                              "--gpus-per-node, --intra and --network go with --system, --gpu or "
                              "--cluster");
        *out = cal->machine.cluster;
        return 0;
    }
    if (kinds == 0)
        return live_cluster(c, out, err);
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

int cli_search_args(const char *cmd, int argc, int optind_, const struct cli_common *c)
{
    if (optind_ != argc - 1)
        return cli_usage_error(cmd, "expected one MODEL argument");
    if (cli_split_option(c))
        return cli_usage_error(cmd,
                               "%s fixes the pipeline split of one layout (give it to `dplan "
                               "estimate` or `dplan memory`); %s searches the splits itself",
                               cli_split_option(c), cmd);
    return 0;
}

int cli_layout_args(const char *cmd, int argc, int optind_, const struct cli_common *c)
{
    if (argc - optind_ > 1 || (optind_ == argc && !c->plan))
        return cli_usage_error(cmd, "expected one MODEL argument (or --plan FILE)");
    return 0;
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
    int counts[DP_MAX_CHUNKS], n = 0, rc, mtp = 0;
    if (c->stage_layers || c->pipeline_layout) {
        rc = c->stage_layers
                 ? dp_split_parse_list(c->stage_layers, counts, DP_MAX_CHUNKS, &n, what, err)
                 : dp_split_parse_megatron(c->pipeline_layout, l->pp, counts, DP_MAX_CHUNKS, &n,
                                           &mtp, what, DP_EUSAGE, err);
        if (rc)
            return rc;
        /* Megatron checks the string's 'm's against --mtp-num-layers; without it the
         * string gives it. */
        if (c->pipeline_layout) {
            if (c->mtp_layers >= 0 && c->mtp_layers != mtp)
                return dp_err_set(err, DP_EUSAGE,
                                  "%s: expected --mtp-layers %d multi-token-prediction layers m "
                                  "in the string, got %d",
                                  what, c->mtp_layers, mtp);
            l->mtp_layers = mtp;
        }
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
    rc = dp_split_check_v(counts, n, m->layers, l->pp, l->vpp, c->schedule == DP_SCHED_DUALPIPEV,
                          what, DP_EUSAGE, err);
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
    if (c->schedule == CLI_SCHEDULE_AUTO)
        return dp_err_set(err, DP_EUSAGE,
                          "--pipeline-schedule auto: expected 1f1b or dualpipev (only the "
                          "searches, `suggest`, `whatif` and `memory --min-gpus`, try both)");
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
    if (c->loss_chunks > 0)
        l->loss_chunks = c->loss_chunks;
    if (c->local_batch > 0)
        l->local_batch = c->local_batch;
    if (c->mtp_layers >= 0)
        l->mtp_layers = c->mtp_layers;
    if (c->schedule >= 0)
        l->schedule = (enum dp_pp_schedule)c->schedule;
    if (c->fsdp_per_microbatch)
        l->fsdp_per_microbatch = true;
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
    l->fp8_recipe = cli_fp8_recipe(c, l->framework);
    l->fp8_params = c->fp8_params;
    l->fp8_output = c->fp8_output;
    l->fp8_attention = c->fp8_attention;
    l->etp = c->etp;
    l->moe_capacity = c->moe_capacity;
    l->moe_pad = c->moe_pad;
    l->ep_overlap = c->ep_overlap;
    if (c->moe_imbalance >= 0)
        l->moe_imbalance = c->moe_imbalance;
    if (c->dispatcher >= 0)
        l->moe_dispatcher = (enum dp_moe_dispatcher)c->dispatcher;
    if (c->routing >= 0)
        l->moe_routing = (enum dp_moe_routing)c->routing;
    /* the split first: a list's length may set vpp, which the overlap defaults read */
    int rc = cli_split(c, m, l, err);
    if (rc)
        return rc;
    cli_overlap_defaults(c, l);
    return 0;
}

/* --fp8-recipe, else the framework's default: Megatron-LM's and Transformer Engine's
 * delayed scaling (arguments.py --fp8-recipe default), torchtitan's rowwise (its
 * Float8LinearConverter takes rowwise recipes only, torchtitan/components/quantization). */
enum dp_fp8_recipe cli_fp8_recipe(const struct cli_common *c, enum dp_framework fw)
{
    if (c->fp8_recipe >= 0)
        return (enum dp_fp8_recipe)c->fp8_recipe;
    return fw == DP_FW_TORCHTITAN ? DP_FP8_ROWWISE : DP_FP8_DELAYED;
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
    if ((c->fp8_recipe >= 0 || c->fp8_params || c->fp8_output || c->fp8_attention) &&
        c->gemm != DP_GEMM_FP8 && c->gemm != -2)
        return dp_err_set(err, DP_EUSAGE, "--%s: expected --precision fp8 as well",
                          c->fp8_params      ? "fp8-params"
                          : c->fp8_output    ? "fp8-output-proj"
                          : c->fp8_attention ? "fp8-attention"
                                             : "fp8-recipe");
    if (c->fp8_attention && c->fp8_recipe >= 0 && c->fp8_recipe != DP_FP8_DELAYED &&
        c->fp8_recipe != DP_FP8_CURRENT && c->fp8_recipe != DP_FP8_MXFP8)
        return dp_err_set(err, DP_EUSAGE,
                          "--fp8-attention: expected --fp8-recipe delayed, current or mxfp8 "
                          "(Megatron-Core passes fp8_dpa to those recipes only), got %s",
                          dp_fp8_recipe_name((enum dp_fp8_recipe)c->fp8_recipe));
    if (c->fp8_attention && c->no_flash)
        return dp_err_set(err, DP_EUSAGE,
                          "--fp8-attention: expected flash attention (FP8 attention is cuDNN's "
                          "fused kernel), got --no-flash-attn");
    if (c->fp8_output && c->fp8_recipe != DP_FP8_MXFP8)
        return dp_err_set(err, DP_EUSAGE,
                          "--fp8-output-proj: expected --fp8-recipe mxfp8 as well (Megatron-Core "
                          "runs the output layer in FP8 only under MXFP8)");
    if (!l) { /* a search: check the fixed GEMM precision against the GPU */
        struct dp_layout p;
        dp_layout_default(&p);
        p.gemm = c->gemm >= 0 ? (enum dp_gemm)c->gemm : DP_GEMM_DEFAULT;
        if (c->tp_overlap == 1 && !c->sp)
            return dp_err_set(err, DP_EUSAGE,
                              "--tp-overlap: expected --sp as well (TP communication overlap "
                              "needs sequence parallelism, as Megatron-LM's --tp-comm-overlap "
                              "does)");
        /* The fixed knobs against the framework (what the search leaves free is searched
         * within what the framework offers). */
        p.framework = c->framework >= 0 ? (enum dp_framework)c->framework : DP_FW_MEGATRON;
        p.fp8_recipe = cli_fp8_recipe(c, p.framework);
        p.zero = c->zero >= 0 ? c->zero : p.framework == DP_FW_TORCHTITAN ? 3 : 1;
        p.pp = c->pp ? c->pp : 1;
        p.cp = c->cp ? c->cp : 1;
        p.vpp = c->vpp ? c->vpp : 1;
        p.recompute = c->recompute >= 0 ? (enum dp_recompute)c->recompute : DP_RECOMPUTE_NONE;
        if (c->precision >= 0)
            p.precision = (enum dp_precision)c->precision;
        p.grad_fp32 = c->grad_fp32 != 0;
        p.mtp_layers = c->mtp_layers > 0 ? c->mtp_layers : 0;
        p.fsdp_per_microbatch = c->fsdp_per_microbatch;
        p.fp8_attention = c->fp8_attention;
        if (c->schedule == DP_SCHED_DUALPIPEV)
            p.schedule = DP_SCHED_DUALPIPEV;
        if (c->optimizer >= 0)
            p.optimizer = (enum dp_optimizer)c->optimizer;
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

double cli_memory_margin(const struct cli_common *c)
{
    return c->memory_margin >= 0 ? c->memory_margin : DP_MEM_TIGHT_FRACTION;
}

void cli_capacity_words(const struct dp_cluster *cl, double margin, char *out, size_t cap)
{
    int64_t usable = dp_gpu_usable_bytes(&cl->gpu);
    if (margin > 0)
        snprintf(out, cap, "%.2f GiB: %.2f usable less the %g%% margin",
                 cli_gib(dp_mem_within_margin(usable, margin)), cli_gib(usable), 100 * margin);
    else
        snprintf(out, cap, "%.2f GiB", cli_gib(usable));
}

void cli_describe_margin(FILE *f, const struct cli_common *c, const struct dp_cluster *cl)
{
    double margin = cli_memory_margin(c);
    fprintf(f, "memory   layouts keep %g%% headroom", 100 * margin);
    if (cl) {
        int64_t usable = dp_gpu_usable_bytes(&cl->gpu);
        fprintf(f, ", %.2f of %.2f GiB usable per GPU",
                cli_gib(dp_mem_within_margin(usable, margin)), cli_gib(usable));
    }
    if (c->memory_margin < 0)
        fprintf(f, " (--memory-margin not given: " CLI_MARGIN_WHY ")");
    fputc('\n', f);
}

int cli_output_check_allowing(const struct cli_common *c, const char *out, const char *what,
                              char *const *paths, int npaths, const char *allow, struct dp_err *err)
{
    if (!out || strcmp(out, "-") == 0 || (allow && dp_output_same_file(out, allow)))
        return 0;
    struct dp_io in[64];
    int n = 0;
    if (c) {
        const struct dp_io named[] = {
            {c->plan, "--plan"}, {c->cluster, "--cluster"}, {c->calibration, "--calibration"}};
        for (size_t i = 0; i < sizeof named / sizeof named[0]; i++)
            if (named[i].path)
                in[n++] = named[i];
    }
    for (int i = 0; i < npaths && n < (int)(sizeof in / sizeof in[0]); i++)
        in[n++] = (struct dp_io){paths[i], NULL};
    return dp_output_check(out, what, in, n, err);
}

int cli_output_check(const struct cli_common *c, const char *out, const char *what,
                     char *const *paths, int npaths, struct dp_err *err)
{
    return cli_output_check_allowing(c, out, what, paths, npaths, NULL, err);
}

void cli_mem_opts(const struct cli_common *c, struct dp_mem_opts *o)
{
    dp_mem_opts_default(o);
    if (c->overhead_gib >= 0)
        o->overhead_bytes = (int64_t)(c->overhead_gib * 1073741824.0);
}

/*
 * The global batch when none is given: ~4M tokens (Llama 2 and Llama 3 405B's initial
 * batch, Touvron et al. 2023 Sec. 2.2, Dubey et al. 2024 Sec. 3.4.1) as odd x 2^k
 * sequences, `odd` the GPU count's odd factor (1 on power-of-two clusters and when the
 * count varies, gpus <= 0; 9 on a 72-GPU NVL72 rack), so that data parallelism over every
 * GPU can divide it: a power of two alone would leave a 72-GPU rack only layouts that put
 * the factor 9 into pipeline or tensor parallelism.
 */
int64_t cli_default_gbs(int64_t seq_len, int gpus, char *why, size_t cap)
{
    int64_t odd = gpus > 0 ? gpus : 1;
    while (odd % 2 == 0)
        odd /= 2;
    if (why && cap)
        snprintf(why, cap,
                 odd > 1 ? "~4M tokens, a multiple of %lld (the odd factor of %d GPUs)"
                         : "~4M tokens",
                 (long long)odd, gpus);
    double want = 4.0 * 1024 * 1024 / ((double)seq_len * (double)odd);
    int64_t g = 1;
    while ((double)(g * 2) <= want * 1.42)
        g *= 2;
    return odd * g;
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

int cli_search_opts(const struct cli_common *c, const struct dp_model *m, int gpus,
                    struct dp_search_opts *o, struct cli_defaults *d)
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
    o->loss_chunks = c->loss_chunks;
    o->local_batch = c->local_batch;
    o->mtp_layers = c->mtp_layers > 0 ? c->mtp_layers : 0;
    o->fsdp_per_microbatch = c->fsdp_per_microbatch;
    /* 1F1B unless asked: DualPipeV's price has no scored measured run yet (PithTrain's lack
     * their network), 1F1B's has hundreds */
    o->schedule = c->schedule == CLI_SCHEDULE_AUTO ? -1
                  : c->schedule >= 0               ? c->schedule
                                                   : DP_SCHED_1F1B;
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
    if (d)
        cli_defaults_fill(c, m, d);
    o->gbs = c->gbs ? c->gbs : cli_default_gbs(o->seq_len, gpus, d ? d->gbs : NULL, sizeof d->gbs);
    if (c->precision >= 0)
        o->precision = (enum dp_precision)c->precision;
    o->gemm = c->gemm == -2 ? -1 : c->gemm >= 0 ? c->gemm : DP_GEMM_DEFAULT;
    o->fp8_recipe = cli_fp8_recipe(c, o->framework);
    o->fp8_params = c->fp8_params;
    o->fp8_output = c->fp8_output;
    o->fp8_attention = c->fp8_attention;
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
    o->ep_overlap = c->ep_overlap;
    if (c->moe_imbalance >= 0)
        o->moe_imbalance = c->moe_imbalance;
    if (c->dispatcher >= 0)
        o->moe_dispatcher = (enum dp_moe_dispatcher)c->dispatcher;
    if (c->routing >= 0)
        o->moe_routing = (enum dp_moe_routing)c->routing;
    cli_mem_opts(c, &o->mem);
    o->memory_margin = cli_memory_margin(c);
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
            char why[sizeof d->gbs];
            int64_t want = cli_default_gbs(l->seq_len, dp_cluster_gpus(cl), why, sizeof why);
            int64_t k = (want + unit / 2) / unit;
            l->gbs = (k < 1 ? 1 : k) * unit;
            if (l->gbs == want)
                snprintf(d->gbs, sizeof d->gbs, "%s", why);
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
        if (k != OPT_OVERHEAD && k != OPT_MEMORY_MARGIN && k != OPT_JSON && k != OPT_PLAN &&
            c->knob_given[k - OPT_SYSTEM])
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
    /* the schedules searched: DualPipeV is torchtitan's, and only when asked */
    const char *sched = "";
    if (o->framework == DP_FW_TORCHTITAN)
        sched = o->schedule < 0                     ? "; pipeline schedules 1f1b and dualpipev"
                : o->schedule == DP_SCHED_DUALPIPEV ? "; pipeline schedule dualpipev"
                                                    : "; pipeline schedule 1f1b (`--pipeline-"
                                                      "schedule auto` also tries dualpipev, priced "
                                                      "but not yet checked against measured runs)";
    fprintf(f, "framework %s%s: recompute searched over %s; %s; %s loss%s\n",
            dp_framework_name(o->framework), given ? "" : " (--framework not given)", rc, sg,
            dp_loss_name(dp_layout_loss(&l)), sched);
}

void cli_describe_layout(FILE *f, const struct dp_layout *l, const struct dp_model *m)
{
    char buf[256];
    dp_layout_format_model(l, m, buf, sizeof buf);
    char prec[128];
    enum dp_gemm g = dp_layout_gemm(l);
    if (g == DP_GEMM_FP8)
        snprintf(prec, sizeof prec, "%s with fp8 GEMMs (%s scaling%s%s%s)",
                 dp_precision_name(l->precision), dp_fp8_recipe_name(l->fp8_recipe),
                 l->fp8_params ? ", fp8 weights" : "", l->fp8_output ? ", fp8 output layer" : "",
                 l->fp8_attention ? ", fp8 attention" : "");
    else if (l->gemm != DP_GEMM_DEFAULT)
        snprintf(prec, sizeof prec, "%s with %s GEMMs", dp_precision_name(l->precision),
                 dp_gemm_name(g));
    else
        snprintf(prec, sizeof prec, "%s", dp_precision_name(l->precision));
    fprintf(f, "layout   %s gbs=%lld seq=%lld %s, %lld micro-batch%s per step", buf,
            (long long)l->gbs, (long long)l->seq_len, prec, (long long)dp_layout_microbatches(l),
            dp_layout_microbatches(l) == 1 ? "" : "es");
    if (dp_layout_schedules(l) > 1)
        fprintf(f, " in %lld pipeline schedules of %lld (local batch %lld)",
                (long long)dp_layout_schedules(l), (long long)dp_layout_schedule_microbatches(l),
                (long long)l->local_batch);
    if (l->mtp_layers > 0)
        fprintf(f, ", %d multi-token-prediction layer%s on the last stage", l->mtp_layers,
                l->mtp_layers == 1 ? "" : "s");
    if (l->optimizer != DP_OPT_ADAM)
        fprintf(f, ", %s optimizer", dp_optimizer_name(l->optimizer));
    if (l->schedule != DP_SCHED_1F1B)
        fprintf(f, ", %s schedule", dp_pp_schedule_name(l->schedule));
    fputc('\n', f);
    if (m->mtp_layers > 0 && l->mtp_layers == 0 && l->framework == DP_FW_MEGATRON)
        fprintf(f,
                "note     %s has %lld multi-token-prediction module%s, not trained here: "
                "--mtp-layers %lld prices %s (Megatron --mtp-num-layers)\n",
                m->name, (long long)m->mtp_layers, m->mtp_layers == 1 ? "" : "s",
                (long long)m->mtp_layers, m->mtp_layers == 1 ? "it" : "them");
    char ov[256] = "";
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
        n += (size_t)snprintf(ov + n, sizeof ov - n, "%spipeline send/recv %s", n ? ", " : "",
                              l->pp_overlap ? "overlapped" : "exposed");
    if (l->ep_overlap)
        snprintf(ov + n, sizeof ov - n, "%sexpert all-to-alls beside another micro-batch",
                 n ? ", " : "");
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
                "experts  etp=%d ep=%d edp=%d, %s, %s dispatch%s: %.0f token copies per GPU per "
                "micro-batch (load %.2f)\n",
                dp_layout_etp(l), l->ep, dp_layout_edp(l), route,
                dp_dispatcher_name(l->moe_dispatcher),
                l->moe_routing == DP_ROUTING_ROUND_ROBIN ? ", round-robin routing" : "",
                dp_moe_rows(m, l), dp_moe_load(m, l));
    }
}
