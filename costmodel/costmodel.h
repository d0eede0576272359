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
 * Transformer Models", Sec. 4, generalized to GQA, SwiGLU, f != 4h, MoE). */
struct dp_act_layer {
    int64_t attn_bytes;   /* norm input, QKV input, Q, K, V, out-proj input, masks */
    int64_t scores_bytes; /* the a*s^2*b terms (softmax, dropout); 0 with flash */
    int64_t mlp_bytes;    /* norm input, fc1 input, intermediates, mask */
    int64_t stored_bytes; /* what is kept per layer under the layout's recompute mode */
    int64_t full_bytes;   /* what the layer holds with no recompute (recompute working set) */
};
int dp_act_layer(const struct dp_model *m, const struct dp_layout *l, struct dp_act_layer *out);

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
/* Bytes per parameter of weights, gradients and optimizer state (unsharded). */
void dp_mem_bytes_per_param(const struct dp_layout *l, int *param_b, int *grad_b, int *opt_b);

struct dp_mem_stage {
    int stage;
    int layers;
    bool has_embedding, has_head;
    double inflight; /* micro-batches whose activations are live at the peak */
    int64_t params;  /* parameters held by each GPU of the stage (unsharded) */
    int64_t params_bytes, grads_bytes, optimizer_bytes, activations_bytes, other_bytes;
    int64_t total_bytes;
    /* breakdown of activations_bytes */
    int64_t act_layers_bytes;  /* transformer layers x in-flight micro-batches */
    int64_t act_embed_bytes;   /* embedding dropout masks (first stage) */
    int64_t act_head_bytes;    /* final norm, output-layer input, fp32 logits (last stage) */
    int64_t act_working_bytes; /* the one layer being recomputed during backward */
    /* breakdown of other_bytes */
    int64_t comm_bytes;    /* pipeline send/recv, ZeRO-3 gathered params, buckets */
    int64_t runtime_bytes; /* CUDA context, libraries, allocator reserve */
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

/* Full per-stage report. Fails (DP_EINFEASIBLE) only for layouts that do not
 * validate; an OOM layout is reported with fits = false. */
int dp_mem_estimate(const struct dp_model *m, const struct dp_cluster *cl,
                    const struct dp_layout *l, const struct dp_mem_opts *o,
                    struct dp_mem_report *out, struct dp_err *err);

/* Fast path for the planner: the peak and the smallest stage total, computing
 * only the stages that can be extreme (first, second, last). No validation. */
void dp_mem_peak(const struct dp_model *m, const struct dp_cluster *cl, const struct dp_layout *l,
                 const struct dp_mem_opts *o, int64_t *peak_bytes, int64_t *min_bytes,
                 int *peak_stage);

/* One stage (used by both of the above). */
void dp_mem_stage(const struct dp_model *m, const struct dp_cluster *cl, const struct dp_layout *l,
                  const struct dp_mem_opts *o, int stage, struct dp_mem_stage *out);

/*
 * FLOPs of one training step for the whole model (all GPUs together), counting
 * a multiply-add as 2 FLOPs and attention scores over the full s x s matrix
 * (no causal halving), as Narayanan et al. 2021 (Sec. 5.1, Appendix) do:
 * their 96 B s l h^2 (1 + s/6h + V/16lh) is hardware FLOPs with full
 * recompute. model_flops excludes recomputation (the MFU numerator, PaLM
 * Appendix B); hardware_flops includes it (HFU).
 */
struct dp_flops {
    double layer_fwd;      /* one layer, one micro-batch, forward */
    double scores_fwd;     /* its attention-score part (QK^T and attention x V) */
    double head_fwd;       /* output layer (logits), one micro-batch, forward */
    double model_flops;    /* per step: 3 x forward (forward + 2x backward) */
    double hardware_flops; /* per step, plus the recomputed forwards */
    double recompute_flops;
};
void dp_flops_step(const struct dp_model *m, const struct dp_layout *l, struct dp_flops *out);

#endif
