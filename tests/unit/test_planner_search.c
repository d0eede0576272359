/*
 * The planner's search against brute force. The brute force enumerates the search
 * space from its own table of dimensions and validity rules, written from Megatron-LM's
 * and DeepSpeed's documented constraints and dplan's README (not from planner/search.c):
 * every dimension runs over a superset of its values, each rule filters as soon as the
 * dimensions it reads are set. Every layout it keeps is evaluated with the full memory
 * estimate and the step-time model (not the search's cached per-layer terms). On small
 * cases with cp > 1, ep > 1 (an MoE model), interleaving and FP8, with the even pipeline
 * splits (the search under --no-uneven), the planner must evaluate exactly as many
 * layouts, find exactly the same set fitting, and rank first one of the best; each case
 * must also fit something of every kind it exists to test, so that an empty or shrunken
 * result fails. The uneven splits the search adds by default (core/split.c's balanced
 * family) are checked by test_uneven against every composition of the layers into
 * pp x vpp chunks: nothing beats the exhaustive best, and the planner comes within 0.5%.
 *
 * To extend the space (a new knob, new split rules), add a dimension to `dims` and its
 * rules to `rules`; `key` names every dimension of a layout for the comparison.
 */
#include "check.h"
#include "planner/planner.h"

#include <stdlib.h>

static struct dp_cluster cluster(int nodes, int gpn, double mem_gib)
{
    struct dp_cluster c = {0};
    snprintf(c.gpu.name, sizeof c.gpu.name, "test-gpu");
    for (int i = 0; i < DP_PRECISIONS; i++)
        c.gpu.peak_tflops[i] = 100;
    c.gpu.mem_bytes = (int64_t)(mem_gib * 1073741824.0);
    c.gpu.usable_fraction = 1;
    c.gpu.mem_bw_gbps = 1000;
    c.gpu.runtime_overhead_bytes = 1LL << 30;
    c.gpu.gemm.eff_max = 0.8;
    c.gpu.gemm.half_flops = 1e9;
    c.nodes = nodes;
    c.gpus_per_node = gpn;
    c.intra = (struct dp_link){"nvl", DP_LINK_NVLINK, 200, 2, 0.8, 0};
    c.inter = (struct dp_link){"net", DP_LINK_NET, 25, 5, 0.9, 0};
    c.nics_per_node = gpn;
    return c;
}

static struct dp_model model(void)
{
    struct dp_model m = {0};
    snprintf(m.name, sizeof m.name, "small");
    m.layers = 8;
    m.hidden = 2048;
    m.heads = m.kv_heads = 16;
    m.head_dim = 128;
    m.ffn_hidden = 8192;
    m.vocab = 32000;
    m.seq_len = 2048;
    m.ffn = DP_FFN_SWIGLU;
    m.norm = DP_NORM_RMSNORM;
    m.norms_per_layer = 2;
    return m;
}

/* A DeepSeek-style MoE: 8 layers, the first 2 dense, 8 routed experts (top-2) and a
 * shared one; stages hold different layer kinds, which the search must charge per
 * stage as the full estimate does. */
static struct dp_model moe_model(void)
{
    struct dp_model m = model();
    snprintf(m.name, sizeof m.name, "small-moe");
    m.experts = 8;
    m.top_k = 2;
    m.moe_ffn_hidden = 2048;
    m.moe_shared_experts = 1;
    m.moe_shared_ffn_hidden = 2048;
    m.moe_dense_layers = 2;
    return m;
}

/* ------------------------------------------------------------------ the space */

/* One case: the model, the cluster, the batch; the search's other options are defaults
 * (every knob free, overlaps on where allowed, flash attention, bf16 storage). */
struct space {
    const struct dp_model *m;
    const struct dp_cluster *cl;
    int64_t gbs, seq_len;
    int gpus, L;
    int64_t experts; /* 1 for a dense model */
    bool fp8;        /* the GPU has FP8 tensor cores and an FP8 GEMM curve */
};

enum {
    D_TP,
    D_CP,
    D_PP,
    D_DP,
    D_GEMM,
    D_EP,
    D_SP,
    D_MBS,
    D_FIRST,
    D_LAST,
    D_VPP,
    D_ZERO,
    D_RC,
    D_SG,
    D_N
};

/* A point of the space: one value per dimension (vals[D_TP] = tp, ...). */
struct pt {
    int v[D_N];
};

/* A dimension: the values it runs over (a superset: the rules filter), and where it goes
 * in a layout. */
struct dim {
    const char *name;
    int (*lo)(const struct space *s);
    int (*hi)(const struct space *s);
};

static int one(const struct space *s)
{
    return 1;
}
static int zero(const struct space *s)
{
    return 0;
}
static int gpus(const struct space *s)
{
    return s->gpus;
}
static int gpn(const struct space *s)
{
    return s->cl->gpus_per_node;
}
static int layers(const struct space *s)
{
    return s->L;
}
static int experts(const struct space *s)
{
    return (int)s->experts;
}
static int gemm_hi(const struct space *s)
{
    return s->fp8 ? 1 : 0;
}
static int mbs_hi(const struct space *s)
{
    return 64; /* dp_search_opts_default: max_mbs */
}
static int three(const struct space *s)
{
    return 3;
}
static int two(const struct space *s)
{
    return 2;
}

/* In enumeration order; a rule runs once every dimension up to its `at` is set. */
static const struct dim dims[D_N] = {
    [D_TP] = {"tp", one, gpn},          [D_CP] = {"cp", one, gpus},
    [D_PP] = {"pp", one, gpus},         [D_DP] = {"dp", one, gpus},
    [D_GEMM] = {"gemm", zero, gemm_hi}, [D_EP] = {"ep", one, experts},
    [D_SP] = {"sp", zero, one},         [D_MBS] = {"mbs", one, mbs_hi},
    [D_FIRST] = {"first", zero, zero},  [D_LAST] = {"last", zero, zero}, /* even: r_split */
    [D_VPP] = {"vpp", one, layers},     [D_ZERO] = {"zero", zero, three},
    [D_RC] = {"recompute", zero, two},  [D_SG] = {"shard_group", zero, gpus},
};

static bool pow2(int64_t x)
{
    return x > 0 && (x & (x - 1)) == 0;
}

static int64_t microbatches(const struct space *s, const struct pt *x)
{
    return s->gbs / ((int64_t)x->v[D_MBS] * x->v[D_DP]);
}

/* --- the rules, each with its source --- */

/* dplan README, "dplan suggest": tp runs over powers of two inside a node (TP needs the
 * intra-node link), and must divide the node's GPUs. */
static bool r_tp_node(const struct space *s, const struct pt *x)
{
    int tp = x->v[D_TP];
    return pow2(tp) && tp <= s->cl->gpus_per_node && s->cl->gpus_per_node % tp == 0;
}
/* Megatron-LM arguments.py / transformer_config.py: num_attention_heads and
 * num_query_groups divisible by tp; ColumnParallelLinear divides its output (the MLP
 * width: ffn_hidden of dense layers, moe_ffn_hidden over the expert TP size, which
 * defaults to tp; the shared experts' width) by tp. */
static bool r_tp_divides(const struct space *s, const struct pt *x)
{
    const struct dp_model *m = s->m;
    int64_t tp = x->v[D_TP];
    bool dense = m->experts == 0 || m->moe_dense_layers > 0;
    return m->heads % tp == 0 && m->kv_heads % tp == 0 && (!dense || m->ffn_hidden % tp == 0) &&
           (m->moe_shared_experts == 0 || m->moe_shared_ffn_hidden % tp == 0) &&
           (m->experts == 0 || m->moe_ffn_hidden % tp == 0);
}
/* Megatron-Core context parallelism: the sequence is cut into 2 cp chunks (each rank
 * takes one from each end to balance the causal mask), with Transformer Engine's fused
 * (flash) attention; dplan searches powers of two. */
static bool r_cp(const struct space *s, const struct pt *x)
{
    int cp = x->v[D_CP];
    return pow2(cp) && (cp == 1 || s->seq_len % (2 * cp) == 0);
}
/* Megatron: world size = tp x cp x pp x dp. */
static bool r_world(const struct space *s, const struct pt *x)
{
    return (int64_t)x->v[D_TP] * x->v[D_CP] * x->v[D_PP] * x->v[D_DP] == s->gpus;
}
/* A stage holds at least one layer; dplan models up to DP_MAX_PP stages. */
static bool r_pp(const struct space *s, const struct pt *x)
{
    return x->v[D_PP] <= s->L && x->v[D_PP] <= DP_MAX_PP;
}
/* FP8 GEMMs only on a GPU with FP8 tensor cores and an FP8 efficiency curve. */
static bool r_gemm(const struct space *s, const struct pt *x)
{
    return x->v[D_GEMM] == 0 || s->fp8;
}
/* Megatron MoE: expert_model_parallel_size divides num_moe_experts; the expert data-
 * parallel size world / (pp x ep x etp) is whole, i.e. ep x etp divides tp x cp x dp
 * (etp = tp by default); with expert and tensor parallelism, sequence parallelism is
 * required (arguments.py). Dense models: ep = 1. */
static bool r_ep(const struct space *s, const struct pt *x)
{
    int ep = x->v[D_EP], tp = x->v[D_TP];
    if (s->m->experts == 0)
        return ep == 1;
    return s->experts % ep == 0 &&
           ((int64_t)tp * x->v[D_CP] * x->v[D_DP]) % ((int64_t)ep * tp) == 0;
}
/* Sequence parallelism splits the sequence over the TP ranks: only with tp > 1 (a no-op
 * otherwise, so not a separate layout), seq_len divisible by tp; and needed with ep > 1
 * and tp > 1 (above). */
static bool r_sp(const struct space *s, const struct pt *x)
{
    int tp = x->v[D_TP], sp = x->v[D_SP];
    if (sp)
        return tp > 1 && s->seq_len % tp == 0;
    return !(x->v[D_EP] > 1 && tp > 1);
}
/* Micro-batches: powers of two (dplan README), the global batch a multiple of
 * mbs x dp (Megatron: num_microbatches = gbs / (mbs dp)). */
static bool r_mbs(const struct space *s, const struct pt *x)
{
    int64_t mbs = x->v[D_MBS];
    return pow2(mbs) && s->gbs % (mbs * x->v[D_DP]) == 0;
}
/* Pipeline splits: even ones only (every stage L / pp layers), the space of the search
 * under --no-uneven (o.no_uneven below). The uneven family the search adds by default is
 * checked against every composition of the layers in test_uneven. */
static bool r_split(const struct space *s, const struct pt *x)
{
    return x->v[D_FIRST] == 0 && x->v[D_LAST] == 0 && s->L % x->v[D_PP] == 0;
}
/* Interleaving (Megatron --num-layers-per-virtual-pipeline-stage): pp > 1, each stage's
 * layers divisible into vpp chunks, micro-batches a multiple of pp (schedules.py: the
 * interleaved schedule needs num_microbatches % pp == 0); dplan interleaves even
 * splits only. */
static bool r_vpp(const struct space *s, const struct pt *x)
{
    int vpp = x->v[D_VPP], pp = x->v[D_PP];
    if (vpp == 1)
        return true;
    bool even = x->v[D_FIRST] == 0 && x->v[D_LAST] == 0;
    return pp > 1 && even && (s->L / pp) % vpp == 0 && microbatches(s, x) % pp == 0;
}
/* ZeRO (Rajbhandari et al. 2020; Megatron's distributed optimizer = stage 1): stages > 0
 * need a data-parallel group to shard over (dp x cp in Megatron-Core); DeepSpeed:
 * ZeRO-2 and -3 do not combine with pipeline parallelism. */
static bool r_zero(const struct space *s, const struct pt *x)
{
    int z = x->v[D_ZERO];
    if (z > 0 && x->v[D_DP] * x->v[D_CP] == 1)
        return false;
    return z < 2 || x->v[D_PP] == 1;
}

/* HSDP (issue 12; planner.h): shard groups of a node's worth of data-parallel ranks
 * (gpus per node / tp, at least 2) and powers of two above it, below dp x cp and dividing
 * it, with a sharded optimizer; 0 = shard over all dp x cp ranks. */
static bool r_sg(const struct space *s, const struct pt *x)
{
    int sg = x->v[D_SG], dpcp = x->v[D_DP] * x->v[D_CP];
    if (sg == 0)
        return true;
    int node = s->cl->gpus_per_node / x->v[D_TP];
    if (node < 2)
        node = 2;
    return x->v[D_ZERO] >= 1 && sg >= node && sg < dpcp && dpcp % sg == 0 && pow2(sg / node) &&
           sg % node == 0;
}

struct rule {
    int at; /* the last dimension it reads */
    bool (*ok)(const struct space *s, const struct pt *x);
};

static const struct rule rules[] = {
    {D_TP, r_tp_node}, {D_TP, r_tp_divides}, {D_CP, r_cp}, {D_PP, r_pp},   {D_DP, r_world},
    {D_GEMM, r_gemm},  {D_EP, r_ep},         {D_SP, r_sp}, {D_MBS, r_mbs}, {D_LAST, r_split},
    {D_VPP, r_vpp},    {D_ZERO, r_zero},     {D_SG, r_sg},
};

static void to_layout(const struct space *s, const struct pt *x, struct dp_layout *l)
{
    dp_layout_default(l);
    l->tp = x->v[D_TP];
    l->cp = x->v[D_CP];
    l->pp = x->v[D_PP];
    l->dp = x->v[D_DP];
    l->gemm = x->v[D_GEMM] ? DP_GEMM_FP8 : DP_GEMM_DEFAULT;
    l->ep = x->v[D_EP];
    l->sp = x->v[D_SP];
    l->mbs = x->v[D_MBS];
    l->first_stage_layers = x->v[D_FIRST];
    l->last_stage_layers = x->v[D_LAST];
    l->vpp = x->v[D_VPP];
    l->zero = x->v[D_ZERO];
    l->recompute = (enum dp_recompute)x->v[D_RC];
    l->shard_group = x->v[D_SG];
    l->gbs = s->gbs;
    l->seq_len = s->seq_len;
    /* The overlaps the search turns on where the layout allows them (planner.h). */
    l->tp_overlap = l->sp && l->tp > 1;
    l->pp_overlap = l->vpp > 1;
}

/* Every dimension of a layout, for comparing sets. */
static void key(const struct dp_layout *l, char *buf, size_t cap)
{
    snprintf(buf, cap, "tp%d cp%d pp%d dp%d g%d ep%d sp%d mbs%lld f%d l%d vpp%d z%d rc%d sg%d",
             l->tp, l->cp, l->pp, l->dp, (int)dp_layout_gemm(l) == DP_GEMM_FP8, l->ep, l->sp,
             (long long)l->mbs, l->first_stage_layers, l->last_stage_layers, l->vpp, l->zero,
             (int)l->recompute, l->shard_group);
}

static double score(const struct dp_step_cost *c, int64_t peak, int64_t min)
{
    return c->step_time_s * (1.0 + 0.01 * (double)(peak - min) / (double)peak);
}

/* A list of layout keys (malloc'ed). */
struct keys {
    char (*k)[96];
    int n, cap;
};
static void keys_add(struct keys *ks, const struct dp_layout *l)
{
    if (ks->n == ks->cap) {
        ks->cap = ks->cap ? 2 * ks->cap : 1024;
        ks->k = realloc(ks->k, (size_t)ks->cap * sizeof *ks->k);
    }
    key(l, ks->k[ks->n++], sizeof ks->k[0]);
}
static int cmp_key(const void *a, const void *b)
{
    return strcmp(a, b);
}

struct brute {
    long long valid;
    struct keys fit;  /* every fitting layout */
    struct keys best; /* the fitting layouts of the best score (ties) */
    double best_score;
    /* what the fitting layouts cover */
    int cp2, ep2, vpp2, fp8;
    const struct space *s;
    struct dp_mem_report *rep;
};

static void visit(struct brute *b, const struct pt *x)
{
    const struct space *s = b->s;
    struct dp_layout l;
    to_layout(s, x, &l);
    struct dp_err e = {0};
    /* Every layout of the space must be one the core validator accepts. */
    if (dp_layout_validate(&l, s->m, s->gpus, &e)) {
        char k[96];
        key(&l, k, sizeof k);
        fprintf(stderr, "brute force: %s is in the space but dp_layout_validate says: %s\n", k,
                e.msg);
        check_failures++;
        return;
    }
    b->valid++;
    struct dp_mem_opts mo;
    dp_mem_opts_default(&mo);
    if (dp_mem_estimate(s->m, s->cl, &l, &mo, b->rep, &e) || !b->rep->fits)
        return;
    keys_add(&b->fit, &l);
    b->cp2 += l.cp > 1;
    b->ep2 += l.ep > 1;
    b->vpp2 += l.vpp > 1;
    b->fp8 += dp_layout_gemm(&l) == DP_GEMM_FP8;
    struct dp_step_cost c;
    dp_time_step_fast(s->m, s->cl, &l, &c);
    double sc = score(&c, b->rep->peak_bytes, b->rep->min_bytes);
    if (b->best.n == 0 || sc < b->best_score * (1 - 1e-12)) {
        b->best.n = 0;
        b->best_score = sc;
    }
    if (fabs(sc - b->best_score) <= 1e-12 * b->best_score)
        keys_add(&b->best, &l);
}

static void walk(struct brute *b, struct pt *x, int d)
{
    if (d == D_N) {
        visit(b, x);
        return;
    }
    for (int v = dims[d].lo(b->s), hi = dims[d].hi(b->s); v <= hi; v++) {
        x->v[d] = v;
        bool ok = true;
        for (size_t i = 0; ok && i < sizeof rules / sizeof rules[0]; i++)
            if (rules[i].at == d)
                ok = rules[i].ok(b->s, x);
        if (ok)
            walk(b, x, d + 1);
    }
}

static void brute_force(const struct space *s, struct brute *b)
{
    memset(b, 0, sizeof *b);
    b->s = s;
    b->rep = malloc(sizeof *b->rep);
    struct pt x = {{0}};
    walk(b, &x, 0);
    free(b->rep);
    qsort(b->fit.k, (size_t)b->fit.n, sizeof b->fit.k[0], cmp_key);
}

static void on_fit(const struct dp_candidate *c, void *ctx)
{
    keys_add(ctx, &c->layout);
}

/* What a case must fit at least once: kinds of layouts it exists to test. */
enum { NEED_CP = 1, NEED_EP = 2, NEED_VPP = 8, NEED_FP8 = 16 };

static void compare(const struct dp_model *m, const struct dp_cluster *cl, int64_t gbs, int need)
{
    struct space s = {.m = m,
                      .cl = cl,
                      .gbs = gbs,
                      .seq_len = m->seq_len,
                      .gpus = dp_cluster_gpus(cl),
                      .L = (int)m->layers,
                      .experts = m->experts > 0 ? m->experts : 1,
                      .fp8 = cl->gpu.fp8_tflops > 0 && cl->gpu.gemm_fp8.eff_max > 0};
    struct brute b;
    brute_force(&s, &b);

    struct keys got = {0};
    struct dp_search_opts o;
    dp_search_opts_default(&o);
    o.gbs = gbs;
    o.seq_len = m->seq_len;
    o.top_k = 5;
    o.no_uneven = true; /* the even splits: r_split */
    if (s.fp8)
        o.gemm = -1; /* --precision auto: bf16 and FP8 */
    o.on_fit = on_fit;
    o.on_fit_ctx = &got;
    struct dp_search_result *r = malloc(sizeof *r);
    struct dp_err err = {0};
    CHECK_EQ(dp_plan_search(m, cl, &o, r, &err), 0);
    printf("%s on %d x %d, gbs %lld: %lld layouts, %d fit (cp>1 %d, ep>1 %d, vpp>1 "
           "%d, fp8 %d)\n",
           m->name, cl->nodes, cl->gpus_per_node, (long long)gbs, b.valid, b.fit.n, b.cp2, b.ep2,
           b.vpp2, b.fp8);
    /* Not empty, and every kind the case exists for is among the fitting layouts. */
    CHECK(b.fit.n > 0);
    CHECK(r->n > 0);
    CHECK(!(need & NEED_CP) || b.cp2 > 0);
    CHECK(!(need & NEED_EP) || b.ep2 > 0);
    CHECK(!(need & NEED_VPP) || b.vpp2 > 0);
    CHECK(!(need & NEED_FP8) || b.fp8 > 0);
    /* The same space, the same fitting set. */
    CHECK_EQ(r->evaluated, b.valid);
    CHECK_EQ(r->fitting, b.fit.n);
    qsort(got.k, (size_t)got.n, sizeof got.k[0], cmp_key);
    CHECK_EQ(got.n, b.fit.n);
    for (int i = 0, j = 0, shown = 0; (i < got.n || j < b.fit.n) && shown < 5;) {
        int c = i == got.n ? 1 : j == b.fit.n ? -1 : strcmp(got.k[i], b.fit.k[j]);
        if (c == 0) {
            i++, j++;
            continue;
        }
        fprintf(stderr, "  fits %s only: %s\n", c < 0 ? "in the search" : "by brute force",
                c < 0 ? got.k[i] : b.fit.k[j]);
        check_failures++;
        shown++;
        c < 0 ? i++ : j++;
    }
    /* The winner: the best score, and one of the layouts that have it. */
    if (r->n > 0 && b.best.n > 0) {
        const struct dp_candidate *w = &r->top[0];
        CHECK_NEAR(score(&w->cost, w->peak_bytes, w->min_bytes), b.best_score, 1e-12);
        char k[96];
        key(&w->layout, k, sizeof k);
        bool among = false;
        for (int i = 0; i < b.best.n; i++)
            among |= strcmp(k, b.best.k[i]) == 0;
        if (!among) {
            fprintf(stderr, "  the search's winner %s is not the brute force's best %s\n", k,
                    b.best.k[0]);
            check_failures++;
        }
        for (int i = 1; i < r->n; i++)
            CHECK(score(&r->top[i].cost, r->top[i].peak_bytes, r->top[i].min_bytes) >=
                  score(&r->top[i - 1].cost, r->top[i - 1].peak_bytes, r->top[i - 1].min_bytes));
    }
    free(got.k);
    free(b.fit.k);
    free(b.best.k);
    free(r);
}

/* Every split of L layers into S chunks: entries 1 .. S-2 hold >= 1, the first and the
 * last (embedding, loss) >= 0. Calls fn for each. */
struct splits_ctx {
    const struct dp_model *m;
    const struct dp_cluster *cl;
    struct dp_layout l;
    struct dp_mem_report *rep;
    long long valid;
    double best;
    struct dp_layout best_l;
    bool found;
};

static void try_split(struct splits_ctx *x)
{
    struct dp_mem_opts mo;
    dp_mem_opts_default(&mo);
    for (int zero = 0; zero <= 3; zero++)
        for (int rc = 0; rc < 3; rc++) {
            struct dp_layout l = x->l;
            l.zero = zero;
            l.recompute = (enum dp_recompute)rc;
            struct dp_err e = {0};
            if (dp_layout_validate(&l, x->m, dp_cluster_gpus(x->cl), &e))
                continue;
            if (zero > 0 && l.dp == 1)
                continue;
            x->valid++;
            if (dp_mem_estimate(x->m, x->cl, &l, &mo, x->rep, &e) || !x->rep->fits)
                continue;
            struct dp_step_cost c;
            dp_time_step_fast(x->m, x->cl, &l, &c);
            double sc = score(&c, x->rep->peak_bytes, x->rep->min_bytes);
            if (!x->found || sc < x->best) {
                x->found = true;
                x->best = sc;
                x->best_l = l;
            }
        }
}

static void compositions(struct splits_ctx *x, int *c, int S, int at, int left)
{
    if (at == S - 1) {
        c[at] = left;
        if (dp_layout_set_chunks(&x->l, c, S) == 0)
            try_split(x);
        return;
    }
    int lo = at == 0 ? 0 : 1;
    for (int n = lo; n <= left - (S - 2 - at); n++) { /* leave 1 for each middle chunk */
        c[at] = n;
        compositions(x, c, S, at + 1, left - n);
    }
}

/*
 * Uneven splits at a fixed pp: the brute force tries every split of the model's layers
 * into pp x vpp chunks for every vpp, and every ZeRO/recompute choice (tp = 1, mbs = 1);
 * the planner tries its balanced family only. The planner must find a layout, nothing
 * may beat the exhaustive best, and the planner's must come within 0.5% of it.
 * Returns the planner's best score (0 when none).
 */
static double uneven_at(const struct dp_model *m, const struct dp_cluster *cl, int pp,
                        bool no_uneven)
{
    struct splits_ctx x = {.m = m, .cl = cl};
    x.rep = malloc(sizeof *x.rep);
    int gpus = dp_cluster_gpus(cl);
    for (int vpp = 1; pp * vpp - 2 <= (int)m->layers && pp * vpp <= 64; vpp++) {
        dp_layout_default(&x.l);
        x.l.tp = 1;
        x.l.pp = pp;
        x.l.dp = gpus / pp;
        x.l.vpp = vpp;
        x.l.mbs = 1;
        x.l.gbs = 64;
        x.l.seq_len = m->seq_len;
        /* the overlaps as the planner sets them (pipeline overlap with interleaving; the
         * parameter gather with the gradient reduction, dp_layout_default's) */
        x.l.pp_overlap = vpp > 1;
        x.l.overlap_param_gather = x.l.dp_overlap;
        int c[64];
        compositions(&x, c, pp * vpp, 0, (int)m->layers);
    }
    struct dp_search_opts o;
    dp_search_opts_default(&o);
    o.gbs = 64;
    o.seq_len = m->seq_len;
    o.tp = 1;
    o.mbs = 1;
    o.cp = 1;
    o.pp = pp;
    o.top_k = 3;
    o.no_uneven = no_uneven;
    struct dp_search_result *r = malloc(sizeof *r);
    struct dp_err err = {0};
    int rc = dp_plan_search(m, cl, &o, r, &err);
    double got = 0;
    CHECK(x.found);
    if (!no_uneven) {
        CHECK_EQ(rc, 0);
        CHECK(r->n > 0);
    }
    if (rc == 0 && r->n > 0 && x.found) {
        const struct dp_candidate *w = &r->top[0];
        got = score(&w->cost, w->peak_bytes, w->min_bytes);
        CHECK_EQ(dp_layout_validate(&w->layout, m, gpus, &err), 0);
        CHECK(got >= x.best * (1 - 1e-12)); /* nothing beats the exhaustive best */
        if (!no_uneven)
            CHECK(got <= x.best * 1.005);
    }
    free(r);
    free(x.rep);
    return got;
}

static void test_uneven(void)
{
    struct dp_cluster cl = cluster(1, 8, 80);
    struct dp_model m = model();
    /* 10 layers on 4 stages: no even split at all (the even search finds nothing). */
    m.layers = 10;
    CHECK(uneven_at(&m, &cl, 4, false) > 0);
    CHECK(uneven_at(&m, &cl, 4, true) == 0);
    /* 12 layers on 4 stages: the even splits exist (3 each; vpp = 3 with one layer a
     * chunk); the planner's best, uneven or not, beats or ties them. */
    m.layers = 12;
    double any = uneven_at(&m, &cl, 4, false), even = uneven_at(&m, &cl, 4, true);
    CHECK(any > 0 && even > 0);
    CHECK(any <= even * (1 + 1e-12));
}

/* The same layout but for its pipeline split and interleaving degree, by the test's own
 * rule: those fields cleared, the rest compared. */
static bool same_but_schedule(const struct dp_layout *a, const struct dp_layout *b)
{
    struct dp_layout x = *a, y = *b;
    x.vpp = y.vpp = 1;
    x.pp_overlap = y.pp_overlap = false;
    x.first_stage_layers = y.first_stage_layers = x.last_stage_layers = y.last_stage_layers = 0;
    x.nchunks = y.nchunks = 0;
    return dp_layout_equal(&x, &y);
}

/*
 * The ranking's one row per layout: with every split and vpp ranked (all_splits), keeping
 * the first row of each layout in rank order gives the folded ranking, row for row; the
 * folded one holds no layout twice and the unfolded one does (10 layers on 4 stages split
 * many ways).
 */
static void test_fold_splits(void)
{
    struct dp_cluster cl = cluster(1, 8, 80);
    struct dp_model m = model();
    m.layers = 10;
    struct dp_search_opts o;
    dp_search_opts_default(&o);
    o.gbs = 64;
    o.seq_len = m.seq_len;
    o.tp = 1;
    o.cp = 1;
    o.pp = 4;
    struct dp_search_result *all = malloc(sizeof *all), *one = malloc(sizeof *one);
    struct dp_err err = {0};
    o.all_splits = true;
    o.top_k = DP_MAX_TOP;
    CHECK_EQ(dp_plan_search(&m, &cl, &o, all, &err), 0);
    CHECK(!all->folded_splits);
    o.all_splits = false;
    o.top_k = 6;
    CHECK_EQ(dp_plan_search(&m, &cl, &o, one, &err), 0);
    CHECK(one->folded_splits);
    int first[DP_MAX_TOP], nf = 0;
    bool twice = false;
    for (int i = 0; i < all->n; i++) {
        bool seen = false;
        for (int j = 0; j < nf; j++)
            seen = seen || same_but_schedule(&all->top[i].layout, &all->top[first[j]].layout);
        twice = twice || seen;
        if (!seen)
            first[nf++] = i;
    }
    CHECK(twice);
    CHECK(nf >= o.top_k);
    CHECK_EQ(one->n, o.top_k);
    for (int i = 0; i < one->n && i < nf; i++) {
        CHECK(dp_layout_equal(&one->top[i].layout, &all->top[first[i]].layout));
        for (int j = 0; j < i; j++)
            CHECK(!same_but_schedule(&one->top[i].layout, &one->top[j].layout));
    }
    free(all);
    free(one);
}

/* DeepSeek-V3 on 32 DGX H100 nodes at tp 1, pp 16 (61 layers: uneven splits; cp, ep, HSDP,
 * ZeRO and recompute searched): no layout gets a time the cost model's invariant rejects (before
 * session 14 some did, and the planner ranked their negative or infinite times), and the ranking
 * holds sane costs. */
static void test_no_bad_time(void)
{
    struct dp_model m;
    struct dp_cluster cl;
    struct dp_err err = {0};
    if (dp_model_load("deepseek-v3", &m, &err) ||
        dp_cluster_from_system("dgx-h100", 32, NULL, &cl, &err)) {
        CHECK_STR(err.msg, "");
        return;
    }
    struct dp_search_opts o;
    dp_search_opts_default(&o);
    o.gbs = 1024;
    o.seq_len = 4096;
    o.tp = 1;
    o.pp = 16;
    o.top_k = 5;
    struct dp_search_result *r = malloc(sizeof *r);
    CHECK_EQ(dp_plan_search(&m, &cl, &o, r, &err), 0);
    CHECK(r->fitting > 0);
    CHECK_EQ(r->bad_time, 0);
    for (int i = 0; i < r->n; i++)
        CHECK(dp_step_cost_sane(&r->top[i].cost));
    free(r);
}

/* Per framework (issue 12): the search over each framework's space (its ZeRO stages,
 * recompute policies and HSDP shard groups) against a brute force that asks the
 * layout's own framework check (cp 1, even splits). */
static double fw_score(const struct dp_step_cost *c, int64_t peak, int64_t min)
{
    return c->step_time_s * (1.0 + 0.01 * (double)(peak - min) / (double)peak);
}

struct fw_brute {
    long long valid;
    double best;
    struct dp_layout best_l;
    bool found;
};

static void fw_brute_force(const struct dp_model *m, const struct dp_cluster *cl, int64_t gbs,
                           enum dp_framework fw, struct fw_brute *b)
{
    memset(b, 0, sizeof *b);
    int gpus = dp_cluster_gpus(cl);
    struct dp_mem_opts mo;
    dp_mem_opts_default(&mo);
    struct dp_mem_report *rep = malloc(sizeof *rep);
    int emax = m->experts > 0 ? (int)m->experts : 1;
    for (int tp = 1; tp <= cl->gpus_per_node; tp *= 2)
        for (int pp = 1; pp <= gpus; pp++)
            for (int vpp = 1; vpp <= 8; vpp++)
                for (int64_t mbs = 1; mbs <= 64; mbs *= 2)
                    for (int zero = 0; zero <= 3; zero++)
                        for (int rc = 0; rc < DP_RECOMPUTES; rc++)
                            for (int sp = 0; sp <= 1; sp++)
                                for (int ep = 1; ep <= emax; ep++)
                                    for (int sg = 0; sg <= gpus; sg = sg ? 2 * sg : 1)
                                        for (int sch = 0; sch < 2; sch++) {
                                            if (gpus % (tp * pp) || (sp && tp == 1) || emax % ep)
                                                continue;
                                            struct dp_layout l;
                                            dp_layout_default(&l);
                                            l.tp = tp;
                                            l.ep = ep;
                                            l.pp = pp;
                                            l.dp = gpus / (tp * pp);
                                            l.vpp = vpp;
                                            l.mbs = mbs;
                                            l.gbs = gbs;
                                            l.seq_len = m->seq_len;
                                            l.zero = zero;
                                            l.recompute = (enum dp_recompute)rc;
                                            l.sp = sp;
                                            l.framework = fw;
                                            l.shard_group = sg;
                                            /* 1F1B, and DualPipeV where the framework runs it
                                             * (its own check; the layout's: vpp 2, an even
                                             * split, 2 pp micro-batches) */
                                            l.schedule = (enum dp_pp_schedule)sch;
                                            /* DeepSpeed's gradients: the model dtype by default */
                                            l.grad_fp32 = fw != DP_FW_DEEPSPEED;
                                            struct dp_err e = {0};
                                            if (dp_layout_validate(&l, m, gpus, &e))
                                                continue;
                                            /* What the framework offers (its recompute policies
                                             * and ZeRO stages), by the layout's own check. */
                                            if (dp_layout_check_framework(&l, NULL, &e))
                                                continue;
                                            /* HSDP groups: full sharding (0), else powers of two
                                             * from a node's worth of data-parallel ranks below dp.
                                             */
                                            int node = cl->gpus_per_node / tp < 2
                                                           ? 2
                                                           : cl->gpus_per_node / tp;
                                            if (sg && (zero == 0 || sg < node || sg >= l.dp ||
                                                       (fw == DP_FW_DEEPSPEED && zero < 3)))
                                                continue;
                                            /* The documented space: ZeRO only with something
                                             * to shard, ZeRO-2/3 only without pipeline
                                             * parallelism; the overlaps on where the layout
                                             * allows them (TP overlap with sequence
                                             * parallelism, pipeline overlap with interleaving). */
                                            if (zero > 0 && l.dp == 1)
                                                continue;

                                            l.tp_overlap = sp && tp > 1;
                                            l.pp_overlap = vpp > 1;
                                            b->valid++;
                                            if (dp_mem_estimate(m, cl, &l, &mo, rep, &e) ||
                                                !rep->fits)
                                                continue;
                                            struct dp_step_cost c;
                                            dp_time_step_fast(m, cl, &l, &c);
                                            double s =
                                                fw_score(&c, rep->peak_bytes, rep->min_bytes);
                                            if (!b->found || s < b->best) {
                                                b->found = true;
                                                b->best = s;
                                                b->best_l = l;
                                            }
                                        }
    free(rep);
}

static struct fw_brute compare_fw(const struct dp_model *m, const struct dp_cluster *cl,
                                  int64_t gbs, enum dp_framework fw)
{
    struct fw_brute b;
    fw_brute_force(m, cl, gbs, fw, &b);
    struct dp_search_opts o;
    dp_search_opts_default(&o);
    o.framework = fw;
    o.gbs = gbs;
    o.seq_len = m->seq_len;
    o.cp = 1;
    o.no_uneven = true;
    o.top_k = 5;
    struct dp_search_result *r = malloc(sizeof *r);
    struct dp_err err = {0};
    CHECK_EQ(dp_plan_search(m, cl, &o, r, &err), 0);
    CHECK_EQ(r->evaluated, b.valid);
    CHECK_EQ(r->n > 0, b.found);
    if (r->n && b.found) {
        const struct dp_candidate *w = &r->top[0];
        CHECK_NEAR(fw_score(&w->cost, w->peak_bytes, w->min_bytes), b.best, 1e-12);
        char x[160], y[160];
        dp_layout_format(&w->layout, x, sizeof x);
        dp_layout_format(&b.best_l, y, sizeof y);
        CHECK_STR(x, y);
        /* Ranked best first. */
        for (int i = 1; i < r->n; i++)
            CHECK(fw_score(&r->top[i].cost, r->top[i].peak_bytes, r->top[i].min_bytes) >=
                  fw_score(&r->top[i - 1].cost, r->top[i - 1].peak_bytes, r->top[i - 1].min_bytes));
    }
    free(r);
    return b;
}

/*
 * DualPipeV in the search (torchtitan): the layouts it ranks, over an even split and over
 * stage lists for a layer count 2 pp does not divide, are priced as the full estimate prices
 * them (step time by dp_time_step, peak by dp_mem_estimate, every rank of the V), and where the
 * expert all-to-alls cross the network the schedule that hides them behind the paired passes wins
 * (pp and ep fixed), with less exposed EP time than the best 1F1B layout of the same search.
 */
static void test_dualpipev(void)
{
    struct dp_model m = moe_model();
    m.moe_dense_layers = 0; /* 8 MoE layers: even over 2 x pp = 4 or 8 stages */
    /* eight nodes of one GPU: every expert all-to-all crosses the 25 GB/s network */
    struct dp_cluster cl = cluster(8, 1, 80);
    struct dp_search_opts o;
    dp_search_opts_default(&o);
    o.framework = DP_FW_TORCHTITAN;
    o.gbs = 64;
    o.seq_len = m.seq_len;
    o.cp = 1;
    o.pp = 2;
    o.ep = 4; /* the experts over the 4 data-parallel ranks of a stage, across nodes */
    o.top_k = 10;
    struct dp_search_result *r = malloc(sizeof *r);
    struct dp_mem_report *rep = malloc(sizeof *rep);
    struct dp_err err = {0};
    o.schedule = DP_SCHED_DUALPIPEV;
    struct dp_mem_opts mo;
    dp_mem_opts_default(&mo);
    /* 8 layers split evenly over the 4 stages, and 10 (uneven stage lists only) */
    for (int layers = 10; layers >= 8; layers -= 2) {
        struct dp_model mu = m;
        mu.layers = layers;
        CHECK_EQ(dp_plan_search(&mu, &cl, &o, r, &err), 0);
        CHECK(r->n > 0);
        for (int i = 0; i < r->n; i++) {
            const struct dp_candidate *c = &r->top[i];
            CHECK_EQ(c->layout.schedule, DP_SCHED_DUALPIPEV);
            CHECK(c->layout.pp >= 2 && c->layout.vpp == 2);
            CHECK(layers == 8 || c->layout.nchunks == 4);
            struct dp_step_cost full;
            CHECK_EQ(dp_time_step(&mu, &cl, &c->layout, &full, &err), 0);
            CHECK_NEAR(c->cost.step_time_s, full.step_time_s, 1e-12 * full.step_time_s);
            CHECK_EQ(dp_mem_estimate(&mu, &cl, &c->layout, &mo, rep, &err), 0);
            CHECK_EQ(c->peak_bytes, rep->peak_bytes);
            CHECK_EQ(c->min_bytes, rep->min_bytes);
        }
    }
    double dpv_best = r->n ? r->top[0].cost.step_time_s : 0;
    double dpv_ep = r->n ? r->top[0].cost.ep_comm_s : 0;

    o.schedule = DP_SCHED_1F1B;
    CHECK_EQ(dp_plan_search(&m, &cl, &o, r, &err), 0);
    CHECK(r->n > 0);
    for (int i = 0; i < r->n; i++)
        CHECK_EQ(r->top[i].layout.schedule, DP_SCHED_1F1B);
    double f1b_best = r->n ? r->top[0].cost.step_time_s : 0;
    double f1b_ep = r->n ? r->top[0].cost.ep_comm_s : 0;
    printf("dualpipev: best %.4f s (ep %.4f s), 1f1b: best %.4f s (ep %.4f s)\n", dpv_best, dpv_ep,
           f1b_best, f1b_ep);
    CHECK(dpv_best < f1b_best);
    CHECK(dpv_ep < f1b_ep);

    /* Both tried by default: the faster wins, the other is the schedule's alternative. */
    o.schedule = -1;
    CHECK_EQ(dp_plan_search(&m, &cl, &o, r, &err), 0);
    CHECK(r->n > 0);
    if (r->n) {
        CHECK_EQ(r->top[0].layout.schedule, DP_SCHED_DUALPIPEV);
        CHECK_NEAR(r->top[0].cost.step_time_s, dpv_best, 1e-12 * dpv_best);
    }
    bool alt = false;
    for (int i = 0; i < r->nalt; i++)
        if (r->alt[i].dim == DP_ALT_SCHEDULE && r->alt[i].value == DP_SCHED_1F1B) {
            alt = true;
            CHECK_NEAR(r->alt[i].best.cost.step_time_s, f1b_best, 1e-12 * f1b_best);
        }
    CHECK(alt);

    /* Megatron has no DualPipe schedule: refused when asked, never searched. */
    o.framework = DP_FW_MEGATRON;
    o.schedule = DP_SCHED_DUALPIPEV;
    CHECK_EQ(dp_plan_search(&m, &cl, &o, r, &err), DP_EUSAGE);
    o.schedule = -1;
    CHECK_EQ(dp_plan_search(&m, &cl, &o, r, &err), 0);
    for (int i = 0; i < r->n; i++)
        CHECK_EQ(r->top[i].layout.schedule, DP_SCHED_1F1B);
    free(rep);
    free(r);
}

/*
 * The runner-up explanation: what a slower layout loses and what it wins back, by hand.
 * #1: compute 10 s, bubble 2 s = 12 s. The other: compute 9 s, tp comm 3.5 s, bubble 0.02 s
 * = 12.52 s, +4.3%: it loses tp comm +3.5 s, gains compute -1 s and bubble -1.98 s (both
 * above 0.5% of #1's step, 0.06 s); listing only the loss would read as a 29% gap.
 */
static void test_explain_delta(void)
{
    struct dp_candidate w = {0}, c = {0};
    w.cost.compute_s = 10;
    w.cost.bubble_s = 2;
    w.cost.step_time_s = 12;
    c.cost.compute_s = 9;
    c.cost.tp_comm_s = 3.5;
    c.cost.bubble_s = 0.02;
    c.cost.step_time_s = 12.52;
    char buf[256];
    dp_explain_delta(&w, &c, buf, sizeof buf);
    CHECK_STR(buf, "+4.3%: tp comm +3.5 s; gains bubble -1.98 s, compute -1 s");
    /* only gains above the 0.5% floor: compute -0.04 s is below 0.06 s */
    c = w;
    c.cost.tp_comm_s = 0.5;
    c.cost.compute_s = 9.96;
    c.cost.step_time_s = 12.46;
    dp_explain_delta(&w, &c, buf, sizeof buf);
    CHECK_STR(buf, "+3.8%: tp comm +0.5 s");
    /* equal terms: a tie on time */
    dp_explain_delta(&w, &w, buf, sizeof buf);
    CHECK_STR(buf, "+0.0% (ties on time; memory balance decides)");
}

int main(void)
{
    test_explain_delta();
    test_dualpipev();
    test_uneven();
    test_fold_splits();
    test_no_bad_time();
    struct dp_model m = model();
    /* Plenty of memory, one node of 8: cp (seq 2048), interleaving. */
    struct dp_cluster a = cluster(1, 8, 80);
    compare(&m, &a, 64, NEED_CP | NEED_VPP);
    /* 14 layers on two nodes of 4, 20 GiB: pp of 1 or 2 (7 + 7; 4 and 8 do not divide 14),
     * TP of 8 would cross nodes, memory prunes. */
    struct dp_model m14 = model();
    m14.layers = 14;
    struct dp_cluster b = cluster(2, 4, 20);
    compare(&m14, &b, 32, NEED_CP | NEED_VPP);
    /* MoE with dense-first layers: ep searched, two layer kinds. */
    struct dp_model mm = moe_model();
    compare(&mm, &a, 64, NEED_CP | NEED_EP | NEED_VPP);
    /* The MoE model on tight memory (12 GiB): some layouts still fit. */
    struct dp_cluster tight = cluster(2, 4, 12);
    compare(&mm, &tight, 32, NEED_EP);
    /* A GPU with FP8 tensor cores: the GEMM precision is searched too. */
    struct dp_cluster f8 = cluster(1, 4, 40);
    f8.gpu.fp8_tflops = 200;
    f8.gpu.gemm_fp8 = f8.gpu.gemm;
    compare(&m, &f8, 32, NEED_FP8 | NEED_CP);

    /* The other frameworks' spaces: torchtitan (zero 0, 2, 3 with any pp; recompute none,
     * op, full), DeepSpeed (zero 2/3 without pp, HSDP only with zero 3); four nodes of 2
     * leave room for node-sized shard groups. */
    struct dp_cluster four = cluster(4, 2, 20);
    CHECK(compare_fw(&m, &four, 32, DP_FW_TORCHTITAN).found);
    CHECK(compare_fw(&m, &four, 32, DP_FW_DEEPSPEED).found);
    CHECK(compare_fw(&m, &four, 32, DP_FW_MEGATRON).found);

    /* So tight that only full recompute (or sharding) fits: the winner must fit. */
    struct dp_cluster c = cluster(1, 1, 17);
    struct dp_search_opts o;
    dp_search_opts_default(&o);
    o.gbs = 8;
    o.seq_len = m.seq_len;
    struct dp_search_result *r = malloc(sizeof *r);
    struct dp_err err = {0};
    CHECK_EQ(dp_plan_search(&m, &c, &o, r, &err), 0);
    if (r->n) {
        CHECK(r->top[0].peak_bytes <= dp_gpu_usable_bytes(&c.gpu));
        CHECK(r->oom > 0);
    }
    /* Nothing fits: no result, and the smallest peak seen is reported. */
    struct dp_cluster d = cluster(1, 1, 4);
    CHECK_EQ(dp_plan_search(&m, &d, &o, r, &err), 0);
    CHECK_EQ(r->n, 0);
    CHECK(r->lowest_peak > dp_gpu_usable_bytes(&d.gpu));
    /* Fixed knobs are respected. */
    o.tp = 2;
    o.zero = 1;
    CHECK_EQ(dp_plan_search(&m, &a, &o, r, &err), 0);
    for (int i = 0; i < r->n; i++)
        CHECK(r->top[i].layout.tp == 2 && r->top[i].layout.zero == 1);
    /* TP beyond a node is pruned, and says why. */
    dp_search_opts_default(&o);
    o.gbs = 32;
    o.seq_len = m.seq_len;
    CHECK_EQ(dp_plan_search(&m, &b, &o, r, &err), 0);
    bool said = false;
    for (int i = 0; i < r->nnotes; i++)
        said |= strstr(r->notes[i], "tp=8: crosses nodes") != NULL;
    CHECK(said);

    /*
     * No layout divides the batch (issue 10, item 6): 3 GPUs, pp fixed to 1, so dp = 3
     * and mbs x dp = 3, 6, 12, ...; gbs 8 is a multiple of none. The nearest batches
     * those divide: 9 (mbs 1: |8 - 9| = 1), 6 (mbs 2: 2), 12 (mbs 4: 4), so 9, and the
     * factor every layout lacks is 3.
     */
    struct dp_cluster e3 = cluster(1, 3, 80);
    dp_search_opts_default(&o);
    o.gbs = 8;
    o.seq_len = m.seq_len;
    o.pp = 1;
    struct dp_err e1 = {0};
    CHECK_EQ(dp_plan_search(&m, &e3, &o, r, &e1), DP_EINFEASIBLE);
    CHECK_EQ(r->evaluated, 0);
    CHECK_EQ(r->alt_gbs, 9);
    CHECK_EQ(r->alt_layout.mbs, 1);
    CHECK_EQ(r->gbs_lacks, 3);
    CHECK_CONTAINS(e1.msg, "needs a factor of 3");
    CHECK_CONTAINS(e1.msg, "--gbs 9 fits");
    CHECK(strstr(e1.msg, "factors of 2") == NULL);

    /* A fixed tp that is not a power of two is tried, and the reason it fails is named,
     * not the batch (issue 10, item 6: `suggest --tp 3`). */
    dp_search_opts_default(&o);
    o.gbs = 64;
    o.seq_len = m.seq_len;
    o.tp = 3;
    struct dp_err e4 = {0};
    CHECK_EQ(dp_plan_search(&m, &a, &o, r, &e4), DP_EINFEASIBLE);
    CHECK_CONTAINS(e4.msg, "tp=3: does not divide the 8 GPUs of a node");
    free(r);
    return check_done("test_planner_search");
}
