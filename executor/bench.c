/*
 * Kernel microbenchmarks for `dplan calibrate --backend cpu` (executor.h,
 * "benchmarks"): the backend's own GEMM (dp__cpu_gemm, split by rows over
 * the OpenMP threads as a training step runs it) at a given shape, and a
 * streaming pass y = a x + b y at a given working set. Each is the low
 * quantile (the 10th percentile; the minimum below 11 repetitions) of
 * repetitions after one untimed warm-up: the work is the same each time and a
 * busy neighbour only ever adds time, so the fast end is the kernel's cost.
 */
#include "backend/backend.h"
#include "backend/cpu.h"
#include "backend/probe.h"
#include "executor.h"

#include <omp.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static real *fill(size_t n, int salt)
{
    real *x = malloc((n ? n : 1) * sizeof *x);
    for (size_t i = 0; x && i < n; i++)
        x[i] = (real)((i * 7 + (size_t)salt) % 13) * (real)0.01 - (real)0.06;
    return x;
}

int dp_exec_bench_gemm(int m, int n, int k, int threads, int reps, double *seconds,
                       struct dp_err *err)
{
    if (m < 1 || n < 1 || k < 1 || threads < 1 || reps < 1)
        return dp_err_set(err, DP_EINVAL, "GEMM benchmark: expected positive sizes, got %dx%dx%d",
                          m, n, k);
    real *a = fill((size_t)m * k, 1), *b = fill((size_t)k * n, 2), *c = fill((size_t)m * n, 3);
    double *t = malloc((size_t)reps * sizeof *t);
    int rc = 0;
    if (!a || !b || !c || !t) {
        rc = dp_err_set(err, DP_ENOMEM, "GEMM benchmark %dx%dx%d: out of memory", m, n, k);
    } else {
        int saved = omp_get_max_threads();
        omp_set_num_threads(threads);
        struct dp_backend be = {.threads = threads};
        for (int r = -1; r < reps; r++) {
            double t0 = now_s();
            dp__cpu_gemm(&be, false, false, m, n, k, 1, a, k, b, n, 0, c, n);
            if (r >= 0)
                t[r] = now_s() - t0;
        }
        omp_set_num_threads(saved);
        qsort(t, (size_t)reps, sizeof *t, cmp_double);
        *seconds = t[(reps - 1) / 10];
    }
    free(a);
    free(b);
    free(c);
    free(t);
    return rc;
}

int dp_exec_bench_stream(int64_t bytes, int reps, double *seconds, struct dp_err *err)
{
    /* y = a x + b y reads x and y and writes y: 3 elements moved per element of y. */
    size_t n = (size_t)(bytes / (3 * (int64_t)sizeof(real)));
    if (n < 16 || reps < 1)
        return dp_err_set(err, DP_EINVAL, "stream benchmark: expected >= %d bytes, got %lld",
                          (int)(48 * sizeof(real)), (long long)bytes);
    real *x = fill(n, 1), *y = fill(n, 2);
    double *t = malloc((size_t)reps * sizeof *t);
    int rc = 0;
    if (!x || !y || !t) {
        rc = dp_err_set(err, DP_ENOMEM, "stream benchmark of %lld bytes: out of memory",
                        (long long)bytes);
    } else {
        for (int r = -1; r < reps; r++) {
            double t0 = now_s();
            for (size_t i = 0; i < n; i++)
                y[i] = (real)0.5 * x[i] + (real)0.25 * y[i];
            if (r >= 0)
                t[r] = now_s() - t0;
        }
        qsort(t, (size_t)reps, sizeof *t, cmp_double);
        *seconds = t[(reps - 1) / 10];
        /* Keep the loop: a result the compiler cannot discard. */
        volatile real sink = y[n / 2];
        (void)sink;
    }
    free(x);
    free(y);
    free(t);
    return rc;
}

int dp_exec_measure_costs(struct dp_exec_costs *out, struct dp_err *err)
{
    struct dp_probe_shape sh = {.threads = out->threads,
                                .concurrent = out->concurrent,
                                .seq_len = out->seq_len,
                                .head_dim = out->head_dim,
                                .ffn = out->ffn,
                                .norm = out->norm,
                                .hidden = out->hidden,
                                .sweep_bytes = out->sweep_bytes};
    struct dp_device_probe p;
    int rc = dp_exec_probe_device(&sh, &p, err);
    if (rc)
        return rc;
    out->gemm_call_s = p.gemm_call_s;
    out->gemm_gflops = p.gemm_gflops;
    out->conc_eff = p.conc_eff;
    out->fork_s = p.fork_s;
    memcpy(out->bw_gbps, p.bw_gbps, sizeof out->bw_gbps);
    memcpy(out->cache_bytes, p.cache_bytes, sizeof out->cache_bytes);
    out->attn_fwd_s = p.attn_fwd_s;
    out->attn_bwd_s = p.attn_bwd_s;
    out->attn_probs_s = p.attn_probs_s;
    out->act_fwd_ns = p.act_fwd_ns;
    out->act_bwd_ns = p.act_bwd_ns;
    out->norm_fwd_ns = p.norm_fwd_ns;
    out->norm_bwd_ns = p.norm_bwd_ns;
    out->ce_ns = p.ce_ns;
    out->adamw_ns = p.adamw_ns;
    out->swept_gbps = p.swept_gbps;
    return 0;
}

int dp_exec_measure_reuse(const struct dp_exec_costs *shape, struct dp_exec_reuse_samples *out,
                          struct dp_err *err)
{
    struct dp_probe_shape sh = {.threads = 1,
                                .concurrent = 1,
                                .seq_len = shape->seq_len,
                                .head_dim = shape->head_dim,
                                .ffn = shape->ffn,
                                .norm = shape->norm,
                                .hidden = shape->hidden};
    return dp_exec_probe_reuse(&sh, out, err);
}
