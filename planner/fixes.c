/*
 * What would make an out-of-memory layout fit: single changes, pairs of
 * changes, and more GPUs, each with the peak memory it reaches and its cost.
 */
#include "internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum change_kind {
    CH_SELECTIVE,
    CH_FULL,
    CH_SP,
    CH_ZERO1,
    CH_ZERO2,
    CH_ZERO3,
    CH_TP2,
    CH_PP2,
    CH_MBS_HALF,
    CH_LOSS_COMPILED, /* torchtitan: the loss under torch.compile (4 B per logit, not 12) */
    CH_LOSS_CHUNKS,   /* torchtitan: ChunkedLossWrapper, num_chunks 8 (its Qwen3 configs') */
    CH_COUNT
};

/* Apply one change; false if it does not apply to this layout. */
static bool apply(enum change_kind k, const struct dp_cluster *cl, struct dp_layout *l, char *opt,
                  size_t cap)
{
    switch (k) {
    case CH_SELECTIVE:
        if (l->recompute != DP_RECOMPUTE_NONE)
            return false;
        l->recompute = DP_RECOMPUTE_SELECTIVE;
        snprintf(opt, cap, "--recompute selective");
        return true;
    case CH_FULL:
        if (l->recompute == DP_RECOMPUTE_FULL)
            return false;
        l->recompute = DP_RECOMPUTE_FULL;
        snprintf(opt, cap, "--recompute full");
        return true;
    case CH_SP:
        if (l->tp == 1 || l->sp)
            return false;
        l->sp = true;
        snprintf(opt, cap, "--sp");
        return true;
    case CH_ZERO1:
    case CH_ZERO2:
    case CH_ZERO3: {
        int z = 1 + (int)(k - CH_ZERO1);
        if (l->zero >= z || (int64_t)l->dp * l->cp == 1)
            return false;
        if (z >= 2 && l->pp > 1) /* shards nothing more than ZeRO-1 with pipelines (memory.c) */
            return false;
        l->zero = z;
        snprintf(opt, cap, "--zero %d", z);
        return true;
    }
    case CH_TP2:
        if (l->tp * 2 > cl->gpus_per_node || l->dp % 2)
            return false;
        l->tp *= 2;
        l->dp /= 2;
        snprintf(opt, cap, "--tp %d", l->tp);
        return true;
    case CH_PP2:
        if (l->dp % 2)
            return false;
        l->pp *= 2;
        l->dp /= 2;
        dp_layout_reset_split(l);
        snprintf(opt, cap, "--pp %d", l->pp);
        return true;
    case CH_MBS_HALF:
        if (l->mbs < 2)
            return false;
        l->mbs /= 2;
        snprintf(opt, cap, "--mbs %lld", (long long)l->mbs);
        return true;
    case CH_LOSS_COMPILED:
        if (l->framework != DP_FW_TORCHTITAN || dp_layout_loss(l) != DP_LOSS_UNFUSED)
            return false;
        l->loss = DP_LOSS_COMPILED;
        snprintf(opt, cap, "--loss compiled");
        return true;
    case CH_LOSS_CHUNKS:
        if (l->framework != DP_FW_TORCHTITAN || l->loss_chunks > 1)
            return false; /* slices that do not divide the tokens: evaluate() drops it */
        l->loss_chunks = 8;
        snprintf(opt, cap, "--loss-chunks 8");
        return true;
    default: return false;
    }
}

static double bubble(const struct dp_layout *l)
{
    /* Narayanan et al. 2021, Sec. 2.2: (p - 1) / (v m). */
    double M = (double)dp_layout_microbatches(l);
    return (double)(l->pp - 1) / ((double)l->vpp * M);
}

static void describe_cost(const struct dp_model *m, const struct dp_layout *from,
                          const struct dp_layout *to, struct dp_fix *fx)
{
    struct dp_flops f0, f1;
    dp_flops_step(m, from, &f0);
    dp_flops_step(m, to, &f1);
    fx->extra_flops = f1.hardware_flops / f0.hardware_flops - 1.0;
    char parts[4][96];
    int np = 0;
    if (fabs(fx->extra_flops) > 1e-4)
        snprintf(parts[np++], sizeof parts[0], "%+.1f%% FLOPs (recompute)",
                 100.0 * fx->extra_flops);
    if (to->tp != from->tp)
        snprintf(parts[np++], sizeof parts[0],
                 "tensor-parallel traffic over %d GPUs, smaller GEMMs", to->tp);
    if (to->pp != from->pp || to->mbs != from->mbs)
        snprintf(parts[np++], sizeof parts[0], "pipeline bubble %.1f%% -> %.1f%%",
                 100.0 * bubble(from), 100.0 * bubble(to));
    if (to->mbs != from->mbs && np < 4)
        snprintf(parts[np++], sizeof parts[0], "smaller GEMMs");
    if (to->zero != from->zero && np < 4) {
        if (to->zero >= 3)
            snprintf(parts[np++], sizeof parts[0], "1.5x data-parallel traffic (ZeRO-3 gathers)");
        else
            snprintf(parts[np++], sizeof parts[0], "same data-parallel traffic (ZeRO-%d)",
                     to->zero);
    }
    if (to->sp != from->sp && np < 4)
        snprintf(parts[np++], sizeof parts[0], "same traffic (reduce-scatter + all-gather)");
    if (to->loss_chunks != from->loss_chunks && np < 4)
        snprintf(parts[np++], sizeof parts[0], "the output layer and loss in %d slices",
                 to->loss_chunks);
    fx->cost[0] = '\0';
    size_t len = 0;
    for (int i = 0; i < np; i++)
        len += (size_t)snprintf(fx->cost + len, sizeof fx->cost - len, "%s%s", i ? "; " : "",
                                parts[i]);
    if (np == 0)
        snprintf(fx->cost, sizeof fx->cost, "no extra FLOPs or traffic");
}

static int cmp_fix(const void *a, const void *b)
{
    const struct dp_fix *x = a, *y = b;
    if (x->fits != y->fits)
        return x->fits ? -1 : 1;
    if (!x->fits)
        return x->peak_bytes < y->peak_bytes ? -1 : x->peak_bytes > y->peak_bytes;
    if (x->gpus != y->gpus)
        return x->gpus < y->gpus ? -1 : 1;
    if (x->slowdown != y->slowdown)
        return x->slowdown < y->slowdown ? -1 : 1;
    return x->peak_bytes < y->peak_bytes ? -1 : x->peak_bytes > y->peak_bytes;
}

/* Tokens per second per GPU of a layout on a cluster. */
static double per_gpu_rate(const struct dp_model *m, const struct dp_cluster *cl,
                           const struct dp_layout *l)
{
    struct dp_step_cost c;
    dp_time_step_fast(m, cl, l, &c);
    return c.tokens_per_s / dp_cluster_gpus(cl);
}

static bool evaluate(const struct dp_model *m, const struct dp_cluster *cl,
                     const struct dp_layout *from, const struct dp_layout *to,
                     const struct dp_mem_opts *o, double margin, double base_rate,
                     struct dp_fix *fx)
{
    struct dp_err e = {0};
    struct dp_layout split;
    if (dp_layout_validate(to, m, dp_cluster_gpus(cl), &e)) {
        /* A new pp the layers do not divide into: the planner's balanced split, the
         * embedding and the loss counted as a layer each (Megatron's accounting). */
        int c[DP_MAX_CHUNKS];
        split = *to;
        dp_err_clear(&e);
        if (to->nchunks || to->first_stage_layers || to->last_stage_layers ||
            (int64_t)to->pp * to->vpp > DP_MAX_CHUNKS ||
            dp_split_balanced(m->layers, to->pp, to->vpp, 1, 1, false, c) ||
            dp_layout_set_chunks(&split, c, to->pp * to->vpp) ||
            dp_layout_validate(&split, m, dp_cluster_gpus(cl), &e))
            return false;
        to = &split;
        size_t n = strlen(fx->change);
        if (n + 16 < sizeof fx->change) {
            snprintf(fx->change + n, sizeof fx->change - n, " --stage-layers ");
            n = strlen(fx->change);
            dp_split_format_list(c, to->pp * to->vpp, fx->change + n, sizeof fx->change - n);
        }
    }
    fx->layout = *to;
    fx->gpus = dp_cluster_gpus(cl);
    dp_mem_peak(m, cl, to, o, &fx->peak_bytes, NULL, NULL);
    const int64_t usable = dp_gpu_usable_bytes(&cl->gpu);
    fx->fits = fx->peak_bytes <= dp_mem_within_margin(usable, margin);
    fx->tight = !fx->fits && fx->peak_bytes <= usable;
    describe_cost(m, from, to, fx);
    fx->slowdown = base_rate / per_gpu_rate(m, cl, to) - 1;
    /* Lead with the predicted effect; the reasons follow. */
    char why[sizeof fx->cost];
    snprintf(why, sizeof why, "%s", fx->cost);
    snprintf(fx->cost, sizeof fx->cost, "%+.1f%% time per token per GPU: %s", 100 * fx->slowdown,
             why);
    return true;
}

int dp_plan_fixes(const struct dp_model *m, const struct dp_cluster *cl, const struct dp_layout *l,
                  const struct dp_mem_opts *o, double margin, struct dp_fix *out, int cap, int *n,
                  struct dp_err *err)
{
    *n = 0;
    struct dp_fix cand[CH_COUNT * CH_COUNT + 4];
    int nc = 0;
    bool any_fits = false;
    int64_t base_peak;
    dp_mem_peak(m, cl, l, o, &base_peak, NULL, NULL);
    double base_rate = per_gpu_rate(m, cl, l);
    for (int k = 0; k < CH_COUNT; k++) {
        struct dp_layout t = *l;
        struct dp_fix fx = {0};
        if (!apply((enum change_kind)k, cl, &t, fx.change, sizeof fx.change))
            continue;
        /* A change that saves under 0.5% is no fix (e.g. selective recompute when
         * flash attention already keeps no score matrices). */
        if (evaluate(m, cl, l, &t, o, margin, base_rate, &fx) &&
            fx.peak_bytes < base_peak - base_peak / 200) {
            cand[nc++] = fx;
            any_fits |= fx.fits;
        }
    }
    if (!any_fits) {
        for (int a = 0; a < CH_COUNT; a++)
            for (int b = a + 1; b < CH_COUNT; b++) {
                if ((a == CH_SELECTIVE && b == CH_FULL) ||
                    (a >= CH_ZERO1 && a <= CH_ZERO3 && b >= CH_ZERO1 && b <= CH_ZERO3))
                    continue;
                struct dp_layout t = *l;
                struct dp_fix fx = {0};
                char o1[48], o2[48];
                if (!apply((enum change_kind)a, cl, &t, o1, sizeof o1) ||
                    !apply((enum change_kind)b, cl, &t, o2, sizeof o2))
                    continue;
                snprintf(fx.change, sizeof fx.change, "%s %s", o1, o2);
                if (evaluate(m, cl, l, &t, o, margin, base_rate, &fx) && fx.fits)
                    cand[nc++] = fx;
            }
    }
    /* Scale out: the same tp and pp on k times the GPUs, the optimizer sharded over
     * the larger data-parallel group, the same batch per replica. */
    for (int k = 2; k <= 64; k *= 2) {
        struct dp_layout t = *l;
        t.dp *= k;
        t.gbs *= k;
        if (t.zero < 1)
            t.zero = 1;
        /* cl is whole nodes, so this is k times the nodes. */
        int gpus = dp_cluster_gpus(cl) * k;
        struct dp_cluster big = dp__cluster_with_gpus(cl, gpus);
        struct dp_fix fx = {0};
        if (!evaluate(m, &big, l, &t, o, margin, base_rate, &fx) || !fx.fits)
            continue;
        snprintf(fx.change, sizeof fx.change, "%d GPUs (dp=%d, --zero %d, gbs=%lld)", gpus, t.dp,
                 t.zero, (long long)t.gbs);
        snprintf(fx.cost, sizeof fx.cost,
                 "%d more GPUs (%dx the hardware), %+.1f%% tokens/s per GPU, same work per GPU",
                 gpus - dp_cluster_gpus(cl), k, -100 * fx.slowdown / (1 + fx.slowdown));
        cand[nc++] = fx;
        break;
    }
    /* More GPUs of this node type, with whatever layout fits there. */
    struct dp_min_gpus mg;
    struct dp_search_opts so;
    dp_search_opts_default(&so);
    so.mbs = l->mbs;
    so.seq_len = l->seq_len;
    so.precision = l->precision;
    so.grad_fp32 = l->grad_fp32;
    so.flash_attn = l->flash_attn;
    so.dp_overlap = l->dp_overlap;
    so.optimizer = l->optimizer;
    if (o)
        so.mem = *o;
    so.memory_margin = margin;
    int rc = dp_plan_min_gpus(m, cl, &so, 1 << 16, &mg, err);
    if (rc)
        return rc;
    if (mg.found && mg.gpus > dp_cluster_gpus(cl)) {
        struct dp_cluster mgc = dp__cluster_with_gpus(cl, mg.gpus);
        struct dp_fix fx = {0};
        if (evaluate(m, &mgc, l, &mg.layout, o, margin, base_rate, &fx)) {
            char lay[160];
            dp_layout_format_model(&mg.layout, m, lay, sizeof lay);
            if (mg.nodes)
                snprintf(fx.change, sizeof fx.change, "%d GPUs (%d nodes): %s", mg.gpus, mg.nodes,
                         lay);
            else
                snprintf(fx.change, sizeof fx.change, "%d GPUs: %s", mg.gpus, lay);
            snprintf(fx.cost, sizeof fx.cost,
                     "%d more GPUs (%.1fx the hardware), %+.1f%% tokens/s per GPU",
                     mg.gpus - dp_cluster_gpus(cl), (double)mg.gpus / dp_cluster_gpus(cl),
                     -100 * fx.slowdown / (1 + fx.slowdown));
            cand[nc++] = fx;
        }
    }
    qsort(cand, (size_t)nc, sizeof cand[0], cmp_fix);
    for (int i = 0; i < nc && *n < cap; i++)
        out[(*n)++] = cand[i];
    return 0;
}
