/*
 * planner internals shared by the searches.
 */
#ifndef DPLAN_PLANNER_INTERNAL_H
#define DPLAN_PLANNER_INTERNAL_H

#include "planner.h"

/*
 * The pipeline splits the searches try for (pp, vpp): the even one when L divides into
 * the pp x vpp model chunks, and dplan's balanced family (dp_split_balanced,
 * core/split.c) with the embedding and the loss weighing a and b layers, a, b in
 * {0, 1, 2} without interleaving and (0, 0), (0, 1), (1, 1) with it: the first and last
 * stages one or two layers lighter (Megatron's --decoder-first/last-pipeline-num-layers
 * and --account-for-*-in-pipeline-split are members when the rest divides), the
 * remainder of a count that does not divide spread one layer per GPU, to the first
 * chunks or to those before the last. With head_w > 0 the loss also weighs head_w and
 * head_w + 1 layers (the output layer's time in layers; the time search passes it, the
 * memory search 0). Uneven splits are tried up to vpp = DP_SEARCH_MAX_UNEVEN_VPP and not
 * at all with no_uneven. Duplicates are dropped. Returns the count written to out (at
 * most DP_MAX_SPLITS); an even split is stored as nchunks 0.
 */
#define DP_SEARCH_MAX_UNEVEN_VPP 16
#define DP_MAX_SPLITS            27 /* 1 even + 2 placements x (9 + 4) weights */

struct dp__split {
    int nchunks;
    uint16_t c[DP_MAX_CHUNKS];
};

/* Per framework: Megatron runs any split (--pipeline-model-parallel-layout); torchtitan
 * only its own rule (pipeline_parallel_layers_per_stage with first/last_stage_less_layers:
 * dp_split_torchtitan), so its uneven candidates are that rule's, for the embedding and
 * the output weighing 0-2 layers; DeepSpeed's PipelineModule partitions by method, which
 * dplan cannot name per stage: even splits only (export/deepspeed.c refuses the rest). */
int dp__pipeline_splits(int L, int pp, int vpp, bool no_uneven, int head_w, enum dp_framework fw,
                        struct dp__split *out);

/*
 * `gpus` GPUs of cl's node type: whole nodes of cl->gpus_per_node when gpus is at
 * least that (then a multiple of it), else one node holding all `gpus`.
 */
static inline struct dp_cluster dp__cluster_with_gpus(const struct dp_cluster *cl, int gpus)
{
    struct dp_cluster c = *cl;
    if (gpus >= cl->gpus_per_node) {
        c.nodes = gpus / cl->gpus_per_node;
    } else {
        c.nodes = 1;
        c.gpus_per_node = gpus;
    }
    return c;
}

/*
 * Does tensor parallelism tp (with expert tensor parallelism etp, 0 = tp) divide
 * what it splits: heads, KV heads, the dense MLP when the model has dense layers,
 * shared experts (by tp) and routed experts (by etp)?
 */
bool dp__tp_divides(const struct dp_model *m, int tp, int etp);

/* The layout fields the searches fix from the options (MoE routing, etp). */
void dp__apply_moe_opts(const struct dp_search_opts *o, struct dp_layout *l);

/* Whether a framework runs ZeRO stage `zero` with pp, cp and the optimizer, as
 * dp_layout_check_framework rules it (the searches never build a layout the framework refuses). */
bool dp__zero_offered(enum dp_framework fw, int zero, int pp, int cp, enum dp_optimizer opt);
/*
 * Shard-group sizes to try for a layout of `dpcp` data-parallel ranks (x cp) at ZeRO stage
 * `zero` (0 = full sharding): the fixed o->shard_group, or full sharding and the HSDP
 * groups that keep a shard inside 1, 2, 4, ... nodes (powers of two from the node's
 * gpus_per_node / tp ranks, dividing dpcp, below it). Writes out[], returns the count.
 */
int dp__shard_groups(const struct dp_search_opts *o, const struct dp_cluster *cl, int tp, int dpcp,
                     int zero, enum dp_framework fw, int *out, int cap);

#endif
