/*
 * planner internals shared by the searches.
 */
#ifndef DPLAN_PLANNER_INTERNAL_H
#define DPLAN_PLANNER_INTERNAL_H

#include "planner.h"

/*
 * Pipeline splits of L layers into pp stages: (first, last) stage layer counts, 0
 * meaning "like the middle stages". Even splits, and Megatron-style uneven ones where
 * the first and/or last stage holds 1 or 2 layers fewer than the others (they also
 * hold the embedding and the output layer). Returns the count written to out.
 */
int dp__splits(int L, int pp, bool no_uneven, int out[][2], int cap);

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

/* Whether a framework runs ZeRO stage `zero` with pp and cp, as dp_layout_check_framework
 * rules it (the searches never build a layout the framework refuses). */
bool dp__zero_offered(enum dp_framework fw, int zero, int pp, int cp);
/*
 * Shard-group sizes to try for a layout of `dpcp` data-parallel ranks (x cp) at ZeRO stage
 * `zero` (0 = full sharding): the fixed o->shard_group, or full sharding and the HSDP
 * groups that keep a shard inside 1, 2, 4, ... nodes (powers of two from the node's
 * gpus_per_node / tp ranks, dividing dpcp, below it). Writes out[], returns the count.
 */
int dp__shard_groups(const struct dp_search_opts *o, const struct dp_cluster *cl, int tp, int dpcp,
                     int zero, enum dp_framework fw, int *out, int cap);

#endif
