/*
 * Activation memory of one transformer layer per micro-batch (dp_act_layer): the
 * attention and MLP terms of Korthikanti et al. 2022, Sec. 4, under sequence, tensor
 * and context parallelism, recomputation (selective, full, torchtitan's per-op SAC)
 * and FP8 saved inputs. memory.c adds them up per stage.
 */
#include "costmodel.h"

#include <string.h>

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

/* Bytes per element of Q, K and V as the attention kernel saves them: with FP8 attention
 * the quantized copies, 1 byte (TE FusedAttnFunc saves q, k, v in FP8 under fp8_dpa; the
 * bf16 ones feed nothing else that saves them: Megatron's fused rotary backward needs
 * none). */
static int64_t attn_saved_bytes(const struct dp_layout *l)
{
    return l->fp8_attention && dp_layout_gemm(l) == DP_GEMM_FP8 ? 1
                                                                : dp_precision_bytes(l->precision);
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
    const int64_t pa = attn_saved_bytes(l);      /* Q, K and V as the kernel saves them */
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
        attn += 2 * pa * T * a * d / t;    /* Q, K */
        attn += (pa + q) * T * a * dv / t; /* V, out-projection input */
        return attn;
    }
    attn += pa * T * (a + g) * d / t; /* Q, K */
    attn += pa * T * g * d / t;       /* V */
    attn += q * T * a * d / t;        /* out-projection input */
    if (m->qk_norm)                   /* q_norm and k_norm inputs (their outputs are Q and K) */
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
 * the activation) is recomputed in backward.
 *
 * MoE layers (torchtitan models/common/moe.py, distributed/activation_checkpoint.py of
 * 2026-08, b5bcd76): the save set is PyTorch's compute-intensive ops (torch/_functorch/
 * partitioners.py get_default_op_list: mm, bmm, addmm, _scaled_mm, the SDPA kernels) with
 * linear, max, topk and the reduce-scatter and all-to-all outputs; aten._grouped_mm is not
 * in it (torchtitan's graph_trainer adds it, "for fair baseline comparison", only in an
 * experiment), so the routed experts' GEMMs, their activation and the token permutations
 * are recomputed in backward. The router's gate is force-recomputed without counting in
 * the mm alternation (force_recompute_mm_shapes_by_fqns "moe.router.gate"). What a MoE
 * block keeps: top-k's fp32 weights and int64 indices, under EP the dispatch and combine
 * all-to-alls' outputs (the routed copies, each way), and the shared experts' w1 output
 * (the block's fifth mm; w3 the sixth is recomputed, w2's output is dropped like the
 * dense w2's). Before session 18 dplan kept the whole MoE block: 5998 MiB a layer for
 * Qwen3-30B-A3B at 65536 tokens, where the block's kept tensors are 1368 MiB.
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
                             enum dp_layer_kind kind, int64_t T, int64_t u)
{
    const int64_t t = l->tp, h = m->hidden, a = m->heads, g = m->kv_heads, d = m->head_dim;
    const int64_t p = dp_precision_bytes(l->precision);
    int64_t st = p * T * h / u;                                    /* block input */
    st += p * T * a * d / t + p * T * g * d / t;                   /* wq, wv outputs */
    st += p * T * a * d / t + (l->flash_attn ? 4 * T * a / t : 0); /* attention out, lse */
    if (t > 1)
        st += p * T * h / u; /* wo's reduce-scatter output */
    if (kind == DP_LAYER_MOE) {
        st += 12 * T * m->top_k / u; /* top-k weights (fp32) and indices (int64) */
        if (l->ep > 1)
            st += (int64_t)(2.0 * dp_moe_rows(m, l) * (double)(p * h) + 0.5); /* all-to-alls */
        st += p * T * m->moe_shared_experts * m->moe_shared_ffn_hidden / t;   /* shared w1 */
        return st;
    }
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
    pa.norm_out_mlp = m->norms_per_layer >= 2
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
    if (m->mla) { /* as attn_act keeps them */
        const int64_t pk = attn_saved_bytes(l);
        pa.qkv_up = 2 * pk * T * a * m->head_dim / t + pk * T * a * m->mla_v_dim / t;
    }

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
        out->stored_bytes = op_sac_stored(m, l, kind, T, u);
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
