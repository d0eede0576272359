/*
 * Failures priced in: what a checkpoint of a layout holds and how long it
 * takes to write, the checkpoint interval that maximises goodput (Young 1974,
 * Daly 2006) and the goodput at a given interval. Pure arithmetic: no I/O,
 * no measurement (the storage bandwidth and the failure rate are inputs;
 * `dplan calibrate` and the defaults in costmodel.h provide them).
 */
#include "costmodel.h"

#include <math.h>
#include <string.h>

int dp_ckpt_size(const struct dp_model *m, const struct dp_layout *l, int gpus_per_node,
                 enum dp_ckpt_writer w, struct dp_ckpt_size *out, struct dp_err *err)
{
    memset(out, 0, sizeof *out);
    int world = l->tp * l->pp * l->dp * l->cp;
    int rc = dp_layout_validate(l, m, world, err);
    if (rc)
        return rc;
    if (gpus_per_node < 1)
        return dp_err_set(err, DP_EINVAL, "gpus_per_node: expected integer >= 1, got %d",
                          gpus_per_node);
    int pb, gb, ob;
    dp_mem_bytes_per_param(l, &pb, &gb, &ob);
    out->bytes_per_param = pb + ob;
    const int64_t dpcp = (int64_t)l->dp * l->cp;
    const int64_t edp = dpcp / l->ep;
    const int64_t ranks_per_stage = (int64_t)l->tp * dpcp;
    for (int r = 0; r < l->pp; r++) {
        int64_t dense, expert;
        dp_mem_stage_params(m, l, r, &dense, &expert);
        /* What each GPU of the stage holds of the saved state: ZeRO shards the optimizer
         * (and with stage 3 the weights) over the dp x cp ranks, experts over dp x cp / ep. */
        struct dp_states sd, se;
        dp_mem_states(dense, dpcp, l, &sd);
        dp_mem_states(expert, edp, l, &se);
        int64_t held = sd.params_bytes + sd.optimizer_bytes + se.params_bytes + se.optimizer_bytes;
        /* Each tensor once: the tp slices of the dense part, the ep x tp slices of the
         * experts (each EP rank holds different experts), unsharded and unpadded. */
        int64_t unique = (int64_t)l->tp * (dense + expert * l->ep) * out->bytes_per_param;
        int64_t rank =
            w == DP_CKPT_BALANCED ? (unique + ranks_per_stage - 1) / ranks_per_stage : held;
        out->total_bytes += unique;
        if (held > out->held_bytes)
            out->held_bytes = held;
        if (rank > out->rank_bytes)
            out->rank_bytes = rank;
    }
    int per_node = gpus_per_node < world ? gpus_per_node : world;
    out->node_bytes = out->rank_bytes * per_node;
    return 0;
}

double dp_ckpt_write_s(const struct dp_ckpt_size *s, double node_write_gbps,
                       double storage_write_gbps)
{
    double node = (double)s->node_bytes / (node_write_gbps * 1e9);
    double all = (double)s->total_bytes / (storage_write_gbps * 1e9);
    return node > all ? node : all;
}

double dp_failure_rate_per_s(double per_gpu_hour, int gpus)
{
    return per_gpu_hour * (double)gpus / 3600.0;
}

/*
 * Daly's complete model. With failures at rate lambda during everything, a
 * segment of L = tau + delta seconds that must run without failure, and a
 * restart of R (which a failure also interrupts) before each retry, takes in
 * expectation e^(lambda R) (e^(lambda L) - 1) / lambda: the first attempt
 * ends at min(failure, L); each failed attempt is followed by a retry of
 * R + L, so E = (1 - e^(-lambda L)) / lambda + (1 - e^(-lambda L)) E(R + L)
 * with E(D) = (e^(lambda D) - 1) / lambda for a fresh interval D, which
 * simplifies to the above. Goodput = tau / E, Daly's T_s / T_w.
 */
double dp_goodput(const struct dp_failure_model *f, double tau_s)
{
    if (!(tau_s > 0))
        return 0;
    double lam = f->rate_per_s, seg = tau_s + f->ckpt_write_s;
    if (lam <= 0)
        return tau_s / seg;
    double x = lam * seg;
    /* log G = log(lambda tau) - lambda R - log(e^x - 1); for large x, log(e^x - 1) =
     * x + log1p(-e^-x), which does not overflow. */
    double log_e = x < 30 ? log(expm1(x)) : x + log1p(-exp(-x));
    double g = exp(log(lam * tau_s) - lam * f->restart_s - log_e);
    return g < 1 ? g : 1;
}

double dp_ckpt_interval_young(const struct dp_failure_model *f)
{
    if (f->rate_per_s <= 0)
        return INFINITY;
    return sqrt(2.0 * f->ckpt_write_s / f->rate_per_s);
}

double dp_ckpt_interval_daly(const struct dp_failure_model *f)
{
    if (f->rate_per_s <= 0)
        return INFINITY;
    double M = 1.0 / f->rate_per_s, d = f->ckpt_write_s;
    if (d >= 2 * M)
        return M;
    double x = d / (2 * M);
    return sqrt(2 * d * M) * (1 + sqrt(x) / 3 + x / 9) - d;
}

static int check_model(const struct dp_failure_model *f, double step_time_s, struct dp_err *err)
{
    if (!(step_time_s > 0) || !isfinite(step_time_s))
        return dp_err_set(err, DP_EINVAL, "step_time_s: expected number > 0, got %g", step_time_s);
    if (!(f->rate_per_s >= 0) || !isfinite(f->rate_per_s))
        return dp_err_set(err, DP_EINVAL, "failure rate: expected number >= 0, got %g",
                          f->rate_per_s);
    if (!(f->ckpt_write_s >= 0) || !isfinite(f->ckpt_write_s))
        return dp_err_set(err, DP_EINVAL, "checkpoint write time: expected number >= 0, got %g",
                          f->ckpt_write_s);
    if (!(f->restart_s >= 0) || !isfinite(f->restart_s))
        return dp_err_set(err, DP_EINVAL, "restart time: expected number >= 0, got %g",
                          f->restart_s);
    return 0;
}

int dp_goodput_plan(const struct dp_failure_model *f, double step_time_s,
                    struct dp_goodput_plan *out, struct dp_err *err)
{
    memset(out, 0, sizeof *out);
    int rc = check_model(f, step_time_s, err);
    if (rc)
        return rc;
    out->young_s = dp_ckpt_interval_young(f);
    out->daly_s = dp_ckpt_interval_daly(f);
    out->failures_per_day = f->rate_per_s * 86400.0;
    if (f->rate_per_s <= 0) {
        /* Nothing is lost: the only cost of a checkpoint is its write. */
        out->goodput = 1;
        return 0;
    }
    /* Checkpoints fall on step boundaries: of the two whole step counts around Daly's
     * interval, the one with the higher goodput (at least one step). */
    double k = out->daly_s / step_time_s;
    if (k > 1e15)
        k = 1e15;
    int64_t lo = (int64_t)floor(k), hi = lo + 1;
    if (lo < 1)
        lo = 1;
    double glo = dp_goodput(f, (double)lo * step_time_s);
    double ghi = dp_goodput(f, (double)hi * step_time_s);
    out->every_steps = ghi > glo ? hi : lo;
    out->interval_s = (double)out->every_steps * step_time_s;
    out->goodput = ghi > glo ? ghi : glo;
    return 0;
}

int dp_ckpt_every_check(const struct dp_failure_model *f, double step_time_s, int64_t every_steps,
                        struct dp_ckpt_every_check *out, struct dp_err *err)
{
    memset(out, 0, sizeof *out);
    if (every_steps < 1)
        return dp_err_set(err, DP_EINVAL, "ckpt_every: expected integer >= 1, got %lld",
                          (long long)every_steps);
    struct dp_goodput_plan p;
    int rc = dp_goodput_plan(f, step_time_s, &p, err);
    if (rc)
        return rc;
    out->interval_s = (double)every_steps * step_time_s;
    out->goodput = dp_goodput(f, out->interval_s);
    if (f->rate_per_s <= 0) {
        /* Without failures, fewer checkpoints are always better: never far. */
        out->best_s = INFINITY;
        out->ratio = 0;
        out->best_goodput = 1;
        return 0;
    }
    out->best_s = p.interval_s;
    out->best_goodput = p.goodput;
    out->ratio = out->interval_s / out->best_s;
    out->far = out->ratio > 2.0 || out->ratio < 0.5;
    return 0;
}
