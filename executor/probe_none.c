/*
 * The device probe when the CPU backend is not built (no MPI/OpenBLAS).
 */
#include "executor.h"
#include "probe.h"

#include <string.h>

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

int dp_exec_bench_gemm(int m, int n, int k, int threads, int reps, double *median_s,
                       struct dp_err *err)
{
    (void)m, (void)n, (void)k, (void)threads, (void)reps;
    *median_s = 0;
    return dp_err_set(err, DP_ERUNTIME,
                      "GEMM benchmark: this dplan was built without the CPU backend");
}

int dp_exec_bench_stream(int64_t bytes, int reps, double *median_s, struct dp_err *err)
{
    (void)bytes, (void)reps;
    *median_s = 0;
    return dp_err_set(err, DP_ERUNTIME,
                      "stream benchmark: this dplan was built without the CPU backend");
}
