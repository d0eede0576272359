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

static int hf_int(struct dp_jr *jr, const cJSON *root, const char *const *aliases, bool required,
                  int64_t *out)
{
    const char *k = first_key(root, aliases);
    if (!k) {
        if (!required)
            return 0;
        return dp_jr_int(jr, root, aliases[0], true, 1, 10000000, out);
    }
    return dp_jr_int(jr, root, k, true, 1, 10000000, out);
}

static bool any_positive(const cJSON *root, const char *const *keys)
{
    for (const char *const *k = keys; *k; k++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, *k);
        if (cJSON_IsNumber(v) && v->valuedouble > 0)
            return true;
    }
    return false;
}

enum family { FAM_LLAMA, FAM_QWEN2, FAM_MIXTRAL, FAM_GPT2, FAM_NEOX, FAM_FALCON };

static const struct {
    const char *type;
    enum family fam;
} types[] = {
    {"llama", FAM_LLAMA},       {"mistral", FAM_LLAMA},
    {"qwen2", FAM_QWEN2},       {"mixtral", FAM_MIXTRAL},
    {"gpt2", FAM_GPT2},         {"gpt_neox", FAM_NEOX},
    {"falcon", FAM_FALCON},     {"RefinedWebModel", FAM_FALCON},
    {"RefinedWeb", FAM_FALCON},
};

/* Infer the family when model_type is absent: from "architectures" or the key style. */
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
        for (size_t i = 0; i < sizeof types / sizeof types[0]; i++)
            if (strcmp(mt->valuestring, types[i].type) == 0) {
                *fam = types[i].fam;
                snprintf(type, cap, "%s", types[i].type);
                return 0;
            }
        return dp_err_set(jr->err, DP_EINVAL,
                          "%s: model_type: unsupported \"%.40s\" (supported: llama, mistral, "
                          "mixtral, qwen2, gpt2, gpt_neox, falcon; or write a dplan model.json)",
                          jr->file, mt->valuestring);
    }
    const cJSON *arch = cJSON_GetObjectItemCaseSensitive(root, "architectures");
    const cJSON *a0 = cJSON_IsArray(arch) ? cJSON_GetArrayItem(arch, 0) : NULL;
    if (cJSON_IsString(a0)) {
        static const struct {
            const char *prefix;
            enum family fam;
            const char *type;
        } archs[] = {{"Llama", FAM_LLAMA, "llama"},       {"Mistral", FAM_LLAMA, "mistral"},
                     {"Mixtral", FAM_MIXTRAL, "mixtral"}, {"Qwen2", FAM_QWEN2, "qwen2"},
                     {"GPT2", FAM_GPT2, "gpt2"},          {"GPTNeoX", FAM_NEOX, "gpt_neox"},
                     {"Falcon", FAM_FALCON, "falcon"},    {"RW", FAM_FALCON, "falcon"}};
        for (size_t i = 0; i < sizeof archs / sizeof archs[0]; i++)
            if (strncmp(a0->valuestring, archs[i].prefix, strlen(archs[i].prefix)) == 0) {
                *fam = archs[i].fam;
                snprintf(type, cap, "%s", archs[i].type);
                return 0;
            }
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

int dp__model_from_hf(struct dp_jr *jr, const cJSON *root, struct dp_model *m)
{
    memset(m, 0, sizeof *m);
    enum family fam = FAM_LLAMA;
    char type[24] = "";
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
        const char *const *req[6] = {k_layers, k_hidden, k_heads, k_vocab, NULL, NULL};
        int nreq = 4;
        if (fam == FAM_LLAMA || fam == FAM_QWEN2 || fam == FAM_MIXTRAL || fam == FAM_NEOX)
            req[nreq++] = k_inter;
        if (fam == FAM_MIXTRAL)
            req[nreq++] = k_experts;
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
    m->kv_heads = m->heads;
    static const char *const k_headdim[] = {"head_dim", NULL};
    if (hf_int(jr, root, k_headdim, false, &m->head_dim))
        return jr->err->code;
    if (m->head_dim == 0 && m->hidden % m->heads == 0)
        m->head_dim = m->hidden / m->heads;
    bool tie = false;
    static const char *const k_maxpos[] = {"max_position_embeddings", "n_positions", NULL};
    int64_t maxpos = 2048;
    if (hf_int(jr, root, k_maxpos, false, &maxpos))
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
    if (!maxkey)
        snprintf(m->seq_len_from, sizeof m->seq_len_from,
                 "the config has no max_position_embeddings; 2048 assumed");
    else if (maxpos <= DP_HF_TRAIN_SEQ)
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
    case FAM_QWEN2:
    case FAM_MIXTRAL: {
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
        } else {
            /* LlamaAttention: attention_bias applies to q, k, v and o. */
            m->qkv_bias = m->out_bias = attn_bias;
            m->mlp_bias = mlp_bias;
        }
        if (fam == FAM_MIXTRAL) {
            static const char *const k_k[] = {"num_experts_per_tok", NULL};
            m->top_k = 2;
            if (hf_int(jr, root, k_experts, true, &m->experts) ||
                hf_int(jr, root, k_k, false, &m->top_k))
                return jr->err->code;
            m->moe_ffn_hidden = m->ffn_hidden;
        }
        /* Context-extended models (Llama 3.1) train at the original length. */
        const cJSON *rs = cJSON_GetObjectItemCaseSensitive(root, "rope_scaling");
        if (cJSON_IsObject(rs)) {
            const cJSON *o =
                cJSON_GetObjectItemCaseSensitive(rs, "original_max_position_embeddings");
            if (cJSON_IsNumber(o) && o->valuedouble >= 1 && o->valuedouble < maxpos) {
                m->seq_len = (int64_t)o->valuedouble;
                snprintf(m->seq_len_from, sizeof m->seq_len_from,
                         "the config's rope_scaling.original_max_position_embeddings");
            }
        }
        static const char *const drop[] = {"attention_dropout", NULL};
        m->dropout = any_positive(root, drop);
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
        m->dropout = any_positive(root, drop);
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
        m->dropout = any_positive(root, drop);
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
        if (new_arch) {
            static const char *const k_kv[] = {"num_kv_heads", "n_head_kv", NULL};
            if (hf_int(jr, root, k_kv, true, &m->kv_heads))
                return jr->err->code;
        } else if (multi_query) {
            m->kv_heads = 1;
        }
        /* FalconDecoderLayer: parallel attention without the new architecture has one
         * input_layernorm; otherwise two norms (ln_attn/ln_mlp or post_attention). */
        m->norms_per_layer = (parallel && !new_arch) ? 1 : 2;
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
        m->dropout = any_positive(root, drop);
        break;
    }
    }
    if (dp_jr_bool(jr, root, "tie_word_embeddings", false, &tie))
        return jr->err->code;
    m->tied_embeddings = tie;
    return dp_model_validate(m, jr->file, jr->err);
}
