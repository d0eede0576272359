/*
 * The framework profile (issue 12) against values computed by hand from the
 * frameworks' sources: bytes per parameter per sharding mode (FSDP2's fp32 shard
 * as master, FSDP2 under PP, DeepSpeed's gradient dtype), the loss buffers per
 * implementation, torchtitan's per-op SAC and Megatron's recompute modules and
 * methods, the runtime buffers (NCCL per communicator, workspaces, CUDA context)
 * and the allocator's slack, NCCL's protocol choice per message size, sharded data
 * parallelism at each framework's granularity (FSDP2 blocks, DeepSpeed sub-modules
 * with the recompute re-gathers, DeepSpeed 0.3's synchronous fetch and list collectives),
 * HSDP, and the framework checks.
 */
#include "check.h"
#include "costmodel/costmodel.h"

#include <cjson/cJSON.h>

#include <stdlib.h>
#include <string.h>

/* A small Llama-like model: h = 1024, 8 heads of 128 (MHA), SwiGLU f = 4096, RMSNorm,
 * no dropout or biases, vocabulary 32000. */
static struct dp_model tiny(void)
{
    struct dp_model m = {0};
    snprintf(m.name, sizeof m.name, "tiny");
    m.layers = 4;
    m.hidden = 1024;
    m.heads = m.kv_heads = 8;
    m.head_dim = 128;
    m.ffn_hidden = 4096;
    m.vocab = 32000;
    m.seq_len = 2048;
    m.ffn = DP_FFN_SWIGLU;
    m.norm = DP_NORM_RMSNORM;
    m.pos = DP_POS_ROPE;
    m.norms_per_layer = 2;
    return m;
}

static struct dp_layout layout(enum dp_framework fw, int zero)
{
    struct dp_layout l;
    dp_layout_default(&l);
    l.framework = fw;
    l.zero = zero;
    l.grad_fp32 = fw != DP_FW_DEEPSPEED;
    l.seq_len = 2048;
    l.mbs = 1;
    return l;
}

static int64_t states_total(const struct dp_states *s)
{
    return s->params_bytes + s->grads_bytes + s->optimizer_bytes;
}

/* Bytes per parameter: FSDP2 keeps the fp32 sharded parameter (the master), the fp32
 * sharded gradient and Adam's moments, 4 + 4 + 8 = 16 B / N, no bf16 copy; under PP the
 * stage's bf16 parameters (2 B) and fp32 gradient accumulators (4 B) stay whole.
 * DeepSpeed: bf16 weights, gradients in the model dtype unless grad_accum_dtype fp32,
 * fp32 master + moments: 2 + 2 + 12 = 16 B (ZeRO paper's K = 12), 18 B with fp32 grads. */
static void test_bytes_per_param(void)
{
    const int64_t n = 1000000000LL, N = 8;
    struct dp_states s;
    int pb, gb, ob;
    struct dp_layout l = layout(DP_FW_TORCHTITAN, 3);
    dp_mem_bytes_per_param(&l, &pb, &gb, &ob);
    CHECK_EQ(pb, 4);
    CHECK_EQ(gb, 4);
    CHECK_EQ(ob, 8);
    dp_mem_states(n, N, &l, &s);
    CHECK_EQ(states_total(&s), 16 * n / N);
    /* zero 2 (reshard_after_forward False) keeps the same persistent states */
    l.zero = 2;
    dp_mem_states(n, N, &l, &s);
    CHECK_EQ(states_total(&s), 16 * n / N);
    /* FSDP2 + PP: 0.5 + 0.5 + 1 GB of shards, + 2 GB bf16 parameters, gradients 4 GB
     * whole (the fp32 accumulators replace the shard) */
    l.zero = 3;
    l.pp = 2;
    dp_mem_states(n, N, &l, &s);
    CHECK_EQ(s.params_bytes, 4 * n / N + 2 * n);
    CHECK_EQ(s.grads_bytes, 4 * n);
    CHECK_EQ(s.optimizer_bytes, 8 * n / N);
    CHECK_EQ(states_total(&s), 7500000000LL);
    /* per-micro-batch sync (fsdp_per_microbatch): the gradients are reduce-scattered into
     * their 0.5 GB shard as they come; the bf16 parameters stay whole */
    l.fsdp_per_microbatch = true;
    dp_mem_states(n, N, &l, &s);
    CHECK_EQ(s.params_bytes, 4 * n / N + 2 * n);
    CHECK_EQ(s.grads_bytes, 4 * n / N);
    l.fsdp_per_microbatch = false;
    /* with reduce_dtype bf16 (half gradients) the accumulators are bf16: 2 GB */
    l.grad_fp32 = false;
    dp_mem_states(n, N, &l, &s);
    CHECK_EQ(s.grads_bytes, 2 * n);
    l.grad_fp32 = true;
    /* bf16 shards (NeMo Automodel builds the model in bf16): 2 + 2 + 2 x 2 = 8 B, half */
    l.pp = 1;
    l.optimizer_dtype = DP_BF16;
    dp_mem_bytes_per_param(&l, &pb, &gb, &ob);
    CHECK_EQ(pb + gb + ob, 8);
    dp_mem_states(n, N, &l, &s);
    CHECK_EQ(states_total(&s), 8 * n / N);

    l = layout(DP_FW_DEEPSPEED, 3);
    dp_mem_bytes_per_param(&l, &pb, &gb, &ob);
    CHECK_EQ(pb + gb + ob, 16);
    dp_mem_states(n, N, &l, &s);
    CHECK_EQ(states_total(&s), 16 * n / N);
    l.grad_fp32 = true;
    dp_mem_states(n, N, &l, &s);
    CHECK_EQ(states_total(&s), 18 * n / N);
    /* stage 1: 2 + 2 B whole, 12 B sharded */
    l = layout(DP_FW_DEEPSPEED, 1);
    dp_mem_states(n, N, &l, &s);
    CHECK_EQ(states_total(&s), 4 * n + 12 * n / N);
    /* Megatron's distributed optimizer: 6 + 12 / d */
    l = layout(DP_FW_MEGATRON, 1);
    dp_mem_states(n, N, &l, &s);
    CHECK_EQ(states_total(&s), 6 * n + 12 * n / N);
    /* NeMo's distributed_fused_adam with optim.dtype bf16 on bf16 weights (the Nemotron-4
     * 340B recipe, grad_sync_dtype bf16): no master copy, bf16 m and v, 2 + 2 B sharded,
     * beside the 2 B weights and 2 B gradients: 4 + 4 / d = 4.5 B per parameter at d = 8
     * (with fp32 states 4 + 12 / 8 = 5.5) */
    l.optimizer_dtype = DP_BF16;
    l.grad_fp32 = false;
    dp_mem_bytes_per_param(&l, &pb, &gb, &ob);
    CHECK_EQ(pb, 2);
    CHECK_EQ(gb, 2);
    CHECK_EQ(ob, 4);
    dp_mem_states(n, N, &l, &s);
    CHECK_EQ(states_total(&s), 4500000000LL);
    /* on fp16 weights the bf16 states need a bf16 master copy (store_params): 2 + 2 + 2 */
    l.precision = DP_FP16;
    dp_mem_bytes_per_param(&l, &pb, &gb, &ob);
    CHECK_EQ(ob, 6);
    /* plan.json's field: read, and written back only when not the fp32 default */
    struct dp_err err = {0};
    struct dp_jr jr = {.file = "plan.json", .err = &err};
    cJSON *o = cJSON_Parse("{\"tp\": 1, \"pp\": 1, \"dp\": 8, \"mbs\": 1, \"gbs\": 8, "
                           "\"seq_len\": 2048, \"optimizer_dtype\": \"bf16\"}");
    struct dp_layout r;
    CHECK_EQ(dp_layout_from_json(&jr, o, &r), 0);
    CHECK_EQ(r.optimizer_dtype, DP_BF16);
    cJSON_Delete(o);
    o = cJSON_Parse("{\"tp\": 1, \"pp\": 1, \"dp\": 8, \"mbs\": 1, \"gbs\": 8, "
                    "\"seq_len\": 2048, \"optimizer_dtype\": \"fp8\"}");
    CHECK(dp_layout_from_json(&jr, o, &r) != 0);
    CHECK_CONTAINS(err.msg, "optimizer_dtype");
    cJSON_Delete(o);
}

/* The loss's bytes per logit element at its peak: Megatron's vocab-parallel cross entropy
 * 2 + 4 (bf16 logits + the fp32 exp tensor it updates in place), TE's fused kernel 2,
 * Megatron's native fusion 2 + 4 + 4, F.cross_entropy on up-cast logits 3 x 4, under
 * torchtitan's loss_parallel 4 x 4. */
static void test_loss_bytes(void)
{
    struct dp_layout l = layout(DP_FW_MEGATRON, 1);
    CHECK_EQ(dp_layout_loss(&l), DP_LOSS_VOCAB_PARALLEL);
    CHECK_NEAR(dp_fw_loss_bytes(&l), 6, 0);
    l.loss = DP_LOSS_FUSED;
    CHECK_NEAR(dp_fw_loss_bytes(&l), 2, 0);
    l.loss = DP_LOSS_FUSED_NATIVE;
    CHECK_NEAR(dp_fw_loss_bytes(&l), 10, 0);
    l.loss = DP_LOSS_UNFUSED;
    CHECK_NEAR(dp_fw_loss_bytes(&l), 12, 0);
    l = layout(DP_FW_TORCHTITAN, 3);
    CHECK_EQ(dp_layout_loss(&l), DP_LOSS_UNFUSED);
    CHECK_NEAR(dp_fw_loss_bytes(&l), 12, 0);
    l.tp = 2;
    CHECK_NEAR(dp_fw_loss_bytes(&l), 16, 0);
    /* torch.compile'd (torchtitan since 2025): the bf16 logits and a new bf16 gradient */
    l.tp = 1;
    l.loss = DP_LOSS_COMPILED;
    CHECK_NEAR(dp_fw_loss_bytes(&l), 4, 0);
    l = layout(DP_FW_DEEPSPEED, 1);
    CHECK_EQ(dp_layout_loss(&l), DP_LOSS_UNFUSED);

    /* On the last stage: 6 B x s x b x padded vocab / t. tiny: vocab 32000 pads to 32000
     * (a multiple of 128); s = 2048, b = 1, t = 1. */
    struct dp_model m = tiny();
    struct dp_cluster c = {0};
    c.nodes = 1;
    c.gpus_per_node = 1;
    c.gpu.mem_bytes = 80LL << 30;
    c.gpu.usable_fraction = 1;
    l = layout(DP_FW_MEGATRON, 0);
    l.dp = 1;
    l.gbs = 1;
    struct dp_mem_stage st;
    dp_mem_stage(&m, &c, &l, NULL, 0, &st);
    CHECK_EQ(st.act_loss_bytes, 6LL * 2048 * 32000);
    /* final norm input and output-layer input, 2 x 2 B x s x h, beside the loss */
    CHECK_EQ(st.act_head_bytes, 4LL * 2048 * 1024 + 6LL * 2048 * 32000);
}

/* tiny at s = 2048, b = 1, t = 1, bf16, flash, fused kernels: per layer (T = 2048 tokens)
 *   attention: QKV input 2h, Q and K 2(a+g)d = 4h, V 2gd = 2h, out-proj input 2ad = 2h
 *              = 10240 T; norm inputs 2 x 2h = 4096 T; lse 4a = 32 T;
 *   MLP: fc1 input 2h = 2048 T, SwiGLU gate, up, product 3 x 2f = 24576 T;
 *   full = 40992 T. */
static void test_recompute_policies(void)
{
    struct dp_model m = tiny();
    const int64_t T = 2048;
    struct dp_layout l = layout(DP_FW_MEGATRON, 1);
    struct dp_act_layer al;
    dp_act_layer(&m, &l, DP_LAYER_DENSE, &al);
    CHECK_EQ(al.full_bytes, 40992 * T);
    CHECK_EQ(al.stored_bytes, 40992 * T);

    /* Megatron selective, default core_attn: the scores go (with flash, the lse) */
    l.recompute = DP_RECOMPUTE_SELECTIVE;
    dp_act_layer(&m, &l, DP_LAYER_DENSE, &al);
    CHECK_EQ(al.stored_bytes, (40992 - 32) * T);
    /* + mlp (checkpointed: only its input, the norm output, kept): 24576 T go */
    l.recompute_modules = DP_RCM_CORE_ATTN | DP_RCM_MLP;
    dp_act_layer(&m, &l, DP_LAYER_DENSE, &al);
    CHECK_EQ(al.stored_bytes, (40992 - 32 - 24576) * T);
    CHECK_EQ(al.work_bytes, (32 + 24576) * T);
    /* layernorm: both norm outputs (QKV and fc1 inputs, 2 x 2h) are recomputed */
    l.recompute_modules = DP_RCM_LAYERNORM;
    dp_act_layer(&m, &l, DP_LAYER_DENSE, &al);
    CHECK_EQ(al.stored_bytes, (40992 - 4096) * T);

    /* torchtitan per-op SAC, eager (the policy's cache keeps every saved output): block
     * input 2h, wq and wv outputs 2ad + 2gd, the attention output 2ad and lse 4a, w1's
     * output 2f, w2's mm output 2h: 2048 + 4096 + 2048 + 32 + 8192 + 2048 = 18464 T */
    l = layout(DP_FW_TORCHTITAN, 3);
    l.recompute = DP_RECOMPUTE_OP;
    l.eager = true;
    dp_act_layer(&m, &l, DP_LAYER_DENSE, &al);
    CHECK_EQ(al.stored_bytes, 18464 * T);
    CHECK_EQ(al.work_bytes, (40992 + 16384 - 18464) * T);
    /* compiled (the default): the partitioner drops w2's output, which no gradient reads:
     * 18464 - 2048 = 16416 T */
    l.eager = false;
    dp_act_layer(&m, &l, DP_LAYER_DENSE, &al);
    CHECK_EQ(al.stored_bytes, 16416 * T);
    CHECK_EQ(al.work_bytes, (40992 - 16416) * T);
    /* under TP 2 with SP, eager: wo's and w2's reduce-scatter outputs 2h/2 each; the
     * matmul outputs split by t, w2's partial sum whole: 1024 + 2048 + 16 + 1024 + 4096 +
     * 2048 + 2 x 1024 = 12304 T; compiled without w2's partial sum and its reduce-scatter
     * output: 12304 - 2048 - 1024 = 9232 T */
    l.tp = 2;
    l.sp = true;
    l.eager = true;
    dp_act_layer(&m, &l, DP_LAYER_DENSE, &al);
    CHECK_EQ(al.stored_bytes, 12304 * T);
    l.eager = false;
    dp_act_layer(&m, &l, DP_LAYER_DENSE, &al);
    CHECK_EQ(al.stored_bytes, 9232 * T);
    /* eager torchtitan (no compile): RMSNorm's fp32 copies 2 x 4h and SwiGLU's fourth
     * tensor 2f on top of full */
    l = layout(DP_FW_TORCHTITAN, 3);
    l.eager = true;
    dp_act_layer(&m, &l, DP_LAYER_DENSE, &al);
    CHECK_EQ(al.full_bytes, (40992 + 8192 + 8192) * T);
    CHECK_EQ(al.eager_bytes, (8192 + 8192) * T);

    /* full recompute: the layer input 2h */
    l = layout(DP_FW_MEGATRON, 1);
    l.recompute = DP_RECOMPUTE_FULL;
    dp_act_layer(&m, &l, DP_LAYER_DENSE, &al);
    CHECK_EQ(al.stored_bytes, 2048 * T);
}

static struct dp_cluster one_gpu(void)
{
    struct dp_cluster c = {0};
    c.nodes = 1;
    c.gpus_per_node = 1;
    c.gpu.mem_bytes = 80LL << 30;
    c.gpu.usable_fraction = 1;
    c.gpu.runtime_overhead_bytes = 400LL << 20;
    return c;
}

/* Which layers full recompute covers (4 layers, one micro-batch in flight on pp = 1):
 * block n: the first n recompute, the others keep everything; uniform chunks of n: one
 * input per chunk, a whole chunk rebuilt at once; every n-th block (torchtitan's layer
 * SAC). */
static void test_recompute_methods(void)
{
    struct dp_model m = tiny();
    struct dp_cluster c = one_gpu();
    const int64_t T = 2048, in = 2048 * T, full = 40992 * T;
    struct dp_layout l = layout(DP_FW_MEGATRON, 0);
    l.dp = 1;
    l.gbs = 1;
    l.recompute = DP_RECOMPUTE_FULL;
    struct dp_mem_stage st;
    dp_mem_stage(&m, &c, &l, NULL, 0, &st);
    CHECK_EQ(st.act_layers_bytes, 4 * in);
    CHECK_EQ(st.act_working_bytes, full);
    l.recompute_layers = 1; /* block 1 */
    dp_mem_stage(&m, &c, &l, NULL, 0, &st);
    CHECK_EQ(st.act_layers_bytes, in + 3 * full);
    l.recompute_method = DP_RC_UNIFORM;
    l.recompute_layers = 2;
    dp_mem_stage(&m, &c, &l, NULL, 0, &st);
    CHECK_EQ(st.act_layers_bytes, 2 * in);
    CHECK_EQ(st.act_working_bytes, 2 * full);
    l = layout(DP_FW_TORCHTITAN, 3);
    l.dp = 1;
    l.gbs = 1;
    l.recompute = DP_RECOMPUTE_FULL;
    l.recompute_method = DP_RC_EVERY;
    l.recompute_layers = 2;
    CHECK_EQ(dp_layout_recomputed(&l, 4), 2);
    dp_mem_stage(&m, &c, &l, NULL, 0, &st);
    CHECK_EQ(st.act_layers_bytes, 2 * in + 2 * full);
}

/* NCCL outside the allocator, per communicator: 544 MB for a pair, 688 MB for more ranks
 * (nccl issue 964), + 3.28 GB for an all-to-all (issue 1685); the CUDA context is the
 * profile's; workspaces 4 x 32 MiB inside the allocator. */
static void test_runtime_buffers(void)
{
    struct dp_gpu g = {0};
    g.runtime_overhead_bytes = 400LL << 20;
    struct dp_layout l = layout(DP_FW_MEGATRON, 1);
    l.tp = 8;
    l.dp = 2;
    l.pp = 2;
    struct dp_fw_runtime rt;
    dp_fw_runtime(&l, false, &g, &rt);
    CHECK_EQ(rt.context_bytes, 400LL << 20);
    CHECK_EQ(rt.workspace_bytes, 128LL << 20);
    CHECK_EQ(rt.nccl_bytes, 688000000LL + 544000000LL + 544000000LL); /* tp, dp, pp */
    /* HSDP: dp 16 as 8 x 2: a shard communicator and a replica pair */
    l.pp = 1;
    l.dp = 16;
    l.shard_group = 8;
    dp_fw_runtime(&l, false, &g, &rt);
    CHECK_EQ(rt.nccl_bytes, 688000000LL + 688000000LL + 544000000LL);
    /* MoE with ep 8 (etp = tp): the EP group and its all-to-all, the expert data-parallel
     * group (edp = 16 / 8 = 2) */
    l.shard_group = 0;
    l.tp = 1;
    l.ep = 8;
    dp_fw_runtime(&l, true, &g, &rt);
    CHECK_EQ(rt.nccl_bytes, 688000000LL + 688000000LL + 3280000000LL + 544000000LL);
}

/* The three quantities: allocated (what torch allocates), reserved = allocated + 0.18 x
 * (allocated - the states kept from the start), device = reserved + context + NCCL. */
static void test_quantities(void)
{
    struct dp_model m = tiny();
    struct dp_cluster c = one_gpu();
    struct dp_layout l = layout(DP_FW_MEGATRON, 0);
    l.dp = 1;
    l.gbs = 1;
    struct dp_mem_stage st;
    dp_mem_stage(&m, &c, &l, NULL, 0, &st);
    int64_t states = st.params_bytes + st.grads_bytes + st.optimizer_bytes;
    CHECK_EQ(st.kept_bytes, states);
    CHECK_EQ(st.allocated_bytes, states + st.activations_bytes + st.comm_bytes + (128LL << 20));
    CHECK_EQ(st.slack_bytes, (int64_t)(0.18 * (double)(st.allocated_bytes - states) + 0.5));
    CHECK_EQ(st.reserved_bytes, st.allocated_bytes + st.slack_bytes);
    CHECK_EQ(st.nccl_bytes, 0); /* one GPU: no communicator */
    CHECK_EQ(st.total_bytes, st.reserved_bytes + (400LL << 20));
    /* --overhead-gib replaces the named terms and the slack */
    struct dp_mem_opts o;
    dp_mem_opts_default(&o);
    o.overhead_bytes = 1LL << 30;
    dp_mem_stage(&m, &c, &l, &o, 0, &st);
    CHECK_EQ(st.slack_bytes, 0);
    CHECK_EQ(st.total_bytes, states + st.activations_bytes + st.comm_bytes + (1LL << 30));
    /* FSDP2 + PP: the unsharded bf16 parameters and fp32 accumulators are allocated and
     * freed each step, so only the shards (16 B / N) are kept */
    l = layout(DP_FW_TORCHTITAN, 3);
    l.dp = 1;
    l.gbs = 2;
    l.pp = 2;
    dp_mem_stage(&m, &c, &l, NULL, 0, &st);
    CHECK_EQ(st.kept_bytes, 16 * st.params);
    CHECK_EQ(st.params_bytes + st.grads_bytes + st.optimizer_bytes, (4 + 2 + 4 + 8) * st.params);
    /* with reduce_dtype bf16 (half gradients) the accumulators are 2 B, and the two
     * blocks' reduce-scatter inputs held in backward are 2 x 2 B instead of 2 x 4 B per
     * parameter of the largest layer: 4 x 1024^2 (attention) + 3 x 1024 x 4096 (SwiGLU)
     * + 2 x 1024 (norms) = 16,779,264 parameters, 67,117,056 bytes less on stage 0 */
    int64_t fp32_comm = st.comm_bytes, fp32_grads = st.grads_bytes;
    l.grad_fp32 = false;
    dp_mem_stage(&m, &c, &l, NULL, 0, &st);
    CHECK_EQ(fp32_comm - st.comm_bytes, 4LL * 16779264);
    CHECK_EQ(fp32_grads - st.grads_bytes, 2 * st.params);
}

/* NCCL's protocols: LL128 pays the lower per-step latency at 92% of the bandwidth, Simple
 * the full bandwidth at a higher latency; the faster one is taken. With 2 and 5 us per
 * step, 100 GB/s, an all-gather on 8 ranks: LL128 7 x 2 us + 7/8 B / (0.92 x 100 GB/s),
 * Simple 7 x 5 us + 7/8 B / 100 GB/s; they cross at B = 21 us x 100 GB/s x 8/7 x 92/8
 * = 27.6 MB. */
static void test_protocols(void)
{
    struct dp_path p = {.busbw_gbps = 100, .latency_us = 2, .simple_us = 5};
    double small = 1e6, big = 1e9;
    CHECK_NEAR(dp_coll_time_s(DP_ALLGATHER, small, 8, &p),
               7 * 2e-6 + 7.0 / 8 * small / (0.92 * 100e9), 1e-12);
    CHECK_NEAR(dp_coll_time_s(DP_ALLGATHER, big, 8, &p), 7 * 5e-6 + 7.0 / 8 * big / 100e9, 1e-12);
    double x = 21e-6 * 100e9 * 8 / 7 * 0.92 / 0.08;
    CHECK_NEAR(x, 27.6e6, 1e-9);
    double ll = 7 * 2e-6 + 7.0 / 8 * x / (0.92 * 100e9), si = 7 * 5e-6 + 7.0 / 8 * x / 100e9;
    CHECK_NEAR(ll, si, 1e-12);
    /* a small shard is latency-bound: 8 kB takes 14 us, not 7/8 x 8 kB / 100 GB/s = 70 ns */
    CHECK_NEAR(dp_coll_time_s(DP_REDUCE_SCATTER, 8e3, 8, &p), 14e-6 + 7e3 / 92e9, 1e-12);
}

/* A stage of 4 tiny layers with the embedding and the output layer, 8 ranks on a path of
 * 1 us per step and 100 GB/s (no protocol choice), nothing to hide behind (fwd = bwd = 0):
 * the exposed time is the total. */
static struct dp_shard_stage shard_stage(double params)
{
    struct dp_shard_stage st = {0};
    st.dense = params;
    st.layers = 4;
    st.first = st.last = true;
    st.ag_dense_bytes = 2 * params;
    return st;
}

static double ag8(double bytes)
{
    return 7 * 1e-6 + 7.0 / 8 * bytes / 100e9;
}

static void test_sharded_granularity(void)
{
    struct dp_model m = tiny();
    struct dp_cluster c = one_gpu();
    struct dp_path p = {.busbw_gbps = 100, .latency_us = 1};
    const double P = 60e6;
    struct dp_shard_stage st = shard_stage(P);
    double total, exposed;

    /* FSDP2 (zero 3): one group per block + embedding + output = 6 units; per micro-batch
     * all-gather in forward and again in backward, reduce-scatter of fp32 gradients:
     * 2 x 6 AG(2P/6) + 6 RS(4P/6) */
    struct dp_layout l = layout(DP_FW_TORCHTITAN, 3);
    l.dp = 8;
    l.gbs = 8;
    dp_shard_comm(&m, &c, &l, &st, &p, &p, &total, &exposed);
    double want = 12 * ag8(2 * P / 6) + 6 * ag8(4 * P / 6);
    CHECK_NEAR(total, want, 1e-12);
    CHECK_NEAR(exposed, want, 1e-12);
    /* half gradients: FSDP2's reduce_dtype bf16 (NeMo Automodel), 6 RS(2P/6) */
    l.grad_fp32 = false;
    dp_shard_comm(&m, &c, &l, &st, &p, &p, &total, &exposed);
    CHECK_NEAR(total, 12 * ag8(2 * P / 6) + 6 * ag8(2 * P / 6), 1e-12);
    l.grad_fp32 = true;
    /* zero 2 (reshard_after_forward False): no backward gather */
    l.zero = 2;
    dp_shard_comm(&m, &c, &l, &st, &p, &p, &total, &exposed);
    CHECK_NEAR(total, 6 * ag8(2 * P / 6) + 6 * ag8(4 * P / 6), 1e-12);
    /* under PP: once per step, M = 2 micro-batches pay one gather and one reduce */
    l.zero = 3;
    l.pp = 2;
    l.gbs = 16;
    dp_shard_comm(&m, &c, &l, &st, &p, &p, &total, &exposed);
    CHECK_NEAR(total, 6 * ag8(2 * P / 6) + 6 * ag8(4 * P / 6), 1e-12);
    /* ... unless the stage's root is not the FSDP module (fsdp_per_microbatch, NeMo
     * Automodel): each of the M = 2 micro-batches gathers once (kept whole until its
     * backward) and reduce-scatters once */
    l.fsdp_per_microbatch = true;
    dp_shard_comm(&m, &c, &l, &st, &p, &p, &total, &exposed);
    CHECK_NEAR(total, 2 * (6 * ag8(2 * P / 6) + 6 * ag8(4 * P / 6)), 1e-12);
    l.fsdp_per_microbatch = false;

    /* DeepSpeed ZeRO-3: gathers per sub-module, 4 linears x 4 layers + embedding + output
     * = 18, forward and backward; gradients (bf16) in one 5e8 bucket */
    l = layout(DP_FW_DEEPSPEED, 3);
    l.dp = 8;
    l.gbs = 8;
    dp_shard_comm(&m, &c, &l, &st, &p, &p, &total, &exposed);
    CHECK_NEAR(total, 36 * ag8(2 * P / 18) + ag8(2 * P), 1e-12);
}

/* FSDP2's copies around its collectives (shard.c), with 1000 GB/s of HBM at
 * DP_MEM_EFFICIENCY 0.8 = 0.8e12 B/s, the same 60M-parameter stage, dp 8, one
 * micro-batch, bf16 compute, fp32 reduce:
 *   copy-out (split_with_sizes_copy, read + write of the gathered 2P bytes, forward and
 *     backward gather): 2 x 2 x 120e6 B / 0.8e12 = 6e-4 s, on the compute stream: exposed;
 *   copy-in (bf16 gradients into the fp32 reduce-scatter input, 2 + 4 B per parameter):
 *     60e6 x 6 / 0.8e12 = 4.5e-4 s, on the reduce-scatter stream: 0.15 of it exposed.
 * zero 2 gathers once: copy-out 3e-4 s. Megatron's buckets copy nothing. */
static void test_fsdp_copies(void)
{
    struct dp_model m = tiny();
    struct dp_cluster c = one_gpu();
    c.gpu.mem_bw_gbps = 1000;
    struct dp_path p = {.busbw_gbps = 100, .latency_us = 1};
    const double P = 60e6;
    struct dp_shard_stage st = shard_stage(P);
    double total, exposed;
    struct dp_layout l = layout(DP_FW_TORCHTITAN, 3);
    l.dp = 8;
    l.gbs = 8;
    dp_shard_comm(&m, &c, &l, &st, &p, &p, &total, &exposed);
    double coll = 12 * ag8(2 * P / 6) + 6 * ag8(4 * P / 6);
    CHECK_NEAR(total, coll + 6e-4 + 4.5e-4, 1e-12);
    CHECK_NEAR(exposed, coll + 6e-4 + 0.15 * 4.5e-4, 1e-12);
    l.zero = 2;
    dp_shard_comm(&m, &c, &l, &st, &p, &p, &total, &exposed);
    CHECK_NEAR(total, 6 * ag8(2 * P / 6) + 6 * ag8(4 * P / 6) + 3e-4 + 4.5e-4, 1e-12);
    /* reduce_dtype bf16: the copy-in writes 2 B, 60e6 x 4 / 0.8e12 = 3e-4 s */
    l.grad_fp32 = false;
    dp_shard_comm(&m, &c, &l, &st, &p, &p, &total, &exposed);
    CHECK_NEAR(total, 6 * ag8(2 * P / 6) + 6 * ag8(2 * P / 6) + 3e-4 + 3e-4, 1e-12);
    l = layout(DP_FW_MEGATRON, 3);
    l.dp = 8;
    l.gbs = 8;
    dp_shard_comm(&m, &c, &l, &st, &p, &p, &total, &exposed);
    double mt = total;
    c.gpu.mem_bw_gbps = 0;
    dp_shard_comm(&m, &c, &l, &st, &p, &p, &total, &exposed);
    CHECK_NEAR(mt, total, 0);
    CHECK(total > 0);
}

/* DeepSpeed ZeRO-3 under full recompute: a sub-module is gathered again for backward
 * unless it is reused within stage3_max_reuse_distance = 1e9 parameters, counted over the
 * trace between its recomputed forward and its backward, where every later linear of the
 * layer appears twice (recomputed forward, then backward). GPT-3 175B at t = 1: QKV 453M,
 * out 151M, fc1 604M, fc2 604M; fc2: nothing between (kept); fc1: fc2 twice = 1208M >
 * 1e9 (again); out: 2 x 1208M (again); QKV: 2 x 1359M (again): (453 + 151 + 604) / 1812
 * = 2/3 of the gathers repeat (1/3 when each later linear was counted once). */
static void test_deepspeed_regather(void)
{
    struct dp_model m = {0};
    m.layers = 96;
    m.hidden = 12288;
    m.heads = m.kv_heads = 96;
    m.head_dim = 128;
    m.ffn_hidden = 49152;
    m.ffn = DP_FFN_GELU;
    struct dp_cluster c = one_gpu();
    struct dp_path p = {.busbw_gbps = 100, .latency_us = 1};
    struct dp_shard_stage st = shard_stage(1.812e9);
    struct dp_layout l = layout(DP_FW_DEEPSPEED, 3);
    l.dp = 8;
    l.gbs = 8;
    double t0, t1, e;
    dp_shard_comm(&m, &c, &l, &st, &p, &p, &t0, &e);
    l.recompute = DP_RECOMPUTE_FULL;
    dp_shard_comm(&m, &c, &l, &st, &p, &p, &t1, &e);
    CHECK_NEAR(t1 - t0, 18 * ag8(2 * 1.812e9 / 18) * 2 / 3, 1e-9);
}

/* DeepSpeed 0.3 (SC'21 Table 2's ZeRO-3 rows): PyTorch 1.8's list collectives copy rank
 * by rank, 10 us per rank and collective, and the synchronous fetch exposes every gather.
 * The tiny stage under ZeRO-3 on 8 ranks, forward and backward halves of 1 s each:
 *  - with prefetch, every gather but the first hides behind a sub-module's compute
 *    (18 of 1 s / 18 = 55.6 ms each, far more than a gather);
 *  - without it (overlap_param_gather false) the 36 gathers are exposed, and the bucket's
 *    reduce-scatter (one, after the backward) too: exposed = total;
 *  - list collectives add 8 x 10 us = 80 us to each of the 36 + 1 collectives. */
static void test_deepspeed_legacy(void)
{
    struct dp_model m = tiny();
    struct dp_cluster c = one_gpu();
    struct dp_path p = {.busbw_gbps = 100, .latency_us = 1};
    const double P = 60e6;
    struct dp_shard_stage st = shard_stage(P);
    st.fwd_s = st.bwd_s = 1.0;
    struct dp_layout l = layout(DP_FW_DEEPSPEED, 3);
    l.dp = 8;
    l.gbs = 8;
    double total, exposed;
    const double ag = ag8(2 * P / 18), rs = ag8(2 * P);
    dp_shard_comm(&m, &c, &l, &st, &p, &p, &total, &exposed);
    CHECK_NEAR(total, 36 * ag + rs, 1e-12);
    CHECK(exposed < total / 2);
    l.overlap_param_gather = false;
    dp_shard_comm(&m, &c, &l, &st, &p, &p, &total, &exposed);
    CHECK_NEAR(total, 36 * ag + rs, 1e-12);
    CHECK_NEAR(exposed, total, 1e-12);
    l.list_collectives = true;
    dp_shard_comm(&m, &c, &l, &st, &p, &p, &total, &exposed);
    /* and the persistent parameters' re-gather after the step: tiny's RMSNorm weights, 2
     * per layer x 4 layers + the final one = 9 of 1024 elements, each copied by all 8
     * ranks (partitions of 128): one all-gather of 9 x 1024 x 2 B (plus its 8 copies), 8
     * narrows and 72 iterations of 3 x 2.26 us + 10 us */
    double persist = ag8(9 * 1024 * 2) + 80e-6 + 8 * 2.26e-6 + 72 * (3 * 2.26e-6 + 10e-6);
    /* and each sub-module gather's output list built in Python: 8 narrows of 2.26 us; the
     * gradients reduce-scattered one weight at a time (18 of 2P/18 B with their 8 copies
     * each, and the input list built in Python first: 8 x (view + narrow) of 2.26 us)
     * instead of one bucket, every one exposed although backward has 55.6 ms of
     * compute per sub-module to hide it under (the next fetch's torch.cuda.synchronize()
     * waits for it): exposed = total, where hiding 17 of them at 15% contention would
     * leave 36 g3 + 17 x 0.15 rs18 + rs18 + persist */
    const double g3 = ag + 80e-6 + 8 * 2.26e-6, rs18 = ag + 80e-6 + 8 * 2 * 2.26e-6;
    CHECK_NEAR(total, 36 * g3 + 18 * rs18 + persist, 1e-12);
    CHECK_NEAR(exposed, 36 * g3 + 18 * rs18 + persist, 1e-12);
    /* 0.3 with its prefetch priced (overlap_param_gather): the first forward gather
     * exposed, the other 17 and the 18 backward ones under a sub-module's 55.6 ms at 15%
     * contention, and still every reduction exposed */
    l.overlap_param_gather = true;
    dp_shard_comm(&m, &c, &l, &st, &p, &p, &total, &exposed);
    CHECK_NEAR(exposed, g3 + 35 * 0.15 * g3 + 18 * rs18 + persist, 1e-12);
}

/* DeepSpeed 0.3 on one 529.6B layer (h = 20480, 128 heads of 160, f = 81920, LayerNorm,
 * every bias) on 2240 ranks at 1 us per step and 100 GB/s, no embedding or output, nothing
 * overlapped: its 4 weights of 12 x 20480^2 / 4 = 1.26e9 parameters each on average are
 * gathered in forward and backward, each gather ag(2.52e9 B) = 2239 x 1 us + 2239/2240 x
 * 2.52e9 B / 100 GB/s plus 2240 list copies of 10 us and 2240 narrows of 2.26 us, and
 * reduce-scattered one at a time (4 x ag(2.52e9 B) + 2240 copies + 2240 x (view + narrow)
 * of 2.26 us: 15.3 ms a weight at 2240 ranks, 61.2 ms for the layer). After the step, the
 * persistent parameters (< 1e5 elements): 4 norm tensors, QKV bias 61440, out bias 20480,
 * fc1 bias 81920, fc2 bias 20480. Ranks that copy (partitions of ceil(numel / 2240)):
 * 20480 -> partitions of 10, 2048 ranks; 61440 -> 28, ceil(2194.3) = 2195; 81920 -> 37,
 * ceil(2214.1) = 2215. 6 x 2048 + 2195 + 2215 = 16698 iterations of 3 x 2.26 + 10 us; the
 * all-gather of 266240 elements x 2 B plus its 2240 list copies; 2240 narrows. */
static void test_deepspeed_persistent(void)
{
    struct dp_model m = {0};
    m.layers = 1;
    m.hidden = 20480;
    m.heads = m.kv_heads = 128;
    m.head_dim = 160;
    m.ffn_hidden = 81920;
    m.ffn = DP_FFN_GELU;
    m.norm = DP_NORM_LAYERNORM;
    m.norms_per_layer = 2;
    m.qkv_bias = m.out_bias = m.mlp_bias = true;
    struct dp_cluster c = one_gpu();
    struct dp_path p = {.busbw_gbps = 100, .latency_us = 1};
    struct dp_shard_stage st = {0};
    st.dense = 12.0 * 20480 * 20480;
    st.layers = 1;
    st.ag_dense_bytes = 2 * st.dense;
    struct dp_layout l = layout(DP_FW_DEEPSPEED, 3);
    l.dp = 2240;
    l.gbs = 2240;
    l.overlap_param_gather = false;
    l.dp_overlap = false;
    l.list_collectives = true;
    double t1, e;
    dp_shard_comm(&m, &c, &l, &st, &p, &p, &t1, &e);
    double unit = 2 * 12.0 * 20480 * 20480 / 4;
    double ag = 2239 * 1e-6 + 2239.0 / 2240 * unit / 100e9;
    double gather = ag + 2240 * 10e-6 + 2240 * 2.26e-6,
           reduce = ag + 2240 * 10e-6 + 2240 * 2 * 2.26e-6;
    double pag = 2239 * 1e-6 + 2239.0 / 2240 * 266240 * 2 / 100e9 + 2240 * 10e-6;
    double persist = pag + 2240 * 2.26e-6 + 16698 * (3 * 2.26e-6 + 10e-6);
    CHECK_NEAR(t1, 8 * gather + 4 * reduce + persist, 1e-9);
    CHECK_NEAR(e, t1, 1e-9);
    /* 16698 x 16.78 us = 0.2802 s, the all-gather 24.6 ms, the narrows 5.1 ms */
    CHECK_NEAR(persist, 0.30990, 1e-4);
    /* On the device, at 2000 GB/s x 0.8 = 1.6e12 B/s: each of the 8 gathers of
     * 2 x 12 x 20480^2 / 4 = 2,516,582,400 B is zero-filled (one write) and copied out of
     * PyTorch 1.8's flat all-gather buffer (a read and a write): 8 x 3 x 2,516,582,400 =
     * 60,397,977,600 B; each of the 4 reduce-scatters copies its input into the flat
     * buffer: 4 x 2 x 2,516,582,400 = 20,132,659,200 B; the persistent all-gather's copy
     * 2 x 532,480 = 1,064,960 B. 80,531,701,760 B / 1.6e12 B/s = 50.3323 ms (the
     * zero-fill alone was 8 x 2,516,582,400 / 1.6e12 = 12.583 ms) */
    c.gpu.mem_bw_gbps = 2000;
    double t2;
    dp_shard_comm(&m, &c, &l, &st, &p, &p, &t2, &e);
    CHECK_NEAR(t2 - t1, 80531701760.0 / 1.6e12, 1e-9);
    CHECK_NEAR(t2 - t1, 50.3323e-3, 1e-6);
}

/* HSDP: reduce-scatter in the shard group, all-reduce of the 1/sg shard across the
 * replicas, all-gather in the shard group. 16 GPUs as 2 nodes of 8, shard group 8 (a
 * node), replicas 2 across the network. */
static void test_hsdp(void)
{
    struct dp_model m = tiny();
    struct dp_cluster c = one_gpu();
    c.nodes = 2;
    c.gpus_per_node = 8;
    c.nics_per_node = 8;
    c.intra = (struct dp_link){"nvl", DP_LINK_NVLINK, 200, 1, 1.0, 0};
    c.inter = (struct dp_link){"net", DP_LINK_NET, 25, 5, 1.0, 0};
    const double P = 60e6;
    struct dp_shard_stage st = shard_stage(P);
    struct dp_layout l = layout(DP_FW_TORCHTITAN, 3);
    l.dp = 16;
    l.gbs = 16;
    l.shard_group = 8;
    struct dp_path full, sh, rep;
    dp_place_path_fast(&c, &l, DP_PLACE_DPCP, &full);
    dp_group_path_fast(&c, 8, 1, &sh);
    dp_group_path_fast(&c, 2, 8, &rep);
    CHECK(!sh.inter_node && rep.inter_node);
    double total, exposed;
    dp_shard_comm(&m, &c, &l, &st, &full, &full, &total, &exposed);
    double want = 12 * dp_coll_time_s(DP_ALLGATHER, 2 * P / 6, 8, &sh) +
                  6 * (dp_coll_time_s(DP_REDUCE_SCATTER, 4 * P / 6, 8, &sh) +
                       dp_coll_time_s(DP_ALLREDUCE, 4 * P / 6 / 8, 2, &rep));
    CHECK_NEAR(total, want, 1e-12);
    /* full sharding over the 16 ranks crosses the network in every collective: slower */
    l.shard_group = 0;
    double tfull;
    dp_shard_comm(&m, &c, &l, &st, &full, &full, &tfull, &exposed);
    CHECK(tfull > total);
    /* its memory: the states sharded 8 ways, not 16 */
    struct dp_states s8, s16;
    l.shard_group = 8;
    dp_mem_states(1600, dp_layout_shard(&l), &l, &s8);
    l.shard_group = 0;
    dp_mem_states(1600, dp_layout_shard(&l), &l, &s16);
    CHECK_EQ(states_total(&s8), 16 * 200);
    CHECK_EQ(states_total(&s16), 16 * 100);
}

/* Combinations a framework does not offer: one line naming the field, exit 2 (usage). */
/*
 * torchtitan's per-op SAC on a MoE block (activations.c op_sac_stored): its save set has no
 * aten._grouped_mm, so the routed experts are recomputed. tiny as 8 experts of f = 512,
 * top-2, one shared expert of 512, T = 2048, bf16, compiled, EP 1: kept are the block input
 * 2h = 2048, wq and wv outputs 2ad + 2gd = 4096, the attention output 2ad = 2048 and lse
 * 4a = 32, top-k's fp32 weights and int64 indices 12k = 24, the shared expert's w1 output
 * 2 x 512 = 1024: 9272 T. Without recompute the block keeps (mlp_act) the router's fp32
 * scores 4E = 32 and top-k 12k = 24, its input 2h = 2048, the 4096 routed copies' inputs
 * 2h and SwiGLU's three intermediates 3 x 2f (2 x (2048 + 3072) per token = 10240) and the
 * shared expert's 3 x 2 x 512 = 3072: 15416 T of MLP.
 */
static void test_op_sac_moe(void)
{
    struct dp_model m = tiny();
    m.experts = 8;
    m.top_k = 2;
    m.moe_ffn_hidden = 512;
    m.moe_shared_experts = 1;
    m.moe_shared_ffn_hidden = 512;
    const int64_t T = 2048;
    struct dp_layout l = layout(DP_FW_TORCHTITAN, 3);
    l.moe_imbalance = 1;
    struct dp_act_layer al;
    dp_act_layer(&m, &l, DP_LAYER_MOE, &al);
    CHECK_EQ(al.mlp_bytes, 15416 * T);
    l.recompute = DP_RECOMPUTE_OP;
    dp_act_layer(&m, &l, DP_LAYER_MOE, &al);
    CHECK_EQ(al.stored_bytes, 9272 * T);
    CHECK_EQ(al.work_bytes, al.full_bytes - 9272 * T);
    /* The recompute redoes the routed experts' forward, top-2 x 3 matrices of h x f:
     * 2 x 3 x 2 x T x 1024 x 512 a layer, beside wk and wo (2T x (h gd + ad h) = 2T x 2 x
     * 1024 x 1024), the shared expert's w3 (2T x 1024 x 512) and the router (2T x 1024 x 8),
     * 4 layers, one micro-batch (gbs = mbs = 1). */
    struct dp_flops fl;
    dp_flops_step(&m, &l, &fl);
    const double t = (double)T;
    double per = 2 * 3 * 2 * t * 1024 * 512 + 2 * t * 2 * 1024 * 1024 + 2 * t * 1024 * 512 +
                 2 * t * 1024 * 8;
    CHECK_NEAR(fl.recompute_flops, 4 * per, 1e-12);
}

/* torchtitan's ChunkedLossWrapper (memory.c): the compiled loss's 4 B per logit for one of
 * loss_chunks slices of the tokens, plus the fp32 gradient of all hidden states it gathers
 * the slices' gradients into: tiny, s = 2048, vocab 32000 (a multiple of 128), 8 slices:
 * 4 x 2048 x 32000 / 8 + 4 x 2048 x 1024 B; refused where the slices are not equal, and
 * under Megatron. */
static void test_loss_chunks(void)
{
    struct dp_model m = tiny();
    struct dp_cluster c = one_gpu();
    struct dp_layout l = layout(DP_FW_TORCHTITAN, 0);
    l.gbs = 1;
    l.loss = DP_LOSS_COMPILED;
    struct dp_mem_stage st;
    dp_mem_stage(&m, &c, &l, NULL, 0, &st);
    CHECK_EQ(st.act_loss_bytes, 4LL * 2048 * 32000);
    l.loss_chunks = 8;
    dp_mem_stage(&m, &c, &l, NULL, 0, &st);
    CHECK_EQ(st.act_loss_bytes, 4LL * 2048 * 32000 / 8 + 4LL * 2048 * 1024);
    struct dp_err err = {0};
    l.loss_chunks = 3;
    CHECK_EQ(dp_layout_validate(&l, &m, 1, &err) != 0, 1);
    CHECK_CONTAINS(err.msg, "loss_chunks=3");
    l.loss_chunks = 8;
    dp_err_clear(&err);
    CHECK_EQ(dp_layout_check_framework(&l, NULL, &err), 0);
    l.framework = DP_FW_MEGATRON;
    CHECK_EQ(dp_layout_check_framework(&l, NULL, &err), DP_EUSAGE);
    CHECK_CONTAINS(err.msg, "--loss-chunks: a loss over slices");
}

static void test_framework_checks(void)
{
    struct dp_err err = {0};
    struct dp_layout l = layout(DP_FW_MEGATRON, 1);
    l.fsdp_per_microbatch = true;
    CHECK_EQ(dp_layout_check_framework(&l, NULL, &err), DP_EUSAGE);
    CHECK_CONTAINS(err.msg, "--fsdp-per-microbatch: FSDP's per-micro-batch");
    dp_err_clear(&err);
    l = layout(DP_FW_DEEPSPEED, 3);
    l.pp = 2;
    l.dp = 4;
    CHECK_EQ(dp_layout_check_framework(&l, NULL, &err), DP_EUSAGE);
    CHECK_CONTAINS(err.msg, "--zero: deepspeed");
    dp_err_clear(&err);
    CHECK_EQ(dp_layout_check_framework(&l, "plan.json: layout", &err), DP_EUSAGE);
    CHECK_CONTAINS(err.msg, "layout.zero");
    l = layout(DP_FW_TORCHTITAN, 1);
    dp_err_clear(&err);
    CHECK_EQ(dp_layout_check_framework(&l, NULL, &err), DP_EUSAGE);
    l = layout(DP_FW_MEGATRON, 1);
    l.recompute = DP_RECOMPUTE_OP;
    dp_err_clear(&err);
    CHECK_EQ(dp_layout_check_framework(&l, NULL, &err), DP_EUSAGE);
    CHECK_CONTAINS(err.msg, "--recompute");
    l = layout(DP_FW_TORCHTITAN, 3);
    l.dp = 12;
    l.shard_group = 8;
    dp_err_clear(&err);
    CHECK_EQ(dp_layout_check_framework(&l, NULL, &err), DP_EUSAGE);
    CHECK_CONTAINS(err.msg, "--shard-group");
    l.shard_group = 4;
    dp_err_clear(&err);
    CHECK_EQ(dp_layout_check_framework(&l, NULL, &err), 0);
    /* half gradients under FSDP2: reduce_dtype bf16, accepted */
    l.grad_fp32 = false;
    dp_err_clear(&err);
    CHECK_EQ(dp_layout_check_framework(&l, NULL, &err), 0);
    /* MiCS-style groups in DeepSpeed: zero 3 only */
    l = layout(DP_FW_DEEPSPEED, 2);
    l.dp = 16;
    l.shard_group = 8;
    dp_err_clear(&err);
    CHECK_EQ(dp_layout_check_framework(&l, NULL, &err), DP_EUSAGE);
    l.zero = 3;
    dp_err_clear(&err);
    CHECK_EQ(dp_layout_check_framework(&l, NULL, &err), 0);
    /* a torch.compile'd loss is torchtitan's; Megatron refuses it, naming the field */
    l = layout(DP_FW_MEGATRON, 1);
    l.loss = DP_LOSS_COMPILED;
    dp_err_clear(&err);
    CHECK_EQ(dp_layout_check_framework(&l, NULL, &err), DP_EUSAGE);
    CHECK_CONTAINS(err.msg, "--loss: megatron");
    l.framework = DP_FW_TORCHTITAN;
    l.zero = 3;
    dp_err_clear(&err);
    CHECK_EQ(dp_layout_check_framework(&l, NULL, &err), 0);
}

int main(void)
{
    test_bytes_per_param();
    test_loss_bytes();
    test_op_sac_moe();
    test_loss_chunks();
    test_recompute_policies();
    test_recompute_methods();
    test_runtime_buffers();
    test_quantities();
    test_protocols();
    test_sharded_granularity();
    test_fsdp_copies();
    test_deepspeed_regather();
    test_deepspeed_persistent();
    test_deepspeed_legacy();
    test_hsdp();
    test_framework_checks();
    return check_failures ? 1 : 0;
}
