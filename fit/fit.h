/*
 * fit: the cost model's hardware constants fitted to measurements, and the
 * measured profile (`dplan_calibration` JSON) that `dplan calibrate` will
 * write and `--calibration` will read.
 *
 * Three fits, each with its quality (R^2, relative residuals, standard
 * errors of the parameters): the GEMM efficiency curve (GSL nonlinear least
 * squares), alpha-beta of a collective over one link class (GSL weighted
 * linear least squares) and streaming memory bandwidth (gsl_fit_wlinear).
 * Plus an nccl-tests style formatter for measured collectives.
 *
 * Depends on core and GSL only. It measures nothing and prints nothing:
 * samples in, parameters out; the profile loader and saver are the only
 * I/O, through core's JSON readers. Errors are one line in struct dp_err.
 */
#ifndef DPLAN_FIT_H
#define DPLAN_FIT_H

#include "core/core.h"

struct cJSON;

/*
 * How well a fit explains its samples. Residuals are relative, model /
 * measured - 1, because measured times span decades and their noise scales
 * with them; every fit minimises the sum of their squares (log ratios for
 * the GEMM curve).
 */
struct dp_fit_quality {
    int n;          /* samples */
    int params;     /* fitted parameters */
    double r2;      /* 1 - SS_res / SS_tot of the fitted quantity (see each fit); 1 if both 0 */
    double rms_rel; /* root mean square of the relative residuals */
    double max_rel; /* largest |relative residual| */
};

/* ------------------------------------------------------------------ GEMM efficiency curve */

/* One timed GEMM: its FLOPs (2 m n k), the seconds it took, the dense peak it is
 * measured against (FLOP/s). */
struct dp_gemm_sample {
    double flops, seconds, peak_flops_per_s;
};

struct dp_gemm_fit {
    struct dp_gemm_curve curve; /* eff(x) = eff_max x / (x + half_flops) */
    double eff_max_se;
    double half_flops_se; /* by the delta method from log10_half_se */
    double log10_half_se; /* half_flops is fitted as log10(half_flops) */
    int iterations;
    struct dp_fit_quality q; /* r2 of log(efficiency) */
};
/*
 * Fit the curve to n samples: least squares on log(predicted / measured
 * time), predicted = flops (x + half_flops) / (x peak eff_max), GSL's
 * trust-region solver (multifit_nlinear) from the weighted linear fit of
 * t peak = x / eff_max + half_flops / eff_max. `resid` (n entries, may be
 * NULL) receives each sample's relative residual.
 * DP_EINVAL with one line when: n < 3 (two parameters and one degree of
 * freedom for their errors), a sample has a non-positive or non-finite
 * field, a sample runs faster than its peak, all samples have the same
 * size; DP_ERUNTIME when the solver does not converge.
 */
int dp_fit_gemm(const struct dp_gemm_sample *s, int n, struct dp_gemm_fit *out, double *resid,
                struct dp_err *err);

/* ------------------------------------------------------------------ collectives */

/* The collectives nccl-tests measures, by the names of its binaries (all_reduce_perf...). */
enum dp_nccl_coll {
    DP_NCCL_ALL_REDUCE = 0,
    DP_NCCL_ALL_GATHER,
    DP_NCCL_REDUCE_SCATTER,
    DP_NCCL_ALLTOALL,
    DP_NCCL_SENDRECV,
    DP_NCCL_BROADCAST,
    DP_NCCL_REDUCE,
    DP_NCCL_COLLS
};
/* "all_reduce", "all_gather", "reduce_scatter", "alltoall", "sendrecv", "broadcast", "reduce". */
const char *dp_nccl_coll_name(enum dp_nccl_coll k);
/* Index of a name, or -1. */
int dp_nccl_coll_parse(const char *name);
/*
 * nccl-tests' bus bandwidth factor, busbw = algbw x factor (doc/PERFORMANCE.md,
 * "Summary"): all-reduce 2(n-1)/n; reduce-scatter, all-gather, all-to-all
 * (n-1)/n; broadcast, reduce and send/recv 1. n >= 1.
 */
double dp_nccl_busbw_factor(enum dp_nccl_coll k, int ranks);
/*
 * Latency steps of NCCL's ring algorithm: all-reduce 2(n-1) (reduce-scatter
 * then all-gather), all-gather, reduce-scatter, all-to-all and the pipelined
 * ring of broadcast and reduce n-1, send/recv 1.
 */
int dp_nccl_ring_steps(enum dp_nccl_coll k, int ranks);

/* One timed collective: nccl-tests' size (the whole buffer: for all-gather and
 * reduce-scatter count x ranks elements), the group size, the seconds. */
struct dp_coll_sample {
    double bytes;
    int ranks;
    double seconds;
};

struct dp_alpha_beta_fit {
    double alpha_s;   /* per ring step */
    double busbw_Bps; /* bytes/s, nccl-tests' bus bandwidth */
    double alpha_se_s, busbw_se_Bps;
    struct dp_fit_quality q; /* r2 of the times, weighted by 1 / time^2 */
};
/*
 * Fit time = alpha x steps + bytes x factor / busbw (steps and factor of the
 * ring, above) to samples of collective k over one link class: linear least
 * squares in (alpha, 1 / busbw) weighted by 1 / time^2 (gsl_multifit_wlinear;
 * the model's times after a first pass on the measured ones, reweighted three times);
 * standard errors from the covariance scaled by the residual variance.
 * alpha may come out slightly negative when the latency is below the noise
 * (its standard error says so). DP_EINVAL with one line when: n < 3, a field
 * is non-positive or non-finite, ranks < 2, the samples cannot separate
 * alpha from bandwidth (all of the same size and group), or the fitted
 * bandwidth is not positive.
 */
int dp_fit_alpha_beta(enum dp_nccl_coll k, const struct dp_coll_sample *s, int n,
                      struct dp_alpha_beta_fit *out, double *resid, struct dp_err *err);
/* Repeats of one measurement (launches of the same sweep): each sample of s that `other`
 * timed too (the same size and group) keeps the faster time, noise (or a launch's slow
 * mode) only adding time; a non-positive or non-finite time in `other` is ignored. The
 * number of samples made faster. */
int dp_coll_keep_faster(struct dp_coll_sample *s, int n, const struct dp_coll_sample *other, int m);

/* ------------------------------------------------------------------ memory bandwidth */

/* One timed streaming kernel: bytes read + written, seconds. */
struct dp_stream_sample {
    double bytes, seconds;
};
struct dp_membw_fit {
    double bw_Bps;     /* bytes/s */
    double overhead_s; /* the fixed cost of a pass (launch, page walk) */
    double bw_se_Bps, overhead_se_s;
    struct dp_fit_quality q; /* r2 of the times, weighted by 1 / time^2 */
};
/*
 * Fit time = overhead + bytes / bw (gsl_fit_wlinear, weights 1 / time^2, reweighted
 * by the model's times as dp_fit_alpha_beta does).
 * DP_EINVAL with one line when n < 3, a field is non-positive or non-finite,
 * all samples have the same size, or the fitted bandwidth is not positive.
 */
int dp_fit_mem_bw(const struct dp_stream_sample *s, int n, struct dp_membw_fit *out, double *resid,
                  struct dp_err *err);

/* ------------------------------------------------------------------ nccl-tests output */

/*
 * The measured collectives as nccl-tests prints them (one placement):
 *   #       size         count      type   redop    root     time   algbw   busbw
 *   #        (B)    (elements)                               (us)  (GB/s)  (GB/s)
 * dp_nccl_header writes those two lines, dp_nccl_row one line per size, each
 * ending in '\n', into buf (truncated to cap). algbw = bytes / time (1e9 B/s),
 * busbw = algbw x dp_nccl_busbw_factor; redop "sum" for reductions, else
 * "none"; root 0 for broadcast and reduce, else -1.
 */
void dp_nccl_header(char *buf, size_t cap);
void dp_nccl_row(enum dp_nccl_coll k, double bytes, int elem_bytes, const char *type, int ranks,
                 double seconds, char *buf, size_t cap);

/* ------------------------------------------------------------------ the measured profile */

/*
 * A calibration profile (schema in README, "The measured profile"): what was
 * measured on which machine, when, and the fits. Version 1; readers refuse
 * other versions and unknown fields.
 */
#define DP_CALIBRATION_VERSION 1
#define DP_CAL_MAX_COLL        64
#define DP_CAL_MAX_POINTS      32

struct dp_cal_gemm {
    enum dp_precision dtype;
    double peak_tflops; /* the dense peak the efficiencies are relative to */
    struct dp_gemm_curve curve;
    double eff_max_se, half_flops_se;
    struct dp_fit_quality q;
};
struct dp_cal_coll {
    enum dp_nccl_coll coll;
    char link[64];            /* link class: an interconnect or network profile name, "intra",
                                 "inter", "shm"... */
    int ranks_min, ranks_max; /* group sizes measured */
    double alpha_us, busbw_gbps, alpha_se_us, busbw_se_gbps;
    struct dp_fit_quality q;
    /* The measured times the fit is over (ranks_min ranks, bytes ascending, nccl-tests'
     * sizes), kept because one alpha-beta line does not follow a shared-memory MPI: its
     * eager limit, then the caches, then DRAM give three regimes (docs/accuracy.md, "The
     * loop"); the CPU step-time prediction reads a message's cost off them. 0: none. */
    int npoints;
    double point_bytes[DP_CAL_MAX_POINTS], point_us[DP_CAL_MAX_POINTS];
};
struct dp_cal_membw {
    double bw_gbps, overhead_us, bw_se_gbps, overhead_se_us;
    struct dp_fit_quality q;
};
/*
 * The CPU backend's per-call costs on this machine (what executor/probe.c measures),
 * at one thread split: `threads` compute threads per rank while `concurrent` threads
 * compute on the node. The attention costs are of one causal head of seq_len x
 * head_dim (they scale with seq_len^2 head_dim); the activation and norm costs are
 * of the ffn and norm kinds named. The CPU step-time prediction prices each call the
 * executor makes with them (executor/predict.c).
 */
#define DP_CAL_MAX_CPU 8
struct dp_cal_cpu {
    int threads, concurrent;
    int64_t seq_len;
    int head_dim;
    enum dp_ffn_kind ffn;
    enum dp_norm_kind norm;
    double gemm_call_us, gemm_gflops, conc_eff, fork_us;
    double bw_gbps[3];         /* per thread: working set in L2, in the L3 share, beyond */
    double l2_bytes, l3_bytes; /* per thread: where those levels end */
    double attn_fwd_us, attn_bwd_us, attn_probs_us;
    double act_fwd_ns, act_bwd_ns, norm_fwd_ns, norm_bwd_ns, ce_ns, adamw_ns;
    /* Optional (0 when absent: the hot probe of older profiles): the norms' row width, the
     * bytes swept through the caches before each kernel repetition, and the streaming
     * bandwidth of a small pass right after such a sweep (executor/backend/probe.h). */
    int hidden;
    double sweep_bytes, swept_gbps;
};

/*
 * Bandwidth by reuse distance, OpenBLAS's SGEMM and the CPU kernels' cold factors
 * (executor.h struct dp_exec_reuse, where the quantities are described), fitted by
 * dp_fit_reuse: `measured` holds [bytes, read GB/s, write GB/s] triples, bytes ascending;
 * SGEMM hot t = call + 2 m n k / gflops + ab_ns (m + n) k + c_ns m n with its fit's
 * quality; each cold factor is a kernel's extra time for operands not in cache over what
 * their bytes cost at those rates (>= 0); SGEMM's the median of its products' with the
 * spread of theirs around it.
 */
#define DP_CAL_REUSE_POINTS 16
#define DP_CAL_GEMM_SHAPES  24
struct dp_cal_reuse {
    int n;
    double bytes[DP_CAL_REUSE_POINTS], read_gbps[DP_CAL_REUSE_POINTS],
        write_gbps[DP_CAL_REUSE_POINTS];
    double gemm_call_us, gemm_gflops, gemm_ab_ns, gemm_c_ns;
    struct dp_fit_quality gemm_hot_q;
    double gemm_cold; /* SGEMM's cold factor, the median over the products timed cold */
    struct dp_fit_quality gemm_cold_q;
    double attn_fwd, attn_bwd, attn_probs, act_fwd, act_bwd, norm_fwd, norm_bwd, ce, adamw, sumsq;
    double sumsq_ns; /* the reductions (sum, sumsq) hot, per element */
};

/* What the reuse probe measures (executor.h struct dp_exec_reuse_samples, the same
 * fields). */
struct dp_reuse_kernel_sample {
    double hot_s, far_s, rd_bytes, wr_bytes;
};
struct dp_sgemm_sample {
    bool ta, tb;
    int m, n, k;
    double hot_s, cold_s; /* cold_s 0: not timed cold */
};
struct dp_reuse_samples {
    int n;
    double bytes[DP_CAL_REUSE_POINTS], read_gbps[DP_CAL_REUSE_POINTS],
        write_gbps[DP_CAL_REUSE_POINTS];
    double far_bytes; /* the curve point the cold times were taken at (0: the last) */
    int ngemm;
    struct dp_sgemm_sample gemm[DP_CAL_GEMM_SHAPES];
    struct dp_reuse_kernel_sample attn_fwd, attn_bwd, attn_probs, act_fwd, act_bwd, norm_fwd,
        norm_bwd, ce, adamw, sumsq;
};
/*
 * Fit them: the curve is kept as measured; SGEMM hot by GSL weighted linear least squares
 * on relative error over the call, the multiply-adds, the packed elements and C's elements
 * (a coefficient that comes out negative, noise on a term too small to see, is dropped and
 * the rest refitted); SGEMM cold, the median over the products timed cold of their extra
 * time over what A and B read and C writes extra between the curve's first point and the
 * one they were timed at (a two-factor fit of A + B against C was ill-conditioned: their
 * bytes rise together, and 6 products moved it by 3x); each kernel's factor its
 * extra time over its bytes' (0 when it came out no slower). `resid_hot` (ngemm entries, may
 * be NULL) gets each product's relative residual hot.
 * DP_EINVAL with one line: fewer than 2 curve points or a non-positive rate, fewer than 5
 * products (4 parameters and one degree of freedom), a non-positive time.
 */
int dp_fit_reuse(const struct dp_reuse_samples *s, struct dp_cal_reuse *out, double *resid_hot,
                 struct dp_err *err);

/*
 * Ranks in lock step (preflight.h dp_pf_mpi_bench_lockstep): with `ranks` ranks doing the
 * same work, each synchronisation waits on average wait_s for the slowest after seg_s of
 * work (`measured`: [segment s, wait s] pairs, what the executor's prediction reads);
 * jitter summarises them in the sqrt law wait = e_n jitter sqrt(segment) (e_n =
 * dp_max_normal(ranks)).
 */
#define DP_CAL_LOCKSTEP_POINTS 8
struct dp_cal_lockstep {
    int ranks, n;
    double jitter;
    double seg_s[DP_CAL_LOCKSTEP_POINTS], wait_s[DP_CAL_LOCKSTEP_POINTS];
};

struct dp_cal_machine {
    char hostname[64];
    char backend[16]; /* "cpu" or "cuda" */
    char cpu[128];    /* model name */
    char gpu[64];     /* "" on a CPU machine */
    int nodes, ranks, cores;
    bool has_cluster; /* the machine as a cluster object (dplan_cluster schema) */
    struct dp_cluster cluster;
};
struct dp_calibration {
    int version;
    char created_by[64];  /* "dplan 0.1.0 calibrate" */
    char measured_at[32]; /* UTC, "2026-03-01T12:00:00Z" */
    struct dp_cal_machine machine;
    int ngemm; /* one per dtype at most */
    struct dp_cal_gemm gemm[DP_PRECISIONS];
    int ncoll; /* one per (collective, link) at most */
    struct dp_cal_coll coll[DP_CAL_MAX_COLL];
    bool has_membw;
    struct dp_cal_membw membw;
    int ncpu; /* one per (threads, concurrent) at most */
    struct dp_cal_cpu cpu[DP_CAL_MAX_CPU];
    bool has_reuse; /* the cpu entries' kernel times are then hot (sweep_bytes 0) */
    struct dp_cal_reuse reuse;
    bool has_lockstep;
    struct dp_cal_lockstep lockstep;
};
/* The fit of collective k over `link` in c, or NULL. */
const struct dp_cal_coll *dp_calibration_coll(const struct dp_calibration *c, enum dp_nccl_coll k,
                                              const char *link);
/* The CPU entry for `threads` threads per rank with `concurrent` computing on the node:
 * the exact one, else the nearest in log(concurrent) then log(threads); NULL if none. */
const struct dp_cal_cpu *dp_calibration_cpu(const struct dp_calibration *c, int threads,
                                            int concurrent);

/* Fill *out from a parsed object; errors name the file and JSON path
 * ("profile.json: gemm[1].dtype: expected one of ..., got ..."). */
int dp_calibration_from_json(struct dp_jr *jr, const struct cJSON *obj, struct dp_calibration *out);
int dp_calibration_load(const char *file, struct dp_calibration *out, struct dp_err *err);
/* The profile as JSON (caller owns it); dp_calibration_from_json reads it back equal. */
struct cJSON *dp_calibration_to_json(const struct dp_calibration *c);
int dp_calibration_save(const char *file, const struct dp_calibration *c, struct dp_err *err);

#endif
