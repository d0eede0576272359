/*
 * FLOP counts of a training step. Conventions in costmodel.h: 2 FLOPs per
 * multiply-add, backward = 2 x forward (input and weight gradients), full
 * s x s attention scores. Element-wise work (norms, activations, softmax) is
 * not counted, as in Narayanan et al. 2021 and Korthikanti et al. 2022.
 */
#include "costmodel.h"

#include <string.h>

void dp_flops_step(const struct dp_model *m, const struct dp_layout *l, struct dp_flops *out)
{
    memset(out, 0, sizeof *out);
    const double s = (double)l->seq_len, b = (double)l->mbs, h = (double)m->hidden;
    const double a = (double)m->heads, g = (double)m->kv_heads, d = (double)m->head_dim;
    const double tokens = s * b;
    /* QKV projection: h -> (a + 2g) d; output projection: a d -> h. */
    double attn = 2 * tokens * h * (a + 2 * g) * d + 2 * tokens * a * d * h;
    /* QK^T and attention-weighted V: 2 * (2 b a s^2 d). */
    double scores = 4 * b * a * s * s * d;
    double mult = m->ffn == DP_FFN_SWIGLU ? 3 : 2; /* matrices in the MLP */
    double mlp;
    if (m->experts > 0)
        mlp = (double)m->top_k * 2 * mult * tokens * h * (double)m->moe_ffn_hidden +
              2 * tokens * h * (double)m->experts; /* experts + router */
    else
        mlp = 2 * mult * tokens * h * (double)m->ffn_hidden;
    out->layer_fwd = attn + scores + mlp;
    out->scores_fwd = scores;
    out->head_fwd = 2 * tokens * h * (double)m->vocab;
    double micro = (double)l->gbs / (double)l->mbs; /* micro-batches summed over DP ranks */
    double L = (double)m->layers;
    double fwd = micro * (L * out->layer_fwd + out->head_fwd);
    out->model_flops = 3 * fwd;
    if (l->recompute == DP_RECOMPUTE_FULL) {
        double Lr = 0; /* recompute_layers applies per pipeline stage */
        for (int st = 0; st < l->pp; st++)
            Lr += dp_layout_recomputed(l, dp_layout_stage_layers(l, m, st));
        out->recompute_flops = micro * Lr * out->layer_fwd;
    } else if (l->recompute == DP_RECOMPUTE_SELECTIVE)
        out->recompute_flops = micro * L * out->scores_fwd;
    out->hardware_flops = out->model_flops + out->recompute_flops;
}
