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
 *  - DeepSeek-V3 routing (model moe.router_bias; DeepSeek-V3 report Sec. 2.1.2, HF
 *    modeling_deepseek_v3 noaux_tc, Megatron-Core moe_router_score_function sigmoid with
 *    moe_router_enable_expert_bias, which Megatron allows with sigmoid scores only):
 *    scores s = sigmoid(logits), the top-K of s + b chosen (b the per-expert bias
 *    h.L.mlp.router.bias), their s renormalised to sum 1 as the weights, so b steers
 *    the choice and never the weights. b has no gradient: after each optimizer step
 *    b_e += gamma sign(mean_i c_i - c_e), c_e the choices expert e kept in the step
 *    over the DP x CP ranks, gamma = DP_MOE_BIAS_RATE (dp__moe_bias_update). The
 *    auxiliary loss below stays (Megatron's aux_loss type with expert bias), its P_e
 *    from the per-token normalised sigmoid scores s_e / sum_i s_i as Megatron's
 *    compute_routing_scores_for_aux_loss; DeepSeek-V3's own small sequence-wise loss,
 *    its routed_scaling_factor and its group-limited (node) routing are not modelled
 *    (the model files carry none of them).
 *  - Qwen2-MoE's shared-expert gate (model moe.shared_gate, HF modeling_qwen2_moe):
 *    the shared experts' output times sigmoid(x . w_g) per token (gate_forward).
 *  - Expert biases (model mlp_bias): each routed expert's fc1 and fc2 biases as the
 *    dense MLP's (Megatron-Core SequentialMLP/GroupedMLP with add_bias_linear); fc2's is
 *    added on TP rank 0 only, since the expert outputs are summed over TP after the
 *    combine.
 *  - Auxiliary load-balancing loss (Fedus et al. 2022, Switch Transformer, Eq. 4;
 *    Megatron-Core moe_utils.switch_load_balancing_loss_func): per layer and micro-batch
 *    aux = c E sum_e f_e P_e, f_e the fraction of the N K choices that picked e (before
 *    any drop), P_e the mean router probability of e over the micro-batch's N tokens;
 *    f is a count (no gradient). c = DP_MOE_AUX_COEFF (Switch Transformer's 1e-2; the
 *    model files carry no coefficient). The step's loss is the mean token cross-entropy
 *    plus the mean over its micro-batches of the summed aux of the layers.
 *  - Capacity (layout moe_capacity > 0): each expert takes at most
 *    ceil(capacity N K / E) of the micro-batch's N K choices (Megatron-Core
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
 *    DP_GROUP_EDP (schedule.c).
 *    With capacity and cp > 1 the drops are decided over the whole micro-batch too: the
 *    CP ranks' top-k choices are all-gathered (N K indices each) and walked in global
 *    token order (cp_keep), each expert taking ceil(capacity cp N K / E), so a layout
 *    with cp > 1 drops exactly the choices one process would. Megatron-Core differs
 *    here: its router sees only the rank's own sequence chunks, and get_capacity is
 *    applied to the local tokens (capacity ceil(capacity N K / E) per CP rank, position
 *    order within the rank's chunks), so its drops change with cp. We keep the
 *    one-process semantics (the equivalence tests hold the cp runs to it) at the price
 *    of one all-gather of cp N K indices per layer and micro-batch. With etp < tp
 *    (a rank routes part of the TP group's tokens) capacity is refused (run.c).
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
    real *gsel;                  /* [cp N K] every CP rank's choices (capacity under CP) */
    int32_t *gkept;              /* [E] kept so far over the whole micro-batch */
    double *tpe;                 /* [layers E] the step's kept choices per expert (router bias) */
    int32_t *iota;               /* [N] 0 .. N - 1 (shared gate) */
};

static int host_get(struct dp_exec *ex, struct moe_host **out)
{
    const struct dp_dims *dm = &ex->dm;
    if (!ex->moe_host) {
        const int64_t NK = dm->Nb * dm->K, E = dm->E, ep = ex->l.ep, El = dm->El;
        const int64_t G = dm->cap > 0 && dm->cp > 1 ? dm->cp * NK : 0;
        const int64_t TPE = ex->m->moe_router_bias ? (int64_t)ex->nlayers * E : 0;
        const int64_t IO = ex->m->moe_shared_gate ? dm->N : 0;
        const int64_t PR = (dm->N > dm->Nb ? dm->N : dm->Nb) * (E > 2 ? E : 2); /* + gate's 2 N */
        size_t bytes = sizeof(struct moe_host) +
                       (size_t)(2 * NK + dm->R + 5 * E + ep * El + IO) * 4 +
                       (size_t)(4 * ep + ep * El) * sizeof(int) +
                       (size_t)(NK + dm->R + PR + 2 * ep * El + G) * sizeof(real) +
                       (size_t)(E + TPE) * sizeof(double) + 96;
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
        TAKE(tpe, TPE, double);
        TAKE(rw, NK, real);
        TAKE(rwt, dm->R, real);
        TAKE(probs, PR, real);
        TAKE(cnt_r, 2 * ep * El, real);
        TAKE(gsel, G, real);
        TAKE(gkept, E, int32_t);
        TAKE(iota, IO, int32_t);
        for (int64_t n = 0; n < IO; n++)
            h->iota[n] = (int32_t)n;
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

/* Capacity under CP: every CP rank's top-k choices (the expert indices, exact as reals),
 * gathered over the ring into h->gsel, are walked in the global token order of the
 * micro-batch (sequence, then position; cp.c's chunks i and 2 cp - 1 - i), so each expert
 * keeps the first cap choices of the whole micro-batch as in one process; this rank
 * marks its own. chosen[] gets the whole micro-batch's counts (the auxiliary loss). */
static int cp_keep(struct dp_exec *ex, struct moe_host *h)
{
    const struct dp_dims *dm = &ex->dm;
    const int E = dm->E, K = dm->K, cp = dm->cp, me = dm->cp_rank;
    const int64_t NK = dm->N * K, C = dm->C, T = dm->T, Tg = dm->Tg;
    real *mine = h->gsel + (int64_t)me * NK, *dev = ex->w.mdl; /* free in forward */
    for (int64_t c = 0; c < NK; c++)
        mine[c] = (real)h->ridx[c];
    OPS->upload(ex->be, dev + (int64_t)me * NK, mine, (size_t)NK * sizeof(real));
    TRY(OPS->allgather(ex->be, DP_GROUP_CP, dev, NK, ex->err));
    OPS->download(ex->be, h->gsel, dev, (size_t)(cp * NK) * sizeof(real));
    if (ex->be->prices_only) /* as route's balanced choices, on every rank */
        for (int64_t c = 0; c < cp * NK; c++)
            h->gsel[c] = (real)(c % NK % E);
    memset(h->gkept, 0, (size_t)E * sizeof(int32_t));
    for (int64_t gn = 0; gn < dm->B * Tg; gn++) {
        int64_t b = gn / Tg, pos = gn % Tg, chunk = pos / C;
        int r = chunk < cp ? (int)chunk : (int)(2 * cp - 1 - chunk);
        int64_t j = (chunk < cp ? 0 : C) + pos - chunk * C, n = b * T + j;
        for (int k = 0; k < K; k++) {
            int e = (int)h->gsel[(int64_t)r * NK + n * K + k];
            bool keep = h->gkept[e] < dm->cap;
            h->chosen[e]++;
            h->gkept[e] += keep;
            if (r == me)
                h->rrow[n * K + k] = keep ? h->kept[e]++ : -1;
        }
    }
    return 0;
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
    if (dm->cap > 0 && dm->cp > 1) {
        TRY(cp_keep(ex, h));
    } else {
        for (int64_t c = 0; c < NK; c++) {
            int e = h->ridx[c];
            h->chosen[e]++;
            if (dm->cap == 0 || h->kept[e] < dm->cap) {
                h->rrow[c] = h->kept[e]++; /* position within e; made global below */
            } else {
                h->rrow[c] = -1;
            }
        }
    }
    /* CP, etp < tp: the auxiliary loss's f_e counts the whole micro-batch's choices,
     * spread over the CP ring and the TP group's expert tensor groups (Megatron-Core
     * router.py sums tokens_per_expert over its tp-cp "sequence partition group"); the
     * etp ranks of an expert tensor group route the same tokens, so the TP sum counts each
     * choice etp times. The kept counts stay local (dropless: every choice is kept, these
     * layouts run no capacity; with capacity under CP, cp_keep has counted every
     * rank's choices already). */
    if ((dm->cp > 1 && dm->cap == 0) || dm->etp < dm->tp) {
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

/*
 * Mixed precision (README "Mixed precision", model.c store()): the weights are read from
 * the bf16 / fp16 working copy, and the expert and shared-expert tensors are stored in
 * the run's precision where Megatron-Core keeps them in bf16: the experts' fc1,
 * activation and fc2 outputs and their gradients, the gradient of the dispatched tokens,
 * the combined output, the MoE layer's output and its input gradient. The router
 * computes in fp32 (Megatron-Core moe_router_dtype = "fp32": the gating GEMM on the
 * upcast input, the scores, the top-k weights, the auxiliary loss and the logits'
 * gradient stay fp32), and so does the shared-expert gate (a per-token scalar of the
 * router's kind). A gather or an all-to-all of stored rows moves stored values, so the
 * dispatched tokens and the returned expert outputs need no store of their own; the
 * combine sums in fp32 and is stored once (Megatron-Core's unpermute weighs the rows
 * with the fp32 probabilities and casts the sum back).
 */
static real *W(struct dp_exec *ex, size_t off)
{
    return dp__pw(ex, off);
}

static void store(struct dp_exec *ex, real *x, int64_t n)
{
    if (ex->dtype != DP_DT_FP32 && n > 0)
        OPS->round_store(ex->be, x, n);
}

static real *expert_w1(struct dp_exec *ex, const struct dp_layer_params *p, int j)
{
    return W(ex, p->ew1) + (size_t)j * (size_t)(ex->dm.Fe1 * ex->dm.h);
}
static real *expert_w2(struct dp_exec *ex, const struct dp_layer_params *p, int j)
{
    return W(ex, p->ew2) + (size_t)j * (size_t)(ex->dm.h * ex->dm.fe);
}
static real *expert_g1(struct dp_exec *ex, const struct dp_layer_params *p, int j)
{
    return dp__grad(ex, p->ew1) + (size_t)j * (size_t)(ex->dm.Fe1 * ex->dm.h);
}
static real *expert_g2(struct dp_exec *ex, const struct dp_layer_params *p, int j)
{
    return dp__grad(ex, p->ew2) + (size_t)j * (size_t)(ex->dm.h * ex->dm.fe);
}

/*
 * Qwen2-MoE's shared-expert gate (HF modeling_qwen2_moe Qwen2MoeSparseMoeBlock:
 * sigmoid(shared_expert_gate(x)) * shared_expert(x), shared_expert_gate Linear(h, 1,
 * bias=False)): one scalar per token, the same on every TP rank (the gathered tokens),
 * so it scales the TP-partial shared output before the sum. The N sigmoids are taken on
 * the host, as the routing is.
 */
static int gate_forward(struct dp_exec *ex, const struct dp_layer_params *p, struct dp_act *A,
                        struct moe_host *H, const real *g2)
{
    const struct dp_dims *dm = &ex->dm;
    const int N = (int)dm->N, h = (int)dm->h;
    OPS->gemm(ex->be, false, true, N, 1, h, 1, g2, h, W(ex, p->sgate), h, 0, A->sgate, 1);
    real *z = (real *)H->probs; /* host staging, free until the auxiliary loss */
    OPS->download(ex->be, z, A->sgate, (size_t)N * sizeof(real));
    for (int n = 0; n < N; n++)
        z[n] = (real)(1.0 / (1.0 + exp(-(double)z[n])));
    OPS->upload(ex->be, A->sgate, z, (size_t)N * sizeof(real));
    OPS->upload(ex->be, A->sidx, H->iota, (size_t)N * sizeof(int32_t));
    return 0;
}

/* The experts' biases (mlp_bias; NULL without): fc1's [Fe1] and fc2's [h] of local j. */
static real *expert_b1(struct dp_exec *ex, const struct dp_layer_params *p, int j, bool grad)
{
    if (p->eb1 == NONE)
        return NULL;
    return (grad ? dp__grad(ex, p->eb1) : W(ex, p->eb1)) + (size_t)j * (size_t)ex->dm.Fe1;
}
static real *expert_b2(struct dp_exec *ex, const struct dp_layer_params *p, int j, bool grad)
{
    if (p->eb2 == NONE)
        return NULL;
    return (grad ? dp__grad(ex, p->eb2) : W(ex, p->eb2)) + (size_t)j * (size_t)ex->dm.h;
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
    OPS->gemm(be, false, true, Nb, E, h, 1, gb, h, W(ex, p->router), h, 0, A->rprobs, E);
    const bool sig = m->moe_router_bias;
    OPS->router_topk(be, A->rprobs, A->ridx, A->rw, sig ? W(ex, p->router_b) : NULL, dm->Nb, E, K);
    int64_t rows = 0;
    int32_t in = 0;
    TRY(route(ex, A, H, &rows));
    if (sig && out) { /* the step's load per expert (not again in recompute) */
        double *t = H->tpe + (p - ex->lp) * E;
        for (int e = 0; e < E; e++)
            t[e] += H->kept[e];
    }
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
                real *fc1 = A->efc1 + r0 * Fe1, *act = A->eact + r0 * fe, *y = w->mx + r0 * h;
                /* Biases as the dense MLP's: fc1's split over TP, fc2's added once (TP rank
                 * 0) to the partial outputs that the combine and the TP sum add up. */
                real *b1 = expert_b1(ex, p, j, false), *b2 = expert_b2(ex, p, j, false);
                if (b1)
                    OPS->bias_fill(be, fc1, b1, n, Fe1);
                OPS->gemm(be, false, true, n, Fe1, h, 1, A->ein + r0 * h, h, expert_w1(ex, p, j), h,
                          b1 ? 1 : 0, fc1, Fe1);
                store(ex, fc1, (int64_t)n * Fe1);
                OPS->act_fwd(be, m->ffn, act, fc1, n, fe);
                store(ex, act, (int64_t)n * fe);
                b2 = dm->tp_rank == 0 ? b2 : NULL;
                if (b2)
                    OPS->bias_fill(be, y, b2, n, h);
                OPS->gemm(be, false, true, n, h, fe, 1, act, fe, expert_w2(ex, p, j), fe,
                          b2 ? 1 : 0, y, h);
                store(ex, y, (int64_t)n * h);
            }
            r0 += n;
        }
    /* Combine: the outputs back in this rank's grouped order. */
    TRY(OPS->alltoall_v(be, DP_GROUP_EP, w->mx, H->rel, A->eout, H->sel, ex->err));

    /* Shared experts: a dense MLP of the same tokens (before w->tmp, which may hold g2
     * under SP, is overwritten). */
    if (dm->sf > 0) {
        OPS->gemm(be, false, true, N, (int)dm->Sf1, h, 1, g2, h, W(ex, p->sw1), h, 0, A->sfc1,
                  (int)dm->Sf1);
        store(ex, A->sfc1, dm->N * dm->Sf1);
        OPS->act_fwd(be, m->ffn, A->sact, A->sfc1, dm->N, dm->sf);
        store(ex, A->sact, dm->N * dm->sf);
    }
    if (p->sgate != NONE)
        TRY(gate_forward(ex, p, A, H, g2));
    if (!out)
        return 0; /* full recompute in backward: the kept set is complete */

    if (dm->sf > 0) {
        OPS->gemm(be, false, true, N, h, (int)dm->sf, 1, A->sact, (int)dm->sf, W(ex, p->sw2),
                  (int)dm->sf, 0, w->tmp, h);
        store(ex, w->tmp, dm->N * dm->h);
        if (p->sgate != NONE) { /* the gate scales each token's (TP-partial) shared output */
            OPS->rows_gather(be, w->tmp, w->tmp, A->sidx, A->sgate, dm->N, dm->h);
            store(ex, w->tmp, dm->N * dm->h);
        }
    } else
        OPS->zero(be, w->tmp, (size_t)(dm->N * dm->h) * sizeof(real));
    /* The routed experts' rows are partial over ETP and zero outside the routed block, so
     * that the sum over TP (dp__reduce_tokens) adds each block's etp partials once. */
    OPS->rows_scatter_add(be, w->tmp + dm->b0 * dm->h, A->eout, A->rtok, A->rwt, rows, dm->h);
    if (dm->tp == 1)
        store(ex, w->tmp, dm->N * dm->h); /* else reduce_tokens stores it */
    TRY(dp__reduce_tokens(ex, w->tmp));
    OPS->residual(be, out, A->x2, w->tmp, NULL, dm->Nl, dm->h);
    store(ex, out, dm->Nl * dm->h);

    /* The auxiliary loss of this micro-batch and layer (its value; the gradient is
     * formed in backward from the kept counts and probabilities). Under CP the
     * micro-batch has Ng = cp N tokens and chosen[] is already summed over the ring;
     * each CP rank (and each expert tensor group of a TP group) adds its own tokens' share
     * of the P_e sums, so the shares add up to aux Ng in the step's world sum, which takes
     * one rank per expert tensor group (schedule.c; Megatron's per-rank partial aux loss). */
    OPS->download(be, H->probs, A->rprobs, (size_t)(dm->Nb * E) * sizeof(real));
    const double Ng = (double)(dm->N * dm->cp);
    double aux = 0;
    if (sig) /* the aux-loss scores of the sigmoid router: s normalised per token */
        for (int64_t n = 0; n < dm->Nb; n++) {
            double S = 0;
            for (int e = 0; e < E; e++)
                S += H->probs[n * E + e];
            for (int e = 0; e < E; e++)
                H->probs[n * E + e] = (real)(H->probs[n * E + e] / S);
        }
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
    real *dl = w->mdl, *dwr = w->mdl + dm->Nb * E, *gaux = dwr + dm->R, *dgate = gaux + E;

    const real *dy = dp__gather_tokens(ex, w->dres, w->dgath, &rc);
    TRY(rc);
    const real *dyb = dy + dm->b0 * dm->h; /* the routed tokens' */
    /* Combine weights: dL/dw of row r = dy[token] . eout[r] (partial over ETP). */
    OPS->rows_dot(be, dwr, dyb, A->rtok, A->eout, rows, dm->h);
    if (dm->etp > 1)
        TRY(OPS->allreduce(be, DP_GROUP_ETP, dwr, rows, DP_OP_SUM, ex->err));
    /* Expert outputs' gradient, to the experts. */
    OPS->rows_gather(be, w->mdy, dyb, A->rtok, A->rwt, rows, dm->h);
    store(ex, w->mdy, rows * dm->h);
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
                store(ex, dact, (int64_t)n * fe);
                OPS->gemm(be, true, false, h, fe, n, 1, dY, h, A->eact + r0 * fe, fe, 1,
                          expert_g2(ex, p, j), fe);
                if (p->eb2 != NONE) /* dY is whole on every TP rank (gathered tokens) */
                    OPS->bias_grad(be, expert_b2(ex, p, j, true), dY, n, h);
                OPS->act_bwd(be, m->ffn, dfc1, expert_b1(ex, p, j, true), dact, A->efc1 + r0 * Fe1,
                             n, fe);
                store(ex, dfc1, (int64_t)n * Fe1);
                OPS->gemm(be, true, false, Fe1, h, n, 1, dfc1, Fe1, A->ein + r0 * h, h, 1,
                          expert_g1(ex, p, j), h);
                /* The input gradient over the chunk's dY (no longer needed). */
                OPS->gemm(be, false, false, n, h, Fe1, 1, dfc1, Fe1, expert_w1(ex, p, j), h, 0, dY,
                          h);
                store(ex, dY, (int64_t)n * h);
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
        OPS->gemm(be, false, false, N, sf, h, 1, dy, h, W(ex, p->sw2), sf, 0, w->sdact, sf);
        store(ex, w->sdact, dm->N * sf);
        if (p->sgate != NONE) {
            /* y = g (act W2^T): dL/dg = (dy W2) . act per token (partial over TP, summed),
             * then dy W2 and act are scaled by g in place (act is not read again). */
            OPS->rows_dot(be, dgate, w->sdact, A->sidx, A->sact, dm->N, dm->sf);
            if (dm->tp > 1)
                TRY(OPS->allreduce(be, DP_GROUP_TP, dgate, dm->N, DP_OP_SUM, ex->err));
            OPS->rows_gather(be, w->sdact, w->sdact, A->sidx, A->sgate, dm->N, dm->sf);
            OPS->rows_gather(be, A->sact, A->sact, A->sidx, A->sgate, dm->N, dm->sf);
            store(ex, w->sdact, dm->N * sf);
            store(ex, A->sact, dm->N * sf);
        }
        OPS->gemm(be, true, false, h, sf, N, 1, dy, h, A->sact, sf, 1, dp__grad(ex, p->sw2), sf);
        OPS->act_bwd(be, m->ffn, sdfc1, NULL, w->sdact, A->sfc1, dm->N, dm->sf);
        store(ex, sdfc1, dm->N * Sf1);
        OPS->gemm(be, true, false, Sf1, h, N, 1, sdfc1, Sf1, g2, h, 1, dp__grad(ex, p->sw1), h);
        OPS->gemm(be, false, false, N, h, Sf1, 1, sdfc1, Sf1, W(ex, p->sw1), h, 0, w->dtmp, h);
        store(ex, w->dtmp, dm->N * dm->h);
    } else {
        OPS->zero(be, w->dtmp, (size_t)(dm->N * dm->h) * sizeof(real));
    }
    OPS->rows_scatter_add(be, w->dtmp + dm->b0 * dm->h, w->mdy, A->rtok, NULL, rows, dm->h);
    if (dm->tp == 1)
        store(ex, w->dtmp, dm->N * dm->h); /* else reduce_tokens stores it */

    /* Router: the auxiliary loss's gradient w.r.t. P[n][e] is c E f_e / Ng times this
     * micro-batch's weight in the step's loss, Ng / (gbs T) (mean over micro-batches),
     * Ng = cp N its tokens and chosen[] its counts (summed over CP in route). The router
     * weight's gradient is then partial over CP, summed with DP's (DP_GROUP_DPCP). */
    const double Ng = (double)(dm->N * dm->cp);
    double scale = DP_MOE_AUX_COEFF * (double)E / Ng * (Ng / (double)ex->gbs_tokens);
    if (ex->dtype == DP_DT_FP16)
        scale *= ex->ls_scale;   /* the loss scale, as the cross-entropy's (model.c head_forward) */
    real *ga = (real *)H->probs; /* host staging */
    for (int e = 0; e < E; e++)
        ga[e] = (real)(scale * (double)H->chosen[e] / (Ng * K));
    OPS->upload(be, gaux, ga, (size_t)E * sizeof(real));
    OPS->router_bwd(be, dl, A->rprobs, A->rw, A->ridx, A->rrow, dwr, gaux, m->moe_router_bias,
                    dm->Nb, E, K);
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
    if (p->sgate != NONE) { /* through the sigmoid, dz = dg g (1 - g), on the host (etp = tp) */
        real *dz = (real *)H->probs, *gv = dz + dm->N;
        OPS->download(be, dz, dgate, (size_t)dm->N * sizeof(real));
        OPS->download(be, gv, A->sgate, (size_t)dm->N * sizeof(real));
        for (int64_t n = 0; n < dm->N; n++)
            dz[n] = (real)((double)dz[n] * (double)gv[n] * (1.0 - (double)gv[n]));
        OPS->upload(be, dgate, dz, (size_t)dm->N * sizeof(real));
        OPS->gemm(be, true, false, 1, h, N, 1, dgate, 1, g2, h, 1, dp__grad(ex, p->sgate), h);
    }
    /* The experts' and shared part is partial over TP; the router's is whole for the
     * routed block on every rank of its expert tensor group, so it joins after the sum. */
    TRY(dp__reduce_tokens(ex, w->dtmp));
    OPS->gemm(be, false, false, Nb, h, E, 1, dl, E, W(ex, p->router), h, 0, w->tmp, h);
    if (p->sgate != NONE) /* the gate's input gradient, whole like the router's (Nb = N) */
        OPS->gemm(be, false, false, N, h, 1, 1, dgate, 1, W(ex, p->sgate), h, 1, w->tmp, h);
    /* The fp32 router's input gradient, cast to the input's precision, then the sum. */
    store(ex, w->tmp, dm->Nb * dm->h);
    OPS->add_inplace(be, w->dtmp, w->tmp + own * dm->h, dm->Nl * dm->h);
    store(ex, w->dtmp, dm->Nl * dm->h);
    return 0;
}

/* DeepSeek-V3's aux-loss-free balancing (report Sec. 2.1.2; Megatron-Core
 * moe_utils.get_updated_expert_bias, called from finalize_model_grads): after the step,
 * each layer's bias b_e += rate sign(mean_i c_i - c_e), c_e the choices expert e kept in
 * the whole step (every micro-batch, summed over the DP x CP ranks; Megatron sums over
 * TP x DP x CP, where TP ranks count the same tokens, which changes no sign). Outside the
 * gradient and the optimizer: the bias has no gradient, and AdamW leaves a vector with a
 * zero gradient where it is (no weight decay on vectors). Every rank holding the layer
 * applies the same update to its copy (under ZeRO-3 to its shard). */
int dp__moe_bias_update(struct dp_exec *ex)
{
    if (!ex->m->moe_router_bias || ex->m->experts == 0)
        return 0;
    const int E = ex->dm.E;
    struct moe_host *H;
    TRY(host_get(ex, &H));
    const int n = ex->nlayers * E;
    if (ex->dm.cp > 1 || ex->l.dp > 1)
        TRY(OPS->allreduce_host(ex->be, DP_GROUP_DPCP, H->tpe, n, DP_OP_SUM, ex->err));
    real *delta = (real *)H->probs, *dev = ex->w.mdl; /* free between steps */
    for (int i = 0; i < ex->nsegs; i++) {
        const struct dp_seg *sg = &ex->segs[i];
        if (sg->t.role != DP_ROLE_ROUTER_BIAS)
            continue;
        const double *c = H->tpe + (int64_t)dp__local_layer(ex, sg->t.layer) * E;
        double mean = 0;
        for (int e = 0; e < E; e++)
            mean += c[e] / E;
        for (int e = 0; e < E; e++)
            delta[e] = (real)(DP_MOE_BIAS_RATE * (mean > c[e] ? 1 : mean < c[e] ? -1 : 0));
        size_t lo = sg->off, hi = sg->off + (size_t)E;
        real *dst = NULL; /* ZeRO-3 has no full parameter buffer (ex->params NULL) */
        if (ex->l.zero >= 3) {
            if (!dp__seg_in_shard(ex, sg, &lo, &hi))
                continue;
            dst = ex->pshard + dp__shard_idx(ex, sg, lo);
        } else {
            dst = ex->params + lo;
        }
        OPS->upload(ex->be, dev, delta + (lo - sg->off), (hi - lo) * sizeof(real));
        OPS->add_inplace(ex->be, dst, dev, (int64_t)(hi - lo));
    }
    memset(H->tpe, 0, (size_t)n * sizeof(double));
    return 0;
}

void dp__moe_release(struct dp_exec *ex)
{
    free(ex->moe_host);
    ex->moe_host = NULL;
}
