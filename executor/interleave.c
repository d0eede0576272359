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
    vs->t = NULL;
}

/* Where a pass's output goes: the next stage's forward input / the previous stage's
 * output gradient (chunk there), or -1 (the loss's forward, the embedding's backward). */
static int fwd_dest(int p, int v, int r, int c, int *dc)
{
    if (r == p - 1 && c == v - 1)
        return -1;
    *dc = r == p - 1 ? c + 1 : c;
    return (r + 1) % p;
}

static int bwd_dest(int p, int r, int c, int *dc)
{
    if (r == 0 && c == 0)
        return -1;
    *dc = r == 0 ? c - 1 : c;
    return (r + p - 1) % p;
}

int dp__vsched_build(int p, int v, int64_t M, int r, const size_t *slot_bytes, bool keep_steps,
                     struct dp__vsched *out, struct dp_err *err)
{
    memset(out, 0, sizeof *out);
    const int64_t tot = M * v, n = 2 * tot, cap = n * p + 1;
    if (p < 2 || v < 2 || M < p || M % p || M > INT32_MAX / v)
        return dp_err_set(err, DP_EINVAL, "interleaved 1F1B: bad shape pp=%d vpp=%d M=%lld", p, v,
                          (long long)M);
    /* Per stage: the next pass; per (stage, micro-batch, chunk): the step at whose end its
     * forward input / output gradient arrived (-1: not yet). */
    int64_t *next = calloc((size_t)p, sizeof *next);
    int64_t *fin = malloc((size_t)(p * tot) * sizeof *fin);
    int64_t *bin = malloc((size_t)(p * tot) * sizeof *bin);
    int64_t *ran = malloc((size_t)p * sizeof *ran); /* pass run at this step, or -1 */
    int *held = calloc((size_t)v, sizeof *held);
    struct dp__vstep *steps = keep_steps ? malloc((size_t)cap * sizeof *steps) : NULL;
    int rc = 0;
    if (!next || !fin || !bin || !ran || !held || (keep_steps && !steps)) {
        rc = dp_err_set(err, DP_ENOMEM, "out of memory");
        goto done;
    }
    for (int64_t i = 0; i < p * tot; i++)
        fin[i] = bin[i] = -1;
    int64_t done_all = 0, t = 0, bytes = 0, nwait = 0;
    int chmax_now[DP_MAX_CHUNKS] = {0};
    for (; done_all < (int64_t)p * n; t++) {
        if (t >= cap) {
            rc = dp_err_set(err, DP_ERUNTIME, "internal: the interleaved schedule stalls");
            goto done;
        }
        struct dp__vstep st = {-1, -1, -1, -1, -1};
        /* The passes of step t, each on inputs that arrived before it. */
        for (int q = 0; q < p; q++) {
            ran[q] = -1;
            if (next[q] >= n)
                continue;
            int mb, c;
            bool fwd;
            dp__vsched_pass(p, v, M, q, next[q], &mb, &c, &fwd);
            int64_t at = (int64_t)q * tot + (int64_t)mb * v + c;
            bool ready = fwd ? (q == 0 && c == 0) || (fin[at] >= 0 && fin[at] < t)
                             : (q == p - 1 && c == v - 1) || (bin[at] >= 0 && bin[at] < t);
            if (!ready)
                continue;
            ran[q] = next[q]++;
            done_all++;
            if (q != r)
                continue;
            st.pass = ran[q];
            if (fwd && r == 0 && c == 0) {
                bytes += (int64_t)slot_bytes[c]; /* taken at the forward */
                held[c]++;
            }
            if (!fwd) {
                if (!(r == p - 1 && c == v - 1))
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
            dp__vsched_pass(p, v, M, q, ran[q], &mb, &c, &fwd);
            int to = fwd ? fwd_dest(p, v, q, c, &dc) : bwd_dest(p, q, c, &dc);
            if (to < 0)
                continue;
            int64_t at = (int64_t)to * tot + (int64_t)mb * v + dc;
            (fwd ? fin : bin)[at] = t;
            if (to != r)
                continue;
            if (fwd) {
                st.rf_mb = mb;
                st.rf_ch = dc;
                bytes += (int64_t)slot_bytes[dc]; /* the slot its input lands in */
                held[dc]++;
            } else {
                st.rb_mb = mb;
                st.rb_ch = dc;
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
    while (t > 0 && steps && steps[t - 1].pass < 0 && steps[t - 1].rf_mb < 0 &&
           steps[t - 1].rb_mb < 0)
        t--;
    out->nt = t;
    memcpy(out->ch_max, chmax_now, sizeof chmax_now);
    out->t = steps;
    steps = NULL;
done:
    free(next);
    free(fin);
    free(bin);
    free(ran);
    free(held);
    free(steps);
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
    const int64_t Nlh = ex->dm.Nl * ex->dm.h;
    const struct dp__vsched *vs = ex->vs;
    /* The head's activations (hd) are one set: the loss's chunk must run each
     * micro-batch's backward right after its forward, as the order does on stage pp - 1
     * (its warm-up (vpp - 1) pp ends where forward W + k and backward k are the same
     * micro-batch's last chunk). */
    int loss_mb = -1;
    if (!vs || !vs->t)
        return dp_err_set(ex->err, DP_ERUNTIME, "internal: no interleaved timeline");
    for (int64_t t = 0; t < vs->nt; t++) {
        const struct dp__vstep *e = &vs->t[t];
        struct dp_p2p msg[3];
        int nm = 0;
        if (e->pass >= 0) {
            int mb, c;
            bool fwd;
            dp__vsched_pass(p, v, ex->M, r, e->pass, &mb, &c, &fwd);
            struct dp_slot *s = fwd && r == 0 && c == 0 ? dp__slot_acquire_chunk(ex, mb, c)
                                                        : dp__slot_find(ex, mb, c);
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
                if (ex->last && c == v - 1) {
                    if (loss_mb >= 0)
                        return dp_err_set(ex->err, DP_ERUNTIME,
                                          "internal: two forwards through the loss in a row");
                    loss_mb = mb;
                }
                dp__beat("forward");
                TRY(dp__stage_forward(ex, s));
                int to = fwd_dest(p, v, r, c, &dc);
                if (to >= 0)
                    msg[nm++] = (struct dp_p2p){to, ex->send_fwd, Nlh, TAG_FWD, true};
            } else {
                if (ex->trace)
                    trace(ex, 'B', mb, c);
                if (ex->last && c == v - 1) {
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
                int to = bwd_dest(p, r, c, &dc);
                if (to >= 0)
                    msg[nm++] = (struct dp_p2p){to, ex->w.dres, Nlh, TAG_BWD, true};
            }
            dp__beat(NULL);
        }
        if (e->rf_mb >= 0) {
            struct dp_slot *s = dp__slot_acquire_chunk(ex, e->rf_mb, e->rf_ch);
            if (!s)
                return ex->err->code;
            msg[nm++] = (struct dp_p2p){(r + p - 1) % p, s->layers[0].x, Nlh, TAG_FWD, false};
        }
        if (e->rb_mb >= 0) {
            int g = grecv_find(ex, -1, -1);
            if (g < 0)
                return dp_err_set(ex->err, DP_ERUNTIME, "internal: more than %d gradients waiting",
                                  ex->ngrecv);
            ex->grecv_mb[g] = e->rb_mb;
            ex->grecv_ch[g] = e->rb_ch;
            msg[nm++] = (struct dp_p2p){(r + 1) % p, ex->grecv + g * Nlh, Nlh, TAG_BWD, false};
        }
        if (nm) {
            dp__beat("pipeline send/receive");
            TRY(OPS->p2p(ex->be, DP_GROUP_PP, msg, nm, ex->err));
        }
    }
    return 0;
}
