/*
 * Models: dplan's own model.json, parameter counting, and serialization.
 * Hugging Face config.json reading lives in model_hf.c.
 *
 * Parameter counts are exact sums over the weight tensors of the published
 * architectures (no padding): checked against published totals in
 * tests/unit/test_core_model.c.
 */
#include "core.h"
#include "internal.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

static const char *const ffn_names[] = {"gelu", "swiglu"};
static const char *const norm_names[] = {"layernorm", "rmsnorm"};
static const char *const pos_names[] = {"rope", "learned", "alibi"};

const char *dp_ffn_name(enum dp_ffn_kind k)
{
    return ffn_names[k];
}
const char *dp_norm_name(enum dp_norm_kind k)
{
    return norm_names[k];
}
const char *dp_pos_name(enum dp_pos_kind k)
{
    return pos_names[k];
}

static void model_defaults(struct dp_model *m)
{
    memset(m, 0, sizeof *m);
    m->norms_per_layer = 2;
    m->ffn = DP_FFN_GELU;
    m->norm = DP_NORM_LAYERNORM;
    m->pos = DP_POS_ROPE;
}

/* 10^7 layers or a 10^7-wide matrix are far beyond any real model; the bounds keep the
 * arithmetic below (products of three sizes) inside int64. */
#define MAXDIM 10000000

/* "where: field" for messages about a field of the object jr points at. */
static void field_path(const struct dp_jr *jr, const char *key, char *out, size_t cap)
{
    snprintf(out, cap, "%s%s%s", jr->path, jr->path[0] ? "." : "", key);
}

static int moe_from_json(struct dp_jr *jr, const cJSON *moe, struct dp_model *m)
{
    static const char *const moe_keys[] = {"experts",
                                           "top_k",
                                           "ffn_hidden",
                                           "shared_experts",
                                           "shared_ffn_hidden",
                                           "shared_gate",
                                           "router_bias",
                                           "first_dense_layers",
                                           NULL};
    size_t old = dp_jr_push(jr, "moe", 0);
    if (dp_jr_expect_object(jr, moe,
                            "an object {experts, top_k[, ffn_hidden, shared_experts, "
                            "shared_ffn_hidden, shared_gate, router_bias, first_dense_layers]}") ||
        dp_jr_check_keys(jr, moe, moe_keys) ||
        dp_jr_int(jr, moe, "experts", true, 1, 100000, &m->experts) ||
        dp_jr_int(jr, moe, "top_k", true, 1, 100000, &m->top_k) ||
        dp_jr_int(jr, moe, "ffn_hidden", false, 1, MAXDIM, &m->moe_ffn_hidden) ||
        dp_jr_int(jr, moe, "shared_experts", false, 0, 1024, &m->moe_shared_experts) ||
        dp_jr_int(jr, moe, "shared_ffn_hidden", false, 1, MAXDIM, &m->moe_shared_ffn_hidden) ||
        dp_jr_bool(jr, moe, "shared_gate", false, &m->moe_shared_gate) ||
        dp_jr_bool(jr, moe, "router_bias", false, &m->moe_router_bias) ||
        dp_jr_int(jr, moe, "first_dense_layers", false, 0, m->layers - 1, &m->moe_dense_layers))
        return jr->err->code;
    char w[256];
    if (m->moe_shared_experts == 0 && (m->moe_shared_ffn_hidden || m->moe_shared_gate)) {
        field_path(jr, m->moe_shared_gate ? "shared_gate" : "shared_ffn_hidden", w, sizeof w);
        return dp_err_set(jr->err, DP_EINVAL,
                          "%s: %s: needs shared_experts >= 1 (there is no shared expert)", jr->file,
                          w);
    }
    dp_jr_pop(jr, old);
    if (m->moe_ffn_hidden == 0)
        m->moe_ffn_hidden = m->ffn_hidden;
    if (m->moe_shared_experts > 0 && m->moe_shared_ffn_hidden == 0)
        m->moe_shared_ffn_hidden = m->moe_ffn_hidden;
    return 0;
}

/* Multi-head latent attention: {q_lora_rank?, kv_lora_rank, qk_nope_head_dim,
 * qk_rope_head_dim, v_head_dim}, the names of DeepSeek's config.json. */
static int mla_from_json(struct dp_jr *jr, const cJSON *obj, const cJSON *mla, struct dp_model *m)
{
    static const char *const mla_keys[] = {"q_lora_rank",      "kv_lora_rank", "qk_nope_head_dim",
                                           "qk_rope_head_dim", "v_head_dim",   NULL};
    char w[256];
    if (cJSON_GetObjectItemCaseSensitive(obj, "head_dim") ||
        cJSON_GetObjectItemCaseSensitive(obj, "kv_heads")) {
        field_path(jr, cJSON_GetObjectItemCaseSensitive(obj, "head_dim") ? "head_dim" : "kv_heads",
                   w, sizeof w);
        return dp_err_set(jr->err, DP_EINVAL,
                          "%s: %s: not allowed with mla (heads are qk_nope_head_dim + "
                          "qk_rope_head_dim wide, one K/V head per query head)",
                          jr->file, w);
    }
    if (m->qkv_bias || m->qk_norm) {
        field_path(jr, m->qkv_bias ? "qkv_bias" : "qk_norm", w, sizeof w);
        return dp_err_set(jr->err, DP_EINVAL, "%s: %s: not supported with mla", jr->file, w);
    }
    size_t old = dp_jr_push(jr, "mla", 0);
    if (dp_jr_expect_object(jr, mla,
                            "an object {q_lora_rank, kv_lora_rank, qk_nope_head_dim, "
                            "qk_rope_head_dim, v_head_dim}") ||
        dp_jr_check_keys(jr, mla, mla_keys) ||
        dp_jr_int(jr, mla, "q_lora_rank", false, 0, MAXDIM, &m->mla_q_rank) ||
        dp_jr_int(jr, mla, "kv_lora_rank", true, 1, MAXDIM, &m->mla_kv_rank) ||
        dp_jr_int(jr, mla, "qk_nope_head_dim", true, 1, MAXDIM, &m->mla_nope_dim) ||
        dp_jr_int(jr, mla, "qk_rope_head_dim", true, 1, MAXDIM, &m->mla_rope_dim) ||
        dp_jr_int(jr, mla, "v_head_dim", true, 1, MAXDIM, &m->mla_v_dim))
        return jr->err->code;
    dp_jr_pop(jr, old);
    m->mla = true;
    m->head_dim = m->mla_nope_dim + m->mla_rope_dim;
    m->kv_heads = m->heads;
    return 0;
}

int dp_model_from_json(struct dp_jr *jr, const cJSON *obj, struct dp_model *m)
{
    static const char *const keys[] = {"name",
                                       "layers",
                                       "hidden",
                                       "heads",
                                       "kv_heads",
                                       "head_dim",
                                       "ffn_hidden",
                                       "ffn",
                                       "vocab",
                                       "seq_len",
                                       "tied_embeddings",
                                       "norm",
                                       "position",
                                       "max_position",
                                       "qkv_bias",
                                       "out_bias",
                                       "mlp_bias",
                                       "norms_per_layer",
                                       "dropout",
                                       "moe",
                                       "qk_norm",
                                       "qk_norm_full",
                                       "mla",
                                       "sliding_window",
                                       "sliding_window_layers",
                                       "attention_sinks",
                                       "mtp_layers",
                                       "source",
                                       "notes",
                                       NULL};
    /* The ten required fields, all reported at once when several are missing. */
    static const char *const required[] = {
        "name",  "layers",  "hidden",          "heads", "ffn_hidden", "ffn",
        "vocab", "seq_len", "tied_embeddings", "norm",  NULL};
    model_defaults(m);
    if (dp_jr_expect_object(jr, obj, "a model object") || dp_jr_check_keys(jr, obj, keys) ||
        dp_jr_require_all(jr, obj, required))
        return jr->err->code;
    int ffn = 0, norm = 0, pos = 0;
    int64_t npl = 2;
    snprintf(m->format, sizeof m->format, "dplan");
    if (dp_jr_string(jr, obj, "name", true, m->name, sizeof m->name) ||
        dp_jr_int(jr, obj, "layers", true, 1, 100000, &m->layers) ||
        dp_jr_int(jr, obj, "hidden", true, 1, MAXDIM, &m->hidden) ||
        dp_jr_int(jr, obj, "heads", true, 1, MAXDIM, &m->heads))
        return jr->err->code;
    m->kv_heads = m->heads;
    if (dp_jr_int(jr, obj, "kv_heads", false, 1, MAXDIM, &m->kv_heads) ||
        dp_jr_int(jr, obj, "head_dim", false, 1, MAXDIM, &m->head_dim) ||
        dp_jr_int(jr, obj, "ffn_hidden", true, 1, MAXDIM, &m->ffn_hidden) ||
        dp_jr_enum(jr, obj, "ffn", true, ffn_names, 2, &ffn) ||
        dp_jr_int(jr, obj, "vocab", true, 1, MAXDIM, &m->vocab) ||
        dp_jr_int(jr, obj, "seq_len", true, 1, MAXDIM, &m->seq_len) ||
        dp_jr_bool(jr, obj, "tied_embeddings", true, &m->tied_embeddings) ||
        dp_jr_enum(jr, obj, "norm", true, norm_names, 2, &norm) ||
        dp_jr_enum(jr, obj, "position", false, pos_names, 3, &pos) ||
        dp_jr_int(jr, obj, "max_position", false, 1, MAXDIM, &m->max_pos) ||
        dp_jr_bool(jr, obj, "qkv_bias", false, &m->qkv_bias) ||
        dp_jr_bool(jr, obj, "out_bias", false, &m->out_bias) ||
        dp_jr_bool(jr, obj, "mlp_bias", false, &m->mlp_bias) ||
        dp_jr_int(jr, obj, "norms_per_layer", false, 1, 4, &npl) ||
        dp_jr_bool(jr, obj, "dropout", false, &m->dropout) ||
        dp_jr_bool(jr, obj, "qk_norm", false, &m->qk_norm) ||
        dp_jr_bool(jr, obj, "qk_norm_full", false, &m->qk_norm_full) ||
        dp_jr_bool(jr, obj, "attention_sinks", false, &m->attn_sinks) ||
        dp_jr_int(jr, obj, "mtp_layers", false, 0, DP_MAX_MTP, &m->mtp_layers) ||
        dp_jr_int(jr, obj, "sliding_window", false, 1, MAXDIM, &m->window) ||
        dp_jr_int(jr, obj, "sliding_window_layers", false, 0, m->layers, &m->window_layers))
        return jr->err->code;
    if (m->qk_norm_full && !m->qk_norm) {
        char w[256];
        field_path(jr, "qk_norm_full", w, sizeof w);
        return dp_err_set(jr->err, DP_EINVAL,
                          "%s: %s: needs qk_norm true (it says how wide the q/k norms are)",
                          jr->file, w);
    }
    if (cJSON_GetObjectItemCaseSensitive(obj, "sliding_window_layers") && m->window == 0) {
        char w[256];
        field_path(jr, "sliding_window_layers", w, sizeof w);
        return dp_err_set(jr->err, DP_EINVAL,
                          "%s: %s: needs sliding_window (the window's width in tokens)", jr->file,
                          w);
    }
    if (m->window > 0 && !cJSON_GetObjectItemCaseSensitive(obj, "sliding_window_layers"))
        m->window_layers = m->layers;
    snprintf(m->seq_len_from, sizeof m->seq_len_from, "the model's seq_len");
    m->ffn = (enum dp_ffn_kind)ffn;
    m->norm = (enum dp_norm_kind)norm;
    m->pos = (enum dp_pos_kind)pos;
    m->norms_per_layer = (int)npl;
    if (m->head_dim == 0 && m->hidden % m->heads == 0)
        m->head_dim = m->hidden / m->heads;
    if (m->pos == DP_POS_LEARNED && m->max_pos == 0) {
        char w[256];
        snprintf(w, sizeof w, "%s%smax_position", jr->path, jr->path[0] ? "." : "");
        return dp_err_set(jr->err, DP_EINVAL,
                          "%s: %s: missing required field (expected integer >= 1 when "
                          "position is \"learned\")",
                          jr->file, w);
    }
    if (m->pos != DP_POS_LEARNED)
        m->max_pos = 0;
    const cJSON *moe = cJSON_GetObjectItemCaseSensitive(obj, "moe");
    if (moe && !cJSON_IsNull(moe) && moe_from_json(jr, moe, m))
        return jr->err->code;
    const cJSON *mla = cJSON_GetObjectItemCaseSensitive(obj, "mla");
    if (mla && !cJSON_IsNull(mla) && mla_from_json(jr, obj, mla, m))
        return jr->err->code;
    return dp_model_validate(m, jr->file, jr->err);
}

int dp_model_validate(const struct dp_model *m, const char *file, struct dp_err *err)
{
    if (m->layers < 1 || m->hidden < 1 || m->heads < 1 || m->vocab < 1 || m->ffn_hidden < 1 ||
        m->seq_len < 1)
        return dp_err_set(err, DP_EINVAL, "%s: model sizes must be positive", file);
    if (m->head_dim == 0)
        return dp_err_set(err, DP_EINVAL,
                          "%s: heads: heads=%lld does not divide hidden=%lld (give head_dim)", file,
                          (long long)m->heads, (long long)m->hidden);
    if (m->kv_heads < 1 || m->kv_heads > m->heads || m->heads % m->kv_heads != 0)
        return dp_err_set(err, DP_EINVAL,
                          "%s: kv_heads: expected a divisor of heads=%lld, got %lld", file,
                          (long long)m->heads, (long long)m->kv_heads);
    if (m->experts > 0 && (m->top_k < 1 || m->top_k > m->experts))
        return dp_err_set(err, DP_EINVAL, "%s: moe.top_k: expected integer in [1, %lld], got %lld",
                          file, (long long)m->experts, (long long)m->top_k);
    if (m->moe_dense_layers < 0 || m->moe_dense_layers >= m->layers)
        return dp_err_set(err, DP_EINVAL,
                          "%s: moe.first_dense_layers: expected integer in [0, %lld], got %lld",
                          file, (long long)m->layers - 1, (long long)m->moe_dense_layers);
    if (m->experts == 0 && (m->moe_dense_layers || m->moe_shared_experts))
        return dp_err_set(err, DP_EINVAL, "%s: moe: shared or dense-first layers need experts",
                          file);
    if (m->norms_per_layer != 1 && m->norms_per_layer != 2 && m->norms_per_layer != 4)
        return dp_err_set(err, DP_EINVAL,
                          "%s: norms_per_layer: expected 1 (parallel attention), 2 or 4 (pre- and "
                          "post-norms, Gemma 2/3), got %d",
                          file, m->norms_per_layer);
    if (m->window < 0 || m->window_layers < 0 || m->window_layers > m->layers ||
        (m->window_layers > 0 && m->window == 0))
        return dp_err_set(err, DP_EINVAL,
                          "%s: sliding_window_layers: expected integer in [0, %lld] with a "
                          "sliding_window, got %lld",
                          file, (long long)m->layers, (long long)m->window_layers);
    if (m->mla && (m->mla_kv_rank < 1 || m->mla_nope_dim < 1 || m->mla_rope_dim < 1 ||
                   m->mla_v_dim < 1 || m->mla_q_rank < 0 || m->kv_heads != m->heads))
        return dp_err_set(err, DP_EINVAL, "%s: mla: ranks and head sizes must be positive", file);
    if ((double)m->hidden * (double)m->ffn_hidden * (double)(m->experts ? m->experts : 1) *
            (double)m->layers >
        1e16)
        return dp_err_set(err, DP_EINVAL, "%s: model has more than 10^16 parameters", file);
    return 0;
}

double dp_model_attn_pair_ratio(const struct dp_model *m, int64_t s)
{
    if (m->window <= 0 || m->window_layers <= 0 || m->window >= s || s < 1 || m->layers < 1)
        return 1.0;
    double w = (double)m->window, n = (double)s;
    double windowed = (w * n - w * (w - 1) / 2) / (n * (n + 1) / 2);
    double f = (double)m->window_layers / (double)m->layers;
    return (1 - f) + f * windowed;
}

int dp_model_check_seq_len(const struct dp_model *m, int64_t seq_len, struct dp_err *err)
{
    /* A learned position table has max_position rows: longer sequences have no position
     * to look up (GPT-2's wpe). RoPE and ALiBi compute positions, so any length runs. */
    if (m->pos == DP_POS_LEARNED && seq_len > m->max_pos)
        return dp_err_set(err, DP_EINFEASIBLE, "seq_len=%lld exceeds the model's max_position=%lld",
                          (long long)seq_len, (long long)m->max_pos);
    return 0;
}

static int64_t norm_params(const struct dp_model *m)
{
    return m->norm == DP_NORM_LAYERNORM ? 2 * m->hidden : m->hidden; /* gain (+ bias) */
}

static int64_t mlp_params(const struct dp_model *m, int64_t f)
{
    int64_t h = m->hidden;
    if (m->ffn == DP_FFN_SWIGLU) /* gate and up (h x f each), down (f x h) */
        return 3 * h * f + (m->mlp_bias ? 2 * f + h : 0);
    return 2 * h * f + (m->mlp_bias ? f + h : 0);
}

/* The attention block's weights, without the layer norm in front of it. */
static int64_t attn_params(const struct dp_model *m)
{
    int64_t h = m->hidden, a = m->heads, g = m->kv_heads, d = m->head_dim;
    if (m->mla) {
        /*
         * DeepSeek-V2 Sec. 2.1 (transformers DeepseekV3Attention): queries through a
         * rank-q_lora bottleneck with its RMSNorm (q_a_proj h x r_q, q_a_layernorm,
         * q_b_proj r_q x a*d) or a plain q_proj h x a*d; keys and values from one
         * latent (kv_a_proj_with_mqa h x (r_kv + d_rope), kv_a_layernorm r_kv,
         * kv_b_proj r_kv x a*(d_nope + d_v)); o_proj a*d_v x h.
         */
        int64_t rq = m->mla_q_rank, rkv = m->mla_kv_rank;
        int64_t q = rq ? h * rq + rq + rq * a * d : h * a * d;
        int64_t kv = h * (rkv + m->mla_rope_dim) + rkv + rkv * a * (m->mla_nope_dim + m->mla_v_dim);
        return q + kv + a * m->mla_v_dim * h;
    }
    /* Q (h x a*d), K and V (h x g*d each), output (a*d x h). */
    int64_t attn = h * a * d + 2 * h * g * d + a * d * h;
    if (m->qkv_bias)
        attn += (a + 2 * g) * d;
    if (m->out_bias)
        attn += h;
    if (m->qk_norm) /* Qwen3Attention: q_norm and k_norm, RMSNorm(head_dim) each; OLMo 2's
                       Olmo2Attention RMSNorm(a d) and RMSNorm(g d) */
        attn += m->qk_norm_full ? (a + g) * d : 2 * d;
    if (m->attn_sinks) /* GptOssAttention.sinks: one logit per head */
        attn += a;
    return attn;
}

enum dp_layer_kind dp_model_layer_kind(const struct dp_model *m, int64_t i)
{
    return m->experts > 0 && i >= m->moe_dense_layers ? DP_LAYER_MOE : DP_LAYER_DENSE;
}

enum dp_layer_kind dp_model_mtp_kind(const struct dp_model *m)
{
    return dp_model_layer_kind(m, m->layers - 1);
}

void dp_model_layer_kinds(const struct dp_model *m, int64_t first, int64_t count,
                          struct dp_layer_kinds *out)
{
    memset(out, 0, sizeof *out);
    if (count <= 0)
        return;
    if (m->experts == 0) {
        out->n[DP_LAYER_DENSE] = (int)count;
        return;
    }
    /* Layers [0, moe_dense_layers) are dense, the rest MoE. */
    int64_t end = first + count, k = m->moe_dense_layers;
    int64_t dense = (end < k ? end : k) - first;
    if (dense < 0)
        dense = 0;
    out->n[DP_LAYER_DENSE] = (int)dense;
    out->n[DP_LAYER_MOE] = (int)(count - dense);
}

void dp_model_count(const struct dp_model *m, struct dp_param_count *out)
{
    int64_t h = m->hidden;
    memset(out, 0, sizeof *out);
    int64_t norms = m->norms_per_layer * norm_params(m);
    out->attention = attn_params(m) + norm_params(m);
    int64_t dense = attn_params(m) + mlp_params(m, m->ffn_hidden) + norms;
    out->per_dense_layer = m->experts == 0 || m->moe_dense_layers > 0 ? dense : 0;
    if (m->experts > 0) {
        int64_t one = mlp_params(m, m->moe_ffn_hidden);
        /* The router: Linear(h, E, bias=False) (Mixtral, Qwen, DeepSeek gate), plus
         * DeepSeek-V3's per-expert score-correction bias (noaux_tc routing). */
        int64_t router = h * m->experts + (m->moe_router_bias ? m->experts : 0);
        /* Shared experts run on every token: DeepSeekMoE's n_shared_experts (one MLP
         * of n x moe_intermediate_size), Qwen2-MoE's shared_expert with its sigmoid
         * shared_expert_gate Linear(h, 1, bias=False). */
        int64_t shared = m->moe_shared_experts * mlp_params(m, m->moe_shared_ffn_hidden) +
                         (m->moe_shared_gate ? h : 0);
        int64_t rest = attn_params(m) + router + shared + norms;
        out->per_layer = rest + m->experts * one;
        out->per_layer_active = rest + m->top_k * one;
    } else {
        out->per_layer = out->per_layer_active = dense;
    }
    out->embedding = m->vocab * h + (m->pos == DP_POS_LEARNED ? m->max_pos * h : 0);
    out->lm_head = m->tied_embeddings ? 0 : m->vocab * h;
    out->final_norm = norm_params(m);
    int64_t rest = out->embedding + out->lm_head + out->final_norm;
    int64_t kd = m->experts > 0 ? m->moe_dense_layers : 0, km = m->layers - kd;
    out->total = kd * dense + km * out->per_layer + rest;
    out->active = kd * dense + km * out->per_layer_active + rest;
}

cJSON *dp_model_to_json(const struct dp_model *m)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "name", m->name);
    cJSON_AddNumberToObject(o, "layers", (double)m->layers);
    cJSON_AddNumberToObject(o, "hidden", (double)m->hidden);
    cJSON_AddNumberToObject(o, "heads", (double)m->heads);
    if (!m->mla) { /* MLA derives both */
        cJSON_AddNumberToObject(o, "kv_heads", (double)m->kv_heads);
        cJSON_AddNumberToObject(o, "head_dim", (double)m->head_dim);
    }
    cJSON_AddNumberToObject(o, "ffn_hidden", (double)m->ffn_hidden);
    cJSON_AddStringToObject(o, "ffn", dp_ffn_name(m->ffn));
    cJSON_AddNumberToObject(o, "vocab", (double)m->vocab);
    cJSON_AddNumberToObject(o, "seq_len", (double)m->seq_len);
    cJSON_AddBoolToObject(o, "tied_embeddings", m->tied_embeddings);
    cJSON_AddStringToObject(o, "norm", dp_norm_name(m->norm));
    cJSON_AddStringToObject(o, "position", dp_pos_name(m->pos));
    if (m->pos == DP_POS_LEARNED)
        cJSON_AddNumberToObject(o, "max_position", (double)m->max_pos);
    cJSON_AddBoolToObject(o, "qkv_bias", m->qkv_bias);
    cJSON_AddBoolToObject(o, "out_bias", m->out_bias);
    cJSON_AddBoolToObject(o, "mlp_bias", m->mlp_bias);
    cJSON_AddNumberToObject(o, "norms_per_layer", m->norms_per_layer);
    cJSON_AddBoolToObject(o, "dropout", m->dropout);
    if (m->qk_norm)
        cJSON_AddBoolToObject(o, "qk_norm", true);
    if (m->qk_norm_full)
        cJSON_AddBoolToObject(o, "qk_norm_full", true);
    if (m->attn_sinks)
        cJSON_AddBoolToObject(o, "attention_sinks", true);
    if (m->mtp_layers > 0)
        cJSON_AddNumberToObject(o, "mtp_layers", (double)m->mtp_layers);
    if (m->window > 0) {
        cJSON_AddNumberToObject(o, "sliding_window", (double)m->window);
        cJSON_AddNumberToObject(o, "sliding_window_layers", (double)m->window_layers);
    }
    if (m->experts > 0) {
        cJSON *moe = cJSON_AddObjectToObject(o, "moe");
        cJSON_AddNumberToObject(moe, "experts", (double)m->experts);
        cJSON_AddNumberToObject(moe, "top_k", (double)m->top_k);
        cJSON_AddNumberToObject(moe, "ffn_hidden", (double)m->moe_ffn_hidden);
        if (m->moe_shared_experts > 0) {
            cJSON_AddNumberToObject(moe, "shared_experts", (double)m->moe_shared_experts);
            cJSON_AddNumberToObject(moe, "shared_ffn_hidden", (double)m->moe_shared_ffn_hidden);
            if (m->moe_shared_gate)
                cJSON_AddBoolToObject(moe, "shared_gate", true);
        }
        if (m->moe_router_bias)
            cJSON_AddBoolToObject(moe, "router_bias", true);
        if (m->moe_dense_layers > 0)
            cJSON_AddNumberToObject(moe, "first_dense_layers", (double)m->moe_dense_layers);
    }
    if (m->mla) {
        cJSON *a = cJSON_AddObjectToObject(o, "mla");
        cJSON_AddNumberToObject(a, "q_lora_rank", (double)m->mla_q_rank);
        cJSON_AddNumberToObject(a, "kv_lora_rank", (double)m->mla_kv_rank);
        cJSON_AddNumberToObject(a, "qk_nope_head_dim", (double)m->mla_nope_dim);
        cJSON_AddNumberToObject(a, "qk_rope_head_dim", (double)m->mla_rope_dim);
        cJSON_AddNumberToObject(a, "v_head_dim", (double)m->mla_v_dim);
    }
    return o;
}

/* A name without '/' or ".json" that is not an existing file: a shipped model. */
static int resolve_model_path(const char *path, char *out, size_t cap)
{
    struct stat st;
    if (stat(path, &st) == 0 || strchr(path, '/') || strstr(path, ".json"))
        return snprintf(out, cap, "%s", path) < (int)cap ? 0 : -1;
    return snprintf(out, cap, "%s/models/%s.json", dp_profiles_dir(), path) < (int)cap ? 0 : -1;
}

int dp_model_load(const char *path, struct dp_model *m, struct dp_err *err)
{
    char file[4096];
    if (resolve_model_path(path, file, sizeof file))
        return dp_err_set(err, DP_EINVAL, "%s: path too long", path);
    cJSON *root;
    int rc = dp_json_load_file(file, &root, err);
    if (rc == DP_ENOENT && strcmp(file, path) != 0) {
        dp_err_clear(err);
        return dp_err_set(err, DP_ENOENT,
                          "%s: no such file or shipped model (see `dplan model --list`)", path);
    }
    if (rc)
        return rc;
    struct dp_jr jr = {.file = path, .err = err};
    if (!cJSON_IsObject(root))
        rc = dp_jr_expect_object(&jr, root, "a JSON object (dplan model or HF config.json)");
    else if (dp__is_hf_config(root))
        rc = dp__model_from_hf(&jr, root, m);
    else if (cJSON_GetObjectItemCaseSensitive(root, "layers"))
        rc = dp_model_from_json(&jr, root, m);
    else
        rc = dp_err_set(err, DP_EINVAL,
                        "%s: neither a dplan model (no \"layers\") nor a Hugging Face config.json "
                        "(no \"model_type\" or \"num_hidden_layers\")",
                        path);
    cJSON_Delete(root);
    return rc;
}
