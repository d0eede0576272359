/*
 * Predicted against measured step times of published runs, and their error
 * statistics by subset (fitted / held out), source and GPU.
 */
#include "validate.h"

#include <math.h>
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
    if (r->waiting_for[0])
        return 0; /* not expressible yet: nothing to predict */
    int rc = dp_time_step(&r->model, &r->cluster, &r->layout, &out->cost, err);
    if (rc) {
        dp_err_prefix(err, "run %s", r->id);
        return rc;
    }
    out->measured_s = dp_run_measured_s(r);
    out->predicted_s = out->cost.step_time_s;
    out->error = out->predicted_s / out->measured_s - 1;
    return 0;
}

struct dp_val_stats dp_val_stats(const struct dp_run *runs, const struct dp_run_result *res, int n,
                                 int held, const char *source, const char *gpu)
{
    struct dp_val_stats s = {0, 0, 0, ""};
    for (int i = 0; i < n; i++) {
        const struct dp_run *r = &runs[i];
        if (!dp_run_scored(r) || (held >= 0 && r->held_out != (held == 1)))
            continue;
        if (source && strcmp(r->source_key, source) != 0)
            continue;
        if (gpu && strcmp(r->cluster.gpu.name, gpu) != 0)
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
