/*
 * The step-time model, term by term, against values computed by hand from
 * the formulas' sources: nccl-tests bus-bandwidth factors, link selection
 * under Megatron placement, the GEMM roofline, the 1F1B bubble, recompute,
 * data-parallel exposure, and the FLOP-rate bookkeeping.
 */
#include "check.h"
#include "costmodel/costmodel.h"
#include "hand.h"

#include <stdlib.h>

/* The hand-worked GPU and model (hand.h); FP8 is not used here. */
static struct dp_cluster cluster(int nodes, int gpn)
{
    return hand_cluster(nodes, gpn);
}

static void test_collectives(void)
{
    struct dp_path p = {.busbw_gbps = 100, .latency_us = 0};
    /* nccl-tests: all-reduce time = S / busbw * 2(n-1)/n. */
    CHECK_NEAR(dp_coll_time_s(DP_ALLREDUCE, 1e9, 8, &p), 2.0 * 7 / 8 * 1e9 / 100e9, 1e-12);
    CHECK_NEAR(dp_coll_time_s(DP_REDUCE_SCATTER, 1e9, 8, &p), 7.0 / 8 * 1e9 / 100e9, 1e-12);
    CHECK_NEAR(dp_coll_time_s(DP_ALLGATHER, 1e9, 4, &p), 3.0 / 4 * 1e9 / 100e9, 1e-12);
    CHECK_NEAR(dp_coll_time_s(DP_P2P, 1e9, 2, &p), 1e9 / 100e9, 1e-12);
    CHECK_EQ((long long)(1e12 * dp_coll_time_s(DP_ALLREDUCE, 1e9, 1, &p)), 0);
    /* Latency: a small all-reduce on 64 ranks takes the tree (2 log2 n steps), not the
     * ring (2(n-1) steps). */
    p.latency_us = 10;
    double t = dp_coll_time_s(DP_ALLREDUCE, 8, 64, &p);
    CHECK_NEAR(t, 2 * 6 * 10e-6 + 2.0 * 63 / 64 * 8 / (100e9 * 0.9), 1e-9);
}

static void test_paths(void)
{
    struct dp_cluster c = cluster(4, 8);
    struct dp_path p;
    /* TP of 8 inside a node: the NVLink rate. */
    dp_group_path(&c, 8, 1, &p);
    CHECK(!p.inter_node);
    CHECK_NEAR(p.busbw_gbps, 200, 1e-12);
    /* DP of 4 with stride 8: one member per node, each GPU's NIC. */
    dp_group_path(&c, 4, 8, &p);
    CHECK(p.inter_node);
    CHECK_EQ(p.members_per_node, 1);
    CHECK_NEAR(p.busbw_gbps, 25, 1e-12);
    /* A full-node ring over 4 nodes: 8 NICs per node carry it, capped by NVLink. */
    dp_group_path(&c, 32, 1, &p);
    CHECK_EQ(p.members_per_node, 8);
    CHECK_NEAR(p.busbw_gbps, 200, 1e-12);
    c.nics_per_node = 2; /* two NICs for eight GPUs: each GPU's share is a quarter */
    dp_group_path(&c, 4, 8, &p);
    CHECK_NEAR(p.busbw_gbps, 25.0 * 2 / 8, 1e-12);
    /* A full mesh (xGMI): a pair of GPUs gets one link, eight get seven. */
    c.intra = (struct dp_link){"xgmi", DP_LINK_XGMI, 448, 0, 1.0, 64};
    dp_group_path(&c, 2, 1, &p);
    CHECK_NEAR(p.busbw_gbps, 64, 1e-12);
    dp_group_path(&c, 8, 1, &p);
    CHECK_NEAR(p.busbw_gbps, 448, 1e-12);
    /* Topology-derived classes: a group of 4 crossing a slower link. */
    c.ngroup_links = 3;
    c.group_link[0] = (struct dp_link){"pix", DP_LINK_PCIE, 24, 0, 1.0, 0};
    c.group_link[1] = (struct dp_link){"phb", DP_LINK_PCIE, 12, 0, 1.0, 0};
    c.group_link[2] = (struct dp_link){"sys", DP_LINK_PCIE, 8, 0, 1.0, 0};
    dp_group_path(&c, 2, 1, &p);
    CHECK_NEAR(p.busbw_gbps, 24, 1e-12);
    dp_group_path(&c, 4, 1, &p);
    CHECK_NEAR(p.busbw_gbps, 12, 1e-12);
    dp_group_path(&c, 2, 4, &p); /* ranks 0 and 4 lie in a block of 8 */
    CHECK_NEAR(p.busbw_gbps, 8, 1e-12);
}

/* A GPT-style model whose step time can be worked out by hand (hand.h). */
static struct dp_model model(void)
{
    return hand_model();
}

static struct dp_layout layout(void)
{
    struct dp_layout l;
    dp_layout_default(&l);
    l.seq_len = 1024;
    l.mbs = 4;
    l.gbs = 16;
    l.flash_attn = false;
    return l;
}

static void test_layer_gemms(void)
{
    /* With eff_max = 1, half_flops = 0 and 128-aligned shapes, a compute-bound GEMM
     * takes FLOPs / peak: one layer's forward projections are 24 T h^2 FLOPs for
     * h = 1024, f = 4h, T = 4096 tokens. */
    struct dp_model m = model();
    struct dp_cluster c = cluster(1, 1);
    struct dp_layout l = layout();
    struct dp_layer_time lts[DP_LAYER_KINDS];
    dp_time_layer(&m, &c, &l, lts);
    const struct dp_layer_time lt = lts[DP_LAYER_DENSE];
    double T = 4096, h = 1024;
    CHECK_NEAR(lt.gemm_f, 24 * T * h * h / 100e12, 1e-12);
    /* Scores: per head [1024 x 128] x [128 x 1024] is memory-bound on this GPU (ridge
     * 100 FLOP/byte): the roofline charges its bytes, A and B read, C written. */
    double heads = 8 * 4, s = 1024, d = 128, p = 2;
    double qk = heads * p * (s * d + d * s + s * s) / (1000e9 * DP_MEM_EFFICIENCY);
    double av = heads * p * (s * s + s * d + s * d) / (1000e9 * DP_MEM_EFFICIENCY);
    CHECK_NEAR(lt.attn_f, qk + av, 1e-12);
    CHECK_NEAR(lt.attn_b, 2 * lt.attn_f, 1e-12);
    CHECK_NEAR(lt.tp_f, 0, 0);
}

static void test_step_structure(void)
{
    struct dp_model m = model();
    struct dp_cluster c = cluster(1, 8);
    c.intra.bw_gbps = 1e9; /* make communication free to isolate the schedule */
    c.inter.bw_gbps = 1e9;
    struct dp_layout l = layout();
    struct dp_step_cost a, b;
    /* Single GPU, no recompute: compute = M (fwd + 2 fwd) per layer plus ends. */
    dp_time_step_fast(&m, &c, &l, &a);
    CHECK_NEAR(a.bubble_s, 0, 0);
    CHECK_NEAR(a.recompute_s, 0, 0);
    CHECK_NEAR(a.step_time_s, a.compute_s + a.optimizer_s, 1e-12);
    CHECK_NEAR(a.tokens_per_s, 16.0 * 1024 / a.step_time_s, 1e-12);
    /* Full recompute redoes the forward: one third of the layers' work (vocab 128 makes
     * the embedding and the head negligible). */
    l.recompute = DP_RECOMPUTE_FULL;
    dp_time_step_fast(&m, &c, &l, &b);
    CHECK_NEAR(b.recompute_s, a.compute_s / 3, 0.01);
    CHECK_NEAR(b.compute_s, a.compute_s, 1e-12);
    /* 1F1B on 4 stages of 2 layers, M = 16: the bubble is (p - 1) stage-steps
     * (Narayanan et al. 2021, Sec. 2.2), the embedding and the output layer included. */
    l.recompute = DP_RECOMPUTE_NONE;
    l.pp = 4;
    l.dp = 1;
    l.mbs = 1;
    dp_time_step_fast(&m, &c, &l, &a);
    double per_mb = a.compute_s / 16; /* M = 16 micro-batches */
    CHECK_NEAR(a.bubble_s, 3 * per_mb, 0.02);
    /* Interleaving 2 chunks of one layer. With an output layer heavier than the
     * embedding (vocabulary 32768) the last rank is the slowest and its chain is the
     * step: the bubble is the other ranks' chunk 0 once, so interleaving takes 3
     * layers' forward and backward out of it (3 x (3 GEMM passes + attention + 3
     * element-wise passes): Sec. 2.2's halving of the layers' share). The embedding
     * runs once either way, in chunk 0, but interleaved it paces the last rank: its
     * first group of p micro-batches arrives, and its last group's gradients leave, at
     * rank 0's rate, slower by the embedding's forward and backward (3 + 6 bytes per
     * token-hidden element over the HBM rate) for each of the p - 1 = 3 after the
     * first (pipeline.c). */
    struct dp_model m2 = m;
    m2.vocab = 32768;
    struct dp_layer_time lt[DP_LAYER_KINDS];
    dp_time_layer(&m2, &c, &l, lt);
    double layer_fb = 3 * lt[DP_LAYER_DENSE].gemm_f + lt[DP_LAYER_DENSE].attn_f +
                      lt[DP_LAYER_DENSE].attn_b + 3 * lt[DP_LAYER_DENSE].ew_f;
    dp_time_step_fast(&m2, &c, &l, &a);
    CHECK_EQ(a.slowest_stage, 3);
    l.vpp = 2;
    dp_time_step_fast(&m2, &c, &l, &b);
    double emb_fb = 9.0 * 2 * 1024 * 1024 / (1000e9 * DP_MEM_EFFICIENCY);
    CHECK_NEAR(a.bubble_s - b.bubble_s, 3 * layer_fb - 3 * emb_fb, 1e-6); /* p2p ~free */

    /* The 16 micro-batches as 4 schedules of 4 (local_batch 4: torchtitan's pipeline
     * schedule per gradient-accumulation step): the same work, each schedule with its
     * own fill and drain of p - 1 = 3 stage-steps: 4 x 3 instead of 3, one optimizer step. */
    l.vpp = 1;
    l.framework = DP_FW_TORCHTITAN;
    dp_time_step_fast(&m, &c, &l, &a);
    l.local_batch = 4;
    dp_time_step_fast(&m, &c, &l, &b);
    CHECK_NEAR(b.compute_s, a.compute_s, 1e-9);
    CHECK_NEAR(b.bubble_s, 4 * a.bubble_s, 1e-9);
    CHECK_NEAR(b.bubble_s, 12 * a.compute_s / 16, 0.02);
    CHECK_NEAR(b.optimizer_s, a.optimizer_s, 0);
    CHECK_NEAR(b.step_time_s - a.step_time_s, b.bubble_s - a.bubble_s, 1e-6);
    CHECK_NEAR(b.tokens_per_s, 16.0 * 1024 / b.step_time_s, 1e-9);
    /* local_batch 16 is the whole step: one schedule, the same step */
    l.local_batch = 16;
    dp_time_step_fast(&m, &c, &l, &b);
    CHECK_NEAR(b.step_time_s, a.step_time_s, 0);
    /* refused: not a multiple of mbs dividing gbs / dp, without a pipeline, or Megatron */
    struct dp_err err = {0};
    l.local_batch = 3;
    CHECK(dp_layout_validate(&l, &m, 4, &err) != 0);
    CHECK_CONTAINS(err.msg, "local_batch=3");
    l.local_batch = 4;
    l.framework = DP_FW_MEGATRON;
    dp_err_clear(&err);
    CHECK_EQ(dp_layout_check_framework(&l, NULL, &err), DP_EUSAGE);
    CHECK_CONTAINS(err.msg, "--local-batch: megatron runs all of a step's micro-batches");
    /* without a pipeline every micro-batch is its own pass already: no effect */
    l.framework = DP_FW_TORCHTITAN;
    l.pp = 1;
    dp_err_clear(&err);
    CHECK_EQ(dp_layout_validate(&l, &m, 1, &err), 0);
    CHECK_EQ(dp_layout_schedules(&l), 1);
    dp_time_step_fast(&m, &c, &l, &b);
    l.local_batch = 0;
    dp_time_step_fast(&m, &c, &l, &a);
    CHECK_NEAR(b.step_time_s, a.step_time_s, 0);
}

static void test_dp_exposure(void)
{
    struct dp_model m = model();
    struct dp_cluster c = cluster(2, 1);
    struct dp_layout l = layout();
    l.dp = 2;
    l.gbs = 8;
    l.dp_overlap = false;
    struct dp_step_cost a;
    dp_time_step_fast(&m, &c, &l, &a);
    /* Not overlapped: the whole all-reduce of the fp32 gradients of every parameter
     * this GPU holds (padded vocabulary 128), over the network path. */
    struct dp_mem_stage st;
    dp_mem_stage(&m, &c, &l, NULL, 0, &st);
    struct dp_path p;
    dp_group_path(&c, 2, 1, &p);
    double ar = dp_coll_time_s(DP_ALLREDUCE, (double)st.params * 4, 2, &p);
    CHECK_NEAR(a.dp_comm_s, ar, 1e-12);
    CHECK_NEAR(a.dp_comm_total_s, ar, 1e-12);
    /* With --overlap-grad-reduce Megatron reduces bucket by bucket as their gradients are
     * ready (buckets of max(40M, 1M x dp) parameters, distributed_data_parallel.py): this
     * model's 100.9M parameters make 3 buckets; the first two hide behind a third of the
     * backward each (15% of what is hidden still costs), the last follows the backward. */
    l.dp_overlap = true;
    dp_time_step_fast(&m, &c, &l, &a);
    CHECK_EQ((st.params + 39999999) / 40000000, 3);
    double ar3 = dp_coll_time_s(DP_ALLREDUCE, (double)st.params * 4 / 3, 2, &p);
    double bwd3 = a.stage_bwd_s[0] / 3, hid3 = ar3 < bwd3 ? ar3 : bwd3;
    CHECK_NEAR(a.dp_comm_s, 2 * ((ar3 - hid3) + 0.15 * hid3) + ar3, 1e-9);
    /* ZeRO-1: reduce-scatter of gradients plus all-gather of bf16 weights, neither
     * overlapped. */
    l.zero = 1;
    l.dp_overlap = false;
    l.overlap_param_gather = false;
    dp_time_step_fast(&m, &c, &l, &a);
    double rs = dp_coll_time_s(DP_REDUCE_SCATTER, (double)st.params * 4, 2, &p);
    double ag = dp_coll_time_s(DP_ALLGATHER, (double)st.params * 2, 2, &p);
    CHECK_NEAR(a.dp_comm_s, rs + ag, 1e-12);
}

/*
 * Groups that reach across nodes pay the network, whatever their stride: the
 * README's llama2-70b layout (tp=2 cp=2 pp=8 on 4 nodes of 8) has stages 4 ranks
 * apart, so 3 of its 7 pipeline hops leave a node; a CP ring of 16 ranks 2 apart
 * spans 4 nodes; Mixtral's ep=8 with cp=2 on one node is ranks 0..7 (expert
 * parallelism is carved out of dp x cp, ep ranks tp apart).
 */
static void test_paths_by_reach(void)
{
    struct dp_model m = model();
    struct dp_cluster fast = cluster(4, 8), slow = cluster(4, 8);
    slow.inter.bw_gbps = fast.inter.bw_gbps / 2;
    struct dp_layout l = layout();
    l.flash_attn = true;
    l.tp = 2;
    l.cp = 2;
    l.pp = 8;
    l.dp = 1;
    l.mbs = 1;
    l.gbs = 64;
    struct dp_step_cost a, b;
    dp_time_step_fast(&m, &fast, &l, &a);
    dp_time_describe_paths(&fast, &l, &a);
    dp_time_step_fast(&m, &slow, &l, &b);
    CHECK(a.pp_path.inter_node);
    CHECK(!a.cp_path.inter_node);
    /* Halving the network slows the pipeline's sends: twice the bytes/bw term. */
    CHECK(b.pp_comm_s > 1.5 * a.pp_comm_s);
    CHECK(b.step_time_s > a.step_time_s);
    l.cp = 16;
    l.pp = 1;
    dp_time_step_fast(&m, &fast, &l, &a);
    dp_time_describe_paths(&fast, &l, &a);
    CHECK(a.cp_path.inter_node);

    struct dp_cluster one = cluster(1, 8);
    m.experts = 8;
    m.top_k = 2;
    m.moe_ffn_hidden = 4096;
    l = layout();
    l.flash_attn = true;
    l.cp = 2;
    l.dp = 4;
    l.ep = 8;
    l.mbs = 1;
    l.gbs = 8;
    dp_time_step_fast(&m, &one, &l, &a);
    dp_time_describe_paths(&one, &l, &a);
    CHECK(!a.ep_path.inter_node);
    CHECK(strstr(a.ep_path.desc, "inside a node") != NULL);
}

/*
 * PyTorch's non-reentrant checkpoint stops recomputing once the last saved tensor is
 * rebuilt, before each layer's fc2 GEMM (time.c tail_f, torch/utils/checkpoint.py), so
 * torchtitan's full recompute redoes 28 - 8 = 20 of each layer's 28 * 2^30 forward FLOPs
 * per sequence (fc2: 2 s h f = 2 * 2^10 * 2^10 * 2^12 = 8 * 2^30). The hand GPU of
 * test_flop_rates, dp = 2 (8 sequences per GPU):
 *   recompute 8 * 8 * 20 * 2^30 = 1280 * 2^30 FLOPs in 1280 * 2^30 / 100e12 = 0.0137438953 s
 *   step (5382 + 1280) * 2^30 / 100e12 = 6662 * 2^30 / 100e12 = 0.0715326803 s
 *   hardware FLOPs 10764 + 2 * 1280 = 13324 * 2^30: HFU 1, MFU 5382 / 6662 = 0.80786550
 * With dropout the dropout after fc2 saves its mask, and Megatron's CheckpointFunction
 * reruns the whole layer: the full 28 * 2^30 again (test_flop_rates' 0.0770302385 s).
 */
static void test_recompute_early_stop(void)
{
    struct dp_model m = model();
    struct dp_cluster c = cluster(1, 2);
    c.gpu.mem_bw_gbps = 1e12;
    c.intra.bw_gbps = 1e12;
    struct dp_layout l = layout();
    l.dp = 2;
    l.gbs = 16;
    l.recompute = DP_RECOMPUTE_FULL;
    l.framework = DP_FW_TORCHTITAN;
    struct dp_step_cost a;
    dp_time_step_fast(&m, &c, &l, &a);
    CHECK_NEAR(a.recompute_s, 1280.0 * 1073741824.0 / 100e12, 1e-9);
    CHECK_NEAR(a.step_time_s, 6662.0 * 1073741824.0 / 100e12, 1e-8);
    CHECK_NEAR(a.hfu, 1.0, 1e-6);
    CHECK_NEAR(a.mfu, 5382.0 / 6662.0, 1e-6);
    m.dropout = true;
    dp_time_step_fast(&m, &c, &l, &a);
    CHECK_NEAR(a.recompute_s, 1792.0 * 1073741824.0 / 100e12, 1e-6);
    m.dropout = false;
    l.framework = DP_FW_MEGATRON;
    dp_time_step_fast(&m, &c, &l, &a);
    CHECK_NEAR(a.step_time_s, 0.07703023845376, 1e-8);
}

/*
 * The derived rates of a step worked out on paper. The GPU runs every GEMM at its
 * 100 TFLOP/s peak (eff_max 1, half_flops 0, every dimension a multiple of 128) and
 * has 1e12 GB/s of memory bandwidth, and the two GPUs of the node are joined by a
 * 1e12 GB/s link without latency: every memory-bound term (norms, softmax, optimizer)
 * and the gradient all-reduce shrink below 1e-9 of the step, which is then the
 * hardware FLOPs of one GPU over its peak.
 *
 * FLOPs (Narayanan et al. 2021, Sec. 5.1: 2 per multiply-add, backward twice the
 * forward, full s x s scores; element-wise work not counted), model(): s = h = 1024 =
 * 2^10, 8 layers, f = 4h, vocabulary 128 (a multiple of 128: no padding), untied head:
 *   per layer and sequence, forward: QKV 6 s h^2 + out 2 s h^2 + MLP 16 s h^2
 *     = 24 s h^2 = 24 * 2^30, and QK^T + AV = 4 s^2 h = 4 * 2^30: 28 * 2^30
 *   LM head, forward: 2 s h V = 2 * 2^10 * 2^10 * 2^7 = 0.25 * 2^30
 *   forward of one sequence: 8 * 28 * 2^30 + 0.25 * 2^30 = 224.25 * 2^30
 *   model FLOPs of the step: 3 * 16 sequences * 224.25 * 2^30 = 10764 * 2^30
 *   full recompute adds the layers' forward (not the head's): 16 * 224 * 2^30
 *     = 3584 * 2^30, so hardware FLOPs = 14348 * 2^30
 *   dp = 2: each GPU does half, 7174 * 2^30 FLOPs in 7174 * 2^30 / 100e12
 *     = 0.07703023845 s
 *   tokens/s = 16 * 1024 / 0.07703023845 = 212695.69
 *   model TFLOP/s per GPU = 10764 * 2^30 / 0.07703023845 / 2 / 1e12 = 75.020909
 *   hardware TFLOP/s per GPU = 100 (the peak), MFU = 10764 / 14348 = 0.75020909, HFU = 1
 */
static void test_flop_rates(void)
{
    struct dp_model m = model();
    struct dp_cluster c = cluster(1, 2);
    c.gpu.mem_bw_gbps = 1e12;
    c.intra.bw_gbps = 1e12;
    struct dp_layout l = layout();
    l.dp = 2;
    l.gbs = 16;
    l.recompute = DP_RECOMPUTE_FULL;
    struct dp_step_cost a;
    dp_time_step_fast(&m, &c, &l, &a);
    CHECK_NEAR(a.step_time_s, 0.07703023845376, 1e-8);
    CHECK_NEAR(a.tokens_per_s, 212695.693650683, 1e-8);
    CHECK_NEAR(a.model_tflops_per_gpu, 75.02090883746864, 1e-8);
    CHECK_NEAR(a.hardware_tflops_per_gpu, 100.0, 1e-8);
    CHECK_NEAR(a.mfu, 0.7502090883746864, 1e-8);
    CHECK_NEAR(a.hfu, 1.0, 1e-8);
    /* Without recompute the same GPU does 10764 / 2 * 2^30 FLOPs: MFU = HFU = 1, and the
     * step is 5382 * 2^30 / 100e12 = 0.05779581 s. */
    l.recompute = DP_RECOMPUTE_NONE;
    dp_time_step_fast(&m, &c, &l, &a);
    CHECK_NEAR(a.step_time_s, 5382.0 * 1073741824.0 / 100e12, 1e-8);
    CHECK_NEAR(a.mfu, 1.0, 1e-8);
    CHECK_NEAR(a.hfu, 1.0, 1e-8);
    /* FP8 GEMMs: MFU is against the FP8 peak (here 200 TFLOP/s, as the DGX Cloud recipes
     * report it), which only the linear layers reach; the attention core (4 * 2^30 of
     * each layer's 28 * 2^30) and the head stay at the 100 TFLOP/s of bf16. Per GPU,
     * 8 sequences: linears 3 * 8 * 8 * 24 * 2^30 = 4608 * 2^30 at 200e12, the rest
     * 3 * 8 * (8 * 4 + 0.25) * 2^30 = 774 * 2^30 at 100e12: step (4608 / 2 + 774) * 2^30
     * / 100e12 = 3078 * 2^30 / 100e12; MFU = 5382 * 2^30 / step / 200e12 = 5382 / 6156. */
    c.gpu.fp8_tflops = 200;
    c.gpu.gemm_fp8 = c.gpu.gemm;
    l.gemm = DP_GEMM_FP8;
    dp_time_step_fast(&m, &c, &l, &a);
    CHECK_NEAR(a.step_time_s, 3078.0 * 1073741824.0 / 100e12, 1e-6);
    CHECK_NEAR(a.mfu, 5382.0 / 6156.0, 1e-6);
}

/*
 * Sliding-window attention: the attention core's work is the query-key pairs it keeps.
 * Counted here pair by pair (query i sees keys max(0, i - w + 1) .. i), not from the
 * closed form the model uses: s = 1024, w = 300 on 6 of 8 layers. FlashAttention's time
 * (flash on, a GPU whose GEMM curve is flat) and the FLOP count's score term both scale
 * by the average layer's share of causal attention's pairs; eager attention computes the
 * whole score matrix and masks it, so its time does not change.
 */
static void test_sliding_window(void)
{
    struct dp_model m = model(), w = model();
    w.window = 300;
    w.window_layers = 6;
    double full = 0, kept = 0;
    for (int i = 0; i < 1024; i++)
        for (int j = 0; j <= i; j++) {
            full += 1;
            kept += i - j < 300;
        }
    double ratio = (2.0 + 6.0 * kept / full) / 8.0;
    CHECK_NEAR(dp_model_attn_pair_ratio(&w, 1024), ratio, 1e-12);
    CHECK_NEAR(dp_model_attn_pair_ratio(&w, 300), 1.0, 0); /* the window covers s */
    struct dp_cluster c = cluster(1, 1);
    struct dp_layout l = layout();
    l.flash_attn = true;
    struct dp_layer_time a[DP_LAYER_KINDS], b[DP_LAYER_KINDS];
    dp_time_layer(&m, &c, &l, a);
    dp_time_layer(&w, &c, &l, b);
    CHECK_NEAR(b[DP_LAYER_DENSE].attn_f, ratio * a[DP_LAYER_DENSE].attn_f, 1e-15);
    CHECK_NEAR(b[DP_LAYER_DENSE].attn_b, ratio * a[DP_LAYER_DENSE].attn_b, 1e-15);
    CHECK_NEAR(b[DP_LAYER_DENSE].gemm_f, a[DP_LAYER_DENSE].gemm_f, 0);
    struct dp_flops fa, fb;
    dp_flops_step(&m, &l, &fa);
    dp_flops_step(&w, &l, &fb);
    CHECK_NEAR(fb.scores_fwd, ratio * fa.scores_fwd, 1e-3);
    CHECK_NEAR(fa.scores_fwd, 2.0 * 4 * 8 * 1024 * 1024 * 256, 0);
    l.flash_attn = false;
    dp_time_layer(&m, &c, &l, a);
    dp_time_layer(&w, &c, &l, b);
    CHECK_NEAR(b[DP_LAYER_DENSE].attn_f, a[DP_LAYER_DENSE].attn_f, 0);
}

int main(void)
{
    test_collectives();
    test_paths();
    test_layer_gemms();
    test_step_structure();
    test_dp_exposure();
    test_paths_by_reach();
    test_flop_rates();
    test_recompute_early_stop();
    test_sliding_window();
    return check_done("test_costmodel_time");
}
