/*
 * A DeepSpeed config (ds_config.json) and the `deepspeed` launcher line.
 *
 * Key names were checked against DeepSpeed master edaa722 (version.txt
 * 0.19.6, after v0.19.5): deepspeed/runtime/constants.py (batch, bf16, fp16,
 * data_types), deepspeed/runtime/zero/config.py (DeepSpeedZeroConfig and its
 * stage3_* aliases), deepspeed/runtime/activation_checkpointing/config.py,
 * deepspeed/runtime/config.py (get_pipeline_config, "expert_parallel"),
 * deepspeed/runtime/tensor_parallel/config.py (TPTrainingConfig.autotp_size),
 * deepspeed/module_inject/auto_ep_config.py (autoep_size) and the launcher's
 * options in deepspeed/launcher/runner.py.
 *
 * DeepSpeed has no ring context parallelism, no interleaved pipeline schedule
 * and no per-stage layer counts; its pipeline parallelism is the model code's
 * (PipelineModule), so the script says so rather than the config.
 */
#include "internal.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <string.h>

#define DEEPSPEED_VERSION "DeepSpeed v0.19.5 and master edaa722 (version.txt 0.19.6)"

/* ------------------------------------------------------------------ checks */

static int no_cp(const struct dp__ctx *c)
{
    if (c->l->cp > 1)
        return dp__refuse(c, "layout.cp",
                          "cp=%d has no DeepSpeed equivalent: its sequence parallelism "
                          "(Ulysses) exchanges heads by all-to-all, not sequence chunks by a "
                          "ring",
                          c->l->cp);
    return 0;
}

static int no_vpp(const struct dp__ctx *c)
{
    if (c->l->vpp > 1)
        return dp__refuse(c, "layout.vpp",
                          "vpp=%d: DeepSpeed's pipeline engine runs one chunk per stage "
                          "(deepspeed/runtime/pipe/schedule.py TrainSchedule), no "
                          "interleaving",
                          c->l->vpp);
    return 0;
}

static int no_uneven(const struct dp__ctx *c)
{
    if (c->l->nchunks > 0) {
        char list[128];
        int ch[DP_MAX_CHUNKS], n = c->l->nchunks;
        for (int s = 0; s < n && s < DP_MAX_CHUNKS; s++)
            ch[s] = c->l->chunk_layers[s];
        dp_split_format_list(ch, n, list, sizeof list);
        return dp__refuse(c, "layout.stage_layers",
                          "an uneven split (%s): DeepSpeed's PipelineModule partitions by method "
                          "(uniform, parameters, type:REGEX), not by per-stage layer counts",
                          list);
    }
    if (c->l->first_stage_layers || c->l->last_stage_layers)
        return dp__refuse(c, "layout.first_stage_layers",
                          "a %d/../%d split: DeepSpeed's PipelineModule partitions by method "
                          "(uniform, parameters, type:REGEX), not by per-stage layer counts",
                          c->l->first_stage_layers, c->l->last_stage_layers);
    return 0;
}

static int no_sp(const struct dp__ctx *c)
{
    if (c->l->sp && c->l->tp > 1)
        return dp__refuse(c, "layout.sp",
                          "sequence parallelism with tp=%d: DeepSpeed's AutoTP shards the "
                          "linear layers only, not the norms and dropout (Megatron's "
                          "--sequence-parallel)",
                          c->l->tp);
    return 0;
}

static int no_selective(const struct dp__ctx *c)
{
    if (c->l->recompute == DP_RECOMPUTE_SELECTIVE || c->l->recompute == DP_RECOMPUTE_OP)
        return dp__refuse(c, "layout.recompute",
                          "%s recompute has no DeepSpeed config equivalent: its activation "
                          "checkpointing wraps whole layers",
                          dp_recompute_name(c->l->recompute));
    return 0;
}

static int hsdp_zero3(const struct dp__ctx *c)
{
    /* MiCS (zero/mics.py) shards the ZeRO-3 states within mics_shard_size ranks and
     * replicates them across the groups; ZeRO++'s zero_hpz_partition_size keeps a second,
     * intra-node copy of the parameters for backward, which is not HSDP. */
    if (dp_layout_replicas(c->l) > 1 && c->l->zero != 3)
        return dp__refuse(c, "layout.shard_group",
                          "shard_group=%d with zero=%d: DeepSpeed shards in groups (MiCS, "
                          "mics_shard_size) only with zero=3",
                          c->l->shard_group, c->l->zero);
    return 0;
}

static int zero0_overlap(const struct dp__ctx *c)
{
    /* engine.py: without ZeRO the gradients are all-reduced in allreduce_gradients()
     * after backward; ZeRO-1/2 hook the reduction into backward (overlap_comm). */
    if (c->l->zero == 0 && c->l->dp > 1 && c->l->dp_overlap)
        return dp__refuse(c, "layout.dp_overlap",
                          "zero=0 with dp=%d: DeepSpeed without ZeRO all-reduces gradients "
                          "after backward, not overlapped (plan with --no-dp-overlap, or "
                          "zero >= 1)",
                          c->l->dp);
    return 0;
}

static int zero0_fp32_grads(const struct dp__ctx *c)
{
    /* engine.py _do_optimizer_sanity_check: without ZeRO, half-precision weights need
     * gradients of the same dtype ("unsupported mix of model_dtype and grad_accum_dtype"). */
    if (c->l->zero == 0 && c->l->precision != DP_FP32 && c->l->grad_fp32)
        return dp__refuse(c, "layout.grad_fp32",
                          "fp32 gradients with %s weights and zero=0: DeepSpeed accumulates "
                          "gradients in the weights' dtype unless ZeRO is on",
                          dp_precision_name(c->l->precision));
    return 0;
}

static int zero_pp(const struct dp__ctx *c)
{
    if (c->l->zero >= 2 && c->l->pp > 1)
        return dp__refuse(c, "layout.zero",
                          "zero=%d with pp=%d: DeepSpeed's pipeline engine allows ZeRO-1 only",
                          c->l->zero, c->l->pp);
    return 0;
}

static int autoep_zero3_tp(const struct dp__ctx *c)
{
    /* engine.py: "AutoEP with ZeRO Stage 3 does not support AutoTP yet" */
    if (c->l->ep > 1 && c->l->zero == 3 && c->l->tp > 1)
        return dp__refuse(c, "layout.ep",
                          "ep=%d with zero=3 and tp=%d: DeepSpeed's AutoEP under ZeRO-3 does "
                          "not combine with AutoTP",
                          c->l->ep, c->l->tp);
    return 0;
}

static int megatron_only(const struct dp__ctx *c)
{
    int rc = dp__refuse_mtp(c, "DeepSpeed", "the model and its loss are the caller's");
    if (!rc && c->l->optimizer == DP_OPT_MUON)
        return dp__refuse(c, "layout.optimizer",
                          "muon: dplan prices Megatron-Core's layer-wise Muon and FSDP2's; "
                          "DeepSpeed's is not modelled");
    if (!rc)
        rc = dp__refuse_dualpipev(c, "DeepSpeed");
    return rc ? rc : dp__refuse_fp8_attention(c, "DeepSpeed");
}
static const dp__check_fn checks[] = {no_cp,           no_vpp,        no_uneven,        no_sp,
                                      no_selective,    zero0_overlap, zero0_fp32_grads, zero_pp,
                                      autoep_zero3_tp, hsdp_zero3,    megatron_only};

/* ------------------------------------------------------------------ options */

static int train_batch(const struct dp__ctx *c, struct dp__val *v)
{
    return dp__int(v, c->l->gbs); /* = micro x accumulation x data parallel */
}
static int micro_batch(const struct dp__ctx *c, struct dp__val *v)
{
    return dp__int(v, c->l->mbs);
}
static int grad_accum(const struct dp__ctx *c, struct dp__val *v)
{
    return dp__int(v, dp_layout_microbatches(c->l));
}
static int bf16(const struct dp__ctx *c, struct dp__val *v)
{
    return c->l->precision == DP_BF16 ? dp__bool(v, true) : 0;
}
static int fp16(const struct dp__ctx *c, struct dp__val *v)
{
    return c->l->precision == DP_FP16 ? dp__bool(v, true) : 0;
}
static int accum_dtype(const struct dp__ctx *c, struct dp__val *v)
{
    if (c->l->precision == DP_FP32)
        return 0;
    return dp__str(v, c->l->grad_fp32 ? "fp32" : dp_precision_name(c->l->precision));
}
static int mics(const struct dp__ctx *c, struct dp__val *v)
{
    return dp_layout_replicas(c->l) > 1 ? dp__int(v, dp_layout_shard(c->l)) : 0;
}
static int stage(const struct dp__ctx *c, struct dp__val *v)
{
    return dp__int(v, c->l->zero);
}
static int zero_on(const struct dp__ctx *c, struct dp__val *v)
{
    return c->l->zero > 0 ? dp__bool(v, true) : 0;
}
static int overlap(const struct dp__ctx *c, struct dp__val *v)
{
    return c->l->zero > 0 ? dp__bool(v, c->l->dp_overlap) : 0;
}
static int bucket(const struct dp__ctx *c, struct dp__val *v)
{
    /* 5e8 elements, DeepSpeed's default, which dplan's ZeRO-2/3 memory term counts
     * (costmodel/memory.c). */
    return c->l->zero > 0 ? dp__int(v, 500000000) : 0;
}
static int prefetch(const struct dp__ctx *c, struct dp__val *v)
{
    return c->l->zero == 3 ? dp__int(v, 50000000) : 0;
}
static int persistence(const struct dp__ctx *c, struct dp__val *v)
{
    return c->l->zero == 3 ? dp__int(v, 100000) : 0;
}
static int live_params(const struct dp__ctx *c, struct dp__val *v)
{
    return c->l->zero == 3 ? dp__int(v, 1000000000) : 0;
}
static int autotp(const struct dp__ctx *c, struct dp__val *v)
{
    return c->l->tp > 1 ? dp__int(v, c->l->tp) : 0;
}
static int autoep_on(const struct dp__ctx *c, struct dp__val *v)
{
    return c->l->ep > 1 ? dp__bool(v, true) : 0;
}
static int autoep(const struct dp__ctx *c, struct dp__val *v)
{
    return c->l->ep > 1 ? dp__int(v, c->l->ep) : 0;
}
static int ckpt_false(const struct dp__ctx *c, struct dp__val *v)
{
    return c->l->recompute == DP_RECOMPUTE_FULL ? dp__bool(v, false) : 0;
}
static int pipe_ckpt(const struct dp__ctx *c, struct dp__val *v)
{
    /* pipe/engine.py sets PipelineModule.activation_checkpoint_interval from it */
    return c->l->recompute == DP_RECOMPUTE_FULL && c->l->pp > 1 ? dp__int(v, 1) : 0;
}
static int opt_type(const struct dp__ctx *c, struct dp__val *v)
{
    return dp__str(v, c->l->optimizer == DP_OPT_SGD ? "SGD" : "Adam");
}

/* Sections are JSON object paths ("" for the top level). */
static const struct dp__opt opts[] = {
    {"", "train_batch_size", train_batch},               /* constants.py TRAIN_BATCH_SIZE */
    {"", "train_micro_batch_size_per_gpu", micro_batch}, /* TRAIN_MICRO_BATCH_SIZE_PER_GPU */
    {"", "gradient_accumulation_steps", grad_accum},     /* GRADIENT_ACCUMULATION_STEPS */
    {"bf16", "enabled", bf16},                           /* BFLOAT16, BFLOAT16_ENABLED */
    {"fp16", "enabled", fp16},                           /* FP16, FP16_ENABLED */
    {"data_types", "grad_accum_dtype", accum_dtype},     /* DATA_TYPES, GRAD_ACCUM_DTYPE */
    {"zero_optimization", "stage", stage},               /* zero/config.py */
    {"zero_optimization", "contiguous_gradients", zero_on},
    {"zero_optimization", "overlap_comm", overlap},
    {"zero_optimization", "reduce_scatter", zero_on},
    {"zero_optimization", "reduce_bucket_size", bucket},
    {"zero_optimization", "allgather_bucket_size", bucket},
    {"zero_optimization", "stage3_prefetch_bucket_size", prefetch},           /* alias */
    {"zero_optimization", "stage3_param_persistence_threshold", persistence}, /* alias */
    {"zero_optimization", "stage3_max_live_parameters", live_params},         /* alias */
    {"zero_optimization", "mics_shard_size", mics},                           /* zero/config.py */
    {"tensor_parallel", "autotp_size", autotp}, /* tensor_parallel/config.py */
    {"expert_parallel", "enabled", autoep_on},  /* module_inject/auto_ep_config.py */
    {"expert_parallel", "autoep_size", autoep}, /* module_inject/auto_ep_config.py */
    {"activation_checkpointing", "partition_activations", ckpt_false}, /* ACT_CHKPT_* */
    {"activation_checkpointing", "contiguous_memory_optimization", ckpt_false},
    {"activation_checkpointing", "cpu_checkpointing", ckpt_false},
    {"pipeline", "activation_checkpoint_interval", pipe_ckpt}, /* config.py get_pipeline_config */
    {"optimizer", "type", opt_type},                           /* constants.py OPTIMIZER, TYPE */
};

/* Print a cJSON tree with two-space indentation (only objects, ints, bools, strings). */
static void json_print(struct dp_buf *b, const cJSON *o, int depth)
{
    if (cJSON_IsObject(o)) {
        dp_buf_puts(b, "{\n");
        for (const cJSON *e = o->child; e; e = e->next) {
            dp_buf_printf(b, "%*s\"%s\": ", 2 * (depth + 1), "", e->string);
            json_print(b, e, depth + 1);
            dp_buf_puts(b, e->next ? ",\n" : "\n");
        }
        dp_buf_printf(b, "%*s}", 2 * depth, "");
    } else if (cJSON_IsBool(o)) {
        dp_buf_puts(b, cJSON_IsTrue(o) ? "true" : "false");
    } else if (cJSON_IsString(o)) {
        dp_buf_printf(b, "\"%s\"", o->valuestring);
    } else {
        dp_buf_printf(b, "%.0f", o->valuedouble);
    }
}

static int build(const struct dp__ctx *c, cJSON *root)
{
    for (size_t i = 0; i < sizeof opts / sizeof opts[0]; i++) {
        struct dp__val v = {0};
        int got = opts[i].get(c, &v);
        if (got < 0)
            return got;
        if (got == 0)
            continue;
        cJSON *parent = root;
        if (opts[i].section[0]) {
            parent = cJSON_GetObjectItemCaseSensitive(root, opts[i].section);
            if (!parent)
                parent = cJSON_AddObjectToObject(root, opts[i].section);
        }
        cJSON *item = v.kind == DP__INT    ? cJSON_CreateNumber((double)v.i)
                      : v.kind == DP__BOOL ? cJSON_CreateBool(v.b)
                                           : cJSON_CreateString(v.s);
        if (!parent || !item || !cJSON_AddItemToObject(parent, opts[i].name, item)) {
            cJSON_Delete(item);
            return dp_err_set(c->err, DP_ENOMEM, "out of memory for the DeepSpeed config");
        }
    }
    return 0;
}

int dp__export_deepspeed(const struct dp__ctx *c0, struct dp_buf *b, bool json_only)
{
    struct dp__ctx c = *c0;
    c.framework = "DeepSpeed";
    int rc = dp__run_checks(&c, checks, (int)(sizeof checks / sizeof checks[0]));
    if (!rc && !json_only)
        rc = dp__need_cluster(&c, "deepspeed");
    if (rc)
        return rc;
    cJSON *root = cJSON_CreateObject();
    if (!root)
        return dp_err_set(c.err, DP_ENOMEM, "out of memory for the DeepSpeed config");
    rc = build(&c, root);
    if (rc) {
        cJSON_Delete(root);
        return rc;
    }
    if (json_only) {
        json_print(b, root, 0);
        dp_buf_puts(b, "\n");
        cJSON_Delete(root);
        return 0;
    }
    const struct dp_layout *l = c.l;
    const struct dp_cluster *cl = &c.p->cluster;
    const char *host = c.o->host_prefix ? c.o->host_prefix : "node";
    dp_buf_puts(b, "#!/usr/bin/env bash\n# DeepSpeed config and launcher (dplan export --format "
                   "deepspeed)\n");
    dp__header(&c, b, "#");
    dp_buf_printf(b,
                  "# config keys: %s: deepspeed/runtime/constants.py,\n"
                  "#   deepspeed/runtime/zero/config.py, deepspeed/runtime/config.py; launcher: "
                  "deepspeed/launcher/runner.py\n",
                  DEEPSPEED_VERSION);
    dp_buf_printf(b,
                  "# train_batch_size %lld = micro-batch %lld x gradient accumulation %lld x data "
                  "parallel %d\n",
                  (long long)l->gbs, (long long)l->mbs, (long long)dp_layout_microbatches(l),
                  l->dp);
    if (l->pp > 1)
        dp_buf_printf(b,
                      "# pp=%d is set in the model code, not the config: build the model as\n"
                      "#   deepspeed.pipe.PipelineModule(layers, num_stages=%d, "
                      "partition_method=\"type:<your layer class>\")\n",
                      l->pp, l->pp);
    if (l->recompute == DP_RECOMPUTE_FULL && l->pp == 1)
        dp_buf_puts(b, "# full recompute: wrap each layer in deepspeed.checkpointing.checkpoint "
                       "(configured below)\n");
    if (dp_layout_gemm(l) == DP_GEMM_FP8) {
        /* Transformer Engine's recipe classes (transformer_engine/common/recipe); rowwise is
         * torchao's. */
        static const char *const te[] = {"DelayedScaling()", "Float8CurrentScaling()", NULL,
                                         "Float8BlockScaling()", "MXFP8BlockScaling()"};
        const char *r =
            (unsigned)l->fp8_recipe < sizeof te / sizeof te[0] ? te[l->fp8_recipe] : NULL;
        if (r)
            dp_buf_printf(b,
                          "# FP8 GEMMs are set in the model code, not the config: build the "
                          "linears as\n#   Transformer Engine modules and run them under "
                          "te.fp8_autocast(fp8_recipe=%s)%s\n",
                          r, l->fp8_params ? " with te.fp8_model_init() (FP8 weights)" : "");
        else
            dp_buf_puts(b, "# FP8 GEMMs are set in the model code, not the config: torchao's\n"
                           "#   convert_to_float8_training(model, config=Float8LinearConfig."
                           "from_recipe_name(\"rowwise\"))\n");
    }
    dp_buf_puts(b, "\ncat > ds_config.json <<'EOF'\n");
    json_print(b, root, 0);
    cJSON_Delete(root);
    dp_buf_puts(b, "\nEOF\n\n");
    dp_buf_printf(b,
                  "# hostfile: one line per node, \"HOST slots=GPUS\"; replace %s0.. by the "
                  "node names\n",
                  host);
    dp_buf_printf(b, "for i in $(seq 0 %d); do echo \"%s$i slots=%d\"; done > hostfile\n\n",
                  cl->nodes - 1, host, cl->gpus_per_node);
    dp__rank_map(&c, b);
    dp_buf_printf(b,
                  "\ndeepspeed --hostfile hostfile --num_nodes %d --num_gpus %d --master_addr "
                  "%s0 --master_port %d \\\n    ",
                  cl->nodes, cl->gpus_per_node, host, c.o->port ? c.o->port : 29500);
    dp_buf_puts(b, c.o->program ? c.o->program : "train.py");
    /* deepspeed/__init__.py add_config_arguments: --deepspeed, --deepspeed_config */
    dp_buf_puts(b, " --deepspeed --deepspeed_config ds_config.json\n");
    return 0;
}
