/*
 * Mixture-of-experts MLP of one layer, forward and backward: router, token
 * dispatch to the experts over the expert-parallel group, the experts as a
 * loop of GEMMs, and the weighted combine, plus the shared experts.
 *
 * Conventions (one for every model; sources):
 *  - Router: Linear(h, E) without bias, replicated on every rank (Megatron-Core
 *    moe/router.py TopKRouter), softmax over all E logits, the top-K experts
 *    (ties: the lower index), their weights renormalised to sum 1. That is
 *    Mixtral's "softmax over the top-k logits" (Jiang et al. 2024, Eq. 1; HF
 *    modeling_mixtral.py, norm after topk) and Qwen-MoE's norm_topk_prob = true.
 *  - Auxiliary load-balancing loss (Fedus et al. 2022, Switch Transformer, Eq. 4;
 *    Megatron-Core moe_utils.switch_load_balancing_loss_func): per layer and micro-batch
 *    aux = c E sum_e f_e P_e, f_e the fraction of the N K choices that picked e (before
 *    any drop), P_e the mean router probability of e over the micro-batch's N tokens;
 *    f is a count (no gradient). c = DP_MOE_AUX_COEFF (Switch Transformer's 1e-2; the
 *    model files carry no coefficient). The step's loss is the mean token cross-entropy
 *    plus the mean over its micro-batches of the summed aux of the layers.
 *  - Capacity (layout moe_capacity > 0): each expert takes at most
 *    ceil(capacity N K / E) of a rank's micro-batch choices (Megatron-Core
 *    moe_utils.get_capacity), kept in token order and, within a token, by rank of the
 *    choice (Megatron's "position" drop policy); a dropped choice adds nothing and its
 *    weight is not renormalised away. moe_capacity 0: dropless.
 *  - Expert parallelism: expert e lives on EP rank e / (E / ep); a rank's kept choices
 *    are grouped by expert (so by destination), sent with one all-to-all over the EP
 *    group, run there per (source rank, local expert) chunk, and returned by a second
 *    all-to-all in the same order (Megatron-Core token_dispatcher.py, MoEAlltoAll
 *    dispatcher: permute, all-to-all, sort by expert, experts, and back).
 *  - Expert tensor parallelism and the folding (core dp_rank_ecoords, Megatron-Core's
 *    MoE parallel folding): a stage's tp x cp x dp ranks refold as etp x ep x edp; an
 *    expert is split over the etp ranks of its expert tensor group (etp divides tp, so
 *    consecutive TP ranks) like the dense MLP over TP. The ranks of an expert tensor
 *    group route the same tokens: with etp = tp the gathered micro-batch; with etp < tp
 *    (under SP) the group's etp slices of Nl rows, dm.Nb rows from row dm.b0 (Megatron's
 *    dispatcher gathers them over the expert tensor group after the all-to-all, the same
 *    rows). Each rank's partial outputs are combined into those rows of a zeroed [N, h]
 *    buffer, and the sum over TP after the combine (one all-reduce or, under SP,
 *    reduce-scatter, with the dense shared experts' partials) adds each group's etp
 *    partials once. The combine weights' gradient dot products are partial too and are
 *    all-reduced over the expert tensor group (K values per token).
 *  - Context parallelism: each CP rank routes and dispatches its own T = seq_len / cp
 *    rows of every sequence; the auxiliary loss sees the whole micro-batch: its counts
 *    are summed over the CP ring (and over TP divided by etp where etp < tp) and its N is
 *    the micro-batch's cp N tokens. An expert's replicas are the expert-data-parallel
 *    ranks of the folding (they take in the CP ranks), whose gradients are summed over
 *    DP_GROUP_EDP (schedule.c). Dropless only where a rank routes part of a micro-batch
 *    (cp > 1, etp < tp): the capacity's token-order drop policy is over the whole
 *    micro-batch, which no rank holds (run.c refuses it).
 *
 * The routing decisions (counts, rows) are read back to the host once per layer and
 * micro-batch, as Megatron reads tokens_per_expert for its grouped GEMM.
 */
#include "internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define NONE SIZE_MAX

/* The host side of one layer's routing, reused for every layer (moe_host). */
struct moe_host {
    int32_t *ridx, *rrow, *rtok; /* [N K], [N K], [R] */
    int32_t *kept, *chosen;      /* [E], [E] */
    int *scnt, *rcnt;            /* [ep] rows to / from each EP rank (times h by callers) */
    int *sel, *rel;              /* [ep] elements */
    int32_t *chunk;              /* [ep El] rows received per (source, local expert) */
    int32_t *ec;                 /* [2 E + ep El] staging of the kept counts */
    real *rw, *rwt, *probs;      /* [N K], [R], [N E] */
    real *cnt_r;                 /* [2 ep El] counts as reals for the exchange */
    double *gaux;                /* [E] the chosen counts' CP all-reduce */
};

static int host_get(struct dp_exec *ex, struct moe_host **out)
{
    const struct dp_dims *dm = &ex->dm;
    if (!ex->moe_host) {
        const int64_t NK = dm->Nb * dm->K, E = dm->E, ep = ex->l.ep, El = dm->El;
        size_t bytes = sizeof(struct moe_host) + (size_t)(2 * NK + dm->R + 4 * E + ep * El) * 4 +
                       (size_t)(4 * ep + ep * El) * sizeof(int) +
                       (size_t)(NK + dm->R + dm->Nb * E + 2 * ep * El) * sizeof(real) +
                       (size_t)E * sizeof(double) + 64;
        char *p = calloc(1, bytes);
        if (!p)
            return dp_err_set(ex->err, DP_ENOMEM, "out of memory");
        struct moe_host *h = (struct moe_host *)p;
        char *at = p + sizeof *h;
#define TAKE(field, n, T)                                                                          \
    do {                                                                                           \
        at = (char *)(((uintptr_t)at + 7) & ~(uintptr_t)7);                                        \
        h->field = (T *)at;                                                                        \
        at += (size_t)(n) * sizeof(T);                                                             \
    } while (0)
        TAKE(gaux, E, double);
        TAKE(rw, NK, real);
        TAKE(rwt, dm->R, real);
        TAKE(probs, dm->Nb * E, real);
        TAKE(cnt_r, 2 * ep * El, real);
        TAKE(ridx, NK, int32_t);
        TAKE(rrow, NK, int32_t);
        TAKE(rtok, dm->R, int32_t);
        TAKE(kept, E, int32_t);
        TAKE(chosen, E, int32_t);
        TAKE(scnt, ep, int);
        TAKE(rcnt, ep, int);
        TAKE(sel, ep, int);
        TAKE(rel, ep, int);
        TAKE(chunk, ep * El, int32_t);
        TAKE(ec, 2 * E + ep * El, int32_t);
#undef TAKE
        ex->moe_host = p;
    }
    *out = ex->moe_host;
    return 0;
}

/* Rows sent to each EP rank (kept choices of its experts) and received from each. */
static void counts_of(const struct dp_exec *ex, struct moe_host *h, int32_t *total_in)
{
    const struct dp_dims *dm = &ex->dm;
    const int ep = ex->l.ep, El = dm->El;
    int32_t in = 0;
    for (int r = 0; r < ep; r++) {
        int s = 0, g = 0;
        for (int j = 0; j < El; j++) {
            s += h->kept[r * El + j];
            g += h->chunk[r * El + j];
        }
        h->scnt[r] = s;
        h->rcnt[r] = g;
        h->sel[r] = s * (int)dm->h;
        h->rel[r] = g * (int)dm->h;
        in += g;
    }
    *total_in = in;
}

/* After router_topk: the host plan (capacity, rows grouped by expert), uploaded to the
 * kept set; the chunk counts exchanged over EP. */
static int route(struct dp_exec *ex, struct dp_act *A, struct moe_host *h, int64_t *rows)
{
    const struct dp_dims *dm = &ex->dm;
    const int E = dm->E, K = dm->K, ep = ex->l.ep, El = dm->El;
    const int64_t N = dm->Nb, NK = N * K;
    OPS->download(ex->be, h->ridx, A->ridx, (size_t)NK * sizeof(int32_t));
    OPS->download(ex->be, h->rw, A->rw, (size_t)NK * sizeof(real));
    if (ex->be->prices_only) /* balanced: choice k of token n to expert (n K + k) mod E */
        for (int64_t c = 0; c < NK; c++)
            h->ridx[c] = (int32_t)(c % E);
    memset(h->kept, 0, (size_t)E * sizeof(int32_t));
    memset(h->chosen, 0, (size_t)E * sizeof(int32_t));
    for (int64_t c = 0; c < NK; c++) {
        int e = h->ridx[c];
        h->chosen[e]++;
        if (dm->cap == 0 || h->kept[e] < dm->cap) {
            h->rrow[c] = h->kept[e]++; /* position within e; made global below */
        } else {
            h->rrow[c] = -1;
        }
    }
    /* CP, etp < tp: the auxiliary loss's f_e counts the whole micro-batch's choices,
     * spread over the CP ring and the TP group's expert tensor groups (Megatron-Core
     * router.py sums tokens_per_expert over its tp-cp "sequence partition group"); the
     * etp ranks of an expert tensor group route the same tokens, so the TP sum counts each
     * choice etp times. The kept counts stay local (dropless: every choice is kept, these
     * layouts run no capacity). */
    if (dm->cp > 1 || dm->etp < dm->tp) {
        for (int e = 0; e < E; e++)
            h->gaux[e] = (double)h->chosen[e];
        if (dm->cp > 1)
            TRY(OPS->allreduce_host(ex->be, DP_GROUP_CP, h->gaux, E, DP_OP_SUM, ex->err));
        if (dm->etp < dm->tp)
            TRY(OPS->allreduce_host(ex->be, DP_GROUP_TP, h->gaux, E, DP_OP_SUM, ex->err));
        const double copies = dm->etp < dm->tp ? (double)dm->etp : 1.0;
        for (int e = 0; e < E; e++)
            h->chosen[e] = (int32_t)(h->gaux[e] / copies + 0.5);
    }
    int32_t off[1024 + 1];
    int32_t *o = E < 1024 ? off : malloc((size_t)(E + 1) * sizeof *o);
    if (!o)
        return dp_err_set(ex->err, DP_ENOMEM, "out of memory");
    o[0] = 0;
    for (int e = 0; e < E; e++)
        o[e + 1] = o[e] + h->kept[e];
    for (int64_t c = 0; c < NK; c++)
        if (h->rrow[c] >= 0) {
            int32_t r = o[h->ridx[c]] + h->rrow[c];
            h->rrow[c] = r;
            h->rtok[r] = (int32_t)(c / K);
            h->rwt[r] = h->rw[c];
        }
    *rows = o[E];
    if (o != off)
        free(o);
    OPS->upload(ex->be, A->rrow, h->rrow, (size_t)NK * sizeof(int32_t));
    OPS->upload(ex->be, A->rtok, h->rtok, (size_t)*rows * sizeof(int32_t));
    OPS->upload(ex->be, A->rwt, h->rwt, (size_t)*rows * sizeof(real));
    /* Chunk counts: this rank's kept rows per expert to the expert's owner; from each
     * source its rows for every local expert. */
    for (int e = 0; e < E; e++)
        h->cnt_r[e] = (real)h->kept[e];
    int *one = h->scnt, *onr = h->rcnt;
    for (int r = 0; r < ep; r++)
        one[r] = onr[r] = El;
    real *dev = ex->w.mdl; /* free in forward */
    OPS->upload(ex->be, dev, h->cnt_r, (size_t)E * sizeof(real));
    TRY(OPS->alltoall_v(ex->be, DP_GROUP_EP, dev, one, dev + E, onr, ex->err));
    OPS->download(ex->be, h->cnt_r + E, dev + E, (size_t)(ep * El) * sizeof(real));
    for (int i = 0; i < ep * El; i++) /* pricing: every source sends as this rank does */
        h->chunk[i] = ex->be->prices_only ? h->kept[dm->e0 + i % El] : (int32_t)h->cnt_r[E + i];
    /* Kept: kept per expert, chosen per expert, chunks received. */
    int32_t *ec = h->ec;
    memcpy(ec, h->kept, (size_t)E * sizeof(int32_t));
    memcpy(ec + E, h->chosen, (size_t)E * sizeof(int32_t));
    memcpy(ec + 2 * E, h->chunk, (size_t)(ep * El) * sizeof(int32_t));
    OPS->upload(ex->be, A->ecnt, ec, (size_t)(2 * E + ep * El) * sizeof(int32_t));
    return 0;
}

/* Back from the kept counts (backward, or a forward after route). */
static void counts_load(struct dp_exec *ex, const struct dp_act *A, struct moe_host *h)
{
    const struct dp_dims *dm = &ex->dm;
    const int E = dm->E, ep = ex->l.ep, El = dm->El;
    int32_t *ec = h->ec;
    OPS->download(ex->be, ec, A->ecnt, (size_t)(2 * E + ep * El) * sizeof(int32_t));
    memcpy(h->kept, ec, (size_t)E * sizeof(int32_t));
    memcpy(h->chosen, ec + E, (size_t)E * sizeof(int32_t));
    memcpy(h->chunk, ec + 2 * E, (size_t)(ep * El) * sizeof(int32_t));
}

static real *expert_w1(struct dp_exec *ex, const struct dp_layer_params *p, int j)
{
    return dp__param(ex, p->ew1) + (size_t)j * (size_t)(ex->dm.Fe1 * ex->dm.h);
}
static real *expert_w2(struct dp_exec *ex, const struct dp_layer_params *p, int j)
{
    return dp__param(ex, p->ew2) + (size_t)j * (size_t)(ex->dm.h * ex->dm.fe);
}
static real *expert_g1(struct dp_exec *ex, const struct dp_layer_params *p, int j)
{
    return dp__grad(ex, p->ew1) + (size_t)j * (size_t)(ex->dm.Fe1 * ex->dm.h);
}
static real *expert_g2(struct dp_exec *ex, const struct dp_layer_params *p, int j)
{
    return dp__grad(ex, p->ew2) + (size_t)j * (size_t)(ex->dm.h * ex->dm.fe);
}

int dp__moe_forward(struct dp_exec *ex, const struct dp_layer_params *p, struct dp_act *A,
                    const real *g2, real *out)
{
    const struct dp_dims *dm = &ex->dm;
    const struct dp_model *m = ex->m;
    struct dp_backend *be = ex->be;
    struct dp_work *w = &ex->w;
    const int N = (int)dm->N, h = (int)dm->h, E = dm->E, K = dm->K, El = dm->El;
    const int fe = (int)dm->fe, Fe1 = (int)dm->Fe1, ep = ex->l.ep, Nb = (int)dm->Nb;
    const real *gb = g2 + dm->b0 * dm->h; /* the routed tokens */
    struct moe_host *H;
    TRY(host_get(ex, &H));

    /* Router. */
    OPS->gemm(be, false, true, Nb, E, h, 1, gb, h, dp__param(ex, p->router), h, 0, A->rprobs, E);
    OPS->router_topk(be, A->rprobs, A->ridx, A->rw, dm->Nb, E, K);
    int64_t rows = 0;
    int32_t in = 0;
    TRY(route(ex, A, H, &rows));
    counts_of(ex, H, &in);
    if (in > dm->Rx)
        return dp_err_set(ex->err, DP_ERUNTIME,
                          "moe: %d rows routed to this rank's experts exceed the %lld planned",
                          (int)in, (long long)dm->Rx);

    /* Dispatch: the kept choices' token rows, grouped by expert, to the experts' ranks. */
    OPS->rows_gather(be, w->mdy, gb, A->rtok, NULL, rows, dm->h);
    TRY(OPS->alltoall_v(be, DP_GROUP_EP, w->mdy, H->sel, A->ein, H->rel, ex->err));

    /* Experts: one GEMM pair per (source rank, local expert) chunk. */
    int64_t r0 = 0;
    for (int s = 0; s < ep; s++)
        for (int j = 0; j < El; j++) {
            int n = H->chunk[s * El + j];
            if (n) {
                real *fc1 = A->efc1 + r0 * Fe1, *act = A->eact + r0 * fe;
                OPS->gemm(be, false, true, n, Fe1, h, 1, A->ein + r0 * h, h, expert_w1(ex, p, j), h,
                          0, fc1, Fe1);
                OPS->act_fwd(be, m->ffn, act, fc1, n, fe);
                OPS->gemm(be, false, true, n, h, fe, 1, act, fe, expert_w2(ex, p, j), fe, 0,
                          w->mx + r0 * h, h);
            }
            r0 += n;
        }
    /* Combine: the outputs back in this rank's grouped order. */
    TRY(OPS->alltoall_v(be, DP_GROUP_EP, w->mx, H->rel, A->eout, H->sel, ex->err));

    /* Shared experts: a dense MLP of the same tokens (before w->tmp, which may hold g2
     * under SP, is overwritten). */
    if (dm->sf > 0) {
        OPS->gemm(be, false, true, N, (int)dm->Sf1, h, 1, g2, h, dp__param(ex, p->sw1), h, 0,
                  A->sfc1, (int)dm->Sf1);
        OPS->act_fwd(be, m->ffn, A->sact, A->sfc1, dm->N, dm->sf);
    }
    if (!out)
        return 0; /* full recompute in backward: the kept set is complete */

    if (dm->sf > 0)
        OPS->gemm(be, false, true, N, h, (int)dm->sf, 1, A->sact, (int)dm->sf,
                  dp__param(ex, p->sw2), (int)dm->sf, 0, w->tmp, h);
    else
        OPS->zero(be, w->tmp, (size_t)(dm->N * dm->h) * sizeof(real));
    /* The routed experts' rows are partial over ETP and zero outside the routed block, so
     * that the sum over TP (dp__reduce_tokens) adds each block's etp partials once. */
    OPS->rows_scatter_add(be, w->tmp + dm->b0 * dm->h, A->eout, A->rtok, A->rwt, rows, dm->h);
    TRY(dp__reduce_tokens(ex, w->tmp));
    OPS->residual(be, out, A->x2, w->tmp, NULL, dm->Nl, dm->h);

    /* The auxiliary loss of this micro-batch and layer (its value; the gradient is
     * formed in backward from the kept counts and probabilities). Under CP the
     * micro-batch has Ng = cp N tokens and chosen[] is already summed over the ring;
     * each CP rank (and each expert tensor group of a TP group) adds its own tokens' share
     * of the P_e sums, so the shares add up to aux Ng in the step's world sum, which takes
     * one rank per expert tensor group (schedule.c; Megatron's per-rank partial aux loss). */
    OPS->download(be, H->probs, A->rprobs, (size_t)(dm->Nb * E) * sizeof(real));
    const double Ng = (double)(dm->N * dm->cp);
    double aux = 0;
    for (int e = 0; e < E; e++) {
        double P = 0;
        for (int64_t n = 0; n < dm->Nb; n++)
            P += H->probs[n * E + e];
        aux += ((double)H->chosen[e] / (Ng * K)) * (P / Ng);
    }
    aux *= DP_MOE_AUX_COEFF * (double)E;
    ex->aux_sum += aux * Ng;
    return 0;
}

int dp__moe_backward(struct dp_exec *ex, const struct dp_layer_params *p, struct dp_act *A)
{
    const struct dp_dims *dm = &ex->dm;
    const struct dp_model *m = ex->m;
    struct dp_backend *be = ex->be;
    struct dp_work *w = &ex->w;
    const int N = (int)dm->N, h = (int)dm->h, E = dm->E, K = dm->K, El = dm->El;
    const int fe = (int)dm->fe, Fe1 = (int)dm->Fe1, ep = ex->l.ep, Nb = (int)dm->Nb;
    int rc = 0;
    struct moe_host *H;
    TRY(host_get(ex, &H));
    counts_load(ex, A, H);
    int64_t rows = 0;
    for (int e = 0; e < E; e++)
        rows += H->kept[e];
    int32_t in = 0;
    counts_of(ex, H, &in);
    (void)in;
    real *dl = w->mdl, *dwr = w->mdl + dm->Nb * E, *gaux = dwr + dm->R;

    const real *dy = dp__gather_tokens(ex, w->dres, w->dgath, &rc);
    TRY(rc);
    const real *dyb = dy + dm->b0 * dm->h; /* the routed tokens' */
    /* Combine weights: dL/dw of row r = dy[token] . eout[r] (partial over ETP). */
    OPS->rows_dot(be, dwr, dyb, A->rtok, A->eout, rows, dm->h);
    if (dm->etp > 1)
        TRY(OPS->allreduce(be, DP_GROUP_ETP, dwr, rows, DP_OP_SUM, ex->err));
    /* Expert outputs' gradient, to the experts. */
    OPS->rows_gather(be, w->mdy, dyb, A->rtok, A->rwt, rows, dm->h);
    TRY(OPS->alltoall_v(be, DP_GROUP_EP, w->mdy, H->sel, w->mx, H->rel, ex->err));
    int64_t r0 = 0;
    for (int s = 0; s < ep; s++)
        for (int j = 0; j < El; j++) {
            int n = H->chunk[s * El + j];
            if (n) {
                real *dY = w->mx + r0 * h, *dact = w->mdact + r0 * fe;
                real *dfc1 = m->ffn == DP_FFN_GELU ? dact : w->mdfc1 + r0 * Fe1;
                OPS->gemm(be, false, false, n, fe, h, 1, dY, h, expert_w2(ex, p, j), fe, 0, dact,
                          fe);
                OPS->gemm(be, true, false, h, fe, n, 1, dY, h, A->eact + r0 * fe, fe, 1,
                          expert_g2(ex, p, j), fe);
                OPS->act_bwd(be, m->ffn, dfc1, NULL, dact, A->efc1 + r0 * Fe1, n, fe);
                OPS->gemm(be, true, false, Fe1, h, n, 1, dfc1, Fe1, A->ein + r0 * h, h, 1,
                          expert_g1(ex, p, j), h);
                /* The input gradient over the chunk's dY (no longer needed). */
                OPS->gemm(be, false, false, n, h, Fe1, 1, dfc1, Fe1, expert_w1(ex, p, j), h, 0, dY,
                          h);
            }
            r0 += n;
        }
    TRY(OPS->alltoall_v(be, DP_GROUP_EP, w->mx, H->rel, w->mdy, H->sel, ex->err));

    /* Shared experts into dtmp (or zero it), then the routed experts' input gradient. */
    const real *g2 = dp__gather_tokens(ex, A->ln2, w->tmp, &rc);
    TRY(rc);
    if (dm->sf > 0) {
        const int sf = (int)dm->sf, Sf1 = (int)dm->Sf1;
        real *sdfc1 = m->ffn == DP_FFN_GELU ? w->sdact : w->sdfc1;
        OPS->gemm(be, false, false, N, sf, h, 1, dy, h, dp__param(ex, p->sw2), sf, 0, w->sdact, sf);
        OPS->gemm(be, true, false, h, sf, N, 1, dy, h, A->sact, sf, 1, dp__grad(ex, p->sw2), sf);
        OPS->act_bwd(be, m->ffn, sdfc1, NULL, w->sdact, A->sfc1, dm->N, dm->sf);
        OPS->gemm(be, true, false, Sf1, h, N, 1, sdfc1, Sf1, g2, h, 1, dp__grad(ex, p->sw1), h);
        OPS->gemm(be, false, false, N, h, Sf1, 1, sdfc1, Sf1, dp__param(ex, p->sw1), h, 0, w->dtmp,
                  h);
    } else {
        OPS->zero(be, w->dtmp, (size_t)(dm->N * dm->h) * sizeof(real));
    }
    OPS->rows_scatter_add(be, w->dtmp + dm->b0 * dm->h, w->mdy, A->rtok, NULL, rows, dm->h);

    /* Router: the auxiliary loss's gradient w.r.t. P[n][e] is c E f_e / Ng times this
     * micro-batch's weight in the step's loss, Ng / (gbs T) (mean over micro-batches),
     * Ng = cp N its tokens and chosen[] its counts (summed over CP in route). The router
     * weight's gradient is then partial over CP, summed with DP's (DP_GROUP_DPCP). */
    const double Ng = (double)(dm->N * dm->cp);
    double scale = DP_MOE_AUX_COEFF * (double)E / Ng * (Ng / (double)ex->gbs_tokens);
    real *ga = (real *)H->probs; /* host staging */
    for (int e = 0; e < E; e++)
        ga[e] = (real)(scale * (double)H->chosen[e] / (Ng * K));
    OPS->upload(be, gaux, ga, (size_t)E * sizeof(real));
    OPS->router_bwd(be, dl, A->rprobs, A->rw, A->ridx, A->rrow, dwr, gaux, dm->Nb, E, K);
    /* This rank's own token rows within the routed block (under SP its Nl slice). With
     * etp < tp the block's router gradient is the same on its etp ranks: each adds its own
     * slice's part, summed over TP after the backward as the norms' (model.c tp_partial). */
    const int64_t own = dm->sp ? (dm->tp_rank % dm->etp) * dm->Nl : 0;
    if (dm->etp < dm->tp)
        OPS->gemm(be, true, false, E, h, (int)dm->Nl, 1, dl + own * E, E,
                  g2 + (dm->b0 + own) * dm->h, h, 1, dp__grad(ex, p->router), h);
    else
        OPS->gemm(be, true, false, E, h, Nb, 1, dl, E, g2 + dm->b0 * dm->h, h, 1,
                  dp__grad(ex, p->router), h);
    /* The experts' and shared part is partial over TP; the router's is whole for the
     * routed block on every rank of its expert tensor group, so it joins after the sum. */
    TRY(dp__reduce_tokens(ex, w->dtmp));
    OPS->gemm(be, false, false, Nb, h, E, 1, dl, E, dp__param(ex, p->router), h, 0, w->tmp, h);
    OPS->add_inplace(be, w->dtmp, w->tmp + own * dm->h, dm->Nl * dm->h);
    return 0;
}

void dp__moe_release(struct dp_exec *ex)
{
    free(ex->moe_host);
    ex->moe_host = NULL;
}
