/*
 * torchtitan: a recipe function returning a Trainer.Config (torchtitan moved
 * its configurations from TOML files to Python functions; see
 * torchtitan/config/README.md), and the same settings as the frozen
 * `--section.option` command-line overrides.
 *
 * Field names were checked against torchtitan main b5bcd76 (assets/version.txt
 * 0.2.2): torchtitan/config/configs.py (ParallelismConfig, TrainingConfig),
 * torchtitan/trainer.py (Trainer.Config), torchtitan/distributed/
 * activation_checkpoint.py (FullAC, SelectiveAC and their tyro subcommands),
 * tests/unit_tests/test_no_new_cli_options.py (the frozen CLI option list),
 * and docs/debugging.md (boolean flags as --x / --no_x).
 */
#include "internal.h"

#include <stdio.h>
#include <string.h>

#define TORCHTITAN_VERSION "torchtitan main b5bcd76 (version 0.2.2)"

/* ------------------------------------------------------------------ checks */

static int no_fp16(const struct dp__ctx *c)
{
    if (c->l->precision == DP_FP16)
        return dp__refuse(c, "layout.precision",
                          "fp16 has no torchtitan equivalent: training.mixed_precision_param "
                          "takes bfloat16 or float32");
    return 0;
}

static int sharding(const struct dp__ctx *c)
{
    /* ParallelDims.fsdp_enabled = dp_shard > 1 or cp > 1: FSDP2 shards parameters,
     * gradients and optimizer state together (torchtitan/distributed/parallel_dims.py). */
    if (c->l->zero == 1 && c->l->dp * c->l->cp > 1)
        return dp__refuse(c, "layout.zero",
                          "zero=1 (optimizer state sharded alone) has no torchtitan "
                          "equivalent: FSDP2 shards parameters too (zero=2 or 3) and DDP "
                          "shards nothing (zero=0)");
    if (c->l->zero == 0 && c->l->cp > 1)
        return dp__refuse(c, "layout.zero",
                          "zero=0 with cp=%d: torchtitan applies FSDP over the context-parallel "
                          "ranks (ParallelDims.fsdp_enabled), which shards the parameters "
                          "(zero=3)",
                          c->l->cp);
    return 0;
}

static int fp32_grads(const struct dp__ctx *c)
{
    if (c->l->precision != DP_FP32 && !c->l->grad_fp32)
        return dp__refuse(c, "layout.grad_fp32",
                          "%s gradients (FSDP2 reduce_dtype %s): torchtitan reduces in float32 "
                          "only (training.mixed_precision_reduce)",
                          dp_precision_name(c->l->precision), dp_precision_name(c->l->precision));
    return 0;
}

static int fused_attention(const struct dp__ctx *c)
{
    if (!c->l->flash_attn)
        return dp__refuse(c, "layout.flash_attn",
                          "attention without a fused kernel: torchtitan's backends (flex, "
                          "sdpa, varlen) never keep the s x s scores");
    return 0;
}

static int adam(const struct dp__ctx *c)
{
    if (c->l->optimizer == DP_OPT_SGD)
        return dp__refuse(c, "layout.optimizer",
                          "sgd: torchtitan's optimizers are Adam, AdamW and DistMuon "
                          "(torchtitan/components/optimizer/optimizer.py)");
    if (c->l->optimizer == DP_OPT_MUON)
        return dp__refuse(c, "layout.optimizer",
                          "muon: torchtitan's DistMuon runs on its flex_shard data parallelism, "
                          "not the FSDP2 the plan was priced with");
    return 0;
}

static int overlapped(const struct dp__ctx *c)
{
    if (!c->l->dp_overlap && c->l->dp * c->l->cp > 1)
        return dp__refuse(c, "layout.dp_overlap",
                          "no overlap of the gradient reduction: torchtitan's FSDP2 and DDP "
                          "always overlap it with backward");
    return 0;
}

static int ep_mesh(const struct dp__ctx *c)
{
    /* ParallelismConfig.expert_parallel_degree: dp_shard * cp * tp == efsdp * ep */
    const struct dp_layout *l = c->l;
    int dense = (l->zero >= 2 ? l->dp : 1) * l->cp * l->tp;
    if (l->ep > 1 && dense % l->ep)
        return dp__refuse(c, "layout.ep",
                          "ep=%d does not divide dp_shard x cp x tp = %d: torchtitan borrows "
                          "expert-parallel ranks from FSDP, CP and TP",
                          l->ep, dense);
    return 0;
}

/* torchtitan's FP8 is a model converter (torchtitan/components/quantization at the
 * TORCHTITAN_VERSION): Float8LinearConverter takes the rowwise recipes only (tensorwise,
 * delayed and its float8 all-gather are gone: "for float8 with rowwise scaling, all
 * distributed communication is done in high precision", float8.md) and
 * MXFP8LinearConverter runs MXFP8. */
static int fp8_expressible(const struct dp__ctx *c)
{
    const struct dp_layout *l = c->l;
    if (dp_layout_gemm(l) != DP_GEMM_FP8)
        return 0;
    if (l->fp8_recipe != DP_FP8_ROWWISE && l->fp8_recipe != DP_FP8_MXFP8)
        return dp__refuse(c, "layout.fp8_recipe",
                          "%s scaling has no torchtitan converter: Float8LinearConverter takes "
                          "rowwise, MXFP8LinearConverter mxfp8",
                          dp_fp8_recipe_name(l->fp8_recipe));
    if (l->fp8_params)
        return dp__refuse(c, "layout.fp8_params",
                          "FP8 weights gathered in FP8: torchtitan's %s converter keeps bf16 "
                          "weights and gathers them in bf16",
                          l->fp8_recipe == DP_FP8_MXFP8 ? "MXFP8" : "float8 rowwise");
    return 0;
}

static int split_expressible(const struct dp__ctx *c);
static int ac_expressible(const struct dp__ctx *c)
{
    /* main's FullAC wraps every block; layer SAC (selective_ac_option N, torchtitan 0.2)
     * and Megatron's block/uniform chunks have no main equivalent */
    const struct dp_layout *l = c->l;
    if (l->recompute == DP_RECOMPUTE_FULL &&
        (l->recompute_method == DP_RC_EVERY || l->recompute_layers > 1))
        return dp__refuse(
            c, "layout.recompute_method",
            "full recompute of some layers (%s %d) has no torchtitan main "
            "equivalent: FullAC checkpoints every block",
            l->recompute_method == DP_RC_EVERY ? "every" : "n =", l->recompute_layers);
    if (dp_layout_replicas(l) > 1 && l->zero < 2)
        return dp__refuse(c, "layout.shard_group",
                          "shard_group=%d with zero=%d: torchtitan's HSDP is FSDP2 over a 2-D "
                          "mesh (zero=2 or 3)",
                          l->shard_group, l->zero);
    if (dp_layout_replicas(l) > 1 && (l->dp % dp_layout_replicas(l)))
        return dp__refuse(c, "layout.shard_group",
                          "shard_group=%d spans context-parallel ranks unevenly: "
                          "torchtitan's replicate degree must divide dp=%d",
                          l->shard_group, l->dp);
    return 0;
}
/* torchtitan fully_shard-s each pipeline part's root, so its schedule defers FSDP's sync to
 * the last micro-batch: a plan priced with a sync every micro-batch is another stack's. */
static int schedule_sync(const struct dp__ctx *c)
{
    if (c->l->fsdp_per_microbatch && c->l->pp > 1 && c->l->zero >= 2)
        return dp__refuse(c, "layout.fsdp_per_microbatch",
                          "FSDP gathering and reduce-scattering every micro-batch under pipeline "
                          "parallelism (NeMo Automodel's stages) is not torchtitan's: its "
                          "schedule syncs once per step; re-plan without it");
    return 0;
}
static int megatron_only(const struct dp__ctx *c)
{
    int rc = dp__refuse_mtp(c, "torchtitan",
                            "its models (DeepSeek-V3 too) train the next-token loss only");
    return rc ? rc : dp__refuse_fp8_attention(c, "torchtitan");
}
static const dp__check_fn checks[] = {
    no_fp16, sharding,          fp32_grads,     fused_attention, adam,          overlapped,
    ep_mesh, split_expressible, ac_expressible, fp8_expressible, megatron_only, schedule_sync};

/* ------------------------------------------------------------------ options */

/* FSDP2 shards over data_parallel_shard_degree x cp; HSDP replicates across
 * data_parallel_replicate_degree groups (ParallelDims, mesh [dp_replicate, dp_shard, cp]).
 * dplan's shard group counts dp x cp ranks. */
static int replicate(const struct dp__ctx *c, struct dp__val *v)
{
    return dp__int(v, c->l->zero >= 2 ? dp_layout_replicas(c->l) : c->l->dp);
}
static int shard(const struct dp__ctx *c, struct dp__val *v)
{
    return dp__int(v, c->l->zero >= 2 ? c->l->dp / dp_layout_replicas(c->l) : 1);
}
static int reshard(const struct dp__ctx *c, struct dp__val *v)
{
    /* ZeRO-3 frees gathered parameters after forward; ZeRO-2 keeps them until backward
     * is done ("never": FSDP2's reshard_after_forward=False). */
    if (c->l->zero < 2)
        return 0;
    return dp__str(v, c->l->zero == 3 ? "always" : "never");
}
static int tp(const struct dp__ctx *c, struct dp__val *v)
{
    return dp__int(v, c->l->tp);
}
static int sp(const struct dp__ctx *c, struct dp__val *v)
{
    return c->l->tp > 1 ? dp__bool(v, c->l->sp) : 0;
}
static int pp(const struct dp__ctx *c, struct dp__val *v)
{
    return dp__int(v, c->l->pp);
}
static int schedule(const struct dp__ctx *c, struct dp__val *v)
{
    if (c->l->pp == 1)
        return 0;
    if (c->l->schedule == DP_SCHED_DUALPIPEV) /* its V placement ("v" stage style) */
        return dp__str(v, "DualPipeV");
    return dp__str(v, c->l->vpp > 1 ? "Interleaved1F1B" : "1F1B");
}
/*
 * torchtitan splits L layers into S = ceil((L + first_less + last_less) /
 * layers_per_stage) model chunks: chunk 0 holds layers_per_stage - first_less
 * layers, the last chunk layers_per_stage - last_less, the others
 * layers_per_stage (_get_pipeline_metadata and _generate_llm_fqn_per_model_part,
 * torchtitan/distributed/pipeline_parallel.py). With layers_per_stage the
 * largest stage's layers per chunk, first_less and last_less the first and
 * last stages' shortfall, L + first_less + last_less = S x layers_per_stage
 * exactly and every chunk gets dplan's count, provided the middle stages are
 * the largest (dplan's uneven splits shorten the first and last stages).
 */
struct split {
    int per_chunk, first_less, last_less;
};

static int pp_split(const struct dp__ctx *c, struct split *out)
{
    /* The chunks in model order (torchtitan's stage s runs on rank s % pp, looped);
     * layers_per_stage is the largest middle chunk, the shortfalls of the first and the
     * last chunk are the less-layers, and torchtitan's own rule must give back every
     * count (dp_split_torchtitan implements it). */
    const struct dp_layout *l = c->l;
    int ch[DP_MAX_CHUNKS], back[DP_MAX_CHUNKS];
    int S = dp_layout_expand(l, c->m, ch, DP_MAX_CHUNKS), most = 0;
    if (S < 2)
        return dp__refuse(c, "layout.pp", "pp=%d x vpp=%d model chunks exceeds %d", l->pp, l->vpp,
                          DP_MAX_CHUNKS);
    for (int s = S > 2 ? 1 : 0; s < (S > 2 ? S - 1 : S); s++)
        if (ch[s] > most)
            most = ch[s];
    out->per_chunk = most;
    out->first_less = most - ch[0];
    out->last_less = most - ch[S - 1];
    struct dp_err e = {0};
    bool same = most > 0 && out->first_less >= 0 && out->last_less >= 0 &&
                (c->m->layers + out->first_less + out->last_less + most - 1) / most == S &&
                dp_split_torchtitan(c->m->layers, l->pp, l->vpp, out->first_less, out->last_less,
                                    back, "split", DP_EINFEASIBLE, &e) == 0;
    for (int s = 0; same && s < S; s++)
        same = back[s] == ch[s];
    if (!same) {
        char list[128];
        dp_split_format_list(ch, S, list, sizeof list);
        return dp__refuse(c, l->nchunks ? "layout.stage_layers" : "layout.first_stage_layers",
                          "the split %s is not torchtitan's (pipeline_parallel_layers_per_stage "
                          "and first/last_stage_less_layers: equal chunks but the first and "
                          "last, any remainder on the first chunks)",
                          list);
    }
    return 0;
}

static int split_expressible(const struct dp__ctx *c)
{
    struct split ps;
    return c->l->pp > 1 ? pp_split(c, &ps) : 0;
}

static int layers_per_stage(const struct dp__ctx *c, struct dp__val *v)
{
    struct split ps;
    if (c->l->pp == 1 || pp_split(c, &ps))
        return 0;
    return dp__int(v, ps.per_chunk);
}
static int first_less(const struct dp__ctx *c, struct dp__val *v)
{
    struct split ps;
    if (c->l->pp == 1 || pp_split(c, &ps))
        return 0;
    return dp__int(v, ps.first_less);
}
static int last_less(const struct dp__ctx *c, struct dp__val *v)
{
    struct split ps;
    if (c->l->pp == 1 || pp_split(c, &ps))
        return 0;
    return dp__int(v, ps.last_less);
}
static int microbatches(const struct dp__ctx *c, struct dp__val *v)
{
    /* one schedule's micro-batches (the local batch's; all of a step's by default) go
     * through the pipeline; torchtitan accumulates over the schedules of a step */
    return c->l->pp > 1 ? dp__int(v, dp_layout_schedule_microbatches(c->l)) : 0;
}
static int cp(const struct dp__ctx *c, struct dp__val *v)
{
    return dp__int(v, c->l->cp);
}
static int ep(const struct dp__ctx *c, struct dp__val *v)
{
    return c->m->experts ? dp__int(v, c->l->ep) : 0;
}
static int context(const struct dp__ctx *c, struct dp__val *v)
{
    return dp__int(v, c->l->seq_len);
}
static int tokens_micro(const struct dp__ctx *c, struct dp__val *v)
{
    /* "input-token slots per data-parallel rank in one model forward, before context or
     * tensor parallel sharding": one micro-batch of mbs sequences */
    return dp__int(v, c->l->mbs * c->l->seq_len);
}
static int tokens_step(const struct dp__ctx *c, struct dp__val *v)
{
    /* the global batch; torchtitan derives gradient accumulation from it */
    return dp__int(v, c->l->gbs * c->l->seq_len);
}
static int param_dtype(const struct dp__ctx *c, struct dp__val *v)
{
    return dp__str(v, c->l->precision == DP_FP32 ? "float32" : "bfloat16");
}

static const struct dp__opt opts[] = {
    {"parallelism", "data_parallel_replicate_degree", replicate},
    {"parallelism", "data_parallel_shard_degree", shard},
    {"parallelism", "fsdp_reshard_after_forward", reshard},
    {"parallelism", "tensor_parallel_degree", tp},
    {"parallelism", "enable_sequence_parallel", sp},
    {"parallelism", "pipeline_parallel_degree", pp},
    {"parallelism", "pipeline_parallel_schedule", schedule},
    {"parallelism", "pipeline_parallel_layers_per_stage", layers_per_stage},
    {"parallelism", "pipeline_parallel_first_stage_less_layers", first_less},
    {"parallelism", "pipeline_parallel_last_stage_less_layers", last_less},
    {"parallelism", "num_pp_microbatches", microbatches},
    {"parallelism", "context_parallel_degree", cp},
    {"parallelism", "expert_parallel_degree", ep},
    {"training", "max_context_length", context},
    {"training", "num_tokens_per_microbatch_per_dp_rank", tokens_micro},
    {"training", "num_tokens_per_train_step", tokens_step},
    {"training", "mixed_precision_param", param_dtype},
};

/* torchtitan's own configurations of dplan's shipped architectures, matched by shape:
 * torchtitan/models/llama3/__init__.py (_8b, _70b, _405b) and config_registry.py; the
 * mixture of experts by its experts (ffn: the routed experts' width, top_k):
 * torchtitan/models/qwen3/__init__.py _30b_a3b and config_registry.py qwen3_30b_a3b, whose
 * loss is a ChunkedLossWrapper (chunked_loss). */
static const struct base {
    int64_t layers, hidden, heads, kv_heads, ffn, vocab, experts, top_k;
    const char *module, *flavor, *function;
    bool chunked_loss;
} bases[] = {
    {32, 4096, 32, 8, 14336, 128256, 0, 0, "llama3", "8B", "llama3_8b", false},
    {80, 8192, 64, 8, 28672, 128256, 0, 0, "llama3", "70B", "llama3_70b", false},
    {126, 16384, 128, 8, 53248, 128256, 0, 0, "llama3", "405B", "llama3_405b", false},
    {48, 2048, 32, 4, 768, 151936, 128, 8, "qwen3", "30B-A3B", "qwen3_30b_a3b", true},
};

static const struct base *find_base(const struct dp_model *m)
{
    for (size_t i = 0; i < sizeof bases / sizeof bases[0]; i++) {
        const struct base *b = &bases[i];
        int64_t ffn = b->experts ? m->moe_ffn_hidden : m->ffn_hidden;
        if (m->layers == b->layers && m->hidden == b->hidden && m->heads == b->heads &&
            m->kv_heads == b->kv_heads && ffn == b->ffn && m->vocab == b->vocab &&
            m->ffn == DP_FFN_SWIGLU && m->norm == DP_NORM_RMSNORM && m->pos == DP_POS_ROPE &&
            !m->tied_embeddings && m->experts == b->experts &&
            (!b->experts || (m->top_k == b->top_k && !m->moe_shared_experts && m->qk_norm)))
            return b;
    }
    return NULL;
}

static void python_value(struct dp_buf *b, const struct dp__val *v)
{
    switch (v->kind) {
    case DP__INT: dp_buf_printf(b, "%lld", v->i); break;
    case DP__BOOL: dp_buf_puts(b, v->b ? "True" : "False"); break;
    case DP__STR: dp_buf_printf(b, "\"%s\"", v->s); break;
    default: dp_buf_puts(b, v->s); break;
    }
}

/* "--section.option value"; booleans are flags: --x or --no_x (docs/debugging.md). */
static void cli_override(struct dp_buf *b, const struct dp__opt *o, const struct dp__val *v)
{
    if (v->kind == DP__BOOL) {
        dp_buf_printf(b, " \\\n#     --%s.%s%s", o->section, v->b ? "" : "no_", o->name);
        return;
    }
    dp_buf_printf(b, " \\\n#     --%s.%s ", o->section, o->name);
    if (v->kind == DP__INT)
        dp_buf_printf(b, "%lld", v->i);
    else
        dp__shell_word(b, v->s);
}

/* The activation checkpoint policy: a Python value, its import and its tyro subcommand
 * (ActivationCheckpointingConfig: selective, full, memory-budget, none). */
static void ac_policy(const struct dp_layout *l, const char **py, const char **cls,
                      const char **cli)
{
    switch (l->recompute) {
    case DP_RECOMPUTE_FULL:
        *py = "FullAC.Config()", *cls = "FullAC", *cli = "activation-checkpoint:full";
        break;
    case DP_RECOMPUTE_SELECTIVE:
    case DP_RECOMPUTE_OP:
        /* SelectiveAC is torchtitan's per-op SAC (activation_checkpoint.py _apply_op_sac) */
        *py = "SelectiveAC.Config()", *cls = "SelectiveAC",
        *cli = "activation-checkpoint:selective";
        break;
    default: *py = "None", *cls = NULL, *cli = "activation-checkpoint:none"; break;
    }
}

int dp__export_torchtitan(const struct dp__ctx *c0, struct dp_buf *b)
{
    struct dp__ctx c = *c0;
    c.framework = "torchtitan";
    int rc = dp__run_checks(&c, checks, (int)(sizeof checks / sizeof checks[0]));
    if (rc)
        return rc;
    const struct dp_layout *l = c.l;
    const struct base *base = find_base(c.m);
    const char *ac_py, *ac_cls, *ac_cli;
    ac_policy(l, &ac_py, &ac_cls, &ac_cli);
    char fn[96];
    snprintf(fn, sizeof fn, "dplan_%s", c.m->name);
    for (char *p = fn; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9')))
            *p = '_';

    dp_buf_puts(b, "# torchtitan recipe (dplan export --format torchtitan)\n");
    dp__header(&c, b, "#");
    dp_buf_printf(
        b,
        "# field names: %s: torchtitan/config/configs.py\n"
        "#   (ParallelismConfig, TrainingConfig), torchtitan/trainer.py (Trainer.Config),\n"
        "#   torchtitan/distributed/activation_checkpoint.py\n",
        TORCHTITAN_VERSION);
    char dpw[160];
    if (l->zero >= 2 && dp_layout_replicas(l) > 1)
        snprintf(dpw, sizeof dpw,
                 "HSDP: FSDP2 shards over %d (data_parallel_shard_degree) and replicates %d "
                 "times (data_parallel_replicate_degree)",
                 l->dp / dp_layout_replicas(l), dp_layout_replicas(l));
    else
        snprintf(dpw, sizeof dpw, "%s",
                 l->zero >= 2 ? "FSDP2 shards over it (data_parallel_shard_degree)"
                              : "DDP replicas (data_parallel_replicate_degree)");
    dp_buf_printf(b, "# data parallel %d: %s; the world size (%d GPUs) is set by the launcher\n",
                  l->dp, dpw, l->tp * l->pp * l->dp * l->cp);
    if (l->recompute == DP_RECOMPUTE_SELECTIVE)
        dp_buf_puts(b, "# selective: torchtitan's SelectiveAC saves the outputs of compute-heavy "
                       "ops and recomputes\n#   the rest, not exactly the attention core dplan's "
                       "memory model recomputes\n");
    /* torchtitan's language-model registries build FlexAttention unless told otherwise
     * (attn_backend "flex" in each model's model_registry, the default since PR 3571 of
     * 2026-06-09, which deprecated SDPA for them); a plan priced with another kernel says so. */
    if (l->attn != DP_ATTN_FLEX)
        dp_buf_printf(
            b,
            "# attention: this recipe's model runs FlexAttention (torchtitan's default "
            "attn_backend \"flex\");\n#   the plan was priced with %s: put \"attention\": "
            "\"flex\" in its layout to price what runs\n",
            l->attn == DP_ATTN_DEFAULT ? "the GPU's default kernel" : dp_attn_name(l->attn));
    dp_buf_puts(b, "\n");
    const bool fp8 = dp_layout_gemm(l) == DP_GEMM_FP8;
    const bool mx = dp_layout_mxfp8(l);
    /* The decoder layers' linears only: dplan costs the output layer in bf16. */
    const char *conv_cls = mx ? "MXFP8LinearConverter" : "Float8LinearConverter";
    const char *conv_args =
        mx ? "fqns=[\"layers\"]" : "recipe_name=\"rowwise\", filter_fqns=[\"lm_head\"]";
    if (fp8)
        dp_buf_printf(b, "from torchtitan.components.quantization import %s\n", conv_cls);
    const bool chunks = l->loss_chunks > 1 || (base && base->chunked_loss);
    if (chunks)
        dp_buf_puts(b, "from torchtitan.components.loss import ChunkedLossWrapper\n");
    if (ac_cls)
        dp_buf_printf(b, "from torchtitan.distributed.activation_checkpoint import %s\n", ac_cls);
    if (base) {
        dp_buf_printf(b, "from torchtitan.models.%s import model_registry\n", base->module);
        dp_buf_printf(b, "from torchtitan.models.%s.config_registry import %s\n", base->module,
                      base->function);
    }
    dp_buf_puts(b, "from torchtitan.trainer import Trainer\n\n\n");
    if (!base) {
        const struct dp_model *m = c.m;
        dp_buf_puts(b, "def base_config() -> Trainer.Config:\n");
        dp_buf_printf(b,
                      "    # torchtitan ships no configuration of %s (%lld layers, hidden %lld, "
                      "%lld heads,\n"
                      "    # %lld kv heads, ffn %lld %s, vocab %lld): return one built like those "
                      "in\n"
                      "    # torchtitan/models/*/config_registry.py.\n",
                      m->name, (long long)m->layers, (long long)m->hidden, (long long)m->heads,
                      (long long)m->kv_heads, (long long)m->ffn_hidden, dp_ffn_name(m->ffn),
                      (long long)m->vocab);
        if (fp8)
            dp_buf_printf(b,
                          "    # the plan's linears compute in FP8: build the model_spec with\n"
                          "    # converters=[%s.Config(%s, model_compile_enabled=compiled)]\n",
                          conv_cls, conv_args);
        dp_buf_printf(b, "    raise NotImplementedError(\"a Trainer.Config for %s\")\n\n\n",
                      m->name);
    }
    dp_buf_printf(b, "def %s() -> Trainer.Config:\n", fn);
    dp_buf_printf(b, "    config = %s()\n", base ? base->function : "base_config");
    if (base && fp8)
        dp_buf_printf(b,
                      "    # the plan's linears compute in FP8 (%s), the output layer in %s\n"
                      "    compiled = config.compile.enable and \"model\" in "
                      "config.compile.components\n"
                      "    config.model_spec = model_registry(\n"
                      "        \"%s\",\n"
                      "        converters=[\n"
                      "            %s.Config(\n"
                      "                %s, model_compile_enabled=compiled\n"
                      "            ),\n"
                      "        ],\n"
                      "    )\n",
                      mx ? "MXFP8" : "rowwise scaling", dp_precision_name(l->precision),
                      base->flavor, conv_cls, conv_args);
    else if (base)
        dp_buf_printf(b,
                      "    # the model without %s's converters (float8 and the like): the plan "
                      "is %s\n"
                      "    config.model_spec = model_registry(\"%s\")\n",
                      base->function, dp_precision_name(l->precision), base->flavor);
    struct dp_buf cli = {0};
    const size_t nopt = sizeof opts / sizeof opts[0];
    for (size_t i = 0; i < nopt; i++) {
        struct dp__val v = {0};
        int got = opts[i].get(&c, &v);
        if (got < 0) {
            dp_buf_release(&cli);
            return got;
        }
        if (got == 0)
            continue;
        dp_buf_printf(b, "    config.%s.%s = ", opts[i].section, opts[i].name);
        python_value(b, &v);
        dp_buf_puts(b, "\n");
        cli_override(&cli, &opts[i], &v);
    }
    /* The chunked loss (components/loss.py ChunkedLossWrapper: num_chunks, loss_fn); a
     * base config whose loss is already one (the Qwen3 ones) keeps its inner loss. */
    if (l->loss_chunks > 1)
        dp_buf_printf(b,
                      "    # the output layer and loss on %d slices of the tokens in turn\n"
                      "    if isinstance(config.loss, ChunkedLossWrapper.Config):\n"
                      "        config.loss.num_chunks = %d\n"
                      "    else:\n"
                      "        config.loss = ChunkedLossWrapper.Config(num_chunks=%d, "
                      "loss_fn=config.loss)\n",
                      l->loss_chunks, l->loss_chunks, l->loss_chunks);
    else if (chunks)
        dp_buf_printf(
            b,
            "    # the plan's loss runs on all tokens at once: %s's chunked loss unwrapped\n"
            "    config.loss = config.loss.loss_fn\n",
            base->function);
    dp_buf_printf(b, "    config.activation_checkpoint = %s\n    return config\n", ac_py);
    dp_buf_printf(b,
                  "\n\n# Run it: put this function in a module of yours (torchtitan_recipes/ is "
                  "the place in a\n"
                  "# torchtitan checkout) and start, on every node (dplan export --format "
                  "torchrun):\n"
                  "#   torchrun ... -m torchtitan.train --module <your module> --config %s\n",
                  fn);
    dp_buf_printf(
        b,
        "#\n# Or the same settings as command-line overrides of %s (the CLI is "
        "frozen; it takes\n"
        "# precedence over the function but cannot change the model%s%s):\n"
        "#   torchrun ... -m torchtitan.train --module %s --config %s%s \\\n#     %s\n",
        base ? base->function : "your base config", fp8 ? ", its FP8 converter included" : "",
        l->loss_chunks > 1 ? " or make its loss a ChunkedLossWrapper" : "",
        base ? base->module : "<your module>", base ? base->function : "<your base config>",
        cli.failed || !cli.data ? "" : cli.data, ac_cli);
    bool failed = cli.failed;
    dp_buf_release(&cli);
    if (failed)
        b->failed = true;
    return 0;
}
