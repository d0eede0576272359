/*
 * executor: runs a training plan for real. A decoder-only transformer
 * (dp_model) is trained under a dp_layout (DP or ZeRO-1, Megatron TP with
 * optional SP, PP with the 1F1B schedule, micro-batching, recompute) on a
 * backend (backend.h; this issue ships the CPU backend: MPI + OpenBLAS +
 * OpenMP). It uses only core/ and ckpt/ (the checkpoint format); it does not plan, predict, print
 * or exit: the CLI (cli/cmd_run.c) launches the ranks, prints the logs and turns errors into exit
 * codes.
 *
 * Ranks: one process per rank. With cp = 1 (the only value supported here)
 * rank = tp_rank + tp * (dp_rank + dp * pp_rank), Megatron's default order
 * tp-cp-ep-dp-pp with TP fastest (parallel_state.initialize_model_parallel).
 *
 * Memory: every buffer comes from one of the accounted pools below and is
 * sized by one table (memplan.c, executor/README.md "Buffer table"), which
 * is also the estimate (dp_exec_memory). Measured peaks are per rank and
 * pool.
 */
#ifndef DPLAN_EXECUTOR_H
#define DPLAN_EXECUTOR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ckpt/ckpt.h"
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

/* The attention core a run computes (`dplan run --attention`; executor/README.md
 * "Attention"): the backend's choice (its flash_default: flash on CUDA, math on the
 * CPU), the math attention keeping the T x T probabilities for backward, or flash
 * attention keeping only each row's log-sum-exp. Same function either way. */
enum dp_exec_attn { DP_EXEC_ATTN_AUTO = 0, DP_EXEC_ATTN_MATH, DP_EXEC_ATTN_FLASH };
/* "auto", "math", "flash"; parse: 0, or -1 for an unknown name. */
const char *dp_exec_attn_name(enum dp_exec_attn a);
int dp_exec_attn_parse(const char *s, enum dp_exec_attn *out);
/* Whether a run on backend `backend` (NULL: the default) with attention `a` runs flash
 * attention (with cp > 1 the ring attention runs instead, whatever this says). */
bool dp_exec_attn_flash(const char *backend, enum dp_exec_attn a);

/*
 * The bytes each rank of pipeline stage `stage` holds, pool by pool, for `m` under `l`:
 * the executor's buffer table (README.md "Buffer table"; memplan.c), the same that sizes
 * what a rank allocates, so a run's accounted peaks equal it (the activation slots: at
 * most). Not counted: MPI's and OpenBLAS's own buffers, the program, thread stacks.
 * l->precision bf16 / fp16 adds the working copy of the weights (a run stores in
 * opts.precision; `dplan run` keeps the two equal).
 */
int dp_exec_memory(const struct dp_model *m, const struct dp_layout *l, int stage,
                   int64_t out[DP_NPOOLS], struct dp_err *err);
/* The same for a run with the attention `attn` (dp_exec_memory: the math attention, the
 * CPU backend's default; flash keeps lse [B][a][T] instead of the probabilities). */
int dp_exec_memory_attn(const struct dp_model *m, const struct dp_layout *l, int stage,
                        enum dp_exec_attn attn, int64_t out[DP_NPOOLS], struct dp_err *err);
/* The order in which stage `stage` runs one step's micro-batches: "F0 F1 B0 F2 B1 B2"
 * (forward / backward of micro-batch m), with interleaving "F0.0 F1.0 F0.1 ..." (and the
 * stage's model chunk), from the executor's own pipeline code run on the pricing
 * backend (nothing is computed); " ..." when it does not fit in cap. */
int dp_exec_schedule(const struct dp_model *m, const struct dp_layout *l, int stage, char *out,
                     size_t cap, struct dp_err *err);

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

/* ------------------------------------------------------------------ run */

/*
 * Checkpoints: the executor saves every rank's state with an atomic commit and resumes
 * from the newest complete checkpoint under the same or another layout; the format is
 * ckpt/'s (ckpt.h). Events go to the caller's callback: the executor never prints.
 */
enum dp_ckpt_event_kind {
    DP_CKPT_SAVED = 0,   /* rank 0: a checkpoint was published */
    DP_CKPT_SAVE_FAILED, /* the save failed (on the failing rank, and on rank 0); training goes on
                          */
    DP_CKPT_SKIPPED,     /* resume: a checkpoint was damaged or incomplete; an older one is tried */
    DP_CKPT_RESUMED,     /* rank 0: training continues from this checkpoint */
    DP_CKPT_NOTE,        /* rank 0: something differs from the checkpoint but resume goes on */
};

struct dp_ckpt_event {
    enum dp_ckpt_event_kind kind;
    int rank;
    int step;             /* the checkpoint's step */
    const char *path;     /* its directory */
    const char *msg;      /* one line, for SAVE_FAILED, SKIPPED, NOTE */
    int64_t bytes;        /* SAVED: all files */
    double seconds;       /* SAVED: wall time of the save */
    const char *saved_at; /* SAVED, RESUMED: UTC ISO-8601 "2024-06-15T10:30:00Z" */
    bool local;           /* SAVE_FAILED: this rank's own write failed (else rank 0's verdict) */
};

/* TEST-ONLY faults (DPLAN_FAULT_INJECT, launch/launch.h). */
enum dp_ckpt_fault {
    DP_CKPT_FAULT_NONE = 0,
    DP_CKPT_FAULT_CRASH,  /* the rank kills itself (SIGKILL) halfway through its file */
    DP_CKPT_FAULT_ENOSPC, /* the rank's write fails with ENOSPC halfway through its file */
};

struct dp_ckpt_opts {
    const char *dir;   /* checkpoints are written here (created); NULL = none */
    int every;         /* save after every N-th step; 0 = not by step count */
    double interval_s; /* and when this much wall time passed since the last save; 0 = off */
    int keep;          /* complete checkpoints kept (older ones are deleted); 0 = all */
    /* Resume from the newest complete checkpoint under this directory (or from this
     * checkpoint directory itself); NULL = start from initialisation. */
    const char *resume;
    void (*on_event)(const struct dp_ckpt_event *ev, void *ctx); /* may be NULL */
    void *ctx;
    /* TEST-ONLY: fault `fault` on rank `fault_rank` while saving step `fault_step`. */
    enum dp_ckpt_fault fault;
    int fault_rank, fault_step;
};
void dp_ckpt_opts_default(struct dp_ckpt_opts *o);

/* One step as every rank sees it (the loss and norm are global). */
struct dp_step_info {
    int rank, world, stage, tp_rank, dp_rank;
    int step, steps; /* step counts from 1 */
    double loss, lr, grad_norm;
    /* fp16: the loss scale this step used (0 otherwise); skipped: its gradients held an
     * inf or nan on some rank, so no update was made (grad_norm is then not finite) */
    double loss_scale;
    bool skipped;
    double step_time_s, tokens_per_s, samples_per_s;
    /* Seconds of the step spent in the DP gradient reduction after the backward: all of
     * it when blocking, the waits and the edge's reductions when overlapped (overlap.c). */
    double dp_exposed_s;
    bool dp_overlap;             /* buckets were reduced during the backward */
    int64_t mem_used_bytes;      /* accounted pools in use now (this rank) */
    int64_t mem_peak_bytes;      /* their peak so far */
    int64_t mem_predicted_bytes; /* the buffer table's total for this rank */
    int64_t pool_peak_bytes[DP_NPOOLS];
    int64_t rss_bytes; /* resident set size now */
    /* A device backend's measured memory (backend.h mem_peak), 0 on the CPU: its arena's
     * high-water mark, and what the device has in use by every process (cudaMemGetInfo). */
    int64_t device_peak_bytes, device_used_bytes;
};

/* Per-rank results, gathered on rank 0. */
struct dp_rank_summary {
    int rank, stage, tp_rank, dp_rank;
    double step_time_mean_s;   /* steps 2.. (the first warms caches and MPI) */
    double step_time_median_s; /* the same steps */
    double dp_exposed_mean_s;  /* the same steps' dp_exposed_s (dp_step_info) */
    bool dp_overlap;           /* gradient buckets reduced during the backward */
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
    /* The flat gradient buffer's bytes (ZeRO <= 1; 0 without one): what Open MPI's
     * reduce-scatter holds once more on a shard group's first rank (compare_runs.c). */
    int64_t flat_grads_bytes;
};

struct dp_exec_result {
    int rank, world;
    int threads; /* compute threads per rank, as the backend chose them */
    bool flash;  /* the attention ran as flash attention (opts.attention resolved) */
    int steps_done;
    double first_loss, final_loss;
    int64_t tokens_per_step;
    int ckpt_tried, ckpt_saved; /* checkpoints this run attempted and published (all ranks) */
    /* fp16: steps of this run skipped for an overflow, and the loss scale after the last
     * step (0 in other precisions) */
    int steps_skipped;
    double loss_scale;
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
    int threads;                  /* compute threads per rank; 0 = the backend's rule */
    const char *backend;          /* "cpu" (NULL: the default) */
    /* Called on every rank after each step, and before each step (may be NULL). */
    void (*on_step)(const struct dp_step_info *info, void *ctx);
    void (*before_step)(int step, int rank, void *ctx);
    void *ctx;
    /* Checkpoints and resume (above); NULL = neither. */
    const struct dp_ckpt_opts *ckpt;
    /*
     * Storage precision: DP_FP32 (dp_exec_opts_default), DP_BF16 or DP_FP16: the working
     * copy of the weights, the kept activations, their gradients and the TP/PP messages
     * (the CPU backend emulates 2-byte storage by rounding; executor/README.md "Mixed
     * precision"). Master weights, gradients, reductions and AdamW state stay fp32.
     * fp16 adds dynamic loss scaling, from loss_scale_init (0: Megatron's 2^32).
     */
    enum dp_precision precision;
    double loss_scale_init;
    /* DP gradient buckets reduced while the backward runs (executor/overlap.c, ZeRO-0/1):
     * as the layout's dp_overlap says (PLAN, the default), or OFF / ON (ON refuses a
     * layout it cannot overlap); bucket_elems: elements per bucket (0: Megatron's
     * max(40M, 1M dp cp)). */
    enum dp_overlap_mode { DP_OVERLAP_PLAN = 0, DP_OVERLAP_OFF, DP_OVERLAP_ON } overlap_grad_reduce;
    int64_t bucket_elems;
    enum dp_exec_attn attention; /* DP_EXEC_ATTN_AUTO: the backend's default */
};
void dp_exec_opts_default(struct dp_exec_opts *o);

/*
 * Check that this executor can run `l` for `m` on `world` ranks (world <= 0: not
 * checked): cp = 1, ep = 1, a layer in every model chunk (vpp >= 1), Adam, a dense model,
 * RoPE or learned positions, two norms per layer, seq_len <= max_position. Errors name
 * the field.
 */
int dp_exec_check(const struct dp_model *m, const struct dp_layout *l, int world,
                  struct dp_err *err);
/* Whether --overlap-grad-reduce `mode` can run under `l` (ON: ZeRO 0 or 1 only). */
int dp_exec_check_overlap(const struct dp_layout *l, enum dp_overlap_mode mode, struct dp_err *err);
/* Whether the executor runs `l` for `m` in storage precision `p` (what bf16 / fp16 do
 * not cover yet is refused with one line naming the knob). */
int dp_exec_check_precision(const struct dp_model *m, const struct dp_layout *l,
                            enum dp_precision p, struct dp_err *err);

/*
 * Train for opts->steps steps on this rank (MPI must span the whole world; the CPU
 * backend initialises it). The model stores in opts->precision (fp32 by default),
 * whatever l->precision says.
 * On failure err says what and where; `collective` (may be NULL) is set when every rank
 * fails the same way (e.g. a NaN loss), so that only rank 0 needs to report it.
 */
int dp_exec_run(const struct dp_model *m, const struct dp_layout *l,
                const struct dp_exec_opts *opts, struct dp_exec_result *res, bool *collective,
                struct dp_err *err);

/* Progress heartbeat for a watchdog thread: a counter bumped after every completed
 * collective and micro-batch, and what the rank is doing now (static string). */
uint64_t dp_exec_heartbeat(const char **what, int *step);

/* ------------------------------------------------------------------ step time */

/* Points of the bandwidth-by-reuse-distance curve (0, then 256 KiB .. 256 MiB by 2x). */
#define DP_EXEC_REUSE_POINTS 16
/* SGEMM shapes the reuse probe times. */
#define DP_EXEC_GEMM_SHAPES 32

/*
 * Where a step leaves its operands, and OpenBLAS's SGEMM on one thread, as the step-time
 * prediction prices them (predict_ops.c; fitted by `dplan calibrate --backend cpu` from
 * struct dp_exec_reuse_samples, fit/fit.h dp_fit_reuse):
 * - the curve: what reading a byte costs when its line was last touched `bytes[i]` bytes
 *   of other traffic ago, and what writing one costs (its read for ownership and, the
 *   caches being full of dirty lines, its write-back), as rates;
 * - SGEMM hot: call_s + 2 m n k / (gflops 1e9) + ab_s (m + n) k + c_s m n (the call, the
 *   multiply-adds, the packing of A's rows and B's columns into panels, each C element's
 *   loads and stores around the micro-kernel: per k-panel, so small k pays more per FLOP);
 * - what operands that are not in cache cost a kernel beyond its hot time, as a multiple
 *   of what those bytes cost at the curve's rates (SGEMM over its A, B and C: it packs A
 *   and B with strided reads that the prefetcher does not follow; the executor's kernels each), and
 * the hot cost of the reductions (sum, sumsq: the gradient norm), which the per-split probe lacks.
 * The kernels' per-call costs (struct dp_exec_costs) are then their hot times.
 */
struct dp_exec_reuse {
    int n; /* points, bytes ascending (0: none measured) */
    double bytes[DP_EXEC_REUSE_POINTS], read_gbps[DP_EXEC_REUSE_POINTS],
        write_gbps[DP_EXEC_REUSE_POINTS];
    double gemm_call_s, gemm_gflops, gemm_ab_s, gemm_c_s; /* SGEMM hot */
    double gemm_cold;                                     /* SGEMM's cold factor */
    double attn_fwd, attn_bwd, attn_probs, act_fwd, act_bwd, norm_fwd, norm_bwd, ce, adamw, sumsq;
    double sumsq_s; /* the gradient norm's reduction (sum, sumsq) hot, per element */
};

/* A kernel timed hot and where the curve stops falling (seconds per unit of its cost:
 * a head, an element, a parameter) and what one unit reads and writes (bytes). */
struct dp_exec_kernel_sample {
    double hot_s, far_s, rd_bytes, wr_bytes;
};

/* What the reuse probe measures (backend/cpu_probe.c dp_exec_probe_reuse). */
struct dp_exec_reuse_samples {
    int n; /* the curve, as in struct dp_exec_reuse */
    double bytes[DP_EXEC_REUSE_POINTS], read_gbps[DP_EXEC_REUSE_POINTS],
        write_gbps[DP_EXEC_REUSE_POINTS];
    double far_bytes; /* the curve's point the cold times below were taken at */
    int ngemm;        /* C[m, n] = op(A) op(B), hot; cold_s at far_bytes (0: not timed) */
    struct {
        bool ta, tb;
        int m, n, k;
        double hot_s, cold_s;
    } gemm[DP_EXEC_GEMM_SHAPES];
    struct dp_exec_kernel_sample attn_fwd, attn_bwd, attn_probs, act_fwd, act_bwd, norm_fwd,
        norm_bwd, ce, adamw, sumsq;
};

#define DP_EXEC_COLL_POINTS     32
#define DP_EXEC_LOCKSTEP_POINTS 8 /* fit.h DP_CAL_LOCKSTEP_POINTS */

/* How a run ran, besides its model and layout. */
struct dp_exec_machine {
    int world;                /* ranks */
    int ranks_per_node;       /* ranks sharing this machine */
    int threads;              /* compute threads per rank */
    double allreduce_small_s; /* measured all-reduce of one double over the world (0: none) */
    double allreduce_1mib_s;  /* ... of 1 MiB */
    /* Measured beforehand (`dplan calibrate --backend cpu`), NULL: probe now. Attention is
     * rescaled from the shape they were measured at (costs->seq_len, costs->head_dim). */
    const struct dp_exec_costs *costs;
    /* Fitted alpha-beta of all-reduce, reduce-scatter, all-gather and send/recv (in that
     * order): alpha per ring step, nccl-tests' bus bandwidth in bytes/s; 0: not fitted, the
     * two all-reduces above price it. */
    double coll_alpha_s[4], coll_busbw_Bps[4];
    /* The measured times behind each fit (same order), over coll_ranks[i] ranks at
     * nccl-tests' sizes, bytes ascending: a message within their range is priced off them
     * (log-log between the two sizes around it); 0 points: the fit alone. */
    int coll_ranks[4], coll_npoints[4];
    double coll_point_bytes[4][DP_EXEC_COLL_POINTS], coll_point_s[4][DP_EXEC_COLL_POINTS];
    bool flash; /* the run's attention was flash (attn_flash_*), else the math one */
    /* Ranks in lock step (`dplan calibrate`'s measurement, 0: none): each synchronisation
     * with a group of n waits for the slowest, after t seconds of work since the rank's last
     * one: lockstep_wait_s at t (lockstep_seg_s ascending, measured over lockstep_ranks
     * ranks) scaled by dp_max_normal(n) / dp_max_normal(lockstep_ranks); without points,
     * dp_max_normal(n) lockstep_jitter sqrt(t) (predict_ops.c sync_wait). */
    double lockstep_jitter;
    int lockstep_ranks, lockstep_n;
    double lockstep_seg_s[DP_EXEC_LOCKSTEP_POINTS], lockstep_wait_s[DP_EXEC_LOCKSTEP_POINTS];
};

/* One step, split by kind (seconds, the slowest stage's share; they add up to step_s). */
struct dp_exec_prediction {
    double step_s;
    double gemm_s;        /* OpenBLAS products */
    double attention_s;   /* the attention kernels */
    double elementwise_s; /* norms, activations, residuals, biases, embedding, cross-entropy */
    double fork_s;        /* OpenMP fork/join of the parallel regions (not in the three above) */
    double comm_s;        /* TP, PP, DP and embedding collectives, the loss all-reduce */
    double optimizer_s;   /* zeroing, the gradient norm, AdamW */
    double bubble_s;      /* pipeline fill and drain */
    double timeshare_s;   /* more threads than cores: the wait for a core */
};

/*
 * Predict one step of the CPU backend for `m` under `l` on this machine: a probe of it
 * (about 0.1-0.3 s: SGEMM call cost and rate, OpenMP fork/join, bandwidth per cache
 * level, the executor's own kernels) prices every call the executor's step code makes
 * (predict.c). Fails only if the probe fails or the layout does not validate.
 */
int dp_exec_predict(const struct dp_model *m, const struct dp_layout *l,
                    const struct dp_exec_machine *run, struct dp_exec_prediction *out,
                    struct dp_err *err);

/* ------------------------------------------------------------------ backends */

/* Whether this build has the backend `name` ("cpu"); the names, comma-separated. */
bool dp_exec_backend_known(const char *name);
const char *dp_exec_backend_names(void);
/* An environment variable the ranks of backend `name` (NULL: the default) should be
 * started with, "NAME=VALUE", or NULL: the CPU backend asks for OPENBLAS_CORETYPE when
 * OpenBLAS fell back to generic kernels on a CPU with AVX-512 or AVX2 (the launcher sets
 * it; OpenBLAS reads it only at load time). */
const char *dp_exec_rank_env(const char *backend);

/* The element type of checkpoints and weights this executor writes ("F32"). */
const char *dp_exec_dtype(void);

/* ------------------------------------------------------------------ benchmarks */

/* The per-call costs the step-time prediction prices with, as the CPU backend's probe
 * measures them (backend/cpu_probe.c, fields as in backend/probe.h): SGEMM on one thread
 * t = gemm_call_s + 2 m n k / (gemm_gflops 1e9 conc_eff); the fork and join of a parallel
 * region; streaming bandwidth per thread in L2, the L3 share, beyond; the executor's
 * kernels on one thread (attention per head of seq_len x head_dim). */
struct dp_exec_costs {
    int threads, concurrent; /* the split measured at: threads per rank, computing on the node */
    int64_t seq_len;
    int head_dim;
    enum dp_ffn_kind ffn;
    enum dp_norm_kind norm;
    double gemm_call_s, gemm_gflops, conc_eff, fork_s;
    double bw_gbps[3];
    int64_t cache_bytes[2];
    double attn_fwd_s, attn_bwd_s, attn_probs_s;
    double act_fwd_ns, act_bwd_ns, norm_fwd_ns, norm_bwd_ns, ce_ns, adamw_ns;
    /* The kernels measured after sweeping sweep_bytes through the caches (the step's
     * working set: its operands' reuse distance), the norms over rows of `hidden` (0: 1024);
     * swept_gbps the swept streaming bandwidth (probe.h). 0: the older hot probe. */
    int hidden;
    int64_t sweep_bytes;
    double swept_gbps;
    /* Bandwidth by reuse distance and the kernels' cold factors (reuse.n 0: none; then each
     * operand is priced at the bandwidth of its working set or the swept rate). With them,
     * the kernel times above are hot (sweep_bytes 0). */
    struct dp_exec_reuse reuse;
};
/* Measure them at that split and shape (out's first six fields and hidden, sweep_bytes
 * say which; about 0.1-0.5 s).
 * DP_ERUNTIME without the CPU backend. */
int dp_exec_measure_costs(struct dp_exec_costs *out, struct dp_err *err);
/* Measure bandwidth by reuse distance, SGEMM hot and cold and the kernels hot and cold at
 * shape's model shapes (its seq_len, head_dim, ffn, norm, hidden), one thread (about 3-5 s:
 * sweeps of up to 256 MiB). DP_ERUNTIME without the CPU backend. */
int dp_exec_measure_reuse(const struct dp_exec_costs *shape, struct dp_exec_reuse_samples *out,
                          struct dp_err *err);

/*
 * For `dplan calibrate --backend cpu` (bench.c): the seconds of `reps` runs (their 10th
 * percentile, the minimum below 11: noise only adds time; after one warm-up) of the backend's GEMM
 * C[m, n] = A[m, k] B[k, n] over `threads` OpenMP threads (split by rows as a step splits it), and
 * of one streaming pass y = a x + b y over a working set of `bytes` (x and y; 3 elements moved per
 * element) on the calling thread. DP_ERUNTIME without the CPU backend, DP_ENOMEM, DP_EINVAL.
 */
int dp_exec_bench_gemm(int m, int n, int k, int threads, int reps, double *seconds,
                       struct dp_err *err);
int dp_exec_bench_stream(int64_t bytes, int reps, double *seconds, struct dp_err *err);

/* Shut MPI down at process end (no-op if not started), or abort every rank. */
void dp_exec_finalize(void);
void dp_exec_abort(int code);

#endif
