/*
 * core's layout section: the parallel layout (degrees, recomputation, precision,
 * framework, MoE and pipeline-split knobs), its defaults, checks, derived sizes and
 * JSON I/O. It relies on the types declared before it in core.h, which includes it in
 * place: include "core/core.h", not this file.
 */
#ifndef DPLAN_CORE_LAYOUT_H
#define DPLAN_CORE_LAYOUT_H

#ifndef DPLAN_CORE_H
#error "include core/core.h, not core/layout.h"
#endif

/*
 * Activation recomputation policies by name:
 *  - selective: Megatron-Core recompute_granularity "selective", the submodules in
 *    recompute_modules (default core_attn: the attention scores, softmax and dropout,
 *    Korthikanti et al. 2022 Sec. 5); megatron/core/transformer/transformer_config.py;
 *  - full: the whole layer (Megatron recompute_granularity "full", torchtitan
 *    activation_checkpoint.mode "full", DeepSpeed activation checkpointing of each
 *    layer), which layers by recompute_method and recompute_layers;
 *  - op: torchtitan's per-op selective checkpointing (selective_ac_option "op"): the
 *    outputs of the matmuls but every second one, of the attention kernel and of the TP
 *    reduce-scatters are saved, the rest of the block is recomputed
 *    (torchtitan/models/llama3/infra/parallelize.py _save_list, _apply_op_sac).
 */
enum dp_recompute {
    DP_RECOMPUTE_NONE = 0,
    DP_RECOMPUTE_SELECTIVE = 1,
    DP_RECOMPUTE_FULL = 2,
    DP_RECOMPUTE_OP = 3,
    DP_RECOMPUTES = 4,
};
/*
 * Which layers full recompute applies to, with n = recompute_layers: block (Megatron
 * --recompute-method block): the first n layers of each pipeline stage, the others keep
 * everything (n = 0: all); uniform (Megatron --recompute-method uniform): every layer, in
 * chunks of n whose input alone is kept; every (torchtitan selective_ac_option = n, the
 * "layer" SAC of _apply_layer_sac): every n-th transformer block.
 */
enum dp_recompute_method { DP_RC_BLOCK = 0, DP_RC_UNIFORM = 1, DP_RC_EVERY = 2 };
/* Megatron-Core recompute_modules for selective recompute (transformer_config.py). */
enum {
    DP_RCM_CORE_ATTN = 1 << 0,      /* attention scores, softmax, dropout (the default) */
    DP_RCM_MLP = 1 << 1,            /* the dense MLP: only its input kept */
    DP_RCM_LAYERNORM = 1 << 2,      /* norm outputs discarded, recomputed in backward */
    DP_RCM_MOE_ACT = 1 << 3,        /* the experts' activation output (fc2 input) discarded */
    DP_RCM_MOE = 1 << 4,            /* the whole MoE block: only its input kept */
    DP_RCM_SHARED_EXPERTS = 1 << 5, /* the shared experts' MLP */
    DP_RCM_MLA_UP_PROJ = 1 << 6,    /* MLA up projections (and rotary) discarded */
    DP_RCM_ALL = (1 << 7) - 1,
};
/* "core_attn,mlp" for the bits of `mods`; parse returns -1 naming nothing known. */
void dp_recompute_modules_format(unsigned mods, char *out, size_t cap);
int dp_recompute_module_parse(const char *name);
/*
 * The cross-entropy loss and the buffers it holds at its peak, per logit element:
 *  - vocab-parallel: Megatron-Core's default (cross_entropy_loss_fusion False):
 *    tensor_parallel/cross_entropy.py casts the local logits to fp32 and exponentiates
 *    them in place, saving that tensor for backward, which writes the gradient into it
 *    in place and casts it to bf16: the bf16 logits or the bf16 gradient (2 B) beside the
 *    fp32 tensor (4 B) = 6 B;
 *    (Megatron's native fusion, fusions/fused_cross_entropy.py, up-casts and works in
 *    place the same way);
 *  - fused: a kernel that reads the logits in their storage precision and writes the
 *    gradient over them (Transformer Engine's parallel_cross_entropy, Megatron
 *    --cross-entropy-loss-fusion --cross-entropy-fusion-impl te): 2 B;
 *  - unfused: F.cross_entropy(logits.float()) as torchtitan (components/loss.py) and
 *    Hugging Face models run it: the fp32 up-cast, its log-softmax (saved) and, in
 *    backward, the log-softmax's output gradient and input gradient: 3 x 4 B = 12 B;
 *  - fused-native: Megatron --cross-entropy-loss-fusion with its default native
 *    implementation (fusions/fused_cross_entropy.py), whose jit-fused steps cannot keep the
 *    in-place exp and gradient updates in place: Inductor "materializes the new value in a
 *    fresh [s, b, v] buffer" (the note of the file's later in-place fix): the bf16 logits,
 *    the fp32 copy and one more fp32 buffer, 2 + 4 + 4 = 10 B;
 *  - compiled: torchtitan's F.cross_entropy(logits.float()) under torch.compile (since
 *    2025, components/loss.py build_cross_entropy_loss with compile on): Inductor keeps
 *    the bf16 logits and per-row log-sum-exps for backward instead of the fp32
 *    log-softmax, and writes the gradient (softmax minus one-hot, cast back) in one kernel
 *    into a new bf16 buffer: the logits beside their gradient, 2 + 2 = 4 B.
 */
enum dp_loss {
    DP_LOSS_DEFAULT = 0,
    DP_LOSS_VOCAB_PARALLEL = 1,
    DP_LOSS_FUSED = 2,
    DP_LOSS_UNFUSED = 3,
    DP_LOSS_FUSED_NATIVE = 4,
    DP_LOSS_COMPILED = 5,
    DP_LOSSES = 6
};
const char *dp_loss_name(enum dp_loss k);
/*
 * The framework that runs the plan (never searched; megatron by default): what it
 * keeps per parameter, how it shards and communicates, its recompute policies, its
 * loss and its allocator (costmodel/framework.c, each term cited there).
 */
enum dp_framework {
    DP_FW_MEGATRON = 0,   /* Megatron-LM / Megatron-Core (NeMo, Megatron-Bridge) */
    DP_FW_TORCHTITAN = 1, /* torchtitan: FSDP2, DTensor TP, torch.distributed.pipelining */
    DP_FW_DEEPSPEED = 2,  /* DeepSpeed ZeRO (with Megatron-DeepSpeed or Hugging Face) */
    DP_FRAMEWORKS = 3,
};
const char *dp_framework_name(enum dp_framework f);
int dp_framework_parse(const char *s); /* -1 if unknown */
/* MoE token dispatch: Megatron-Core's MoEAlltoAllTokenDispatcher sends one copy per
 * (token, expert); DeepEP/HybridEP (Megatron's flex dispatcher) one per destination
 * GPU inside a node and one per destination node across nodes, forwarded there. */
enum dp_moe_dispatcher { DP_DISPATCH_ALLTOALL = 0, DP_DISPATCH_DEDUP = 1 };
const char *dp_dispatcher_name(enum dp_moe_dispatcher d);
/* Which experts a token's k copies go to, as the dispatch sees it (costmodel/moe.c):
 * random: k distinct experts drawn uniformly (a trained router, as far as placement goes;
 * Megatron-Core's moe_router_force_load_balancing draws random logits, router.py
 * apply_random_logits); round-robin: token i of a rank takes experts i k .. i k + k - 1
 * (mod E), NeMo Automodel's FakeBalancedGate (nemo_automodel/components/moe/layers.py,
 * `fake_balanced_gate: true` in its benchmark recipes): every expert gets the same load,
 * but a token's experts are neighbours, so they sit on one or two GPUs. */
enum dp_moe_routing { DP_ROUTING_RANDOM = 0, DP_ROUTING_ROUND_ROBIN = 1 };
const char *dp_routing_name(enum dp_moe_routing r);
/* muon: Muon (Jordan et al. 2024; Megatron-Core --optimizer muon): SGD momentum, the update
 * of each 2-D weight orthogonalized by 5 Newton-Schulz iterations; the embedding, the output
 * layer, norms and biases stepped by Adam. */
enum dp_optimizer { DP_OPT_ADAM = 0, DP_OPT_SGD = 1, DP_OPT_MUON = 2 };
enum dp_pp_schedule { DP_SCHED_1F1B = 0, DP_SCHED_DUALPIPEV = 1 };
const char *dp_pp_schedule_name(enum dp_pp_schedule s);
const char *dp_optimizer_name(enum dp_optimizer o);
const char *dp_recompute_name(enum dp_recompute r);

/*
 * One parallel layout. Rank order is Megatron's tp-cp-ep-dp-pp, TP fastest.
 * world = tp * cp * dp * pp. Expert layers regroup each stage's tp * cp * dp
 * ranks as etp * ep * edp (Megatron-Core's MoE parallel folding), so ep * etp
 * divides tp * cp * dp.
 */
struct dp_layout {
    int tp, pp, dp, cp, ep;
    int vpp;     /* model chunks per pipeline rank (1 = plain 1F1B) */
    int64_t mbs; /* micro-batch size (sequences) */
    int64_t gbs; /* global batch (sequences) */
    int64_t seq_len;
    int zero; /* 0..3; ZeRO-1 == Megatron's distributed optimizer */
    enum dp_recompute recompute;
    bool sp;         /* sequence parallel (no-op when tp == 1) */
    bool flash_attn; /* attention keeps no s^2 tensors */
    enum dp_precision precision;
    bool grad_fp32; /* gradients accumulated in fp32 (Megatron main_grad) */
    enum dp_optimizer optimizer;
    /* dtype of the optimizer's states (the moments, and the master copy of the weights
     * unless it is the weights' own dtype): fp32 (default), or what NeMo's
     * distributed_fused_adam takes as optim.dtype (bf16 in its Nemotron-4 340B recipe) */
    enum dp_precision optimizer_dtype;
    bool dp_overlap; /* DP gradient reduction overlaps backward (torch DDP
                        buckets, Megatron --overlap-grad-reduce) */
    /* Compute type of the linear layers' GEMMs and, for FP8, how it is scaled. */
    enum dp_gemm gemm;
    enum dp_fp8_recipe fp8_recipe;
    enum dp_fp8_format fp8_format;
    bool fp8_params; /* weights kept (and gathered) in FP8: Megatron --fp8-param-gather,
                        NeMo fp8_params, torchao float8 FSDP all-gather */
    /* The output layer (LM head) in MXFP8 too: Megatron-Core fp8_output_proj
     * (TELMHeadColumnParallelLinear, active only with the mxfp8 recipe:
     * fp8_utils.is_mxfp8_output_proj_active). */
    bool fp8_output;
    /* The attention's dot products in FP8 too: Transformer Engine's FP8 dot-product
     * attention on cuDNN's fused kernel (Megatron --fp8-dot-product-attention, TE
     * DotProductAttention fp8_dpa): Q, K, V quantized in, dQ/dK/dV out, and saved for
     * backward in FP8. */
    bool fp8_attention;
    /* Communication overlap beyond dp_overlap (all default off in dp_layout_default,
     * which is what a plan or runs file that does not name them means): */
    bool tp_overlap;           /* TP collectives pipelined with the GEMMs they feed (Megatron
                                  --tp-comm-overlap, torchtitan async TP); needs sp */
    bool overlap_param_gather; /* distributed-optimizer / FSDP parameter all-gathers
                                  overlap the forward (Megatron --overlap-param-gather,
                                  FSDP prefetch) */
    bool pp_overlap;           /* pipeline send/recv overlap compute (Megatron overlap_p2p_comm,
                                  interleaved schedule only) */
    int recompute_layers;      /* with full recompute, n of recompute_method: block: layers per
                                  pipeline stage that recompute (Megatron --recompute-method
                                  block --recompute-num-layers), 0 = all; uniform: layers per
                                  chunk (0 = 1); every: every n-th layer */
    enum dp_recompute_method recompute_method;
    unsigned recompute_modules; /* selective: DP_RCM_* bits; 0 = core_attn */
    enum dp_loss loss;          /* DP_LOSS_DEFAULT: the framework's (dp_layout_loss) */
    /* The output layer and loss run on this many equal slices of the micro-batch's local
     * tokens, one after the other, each slice's backward before the next slice's forward
     * (torchtitan components/loss.py ChunkedLossWrapper, num_chunks 8 in its Qwen3
     * configs): the loss's buffers at its peak are one slice's. 0 or 1: all tokens at once. */
    int loss_chunks;
    /* Sequences per data-parallel rank that one pipeline schedule runs (torchtitan's and
     * NeMo Automodel's local batch; no effect with pp 1, where every micro-batch is its own
     * forward and backward already): with pp > 1 a step of gbs / dp sequences runs as
     * (gbs / dp) / local_batch gradient-accumulation steps, each a whole schedule with
     * its own fill and drain and FSDP's gather and reduce-scatter around it (torchtitan
     * trainer.py train_step calls forward_backward_step, hence pp_schedule.step, once per
     * accumulation step). 0: all of the step's micro-batches in one schedule. */
    int64_t local_batch;
    /* FSDP (torchtitan framework) with pp > 1 gathers each block before and reduce-scatters
     * it after every micro-batch, as without pipelining: PyTorch's pipeline stage turns off
     * gradient sync and resharding but for the last micro-batch only when the stage's root
     * module is the FSDP module (pipelining/stage.py backward_maybe_with_nosync), which
     * torchtitan's apply_fsdp makes it and NeMo Automodel's (@89e3a9fdd) does not: it builds
     * the PipelineStage first and fully_shard-s the inner model. false: torchtitan's. */
    bool fsdp_per_microbatch;
    /* Multi-token prediction depth (DeepSeek-V3 technical report Sec. 2.2; Megatron-Core's
     * MultiTokenPredictionBlock, --mtp-num-layers): each of the mtp_layers modules on the
     * loss's model chunk joins the previous depth's hidden states with the embedding of the
     * next token (two RMSNorms and a 2h -> h projection, eh_proj), runs one transformer
     * layer of the kind the model's last layer is, and the shared output layer and a loss
     * of its own. Megatron only; 0: none. */
    int mtp_layers;
    /* The pipeline schedule: Megatron's 1F1B (interleaved with vpp > 1), or DualPipeV
     * (DeepSeek's DualPipe cut in half; PyTorch ScheduleDualPipeV, torchtitan's
     * pipeline_parallel_schedule "DualPipeV", PithTrain): vpp 2 in a V, rank r holding
     * stages r and 2 pp - 1 - r, so the embedding and the loss on rank 0 (costmodel/
     * pipeline_dualpipev.c). */
    enum dp_pp_schedule schedule;
    enum dp_framework framework;
    /* Hybrid sharded data parallelism (HSDP): ZeRO/FSDP shards within groups of
     * shard_group of the dp x cp ranks and replicates across the groups, whose gradients
     * are all-reduced (FSDP2 data_parallel_shard_degree x data_parallel_replicate_degree,
     * Megatron --num-distributed-optimizer-instances, DeepSpeed MiCS mics_shard_size).
     * 0 = all dp x cp ranks (full sharding). */
    int shard_group;
    enum dp_attn attn;     /* the fused attention kernel (with flash_attn) */
    bool eager;            /* element-wise ops run one PyTorch kernel each (no torch.compile or
                              fused Megatron/TE kernels): more memory passes */
    bool list_collectives; /* sharded-DP all-gathers and reduce-scatters go through
                              PyTorch's list API (torch <= 1.8 all_gather(list) /
                              reduce_scatter(list), DeepSpeed <= 0.3): one copy per rank each,
                              and (DeepSpeed ZeRO-3) 0.3's per-rank Python loop re-gathering
                              the persistent parameters after each step */
    /* Mixture of experts (ignored for dense models). */
    int etp;              /* expert tensor parallel size; 0 = tp (Megatron's default) */
    double moe_capacity;  /* expert capacity factor; 0 = dropless */
    bool moe_pad;         /* pad every expert's input to its capacity */
    double moe_imbalance; /* busiest EP rank's routed tokens over the mean (dropless); 0 =
                             routing statistics */
    enum dp_moe_dispatcher moe_dispatcher;
    enum dp_moe_routing moe_routing;
    /* Megatron-Core --overlap-moe-expert-parallel-comm (with --delay-wgrad-compute;
     * Megatron-Bridge moe_a2a_overlap): in the 1F1B steady state the forward of one
     * micro-batch and the backward of another run layer by layer on two streams, each
     * all-to-all beside the other's compute (costmodel/time.c ep_overlapped). */
    bool ep_overlap;
    /*
     * The pipeline split (core/split.c): which decoder layers each stage and model
     * chunk holds. With nchunks == 0 it is even (layers / (pp * vpp) per chunk) or,
     * when first/last_stage_layers are set, Megatron's --decoder-first/last-pipeline-
     * num-layers (the middle stages share the rest). Otherwise chunk_layers holds
     * nchunks == pp * vpp counts in model order: entry s = c * pp + r is model chunk c
     * of stage r. The embedding runs in entry 0 and the final norm, output layer and
     * loss in entry pp * vpp - 1; either may hold no layer (a stage of its own).
     * Compare layouts with dp_layout_equal (entries past nchunks are ignored);
     * chunk_layers stays the last field.
     */
    int first_stage_layers; /* 0 = like the middle stages */
    int last_stage_layers;  /* 0 = like the middle stages */
    int nchunks;            /* 0, or pp * vpp entries of chunk_layers */
    uint16_t chunk_layers[DP_MAX_CHUNKS];
};

/* moe_imbalance 0 (the default): the busiest EP rank's load from the statistics of
 * balanced routing alone (costmodel/moe.c dp_moe_load), no systematic imbalance; runs with
 * a known imbalance give it (>= 1; forced-balanced routing, Megatron
 * moe_router_force_load_balancing, is 1). Switch Transformer's capacity factor 1.25
 * (Fedus et al. 2022) is headroom for token dropping, not a measured imbalance. */
#define DP_MOE_IMBALANCE_DEFAULT 0.0

/* Defaults: everything 1, bf16 (GEMMs too), flash attention, fp32 grads, Adam, recompute
 * none, DP gradient and parameter-gather overlap on, TP and pipeline overlap off. */
void dp_layout_default(struct dp_layout *l);
/* Micro-batches per step: gbs / (mbs * dp). */
static inline int64_t dp_layout_microbatches(const struct dp_layout *l)
{
    return l->gbs / (l->mbs * l->dp);
}
/* Micro-batches one pipeline schedule runs: local_batch / mbs, or all of the step's. */
static inline int64_t dp_layout_schedule_microbatches(const struct dp_layout *l)
{
    return l->local_batch > 0 && l->pp > 1 ? l->local_batch / l->mbs : dp_layout_microbatches(l);
}
/* Whether local_batch sequences make whole micro-batches of mbs and whole schedules of the
 * per_rank (gbs / dp) sequences of a step (dp_layout_validate's rule; the planner's too). */
static inline bool dp_local_batch_fits(int64_t local_batch, int64_t mbs, int64_t per_rank)
{
    return local_batch > 0 && local_batch % mbs == 0 && per_rank % local_batch == 0;
}
/* Pipeline schedules per step (1 unless local_batch splits the step). */
static inline int64_t dp_layout_schedules(const struct dp_layout *l)
{
    int64_t m = dp_layout_schedule_microbatches(l);
    return m > 0 ? dp_layout_microbatches(l) / m : 1;
}
/* Layers of a stage of `layers` that recompute fully under the layout (recompute_method
 * and recompute_layers). */
static inline int dp_layout_recomputed(const struct dp_layout *l, int layers)
{
    if (l->recompute != DP_RECOMPUTE_FULL)
        return 0;
    if (l->recompute_method == DP_RC_EVERY)
        return l->recompute_layers > 1 ? layers / l->recompute_layers : layers;
    if (l->recompute_method == DP_RC_UNIFORM)
        return layers;
    return l->recompute_layers > 0 && l->recompute_layers < layers ? l->recompute_layers : layers;
}
/* The data-parallel ranks (of dp x cp) a dense parameter's ZeRO/FSDP shard spans: the shard
 * group under HSDP, else all of them; and the replicas of each shard. */
static inline int dp_layout_shard(const struct dp_layout *l)
{
    return l->shard_group > 0 ? l->shard_group : l->dp * l->cp;
}
static inline int dp_layout_replicas(const struct dp_layout *l)
{
    int s = dp_layout_shard(l);
    return s > 0 ? l->dp * l->cp / s : 1;
}
/* The loss the layout computes (its own, or its framework's default: Megatron-Core's
 * vocab-parallel cross entropy, torchtitan's and DeepSpeed's unfused one). */
enum dp_loss dp_layout_loss(const struct dp_layout *l);
/*
 * DP_EUSAGE when the layout's framework does not offer the combination (exit 2): one line
 * naming the field, the framework and what it supports, prefixed by `where` (a file and
 * JSON path ending in "layout", or NULL for command-line options, named --like-this).
 */
int dp_layout_check_framework(const struct dp_layout *l, const char *where, struct dp_err *err);
/* Layers held by pipeline stage `stage` (0..pp-1) and by its model chunk `chunk`
 * (0..vpp-1). Safe on any layout; the counts mean something once dp_layout_validate
 * accepts it. */
int dp_layout_stage_layers(const struct dp_layout *l, const struct dp_model *m, int stage);
int dp_layout_chunk_count(const struct dp_layout *l, const struct dp_model *m, int stage,
                          int chunk);
/* All pp * vpp chunk counts in model order; returns the count, or -1 if above cap. */
int dp_layout_expand(const struct dp_layout *l, const struct dp_model *m, int *out, int cap);
/* Set an explicit split of n = pp * vpp counts (an all-equal list is stored as the even
 * split); -1 if n or a count is out of range. dp_layout_reset_split: the even split. */
int dp_layout_set_chunks(struct dp_layout *l, const int *counts, int n);
void dp_layout_reset_split(struct dp_layout *l);
/* The split as an explicit list (nchunks = pp * vpp), for writers that must spell it out;
 * returns -1 when pp * vpp exceeds DP_MAX_CHUNKS. */
int dp_layout_make_explicit(struct dp_layout *l, const struct dp_model *m);
/* The same layout: every field (the GEMM type as resolved), the split up to nchunks. */
bool dp_layout_equal(const struct dp_layout *a, const struct dp_layout *b);
/*
 * The layer kinds held by stage `stage`, over all its model chunks (with
 * interleaving, chunk c of stage r holds the layers of virtual stage c pp + r).
 * The one place that maps a stage to the layers it holds by kind: the memory
 * and time models charge each stage through it.
 */
void dp_layout_stage_kinds(const struct dp_layout *l, const struct dp_model *m, int stage,
                           struct dp_layer_kinds *out);
/* The model-order index of rank r's chunk c among pp ranks: c pp + r (Megatron's loop), or
 * in DualPipeV's V (v_style) 2 pp - 1 - r for chunk 1; and its inverse, the rank that holds
 * model-order stage s (its chunk is s / pp either way). The one place for the V's mapping:
 * the layout's, the cost model's and the executor's. */
static inline int dp_pipe_global_stage(int pp, bool v_style, int r, int c)
{
    return v_style && c == 1 ? 2 * pp - 1 - r : c * pp + r;
}
static inline int dp_pipe_stage_rank(int pp, bool v_style, int s)
{
    return v_style && s >= pp ? 2 * pp - 1 - s : s % pp;
}
/* The same under a layout's schedule. */
static inline int dp_layout_global_stage(const struct dp_layout *l, int r, int c)
{
    return dp_pipe_global_stage(l->pp, l->schedule == DP_SCHED_DUALPIPEV, r, c);
}
/*
 * DualPipeV's passes on rank r of P with M >= 2P micro-batches, in order
 * (core/schedule_dualpipev.c): a forward (F) or backward (B) of phase ph (0: stage r,
 * 1: stage 2P - 1 - r), a backward for the inputs only whose weight gradients a later W
 * runs (BZ), a forward of ph overlapped with a backward of ph2 (FB). Each phase's forwards,
 * and its backwards, take the micro-batches in order. ops needs room for 8 (M + P); returns
 * the count, -1 for a bad shape.
 */
enum { DP_DPV_F, DP_DPV_B, DP_DPV_BZ, DP_DPV_FB, DP_DPV_W };
struct dp_dpv_op {
    unsigned char kind, ph, ph2;
};
int64_t dp_dualpipev_ops(int P, int64_t M, int r, struct dp_dpv_op *ops);
/*
 * The same as the passes a runtime runs, each with its micro-batch (each phase's forwards,
 * and its backwards, take them in order): an FB op as its forward then its backward, both
 * `paired`; a W with the micro-batch and phase of the backward for inputs only (BZ) it
 * finishes, the oldest still waiting (a W with none waiting is left out). kind is DP_DPV_F,
 * _B, _BZ or _W. out needs room for 16 (M + P); NULL counts. Returns the count, -1 for a
 * bad shape or without memory. The one numbering of the simulator's and the executor's.
 */
struct dp_dpv_pass {
    int32_t mb;
    unsigned char ph, kind;
    bool paired;
};
int64_t dp_dualpipev_passes(int P, int64_t M, int r, struct dp_dpv_pass *out);
static inline int dp_layout_stage_rank(const struct dp_layout *l, int s)
{
    return dp_pipe_stage_rank(l->pp, l->schedule == DP_SCHED_DUALPIPEV, s);
}
/* The rank that holds the output layer and the loss: the last, or rank 0 in DualPipeV's V. */
static inline int dp_layout_head_rank(const struct dp_layout *l)
{
    return l->schedule == DP_SCHED_DUALPIPEV ? 0 : l->pp - 1;
}
/* Expert tensor parallelism in effect: l->etp, or tp when 0 (Megatron's default). */
static inline int dp_layout_etp(const struct dp_layout *l)
{
    return l->etp > 0 ? l->etp : l->tp;
}
/* Expert data parallelism: tp cp dp / (ep etp), Megatron-Core parallel_state.py. */
static inline int dp_layout_edp(const struct dp_layout *l)
{
    int d = l->ep * dp_layout_etp(l);
    return d > 0 ? l->tp * l->cp * l->dp / d : 1;
}
/* The ranks an expert parameter's ZeRO/FSDP shard spans, and the replicas of each shard: its
 * data-parallel group divided among the dense shards' replicas (HSDP) where it divides,
 * else all of that group, unreplicated. */
static inline int dp_layout_expert_shard(const struct dp_layout *l)
{
    int edp = dp_layout_edp(l), rep = dp_layout_replicas(l);
    return edp % rep == 0 ? edp / rep : edp;
}
static inline int dp_layout_expert_replicas(const struct dp_layout *l)
{
    int s = dp_layout_expert_shard(l);
    return s > 0 ? dp_layout_edp(l) / s : 1;
}
/*
 * Check that `l` can run `m` on `gpus` GPUs (gpus_per_node for tp locality is
 * not checked here). On failure err names the first constraint that fails,
 * e.g. "tp=3 does not divide heads=32".
 */
int dp_layout_validate(const struct dp_layout *l, const struct dp_model *m, int gpus,
                       struct dp_err *err);
/* First layer (0-based) of pipeline stage `stage` without interleaving: the layers of the
 * stages before it. */
int dp_layout_stage_first_layer(const struct dp_layout *l, const struct dp_model *m, int stage);
/* Model chunk `chunk` (0..vpp-1) of stage `stage`: its first layer (0-based: the layers of
 * the virtual stages before it in model order) and layer count (with vpp 1 the one chunk
 * is the stage). */
void dp_layout_chunk_layers(const struct dp_layout *l, const struct dp_model *m, int stage,
                            int chunk, int *first, int *count);
/* The layers of a stage, 0-based and inclusive: "0-19"; interleaved "0-3,16-19,...,64-67";
 * "E" / "L" for a chunk holding only the embedding / the loss. */
void dp_layout_stage_ranges(const struct dp_layout *l, const struct dp_model *m, int stage,
                            char *out, size_t cap);
/*
 * "tp=8 pp=4 dp=2 mbs=1 ... split=19,21,21,19" compact form for tables and messages;
 * an uneven split lists the model chunks' layer counts in model order, as --stage-layers
 * takes them (runs of 3 or more as N*K). dp_layout_format has no model: it shows an
 * explicit list, or only the given first/last counts ("split=19/../19", "split=../26").
 */
void dp_layout_format_model(const struct dp_layout *l, const struct dp_model *m, char *out,
                            size_t cap);
void dp_layout_format(const struct dp_layout *l, char *out, size_t cap);
struct cJSON *dp_layout_to_json(const struct dp_layout *l);
int dp_layout_from_json(struct dp_jr *jr, const struct cJSON *obj, struct dp_layout *out);

/* The deepest multi-token prediction dplan takes (DeepSeek-V3 trains with 1). */
#define DP_MAX_MTP 8

/*
 * Split rules (core/split.c). Each writes pp * vpp counts in model order into out (room for
 * DP_MAX_CHUNKS) or fails with `code` and "what: expected ..." in err:
 *  - dp_split_first_last: Megatron --decoder-first/last-pipeline-num-layers (0 = unset);
 *  - dp_split_account: Megatron --account-for-embedding/loss-in-pipeline-split;
 *  - dp_split_torchtitan: torchtitan's pipeline_parallel_first/last_stage_less_layers;
 *  - dp_split_balanced: the planner's family (see split.c), -1 when infeasible;
 *  - dp_split_check: n == pp * vpp counts summing to L, none empty but the first and last.
 * Text forms: "7,8*14,7" (--stage-layers, N*K = N repeated K times) and Megatron's
 * --pipeline-model-parallel-layout strings ("Et|(tt|)*62,tL"); the parsers set *n to the
 * count of virtual stages (and *mtp to the count of MTP layers 'm', which must sit in the
 * loss's stage; NULL refuses them). The formatters truncate at cap; the Megatron one writes
 * mtp layers 'm' before the loss.
 */
int dp_split_first_last(int64_t L, int pp, int vpp, int first, int last, int *out, const char *what,
                        int code, struct dp_err *err);
int dp_split_account(int64_t L, int pp, int vpp, bool embedding, bool loss, int *out,
                     const char *what, int code, struct dp_err *err);
int dp_split_torchtitan(int64_t L, int pp, int vpp, int in_w, int out_w, int *out, const char *what,
                        int code, struct dp_err *err);
int dp_split_balanced(int64_t L, int pp, int vpp, int a, int b, bool early, int *out);
int dp_split_check(const int *c, int n, int64_t L, int pp, int vpp, const char *what, int code,
                   struct dp_err *err);
/* The same with the ranks named as DualPipeV's V places the stages (v_style). */
int dp_split_check_v(const int *c, int n, int64_t L, int pp, int vpp, bool v_style,
                     const char *what, int code, struct dp_err *err);
int dp_split_parse_list(const char *str, int *out, int cap, int *n, const char *what,
                        struct dp_err *err);
int dp_split_parse_megatron(const char *str, int pp, int *out, int cap, int *n, int *mtp,
                            const char *what, int code, struct dp_err *err);
void dp_split_format_list(const int *c, int n, char *buf, size_t cap);
void dp_split_format_megatron(const int *c, int n, int mtp, char *buf, size_t cap);

/* Megatron pads the vocabulary to a multiple of 128 * tp (--make-vocab-size-divisible-by). */
int64_t dp_padded_vocab(int64_t vocab, int tp);

/*
 * A rank's coordinates (Megatron's tp-cp-ep-dp-pp order, TP fastest; the experts'
 * refold each stage's tp x cp x dp ranks, dp_rank_ecoords below):
 * rank = tp_rank + tp * (cp_rank + cp * (dp_rank + dp * pp_rank)). dp_rank_coords and
 * dp_rank_of are the cp = 1 case (cp_rank 0).
 */
struct dp_coords {
    int tp_rank, dp_rank, pp_rank;
    int cp_rank; /* context-parallel rank (0 when cp = 1) */
};
void dp_rank_coords(int rank, int tp, int dp, int pp, struct dp_coords *out);
int dp_rank_of(const struct dp_coords *c, int tp, int dp, int pp);
void dp_rank_coords_cp(int rank, int tp, int cp, int dp, int pp, struct dp_coords *out);
int dp_rank_of_cp(const struct dp_coords *c, int tp, int cp, int dp, int pp);

/*
 * A rank's expert coordinates: Megatron-Core's MoE parallel folding (parallel_state.py,
 * the expert RankGenerator with tp = etp, ep, dp = edp, cp = 1 in the dense order): a
 * stage's tp x cp x dp ranks, numbered i = tp_rank + tp (cp_rank + cp dp_rank), refold
 * with etp fastest, then ep, then edp = tp cp dp / (etp ep). ep <= 0: 1; etp <= 0: tp; a
 * pair whose product does not divide tp cp dp (dp_layout_validate refuses it) folds as
 * ep 1, etp tp. dp_rank_of_ecoords: the stage-local tp, cp and dp ranks (pp_rank
 * untouched) of expert coordinates (etp_rank, ep_rank, edp_rank).
 */
struct dp_ecoords {
    int etp, ep, edp;
    int etp_rank, ep_rank, edp_rank;
};
void dp_rank_ecoords(const struct dp_coords *c, int tp, int cp, int dp, int ep, int etp,
                     struct dp_ecoords *out);
void dp_rank_of_ecoords(int tp, int cp, int etp, int ep, int etp_rank, int ep_rank, int edp_rank,
                        struct dp_coords *c);

#endif
