/*
 * Ring attention's block kernels (backend/cpu_attention_cp.c), double precision
 * (dplan_executor_f64), one process: the ring of cp ranks is walked in this process,
 * each rank's two load-balanced chunks (i and 2 cp - 1 - i) taken from one global
 * sequence, every block visited in the order executor/cp.c passes them.
 *
 *  1. Forward: the merged context of every rank equals the single-process causal
 *     attention (dp__cpu_attn_fwd) of the whole sequence at the same rows.
 *  2. Backward: with L = sum over ranks of sum(W * ctx) (W fixed, random), the
 *     analytic dL/dqkv from attn_ring_dsum / attn_ring_bwd (dq per rank, dk, dv
 *     accumulated per block as they travel) against central finite differences of the
 *     forward at h = 1e-4 and 5e-5, Richardson-extrapolated, at q, k and v elements of
 *     every chunk. GQA (4 query heads on 2 kv heads), cp = 2 and 3, B = 2.
 * Passes below a relative error of 1e-6 (differences below 1e-10 count as zero, as in
 * test_executor_gradcheck.c).
 */
#include "check.h"
#include "executor/backend/cpu.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { A = 4, G = 2, D = 4, B = 2, C = 3 };
#define QD   (A * D)
#define KVD  (G * D)
#define QKVD (QD + 2 * KVD)

struct ring {
    int cp;
    int64_t T, Tg;         /* local rows 2 C, global rows 2 cp C */
    double *qkv, *w;       /* global [B Tg][QKVD], weights [B Tg][QD] */
    double *lq, *kv, *ctx; /* per rank: local qkv, packed kv, context */
    double *lse, *sm, *dsum;
};

/* Global row of local row j of rank r. */
static int64_t grow(const struct ring *R, int r, int64_t j)
{
    return j < C ? (int64_t)r * C + j : (int64_t)(2 * R->cp - 1 - r) * C + (j - C);
}

static void chunks(const struct ring *R, int r, int c[2])
{
    c[0] = r;
    c[1] = 2 * R->cp - 1 - r;
}

/* Each rank's local rows, their packed k, v, and the ring's forward: ctx and lse. */
static double forward(struct ring *R)
{
    const int cp = R->cp;
    const int64_t T = R->T, N = B * T;
    double loss = 0;
    for (int r = 0; r < cp; r++) {
        double *lq = R->lq + r * N * QKVD, *kv = R->kv + r * N * 2 * KVD;
        for (int64_t b = 0; b < B; b++)
            for (int64_t j = 0; j < T; j++) {
                const double *src = R->qkv + (b * R->Tg + grow(R, r, j)) * QKVD;
                memcpy(lq + (b * T + j) * QKVD, src, QKVD * sizeof(double));
                memcpy(kv + (b * T + j) * 2 * KVD, src + QD, 2 * KVD * sizeof(double));
            }
    }
    for (int r = 0; r < cp; r++) {
        double *ctx = R->ctx + r * N * QD, *lse = R->lse + r * B * A * T;
        memset(ctx, 0, (size_t)(N * QD) * sizeof(double));
        memset(lse, 0, (size_t)(B * A * T) * sizeof(double));
        memset(R->sm, 0, (size_t)(B * A * T) * sizeof(double));
        int qc[2], kc[2];
        chunks(R, r, qc);
        for (int s = 0; s < cp; s++) {
            int src = (r - s + cp) % cp;
            chunks(R, src, kc);
            dp__cpu_attn_ring_fwd(NULL, ctx, lse, R->sm, R->lq + r * N * QKVD, QKVD,
                                  R->kv + src * N * 2 * KVD, qc, kc, B, C, A, G, D);
        }
        dp__cpu_attn_ring_done(NULL, ctx, lse, R->sm, B, T, A, D);
        for (int64_t b = 0; b < B; b++)
            for (int64_t j = 0; j < T; j++)
                for (int e = 0; e < QD; e++)
                    loss += R->w[(b * R->Tg + grow(R, r, j)) * QD + e] * ctx[(b * T + j) * QD + e];
    }
    return loss;
}

/* dL/dqkv (global layout) by the ring's backward. */
static void backward(struct ring *R, double *grad)
{
    const int cp = R->cp;
    const int64_t T = R->T, N = B * T;
    double *dq = calloc((size_t)(cp * N * QKVD), sizeof *dq);
    double *dkv = calloc((size_t)(cp * N * 2 * KVD), sizeof *dkv);
    double *dctx = malloc((size_t)(N * QD) * sizeof *dctx);
    for (int r = 0; r < cp; r++) {
        for (int64_t b = 0; b < B; b++)
            for (int64_t j = 0; j < T; j++)
                memcpy(dctx + (b * T + j) * QD, R->w + (b * R->Tg + grow(R, r, j)) * QD,
                       QD * sizeof(double));
        dp__cpu_attn_ring_dsum(NULL, R->dsum, dctx, R->ctx + r * N * QD, B, T, A, D);
        int qc[2], kc[2];
        chunks(R, r, qc);
        for (int s = 0; s < cp; s++) {
            int src = (r - s + cp) % cp;
            chunks(R, src, kc);
            dp__cpu_attn_ring_bwd(NULL, dq + r * N * QKVD, dkv + src * N * 2 * KVD, dctx,
                                  R->lq + r * N * QKVD, QKVD, R->kv + src * N * 2 * KVD,
                                  R->lse + r * B * A * T, R->dsum, qc, kc, B, C, A, G, D);
        }
    }
    for (int r = 0; r < cp; r++)
        for (int64_t b = 0; b < B; b++)
            for (int64_t j = 0; j < T; j++) {
                double *g = grad + (b * R->Tg + grow(R, r, j)) * QKVD;
                memcpy(g, dq + (r * N + b * T + j) * QKVD, QD * sizeof(double));
                memcpy(g + QD, dkv + (r * N + b * T + j) * 2 * KVD, 2 * KVD * sizeof(double));
            }
    free(dq);
    free(dkv);
    free(dctx);
}

static double check_ring(int cp)
{
    struct ring R = {.cp = cp, .T = 2 * C, .Tg = 2 * cp * C};
    const int64_t NG = B * R.Tg, N = B * R.T;
    R.qkv = malloc((size_t)(NG * QKVD) * sizeof(double));
    R.w = malloc((size_t)(NG * QD) * sizeof(double));
    R.lq = malloc((size_t)(cp * N * QKVD) * sizeof(double));
    R.kv = malloc((size_t)(cp * N * 2 * KVD) * sizeof(double));
    R.ctx = malloc((size_t)(cp * N * QD) * sizeof(double));
    R.lse = malloc((size_t)(cp * B * A * R.T) * sizeof(double));
    R.sm = malloc((size_t)(B * A * R.T) * sizeof(double));
    R.dsum = malloc((size_t)(B * A * R.T) * sizeof(double));
    double *grad = malloc((size_t)(NG * QKVD) * sizeof(double));
    double *ref = malloc((size_t)(NG * QD) * sizeof(double));
    double *probs = malloc((size_t)(B * A * R.Tg * R.Tg) * sizeof(double));
    srand(17 + (unsigned)cp);
    for (int64_t i = 0; i < NG * QKVD; i++)
        R.qkv[i] = 2.0 * ((double)rand() / RAND_MAX - 0.5);
    for (int64_t i = 0; i < NG * QD; i++)
        R.w[i] = (double)rand() / RAND_MAX - 0.5;

    /* 1. The ring's context against the whole sequence's causal attention. */
    forward(&R);
    dp__cpu_attn_fwd(NULL, ref, probs, R.qkv, B, R.Tg, A, G, D);
    double fwd = 0;
    for (int r = 0; r < cp; r++)
        for (int64_t b = 0; b < B; b++)
            for (int64_t j = 0; j < R.T; j++)
                for (int e = 0; e < QD; e++)
                    fwd = fmax(fwd, fabs(R.ctx[(r * N + b * R.T + j) * QD + e] -
                                         ref[(b * R.Tg + grow(&R, r, j)) * QD + e]));
    CHECK(fwd < 1e-12);

    /* 2. The backward against finite differences. */
    forward(&R);
    backward(&R, grad);
    double worst = 0;
    int probes = 0;
    for (int64_t row = 0; row < NG; row++)        /* every row of both sequences */
        for (int col = 0; col < QKVD; col += 5) { /* q, k and v columns */
            int64_t i = row * QKVD + col;
            double v = R.qkv[i], d[2];
            for (int e = 0; e < 2; e++) {
                double h = e ? 5e-5 : 1e-4;
                R.qkv[i] = v + h;
                double lp = forward(&R);
                R.qkv[i] = v - h;
                double lm = forward(&R);
                d[e] = (lp - lm) / (2 * h);
            }
            R.qkv[i] = v;
            double num = (4 * d[1] - d[0]) / 3, ana = grad[i], diff = fabs(num - ana);
            double e = diff < 1e-10 ? 0 : diff / fmax(fabs(num), fabs(ana));
            if (e > 1e-6)
                fprintf(stderr, "cp=%d qkv[%lld][%d]: analytic %.10g, numeric %.10g\n", cp,
                        (long long)row, col, ana, num);
            worst = fmax(worst, e);
            probes++;
        }
    printf("ring attention cp=%d: forward against the whole sequence %.3g; backward %d probes, "
           "worst relative error %.3g\n",
           cp, fwd, probes, worst);
    CHECK(probes > 100);
    free(R.qkv);
    free(R.w);
    free(R.lq);
    free(R.kv);
    free(R.ctx);
    free(R.lse);
    free(R.sm);
    free(R.dsum);
    free(grad);
    free(ref);
    free(probs);
    return worst;
}

int main(void)
{
    CHECK(check_ring(2) < 1e-6);
    CHECK(check_ring(3) < 1e-6);
    return check_done("test_executor_ring");
}
