/*
 * dp_fit_reuse (fit.h): the CPU backend's memory and SGEMM model from the reuse probe's
 * samples (executor/backend/cpu_probe.c): bandwidth by reuse distance as measured,
 * SGEMM hot and cold by nonnegative weighted linear least squares (GSL), each kernel's
 * cold factor a ratio.
 */
#include "fit.h"

#include <gsl/gsl_errno.h>
#include <gsl/gsl_multifit.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define MAXP 4

/*
 * y_i ~ sum_j c_j X[i][j] with c_j >= 0, least squares on the relative error: weights
 * 1 / y_model^2, iteratively reweighted from 1 / y^2 (as dp_fit_alpha_beta). A coefficient
 * that comes out negative is fixed at 0 and the others refitted (an active set: with 2-4
 * columns a few passes settle it). Returns 0, or DP_ERUNTIME when GSL fails.
 */
static int nonneg_fit(const double (*X)[MAXP], const double *y, int n, int p, double *c,
                      struct dp_fit_quality *q, double *resid, const char *what, struct dp_err *err)
{
    bool active[MAXP];
    for (int j = 0; j < p; j++)
        active[j] = true;
    gsl_error_handler_t *prev = gsl_set_error_handler_off();
    int rc = 0;
    double *w = malloc((size_t)n * sizeof *w), *model = malloc((size_t)n * sizeof *model);
    if (!w || !model) {
        rc = dp_err_set(err, DP_ENOMEM, "%s: out of memory", what);
        goto out;
    }
    for (int round = 0; round < p; round++) {
        int na = 0, idx[MAXP];
        for (int j = 0; j < p; j++)
            if (active[j])
                idx[na++] = j;
        memset(c, 0, (size_t)p * sizeof *c);
        if (!na)
            break;
        gsl_matrix *A = gsl_matrix_alloc((size_t)n, (size_t)na),
                   *cov = gsl_matrix_alloc((size_t)na, (size_t)na);
        gsl_vector *yy = gsl_vector_alloc((size_t)n), *ww = gsl_vector_alloc((size_t)n),
                   *cc = gsl_vector_alloc((size_t)na);
        gsl_multifit_linear_workspace *ws = gsl_multifit_linear_alloc((size_t)n, (size_t)na);
        if (!A || !cov || !yy || !ww || !cc || !ws) {
            rc = dp_err_set(err, DP_ENOMEM, "%s: out of memory", what);
        } else {
            for (int i = 0; i < n; i++) {
                for (int j = 0; j < na; j++)
                    gsl_matrix_set(A, (size_t)i, (size_t)j, X[i][idx[j]]);
                gsl_vector_set(yy, (size_t)i, y[i]);
                w[i] = 1 / (y[i] * y[i]);
            }
            double chisq;
            for (int pass = 0; pass < 4 && !rc; pass++) {
                for (int i = 0; i < n; i++)
                    gsl_vector_set(ww, (size_t)i, w[i]);
                int st = gsl_multifit_wlinear(A, ww, yy, cc, cov, &chisq, ws);
                if (st != GSL_SUCCESS) {
                    rc = dp_err_set(err, DP_ERUNTIME, "%s failed: %s", what, gsl_strerror(st));
                    break;
                }
                for (int i = 0; i < n; i++) {
                    double t = 0;
                    for (int j = 0; j < na; j++)
                        t += gsl_vector_get(cc, (size_t)j) * X[i][idx[j]];
                    if (t > 0)
                        w[i] = 1 / (t * t);
                }
            }
            for (int j = 0; j < na && !rc; j++)
                c[idx[j]] = gsl_vector_get(cc, (size_t)j);
        }
        gsl_multifit_linear_free(ws);
        gsl_vector_free(cc);
        gsl_vector_free(ww);
        gsl_vector_free(yy);
        gsl_matrix_free(cov);
        gsl_matrix_free(A);
        if (rc)
            goto out;
        bool neg = false;
        for (int j = 0; j < p; j++)
            if (active[j] && c[j] < 0) {
                active[j] = false;
                neg = true;
            }
        if (!neg)
            break;
    }
    for (int j = 0; j < p; j++)
        c[j] = c[j] > 0 ? c[j] : 0;
    double ss = 0, mx = 0;
    for (int i = 0; i < n; i++) {
        model[i] = 0;
        for (int j = 0; j < p; j++)
            model[i] += c[j] * X[i][j];
        double r = model[i] / y[i] - 1;
        if (resid)
            resid[i] = r;
        ss += r * r;
        mx = fmax(mx, fabs(r));
    }
    q->n = n;
    q->params = p;
    q->rms_rel = sqrt(ss / n);
    q->max_rel = mx;
    /* R^2 of log(time): how much of the samples' spread (decades of size) the model explains. */
    double my = 0, st = 0, sr = 0;
    for (int i = 0; i < n; i++)
        my += log(y[i]) / n;
    for (int i = 0; i < n; i++) {
        st += (log(y[i]) - my) * (log(y[i]) - my);
        double r = model[i] > 0 ? log(model[i] / y[i]) : 0;
        sr += r * r;
    }
    q->r2 = st > 0 ? 1 - sr / st : 1;
out:
    gsl_set_error_handler(prev);
    free(w);
    free(model);
    return rc;
}

static double factor(const struct dp_reuse_kernel_sample *k, double drd, double dwr)
{
    double x = k->rd_bytes * drd + k->wr_bytes * dwr;
    return x > 0 && k->far_s > k->hot_s ? (k->far_s - k->hot_s) / x : 0;
}

int dp_fit_reuse(const struct dp_reuse_samples *s, struct dp_cal_reuse *out, double *resid_hot,
                 struct dp_err *err)
{
    static const char what[] = "reuse fit";
    memset(out, 0, sizeof *out);
    if (s->n < 2 || s->n > DP_CAL_REUSE_POINTS)
        return dp_err_set(err, DP_EINVAL, "%s: %d curve points: expected 2 to %d", what, s->n,
                          DP_CAL_REUSE_POINTS);
    for (int i = 0; i < s->n; i++)
        if (!(s->bytes[i] > 0) || !(s->read_gbps[i] > 0) || !(s->write_gbps[i] > 0) ||
            !isfinite(s->read_gbps[i]) || !isfinite(s->write_gbps[i]) ||
            (i > 0 && !(s->bytes[i] > s->bytes[i - 1])))
            return dp_err_set(err, DP_EINVAL,
                              "%s: curve point %d: expected bytes > 0 ascending and rates > 0",
                              what, i);
    if (s->ngemm < MAXP + 1 || s->ngemm > DP_CAL_GEMM_SHAPES)
        return dp_err_set(err, DP_EINVAL,
                          "%s: %d SGEMM samples for 4 parameters (call, rate, packing, C): need at "
                          "least 5",
                          what, s->ngemm);
    double X[DP_CAL_GEMM_SHAPES][MAXP], y[DP_CAL_GEMM_SHAPES], c[MAXP] = {0};
    int ncold = 0;
    for (int i = 0; i < s->ngemm; i++) {
        const struct dp_sgemm_sample *g = &s->gemm[i];
        if (g->m < 1 || g->n < 1 || g->k < 1 || !(g->hot_s > 0) || !isfinite(g->hot_s) ||
            g->cold_s < 0 || !isfinite(g->cold_s))
            return dp_err_set(err, DP_EINVAL,
                              "%s: SGEMM sample %d: expected positive sizes and hot time, cold "
                              "time >= 0",
                              what, i);
        double m = g->m, n = g->n, k = g->k;
        X[i][0] = 1;
        X[i][1] = 2 * m * n * k;
        X[i][2] = (m + n) * k;
        X[i][3] = m * n;
        y[i] = g->hot_s;
        ncold += g->cold_s > g->hot_s;
    }
    int rc = nonneg_fit((const double(*)[MAXP])X, y, s->ngemm, MAXP, c, &out->gemm_hot_q, resid_hot,
                        "SGEMM hot fit", err);
    if (rc)
        return rc;
    if (!(c[1] > 0))
        return dp_err_set(err, DP_EINVAL,
                          "%s: SGEMM's multiply-adds came out free: the samples do not follow "
                          "time = call + FLOPs / rate + packing + C",
                          what);
    out->gemm_call_us = c[0] * 1e6;
    out->gemm_gflops = 1e-9 / c[1];
    out->gemm_ab_ns = c[2] * 1e9;
    out->gemm_c_ns = c[3] * 1e9;

    out->n = s->n;
    memcpy(out->bytes, s->bytes, (size_t)s->n * sizeof *s->bytes);
    memcpy(out->read_gbps, s->read_gbps, (size_t)s->n * sizeof *s->read_gbps);
    memcpy(out->write_gbps, s->write_gbps, (size_t)s->n * sizeof *s->write_gbps);
    /* extra seconds per byte read and written, hot to the point the cold times were taken at
     * (the last one unless far_bytes names another) */
    int e = s->n - 1;
    for (int i = 0; i < s->n && s->far_bytes > 0; i++)
        if (s->bytes[i] == s->far_bytes)
            e = i;
    const double drd = 1e-9 / s->read_gbps[e] - 1e-9 / s->read_gbps[0],
                 dwr = 1e-9 / s->write_gbps[e] - 1e-9 / s->write_gbps[0];
    if (ncold >= 1 && (drd > 0 || dwr > 0)) {
        double f[DP_CAL_GEMM_SHAPES] = {0};
        int j = 0;
        for (int i = 0; i < s->ngemm; i++) {
            const struct dp_sgemm_sample *q = &s->gemm[i];
            double m = q->m, n = q->n, k = q->k;
            double x = 4.0 * (m * k + k * n) * drd + 4.0 * m * n * dwr;
            if (q->cold_s > q->hot_s && x > 0)
                f[j++] = (q->cold_s - q->hot_s) / x;
        }
        for (int i = 1; i < j; i++)
            for (int u = i; u > 0 && f[u - 1] > f[u]; u--) {
                double t = f[u];
                f[u] = f[u - 1];
                f[u - 1] = t;
            }
        out->gemm_cold = !j ? 0 : j % 2 ? f[j / 2] : 0.5 * (f[j / 2 - 1] + f[j / 2]);
        /* the products' own factors around it, as relative residuals */
        double ss = 0, mx = 0;
        for (int i = 0; i < j; i++) {
            double r = out->gemm_cold / f[i] - 1;
            ss += r * r;
            mx = fmax(mx, fabs(r));
        }
        if (j)
            out->gemm_cold_q = (struct dp_fit_quality){j, 1, 0, sqrt(ss / j), mx};
    }
    out->attn_fwd = factor(&s->attn_fwd, drd, dwr);
    out->attn_bwd = factor(&s->attn_bwd, drd, dwr);
    out->attn_probs = factor(&s->attn_probs, drd, dwr);
    out->act_fwd = factor(&s->act_fwd, drd, dwr);
    out->act_bwd = factor(&s->act_bwd, drd, dwr);
    out->norm_fwd = factor(&s->norm_fwd, drd, dwr);
    out->norm_bwd = factor(&s->norm_bwd, drd, dwr);
    out->ce = factor(&s->ce, drd, dwr);
    out->adamw = factor(&s->adamw, drd, dwr);
    out->sumsq = factor(&s->sumsq, drd, dwr);
    out->sumsq_ns = s->sumsq.hot_s > 0 ? s->sumsq.hot_s * 1e9 : 0;
    return 0;
}
