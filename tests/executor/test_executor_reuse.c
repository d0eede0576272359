/*
 * The CPU step-time prediction's reuse distances (executor/predict_ops.c): each operand is
 * priced at the rate the calibration measured for a line last touched that many distinct
 * bytes ago. The pricing backend is driven directly with a two-point curve chosen so every
 * price can be worked out by hand:
 *   d <= 1 MiB: read 100 GB/s, write 50 GB/s; d >= 64 MiB: read 10, write 5;
 *   between: the rate linear in log(d), so at 8 MiB (log 8 / log 64 = 1/2) read 55, write
 *   27.5, and at 16 MiB (2/3) read 40, write 20.
 * A plain pass (a residual add: ns 0) costs its operands' bytes at those rates; an operand
 * never touched is as far as the curve goes.
 */
#include "check.h"
#include "executor/predict.h"

#include <stdlib.h>
#include <string.h>

#define MIB 1048576.0

static void init(struct pricer *c, int per_node)
{
    memset(c, 0, sizeof *c);
    c->base.ops = &dp__pricing_ops;
    c->base.prices_only = true;
    c->nt = c->base.threads = 1;
    c->per_node = per_node;
    c->shared = per_node > 1;
    c->pr.cache_bytes[0] = 2 << 20; /* the private L2 the node's ranks do not share */
    c->pr.cache_bytes[1] = 32 << 20;
    c->pr.bw_gbps[0] = c->pr.bw_gbps[1] = c->pr.bw_gbps[2] = 1;
    c->pr.conc_eff = 1;
    struct dp_exec_reuse *r = &c->pr.reuse;
    r->n = 2;
    r->bytes[0] = MIB;
    r->bytes[1] = 64 * MIB;
    r->read_gbps[0] = 100;
    r->read_gbps[1] = 10;
    r->write_gbps[0] = 50;
    r->write_gbps[1] = 5;
}

static double total(const struct pricer *c)
{
    const struct parts *p = &c->bill;
    return p->gemm + p->attn + p->ew + p->fork + p->comm + p->opt;
}

/* The price of one operation: the bill's growth. */
#define PRICE(c, call)                                                                             \
    ({                                                                                             \
        double t0_ = total(c);                                                                     \
        call;                                                                                      \
        total(c) - t0_;                                                                            \
    })

static void release(struct pricer *c)
{
    while (c->nmaps)
        c->base.ops->free(&c->base, c->maps[0].p);
    free(c->maps);
    free(c->fen);
    free(c->fen_val);
}

/*
 * The lock-step wait over a whole predicted step (dp_exec_predict, with a reuse curve: its
 * warm-up step first, whose bill is dropped). With waits measured proportional to the work
 * (wait = 0.1 t: the points (1 us, 0.1 us) and (10 s, 1 s), linear between), the waits of
 * a DP 2 step add up to 0.1 of the work between its synchronisations: the step's work
 * outside its collectives, give or take the gradient all-reduce's own price and wait,
 * which are billed at its wait and so fall inside the next span: 0.1 (step - comm) <=
 * added <= 0.1 (step + added). (Before session 23 the priced step's first synchronisation, DP's
 * gradient all-reduce after the whole forward and backward, kept the warm-up step's clock and
 * waited nothing: 0.1 of the optimizer's work alone.)
 */
static void step_waits(void)
{
    struct dp_model m;
    memset(&m, 0, sizeof m);
    snprintf(m.name, sizeof m.name, "wait-gpt");
    m.layers = 2;
    m.hidden = 16;
    m.heads = m.kv_heads = 4;
    m.head_dim = 4;
    m.ffn_hidden = 32;
    m.vocab = 40;
    m.seq_len = m.max_pos = 16;
    m.ffn = DP_FFN_GELU;
    m.norm = DP_NORM_LAYERNORM;
    m.pos = DP_POS_LEARNED;
    m.tied_embeddings = m.qkv_bias = m.out_bias = m.mlp_bias = true;
    m.norms_per_layer = 2;
    struct dp_layout l;
    dp_layout_default(&l);
    l.dp = 2;
    l.mbs = 2;
    l.gbs = 4;
    l.seq_len = 16;
    struct dp_exec_costs k = {.threads = 1,
                              .concurrent = 1,
                              .seq_len = 16,
                              .head_dim = 4,
                              .ffn = m.ffn,
                              .norm = m.norm,
                              .gemm_gflops = 1,
                              .conc_eff = 1,
                              .bw_gbps = {10, 10, 10},
                              .cache_bytes = {1 << 20, 32 << 20}};
    k.reuse.n = 2;
    k.reuse.bytes[0] = MIB;
    k.reuse.bytes[1] = 64 * MIB;
    k.reuse.read_gbps[0] = 100;
    k.reuse.read_gbps[1] = 10;
    k.reuse.write_gbps[0] = 50;
    k.reuse.write_gbps[1] = 5;
    k.reuse.gemm_gflops = 1;
    struct dp_exec_machine run = {.world = 2,
                                  .ranks_per_node = 1,
                                  .threads = 1,
                                  .costs = &k,
                                  .allreduce_small_s = 1e-5,
                                  .allreduce_1mib_s = 1e-4};
    struct dp_exec_prediction p0, p1;
    struct dp_err err = {0};
    CHECK_EQ(dp_exec_predict(&m, &l, &run, &p0, &err), 0);
    run.lockstep_ranks = 2;
    run.lockstep_n = 2;
    run.lockstep_seg_s[0] = 1e-6;
    run.lockstep_wait_s[0] = 1e-7;
    run.lockstep_seg_s[1] = 10;
    run.lockstep_wait_s[1] = 1;
    CHECK_EQ(dp_exec_predict(&m, &l, &run, &p1, &err), 0);
    double added = p1.step_s - p0.step_s;
    CHECK(p0.step_s > 0 && p0.comm_s > 0 && p0.comm_s < 0.5 * p0.step_s);
    CHECK(added >= 0.1 * (p0.step_s - p0.comm_s) * (1 - 1e-9));
    CHECK(added <= 0.1 * (p0.step_s + added) * (1 + 1e-9));
    CHECK_NEAR(p1.comm_s - p0.comm_s, added, 1e-12); /* the waits are communication */
}

int main(void)
{
    step_waits();
    struct pricer c;
    init(&c, 1);
    const struct dp_backend_ops *o = c.base.ops;
    struct dp_backend *be = &c.base;
    const int64_t N = 256, C = 1024; /* 1 MiB of floats */
    real *a = o->alloc(be, (size_t)MIB), *b = o->alloc(be, (size_t)MIB),
         *out = o->alloc(be, (size_t)MIB), *x = o->alloc(be, (size_t)(8 * MIB)),
         *y = o->alloc(be, 4096);
    CHECK(a && b && out && x && y);

    /* Never touched: read 2 MiB at 10 GB/s, write 1 MiB at 5. */
    double t = PRICE(&c, o->residual(be, out, a, b, NULL, N, C));
    CHECK_NEAR(t, 2 * MIB / 10e9 + MIB / 5e9, 1e-12);

    /* 8 MiB of something else written, then the same add: every operand 8 MiB away. */
    t = PRICE(&c, o->zero(be, x, (size_t)(8 * MIB)));
    CHECK_NEAR(t, 8 * MIB / 5e9, 1e-12);
    t = PRICE(&c, o->residual(be, out, a, b, NULL, N, C));
    CHECK_NEAR(t, 2 * MIB / 55e9 + MIB / 27.5e9, 1e-12);

    /* At once again: 0 bytes in between, hot. */
    t = PRICE(&c, o->residual(be, out, a, b, NULL, N, C));
    CHECK_NEAR(t, 2 * MIB / 100e9 + MIB / 50e9, 1e-12);

    /* Distinct bytes, not traffic: 5000 passes over one 4 KiB buffer in between count
     * 4 KiB once (and number the operations past the tree's first 4096). */
    for (int i = 0; i < 5000; i++)
        o->add_inplace(be, y, y, 1024);
    o->zero(be, x, (size_t)(8 * MIB));
    t = PRICE(&c, o->residual(be, out, a, b, NULL, N, C));
    double d = 8 * MIB + 4096, f = log(d / MIB) / log(64.0);
    CHECK_NEAR(t, 2 * MIB / ((100 + f * (10 - 100)) * 1e9) + MIB / ((50 + f * (5 - 50)) * 1e9),
               1e-12);

    /* A buffer freed no longer counts: x's 8 MiB is gone from between. */
    o->zero(be, x, (size_t)(8 * MIB));
    o->free(be, x);
    t = PRICE(&c, o->residual(be, out, a, b, NULL, N, C));
    CHECK_NEAR(t, 2 * MIB / 100e9 + MIB / 50e9, 1e-12);

    release(&c);

    /* AdamW: its hot cost per element plus the cold factor times its operands' extra over
     * hot, but no more than its roofline from memory, 7 x 4 bytes an element at the triad's
     * rate. 1 Mi parameters never touched (grad read at 10 GB/s, p m v written at 5: extra
     * 4 MiB (1/10 - 1/100) + 12 MiB (1/5 - 1/50) GB/s), factor 1, 0.5 ns hot. */
    init(&c, 1);
    c.pr.adamw_ns = 0.5;
    c.pr.reuse.adamw = 1;
    real *p = o->alloc(be, (size_t)(4 * MIB)), *g = o->alloc(be, (size_t)(4 * MIB)),
         *m1 = o->alloc(be, (size_t)(4 * MIB)), *v1 = o->alloc(be, (size_t)(4 * MIB));
    CHECK(p && g && m1 && v1);
    const double E = MIB, curve = 0.5e-9 * E + 4 * MIB * (1 / 10e9 - 1 / 100e9) +
                                  12 * MIB * (1 / 5e9 - 1 / 50e9);
    /* A triad of 1 GB/s (init's): the roofline, 28 MiB / 1e9, is far slower; the curve. */
    t = PRICE(&c, o->adamw(be, p, g, m1, v1, (int64_t)E, 1e-3, 0.9, 0.95, 1e-8, 0, 1, 1, 1));
    CHECK_NEAR(t, curve, 1e-12);
    /* A triad of 40 GB/s: 28 MiB at 40 GB/s (0.73 ms) is under the curve's 2.9 ms. The
     * operands are hot now; free them for cold ones. */
    o->free(be, p), o->free(be, g), o->free(be, m1), o->free(be, v1);
    c.pr.bw_gbps[2] = 40;
    p = o->alloc(be, (size_t)(4 * MIB)), g = o->alloc(be, (size_t)(4 * MIB)),
    m1 = o->alloc(be, (size_t)(4 * MIB)), v1 = o->alloc(be, (size_t)(4 * MIB));
    t = PRICE(&c, o->adamw(be, p, g, m1, v1, (int64_t)E, 1e-3, 0.9, 0.95, 1e-8, 0, 1, 1, 1));
    CHECK_NEAR(t, 28 * MIB / 40e9, 1e-12);
    /* Compute-bound roofline: 5 ns an element (5.2 ms) is over 28 MiB at 40 GB/s but the
     * curve's hot 5.2 ms plus its extra is more still: the roofline, 5 ns x E. */
    c.pr.adamw_ns = 5;
    o->free(be, p), o->free(be, g), o->free(be, m1), o->free(be, v1);
    p = o->alloc(be, (size_t)(4 * MIB)), g = o->alloc(be, (size_t)(4 * MIB)),
    m1 = o->alloc(be, (size_t)(4 * MIB)), v1 = o->alloc(be, (size_t)(4 * MIB));
    t = PRICE(&c, o->adamw(be, p, g, m1, v1, (int64_t)E, 1e-3, 0.9, 0.95, 1e-8, 0, 1, 1, 1));
    CHECK_NEAR(t, 5e-9 * E, 1e-12);
    /* A plain pass under the same ceiling: a residual add over never-touched 1 MiB operands,
     * 2 MiB read at 10 GB/s and 1 MiB written at 5 on the curve (0.42 ms), is 2 MiB read
     * once and 1 MiB written twice at the triad's 40 GB/s (0.10 ms). */
    real *ra = o->alloc(be, (size_t)MIB), *rb = o->alloc(be, (size_t)MIB),
         *ro = o->alloc(be, (size_t)MIB);
    CHECK(ra && rb && ro);
    t = PRICE(&c, o->residual(be, ro, ra, rb, NULL, N, C));
    CHECK_NEAR(t, 4 * MIB / 40e9, 1e-12);
    release(&c);

    /* Two ranks on the node share its last-level cache: past the private L2, what the other
     * touches meanwhile doubles the distance, 8 MiB -> 16 MiB. */
    init(&c, 2);
    a = o->alloc(be, (size_t)MIB);
    b = o->alloc(be, (size_t)MIB);
    out = o->alloc(be, (size_t)MIB);
    x = o->alloc(be, (size_t)(8 * MIB));
    o->residual(be, out, a, b, NULL, N, C);
    o->zero(be, x, (size_t)(8 * MIB));
    t = PRICE(&c, o->residual(be, out, a, b, NULL, N, C));
    CHECK_NEAR(t, 2 * MIB / 40e9 + MIB / 20e9, 1e-12);
    release(&c);

    /* Ranks in lock step: a collective over n ranks waits dp_max_normal(n) jitter sqrt(t) for
     * t seconds of work since this rank's last synchronisation (collectives themselves
     * free here). 2 ranks: 0.5642; 4: 1.0294. */
    init(&c, 1);
    c.lockstep_jitter = 1e-3;
    c.coll_bps = 1e30;
    c.size[DP_GROUP_TP] = 2;
    c.size[DP_GROUP_DP] = 4;
    a = o->alloc(be, (size_t)MIB);
    b = o->alloc(be, (size_t)MIB);
    out = o->alloc(be, (size_t)MIB);
    double work = PRICE(&c, o->residual(be, out, a, b, NULL, N, C));
    t = PRICE(&c, o->allreduce(be, DP_GROUP_TP, out, 16, DP_OP_SUM, NULL));
    CHECK_NEAR(t, 0.5642 * 1e-3 * sqrt(work), 1e-12);
    t = PRICE(&c, o->allreduce(be, DP_GROUP_TP, out, 16, DP_OP_SUM, NULL)); /* nothing since */
    CHECK(t == 0);
    work = PRICE(&c, o->residual(be, out, a, b, NULL, N, C));
    t = PRICE(&c, o->allreduce(be, DP_GROUP_DP, out, 16, DP_OP_SUM, NULL));
    CHECK_NEAR(t, 1.0294 * 1e-3 * sqrt(work), 1e-12);

    /* Measured waits (calibrate's lock-step points over 2 ranks) replace the sqrt law: read
     * off them, linear between two, sqrt(t) through the first before it and through the
     * last past it, scaled to a group of 4 by 1.0294 / 0.5642. Given out of order and with
     * a noisy point below its neighbour: sorted, and that wait raised to the one before. The
     * points bracket the residual's time w: 0.1 w waits 0.02 w, 1.5 w waits 0.3 w, 4 w
     * waits 0.2 w (raised to 0.3 w). */
    {
        double seg[3] = {4 * work, 0.1 * work, 1.5 * work},
               wait[3] = {0.2 * work, 0.02 * work, 0.3 * work};
        dp__lockstep_table(&c, 2, 3, seg, wait);
        CHECK(c.ls_n == 3 && c.ls_seg[0] == 0.1 * work && c.ls_wait[2] == 0.3 * work);
        double w = PRICE(&c, o->residual(be, out, a, b, NULL, N, C));
        t = PRICE(&c, o->allreduce(be, DP_GROUP_TP, out, 16, DP_OP_SUM, NULL));
        CHECK_NEAR(t, (0.02 + 0.28 * (w / work - 0.1) / 1.4) * work, 1e-12);
        w = PRICE(&c, o->residual(be, out, a, b, NULL, N, C));
        t = PRICE(&c, o->allreduce(be, DP_GROUP_DP, out, 16, DP_OP_SUM, NULL));
        CHECK_NEAR(t, (0.02 + 0.28 * (w / work - 0.1) / 1.4) * work * 1.0294 / 0.5642, 1e-9);
        /* past the last (8 residuals of work, 4 w measured) and before the first */
        for (int i = 0; i < 8; i++)
            o->residual(be, out, a, b, NULL, N, C);
        w = c.bill.gemm + c.bill.attn + c.bill.ew + c.bill.fork + c.bill.comm + c.bill.opt -
            c.last_sync;
        t = PRICE(&c, o->allreduce(be, DP_GROUP_TP, out, 16, DP_OP_SUM, NULL));
        CHECK(w > 4 * work);
        CHECK_NEAR(t, 0.3 * work * sqrt(w / (4 * work)), 1e-12);
        double seg1[1] = {100 * work}, wait1[1] = {5 * work};
        dp__lockstep_table(&c, 2, 1, seg1, wait1);
        w = PRICE(&c, o->residual(be, out, a, b, NULL, N, C));
        t = PRICE(&c, o->allreduce(be, DP_GROUP_TP, out, 16, DP_OP_SUM, NULL));
        CHECK_NEAR(t, 5 * work * sqrt(w / (100 * work)), 1e-12);
        c.ls_n = 0;
    }

    /* A collective's result sits in another core's cache: its next touch is priced from the
     * shared cache, 4x the private L2 (2 MiB) away: 8 MiB, read 55 GB/s, write 27.5. The
     * all-reduce above covered out's first 64 bytes (one 4 KiB granule); a group of one
     * moves nothing. */
    c.lockstep_jitter = 0;
    o->residual(be, out, a, b, NULL, N, C); /* all three hot now */
    o->allreduce(be, DP_GROUP_TP, out, 262144, DP_OP_SUM, NULL);
    t = PRICE(&c, o->residual(be, out, a, b, NULL, N, C));
    CHECK_NEAR(t, 2 * MIB / 100e9 + MIB / 27.5e9, 1e-12);
    c.size[DP_GROUP_TP] = 1;
    o->allreduce(be, DP_GROUP_TP, out, 262144, DP_OP_SUM, NULL);
    t = PRICE(&c, o->residual(be, out, a, b, NULL, N, C));
    CHECK_NEAR(t, 2 * MIB / 100e9 + MIB / 50e9, 1e-12);
    release(&c);

    /* SGEMM: the hot model plus each operand's extra over hot times its factor. 256 x 1024
     * x 256 NN, A and B never touched (far), C written: hot 1 us + 2 m n k / 100 GFLOP/s +
     * 0.1 ns (m + n) k + 0.2 ns m n; cold 2x A's and B's extra read time and C's extra
     * write time. */
    init(&c, 1);
    struct dp_exec_reuse *r = &c.pr.reuse;
    r->gemm_call_s = 1e-6;
    r->gemm_gflops = 100;
    r->gemm_ab_s = 0.1e-9;
    r->gemm_c_s = 0.2e-9;
    r->gemm_cold = 2;
    const int m = 256, n = 1024, k = 256;
    a = o->alloc(be, sizeof(real) * m * k);
    b = o->alloc(be, sizeof(real) * k * n);
    out = o->alloc(be, sizeof(real) * m * n);
    t = PRICE(&c, o->gemm(be, false, false, m, n, k, 1, a, k, b, n, 0, out, n));
    double hot = 1e-6 + 2.0 * m * n * k / 100e9 + 0.1e-9 * (m + n) * k + 0.2e-9 * m * n;
    double ab = (double)sizeof(real) * (m * k + k * n), cb = (double)sizeof(real) * m * n;
    double cold = 2 * (ab * (1 / 10e9 - 1 / 100e9) + cb * (1 / 5e9 - 1 / 50e9));
    CHECK_NEAR(t, hot + cold, 1e-12);
    /* again at once: hot */
    t = PRICE(&c, o->gemm(be, false, false, m, n, k, 1, a, k, b, n, 0, out, n));
    CHECK_NEAR(t, hot, 1e-12);
    /* A's transposed read covers the same bytes: the same price */
    t = PRICE(&c, o->gemm(be, true, false, m, n, k, 1, a, m, b, n, 1, out, n));
    CHECK_NEAR(t, hot, 1e-12);
    release(&c);
    return check_failures ? 1 : 0;
}
