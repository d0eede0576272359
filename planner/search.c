/*
 * The exhaustive layout search: every valid (tp, cp, pp, vpp, split, dp, ep,
 * mbs, ZeRO, recompute, sp) for a model on a cluster, memory first, then time,
 * keeping the best K and the best per value of each dimension.
 *
 * Speed comes from structure, not pruning heuristics: the per-layer time and
 * activation bytes depend only on (tp, cp, mbs, sp, ep), so they are computed
 * once per such tuple and layer kind (dense, MoE) and reused for every
 * pipeline/data-parallel/ZeRO/recompute choice; each stage is charged for the
 * kinds it holds. The memory check (cheaper) runs before the time model.
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
    o->gemm = DP_GEMM_DEFAULT;
    o->fp8_recipe = DP_FP8_DELAYED;
    o->tp_overlap = o->overlap_param_gather = o->pp_overlap = -1;
    o->flash_attn = true;
    o->dp_overlap = true;
    o->optimizer = DP_OPT_ADAM;
    o->moe_imbalance = DP_MOE_IMBALANCE_DEFAULT;
    o->shard_group = -1;
    o->schedule = -1;
    dp_mem_opts_default(&o->mem);
}

int64_t dp_search_capacity(const struct dp_cluster *cl, const struct dp_search_opts *o)
{
    return dp_mem_within_margin(dp_gpu_usable_bytes(&cl->gpu), o->memory_margin);
}

bool dp__tp_divides(const struct dp_model *m, int tp, int etp)
{
    if (m->heads % tp || m->kv_heads % tp)
        return false;
    if ((m->experts == 0 || m->moe_dense_layers > 0) && m->ffn_hidden % tp)
        return false;
    if (m->moe_shared_experts > 0 && m->moe_shared_ffn_hidden % tp)
        return false;
    return m->experts == 0 || m->moe_ffn_hidden % (etp ? etp : tp) == 0;
}

int dp_recompute_choices(enum dp_framework fw, int out[DP_RECOMPUTES])
{
    int n = 0;
    out[n++] = DP_RECOMPUTE_NONE;
    if (fw == DP_FW_MEGATRON)
        out[n++] = DP_RECOMPUTE_SELECTIVE;
    if (fw == DP_FW_TORCHTITAN)
        out[n++] = DP_RECOMPUTE_OP;
    out[n++] = DP_RECOMPUTE_FULL;
    return n;
}

bool dp__zero_offered(enum dp_framework fw, int zero, int pp, int cp, enum dp_optimizer opt)
{
    /* Megatron-Core's Muon: DDP or the layer-wise distributed optimizer, no Megatron-FSDP */
    if (opt == DP_OPT_MUON && fw == DP_FW_MEGATRON && zero >= 2)
        return false;
    switch (fw) {
    case DP_FW_TORCHTITAN: return zero != 1 && !(zero == 0 && cp > 1);
    default: return !(zero >= 2 && pp > 1);
    }
}

int dp__shard_groups(const struct dp_search_opts *o, const struct dp_cluster *cl, int tp, int dpcp,
                     int zero, enum dp_framework fw, int *out, int cap)
{
    int n = 0;
    if (o->shard_group > 0) {
        if (zero >= 1 && dpcp % o->shard_group == 0 &&
            (fw != DP_FW_DEEPSPEED || zero >= 3 || o->shard_group == dpcp))
            out[n++] = o->shard_group;
        return n;
    }
    out[n++] = 0;
    if (o->shard_group == 0 || zero < 1 || (fw == DP_FW_DEEPSPEED && zero < 3))
        return n;
    int g = cl->gpus_per_node / tp;
    if (g < 2)
        g = 2;
    for (; g < dpcp && n < cap; g *= 2)
        if (dpcp % g == 0)
            out[n++] = g;
    return n;
}

void dp__apply_moe_opts(const struct dp_search_opts *o, struct dp_layout *l)
{
    l->etp = o->etp;
    l->moe_capacity = o->moe_capacity;
    l->moe_pad = o->moe_pad;
    l->moe_imbalance = o->moe_imbalance;
    l->moe_dispatcher = o->moe_dispatcher;
    l->moe_routing = o->moe_routing;
    l->ep_overlap = o->ep_overlap;
}

struct search {
    const struct dp_model *m;
    const struct dp_cluster *cl;
    const struct dp_search_opts *o;
    struct dp_search_result *r;
    int64_t cap;
    int gpus;
    /* Why a fixed knob matched nothing at some (tp, cp): said only if no layout is left. */
    int nwhy;
    char why[4][160];
    /* GEMM compute types to try: the fixed one, or bf16 and (on GPUs with FP8 tensor
     * cores that run the recipe) fp8. */
    enum dp_gemm gemms[2];
    int ngemm;
    /* DualPipeV tried beside 1F1B (dpv), or alone (dpv_only): dp_search_opts schedule. */
    bool dpv, dpv_only;
    int rcs[DP_RECOMPUTES], nrc; /* the framework's recompute policies */
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

static void reason(struct search *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void reason(struct search *s, const char *fmt, ...)
{
    char buf[160];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    for (int i = 0; i < s->nwhy; i++)
        if (strcmp(s->why[i], buf) == 0)
            return;
    if (s->nwhy < (int)(sizeof s->why / sizeof s->why[0]))
        snprintf(s->why[s->nwhy++], sizeof s->why[0], "%s", buf);
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

/*
 * One layout up to its pipeline schedule's details: the split, the interleaving degree
 * (vpp) and the schedule, which, among layouts that are otherwise the same, move the step
 * by tenths of a percent when the batch has many micro-batches (the schedule by more with
 * experts: DualPipeV's best and 1F1B's each keep a row under the alternatives).
 */
static bool same_family(const struct dp_layout *a, const struct dp_layout *b)
{
    struct dp_layout x = *a, y = *b;
    x.vpp = y.vpp = 1;
    x.pp_overlap = y.pp_overlap = false; /* on with interleaving, as the search sets it */
    x.schedule = y.schedule = DP_SCHED_1F1B;
    dp_layout_reset_split(&x);
    dp_layout_reset_split(&y);
    return dp_layout_equal(&x, &y);
}

/*
 * The ranking keeps the k best, one row per layout family (same_family) unless
 * o->all_splits: listing each split and interleaving degree of one layout would fill the
 * ranking with it.
 */
static void keep_top(struct search *s, const struct dp_candidate *c)
{
    struct dp_search_result *r = s->r;
    int k = s->o->top_k;
    if (r->n == k && !better(c, &r->top[k - 1]))
        return;
    int i = -1; /* the row c takes before it moves up */
    if (!s->o->all_splits)
        for (int j = 0; j < r->n; j++)
            if (same_family(&c->layout, &r->top[j].layout)) {
                r->folded_splits = true;
                if (!better(c, &r->top[j]))
                    return;
                i = j;
                break;
            }
    if (i < 0)
        i = r->n < k ? r->n++ : k - 1;
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
        case DP_ALT_GEMM:
            snprintf(a->label, sizeof a->label, "precision=%s", dp_gemm_name((enum dp_gemm)value));
            break;
        case DP_ALT_SCHEDULE:
            snprintf(a->label, sizeof a->label, "schedule=%s",
                     dp_pp_schedule_name((enum dp_pp_schedule)value));
            break;
        }
        a->found = true;
        a->best = *c;
    }
}

static void evaluate(struct search *s, const struct dp_layout *l,
                     const struct dp_layer_time lt[DP_LAYER_KINDS],
                     const struct dp_act_layer al[DP_LAYER_KINDS], struct dp_reuse *ru)
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
    if (!dp_step_cost_sane(&c.cost)) {
        /* A bug of the cost model: never rank it (a negative time would win). */
        r->fitting--;
        r->bad_time++;
        note(s, "layouts whose predicted step time is not a positive number were skipped "
                "(a bug of dplan's cost model; please report it)");
        return;
    }
    if (s->o->on_fit)
        s->o->on_fit(&c, s->o->on_fit_ctx);
    keep_top(s, &c);
    keep_alt(s, DP_ALT_TP, l->tp, &c);
    keep_alt(s, DP_ALT_PP, l->pp, &c);
    keep_alt(s, DP_ALT_RECOMPUTE, (int)l->recompute, &c);
    keep_alt(s, DP_ALT_ZERO, l->zero, &c);
    if (l->cp > 1 || s->o->cp == 0)
        keep_alt(s, DP_ALT_CP, l->cp, &c);
    keep_alt(s, DP_ALT_VPP, l->vpp > 1, &c);
    if (s->dpv && !s->dpv_only)
        keep_alt(s, DP_ALT_SCHEDULE, (int)l->schedule, &c);
    if (s->ngemm > 1)
        keep_alt(s, DP_ALT_GEMM, (int)dp_layout_gemm(l), &c);
}

/* One candidate split unless it is even (stored as nchunks 0 already) or a duplicate. */
static int add_split(struct dp__split *out, int n, const int *c, int S)
{
    bool even = true;
    for (int x = 1; x < S; x++)
        even &= c[x] == c[0];
    if (even)
        return n;
    for (int i = 0; i < n; i++) {
        if (out[i].nchunks != S)
            continue;
        bool same = true;
        for (int x = 0; x < S && same; x++)
            same = out[i].c[x] == c[x];
        if (same)
            return n;
    }
    out[n].nchunks = S;
    for (int x = 0; x < S; x++)
        out[n].c[x] = (uint16_t)c[x];
    return n + 1;
}

/* The pipeline splits tried for (pp, vpp) under the framework: see internal.h. */
int dp__pipeline_splits(int L, int pp, int vpp, bool no_uneven, int head_w, enum dp_framework fw,
                        struct dp__split *out)
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
    if (pp == 1 || no_uneven || vpp > DP_SEARCH_MAX_UNEVEN_VPP || fw == DP_FW_DEEPSPEED)
        return n;
    int c[DP_MAX_CHUNKS];
    if (fw == DP_FW_TORCHTITAN) {
        /* What torchtitan's job config names: pipeline_parallel_layers_per_stage k for
         * every chunk, the first and the last chunk first/last_stage_less_layers fewer,
         * and only where torchtitan's own rule gives the same counts back (as
         * export/torchtitan.c requires). */
        int k0 = (L + S - 1) / S;
        for (int k = k0; k <= k0 + 1 && S > 2; k++)
            for (int a = 0; a <= S * k - L; a++) {
                int b = S * k - L - a, back[DP_MAX_CHUNKS];
                if (a > k || b > k)
                    continue;
                for (int x = 0; x < S; x++)
                    c[x] = k;
                c[0] = k - a;
                c[S - 1] = k - b;
                struct dp_err e = {0};
                bool ok =
                    dp_split_check(c, S, L, pp, vpp, "split", DP_EINFEASIBLE, &e) == 0 &&
                    dp_split_torchtitan(L, pp, vpp, a, b, back, "split", DP_EINFEASIBLE, &e) == 0;
                for (int x = 0; ok && x < S; x++)
                    ok = back[x] == c[x];
                if (ok)
                    n = add_split(out, n, c, S);
            }
        return n;
    }
    for (int k = 0; k < 2 * nab; k++) {
        if (dp_split_balanced(L, pp, vpp, ab[k / 2][0], ab[k / 2][1], k % 2, c))
            continue;
        n = add_split(out, n, c, S);
    }
    return n;
}

/* The multiple of `unit` nearest `gbs` (ties upward), at least one unit. */
static int64_t nearest_multiple(int64_t gbs, int64_t unit)
{
    int64_t k = (gbs + unit / 2) / unit;
    return (k < 1 ? 1 : k) * unit;
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

/*
 * The second pass, run only when nothing fits at the requested batch: a layout whose
 * mbs x dp does not divide it is checked for memory at the nearest batch it divides,
 * so that "fits no layout" never hides a batch that would work.
 */
static void evaluate_other_batch(struct search *s, const struct dp_layout *l,
                                 const struct dp_act_layer al[DP_LAYER_KINDS])
{
    struct dp_search_result *r = s->r;
    int64_t peak, min;
    int stage;
    dp_mem_peak_with(s->m, s->cl, l, &s->o->mem, al, &peak, &min, &stage);
    if (peak > s->cap)
        return;
    int64_t d = llabs(l->gbs - s->o->gbs), best = llabs(r->alt_gbs - s->o->gbs);
    if (r->alt_gbs == 0 || d < best || (d == best && l->gbs < r->alt_gbs) ||
        (l->gbs == r->alt_gbs && peak < r->alt_peak)) {
        r->alt_gbs = l->gbs;
        r->alt_layout = *l;
        r->alt_peak = peak;
    }
}

/*
 * One pipeline layout (its split and schedule set) under every ZeRO stage, shard group and
 * recompute policy the framework offers. The schedule's time and the activations do not
 * depend on ZeRO: ru keeps them per recompute policy, reset here for each pipeline layout.
 */
static void evaluate_state(struct search *s, struct dp_layout *l, bool other_batch,
                           const struct dp_layer_time lts[DP_LAYER_KINDS],
                           struct dp_act_layer act[DP_RECOMPUTES][DP_LAYER_KINDS],
                           struct dp_reuse ru[DP_RECOMPUTES])
{
    const struct dp_search_opts *o = s->o;
    const enum dp_framework fw = o->framework;
    for (int k = 0; k < DP_RECOMPUTES; k++)
        ru[k].have_pipe = ru[k].have_act = false;
    for (int zero = 0; zero <= 3; zero++) {
        if (o->zero >= 0 && zero != o->zero)
            continue;
        if (!dp__zero_offered(fw, zero, l->pp, l->cp, o->optimizer))
            continue;
        if (zero > 0 && l->dp * l->cp == 1)
            break;
        int sgs[12];
        int nsg = dp__shard_groups(o, s->cl, l->tp, l->dp * l->cp, zero, fw, sgs, 12);
        for (int gi = 0; gi < nsg; gi++)
            for (int i = 0; i < s->nrc; i++) {
                int rc = s->rcs[i];
                if (o->recompute >= 0 && rc != o->recompute)
                    continue;
                if (o->ep_overlap && rc == DP_RECOMPUTE_FULL)
                    continue;
                l->zero = zero;
                l->shard_group = sgs[gi];
                l->recompute = (enum dp_recompute)rc;
                if (other_batch)
                    evaluate_other_batch(s, l, act[rc]);
                else
                    evaluate(s, l, lts, act[rc], &ru[rc]);
            }
    }
}

/* Every layout of the search space; `other_batch` selects the second pass. */
static void enumerate(struct search *s, const struct dp_layout *base, bool other_batch,
                      char *nosplit)
{
    const struct dp_model *m = s->m;
    const struct dp_cluster *cl = s->cl;
    const struct dp_search_opts *o = s->o;
    const int gpus = s->gpus, gpn = cl->gpus_per_node, L = (int)m->layers;
    const enum dp_framework fw = o->framework;
    const int nrc = s->nrc, *rcs = s->rcs;
    /* A fixed degree is tried as given (any integer); free ones as powers of two. */
    for (int tp = o->tp ? o->tp : 1; tp <= (o->tp ? o->tp : gpus); tp *= 2) {
        if (tp > gpn) {
            note(s, "tp=%d: crosses nodes (%d GPUs per node); TP needs the intra-node link", tp,
                 gpn);
            break;
        }
        if (gpn % tp || gpus % tp) {
            note(s, "tp=%d: does not divide the %d GPUs of a node", tp, gpn);
            continue;
        }
        if (!dp__tp_divides(m, tp, o->etp)) {
            note(s, "tp=%d: does not divide heads=%lld, kv_heads=%lld and the MLP widths", tp,
                 (long long)m->heads, (long long)m->kv_heads);
            continue;
        }
        for (int cp = o->cp ? o->cp : 1; cp <= (o->cp ? o->cp : gpus / tp); cp *= 2) {
            if ((gpus / tp) % cp) {
                if (o->cp)
                    reason(s, "cp=%d: divides no count of GPUs that a tp leaves of the %d", cp,
                           gpus);
                break;
            }
            if (cp > 1 && o->seq_len % (2 * cp)) {
                note(s, "cp=%d: seq_len=%lld is not divisible by 2*cp", cp, (long long)o->seq_len);
                break;
            }
            if (cp > 1 && !o->flash_attn) {
                note(s, "cp>1: context parallelism needs flash attention");
                break;
            }
            if (cp > 1 && fw == DP_FW_DEEPSPEED) {
                note(s, "cp>1: deepspeed has no ring context parallelism (Ulysses is all-to-all)");
                break;
            }
            const int rest = gpus / (tp * cp);
            if (o->pp && (rest % o->pp || o->pp > L || o->pp > DP_MAX_PP))
                reason(s, "pp=%d: %s", o->pp,
                       o->pp > L           ? "more stages than layers"
                       : o->pp > DP_MAX_PP ? "more stages than dplan models"
                                           : "divides no count of GPUs that a tp x cp leaves");
            if (o->dp && (rest % o->dp))
                reason(s, "dp=%d: divides no count of GPUs that a tp x cp leaves of the %d", o->dp,
                       gpus);
            for (int64_t mbs = o->mbs ? o->mbs : 1; mbs <= (o->mbs ? o->mbs : o->max_mbs);
                 mbs *= 2) {
                if (!o->mbs && mbs > o->gbs)
                    break;
                for (int sp = 0; sp <= (tp > 1); sp++) {
                    if (o->sp >= 0 && sp != o->sp && tp > 1)
                        continue;
                    if (sp && (o->seq_len % tp || o->framework == DP_FW_DEEPSPEED))
                        continue;
                    int64_t emax = m->experts > 0 ? m->experts : 1;
                    if (o->ep && (emax % o->ep || o->ep > emax))
                        reason(s,
                               m->experts ? "ep=%d: does not divide the model's %lld experts"
                                          : "ep=%d: the model has no experts (%lld)",
                               o->ep, (long long)m->experts);
                    const int64_t etp = o->etp ? o->etp : tp;
                    for (int ge = 0; ge < s->ngemm * emax; ge++) {
                        int gi = (int)(ge / emax), ep = (int)(ge % emax) + 1;
                        if (emax % ep || (o->ep && ep != o->ep))
                            continue;
                        /* Megatron-Core: expert with tensor parallelism needs SP. */
                        if (ep > 1 && tp > 1 && !sp)
                            continue;
                        /* --ep-overlap fixes the EP all-to-all overlap, so only the layouts
                         * that can run it (core/layout.c's checks, Megatron-Core's): ep > 1,
                         * an interleaved pipeline when pp > 1, recompute other than full. */
                        if (o->ep_overlap && ep < 2)
                            continue;
                        struct dp_layout l = *base;
                        l.gemm = s->gemms[gi];
                        l.fp8_params = l.gemm == DP_GEMM_FP8 && o->fp8_params;
                        l.fp8_output = o->fp8_output && dp_layout_mxfp8(&l);
                        l.fp8_attention = o->fp8_attention && l.gemm == DP_GEMM_FP8;
                        l.tp = tp;
                        l.cp = cp;
                        l.mbs = mbs;
                        l.sp = sp;
                        l.ep = ep;
                        l.tp_overlap = o->tp_overlap != 0 && sp && tp > 1;
                        l.dp = rest; /* for the paths; fixed below per pp */
                        l.pp = 1;
                        struct dp_layer_time lts[DP_LAYER_KINDS], lts_dpv[DP_LAYER_KINDS];
                        dp_time_layer(m, cl, &l, lts);
                        /* DualPipeV's MoE layers pair their passes' all-to-alls (ep_pair) */
                        if (s->dpv && m->experts > 0) {
                            l.schedule = DP_SCHED_DUALPIPEV;
                            dp_time_layer(m, cl, &l, lts_dpv);
                            l.schedule = DP_SCHED_1F1B;
                        } else if (s->dpv) {
                            memcpy(lts_dpv, lts, sizeof lts_dpv);
                        }
                        /* The output layer and loss in layers (of the last layer's kind) of
                         * forward + backward time, for the splits that unload the last
                         * stage. */
                        const struct dp_layer_time *lt = &lts[dp_model_layer_kind(m, L - 1)];
                        double layer_fb = 3 * lt->gemm_f + lt->attn_f + lt->attn_b + 3 * lt->ew_f +
                                          lt->cast_f + lt->cast_b + lt->tp_f + lt->tp_b + lt->cp_f +
                                          lt->cp_b + lt->ep_f + lt->ep_b;
                        double head_fb = lt->head_f + lt->head_b + lt->head_tp_f + lt->head_tp_b +
                                         o->mtp_layers * (layer_fb + lt->mtp_f + lt->mtp_b);
                        int head_w = layer_fb > 0 ? (int)(head_fb / layer_fb) : 0;
                        if (head_w > 64)
                            head_w = 64;
                        struct dp_act_layer act[DP_RECOMPUTES][DP_LAYER_KINDS];
                        struct dp_reuse ru[DP_RECOMPUTES];
                        for (int i = 0; i < nrc; i++) {
                            l.recompute = (enum dp_recompute)rcs[i];
                            dp_act_layers(m, &l, act[rcs[i]]);
                        }
                        for (int pp = 1; pp <= rest && pp <= L && pp <= DP_MAX_PP; pp++) {
                            if (rest % pp || (o->pp && pp != o->pp))
                                continue;
                            int dp = rest / pp;
                            if (o->dp && dp != o->dp)
                                continue;
                            if (m->experts && ((int64_t)tp * cp * dp) % (ep * etp))
                                continue;
                            int64_t gbs = o->gbs;
                            if (gbs % (mbs * dp)) {
                                if (!other_batch) {
                                    /* the part of mbs x dp the batch lacks, for the hint */
                                    int64_t lack = mbs * dp / gcd64(mbs * dp, gbs);
                                    s->r->gbs_lacks = gcd64(s->r->gbs_lacks, lack);
                                    continue;
                                }
                                gbs = nearest_multiple(gbs, mbs * dp);
                            } else if (other_batch) {
                                continue; /* evaluated in the first pass */
                            }
                            int64_t M = gbs / (mbs * dp);
                            /* a fixed local batch: whole micro-batches per schedule, whole
                             * schedules per step (dp_layout_validate) */
                            if (o->local_batch > 0 && pp > 1) {
                                if (!dp_local_batch_fits(o->local_batch, mbs, M * mbs))
                                    continue;
                                M = o->local_batch / mbs; /* one schedule's */
                            }
                            int vmax = pp == 1 ? 1 : (L + 2) / pp;
                            if (vmax > DP_MAX_CHUNKS / pp)
                                vmax = DP_MAX_CHUNKS / pp;
                            bool any = false;
                            for (int vpp = 1; vpp <= vmax; vpp++) {
                                if (o->vpp && vpp != o->vpp)
                                    continue;
                                if (vpp > 1 && M % pp)
                                    continue;
                                if (o->ep_overlap && pp > 1 && vpp < 2)
                                    continue;
                                /* DeepSpeed's pipeline engine has no interleaving. */
                                if (vpp > 1 && fw == DP_FW_DEEPSPEED)
                                    continue;
                                struct dp__split sp_[DP_MAX_SPLITS];
                                int nsplit = s->dpv_only
                                                 ? 0
                                                 : dp__pipeline_splits(L, pp, vpp, o->no_uneven,
                                                                       head_w, fw, sp_);
                                any |= nsplit > 0;
                                for (int si = 0; si < nsplit; si++) {
                                    l.pp = pp;
                                    l.dp = dp;
                                    l.vpp = vpp;
                                    l.pp_overlap = o->pp_overlap != 0 && vpp > 1;
                                    l.gbs = gbs;
                                    l.nchunks = sp_[si].nchunks;
                                    memcpy(l.chunk_layers, sp_[si].c,
                                           sizeof l.chunk_layers[0] * (size_t)sp_[si].nchunks);
                                    evaluate_state(s, &l, other_batch, lts, act, ru);
                                }
                            }
                            /* DualPipeV: two stages a rank in a V, over the splits the
                             * 1F1B search tries at vpp 2 (model order: stage 0 has the
                             * embedding, stage 2 pp - 1 the loss, both on rank 0), at least
                             * 2 pp micro-batches and a multiple of pp (core/layout.c). */
                            if (s->dpv && pp >= 2 && 2 * pp <= DP_MAX_CHUNKS) {
                                struct dp__split sv[DP_MAX_SPLITS];
                                int nv =
                                    dp__pipeline_splits(L, pp, 2, o->no_uneven, head_w, fw, sv);
                                any |= nv > 0;
                                l.schedule = DP_SCHED_DUALPIPEV;
                                for (int si = 0; M >= 2LL * pp && M % pp == 0 && si < nv; si++) {
                                    l.pp = pp;
                                    l.dp = dp;
                                    l.vpp = 2;
                                    l.pp_overlap = o->pp_overlap != 0;
                                    l.gbs = gbs;
                                    l.nchunks = sv[si].nchunks;
                                    memcpy(l.chunk_layers, sv[si].c,
                                           sizeof l.chunk_layers[0] * (size_t)sv[si].nchunks);
                                    evaluate_state(s, &l, other_batch, lts_dpv, act, ru);
                                }
                                l.schedule = DP_SCHED_1F1B;
                            }
                            if (!any && pp < DP_MAX_PP + 1)
                                nosplit[pp] = 1;
                        }
                    }
                }
            }
        }
    }
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
    int rc = dp_model_check_seq_len(m, o->seq_len, err);
    if (rc) {
        dp_err_prefix(err, "%s", m->name);
        return rc;
    }
    struct search s = {.m = m,
                       .cl = cl,
                       .o = o,
                       .r = r,
                       .gpus = dp_cluster_gpus(cl),
                       .cap = dp_search_capacity(cl, o)};
    const int gpus = s.gpus, L = (int)m->layers;
    s.nrc = dp_recompute_choices(o->framework, s.rcs);
    if (o->schedule == DP_SCHED_DUALPIPEV && o->framework != DP_FW_TORCHTITAN)
        return dp_err_set(err, DP_EUSAGE,
                          "--pipeline-schedule dualpipev: PyTorch's ScheduleDualPipeV (torchtitan "
                          "framework); %s runs 1F1B",
                          dp_framework_name(o->framework));
    /* DualPipeV under torchtitan, unless a knob it cannot run with is fixed: MTP (Megatron's),
     * Megatron's EP overlap, or an interleaving degree other than its 2. */
    s.dpv = o->framework == DP_FW_TORCHTITAN && o->schedule != DP_SCHED_1F1B &&
            o->mtp_layers == 0 && !o->ep_overlap && (!o->vpp || o->vpp == 2) &&
            (!o->pp || o->pp >= 2);
    s.dpv_only = o->schedule == DP_SCHED_DUALPIPEV;
    if (s.dpv_only && !s.dpv) {
        if (o->vpp && o->vpp != 2)
            return dp_err_set(err, DP_EUSAGE,
                              "--pipeline-schedule dualpipev: expected vpp 2 (two stages a rank "
                              "in a V), got --vpp %d",
                              o->vpp);
        if (o->pp == 1)
            return dp_err_set(err, DP_EUSAGE,
                              "--pipeline-schedule dualpipev: expected pp >= 2, got --pp 1");
        return dp_err_set(err, DP_EUSAGE, "--pipeline-schedule dualpipev: expected %s",
                          o->mtp_layers ? "no multi-token prediction (Megatron's --mtp-layers)"
                                        : "no --ep-overlap (Megatron's pairing)");
    }
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
    base.fp8_recipe = o->fp8_recipe;
    base.framework = o->framework;
    if (o->grad_fp32 < 0 && o->framework == DP_FW_DEEPSPEED)
        base.grad_fp32 = false; /* the model dtype: DeepSpeed's default */
    base.loss = o->loss;
    base.loss_chunks = o->loss_chunks;
    base.local_batch = o->local_batch;
    base.mtp_layers = o->mtp_layers;
    base.fsdp_per_microbatch = o->fsdp_per_microbatch;
    base.overlap_param_gather =
        o->overlap_param_gather >= 0 ? o->overlap_param_gather == 1 : o->dp_overlap;
    s.gemms[0] = (enum dp_gemm)(o->gemm >= 0 ? o->gemm : DP_GEMM_DEFAULT);
    s.ngemm = 1;
    if (o->gemm >= 0) {
        struct dp_layout g = base;
        g.gemm = s.gemms[0];
        rc = dp_layout_check_gpu(&g, &cl->gpu, "--precision", err);
        if (rc)
            return rc;
    } else {
        struct dp_layout f8 = base;
        f8.gemm = DP_GEMM_FP8;
        if (dp_layout_check_gpu(&f8, &cl->gpu, "fp8", NULL) == 0)
            s.gemms[s.ngemm++] = DP_GEMM_FP8;
    }
    dp__apply_moe_opts(o, &base);

    char nosplit[DP_MAX_PP + 1] = {0};
    enumerate(&s, &base, false, nosplit);
    if (r->n == 0)
        enumerate(&s, &base, true, nosplit);
    char list[128] = "";
    size_t len = 0;
    int shown = 0;
    for (int pp = 2; pp <= DP_MAX_PP && len < sizeof list - 16; pp++)
        if (nosplit[pp] && shown++ < 8)
            len += (size_t)snprintf(list + len, sizeof list - len, "%s%d", len ? "," : "", pp);
    if (shown)
        note(&s, "pp=%s%s: %d layers do not split evenly into %s%s", list, shown > 8 ? ",..." : "",
             L, s.dpv_only ? "2 x pp stages (dualpipev)" : "that many stages",
             o->no_uneven ? " (--no-uneven)" : "");
    if (r->evaluated == 0 && r->alt_gbs) {
        char lay[160], lack[64] = "";
        dp_layout_format_model(&r->alt_layout, m, lay, sizeof lay);
        if (r->gbs_lacks > 1)
            snprintf(lack, sizeof lack, "; every layout here needs a factor of %lld",
                     (long long)r->gbs_lacks);
        return dp_err_set(err, DP_EINFEASIBLE,
                          "no layout of %s on %d GPUs divides the global batch %lld (it must be "
                          "a multiple of mbs x dp%s): --gbs %lld fits %s",
                          m->name, gpus, (long long)o->gbs, lack, (long long)r->alt_gbs, lay);
    }
    if (r->evaluated == 0) {
        /* Nothing to evaluate even at another batch: the fixed knobs or the model rule it
         * out; the pruning notes say how. */
        char why[512] = "";
        size_t n = 0;
        for (int i = 0; i < r->nnotes && n < sizeof why; i++)
            n += (size_t)snprintf(why + n, sizeof why - n, "%s%s", n ? "; " : "", r->notes[i]);
        for (int i = 0; i < s.nwhy && n < sizeof why; i++)
            n += (size_t)snprintf(why + n, sizeof why - n, "%s%s", n ? "; " : "", s.why[i]);
        return dp_err_set(err, DP_EINFEASIBLE, "no layout of %s on %d GPUs: %s", m->name, gpus,
                          n ? why
                            : "the fixed knobs leave no layout whose tp x cp x pp x dp is the "
                              "GPU count");
    }
    for (int i = 0; i < r->n; i++)
        dp_time_describe_paths(cl, &r->top[i].layout, &r->top[i].cost);
    return 0;
}
