/*
 * Step time of a training step under a layout: compute from FLOPs and an
 * achievable-efficiency curve per matrix shape, memory-bound element-wise
 * work from bytes moved, collectives from costmodel/comm.c, and the pipeline
 * schedule. Sources per term below. What is deliberately not modelled:
 * data loading and logging, kernel-launch gaps, GPU clock throttling (the
 * GEMM curve of a profile absorbs what sustained clocks deliver).
 */
#include "time_internal.h"

#include <math.h>
#include <string.h>

/* FlashAttention-2 (Dao 2023, Sec. 4.1): forward kernels reach roughly 3/4 of the
 * speed of a dense GEMM of the same FLOPs, and the backward pass does 2.5x the
 * forward's matrix FLOPs (it recomputes the scores) at ~0.8x its rate. With a causal
 * mask the kernels skip the masked half of the s x s blocks. */
#define FLASH_FWD_EFF      0.75
#define FLASH_BWD_OVER_FWD 3.0
#define FLEX_OVER_FLASH2   0.875

/* The attention kernel's forward speed relative to a GEMM of the same FLOPs: the GPU
 * profile's figure for the layout's kernel (profiles/README.md, attention: FlashAttention-2
 * reaches only ~35% of an H100's peak, FlashAttention-3 and cuDNN ~75%), else FA2's
 * ratio on the architecture it was written for. */
static double attn_rel(const struct dp_gpu *g, const struct dp_layout *l)
{
    enum dp_attn k = l->attn != DP_ATTN_DEFAULT ? l->attn : g->attn_default;
    double r = (unsigned)k < DP_ATTNS ? g->attn_rel[k] : 0;
    /* FlexAttention where the profile has no figure of its own: 90% of FlashAttention-2's
     * speed forward and 85% backward (the PyTorch blog "FlexAttention: The Flexibility of
     * PyTorch with the Performance of FlashAttention", Aug 2024, A100), 0.875 of it for a
     * step's forward and backward together. */
    if (k == DP_ATTN_FLEX && r <= 0 && g->attn_rel[DP_ATTN_FLASH2] > 0)
        r = FLEX_OVER_FLASH2 * g->attn_rel[DP_ATTN_FLASH2];
    return r > 0 ? r : FLASH_FWD_EFF;
}

/*
 * A TP collective pipelined with the GEMM it feeds or drains (Megatron
 * --tp-comm-overlap with Transformer Engine userbuffers; torchtitan async TP). A
 * reduce-scatter pipelined in `chunks` splits (userbuffers "pipeline", 4 splits in
 * NeMo's configs) runs split i's reduction during split i+1's GEMM, so the last split
 * stays exposed, plus whatever does not fit under the GEMM, plus the contention of the
 * hidden part (that pipeline runs on 8-32 of the SMs in those configs).
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
 * An all-gather by ring exchange into the GEMM it feeds (userbuffers "ring_exchange",
 * Transformer Engine CommOverlapP2PBase::split_overlap_ag; PyTorch's fused all-gather
 * matmul of async TP): step 0 multiplies the rank's own chunk while it is sent on, each
 * later step the chunk received during the step before. The tp - 1 chunk transfers hide
 * under the tp - 1 later GEMM chunks: exposed is what does not fit under (tp - 1)/tp of
 * the GEMM, plus the contention of the hidden part (copy engines share HBM, the GEMM runs
 * in tp smaller pieces).
 */
static double ring_exchange(double comm, double gemm, double tp)
{
    if (comm <= 0)
        return 0;
    double room = gemm * (tp - 1) / tp;
    double hidden = comm < room ? comm : room;
    return (comm - hidden) + OVERLAP_CONTENTION * hidden;
}

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

/* A GEMM kernel's own fixed cost: launch, prologue and epilogue, the partial last wave of
 * tiles; the curves' prior half_flops (eff_max x peak x 5 us, profiles/README.md). */
#define GEMM_KERNEL_S 5e-6

/* A GEMM takes the longer of its compute time (FLOPs over the efficiency curve)
 * and its memory time (A, B read and C written once): the roofline. The
 * attention-score GEMMs (k = head_dim) are memory-bound on every GPU here. */
static double gemm_at(const struct dp__time_ctx *c, double peak, const struct dp_gemm_curve *g,
                      double p_in, double mm, double nn, double kk, double batch)
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
static double gemm_s(const struct dp__time_ctx *c, double mm, double nn, double kk, double batch)
{
    return gemm_at(c, c->peak, &c->cl->gpu.gemm, c->p, mm, nn, kk, batch);
}

/* A linear layer's GEMM at the compute type: with FP8, Transformer Engine and torchao run
 * the transformer layers' linears in FP8 and keep the attention core (FlashAttention /
 * cuDNN in bf16), the norms and the output layer in the storage precision (Megatron's
 * output_layer is a plain ColumnParallelLinear, not a TE module; torchtitan's float8
 * conversion skips "output"). */
static double gemm_lin(const struct dp__time_ctx *c, double mm, double nn, double kk, double batch)
{
    return gemm_at(c, c->peak_lin, c->curve_lin, c->p_lin, mm, nn, kk, batch);
}

/*
 * An MXFP8 GEMM (block-scaled: an E8M0 scale per 32 elements that the tensor cores apply)
 * against a per-tensor FP8 one of the same shapes, kernels alone: Transformer Engine's GEMM
 * profiling guide times a Llama-shaped layer's 12 GEMMs on a B300 with the inputs
 * pre-quantized at 7.161 ms MXFP8 against 6.812 ms FP8 current scaling, 1.051x (fprop
 * 1.096x, dgrad 1.029x, wgrad 1.032x; NVIDIA/TransformerEngine
 * docs/examples/gemm_profiling/gemm_profiling.rst). The quantization each recipe adds is
 * fp8_cast_bytes' (the same guide's autocast times: 2.34 ms of current scaling's, 1.82 ms
 * of MXFP8's). What training adds to each MXFP8 GEMM call beyond both is the GPU
 * profile's mxfp8_gemm_us (lin()).
 */
#define MXFP8_GEMM_TIME 1.051

/* `step`: the paths of the whole step (TP, gradients, pipeline, embedding), else those
 * of one layer (TP, CP, EP). */
static void ctx_init(struct dp__time_ctx *c, const struct dp_model *m, const struct dp_cluster *cl,
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
    c->mxfp8 = c->fp8 && dp_layout_mxfp8(l);
    if (c->mxfp8)
        c->peak_lin /= MXFP8_GEMM_TIME;
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
        dp_place_path_fast(cl, l, DP_PLACE_ETP, &c->etp);
        return;
    }
    dp_place_path_fast(cl, l, DP_PLACE_DPCP, &c->dp);
    dp_place_path_fast(cl, l, DP_PLACE_EDP, &c->dpe);
    dp_place_path_fast(cl, l, DP_PLACE_PP, &c->pp);
    dp_place_path_fast(cl, l, DP_PLACE_EMB, &c->emb);
}

/*
 * A linear layer's GEMM(s) (QKV, out-projection, MLP, MLA projections, experts: the
 * modules Transformer Engine and torchao run at the compute type), `groups` alike.
 * Expert GEMMs: TE GroupedLinear (transformer_engine/pytorch/module/grouped_linear.py,
 * general_grouped_gemm) and the grouped_gemm package Megatron's GroupedMLP used both run
 * one cuBLAS GEMM per local expert, so each expert's GEMM (its rows, tile quantization
 * and fixed cost) sets its efficiency: many small experts reach less of the peak than
 * one GEMM of all their rows. TE's extra streams, which overlap some of the fixed
 * costs, are not credited. With FP8 it also counts, in o->cast_*,
 * the elements to quantize per micro-batch: the GEMM's input forward (mm x kk), its
 * output gradient backward (mm x nn), and its weight (kk x nn), cast once per step
 * (TE caches the FP8 weights of the first micro-batch: is_first_microbatch); layer()
 * turns them into time.
 */
static double lin(const struct dp__time_ctx *c, struct dp_layer_time *o, double mm, double nn,
                  double kk, double groups)
{
    o->cast_f += groups * mm * kk;
    o->cast_b += groups * mm * nn;
    o->cast_w += groups * kk * nn;
    double one = gemm_lin(c, mm, nn, kk, 1);
    /* Each MXFP8 module call pays the profile's fixed cost beyond a per-tensor FP8 one's
     * (mxfp8_gemm_us, fitted by `dplan calibrate` on dense runs) once: Transformer Engine's
     * GroupedLinear quantizes all its experts' inputs in one call (split_quantize). */
    const double mx = c->mxfp8 ? c->cl->gpu.mxfp8_fixed_s : 0;
    if (groups <= 1)
        return groups * one + (groups > 0 ? mx : 0);
    /*
     * A grouped GEMM is one module call launching one GEMM per local expert. Each expert's
     * GEMM pays a kernel's fixed cost (GEMM_KERNEL_S: launch, prologue and epilogue, the
     * last wave); the call's host and framework time beyond that, what the bf16 curve's
     * fitted fixed cost holds above a kernel's (the H100's: 31 us per GEMM,
     * profiles/README.md), is paid once. What an FP8 GEMM's fixed cost holds above the bf16
     * one (125 us on the H100: the quantizers' amax, scale and cast work) stays per expert:
     * Transformer Engine's GroupedLinear keeps one input, weight and gradient quantizer per
     * GEMM (transformer_engine/pytorch/module/grouped_linear.py).
     */
    const struct dp_gemm_curve *g = c->curve_lin, *gb = &c->cl->gpu.gemm;
    double q = tileq(mm) * tileq(nn) * tileq(kk);
    double fixed = g->eff_max > 0 && q > 0 ? g->half_flops / (c->peak_lin * g->eff_max * q) : 0;
    double fixed_bf16 =
        gb->eff_max > 0 && q > 0 ? gb->half_flops / (c->peak * gb->eff_max * q) : fixed;
    if (fixed_bf16 > fixed)
        fixed_bf16 = fixed;
    double once = fixed_bf16 > GEMM_KERNEL_S ? fixed_bf16 - GEMM_KERNEL_S : 0;
    double compute = 2.0 * mm * nn * kk / (c->peak_lin * g->eff_max * q) + fixed;
    /* Only a compute-bound GEMM's time holds the fixed cost (gemm_at's roofline), and each
     * expert's GEMM keeps at least a kernel's (a few tokens reading an expert's weights
     * take less than the host time). */
    if (compute < one * (1 - 1e-9))
        once = 0;
    once = fmin(once, fmax(one - GEMM_KERNEL_S, 0));
    return groups * one - (groups - 1) * once + mx;
}

/*
 * One sequence-parallel all-gather (fwd) / reduce-scatter pair of `width`-wide
 * activations over TP, as Korthikanti Sec. 4.2.2 charges each TP region: forward
 * gather in + scatter out, backward the transposes plus the re-gather of the input
 * for the weight gradient; without SP an all-reduce each way. g_in is the
 * column-parallel GEMM the gathered input feeds (QKV, fc1), g_out the row-parallel
 * GEMM whose output is reduce-scattered (out-projection, fc2).
 *
 * With FP8 GEMMs under sequence parallelism the all-gathers move the GEMM inputs
 * already quantized, 1 byte per element (torchao Float8ColwiseParallel casts to float8
 * before the all-gather; Transformer Engine quantizes the norm output, or the output
 * gradient, before gathering it); reduce-scatters carry the bf16 GEMM outputs. Not
 * with torchao's rowwise recipe: its scales are taken over the gathered rows and
 * columns, so the input is gathered in bf16 and quantized after (pytorch/torchtitan
 * issue 845, "ensure rowwise scaling uses bf16 all_gather"; the float8 rowwise
 * all-gather, pytorch/ao PR 2145 and torchtitan PR 1157, was never merged).
 *
 * With tp_overlap each collective is pipelined with its GEMM: forward, the all-gather
 * feeds g_in (ring_exchange()) and the reduce-scatter drains g_out (pipelined(), 4
 * splits); backward, g_out's input-gradient GEMM takes the gathered output gradient
 * (ring exchange), g_in's input-gradient reduce-scatter runs under its
 * weight-gradient GEMM and the re-gather of its input under the input-gradient GEMM
 * (userbuffers "bulk" overlap: one collective beside one GEMM, no chunking). Backward
 * GEMMs take as long as the forward one each (dgrad and wgrad have its FLOPs).
 *
 * torchtitan's async TP is a compiler pass that fuses all-gather -> matmul and
 * matmul -> reduce-scatter patterns (torch/_inductor/fx_passes/micro_pipeline_tp.py).
 * With rowwise FP8 scales only the matmul -> reduce-scatter fusion matches
 * (pytorch/pytorch PR 149247); the all-gather -> scaled_mm patterns are left unfused
 * (pytorch/pytorch issue 149990, open as of the 2025-06 torchtitan benchmarks), so the
 * all-gathers stay exposed in full.
 */
static void tp_region(const struct dp__time_ctx *c, double in_width, double out_width, double g_in,
                      double g_out, struct dp_layer_time *o)
{
    const struct dp_layout *l = c->l;
    if (l->tp <= 1)
        return;
    const bool rowwise = c->fp8 && l->fp8_recipe == DP_FP8_ROWWISE;
    double T = c->T, p = c->p, pg = c->fp8 && !rowwise ? 1.0 : p;
    if (l->sp) {
        double ag_in = dp_coll_time_s(DP_ALLGATHER, pg * T * in_width, l->tp, &c->tp);
        double rs_in = dp_coll_time_s(DP_REDUCE_SCATTER, p * T * in_width, l->tp, &c->tp);
        double rs_out = dp_coll_time_s(DP_REDUCE_SCATTER, p * T * out_width, l->tp, &c->tp);
        double ag_out = dp_coll_time_s(DP_ALLGATHER, pg * T * out_width, l->tp, &c->tp);
        /* MXFP8 scales 32-element blocks along one axis, so the row-parallel GEMM's gathered
         * output gradient cannot be transposed for the weight gradient as a per-tensor one
         * is: Transformer Engine gathers its columnwise copy too, the second all-gather beside
         * the input-gradient GEMM under userbuffers, both copies in one gather without
         * (module/linear.py backward, "we can't convert row-scaled MXFP8 to column-scaled";
         * distributed.py _all_gather_mxfp8). */
        if (c->mxfp8)
            ag_out *= 2;
        o->tp_raw_f += ag_in + rs_out;
        o->tp_raw_b += ag_out + rs_in + ag_in;
        if (l->tp_overlap && rowwise) {
            o->tp_f += ag_in + pipelined(rs_out, g_out, UB_RS_SPLITS);
            o->tp_b += ag_out + overlapped(rs_in, g_in) + ag_in;
        } else if (l->tp_overlap) {
            o->tp_f += ring_exchange(ag_in, g_in, l->tp) + pipelined(rs_out, g_out, UB_RS_SPLITS);
            o->tp_b += ring_exchange(ag_out, g_out, l->tp) + overlapped(rs_in, g_in) +
                       overlapped(ag_in, g_in);
        } else {
            o->tp_f += ag_in + rs_out;
            o->tp_b += ag_out + rs_in + ag_in;
        }
    } else {
        double f = dp_coll_time_s(DP_ALLREDUCE, p * T * out_width, l->tp, &c->tp);
        double b = dp_coll_time_s(DP_ALLREDUCE, p * T * in_width, l->tp, &c->tp);
        o->tp_f += f;
        o->tp_b += b;
        o->tp_raw_f += f;
        o->tp_raw_b += b;
    }
}

/*
 * Bytes moved per element by the element-wise kernels: norms (read + write), the MLP
 * activation (SwiGLU reads gate and up, writes their product; GELU reads and writes),
 * rotary embedding (read + write). Eager PyTorch (no torch.compile, no fused kernels)
 * runs each operator as its own kernel, each reading and writing its tensors: RMSNorm as
 * written in Llama and torchtitan (x.float(), pow(2), mean, * rsqrt, type_as, * weight)
 * moves p+4 + 4+4 + 4 + 4+4 + 4+p + p+p = 4p + 28 bytes per element; SwiGLU (silu(gate),
 * then * up) 5p per element of the MLP width; rotary embedding in complex fp32 (float(),
 * complex multiply, type_as) 2p + 16. LayerNorm and GELU are single native kernels
 * either way; residual adds are one kernel either way.
 */
static double ew_norm_bytes(const struct dp__time_ctx *c)
{
    return c->l->eager && c->m->norm == DP_NORM_RMSNORM ? 4.0 * c->p + 28.0 : 2.0 * c->p;
}
static double ew_act_bytes(const struct dp__time_ctx *c)
{
    if (c->m->ffn == DP_FFN_SWIGLU)
        return c->l->eager ? 5.0 * c->p : 3.0 * c->p;
    return 2.0 * c->p;
}
static double ew_rope_bytes(const struct dp__time_ctx *c)
{
    return c->l->eager ? 2.0 * c->p + 16.0 : 2.0 * c->p;
}

/*
 * FP8 attention (fp8_attention: Transformer Engine's FP8 dot-product attention on cuDNN's
 * fused kernel, Megatron --fp8-dot-product-attention). The kernel's FLOPs run at the FP8
 * peak with the same fraction of it as in bf16: Shah et al. 2024 (FlashAttention-3, arXiv
 * 2407.08608) measure cuDNN's forward on an H100 (head dim 256, 16k tokens) at 1139 TFLOP/s
 * in FP8 and 581 in bf16 without the causal mask, 1099 and 509 with it: 0.576 and 0.555 of
 * the 1979 FP8 peak against 0.587 and 0.515 of the 989 bf16 one. Its fixed cost per call
 * (the curve's half_flops) stays the bf16 kernel's. The backward (no published FP8 figure)
 * is taken at the forward's ratio, FLASH_BWD_OVER_FWD. Around the kernel, memory-bound:
 * forward Q, K and V quantized in (the recipe's cast bytes per element, `qkv` elements) and
 * the output dequantized out (1 + p bytes, `out` elements); backward the output gradient
 * quantized in and dQ, dK, dV dequantized out (TE FusedAttnFunc with fp8_dpa, not fp8_mha:
 * the module's inputs and outputs stay bf16). `bf16_f`: the bf16 kernel's forward time on
 * `step` FLOPs per call. Returns the forward, the backward in *bwd.
 */
static double fp8_attention(const struct dp__time_ctx *c, double bf16_f, double step, double qkv,
                            double out, double *bwd)
{
    const struct dp_gemm_curve *gc = &c->cl->gpu.gemm;
    double peak8 = dp_gpu_peak_tflops(&c->cl->gpu, DP_GEMM_FP8, c->l->precision) * 1e12;
    double fixed = bf16_f * gc->half_flops / (step + gc->half_flops);
    double kernel = (bf16_f - fixed) * (peak8 > 0 ? c->peak / peak8 : 1.0) + fixed;
    double deq = 1.0 + c->p;
    *bwd = FLASH_BWD_OVER_FWD * kernel + (c->cast_b * out + deq * qkv) / c->membw;
    return kernel + (c->cast_b * qkv + deq * out) / c->membw;
}

/* The attention block: projections, core attention, its element-wise work and TP. */
static void attention(const struct dp__time_ctx *c, struct dp_layer_time *o)
{
    const struct dp_model *m = c->m;
    const struct dp_layout *l = c->l;
    const double t = c->t, u = c->u, p = c->p, T = c->T;
    const double h = (double)m->hidden, a = (double)m->heads, g = (double)m->kv_heads;
    const double d = (double)m->head_dim, b = (double)l->mbs;
    const double s_loc = (double)l->seq_len / l->cp, s_full = (double)l->seq_len;
    double dv = d, in_width = h, ew = 0, g_in, g_out;
    if (m->mla) {
        /* Megatron-Core MLASelfAttention: the down projections are duplicated on every
         * TP rank and run on the sequence-parallel shard (T/u rows); their normed
         * outputs are gathered into the column-parallel up projections, so TP gathers
         * q_lora + kv_lora + rope wide rows instead of h (h + kv_lora + rope without a
         * q bottleneck: q_proj takes the gathered hidden). */
        double rq = (double)m->mla_q_rank, rkv = (double)m->mla_kv_rank;
        double rope = (double)m->mla_rope_dim, nope = (double)m->mla_nope_dim;
        dv = (double)m->mla_v_dim;
        if (rq > 0) {
            g_in = lin(c, o, T, a * d / t, rq, 1);
            o->gemm_f += lin(c, o, T / u, rq, h, 1);
            in_width = rq;
        } else {
            g_in = lin(c, o, T, a * d / t, h, 1);
        }
        o->gemm_f += lin(c, o, T / u, rkv + rope, h, 1);
        g_in += lin(c, o, T, a * (nope + dv) / t, rkv, 1);
        g_out = lin(c, o, T, h, a * dv / t, 1);
        o->gemm_f += g_in + g_out;
        o->mla_up_f = g_in;
        o->op_f += 0.5 * (g_in + g_out); /* every other projection */
        in_width += rkv + rope;
        ew += 2.0 * p * T / u * (rq + rkv); /* the latent RMSNorms */
    } else {
        /* Column-parallel QKV, row-parallel output projection. */
        g_in = lin(c, o, T, (a + 2 * g) * d / t, h, 1);
        g_out = lin(c, o, T, h, a * d / t, 1);
        o->gemm_f += g_in + g_out;
        /* Per-op SAC recomputes the second and fourth matmuls: wk and wo. */
        o->op_f += g_in * g / (a + 2 * g) + g_out;
        if (m->qk_norm) /* Qwen3's per-head RMSNorm of q and k */
            ew += 2.0 * p * T * (a + g) * d / t;
    }

    /* Attention core: QK^T (d wide) and attention x V (dv wide) over a/t heads. */
    double heads = a / t;
    double ew_attn = 0;
    if (l->flash_attn) {
        /* With context parallelism the attention runs as cp separate kernels, one per
         * K/V chunk of the ring, each on s_loc x s_loc blocks: the efficiency curve
         * applies to each step's FLOPs. */
        /* The causal half; FlashAttention's sliding window skips the tiles left of the
         * window (flash_attn window_size, TE's sliding-window masks). */
        double flops = 2.0 * b * heads * s_loc * s_full * (d + dv) / 2.0 *
                       dp_model_attn_pair_ratio(m, l->seq_len);
        double step = flops / l->cp;
        const struct dp_gemm_curve *gc = &c->cl->gpu.gemm;
        double eff = attn_rel(&c->cl->gpu, l) * gc->eff_max * step / (step + gc->half_flops);
        o->attn_f = flops / (c->peak * eff);
        if (l->fp8_attention && c->fp8)
            o->attn_f = fp8_attention(c, o->attn_f, step, T * (a * d + g * d + g * dv) / t,
                                      T * a * dv / t, &o->attn_b);
        else
            o->attn_b = FLASH_BWD_OVER_FWD * o->attn_f;
    } else {
        o->attn_f =
            gemm_s(c, s_loc, s_full, d, b * heads) + gemm_s(c, s_loc, dv, s_full, b * heads);
        o->attn_b = 2 * o->attn_f;
        /* Fused scale-mask-softmax reads and writes the scores; dropout reads them and
         * writes its output and a 1-byte mask; the context is permuted back. */
        double sc = heads * s_loc * s_full * b;
        ew_attn = 2 * p * sc + (m->dropout ? (2 * p + 1) * sc : 0) + 2 * p * T * a * dv / t;
    }
    /* Rotary embedding on Q and K (MLA: their rope parts, the rotary key shared). */
    if (m->mla)
        ew += 2.0 * p * T * (a / t + 1) * (double)m->mla_rope_dim;
    else if (m->pos == DP_POS_ROPE)
        ew += ew_rope_bytes(c) * T * (a + g) * d / t;
    o->attn_ew_f = ew_attn / c->membw;
    o->ew_f += (ew + ew_attn) / c->membw;
    o->op_f += ew / c->membw; /* rotary (and q/k norms), recomputed */

    /* Tensor parallel: the attention region (Shoeybi et al. 2019, Fig. 3). */
    tp_region(c, in_width, h, g_in, g_out, o);
}

/* Whether a MoE layer's combine all-to-all follows its last saved tensor (layer()). */
static bool combine_after_last_save(const struct dp__time_ctx *c)
{
    return dp_recompute_early_stop(c->m, c->l) && c->l->moe_dispatcher == DP_DISPATCH_DEDUP &&
           c->l->ep > 1;
}

/*
 * A MoE layer's MLP per GPU (Megatron-Core MoELayer): the router on the local tokens,
 * the token copies' dispatch over EP, the local experts' grouped GEMMs on
 * dp_moe_rows rows, the combine, and the shared experts as a TP MLP.
 */
static void moe_mlp(const struct dp__time_ctx *c, struct dp_layer_time *o)
{
    const struct dp_model *m = c->m;
    const struct dp_layout *l = c->l;
    const double t = c->t, u = c->u, p = c->p, T = c->T, h = (double)m->hidden;
    const double up = m->ffn == DP_FFN_SWIGLU ? 2 : 1, act_b = ew_act_bytes(c);
    const double E = (double)m->experts, k = (double)m->top_k, ep = l->ep;
    const double etp = dp_layout_etp(l), f = (double)m->moe_ffn_hidden;
    const double rows = dp_moe_rows(m, l), local = E / ep;

    /* Router (TopKRouter): the gate GEMM on the T/u local tokens, then memory-bound
     * passes over the fp32 scores: the softmax or sigmoid (read logits, write scores),
     * top-k (read scores, write k indices and weights) and the auxiliary load-balancing
     * loss (read scores again). */
    double gate = gemm_s(c, T / u, E, h, 1);
    o->gemm_f += gate;
    double router = T / u * (3.0 * 4.0 * E + 12.0 * k);
    /* Permute and unpermute: each routed copy written and read once each way. */
    double perm = 4.0 * p * rows * h;
    /* Routed experts: rows spread over the E/ep local experts (their share of the
     * load), fc1 of up x f/etp, fc2 back to h. */
    double re = rows / local;
    double experts = lin(c, o, re, up * f / etp, h, local) + lin(c, o, re, h, f / etp, local);
    o->gemm_f += experts;
    double act = act_b * rows * f / etp;
    o->moe_act_f = act / c->membw;
    double shared = 0;
    /* Shared experts: one MLP of S x f_s on every token, column/row parallel over TP
     * (Megatron SharedExpertMLP), with its own gather/scatter under SP. */
    double fs = (double)m->moe_shared_experts * (double)m->moe_shared_ffn_hidden;
    if (fs > 0) {
        double s1 = lin(c, o, T, up * fs / t, h, 1), s2 = lin(c, o, T, h, fs / t, 1);
        o->gemm_f += s1 + s2;
        act += act_b * T * fs / t;
        shared = s1 + s2;
        o->shared_f = shared + act_b * T * fs / t / c->membw;
        o->op_f += s1 / 2; /* the shared experts' w3 */
        tp_region(c, h, h, s1, s2, o);
    }
    o->ew_f += (router + perm + act) / c->membw;
    o->moe_f = gate + experts + shared + (router + perm + act) / c->membw;
    /* Per-op SAC: the router's gate is always recomputed (torchtitan
     * per_op_sac_force_recompute_mm_shapes_by_fqns), with the element-wise passes, and so
     * are the routed experts' grouped GEMMs (no _grouped_mm in its save set:
     * activations.c op_sac_stored); the dispatch is not (its all-to-all outputs are). */
    o->op_f += gate + experts + (router + perm + act) / c->membw;

    /* Dispatch and combine: an all-to-all of this GPU's tokens (its share rows / (etp k)
     * of the routed copies' tokens) over EP, each way, forward and again in backward,
     * the copies split between the intra-node link and the NIC share by the dispatcher
     * (dp_moe_dispatch_copies) and paced by the slower; (ep - 1) latency steps as for
     * any all-to-all. With etp > 1 the expert-TP group then gathers the copies and
     * reduce-scatters the outputs. */
    if (l->ep > 1) {
        double in, net, tok = p * h * rows / (etp * k);
        dp_moe_dispatch_copies(m, l, l->ep, c->ep.members_per_node, &in, &net);
        double t_in = tok * in / (c->ep.in_gbps * 1e9), t_net = tok * net / (c->ep.net_gbps * 1e9);
        double a2a = (l->ep - 1) * c->ep.latency_us * 1e-6 + (t_in > t_net ? t_in : t_net);
        o->ep_f += 2 * a2a;
        o->ep_b += 2 * a2a;
        if (combine_after_last_save(c))
            o->tail_ep_f = a2a;
    }
    if (etp > 1) {
        double bytes = p * rows * h;
        double ag = dp_coll_time_s(DP_ALLGATHER, bytes, (int)etp, &c->etp);
        double rs = dp_coll_time_s(DP_REDUCE_SCATTER, bytes, (int)etp, &c->etp);
        o->ep_f += ag + rs;
        o->ep_b += ag + rs;
    }
}

/*
 * Megatron-Core's EP all-to-all overlap (--overlap-moe-expert-parallel-comm with
 * --delay-wgrad-compute; Megatron-Bridge moe_a2a_overlap), l->ep_overlap: in the 1F1B steady
 * state the forward of one micro-batch and the backward of another are merged layer by layer
 * (megatron/core/pipeline_parallel/combined_1f1b.py; the per-layer order is
 * TransformerLayerSchedulePlan.run in megatron/core/models/common/model_chunk_schedule_plan.py):
 *   comm stream:    combine bwd  | dispatch fwd -> dispatch bwd          | combine fwd
 *   compute stream: attention fwd| mlp bwd (dgrad), mlp wgrad -> mlp fwd  | attention bwd
 * Each phase lasts as long as the longer stream; in the middle one the MLP forward waits for
 * its dispatch and the backward dispatch for the MLP's input gradient. What the phases add
 * to the two passes' compute is the pair's exposed communication, plus the usual contention
 * share of what hid. Only steady-state pairs merge: rank r runs (p - r - 1) 2 + (v - 1) p
 * warm-up forwards and as many cool-down backwards alone (schedules.py,
 * forward_backward_pipelining_with_interleaving), (p - 1) + (v - 1) p on average of its M v
 * passes; without a pipeline the first forward and the last backward
 * (combined_1f1b_schedule_for_no_pipelining). The passes' all-to-all time is the mean over
 * them. *a is the layer's attention block, *o the whole layer.
 */
static void ep_overlapped(const struct dp__time_ctx *c, const struct dp_layer_time *a,
                          struct dp_layer_time *o)
{
    const struct dp_layout *l = c->l;
    double x = o->ep_f / 2; /* one all-to-all (with etp > 1, its expert-TP collective) */
    if (x <= 0)
        return;
    double af = a->gemm_f + a->attn_f + a->ew_f + a->cast_f + a->tp_f + a->cp_f;
    double ab = 2 * a->gemm_f + a->attn_b + 2 * a->ew_f + a->cast_b + a->tp_b + a->cp_b;
    double mg = o->gemm_f - a->gemm_f, me = o->ew_f - a->ew_f;
    double mf = mg + me + (o->cast_f - a->cast_f) + (o->tp_f - a->tp_f);
    double mdg = mg + 2 * me + (o->cast_b - a->cast_b) + (o->tp_b - a->tp_b), mw = mg;
    double p1 = x > af ? x : af;
    double d_end = (x > mdg ? x : mdg) + x, f_start = mdg + mw > x ? mdg + mw : x;
    double p2 = d_end > f_start + mf ? d_end : f_start + mf;
    double p3 = x > ab ? x : ab;
    double exposed = p1 + p2 + p3 - (af + ab + mf + mdg + mw);
    double hidden = 4 * x - exposed;
    double pair = exposed + OVERLAP_CONTENTION * (hidden > 0 ? hidden : 0);
    o->ep_pair = pair / 2;
    /* DualPipeV pairs its passes itself (pipeline_dualpipev.c): each pass keeps its own
     * all-to-alls, ep_pair is what one costs inside a pair. PithTrain's overlapped
     * forward-backward runs the same five phases a layer (attention, dispatch, MLP,
     * combine, aggregate: pithtrain/dualpipe/overlap.py). */
    if (l->schedule == DP_SCHED_DUALPIPEV)
        return;
    double M = (double)dp_layout_microbatches(l), v = l->vpp, p = l->pp;
    double passes = M * v, alone = p > 1 ? (p - 1) + (v - 1) * p : 1;
    double merged = passes > alone ? (passes - alone) / passes : 0;
    o->ep_f = (1 - merged) * o->ep_f + merged * pair / 2;
    o->ep_b = (1 - merged) * o->ep_b + merged * pair / 2;
}

/* d = a - b, field by field (every field of struct dp_layer_time is a double). */
static void lt_sub(const struct dp_layer_time *a, const struct dp_layer_time *b,
                   struct dp_layer_time *d)
{
    _Static_assert(sizeof(struct dp_layer_time) % sizeof(double) == 0, "doubles only");
    const double *x = (const double *)a, *y = (const double *)b;
    double *z = (double *)d;
    for (size_t i = 0; i < sizeof *d / sizeof(double); i++)
        z[i] = x[i] - y[i];
}

/* One layer's costs into *o; with blk, also its attention block (blk[0]: norm, QKV,
 * attention core, out-projection, their TP and CP communication) and its MLP block
 * (blk[1]: norm, MLP or router and experts, TP and EP communication), which sum to *o. */
static void layer(const struct dp__time_ctx *c, enum dp_layer_kind kind, struct dp_layer_time *o,
                  struct dp_layer_time blk[2])
{
    const struct dp_model *m = c->m;
    const struct dp_layout *l = c->l;
    memset(o, 0, sizeof *o);
    const double t = c->t, u = c->u, p = c->p, T = c->T;
    const double h = (double)m->hidden, g = (double)m->kv_heads, d = (double)m->head_dim;

    attention(c, o);
    struct dp_layer_time a = *o; /* the attention block */
    double fc2 = 0;
    if (kind == DP_LAYER_MOE) {
        moe_mlp(c, o);
    } else {
        /* Column-parallel fc1 (gate and up for SwiGLU), row-parallel fc2, the
         * activation function; a TP region of its own. */
        const double up = m->ffn == DP_FFN_SWIGLU ? 2 : 1, f = (double)m->ffn_hidden;
        double g1 = lin(c, o, T, up * f / t, h, 1), g2 = lin(c, o, T, h, f / t, 1);
        o->gemm_f += g1 + g2;
        double act = ew_act_bytes(c) * T * f / t / c->membw;
        o->ew_f += act;
        o->mlp_f = g1 + g2 + act;
        fc2 = g2;
        /* Per-op SAC: SwiGLU's w3 (half of the fused gate/up GEMM), or GELU's fc2. */
        o->op_f += (m->ffn == DP_FFN_SWIGLU ? g1 / 2 : g2) + act;
        tp_region(c, h, h, g1, g2, o);
    }

    /* Element-wise, forward bytes: norms (read + write), two fused bias-dropout-add
     * (read output and residual, write; 1-byte masks). The attention block has the
     * first norm and bias-dropout-add, the MLP block the others. */
    double norm1 = ew_norm_bytes(c) * T * h / u;
    double norms = m->norms_per_layer * norm1;
    double bda = 2 * 3.0 * p * T * h / u + (m->dropout ? 2.0 * T * h / u : 0);
    o->ew_f += (norms + bda) / c->membw;
    o->norm_f = norms / c->membw;
    /* The last tensors a dense layer saves for backward are fc2's inputs (its input and
     * weight), which autograd packs before it runs the GEMM (the generated VariableType
     * code stores SavedVariables before the redispatch); nothing after fc2 saves anything
     * without dropout (the residual add saves nothing). PyTorch's non-reentrant checkpoint
     * stops recomputing once every saved tensor is rebuilt (torch/utils/checkpoint.py since
     * 2.1: _enable_checkpoint_early_stop = True, the recomputation pack hook raises
     * _StopRecomputationError at the last one), so fc2 and the add are not redone. FP8
     * linears (Transformer Engine, torchao Float8Linear) are autograd Functions whose
     * saved tensors are packed when their forward returns, after the GEMM. */
    if (kind != DP_LAYER_MOE && dp_recompute_early_stop(m, l))
        o->tail_f = fc2 + bda / 2 / c->membw;
    /* A MoE layer under the DeepEP path of Megatron's flex dispatcher, as NeMo Automodel
     * ports it (nemo_automodel/components/moe/megatron/token_dispatcher.py
     * token_unpermutation): the experts' output is unpermuted (saving its index) and only
     * then combined by DeepEP (fused_a2a.py FusedCombine keeps its handle as a ctx
     * attribute and saves no tensor), so the combine all-to-all and the residual add
     * follow the last saved tensor and the early stop skips them. torchtitan's own
     * all-to-all path combines first and scatters after (its MoE.forward scatter_add_),
     * so there the combine is redone: only the dedup (DeepEP) dispatcher qualifies. */
    if (kind == DP_LAYER_MOE && combine_after_last_save(c))
        o->tail_f = bda / 2 / c->membw; /* moe_mlp set tail_ep_f */
    o->op_f += (norms + bda) / c->membw;
    /* Per-op SAC saves the reduce-scatters' outputs (sequence parallel) but not the
     * all-gathers, which the recomputed norms feed again; without SP the all-reduces. */
    o->op_tp_f = l->sp ? 0.5 * o->tp_f : o->tp_f;
    a.ew_f += (norm1 + bda / 2) / c->membw;
    a.norm_f = norm1 / c->membw;
    a.op_f += (norm1 + bda / 2) / c->membw;
    a.op_tp_f = l->sp ? 0.5 * a.tp_f : a.tp_f;
    /* FP8 quantization: lin() counted the elements; fp8_cast_bytes moves per element. */
    if (c->fp8) {
        /* FP8 weights gathered in FP8 need only the transposed copy (read and write 1 byte);
         * MXFP8 weights are quantized from the gathered bf16 in both orientations. */
        double wb = (dp_layout_fp8_gather(l) ? 2.0 : c->cast_b) / c->membw;
        o->cast_f *= c->cast_b / c->membw;
        o->cast_b *= c->cast_b / c->membw;
        o->cast_w *= wb;
        a.cast_f *= c->cast_b / c->membw;
        a.cast_b *= c->cast_b / c->membw;
        a.cast_w *= wb;
    } else {
        o->cast_f = o->cast_b = o->cast_w = 0;
        a.cast_f = a.cast_b = a.cast_w = 0;
    }

    /* Context parallel (ring attention): cp - 1 exchanges of this rank's K and V
     * chunk, overlapped with the attention of the chunk in hand; backward also
     * returns dK and dV. Every rank of the ring sends at once, so each step waits
     * for the ring's slowest hop (c->cp). MLA exchanges its expanded K and V. */
    if (l->cp > 1) {
        double kvw = m->mla ? (double)m->heads * (d + (double)m->mla_v_dim) : 2.0 * g * d;
        double kv = p * T * kvw / t;
        double step_f = dp_coll_time_s(DP_P2P, kv, 2, &c->cp);
        double per_f = o->attn_f / l->cp, per_b = o->attn_b / l->cp;
        o->cp_f = (l->cp - 1) * overlapped(step_f, per_f);
        o->cp_b = (l->cp - 1) * overlapped(2 * step_f, per_b);
        o->cp_raw_f = (l->cp - 1) * step_f;
        o->cp_raw_b = (l->cp - 1) * 2 * step_f;
        a.cp_f = o->cp_f;
        a.cp_b = o->cp_b;
        a.cp_raw_f = o->cp_raw_f;
        a.cp_raw_b = o->cp_raw_b;
    }
    if (kind == DP_LAYER_MOE && (l->ep_overlap || l->schedule == DP_SCHED_DUALPIPEV))
        ep_overlapped(c, &a, o);
    if (blk) {
        blk[0] = a;
        lt_sub(o, &a, &blk[1]);
    }
}

static void ends(const struct dp__time_ctx *c, struct dp_layer_time *o)
{
    const struct dp_model *m = c->m;
    const struct dp_layout *l = c->l;
    const double t = c->t, u = c->u, p = c->p, T = c->T, h = (double)m->hidden;
    /* Embedding gather (+ positions), and its vocabulary-parallel all-reduce
     * (reduce-scatter under SP); backward scatters gradients into the table. */
    double ew = 3.0 * p * T * h / c->membw;
    o->emb_f = ew;
    o->emb_b = 2 * ew;
    o->emb_tp_f = l->tp > 1 ? dp_coll_time_s(l->sp ? DP_REDUCE_SCATTER : DP_ALLREDUCE, p * T * h,
                                             l->tp, &c->tp)
                            : 0;
    /* Final norm, LM head GEMM (vocabulary-parallel), cross entropy on fp32
     * logits: ~5 passes of 4 bytes forward, 3 backward (Megatron
     * vocab_parallel_cross_entropy), three small all-reduces over TP. */
    double vpad = (double)dp_padded_vocab(m->vocab, l->tp);
    double head = gemm_s(c, T, vpad / t, h, 1);
    double ce = T * vpad / t * 4.0;
    double norm = 2.0 * p * T * h / u;
    /* fp8_output (Megatron-Core fp8_output_proj, MXFP8 only): the output layer is a TE
     * linear under the recipe, its GEMMs at the FP8 rate with the module's fixed cost,
     * its input quantized forward and the logits' gradient backward (the weight's cast
     * is once per step, under TE's per-step weight cache, and left out). */
    double qf = 0, qb = 0;
    if (l->fp8_output && c->mxfp8) {
        head = gemm_lin(c, T, vpad / t, h, 1) + c->cl->gpu.mxfp8_fixed_s;
        qf = T * h * c->cast_b;
        qb = T * vpad / t * c->cast_b;
    }
    o->head_f = head + (5 * ce + norm + qf) / c->membw;
    o->head_b = 2 * head + (3 * ce + 2 * norm + qb) / c->membw;
    o->head_tp_f = o->head_tp_b = 0;
    if (l->tp > 1) {
        o->head_tp_f = 3 * dp_coll_time_s(DP_ALLREDUCE, 4.0 * T, l->tp, &c->tp);
        if (l->sp) {
            double ag = dp_coll_time_s(DP_ALLGATHER, p * T * h, l->tp, &c->tp);
            o->head_tp_f += ag;
            o->head_tp_b = ag + dp_coll_time_s(DP_REDUCE_SCATTER, p * T * h, l->tp, &c->tp);
        }
    }
    /* A multi-token-prediction depth (Megatron-Core multi_token_prediction.py
     * MultiTokenPredictionLayer): the embedding of the tokens shifted by one more
     * position, RMSNorm of it and of the previous depth's hidden states (enorm, hnorm),
     * their concatenation projected 2h -> h (eh_proj, column-parallel), then, after its
     * transformer layer, the final norm, the shared output layer and a cross entropy of
     * its own: the head's cost again. */
    o->mtp_f = o->mtp_b = 0;
    if (l->mtp_layers > 0) {
        double proj = gemm_s(c, T, h / t, 2 * h, 1);
        double norms = 2 * 2.0 * p * T * h / u;
        /* eh_proj's output is gathered over TP (gather_from_tensor_model_parallel_region)
         * and the output layer's collectives are the head's: counted here with the rest. */
        double tp_f = l->tp > 1 ? dp_coll_time_s(DP_ALLGATHER, p * T * h, l->tp, &c->tp) : 0;
        o->mtp_f =
            ew + proj + (norms + 2 * p * T * h / u) / c->membw + o->head_f + tp_f + o->head_tp_f;
        o->mtp_b = 2 * ew + 2 * proj + 2 * (norms + 2 * p * T * h / u) / c->membw + o->head_b +
                   tp_f + o->head_tp_b;
    }
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

/*
 * Muon's orthogonalization (Jordan et al. 2024, "Muon: An optimizer for hidden layers in
 * neural networks"): each step, the momentum-updated gradient X of every 2-D weight (a x b
 * with a <= b, transposed if tall) goes through 5 quintic Newton-Schulz iterations, each
 * A = X X^T (a x a, inner b), A A, and (bA + cA^2) X: 4 a^2 b + 2 a^3 FLOPs, on the whole
 * matrix, in the storage precision (PithTrain's and the reference's bf16; Megatron-Core's
 * fp32 at "medium" matmul precision, bf16 tensor cores). Per layer the matrices Megatron-Core
 * and PithTrain give Muon: Q, K, V apart (--muon-split-qkv, the default), the output
 * projection, fc1 (gate and up fused in Megatron's linear_fc1) and fc2, MLA's projections,
 * the router, each expert's fc1 and fc2 (batched), the shared experts'. The work is split
 * across the ranks that share a weight's optimizer state: Megatron-Core's layer-wise
 * distributed optimizer gives each rank of the data-parallel shard group whole weights
 * (layer_wise_optimizer.py), PithTrain's FSDP2 round-robins them over the 1-D mesh
 * (orthogonalized_updates) but on an HSDP 2-D mesh every rank does all of them; without a
 * sharded optimizer every rank does all. Tensor parallel weights are gathered whole first
 * (Megatron --muon-tp-mode duplicated, the default): each TP rank orthogonalizes the full
 * matrix and receives the other ranks' fp32 shards. `kinds`: a stage's layers.
 */
#define MUON_NS_STEPS 5.0
static double ns_time(const struct dp__time_ctx *c, double rows, double cols, double count)
{
    double a = rows < cols ? rows : cols, b = rows < cols ? cols : rows;
    if (count <= 0 || a <= 0)
        return 0;
    return MUON_NS_STEPS *
           (gemm_s(c, a, a, b, count) + gemm_s(c, a, a, a, count) + gemm_s(c, a, b, a, count));
}

static double muon_s(const struct dp__time_ctx *c, const struct dp_layer_kinds *kinds)
{
    const struct dp_model *m = c->m;
    const struct dp_layout *l = c->l;
    const double h = (double)m->hidden, a = (double)m->heads, g = (double)m->kv_heads;
    const double d = (double)m->head_dim, up = m->ffn == DP_FFN_SWIGLU ? 2 : 1;
    /* The attention's matrices (whole) and their elements. */
    double attn = 0, attn_n = 0;
    if (m->mla) {
        double rq = (double)m->mla_q_rank, rkv = (double)m->mla_kv_rank;
        double rope = (double)m->mla_rope_dim, nope = (double)m->mla_nope_dim;
        double dv = (double)m->mla_v_dim;
        if (rq > 0) {
            attn += ns_time(c, rq, h, 1) + ns_time(c, a * d, rq, 1);
            attn_n += rq * h + a * d * rq;
        } else {
            attn += ns_time(c, a * d, h, 1);
            attn_n += a * d * h;
        }
        attn += ns_time(c, rkv + rope, h, 1) + ns_time(c, a * (nope + dv), rkv, 1) +
                ns_time(c, h, a * dv, 1);
        attn_n += (rkv + rope) * h + a * (nope + dv) * rkv + h * a * dv;
    } else {
        attn = ns_time(c, a * d, h, 1) + 2 * ns_time(c, g * d, h, 1) + ns_time(c, h, a * d, 1);
        attn_n = 2 * a * d * h + 2 * g * d * h;
    }
    double dense_mlp =
        ns_time(c, up * (double)m->ffn_hidden, h, 1) + ns_time(c, h, (double)m->ffn_hidden, 1);
    double dense_mlp_n = (up + 1) * (double)m->ffn_hidden * h;
    double dense = 0, dense_n = 0, expert = 0, expert_n = 0;
    for (int k = 0; k < DP_LAYER_KINDS; k++) {
        double n = kinds->n[k];
        if (n <= 0)
            continue;
        dense += n * attn;
        dense_n += n * attn_n;
        if (k == DP_LAYER_DENSE) {
            dense += n * dense_mlp;
            dense_n += n * dense_mlp_n;
            continue;
        }
        double E = (double)m->experts, fe = (double)m->moe_ffn_hidden;
        double fs = (double)m->moe_shared_experts * (double)m->moe_shared_ffn_hidden;
        dense += n * ns_time(c, E, h, 1);
        dense_n += n * E * h;
        if (fs > 0) {
            dense += n * (ns_time(c, up * fs, h, 1) + ns_time(c, h, fs, 1));
            dense_n += n * (up + 1) * fs * h;
        }
        double local = E / l->ep; /* this EP rank's experts, whole under ETP duplicated */
        expert += n * (ns_time(c, up * fe, h, local) + ns_time(c, h, fe, local));
        expert_n += n * (up + 1) * fe * h * local;
    }
    /* The ranks that split the work (see above). */
    const bool titan_hsdp = l->framework == DP_FW_TORCHTITAN && dp_layout_replicas(l) > 1;
    double sd = l->zero >= 1 && !titan_hsdp ? dp_layout_shard(l) : 1;
    double se = l->zero >= 1 && !titan_hsdp ? dp_layout_edp(l) : 1;
    double t = dense / sd + expert / se;
    if (l->tp > 1) /* the other TP ranks' fp32 shards of the weights this rank owns */
        t += dp_coll_time_s(DP_ALLGATHER, 4.0 * dense_n / sd, l->tp, &c->tp);
    /* FSDP2 (PithTrain): each weight's fp32 update gathered whole over its shard group
     * (DTensor full_tensor), then on a 1-D mesh the owners' results broadcast back (the
     * sharded parameters' fp32): 8 B a parameter through the group, 4 B on an HSDP mesh.
     * Megatron's layer-wise optimizer reduce-scatters gradients and gathers parameters as
     * its distributed optimizer does (shard.c), nothing more. */
    if (l->framework == DP_FW_TORCHTITAN && l->zero >= 2) {
        double b = titan_hsdp ? 4.0 : 8.0;
        int gd = dp_layout_shard(l), ge = dp_layout_edp(l);
        if (gd > 1)
            t += dp_coll_time_s(DP_ALLGATHER, b * dense_n / l->tp, gd, &c->dp);
        if (ge > 1 && expert_n > 0)
            t += dp_coll_time_s(DP_ALLGATHER, b * expert_n / dp_layout_etp(l), ge, &c->dpe);
    }
    return t;
}

double dp__time_muon_s(const struct dp__time_ctx *c, int r)
{
    if (c->l->optimizer != DP_OPT_MUON)
        return 0;
    struct dp_layer_kinds kinds;
    dp_layout_stage_kinds(c->l, c->m, r, &kinds);
    return muon_s(c, &kinds);
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
                   struct dp_layer_time out[DP_LAYER_KINDS])
{
    struct dp__time_ctx c;
    ctx_init(&c, m, cl, l, false);
    for (int k = 0; k < DP_LAYER_KINDS; k++)
        layer(&c, (enum dp_layer_kind)k, &out[k], NULL);
    /* the ends are the same whatever the layers' kind */
    ends(&c, &out[0]);
    for (int k = 1; k < DP_LAYER_KINDS; k++) {
        out[k].emb_f = out[0].emb_f;
        out[k].emb_b = out[0].emb_b;
        out[k].emb_tp_f = out[0].emb_tp_f;
        out[k].head_f = out[0].head_f;
        out[k].head_b = out[0].head_b;
        out[k].head_tp_f = out[0].head_tp_f;
        out[k].head_tp_b = out[0].head_tp_b;
        out[k].mtp_f = out[0].mtp_f;
        out[k].mtp_b = out[0].mtp_b;
    }
}

void dp_time_step_fast(const struct dp_model *m, const struct dp_cluster *cl,
                       const struct dp_layout *l, struct dp_step_cost *o)
{
    struct dp_layer_time lt[DP_LAYER_KINDS];
    dp_time_layer(m, cl, l, lt);
    dp_time_step_with(m, cl, l, lt, o);
}

void dp_time_step_with(const struct dp_model *m, const struct dp_cluster *cl,
                       const struct dp_layout *l, const struct dp_layer_time lt[DP_LAYER_KINDS],
                       struct dp_step_cost *o)
{
    dp_time_step_reuse(m, cl, l, lt, NULL, o);
}

/* Tokens, FLOP rates and MFU of a step whose time o holds. */
static void derive_rates(const struct dp_model *m, const struct dp_layout *l, double peak_lin,
                         struct dp_step_cost *o)
{
    struct dp_flops fl;
    dp_flops_step(m, l, &fl);
    double gpus = (double)l->tp * l->pp * l->dp * l->cp;
    o->tokens_per_s = (double)l->gbs * (double)l->seq_len / o->step_time_s;
    o->model_tflops_per_gpu = fl.model_flops / o->step_time_s / gpus / 1e12;
    o->hardware_tflops_per_gpu = fl.hardware_flops / o->step_time_s / gpus / 1e12;
    /* MFU and HFU against the dense peak of the GEMMs' compute type: for FP8 runs the FP8
     * peak, as MosaicML (llm-foundry benchmarks: 1979 TFLOP/s for amp_fp8) and NVIDIA's DGX
     * Cloud recipes (989 bf16 / 1979 fp8) report it. */
    o->peak_tflops = peak_lin / 1e12;
    o->mfu = o->model_tflops_per_gpu * 1e12 / peak_lin;
    o->hfu = o->hardware_tflops_per_gpu * 1e12 / peak_lin;
}

/*
 * A step of S pipeline schedules (layout local_batch, torchtitan): each accumulation step
 * is the step of its own local batch, fill, drain, parameter gather and gradient
 * reduce-scatter included, run S times; the optimizer steps once.
 */
static void schedules_step(const struct dp_model *m, const struct dp_cluster *cl,
                           const struct dp_layout *l, int64_t S, struct dp_step_cost *o)
{
    struct dp_layout one = *l;
    one.gbs = l->gbs / S;
    one.local_batch = 0;
    struct dp_layer_time lt[DP_LAYER_KINDS];
    dp_time_layer(m, cl, &one, lt);
    dp_time_step_reuse(m, cl, &one, lt, NULL, o);
    const double s = (double)S;
    double *each[] = {&o->compute_s,       &o->recompute_s, &o->tp_comm_s, &o->cp_comm_s,
                      &o->ep_comm_s,       &o->pp_comm_s,   &o->bubble_s,  &o->dp_comm_s,
                      &o->dp_comm_total_s, &o->other_s};
    for (size_t i = 0; i < sizeof each / sizeof each[0]; i++)
        *each[i] *= s;
    o->step_time_s = s * (o->step_time_s - o->optimizer_s) + o->optimizer_s;
    derive_rates(m, l, o->peak_tflops * 1e12, o);
}

void dp_time_step_reuse(const struct dp_model *m, const struct dp_cluster *cl,
                        const struct dp_layout *l, const struct dp_layer_time lt[DP_LAYER_KINDS],
                        struct dp_reuse *ru, struct dp_step_cost *o)
{
    const int64_t S = dp_layout_schedules(l);
    if (S > 1) {
        schedules_step(m, cl, l, S, o);
        return;
    }
    memset(o, 0, sizeof *o);
    struct dp__time_ctx c;
    ctx_init(&c, m, cl, l, true);
    /* The CP and EP paths are the layer's (lt); dp_time_describe_paths fills them. */
    o->tp_path = c.tp;
    o->dp_path = c.dp;
    o->pp_path = c.pp;
    struct dp_reuse mine;
    struct dp_reuse *r = ru ? ru : &mine;
    if (!ru || !ru->have_pipe)
        dp__time_pipeline(&c, lt, r);
    const double pipe = r->pipe_s;
    const int pp = l->pp, L0 = r->first_layers;
    o->slowest_stage = r->slowest_stage;
    o->compute_s = r->compute_s;
    o->recompute_s = r->recompute_s;
    o->tp_comm_s = r->tp_comm_s;
    o->cp_comm_s = r->cp_comm_s;
    o->ep_comm_s = r->ep_comm_s;
    o->pp_comm_s = r->pp_comm_s;
    o->bubble_s = r->bubble_s;
    for (int i = 0; i < 3; i++) {
        o->stage_fwd_s[i] = r->stage_fwd_s[i];
        o->stage_bwd_s[i] = r->stage_bwd_s[i];
    }

    /* Data parallel: the stage with the most parameters sets the time (the first and
     * last hold the embedding and the output layer, the others only layers: the one
     * with the most of them; with layers of several kinds any stage may hold most). */
    double pdense, pexpert;
    stage_params(m, l, 0, &pdense, &pexpert);
    int Lp = L0, rp = 0; /* that stage's layers and index */
    int most = -1, most_n = -1;
    for (int d = 1; d < pp - 1; d++) {
        int n = dp_layout_stage_layers(l, m, d);
        if (n > most_n) {
            most_n = n;
            most = d;
        }
        if (l->nchunks == 0)
            break; /* the middle stages are alike */
    }
    const bool mixed = dp_model_mixed_layers(m);
    for (int d = 1; d < pp; d++) {
        if (!mixed && d != most && d != pp - 1)
            continue;
        double d2, e2;
        stage_params(m, l, d, &d2, &e2);
        if (d2 + e2 > pdense + pexpert) {
            pdense = d2;
            pexpert = e2;
            Lp = dp_layout_stage_layers(l, m, d);
            rp = d;
        }
    }
    int pb, gb, ob;
    dp_mem_bytes_per_param(l, &pb, &gb, &ob);
    /* Parameters are gathered in the storage precision (FSDP2 param_dtype; torchtitan's
     * fp32 shards are cast before the all-gather). With FP8 weights the all-gather moves the
     * linear layers' weights in FP8, half the bytes (NeMo docs, communication overlap:
     * "fp8_param_gather=True conducts the parameter all-gather in fp8"; torchao float8
     * FSDP all-gather); embeddings and norms stay in the storage precision. */
    const double pg = c.p;
    struct dp_shard_stage sh = {.dense = pdense,
                                .expert = pexpert,
                                .layers = Lp,
                                .first = rp == 0,
                                .last = rp == dp_layout_head_rank(l),
                                .fwd_s = o->stage_fwd_s[0],
                                .bwd_s = o->stage_bwd_s[0],
                                .ag_dense_bytes = pdense * pg,
                                .ag_expert_bytes = pexpert * pg};
    if (c.fp8 && dp_layout_fp8_gather(l)) {
        double wlin = linear_weights_per_layer(m, l) * Lp;
        if (wlin > pdense)
            wlin = pdense;
        sh.ag_dense_bytes = (pdense - wlin) * pg + wlin;
        sh.ag_expert_bytes = pexpert;
    }
    double exposed;
    dp_shard_comm(m, cl, l, &sh, &c.dp, &c.dpe, &o->dp_comm_total_s, &exposed);
    o->dp_comm_s = exposed;
    int ndp = dp_layout_shard(l), ndpe = dp_layout_edp(l);

    /* Tied embeddings across stages: the first and last stage sum their copies'
     * gradients (Megatron _allreduce_word_embedding_grads); so do they for the copy of the
     * input embedding the last stage keeps for multi-token prediction (Megatron-Core
     * GPTModel builds its embedding where mtp_process is set, in the embedding group). */
    if (pp > 1 && dp_layout_head_rank(l) != 0 && (m->tied_embeddings || l->mtp_layers > 0)) {
        double vpad = (double)dp_padded_vocab(m->vocab, l->tp);
        o->other_s = dp_coll_time_s(DP_ALLREDUCE, vpad * m->hidden / l->tp * gb, 2, &c.emb);
    }

    /* Optimizer step over this GPU's shard. */
    double local = pdense / (l->zero >= 1 ? ndp : 1) + pexpert / (l->zero >= 1 ? ndpe : 1);
    o->optimizer_s = local * optimizer_bytes_per_param(l) / c.membw + dp__time_muon_s(&c, rp);

    o->step_time_s = pipe + o->dp_comm_s + o->other_s + o->optimizer_s;
    derive_rates(m, l, c.peak_lin, o);
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
    if (!dp_step_cost_sane(out))
        return dp_err_set(err, DP_EINVAL,
                          "internal: the step-time model gave %g s (compute %g, communication "
                          "%g) for this layout; a bug of dplan's cost model, please report it",
                          out->step_time_s, out->compute_s,
                          out->tp_comm_s + out->cp_comm_s + out->ep_comm_s + out->dp_comm_s);
    dp_time_describe_paths(cl, l, out);
    return 0;
}

bool dp_step_cost_sane(const struct dp_step_cost *c)
{
    const double t[] = {c->compute_s, c->recompute_s, c->tp_comm_s, c->cp_comm_s,   c->ep_comm_s,
                        c->pp_comm_s, c->bubble_s,    c->dp_comm_s, c->optimizer_s, c->other_s};
    if (!(c->step_time_s > 0) || !isfinite(c->step_time_s))
        return false;
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
        if (!(t[i] >= 0) || !isfinite(t[i]))
            return false;
    return true;
}

void dp_time_describe_paths(const struct dp_cluster *cl, const struct dp_layout *l,
                            struct dp_step_cost *out)
{
    dp_place_path(cl, l, DP_PLACE_TP, &out->tp_path);
    dp_place_path(cl, l, DP_PLACE_CP, &out->cp_path);
    dp_place_path(cl, l, DP_PLACE_EP, &out->ep_path);
    dp_place_path(cl, l, DP_PLACE_ETP, &out->etp_path);
    dp_place_path(cl, l, DP_PLACE_EDP, &out->edp_path);
    dp_place_path(cl, l, DP_PLACE_DPCP, &out->dp_path);
    dp_place_path(cl, l, DP_PLACE_PP, &out->pp_path);
}

/* ------------------------------------------------------------------ for costmodel/ops.c */

void dp__time_ctx_init(struct dp__time_ctx *c, const struct dp_model *m,
                       const struct dp_cluster *cl, const struct dp_layout *l, bool step)
{
    ctx_init(c, m, cl, l, step);
}

void dp__time_layer(const struct dp__time_ctx *c, enum dp_layer_kind kind, struct dp_layer_time *o,
                    struct dp_layer_time blk[2])
{
    layer(c, kind, o, blk);
}

void dp__time_ends(const struct dp__time_ctx *c, struct dp_layer_time *o)
{
    memset(o, 0, sizeof *o);
    ends(c, o);
}

double dp__optimizer_bytes_per_param(const struct dp_layout *l)
{
    return optimizer_bytes_per_param(l);
}

double dp__linear_weights_per_layer(const struct dp_model *m, const struct dp_layout *l)
{
    return linear_weights_per_layer(m, l);
}
