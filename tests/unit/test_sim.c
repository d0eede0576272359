/*
 * The event simulation (sim/) on pipelines filled in by hand, whose timelines
 * are known from the schedules' papers: the uniform 1F1B and GPipe bubble
 * (p-1)/(m+p-1) (Narayanan et al. 2021, "Efficient Large-Scale Language Model
 * Training on GPU Clusters", sec. 2.2.1, and Huang et al. 2019, GPipe), the
 * interleaved schedule's (p-1)/(v m + p-1) (the same paper, sec. 2.2.2: the
 * bubble time shrinks by v), Megatron-Core's warm-up counts, the activations
 * in flight (p micro-batches on stage 0 in 1F1B, all m in GPipe), a blocking
 * send on the critical path, and the Gantt chart's idle area, read back from
 * its SVG, against the bubble. DualPipeV: its order on pp 2, M 4 as worked out by hand
 * (the executor's test has the same string), its passes' invariants on pp 2-6, and its
 * timeline against the cost model's own list scheduler (costmodel/pipeline_dualpipev.c, a
 * separate walk of the same eight steps) on uneven stages with paired all-to-alls and
 * deferred weight gradients: the two must agree to rounding.
 */
#include "check.h"
#include "sim/sim.h"
#include "viz/viz.h"

#include <stdio.h>
#include <stdlib.h>

/* p stages of v chunks of `per` layers; each layer's attention and MLP block take f/2
 * forward and b/2 backward (a layer f and b); nothing else costs anything. */
static void uniform(struct dp_sim_input *in, int p, int v, int64_t M, int per, double f, double b,
                    enum dp_sim_schedule s)
{
    memset(in, 0, sizeof *in);
    in->pp = p;
    in->vpp = v;
    in->M = M;
    in->schedule = s;
    in->layers = p * v * per;
    in->moe_from = in->layers;
    for (int k = 0; k < p * v; k++) {
        in->chunk_first[k] = k * per;
        in->chunk_count[k] = per;
    }
    in->tp = in->cp = in->dp = 1;
    in->ranks_per_stage = in->stage_rank_stride = 1;
    for (int k = 0; k < DP_BLOCKS; k++) {
        in->ops.layer[DP_LAYER_DENSE].blk[k].fwd_s = f / 2;
        in->ops.layer[DP_LAYER_DENSE].blk[k].bwd_s = b / 2;
    }
    for (int r = 0; r < p; r++) {
        in->mem[r].static_bytes = 1000000;
        in->mem[r].layer_bytes[DP_LAYER_DENSE] = 1000;
    }
}

static int run(const struct dp_sim_input *in, bool record, struct dp_sim_result *r)
{
    struct dp_sim_opts o;
    dp_sim_opts_default(&o);
    o.record = record;
    struct dp_err err = {0};
    int rc = dp_sim_engine(in, &o, r, &err);
    if (rc)
        fprintf(stderr, "engine: %s\n", err.msg);
    return rc;
}

static void test_schedule_orders(void)
{
    struct dp_sim_step st[64];
    struct dp_err err = {0};
    /* 1F1B, p = 4, m = 8: rank 0 warms up with p - 1 = 3 forwards, then alternates. */
    CHECK_EQ(dp_sim_schedule(DP_SIM_SCHED_1F1B, 4, 1, 8, 0, st, &err), 0);
    CHECK(st[0].fwd && st[1].fwd && st[2].fwd && st[3].fwd && !st[4].fwd);
    CHECK_EQ(st[3].mb, 3);
    CHECK_EQ(st[4].mb, 0);
    /* the last rank has no warm-up: F0 B0 F1 B1 ... */
    CHECK_EQ(dp_sim_schedule(DP_SIM_SCHED_1F1B, 4, 1, 8, 3, st, &err), 0);
    CHECK(st[0].fwd && !st[1].fwd && st[2].fwd);
    /* interleaved, p = 2, v = 2, m = 4, rank 0: warm-up 2 (p - 1) + (v - 1) p = 4 forwards
     * in table order mb0 c0, mb1 c0, mb0 c1, mb1 c1, then F mb2 c0 and B mb0 c1. */
    CHECK_EQ(dp_sim_schedule(DP_SIM_SCHED_INTERLEAVED, 2, 2, 4, 0, st, &err), 0);
    CHECK(st[0].mb == 0 && st[0].chunk == 0 && st[1].mb == 1 && st[1].chunk == 0);
    CHECK(st[2].mb == 0 && st[2].chunk == 1 && st[3].mb == 1 && st[3].chunk == 1);
    CHECK(st[4].fwd && st[4].mb == 2 && st[4].chunk == 0);
    CHECK(!st[5].fwd && st[5].mb == 0 && st[5].chunk == 1);
    /* every (micro-batch, chunk) once forward and once backward */
    int seen[4][2][2] = {{{0}}};
    for (int i = 0; i < 16; i++)
        seen[st[i].mb][st[i].chunk][st[i].fwd]++;
    for (int mb = 0; mb < 4; mb++)
        for (int c = 0; c < 2; c++)
            CHECK(seen[mb][c][0] == 1 && seen[mb][c][1] == 1);
    /* refused shapes */
    CHECK_EQ(dp_sim_schedule(DP_SIM_SCHED_INTERLEAVED, 4, 2, 6, 0, st, &err), DP_EINFEASIBLE);
    CHECK_EQ(dp_sim_schedule(DP_SIM_SCHED_1F1B, 4, 2, 8, 0, st, &err), DP_EINFEASIBLE);
}

/* Idle area over the span from the Gantt's SVG: 1 - (bars' width inside the span) /
 * (rows x span width). */
static double gantt_idle(const struct dp_sim_result *r, double *span_px)
{
    size_t n = 0;
    for (int i = 0; i < r->nstages; i++)
        n += r->stage[i].npass;
    struct dp_viz_bar *bar = calloc(n, sizeof *bar);
    const char *rows[DP_MAX_PP];
    static const char *const names[] = {"forward", "backward"};
    static const char *const colors[] = {"#0072b2", "#d55e00"};
    size_t k = 0;
    for (int i = 0; i < r->nstages; i++) {
        rows[i] = "stage";
        for (size_t j = 0; j < r->stage[i].npass; j++)
            bar[k++] =
                (struct dp_viz_bar){r->stage[i].pass[j].t0,          r->stage[i].pass[j].t1, i,
                                    r->stage[i].pass[j].fwd ? 0 : 1, r->stage[i].pass[j].mb, false};
    }
    struct dp_viz_gantt g = {.title = "t",
                             .x_label = "time (s)",
                             .nrows = r->nstages,
                             .row = rows,
                             .bar = bar,
                             .nbar = n,
                             .ncolors = 2,
                             .color_name = names,
                             .colors = colors,
                             .x_max = r->step_s,
                             .span0 = 0,
                             .span1 = r->pipe_s};
    struct dp_buf b = {0};
    struct dp_err err = {0};
    CHECK_EQ(dp_viz_gantt(&g, &b, &err), 0);
    free(bar);
    double x0 = 0, x1 = 0, busy = 0;
    const char *p = strstr(b.data ? b.data : "", "data-span-x0=\"");
    CHECK(p != NULL);
    if (p)
        sscanf(p, "data-span-x0=\"%lf\" data-span-x1=\"%lf\"", &x0, &x1);
    int nbars = 0;
    for (const char *q = b.data; q && (q = strstr(q, "<rect class=\"bar\"")); q++) {
        double w = 0;
        const char *wq = strstr(q, "width=\"");
        if (wq && sscanf(wq, "width=\"%lf\"", &w) == 1)
            busy += w;
        nbars++;
    }
    CHECK_EQ(nbars, (long long)n);
    dp_buf_release(&b);
    *span_px = x1 - x0;
    return x1 > x0 ? 1 - busy / (r->nstages * (x1 - x0)) : -1;
}

static void test_uniform_1f1b(void)
{
    /* p = 4, m = 8, F = 1 s and B = 2 s per stage (2 layers of 0.5 / 1 s): the step is
     * (m + p - 1)(F + B) = 11 x 3 = 33 s, each stage busy m (F + B) = 24 s, so idle 9 s:
     * (p - 1)/(m + p - 1) = 3/11. */
    struct dp_sim_input *in = malloc(sizeof *in);
    uniform(in, 4, 1, 8, 2, 0.5, 1.0, DP_SIM_SCHED_1F1B);
    struct dp_sim_result r;
    CHECK_EQ(run(in, true, &r), 0);
    CHECK_NEAR(r.step_s, 33.0, 1e-12);
    CHECK_NEAR(r.pipe_s, 33.0, 1e-12);
    CHECK_NEAR(r.bubble, 3.0 / 11, 1e-12);
    for (int i = 0; i < 4; i++) {
        CHECK_NEAR(r.stage[i].busy_s, 24.0, 1e-12);
        CHECK_NEAR(r.stage[i].bubble, 3.0 / 11, 1e-12);
        CHECK_NEAR(r.stage[i].b.compute, 24.0, 1e-12);
        CHECK_NEAR(r.stage[i].b.bubble, 9.0, 1e-12);
    }
    /* In flight on stage 0: p = 4 micro-batches of 2 layers x 1000 B; the last stage
     * holds one at a time. */
    CHECK_EQ(r.stage[0].peak_bytes, 1000000 + 4 * 2 * 1000);
    CHECK_EQ(r.stage[3].peak_bytes, 1000000 + 1 * 2 * 1000);
    /* The Gantt's idle area is the bubble (to its 0.1 px rounding of 64 bar ends). */
    double px;
    double idle = gantt_idle(&r, &px);
    CHECK(px > 500);
    CHECK(fabs(idle - 3.0 / 11) < 64 * 0.05 / (4 * px) + 1e-9);
    dp_sim_result_release(&r);

    /* Two schedules a step (local_batch): the second starts when the first is done, at 33
     * s, and runs the same way: 66 s, each stage busy 48 s, the micro-batches numbered on
     * through the step (8-15 in the second). */
    in->schedules = 2;
    CHECK_EQ(run(in, false, &r), 0);
    CHECK_NEAR(r.step_s, 66.0, 1e-12);
    CHECK_NEAR(r.pipe_s, 66.0, 1e-12);
    CHECK_EQ(r.schedules, 2);
    CHECK_EQ(r.microbatches, 8);
    for (int i = 0; i < 4; i++) {
        CHECK_NEAR(r.stage[i].busy_s, 48.0, 1e-12);
        CHECK_EQ((long long)r.stage[i].npass, 32);
        CHECK_EQ(r.stage[i].pass[r.stage[i].npass - 1].mb, 15);
        CHECK(r.stage[i].pass[16].t0 >= 33.0 - 1e-12);
    }
    CHECK_EQ(r.stage[0].peak_bytes, 1000000 + 4 * 2 * 1000);
    dp_sim_result_release(&r);
    in->schedules = 0;

    /* GPipe, same pipeline: the same bubble, but all m micro-batches in flight on stage 0. */
    uniform(in, 4, 1, 8, 2, 0.5, 1.0, DP_SIM_SCHED_GPIPE);
    CHECK_EQ(run(in, false, &r), 0);
    CHECK_NEAR(r.step_s, 33.0, 1e-12);
    CHECK_NEAR(r.bubble, 3.0 / 11, 1e-12);
    CHECK_EQ(r.stage[0].peak_bytes, 1000000 + 8 * 2 * 1000);
    dp_sim_result_release(&r);
    free(in);
}

static void test_interleaved(void)
{
    /* p = 4, v = 2, m = 8, one layer per chunk: a chunk's pass takes F/v = 0.5 s forward,
     * B/v = 1 s backward. Busy m (F + B) = 24 s; the bubble time (p - 1)(F + B)/v = 4.5 s
     * (Narayanan et al. sec. 2.2.2), so the span is 28.5 s and idle over span
     * (p - 1)/(v m + p - 1) = 3/19. */
    struct dp_sim_input *in = malloc(sizeof *in);
    uniform(in, 4, 2, 8, 1, 0.5, 1.0, DP_SIM_SCHED_INTERLEAVED);
    struct dp_sim_result r;
    CHECK_EQ(run(in, true, &r), 0);
    CHECK_NEAR(r.pipe_s, 28.5, 1e-12);
    CHECK_NEAR(r.bubble, 3.0 / 19, 1e-12);
    double px;
    CHECK(fabs(gantt_idle(&r, &px) - 3.0 / 19) < 128 * 0.05 / (4 * px) + 1e-9);
    dp_sim_result_release(&r);
    free(in);
}

static void test_blocking_send(void)
{
    /* p = 2, m = 1, F = 1, B = 2, a send of 0.25 s each way that blocks the sender
     * (no pp_overlap): F on stage 0 [0, 1], send [1, 1.25]; F on stage 1 [1.25, 2.25],
     * B [2.25, 4.25], send back [4.25, 4.5]; B on stage 0 [4.5, 6.5]. */
    struct dp_sim_input *in = malloc(sizeof *in);
    uniform(in, 2, 1, 1, 1, 1.0, 2.0, DP_SIM_SCHED_1F1B);
    in->ops.p2p_s = 0.25;
    struct dp_sim_result r;
    CHECK_EQ(run(in, false, &r), 0);
    CHECK_NEAR(r.step_s, 6.5, 1e-12);
    CHECK_NEAR(r.stage[0].b.pp, 0.25, 1e-12);
    CHECK_NEAR(r.stage[1].b.pp, 0.25, 1e-12);
    /* stage 0 waits for the gradient from 1.25 to 4.5 */
    CHECK_NEAR(r.stage[0].b.bubble, 3.25, 1e-12);
    dp_sim_result_release(&r);
    free(in);
}

/* One stage, one micro-batch, 4 layers of F = 1 s and B = 2 s, in two data-parallel units
 * of 2 layers whose reduction takes 1 s each. */
static void dp_case(struct dp_sim_input *in, struct dp_dp_unit u[2], bool overlap, double c)
{
    uniform(in, 1, 1, 1, 4, 1.0, 2.0, DP_SIM_SCHED_1F1B);
    in->zero = 1;
    in->ops.contention = c;
    memset(u, 0, 2 * sizeof *u);
    u[0] = (struct dp_dp_unit){.chunk = 0, .first = 0, .count = 2, .reduce_s = 1};
    u[1] = (struct dp_dp_unit){.chunk = 0, .first = 2, .count = 2, .reduce_s = 1};
    in->units[0] = u;
    in->nunits[0] = 2;
    in->dsched[0].reduce_overlap = overlap;
}

static void test_dp_overlap(void)
{
    struct dp_sim_input *in = malloc(sizeof *in);
    struct dp_dp_unit u[2];
    struct dp_sim_result r;
    /* Overlapped (Megatron --overlap-grad-reduce): forward [0, 4]; backward of layers 3, 2
     * [4, 8] completes unit 1, reduced [8, 9] beside layers 1, 0 [8, 12]; unit 0 reduced
     * [12, 13]: the step is 13 s, 1 s of it exposed. */
    dp_case(in, u, true, 0);
    CHECK_EQ(run(in, false, &r), 0);
    CHECK_NEAR(r.step_s, 13.0, 1e-12);
    CHECK_NEAR(r.stage[0].b.dp, 1.0, 1e-12);
    dp_sim_result_release(&r);
    /* Not overlapped: both after the backward, [12, 13] and [13, 14]. */
    dp_case(in, u, false, 0);
    CHECK_EQ(run(in, false, &r), 0);
    CHECK_NEAR(r.step_s, 14.0, 1e-12);
    CHECK_NEAR(r.stage[0].b.dp, 2.0, 1e-12);
    dp_sim_result_release(&r);
    /* Contention 0.1: during unit 1's reduction [8, 9] compute runs at 0.9, so layers 1, 0
     * (4 s of work) end at 9 + (4 - 0.9) = 12.1; unit 0 reduced [12.1, 13.1]. */
    dp_case(in, u, true, 0.1);
    CHECK_EQ(run(in, false, &r), 0);
    CHECK_NEAR(r.step_s, 13.1, 1e-12);
    CHECK_NEAR(r.stage[0].b.dp, 1.1, 1e-12);
    dp_sim_result_release(&r);
    free(in);
}

static void test_zero3_prefetch(void)
{
    /* ZeRO-3 without pipelining, 2 units of 2 layers (F = 1 s, B = 2 s per layer), each
     * gathered in 1 s before the forward and again before the backward. */
    struct dp_sim_input *in = malloc(sizeof *in);
    struct dp_dp_unit u[2];
    struct dp_sim_result r;
    for (int P = 0; P <= 1; P++) {
        dp_case(in, u, true, 0);
        in->zero = 3;
        u[0].reduce_s = u[1].reduce_s = 0;
        u[0].gather_s = u[1].gather_s = 1;
        u[0].gather_bytes = u[1].gather_bytes = 5000;
        in->dsched[0].gather_each_mb = true;
        in->dsched[0].prefetch = P;
        CHECK_EQ(run(in, false, &r), 0);
        if (P == 0) {
            /* gather [0, 1], layers 0-1 [1, 3], gather [3, 4], layers 2-3 [4, 6]; backward:
             * gather unit 1 [6, 7], [7, 11], gather unit 0 [11, 12], [12, 16] */
            CHECK_NEAR(r.step_s, 16.0, 1e-12);
            CHECK_NEAR(r.stage[0].b.dp, 4.0, 1e-12);
            /* one unit gathered at a time, with its layers' activations */
            CHECK_EQ(r.stage[0].peak_bytes, 1000000 + 5000 + 4 * 1000);
        } else {
            /* unit 1 is gathered [1, 2] while unit 0 computes [1, 3]: forward ends at 5;
             * backward: unit 1 [5, 6] (issued at the pass's start), unit 0 [6, 7] beside
             * layers 3-2 [6, 10], layers 1-0 [10, 14] */
            CHECK_NEAR(r.step_s, 14.0, 1e-12);
            CHECK_NEAR(r.stage[0].b.dp, 2.0, 1e-12);
            /* two units held at once (the one computing and the one prefetched) */
            CHECK_EQ(r.stage[0].peak_bytes, 1000000 + 2 * 5000 + 4 * 1000);
        }
        dp_sim_result_release(&r);
    }
    free(in);
}

/* DualPipeV on pp 2, M 4: the passes as F<mb>.<chunk> / B<mb>.<chunk> (an overlapped pair its
 * forward then its backward, a backward for the inputs only as B, W passes left out), worked
 * out by hand from the eight steps (tests/executor/test_executor_interleave.c derives the
 * same strings); and the W passes: as many as the backwards for inputs only, each after its
 * own. */
static void test_dualpipev_order(void)
{
    static const char *const want[2] = {
        "F0.0 F1.0 F2.0 F0.1 B0.1 F1.1 F3.0 B1.1 F2.1 B0.0 B2.1 F3.1 B1.0 B3.1 B2.0 B3.0",
        "F0.0 F0.1 F1.0 F1.1 F2.0 B0.1 F2.1 B0.0 F3.0 B1.1 F3.1 B1.0 B2.1 B2.0 B3.1 B3.0"};
    struct dp_err err = {0};
    for (int r = 0; r < 2; r++) {
        int64_t n = dp_sim_schedule_passes(DP_SIM_SCHED_DUALPIPEV, 2, 2, 4, r);
        struct dp_sim_step *st = calloc((size_t)n, sizeof *st);
        CHECK_EQ(dp_sim_schedule(DP_SIM_SCHED_DUALPIPEV, 2, 2, 4, r, st, &err), 0);
        char got[512] = "";
        size_t len = 0;
        int bi = 0, w = 0;
        for (int64_t i = 0; i < n; i++) {
            if (st[i].kind == DP_SIM_PASS_W) {
                w++;
                continue;
            }
            bi += st[i].kind == DP_SIM_PASS_BI;
            len += (size_t)snprintf(got + len, sizeof got - len, "%s%c%d.%d", len ? " " : "",
                                    st[i].fwd ? 'F' : 'B', (int)st[i].mb, (int)st[i].chunk);
        }
        if (strcmp(got, want[r]) != 0)
            fprintf(stderr, "DualPipeV stage %d:\n  sim     %s\n  by hand %s\n", r, got, want[r]);
        CHECK(strcmp(got, want[r]) == 0);
        CHECK_EQ(w, bi);
        free(st);
    }
    CHECK_EQ(dp_sim_schedule(DP_SIM_SCHED_DUALPIPEV, 4, 2, 7, 0, NULL, &err), DP_EINFEASIBLE);
    CHECK_EQ(dp_sim_schedule(DP_SIM_SCHED_DUALPIPEV, 4, 1, 8, 0, NULL, &err), DP_EINFEASIBLE);
}

/* Every rank's DualPipeV passes, pp 2-6 and M 2 pp to 4 pp: each (micro-batch, chunk) once
 * forward and once backward, each phase's forwards and backwards in micro-batch order, a
 * backward after its forward, each W after the backward for inputs only it finishes (first
 * in, first out), and pairs as a forward then a backward. */
static void test_dualpipev_passes(void)
{
    struct dp_err err = {0};
    for (int p = 2; p <= 6; p++)
        for (int64_t M = 2 * p; M <= 4 * p; M += p)
            for (int r = 0; r < p; r++) {
                int64_t n = dp_sim_schedule_passes(DP_SIM_SCHED_DUALPIPEV, p, 2, M, r);
                CHECK(n >= 4 * M);
                struct dp_sim_step *st = calloc((size_t)n, sizeof *st);
                int *fwd = calloc((size_t)(2 * M), sizeof *fwd), *bwd = calloc(2 * M, sizeof *bwd);
                int next[2][2] = {{0, 0}, {0, 0}};
                int64_t wq[256], wh = 0, wt = 0;
                CHECK_EQ(dp_sim_schedule(DP_SIM_SCHED_DUALPIPEV, p, 2, M, r, st, &err), 0);
                bool ok = true;
                for (int64_t i = 0; i < n; i++) {
                    const struct dp_sim_step *x = &st[i];
                    const int k = x->chunk * (int)M + x->mb;
                    if (x->kind == DP_SIM_PASS_W) {
                        ok &= wh < wt && wq[wh++] == k;
                        continue;
                    }
                    if (x->fwd) {
                        ok &= fwd[k]++ == 0 && x->mb == next[x->chunk][0]++;
                        ok &= !x->paired || (i + 1 < n && st[i + 1].paired && !st[i + 1].fwd);
                    } else {
                        ok &= fwd[k] == 1 && bwd[k]++ == 0 && x->mb == next[x->chunk][1]++;
                        ok &= !x->paired || (i > 0 && st[i - 1].paired && st[i - 1].fwd);
                        if (x->kind == DP_SIM_PASS_BI && wt < 256)
                            wq[wt++] = k;
                    }
                }
                ok &= wh == wt && next[0][0] == M && next[1][0] == M && next[0][1] == M &&
                      next[1][1] == M;
                if (!ok)
                    fprintf(stderr, "DualPipeV p=%d M=%lld rank %d: bad pass list\n", p,
                            (long long)M, r);
                CHECK(ok);
                free(st);
                free(fwd);
                free(bwd);
            }
}

/* The cost model's DualPipeV timeline (its own walk of the eight steps) against the
 * engine's, on the same per-stage costs: pp stages with the given layers each (model
 * order), MoE layers whose two all-to-alls cost `ep` a pass alone and `ep_pair` inside a
 * pair, F 1, B 2 (of which W 0.7) per layer, for M = 2 pp to 4 pp. */
static void dualpipev_case(int p, const int *count, double ep, double ep_pair)
{
    const int S = 2 * p;
    const double f = 1, b = 2, w = 0.7;
    struct dp_sim_input *in = malloc(sizeof *in);
    memset(in, 0, sizeof *in);
    in->pp = p;
    in->vpp = 2;
    in->v_style = true;
    in->schedule = DP_SIM_SCHED_AUTO;
    in->tp = in->cp = in->dp = 1;
    in->ranks_per_stage = in->stage_rank_stride = 1;
    int first = 0;
    for (int s = 0; s < S; s++) {
        in->chunk_first[s] = first;
        in->chunk_count[s] = count[s];
        first += count[s];
    }
    in->layers = first;
    in->moe_from = 0;
    for (int k = 0; k < DP_BLOCKS; k++) {
        struct dp_block_cost *bc = &in->ops.layer[DP_LAYER_MOE].blk[k];
        bc->fwd_s = f / 2;
        bc->bwd_s = b / 2;
        bc->wgrad_s = w / 2;
    }
    struct dp_block_cost *mlp = &in->ops.layer[DP_LAYER_MOE].blk[DP_BLOCK_MLP];
    mlp->ep_f = mlp->ep_b = ep;
    mlp->ep_pair = ep_pair;
    for (int r = 0; r < p; r++) {
        in->mem[r].static_bytes = 1000000;
        in->mem[r].layer_bytes[DP_LAYER_MOE] = 1000;
    }
    double F[DP_MAX_CHUNKS], B[DP_MAX_CHUNKS], Fp[DP_MAX_CHUNKS], Bp[DP_MAX_CHUNKS],
        W[DP_MAX_CHUNKS];
    for (int s = 0; s < S; s++) {
        F[s] = count[s] * (f + ep);
        B[s] = count[s] * (b + ep);
        Fp[s] = count[s] * (f + ep_pair);
        Bp[s] = count[s] * (b + ep_pair);
        W[s] = count[s] * w;
    }
    for (int64_t M = 2 * p; M <= 4 * p; M += p) {
        in->M = M;
        struct dp_sim_result r;
        CHECK_EQ(run(in, false, &r), 0);
        double want = dp_pipe_dualpipev_time_s(p, M, F, B, Fp, Bp, W);
        if (fabs(r.pipe_s - want) > 1e-9)
            fprintf(stderr, "DualPipeV M=%lld: sim %.9f, cost model %.9f\n", (long long)M, r.pipe_s,
                    want);
        CHECK_NEAR(r.pipe_s, want, 1e-9);
        CHECK_EQ(r.schedule, DP_SIM_SCHED_DUALPIPEV);
        /* the work is all there: each rank's two stages' passes, M times */
        for (int k = 0; k < p; k++) {
            const int s0 = k, s1 = S - 1 - k;
            double alone = M * (count[s0] + count[s1]) * (f + b);
            CHECK(r.stage[k].b.compute > alone - 1e-9 && r.stage[k].b.compute < alone + 1e-9);
        }
        dp_sim_result_release(&r);
    }
    free(in);
}

/* pp = 3 with uneven stages (1, 3, 2, 2, 3, 1 layers), all-to-alls 0.2 s alone and 0.05 s
 * paired; then 40 random shapes, pp 2-6, 1-4 layers a stage, dense or MoE. */
static void test_dualpipev_against_costmodel(void)
{
    const int count[6] = {1, 3, 2, 2, 3, 1};
    dualpipev_case(3, count, 0.2, 0.05);
    unsigned seed = 12345;
    for (int k = 0; k < 40; k++) {
        seed = seed * 1103515245u + 12345u;
        const int p = 2 + (int)(seed >> 16) % 5;
        int c[12];
        for (int s = 0; s < 2 * p; s++) {
            seed = seed * 1103515245u + 12345u;
            c[s] = 1 + (int)(seed >> 16) % 4;
        }
        dualpipev_case(p, c, k % 2 ? 0.3 : 0, k % 2 ? 0.1 : 0);
    }
}

/* Multi-token prediction after the output layer, by hand: one stage, one micro-batch, one
 * layer (F 1 s, B 2 s), two MTP depths each one more such layer plus 0.5 s forward and 1 s
 * backward of the rest of the module, full recompute of its layers (their forward again in
 * backward): the step is 3 + 2 (3 + 1.5) + 3 x 1 = 15 s, the recompute 3 s, and the head's
 * activations (MTP's included) held from the forward to the backward. */
static void test_mtp(void)
{
    struct dp_sim_input *in = malloc(sizeof *in);
    uniform(in, 1, 1, 1, 1, 1.0, 2.0, DP_SIM_SCHED_1F1B);
    in->ops.mtp_layers = 2;
    in->ops.mtp_kind = DP_LAYER_DENSE;
    in->ops.mtp_f = 0.5;
    in->ops.mtp_b = 1.0;
    in->ops.recompute_share[0] = 1;
    for (int k = 0; k < DP_BLOCKS; k++)
        in->ops.layer[DP_LAYER_DENSE].blk[k].re_s = 0.5;
    in->mem[0].head_bytes = 7000;
    struct dp_sim_result r;
    CHECK_EQ(run(in, true, &r), 0);
    CHECK_NEAR(r.step_s, 15.0, 1e-12);
    CHECK_NEAR(r.stage[0].b.recompute, 3.0, 1e-12);
    CHECK_NEAR(r.stage[0].b.compute, 12.0, 1e-12);
    CHECK_EQ(r.stage[0].peak_bytes, 1000000 + 1000 + 7000);
    /* the MTP layers are named after the model's: layers 1 and 2 */
    int seen = 0;
    for (size_t i = 0; i < r.stage[0].nslice; i++)
        seen |= r.stage[0].slice[i].layer == 1 ? 1 : r.stage[0].slice[i].layer == 2 ? 2 : 0;
    CHECK_EQ(seen, 3);
    dp_sim_result_release(&r);
    free(in);
}

int main(void)
{
    test_schedule_orders();
    test_uniform_1f1b();
    test_interleaved();
    test_blocking_send();
    test_dp_overlap();
    test_zero3_prefetch();
    test_dualpipev_order();
    test_dualpipev_passes();
    test_dualpipev_against_costmodel();
    test_mtp();
    return check_failures ? 1 : 0;
}
