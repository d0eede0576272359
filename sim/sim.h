/*
 * sim: a discrete-event simulation of one training step, every pipeline stage,
 * model chunk and micro-batch, with a compute stream and communication streams
 * (TP, CP, EP, pipeline send/receive, data-parallel gather and reduce) per GPU.
 *
 * The costs are the cost model's own terms, operation by operation
 * (dp_time_ops, dp_time_dp_units, dp_mem_terms in costmodel/): the simulator
 * decides only when each operation runs. Pipeline passes run in the order
 * Megatron-Core runs them, or DualPipeV's (schedule.c); a pass starts when its rank is free and
 * its input has arrived; sends, data-parallel collectives and the optimizer
 * follow the rules in engine.c. Where the cost model sums (pipeline fill and
 * drain from a critical path, data-parallel overlap against one window), the
 * simulation schedules: uneven stages, bucket timing and contention between
 * streams come out of the timeline.
 *
 * One GPU per pipeline stage is simulated: the tensor, context and data
 * parallel ranks of a stage run the same operations at the same times (the
 * collectives' costs already are those of the slowest group), so the cost does
 * not grow with the cluster. Pure: no I/O; the trace writer returns text in a
 * struct dp_buf.
 */
#ifndef DPLAN_SIM_H
#define DPLAN_SIM_H

#include "costmodel/costmodel.h"

enum dp_sim_schedule {
    DP_SIM_SCHED_AUTO,        /* interleaved with vpp > 1, else 1F1B (Megatron's choice) */
    DP_SIM_SCHED_GPIPE,       /* all forwards, then all backwards (vpp 1) */
    DP_SIM_SCHED_1F1B,        /* one-forward-one-backward (vpp 1) */
    DP_SIM_SCHED_INTERLEAVED, /* interleaved 1F1B (vpp > 1) */
    DP_SIM_SCHED_DUALPIPEV,   /* DualPipeV's V (layout pipeline_schedule dualpipev, vpp 2) */
};
const char *dp_sim_schedule_name(enum dp_sim_schedule s);
/* "gpipe", "1f1b", "interleaved", "dualpipev", "auto"; DP_EUSAGE otherwise. */
int dp_sim_schedule_parse(const char *s, enum dp_sim_schedule *out, struct dp_err *err);

/* What a pass computes: the whole forward or backward; DualPipeV's zero-bubble split of
 * a backward into the input gradients (BI, now) and the weight gradients (W, a later
 * pass of its own). */
enum dp_sim_pass_kind { DP_SIM_PASS_FULL, DP_SIM_PASS_BI, DP_SIM_PASS_W };

/* One pass of a rank's schedule: forward or backward of micro-batch mb through its
 * model chunk `chunk` (DualPipeV: chunk 0 is stage r, chunk 1 stage 2 pp - 1 - r).
 * paired: one of DualPipeV's overlapped forward-backward pairs (the forward, then its
 * partner backward as the next entry), each pass's expert all-to-alls under the other's
 * compute. reduce: the engine's mark for the pass that completes the chunk's gradients. */
struct dp_sim_step {
    int32_t mb;
    int16_t chunk;
    bool fwd;
    uint8_t kind; /* enum dp_sim_pass_kind */
    bool paired, reduce;
};
/*
 * Rank r's passes in the order the schedule runs them, 2 M v entries into out.
 * 1F1B and interleaved follow Megatron-Core (megatron/core/pipeline_parallel/
 * schedules.py: get_pp_rank_microbatches, get_schedule_table with groups of pp
 * micro-batches, forward_backward_pipelining_with/without_interleaving); GPipe runs
 * all forwards, then the backwards in micro-batch order (torch.distributed.pipelining
 * ScheduleGPipe); DualPipeV the eight steps of core's dp_dualpipev_ops, each phase's
 * passes taking the micro-batches in order and each W the oldest deferred weight
 * gradients. out needs dp_sim_schedule_passes entries. DP_EINFEASIBLE when the schedule
 * does not apply (interleaving needs v > 1 and M a multiple of p, at least p; GPipe and
 * 1F1B need v = 1; DualPipeV v = 2 and M >= 2 p).
 */
int dp_sim_schedule(enum dp_sim_schedule s, int p, int v, int64_t M, int r, struct dp_sim_step *out,
                    struct dp_err *err);
/* Entries dp_sim_schedule writes for rank r: 2 M v, and DualPipeV's W passes beside. */
int64_t dp_sim_schedule_passes(enum dp_sim_schedule s, int p, int v, int64_t M, int r);

enum dp_sim_stream {
    DP_SIM_COMPUTE,
    DP_SIM_TP,
    DP_SIM_CP,
    DP_SIM_EP,
    DP_SIM_PP,     /* sends to the neighbouring stages */
    DP_SIM_GATHER, /* data-parallel parameter all-gathers */
    DP_SIM_REDUCE, /* data-parallel gradient reductions, tied-embedding sync */
    DP_SIM_STREAMS
};
const char *dp_sim_stream_name(enum dp_sim_stream s);

enum dp_sim_op {
    DP_SIM_OP_EMBED,
    DP_SIM_OP_ATTN,
    DP_SIM_OP_MLP,
    DP_SIM_OP_HEAD, /* final norm, output layer, loss */
    DP_SIM_OP_CAST, /* FP8 casts of a layer's weights (first micro-batch) */
    DP_SIM_OP_WAIT, /* compute waits for the exposed part of an overlapped collective */
    DP_SIM_OP_TP,
    DP_SIM_OP_CP,
    DP_SIM_OP_EP,
    DP_SIM_OP_SEND,
    DP_SIM_OP_GATHER,
    DP_SIM_OP_REDUCE,
    DP_SIM_OP_EMB_SYNC,
    DP_SIM_OP_OPTIMIZER,
    DP_SIM_OPS
};
const char *dp_sim_op_name(enum dp_sim_op o);

enum dp_sim_phase { DP_SIM_FWD, DP_SIM_BWD, DP_SIM_RECOMPUTE, DP_SIM_STEP };

/* One operation as it ran; times in s from the start of the step. */
struct dp_sim_slice {
    double t0, t1;
    int32_t mb;    /* micro-batch, -1 for once-per-step work */
    int16_t chunk; /* model chunk of the stage, -1 */
    int16_t layer; /* model layer, 0-based; -1 for none */
    uint8_t stream, op, phase;
    uint8_t of; /* DP_SIM_OP_WAIT: the collective waited for; DP_SIM_OP_SEND: 1 = gradient;
                   TP, CP, EP: the block (DP_SIM_OP_EMBED, _ATTN, _MLP, _HEAD) */
};

/* A pass on the compute stream: from its first operation's start to its last one's end. */
struct dp_sim_pass {
    double t0, t1;
    int32_t mb;
    int16_t chunk;
    bool fwd;
    uint8_t kind; /* enum dp_sim_pass_kind */
};

/* Memory of the stage's GPU after a change at t: all of it, and its activations. */
struct dp_sim_mem {
    double t;
    int64_t bytes, act_bytes;
};

/* Where a stage's compute stream spent the step (s; the terms sum to the step time).
 * bubble: waiting for another stage (inputs, the slowest stage before the optimizer). */
struct dp_sim_breakdown {
    double compute, recompute, tp, cp, ep, pp, dp, bubble, optimizer, other;
};

struct dp_sim_stage {
    int stage;
    long rank;              /* the GPU simulated: tp, cp and dp index 0 of the stage */
    long ranks;             /* GPUs of the stage (all alike) */
    double busy_s;          /* its passes (first to last operation of each) */
    double idle_s;          /* the pipeline span minus busy_s */
    double bubble;          /* idle_s over the pipeline span */
    double first_s, last_s; /* its first pass's start, its last pass's end */
    struct dp_sim_breakdown b;
    double stream_busy_s[DP_SIM_STREAMS]; /* time each stream was busy */
    int64_t peak_bytes;
    double peak_at_s;
    int64_t model_peak_bytes; /* dp_mem_stage's total, for comparison */
    struct dp_sim_pass *pass;
    size_t npass;
    struct dp_sim_slice *comm; /* sends, data-parallel collectives, optimizer (always kept) */
    size_t ncomm;
    struct dp_sim_slice *slice; /* every operation, when recorded */
    size_t nslice;
    struct dp_sim_mem *mem; /* memory after each change, when recorded */
    size_t nmem;
};

struct dp_sim_result {
    enum dp_sim_schedule schedule; /* resolved */
    int pp, vpp;
    int64_t microbatches; /* a schedule's */
    int64_t schedules;    /* a step's (local_batch), at least 1 */
    double step_s;        /* until every stage's optimizer step (and gathers) is done */
    double pipe_s;        /* the pipeline span: the first pass's start to the last pass's end */
    double bubble;        /* idle over span, all stages together: sum idle_s / (pp x pipe_s) */
    int busiest;          /* the stage with the most busy_s (its breakdown is the step's) */
    int64_t peak_bytes;
    int peak_stage;
    size_t ops; /* operations simulated */
    /* What the estimate prices that the simulation does not issue as priced (static text),
     * NULL when nothing: DeepSpeed ZeRO-3's sub-module collectives (dp_sim_build's). */
    const char *caveat;
    int nstages;
    struct dp_sim_stage *stage;
};

struct dp_sim_opts {
    enum dp_sim_schedule schedule;
    bool record;              /* keep every operation and memory change */
    const bool *record_stage; /* with record: which stages (pp entries); NULL = all */
    struct dp_mem_opts mem;
};
void dp_sim_opts_default(struct dp_sim_opts *o);

/*
 * What the engine runs, independent of a model: the schedule, each virtual stage's
 * layers, each operation's cost, each stage's data-parallel units and memory terms.
 * dp_sim_run fills it from a model; a test may fill it by hand. Layer i is MoE when
 * i >= moe_from (models: the dense-first rule, dp_model_layer_kind).
 */
struct dp_sim_input {
    int pp, vpp;
    int64_t M;         /* micro-batches a schedule */
    int64_t schedules; /* pipeline schedules a step, one after another (layout local_batch:
                          gradient-accumulation steps); 0 or 1: one */
    enum dp_sim_schedule schedule;
    bool pp_overlap; /* sends run beside compute (Megatron overlap_p2p_comm); else block */
    bool v_style;    /* DualPipeV's V: chunk 1 of rank r is stage 2 pp - 1 - r */
    int zero;
    int layers, moe_from;
    int chunk_first[DP_MAX_CHUNKS], chunk_count[DP_MAX_CHUNKS]; /* per virtual stage
                                                                   (dp_pipe_global_stage) */
    int tp, cp, dp;                                             /* to name the GPUs */
    long ranks_per_stage;                                       /* tp x cp x dp */
    long stage_rank_stride;                                     /* global ranks between stages */
    struct dp_step_ops ops;
    struct dp_mem_terms mem[DP_MAX_PP];
    struct dp_dp_sched dsched[DP_MAX_PP];
    struct dp_dp_unit *units[DP_MAX_PP]; /* borrowed (dp_sim_input_release frees dp_sim_build's) */
    const char *caveat;                  /* copied to the result (struct dp_sim_result) */
    int nunits[DP_MAX_PP];
};
/* Fill *in for m, cl, l (validated here: DP_EINFEASIBLE with the reason). */
int dp_sim_build(const struct dp_model *m, const struct dp_cluster *cl, const struct dp_layout *l,
                 const struct dp_sim_opts *o, struct dp_sim_input *in, struct dp_err *err);
void dp_sim_input_release(struct dp_sim_input *in);
int dp_sim_engine(const struct dp_sim_input *in, const struct dp_sim_opts *o,
                  struct dp_sim_result *out, struct dp_err *err);

/* dp_sim_build + dp_sim_engine. out is released and zeroed on failure. */
int dp_sim_run(const struct dp_model *m, const struct dp_cluster *cl, const struct dp_layout *l,
               const struct dp_sim_opts *o, struct dp_sim_result *out, struct dp_err *err);
void dp_sim_result_release(struct dp_sim_result *r);

/*
 * The step as a Chrome Trace Event Format / Perfetto JSON document (trace.c): one
 * process per GPU listed in ranks (n entries; global ranks, each shown with its
 * stage's timeline), or per simulated stage when ranks is NULL; one thread per
 * stream; "X" complete events with ts and dur in microseconds, named by operation,
 * layer, chunk and micro-batch, passes enclosing their operations; "M" metadata
 * naming processes and threads; "C" counters of the memory. Needs a result run with
 * record for the stages shown (DP_EINVAL otherwise, or for a rank outside the job).
 */
struct dp_sim_trace_opts {
    const long *ranks;
    size_t nranks;
    bool passes_only;  /* one slice per pass and per communication, no layers */
    const char *title; /* otherData.title */
};
int dp_sim_trace(const struct dp_sim_result *r, const struct dp_sim_input *in,
                 const struct dp_sim_trace_opts *o, struct dp_buf *out, struct dp_err *err);

#endif
