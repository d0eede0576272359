/*
 * Stand-in for the CPU backend when dplan is configured without MPI or
 * OpenBLAS (-DDPLAN_MPI=OFF / -DDPLAN_OPENBLAS=OFF): `dplan run` then says
 * so instead of failing to link, and the step-time probe fails the same way.
 */
#include "backend.h"
#include "probe.h"

#include <string.h>

static struct dp_backend *none_new(const struct dp_backend_cfg *cfg, struct dp_err *err)
{
    (void)cfg;
    dp_err_set(err, DP_EINFEASIBLE,
               "this dplan was built without the CPU backend (configure with -DDPLAN_MPI=ON "
               "-DDPLAN_OPENBLAS=ON)");
    return NULL;
}

const struct dp_backend_kind dp__cpu_kind = {.name = "cpu", .create = none_new};

int dp_exec_probe_device(const struct dp_probe_shape *shape, struct dp_device_probe *out,
                         struct dp_err *err)
{
    (void)shape;
    memset(out, 0, sizeof *out);
    return dp_err_set(err, DP_ERUNTIME,
                      "device probe: this dplan was built without the CPU backend");
}

int dp_exec_gemm_threads(int m, int n, int k, int threads)
{
    (void)m, (void)n, (void)k, (void)threads;
    return 1;
}

int dp_exec_bench_gemm(int m, int n, int k, int threads, int reps, double *seconds,
                       struct dp_err *err)
{
    (void)m, (void)n, (void)k, (void)threads, (void)reps;
    *seconds = 0;
    return dp_err_set(err, DP_ERUNTIME,
                      "GEMM benchmark: this dplan was built without the CPU backend");
}

int dp_exec_bench_stream(int64_t bytes, int reps, double *seconds, struct dp_err *err)
{
    (void)bytes, (void)reps;
    *seconds = 0;
    return dp_err_set(err, DP_ERUNTIME,
                      "stream benchmark: this dplan was built without the CPU backend");
}

int dp_exec_measure_costs(struct dp_exec_costs *out, struct dp_err *err)
{
    (void)out;
    return dp_err_set(err, DP_ERUNTIME, "cost probe: this dplan was built without the CPU backend");
}

int dp_exec_measure_reuse(const struct dp_exec_costs *shape, struct dp_exec_reuse_samples *out,
                          struct dp_err *err)
{
    (void)shape;
    memset(out, 0, sizeof *out);
    return dp_err_set(err, DP_ERUNTIME,
                      "reuse probe: this dplan was built without the CPU backend");
}
