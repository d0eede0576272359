/*
 * The event simulation of one step (see sim.h): each simulated GPU (one per
 * pipeline stage) runs its passes in schedule order on its compute stream, with
 * its communication on streams of their own, first-in first-out:
 *
 *  - a pass starts when the compute stream is free and its input is there: the
 *    activation from the previous virtual stage (forward), the gradient from the
 *    next one (backward; the loss's own forward on the last);
 *  - inside a pass, per layer, the attention block then the MLP block (reversed
 *    in backward, a recomputing layer's forward first), each block's compute and
 *    then its collectives: one that does not overlap runs on its stream while the
 *    compute stream waits; an overlapped one (tp_overlap, the CP ring) runs on its
 *    stream beside the block's compute while the compute stream waits for what the
 *    cost model says stays exposed (a "wait" slice);
 *  - after a pass its output goes to the neighbouring stage on the pipeline
 *    stream; the receiver can start once it has arrived; without pp_overlap the
 *    sender waits for its send (Megatron's blocking send/recv); sends are
 *    buffered (the receiver need not be waiting);
 *  - data-parallel reductions start when their unit's gradients are complete (the
 *    unit's first layer's backward, in the last micro-batch, or in every one for
 *    ZeRO-2/3) or, without dp_overlap, after the stage's last pass; parameter
 *    gathers run at the step's start (the first forward of each layer waits for
 *    its unit) or after the optimizer, or for ZeRO-3 before each pass's units with
 *    `prefetch` units ahead;
 *  - DualPipeV (v_style): chunk 1 of rank r is stage 2 pp - 1 - r, and an output for a
 *    stage the same rank holds is there at once (the V's turn on the last rank); a pair's
 *    forward starts once its own and its partner backward's inputs are there, and their
 *    MoE all-to-alls expose only ep_pair; a backward for the inputs only leaves each
 *    layer's weight-gradient GEMMs (wgrad_s) to a later W pass, which then is the one
 *    that completes the gradients for the data-parallel reductions;
 *  - the first and last stage then sum their tied embeddings' gradients, every
 *    stage waits for the slowest (the global gradient norm), and each runs its
 *    optimizer step.
 *
 * Contention: while a pipeline send beside compute (pp_overlap) or a
 * data-parallel collective runs, the compute stream runs at 1 - c x (such
 * collectives running) of its speed, c = the cost model's overlap contention, so
 * that a collective hidden under compute costs c of its time as in costmodel/;
 * the TP and CP overlaps already carry theirs in the exposed times.
 *
 * Each simulated GPU advances on its own as far as its inputs are known; the
 * stages wait for each other only through the arrival times of sends.
 */
#include "sim.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define NDYN 3 /* streams that slow compute: PP (with pp_overlap), GATHER, REDUCE */

struct ivl {
    double t0, t1;
};
struct dyn {
    struct ivl *v;
    size_t n, cap, head;
};
struct memev {
    double t;
    int64_t d, act;
};

struct rank {
    int r;
    struct dp_sim_step *prog;
    int64_t nprog, pi;
    double t;                    /* compute stream free at */
    double t0_last;              /* start of the last compute operation */
    double free[DP_SIM_STREAMS]; /* other streams free at */
    struct dyn dyn[NDYN];
    struct dp_sim_breakdown b;
    struct memev *mev;
    size_t nmev, capmev;
    /* data parallel */
    const struct dp_dp_unit *unit;
    const struct dp_dp_sched *ds;
    int nunit;
    int *ufirst; /* per chunk: its first unit */
    int *ucount; /* per chunk: its units */
    int *imap;   /* per chunk's items (imap + ioff[c]): the unit holding it, -1 none */
    int *ioff;
    double *gather_end; /* per unit: its gather's end (once per step, or this pass's) */
    int64_t *last_bwd;  /* per chunk: index of its last backward in prog */
    int64_t *first_fwd; /* per chunk: index of its first forward in prog */
    bool failed;
    struct dp_sim_stage *out;
    bool rec;
};

struct eng {
    const struct dp_sim_input *in;
    const struct dp_sim_opts *o;
    int S;
    double *act_arr, *grad_arr; /* [S][M]: arrival of a pass's input; < 0 not yet */
    int64_t mb_base;            /* the schedule's first micro-batch in the step */
    struct rank *rk;
    size_t ops;
};

/* ------------------------------------------------------------------ growable arrays */

static bool grow(void **p, size_t *cap, size_t n, size_t size)
{
    if (n < *cap)
        return true;
    size_t c = *cap ? *cap * 2 : 64;
    void *q = realloc(*p, c * size);
    if (!q)
        return false;
    *p = q;
    *cap = c;
    return true;
}

static void push_slice(struct rank *R, struct dp_sim_slice **a, size_t *n, size_t *cap,
                       const struct dp_sim_slice *s)
{
    if (!grow((void **)a, cap, *n, sizeof **a)) {
        R->failed = true;
        return;
    }
    (*a)[(*n)++] = *s;
}

struct caps {
    size_t slice, comm, pass;
};

static void mem_add(struct rank *R, double t, int64_t d, bool act)
{
    if (d == 0)
        return;
    if (!grow((void **)&R->mev, &R->capmev, R->nmev, sizeof *R->mev)) {
        R->failed = true;
        return;
    }
    R->mev[R->nmev++] = (struct memev){t, d, act ? d : 0};
}

/* ------------------------------------------------------------------ streams */

static int dyn_index(enum dp_sim_stream s)
{
    return s == DP_SIM_PP ? 0 : s == DP_SIM_GATHER ? 1 : s == DP_SIM_REDUCE ? 2 : -1;
}

static void dyn_push(struct rank *R, enum dp_sim_stream s, double t0, double t1)
{
    struct dyn *d = &R->dyn[dyn_index(s)];
    if (!grow((void **)&d->v, &d->cap, d->n, sizeof *d->v)) {
        R->failed = true;
        return;
    }
    d->v[d->n++] = (struct ivl){t0, t1};
}

/*
 * The end of `work` seconds of compute starting at t, slowed while collectives of the
 * streams that contend run; *slow gets the extra time per contending stream.
 */
static double integrate(struct rank *R, double c, double t, double work, double slow[NDYN])
{
    for (int i = 0; i < NDYN; i++)
        slow[i] = 0;
    for (int i = 0; i < NDYN; i++) {
        struct dyn *d = &R->dyn[i];
        while (d->head < d->n && d->v[d->head].t1 <= t)
            d->head++;
    }
    while (work > 0) {
        double next = INFINITY;
        int active[NDYN], na = 0;
        for (int i = 0; i < NDYN; i++) {
            struct dyn *d = &R->dyn[i];
            size_t h = d->head;
            while (h < d->n && d->v[h].t1 <= t)
                h++;
            if (h >= d->n)
                continue;
            if (d->v[h].t0 <= t) {
                active[na++] = i;
                if (d->v[h].t1 < next)
                    next = d->v[h].t1;
            } else if (d->v[h].t0 < next) {
                next = d->v[h].t0;
            }
        }
        double rate = 1 - c * na;
        if (rate < 0.1)
            rate = 0.1;
        double end = t + work / rate;
        if (end <= next) {
            for (int i = 0; i < na; i++)
                slow[active[i]] += (end - t) * (1 - rate) / na;
            return end;
        }
        work -= (next - t) * rate;
        for (int i = 0; i < na; i++)
            slow[active[i]] += (next - t) * (1 - rate) / na;
        t = next;
    }
    return t;
}

/* ------------------------------------------------------------------ operations */

struct where {
    int32_t mb;
    int16_t chunk, layer;
    uint8_t phase;
    uint8_t blk; /* a collective's block: DP_SIM_OP_EMBED, _ATTN, _MLP or _HEAD */
};

static void record(struct eng *E, struct rank *R, double t0, double t1, enum dp_sim_stream st,
                   enum dp_sim_op op, const struct where *w, int of, struct caps *cp)
{
    E->ops++;
    struct dp_sim_slice s = {t0,          t1,          w->mb,    w->chunk,   w->layer,
                             (uint8_t)st, (uint8_t)op, w->phase, (uint8_t)of};
    R->out->stream_busy_s[st] += t1 - t0;
    if (st == DP_SIM_PP || st == DP_SIM_GATHER || st == DP_SIM_REDUCE || op == DP_SIM_OP_OPTIMIZER)
        push_slice(R, &R->out->comm, &R->out->ncomm, &cp->comm, &s);
    if (R->rec)
        push_slice(R, &R->out->slice, &R->out->nslice, &cp->slice, &s);
}

/* Compute on the compute stream, charged to *cat (its contention to pp or dp). */
static void compute(struct eng *E, struct rank *R, enum dp_sim_op op, double work,
                    const struct where *w, double *cat, struct caps *cp)
{
    if (work <= 0)
        return;
    double slow[NDYN];
    double t0 = R->t, t1 = integrate(R, E->in->ops.contention, t0, work, slow);
    *cat += work;
    R->b.pp += slow[0];
    R->b.dp += slow[1] + slow[2];
    R->t0_last = t0;
    R->t = t1;
    record(E, R, t0, t1, DP_SIM_COMPUTE, op, w, 0, cp);
}

/* A collective of a block: raw seconds on stream st, of which `exposed` the compute stream
 * waits for (overlapped when exposed < raw: it ran beside the block's compute). */
static void collective(struct eng *E, struct rank *R, enum dp_sim_stream st, enum dp_sim_op op,
                       double raw, double exposed, const struct where *w, double *cat,
                       struct caps *cp)
{
    if (raw <= 0 && exposed <= 0)
        return;
    if (exposed >= raw * (1 - 1e-12)) {
        double t0 = R->t > R->free[st] ? R->t : R->free[st], t1 = t0 + exposed;
        R->free[st] = t1;
        *cat += t1 - R->t;
        R->t = t1;
        record(E, R, t0, t1, st, op, w, w->blk, cp);
        return;
    }
    double t0 = R->t0_last > R->free[st] ? R->t0_last : R->free[st];
    R->free[st] = t0 + raw;
    record(E, R, t0, t0 + raw, st, op, w, w->blk, cp);
    if (exposed > 0) {
        record(E, R, R->t, R->t + exposed, DP_SIM_COMPUTE, DP_SIM_OP_WAIT, w, op, cp);
        R->t += exposed;
        *cat += exposed;
    }
}

/* Put a data-parallel collective on its stream no earlier than t; returns its end. */
static double dp_coll(struct eng *E, struct rank *R, enum dp_sim_stream st, enum dp_sim_op op,
                      double t, double dur, const struct where *w, struct caps *cp)
{
    double t0 = t > R->free[st] ? t : R->free[st], t1 = t0 + dur;
    if (dur <= 0)
        return t0;
    R->free[st] = t1;
    dyn_push(R, st, t0, t1);
    record(E, R, t0, t1, st, op, w, 0, cp);
    return t1;
}

/* The compute stream waits until t (for a gather, an input, a send), charged to *cat. */
static void wait_until(struct rank *R, double t, double *cat)
{
    if (t > R->t) {
        *cat += t - R->t;
        R->t = t;
    }
}

/* ------------------------------------------------------------------ a pass */

static enum dp_layer_kind kind_of(const struct dp_sim_input *in, int layer)
{
    return layer >= in->moe_from ? DP_LAYER_MOE : DP_LAYER_DENSE;
}

/* The virtual stage of rank r's chunk c, and the rank of stage s (core/layout.h). */
static int gstage(const struct dp_sim_input *in, int r, int c)
{
    return dp_pipe_global_stage(in->pp, in->v_style, r, c);
}
static int gstage_rank(const struct dp_sim_input *in, int s)
{
    return dp_pipe_stage_rank(in->pp, in->v_style, s);
}

/* Items of chunk c on rank r: [embedding] layers [head]; item i -> chunk-local layer
 * (-1 embedding, count head). */
static int item_layer(bool emb, int i)
{
    return i - (emb ? 1 : 0);
}

/* The unit holding item i of chunk c, -1 when there are none. */
static int unit_of(const struct rank *R, int c, int i)
{
    return R->imap[R->ioff[c] + i];
}
/* Does item i start (forward order: is the first of) its unit, or end it? */
static bool unit_starts(const struct rank *R, int c, int i)
{
    return i == 0 || unit_of(R, c, i) != unit_of(R, c, i - 1);
}
static bool unit_ends(const struct rank *R, int c, int n, int i)
{
    return i == n - 1 || unit_of(R, c, i) != unit_of(R, c, i + 1);
}

/* ZeRO-3: gather unit u for this pass no earlier than t (its memory held from its start). */
static void gather_unit(struct eng *E, struct rank *R, int u, double t, const struct where *w,
                        struct caps *cp)
{
    double t0 = t > R->free[DP_SIM_GATHER] ? t : R->free[DP_SIM_GATHER];
    mem_add(R, t0, R->unit[u].gather_bytes, false);
    struct where ww = *w;
    ww.layer = -1;
    R->gather_end[u] =
        dp_coll(E, R, DP_SIM_GATHER, DP_SIM_OP_GATHER, t, R->unit[u].gather_s, &ww, cp);
}

/* The context-parallel ring: cp - 1 exchanges of K and V (their gradients backward), one
 * after the other on the CP stream beside the attention (Liu et al. 2023, Ring
 * Attention; Megatron-Core's p2p ring), each step exposing its share of what the cost
 * model leaves exposed. */
static void ring(struct eng *E, struct rank *R, double raw, double exposed, const struct where *w,
                 double *cat, struct caps *cp)
{
    const int steps = E->in->cp > 1 ? E->in->cp - 1 : 1;
    for (int i = 0; i < steps; i++)
        collective(E, R, DP_SIM_CP, DP_SIM_OP_CP, raw / steps, exposed / steps, w, cat, cp);
}

/* A block's expert all-to-all (one of the two a pass has), on its stream: alone it blocks
 * the compute stream; inside DualPipeV's overlapped pair it runs under the partner pass's
 * compute and the stream waits for what the cost model leaves exposed (ep_pair). */
static void a2a(struct eng *E, struct rank *R, const struct dp_block_cost *bc, double ep,
                bool paired, const struct where *w, double *cat, struct caps *cp)
{
    if (paired)
        collective(E, R, DP_SIM_EP, DP_SIM_OP_EP, ep / 2, bc->ep_pair / 2, w, cat, cp);
    else
        collective(E, R, DP_SIM_EP, DP_SIM_OP_EP, ep / 2, ep / 2, w, cat, cp);
}

static void block_fwd(struct eng *E, struct rank *R, const struct dp_block_cost *bc,
                      enum dp_sim_op op, const struct where *w0, bool re, bool paired,
                      struct caps *cp)
{
    struct where wb = *w0, *w = &wb;
    wb.blk = (uint8_t)op;
    struct dp_sim_breakdown *b = &R->b;
    double share = re ? E->in->ops.recompute_share[R->r] : 1;
    double work = re ? bc->re_s * share : bc->fwd_s;
    double *cat = re ? &b->recompute : &b->compute;
    double ep = re ? bc->ep_re * share : bc->ep_f;
    double tp = re ? bc->tp_re * share : bc->tp_f;
    if (re && work <= 0)
        return;
    paired = paired && !re; /* the cost model pairs the forward's and backward's own */
    a2a(E, R, bc, ep, paired, w, re ? &b->recompute : &b->ep, cp);
    compute(E, R, op, work, w, cat, cp);
    if (!re)
        ring(E, R, bc->cp_raw_f, bc->cp_f, w, &b->cp, cp);
    a2a(E, R, bc, ep, paired, w, re ? &b->recompute : &b->ep, cp);
    double raw = re ? tp : bc->tp_raw_f;
    collective(E, R, DP_SIM_TP, DP_SIM_OP_TP, raw > tp ? raw : tp, tp, w,
               re ? &b->recompute : &b->tp, cp);
}

/* A block's backward; inputs_only: DualPipeV's BI pass, its weight gradients left for
 * a W pass (block_wgrad). */
static void block_bwd(struct eng *E, struct rank *R, const struct dp_block_cost *bc,
                      enum dp_sim_op op, const struct where *w0, bool paired, bool inputs_only,
                      struct caps *cp)
{
    struct where wb = *w0, *w = &wb;
    wb.blk = (uint8_t)op;
    struct dp_sim_breakdown *b = &R->b;
    a2a(E, R, bc, bc->ep_b, paired, w, &b->ep, cp);
    compute(E, R, op, inputs_only ? bc->bwd_s - bc->wgrad_s : bc->bwd_s, w, &b->compute, cp);
    ring(E, R, bc->cp_raw_b, bc->cp_b, w, &b->cp, cp);
    a2a(E, R, bc, bc->ep_b, paired, w, &b->ep, cp);
    collective(E, R, DP_SIM_TP, DP_SIM_OP_TP, bc->tp_raw_b > bc->tp_b ? bc->tp_raw_b : bc->tp_b,
               bc->tp_b, w, &b->tp, cp);
}

/*
 * Multi-token prediction's depth d after the output layer (Megatron-Core
 * MultiTokenPredictionLayer): forward its transformer layer (model layer `layers + d`,
 * of the model's last layer's kind), then the rest of the module (mtp_f: next-token
 * embedding, norms, projection, output layer and loss again); backward the reverse, the
 * layer recomputed by the last stage's share as the cost model charges it.
 */
static void mtp_depth(struct eng *E, struct rank *R, int d, const struct where *w0, bool fwd,
                      struct caps *cp)
{
    const struct dp_step_ops *ops = &E->in->ops;
    const struct dp_layer_cost *lc = &ops->layer[ops->mtp_kind];
    struct where w = *w0;
    w.layer = (int16_t)(E->in->layers + d);
    if (fwd) {
        block_fwd(E, R, &lc->blk[DP_BLOCK_ATTN], DP_SIM_OP_ATTN, &w, false, false, cp);
        block_fwd(E, R, &lc->blk[DP_BLOCK_MLP], DP_SIM_OP_MLP, &w, false, false, cp);
        w.blk = DP_SIM_OP_HEAD;
        compute(E, R, DP_SIM_OP_HEAD, ops->mtp_f, &w, &R->b.compute, cp);
        return;
    }
    w.blk = DP_SIM_OP_HEAD;
    w.phase = DP_SIM_BWD;
    compute(E, R, DP_SIM_OP_HEAD, ops->mtp_b, &w, &R->b.compute, cp);
    w.phase = DP_SIM_RECOMPUTE;
    block_fwd(E, R, &lc->blk[DP_BLOCK_ATTN], DP_SIM_OP_ATTN, &w, true, false, cp);
    block_fwd(E, R, &lc->blk[DP_BLOCK_MLP], DP_SIM_OP_MLP, &w, true, false, cp);
    w.phase = DP_SIM_BWD;
    block_bwd(E, R, &lc->blk[DP_BLOCK_MLP], DP_SIM_OP_MLP, &w, false, false, cp);
    block_bwd(E, R, &lc->blk[DP_BLOCK_ATTN], DP_SIM_OP_ATTN, &w, false, false, cp);
}

static void run_pass(struct eng *E, struct rank *R, const struct dp_sim_step *st, double t_in,
                     struct caps *cp)
{
    const struct dp_sim_input *in = E->in;
    const struct dp_step_ops *ops = &in->ops;
    const int r = R->r, c = st->chunk;
    const int s = gstage(in, r, c), S = E->S;
    /* a W pass computes its layers' weight gradients only: no parameters to gather (the
     * weight gradient needs the layer's input and output gradient), no activations */
    const bool wpass = st->kind == DP_SIM_PASS_W, bi = st->kind == DP_SIM_PASS_BI;
    /* the gradients of a unit are complete after a whole backward or after its W */
    const bool grads = !st->fwd && !bi;
    const int first = in->chunk_first[s], cnt = in->chunk_count[s];
    const bool emb = s == 0, head = s == S - 1;
    const int n = cnt + (emb ? 1 : 0) + (head ? 1 : 0);
    const struct dp_mem_terms *mt = &in->mem[r];
    const struct dp_dp_sched *ds = R->ds;
    struct dp_sim_breakdown *b = &R->b;
    wait_until(R, t_in, &b->bubble);
    const int32_t mb = (int32_t)(E->mb_base + st->mb); /* the step's micro-batch */
    struct where w = {mb, (int16_t)c, -1, st->fwd ? DP_SIM_FWD : DP_SIM_BWD, 0};
    const bool first_fwd = st->fwd && R->pi == R->first_fwd[c];
    const bool last_bwd = grads && st->reduce;
    const bool g_each = R->nunit > 0 && ds->gather_each_mb && !wpass;
    const int U = R->ucount[c], P = ds->prefetch;
    /* ZeRO-3: the k-th unit of the pass (forward order forward, reversed backward) */
#define UNIT_K(k) (st->fwd ? R->ufirst[c] + (k) : R->ufirst[c] + U - 1 - (k))
    int uk = 0; /* units of this pass begun */
    if (g_each)
        for (int k = 0; k < P && k < U; k++)
            gather_unit(E, R, UNIT_K(k), R->t, &w, cp);
    double pass_start = -1;
    for (int q = 0; q < n; q++) {
        int i = st->fwd ? q : n - 1 - q;
        int j = item_layer(emb, i);
        int u = unit_of(R, c, i);
        bool begins = u >= 0 && (st->fwd ? unit_starts(R, c, i) : unit_ends(R, c, n, i));
        bool finishes = u >= 0 && (st->fwd ? unit_ends(R, c, n, i) : unit_starts(R, c, i));
        /* Parameters: gathered once a step (the chunk's first forward waits for them), or
         * for this pass (ZeRO-3: unit k + P is issued as unit k starts, FSDP's prefetch;
         * P = 0 gathers each unit when it is needed). */
        if (begins && g_each) {
            if (uk + P < U)
                gather_unit(E, R, UNIT_K(uk + P), R->t, &w, cp);
            uk++;
            wait_until(R, R->gather_end[u], &b->dp);
            wait_until(R, R->t + R->unit[u].copy_out_s, &b->dp); /* FSDP2 copy-out */
        } else if (begins && first_fwd && ds->gather_at_start) {
            wait_until(R, R->gather_end[u], &b->dp);
        }
        if (pass_start < 0)
            pass_start = R->t;
        if (wpass && (j < 0 || j >= cnt)) {
            /* the ends' gradients came with the backward (the cost model defers only the
             * layers' weight-gradient GEMMs) */
        } else if (wpass) {
            int L = first + j;
            const struct dp_layer_cost *lc = &ops->layer[kind_of(in, L)];
            w.layer = (int16_t)L;
            w.blk = DP_SIM_OP_MLP;
            compute(E, R, DP_SIM_OP_MLP, lc->blk[DP_BLOCK_MLP].wgrad_s, &w, &b->compute, cp);
            w.blk = DP_SIM_OP_ATTN;
            compute(E, R, DP_SIM_OP_ATTN, lc->blk[DP_BLOCK_ATTN].wgrad_s, &w, &b->compute, cp);
        } else if (j < 0) {
            w.layer = -1;
            w.blk = DP_SIM_OP_EMBED;
            if (st->fwd) {
                mem_add(R, R->t, mt->emb_bytes, true);
                compute(E, R, DP_SIM_OP_EMBED, ops->emb.fwd_s, &w, &b->compute, cp);
                collective(E, R, DP_SIM_TP, DP_SIM_OP_TP, ops->emb.tp_f, ops->emb.tp_f, &w, &b->tp,
                           cp);
            } else {
                compute(E, R, DP_SIM_OP_EMBED, ops->emb.bwd_s, &w, &b->compute, cp);
                mem_add(R, R->t, -mt->emb_bytes, true);
            }
        } else if (j >= cnt) {
            w.layer = -1;
            w.blk = DP_SIM_OP_HEAD;
            if (st->fwd) {
                mem_add(R, R->t, mt->head_bytes, true); /* MTP's activations included */
                compute(E, R, DP_SIM_OP_HEAD, ops->head.fwd_s, &w, &b->compute, cp);
                collective(E, R, DP_SIM_TP, DP_SIM_OP_TP, ops->head.tp_f, ops->head.tp_f, &w,
                           &b->tp, cp);
                for (int d = 0; d < ops->mtp_layers; d++)
                    mtp_depth(E, R, d, &w, true, cp);
            } else {
                for (int d = ops->mtp_layers - 1; d >= 0; d--)
                    mtp_depth(E, R, d, &w, false, cp);
                w.layer = -1;
                w.blk = DP_SIM_OP_HEAD;
                w.phase = DP_SIM_BWD;
                compute(E, R, DP_SIM_OP_HEAD, ops->head.bwd_s, &w, &b->compute, cp);
                collective(E, R, DP_SIM_TP, DP_SIM_OP_TP, ops->head.tp_b, ops->head.tp_b, &w,
                           &b->tp, cp);
                mem_add(R, R->t, -mt->head_bytes, true);
            }
        } else {
            int L = first + j;
            enum dp_layer_kind k = kind_of(in, L);
            const struct dp_layer_cost *lc = &ops->layer[k];
            w.layer = (int16_t)L;
            if (st->fwd) {
                mem_add(R, R->t, mt->layer_bytes[k], true);
                /* FP8 weights cast once a step, at the chunk's first micro-batch
                 * (Transformer Engine is_first_microbatch) */
                if (first_fwd)
                    compute(E, R, DP_SIM_OP_CAST, lc->cast_w_s, &w, &b->compute, cp);
                block_fwd(E, R, &lc->blk[DP_BLOCK_ATTN], DP_SIM_OP_ATTN, &w, false, st->paired, cp);
                block_fwd(E, R, &lc->blk[DP_BLOCK_MLP], DP_SIM_OP_MLP, &w, false, st->paired, cp);
            } else {
                mem_add(R, R->t, mt->working_bytes, true);
                w.phase = DP_SIM_RECOMPUTE;
                block_fwd(E, R, &lc->blk[DP_BLOCK_ATTN], DP_SIM_OP_ATTN, &w, true, false, cp);
                block_fwd(E, R, &lc->blk[DP_BLOCK_MLP], DP_SIM_OP_MLP, &w, true, false, cp);
                w.phase = DP_SIM_BWD;
                block_bwd(E, R, &lc->blk[DP_BLOCK_MLP], DP_SIM_OP_MLP, &w, st->paired, bi, cp);
                block_bwd(E, R, &lc->blk[DP_BLOCK_ATTN], DP_SIM_OP_ATTN, &w, st->paired, bi, cp);
                mem_add(R, R->t, -mt->layer_bytes[k] - mt->working_bytes, true);
            }
        }
        /* After its unit's last item: ZeRO-3 frees the gathered parameters (reshard after
         * forward and after backward); a backward that completes the unit's gradients
         * starts their reduction. */
        if (finishes && g_each)
            mem_add(R, R->t, -R->unit[u].gather_bytes, false);
        if (finishes && grads && ds->reduce_each_mb)
            wait_until(R, R->t + R->unit[u].copy_in_s, &b->dp); /* FSDP2 copy-in */
        if (finishes && grads && ds->reduce_overlap && (ds->reduce_each_mb || last_bwd)) {
            struct where ww = w;
            ww.layer = -1;
            dp_coll(E, R, DP_SIM_REDUCE, DP_SIM_OP_REDUCE, R->t, R->unit[u].reduce_s, &ww, cp);
        }
    }
#undef UNIT_K
    if (grads && R->nunit > 0 && ds->reduce_each_mb && !ds->reduce_overlap) {
        /* ZeRO-2/3 without overlap: this micro-batch's reductions after its backward */
        for (int u = R->ufirst[c] + U - 1; u >= R->ufirst[c]; u--) {
            struct where ww = w;
            ww.layer = -1;
            double t1 =
                dp_coll(E, R, DP_SIM_REDUCE, DP_SIM_OP_REDUCE, R->t, R->unit[u].reduce_s, &ww, cp);
            wait_until(R, t1, &b->dp);
        }
    }
    if (pass_start < 0)
        pass_start = R->t;
    /* the pass as the Gantt shows it */
    struct dp_sim_pass ps = {pass_start, R->t, mb, (int16_t)c, st->fwd, st->kind};
    if (!grow((void **)&R->out->pass, &cp->pass, R->out->npass, sizeof ps))
        R->failed = true;
    else
        R->out->pass[R->out->npass++] = ps;

    /* Its output to the neighbour: activations to virtual stage s + 1, gradients to
     * s - 1; the loss's gradient is the last stage's own; a stage held by the same rank
     * (the V's turn on rank pp - 1) has it at once. A W pass has no output. */
    const int64_t M = in->M;
    double *dst = NULL;
    if (wpass)
        return;
    const int to = st->fwd ? s + 1 : s - 1;
    if (to >= 0 && to < S && gstage_rank(in, to) == r) {
        (st->fwd ? E->act_arr : E->grad_arr)[(size_t)to * M + st->mb] = R->t;
        return;
    }
    if (st->fwd && s < S - 1)
        dst = &E->act_arr[(size_t)(s + 1) * M + st->mb];
    else if (!st->fwd && s > 0)
        dst = &E->grad_arr[(size_t)(s - 1) * M + st->mb];
    else if (st->fwd)
        E->grad_arr[(size_t)s * M + st->mb] = R->t;
    if (dst) {
        double t0 = R->t > R->free[DP_SIM_PP] ? R->t : R->free[DP_SIM_PP];
        double t1 = t0 + ops->p2p_s;
        R->free[DP_SIM_PP] = t1;
        if (in->pp_overlap && ops->p2p_s > 0)
            dyn_push(R, DP_SIM_PP, t0, t1);
        struct where ww = {mb, (int16_t)c, -1, st->fwd ? DP_SIM_FWD : DP_SIM_BWD, 0};
        record(E, R, t0, t1, DP_SIM_PP, DP_SIM_OP_SEND, &ww, st->fwd ? 0 : 1, cp);
        *dst = t1;
        if (!in->pp_overlap)
            wait_until(R, t1, &b->pp);
    }
}

/* ------------------------------------------------------------------ the step */

/* The schedule the engine runs: auto resolved as each framework does (Megatron's
 * interleaving with vpp > 1, else 1F1B; the layout's V). */
static enum dp_sim_schedule sim_schedule(const struct dp_sim_input *in)
{
    if (in->schedule != DP_SIM_SCHED_AUTO)
        return in->schedule;
    return in->v_style   ? DP_SIM_SCHED_DUALPIPEV
           : in->vpp > 1 ? DP_SIM_SCHED_INTERLEAVED
                         : DP_SIM_SCHED_1F1B;
}

/* When the input of rank r's pass st has arrived; < 0 not yet. A W pass needs only its
 * own backward, run before it on the same rank. */
static double input_at(const struct eng *E, int r, const struct dp_sim_step *st)
{
    if (st->kind == DP_SIM_PASS_W)
        return 0;
    size_t i = (size_t)gstage(E->in, r, st->chunk) * (size_t)E->in->M + (size_t)st->mb;
    return st->fwd ? E->act_arr[i] : E->grad_arr[i];
}

static int rank_init(struct eng *E, struct rank *R, int r, struct dp_err *err)
{
    const struct dp_sim_input *in = E->in;
    const int v = in->vpp;
    memset(R, 0, sizeof *R);
    R->r = r;
    R->nprog = dp_sim_schedule_passes(sim_schedule(in), in->pp, v, in->M, r);
    R->prog = malloc((size_t)(R->nprog > 0 ? R->nprog : 1) * sizeof *R->prog);
    R->ufirst = calloc((size_t)v, sizeof *R->ufirst);
    R->ucount = calloc((size_t)v, sizeof *R->ucount);
    R->last_bwd = malloc((size_t)v * sizeof *R->last_bwd);
    R->first_fwd = malloc((size_t)v * sizeof *R->first_fwd);
    R->unit = in->units[r];
    R->nunit = in->nunits[r];
    R->ds = &in->dsched[r];
    R->gather_end = calloc((size_t)(R->nunit > 0 ? R->nunit : 1), sizeof *R->gather_end);
    R->ioff = calloc((size_t)v + 1, sizeof *R->ioff);
    if (!R->prog || !R->ufirst || !R->ucount || !R->last_bwd || !R->first_fwd || !R->gather_end ||
        !R->ioff)
        return dp_err_set(err, DP_ENOMEM, "out of memory");
    /* items per chunk: [embedding] layers [head] */
    for (int c = 0; c < v; c++) {
        int s = gstage(in, r, c);
        int n = in->chunk_count[s] + (s == 0 ? 1 : 0) + (s == in->pp * v - 1 ? 1 : 0);
        R->ioff[c + 1] = R->ioff[c] + n;
    }
    R->imap = malloc((size_t)(R->ioff[v] > 0 ? R->ioff[v] : 1) * sizeof *R->imap);
    if (!R->imap)
        return dp_err_set(err, DP_ENOMEM, "out of memory");
    for (int i = 0; i < R->ioff[v]; i++)
        R->imap[i] = -1;
    int rc = dp_sim_schedule(sim_schedule(in), in->pp, v, in->M, r, R->prog, err);
    if (rc)
        return rc;
    for (int c = 0; c < v; c++)
        R->last_bwd[c] = R->first_fwd[c] = -1;
    /* the pass that completes a chunk's gradients: its last backward, or the W pass that
     * finishes a backward for the inputs only */
    for (int64_t i = 0; i < R->nprog; i++) {
        int c = R->prog[i].chunk;
        if (R->prog[i].fwd && R->first_fwd[c] < 0)
            R->first_fwd[c] = i;
        if (!R->prog[i].fwd && R->prog[i].kind != DP_SIM_PASS_BI)
            R->last_bwd[c] = i;
    }
    for (int c = 0; c < v; c++)
        if (R->last_bwd[c] >= 0)
            R->prog[R->last_bwd[c]].reduce = true;
    for (int u = R->nunit - 1; u >= 0; u--) {
        int c = R->unit[u].chunk;
        if (c < 0 || c >= v)
            return dp_err_set(err, DP_EINVAL, "stage %d: data-parallel unit %d in chunk %d", r, u,
                              c);
        R->ufirst[c] = u;
        R->ucount[c]++;
        /* the items it holds */
        const struct dp_dp_unit *U = &R->unit[u];
        int s = gstage(in, r, c);
        bool emb = s == 0;
        int cnt = in->chunk_count[s], n = R->ioff[c + 1] - R->ioff[c];
        for (int i = 0; i < n; i++) {
            int j = item_layer(emb, i);
            if (j < 0 ? U->emb : j >= cnt ? U->head : (j >= U->first && j < U->first + U->count))
                R->imap[R->ioff[c] + i] = u;
        }
    }
    return 0;
}

static void rank_release(struct rank *R)
{
    free(R->prog);
    free(R->ufirst);
    free(R->ucount);
    free(R->last_bwd);
    free(R->first_fwd);
    free(R->gather_end);
    free(R->ioff);
    free(R->imap);
    free(R->mev);
    for (int i = 0; i < NDYN; i++)
        free(R->dyn[i].v);
}

static int cmp_memev(const void *a, const void *b)
{
    const struct memev *x = a, *y = b;
    if (x->t != y->t)
        return x->t < y->t ? -1 : 1;
    /* at one instant, frees before allocations */
    return (x->d > y->d) - (x->d < y->d);
}

/* Memory over time from the events: the peak, and the changes when recorded. */
static int memory(struct rank *R, const struct dp_sim_input *in, struct dp_err *err)
{
    struct dp_sim_stage *st = R->out;
    qsort(R->mev, R->nmev, sizeof *R->mev, cmp_memev);
    int64_t cur = in->mem[R->r].static_bytes, act = 0;
    st->peak_bytes = cur;
    st->peak_at_s = 0;
    if (R->rec) {
        st->mem = malloc((R->nmev + 1) * sizeof *st->mem);
        if (!st->mem)
            return dp_err_set(err, DP_ENOMEM, "out of memory");
        st->mem[st->nmem++] = (struct dp_sim_mem){0, cur, 0};
    }
    for (size_t i = 0; i < R->nmev; i++) {
        cur += R->mev[i].d;
        act += R->mev[i].act;
        if (cur > st->peak_bytes) {
            st->peak_bytes = cur;
            st->peak_at_s = R->mev[i].t;
        }
        if (R->rec) {
            if (st->nmem > 0 && st->mem[st->nmem - 1].t == R->mev[i].t)
                st->mem[st->nmem - 1] = (struct dp_sim_mem){R->mev[i].t, cur, act};
            else
                st->mem[st->nmem++] = (struct dp_sim_mem){R->mev[i].t, cur, act};
        }
    }
    return 0;
}

/* Pipeline schedules a step (layout local_batch), at least one. */
static int64_t in_schedules(const struct dp_sim_input *in)
{
    return in->schedules > 1 ? in->schedules : 1;
}

/* Parameters gathered once a schedule, at its start (t), in forward order. */
static void gathers_at_start(struct eng *E, struct rank *R, double t, struct caps *cp)
{
    if (R->nunit <= 0 || !R->ds->gather_at_start)
        return;
    for (int u = 0; u < R->nunit; u++) {
        struct where w = {-1, (int16_t)R->unit[u].chunk, -1, DP_SIM_STEP, 0};
        R->gather_end[u] =
            dp_coll(E, R, DP_SIM_GATHER, DP_SIM_OP_GATHER, t, R->unit[u].gather_s, &w, cp);
    }
}

/* One pipeline schedule: every GPU runs as far as its inputs allow, in turn, until all
 * are done. */
static int run_schedule(struct eng *E, struct caps *caps, struct dp_err *err)
{
    const int p = E->in->pp;
    for (;;) {
        bool progressed = false, all = true;
        for (int r = 0; r < p; r++) {
            struct rank *R = &E->rk[r];
            while (R->pi < R->nprog && !R->failed) {
                const struct dp_sim_step *st = &R->prog[R->pi];
                double t_in = input_at(E, r, st);
                /* an overlapped pair starts once both its passes' inputs are there */
                if (t_in >= 0 && st->paired && st->fwd && R->pi + 1 < R->nprog) {
                    double t2 = input_at(E, r, st + 1);
                    t_in = t2 < 0 ? -1 : t2 > t_in ? t2 : t_in;
                }
                if (t_in < 0)
                    break;
                run_pass(E, R, st, t_in, &caps[r]);
                R->pi++;
                progressed = true;
            }
            if (R->failed)
                return dp_err_set(err, DP_ENOMEM, "out of memory");
            all &= R->pi == R->nprog;
        }
        if (all)
            return 0;
        if (!progressed)
            return dp_err_set(err, DP_EINVAL, "simulate: the schedule deadlocked");
    }
}

/* After a schedule's passes: the remaining reductions, the tied embeddings' sync and the
 * wait for the slowest stage (*bar: when every stage is done). */
static int finish_schedule(struct eng *E, struct caps *caps, double *bar, struct dp_err *err)
{
    const struct dp_sim_input *in = E->in;
    const int p = in->pp;
    double *ready = calloc((size_t)p, sizeof *ready);
    if (!ready)
        return dp_err_set(err, DP_ENOMEM, "out of memory");
    for (int r = 0; r < p; r++) {
        struct rank *R = &E->rk[r];
        if (R->nunit > 0 && !R->ds->reduce_overlap && !R->ds->reduce_each_mb)
            for (int u = R->nunit - 1; u >= 0; u--) {
                struct where w = {-1, (int16_t)R->unit[u].chunk, -1, DP_SIM_STEP, 0};
                dp_coll(E, R, DP_SIM_REDUCE, DP_SIM_OP_REDUCE, R->t, R->unit[u].reduce_s, &w,
                        &caps[r]);
            }
        wait_until(R, R->free[DP_SIM_REDUCE], &R->b.dp);
        ready[r] = R->t;
    }
    if (p > 1 && in->ops.emb_sync_s > 0) {
        double t0 = ready[0] > ready[p - 1] ? ready[0] : ready[p - 1];
        int ends[2] = {0, p - 1};
        for (int i = 0; i < 2; i++) {
            struct rank *R = &E->rk[ends[i]];
            struct where w = {-1, -1, -1, DP_SIM_STEP, 0};
            wait_until(R, t0, &R->b.bubble);
            record(E, R, t0, t0 + in->ops.emb_sync_s, DP_SIM_REDUCE, DP_SIM_OP_EMB_SYNC, &w, 0,
                   &caps[ends[i]]);
            R->free[DP_SIM_REDUCE] = t0 + in->ops.emb_sync_s;
            wait_until(R, t0 + in->ops.emb_sync_s, &R->b.other);
            ready[ends[i]] = R->t;
        }
    }
    *bar = 0;
    for (int r = 0; r < p; r++)
        *bar = ready[r] > *bar ? ready[r] : *bar;
    free(ready);
    return 0;
}

int dp_sim_engine(const struct dp_sim_input *in, const struct dp_sim_opts *o,
                  struct dp_sim_result *out, struct dp_err *err)
{
    memset(out, 0, sizeof *out);
    const int p = in->pp, v = in->vpp, S = p * v;
    const int64_t M = in->M;
    if (p < 1 || p > DP_MAX_PP || v < 1 || S > DP_MAX_CHUNKS || M < 1)
        return dp_err_set(err, DP_EINVAL, "simulate: pp=%d vpp=%d with %lld micro-batches", p, v,
                          (long long)M);
    struct eng E = {.in = in, .o = o, .S = S};
    out->schedule = sim_schedule(in);
    out->pp = p;
    out->vpp = v;
    out->microbatches = M;
    out->schedules = in_schedules(in);
    out->caveat = in->caveat;
    out->nstages = p;
    out->stage = calloc((size_t)p, sizeof *out->stage);
    E.rk = calloc((size_t)p, sizeof *E.rk);
    E.act_arr = malloc((size_t)S * (size_t)M * sizeof *E.act_arr);
    E.grad_arr = malloc((size_t)S * (size_t)M * sizeof *E.grad_arr);
    struct caps *caps = calloc((size_t)p, sizeof *caps);
    int rc = 0;
    if (!out->stage || !E.rk || !E.act_arr || !E.grad_arr || !caps) {
        rc = dp_err_set(err, DP_ENOMEM, "out of memory");
        goto done;
    }
    for (size_t i = 0; i < (size_t)S * (size_t)M; i++) {
        E.act_arr[i] = i < (size_t)M ? 0 : -1; /* virtual stage 0 needs no input */
        E.grad_arr[i] = -1;
    }
    for (int r = 0; r < p; r++) {
        if ((rc = rank_init(&E, &E.rk[r], r, err)))
            goto done;
        struct rank *R = &E.rk[r];
        R->out = &out->stage[r];
        R->rec = o->record && (!o->record_stage || o->record_stage[r]);
        R->out->stage = r;
        R->out->rank = (long)r * in->stage_rank_stride;
        R->out->ranks = in->ranks_per_stage;
        R->out->model_peak_bytes = in->mem[r].model_peak_bytes;
        gathers_at_start(&E, R, 0, &caps[r]);
    }
    /* The step's pipeline schedules, one after another (layout local_batch: torchtitan's
     * gradient-accumulation steps, each with its fill, drain, gathers and reductions, as
     * the cost model's schedules_step prices them): every GPU runs as far as its inputs
     * allow, in turn, until all are done; then each schedule's remaining reductions, the
     * tied embeddings' sync and the wait for the slowest stage. */
    double bar = 0;
    for (int64_t k = 0; k < in_schedules(in); k++) {
        E.mb_base = k * M;
        if (k > 0) {
            for (size_t i = 0; i < (size_t)S * (size_t)M; i++) {
                E.act_arr[i] = i < (size_t)M ? bar : -1;
                E.grad_arr[i] = -1;
            }
            for (int r = 0; r < p; r++) {
                struct rank *R = &E.rk[r];
                R->pi = 0;
                wait_until(R, bar, &R->b.bubble);
                gathers_at_start(&E, R, bar, &caps[r]);
            }
        }
        if ((rc = run_schedule(&E, caps, err)) || (rc = finish_schedule(&E, caps, &bar, err)))
            goto done;
    }
    /* The pipeline span and each stage's passes. */
    double span0 = INFINITY, span1 = 0;
    for (int r = 0; r < p; r++) {
        struct dp_sim_stage *st = &out->stage[r];
        st->first_s = st->npass ? st->pass[0].t0 : 0;
        st->last_s = 0;
        for (size_t i = 0; i < st->npass; i++) {
            st->busy_s += st->pass[i].t1 - st->pass[i].t0;
            if (st->pass[i].t1 > st->last_s)
                st->last_s = st->pass[i].t1;
        }
        if (st->first_s < span0)
            span0 = st->first_s;
        if (st->last_s > span1)
            span1 = st->last_s;
    }
    out->pipe_s = span1 - span0;

    for (int r = 0; r < p; r++) {
        struct rank *R = &E.rk[r];
        struct where w = {-1, -1, -1, DP_SIM_STEP, 0};
        wait_until(R, bar, &R->b.bubble);
        double t0 = R->t;
        R->t += in->ops.optimizer_s[r];
        R->b.optimizer += in->ops.optimizer_s[r];
        record(&E, R, t0, R->t, DP_SIM_COMPUTE, DP_SIM_OP_OPTIMIZER, &w, 0, &caps[r]);
        if (R->nunit > 0 && in->zero >= 1 && !R->ds->gather_at_start && !R->ds->gather_each_mb)
            for (int u = 0; u < R->nunit; u++) {
                struct where wu = {-1, (int16_t)R->unit[u].chunk, -1, DP_SIM_STEP, 0};
                double t1 = dp_coll(&E, R, DP_SIM_GATHER, DP_SIM_OP_GATHER, R->t,
                                    R->unit[u].gather_s, &wu, &caps[r]);
                wait_until(R, t1, &R->b.dp);
            }
        if (R->t > out->step_s)
            out->step_s = R->t;
    }
    double idle = 0, most = -1;
    for (int r = 0; r < p; r++) {
        struct rank *R = &E.rk[r];
        struct dp_sim_stage *st = &out->stage[r];
        wait_until(R, out->step_s, &R->b.bubble); /* done early: waits for the others */
        st->b = R->b;
        st->idle_s = out->pipe_s - st->busy_s;
        if (st->idle_s < 0)
            st->idle_s = 0;
        st->bubble = out->pipe_s > 0 ? st->idle_s / out->pipe_s : 0;
        idle += st->idle_s;
        if (st->busy_s > most) {
            most = st->busy_s;
            out->busiest = r;
        }
        if ((rc = memory(R, in, err)))
            goto done;
        if (r == 0 || st->peak_bytes > out->peak_bytes) {
            out->peak_bytes = st->peak_bytes;
            out->peak_stage = r;
        }
    }
    out->bubble = out->pipe_s > 0 ? idle / (p * out->pipe_s) : 0;
    out->ops = E.ops;
done:
    if (E.rk)
        for (int r = 0; r < p; r++)
            rank_release(&E.rk[r]);
    free(E.rk);
    free(E.act_arr);
    free(E.grad_arr);
    free(caps);
    if (rc)
        dp_sim_result_release(out);
    return rc;
}

void dp_sim_result_release(struct dp_sim_result *r)
{
    if (!r)
        return;
    for (int i = 0; r->stage && i < r->nstages; i++) {
        free(r->stage[i].pass);
        free(r->stage[i].comm);
        free(r->stage[i].slice);
        free(r->stage[i].mem);
    }
    free(r->stage);
    memset(r, 0, sizeof *r);
}
