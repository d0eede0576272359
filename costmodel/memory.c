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
 *  - activations: Korthikanti et al. 2022, Sec. 4 (per-layer terms below),
 *    Sec. 4.2.3 (micro-batches in flight under 1F1B and interleaving, per model
 *    chunk from the schedule in pipeline.c) and Sec. 4.3 (embedding and output
 *    layer).
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
 * weight replaces the half-precision one, whose bytes params_bytes already counts,
 * so nothing is added.
 */
static double fp8_weight_copy_bytes(const struct dp_layout *l)
{
    if (dp_layout_gemm(l) != DP_GEMM_FP8 || l->fp8_params)
        return 0;
    double scale = l->fp8_recipe == DP_FP8_MXFP8       ? 1.0 / 32
                   : l->fp8_recipe == DP_FP8_BLOCKWISE ? 1.0 / 128
                                                       : 0;
    return 2.0 * (1.0 + scale);
}

/* Bytes per element of a linear layer's saved input. With FP8 GEMMs Transformer Engine
 * saves each linear layer's input for the weight gradient in FP8 (LayerNormLinear keeps
 * ln_out, Linear the input, LayerNormMLP the activation output, as their quantized
 * tensors): 1 byte instead of the activation precision for the QKV, out-projection, fc1
 * and fc2 inputs. Norm inputs, Q/K/V and the fc1 outputs other than fc2's input stay in
 * the activation precision. */
static int64_t fp8_saved_bytes(const struct dp_layout *l)
{
    return dp_layout_gemm(l) == DP_GEMM_FP8 ? 1 : dp_precision_bytes(l->precision);
}

/*
 * The sequence-parallel divisor of the column-parallel linears' saved input (the norm
 * output they all-gather). Megatron-Core saves its own shard and gathers it again for the
 * weight gradient (Korthikanti Sec. 4.2.2; TE LayerNormLinear); torchtitan's tensor
 * parallel plan redistributes the norm output to Replicate before the attention and the
 * feed-forward (PrepareModuleInput desired_input_layouts Replicate), so wq/wk/wv and
 * w1/w3 save the gathered tensor, all T rows (torchao Float8ColwiseParallel gathers it
 * in FP8).
 */
static int64_t gathered_u(const struct dp_layout *l, int64_t u)
{
    return l->framework == DP_FW_TORCHTITAN ? 1 : u;
}

/*
 * The attention block's stored bytes without the s^2 terms, Korthikanti Sec. 4.1
 * (11sbh + 5as^2b with 2-byte values, MHA): QKV input 2sbh, Q and K 4sbh, V 2sbh,
 * out-proj input 2sbh, dropout mask sbh. Generalized: Q is a*d wide, K and V g*d
 * (GQA), values p bytes; Qwen3's q/k RMSNorms keep their inputs too.
 */
static int64_t attn_act(const struct dp_model *m, const struct dp_layout *l, int64_t T, int64_t u)
{
    const int64_t t = l->tp, h = m->hidden, a = m->heads, g = m->kv_heads, d = m->head_dim;
    const int64_t p = dp_precision_bytes(l->precision);
    const int64_t q = fp8_saved_bytes(l);        /* a linear layer's saved input */
    const int64_t mask = m->dropout ? 1 : 0;     /* dropout masks are 1 byte per element */
    int64_t attn = q * T * h / gathered_u(l, u); /* the down/QKV projections' input (norm output) */
    attn += mask * T * h / u;                    /* output dropout mask */
    if (m->mla) {
        /*
         * Megatron-Core MLASelfAttention: the down projections (duplicated on every
         * TP rank) run on the sequence-parallel shard; their outputs are normed,
         * then gathered into the column-parallel up projections. Kept: q latent and
         * its norm output, the K/V latent (+ rotary key) and its norm output, Q and
         * K (a heads of nope + rope), V (a x v_dim), the out-projection input.
         */
        int64_t rq = m->mla_q_rank, rkv = m->mla_kv_rank, dv = m->mla_v_dim;
        attn += (p + q) * T * rq / u; /* q latent, its norm output (the up projection's input) */
        attn += (p * (rkv + m->mla_rope_dim) + q * rkv) * T / u;
        attn += 2 * p * T * a * d / t;    /* Q, K */
        attn += (p + q) * T * a * dv / t; /* V, out-projection input */
        return attn;
    }
    attn += p * T * (a + g) * d / t; /* Q, K */
    attn += p * T * g * d / t;       /* V */
    attn += q * T * a * d / t;       /* out-projection input */
    if (m->qk_norm)                  /* q_norm and k_norm inputs (their outputs are Q and K) */
        attn += p * T * (a + g) * d / t;
    return attn;
}

/* The MLP of one layer of `kind`, Korthikanti Sec. 4.1 (19sbh for f = 4h, GELU): fc1
 * input 2sbh, GELU input 8sbh, fc2 input 8sbh, dropout mask sbh. SwiGLU keeps both fc1
 * outputs (gate and up, 2f) and their product (f). */
static int64_t mlp_act(const struct dp_model *m, const struct dp_layout *l, enum dp_layer_kind kind,
                       int64_t T, int64_t u)
{
    const int64_t t = l->tp, h = m->hidden;
    const int64_t p = dp_precision_bytes(l->precision);
    const int64_t inter_mult = m->ffn == DP_FFN_SWIGLU ? 3 : 2;
    const int64_t q = fp8_saved_bytes(l);           /* a linear layer's saved input */
    const int64_t inter = (inter_mult - 1) * p + q; /* the last intermediate feeds fc2 */
    int64_t mlp = (m->dropout ? 1 : 0) * T * h / u; /* dropout mask */
    if (kind == DP_LAYER_DENSE)
        return mlp + q * T * h / gathered_u(l, u) /* fc1 input (norm output) */ +
               inter * T * m->ffn_hidden / t;
    mlp += p * T * h / u; /* router and dispatcher input (norm output) */
    /*
     * MoE (Megatron-Core TopKRouter, MoEAlltoAllTokenDispatcher, TEGroupedMLP): the
     * router keeps its fp32 scores for the softmax/sigmoid backward and the top-k
     * indices (int64) and weights (fp32) of each local token; every GPU's experts
     * keep their input rows (the dispatched token copies) and their intermediates,
     * the routing weights being applied inside the activation (experts.py
     * activation_func_with_probs), so the expert outputs are not kept. Shared
     * experts are an ordinary tensor-parallel MLP over all T tokens.
     */
    const int64_t E = m->experts, k = m->top_k, etp = dp_layout_etp(l);
    const double rows = dp_moe_rows(m, l);
    mlp += 4 * T * E / u + 12 * T * k / u;
    mlp += (int64_t)(rows * (double)(q * h) + 0.5);
    mlp += (int64_t)(rows * (double)(inter * m->moe_ffn_hidden / etp) + 0.5);
    mlp += inter * T * m->moe_shared_experts * m->moe_shared_ffn_hidden / t;
    return mlp;
}

/*
 * What the selective policies keep, per layer (Megatron-Core recompute_modules,
 * transformer_config.py; torchtitan per-op SAC). `parts`: the attention block's norm
 * output, Q/K/V projections' outputs, the MLP's norm output and intermediates as
 * attn_act/mlp_act count them.
 */
struct act_parts {
    int64_t norm_out_attn, norm_out_mlp; /* the norm outputs feeding QKV and fc1 / the router */
    int64_t qkv_up;                      /* MLA: the up projections' outputs Q, K, V */
    int64_t mlp_inner;                   /* dense MLP: what it keeps beyond its input */
    int64_t moe_inner;                   /* MoE block: what it keeps beyond its input */
    int64_t moe_act;                     /* the experts' activation outputs (fc2 inputs) */
    int64_t shared_inner;                /* the shared experts' intermediates */
};

/*
 * torchtitan's per-op SAC on one transformer block (torchtitan/models/llama3/infra/
 * parallelize.py: _save_list = mm, the SDPA kernels, reduce_scatter_tensor, max; every
 * second mm of a block recomputed): the matmuls run wq, wk, wv, wo, w1, w3, w2 (GELU:
 * fc1, fc2), so the outputs of wq, wv, w1 and w2 (fc1) are saved, with the attention
 * kernel's output and log-sum-exp and, under TP, the reduce-scatters' outputs (wo's and
 * w2's); the block input is the checkpoint's. A row-parallel mm's output is the partial
 * sum of all T rows before its reduce-scatter. Everything else (norms, wk, wo, w3, rotary,
 * the activation) is recomputed in backward. MoE layers keep their MoE block as without
 * recompute (torchtitan saves the grouped expert GEMMs' outputs).
 *
 * Eager, the policy's outputs are cached whether or not backward reads them
 * (torch/utils/checkpoint.py _CachingTorchDispatchMode stores every MUST_SAVE output for
 * the recompute to replay). Under torch.compile the block's forward and backward are one
 * joint graph and the min-cut partitioner (torch/_functorch/partitioners.py) saves only
 * tensors the backward graph uses: w2's output (and its reduce-scatter's) feeds only the
 * residual add, whose backward reads nothing, so it is dropped; every other saved output
 * is read by a gradient (q and v by the attention's, w1's by the activation's, the
 * attention output by wo's, wo's reduce-scatter output to rebuild the second norm's input).
 * torchtitan's tables (Dec 2024, Llama 3.1 8B, per-op SAC, 16384 tokens per GPU): compile
 * cut the reserved peak by 5.4 GiB at 8 GPUs and 5.0 GiB at 128, with the loss eager in
 * both; 32 layers x 16384 x 4096 x 2 B = 4.0 GiB allocated, 4.7 GiB with the allocator's
 * 18% slack.
 */
static int64_t op_sac_stored(const struct dp_model *m, const struct dp_layout *l,
                             enum dp_layer_kind kind, int64_t T, int64_t u, int64_t mlp_full)
{
    const int64_t t = l->tp, h = m->hidden, a = m->heads, g = m->kv_heads, d = m->head_dim;
    const int64_t p = dp_precision_bytes(l->precision);
    int64_t st = p * T * h / u;                                    /* block input */
    st += p * T * a * d / t + p * T * g * d / t;                   /* wq, wv outputs */
    st += p * T * a * d / t + (l->flash_attn ? 4 * T * a / t : 0); /* attention out, lse */
    if (t > 1)
        st += p * T * h / u; /* wo's reduce-scatter output */
    if (kind == DP_LAYER_MOE)
        return st + mlp_full;
    st += p * T * m->ffn_hidden / t; /* w1 (fc1) output */
    if (l->eager || l->framework != DP_FW_TORCHTITAN) {
        if (m->ffn == DP_FFN_SWIGLU)
            st += p * T * h; /* w2's mm output, all T rows */
        if (t > 1)
            st += p * T * h / u; /* w2's (fc2's) reduce-scatter output */
    }
    return st;
}

int dp_act_layer(const struct dp_model *m, const struct dp_layout *l, enum dp_layer_kind kind,
                 struct dp_act_layer *out)
{
    memset(out, 0, sizeof *out);
    const int64_t t = l->tp;
    const int64_t u = (l->sp && t > 1) ? t : 1; /* sequence parallel splits the rest */
    const int64_t s = l->seq_len / l->cp;       /* context parallel: local sequence */
    const int64_t s_full = l->seq_len;
    const int64_t b = l->mbs, h = m->hidden, a = m->heads;
    const int64_t p = dp_precision_bytes(l->precision);
    const int64_t q = fp8_saved_bytes(l);
    const int64_t T = s * b, sbh = T * h;

    /* The s^2 terms, Korthikanti Sec. 4.1: softmax 2as^2b, its dropout mask as^2b and
     * dropout output 2as^2b. */
    int64_t scores = 0;
    if (!l->flash_attn) {
        scores = p * a * s * s_full * b / t; /* softmax output */
        if (m->dropout)
            scores += (1 + p) * a * s * s_full * b / t; /* its dropout mask and output */
    } else {
        scores = 4 * a * s * b / t; /* flash attention keeps the fp32 log-sum-exp only */
    }
    int64_t mlp = mlp_act(m, l, kind, T, u);
    /* LayerNorm/RMSNorm inputs, Korthikanti's 4sbh: one per norm. With a single
     * norm (Falcon-7B's parallel attention) its output feeds QKV and fc1 alike. */
    int64_t norms = m->norms_per_layer * p * sbh / u;
    if (m->norms_per_layer == 1 && kind == DP_LAYER_DENSE)
        mlp -= q * sbh / gathered_u(l, u); /* shared norm output, counted once in attn */

    struct act_parts pa = {0};
    pa.norm_out_attn = q * sbh / gathered_u(l, u);
    pa.norm_out_mlp = m->norms_per_layer == 2
                          ? (kind == DP_LAYER_DENSE ? q * sbh / gathered_u(l, u) : p * sbh / u)
                          : 0;
    const int64_t mask = m->dropout ? T * h / u : 0; /* the MLP's output dropout mask */
    if (kind == DP_LAYER_DENSE) {
        pa.mlp_inner = mlp - mask - pa.norm_out_mlp;
    } else {
        pa.moe_inner = mlp - mask - pa.norm_out_mlp;
        const int64_t inter_last = q; /* the fc2 input is saved at the linear's precision */
        pa.moe_act = (int64_t)(dp_moe_rows(m, l) *
                               (double)(inter_last * m->moe_ffn_hidden / dp_layout_etp(l)));
        const int64_t im = m->ffn == DP_FFN_SWIGLU ? 3 : 2;
        pa.shared_inner =
            ((im - 1) * p + q) * T * m->moe_shared_experts * m->moe_shared_ffn_hidden / t;
    }
    if (m->mla)
        pa.qkv_up = 2 * p * T * a * m->head_dim / t + p * T * a * m->mla_v_dim / t;

    /* Eager PyTorch (no torch.compile, no fused norm/activation kernels) keeps more:
     * RMSNorm as written in Llama and torchtitan saves the fp32 up-cast input for pow and
     * mul and the normalized value for the weight multiply (4 B beyond a fused norm's);
     * F.silu(w1(x)) * w3(x) saves silu's input and output and w3's output besides w2's
     * input (a fourth tensor of the MLP width). torchtitan's attention repeats K and V to
     * all heads before the attention kernel (repeat_kv), which saves the repeated ones. */
    int64_t eager = 0;
    if (l->eager) {
        if (m->norm == DP_NORM_RMSNORM)
            eager += m->norms_per_layer * 4 * sbh / u;
        if (m->ffn == DP_FFN_SWIGLU && kind == DP_LAYER_DENSE)
            eager += p * T * m->ffn_hidden / t;
    }
    if (l->framework == DP_FW_TORCHTITAN && !m->mla && m->kv_heads < a)
        eager += 2 * p * T * (a - m->kv_heads) * m->head_dim / t;

    out->attn_bytes = attn_act(m, l, T, u) + norms;
    out->scores_bytes = scores;
    out->mlp_bytes = mlp;
    out->eager_bytes = eager;
    out->full_bytes = out->attn_bytes + scores + mlp + eager;
    switch (l->recompute) {
    case DP_RECOMPUTE_NONE: out->stored_bytes = out->full_bytes; break;
    case DP_RECOMPUTE_SELECTIVE: {
        /* Megatron-Core selective recompute of recompute_modules (default core_attn,
         * Korthikanti Sec. 5: the s^2 terms go); output-discarding modules (layernorm,
         * moe_act, mla_up_proj) drop their outputs, checkpointed ones (mlp, moe,
         * shared_experts) keep only their input. */
        unsigned mods = l->recompute_modules ? l->recompute_modules : DP_RCM_CORE_ATTN;
        int64_t drop = 0;
        if (mods & DP_RCM_CORE_ATTN)
            drop += scores;
        if (mods & DP_RCM_LAYERNORM)
            drop += pa.norm_out_attn + pa.norm_out_mlp;
        if (mods & DP_RCM_MLA_UP_PROJ)
            drop += pa.qkv_up;
        if (kind == DP_LAYER_DENSE && (mods & DP_RCM_MLP))
            drop += pa.mlp_inner;
        if (kind == DP_LAYER_MOE) {
            if (mods & DP_RCM_MOE)
                drop += pa.moe_inner;
            else {
                if (mods & DP_RCM_MOE_ACT)
                    drop += pa.moe_act;
                if (mods & DP_RCM_SHARED_EXPERTS)
                    drop += pa.shared_inner;
            }
        }
        if (drop > out->full_bytes)
            drop = out->full_bytes;
        out->stored_bytes = out->full_bytes - drop;
        out->work_bytes = drop;
        break;
    }
    case DP_RECOMPUTE_FULL:
        /* Only the layer input is kept (2sbh; split by t under SP). */
        out->stored_bytes = p * sbh / u;
        out->work_bytes = out->full_bytes;
        break;
    case DP_RECOMPUTE_OP:
    default:
        out->stored_bytes = op_sac_stored(m, l, kind, T, u, mlp);
        if (out->stored_bytes > out->full_bytes)
            out->stored_bytes = out->full_bytes;
        out->work_bytes = out->full_bytes - out->stored_bytes;
        break;
    }
    return 0;
}

void dp_act_layers(const struct dp_model *m, const struct dp_layout *l,
                   struct dp_act_layer out[DP_LAYER_KINDS])
{
    for (int k = 0; k < DP_LAYER_KINDS; k++)
        dp_act_layer(m, l, (enum dp_layer_kind)k, &out[k]);
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
        if (m->qk_norm)
            n += 2 * d;
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

/* Parameters held by one GPU of stage r: its layers by kind, plus the embedding (first
 * stage), the final norm and the LM head (last stage), all in the dense part. */
static void stage_params(const struct dp_model *m, const struct dp_layout *l, int r,
                         const struct dp_layer_kinds *kinds, const struct kind_params *kp,
                         int64_t *dense, int64_t *expert)
{
    const int64_t t = l->tp, h = m->hidden;
    const int64_t vpad = dp_padded_vocab(m->vocab, l->tp);
    int64_t d = 0, e = 0;
    for (int k = 0; k < DP_LAYER_KINDS; k++) {
        d += kinds->n[k] * kp->dense[k];
        e += kinds->n[k] * kp->expert[k];
    }
    if (r == 0) {
        d += vpad * h / t; /* vocabulary-parallel embedding */
        if (m->pos == DP_POS_LEARNED)
            d += m->max_pos * h;
    }
    if (r == l->pp - 1) {
        d += m->norm == DP_NORM_LAYERNORM ? 2 * h : h;
        /* The LM head: its own weight when untied; when tied and pp > 1 the last
         * stage keeps a copy of the embedding, kept in sync by an all-reduce
         * (Megatron _allreduce_word_embedding_grads). */
        if (!m->tied_embeddings || l->pp > 1)
            d += vpad * h / t;
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
    /* Parameters of the ends (stage_params): the vocabulary-parallel embedding; the
     * final norm and the LM head: its own weight when untied; when tied and pp > 1 the
     * last stage keeps a copy of the embedding, kept in sync by an all-reduce (Megatron
     * _allreduce_word_embedding_grads). */
    x->emb_params = vpad * h / t + (m->pos == DP_POS_LEARNED ? m->max_pos * h : 0);
    x->head_params = (m->norm == DP_NORM_LAYERNORM ? 2 * h : h) +
                     ((!m->tied_embeddings || l->pp > 1) ? vpad * h / t : 0);
    /* Korthikanti Sec. 4.3: the embedding's dropout mask, one per micro-batch in flight
     * in the first chunk; the final norm input and output-layer input (4sbh/t with SP);
     * the loss's buffers at its peak, per logit element as its implementation holds them
     * (dp_fw_loss_bytes: 6 B for Megatron's vocab-parallel cross entropy, 12 B for
     * F.cross_entropy on up-cast logits); the last stage holds one micro-batch at a time. */
    x->emb_mask = m->dropout ? s * b * h / u : 0;
    x->loss_bytes = (int64_t)(dp_fw_loss_bytes(l) * (double)(s * b * vpad / t));
    x->head_act = 2 * p * s * b * h / u + x->loss_bytes;
    /* one forward-receive and one backward-receive activation buffer */
    x->recv_bytes = l->pp > 1 ? 2 * p * s * b * h / u : 0;
    x->runtime = o && o->overhead_bytes >= 0 ? o->overhead_bytes : cl->gpu.runtime_overhead_bytes;
    x->M = dp_layout_microbatches(l);
    /* ZeRO/FSDP shard the dense part over dp x cp, or the shard group under HSDP; the
     * experts over their data-parallel group, divided among the same replicas. */
    const int rep = dp_layout_replicas(l), edp = dp_layout_edp(l);
    x->shard_d = dp_layout_shard(l);
    x->shard_e = edp % rep == 0 ? edp / rep : edp;
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
    int64_t peak = dp_pipe_peak_live(l->pp, v, x->M, r, w, by_chunk ? live : NULL);
    if (by_chunk) {
        for (int c = 0; c < v && c < DP_MAX_CHUNKS; c++)
            out->act_layers_bytes += live[c] * lw[c];
        out->act_embed_bytes = live[0] * emb;
    } else {
        out->act_layers_bytes = peak;
    }
    out->inflight = stored > 0 ? (double)out->act_layers_bytes / (double)stored : (double)live[0];
    if (out->has_head)
        out->act_head_bytes = x->head_act;
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
            n = l->nchunks > 0 ? l->chunk_layers[c * l->pp + r] : dp_layout_chunk_count(l, m, r, c);
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
    out->has_head = r == l->pp - 1;

    /* Parameters: the dense part sharded over dp x cp, the experts over the expert
     * data-parallel group (Megatron _EXPERT_DATA_PARALLEL_GROUP). */
    int64_t dense = (out->has_embedding ? x->emb_params : 0) + (out->has_head ? x->head_params : 0);
    int64_t expert = 0;
    for (int k = 0; k < DP_LAYER_KINDS; k++) {
        dense += out->kind_layers[k] * x->kp.dense[k];
        expert += out->kind_layers[k] * x->kp.expert[k];
    }
    out->params = dense + expert;
    struct dp_states sd, se = {0, 0, 0};
    dp_mem_states(dense, x->shard_d, l, &sd);
    if (expert)
        dp_mem_states(expert, x->shard_e, l, &se);
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
            /* The stage stays unsharded (dp_mem_states); the last micro-batch's fp32
             * reduce-scatter input of the current and the previous block. */
            per_layer = 2 * 4 * big;
        } else if (l->zero >= 2) {
            /* FSDP2 per block (torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py):
             * backward holds the block's bf16 parameters, the next block's (prefetched one
             * ahead, _backward_prefetch), its bf16 gradients, their fp32 reduce-scatter
             * input, and the previous block's reduce-scatter input until the next reduce
             * starts (reduce_scatter_state): (2 + 2 + 2 + 4 + 4) B per parameter. The
             * output layer's group is never resharded (torchtitan apply_fsdp), nor (zero 2,
             * reshard_after_forward False) any block between its forward and backward. */
            per_layer = (3 * p + 8) * big;
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
        bool eval = r == 0 || r == pp - 1 || r == 1 || r == pp - 2 || x.mixed;
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
