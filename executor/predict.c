/*
 * The predicted step time of the CPU executor on this machine
 * (dp_exec_predict): the executor's own step code run on a pricing backend.
 * For each pipeline stage a rank is built as for training (the tensor
 * table, the buffer table, the 1F1B schedule), but its backend computes
 * nothing: every operation the model and the schedule call (each GEMM,
 * norm, attention, collective and pipeline message, with its shapes) adds
 * what it costs here, priced with what the probe measured on this machine
 * (backend/cpu_probe.c) and what MPI took in the run. So the prediction
 * follows the executor's call sequence by construction; a new kernel needs
 * only its price below.
 *
 * Why not the GPU step-time model: costmodel/time.c prices GEMMs with cuBLAS
 * 128-wide tile quantisation and a saturating efficiency curve and has no
 * per-call cost; at tiny-gpt's sizes (hidden 64, head_dim 16) that predicted
 * 27 ms for a 3.5 ms step. On a CPU a small product is not starved of tiles
 * but pays a fixed call cost, each parallel region pays an OpenMP fork and
 * join, and element-wise passes run at the bandwidth of the cache level
 * their operands fit in (measured here: ~135 GB/s per thread in L2, ~5 in
 * DRAM). What the two models share: 1F1B's fill and drain (Narayanan et al.
 * 2021, Sec. 2.2) and alpha-beta collectives with the all-reduce factor
 * 2(n-1)/n (nccl-tests doc/PERFORMANCE.md).
 *
 * The pricing backend's buffers are address space reserved without access
 * (PROT_NONE, nothing committed): the step code only does arithmetic on
 * pointers, and any touch of tensor data here would fault rather than go
 * unnoticed.
 */
#include "predict.h"
#include "optime.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static double total(const struct parts *p)
{
    return p->gemm + p->attn + p->ew + p->fork + p->comm + p->opt;
}

static void add(struct parts *a, const struct parts *b, double k)
{
    a->gemm += k * b->gemm;
    a->attn += k * b->attn;
    a->ew += k * b->ew;
    a->fork += k * b->fork;
    a->comm += k * b->comm;
    a->opt += k * b->opt;
    a->core_s += k * b->core_s;
}

/* ------------------------------------------------------------------ a stage's step */

/*
 * One step of a rank of stage `st` (TP and DP rank 0, as every rank of a stage does the
 * same work): *pipe gets the 1F1B pipeline (M micro-batches through the stage with their
 * messages), *step the rest (zeroing, gradient reductions, the loss and norm all-reduce,
 * AdamW, the ZeRO-1 gather).
 */
/* The group sizes of the layout (the embedding group is set per stage). */
static void pricer_sizes(struct pricer *c, const struct dp_model *m, const struct dp_layout *l,
                         int per_node)
{
    const int cp = l->cp > 1 ? l->cp : 1;
    c->seq_len = (double)l->seq_len;
    c->size[DP_GROUP_WORLD] = l->tp * cp * l->dp * l->pp;
    c->size[DP_GROUP_CP] = cp;
    c->size[DP_GROUP_DPCP] = cp * l->dp;
    c->size[DP_GROUP_TP] = l->tp;
    c->size[DP_GROUP_DP] = l->dp;
    c->size[DP_GROUP_PP] = l->pp;
    c->size[DP_GROUP_NODE] = per_node;
    c->size[DP_GROUP_SHARD] = l->zero >= 1 ? dp_layout_shard(l) : 1;
    c->size[DP_GROUP_REPL] = l->zero >= 1 ? dp_layout_replicas(l) : 1;
    /* Experts: core's folding of the stage's tp cp dp ranks (dp_rank_ecoords). */
    const int ep = m->experts > 0 && l->ep > 0 ? l->ep : 1;
    const int etp = m->experts > 0 ? dp_layout_etp(l) : l->tp,
              edp = l->tp * cp * l->dp / (ep * etp);
    const int nrep = c->size[DP_GROUP_REPL];
    c->size[DP_GROUP_EP] = ep;
    c->size[DP_GROUP_ETP] = etp;
    c->size[DP_GROUP_EDP] = edp;
    c->size[DP_GROUP_ESHARD] = nrep > 1 && edp % nrep == 0 ? edp / nrep : edp;
    c->size[DP_GROUP_EREPL] = nrep > 1 && edp % nrep == 0 ? nrep : 1;
}

/* The per-operation timing's clock over the pricer: its bill so far (optime.h). */
static double bill_s(struct dp_backend *be)
{
    return total(&((struct pricer *)be)->bill);
}

static int price_stage(struct pricer *c, const struct dp_model *m, const struct dp_layout *l,
                       int st, struct parts *pipe, struct parts *step, struct dp_err *err)
{
    struct dp_exec *ex = calloc(1, sizeof *ex);
    if (!ex)
        return dp_err_set(err, DP_ENOMEM, "out of memory");
    ex->m = m;
    ex->l = *l;
    dp_exec_opts_default(&ex->o); /* no data: batches are not loaded */
    ex->err = err;
    ex->be = &c->base;
    ex->flash = c->flash && l->cp <= 1;
    /* FP8 GEMMs priced as the CPU backend runs them (predict_ops.c p_gemm_fp8); the bf16
     * store rounding is not priced (dtype fp32 here). */
    ex->fp8 = dp_layout_gemm(l) == DP_GEMM_FP8;
    ex->f8_grad = l->fp8_format == DP_FP8_E4M3 ? DP_F8_E4M3 : DP_F8_E5M2;
    ex->c = (struct dp_coords){.tp_rank = 0, .dp_rank = 0, .pp_rank = st};
    ex->rank = dp_rank_of_cp(&ex->c, l->tp, l->cp, l->dp, l->pp);
    ex->world = l->tp * (l->cp > 1 ? l->cp : 1) * l->dp * l->pp;
    dp__dims_init(ex);
    dp__stage_place(ex, st);
    ex->M = dp_layout_microbatches(l);
    ex->gbs_tokens = l->gbs * l->seq_len;
    c->rank[DP_GROUP_PP] = st;
    c->size[DP_GROUP_EMB] = dp__emb_pair(ex) ? 2 : 0;
    c->rank[DP_GROUP_EMB] = ex->last && l->pp > 1 ? 1 : 0;
    int rc = dp__model_build(ex);
    if (!rc && (rc = dp__mem_build(ex)) == DP_ENOMEM)
        dp_err_prefix(err, "step-time prediction");
    double loss = 0;
    /* With a reuse curve, a step first to leave the buffers where a step leaves them for the
     * next (weights, gradients, optimizer states: the previous step's distances); its bill
     * is dropped. */
    if (!rc && c->pr.reuse.n > 0) {
        c->optimizer = true;
        rc = dp__step_begin(ex);
        c->optimizer = false;
        if (!rc)
            rc = dp__pipeline(ex, 1);
        if (!rc)
            rc = dp__step_reduce(ex, &loss);
        if (!rc)
            rc = dp__optimizer_step(ex, ex->o.lr, 1.0);
        memset(c->pend_used, 0, sizeof c->pend_used);
    }
    /* DPLAN_OPTIME=DIR: the stage's predicted step by operation, in
     * DIR/optime.pred.stageS.tsv, as run.c splits the measured one. */
    const bool optime = !rc && dp__optime_dir() && !dp__optime_wrap(&c->base, bill_s);
    if (!rc) {
        /* The bill starts again at 0; the work since the warm-up step's last synchronisation
         * (its optimizer) is what the first one of this step waits after, with this step's
         * forward and backward (it was dropped with the bill, pricing DP's one wait a step,
         * the gradients' all-reduce after the backward, at nothing). */
        c->last_sync -= total(&c->bill);
        memset(&c->bill, 0, sizeof c->bill);
        if (optime)
            dp__optime_begin(&c->base);
        c->optimizer = true;
        rc = dp__step_begin(ex);
        c->optimizer = false;
        struct parts before = c->bill;
        if (!rc)
            rc = dp__pipeline(ex, 1);
        *pipe = c->bill;
        add(pipe, &before, -1);
        c->optimizer = true;
        if (!rc)
            rc = dp__step_reduce(ex, &loss);
        if (!rc)
            rc = dp__optimizer_step(ex, ex->o.lr, 1.0);
        c->optimizer = false;
        *step = c->bill;
        add(step, pipe, -1);
    }
    if (optime) {
        char name[64];
        snprintf(name, sizeof name, "optime.pred.stage%d", st);
        dp__optime_end(&c->base, total(&c->bill));
        dp__optime_finish(&c->base, name);
    }
    dp__mem_release(ex);
    dp__model_release(ex);
    free(ex);
    return rc;
}

/* The costs as measured beforehand. Attention is priced per head of the shape measured; a
 * causal head costs T^2 d / 2 multiply-adds for the scores and as many for the weighted
 * values (Dao et al. 2022, FlashAttention, Sec. 2: O(T^2 d)), so another shape scales by
 * (T / T0)^2 (d / d0). */
static void measured_costs(const struct dp_exec_costs *k, const struct dp_probe_shape *sh,
                           struct dp_device_probe *p)
{
    memset(p, 0, sizeof *p);
    p->gemm_call_s = k->gemm_call_s;
    p->gemm_gflops = k->gemm_gflops;
    p->conc_eff = k->conc_eff;
    p->fork_s = k->fork_s;
    memcpy(p->bw_gbps, k->bw_gbps, sizeof p->bw_gbps);
    memcpy(p->cache_bytes, k->cache_bytes, sizeof p->cache_bytes);
    double T = (double)sh->seq_len / (double)(k->seq_len > 0 ? k->seq_len : sh->seq_len);
    double d = (double)sh->head_dim / (double)(k->head_dim > 0 ? k->head_dim : sh->head_dim);
    double a = T * T * d;
    p->attn_fwd_s = k->attn_fwd_s * a;
    p->attn_bwd_s = k->attn_bwd_s * a;
    p->attn_probs_s = k->attn_probs_s * a;
    p->act_fwd_ns = k->act_fwd_ns;
    p->act_bwd_ns = k->act_bwd_ns;
    p->norm_fwd_ns = k->norm_fwd_ns;
    p->norm_bwd_ns = k->norm_bwd_ns;
    p->ce_ns = k->ce_ns;
    p->adamw_ns = k->adamw_ns;
    p->swept_gbps = k->swept_gbps;
}

int dp_exec_predict(const struct dp_model *m, const struct dp_layout *l,
                    const struct dp_exec_machine *run, struct dp_exec_prediction *out,
                    struct dp_err *err)
{
    memset(out, 0, sizeof *out);
    struct pricer c;
    memset(&c, 0, sizeof c);
    c.base.ops = &dp__pricing_ops;
    c.base.prices_only = true;
    c.nt = run->threads > 0 ? run->threads : 1;
    c.base.threads = c.nt;
    int per_node = run->ranks_per_node > 0 ? run->ranks_per_node : 1;
    c.shared = per_node > 1;
    c.per_node = per_node;
    c.lockstep_jitter = run->lockstep_jitter > 0 ? run->lockstep_jitter : 0;
    dp__lockstep_table(&c, run->lockstep_ranks, run->lockstep_n, run->lockstep_seg_s,
                       run->lockstep_wait_s);
    c.flash = run->flash;
    struct dp_probe_shape sh = {.threads = c.nt,
                                .concurrent = c.nt * per_node,
                                .seq_len = l->seq_len,
                                .head_dim = (int)m->head_dim,
                                .ffn = m->ffn,
                                .norm = m->norm,
                                .hidden = (int)m->hidden};
    /* A probe now: the kernels after a sweep of the node's buffer tables (cpu_probe.c; its
     * ranks share the L3), this stage's times the ranks on the node. */
    int64_t pools[DP_NPOOLS];
    struct dp_err ignore = {0};
    if (!run->costs && !dp_exec_memory(m, l, 0, pools, &ignore))
        for (int p = 0; p < DP_NPOOLS; p++)
            sh.sweep_bytes += pools[p] * per_node;
    int rc = 0;
    if (run->costs) {
        measured_costs(run->costs, &sh, &c.pr);
        if (run->costs->reuse.n >= 2)
            c.pr.reuse = run->costs->reuse;
    } else if ((rc = dp_exec_probe_device(&sh, &c.pr, err))) {
        return rc;
    }
    memcpy(c.fit_alpha_s, run->coll_alpha_s, sizeof c.fit_alpha_s);
    memcpy(c.fit_busbw_Bps, run->coll_busbw_Bps, sizeof c.fit_busbw_Bps);
    memcpy(c.tab_ranks, run->coll_ranks, sizeof c.tab_ranks);
    memcpy(c.tab_n, run->coll_npoints, sizeof c.tab_n);
    memcpy(c.tab_bytes, run->coll_point_bytes, sizeof c.tab_bytes);
    memcpy(c.tab_s, run->coll_point_s, sizeof c.tab_s);
    /* MPI as measured after the run: the small all-reduce's latency spread over its
     * log2(world) steps; the bus bandwidth from the 1 MiB one. */
    int world = run->world > 1 ? run->world : 1;
    double steps = world > 1 ? ceil(log2((double)world)) : 1;
    c.a_step = run->allreduce_small_s > 0 ? run->allreduce_small_s / steps : 0;
    double big = run->allreduce_1mib_s - run->allreduce_small_s;
    c.coll_bps = world > 1 && big > 0 ? 2.0 * (world - 1) / world * 1048576.0 / big : 1e18;
    pricer_sizes(&c, m, l, per_node);

    /* Per stage: a micro-batch (the pipeline's share of one) and the step's own work;
     * 1F1B paced by the slowest stage. */
    const double M = (double)dp_layout_microbatches(l);
    double sum = 0, tmax = -1, core_s = 0, best_total = -1;
    struct parts best_mb = {0}, best_step = {0};
    for (int st = 0; st < l->pp; st++) {
        struct parts pipe = {0}, step = {0};
        if ((rc = price_stage(&c, m, l, st, &pipe, &step, err))) {
            free(c.maps);
            free(c.fen);
            free(c.fen_val);
            return rc;
        }
        struct parts mb = {0};
        add(&mb, &pipe, 1 / M);
        double t = total(&mb);
        sum += t;
        tmax = t > tmax ? t : tmax;
        double whole = M * t + total(&step);
        if (whole > best_total) {
            best_total = whole;
            best_mb = mb;
            best_step = step;
        }
        core_s += (pipe.core_s + step.core_s) * l->tp * (l->cp > 1 ? l->cp : 1) * l->dp;
    }
    free(c.maps);
    free(c.fen);
    free(c.fen_val);
    double pipe = M * tmax + (sum - tmax);
    struct parts all = {0};
    add(&all, &best_mb, M);
    add(&all, &best_step, 1);
    out->gemm_s = all.gemm;
    out->attention_s = all.attn;
    out->elementwise_s = all.ew;
    out->fork_s = all.fork;
    out->comm_s = all.comm;
    out->optimizer_s = all.opt;
    out->bubble_s = pipe - M * tmax;
    double step = pipe + total(&best_step);
    /* More compute threads than cores: they take turns, and the step lasts at least the
     * core-seconds of every rank over the cores. */
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    double share = cores > 0 ? core_s / (double)cores : 0;
    if (share > step) {
        out->timeshare_s = share - step;
        step = share;
    }
    out->step_s = step;
    return 0;
}

/* ------------------------------------------------------------------ the schedule */

int dp_exec_schedule(const struct dp_model *m, const struct dp_layout *l, int stage, char *out,
                     size_t cap, struct dp_err *err)
{
    if (!cap)
        return dp_err_set(err, DP_EINVAL, "dp_exec_schedule: no room");
    out[0] = 0;
    int rc = dp_layout_validate(l, m, 0, err);
    if (rc)
        return rc;
    if (stage < 0 || stage >= l->pp)
        return dp_err_set(err, DP_EINVAL, "stage %d: the layout has %d stages", stage, l->pp);
    /* The pricing backend with unit rates: only the order of the calls is kept. */
    struct pricer c;
    memset(&c, 0, sizeof c);
    c.base.ops = &dp__pricing_ops;
    c.base.prices_only = true;
    c.nt = c.base.threads = 1;
    c.pr.gemm_gflops = c.pr.conc_eff = 1;
    for (int i = 0; i < 3; i++)
        c.pr.bw_gbps[i] = 1;
    c.pr.cache_bytes[0] = c.pr.cache_bytes[1] = 1;
    c.coll_bps = 1e18;
    pricer_sizes(&c, m, l, 1);
    struct dp_exec *ex = calloc(1, sizeof *ex);
    if (!ex)
        return dp_err_set(err, DP_ENOMEM, "out of memory");
    ex->m = m;
    ex->l = *l;
    dp_exec_opts_default(&ex->o);
    ex->err = err;
    ex->be = &c.base;
    ex->c = (struct dp_coords){.tp_rank = 0, .dp_rank = 0, .pp_rank = stage};
    ex->rank = dp_rank_of_cp(&ex->c, l->tp, l->cp, l->dp, l->pp);
    ex->world = l->tp * (l->cp > 1 ? l->cp : 1) * l->dp * l->pp;
    dp__dims_init(ex);
    dp__stage_place(ex, stage);
    ex->M = dp_layout_microbatches(l);
    ex->gbs_tokens = l->gbs * l->seq_len;
    c.rank[DP_GROUP_PP] = stage;
    c.size[DP_GROUP_EMB] = dp__emb_pair(ex) ? 2 : 0;
    c.rank[DP_GROUP_EMB] = ex->last && l->pp > 1 ? 1 : 0;
    ex->trace = out;
    ex->trace_cap = cap;
    rc = dp__model_build(ex);
    if (!rc)
        rc = dp__mem_build(ex);
    if (!rc)
        rc = dp__step_begin(ex);
    if (!rc)
        rc = dp__pipeline(ex, 1);
    dp__mem_release(ex);
    dp__model_release(ex);
    free(ex);
    free(c.maps);
    free(c.fen);
    free(c.fen_val);
    return rc;
}
