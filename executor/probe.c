/*
 * Device probe for the CPU backend: what OpenBLAS's SGEMM reaches on one
 * thread at a small and a large size, and what a streaming loop moves. Best
 * of a few repetitions, so a busy neighbour does not poison the figure.
 */
#include "probe.h"

#include <cblas.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* Best GFLOP/s of C[m,n] = A[m,k] B[k,n]^T over reps. */
static double gemm_rate(int m, int n, int k, int reps)
{
    float *a = malloc(sizeof(float) * (size_t)m * k), *b = malloc(sizeof(float) * (size_t)n * k);
    float *c = malloc(sizeof(float) * (size_t)m * n);
    if (!a || !b || !c) {
        free(a);
        free(b);
        free(c);
        return 0;
    }
    for (size_t i = 0; i < (size_t)m * k; i++)
        a[i] = (float)(i % 7) * 0.01f;
    for (size_t i = 0; i < (size_t)n * k; i++)
        b[i] = (float)(i % 5) * 0.01f;
    double best = 0;
    for (int r = 0; r < reps; r++) {
        double t0 = now_s();
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, n, k, 1.0f, a, k, b, k, 0.0f, c, n);
        double dt = now_s() - t0;
        double g = 2.0 * m * n * k / dt / 1e9;
        if (g > best)
            best = g;
    }
    free(a);
    free(b);
    free(c);
    return best;
}

int dp_exec_probe_device(struct dp_device_probe *out, struct dp_err *err)
{
    memset(out, 0, sizeof *out);
    /* Small: one head's attention-sized product; large: a projection of the
     * benchmark GPT (1024 tokens x 256 x 768). */
    out->small_flops = 2.0 * 128 * 128 * 32;
    out->small_gflops = gemm_rate(128, 128, 32, 20);
    out->large_flops = 2.0 * 1024 * 768 * 256;
    out->large_gflops = gemm_rate(1024, 768, 256, 5);
    size_t n = (size_t)16 << 20; /* 64 MiB per array: beyond any cache */
    float *x = malloc(n * sizeof *x), *y = malloc(n * sizeof *y);
    if (!x || !y || out->small_gflops <= 0 || out->large_gflops <= 0) {
        free(x);
        free(y);
        return dp_err_set(err, DP_ENOMEM, "device probe: out of memory");
    }
    for (size_t i = 0; i < n; i++)
        x[i] = (float)i;
    double best = 0;
    for (int r = 0; r < 3; r++) {
        double t0 = now_s();
        for (size_t i = 0; i < n; i++)
            y[i] = 1.5f * x[i];
        double dt = now_s() - t0;
        double g = 2.0 * (double)n * sizeof(float) / dt / 1e9;
        if (g > best)
            best = g;
    }
    /* Keep the loop from being optimised away. */
    volatile float sink = y[n / 2];
    (void)sink;
    free(x);
    free(y);
    out->stream_gbps = best;
    return 0;
}
