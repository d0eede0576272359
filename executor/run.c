/*
 * The training loop of one rank: set up the backend and the model, run the
 * steps (forward/backward, gradient norm, clipping, AdamW), report each step
 * through the caller's callback, write the weights, and gather the per-rank
 * summary on rank 0. Also what the executor supports (dp_exec_check) and the
 * heartbeat a watchdog reads.
 */
#include "internal.h"
#include "optime.h"

#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* ------------------------------------------------------------------ heartbeat */

static _Atomic uint64_t beat_count;
static _Atomic(const char *) beat_what = "starting";
static _Atomic int beat_step;

void dp__beat(const char *what)
{
    if (what)
        atomic_store(&beat_what, what);
    atomic_fetch_add(&beat_count, 1);
}

uint64_t dp_exec_heartbeat(const char **what, int *step)
{
    if (what)
        *what = atomic_load(&beat_what);
    if (step)
        *step = atomic_load(&beat_step);
    return atomic_load(&beat_count);
}

const char *dp_exec_dtype(void)
{
    return DP__DTYPE;
}

void dp_exec_finalize(void)
{
    dp__backend_finalize();
}

void dp_exec_abort(int code)
{
    dp__backend_abort(code);
}

bool dp_exec_backend_known(const char *name)
{
    return dp__backend_kind(name) != NULL;
}

const char *dp_exec_backend_names(void)
{
    return dp__backend_names();
}

const char *dp_exec_rank_env(const char *backend)
{
    const struct dp_backend_kind *k = dp__backend_kind(backend);
    return k && k->rank_env ? k->rank_env() : NULL;
}

/* ------------------------------------------------------------------ options, checks */

static const char *const attn_names[] = {"auto", "math", "flash"};

const char *dp_exec_attn_name(enum dp_exec_attn a)
{
    return (unsigned)a < 3 ? attn_names[a] : "?";
}

bool dp_exec_attn_flash(const char *backend, enum dp_exec_attn a)
{
    const struct dp_backend_kind *k = dp__backend_kind(backend);
    return a == DP_EXEC_ATTN_FLASH || (a == DP_EXEC_ATTN_AUTO && k && k->flash_default);
}

int dp_exec_attn_parse(const char *s, enum dp_exec_attn *out)
{
    for (int i = 0; i < 3; i++)
        if (s && !strcmp(s, attn_names[i])) {
            *out = (enum dp_exec_attn)i;
            return 0;
        }
    return -1;
}

void dp_exec_opts_default(struct dp_exec_opts *o)
{
    memset(o, 0, sizeof *o);
    o->steps = 50;
    o->seed = 1234;
    o->lr = 1e-3;
    o->warmup_steps = 0;
    o->min_lr_frac = 0.1;
    o->weight_decay = 0.1;
    o->beta1 = 0.9;
    o->beta2 = 0.95;
    o->eps = 1e-8;
    o->grad_clip = 1.0;
    o->precision = DP_FP32;
}

int dp_exec_check_precision(const struct dp_model *m, const struct dp_layout *l,
                            enum dp_precision p, struct dp_err *err)
{
    if (l && dp_layout_gemm(l) == DP_GEMM_FP8) {
        /* FP8 GEMMs (executor/README.md "Mixed precision"): Transformer Engine's current
         * per-tensor scaling over bf16 storage; the other recipes keep state (delayed: an
         * amax history per tensor) or scales per block that no backend op carries. */
        if (p != DP_BF16)
            return dp_err_set(err, DP_EINFEASIBLE,
                              "precision fp8: FP8 GEMMs store in bf16, got %s storage",
                              dp_precision_name(p));
        if (l->fp8_recipe != DP_FP8_CURRENT)
            return dp_err_set(err, DP_EINFEASIBLE,
                              "fp8 recipe %s: the executor runs current per-tensor scaling only "
                              "(--fp8-recipe current)",
                              dp_fp8_recipe_name(l->fp8_recipe));
        if (l->fp8_params)
            return dp_err_set(err, DP_EINFEASIBLE,
                              "fp8 params: the executor keeps bf16 weights (FP8 copies are made "
                              "per GEMM)");
        if (l->fp8_attention)
            return dp_err_set(err, DP_EINFEASIBLE,
                              "fp8 attention: the executor runs its attention in the storage "
                              "precision (fp8_attention false)");
    }
    if (p == DP_FP32)
        return 0;
    const char *name = l && dp_layout_gemm(l) == DP_GEMM_FP8 ? "fp8" : dp_precision_name(p);
    if (p != DP_BF16 && p != DP_FP16)
        return dp_err_set(err, DP_EINFEASIBLE,
                          "precision %s: the executor stores bf16, fp16 or "
                          "fp32",
                          name);
    /* bf16 / fp16: every layer kind has its store points (model.c, moe.c); FP8 GEMMs
     * are the dense layers' only (moe.c's expert GEMMs would run bf16). */
    if (m->experts > 0 && l && dp_layout_gemm(l) == DP_GEMM_FP8)
        return dp_err_set(err, DP_EINFEASIBLE,
                          "precision fp8: mixture-of-experts layers have no FP8 GEMMs yet");
    return 0;
}

int dp_exec_check(const struct dp_model *m, const struct dp_layout *l, int world,
                  struct dp_err *err)
{
    struct dp_err lerr = {0};
    if (dp_layout_validate(l, m, world > 0 ? world : 0, &lerr))
        return dp_err_set(err, DP_EINFEASIBLE, "layout: %s", lerr.msg);
    if (m->experts > 0) {
        /* What the MoE code (moe.c) runs: one line per limit. */
        const int etp = dp_layout_etp(l);
        if (etp > l->tp || l->tp % etp)
            return dp_err_set(err, DP_EINFEASIBLE,
                              "layout: etp=%d: the CPU executor splits experts within a TP group "
                              "(etp must divide tp=%d)",
                              etp, l->tp);
        if (etp < l->tp && !l->sp)
            return dp_err_set(err, DP_EINFEASIBLE,
                              "layout: etp=%d < tp=%d without sp: the TP ranks hold the same "
                              "tokens (Megatron-Core requires sequence parallelism for MoE with "
                              "tp > 1)",
                              etp, l->tp);
        /* Capacity with cp > 1 drops over the whole micro-batch (moe.c cp_keep); with
         * etp < tp a rank routes part of its TP group's tokens, which it does not do. */
        if (etp < l->tp && l->moe_capacity > 0)
            return dp_err_set(err, DP_EINFEASIBLE,
                              "layout: etp=%d with moe_capacity: the CPU executor runs experts "
                              "that route part of a micro-batch dropless (the drop order is over "
                              "the whole micro-batch)",
                              etp);
        /* HSDP with experts in their own group: as many expert instances as dense replicas
         * (groups.h), so the replicas must divide the expert-data-parallel ranks. */
        const int edp = dp_layout_edp(l), nrep = dp_layout_replicas(l);
        if (l->zero >= 1 && nrep > 1 && (l->ep > 1 || etp != l->tp) && edp % nrep)
            return dp_err_set(err, DP_EINFEASIBLE,
                              "layout: shard_group=%d with ep=%d etp=%d: the %d replicas do not "
                              "divide the %d expert-data-parallel ranks",
                              dp_layout_shard(l), l->ep, etp, nrep, edp);
        if (m->mlp_bias && m->moe_shared_experts > 0)
            return dp_err_set(err, DP_EINFEASIBLE,
                              "model %s: mlp_bias with shared experts: the CPU executor's shared "
                              "experts have no biases (the routed experts have)",
                              m->name);
        /* The router bias, the shared gate and the experts' biases assume that the TP
         * ranks route the same tokens (moe.c); not yet folded with etp < tp. */
        if (etp < l->tp && (m->moe_router_bias || m->moe_shared_gate || m->mlp_bias))
            return dp_err_set(err, DP_EINFEASIBLE,
                              "layout: etp=%d < tp=%d with %s: the CPU executor runs it with "
                              "etp = tp only",
                              etp, l->tp,
                              m->moe_router_bias   ? "moe.router_bias"
                              : m->moe_shared_gate ? "moe.shared_gate"
                                                   : "expert biases (mlp_bias)");
    }
    /* Full recompute of only some layers per stage (Megatron --recompute-method block). */
    int most = 0;
    for (int s = 0; s < l->pp; s++)
        most = dp_layout_stage_layers(l, m, s) > most ? dp_layout_stage_layers(l, m, s) : most;
    if (l->recompute == DP_RECOMPUTE_FULL && l->recompute_layers > 0 && l->recompute_layers < most)
        return dp_err_set(err, DP_EINFEASIBLE,
                          "layout: recompute_layers=%d: the CPU executor recomputes every layer "
                          "of a stage under full recompute (recompute_layers 0)",
                          l->recompute_layers);
    for (int r = 0; l->vpp > 1 && r < l->pp; r++)
        for (int c = 0; c < l->vpp; c++)
            if (dp_layout_chunk_count(l, m, r, c) == 0)
                return dp_err_set(err, DP_EINFEASIBLE,
                                  "layout: vpp=%d: model chunk %d of stage %d holds no "
                                  "transformer layer (the embedding or the loss alone): the CPU "
                                  "executor needs at least one per chunk",
                                  l->vpp, c, r);
    for (int r = 0; r < l->pp; r++)
        if (dp_layout_stage_layers(l, m, r) == 0)
            return dp_err_set(err, DP_EINFEASIBLE,
                              "layout: stage %d holds no transformer layer (the embedding or the "
                              "loss alone): the CPU executor needs at least one per stage",
                              r);
    if (l->mtp_layers > 0)
        return dp_err_set(err, DP_EINFEASIBLE,
                          "layout: mtp_layers=%d: the CPU executor trains the next-token loss "
                          "only (no multi-token prediction)",
                          l->mtp_layers);
    if (l->optimizer != DP_OPT_ADAM)
        return dp_err_set(err, DP_EINFEASIBLE,
                          "layout: optimizer=%s: the CPU executor trains with AdamW only",
                          dp_optimizer_name(l->optimizer));
    if (l->optimizer_dtype != DP_FP32)
        return dp_err_set(err, DP_EINFEASIBLE,
                          "layout: optimizer_dtype=%s: the CPU executor keeps fp32 optimizer "
                          "states only",
                          dp_precision_name(l->optimizer_dtype));
    if (m->pos == DP_POS_ALIBI)
        return dp_err_set(err, DP_EINFEASIBLE,
                          "model %s: ALiBi positions are not supported by the CPU executor "
                          "(learned or rope)",
                          m->name);
    if (m->mla)
        return dp_err_set(err, DP_EINFEASIBLE,
                          "model %s: multi-head latent attention (mla) is not supported by the CPU "
                          "executor",
                          m->name);
    if (m->window > 0 && m->window_layers > 0 && m->window < l->seq_len)
        return dp_err_set(err, DP_EINFEASIBLE,
                          "model %s: sliding-window attention (sliding_window=%lld) is not "
                          "supported by the CPU executor (full causal attention only)",
                          m->name, (long long)m->window);
    if (m->attn_sinks)
        return dp_err_set(err, DP_EINFEASIBLE,
                          "model %s: attention sinks are not supported by the CPU executor",
                          m->name);
    if (m->qk_norm_full)
        return dp_err_set(
            err, DP_EINFEASIBLE,
            "model %s: q/k norms over all heads (qk_norm_full: OLMo 2, OLMoE) are not "
            "supported by the CPU executor (per-head q/k norms only)",
            m->name);
    if (m->norms_per_layer != 2)
        return dp_err_set(err, DP_EINFEASIBLE,
                          "model %s: norms_per_layer=%d (parallel attention) is not supported by "
                          "the CPU executor",
                          m->name, m->norms_per_layer);
    if (m->pos == DP_POS_LEARNED && l->seq_len > m->max_pos)
        return dp_err_set(err, DP_EINFEASIBLE,
                          "layout: seq_len=%lld exceeds the model's max_position=%lld",
                          (long long)l->seq_len, (long long)m->max_pos);
    if (m->pos == DP_POS_ROPE && m->head_dim % 2)
        return dp_err_set(err, DP_EINFEASIBLE, "model %s: rope needs an even head_dim, got %lld",
                          m->name, (long long)m->head_dim);
    if (m->vocab > 65536)
        return dp_err_set(err, DP_EINFEASIBLE,
                          "model %s: vocab=%lld: token files hold uint16 tokens (vocab <= 65536)",
                          m->name, (long long)m->vocab);
    /* GEMM dimensions are ints. */
    int64_t N = l->mbs * l->seq_len;
    int64_t big = N * (m->heads * m->head_dim + 2 * m->kv_heads * m->head_dim);
    if (N > (1LL << 30) || big > (1LL << 31) - 1 ||
        dp_padded_vocab(m->vocab, l->tp) * m->hidden > (1LL << 31) - 1)
        return dp_err_set(err, DP_EINFEASIBLE,
                          "layout: mbs*seq_len = %lld tokens is too large for one micro-batch",
                          (long long)N);
    return 0;
}

/* ------------------------------------------------------------------ setup */

void dp__dims_init(struct dp_exec *ex)
{
    const struct dp_model *m = ex->m;
    const struct dp_layout *l = &ex->l;
    struct dp_dims *dm = &ex->dm;
    dm->tp = l->tp;
    dm->tp_rank = ex->c.tp_rank;
    dm->sp = l->sp && l->tp > 1;
    dm->B = l->mbs;
    dm->cp = l->cp > 1 ? l->cp : 1;
    dm->cp_rank = ex->c.cp_rank;
    dm->Tg = l->seq_len;
    dm->T = l->seq_len / dm->cp; /* the local rows of each sequence (cp.c) */
    dm->C = dm->T / 2;
    dm->N = dm->B * dm->T;
    dm->Nl = dm->sp ? dm->N / l->tp : dm->N;
    dm->h = m->hidden;
    dm->d = m->head_dim;
    dm->a = (int)(m->heads / l->tp);
    dm->g = (int)(m->kv_heads / l->tp);
    dm->qd = dm->a * dm->d;
    dm->kvd = dm->g * dm->d;
    dm->qkvd = dm->qd + 2 * dm->kvd;
    dm->f = m->ffn_hidden / l->tp;
    dm->F1 = m->ffn == DP_FFN_SWIGLU ? 2 * dm->f : dm->f;
    dm->vocab = m->vocab;
    dm->Vp = dp_padded_vocab(m->vocab, l->tp);
    dm->Vl = dm->Vp / l->tp;
    dm->v0 = dm->tp_rank * dm->Vl;
    if (m->experts > 0) {
        /* moe.c: the experts over EP by index and over ETP by width (core's expert
         * folding); the shared experts split over TP as the dense MLP. */
        struct dp_ecoords f;
        dp_rank_ecoords(&ex->c, l->tp, l->cp, l->dp, l->ep, dp_layout_etp(l), &f);
        dm->etp = f.etp, dm->ep = f.ep, dm->edp = f.edp;
        dm->etp_rank = f.etp_rank, dm->ep_rank = f.ep_rank, dm->edp_rank = f.edp_rank;
        /* EDP equals DP x CP only when the experts split as the dense MLP, ep = 1. */
        dm->esplit = f.ep > 1 || f.etp != l->tp;
        /* The routed tokens: those of the expert tensor group. With etp = tp every TP rank
         * routes the whole gathered micro-batch; with etp < tp (sequence parallel, run.c
         * dp_exec_check) the etp consecutive TP ranks of a group route their etp slices of
         * Nl rows together, as Megatron's dispatcher gathers them over the expert tensor
         * group after the all-to-all. */
        dm->Nb = f.etp < l->tp ? f.etp * dm->Nl : dm->N;
        dm->b0 = f.etp < l->tp ? (dm->tp_rank / f.etp) * dm->Nb : 0;
        const int64_t N = dm->Nb, K = m->top_k, E = m->experts, ep = f.ep;
        dm->E = (int)E;
        dm->K = (int)K;
        dm->El = (int)(E / ep);
        dm->e0 = (int)(f.ep_rank * dm->El);
        dm->fe = m->moe_ffn_hidden / f.etp;
        dm->Fe1 = m->ffn == DP_FFN_SWIGLU ? 2 * dm->fe : dm->fe;
        dm->sf = m->moe_shared_experts * m->moe_shared_ffn_hidden / l->tp;
        dm->Sf1 = m->ffn == DP_FFN_SWIGLU ? 2 * dm->sf : dm->sf;
        /* Megatron-Core get_capacity: ceil(N K / E * capacity_factor), N the whole
         * micro-batch's tokens (cp N under CP: moe.c drops over the whole micro-batch). */
        const int64_t Ng = N * dm->cp;
        dm->cap =
            l->moe_capacity > 0 ? (int64_t)ceil((double)(Ng * K) / (double)E * l->moe_capacity) : 0;
        dm->R = dm->cap > 0 && E * dm->cap < N * K ? E * dm->cap : N * K;
        /* From each of the ep ranks: a token picks each local expert at most once
         * (min(K, El) rows per token), and capacity bounds each expert's rows. */
        int64_t per = N * (K < dm->El ? K : dm->El);
        if (dm->cap > 0 && dm->El * dm->cap < per)
            per = dm->El * dm->cap;
        dm->Rx = ep * per;
    }
}

void dp__exec_free(struct dp_exec *ex)
{
    if (!ex)
        return;
    dp__mem_release(ex);
    dp__model_release(ex);
    dp__ckpt_free(ex);
    free(ex->host_tok);
    if (ex->be)
        ex->be->ops->destroy(ex->be);
    free(ex);
}

/* A "Vm...:" field of /proc/self/status in bytes (VmHWM: the resident high-water mark). */
static int64_t proc_status_bytes(const char *key)
{
    char line[256];
    long kb = 0;
    size_t n = strlen(key);
    FILE *f = fopen("/proc/self/status", "r");
    if (!f)
        return 0;
    while (fgets(line, sizeof line, f))
        if (strncmp(line, key, n) == 0 && sscanf(line + n, "%ld", &kb) == 1)
            break;
    fclose(f);
    return (int64_t)kb * 1024;
}

/* The resident baseline: VmRSS now, and VmHWM reset to it ("5" to clear_refs, Linux
 * Documentation/filesystems/proc.rst) so that a peak reached before (start-up, the plan
 * and data loaded and freed) does not count. */
static void rss_baseline(struct dp_exec *ex)
{
    FILE *f = fopen("/proc/self/clear_refs", "w");
    ex->hwm_reset = f && fputs("5", f) >= 0;
    if (f && fclose(f) != 0)
        ex->hwm_reset = false;
    ex->rss_base = proc_status_bytes("VmRSS:");
}

/*
 * Before anything large is allocated: the buffer table's bytes (memplan.c, per rank and
 * pool) summed over the ranks of each node against that node's MemAvailable.
 * Every rank gets the verdict and the worst node's numbers, so that rank 0 reports it.
 */
static int check_memory(struct dp_exec *ex)
{
    double node[DP_NPOOLS];
    for (int p = 0; p < DP_NPOOLS; p++)
        node[p] = (double)ex->predicted[p];
    TRY(OPS->allreduce_host(ex->be, DP_GROUP_NODE, node, DP_NPOOLS, DP_OP_SUM, ex->err));
    double need = 0;
    for (int p = 0; p < DP_NPOOLS; p++)
        need += node[p];
    int64_t avail = dp__mem_available();
    double ratio = avail > 0 ? need / (double)avail : 0, worst = ratio;
    TRY(OPS->allreduce_host(ex->be, DP_GROUP_WORLD, &worst, 1, DP_OP_MAX, ex->err));
    if (worst <= 1)
        return 0;
    /* The worst node's pools, MemAvailable and rank count, from its first rank. */
    double rep[DP_NPOOLS + 2] = {0};
    if (ratio == worst && OPS->group_rank(ex->be, DP_GROUP_NODE) == 0) {
        memcpy(rep, node, sizeof node);
        rep[DP_NPOOLS] = (double)avail;
        rep[DP_NPOOLS + 1] = OPS->group_size(ex->be, DP_GROUP_NODE);
    }
    TRY(OPS->allreduce_host(ex->be, DP_GROUP_WORLD, rep, DP_NPOOLS + 2, DP_OP_MAX, ex->err));
    const double gib = 1024.0 * 1024 * 1024;
    double state = rep[DP_POOL_PARAMS] + rep[DP_POOL_GRADS] + rep[DP_POOL_OPTIM], total = 0;
    for (int p = 0; p < DP_NPOOLS; p++)
        total += rep[p];
    double act = total - state;
    int nr = (int)rep[DP_NPOOLS + 1];
    char hint[256];
    if (act >= state)
        snprintf(hint, sizeof hint,
                 "the activations grow with mbs=%lld and seq_len=%lld: lower --mbs or "
                 "--seq-len, or use --recompute full",
                 (long long)ex->l.mbs, (long long)ex->l.seq_len);
    else
        snprintf(hint, sizeof hint,
                 "weights, gradients and AdamW state take 16 bytes per parameter and replica: "
                 "fewer replicas per node (--zero 1, 2, 3 shard the optimizer state, gradients, "
                 "parameters), more nodes, or "
                 "a smaller model");
    return dp_err_set(ex->err, DP_EINFEASIBLE,
                      "%s: the run needs %.1f GiB of memory on %s (%d rank%s; params %.1f, grads "
                      "%.1f, optimizer %.1f, activations %.1f GiB, as the CPU memory model "
                      "predicts), but MemAvailable is %.1f GiB: %s",
                      ex->m->name, total / gib, ratio == worst ? "this node" : "one node", nr,
                      nr == 1 ? "" : "s", rep[DP_POOL_PARAMS] / gib, rep[DP_POOL_GRADS] / gib,
                      rep[DP_POOL_OPTIM] / gib, act / gib, rep[DP_NPOOLS] / gib, hint);
}

int dp__exec_new(const struct dp_model *m, const struct dp_layout *l, const struct dp_exec_opts *o,
                 struct dp_exec **out, struct dp_err *err)
{
    *out = NULL;
    struct dp_exec *ex = calloc(1, sizeof *ex);
    if (!ex)
        return dp_err_set(err, DP_ENOMEM, "out of memory");
    ex->m = m;
    ex->l = *l;
    ex->o = *o;
    ex->err = err;
    struct dp_backend_cfg cfg = {.tp = l->tp,
                                 .dp = l->dp,
                                 .pp = l->pp,
                                 .cp = l->cp,
                                 .shard = l->zero >= 1 ? dp_layout_shard(l) : l->dp,
                                 .ep = m->experts > 0 ? l->ep : 1,
                                 .etp = m->experts > 0 ? dp_layout_etp(l) : l->tp,
                                 .threads = o->threads,
                                 .dtype = o->precision == DP_BF16   ? DP_DT_BF16
                                          : o->precision == DP_FP16 ? DP_DT_FP16
                                                                    : DP_DT_FP32,
                                 .fp8 = dp_layout_gemm(l) == DP_GEMM_FP8};
    int prc = dp_exec_check_precision(m, l, o->precision, err);
    if (prc) {
        free(ex);
        return prc;
    }
    ex->dtype = cfg.dtype;
    ex->fp8 = cfg.fp8;
    ex->f8_grad = l->fp8_format == DP_FP8_E4M3 ? DP_F8_E4M3 : DP_F8_E5M2;
    ex->ls_scale = o->loss_scale_init > 0 ? o->loss_scale_init : DP_LS_INIT;
    ex->ls_hyst = DP_LS_HYSTERESIS;
    ex->be = dp__backend_new(o->backend, &cfg, err);
    if (!ex->be) {
        free(ex);
        return err->code ? err->code : DP_ERUNTIME;
    }
    /* A backend may leave out the operations of knobs it does not run yet (the cpu and
     * cuda backends have them all; a later backend may not): refuse the layout here, on
     * every rank alike, rather than call a missing operation. */
    const char *missing = NULL;
    if (l->cp > 1 && (!ex->be->ops->attn_ring_fwd || !ex->be->ops->attn_ring_bwd))
        missing = "cp > 1 (ring attention)";
    else if (m->qk_norm && (!ex->be->ops->qk_norm_fwd || !ex->be->ops->qk_norm_bwd))
        missing = "qk_norm (q/k RMSNorm)";
    else if (l->vpp > 1 && !ex->be->ops->p2p)
        missing = "vpp > 1 (batched point-to-point)";
    else if (l->zero >= 3 && !ex->be->ops->allgather_v_start)
        missing = "zero 3 (the prefetching parameter gather)";
    else if (ex->dtype != DP_DT_FP32 && !ex->be->ops->round_store)
        missing = ex->dtype == DP_DT_BF16 ? "precision bf16 (its store rounding)"
                                          : "precision fp16 (its store rounding)";
    else if (ex->fp8 && !ex->be->ops->gemm_fp8)
        missing = "precision fp8 (FP8 GEMMs)";
    else if (m->experts > 0 &&
             (!ex->be->ops->router_topk || !ex->be->ops->router_bwd || !ex->be->ops->rows_gather ||
              !ex->be->ops->rows_scatter_add || !ex->be->ops->rows_dot || !ex->be->ops->alltoall_v))
        missing = "mixture of experts (router, dispatch and all-to-all)";
    /* The working copy in 2-byte words needs pack / unpack; without them (or under the
     * test hook DPLAN_TEST_STORE_FP32=1, tests/executor/storage.sh) it is kept in fp32. */
    const char *emul = getenv("DPLAN_TEST_STORE_FP32");
    ex->pw_emul = (emul && !strcmp(emul, "1")) || !ex->be->ops->pack || !ex->be->ops->unpack;
    ex->pwwin_layer = -1;
    ex->stash16 = dp__stash16_on(ex);
    /* The attention: flash where asked or by the backend's default (CP runs its ring
     * attention, which keeps only the log-sum-exp already). */
    const bool has_flash = ex->be->ops->attn_flash_fwd && ex->be->ops->attn_flash_bwd;
    ex->flash = l->cp <= 1 && dp_exec_attn_flash(o->backend, o->attention);
    if (!missing && ex->flash && !has_flash)
        missing = "attention flash (attn_flash_fwd / attn_flash_bwd)";
    if (missing) {
        dp_err_set(err, DP_EINFEASIBLE, "layout: %s: the %s backend does not run it yet", missing,
                   ex->be->ops->name);
        ex->be->ops->destroy(ex->be);
        free(ex);
        return DP_EINFEASIBLE;
    }
    ex->rank = ex->be->rank;
    ex->world = ex->be->world;
    dp_rank_coords_cp(ex->rank, l->tp, l->cp, l->dp, l->pp, &ex->c);
    dp__dims_init(ex);
    dp__stage_place(ex, ex->c.pp_rank);
    ex->M = dp_layout_microbatches(l);
    ex->gbs_tokens = l->gbs * l->seq_len;
    int rc = dp__model_build(ex);
    if (!rc) {
        struct dp__memplan plan;
        dp__memplan(ex, &plan);
        memcpy(ex->predicted, plan.pool_bytes, sizeof ex->predicted);
        rc = check_memory(ex);
        /* A device backend reserves the plan's bytes now (its arena): backend.h. */
        int64_t need = 0;
        for (int p = 0; p < DP_NPOOLS; p++)
            need += ex->predicted[p];
        if (!rc && OPS->reserve)
            rc = OPS->reserve(ex->be, (size_t)need, err);
    }
    if (!rc && !(ex->host_tok = malloc((size_t)(2 * ex->dm.N) * sizeof(int32_t))))
        rc = dp_err_set(err, DP_ENOMEM, "out of memory");
    if (!rc)
        rss_baseline(ex);
    if (!rc)
        rc = dp__mem_build(ex);
    if (!rc)
        dp__model_init(ex);
    if (rc) {
        dp__exec_free(ex);
        return rc;
    }
    *out = ex;
    return 0;
}

/* ------------------------------------------------------------------ the loop */

static int64_t rss_now(void)
{
    long pages = 0, resident = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    if (!f)
        return 0;
    if (fscanf(f, "%ld %ld", &pages, &resident) != 2)
        resident = 0;
    fclose(f);
    return (int64_t)resident * sysconf(_SC_PAGESIZE);
}

static int64_t rss_peak(void)
{
    char line[256];
    long kb = 0;
    FILE *f = fopen("/proc/self/status", "r");
    if (!f)
        return 0;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "VmHWM: %ld", &kb) == 1)
            break;
    fclose(f);
    return (int64_t)kb * 1024;
}

/* Linear warm-up, then cosine decay to lr * min_lr_frac at the last step. */
static double lr_at(const struct dp_exec_opts *o, int step)
{
    if (o->warmup_steps > 0 && step <= o->warmup_steps)
        return o->lr * (double)step / (double)o->warmup_steps;
    int span = o->steps - o->warmup_steps;
    if (span <= 1 || o->min_lr_frac >= 1.0)
        return o->lr;
    double t = (double)(step - o->warmup_steps - 1) / (double)(span - 1);
    double lo = o->lr * o->min_lr_frac;
    return lo + 0.5 * (o->lr - lo) * (1.0 + cos(3.141592653589793 * t));
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Every rank's summary to rank 0 (as doubles: exact below 2^53 bytes). */
enum { SUM_FIELDS = 6 + 2 * DP_NPOOLS + 8 };
static int gather_summary(struct dp_exec *ex, const double *times, int n,
                          struct dp_exec_result *res)
{
    double mine[SUM_FIELDS], *all = NULL;
    double mean = 0, med = 0;
    int from = n > 1 ? 1 : 0; /* skip the first step when there are others */
    if (n > from) {
        double *t = malloc((size_t)(n - from) * sizeof *t);
        if (!t)
            return dp_err_set(ex->err, DP_ENOMEM, "out of memory");
        for (int i = from; i < n; i++) {
            t[i - from] = times[i];
            mean += times[i];
        }
        mean /= (double)(n - from);
        qsort(t, (size_t)(n - from), sizeof *t, cmp_double);
        int k = n - from;
        med = k % 2 ? t[k / 2] : 0.5 * (t[k / 2 - 1] + t[k / 2]);
        free(t);
    }
    int j = 0;
    mine[j++] = ex->rank;
    mine[j++] = ex->c.pp_rank;
    mine[j++] = ex->c.tp_rank;
    mine[j++] = ex->c.dp_rank;
    mine[j++] = mean;
    mine[j++] = med;
    for (int p = 0; p < DP_NPOOLS; p++)
        mine[j++] = (double)ex->mem.peak[p];
    for (int p = 0; p < DP_NPOOLS; p++)
        mine[j++] = (double)ex->predicted[p];
    mine[j++] = (double)rss_peak();
    mine[j++] = (double)ex->rss_base;
    mine[j++] = (double)ex->rss_train_peak;
    mine[j++] = (double)ex->mem.reserved;
    mine[j++] = ex->hwm_reset;
    mine[j++] = ex->dp_exposed_n ? ex->dp_exposed_sum / ex->dp_exposed_n : 0.0;
    mine[j++] = ex->ov;
    mine[j++] = ex->grads ? (double)(ex->nflat * sizeof(real)) : 0.0;
    if (ex->rank == 0) {
        all = malloc((size_t)ex->world * SUM_FIELDS * sizeof *all);
        res->ranks = calloc((size_t)ex->world, sizeof *res->ranks);
        if (!all || !res->ranks) {
            free(all);
            return dp_err_set(ex->err, DP_ENOMEM, "out of memory");
        }
    }
    int rc = ex->be->ops->gather_host(ex->be, DP_GROUP_WORLD, mine, all, SUM_FIELDS, ex->err);
    if (!rc && ex->rank == 0)
        for (int r = 0; r < ex->world; r++) {
            const double *v = all + (size_t)r * SUM_FIELDS;
            struct dp_rank_summary *s = &res->ranks[r];
            int k = 0;
            s->rank = (int)v[k++];
            s->stage = (int)v[k++];
            s->tp_rank = (int)v[k++];
            s->dp_rank = (int)v[k++];
            s->step_time_mean_s = v[k++];
            s->step_time_median_s = v[k++];
            for (int p = 0; p < DP_NPOOLS; p++)
                s->pool_peak_bytes[p] = (int64_t)v[k++];
            for (int p = 0; p < DP_NPOOLS; p++)
                s->pool_predicted_bytes[p] = (int64_t)v[k++];
            s->rss_peak_bytes = (int64_t)v[k++];
            s->rss_base_bytes = (int64_t)v[k++];
            s->rss_train_peak_bytes = (int64_t)v[k++];
            s->reserved_bytes = (int64_t)v[k++];
            s->rss_peak_since_base = v[k++] != 0;
            s->dp_exposed_mean_s = v[k++];
            s->dp_overlap = v[k++] != 0;
            s->flat_grads_bytes = (int64_t)v[k++];
        }
    free(all);
    return rc;
}

/* MPI on this machine as the run used it: medians of all-reduces over every rank of one
 * double (latency) and of 1 MiB (bandwidth), after the last step. Collective. */
static int probe_comm(struct dp_exec *ex, struct dp_exec_result *res)
{
    if (ex->world <= 1)
        return 0;
    enum { SMALL = 30, LARGE = 7, NBIG = 1 << 18 };
    double t[SMALL], x = 0;
    real *buf = OPS->alloc(ex->be, NBIG * sizeof(real));
    if (!buf)
        return dp_err_set(ex->err, DP_ENOMEM, "out of memory");
    int rc = 0;
    for (int i = 0; i < SMALL && !rc; i++) {
        double t0 = OPS->wtime(ex->be);
        rc = OPS->allreduce_host(ex->be, DP_GROUP_WORLD, &x, 1, DP_OP_SUM, ex->err);
        t[i] = OPS->wtime(ex->be) - t0;
    }
    if (!rc) {
        qsort(t, SMALL, sizeof *t, cmp_double);
        res->allreduce_small_s = t[SMALL / 2];
    }
    for (int i = 0; i < LARGE && !rc; i++) {
        double t0 = OPS->wtime(ex->be);
        rc = OPS->allreduce(ex->be, DP_GROUP_WORLD, buf, NBIG, DP_OP_SUM, ex->err);
        t[i] = OPS->wtime(ex->be) - t0;
    }
    if (!rc) {
        qsort(t, LARGE, sizeof *t, cmp_double);
        res->allreduce_1mib_s = t[LARGE / 2] * (1048576.0 / (NBIG * sizeof(real)));
    }
    OPS->free(ex->be, buf);
    return rc;
}

void dp_exec_result_release(struct dp_exec_result *r)
{
    free(r->ranks);
    r->ranks = NULL;
}

/* The per-operation timing's clock for a backend that computes on the host (optime.h). */
static double optime_wall(struct dp_backend *be)
{
    (void)be;
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

int dp_exec_run(const struct dp_model *m, const struct dp_layout *l, const struct dp_exec_opts *o,
                struct dp_exec_result *res, bool *collective, struct dp_err *err)
{
    memset(res, 0, sizeof *res);
    if (collective)
        *collective = true; /* checks below fail alike on every rank */
    int rc = dp_exec_check(m, l, 0, err);
    if (rc)
        return rc;
    if (!o->data)
        return dp_err_set(err, DP_EINVAL, "no token data given");
    if ((rc = dp_tokens_check(o->data, l, err)))
        return rc;
    struct dp_exec *ex;
    rc = dp__exec_new(m, l, o, &ex, err);
    if (rc) {
        /* A world-size mismatch is seen by every rank; allocation failures are not. */
        if (collective)
            *collective = rc == DP_EINFEASIBLE;
        return rc;
    }
    if (collective)
        *collective = false;
    res->rank = ex->rank;
    res->world = ex->world;
    res->threads = ex->be->threads;
    res->flash = ex->flash;
    res->tokens_per_step = ex->gbs_tokens;
    double *times = calloc((size_t)(o->steps > 0 ? o->steps : 1), sizeof *times);
    if (!times) {
        dp__exec_free(ex);
        return dp_err_set(err, DP_ENOMEM, "out of memory");
    }
    int64_t pred_total = 0;
    for (int p = 0; p < DP_NPOOLS; p++)
        pred_total += ex->predicted[p];

    /* Continue after a checkpoint's step (ckpt.c), or start at step 1. */
    int start = 0;
    bool alike = false;
    rc = dp__ckpt_check_dir(ex);
    if (rc && collective)
        *collective = rc == DP_EIO; /* every rank saw rank 0's verdict */
    if (!rc && (rc = dp__ckpt_resume(ex, &start, &alike)) && collective)
        *collective = alike;
    /* DPLAN_OPTIME=DIR: each step's time split by operation (optime.h), this rank's in
     * DIR/optime.rankR.tsv. */
    const bool optime = dp__optime_dir() && !dp__optime_wrap(ex->be, optime_wall);
    for (int step = start + 1; step <= o->steps && !rc; step++) {
        atomic_store(&beat_step, step);
        if (o->before_step)
            o->before_step(step, ex->rank, o->ctx);
        if (optime)
            dp__optime_begin(ex->be);
        double t0 = ex->be->ops->wtime(ex->be);
        double loss, norm;
        rc = dp__forward_backward(ex, step, &loss);
        if (!rc)
            rc = dp__grad_norm(ex, &norm);
        if (rc)
            break;
        const bool fp16 = ex->dtype == DP_DT_FP16;
        const double scale = ex->ls_scale;
        if (fp16)
            norm /= scale; /* unscaled before clipping (Megatron clip_grad_norm on main grads) */
        if (!isfinite(loss) || (!isfinite(norm) && !ex->found_inf)) {
            /* Every rank has the same all-reduced values: all stop here together. */
            if (collective)
                *collective = true;
            rc = dp_err_set(err, DP_ERUNTIME,
                            "step %d: %s is %s; stopping before the update (try a lower --lr)",
                            step, isfinite(loss) ? "gradient norm" : "loss",
                            isnan(isfinite(loss) ? norm : loss) ? "nan" : "inf");
            break;
        }
        /* fp16: the schedule counts the updates made (Megatron's opt_param_scheduler.step
         * runs only when update_successful), so a skipped step does not advance it. */
        double lr = lr_at(o, fp16 ? (int)ex->adam_t + 1 : step);
        const bool skipped = fp16 && ex->found_inf;
        if (!skipped) {
            double gscale =
                o->grad_clip > 0 && norm > o->grad_clip ? o->grad_clip / (norm + 1e-6) : 1.0;
            if (fp16)
                gscale /= scale; /* the unscale, folded into AdamW's gradient factor */
            rc = dp__optimizer_step(ex, lr, gscale);
            if (rc)
                break;
        }
        /* fp16: an overflow skips the update (AdamW's step count too, as Megatron's
         * optimizer.step returns update_successful = False) and backs the scale off. */
        if (fp16) {
            dp__loss_scale_update(ex, skipped);
            res->steps_skipped += skipped;
            res->loss_scale = ex->ls_scale;
        }
        double dt = ex->be->ops->wtime(ex->be) - t0;
        if (optime)
            dp__optime_end(ex->be, dt);
        times[step - 1] = dt;
        /* The exposed DP time's mean over the steps the step time's mean counts (2.., the
         * first warms caches and MPI; the only one when there is one). */
        if (step <= start + 2) /* the first step, then from the second on */
            ex->dp_exposed_sum = ex->dp_exposed_n = 0;
        ex->dp_exposed_sum += ex->dp_exposed_s;
        ex->dp_exposed_n++;
        res->steps_done = step;
        if (step == start + 1)
            res->first_loss = loss;
        res->final_loss = loss;
        if (o->on_step) {
            struct dp_step_info in = {
                .rank = ex->rank,
                .world = ex->world,
                .stage = ex->c.pp_rank,
                .tp_rank = ex->c.tp_rank,
                .dp_rank = ex->c.dp_rank,
                .step = step,
                .steps = o->steps,
                .loss = loss,
                .lr = lr,
                .grad_norm = norm,
                .loss_scale = fp16 ? scale : 0.0,
                .skipped = skipped,
                .step_time_s = dt,
                .dp_exposed_s = ex->dp_exposed_s,
                .dp_overlap = ex->ov,
                .tokens_per_s = (double)ex->gbs_tokens / dt,
                .samples_per_s = (double)l->gbs / dt,
                .mem_used_bytes = ex->mem.total_in_use,
                .mem_peak_bytes = ex->mem.total_peak,
                .mem_predicted_bytes = pred_total,
                .rss_bytes = rss_now(),
            };
            memcpy(in.pool_peak_bytes, ex->mem.peak, sizeof in.pool_peak_bytes);
            if (OPS->mem_peak) {
                size_t pk = 0, used = 0;
                OPS->mem_peak(ex->be, &pk, &used);
                in.device_peak_bytes = (int64_t)pk;
                in.device_used_bytes = (int64_t)used;
            }
            o->on_step(&in, o->ctx);
        }
        rc = dp__ckpt_after_step(ex, step);
    }
    if (optime) {
        char name[64];
        snprintf(name, sizeof name, "optime.rank%d", ex->rank);
        dp__optime_finish(ex->be, name); /* a diagnostic: a file it cannot write is not fatal */
    }
    ex->rss_train_peak = proc_status_bytes("VmHWM:");
    if (!rc && o->out_dir) {
        char path[4096];
        snprintf(path, sizeof path, "%s/model.safetensors", o->out_dir);
        dp__beat("writing weights");
        rc = dp__weights_save(ex, path); /* ZeRO-3: gathered layer by layer */
    }
    dp__ckpt_counts(ex, &res->ckpt_tried, &res->ckpt_saved);
    if (!rc)
        rc = probe_comm(ex, res);
    if (!rc)
        rc = gather_summary(ex, times + start,
                            res->steps_done > start ? res->steps_done - start : 0, res);
    free(times);
    dp__exec_free(ex);
    return rc;
}
