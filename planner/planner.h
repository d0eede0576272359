/*
 * planner: enumerates layouts, asks costmodel about each, and ranks or
 * repairs them. Never prints; callers format the results.
 */
#ifndef DPLAN_PLANNER_H
#define DPLAN_PLANNER_H

#include "core/core.h"
#include "costmodel/costmodel.h"

/* One change that makes (or tries to make) an out-of-memory layout fit. */
struct dp_fix {
    char change[96];         /* as command-line options, e.g. "--recompute full --zero 1" */
    char cost[192];          /* what the change costs, in words */
    double extra_flops;      /* fraction of extra hardware FLOPs (recompute) */
    double slowdown;         /* predicted loss of tokens/s per GPU: old / new - 1 */
    struct dp_layout layout; /* the changed layout */
    int gpus;                /* GPUs it runs on */
    int64_t peak_bytes;
    bool fits;  /* leaves the margin free */
    bool tight; /* fits the usable bytes, but inside the margin */
};

#define DP_MAX_FIXES 32

/*
 * Candidate fixes for layout `l` on `cl`: single changes (recompute,
 * sequence parallel, ZeRO stage, tp x2, pp x2, smaller micro-batch) and, when
 * none fits alone, pairs of them; then the fewest GPUs of this node type that
 * fit. Sorted: fitting first, then fewest GPUs, then the smallest predicted
 * loss of per-GPU throughput (the step-time model). A fix fits when its peak leaves
 * `margin` of the usable bytes free (dp_search_opts.memory_margin).
 * *n gets the count (<= cap).
 */
int dp_plan_fixes(const struct dp_model *m, const struct dp_cluster *cl, const struct dp_layout *l,
                  const struct dp_mem_opts *o, double margin, struct dp_fix *out, int cap, int *n,
                  struct dp_err *err);

/* ------------------------------------------------------------------ search */

#define DP_MAX_TOP   64
#define DP_MAX_NOTES 24

/* One evaluated layout. */
struct dp_candidate {
    struct dp_layout layout;
    struct dp_step_cost cost;
    int64_t peak_bytes, min_bytes; /* per GPU, over the pipeline stages */
    int peak_stage;
};

/*
 * What to search. Fields left at their "free" value (0, or -1 where noted) are
 * searched; others are fixed. gbs and seq_len are required.
 */
struct dp_search_opts {
    int top_k;                   /* 1..DP_MAX_TOP */
    int tp, pp, dp, cp, ep, vpp; /* 0 = search */
    int64_t mbs;                 /* 0 = search powers of two up to max_mbs */
    int max_mbs;                 /* default 64 */
    int zero;                    /* -1 = search 0..3 */
    int recompute;               /* -1 = search none/selective/full */
    int sp;                      /* -1 = search, 0 off, 1 on */
    bool no_uneven;              /* do not try uneven first/last stage splits */
    bool all_splits;             /* rank each split and vpp of a layout; default: the best */
    int64_t gbs, seq_len;
    enum dp_precision precision;
    int gemm;                      /* enum dp_gemm; -1 = search bf16 and, if the GPU has it, fp8 */
    enum dp_fp8_recipe fp8_recipe; /* for FP8 layouts */
    bool fp8_params;
    bool fp8_output;    /* the output layer in MXFP8 too (dp_layout fp8_output) */
    bool fp8_attention; /* FP8 attention on the FP8 layouts (dp_layout fp8_attention) */
    int grad_fp32;      /* -1 = fp32 unless fp16 */
    bool flash_attn;
    bool dp_overlap;
    /* -1 = on where the layout allows it, as Megatron-Core's recipes run (TP overlap with
     * sequence parallelism, parameter-gather overlap with dp_overlap, pipeline overlap
     * with interleaving): each overlap only removes exposed time in the cost model, so
     * searching "off" would never win; 0 = off, 1 = on where allowed. */
    int tp_overlap, overlap_param_gather, pp_overlap;
    enum dp_optimizer optimizer;
    enum dp_framework framework; /* fixed: what its checks allow is searched (zero, recompute) */
    enum dp_loss loss;
    int loss_chunks;          /* fixed: the framework's chunked loss (dp_layout loss_chunks) */
    int64_t local_batch;      /* fixed: sequences per pipeline schedule (dp_layout local_batch) */
    int mtp_layers;           /* fixed: multi-token-prediction depth (dp_layout mtp_layers) */
    bool fsdp_per_microbatch; /* fixed: FSDP's collectives every micro-batch under pp */
    /* -1 = 1F1B (interleaved with vpp > 1) and, where the framework runs it (torchtitan),
     * DualPipeV; otherwise that enum dp_pp_schedule only */
    int schedule;
    int shard_group; /* -1 = search full sharding and node-sized HSDP groups, 0 = full
                        sharding only, > 0 = that group */
    /* Mixture of experts, fixed (never searched): expert tensor parallelism (0 = tp),
     * capacity factor (0 = dropless), padding, load imbalance, token dispatcher and the
     * routing's expert placement. */
    int etp;
    double moe_capacity;
    bool moe_pad;
    bool ep_overlap;
    double moe_imbalance;
    enum dp_moe_dispatcher moe_dispatcher;
    enum dp_moe_routing moe_routing;
    struct dp_mem_opts mem;
    /* The fraction of the usable bytes a layout must leave free to count as fitting: 0 is
     * the memory model's own verdict; the CLI defaults to DP_MEM_TIGHT_FRACTION, the
     * model's measured error (costmodel.h). */
    double memory_margin;
    /*
     * Optional: called once for every layout that fits, in enumeration order, after
     * its step time is computed (`dplan suggest --svg` plots them). The candidate is
     * valid during the call only; its paths' descriptions are empty. NULL: none.
     */
    void (*on_fit)(const struct dp_candidate *c, void *ctx);
    void *on_fit_ctx;
};
void dp_search_opts_default(struct dp_search_opts *o);
/* The bytes per GPU a layout may use in the searches: the usable bytes less the margin. */
int64_t dp_search_capacity(const struct dp_cluster *cl, const struct dp_search_opts *o);

/* The recompute policies the searches try under a framework, in search order (Megatron none,
 * selective, full; torchtitan none, op, full; DeepSpeed none, full), written to out[];
 * returns the count. */
int dp_recompute_choices(enum dp_framework fw, int out[DP_RECOMPUTES]);

/* A best layout for one value of one dimension, for "what the runner-ups lose on". */
enum dp_alt_dim {
    DP_ALT_TP,
    DP_ALT_PP,
    DP_ALT_RECOMPUTE,
    DP_ALT_ZERO,
    DP_ALT_CP,
    DP_ALT_VPP,
    DP_ALT_GEMM,     /* the GEMM precision, when searched (--precision auto) */
    DP_ALT_SCHEDULE, /* the pipeline schedule (enum dp_pp_schedule), when DualPipeV is searched */
};

struct dp_alternative {
    enum dp_alt_dim dim;
    int value;      /* the degree; enum dp_recompute for RECOMPUTE; 1 (on) or 0 for VPP */
    char label[48]; /* "tp=4", "recompute=none", "zero=0", "vpp=on" */
    bool found;     /* some layout with that value fits */
    struct dp_candidate best;
};

struct dp_search_result {
    int n; /* entries in top, best first */
    struct dp_candidate top[DP_MAX_TOP];
    long long evaluated; /* layouts whose memory (and time, if they fit) was computed */
    long long fitting, oom;
    long long bad_time;  /* fitting layouts skipped: dp_step_cost_sane failed (a model bug) */
    bool folded_splits;  /* a layout's other splits or vpp were left out of top (!all_splits) */
    int64_t lowest_peak; /* when nothing fits: the smallest peak seen */
    struct dp_layout lowest_layout;
    /*
     * When nothing fits at the requested batch, the batch nearest it at which some
     * layout fits (0 if none) because that layout's mbs x dp divides it, the layout (its
     * gbs set) and its peak. gbs_lacks: the factor every skipped layout's mbs x dp needs
     * that the requested batch lacks (1 or 0 when none is common).
     */
    int64_t alt_gbs;
    struct dp_layout alt_layout;
    int64_t alt_peak;
    int64_t gbs_lacks;
    int nnotes; /* choices pruned before evaluation, and why */
    char notes[DP_MAX_NOTES][160];
    int nalt;
    struct dp_alternative alt[32];
};

/*
 * Enumerate every valid layout of `m` on `cl` (tp within a node dividing heads,
 * kv heads and the MLP; cp; pp with even and uneven first/last splits; vpp; dp;
 * ep; micro-batch; ZeRO stage; recompute; sequence parallelism), drop those that
 * do not fit in memory, and rank the rest by step time x (1 + 0.01 x spread),
 * spread being (peak - smallest stage) / peak: memory balance decides between
 * layouts within about 1% of each other. `out` is large; allocate it on the heap.
 * When nothing fits, a second pass finds the batch nearest o->gbs at which some layout
 * fits (out->alt_gbs). Errors (DP_EINFEASIBLE) when no layout is left to evaluate: the
 * message names the pruning that left none, or the batch that would work. Fixed knobs
 * (o->tp, ...) are tried as given, also when they are not powers of two.
 */
int dp_plan_search(const struct dp_model *m, const struct dp_cluster *cl,
                   const struct dp_search_opts *o, struct dp_search_result *out,
                   struct dp_err *err);

/*
 * One search of a batch: its cluster and options in, what a table of best layouts needs
 * out (the full dp_search_result is large and stays with the thread that searched).
 */
struct dp_search_job {
    struct dp_cluster cl;
    struct dp_search_opts so;
    int rc; /* dp_plan_search's, its message in err */
    struct dp_err err;
    int n;                    /* layouts in the result's top (0: nothing fits) */
    struct dp_candidate best; /* top[0] when n > 0 */
    int64_t lowest_peak, alt_gbs;
};

/*
 * dp_plan_search for each job, `threads` at once (the searches share only the read-only
 * model; each thread has its own result). The results do not depend on `threads`.
 * `done`, when given, is called after each search, one call at a time, from the thread
 * that ran it. 0, or DP_ENOMEM when no result buffer could be had (jobs' rc say which).
 */
int dp_plan_search_batch(
    const struct dp_model *m, struct dp_search_job *jobs, int njobs, int threads,
    void (*done)(const struct dp_search_job *j, int ndone, int njobs, void *ctx), void *ctx);

/* The smallest GPU count of `cl`'s node type on which some layout fits. */
struct dp_min_gpus {
    bool found;
    int gpus;
    int nodes;               /* 0 when the count is a part of one node */
    struct dp_layout layout; /* the fastest fitting layout at that count */
    int64_t peak_bytes;
    int64_t best_peak_bytes; /* when not found: the smallest peak of any layout tried */
    struct dp_layout best_layout;
    long long layouts_tried;
};

/*
 * Search GPU counts 1, 2, 4 .. gpus_per_node, then whole nodes, up to max_gpus,
 * over every knob dp_plan_search searches (tp, cp, sp, ep, pp with uneven splits,
 * vpp, ZeRO, recompute; dp is what the count leaves), with `o`'s fixed knobs
 * fixed (o->dp and o->top_k are ignored). o->gbs = 0 lets the batch follow the
 * count: 2 x mbs sequences per GPU, so every stage holds a long batch's
 * micro-batches in flight. The count is searched at o->mbs (1 when 0: memory
 * never falls with a larger micro-batch); of the layouts that fit there, the
 * fastest is reported. Returns 0 (found or not) or DP_ENOMEM.
 */
int dp_plan_min_gpus(const struct dp_model *m, const struct dp_cluster *cl,
                     const struct dp_search_opts *o, int max_gpus, struct dp_min_gpus *out,
                     struct dp_err *err);

/* Why `c` is slower than `w`, in words: "+3.2%: bubble +0.41 s, tp comm +0.12 s". */
void dp_explain_delta(const struct dp_candidate *w, const struct dp_candidate *c, char *buf,
                      size_t cap);
/* What dominates a candidate's step: "compute 71%, bubble 9%, tp comm 8%". */
void dp_explain_shares(const struct dp_step_cost *c, char *buf, size_t cap);

#endif
