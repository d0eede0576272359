/*
 * The fewest GPUs that fit (dp_plan_min_gpus) must be the fewest: Llama 3 405B
 * on DGX H100 against a layout worked out by hand, and small models against a
 * brute force that tries every layout dplan accepts, with every pipeline split (every
 * micro-batch too), on every count below the answer with the full memory report.
 */
#include "check.h"
#include "planner/planner.h"

#include <stdlib.h>
#include <string.h>

/* A fixed 2 GiB runtime per GPU (--overhead-gib 2: no named runtime terms, no allocator
 * slack), so that the hand-computed budgets below stay simple sums. */
static int64_t fixed_runtime = 2LL << 30;
static struct dp_mem_opts fixed_overhead(void)
{
    struct dp_mem_opts mo;
    dp_mem_opts_default(&mo);
    mo.overhead_bytes = fixed_runtime;
    return mo;
}

static struct dp_search_opts opts(const struct dp_model *m, int64_t gbs)
{
    struct dp_search_opts o;
    dp_search_opts_default(&o);
    o.mem = fixed_overhead();
    o.seq_len = m->seq_len;
    o.gbs = gbs;
    return o;
}

/* `gpus` GPUs of cl's node type, as `dplan memory` would build them. */
static struct dp_cluster with_gpus(const struct dp_cluster *cl, int gpus)
{
    struct dp_cluster c = *cl;
    if (gpus >= cl->gpus_per_node) {
        c.nodes = gpus / cl->gpus_per_node;
    } else {
        c.nodes = 1;
        c.gpus_per_node = gpus;
    }
    return c;
}

static void test_llama3_405b(void)
{
    struct dp_model m;
    struct dp_cluster cl;
    struct dp_err err = {0};
    if (dp_model_load("llama3-405b", &m, &err) ||
        dp_cluster_from_system("dgx-h100", 1, NULL, &cl, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        check_failures++;
        return;
    }
    /*
     * By hand: tp=8 cp=2 dp=6 (96 GPUs, 12 nodes), ZeRO-3, full recompute, SP. States:
     * 405.85e9 / 8 = 50.7e9 parameters per TP rank, 2 + 4 + 12 = 18 bytes each over
     * dp x cp = 12 shards: 76 GB = 70.9 GiB; activations: 126 layer inputs of 4096
     * tokens (cp halves the 8192) x 16384 x 2 bytes / 8 (SP) = 2.0 GiB, plus one
     * layer's recompute working set, the logits and 2 GiB of runtime: it fits in 79.1
     * GiB. With cp=1 (dp=12, the same 12 shards) the activations double and it does
     * not: the search blind to cp answered 104.
     */
    struct dp_layout l;
    dp_layout_default(&l);
    l.tp = 8;
    l.cp = 2;
    l.dp = 6;
    l.zero = 3;
    l.recompute = DP_RECOMPUTE_FULL;
    l.sp = true;
    l.seq_len = m.seq_len;
    l.gbs = 192;
    struct dp_cluster c96 = with_gpus(&cl, 96);
    struct dp_mem_report *rep = malloc(sizeof *rep);
    const struct dp_mem_opts mo = fixed_overhead();
    CHECK_EQ(dp_mem_estimate(&m, &c96, &l, &mo, rep, &err), 0);
    CHECK(rep->fits);
    l.cp = 1;
    l.dp = 12;
    CHECK_EQ(dp_mem_estimate(&m, &c96, &l, &mo, rep, &err), 0);
    CHECK(!rep->fits);

    struct dp_search_opts o = opts(&m, 0);
    struct dp_min_gpus mg;
    CHECK_EQ(dp_plan_min_gpus(&m, &cl, &o, 1 << 17, &mg, &err), 0);
    CHECK(mg.found);
    CHECK(mg.gpus <= 96);
    /* What it reports really fits there, by the full per-stage report. */
    struct dp_cluster cm = with_gpus(&cl, mg.gpus);
    CHECK_EQ(dp_mem_estimate(&m, &cm, &mg.layout, &mo, rep, &err), 0);
    CHECK(rep->fits);
    CHECK_EQ(rep->peak_bytes, mg.peak_bytes);
    free(rep);
}

static struct dp_cluster small_cluster(int gpn, double mem_gib)
{
    struct dp_cluster c = {0};
    snprintf(c.gpu.name, sizeof c.gpu.name, "test-gpu");
    snprintf(c.system, sizeof c.system, "test");
    for (int i = 0; i < DP_PRECISIONS; i++)
        c.gpu.peak_tflops[i] = 100;
    c.gpu.mem_bytes = (int64_t)(mem_gib * 1073741824.0);
    c.gpu.usable_fraction = 1;
    c.gpu.mem_bw_gbps = 1000;
    c.gpu.runtime_overhead_bytes = 1LL << 30;
    c.gpu.gemm.eff_max = 0.8;
    c.gpu.gemm.half_flops = 1e9;
    c.nodes = 1;
    c.gpus_per_node = gpn;
    c.intra = (struct dp_link){"nvl", DP_LINK_NVLINK, 200, 2, 0.8, 0};
    c.inter = (struct dp_link){"net", DP_LINK_NET, 25, 5, 0.9, 0};
    c.nics_per_node = gpn;
    return c;
}

/* 6 layers of hidden 2048 on 8192 tokens; with `long_seq` hidden 1024 on 32768 tokens,
 * whose activations fit on few GPUs only with the sequence split (cp). */
static struct dp_model small_model(int experts, bool long_seq)
{
    struct dp_model m = {0};
    snprintf(m.name, sizeof m.name, "small");
    m.layers = 6;
    m.hidden = long_seq ? 1024 : 2048;
    m.heads = m.kv_heads = long_seq ? 8 : 16;
    m.head_dim = 128;
    m.ffn_hidden = 4 * m.hidden;
    m.vocab = 32000;
    m.seq_len = long_seq ? 32768 : 8192;
    m.ffn = DP_FFN_SWIGLU;
    m.norm = DP_NORM_RMSNORM;
    m.norms_per_layer = 2;
    if (experts) {
        m.experts = experts;
        m.top_k = 2;
        m.moe_ffn_hidden = 2 * m.hidden;
    }
    return m;
}

/*
 * Every split of `left` layers into S model chunks that dplan accepts (dp_split_check):
 * S counts, none zero but the first (the embedding's) and the last (the loss's); 2^(L+1)
 * over all S for L layers. Independent of the planner's balanced family, a subset of
 * it. Written to out[0..cap-1] from chunk i on; returns the count.
 */
static int all_splits(int S, int cur[], int i, int left, int (*out)[8], int n, int cap)
{
    if (i == S - 1) {
        cur[i] = left; /* the last chunk: the loss's, may be empty */
        if (n < cap)
            memcpy(out[n], cur, sizeof(int) * (size_t)S);
        return n + 1;
    }
    for (int k = i == 0 ? 0 : 1; k <= left; k++) {
        cur[i] = k;
        n = all_splits(S, cur, i + 1, left - k, out, n, cap);
    }
    return n;
}

/* Does any layout of m fit on n GPUs (batch: gbs, or 2 x mbs per GPU), with any split? */
static bool any_fits(const struct dp_model *m, const struct dp_cluster *cl, int n, int64_t gbs)
{
    struct dp_cluster c = with_gpus(cl, n);
    int gpn = c.gpus_per_node, L = (int)m->layers;
    struct dp_mem_report *rep = malloc(sizeof *rep);
    const struct dp_mem_opts mo = fixed_overhead();
    static int splits[256][8];
    int cur[8];
    bool found = false;
    int emax = m->experts ? (int)m->experts : 1;
    for (int tp = 1; tp <= gpn && !found; tp *= 2)
        for (int cp = 1; tp * cp <= n && !found; cp *= 2)
            for (int pp = 1; pp <= L && !found; pp++)
                for (int vpp = 1; pp * vpp <= 8 && !found; vpp++) {
                    if (n % (tp * cp * pp) || gpn % tp || (pp == 1 && vpp > 1))
                        continue;
                    int ns = all_splits(pp * vpp, cur, 0, L, splits, 0, 256);
                    if (ns > 256) {
                        fprintf(stderr, "any_fits: %d splits, more than the table holds\n", ns);
                        check_failures++;
                        ns = 256;
                    }
                    for (int si = 0; si < ns && !found; si++)
                        for (int ep = 1; ep <= emax; ep++)
                            for (int64_t mbs = 1; mbs <= 4; mbs *= 2)
                                for (int zero = 0; zero <= 3; zero++)
                                    for (int rc = 0; rc < 3; rc++)
                                        for (int sp = 0; sp <= 1; sp++) {
                                            if (emax % ep || (sp && tp == 1))
                                                continue;
                                            struct dp_layout l;
                                            dp_layout_default(&l);
                                            l.tp = tp;
                                            l.cp = cp;
                                            l.pp = pp;
                                            l.dp = n / (tp * cp * pp);
                                            l.ep = ep;
                                            l.vpp = vpp;
                                            l.mbs = mbs;
                                            l.gbs = gbs ? gbs : 2 * mbs * n;
                                            l.seq_len = m->seq_len;
                                            l.zero = zero;
                                            l.recompute = (enum dp_recompute)rc;
                                            l.sp = sp;
                                            l.nchunks = pp * vpp;
                                            for (int x = 0; x < pp * vpp; x++)
                                                l.chunk_layers[x] = (uint16_t)splits[si][x];
                                            int64_t dpcp = (int64_t)l.dp * cp;
                                            if (dpcp % ep || (zero > 0 && dpcp == 1) ||
                                                (zero >= 2 && pp > 1))
                                                continue;
                                            if (cp > 1 && m->seq_len % (2 * cp))
                                                continue;
                                            struct dp_err e = {0};
                                            if (dp_layout_validate(&l, m, n, &e))
                                                continue;
                                            if (vpp > 1 && dp_layout_microbatches(&l) % pp)
                                                continue;
                                            if (dp_mem_estimate(m, &c, &l, &mo, rep, &e) == 0 &&
                                                rep->fits)
                                                found = true;
                                        }
                }
    free(rep);
    return found;
}

/* The counts the search considers, ascending: 1, 2, 4 .. dividing a node, then whole nodes. */
static int next_count(int n, int gpn)
{
    if (n < gpn) {
        n *= 2;
        while (n < gpn && gpn % n)
            n *= 2;
        return n > gpn ? gpn : n;
    }
    return n + gpn;
}

static void check_minimal(const struct dp_model *m, const struct dp_cluster *cl, int64_t gbs,
                          const char *what)
{
    struct dp_search_opts o = opts(m, gbs);
    struct dp_min_gpus mg;
    struct dp_err err = {0};
    CHECK_EQ(dp_plan_min_gpus(m, cl, &o, 64, &mg, &err), 0);
    if (!mg.found) {
        fprintf(stderr, "%s: nothing fits up to 64 GPUs\n", what);
        check_failures++;
        return;
    }
    struct dp_cluster c = with_gpus(cl, mg.gpus);
    struct dp_mem_report *rep = malloc(sizeof *rep);
    const struct dp_mem_opts mo = fixed_overhead();
    CHECK_EQ(dp_mem_estimate(m, &c, &mg.layout, &mo, rep, &err), 0);
    CHECK(rep->fits);
    free(rep);
    int first_fit = 0;
    for (int n = 1; n <= mg.gpus; n = next_count(n, cl->gpus_per_node))
        if (any_fits(m, cl, n, gbs)) {
            first_fit = n;
            break;
        }
    if (first_fit != mg.gpus) {
        fprintf(stderr, "%s: min-gpus says %d, brute force finds %d\n", what, mg.gpus, first_fit);
        check_failures++;
    }
}

/*
 * A layer count that neither pp = 2 x vpp = 2 (4 chunks) nor pp = 3 divides: the
 * search must still answer with those knobs fixed, as `suggest` runs them (the
 * search limited to even and first/last splits found nothing). 7 layers of the small
 * model on 16 GiB GPUs fit anywhere, so the answer is the pipeline's own floor: the
 * fewest counts the search considers (1, 2, 4 within a 4-GPU node, then whole nodes)
 * that pp divides: 2 for pp = 2, 12 (three nodes) for pp = 3.
 */
static void test_uneven_fixed(void)
{
    struct dp_cluster cl = small_cluster(4, 16);
    struct dp_model m = small_model(0, false);
    m.layers = 7;
    const int pp[2] = {2, 3}, vpp[2] = {2, 1}, floor_gpus[2] = {2, 12};
    for (int i = 0; i < 2; i++) {
        struct dp_search_opts o = opts(&m, 0);
        o.pp = pp[i];
        o.vpp = vpp[i];
        struct dp_min_gpus mg;
        struct dp_err err = {0};
        CHECK_EQ(dp_plan_min_gpus(&m, &cl, &o, 64, &mg, &err), 0);
        CHECK(mg.found);
        if (!mg.found)
            continue;
        CHECK_EQ(mg.gpus, floor_gpus[i]);
        CHECK_EQ(mg.layout.pp, pp[i]);
        CHECK_EQ(mg.layout.vpp, vpp[i]);
        CHECK_EQ(mg.layout.nchunks, pp[i] * vpp[i]);
        int sum = 0;
        for (int x = 0; x < mg.layout.nchunks; x++)
            sum += mg.layout.chunk_layers[x];
        CHECK_EQ(sum, 7);
        struct dp_cluster c = with_gpus(&cl, mg.gpus);
        struct dp_mem_report *rep = malloc(sizeof *rep);
        CHECK_EQ(dp_mem_estimate(&m, &c, &mg.layout, NULL, rep, &err), 0);
        CHECK(rep->fits);
        free(rep);
    }
}

int main(void)
{
    test_uneven_fixed();
    test_llama3_405b();
    /* 4 GPUs of 2 GiB per node. The long-sequence model needs cp (16 GPUs: tp=4 cp=4);
     * the MoE one fits on 24 with tp=4 pp=3 cp=2 ep=2 vpp=2, 32 without cp, ep and
     * interleaving. */
    struct dp_cluster cl = small_cluster(4, 2);
    fixed_runtime = cl.gpu.runtime_overhead_bytes; /* the small GPU's own */
    struct dp_model dense = small_model(0, true);
    check_minimal(&dense, &cl, 0, "long sequence, free batch");
    check_minimal(&dense, &cl, 32, "long sequence, gbs=32");
    struct dp_model moe = small_model(4, false);
    check_minimal(&moe, &cl, 0, "moe, free batch");
    check_minimal(&moe, &cl, 48, "moe, gbs=48");
    return check_done("test_planner_min_gpus");
}
