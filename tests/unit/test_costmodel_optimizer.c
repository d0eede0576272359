/*
 * Muon (layout optimizer muon) in the step-time and memory models, against values worked
 * out by hand, on hand.h's test GPU and model.
 */
#include "check.h"
#include "costmodel/costmodel.h"
#include "hand.h"

#include <stdlib.h>

static struct dp_layout layout(int dp)
{
    struct dp_layout l;
    dp_layout_default(&l);
    l.dp = dp;
    l.seq_len = 1024;
    l.mbs = 1;
    l.gbs = 4 * dp;
    return l;
}

/*
 * Newton-Schulz on an a x b matrix (a <= b): 5 x (4 a^2 b + 2 a^3) FLOPs. Per layer: Q, K,
 * V and the output projection, 1024 x 1024 each: 30 x 1024^3 = 32.21 GFLOP; fc1 and fc2,
 * 1024 x 4096: 5 x (4 x 1024^2 x 4096 + 2 x 1024^3) = 96.64 GFLOP each. 8 layers:
 * 2.577 TFLOP, 25.77 ms at 100 TFLOP/s. The optimizer's memory pass moves 24 B a parameter
 * (SGD's: gradient, master and momentum), Adam's 36.
 */
static void test_muon_time(void)
{
    struct dp_model m = hand_model();
    struct dp_cluster c = hand_cluster(1, 1);
    struct dp_layout l = layout(1);
    struct dp_step_cost a, u;
    struct dp_err err = {0};
    CHECK(dp_time_step(&m, &c, &l, &a, &err) == 0);
    l.optimizer = DP_OPT_MUON;
    CHECK(dp_time_step(&m, &c, &l, &u, &err) == 0);
    const double ns = 8 *
                      (4 * 30.0 * 1024 * 1024 * 1024 +
                       2 * 5 * (4.0 * 1024 * 1024 * 4096 + 2.0 * 1024 * 1024 * 1024)) /
                      100e12;
    CHECK_NEAR(ns, 25.77e-3, 1e-5);
    /* the difference is the orthogonalization less the 12 B a parameter Adam moves more */
    CHECK_NEAR(u.optimizer_s - a.optimizer_s + a.optimizer_s * 12.0 / 36.0, ns, 1e-9);
    /* the rest of the step is untouched */
    CHECK_NEAR(u.step_time_s - u.optimizer_s, a.step_time_s - a.optimizer_s, 1e-12);

    /* With the layer-wise distributed optimizer over dp = 4 each rank orthogonalizes a
     * quarter of the weights; without it (zero 0) every rank all of them. */
    l = layout(4);
    c = hand_cluster(1, 4);
    l.optimizer = DP_OPT_MUON;
    l.zero = 1;
    CHECK(dp_time_step(&m, &c, &l, &u, &err) == 0);
    l.optimizer = DP_OPT_ADAM;
    CHECK(dp_time_step(&m, &c, &l, &a, &err) == 0);
    CHECK_NEAR(u.optimizer_s - a.optimizer_s + a.optimizer_s * 12.0 / 36.0, ns / 4, 1e-9);
    l.zero = 0;
    l.optimizer = DP_OPT_MUON;
    CHECK(dp_time_step(&m, &c, &l, &u, &err) == 0);
    l.optimizer = DP_OPT_ADAM;
    CHECK(dp_time_step(&m, &c, &l, &a, &err) == 0);
    CHECK_NEAR(u.optimizer_s - a.optimizer_s + a.optimizer_s * 12.0 / 36.0, ns, 1e-9);
    /* FSDP2 (PithTrain) on the same 4 ranks: the quarter of the orthogonalizations, and
     * each weight's fp32 update gathered whole and the owners' results broadcast back, 8 B
     * a layer weight (100,663,296 of them) of which a rank receives 3/4, over the 200 GB/s
     * link: at least 3.02 ms more, and not more than twice that. */
    l.framework = DP_FW_TORCHTITAN;
    l.zero = 3;
    l.optimizer = DP_OPT_MUON;
    CHECK(dp_time_step(&m, &c, &l, &u, &err) == 0);
    l.optimizer = DP_OPT_ADAM;
    CHECK(dp_time_step(&m, &c, &l, &a, &err) == 0);
    double extra = u.optimizer_s - a.optimizer_s + a.optimizer_s * 12.0 / 36.0 - ns / 4;
    const double wire = 8.0 * 100663296 * 0.75 / 200e9;
    CHECK(extra >= wire && extra < 2 * wire);
}

/*
 * Memory: Muon keeps one fp32 momentum for the layers' weights (8 layers x (4 x 1024^2 +
 * 2 x 4096 x 1024 + 2 LayerNorms of 2 x 1024) = 100,696,064 parameters) where Adam keeps
 * two: 402,784,256 bytes less (Megatron: fp32 master + 4 B instead of + 8 B). The embedding
 * (128 x 1024 + 1024 x 1024 positions) and the output layer stay on Adam.
 */
static void test_muon_memory(void)
{
    struct dp_model m = hand_model();
    struct dp_cluster c = hand_cluster(1, 1);
    struct dp_layout l = layout(1);
    struct dp_mem_stage a, u;
    dp_mem_stage(&m, &c, &l, NULL, 0, &a);
    l.optimizer = DP_OPT_MUON;
    dp_mem_stage(&m, &c, &l, NULL, 0, &u);
    CHECK_EQ(a.optimizer_bytes - u.optimizer_bytes, 402784256LL);
    CHECK_EQ(a.params_bytes, u.params_bytes);
    /* sharded over dp = 4 by the distributed optimizer: a quarter (the flat buffer's
     * padding aside) */
    l = layout(4);
    c = hand_cluster(1, 4);
    l.zero = 1;
    dp_mem_stage(&m, &c, &l, NULL, 0, &a);
    l.optimizer = DP_OPT_MUON;
    dp_mem_stage(&m, &c, &l, NULL, 0, &u);
    CHECK(llabs(a.optimizer_bytes - u.optimizer_bytes - 402784256LL / 4) <= 16);
}

int main(void)
{
    test_muon_time();
    test_muon_memory();
    return check_done("test_costmodel_optimizer");
}
