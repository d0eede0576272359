/*
 * executor internals shared by its files and its tests (gradient check,
 * memory accounting); not for other modules.
 */
#ifndef DPLAN_EXECUTOR_INTERNAL_H
#define DPLAN_EXECUTOR_INTERNAL_H

#include "backend.h"
#include "executor.h"

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

enum dp_init { DP_INIT_NORMAL = 0, DP_INIT_ONES = 1, DP_INIT_ZEROS = 2 };

/*
 * One local parameter tensor: the slice [r0, r0 + rows) x [c0, c0 + cols) of the
 * global tensor `name` (grows x gcols; vectors have gcols = cols = 1... stored as rows).
 */
struct dp_seg {
    char name[48];
    size_t off;         /* elements into the flat buffers */
    int64_t rows, cols; /* local */
    int64_t grows, gcols;
    int64_t r0, c0;
    int64_t out_rows; /* global rows written to the weights file (unpadded vocab) */
    enum dp_init init;
    double std;
    bool decay;      /* AdamW weight decay (2-D weights) */
    bool tp_partial; /* replicated over TP but its gradient is partial under SP */
    bool norm_once;  /* replicated over TP: counted in the grad norm on tp_rank 0 only */
    bool norm_skip;  /* not counted at all (the last stage's copy of a tied embedding) */
};

/* Offsets (elements) of a layer's parameters in the flat buffer; SIZE_MAX if absent. */
struct dp_layer_params {
    size_t ln1_w, ln1_b, wqkv, bqkv, wo, bo, ln2_w, ln2_b, w1, b1, w2, b2;
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
    bool sp; /* sequence parallel active (tp > 1) */
};

/* ------------------------------------------------------------------ activations */

/* One layer's activations kept for backward (NULL = not kept under this recompute). */
struct dp_act {
    real *x;            /* [Nl, h] layer input (the residual stream) */
    real *ln1, *ln1_st; /* [Nl, h], [2 Nl] */
    real *qkv;          /* [N, qkvd] after RoPE */
    real *probs;        /* [B, a, T, T] (recompute none) */
    real *ctx;          /* [N, qd] */
    real *x2;           /* [Nl, h] residual after attention */
    real *ln2, *ln2_st; /* [Nl, h], [2 Nl] */
    real *fc1;          /* [N, F1] */
    real *act;          /* [N, f] */
};

/* A micro-batch in flight on this stage. */
struct dp_slot {
    struct dp_act *layers; /* nlayers */
    int32_t *inputs;       /* [N] first stage */
    int32_t *targets;      /* [N] last stage */
    void *mem;             /* one allocation holding all of the above */
    size_t bytes;
    int mb; /* micro-batch index, -1 when free */
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
    struct dp_act rc; /* full recompute: one layer's activations (x aliases the slot) */
    void *rc_mem;     /* the allocation behind rc */
    real *rope;       /* [2, T, d/2] cos, sin */
};

struct dp_head {
    real *xf;           /* [Nl, h] last layer output */
    real *lnf, *lnf_st; /* [Nl, h], [2 Nl] */
    real *logits;       /* [N, Vl]; dlogits after the loss */
    real *ce;           /* [4 N]: rowmax, target logit, sum-exp, loss */
};

/* ------------------------------------------------------------------ the rank */

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
    bool first, last;    /* pipeline stage has the embedding / the head */
    int64_t M;           /* micro-batches per step per DP rank */
    int64_t gbs_tokens;  /* gbs * seq_len */

    /* parameters */
    struct dp_seg *segs;
    int nsegs, capsegs;
    size_t nparams;   /* elements used */
    size_t nflat;     /* buffer length: nparams padded to a multiple of dp under ZeRO-1 */
    size_t shard;     /* optimizer elements: nflat / dp (ZeRO-1) or nparams */
    size_t shard_off; /* first flat element of this rank's shard */
    real *params, *grads, *adam_m, *adam_v;
    struct dp_layer_params *lp;
    size_t wte, wpe, lnf_w, lnf_b, head; /* SIZE_MAX if not on this stage */
    bool head_is_wte;                    /* tied embeddings on a single stage */

    /* activations */
    struct dp_slot *slots;
    int nslots, maxslots;
    size_t slot_bytes;
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
    double grad_sumsq; /* global squared gradient norm of the step */
    int32_t *host_tok; /* [2 N] host staging for one micro-batch's inputs and targets */
    uint64_t adam_t;
    struct dp__ckpt *ck; /* checkpoint state (ckpt.c), NULL until used */
};

/* ZeRO-1: the part [*lo, *hi) of segment sg's flat range [off, off + rows cols) that lies in
 * this rank's shard [shard_off, shard_off + shard); false when they do not overlap. */
static inline bool dp__seg_in_shard(const struct dp_exec *ex, const struct dp_seg *sg, size_t *lo,
                                    size_t *hi)
{
    size_t a = sg->off, b = sg->off + (size_t)(sg->rows * sg->cols);
    *lo = a > ex->shard_off ? a : ex->shard_off;
    *hi = b < ex->shard_off + ex->shard ? b : ex->shard_off + ex->shard;
    return *lo < *hi;
}

/* model.c */
int dp__model_build(struct dp_exec *ex); /* segments, flat buffers, init */
int dp__acts_build(struct dp_exec *ex);  /* work, head, send buffers */
struct dp_slot *dp__slot_acquire(struct dp_exec *ex, int mb);
void dp__slot_release(struct dp_exec *ex, struct dp_slot *s);
void dp__model_release(struct dp_exec *ex);
/* Pipeline stage `stage`'s place: first, last, layer0 and nlayers (ex->l and ex->m set). */
void dp__stage_place(struct dp_exec *ex, int stage);
/* The segment list of any stage as its tp_rank 0 builds it (caller frees *segs). */
int dp__segments_for_stage(const struct dp_exec *ex, int stage, struct dp_seg **segs, int *n);
/* Forward of the stage's part for one micro-batch in `s`: embedding (first stage),
 * layers, and on the last stage the head with the loss and dlogits. The stage output
 * goes to ex->send_fwd (not last stage). */
int dp__stage_forward(struct dp_exec *ex, struct dp_slot *s);
/* Backward: ex->w.dres holds the output gradient (not last stage); on return it holds
 * the input gradient (not first stage). */
int dp__stage_backward(struct dp_exec *ex, struct dp_slot *s);

/* schedule.c */
/* Load micro-batch `mb` of step `step` into slot tokens (first/last stage). */
void dp__load_batch(struct dp_exec *ex, struct dp_slot *s, int step, int mb);
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

/* Create / free a rank's executor (backend included) without running it. */
int dp__exec_new(const struct dp_model *m, const struct dp_layout *l, const struct dp_exec_opts *o,
                 struct dp_exec **out, struct dp_err *err);
void dp__exec_free(struct dp_exec *ex);

/* weights.c: model.safetensors with full (unsharded) tensors, written by rank 0. */
int dp__weights_save(struct dp_exec *ex, const char *file);

/* ckpt.c: checkpoints (ckpt.h). Before the first step: restore the newest complete
 * checkpoint of opts->ckpt->resume; *start gets its step (0 = none); *collective is set
 * when every rank fails alike. After step `step`: save when due (a failed save is
 * reported through the event callback, not returned; only MPI failures are). */
/* ex->dm from ex->m, ex->l and ex->c.tp_rank (run.c). */
void dp__dims_init(struct dp_exec *ex);
/* Before step 1: --ckpt-dir can be created and every rank can write into it (collective:
 * every rank returns the same status; rank 0's err names the cause). */
int dp__ckpt_check_dir(struct dp_exec *ex);
/* Checkpoints this run tried to save, and those it published (the same on every rank). */
void dp__ckpt_counts(const struct dp_exec *ex, int *tried, int *saved);
int dp__ckpt_resume(struct dp_exec *ex, int *start, bool *collective);
int dp__ckpt_after_step(struct dp_exec *ex, int step);
void dp__ckpt_free(struct dp_exec *ex);

/* Heartbeat (run.c). */
void dp__beat(const char *what);

/* rng.c: counter-based normal N(0,1) for element `idx` of tensor `key`. */
double dp__rng_normal(uint64_t seed, uint64_t key, uint64_t idx);
uint64_t dp__hash_name(const char *s);

#endif
