/*
 * Model loading and parameter counts: every shipped model and every Hugging
 * Face fixture against the published totals in tests/fixtures/param_counts.json
 * (sources cited there), plus format detection and HF defaults.
 */
#include "check.h"
#include "core/core.h"

#include <cjson/cJSON.h>
#include <stdlib.h>

static const char *src_dir(void)
{
    const char *d = getenv("DPLAN_SOURCE_DIR");
    return d ? d : ".";
}

static void test_published_counts(void)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/tests/fixtures/param_counts.json", src_dir());
    cJSON *root;
    struct dp_err err = {0};
    CHECK_EQ(dp_json_load_file(path, &root, &err), 0);
    if (err.code) {
        fprintf(stderr, "%s\n", err.msg);
        return;
    }
    int files = 0;
    for (cJSON *e = root->child; e; e = e->next) {
        int64_t total = (int64_t)cJSON_GetObjectItem(e, "total")->valuedouble;
        int64_t active = (int64_t)cJSON_GetObjectItem(e, "active")->valuedouble;
        cJSON *fl = cJSON_GetObjectItem(e, "files");
        for (cJSON *f = fl ? fl->child : NULL; f; f = f->next) {
            char file[4096];
            snprintf(file, sizeof file, "%s/%s", src_dir(), f->valuestring);
            struct dp_model m;
            struct dp_err e2 = {0};
            if (dp_model_load(file, &m, &e2)) {
                fprintf(stderr, "%s: %s\n", e->string, e2.msg);
                check_failures++;
                continue;
            }
            struct dp_param_count pc;
            dp_model_count(&m, &pc);
            if (pc.total != total || pc.active != active) {
                fprintf(stderr, "%s (%s): total %lld active %lld, published %lld / %lld\n",
                        e->string, f->valuestring, (long long)pc.total, (long long)pc.active,
                        (long long)total, (long long)active);
                check_failures++;
            }
            files++;
        }
    }
    CHECK(files >= 40);
    cJSON_Delete(root);
}

static struct dp_model load(const char *rel)
{
    char file[4096];
    snprintf(file, sizeof file, "%s/%s", src_dir(), rel);
    struct dp_model m = {0};
    struct dp_err err = {0};
    if (dp_model_load(file, &m, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        check_failures++;
    }
    return m;
}

static void test_hf_details(void)
{
    /* GPT-2: n_inner null means 4h; tied; learned positions; dropout from *_pdrop. */
    struct dp_model g = load("tests/fixtures/hf/gpt2.json");
    CHECK_EQ(g.ffn_hidden, 4 * 768);
    CHECK(g.tied_embeddings);
    CHECK_EQ(g.pos, DP_POS_LEARNED);
    CHECK_EQ(g.max_pos, 1024);
    CHECK(g.dropout);
    CHECK_STR(g.format, "hf:gpt2");
    /* Llama 3.1: trains at original_max_position_embeddings, not 131072. */
    struct dp_model l = load("tests/fixtures/hf/meta-llama-3.1-8b.json");
    CHECK_EQ(l.seq_len, 8192);
    CHECK_EQ(l.kv_heads, 8);
    CHECK(!l.tied_embeddings);
    CHECK_EQ(l.ffn, DP_FFN_SWIGLU);
    CHECK_STR(l.name, "meta-llama-3.1-8b");
    /* Qwen2: QKV bias only; the 0.5B ties its embeddings. */
    struct dp_model q = load("tests/fixtures/hf/qwen2-0.5b.json");
    CHECK(q.qkv_bias && !q.out_bias && !q.mlp_bias);
    CHECK(q.tied_embeddings);
    /* Falcon-7B: multi-query, one norm per layer; Falcon-40B: 8 KV heads, two norms. */
    struct dp_model f7 = load("tests/fixtures/hf/falcon-7b.json");
    CHECK_EQ(f7.kv_heads, 1);
    CHECK_EQ(f7.norms_per_layer, 1);
    struct dp_model f40 = load("tests/fixtures/hf/falcon-40b.json");
    CHECK_EQ(f40.kv_heads, 8);
    CHECK_EQ(f40.norms_per_layer, 2);
    /* Mixtral: experts from num_local_experts, top-k from num_experts_per_tok. */
    struct dp_model mx = load("tests/fixtures/hf/mixtral-8x7b-v0.1.json");
    CHECK_EQ(mx.experts, 8);
    CHECK_EQ(mx.top_k, 2);
    CHECK_EQ(mx.moe_ffn_hidden, 14336);
    /* Qwen2-MoE: one shared expert of shared_expert_intermediate_size behind a sigmoid
     * gate, q/k/v biases, every layer sparse. */
    struct dp_model q2 = load("tests/fixtures/hf/qwen1.5-moe-a2.7b.json");
    CHECK_STR(q2.format, "hf:qwen2_moe");
    CHECK_EQ(q2.experts, 60);
    CHECK_EQ(q2.top_k, 4);
    CHECK_EQ(q2.moe_ffn_hidden, 1408);
    CHECK_EQ(q2.moe_shared_experts, 1);
    CHECK_EQ(q2.moe_shared_ffn_hidden, 5632);
    CHECK(q2.moe_shared_gate && q2.qkv_bias && !q2.out_bias);
    CHECK_EQ(q2.moe_dense_layers, 0);
    /* Qwen3-MoE: explicit head_dim (32 x 128 != 2048), q/k norms, no shared expert. */
    struct dp_model q3 = load("tests/fixtures/hf/qwen3-30b-a3b.json");
    CHECK_EQ(q3.head_dim, 128);
    CHECK_EQ(q3.kv_heads, 4);
    CHECK(q3.qk_norm && !q3.qkv_bias);
    CHECK_EQ(q3.moe_shared_experts, 0);
    /* Dense Qwen3: q/k norms and the explicit head_dim (Qwen3-4B: 32 x 128 != 2560), tied
     * embeddings in the 4B only; max_position_embeddings 40960 is a limit, not the
     * training length. */
    struct dp_model q34 = load("tests/fixtures/hf/qwen3-4b.json");
    CHECK_STR(q34.format, "hf:qwen3");
    CHECK_EQ(q34.head_dim, 128);
    CHECK_EQ(q34.kv_heads, 8);
    CHECK(q34.qk_norm && !q34.qkv_bias && !q34.out_bias && q34.tied_embeddings);
    CHECK_EQ(q34.seq_len, 8192);
    CHECK(!load("tests/fixtures/hf/qwen3-8b.json").tied_embeddings);
    /* Phi-3: no biases, head_dim 3072 / 32 = 96; Phi-3.5-mini trains at its top-level
     * original_max_position_embeddings 4096 of 131072; Phi-4 has GQA (10 KV heads). */
    struct dp_model p35 = load("tests/fixtures/hf/phi-3.5-mini.json");
    CHECK_STR(p35.format, "hf:phi3");
    CHECK_EQ(p35.head_dim, 96);
    CHECK_EQ(p35.seq_len, 4096);
    CHECK_CONTAINS(p35.seq_len_from, "original_max_position_embeddings");
    CHECK(!p35.qkv_bias && !p35.out_bias && !p35.mlp_bias && !p35.qk_norm && !p35.dropout);
    struct dp_model p4 = load("tests/fixtures/hf/phi-4.json");
    CHECK_EQ(p4.kv_heads, 10);
    CHECK_EQ(p4.seq_len, 8192);
    /* DeepSeek-V3: MLA, 3 dense layers, 1 shared expert, noaux_tc router bias; YaRN's
     * original_max_position_embeddings is the training length. */
    struct dp_model d3 = load("tests/fixtures/hf/deepseek-v3.json");
    CHECK(d3.mla);
    CHECK_EQ(d3.mla_q_rank, 1536);
    CHECK_EQ(d3.mla_kv_rank, 512);
    CHECK_EQ(d3.head_dim, 192);
    CHECK_EQ(d3.mla_v_dim, 128);
    CHECK_EQ(d3.mtp_layers, 1); /* num_nextn_predict_layers */
    CHECK_EQ(d3.kv_heads, 128);
    CHECK_EQ(d3.moe_dense_layers, 3);
    CHECK_EQ(d3.moe_shared_experts, 1);
    CHECK_EQ(d3.moe_shared_ffn_hidden, 2048);
    CHECK(d3.moe_router_bias);
    CHECK_EQ(d3.seq_len, 4096);
    /* DeepSeek-V2-Lite: no q bottleneck (q_lora_rank null), greedy routing (no bias). */
    struct dp_model dl = load("tests/fixtures/hf/deepseek-v2-lite.json");
    CHECK_EQ(dl.mla_q_rank, 0);
    CHECK(!dl.moe_router_bias);
    CHECK_EQ(dl.moe_shared_experts, 2);
    CHECK_EQ(dl.moe_dense_layers, 1);
    /* The dplan schema round-trips every new field: the count survives. */
    cJSON *o = dp_model_to_json(&d3);
    struct dp_model back;
    struct dp_err err = {0};
    struct dp_jr jr = {.file = "roundtrip", .err = &err};
    CHECK_EQ(dp_model_from_json(&jr, o, &back), 0);
    if (err.code)
        fprintf(stderr, "%s\n", err.msg);
    struct dp_param_count a, b;
    dp_model_count(&d3, &a);
    dp_model_count(&back, &b);
    CHECK_EQ(b.total, 671026419200LL);
    CHECK_EQ(back.mtp_layers, 1);
    CHECK_EQ(b.active, a.active);
    cJSON_Delete(o);
}

/* Layer ranges to kinds: DeepSeek-V3 with its 3 dense layers. */
static void test_layer_kinds(void)
{
    struct dp_model m = load("tests/fixtures/hf/deepseek-v3.json");
    struct dp_layer_kinds k;
    dp_model_layer_kinds(&m, 0, 61, &k);
    CHECK_EQ(k.n[DP_LAYER_DENSE], 3);
    CHECK_EQ(k.n[DP_LAYER_MOE], 58);
    CHECK(dp_model_mixed_layers(&m));
    /* pp 4 with an uneven 16/15/15/15 split: only stage 0 holds dense layers. */
    struct dp_layout l;
    dp_layout_default(&l);
    l.pp = 4;
    l.first_stage_layers = 16;
    dp_layout_stage_kinds(&l, &m, 0, &k);
    CHECK_EQ(k.n[DP_LAYER_DENSE], 3);
    CHECK_EQ(k.n[DP_LAYER_MOE], 13);
    dp_layout_stage_kinds(&l, &m, 1, &k);
    CHECK_EQ(k.n[DP_LAYER_DENSE], 0);
    CHECK_EQ(k.n[DP_LAYER_MOE], 15);
    struct dp_model mx = load("tests/fixtures/hf/mixtral-8x7b-v0.1.json");
    CHECK(!dp_model_mixed_layers(&mx));
}

/*
 * The training length a Hugging Face config implies (issue 10, item 4): its
 * rope_scaling.original_max_position_embeddings, else max_position_embeddings when it is
 * at most 8192, else 8192 with the reason recorded. Expected values read off the
 * fixtures: Llama 2 max 4096; Llama 3 max 8192; GPT-2 n_positions 1024; Qwen2 max
 * 131072 and Mistral 7B max 32768, both above 8192.
 */
static void test_hf_seq_len(void)
{
    struct dp_model l2 = load("tests/fixtures/hf/llama-2-7b.json");
    CHECK_EQ(l2.seq_len, 4096);
    CHECK_STR(l2.seq_len_from, "the config's max_position_embeddings");
    struct dp_model l3 = load("tests/fixtures/hf/meta-llama-3-8b.json");
    CHECK_EQ(l3.seq_len, 8192);
    struct dp_model g = load("tests/fixtures/hf/gpt2.json");
    CHECK_EQ(g.seq_len, 1024);
    CHECK_STR(g.seq_len_from, "the config's n_positions");
    struct dp_model l31 = load("tests/fixtures/hf/meta-llama-3.1-8b.json");
    CHECK_EQ(l31.seq_len, 8192);
    CHECK_CONTAINS(l31.seq_len_from, "original_max_position_embeddings");
    struct dp_model q = load("tests/fixtures/hf/qwen2-7b.json");
    CHECK_EQ(q.seq_len, 8192);
    CHECK_CONTAINS(q.seq_len_from, "max_position_embeddings 131072 is a context limit");
    struct dp_model mi = load("tests/fixtures/hf/mistral-7b-v0.1.json");
    CHECK_EQ(mi.seq_len, 8192);
    /* A learned-position model refuses longer sequences; RoPE ones do not. */
    struct dp_err e = {0};
    CHECK_EQ(dp_model_check_seq_len(&g, 1024, &e), 0);
    CHECK_EQ(dp_model_check_seq_len(&g, 1025, &e), DP_EINFEASIBLE);
    CHECK_CONTAINS(e.msg, "max_position=1024");
    CHECK_EQ(dp_model_check_seq_len(&q, 131072, &e), 0);
}

/*
 * Absent fields take transformers' config-class defaults (issue 11, item 5). Each
 * fixture in tests/fixtures/hf/defaults/ gives only the shape. Expected values, from the
 * keyword defaults in huggingface/transformers src/transformers/models/<family>/
 * configuration_<family>.py:
 *  - GPT2Config: resid_pdrop = embd_pdrop = attn_pdrop = 0.1 (dropout on), n_positions
 *    1024, n_inner None (4 x 768 = 3072), tie_word_embeddings True;
 *  - LlamaConfig: num_key_value_heads None (= 16 heads), max_position_embeddings 2048,
 *    attention_dropout 0.0, attention_bias and mlp_bias False, untied;
 *  - MistralConfig: num_key_value_heads 8, max_position_embeddings 4096 * 32 = 131072
 *    (a context limit above 8192: dplan trains at 8192), no biases;
 *  - MixtralConfig: num_key_value_heads 8, num_local_experts 8, num_experts_per_tok 2;
 *  - Qwen2Config: num_key_value_heads 32 (a number, not the head count: 64 heads here
 *    give 32 KV heads), max_position_embeddings 32768 (-> 8192), QKV bias;
 *  - GPTNeoXConfig: attention_bias True, hidden/attention dropout 0.0, max 2048, untied;
 *  - FalconConfig: num_kv_heads None (= 16 heads) with new_decoder_architecture and
 *    num_ln_in_parallel_attn None (two norms); without it multi_query True (1 KV head)
 *    and parallel_attn True (one norm); bias False; tied; max 2048.
 *  - Qwen2MoeConfig: num_key_value_heads 16, num_experts 60, num_experts_per_tok 4,
 *    max_position_embeddings 32768 (-> 8192), qkv_bias True, one shared expert;
 *  - Qwen3MoeConfig: num_key_value_heads 4, num_experts 128, num_experts_per_tok 8,
 *    attention_bias False, q/k norms;
 *  - DeepseekV2Config: n_routed_experts 64, n_shared_experts 2, first_k_dense_replace
 *    0, kv_lora_rank 512, q_lora_rank 1536, qk_nope_head_dim 128, qk_rope_head_dim 64
 *    (head_dim 128 + 64 = 192), v_head_dim 128, max_position_embeddings 2048,
 *    topk_method greedy (no router bias); num_experts_per_tok None, so the fixture
 *    gives it;
 *  - Qwen3Config (dense): num_key_value_heads 32, head_dim 128 (32 heads of a 1024 hidden
 *    would be 32 wide), max_position_embeddings 32768 (above 8192: 8192 assumed),
 *    attention_bias False, untied; q/k norms always;
 *  - Phi3Config: num_key_value_heads None (= 16 heads), original_max_position_embeddings
 *    4096 (the fixture's 131072 limit is LongRoPE's), resid/embd/attention dropout 0.0;
 *  - Gemma2Config: num_key_value_heads 4, head_dim 256, max_position_embeddings 8192,
 *    sliding_window 4096 on layers i with (i + 1) % 2 (3 of 6), tied;
 *  - Gemma3TextConfig: the same heads, 131072 positions (8192 assumed), sliding_window
 *    4096 on five of six layers (sliding_window_pattern 6: 10 of 12), q/k norms, tied;
 *  - DeepseekV3Config: n_routed_experts 256, n_shared_experts 1, num_experts_per_tok
 *    8, first_k_dense_replace 3, the same MLA ranks, max 4096, noaux_tc (router bias).
 */
static void test_hf_defaults(void)
{
    struct dp_model g = load("tests/fixtures/hf/defaults/gpt2.json");
    CHECK(g.dropout);
    CHECK_EQ(g.seq_len, 1024);
    CHECK_EQ(g.max_pos, 1024);
    CHECK_EQ(g.ffn_hidden, 3072);
    CHECK(g.tied_embeddings);
    CHECK_CONTAINS(g.seq_len_from, "GPT2Config's default 1024");
    struct dp_model l = load("tests/fixtures/hf/defaults/llama.json");
    CHECK_EQ(l.kv_heads, 16);
    CHECK_EQ(l.seq_len, 2048);
    CHECK(!l.dropout && !l.qkv_bias && !l.out_bias && !l.mlp_bias && !l.tied_embeddings);
    struct dp_model mi = load("tests/fixtures/hf/defaults/mistral.json");
    CHECK_EQ(mi.kv_heads, 8);
    CHECK_EQ(mi.seq_len, 8192);
    CHECK_CONTAINS(mi.seq_len_from, "MistralConfig's default 131072");
    CHECK(!mi.qkv_bias && !mi.dropout && !mi.tied_embeddings);
    struct dp_model mx = load("tests/fixtures/hf/defaults/mixtral.json");
    CHECK_EQ(mx.kv_heads, 8);
    CHECK_EQ(mx.experts, 8);
    CHECK_EQ(mx.top_k, 2);
    struct dp_model q = load("tests/fixtures/hf/defaults/qwen2.json");
    CHECK_EQ(q.kv_heads, 32);
    CHECK_EQ(q.seq_len, 8192);
    CHECK(q.qkv_bias && !q.out_bias && !q.tied_embeddings && !q.dropout);
    struct dp_model n = load("tests/fixtures/hf/defaults/gpt_neox.json");
    CHECK(n.qkv_bias && n.out_bias && !n.dropout && !n.tied_embeddings);
    CHECK_EQ(n.seq_len, 2048);
    struct dp_model f = load("tests/fixtures/hf/defaults/falcon.json");
    CHECK_EQ(f.kv_heads, 16);
    CHECK_EQ(f.norms_per_layer, 2);
    CHECK(f.tied_embeddings && !f.qkv_bias && !f.dropout);
    CHECK_EQ(f.seq_len, 2048);
    struct dp_model f7 = load("tests/fixtures/hf/defaults/falcon-7b-style.json");
    CHECK_EQ(f7.kv_heads, 1);
    CHECK_EQ(f7.norms_per_layer, 1);
    struct dp_model q2 = load("tests/fixtures/hf/defaults/qwen2_moe.json");
    CHECK_EQ(q2.kv_heads, 16);
    CHECK_EQ(q2.experts, 60);
    CHECK_EQ(q2.top_k, 4);
    CHECK_EQ(q2.seq_len, 8192);
    CHECK_EQ(q2.moe_shared_experts, 1);
    CHECK(q2.qkv_bias && !q2.dropout && !q2.tied_embeddings);
    struct dp_model q3 = load("tests/fixtures/hf/defaults/qwen3_moe.json");
    CHECK_EQ(q3.kv_heads, 4);
    CHECK_EQ(q3.experts, 128);
    CHECK_EQ(q3.top_k, 8);
    CHECK(q3.qk_norm && !q3.qkv_bias && !q3.dropout);
    struct dp_model q3d = load("tests/fixtures/hf/defaults/qwen3.json");
    CHECK_EQ(q3d.kv_heads, 32);
    CHECK_EQ(q3d.head_dim, 128);
    CHECK_EQ(q3d.seq_len, 8192);
    CHECK_CONTAINS(q3d.seq_len_from, "Qwen3Config's default 32768");
    CHECK(q3d.qk_norm && !q3d.qkv_bias && !q3d.tied_embeddings && !q3d.dropout);
    struct dp_model p3d = load("tests/fixtures/hf/defaults/phi3.json");
    CHECK_EQ(p3d.kv_heads, 16);
    CHECK_EQ(p3d.head_dim, 64);
    CHECK_EQ(p3d.seq_len, 4096);
    CHECK_CONTAINS(p3d.seq_len_from, "Phi3Config's default original_max_position_embeddings");
    CHECK(!p3d.qkv_bias && !p3d.tied_embeddings && !p3d.dropout);
    struct dp_model g2d = load("tests/fixtures/hf/defaults/gemma2.json");
    CHECK_EQ(g2d.kv_heads, 4);
    CHECK_EQ(g2d.head_dim, 256);
    CHECK_EQ(g2d.seq_len, 8192);
    CHECK_EQ(g2d.window, 4096);
    CHECK_EQ(g2d.window_layers, 3);
    CHECK(g2d.tied_embeddings && !g2d.qkv_bias && !g2d.dropout);
    struct dp_model g3d = load("tests/fixtures/hf/defaults/gemma3_text.json");
    CHECK_EQ(g3d.window, 4096);
    CHECK_EQ(g3d.window_layers, 10);
    CHECK_EQ(g3d.seq_len, 8192);
    CHECK_CONTAINS(g3d.seq_len_from, "Gemma3TextConfig's default 131072");
    CHECK(g3d.qk_norm && g3d.tied_embeddings);
    /* Glm4MoeConfig: 8 KV heads, head_dim hidden / heads (no class field), 128 routed
     * experts, top 8, one shared expert, first_k_dense_replace 1, attention_bias and
     * use_qk_norm False, untied, 131072 positions; the router's score-correction bias. */
    struct dp_model glm = load("tests/fixtures/hf/defaults/glm4_moe.json");
    CHECK_EQ(glm.kv_heads, 8);
    CHECK_EQ(glm.head_dim, 128);
    CHECK_EQ(glm.experts, 128);
    CHECK_EQ(glm.top_k, 8);
    CHECK_EQ(glm.moe_shared_experts, 1);
    CHECK_EQ(glm.moe_shared_ffn_hidden, 512);
    CHECK_EQ(glm.moe_dense_layers, 1);
    CHECK_EQ(glm.seq_len, 8192);
    CHECK_CONTAINS(glm.seq_len_from, "Glm4MoeConfig's default 131072");
    CHECK(glm.moe_router_bias && !glm.qkv_bias && !glm.out_bias && !glm.qk_norm);
    CHECK(!glm.tied_embeddings && !glm.dropout && glm.mtp_layers == 0);
    /* GLM-4.5's own: biases on q, k, v only, q/k norms, one MTP layer */
    struct dp_model g45 = load("tests/fixtures/hf/glm-4.5.json");
    CHECK(g45.qkv_bias && !g45.out_bias && g45.qk_norm && g45.mtp_layers == 1);
    CHECK_EQ(g45.moe_dense_layers, 3);
    /* Olmo2Config: num_key_value_heads None (the heads), 2048 positions, no biases, untied;
     * q/k norms over all heads always (Olmo2Attention) */
    struct dp_model ol = load("tests/fixtures/hf/defaults/olmo2.json");
    CHECK_EQ(ol.kv_heads, 8);
    CHECK_EQ(ol.seq_len, 2048);
    CHECK_CONTAINS(ol.seq_len_from, "Olmo2Config's default 2048");
    CHECK(ol.qk_norm && ol.qk_norm_full && !ol.qkv_bias && !ol.out_bias);
    CHECK(!ol.tied_embeddings && !ol.dropout && ol.ffn == DP_FFN_SWIGLU);
    /* GraniteConfig: LlamaConfig's defaults (KV heads = the heads, 2048, untied, no biases) */
    struct dp_model gr = load("tests/fixtures/hf/defaults/granite.json");
    CHECK_EQ(gr.kv_heads, 8);
    CHECK_EQ(gr.seq_len, 2048);
    CHECK_CONTAINS(gr.seq_len_from, "GraniteConfig's default 2048");
    CHECK(!gr.tied_embeddings && !gr.qkv_bias && !gr.mlp_bias && !gr.qk_norm && !gr.dropout);
    /* Llama4TextConfig: 8 KV heads, head_dim 128, 16 experts, top 1, MoE on every layer
     * (interleave_moe_layer_step 1) with one shared expert, chunked attention of 8192 on the
     * RoPE layers (all but every 4th: 6 of 8), 131072 positions, untied */
    struct dp_model l4 = load("tests/fixtures/hf/defaults/llama4_text.json");
    CHECK_EQ(l4.kv_heads, 8);
    CHECK_EQ(l4.head_dim, 128);
    CHECK_EQ(l4.experts, 16);
    CHECK_EQ(l4.top_k, 1);
    CHECK_EQ(l4.moe_dense_layers, 0);
    CHECK_EQ(l4.moe_shared_experts, 1);
    CHECK_EQ(l4.moe_shared_ffn_hidden, 256);
    CHECK_EQ(l4.window, 8192);
    CHECK_EQ(l4.window_layers, 6);
    CHECK_EQ(l4.seq_len, 8192);
    CHECK_CONTAINS(l4.seq_len_from, "Llama4TextConfig's default 131072");
    CHECK(!l4.tied_embeddings && !l4.qkv_bias && !l4.qk_norm && !l4.moe_router_bias);
    /* OlmoeConfig: num_key_value_heads None (the heads), 64 experts of intermediate_size,
     * top 8, on every layer, no shared expert, q/k norms over all heads, 4096 positions,
     * untied, no attention bias */
    struct dp_model oe = load("tests/fixtures/hf/defaults/olmoe.json");
    CHECK_EQ(oe.kv_heads, 8);
    CHECK_EQ(oe.experts, 64);
    CHECK_EQ(oe.top_k, 8);
    CHECK_EQ(oe.moe_ffn_hidden, 256);
    CHECK_EQ(oe.moe_dense_layers, 0);
    CHECK_EQ(oe.moe_shared_experts, 0);
    CHECK_EQ(oe.seq_len, 4096);
    CHECK_CONTAINS(oe.seq_len_from, "OlmoeConfig's default 4096");
    CHECK(oe.qk_norm && oe.qk_norm_full);
    CHECK(!oe.tied_embeddings && !oe.qkv_bias && !oe.out_bias && !oe.moe_router_bias &&
          !oe.dropout);
    struct dp_model d2 = load("tests/fixtures/hf/defaults/deepseek_v2.json");
    CHECK(d2.mla);
    CHECK_EQ(d2.experts, 64);
    CHECK_EQ(d2.moe_shared_experts, 2);
    CHECK_EQ(d2.moe_dense_layers, 0);
    CHECK_EQ(d2.mla_q_rank, 1536);
    CHECK_EQ(d2.mla_kv_rank, 512);
    CHECK_EQ(d2.head_dim, 192);
    CHECK_EQ(d2.mla_v_dim, 128);
    CHECK_EQ(d2.seq_len, 2048);
    CHECK(!d2.moe_router_bias && !d2.dropout);
    struct dp_model d3 = load("tests/fixtures/hf/defaults/deepseek_v3.json");
    CHECK_EQ(d3.experts, 256);
    CHECK_EQ(d3.moe_shared_experts, 1);
    CHECK_EQ(d3.top_k, 8);
    CHECK_EQ(d3.moe_dense_layers, 3);
    CHECK_EQ(d3.mla_q_rank, 1536);
    CHECK_EQ(d3.seq_len, 4096);
    CHECK(d3.moe_router_bias);
}

/*
 * A model with its own code (trust_remote_code) whose model_type transformers does not
 * know, read by the transformers class its architectures names: Kimi K2 ships
 * model_type "kimi_k2" on DeepseekV3ForCausalLM (Moonshot's deployment guide: the
 * DeepSeek-V3 architecture reused, model_type changed so engines can tell them apart).
 * Every DeepSeek-V3 field comes from the config as for deepseek_v3; the format says how it
 * was read. Its parameter count is in param_counts.json (hand count). Classes that only
 * start like a known one, and image-text classes, are refused (tests/errors/hf_remote_*).
 */
static void test_hf_remote_code(void)
{
    struct dp_model k = load("tests/fixtures/hf/kimi-k2.json");
    CHECK_STR(k.format, "hf:deepseek_v3 (model_type kimi_k2)");
    CHECK(k.mla);
    CHECK_EQ(k.heads, 64);
    CHECK_EQ(k.experts, 384);
    CHECK_EQ(k.top_k, 8);
    CHECK_EQ(k.moe_shared_experts, 1);
    CHECK_EQ(k.moe_dense_layers, 1);
    CHECK_EQ(k.moe_ffn_hidden, 2048);
    CHECK_EQ(k.vocab, 163840);
    CHECK(k.moe_router_bias);  /* topk_method noaux_tc */
    CHECK_EQ(k.seq_len, 4096); /* rope_scaling's original length, not 131072 */
    CHECK(!k.tied_embeddings);
}

/*
 * Stage and chunk layer ranges, and the split as printed (issue 10, item 13). By hand:
 * 80 layers on pp=4 with first/last 19: middle stages get (80-38)/2 = 21, so stages
 * hold 0-18, 19-39, 40-60, 61-79 and print as 19/21x2/19. Interleaved, 80 layers on
 * pp=4 vpp=5: chunks of 80/20 = 4 layers; chunk c of stage r starts at 16c + 4r.
 */
static void test_layer_ranges(void)
{
    struct dp_model m = {0};
    snprintf(m.name, sizeof m.name, "m80");
    m.layers = 80;
    struct dp_layout l;
    dp_layout_default(&l);
    l.pp = 4;
    l.first_stage_layers = l.last_stage_layers = 19;
    CHECK_EQ(dp_layout_stage_first_layer(&l, &m, 0), 0);
    CHECK_EQ(dp_layout_stage_first_layer(&l, &m, 1), 19);
    CHECK_EQ(dp_layout_stage_first_layer(&l, &m, 2), 40);
    CHECK_EQ(dp_layout_stage_first_layer(&l, &m, 3), 61);
    char buf[160];
    dp_layout_stage_ranges(&l, &m, 1, buf, sizeof buf);
    CHECK_STR(buf, "19-39");
    dp_layout_format_model(&l, &m, buf, sizeof buf);
    CHECK_STR(buf, "tp=1 pp=4 dp=1 mbs=1 split=19,21,21,19");
    l.first_stage_layers = 0; /* only the last stage given: (80 - 17) / 3 = 21 each before */
    l.last_stage_layers = 17;
    dp_layout_format_model(&l, &m, buf, sizeof buf);
    CHECK_STR(buf, "tp=1 pp=4 dp=1 mbs=1 split=21*3,17");
    dp_layout_format(&l, buf, sizeof buf); /* no model: only what was given, never 0 */
    CHECK_STR(buf, "tp=1 pp=4 dp=1 mbs=1 split=../17");
    l.last_stage_layers = 0;
    l.vpp = 5;
    int f, k;
    dp_layout_chunk_layers(&l, &m, 1, 2, &f, &k);
    CHECK_EQ(f, 36);
    CHECK_EQ(k, 4);
    dp_layout_stage_ranges(&l, &m, 3, buf, sizeof buf);
    CHECK_STR(buf, "12-15,28-31,...,76-79");
}

static void test_shipped_by_name(void)
{
    setenv("DPLAN_PROFILES", "", 0);
    struct dp_model m;
    struct dp_err err = {0};
    CHECK_EQ(dp_model_load("llama2-7b", &m, &err), 0);
    CHECK_STR(m.format, "dplan");
    struct dp_param_count pc;
    dp_model_count(&m, &pc);
    CHECK_EQ(pc.total, 6738415616LL);
    /* Round trip through JSON keeps the count. */
    cJSON *o = dp_model_to_json(&m);
    struct dp_model m2;
    struct dp_jr jr = {.file = "roundtrip", .err = &err};
    CHECK_EQ(dp_model_from_json(&jr, o, &m2), 0);
    struct dp_param_count pc2;
    dp_model_count(&m2, &pc2);
    CHECK_EQ(pc2.total, pc.total);
    cJSON_Delete(o);
    struct dp_err e2 = {0};
    CHECK_EQ(dp_model_load("no-such-model", &m, &e2), DP_ENOENT);
    CHECK_CONTAINS(e2.msg, "no such file or shipped model");
}

/*
 * Sliding windows read from configs (transformers' rules, hf_window in model_hf.c) and
 * from model.json. Mistral-7B-v0.1: sliding_window 4096 on all 32 layers, and at its
 * 8192 tokens 4096 x 8192 - 4096 x 4095 / 2 = 25,167,872 of 8192 x 8193 / 2 =
 * 33,558,528 causal pairs; Mixtral's null: none; Qwen2 only with use_sliding_window,
 * from max_window_layers on (the fixture: 28 layers from 21, 7 windowed), or where
 * layer_types says so (2 of 4).
 */
static void test_sliding_window(void)
{
    struct dp_model mi = load("tests/fixtures/hf/mistral-7b-v0.1.json");
    CHECK_EQ(mi.window, 4096);
    CHECK_EQ(mi.window_layers, 32);
    CHECK_NEAR(dp_model_attn_pair_ratio(&mi, 8192), 25167872.0 / 33558528.0, 1e-12);
    CHECK_NEAR(dp_model_attn_pair_ratio(&mi, 4096), 1.0, 0);
    CHECK_EQ(load("tests/fixtures/hf/mixtral-8x7b-v0.1.json").window, 0);
    CHECK_EQ(load("tests/fixtures/hf/qwen2-7b.json").window, 0); /* use_sliding_window false */
    struct dp_model p3 = load("tests/fixtures/hf/phi-3-mini-4k.json");
    CHECK_EQ(p3.window, 2047);
    CHECK_EQ(p3.window_layers, 32);
    struct dp_model qw = load("tests/fixtures/hf/defaults/qwen2-window.json");
    CHECK_EQ(qw.window, 4096); /* Qwen2Config's default sliding_window */
    CHECK_EQ(qw.window_layers, 7);
    struct dp_model lt = load("tests/fixtures/hf/defaults/qwen3-layer-types.json");
    CHECK_EQ(lt.window, 1024);
    CHECK_EQ(lt.window_layers, 2);
    /* Qwen2-MoE slides every other layer below max_window_layers (0, 2, 4 of 8 below 5);
     * Qwen3-MoE every layer. */
    struct dp_model q2w = load("tests/fixtures/hf/defaults/qwen2_moe-window.json");
    CHECK_EQ(q2w.window, 4096);
    CHECK_EQ(q2w.window_layers, 3);
    struct dp_model q3w = load("tests/fixtures/hf/defaults/qwen3_moe-window.json");
    CHECK_EQ(q3w.window, 2048);
    CHECK_EQ(q3w.window_layers, 4);
    CHECK_EQ(load("tests/fixtures/hf/qwen3-30b-a3b.json").window, 0);
    /* Gemma 2: four norms a layer, window 4096 on layers 0, 2, 4, ... (13 of 26);
     * Gemma 3 1B: q/k norms, window 512 except on every sixth layer (22 of 26);
     * Gemma 1: two norms, no window; all tied. */
    struct dp_model g2 = load("tests/fixtures/hf/gemma-2-2b.json");
    CHECK_EQ(g2.norms_per_layer, 4);
    CHECK_EQ(g2.window, 4096);
    CHECK_EQ(g2.window_layers, 13);
    CHECK(g2.tied_embeddings && !g2.qk_norm && g2.ffn == DP_FFN_SWIGLU);
    struct dp_model g3 = load("tests/fixtures/hf/gemma-3-1b.json");
    CHECK_EQ(g3.window, 512);
    CHECK_EQ(g3.window_layers, 22);
    CHECK(g3.qk_norm && g3.tied_embeddings);
    CHECK_EQ(g3.kv_heads, 1);
    struct dp_model g1 = load("tests/fixtures/hf/gemma-7b.json");
    CHECK_EQ(g1.norms_per_layer, 2);
    CHECK_EQ(g1.window, 0);
    CHECK_EQ(g1.head_dim, 256);
    /* gpt-oss-120b: a 128-token window on 18 of 36 layers, sinks, every bias; trains at
     * YaRN's original 4096 positions. */
    struct dp_model go = load("tests/fixtures/hf/gpt-oss-120b.json");
    CHECK_EQ(go.window, 128);
    CHECK_EQ(go.window_layers, 18);
    CHECK(go.attn_sinks && go.qkv_bias && go.out_bias && go.mlp_bias && go.moe_router_bias);
    CHECK_EQ(go.experts, 128);
    CHECK_EQ(go.top_k, 4);
    CHECK_EQ(go.seq_len, 4096);
    CHECK(!go.tied_embeddings);
    struct dp_model god = load("tests/fixtures/hf/defaults/gpt_oss.json");
    CHECK_EQ(god.experts, 128);
    CHECK_EQ(god.moe_ffn_hidden, 2880);
    CHECK_EQ(god.kv_heads, 8);
    CHECK_EQ(god.window_layers, 2);
    /* The shipped Mistral 7B carries its window (Jiang et al. 2023, Table 1). */
    struct dp_model sm = load("profiles/models/mistral-7b.json");
    CHECK_EQ(sm.window, 4096);
    CHECK_EQ(sm.window_layers, 32);
}

int main(void)
{
    test_published_counts();
    test_hf_details();
    test_layer_kinds();
    test_hf_seq_len();
    test_hf_defaults();
    test_hf_remote_code();
    test_layer_ranges();
    test_shipped_by_name();
    test_sliding_window();
    return check_done("test_core_model");
}
