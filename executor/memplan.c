/*
 * The executor's memory plan: one table of every buffer a rank holds
 * (README.md "Buffer table"), from which the rank allocates and from which
 * dp_exec_memory estimates. There is no second copy of the sizes: the
 * prediction the run checks against MemAvailable before step 1, the
 * "predicted" column of the summary and what the rank allocates are this
 * table. The parameter count comes from ckpt's tensor table, which also lays
 * out the flat buffers (model.c).
 *
 * Activation slots are the exception that needs the schedule: a slot is
 * allocated when a micro-batch enters the stage and reused after its
 * backward, so the table holds their size and the most 1F1B keeps in flight
 * (min(pp - stage, M), schedule.c), and the pools count what is held. Interleaved,
 * the slots differ per model chunk and the most held at once is counted on the
 * stage's own timeline (interleave.c), which the run follows step for step.
 */
#include "internal.h"

#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------ the table */

/* Every buffer outside the slots: its pool, and where its pointer lives. */
struct bufdef {
    enum dp_pool pool;
    size_t offset; /* of its `real *` in struct dp_exec */
};

#define AT(field) offsetof(struct dp_exec, field)
static const struct bufdef bufs[DP__NBUF] = {
    [DP__BUF_PARAMS] = {DP_POOL_PARAMS, AT(params)},
    [DP__BUF_GRADS] = {DP_POOL_GRADS, AT(grads)},
    [DP__BUF_GRED] = {DP_POOL_GRADS, AT(gred)},
    [DP__BUF_GEDGE] = {DP_POOL_GRADS, AT(gedge)},
    [DP__BUF_GWIN] = {DP_POOL_GRADS, AT(gwin)},
    [DP__BUF_PSHARD] = {DP_POOL_PARAMS, AT(pshard)},
    [DP__BUF_PEDGE] = {DP_POOL_PARAMS, AT(pedge)},
    [DP__BUF_PWIN] = {DP_POOL_PARAMS, AT(pwin)},
    [DP__BUF_PWIN2] = {DP_POOL_PARAMS, AT(pwin2)},
    [DP__BUF_ADAM_M] = {DP_POOL_OPTIM, AT(adam_m)},
    [DP__BUF_ADAM_V] = {DP_POOL_OPTIM, AT(adam_v)},
    [DP__BUF_TMP] = {DP_POOL_ACT_WORK, AT(w.tmp)},
    [DP__BUF_DTMP] = {DP_POOL_ACT_WORK, AT(w.dtmp)},
    [DP__BUF_DGATH] = {DP_POOL_ACT_WORK, AT(w.dgath)},
    [DP__BUF_DRES] = {DP_POOL_ACT_WORK, AT(w.dres)},
    [DP__BUF_DQKV] = {DP_POOL_ACT_WORK, AT(w.dqkv)},
    [DP__BUF_DCTX] = {DP_POOL_ACT_WORK, AT(w.dctx)},
    [DP__BUF_DPROBS] = {DP_POOL_ACT_WORK, AT(w.dprobs)},
    [DP__BUF_DFC1] = {DP_POOL_ACT_WORK, AT(w.dfc1)},
    [DP__BUF_DACT] = {DP_POOL_ACT_WORK, AT(w.dact)},
    [DP__BUF_PROBS] = {DP_POOL_ACT_WORK, AT(w.probs)},
    [DP__BUF_RC] = {DP_POOL_ACT_WORK, AT(w.rc_mem)},
    [DP__BUF_ROPE] = {DP_POOL_ACT_WORK, AT(w.rope)},
    [DP__BUF_XF] = {DP_POOL_ACT_HEAD, AT(hd.xf)},
    [DP__BUF_LNF] = {DP_POOL_ACT_HEAD, AT(hd.lnf)},
    [DP__BUF_LNF_ST] = {DP_POOL_ACT_HEAD, AT(hd.lnf_st)},
    [DP__BUF_LOGITS] = {DP_POOL_ACT_HEAD, AT(hd.logits)},
    [DP__BUF_CE] = {DP_POOL_ACT_HEAD, AT(hd.ce)},
    [DP__BUF_SEND] = {DP_POOL_COMM, AT(send_fwd)},
    [DP__BUF_MDY] = {DP_POOL_ACT_WORK, AT(w.mdy)},
    [DP__BUF_MX] = {DP_POOL_ACT_WORK, AT(w.mx)},
    [DP__BUF_MDACT] = {DP_POOL_ACT_WORK, AT(w.mdact)},
    [DP__BUF_MDFC1] = {DP_POOL_ACT_WORK, AT(w.mdfc1)},
    [DP__BUF_MDL] = {DP_POOL_ACT_WORK, AT(w.mdl)},
    [DP__BUF_SDACT] = {DP_POOL_ACT_WORK, AT(w.sdact)},
    [DP__BUF_SDFC1] = {DP_POOL_ACT_WORK, AT(w.sdfc1)},
    [DP__BUF_GRECV] = {DP_POOL_COMM, AT(grecv)},
    [DP__BUF_RING] = {DP_POOL_COMM, AT(w.ring)},
    [DP__BUF_CPST] = {DP_POOL_ACT_WORK, AT(w.cpst)},
    [DP__BUF_PWORK] = {DP_POOL_PARAMS, AT(pwork)},
    [DP__BUF_PW16] = {DP_POOL_PARAMS, AT(pw16)},
    [DP__BUF_PWEDGE] = {DP_POOL_PARAMS, AT(pwedge)},
    [DP__BUF_PWWIN] = {DP_POOL_PARAMS, AT(pwwin)},
};
#undef AT

/* Bytes an element of buffer b: the 2-byte words of the working copy, else a real. */
static int64_t esize(int b)
{
    return b == DP__BUF_PW16 ? (int64_t)sizeof(uint16_t) : (int64_t)sizeof(real);
}

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

/* Token ids and counts among the reals: rounded up to 8 bytes, so that the reals after
 * them stay aligned in the f64 build. */
static int32_t *carve_i32(struct carver *cv, int64_t n)
{
    return carve(cv, (n + 1) / 2 * 2, sizeof(int32_t));
}

/* 2-byte words among the reals: rounded up to 8 bytes, as the token ids. */
static uint16_t *carve_u16(struct carver *cv, int64_t n)
{
    return carve(cv, (n + 3) / 4 * 4, sizeof(uint16_t));
}

/* A MoE layer's kept set (moe.c): routing, the experts' rows as this rank's experts
 * receive them (Rx: with capacity exact, dropless the worst case min(K, El) rows per token
 * of each EP rank), the combined-order outputs (R) and the shared experts' MLP. */
static void moe_acts(const struct dp_exec *ex, struct dp_act *a, struct carver *cv)
{
    const struct dp_dims *dm = &ex->dm;
    const int64_t NK = dm->Nb * dm->K; /* the routed tokens' choices */
    a->rprobs = carve(cv, dm->Nb * dm->E, sizeof(real));
    a->rw = carve(cv, NK, sizeof(real));
    a->rwt = carve(cv, dm->R, sizeof(real));
    a->ein = carve(cv, dm->Rx * dm->h, sizeof(real));
    a->efc1 = carve(cv, dm->Rx * dm->Fe1, sizeof(real));
    a->eact = carve(cv, dm->Rx * dm->fe, sizeof(real));
    a->eout = carve(cv, dm->R * dm->h, sizeof(real));
    if (dm->sf > 0) {
        a->sfc1 = carve(cv, dm->N * dm->Sf1, sizeof(real));
        a->sact = carve(cv, dm->N * dm->sf, sizeof(real));
    }
    if (ex->m->moe_shared_gate) {
        a->sgate = carve(cv, dm->N, sizeof(real));
        a->sidx = carve_i32(cv, dm->N);
    }
    a->ridx = carve_i32(cv, NK);
    a->rrow = carve_i32(cv, NK);
    a->rtok = carve_i32(cv, dm->R);
    a->ecnt = carve_i32(cv, 2 * dm->E + (int64_t)dm->ep * dm->El);
}

/* A tensor of a layer's kept set: fp32 (*r), or with the 2-byte stash (h non-NULL) in
 * words (*h); NULL r and h: not carved here (the stash's work set aliases it). */
static void kept(struct carver *cv, int64_t n, real **r, uint16_t **h)
{
    if (h)
        *h = carve_u16(cv, n);
    else if (r)
        *r = carve(cv, n, sizeof(real));
}

/*
 * One layer's kept activations: the slot's set (x, plus everything unless full
 * recompute) or the full-recompute working set (everything but x, which aliases; for a
 * MoE model the MoE layer's set). With the 2-byte stash (ex->stash16) the slot's set
 * keeps the stored tensors in words (x from the second layer of the slot on: `first` is
 * the slot's first layer) and the statistics, log-sum-exp and probabilities in fp32, and
 * the working set is every fp32 tensor but those (they alias the slot's).
 */
static void layer_acts(const struct dp_exec *ex, struct dp_act *A, struct carver *cv,
                       bool keep_probs, bool full_set, bool moe, bool first)
{
    const struct dp_dims *dm = &ex->dm;
    struct dp_act a = {0};
    const bool w16 = ex->stash16 && !full_set;   /* the slot's words */
    const bool own = !(ex->stash16 && full_set); /* fp32 statistics carved here */
    if (!full_set)
        kept(cv, dm->Nl * dm->h, &a.x, w16 && !first ? &a.hx : NULL);
    if (full_set || ex->l.recompute != DP_RECOMPUTE_FULL) {
        kept(cv, dm->Nl * dm->h, &a.ln1, w16 ? &a.hln1 : NULL);
        kept(cv, 2 * dm->Nl, own ? &a.ln1_st : NULL, NULL);
        kept(cv, dm->N * dm->qkvd, &a.qkv, w16 ? &a.hqkv : NULL);
        if (ex->m->qk_norm) { /* the norm's inputs and 1/rms (costmodel/activations.c) */
            kept(cv, dm->N * (dm->a + dm->g) * dm->d, own ? &a.qkraw : NULL, NULL);
            kept(cv, dm->N * (dm->a + dm->g), own ? &a.qkrs : NULL, NULL);
        }
        /* ring and flash attention keep the log-sum-exp, never the probabilities */
        if (dm->cp > 1 || ex->flash)
            kept(cv, dm->B * dm->a * dm->T, own ? &a.lse : NULL, NULL);
        else if (keep_probs)
            kept(cv, dm->B * dm->a * dm->T * dm->T, own ? &a.probs : NULL, NULL);
        kept(cv, dm->N * dm->qd, &a.ctx, w16 ? &a.hctx : NULL);
        kept(cv, dm->Nl * dm->h, &a.x2, w16 ? &a.hx2 : NULL);
        kept(cv, dm->Nl * dm->h, &a.ln2, w16 ? &a.hln2 : NULL);
        kept(cv, 2 * dm->Nl, own ? &a.ln2_st : NULL, NULL);
        /* The full-recompute set serves every layer of the stage, which may hold both
         * kinds (moe_dense_layers): it has both. */
        if (!moe || full_set) {
            kept(cv, dm->N * dm->F1, &a.fc1, w16 ? &a.hfc1 : NULL);
            kept(cv, dm->N * dm->f, &a.act, w16 ? &a.hact : NULL);
        }
        if (moe)
            moe_acts(ex, &a, cv);
    }
    if (A)
        *A = a;
}

/* The working set (w->rc, and with the 2-byte stash w->xa and w->xb) from cv; w NULL:
 * only counted. */
static void rc_layout(const struct dp_exec *ex, struct carver *cv, struct dp_work *w)
{
    struct dp_act a;
    layer_acts(ex, &a, cv, true, true, ex->m->experts > 0, false);
    real *xa = NULL, *xb = NULL;
    if (ex->stash16) {
        xa = carve(cv, ex->dm.Nl * ex->dm.h, sizeof(real));
        xb = carve(cv, ex->dm.Nl * ex->dm.h, sizeof(real));
    }
    if (w) {
        w->rc = a;
        w->xa = xa;
        w->xb = xb;
    }
}

/* A slot of model chunk c: its layers' kept sets, then the input tokens (the embedding's
 * chunk) and the target tokens (the loss's chunk). Returns its bytes. */
static size_t slot_layout(const struct dp_exec *ex, int c, struct dp_slot *s, char *mem)
{
    struct carver cv = {mem, 0};
    bool probs = ex->l.recompute == DP_RECOMPUTE_NONE;
    for (int i = 0; i < ex->ch_n[c]; i++)
        layer_acts(ex, s ? &s->layers[i] : NULL, &cv, probs, false,
                   dp__layer_moe(ex, ex->ch_g0[c] + i), i == 0);
    if (ex->first && c == 0) {
        int32_t *t = carve(&cv, ex->dm.N, sizeof(int32_t));
        if (s)
            s->inputs = t;
    }
    if (ex->last && c == ex->nch - 1) {
        int32_t *t = carve(&cv, ex->dm.N, sizeof(int32_t));
        if (s)
            s->targets = t;
    }
    return cv.off;
}

size_t dp__slot_size(const struct dp_exec *ex, int c)
{
    return slot_layout(ex, c, NULL, NULL);
}

void dp__memplan(const struct dp_exec *ex, struct dp__memplan *p)
{
    const struct dp_dims *dm = &ex->dm;
    const struct dp_layout *l = &ex->l;
    const int64_t Nh = dm->N * dm->h, Nlh = dm->Nl * dm->h;
    /* CP and flash attention: no probabilities */
    const int64_t S = dm->cp > 1 || ex->flash ? 0 : dm->B * dm->a * dm->T * dm->T;
    int64_t *e = p->elems;
    memset(p, 0, sizeof *p);
    /* The flat buffers: under ZeRO padded to a multiple of the shard group (dp, or
     * shard_group under HSDP), the optimizer state of one contiguous shard (schedule.c).
     * ZeRO-2 replaces the flat gradients by the reduced shard, the edge's gradients and
     * one layer's window; ZeRO-3 the flat parameters likewise, with a second window for
     * the next layer's prefetch (shard.c). */
    int64_t P = (int64_t)ex->nparams, flat = P, shard = P;
    if (l->zero >= 1) {
        int64_t sg = ex->sg > 0 ? ex->sg : l->dp * (l->cp > 1 ? l->cp : 1);
        flat = (P + sg - 1) / sg * sg;
        shard = flat / sg;
        if (ex->zsplit) { /* dense and expert groups, each padded to its shards (shard.c) */
            flat = P;
            shard = (int64_t)(ex->zk[0].S + ex->zk[1].S);
        }
    }
    e[DP__BUF_PARAMS] = l->zero >= 3 ? 0 : flat;
    e[DP__BUF_GRADS] = l->zero >= 2 ? 0 : flat;
    e[DP__BUF_ADAM_M] = e[DP__BUF_ADAM_V] = shard;
    /* ZeRO-1 too with two groups (the reduced shards cannot sit in the flat buffer's
     * head), or with buckets in flight (overlap.c: the head is still being reduced). */
    if (dp__gred_own(ex))
        e[DP__BUF_GRED] = shard;
    if (l->zero >= 2) {
        e[DP__BUF_GRED] = shard;
        e[DP__BUF_GEDGE] = (int64_t)ex->edge_n;
        e[DP__BUF_GWIN] = (int64_t)ex->win_n;
    }
    if (l->zero >= 3) {
        e[DP__BUF_PSHARD] = shard;
        e[DP__BUF_PEDGE] = (int64_t)ex->edge_n;
        e[DP__BUF_PWIN] = (int64_t)ex->win_n;
        /* The next layer's window, prefetched within a pass (shard.c): needs a model
         * chunk of two layers or more. */
        bool two = false;
        for (int c = 0; c < ex->nch; c++)
            two = two || ex->ch_n[c] > 1;
        /* Two ZeRO groups: no prefetch (several gathers per layer, shard.c). */
        e[DP__BUF_PWIN2] = two && !ex->zsplit ? (int64_t)ex->win_n : 0;
    }
    /* act_work: one set per rank. */
    e[DP__BUF_TMP] = e[DP__BUF_DTMP] = Nh;
    e[DP__BUF_DGATH] = dm->sp ? Nh : 0;
    e[DP__BUF_DRES] = Nlh;
    e[DP__BUF_DQKV] = dm->N * dm->qkvd;
    e[DP__BUF_DCTX] = dm->N * dm->qd;
    e[DP__BUF_DPROBS] = S;
    /* GELU's input gradient overwrites dact: dfc1 only for SwiGLU */
    e[DP__BUF_DFC1] = ex->m->ffn != DP_FFN_GELU ? dm->N * dm->F1 : 0;
    e[DP__BUF_DACT] = dm->N * dm->f;
    /* torchtitan's per-op policy (recompute op) runs as the selective set here: the
     * probabilities are recomputed in backward into this buffer (model.c). */
    e[DP__BUF_PROBS] =
        l->recompute == DP_RECOMPUTE_SELECTIVE || l->recompute == DP_RECOMPUTE_OP ? S : 0;
    /* One layer's fp32 set: full recompute's, or the 2-byte stash's (with the layer's
     * input and output, xa and xb). */
    if (l->recompute == DP_RECOMPUTE_FULL || ex->stash16) {
        struct carver cv = {NULL, 0};
        rc_layout(ex, &cv, NULL);
        e[DP__BUF_RC] = (int64_t)((cv.off + sizeof(real) - 1) / sizeof(real));
    }
    if (ex->m->experts > 0) {
        /* moe.c's backward and dispatch buffers. */
        e[DP__BUF_MDY] = dm->R * dm->h;
        e[DP__BUF_MX] = dm->Rx * dm->h;
        e[DP__BUF_MDACT] = dm->Rx * dm->fe;
        e[DP__BUF_MDFC1] = ex->m->ffn != DP_FFN_GELU ? dm->Rx * dm->Fe1 : 0;
        /* The router's backward, or (capacity under CP) the ring's gathered choices. */
        e[DP__BUF_MDL] = dm->Nb * dm->E + dm->R + dm->E + (ex->m->moe_shared_gate ? dm->N : 0);
        if (dm->cap > 0 && dm->cp > 1 && dm->cp * dm->N * dm->K > e[DP__BUF_MDL])
            e[DP__BUF_MDL] = dm->cp * dm->N * dm->K;
        e[DP__BUF_SDACT] = dm->N * dm->sf;
        e[DP__BUF_SDFC1] = ex->m->ffn != DP_FFN_GELU ? dm->N * dm->Sf1 : 0;
    }
    e[DP__BUF_ROPE] = ex->m->pos == DP_POS_ROPE ? dm->T * dm->d : 0;
    /* act_head: the last stage. */
    if (ex->last) {
        e[DP__BUF_XF] = e[DP__BUF_LNF] = Nlh;
        e[DP__BUF_LNF_ST] = 2 * dm->Nl;
        e[DP__BUF_LOGITS] = dm->N * dm->Vl;
        e[DP__BUF_CE] = 4 * dm->N;
    }
    e[DP__BUF_SEND] = l->pp > 1 && !ex->last ? Nlh : 0;
    /* CP (cp.c): two ring blocks of k, v and their gradients, and the softmax sums. */
    e[DP__BUF_RING] = dm->cp > 1 ? 2 * dm->N * 4 * dm->kvd : 0;
    /* ... flash attention's backward: D = rowsum(dctx * ctx) in the same buffer */
    e[DP__BUF_CPST] = dm->cp > 1 || ex->flash ? dm->B * dm->a * dm->T : 0;
    /* bf16 / fp16: the working copy of the weights beside the fp32 master (Megatron's
     * Float16OptimizerWithFloat16Params keeps both): the layers' part in 2-byte words,
     * the edge in fp32 for the step, and one layer's fp32 window the kernels read
     * (model.c). Under the test hook (or a backend without pack) the whole copy in fp32,
     * flat length, as before. ZeRO-3 has none: its gathered windows are the working copy. */
    if (ex->dtype != DP_DT_FP32 && l->zero < 3) {
        if (ex->pw_emul) {
            e[DP__BUF_PWORK] = flat;
        } else {
            e[DP__BUF_PW16] = (int64_t)(ex->edge_hi - ex->edge_lo);
            e[DP__BUF_PWEDGE] = (int64_t)ex->edge_n;
            e[DP__BUF_PWWIN] = (int64_t)ex->win_n;
        }
    }
    /* Slots: at most min(pp - stage, M) micro-batches are in flight under 1F1B. */
    int64_t inflight = l->pp - ex->c.pp_rank;
    p->slots = (int)(inflight < ex->M ? inflight : ex->M);
    p->slot_bytes = (int64_t)slot_layout(ex, 0, NULL, NULL);
    int64_t slots_bytes = p->slots * p->slot_bytes;
    if (ex->nch > 1) {
        /* Interleaved: the slots and received gradients the stage's timeline holds at
         * once (interleave.c); every stage sends forward (the last to the first). */
        size_t sb[DP_MAX_CHUNKS];
        for (int c = 0; c < ex->nch; c++)
            sb[c] = slot_layout(ex, c, NULL, NULL);
        struct dp__vsched vs;
        struct dp_err err = {0};
        p->slots = 0;
        if (!dp__vsched_build(l->pp, ex->nch, ex->M, ex->c.pp_rank,
                              l->schedule == DP_SCHED_DUALPIPEV, sb, false, &vs, &err)) {
            for (int c = 0; c < ex->nch; c++)
                p->slots += vs.ch_max[c];
            slots_bytes = vs.peak_bytes;
            e[DP__BUF_GRECV] = vs.grecv_max * Nlh;
        } else {
            /* Out of memory for the count: every micro-batch of every chunk at once. */
            slots_bytes = 0;
            for (int c = 0; c < ex->nch; c++)
                slots_bytes += ex->M * (int64_t)sb[c];
            p->slots = (int)(ex->M * ex->nch);
            e[DP__BUF_GRECV] = ex->M * ex->nch * Nlh;
        }
        e[DP__BUF_SEND] = Nlh;
    }
    for (int b = 0; b < DP__NBUF; b++)
        p->pool_bytes[bufs[b].pool] += e[b] * esize(b);
    p->pool_bytes[DP_POOL_ACT_SLOTS] = slots_bytes;
}

/* ------------------------------------------------------------------ allocation */

static void rope_table(struct dp_exec *ex, bool *fail)
{
    /* cos and sin of p * 10000^(-2i/d), i < d/2 (Su et al. 2021, Eq. 34). */
    const struct dp_dims *dm = &ex->dm;
    int64_t half = dm->d / 2;
    real *host = malloc((size_t)(dm->T * dm->d) * sizeof(real));
    if (!host) {
        *fail = true;
        return;
    }
    for (int64_t p = 0; p < dm->T; p++)
        for (int64_t i = 0; i < half; i++) {
            /* row p is local row p: its global position under CP (cp.c) */
            double th = (double)dp__cp_pos(ex, p) * pow(10000.0, -2.0 * (double)i / (double)dm->d);
            host[p * half + i] = (real)cos(th);
            host[dm->T * half + p * half + i] = (real)sin(th);
        }
    OPS->upload(ex->be, ex->w.rope, host, (size_t)(dm->T * dm->d) * sizeof(real));
    free(host);
}

int dp__mem_build(struct dp_exec *ex)
{
    struct dp__memplan p;
    dp__memplan(ex, &p);
    memcpy(ex->predicted, p.pool_bytes, sizeof ex->predicted);
    ex->shard = (size_t)p.elems[DP__BUF_ADAM_M];
    ex->nflat = ex->zsplit ? ex->nparams : ex->l.zero >= 1 ? ex->shard * (size_t)ex->sg : ex->shard;
    ex->shard_off = ex->l.zero >= 1 && !ex->zsplit ? (size_t)ex->sg_rank * ex->shard : 0;
    for (int b = 0; b < DP__NBUF; b++) {
        real **at = (real **)((char *)ex + bufs[b].offset);
        if (!p.elems[b])
            continue;
        size_t bytes = (size_t)(p.elems[b] * esize(b));
        if (!(*at = dp__mem_alloc(ex->be, &ex->mem, bufs[b].pool, bytes)))
            return dp_err_set(
                ex->err, DP_ENOMEM, "rank %d: cannot allocate %.1f MiB of %s (the parameters: %zu)",
                ex->rank, (double)bytes / 1048576.0, dp_pool_name(bufs[b].pool), ex->nparams);
    }
    if (ex->w.rc_mem) {
        struct carver cv = {(char *)ex->w.rc_mem, 0};
        rc_layout(ex, &cv, &ex->w);
    }
    bool fail = false;
    if (ex->w.rope)
        rope_table(ex, &fail);
    ex->maxslots = p.slots;
    ex->slot_bytes = (size_t)p.slot_bytes;
    for (int c = 0; c < ex->nch; c++)
        ex->ch_slot_bytes[c] = slot_layout(ex, c, NULL, NULL);
    if (ex->nch > 1) {
        if (!(ex->vs = calloc(1, sizeof *ex->vs)))
            return dp_err_set(ex->err, DP_ENOMEM, "rank %d: out of memory", ex->rank);
        TRY(dp__vsched_build(ex->l.pp, ex->nch, ex->M, ex->c.pp_rank,
                             ex->l.schedule == DP_SCHED_DUALPIPEV, ex->ch_slot_bytes, true, ex->vs,
                             ex->err));
        ex->ngrecv = ex->vs->grecv_max;
        ex->grecv_mb = malloc((size_t)(ex->ngrecv ? ex->ngrecv : 1) * sizeof(int));
        ex->grecv_ch = malloc((size_t)(ex->ngrecv ? ex->ngrecv : 1) * sizeof(int));
        if (!ex->grecv_mb || !ex->grecv_ch)
            return dp_err_set(ex->err, DP_ENOMEM, "rank %d: out of memory", ex->rank);
        for (int i = 0; i < ex->ngrecv; i++)
            ex->grecv_mb[i] = ex->grecv_ch[i] = -1;
    }
    ex->slots = calloc((size_t)(ex->maxslots ? ex->maxslots : 1), sizeof *ex->slots);
    for (int i = 0; ex->slots && i < ex->maxslots; i++)
        ex->slots[i].mb = -1;
    if (fail || !ex->slots)
        return dp_err_set(ex->err, DP_ENOMEM, "rank %d: out of memory", ex->rank);
    ex->gred = dp__gred_own(ex) ? ex->gred : ex->grads; /* ZeRO-1: the chunk at grads[0, shard) */
    return 0;
}

void dp__mem_release(struct dp_exec *ex)
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
    if (ex->vs)
        dp__vsched_free(ex->vs);
    free(ex->vs);
    free(ex->grecv_mb);
    free(ex->grecv_ch);
    ex->vs = NULL;
    ex->grecv_mb = ex->grecv_ch = NULL;
    if (!dp__gred_own(ex))
        ex->gred = NULL; /* an alias of grads */
    /* Pool accounting is not unwound: the peaks are what matters and the rank ends. */
    for (int b = 0; b < DP__NBUF; b++) {
        real **at = (real **)((char *)ex + bufs[b].offset);
        if (*at)
            be->ops->free(be, *at);
        *at = NULL;
    }
}

struct dp_slot *dp__slot_acquire(struct dp_exec *ex, int mb)
{
    return dp__slot_acquire_chunk(ex, mb, 0);
}

struct dp_slot *dp__slot_find(struct dp_exec *ex, int mb, int chunk)
{
    for (int i = 0; i < ex->nslots; i++)
        if (ex->slots[i].mb == mb && ex->slots[i].chunk == chunk)
            return &ex->slots[i];
    return NULL;
}

struct dp_slot *dp__slot_acquire_chunk(struct dp_exec *ex, int mb, int chunk)
{
    struct dp_slot *s = NULL;
    for (int i = 0; i < ex->nslots; i++)
        if (ex->slots[i].mb < 0 && ex->slots[i].chunk == chunk) {
            s = &ex->slots[i];
            break;
        }
    if (!s) {
        if (ex->nslots == ex->maxslots) {
            dp_err_set(ex->err, DP_ERUNTIME, "internal: more than %d micro-batches in flight",
                       ex->maxslots);
            return NULL;
        }
        size_t bytes = ex->ch_slot_bytes[chunk];
        int nl = ex->ch_n[chunk];
        s = &ex->slots[ex->nslots];
        s->layers = calloc((size_t)(nl ? nl : 1), sizeof *s->layers);
        s->mem = dp__mem_alloc_unheld(ex->be, &ex->mem, bytes);
        if (!s->layers || !s->mem) {
            free(s->layers);
            if (s->mem)
                ex->be->ops->free(ex->be, s->mem);
            memset(s, 0, sizeof *s);
            dp_err_set(ex->err, DP_ENOMEM, "rank %d: cannot allocate activations (%.1f MiB)",
                       ex->rank, (double)bytes / 1048576.0);
            return NULL;
        }
        s->bytes = bytes;
        s->chunk = chunk;
        slot_layout(ex, chunk, s, s->mem);
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

/* ------------------------------------------------------------------ the estimate */

int dp_exec_memory(const struct dp_model *m, const struct dp_layout *l, int stage,
                   int64_t out[DP_NPOOLS], struct dp_err *err)
{
    return dp_exec_memory_attn(m, l, stage, DP_EXEC_ATTN_MATH, out, err);
}

int dp_exec_memory_attn(const struct dp_model *m, const struct dp_layout *l, int stage,
                        enum dp_exec_attn attn, int64_t out[DP_NPOOLS], struct dp_err *err)
{
    memset(out, 0, DP_NPOOLS * sizeof *out);
    int rc = dp_layout_validate(l, m, 0, err);
    if (rc)
        return rc;
    if (stage < 0 || stage >= l->pp)
        return dp_err_set(err, DP_EINVAL, "stage %d: the layout has %d stages", stage, l->pp);
    struct dp_exec *ex = calloc(1, sizeof *ex);
    if (!ex)
        return dp_err_set(err, DP_ENOMEM, "out of memory");
    ex->m = m;
    ex->l = *l;
    ex->err = err;
    ex->c.pp_rank = stage;
    ex->flash = attn == DP_EXEC_ATTN_FLASH && l->cp <= 1; /* CP: ring attention */
    /* The storage precision is the layout's here (`dplan run` gives the run's own). */
    ex->dtype = l->precision == DP_BF16   ? DP_DT_BF16
                : l->precision == DP_FP16 ? DP_DT_FP16
                                          : DP_DT_FP32;
    ex->stash16 = dp__stash16_on(ex);
    dp__dims_init(ex);
    dp__stage_place(ex, stage);
    ex->M = dp_layout_microbatches(l);
    rc = dp__model_build(ex); /* the tensor table: the parameter count */
    if (!rc) {
        struct dp__memplan p;
        dp__memplan(ex, &p);
        memcpy(out, p.pool_bytes, DP_NPOOLS * sizeof *out);
    }
    dp__model_release(ex);
    free(ex);
    return rc;
}
