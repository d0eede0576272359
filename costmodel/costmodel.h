/*
 * costmodel: pure functions (model, cluster, layout) -> memory and time.
 * No I/O, no printing, no CUDA or MPI; knows nothing of the executor.
 *
 * Memory is per GPU, per pipeline stage; every GPU of a stage holds the
 * same bytes (TP and DP ranks are symmetric), so a stage's numbers are the
 * numbers of each of its GPUs.
 */
#ifndef DPLAN_COSTMODEL_H
#define DPLAN_COSTMODEL_H

#include "core/core.h"

#define DP_MAX_PP 256

/* Options that are not part of a layout: what the memory is compared against. */
struct dp_mem_opts {
    int64_t overhead_bytes; /* runtime overhead per GPU; < 0 = the GPU profile's value */
};
void dp_mem_opts_default(struct dp_mem_opts *o);

/* Bytes of one transformer layer's activations for one micro-batch, by term
 * (Korthikanti et al. 2022, "Reducing Activation Recomputation in Large
 * Transformer Models", Sec. 4, generalized to GQA, MLA, SwiGLU, f != 4h, MoE). */
struct dp_act_layer {
    int64_t attn_bytes;   /* norm input, QKV input, Q, K, V, out-proj input, masks */
    int64_t scores_bytes; /* the a*s^2*b terms (softmax, dropout); 0 with flash */
    int64_t mlp_bytes;    /* norm input, fc1 input, intermediates, mask */
    int64_t eager_bytes;  /* of full_bytes: what eager PyTorch keeps beyond fused kernels (fp32
                             norm copies, SwiGLU's fourth tensor, GQA's repeated K and V) */
    int64_t stored_bytes; /* what is kept per layer under the layout's recompute policy */
    int64_t full_bytes;   /* what the layer holds with no recompute */
    int64_t work_bytes;   /* live while one layer is recomputed and back-propagated */
};
int dp_act_layer(const struct dp_model *m, const struct dp_layout *l, enum dp_layer_kind kind,
                 struct dp_act_layer *out);
/* Both kinds at once: out[DP_LAYER_DENSE], out[DP_LAYER_MOE]. */
void dp_act_layers(const struct dp_model *m, const struct dp_layout *l,
                   struct dp_act_layer out[DP_LAYER_KINDS]);

/*
 * Mixture of experts (costmodel/moe.c). dp_moe_load: the busiest EP rank's routed
 * token copies over the balanced mean (moe_imbalance when dropless and ep > 1,
 * capped by the capacity factor, or exactly it when padded). dp_moe_rows: the token
 * copies one GPU's experts process per micro-batch, load included:
 * load x (seq_len / cp x mbs) x top_k x etp / tp. Both 1 and 0 for dense models.
 */
double dp_moe_load(const struct dp_model *m, const struct dp_layout *l);
double dp_moe_rows(const struct dp_model *m, const struct dp_layout *l);
/*
 * Copies of one dispatched token an EP rank sends, per the dispatcher, over an EP
 * group of n ranks of which g share its node: *in to members on its node (and, for
 * the deduplicating dispatcher, forwarded inside remote nodes), *net across nodes.
 * alltoall: k (g - 1)/n and k (n - g)/n. dedup: one copy per destination GPU and
 * one per destination node, forwarded there over NVLink, for the token's k experts as
 * the layout's routing places them (moe_routing: drawn uniformly from E, or k
 * neighbouring experts).
 */
void dp_moe_dispatch_copies(const struct dp_model *m, const struct dp_layout *l, int n, int g,
                            double *in, double *net);

/*
 * Model-state bytes per GPU for n parameters held by this GPU before DP
 * sharding, sharded over `shard` data-parallel ranks as the ZeRO stage says
 * (Rajbhandari et al. 2020, Sec. 5: 2+2+K bytes per parameter, K = 12 for
 * mixed-precision Adam).
 */
struct dp_states {
    int64_t params_bytes, grads_bytes, optimizer_bytes;
};
void dp_mem_states(int64_t n, int64_t shard, const struct dp_layout *l, struct dp_states *out);
/* Bytes per parameter of weights, gradients and optimizer state (unsharded), as the layout's
 * framework keeps them (costmodel/framework.c; torchtitan: the fp32 shard is the master). */
void dp_mem_bytes_per_param(const struct dp_layout *l, int *param_b, int *grad_b, int *opt_b);
/* Bytes per element of FSDP2's reduce-scatter (MixedPrecisionPolicy reduce_dtype): 4 (fp32,
 * torchtitan's mixed_precision_reduce) unless the layout's gradients are half precision
 * (grad_fp32 false: reduce_dtype bf16, NeMo Automodel's FSDP2Manager default). */
int dp_fsdp_reduce_bytes(const struct dp_layout *l);

/* The framework profile (framework.c): the loss's bytes per logit element at its peak,
 * the runtime buffers, and the caching allocator's slack. */
double dp_fw_loss_bytes(const struct dp_layout *l);
struct dp_fw_runtime {
    int64_t context_bytes;   /* CUDA context: outside the PyTorch allocator */
    int64_t nccl_bytes;      /* NCCL communicators' buffers: outside the allocator */
    int64_t workspace_bytes; /* cuBLAS(Lt) and Transformer Engine workspaces: allocated */
};
void dp_fw_runtime(const struct dp_layout *l, bool moe, const struct dp_gpu *gpu,
                   struct dp_fw_runtime *out);
/* Reserved over allocated for the memory allocated and freed during a step, minus 1. */
#define DP_ALLOC_SLACK 0.18
double dp_fw_alloc_slack(const struct dp_layout *l);

struct dp_mem_stage {
    int stage;
    int layers;
    int kind_layers[DP_LAYER_KINDS]; /* of which dense, MoE */
    bool has_embedding, has_head;
    double inflight; /* micro-batches whose activations are live at the peak */
    int64_t params;  /* parameters held by each GPU of the stage (unsharded) */
    int64_t params_bytes, grads_bytes, optimizer_bytes, activations_bytes, other_bytes;
    int64_t total_bytes;
    int64_t fp8_copy_bytes; /* of params_bytes: FP8 copies of the linear weights */
    /* breakdown of activations_bytes */
    int64_t act_layers_bytes;  /* transformer layers x in-flight micro-batches */
    int64_t act_layer_bytes;   /* of which one layer, one micro-batch (the largest kind's) */
    int64_t act_embed_bytes;   /* embedding dropout masks (first stage) */
    int64_t act_head_bytes;    /* final norm, output-layer input, fp32 logits (last stage) */
    int64_t act_working_bytes; /* the one layer being recomputed during backward */
    int64_t act_loss_bytes;    /* of act_head_bytes: the loss's buffers at its peak */
    /* breakdown of other_bytes */
    int64_t comm_bytes;    /* pipeline send/recv, gathered parameters, reduce buffers */
    int64_t runtime_bytes; /* CUDA context, NCCL buffers, workspaces (or --overhead-gib) */
    int64_t context_bytes, nccl_bytes, workspace_bytes; /* of runtime_bytes (0 with
                                                           --overhead-gib) */
    int64_t slack_bytes; /* the caching allocator's reserve beyond what is allocated */
    /*
     * The three quantities a measurement can mean: allocated (torch
     * max_memory_allocated, what Megatron logs), reserved (torch max_memory_reserved,
     * what torchtitan logs: allocated + slack) and the device total (nvidia-smi:
     * reserved + CUDA context + NCCL), which is total_bytes and what must fit.
     */
    int64_t allocated_bytes, reserved_bytes;
    int64_t kept_bytes; /* of allocated_bytes: allocated once at start (the slack excludes it) */
};

struct dp_mem_report {
    int nstages;
    struct dp_mem_stage stage[DP_MAX_PP];
    int64_t capacity_bytes; /* usable bytes per GPU */
    int64_t peak_bytes;     /* max over stages of total_bytes */
    int peak_stage;
    int64_t min_bytes; /* min over stages (balance) */
    bool fits;
    int64_t microbatches;
};

/*
 * Headroom under which a layout that fits is "tight": its margin is within the memory
 * model's own error (`dplan validate --memory`: held-out mean 2.9%, worst 9.3%; the worst
 * fitted run, an under-prediction, 12.6%), so the run may go out of memory, or thrash
 * PyTorch's caching allocator, whose cudaMalloc retries free the cache with a device-wide
 * synchronize (MosaicML's 30B at seq 8192 on 8 GPUs, predicted at 96% of the usable bytes,
 * ran 20% under the step-time model; docs/accuracy.md). 5% of the usable bytes: where
 * `dplan check` warns.
 */
#define DP_MEM_TIGHT_FRACTION 0.05
/* The most a peak may reach and leave `margin` (a fraction, in [0, 1)) of the capacity
 * free: what the searches count as fitting. */
static inline int64_t dp_mem_within_margin(int64_t capacity_bytes, double margin)
{
    double m = margin > 0 && margin < 1 ? margin : 0;
    return (int64_t)((double)capacity_bytes * (1 - m));
}
/* A peak that fits the capacity but leaves less than margin x capacity free. */
static inline bool dp_mem_tight(int64_t peak_bytes, int64_t capacity_bytes, double margin)
{
    return peak_bytes <= capacity_bytes &&
           (double)(capacity_bytes - peak_bytes) < margin * (double)capacity_bytes;
}

/* Full per-stage report. Fails (DP_EINFEASIBLE) only for layouts that do not
 * validate; an OOM layout is reported with fits = false. */
int dp_mem_estimate(const struct dp_model *m, const struct dp_cluster *cl,
                    const struct dp_layout *l, const struct dp_mem_opts *o,
                    struct dp_mem_report *out, struct dp_err *err);

/*
 * What a layout shares with the same layout at another ZeRO stage: the schedule and
 * the activations (the planner evaluates ZeRO 0 and 1 of every pipeline split).
 * Zero-initialise one, pass it with a layout, then with layouts that differ from it
 * in `zero` only; the functions fill it on first use and read it after.
 */
struct dp_reuse {
    bool have_pipe, have_act;
    double pipe_s;
    int slowest_stage, first_layers;
    double compute_s, recompute_s, tp_comm_s, cp_comm_s, ep_comm_s, pp_comm_s, bubble_s;
    double stage_fwd_s[3], stage_bwd_s[3];
    int nact;
    int act_rank[DP_MAX_PP];
    int64_t act_bytes[DP_MAX_PP];
};

/* Fast path for the planner: the peak and the smallest stage total, computing
 * only the stages that can be extreme (first, second, last). No validation.
 * dp_mem_peak_with takes each kind's layer activations precomputed by dp_act_layers. */
void dp_mem_peak_with(const struct dp_model *m, const struct dp_cluster *cl,
                      const struct dp_layout *l, const struct dp_mem_opts *o,
                      const struct dp_act_layer al[DP_LAYER_KINDS], int64_t *peak_bytes,
                      int64_t *min_bytes, int *peak_stage);
void dp_mem_peak_reuse(const struct dp_model *m, const struct dp_cluster *cl,
                       const struct dp_layout *l, const struct dp_mem_opts *o,
                       const struct dp_act_layer al[DP_LAYER_KINDS], struct dp_reuse *ru,
                       int64_t *peak_bytes, int64_t *min_bytes, int *peak_stage);
void dp_mem_peak(const struct dp_model *m, const struct dp_cluster *cl, const struct dp_layout *l,
                 const struct dp_mem_opts *o, int64_t *peak_bytes, int64_t *min_bytes,
                 int *peak_stage);

/* One stage (used by both of the above). */
void dp_mem_stage(const struct dp_model *m, const struct dp_cluster *cl, const struct dp_layout *l,
                  const struct dp_mem_opts *o, int stage, struct dp_mem_stage *out);
/* Parameters held by each GPU of a stage (unsharded), as dp_mem_stage counts them:
 * the dense part (sharded over dp*cp) and the routed experts (over the expert
 * data-parallel group, dp_layout_edp). */
void dp_mem_stage_params(const struct dp_model *m, const struct dp_layout *l, int stage,
                         int64_t *dense, int64_t *expert);
/* Of those, the ends' per GPU: the vocabulary-parallel embedding (+ learned positions) on
 * the first stage; the final norm and the LM head on the loss's (its own weight when untied;
 * tied with pp > 1 the last stage's copy, kept in sync by an all-reduce, Megatron
 * _allreduce_word_embedding_grads; DualPipeV's V holds both ends on rank 0, one weight). */
void dp_mem_end_params(const struct dp_model *m, const struct dp_layout *l, int64_t *emb,
                       int64_t *head);
/* Of those, the multi-token-prediction module's on the loss's stage (layout mtp_layers),
 * with the copy of the input embedding it keeps; 0 without MTP. */
void dp_mem_mtp_params(const struct dp_model *m, const struct dp_layout *l, int64_t *dense,
                       int64_t *expert);

/* One layer's parameters per GPU of a kind (unsharded): the dense part (attention, norms,
 * dense MLP, router, shared experts) and the routed experts. */
void dp_mem_layer_params(const struct dp_model *m, const struct dp_layout *l,
                         enum dp_layer_kind kind, int64_t *dense, int64_t *expert);

/*
 * The terms of stage r's memory as they come and go during a step, for an event
 * simulation (sim/) to add up over time: what is held all step (weights, gradients,
 * optimizer states, buffers, runtime), one layer's kept activations per micro-batch by
 * kind (as dp_mem_stage counts them), the embedding's mask per micro-batch of the first
 * chunk, the output layer's activations while a micro-batch is in it, the working set
 * of the layer being recomputed, and ZeRO-3's gathered parameters (counted by
 * dp_mem_stage as two layers at all times). static_bytes + the schedule's live
 * activations at their peak + head_bytes + working_bytes + gathered_bytes is
 * model_peak_bytes, dp_mem_stage's total.
 */
struct dp_mem_terms {
    int64_t static_bytes;
    int64_t layer_bytes[DP_LAYER_KINDS];
    int64_t emb_bytes, head_bytes, working_bytes, gathered_bytes;
    int64_t model_peak_bytes;
};
void dp_mem_terms(const struct dp_model *m, const struct dp_cluster *cl, const struct dp_layout *l,
                  const struct dp_mem_opts *o, int r, struct dp_mem_terms *out);

/*
 * FLOPs of one training step for the whole model (all GPUs together), counting
 * a multiply-add as 2 FLOPs and attention scores over the full s x s matrix
 * (no causal halving), as Narayanan et al. 2021 (Sec. 5.1, Appendix) do:
 * their 96 B s l h^2 (1 + s/6h + V/16lh) is hardware FLOPs with full
 * recompute. model_flops excludes recomputation (the MFU numerator, PaLM
 * Appendix B); hardware_flops includes it (HFU).
 */
struct dp_flops {
    double layer_fwd; /* one layer, one micro-batch, forward (MoE models: a MoE layer) */
    double kind_fwd[DP_LAYER_KINDS]; /* the same for a dense and a MoE layer */
    double scores_fwd;               /* its attention-score part (QK^T and attention x V) */
    double head_fwd;                 /* output layer (logits), one micro-batch, forward */
    /* multi-token prediction beyond its layers: eh_proj and the output layer again, all
     * depths, one micro-batch, forward */
    double mtp_fwd;
    double model_flops;    /* per step: 3 x forward (forward + 2x backward) */
    double hardware_flops; /* per step, plus the recomputed forwards */
    double recompute_flops;
};
void dp_flops_step(const struct dp_model *m, const struct dp_layout *l, struct dp_flops *out);
/* Whether full recompute would stop before a dense layer's fc2 GEMM: PyTorch's non-reentrant
 * checkpoint (torchtitan, Composer/llm-foundry) with bf16/fp16 linears and no dropout
 * (time.c's tail_f has the why and the sources). */
bool dp_recompute_early_stop(const struct dp_model *m, const struct dp_layout *l);

/* ------------------------------------------------------------------ placement */

/*
 * Which global ranks form each parallel group: Megatron-Core's numbering
 * (megatron/core/parallel_state.py, RankGenerator with the default order
 * "tp-cp-ep-dp-pp"). Consecutive ranks fill a node. The dense layers number
 * rank = tp_i + tp (cp_i + cp (dp_i + dp pp_i)); the expert layers regroup
 * the same ranks (the expert RankGenerator has tp = etp, cp = 1 and
 * dp = edp = tp cp dp / (etp ep)): rank = etp_i + etp (ep_i + ep (edp_i +
 * edp pp_i)). With etp = tp (the default) EP is carved out of the dp x cp
 * ranks of a stage, ep ranks tp apart.
 */
enum dp_place_kind {
    DP_PLACE_TP,   /* tp consecutive ranks */
    DP_PLACE_CP,   /* the context-parallel ring: cp ranks, stride tp */
    DP_PLACE_DP,   /* dp ranks, stride tp * cp */
    DP_PLACE_DPCP, /* dense-gradient reduction: dp * cp ranks, stride tp */
    DP_PLACE_EP,   /* expert parallel (token all-to-all): ep ranks, stride etp */
    DP_PLACE_EDP,  /* expert-gradient reduction: edp ranks, stride etp * ep */
    DP_PLACE_PP,   /* the pipeline: pp ranks, stride tp * cp * dp */
    DP_PLACE_EMB,  /* tied embeddings: the first and last stage, (pp - 1) * tp * cp * dp apart */
    DP_PLACE_ETP,  /* expert tensor parallel: etp consecutive ranks */
    DP_PLACE_KINDS
};
/* Members per group and the rank distance between consecutive members. */
void dp_place_shape(const struct dp_layout *l, enum dp_place_kind k, int *n, long *stride);
/*
 * The members of the group of kind k that holds `rank`, in group order (ring
 * and pipeline order), into out[0..cap). Returns the count; 0 for a middle
 * pipeline stage's rank and DP_PLACE_EMB; -1 when rank is outside
 * [0, tp * cp * dp * pp) or the group has more than cap members.
 */
int dp_place_ranks(const struct dp_layout *l, enum dp_place_kind k, int rank, int *out, int cap);

/* ------------------------------------------------------------------ communication */

enum dp_coll_kind { DP_ALLREDUCE, DP_REDUCE_SCATTER, DP_ALLGATHER, DP_ALLTOALL, DP_P2P };

/*
 * The path a communication group uses, per GPU, found from where its members
 * really sit (the numbering above, consecutive ranks filling a node): of all
 * groups of one kind, the slowest. A collective over several nodes runs at k
 * times each GPU's NIC share (k: the fewest members on one of its nodes). A
 * pipeline or a context-parallel ring is paced by its slowest hop: NVLink (or
 * the slower link class a measured topology gives for the block a hop
 * spans) inside a node, a NIC across nodes, shared by the GPUs of the node
 * that send across at the same step.
 */
struct dp_path {
    double busbw_gbps;    /* achievable bus bandwidth per GPU (efficiency applied), GB/s */
    double latency_us;    /* alpha per algorithm step (NCCL's LL128 protocol) */
    double simple_us;     /* alpha per step with NCCL's Simple protocol (0: latency_us) */
    bool inter_node;      /* the slowest group touches more than one node */
    int members_per_node; /* collectives: the fewest members on one node of the slowest group */
    int nodes;            /* nodes the slowest group touches */
    int hops, hops_inter; /* pipelines and rings: hops of the slowest group, those across nodes */
    double in_gbps;  /* all-to-alls: per-GPU rate to members on its node (efficiency applied) */
    double net_gbps; /* all-to-alls: per-GPU rate to members elsewhere (its NIC share) */
    char link[64];   /* the slowest link crossed (described paths only) */
    char desc[128];  /* "nvlink4, inside a node", "ib-ndr-400 across nodes: 3 of 7 hops ..." */
};
/* A collective over groups of n ranks `stride` apart, tiling the cluster (blocks of
 * n * stride consecutive ranks, `stride` groups interleaved in each). */
void dp_group_path(const struct dp_cluster *cl, int n, long stride, struct dp_path *out);
/* The same without the description (hot paths). */
void dp_group_path_fast(const struct dp_cluster *cl, int n, long stride, struct dp_path *out);
/* Point-to-point along the same groups: a chain (pipeline) or a ring (context parallel). */
void dp_p2p_path(const struct dp_cluster *cl, int n, long stride, bool ring, struct dp_path *out);
/* An all-to-all over the same groups (MoE token dispatch): of a GPU's traffic, the share
 * for members on its node goes over the intra-node link, the rest through its NIC share;
 * busbw_gbps is the resulting bus bandwidth for dp_coll_time_s(DP_ALLTOALL, ...). */
void dp_alltoall_path(const struct dp_cluster *cl, int n, long stride, struct dp_path *out);
/* The path of a layout's group kind: collectives for TP, DP, DPCP, ETP and EDP, an
 * all-to-all for EP, a ring for CP, a chain for PP (a ring with interleaving: the last
 * stage feeds the first stage's next chunk), a pair for EMB. */
void dp_place_path(const struct dp_cluster *cl, const struct dp_layout *l, enum dp_place_kind k,
                   struct dp_path *out);
/* The same without the description and link name (hot paths). */
void dp_place_path_fast(const struct dp_cluster *cl, const struct dp_layout *l,
                        enum dp_place_kind k, struct dp_path *out);

/*
 * Alpha-beta time of one collective on n ranks, as nccl-tests defines the
 * sizes: `bytes` is the buffer for all-reduce, the whole gathered/scattered
 * buffer (count x n) for all-gather and reduce-scatter, the message for p2p.
 * Bus-bandwidth factors (nccl-tests doc/PERFORMANCE.md): all-reduce 2(n-1)/n,
 * all-gather, reduce-scatter and all-to-all (n-1)/n, p2p 1. A ring takes n-1
 * steps (all-reduce 2(n-1)), each paying the hop latency of the group's slowest
 * link, with the protocol NCCL would pick (tuning.cc): LL128 (low latency, 92%
 * of the bandwidth) or Simple (full bandwidth, higher per-step latency), so small
 * per-rank shards are latency-bound; all-reduce also tries the tree (2 log2 n
 * steps, lower bandwidth).
 */
double dp_coll_time_s(enum dp_coll_kind k, double bytes, int n, const struct dp_path *p);

/*
 * Data-parallel communication of one step (shard.c) for the stage that holds the
 * most parameters: dense and expert parameters per GPU before sharding, its layers,
 * whether it holds the embedding and the output layer, its per-micro-batch forward and
 * backward compute (the windows communication can hide behind), and the bytes one full
 * gather of its parameters moves. Fills the time before overlap and the exposed time.
 */
struct dp_shard_stage {
    double dense, expert;
    int layers;
    bool first, last;
    double fwd_s, bwd_s;
    double ag_dense_bytes, ag_expert_bytes;
};
void dp_shard_comm(const struct dp_model *m, const struct dp_cluster *cl, const struct dp_layout *l,
                   const struct dp_shard_stage *st, const struct dp_path *dpcp,
                   const struct dp_path *edp, double *total_s, double *exposed_s);
/* DeepSpeed ZeRO-3 with full recompute: the share of a layer's sub-module gathers done
 * again for its backward (those beyond stage3_max_reuse_distance of their recomputed
 * forward; shard.c). 0 for small layers. */
double dp_ds_regather_share(const struct dp_model *m, const struct dp_layout *l);

/*
 * The data-parallel groups of a layout (shard.c): dp x cp and the expert data-parallel
 * group, and under HSDP the shard groups (innermost sg ranks) and the replica groups;
 * the reduce dtype's bytes of the framework. One unit's collectives at those groups:
 * ZeRO-0 all-reduces the gradients over dp x cp; otherwise the unit's parameters are
 * all-gathered in the shard group and its gradients reduce-scattered there, then (HSDP)
 * the shard all-reduced across the replicas. dense, expert: parameters per GPU before
 * sharding; ag_*_bytes: what one full gather of them moves.
 */
struct dp_shard_groups {
    struct dp_path dpcp, edp, ps, pr, pe, per;
    int ndp, sg, R, edpn, esg, eR, gb;
    double rb;
};
void dp_shard_groups(const struct dp_cluster *cl, const struct dp_layout *l,
                     const struct dp_path *dpcp, const struct dp_path *edp,
                     struct dp_shard_groups *g);
void dp_shard_unit(const struct dp_layout *l, const struct dp_shard_groups *g, double dense,
                   double expert, double ag_dense_bytes, double ag_expert_bytes, double *gather_s,
                   double *reduce_s);

/* ------------------------------------------------------------------ step time */

/*
 * Predicted time of one training step (one optimizer update of gbs
 * sequences). The breakdown terms are on the critical path and sum to
 * step_time_s. Per-micro-batch terms are those of the slowest pipeline stage.
 */
struct dp_step_cost {
    double step_time_s;
    double compute_s;   /* forward + backward GEMMs, attention, element-wise */
    double recompute_s; /* recomputed forward work (and its TP communication) */
    double tp_comm_s;   /* tensor/sequence-parallel collectives, exposed */
    double cp_comm_s;   /* context-parallel K/V exchange not hidden by attention */
    double ep_comm_s;   /* expert-parallel all-to-all */
    double pp_comm_s;   /* pipeline point-to-point on the critical path */
    double bubble_s;    /* pipeline fill/drain and stage imbalance */
    double dp_comm_s;   /* data-parallel gradient/parameter communication, exposed */
    double optimizer_s; /* optimizer step (memory-bound) */
    double other_s;     /* tied-embedding gradient sync between first and last stage */
    double tokens_per_s;
    double model_tflops_per_gpu;    /* MFU numerator: no recompute */
    double hardware_tflops_per_gpu; /* HFU numerator: with recompute */
    double mfu, hfu;                /* against the GPU's dense peak of the layout's GEMM
                                       compute type (the FP8 peak for FP8 runs) */
    double peak_tflops;             /* that peak, per GPU */
    int slowest_stage;
    double stage_fwd_s[3], stage_bwd_s[3]; /* per micro-batch: first, middle, last stage */
    double dp_comm_total_s;                /* before overlap */
    /* The groups' paths (dp: the dp x cp gradient group; edp: the expert-gradient
     * group). dp_time_step and dp_time_describe_paths fill all seven with
     * descriptions; the fast paths fill tp, dp and pp only, without them. */
    struct dp_path tp_path, cp_path, dp_path, pp_path, ep_path, etp_path, edp_path;
};

/*
 * The per-layer costs of one micro-batch, which depend only on tp, sp, cp, ep,
 * etp, mbs, seq_len, precision, flash attention and the MoE load (capacity,
 * imbalance): the planner computes them once per layer kind and assembles many
 * layouts from them with dp_time_step_with.
 */
struct dp_layer_time {
    double gemm_f;     /* forward GEMMs (backward = 2x: input and weight gradients) */
    double attn_f;     /* attention core forward */
    double attn_b;     /* attention core backward */
    double ew_f;       /* element-wise forward (backward = 2x) */
    double attn_ew_f;  /* the element-wise part of attention (selective recompute redoes it) */
    double tp_f, tp_b; /* TP collectives (exposed: with tp_overlap what the GEMMs leave) */
    double cp_f, cp_b; /* exposed context-parallel exchange */
    double tp_raw_f, tp_raw_b; /* the TP collectives' own duration, before any overlap */
    double cp_raw_f, cp_raw_b; /* the context-parallel ring's exchanges, before overlap */
    double ep_f, ep_b;         /* expert dispatch/combine: all-to-all, expert-TP gather/scatter */
    double ep_pair; /* per pass, inside an overlapped forward-backward pair (ep_overlapped) */
    double cast_f;  /* FP8 quantization of the linears' inputs, forward */
    double cast_b;  /* FP8 quantization of the output gradients, backward */
    double cast_w;  /* FP8 casts of the layer's weights, once per step */
    /* Forward work the selective policies redo in backward: torchtitan's per-op SAC
     * (op_f, and its TP collectives op_tp_f) and Megatron's recompute_modules. */
    double op_f, op_tp_f;
    double norm_f, mlp_f, moe_f, moe_act_f, shared_f, mla_up_f;
    /* Forward work after the last tensor autograd saves (a dense layer's fc2 GEMM and the
     * residual add after it; a MoE layer's DeepEP combine and the add), which PyTorch's
     * non-reentrant checkpoint does not redo: compute in tail_f, the all-to-all in
     * tail_ep_f. */
    double tail_f, tail_ep_f;
    /* The ends, which depend on the same: the embedding (first stage) and the final norm,
     * output layer and loss (last stage), compute and TP collectives (the same in every
     * kind's entry). */
    double emb_f, emb_b, emb_tp_f;
    double head_f, head_b, head_tp_f, head_tp_b;
    /* One multi-token-prediction depth (layout mtp_layers) beyond its transformer layer:
     * the next tokens' embedding, two norms, the 2h -> h projection, the output layer and
     * loss again (time_pipe.c adds the layer, of the last layer's kind). */
    double mtp_f, mtp_b;
};
/* out[DP_LAYER_DENSE] and out[DP_LAYER_MOE]: a dense and a MoE layer's costs. */
void dp_time_layer(const struct dp_model *m, const struct dp_cluster *cl, const struct dp_layout *l,
                   struct dp_layer_time out[DP_LAYER_KINDS]);
void dp_time_step_with(const struct dp_model *m, const struct dp_cluster *cl,
                       const struct dp_layout *l, const struct dp_layer_time lt[DP_LAYER_KINDS],
                       struct dp_step_cost *out);
void dp_time_step_reuse(const struct dp_model *m, const struct dp_cluster *cl,
                        const struct dp_layout *l, const struct dp_layer_time lt[DP_LAYER_KINDS],
                        struct dp_reuse *ru, struct dp_step_cost *out);
/* Fill the human-readable desc of each path in *out (the fast paths leave them empty). */
void dp_time_describe_paths(const struct dp_cluster *cl, const struct dp_layout *l,
                            struct dp_step_cost *out);

/* The model's own invariant: a finite, positive step time made of terms none of which is
 * negative. A result that breaks it is a bug of the model (dp_time_step reports it; the
 * planner skips and counts such layouts instead of ranking them). */
bool dp_step_cost_sane(const struct dp_step_cost *c);

/* Validates the layout (DP_EINFEASIBLE with the reason) and fills *out. */
int dp_time_step(const struct dp_model *m, const struct dp_cluster *cl, const struct dp_layout *l,
                 struct dp_step_cost *out, struct dp_err *err);
/* The same without validation, for the planner's inner loop. */
void dp_time_step_fast(const struct dp_model *m, const struct dp_cluster *cl,
                       const struct dp_layout *l, struct dp_step_cost *out);

/* ------------------------------------------------------------------ per-operation costs */

/*
 * The step-time model's terms one operation at a time (costmodel/ops.c), for the
 * event simulation of a step (sim/): the same numbers dp_time_step adds up, split
 * where a simulator schedules things apart. Per micro-batch on one GPU; s.
 *
 * A layer is two blocks run in order, attention (norm, QKV, attention core,
 * out-projection, their TP collectives and the CP ring) then MLP (norm, the MLP or the
 * router and experts with their all-to-alls, TP). Each block's compute runs on the
 * compute stream; each communication has its own duration (raw) and the time the
 * compute stream waits for it (exposed): the same when it does not overlap, what the
 * pipelined GEMM or the attention leaves (contention included) with tp_overlap and for
 * the CP ring. Backward runs the blocks in reverse; a recomputing layer first reruns
 * re_s of compute (full: its forward with its TP collectives and all-to-alls;
 * selective: the attention core), times the stage's recompute share.
 */
enum dp_block { DP_BLOCK_ATTN, DP_BLOCK_MLP, DP_BLOCKS };
struct dp_block_cost {
    double fwd_s, bwd_s, re_s;             /* compute */
    double tp_f, tp_b, tp_re;              /* TP collectives, exposed */
    double tp_raw_f, tp_raw_b;             /* ... and their own duration */
    double cp_f, cp_b, cp_raw_f, cp_raw_b; /* the CP ring (attention block) */
    double ep_f, ep_b, ep_re;              /* all-to-alls, expert TP (MoE MLP block) */
    double ep_pair; /* one pass's all-to-alls inside DualPipeV's overlapped pair, exposed */
    double wgrad_s; /* the weight-gradient GEMMs within bwd_s (as many as the forward's) */
};
struct dp_layer_cost {
    struct dp_block_cost blk[DP_BLOCKS];
    double cast_w_s;                     /* FP8 casts of its weights, once per step */
    int64_t dense_params, expert_params; /* per GPU, before data-parallel sharding */
};
/* The embedding (in the first model chunk) and the final norm, output layer and loss (in
 * the last): compute and exposed TP collectives, and their parameters per GPU. */
struct dp_end_cost {
    double fwd_s, bwd_s, tp_f, tp_b;
    int64_t params;
};
struct dp_step_ops {
    struct dp_layer_cost layer[DP_LAYER_KINDS];
    struct dp_end_cost emb, head;
    double p2p_s;      /* one activation or gradient to the neighbouring stage */
    double emb_sync_s; /* tied embeddings with pp > 1: the first and last stage's all-reduce */
    /* Multi-token prediction (layout mtp_layers) after the output layer on the loss's chunk:
     * per depth one layer of kind mtp_kind, then mtp_f / mtp_b, the rest of the module with
     * its TP collectives (time.c ends: projection, norms, the output layer and loss again) */
    int mtp_layers, mtp_kind;
    double mtp_f, mtp_b;
    double recompute_share[DP_MAX_PP]; /* of each stage's layers (recompute_layers) */
    double optimizer_s[DP_MAX_PP];     /* each stage's optimizer step over its shard */
    double contention;                 /* overlapped communication slows compute by this
                                          fraction of its duration (OVERLAP_CONTENTION) */
};
void dp_time_ops(const struct dp_model *m, const struct dp_cluster *cl, const struct dp_layout *l,
                 struct dp_step_ops *out);

/*
 * The data-parallel collectives of stage r at the granularity its framework issues them
 * (ops.c): units of consecutive layers of one model chunk, in forward order, each
 * with its gradient reduction (all-reduce for ZeRO-0, reduce-scatter otherwise) and
 * parameter all-gather times. Megatron's DDP (ZeRO-0/1, and ZeRO-2/3 with pipeline
 * parallelism, once per step): buckets of max(40M, 1M x dp) parameters in the first
 * model chunk of the first stage, one bucket per chunk elsewhere and without
 * --overlap-grad-reduce; ZeRO-2/3 without pipelining (FSDP, DeepSpeed): one unit per
 * layer, the embedding and the output layer, every micro-batch. A framework with
 * other granularity (FSDP2 blocks, DeepSpeed sub-modules and buckets) fills the same
 * units.
 *
 * Fills *s and up to cap units; returns the number of units (call again with more room
 * when it exceeds cap).
 */
struct dp_dp_unit {
    int chunk, first, count; /* model chunk of the stage; its layers, chunk-local */
    bool emb, head;          /* holds the embedding / the output layer */
    double reduce_s, gather_s;
    /* FSDP2's copies (shard.c): the copy-out of one gather on the compute stream, and
     * what the reduce-scatter copy-in costs beside the backward (0.15 of it) */
    double copy_out_s, copy_in_s;
    int64_t params;       /* per GPU, before sharding */
    int64_t gather_bytes; /* held while gathered (ZeRO-3) */
};
struct dp_dp_sched {
    bool all_reduce;      /* ZeRO-0: reduce by all-reduce, nothing gathered */
    bool reduce_overlap;  /* reduce each unit when its gradients are ready (dp_overlap);
                             else all after the stage's last backward */
    bool reduce_each_mb;  /* every micro-batch (ZeRO-2/3 without pp); else the last one */
    bool gather_each_mb;  /* ZeRO-3 without pp: before each forward and each backward */
    bool gather_at_start; /* once per step, overlapping the first forwards
                             (overlap_param_gather); else after the optimizer */
    int prefetch;         /* ZeRO-3: units gathered ahead of the one computing */
};
int dp_time_dp_units(const struct dp_model *m, const struct dp_cluster *cl,
                     const struct dp_layout *l, int r, struct dp_dp_sched *s,
                     struct dp_dp_unit *out, int cap);

/* ------------------------------------------------------------------ pipeline schedule */

/*
 * The pipeline schedule (costmodel/pipeline.c), Megatron-LM's 1F1B (v = 1) or
 * interleaved 1F1B order on p ranks, v model chunks each, M micro-batches.
 * F[s], B[s]: forward and backward time of one micro-batch in virtual stage
 * s = c * p + r (chunk c of rank r), p * v entries.
 *
 * dp_pipe_time_s: time of the forward-backward passes of one step, the longest of
 * the schedule's chains of dependent passes (derivation in pipeline.c); for equal
 * chunks M D + (p - 1)(F + B) of one chunk, Narayanan et al. 2021, Sec. 2.2.
 * *crit (may be NULL) gets the rank whose chain it is.
 *
 * dp_pipe_peak_live: the largest sum of w[c] x (micro-batches whose chunk c is
 * between its forward and its backward) on rank r over the step, w per micro-batch
 * of each chunk of rank r (v entries); live[c] (unless NULL) gets the counts at that peak.
 */
double dp_pipe_time_s(int p, int v, int64_t M, const double *F, const double *B, int *crit);
int64_t dp_pipe_peak_live(int p, int v, int64_t M, int r, const int64_t *w, int64_t *live);
/*
 * DualPipeV (costmodel/pipeline_dualpipev.c): P ranks, 2P stages in a V (rank r: stages r and
 * 2P - 1 - r), M >= 2P micro-batches. F, B: each stage's forward and full backward; Fp, Bp:
 * the same inside an overlapped forward-backward pair; Wt: the weight-gradient part of B.
 * Returns the step's pipeline time (-1 if M < 2P). The peak-live twin counts rank r's
 * micro-batches in flight per phase (w: bytes per micro-batch of phase 0 and 1).
 */
double dp_pipe_dualpipev_time_s(int P, int64_t M, const double *F, const double *B,
                                const double *Fp, const double *Bp, const double *Wt);
int64_t dp_pipe_dualpipev_peak_live(int P, int64_t M, int r, const int64_t *w, int64_t *live);

/* ------------------------------------------------------------------ failures and goodput */

/*
 * What a checkpoint holds and who writes it (goodput.c). Both formats save
 * the weights and the optimizer states, never the gradients: per parameter
 * param_b + opt_b bytes of dp_mem_bytes_per_param (bf16 + Adam: 2 for the
 * weights + 12 for the fp32 main copy, exp_avg and exp_avg_sq = 14).
 */
enum dp_ckpt_writer {
    /*
     * Megatron-Core's distributed checkpoint (--ckpt-format torch_dist): the
     * model's weights and the distributed optimizer's "fp32_param", "exp_avg",
     * "exp_avg_sq" (megatron/core/optimizer/distrib_optimizer.py), each tensor
     * once; with fully parallel save, the default (--no-ckpt-fully-parallel-save
     * turns it off), the saving of replicated tensors is spread "as uniformly as
     * possible" over the ranks holding them
     * (megatron/core/dist_checkpointing/strategies/fully_parallel.py).
     */
    DP_CKPT_BALANCED = 0,
    /*
     * dplan run's checkpoints (executor/ckpt.c, README "Checkpoints"): the
     * ranks of data-parallel replica 0 write their weight slices and, without
     * ZeRO, Adam's m and v; with ZeRO-1 every rank writes its optimizer shard.
     * The busiest rank writes what the memory model says it holds.
     */
    DP_CKPT_REPLICA0 = 1,
};

struct dp_ckpt_size {
    int64_t total_bytes; /* every tensor once, all ranks together */
    int64_t rank_bytes;  /* the most one rank writes */
    int64_t node_bytes;  /* the most one node writes: rank_bytes x ranks per node (a bound) */
    int64_t held_bytes;  /* weights + optimizer states held by the fullest rank (dp_mem_states) */
    int bytes_per_param; /* weights + optimizer states per parameter (unsharded) */
};
/*
 * Checkpoint size of `l` for `m`, nodes of `gpus_per_node` GPUs (>= 1).
 * Replicated norms are counted once per TP rank (a few KiB per layer).
 * DP_EINFEASIBLE when the layout does not validate for the model.
 */
int dp_ckpt_size(const struct dp_model *m, const struct dp_layout *l, int gpus_per_node,
                 enum dp_ckpt_writer w, struct dp_ckpt_size *out, struct dp_err *err);
/*
 * Seconds one save blocks training: each node writes node_bytes at
 * node_write_gbps, and all of them together total_bytes at most at
 * storage_write_gbps (GB/s = 1e9 bytes/s; both > 0).
 */
double dp_ckpt_write_s(const struct dp_ckpt_size *s, double node_write_gbps,
                       double storage_write_gbps);

/*
 * Defaults and their sources (the CLI prints them in --help).
 *
 * Failure rate: Llama 3 405B pre-training, a 54-day snapshot on up to 16K H100
 * (16,384 in its Table 4): 466 job interruptions, 47 planned, 419 unexpected
 * (Dubey et al. 2024, "The Llama 3 Herd of Models", Sec. 3.3.4). Planned
 * ones are announced (a checkpoint first, no work lost), so the rate counts
 * the 419: 419 / (16384 x 54 x 24 GPU-hours) = 1.973e-5 per GPU-hour, a job
 * MTBF of 3.09 h at 16,384 GPUs. If fewer GPUs ran part of the snapshot the
 * true rate is higher. Cross-checks, per GPU-hour: OPT-175B, 992 A100, "at
 * least 35 manual restarts" and an estimated "70+ automatic restarts" over 2
 * months (Zhang et al. 2022, Sec. 2.5): ~105 / (992 x 60 x 24) = 7.4e-5;
 * BLOOM-176B, "about 400 GPUs", "1-2 GPU failures a week" (Hugging Face blog
 * "The Technology Behind BLOOM Training", 2022; 384 A100): 1.5 / (384 x 168)
 * = 2.3e-5; Meta's RSC-1 A100 cluster, 6.50 failures per 1000 node-days of 8
 * GPUs (Kokolis et al. 2024, "Revisiting Reliability in Large-Scale Machine
 * Learning Research Clusters", arXiv:2410.21680, as two secondary sources quote
 * it; the paper was not read here): 6.5e-3 / (8 x 24) = 3.4e-5.
 */
#define DP_FAILURES_PER_GPU_HOUR (419.0 / (16384.0 * 54.0 * 24.0))
/*
 * Storage: Llama 3's Tectonic fabric sustains 2 TB/s (peak 7 TB/s) for a job
 * of up to 16K GPUs, 2,048 nodes of 8 (Dubey et al. 2024, Sec. 3.3.1,
 * "Storage"): 2000 GB/s in all, 2000 / 2048 = 0.977 GB/s per node.
 */
#define DP_STORAGE_WRITE_GBPS 2000.0
#define DP_NODE_WRITE_GBPS    (2000.0 / 2048.0)
/*
 * Restart, from a failure to training again (detection, rescheduling,
 * initialisation, checkpoint load): 10 minutes, within the 5-20 minutes
 * Kokolis et al. 2024 give for the restart overhead u0 on Meta's RSC clusters
 * ("u0 ~5-20 mins", as quoted by a secondary source); MegaScale (Jiang et al.,
 * NSDI '24, as quoted) puts Megatron-LM's initialisation on 2,048 GPUs at about
 * 1047 s before its fixes, under 5 s after. Daly's own examples use R = 10 min.
 */
#define DP_RESTART_S 600.0

/*
 * The failure model of Daly 2006 ("A higher order estimate of the optimum
 * checkpoint interval for restart dumps", Future Generation Computer Systems
 * 22(3), 303-312): failures arrive as a Poisson process, during compute,
 * checkpoint writes and restarts alike; a failure loses the work since the
 * last completed checkpoint and costs a restart.
 */
struct dp_failure_model {
    double rate_per_s;   /* job failures per second (1 / MTBF); 0 = none */
    double ckpt_write_s; /* delta: training blocked per checkpoint */
    double restart_s;    /* R */
};
/* Job failures per second for `gpus` GPUs at `per_gpu_hour` failures per GPU-hour. */
double dp_failure_rate_per_s(double per_gpu_hour, int gpus);
/*
 * Goodput, the fraction of wall time that is useful training, when a
 * checkpoint follows every tau_s seconds of compute (> 0): Daly's complete
 * model, tau / (M e^(R/M) (e^((tau + delta)/M) - 1)), M = 1 / rate;
 * tau / (tau + delta) without failures. In [0, 1].
 */
double dp_goodput(const struct dp_failure_model *f, double tau_s);
/* Young 1974 ("A first order approximation to the optimum checkpoint
 * interval", CACM 17(9), 530-531): sqrt(2 delta M). INFINITY without failures. */
double dp_ckpt_interval_young(const struct dp_failure_model *f);
/* Daly 2006, Eq. for tau_opt: sqrt(2 delta M) (1 + sqrt(delta / 2M) / 3 + (delta / 2M) / 9)
 * - delta for delta < 2M, else M. INFINITY without failures. */
double dp_ckpt_interval_daly(const struct dp_failure_model *f);

/* The checkpoint interval of a run with steps of step_time_s seconds. */
struct dp_goodput_plan {
    double young_s;      /* Young's interval */
    double daly_s;       /* Daly's interval (compute between checkpoints) */
    int64_t every_steps; /* the whole number of steps near daly_s with the higher goodput
                            (>= 1); 0 without failures: no checkpoint needed */
    double interval_s;   /* every_steps x step_time_s (0 when every_steps is 0) */
    double goodput;      /* at interval_s */
    double failures_per_day;
};
/* DP_EINVAL (err names the field) when step_time_s <= 0 or f has negative or
 * non-finite fields. */
int dp_goodput_plan(const struct dp_failure_model *f, double step_time_s,
                    struct dp_goodput_plan *out, struct dp_err *err);

/* A plan's --ckpt-every against the best interval (for `dplan check`). */
struct dp_ckpt_every_check {
    double interval_s; /* every_steps x step_time_s */
    double best_s;     /* the dp_goodput_plan interval */
    double ratio;      /* interval_s / best_s (0 without failures: best_s is INFINITY) */
    double goodput, best_goodput;
    bool far; /* ratio outside [1/2, 2]: at least 25% more time lost than
                 at the best interval (Young's first-order waste
                 delta/tau + tau/2M grows by (k + 1/k)/2 at k x the best) */
};
int dp_ckpt_every_check(const struct dp_failure_model *f, double step_time_s, int64_t every_steps,
                        struct dp_ckpt_every_check *out, struct dp_err *err);

/* Achievable fraction of HBM bandwidth for streaming kernels (element-wise ops,
 * optimizer): see costmodel/time.c. */
#define DP_MEM_EFFICIENCY 0.80

#endif
