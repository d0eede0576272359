/*
 * A quick measurement of this machine as the CPU backend sees it: single-
 * thread SGEMM rates at two sizes and a streaming memory bandwidth. The CLI
 * turns them into a device profile so that the step-time model can predict
 * the CPU executor's step time (cli/run_predict.c). Uses only core/.
 */
#ifndef DPLAN_EXECUTOR_PROBE_H
#define DPLAN_EXECUTOR_PROBE_H

#include "core/core.h"

struct dp_device_probe {
    double small_flops, small_gflops; /* one SGEMM of small_flops FLOPs, achieved GFLOP/s */
    double large_flops, large_gflops;
    double stream_gbps; /* read + write bandwidth of a large copy-scale loop */
};

/* Measure on the calling thread (about 0.1 s). Fails when the backend has no BLAS. */
int dp_exec_probe_device(struct dp_device_probe *out, struct dp_err *err);

#endif
