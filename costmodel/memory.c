/*
 * Per-GPU memory of a training step, per pipeline stage.
 *
 * Terms and their sources:
 *  - model states: Rajbhandari et al. 2020 (ZeRO), Sec. 3.1 and 5: weights
 *    and gradients at their precision, Adam's fp32 master copy, momentum and
 *    variance (K = 12 bytes per parameter in mixed precision); ZeRO-1/2/3
 *    divide optimizer / +gradients / +weights by the sharding degree.
 *    Megatron's distributed optimizer is ZeRO-1 with fp32 gradient buffers:
 *    6 + 12/d bytes per parameter for bf16 (Megatron-LM
 *    docs/user-guide/features/dist_optimizer.md).
 *  - activations: Korthikanti et al. 2022, Sec. 4 (per-layer terms, in
 *    activations.c), Sec. 4.2.3 (micro-batches in flight under 1F1B and
 *    interleaving, per model chunk from the schedule in pipeline.c) and
 *    Sec. 4.3 (embedding and output layer).
 *  - vocabulary padding to a multiple of 128 * tp (Megatron-LM
 *    --make-vocab-size-divisible-by).
 *  - mixture of experts: routed experts split by etp over ep ranks and their
 *    states sharded over the expert data-parallel group (Megatron-Core MoE
 *    parallel folding), the router and shared experts with the dense part;
 *    each stage charged for the layer kinds it holds (dp_layout_stage_kinds).
 * No fudge factor: the runtime overhead is a named term from the GPU
 * profile (profiles/README.md), overridable per run.
 */
#include "costmodel.h"

#include <string.h>

void dp_mem_opts_default(struct dp_mem_opts *o)
{
    memset(o, 0, sizeof *o);
    o->overhead_bytes = -1;
}

/*
 * Bytes per linear-layer weight of the FP8 copies Transformer Engine keeps for a
 * step: the FP8 weight and its transpose (Hopper's FP8 GEMMs take only the TN
 * layout), cached from the first micro-batch; block-scaled recipes add their scales
 * (one per 32 values for MXFP8, per 128 for blockwise) to each copy. With FP8
 * weights (fp8_params: TE fp8_model_init, Megatron --fp8-param-gather) the FP8
 * weight and its transpose replace the half-precision one, whose bytes params_bytes
 * already counts, so only their scales are added. Megatron's MXFP8 weights have no bf16
 * copy either: their all-gather runs through the gradient buffer
 * (--reuse-grad-buf-for-mxfp8-param-ag, dp_layout_fp8_gather).
 */
static double fp8_weight_copy_bytes(const struct dp_layout *l)
{
    if (dp_layout_gemm(l) != DP_GEMM_FP8)
        return 0;
    double scale = l->fp8_recipe == DP_FP8_MXFP8       ? 1.0 / 32
                   : l->fp8_recipe == DP_FP8_BLOCKWISE ? 1.0 / 128
                                                       : 0;
    return 2.0 * ((l->fp8_params ? 0 : 1.0) + scale);
}

static int64_t mlp_params(const struct dp_model *m, int64_t f, int64_t split)
{
    /* Column-parallel fc1 (gate and up for SwiGLU) and row-parallel fc2, split by
     * `split`; fc2's bias is replicated (added after the reduction). */
    int64_t mult = m->ffn == DP_FFN_SWIGLU ? 3 : 2, fc1_bias = m->ffn == DP_FFN_SWIGLU ? 2 : 1;
    return mult * m->hidden * f / split + (m->mlp_bias ? fc1_bias * f / split + m->hidden : 0);
}

/*
 * Parameters of one layer of `kind` held by one GPU: the part sharded over dp x cp
 * (attention, norms, router, shared experts, a dense MLP) and the routed experts'
 * part, sharded over the expert data-parallel group (dp_layout_edp).
 */
static void layer_params(const struct dp_model *m, const struct dp_layout *l,
                         enum dp_layer_kind kind, int64_t *dense, int64_t *expert)
{
    const int64_t t = l->tp, h = m->hidden, a = m->heads, g = m->kv_heads, d = m->head_dim;
    int64_t n;
    if (m->mla) {
        /* Megatron-Core MLASelfAttention: the down projections and the latent norms
         * are duplicated on every TP rank, the up projections column-parallel, the
         * output projection row-parallel. */
        int64_t rq = m->mla_q_rank, rkv = m->mla_kv_rank;
        n = rq ? h * rq + rq + rq * a * d / t : h * a * d / t;
        n += h * (rkv + m->mla_rope_dim) + rkv + rkv * a * (m->mla_nope_dim + m->mla_v_dim) / t;
        n += a * m->mla_v_dim * h / t;
    } else {
        /* Column-parallel QKV and row-parallel output are split by t; the row-parallel
         * bias, q/k norms and the layer norms are replicated (Megatron RowParallelLinear
         * adds the bias after the reduction). */
        n = (h * a * d + 2 * h * g * d + a * d * h) / t;
        if (m->qkv_bias)
            n += (a + 2 * g) * d / t;
        if (m->out_bias)
            n += h;
        if (m->qk_norm) /* OLMo 2's full-width norms split with the heads they normalise */
            n += m->qk_norm_full ? (a + g) * d / t : 2 * d;
        if (m->attn_sinks) /* split by head like Q */
            n += a / t;
    }
    n += m->norms_per_layer * (m->norm == DP_NORM_LAYERNORM ? 2 * h : h);
    *expert = 0;
    if (kind == DP_LAYER_DENSE) {
        n += mlp_params(m, m->ffn_hidden, t);
    } else {
        /* Routed experts: E/ep per EP rank, each split by etp. Router (and its bias)
         * replicated; shared experts and their gate follow the dense TP layout
         * (Megatron SharedExpertMLP). */
        *expert = (m->experts / l->ep) * mlp_params(m, m->moe_ffn_hidden, dp_layout_etp(l));
        n += h * m->experts + (m->moe_router_bias ? m->experts : 0);
        n += m->moe_shared_experts * mlp_params(m, m->moe_shared_ffn_hidden, t);
        n += m->moe_shared_gate ? h : 0;
    }
    *dense = n;
}

/* One layer's parameters per GPU for each kind (computed once per layout). */
struct kind_params {
    int64_t dense[DP_LAYER_KINDS], expert[DP_LAYER_KINDS];
};

void dp_mem_layer_params(const struct dp_model *m, const struct dp_layout *l,
                         enum dp_layer_kind kind, int64_t *dense, int64_t *expert)
{
    layer_params(m, l, kind, dense, expert);
}

static void kind_params(const struct dp_model *m, const struct dp_layout *l, struct kind_params *kp)
{
    memset(kp, 0, sizeof *kp);
    for (int k = 0; k < DP_LAYER_KINDS; k++) {
        bool present =
            k == DP_LAYER_MOE ? m->experts > 0 : m->experts == 0 || m->moe_dense_layers > 0;
        if (present)
            layer_params(m, l, (enum dp_layer_kind)k, &kp->dense[k], &kp->expert[k]);
    }
}

/* Multi-token prediction (layout mtp_layers) on the last stage, Megatron-Core's
 * MultiTokenPredictionLayer per depth: enorm and hnorm, eh_proj (2h -> h, column-parallel,
 * no bias), one transformer layer of the last layer's kind and its final norm. The output
 * layer is the main model's; the input embedding is too, but with pp > 1 the last stage
 * keeps a copy of it (GPTModel builds the embedding where mtp_process is set), unless the
 * tied LM head already is one. DeepSeek-V3's MTP module: 11.61B parameters on top of the
 * 671B main model, the published 685B with the checkpoint's own embedding and head. */
static void mtp_params(const struct dp_model *m, const struct dp_layout *l,
                       const struct kind_params *kp, int64_t *dense, int64_t *expert)
{
    if (l->mtp_layers <= 0)
        return;
    const int64_t t = l->tp, h = m->hidden, D = l->mtp_layers;
    const int64_t norm = m->norm == DP_NORM_LAYERNORM ? 2 * h : h;
    const enum dp_layer_kind K = dp_model_mtp_kind(m);
    *dense += D * (3 * norm + 2 * h * h / t + kp->dense[K]);
    *expert += D * kp->expert[K];
    if (l->pp > 1 && !m->tied_embeddings)
        *dense += dp_padded_vocab(m->vocab, l->tp) * h / t;
}

/* Parameters held by one GPU of stage r: its layers by kind, plus the embedding (first
 * stage), the final norm and the LM head (last stage) and any MTP layers, all in the
 * dense part but the MTP layers' experts. */
static void stage_params(const struct dp_model *m, const struct dp_layout *l, int r,
                         const struct dp_layer_kinds *kinds, const struct kind_params *kp,
                         int64_t *dense, int64_t *expert)
{
    int64_t d = 0, e = 0, emb, head;
    for (int k = 0; k < DP_LAYER_KINDS; k++) {
        d += kinds->n[k] * kp->dense[k];
        e += kinds->n[k] * kp->expert[k];
    }
    dp_mem_end_params(m, l, &emb, &head);
    if (r == 0)
        d += emb;
    if (r == dp_layout_head_rank(l)) {
        d += head;
        mtp_params(m, l, kp, &d, &e);
    }
    *dense = d;
    *expert = e;
}

void dp_mem_stage_params(const struct dp_model *m, const struct dp_layout *l, int r, int64_t *dense,
                         int64_t *expert)
{
    struct dp_layer_kinds kinds;
    struct kind_params kp;
    dp_layout_stage_kinds(l, m, r, &kinds);
    kind_params(m, l, &kp);
    stage_params(m, l, r, &kinds, &kp, dense, expert);
}

void dp_mem_end_params(const struct dp_model *m, const struct dp_layout *l, int64_t *emb,
                       int64_t *head)
{
    const int64_t t = l->tp, h = m->hidden, vpad = dp_padded_vocab(m->vocab, l->tp);
    *emb = vpad * h / t + (m->pos == DP_POS_LEARNED ? m->max_pos * h : 0);
    *head =
        (m->norm == DP_NORM_LAYERNORM ? 2 * h : h) +
        ((!m->tied_embeddings || (l->pp > 1 && dp_layout_head_rank(l) != 0)) ? vpad * h / t : 0);
}

void dp_mem_mtp_params(const struct dp_model *m, const struct dp_layout *l, int64_t *dense,
                       int64_t *expert)
{
    struct kind_params kp;
    kind_params(m, l, &kp);
    *dense = *expert = 0;
    mtp_params(m, l, &kp, dense, expert);
}

/* The largest linear weight of a layer per GPU (TP-split): the unit DeepSpeed ZeRO-3
 * gathers per sub-module; Megatron-style fused QKV and gate/up projections. */
static int64_t largest_linear(const struct dp_model *m, const struct dp_layout *l)
{
    const int64_t t = l->tp, h = m->hidden, up = m->ffn == DP_FFN_SWIGLU ? 2 : 1;
    int64_t w = h * (m->heads + 2 * m->kv_heads) * m->head_dim / t;
    int64_t f = m->experts > 0 ? m->moe_ffn_hidden : m->ffn_hidden;
    int64_t mlp = up * h * f / (m->experts > 0 ? dp_layout_etp(l) : t);
    if (m->experts > 0 && m->moe_dense_layers > 0 && up * h * m->ffn_hidden / t > mlp)
        mlp = up * h * m->ffn_hidden / t;
    return w > mlp ? w : mlp;
}

/* What every stage of a layout shares, computed once per layout (the planner's memory
 * check runs for every layout it evaluates). */
struct mem_ctx {
    const struct dp_model *m;
    const struct dp_cluster *cl;
    const struct dp_mem_opts *o;
    const struct dp_layout *l;
    const struct dp_act_layer *al; /* per kind, DP_LAYER_KINDS entries */
    struct kind_params kp;         /* one layer's dense and expert parameters per GPU, by kind */
    bool mixed;                    /* layers of both kinds (dp_model_mixed_layers) */
    int64_t emb_params;            /* the first stage's embedding (+ positions) */
    int64_t head_params;           /* the last stage's final norm and LM head (or its copy) */
    int64_t emb_mask;              /* the embedding dropout mask per micro-batch in flight */
    int64_t head_act;              /* the last stage's output-layer activations */
    int64_t mtp_act;               /* per MTP depth beyond its layer's (stage_activations) */
    int64_t loss_bytes;            /* of which the loss's buffers at its peak */
    int64_t recv_bytes;            /* pipeline receive buffers */
    int64_t runtime;               /* runtime overhead */
    int64_t M, shard_d, shard_e;
    int pb, gb, ob;
};

static void mem_ctx_init(struct mem_ctx *x, const struct dp_model *m, const struct dp_cluster *cl,
                         const struct dp_layout *l, const struct dp_mem_opts *o,
                         const struct dp_act_layer al[DP_LAYER_KINDS])
{
    const int64_t t = l->tp, h = m->hidden;
    const int64_t u = (l->sp && t > 1) ? t : 1;
    const int64_t s = l->seq_len / l->cp, b = l->mbs;
    const int64_t p = dp_precision_bytes(l->precision);
    const int64_t vpad = dp_padded_vocab(m->vocab, l->tp);
    x->m = m;
    x->cl = cl;
    x->o = o;
    x->l = l;
    x->al = al;
    kind_params(m, l, &x->kp);
    x->mixed = dp_model_mixed_layers(m);
    dp_mem_end_params(m, l, &x->emb_params, &x->head_params);
    /* Korthikanti Sec. 4.3: the embedding's dropout mask, one per micro-batch in flight
     * in the first chunk; the final norm input and output-layer input (4sbh/t with SP);
     * the loss's buffers at its peak, per logit element as its implementation holds them
     * (dp_fw_loss_bytes: 6 B for Megatron's vocab-parallel cross entropy, 12 B for
     * F.cross_entropy on up-cast logits); the last stage holds one micro-batch at a time. */
    x->emb_mask = m->dropout ? s * b * h / u : 0;
    x->loss_bytes = (int64_t)(dp_fw_loss_bytes(l) * (double)(s * b * vpad / t));
    /* torchtitan's ChunkedLossWrapper (components/loss.py): the output layer and the loss
     * run on one of loss_chunks slices of the tokens at a time, each slice's backward
     * before the next forward, so one slice's buffers are live; the hidden states'
     * gradient is gathered slice by slice into an fp32 buffer of all tokens
     * (GradAccumulator, dtype float32), replicated over TP. */
    if (l->loss_chunks > 1)
        x->loss_bytes = x->loss_bytes / l->loss_chunks + 4 * s * b * h;
    x->head_act = 2 * p * s * b * h / u + x->loss_bytes;
    /* Multi-token prediction, per depth: the concatenated normed inputs (2h) it keeps for
     * eh_proj, and the output layer's activations and a loss of its own, whose buffers live
     * until its backward (Megatron-Core process_mtp_loss computes each depth's loss in the
     * forward); its layer's are added per stage, under the stage's recompute. */
    x->mtp_act = 2 * p * s * b * h / u + x->head_act;
    /* one forward-receive and one backward-receive activation buffer */
    x->recv_bytes = l->pp > 1 ? 2 * p * s * b * h / u : 0;
    x->runtime = o && o->overhead_bytes >= 0 ? o->overhead_bytes : cl->gpu.runtime_overhead_bytes;
    x->M = dp_layout_schedule_microbatches(l); /* in flight: one schedule's at most */
    /* ZeRO/FSDP shard the dense part over dp x cp, or the shard group under HSDP; the
     * experts over their data-parallel group, divided among the same replicas. */
    x->shard_d = dp_layout_shard(l);
    x->shard_e = dp_layout_expert_shard(l);
    dp_mem_bytes_per_param(l, &x->pb, &x->gb, &x->ob);
}

/* One layer's kept activations per micro-batch, by kind, on a stage of `layers` layers;
 * *chunk: the layers rebuilt at a time. With recompute_layers (full recompute of that
 * many of the stage's layers), the other layers keep all their activations: a layer's
 * bytes are the mean over the stage's layers. Uniform chunks of n layers (Megatron
 * --recompute-method uniform --recompute-num-layers n) keep one input per chunk and
 * rebuild a whole chunk at a time. */
static void act_per_layer(const struct mem_ctx *x, int layers, int64_t per[DP_LAYER_KINDS],
                          int *chunk)
{
    const struct dp_layout *l = x->l;
    double f = 1, per_chunk = 1;
    *chunk = 1;
    if (l->recompute == DP_RECOMPUTE_FULL && layers > 0) {
        f = (double)dp_layout_recomputed(l, layers) / (double)layers;
        if (l->recompute_method == DP_RC_UNIFORM && l->recompute_layers > 1) {
            *chunk = l->recompute_layers < layers ? l->recompute_layers : layers;
            per_chunk = 1.0 / *chunk;
        }
    }
    for (int k = 0; k < DP_LAYER_KINDS; k++)
        per[k] = f >= 1 && *chunk == 1 ? x->al[k].stored_bytes
                                       : (int64_t)(f * per_chunk * (double)x->al[k].stored_bytes +
                                                   (1 - f) * (double)x->al[k].full_bytes + 0.5);
}

/* The activation terms of stage r whose chunk c holds kn[c].n[k] layers of kind k. */
static void stage_activations(const struct mem_ctx *x, int r, const struct dp_layer_kinds *kn,
                              struct dp_mem_stage *out)
{
    /* Each micro-batch in flight in a chunk keeps its layers' activations, each kind at
     * its own bytes (and, in the embedding's chunk, the embedding dropout mask), until
     * its backward; the schedule says how many are in flight per chunk at the peak
     * (Korthikanti Sec. 4.2.3 for 1F1B and equal interleaved chunks; pipeline.c). The
     * recompute working set is the largest layer the stage holds. */
    const struct dp_layout *l = x->l;
    const struct dp_act_layer *al = x->al;
    const int v = l->vpp;
    int64_t emb = out->has_embedding ? x->emb_mask : 0;
    int64_t per[DP_LAYER_KINDS];
    int chunk;
    act_per_layer(x, out->layers, per, &chunk);
    int64_t w[DP_MAX_CHUNKS], lw[DP_MAX_CHUNKS], live[DP_MAX_CHUNKS], stored = 0;
    for (int c = 0; c < v && c < DP_MAX_CHUNKS; c++) {
        lw[c] = 0;
        for (int k = 0; k < DP_LAYER_KINDS; k++)
            lw[c] += kn[c].n[k] * per[k];
        w[c] = lw[c] + (c == 0 ? emb : 0);
    }
    for (int k = 0; k < DP_LAYER_KINDS; k++) {
        if (!out->kind_layers[k])
            continue;
        stored += out->kind_layers[k] * per[k];
        int64_t work = l->recompute == DP_RECOMPUTE_NONE ? 0 : chunk * al[k].work_bytes;
        if (work > out->act_working_bytes)
            out->act_working_bytes = work;
    }
    /* The split by kind needs the counts only where the embedding's mask is in it. */
    bool by_chunk = emb > 0 || out->layers == 0;
    int64_t peak = l->schedule == DP_SCHED_DUALPIPEV
                       ? dp_pipe_dualpipev_peak_live(l->pp, x->M, r, w, by_chunk ? live : NULL)
                       : dp_pipe_peak_live(l->pp, v, x->M, r, w, by_chunk ? live : NULL);
    if (by_chunk) {
        for (int c = 0; c < v && c < DP_MAX_CHUNKS; c++)
            out->act_layers_bytes += live[c] * lw[c];
        out->act_embed_bytes = live[0] * emb;
    } else {
        out->act_layers_bytes = peak;
    }
    out->inflight = stored > 0 ? (double)out->act_layers_bytes / (double)stored : (double)live[0];
    if (out->has_head) {
        out->act_head_bytes = x->head_act;
        /* Multi-token prediction: per depth its layer's kept activations and the rest
         * (mem_ctx_init) */
        if (l->mtp_layers > 0)
            out->act_head_bytes += l->mtp_layers * (per[dp_model_mtp_kind(x->m)] + x->mtp_act);
    }
    out->activations_bytes =
        out->act_layers_bytes + out->act_embed_bytes + out->act_head_bytes + out->act_working_bytes;
}

/* ZeRO-3: the parameters of the current and the prefetched layer, gathered. */
static int64_t gathered_bytes(const struct mem_ctx *x, const struct dp_mem_stage *st)
{
    const struct dp_layout *l = x->l;
    if (l->zero < 3)
        return 0;
    switch (l->framework) {
    case DP_FW_TORCHTITAN:
        return 0; /* FSDP2's per-block buffers: the per-layer comm term of stage_with */
    case DP_FW_DEEPSPEED:
        /* ZeRO-3 gathers per sub-module and prefetches the next one from its trace
         * (partitioned_param_coordinator.py fetch_sub_module). */
        return 2 * dp_precision_bytes(l->precision) * largest_linear(x->m, l);
    default: {
        /* Megatron-FSDP gathers a layer ahead: the current and the prefetched layer. */
        int64_t big = 0;
        for (int k = 0; k < DP_LAYER_KINDS; k++)
            if (st->kind_layers[k] && x->kp.dense[k] + x->kp.expert[k] > big)
                big = x->kp.dense[k] + x->kp.expert[k];
        return 2 * big * x->pb;
    }
    }
}

/* act: the stage's activation bytes when already known (the same layout at another
 * ZeRO stage), else NULL. */
static void stage_with(const struct mem_ctx *x, int r, const int64_t *act, struct dp_mem_stage *out)
{
    const struct dp_layout *l = x->l;
    const struct dp_model *m = x->m;
    memset(out, 0, sizeof *out);
    const int v = l->vpp;
    struct dp_layer_kinds kn[DP_MAX_CHUNKS]; /* per chunk */
    out->stage = r;
    for (int c = 0; c < v && c < DP_MAX_CHUNKS; c++) {
        int first = 0, n;
        if (x->mixed)
            dp_layout_chunk_layers(l, m, r, c, &first, &n);
        else
            n = dp_layout_chunk_count(l, m, r, c);
        memset(&kn[c], 0, sizeof kn[c]);
        if (x->mixed)
            dp_model_layer_kinds(m, first, n, &kn[c]);
        else
            kn[c].n[m->experts > 0 ? DP_LAYER_MOE : DP_LAYER_DENSE] = n;
        out->layers += n;
        for (int k = 0; k < DP_LAYER_KINDS; k++)
            out->kind_layers[k] += kn[c].n[k];
    }
    out->has_embedding = r == 0;
    out->has_head = r == dp_layout_head_rank(l);

    /* Parameters: the dense part sharded over dp x cp, the experts over the expert
     * data-parallel group (Megatron _EXPERT_DATA_PARALLEL_GROUP). */
    int64_t dense = (out->has_embedding ? x->emb_params : 0) + (out->has_head ? x->head_params : 0);
    int64_t expert = 0;
    for (int k = 0; k < DP_LAYER_KINDS; k++) {
        dense += out->kind_layers[k] * x->kp.dense[k];
        expert += out->kind_layers[k] * x->kp.expert[k];
    }
    if (out->has_head)
        mtp_params(m, l, &x->kp, &dense, &expert);
    out->params = dense + expert;
    struct dp_states sd, se = {0, 0, 0};
    dp_mem_states(dense, x->shard_d, l, &sd);
    if (expert)
        dp_mem_states(expert, x->shard_e, l, &se);
    /* Muon steps the layers' matrices; the embedding and the output layer go to Adam
     * (Megatron-Core is_managed_by_layer_wise_optimizer: 2-D and not embedding or output;
     * PithTrain's make_muon_optimizer the same), one more fp32 moment each. The layers' norms
     * and biases (Adam too) are left at Muon's: under 0.1% of a layer. */
    int64_t ends = (out->has_embedding ? x->emb_params : 0) + (out->has_head ? x->head_params : 0);
    if (l->optimizer == DP_OPT_MUON && ends > 0) {
        struct dp_states m4;
        dp_mem_states(ends, x->shard_d, l, &m4);
        int pb, gb, ob;
        dp_mem_bytes_per_param(l, &pb, &gb, &ob);
        /* the shard's elements, each one more moment in the optimizer's dtype */
        sd.optimizer_bytes += m4.optimizer_bytes / ob * dp_precision_bytes(l->optimizer_dtype);
    }
    double copy = fp8_weight_copy_bytes(l);
    if (copy > 0 && l->zero < 3) {
        /* Linear weights of the stage's layers (the norms, embedding and output layer
         * stay half precision). */
        const int64_t h = m->hidden;
        int64_t lin = expert;
        for (int k = 0; k < DP_LAYER_KINDS; k++)
            lin +=
                out->kind_layers[k] *
                (x->kp.dense[k] - m->norms_per_layer * (m->norm == DP_NORM_LAYERNORM ? 2 * h : h));
        out->fp8_copy_bytes = (int64_t)(copy * (double)lin);
    }
    out->params_bytes = sd.params_bytes + se.params_bytes + out->fp8_copy_bytes;
    out->grads_bytes = sd.grads_bytes + se.grads_bytes;
    out->optimizer_bytes = sd.optimizer_bytes + se.optimizer_bytes;

    /* Activations (ZeRO does not change them); one layer, one micro-batch: the
     * largest kind's. */
    for (int k = 0; k < DP_LAYER_KINDS; k++)
        if (out->kind_layers[k] && x->al[k].stored_bytes > out->act_layer_bytes)
            out->act_layer_bytes = x->al[k].stored_bytes;
    if (out->has_head)
        out->act_loss_bytes = x->loss_bytes;
    if (act)
        out->activations_bytes = *act;
    else
        stage_activations(x, r, kn, out);

    /* Communication buffers: those held through the step (steady) and those of one
     * layer's backward (per_layer), which on the last stage come after the loss's buffers
     * are freed, so only their excess over the loss adds to the peak. */
    const int gb = x->gb;
    const int64_t t = l->tp, h = m->hidden, p = dp_precision_bytes(l->precision);
    const int64_t vpad = dp_padded_vocab(m->vocab, l->tp);
    int64_t steady = x->recv_bytes, per_layer = 0;
    int64_t big = 0; /* the stage's largest layer, parameters per GPU (before sharding) */
    for (int k = 0; k < DP_LAYER_KINDS; k++)
        if (out->kind_layers[k] && x->kp.dense[k] + x->kp.expert[k] > big)
            big = x->kp.dense[k] + x->kp.expert[k];
    const int64_t bucket = 500000000; /* DeepSpeed reduce_bucket_size default, elements */
    const int64_t np = out->params < bucket ? out->params : bucket;
    switch (l->framework) {
    case DP_FW_TORCHTITAN:
        if (l->zero >= 2 && l->pp > 1) {
            /* The stage stays unsharded (dp_mem_states); the last micro-batch's
             * reduce-scatter input (reduce_dtype) of the current and the previous block. */
            per_layer = 2 * (int64_t)dp_fsdp_reduce_bytes(l) * big;
        } else if (l->zero >= 2) {
            /* FSDP2 per block (torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py):
             * backward holds the block's bf16 parameters, the next block's (prefetched one
             * ahead, _backward_prefetch), its bf16 gradients, their reduce-scatter input
             * in reduce_dtype, r bytes (4 in torchtitan), and the previous block's until the
             * next reduce starts (reduce_scatter_state): (2 + 2 + 2 + r + r) B per parameter. The
             * output layer's group is never resharded (torchtitan apply_fsdp), nor (zero 2,
             * reshard_after_forward False) any block between its forward and backward. */
            per_layer = (3 * p + 2 * (int64_t)dp_fsdp_reduce_bytes(l)) * big;
            if (out->has_head)
                steady += p * (vpad * h / t);
            if (l->zero == 2)
                steady += p * out->params;
        }
        break;
    case DP_FW_DEEPSPEED:
        if (l->zero >= 3) {
            /* ZeRO-3 gathers per sub-module and prefetches the next one from its trace
             * (partitioned_param_coordinator.py fetch_sub_module); one reduce bucket of
             * reduce_bucket_size elements in the gradient dtype (stage3.py). */
            steady += gathered_bytes(x, out) + np * gb;
        } else if (l->zero >= 1) {
            /* Stage 1/2 with contiguous_gradients: one reduce bucket, two with overlap_comm
             * (stage_1_and_2.py setup_buckets). */
            steady += np * gb * (l->dp_overlap ? 2 : 1);
        }
        break;
    default:
        /* Megatron-Core's parameter and gradient buffers are the model states; Megatron-FSDP
         * (zero 2/3) gathers a layer ahead and reduces one layer's gradients at a time. */
        steady += gathered_bytes(x, out);
        if (l->zero >= 2)
            per_layer = big * gb;
        break;
    }
    int64_t excess = per_layer - (out->has_head ? x->loss_bytes : 0);
    out->comm_bytes = steady + (excess > 0 ? excess : 0);

    /* Runtime: the user's overhead (--overhead-gib) replaces the named terms and the
     * allocator slack; else the workspaces (allocated), the CUDA context and NCCL's
     * buffers (outside the allocator). */
    int64_t states = out->params_bytes + out->grads_bytes + out->optimizer_bytes;
    int64_t model = states + out->activations_bytes + out->comm_bytes;
    /* What is allocated once and kept (no fragmentation): the model states, but under
     * FSDP2 with pipeline parallelism only the shards; the unsharded parameters and the
     * gradient accumulators are allocated and freed every step. */
    int64_t kept = states;
    if (l->framework == DP_FW_TORCHTITAN && l->zero >= 2 && l->pp > 1) {
        struct dp_layout one = *l;
        one.pp = 1;
        struct dp_states d1, e1;
        dp_mem_states(dense, x->shard_d, &one, &d1);
        dp_mem_states(expert, x->shard_e, &one, &e1);
        kept = d1.params_bytes + d1.grads_bytes + d1.optimizer_bytes + e1.params_bytes +
               e1.grads_bytes + e1.optimizer_bytes + out->fp8_copy_bytes;
    }
    out->kept_bytes = kept;
    if (x->o && x->o->overhead_bytes >= 0) {
        out->runtime_bytes = x->o->overhead_bytes;
        out->allocated_bytes = model;
        out->reserved_bytes = model;
        out->total_bytes = model + x->o->overhead_bytes;
    } else {
        struct dp_fw_runtime rt;
        dp_fw_runtime(l, m->experts > 0, &x->cl->gpu, &rt);
        out->context_bytes = rt.context_bytes;
        out->nccl_bytes = rt.nccl_bytes;
        out->workspace_bytes = rt.workspace_bytes;
        out->runtime_bytes = rt.context_bytes + rt.nccl_bytes + rt.workspace_bytes;
        out->allocated_bytes = model + rt.workspace_bytes;
        out->slack_bytes =
            (int64_t)(dp_fw_alloc_slack(l) * (double)(out->allocated_bytes - kept) + 0.5);
        out->reserved_bytes = out->allocated_bytes + out->slack_bytes;
        out->total_bytes = out->reserved_bytes + rt.context_bytes + rt.nccl_bytes;
    }
    out->other_bytes = out->comm_bytes + out->runtime_bytes + out->slack_bytes;
}

void dp_mem_stage(const struct dp_model *m, const struct dp_cluster *cl, const struct dp_layout *l,
                  const struct dp_mem_opts *o, int r, struct dp_mem_stage *out)
{
    struct dp_act_layer al[DP_LAYER_KINDS];
    dp_act_layers(m, l, al);
    struct mem_ctx x;
    mem_ctx_init(&x, m, cl, l, o, al);
    stage_with(&x, r, NULL, out);
}

void dp_mem_terms(const struct dp_model *m, const struct dp_cluster *cl, const struct dp_layout *l,
                  const struct dp_mem_opts *o, int r, struct dp_mem_terms *out)
{
    struct dp_act_layer al[DP_LAYER_KINDS];
    dp_act_layers(m, l, al);
    struct mem_ctx x;
    mem_ctx_init(&x, m, cl, l, o, al);
    struct dp_mem_stage st;
    stage_with(&x, r, NULL, &st);
    memset(out, 0, sizeof *out);
    out->gathered_bytes = gathered_bytes(&x, &st);
    out->static_bytes = st.total_bytes - st.activations_bytes - out->gathered_bytes;
    int chunk;
    act_per_layer(&x, st.layers, out->layer_bytes, &chunk);
    out->emb_bytes = st.has_embedding ? x.emb_mask : 0;
    out->head_bytes = st.act_head_bytes;
    out->working_bytes = st.act_working_bytes;
    out->model_peak_bytes = st.total_bytes;
}

int dp_mem_estimate(const struct dp_model *m, const struct dp_cluster *cl,
                    const struct dp_layout *l, const struct dp_mem_opts *o,
                    struct dp_mem_report *out, struct dp_err *err)
{
    memset(out, 0, sizeof *out);
    int rc = dp_layout_validate(l, m, dp_cluster_gpus(cl), err);
    if (rc)
        return rc;
    if (l->pp > DP_MAX_PP)
        return dp_err_set(err, DP_EINFEASIBLE, "pp=%d exceeds the supported %d stages", l->pp,
                          DP_MAX_PP);
    out->nstages = l->pp;
    out->capacity_bytes = dp_gpu_usable_bytes(&cl->gpu);
    out->microbatches = dp_layout_microbatches(l);
    struct dp_act_layer al[DP_LAYER_KINDS];
    dp_act_layers(m, l, al);
    struct mem_ctx x;
    mem_ctx_init(&x, m, cl, l, o, al);
    for (int r = 0; r < l->pp; r++) {
        stage_with(&x, r, NULL, &out->stage[r]);
        int64_t tot = out->stage[r].total_bytes;
        if (r == 0 || tot > out->peak_bytes) {
            out->peak_bytes = tot;
            out->peak_stage = r;
        }
        if (r == 0 || tot < out->min_bytes)
            out->min_bytes = tot;
    }
    out->fits = out->peak_bytes <= out->capacity_bytes;
    return 0;
}

void dp_mem_peak(const struct dp_model *m, const struct dp_cluster *cl, const struct dp_layout *l,
                 const struct dp_mem_opts *o, int64_t *peak_bytes, int64_t *min_bytes,
                 int *peak_stage)
{
    struct dp_act_layer al[DP_LAYER_KINDS];
    dp_act_layers(m, l, al);
    dp_mem_peak_with(m, cl, l, o, al, peak_bytes, min_bytes, peak_stage);
}

void dp_mem_peak_with(const struct dp_model *m, const struct dp_cluster *cl,
                      const struct dp_layout *l, const struct dp_mem_opts *o,
                      const struct dp_act_layer al[DP_LAYER_KINDS], int64_t *peak_bytes,
                      int64_t *min_bytes, int *peak_stage)
{
    dp_mem_peak_reuse(m, cl, l, o, al, NULL, peak_bytes, min_bytes, peak_stage);
}

void dp_mem_peak_reuse(const struct dp_model *m, const struct dp_cluster *cl,
                       const struct dp_layout *l, const struct dp_mem_opts *o,
                       const struct dp_act_layer al[DP_LAYER_KINDS], struct dp_reuse *ru,
                       int64_t *peak_bytes, int64_t *min_bytes, int *peak_stage)
{
    /* Stages with the same chunk counts and neither end hold fewer micro-batches the later
     * they are (pipeline.c: the warm-up shrinks with the rank), so within each run of such
     * stages the first is the fullest and the last the emptiest: only those, and the two
     * ends, are computed. */
    const int pp = l->pp, v = l->vpp;
    int64_t pk = -1, mn = -1;
    int ps = 0;
    struct mem_ctx x;
    mem_ctx_init(&x, m, cl, l, o, al);
    if (ru && ru->have_act) {
        for (int i = 0; i < ru->nact; i++) {
            struct dp_mem_stage st;
            stage_with(&x, ru->act_rank[i], &ru->act_bytes[i], &st);
            if (st.total_bytes > pk) {
                pk = st.total_bytes;
                ps = ru->act_rank[i];
            }
            if (mn < 0 || st.total_bytes < mn)
                mn = st.total_bytes;
        }
        goto done;
    }
    if (ru)
        ru->nact = 0;
    for (int r = 0; r < pp; r++) {
        /* DualPipeV: each rank's two stages peak at its own count (pipeline_dualpipev.c) */
        bool eval = r == 0 || r == pp - 1 || r == 1 || r == pp - 2 || x.mixed ||
                    l->schedule == DP_SCHED_DUALPIPEV;
        if (!eval && l->nchunks > 0) {
            /* a run starts at r or ends at r */
            bool same_prev = true, same_next = true;
            for (int c = 0; c < v; c++) {
                int n = l->chunk_layers[c * pp + r];
                same_prev &= n == l->chunk_layers[c * pp + r - 1];
                same_next &= n == l->chunk_layers[c * pp + r + 1];
            }
            eval = !same_prev || !same_next;
        }
        if (!eval)
            continue;
        struct dp_mem_stage st;
        stage_with(&x, r, NULL, &st);
        if (ru && ru->nact < DP_MAX_PP) {
            ru->act_rank[ru->nact] = r;
            ru->act_bytes[ru->nact++] = st.activations_bytes;
        }
        if (st.total_bytes > pk) {
            pk = st.total_bytes;
            ps = r;
        }
        if (mn < 0 || st.total_bytes < mn)
            mn = st.total_bytes;
    }
    if (ru)
        ru->have_act = true;
done:
    *peak_bytes = pk;
    if (min_bytes)
        *min_bytes = mn;
    if (peak_stage)
        *peak_stage = ps;
}
