/*
 * validate: the step-time model against measured training runs (core's
 * dp_run, read from tests/validation/ or the user's own files), and fitting a
 * GPU profile's GEMM efficiency curves to them (GSL nonlinear least squares).
 * Depends on costmodel and core; never prints (cli/cmd_validate.c and
 * cmd_calibrate.c format the results).
 */
#ifndef DPLAN_VALIDATE_H
#define DPLAN_VALIDATE_H

#include "core/core.h"
#include "costmodel/costmodel.h"

/* The measured iteration time of a run, converting reported TFLOP/s back to time on
 * the source's own FLOP convention. */
double dp_run_measured_s(const struct dp_run *r);

struct dp_run_result {
    double measured_s, predicted_s;
    double error; /* predicted / measured - 1 */
    struct dp_step_cost cost;
    bool fits;          /* the memory model lets the run's layout fit (it ran) */
    int64_t peak_bytes; /* its predicted peak (device total) */
};
int dp_run_predict(const struct dp_run *r, struct dp_run_result *out, struct dp_err *err);

/* Mean and worst absolute relative error of a set of scored runs. */
struct dp_val_stats {
    int n;
    double mean, worst;
    const char *worst_id; /* borrowed from the runs; "" when n == 0 */
};
/*
 * Statistics over the scored runs (dp_run_scored) that pass the filters: `held`
 * -1 = all, 0 = the fitted (training) subset, 1 = the held-out subset; `source`,
 * `gpu` and `framework` NULL = any, else the run's source_key / GPU profile name /
 * framework profile (dp_framework_name) must match.
 */
struct dp_val_stats dp_val_stats(const struct dp_run *runs, const struct dp_run_result *res, int n,
                                 int held, const char *source, const char *gpu,
                                 const char *framework);

/*
 * dp_val_stats over the scored runs whose predicted peak is (inside true) or is not (false)
 * above the planner's fitting bound, dp_mem_within_margin(usable, margin): the runs `suggest`
 * would not have counted as fitting, the model's out-of-memory verdicts among them.
 */
struct dp_val_stats dp_val_stats_margin(const struct dp_run *runs, const struct dp_run_result *res,
                                        int n, int held, double margin, bool inside);

/*
 * One choice against another: pairs of scored runs that differ in one thing.
 * DP_PAIR_GPU: the same model architecture, layout and GPU count on two GPU profiles (one
 * source's table measured on two machines); `a` is the run whose GPU name sorts first.
 * DP_PAIR_LAYOUT: one source's runs of the same model on the same GPUs (profile and count)
 * with the same batch (gbs and sequence length) under two different layouts; `a` comes first in
 * the runs. The ratios are time of a over time of b, measured and predicted. *out is
 * malloc'ed (free it); none is fine.
 */
enum dp_pair_kind { DP_PAIR_GPU, DP_PAIR_LAYOUT };
struct dp_run_pair {
    enum dp_pair_kind kind;
    int a, b;                   /* indices into the runs */
    double measured, predicted; /* t_a / t_b */
    double error;               /* predicted / measured - 1 */
};
int dp_run_pairs(const struct dp_run *runs, const struct dp_run_result *res, int n,
                 enum dp_pair_kind kind, struct dp_run_pair **out, int *npairs, struct dp_err *err);
/* Which pairs a statistic takes: NULL fields match any. */
struct dp_pair_filter {
    const char *gpu_a, *gpu_b; /* the first and second run's GPU profiles */
    const char *source;        /* the runs' source (layout pairs) */
    bool held_out;             /* only the pairs whose two runs are both held out */
};
/* Mean and worst |error| of the filtered pairs (worst_id names the pair's second run), and,
 * of those measured more than DP_PAIR_NOISE apart, how many the prediction orders right. */
struct dp_pair_stats {
    struct dp_val_stats err;
    int decided, right;
};
struct dp_pair_stats dp_pair_stats(const struct dp_run *runs, const struct dp_run_pair *pairs,
                                   int n, const struct dp_pair_filter *f);
/* The spread of a published step time measured again: Megatron-Bridge's containers 25.09 to
 * 26.06 on one layout spread by 2-3% on Llama 3 8B and 70B (5% on 405B). A pair measured
 * closer than this has no faster side to rank. */
#define DP_PAIR_NOISE 0.03
/* The measured times differ by more than DP_PAIR_NOISE. */
bool dp_pair_decided(const struct dp_run_pair *p);
/* Decided, and the prediction puts the other run first. */
bool dp_pair_misranked(const struct dp_run_pair *p);

/*
 * Memory: the predicted peak of a run with a measured one, read as the run measured it:
 * the quantity (allocated, reserved, device total) on the stage it was read on (the
 * fullest, or the last for Megatron's rank world_size - 1).
 */
struct dp_mem_result {
    double measured_gib, predicted_gib;
    double error; /* predicted / measured - 1 */
    int stage;
    double allocated_gib, states_gib; /* of that stage: for fitting the allocator slack */
};
int dp_run_predict_memory(const struct dp_run *r, struct dp_mem_result *out, struct dp_err *err);
/* Statistics over the memory-scored runs (dp_run_mem_scored); `framework` NULL = any. */
struct dp_val_stats dp_mem_stats(const struct dp_run *runs, const struct dp_mem_result *res, int n,
                                 int held, const char *source, const char *framework);
/*
 * The caching allocator's slack (framework.c dp_fw_alloc_slack) that best fits the
 * fitted (not held-out) runs measured as reserved: reserved = allocated + s (allocated -
 * states), least squares on log(predicted / measured), s in [0, 1]. *nruns gets the runs
 * used; returns -1 when there is none.
 */
double dp_fit_alloc_slack(const struct dp_run *runs, const struct dp_mem_result *res, int n,
                          int *nruns);

/*
 * Fit a GPU's GEMM efficiency curves so that the step-time model matches the
 * measured runs on that GPU that are scored and not held out: the bf16 curve's
 * eff_max from the runs whose linear GEMMs run in bf16/fp16, the FP8 curve's
 * from those that run FP8 GEMMs (both at once: FP8 runs keep their attention in
 * bf16), and each half_flops too with fit_half. Least squares on
 * log(predicted / measured), GSL's trust-region solver. The runs' clusters are
 * updated in place with the fitted curves, the held-out runs' too: their mean |error|
 * before and after is reported, not fitted.
 *
 * attn_mask (bit k for enum dp_attn k; 0: none) also fits those fused attention
 * kernels' speed relative to a GEMM (the profile's "attention" figures), each on the
 * fitted runs whose attention runs that kernel on this GPU, jointly with the curves: the
 * curves set the level of every run, a kernel's figure how its runs' time grows with
 * the sequence length. DP_EINVAL when no fitted run uses a kernel asked for.
 */
enum dp_fit_curves { DP_FIT_ALL = 0, DP_FIT_BF16 = 1, DP_FIT_FP8 = 2 };
struct dp_fit {
    int nruns;     /* runs fitted on (both curves) */
    int nruns_fp8; /* of which FP8 */
    bool fit_bf16, fit_fp8;
    struct dp_gemm_curve bf16, fp8;         /* the fitted (or kept) curves */
    bool fit_mx;                            /* MXFP8's fixed cost per GEMM fitted (runs of
                                               both FP8 kinds among the fitted) */
    int nruns_mx;                           /* fitted runs with MXFP8 GEMMs */
    double mxfp8_us, mxfp8_prior;           /* fitted (or kept) and the profile's, us */
    double mean_abs_before, mean_abs_after; /* over the fitted runs */
    int nheld;                              /* held-out runs of this GPU (and curves) */
    double held_before, held_after;         /* their mean |error|, which the fit never reads */
    unsigned attn_mask;                     /* the kernels fitted */
    double attn_rel[DP_ATTNS];              /* their fitted figures (else the profile's) */
    double attn_prior[DP_ATTNS];            /* the profile's figures the fit started from */
    int attn_runs[DP_ATTNS];                /* fitted runs using each kernel */
    int iterations;
    bool stalled; /* stopped at the iteration limit or without progress (the start is at or
                     near the optimum, within the model's non-smooth terms): the best
                     position reached is reported */
};
int dp_calibrate_gemm(struct dp_run *runs, int n, const char *gpu, enum dp_fit_curves which,
                      bool fit_half, unsigned attn_mask, struct dp_fit *out, struct dp_err *err);
/* The fused attention kernel a run's layout uses on its GPU (DP_ATTN_DEFAULT: none, the
 * attention is not fused). */
enum dp_attn dp_run_attn(const struct dp_run *r);

#endif
