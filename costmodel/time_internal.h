/*
 * What costmodel/time.c shares with costmodel/time_pipe.c: the per-layout context of
 * the step-time model (and, through overlap.h, the overlap rule).
 */
#ifndef DPLAN_COSTMODEL_TIME_INTERNAL_H
#define DPLAN_COSTMODEL_TIME_INTERNAL_H

#include "costmodel.h"
#include "overlap.h"

/* What every term of one layout's step time shares (ctx_init in time.c). */
struct dp__time_ctx {
    const struct dp_model *m;
    const struct dp_cluster *cl;
    const struct dp_layout *l;
    double peak;  /* FLOP/s of the storage precision: attention core, output layer */
    double membw; /* bytes/s achievable */
    double p;     /* bytes per activation value */
    /* The linear layers' GEMMs (QKV, out-projection, MLP, experts) at the layout's compute
     * type: its dense peak, efficiency curve and bytes per input element. */
    double peak_lin;
    const struct dp_gemm_curve *curve_lin;
    double p_lin;
    bool fp8;
    bool mxfp8;    /* FP8 GEMMs under the mxfp8 recipe (dp_layout_mxfp8) */
    double cast_b; /* FP8: bytes moved per quantized element (fp8_cast_bytes) */
    double t, u;   /* tp, and the sequence-parallel divisor */
    double T;      /* GEMM rows: tokens of one micro-batch on this CP rank */
    struct dp_path tp, cp, ep, etp, dp, dpe, pp, emb;
};

/*
 * The pipeline (time_pipe.c): each model chunk's forward and backward from the layer
 * costs lt, the schedule (pipeline.c) and the slowest rank's breakdown, into *r.
 */
void dp__time_pipeline(const struct dp__time_ctx *c, const struct dp_layer_time lt[DP_LAYER_KINDS],
                       struct dp_reuse *r);

/*
 * What costmodel/ops.c takes from time.c and time_pipe.c to list the step's terms one
 * operation at a time: the context (step: the step's paths, else the layer's), one
 * layer's costs and its two blocks, the ends, a pipeline send, the share of a stage's
 * layers that recompute, the optimizer's bytes per parameter and a layer's linear
 * weights (those FP8 weights shrink).
 */
void dp__time_ctx_init(struct dp__time_ctx *c, const struct dp_model *m,
                       const struct dp_cluster *cl, const struct dp_layout *l, bool step);
void dp__time_layer(const struct dp__time_ctx *c, enum dp_layer_kind kind, struct dp_layer_time *o,
                    struct dp_layer_time blk[2]);
void dp__time_ends(const struct dp__time_ctx *c, struct dp_layer_time *o);
double dp__time_p2p(const struct dp__time_ctx *c);
/* What recomputation adds to a layer's backward: compute, TP collectives, all-to-alls. */
struct dp__redo {
    double compute_s, tp_s, ep_s;
};
void dp__time_redo(const struct dp_layout *l, const struct dp_layer_time *lc,
                   enum dp_layer_kind kind, struct dp__redo *re);
double dp__time_recompute_share(const struct dp_layout *l, const struct dp_model *m, int r);
double dp__optimizer_bytes_per_param(const struct dp_layout *l);
/* Muon's Newton-Schulz orthogonalization on stage r per step (0 for the other optimizers). */
double dp__time_muon_s(const struct dp__time_ctx *c, int r);
double dp__linear_weights_per_layer(const struct dp_model *m, const struct dp_layout *l);

#endif
