/*
 * Hugging Face config.json -> struct dp_model.
 *
 * HF configs carry many keys dplan does not need, so unknown keys are
 * accepted here (unlike dplan's own files); the keys that are read are
 * type- and range-checked. Defaults follow each transformers config class
 * (e.g. LlamaConfig.tie_word_embeddings = False, GPT2Config's = True,
 * GPT2Config.n_inner = None meaning 4 * n_embd).
 */
#include "core.h"
#include "internal.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <string.h>

bool dp__is_hf_config(const cJSON *root)
{
    return cJSON_GetObjectItemCaseSensitive(root, "model_type") ||
           cJSON_GetObjectItemCaseSensitive(root, "architectures") ||
           cJSON_GetObjectItemCaseSensitive(root, "num_hidden_layers") ||
           cJSON_GetObjectItemCaseSensitive(root, "n_layer");
}

/* First present key among the aliases (NULL-terminated); *key gets its name. */
static const char *first_key(const cJSON *root, const char *const *aliases)
{
    for (const char *const *a = aliases; *a; a++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, *a);
        if (v && !cJSON_IsNull(v))
            return *a;
    }
    return NULL;
}

/* A positive integer field under its first present alias, at most `max`. */
static int hf_int_max(struct dp_jr *jr, const cJSON *root, const char *const *aliases,
                      bool required, int64_t max, int64_t *out)
{
    const char *k = first_key(root, aliases);
    if (!k) {
        if (!required)
            return 0;
        return dp_jr_int(jr, root, aliases[0], true, 1, max, out);
    }
    return dp_jr_int(jr, root, k, true, 1, max, out);
}

/* Shapes: at most 10^7 (context limits may be larger: hf_int_max). */
static int hf_int(struct dp_jr *jr, const cJSON *root, const char *const *aliases, bool required,
                  int64_t *out)
{
    return hf_int_max(jr, root, aliases, required, 10000000, out);
}

/* Dropout is on when any of the probabilities is positive, an absent (or null) one
 * taking the class default `absent`. */
static bool any_positive(const cJSON *root, const char *const *keys, double absent)
{
    for (const char *const *k = keys; *k; k++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, *k);
        double p = cJSON_IsNumber(v) ? v->valuedouble : absent;
        if (p > 0)
            return true;
    }
    return false;
}

enum family {
    FAM_LLAMA,
    FAM_MISTRAL,
    FAM_QWEN2,
    FAM_MIXTRAL,
    FAM_GPT2,
    FAM_NEOX,
    FAM_FALCON,
    FAM_QWEN2_MOE,
    FAM_QWEN3_MOE,
    FAM_DEEPSEEK_V2,
    FAM_DEEPSEEK_V3,
    FAM_QWEN3,
    FAM_PHI3,
    FAM_GEMMA,
    FAM_GEMMA2,
    FAM_GEMMA3,
    FAM_GPT_OSS,
    FAM_GLM4_MOE,
    FAM_OLMO2,
    FAM_OLMOE,
    FAM_GRANITE,
    FAM_LLAMA4,
};

/*
 * What transformers' config classes default the fields dplan reads to when a
 * config.json omits them (the keyword defaults of each class's __init__ or
 * dataclass fields, huggingface/transformers src/transformers/models/<family>/
 * configuration_<family>.py): the context length (max_position_embeddings, GPT-2's
 * n_positions), the KV heads (None = the head count, or a number), and whether
 * dropout is on (GPT2Config: resid_pdrop = embd_pdrop = attn_pdrop = 0.1; every
 * other family: 0.0). The shape fields (layers, hidden, heads, vocabulary, MLP
 * width) stay required: a config without them is not a checkpoint's config, and
 * planning transformers' example model instead would answer another question.
 */
static const struct hf_defaults {
    const char *cls;
    int64_t max_pos;
    int64_t kv_heads; /* 0: the head count */
    double dropout;   /* the dropout probabilities' default */
    int64_t head_dim; /* 0: hidden / heads (the modelling code's getattr fallback) */
} hf_defaults[] = {
    [FAM_LLAMA] = {"LlamaConfig", 2048, 0, 0.0, 0},
    [FAM_MISTRAL] = {"MistralConfig", 4096 * 32, 8, 0.0, 0},
    [FAM_QWEN2] = {"Qwen2Config", 32768, 32, 0.0, 0},
    [FAM_MIXTRAL] = {"MixtralConfig", 4096 * 32, 8, 0.0, 0},
    [FAM_GPT2] = {"GPT2Config", 1024, 0, 0.1, 0},
    [FAM_NEOX] = {"GPTNeoXConfig", 2048, 0, 0.0, 0},
    [FAM_FALCON] = {"FalconConfig", 2048, 0, 0.0, 0},
    [FAM_QWEN2_MOE] = {"Qwen2MoeConfig", 32768, 16, 0.0, 0},
    [FAM_QWEN3_MOE] = {"Qwen3MoeConfig", 32768, 4, 0.0, 0},
    /* DeepseekV2Config: num_key_value_heads None (= the heads); DeepseekV3Config: 128,
     * which MLA ignores (one K/V head per query head): dplan takes the head count. */
    [FAM_DEEPSEEK_V2] = {"DeepseekV2Config", 2048, 0, 0.0, 0},
    [FAM_DEEPSEEK_V3] = {"DeepseekV3Config", 4096, 0, 0.0, 0},
    /* Qwen3Config (dense): num_key_value_heads 32 and head_dim 128 as class defaults
     * (Qwen3MoeConfig has no head_dim field: hidden / heads). Phi3Config:
     * num_key_value_heads None, resid/embd/attention dropout 0.0. */
    [FAM_QWEN3] = {"Qwen3Config", 32768, 32, 0.0, 128},
    [FAM_PHI3] = {"Phi3Config", 4096, 0, 0.0, 0},
    /* GemmaConfig: 16 KV heads, head_dim 256, 8192 positions; Gemma2Config: 4 KV heads,
     * head_dim 256, 8192; Gemma3TextConfig: 4 and 256, 131072. All tie their embeddings. */
    [FAM_GEMMA] = {"GemmaConfig", 8192, 16, 0.0, 256},
    [FAM_GEMMA2] = {"Gemma2Config", 8192, 4, 0.0, 256},
    [FAM_GEMMA3] = {"Gemma3TextConfig", 131072, 4, 0.0, 256},
    /* GptOssConfig: 8 KV heads, head_dim 64, 131072 positions (YaRN over 4096). */
    [FAM_GPT_OSS] = {"GptOssConfig", 131072, 8, 0.0, 64},
    /* Glm4MoeConfig: 8 KV heads, 131072 positions; no head_dim field (hidden / heads). */
    [FAM_GLM4_MOE] = {"Glm4MoeConfig", 131072, 8, 0.0, 0},
    /* Olmo2Config: num_key_value_heads None (the heads), 2048 positions. */
    [FAM_OLMO2] = {"Olmo2Config", 2048, 0, 0.0, 0},
    /* OlmoeConfig: num_key_value_heads None (the heads), 4096 positions. */
    [FAM_OLMOE] = {"OlmoeConfig", 4096, 0, 0.0, 0},
    /* GraniteConfig: LlamaConfig's defaults (KV heads None = the heads, 2048 positions,
     * untied, no biases) plus four scalar multipliers. */
    [FAM_GRANITE] = {"GraniteConfig", 2048, 0, 0.0, 0},
    /* Llama4TextConfig: 8 KV heads, head_dim 128, 131072 positions. */
    [FAM_LLAMA4] = {"Llama4TextConfig", 4096 * 32, 8, 0.0, 128},
};

static const struct {
    const char *type;
    enum family fam;
} types[] = {
    {"llama", FAM_LLAMA},
    {"mistral", FAM_MISTRAL},
    {"qwen2", FAM_QWEN2},
    {"mixtral", FAM_MIXTRAL},
    {"gpt2", FAM_GPT2},
    {"gpt_neox", FAM_NEOX},
    {"falcon", FAM_FALCON},
    {"RefinedWebModel", FAM_FALCON},
    {"RefinedWeb", FAM_FALCON},
    {"qwen2_moe", FAM_QWEN2_MOE},
    {"qwen3_moe", FAM_QWEN3_MOE},
    {"deepseek_v2", FAM_DEEPSEEK_V2},
    {"deepseek_v3", FAM_DEEPSEEK_V3},
    {"qwen3", FAM_QWEN3},
    {"phi3", FAM_PHI3},
    {"gemma", FAM_GEMMA},
    {"gemma2", FAM_GEMMA2},
    {"gemma3_text", FAM_GEMMA3},
    {"gpt_oss", FAM_GPT_OSS},
    {"glm4_moe", FAM_GLM4_MOE},
    {"olmo2", FAM_OLMO2},
    {"olmoe", FAM_OLMOE},
    {"granite", FAM_GRANITE},
    {"llama4_text", FAM_LLAMA4},
};

#define SUPPORTED_TYPES                                                                            \
    "llama, mistral, mixtral, qwen2, qwen2_moe, qwen3, qwen3_moe, deepseek_v2, deepseek_v3, "      \
    "phi3, gemma, gemma2, gemma3_text, gpt_oss, glm4_moe, olmo2, olmoe, granite, llama4_text, "    \
    "gpt2, gpt_neox, falcon"

/* transformers' model classes: by name prefix, what "architectures" says when model_type
 * is absent; the exact causal-LM class, what it must name when model_type is a config
 * transformers does not have (remote code that reuses a transformers architecture). */
static const struct {
    const char *prefix;
    const char *causal_lm;
    enum family fam;
    const char *type;
} archs[] = {{"Llama", "LlamaForCausalLM", FAM_LLAMA, "llama"},
             {"Mistral", "MistralForCausalLM", FAM_MISTRAL, "mistral"},
             {"Mixtral", "MixtralForCausalLM", FAM_MIXTRAL, "mixtral"},
             {"Qwen2Moe", "Qwen2MoeForCausalLM", FAM_QWEN2_MOE, "qwen2_moe"},
             {"Qwen3Moe", "Qwen3MoeForCausalLM", FAM_QWEN3_MOE, "qwen3_moe"},
             {"Qwen2", "Qwen2ForCausalLM", FAM_QWEN2, "qwen2"},
             {"Qwen3For", "Qwen3ForCausalLM", FAM_QWEN3, "qwen3"},
             {"Phi3For", "Phi3ForCausalLM", FAM_PHI3, "phi3"},
             {"GemmaFor", "GemmaForCausalLM", FAM_GEMMA, "gemma"},
             {"Gemma2For", "Gemma2ForCausalLM", FAM_GEMMA2, "gemma2"},
             {"Gemma3ForCausalLM", "Gemma3ForCausalLM", FAM_GEMMA3, "gemma3_text"},
             {"GptOssFor", "GptOssForCausalLM", FAM_GPT_OSS, "gpt_oss"},
             {"DeepseekV2", "DeepseekV2ForCausalLM", FAM_DEEPSEEK_V2, "deepseek_v2"},
             {"DeepseekV3", "DeepseekV3ForCausalLM", FAM_DEEPSEEK_V3, "deepseek_v3"},
             {"Glm4Moe", "Glm4MoeForCausalLM", FAM_GLM4_MOE, "glm4_moe"},
             {"Olmo2For", "Olmo2ForCausalLM", FAM_OLMO2, "olmo2"},
             {"OlmoeFor", "OlmoeForCausalLM", FAM_OLMOE, "olmoe"},
             {"GraniteFor", "GraniteForCausalLM", FAM_GRANITE, "granite"},
             {"Llama4ForCausalLM", "Llama4ForCausalLM", FAM_LLAMA4, "llama4_text"},
             {"GPT2", "GPT2LMHeadModel", FAM_GPT2, "gpt2"},
             {"GPTNeoX", "GPTNeoXForCausalLM", FAM_NEOX, "gpt_neox"},
             {"Falcon", "FalconForCausalLM", FAM_FALCON, "falcon"},
             {"RW", NULL, FAM_FALCON, "falcon"}};

/* The entry architectures[0] names: by prefix, or with `exact` only a text-only causal-LM
 * class of transformers' own (not an image-text "...ForConditionalGeneration", nor a
 * "DeepseekV32ForCausalLM" whose attention differs from the class it starts like).
 * -1: none. */
static int family_from_arch(const cJSON *root, bool exact)
{
    const cJSON *arch = cJSON_GetObjectItemCaseSensitive(root, "architectures");
    const cJSON *a0 = cJSON_IsArray(arch) ? cJSON_GetArrayItem(arch, 0) : NULL;
    if (!cJSON_IsString(a0))
        return -1;
    for (size_t i = 0; i < sizeof archs / sizeof archs[0]; i++)
        if (exact ? archs[i].causal_lm && strcmp(a0->valuestring, archs[i].causal_lm) == 0
                  : strncmp(a0->valuestring, archs[i].prefix, strlen(archs[i].prefix)) == 0)
            return (int)i;
    return -1;
}

/*
 * The family: from model_type; when model_type names no transformers config (a model
 * shipped with its own code, e.g. Kimi K2's "kimi_k2", whose config.json names
 * DeepseekV3ForCausalLM), from architectures naming a transformers causal-LM class, reported in
 * `type` as "deepseek_v3 (model_type kimi_k2)"; when model_type is absent, from "architectures" or
 * the key style.
 */
static int detect_family(struct dp_jr *jr, const cJSON *root, enum family *fam, char *type,
                         size_t cap)
{
    const cJSON *mt = cJSON_GetObjectItemCaseSensitive(root, "model_type");
    if (mt) {
        if (!cJSON_IsString(mt)) {
            char got[128];
            dp_json_describe(mt, got, sizeof got);
            return dp_err_set(jr->err, DP_EINVAL, "%s: model_type: expected string, got %s",
                              jr->file, got);
        }
        if (strcmp(mt->valuestring, "llama4") == 0)
            return dp_err_set(jr->err, DP_EINVAL,
                              "%s: model_type: \"llama4\" is Llama 4's image-text model (a vision "
                              "encoder besides the decoder): give its text_config as a "
                              "llama4_text config.json, or write a dplan model.json",
                              jr->file);
        if (strcmp(mt->valuestring, "gemma3") == 0)
            return dp_err_set(jr->err, DP_EINVAL,
                              "%s: model_type: \"gemma3\" is Gemma 3's image-text model (a SigLIP "
                              "vision tower besides the decoder): give its text_config as a "
                              "gemma3_text config.json, or write a dplan model.json",
                              jr->file);
        for (size_t i = 0; i < sizeof types / sizeof types[0]; i++)
            if (strcmp(mt->valuestring, types[i].type) == 0) {
                *fam = types[i].fam;
                snprintf(type, cap, "%s", types[i].type);
                return 0;
            }
        int a = family_from_arch(root, true);
        if (a >= 0) {
            *fam = archs[a].fam;
            snprintf(type, cap, "%s (model_type %.24s)", archs[a].type, mt->valuestring);
            return 0;
        }
        return dp_err_set(jr->err, DP_EINVAL,
                          "%s: model_type: unsupported \"%.40s\" (supported: " SUPPORTED_TYPES
                          ", or any model_type whose \"architectures\" names one of their "
                          "causal-LM classes, e.g. DeepseekV3ForCausalLM; or write a dplan "
                          "model.json)",
                          jr->file, mt->valuestring);
    }
    int a = family_from_arch(root, false);
    if (a >= 0) {
        *fam = archs[a].fam;
        snprintf(type, cap, "%s", archs[a].type);
        return 0;
    }
    if (cJSON_GetObjectItemCaseSensitive(root, "n_embd")) {
        *fam = FAM_GPT2;
        snprintf(type, cap, "gpt2");
        return 0;
    }
    if (cJSON_GetObjectItemCaseSensitive(root, "num_hidden_layers")) {
        *fam = FAM_LLAMA;
        snprintf(type, cap, "llama");
        return 0;
    }
    return dp_err_set(jr->err, DP_EINVAL,
                      "%s: model_type: missing, and the architecture could not be inferred",
                      jr->file);
}

/* Context-extended models (Llama 3.1, DeepSeek's YaRN) train at the original length. */
static void original_seq_len(const cJSON *root, int64_t maxpos, struct dp_model *m)
{
    const cJSON *rs = cJSON_GetObjectItemCaseSensitive(root, "rope_scaling");
    if (cJSON_IsObject(rs)) {
        const cJSON *o = cJSON_GetObjectItemCaseSensitive(rs, "original_max_position_embeddings");
        if (cJSON_IsNumber(o) && o->valuedouble >= 1 && o->valuedouble < maxpos) {
            m->seq_len = (int64_t)o->valuedouble;
            snprintf(m->seq_len_from, sizeof m->seq_len_from,
                     "the config's rope_scaling.original_max_position_embeddings");
        }
    }
}

/* A layer-placement key dplan cannot express: only a dense-first prefix is modelled. */
static int unsupported_sparsity(struct dp_jr *jr, const char *key, const char *what)
{
    return dp_err_set(jr->err, DP_EINVAL,
                      "%s: %s: %s is not supported (dplan models every layer as MoE after the "
                      "first dense ones; write a dplan model.json)",
                      jr->file, key, what);
}

/*
 * Qwen2-MoE and Qwen3-MoE (transformers Qwen2MoeConfig, Qwen3MoeConfig): every
 * decoder_sparse_step-th layer not in mlp_only_layers is sparse; only step 1 and
 * no dense-only layers are read. Qwen2-MoE adds one shared expert of
 * shared_expert_intermediate_size behind a sigmoid gate and q/k/v biases
 * (Qwen2MoeAttention); Qwen3-MoE RMS-normalises q and k per head and has no
 * shared expert.
 */
static int qwen_moe(struct dp_jr *jr, const cJSON *root, enum family fam, struct dp_model *m)
{
    static const char *const k_kv[] = {"num_key_value_heads", NULL};
    static const char *const k_ffn[] = {"intermediate_size", NULL};
    static const char *const k_e[] = {"num_experts", NULL};
    static const char *const k_k[] = {"num_experts_per_tok", NULL};
    static const char *const k_mf[] = {"moe_intermediate_size", NULL};
    static const char *const k_sf[] = {"shared_expert_intermediate_size", NULL};
    int64_t step = 1, shared = 0;
    /* Class defaults: Qwen2MoeConfig num_experts 60, num_experts_per_tok 4;
     * Qwen3MoeConfig 128 and 8. */
    m->top_k = fam == FAM_QWEN2_MOE ? 4 : 8;
    m->experts = fam == FAM_QWEN2_MOE ? 60 : 128;
    if (hf_int(jr, root, k_kv, false, &m->kv_heads) ||
        hf_int(jr, root, k_ffn, true, &m->ffn_hidden) ||
        hf_int(jr, root, k_e, false, &m->experts) || hf_int(jr, root, k_k, false, &m->top_k) ||
        hf_int(jr, root, k_mf, true, &m->moe_ffn_hidden) ||
        dp_jr_int(jr, root, "decoder_sparse_step", false, 1, 1000000, &step))
        return jr->err->code;
    if (fam == FAM_QWEN2_MOE) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, "shared_expert_intermediate_size");
        if (cJSON_IsNumber(v) && v->valuedouble == 0)
            shared = 0;
        else if (hf_int(jr, root, k_sf, true, &shared))
            return jr->err->code;
    }
    if (step != 1)
        return unsupported_sparsity(jr, "decoder_sparse_step", "a step other than 1");
    const cJSON *mlp_only = cJSON_GetObjectItemCaseSensitive(root, "mlp_only_layers");
    if (cJSON_IsArray(mlp_only) && cJSON_GetArraySize(mlp_only) > 0)
        return unsupported_sparsity(jr, "mlp_only_layers", "a non-empty list");
    m->ffn = DP_FFN_SWIGLU;
    m->norm = DP_NORM_RMSNORM;
    m->pos = DP_POS_ROPE;
    if (fam == FAM_QWEN2_MOE) {
        m->qkv_bias = true;
        if (shared > 0) {
            m->moe_shared_experts = 1;
            m->moe_shared_ffn_hidden = shared;
            m->moe_shared_gate = true;
        }
    } else {
        bool bias = false;
        if (dp_jr_bool(jr, root, "attention_bias", false, &bias))
            return jr->err->code;
        m->qkv_bias = m->out_bias = bias;
        m->qk_norm = true;
    }
    static const char *const drop[] = {"attention_dropout", NULL};
    m->dropout = any_positive(root, drop, hf_defaults[fam].dropout);
    return 0;
}

/*
 * DeepSeek-V2/V3 (transformers DeepseekV2Config, DeepseekV3Config): MLA
 * attention, first_k_dense_replace dense layers of intermediate_size, then MoE
 * layers of n_routed_experts plus n_shared_experts of moe_intermediate_size;
 * noaux_tc routing (V3) keeps a per-expert score-correction bias.
 */
static int deepseek(struct dp_jr *jr, const cJSON *root, enum family fam, struct dp_model *m)
{
    static const char *const k_kv[] = {"num_key_value_heads", NULL};
    static const char *const k_ffn[] = {"intermediate_size", NULL};
    static const char *const k_e[] = {"n_routed_experts", NULL};
    static const char *const k_k[] = {"num_experts_per_tok", NULL};
    static const char *const k_mf[] = {"moe_intermediate_size", NULL};
    static const char *const k_kvr[] = {"kv_lora_rank", NULL};
    static const char *const k_nope[] = {"qk_nope_head_dim", NULL};
    static const char *const k_rope[] = {"qk_rope_head_dim", NULL};
    static const char *const k_v[] = {"v_head_dim", NULL};
    /*
     * Class defaults (transformers configuration_deepseek_v2.py / _v3.py): kv_lora_rank
     * 512, q_lora_rank 1536, qk_nope_head_dim 128, qk_rope_head_dim 64, v_head_dim 128
     * for both; V2 n_routed_experts 64, n_shared_experts 2, first_k_dense_replace 0,
     * num_experts_per_tok None (required with experts); V3 256, 1, 3 and 8.
     * "q_lora_rank": null (DeepSeek-V2-Lite) means no query compression.
     */
    bool v3 = fam == FAM_DEEPSEEK_V3;
    int64_t kv = m->heads, freq = 1, shared = v3 ? 1 : 2, dense = v3 ? 3 : 0, qr = 1536;
    m->experts = v3 ? 256 : 64;
    m->top_k = v3 ? 8 : 0;
    m->mla_kv_rank = 512;
    m->mla_nope_dim = 128;
    m->mla_rope_dim = 64;
    m->mla_v_dim = 128;
    const cJSON *qrv = cJSON_GetObjectItemCaseSensitive(root, "q_lora_rank");
    if (cJSON_IsNull(qrv))
        qr = 0;
    if (hf_int(jr, root, k_kv, false, &kv) || hf_int(jr, root, k_ffn, true, &m->ffn_hidden) ||
        hf_int(jr, root, k_e, false, &m->experts) ||
        hf_int(jr, root, k_kvr, false, &m->mla_kv_rank) ||
        hf_int(jr, root, k_nope, false, &m->mla_nope_dim) ||
        hf_int(jr, root, k_rope, false, &m->mla_rope_dim) ||
        hf_int(jr, root, k_v, false, &m->mla_v_dim) ||
        dp_jr_int(jr, root, "q_lora_rank", false, 1, 10000000, &qr) ||
        dp_jr_int(jr, root, "moe_layer_freq", false, 1, 1000000, &freq) ||
        dp_jr_int(jr, root, "n_shared_experts", false, 0, 1024, &shared) ||
        dp_jr_int(jr, root, "first_k_dense_replace", false, 0, m->layers - 1, &dense) ||
        dp_jr_int(jr, root, "num_nextn_predict_layers", false, 0, DP_MAX_MTP, &m->mtp_layers))
        return jr->err->code;
    if (kv != m->heads)
        return dp_err_set(jr->err, DP_EINVAL,
                          "%s: num_key_value_heads: expected %lld (MLA has one K/V head per "
                          "query head), got %lld",
                          jr->file, (long long)m->heads, (long long)kv);
    m->mla = true;
    m->mla_q_rank = qr;
    m->head_dim = m->mla_nope_dim + m->mla_rope_dim;
    m->kv_heads = m->heads;
    if (m->experts > 0) {
        if (hf_int(jr, root, k_k, !v3, &m->top_k) ||
            hf_int(jr, root, k_mf, true, &m->moe_ffn_hidden))
            return jr->err->code;
        if (freq != 1)
            return unsupported_sparsity(jr, "moe_layer_freq", "a frequency other than 1");
        m->moe_dense_layers = dense;
        m->moe_shared_experts = shared;
        m->moe_shared_ffn_hidden = shared ? m->moe_ffn_hidden : 0;
        /* The score-correction bias of aux-loss-free routing (DeepSeek-V3 Sec. 2.1.2),
         * stored per MoE layer as gate.e_score_correction_bias. */
        const cJSON *tm = cJSON_GetObjectItemCaseSensitive(root, "topk_method");
        m->moe_router_bias =
            cJSON_IsString(tm) ? strcmp(tm->valuestring, "noaux_tc") == 0 : fam == FAM_DEEPSEEK_V3;
    }
    m->ffn = DP_FFN_SWIGLU;
    m->norm = DP_NORM_RMSNORM;
    m->pos = DP_POS_ROPE;
    bool bias = false;
    if (dp_jr_bool(jr, root, "attention_bias", false, &bias))
        return jr->err->code;
    if (bias)
        return dp_err_set(jr->err, DP_EINVAL,
                          "%s: attention_bias: true is not supported with MLA attention", jr->file);
    static const char *const drop[] = {"attention_dropout", NULL};
    m->dropout = any_positive(root, drop, hf_defaults[fam].dropout);
    return 0;
}

/*
 * GLM-4.5 (transformers Glm4MoeConfig, model_type glm4_moe; modeling_glm4_moe.py):
 * grouped-query attention of head_dim (absent: hidden / heads), biases on q, k and v with
 * attention_bias and none on o_proj (Glm4MoeAttention), q_norm and k_norm RMSNorm(head_dim)
 * with use_qk_norm; rotary on partial_rotary_factor of each head (element-wise work, not
 * charged). first_k_dense_replace dense layers of intermediate_size, then MoE layers of
 * n_routed_experts and one shared MLP of n_shared_experts x moe_intermediate_size behind
 * DeepSeek-V3's router (Glm4MoeTopkRouter: its weight and e_score_correction_bias);
 * num_nextn_predict_layers multi-token-prediction layers as DeepSeek-V3's. Class defaults:
 * n_routed_experts 128, num_experts_per_tok 8, n_shared_experts 1, first_k_dense_replace
 * 1, attention_bias and use_qk_norm False.
 */
static int glm4_moe(struct dp_jr *jr, const cJSON *root, struct dp_model *m)
{
    static const char *const k_kv[] = {"num_key_value_heads", NULL};
    static const char *const k_ffn[] = {"intermediate_size", NULL};
    static const char *const k_e[] = {"n_routed_experts", NULL};
    static const char *const k_k[] = {"num_experts_per_tok", NULL};
    static const char *const k_mf[] = {"moe_intermediate_size", NULL};
    int64_t shared = 1, dense = 1;
    m->experts = 128;
    m->top_k = 8;
    if (hf_int(jr, root, k_kv, false, &m->kv_heads) ||
        hf_int(jr, root, k_ffn, true, &m->ffn_hidden) ||
        hf_int(jr, root, k_e, false, &m->experts) || hf_int(jr, root, k_k, false, &m->top_k) ||
        hf_int(jr, root, k_mf, true, &m->moe_ffn_hidden) ||
        dp_jr_int(jr, root, "n_shared_experts", false, 0, 1024, &shared) ||
        dp_jr_int(jr, root, "first_k_dense_replace", false, 0, m->layers - 1, &dense) ||
        dp_jr_int(jr, root, "num_nextn_predict_layers", false, 0, DP_MAX_MTP, &m->mtp_layers))
        return jr->err->code;
    m->moe_dense_layers = dense;
    m->moe_shared_experts = shared;
    m->moe_shared_ffn_hidden = shared ? m->moe_ffn_hidden : 0;
    m->moe_router_bias = true; /* gate.e_score_correction_bias, in the checkpoint */
    m->ffn = DP_FFN_SWIGLU;
    m->norm = DP_NORM_RMSNORM;
    m->pos = DP_POS_ROPE;
    bool bias = false, qk = false;
    if (dp_jr_bool(jr, root, "attention_bias", false, &bias) ||
        dp_jr_bool(jr, root, "use_qk_norm", false, &qk))
        return jr->err->code;
    m->qkv_bias = bias;
    m->qk_norm = qk;
    static const char *const drop[] = {"attention_dropout", NULL};
    m->dropout = any_positive(root, drop, hf_defaults[FAM_GLM4_MOE].dropout);
    return 0;
}

/* sliding_window's width: the class default `dflt` when absent, none when null. */
static int window_width(struct dp_jr *jr, const cJSON *root, int64_t dflt, int64_t *w)
{
    static const char *const k_w[] = {"sliding_window", NULL};
    *w = dflt;
    if (cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(root, "sliding_window"))) {
        *w = 0;
        return 0;
    }
    return hf_int(jr, root, k_w, false, w);
}

/* The layers a config's layer_types list marks "sliding_attention", when it has one
 * (it then overrides the class's pattern); *sliding is left alone otherwise. */
static int layer_types_sliding(struct dp_jr *jr, const cJSON *root, const struct dp_model *m,
                               int64_t *sliding)
{
    const cJSON *lt = cJSON_GetObjectItemCaseSensitive(root, "layer_types");
    if (!cJSON_IsArray(lt))
        return 0;
    if (cJSON_GetArraySize(lt) != m->layers)
        return dp_err_set(jr->err, DP_EINVAL,
                          "%s: layer_types: expected %lld entries (num_hidden_layers), got %d",
                          jr->file, (long long)m->layers, cJSON_GetArraySize(lt));
    *sliding = 0;
    for (const cJSON *e = lt->child; e; e = e->next)
        *sliding += cJSON_IsString(e) && strcmp(e->valuestring, "sliding_attention") == 0;
    return 0;
}

/* Layers i of `layers` that slide when every `period`-th one attends fully ((i + 1) %
 * period != 0): Gemma 2's and gpt-oss's every other layer, Gemma 3's five of six. */
static int64_t sliding_but_every(int64_t layers, int64_t period)
{
    return layers - layers / period;
}

static void set_window(struct dp_model *m, int64_t w, int64_t sliding)
{
    if (w > 0 && sliding > 0) {
        m->window = w;
        m->window_layers = sliding;
    }
}

/*
 * Sliding-window attention as transformers' classes apply it: MistralConfig's
 * sliding_window (class default 4096, null: none) and Mixtral's and Phi-3's (default
 * None) on every layer; Qwen2's and Qwen3's only with use_sliding_window, on the layers
 * from max_window_layers on (class default 28), or on the layer_types entries that say
 * "sliding_attention" where the config lists them.
 */
static int hf_window(struct dp_jr *jr, const cJSON *root, enum family fam, struct dp_model *m)
{
    const bool qwen =
        fam == FAM_QWEN2 || fam == FAM_QWEN3 || fam == FAM_QWEN2_MOE || fam == FAM_QWEN3_MOE;
    if (fam != FAM_MISTRAL && fam != FAM_MIXTRAL && fam != FAM_PHI3 && !qwen)
        return 0;
    int64_t w = 0, sliding = m->layers;
    if (window_width(jr, root, fam == FAM_MISTRAL || qwen ? 4096 : 0, &w))
        return jr->err->code;
    if (qwen) {
        bool use = false;
        int64_t from = 28;
        static const char *const k_from[] = {"max_window_layers", NULL};
        if (dp_jr_bool(jr, root, "use_sliding_window", false, &use))
            return jr->err->code;
        if (!use)
            return 0;
        const cJSON *fv = cJSON_GetObjectItemCaseSensitive(root, "max_window_layers");
        if (cJSON_IsNumber(fv) && fv->valuedouble == 0)
            from = 0;
        else if (hf_int(jr, root, k_from, false, &from))
            return jr->err->code;
        if (fam == FAM_QWEN2 || fam == FAM_QWEN3) /* layers from max_window_layers on */
            sliding = from < m->layers ? m->layers - from : 0;
        else if (fam == FAM_QWEN2_MOE) /* every other layer below max_window_layers */
            for (int64_t i = sliding = 0; i < m->layers; i++)
                sliding += (i + 1) % 2 && i < from;
        /* Qwen3-MoE: every layer */
    }
    if (layer_types_sliding(jr, root, m, &sliding))
        return jr->err->code;
    set_window(m, w, sliding);
    return 0;
}

/*
 * Llama 4's text model (transformers Llama4TextConfig, model_type llama4_text;
 * modeling_llama4.py): grouped-query attention of head_dim with an L2 q/k norm (no
 * weights) and no biases; the layers in moe_layers (default every
 * interleave_moe_layer_step-th from step - 1) are MoE: num_local_experts SwiGLU experts of
 * intermediate_size (gate_up_proj and down_proj), top num_experts_per_tok, a router
 * without bias and one shared expert of intermediate_size; the others dense of
 * intermediate_size_mlp. Only a dense-first prefix is expressible: Scout (every layer MoE)
 * reads, Maverick's alternation is refused. The layers with RoPE (no_rope_layers 1:
 * default all but every no_rope_layer_interval-th) attend in chunks of
 * attention_chunk_size, priced as a sliding window of that width: equal to chunked
 * attention up to one chunk of sequence, above it an upper bound (a chunk's queries see
 * half a chunk on average, a window's a whole one).
 */
static int llama4(struct dp_jr *jr, const cJSON *root, struct dp_model *m)
{
    static const char *const k_kv[] = {"num_key_value_heads", NULL};
    static const char *const k_ffn[] = {"intermediate_size", NULL};
    static const char *const k_dense[] = {"intermediate_size_mlp", NULL};
    static const char *const k_e[] = {"num_local_experts", NULL};
    static const char *const k_k[] = {"num_experts_per_tok", NULL};
    static const char *const k_chunk[] = {"attention_chunk_size", NULL};
    int64_t step = 1, interval = 4, chunk = 8192;
    m->experts = 16;
    m->top_k = 1;
    m->ffn_hidden = 16384;
    if (hf_int(jr, root, k_kv, false, &m->kv_heads) ||
        hf_int(jr, root, k_ffn, true, &m->moe_ffn_hidden) ||
        hf_int(jr, root, k_dense, false, &m->ffn_hidden) ||
        hf_int(jr, root, k_e, false, &m->experts) || hf_int(jr, root, k_k, false, &m->top_k) ||
        dp_jr_int(jr, root, "interleave_moe_layer_step", false, 1, 1000000, &step) ||
        dp_jr_int(jr, root, "no_rope_layer_interval", false, 1, 1000000, &interval))
        return jr->err->code;
    /* the MoE layers: the config's list, or every step-th from step - 1 */
    int64_t first = step - 1, n = 0;
    const cJSON *ml = cJSON_GetObjectItemCaseSensitive(root, "moe_layers");
    if (cJSON_IsArray(ml)) {
        first = m->layers;
        for (const cJSON *e = ml->child; e; e = e->next, n++) {
            if (!cJSON_IsNumber(e) || e->valuedouble < 0 || e->valuedouble >= (double)m->layers)
                return dp_err_set(jr->err, DP_EINVAL,
                                  "%s: moe_layers[%lld]: expected a layer index 0-%lld", jr->file,
                                  (long long)n, (long long)m->layers - 1);
            if ((int64_t)e->valuedouble < first)
                first = (int64_t)e->valuedouble;
        }
        if (n > 0 && n != m->layers - first)
            return unsupported_sparsity(jr, "moe_layers",
                                        "a list other than every layer from one on");
        if (n == 0)
            m->experts = 0;
    } else if (step != 1)
        return unsupported_sparsity(jr, "interleave_moe_layer_step",
                                    "MoE on every step-th layer, step > 1");
    if (m->experts > 0) {
        m->moe_dense_layers = first;
        m->moe_shared_experts = 1;
        m->moe_shared_ffn_hidden = m->moe_ffn_hidden;
    }
    m->ffn = DP_FFN_SWIGLU;
    m->norm = DP_NORM_RMSNORM;
    m->pos = DP_POS_ROPE;
    /* chunked attention on the RoPE layers */
    const cJSON *cv = cJSON_GetObjectItemCaseSensitive(root, "attention_chunk_size");
    if (cJSON_IsNull(cv))
        chunk = 0;
    else if (hf_int(jr, root, k_chunk, false, &chunk))
        return jr->err->code;
    int64_t rope_layers = m->layers - m->layers / interval;
    const cJSON *nr = cJSON_GetObjectItemCaseSensitive(root, "no_rope_layers");
    if (cJSON_IsArray(nr) && cJSON_GetArraySize(nr) > 0) {
        if (cJSON_GetArraySize(nr) != m->layers)
            return dp_err_set(jr->err, DP_EINVAL,
                              "%s: no_rope_layers: expected %lld entries (num_hidden_layers), "
                              "got %d",
                              jr->file, (long long)m->layers, cJSON_GetArraySize(nr));
        rope_layers = 0;
        for (const cJSON *e = nr->child; e; e = e->next)
            rope_layers += cJSON_IsNumber(e) && e->valuedouble != 0;
    }
    set_window(m, chunk, rope_layers);
    static const char *const drop[] = {"attention_dropout", NULL};
    m->dropout = any_positive(root, drop, hf_defaults[FAM_LLAMA4].dropout);
    return 0;
}

/*
 * Gemma (transformers GemmaConfig, Gemma2Config, Gemma3TextConfig). GemmaMLP is
 * down_proj(gelu_tanh(gate_proj(x)) * up_proj(x)): the gated three-matrix MLP dplan
 * calls swiglu (the same weights and GEMMs). Gemma 2 and 3 wrap both blocks in
 * pre- and post-norms (input_layernorm, post_attention_layernorm,
 * pre_feedforward_layernorm, post_feedforward_layernorm: four RMSNorms a layer);
 * Gemma 3 adds q_norm and k_norm, RMSNorm(head_dim). Sliding windows: Gemma2Config's
 * sliding_window (default 4096) on every other layer (layer i slides when (i + 1) % 2),
 * Gemma3TextConfig's on five of six (sliding_window_pattern, default 6), or as
 * layer_types lists them. Embedding scaling and logit soft-capping are element-wise
 * work dplan does not charge.
 */
static int gemma(struct dp_jr *jr, const cJSON *root, enum family fam, struct dp_model *m)
{
    static const char *const k_kv[] = {"num_key_value_heads", NULL};
    static const char *const k_ffn[] = {"intermediate_size", NULL};
    static const char *const k_pat[] = {"sliding_window_pattern", NULL};
    if (hf_int(jr, root, k_kv, false, &m->kv_heads) ||
        hf_int(jr, root, k_ffn, true, &m->ffn_hidden))
        return jr->err->code;
    m->ffn = DP_FFN_SWIGLU;
    m->norm = DP_NORM_RMSNORM;
    m->pos = DP_POS_ROPE;
    m->norms_per_layer = fam == FAM_GEMMA ? 2 : 4;
    m->qk_norm = fam == FAM_GEMMA3;
    bool bias = false;
    if (dp_jr_bool(jr, root, "attention_bias", false, &bias))
        return jr->err->code;
    m->qkv_bias = m->out_bias = bias;
    static const char *const drop[] = {"attention_dropout", NULL};
    m->dropout = any_positive(root, drop, hf_defaults[fam].dropout);
    if (fam == FAM_GEMMA)
        return 0;
    int64_t w = 0, pattern = fam == FAM_GEMMA2 ? 2 : 6;
    if (window_width(jr, root, 4096, &w) ||
        (fam == FAM_GEMMA3 && hf_int(jr, root, k_pat, false, &pattern)))
        return jr->err->code;
    int64_t sliding = sliding_but_every(m->layers, pattern);
    if (layer_types_sliding(jr, root, m, &sliding))
        return jr->err->code;
    set_window(m, w, sliding);
    return 0;
}

/*
 * gpt-oss (transformers GptOssConfig): every layer MoE, num_local_experts (default 128)
 * of intermediate_size, num_experts_per_tok (4) per token, the router a Linear with a
 * bias (E values a layer, counted as dplan's router bias), each expert's fused gate/up
 * and down projections with biases (gate_up_proj_bias, down_proj_bias: mlp_bias);
 * attention_bias (default true) on q, k, v and o, one learned sink logit per head
 * (GptOssAttention.sinks), and sliding_window (default 128) on every other layer
 * (layer i slides when (i + 1) % 2, or as layer_types lists them). The clamped
 * SwiGLU (swiglu_limit, swiglu_alpha) is element-wise work like SwiGLU's.
 */
static int gpt_oss(struct dp_jr *jr, const cJSON *root, struct dp_model *m)
{
    static const char *const k_kv[] = {"num_key_value_heads", NULL};
    static const char *const k_ffn[] = {"intermediate_size", NULL};
    static const char *const k_e[] = {"num_local_experts", NULL};
    static const char *const k_k[] = {"num_experts_per_tok", NULL};
    m->experts = 128;
    m->top_k = 4;
    m->ffn_hidden = 2880;
    if (hf_int(jr, root, k_kv, false, &m->kv_heads) ||
        hf_int(jr, root, k_ffn, false, &m->ffn_hidden) ||
        hf_int(jr, root, k_e, false, &m->experts) || hf_int(jr, root, k_k, false, &m->top_k))
        return jr->err->code;
    m->moe_ffn_hidden = m->ffn_hidden;
    m->moe_router_bias = true;
    m->mlp_bias = true;
    m->attn_sinks = true;
    m->ffn = DP_FFN_SWIGLU;
    m->norm = DP_NORM_RMSNORM;
    m->pos = DP_POS_ROPE;
    bool bias = true;
    if (dp_jr_bool(jr, root, "attention_bias", false, &bias))
        return jr->err->code;
    m->qkv_bias = m->out_bias = bias;
    static const char *const drop[] = {"attention_dropout", NULL};
    m->dropout = any_positive(root, drop, 0.0);
    int64_t w = 0, sliding = sliding_but_every(m->layers, 2);
    if (window_width(jr, root, 128, &w) || layer_types_sliding(jr, root, m, &sliding))
        return jr->err->code;
    set_window(m, w, sliding);
    return 0;
}

int dp__model_from_hf(struct dp_jr *jr, const cJSON *root, struct dp_model *m)
{
    memset(m, 0, sizeof *m);
    enum family fam = FAM_LLAMA;
    char type[64] = "";
    if (detect_family(jr, root, &fam, type, sizeof type))
        return jr->err->code;
    snprintf(m->format, sizeof m->format, "hf:%s", type);
    /* The name: _name_or_path if present, else the file's stem. */
    const cJSON *nm = cJSON_GetObjectItemCaseSensitive(root, "_name_or_path");
    const char *base = strrchr(jr->file, '/');
    base = base ? base + 1 : jr->file;
    if (cJSON_IsString(nm) && nm->valuestring[0]) {
        const char *s = strrchr(nm->valuestring, '/');
        snprintf(m->name, sizeof m->name, "%s", s ? s + 1 : nm->valuestring);
    } else if (strcmp(base, "config.json") == 0 && base > jr->file + 1) {
        /* .../Llama-2-7b-hf/config.json: the directory names the model. */
        const char *end = base - 1, *start = end;
        while (start > jr->file && start[-1] != '/')
            start--;
        snprintf(m->name, sizeof m->name, "%.*s", (int)(end - start), start);
    } else {
        size_t n = strlen(base);
        if (n > 5 && strcmp(base + n - 5, ".json") == 0)
            n -= 5;
        snprintf(m->name, sizeof m->name, "%.*s", (int)n, base);
    }
    m->norms_per_layer = 2;

    static const char *const k_layers[] = {"num_hidden_layers", "n_layer", "num_layers", NULL};
    static const char *const k_hidden[] = {"hidden_size", "n_embd", NULL};
    static const char *const k_heads[] = {"num_attention_heads", "n_head", NULL};
    static const char *const k_vocab[] = {"vocab_size", NULL};
    static const char *const k_inter[] = {"intermediate_size", NULL};
    static const char *const k_experts[] = {"num_local_experts", NULL};
    {
        /* Every required key of this family at once, when two or more are missing. */
        const char *const *req[5] = {k_layers, k_hidden, k_heads, k_vocab, NULL};
        int nreq = 4;
        if (fam == FAM_LLAMA || fam == FAM_MISTRAL || fam == FAM_QWEN2 || fam == FAM_MIXTRAL ||
            fam == FAM_NEOX || fam == FAM_QWEN3 || fam == FAM_PHI3 || fam == FAM_GRANITE ||
            fam == FAM_GEMMA || fam == FAM_GEMMA2 || fam == FAM_GEMMA3 || fam == FAM_GLM4_MOE ||
            fam == FAM_OLMO2 || fam == FAM_OLMOE)
            req[nreq++] = k_inter;
        char list[256] = "";
        size_t n = 0;
        int missing = 0;
        for (int i = 0; i < nreq; i++)
            if (!first_key(root, req[i]) && n < sizeof list)
                n += (size_t)snprintf(list + n, sizeof list - n, "%s%s", missing++ ? ", " : "",
                                      req[i][0]);
        if (missing >= 2)
            return dp_err_set(jr->err, DP_EINVAL, "%s: missing required fields: %s", jr->file,
                              list);
    }
    if (hf_int(jr, root, k_layers, true, &m->layers) ||
        hf_int(jr, root, k_hidden, true, &m->hidden) ||
        hf_int(jr, root, k_heads, true, &m->heads) || hf_int(jr, root, k_vocab, true, &m->vocab))
        return jr->err->code;
    const struct hf_defaults *def = &hf_defaults[fam];
    m->kv_heads = def->kv_heads > 0 ? def->kv_heads : m->heads;
    static const char *const k_headdim[] = {"head_dim", NULL};
    if (hf_int(jr, root, k_headdim, false, &m->head_dim))
        return jr->err->code;
    if (m->head_dim == 0)
        m->head_dim = def->head_dim;
    if (m->head_dim == 0 && m->hidden % m->heads == 0)
        m->head_dim = m->hidden / m->heads;
    bool tie = false;
    static const char *const k_maxpos[] = {"max_position_embeddings", "n_positions", NULL};
    int64_t maxpos = def->max_pos;
    /* context limits run past the shapes' bound: Llama 4 Scout's is 10,485,760 */
    if (hf_int_max(jr, root, k_maxpos, false, 1000000000, &maxpos))
        return jr->err->code;
    /*
     * A config states a context limit, which is the training length only for models
     * trained at their full context (GPT-2 1024, NeoX/Falcon 2048, Llama 2 4096, Llama 3
     * 8192). Long limits are context extensions or inference limits (Qwen2's configs say
     * 131072; the report pre-trains at 4096 and extends to 32768 at the end, Yang et al.
     * 2024, Sec. 3.2; Mixtral-8x22B says 65536): planning at them asks another question.
     * Above DP_HF_TRAIN_SEQ dplan assumes DP_HF_TRAIN_SEQ, the length Llama 3 spends its
     * pre-training at (Dubey et al. 2024, Sec. 3.4.1), and says so.
     */
    const char *maxkey = first_key(root, k_maxpos);
    m->seq_len = maxpos;
    if (!maxkey && maxpos <= DP_HF_TRAIN_SEQ)
        snprintf(m->seq_len_from, sizeof m->seq_len_from, "the config has no %s: %s's default %lld",
                 k_maxpos[fam == FAM_GPT2], def->cls, (long long)maxpos);
    else if (!maxkey) {
        m->seq_len = DP_HF_TRAIN_SEQ;
        snprintf(m->seq_len_from, sizeof m->seq_len_from,
                 "dplan's default; the config has no max_position_embeddings and %s's default "
                 "%lld is a context limit, not a training length",
                 def->cls, (long long)maxpos);
    } else if (maxpos <= DP_HF_TRAIN_SEQ)
        snprintf(m->seq_len_from, sizeof m->seq_len_from, "the config's %s", maxkey);
    else {
        m->seq_len = DP_HF_TRAIN_SEQ;
        snprintf(m->seq_len_from, sizeof m->seq_len_from,
                 "dplan's default; the config's %s %lld is a context limit, not a training "
                 "length",
                 maxkey, (long long)maxpos);
    }

    switch (fam) {
    case FAM_LLAMA:
    case FAM_MISTRAL:
    case FAM_QWEN2:
    case FAM_MIXTRAL:
    case FAM_QWEN3:
    case FAM_PHI3:
    case FAM_GRANITE: {
        static const char *const k_kv[] = {"num_key_value_heads", NULL};
        if (hf_int(jr, root, k_kv, false, &m->kv_heads) ||
            hf_int(jr, root, k_inter, true, &m->ffn_hidden))
            return jr->err->code;
        m->ffn = DP_FFN_SWIGLU; /* hidden_act silu with gate/up/down projections */
        m->norm = DP_NORM_RMSNORM;
        m->pos = DP_POS_ROPE;
        bool attn_bias = false, mlp_bias = false;
        if (dp_jr_bool(jr, root, "attention_bias", false, &attn_bias) ||
            dp_jr_bool(jr, root, "mlp_bias", false, &mlp_bias))
            return jr->err->code;
        if (fam == FAM_QWEN2) {
            /* Qwen2Attention: q/k/v_proj have bias=True, o_proj bias=False. */
            m->qkv_bias = true;
        } else if (fam == FAM_MISTRAL || fam == FAM_MIXTRAL || fam == FAM_PHI3) {
            /* MistralAttention / MixtralAttention / Phi3Attention (fused qkv_proj and
             * gate_up_proj, the same weights as Llama's): no biases, no attention_bias key. */
        } else if (fam == FAM_QWEN3) {
            /* Qwen3Attention: attention_bias on q, k, v and o; q_norm and k_norm are
             * RMSNorm(head_dim). */
            m->qkv_bias = m->out_bias = attn_bias;
            m->qk_norm = true;
        } else {
            /* LlamaAttention: attention_bias applies to q, k, v and o; GraniteAttention
             * and GraniteMLP are Llama's (its embedding, residual, attention and logit
             * multipliers are scalars: element-wise work not charged, and `dplan run`
             * trains the Llama form). */
            m->qkv_bias = m->out_bias = attn_bias;
            m->mlp_bias = mlp_bias;
        }
        if (fam == FAM_MIXTRAL) {
            static const char *const k_k[] = {"num_experts_per_tok", NULL};
            m->top_k = 2;   /* MixtralConfig.num_experts_per_tok */
            m->experts = 8; /* MixtralConfig.num_local_experts */
            if (hf_int(jr, root, k_experts, false, &m->experts) ||
                hf_int(jr, root, k_k, false, &m->top_k))
                return jr->err->code;
            m->moe_ffn_hidden = m->ffn_hidden;
        }
        original_seq_len(root, maxpos, m);
        if (hf_window(jr, root, fam, m))
            return jr->err->code;
        if (fam == FAM_PHI3) {
            /* Phi3Config keeps the pre-training length at the top level
             * (original_max_position_embeddings, class default 4096), LongRoPE's base. */
            const cJSON *o =
                cJSON_GetObjectItemCaseSensitive(root, "original_max_position_embeddings");
            double orig = cJSON_IsNumber(o) ? o->valuedouble : 4096;
            if (orig >= 1 && orig < (double)maxpos && orig < (double)m->seq_len) {
                m->seq_len = (int64_t)orig;
                snprintf(m->seq_len_from, sizeof m->seq_len_from, "%s",
                         cJSON_IsNumber(o)
                             ? "the config's original_max_position_embeddings"
                             : "Phi3Config's default original_max_position_embeddings "
                               "4096");
            }
        }
        static const char *const drop[] = {"attention_dropout", NULL};
        static const char *const phi3_drop[] = {"resid_pdrop", "embd_pdrop", "attention_dropout",
                                                NULL};
        m->dropout = any_positive(root, fam == FAM_PHI3 ? phi3_drop : drop, def->dropout);
        break;
    }
    case FAM_GEMMA:
    case FAM_GEMMA2:
    case FAM_GEMMA3:
        if (gemma(jr, root, fam, m))
            return jr->err->code;
        original_seq_len(root, maxpos, m);
        tie = true;
        break;
    case FAM_GPT_OSS:
        if (gpt_oss(jr, root, m))
            return jr->err->code;
        original_seq_len(root, maxpos, m);
        break;
    case FAM_QWEN2_MOE:
    case FAM_QWEN3_MOE:
        if (qwen_moe(jr, root, fam, m) || hf_window(jr, root, fam, m))
            return jr->err->code;
        original_seq_len(root, maxpos, m);
        break;
    case FAM_DEEPSEEK_V2:
    case FAM_DEEPSEEK_V3:
        if (deepseek(jr, root, fam, m))
            return jr->err->code;
        original_seq_len(root, maxpos, m);
        break;
    case FAM_GLM4_MOE:
        if (glm4_moe(jr, root, m))
            return jr->err->code;
        original_seq_len(root, maxpos, m);
        break;
    case FAM_LLAMA4:
        if (llama4(jr, root, m))
            return jr->err->code;
        original_seq_len(root, maxpos, m);
        break;
    case FAM_OLMO2:
    case FAM_OLMOE: {
        /* OLMo 2 (transformers Olmo2Config; modeling_olmo2.py): Llama's SwiGLU MLP and
         * RoPE; the two RMSNorms after attention and after the MLP inside the residual
         * (post_attention_layernorm, post_feedforward_layernorm: the same two norms, the
         * same costs); q_norm RMSNorm(heads head_dim) and k_norm RMSNorm(kv_heads head_dim)
         * over all heads at once; attention_bias on q, k, v and o (default False).
         * OLMoE (OlmoeConfig; modeling_olmoe.py; Muennighoff et al. 2024): the same
         * attention and q/k norms in Llama's pre-norm layer, and every layer's MLP sparse:
         * a router Linear(hidden, num_experts) without bias over num_experts SwiGLU experts
         * of intermediate_size, the top num_experts_per_tok, no shared expert (class
         * defaults 64 and 8); clip_qkv and norm_topk_prob change values, not shapes or
         * work. */
        static const char *const k_kv[] = {"num_key_value_heads", NULL};
        static const char *const k_e[] = {"num_experts", "num_local_experts", NULL};
        static const char *const k_k[] = {"num_experts_per_tok", NULL};
        if (hf_int(jr, root, k_kv, false, &m->kv_heads) ||
            hf_int(jr, root, k_inter, true, &m->ffn_hidden))
            return jr->err->code;
        if (fam == FAM_OLMOE) {
            m->experts = 64;
            m->top_k = 8;
            if (hf_int(jr, root, k_e, false, &m->experts) ||
                hf_int(jr, root, k_k, false, &m->top_k))
                return jr->err->code;
            m->moe_ffn_hidden = m->ffn_hidden;
        }
        m->ffn = DP_FFN_SWIGLU;
        m->norm = DP_NORM_RMSNORM;
        m->pos = DP_POS_ROPE;
        m->qk_norm = m->qk_norm_full = true;
        bool bias = false;
        if (dp_jr_bool(jr, root, "attention_bias", false, &bias))
            return jr->err->code;
        m->qkv_bias = m->out_bias = bias;
        static const char *const drop[] = {"attention_dropout", NULL};
        m->dropout = any_positive(root, drop, def->dropout);
        original_seq_len(root, maxpos, m);
        break;
    }
    case FAM_GPT2: {
        /* n_inner: null means 4 * n_embd (GPT2MLP). */
        static const char *const k_ffn[] = {"n_inner", NULL};
        m->ffn_hidden = 4 * m->hidden;
        if (hf_int(jr, root, k_ffn, false, &m->ffn_hidden))
            return jr->err->code;
        m->ffn = DP_FFN_GELU;
        m->norm = DP_NORM_LAYERNORM;
        m->pos = DP_POS_LEARNED;
        m->max_pos = maxpos;
        m->qkv_bias = m->out_bias = m->mlp_bias = true;
        tie = true;
        static const char *const drop[] = {"resid_pdrop", "embd_pdrop", "attn_pdrop", NULL};
        m->dropout = any_positive(root, drop, def->dropout);
        break;
    }
    case FAM_NEOX: {
        if (hf_int(jr, root, k_inter, true, &m->ffn_hidden))
            return jr->err->code;
        m->ffn = DP_FFN_GELU;
        m->norm = DP_NORM_LAYERNORM;
        m->pos = DP_POS_ROPE;
        bool bias = true; /* GPTNeoXConfig.attention_bias defaults to True */
        if (dp_jr_bool(jr, root, "attention_bias", false, &bias))
            return jr->err->code;
        m->qkv_bias = m->out_bias = bias;
        m->mlp_bias = true;
        static const char *const drop[] = {"hidden_dropout", "attention_dropout", NULL};
        m->dropout = any_positive(root, drop, def->dropout);
        break;
    }
    case FAM_FALCON: {
        bool new_arch = false;
        const cJSON *mt = cJSON_GetObjectItemCaseSensitive(root, "model_type");
        if (cJSON_IsString(mt) && strcmp(mt->valuestring, "RefinedWeb") == 0)
            new_arch = true; /* the original Falcon-40B code: grouped KV, two norms */
        bool multi_query = true, parallel = true, bias = false, alibi = false;
        if (dp_jr_bool(jr, root, "new_decoder_architecture", false, &new_arch) ||
            dp_jr_bool(jr, root, "multi_query", false, &multi_query) ||
            dp_jr_bool(jr, root, "parallel_attn", false, &parallel) ||
            dp_jr_bool(jr, root, "bias", false, &bias) ||
            dp_jr_bool(jr, root, "alibi", false, &alibi))
            return jr->err->code;
        /* FalconAttention: num_kv_heads (None = the head count) with the new decoder
         * architecture or without multi_query, one KV head otherwise. */
        static const char *const k_kv[] = {"num_kv_heads", "n_head_kv", NULL};
        if (hf_int(jr, root, k_kv, false, &m->kv_heads))
            return jr->err->code;
        if (!new_arch && multi_query)
            m->kv_heads = 1;
        /* FalconDecoderLayer: parallel attention without the new architecture has one
         * input_layernorm; the new architecture has num_ln_in_parallel_attn of them
         * (None = 2: ln_attn and ln_mlp); otherwise two (post_attention). */
        int64_t nln = 2;
        static const char *const k_nln[] = {"num_ln_in_parallel_attn", NULL};
        if (new_arch && hf_int(jr, root, k_nln, false, &nln))
            return jr->err->code;
        m->norms_per_layer = (parallel && !new_arch) ? 1 : new_arch && nln == 1 ? 1 : 2;
        static const char *const k_ffn[] = {"ffn_hidden_size", NULL};
        m->ffn_hidden = 4 * m->hidden;
        if (hf_int(jr, root, k_ffn, false, &m->ffn_hidden))
            return jr->err->code;
        m->ffn = DP_FFN_GELU;
        m->norm = DP_NORM_LAYERNORM;
        m->pos = alibi ? DP_POS_ALIBI : DP_POS_ROPE;
        m->qkv_bias = m->out_bias = m->mlp_bias = bias;
        tie = true; /* FalconForCausalLM ties lm_head to word_embeddings */
        static const char *const drop[] = {"hidden_dropout", "attention_dropout", NULL};
        m->dropout = any_positive(root, drop, def->dropout);
        break;
    }
    }
    if (dp_jr_bool(jr, root, "tie_word_embeddings", false, &tie))
        return jr->err->code;
    m->tied_embeddings = tie;
    return dp_model_validate(m, jr->file, jr->err);
}
