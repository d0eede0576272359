/*
 * From a model, a cluster and a layout to what the engine runs (struct
 * dp_sim_input): the schedule, each virtual stage's layers, the cost model's
 * per-operation terms, each stage's data-parallel units and memory terms.
 */
#include "sim.h"

#include <stdlib.h>
#include <string.h>

void dp_sim_opts_default(struct dp_sim_opts *o)
{
    memset(o, 0, sizeof *o);
    o->schedule = DP_SIM_SCHED_AUTO;
    dp_mem_opts_default(&o->mem);
}

void dp_sim_input_release(struct dp_sim_input *in)
{
    if (!in)
        return;
    for (int r = 0; r < DP_MAX_PP; r++) {
        free(in->units[r]);
        in->units[r] = NULL;
        in->nunits[r] = 0;
    }
}

int dp_sim_build(const struct dp_model *m, const struct dp_cluster *cl, const struct dp_layout *lay,
                 const struct dp_sim_opts *o, struct dp_sim_input *in, struct dp_err *err)
{
    memset(in, 0, sizeof *in);
    int rc = dp_layout_validate(lay, m, dp_cluster_gpus(cl), err);
    if (rc)
        return rc;
    /* local_batch: the step is that many schedules of one local batch each, simulated one
     * after another on the layout of one (the cost model's schedules_step) */
    const int64_t nsched = dp_layout_schedules(lay);
    struct dp_layout one = *lay;
    if (nsched > 1) {
        one.gbs = lay->gbs / nsched;
        one.local_batch = 0;
    }
    const struct dp_layout *l = &one;
    in->schedules = nsched;
    /* The units come from dp_time_dp_units at FSDP's granularity (a layer, the ends);
     * DeepSpeed's ZeRO-3 gathers per sub-module, re-gathers part of a recomputed layer for
     * its backward, waits for each fetch and copies through the list API on the host
     * (costmodel/shard.c), which the estimate prices and the units do not carry. */
    if (l->framework == DP_FW_DEEPSPEED && l->zero == 3 && l->dp * l->cp > 1 &&
        (l->list_collectives ||
         (l->recompute == DP_RECOMPUTE_FULL && dp_ds_regather_share(m, l) > 0)))
        in->caveat = "DeepSpeed ZeRO-3's sub-module gathers, their re-gathers under recompute "
                     "and the list API's host copies are priced by the estimate only: the "
                     "simulation issues FSDP's per-layer gathers and reductions, so its "
                     "data-parallel timing is FSDP's";

    if (l->pp > DP_MAX_PP || l->pp * l->vpp > DP_MAX_CHUNKS)
        return dp_err_set(err, DP_EINFEASIBLE,
                          "pp=%d x vpp=%d exceeds the %d model chunks simulated", l->pp, l->vpp,
                          DP_MAX_CHUNKS);
    if (l->tp > cl->gpus_per_node)
        return dp_err_set(err, DP_EINFEASIBLE,
                          "tp=%d crosses nodes (%d GPUs per node): tensor parallelism needs the "
                          "intra-node link",
                          l->tp, cl->gpus_per_node);
    const bool dpv = l->schedule == DP_SCHED_DUALPIPEV;
    if ((o->schedule == DP_SIM_SCHED_DUALPIPEV) != dpv && o->schedule != DP_SIM_SCHED_AUTO)
        return dp_err_set(err, DP_EINFEASIBLE,
                          dpv ? "--schedule %s: the layout's pipeline_schedule is dualpipev, "
                                "whose stages sit in a V (use --schedule auto or dualpipev)"
                              : "--schedule %s: DualPipeV needs a layout with pipeline_schedule "
                                "dualpipev and vpp 2 (`--pipeline-schedule dualpipev --vpp 2`: "
                                "its stages sit in a V)",
                          dp_sim_schedule_name(o->schedule));
    in->pp = l->pp;
    in->vpp = l->vpp;
    in->M = dp_layout_microbatches(l);
    in->schedule = o->schedule;
    /* Megatron overlaps sends with compute only in the interleaved schedule
     * (overlap_p2p_comm), as the cost model does. */
    in->pp_overlap = l->pp_overlap && l->vpp > 1;
    in->v_style = dpv;
    in->zero = l->zero;
    in->layers = (int)m->layers;
    in->moe_from = m->experts > 0 ? (int)m->moe_dense_layers : (int)m->layers;
    in->tp = l->tp;
    in->cp = l->cp;
    in->dp = l->dp;
    in->ranks_per_stage = (long)l->tp * l->cp * l->dp;
    in->stage_rank_stride = in->ranks_per_stage; /* Megatron's order: pp outermost */
    for (int r = 0; r < l->pp; r++)
        for (int c = 0; c < l->vpp; c++) {
            const int s = dp_layout_global_stage(l, r, c);
            dp_layout_chunk_layers(l, m, r, c, &in->chunk_first[s], &in->chunk_count[s]);
        }
    dp_time_ops(m, cl, l, &in->ops);
    for (int r = 0; r < l->pp; r++) {
        dp_mem_terms(m, cl, l, &o->mem, r, &in->mem[r]);
        int n = dp_time_dp_units(m, cl, l, r, &in->dsched[r], NULL, 0);
        if (n <= 0)
            continue;
        in->units[r] = malloc((size_t)n * sizeof *in->units[r]);
        if (!in->units[r]) {
            dp_sim_input_release(in);
            return dp_err_set(err, DP_ENOMEM, "out of memory");
        }
        in->nunits[r] = dp_time_dp_units(m, cl, l, r, &in->dsched[r], in->units[r], n);
    }
    /* a schedule that does not apply is refused before anything runs */
    enum dp_sim_schedule s = o->schedule;
    if (s == DP_SIM_SCHED_AUTO)
        s = dpv          ? DP_SIM_SCHED_DUALPIPEV
            : l->vpp > 1 ? DP_SIM_SCHED_INTERLEAVED
                         : DP_SIM_SCHED_1F1B;
    rc = 0;
    if (s == DP_SIM_SCHED_DUALPIPEV)
        rc = 0; /* the layout's validation checked vpp 2 and the micro-batches */
    else if (s == DP_SIM_SCHED_INTERLEAVED && l->vpp < 2)
        rc = dp_err_set(err, DP_EINFEASIBLE,
                        "the interleaved schedule needs vpp > 1 (model chunks per rank)");
    else if (s != DP_SIM_SCHED_INTERLEAVED && l->vpp > 1)
        rc = dp_err_set(err, DP_EINFEASIBLE,
                        "the %s schedule runs one model chunk per rank, the layout has vpp=%d",
                        dp_sim_schedule_name(s), l->vpp);
    if (rc) {
        dp_sim_input_release(in);
        return rc;
    }
    return 0;
}

int dp_sim_run(const struct dp_model *m, const struct dp_cluster *cl, const struct dp_layout *l,
               const struct dp_sim_opts *o, struct dp_sim_result *out, struct dp_err *err)
{
    memset(out, 0, sizeof *out);
    struct dp_sim_input *in = malloc(sizeof *in);
    if (!in)
        return dp_err_set(err, DP_ENOMEM, "out of memory");
    int rc = dp_sim_build(m, cl, l, o, in, err);
    if (!rc)
        rc = dp_sim_engine(in, o, out, err);
    dp_sim_input_release(in);
    free(in);
    return rc;
}
