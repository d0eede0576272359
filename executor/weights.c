/*
 * The final weights as one safetensors file with full (unsharded) tensors
 * under their global names ("wte", "h.0.attn.wq", ...), whatever the layout:
 * rank 0 collects each tensor's slices from the ranks of DP replica 0 (one
 * tensor at a time, so it never holds more than the largest tensor) and
 * writes it with ckpt's writer of whole-tensor files, the one `dplan ckpt
 * export` uses. The padded vocabulary rows are left out, so files from
 * different tensor-parallel degrees compare element by element.
 */
#include "internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TAG_WEIGHTS 3

/* Ranks holding distinct slices of `t`: of the TP group, or for a routed expert of its
 * expert tensor group (1 for replicated tensors). */
static int slices(const struct dp_exec *ex, const struct dp_ckpt_slice *t)
{
    if (!dp_ckpt_slice_split(t))
        return 1;
    return t->expert >= 0 ? dp_layout_etp(&ex->l) : ex->l.tp;
}

/* The rank of stage `st` holding slice `tr` of `t` in replica 0: TP rank tr of DP and CP
 * rank 0, or for routed expert j the expert-data-parallel rank 0 of the expert-parallel
 * rank j / (E / ep), expert tensor rank tr (core/coords.c). */
static int owner_of(const struct dp_exec *ex, const struct dp_ckpt_slice *t, int tr, int st)
{
    const struct dp_layout *l = &ex->l;
    struct dp_coords c = {.tp_rank = tr, .pp_rank = st};
    if (t->expert >= 0 && ex->m->experts > 0) {
        int ep = l->ep > 0 ? l->ep : 1;
        dp_rank_of_ecoords(l->tp, l->cp, dp_layout_etp(l), ep, tr,
                           (int)(t->expert / (ex->m->experts / ep)), 0, &c);
        c.pp_rank = st;
    }
    return dp_rank_of_cp(&c, l->tp, l->cp, l->dp, l->pp);
}

/* Every stage's tensors as TP rank 0 holds them, tied copies left out (they equal the
 * embedding). */
struct gather {
    struct dp_exec *ex;
    struct dp_ckpt_slice *t;
    int *stage;
    int n;
    real *part;
};

/* Rank 0: tensor i, assembled from its slices (its own, or received in rank order). */
static int fill(int i, void *buf, void *ctx)
{
    struct gather *g = ctx;
    struct dp_exec *ex = g->ex;
    struct dp_backend *be = ex->be;
    const struct dp_ckpt_slice *t = &g->t[i];
    real *full = buf;
    int64_t local = t->rows * t->cols;
    int rc = 0;
    for (int tr = 0; tr < slices(ex, t) && !rc; tr++) {
        int owner = owner_of(ex, t, tr, g->stage[i]);
        if (owner == 0) {
            /* Rank 0 is stage 0, TP rank 0: its own segment of the same name. */
            for (int k = 0; k < ex->nsegs && !rc; k++)
                if (!strcmp(ex->segs[k].t.name, t->name) && !ex->segs[k].t.tied_copy &&
                    !(rc = dp__shard_visit(ex, &ex->segs[k])))
                    be->ops->download(be, g->part, dp__param(ex, ex->segs[k].off),
                                      (size_t)local * sizeof(real));
        } else {
            rc = be->ops->sendrecv(be, DP_GROUP_WORLD, -1, NULL, 0, 0, owner, g->part, local,
                                   TAG_WEIGHTS, ex->err);
        }
        int64_t r0 = t->rows < t->grows ? tr * t->rows : 0;
        int64_t c0 = t->cols < t->gcols ? tr * t->cols : 0;
        for (int64_t r = 0; r < t->rows && r0 + r < t->out_rows; r++)
            memcpy(full + (r0 + r) * t->gcols + c0, g->part + r * t->cols,
                   (size_t)t->cols * sizeof(real));
    }
    dp__beat(NULL);
    return rc;
}

/* Other ranks of DP replica 0: send this rank's slices, in rank 0's order. Under ZeRO-3
 * the other ranks of its shard group (`send` false) join each gather, in the same order. */
static int send_slices(struct dp_exec *ex, bool send)
{
    for (int i = 0; i < ex->nsegs; i++) {
        const struct dp_seg *sg = &ex->segs[i];
        /* A sender sends what rank 0 asks it for (owner_of); a ZeRO-3 joiner visits what
         * its shard group's sender does. */
        int tr = sg->t.expert >= 0 ? ex->dm.etp_rank : ex->c.tp_rank;
        if (sg->t.tied_copy || tr >= slices(ex, &sg->t) ||
            (send && owner_of(ex, &sg->t, tr, ex->c.pp_rank) != ex->rank))
            continue;
        TRY(dp__shard_visit(ex, sg));
        if (send)
            TRY(ex->be->ops->sendrecv(ex->be, DP_GROUP_WORLD, 0, dp__param(ex, sg->off),
                                      sg->t.rows * sg->t.cols, TAG_WEIGHTS, -1, NULL, 0, 0,
                                      ex->err));
    }
    return 0;
}

static int weights_save(struct dp_exec *ex, const char *file)
{
    dp__shard_visit_reset(ex);
    if (ex->rank != 0 && ((ex->c.cp_rank == 0 && ex->c.dp_rank == 0) ||
                          (ex->m->experts > 0 && ex->dm.edp_rank == 0)))
        return send_slices(ex, true);
    if (ex->rank != 0) /* ZeRO-3: the shard group of replica 0 gathers with its owner */
        return ex->l.zero >= 3 && ex->repl_rank == 0 ? send_slices(ex, false) : 0;
    struct gather g = {.ex = ex};
    struct dp_st_tensor *h = NULL;
    int cap = 0, rc = 0;
    int64_t maxl = 1;
    for (int s = 0; s < ex->l.pp && !rc; s++) {
        struct dp_ckpt_slice *t;
        int n;
        if ((rc = dp_ckpt_stage_slices(ex->m, &ex->l, s, 0, &t, &n, ex->err)))
            break;
        if (g.n + n > cap) {
            cap = 2 * (g.n + n);
            struct dp_ckpt_slice *gt = realloc(g.t, (size_t)cap * sizeof *gt);
            int *gs = realloc(g.stage, (size_t)cap * sizeof *gs);
            struct dp_st_tensor *gh = realloc(h, (size_t)cap * sizeof *gh);
            g.t = gt ? gt : g.t;
            g.stage = gs ? gs : g.stage;
            h = gh ? gh : h;
            if (!gt || !gs || !gh)
                rc = dp_err_set(ex->err, DP_ENOMEM, "out of memory");
        }
        for (int i = 0; i < n && !rc; i++) {
            if (t[i].tied_copy)
                continue;
            struct dp_st_tensor *o = &h[g.n];
            memset(o, 0, sizeof *o);
            snprintf(o->key, sizeof o->key, "%s", t[i].name);
            o->dtype = DP__DTYPE;
            o->ndim = t[i].gcols > 1 ? 2 : 1;
            o->shape[0] = t[i].out_rows;
            o->shape[1] = t[i].gcols;
            o->bytes = t[i].out_rows * t[i].gcols * (int64_t)sizeof(real);
            maxl = t[i].rows * t[i].cols > maxl ? t[i].rows * t[i].cols : maxl;
            g.stage[g.n] = s;
            g.t[g.n++] = t[i];
        }
        free(t);
    }
    const char *meta[] = {"format", "pt", "producer", "dplan run", "model", ex->m->name, NULL};
    if (!rc && !(g.part = malloc((size_t)maxl * sizeof(real))))
        rc = dp_err_set(ex->err, DP_ENOMEM, "out of memory");
    /* Failing here would leave the senders blocked; the caller aborts the job. */
    if (!rc)
        rc = dp_ckpt_st_write_file(file, h, g.n, meta, fill, &g, NULL, ex->err);
    free(g.part);
    free(g.t);
    free(g.stage);
    free(h);
    return rc;
}

int dp__weights_save(struct dp_exec *ex, const char *file)
{
    /* ZeRO-3 with two parameter groups (experts under ep > 1): the expert owners visit
     * other tensors than their shard groups' other ranks, so the per-tensor gathers of
     * send_slices would not match; every rank gathers the whole stage first (shard.c). */
    if (!ex->zsplit || ex->l.zero < 3)
        return weights_save(ex, file);
    TRY(dp__shard_full(ex));
    int rc = weights_save(ex, file);
    dp__shard_drop(ex);
    return rc;
}
