/*
 * The hand-worked test GPU and model the cost-model unit tests compute expectations for
 * (test_costmodel_time.c, test_costmodel_fp8.c, test_costmodel_optimizer.c): 100 TFLOP/s at
 * every storage precision and 200 TFLOP/s FP8, both GEMM curves flat at 1.0 (no size
 * dependence), 1000 GB/s HBM of which DP_MEM_EFFICIENCY is achievable, 200 GB/s NVLink and
 * 25 GB/s network links without latency; the model h = 1024, a = g = 8 heads of 128,
 * f = 4096 GELU, no biases, 8 layers, learned positions, a 128-token vocabulary.
 */
#ifndef DPLAN_TESTS_HAND_H
#define DPLAN_TESTS_HAND_H

#include "costmodel/costmodel.h"

#include <stdio.h>

static inline struct dp_cluster hand_cluster(int nodes, int gpn)
{
    struct dp_cluster c = {0};
    snprintf(c.gpu.name, sizeof c.gpu.name, "test-gpu");
    for (int i = 0; i < DP_PRECISIONS; i++)
        c.gpu.peak_tflops[i] = 100;
    c.gpu.fp8_tflops = 200;
    c.gpu.mem_bytes = 80LL << 30;
    c.gpu.usable_fraction = 1;
    c.gpu.mem_bw_gbps = 1000;
    c.gpu.gemm = (struct dp_gemm_curve){1.0, 0};
    c.gpu.gemm_fp8 = (struct dp_gemm_curve){1.0, 0};
    c.nodes = nodes;
    c.gpus_per_node = gpn;
    c.intra = (struct dp_link){"nvl", DP_LINK_NVLINK, 200, 0, 1.0, 0};
    c.inter = (struct dp_link){"net", DP_LINK_NET, 25, 0, 1.0, 0};
    c.nics_per_node = gpn;
    return c;
}

static inline struct dp_model hand_model(void)
{
    struct dp_model m = {0};
    snprintf(m.name, sizeof m.name, "hand");
    m.layers = 8;
    m.hidden = 1024;
    m.heads = m.kv_heads = 8;
    m.head_dim = 128;
    m.ffn_hidden = 4096;
    m.vocab = 128;
    m.seq_len = 1024;
    m.ffn = DP_FFN_GELU;
    m.norm = DP_NORM_LAYERNORM;
    m.pos = DP_POS_LEARNED;
    m.max_pos = 1024;
    m.norms_per_layer = 2;
    return m;
}

#endif
