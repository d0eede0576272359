/*
 * executor internals shared by its files and its tests (gradient check,
 * memory accounting); not for other modules.
 */
#ifndef DPLAN_EXECUTOR_INTERNAL_H
#define DPLAN_EXECUTOR_INTERNAL_H

#include "executor.h"
#include "executor/backend/backend.h"

#include <assert.h>

/* The rank's backend operations (needs `ex` in scope). */
#define OPS (ex->be->ops)
/* Return the status of x from the enclosing function if it is non-zero. */
#define TRY(x)                                                                                     \
    do {                                                                                           \
        int rc_ = (x);                                                                             \
        if (rc_)                                                                                   \
            return rc_;                                                                            \
    } while (0)

/* ------------------------------------------------------------------ memory */

/* Accounted allocation: bytes in use and the peak per pool. */
struct dp_mem {
    int64_t in_use[DP_NPOOLS];
    int64_t peak[DP_NPOOLS];
    int64_t total_in_use, total_peak;
    /* What the buffers allocated so far occupy with the backend's rounding (footprint),
     * held or not: what they add to the process's resident memory once written. */
    int64_t reserved;
};
void *dp__mem_alloc(struct dp_backend *be, struct dp_mem *mem, enum dp_pool pool, size_t bytes);
/* An allocation whose bytes are counted when held (dp__mem_hold: activation slots); its
 * footprint is reserved at once. */
void *dp__mem_alloc_unheld(struct dp_backend *be, struct dp_mem *mem, size_t bytes);
/* Mark bytes of an allocation as held / no longer held (slot reuse). */
void dp__mem_hold(struct dp_mem *mem, enum dp_pool pool, int64_t bytes);
/* This node's MemAvailable (/proc/meminfo: Linux's estimate of what can be allocated
 * without swapping) in bytes, or -1 when unknown. */
int64_t dp__mem_available(void);

/* ------------------------------------------------------------------ parameters */

/*
 * One local parameter tensor: the slice of a global tensor this rank holds (ckpt's
 * table, dp_ckpt_stage_slices) and where it sits in the flat buffers.
 */
struct dp_seg {
    struct dp_ckpt_slice t;
    size_t off;      /* elements into the flat buffers */
    bool decay;      /* AdamW weight decay (2-D weights) */
    bool tp_partial; /* replicated over TP but its gradient is partial under SP */
    bool norm_once;  /* replicated over TP: counted in the grad norm on tp_rank 0 only */
    int zk;          /* ZeRO parameter group (ex->zk): 0 dense, 1 experts under ep > 1 */
    size_t z;        /* elements into its group's sharded (packed) order */
};

/* ZeRO's parameter groups (Megatron-Core distributed optimizer: dense parameters sharded
 * over the data-parallel group, expert parameters over the expert-data-parallel group):
 * group k's tensors, packed in flat order, padded to n shards of S; rank's shard sits at
 * gred/adam_m/adam_v/pshard[base, base + S). Without experts under ep > 1, one group. */
struct dp_zkind {
    enum dp_group g;
    int n, rank;
    size_t S, base;
};
/* A run of consecutive segments of one group: flat [lo, hi), packed from z. */
struct dp_zrun {
    size_t lo, hi, z;
    int k;
};

/* Offsets (elements) of a layer's parameters in the flat buffer; SIZE_MAX if absent. */
struct dp_layer_params {
    size_t ln1_w, ln1_b, wqkv, bqkv, wo, bo, ln2_w, ln2_b, w1, b1, w2, b2;
    /* MoE layers (moe.c): the router; the first local expert's fused fc1 and its fc2 (the
     * others follow at strides Fe1 h and h fe); the shared experts' fc1 and fc2. */
    size_t router, ew1, ew2, sw1, sw2;
    /* Options: DeepSeek-V3's router score bias [E]; Qwen2-MoE's shared-expert gate [h];
     * the first local expert's fc1 bias (the others at strides Fe1) and fc2 bias (h). */
    size_t router_b, sgate, eb1, eb2;
    size_t qn_w, kn_w; /* Qwen3's q/k norm weights [d] (qk_norm) */
};

/* Sizes of this rank's tensors (see README "Buffer table"). */
struct dp_dims {
    int64_t B, T, N;           /* micro-batch sequences, sequence length, tokens N = B T */
    int64_t Nl;                /* tokens held outside the TP region: N / tp under SP, else N */
    int64_t h, d;              /* hidden, head dim */
    int a, g;                  /* local q heads a/tp, kv heads g/tp */
    int64_t qd, kvd, qkvd;     /* a d, g d, qd + 2 kvd */
    int64_t f, F1;             /* local ffn width f/tp; fc1 width: f (GELU) or 2f (SwiGLU) */
    int64_t vocab, Vp, Vl, v0; /* vocab, padded, local rows, first local row */
    int tp, tp_rank;
    bool sp;         /* sequence parallel active (tp > 1) */
    int cp, cp_rank; /* context parallelism: T = Tg / cp local rows of each sequence (cp.c) */
    int64_t Tg, C;   /* the global seq_len; CP chunk rows Tg / (2 cp) (cp > 1) */
    /* Mixture of experts (moe.c; 0 for dense models). */
    int E, K;   /* routed experts, experts per token */
    int El, e0; /* local experts and the first one's index (EP) */
    /* The expert folding (core dp_rank_ecoords): sizes and this rank's place. */
    int etp, ep, edp, etp_rank, ep_rank, edp_rank;
    bool esplit;     /* experts reduce over their own group (EDP is not DP x CP) */
    int64_t Nb, b0;  /* the routed tokens: Nb rows of the gathered N from row b0 (moe.c) */
    int64_t fe, Fe1; /* local expert width moe_ffn/etp; its fc1 width fe or 2 fe */
    int64_t sf, Sf1; /* local shared-expert width (0: none); its fc1 width */
    int64_t cap;     /* rows an expert takes per micro-batch (capacity mode), 0: dropless */
    int64_t R;       /* kept choices of this rank's micro-batch: at most N K, E cap */
    int64_t Rx;      /* rows this rank's experts can receive from the EP group */
};

/* ------------------------------------------------------------------ activations */

/* One layer's activations kept for backward (NULL = not kept under this recompute). */
struct dp_act {
    real *x;            /* [Nl, h] layer input (the residual stream) */
    real *ln1, *ln1_st; /* [Nl, h], [2 Nl] */
    real *qkv;          /* [N, qkvd] after RoPE */
    real *probs;        /* [B, a, T, T] (recompute none) */
    real *lse;          /* [B, a, T] CP: the softmax's log-sum-exp per query row (cp.c) */
    real *ctx;          /* [N, qd] */
    real *x2;           /* [Nl, h] residual after attention */
    real *ln2, *ln2_st; /* [Nl, h], [2 Nl] */
    real *fc1;          /* [N, F1] */
    real *act;          /* [N, f] */
    /* MoE layer (moe.c): router probabilities, each (token, choice)'s expert, combine
     * weight and grouped row (-1: dropped); per grouped row its token and weight; the
     * experts' inputs, fc1, activations and outputs by row; the shared experts' MLP. */
    real *rprobs;            /* [N, E] */
    int32_t *ridx, *rrow;    /* [N K] */
    real *rw;                /* [N K] */
    int32_t *rtok, *ecnt;    /* [R], [2 E]: rows per expert (kept, then chosen) */
    real *rwt;               /* [R] */
    real *ein, *efc1, *eact; /* [R, h], [R, Fe1], [R, fe] */
    real *eout;              /* [R, h] */
    real *sfc1, *sact;       /* [N, Sf1], [N, sf] */
    real *qkraw, *qkrs;      /* [N, (a + g) d], [N (a + g)]: q/k norm inputs and 1/rms */
    real *sgate;             /* [N] the shared gate sigmoid(x . w_g) (shared_gate) */
    int32_t *sidx;           /* [N] 0 .. N - 1, the rows the gate scales */
    /* The 2-byte stash (ex->stash16): a slot's layer keeps these in words instead of the
     * fp32 fields of the same name (NULL then), x only from its second layer on (the
     * first's is where the embedding and the pipeline write, fp32). */
    uint16_t *hx, *hln1, *hqkv, *hctx, *hx2, *hln2, *hfc1, *hact;
};

/* A micro-batch in flight on this stage. */
struct dp_slot {
    struct dp_act *layers; /* nlayers */
    int32_t *inputs;       /* [N] first stage */
    int32_t *targets;      /* [N] last stage */
    void *mem;             /* one allocation holding all of the above */
    size_t bytes;
    int mb;    /* micro-batch index, -1 when free */
    int chunk; /* the model chunk whose layers it holds (0 without interleaving) */
};

struct dp_work {
    real *tmp;        /* [N, h] gathered norm output; row-parallel partial output */
    real *dtmp;       /* [N, h] gradient w.r.t. a gathered norm output, before reduction */
    real *dgath;      /* [N, h] gathered output gradient (SP only) */
    real *dres;       /* [Nl, h] gradient of the residual stream */
    real *dqkv;       /* [N, qkvd] */
    real *dctx;       /* [N, qd] */
    real *dprobs;     /* [B, a, T, T] */
    real *dfc1;       /* [N, F1] */
    real *dact;       /* [N, f] */
    real *probs;      /* [B, a, T, T] selective: probabilities, computed twice */
    struct dp_act rc; /* full recompute: one layer's activations (x aliases the slot);
                       * 2-byte stash: one layer's fp32 set (its statistics, lse and
                       * probabilities alias the slot's) */
    real *xa, *xb;    /* 2-byte stash: [Nl, h] the layer's input and output (fp32) */
    real *rc_mem;     /* the allocation behind rc */
    real *rope;       /* [2, T, d/2] cos, sin */
    real *ring;       /* CP: 2 ring blocks of [N, 4 kvd] (k, v, then dk, dv; cp.c) */
    real *cpst;       /* CP: [B, a, T] running softmax sums (forward), D (backward) */
    /* MoE backward (moe.c). */
    real *mdy;   /* [R, h] dispatch rows; expert output gradient, then input gradient */
    real *mx;    /* [Rx, h] expert outputs; their gradient at the experts */
    real *mdact; /* [Rx, fe] */
    real *mdfc1; /* [Rx, Fe1] SwiGLU only */
    real *mdl;   /* [N E + R + E]: router logit gradient, row weight gradient, aux gradient */
    real *sdact; /* [N, sf] */
    real *sdfc1; /* [N, Sf1] SwiGLU only */
};

struct dp_head {
    real *xf;           /* [Nl, h] last layer output */
    real *lnf, *lnf_st; /* [Nl, h], [2 Nl] */
    real *logits;       /* [N, Vl]; dlogits after the loss */
    real *ce;           /* [4 N]: rowmax, target logit, sum-exp, loss */
};

/* ------------------------------------------------------------------ the rank */

struct dp__vsched;

/* overlap.c: a gradient bucket, flat [lo, hi) of consecutive layers, started after the
 * last micro-batch's backward through `layer` (its lowest); an in-flight request (ZeRO-1:
 * this rank's reduced piece at grads[at, at + n), to be added at gred[gat]). */
struct dp__bucket {
    size_t lo, hi;
    int layer;
};
struct dp__ovreq {
    int req;
    int n;
    size_t at, gat;
};

struct dp_exec {
    const struct dp_model *m;
    struct dp_layout l;
    struct dp_exec_opts o;
    struct dp_backend *be;
    struct dp_err *err;
    struct dp_dims dm;
    struct dp_coords c;
    int rank, world;
    int layer0, nlayers; /* global index of the first local layer, local count */
    /* Model chunks (vpp; one chunk = the stage without interleaving): chunk c holds local
     * layers [ch_l0[c], ch_l0[c] + ch_n[c]), global layers from ch_g0[c]. */
    int nch;
    int ch_l0[DP_MAX_CHUNKS], ch_n[DP_MAX_CHUNKS], ch_g0[DP_MAX_CHUNKS];
    bool first, last;   /* pipeline stage has the embedding / the head */
    int64_t M;          /* micro-batches per step per DP rank */
    int64_t gbs_tokens; /* gbs * seq_len */

    /* parameters */
    struct dp_seg *segs;
    int nsegs;
    size_t nparams;   /* elements used */
    size_t nflat;     /* flat length: nparams padded to a multiple of the shard group (ZeRO) */
    size_t shard;     /* optimizer elements: nflat / shard group (ZeRO >= 1) or nparams */
    size_t shard_off; /* first flat element of this rank's shard */
    /* params: the flat parameters (ZeRO-3: only while a checkpoint or the weights are
     * written, shard.c); grads: the flat gradients (ZeRO <= 1). */
    real *params, *grads, *adam_m, *adam_v;
    /* ZeRO-2/3 and HSDP (shard.c). The flat buffer is cut in buckets: the stage's tensors
     * before its first layer ("head" of the flat order: embeddings) and after its last
     * (final norm, LM head) form the edge, kept for the whole step; each layer is one
     * bucket, gathered (ZeRO-3) or reduce-scattered (ZeRO-2/3) as the layer runs. */
    int sg, sg_rank;     /* shard group: its size and this rank's place (HSDP: dp / replicas) */
    int repl, repl_rank; /* replicas of each shard and this rank's replica */
    int erepl_rank;      /* under zsplit: this rank's replica of its expert shard (HSDP) */
    real *gred;          /* [shard] reduced gradients, like adam_m (ZeRO-1, one group: grads) */
    real *pshard;        /* ZeRO-3: [shard] this rank's parameters (the master copy) */
    real *gedge, *gwin;  /* ZeRO-2/3: [edge_n] edge gradients; [win_n] one layer's */
    real *pedge, *pwin;  /* ZeRO-3: [edge_n] gathered edge parameters; [win_n] one layer's */
    real *pwin2;         /* ZeRO-3: [win_n] the next layer's, prefetched while pwin's runs */
    struct dp_zkind zk[2];
    struct dp_zrun *zr;
    int nzk, nzr;
    bool zsplit;             /* two groups: experts of their own group (dm.esplit) with ZeRO */
    int pf_layer;            /* ZeRO-3: the layer being gathered into pwin2 (-1: none) */
    size_t edge_lo, edge_hi; /* flat [0, edge_lo) and [edge_hi, nparams) are the edge */
    size_t edge_n, win_n;    /* edge_lo + nparams - edge_hi; the largest layer */
    size_t *lay_lo, *lay_hi; /* [nlayers] each layer's flat range */
    size_t win_lo;           /* flat start of the layer now in gwin / pwin */
    int *cnt;                /* [sg] scratch: elements of a flat range in each shard */
    int win_layer;           /* dp__shard_visit: the layer now whole in pwin (-1: none) */
    bool edge_whole;         /* dp__shard_visit: pedge holds the current edge */
    struct dp_layer_params *lp;
    size_t wte, wpe, lnf_w, lnf_b, head; /* SIZE_MAX if not on this stage */
    bool head_is_wte;                    /* tied embeddings on a single stage */

    /* activations */
    struct dp_slot *slots;
    int nslots, maxslots;
    size_t slot_bytes;                   /* chunk 0's (the stage's without interleaving) */
    size_t ch_slot_bytes[DP_MAX_CHUNKS]; /* each chunk's slot */
    struct dp__vsched *vs;               /* interleaved 1F1B: this rank's timeline */
    real *grecv;                         /* interleaved: [ngrecv, Nl h] received gradients */
    int ngrecv;
    int *grecv_mb, *grecv_ch; /* [ngrecv] which (micro-batch, chunk) each holds; -1 free */
    struct dp_work w;
    struct dp_head hd;
    real *send_fwd; /* [Nl, h] stage output (pp > 1, not last stage) */

    struct dp_mem mem;
    /* Resident memory (run.c): VmRSS just before the executor's buffers are allocated,
     * and VmHWM after the last step (since the baseline when hwm_reset). */
    int64_t rss_base, rss_train_peak;
    bool hwm_reset;
    int64_t predicted[DP_NPOOLS];
    int step;          /* current step (1-based) */
    double loss_sum;   /* this rank's sum of token losses in the step (last stage) */
    double aux_sum;    /* MoE: this rank's auxiliary loss of the step, times N (moe.c) */
    void *moe_host;    /* MoE: host side of one layer's routing (moe.c) */
    double grad_sumsq; /* global squared gradient norm of the step */
    int32_t *host_tok; /* [2 N] host staging for one micro-batch's inputs and targets */
    uint64_t adam_t;
    struct dp__ckpt *ck; /* checkpoint state (ckpt.c), NULL until used */
    char *trace;         /* dp_exec_schedule: the pipeline's order is written here */
    size_t trace_cap;
    /* Mixed precision (README "Mixed precision"): the storage type (fp32: nothing
     * below is used). The working copy of the weights (ZeRO <= 2), made from the fp32
     * master ex->params at each step's start, which the model reads (dp__pw): pw16
     * [edge_hi - edge_lo] the layers' part in 2-byte words (backend pack); pwedge
     * [edge_n] the edge (the stage's tensors outside its layers) rounded in fp32 for the
     * step; pwwin [win_n] one layer's part unpacked to fp32 before its forward and its
     * backward (pwwin_layer: which; -1 none). pw_emul (DPLAN_TEST_STORE_FP32=1, or a
     * backend without pack / unpack): instead pwork [nflat], the whole copy rounded in
     * fp32 (the storage emulation before 2-byte words; the same values). */
    enum dp_dtype dtype;
    bool pw_emul;
    /* The activations a slot keeps for backward in 2-byte words (memplan.c layer_acts):
     * bf16 / fp16 without the fp32 emulation, dense models, recompute none or selective
     * (dp__stash16_on); the layer runs in the fp32 set w.rc, packed after its forward
     * and unpacked before its backward (model.c). */
    bool stash16;
    real *pwork;
    uint16_t *pw16;
    real *pwedge, *pwwin;
    int pwwin_layer;
    /* Flash attention (attn_flash_*): the layers keep lse [B][a][T], no probabilities
     * (memplan.c); resolved from opts.attention and the backend (run.c). */
    bool flash;
    /* FP8 GEMMs (the layout's gemm fp8, bf16 storage): the transformer layers' linear
     * GEMMs go through gemm_fp8 (model.c lin_gemm); f8_grad is the gradients' format
     * (E5M2 under HYBRID, E4M3 under E4M3), forward tensors are always E4M3. */
    bool fp8;
    enum dp_f8 f8_grad;
    /* fp16 dynamic loss scaler (Megatron-Core DynamicGradScaler): the scale, the steps
     * since the last overflow or growth, the overflows left before a backoff; found_inf:
     * this step's gradients held an inf or nan on some rank (a MAX over the world). */
    double ls_scale;
    int ls_growth, ls_hyst;
    bool found_inf;
    /* Overlapped gradient reduction (overlap.c): on, elements per bucket, the buckets in
     * start order, the requests in flight; the step's seconds in the DP reduction after
     * the backward (the exposed part: waits and the edge's blocking reductions). */
    bool ov, ov_early;
    int64_t ov_bucket;
    struct dp__bucket *bk;
    int nbk, noq;
    struct dp__ovreq oq[DP_MAX_REQS];
    double dp_exposed_s;
    double dp_exposed_sum; /* over the steps the summary's mean counts */
    int dp_exposed_n;
};

/* ZeRO: the part [*lo, *hi) of segment sg's flat range [off, off + rows cols) that lies in
 * this rank's shard of its group (ex->zk); false when they do not overlap. */
/* The embedding and the output layer on two ranks of the pipeline (pp > 1, not DualPipeV's
 * rank 0, which holds both): a tied embedding's two copies sum their gradients over
 * DP_GROUP_EMB. */
static inline bool dp__emb_pair(const struct dp_exec *ex)
{
    return ex->l.pp > 1 && ex->first != ex->last;
}

static inline bool dp__seg_in_shard(const struct dp_exec *ex, const struct dp_seg *sg, size_t *lo,
                                    size_t *hi)
{
    const struct dp_zkind *k = &ex->zk[sg->zk];
    size_t s0 = (size_t)k->rank * k->S, a = sg->z, b = sg->z + (size_t)(sg->t.rows * sg->t.cols);
    size_t zl = a > s0 ? a : s0, zh = b < s0 + k->S ? b : s0 + k->S;
    *lo = sg->off + (zl - a);
    *hi = sg->off + (zh > zl ? zh - a : zl - a);
    return zl < zh;
}
/* Where flat element lo of segment sg (in this rank's shard) sits in gred/adam_m/pshard. */
static inline size_t dp__shard_idx(const struct dp_exec *ex, const struct dp_seg *sg, size_t lo)
{
    const struct dp_zkind *k = &ex->zk[sg->zk];
    return k->base + sg->z + (lo - sg->off) - (size_t)k->rank * k->S;
}
/* Where flat element `off` lives for the kernels: the flat buffer (ZeRO <= 1 gradients,
 * ZeRO <= 2 parameters), or under ZeRO-2/3 the edge buffer or the layer window. */
static inline size_t dp__edge_at(const struct dp_exec *ex, size_t off)
{
    return off < ex->edge_lo ? off : ex->edge_lo + (off - ex->edge_hi);
}
static inline bool dp__in_edge(const struct dp_exec *ex, size_t off)
{
    return off < ex->edge_lo || off >= ex->edge_hi;
}
static inline real *dp__param(struct dp_exec *ex, size_t off)
{
    if (off == SIZE_MAX)
        return NULL;
    if (ex->l.zero < 3 || ex->params)
        return ex->params + off;
    return dp__in_edge(ex, off) ? ex->pedge + dp__edge_at(ex, off) : ex->pwin + (off - ex->win_lo);
}
/* Where the kernels read a parameter: the working copy when there is one (bf16 / fp16,
 * ZeRO <= 2: the edge's, or the layer window's, which must hold the layer of `off`),
 * else dp__param. */
static inline real *dp__pw(struct dp_exec *ex, size_t off)
{
    if (off == SIZE_MAX)
        return NULL;
    if (ex->pwork)
        return ex->pwork + off;
    if (!ex->pw16)
        return dp__param(ex, off);
    if (dp__in_edge(ex, off))
        return ex->pwedge + dp__edge_at(ex, off);
    assert(ex->pwwin_layer >= 0 && off >= ex->lay_lo[ex->pwwin_layer] &&
           off < ex->lay_hi[ex->pwwin_layer]);
    return ex->pwwin + (off - ex->lay_lo[ex->pwwin_layer]);
}
static inline real *dp__grad(struct dp_exec *ex, size_t off)
{
    if (off == SIZE_MAX)
        return NULL;
    if (ex->l.zero < 2)
        return ex->grads + off;
    return dp__in_edge(ex, off) ? ex->gedge + dp__edge_at(ex, off) : ex->gwin + (off - ex->win_lo);
}

/* shard.c: ZeRO-2/3 and HSDP. */
/* The buckets of the stage (after dp__model_build): edge and layer ranges, win_n. */
int dp__shard_buckets(struct dp_exec *ex);
/* Two ZeRO groups (ex->zsplit), ZeRO-1: the flat gradients reduce-scattered into gred;
 * after the optimizer, the flat parameters gathered from every shard. */
int dp__shard_reduce_flat(struct dp_exec *ex);
int dp__shard_gather_params(struct dp_exec *ex);
/* Two ZeRO groups: m and v of the whole stage gathered into new flat buffers (*m, *v
 * replaced; the caller frees them). Not in the memory plan: transient, while saving. */
int dp__shard_state_full(struct dp_exec *ex, real **m, real **v);
/* Start of a step: zero the reduced gradients and the edge; ZeRO-3 gathers the edge. */
int dp__shard_step_begin(struct dp_exec *ex);
/* ZeRO-3: gather layer i's parameters into the window (before its forward, again before
 * its backward); ZeRO-2/3: open layer i's gradient window. */
int dp__shard_layer_fwd(struct dp_exec *ex, int i);
/* ZeRO-3: start gathering layer i's parameters into the second window without blocking
 * (the next layer of the pass; i < 0: none); dp__shard_layer_fwd / _bwd_begin of layer i
 * waits for it and runs on that window (FSDP's forward/backward prefetch). */
int dp__shard_prefetch(struct dp_exec *ex, int i);
int dp__shard_layer_bwd_begin(struct dp_exec *ex, int i);
/* ZeRO-2/3: after layer i's backward of one micro-batch: reduce-scatter its gradients
 * into gred (SP-partial norms all-reduced over TP first). */
int dp__shard_layer_bwd_end(struct dp_exec *ex, int i);
/* End of the step's backward (ZeRO-2/3): the edge's TP, tied-embedding and shard-group
 * reductions into gred; every stage: gred all-reduced over the replicas (HSDP). */
int dp__shard_step_reduce(struct dp_exec *ex);
/* Sequence parallel: the SP-partial tensors of flat [a, b) all-reduced over TP. */
int dp__tp_partial(struct dp_exec *ex, size_t a, size_t b);
/* ZeRO-1/2: the gradients of flat [a, b) in ex->grads reduce-scattered, blocking, this
 * rank's part added into gred (grads[a, b) is scratch afterwards). */
int dp__shard_reduce_part(struct dp_exec *ex, size_t a, size_t b);
/* Elements of group k's packed [za, zb) in each of its shards (into ex->cnt); where
 * packed element zl of group k sits in this rank's shard; the part of run r in [a, b). */
void dp__shard_counts(struct dp_exec *ex, int k, size_t za, size_t zb);
size_t dp__shard_at(const struct dp_exec *ex, int k, size_t zl);
bool dp__zrun_part(const struct dp_zrun *r, size_t a, size_t b, size_t *ra, size_t *rb, size_t *za);
/* Whether the slots keep their activations in 2-byte words (ex->stash16), from the
 * storage type, pw_emul, the recompute and the model. */
static inline bool dp__stash16_on(const struct dp_exec *ex)
{
    return ex->dtype != DP_DT_FP32 && !ex->pw_emul && ex->l.recompute != DP_RECOMPUTE_FULL &&
           ex->m->experts == 0;
}
/* ZeRO-1 keeps its reduced shard apart from the flat gradients (memplan.c). */
static inline bool dp__gred_own(const struct dp_exec *ex)
{
    return ex->l.zero >= 2 || ex->zsplit || (ex->ov && ex->l.zero == 1);
}

/* overlap.c: the buckets (after dp__shard_buckets; decides ex->ov from the options and
 * the layout's dp_overlap); at a step's start; after layer i's backward of slot s (starts
 * the buckets it completes); after the backward (the edge, then every wait). */
int dp__overlap_build(struct dp_exec *ex);
void dp__overlap_release(struct dp_exec *ex);
int dp__overlap_step_begin(struct dp_exec *ex);
int dp__overlap_layer_bwd_end(struct dp_exec *ex, const struct dp_slot *s, int i);
int dp__overlap_reduce(struct dp_exec *ex);

/* ZeRO-3: every parameter initialised into pshard (init_fill on the shard's part). */
void dp__shard_init(struct dp_exec *ex);
/* ZeRO-3: a temporary full flat copy of the parameters in ex->params (all-gathered) while
 * a checkpoint or the weights are written; dp__shard_drop frees it. No-op otherwise. */
int dp__shard_full(struct dp_exec *ex);
void dp__shard_drop(struct dp_exec *ex);
/* ZeRO-3, writing the weights without a flat copy: make segment sg's parameters whole
 * in pedge or pwin (dp__param then finds them). Collective over the shard group: its
 * ranks visit the same segments in the same order. dp__shard_visit_reset first. */
void dp__shard_visit_reset(struct dp_exec *ex);
int dp__shard_visit(struct dp_exec *ex, const struct dp_seg *sg);

/* moe.c: a MoE layer's MLP. Forward from the gathered norm output g2 to out = x2 +
 * MoE(g2) (out NULL: full recompute, only the kept set); backward from w.dres to w.dtmp
 * (the gradient w.r.t. the norm output, this rank's Nl tokens, reduced over TP). */
/* Switch Transformer's load-balancing coefficient alpha = 1e-2 (Fedus et al. 2022,
 * Sec. 2.2), the model files having none. */
#define DP_MOE_AUX_COEFF 1e-2
/* The step of DeepSeek-V3's aux-loss-free bias update, gamma (DeepSeek-V3 report Sec.
 * 2.1.2 and Sec. 4.2: 0.001; Megatron-Core moe_router_bias_update_rate, default 1e-3). */
#define DP_MOE_BIAS_RATE 1e-3
int dp__moe_forward(struct dp_exec *ex, const struct dp_layer_params *p, struct dp_act *A,
                    const real *g2, real *out);
int dp__moe_backward(struct dp_exec *ex, const struct dp_layer_params *p, struct dp_act *A);
/* After the optimizer step: DeepSeek-V3's router biases moved by the step's counts. */
int dp__moe_bias_update(struct dp_exec *ex);
void dp__moe_release(struct dp_exec *ex);
/* model.c's TP helpers: SP all-gather of token slices (else src), and the partial sum
 * over TP (all-reduce, or reduce-scatter under SP). */
const real *dp__gather_tokens(struct dp_exec *ex, const real *src, real *dst, int *rc);
int dp__reduce_tokens(struct dp_exec *ex, real *buf);
/* Whether global layer i is a MoE layer. */
bool dp__layer_moe(const struct dp_exec *ex, int i);

/* model.c */
int dp__model_build(struct dp_exec *ex); /* the stage's tensors: segments, offsets, nparams */
void dp__model_init(struct dp_exec *ex); /* their initial values (buffers allocated) */
/* Initial values of rows [r0, r1) of segment sg's slice into dst (row r0 first). */
void dp__init_rows(struct dp_exec *ex, const struct dp_seg *sg, int64_t r0, int64_t r1, real *dst);
void dp__model_release(struct dp_exec *ex);

/* memplan.c: the buffer table (README "Buffer table"), the one source of the sizes the
 * rank allocates and of the estimate. */
enum dp__buf {
    DP__BUF_PARAMS = 0,
    DP__BUF_GRADS,
    DP__BUF_GRED,
    DP__BUF_GEDGE,
    DP__BUF_GWIN,
    DP__BUF_PSHARD,
    DP__BUF_PEDGE,
    DP__BUF_PWIN,
    DP__BUF_PWIN2,
    DP__BUF_ADAM_M,
    DP__BUF_ADAM_V,
    DP__BUF_TMP,
    DP__BUF_DTMP,
    DP__BUF_DGATH,
    DP__BUF_DRES,
    DP__BUF_DQKV,
    DP__BUF_DCTX,
    DP__BUF_DPROBS,
    DP__BUF_DFC1,
    DP__BUF_DACT,
    DP__BUF_PROBS,
    DP__BUF_RC,
    DP__BUF_ROPE,
    DP__BUF_XF,
    DP__BUF_LNF,
    DP__BUF_LNF_ST,
    DP__BUF_LOGITS,
    DP__BUF_CE,
    DP__BUF_SEND,
    DP__BUF_MDY,
    DP__BUF_MX,
    DP__BUF_MDACT,
    DP__BUF_MDFC1,
    DP__BUF_MDL,
    DP__BUF_SDACT,
    DP__BUF_SDFC1,
    DP__BUF_GRECV,
    DP__BUF_RING,
    DP__BUF_CPST,
    DP__BUF_PWORK,
    DP__BUF_PW16, /* 2-byte words: elems counts them, 2 bytes each */
    DP__BUF_PWEDGE,
    DP__BUF_PWWIN,
    DP__NBUF
};
struct dp__memplan {
    int64_t elems[DP__NBUF]; /* reals (DP__BUF_PW16: 2-byte words); 0 = not allocated */
    int64_t slot_bytes;      /* one micro-batch's kept activations and token ids */
    int slots;               /* the most in flight: min(pp - stage, M); interleaved: the
                                slots allocated, each chunk's most at once summed */
    int64_t pool_bytes[DP_NPOOLS];
};
/* The plan of ex's stage (ex->m, l, dm, stage place, M and nparams set). */
void dp__memplan(const struct dp_exec *ex, struct dp__memplan *out);
/* Allocate every buffer of the plan (and the RoPE table, the slot list); sets nflat,
 * shard, shard_off and predicted. */
int dp__mem_build(struct dp_exec *ex);
void dp__mem_release(struct dp_exec *ex);
struct dp_slot *dp__slot_acquire(struct dp_exec *ex, int mb);
/* A slot for micro-batch mb of model chunk `chunk` (interleaving); the chunk's slot in
 * use by mb, or NULL (dp__slot_find). */
struct dp_slot *dp__slot_acquire_chunk(struct dp_exec *ex, int mb, int chunk);
struct dp_slot *dp__slot_find(struct dp_exec *ex, int mb, int chunk);
/* The bytes of a slot of chunk c (its layers' kept sets and token ids). */
size_t dp__slot_size(const struct dp_exec *ex, int c);
/* Local layer index of global layer g on this stage (-1: not here). */
int dp__local_layer(const struct dp_exec *ex, int g);
void dp__slot_release(struct dp_exec *ex, struct dp_slot *s);
/* Pipeline stage `stage`'s place: first, last, layer0 and nlayers (ex->l and ex->m set). */
void dp__stage_place(struct dp_exec *ex, int stage);
/* Forward of the stage's part (model chunk s->chunk) for one micro-batch in `s`:
 * embedding (chunk 0 of the first stage), layers, and on the last chunk of the last
 * stage the head with the loss and dlogits. The output goes to ex->send_fwd otherwise. */
int dp__stage_forward(struct dp_exec *ex, struct dp_slot *s);
/* Backward: ex->w.dres holds the output gradient (but for the loss's chunk); on return it
 * holds the input gradient (but for the embedding's chunk). */
int dp__stage_backward(struct dp_exec *ex, struct dp_slot *s);

/* interleave.c: interleaved 1F1B (vpp > 1). */
/* Pass k (0 <= k < 2 M v) of stage r in Megatron-Core's interleaved order. */
void dp__vsched_pass(int p, int v, int64_t M, int r, int64_t k, int *mb, int *chunk, bool *fwd);
/* One time step of a stage's timeline: the pass it runs (-1: none), then the messages
 * it receives at the step's end: a forward input for (rf_mb, rf_ch) from the previous
 * stage, an output gradient for (rb_mb, rb_ch) from the next (-1: none). */
/* One step of a stage's timeline: its pass (or -1) and the forward inputs and output
 * gradients that arrive at its end (up to two each: DualPipeV's stages hear from both
 * neighbours; -1 for none). */
struct dp__vstep {
    int64_t pass;
    int rf_mb[2], rf_ch[2], rb_mb[2], rb_ch[2];
};
struct dp__vsched {
    struct dp__vstep *t; /* NULL when only the counts were asked for */
    /* DualPipeV: this stage's passes in order (micro-batch, chunk, forward); NULL for
     * interleaved 1F1B (dp__vsched_pass) */
    int *pmb;
    unsigned char *pch;
    bool *pfw;
    int64_t nt;
    int ch_max[DP_MAX_CHUNKS]; /* most slots of each chunk held at once */
    int64_t peak_bytes;        /* most slot bytes held at once */
    int grecv_max;             /* most received gradients waiting at once */
};
/* Stage r's timeline (keep_steps) and its memory counts; slot_bytes[c] per chunk; dpv:
 * DualPipeV's V and order (v 2) instead of Megatron's interleaving. */
int dp__vsched_build(int p, int v, int64_t M, int r, bool dpv, const size_t *slot_bytes,
                     bool keep_steps, struct dp__vsched *out, struct dp_err *err);
void dp__vsched_free(struct dp__vsched *vs);
/* The step's passes on this stage in that order, with the pipeline messages. */
int dp__pipeline_interleaved(struct dp_exec *ex, int step);

/* cp.c: context parallelism (active when dm.cp > 1). */
/* Global position in its sequence of local row j (0 <= j < dm.T): rank i holds chunks i
 * and 2 cp - 1 - i of C rows; j itself when cp = 1. */
int64_t dp__cp_pos(const struct dp_exec *ex, int64_t j);
/* Learned positions of local tokens [n0, n0 + n) of the micro-batch (pos_fwd/pos_bwd in
 * runs of consecutive global positions). */
void dp__cp_pos_fwd(struct dp_exec *ex, real *out, const real *wpe, int64_t n0, int64_t n);
void dp__cp_pos_bwd(struct dp_exec *ex, real *dwpe, const real *dout, int64_t n0, int64_t n);
/* Ring attention over the CP group: ctx [N, qd] and lse [B, a, T] from qkv; backward
 * dqkv (overwritten) from dctx, qkv, ctx and lse. */
int dp__cp_attn_fwd(struct dp_exec *ex, const real *qkv, real *ctx, real *lse);
int dp__cp_attn_bwd(struct dp_exec *ex, real *dqkv, const real *dctx, const real *qkv,
                    const real *ctx, const real *lse);

/* schedule.c */
/* Load micro-batch `mb` of step `step` into slot tokens (first/last stage). */
void dp__load_batch(struct dp_exec *ex, struct dp_slot *s, int step, int mb);
/* The pieces of dp__forward_backward (the step-time prediction prices them apart):
 * zero the gradients; the step's micro-batches through the stage (1F1B, with the
 * pipeline messages); the gradient reductions and the loss and norm all-reduce. */
int dp__step_begin(struct dp_exec *ex); /* ZeRO-3: gathers the edge parameters */
int dp__pipeline(struct dp_exec *ex, int step);
int dp__step_reduce(struct dp_exec *ex, double *loss);
/* One step's forward and backward over all micro-batches (1F1B) with gradients
 * accumulated, then reduced (SP, tied embeddings, DP / ZeRO-1 reduce-scatter).
 * *loss gets the global mean loss and ex->grad_sumsq the global squared gradient norm
 * over all shards (every rank; one all-reduce for both). */
int dp__forward_backward(struct dp_exec *ex, int step, double *loss);
/* The step's global gradient norm, sqrt(ex->grad_sumsq) as dp__forward_backward reduced
 * it; no communication. */
int dp__grad_norm(struct dp_exec *ex, double *norm);
/* AdamW with clipping factor `gscale`, then the ZeRO-1 all-gather. */
int dp__optimizer_step(struct dp_exec *ex, double lr, double gscale);
/* Mixed precision: the working copy = the master weights rounded to ex->dtype (model.c:
 * pw16 and pwedge, or pwork); layer i's part unpacked into pwwin (a no-op when it is
 * there already, or without 2-byte words); the loss scaler's update after a step
 * (schedule.c; Megatron DynamicGradScaler.update). */
void dp__model_working_copy(struct dp_exec *ex);
void dp__model_work_window(struct dp_exec *ex, int i);
void dp__loss_scale_update(struct dp_exec *ex, bool found_inf);
/* Megatron's defaults (megatron/training/arguments.py --initial-loss-scale,
 * --loss-scale-window, --hysteresis, --min-loss-scale; growth 2, backoff 0.5). */
#define DP_LS_INIT       4294967296.0 /* 2^32 */
#define DP_LS_WINDOW     1000
#define DP_LS_HYSTERESIS 2
#define DP_LS_MIN        1.0

/* Create / free a rank's executor (backend included) without running it. */
int dp__exec_new(const struct dp_model *m, const struct dp_layout *l, const struct dp_exec_opts *o,
                 struct dp_exec **out, struct dp_err *err);
void dp__exec_free(struct dp_exec *ex);

/* weights.c: model.safetensors with full (unsharded) tensors, written by rank 0. */
int dp__weights_save(struct dp_exec *ex, const char *file);

/* ex->dm from ex->m, ex->l and ex->c.tp_rank (run.c). */
void dp__dims_init(struct dp_exec *ex);

/* Checkpoints, rank side (ckpt_save.c, ckpt_load.c; the format is ckpt/'s). */
struct dp__ckpt {
    double last_save_s; /* monotonic time of the last save attempt (or of the start) */
    bool cleaned;       /* stale .tmp directories removed */
    bool data_crc_done;
    uint32_t data_crc;
    int saves_tried, saves_ok; /* the same on every rank */
};
/* Before step 1: --ckpt-dir can be created and every rank can write into it (collective:
 * every rank returns the same status; rank 0's err names the cause). */
int dp__ckpt_check_dir(struct dp_exec *ex);
/* Checkpoints this run tried to save, and those it published (the same on every rank). */
void dp__ckpt_counts(const struct dp_exec *ex, int *tried, int *saved);
/* Before the first step: restore the newest complete checkpoint of opts->ckpt->resume;
 * *start gets its step (0 = none); *collective is set when every rank fails alike. */
int dp__ckpt_resume(struct dp_exec *ex, int *start, bool *collective);
/* After step `step`: save when due (a failed save is reported through the event
 * callback, not returned; only MPI failures are). */
int dp__ckpt_after_step(struct dp_exec *ex, int step);
void dp__ckpt_free(struct dp_exec *ex);
/* The per-run state (allocated on first use; the save interval counts from then). */
int dp__ckpt_state(struct dp_exec *ex);
/* CRC32C of the token data (computed once). */
uint32_t dp__ckpt_data_crc(struct dp_exec *ex);
/* The checkpoint's dtype: "F32", or "F64" in the gradient-check build. */
#define DP__DTYPE (sizeof(real) == 8 ? "F64" : "F32")
double dp__mono_s(void);
/* Report a checkpoint event through opts->ckpt->on_event (if set). */
void dp__ckpt_emit(const struct dp_exec *ex, enum dp_ckpt_event_kind kind, int step,
                   const char *path, const char *msg, int64_t bytes, double secs,
                   const char *saved_at);
#define DP__EXEC_PATHMAX 4200

/* Heartbeat (run.c). */
void dp__beat(const char *what);

/* rng.c: counter-based normal N(0,1) for element `idx` of tensor `key`. */
double dp__rng_normal(uint64_t seed, uint64_t key, uint64_t idx);
uint64_t dp__hash_name(const char *s);

#endif
