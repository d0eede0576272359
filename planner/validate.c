/*
 * The step-time model against measured runs, and fitting a GPU's GEMM
 * efficiency curve to them (GSL nonlinear least squares).
 */
#include "internal.h"

#include <gsl/gsl_blas.h>
#include <gsl/gsl_multifit_nlinear.h>
#include <gsl/gsl_vector.h>
#include <math.h>
#include <string.h>

double dp_run_measured_s(const struct dp_run *r)
{
    if (r->tokens_per_s_per_gpu > 0) /* one step's tokens over the whole cluster's rate */
        return (double)r->layout.gbs * (double)r->layout.seq_len /
               (r->tokens_per_s_per_gpu * dp_cluster_gpus(&r->cluster));
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

struct fit_ctx {
    struct dp_run *runs;
    int *idx;
    double *measured; /* dp_run_measured_s of runs[idx[i]]: the fit does not change it */
    int n;
    bool fit_half;
    double half0;
};

static void apply(struct fit_ctx *c, const gsl_vector *x)
{
    double eff = gsl_vector_get(x, 0);
    if (eff < 0.01)
        eff = 0.01;
    if (eff > 1.0)
        eff = 1.0;
    double half = c->fit_half ? pow(10.0, gsl_vector_get(x, 1)) : c->half0;
    for (int i = 0; i < c->n; i++) {
        c->runs[c->idx[i]].cluster.gpu.gemm.eff_max = eff;
        c->runs[c->idx[i]].cluster.gpu.gemm.half_flops = half;
    }
}

static int residuals(const gsl_vector *x, void *params, gsl_vector *f)
{
    struct fit_ctx *c = params;
    apply(c, x);
    for (int i = 0; i < c->n; i++) {
        struct dp_run *r = &c->runs[c->idx[i]];
        struct dp_step_cost sc;
        dp_time_step_fast(&r->model, &r->cluster, &r->layout, &sc);
        gsl_vector_set(f, (size_t)i, log(sc.step_time_s / c->measured[i]));
    }
    return GSL_SUCCESS;
}

static double mean_abs(struct fit_ctx *c)
{
    double sum = 0;
    for (int i = 0; i < c->n; i++) {
        struct dp_run *r = &c->runs[c->idx[i]];
        struct dp_step_cost sc;
        dp_time_step_fast(&r->model, &r->cluster, &r->layout, &sc);
        sum += fabs(sc.step_time_s / c->measured[i] - 1);
    }
    return sum / c->n;
}

int dp_calibrate_gemm(struct dp_run *runs, int n, const char *gpu, bool fit_half,
                      struct dp_fit *out, struct dp_err *err)
{
    memset(out, 0, sizeof *out);
    int idx[1024];
    int k = 0;
    for (int i = 0; i < n && k < 1024; i++)
        if (!runs[i].held_out && !runs[i].underspecified && !runs[i].needs[0] &&
            strcmp(runs[i].cluster.gpu.name, gpu) == 0)
            idx[k++] = i;
    int np = fit_half ? 2 : 1;
    if (k < np + 1)
        return dp_err_set(err, DP_EINVAL,
                          "%d calibration run(s) on GPU \"%s\" (not held out, fully specified): "
                          "need at least %d to fit %d parameter(s)",
                          k, gpu, np + 1, np);
    double measured[1024];
    for (int i = 0; i < k; i++)
        measured[i] = dp_run_measured_s(&runs[idx[i]]);
    struct fit_ctx c = {.runs = runs,
                        .idx = idx,
                        .measured = measured,
                        .n = k,
                        .fit_half = fit_half,
                        .half0 = runs[idx[0]].cluster.gpu.gemm.half_flops};
    out->nruns = k;
    out->mean_abs_before = mean_abs(&c);

    gsl_multifit_nlinear_fdf fdf = {
        .f = residuals, .df = NULL, .fvv = NULL, .n = (size_t)k, .p = (size_t)np, .params = &c};
    gsl_multifit_nlinear_parameters prm = gsl_multifit_nlinear_default_parameters();
    gsl_multifit_nlinear_workspace *w =
        gsl_multifit_nlinear_alloc(gsl_multifit_nlinear_trust, &prm, (size_t)k, (size_t)np);
    gsl_vector *x = gsl_vector_alloc((size_t)np);
    gsl_vector_set(x, 0, runs[idx[0]].cluster.gpu.gemm.eff_max);
    if (fit_half)
        gsl_vector_set(x, 1, log10(c.half0 > 0 ? c.half0 : 1e9));
    int info = 0, rc = 0;
    gsl_error_handler_t *prev = gsl_set_error_handler_off();
    int status = gsl_multifit_nlinear_init(x, &fdf, w);
    if (status == GSL_SUCCESS)
        status = gsl_multifit_nlinear_driver(200, 1e-10, 1e-10, 0.0, NULL, NULL, &info, w);
    gsl_set_error_handler(prev);
    if (status != GSL_SUCCESS) {
        rc = dp_err_set(err, DP_ERUNTIME, "fit for GPU \"%s\" did not converge: %s", gpu,
                        gsl_strerror(status));
    } else {
        const gsl_vector *sol = gsl_multifit_nlinear_position(w);
        apply(&c, sol);
        out->eff_max = runs[idx[0]].cluster.gpu.gemm.eff_max;
        out->half_flops = runs[idx[0]].cluster.gpu.gemm.half_flops;
        out->iterations = (int)gsl_multifit_nlinear_niter(w);
        out->mean_abs_after = mean_abs(&c);
    }
    gsl_vector_free(x);
    gsl_multifit_nlinear_free(w);
    return rc;
}
