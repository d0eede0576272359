/*
 * The framework profile: what Megatron-Core, torchtitan (FSDP2) and DeepSpeed
 * ZeRO keep per parameter under each sharding mode, what their loss holds,
 * what the PyTorch caching allocator reserves beyond what is allocated, and
 * the runtime buffers outside it (CUDA context, NCCL). Each term names the
 * framework source it comes from; /work/research/issue12/framework_facts.md
 * has the line references. Communication granularity and prefetch are in
 * shard.c, activation policies in recompute.c.
 */
#include "costmodel.h"

#include <string.h>

void dp_mem_bytes_per_param(const struct dp_layout *l, int *param_b, int *grad_b, int *opt_b)
{
    int p = dp_precision_bytes(l->precision);
    bool mixed = l->precision != DP_FP32;
    /* Adam m and v; SGD's and Muon's momentum (Muon's parameters beyond the layers' matrices,
     * Adam's, are memory.c's). */
    int moments = l->optimizer == DP_OPT_ADAM ? 8 : 4;
    if (l->framework == DP_FW_TORCHTITAN) {
        /*
         * FSDP2 (torch.distributed.fsdp fully_shard, MixedPrecisionPolicy): param_dtype
         * (bf16) is the dtype of the unsharded parameter used in forward and backward; the
         * sharded parameter keeps its original dtype (fp32) and is what the optimizer
         * steps, so it is the master copy; gradients are reduced in reduce_dtype (fp32,
         * torchtitan mixed_precision_reduce) into the fp32 sharded gradient. Persistent:
         * 4 + 4 + 8 = 16 bytes per parameter, no separate master weights; the bf16
         * unsharded parameters are transients (shard.c).
         */
        *param_b = 4;
        *grad_b = 4;
        *opt_b = moments;
        if (l->optimizer_dtype != DP_FP32) {
            /* Sharded parameters created in half precision (NeMo Automodel's from_config:
             * torch_dtype "auto" = torch.bfloat16, nemo_automodel/_transformers/
             * auto_model.py): the shard the optimizer steps is bf16, FSDP2 casts the fp32
             * reduce-scatter output to it for .grad, and torch.optim.Adam's moments are
             * zeros_like(param): 2 + 2 + 2 + 2 B. */
            int od = dp_precision_bytes(l->optimizer_dtype);
            *param_b = *grad_b = od;
            *opt_b = (moments / 4) * od;
        }
        return;
    }
    /* Megatron-Core (docs/user-guide/features/dist_optimizer.md): bf16 parameters, fp32
     * main gradients (--accumulate-allreduce-grads-in-fp32), fp32 main parameters and the
     * moments: 18 bytes, 6 + 12/d with the distributed optimizer. DeepSpeed: the model's
     * weights in bf16/fp16, gradients in the model dtype unless data_types.grad_accum_dtype
     * is fp32 (runtime/engine.py get_data_types), fp32 master partition and moments
     * (zero/stage_1_and_2.py single_partition_of_fp32_groups, stage3.py fp32 partition). */
    *param_b = p;
    *grad_b = (l->grad_fp32 || !mixed) ? 4 : p;
    *opt_b = (mixed ? 4 : 0) + moments;
    if (l->optimizer_dtype != DP_FP32) {
        /* Apex DistributedFusedAdam (NeMo's distributed_fused_adam) keeps its states in
         * optim.dtype; NeMo's setup_optimization (nemo/collections/nlp/models/
         * language_modeling/megatron_base_model.py) sets store_params False when that is
         * the model's dtype, so the half-precision shard itself is stepped, with no master
         * copy: bf16 moments, 2 + 2 B per parameter. */
        int od = dp_precision_bytes(l->optimizer_dtype);
        *opt_b = (l->optimizer_dtype != l->precision ? od : 0) + (moments / 4) * od;
    }
}

int dp_fsdp_reduce_bytes(const struct dp_layout *l)
{
    return l->grad_fp32 || l->precision == DP_FP32 ? 4 : dp_precision_bytes(l->precision);
}

static int64_t ceil_div(int64_t a, int64_t b)
{
    return (a + b - 1) / b;
}

void dp_mem_states(int64_t n, int64_t shard, const struct dp_layout *l, struct dp_states *out)
{
    int pb, gb, ob;
    dp_mem_bytes_per_param(l, &pb, &gb, &ob);
    if (shard < 1)
        shard = 1;
    /* Shards are equal slices of the flat buffer, padded: ceil(n / shard) elements each. */
    int64_t sh = ceil_div(n, shard);
    const int p = dp_precision_bytes(l->precision);
    if (l->framework == DP_FW_TORCHTITAN && l->zero >= 2) {
        out->params_bytes = sh * pb;
        out->grads_bytes = sh * gb;
        out->optimizer_bytes = sh * ob;
        if (l->pp > 1) {
            /*
             * FSDP2 with pipeline parallelism: torchtitan's reshard policy "default" does not
             * reshard after forward when PP is on (torchtitan/distributed/fsdp.py
             * get_fsdp_reshard_after_forward_policy), and the pipeline schedule turns off
             * gradient sync but for the last micro-batch (set_requires_gradient_sync), so
             * FSDP2 accumulates each unsharded gradient in reduce_dtype
             * (to_accumulated_grad_if_needed): the stage's bf16 parameters and its
             * gradients (fp32 in torchtitan) stay whole for the step, beside the shards.
             * With fsdp_per_microbatch each micro-batch's gradients are reduce-scattered
             * into the shards as they come: the parameters stay whole (some micro-batch is
             * always between its forward and backward), the gradients do not.
             */
            out->params_bytes += n * p;
            if (!l->fsdp_per_microbatch)
                out->grads_bytes = n * dp_fsdp_reduce_bytes(l);
        }
        return;
    }
    if (l->framework == DP_FW_DEEPSPEED && l->zero >= 3) {
        /* ZeRO-3 (zero/stage3.py): the bf16 partition, the fp32 partition and the moments
         * (ob), and the flat gradient partition in the accumulation dtype. */
        out->params_bytes = sh * pb;
        out->grads_bytes = sh * gb;
        out->optimizer_bytes = sh * ob;
        return;
    }
    /* With pipeline parallelism, sharded weights and gradients stay gathered and
     * unreduced across a step's micro-batches (the schedule turns off reshard-after-backward
     * and gradient sync but for the last micro-batch), so only the optimizer state stays
     * sharded (a layout only the cost model's callers build: the frameworks' checks refuse
     * ZeRO-2/3 with pp under Megatron and DeepSpeed). */
    int zero = (l->zero >= 2 && l->pp > 1) ? 1 : l->zero;
    out->params_bytes = (zero >= 3 ? sh : n) * pb;
    out->grads_bytes = (zero >= 2 ? sh : n) * gb;
    out->optimizer_bytes = (zero >= 1 ? sh : n) * ob;
}

double dp_fw_loss_bytes(const struct dp_layout *l)
{
    /* Per logit element at the loss's peak (core.h enum dp_loss has the derivations). */
    switch (dp_layout_loss(l)) {
    case DP_LOSS_FUSED: return (double)dp_precision_bytes(l->precision);
    case DP_LOSS_FUSED_NATIVE: return (double)dp_precision_bytes(l->precision) + 8.0;
    case DP_LOSS_COMPILED: return 2.0 * dp_precision_bytes(l->precision);
    case DP_LOSS_UNFUSED:
        /* torchtitan with TP computes it under loss_parallel on vocabulary-sharded logits
         * (torch/distributed/tensor/parallel/loss.py): its _log_softmax is the decomposition
         * (x - max, exp, sum, x - logsumexp) and its backward grad - exp(out) * sum(grad),
         * whose temporaries are not fused: the saved output, the output gradient and two
         * temporaries, 4 x 4 B. */
        return l->framework == DP_FW_TORCHTITAN && l->tp > 1 ? 16.0 : 12.0;
    default: return (double)dp_precision_bytes(l->precision) + 4.0;
    }
}

/*
 * NCCL memory outside the PyTorch allocator, per communicator (send/receive buffers of
 * each channel and peer: NCCL_BUFFSIZE 4 MiB for Simple, plus the LL and LL128 buffers,
 * NVIDIA/nccl src/init.cc): measured 544 MB for a 2-rank group and 688 MB for more
 * ranks on 4 x A100 (NVIDIA/nccl issue 964). An all-to-all connects every peer: on
 * 8 x H100 all_to_all_single raised NCCL's memory from 1.06 to 4.34 GB per GPU (NVIDIA/nccl
 * issue 1685), 3.28 GB more.
 */
#define NCCL_COMM_PAIR_BYTES 544000000.0
#define NCCL_COMM_BYTES      688000000.0
#define NCCL_ALLTOALL_BYTES  3280000000.0

/* cuBLASLt workspace PyTorch allocates per handle on compute capability >= 9.0 (32 MiB,
 * aten/src/ATen/cuda/CUDABlas.cpp _parseChosenWorkspaceSize, PR 120925), one for the
 * compute stream and one for the communication-overlap stream, plus Transformer Engine's
 * (32 MiB per stream on Hopper): inside the allocator. */
#define WORKSPACE_BYTES (4.0 * 32.0 * 1048576.0)

static double comm_bytes(int n)
{
    return n <= 1 ? 0 : n == 2 ? NCCL_COMM_PAIR_BYTES : NCCL_COMM_BYTES;
}

void dp_fw_runtime(const struct dp_layout *l, bool moe, const struct dp_gpu *gpu,
                   struct dp_fw_runtime *out)
{
    memset(out, 0, sizeof *out);
    /* The CUDA context, outside the allocator: the GPU profile's runtime_overhead_bytes
     * (about 300-400 MB with lazy module loading, pytorch/pytorch issues 107667, 109888). */
    out->context_bytes = gpu->runtime_overhead_bytes;
    out->workspace_bytes = (int64_t)WORKSPACE_BYTES;
    /* One communicator per group that carries a collective in the step: TP, CP, the
     * gradient group (its shard and replica groups under HSDP), the pipeline's p2p pairs,
     * and for MoE the expert all-to-all, expert TP and expert gradient groups. */
    double b = comm_bytes(l->tp) + comm_bytes(l->cp);
    int sg = dp_layout_shard(l), rep = dp_layout_replicas(l);
    b += comm_bytes(sg) + comm_bytes(rep);
    if (l->pp > 1)
        b += NCCL_COMM_PAIR_BYTES;
    if (moe) {
        int etp = dp_layout_etp(l);
        if (l->ep > 1)
            b += comm_bytes(l->ep) + NCCL_ALLTOALL_BYTES;
        if (etp != l->tp)
            b += comm_bytes(etp);
        if (dp_layout_edp(l) != l->dp * l->cp)
            b += comm_bytes(dp_layout_edp(l));
    }
    out->nccl_bytes = (int64_t)b;
}

/*
 * The PyTorch caching allocator's reserved peak over what is allocated, for the memory
 * that is allocated and freed during the step (activations, the loss, communication
 * buffers); the model states, allocated once at start, do not fragment. Fitted to the
 * reserved peaks of the fitted subset of tests/validation/memory/ (torchtitan's
 * reserved_bytes.all.peak, `dplan validate --memory` prints the best value); older
 * stacks reported more: reserved/allocated 1.30 (per-op SAC) and 1.44 (full AC) for
 * Llama 7B in torchtitan PR 97 (2024-02), 1.39 for GPT-2 2.6B in Megatron-LM issue 60.
 */
double dp_fw_alloc_slack(const struct dp_layout *l)
{
    (void)l;
    return DP_ALLOC_SLACK;
}
