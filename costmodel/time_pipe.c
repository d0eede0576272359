/*
 * The step time's pipeline part: each model chunk's forward and backward per
 * micro-batch (its layers by kind, the share of them that recomputes, the embedding
 * in the first chunk, the output layer and loss in the last, its sends), the
 * interleaved 1F1B schedule over them (costmodel/pipeline.c) and the slowest rank's
 * breakdown. The layer costs come from costmodel/time.c.
 */
#include "time_internal.h"

#include <string.h>

/* Per micro-batch time of a part of a stage (one layer, the embedding, the output layer),
 * split by kind; forward and backward as the schedule needs them. */
struct stage_cost {
    double compute_f, compute_b, recompute, tp_f, tp_b, tp_re, cp_f, cp_b, ep_f, ep_b, pp;
};

static double fwd_of(const struct stage_cost *x)
{
    return x->compute_f + x->tp_f + x->cp_f + x->ep_f + x->pp / 2;
}
static double bwd_of(const struct stage_cost *x)
{
    return x->compute_b + x->recompute + x->tp_b + x->tp_re + x->cp_b + x->ep_b + x->pp / 2;
}
static double total_of(const struct stage_cost *x)
{
    return fwd_of(x) + bwd_of(x);
}

/* acc += k x. */
static void add_scaled(struct stage_cost *acc, const struct stage_cost *x, double k)
{
    acc->compute_f += k * x->compute_f;
    acc->compute_b += k * x->compute_b;
    acc->recompute += k * x->recompute;
    acc->tp_f += k * x->tp_f;
    acc->tp_b += k * x->tp_b;
    acc->tp_re += k * x->tp_re;
    acc->cp_f += k * x->cp_f;
    acc->cp_b += k * x->cp_b;
    acc->ep_f += k * x->ep_f;
    acc->ep_b += k * x->ep_b;
    acc->pp += k * x->pp;
}

/* One decoder layer: its passes (*o) and, apart, what recomputation adds to its
 * backward (*re), which recompute_layers may apply to only some layers of a stage. */
static void layer_part(const struct dp__time_ctx *c, const struct dp_layer_time *lc,
                       enum dp_layer_kind kind, struct stage_cost *o, struct stage_cost *re)
{
    memset(o, 0, sizeof *o);
    memset(re, 0, sizeof *re);
    o->compute_f = lc->gemm_f + lc->attn_f + lc->ew_f + lc->cast_f;
    o->compute_b = 2 * lc->gemm_f + lc->attn_b + 2 * lc->ew_f + lc->cast_b;
    o->tp_f = lc->tp_f;
    o->tp_b = lc->tp_b;
    o->cp_f = lc->cp_f;
    o->cp_b = lc->cp_b;
    o->ep_f = lc->ep_f;
    o->ep_b = lc->ep_b;
    struct dp__redo rd;
    dp__time_redo(c->l, lc, kind, &rd);
    re->recompute = rd.compute_s;
    re->tp_re = rd.tp_s;
    re->ep_b = rd.ep_s;
}

/* What recomputing a layer's (or a block's: the terms are additive) forward adds to its
 * backward under the layout's policy. */
void dp__time_redo(const struct dp_layout *l, const struct dp_layer_time *lc,
                   enum dp_layer_kind kind, struct dp__redo *re)
{
    memset(re, 0, sizeof *re);
    if (l->recompute == DP_RECOMPUTE_FULL) {
        /* The whole forward again, collectives included (Megatron checkpoints the
         * layer input and reruns the layer: tensor_parallel.checkpoint's CheckpointFunction;
         * DeepSpeed's checkpointing likewise); PyTorch's non-reentrant checkpoint
         * (torchtitan's and Composer/llm-foundry's checkpoint_wrapper with NO_REENTRANT)
         * stops before what follows the last saved tensor (time.c tail_f). */
        re->compute_s = lc->gemm_f + lc->attn_f + lc->ew_f + lc->cast_f;
        re->compute_s -= lc->tail_f;
        re->tp_s = lc->tp_f;
        re->ep_s = lc->ep_f - lc->tail_ep_f;
    } else if (l->recompute == DP_RECOMPUTE_SELECTIVE) {
        /* Megatron-Core recompute_modules (default core_attn: the attention core and its
         * element-wise passes, Korthikanti Sec. 5). */
        unsigned mods = l->recompute_modules ? l->recompute_modules : DP_RCM_CORE_ATTN;
        double rc = 0;
        if (mods & DP_RCM_CORE_ATTN)
            rc += lc->attn_f + lc->attn_ew_f;
        if (mods & DP_RCM_LAYERNORM)
            rc += lc->norm_f;
        if (mods & DP_RCM_MLA_UP_PROJ)
            rc += lc->mla_up_f;
        if (kind == DP_LAYER_DENSE && (mods & DP_RCM_MLP))
            rc += lc->mlp_f;
        if (kind == DP_LAYER_MOE) {
            if (mods & DP_RCM_MOE) {
                rc += lc->moe_f;
                re->ep_s = lc->ep_f; /* the dispatch runs again */
            } else {
                rc += (mods & DP_RCM_MOE_ACT ? lc->moe_act_f : 0) +
                      (mods & DP_RCM_SHARED_EXPERTS ? lc->shared_f : 0);
            }
        }
        re->compute_s = rc;
    } else if (l->recompute == DP_RECOMPUTE_OP) {
        /* torchtitan's per-op SAC: what its policy does not save (time.c op_f, op_tp_f). */
        re->compute_s = lc->op_f;
        re->tp_s = lc->op_tp_f;
    }
}

/* The share of stage r's layers that recompute: all of them, or with full recompute
 * and recompute_layers that many of the stage's (dp_layout_recomputed). */
static double recompute_share(const struct dp_layout *l, const struct dp_model *m, int r)
{
    if (l->recompute != DP_RECOMPUTE_FULL || l->recompute_layers <= 0)
        return 1;
    int n = dp_layout_stage_layers(l, m, r);
    return n > 0 ? (double)dp_layout_recomputed(l, n) / n : 0;
}

/* The first stage's embedding, the last stage's output layer and loss (from the
 * per-layer costs, where dp_time_layer put them). */
static void embed_part(const struct dp_layer_time *lc, struct stage_cost *o)
{
    memset(o, 0, sizeof *o);
    o->compute_f = lc->emb_f;
    o->compute_b = lc->emb_b;
    o->tp_f = lc->emb_tp_f;
}

static void head_part(const struct dp_layer_time *lc, struct stage_cost *o)
{
    memset(o, 0, sizeof *o);
    o->compute_f = lc->head_f;
    o->compute_b = lc->head_b;
    o->tp_f = lc->head_tp_f;
    o->tp_b = lc->head_tp_b;
}

/* Activations to the next stage and gradients back, once per model chunk; each of
 * the t GPUs sends 1/t of the tensor (Narayanan et al. 2021, Sec. 4.1
 * scatter/gather). Send and receive of a step overlap each other but not compute
 * (Megatron's 1F1B issues them around each micro-batch). The stages move in
 * lockstep, so the pipeline's slowest hop paces every stage (c->pp). */
static double p2p_part(const struct dp__time_ctx *c)
{
    if (c->l->pp <= 1)
        return 0;
    double bytes = c->p * c->T * (double)c->m->hidden / c->t;
    return dp_coll_time_s(DP_P2P, bytes, 2, &c->pp);
}

/* acc = a stage's layers by kind with the share of them that recomputes, plus the ends
 * it holds and its sends (P: per model chunk and direction). */
static void device_cost(const struct dp_layout *l, const struct dp_model *m, int d,
                        const struct stage_cost one[DP_LAYER_KINDS],
                        const struct stage_cost re[DP_LAYER_KINDS], const struct stage_cost *emb,
                        const struct stage_cost *head, const double *P, struct stage_cost *acc)
{
    struct dp_layer_kinds kinds;
    dp_layout_stage_kinds(l, m, d, &kinds);
    memset(acc, 0, sizeof *acc);
    double fr = recompute_share(l, m, d);
    for (int k = 0; k < DP_LAYER_KINDS; k++)
        if (kinds.n[k]) {
            add_scaled(acc, &one[k], kinds.n[k]);
            add_scaled(acc, &re[k], fr * kinds.n[k]);
        }
    if (d == 0)
        add_scaled(acc, emb, 1);
    if (d == dp_layout_head_rank(l))
        add_scaled(acc, head, 1);
    for (int k = d; k < l->pp * l->vpp && k < DP_MAX_CHUNKS; k += l->pp)
        acc->pp += 2 * P[k]; /* (DualPipeV's other stage sends as much: even splits) */
}

/* The pipeline: each chunk's passes, the schedule, the slowest rank's breakdown;
 * what ZeRO does not change (struct dp_reuse keeps it). */
void dp__time_pipeline(const struct dp__time_ctx *c, const struct dp_layer_time lt[DP_LAYER_KINDS],
                       struct dp_reuse *r)
{
    const struct dp_model *m = c->m;
    const struct dp_layout *l = c->l;
    /* Each model chunk's forward and backward per micro-batch: its layers at their kind's
     * cost (dp_model_layer_kinds: dense-first MoE models differ by layer), the share of
     * them that recomputes, the embedding in the first, the output layer and loss in the
     * last, its sends. */
    const int pp = l->pp, v = l->vpp, S = pp * v;
    struct stage_cost one[DP_LAYER_KINDS], re[DP_LAYER_KINDS], emb, head;
    double f1[DP_LAYER_KINDS], b1[DP_LAYER_KINDS], r1[DP_LAYER_KINDS], w1[DP_LAYER_KINDS];
    double cc1[DP_LAYER_KINDS], cr1[DP_LAYER_KINDS]; /* compute alone, for pp_overlap */
    for (int k = 0; k < DP_LAYER_KINDS; k++) {
        layer_part(c, &lt[k], (enum dp_layer_kind)k, &one[k], &re[k]);
        f1[k] = fwd_of(&one[k]);
        b1[k] = bwd_of(&one[k]);
        r1[k] = bwd_of(&re[k]);
        w1[k] = lt[k].cast_w;
        cc1[k] = one[k].compute_f + one[k].compute_b;
        cr1[k] = re[k].recompute;
    }
    embed_part(&lt[0], &emb);
    head_part(&lt[0], &head);
    /* Multi-token prediction (layout mtp_layers) on the loss's chunk, after the output
     * layer: per depth one more transformer layer (dp_model_mtp_kind), with the last
     * stage's share of recompute, and the rest of the module (time.c ends). */
    if (l->mtp_layers > 0) {
        const enum dp_layer_kind K = dp_model_mtp_kind(m);
        const double q = recompute_share(l, m, pp - 1);
        add_scaled(&head, &one[K], l->mtp_layers);
        add_scaled(&head, &re[K], q * l->mtp_layers);
        head.compute_f += l->mtp_layers * lt[0].mtp_f;
        head.compute_b += l->mtp_layers * lt[0].mtp_b;
    }
    const double p2p = p2p_part(c);
    const bool mixed = dp_model_mixed_layers(m);
    const int only = m->experts > 0 ? DP_LAYER_MOE : DP_LAYER_DENSE;
    double fr[DP_MAX_PP];
    for (int d = 0; d < pp && d < DP_MAX_PP; d++)
        fr[d] = recompute_share(l, m, d);
    double F[DP_MAX_CHUNKS], B[DP_MAX_CHUNKS], P[DP_MAX_CHUNKS];
    /* DualPipeV: the passes inside an overlapped pair (the expert all-to-alls priced as
     * ep_pair) and the weight-gradient GEMMs its zero-bubble passes defer. */
    double Fp[DP_MAX_CHUNKS], Bp[DP_MAX_CHUNKS], Wg[DP_MAX_CHUNKS];
    const bool dpv = l->schedule == DP_SCHED_DUALPIPEV;
    double wcast = 0; /* per step: FP8 casts of every stage's weights */
    int first = 0;
    for (int k = 0; k < S && k < DP_MAX_CHUNKS; k++) {
        int n = l->nchunks > 0 ? l->chunk_layers[k] : dp_layout_chunk_count(l, m, k % pp, k / pp);
        double q = fr[dp_layout_stage_rank(l, k)], cc = 0;
        F[k] = B[k] = Fp[k] = Bp[k] = Wg[k] = 0;
        struct dp_layer_kinds kk = {{0}};
        if (!mixed)
            kk.n[only] = n;
        else
            dp_model_layer_kinds(m, first, n, &kk);
        for (int i = 0; i < DP_LAYER_KINDS; i++) {
            if (!kk.n[i])
                continue; /* (a kind the model lacks may cost NaN) */
            F[k] += kk.n[i] * f1[i];
            B[k] += kk.n[i] * (b1[i] + q * r1[i]);
            wcast += kk.n[i] * w1[i];
            cc += kk.n[i] * (cc1[i] + q * cr1[i]);
            if (dpv) { /* (the searches' 1F1B layouts skip this) */
                Fp[k] += kk.n[i] * (f1[i] - one[i].ep_f + lt[i].ep_pair);
                Bp[k] += kk.n[i] * (b1[i] + q * r1[i] - one[i].ep_b + lt[i].ep_pair);
                Wg[k] += kk.n[i] * lt[i].gemm_f; /* the weight gradients' GEMMs */
            }
        }
        /* overlap_p2p_comm (interleaved schedule; on by default in Megatron, which
         * defines only --no-overlap-p2p-communication): each chunk's send/receive runs
         * during the next chunk's computation (Megatron schedules.py,
         * forward_backward_pipelining_with_interleaving), here the chunk's own
         * compute per direction, as long as the next chunk's for an even split. */
        P[k] = l->pp_overlap && v > 1 ? overlapped(p2p, cc / 2) : p2p;
        F[k] += P[k];
        B[k] += P[k];
        Fp[k] += P[k];
        Bp[k] += P[k];
        first += n;
    }
    F[0] += fwd_of(&emb);
    B[0] += bwd_of(&emb);
    F[S - 1] += fwd_of(&head);
    B[S - 1] += bwd_of(&head);
    if (dpv) {
        Fp[0] += fwd_of(&emb);
        Bp[0] += bwd_of(&emb);
        Fp[S - 1] += fwd_of(&head);
        Bp[S - 1] += bwd_of(&head);
    }
    double M = (double)dp_layout_microbatches(l);
    /* FP8 weight casts: each stage's first forward of the step, in turn along the
     * pipeline fill. */
    double pipe = (dpv ? dp_pipe_dualpipev_time_s(pp, (int64_t)M, F, B, Fp, Bp, Wg)
                       : dp_pipe_time_s(pp, v, (int64_t)M, F, B, NULL)) +
                  wcast;
    r->pipe_s = pipe;
    /* The breakdown below takes DualPipeV's passes as paired (all but its warm-up and
     * cool-down are). */
    for (int k = 0; dpv && k < DP_LAYER_KINDS; k++)
        one[k].ep_f = one[k].ep_b = lt[k].ep_pair;

    /* The slowest rank's work per micro-batch, for the breakdown. */
    int slow = 0;
    double dmax = -1;
    for (int d = 0; d < pp; d++) {
        double D = 0;
        for (int ch = 0; ch < v; ch++) {
            int k = dp_layout_global_stage(l, d, ch);
            D += F[k] + B[k];
        }
        if (D > dmax) {
            dmax = D;
            slow = d;
        }
    }
    r->first_layers = dp_layout_stage_layers(l, m, 0);
    struct stage_cost st[3], sl; /* ranks 0, 1 and pp - 1; the slowest */
    for (int i = 0; i < 3; i++)
        device_cost(l, m,
                    i == 0   ? 0
                    : i == 1 ? (pp > 2 ? 1 : 0)
                             : pp - 1,
                    one, re, &emb, &head, P, &st[i]);
    device_cost(l, m, slow, one, re, &emb, &head, P, &sl);
    r->slowest_stage = slow;
    r->compute_s = M * (sl.compute_f + sl.compute_b) + wcast;
    r->recompute_s = M * (sl.recompute + sl.tp_re);
    r->tp_comm_s = M * (sl.tp_f + sl.tp_b);
    r->cp_comm_s = M * (sl.cp_f + sl.cp_b);
    r->ep_comm_s = M * (sl.ep_f + sl.ep_b);
    r->pp_comm_s = M * sl.pp;
    r->bubble_s = pipe - wcast - M * total_of(&sl);
    if (r->bubble_s < 0)
        r->bubble_s = 0; /* rounding: pipe >= M x the slowest rank */
    for (int i = 0; i < 3; i++) {
        r->stage_fwd_s[i] = st[i].compute_f + st[i].tp_f + st[i].pp / 2;
        r->stage_bwd_s[i] =
            st[i].compute_b + st[i].recompute + st[i].tp_b + st[i].tp_re + st[i].pp / 2;
    }
    r->have_pipe = true;
}

double dp__time_p2p(const struct dp__time_ctx *c)
{
    return p2p_part(c);
}

double dp__time_recompute_share(const struct dp_layout *l, const struct dp_model *m, int r)
{
    return recompute_share(l, m, r);
}
