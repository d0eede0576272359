/*
 * Predicted against measured step times of published runs, and their error
 * statistics by subset (fitted / held out), source and GPU.
 */
#include "validate.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

double dp_run_measured_s(const struct dp_run *r)
{
    if (r->flops == DP_FLOPS_NONE)
        return r->iteration_time_s;
    struct dp_layout lf = r->layout;
    if (r->flops == DP_FLOPS_NARAYANAN21)
        lf.recompute = DP_RECOMPUTE_FULL;
    struct dp_flops fl;
    dp_flops_step(&r->model, &lf, &fl);
    double flops = r->flops == DP_FLOPS_NARAYANAN21 ? fl.hardware_flops : fl.model_flops;
    return flops / (r->tflops_per_gpu * 1e12 * dp_cluster_gpus(&r->cluster));
}

int dp_run_predict(const struct dp_run *r, struct dp_run_result *out, struct dp_err *err)
{
    memset(out, 0, sizeof *out);
    if (r->waiting_for[0] || !r->has_time)
        return 0; /* not expressible yet, or no time measured: nothing to predict */
    int rc = dp_time_step(&r->model, &r->cluster, &r->layout, &out->cost, err);
    if (rc) {
        dp_err_prefix(err, "run %s", r->id);
        return rc;
    }
    /* A run that ran must fit: the memory model's verdict on its layout. */
    struct dp_mem_opts mo;
    dp_mem_opts_default(&mo);
    int64_t peak = 0;
    dp_mem_peak(&r->model, &r->cluster, &r->layout, &mo, &peak, NULL, NULL);
    out->peak_bytes = peak;
    out->fits = peak <= dp_gpu_usable_bytes(&r->cluster.gpu);
    out->measured_s = dp_run_measured_s(r);
    out->predicted_s = out->cost.step_time_s;
    out->error = out->predicted_s / out->measured_s - 1;
    return 0;
}

/* The runs a statistic takes: scored, and of the held-out subset asked for (-1 any). */
static bool in_subset(const struct dp_run *r, int held)
{
    return dp_run_scored(r) && (held < 0 || r->held_out == (held == 1));
}

/* One run's |error| into a statistic; val_mean turns the sum into the mean. */
static void val_add(struct dp_val_stats *s, double error, const char *id)
{
    double e = fabs(error);
    s->mean += e;
    s->n++;
    if (e > s->worst || s->n == 1) {
        s->worst = e;
        s->worst_id = id;
    }
}

static struct dp_val_stats val_mean(struct dp_val_stats s)
{
    if (s.n)
        s.mean /= s.n;
    return s;
}

struct dp_val_stats dp_val_stats(const struct dp_run *runs, const struct dp_run_result *res, int n,
                                 int held, const char *source, const char *gpu,
                                 const char *framework)
{
    struct dp_val_stats s = {0, 0, 0, ""};
    for (int i = 0; i < n; i++) {
        const struct dp_run *r = &runs[i];
        if (!in_subset(r, held) || (source && strcmp(r->source_key, source) != 0) ||
            (gpu && strcmp(r->cluster.gpu.name, gpu) != 0) ||
            (framework && strcmp(dp_framework_name(r->layout.framework), framework) != 0))
            continue;
        val_add(&s, res[i].error, r->id);
    }
    return val_mean(s);
}

struct dp_val_stats dp_val_stats_margin(const struct dp_run *runs, const struct dp_run_result *res,
                                        int n, int held, double margin, bool inside)
{
    struct dp_val_stats s = {0, 0, 0, ""};
    for (int i = 0; i < n; i++) {
        const struct dp_run *r = &runs[i];
        int64_t bound = dp_mem_within_margin(dp_gpu_usable_bytes(&r->cluster.gpu), margin);
        if (in_subset(r, held) && (res[i].peak_bytes > bound) == inside)
            val_add(&s, res[i].error, r->id);
    }
    return val_mean(s);
}

int dp_run_predict_memory(const struct dp_run *r, struct dp_mem_result *out, struct dp_err *err)
{
    memset(out, 0, sizeof *out);
    if (r->waiting_for[0] || r->peak_gib <= 0)
        return 0;
    struct dp_mem_report *rep = malloc(sizeof *rep);
    if (!rep)
        return dp_err_set(err, DP_ENOMEM, "out of memory");
    struct dp_mem_opts o;
    dp_mem_opts_default(&o);
    int rc = dp_mem_estimate(&r->model, &r->cluster, &r->layout, &o, rep, err);
    if (rc) {
        dp_err_prefix(err, "run %s", r->id);
        free(rep);
        return rc;
    }
    int st = r->mem_aggregation == DP_MEMAGG_LAST_STAGE ? rep->nstages - 1 : 0;
    if (r->mem_aggregation == DP_MEMAGG_MAX) {
        /* the GPU with the most of the measured quantity */
        for (int i = 1; i < rep->nstages; i++) {
            const struct dp_mem_stage *a = &rep->stage[i], *b = &rep->stage[st];
            int64_t va = r->mem_quantity == DP_MEMQ_ALLOCATED  ? a->allocated_bytes
                         : r->mem_quantity == DP_MEMQ_RESERVED ? a->reserved_bytes
                                                               : a->total_bytes;
            int64_t vb = r->mem_quantity == DP_MEMQ_ALLOCATED  ? b->allocated_bytes
                         : r->mem_quantity == DP_MEMQ_RESERVED ? b->reserved_bytes
                                                               : b->total_bytes;
            if (va > vb)
                st = i;
        }
    }
    const struct dp_mem_stage *s = &rep->stage[st];
    const double gib = 1073741824.0;
    int64_t v = r->mem_quantity == DP_MEMQ_ALLOCATED  ? s->allocated_bytes
                : r->mem_quantity == DP_MEMQ_RESERVED ? s->reserved_bytes
                                                      : s->total_bytes;
    out->stage = st;
    out->measured_gib = r->peak_gib;
    out->predicted_gib = (double)v / gib;
    out->error = out->predicted_gib / out->measured_gib - 1;
    out->allocated_gib = (double)s->allocated_bytes / gib;
    out->states_gib = (double)s->kept_bytes / gib;
    free(rep);
    return 0;
}

struct dp_val_stats dp_mem_stats(const struct dp_run *runs, const struct dp_mem_result *res, int n,
                                 int held, const char *source, const char *framework)
{
    struct dp_val_stats s = {0, 0, 0, ""};
    for (int i = 0; i < n; i++) {
        const struct dp_run *r = &runs[i];
        if (!dp_run_mem_scored(r) || (held >= 0 && r->mem_held_out != (held == 1)))
            continue;
        if (source && strcmp(r->source_key, source) != 0)
            continue;
        if (framework && strcmp(dp_framework_name(r->layout.framework), framework) != 0)
            continue;
        double e = fabs(res[i].error);
        s.mean += e;
        s.n++;
        if (e > s.worst || s.n == 1) {
            s.worst = e;
            s.worst_id = r->id;
        }
    }
    if (s.n)
        s.mean /= s.n;
    return s;
}

/* Sum of squared log errors of the fitted reserved runs at slack k. */
static double slack_cost(const struct dp_run *runs, const struct dp_mem_result *res, int n,
                         double k, int *count)
{
    double sum = 0;
    int c = 0;
    for (int i = 0; i < n; i++) {
        const struct dp_run *r = &runs[i];
        if (!dp_run_mem_scored(r) || r->mem_held_out || r->mem_quantity != DP_MEMQ_RESERVED)
            continue;
        double a = res[i].allocated_gib, st = res[i].states_gib;
        double e = log((a + k * (a - st)) / r->peak_gib);
        sum += e * e;
        c++;
    }
    if (count)
        *count = c;
    return sum;
}

double dp_fit_alloc_slack(const struct dp_run *runs, const struct dp_mem_result *res, int n,
                          int *nruns)
{
    int c = 0;
    slack_cost(runs, res, n, 0, &c);
    if (nruns)
        *nruns = c;
    if (c == 0)
        return -1;
    /* golden-section search on [0, 1]: the cost is convex in k for positive terms */
    double lo = 0, hi = 1, g = 0.6180339887498949;
    double x1 = hi - g * (hi - lo), x2 = lo + g * (hi - lo);
    double f1 = slack_cost(runs, res, n, x1, NULL), f2 = slack_cost(runs, res, n, x2, NULL);
    for (int it = 0; it < 80; it++) {
        if (f1 < f2) {
            hi = x2;
            x2 = x1;
            f2 = f1;
            x1 = hi - g * (hi - lo);
            f1 = slack_cost(runs, res, n, x1, NULL);
        } else {
            lo = x1;
            x1 = x2;
            f1 = f2;
            x2 = lo + g * (hi - lo);
            f2 = slack_cost(runs, res, n, x2, NULL);
        }
    }
    return (lo + hi) / 2;
}
