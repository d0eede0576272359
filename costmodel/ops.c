/*
 * The step-time model's terms one operation at a time, for the event simulation
 * of a step (sim/): the layer blocks, the ends, a pipeline send, the optimizer and
 * the tied-embedding sync from the same functions dp_time_step uses (time.c,
 * time_pipe.c), and the data-parallel collectives split into the units a framework
 * issues. Nothing here is priced anew: a block's numbers are the layer's terms
 * (time.c's layer()) taken apart, so that the simulator and `dplan estimate` start
 * from the same costs. No schedule: sim/ orders the operations.
 */
#include "time_internal.h"

#include <math.h>
#include <string.h>

/* A block's passes from its share of the layer's terms, as time_pipe.c's layer_part
 * prices a layer: backward GEMMs and element-wise work twice the forward's; what the
 * recompute policy redoes (full, Megatron's recompute_modules, torchtitan's per-op SAC)
 * from dp__time_redo, the function time_pipe.c prices it with. */
static void block_cost(const struct dp_layout *l, const struct dp_layer_time *b,
                       enum dp_layer_kind kind, struct dp_block_cost *o)
{
    memset(o, 0, sizeof *o);
    o->fwd_s = b->gemm_f + b->attn_f + b->ew_f + b->cast_f;
    o->bwd_s = 2 * b->gemm_f + b->attn_b + 2 * b->ew_f + b->cast_b;
    o->tp_f = b->tp_f;
    o->tp_b = b->tp_b;
    o->tp_raw_f = b->tp_raw_f;
    o->tp_raw_b = b->tp_raw_b;
    o->cp_f = b->cp_f;
    o->cp_b = b->cp_b;
    o->cp_raw_f = b->cp_raw_f;
    o->cp_raw_b = b->cp_raw_b;
    o->ep_f = b->ep_f;
    o->ep_b = b->ep_b;
    o->ep_pair = b->ep_pair;
    o->wgrad_s = b->gemm_f;
    struct dp__redo re;
    dp__time_redo(l, b, kind, &re);
    o->re_s = re.compute_s;
    o->tp_re = re.tp_s;
    o->ep_re = re.ep_s;
}

void dp_time_ops(const struct dp_model *m, const struct dp_cluster *cl, const struct dp_layout *l,
                 struct dp_step_ops *o)
{
    memset(o, 0, sizeof *o);
    struct dp__time_ctx cl_, cs;
    dp__time_ctx_init(&cl_, m, cl, l, false);
    dp__time_ctx_init(&cs, m, cl, l, true);
    for (int k = 0; k < DP_LAYER_KINDS; k++) {
        struct dp_layer_time lt, blk[2];
        dp__time_layer(&cl_, (enum dp_layer_kind)k, &lt, blk);
        for (int b = 0; b < DP_BLOCKS; b++)
            block_cost(l, &blk[b], (enum dp_layer_kind)k, &o->layer[k].blk[b]);
        o->layer[k].cast_w_s = lt.cast_w;
        dp_mem_layer_params(m, l, (enum dp_layer_kind)k, &o->layer[k].dense_params,
                            &o->layer[k].expert_params);
    }
    struct dp_layer_time e;
    dp__time_ends(&cl_, &e);
    o->emb.fwd_s = e.emb_f;
    o->emb.bwd_s = e.emb_b;
    o->emb.tp_f = e.emb_tp_f;
    o->head.fwd_s = e.head_f;
    o->head.bwd_s = e.head_b;
    o->head.tp_f = e.head_tp_f;
    o->head.tp_b = e.head_tp_b;
    dp_mem_end_params(m, l, &o->emb.params, &o->head.params);
    o->mtp_layers = l->mtp_layers;
    o->mtp_kind = dp_model_mtp_kind(m);
    o->mtp_f = e.mtp_f;
    o->mtp_b = e.mtp_b;
    o->p2p_s = dp__time_p2p(&cs);
    o->contention = OVERLAP_CONTENTION;

    int pb, gb, ob;
    dp_mem_bytes_per_param(l, &pb, &gb, &ob);
    /* Tied embeddings across stages (Megatron _allreduce_word_embedding_grads), and the
     * embedding copy multi-token prediction keeps on the last stage, as dp_time_step
     * charges them. */
    if (l->pp > 1 && dp_layout_head_rank(l) != 0 && (m->tied_embeddings || l->mtp_layers > 0)) {
        double vpad = (double)dp_padded_vocab(m->vocab, l->tp);
        o->emb_sync_s = dp_coll_time_s(DP_ALLREDUCE, vpad * m->hidden / l->tp * gb, 2, &cs.emb);
    }
    /* The optimizer over each stage's shard (dp_time_step: its slowest stage's). */
    const int ndp = dp_layout_shard(l), ndpe = dp_layout_edp(l); /* HSDP: the shard group */
    const double bpp = dp__optimizer_bytes_per_param(l);
    for (int r = 0; r < l->pp && r < DP_MAX_PP; r++) {
        int64_t d, x;
        dp_mem_stage_params(m, l, r, &d, &x);
        double local = (double)d / (l->zero >= 1 ? ndp : 1) + (double)x / (l->zero >= 1 ? ndpe : 1);
        o->optimizer_s[r] = local * bpp / cs.membw + dp__time_muon_s(&cs, r);
        o->recompute_share[r] = dp__time_recompute_share(l, m, r);
    }
}

/* ------------------------------------------------------------------ data parallel */

/*
 * Megatron-Core DDP's bucket: max(40M, 1M x the data-parallel group's size)
 * parameters with --overlap-grad-reduce, one bucket per model chunk without it
 * (megatron/core/distributed/distributed_data_parallel.py); bucketing only in the
 * first model chunk of the first pipeline stage, whose communication is the one on
 * the critical path (megatron/training/training.py: per_chunk_disable_bucketing for
 * chunk_idx > 0, bucket size None for pp rank > 0).
 */
static double megatron_bucket_params(const struct dp_layout *l)
{
    double b = 1e6 * (double)(l->dp * l->cp);
    return b > 4e7 ? b : 4e7;
}

struct unit_ctx {
    const struct dp_model *m;
    const struct dp_layout *l;
    struct dp_shard_groups g; /* dp x cp, edp, HSDP's shard and replica groups */
    int ndp, ndpe, pb, gb;
    bool fp8_gather;
    double lin_per_layer; /* linear weights of one layer (FP8 when gathered in FP8) */
    double hbm;           /* sustained HBM bandwidth, B/s (FSDP's copies) */
    int64_t emb, head;
    int64_t mtp_dense, mtp_expert; /* the MTP module, with the output layer's unit */
    int64_t dense[DP_LAYER_KINDS], expert[DP_LAYER_KINDS];
};

/* Price one unit of `layers` layers (their dense and expert parameters) plus ends. */
static void unit_price(const struct unit_ctx *x, struct dp_dp_unit *u, int64_t dense,
                       int64_t expert, int layers)
{
    const struct dp_layout *l = x->l;
    u->params = dense + expert;
    u->gather_bytes = u->params * x->pb;
    /* Gathered in the storage precision (FSDP2 param_dtype: torchtitan's fp32 shards are
     * cast before the all-gather), as dp_time_step gathers; with FP8 weights the linear
     * layers' weights in FP8 (NeMo fp8_param_gather, torchao float8 all-gather). */
    const double pg = dp_precision_bytes(l->precision);
    double ag_d = (double)dense * pg, ag_e = (double)expert * pg;
    if (x->fp8_gather) {
        double lin = x->lin_per_layer * layers;
        if (lin > (double)dense)
            lin = (double)dense;
        ag_d = ((double)dense - lin) * pg + lin;
        ag_e = (double)expert;
    }
    /* shard.c's collectives: the framework's reduce dtype, HSDP's shard and replica
     * groups, list-collective copies. */
    dp_shard_unit(l, &x->g, (double)dense, (double)expert, ag_d, ag_e, &u->gather_s, &u->reduce_s);
    u->copy_out_s = u->copy_in_s = 0;
    if (l->framework == DP_FW_TORCHTITAN && l->zero >= 2 && x->hbm > 0) {
        u->copy_out_s = 2 * (ag_d + ag_e) / x->hbm;
        u->copy_in_s = OVERLAP_CONTENTION * (double)u->params *
                       (dp_precision_bytes(l->precision) + x->g.rb) / x->hbm;
    }
}

/* The layers [gfirst, gfirst + n) of the model, their parameters by kind. */
static void layers_params(const struct unit_ctx *x, int gfirst, int n, int64_t *dense,
                          int64_t *expert)
{
    struct dp_layer_kinds kk;
    dp_model_layer_kinds(x->m, gfirst, n, &kk);
    *dense = *expert = 0;
    for (int k = 0; k < DP_LAYER_KINDS; k++) {
        *dense += kk.n[k] * x->dense[k];
        *expert += kk.n[k] * x->expert[k];
    }
}

/* A model chunk's parameter groups in forward order: the embedding (when the chunk
 * holds it), its layers, the output layer (when it holds it). */
struct chunk_items {
    int c, first, cnt; /* model chunk, its first layer (model index), its layers */
    bool emb, head;
    int n; /* items */
};

/* Item i's parameters; *layer gets its chunk-local layer (-1 embedding, cnt head). */
static void item_params(const struct unit_ctx *x, const struct chunk_items *ci, int i, int64_t *d,
                        int64_t *e, int *layer)
{
    int j = i - (ci->emb ? 1 : 0);
    *e = 0;
    if (j < 0) {
        *d = x->emb;
        *layer = -1;
    } else if (j >= ci->cnt) {
        *d = x->head + x->mtp_dense;
        *e = x->mtp_expert;
        *layer = ci->cnt;
    } else {
        layers_params(x, ci->first + j, 1, d, e);
        *layer = j;
    }
}

/* Items [lo, hi) as one unit. */
static void make_unit(const struct unit_ctx *x, const struct chunk_items *ci, int lo, int hi,
                      struct dp_dp_unit *u)
{
    int64_t d = 0, e = 0;
    int l0 = ci->cnt, l1 = -1;
    memset(u, 0, sizeof *u);
    for (int i = lo; i < hi; i++) {
        int64_t di, ei;
        int layer;
        item_params(x, ci, i, &di, &ei, &layer);
        d += di;
        e += ei;
        if (layer < 0)
            u->emb = true;
        else if (layer >= ci->cnt)
            u->head = true;
        else {
            l0 = layer < l0 ? layer : l0;
            l1 = layer > l1 ? layer : l1;
        }
    }
    u->chunk = ci->c;
    u->first = l1 >= l0 ? l0 : (u->head ? ci->cnt : 0);
    u->count = l1 >= l0 ? l1 - l0 + 1 : 0;
    unit_price(x, u, d, e, u->count);
}

int dp_time_dp_units(const struct dp_model *m, const struct dp_cluster *cl,
                     const struct dp_layout *l, int r, struct dp_dp_sched *s,
                     struct dp_dp_unit *out, int cap)
{
    memset(s, 0, sizeof *s);
    struct unit_ctx x;
    memset(&x, 0, sizeof x);
    x.m = m;
    x.l = l;
    x.hbm = cl->gpu.mem_bw_gbps * 1e9 * DP_MEM_EFFICIENCY;
    x.ndp = l->dp * l->cp;
    x.ndpe = dp_layout_edp(l);
    if (x.ndp <= 1 && x.ndpe <= 1)
        return 0;
    int ob;
    dp_mem_bytes_per_param(l, &x.pb, &x.gb, &ob);
    struct dp_path pd, pe;
    dp_place_path_fast(cl, l, DP_PLACE_DPCP, &pd);
    dp_place_path_fast(cl, l, DP_PLACE_EDP, &pe);
    dp_shard_groups(cl, l, &pd, &pe, &x.g);
    x.fp8_gather = cl->gpu.fp8_tflops > 0 && dp_layout_fp8_gather(l);
    x.lin_per_layer = dp__linear_weights_per_layer(m, l);
    dp_mem_end_params(m, l, &x.emb, &x.head);
    dp_mem_mtp_params(m, l, &x.mtp_dense, &x.mtp_expert);
    for (int k = 0; k < DP_LAYER_KINDS; k++)
        dp_mem_layer_params(m, l, (enum dp_layer_kind)k, &x.dense[k], &x.expert[k]);

    /* When each collective runs (dp_time_step's cases). */
    const bool sharded = l->zero >= 2 && l->pp == 1;
    s->all_reduce = l->zero == 0;
    s->reduce_overlap = l->dp_overlap;
    s->reduce_each_mb = sharded;
    s->gather_each_mb = sharded && l->zero >= 3;
    s->gather_at_start = l->zero >= 1 && !s->gather_each_mb && l->overlap_param_gather;
    s->prefetch = s->gather_each_mb && l->overlap_param_gather ? 1 : 0;

    const double bucket = megatron_bucket_params(l);
    int n = 0;
    for (int c = 0; c < l->vpp; c++) {
        struct chunk_items ci = {.c = c};
        dp_layout_chunk_layers(l, m, r, c, &ci.first, &ci.cnt);
        const int gs = dp_layout_global_stage(l, r, c); /* DualPipeV: both ends on rank 0 */
        ci.emb = gs == 0;
        ci.head = gs == l->pp * l->vpp - 1;
        ci.n = ci.cnt + (ci.emb ? 1 : 0) + (ci.head ? 1 : 0);
        if (ci.n == 0)
            continue;
        if (sharded) {
            /* One unit per layer and per end (FSDP's fully_shard per block, torchtitan's
             * embedding and [norm, output] groups; DeepSpeed ZeRO-3 gathers per module). */
            for (int i = 0; i < ci.n; i++, n++)
                if (n < cap)
                    make_unit(&x, &ci, i, i + 1, &out[n]);
            continue;
        }
        if (!(l->dp_overlap && r == 0 && c == 0)) {
            if (n < cap)
                make_unit(&x, &ci, 0, ci.n, &out[n]);
            n++;
            continue;
        }
        /* Buckets filled in backward order (Megatron's buffer holds the parameters in
         * reverse, so the first bucket holds the last layers), each closed once it holds
         * the bucket size, here at whole layers; listed in forward order. */
        int nb = 0;
        double fill = 0;
        for (int i = ci.n - 1; i >= 0; i--) {
            int64_t d, e;
            int layer;
            item_params(&x, &ci, i, &d, &e, &layer);
            fill += (double)(d + e);
            if (fill >= bucket || i == 0) {
                nb++;
                fill = 0;
            }
        }
        /* second pass: the same boundaries, written in forward order */
        int k = n + nb - 1, hi = ci.n;
        fill = 0;
        for (int i = ci.n - 1; i >= 0; i--) {
            int64_t d, e;
            int layer;
            item_params(&x, &ci, i, &d, &e, &layer);
            fill += (double)(d + e);
            if (fill >= bucket || i == 0) {
                if (k < cap)
                    make_unit(&x, &ci, i, hi, &out[k]);
                k--;
                fill = 0;
                hi = i;
            }
        }
        n += nb;
    }
    return n;
}
