/*
 * A quick measurement of this machine as the CPU backend uses it (probe.c):
 * OpenBLAS SGEMM's per-call cost and rate, alone and with the node's other
 * threads busy; the cost of an OpenMP parallel region; streaming bandwidth
 * at three working-set sizes (L2, the L3 share, DRAM); and the executor's own
 * attention, activation, norm, cross-entropy and AdamW kernels at a
 * cache-resident size. The step-time prediction prices the executor's calls
 * with them (executor/predict.c). Internal to the executor.
 */
#ifndef DPLAN_EXECUTOR_PROBE_H
#define DPLAN_EXECUTOR_PROBE_H

#include "core/core.h"
#include "executor/executor.h"

/* What a rank of this machine runs, for the probe to measure at. */
struct dp_probe_shape {
    int threads;     /* compute threads of one rank (>= 1) */
    int concurrent;  /* threads computing at once on this node, over all its ranks */
    int64_t seq_len; /* attention: one causal head of seq_len x head_dim */
    int head_dim;
    enum dp_ffn_kind ffn;
    enum dp_norm_kind norm;
    int hidden;          /* the norms' row width (0: rows of 1024) */
    int64_t sweep_bytes; /* bytes swept through the caches before each repetition (0: none) */
};

struct dp_device_probe {
    /* SGEMM on one thread: t = gemm_call_s + 2 m n k / (gemm_gflops 1e9 conc_eff). */
    double gemm_call_s; /* fixed cost of a call (from a 16 x 16 x 16 product) */
    double gemm_gflops; /* one thread alone, 1024 x 768 x 256 */
    double conc_eff;    /* per-thread rate while `concurrent` threads run SGEMMs, / gemm_gflops */
    double fork_s;      /* one OpenMP parallel region of `threads` threads: fork and join */
    /* Streaming y = a x + b y, bytes read and written per second per thread, while
     * `concurrent` threads stream: working set within L2, within the L3 share, beyond. */
    double bw_gbps[3];
    int64_t cache_bytes[2]; /* per thread: L2, and L3 / concurrent */
    /* A pass y = a x + b y over 2 x 256 KiB just after a sweep of sweep_bytes (0 without a
     * sweep): what an element-wise pass moves per second when its operands were last
     * touched a step's working set ago. */
    double swept_gbps;
    /* The executor's kernels on one thread (their compute cost), operands where a sweep of
     * sweep_bytes leaves them (cache-resident without one). */
    double attn_fwd_s, attn_bwd_s, attn_probs_s; /* one head (seq_len x head_dim) */
    double act_fwd_ns, act_bwd_ns;               /* per element of N x f */
    double norm_fwd_ns, norm_bwd_ns;             /* per element of N x h */
    double ce_ns;                                /* per logit: the three cross-entropy passes */
    double adamw_ns;                             /* per parameter */
    struct dp_exec_reuse reuse; /* n 0: none (the probe does not measure it; a calibration does) */
};

/* Measure (about 0.1-0.3 s; the calling thread and `concurrent` OpenMP threads).
 * Fails when the backend has no BLAS, or out of memory. */
int dp_exec_probe_device(const struct dp_probe_shape *shape, struct dp_device_probe *out,
                         struct dp_err *err);

/* Bandwidth by reuse distance, SGEMM and the kernels hot and cold (executor.h struct
 * dp_exec_reuse_samples) at the shape's model shapes, on the calling thread. */
int dp_exec_probe_reuse(const struct dp_probe_shape *shape, struct dp_exec_reuse_samples *out,
                        struct dp_err *err);

/* How many of `threads` threads the executor's GEMM C[m, n] = A[m, k] B[k, n] runs on
 * (kernels.c splits C by rows when it is large enough; else one thread). */
int dp_exec_gemm_threads(int m, int n, int k, int threads);

#endif
