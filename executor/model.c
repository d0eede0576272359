/*
 * The model on one rank: its parameter slices (ckpt's tensor table: Megatron
 * tensor parallelism) laid out in the flat buffers, their deterministic
 * initialisation, and the forward and backward of the embedding, the
 * transformer layers and the head, written out by hand. The buffers they
 * work in are memplan.c's.
 *
 * Tensor parallelism follows Megatron-LM (Shoeybi et al. 2019, Sec. 3;
 * megatron/core/tensor_parallel/layers.py, mappings.py): QKV and MLP-in are
 * column-parallel (each rank holds heads/tp heads and ffn/tp columns),
 * attention-out and MLP-out are row-parallel with the bias added after the
 * all-reduce; the conjugate f (identity forward, all-reduce backward) sits
 * before each column-parallel GEMM and g (all-reduce forward, identity
 * backward) after each row-parallel one. The embedding and the LM head are
 * split over the (padded) vocabulary; the cross-entropy is computed without
 * gathering the logits (max all-reduce, then one sum all-reduce of the
 * target logit and the sum of exponentials, which Megatron issues as two).
 * Sequence parallelism (Korthikanti et al. 2022, Sec. 4.2.2) replaces f by
 * an all-gather and g by a reduce-scatter along the tokens; norms, the
 * row-parallel biases and learned positions then see a token slice and
 * their gradients are all-reduced over TP after the backward (schedule.c).
 *
 * All tensor work goes through the backend's operations.
 */
#include "internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NONE SIZE_MAX

/* Where a parameter and its gradient are (ZeRO-2/3: the edge or the layer window). The
 * model reads the bf16 / fp16 working copy when there is one (dp__pw, zero <= 2). */
static real *P(struct dp_exec *ex, size_t off)
{
    return dp__pw(ex, off);
}
static real *G(struct dp_exec *ex, size_t off)
{
    return dp__grad(ex, off);
}

/*
 * A tensor a kernel just wrote in fp32 is stored in the run's precision: rounded to
 * bf16 / fp16 in place (README "Mixed precision"). The store points are Megatron's bf16
 * tensors: every norm, GEMM, activation, attention and residual output, the logits and
 * every activation gradient, the TP partial sums before their reduction and the sum
 * after it; not the norm statistics, the cross-entropy's sums (fp32, as Megatron's
 * vocab-parallel cross-entropy upcasts), nor any parameter gradient (fp32 main grads).
 * fp32 runs never call the backend here, so they are bit for bit what they were.
 */
static void store(struct dp_exec *ex, real *x, int64_t n)
{
    if (ex->dtype != DP_DT_FP32)
        OPS->round_store(ex->be, x, n);
}

/* ZeRO-3 keeps no working copy: the gathered windows are one (FSDP's mixed precision
 * casts the shard before its all-gather; rounding after it gives the same values). */
static void store_window(struct dp_exec *ex, int i)
{
    if (ex->dtype != DP_DT_FP32 && ex->l.zero >= 3 && !ex->params)
        store(ex, ex->pwin, (int64_t)(ex->lay_hi[i] - ex->lay_lo[i]));
}

/*
 * The working copy (ZeRO <= 2), once a step from the master: the layers' part packed
 * into 2-byte words (pack rounds as round_store does), the edge rounded in fp32 beside
 * them; each layer's part is unpacked into the fp32 window right before the layer runs
 * (dp__model_work_window), so the kernels read the values the emulation's fp32 copy
 * held, bit for bit (pack16.h), while the resident copy costs 2 bytes a layer weight.
 */
void dp__model_working_copy(struct dp_exec *ex)
{
    if (ex->dtype != DP_DT_FP32 && ex->l.zero >= 3 && !ex->params)
        store(ex, ex->pedge, (int64_t)ex->edge_n); /* the edge, gathered for the step */
    if (ex->pwork) {
        OPS->copy(ex->be, ex->pwork, ex->params, ex->nparams * sizeof(real));
        OPS->round_store(ex->be, ex->pwork, (int64_t)ex->nparams);
    }
    if (!ex->pw16)
        return;
    OPS->copy(ex->be, ex->pwedge, ex->params, ex->edge_lo * sizeof(real));
    OPS->copy(ex->be, ex->pwedge + ex->edge_lo, ex->params + ex->edge_hi,
              (ex->nparams - ex->edge_hi) * sizeof(real));
    OPS->round_store(ex->be, ex->pwedge, (int64_t)ex->edge_n);
    OPS->pack(ex->be, ex->pw16, ex->params + ex->edge_lo, (int64_t)(ex->edge_hi - ex->edge_lo));
    ex->pwwin_layer = -1;
}

void dp__model_work_window(struct dp_exec *ex, int i)
{
    if (!ex->pw16 || ex->pwwin_layer == i)
        return;
    OPS->unpack(ex->be, ex->pwwin, ex->pw16 + (ex->lay_lo[i] - ex->edge_lo),
                (int64_t)(ex->lay_hi[i] - ex->lay_lo[i]));
    ex->pwwin_layer = i;
}

/* ------------------------------------------------------------------ parameters */

/* Where a layer's or the stage's tensor of role `r` is kept (NULL: nowhere). */
static size_t *offset_of(struct dp_exec *ex, const struct dp_ckpt_slice *t)
{
    int li = t->layer >= 0 ? dp__local_layer(ex, t->layer) : -1;
    struct dp_layer_params *p = li >= 0 ? &ex->lp[li] : NULL;
    if (t->layer >= 0 && !p)
        return NULL; /* not a layer of this stage (ckpt's table lists only its own) */
    switch (t->role) {
    case DP_ROLE_WTE: return t->tied_copy ? &ex->head : &ex->wte;
    case DP_ROLE_WPE: return &ex->wpe;
    case DP_ROLE_LNF_W: return &ex->lnf_w;
    case DP_ROLE_LNF_B: return &ex->lnf_b;
    case DP_ROLE_HEAD: return &ex->head;
    case DP_ROLE_LN1_W: return &p->ln1_w;
    case DP_ROLE_LN1_B: return &p->ln1_b;
    case DP_ROLE_WQ: return &p->wqkv; /* k and v follow: the fused local [q; k; v] */
    case DP_ROLE_BQ: return &p->bqkv;
    case DP_ROLE_WO: return &p->wo;
    case DP_ROLE_BO: return &p->bo;
    case DP_ROLE_LN2_W: return &p->ln2_w;
    case DP_ROLE_LN2_B: return &p->ln2_b;
    case DP_ROLE_W1: return &p->w1; /* SwiGLU: up follows, the fused [gate; up] */
    case DP_ROLE_B1: return &p->b1;
    case DP_ROLE_W2: return &p->w2;
    case DP_ROLE_B2: return &p->b2;
    case DP_ROLE_ROUTER: return &p->router;
    case DP_ROLE_ROUTER_BIAS: return &p->router_b;
    case DP_ROLE_QNORM: return &p->qn_w;
    case DP_ROLE_KNORM: return &p->kn_w;
    case DP_ROLE_SH_GATE: return &p->sgate;
    case DP_ROLE_EXP_B1: return p->eb1 == NONE ? &p->eb1 : NULL;
    case DP_ROLE_EXP_B2: return p->eb2 == NONE ? &p->eb2 : NULL;
    case DP_ROLE_SH_W1: return &p->sw1; /* SwiGLU: up follows */
    case DP_ROLE_SH_W2: return &p->sw2;
    /* The first local expert's; the others follow (ckpt/tensors.c moe_table). */
    case DP_ROLE_EXP_W1: return p->ew1 == NONE ? &p->ew1 : NULL;
    case DP_ROLE_EXP_W2: return p->ew2 == NONE ? &p->ew2 : NULL;
    default: return NULL;
    }
}

/* The stage's slices of every tensor (ckpt's table, TP as Megatron) laid out back to
 * back in the flat buffers, in the table's order. */
static int build_segments(struct dp_exec *ex)
{
    struct dp_ckpt_slice *t = NULL;
    int n = 0;
    /* Experts: this rank's only, their slice of its expert tensor group (groups.h). */
    TRY(dp_ckpt_stage_slices_ep(ex->m, &ex->l, ex->c.pp_rank, ex->dm.tp_rank, ex->dm.ep_rank,
                                ex->dm.etp_rank, &t, &n, ex->err));
    ex->wte = ex->wpe = ex->lnf_w = ex->lnf_b = ex->head = NONE;
    ex->lp = calloc((size_t)(ex->nlayers ? ex->nlayers : 1), sizeof *ex->lp);
    ex->segs = calloc((size_t)(n ? n : 1), sizeof *ex->segs);
    if (!ex->lp || !ex->segs) {
        free(t);
        return dp_err_set(ex->err, DP_ENOMEM, "out of memory");
    }
    memset(ex->lp, 0xff, (size_t)(ex->nlayers ? ex->nlayers : 1) * sizeof *ex->lp); /* NONE */
    for (int i = 0; i < n; i++) {
        struct dp_seg *s = &ex->segs[i];
        s->t = t[i];
        s->off = ex->nparams;
        s->decay = t[i].gcols > 1; /* AdamW decays 2-D weights only */
        s->norm_once = t[i].replicated && ex->dm.tp > 1;
        /* The router sees its expert tensor group's tokens: with etp = tp the gathered ones,
         * its gradient whole on every TP rank; with etp < tp each rank adds its own slice's
         * part (moe.c), summed over TP as the norms'. Its bias, the shared gate and the
         * experts' fc2 biases (run with etp = tp only) see the gathered tokens: whole. */
        s->tp_partial = t[i].replicated && ex->dm.sp &&
                        (t[i].role != DP_ROLE_ROUTER || ex->dm.etp < ex->dm.tp) &&
                        t[i].role != DP_ROLE_ROUTER_BIAS && t[i].role != DP_ROLE_SH_GATE &&
                        t[i].role != DP_ROLE_EXP_B2;
        /* The q/k norm weights see this rank's heads only: partial over TP, SP or not. */
        if (t[i].role == DP_ROLE_QNORM || t[i].role == DP_ROLE_KNORM)
            s->tp_partial = ex->dm.tp > 1;
        size_t *at = offset_of(ex, &t[i]);
        if (at)
            *at = s->off;
        ex->nparams += (size_t)(t[i].rows * t[i].cols);
    }
    ex->nsegs = n;
    free(t);
    if (ex->last && ex->m->tied_embeddings && ex->first) {
        ex->head = ex->wte;
        ex->head_is_wte = true;
    }
    return 0;
}

/*
 * GPT-2's initialisation (Radford et al. 2019; Megatron init_method_normal and
 * scaled_init_method_normal): weights and embeddings N(0, 0.02), the two output
 * projections of each layer N(0, 0.02 / sqrt(2 L)), norm weights 1, biases 0. Each
 * element is drawn from (seed, global name, global index), so any slice equals the same
 * slice of the single-process tensor; padded vocabulary rows stay zero.
 */
void dp__init_rows(struct dp_exec *ex, const struct dp_seg *sg, int64_t r0, int64_t r1, real *dst)
{
    const struct dp_ckpt_slice *t = &sg->t;
    int64_t valid = t->rows;
    if (t->out_rows < t->grows) {
        int64_t v = t->out_rows - t->r0;
        valid = v < 0 ? 0 : (v < valid ? v : valid);
    }
    if (r1 > valid)
        r1 = valid;
    if (r1 <= r0)
        return;
    const double std = 0.02, std_out = 0.02 / sqrt(2.0 * (double)ex->m->layers);
    bool ones = t->role == DP_ROLE_LN1_W || t->role == DP_ROLE_LN2_W || t->role == DP_ROLE_LNF_W ||
                t->role == DP_ROLE_QNORM || t->role == DP_ROLE_KNORM;
    double sd = t->gcols == 1 ? 0.0
                : t->role == DP_ROLE_WO || t->role == DP_ROLE_W2 || t->role == DP_ROLE_EXP_W2 ||
                        t->role == DP_ROLE_SH_W2
                    ? std_out
                    : std;
    OPS->init_fill(ex->be, dst, r1 - r0, t->cols, t->gcols, t->r0 + r0, t->c0, ex->o.seed,
                   dp__hash_name(t->name), sd, ones ? 1.0 : 0.0);
}

static void init_params(struct dp_exec *ex)
{
    if (ex->l.zero >= 3) {
        dp__shard_init(ex); /* only this rank's shard exists */
        return;
    }
    for (int i = 0; i < ex->nsegs; i++)
        dp__init_rows(ex, &ex->segs[i], 0, ex->segs[i].t.rows, ex->params + ex->segs[i].off);
}

int dp__model_build(struct dp_exec *ex)
{
    TRY(build_segments(ex));
    TRY(dp__shard_buckets(ex));
    return dp__overlap_build(ex);
}

void dp__model_init(struct dp_exec *ex)
{
    init_params(ex);
}

void dp__model_release(struct dp_exec *ex)
{
    free(ex->segs);
    free(ex->lp);
    free(ex->lay_lo);
    free(ex->lay_hi);
    free(ex->cnt);
    free(ex->zr);
    dp__moe_release(ex); /* every path that built the model: run, predict, schedule */
    dp__overlap_release(ex);
    ex->segs = NULL;
    ex->lp = NULL;
    ex->lay_lo = ex->lay_hi = NULL;
    ex->cnt = NULL;
}

/* ------------------------------------------------------------------ TP helpers */

/* SP: all-gather the token slices [Nl, h] into dst [N, h]; else return src. */
const real *dp__gather_tokens(struct dp_exec *ex, const real *src, real *dst, int *rc)
{
    const struct dp_dims *dm = &ex->dm;
    if (!dm->sp)
        return src;
    int64_t chunk = dm->Nl * dm->h;
    OPS->copy(ex->be, dst + dm->tp_rank * chunk, src, (size_t)chunk * sizeof(real));
    *rc = OPS->allgather(ex->be, DP_GROUP_TP, dst, chunk, ex->err);
    return dst;
}

/* Sum the partial [N, h] results of the TP ranks: all-reduce (g forward, f backward),
 * or under SP reduce-scatter so buf[0, Nl h) holds this rank's tokens. */
int dp__reduce_tokens(struct dp_exec *ex, real *buf)
{
    const struct dp_dims *dm = &ex->dm;
    if (dm->tp == 1)
        return 0;
    store(ex, buf, dm->N * dm->h); /* the message: a bf16 tensor on the wire */
    int rc = dm->sp ? OPS->reduce_scatter(ex->be, DP_GROUP_TP, buf, dm->Nl * dm->h, ex->err)
                    : OPS->allreduce(ex->be, DP_GROUP_TP, buf, dm->N * dm->h, DP_OP_SUM, ex->err);
    if (!rc)
        store(ex, buf, dm->sp ? dm->Nl * dm->h : dm->N * dm->h); /* the reduced tensor */
    return rc;
}

#define gather_tokens dp__gather_tokens
#define reduce_tokens dp__reduce_tokens

bool dp__layer_moe(const struct dp_exec *ex, int i)
{
    return dp_model_layer_kind(ex->m, i) == DP_LAYER_MOE;
}

/* ------------------------------------------------------------------ layers */

/*
 * A GEMM of a transformer layer's linear (QKV, out-projection, MLP; not the attention
 * core, the norms or the output layer, which stay bf16 as under Transformer Engine's
 * fp8_autocast). `grad`: op(A) is an activation gradient (dgrad and wgrad: dY W and
 * dY^T X), quantised to ex->f8_grad; every other operand (X, W) is a forward tensor,
 * E4M3 (TE Format.HYBRID). Without FP8 it is the plain gemm.
 */
static void lin_gemm(struct dp_exec *ex, bool grad, bool ta, bool tb, int m, int n, int k,
                     const real *a, int lda, const real *b, int ldb, real beta, real *c, int ldc)
{
    if (ex->fp8)
        OPS->gemm_fp8(ex->be, ta, tb, m, n, k, 1, a, lda, grad ? ex->f8_grad : DP_F8_E4M3, b, ldb,
                      DP_F8_E4M3, beta, c, ldc);
    else
        OPS->gemm(ex->be, ta, tb, m, n, k, 1, a, lda, b, ldb, beta, c, ldc);
}

/* Column-parallel linear: y [N, n] = x W^T + b. The bias (if any) is written first and the
 * GEMM adds to it (beta = 1): one pass over y fewer than clearing it and adding b later;
 * a backend with gemm_bias adds it in the GEMM's epilogue instead (no pass at all). */
static void linear_fwd(struct dp_exec *ex, real *y, const real *x, size_t wt, size_t b, int n,
                       int k)
{
    const int N = (int)ex->dm.N;
    real beta = 0;
    if (b != NONE && OPS->gemm_bias && !ex->fp8) { /* the GEMM's epilogue adds it */
        OPS->gemm_bias(ex->be, false, true, N, n, k, x, k, P(ex, wt), k, P(ex, b), y, n);
        return;
    }
    if (b != NONE) {
        OPS->bias_fill(ex->be, y, P(ex, b), N, n);
        beta = 1;
    }
    lin_gemm(ex, false, false, true, N, n, k, x, k, P(ex, wt), k, beta, y, n);
}

/* Row-parallel linear and residual: out [Nl, h] = res + x W^T + b. Without TP the GEMM
 * adds straight into out = res + b; with TP the partial products are summed in w->tmp
 * first (all-reduce, or reduce-scatter under SP) and the bias comes after the sum. */
static int linear_residual(struct dp_exec *ex, real *out, const real *res, const real *x, size_t wt,
                           size_t b, int k)
{
    const struct dp_dims *dm = &ex->dm;
    const int N = (int)dm->N, h = (int)dm->h;
    if (dm->tp == 1) {
        OPS->residual(ex->be, out, res, NULL, P(ex, b), dm->Nl, dm->h);
        lin_gemm(ex, false, false, true, N, h, k, x, k, P(ex, wt), k, 1, out, h);
        store(ex, out, dm->Nl * dm->h);
        return 0;
    }
    lin_gemm(ex, false, false, true, N, h, k, x, k, P(ex, wt), k, 0, ex->w.tmp, h);
    int rc = reduce_tokens(ex, ex->w.tmp);
    if (rc)
        return rc;
    OPS->residual(ex->be, out, res, ex->w.tmp, P(ex, b), dm->Nl, dm->h);
    store(ex, out, dm->Nl * dm->h);
    return 0;
}

/*
 * One transformer layer forward (pre-norm): x2 = x + Attn(Norm1(x)), y = x2 +
 * MLP(Norm2(x2)). `recompute` (full recompute, in backward) stops once the MLP
 * activation is computed: the second MLP GEMM is not needed for the backward.
 */
static int layer_forward(struct dp_exec *ex, const struct dp_layer_params *p, struct dp_act *A,
                         real *out, bool recompute)
{
    const struct dp_dims *dm = &ex->dm;
    const struct dp_model *m = ex->m;
    struct dp_backend *be = ex->be;
    struct dp_work *w = &ex->w;
    const int h = (int)dm->h;
    int rc = 0;

    OPS->norm_fwd(be, m->norm, A->ln1, A->ln1_st, A->x, P(ex, p->ln1_w), P(ex, p->ln1_b), dm->Nl,
                  dm->h);
    store(ex, A->ln1, dm->Nl * dm->h);
    const real *g1 = gather_tokens(ex, A->ln1, w->tmp, &rc);
    TRY(rc);
    linear_fwd(ex, A->qkv, g1, p->wqkv, p->bqkv, (int)dm->qkvd, h);
    store(ex, A->qkv, dm->N * dm->qkvd);
    if (p->qn_w != NONE) { /* Qwen3: RMSNorm of each q and k head, before RoPE */
        OPS->qk_norm_fwd(be, A->qkv, dm->qkvd, A->qkraw, A->qkrs, P(ex, p->qn_w), P(ex, p->kn_w),
                         dm->N, dm->a, dm->g, (int)dm->d);
        store(ex, A->qkv, dm->N * dm->qkvd);
    }
    if (m->pos == DP_POS_ROPE) {
        OPS->rope(be, A->qkv, dm->qkvd, dm->N, dm->T, dm->a, dm->g, (int)dm->d, w->rope, false);
        store(ex, A->qkv, dm->N * dm->qkvd);
    }
    /* Attention as one fused kernel (flash attention's bf16 in and out, fp32 softmax
     * inside): only its output is stored, not the probabilities. */
    if (dm->cp > 1) {
        TRY(dp__cp_attn_fwd(ex, A->qkv, A->ctx, A->lse)); /* ring attention (cp.c) */
    } else if (ex->flash) {
        OPS->attn_flash_fwd(be, A->ctx, A->lse, A->qkv, dm->B, dm->T, dm->a, dm->g, (int)dm->d);
    } else {
        real *probs = A->probs ? A->probs : w->probs;
        OPS->attn_fwd(be, A->ctx, probs, A->qkv, dm->B, dm->T, dm->a, dm->g, (int)dm->d);
    }
    store(ex, A->ctx, dm->N * dm->qd);
    TRY(linear_residual(ex, A->x2, A->x, A->ctx, p->wo, p->bo, (int)dm->qd));

    OPS->norm_fwd(be, m->norm, A->ln2, A->ln2_st, A->x2, P(ex, p->ln2_w), P(ex, p->ln2_b), dm->Nl,
                  dm->h);
    store(ex, A->ln2, dm->Nl * dm->h);
    const real *g2 = gather_tokens(ex, A->ln2, w->tmp, &rc);
    TRY(rc);
    if (p->router != NONE)
        return dp__moe_forward(ex, p, A, g2, recompute ? NULL : out);
    linear_fwd(ex, A->fc1, g2, p->w1, p->b1, (int)dm->F1, h);
    store(ex, A->fc1, dm->N * dm->F1);
    OPS->act_fwd(be, m->ffn, A->act, A->fc1, dm->N, dm->f);
    store(ex, A->act, dm->N * dm->f);
    if (recompute)
        return 0;
    return linear_residual(ex, out, A->x2, A->act, p->w2, p->b2, (int)dm->f);
}

/* Backward of one layer: w->dres holds dL/dy on entry and dL/dx on return. */
static int layer_backward(struct dp_exec *ex, const struct dp_layer_params *p, struct dp_act *A)
{
    const struct dp_dims *dm = &ex->dm;
    const struct dp_model *m = ex->m;
    struct dp_backend *be = ex->be;
    struct dp_work *w = &ex->w;
    const int N = (int)dm->N, h = (int)dm->h, f = (int)dm->f, F1 = (int)dm->F1;
    const int qd = (int)dm->qd, qkvd = (int)dm->qkvd;
    int rc = 0;

    /* MLP: y = x2 + act W2^T + b2, act = act(fc1), fc1 = Norm2(x2) W1^T + b1. */
    const real *dy = NULL;
    if (p->router != NONE) {
        TRY(dp__moe_backward(ex, p, A));
        goto norm2;
    }
    if (p->b2 != NONE)
        OPS->bias_grad(be, G(ex, p->b2), w->dres, dm->Nl, dm->h);
    dy = gather_tokens(ex, w->dres, w->dgath, &rc);
    TRY(rc);
    lin_gemm(ex, true, false, false, N, f, h, dy, h, P(ex, p->w2), f, 0, w->dact, f);
    store(ex, w->dact, dm->N * dm->f);
    lin_gemm(ex, true, true, false, h, f, N, dy, h, A->act, f, 1, G(ex, p->w2), f);
    /* GELU: dfc1 in place of dact (same shape; the written lines are already in cache). */
    real *dfc1 = m->ffn == DP_FFN_GELU ? w->dact : w->dfc1;
    OPS->act_bwd(be, m->ffn, dfc1, G(ex, p->b1), w->dact, A->fc1, dm->N, dm->f);
    store(ex, dfc1, dm->N * dm->F1);
    const real *g2 = gather_tokens(ex, A->ln2, w->tmp, &rc);
    TRY(rc);
    lin_gemm(ex, true, true, false, F1, h, N, dfc1, F1, g2, h, 1, G(ex, p->w1), h);
    lin_gemm(ex, true, false, false, N, h, F1, dfc1, F1, P(ex, p->w1), h, 0, w->dtmp, h);
    if (dm->tp == 1)
        store(ex, w->dtmp, dm->N * dm->h); /* else reduce_tokens stores it */
    TRY(reduce_tokens(ex, w->dtmp));
norm2:
    OPS->norm_bwd(be, m->norm, w->dres, G(ex, p->ln2_w), G(ex, p->ln2_b), w->dtmp, A->x2,
                  P(ex, p->ln2_w), A->ln2_st, dm->Nl, dm->h);
    store(ex, w->dres, dm->Nl * dm->h);

    /* Attention: x2 = x + ctx Wo^T + bo, ctx = attn(qkv), qkv = Norm1(x) Wqkv^T + bqkv. */
    if (p->bo != NONE)
        OPS->bias_grad(be, G(ex, p->bo), w->dres, dm->Nl, dm->h);
    dy = gather_tokens(ex, w->dres, w->dgath, &rc);
    TRY(rc);
    lin_gemm(ex, true, false, false, N, qd, h, dy, h, P(ex, p->wo), qd, 0, w->dctx, qd);
    store(ex, w->dctx, dm->N * dm->qd);
    lin_gemm(ex, true, true, false, h, qd, N, dy, h, A->ctx, qd, 1, G(ex, p->wo), qd);
    if (dm->cp > 1) {
        TRY(dp__cp_attn_bwd(ex, w->dqkv, w->dctx, A->qkv, A->ctx, A->lse));
    } else if (ex->flash) {
        /* Nothing to recompute under selective recompute: lse is kept (memplan.c). */
        OPS->attn_flash_bwd(be, w->dqkv, w->cpst, w->dctx, A->qkv, A->ctx, A->lse, dm->B, dm->T,
                            dm->a, dm->g, (int)dm->d);
    } else {
        const real *probs = A->probs;
        if (!probs) {
            /* Selective recompute (Korthikanti et al. 2022, Sec. 5): the attention
             * probabilities were not kept; recompute them from the kept q and k. */
            OPS->attn_probs(be, w->probs, A->qkv, dm->B, dm->T, dm->a, dm->g, (int)dm->d);
            probs = w->probs;
        }
        OPS->attn_bwd(be, w->dqkv, w->dprobs, w->dctx, A->qkv, probs, dm->B, dm->T, dm->a, dm->g,
                      (int)dm->d);
    }
    store(ex, w->dqkv, dm->N * dm->qkvd);
    if (m->pos == DP_POS_ROPE) {
        OPS->rope(be, w->dqkv, dm->qkvd, dm->N, dm->T, dm->a, dm->g, (int)dm->d, w->rope, true);
        store(ex, w->dqkv, dm->N * dm->qkvd);
    }
    if (p->qn_w != NONE) {
        OPS->qk_norm_bwd(be, w->dqkv, dm->qkvd, G(ex, p->qn_w), G(ex, p->kn_w), A->qkraw, A->qkrs,
                         P(ex, p->qn_w), P(ex, p->kn_w), dm->N, dm->a, dm->g, (int)dm->d);
        store(ex, w->dqkv, dm->N * dm->qkvd);
    }
    if (p->bqkv != NONE)
        OPS->bias_grad(be, G(ex, p->bqkv), w->dqkv, dm->N, dm->qkvd);
    const real *g1 = gather_tokens(ex, A->ln1, w->tmp, &rc);
    TRY(rc);
    lin_gemm(ex, true, true, false, qkvd, h, N, w->dqkv, qkvd, g1, h, 1, G(ex, p->wqkv), h);
    lin_gemm(ex, true, false, false, N, h, qkvd, w->dqkv, qkvd, P(ex, p->wqkv), h, 0, w->dtmp, h);
    if (dm->tp == 1)
        store(ex, w->dtmp, dm->N * dm->h);
    TRY(reduce_tokens(ex, w->dtmp));
    OPS->norm_bwd(be, m->norm, w->dres, G(ex, p->ln1_w), G(ex, p->ln1_b), w->dtmp, A->x,
                  P(ex, p->ln1_w), A->ln1_st, dm->Nl, dm->h);
    store(ex, w->dres, dm->Nl * dm->h);
    return 0;
}

/* ------------------------------------------------------------------ embedding, head */

static int embed_forward(struct dp_exec *ex, struct dp_slot *s)
{
    const struct dp_dims *dm = &ex->dm;
    struct dp_backend *be = ex->be;
    real *out = s->layers[0].x;
    if (!dm->sp) {
        OPS->embed_fwd(be, out, s->inputs, P(ex, ex->wte), dm->v0, dm->Vl, dm->N, dm->h);
        TRY(reduce_tokens(ex, out));
    } else {
        OPS->embed_fwd(be, ex->w.tmp, s->inputs, P(ex, ex->wte), dm->v0, dm->Vl, dm->N, dm->h);
        TRY(reduce_tokens(ex, ex->w.tmp));
        OPS->copy(be, out, ex->w.tmp, (size_t)(dm->Nl * dm->h) * sizeof(real));
    }
    if (ex->wpe != NONE)
        dp__cp_pos_fwd(ex, out, P(ex, ex->wpe), dm->sp ? dm->tp_rank * dm->Nl : 0, dm->Nl);
    store(ex, out, dm->Nl * dm->h);
    return 0;
}

static int embed_backward(struct dp_exec *ex, struct dp_slot *s)
{
    const struct dp_dims *dm = &ex->dm;
    int rc = 0;
    if (ex->wpe != NONE)
        dp__cp_pos_bwd(ex, G(ex, ex->wpe), ex->w.dres, dm->sp ? dm->tp_rank * dm->Nl : 0, dm->Nl);
    const real *dx = gather_tokens(ex, ex->w.dres, ex->w.dgath, &rc);
    TRY(rc);
    OPS->embed_bwd(ex->be, G(ex, ex->wte), s->inputs, dx, dm->v0, dm->Vl, dm->N, dm->h);
    return 0;
}

/* Final norm, LM head and loss; leaves dloss/dlogits in hd.logits. */
static int head_forward(struct dp_exec *ex, struct dp_slot *s)
{
    const struct dp_dims *dm = &ex->dm;
    struct dp_backend *be = ex->be;
    struct dp_head *hd = &ex->hd;
    int rc = 0;
    OPS->norm_fwd(be, ex->m->norm, hd->lnf, hd->lnf_st, hd->xf, P(ex, ex->lnf_w), P(ex, ex->lnf_b),
                  dm->Nl, dm->h);
    store(ex, hd->lnf, dm->Nl * dm->h);
    const real *gf = gather_tokens(ex, hd->lnf, ex->w.tmp, &rc);
    TRY(rc);
    OPS->gemm(be, false, true, (int)dm->N, (int)dm->Vl, (int)dm->h, 1, gf, (int)dm->h,
              P(ex, ex->head), (int)dm->h, 0, hd->logits, (int)dm->Vl);
    store(ex, hd->logits, dm->N * dm->Vl);
    real *rowmax = hd->ce, *sums = hd->ce + dm->N, *loss = hd->ce + 3 * dm->N;
    /* The loss is the mean over the global batch's tokens; fp16 scales its gradient by
     * the loss scale (undone before clipping: run.c). */
    real dloss = (real)(1.0 / (double)ex->gbs_tokens);
    if (ex->dtype == DP_DT_FP16)
        dloss = (real)(ex->ls_scale / (double)ex->gbs_tokens);
    if (dm->tp == 1 && OPS->ce_fused) { /* the whole vocabulary here: one fused pass */
        OPS->ce_fused(be, hd->logits, loss, s->targets, dm->N, dm->Vl, dm->vocab, dloss);
    } else {
        OPS->ce_max(be, rowmax, hd->logits, dm->N, dm->Vl, dm->v0, dm->vocab);
        TRY(OPS->allreduce(be, DP_GROUP_TP, rowmax, dm->N, DP_OP_MAX, ex->err));
        OPS->ce_sums(be, sums, hd->logits, rowmax, s->targets, dm->N, dm->Vl, dm->v0, dm->vocab);
        TRY(OPS->allreduce(be, DP_GROUP_TP, sums, 2 * dm->N, DP_OP_SUM, ex->err));
        OPS->ce_grad(be, hd->logits, loss, rowmax, sums, s->targets, dm->N, dm->Vl, dm->v0,
                     dm->vocab, dloss);
    }
    store(ex, hd->logits, dm->N * dm->Vl); /* dlogits */
    ex->loss_sum += OPS->sum(be, loss, dm->N);
    return 0;
}

static int head_backward(struct dp_exec *ex)
{
    const struct dp_dims *dm = &ex->dm;
    struct dp_backend *be = ex->be;
    struct dp_head *hd = &ex->hd;
    const int N = (int)dm->N, h = (int)dm->h, V = (int)dm->Vl;
    int rc = 0;
    const real *gf = gather_tokens(ex, hd->lnf, ex->w.tmp, &rc);
    TRY(rc);
    OPS->gemm(be, true, false, V, h, N, 1, hd->logits, V, gf, h, 1, G(ex, ex->head), h);
    OPS->gemm(be, false, false, N, h, V, 1, hd->logits, V, P(ex, ex->head), h, 0, ex->w.dtmp, h);
    if (dm->tp == 1)
        store(ex, ex->w.dtmp, dm->N * dm->h);
    TRY(reduce_tokens(ex, ex->w.dtmp));
    OPS->zero(be, ex->w.dres, (size_t)(dm->Nl * dm->h) * sizeof(real));
    OPS->norm_bwd(be, ex->m->norm, ex->w.dres, G(ex, ex->lnf_w), G(ex, ex->lnf_b), ex->w.dtmp,
                  hd->xf, P(ex, ex->lnf_w), hd->lnf_st, dm->Nl, dm->h);
    store(ex, ex->w.dres, dm->Nl * dm->h);
    return 0;
}

/* ------------------------------------------------------------------ stage */

static struct dp_act *layer_set(struct dp_exec *ex, struct dp_slot *s, int i)
{
    if (ex->l.recompute != DP_RECOMPUTE_FULL)
        return &s->layers[i];
    /* Full recompute: work in the shared set; only the input lives in the slot. */
    ex->w.rc.x = s->layers[i].x;
    return &ex->w.rc;
}

/*
 * The 2-byte stash (ex->stash16): layer j of slot s runs in the fp32 set w.rc, whose
 * statistics, log-sum-exp and probabilities are the slot's own (fp32), and whose input
 * is the slot's x for the first layer (where the embedding and the pipeline write) or
 * w.xa. After the forward its stored tensors are packed into the slot's words, before
 * the backward unpacked: they were rounded at their store points, so the words hold
 * them exactly (pack16.h) and the backward reads the values the fp32 slot held.
 */
static struct dp_act *stash_set(struct dp_exec *ex, struct dp_slot *s, int j)
{
    struct dp_act *A = &ex->w.rc;
    const struct dp_act *S = &s->layers[j];
    A->x = j == 0 ? S->x : ex->w.xa;
    A->ln1_st = S->ln1_st;
    A->ln2_st = S->ln2_st;
    A->lse = S->lse;
    A->probs = S->probs;
    A->qkraw = S->qkraw;
    A->qkrs = S->qkrs;
    return A;
}

/* The stash's tensors of one layer: pack (to the slot's words) or unpack (from them). */
static void stash_move(struct dp_exec *ex, struct dp_act *S, struct dp_act *A, bool pack)
{
    const struct dp_dims *dm = &ex->dm;
    struct {
        real *r;
        uint16_t *h;
        int64_t n;
    } t[8] = {{A->x, S->hx, dm->Nl * dm->h},       {A->ln1, S->hln1, dm->Nl * dm->h},
              {A->qkv, S->hqkv, dm->N * dm->qkvd}, {A->ctx, S->hctx, dm->N * dm->qd},
              {A->x2, S->hx2, dm->Nl * dm->h},     {A->ln2, S->hln2, dm->Nl * dm->h},
              {A->fc1, S->hfc1, dm->N * dm->F1},   {A->act, S->hact, dm->N * dm->f}};
    for (int k = 0; k < 8; k++) {
        if (!t[k].h) /* the first layer's x: the slot's own fp32 */
            continue;
        if (pack)
            OPS->pack(ex->be, t[k].h, t[k].r, t[k].n);
        else
            OPS->unpack(ex->be, t[k].r, t[k].h, t[k].n);
    }
}

int dp__stage_forward(struct dp_exec *ex, struct dp_slot *s)
{
    const int c = s->chunk, l0 = ex->ch_l0[c], n = ex->ch_n[c];
    const bool emb = ex->first && c == 0, loss = ex->last && c == ex->nch - 1;
    if (emb)
        TRY(embed_forward(ex, s));
    for (int j = 0; j < n; j++) {
        real *out = j + 1 < n ? (ex->stash16 ? ex->w.xb : s->layers[j + 1].x)
                    : loss    ? ex->hd.xf
                              : ex->send_fwd;
        TRY(dp__shard_layer_fwd(ex, l0 + j));
        store_window(ex, l0 + j);
        dp__model_work_window(ex, l0 + j);
        TRY(dp__shard_prefetch(ex, j + 1 < n ? l0 + j + 1 : -1));
        struct dp_act *A = ex->stash16 ? stash_set(ex, s, j) : layer_set(ex, s, j);
        TRY(layer_forward(ex, &ex->lp[l0 + j], A, out, false));
        if (ex->stash16) {
            stash_move(ex, &s->layers[j], A, true);
            real *t = ex->w.xa; /* the output is the next layer's input */
            ex->w.xa = ex->w.xb;
            ex->w.xb = t;
        }
    }
    if (loss)
        TRY(head_forward(ex, s));
    return 0;
}

int dp__stage_backward(struct dp_exec *ex, struct dp_slot *s)
{
    const int c = s->chunk, l0 = ex->ch_l0[c], n = ex->ch_n[c];
    if (ex->last && c == ex->nch - 1)
        TRY(head_backward(ex));
    for (int j = n - 1; j >= 0; j--) {
        struct dp_act *A = ex->stash16 ? stash_set(ex, s, j) : layer_set(ex, s, j);
        if (ex->stash16)
            stash_move(ex, &s->layers[j], A, false);
        TRY(dp__shard_layer_bwd_begin(ex, l0 + j));
        store_window(ex, l0 + j);
        dp__model_work_window(ex, l0 + j);
        TRY(dp__shard_prefetch(ex, j > 0 ? l0 + j - 1 : -1));
        if (ex->l.recompute == DP_RECOMPUTE_FULL)
            TRY(layer_forward(ex, &ex->lp[l0 + j], A, NULL, true));
        TRY(layer_backward(ex, &ex->lp[l0 + j], A));
        TRY(dp__shard_layer_bwd_end(ex, l0 + j));
        TRY(dp__overlap_layer_bwd_end(ex, s, l0 + j));
    }
    if (ex->first && c == 0)
        TRY(embed_backward(ex, s));
    return 0;
}

void dp__stage_place(struct dp_exec *ex, int stage)
{
    ex->first = stage == 0;
    ex->last = stage == dp_layout_head_rank(&ex->l); /* DualPipeV: rank 0 */
    /* With interleaving stage r holds model chunks r, r + pp, ...: its layers are the
     * chunks' in model order, not one range (core/layout.h dp_layout_chunk_layers). */
    ex->nch = ex->l.vpp > 1 ? ex->l.vpp : 1;
    if (ex->nch > DP_MAX_CHUNKS)
        ex->nch = DP_MAX_CHUNKS; /* the layout validator refuses pp vpp above it */
    ex->nlayers = 0;
    for (int c = 0; c < ex->nch; c++) {
        int g0 = 0, n = 0;
        dp_layout_chunk_layers(&ex->l, ex->m, stage, c, &g0, &n);
        ex->ch_l0[c] = ex->nlayers;
        ex->ch_n[c] = n;
        ex->ch_g0[c] = g0;
        ex->nlayers += n;
    }
    ex->layer0 = ex->ch_g0[0];
}

int dp__local_layer(const struct dp_exec *ex, int g)
{
    for (int c = 0; c < ex->nch; c++)
        if (g >= ex->ch_g0[c] && g < ex->ch_g0[c] + ex->ch_n[c])
            return ex->ch_l0[c] + (g - ex->ch_g0[c]);
    return -1;
}
