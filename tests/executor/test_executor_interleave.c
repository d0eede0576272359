/*
 * Interleaved 1F1B in the executor (executor/interleave.c):
 *  - the order each stage runs its passes, as `dplan run --dry-run` prints it
 *    (dp_exec_schedule: the executor's own pipeline loop on the pricing backend), is
 *    the simulator's (sim/schedule.c dp_sim_schedule, Megatron-Core's table) for
 *    several pp, vpp and micro-batch counts;
 *  - the stage timeline behind the messages ends (no stall) with every pass once, in
 *    that order;
 *  - its memory counts on a case worked out by hand;
 *  - DualPipeV on the same runtime: its order on pp 2, M 4 written out by hand from the
 *    eight steps of DualPipeV.step (core/schedule_dualpipev.c's comment), and its timeline
 *    complete for other shapes.
 */
#include "check.h"
#include "executor/executor.h"
#include "executor/internal.h"
#include "sim/sim.h"

#include <stdlib.h>
#include <string.h>

/* The simulator's order in the dry run's words: "F0.0 F1.0 ... B1.0" (micro-batch.chunk). */
static void sim_order(int p, int v, int64_t M, int r, char *out, size_t cap)
{
    struct dp_sim_step *st = calloc((size_t)(2 * M * v), sizeof *st);
    struct dp_err err = {0};
    CHECK(st != NULL);
    if (!st)
        return;
    CHECK_EQ(dp_sim_schedule(DP_SIM_SCHED_INTERLEAVED, p, v, M, r, st, &err), 0);
    size_t n = 0;
    out[0] = 0;
    for (int64_t k = 0; k < 2 * M * v && n + 16 < cap; k++)
        n += (size_t)snprintf(out + n, cap - n, "%s%c%d.%d", k ? " " : "", st[k].fwd ? 'F' : 'B',
                              (int)st[k].mb, (int)st[k].chunk);
    free(st);
}

static void test_order_matches_simulator(void)
{
    static const int shapes[][3] = {{2, 2, 2}, {2, 2, 4}, {2, 2, 8}, {2, 3, 4}, {3, 2, 3},
                                    {3, 2, 6}, {4, 2, 4}, {4, 2, 8}, {4, 3, 8}, {2, 4, 6}};
    struct dp_model m;
    struct dp_err err = {0};
    CHECK_EQ(dp_model_load("tiny-gpt", &m, &err), 0);
    char got[4096], want[4096];
    for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++) {
        const int p = shapes[i][0], v = shapes[i][1], M = shapes[i][2];
        m.layers = p * v; /* one layer per chunk */
        struct dp_layout l;
        dp_layout_default(&l);
        l.pp = p;
        l.vpp = v;
        l.mbs = 1;
        l.gbs = M;
        l.seq_len = 32;
        l.precision = DP_FP32;
        for (int r = 0; r < p; r++) {
            err = (struct dp_err){0};
            CHECK_EQ(dp_exec_schedule(&m, &l, r, got, sizeof got, &err), 0);
            sim_order(p, v, M, r, want, sizeof want);
            if (strcmp(got, want) != 0)
                fprintf(stderr, "pp %d vpp %d M %d stage %d:\n  executor %s\n  simulator %s\n", p,
                        v, M, r, got, want);
            CHECK(strcmp(got, want) == 0);
            CHECK(strlen(got) > 0);
        }
    }
}

/* Every pass once, in the order dp__vsched_pass gives, and the timeline ends. */
static void test_timeline_complete(void)
{
    size_t sb[DP_MAX_CHUNKS];
    for (int c = 0; c < DP_MAX_CHUNKS; c++)
        sb[c] = 1;
    for (int p = 2; p <= 5; p++)
        for (int v = 2; v <= 4; v++)
            for (int64_t M = p; M <= 3 * p; M += p)
                for (int r = 0; r < p; r++) {
                    struct dp__vsched vs;
                    struct dp_err err = {0};
                    CHECK_EQ(dp__vsched_build(p, v, M, r, false, sb, true, &vs, &err), 0);
                    int64_t next = 0;
                    for (int64_t t = 0; t < vs.nt; t++)
                        if (vs.t[t].pass >= 0) {
                            CHECK_EQ(vs.t[t].pass, next);
                            next++;
                        }
                    CHECK_EQ(next, 2 * M * v);
                    /* At most every micro-batch of a chunk at once. */
                    for (int c = 0; c < v; c++)
                        CHECK(vs.ch_max[c] >= 1 && vs.ch_max[c] <= M);
                    dp__vsched_free(&vs);
                }
}

/*
 * pp 2, vpp 2, M 2, one pass per unit step (interleave.c), worked by hand. Stage 0 runs
 * F0.0 F1.0 F0.1 F1.1 B0.1 B1.1 B0.0 B1.0 (all 4 forwards are warm-up:
 * min(2 (2-0-1) + (2-1) 2, 4) = 4), stage 1 F0.0 F1.0 F0.1 B0.1 F1.1 B1.1 B0.0 B1.0 (warm-up
 * 2). Steps: stage 0 runs its forwards at t = 0..3 (F0.1 at t2 after stage 1's F0.0 at
 * t1); stage 1's F0.0 t1, F1.0 t2, F0.1 t3, B0.1 t4, F1.1 t5, B1.1 t6, B0.0 t7, B1.0 t8;
 * stage 0's B0.1 t5, B1.1 t7, B0.0 t8, B1.0 t9. Both stages hold both micro-batches of
 * both chunks at once (stage 0 after t2: 2 + 2; stage 1 at the end of t3), and one
 * received gradient at a time. With slot sizes 10 and 1: a peak of 2 * 10 + 2 * 1 = 22.
 */
static void test_counts_by_hand(void)
{
    const size_t sb[2] = {10, 1};
    for (int r = 0; r < 2; r++) {
        struct dp__vsched vs;
        struct dp_err err = {0};
        CHECK_EQ(dp__vsched_build(2, 2, 2, r, false, sb, true, &vs, &err), 0);
        CHECK_EQ(vs.ch_max[0], 2);
        CHECK_EQ(vs.ch_max[1], 2);
        CHECK_EQ(vs.peak_bytes, 22);
        CHECK_EQ(vs.grecv_max, 1);
        CHECK_EQ(vs.nt, r == 0 ? 10 : 9); /* last passes at t9 / t8 */
        dp__vsched_free(&vs);
    }
}

/*
 * DualPipeV, pp 2, M 4, from the eight steps by hand (an overlapped pair as its forward then
 * its backward, a backward for inputs only as the backward, weight-gradient passes nothing).
 * Stage 0: 2 forwards of chunk 0; (F0, F1); (B1, W, F1); one pair of pairs (F0 B1, F1 B0);
 * (B1, F1 B0); (B1, B0); (W, B0); W. Stage 1 (the last): (F0, F1) twice; two pairs of pairs,
 * the first split (F0, B1); (B1, B0) twice.
 */
static void test_dualpipev_order_by_hand(void)
{
    struct dp_model m;
    struct dp_err err = {0};
    CHECK_EQ(dp_model_load("tiny-gpt", &m, &err), 0);
    m.layers = 4;
    struct dp_layout l;
    dp_layout_default(&l);
    l.pp = 2;
    l.vpp = 2;
    l.mbs = 1;
    l.gbs = 4;
    l.seq_len = 32;
    l.precision = DP_FP32;
    l.framework = DP_FW_TORCHTITAN;
    l.schedule = DP_SCHED_DUALPIPEV;
    static const char *const want[2] = {
        "F0.0 F1.0 F2.0 F0.1 B0.1 F1.1 F3.0 B1.1 F2.1 B0.0 B2.1 F3.1 B1.0 B3.1 B2.0 B3.0",
        "F0.0 F0.1 F1.0 F1.1 F2.0 B0.1 F2.1 B0.0 F3.0 B1.1 F3.1 B1.0 B2.1 B2.0 B3.1 B3.0"};
    char got[1024];
    for (int r = 0; r < 2; r++) {
        err = (struct dp_err){0};
        CHECK_EQ(dp_exec_schedule(&m, &l, r, got, sizeof got, &err), 0);
        if (strcmp(got, want[r]) != 0)
            fprintf(stderr, "DualPipeV stage %d:\n  executor %s\n  by hand  %s\n", r, got, want[r]);
        CHECK(strcmp(got, want[r]) == 0);
    }
}

/* DualPipeV's timeline: every pass once, in its order, and it ends; a stage hears from
 * at most two neighbours a step; the loss's chunk (stage 0's chunk 1) never holds two
 * micro-batches. */
static void test_dualpipev_timeline(void)
{
    size_t sb[2] = {1, 1};
    for (int p = 2; p <= 6; p++)
        for (int64_t M = 2 * p; M <= 4 * p; M += p - 1)
            for (int r = 0; r < p; r++) {
                struct dp__vsched vs;
                struct dp_err err = {0};
                CHECK_EQ(dp__vsched_build(p, 2, M, r, true, sb, true, &vs, &err), 0);
                CHECK(vs.pmb != NULL);
                int64_t next = 0;
                for (int64_t t = 0; t < vs.nt; t++)
                    if (vs.t[t].pass >= 0) {
                        CHECK_EQ(vs.t[t].pass, next);
                        next++;
                    }
                CHECK_EQ(next, 4 * M);
                for (int c = 0; c < 2; c++)
                    CHECK(vs.ch_max[c] >= 1 && vs.ch_max[c] <= M);
                if (r == 0)
                    CHECK_EQ(vs.ch_max[1], 1);
                dp__vsched_free(&vs);
            }
    /* fewer than 2 pp micro-batches: refused */
    struct dp__vsched vs;
    struct dp_err err = {0};
    CHECK(dp__vsched_build(4, 2, 7, 0, true, sb, true, &vs, &err) != 0);
}

int main(void)
{
    test_dualpipev_order_by_hand();
    test_dualpipev_timeline();
    test_order_matches_simulator();
    test_timeline_complete();
    test_counts_by_hand();
    return check_failures ? 1 : 0;
}
