/*
 * Mixture-of-experts and MLA terms of the cost model against hand-computed
 * values: layer kinds per stage (dense-first layers, uneven splits,
 * interleaving), exact parameter counts, per-GPU parameters under ETP/EP and
 * their expert-data-parallel sharding, the routed load (capacity, padding,
 * imbalance), MoE and MLA activations, FLOPs, the all-to-all path by
 * placement, grouped-GEMM efficiency, dispatch and expert-TP collectives, and
 * the per-kind stage assembly of the step time.
 */
#include "check.h"
#include "costmodel/costmodel.h"

#include <stdlib.h>

/*
 * A small DeepSeek-style model: 4 layers of h = 1024, the first dense (SwiGLU
 * 4096), then MoE layers of 8 routed experts of 512 (top-2) plus 1 shared expert
 * of 512, a router bias; MLA with 8 heads, q rank 256, kv rank 128, nope 64,
 * rope 32, v 64 (q/k head_dim 96).
 */
static struct dp_model tiny_ds(void)
{
    struct dp_model m = {0};
    snprintf(m.name, sizeof m.name, "tiny-ds");
    m.layers = 4;
    m.hidden = 1024;
    m.heads = m.kv_heads = 8;
    m.ffn_hidden = 4096;
    m.vocab = 1024;
    m.seq_len = 256;
    m.ffn = DP_FFN_SWIGLU;
    m.norm = DP_NORM_RMSNORM;
    m.norms_per_layer = 2;
    m.experts = 8;
    m.top_k = 2;
    m.moe_ffn_hidden = 512;
    m.moe_shared_experts = 1;
    m.moe_shared_ffn_hidden = 512;
    m.moe_router_bias = true;
    m.moe_dense_layers = 1;
    m.mla = true;
    m.mla_q_rank = 256;
    m.mla_kv_rank = 128;
    m.mla_nope_dim = 64;
    m.mla_rope_dim = 32;
    m.mla_v_dim = 64;
    m.head_dim = 96;
    return m;
}

static struct dp_layout layout16(void)
{
    /* 16 GPUs: tp 2 (SP), pp 2, dp 4; experts etp 1, ep 4, so edp = 2*1*4/(4*1) = 2. */
    struct dp_layout l;
    dp_layout_default(&l);
    l.tp = 2;
    l.sp = true;
    l.pp = 2;
    l.dp = 4;
    l.ep = 4;
    l.etp = 1;
    l.seq_len = 256;
    l.mbs = 2;
    l.gbs = 16;
    l.zero = 1;
    return l;
}

static void test_layer_kinds(void)
{
    struct dp_model m = tiny_ds();
    m.layers = 8;
    m.moe_dense_layers = 3;
    struct dp_layer_kinds k;
    dp_model_layer_kinds(&m, 0, 8, &k);
    CHECK_EQ(k.n[DP_LAYER_DENSE], 3);
    CHECK_EQ(k.n[DP_LAYER_MOE], 5);
    dp_model_layer_kinds(&m, 2, 3, &k); /* layers 2, 3, 4: one dense */
    CHECK_EQ(k.n[DP_LAYER_DENSE], 1);
    CHECK_EQ(k.n[DP_LAYER_MOE], 2);
    CHECK_EQ(dp_model_layer_kind(&m, 2), DP_LAYER_DENSE);
    CHECK_EQ(dp_model_layer_kind(&m, 3), DP_LAYER_MOE);
    struct dp_layout l;
    dp_layout_default(&l);
    /* pp 3 split 2/4/2: stage 0 = layers 0-1 (dense), stage 1 = 2-5 (1 dense, 3 MoE),
     * stage 2 = 6-7 (MoE). */
    l.pp = 3;
    l.first_stage_layers = l.last_stage_layers = 2;
    int want[3][2] = {{2, 0}, {1, 3}, {0, 2}};
    for (int r = 0; r < 3; r++) {
        dp_layout_stage_kinds(&l, &m, r, &k);
        CHECK_EQ(k.n[DP_LAYER_DENSE], want[r][0]);
        CHECK_EQ(k.n[DP_LAYER_MOE], want[r][1]);
    }
    /* Interleaved pp 2 x vpp 2, chunks of 2 layers: stage 0 holds virtual stages 0
     * (layers 0-1) and 2 (layers 4-5): 2 dense + 2 MoE; stage 1 holds 1 (layers 2-3)
     * and 3 (6-7): 1 dense + 3 MoE. */
    dp_layout_default(&l);
    l.pp = 2;
    l.vpp = 2;
    dp_layout_stage_kinds(&l, &m, 0, &k);
    CHECK_EQ(k.n[DP_LAYER_DENSE], 2);
    CHECK_EQ(k.n[DP_LAYER_MOE], 2);
    dp_layout_stage_kinds(&l, &m, 1, &k);
    CHECK_EQ(k.n[DP_LAYER_DENSE], 1);
    CHECK_EQ(k.n[DP_LAYER_MOE], 3);
    /* A dense model has one kind. */
    m.experts = 0;
    m.moe_dense_layers = 0;
    dp_layout_stage_kinds(&l, &m, 1, &k);
    CHECK_EQ(k.n[DP_LAYER_DENSE], 4);
    CHECK_EQ(k.n[DP_LAYER_MOE], 0);
    CHECK(!dp_model_mixed_layers(&m));
}

static void test_param_count(void)
{
    struct dp_model m = tiny_ds();
    struct dp_param_count pc;
    dp_model_count(&m, &pc);
    /* MLA attention (transformers DeepseekV3Attention):
     *   q_a_proj 1024*256 + q_a_layernorm 256 + q_b_proj 256*8*96        = 459,008
     *   kv_a_proj 1024*(128+32) + kv_a_layernorm 128 + kv_b_proj 128*8*128 = 295,040
     *   o_proj 8*64*1024                                                 = 524,288 */
    const int64_t attn = 459008 + 295040 + 524288, norms = 2 * 1024;
    CHECK_EQ(pc.attention, attn + 1024);
    /* Dense layer: + SwiGLU 3*1024*4096 = 12,582,912. */
    CHECK_EQ(pc.per_dense_layer, attn + 12582912 + norms);
    /* MoE layer: 8 experts x 3*1024*512 (1,572,864 each), router 1024*8 + bias 8, one
     * shared expert 1,572,864. Active: 2 routed + shared + router. */
    CHECK_EQ(pc.per_layer, attn + 8 * 1572864 + 8200 + 1572864 + norms);
    CHECK_EQ(pc.per_layer_active, attn + 2 * 1572864 + 8200 + 1572864 + norms);
    /* Total: 1 dense + 3 MoE layers, embedding and untied head 1024*1024 each, final
     * norm 1024. */
    CHECK_EQ(pc.total, (attn + 12582912 + norms) + 3 * (attn + 9 * 1572864 + 8200 + norms) +
                           2 * 1048576 + 1024);
    CHECK_EQ(pc.active, (attn + 12582912 + norms) + 3 * (attn + 3 * 1572864 + 8200 + norms) +
                            2 * 1048576 + 1024);
    /* Qwen3-style q/k norms: 2 * head_dim per layer. */
    struct dp_model q = tiny_ds();
    q.mla = false;
    q.moe_shared_experts = 0;
    q.moe_router_bias = false;
    q.moe_dense_layers = 0;
    q.kv_heads = 2;
    q.head_dim = 128; /* 8 x 128 = 1024 */
    struct dp_param_count a, b;
    dp_model_count(&q, &a);
    q.qk_norm = true;
    dp_model_count(&q, &b);
    CHECK_EQ(b.total - a.total, 4 * 2 * 128);
}

static void test_stage_params(void)
{
    struct dp_model m = tiny_ds();
    struct dp_layout l = layout16();
    int64_t d, e;
    /* Per GPU (tp 2, etp 1, ep 4), Megatron MLA: q_a_proj and kv_a_proj and the latent
     * norms duplicated, the up projections and o_proj split by tp:
     *   1024*256 + 256 + 256*768/2 = 360,704; 1024*160 + 128 + 128*1024/2 = 229,504;
     *   524,288/2 = 262,144; so attention 852,352, plus the two layer norms 2048.
     * Dense layer: + 3*1024*4096/2 = 6,291,456.
     * MoE layer, dense part: router 8200 (replicated) + shared expert 1,572,864/2;
     * expert part: 8/4 = 2 local experts, unsplit (etp 1): 2 * 1,572,864. */
    const int64_t attn = 360704 + 229504 + 262144 + 2048;
    const int64_t dense_layer = attn + 6291456, moe_dense = attn + 8200 + 786432;
    /* Stage 0 = layer 0 (dense) + layer 1 (MoE) + the embedding 1024*1024/2. */
    dp_mem_stage_params(&m, &l, 0, &d, &e);
    CHECK_EQ(d, dense_layer + moe_dense + 524288);
    CHECK_EQ(e, 3145728);
    /* Stage 1 = layers 2, 3 (MoE) + final norm 1024 + head 1024*1024/2. */
    dp_mem_stage_params(&m, &l, 1, &d, &e);
    CHECK_EQ(d, 2 * moe_dense + 1024 + 524288);
    CHECK_EQ(e, 2 * 3145728);
    /* ETP 2 splits each local expert in two. */
    l.etp = 2; /* ep 4 x etp 2 = 8 = tp*cp*dp: edp 1 */
    dp_mem_stage_params(&m, &l, 1, &d, &e);
    CHECK_EQ(e, 3145728);
    CHECK_EQ(dp_layout_edp(&l), 1);
    l.etp = 1;
    CHECK_EQ(dp_layout_edp(&l), 2);
    /* ZeRO-1: the dense part's optimizer states over dp*cp = 4, the experts' over
     * edp = 2, 12 bytes each (fp32 master, m, v): stage 1. */
    struct dp_cluster cl = {0};
    cl.gpu.mem_bytes = 80LL << 30;
    cl.gpu.usable_fraction = 1;
    cl.nodes = 2;
    cl.gpus_per_node = 8;
    struct dp_mem_stage st;
    dp_mem_stage(&m, &cl, &l, NULL, 1, &st);
    int64_t dense1 = 2 * moe_dense + 1024 + 524288;
    CHECK_EQ(st.optimizer_bytes, (dense1 + 3) / 4 * 12 + 2 * 3145728 / 2 * 12);
    CHECK_EQ(st.kind_layers[DP_LAYER_DENSE], 0);
    CHECK_EQ(st.kind_layers[DP_LAYER_MOE], 2);
}

static void test_load(void)
{
    struct dp_model m = tiny_ds();
    struct dp_layout l = layout16();
    /* Dropless by default: balanced routing's sampling spread on ep 4 with T k = 512 x 2 =
     * 1024 copies per rank: 1 + sqrt(2 ln 4 x (1 - 1/4) / 1024) = 1 + sqrt(0.0020307) =
     * 1.0450633. */
    CHECK_NEAR(dp_moe_load(&m, &l), 1.0450633, 1e-7);
    /* A given imbalance (Switch Transformer's 1.25 for comparison). */
    l.moe_imbalance = 1.25;
    CHECK_NEAR(dp_moe_load(&m, &l), 1.25, 0);
    /* Rows per GPU: load x T k etp / tp, T = 256 x 2 tokens: 1.25 * 512 * 2 / 2 = 640. */
    CHECK_NEAR(dp_moe_rows(&m, &l), 640, 1e-15);
    /* etp = tp: every TP rank works on its group's gathered copies, 1.25 * 512 * 2. */
    l.etp = 2;
    CHECK_NEAR(dp_moe_rows(&m, &l), 1280, 1e-15);
    l.etp = 1;
    /* A capacity factor caps the busiest rank; padding fills every expert to it. */
    l.moe_capacity = 1.0;
    CHECK_NEAR(dp_moe_load(&m, &l), 1.0, 0);
    l.moe_capacity = 1.5;
    CHECK_NEAR(dp_moe_load(&m, &l), 1.25, 0);
    l.moe_pad = true;
    CHECK_NEAR(dp_moe_load(&m, &l), 1.5, 0);
    /* One EP rank holds every expert: no rank is busier than another. */
    l.moe_pad = false;
    l.moe_capacity = 0;
    l.ep = 1;
    CHECK_NEAR(dp_moe_load(&m, &l), 1.0, 0);
    /* Benchmarks with forced-balanced routing. */
    l.ep = 4;
    l.moe_imbalance = 1;
    CHECK_NEAR(dp_moe_rows(&m, &l), 512, 1e-15);
}

static void test_activations(void)
{
    struct dp_model m = tiny_ds();
    struct dp_layout l = layout16();
    l.moe_imbalance = 1.25;
    /* T = 512 tokens, p = 2 bytes, SP divides by u = 2, flash attention. */
    struct dp_act_layer al[DP_LAYER_KINDS];
    dp_act_layers(&m, &l, al);
    /* MLA attention: norm output 2*512*1024/2; q latent and its norm output
     * 2*2*512*256/2; kv latent (+ rope) and its norm output 2*512*(2*128 + 32)/2;
     * Q and K 2*2*512*8*96/2; V and out-proj input 2*2*512*8*64/2; two layer-norm
     * inputs 2*2*512*1024/2. */
    int64_t attn = 524288 + 262144 + 147456 + 786432 + 524288 + 1048576;
    CHECK_EQ(al[DP_LAYER_MOE].attn_bytes, attn);
    CHECK_EQ(al[DP_LAYER_DENSE].attn_bytes, attn);
    CHECK_EQ(al[DP_LAYER_MOE].scores_bytes, 4 * 8 * 256 * 2 / 2); /* fp32 log-sum-exp */
    /* MoE MLP: norm output 524,288; router fp32 scores 4*512*8/2 and top-2 index +
     * weight 12*512*2/2; 640 rows (imbalance 1.25) of fc1 input 640*2*1024 and SwiGLU
     * intermediates 640*3*2*512; the shared expert's 3*2*512*512/2. */
    int64_t moe = 524288 + 8192 + 6144 + 1310720 + 1966080 + 786432;
    CHECK_EQ(al[DP_LAYER_MOE].mlp_bytes, moe);
    /* Dense MLP: norm output + 3*2*512*4096/2. */
    CHECK_EQ(al[DP_LAYER_DENSE].mlp_bytes, 524288 + 6291456);
    /* Stage 0 of 1F1B (pp 2, 8 micro-batches) holds 2 in flight of 1 dense + 1 MoE. */
    struct dp_cluster cl = {0};
    cl.gpu.mem_bytes = 80LL << 30;
    cl.gpu.usable_fraction = 1;
    cl.nodes = 2;
    cl.gpus_per_node = 8;
    struct dp_mem_stage st;
    dp_mem_stage(&m, &cl, &l, NULL, 0, &st);
    int64_t full_moe = attn + 8192 + moe, full_dense = attn + 8192 + 524288 + 6291456;
    CHECK_EQ(st.act_layers_bytes, 2 * (full_moe + full_dense));
    CHECK_EQ(st.act_layer_bytes, full_dense);
    /* Full recompute keeps each layer's input; the working set is the largest layer. */
    l.recompute = DP_RECOMPUTE_FULL;
    dp_mem_stage(&m, &cl, &l, NULL, 0, &st);
    CHECK_EQ(st.act_layers_bytes, 2 * 2 * 524288);
    CHECK_EQ(st.act_working_bytes, full_dense);
}

static void test_flops(void)
{
    struct dp_model m = tiny_ds();
    struct dp_layout l = layout16();
    struct dp_flops f;
    dp_flops_step(&m, &l, &f);
    double tok = 512;
    /* MLA projections per token: q 1024*256 + 256*768, kv 1024*160 + 128*1024, o 512*1024
     * = 1,277,952 multiply-adds; scores 2 b a s^2 (96 + 64). */
    double attn = 2 * tok * 1277952.0, scores = 2 * 2 * 8 * 256.0 * 256 * (96 + 64);
    CHECK_NEAR(f.scores_fwd, scores, 1e-12);
    /* Dense: 2*3*1024*4096 per token; MoE: 2 routed + 1 shared expert of 2*3*1024*512,
     * router 2*1024*8. */
    CHECK_NEAR(f.kind_fwd[DP_LAYER_DENSE], attn + scores + tok * 2 * 3 * 1024 * 4096.0, 1e-12);
    CHECK_NEAR(f.kind_fwd[DP_LAYER_MOE],
               attn + scores + tok * (3 * 2 * 3 * 1024 * 512.0 + 2 * 1024 * 8), 1e-12);
    /* The step: gbs/mbs = 8 micro-batches x (1 dense + 3 MoE + head 2*1024*1024/token), x3. */
    double fwd =
        8 * (f.kind_fwd[DP_LAYER_DENSE] + 3 * f.kind_fwd[DP_LAYER_MOE] + 2 * tok * 1024 * 1024);
    CHECK_NEAR(f.model_flops, 3 * fwd, 1e-12);
}

static struct dp_cluster cluster(int nodes, int gpn, double half_flops)
{
    struct dp_cluster c = {0};
    snprintf(c.gpu.name, sizeof c.gpu.name, "test-gpu");
    for (int i = 0; i < DP_PRECISIONS; i++)
        c.gpu.peak_tflops[i] = 100;
    c.gpu.mem_bytes = 80LL << 30;
    c.gpu.usable_fraction = 1;
    c.gpu.mem_bw_gbps = 1000;
    c.gpu.gemm.eff_max = 1.0;
    c.gpu.gemm.half_flops = half_flops;
    c.nodes = nodes;
    c.gpus_per_node = gpn;
    c.intra = (struct dp_link){"nvl", DP_LINK_NVLINK, 200, 0, 1.0, 0};
    c.inter = (struct dp_link){"net", DP_LINK_NET, 25, 0, 1.0, 0};
    c.nics_per_node = gpn;
    return c;
}

static void test_alltoall_path(void)
{
    struct dp_cluster c = cluster(2, 8, 0);
    struct dp_path p;
    /* EP 8 inside a node: NVSwitch at the full per-GPU rate. */
    dp_alltoall_path(&c, 8, 1, &p);
    CHECK(!p.inter_node);
    CHECK_NEAR(p.busbw_gbps, 200, 1e-12);
    /* EP 16 over two nodes, 8 per node: each GPU sends 7/16 of its buffer over NVLink
     * and 8/16 through its own 25 GB/s NIC share; the NIC paces it:
     * busbw = (15/16) / max((7/16)/200, (8/16)/25) = 46.875 GB/s. A ring collective over
     * the same group aggregates 8 NICs and runs at the NVLink cap (200). */
    dp_alltoall_path(&c, 16, 1, &p);
    CHECK(p.inter_node);
    CHECK_EQ(p.members_per_node, 8);
    CHECK_NEAR(p.busbw_gbps, 46.875, 1e-12);
    dp_group_path(&c, 16, 1, &p);
    CHECK_NEAR(p.busbw_gbps, 200, 1e-12);
    /* Groups of 4, stride 4 (0, 4, 8, 12): 2 per node, half the traffic crosses:
     * (3/4) / max((1/4)/200, (2/4)/25) = 37.5. */
    dp_alltoall_path(&c, 4, 4, &p);
    CHECK_EQ(p.members_per_node, 2);
    CHECK_NEAR(p.busbw_gbps, 37.5, 1e-12);
    /* dp_coll_time_s then charges (n-1)/n of the buffer at that rate. */
    CHECK_NEAR(dp_coll_time_s(DP_ALLTOALL, 1e9, 4, &p), 0.75 * 1e9 / 37.5e9, 1e-12);
    /* The layout's EP group: etp 1, ep 16 over 2 nodes of 8 GPUs. */
    struct dp_layout l;
    dp_layout_default(&l);
    l.dp = 16;
    l.ep = 16;
    dp_place_path(&c, &l, DP_PLACE_EP, &p);
    CHECK_NEAR(p.busbw_gbps, 46.875, 1e-12);
}

/* A MoE model without MLA, shared experts or dense-first layers, for layer times. */
static struct dp_model plain_moe(void)
{
    struct dp_model m = tiny_ds();
    m.mla = false;
    m.moe_shared_experts = 0;
    m.moe_router_bias = false;
    m.moe_dense_layers = 0;
    m.head_dim = 128;
    m.ffn_hidden = 1024; /* the dense kind, for the comparison below */
    m.moe_ffn_hidden = 1024;
    m.seq_len = 1024;
    return m;
}

/* eff(x) = x / (x + half) with eff_max 1 (profiles/README.md), at 100 TFLOP/s. */
static double gemm_time(double flops, double half, double tq)
{
    return flops / (100e12 * flops / (flops + half) * tq);
}

static void test_moe_layer_time(void)
{
    const double half = 1e9;
    struct dp_cluster c = cluster(1, 8, half);
    struct dp_model m = plain_moe();
    struct dp_layout l;
    dp_layout_default(&l);
    l.seq_len = 1024;
    l.mbs = 1;
    l.dp = 2;
    l.ep = 2;
    l.gbs = 2;
    l.moe_imbalance = 1;
    struct dp_layer_time lt[DP_LAYER_KINDS];
    dp_time_layer(&m, &c, &l, lt);
    /*
     * Both kinds share the attention; the MLPs differ. T = 1024 tokens, k = 2: 2048 rows
     * over 8/2 = 4 local experts, 512 rows each (all dims multiples of 128).
     *   router  1024 x 8 x 1024: 8 of a 128-wide tile, 16.8 MFLOP at 8/128 efficiency
     *   experts 4 x fc1 512 x 2048 x 1024 (2.147 GFLOP) + 4 x fc2 512 x 1024 x 1024
     *   dense   fc1 1024 x 2048 x 1024 (4.295 GFLOP) + fc2 1024 x 1024 x 1024
     * One GEMM of all 2048 rows would run at 4.295/(4.295 + 1) efficiency; four of 512
     * rows run at 2.147/(2.147 + 1) each. The four of fc1 (and of fc2) are one grouped call:
     * of each GEMM's fixed cost, half / peak = 10 us, a kernel's 5 us (launch, prologue,
     * epilogue) is paid per expert and the other 5 us, the call's host time, once: 3 x 5 us
     * less than four separate GEMMs, per grouped call.
     */
    const double shared = 3 * (half / 100e12 - 5e-6);
    double router = gemm_time(2.0 * 1024 * 8 * 1024, half, 8.0 / 128);
    double experts = 4 * gemm_time(2.0 * 512 * 2048 * 1024, half, 1) +
                     4 * gemm_time(2.0 * 512 * 1024 * 1024, half, 1) - 2 * shared;
    double dense =
        gemm_time(2.0 * 1024 * 2048 * 1024, half, 1) + gemm_time(2.0 * 1024 * 1024 * 1024, half, 1);
    CHECK_NEAR(lt[DP_LAYER_MOE].gemm_f - lt[DP_LAYER_DENSE].gemm_f, router + experts - dense, 1e-9);
    /* Dispatch + combine: two all-to-alls of 2048 rows x 1024 x 2 bytes over 2 GPUs on
     * NVLink (200 GB/s): (1/2) x 4,194,304 / 200e9 each, forward and backward. */
    CHECK_NEAR(lt[DP_LAYER_MOE].ep_f, 2 * 0.5 * 4194304 / 200e9, 1e-12);
    CHECK_NEAR(lt[DP_LAYER_MOE].ep_b, lt[DP_LAYER_MOE].ep_f, 1e-12);
    CHECK_NEAR(lt[DP_LAYER_DENSE].ep_f, 0, 0);
    /* The busiest EP rank under the default imbalance (routing statistics: ep 2, T k =
     * 2048 copies, 1 + sqrt(2 ln 2 x 1/2 / 2048) = 1.018397) moves that many more copies. */
    l.moe_imbalance = DP_MOE_IMBALANCE_DEFAULT;
    dp_time_layer(&m, &c, &l, lt);
    CHECK_NEAR(lt[DP_LAYER_MOE].ep_f, 1.018397 * 2 * 0.5 * 4194304 / 200e9, 1e-6);
    /* Padding to capacity 1.5: every expert gets 768 rows. */
    l.moe_capacity = 1.5;
    l.moe_pad = true;
    dp_time_layer(&m, &c, &l, lt);
    double padded = 4 * gemm_time(2.0 * 768 * 2048 * 1024, half, 1) +
                    4 * gemm_time(2.0 * 768 * 1024 * 1024, half, 1) - 2 * shared;
    CHECK_NEAR(lt[DP_LAYER_MOE].gemm_f - lt[DP_LAYER_DENSE].gemm_f, router + padded - dense, 1e-9);

    /* FP8 GEMMs at 200 TFLOP/s with a 20 us fixed cost (half 4e9): the expert GEMMs pay it
     * per expert but for the bf16 call's 5 us above a kernel, which they share as before;
     * the router stays a bf16 GEMM. */
    l.moe_capacity = 0;
    l.moe_pad = false;
    l.moe_imbalance = 1;
    l.gemm = DP_GEMM_FP8;
    c.gpu.fp8_tflops = 200;
    c.gpu.gemm_fp8 = (struct dp_gemm_curve){1.0, 4e9};
    dp_time_layer(&m, &c, &l, lt);
    double t8 = 4 * (2.0 * 512 * 2048 * 1024 + 4e9) / 200e12 +
                4 * (2.0 * 512 * 1024 * 1024 + 4e9) / 200e12 - 2 * shared;
    double d8 =
        (2.0 * 1024 * 2048 * 1024 + 4e9) / 200e12 + (2.0 * 1024 * 1024 * 1024 + 4e9) / 200e12;
    CHECK_NEAR(lt[DP_LAYER_MOE].gemm_f - lt[DP_LAYER_DENSE].gemm_f, router + t8 - d8, 1e-9);
    /* MXFP8 with a fixed cost of 50 us per module call (mxfp8_gemm_us): the grouped expert
     * GEMMs pay it once per call, as the dense MLP's two GEMMs do, not once per expert: four
     * calls a layer forward (QKV, out-projection, fc1, fc2) in either kind. */
    l.fp8_recipe = DP_FP8_MXFP8;
    c.gpu.fp8_block_scaling = true;
    struct dp_layer_time mx0[DP_LAYER_KINDS];
    dp_time_layer(&m, &c, &l, mx0);
    c.gpu.mxfp8_fixed_s = 50e-6;
    dp_time_layer(&m, &c, &l, lt);
    CHECK_NEAR(lt[DP_LAYER_MOE].gemm_f - mx0[DP_LAYER_MOE].gemm_f, 4 * 50e-6, 1e-12);
    CHECK_NEAR(lt[DP_LAYER_DENSE].gemm_f - mx0[DP_LAYER_DENSE].gemm_f, 4 * 50e-6, 1e-12);
    c.gpu.mxfp8_fixed_s = 0;
    c.gpu.fp8_block_scaling = false;
    l.fp8_recipe = DP_FP8_DELAYED;
    l.gemm = DP_GEMM_DEFAULT;
    c.gpu.fp8_tflops = 0;
    c.gpu.gemm_fp8 = (struct dp_gemm_curve){0, 0};
    dp_time_layer(&m, &c, &l, lt);

    /* DeepEP-style dispatch: one copy per destination GPU. A token's 2 of 8 experts miss
     * the peer's 4 with probability C(4,2)/C(8,2) = 6/28, so it sends 22/28 copies (not
     * 2 x 1/2) of its 1024 x 2 bytes: 1024 tokens (2048 copies / k). */
    l.moe_capacity = 0;
    l.moe_pad = false;
    l.moe_imbalance = 1;
    l.moe_dispatcher = DP_DISPATCH_DEDUP;
    dp_time_layer(&m, &c, &l, lt);
    CHECK_NEAR(lt[DP_LAYER_MOE].ep_f, 2 * (22.0 / 28) * 1024 * 2048 / 200e9, 1e-12);
    l.moe_dispatcher = DP_DISPATCH_ALLTOALL;

    /* Tensor parallel 2 with SP, ep 1, etp 2: the routed experts use no TP region of
     * their own (only attention's), but the expert-TP group gathers the 2048 copies
     * (2048 x 1024 x 2 bytes) and reduce-scatters the outputs: 2 x (1/2) x 4,194,304 /
     * 200e9 forward at NCCL's LL128 protocol, 92% of the bus bandwidth (tuning.cc), which
     * beats Simple's 1.5 us more per step at this size (10.5 us of transfer). */
    dp_layout_default(&l);
    l.seq_len = 1024;
    l.mbs = 1;
    l.tp = 2;
    l.sp = true;
    l.gbs = 1;
    l.moe_imbalance = 1;
    dp_time_layer(&m, &c, &l, lt);
    CHECK_NEAR(lt[DP_LAYER_MOE].tp_f, lt[DP_LAYER_DENSE].tp_f / 2, 1e-12);
    CHECK_NEAR(lt[DP_LAYER_MOE].ep_f, 2 * 0.5 * 4194304 / (200e9 * 0.92), 1e-12);
    /* etp 1: no expert-TP traffic; each GPU runs half the copies at full width. */
    l.etp = 1;
    dp_time_layer(&m, &c, &l, lt);
    CHECK_NEAR(lt[DP_LAYER_MOE].ep_f, 0, 0);
    /* A shared expert brings its own TP region: as many as a dense layer. */
    m.moe_shared_experts = 1;
    m.moe_shared_ffn_hidden = 1024;
    dp_time_layer(&m, &c, &l, lt);
    CHECK_NEAR(lt[DP_LAYER_MOE].tp_f, lt[DP_LAYER_DENSE].tp_f, 1e-12);
}

static void test_dispatch_copies(void)
{
    /* Qwen3-30B-A3B (128 experts, top-8) on EP 16 over two nodes of 8. */
    struct dp_model m = tiny_ds();
    m.experts = 128;
    m.top_k = 8;
    struct dp_layout l;
    dp_layout_default(&l);
    double in, net;
    /* All-to-all: 8 copies, 7/16 to the node's other members, 8/16 across. */
    dp_moe_dispatch_copies(&m, &l, 16, 8, &in, &net);
    CHECK_NEAR(in, 8.0 * 7 / 16, 1e-15);
    CHECK_NEAR(net, 8.0 * 8 / 16, 1e-15);
    /* Dedup: the other node holds 64 experts; a token misses them all with probability
     * C(64,8)/C(128,8), so 1 - that = 0.99690414 copies cross. Each GPU holds 8 experts
     * (hit with 1 - C(120,8)/C(128,8) = 0.41228205); on each of the 2 nodes the 7
     * GPUs other than the landing one get their copy over NVLink: 2 x 7 x 0.41228205. */
    l.moe_dispatcher = DP_DISPATCH_DEDUP;
    dp_moe_dispatch_copies(&m, &l, 16, 8, &in, &net);
    CHECK_NEAR(net, 0.9969041357232079, 1e-12);
    CHECK_NEAR(in, 5.771948709626665, 1e-12);
    /* Inside one node (n = g = 8): no copy crosses. */
    dp_moe_dispatch_copies(&m, &l, 8, 8, &in, &net);
    CHECK_NEAR(net, 0, 0);

    /* Round-robin routing (NeMo Automodel's FakeBalancedGate: token i takes experts 8i ..
     * 8i + 7 mod 128). Every first expert is a multiple of gcd(8, 128) = 8. */
    l.moe_routing = DP_ROUTING_ROUND_ROBIN;
    /* EP 8 in one node, 16 experts per GPU: a token's 8 experts sit on one GPU, which is
     * the sender with probability 1/8: 7/8 of a copy over NVLink (random routing: 7 x
     * 0.65... = 4.63). */
    dp_moe_dispatch_copies(&m, &l, 8, 8, &in, &net);
    CHECK_NEAR(in, 7.0 / 8, 1e-15);
    CHECK_NEAR(net, 0, 0);
    /* EP 16 over two nodes, 8 experts per GPU: still one GPU and one node, which is the
     * other node for half the senders. */
    dp_moe_dispatch_copies(&m, &l, 16, 8, &in, &net);
    CHECK_NEAR(in, 7.0 / 8, 1e-15);
    CHECK_NEAR(net, 0.5, 1e-15);
    /* DeepSeek-V3's 256 experts, top-8, on EP 64 over 8 nodes: 4 experts per GPU, so two
     * GPUs (1 3/4 copies over NVLink) on one node (7/8 of a copy across). */
    m.experts = 256;
    dp_moe_dispatch_copies(&m, &l, 64, 8, &in, &net);
    CHECK_NEAR(in, 2 * 7.0 / 8, 1e-15);
    CHECK_NEAR(net, 7.0 / 8, 1e-15);
    /* DeepSeek-V2's 160 experts, top-6, on EP 8 in a node: 20 experts per GPU, first
     * experts 0, 2, ..., 158 (gcd 2); of each GPU's 10 starts, 16 and 18 (mod 20) run into
     * the next GPU: 1.2 GPUs per token, 1.2 x 7/8 = 1.05 copies over NVLink. */
    m.experts = 160;
    m.top_k = 6;
    dp_moe_dispatch_copies(&m, &l, 8, 8, &in, &net);
    CHECK_NEAR(in, 1.05, 1e-12);
    /* The all-to-all dispatcher sends a copy per (token, expert) whatever the routing. */
    l.moe_dispatcher = DP_DISPATCH_ALLTOALL;
    dp_moe_dispatch_copies(&m, &l, 8, 8, &in, &net);
    CHECK_NEAR(in, 6.0 * 7 / 8, 1e-15);
}

/*
 * PyTorch's non-reentrant checkpoint stops at the last saved tensor. Under the DeepEP
 * (dedup) path NeMo Automodel ports from Megatron's flex dispatcher, a MoE layer
 * unpermutes before the DeepEP combine, which saves no tensor: the combine all-to-all and
 * the residual add are not redone (torchtitan framework, full recompute). Not with the
 * all-to-all dispatcher, not under Megatron (CheckpointFunction reruns the layer).
 */
static void test_moe_early_stop(void)
{
    struct dp_cluster c = cluster(1, 8, 0);
    struct dp_model m = tiny_ds();
    m.mla = false;
    m.head_dim = 128;
    struct dp_layout l;
    dp_layout_default(&l);
    l.dp = 2;
    l.ep = 2;
    l.gbs = 2;
    l.seq_len = 1024;
    l.moe_imbalance = 1;
    l.moe_dispatcher = DP_DISPATCH_DEDUP;
    l.recompute = DP_RECOMPUTE_FULL;
    l.framework = DP_FW_TORCHTITAN;
    struct dp_layer_time lt[DP_LAYER_KINDS];
    dp_time_layer(&m, &c, &l, lt);
    const struct dp_layer_time *e = &lt[DP_LAYER_MOE];
    /* ep_f is dispatch + combine, two equal all-to-alls: the tail is one of them. */
    CHECK(e->ep_f > 0);
    CHECK_NEAR(e->tail_ep_f, e->ep_f / 2, 1e-15);
    /* ... and the residual add after the MLP: read output and residual, write (3 x 2 B
     * per element of 1024 tokens x 1024) at 80% of 1000 GB/s. */
    CHECK_NEAR(e->tail_f, 3.0 * 2 * 1024 * 1024 / (1000e9 * 0.8), 1e-15);
    /* The dense layer's tail is fc2, as before. */
    CHECK(lt[DP_LAYER_DENSE].tail_f > e->tail_f);
    CHECK_NEAR(lt[DP_LAYER_DENSE].tail_ep_f, 0, 0);
    l.moe_dispatcher = DP_DISPATCH_ALLTOALL;
    dp_time_layer(&m, &c, &l, lt);
    CHECK_NEAR(lt[DP_LAYER_MOE].tail_ep_f, 0, 0);
    CHECK_NEAR(lt[DP_LAYER_MOE].tail_f, 0, 0);
    l.moe_dispatcher = DP_DISPATCH_DEDUP;
    l.framework = DP_FW_MEGATRON;
    dp_time_layer(&m, &c, &l, lt);
    CHECK_NEAR(lt[DP_LAYER_MOE].tail_ep_f, 0, 0);
}

/*
 * Megatron-Core's EP all-to-all overlap (ep_overlap): a steady-state forward/backward pair
 * runs combine-bwd | attention-fwd, dispatch-fwd -> dispatch-bwd | mlp-bwd, wgrad -> mlp-fwd,
 * combine-fwd | attention-bwd; warm-up and cool-down passes run alone. Without a pipeline
 * one forward and one backward of the M = 8 / (2 x 1) = 4 micro-batches stay alone: 3/4 of
 * the passes merge. x is one all-to-all, C the layer's forward + backward compute.
 */
static void test_ep_overlap(void)
{
    struct dp_model m = plain_moe();
    struct dp_layout l;
    dp_layout_default(&l);
    l.dp = 2;
    l.ep = 2;
    l.gbs = 8;
    l.seq_len = 1024;
    l.moe_imbalance = 1;
    struct dp_layer_time lt[DP_LAYER_KINDS], ov[DP_LAYER_KINDS];
    /* A fast link: every all-to-all hides under the other pass's compute, so the pair pays
     * only the contention share of the four, 0.15 x 4x: per pass (1/4) 2x + (3/4) 0.3x. */
    struct dp_cluster c = cluster(1, 8, 1e9);
    c.intra.bw_gbps = 1e6;
    dp_time_layer(&m, &c, &l, lt);
    l.ep_overlap = true;
    dp_time_layer(&m, &c, &l, ov);
    double x = lt[DP_LAYER_MOE].ep_f / 2;
    CHECK(x > 0);
    CHECK_NEAR(ov[DP_LAYER_MOE].ep_f, 0.25 * 2 * x + 0.75 * 0.3 * x, 1e-6);
    CHECK_NEAR(ov[DP_LAYER_MOE].ep_b, ov[DP_LAYER_MOE].ep_f, 1e-15);
    CHECK_NEAR(ov[DP_LAYER_DENSE].ep_f, 0, 0);
    /* A slow link: each phase waits for its all-to-all (the middle one for two), the pair
     * takes 4x, of which the compute C hides: (4x - C) + 0.15 C exposed. */
    c.intra.bw_gbps = 0.01;
    l.ep_overlap = false;
    dp_time_layer(&m, &c, &l, lt);
    l.ep_overlap = true;
    dp_time_layer(&m, &c, &l, ov);
    const struct dp_layer_time *e = &lt[DP_LAYER_MOE];
    x = e->ep_f / 2;
    double C = 3 * e->gemm_f + e->attn_f + e->attn_b + 3 * e->ew_f;
    CHECK(x > C);
    CHECK_NEAR(ov[DP_LAYER_MOE].ep_f, 0.25 * 2 * x + 0.75 * (4 * x - 0.85 * C) / 2, 1e-9);
    /* The compute is untouched; with pp 2 and vpp 2 the (p - 1) + (v - 1) p = 3 of the
     * M v = 8 x 2 = 16 passes run alone. */
    CHECK_NEAR(ov[DP_LAYER_MOE].gemm_f, e->gemm_f, 0);
    l.pp = 2;
    l.vpp = 2;
    l.gbs = 8;
    l.dp = 1;
    l.ep_overlap = false;
    dp_time_layer(&m, &c, &l, lt);
    l.ep_overlap = true;
    dp_time_layer(&m, &c, &l, ov);
    e = &lt[DP_LAYER_MOE];
    x = e->ep_f / 2;
    C = 3 * e->gemm_f + e->attn_f + e->attn_b + 3 * e->ew_f;
    CHECK_NEAR(ov[DP_LAYER_MOE].ep_f, 3.0 / 16 * 2 * x + 13.0 / 16 * (4 * x - 0.85 * C) / 2, 1e-9);
    /* Megatron-Core refuses it without EP, with pp > 1 and no VPP, with full recompute, and
     * it is Megatron's. */
    struct dp_err err = {0};
    struct dp_model mm = m;
    l.ep = 1;
    CHECK_EQ(dp_layout_validate(&l, &mm, 2, &err), DP_EINFEASIBLE);
    CHECK_CONTAINS(err.msg, "ep_overlap needs ep > 1");
    l.ep = 2;
    l.dp = 2;
    l.gbs = 8;
    l.vpp = 1;
    err = (struct dp_err){0};
    CHECK_EQ(dp_layout_validate(&l, &mm, 4, &err), DP_EINFEASIBLE);
    CHECK_CONTAINS(err.msg, "needs vpp > 1");
    l.vpp = 2;
    l.recompute = DP_RECOMPUTE_FULL;
    err = (struct dp_err){0};
    CHECK_EQ(dp_layout_validate(&l, &mm, 4, &err), DP_EINFEASIBLE);
    CHECK_CONTAINS(err.msg, "recompute other than full");
    l.recompute = DP_RECOMPUTE_NONE;
    l.framework = DP_FW_TORCHTITAN;
    err = (struct dp_err){0};
    CHECK_EQ(dp_layout_validate(&l, &mm, 4, &err), DP_EINFEASIBLE);
    CHECK_CONTAINS(err.msg, "does not offer it");
    l.framework = DP_FW_MEGATRON;
    err = (struct dp_err){0};
    CHECK_EQ(dp_layout_validate(&l, &mm, 4, &err), 0);
}

static void test_mixed_stages(void)
{
    /* pp 2 of the tiny model: stage 0 holds the dense layer and a MoE layer, stage 1 two
     * MoE layers; each stage's forward compute is its layers' per-kind sum plus the
     * embedding or the head. */
    struct dp_cluster c = cluster(2, 8, 1e9);
    struct dp_model m = tiny_ds();
    struct dp_layout l = layout16();
    struct dp_layer_time lt[DP_LAYER_KINDS];
    dp_time_layer(&m, &c, &l, lt);
    CHECK(lt[DP_LAYER_DENSE].gemm_f != lt[DP_LAYER_MOE].gemm_f);
    struct dp_step_cost a;
    dp_time_step_with(&m, &c, &l, lt, &a);
    /* A model of MoE layers only (no dense prefix) moves stage 0's dense layer to MoE. */
    struct dp_model all = m;
    all.moe_dense_layers = 0;
    struct dp_step_cost b;
    dp_time_step_with(&all, &c, &l, lt, &b);
    const struct dp_layer_time *d = &lt[DP_LAYER_DENSE], *e = &lt[DP_LAYER_MOE];
    double fd = d->gemm_f + d->attn_f + d->ew_f, fe = e->gemm_f + e->attn_f + e->ew_f;
    double tfd = d->tp_f, tfe = e->tp_f;
    /* stage_fwd_s[0] = compute_f + tp_f (+ pp/2, equal in both). */
    CHECK_NEAR(a.stage_fwd_s[0] - b.stage_fwd_s[0], (fd + tfd) - (fe + tfe), 1e-9);
    CHECK_NEAR(a.stage_fwd_s[2], b.stage_fwd_s[2], 1e-12);
}

static void test_validate_rules(void)
{
    struct dp_model m = tiny_ds();
    struct dp_layout l = layout16();
    struct dp_err err = {0};
    CHECK_EQ(dp_layout_validate(&l, &m, 16, &err), 0);
    /* ep * etp must divide tp * cp * dp = 8. */
    l.etp = 4;
    CHECK_EQ(dp_layout_validate(&l, &m, 16, &err), DP_EINFEASIBLE);
    CHECK_CONTAINS(err.msg, "ep*etp = 4*4 does not divide tp*cp*dp = 8");
    /* Megatron-Core: EP with TP needs SP. */
    dp_err_clear(&err);
    l.etp = 1;
    l.sp = false;
    CHECK_EQ(dp_layout_validate(&l, &m, 16, &err), DP_EINFEASIBLE);
    CHECK_CONTAINS(err.msg, "sp: ep=4 with tp=2 needs sequence parallelism");
    /* Padding without a capacity. */
    dp_err_clear(&err);
    l.sp = true;
    l.moe_pad = true;
    CHECK_EQ(dp_layout_validate(&l, &m, 16, &err), DP_EINFEASIBLE);
    CHECK_CONTAINS(err.msg, "moe_pad needs a capacity factor");
}

/*
 * The model's invariant (dp_step_cost_sane) over DeepSeek-V3's layouts on 32 DGX H100 nodes.
 * Two bugs broke it there (session 14), and since a negative time is the fastest, `suggest`
 * ranked such layouts first: an expert's grouped GEMM gave back more host time than a
 * memory-bound GEMM holds (cp 64 leaves two tokens per expert: compute -89499 s), and HSDP
 * all-reduced expert gradients across replicas the experts do not have (an expert
 * data-parallel group of one under a shard group of 8: a path of no bandwidth, dp comm
 * infinite).
 */
/* The shipped DeepSeek-V3 on 32 DGX H100 nodes; false (and a failed check) if either fails
 * to load. */
static bool load_deepseek_v3(struct dp_model *m, struct dp_cluster *cl)
{
    struct dp_err err = {0};
    if (dp_model_load("deepseek-v3", m, &err) ||
        dp_cluster_from_system("dgx-h100", 32, NULL, cl, &err)) {
        CHECK_STR(err.msg, "");
        return false;
    }
    return true;
}

static void test_deepseek_sane(void)
{
    struct dp_model m;
    struct dp_cluster cl;
    struct dp_err err = {0};
    if (!load_deepseek_v3(&m, &cl))
        return;
    static const int tps[] = {1, 4, 8}, cps[] = {1, 2, 8, 64}, eps[] = {1, 8, 16, 64},
                     pps[] = {1, 16}, zeros[] = {1, 3}, sgs[] = {0, 8};
    int n = 0, bad = 0;
    for (int a = 0; a < 3; a++)
        for (int b = 0; b < 4; b++)
            for (int e = 0; e < 4; e++)
                for (int p = 0; p < 2; p++)
                    for (int z = 0; z < 2; z++)
                        for (int g = 0; g < 2; g++) {
                            struct dp_layout l;
                            dp_layout_default(&l);
                            l.tp = tps[a];
                            l.sp = l.tp > 1;
                            l.cp = cps[b];
                            l.ep = eps[e];
                            l.pp = pps[p];
                            l.dp = 256 / (l.tp * l.cp * l.pp);
                            l.zero = zeros[z];
                            l.shard_group = sgs[g];
                            l.recompute = DP_RECOMPUTE_FULL;
                            l.mbs = 1;
                            l.gbs = 1024;
                            l.seq_len = 4096;
                            dp_err_clear(&err);
                            if (dp_layout_validate(&l, &m, 256, &err) ||
                                dp_layout_check_framework(&l, NULL, &err))
                                continue;
                            struct dp_step_cost c;
                            dp_time_step_fast(&m, &cl, &l, &c);
                            n++;
                            bad += !dp_step_cost_sane(&c);
                        }
    CHECK(n > 100);
    CHECK_EQ(bad, 0);
    /* The first bug's layout: every expert GEMM keeps at least a kernel's fixed cost (5 us),
     * two GEMMs per expert forward (fused gate/up, down) over its 256 local experts. */
    struct dp_layout l;
    dp_layout_default(&l);
    l.tp = 4;
    l.sp = true;
    l.cp = 64;
    l.dp = 1;
    l.zero = 3;
    l.mbs = 1;
    l.gbs = 1024;
    l.seq_len = 4096;
    CHECK_EQ(dp_layout_validate(&l, &m, 256, &err), 0);
    struct dp_layer_time t[DP_LAYER_KINDS];
    dp_time_layer(&m, &cl, &l, t);
    CHECK(t[DP_LAYER_MOE].moe_f >= 2 * 256 * 5e-6);
    struct dp_step_cost c;
    CHECK_EQ(dp_time_step(&m, &cl, &l, &c, &err), 0);
    CHECK(c.compute_s > 0);
}

/*
 * Multi-token prediction (layout mtp_layers). Parameters: DeepSeek-V3's MTP module as its
 * technical report (Sec. 2.2) and config.json describe it, counted by hand here: two
 * RMSNorms (enorm, hnorm) and the final norm, eh_proj 2h x h, and one MoE layer (MLA:
 * q_a h x 1536 + its norm, q_b 1536 x 128 x 192, kv_a h x 576 + its norm, kv_b
 * 512 x 128 x 256, o 128 x 128 x h; 256 routed experts and one shared of 3 x h x 2048;
 * the router h x 256 and its bias; two norms). With the checkpoint's own embedding and
 * head (2 x 129280 x h) on top of the 671.03B main model that is the published 685B
 * ("671B of the Main Model weights and 14B of the MTP Module weights", DeepSeek-V3
 * README). FLOPs: the same layer's forward, eh_proj and the output layer again. Time: on
 * the last pipeline stage only, one more MoE layer's passes and the module's rest.
 */
static void test_mtp(void)
{
    struct dp_model m;
    struct dp_cluster cl;
    struct dp_err err = {0};
    if (!load_deepseek_v3(&m, &cl))
        return;
    const int64_t h = 7168;
    const int64_t mla =
        h * 1536 + 1536 + 1536 * 128 * 192 + h * 576 + 512 + 512 * 128 * 256 + 128 * 128 * h;
    const int64_t moe = 256 * 3 * h * 2048 + 3 * h * 2048 + 256 * h + 256;
    const int64_t module = 3 * h + 2 * h * h + mla + moe + 2 * h;
    struct dp_layout l;
    dp_layout_default(&l);
    l.dp = 256;
    l.mbs = 1;
    l.gbs = 1024;
    l.seq_len = 4096;
    int64_t d0, e0, d1, e1;
    dp_mem_stage_params(&m, &l, 0, &d0, &e0);
    l.mtp_layers = 1;
    dp_mem_stage_params(&m, &l, 0, &d1, &e1);
    CHECK_EQ((d1 + e1) - (d0 + e0), module);
    CHECK_EQ(e1 - e0, 256 * 3 * h * 2048); /* the routed experts are expert parameters */
    struct dp_param_count pc;
    dp_model_count(&m, &pc);
    CHECK_EQ(pc.total, 671026419200LL);
    double published = (double)pc.total + (double)module + 2.0 * 129280 * h;
    CHECK_NEAR(published, 685e9, 0.002);
    /* pp 2: the last stage holds the module and a copy of the input embedding (the
     * untied head does not serve), the first stage nothing more. */
    l.pp = 2;
    l.dp = 128;
    l.first_stage_layers = 31;
    int64_t f0, fe0, f1, fe1, s0, se0, s1, se1;
    l.mtp_layers = 0;
    dp_mem_stage_params(&m, &l, 0, &f0, &fe0);
    dp_mem_stage_params(&m, &l, 1, &s0, &se0);
    l.mtp_layers = 1;
    dp_mem_stage_params(&m, &l, 0, &f1, &fe1);
    dp_mem_stage_params(&m, &l, 1, &s1, &se1);
    CHECK_EQ(f1 + fe1, f0 + fe0);
    CHECK_EQ((s1 + se1) - (s0 + se0), module + 129280 * h);

    /* FLOPs per micro-batch of 4096 tokens: one more MoE layer forward (MLA projections,
     * full s x s scores over q/k 192 and v 128, 9 experts' SwiGLU, the router),
     * eh_proj and the output layer; x 3 for the backward, x gbs / mbs micro-batches. */
    l.pp = 1;
    l.dp = 256;
    l.first_stage_layers = 0;
    struct dp_flops a, b;
    l.mtp_layers = 0;
    dp_flops_step(&m, &l, &a);
    l.mtp_layers = 1;
    dp_flops_step(&m, &l, &b);
    const double T = 4096, s = 4096;
    const double proj =
        2 * T * (h * 1536.0 + 1536.0 * 128 * 192 + h * 576.0 + 512.0 * 128 * 256 + 128.0 * 128 * h);
    const double scores = 2 * 128.0 * s * s * (192 + 128);
    const double experts = 9 * 2 * 3 * T * h * 2048.0 + 2 * T * h * 256.0;
    const double extra = 2 * T * 2 * h * h + 2 * T * h * 129280.0;
    CHECK_NEAR(b.model_flops - a.model_flops, 3 * 1024 * (proj + scores + experts + extra), 1e-9);

    /* Time, pp 2: stage 1 (the last) gains one MoE layer's forward and the module's rest;
     * stage 0 is unchanged. tp 1, so the module's collectives are the layer's all-to-alls. */
    l.pp = 2;
    l.dp = 128;
    l.ep = 8;
    l.first_stage_layers = 31;
    struct dp_step_cost c0, c1;
    struct dp_layer_time lt[DP_LAYER_KINDS];
    l.mtp_layers = 0;
    CHECK_EQ(dp_time_step(&m, &cl, &l, &c0, &err), 0);
    l.mtp_layers = 1;
    CHECK_EQ(dp_time_step(&m, &cl, &l, &c1, &err), 0);
    dp_time_layer(&m, &cl, &l, lt);
    const struct dp_layer_time *x = &lt[DP_LAYER_MOE];
    /* stage_fwd_s: compute and TP collectives (the all-to-alls are apart, in ep_comm_s) */
    double layer_f = x->gemm_f + x->attn_f + x->ew_f + x->cast_f + x->tp_f;
    CHECK(x->mtp_f > x->head_f);
    CHECK_NEAR(c1.stage_fwd_s[0], c0.stage_fwd_s[0], 1e-12);
    CHECK_NEAR(c1.stage_fwd_s[2] - c0.stage_fwd_s[2], layer_f + x->mtp_f, 1e-9);
    CHECK(c1.step_time_s > c0.step_time_s);
    /* Megatron only: torchtitan's DeepSeek-V3 trains without it. */
    l.framework = DP_FW_TORCHTITAN;
    CHECK_EQ(dp_layout_check_framework(&l, NULL, &err), DP_EUSAGE);
    CHECK_CONTAINS(err.msg, "--mtp-layers");
    dp_err_clear(&err);
}

int main(void)
{
    test_deepseek_sane();
    test_layer_kinds();
    test_param_count();
    test_stage_params();
    test_load();
    test_activations();
    test_flops();
    test_alltoall_path();
    test_moe_layer_time();
    test_dispatch_copies();
    test_moe_early_stop();
    test_ep_overlap();
    test_mixed_stages();
    test_validate_rules();
    test_mtp();
    return check_done("test_costmodel_moe");
}
