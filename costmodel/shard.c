/*
 * Data-parallel communication of a step: the gradient all-reduce (ZeRO-0), the
 * distributed optimizer's reduce-scatter and all-gather (ZeRO-1), and the
 * sharded modes (ZeRO-2/3, FSDP2, Megatron-FSDP), each at the granularity its
 * framework issues collectives (Megatron's buckets, FSDP2's blocks,
 * DeepSpeed's sub-modules and reduce buckets), every collective paying its
 * ring steps over the group's real link (dp_coll_time_s), with the prefetch
 * and overlap each framework has, the re-gathers recompute causes, and
 * hybrid sharding (HSDP): reduce-scatter inside the shard group, all-reduce
 * of the shard across the replicas. Sources per term below.
 */
#include "costmodel.h"
#include "overlap.h"

#include <math.h>
#include <string.h>

/* Megatron-Core DDP bucket: max(40M, 1M x dp size) parameters with --overlap-grad-reduce,
 * one bucket for all without it (megatron/core/distributed/distributed_data_parallel.py). */
static double megatron_bucket(const struct dp_layout *l)
{
    double b = 1e6 * (double)(l->dp * l->cp);
    return b > 4e7 ? b : 4e7;
}

/* DeepSpeed zero_optimization defaults (deepspeed/runtime/zero/config.py):
 * reduce_bucket_size and allgather_bucket_size 5e8 elements, stage3_max_live_parameters
 * and stage3_max_reuse_distance 1e9. */
#define DS_BUCKET    5e8
#define DS_MAX_LIVE  1e9
#define DS_MAX_REUSE 1e9

/* Collectives of one pass over the stage: `units` alike, the parameters split evenly. */
struct pass {
    int units;
    double ag; /* one unit's all-gather */
};

/*
 * PyTorch's list collectives (torch.distributed.all_gather(tensor_list, t) and
 * reduce_scatter(t, tensor_list) up to 1.8) run NCCL on one flat buffer and copy it to (or
 * from) the n per-rank tensors one copy_ at a time (torch/lib/c10d/ProcessGroupNCCL.cpp of
 * v1.8: allgather's loop `outputTensors[i][j].copy_(outputFlattened[i][j], true)` after
 * ncclAllGather, reduce_scatter's flatten before ncclReduceScatter), each with a
 * recordStream on the caching allocator. DeepSpeed 0.3's ZeRO-3 gathers and reduces through
 * them (partition_parameters.py _allgather_params: all_gather(partitions, ...) over one
 * narrow() per rank; coalesced_collectives.py reduce_scatter_coalesced) and waits for each
 * gather (fetch_sub_module -> torch.cuda.synchronize), so the host time of the n copies is
 * on the step's path. Per copy: the C++ dispatch of copy_ (autograd and ATen dispatcher,
 * ~1-3 us each), recordStream and the cudaMemcpyAsync launch (~2-5 us), ~10 us together
 * (the 5-25 us per eager op of the op-to-kernel dispatch chain less its Python layers).
 */
#define LIST_COPY_S 10e-6

/*
 * The device side of the same list collectives: allgather's n copy_ calls move the whole
 * gathered buffer from the flat NCCL output into the caller's tensors, and reduce_scatter's
 * flatten_for_scatter_gather copies the n inputs into a new flat buffer before
 * ncclReduceScatter (ProcessGroupNCCL.cpp of v1.8), both on the group's NCCL stream, so
 * the collective's Work completes only after them: each byte read and written once more,
 * memory-bound at DP_MEM_EFFICIENCY of HBM bandwidth.
 */
static double list_copy_s(const struct dp_layout *l, const struct dp_cluster *cl, double bytes)
{
    if (!l->list_collectives || cl->gpu.mem_bw_gbps <= 0 || bytes <= 0)
        return 0;
    return 2 * bytes / (cl->gpu.mem_bw_gbps * 1e9 * DP_MEM_EFFICIENCY);
}

static double coll(const struct dp_layout *l, enum dp_coll_kind k, double bytes, int n,
                   const struct dp_path *p)
{
    if (n <= 1)
        return 0;
    double t = dp_coll_time_s(k, bytes, n, p);
    if (l->list_collectives && bytes > 0 && (k == DP_ALLGATHER || k == DP_REDUCE_SCATTER))
        t += n * LIST_COPY_S;
    return t;
}

/*
 * DeepSpeed ZeRO-3 with full recompute: the recomputed forward gathers each sub-module
 * again; one is kept for its backward only when it is reused within stage3_max_reuse_distance
 * parameters (partitioned_param_coordinator.py release_sub_module). That distance is the
 * parameters of every trace entry between the two uses (stage3.py of 0.3.13,
 * PrefetchCoordinator.get_reuse_distance_in_numel -> _distance_in_numel over the recorded
 * sub-module trace), and between a sub-module's recomputed forward and its backward the
 * trace holds each later sub-module of the layer twice: its recomputed forward, then its
 * backward. The fraction of a layer's gathers repeated in backward, for the four linears
 * of a layer in forward order (QKV, output, MLP in, MLP out).
 */
static double ds_regather_share(const struct dp_model *m, const struct dp_layout *l)
{
    const double t = l->tp, h = (double)m->hidden, up = m->ffn == DP_FFN_SWIGLU ? 2 : 1;
    double f = (double)(m->experts > 0 ? m->moe_ffn_hidden * m->top_k : m->ffn_hidden);
    double w[4] = {h * (double)(m->heads + 2 * m->kv_heads) * (double)m->head_dim / t,
                   (double)(m->heads * m->head_dim) * h / t, up * h * f / t, h * f / t};
    double after = 0, again = 0, all = 0;
    for (int i = 3; i >= 0; i--) {
        if (2 * after > DS_MAX_REUSE)
            again += w[i];
        after += w[i];
        all += w[i];
    }
    return all > 0 ? again / all : 0;
}

/*
 * DeepSpeed 0.3's ZeRO-3 re-gathers its persistent parameters (fewer elements than
 * stage3_param_persistence_threshold, 1e5 by default: the norms and biases, which stay
 * whole through forward and backward) after every optimizer step: backward ends by
 * releasing every parameter (stage3.py 0.3.13 backward -> _partition_all_parameters) and
 * _post_step gathers the persistent ones back synchronously
 * (persistent_parameters[0].all_gather(...) -> partition_parameters.py _allgather_params):
 * one all_gather of their concatenated partitions through PyTorch's list API, then a
 * Python loop over every parameter and every rank whose partition starts inside it, each
 * iteration a partitions[i].narrow, a replicated_tensor.view(-1).narrow and a copy_ of
 * that rank's few elements. Host time with the GPU idle (the next forward is issued after
 * it): three view ops from Python at 2.26 us each and the copy_'s dispatch and launch
 * (LIST_COPY_S), per rank and parameter; plus the n narrows that build the partition list.
 * 2.26 us: PyTorch's operator micro-benchmark of a view op from Python (split of an 8 x 8
 * tensor) with pytorch#32194, on cpu; before it cpu and cuda took the same 3.33 us, so the
 * figure is host-side work and holds for cuda tensors.
 */
#define DS_PERSIST_THRESHOLD 1e5
#define PY_VIEW_OP_S         2.26e-6
#define DS_PERSIST_ITER_S    (3 * PY_VIEW_OP_S + LIST_COPY_S)

/* Ranks whose partition starts inside a parameter of `numel` elements: partitions of
 * ceil(numel / n) (the parameter padded to a multiple of n, _aligned_size), so
 * ceil(numel / ceil(numel / n)) of the n ranks copy. */
static double ds_persist_copies(double numel, int n)
{
    if (numel <= 0 || numel >= DS_PERSIST_THRESHOLD)
        return 0;
    return ceil(numel / ceil(numel / n));
}

/* The persistent parameters of the stage as (copies, elements) sums: per decoder layer the
 * norms (LayerNorm weight and bias, RMSNorm weight) and, where the model has them, the
 * biases of Megatron's fused QKV, the attention output and the two MLP linears (per tensor-
 * parallel rank for the column-parallel ones), Qwen3's q/k norms; the final norm on the
 * last stage. The experts' biases are not counted. */
static void ds_persistent(const struct dp_model *m, const struct dp_layout *l,
                          const struct dp_shard_stage *st, int n, double *copies, double *elems)
{
    const double t = l->tp, h = (double)m->hidden, up = m->ffn == DP_FFN_SWIGLU ? 2 : 1;
    const int per_norm = m->norm == DP_NORM_LAYERNORM ? 2 : 1;
    double layer[16]; /* 4 norms x 2 (LayerNorm), 4 biases, 2 q/k norms, the sinks */
    int k = 0;
    for (int i = 0; i < m->norms_per_layer * per_norm; i++)
        layer[k++] = h;
    if (m->qkv_bias)
        layer[k++] = (double)((m->heads + 2 * m->kv_heads) * m->head_dim) / t;
    if (m->out_bias)
        layer[k++] = h;
    if (m->mlp_bias && m->experts == 0) {
        layer[k++] = up * (double)m->ffn_hidden / t;
        layer[k++] = h;
    }
    if (m->qk_norm) { /* per head, or OLMo 2's over the TP rank's heads */
        layer[k++] = (double)(m->qk_norm_full ? m->heads : 1) * (double)m->head_dim /
                     (m->qk_norm_full ? t : 1);
        layer[k++] = (double)(m->qk_norm_full ? m->kv_heads : 1) * (double)m->head_dim /
                     (m->qk_norm_full ? t : 1);
    }
    if (m->attn_sinks)
        layer[k++] = (double)m->heads / t;
    double c = 0, e = 0;
    for (int i = 0; i < k; i++) {
        c += ds_persist_copies(layer[i], n);
        e += layer[i] < DS_PERSIST_THRESHOLD ? layer[i] : 0;
    }
    c *= st->layers;
    e *= st->layers;
    if (st->last) {
        c += per_norm * ds_persist_copies(h, n);
        e += per_norm * h;
    }
    *copies = c;
    *elems = e;
}

double dp_ds_regather_share(const struct dp_model *m, const struct dp_layout *l)
{
    return ds_regather_share(m, l);
}

void dp_shard_groups(const struct dp_cluster *cl, const struct dp_layout *l,
                     const struct dp_path *dpcp, const struct dp_path *edp,
                     struct dp_shard_groups *g)
{
    memset(g, 0, sizeof *g);
    g->ndp = l->dp * l->cp;
    g->sg = dp_layout_shard(l);
    g->R = dp_layout_replicas(l);
    g->edpn = dp_layout_edp(l);
    g->esg = dp_layout_expert_shard(l);
    g->eR = dp_layout_expert_replicas(l);
    int pb, ob;
    dp_mem_bytes_per_param(l, &pb, &g->gb, &ob);
    /* Reduce in the gradient dtype (Megatron: fp32 main grads with
     * --accumulate-allreduce-grads-in-fp32; DeepSpeed: the accumulation dtype); FSDP2 in
     * reduce_dtype, fp32 in torchtitan (mixed_precision_reduce), bf16 with half gradients. */
    g->rb = l->framework == DP_FW_TORCHTITAN ? dp_fsdp_reduce_bytes(l) : g->gb;
    /* The groups: the shard group is the innermost sg of the dp x cp ranks (FSDP2's mesh
     * [dp_replicate, dp_shard], Megatron's instances of consecutive dp ranks), the replica
     * group the ranks sg apart. */
    g->dpcp = *dpcp;
    g->edp = *edp;
    g->ps = *dpcp;
    g->pe = *edp;
    if (g->R > 1) {
        dp_group_path_fast(cl, g->sg, l->tp, &g->ps);
        dp_group_path_fast(cl, g->R, (long)l->tp * g->sg, &g->pr);
        if (g->eR > 1) {
            int etp = dp_layout_etp(l);
            dp_group_path_fast(cl, g->esg, (long)etp * l->ep, &g->pe);
            dp_group_path_fast(cl, g->eR, (long)etp * l->ep * g->esg, &g->per);
        }
    }
}

void dp_shard_unit(const struct dp_layout *l, const struct dp_shard_groups *g, double dense,
                   double expert, double ag_dense_bytes, double ag_expert_bytes, double *gather_s,
                   double *reduce_s)
{
    if (l->zero == 0) {
        *gather_s = 0;
        *reduce_s = coll(l, DP_ALLREDUCE, dense * g->gb, g->ndp, &g->dpcp) +
                    coll(l, DP_ALLREDUCE, expert * g->gb, g->edpn, &g->edp);
        return;
    }
    *gather_s = coll(l, DP_ALLGATHER, ag_dense_bytes, g->sg, &g->ps) +
                coll(l, DP_ALLGATHER, ag_expert_bytes, g->esg, &g->pe);
    /* HSDP: the reduce-scattered shard is all-reduced across the replicas (FSDP2
     * foreach_reduce on its all_reduce stream; Megatron param_and_grad_buffer.py with
     * num_distributed_optimizer_instances > 1); the experts' over their own replicas
     * (dp_layout_expert_replicas: none where their group does not divide among R). */
    *reduce_s = coll(l, DP_REDUCE_SCATTER, dense * g->rb, g->sg, &g->ps) +
                coll(l, DP_REDUCE_SCATTER, expert * g->rb, g->esg, &g->pe) +
                coll(l, DP_ALLREDUCE, dense * g->rb / g->sg, g->R, &g->pr) +
                coll(l, DP_ALLREDUCE, expert * g->rb / g->esg, g->eR, &g->per);
}

void dp_shard_comm(const struct dp_model *m, const struct dp_cluster *cl, const struct dp_layout *l,
                   const struct dp_shard_stage *st, const struct dp_path *dpcp,
                   const struct dp_path *edp, double *total_s, double *exposed_s)
{
    *total_s = *exposed_s = 0;
    struct dp_shard_groups grp;
    dp_shard_groups(cl, l, dpcp, edp, &grp);
    const int sg = grp.sg;
    const int edpn = grp.edpn, esg = grp.esg, ndp = grp.ndp;
    const struct dp_path ps = grp.ps, pe = grp.pe;
    if (ndp <= 1 && edpn <= 1)
        return;
    const double M = (double)dp_layout_microbatches(l);

    /* How many collectives one pass issues over the stage. */
    int units;
    double total_params = st->dense + st->expert;
    bool sharded = l->zero >= 2; /* gradients reduced per micro-batch */
    switch (l->framework) {
    case DP_FW_TORCHTITAN:
        /* One fully_shard group per transformer block, the embedding and [norm, output]
         * groups beside them (torchtitan apply_fsdp). */
        units = st->layers + (st->first ? 1 : 0) + (st->last ? 1 : 0);
        break;
    case DP_FW_DEEPSPEED:
        /* Reduce buckets of reduce_bucket_size elements; ZeRO-3 gathers per sub-module,
         * counted below. 0.3's ZeRO-3 flushes a bucket when the next gradient would not
         * fit, but reduce-scatters it one parameter at a time (stage3.py average_tensor ->
         * partition_parameters.py _reduce_scatter_gradients: a reduce_scatter per
         * parameter), so it issues one per sub-module's weight. */
        if (l->list_collectives && l->zero == 3)
            units = 4 * st->layers + (st->first ? 1 : 0) + (st->last ? 1 : 0);
        else
            units = (int)ceil(total_params / DS_BUCKET);
        break;
    default:
        units = l->zero >= 2 ? st->layers : (int)ceil(total_params / megatron_bucket(l));
        if (!l->dp_overlap && l->zero < 2)
            units = 1;
        break;
    }
    if (units < 1)
        units = 1;
    const double U = units;
    struct pass ps_ = {0};
    double red;
    dp_shard_unit(l, &grp, st->dense / U, st->expert / U, st->ag_dense_bytes / U,
                  st->ag_expert_bytes / U, &ps_.ag, &red);
    /* DeepSpeed 0.3 reduce-scatters through PyTorch 1.8's list API: its input copies; and
     * before it, with the GPU waiting on the host, builds that list in Python, a
     * grad.view(-1).narrow(...) per rank (partition_parameters.py _reduce_scatter_gradient:
     * two view ops per rank, PY_VIEW_OP_S each), as the gathers build theirs. */
    if (l->framework == DP_FW_DEEPSPEED && l->zero == 3 && sg > 1) {
        red += list_copy_s(l, cl, (st->dense + st->expert) / U * grp.rb);
        if (l->list_collectives)
            red += sg * 2 * PY_VIEW_OP_S;
    }
    const double fw = st->fwd_s / U, bw = st->bwd_s / U; /* compute per unit */
    const bool opg = l->overlap_param_gather, ovl = l->dp_overlap;

    if (l->zero == 0) {
        /* All-reduce of the gradients once per step, bucket by bucket during the last
         * micro-batch's backward; the last bucket's after it. */
        double ar = red;
        *total_s = U * ar;
        *exposed_s = ovl ? (U - 1) * overlapped(ar, bw) + ar : U * ar;
        return;
    }
    /* FSDP under pp whose stages do not defer its sync (fsdp_per_microbatch, NeMo Automodel):
     * gathered and reduce-scattered every micro-batch, below, but kept whole from a
     * micro-batch's forward to its backward (reshard_after_forward = not pp_enabled). */
    const bool per_mb = l->fsdp_per_microbatch && l->framework == DP_FW_TORCHTITAN;
    if (!sharded || (l->pp > 1 && l->framework != DP_FW_DEEPSPEED && !per_mb)) {
        /*
         * Once per step: ZeRO-1 (Megatron's distributed optimizer, DeepSpeed stage 1)
         * reduce-scatters the accumulated gradients during the last micro-batch's backward
         * and all-gathers the updated parameters before (Megatron --overlap-param-gather:
         * during) the next forward; sharded modes under pipeline parallelism keep the
         * stage gathered and unreduced until the last micro-batch (FSDP2 + PP:
         * reshard_after_forward False, set_requires_gradient_sync).
         */
        double rs = red;
        *total_s = U * (rs + ps_.ag);
        double r = ovl ? (U - 1) * overlapped(rs, bw) + rs : U * rs;
        double g = opg ? ps_.ag + (U - 1) * overlapped(ps_.ag, fw) : U * ps_.ag;
        *exposed_s = r + g;
        return;
    }
    if (l->zero == 2 && l->framework == DP_FW_DEEPSPEED) {
        /* DeepSpeed stage 2: reduce per bucket every micro-batch (overlap_comm), one
         * all-gather of the updated partitions per step in allgather buckets. */
        double rs = red;
        *total_s = M * U * rs + U * ps_.ag;
        double r = ovl ? (U - 1) * overlapped(rs, bw) + rs : U * rs;
        *exposed_s = M * r + U * ps_.ag;
        return;
    }

    /* Gathered for every micro-batch: forward, and backward unless the unsharded
     * parameters stay until then (zero 2: FSDP2 reshard_after_forward False,
     * Megatron-FSDP optim_grads). */
    double gathers_b = l->zero >= 3 && !(per_mb && l->pp > 1) ? 1 : 0;
    int gunits = units;
    double gag = ps_.ag;
    bool prefetch = true;
    if (l->framework == DP_FW_DEEPSPEED) {
        /* ZeRO-3 gathers per sub-module: the four linears of each layer (norms and biases
         * are under stage3_param_persistence_threshold and stay whole), each as its own
         * all_gather_coalesced (partitioned_param_coordinator.py fetch_sub_module); the
         * next is prefetched only while fewer than stage3_max_live_parameters are live, so
         * a sub-module larger than that waits for its own gather. */
        gunits = 4 * st->layers + (st->first ? 1 : 0) + (st->last ? 1 : 0);
        double per_unit = total_params / gunits;
        gag = coll(l, DP_ALLGATHER, st->ag_dense_bytes / gunits, sg, &ps) +
              coll(l, DP_ALLGATHER, st->ag_expert_bytes / gunits, esg, &pe);
        /* 0.3 zero-fills each gathered buffer and waits for it before the all-gather
         * (partition_parameters.py _allgather_param: torch.zeros(aligned_param_size),
         * torch.cuda.synchronize()): a memory-bound write of the gathered bytes; then,
         * with the GPU idle, builds the all_gather's output list in Python, one
         * flat_tensor.narrow per rank (PY_VIEW_OP_S each). */
        if (l->list_collectives && cl->gpu.mem_bw_gbps > 0)
            gag += (st->ag_dense_bytes + st->ag_expert_bytes) / gunits /
                       (cl->gpu.mem_bw_gbps * 1e9 * DP_MEM_EFFICIENCY) +
                   list_copy_s(l, cl, (st->ag_dense_bytes + st->ag_expert_bytes) / gunits);
        if (l->list_collectives && sg > 1)
            gag += sg * PY_VIEW_OP_S;
        prefetch = per_unit < DS_MAX_LIVE;
        if (l->recompute == DP_RECOMPUTE_FULL)
            gathers_b += ds_regather_share(m, l) * dp_layout_recomputed(l, st->layers) /
                         (st->layers > 0 ? st->layers : 1);
    }
    const double GU = gunits, gfw = st->fwd_s / GU, gbw = st->bwd_s / GU;
    double f_total = GU * gag;
    double b_gather = gathers_b * GU * gag;
    double rs = U * (red);
    /* Once per step, exposed: DeepSpeed 0.3's re-gather of the persistent parameters
     * (ds_persistent above); list_collectives marks that DeepSpeed and PyTorch. */
    double persist = 0;
    if (l->framework == DP_FW_DEEPSPEED && l->list_collectives && sg > 1) {
        double copies, elems;
        ds_persistent(m, l, st, sg, &copies, &elems);
        if (copies > 0)
            persist = coll(l, DP_ALLGATHER, elems * 2, sg, &ps) + list_copy_s(l, cl, elems * 2) +
                      sg * PY_VIEW_OP_S + copies * DS_PERSIST_ITER_S;
    }
    /* FSDP2's copies around its collectives, on the unsharded parameters of every
     * micro-batch (torch/distributed/_composable/fsdp/_fsdp_collectives.py):
     * foreach_all_gather_copy_out splits each gathered buffer into the parameters
     * (split_with_sizes_copy: the gathered bytes read and written, on the compute stream,
     * before the block runs), foreach_reduce copies the unsharded gradients (compute
     * dtype) into the reduce-scatter input in reduce_dtype (torch._chunk_cat, fp32 in
     * torchtitan). Memory-bound passes at the GPU's sustained bandwidth. */
    double copy_out = 0, copy_in = 0;
    if (l->framework == DP_FW_TORCHTITAN && cl->gpu.mem_bw_gbps > 0) {
        const double hbm = cl->gpu.mem_bw_gbps * 1e9 * DP_MEM_EFFICIENCY;
        copy_out = (1 + gathers_b) * 2 * (st->ag_dense_bytes + st->ag_expert_bytes) / hbm;
        copy_in = (st->dense + st->expert) * (dp_precision_bytes(l->precision) + grp.rb) / hbm;
    }
    *total_s = M * (f_total + b_gather + rs + copy_out + copy_in) + persist;
    /* Prefetch one unit ahead (FSDP2 implicit forward prefetch and _backward_prefetch one
     * group ahead; DeepSpeed's trace-based prefetch): each gather hides behind the previous
     * unit's compute, the first is exposed; reduce-scatters run under the next unit's
     * backward, the last after it. */
    double ef = opg && prefetch ? gag + (GU - 1) * overlapped(gag, gfw) : f_total;
    double one = gathers_b * gag + rs / GU; /* one unit's backward traffic */
    /*
     * DeepSpeed 0.3 cannot hide its gradient reductions: a weight's gradient is reduced
     * from the hook of the next one (stage3.py reduce_independent_p_g_buckets_and_remove_grads
     * flushes the bucket when the next gradient would overflow it, one weight per bucket
     * at these sizes), the next thing backward does is fetch the following sub-module, and
     * the fetch ends in torch.cuda.synchronize() (_synchronize_communication), which waits
     * for every stream, the reduction stream included; ProcessGroupNCCL runs a group's
     * collectives in order on one NCCL stream, so the gather queues behind the reduction
     * anyway. Each reduction is on the step's path, as DeepSpeed PR #1188 (2021-06) found
     * of the "asynchronous" gathers, each waiting on the synchronize of the previous one.
     */
    const bool sync_fetch = l->framework == DP_FW_DEEPSPEED && l->list_collectives;
    double eb;
    if (opg && prefetch && ovl && !sync_fetch)
        eb = (GU - 1) * overlapped(one, gbw) + one;
    else if (ovl && !sync_fetch)
        eb = b_gather + (U - 1) * overlapped(red, bw) + red;
    else if (opg && prefetch)
        eb = GU * overlapped(gathers_b * gag, gbw) + rs;
    else
        eb = b_gather + rs;
    /* The copy-out holds the compute stream; the copy-in runs on the reduce-scatter
     * stream beside the next block's backward, and costs what overlapped traffic does. */
    *exposed_s = M * (ef + eb + copy_out + OVERLAP_CONTENTION * copy_in) + persist;
}
