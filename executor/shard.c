/*
 * ZeRO-2, ZeRO-3 (FSDP-style) and hybrid sharding (HSDP) on one rank.
 *
 * Every ZeRO stage keeps ZeRO-1's shard geometry (schedule.c): the stage's
 * flat buffer, padded to a multiple of the shard group, in contiguous shards,
 * rank k of the group owning [k S, (k + 1) S) of the AdamW state. So the
 * checkpoint format and its resharding (ckpt/, "zero1_flat") hold for all
 * stages, and stages differ only in what else is sharded:
 *  - ZeRO-2 (Rajbhandari et al. 2020, P_os+g): gradients are reduce-scattered
 *    as they are produced, one bucket per layer after that layer's backward of
 *    each micro-batch (DeepSpeed's stage-2 reduces at every micro-step; the
 *    bucket is the layer as FSDP's wrapping unit), and summed into the
 *    rank's shard `gred`; a rank holds one layer's gradient window, not the
 *    flat gradient buffer.
 *  - ZeRO-3 (P_os+g+p; FSDP, Zhao et al. 2023, Sec. 3): parameters live only
 *    as shards; a layer's are all-gathered into a window before its forward
 *    and again before its backward (which also serves full recompute), and
 *    the window is reused by the next layer (freed after use).
 *  - The edge of the stage (tensors before its first layer: embeddings; after
 *    its last: final norm and LM head) is one bucket kept for the whole step:
 *    the tied embedding's copies are summed between the first and last stage
 *    (Megatron _allreduce_word_embedding_grads), which cannot happen in the
 *    middle of 1F1B without deadlocking the pipeline, so its gradients are
 *    reduce-scattered once at the end of the step, and under ZeRO-3 its
 *    parameters are gathered once at its start.
 *  - HSDP (FSDP2 data_parallel_shard_degree x replicate degree, Megatron
 *    --num-distributed-optimizer-instances): shards span the shard group of
 *    `shard_group` DP ranks; the reduced shard is then all-reduced over the
 *    replicas (the ranks holding the same shard), once per step.
 *  - Experts in their own group (ep > 1 or etp < tp; zero_groups): a second
 *    parameter group, the expert tensors sharded over EDP (under HSDP over a
 *    sub-group of it, all-reduced across its replicas) with their own padding;
 *    every range above is cut in runs of one group, one collective per run
 *    over its group.
 * Reductions are sums of the same terms as the all-reduce, in another order:
 * the loss trajectory matches the single-process one to rounding.
 */
#include "internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define R sizeof(real)

/* ZeRO's parameter groups and their runs (internal.h). Where the experts split otherwise
 * than the dense layers (dm.esplit: ep > 1 or etp < tp) the ranks holding one expert slice
 * are not the dp x cp ones, so (Megatron-Core's distributed optimizer,
 * expert_data_parallel group) their state is sharded over EDP, the tp cp dp / (etp ep)
 * ranks holding the same expert slice (backend/groups.h); under HSDP over edp / replicas
 * of them (DP_GROUP_ESHARD, Megatron's intra-partial expert data-parallel group), as many
 * expert instances as dense replicas. */
static int zero_groups(struct dp_exec *ex)
{
    const struct dp_layout *l = &ex->l;
    const struct dp_dims *dm = &ex->dm;
    ex->zsplit = l->zero >= 1 && ex->m->experts > 0 && dm->esplit;
    ex->nzk = ex->zsplit ? 2 : 1;
    ex->zk[0] = (struct dp_zkind){DP_GROUP_SHARD, ex->sg, ex->sg_rank, 0, 0};
    const int edp = dm->edp > 0 ? dm->edp : 1; /* 0 for a dense model */
    const int esh = ex->repl > 1 && edp % ex->repl == 0 ? edp / ex->repl : edp;
    ex->zk[1] = (struct dp_zkind){DP_GROUP_ESHARD, esh, dm->edp_rank % esh, 0, 0};
    ex->erepl_rank = ex->zsplit ? dm->edp_rank / esh : ex->repl_rank;
    size_t nz[2] = {0, 0};
    free(ex->zr);
    ex->nzr = 0;
    ex->zr = calloc((size_t)(ex->nsegs ? ex->nsegs : 1), sizeof *ex->zr);
    if (!ex->zr)
        return dp_err_set(ex->err, DP_ENOMEM, "out of memory");
    for (int i = 0; i < ex->nsegs; i++) {
        struct dp_seg *sg = &ex->segs[i];
        size_t n = (size_t)(sg->t.rows * sg->t.cols);
        sg->zk = ex->zsplit && sg->t.expert >= 0;
        sg->z = nz[sg->zk];
        nz[sg->zk] += n;
        struct dp_zrun *r = ex->nzr ? &ex->zr[ex->nzr - 1] : NULL;
        if (r && r->k == sg->zk && r->hi == sg->off)
            r->hi += n;
        else
            ex->zr[ex->nzr++] = (struct dp_zrun){sg->off, sg->off + n, sg->z, sg->zk};
    }
    for (int k = 0; k < ex->nzk; k++) {
        struct dp_zkind *z = &ex->zk[k];
        if (z->n < 1)
            z->n = 1;
        z->S = (nz[k] + (size_t)z->n - 1) / (size_t)z->n;
    }
    ex->zk[1].base = ex->zk[0].S;
    return 0;
}

int dp__shard_buckets(struct dp_exec *ex)
{
    const struct dp_layout *l = &ex->l;
    /* The shards span the dp x cp ranks (Megatron's distributed optimizer shards over the
     * data-parallel group with CP), in the order q = cp_rank + cp dp_rank; cp = 1: dp. */
    const int cp = l->cp > 1 ? l->cp : 1, ndp = l->dp * cp, q = ex->c.cp_rank + cp * ex->c.dp_rank;
    ex->sg = l->zero >= 1 ? dp_layout_shard(l) : 1;
    if (ex->sg < 1 || ndp % ex->sg)
        ex->sg = ndp;
    ex->sg_rank = q % ex->sg;
    ex->repl = ndp / ex->sg;
    ex->repl_rank = q / ex->sg;
    int nl = ex->nlayers;
    ex->lay_lo = calloc((size_t)(nl ? nl : 1), sizeof *ex->lay_lo);
    ex->lay_hi = calloc((size_t)(nl ? nl : 1), sizeof *ex->lay_hi);
    const int ne = ex->dm.edp > 0 ? ex->dm.edp : 1; /* the expert shard group: at most EDP */
    ex->cnt = calloc((size_t)(ex->sg > ne ? ex->sg : ne), sizeof *ex->cnt);
    ex->pf_layer = -1;
    if (!ex->lay_lo || !ex->lay_hi || !ex->cnt)
        return dp_err_set(ex->err, DP_ENOMEM, "out of memory");
    for (int i = 0; i < nl; i++)
        ex->lay_lo[i] = SIZE_MAX;
    for (int k = 0; k < ex->nsegs; k++) {
        const struct dp_seg *sg = &ex->segs[k];
        if (sg->t.layer < 0)
            continue;
        int i = dp__local_layer(ex, sg->t.layer);
        if (i < 0)
            return dp_err_set(ex->err, DP_ERUNTIME, "internal: layer %d is not on this stage",
                              sg->t.layer);
        size_t hi = sg->off + (size_t)(sg->t.rows * sg->t.cols);
        ex->lay_lo[i] = sg->off < ex->lay_lo[i] ? sg->off : ex->lay_lo[i];
        ex->lay_hi[i] = hi > ex->lay_hi[i] ? hi : ex->lay_hi[i];
    }
    ex->edge_lo = nl ? ex->lay_lo[0] : ex->nparams;
    ex->edge_hi = nl ? ex->lay_hi[nl - 1] : ex->nparams;
    ex->win_n = 0;
    size_t total = 0;
    for (int i = 0; i < nl; i++) {
        /* The layers must tile [edge_lo, edge_hi) in order (ckpt's table is layer-major). */
        if (ex->lay_lo[i] == SIZE_MAX || (i && ex->lay_lo[i] != ex->lay_hi[i - 1]))
            return dp_err_set(ex->err, DP_ERUNTIME,
                              "internal: layer %d's tensors are not contiguous in the flat buffer",
                              i);
        size_t n = ex->lay_hi[i] - ex->lay_lo[i];
        ex->win_n = n > ex->win_n ? n : ex->win_n;
        total += n;
    }
    if (total != ex->edge_hi - ex->edge_lo)
        return dp_err_set(ex->err, DP_ERUNTIME,
                          "internal: non-layer tensors between the stage's layers");
    ex->edge_n = ex->edge_lo + (ex->nparams - ex->edge_hi);
    return zero_groups(ex);
}

/* Elements of group k's packed [za, zb) in each of its shards (ex->cnt). */
void dp__shard_counts(struct dp_exec *ex, int k, size_t za, size_t zb)
{
    const struct dp_zkind *z = &ex->zk[k];
    for (int r = 0; r < z->n; r++) {
        size_t lo = (size_t)r * z->S, hi = lo + z->S;
        lo = lo > za ? lo : za;
        hi = hi < zb ? hi : zb;
        ex->cnt[r] = hi > lo ? (int)(hi - lo) : 0;
    }
}

/* The part of run r inside flat [a, b): flat [*ra, *rb), packed from *za; false if none. */
bool dp__zrun_part(const struct dp_zrun *r, size_t a, size_t b, size_t *ra, size_t *rb, size_t *za)
{
    *ra = a > r->lo ? a : r->lo;
    *rb = b < r->hi ? b : r->hi;
    *za = r->z + (*ra - r->lo);
    return *ra < *rb;
}

/* Where packed element zl of group k sits in this rank's shard (gred, pshard). */
size_t dp__shard_at(const struct dp_exec *ex, int k, size_t zl)
{
    const struct dp_zkind *z = &ex->zk[k];
    return z->base + zl - (size_t)z->rank * z->S;
}

/* Gradients of flat [a, b) in buf: summed over each group's shard group, this rank's part
 * added to its shard of gred. buf is scratch afterwards. */
static int reduce_range(struct dp_exec *ex, size_t a, size_t b, real *buf)
{
    for (int i = 0; i < ex->nzr; i++) {
        size_t ra, rb, za;
        if (!dp__zrun_part(&ex->zr[i], a, b, &ra, &rb, &za))
            continue;
        const int k = ex->zr[i].k;
        const struct dp_zkind *z = &ex->zk[k];
        dp__shard_counts(ex, k, za, za + (rb - ra));
        TRY(OPS->reduce_scatter_v(ex->be, z->g, buf + (ra - a), ex->cnt, ex->err));
        int n = ex->cnt[z->rank];
        if (n > 0) {
            size_t s0 = (size_t)z->rank * z->S, zl = za > s0 ? za : s0;
            OPS->add_inplace(ex->be, ex->gred + dp__shard_at(ex, k, zl), buf + (ra - a), n);
        }
    }
    return 0;
}

/* The parameters of flat [a, b) from every shard into buf; this rank's part copied from
 * pshard first (ZeRO-3) or, without pshard, already in place (ZeRO-1/2's params). */
static int gather_from(struct dp_exec *ex, size_t a, size_t b, real *buf, const real *src)
{
    for (int i = 0; i < ex->nzr; i++) {
        size_t ra, rb, za;
        if (!dp__zrun_part(&ex->zr[i], a, b, &ra, &rb, &za))
            continue;
        const int k = ex->zr[i].k;
        const struct dp_zkind *z = &ex->zk[k];
        dp__shard_counts(ex, k, za, za + (rb - ra));
        int n = ex->cnt[z->rank];
        if (n > 0 && src) {
            size_t s0 = (size_t)z->rank * z->S, zl = za > s0 ? za : s0;
            OPS->copy(ex->be, buf + (ra - a) + (zl - za), src + dp__shard_at(ex, k, zl),
                      (size_t)n * R);
        }
        TRY(OPS->allgather_v(ex->be, z->g, buf + (ra - a), ex->cnt, ex->err));
    }
    return 0;
}

static int gather_range(struct dp_exec *ex, size_t a, size_t b, real *buf)
{
    return gather_from(ex, a, b, buf, ex->pshard);
}

int dp__shard_state_full(struct dp_exec *ex, real **m, real **v)
{
    size_t bytes = (ex->nparams ? ex->nparams : 1) * R;
    real *fm = OPS->alloc(ex->be, bytes), *fv = OPS->alloc(ex->be, bytes);
    if (!fm || !fv) {
        if (fm)
            OPS->free(ex->be, fm);
        if (fv)
            OPS->free(ex->be, fv);
        return dp_err_set(ex->err, DP_ENOMEM,
                          "rank %d: cannot allocate %.1f MiB to gather the optimizer state",
                          ex->rank, 2.0 * (double)bytes / 1048576.0);
    }
    int rc = gather_from(ex, 0, ex->nparams, fm, *m);
    if (!rc)
        rc = gather_from(ex, 0, ex->nparams, fv, *v);
    if (rc) {
        OPS->free(ex->be, fm);
        OPS->free(ex->be, fv);
        return rc;
    }
    *m = fm;
    *v = fv;
    return 0;
}

int dp__shard_gather_params(struct dp_exec *ex)
{
    return gather_range(ex, 0, ex->nparams, ex->params);
}

int dp__shard_reduce_part(struct dp_exec *ex, size_t a, size_t b)
{
    return reduce_range(ex, a, b, ex->grads + a);
}

int dp__shard_reduce_flat(struct dp_exec *ex)
{
    OPS->zero(ex->be, ex->gred, ex->shard * R);
    return reduce_range(ex, 0, ex->nparams, ex->grads);
}

int dp__shard_step_begin(struct dp_exec *ex)
{
    if (ex->l.zero < 2)
        return 0;
    OPS->zero(ex->be, ex->gred, ex->shard * R);
    OPS->zero(ex->be, ex->gedge, ex->edge_n * R);
    if (ex->l.zero < 3)
        return 0;
    dp__beat("parameter all-gather");
    TRY(gather_range(ex, 0, ex->edge_lo, ex->pedge));
    return gather_range(ex, ex->edge_hi, ex->nparams, ex->pedge + ex->edge_lo);
}

/* ZeRO-3: wait for the prefetch in flight (if any); with `use` its window becomes the
 * current one. */
static int prefetch_wait(struct dp_exec *ex, bool use)
{
    if (ex->pf_layer < 0)
        return 0;
    ex->pf_layer = -1;
    TRY(OPS->allgather_v_wait(ex->be, ex->err));
    if (use) {
        real *t = ex->pwin;
        ex->pwin = ex->pwin2;
        ex->pwin2 = t;
    }
    return 0;
}

/* ZeRO-3: layer i's parameters whole in pwin: the prefetched window, or gathered now. */
static int layer_gather(struct dp_exec *ex, int i)
{
    ex->win_lo = ex->lay_lo[i];
    if (ex->pf_layer == i)
        return prefetch_wait(ex, true);
    TRY(prefetch_wait(ex, false)); /* another layer's (not in the schedule's order) */
    return gather_range(ex, ex->lay_lo[i], ex->lay_hi[i], ex->pwin);
}

int dp__shard_prefetch(struct dp_exec *ex, int i)
{
    /* Two parameter groups: a layer is several gathers, done when it runs (no prefetch). */
    if (ex->l.zero < 3 || i < 0 || ex->params || !ex->pwin2 || ex->zsplit)
        return 0;
    TRY(prefetch_wait(ex, false));
    size_t a = ex->lay_lo[i], b = ex->lay_hi[i];
    dp__shard_counts(ex, 0, a, b); /* one group: packed order is flat order */
    int n = ex->cnt[ex->sg_rank];
    if (n > 0) {
        size_t lo = a > ex->shard_off ? a : ex->shard_off;
        OPS->copy(ex->be, ex->pwin2 + (lo - a), ex->pshard + (lo - ex->shard_off), (size_t)n * R);
    }
    TRY(OPS->allgather_v_start(ex->be, DP_GROUP_SHARD, ex->pwin2, ex->cnt, ex->err));
    ex->pf_layer = i;
    return 0;
}

int dp__shard_layer_fwd(struct dp_exec *ex, int i)
{
    if (ex->l.zero < 3)
        return 0;
    return layer_gather(ex, i);
}

int dp__shard_layer_bwd_begin(struct dp_exec *ex, int i)
{
    if (ex->l.zero < 2)
        return 0;
    ex->win_lo = ex->lay_lo[i];
    OPS->zero(ex->be, ex->gwin, (ex->lay_hi[i] - ex->lay_lo[i]) * R);
    if (ex->l.zero < 3)
        return 0;
    return layer_gather(ex, i);
}

/* Sequence parallel: replicated tensors of flat [a, b) saw only this rank's tokens
 * (Megatron finalize_model_grads); their gradients are summed over TP first. */
int dp__tp_partial(struct dp_exec *ex, size_t a, size_t b)
{
    for (int k = 0; k < ex->nsegs; k++) {
        const struct dp_seg *sg = &ex->segs[k];
        if (sg->tp_partial && sg->off >= a && sg->off < b)
            TRY(OPS->allreduce(ex->be, DP_GROUP_TP, dp__grad(ex, sg->off), sg->t.rows * sg->t.cols,
                               DP_OP_SUM, ex->err));
    }
    return 0;
}

int dp__shard_layer_bwd_end(struct dp_exec *ex, int i)
{
    if (ex->l.zero < 2)
        return 0;
    dp__beat("gradient reduce-scatter");
    TRY(dp__tp_partial(ex, ex->lay_lo[i], ex->lay_hi[i]));
    return reduce_range(ex, ex->lay_lo[i], ex->lay_hi[i], ex->gwin);
}

int dp__shard_step_reduce(struct dp_exec *ex)
{
    if (ex->l.zero >= 2) {
        TRY(dp__tp_partial(ex, 0, ex->edge_lo));
        TRY(dp__tp_partial(ex, ex->edge_hi, ex->nparams));
        if (ex->m->tied_embeddings && dp__emb_pair(ex))
            TRY(OPS->allreduce(ex->be, DP_GROUP_EMB, dp__grad(ex, ex->first ? ex->wte : ex->head),
                               ex->dm.Vl * ex->dm.h, DP_OP_SUM, ex->err));
        TRY(reduce_range(ex, 0, ex->edge_lo, ex->gedge));
        TRY(reduce_range(ex, ex->edge_hi, ex->nparams, ex->gedge + ex->edge_lo));
    }
    /* HSDP: the replicas of a shard hold partial sums over their own shard group; with two
     * groups the dense shard's over DP_GROUP_REPL, the expert shard's over DP_GROUP_EREPL. */
    if (ex->l.zero >= 1 && ex->repl > 1 && !ex->zsplit)
        TRY(OPS->allreduce(ex->be, DP_GROUP_REPL, ex->gred, (int64_t)ex->shard, DP_OP_SUM,
                           ex->err));
    if (ex->l.zero >= 1 && ex->repl > 1 && ex->zsplit) {
        TRY(OPS->allreduce(ex->be, DP_GROUP_REPL, ex->gred, (int64_t)ex->zk[0].S, DP_OP_SUM,
                           ex->err));
        TRY(OPS->allreduce(ex->be, DP_GROUP_EREPL, ex->gred + ex->zk[1].base, (int64_t)ex->zk[1].S,
                           DP_OP_SUM, ex->err));
    }
    return 0;
}

void dp__shard_init(struct dp_exec *ex)
{
    int64_t maxc = 1;
    for (int k = 0; k < ex->nsegs; k++)
        maxc = ex->segs[k].t.cols > maxc ? ex->segs[k].t.cols : maxc;
    real *row = OPS->alloc(ex->be, (size_t)maxc * R); /* one row: partial rows at the ends */
    for (int k = 0; k < ex->nsegs && row; k++) {
        const struct dp_seg *sg = &ex->segs[k];
        size_t lo, hi;
        if (!dp__seg_in_shard(ex, sg, &lo, &hi))
            continue;
        const int64_t cols = sg->t.cols;
        int64_t e = (int64_t)(lo - sg->off), end = (int64_t)(hi - sg->off);
        real *dst = ex->pshard + dp__shard_idx(ex, sg, lo);
        while (e < end) {
            int64_t r = e / cols, c = e % cols;
            if (c == 0 && end - e >= cols) { /* whole rows straight into the shard */
                int64_t nr = (end - e) / cols;
                dp__init_rows(ex, sg, r, r + nr, dst);
                dst += nr * cols;
                e += nr * cols;
                continue;
            }
            int64_t take = cols - c < end - e ? cols - c : end - e;
            OPS->zero(ex->be, row, (size_t)cols * R);
            dp__init_rows(ex, sg, r, r + 1, row);
            OPS->copy(ex->be, dst, row + c, (size_t)take * R);
            dst += take;
            e += take;
        }
    }
    if (row)
        OPS->free(ex->be, row);
}

int dp__shard_full(struct dp_exec *ex)
{
    if (ex->l.zero < 3 || ex->params)
        return 0;
    /* Not in the memory plan: a transient copy of the stage's parameters (4 bytes each)
     * while a checkpoint or the weights are written. */
    ex->params = OPS->alloc(ex->be, ex->nflat * R);
    if (!ex->params)
        return dp_err_set(ex->err, DP_ENOMEM,
                          "rank %d: cannot allocate %.1f MiB to gather the parameters", ex->rank,
                          (double)(ex->nflat * R) / 1048576.0);
    return gather_range(ex, 0, ex->nparams, ex->params);
}

void dp__shard_drop(struct dp_exec *ex)
{
    if (ex->l.zero < 3 || !ex->params)
        return;
    OPS->free(ex->be, ex->params);
    ex->params = NULL;
}

void dp__shard_visit_reset(struct dp_exec *ex)
{
    ex->win_layer = -1;
    ex->edge_whole = false;
}

int dp__shard_visit(struct dp_exec *ex, const struct dp_seg *sg)
{
    if (ex->l.zero < 3 || ex->params)
        return 0;
    if (dp__in_edge(ex, sg->off)) {
        if (ex->edge_whole)
            return 0;
        ex->edge_whole = true;
        TRY(gather_range(ex, 0, ex->edge_lo, ex->pedge));
        return gather_range(ex, ex->edge_hi, ex->nparams, ex->pedge + ex->edge_lo);
    }
    int i = dp__local_layer(ex, sg->t.layer);
    if (i == ex->win_layer)
        return 0;
    ex->win_layer = i;
    return dp__shard_layer_fwd(ex, i);
}
