/*
 * The fits of fit.h: the GEMM efficiency curve (nonlinear least squares),
 * alpha-beta of a collective and streaming memory bandwidth (weighted linear
 * least squares), each with R^2, relative residuals and standard errors.
 * Pure: no I/O; GSL's error handler is off while GSL runs, so a failure is
 * a returned status, never an abort.
 */
#include "fit.h"

#include <gsl/gsl_blas.h>
#include <gsl/gsl_errno.h>
#include <gsl/gsl_fit.h>
#include <gsl/gsl_multifit.h>
#include <gsl/gsl_multifit_nlinear.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* A field of sample i must be a finite number > 0. */
static int positive(const char *what, int i, const char *field, double v, struct dp_err *err)
{
    if (isfinite(v) && v > 0)
        return 0;
    return dp_err_set(err, DP_EINVAL, "%s: samples[%d].%s: expected number > 0, got %g", what, i,
                      field, v);
}

static int enough(const char *what, int n, int params, const char *names, struct dp_err *err)
{
    /* One degree of freedom beyond the parameters, or their errors are undefined. */
    if (n >= params + 1)
        return 0;
    return dp_err_set(err, DP_EINVAL, "%s: %d sample(s) for %d parameters (%s): need at least %d",
                      what, n, params, names, params + 1);
}

/* Relative residuals model / measured - 1 into resid (may be NULL) and q. */
static void rel_quality(const double *model, const double *measured, int n, int params,
                        double *resid, struct dp_fit_quality *q)
{
    double ss = 0, mx = 0;
    for (int i = 0; i < n; i++) {
        double r = model[i] / measured[i] - 1;
        if (resid)
            resid[i] = r;
        ss += r * r;
        if (fabs(r) > mx)
            mx = fabs(r);
    }
    q->n = n;
    q->params = params;
    q->rms_rel = sqrt(ss / n);
    q->max_rel = mx;
}

static double r2_of(double ss_res, double ss_tot)
{
    if (ss_tot <= 0)
        return ss_res <= 0 ? 1 : 0;
    return 1 - ss_res / ss_tot;
}

/* ------------------------------------------------------------------ GEMM curve */

/*
 * Parameters u = ln(eff_max), v = log10(half_flops): both unbounded, so the
 * solver never steps to a negative efficiency or size, and half_flops, which
 * spans decades between GPUs and CPUs, is scaled evenly. With x the FLOPs,
 * the predicted time is (x + h) / (peak eff_max) and the residual
 * r = log(predicted / measured) = log(x + h) - log(peak) - u - log(t).
 */
struct gemm_ctx {
    const struct dp_gemm_sample *s;
    int n;
};

static int gemm_f(const gsl_vector *p, void *data, gsl_vector *f)
{
    const struct gemm_ctx *c = data;
    double u = gsl_vector_get(p, 0), h = pow(10.0, gsl_vector_get(p, 1));
    for (int i = 0; i < c->n; i++) {
        const struct dp_gemm_sample *s = &c->s[i];
        gsl_vector_set(f, (size_t)i,
                       log(s->flops + h) - log(s->peak_flops_per_s) - u - log(s->seconds));
    }
    return GSL_SUCCESS;
}

static int gemm_df(const gsl_vector *p, void *data, gsl_matrix *J)
{
    const struct gemm_ctx *c = data;
    double h = pow(10.0, gsl_vector_get(p, 1));
    for (int i = 0; i < c->n; i++) {
        gsl_matrix_set(J, (size_t)i, 0, -1.0);
        gsl_matrix_set(J, (size_t)i, 1, h * M_LN10 / (c->s[i].flops + h));
    }
    return GSL_SUCCESS;
}

int dp_fit_gemm(const struct dp_gemm_sample *s, int n, struct dp_gemm_fit *out, double *resid,
                struct dp_err *err)
{
    static const char what[] = "gemm fit";
    memset(out, 0, sizeof *out);
    if (enough(what, n, 2, "eff_max, half_flops", err))
        return DP_EINVAL;
    bool same = true;
    for (int i = 0; i < n; i++) {
        if (positive(what, i, "flops", s[i].flops, err) ||
            positive(what, i, "seconds", s[i].seconds, err) ||
            positive(what, i, "peak_flops_per_s", s[i].peak_flops_per_s, err))
            return DP_EINVAL;
        double eff = s[i].flops / (s[i].seconds * s[i].peak_flops_per_s);
        if (eff > 1)
            return dp_err_set(err, DP_EINVAL,
                              "%s: samples[%d]: %g FLOPs in %g s is %.3g of the peak %g FLOP/s: "
                              "faster than the peak",
                              what, i, s[i].flops, s[i].seconds, eff, s[i].peak_flops_per_s);
        if (s[i].flops != s[0].flops)
            same = false;
    }
    if (same)
        return dp_err_set(err, DP_EINVAL,
                          "%s: all %d samples have the same size (%g FLOPs): eff_max and "
                          "half_flops cannot be told apart",
                          what, n, s[0].flops);

    /* Start from the weighted linear fit of t peak = x / eff_max + half / eff_max
     * (weights 1 / (t peak)^2: relative errors). */
    /* x, y, w for the start; model, measured, log efficiency for the quality. */
    double *buf = malloc(6 * (size_t)n * sizeof *buf);
    if (!buf)
        return dp_err_set(err, DP_ENOMEM, "%s: out of memory", what);
    double *x = buf, *y = buf + n, *w = buf + 2 * n;
    double *model = buf + 3 * n, *meas = buf + 4 * n, *ly = buf + 5 * n;
    for (int i = 0; i < n; i++) {
        x[i] = s[i].flops;
        y[i] = s[i].seconds * s[i].peak_flops_per_s;
        w[i] = 1.0 / (y[i] * y[i]);
    }
    double c0, c1, v00, v01, v11, chi;
    gsl_error_handler_t *prev = gsl_set_error_handler_off();
    gsl_fit_wlinear(x, 1, w, 1, y, 1, (size_t)n, &c0, &c1, &v00, &v01, &v11, &chi);
    double emax0 = c1 > 0 ? 1.0 / c1 : 0.5, h0 = c1 > 0 && c0 > 0 ? c0 / c1 : x[0] * 1e-3;
    if (!(emax0 > 0 && emax0 <= 1))
        emax0 = 0.5;
    if (!(h0 > 0))
        h0 = x[0] * 1e-3;

    struct gemm_ctx ctx = {s, n};
    gsl_multifit_nlinear_fdf fdf = {
        .f = gemm_f, .df = gemm_df, .fvv = NULL, .n = (size_t)n, .p = 2, .params = &ctx};
    gsl_multifit_nlinear_parameters prm = gsl_multifit_nlinear_default_parameters();
    gsl_multifit_nlinear_workspace *ws =
        gsl_multifit_nlinear_alloc(gsl_multifit_nlinear_trust, &prm, (size_t)n, 2);
    gsl_vector *p0 = gsl_vector_alloc(2);
    gsl_matrix *cov = gsl_matrix_alloc(2, 2);
    int rc = 0;
    if (!ws || !p0 || !cov) {
        rc = dp_err_set(err, DP_ENOMEM, "%s: out of memory", what);
        goto out;
    }
    gsl_vector_set(p0, 0, log(emax0));
    gsl_vector_set(p0, 1, log10(h0));
    int info = 0;
    int st = gsl_multifit_nlinear_init(p0, &fdf, ws);
    if (st == GSL_SUCCESS)
        st = gsl_multifit_nlinear_driver(500, 1e-12, 1e-12, 0.0, NULL, NULL, &info, ws);
    if (st != GSL_SUCCESS) {
        rc = dp_err_set(err, DP_ERUNTIME, "%s did not converge: %s", what, gsl_strerror(st));
        goto out;
    }
    const gsl_vector *p = gsl_multifit_nlinear_position(ws);
    const gsl_vector *f = gsl_multifit_nlinear_residual(ws);
    gsl_matrix *J = gsl_multifit_nlinear_jac(ws);
    gsl_multifit_nlinear_covar(J, 0.0, cov);
    double ss_res = 0;
    gsl_blas_ddot(f, f, &ss_res);
    double s2 = ss_res / (n - 2); /* the residual variance scales the covariance */
    double u = gsl_vector_get(p, 0), v = gsl_vector_get(p, 1);
    out->curve.eff_max = exp(u);
    out->curve.half_flops = pow(10.0, v);
    out->eff_max_se = out->curve.eff_max * sqrt(s2 * gsl_matrix_get(cov, 0, 0));
    out->log10_half_se = sqrt(s2 * gsl_matrix_get(cov, 1, 1));
    out->half_flops_se = out->curve.half_flops * M_LN10 * out->log10_half_se;
    out->iterations = (int)gsl_multifit_nlinear_niter(ws);

    /* Quality: R^2 of log(efficiency); relative residuals of the times. */
    double mean = 0;
    for (int i = 0; i < n; i++) {
        meas[i] = s[i].seconds;
        model[i] =
            (s[i].flops + out->curve.half_flops) / (s[i].peak_flops_per_s * out->curve.eff_max);
        ly[i] = log(s[i].flops / (s[i].seconds * s[i].peak_flops_per_s));
        mean += ly[i] / n;
    }
    double ss_tot = 0;
    for (int i = 0; i < n; i++)
        ss_tot += (ly[i] - mean) * (ly[i] - mean);
    rel_quality(model, meas, n, 2, resid, &out->q);
    out->q.r2 = r2_of(ss_res, ss_tot);
out:
    gsl_set_error_handler(prev);
    gsl_matrix_free(cov);
    gsl_vector_free(p0);
    gsl_multifit_nlinear_free(ws);
    free(buf);
    return rc;
}

/* ------------------------------------------------------------------ collectives */

static const char *const coll_names[DP_NCCL_COLLS] = {
    "all_reduce", "all_gather", "reduce_scatter", "alltoall", "sendrecv", "broadcast", "reduce"};

const char *dp_nccl_coll_name(enum dp_nccl_coll k)
{
    return (unsigned)k < DP_NCCL_COLLS ? coll_names[k] : "?";
}

int dp_nccl_coll_parse(const char *name)
{
    for (int i = 0; i < DP_NCCL_COLLS; i++)
        if (strcmp(name, coll_names[i]) == 0)
            return i;
    return -1;
}

double dp_nccl_busbw_factor(enum dp_nccl_coll k, int n)
{
    if (n < 1)
        n = 1;
    switch (k) {
    case DP_NCCL_ALL_REDUCE: return 2.0 * (n - 1) / n;
    case DP_NCCL_ALL_GATHER:
    case DP_NCCL_REDUCE_SCATTER:
    case DP_NCCL_ALLTOALL: return (double)(n - 1) / n;
    default: return 1.0;
    }
}

int dp_nccl_ring_steps(enum dp_nccl_coll k, int n)
{
    switch (k) {
    case DP_NCCL_ALL_REDUCE: return 2 * (n - 1);
    case DP_NCCL_SENDRECV: return 1;
    default: return n - 1;
    }
}

int dp_fit_alpha_beta(enum dp_nccl_coll k, const struct dp_coll_sample *s, int n,
                      struct dp_alpha_beta_fit *out, double *resid, struct dp_err *err)
{
    char what[64];
    snprintf(what, sizeof what, "%s fit", dp_nccl_coll_name(k));
    memset(out, 0, sizeof *out);
    if (enough(what, n, 2, "alpha, busbw", err))
        return DP_EINVAL;
    /* Time per step of latency over bus bytes per step: constant means the two
     * columns are proportional and alpha cannot be told from the bandwidth. */
    bool same = true;
    double q0 = 0;
    for (int i = 0; i < n; i++) {
        if (positive(what, i, "bytes", s[i].bytes, err) ||
            positive(what, i, "seconds", s[i].seconds, err))
            return DP_EINVAL;
        if (s[i].ranks < 2)
            return dp_err_set(err, DP_EINVAL,
                              "%s: samples[%d].ranks: expected integer >= 2, got %d", what, i,
                              s[i].ranks);
        double q =
            s[i].bytes * dp_nccl_busbw_factor(k, s[i].ranks) / dp_nccl_ring_steps(k, s[i].ranks);
        if (i == 0)
            q0 = q;
        else if (fabs(q - q0) > 1e-9 * q0)
            same = false;
    }
    if (same)
        return dp_err_set(err, DP_EINVAL,
                          "%s: all %d samples have the same size (%g bytes on %d ranks): alpha and "
                          "bandwidth cannot be told apart",
                          what, n, s[0].bytes, s[0].ranks);
    gsl_matrix *X = gsl_matrix_alloc((size_t)n, 2), *cov = gsl_matrix_alloc(2, 2);
    gsl_vector *y = gsl_vector_alloc((size_t)n), *w = gsl_vector_alloc((size_t)n),
               *c = gsl_vector_alloc(2);
    gsl_multifit_linear_workspace *ws = gsl_multifit_linear_alloc((size_t)n, 2);
    double *model = malloc(2 * (size_t)n * sizeof *model), *meas = model ? model + n : NULL;
    int rc = 0;
    gsl_error_handler_t *prev = gsl_set_error_handler_off();
    if (!X || !cov || !y || !w || !c || !ws || !model) {
        rc = dp_err_set(err, DP_ENOMEM, "%s: out of memory", what);
        goto out;
    }
    for (int i = 0; i < n; i++) {
        gsl_matrix_set(X, (size_t)i, 0, dp_nccl_ring_steps(k, s[i].ranks));
        gsl_matrix_set(X, (size_t)i, 1, s[i].bytes * dp_nccl_busbw_factor(k, s[i].ranks));
        gsl_vector_set(y, (size_t)i, s[i].seconds);
        gsl_vector_set(w, (size_t)i, 1.0 / (s[i].seconds * s[i].seconds));
    }
    /* Relative errors want weights 1 / time^2 of the true times: weighting by the
     * measured ones favours the samples that came out fast and biases the fit, so
     * after the first pass the weights come from the model's times (iteratively
     * reweighted least squares; three passes settle to 1e-6 here). */
    double chisq = 0;
    for (int pass = 0; pass < 4; pass++) {
        int st = gsl_multifit_wlinear(X, w, y, c, cov, &chisq, ws);
        if (st != GSL_SUCCESS) {
            rc = dp_err_set(err, DP_ERUNTIME, "%s failed: %s", what, gsl_strerror(st));
            goto out;
        }
        for (int i = 0; i < n && pass < 3; i++) {
            double t = gsl_vector_get(c, 0) * gsl_matrix_get(X, (size_t)i, 0) +
                       gsl_vector_get(c, 1) * gsl_matrix_get(X, (size_t)i, 1);
            if (t > 0)
                gsl_vector_set(w, (size_t)i, 1.0 / (t * t));
        }
    }
    double alpha = gsl_vector_get(c, 0), inv_bw = gsl_vector_get(c, 1);
    if (!(inv_bw > 0)) {
        rc = dp_err_set(err, DP_EINVAL,
                        "%s: the fitted bandwidth is not positive (1/busbw = %g s/B): the samples "
                        "do not follow time = alpha x steps + bytes / busbw",
                        what, inv_bw);
        goto out;
    }
    /* gsl_multifit_wlinear's covariance is (X^T W X)^-1 for weights 1/sigma^2; ours
     * are relative, so the residual variance chisq / (n - 2) scales it. */
    double s2 = chisq / (n - 2);
    out->alpha_s = alpha;
    out->busbw_Bps = 1.0 / inv_bw;
    out->alpha_se_s = sqrt(s2 * gsl_matrix_get(cov, 0, 0));
    out->busbw_se_Bps = sqrt(s2 * gsl_matrix_get(cov, 1, 1)) / (inv_bw * inv_bw);
    double sw = 0, swy = 0;
    for (int i = 0; i < n; i++) {
        meas[i] = s[i].seconds;
        model[i] =
            alpha * gsl_matrix_get(X, (size_t)i, 0) + inv_bw * gsl_matrix_get(X, (size_t)i, 1);
        sw += gsl_vector_get(w, (size_t)i);
        swy += gsl_vector_get(w, (size_t)i) * meas[i];
    }
    double ss_tot = 0;
    for (int i = 0; i < n; i++)
        ss_tot += gsl_vector_get(w, (size_t)i) * (meas[i] - swy / sw) * (meas[i] - swy / sw);
    rel_quality(model, meas, n, 2, resid, &out->q);
    out->q.r2 = r2_of(chisq, ss_tot);
out:
    gsl_set_error_handler(prev);
    free(model);
    gsl_multifit_linear_free(ws);
    gsl_vector_free(c);
    gsl_vector_free(w);
    gsl_vector_free(y);
    gsl_matrix_free(cov);
    gsl_matrix_free(X);
    return rc;
}

/* ------------------------------------------------------------------ memory bandwidth */

int dp_fit_mem_bw(const struct dp_stream_sample *s, int n, struct dp_membw_fit *out, double *resid,
                  struct dp_err *err)
{
    static const char what[] = "memory bandwidth fit";
    memset(out, 0, sizeof *out);
    if (enough(what, n, 2, "overhead, bw", err))
        return DP_EINVAL;
    bool same = true;
    for (int i = 0; i < n; i++) {
        if (positive(what, i, "bytes", s[i].bytes, err) ||
            positive(what, i, "seconds", s[i].seconds, err))
            return DP_EINVAL;
        if (s[i].bytes != s[0].bytes)
            same = false;
    }
    if (same)
        return dp_err_set(err, DP_EINVAL,
                          "%s: all %d samples have the same size (%g bytes): overhead and "
                          "bandwidth cannot be told apart",
                          what, n, s[0].bytes);
    double *buf = malloc(4 * (size_t)n * sizeof *buf);
    if (!buf)
        return dp_err_set(err, DP_ENOMEM, "%s: out of memory", what);
    double *x = buf, *y = buf + n, *w = buf + 2 * n, *model = buf + 3 * n;
    for (int i = 0; i < n; i++) {
        x[i] = s[i].bytes;
        y[i] = s[i].seconds;
        w[i] = 1.0 / (y[i] * y[i]);
    }
    double c0, c1, v00, v01, v11, chisq;
    gsl_error_handler_t *prev = gsl_set_error_handler_off();
    int st = GSL_SUCCESS;
    /* Reweighted by the model's times after the first pass, as in dp_fit_alpha_beta. */
    for (int pass = 0; pass < 4 && st == GSL_SUCCESS; pass++) {
        st = gsl_fit_wlinear(x, 1, w, 1, y, 1, (size_t)n, &c0, &c1, &v00, &v01, &v11, &chisq);
        for (int i = 0; i < n && pass < 3; i++) {
            double t = c0 + c1 * x[i];
            if (t > 0)
                w[i] = 1.0 / (t * t);
        }
    }
    gsl_set_error_handler(prev);
    int rc = 0;
    if (st != GSL_SUCCESS) {
        rc = dp_err_set(err, DP_ERUNTIME, "%s failed: %s", what, gsl_strerror(st));
        goto out;
    }
    if (!(c1 > 0)) {
        rc = dp_err_set(err, DP_EINVAL,
                        "%s: the fitted bandwidth is not positive (1/bw = %g s/B): the samples do "
                        "not follow time = overhead + bytes / bw",
                        what, c1);
        goto out;
    }
    double s2 = chisq / (n - 2);
    out->overhead_s = c0;
    out->bw_Bps = 1.0 / c1;
    out->overhead_se_s = sqrt(s2 * v00);
    out->bw_se_Bps = sqrt(s2 * v11) / (c1 * c1);
    double sw = 0, swy = 0;
    for (int i = 0; i < n; i++) {
        model[i] = c0 + c1 * x[i];
        sw += w[i];
        swy += w[i] * y[i];
    }
    double ss_tot = 0;
    for (int i = 0; i < n; i++)
        ss_tot += w[i] * (y[i] - swy / sw) * (y[i] - swy / sw);
    rel_quality(model, y, n, 2, resid, &out->q);
    out->q.r2 = r2_of(chisq, ss_tot);
out:
    free(buf);
    return rc;
}

int dp_coll_keep_faster(struct dp_coll_sample *s, int n, const struct dp_coll_sample *other, int m)
{
    int faster = 0;
    for (int i = 0; i < n; i++)
        for (int j = 0; j < m; j++)
            if (other[j].bytes == s[i].bytes && other[j].ranks == s[i].ranks &&
                isfinite(other[j].seconds) && other[j].seconds > 0 &&
                !(other[j].seconds >= s[i].seconds)) {
                s[i].seconds = other[j].seconds;
                faster++;
            }
    return faster;
}

/* ------------------------------------------------------------------ nccl-tests output */

void dp_nccl_header(char *buf, size_t cap)
{
    snprintf(buf, cap, "#%12s %13s %9s %7s %7s %8s %7s %7s\n#%12s %13s %9s %7s %7s %8s %7s %7s\n",
             "size", "count", "type", "redop", "root", "time", "algbw", "busbw", "(B)",
             "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)");
}

void dp_nccl_row(enum dp_nccl_coll k, double bytes, int elem_bytes, const char *type, int ranks,
                 double seconds, char *buf, size_t cap)
{
    bool reduces = k == DP_NCCL_ALL_REDUCE || k == DP_NCCL_REDUCE_SCATTER || k == DP_NCCL_REDUCE;
    int root = k == DP_NCCL_BROADCAST || k == DP_NCCL_REDUCE ? 0 : -1;
    double algbw = seconds > 0 ? bytes / seconds / 1e9 : 0;
    double busbw = algbw * dp_nccl_busbw_factor(k, ranks);
    snprintf(buf, cap, " %12.0f %13.0f %9s %7s %7d %8.2f %7.2f %7.2f\n", bytes,
             elem_bytes > 0 ? bytes / elem_bytes : 0, type, reduces ? "sum" : "none", root,
             seconds * 1e6, algbw, busbw);
}
