/*
 * The parameter tensors of a model under a layout (ckpt.h): their global
 * names and shapes, and the slice of each that a pipeline stage's TP rank
 * holds. Every file of a run names tensors this way (the checkpoints'
 * rank files and manifest, model.safetensors, exports), and the executor
 * lays out its flat parameter buffer in this order.
 *
 * Tensor parallelism follows Megatron-LM (Shoeybi et al. 2019, Sec. 3;
 * megatron/core/tensor_parallel/layers.py): QKV and MLP-in are
 * column-parallel (each rank holds heads/tp heads and ffn/tp rows),
 * attention-out and MLP-out row-parallel (columns), the embedding and the
 * LM head split over the vocabulary padded to a multiple of 128 tp.
 */
#include "ckpt.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct table {
    struct dp_ckpt_slice *s;
    int n, cap;
    bool failed;
    int expert; /* the routed expert the slices being added belong to, or -1 */
};

static void add(struct table *t, const struct dp_ckpt_slice *d)
{
    if (t->failed)
        return;
    if (t->n == t->cap) {
        int cap = t->cap ? 2 * t->cap : 64;
        struct dp_ckpt_slice *s = realloc(t->s, (size_t)cap * sizeof *s);
        if (!s) {
            t->failed = true;
            return;
        }
        t->s = s;
        t->cap = cap;
    }
    struct dp_ckpt_slice *s = &t->s[t->n++];
    *s = *d;
    s->expert = t->expert;
    if (!s->out_rows)
        s->out_rows = s->grows;
}

/* A replicated vector (norm weight or bias, row-parallel bias). */
static void vec(struct table *t, const char *name, enum dp_ckpt_role role, int layer, int64_t n)
{
    struct dp_ckpt_slice d = {.role = role,
                              .layer = layer,
                              .rows = n,
                              .cols = 1,
                              .grows = n,
                              .gcols = 1,
                              .replicated = true};
    snprintf(d.name, sizeof d.name, "%s", name);
    add(t, &d);
}

/* Rows [r0, r0 + rows) of a [grows, cols] tensor (column-parallel weight or bias). */
static void rows_of(struct table *t, const char *name, enum dp_ckpt_role role, int layer,
                    int64_t rows, int64_t cols, int64_t grows, int64_t r0)
{
    struct dp_ckpt_slice d = {.role = role,
                              .layer = layer,
                              .rows = rows,
                              .cols = cols,
                              .grows = grows,
                              .gcols = cols,
                              .r0 = r0};
    snprintf(d.name, sizeof d.name, "%s", name);
    add(t, &d);
}

/* Columns [c0, c0 + cols) of a [rows, gcols] tensor (row-parallel weight). */
static void cols_of(struct table *t, const char *name, enum dp_ckpt_role role, int layer,
                    int64_t rows, int64_t cols, int64_t gcols, int64_t c0)
{
    struct dp_ckpt_slice d = {.role = role,
                              .layer = layer,
                              .rows = rows,
                              .cols = cols,
                              .grows = rows,
                              .gcols = gcols,
                              .c0 = c0};
    snprintf(d.name, sizeof d.name, "%s", name);
    add(t, &d);
}

static void vocab_table(struct table *t, const char *name, enum dp_ckpt_role role,
                        const struct dp_model *m, int tp, int tp_rank, bool tied_copy)
{
    int64_t Vp = dp_padded_vocab(m->vocab, tp), Vl = Vp / tp;
    struct dp_ckpt_slice d = {.role = role,
                              .layer = -1,
                              .rows = Vl,
                              .cols = m->hidden,
                              .grows = Vp,
                              .gcols = m->hidden,
                              .r0 = tp_rank * Vl,
                              .out_rows = m->vocab,
                              .tied_copy = tied_copy};
    snprintf(d.name, sizeof d.name, "%s", name);
    add(t, &d);
}

/*
 * A MoE layer's MLP: the router Linear(h, E) without bias (Mixtral, Qwen-MoE), replicated
 * on every rank as Megatron's TopKRouter; the routed experts [e0, e1), each an MLP of
 * moe_ffn_hidden split over the etp ranks of an expert tensor group (etr: the rank's place
 * there) as the dense MLP over TP (Megatron-Core's expert tensor parallelism), in
 * the order every expert's w1 (w_gate, w_up), then every expert's w2, so that the local
 * experts' fc1 and fc2 weights each lie back to back; then the shared experts as one
 * dense MLP of shared * shared_ffn (DeepSeekMoE's n_shared_experts x
 * moe_intermediate_size, Qwen2-MoE's shared_expert).
 * Options of the model: DeepSeek-V3's score-correction bias [E] after the router weight
 * (HF gate.e_score_correction_bias); with mlp_bias each local expert's fc1 biases, then
 * each one's fc2 bias [h] (replicated over TP: added once after the sum), after the
 * experts' weights so that those stay back to back; Qwen2-MoE's shared_expert_gate
 * Linear(h, 1) [1, h] (replicated) after the shared experts.
 */
static void moe_table(struct table *t, const struct dp_model *m, int L, int tp, int64_t tr, int etp,
                      int64_t etr, int e0, int e1)
{
    char nm[64];
    const int64_t h = m->hidden, F = m->moe_ffn_hidden, f = F / etp;
    const bool glu = m->ffn != DP_FFN_GELU;
    snprintf(nm, sizeof nm, "h.%d.mlp.router.w", L);
    struct dp_ckpt_slice r = {.role = DP_ROLE_ROUTER,
                              .layer = L,
                              .rows = m->experts,
                              .cols = h,
                              .grows = m->experts,
                              .gcols = h,
                              .replicated = true};
    snprintf(r.name, sizeof r.name, "%s", nm);
    add(t, &r);
    if (m->moe_router_bias) {
        snprintf(nm, sizeof nm, "h.%d.mlp.router.bias", L);
        vec(t, nm, DP_ROLE_ROUTER_BIAS, L, m->experts);
    }
    for (int j = e0; j < e1; j++) {
        t->expert = j;
        snprintf(nm, sizeof nm, "h.%d.mlp.experts.%d.%s", L, j, glu ? "w_gate" : "w1");
        rows_of(t, nm, DP_ROLE_EXP_W1, L, f, h, F, etr * f);
        if (glu) {
            snprintf(nm, sizeof nm, "h.%d.mlp.experts.%d.w_up", L, j);
            rows_of(t, nm, DP_ROLE_EXP_W1_UP, L, f, h, F, etr * f);
        }
    }
    for (int j = e0; j < e1; j++) {
        t->expert = j;
        snprintf(nm, sizeof nm, "h.%d.mlp.experts.%d.w2", L, j);
        cols_of(t, nm, DP_ROLE_EXP_W2, L, h, f, F, etr * f);
    }
    for (int j = e0; m->mlp_bias && j < e1; j++) {
        t->expert = j;
        snprintf(nm, sizeof nm, "h.%d.mlp.experts.%d.%s", L, j, glu ? "b_gate" : "b1");
        rows_of(t, nm, DP_ROLE_EXP_B1, L, f, 1, F, tr * f);
        if (glu) {
            snprintf(nm, sizeof nm, "h.%d.mlp.experts.%d.b_up", L, j);
            rows_of(t, nm, DP_ROLE_EXP_B1_UP, L, f, 1, F, tr * f);
        }
    }
    for (int j = e0; m->mlp_bias && j < e1; j++) {
        t->expert = j;
        snprintf(nm, sizeof nm, "h.%d.mlp.experts.%d.b2", L, j);
        vec(t, nm, DP_ROLE_EXP_B2, L, h);
    }
    t->expert = -1;
    if (m->moe_shared_experts > 0) {
        const int64_t S = m->moe_shared_experts * m->moe_shared_ffn_hidden, s = S / tp;
        snprintf(nm, sizeof nm, "h.%d.mlp.shared.%s", L, glu ? "w_gate" : "w1");
        rows_of(t, nm, DP_ROLE_SH_W1, L, s, h, S, tr * s);
        if (glu) {
            snprintf(nm, sizeof nm, "h.%d.mlp.shared.w_up", L);
            rows_of(t, nm, DP_ROLE_SH_W1_UP, L, s, h, S, tr * s);
        }
        snprintf(nm, sizeof nm, "h.%d.mlp.shared.w2", L);
        cols_of(t, nm, DP_ROLE_SH_W2, L, h, s, S, tr * s);
        if (m->moe_shared_gate) {
            snprintf(nm, sizeof nm, "h.%d.mlp.shared.gate", L);
            struct dp_ckpt_slice g = {.role = DP_ROLE_SH_GATE,
                                      .layer = L,
                                      .rows = 1,
                                      .cols = h,
                                      .grows = 1,
                                      .gcols = h,
                                      .replicated = true};
            snprintf(g.name, sizeof g.name, "%s", nm);
            add(t, &g);
        }
    }
}

/* Global index of the stage's i-th layer: with interleaving the stage holds model chunks
 * stage, stage + pp, ... (dp_layout_chunk_layers), its layers in model order. */
static int stage_layer(const struct dp_layout *l, const struct dp_model *m, int stage, int i)
{
    const int nch = l->vpp > 1 ? l->vpp : 1;
    for (int c = 0; c < nch; c++) {
        int first = 0, n = 0;
        dp_layout_chunk_layers(l, m, stage, c, &first, &n);
        if (i < n)
            return first + i;
        i -= n;
    }
    return -1;
}

int dp_ckpt_stage_slices(const struct dp_model *m, const struct dp_layout *l, int stage,
                         int tp_rank, struct dp_ckpt_slice **out, int *n, struct dp_err *err)
{
    return dp_ckpt_stage_slices_ep(m, l, stage, tp_rank, -1, 0, out, n, err);
}

int dp_ckpt_stage_slices_ep(const struct dp_model *m, const struct dp_layout *l, int stage,
                            int tp_rank, int ep_rank, int etp_rank, struct dp_ckpt_slice **out,
                            int *n, struct dp_err *err)
{
    *out = NULL;
    *n = 0;
    struct table t = {.expert = -1};
    const int ep = ep_rank >= 0 && l->ep > 1 ? l->ep : 1;
    const int e0 = ep_rank >= 0 ? (int)(ep_rank * m->experts / ep) : 0;
    const int e1 = ep_rank >= 0 ? (int)((ep_rank + 1) * m->experts / ep) : (int)m->experts;
    const int tp = l->tp;
    const bool first = stage == 0, last = stage == dp_layout_head_rank(l); /* DualPipeV: 0 */
    const bool ln = m->norm == DP_NORM_LAYERNORM;
    const int64_t h = m->hidden, d = m->head_dim, tr = tp_rank;
    const int64_t qd = m->heads / tp * d, kvd = m->kv_heads / tp * d, f = m->ffn_hidden / tp;
    const int64_t F = m->ffn_hidden;
    const int nlayers = dp_layout_stage_layers(l, m, stage);
    if (first) {
        vocab_table(&t, "wte", DP_ROLE_WTE, m, tp, tp_rank, false);
        if (m->pos == DP_POS_LEARNED) {
            struct dp_ckpt_slice sd = {.name = "wpe",
                                       .role = DP_ROLE_WPE,
                                       .layer = -1,
                                       .rows = m->max_pos,
                                       .cols = h,
                                       .grows = m->max_pos,
                                       .gcols = h,
                                       .replicated = true};
            add(&t, &sd);
        }
    }
    char nm[48];
    for (int i = 0; i < nlayers; i++) {
        const int L = stage_layer(l, m, stage, i);
#define NAME(fmt) (snprintf(nm, sizeof nm, "h.%d." fmt, L), nm)
        vec(&t, NAME("ln1.w"), DP_ROLE_LN1_W, L, h);
        if (ln)
            vec(&t, NAME("ln1.b"), DP_ROLE_LN1_B, L, h);
        /* Local QKV fuses as [q heads of this rank; k heads; v heads] x h. */
        rows_of(&t, NAME("attn.wq"), DP_ROLE_WQ, L, qd, h, m->heads * d, tr * qd);
        rows_of(&t, NAME("attn.wk"), DP_ROLE_WK, L, kvd, h, m->kv_heads * d, tr * kvd);
        rows_of(&t, NAME("attn.wv"), DP_ROLE_WV, L, kvd, h, m->kv_heads * d, tr * kvd);
        if (m->qkv_bias) {
            rows_of(&t, NAME("attn.bq"), DP_ROLE_BQ, L, qd, 1, m->heads * d, tr * qd);
            rows_of(&t, NAME("attn.bk"), DP_ROLE_BK, L, kvd, 1, m->kv_heads * d, tr * kvd);
            rows_of(&t, NAME("attn.bv"), DP_ROLE_BV, L, kvd, 1, m->kv_heads * d, tr * kvd);
        }
        if (m->qk_norm) { /* HF q_norm, k_norm: RMSNorm(head_dim) */
            vec(&t, NAME("attn.q_norm.w"), DP_ROLE_QNORM, L, d);
            vec(&t, NAME("attn.k_norm.w"), DP_ROLE_KNORM, L, d);
        }
        cols_of(&t, NAME("attn.wo"), DP_ROLE_WO, L, h, qd, m->heads * d, tr * qd);
        if (m->out_bias)
            vec(&t, NAME("attn.bo"), DP_ROLE_BO, L, h);
        vec(&t, NAME("ln2.w"), DP_ROLE_LN2_W, L, h);
        if (ln)
            vec(&t, NAME("ln2.b"), DP_ROLE_LN2_B, L, h);
        if (dp_model_layer_kind(m, L) == DP_LAYER_MOE) {
            moe_table(&t, m, L, tp, tr, dp_layout_etp(l), etp_rank, e0, e1);
            continue;
        }
        if (m->ffn == DP_FFN_GELU) {
            rows_of(&t, NAME("mlp.w1"), DP_ROLE_W1, L, f, h, F, tr * f);
            if (m->mlp_bias)
                rows_of(&t, NAME("mlp.b1"), DP_ROLE_B1, L, f, 1, F, tr * f);
        } else {
            /* Local [gate; up] fuse, so that one GEMM gives the SwiGLU input. */
            rows_of(&t, NAME("mlp.w_gate"), DP_ROLE_W1, L, f, h, F, tr * f);
            rows_of(&t, NAME("mlp.w_up"), DP_ROLE_W1_UP, L, f, h, F, tr * f);
            if (m->mlp_bias) {
                rows_of(&t, NAME("mlp.b_gate"), DP_ROLE_B1, L, f, 1, F, tr * f);
                rows_of(&t, NAME("mlp.b_up"), DP_ROLE_B1_UP, L, f, 1, F, tr * f);
            }
        }
        cols_of(&t, NAME("mlp.w2"), DP_ROLE_W2, L, h, f, F, tr * f);
        if (m->mlp_bias)
            vec(&t, NAME("mlp.b2"), DP_ROLE_B2, L, h);
#undef NAME
    }
    if (last) {
        vec(&t, "lnf.w", DP_ROLE_LNF_W, -1, h);
        if (ln)
            vec(&t, "lnf.b", DP_ROLE_LNF_B, -1, h);
        if (!m->tied_embeddings)
            vocab_table(&t, "lm_head", DP_ROLE_HEAD, m, tp, tp_rank, false);
        else if (!first)
            /* The last stage's copy of the tied embedding, kept equal to the first stage's
             * by the embedding group's all-reduce of its gradient. */
            vocab_table(&t, "wte", DP_ROLE_WTE, m, tp, tp_rank, true);
    }
    if (t.failed) {
        free(t.s);
        return dp_err_set(err, DP_ENOMEM, "out of memory");
    }
    *out = t.s;
    *n = t.n;
    return 0;
}

void dp_ckpt_slice_key(const struct dp_ckpt_slice *s, char *buf, size_t cap)
{
    snprintf(buf, cap, "%s%s", s->name, s->tied_copy ? ".tied_copy" : "");
}

bool dp_ckpt_slice_split(const struct dp_ckpt_slice *s)
{
    return s->rows < s->grows || s->cols < s->gcols;
}
