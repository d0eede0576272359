/*
 * dplan model FILE [--json]: the parsed architecture and exact parameter count.
 */
#include "cli.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

static const char help[] =
    "usage: dplan model MODEL [--json]\n"
    "       dplan model --list\n\n"
    "Show a model's architecture and exact parameter count (total and, for MoE,\n"
    "active per token). MODEL is a dplan model.json, a Hugging Face config.json\n"
    "(detected by content), or the name of a shipped model (profiles/models).\n\n"
    "  --json    machine-readable output\n"
    "  --list    list the shipped models\n";

static void print_count(const char *label, int64_t n)
{
    /* 6,738,415,616 (6.74B) */
    char digits[32], grouped[48];
    snprintf(digits, sizeof digits, "%lld", (long long)n);
    int len = (int)strlen(digits), j = 0;
    for (int i = 0; i < len; i++) {
        grouped[j++] = digits[i];
        if ((len - i - 1) % 3 == 0 && i != len - 1)
            grouped[j++] = ',';
    }
    grouped[j] = '\0';
    double v = (double)n;
    const char *unit = v >= 1e12 ? "T" : v >= 1e9 ? "B" : v >= 1e6 ? "M" : "K";
    double div = v >= 1e12 ? 1e12 : v >= 1e9 ? 1e9 : v >= 1e6 ? 1e6 : 1e3;
    printf("%-17s %s (%.2f%s)\n", label, grouped, v / div, unit);
}

static int list_models(void)
{
    char **names;
    int n;
    struct dp_err err = {0};
    if (dp_profile_names("models", &names, &n, &err))
        return cli_fail(&err);
    printf("%-18s %10s %6s %6s\n", "model", "params", "layers", "hidden");
    for (int i = 0; i < n; i++) {
        struct dp_model m;
        struct dp_err e2 = {0};
        if (dp_model_load(names[i], &m, &e2)) {
            printf("%-18s (unreadable: %s)\n", names[i], e2.msg);
            continue;
        }
        struct dp_param_count pc;
        dp_model_count(&m, &pc);
        char cnt[32];
        printf("%-18s %10s %6lld %6lld\n", names[i], cli_count_short(pc.total, cnt, sizeof cnt),
               (long long)m.layers, (long long)m.hidden);
    }
    dp_names_free(names, n);
    return 0;
}

int cmd_model(int argc, char **argv)
{
    static const struct option opts[] = {{"json", no_argument, 0, 'j'},
                                         {"list", no_argument, 0, 'l'},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    bool json = false, list = false;
    int c;
    optind = 1;
    opterr = 0;
    while ((c = cli_next_opt("model", argc, argv, ":h", opts, NULL)) != -1) {
        switch (c) {
        case 'j': json = true; break;
        case 'l': list = true; break;
        case 'h': fputs(help, stdout); return 0;
        default: return 2;
        }
    }
    if (list)
        return list_models();
    if (optind != argc - 1)
        return cli_usage_error("model", "expected one MODEL argument");
    struct dp_model m;
    struct dp_err err = {0};
    if (dp_model_load(argv[optind], &m, &err))
        return cli_fail(&err);
    struct dp_param_count pc;
    dp_model_count(&m, &pc);
    if (json) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "name", m.name);
        cJSON_AddStringToObject(o, "format", m.format);
        cJSON_AddNumberToObject(o, "params", (double)pc.total);
        cJSON_AddNumberToObject(o, "active_params", (double)pc.active);
        cJSON_AddNumberToObject(o, "layers", (double)m.layers);
        cJSON_AddNumberToObject(o, "hidden", (double)m.hidden);
        cJSON *b = cJSON_AddObjectToObject(o, "breakdown");
        cJSON_AddNumberToObject(b, "embedding", (double)pc.embedding);
        cJSON_AddNumberToObject(b, "per_layer", (double)pc.per_layer);
        cJSON_AddNumberToObject(b, "per_layer_active", (double)pc.per_layer_active);
        cJSON_AddNumberToObject(b, "per_dense_layer", (double)pc.per_dense_layer);
        cJSON_AddNumberToObject(b, "attention_per_layer", (double)pc.attention);
        struct dp_layer_kinds k;
        dp_model_layer_kinds(&m, 0, m.layers, &k);
        cJSON_AddNumberToObject(o, "dense_layers", k.n[DP_LAYER_DENSE]);
        cJSON_AddNumberToObject(o, "moe_layers", k.n[DP_LAYER_MOE]);
        cJSON_AddNumberToObject(b, "final_norm", (double)pc.final_norm);
        cJSON_AddNumberToObject(b, "lm_head", (double)pc.lm_head);
        cJSON_AddItemToObject(o, "model", dp_model_to_json(&m));
        cli_print_json(o);
        return 0;
    }
    printf("model             %s (%s)\n", m.name, m.format);
    printf("layers            %lld\n", (long long)m.layers);
    printf("hidden            %lld\n", (long long)m.hidden);
    if (m.mla) {
        printf("heads             %lld (MLA: q/k head_dim %lld = %lld + %lld rope, v %lld)\n",
               (long long)m.heads, (long long)m.head_dim, (long long)m.mla_nope_dim,
               (long long)m.mla_rope_dim, (long long)m.mla_v_dim);
        if (m.mla_q_rank)
            printf("latents           q %lld, kv %lld\n", (long long)m.mla_q_rank,
                   (long long)m.mla_kv_rank);
        else
            printf("latents           q none (plain q projection), kv %lld\n",
                   (long long)m.mla_kv_rank);
    } else {
        printf("heads             %lld (kv %lld%s, head_dim %lld%s%s)\n", (long long)m.heads,
               (long long)m.kv_heads,
               m.kv_heads == m.heads ? ": MHA"
               : m.kv_heads == 1     ? ": MQA"
                                     : ": GQA",
               (long long)m.head_dim,
               m.qk_norm_full ? ", q/k norm over all heads"
               : m.qk_norm    ? ", q/k norm"
                              : "",
               m.attn_sinks ? ", attention sinks" : "");
    }
    if (m.experts == 0 || m.moe_dense_layers > 0)
        printf("ffn               %s, %lld%s%s\n", dp_ffn_name(m.ffn), (long long)m.ffn_hidden,
               m.experts ? " (dense layers)" : "",
               strncmp(m.format, "hf:gemma", 8) == 0
                   ? " (Gemma's gated GELU: the same three matrices)"
                   : "");
    if (m.experts) {
        if (m.moe_dense_layers > 0)
            printf("layer kinds       %lld dense (0-%lld), then %lld MoE\n",
                   (long long)m.moe_dense_layers, (long long)m.moe_dense_layers - 1,
                   (long long)(m.layers - m.moe_dense_layers));
        printf("experts           %lld x %s %lld, top-%lld per token%s\n", (long long)m.experts,
               dp_ffn_name(m.ffn), (long long)m.moe_ffn_hidden, (long long)m.top_k,
               m.moe_router_bias ? ", router bias" : "");
        if (m.moe_shared_experts)
            printf("shared experts    %lld x %lld%s\n", (long long)m.moe_shared_experts,
                   (long long)m.moe_shared_ffn_hidden, m.moe_shared_gate ? ", sigmoid gate" : "");
    }
    printf("vocab             %lld\n", (long long)m.vocab);
    printf("seq_len           %lld\n", (long long)m.seq_len);
    if (m.window > 0)
        printf(
            "attention         sliding window %lld on %lld of %lld layers (%.0f%% of full causal "
            "attention's work at seq_len %lld)\n",
            (long long)m.window, (long long)m.window_layers, (long long)m.layers,
            100 * dp_model_attn_pair_ratio(&m, m.seq_len), (long long)m.seq_len);
    printf("norm              %s x%d per layer\n", dp_norm_name(m.norm), m.norms_per_layer);
    printf("position          %s", dp_pos_name(m.pos));
    if (m.pos == DP_POS_LEARNED)
        printf(" (%lld)", (long long)m.max_pos);
    printf("\nembeddings        %s\n", m.tied_embeddings ? "tied" : "untied");
    printf("biases            qkv %s, out %s, mlp %s\n", m.qkv_bias ? "yes" : "no",
           m.out_bias ? "yes" : "no", m.mlp_bias ? "yes" : "no");
    print_count("params", pc.total);
    if (m.experts)
        print_count("active params", pc.active);
    print_count("  embedding", pc.embedding);
    if (m.experts && m.moe_dense_layers)
        print_count("  dense layer", pc.per_dense_layer);
    print_count(m.experts ? "  MoE layer" : "  per layer", pc.per_layer);
    if (m.experts)
        print_count("    active", pc.per_layer_active);
    print_count("  lm head", pc.lm_head);
    return 0;
}
