/*
 * The fp32 CPU mode of the memory model: per-rank bytes of the CPU executor
 * (`dplan run --backend cpu`), pool by pool, from the buffer table in
 * executor/README.md. It does not include or call executor code; the
 * executor's tests run it and fail when the two disagree by more than 5%.
 *
 * Unlike the GPU model (memory.c) there is no precision, flash-attention or
 * runtime term: the CPU executor computes in fp32, keeps the attention
 * probabilities unless recompute says otherwise, and the pools count only
 * the tensors it allocates.
 */
#include "costmodel.h"

#include <string.h>

/* Elements of one layer's activations kept per micro-batch (README "act_slots"). */
static int64_t layer_kept(int64_t B, int64_t T, int64_t N, int64_t Nl, int64_t h, int64_t a,
                          int64_t qd, int64_t qkvd, int64_t f, int64_t F1, bool probs, bool only_x)
{
    if (only_x)
        return Nl * h;
    int64_t n = Nl * h;             /* x */
    n += Nl * h + 2 * Nl;           /* ln1 out, mean/rstd */
    n += N * qkvd;                  /* qkv */
    n += probs ? B * a * T * T : 0; /* attention probabilities */
    n += N * qd;                    /* context */
    n += Nl * h;                    /* x2 */
    n += Nl * h + 2 * Nl;           /* ln2 out, mean/rstd */
    n += N * F1 + N * f;            /* fc1 out, activation out */
    return n;
}

int dp_mem_estimate_cpu(const struct dp_model *m, const struct dp_layout *l,
                        struct dp_mem_report *out, struct dp_err *err)
{
    memset(out, 0, sizeof *out);
    int rc = dp_layout_validate(l, m, 0, err);
    if (rc)
        return rc;
    if (l->pp > DP_MAX_PP)
        return dp_err_set(err, DP_EINFEASIBLE, "pp=%d exceeds the supported %d stages", l->pp,
                          DP_MAX_PP);
    const int64_t t = l->tp, u = (l->sp && t > 1) ? t : 1;
    const int64_t B = l->mbs, T = l->seq_len, N = B * T, Nl = N / u;
    const int64_t h = m->hidden, d = m->head_dim;
    const int64_t a = m->heads / t, g = m->kv_heads / t;
    const int64_t qd = a * d, kvd = g * d, qkvd = qd + 2 * kvd;
    const int64_t f = m->ffn_hidden / t, F1 = m->ffn == DP_FFN_SWIGLU ? 2 * f : f;
    const int64_t Vl = dp_padded_vocab(m->vocab, l->tp) / t;
    const int64_t M = dp_layout_microbatches(l);
    const int64_t scores = B * a * T * T;
    const bool ln = m->norm == DP_NORM_LAYERNORM;
    const int64_t norm = ln ? 2 * h : h;
    const int64_t E = 4; /* bytes per element */

    /* Parameters of one layer. */
    int64_t layer = 2 * norm + qkvd * h + h * qd + F1 * h + h * f;
    if (m->qkv_bias)
        layer += qkvd;
    if (m->out_bias)
        layer += h;
    if (m->mlp_bias)
        layer += F1 + h;

    out->nstages = l->pp;
    out->microbatches = M;
    out->fits = true;
    for (int r = 0; r < l->pp; r++) {
        struct dp_mem_stage *st = &out->stage[r];
        bool first = r == 0, last = r == l->pp - 1;
        st->stage = r;
        st->layers = dp_layout_stage_layers(l, m, r);
        st->has_embedding = first;
        st->has_head = last;

        int64_t P = st->layers * layer;
        if (first)
            P += Vl * h + (m->pos == DP_POS_LEARNED ? m->max_pos * h : 0);
        if (last)
            P += norm + ((!m->tied_embeddings || l->pp > 1) ? Vl * h : 0);
        st->params = P;
        int64_t flat = P, opt = 2 * P;
        if (l->zero >= 1) {
            flat = (P + l->dp - 1) / l->dp * l->dp;
            opt = 2 * (flat / l->dp);
        }
        st->params_bytes = E * flat;
        st->grads_bytes = E * flat;
        st->optimizer_bytes = E * opt;

        int64_t inflight = l->pp - r < M ? l->pp - r : M;
        st->inflight = (double)inflight;
        int64_t kept =
            layer_kept(B, T, N, Nl, h, a, qd, qkvd, f, F1, l->recompute == DP_RECOMPUTE_NONE,
                       l->recompute == DP_RECOMPUTE_FULL);
        st->act_layer_bytes = E * kept;
        int64_t slot = st->layers * kept;
        slot += (first ? N : 0) + (last ? N : 0); /* token ids */
        st->act_layers_bytes = E * inflight * slot;
        if (last)
            st->act_head_bytes = E * (2 * Nl * h + 2 * Nl + N * Vl + 4 * N);
        int64_t work = 2 * N * h + (u > 1 ? N * h : 0) + Nl * h;
        /* dfc1 only for SwiGLU: GELU's input gradient overwrites dact */
        work += N * qkvd + N * qd + scores + (m->ffn == DP_FFN_SWIGLU ? N * F1 : 0) + N * f;
        if (l->recompute == DP_RECOMPUTE_SELECTIVE)
            work += scores;
        if (l->recompute == DP_RECOMPUTE_FULL)
            work += layer_kept(B, T, N, Nl, h, a, qd, qkvd, f, F1, true, false) - Nl * h;
        if (m->pos == DP_POS_ROPE)
            work += T * d;
        st->act_working_bytes = E * work;
        st->activations_bytes = st->act_layers_bytes + st->act_head_bytes + st->act_working_bytes;
        st->comm_bytes = (l->pp > 1 && !last) ? E * Nl * h : 0;
        st->runtime_bytes = 0;
        st->other_bytes = st->comm_bytes;
        st->total_bytes = st->params_bytes + st->grads_bytes + st->optimizer_bytes +
                          st->activations_bytes + st->other_bytes;
        if (r == 0 || st->total_bytes > out->peak_bytes) {
            out->peak_bytes = st->total_bytes;
            out->peak_stage = r;
        }
        if (r == 0 || st->total_bytes < out->min_bytes)
            out->min_bytes = st->total_bytes;
    }
    return 0;
}
