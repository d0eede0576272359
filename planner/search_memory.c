/*
 * The fewest GPUs of a node type on which some layout fits (`dplan memory
 * --min-gpus`), over the space dp_plan_search searches: tp, cp, sequence
 * parallelism, ep, pp with its even and uneven splits, interleaving, ZeRO
 * stage and recompute; dp is what the GPU count leaves.
 *
 * Two facts of the memory model make this exact without trying every count:
 *  - With the other knobs fixed, per-GPU memory does not grow with dp: model
 *    states are sharded over more ranks (ceil(n / shard)) or not at all, and
 *    the activations in flight depend on dp only through the micro-batches
 *    per replica, which fall (fixed --gbs) or stay (the batch following the
 *    count, below). So for each configuration the fewest GPUs is the
 *    smallest valid dp at which it fits: a bisection over its valid dps.
 *  - Memory does not shrink with a larger micro-batch (activations and
 *    receive buffers scale with it; with a fixed batch, in-flight sequences
 *    min(pp - r, M) x mbs never fall), and every split, interleaving and
 *    batch divisibility valid at mbs = b is valid at mbs = 1: the count is
 *    searched at mbs = 1, or at the mbs given.
 * tests/unit/test_planner_min_gpus.c checks the answer against brute force.
 */
#include "internal.h"

#include <stdlib.h>
#include <string.h>

/* Micro-batches per replica when no batch is given: 2 x tp x cp x pp, at least twice the
 * stages, so every stage holds its full 1F1B (or interleaved) in-flight count as in a
 * long training batch. */
#define FREE_BATCH_PER_GPU 2

struct scan {
    const struct dp_model *m;
    const struct dp_cluster *cl;
    const struct dp_search_opts *o;
    int gpn, max_gpus;
    int64_t cap;
    int64_t gbs;   /* 0: follows the count */
    int64_t *divs; /* divisors of gbs / mbs, ascending (fixed batch) */
    int ndivs;
    int best; /* fewest GPUs found so far; max_gpus + 1 when none */
    struct dp_layout best_l;
    int64_t best_peak;
    int64_t lowest_peak; /* the smallest peak of any evaluation */
    struct dp_layout lowest_l;
    long long tried;
    int *cand; /* valid GPU counts of the configuration in hand, ascending */
    int ncand, cand_cap;
};

/* A count the search considers: 1, 2, 4 .. dividing a node, then whole nodes. */
static bool count_ok(int n, int gpn)
{
    if (n < gpn)
        return (n & (n - 1)) == 0 && gpn % n == 0;
    return n % gpn == 0;
}

static int64_t gcd64(int64_t a, int64_t b)
{
    while (b) {
        int64_t t = a % b;
        a = b;
        b = t;
    }
    return a;
}

/* Does layout l (dp and gbs still to set) fit on dp x the rest GPUs? */
static bool fits(struct scan *s, struct dp_layout *l, int dp,
                 const struct dp_act_layer al[DP_LAYER_KINDS])
{
    l->dp = dp;
    int n = l->tp * l->cp * l->pp * dp;
    if (!s->gbs)
        l->gbs = FREE_BATCH_PER_GPU * l->mbs * n;
    int64_t peak;
    dp_mem_peak_with(s->m, s->cl, l, &s->o->mem, al, &peak, NULL, NULL);
    s->tried++;
    if (s->lowest_peak < 0 || peak < s->lowest_peak) {
        s->lowest_peak = peak;
        s->lowest_l = *l;
    }
    if (peak > s->cap)
        return false;
    if (n < s->best) {
        s->best = n;
        s->best_l = *l;
        s->best_peak = peak;
    }
    return true;
}

static bool push(struct scan *s, int n)
{
    if (s->ncand == s->cand_cap) {
        int cap = s->cand_cap ? 2 * s->cand_cap : 256;
        int *p = realloc(s->cand, sizeof *p * (size_t)cap);
        if (!p)
            return false;
        s->cand = p;
        s->cand_cap = cap;
    }
    s->cand[s->ncand++] = n;
    return true;
}

/* The GPU counts below the best so far at which configuration l is valid, ascending. */
static bool candidates(struct scan *s, const struct dp_layout *l)
{
    s->ncand = 0;
    const int64_t P = (int64_t)l->tp * l->cp * l->pp;
    const int limit = s->best - 1;
    /* tp x cp x dp divisible by ep x etp (the expert groups): dp a multiple of
     * ep etp / gcd(ep etp, tp cp). ZeRO needs dp x cp > 1. */
    const int64_t eg = s->m->experts ? (int64_t)l->ep * dp_layout_etp(l) : 1;
    const int64_t edp = eg / gcd64(eg, (int64_t)l->tp * l->cp);
    const int64_t dp_min = l->zero > 0 && l->cp == 1 ? 2 : 1;
    if (s->gbs) {
        for (int i = 0; i < s->ndivs; i++) {
            int64_t dp = s->divs[i], n = P * dp;
            if (n > limit)
                break;
            if (dp < dp_min || dp % edp || !count_ok((int)n, s->gpn))
                continue;
            if (l->vpp > 1 && (s->gbs / (l->mbs * dp)) % l->pp)
                continue;
            if (!push(s, (int)n))
                return false;
        }
        return true;
    }
    /* Counts below a node: powers of two dividing it. */
    for (int64_t n = 1; n < s->gpn && n <= limit; n *= 2) {
        if (n % P || !count_ok((int)n, s->gpn))
            continue;
        int64_t dp = n / P;
        if (dp >= dp_min && dp % edp == 0 && !push(s, (int)n))
            return false;
    }
    /* Whole nodes: multiples of lcm(gpn, P x edp). */
    int64_t q = P * edp, step = q / gcd64(q, s->gpn) * s->gpn;
    for (int64_t n = step; n <= limit; n += step)
        if (n / P >= dp_min && !push(s, (int)n))
            return false;
    return true;
}

/* The fewest valid GPUs below the best at which l fits: memory falls with dp, so test the
 * largest count first and bisect down. */
static bool config(struct scan *s, struct dp_layout *l,
                   const struct dp_act_layer al[DP_LAYER_KINDS])
{
    if (!candidates(s, l))
        return false;
    if (s->ncand == 0)
        return true;
    const int64_t P = (int64_t)l->tp * l->cp * l->pp;
    int hi = s->ncand - 1;
    if (!fits(s, l, (int)(s->cand[hi] / P), al))
        return true;
    int lo = -1; /* cand[lo] does not fit (virtually, below the first) */
    while (hi - lo > 1) {
        int mid = lo + (hi - lo) / 2;
        if (fits(s, l, (int)(s->cand[mid] / P), al))
            hi = mid;
        else
            lo = mid;
    }
    return true;
}

static bool scan_all(struct scan *s, int64_t mbs)
{
    const struct dp_model *m = s->m;
    const struct dp_search_opts *o = s->o;
    const int L = (int)m->layers, gpn = s->gpn;
    struct dp_layout base;
    dp_layout_default(&base);
    base.mbs = mbs;
    base.gbs = s->gbs;
    base.seq_len = o->seq_len;
    base.precision = o->precision;
    base.grad_fp32 = o->grad_fp32 >= 0 ? o->grad_fp32 == 1 : o->precision != DP_FP16;
    base.flash_attn = o->flash_attn;
    base.dp_overlap = o->dp_overlap;
    base.optimizer = o->optimizer;
    base.framework = o->framework;
    base.loss = o->loss;
    base.loss_chunks = o->loss_chunks;
    base.local_batch = o->local_batch;
    base.mtp_layers = o->mtp_layers;
    base.fsdp_per_microbatch = o->fsdp_per_microbatch;
    if (o->grad_fp32 < 0 && o->framework == DP_FW_DEEPSPEED)
        base.grad_fp32 = false;
    int rcs[DP_RECOMPUTES];
    const int nrc = dp_recompute_choices(o->framework, rcs);
    dp__apply_moe_opts(o, &base);
    for (int tp = 1; tp <= gpn && tp <= s->max_gpus; tp *= 2) {
        if ((o->tp && tp != o->tp) || gpn % tp || !dp__tp_divides(m, tp, o->etp))
            continue;
        for (int cp = 1; (int64_t)tp * cp <= s->max_gpus; cp *= 2) {
            if (o->cp && cp != o->cp)
                continue;
            if (cp > 1 &&
                (o->seq_len % (2 * cp) || !o->flash_attn || o->framework == DP_FW_DEEPSPEED))
                break;
            for (int sp = 0; sp <= (tp > 1); sp++) {
                if ((o->sp >= 0 && sp != o->sp && tp > 1) ||
                    (sp && (o->seq_len % tp || o->framework == DP_FW_DEEPSPEED)))
                    continue;
                int64_t emax = m->experts > 0 ? m->experts : 1;
                for (int ep = 1; ep <= emax; ep++) {
                    if (emax % ep || (o->ep && ep != o->ep) || (ep > 1 && tp > 1 && !sp))
                        continue;
                    struct dp_layout l = base;
                    l.tp = tp;
                    l.cp = cp;
                    l.sp = sp;
                    l.ep = ep;
                    struct dp_act_layer act[DP_RECOMPUTES][DP_LAYER_KINDS];
                    for (int i = 0; i < nrc; i++) {
                        l.recompute = (enum dp_recompute)rcs[i];
                        dp_act_layers(m, &l, act[rcs[i]]);
                    }
                    for (int pp = 1; pp <= L && pp <= DP_MAX_PP; pp++) {
                        if ((o->pp && pp != o->pp) || (int64_t)tp * cp * pp > s->max_gpus)
                            continue;
                        int vmax = pp == 1 ? 1 : (L + 2) / pp;
                        if (vmax > DP_MAX_CHUNKS / pp)
                            vmax = DP_MAX_CHUNKS / pp;
                        for (int vpp = 1; vpp <= vmax; vpp++) {
                            if ((o->vpp && vpp != o->vpp) ||
                                (vpp > 1 && o->framework == DP_FW_DEEPSPEED))
                                continue;
                            struct dp__split sp_[DP_MAX_SPLITS];
                            int nsplit =
                                dp__pipeline_splits(L, pp, vpp, o->no_uneven, 0, o->framework, sp_);
                            for (int si = 0; si < nsplit; si++) {
                                for (int zero = 0; zero <= 3; zero++) {
                                    if ((o->zero >= 0 && zero != o->zero) ||
                                        !dp__zero_offered(o->framework, zero, pp, cp, o->optimizer))
                                        continue;
                                    for (int i = 0; i < nrc; i++) {
                                        int rc = rcs[i];
                                        if (o->recompute >= 0 && rc != o->recompute)
                                            continue;
                                        l.shard_group = 0; /* HSDP never needs less memory */
                                        l.pp = pp;
                                        l.vpp = vpp;
                                        l.zero = zero;
                                        l.recompute = (enum dp_recompute)rc;
                                        l.nchunks = sp_[si].nchunks;
                                        memcpy(l.chunk_layers, sp_[si].c,
                                               sizeof l.chunk_layers[0] * (size_t)l.nchunks);
                                        if (!config(s, &l, act[rc]))
                                            return false;
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
    }
    return true;
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

int dp_plan_min_gpus(const struct dp_model *m, const struct dp_cluster *cl,
                     const struct dp_search_opts *o, int max_gpus, struct dp_min_gpus *out,
                     struct dp_err *err)
{
    memset(out, 0, sizeof *out);
    out->best_peak_bytes = -1;
    if (o->seq_len < 1 || o->gbs < 0)
        return dp_err_set(err, DP_EUSAGE, "sequence length must be >= 1 and the batch >= 0");
    const int64_t mbs = o->mbs > 0 ? o->mbs : 1;
    struct scan s = {.m = m,
                     .cl = cl,
                     .o = o,
                     .gpn = cl->gpus_per_node,
                     .max_gpus = max_gpus,
                     .cap = dp_search_capacity(cl, o),
                     .gbs = o->gbs,
                     .best = max_gpus + 1,
                     .lowest_peak = -1};
    int rc = 0;
    if (s.gbs) {
        /* The data-parallel degrees a fixed batch allows: divisors of gbs / mbs. */
        if (s.gbs % mbs == 0) {
            int64_t g = s.gbs / mbs;
            for (int64_t d = 1; d * d <= g; d++)
                if (g % d == 0) {
                    int64_t *p = realloc(s.divs, sizeof *p * (size_t)(s.ndivs + 2));
                    if (!p) {
                        rc = dp_err_set(err, DP_ENOMEM, "out of memory");
                        goto out;
                    }
                    s.divs = p;
                    s.divs[s.ndivs++] = d;
                    if (d != g / d)
                        s.divs[s.ndivs++] = g / d;
                }
            qsort(s.divs, (size_t)s.ndivs, sizeof *s.divs, cmp_i64);
        }
    }
    if (!scan_all(&s, mbs)) {
        rc = dp_err_set(err, DP_ENOMEM, "out of memory");
        goto out;
    }
    out->layouts_tried = s.tried;
    if (s.lowest_peak >= 0) {
        out->best_peak_bytes = s.lowest_peak;
        out->best_layout = s.lowest_l;
    }
    if (s.best > max_gpus)
        goto out;
    out->found = true;
    out->gpus = s.best;
    out->nodes = s.best >= s.gpn ? s.best / s.gpn : 0;
    out->layout = s.best_l;
    out->peak_bytes = s.best_peak;
    /* Of the layouts that fit on that many GPUs, the fastest: the planner's own search
     * there, at the same micro-batch and batch. */
    struct dp_search_opts so = *o;
    so.top_k = 1;
    so.mbs = mbs;
    so.dp = 0;
    so.gbs = s.best_l.gbs;
    struct dp_cluster c2 = dp__cluster_with_gpus(cl, s.best);
    struct dp_search_result *r = malloc(sizeof *r);
    if (!r) {
        rc = dp_err_set(err, DP_ENOMEM, "out of memory");
        goto out;
    }
    struct dp_err e2 = {0};
    if (dp_plan_search(m, &c2, &so, r, &e2) == 0 && r->n > 0) {
        out->layout = r->top[0].layout;
        out->peak_bytes = r->top[0].peak_bytes;
        out->layouts_tried += r->evaluated;
    }
    free(r);
out:
    free(s.divs);
    free(s.cand);
    return rc;
}
