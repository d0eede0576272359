/*
 * Data-parallel gradient buckets reduced while the backward runs (ZeRO-0 and
 * ZeRO-1): Megatron-Core's overlap_grad_reduce (megatron/core/distributed/
 * param_and_grad_buffer.py, distributed_data_parallel.py).
 *
 * The stage's layers are cut into buckets of consecutive layers in reverse
 * order (the order the backward produces them), each holding at least
 * `bucket` elements unless the model chunk ends first (Megatron's
 * bucket_size: max(40M, 1M x dp) parameters by default). A layer's gradients
 * are final after its backward of the last micro-batch: 1F1B and interleaved
 * 1F1B run each stage's (and each chunk's) backwards in micro-batch order, so
 * a bucket is started right after the backward of micro-batch M - 1 through
 * its lowest layer, non-blocking (backend.h allreduce_start): an all-reduce
 * over dp x cp (experts: over EDP) for ZeRO-0, a reduce-scatter into the
 * shard geometry of schedule.c for ZeRO-1 (this rank's piece then added into
 * gred, which ZeRO-1 keeps apart from the flat gradients when overlapping:
 * 1/dp of the gradients more). Under sequence parallelism a bucket's
 * replicated norms are summed over TP first, blocking, as reduce_grads does
 * for the whole buffer.
 *
 * What is not in a bucket, the stage's edge (embeddings before its first
 * layer, final norm and head after its last: the tied embedding's copies are
 * summed between the first and last stage, which the middle of 1F1B cannot
 * do), is reduced after the backward, blocking, and then every bucket is
 * waited for: the time spent there is the step's exposed DP communication
 * (dp_step_info.dp_exposed_s).
 *
 * Every rank of a DP group runs the same schedule, so each group's
 * collectives start in the same order everywhere (MPI-3 Sec. 5.12). The
 * reductions are the same sums as the blocking path's, in pieces: the
 * gradients match it to rounding (tests/executor: exec_equiv_ov_*).
 * ZeRO-2/3 reduce each layer as it is produced already (shard.c); this file
 * does not overlap those.
 */
#include "internal.h"

#include <stdlib.h>
#include <string.h>

#define R sizeof(real)

/* Megatron-Core DistributedDataParallelConfig.bucket_size's default: max(40000000,
 * 1000000 * dp_size) parameters. */
static int64_t default_bucket(const struct dp_exec *ex)
{
    int64_t ndp = (int64_t)ex->l.dp * (ex->l.cp > 1 ? ex->l.cp : 1);
    return ndp * 1000000 > 40000000 ? ndp * 1000000 : 40000000;
}

int dp_exec_check_overlap(const struct dp_layout *l, enum dp_overlap_mode mode, struct dp_err *err)
{
    if (mode == DP_OVERLAP_ON && l->zero >= 2)
        return dp_err_set(err, DP_EINFEASIBLE,
                          "--overlap-grad-reduce on: not with zero %d (its per-layer "
                          "reduce-scatter runs blocking after each layer); leave it off",
                          l->zero);
    return 0;
}

int dp__overlap_build(struct dp_exec *ex)
{
    const enum dp_overlap_mode mode = ex->o.overlap_grad_reduce;
    ex->ov = false;
    ex->nbk = 0;
    if (mode == DP_OVERLAP_OFF || (mode == DP_OVERLAP_PLAN && !ex->l.dp_overlap))
        return 0;
    TRY(dp_exec_check_overlap(&ex->l, mode, ex->err));
    if (ex->l.zero >= 2)
        return 0; /* the plan's overlap where the executor has none: blocking */
    /* No backend: the memory estimate (dp_exec_memory) of a CPU run, which has them. */
    const struct dp_backend_ops *ops = ex->be ? ex->be->ops : NULL;
    if (ops && (!ops->allreduce_start || !ops->reduce_scatter_v_start || !ops->req_wait)) {
        if (mode == DP_OVERLAP_ON)
            return dp_err_set(ex->err, DP_EINFEASIBLE,
                              "--overlap-grad-reduce on: the %s backend has no non-blocking "
                              "reductions; leave it off",
                              ops->name);
        return 0;
    }
    /* Nothing to reduce over data parallelism. */
    const int ndp = ex->l.dp * (ex->l.cp > 1 ? ex->l.cp : 1);
    if (ndp <= 1 && !(ex->dm.esplit && ex->dm.edp > 1))
        return 0;
    ex->ov_bucket = ex->o.bucket_elems > 0 ? ex->o.bucket_elems : default_bucket(ex);
    ex->ov_early = getenv("DPLAN_TEST_BUCKET_EARLY") != NULL; /* the tests' negative case */
    free(ex->bk);
    ex->bk = calloc((size_t)(ex->nlayers ? ex->nlayers : 1), sizeof *ex->bk);
    if (!ex->bk)
        return dp_err_set(ex->err, DP_ENOMEM, "out of memory");
    /* Chunks from the last: the order of the last micro-batch's backward. */
    for (int c = ex->nch - 1; c >= 0; c--) {
        struct dp__bucket *b = NULL;
        for (int i = ex->ch_l0[c] + ex->ch_n[c] - 1; i >= ex->ch_l0[c]; i--) {
            if (!b || (int64_t)(b->hi - b->lo) >= ex->ov_bucket) {
                b = &ex->bk[ex->nbk++];
                b->hi = ex->lay_hi[i];
            }
            b->lo = ex->lay_lo[i];
            b->layer = i;
        }
    }
    ex->ov = true;
    return 0;
}

void dp__overlap_release(struct dp_exec *ex)
{
    free(ex->bk);
    ex->bk = NULL;
    ex->nbk = 0;
}

/* Complete in-flight request q; ZeRO-1 adds this rank's piece into gred. */
static int finish(struct dp_exec *ex, const struct dp__ovreq *q)
{
    TRY(OPS->req_wait(ex->be, q->req, ex->err));
    if (q->n > 0)
        OPS->add_inplace(ex->be, ex->gred + q->gat, ex->grads + q->at, q->n);
    return 0;
}

static int post(struct dp_exec *ex, const struct dp__ovreq *q)
{
    if (ex->noq == DP_MAX_REQS) { /* the backend's limit: the oldest completes first */
        TRY(finish(ex, &ex->oq[0]));
        memmove(ex->oq, ex->oq + 1, (DP_MAX_REQS - 1) * sizeof *ex->oq);
        ex->noq--;
    }
    ex->oq[ex->noq++] = *q;
    return 0;
}

/*
 * ZeRO-0: the next run of flat [a, b) from segment *i on that reduces over one group:
 * experts over EDP where they reduce apart (dm.esplit), the rest over dp x cp, as
 * reduce_grads. False when none is left.
 */
static bool next_run(const struct dp_exec *ex, int *i, size_t a, size_t b, size_t *lo, size_t *hi,
                     enum dp_group *g)
{
    while (*i < ex->nsegs) {
        const bool expert = ex->dm.esplit && ex->segs[*i].t.expert >= 0;
        *lo = ex->segs[*i].off;
        *hi = *lo;
        for (; *i < ex->nsegs && (ex->dm.esplit && ex->segs[*i].t.expert >= 0) == expert; (*i)++)
            *hi = ex->segs[*i].off + (size_t)(ex->segs[*i].t.rows * ex->segs[*i].t.cols);
        *lo = *lo > a ? *lo : a;
        *hi = *hi < b ? *hi : b;
        *g = expert ? DP_GROUP_EDP : DP_GROUP_DPCP;
        if (*lo < *hi)
            return true;
    }
    return false;
}

/* Start flat [a, b)'s DP reduction, one request per run of one group. */
static int start_range(struct dp_exec *ex, size_t a, size_t b)
{
    if (ex->l.zero == 0) {
        size_t lo, hi;
        enum dp_group g;
        for (int i = 0; next_run(ex, &i, a, b, &lo, &hi, &g);) {
            struct dp__ovreq q = {.req = -1};
            TRY(OPS->allreduce_start(ex->be, g, ex->grads + lo, (int64_t)(hi - lo), DP_OP_SUM,
                                     &q.req, ex->err));
            TRY(post(ex, &q));
        }
        return 0;
    }
    /* ZeRO-1: as shard.c's reduce_range, per run of one ZeRO parameter group. */
    for (int i = 0; i < ex->nzr; i++) {
        size_t ra, rb, za;
        if (!dp__zrun_part(&ex->zr[i], a, b, &ra, &rb, &za))
            continue;
        const int k = ex->zr[i].k;
        const struct dp_zkind *z = &ex->zk[k];
        struct dp__ovreq q = {.req = -1};
        dp__shard_counts(ex, k, za, za + (rb - ra));
        TRY(OPS->reduce_scatter_v_start(ex->be, z->g, ex->grads + ra, ex->cnt, &q.req, ex->err));
        q.n = ex->cnt[z->rank];
        if (q.n > 0) {
            size_t s0 = (size_t)z->rank * z->S, zl = za > s0 ? za : s0;
            q.at = ra;
            q.gat = dp__shard_at(ex, k, zl);
        }
        TRY(post(ex, &q));
    }
    return 0;
}

int dp__overlap_layer_bwd_end(struct dp_exec *ex, const struct dp_slot *s, int i)
{
    if (!ex->ov || s->mb != (ex->ov_early ? 0 : ex->M - 1))
        return 0;
    for (int k = 0; k < ex->nbk; k++) {
        const struct dp__bucket *b = &ex->bk[k];
        if (b->layer != i)
            continue;
        dp__beat("gradient bucket");
        TRY(dp__tp_partial(ex, b->lo, b->hi));
        TRY(start_range(ex, b->lo, b->hi));
    }
    return 0;
}

int dp__overlap_step_begin(struct dp_exec *ex)
{
    ex->noq = 0;
    if (ex->ov && ex->l.zero == 1)
        OPS->zero(ex->be, ex->gred, ex->shard * R);
    return 0;
}

/* The edge part [a, b) after the backward, blocking: as reduce_grads, on the range. */
static int edge_reduce(struct dp_exec *ex, size_t a, size_t b)
{
    if (a >= b)
        return 0;
    TRY(dp__tp_partial(ex, a, b));
    if (ex->l.zero == 1)
        return dp__shard_reduce_part(ex, a, b);
    size_t lo, hi;
    enum dp_group g;
    for (int i = 0; next_run(ex, &i, a, b, &lo, &hi, &g);)
        TRY(OPS->allreduce(ex->be, g, ex->grads + lo, (int64_t)(hi - lo), DP_OP_SUM, ex->err));
    return 0;
}

int dp__overlap_reduce(struct dp_exec *ex)
{
    /* Tied embeddings over a pipeline (Megatron _allreduce_word_embedding_grads), as
     * reduce_grads: the edge's copies summed between first and last stage first. */
    if (ex->m->tied_embeddings && dp__emb_pair(ex)) {
        size_t off = ex->first ? ex->wte : ex->head;
        TRY(OPS->allreduce(ex->be, DP_GROUP_EMB, ex->grads + off, ex->dm.Vl * ex->dm.h, DP_OP_SUM,
                           ex->err));
    }
    TRY(edge_reduce(ex, 0, ex->edge_lo));
    TRY(edge_reduce(ex, ex->edge_hi, ex->nparams));
    for (int i = 0; i < ex->noq; i++)
        TRY(finish(ex, &ex->oq[i]));
    ex->noq = 0;
    return ex->l.zero == 1 ? dp__shard_step_reduce(ex) : 0; /* HSDP: over the replicas */
}
