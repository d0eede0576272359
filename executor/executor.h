/*
 * executor: runs a training plan for real. A decoder-only transformer
 * (dp_model) is trained under a dp_layout (DP or ZeRO-1, Megatron TP with
 * optional SP, PP with the 1F1B schedule, micro-batching, recompute) on a
 * backend (backend.h; this issue ships the CPU backend: MPI + OpenBLAS +
 * OpenMP). It uses only core/; it does not plan, predict, print or exit:
 * the CLI (cli/cmd_run.c) launches the ranks, prints the logs and turns
 * errors into exit codes.
 *
 * Ranks: one process per rank. With cp = 1 (the only value supported here)
 * rank = tp_rank + tp * (dp_rank + dp * pp_rank), Megatron's default order
 * tp-cp-ep-dp-pp with TP fastest (parallel_state.initialize_model_parallel).
 *
 * Memory: every buffer comes from one of the accounted pools below; the
 * table of buffers is in executor/README.md ("Buffer table") and is what
 * costmodel/memory_cpu.c predicts. Measured peaks are per rank and pool.
 */
#ifndef DPLAN_EXECUTOR_H
#define DPLAN_EXECUTOR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/core.h"

/* ------------------------------------------------------------------ pools */

enum dp_pool {
    DP_POOL_PARAMS = 0, /* the flat parameter buffer */
    DP_POOL_GRADS,      /* the flat gradient buffer (same length) */
    DP_POOL_OPTIM,      /* AdamW m and v (the local shard under ZeRO-1) */
    DP_POOL_ACT_SLOTS,  /* activations kept per micro-batch in flight */
    DP_POOL_ACT_HEAD,   /* final norm, logits and loss buffers (last stage) */
    DP_POOL_ACT_WORK,   /* forward/backward scratch, recompute working set, RoPE tables */
    DP_POOL_COMM,       /* pipeline send buffer */
    DP_NPOOLS
};
/* "params", "grads", "optimizer", "act_slots", "act_head", "act_work", "comm". */
const char *dp_pool_name(enum dp_pool p);

/* ------------------------------------------------------------------ ranks */

/*
 * Where this process's rank came from, in the order checked: OpenMPI
 * (OMPI_COMM_WORLD_*), MPICH/Hydra (PMI_RANK/PMI_SIZE), Slurm srun
 * (SLURM_PROCID/SLURM_NTASKS with a step id), torchrun (RANK/WORLD_SIZE/
 * LOCAL_RANK). `launched` is false when none is present (started by hand).
 */
struct dp_rank_env {
    bool launched;
    char source[16]; /* "openmpi", "pmi", "slurm", "torchrun", "none" */
    int rank, world, local_rank, local_world;
};
void dp_exec_detect_env(struct dp_rank_env *out);

/* ------------------------------------------------------------------ data */

enum dp_data_format { DP_DATA_AUTO = 0, DP_DATA_LLMC = 1, DP_DATA_RAW = 2 };

/* llm.c token shard: 256 int32 header {20240520, 1, ntok}, then ntok uint16 tokens. */
#define DP_LLMC_MAGIC   20240520
#define DP_LLMC_VERSION 1
#define DP_LLMC_HEADER  1024

/* A token stream (owned). */
struct dp_tokens {
    uint16_t *tok;
    int64_t n;
    char source[256]; /* file name or "default corpus (...)" for messages */
    void *map_base;   /* memory-mapped file (0 length: tok is malloc'ed) */
    size_t map_len;
};
/*
 * Read a token file: llm.c .bin (validates magic, version, size = 1024 + 2 ntok) or a
 * raw little-endian uint16 array (nanoGPT's train.bin). AUTO takes llm.c when the
 * first int32 is the magic, raw otherwise. Every token must be < vocab.
 */
int dp_tokens_load(const char *file, enum dp_data_format fmt, int64_t vocab, struct dp_tokens *out,
                   struct dp_err *err);
/* The default corpus: the regular files of `dir` (NULL = /usr/share/common-licenses)
 * in name order, concatenated, byte-tokenised (vocab 256). */
int dp_tokens_default(const char *dir, int64_t vocab, struct dp_tokens *out, struct dp_err *err);
void dp_tokens_release(struct dp_tokens *t);
/* Training windows of seq_len tokens in `t`, each with its next-token targets:
 * (n - 1) / seq_len (schedule.c reads window w from token w seq_len). */
int64_t dp_tokens_windows(const struct dp_tokens *t, int64_t seq_len);
/*
 * The data against the layout: at least seq_len + 1 tokens, and no more sequences in one
 * step (gbs) than the data has windows, so that a step never holds a sequence twice.
 * Across steps the windows wrap around (epochs): dp_tokens_epochs says how often the
 * data is read. Errors name the knob and the numbers.
 */
int dp_tokens_check(const struct dp_tokens *t, const struct dp_layout *l, struct dp_err *err);
/* How many times `steps` steps of l->gbs sequences read the data (1.0 = once). */
double dp_tokens_epochs(const struct dp_tokens *t, const struct dp_layout *l, int steps);
/* Byte-level tokeniser: the bytes of `files` concatenated, written to `out` in llm.c
 * (or raw) format; *ntok gets the token count. */
int dp_data_prepare(const char *const *files, int nfiles, const char *out, enum dp_data_format fmt,
                    int64_t *ntok, struct dp_err *err);

/* ------------------------------------------------------------------ outputs */

/* An input file and how the user named it (NULL: not said), for messages. */
struct dp_io {
    const char *path;
    const char *what; /* "--data", "the plan", ... */
};
/*
 * Whether the output `out` (a file or a directory; it need not exist yet) may be
 * written: refused (DP_EINVAL, err naming both) when it is the same file as one of the
 * `nin` inputs (same st_dev and st_ino, so also through symbolic and hard links), or
 * when it is or lies inside a checkpoint directory (one holding manifest.json or named
 * step_%08d[.tmp|.superseded|.trash], by the path as given or with links resolved).
 * `what` names the option for the message ("-o", "--out"). Inputs that do not exist are
 * skipped. Every writer of the executor also writes to a temporary name and renames.
 */
int dp_output_check(const char *out, const char *what, const struct dp_io *in, int nin,
                    struct dp_err *err);

/* ------------------------------------------------------------------ run */

struct dp_ckpt_opts;

/* One step as every rank sees it (the loss and norm are global). */
struct dp_step_info {
    int rank, world, stage, tp_rank, dp_rank;
    int step, steps; /* step counts from 1 */
    double loss, lr, grad_norm;
    double step_time_s, tokens_per_s, samples_per_s;
    int64_t mem_used_bytes;      /* accounted pools in use now (this rank) */
    int64_t mem_peak_bytes;      /* their peak so far */
    int64_t mem_predicted_bytes; /* the CPU memory model's total for this rank (0 = none) */
    int64_t pool_peak_bytes[DP_NPOOLS];
    int64_t rss_bytes; /* resident set size now */
};

/* Per-rank results, gathered on rank 0. */
struct dp_rank_summary {
    int rank, stage, tp_rank, dp_rank;
    double step_time_mean_s;   /* steps 2.. (the first warms caches and MPI) */
    double step_time_median_s; /* the same steps */
    int64_t pool_peak_bytes[DP_NPOOLS];
    int64_t pool_predicted_bytes[DP_NPOOLS];
    int64_t rss_peak_bytes; /* VmHWM at the end of the run (weights written, MPI probed) */
    /*
     * The resident check (tests/executor/compare_runs.c): VmRSS just before the executor
     * allocates its buffers (after MPI, the OpenMP threads and their OpenBLAS buffers
     * started), VmHWM after the last step, and what the accounted buffers occupy with the
     * allocator's rounding. rss_peak_since_base: VmHWM was reset at the baseline
     * (/proc/self/clear_refs), so the train peak is the peak since then.
     */
    int64_t rss_base_bytes, rss_train_peak_bytes, reserved_bytes;
    bool rss_peak_since_base;
};

struct dp_exec_result {
    int rank, world;
    int steps_done;
    double first_loss, final_loss;
    int64_t tokens_per_step;
    int ckpt_tried, ckpt_saved; /* checkpoints this run attempted and published (all ranks) */
    /* world > 1: medians of a 1-element and a 1 MiB all-reduce over every rank after the
     * last step (MPI's latency and bandwidth here, for the step-time prediction); else 0 */
    double allreduce_small_s, allreduce_1mib_s;
    struct dp_rank_summary *ranks; /* world entries on rank 0, else NULL; freed by release */
};
void dp_exec_result_release(struct dp_exec_result *r);

struct dp_exec_opts {
    int steps;
    uint64_t seed;
    double lr;           /* peak learning rate */
    int warmup_steps;    /* linear warm-up, then cosine decay to lr * min_lr_frac */
    double min_lr_frac;  /* 1 = constant */
    double weight_decay; /* AdamW, 2-D weights only */
    double beta1, beta2, eps;
    double grad_clip;             /* global-norm clipping; 0 = off */
    const struct dp_tokens *data; /* borrowed */
    const char *out_dir;          /* model.safetensors is written here; NULL = not written */
    int threads;                  /* compute threads per rank; 0 = automatic */
    /* Predicted bytes per stage and pool, [pp][DP_NPOOLS], from the CPU memory
     * model (cli computes it; the executor only reports it). NULL = none. */
    const int64_t *predicted;
    /* Called on every rank after each step, and before each step (may be NULL). */
    void (*on_step)(const struct dp_step_info *info, void *ctx);
    void (*before_step)(int step, int rank, void *ctx);
    void *ctx;
    /* Checkpoints and resume (executor/ckpt.h); NULL = neither. */
    const struct dp_ckpt_opts *ckpt;
};
void dp_exec_opts_default(struct dp_exec_opts *o);

/*
 * Check that this executor can run `l` for `m` on `world` ranks (world <= 0: not
 * checked): cp = 1, ep = 1, vpp = 1, zero <= 1, Adam, a dense model, RoPE or learned
 * positions, two norms per layer, seq_len <= max_position. Errors name the field.
 */
int dp_exec_check(const struct dp_model *m, const struct dp_layout *l, int world,
                  struct dp_err *err);

/*
 * Train for opts->steps steps on this rank (MPI must span the whole world; the CPU
 * backend initialises it). The model computes in fp32 whatever l->precision says.
 * On failure err says what and where; `collective` (may be NULL) is set when every rank
 * fails the same way (e.g. a NaN loss), so that only rank 0 needs to report it.
 */
int dp_exec_run(const struct dp_model *m, const struct dp_layout *l,
                const struct dp_exec_opts *opts, struct dp_exec_result *res, bool *collective,
                struct dp_err *err);

/* Progress heartbeat for a watchdog thread: a counter bumped after every completed
 * collective and micro-batch, and what the rank is doing now (static string). */
uint64_t dp_exec_heartbeat(const char **what, int *step);

/*
 * OpenBLAS picks its kernels at load time from the CPU model; a release older than the
 * CPU falls back to generic SSE3 kernels ("Prescott"), several times slower. This returns
 * the core type to force with OPENBLAS_CORETYPE (the launcher sets it for the ranks) when
 * that happened and the CPU has AVX-512 ("SkylakeX") or AVX2+FMA ("Haswell"), else NULL
 * (also when OPENBLAS_CORETYPE is already set).
 */
const char *dp_exec_blas_hint(void);

/* Shut MPI down at process end (no-op if not started), or abort every rank. */
void dp_exec_finalize(void);
void dp_exec_abort(int code);

#endif
