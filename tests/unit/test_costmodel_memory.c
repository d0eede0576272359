/*
 * The memory model against numbers computed independently from the papers:
 * ZeRO (Rajbhandari et al. 2020) model states, Megatron's distributed
 * optimizer table, Korthikanti et al. 2022 activation formulas and 1F1B /
 * interleaved in-flight micro-batches, and parameter placement per stage.
 */
#include "check.h"

#include "costmodel/costmodel.h"
#include <stdlib.h>

static struct dp_layout layout(enum dp_precision p, bool grad_fp32, int zero)
{
    struct dp_layout l;
    dp_layout_default(&l);
    l.precision = p;
    l.grad_fp32 = grad_fp32;
    l.zero = zero;
    return l;
}

/* ZeRO paper, Sec. 5.1 / Figure 1: a 7.5B-parameter model on 64 GPUs with
 * mixed-precision Adam (2 + 2 + 12 bytes per parameter): 120 GB without
 * ZeRO, 31.4 GB with P_os, 16.6 GB with P_os+g, 1.9 GB with P_os+g+p. */
static void test_zero_paper(void)
{
    const int64_t psi = 7500000000LL;
    const double gb = 1e9;
    double expect[4] = {120.0, 31.4, 16.6, 1.9};
    for (int z = 0; z <= 3; z++) {
        struct dp_layout l = layout(DP_FP16, false, z);
        struct dp_states s;
        dp_mem_states(psi, 64, &l, &s);
        double total = (double)(s.params_bytes + s.grads_bytes + s.optimizer_bytes) / gb;
        CHECK_NEAR(total, expect[z], 0.05 / expect[z]); /* the paper rounds to 0.1 GB */
    }
    /* Exact forms: 16 psi; 4 psi + 12 psi / 64; 2 psi + 14 psi / 64; 16 psi / 64. */
    struct dp_layout l1 = layout(DP_FP16, false, 1);
    struct dp_states s;
    dp_mem_states(psi, 64, &l1, &s);
    CHECK_EQ(s.params_bytes + s.grads_bytes, 4 * psi);
    CHECK_EQ(s.optimizer_bytes, 12 * psi / 64);
}

/* Megatron-LM docs/user-guide/features/dist_optimizer.md: bytes per parameter
 * bf16 params / fp32 grads: 18 plain, 6 + 12/d distributed;
 * fp32 / fp32: 16 plain, 8 + 8/d distributed. */
static void test_megatron_dist_opt(void)
{
    const int64_t n = 1000000000LL, d = 8;
    struct dp_states s;
    struct dp_layout l = layout(DP_BF16, true, 0);
    dp_mem_states(n, d, &l, &s);
    CHECK_EQ(s.params_bytes + s.grads_bytes + s.optimizer_bytes, 18 * n);
    l.zero = 1;
    dp_mem_states(n, d, &l, &s);
    CHECK_EQ(s.params_bytes + s.grads_bytes + s.optimizer_bytes, 6 * n + 12 * n / d);
    l = layout(DP_FP32, true, 0);
    dp_mem_states(n, d, &l, &s);
    CHECK_EQ(s.params_bytes + s.grads_bytes + s.optimizer_bytes, 16 * n);
    l.zero = 1;
    dp_mem_states(n, d, &l, &s);
    CHECK_EQ(s.params_bytes + s.grads_bytes + s.optimizer_bytes, 8 * n + 8 * n / d);
    /* Shards are padded slices: 10 parameters over 4 ranks -> 3 each. */
    l = layout(DP_FP32, true, 3);
    dp_mem_states(10, 4, &l, &s);
    CHECK_EQ(s.params_bytes, 3 * 4);
}

/* GPT-3 175B shapes (Korthikanti Table 3): a=96, h=12288, s=2048, with
 * dropout, GELU, f = 4h, 2-byte activations, attention without flash. */
static struct dp_model gpt3(void)
{
    struct dp_model m = {0};
    m.layers = 96;
    m.hidden = 12288;
    m.heads = m.kv_heads = 96;
    m.head_dim = 128;
    m.ffn_hidden = 4 * 12288;
    m.vocab = 51200;
    m.seq_len = 2048;
    m.ffn = DP_FFN_GELU;
    m.norm = DP_NORM_LAYERNORM;
    m.pos = DP_POS_LEARNED;
    m.max_pos = 2048;
    m.tied_embeddings = true;
    m.norms_per_layer = 2;
    m.dropout = true;
    m.qkv_bias = m.out_bias = m.mlp_bias = true;
    return m;
}

static void test_korthikanti_layer(void)
{
    struct dp_model m = gpt3();
    const double s = 2048, b = 1, h = 12288, a = 96, t = 8;
    const double sbh = s * b * h, s2 = 5 * a * s / h;
    struct dp_layout l;
    dp_layout_default(&l);
    l.seq_len = 2048;
    l.mbs = 1;
    l.flash_attn = false;
    struct dp_act_layer al;

    /* Eq. (1): no parallelism, sbh (34 + 5as/h). */
    dp_act_layer(&m, &l, DP_LAYER_DENSE, &al);
    CHECK_NEAR(al.stored_bytes, sbh * (34 + s2), 1e-12);
    /* Eq. (2): tensor parallel, sbh (10 + 24/t + 5as/(ht)). */
    l.tp = 8;
    dp_act_layer(&m, &l, DP_LAYER_DENSE, &al);
    CHECK_NEAR(al.stored_bytes, sbh * (10 + 24 / t + s2 / t), 1e-12);
    /* Eq. (4): tensor + sequence parallel, sbh (34/t + 5as/(ht)). */
    l.sp = true;
    dp_act_layer(&m, &l, DP_LAYER_DENSE, &al);
    CHECK_NEAR(al.stored_bytes, sbh * (34 / t + s2 / t), 1e-12);
    /* Sec. 5 / Table 2: selective recompute drops the 5as/h term. */
    l.recompute = DP_RECOMPUTE_SELECTIVE;
    dp_act_layer(&m, &l, DP_LAYER_DENSE, &al);
    CHECK_NEAR(al.stored_bytes, sbh * 34 / t, 1e-12);
    l.sp = false;
    dp_act_layer(&m, &l, DP_LAYER_DENSE, &al);
    CHECK_NEAR(al.stored_bytes, sbh * (10 + 24 / t), 1e-12);
    /* Full recompute: the layer input, 2sbh. */
    l.recompute = DP_RECOMPUTE_FULL;
    dp_act_layer(&m, &l, DP_LAYER_DENSE, &al);
    CHECK_NEAR(al.stored_bytes, 2 * sbh, 1e-12);
    /* ...which the working set (one layer recomputed) exceeds by the whole layer. */
    CHECK_NEAR(al.full_bytes, sbh * (10 + 24 / t + s2 / t), 1e-12);
    /* Flash attention removes the s^2 terms but keeps the fp32 log-sum-exp. */
    l.recompute = DP_RECOMPUTE_NONE;
    l.flash_attn = true;
    dp_act_layer(&m, &l, DP_LAYER_DENSE, &al);
    CHECK_NEAR(al.stored_bytes, sbh * (10 + 24 / t) + 4 * a * s * b / t, 1e-12);
}

/* GQA and SwiGLU generalization, Llama-2-70B shapes: a=64, g=8, d=128,
 * f=28672, no dropout, bf16, t=8 with SP, flash: per layer
 * norms 2*2sbh/t, QKV input 2sbh/t, Q,K 2sb(a+g)d/t, V 2sbgd/t,
 * out-proj input 2sbad/t, fc1 input 2sbh/t, SwiGLU 3*2sbf/t, lse 4asb/t. */
static void test_gqa_swiglu(void)
{
    struct dp_model m = {0};
    m.layers = 80;
    m.hidden = 8192;
    m.heads = 64;
    m.kv_heads = 8;
    m.head_dim = 128;
    m.ffn_hidden = 28672;
    m.vocab = 32000;
    m.seq_len = 4096;
    m.ffn = DP_FFN_SWIGLU;
    m.norm = DP_NORM_RMSNORM;
    m.norms_per_layer = 2;
    struct dp_layout l;
    dp_layout_default(&l);
    l.seq_len = 4096;
    l.mbs = 2;
    l.tp = 8;
    l.sp = true;
    const int64_t s = 4096, b = 2, h = 8192, a = 64, g = 8, d = 128, f = 28672, t = 8;
    int64_t expect = 2 * 2 * s * b * h / t + 2 * s * b * h / t + 2 * s * b * (a + g) * d / t +
                     2 * s * b * g * d / t + 2 * s * b * a * d / t + 2 * s * b * h / t +
                     3 * 2 * s * b * f / t + 4 * a * s * b / t;
    struct dp_act_layer al;
    dp_act_layer(&m, &l, DP_LAYER_DENSE, &al);
    CHECK_EQ(al.stored_bytes, expect);
    /* Gemma 2/3's sandwich norms: the post-norms after attention and after the MLP
     * save their inputs too (the attention and MLP outputs), 2 x 2sbh/t more. */
    m.norms_per_layer = 4;
    dp_act_layer(&m, &l, DP_LAYER_DENSE, &al);
    CHECK_EQ(al.stored_bytes, expect + 2 * 2 * s * b * h / t);
}

/* Stage placement and in-flight micro-batches on a small dense model. */
static void test_stages(void)
{
    struct dp_model m = gpt3();
    struct dp_cluster cl = {0};
    cl.gpu.mem_bytes = 80LL << 30;
    cl.gpu.usable_fraction = 1.0;
    cl.gpu.runtime_overhead_bytes = 0;
    cl.nodes = 8;
    cl.gpus_per_node = 8;
    struct dp_layout l;
    dp_layout_default(&l);
    l.tp = 8;
    l.pp = 8;
    l.dp = 1;
    l.seq_len = 2048;
    l.mbs = 1;
    l.gbs = 64;
    l.sp = true;
    l.recompute = DP_RECOMPUTE_SELECTIVE;
    struct dp_mem_opts o;
    dp_mem_opts_default(&o);
    struct dp_mem_report *r = calloc(1, sizeof *r);
    struct dp_err err = {0};
    CHECK_EQ(dp_mem_estimate(&m, &cl, &l, &o, r, &err), 0);
    /* 1F1B: stage i holds min(p - i, m) micro-batches (m = 64 here). */
    for (int i = 0; i < 8; i++)
        CHECK_NEAR(r->stage[i].inflight, 8 - i, 0);
    /* Korthikanti Sec. 4.2.3: the first stage holds L layers' worth in total,
     * sbhL * 34/t with SP + selective recompute. */
    const double sbh = 2048.0 * 12288;
    CHECK_NEAR(r->stage[0].act_layers_bytes, sbh * 96 * 34 / 8, 1e-12);
    /* Interleaving (v = 2): (1 + (p - 1)/(p v)) times that. */
    l.vpp = 2;
    CHECK_EQ(dp_mem_estimate(&m, &cl, &l, &o, r, &err), 0);
    CHECK_NEAR(r->stage[0].act_layers_bytes, sbh * 96 * 34 / 8 * (1 + 7.0 / 16), 1e-12);
    /* With fewer micro-batches than stages, in flight is capped by m. */
    l.vpp = 1;
    l.gbs = 4;
    CHECK_EQ(dp_mem_estimate(&m, &cl, &l, &o, r, &err), 0);
    CHECK_NEAR(r->stage[0].inflight, 4, 0);
    CHECK_NEAR(r->stage[6].inflight, 2, 0);
    /* Parameters: summed over stages and TP ranks, every weight once, plus the
     * tied embedding's copy on the last stage and replicated norms/biases. */
    struct dp_param_count pc;
    dp_model_count(&m, &pc);
    int64_t sum = 0;
    for (int i = 0; i < 8; i++)
        sum += r->stage[i].params * 8;
    int64_t h = 12288, vpad = dp_padded_vocab(51200, 8);
    CHECK_EQ(vpad, 51200);
    /* Replicated per TP rank: per layer 2 LayerNorms (4h), out bias (h),
     * fc2 bias (h); position embeddings (2048 h); final norm (2h). */
    int64_t replicated = 96 * 6 * h + 2048 * h + 2 * h;
    CHECK_EQ(sum, pc.total + vpad * h + 7 * replicated);
    /* The final norm and output-layer inputs (Korthikanti Sec. 4.3) and, last stage only,
     * Megatron's vocab-parallel cross entropy: the fp32 softmax it works in (4 B) beside the
     * bf16 logits or gradient (2 B), 6 s b V / t. */
    CHECK_EQ(r->stage[7].act_head_bytes, 2 * 2 * 2048 * 12288 / 8 + 6 * 2048 * 51200 / 8);
    CHECK_EQ(r->stage[0].act_head_bytes, 0);
    free(r);
}

/* Narayanan et al. 2021 Eq. (3), their FLOPs per iteration with full
 * recompute: 96 B s l h^2 (1 + s/(6h) + V/(16 l h)). */
static void test_flops_narayanan(void)
{
    struct dp_model m = gpt3();
    m.vocab = 51200;
    struct dp_layout l;
    dp_layout_default(&l);
    l.seq_len = 2048;
    l.mbs = 1;
    l.gbs = 1536;
    l.recompute = DP_RECOMPUTE_FULL;
    struct dp_flops f;
    dp_flops_step(&m, &l, &f);
    double B = 1536, s = 2048, L = 96, h = 12288, V = 51200;
    double expect = 96 * B * s * L * h * h * (1 + s / (6 * h) + V / (16 * L * h));
    CHECK_NEAR(f.hardware_flops, expect, 1e-12);
    CHECK_NEAR(f.model_flops, expect - B * L * (24 * s * h * h + 4 * s * s * h), 1e-12);
}

/*
 * DualPipeV with an uneven stage list (torchtitan: stages in model order, stage s on rank s
 * or 2 pp - 1 - s): Llama 3 8B, 32 layers as 7,9,9,7 over pp 2. Rank 0 holds stages 0 and 3
 * (14 layers, the embedding, the final norm and the output layer), rank 1 stages 1 and 2
 * (18 layers); under interleaved 1F1B the same list gives each rank 16. Parameters by hand:
 * a layer 4096 (2 x 4096 + 2 x 1024) + 3 x 4096 x 14336 + 2 x 4096 = 218,112,000; the
 * embedding and the untied output layer 128256 x 4096 = 525,336,576 each.
 */
static void test_dualpipev_uneven(void)
{
    struct dp_model m;
    struct dp_err err = {0};
    if (dp_model_load("llama3-8b", &m, &err)) {
        CHECK_STR(err.msg, "");
        return;
    }
    struct dp_layout l;
    dp_layout_default(&l);
    l.framework = DP_FW_TORCHTITAN;
    l.pp = 2;
    l.vpp = 2;
    l.dp = 4;
    l.mbs = 1;
    l.gbs = 64;
    l.seq_len = 8192;
    l.zero = 3;
    const int split[4] = {7, 9, 9, 7};
    CHECK_EQ(dp_layout_set_chunks(&l, split, 4), 0);
    l.schedule = DP_SCHED_DUALPIPEV;
    CHECK_EQ(dp_layout_validate(&l, &m, 8, &err), 0);
    CHECK_EQ(dp_layout_stage_layers(&l, &m, 0), 14);
    CHECK_EQ(dp_layout_stage_layers(&l, &m, 1), 18);
    int first, n;
    dp_layout_chunk_layers(&l, &m, 0, 1, &first, &n); /* stage 3: layers 25..31 */
    CHECK_EQ(first, 25);
    CHECK_EQ(n, 7);
    dp_layout_chunk_layers(&l, &m, 1, 1, &first, &n); /* stage 2: layers 16..24 */
    CHECK_EQ(first, 16);
    CHECK_EQ(n, 9);
    int back[4];
    CHECK_EQ(dp_layout_expand(&l, &m, back, 4), 4);
    for (int s = 0; s < 4; s++)
        CHECK_EQ(back[s], split[s]);
    const int64_t layer = 4096LL * (2 * 4096 + 2 * 1024) + 3LL * 4096 * 14336 + 2 * 4096;
    const int64_t emb = 128256LL * 4096;
    int64_t dense, expert;
    dp_mem_stage_params(&m, &l, 0, &dense, &expert);
    CHECK_EQ(dense, 14 * layer + 2 * emb + 4096);
    CHECK_EQ(expert, 0);
    dp_mem_stage_params(&m, &l, 1, &dense, &expert);
    CHECK_EQ(dense, 18 * layer);
    l.schedule = DP_SCHED_1F1B;
    CHECK_EQ(dp_layout_stage_layers(&l, &m, 0), 16);
    CHECK_EQ(dp_layout_stage_layers(&l, &m, 1), 16);
}

/* A layer's parameters per GPU with tensor parallelism, by hand (OLMo 2 32B's shape: h
 * 5120, 40 query and 8 KV heads of 128, SwiGLU 27648, two RMSNorms): Q, K, V and the
 * output split by t = 4, the MLP too, the layer norms replicated; Qwen3's per-head q/k
 * norms replicated (2 d), OLMo 2's over all heads split with their heads ((a + g) d / t). */
static void test_layer_params_tp(void)
{
    struct dp_model m = {0};
    m.layers = 64;
    m.hidden = 5120;
    m.heads = 40;
    m.kv_heads = 8;
    m.head_dim = 128;
    m.ffn_hidden = 27648;
    m.vocab = 100352;
    m.seq_len = 4096;
    m.ffn = DP_FFN_SWIGLU;
    m.norm = DP_NORM_RMSNORM;
    m.norms_per_layer = 2;
    m.qk_norm = true;
    struct dp_layout l;
    dp_layout_default(&l);
    l.tp = 4;
    const int64_t h = 5120, a = 40, g = 8, d = 128, f = 27648, t = 4;
    const int64_t base = (h * a * d + 2 * h * g * d + a * d * h + 3 * h * f) / t + 2 * h;
    int64_t dense, expert;
    dp_mem_layer_params(&m, &l, DP_LAYER_DENSE, &dense, &expert);
    CHECK_EQ(dense, base + 2 * d);
    CHECK_EQ(expert, 0);
    m.qk_norm_full = true;
    dp_mem_layer_params(&m, &l, DP_LAYER_DENSE, &dense, &expert);
    CHECK_EQ(dense, base + (a + g) * d / t);
    CHECK_EQ(dense, 121908736); /* 487,587,840 / 4 + 1,536 + 10,240 */
}

int main(void)
{
    test_dualpipev_uneven();
    test_zero_paper();
    test_megatron_dist_opt();
    test_korthikanti_layer();
    test_gqa_swiglu();
    test_layer_params_tp();
    test_stages();
    test_flops_narayanan();
    return check_done("test_costmodel_memory");
}
