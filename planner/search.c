/*
 * The exhaustive layout search: every valid (tp, cp, pp, vpp, split, dp, ep,
 * mbs, ZeRO, recompute, sp) for a model on a cluster, memory first, then time,
 * keeping the best K and the best per value of each dimension.
 *
 * Speed comes from structure, not pruning heuristics: the per-layer time and
 * activation bytes depend only on (tp, cp, mbs, sp, ep), so they are computed
 * once per such tuple and reused for every pipeline/data-parallel/ZeRO/
 * recompute choice; the memory check (cheaper) runs before the time model.
 */
#include "internal.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void dp_search_opts_default(struct dp_search_opts *o)
{
    memset(o, 0, sizeof *o);
    o->top_k = 10;
    o->max_mbs = 64;
    o->zero = -1;
    o->recompute = -1;
    o->sp = -1;
    o->grad_fp32 = -1;
    o->precision = DP_BF16;
    o->flash_attn = true;
    o->dp_overlap = true;
    o->optimizer = DP_OPT_ADAM;
    dp_mem_opts_default(&o->mem);
}

struct search {
    const struct dp_model *m;
    const struct dp_cluster *cl;
    const struct dp_search_opts *o;
    struct dp_search_result *r;
    int64_t cap;
    int gpus;
};

static void note(struct search *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void note(struct search *s, const char *fmt, ...)
{
    char buf[160];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    for (int i = 0; i < s->r->nnotes; i++)
        if (strcmp(s->r->notes[i], buf) == 0)
            return;
    if (s->r->nnotes < DP_MAX_NOTES)
        snprintf(s->r->notes[s->r->nnotes++], sizeof s->r->notes[0], "%s", buf);
}

/*
 * The ranking score: step time, nudged by memory imbalance across stages
 * (spread = (peak - smallest) / peak, at most 1% of the time). A total order, so
 * balance decides only between layouts within about that much of each other.
 */
static double score(const struct dp_candidate *c)
{
    double spread = c->peak_bytes > 0 ? (double)(c->peak_bytes - c->min_bytes) / c->peak_bytes : 0;
    return c->cost.step_time_s * (1.0 + 0.01 * spread);
}

static bool better(const struct dp_candidate *a, const struct dp_candidate *b)
{
    return score(a) < score(b);
}

static void keep_top(struct search *s, const struct dp_candidate *c)
{
    struct dp_search_result *r = s->r;
    int k = s->o->top_k;
    if (r->n == k && !better(c, &r->top[k - 1]))
        return;
    int i = r->n < k ? r->n++ : k - 1;
    while (i > 0 && better(c, &r->top[i - 1])) {
        r->top[i] = r->top[i - 1];
        i--;
    }
    r->top[i] = *c;
}

static void keep_alt(struct search *s, enum dp_alt_dim dim, int value, const struct dp_candidate *c)
{
    struct dp_search_result *r = s->r;
    for (int i = 0; i < r->nalt; i++)
        if (r->alt[i].dim == dim && r->alt[i].value == value) {
            if (better(c, &r->alt[i].best))
                r->alt[i].best = *c;
            return;
        }
    if (r->nalt < (int)(sizeof r->alt / sizeof r->alt[0])) {
        struct dp_alternative *a = &r->alt[r->nalt++];
        a->dim = dim;
        a->value = value;
        switch (dim) {
        case DP_ALT_TP: snprintf(a->label, sizeof a->label, "tp=%d", value); break;
        case DP_ALT_PP: snprintf(a->label, sizeof a->label, "pp=%d", value); break;
        case DP_ALT_RECOMPUTE:
            snprintf(a->label, sizeof a->label, "recompute=%s",
                     dp_recompute_name((enum dp_recompute)value));
            break;
        case DP_ALT_ZERO: snprintf(a->label, sizeof a->label, "zero=%d", value); break;
        case DP_ALT_CP: snprintf(a->label, sizeof a->label, "cp=%d", value); break;
        case DP_ALT_VPP: snprintf(a->label, sizeof a->label, "vpp=%s", value ? "on" : "off"); break;
        }
        a->found = true;
        a->best = *c;
    }
}

static void evaluate(struct search *s, const struct dp_layout *l, const struct dp_layer_time *lt,
                     const struct dp_act_layer *al, struct dp_reuse *ru)
{
    struct dp_search_result *r = s->r;
    r->evaluated++;
    struct dp_candidate c;
    dp_mem_peak_reuse(s->m, s->cl, l, &s->o->mem, al, ru, &c.peak_bytes, &c.min_bytes,
                      &c.peak_stage);
    if (c.peak_bytes > s->cap) {
        r->oom++;
        if (r->lowest_peak < 0 || c.peak_bytes < r->lowest_peak) {
            r->lowest_peak = c.peak_bytes;
            r->lowest_layout = *l;
        }
        return;
    }
    r->fitting++;
    c.layout = *l;
    dp_time_step_reuse(s->m, s->cl, l, lt, ru, &c.cost);
    keep_top(s, &c);
    keep_alt(s, DP_ALT_TP, l->tp, &c);
    keep_alt(s, DP_ALT_PP, l->pp, &c);
    keep_alt(s, DP_ALT_RECOMPUTE, (int)l->recompute, &c);
    keep_alt(s, DP_ALT_ZERO, l->zero, &c);
    if (l->cp > 1 || s->o->cp == 0)
        keep_alt(s, DP_ALT_CP, l->cp, &c);
    keep_alt(s, DP_ALT_VPP, l->vpp > 1, &c);
}

/*
 * The pipeline splits tried for (pp, vpp): the even one when L divides into the pp x vpp
 * model chunks, and dplan's balanced family (dp_split_balanced, core/split.c) with the
 * embedding and the loss weighing a and b layers, a, b in {0, 1, 2} without
 * interleaving and {0, 1} with it: the first and last stages one or two layers lighter
 * (Megatron's --decoder-first/last-pipeline-num-layers and --account-for-*-in-pipeline-
 * split are members when the rest divides), the remainder of a count that does not
 * divide spread one layer per GPU. Duplicates are dropped; the cost model ranks the rest.
 * Returns the count written to out (at most 9); an even split is stored as nchunks 0.
 */
#define DP_SEARCH_MAX_UNEVEN_VPP 16

struct split {
    int nchunks;
    uint16_t c[DP_MAX_CHUNKS];
};

static int splits(int L, int pp, int vpp, bool no_uneven, int head_w, struct split *out)
{
    /* (a, b): without interleaving both 0..2; with it (0, 0), (0, 1), (1, 1); and the
     * loss weighing what the output layer and loss cost (head_w layers, rounded either
     * way: it is the heavy end) */
    int ab[16][2], nab = 0;
    int amax = vpp == 1 ? 2 : 1;
    for (int a = 0; a <= amax; a++)
        for (int b = 0; b <= amax; b++)
            if (vpp == 1 || b >= a)
                ab[nab][0] = a, ab[nab++][1] = b;
    for (int a = 0; a <= 1; a++)
        for (int b = head_w; b <= head_w + 1; b++)
            if (b > amax)
                ab[nab][0] = a, ab[nab++][1] = b;
    int S = pp * vpp, n = 0;
    if (S > DP_MAX_CHUNKS)
        return 0;
    if (L % S == 0)
        out[n++].nchunks = 0;
    if (pp == 1 || no_uneven || vpp > DP_SEARCH_MAX_UNEVEN_VPP)
        return n;
    int c[DP_MAX_CHUNKS];
    for (int k = 0; k < 2 * nab; k++) {
        if (dp_split_balanced(L, pp, vpp, ab[k / 2][0], ab[k / 2][1], k % 2, c))
            continue;
        bool even = true;
        for (int x = 1; x < S; x++)
            even &= c[x] == c[0];
        if (even)
            continue; /* the even split, already there */
        bool dup = false;
        for (int i = 0; i < n && !dup; i++) {
            if (out[i].nchunks != S)
                continue;
            bool same = true;
            for (int x = 0; x < S && same; x++)
                same = out[i].c[x] == c[x];
            dup = same;
        }
        if (dup)
            continue;
        out[n].nchunks = S;
        for (int x = 0; x < S; x++)
            out[n].c[x] = (uint16_t)c[x];
        n++;
    }
    return n;
}

int dp_plan_search(const struct dp_model *m, const struct dp_cluster *cl,
                   const struct dp_search_opts *o, struct dp_search_result *r, struct dp_err *err)
{
    memset(r, 0, sizeof *r);
    r->lowest_peak = -1;
    if (o->top_k < 1 || o->top_k > DP_MAX_TOP)
        return dp_err_set(err, DP_EUSAGE, "--top: expected 1..%d, got %d", DP_MAX_TOP, o->top_k);
    if (o->gbs < 1 || o->seq_len < 1)
        return dp_err_set(err, DP_EUSAGE, "global batch and sequence length must be >= 1");
    struct search s = {.m = m,
                       .cl = cl,
                       .o = o,
                       .r = r,
                       .gpus = dp_cluster_gpus(cl),
                       .cap = dp_gpu_usable_bytes(&cl->gpu)};
    const int gpus = s.gpus, gpn = cl->gpus_per_node, L = (int)m->layers;
    const int64_t f = m->experts ? m->moe_ffn_hidden : m->ffn_hidden;
    if (cl->nodes > 1 && cl->nics_per_node < 1)
        return dp_err_set(err, DP_EINFEASIBLE,
                          "%d nodes but no network interfaces per node in the cluster", cl->nodes);

    struct dp_layout base;
    dp_layout_default(&base);
    base.gbs = o->gbs;
    base.seq_len = o->seq_len;
    base.precision = o->precision;
    base.grad_fp32 = o->grad_fp32 >= 0 ? o->grad_fp32 == 1 : o->precision != DP_FP16;
    base.flash_attn = o->flash_attn;
    base.dp_overlap = o->dp_overlap;
    base.optimizer = o->optimizer;

    char nosplit[DP_MAX_PP + 1] = {0};
    for (int tp = 1; tp <= gpus; tp *= 2) {
        if (o->tp && tp != o->tp)
            continue;
        if (tp > gpn) {
            note(&s, "tp=%d: crosses nodes (%d GPUs per node); TP needs the intra-node link", tp,
                 gpn);
            break;
        }
        if (gpn % tp || gpus % tp) {
            note(&s, "tp=%d: does not divide the %d GPUs of a node", tp, gpn);
            continue;
        }
        if (m->heads % tp || m->kv_heads % tp || f % tp) {
            note(&s, "tp=%d: does not divide heads=%lld, kv_heads=%lld and ffn=%lld", tp,
                 (long long)m->heads, (long long)m->kv_heads, (long long)f);
            continue;
        }
        for (int cp = 1; cp <= gpus / tp; cp *= 2) {
            if (o->cp && cp != o->cp)
                continue;
            if ((gpus / tp) % cp)
                break;
            if (cp > 1 && o->seq_len % (2 * cp)) {
                note(&s, "cp=%d: seq_len=%lld is not divisible by 2*cp", cp, (long long)o->seq_len);
                break;
            }
            if (cp > 1 && !o->flash_attn) {
                note(&s, "cp>1: context parallelism needs flash attention");
                break;
            }
            const int rest = gpus / (tp * cp);
            for (int64_t mbs = 1; mbs <= o->max_mbs && mbs <= o->gbs; mbs *= 2) {
                if (o->mbs && mbs != o->mbs)
                    continue;
                for (int sp = 0; sp <= (tp > 1); sp++) {
                    if (o->sp >= 0 && sp != o->sp && tp > 1)
                        continue;
                    if (sp && o->seq_len % tp)
                        continue;
                    int64_t emax = m->experts > 0 ? m->experts : 1;
                    for (int ep = 1; ep <= emax; ep++) {
                        if (emax % ep || (o->ep && ep != o->ep))
                            continue;
                        struct dp_layout l = base;
                        l.tp = tp;
                        l.cp = cp;
                        l.mbs = mbs;
                        l.sp = sp;
                        l.ep = ep;
                        l.dp = rest; /* for the paths; fixed below per pp */
                        l.pp = 1;
                        struct dp_layer_time lt;
                        dp_time_layer(m, cl, &l, &lt);
                        /* The output layer and loss in layers of forward + backward
                         * time, for the splits that unload the last stage. */
                        double layer_fb = 3 * lt.gemm_f + lt.attn_f + lt.attn_b + 3 * lt.ew_f +
                                          lt.tp_f + lt.tp_b + lt.cp_f + lt.cp_b + lt.ep_f + lt.ep_b;
                        double head_fb = lt.head_f + lt.head_b + lt.head_tp_f + lt.head_tp_b;
                        int head_w = layer_fb > 0 ? (int)(head_fb / layer_fb) : 0;
                        if (head_w > 64)
                            head_w = 64;
                        struct dp_act_layer act[3];
                        struct dp_reuse ru[3];
                        for (int rc = 0; rc < 3; rc++) {
                            l.recompute = (enum dp_recompute)rc;
                            dp_act_layer(m, &l, &act[rc]);
                        }
                        for (int pp = 1; pp <= rest && pp <= L && pp <= DP_MAX_PP; pp++) {
                            if (rest % pp || (o->pp && pp != o->pp))
                                continue;
                            int dp = rest / pp;
                            if (o->dp && dp != o->dp)
                                continue;
                            if (ep > 1 && (dp * cp) % ep)
                                continue;
                            if (o->gbs % (mbs * dp))
                                continue;
                            int64_t M = o->gbs / (mbs * dp);
                            int vmax = pp == 1 ? 1 : (L + 2) / pp;
                            if (vmax > DP_MAX_CHUNKS / pp)
                                vmax = DP_MAX_CHUNKS / pp;
                            bool any = false;
                            for (int vpp = 1; vpp <= vmax; vpp++) {
                                if (o->vpp && vpp != o->vpp)
                                    continue;
                                if (vpp > 1 && M % pp)
                                    continue;
                                struct split sp_[32];
                                int nsplit = splits(L, pp, vpp, o->no_uneven, head_w, sp_);
                                any |= nsplit > 0;
                                for (int si = 0; si < nsplit; si++) {
                                    l.pp = pp;
                                    l.dp = dp;
                                    l.vpp = vpp;
                                    l.nchunks = sp_[si].nchunks;
                                    memcpy(l.chunk_layers, sp_[si].c,
                                           sizeof l.chunk_layers[0] * (size_t)sp_[si].nchunks);
                                    /* ZeRO changes neither the schedule nor the
                                     * activations: computed once per recompute mode */
                                    for (int k = 0; k < 3; k++)
                                        ru[k].have_pipe = ru[k].have_act = false;
                                    for (int zero = 0; zero <= 3; zero++) {
                                        if (o->zero >= 0 && zero != o->zero)
                                            continue;
                                        if (zero >= 2 && pp > 1)
                                            break;
                                        if (zero > 0 && dp * cp == 1)
                                            break;
                                        for (int rc = 0; rc < 3; rc++) {
                                            if (o->recompute >= 0 && rc != o->recompute)
                                                continue;
                                            l.zero = zero;
                                            l.recompute = (enum dp_recompute)rc;
                                            evaluate(&s, &l, &lt, &act[rc], &ru[rc]);
                                        }
                                    }
                                }
                            }
                            if (!any && pp < (int)sizeof nosplit)
                                nosplit[pp] = 1;
                        }
                    }
                }
            }
        }
    }
    char list[128] = "";
    size_t len = 0;
    int shown = 0;
    for (int pp = 2; pp <= DP_MAX_PP && len < sizeof list - 16; pp++)
        if (nosplit[pp] && shown++ < 8)
            len += (size_t)snprintf(list + len, sizeof list - len, "%s%d", len ? "," : "", pp);
    if (shown)
        note(&s, "pp=%s%s: %d layers do not split evenly into that many stages%s", list,
             shown > 8 ? ",..." : "", L, o->no_uneven ? " (--no-uneven)" : "");
    if (r->evaluated == 0)
        return dp_err_set(
            err, DP_EINFEASIBLE,
            "no layout of %s on %d GPUs divides: global batch %lld must be a "
            "multiple of mbs x dp for some split (try a --gbs with more factors of 2)",
            m->name, gpus, (long long)o->gbs);
    for (int i = 0; i < r->n; i++)
        dp_time_describe_paths(cl, &r->top[i].layout, &r->top[i].cost);
    return 0;
}
