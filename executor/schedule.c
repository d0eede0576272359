/*
 * One training step on one rank: the micro-batches through the pipeline with
 * the 1F1B schedule, the gradient reductions (sequence parallel, tied
 * embeddings, data parallel or ZeRO-1), the global gradient norm and AdamW.
 *
 * 1F1B as Megatron-LM schedules.py forward_backward_pipelining_without_
 * interleaving (Narayanan et al. 2021, Sec. 2.2): stage r of p runs
 * min(p - r - 1, M) warm-up forwards, then alternates one forward and one
 * backward, then drains the remaining backwards; at most min(p - r, M)
 * micro-batches are in flight, which is what the memory model assumes.
 * Messages pair up as Megatron's send_forward_recv_backward and
 * send_backward_recv_forward (MPI_Sendrecv), so no ordering can deadlock.
 *
 * ZeRO-1 (Rajbhandari et al. 2020, P_os) as llm.c zero.cuh, with padding
 * instead of falling back: the flat gradient buffer (padded to a multiple
 * of the shard group, dp unless HSDP) is reduce-scattered, each rank updates
 * its contiguous shard with AdamW, and the parameters are all-gathered.
 * ZeRO-2/3 and HSDP keep that geometry and are shard.c's.
 */
#include "internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { TAG_FWD = 1, TAG_BWD = 2 };

/*
 * The global batch of step s (1-based) is gbs consecutive windows of T + 1 tokens
 * (overlapping by one: targets are inputs shifted by one), window w starting at token
 * w * T, wrapping around the data. Sequence j of the batch goes to DP rank j / (gbs / dp),
 * micro-batch (j mod gbs/dp) / mbs; every layout sees the same sequences each step.
 */
void dp__load_batch(struct dp_exec *ex, struct dp_slot *s, int step, int mb)
{
    const struct dp_tokens *d = ex->o.data;
    if ((!s->inputs && !s->targets) || !d)
        return; /* no data: the step-time prediction's pricing rank (predict.c) */
    /* CP: the rank's T local rows of each window, at their global positions (cp.c). */
    const int64_t T = ex->dm.T, B = ex->dm.B, Tg = ex->dm.Tg;
    const int64_t nwin = (d->n - 1) / Tg;
    const int64_t per_dp = ex->l.gbs / ex->l.dp;
    int32_t *in = ex->host_tok, *tg = ex->host_tok + ex->dm.N;
    for (int64_t b = 0; b < B; b++) {
        int64_t j = ex->c.dp_rank * per_dp + (int64_t)mb * B + b;
        int64_t w = ((int64_t)(step - 1) * ex->l.gbs + j) % nwin;
        const uint16_t *src = d->tok + w * Tg;
        for (int64_t t = 0; t < T; t++) {
            in[b * T + t] = src[dp__cp_pos(ex, t)];
            tg[b * T + t] = src[dp__cp_pos(ex, t) + 1];
        }
    }
    size_t bytes = (size_t)ex->dm.N * sizeof(int32_t);
    if (s->inputs)
        OPS->upload(ex->be, s->inputs, in, bytes);
    if (s->targets)
        OPS->upload(ex->be, s->targets, tg, bytes);
}

/* Pipeline messages: -1 = no peer. */
static int pp_xchg(struct dp_exec *ex, int to, const real *sbuf, int stag, int from, real *rbuf,
                   int rtag)
{
    if (to < 0 && from < 0)
        return 0;
    int64_t n = ex->dm.Nl * ex->dm.h;
    dp__beat(to >= 0 && from >= 0 ? "pipeline send+receive"
             : to >= 0            ? "pipeline send"
                                  : "pipeline receive");
    return OPS->sendrecv(ex->be, DP_GROUP_PP, to, sbuf, to >= 0 ? n : 0, stag, from, rbuf,
                         from >= 0 ? n : 0, rtag, ex->err);
}

/* dp_exec_schedule: " F3" / " B3" for each micro-batch's forward / backward, in order. */
static void trace(struct dp_exec *ex, char what, int mb)
{
    size_t n = strlen(ex->trace);
    if (n + 16 < ex->trace_cap)
        snprintf(ex->trace + n, ex->trace_cap - n, "%s%c%d", n ? " " : "", what, mb);
    else if (n >= 3 && n + 5 < ex->trace_cap && strcmp(ex->trace + n - 3, "...") != 0)
        snprintf(ex->trace + n, ex->trace_cap - n, " ...");
}

static int forward_mb(struct dp_exec *ex, struct dp_slot *s)
{
    if (ex->trace)
        trace(ex, 'F', s->mb);
    dp__beat("forward");
    TRY(dp__stage_forward(ex, s));
    dp__beat(NULL);
    return 0;
}

static int backward_mb(struct dp_exec *ex, struct dp_slot *s)
{
    if (ex->trace)
        trace(ex, 'B', s->mb);
    dp__beat("backward");
    TRY(dp__stage_backward(ex, s));
    dp__slot_release(ex, s);
    dp__beat(NULL);
    return 0;
}

int dp__pipeline(struct dp_exec *ex, int step)
{
    if (ex->nch > 1)
        return dp__pipeline_interleaved(ex, step); /* vpp > 1: interleave.c */
    const int p = ex->l.pp, r = ex->c.pp_rank;
    const int64_t M = ex->M;
    const int prev = ex->first ? -1 : r - 1, next = ex->last ? -1 : r + 1;
    int64_t warm = p - r - 1 < M ? p - r - 1 : M, rem = M - warm;
    struct dp_slot *fifo[1024];
    int head = 0, tail = 0, mb = 0;
    if (ex->maxslots > 1024)
        return dp_err_set(ex->err, DP_EINFEASIBLE, "more than 1024 micro-batches in flight");
#define PUSH(s) (fifo[tail++ % 1024] = (s))
#define POP()   (fifo[head++ % 1024])
    struct dp_slot *s;
    for (int64_t i = 0; i < warm; i++) {
        if (!(s = dp__slot_acquire(ex, mb)))
            return ex->err->code;
        dp__load_batch(ex, s, step, mb++);
        TRY(pp_xchg(ex, -1, NULL, 0, prev, s->layers[0].x, TAG_FWD));
        TRY(forward_mb(ex, s));
        TRY(pp_xchg(ex, next, ex->send_fwd, TAG_FWD, -1, NULL, 0));
        PUSH(s);
    }
    if (rem > 0) {
        if (!(s = dp__slot_acquire(ex, mb)))
            return ex->err->code;
        dp__load_batch(ex, s, step, mb++);
        TRY(pp_xchg(ex, -1, NULL, 0, prev, s->layers[0].x, TAG_FWD));
    }
    for (int64_t i = 0; i < rem; i++) {
        TRY(forward_mb(ex, s));
        PUSH(s);
        TRY(pp_xchg(ex, next, ex->send_fwd, TAG_FWD, next, ex->w.dres, TAG_BWD));
        TRY(backward_mb(ex, POP()));
        if (i == rem - 1) {
            TRY(pp_xchg(ex, prev, ex->w.dres, TAG_BWD, -1, NULL, 0));
        } else {
            if (!(s = dp__slot_acquire(ex, mb)))
                return ex->err->code;
            dp__load_batch(ex, s, step, mb++);
            TRY(pp_xchg(ex, prev, ex->w.dres, TAG_BWD, prev, s->layers[0].x, TAG_FWD));
        }
    }
    for (int64_t i = 0; i < warm; i++) {
        TRY(pp_xchg(ex, -1, NULL, 0, next, ex->w.dres, TAG_BWD));
        TRY(backward_mb(ex, POP()));
        TRY(pp_xchg(ex, prev, ex->w.dres, TAG_BWD, -1, NULL, 0));
    }
#undef PUSH
#undef POP
    return 0;
}

/* Gradient norm contribution of this rank: each element of the model counted once. */
static double local_sumsq(struct dp_exec *ex)
{
    double s = 0;
    bool zero = ex->l.zero >= 1;
    /* DP and CP replicas hold the same reduced gradients (dp_rank 0, cp_rank 0 counts);
     * the experts' ranks with edp_rank 0 hold one copy of every expert slice (groups.h);
     * under HSDP the replicas of a shard hold the same (replica 0 counts). */
    const bool dense_here = zero ? ex->repl_rank == 0 : ex->c.dp_rank == 0 && ex->c.cp_rank == 0;
    const bool exp_here = !ex->dm.esplit ? dense_here
                          : zero         ? ex->erepl_rank == 0
                                         : ex->dm.edp_rank == 0;
    for (int i = 0; i < ex->nsegs; i++) {
        const struct dp_seg *sg = &ex->segs[i];
        if (sg->t.tied_copy || (sg->norm_once && ex->c.tp_rank != 0))
            continue;
        if (!(sg->t.expert >= 0 ? exp_here : dense_here))
            continue;
        size_t lo = sg->off, hi = sg->off + (size_t)(sg->t.rows * sg->t.cols);
        if (zero) {
            /* Only this rank's shard holds reduced gradients, at gred[0, shard). */
            if (!dp__seg_in_shard(ex, sg, &lo, &hi))
                continue;
            s += OPS->sumsq(ex->be, ex->gred + dp__shard_idx(ex, sg, lo), (int64_t)(hi - lo));
        } else {
            s += OPS->sumsq(ex->be, ex->grads + lo, (int64_t)(hi - lo));
        }
    }
    return s;
}

static int reduce_grads(struct dp_exec *ex)
{
    dp__beat("gradient reduction");
    if (ex->ov) /* buckets in flight since the backward (overlap.c) */
        return dp__overlap_reduce(ex);
    if (ex->l.zero >= 2)
        return dp__shard_step_reduce(ex); /* the layers were reduced during backward */
    /* Sequence parallel: replicated parameters saw only this rank's tokens
     * (Megatron finalize_model_grads, "all-reduce layernorm grads"). */
    for (int i = 0; i < ex->nsegs; i++) {
        const struct dp_seg *sg = &ex->segs[i];
        if (sg->tp_partial)
            TRY(OPS->allreduce(ex->be, DP_GROUP_TP, ex->grads + sg->off, sg->t.rows * sg->t.cols,
                               DP_OP_SUM, ex->err));
    }
    /* Tied embeddings over a pipeline: first and last stage each hold a copy and add
     * their gradients (Megatron _allreduce_word_embedding_grads). */
    if (ex->m->tied_embeddings && dp__emb_pair(ex)) {
        size_t off = ex->first ? ex->wte : ex->head;
        TRY(OPS->allreduce(ex->be, DP_GROUP_EMB, ex->grads + off, ex->dm.Vl * ex->dm.h, DP_OP_SUM,
                           ex->err));
    }
    /* Data parallel: each replica's gradient is already scaled by 1 / (gbs T), so the
     * sum over replicas is the gradient of the global mean loss. */
    if (ex->l.zero >= 1) {
        if (ex->zsplit) { /* dense over DP, experts over EDP (shard.c) */
            TRY(dp__shard_reduce_flat(ex));
            return dp__shard_step_reduce(ex);
        }
        /* The shard group spans dp x cp: the CP ranks' gradients are summed in it. */
        TRY(OPS->reduce_scatter(ex->be, DP_GROUP_SHARD, ex->grads, (int64_t)ex->shard, ex->err));
        return dp__shard_step_reduce(ex); /* HSDP: over the replicas */
    }
    /* Over dp x cp (Megatron's data-parallel group with CP); the DP group when cp = 1. */
    if (!ex->dm.esplit)
        return OPS->allreduce(ex->be, DP_GROUP_DPCP, ex->grads, (int64_t)ex->nparams, DP_OP_SUM,
                              ex->err);
    /* Experts in their own group: their gradients over the ranks holding the same expert
     * slices (expert data parallel, tp cp dp / (etp ep), groups.h), the rest over dp x cp
     * (Megatron-Core finalize_model_grads: expert grads reduced over the
     * expert-data-parallel group); in runs of consecutive segments of one kind. */
    for (int i = 0; i < ex->nsegs;) {
        bool expert = ex->segs[i].t.expert >= 0;
        int j = i;
        while (j < ex->nsegs && (ex->segs[j].t.expert >= 0) == expert)
            j++;
        size_t lo = ex->segs[i].off;
        size_t hi = ex->segs[j - 1].off + (size_t)(ex->segs[j - 1].t.rows * ex->segs[j - 1].t.cols);
        TRY(OPS->allreduce(ex->be, expert ? DP_GROUP_EDP : DP_GROUP_DPCP, ex->grads + lo,
                           (int64_t)(hi - lo), DP_OP_SUM, ex->err));
        i = j;
    }
    return 0;
}

int dp__step_begin(struct dp_exec *ex)
{
    if (ex->l.zero < 2)
        OPS->zero(ex->be, ex->grads, ex->nflat * sizeof(real));
    ex->loss_sum = 0;
    ex->aux_sum = 0;
    TRY(dp__shard_step_begin(ex));
    TRY(dp__overlap_step_begin(ex));
    dp__model_working_copy(ex); /* bf16 / fp16: from the master weights, once a step */
    return 0;
}

/*
 * A test hook (tests/executor: the loss-scaler test): DPLAN_TEST_GRAD_INF="3,4" makes
 * world rank 0's first reduced gradient element inf at steps 3 and 4, after the
 * reduction, so that only the overflow check's MAX over the world tells the other
 * ranks. fp16 runs only; nothing else reads it.
 */
static void inject_inf(struct dp_exec *ex)
{
    const char *e = getenv("DPLAN_TEST_GRAD_INF");
    if (!e || ex->rank != 0 || ex->dtype != DP_DT_FP16)
        return;
    for (const char *q = e; *q;) {
        char *end;
        long k = strtol(q, &end, 10);
        if (end == q)
            return;
        if (k == ex->step) {
            real inf = (real)INFINITY;
            real *g = ex->l.zero >= 1 ? ex->gred : ex->grads;
            OPS->upload(ex->be, g, &inf, sizeof inf);
            return;
        }
        q = *end == ',' ? end + 1 : end;
    }
}

/* Megatron-Core DynamicGradScaler.update (megatron/core/optimizer/grad_scaler.py): an
 * overflow resets the growth count and spends one of the hysteresis; with none left
 * the scale halves (not below the minimum); DP_LS_WINDOW clean steps in a row double it
 * and restore the hysteresis. */
void dp__loss_scale_update(struct dp_exec *ex, bool found_inf)
{
    if (found_inf) {
        ex->ls_growth = 0;
        ex->ls_hyst--;
        if (ex->ls_hyst <= 0)
            ex->ls_scale = fmax(ex->ls_scale * 0.5, DP_LS_MIN);
    } else if (++ex->ls_growth == DP_LS_WINDOW) {
        ex->ls_growth = 0;
        ex->ls_hyst = DP_LS_HYSTERESIS;
        ex->ls_scale *= 2.0;
    }
}

int dp__step_reduce(struct dp_exec *ex, double *loss)
{
    double t0 = OPS->wtime(ex->be);
    TRY(reduce_grads(ex));
    ex->dp_exposed_s = OPS->wtime(ex->be) - t0;
    /* One world all-reduce: the loss (last stage, one TP rank per replica) and the
     * squared gradient norm. */
    if (ex->dtype == DP_DT_FP16)
        inject_inf(ex);
    double v[2] = {ex->last && ex->c.tp_rank == 0 ? ex->loss_sum : 0.0, local_sumsq(ex)};
    /* MoE: the auxiliary loss of every stage's layers (moe.c), once per expert tensor
     * group (the TP group when etp = tp). */
    if (ex->c.tp_rank % (ex->dm.etp > 0 ? ex->dm.etp : ex->dm.tp) == 0)
        v[0] += ex->aux_sum;
    /* fp16: the overflow check (Megatron _unscale_main_grads_and_check_for_nan: found_inf
     * all-reduced with MAX over the model-parallel group). A sum of squares is inf or nan
     * when any element is; the replicas this rank skips in the norm hold the same
     * reduced values as the ranks that count them, so every gradient is looked at. */
    double inf = ex->dtype == DP_DT_FP16 && !isfinite(v[1]) ? 1.0 : 0.0;
    TRY(OPS->allreduce_host(ex->be, DP_GROUP_WORLD, v, 2, DP_OP_SUM, ex->err));
    if (ex->dtype == DP_DT_FP16)
        TRY(OPS->allreduce_host(ex->be, DP_GROUP_WORLD, &inf, 1, DP_OP_MAX, ex->err));
    ex->found_inf = inf > 0;
    ex->grad_sumsq = v[1];
    *loss = v[0] / (double)ex->gbs_tokens;
    return 0;
}

int dp__forward_backward(struct dp_exec *ex, int step, double *loss)
{
    ex->step = step;
    TRY(dp__step_begin(ex));
    TRY(dp__pipeline(ex, step));
    return dp__step_reduce(ex, loss);
}

int dp__grad_norm(struct dp_exec *ex, double *norm)
{
    *norm = sqrt(ex->grad_sumsq);
    return 0;
}

int dp__optimizer_step(struct dp_exec *ex, double lr, double gscale)
{
    const struct dp_exec_opts *o = &ex->o;
    ex->adam_t++;
    double bc1 = 1.0 - pow(o->beta1, (double)ex->adam_t);
    double bc2 = 1.0 - pow(o->beta2, (double)ex->adam_t);
    bool zero = ex->l.zero >= 1;
    dp__beat("optimizer");
    for (int i = 0; i < ex->nsegs; i++) {
        const struct dp_seg *sg = &ex->segs[i];
        size_t lo = sg->off, hi = sg->off + (size_t)(sg->t.rows * sg->t.cols);
        size_t base = 0; /* where element `lo` of the flat buffer sits in gred/m/v */
        if (zero) {
            if (!dp__seg_in_shard(ex, sg, &lo, &hi))
                continue;
            base = dp__shard_idx(ex, sg, lo);
        } else {
            base = lo;
        }
        /* ZeRO-3: the parameters are the shard itself. */
        real *p = ex->l.zero >= 3 ? ex->pshard + base : ex->params + lo;
        OPS->adamw(ex->be, p, (zero ? ex->gred : ex->grads) + base, ex->adam_m + base,
                   ex->adam_v + base, (int64_t)(hi - lo), lr, o->beta1, o->beta2, o->eps,
                   sg->decay ? o->weight_decay : 0.0, bc1, bc2, gscale);
    }
    if (zero && ex->l.zero < 3 && ex->zsplit)
        TRY(dp__shard_gather_params(ex));
    else if (zero && ex->l.zero < 3)
        TRY(OPS->allgather(ex->be, DP_GROUP_SHARD, ex->params, (int64_t)ex->shard, ex->err));
    TRY(dp__moe_bias_update(ex));
    dp__beat(NULL);
    return 0;
}
