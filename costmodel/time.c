/*
 * Step time of a training step under a layout: compute from FLOPs and an
 * achievable-efficiency curve per matrix shape, memory-bound element-wise
 * work from bytes moved, collectives from costmodel/comm.c, and the pipeline
 * schedule. Sources per term below. What is deliberately not modelled:
 * data loading and logging, kernel-launch gaps, GPU clock throttling (the
 * GEMM curve of a profile absorbs what sustained clocks deliver).
 */
#include "costmodel.h"

#include <math.h>
#include <string.h>

/* FlashAttention-2 (Dao 2023, Sec. 4.1): forward kernels reach roughly 3/4 of the
 * speed of a dense GEMM of the same FLOPs, and the backward pass does 2.5x the
 * forward's matrix FLOPs (it recomputes the scores) at ~0.8x its rate. With a causal
 * mask the kernels skip the masked half of the s x s blocks. */
#define FLASH_FWD_EFF      0.75
#define FLASH_BWD_OVER_FWD 3.0

/* The attention kernel's forward speed relative to a GEMM of the same FLOPs: the GPU
 * profile's figure for the layout's kernel (profiles/README.md, attention: FlashAttention-2
 * reaches only ~35% of an H100's peak, FlashAttention-3 and cuDNN ~75%), else FA2's
 * ratio on the architecture it was written for. */
static double attn_rel(const struct dp_gpu *g, const struct dp_layout *l)
{
    enum dp_attn k = l->attn != DP_ATTN_DEFAULT ? l->attn : g->attn_default;
    double r = (unsigned)k < DP_ATTNS ? g->attn_rel[k] : 0;
    return r > 0 ? r : FLASH_FWD_EFF;
}

/* Communication hidden behind compute is not free: NCCL's kernels occupy SMs (one
 * per channel; 16-32 channels on NVLink/IB systems, against 108-132 SMs) and HBM
 * bandwidth while they run, so the compute they overlap slows down. Overlapped
 * communication is charged this fraction of its duration. */
#define OVERLAP_CONTENTION 0.15

/* Exposed time of communication `comm` overlapped with compute `window`. */
static double overlapped(double comm, double window)
{
    double hidden = comm < window ? comm : window;
    return (comm - hidden) + OVERLAP_CONTENTION * hidden;
}

/*
 * A TP collective pipelined with the GEMM it feeds or drains (Megatron
 * --tp-comm-overlap with Transformer Engine userbuffers; torchtitan async TP):
 * the GEMM and the collective are split into `chunks` pieces (the all-gather ring
 * exchange moves one of tp shards per step; the reduce-scatter pipeline uses 4
 * splits in NeMo's userbuffers configs), piece i's communication runs during piece
 * i+1's compute, so one piece of communication stays exposed, plus whatever does
 * not fit under the GEMM, plus the contention of the hidden part (the reduce-scatter
 * pipeline runs on 24 of 132 SMs in those configs, the ring exchange on copy
 * engines). Source of the configs: NVIDIA/NeMo nemo/collections/llm/recipes/
 * tp_overlap_configs/userbuffers.py.
 */
static double pipelined(double comm, double gemm, double chunks)
{
    if (comm <= 0)
        return 0;
    double hidden = comm < gemm ? comm : gemm;
    return (comm - hidden) + comm / chunks + OVERLAP_CONTENTION * hidden;
}
#define UB_RS_SPLITS 4.0

/*
 * Bytes moved per element by the FP8 quantization of one GEMM input, the
 * memory-bound work FP8 adds (Transformer Engine fp8_cast_transpose_fused; torchao
 * Float8Linear): read the bf16 value, write the FP8 value for this GEMM and, since
 * Hopper's FP8 tensor cores take only the TN layout, a transposed FP8 copy for the
 * GEMM of the other pass (cuBLASLt: FP8 GEMMs "require A transposed and B non-
 * transposed"). Current (per-tensor, tensorwise) scaling needs the tensor's amax
 * before it can scale: one more read (TE Float8CurrentScaling's separate amax
 * kernel). Rowwise scaling quantizes rows and columns in two passes with their own
 * per-row amax (torchao rowwise). Block scaling (1x128 / 32-element blocks) finds
 * each block's scale inside the cast kernel and writes both orientations in one pass.
 * p is the storage precision's bytes.
 */
static double fp8_cast_bytes(enum dp_fp8_recipe r, double p)
{
    switch (r) {
    case DP_FP8_CURRENT: return p + 2.0 + p;
    case DP_FP8_ROWWISE: return 2.0 * (p + 1.0) + p;
    default: return p + 2.0;
    }
}

/* Bytes each optimizer step moves per parameter it updates (fp32 gradient, master
 * weight, moments read; master and moments written; half-precision copy written;
 * one more read of the gradient for the global norm / finiteness check). */
static double optimizer_bytes_per_param(const struct dp_layout *l)
{
    bool mixed = l->precision != DP_FP32;
    if (l->optimizer == DP_OPT_ADAM)
        return mixed ? 36 : 32;
    return mixed ? 24 : 20;
}

struct ctx {
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
    double cast_b; /* FP8: bytes moved per quantized element (fp8_cast_bytes) */
    double t, u;   /* tp, and the sequence-parallel divisor */
    double T;      /* GEMM rows: tokens of one micro-batch on this CP rank */
    struct dp_path tp, cp, ep, dp, dpe, pp, emb;
};

/* Tile quantization: cuBLAS tiles are 128 wide; a dimension of d computes
 * ceil(d/128)*128 lanes (NVIDIA Deep Learning Performance Guide, "Matrix
 * Multiplication Background", tile quantization). */
static double tileq(double d)
{
    if (d <= 0)
        return 1;
    double tiles = ceil(d / 128.0);
    return d / (tiles * 128.0);
}

/* A GEMM takes the longer of its compute time (FLOPs over the efficiency curve)
 * and its memory time (A, B read and C written once): the roofline. The
 * attention-score GEMMs (k = head_dim) are memory-bound on every GPU here. */
static double gemm_at(const struct ctx *c, double peak, const struct dp_gemm_curve *g, double p_in,
                      double mm, double nn, double kk, double batch)
{
    double flops = 2.0 * mm * nn * kk * batch;
    if (flops <= 0)
        return 0;
    double eff = g->eff_max * flops / (flops + g->half_flops) * tileq(mm) * tileq(nn) * tileq(kk);
    if (eff < 1e-3)
        eff = 1e-3;
    double compute = flops / (peak * eff);
    double memory = (p_in * (mm * kk + kk * nn) + c->p * mm * nn) * batch / c->membw;
    return compute > memory ? compute : memory;
}

/* A GEMM in the storage precision (attention scores, the output layer, the router). */
static double gemm_s(const struct ctx *c, double mm, double nn, double kk, double batch)
{
    return gemm_at(c, c->peak, &c->cl->gpu.gemm, c->p, mm, nn, kk, batch);
}

/* A linear layer's GEMM at the compute type: with FP8, Transformer Engine and torchao run
 * the transformer layers' linears in FP8 and keep the attention core (FlashAttention /
 * cuDNN in bf16), the norms and the output layer in the storage precision (Megatron's
 * output_layer is a plain ColumnParallelLinear, not a TE module; torchtitan's float8
 * conversion skips "output"). */
static double gemm_lin(const struct ctx *c, double mm, double nn, double kk, double batch)
{
    return gemm_at(c, c->peak_lin, c->curve_lin, c->p_lin, mm, nn, kk, batch);
}

/* `step`: the paths of the whole step (TP, gradients, pipeline, embedding), else those
 * of one layer (TP, CP, EP). */
static void ctx_init(struct ctx *c, const struct dp_model *m, const struct dp_cluster *cl,
                     const struct dp_layout *l, bool step)
{
    c->m = m;
    c->cl = cl;
    c->l = l;
    c->peak = cl->gpu.peak_tflops[l->precision] * 1e12;
    c->membw = cl->gpu.mem_bw_gbps * 1e9 * DP_MEM_EFFICIENCY;
    c->p = dp_precision_bytes(l->precision);
    enum dp_gemm g = dp_layout_gemm(l);
    c->fp8 = g == DP_GEMM_FP8 && cl->gpu.fp8_tflops > 0;
    c->peak_lin = dp_gpu_peak_tflops(&cl->gpu, g, l->precision) * 1e12;
    if (c->peak_lin <= 0) /* unsupported compute type: callers check; fall back to storage */
        c->peak_lin = c->peak;
    c->curve_lin = c->fp8 ? &cl->gpu.gemm_fp8 : &cl->gpu.gemm;
    c->p_lin = c->fp8 ? 1.0 : (g == DP_GEMM_TF32 || g == DP_GEMM_FP32) ? 4.0 : c->p;
    c->cast_b = c->fp8 ? fp8_cast_bytes(l->fp8_recipe, c->p) : 0;
    c->t = l->tp;
    c->u = (l->sp && l->tp > 1) ? l->tp : 1;
    c->T = (double)l->seq_len / l->cp * (double)l->mbs;
    /* Groups as Megatron-Core places them (costmodel/place.c): dense gradients over
     * dp x cp, expert gradients over the expert data-parallel group. */
    dp_place_path_fast(cl, l, DP_PLACE_TP, &c->tp);
    if (!step) {
        dp_place_path_fast(cl, l, DP_PLACE_CP, &c->cp);
        dp_place_path_fast(cl, l, DP_PLACE_EP, &c->ep);
        return;
    }
    dp_place_path_fast(cl, l, DP_PLACE_DPCP, &c->dp);
    dp_place_path_fast(cl, l, DP_PLACE_EDP, &c->dpe);
    dp_place_path_fast(cl, l, DP_PLACE_PP, &c->pp);
    dp_place_path_fast(cl, l, DP_PLACE_EMB, &c->emb);
}

static void layer(const struct ctx *c, struct dp_layer_time *o)
{
    const struct dp_model *m = c->m;
    const struct dp_layout *l = c->l;
    memset(o, 0, sizeof *o);
    const double t = c->t, u = c->u, p = c->p, T = c->T;
    const double h = (double)m->hidden, a = (double)m->heads, g = (double)m->kv_heads;
    const double d = (double)m->head_dim, b = (double)l->mbs;
    const double s_loc = (double)l->seq_len / l->cp, s_full = (double)l->seq_len;
    const double up = m->ffn == DP_FFN_SWIGLU ? 2 : 1;

    /* Projections: column-parallel QKV and fc1, row-parallel out and fc2. */
    const double g_qkv = gemm_lin(c, T, (a + 2 * g) * d / t, h, 1);
    const double g_proj = gemm_lin(c, T, h, a * d / t, 1);
    double g_fc1, g_fc2;
    /* Elements quantized per micro-batch when the linears run in FP8: each GEMM's input
     * forward (rows x k), its output gradient backward (rows x n), and the weights
     * (k x n), cast once per step (TE caches the FP8 weights of the first micro-batch:
     * is_first_microbatch). */
    double q_in = T * h + T * a * d / t, q_out = T * (a + 2 * g) * d / t + T * h;
    double q_w = h * (a + 2 * g) * d / t + a * d * h / t;
    o->gemm_f = g_qkv + g_proj;
    double f;
    if (m->experts > 0) {
        /* Balanced routing: the EP group's tokens times top_k spread evenly over the
         * experts; each GPU runs its E/ep local experts. */
        f = (double)m->moe_ffn_hidden;
        double E = (double)m->experts, k = (double)m->top_k, ep = l->ep;
        double rows = T * k * ep / E;
        o->gemm_f += gemm_s(c, T, E, h, 1);
        g_fc1 = gemm_lin(c, rows, up * f / t, h, E / ep);
        g_fc2 = gemm_lin(c, rows, h, f / t, E / ep);
        o->gemm_f += g_fc1 + g_fc2;
        q_in += rows * E / ep * (h + f / t);
        q_out += rows * E / ep * (up * f / t + h);
        q_w += E / ep * (up * f * h / t + f * h / t);
        /* Dispatch and combine: an all-to-all of the routed tokens each way, twice
         * again in backward. */
        double bytes = p * T * k * h;
        o->ep_f = 2 * dp_coll_time_s(DP_ALLTOALL, bytes, l->ep, &c->ep);
        o->ep_b = o->ep_f;
    } else {
        f = (double)m->ffn_hidden;
        g_fc1 = gemm_lin(c, T, up * f / t, h, 1);
        g_fc2 = gemm_lin(c, T, h, f / t, 1);
        o->gemm_f += g_fc1 + g_fc2;
        q_in += T * h + T * f / t;
        q_out += T * up * f / t + T * h;
        q_w += up * f * h / t + f * h / t;
    }
    if (c->fp8) {
        o->cast_f = q_in * c->cast_b / c->membw;
        o->cast_b = q_out * c->cast_b / c->membw;
        /* FP8 weights (fp8_params) need only the transposed copy: read and write 1 byte. */
        o->cast_w = q_w * (l->fp8_params ? 2.0 : c->cast_b) / c->membw;
    }

    /* Attention core: QK^T and attention x V over a/t heads. */
    double heads = a / t;
    double ew_attn = 0;
    if (l->flash_attn) {
        /* With context parallelism the attention runs as cp separate kernels, one per
         * K/V chunk of the ring, each on s_loc x s_loc blocks: the efficiency curve
         * applies to each step's FLOPs. */
        double flops = 4.0 * b * heads * s_loc * s_full * d / 2.0; /* causal half */
        double step = flops / l->cp;
        const struct dp_gemm_curve *gc = &c->cl->gpu.gemm;
        double eff = attn_rel(&c->cl->gpu, l) * gc->eff_max * step / (step + gc->half_flops);
        o->attn_f = flops / (c->peak * eff);
        o->attn_b = FLASH_BWD_OVER_FWD * o->attn_f;
    } else {
        o->attn_f = gemm_s(c, s_loc, s_full, d, b * heads) + gemm_s(c, s_loc, d, s_full, b * heads);
        o->attn_b = 2 * o->attn_f;
        /* Fused scale-mask-softmax reads and writes the scores; dropout reads them and
         * writes its output and a 1-byte mask; the context is permuted back. */
        double sc = heads * s_loc * s_full * b;
        ew_attn = 2 * p * sc + (m->dropout ? (2 * p + 1) * sc : 0) + 2 * p * T * a * d / t;
    }

    /* Element-wise, forward bytes: norms (read + write), two fused bias-dropout-add
     * (read output and residual, write; 1-byte masks), the activation function,
     * rotary embedding on Q and K. */
    double norm_b = 2.0 * p, act_b = (m->ffn == DP_FFN_SWIGLU ? 3.0 : 2.0) * p, rope_b = 2.0 * p;
    if (l->eager) {
        /*
         * Eager PyTorch (no torch.compile, no fused kernels) runs each operator as its own
         * kernel, each reading and writing its tensors: RMSNorm as written in Llama and
         * torchtitan (x.float(), pow(2), mean, * rsqrt, type_as, * weight) moves
         * p+4 + 4+4 + 4 + 4+4 + 4+p + p+p = 4p + 28 bytes per element; SwiGLU (silu(gate),
         * then * up) 5p per element of the MLP width; rotary embedding in complex fp32
         * (float(), complex multiply, type_as) 2p + 16. LayerNorm and GELU are single
         * native kernels either way; residual adds are one kernel either way.
         */
        if (m->norm == DP_NORM_RMSNORM)
            norm_b = 4.0 * p + 28.0;
        if (m->ffn == DP_FFN_SWIGLU)
            act_b = 5.0 * p;
        rope_b = 2.0 * p + 16.0;
    }
    double norms = m->norms_per_layer * norm_b * T * h / u;
    double bda = 2 * 3.0 * p * T * h / u + (m->dropout ? 2.0 * T * h / u : 0);
    double act = act_b * T * f / t;
    if (m->experts > 0) /* top_k copies of the activations; permute and un-permute copies */
        act = act * (double)m->top_k + 4.0 * p * T * (double)m->top_k * h;
    double rope = m->pos == DP_POS_ROPE ? rope_b * T * (a + g) * d / t : 0;
    o->attn_ew_f = ew_attn / c->membw;
    o->ew_f = (norms + bda + act + rope + ew_attn) / c->membw;

    /* Tensor parallel: forward all-reduces after attention-out and fc2, backward
     * all-reduces of the QKV and fc1 input gradients (Shoeybi et al. 2019, Fig. 3).
     * With sequence parallelism each all-reduce becomes reduce-scatter + all-gather
     * of the same bytes, and backward all-gathers the layer inputs again for the
     * weight gradients (Korthikanti et al. 2022, Sec. 4.2.2). */
    if (l->tp > 1) {
        double bytes = p * T * h;
        /* With FP8 GEMMs under sequence parallelism the all-gathers move the GEMM inputs
         * already quantized, 1 byte per element (torchao Float8ColwiseParallel casts to
         * float8 before the all-gather; Transformer Engine quantizes the norm output, or
         * the output gradient, before gathering it); reduce-scatters carry the bf16 GEMM
         * outputs. */
        double ag_bytes = c->fp8 ? T * h : bytes;
        if (l->sp && l->tp_overlap) {
            /* Each collective pipelined with its GEMM (see pipelined()): forward, the
             * all-gathers feed QKV and fc1 (ring exchange, tp chunks) and the
             * reduce-scatters drain the out-projection and fc2 (4 splits); backward,
             * the out-projection and fc2 input-gradient GEMMs take the gathered output
             * gradient (ring exchange), the QKV and fc1 input-gradient reduce-scatters
             * run under their weight-gradient GEMMs and the re-gather of their inputs
             * under the input-gradient GEMMs (userbuffers "bulk" overlap: one
             * collective beside one GEMM, no chunking). Backward GEMMs take as long as
             * the forward one each (dgrad and wgrad have its FLOPs). */
            double rs = dp_coll_time_s(DP_REDUCE_SCATTER, bytes, l->tp, &c->tp);
            double ag = dp_coll_time_s(DP_ALLGATHER, ag_bytes, l->tp, &c->tp);
            o->tp_f = pipelined(ag, g_qkv, l->tp) + pipelined(ag, g_fc1, l->tp) +
                      pipelined(rs, g_proj, UB_RS_SPLITS) + pipelined(rs, g_fc2, UB_RS_SPLITS);
            o->tp_b = pipelined(ag, g_proj, l->tp) + pipelined(ag, g_fc2, l->tp) +
                      overlapped(rs, g_qkv) + overlapped(rs, g_fc1) + overlapped(ag, g_qkv) +
                      overlapped(ag, g_fc1);
        } else if (l->sp) {
            double rs = dp_coll_time_s(DP_REDUCE_SCATTER, bytes, l->tp, &c->tp);
            double ag = dp_coll_time_s(DP_ALLGATHER, ag_bytes, l->tp, &c->tp);
            o->tp_f = 2 * (rs + ag);
            o->tp_b = 2 * (rs + ag) + 2 * ag;
        } else {
            double ar = dp_coll_time_s(DP_ALLREDUCE, bytes, l->tp, &c->tp);
            o->tp_f = 2 * ar;
            o->tp_b = 2 * ar;
        }
    }

    /* Context parallel (ring attention): cp - 1 exchanges of this rank's K and V
     * chunk, overlapped with the attention of the chunk in hand; backward also
     * returns dK and dV. Every rank of the ring sends at once, so each step waits
     * for the ring's slowest hop (c->cp). */
    if (l->cp > 1) {
        double kv = 2.0 * p * T * g * d / t;
        double step_f = dp_coll_time_s(DP_P2P, kv, 2, &c->cp);
        double per_f = o->attn_f / l->cp, per_b = o->attn_b / l->cp;
        o->cp_f = (l->cp - 1) * overlapped(step_f, per_f);
        o->cp_b = (l->cp - 1) * overlapped(2 * step_f, per_b);
    }
}

/* Per micro-batch forward and backward time of one stage, split by kind. */
struct stage_cost {
    double compute_f, compute_b, recompute, tp_f, tp_b, tp_re, pp, cp, ep;
    double total;
    double weight_cast; /* per step: FP8 casts of the stage's weights */
};

static void stage(const struct ctx *c, const struct dp_layer_time *lc, int layers, bool first,
                  bool last, struct stage_cost *o)
{
    const struct dp_model *m = c->m;
    const struct dp_layout *l = c->l;
    memset(o, 0, sizeof *o);
    const double t = c->t, u = c->u, p = c->p, T = c->T, h = (double)m->hidden;
    double L = layers;
    o->compute_f = L * (lc->gemm_f + lc->attn_f + lc->ew_f + lc->cast_f);
    o->compute_b = L * (2 * lc->gemm_f + lc->attn_b + 2 * lc->ew_f + lc->cast_b);
    o->weight_cast = L * lc->cast_w;
    o->tp_f = L * lc->tp_f;
    o->tp_b = L * lc->tp_b;
    o->cp = L * (lc->cp_f + lc->cp_b);
    o->ep = L * (lc->ep_f + lc->ep_b);
    if (l->recompute == DP_RECOMPUTE_FULL) {
        /* The whole forward again, collectives included (Megatron checkpoints the
         * layer input and reruns the layer), for the layers that recompute. */
        double Lr = dp_layout_recomputed(l, layers);
        o->recompute = Lr * (lc->gemm_f + lc->attn_f + lc->ew_f + lc->cast_f);
        o->tp_re = Lr * lc->tp_f;
        o->ep += Lr * lc->ep_f;
    } else if (l->recompute == DP_RECOMPUTE_SELECTIVE) {
        o->recompute = L * (lc->attn_f + lc->attn_ew_f);
    }
    double vpad = (double)dp_padded_vocab(m->vocab, l->tp);
    if (first) {
        /* Embedding gather (+ positions), and its vocabulary-parallel all-reduce
         * (reduce-scatter under SP); backward scatters gradients into the table. */
        double ew = 3.0 * p * T * h / c->membw;
        o->compute_f += ew;
        o->compute_b += 2 * ew;
        if (l->tp > 1)
            o->tp_f +=
                dp_coll_time_s(l->sp ? DP_REDUCE_SCATTER : DP_ALLREDUCE, p * T * h, l->tp, &c->tp);
    }
    if (last) {
        /* Final norm, LM head GEMM (vocabulary-parallel), cross entropy on fp32
         * logits: ~5 passes of 4 bytes forward, 3 backward (Megatron
         * vocab_parallel_cross_entropy), three small all-reduces over TP. */
        double head = gemm_s(c, T, vpad / t, h, 1);
        double ce = T * vpad / t * 4.0;
        double norm = 2.0 * p * T * h / u;
        o->compute_f += head + (5 * ce + norm) / c->membw;
        o->compute_b += 2 * head + (3 * ce + 2 * norm) / c->membw;
        if (l->tp > 1) {
            o->tp_f += 3 * dp_coll_time_s(DP_ALLREDUCE, 4.0 * T, l->tp, &c->tp);
            if (l->sp) {
                double ag = dp_coll_time_s(DP_ALLGATHER, p * T * h, l->tp, &c->tp);
                o->tp_f += ag;
                o->tp_b += ag + dp_coll_time_s(DP_REDUCE_SCATTER, p * T * h, l->tp, &c->tp);
            }
        }
    }
    if (l->pp > 1) {
        /* Activations to the next stage, gradients back, once per model chunk; each
         * of the t GPUs sends 1/t of the tensor (Narayanan et al. 2021, Sec. 4.1
         * scatter/gather). Send and receive of a step overlap each other but not
         * compute (Megatron's 1F1B issues them around each micro-batch). The
         * stages move in lockstep, so the pipeline's slowest hop paces every
         * stage (c->pp). */
        double bytes = p * T * h / t;
        double one = dp_coll_time_s(DP_P2P, bytes, 2, &c->pp);
        o->pp = 2.0 * l->vpp * one;
        /* overlap_p2p_comm (interleaved schedule; on by default in Megatron, which defines
         * only --no-overlap-p2p-communication): each chunk's send/receive runs
         * during the next chunk's computation (Megatron schedules.py,
         * forward_backward_pipelining_with_interleaving). */
        if (l->pp_overlap && l->vpp > 1) {
            double chunk = (o->compute_f + o->compute_b + o->recompute) / (2.0 * l->vpp);
            o->pp = 2.0 * l->vpp * overlapped(one, chunk);
        }
    }
    o->total = o->compute_f + o->compute_b + o->recompute + o->tp_f + o->tp_b + o->tp_re + o->pp +
               o->cp + o->ep;
}

/* Linear-layer weights (QKV, out-projection, MLP) of one layer per GPU, the part FP8
 * weights apply to; expert weights are counted in the expert part. */
static double linear_weights_per_layer(const struct dp_model *m, const struct dp_layout *l)
{
    const double h = (double)m->hidden, a = (double)m->heads, g = (double)m->kv_heads;
    const double d = (double)m->head_dim, t = l->tp;
    const double up = m->ffn == DP_FFN_SWIGLU ? 2 : 1;
    double n = h * (a + 2 * g) * d / t + a * d * h / t;
    if (m->experts == 0)
        n += (up + 1) * (double)m->ffn_hidden * h / t;
    return n;
}

/* Parameters per GPU of a stage (dense part and expert part), as the memory model
 * places them. */
static void stage_params(const struct dp_model *m, const struct dp_layout *l, int r, double *dense,
                         double *expert)
{
    int64_t d, e;
    dp_mem_stage_params(m, l, r, &d, &e);
    *dense = (double)d;
    *expert = (double)e;
}

void dp_time_layer(const struct dp_model *m, const struct dp_cluster *cl, const struct dp_layout *l,
                   struct dp_layer_time *out)
{
    struct ctx c;
    ctx_init(&c, m, cl, l, false);
    layer(&c, out);
}

void dp_time_step_fast(const struct dp_model *m, const struct dp_cluster *cl,
                       const struct dp_layout *l, struct dp_step_cost *o)
{
    struct dp_layer_time lt;
    dp_time_layer(m, cl, l, &lt);
    dp_time_step_with(m, cl, l, &lt, o);
}

void dp_time_step_with(const struct dp_model *m, const struct dp_cluster *cl,
                       const struct dp_layout *l, const struct dp_layer_time *lcp,
                       struct dp_step_cost *o)
{
    memset(o, 0, sizeof *o);
    struct ctx c;
    ctx_init(&c, m, cl, l, true);
    /* The CP and EP paths are the layer's (lt); dp_time_describe_paths fills them. */
    o->tp_path = c.tp;
    o->dp_path = c.dp;
    o->pp_path = c.pp;
    const struct dp_layer_time lc = *lcp;

    /* Stages: first, a middle one, last (middle stages are alike). */
    struct stage_cost st[3];
    int pp = l->pp;
    int L0 = dp_layout_stage_layers(l, m, 0);
    int Lm = pp > 2 ? dp_layout_stage_layers(l, m, 1) : 0;
    int Ll = dp_layout_stage_layers(l, m, pp - 1);
    stage(&c, &lc, L0, true, pp == 1, &st[0]);
    if (pp > 2)
        stage(&c, &lc, Lm, false, false, &st[1]);
    if (pp > 1)
        stage(&c, &lc, Ll, false, true, &st[2]);
    double tmax = st[0].total;
    int slow = 0;
    for (int i = 1; i < 3; i++) {
        bool present = (i == 1 && pp > 2) || (i == 2 && pp > 1);
        if (present && st[i].total > tmax) {
            tmax = st[i].total;
            slow = i;
        }
    }
    double sum = st[0].total + (pp > 2 ? (pp - 2) * st[1].total : 0) + (pp > 1 ? st[2].total : 0);
    double M = (double)dp_layout_microbatches(l);
    /*
     * 1F1B: in steady state every stage runs one forward and one backward per
     * micro-batch, paced by the slowest; filling and draining the pipeline passes
     * every other stage once, and interleaving v chunks divides that by v
     * (Narayanan et al. 2021, Sec. 2.2: bubble (p - 1)/(v m) for equal stages).
     */
    double pipe = M * tmax + (sum - tmax) / l->vpp;
    /* FP8 weight casts: each stage's first forward of the step, in turn along the pipeline
     * fill. */
    double wcast = st[0].weight_cast + (pp > 2 ? (pp - 2) * st[1].weight_cast : 0) +
                   (pp > 1 ? st[2].weight_cast : 0);
    pipe += wcast;
    const struct stage_cost *s = &st[slow];
    o->slowest_stage = slow == 0 ? 0 : slow == 1 ? 1 : pp - 1;
    o->compute_s = M * (s->compute_f + s->compute_b) + wcast;
    o->recompute_s = M * (s->recompute + s->tp_re);
    o->tp_comm_s = M * (s->tp_f + s->tp_b);
    o->cp_comm_s = M * s->cp;
    o->ep_comm_s = M * s->ep;
    o->pp_comm_s = M * s->pp;
    o->bubble_s = pipe - M * tmax - wcast;
    for (int i = 0; i < 3; i++) {
        o->stage_fwd_s[i] = st[i].compute_f + st[i].tp_f + st[i].pp / 2;
        o->stage_bwd_s[i] =
            st[i].compute_b + st[i].recompute + st[i].tp_b + st[i].tp_re + st[i].pp / 2;
    }

    /* Data parallel, on the first stage (it finishes its last backward last). */
    double pdense, pexpert;
    stage_params(m, l, 0, &pdense, &pexpert);
    if (pp > 1) {
        double d2, e2;
        stage_params(m, l, pp - 1, &d2, &e2);
        if (d2 + e2 > pdense + pexpert) {
            pdense = d2;
            pexpert = e2;
        }
    }
    int pb, gb, ob;
    dp_mem_bytes_per_param(l, &pb, &gb, &ob);
    int ndp = l->dp * l->cp, ndpe = ndp / l->ep;
    double rs = 0, ag = 0, ar = 0;
    /* With FP8 weights the parameter all-gather moves the linear layers' weights in FP8,
     * half the bytes (NeMo docs, communication overlap: "fp8_param_gather=True conducts
     * the parameter all-gather in fp8"; torchao float8 FSDP all-gather); embeddings and
     * norms stay in the storage precision. */
    double ag_dense = pdense * pb, ag_expert = pexpert * pb;
    if (c.fp8 && l->fp8_params) {
        double lin = linear_weights_per_layer(m, l) * (pp > 1 ? (Ll > L0 ? Ll : L0) : L0);
        if (lin > pdense)
            lin = pdense;
        ag_dense = (pdense - lin) * pb + lin;
        ag_expert = pexpert;
    }
    if (l->zero == 0) {
        ar = dp_coll_time_s(DP_ALLREDUCE, pdense * gb, ndp, &c.dp) +
             dp_coll_time_s(DP_ALLREDUCE, pexpert * gb, ndpe, &c.dpe);
    } else {
        rs = dp_coll_time_s(DP_REDUCE_SCATTER, pdense * gb, ndp, &c.dp) +
             dp_coll_time_s(DP_REDUCE_SCATTER, pexpert * gb, ndpe, &c.dpe);
        ag = dp_coll_time_s(DP_ALLGATHER, ag_dense, ndp, &c.dp) +
             dp_coll_time_s(DP_ALLGATHER, ag_expert, ndpe, &c.dpe);
    }
    double fwd0 = o->stage_fwd_s[0], bwd0 = o->stage_bwd_s[0];
    double exposed;
    /* The parameter all-gather before the forward: hidden behind it with
     * --overlap-param-gather (bucket by bucket as the forward reaches them) or FSDP's
     * prefetch, exposed otherwise. */
    const bool opg = l->overlap_param_gather;
    if (l->zero >= 2 && pp > 1) {
        /* Sharded weights and gradients with pipeline parallelism (torchtitan FSDP2 + PP,
         * Megatron-FSDP): the schedule keeps the stage's weights gathered and its gradients
         * unreduced across the micro-batches of a step (torch.distributed.pipelining
         * disables reshard-after-backward and gradient sync but for the last
         * micro-batch), so one gather and one reduce-scatter per step, as ZeRO-1. */
        o->dp_comm_total_s = rs + ag;
        exposed = (l->dp_overlap ? overlapped(rs, bwd0) : rs) + (opg ? overlapped(ag, fwd0) : ag);
    } else if (l->zero >= 3) {
        /* ZeRO-3 gathers the weights for every micro-batch's forward and backward and
         * reduce-scatters every micro-batch's gradients (DeepSpeed stage 3), one
         * collective per layer: each pays its latency. With prefetching the gathers
         * hide behind compute. */
        double lat = 3.0 * L0 * (ndp - 1) * c.dp.latency_us * 1e-6;
        o->dp_comm_total_s = M * (2 * ag + rs + lat);
        double gf = ag + lat / 3, gb_ = ag + lat / 3, rsb = rs + lat / 3;
        if (opg && l->dp_overlap)
            exposed = M * (overlapped(gf, fwd0) + overlapped(gb_ + rsb, bwd0));
        else if (opg)
            exposed = M * (overlapped(gf, fwd0) + overlapped(gb_, bwd0) + rsb);
        else if (l->dp_overlap)
            exposed = M * (gf + gb_ + overlapped(rsb, bwd0));
        else
            exposed = o->dp_comm_total_s;
    } else if (l->zero == 2) {
        /* Gradients are partitioned as they are produced: a reduce-scatter per
         * micro-batch, one all-gather of the updated weights per step; both issued per
         * layer (a DeepSpeed bucket or an FSDP unit each), so each pays its ring
         * latency. */
        double lat = L0 * (ndp - 1) * c.dp.latency_us * 1e-6;
        rs += lat;
        ag += lat;
        o->dp_comm_total_s = M * rs + ag;
        exposed =
            (l->dp_overlap ? M * overlapped(rs, bwd0) : M * rs) + (opg ? overlapped(ag, fwd0) : ag);
    } else {
        /* Once per step, during the last micro-batch's backward (bucketed overlap) and,
         * for the distributed optimizer, the gather before the next forward. */
        o->dp_comm_total_s = ar + rs + ag;
        exposed = (l->dp_overlap ? overlapped(ar + rs, bwd0) : ar + rs) +
                  (opg ? overlapped(ag, fwd0) : ag);
    }
    o->dp_comm_s = exposed;

    /* Tied embeddings across stages: the first and last stage sum their copies'
     * gradients (Megatron _allreduce_word_embedding_grads). */
    if (pp > 1 && m->tied_embeddings) {
        double vpad = (double)dp_padded_vocab(m->vocab, l->tp);
        o->other_s = dp_coll_time_s(DP_ALLREDUCE, vpad * m->hidden / l->tp * gb, 2, &c.emb);
    }

    /* Optimizer step over this GPU's shard. */
    double local = pdense / (l->zero >= 1 ? ndp : 1) + pexpert / (l->zero >= 1 ? ndpe : 1);
    o->optimizer_s = local * optimizer_bytes_per_param(l) / c.membw;

    o->step_time_s = pipe + o->dp_comm_s + o->other_s + o->optimizer_s;
    struct dp_flops fl;
    dp_flops_step(m, l, &fl);
    double gpus = (double)l->tp * l->pp * l->dp * l->cp;
    o->tokens_per_s = (double)l->gbs * (double)l->seq_len / o->step_time_s;
    o->model_tflops_per_gpu = fl.model_flops / o->step_time_s / gpus / 1e12;
    o->hardware_tflops_per_gpu = fl.hardware_flops / o->step_time_s / gpus / 1e12;
    /* MFU and HFU against the dense peak of the GEMMs' compute type: for FP8 runs the FP8
     * peak, as MosaicML (llm-foundry benchmarks: 1979 TFLOP/s for amp_fp8) and NVIDIA's DGX
     * Cloud recipes (989 bf16 / 1979 fp8) report it. */
    o->peak_tflops = c.peak_lin / 1e12;
    o->mfu = o->model_tflops_per_gpu * 1e12 / c.peak_lin;
    o->hfu = o->hardware_tflops_per_gpu * 1e12 / c.peak_lin;
}

int dp_time_step(const struct dp_model *m, const struct dp_cluster *cl, const struct dp_layout *l,
                 struct dp_step_cost *out, struct dp_err *err)
{
    memset(out, 0, sizeof *out);
    int rc = dp_layout_validate(l, m, dp_cluster_gpus(cl), err);
    if (rc)
        return rc;
    if (l->tp > cl->gpus_per_node)
        return dp_err_set(err, DP_EINFEASIBLE,
                          "tp=%d crosses nodes (%d GPUs per node): tensor parallelism needs the "
                          "intra-node link",
                          l->tp, cl->gpus_per_node);
    if (cl->nodes > 1 && cl->nics_per_node < 1)
        return dp_err_set(err, DP_EINFEASIBLE,
                          "%d nodes but no network interfaces per node in the cluster", cl->nodes);
    dp_time_step_fast(m, cl, l, out);
    dp_time_describe_paths(cl, l, out);
    return 0;
}

void dp_time_describe_paths(const struct dp_cluster *cl, const struct dp_layout *l,
                            struct dp_step_cost *out)
{
    dp_place_path(cl, l, DP_PLACE_TP, &out->tp_path);
    dp_place_path(cl, l, DP_PLACE_CP, &out->cp_path);
    dp_place_path(cl, l, DP_PLACE_EP, &out->ep_path);
    dp_place_path(cl, l, DP_PLACE_DPCP, &out->dp_path);
    dp_place_path(cl, l, DP_PLACE_PP, &out->pp_path);
}
