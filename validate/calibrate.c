/*
 * Fitting a GPU's GEMM efficiency curves (bf16 and FP8) to measured runs: GSL
 * nonlinear least squares on log(predicted / measured) over the runs of that GPU
 * that are scored and not held out.
 */
#include "validate.h"

#include <gsl/gsl_blas.h>
#include <gsl/gsl_multifit_nlinear.h>
#include <gsl/gsl_vector.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* The parameters, in order: bf16 eff_max, [bf16 log10 half], fp8 eff_max, [fp8 log10 half],
 * [MXFP8's fixed cost per GEMM beyond per-tensor FP8's, us], then the attention figure of each
 * kernel in attn_mask, by kernel number. */
struct fit_ctx {
    struct dp_run *runs;
    int *idx;
    double *measured; /* dp_run_measured_s of runs[idx[i]]: the fit does not change it */
    int n;
    bool fit_bf16, fit_fp8, fit_half, fit_mx;
    struct dp_gemm_curve bf16, fp8; /* current values */
    double mx;                      /* current mxfp8_gemm_us */
    unsigned attn_mask;
    double attn_rel[DP_ATTNS]; /* current values */
};

static double clamp_eff(double e)
{
    return e < 0.01 ? 0.01 : e > 1.0 ? 1.0 : e;
}

/* The range the GPU profile reader accepts for an attention figure. */
static double clamp_attn(double e)
{
    return e < 0.01 ? 0.01 : e > 2.0 ? 2.0 : e;
}

/* The range the GPU profile reader accepts for mxfp8_gemm_us. */
static double clamp_mx(double e)
{
    return e < 0.0 ? 0.0 : e > 1000.0 ? 1000.0 : e;
}

enum dp_attn dp_run_attn(const struct dp_run *r)
{
    if (!r->layout.flash_attn)
        return DP_ATTN_DEFAULT;
    return r->layout.attn != DP_ATTN_DEFAULT ? r->layout.attn : r->cluster.gpu.attn_default;
}

/* The runs a fit of `which` on `gpu` reads or checks: scored, on that GPU, computing their
 * linear GEMMs in the precision of a curve asked for. */
static bool on_curves(const struct dp_run *r, const char *gpu, enum dp_fit_curves which)
{
    if (!dp_run_scored(r) || strcmp(r->cluster.gpu.name, gpu) != 0)
        return false;
    bool fp8 = dp_layout_gemm(&r->layout) == DP_GEMM_FP8;
    return !((which == DP_FIT_BF16 && fp8) || (which == DP_FIT_FP8 && !fp8));
}

/* The current curves and fitted attention figures, into a run's GPU. */
static void give(const struct fit_ctx *c, struct dp_gpu *g)
{
    g->gemm = c->bf16;
    g->gemm_fp8 = c->fp8;
    if (c->fit_mx)
        g->mxfp8_fixed_s = c->mx * 1e-6;
    for (int a = 0; a < DP_ATTNS; a++)
        if (c->attn_mask & (1u << a))
            g->attn_rel[a] = c->attn_rel[a];
}

static void apply(struct fit_ctx *c, const gsl_vector *x)
{
    size_t k = 0;
    if (c->fit_bf16) {
        c->bf16.eff_max = clamp_eff(gsl_vector_get(x, k++));
        if (c->fit_half)
            c->bf16.half_flops = pow(10.0, gsl_vector_get(x, k++));
    }
    if (c->fit_fp8) {
        c->fp8.eff_max = clamp_eff(gsl_vector_get(x, k++));
        if (c->fit_half)
            c->fp8.half_flops = pow(10.0, gsl_vector_get(x, k++));
    }
    if (c->fit_mx)
        c->mx = clamp_mx(gsl_vector_get(x, k++));
    for (int a = 0; a < DP_ATTNS; a++)
        if (c->attn_mask & (1u << a))
            c->attn_rel[a] = clamp_attn(gsl_vector_get(x, k++));
    for (int i = 0; i < c->n; i++)
        give(c, &c->runs[c->idx[i]].cluster.gpu);
}

static double predicted(const struct dp_run *r)
{
    struct dp_step_cost sc;
    dp_time_step_fast(&r->model, &r->cluster, &r->layout, &sc);
    return sc.step_time_s;
}

static int residuals(const gsl_vector *x, void *params, gsl_vector *f)
{
    struct fit_ctx *c = params;
    apply(c, x);
    for (int i = 0; i < c->n; i++)
        gsl_vector_set(f, (size_t)i, log(predicted(&c->runs[c->idx[i]]) / c->measured[i]));
    return GSL_SUCCESS;
}

/* Mean |error| over the held-out runs of this GPU; with c, after giving them its values. */
static double held_mean_abs(struct dp_run *runs, int n, const char *gpu, enum dp_fit_curves which,
                            const struct fit_ctx *c, int *count)
{
    double sum = 0;
    int k = 0;
    for (int i = 0; i < n; i++) {
        if (!runs[i].held_out || !on_curves(&runs[i], gpu, which))
            continue;
        if (c)
            give(c, &runs[i].cluster.gpu);
        sum += fabs(predicted(&runs[i]) / dp_run_measured_s(&runs[i]) - 1);
        k++;
    }
    *count = k;
    return k ? sum / k : 0;
}

static double mean_abs(struct fit_ctx *c)
{
    double sum = 0;
    for (int i = 0; i < c->n; i++)
        sum += fabs(predicted(&c->runs[c->idx[i]]) / c->measured[i] - 1);
    return sum / c->n;
}

int dp_calibrate_gemm(struct dp_run *runs, int n, const char *gpu, enum dp_fit_curves which,
                      bool fit_half, unsigned attn_mask, struct dp_fit *out, struct dp_err *err)
{
    memset(out, 0, sizeof *out);
    int *idx = malloc((size_t)(n > 0 ? n : 1) * sizeof *idx);
    double *measured = malloc((size_t)(n > 0 ? n : 1) * sizeof *measured);
    if (!idx || !measured) {
        free(idx);
        free(measured);
        return dp_err_set(err, DP_ENOMEM, "out of memory");
    }
    int k = 0, k8 = 0, kmx = 0;
    for (int i = 0; i < n; i++) {
        if (runs[i].held_out || !on_curves(&runs[i], gpu, which))
            continue;
        k8 += dp_layout_gemm(&runs[i].layout) == DP_GEMM_FP8;
        kmx += dp_layout_mxfp8(&runs[i].layout);
        out->attn_runs[dp_run_attn(&runs[i])]++;
        idx[k++] = i;
    }
    out->attn_runs[DP_ATTN_DEFAULT] = 0;
    attn_mask &= ~1u; /* bit 0 is "default", not a kernel */
    int nattn = 0;
    for (int a = 1; a < DP_ATTNS; a++) {
        if (!(attn_mask & (1u << a)))
            continue;
        if (out->attn_runs[a] == 0) {
            free(idx);
            free(measured);
            return dp_err_set(err, DP_EINVAL,
                              "attention kernel \"%s\": none of the %d calibration run(s) on GPU "
                              "\"%s\" (scored, not held out) uses it",
                              dp_attn_name((enum dp_attn)a), k, gpu);
        }
        nattn++;
    }
    struct fit_ctx c = {.runs = runs,
                        .idx = idx,
                        .measured = measured,
                        .n = k,
                        .fit_half = fit_half,
                        .fit_bf16 = k - k8 > 0,
                        .fit_fp8 = k8 > 0,
                        /* MXFP8's fixed cost per GEMM, where runs of both FP8 kinds tell it
                         * apart from the FP8 curve */
                        .fit_mx = kmx > 0 && kmx < k8,
                        .attn_mask = attn_mask};
    int np = ((int)c.fit_bf16 + (int)c.fit_fp8) * (fit_half ? 2 : 1) + (int)c.fit_mx + nattn;
    if (np == 0) /* no runs: the least a fit needs is one curve's parameters */
        np = fit_half ? 2 : 1;
    int rc = 0;
    if (k < np + 1) {
        rc = dp_err_set(err, DP_EINVAL,
                        "%d calibration run(s) on GPU \"%s\" (scored, not held out%s): need at "
                        "least %d to fit %d parameter(s)",
                        k, gpu,
                        which == DP_FIT_FP8    ? ", FP8 GEMMs"
                        : which == DP_FIT_BF16 ? ", bf16 GEMMs"
                                               : "",
                        np + 1, np);
        goto done;
    }
    for (int i = 0; i < k; i++)
        measured[i] = dp_run_measured_s(&runs[idx[i]]);
    c.bf16 = runs[idx[0]].cluster.gpu.gemm;
    c.fp8 = runs[idx[0]].cluster.gpu.gemm_fp8;
    c.mx = clamp_mx(runs[idx[0]].cluster.gpu.mxfp8_fixed_s * 1e6);
    out->mxfp8_prior = c.mx;
    out->mxfp8_us = c.mx;
    out->fit_mx = c.fit_mx;
    out->nruns_mx = kmx;
    for (int a = 0; a < DP_ATTNS; a++) {
        /* A kernel the profile has no figure for starts at one half (the model's default
         * then applies to it before the fit). */
        double r = runs[idx[0]].cluster.gpu.attn_rel[a];
        out->attn_prior[a] = r;
        c.attn_rel[a] = r > 0 ? r : (attn_mask & (1u << a)) ? 0.5 : 0;
    }
    out->attn_mask = attn_mask;
    out->nruns = k;
    out->nruns_fp8 = k8;
    out->fit_bf16 = c.fit_bf16;
    out->fit_fp8 = c.fit_fp8;
    out->mean_abs_before = mean_abs(&c);
    out->held_before = held_mean_abs(runs, n, gpu, which, NULL, &out->nheld);

    gsl_multifit_nlinear_fdf fdf = {
        .f = residuals, .df = NULL, .fvv = NULL, .n = (size_t)k, .p = (size_t)np, .params = &c};
    gsl_multifit_nlinear_parameters prm = gsl_multifit_nlinear_default_parameters();
    gsl_multifit_nlinear_workspace *w =
        gsl_multifit_nlinear_alloc(gsl_multifit_nlinear_trust, &prm, (size_t)k, (size_t)np);
    gsl_vector *x = gsl_vector_alloc((size_t)np);
    size_t j = 0;
    if (c.fit_bf16) {
        gsl_vector_set(x, j++, c.bf16.eff_max);
        if (fit_half)
            gsl_vector_set(x, j++, log10(c.bf16.half_flops > 0 ? c.bf16.half_flops : 1e9));
    }
    if (c.fit_fp8) {
        gsl_vector_set(x, j++, c.fp8.eff_max);
        if (fit_half)
            gsl_vector_set(x, j++, log10(c.fp8.half_flops > 0 ? c.fp8.half_flops : 1e9));
    }
    if (c.fit_mx) /* from a few us, not the bound at 0 where the clamp flattens it */
        gsl_vector_set(x, j++, c.mx > 1.0 ? c.mx : 10.0);
    for (int a = 0; a < DP_ATTNS; a++)
        if (attn_mask & (1u << a))
            gsl_vector_set(x, j++, c.attn_rel[a]);
    int info = 0;
    gsl_error_handler_t *prev = gsl_set_error_handler_off();
    int status = gsl_multifit_nlinear_init(x, &fdf, w);
    if (status == GSL_SUCCESS)
        status = gsl_multifit_nlinear_driver(200, 1e-10, 1e-10, 0.0, NULL, NULL, &info, w);
    gsl_set_error_handler(prev);
    /* Started at the optimum (a profile fitted before), the trust region can shrink step
     * after step on the model's non-smooth terms (the GEMM roofline, overlap windows)
     * without meeting xtol: the position is then the best reached, not a failure. */
    if (status == GSL_EMAXITER || status == GSL_ENOPROG) {
        out->stalled = true;
        status = GSL_SUCCESS;
    }
    if (status != GSL_SUCCESS) {
        rc = dp_err_set(err, DP_ERUNTIME, "fit for GPU \"%s\" did not converge: %s", gpu,
                        gsl_strerror(status));
    } else {
        apply(&c, gsl_multifit_nlinear_position(w));
        out->bf16 = c.bf16;
        out->fp8 = c.fp8;
        out->mxfp8_us = c.mx;
        memcpy(out->attn_rel, c.attn_rel, sizeof out->attn_rel);
        out->iterations = (int)gsl_multifit_nlinear_niter(w);
        out->mean_abs_after = mean_abs(&c);
        int nh;
        out->held_after = held_mean_abs(runs, n, gpu, which, &c, &nh);
    }
    gsl_vector_free(x);
    gsl_multifit_nlinear_free(w);
done:
    free(idx);
    free(measured);
    return rc;
}
