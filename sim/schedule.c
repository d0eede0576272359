/*
 * The order in which one pipeline rank runs its forward and backward passes,
 * as the frameworks run them; names of the schedules, streams and operations.
 * No timing here: engine.c runs the passes in this order.
 */
#include "sim.h"

#include <stdlib.h>
#include <string.h>

const char *dp_sim_schedule_name(enum dp_sim_schedule s)
{
    switch (s) {
    case DP_SIM_SCHED_GPIPE: return "gpipe";
    case DP_SIM_SCHED_1F1B: return "1f1b";
    case DP_SIM_SCHED_INTERLEAVED: return "interleaved";
    case DP_SIM_SCHED_DUALPIPEV: return "dualpipev";
    default: return "auto";
    }
}

int dp_sim_schedule_parse(const char *s, enum dp_sim_schedule *out, struct dp_err *err)
{
    static const enum dp_sim_schedule all[] = {DP_SIM_SCHED_AUTO, DP_SIM_SCHED_GPIPE,
                                               DP_SIM_SCHED_1F1B, DP_SIM_SCHED_INTERLEAVED,
                                               DP_SIM_SCHED_DUALPIPEV};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        if (strcmp(s, dp_sim_schedule_name(all[i])) == 0) {
            *out = all[i];
            return 0;
        }
    return dp_err_set(err, DP_EUSAGE,
                      "--schedule: expected one of auto, gpipe, 1f1b, interleaved, dualpipev, got "
                      "\"%s\"",
                      s);
}

const char *dp_sim_stream_name(enum dp_sim_stream s)
{
    static const char *const n[DP_SIM_STREAMS] = {"compute",      "tp",        "cp",       "ep",
                                                  "pp send/recv", "dp gather", "dp reduce"};
    return (unsigned)s < DP_SIM_STREAMS ? n[s] : "?";
}

const char *dp_sim_op_name(enum dp_sim_op o)
{
    static const char *const n[DP_SIM_OPS] = {"embedding",
                                              "attention",
                                              "mlp",
                                              "head",
                                              "fp8 weight cast",
                                              "wait",
                                              "tp",
                                              "cp ring",
                                              "ep a2a",
                                              "send",
                                              "all-gather",
                                              "reduce",
                                              "embedding grad sync",
                                              "optimizer"};
    return (unsigned)o < DP_SIM_OPS ? n[o] : "?";
}

/*
 * Megatron-Core's schedule table (get_schedule_table with
 * microbatch_group_size_per_vp_stage = p, its default): forward pass k runs micro-batch
 * group k / (p v) through chunk (k mod p v) / p, micro-batch g p + k mod p; the last
 * group holds the rest of the micro-batches (here M is a multiple of p, as
 * forward_backward_pipelining_with_interleaving requires for this group size).
 * Backward pass k runs the same micro-batch through chunk v - 1 - that chunk.
 */
static void table(int p, int v, int64_t k, int32_t *mb, int16_t *chunk)
{
    int64_t span = (int64_t)p * v, g = k / span, in = k % span;
    *chunk = (int16_t)(in / p);
    *mb = (int32_t)(g * p + in % p);
}

/*
 * DualPipeV's passes on rank r as core numbers them (dp_dualpipev_passes: the order the cost
 * model and the executor run), as steps: a backward for the inputs only is BI, the weight
 * gradients that finish it W. Writes them to out when out is not NULL; returns their count,
 * -1 without memory.
 */
static int64_t dualpipev(int p, int64_t M, int r, struct dp_sim_step *out)
{
    int64_t n = dp_dualpipev_passes(p, M, r, NULL);
    if (n <= 0 || !out)
        return n;
    struct dp_dpv_pass *ps = malloc((size_t)n * sizeof *ps);
    if (!ps || dp_dualpipev_passes(p, M, r, ps) != n) {
        free(ps);
        return -1;
    }
    for (int64_t i = 0; i < n; i++)
        out[i] = (struct dp_sim_step){.mb = ps[i].mb,
                                      .chunk = ps[i].ph,
                                      .fwd = ps[i].kind == DP_DPV_F,
                                      .kind = ps[i].kind == DP_DPV_BZ  ? DP_SIM_PASS_BI
                                              : ps[i].kind == DP_DPV_W ? DP_SIM_PASS_W
                                                                       : DP_SIM_PASS_FULL,
                                      .paired = ps[i].paired};
    free(ps);
    return n;
}

int64_t dp_sim_schedule_passes(enum dp_sim_schedule s, int p, int v, int64_t M, int r)
{
    if (s == DP_SIM_SCHED_DUALPIPEV)
        return v == 2 && M >= 2 * (int64_t)p && r >= 0 && r < p ? dualpipev(p, M, r, NULL) : 0;
    return 2 * M * v;
}

int dp_sim_schedule(enum dp_sim_schedule s, int p, int v, int64_t M, int r, struct dp_sim_step *out,
                    struct dp_err *err)
{
    if (p < 1 || v < 1 || M < 1 || r < 0 || r >= p)
        return dp_err_set(err, DP_EINVAL, "schedule: bad shape p=%d v=%d M=%lld r=%d", p, v,
                          (long long)M, r);
    if (s == DP_SIM_SCHED_AUTO)
        s = v > 1 ? DP_SIM_SCHED_INTERLEAVED : DP_SIM_SCHED_1F1B;
    if (s == DP_SIM_SCHED_DUALPIPEV) {
        if (v != 2 || M < 2 * (int64_t)p)
            return dp_err_set(err, DP_EINFEASIBLE,
                              "the dualpipev schedule needs vpp=2 (the V's two stages a rank) and "
                              "at least 2 pp = %d micro-batches, got vpp=%d and %lld",
                              2 * p, v, (long long)M);
        return dualpipev(p, M, r, out) < 0 ? dp_err_set(err, DP_ENOMEM, "out of memory") : 0;
    }
    if (s != DP_SIM_SCHED_INTERLEAVED && v > 1)
        return dp_err_set(err, DP_EINFEASIBLE,
                          "the %s schedule runs one model chunk per rank, the layout has vpp=%d",
                          dp_sim_schedule_name(s), v);
    if (s == DP_SIM_SCHED_INTERLEAVED) {
        if (v < 2)
            return dp_err_set(err, DP_EINFEASIBLE,
                              "the interleaved schedule needs vpp > 1 (model chunks per rank)");
        /* schedules.py: the group size must lie in [pp, M] and M mod it be 0 or >= pp */
        if (M < p || M % p)
            return dp_err_set(err, DP_EINFEASIBLE,
                              "the interleaved schedule needs the micro-batches (%lld) to be a "
                              "multiple of pp=%d (Megatron-Core, groups of pp micro-batches)",
                              (long long)M, p);
    }
    int64_t n = 0, tot = M * v;
    if (s == DP_SIM_SCHED_GPIPE) {
        for (int64_t i = 0; i < M; i++)
            out[n++] = (struct dp_sim_step){.mb = (int32_t)i, .fwd = true};
        for (int64_t i = 0; i < M; i++)
            out[n++] = (struct dp_sim_step){.mb = (int32_t)i};
        return 0;
    }
    /* Warm-up forwards (get_pp_rank_microbatches): p - r - 1 without interleaving, 2 (p - r
     * - 1) + (v - 1) p with it, at most all of them; then one forward and one backward in
     * turn (forward W + k, backward k), then the remaining backwards. */
    int64_t W = v == 1 ? p - r - 1 : 2 * (int64_t)(p - r - 1) + (int64_t)(v - 1) * p;
    if (W > tot)
        W = tot;
    struct dp_sim_step st = {0};
    for (int64_t k = 0; k < W; k++) {
        table(p, v, k, &st.mb, &st.chunk);
        st.fwd = true;
        out[n++] = st;
    }
    for (int64_t k = 0; k < tot - W; k++) {
        table(p, v, W + k, &st.mb, &st.chunk);
        st.fwd = true;
        out[n++] = st;
        table(p, v, k, &st.mb, &st.chunk);
        st.chunk = (int16_t)(v - 1 - st.chunk);
        st.fwd = false;
        out[n++] = st;
    }
    for (int64_t k = tot - W; k < tot; k++) {
        table(p, v, k, &st.mb, &st.chunk);
        st.chunk = (int16_t)(v - 1 - st.chunk);
        st.fwd = false;
        out[n++] = st;
    }
    return 0;
}
