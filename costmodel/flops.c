/*
 * FLOP counts of a training step. Conventions in costmodel.h: 2 FLOPs per
 * multiply-add, backward = 2 x forward (input and weight gradients), full
 * s x s attention scores (scaled down for sliding-window layers). Element-wise work (norms,
 * activations, softmax) is not counted, as in Narayanan et al. 2021 and Korthikanti et al. 2022.
 */
#include "costmodel.h"

#include <string.h>

bool dp_recompute_early_stop(const struct dp_model *m, const struct dp_layout *l)
{
    return l->framework == DP_FW_TORCHTITAN && !m->dropout && dp_layout_gemm(l) != DP_GEMM_FP8;
}

void dp_flops_step(const struct dp_model *m, const struct dp_layout *l, struct dp_flops *out)
{
    memset(out, 0, sizeof *out);
    const double s = (double)l->seq_len, b = (double)l->mbs, h = (double)m->hidden;
    const double a = (double)m->heads, g = (double)m->kv_heads, d = (double)m->head_dim;
    const double tokens = s * b;
    double attn, dv = d;
    if (m->mla) {
        /* MLA (DeepSeek-V2 Sec. 2.1): q down (h -> r_q) and up (r_q -> a d) or a plain
         * q projection, the K/V down projection (h -> r_kv + d_rope), its up
         * projection (r_kv -> a (d_nope + d_v)), the output projection (a d_v -> h). */
        double rq = (double)m->mla_q_rank, rkv = (double)m->mla_kv_rank;
        dv = (double)m->mla_v_dim;
        double q = rq > 0 ? h * rq + rq * a * d : h * a * d;
        double kv = h * (rkv + (double)m->mla_rope_dim) + rkv * a * ((double)m->mla_nope_dim + dv);
        attn = 2 * tokens * (q + kv + a * dv * h);
    } else {
        /* QKV projection: h -> (a + 2g) d; output projection: a d -> h. */
        attn = 2 * tokens * h * (a + 2 * g) * d + 2 * tokens * a * d * h;
    }
    /* QK^T (d wide) and attention-weighted V (d_v wide): 2 b a s^2 (d + d_v); layers with a
     * sliding window count their share of causal attention's pairs in the same
     * convention (Mistral 7B's 4096 of 8192: 75%). */
    double scores = 2 * b * a * s * s * (d + dv) * dp_model_attn_pair_ratio(m, l->seq_len);
    double mult = m->ffn == DP_FFN_SWIGLU ? 3 : 2; /* matrices in the MLP */
    double dense = 2 * mult * tokens * h * (double)m->ffn_hidden;
    /* MoE: top_k routed experts, the shared experts and the router (h -> E). */
    double moe =
        (double)m->top_k * 2 * mult * tokens * h * (double)m->moe_ffn_hidden +
        (double)m->moe_shared_experts * 2 * mult * tokens * h * (double)m->moe_shared_ffn_hidden +
        2 * tokens * h * (double)m->experts;
    out->kind_fwd[DP_LAYER_DENSE] = attn + scores + dense;
    out->kind_fwd[DP_LAYER_MOE] = attn + scores + moe;
    out->layer_fwd = out->kind_fwd[m->experts > 0 ? DP_LAYER_MOE : DP_LAYER_DENSE];
    out->scores_fwd = scores;
    out->head_fwd = 2 * tokens * h * (double)m->vocab;
    double micro = (double)l->gbs / (double)l->mbs; /* micro-batches summed over DP ranks */
    struct dp_layer_kinds k;
    dp_model_layer_kinds(m, 0, m->layers, &k);
    /* Multi-token prediction (layout mtp_layers): per depth one more layer of the last
     * layer's kind, counted with the model's layers below (recompute included), plus its
     * 2h -> h projection and the output layer again (Megatron-LM training.py
     * num_floating_point_operations counts the same: "MTP norms and proj" and the logits
     * (mtp_num_layers + 1) times). */
    const double D = l->mtp_layers > 0 ? l->mtp_layers : 0;
    const enum dp_layer_kind K = dp_model_mtp_kind(m);
    k.n[K] += (int64_t)D;
    out->mtp_fwd = D * (2 * tokens * 2 * h * h + out->head_fwd);
    double layers_fwd = k.n[DP_LAYER_DENSE] * out->kind_fwd[DP_LAYER_DENSE] +
                        k.n[DP_LAYER_MOE] * out->kind_fwd[DP_LAYER_MOE];
    double fwd = micro * (layers_fwd + out->head_fwd + out->mtp_fwd);
    out->model_flops = 3 * fwd;
    /* What full recompute redoes of a layer: all of its forward, or without its fc2
     * (2 T h f) where the checkpoint stops early (dp_recompute_early_stop). */
    double redo[DP_LAYER_KINDS] = {out->kind_fwd[DP_LAYER_DENSE], out->kind_fwd[DP_LAYER_MOE]};
    if (dp_recompute_early_stop(m, l))
        redo[DP_LAYER_DENSE] -= 2 * tokens * h * (double)m->ffn_hidden;
    double layers_redo =
        k.n[DP_LAYER_DENSE] * redo[DP_LAYER_DENSE] + k.n[DP_LAYER_MOE] * redo[DP_LAYER_MOE];
    if (l->recompute == DP_RECOMPUTE_FULL && l->recompute_layers <= 0)
        out->recompute_flops = micro * layers_redo;
    else if (l->recompute == DP_RECOMPUTE_FULL) {
        /* recompute_layers applies per pipeline stage: that share of each stage's
         * layers, of the stage's kinds. */
        double r = 0;
        for (int st = 0; st < l->pp; st++) {
            int n = dp_layout_stage_layers(l, m, st);
            struct dp_layer_kinds sk;
            dp_layout_stage_kinds(l, m, st, &sk);
            double fwd_st = sk.n[DP_LAYER_DENSE] * redo[DP_LAYER_DENSE] +
                            sk.n[DP_LAYER_MOE] * redo[DP_LAYER_MOE];
            if (st == l->pp - 1) { /* the MTP layers, recomputed as the stage's */
                fwd_st += D * redo[K];
                n += (int)D;
            }
            if (n > 0)
                r += fwd_st * dp_layout_recomputed(l, n) / n;
        }
        out->recompute_flops = micro * r;
    } else if (l->recompute == DP_RECOMPUTE_SELECTIVE) {
        /* Megatron's recompute_modules: the attention core by default; the dense MLPs
         * (mlp), the MoE blocks (moe) or shared experts, the MLA up projections. */
        unsigned mods = l->recompute_modules ? l->recompute_modules : DP_RCM_CORE_ATTN;
        double per = mods & DP_RCM_CORE_ATTN ? scores : 0, r = 0;
        if (mods & DP_RCM_MLA_UP_PROJ && m->mla)
            per += 2 * tokens * (double)m->mla_kv_rank * a * ((double)m->mla_nope_dim + dv);
        r = ((double)m->layers + D) * per;
        if (mods & DP_RCM_MLP)
            r += k.n[DP_LAYER_DENSE] * dense;
        if (mods & DP_RCM_MOE)
            r += k.n[DP_LAYER_MOE] * moe;
        else if (mods & DP_RCM_SHARED_EXPERTS)
            r += k.n[DP_LAYER_MOE] * (double)m->moe_shared_experts * 2 * mult * tokens * h *
                 (double)m->moe_shared_ffn_hidden;
        out->recompute_flops = micro * r;
    } else if (l->recompute == DP_RECOMPUTE_OP) {
        /* torchtitan per-op SAC (every second matmul of a block): wk, wo and SwiGLU's w3
         * or GELU's fc2 (MoE layers: the shared experts' w3, the router, and the routed
         * experts' grouped GEMMs, which its save set does not hold: activations.c
         * op_sac_stored). */
        double att = m->mla ? 0.5 * attn : 2 * tokens * (h * g * d + a * d * h);
        double f = (double)m->ffn_hidden;
        double mlp_d = 2 * tokens * h * f;
        double mlp_m =
            (double)m->moe_shared_experts * 2 * tokens * h * (double)m->moe_shared_ffn_hidden +
            2 * tokens * h * (double)m->experts +
            (double)m->top_k * 2 * mult * tokens * h * (double)m->moe_ffn_hidden;
        out->recompute_flops =
            micro * (k.n[DP_LAYER_DENSE] * (att + mlp_d) + k.n[DP_LAYER_MOE] * (att + mlp_m));
    }
    out->hardware_flops = out->model_flops + out->recompute_flops;
}
