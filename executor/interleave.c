/*
 * Interleaved 1F1B (Megatron's virtual pipeline, Narayanan et al. 2021 Sec. 2.2):
 * stage r of p holds model chunks r, r + p, ..., r + (v - 1) p; the embedding is
 * in chunk 0 (stage 0), the loss in the last (stage p - 1), and the activations go
 * round the ring of stages v times (stage p - 1 sends chunk c's output to stage 0's
 * chunk c + 1, and the gradients come back the same way).
 *
 * The order of a stage's passes is Megatron-Core's (schedules.py
 * forward_backward_pipelining_with_interleaving with its default micro-batch group
 * of p): (p - r - 1) 2 + (v - 1) p warm-up forwards, then one forward and one
 * backward in turn, then the remaining backwards; forward pass k runs chunk
 * (k mod p v) / p of micro-batch (k / p v) p + k mod p, backward pass k the same
 * micro-batch through chunk v - 1 - that chunk. sim/schedule.c builds the same
 * order (tests/unit/test_interleave_order.c compares them).
 *
 * Messages. Every stage replays the same unit-time timeline of all stages: at each
 * step a stage runs its next pass if the pass's input arrived at the end of an
 * earlier step (one pass per step), and the messages its passes produce arrive at
 * the end of that step. At the end of step t a stage posts, in one batch (the
 * backend's p2p, as Megatron batches isend/irecv), the send of what its pass
 * produced and the receives of what its neighbours' passes of step t produced.
 * Deadlock-free by induction on t: once every stage has finished the batches of
 * the steps before t, each can run its pass of step t (its inputs came in those
 * batches) and post batch t, whose peers all post theirs; a stage with no message
 * at t only goes ahead. The timeline ends because the order is a valid schedule:
 * with inputs arriving as soon as produced some stage can always run its next
 * pass (Megatron runs it, sim/ simulates it), so at most 2 M v p steps.
 *
 * DualPipeV (layout pipeline_schedule dualpipev) runs on the same timeline: stage r holds
 * model-order stages r and 2 pp - 1 - r (chunks 0 and 1; core/layout.h
 * dp_layout_global_stage), so rank 0 has the embedding and the loss and rank pp - 1 passes
 * its chunk 0's output to its own chunk 1 (a message to itself). Its passes are DualPipeV's
 * (core/schedule_dualpipev.c): an overlapped pair runs as its forward then its backward,
 * a backward for the inputs only as the whole backward, and the deferred weight gradients
 * are then nothing more to run; every stage may receive from both neighbours in one step.
 *
 * Memory follows from the same timeline: a slot of chunk c is taken when its
 * input arrives (or at the forward, for the embedding's chunk) and given back
 * after its backward; a received gradient waits in a buffer until its backward.
 * memplan.c counts the most of both held at once, which the run holds exactly.
 */
#include "internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { TAG_FWD = 1, TAG_BWD = 2 };

/* Megatron-Core's schedule table: the micro-batch and chunk of forward pass k. */
static void table(int p, int v, int64_t k, int *mb, int *chunk)
{
    int64_t span = (int64_t)p * v, g = k / span, in = k % span;
    *chunk = (int)(in / p);
    *mb = (int)(g * p + in % p);
}

static int64_t warmup(int p, int v, int64_t M, int r)
{
    int64_t w = 2 * (int64_t)(p - r - 1) + (int64_t)(v - 1) * p, tot = M * v;
    return w < tot ? w : tot;
}

void dp__vsched_pass(int p, int v, int64_t M, int r, int64_t k, int *mb, int *chunk, bool *fwd)
{
    const int64_t tot = M * v, W = warmup(p, v, M, r);
    int64_t f = -1, b = -1;
    if (k < W)
        f = k;
    else if (k < 2 * tot - W && (k - W) % 2 == 0)
        f = W + (k - W) / 2;
    else if (k < 2 * tot - W)
        b = (k - W) / 2;
    else
        b = k - tot;
    *fwd = f >= 0;
    table(p, v, *fwd ? f : b, mb, chunk);
    if (!*fwd)
        *chunk = v - 1 - *chunk;
}

void dp__vsched_free(struct dp__vsched *vs)
{
    free(vs->t);
    free(vs->pmb);
    free(vs->pch);
    free(vs->pfw);
    vs->t = NULL;
    vs->pmb = NULL;
    vs->pch = NULL;
    vs->pfw = NULL;
}

/* Model-order stage g's rank, its chunk there in *c (core/layout.h dp_pipe_stage_rank). */
static int grank(int p, bool dpv, int g, int *c)
{
    *c = g / p;
    return dp_pipe_stage_rank(p, dpv, g);
}

/* Where a pass's output goes: the next stage's forward input / the previous stage's
 * output gradient (chunk there), or -1 (the loss's forward, the embedding's backward). */
static int fwd_dest(int p, int v, bool dpv, int r, int c, int *dc)
{
    int g = dp_pipe_global_stage(p, dpv, r, c);
    return g == p * v - 1 ? -1 : grank(p, dpv, g + 1, dc);
}

static int bwd_dest(int p, bool dpv, int r, int c, int *dc)
{
    int g = dp_pipe_global_stage(p, dpv, r, c);
    return g == 0 ? -1 : grank(p, dpv, g - 1, dc);
}

/* Where chunk c of stage r receives its forward input / its output gradient from. */
static int fwd_src(int p, bool dpv, int r, int c)
{
    int dc;
    return grank(p, dpv, dp_pipe_global_stage(p, dpv, r, c) - 1, &dc);
}

static int bwd_src(int p, bool dpv, int r, int c)
{
    int dc;
    return grank(p, dpv, dp_pipe_global_stage(p, dpv, r, c) + 1, &dc);
}

/* DualPipeV: stage r's passes (4 M: a forward and a backward of each micro-batch through
 * each chunk) as core numbers them, into mb/ch/fw; returns the count or -1. The W passes
 * have nothing to do here: a backward for the inputs only runs as the whole backward. */
static int64_t dpv_passes(int p, int64_t M, int r, int *mb, unsigned char *ch, bool *fw)
{
    int64_t nps = dp_dualpipev_passes(p, M, r, NULL), n = 0;
    struct dp_dpv_pass *ps = nps > 0 ? malloc((size_t)nps * sizeof *ps) : NULL;
    if (!ps || dp_dualpipev_passes(p, M, r, ps) != nps) {
        free(ps);
        return -1;
    }
    for (int64_t i = 0; i < nps; i++) {
        if (ps[i].kind == DP_DPV_W)
            continue;
        mb[n] = ps[i].mb;
        ch[n] = ps[i].ph;
        fw[n] = ps[i].kind == DP_DPV_F;
        n++;
    }
    free(ps);
    return n;
}

/* Stage q's pass k: DualPipeV's from the table built for every stage, else Megatron's. */
struct passes {
    int p, v;
    int64_t M, n;
    int *mb; /* DualPipeV: p x n */
    unsigned char *ch;
    bool *fw;
};

static void pass_of(const struct passes *ps, int q, int64_t k, int *mb, int *c, bool *fwd)
{
    if (!ps->mb) {
        dp__vsched_pass(ps->p, ps->v, ps->M, q, k, mb, c, fwd);
        return;
    }
    size_t at = (size_t)q * (size_t)ps->n + (size_t)k;
    *mb = ps->mb[at];
    *c = ps->ch[at];
    *fwd = ps->fw[at];
}

int dp__vsched_build(int p, int v, int64_t M, int r, bool dpv, const size_t *slot_bytes,
                     bool keep_steps, struct dp__vsched *out, struct dp_err *err)
{
    memset(out, 0, sizeof *out);
    const int64_t tot = M * v, n = 2 * tot, cap = n * p + 1;
    if (dpv ? (v != 2 || p < 2 || M < 2 * (int64_t)p || M > INT32_MAX / 2)
            : (p < 2 || v < 2 || M < p || M % p || M > INT32_MAX / v))
        return dp_err_set(err, DP_EINVAL, "%s: bad shape pp=%d vpp=%d M=%lld",
                          dpv ? "DualPipeV" : "interleaved 1F1B", p, v, (long long)M);
    /* Per stage: the next pass; per (stage, micro-batch, chunk): the step at whose end its
     * forward input / output gradient arrived (-1: not yet). */
    int64_t *next = calloc((size_t)p, sizeof *next);
    int64_t *fin = malloc((size_t)(p * tot) * sizeof *fin);
    int64_t *bin = malloc((size_t)(p * tot) * sizeof *bin);
    int64_t *ran = malloc((size_t)p * sizeof *ran); /* pass run at this step, or -1 */
    int *held = calloc((size_t)v, sizeof *held);
    struct dp__vstep *steps = keep_steps ? malloc((size_t)cap * sizeof *steps) : NULL;
    struct passes ps = {p, v, M, n, NULL, NULL, NULL};
    int rc = 0;
    if (dpv) {
        ps.mb = malloc((size_t)(p * n) * sizeof *ps.mb);
        ps.ch = malloc((size_t)(p * n) * sizeof *ps.ch);
        ps.fw = malloc((size_t)(p * n) * sizeof *ps.fw);
    }
    if (!next || !fin || !bin || !ran || !held || (keep_steps && !steps) ||
        (dpv && (!ps.mb || !ps.ch || !ps.fw))) {
        rc = dp_err_set(err, DP_ENOMEM, "out of memory");
        goto done;
    }
    for (int q = 0; dpv && q < p; q++) {
        size_t at = (size_t)q * (size_t)n;
        if (dpv_passes(p, M, q, ps.mb + at, ps.ch + at, ps.fw + at) != n) {
            rc = dp_err_set(err, DP_ERUNTIME, "internal: DualPipeV's order of stage %d", q);
            goto done;
        }
    }
    for (int64_t i = 0; i < p * tot; i++)
        fin[i] = bin[i] = -1;
    int64_t done_all = 0, t = 0, bytes = 0, nwait = 0;
    int chmax_now[DP_MAX_CHUNKS] = {0};
    const int last_g = p * v - 1;
    for (; done_all < (int64_t)p * n; t++) {
        if (t >= cap) {
            rc = dp_err_set(err, DP_ERUNTIME, "internal: the pipeline timeline stalls");
            goto done;
        }
        struct dp__vstep st = {-1, {-1, -1}, {-1, -1}, {-1, -1}, {-1, -1}};
        int nrf = 0, nrb = 0;
        /* The passes of step t, each on inputs that arrived before it. */
        for (int q = 0; q < p; q++) {
            ran[q] = -1;
            if (next[q] >= n)
                continue;
            int mb, c;
            bool fwd;
            pass_of(&ps, q, next[q], &mb, &c, &fwd);
            int64_t at = (int64_t)q * tot + (int64_t)mb * v + c;
            const int g = dp_pipe_global_stage(p, dpv, q, c);
            bool ready = fwd ? g == 0 || (fin[at] >= 0 && fin[at] < t)
                             : g == last_g || (bin[at] >= 0 && bin[at] < t);
            if (!ready)
                continue;
            ran[q] = next[q]++;
            done_all++;
            if (q != r)
                continue;
            st.pass = ran[q];
            if (fwd && g == 0) {
                bytes += (int64_t)slot_bytes[c]; /* taken at the forward */
                held[c]++;
            }
            if (!fwd) {
                if (g != last_g)
                    nwait--; /* its gradient buffer is free again */
                bytes -= (int64_t)slot_bytes[c];
                held[c]--;
            }
            if (bytes > out->peak_bytes)
                out->peak_bytes = bytes;
            if (held[c] > chmax_now[c])
                chmax_now[c] = held[c];
        }
        /* The messages of step t, arriving at its end. */
        for (int q = 0; q < p; q++) {
            if (ran[q] < 0)
                continue;
            int mb, c, dc = 0;
            bool fwd;
            pass_of(&ps, q, ran[q], &mb, &c, &fwd);
            int to = fwd ? fwd_dest(p, v, dpv, q, c, &dc) : bwd_dest(p, dpv, q, c, &dc);
            if (to < 0)
                continue;
            int64_t at = (int64_t)to * tot + (int64_t)mb * v + dc;
            (fwd ? fin : bin)[at] = t;
            if (to != r)
                continue;
            if (fwd) {
                st.rf_mb[nrf] = mb;
                st.rf_ch[nrf++] = dc;
                bytes += (int64_t)slot_bytes[dc]; /* the slot its input lands in */
                held[dc]++;
            } else {
                st.rb_mb[nrb] = mb;
                st.rb_ch[nrb++] = dc;
                nwait++;
            }
        }
        for (int c = 0; c < v; c++)
            chmax_now[c] = held[c] > chmax_now[c] ? held[c] : chmax_now[c];
        if (bytes > out->peak_bytes)
            out->peak_bytes = bytes;
        if (nwait > out->grecv_max)
            out->grecv_max = (int)nwait;
        if (steps)
            steps[t] = st;
    }
    /* Trailing idle steps of this stage carry nothing: cut them. */
    while (t > 0 && steps && steps[t - 1].pass < 0 && steps[t - 1].rf_mb[0] < 0 &&
           steps[t - 1].rb_mb[0] < 0)
        t--;
    out->nt = t;
    memcpy(out->ch_max, chmax_now, sizeof chmax_now);
    out->t = steps;
    steps = NULL;
    if (dpv && keep_steps) { /* this stage's passes, for the run */
        out->pmb = malloc((size_t)n * sizeof *out->pmb);
        out->pch = malloc((size_t)n * sizeof *out->pch);
        out->pfw = malloc((size_t)n * sizeof *out->pfw);
        if (!out->pmb || !out->pch || !out->pfw) {
            dp__vsched_free(out);
            rc = dp_err_set(err, DP_ENOMEM, "out of memory");
            goto done;
        }
        size_t at = (size_t)r * (size_t)n;
        memcpy(out->pmb, ps.mb + at, (size_t)n * sizeof *out->pmb);
        memcpy(out->pch, ps.ch + at, (size_t)n * sizeof *out->pch);
        memcpy(out->pfw, ps.fw + at, (size_t)n * sizeof *out->pfw);
    }
done:
    free(next);
    free(fin);
    free(bin);
    free(ran);
    free(held);
    free(steps);
    free(ps.mb);
    free(ps.ch);
    free(ps.fw);
    return rc;
}

/* dp_exec_schedule: " F3.1" / " B3.1" for micro-batch 3's forward / backward through the
 * stage's model chunk 1, in order. */
static void trace(struct dp_exec *ex, char what, int mb, int c)
{
    size_t n = strlen(ex->trace);
    if (n + 24 < ex->trace_cap)
        snprintf(ex->trace + n, ex->trace_cap - n, "%s%c%d.%d", n ? " " : "", what, mb, c);
    else if (n >= 3 && n + 5 < ex->trace_cap && strcmp(ex->trace + n - 3, "...") != 0)
        snprintf(ex->trace + n, ex->trace_cap - n, " ...");
}

static int grecv_find(struct dp_exec *ex, int mb, int c)
{
    for (int i = 0; i < ex->ngrecv; i++)
        if (ex->grecv_mb[i] == mb && ex->grecv_ch[i] == c)
            return i;
    return -1;
}

int dp__pipeline_interleaved(struct dp_exec *ex, int step)
{
    const int p = ex->l.pp, v = ex->nch, r = ex->c.pp_rank;
    const bool dpv = ex->l.schedule == DP_SCHED_DUALPIPEV;
    const int64_t Nlh = ex->dm.Nl * ex->dm.h;
    const struct dp__vsched *vs = ex->vs;
    /* The head's activations (hd) are one set: the loss's chunk must run each
     * micro-batch's backward right after its forward, as the order does on the loss's
     * stage (Megatron's: its warm-up (vpp - 1) pp ends where forward W + k and backward k
     * are the same micro-batch's last chunk; DualPipeV's on rank 0: each phase-1 forward
     * is followed by that micro-batch's phase-1 backward before the next). */
    int loss_mb = -1;
    if (!vs || !vs->t)
        return dp_err_set(ex->err, DP_ERUNTIME, "internal: no interleaved timeline");
    for (int64_t t = 0; t < vs->nt; t++) {
        const struct dp__vstep *e = &vs->t[t];
        struct dp_p2p msg[5];
        int nm = 0;
        if (e->pass >= 0) {
            int mb, c;
            bool fwd;
            if (vs->pmb) {
                mb = vs->pmb[e->pass];
                c = vs->pch[e->pass];
                fwd = vs->pfw[e->pass];
            } else {
                dp__vsched_pass(p, v, ex->M, r, e->pass, &mb, &c, &fwd);
            }
            const bool emb = ex->first && c == 0, loss = ex->last && c == v - 1;
            struct dp_slot *s =
                fwd && emb ? dp__slot_acquire_chunk(ex, mb, c) : dp__slot_find(ex, mb, c);
            if (!s)
                return ex->err->code
                           ? ex->err->code
                           : dp_err_set(ex->err, DP_ERUNTIME,
                                        "internal: micro-batch %d of chunk %d not here", mb, c);
            int dc = 0;
            if (fwd) {
                if (ex->trace)
                    trace(ex, 'F', mb, c);
                if (s->inputs || s->targets)
                    dp__load_batch(ex, s, step, mb);
                if (loss) {
                    if (loss_mb >= 0)
                        return dp_err_set(ex->err, DP_ERUNTIME,
                                          "internal: two forwards through the loss in a row");
                    loss_mb = mb;
                }
                dp__beat("forward");
                TRY(dp__stage_forward(ex, s));
                int to = fwd_dest(p, v, dpv, r, c, &dc);
                if (to >= 0)
                    msg[nm++] = (struct dp_p2p){to, ex->send_fwd, Nlh, TAG_FWD, true};
            } else {
                if (ex->trace)
                    trace(ex, 'B', mb, c);
                if (loss) {
                    if (loss_mb != mb)
                        return dp_err_set(ex->err, DP_ERUNTIME,
                                          "internal: the loss's backward of micro-batch %d "
                                          "after another forward",
                                          mb);
                    loss_mb = -1;
                } else {
                    int g = grecv_find(ex, mb, c);
                    if (g < 0)
                        return dp_err_set(ex->err, DP_ERUNTIME,
                                          "internal: no gradient for micro-batch %d chunk %d", mb,
                                          c);
                    OPS->copy(ex->be, ex->w.dres, ex->grecv + g * Nlh, (size_t)Nlh * sizeof(real));
                    ex->grecv_mb[g] = ex->grecv_ch[g] = -1;
                }
                dp__beat("backward");
                TRY(dp__stage_backward(ex, s));
                dp__slot_release(ex, s);
                int to = bwd_dest(p, dpv, r, c, &dc);
                if (to >= 0)
                    msg[nm++] = (struct dp_p2p){to, ex->w.dres, Nlh, TAG_BWD, true};
            }
            dp__beat(NULL);
        }
        for (int k = 0; k < 2 && e->rf_mb[k] >= 0; k++) {
            struct dp_slot *s = dp__slot_acquire_chunk(ex, e->rf_mb[k], e->rf_ch[k]);
            if (!s)
                return ex->err->code;
            msg[nm++] = (struct dp_p2p){fwd_src(p, dpv, r, e->rf_ch[k]), s->layers[0].x, Nlh,
                                        TAG_FWD, false};
        }
        for (int k = 0; k < 2 && e->rb_mb[k] >= 0; k++) {
            int g = grecv_find(ex, -1, -1);
            if (g < 0)
                return dp_err_set(ex->err, DP_ERUNTIME, "internal: more than %d gradients waiting",
                                  ex->ngrecv);
            ex->grecv_mb[g] = e->rb_mb[k];
            ex->grecv_ch[g] = e->rb_ch[k];
            msg[nm++] = (struct dp_p2p){bwd_src(p, dpv, r, e->rb_ch[k]), ex->grecv + g * Nlh, Nlh,
                                        TAG_BWD, false};
        }
        if (nm) {
            dp__beat("pipeline send/receive");
            TRY(OPS->p2p(ex->be, DP_GROUP_PP, msg, nm, ex->err));
        }
    }
    return 0;
}
