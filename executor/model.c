/*
 * The model on one rank: its parameter slices (Megatron tensor parallelism),
 * their deterministic initialisation, the activation buffers of the buffer
 * table (README.md), and the forward and backward of the embedding, the
 * transformer layers and the head, written out by hand.
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

static real *P(struct dp_exec *ex, size_t off)
{
    return off == NONE ? NULL : ex->params + off;
}
static real *G(struct dp_exec *ex, size_t off)
{
    return off == NONE ? NULL : ex->grads + off;
}

/* ------------------------------------------------------------------ parameters */

struct segdef {
    const char *name;
    int64_t rows, cols, grows, gcols, r0, c0, out_rows;
    enum dp_init init;
    double std;
    bool decay, replicated, skip;
};

static size_t add_seg(struct dp_exec *ex, const struct segdef *d)
{
    if (ex->nsegs == ex->capsegs) {
        int cap = ex->capsegs ? 2 * ex->capsegs : 64;
        struct dp_seg *s = realloc(ex->segs, (size_t)cap * sizeof *s);
        if (!s)
            return NONE;
        ex->segs = s;
        ex->capsegs = cap;
    }
    struct dp_seg *s = &ex->segs[ex->nsegs++];
    memset(s, 0, sizeof *s);
    snprintf(s->name, sizeof s->name, "%s", d->name);
    s->off = ex->nparams;
    s->rows = d->rows;
    s->cols = d->cols;
    s->grows = d->grows;
    s->gcols = d->gcols;
    s->r0 = d->r0;
    s->c0 = d->c0;
    s->out_rows = d->out_rows ? d->out_rows : d->grows;
    s->init = d->init;
    s->std = d->std;
    s->decay = d->decay;
    s->norm_once = d->replicated && ex->dm.tp > 1;
    s->tp_partial = d->replicated && ex->dm.sp;
    s->norm_skip = d->skip;
    ex->nparams += (size_t)(d->rows * d->cols);
    return s->off;
}

/* A replicated vector (norm weight or bias, row-parallel bias). */
static size_t vec(struct dp_exec *ex, const char *name, int64_t n, enum dp_init init)
{
    struct segdef d = {.name = name,
                       .rows = n,
                       .cols = 1,
                       .grows = n,
                       .gcols = 1,
                       .init = init,
                       .replicated = true};
    return add_seg(ex, &d);
}

/* Rows [r0, r0 + rows) of a [grows, cols] tensor (column-parallel weight or bias). */
static size_t rows_of(struct dp_exec *ex, const char *name, int64_t rows, int64_t cols,
                      int64_t grows, int64_t r0, double std, bool decay)
{
    struct segdef d = {.name = name,
                       .rows = rows,
                       .cols = cols,
                       .grows = grows,
                       .gcols = cols,
                       .r0 = r0,
                       .init = std > 0 ? DP_INIT_NORMAL : DP_INIT_ZEROS,
                       .std = std,
                       .decay = decay};
    return add_seg(ex, &d);
}

/* Columns [c0, c0 + cols) of a [rows, gcols] tensor (row-parallel weight). */
static size_t cols_of(struct dp_exec *ex, const char *name, int64_t rows, int64_t cols,
                      int64_t gcols, int64_t c0, double std)
{
    struct segdef d = {.name = name,
                       .rows = rows,
                       .cols = cols,
                       .grows = rows,
                       .gcols = gcols,
                       .c0 = c0,
                       .init = DP_INIT_NORMAL,
                       .std = std,
                       .decay = true};
    return add_seg(ex, &d);
}

static size_t vocab_table(struct dp_exec *ex, const char *name, bool skip)
{
    const struct dp_dims *dm = &ex->dm;
    struct segdef d = {.name = name,
                       .rows = dm->Vl,
                       .cols = dm->h,
                       .grows = dm->Vp,
                       .gcols = dm->h,
                       .r0 = dm->v0,
                       .out_rows = dm->vocab,
                       .init = DP_INIT_NORMAL,
                       .std = 0.02,
                       .decay = true,
                       .skip = skip};
    return add_seg(ex, &d);
}

static int build_segments(struct dp_exec *ex)
{
    const struct dp_model *m = ex->m;
    const struct dp_dims *dm = &ex->dm;
    const int64_t h = dm->h, d = m->head_dim, tr = dm->tp_rank;
    const double std = 0.02, std_out = 0.02 / sqrt(2.0 * (double)m->layers);
    const bool ln = m->norm == DP_NORM_LAYERNORM;
    char nm[48];
    ex->wte = ex->wpe = ex->lnf_w = ex->lnf_b = ex->head = NONE;
    if (ex->first) {
        ex->wte = vocab_table(ex, "wte", false);
        if (m->pos == DP_POS_LEARNED) {
            struct segdef sd = {.name = "wpe",
                                .rows = m->max_pos,
                                .cols = h,
                                .grows = m->max_pos,
                                .gcols = h,
                                .init = DP_INIT_NORMAL,
                                .std = std,
                                .decay = true,
                                .replicated = true};
            ex->wpe = add_seg(ex, &sd);
        }
    }
    ex->lp = calloc((size_t)(ex->nlayers ? ex->nlayers : 1), sizeof *ex->lp);
    if (!ex->lp)
        return dp_err_set(ex->err, DP_ENOMEM, "out of memory");
    for (int i = 0; i < ex->nlayers; i++) {
        struct dp_layer_params *p = &ex->lp[i];
        int L = ex->layer0 + i;
        memset(p, 0xff, sizeof *p); /* all NONE */
#define NAME(fmt) (snprintf(nm, sizeof nm, "h.%d." fmt, L), nm)
        p->ln1_w = vec(ex, NAME("ln1.w"), h, DP_INIT_ONES);
        if (ln)
            p->ln1_b = vec(ex, NAME("ln1.b"), h, DP_INIT_ZEROS);
        /* Fused local QKV: [q heads of this rank; k heads; v heads] x h. */
        p->wqkv = rows_of(ex, NAME("attn.wq"), dm->qd, h, m->heads * d, tr * dm->qd, std, true);
        rows_of(ex, NAME("attn.wk"), dm->kvd, h, m->kv_heads * d, tr * dm->kvd, std, true);
        rows_of(ex, NAME("attn.wv"), dm->kvd, h, m->kv_heads * d, tr * dm->kvd, std, true);
        if (m->qkv_bias) {
            p->bqkv = rows_of(ex, NAME("attn.bq"), dm->qd, 1, m->heads * d, tr * dm->qd, 0, false);
            rows_of(ex, NAME("attn.bk"), dm->kvd, 1, m->kv_heads * d, tr * dm->kvd, 0, false);
            rows_of(ex, NAME("attn.bv"), dm->kvd, 1, m->kv_heads * d, tr * dm->kvd, 0, false);
        }
        p->wo = cols_of(ex, NAME("attn.wo"), h, dm->qd, m->heads * d, tr * dm->qd, std_out);
        if (m->out_bias)
            p->bo = vec(ex, NAME("attn.bo"), h, DP_INIT_ZEROS);
        p->ln2_w = vec(ex, NAME("ln2.w"), h, DP_INIT_ONES);
        if (ln)
            p->ln2_b = vec(ex, NAME("ln2.b"), h, DP_INIT_ZEROS);
        const int64_t f = dm->f, F = m->ffn_hidden;
        if (m->ffn == DP_FFN_GELU) {
            p->w1 = rows_of(ex, NAME("mlp.w1"), f, h, F, tr * f, std, true);
            if (m->mlp_bias)
                p->b1 = rows_of(ex, NAME("mlp.b1"), f, 1, F, tr * f, 0, false);
        } else {
            /* Fused local [gate; up] so one GEMM gives the SwiGLU input. */
            p->w1 = rows_of(ex, NAME("mlp.w_gate"), f, h, F, tr * f, std, true);
            rows_of(ex, NAME("mlp.w_up"), f, h, F, tr * f, std, true);
            if (m->mlp_bias) {
                p->b1 = rows_of(ex, NAME("mlp.b_gate"), f, 1, F, tr * f, 0, false);
                rows_of(ex, NAME("mlp.b_up"), f, 1, F, tr * f, 0, false);
            }
        }
        p->w2 = cols_of(ex, NAME("mlp.w2"), h, f, F, tr * f, std_out);
        if (m->mlp_bias)
            p->b2 = vec(ex, NAME("mlp.b2"), h, DP_INIT_ZEROS);
#undef NAME
    }
    if (ex->last) {
        ex->lnf_w = vec(ex, "lnf.w", h, DP_INIT_ONES);
        if (ln)
            ex->lnf_b = vec(ex, "lnf.b", h, DP_INIT_ZEROS);
        if (!m->tied_embeddings) {
            ex->head = vocab_table(ex, "lm_head", false);
        } else if (!ex->first) {
            /* The last stage's copy of the tied embedding: initialised from the same
             * key, kept equal by the embedding-group all-reduce of its gradient. */
            ex->head = vocab_table(ex, "wte", true);
        } else {
            ex->head = ex->wte;
            ex->head_is_wte = true;
        }
    }
    for (int i = 0; i < ex->nsegs; i++)
        if (ex->segs[i].off == NONE)
            return dp_err_set(ex->err, DP_ENOMEM, "out of memory");
    return 0;
}

static void init_params(struct dp_exec *ex)
{
    for (int i = 0; i < ex->nsegs; i++) {
        const struct dp_seg *s = &ex->segs[i];
        real *dst = ex->params + s->off;
        int64_t rows = s->rows;
        /* Padded vocabulary rows stay zero. */
        if (s->out_rows < s->grows) {
            int64_t valid = s->out_rows - s->r0;
            rows = valid < 0 ? 0 : (valid < rows ? valid : rows);
        }
        double value = s->init == DP_INIT_ONES ? 1.0 : 0.0;
        double std = s->init == DP_INIT_NORMAL ? s->std : 0.0;
        OPS->init_fill(ex->be, dst, rows, s->cols, s->gcols, s->r0, s->c0, ex->o.seed,
                       dp__hash_name(s->name), std, value);
    }
}

int dp__model_build(struct dp_exec *ex)
{
    int rc = build_segments(ex);
    if (rc)
        return rc;
    ex->nflat = ex->nparams;
    int dp = ex->l.dp;
    if (ex->l.zero >= 1) {
        ex->nflat = (ex->nparams + (size_t)dp - 1) / (size_t)dp * (size_t)dp;
        ex->shard = ex->nflat / (size_t)dp;
        ex->shard_off = (size_t)ex->c.dp_rank * ex->shard;
    } else {
        ex->shard = ex->nparams;
        ex->shard_off = 0;
    }
    size_t fb = ex->nflat * sizeof(real), ob = ex->shard * sizeof(real);
    ex->params = dp__mem_alloc(ex->be, &ex->mem, DP_POOL_PARAMS, fb);
    ex->grads = dp__mem_alloc(ex->be, &ex->mem, DP_POOL_GRADS, fb);
    ex->adam_m = dp__mem_alloc(ex->be, &ex->mem, DP_POOL_OPTIM, ob);
    ex->adam_v = dp__mem_alloc(ex->be, &ex->mem, DP_POOL_OPTIM, ob);
    if (!ex->params || !ex->grads || !ex->adam_m || !ex->adam_v)
        return dp_err_set(ex->err, DP_ENOMEM,
                          "rank %d: cannot allocate %zu parameters (%.1f MiB per buffer)", ex->rank,
                          ex->nflat, (double)fb / 1048576.0);
    init_params(ex);
    return 0;
}

/* ------------------------------------------------------------------ activations */

/* Lays buffers out back to back from `base` (no padding: sizes are exact); with
 * base == NULL it only counts. */
struct carver {
    char *base;
    size_t off;
};

static void *carve(struct carver *cv, int64_t n, size_t esize)
{
    void *p = cv->base ? cv->base + cv->off : NULL;
    cv->off += (size_t)n * esize;
    return p;
}

/* One layer's kept activations: the slot's set (x, plus everything unless full
 * recompute) or the full-recompute working set (everything but x, which aliases). */
static void layer_acts(const struct dp_exec *ex, struct dp_act *A, struct carver *cv,
                       bool keep_probs, bool full_set)
{
    const struct dp_dims *dm = &ex->dm;
    struct dp_act a = {0};
    if (!full_set)
        a.x = carve(cv, dm->Nl * dm->h, sizeof(real));
    if (full_set || ex->l.recompute != DP_RECOMPUTE_FULL) {
        a.ln1 = carve(cv, dm->Nl * dm->h, sizeof(real));
        a.ln1_st = carve(cv, 2 * dm->Nl, sizeof(real));
        a.qkv = carve(cv, dm->N * dm->qkvd, sizeof(real));
        if (keep_probs)
            a.probs = carve(cv, dm->B * dm->a * dm->T * dm->T, sizeof(real));
        a.ctx = carve(cv, dm->N * dm->qd, sizeof(real));
        a.x2 = carve(cv, dm->Nl * dm->h, sizeof(real));
        a.ln2 = carve(cv, dm->Nl * dm->h, sizeof(real));
        a.ln2_st = carve(cv, 2 * dm->Nl, sizeof(real));
        a.fc1 = carve(cv, dm->N * dm->F1, sizeof(real));
        a.act = carve(cv, dm->N * dm->f, sizeof(real));
    }
    if (A)
        *A = a;
}

/* A slot: every local layer's kept set, then the input tokens (first stage) and the
 * target tokens (last stage). Returns its bytes. */
static size_t slot_layout(const struct dp_exec *ex, struct dp_slot *s, char *mem)
{
    struct carver cv = {mem, 0};
    bool probs = ex->l.recompute == DP_RECOMPUTE_NONE;
    for (int i = 0; i < ex->nlayers; i++)
        layer_acts(ex, s ? &s->layers[i] : NULL, &cv, probs, false);
    if (ex->first) {
        int32_t *t = carve(&cv, ex->dm.N, sizeof(int32_t));
        if (s)
            s->inputs = t;
    }
    if (ex->last) {
        int32_t *t = carve(&cv, ex->dm.N, sizeof(int32_t));
        if (s)
            s->targets = t;
    }
    return cv.off;
}

struct dp_slot *dp__slot_acquire(struct dp_exec *ex, int mb)
{
    struct dp_slot *s = NULL;
    for (int i = 0; i < ex->nslots; i++)
        if (ex->slots[i].mb < 0) {
            s = &ex->slots[i];
            break;
        }
    if (!s) {
        if (ex->nslots == ex->maxslots) {
            dp_err_set(ex->err, DP_ERUNTIME, "internal: more than %d micro-batches in flight",
                       ex->maxslots);
            return NULL;
        }
        s = &ex->slots[ex->nslots];
        s->layers = calloc((size_t)(ex->nlayers ? ex->nlayers : 1), sizeof *s->layers);
        s->mem = dp__mem_alloc_unheld(ex->be, &ex->mem, ex->slot_bytes);
        if (!s->layers || !s->mem) {
            free(s->layers);
            if (s->mem)
                ex->be->ops->free(ex->be, s->mem);
            memset(s, 0, sizeof *s);
            dp_err_set(ex->err, DP_ENOMEM, "rank %d: cannot allocate activations (%.1f MiB)",
                       ex->rank, (double)ex->slot_bytes / 1048576.0);
            return NULL;
        }
        s->bytes = ex->slot_bytes;
        slot_layout(ex, s, s->mem);
        ex->nslots++;
    }
    s->mb = mb;
    dp__mem_hold(&ex->mem, DP_POOL_ACT_SLOTS, (int64_t)s->bytes);
    return s;
}

void dp__slot_release(struct dp_exec *ex, struct dp_slot *s)
{
    s->mb = -1;
    dp__mem_hold(&ex->mem, DP_POOL_ACT_SLOTS, -(int64_t)s->bytes);
}

static real *work(struct dp_exec *ex, enum dp_pool pool, int64_t n)
{
    if (n <= 0)
        return NULL;
    return dp__mem_alloc(ex->be, &ex->mem, pool, (size_t)n * sizeof(real));
}

int dp__acts_build(struct dp_exec *ex)
{
    const struct dp_dims *dm = &ex->dm;
    const int64_t Nh = dm->N * dm->h, Nlh = dm->Nl * dm->h, S = dm->B * dm->a * dm->T * dm->T;
    struct dp_work *w = &ex->w;
    bool fail = false;
#define W(ptr, n)                                                                                  \
    do {                                                                                           \
        (ptr) = work(ex, DP_POOL_ACT_WORK, n);                                                     \
        fail |= !(ptr);                                                                            \
    } while (0)
    W(w->tmp, Nh);
    W(w->dtmp, Nh);
    if (dm->sp)
        W(w->dgath, Nh);
    W(w->dres, Nlh);
    W(w->dqkv, dm->N * dm->qkvd);
    W(w->dctx, dm->N * dm->qd);
    W(w->dprobs, S);
    if (ex->m->ffn != DP_FFN_GELU) /* GELU's input gradient overwrites dact */
        W(w->dfc1, dm->N * dm->F1);
    W(w->dact, dm->N * dm->f);
    if (ex->l.recompute == DP_RECOMPUTE_SELECTIVE)
        W(w->probs, S);
    if (ex->l.recompute == DP_RECOMPUTE_FULL) {
        struct carver cv = {NULL, 0};
        layer_acts(ex, NULL, &cv, true, true);
        w->rc_mem = dp__mem_alloc(ex->be, &ex->mem, DP_POOL_ACT_WORK, cv.off);
        fail |= !w->rc_mem;
        if (w->rc_mem) {
            cv.base = w->rc_mem;
            cv.off = 0;
            layer_acts(ex, &w->rc, &cv, true, true);
        }
    }
    if (ex->m->pos == DP_POS_ROPE) {
        W(w->rope, dm->T * dm->d);
        if (w->rope) {
            /* cos and sin of p * 10000^(-2i/d), i < d/2 (Su et al. 2021, Eq. 34). */
            int64_t half = dm->d / 2;
            real *host = malloc((size_t)(dm->T * dm->d) * sizeof(real));
            fail |= !host;
            if (host) {
                for (int64_t p = 0; p < dm->T; p++)
                    for (int64_t i = 0; i < half; i++) {
                        double th = (double)p * pow(10000.0, -2.0 * (double)i / (double)dm->d);
                        host[p * half + i] = (real)cos(th);
                        host[dm->T * half + p * half + i] = (real)sin(th);
                    }
                OPS->upload(ex->be, w->rope, host, (size_t)(dm->T * dm->d) * sizeof(real));
                free(host);
            }
        }
    }
#undef W
    if (ex->last) {
#define H(ptr, n)                                                                                  \
    do {                                                                                           \
        (ptr) = work(ex, DP_POOL_ACT_HEAD, n);                                                     \
        fail |= !(ptr);                                                                            \
    } while (0)
        H(ex->hd.xf, Nlh);
        H(ex->hd.lnf, Nlh);
        H(ex->hd.lnf_st, 2 * dm->Nl);
        H(ex->hd.logits, dm->N * dm->Vl);
        H(ex->hd.ce, 4 * dm->N);
#undef H
    }
    if (ex->l.pp > 1 && !ex->last) {
        ex->send_fwd = work(ex, DP_POOL_COMM, Nlh);
        fail |= !ex->send_fwd;
    }
    /* Slots: at most min(pp - stage, M) micro-batches are in flight under 1F1B. */
    int64_t inflight = ex->l.pp - ex->c.pp_rank;
    ex->maxslots = (int)(inflight < ex->M ? inflight : ex->M);
    ex->slots = calloc((size_t)ex->maxslots, sizeof *ex->slots);
    fail |= !ex->slots;
    for (int i = 0; ex->slots && i < ex->maxslots; i++)
        ex->slots[i].mb = -1;
    ex->slot_bytes = slot_layout(ex, NULL, NULL);
    if (fail)
        return dp_err_set(ex->err, DP_ENOMEM, "rank %d: cannot allocate activation buffers",
                          ex->rank);
    return 0;
}

void dp__model_release(struct dp_exec *ex)
{
    struct dp_backend *be = ex->be;
    if (!be)
        return;
    for (int i = 0; ex->slots && i < ex->nslots; i++) {
        be->ops->free(be, ex->slots[i].mem);
        free(ex->slots[i].layers);
    }
    free(ex->slots);
    ex->slots = NULL;
    /* Pool accounting is not unwound: the peaks are what matters and the rank ends. */
    void *bufs[] = {ex->params,   ex->grads,   ex->adam_m, ex->adam_v,    ex->w.tmp,
                    ex->w.dtmp,   ex->w.dgath, ex->w.dres, ex->w.dqkv,    ex->w.dctx,
                    ex->w.dprobs, ex->w.dfc1,  ex->w.dact, ex->w.probs,   ex->w.rc_mem,
                    ex->w.rope,   ex->hd.xf,   ex->hd.lnf, ex->hd.lnf_st, ex->hd.logits,
                    ex->hd.ce,    ex->send_fwd};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        if (bufs[i])
            be->ops->free(be, bufs[i]);
    free(ex->segs);
    free(ex->lp);
    ex->segs = NULL;
    ex->lp = NULL;
}

/* ------------------------------------------------------------------ TP helpers */

/* SP: all-gather the token slices [Nl, h] into dst [N, h]; else return src. */
static const real *gather_tokens(struct dp_exec *ex, const real *src, real *dst, int *rc)
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
static int reduce_tokens(struct dp_exec *ex, real *buf)
{
    const struct dp_dims *dm = &ex->dm;
    if (dm->tp == 1)
        return 0;
    if (dm->sp)
        return OPS->reduce_scatter(ex->be, DP_GROUP_TP, buf, dm->Nl * dm->h, ex->err);
    return OPS->allreduce(ex->be, DP_GROUP_TP, buf, dm->N * dm->h, DP_OP_SUM, ex->err);
}

/* ------------------------------------------------------------------ layers */

/* Column-parallel linear: y [N, n] = x W^T + b. The bias (if any) is written first and the
 * GEMM adds to it (beta = 1): one pass over y fewer than clearing it and adding b later. */
static void linear_fwd(struct dp_exec *ex, real *y, const real *x, size_t wt, size_t b, int n,
                       int k)
{
    const int N = (int)ex->dm.N;
    real beta = 0;
    if (b != NONE) {
        OPS->bias_fill(ex->be, y, P(ex, b), N, n);
        beta = 1;
    }
    OPS->gemm(ex->be, false, true, N, n, k, 1, x, k, P(ex, wt), k, beta, y, n);
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
        OPS->gemm(ex->be, false, true, N, h, k, 1, x, k, P(ex, wt), k, 1, out, h);
        return 0;
    }
    OPS->gemm(ex->be, false, true, N, h, k, 1, x, k, P(ex, wt), k, 0, ex->w.tmp, h);
    int rc = reduce_tokens(ex, ex->w.tmp);
    if (rc)
        return rc;
    OPS->residual(ex->be, out, res, ex->w.tmp, P(ex, b), dm->Nl, dm->h);
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
    const real *g1 = gather_tokens(ex, A->ln1, w->tmp, &rc);
    TRY(rc);
    linear_fwd(ex, A->qkv, g1, p->wqkv, p->bqkv, (int)dm->qkvd, h);
    if (m->pos == DP_POS_ROPE)
        OPS->rope(be, A->qkv, dm->qkvd, dm->N, dm->T, dm->a, dm->g, (int)dm->d, w->rope, false);
    real *probs = A->probs ? A->probs : w->probs;
    OPS->attn_fwd(be, A->ctx, probs, A->qkv, dm->B, dm->T, dm->a, dm->g, (int)dm->d);
    TRY(linear_residual(ex, A->x2, A->x, A->ctx, p->wo, p->bo, (int)dm->qd));

    OPS->norm_fwd(be, m->norm, A->ln2, A->ln2_st, A->x2, P(ex, p->ln2_w), P(ex, p->ln2_b), dm->Nl,
                  dm->h);
    const real *g2 = gather_tokens(ex, A->ln2, w->tmp, &rc);
    TRY(rc);
    linear_fwd(ex, A->fc1, g2, p->w1, p->b1, (int)dm->F1, h);
    OPS->act_fwd(be, m->ffn, A->act, A->fc1, dm->N, dm->f);
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
    if (p->b2 != NONE)
        OPS->bias_grad(be, G(ex, p->b2), w->dres, dm->Nl, dm->h);
    const real *dy = gather_tokens(ex, w->dres, w->dgath, &rc);
    TRY(rc);
    OPS->gemm(be, false, false, N, f, h, 1, dy, h, P(ex, p->w2), f, 0, w->dact, f);
    OPS->gemm(be, true, false, h, f, N, 1, dy, h, A->act, f, 1, G(ex, p->w2), f);
    /* GELU: dfc1 in place of dact (same shape; the written lines are already in cache). */
    real *dfc1 = m->ffn == DP_FFN_GELU ? w->dact : w->dfc1;
    OPS->act_bwd(be, m->ffn, dfc1, G(ex, p->b1), w->dact, A->fc1, dm->N, dm->f);
    const real *g2 = gather_tokens(ex, A->ln2, w->tmp, &rc);
    TRY(rc);
    OPS->gemm(be, true, false, F1, h, N, 1, dfc1, F1, g2, h, 1, G(ex, p->w1), h);
    OPS->gemm(be, false, false, N, h, F1, 1, dfc1, F1, P(ex, p->w1), h, 0, w->dtmp, h);
    TRY(reduce_tokens(ex, w->dtmp));
    OPS->norm_bwd(be, m->norm, w->dres, G(ex, p->ln2_w), G(ex, p->ln2_b), w->dtmp, A->x2,
                  P(ex, p->ln2_w), A->ln2_st, dm->Nl, dm->h);

    /* Attention: x2 = x + ctx Wo^T + bo, ctx = attn(qkv), qkv = Norm1(x) Wqkv^T + bqkv. */
    if (p->bo != NONE)
        OPS->bias_grad(be, G(ex, p->bo), w->dres, dm->Nl, dm->h);
    dy = gather_tokens(ex, w->dres, w->dgath, &rc);
    TRY(rc);
    OPS->gemm(be, false, false, N, qd, h, 1, dy, h, P(ex, p->wo), qd, 0, w->dctx, qd);
    OPS->gemm(be, true, false, h, qd, N, 1, dy, h, A->ctx, qd, 1, G(ex, p->wo), qd);
    const real *probs = A->probs;
    if (!probs) {
        /* Selective recompute (Korthikanti et al. 2022, Sec. 5): the attention
         * probabilities were not kept; recompute them from the kept q and k. */
        OPS->attn_probs(be, w->probs, A->qkv, dm->B, dm->T, dm->a, dm->g, (int)dm->d);
        probs = w->probs;
    }
    OPS->attn_bwd(be, w->dqkv, w->dprobs, w->dctx, A->qkv, probs, dm->B, dm->T, dm->a, dm->g,
                  (int)dm->d);
    if (m->pos == DP_POS_ROPE)
        OPS->rope(be, w->dqkv, dm->qkvd, dm->N, dm->T, dm->a, dm->g, (int)dm->d, w->rope, true);
    if (p->bqkv != NONE)
        OPS->bias_grad(be, G(ex, p->bqkv), w->dqkv, dm->N, dm->qkvd);
    const real *g1 = gather_tokens(ex, A->ln1, w->tmp, &rc);
    TRY(rc);
    OPS->gemm(be, true, false, qkvd, h, N, 1, w->dqkv, qkvd, g1, h, 1, G(ex, p->wqkv), h);
    OPS->gemm(be, false, false, N, h, qkvd, 1, w->dqkv, qkvd, P(ex, p->wqkv), h, 0, w->dtmp, h);
    TRY(reduce_tokens(ex, w->dtmp));
    OPS->norm_bwd(be, m->norm, w->dres, G(ex, p->ln1_w), G(ex, p->ln1_b), w->dtmp, A->x,
                  P(ex, p->ln1_w), A->ln1_st, dm->Nl, dm->h);
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
        OPS->pos_fwd(be, out, P(ex, ex->wpe), dm->sp ? dm->tp_rank * dm->Nl : 0, dm->Nl, dm->T,
                     dm->h);
    return 0;
}

static int embed_backward(struct dp_exec *ex, struct dp_slot *s)
{
    const struct dp_dims *dm = &ex->dm;
    int rc = 0;
    if (ex->wpe != NONE)
        OPS->pos_bwd(ex->be, G(ex, ex->wpe), ex->w.dres, dm->sp ? dm->tp_rank * dm->Nl : 0, dm->Nl,
                     dm->T, dm->h);
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
    const real *gf = gather_tokens(ex, hd->lnf, ex->w.tmp, &rc);
    TRY(rc);
    OPS->gemm(be, false, true, (int)dm->N, (int)dm->Vl, (int)dm->h, 1, gf, (int)dm->h,
              P(ex, ex->head), (int)dm->h, 0, hd->logits, (int)dm->Vl);
    real *rowmax = hd->ce, *sums = hd->ce + dm->N, *loss = hd->ce + 3 * dm->N;
    OPS->ce_max(be, rowmax, hd->logits, dm->N, dm->Vl, dm->v0, dm->vocab);
    TRY(OPS->allreduce(be, DP_GROUP_TP, rowmax, dm->N, DP_OP_MAX, ex->err));
    OPS->ce_sums(be, sums, hd->logits, rowmax, s->targets, dm->N, dm->Vl, dm->v0, dm->vocab);
    TRY(OPS->allreduce(be, DP_GROUP_TP, sums, 2 * dm->N, DP_OP_SUM, ex->err));
    /* The loss is the mean over the global batch's tokens. */
    real dloss = (real)(1.0 / (double)ex->gbs_tokens);
    OPS->ce_grad(be, hd->logits, loss, rowmax, sums, s->targets, dm->N, dm->Vl, dm->v0, dm->vocab,
                 dloss);
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
    TRY(reduce_tokens(ex, ex->w.dtmp));
    OPS->zero(be, ex->w.dres, (size_t)(dm->Nl * dm->h) * sizeof(real));
    OPS->norm_bwd(be, ex->m->norm, ex->w.dres, G(ex, ex->lnf_w), G(ex, ex->lnf_b), ex->w.dtmp,
                  hd->xf, P(ex, ex->lnf_w), hd->lnf_st, dm->Nl, dm->h);
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

int dp__stage_forward(struct dp_exec *ex, struct dp_slot *s)
{
    if (ex->first)
        TRY(embed_forward(ex, s));
    for (int i = 0; i < ex->nlayers; i++) {
        real *out = i + 1 < ex->nlayers ? s->layers[i + 1].x : ex->last ? ex->hd.xf : ex->send_fwd;
        TRY(layer_forward(ex, &ex->lp[i], layer_set(ex, s, i), out, false));
    }
    if (ex->last)
        TRY(head_forward(ex, s));
    return 0;
}

int dp__stage_backward(struct dp_exec *ex, struct dp_slot *s)
{
    if (ex->last)
        TRY(head_backward(ex));
    for (int i = ex->nlayers - 1; i >= 0; i--) {
        struct dp_act *A = layer_set(ex, s, i);
        if (ex->l.recompute == DP_RECOMPUTE_FULL)
            TRY(layer_forward(ex, &ex->lp[i], A, NULL, true));
        TRY(layer_backward(ex, &ex->lp[i], A));
    }
    if (ex->first)
        TRY(embed_backward(ex, s));
    return 0;
}

void dp__stage_place(struct dp_exec *ex, int stage)
{
    ex->first = stage == 0;
    ex->last = stage == ex->l.pp - 1;
    ex->layer0 = 0;
    for (int s = 0; s < stage; s++)
        ex->layer0 += dp_layout_stage_layers(&ex->l, ex->m, s);
    ex->nlayers = dp_layout_stage_layers(&ex->l, ex->m, stage);
}

int dp__segments_for_stage(const struct dp_exec *ex, int stage, struct dp_seg **segs, int *n)
{
    struct dp_exec t = *ex;
    struct dp_err e = {0};
    t.err = &e;
    t.segs = NULL;
    t.nsegs = t.capsegs = 0;
    t.nparams = 0;
    t.lp = NULL;
    t.dm.tp_rank = 0;
    t.dm.v0 = 0;
    t.c.pp_rank = stage;
    dp__stage_place(&t, stage);
    int rc = build_segments(&t);
    free(t.lp);
    if (rc) {
        free(t.segs);
        return rc;
    }
    *segs = t.segs;
    *n = t.nsegs;
    return 0;
}
