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
 *    Sec. 4.2.3 (micro-batches in flight under 1F1B and interleaving) and
 *    Sec. 4.3 (embedding and output layer).
 *  - vocabulary padding to a multiple of 128 * tp (Megatron-LM
 *    --make-vocab-size-divisible-by).
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

void dp_mem_bytes_per_param(const struct dp_layout *l, int *param_b, int *grad_b, int *opt_b)
{
    int p = dp_precision_bytes(l->precision);
    bool mixed = l->precision != DP_FP32;
    *param_b = p;
    *grad_b = (l->grad_fp32 || !mixed) ? 4 : p;
    /* Adam: fp32 master weights (mixed precision only), fp32 momentum and variance.
     * SGD with momentum: master weights and momentum. */
    int master = mixed ? 4 : 0;
    *opt_b = master + (l->optimizer == DP_OPT_ADAM ? 8 : 4);
}

static int64_t ceil_div(int64_t a, int64_t b)
{
    return (a + b - 1) / b;
}

void dp_mem_states(int64_t n, int64_t shard, const struct dp_layout *l, struct dp_states *out)
{
    int pb, gb, ob;
    dp_mem_bytes_per_param(l, &pb, &gb, &ob);
    if (shard < 1)
        shard = 1;
    /* Shards are equal slices of the flat buffer, padded: ceil(n / shard) elements each. */
    int64_t sh = ceil_div(n, shard);
    out->params_bytes = (l->zero >= 3 ? sh : n) * pb;
    out->grads_bytes = (l->zero >= 2 ? sh : n) * gb;
    out->optimizer_bytes = (l->zero >= 1 ? sh : n) * ob;
}

int dp_act_layer(const struct dp_model *m, const struct dp_layout *l, struct dp_act_layer *out)
{
    memset(out, 0, sizeof *out);
    const int64_t t = l->tp;
    const int64_t u = (l->sp && t > 1) ? t : 1; /* sequence parallel splits the rest */
    const int64_t s = l->seq_len / l->cp;       /* context parallel: local sequence */
    const int64_t s_full = l->seq_len;
    const int64_t b = l->mbs, h = m->hidden, a = m->heads, g = m->kv_heads, d = m->head_dim;
    const int64_t p = dp_precision_bytes(l->precision);
    const int64_t sbh = s * b * h;
    const int64_t mask = m->dropout ? 1 : 0; /* dropout masks are 1 byte per element */

    /*
     * Attention block, Korthikanti Sec. 4.1 (11sbh + 5as^2b with 2-byte values, MHA):
     * QKV input 2sbh, Q and K 4sbh, softmax 2as^2b, softmax-dropout mask as^2b,
     * dropout output 2as^2b, V 2sbh, out-proj input 2sbh, dropout mask sbh.
     * Generalized: Q is a*d wide, K and V are g*d wide (GQA), values p bytes.
     */
    int64_t attn = p * sbh / u;          /* QKV input (norm output) */
    attn += p * s * b * (a + g) * d / t; /* Q, K */
    attn += p * s * b * g * d / t;       /* V */
    attn += p * s * b * a * d / t;       /* out-projection input */
    attn += mask * sbh / u;              /* output dropout mask */
    int64_t scores = 0;
    if (!l->flash_attn) {
        scores = p * a * s * s_full * b / t; /* softmax output */
        if (m->dropout)
            scores += (1 + p) * a * s * s_full * b / t; /* its dropout mask and output */
    } else {
        scores = 4 * a * s * b / t; /* flash attention keeps the fp32 log-sum-exp only */
    }
    /*
     * MLP block, Korthikanti Sec. 4.1 (19sbh for f = 4h, GELU): fc1 input 2sbh,
     * GELU input 8sbh, fc2 input 8sbh, dropout mask sbh. SwiGLU keeps both fc1
     * outputs (gate and up, 2f) and their product (f).
     */
    int64_t inter_mult = m->ffn == DP_FFN_SWIGLU ? 3 : 2;
    int64_t mlp = mask * sbh / u; /* dropout mask */
    if (m->experts > 0) {
        /* MoE: router input and fp32 logits, then each token's top_k copies are
         * dispatched to experts (balanced routing): the permuted tokens and the
         * expert intermediates scale with top_k. */
        int64_t k = m->top_k, f = m->moe_ffn_hidden;
        mlp += p * sbh / u;            /* router input (norm output) */
        mlp += 4 * s * b * m->experts; /* router logits, fp32 */
        mlp += p * s * b * k * h / u;  /* permuted tokens: expert fc1 input */
        mlp += inter_mult * p * s * b * k * f / t;
    } else {
        mlp += p * sbh / u; /* fc1 input (norm output) */
        mlp += inter_mult * p * s * b * m->ffn_hidden / t;
    }
    /* LayerNorm/RMSNorm inputs, Korthikanti's 4sbh: one per norm. With a single
     * norm (Falcon-7B's parallel attention) its output feeds QKV and fc1 alike. */
    int64_t norms = m->norms_per_layer * p * sbh / u;
    if (m->norms_per_layer == 1 && m->experts == 0)
        mlp -= p * sbh / u; /* shared norm output, counted once in attn */

    out->attn_bytes = attn + norms;
    out->scores_bytes = scores;
    out->mlp_bytes = mlp;
    out->full_bytes = out->attn_bytes + scores + mlp;
    switch (l->recompute) {
    case DP_RECOMPUTE_NONE: out->stored_bytes = out->full_bytes; break;
    case DP_RECOMPUTE_SELECTIVE:
        /* Korthikanti Sec. 5: recompute the core attention; the s^2 terms go. */
        out->stored_bytes = out->attn_bytes + mlp;
        break;
    case DP_RECOMPUTE_FULL:
        /* Only the layer input is kept (2sbh; split by t under SP). */
        out->stored_bytes = p * sbh / u;
        break;
    }
    return 0;
}

/* Parameters of one layer held by one GPU: dense part (sharded over dp*cp) and expert part
 * (sharded over the expert data-parallel group dp*cp/ep). */
static void layer_params(const struct dp_model *m, const struct dp_layout *l, int64_t *dense,
                         int64_t *expert)
{
    const int64_t t = l->tp, h = m->hidden, a = m->heads, g = m->kv_heads, d = m->head_dim;
    /* Column-parallel QKV and row-parallel output are split by t; the row-parallel
     * bias and the norms are replicated (Megatron RowParallelLinear adds the bias
     * after the reduction). */
    int64_t n = (h * a * d + 2 * h * g * d + a * d * h) / t;
    if (m->qkv_bias)
        n += (a + 2 * g) * d / t;
    if (m->out_bias)
        n += h;
    n += m->norms_per_layer * (m->norm == DP_NORM_LAYERNORM ? 2 * h : h);
    int64_t mult = m->ffn == DP_FFN_SWIGLU ? 3 : 2;
    int64_t fc1_bias = m->ffn == DP_FFN_SWIGLU ? 2 : 1;
    if (m->experts > 0) {
        int64_t f = m->moe_ffn_hidden;
        int64_t one = mult * h * f / t + (m->mlp_bias ? fc1_bias * f / t + h : 0);
        *expert = (m->experts / l->ep) * one;
        n += h * m->experts; /* router, replicated */
    } else {
        int64_t f = m->ffn_hidden;
        n += mult * h * f / t + (m->mlp_bias ? fc1_bias * f / t + h : 0);
        *expert = 0;
    }
    *dense = n;
}

/* Parameters held by one GPU of stage r with `layers` layers of ld dense and le expert
 * parameters each: the dense part gains the embedding (first stage), the final norm
 * and the LM head (last stage). */
static void stage_params(const struct dp_model *m, const struct dp_layout *l, int r, int layers,
                         int64_t ld, int64_t le, int64_t *dense, int64_t *expert)
{
    const int64_t t = l->tp, h = m->hidden;
    const int64_t vpad = dp_padded_vocab(m->vocab, l->tp);
    int64_t d = layers * ld;
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
    *expert = layers * le;
}

void dp_mem_stage_params(const struct dp_model *m, const struct dp_layout *l, int r, int64_t *dense,
                         int64_t *expert)
{
    int64_t ld, le;
    layer_params(m, l, &ld, &le);
    stage_params(m, l, r, dp_layout_stage_layers(l, m, r), ld, le, dense, expert);
}

/* What every stage of a layout shares, computed once per layout (the planner's memory
 * check runs for every layout it evaluates). */
struct mem_ctx {
    const struct dp_model *m;
    const struct dp_layout *l;
    const struct dp_act_layer *al;
    int64_t ld, le;      /* one layer's dense and expert parameters per GPU */
    int64_t emb_params;  /* the first stage's embedding (+ positions) */
    int64_t head_params; /* the last stage's final norm and LM head (or its copy) */
    int64_t emb_mask;    /* the embedding dropout mask per micro-batch in flight */
    int64_t head_act;    /* the last stage's output-layer activations */
    int64_t recv_bytes;  /* pipeline receive buffers */
    int64_t runtime;     /* runtime overhead */
    int64_t M, shard_d, shard_e;
    int pb, gb, ob;
};

static void mem_ctx_init(struct mem_ctx *x, const struct dp_model *m, const struct dp_cluster *cl,
                         const struct dp_layout *l, const struct dp_mem_opts *o,
                         const struct dp_act_layer *al)
{
    const int64_t t = l->tp, h = m->hidden;
    const int64_t u = (l->sp && t > 1) ? t : 1;
    const int64_t s = l->seq_len / l->cp, b = l->mbs;
    const int64_t p = dp_precision_bytes(l->precision);
    const int64_t vpad = dp_padded_vocab(m->vocab, l->tp);
    x->m = m;
    x->l = l;
    x->al = al;
    layer_params(m, l, &x->ld, &x->le);
    /* Parameters of the ends (stage_params): the vocabulary-parallel embedding; the
     * final norm and the LM head: its own weight when untied; when tied and pp > 1 the
     * last stage keeps a copy of the embedding, kept in sync by an all-reduce (Megatron
     * _allreduce_word_embedding_grads). */
    x->emb_params = vpad * h / t + (m->pos == DP_POS_LEARNED ? m->max_pos * h : 0);
    x->head_params = (m->norm == DP_NORM_LAYERNORM ? 2 * h : h) +
                     ((!m->tied_embeddings || l->pp > 1) ? vpad * h / t : 0);
    /* Korthikanti Sec. 4.3: the embedding's dropout mask, one per micro-batch in flight
     * in the first chunk; the final norm input and output-layer input (4sbh/t with SP),
     * and the fp32 logits kept by the cross entropy (4sbv/t); the last stage holds one
     * micro-batch at a time. */
    x->emb_mask = m->dropout ? s * b * h / u : 0;
    x->head_act = 2 * p * s * b * h / u + 4 * s * b * vpad / t;
    /* one forward-receive and one backward-receive activation buffer */
    x->recv_bytes = l->pp > 1 ? 2 * p * s * b * h / u : 0;
    x->runtime = o && o->overhead_bytes >= 0 ? o->overhead_bytes : cl->gpu.runtime_overhead_bytes;
    x->M = dp_layout_microbatches(l);
    x->shard_d = (int64_t)l->dp * l->cp;
    x->shard_e = x->shard_d / l->ep;
    dp_mem_bytes_per_param(l, &x->pb, &x->gb, &x->ob);
}

/* The activation terms of stage r with chunk layer counts nl. */
static void stage_activations(const struct mem_ctx *x, int r, const int *nl,
                              struct dp_mem_stage *out)
{
    /* Each micro-batch in flight in a chunk keeps its layers' activations (and, in the
     * embedding's chunk, the embedding dropout mask) until its backward; the schedule
     * says how many are in flight per chunk at the peak (Korthikanti Sec. 4.2.3 for
     * 1F1B and equal interleaved chunks; pipeline.c). */
    const struct dp_layout *l = x->l;
    const struct dp_act_layer *al = x->al;
    const int v = l->vpp;
    int64_t emb = out->has_embedding ? x->emb_mask : 0;
    int64_t w[DP_MAX_CHUNKS], live[DP_MAX_CHUNKS];
    for (int c = 0; c < v && c < DP_MAX_CHUNKS; c++)
        w[c] = nl[c] * al->stored_bytes + (c == 0 ? emb : 0);
    /* The split by kind needs the counts only where the embedding's mask is in it. */
    bool by_chunk = emb > 0 || out->layers == 0;
    int64_t peak = dp_pipe_peak_live(l->pp, v, x->M, r, w, by_chunk ? live : NULL);
    if (by_chunk) {
        for (int c = 0; c < v && c < DP_MAX_CHUNKS; c++)
            out->act_layers_bytes += live[c] * nl[c] * al->stored_bytes;
        out->act_embed_bytes = live[0] * emb;
    } else {
        out->act_layers_bytes = peak;
    }
    out->inflight = out->layers > 0 && al->stored_bytes > 0
                        ? (double)out->act_layers_bytes / ((double)out->layers * al->stored_bytes)
                        : (double)live[0];
    if (l->recompute == DP_RECOMPUTE_FULL && out->layers > 0)
        out->act_working_bytes = al->full_bytes;
    else if (l->recompute == DP_RECOMPUTE_SELECTIVE && out->layers > 0)
        out->act_working_bytes = al->scores_bytes;
    if (out->has_head)
        out->act_head_bytes = x->head_act;
    out->activations_bytes =
        out->act_layers_bytes + out->act_embed_bytes + out->act_head_bytes + out->act_working_bytes;
}

/* act: the stage's activation bytes when already known (the same layout at another
 * ZeRO stage), else NULL. */
static void stage_with(const struct mem_ctx *x, int r, const int64_t *act, struct dp_mem_stage *out)
{
    const struct dp_layout *l = x->l;
    const struct dp_model *m = x->m;
    memset(out, 0, sizeof *out);
    const int v = l->vpp;
    int nl[DP_MAX_CHUNKS];
    out->stage = r;
    for (int c = 0; c < v && c < DP_MAX_CHUNKS; c++) {
        nl[c] = l->nchunks > 0 ? l->chunk_layers[c * l->pp + r] : dp_layout_chunk_count(l, m, r, c);
        out->layers += nl[c];
    }
    out->has_embedding = r == 0;
    out->has_head = r == l->pp - 1;

    /* Parameters. */
    int64_t dense = out->layers * x->ld + (out->has_embedding ? x->emb_params : 0) +
                    (out->has_head ? x->head_params : 0);
    int64_t expert = out->layers * x->le;
    out->params = dense + expert;
    struct dp_states sd, se = {0, 0, 0};
    dp_mem_states(dense, x->shard_d, l, &sd);
    if (expert)
        dp_mem_states(expert, x->shard_e, l, &se);
    out->params_bytes = sd.params_bytes + se.params_bytes;
    out->grads_bytes = sd.grads_bytes + se.grads_bytes;
    out->optimizer_bytes = sd.optimizer_bytes + se.optimizer_bytes;

    /* Activations (ZeRO does not change them). */
    out->act_layer_bytes = x->al->stored_bytes;
    if (act)
        out->activations_bytes = *act;
    else
        stage_activations(x, r, nl, out);

    /* Communication buffers. */
    out->comm_bytes = x->recv_bytes;
    if (l->zero >= 3) /* parameters of the current and the prefetched layer, gathered */
        out->comm_bytes += 2 * (x->ld + x->le) * x->pb;
    if (l->zero >= 2) {
        /* DeepSpeed's reduce bucket (zero_optimization.reduce_bucket_size, default 5e8
         * elements) for gradients produced before they are reduce-scattered. */
        int64_t bucket = 500000000;
        int64_t n = out->params < bucket ? out->params : bucket;
        out->comm_bytes += n * x->gb;
    }
    out->runtime_bytes = x->runtime;
    out->other_bytes = out->comm_bytes + out->runtime_bytes;
    out->total_bytes = out->params_bytes + out->grads_bytes + out->optimizer_bytes +
                       out->activations_bytes + out->other_bytes;
}

void dp_mem_stage(const struct dp_model *m, const struct dp_cluster *cl, const struct dp_layout *l,
                  const struct dp_mem_opts *o, int r, struct dp_mem_stage *out)
{
    struct dp_act_layer al;
    dp_act_layer(m, l, &al);
    struct mem_ctx x;
    mem_ctx_init(&x, m, cl, l, o, &al);
    stage_with(&x, r, NULL, out);
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
    struct dp_act_layer al;
    dp_act_layer(m, l, &al);
    struct mem_ctx x;
    mem_ctx_init(&x, m, cl, l, o, &al);
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
    struct dp_act_layer al;
    dp_act_layer(m, l, &al);
    dp_mem_peak_with(m, cl, l, o, &al, peak_bytes, min_bytes, peak_stage);
}

void dp_mem_peak_with(const struct dp_model *m, const struct dp_cluster *cl,
                      const struct dp_layout *l, const struct dp_mem_opts *o,
                      const struct dp_act_layer *al, int64_t *peak_bytes, int64_t *min_bytes,
                      int *peak_stage)
{
    dp_mem_peak_reuse(m, cl, l, o, al, NULL, peak_bytes, min_bytes, peak_stage);
}

void dp_mem_peak_reuse(const struct dp_model *m, const struct dp_cluster *cl,
                       const struct dp_layout *l, const struct dp_mem_opts *o,
                       const struct dp_act_layer *al, struct dp_reuse *ru, int64_t *peak_bytes,
                       int64_t *min_bytes, int *peak_stage)
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
        bool eval = r == 0 || r == pp - 1 || r == 1 || r == pp - 2;
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
