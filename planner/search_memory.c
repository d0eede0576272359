/*
 * Memory-only searches: the layouts that fit, and the fewest GPUs of a node
 * type on which one does (`dplan memory --min-gpus`).
 */
#include "internal.h"

#include <string.h>

int dp__enum_memory_layouts(const struct dp_model *m, int gpus, int gpus_per_node,
                            const struct dp_layout *base, bool gbs_fixed, dp__layout_fn fn,
                            void *ctx)
{
    int64_t f = m->experts ? m->moe_ffn_hidden : m->ffn_hidden;
    for (int tp = 1; tp <= gpus_per_node && tp <= gpus; tp *= 2) {
        if (gpus % tp || m->heads % tp || m->kv_heads % tp || f % tp)
            continue;
        int rest = gpus / tp;
        for (int pp = 1; pp <= rest && pp <= m->layers && pp <= DP_MAX_PP; pp++) {
            if (rest % pp || m->layers % pp)
                continue;
            int dp = rest / pp;
            struct dp_layout l = *base;
            l.tp = tp;
            l.pp = pp;
            l.dp = dp;
            l.cp = 1;
            l.ep = 1;
            l.vpp = 1;
            l.first_stage_layers = l.last_stage_layers = 0;
            if (gbs_fixed) {
                if (l.gbs % (l.mbs * dp))
                    continue;
            } else {
                l.gbs = l.mbs * dp * pp;
            }
            for (int zero = 0; zero <= 3; zero++) {
                if (zero >= 2 && pp > 1)
                    break;
                if (zero > 0 && dp == 1)
                    break; /* nothing to shard over */
                for (int rc = 0; rc < 3; rc++) {
                    for (int sp = 0; sp <= (tp > 1); sp++) {
                        l.zero = zero;
                        l.recompute = (enum dp_recompute)rc;
                        l.sp = sp;
                        int r = fn(&l, ctx);
                        if (r)
                            return r;
                    }
                }
            }
        }
    }
    return 0;
}

struct min_ctx {
    const struct dp_model *m;
    const struct dp_cluster *cl;
    const struct dp_mem_opts *o;
    int64_t cap;
    bool found;
    double best_cost;
    struct dp_layout best;
    int64_t best_peak;
    int64_t lowest_peak;
    struct dp_layout lowest;
    long long tried;
    /* A layer's activations and time depend on (tp, cp, ep, mbs, sp, and recompute for
     * the activations), not on pp, dp or ZeRO; the enumeration fixes everything else
     * they read. Kept per (sp, recompute) for the last (tp, cp, ep, mbs), computed on
     * first use. */
    bool keyed;
    int key_tp, key_cp, key_ep;
    int64_t key_mbs;
    bool have_act[2][3], have_time[2];
    struct dp_act_layer act[2][3];
    struct dp_layer_time lt[2];
};

static int try_layout(const struct dp_layout *l, void *vctx)
{
    struct min_ctx *c = vctx;
    struct dp_err err = {0};
    c->tried++;
    if (dp_layout_validate(l, c->m, 0, &err))
        return 0;
    if (!c->keyed || l->tp != c->key_tp || l->cp != c->key_cp || l->ep != c->key_ep ||
        l->mbs != c->key_mbs) {
        c->keyed = true;
        c->key_tp = l->tp;
        c->key_cp = l->cp;
        c->key_ep = l->ep;
        c->key_mbs = l->mbs;
        memset(c->have_act, 0, sizeof c->have_act);
        memset(c->have_time, 0, sizeof c->have_time);
    }
    const int sp = l->sp, rc = (int)l->recompute;
    if (!c->have_act[sp][rc]) {
        dp_act_layer(c->m, l, &c->act[sp][rc]);
        c->have_act[sp][rc] = true;
    }
    int64_t peak;
    dp_mem_peak_with(c->m, c->cl, l, c->o, &c->act[sp][rc], &peak, NULL, NULL);
    if (c->lowest_peak < 0 || peak < c->lowest_peak) {
        c->lowest_peak = peak;
        c->lowest = *l;
    }
    if (peak > c->cap)
        return 0;
    if (!c->have_time[sp]) {
        dp_time_layer(c->m, c->cl, l, &c->lt[sp]);
        c->have_time[sp] = true;
    }
    struct dp_step_cost sc;
    dp_time_step_with(c->m, c->cl, l, &c->lt[sp], &sc);
    double cost = sc.step_time_s;
    if (!c->found || cost < c->best_cost || (cost == c->best_cost && peak < c->best_peak)) {
        c->found = true;
        c->best_cost = cost;
        c->best = *l;
        c->best_peak = peak;
    }
    return 0;
}

int dp_plan_min_gpus(const struct dp_model *m, const struct dp_cluster *cl,
                     const struct dp_layout *base, bool base_gbs_fixed, const struct dp_mem_opts *o,
                     int max_gpus, struct dp_min_gpus *out, struct dp_err *err)
{
    memset(out, 0, sizeof *out);
    out->best_peak_bytes = -1;
    int gpn = cl->gpus_per_node;
    int count = 0;
    for (int step = 0;; step++) {
        /* 1, 2, 4, ... within a node, then whole nodes. */
        if (count < gpn) {
            count = count == 0 ? 1 : count * 2;
            if (count > gpn)
                count = gpn;
            if (gpn % count)
                continue;
        } else {
            count += gpn;
        }
        if (count > max_gpus)
            break;
        struct dp_cluster c2 = dp__cluster_with_gpus(cl, count);
        struct min_ctx ctx = {
            .m = m, .cl = &c2, .o = o, .cap = dp_gpu_usable_bytes(&cl->gpu), .lowest_peak = -1};
        dp__enum_memory_layouts(m, count, c2.gpus_per_node, base, base_gbs_fixed, try_layout, &ctx);
        out->layouts_tried += ctx.tried;
        if (ctx.lowest_peak >= 0) {
            out->best_peak_bytes = ctx.lowest_peak;
            out->best_layout = ctx.lowest;
        }
        if (ctx.found) {
            out->found = true;
            out->gpus = count;
            out->nodes = count >= gpn ? count / gpn : 0;
            out->layout = ctx.best;
            out->peak_bytes = ctx.best_peak;
            return 0;
        }
    }
    (void)err;
    return 0;
}
