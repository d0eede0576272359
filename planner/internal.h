/*
 * planner internals: the layout enumerator shared by the searches.
 */
#ifndef DPLAN_PLANNER_INTERNAL_H
#define DPLAN_PLANNER_INTERNAL_H

#include "planner.h"

/* Called for each candidate layout; return non-zero to stop the enumeration. */
typedef int (*dp__layout_fn)(const struct dp_layout *l, void *ctx);

/*
 * Enumerate layouts of `m` on `gpus` GPUs with `gpus_per_node` per node: tp a
 * power of two within a node dividing heads, kv_heads and ffn; pp an even
 * split; dp the rest; ZeRO 0-3 (2 and 3 only without pp); recompute none,
 * selective, full; sequence parallelism on and off when tp > 1. mbs,
 * seq_len, precision and optimizer come from `base`; gbs too when gbs_fixed,
 * else gbs = mbs * dp * pp. Returns the callback's non-zero value or 0.
 */
int dp__enum_memory_layouts(const struct dp_model *m, int gpus, int gpus_per_node,
                            const struct dp_layout *base, bool gbs_fixed, dp__layout_fn fn,
                            void *ctx);

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

#endif
