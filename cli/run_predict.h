/*
 * The CPU executor's predicted step time (run_predict.c): this machine probed
 * (executor/probe.h) and MPI as the run measured it, composed over the calls
 * the executor makes in one step.
 */
#ifndef DPLAN_CLI_RUN_PREDICT_H
#define DPLAN_CLI_RUN_PREDICT_H

#include "core/core.h"

struct dp_calibration;

/* How the run ran, besides its model and layout. */
struct cli_cpu_run {
    int world;                /* ranks */
    int ranks_per_node;       /* ranks sharing this machine */
    int threads;              /* compute threads per rank */
    double allreduce_small_s; /* measured all-reduce of one double over the world (0: none) */
    double allreduce_1mib_s;  /* ... of 1 MiB */
    /* A `dplan calibrate --backend cpu` profile (NULL: probe now, collectives from the two
     * all-reduces above): its kernel costs at the nearest thread split and its fitted
     * alpha-beta per collective replace the probe and the run's measurement. */
    const struct dp_calibration *cal;
};

/* One step, split by kind (seconds, the slowest stage's share; they add up to step_s). */
struct cli_cpu_prediction {
    double step_s;
    double gemm_s;        /* OpenBLAS products */
    double attention_s;   /* the attention kernels */
    double elementwise_s; /* norms, activations, residuals, biases, embedding, cross-entropy */
    double fork_s;        /* OpenMP fork/join of the parallel regions (part of the above) */
    double comm_s;        /* TP, PP, DP and embedding collectives, the loss all-reduce */
    double optimizer_s;   /* zeroing, the gradient norm, AdamW */
    double bubble_s;      /* pipeline fill and drain */
    double timeshare_s;   /* more threads than cores: the wait for a core */
};

/* Predict one step of `l` for `m`. Fails only if the probe fails (never with a profile
 * that has CPU entries). */
int cli_run_predict_cpu(const struct dp_model *m, const struct dp_layout *l,
                        const struct cli_cpu_run *run, struct cli_cpu_prediction *out,
                        struct dp_err *err);

#endif
