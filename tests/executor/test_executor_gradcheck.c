/*
 * Gradient check of the hand-written backward against central finite
 * differences, in double precision (the executor built with `real` = double,
 * library dplan_executor_f64), single process.
 *
 * For small GPT-style (LayerNorm, GELU, learned positions, tied embeddings,
 * all biases) and Llama-style (RMSNorm, SwiGLU, RoPE, GQA, untied head) models,
 * with two micro-batches of gradient accumulation and each recompute mode,
 * every parameter tensor is probed at a few elements (including its largest
 * gradient): central differences (L(w + h) - L(w - h)) / 2h at h = 1e-4 and 5e-5,
 * combined by Richardson extrapolation, against the analytic gradient. Sequences of
 * 40 tokens span two attention blocks. The GPT and Llama models again with flash
 * attention (--attention flash), whose backward rebuilds the softmax from the
 * log-sum-exp. Passes when the worst relative error is below
 * 1e-6; differences below an absolute 1e-10 count as zero (the finite-difference
 * noise floor: loss ~4, double rounding, h = 5e-5; the attention key bias, for one,
 * has an exactly zero gradient).
 */
#include "check.h"
#include "executor/internal.h"

#include <stdlib.h>

static void base_model(struct dp_model *m, bool llama)
{
    memset(m, 0, sizeof *m);
    snprintf(m->name, sizeof m->name, "%s", llama ? "gradcheck-llama" : "gradcheck-gpt");
    m->layers = 2;
    m->hidden = 16;
    m->heads = 4;
    m->kv_heads = llama ? 2 : 4;
    m->head_dim = 4;
    m->ffn_hidden = llama ? 24 : 32;
    m->vocab = 40;
    m->seq_len = 40; /* two attention blocks (ATT_BS = 32), the second partial */
    m->ffn = llama ? DP_FFN_SWIGLU : DP_FFN_GELU;
    m->norm = llama ? DP_NORM_RMSNORM : DP_NORM_LAYERNORM;
    m->pos = llama ? DP_POS_ROPE : DP_POS_LEARNED;
    m->max_pos = llama ? 0 : 40;
    m->tied_embeddings = !llama;
    m->qkv_bias = m->out_bias = m->mlp_bias = !llama;
    m->norms_per_layer = 2;
}

static double loss_at(struct dp_exec *ex)
{
    double loss = 0;
    if (dp__forward_backward(ex, 1, &loss))
        fprintf(stderr, "forward_backward failed: %s\n", ex->err->msg);
    return loss;
}

/* kind 0 GPT, 1 Llama, 2 Llama with mixture-of-experts MLPs (4 experts, top-2, a shared
 * expert, the first layer dense: router, experts, combine and the auxiliary loss),
 * 3 the same with capacity factor 1 (dropped choices), 4 the same with DeepSeek-V3's
 * routing (sigmoid scores, the router bias in the selection only; the bias is moved off
 * zero so that it decides choices, and has no gradient), 5 Qwen's (q/k/v biases and the
 * shared expert behind its sigmoid gate of Qwen2-MoE, Qwen3's q/k RMSNorm), 6 the GPT model with
 * GELU experts that have biases (mlp_bias) and no shared expert. */
static double gradcheck(int kind, enum dp_recompute rc, enum dp_exec_attn attn,
                        struct dp_tokens *tok)
{
    struct dp_model m;
    bool llama = kind >= 1 && kind != 6;
    base_model(&m, llama);
    if (kind >= 2) {
        snprintf(m.name, sizeof m.name, "%s",
                 kind == 2   ? "gradcheck-moe"
                 : kind == 3 ? "gradcheck-moe-cap"
                 : kind == 4 ? "gradcheck-moe-v3"
                 : kind == 5 ? "gradcheck-qwen-moe"
                             : "gradcheck-gpt-moe");
        m.layers = 3;
        m.experts = 4;
        m.top_k = 2;
        m.moe_ffn_hidden = 12;
        m.moe_shared_experts = 1;
        m.moe_shared_ffn_hidden = 8;
        m.moe_dense_layers = 1;
        m.moe_router_bias = kind == 4;
        m.moe_shared_gate = m.qkv_bias = m.qk_norm = kind == 5 || kind == 6;
        if (kind == 6) { /* biases on the experts; shared experts with biases do not run */
            m.moe_shared_experts = m.moe_shared_ffn_hidden = 0;
            m.moe_shared_gate = m.qk_norm = false;
        }
    }
    struct dp_layout l;
    dp_layout_default(&l);
    l.precision = DP_FP32;
    l.mbs = 2;
    l.gbs = 4; /* two micro-batches: accumulation is checked too */
    l.seq_len = 40;
    l.recompute = rc;
    if (kind == 3)
        l.moe_capacity = 1.0;
    struct dp_exec_opts o;
    dp_exec_opts_default(&o);
    o.data = tok;
    o.seed = 7;
    o.threads = 1;
    o.attention = attn;
    struct dp_err err = {0};
    struct dp_exec *ex;
    if (dp__exec_new(&m, &l, &o, &ex, &err)) {
        fprintf(stderr, "dp__exec_new: %s\n", err.msg);
        check_failures++;
        return 1;
    }
    /* Move the weights off their init (zero biases, unit norms) so every term counts. */
    /* The top-k choice is a step function of the router: a finite difference is only the
     * derivative where no token's K-th and (K+1)-th experts lie within the step of each
     * other. With seed 11 the GELU-expert model (kind 6) has such a token at
     * h.2.mlp.router.w[19] (numeric -0.6 against analytic -0.0019); seed 12 has none. */
    srand(kind == 6 ? 12 : 11);
    for (size_t i = 0; i < ex->nparams; i++)
        ex->params[i] += 0.05 * ((double)rand() / RAND_MAX - 0.5);
    loss_at(ex);
    double *g = malloc(ex->nparams * sizeof *g);
    memcpy(g, ex->grads, ex->nparams * sizeof *g);
    double worst = 0, gmax = 0, worst_big = 0, worst_abs = 0;
    const char *worst_name = "";
    const double eps = 1e-4;
    for (int s = 0; s < ex->nsegs; s++) {
        const struct dp_seg *sg = &ex->segs[s];
        size_t n = (size_t)(sg->t.rows * sg->t.cols), big = 0;
        if (sg->t.role == DP_ROLE_ROUTER_BIAS) {
            /* No gradient by construction (it only picks the experts: the loss is a step
             * function of it, and a finite difference measures the steps where a choice
             * flips); the gradient buffer must stay zero, so AdamW leaves it alone. */
            for (size_t i = 0; i < n; i++)
                CHECK(g[sg->off + i] == 0);
            continue;
        }
        for (size_t i = 1; i < n; i++)
            if (fabs(g[sg->off + i]) > fabs(g[sg->off + big]))
                big = i;
        /* Five elements per tensor without recompute; the recompute modes run the same
         * arithmetic through other code paths, so two elements each suffice there; the
         * MoE variants 4-6 (whose other tensors kind 2 covers) three (CI time). */
        size_t probe[5] = {big, n - 1, 0, n / 3, n / 2};
        int nprobe = rc != DP_RECOMPUTE_NONE || kind == 3 ? 2 : kind >= 4 ? 3 : 5;
        for (int k = 0; k < nprobe; k++) {
            size_t i = sg->off + probe[k];
            double w = ex->params[i], d[2];
            for (int e = 0; e < 2; e++) {
                double h = e ? eps / 2 : eps;
                ex->params[i] = w + h;
                double lp = loss_at(ex);
                ex->params[i] = w - h;
                double lm = loss_at(ex);
                d[e] = (lp - lm) / (2 * h);
            }
            ex->params[i] = w;
            /* Richardson: the O(h^2) terms of the two central differences cancel. */
            double num = (4 * d[1] - d[0]) / 3, ana = g[i];
            double diff = fabs(num - ana);
            double e = diff < 1e-10 ? 0 : diff / fmax(fabs(num), fabs(ana));
            gmax = fmax(gmax, fabs(ana));
            worst_abs = fmax(worst_abs, diff);
            if (fabs(ana) >= 1e-4)
                worst_big = fmax(worst_big, diff / fmax(fabs(num), fabs(ana)));
            if (e > worst) {
                worst = e;
                worst_name = sg->t.name;
            }
            if (e > 1e-6)
                fprintf(stderr, "%s %s[%zu]: analytic %.10g, numeric %.10g (rel %.3g)\n", m.name,
                        sg->t.name, probe[k], ana, num, e);
        }
    }
    printf("%s recompute=%s attention=%s: %d tensors, largest gradient %.3g; worst relative error "
           "%.3g "
           "(gradients >= 1e-4), worst absolute %.3g, worst over the 1e-10 floor %.3g%s%s\n",
           m.name, dp_recompute_name(rc), dp_exec_attn_name(attn), ex->nsegs, gmax, worst_big,
           worst_abs, worst, worst > 0 ? " in " : "", worst_name);
    free(g);
    dp__exec_free(ex);
    return worst;
}

int main(void)
{
    /* 2000 pseudo-random tokens below the vocabulary of 40. */
    struct dp_tokens tok = {0};
    tok.n = 2000;
    tok.tok = malloc((size_t)tok.n * sizeof *tok.tok);
    snprintf(tok.source, sizeof tok.source, "synthetic");
    uint32_t x = 12345;
    for (int64_t i = 0; i < tok.n; i++) {
        x = x * 1664525u + 1013904223u;
        tok.tok[i] = (uint16_t)((x >> 16) % 40);
    }
    for (int kind = 0; kind <= 6; kind++)
        for (int rc = DP_RECOMPUTE_NONE; rc <= DP_RECOMPUTE_FULL; rc++)
            /* MoE: selective recompute runs the MoE layer as without recompute; capacity
             * changes the routing only (CI time: the MoE cases cost the most). */
            if (kind < 2 || (kind == 2 && rc != DP_RECOMPUTE_SELECTIVE) ||
                (kind >= 3 && rc == DP_RECOMPUTE_NONE) || (kind == 5 && rc == DP_RECOMPUTE_FULL))
                CHECK(gradcheck(kind, (enum dp_recompute)rc, DP_EXEC_ATTN_MATH, &tok) < 1e-6);
    /* Flash attention (cpu_attention_flash.c): its backward rebuilds the probabilities
     * from the kept log-sum-exp; T = 40 spans a whole key tile and a partial one
     * (DP_FLASH_BK = 32) with the causal diagonal in each, and the Llama model's GQA
     * (4 query heads on 2 kv heads) shares kv heads. */
    for (int kind = 0; kind <= 1; kind++)
        for (int rc = DP_RECOMPUTE_NONE; rc <= DP_RECOMPUTE_SELECTIVE; rc++)
            CHECK(gradcheck(kind, (enum dp_recompute)rc, DP_EXEC_ATTN_FLASH, &tok) < 1e-6);
    free(tok.tok);
    dp_exec_finalize();
    return check_done("test_executor_gradcheck");
}
