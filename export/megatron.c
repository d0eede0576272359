/*
 * Megatron-LM / Megatron-Core arguments for pretrain_gpt.py, as bash arrays
 * in the style of the example scripts in Megatron-LM's examples/gpt3.
 *
 * Option names were checked against Megatron-LM at tag core_v0.19.0 and at
 * main d98e8a6 (megatron/core/package_info.py 0.20.0), where most flags are
 * generated from dataclass fields by megatron/training/argument_utils.py
 * (ArgumentGroupFactory: field foo_bar -> --foo-bar, argparse_meta arg_names
 * override it). Each entry below names the file that defines its flag.
 */
#include "internal.h"

#include <stdio.h>
#include <string.h>

#define MEGATRON_VERSION "Megatron-LM core_v0.19.0 and main d98e8a6 (Megatron-Core 0.20.0)"

/* ------------------------------------------------------------------ checks */

static int no_alibi(const struct dp__ctx *c)
{
    if (c->m->pos == DP_POS_ALIBI)
        return dp__refuse(c, "model.position",
                          "alibi has no Megatron-LM equivalent (--position-embedding-type takes "
                          "learned_absolute, rope, yarn, mrope, relative or none)");
    return 0;
}

static int two_norms(const struct dp__ctx *c)
{
    if (c->m->norms_per_layer != 2)
        return dp__refuse(c, "model.norms_per_layer",
                          "%d norm per layer (parallel attention) has no Megatron-LM GPT layer "
                          "equivalent: its layers have an input and a pre-MLP norm",
                          c->m->norms_per_layer);
    return 0;
}

static int biases(const struct dp__ctx *c)
{
    /* TransformerConfig.add_bias_linear covers every linear layer; add_qkv_bias adds
     * biases to QKV alone (megatron/core/transformer/transformer_config.py). */
    const struct dp_model *m = c->m;
    bool all = m->qkv_bias && m->out_bias && m->mlp_bias;
    bool none_but_qkv = !m->out_bias && !m->mlp_bias;
    if (!all && !none_but_qkv)
        return dp__refuse(c, "model.out_bias",
                          "biases on the attention output (%s) and the MLP (%s) differ or go "
                          "without QKV biases: Megatron-LM sets all linear biases at once "
                          "(--disable-bias-linear), with --add-qkv-bias for QKV alone",
                          m->out_bias ? "yes" : "no", m->mlp_bias ? "yes" : "no");
    return 0;
}

static int fsdp_without_pp(const struct dp__ctx *c)
{
    if (c->l->zero >= 2 && c->l->pp > 1)
        return dp__refuse(c, "layout.zero",
                          "zero=%d with pp=%d: Megatron-LM shards gradients and parameters only "
                          "with Megatron-FSDP, which this export uses without pipeline "
                          "parallelism; use zero=1 (--use-distributed-optimizer) with pp",
                          c->l->zero, c->l->pp);
    return 0;
}

static int layout_fits(const struct dp__ctx *c)
{
    if (c->l->nchunks == 0)
        return 0;
    int ch[DP_MAX_CHUNKS], n = c->l->nchunks;
    for (int s = 0; s < n && s < DP_MAX_CHUNKS; s++)
        ch[s] = c->l->chunk_layers[s];
    char buf[1024];
    dp_split_format_megatron(ch, n, c->l->mtp_layers, buf, sizeof buf);
    if (strlen(buf) >= sizeof((struct dp__val *)0)->s)
        return dp__refuse(c, "layout.stage_layers",
                          "the split's --pipeline-model-parallel-layout string is %zu characters, "
                          "more than this export writes (%zu)",
                          strlen(buf), sizeof((struct dp__val *)0)->s - 1);
    return 0;
}

static int fp8_recipe_known(const struct dp__ctx *c)
{
    /* --fp8-recipe choices: tensorwise, delayed, mxfp8, blockwise (arguments.py). */
    if (dp_layout_gemm(c->l) == DP_GEMM_FP8 && c->l->fp8_recipe == DP_FP8_ROWWISE)
        return dp__refuse(c, "layout.fp8_recipe",
                          "rowwise (torchao's per-row scaling) has no Megatron-LM equivalent: "
                          "--fp8-recipe takes tensorwise, delayed, mxfp8 or blockwise");
    return 0;
}

static int recompute_policy(const struct dp__ctx *c)
{
    if (c->l->recompute == DP_RECOMPUTE_OP ||
        (c->l->recompute == DP_RECOMPUTE_FULL && c->l->recompute_method == DP_RC_EVERY))
        return dp__refuse(
            c, c->l->recompute == DP_RECOMPUTE_OP ? "layout.recompute" : "layout.recompute_method",
            "%s is torchtitan's; Megatron-LM recomputes selective "
            "(--recompute-modules) or full (--recompute-method uniform or block)",
            c->l->recompute == DP_RECOMPUTE_OP ? "op (per-op SAC)" : "every (layer SAC)");
    return 0;
}

static int hsdp_sharding(const struct dp__ctx *c)
{
    /* --num-distributed-optimizer-instances shards the distributed optimizer within
     * dp/instances ranks (param_and_grad_buffer.py); Megatron-FSDP's own HSDP is not
     * written by this export. */
    if (dp_layout_replicas(c->l) > 1 && c->l->zero != 1)
        return dp__refuse(c, "layout.shard_group",
                          "shard_group=%d with zero=%d: this export writes HSDP as the "
                          "distributed optimizer's instances (--num-distributed-optimizer-"
                          "instances), which needs zero=1",
                          c->l->shard_group, c->l->zero);
    return 0;
}

static int no_dualpipev(const struct dp__ctx *c)
{
    return dp__refuse_dualpipev(c, "Megatron-LM");
}
static const dp__check_fn checks[] = {no_dualpipev,     no_alibi,        two_norms,
                                      biases,           fsdp_without_pp, fp8_recipe_known,
                                      recompute_policy, hsdp_sharding,   layout_fits};

/* ------------------------------------------------------------------ options: model */

static int num_layers(const struct dp__ctx *c, struct dp__val *v)
{
    return dp__int(v, c->m->layers);
}
static int hidden_size(const struct dp__ctx *c, struct dp__val *v)
{
    return dp__int(v, c->m->hidden);
}
static int ffn_hidden_size(const struct dp__ctx *c, struct dp__val *v)
{
    return dp__int(v, c->m->ffn_hidden);
}
static int num_heads(const struct dp__ctx *c, struct dp__val *v)
{
    return dp__int(v, c->m->heads);
}
static int gqa(const struct dp__ctx *c, struct dp__val *v)
{
    return c->m->kv_heads != c->m->heads ? dp__flag(v) : 0;
}
static int query_groups(const struct dp__ctx *c, struct dp__val *v)
{
    return c->m->kv_heads != c->m->heads ? dp__int(v, c->m->kv_heads) : 0;
}
static int kv_channels(const struct dp__ctx *c, struct dp__val *v)
{
    /* Megatron defaults kv_channels to hidden / heads (TransformerConfig.__post_init__);
     * multi-latent attention sizes its heads with the MLA options instead. */
    if (c->m->mla)
        return 0;
    return c->m->head_dim != c->m->hidden / c->m->heads ? dp__int(v, c->m->head_dim) : 0;
}
static int max_positions(const struct dp__ctx *c, struct dp__val *v)
{
    /* validate_args requires max_position_embeddings >= seq_length. */
    int64_t n = c->m->pos == DP_POS_LEARNED ? c->m->max_pos : c->l->seq_len;
    return dp__int(v, n > c->l->seq_len ? n : c->l->seq_len);
}
static int position_type(const struct dp__ctx *c, struct dp__val *v)
{
    return dp__str(v, c->m->pos == DP_POS_ROPE ? "rope" : "learned_absolute");
}
static int normalization(const struct dp__ctx *c, struct dp__val *v)
{
    return dp__str(v, c->m->norm == DP_NORM_RMSNORM ? "RMSNorm" : "LayerNorm");
}
static int swiglu(const struct dp__ctx *c, struct dp__val *v)
{
    return c->m->ffn == DP_FFN_SWIGLU ? dp__flag(v) : 0;
}
static int untie(const struct dp__ctx *c, struct dp__val *v)
{
    return c->m->tied_embeddings ? 0 : dp__flag(v);
}
static int no_linear_bias(const struct dp__ctx *c, struct dp__val *v)
{
    return c->m->out_bias ? 0 : dp__flag(v);
}
static int qkv_bias(const struct dp__ctx *c, struct dp__val *v)
{
    return !c->m->out_bias && c->m->qkv_bias ? dp__flag(v) : 0;
}
static int dropout(const struct dp__ctx *c, struct dp__val *v)
{
    /* Megatron's default is 0.1 for both; a model without dropout layers trains with 0. */
    return c->m->dropout ? 0 : dp__str(v, "0.0");
}
static int experts(const struct dp__ctx *c, struct dp__val *v)
{
    return c->m->experts ? dp__int(v, c->m->experts) : 0;
}
static int topk(const struct dp__ctx *c, struct dp__val *v)
{
    return c->m->experts ? dp__int(v, c->m->top_k) : 0;
}
static int moe_ffn(const struct dp__ctx *c, struct dp__val *v)
{
    return c->m->experts ? dp__int(v, c->m->moe_ffn_hidden) : 0;
}
static int qk_layernorm(const struct dp__ctx *c, struct dp__val *v)
{
    return c->m->qk_norm ? dp__flag(v) : 0;
}
/* Multi-latent attention (DeepSeek-V2/V3): the ranks and head widths of
 * MLATransformerConfig; q_lora_rank None is a plain query projection. */
static int mla(const struct dp__ctx *c, struct dp__val *v)
{
    return c->m->mla ? dp__flag(v) : 0;
}
static int q_lora_rank(const struct dp__ctx *c, struct dp__val *v)
{
    return c->m->mla && c->m->mla_q_rank > 0 ? dp__int(v, c->m->mla_q_rank) : 0;
}
static int kv_lora_rank(const struct dp__ctx *c, struct dp__val *v)
{
    return c->m->mla ? dp__int(v, c->m->mla_kv_rank) : 0;
}
static int qk_head_dim(const struct dp__ctx *c, struct dp__val *v)
{
    return c->m->mla ? dp__int(v, c->m->mla_nope_dim) : 0;
}
static int qk_pos_emb_head_dim(const struct dp__ctx *c, struct dp__val *v)
{
    return c->m->mla ? dp__int(v, c->m->mla_rope_dim) : 0;
}
static int v_head_dim(const struct dp__ctx *c, struct dp__val *v)
{
    return c->m->mla ? dp__int(v, c->m->mla_v_dim) : 0;
}
/* The first k layers dense (DeepSeek first_k_dense_replace): --moe-layer-freq takes a
 * Python list expression, 0 = dense, 1 = MoE (arguments.py moe_freq_type). */
static int moe_layer_freq(const struct dp__ctx *c, struct dp__val *v)
{
    const struct dp_model *m = c->m;
    if (!m->experts || m->moe_dense_layers <= 0)
        return 0;
    char freq[64];
    snprintf(freq, sizeof freq, "([0]*%lld+[1]*%lld)", (long long)m->moe_dense_layers,
             (long long)(m->layers - m->moe_dense_layers));
    return dp__str(v, freq);
}
/* Megatron sizes the shared experts as one MLP of their summed width
 * (SharedExpertMLP, moe_shared_expert_intermediate_size). */
static int shared_size(const struct dp__ctx *c, struct dp__val *v)
{
    const struct dp_model *m = c->m;
    return m->experts && m->moe_shared_experts > 0
               ? dp__int(v, m->moe_shared_experts * m->moe_shared_ffn_hidden)
               : 0;
}
static int shared_gate(const struct dp__ctx *c, struct dp__val *v)
{
    return c->m->experts && c->m->moe_shared_gate ? dp__flag(v) : 0;
}
/* DeepSeek-V3's e_score_correction_bias is aux-loss-free routing, which Megatron allows
 * only with sigmoid (or sqrtsoftplus) scores (TransformerConfig.__post_init__), the
 * scoring DeepSeek-V3's config names (scoring_func "sigmoid"). */
static int router_score(const struct dp__ctx *c, struct dp__val *v)
{
    return c->m->experts && c->m->moe_router_bias ? dp__str(v, "sigmoid") : 0;
}
static int router_bias(const struct dp__ctx *c, struct dp__val *v)
{
    return c->m->experts && c->m->moe_router_bias ? dp__flag(v) : 0;
}
/* Multi-token prediction (layout mtp_layers): Megatron-Core puts the MTP block on the
 * last pipeline stage, or where the layout string's 'm's are (written with it). */
static int mtp_layers(const struct dp__ctx *c, struct dp__val *v)
{
    return c->l->mtp_layers > 0 ? dp__int(v, c->l->mtp_layers) : 0;
}
static int vocab_divisible(const struct dp__ctx *c, struct dp__val *v)
{
    /* dplan's memory model pads the vocabulary to a multiple of 128 x tp, Megatron's
     * default for this flag (core/layout.c dp_padded_vocab). */
    return dp__int(v, 128);
}

/* ------------------------------------------------------------------ options: parallel */

static int tp(const struct dp__ctx *c, struct dp__val *v)
{
    return dp__int(v, c->l->tp);
}
static int pp(const struct dp__ctx *c, struct dp__val *v)
{
    return dp__int(v, c->l->pp);
}
/* An explicit split goes as a --pipeline-model-parallel-layout string, which sets vpp
 * itself and excludes --num-virtual-stages-per-pipeline-rank and the first/last counts
 * (megatron/training/arguments.py validate_args, "Uneven virtual pipeline parallelism"). */
static int vpp(const struct dp__ctx *c, struct dp__val *v)
{
    return c->l->vpp > 1 && c->l->nchunks == 0 ? dp__int(v, c->l->vpp) : 0;
}
static int pp_layout(const struct dp__ctx *c, struct dp__val *v)
{
    if (c->l->nchunks == 0)
        return 0;
    int ch[DP_MAX_CHUNKS], n = c->l->nchunks;
    for (int s = 0; s < n && s < DP_MAX_CHUNKS; s++)
        ch[s] = c->l->chunk_layers[s];
    char buf[sizeof v->s];
    dp_split_format_megatron(ch, n, c->l->mtp_layers, buf, sizeof buf);
    return dp__str(v, buf);
}
static int first_layers(const struct dp__ctx *c, struct dp__val *v)
{
    return c->l->first_stage_layers ? dp__int(v, c->l->first_stage_layers) : 0;
}
static int last_layers(const struct dp__ctx *c, struct dp__val *v)
{
    return c->l->last_stage_layers ? dp__int(v, c->l->last_stage_layers) : 0;
}
static int cp(const struct dp__ctx *c, struct dp__val *v)
{
    return dp__int(v, c->l->cp);
}
static int ep(const struct dp__ctx *c, struct dp__val *v)
{
    return c->m->experts ? dp__int(v, c->l->ep) : 0;
}
/* Expert TP: Megatron defaults it to tp (expert_tensor_parallel_size None), as dplan
 * does (etp 0). */
static int etp(const struct dp__ctx *c, struct dp__val *v)
{
    return c->m->experts && c->l->etp > 0 && c->l->etp != c->l->tp ? dp__int(v, c->l->etp) : 0;
}
/* The EP all-to-all overlap runs with delayed weight gradients in Megatron-Bridge's
 * moe_a2a_overlap, as dplan models it (costmodel/time.c ep_overlapped). */
static int ep_overlap(const struct dp__ctx *c, struct dp__val *v)
{
    return c->m->experts && c->l->ep_overlap ? dp__flag(v) : 0;
}
static int sp(const struct dp__ctx *c, struct dp__val *v)
{
    return c->l->sp && c->l->tp > 1 ? dp__flag(v) : 0;
}
static int dist_opt(const struct dp__ctx *c, struct dp__val *v)
{
    /* ZeRO-1; Megatron-FSDP v1 (the default --megatron-fsdp-version) needs it too */
    return c->l->zero >= 1 ? dp__flag(v) : 0;
}
static int dist_opt_instances(const struct dp__ctx *c, struct dp__val *v)
{
    int r = dp_layout_replicas(c->l);
    return r > 1 ? dp__int(v, r) : 0;
}
static int fsdp(const struct dp__ctx *c, struct dp__val *v)
{
    return c->l->zero >= 2 ? dp__flag(v) : 0;
}
static int fsdp_strategy(const struct dp__ctx *c, struct dp__val *v)
{
    if (c->l->zero < 2)
        return 0;
    return dp__str(v, c->l->zero == 2 ? "optim_grads" : "optim_grads_params");
}
static bool has_dp_comm(const struct dp__ctx *c)
{
    return c->l->dp * c->l->cp > 1;
}
static int overlap_grad(const struct dp__ctx *c, struct dp__val *v)
{
    return c->l->dp_overlap && has_dp_comm(c) ? dp__flag(v) : 0;
}
static int overlap_param(const struct dp__ctx *c, struct dp__val *v)
{
    /* validate_args: only with the distributed optimizer or Megatron-FSDP, and only
     * together with --overlap-grad-reduce. */
    return c->l->dp_overlap && c->l->overlap_param_gather && has_dp_comm(c) && c->l->zero >= 1
               ? dp__flag(v)
               : 0;
}
static int tp_overlap(const struct dp__ctx *c, struct dp__val *v)
{
    /* validate_args: needs --sequence-parallel (the layout guarantees it). */
    return c->l->tp_overlap && c->l->sp && c->l->tp > 1 ? dp__flag(v) : 0;
}
static int no_pp_overlap(const struct dp__ctx *c, struct dp__val *v)
{
    /* overlap_p2p_comm is on by default (arguments.py defines only
     * --no-overlap-p2p-communication); it matters with interleaving alone. */
    return !c->l->pp_overlap && c->l->vpp > 1 ? dp__flag(v) : 0;
}

/* ------------------------------------------------------------------ options: training */

static int mbs(const struct dp__ctx *c, struct dp__val *v)
{
    return dp__int(v, c->l->mbs);
}
static int gbs(const struct dp__ctx *c, struct dp__val *v)
{
    return dp__int(v, c->l->gbs);
}
static int seq(const struct dp__ctx *c, struct dp__val *v)
{
    return dp__int(v, c->l->seq_len);
}
static int rc_granularity(const struct dp__ctx *c, struct dp__val *v)
{
    /* selective: recompute_modules defaults to ["core_attn"], Korthikanti et al.'s
     * selective recompute that dplan's memory model assumes. */
    switch (c->l->recompute) {
    case DP_RECOMPUTE_SELECTIVE: return dp__str(v, "selective");
    case DP_RECOMPUTE_FULL: return dp__str(v, "full");
    default: return 0;
    }
}
static int rc_method(const struct dp__ctx *c, struct dp__val *v)
{
    /* block with recompute_layers: that many layers of each stage recompute, the rest keep
     * their activations (dplan's recompute_layers); uniform: chunks of that many. */
    if (c->l->recompute != DP_RECOMPUTE_FULL)
        return 0;
    return dp__str(v, c->l->recompute_layers > 0 && c->l->recompute_method == DP_RC_BLOCK
                          ? "block"
                          : "uniform");
}
static int rc_modules(const struct dp__ctx *c, struct dp__val *v)
{
    /* --recompute-modules (nargs '*'): written when not the default core_attn */
    if (c->l->recompute != DP_RECOMPUTE_SELECTIVE || !c->l->recompute_modules ||
        c->l->recompute_modules == DP_RCM_CORE_ATTN)
        return 0;
    char mods[160];
    dp_recompute_modules_format(c->l->recompute_modules, mods, sizeof mods);
    for (char *q = mods; *q; q++)
        if (*q == ',')
            *q = ' ';
    return dp__code(v, mods);
}
static int ce_fusion(const struct dp__ctx *c, struct dp__val *v)
{
    return c->l->loss == DP_LOSS_FUSED || c->l->loss == DP_LOSS_FUSED_NATIVE ? dp__flag(v) : 0;
}
static int ce_fusion_impl(const struct dp__ctx *c, struct dp__val *v)
{
    /* Transformer Engine's parallel_cross_entropy works in place on the logits */
    return c->l->loss == DP_LOSS_FUSED          ? dp__str(v, "te")
           : c->l->loss == DP_LOSS_FUSED_NATIVE ? dp__str(v, "native")
                                                : 0;
}
static int rc_layers(const struct dp__ctx *c, struct dp__val *v)
{
    /* uniform with 1 layer per unit: every layer's input is kept and the layer recomputed */
    if (c->l->recompute != DP_RECOMPUTE_FULL)
        return 0;
    return dp__int(v, c->l->recompute_layers > 0 ? c->l->recompute_layers : 1);
}
static int attention(const struct dp__ctx *c, struct dp__val *v)
{
    /* AttnBackend (megatron/core/transformer/enums.py): flash, fused, unfused, local, auto;
     * unfused materialises the s x s scores as dplan's non-flash model does. */
    return dp__str(v, c->l->flash_attn ? "flash" : "unfused");
}
/* ------------------------------------------------------------------ options: MoE */

/* Megatron's default dispatcher is allgather (TransformerConfig.moe_token_dispatcher_type);
 * dplan prices all-to-all dispatch, or DeepEP's deduplicating one, which Megatron runs as
 * the flex dispatcher (its default backend deepep). */
static int dispatcher(const struct dp__ctx *c, struct dp__val *v)
{
    if (!c->m->experts)
        return 0;
    return dp__str(v, c->l->moe_dispatcher == DP_DISPATCH_DEDUP ? "flex" : "alltoall");
}
static int flex_backend(const struct dp__ctx *c, struct dp__val *v)
{
    return c->m->experts && c->l->moe_dispatcher == DP_DISPATCH_DEDUP ? dp__str(v, "deepep") : 0;
}
/* dplan prices the local experts as grouped GEMMs; without the flag Megatron loops over
 * them (SequentialMLP). */
static int grouped_gemm(const struct dp__ctx *c, struct dp__val *v)
{
    return c->m->experts ? dp__flag(v) : 0;
}
static int capacity(const struct dp__ctx *c, struct dp__val *v)
{
    if (!c->m->experts || c->l->moe_capacity <= 0)
        return 0;
    char cf[32];
    snprintf(cf, sizeof cf, "%g", c->l->moe_capacity);
    return dp__str(v, cf);
}
static int capacity_pad(const struct dp__ctx *c, struct dp__val *v)
{
    return c->m->experts && c->l->moe_capacity > 0 && c->l->moe_pad ? dp__flag(v) : 0;
}
static int optimizer(const struct dp__ctx *c, struct dp__val *v)
{
    return dp__str(v, dp_optimizer_name(c->l->optimizer));
}

/* ------------------------------------------------------------------ options: precision */

static int bf16(const struct dp__ctx *c, struct dp__val *v)
{
    return c->l->precision == DP_BF16 ? dp__flag(v) : 0;
}
static int fp16(const struct dp__ctx *c, struct dp__val *v)
{
    return c->l->precision == DP_FP16 ? dp__flag(v) : 0;
}
static int fp8_format(const struct dp__ctx *c, struct dp__val *v)
{
    if (dp_layout_gemm(c->l) != DP_GEMM_FP8)
        return 0;
    return dp__str(v, c->l->fp8_format == DP_FP8_E4M3 ? "e4m3" : "hybrid");
}
static int fp8_recipe(const struct dp__ctx *c, struct dp__val *v)
{
    static const char *const names[] = {"delayed", "tensorwise", NULL, "blockwise", "mxfp8"};
    if (dp_layout_gemm(c->l) != DP_GEMM_FP8 || !names[c->l->fp8_recipe])
        return 0;
    return dp__str(v, names[c->l->fp8_recipe]);
}
static int fp8_output_proj(const struct dp__ctx *c, struct dp__val *v)
{
    return c->l->fp8_output && dp_layout_mxfp8(c->l) ? dp__flag(v) : 0;
}
static int fp8_dot_product_attention(const struct dp__ctx *c, struct dp__val *v)
{
    return c->l->fp8_attention && dp_layout_gemm(c->l) == DP_GEMM_FP8 ? dp__flag(v) : 0;
}
static int fp8_param_gather(const struct dp__ctx *c, struct dp__val *v)
{
    return dp_layout_gemm(c->l) == DP_GEMM_FP8 && c->l->fp8_params ? dp__flag(v) : 0;
}
/* MXFP8 weights cannot be mapped into the parameter buffer: Megatron gathers them through the
 * gradient buffer (DistributedDataParallelConfig.reuse_grad_buf_for_mxfp8_param_ag; without it
 * the optimizer warns of "a significant amount of additional GPU memory"), as dplan's memory
 * model assumes (dp_layout_fp8_gather). */
static int mxfp8_reuse_grad_buf(const struct dp__ctx *c, struct dp__val *v)
{
    return dp_layout_mxfp8(c->l) && c->l->fp8_params ? dp__flag(v) : 0;
}
static int grads_fp32(const struct dp__ctx *c, struct dp__val *v)
{
    /* DDP keeps main_grad in fp32 when accumulate_allreduce_grads_in_fp32 (validate_args
     * sets it for bf16 unless --grad-reduce-in-bf16). Megatron-FSDP has its own flag. */
    return c->l->precision != DP_FP32 && c->l->grad_fp32 && c->l->zero < 2 ? dp__flag(v) : 0;
}
static int grads_bf16(const struct dp__ctx *c, struct dp__val *v)
{
    return c->l->precision == DP_BF16 && !c->l->grad_fp32 && c->l->zero < 2 ? dp__flag(v) : 0;
}
static int fsdp_grads(const struct dp__ctx *c, struct dp__val *v)
{
    if (c->l->zero < 2 || c->l->precision == DP_FP32)
        return 0;
    return dp__str(v, c->l->grad_fp32 ? "fp32" : dp_precision_name(c->l->precision));
}

/*
 * The table. Files that define each flag:
 *   TC  megatron/core/transformer/transformer_config.py (TransformerConfig, via
 *       ArgumentGroupFactory in _add_network_size_args)
 *   MPC megatron/core/model_parallel_config.py (ModelParallelConfig, TransformerConfig's base)
 *   TRC megatron/training/config/training_config.py (TrainingConfig)
 *   ARG megatron/training/arguments.py (explicit add_argument)
 */
static const struct dp__opt opts[] = {
    {"MODEL_ARGS", "--num-layers", num_layers},                           /* TC */
    {"MODEL_ARGS", "--hidden-size", hidden_size},                         /* TC */
    {"MODEL_ARGS", "--ffn-hidden-size", ffn_hidden_size},                 /* TC */
    {"MODEL_ARGS", "--num-attention-heads", num_heads},                   /* TC */
    {"MODEL_ARGS", "--group-query-attention", gqa},                       /* ARG */
    {"MODEL_ARGS", "--num-query-groups", query_groups},                   /* TC */
    {"MODEL_ARGS", "--kv-channels", kv_channels},                         /* TC */
    {"MODEL_ARGS", "--max-position-embeddings", max_positions},           /* ARG */
    {"MODEL_ARGS", "--position-embedding-type", position_type},           /* ARG */
    {"MODEL_ARGS", "--normalization", normalization},                     /* TC */
    {"MODEL_ARGS", "--swiglu", swiglu},                                   /* ARG */
    {"MODEL_ARGS", "--untie-embeddings-and-output-weights", untie},       /* ARG */
    {"MODEL_ARGS", "--disable-bias-linear", no_linear_bias},              /* TC add_bias_linear */
    {"MODEL_ARGS", "--add-qkv-bias", qkv_bias},                           /* TC */
    {"MODEL_ARGS", "--attention-dropout", dropout},                       /* TC */
    {"MODEL_ARGS", "--hidden-dropout", dropout},                          /* TC */
    {"MODEL_ARGS", "--num-experts", experts},                             /* ARG */
    {"MODEL_ARGS", "--moe-router-topk", topk},                            /* TC */
    {"MODEL_ARGS", "--moe-ffn-hidden-size", moe_ffn},                     /* TC */
    {"MODEL_ARGS", "--moe-layer-freq", moe_layer_freq},                   /* ARG */
    {"MODEL_ARGS", "--moe-shared-expert-intermediate-size", shared_size}, /* TC */
    {"MODEL_ARGS", "--moe-shared-expert-gate", shared_gate},              /* TC */
    {"MODEL_ARGS", "--moe-router-score-function", router_score},          /* TC */
    {"MODEL_ARGS", "--moe-router-enable-expert-bias", router_bias},       /* TC */
    {"MODEL_ARGS", "--qk-layernorm", qk_layernorm},                       /* TC */
    {"MODEL_ARGS", "--multi-latent-attention", mla},                      /* TC */
    {"MODEL_ARGS", "--q-lora-rank", q_lora_rank},                         /* ARG */
    {"MODEL_ARGS", "--kv-lora-rank", kv_lora_rank},                       /* ARG */
    {"MODEL_ARGS", "--qk-head-dim", qk_head_dim},                         /* ARG */
    {"MODEL_ARGS", "--qk-pos-emb-head-dim", qk_pos_emb_head_dim},         /* ARG */
    {"MODEL_ARGS", "--v-head-dim", v_head_dim},                           /* ARG */
    {"MODEL_ARGS", "--make-vocab-size-divisible-by", vocab_divisible},    /* ARG */
    {"MODEL_ARGS", "--mtp-num-layers", mtp_layers},                       /* TC */

    {"PARALLEL_ARGS", "--tensor-model-parallel-size", tp},                          /* MPC */
    {"PARALLEL_ARGS", "--pipeline-model-parallel-size", pp},                        /* MPC */
    {"PARALLEL_ARGS", "--num-virtual-stages-per-pipeline-rank", vpp},               /* ARG */
    {"PARALLEL_ARGS", "--decoder-first-pipeline-num-layers", first_layers},         /* ARG */
    {"PARALLEL_ARGS", "--decoder-last-pipeline-num-layers", last_layers},           /* ARG */
    {"PARALLEL_ARGS", "--pipeline-model-parallel-layout", pp_layout},               /* ARG */
    {"PARALLEL_ARGS", "--context-parallel-size", cp},                               /* MPC */
    {"PARALLEL_ARGS", "--expert-model-parallel-size", ep},                          /* MPC */
    {"PARALLEL_ARGS", "--expert-tensor-parallel-size", etp},                        /* MPC */
    {"PARALLEL_ARGS", "--sequence-parallel", sp},                                   /* MPC */
    {"PARALLEL_ARGS", "--use-distributed-optimizer", dist_opt},                     /* ARG */
    {"PARALLEL_ARGS", "--num-distributed-optimizer-instances", dist_opt_instances}, /* ARG */
    {"PARALLEL_ARGS", "--use-megatron-fsdp", fsdp}, /* DistributedInitConfig */
    {"PARALLEL_ARGS", "--data-parallel-sharding-strategy", fsdp_strategy}, /* ARG */
    {"PARALLEL_ARGS", "--overlap-grad-reduce", overlap_grad},              /* ARG */
    {"PARALLEL_ARGS", "--overlap-param-gather", overlap_param},            /* ARG */
    {"PARALLEL_ARGS", "--tp-comm-overlap", tp_overlap},                    /* ARG */
    {"PARALLEL_ARGS", "--no-overlap-p2p-communication", no_pp_overlap},    /* ARG */
    {"PARALLEL_ARGS", "--overlap-moe-expert-parallel-comm", ep_overlap},   /* MPC */
    {"PARALLEL_ARGS", "--delay-wgrad-compute", ep_overlap},                /* MPC */

    {"MOE_ARGS", "--moe-token-dispatcher-type", dispatcher},          /* TC */
    {"MOE_ARGS", "--moe-flex-dispatcher-backend", flex_backend},      /* TC */
    {"MOE_ARGS", "--moe-grouped-gemm", grouped_gemm},                 /* TC */
    {"MOE_ARGS", "--moe-expert-capacity-factor", capacity},           /* TC */
    {"MOE_ARGS", "--moe-pad-expert-input-to-capacity", capacity_pad}, /* TC */

    {"TRAINING_ARGS", "--micro-batch-size", mbs},                     /* TRC */
    {"TRAINING_ARGS", "--global-batch-size", gbs},                    /* TRC */
    {"TRAINING_ARGS", "--seq-length", seq},                           /* ARG */
    {"TRAINING_ARGS", "--recompute-granularity", rc_granularity},     /* TC */
    {"TRAINING_ARGS", "--recompute-method", rc_method},               /* TC */
    {"TRAINING_ARGS", "--recompute-num-layers", rc_layers},           /* TC */
    {"TRAINING_ARGS", "--recompute-modules", rc_modules},             /* TC */
    {"TRAINING_ARGS", "--cross-entropy-loss-fusion", ce_fusion},      /* MPC */
    {"TRAINING_ARGS", "--cross-entropy-fusion-impl", ce_fusion_impl}, /* MPC */
    {"TRAINING_ARGS", "--attention-backend", attention},              /* TC */
    {"TRAINING_ARGS", "--optimizer", optimizer},                      /* ARG */

    {"PRECISION_ARGS", "--bf16", bf16},                                              /* MPC */
    {"PRECISION_ARGS", "--fp16", fp16},                                              /* MPC */
    {"PRECISION_ARGS", "--fp8-format", fp8_format},                                  /* ARG */
    {"PRECISION_ARGS", "--fp8-recipe", fp8_recipe},                                  /* ARG */
    {"PRECISION_ARGS", "--fp8-param-gather", fp8_param_gather},                      /* ARG */
    {"PRECISION_ARGS", "--fp8-output-proj", fp8_output_proj},                        /* TC */
    {"PRECISION_ARGS", "--fp8-dot-product-attention", fp8_dot_product_attention},    /* TC */
    {"PRECISION_ARGS", "--reuse-grad-buf-for-mxfp8-param-ag", mxfp8_reuse_grad_buf}, /* ARG */
    {"PRECISION_ARGS", "--accumulate-allreduce-grads-in-fp32", grads_fp32},          /* ARG */
    {"PRECISION_ARGS", "--grad-reduce-in-bf16", grads_bf16},                         /* ARG */
    {"PRECISION_ARGS", "--megatron-fsdp-main-grads-dtype", fsdp_grads},              /* ARG */
};

int dp__export_megatron(const struct dp__ctx *c0, struct dp_buf *b)
{
    struct dp__ctx c = *c0;
    c.framework = "Megatron-LM";
    int rc = dp__run_checks(&c, checks, (int)(sizeof checks / sizeof checks[0]));
    if (rc)
        return rc;
    const struct dp_layout *l = c.l;
    dp_buf_puts(b,
                "#!/usr/bin/env bash\n# Megatron-LM arguments (dplan export --format megatron)\n");
    dp__header(&c, b, "#");
    dp_buf_printf(b,
                  "# option names: %s: megatron/training/arguments.py,\n"
                  "#   megatron/core/model_parallel_config.py, "
                  "megatron/core/transformer/transformer_config.py,\n"
                  "#   megatron/training/config/training_config.py\n",
                  MEGATRON_VERSION);
    dp_buf_printf(b,
                  "# data parallel: %d, what the GPUs leave (Megatron derives it: world / (tp %d x "
                  "pp %d x cp %d))\n",
                  l->dp, l->tp, l->pp, l->cp);
    dp_buf_printf(b,
                  "# vocabulary: %lld, from the tokenizer (--tokenizer-type ...); padded to a "
                  "multiple of 128 x tp\n",
                  (long long)c.m->vocab);

    const char *sections[8];
    int nsec = 0;
    const size_t nopt = sizeof opts / sizeof opts[0];
    for (size_t i = 0; i < nopt; i++) {
        const char *sec = opts[i].section;
        bool open = nsec > 0 && strcmp(sections[nsec - 1], sec) == 0;
        struct dp__val v = {0};
        int got = opts[i].get(&c, &v);
        if (got < 0)
            return got;
        if (got == 0)
            continue;
        if (!open) {
            if (nsec > 0)
                dp_buf_puts(b, ")\n");
            sections[nsec++] = sec;
            dp_buf_printf(b, "\n%s=(\n", sec);
        }
        dp_buf_printf(b, "    %s", opts[i].name);
        switch (v.kind) {
        case DP__INT: dp_buf_printf(b, " %lld", v.i); break;
        case DP__STR:
            dp_buf_puts(b, " ");
            dp__shell_word(b, v.s);
            break;
        case DP__CODE: dp_buf_printf(b, " %s", v.s); break; /* several words (nargs '*') */
        default: break; /* flags (Megatron has no boolean options with values here) */
        }
        dp_buf_puts(b, "\n");
    }
    if (nsec > 0)
        dp_buf_puts(b, ")\n");
    dp_buf_puts(b, "\nMEGATRON_ARGS=(");
    for (int i = 0; i < nsec; i++)
        dp_buf_printf(b, "%s\"${%s[@]}\"", i ? " " : "", sections[i]);
    dp_buf_puts(b, ")\n");
    dp_buf_printf(b,
                  "\n# Run on every node (torchrun lines: dplan export %s --format torchrun):\n"
                  "#   torchrun --nnodes %d --nproc-per-node %d ... pretrain_gpt.py "
                  "\"${MEGATRON_ARGS[@]}\" \\\n"
                  "#     --tokenizer-type ... --data-path ... --train-iters ... --lr ...\n",
                  c.o->plan_file ? c.o->plan_file : "plan.json",
                  c.p->has_cluster ? c.p->cluster.nodes : 1,
                  c.p->has_cluster ? c.p->cluster.gpus_per_node : l->tp * l->pp * l->dp * l->cp);
    return 0;
}
