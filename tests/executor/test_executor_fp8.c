/*
 * FP8 GEMMs (executor/backend/round.h, cpu_fp8.c, model.c lin_gemm) against values
 * worked out by hand from the formats (OCP FP8 spec 1.0): E4M3 keeps 4 significant bits
 * (ulp 2^-3 at 1), largest finite 448 = 1.75 2^8, smallest normal 2^-6, subnormal step
 * 2^-9; E5M2 keeps 3 (ulp 2^-2 at 1), largest finite 57344 = 1.75 2^15, smallest
 * normal 2^-14, subnormal step 2^-16. Both saturate (Transformer Engine's casts are
 * __NV_SATFINITE). Then the CPU backend's gemm_fp8 on a GEMM whose scales are powers of
 * two (so the expected value is exact arithmetic), which fails when the per-tensor
 * scaling is dropped or the operand format is ignored; and the formats the executor's
 * training step hands to gemm_fp8 at every linear GEMM (E4M3 forward tensors, E5M2
 * gradients under HYBRID; E4M3 all through under E4M3), by a spy on the ops table.
 */
#include "check.h"
#include "executor/backend/cpu.h"
#include "executor/backend/round.h"
#include "executor/internal.h"

#include <float.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

static uint32_t bits(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}
#define SAME(got, want)                                                                            \
    do {                                                                                           \
        float g_ = (got), w_ = (want);                                                             \
        if (bits(g_) != bits(w_)) {                                                                \
            fprintf(stderr, "%s:%d: %s = %a, expected %a\n", __FILE__, __LINE__, #got, (double)g_, \
                    (double)w_);                                                                   \
            check_failures++;                                                                      \
        }                                                                                          \
    } while (0)

static void e4m3(void)
{
    SAME(dp__round_e4m3(1.0f), 1.0f);
    /* 1 + 2^-4 is the tie between 1 (mantissa 000) and 1.125 (001): to even, 1.
     * 1 + 3 2^-4 = 1.1875 is the tie between 1.125 (001) and 1.25 (010): up. */
    SAME(dp__round_e4m3(1.0f + 0x1p-4f), 1.0f);
    SAME(dp__round_e4m3(1.0f + 3 * 0x1p-4f), 1.25f);
    SAME(dp__round_e4m3(-(1.0f + 3 * 0x1p-4f)), -1.25f);
    SAME(dp__round_e4m3(1.0f + 0x1p-4f + 0x1p-12f), 1.125f); /* above the tie */
    /* 0.3952 = 1.5808 2^-2; 0.5808 * 8 = 4.65 eighths: 5, 1.625 2^-2 = 0.40625. */
    SAME(dp__round_e4m3(0.3952f), 0.40625f);
    /* The top binade [256, 448]: step 32. 240 = 1.875 2^7 is exact; 440 is the tie
     * between 416 (101) and 448 (110): 448. */
    SAME(dp__round_e4m3(240.0f), 240.0f);
    SAME(dp__round_e4m3(440.0f), 448.0f);
    SAME(dp__round_e4m3(430.0f), 416.0f);
    /* Saturation: 448 stays; 464 (the tie to the NaN code 480), 1e6 and inf give 448. */
    SAME(dp__round_e4m3(448.0f), 448.0f);
    SAME(dp__round_e4m3(464.0f), 448.0f);
    SAME(dp__round_e4m3(1e6f), 448.0f);
    SAME(dp__round_e4m3(INFINITY), 448.0f);
    SAME(dp__round_e4m3(-INFINITY), -448.0f);
    /* Subnormals, multiples of 2^-9: 2^-9 stays; 2^-10 ties to 0; 3 2^-10 ties between
     * 2^-9 (odd) and 2^-8: up; 2^-6 - 2^-10 is 7.5 steps: 8 steps = 2^-6, the smallest
     * normal; 2^-6 itself stays. */
    SAME(dp__round_e4m3(0x1p-9f), 0x1p-9f);
    SAME(dp__round_e4m3(0x1p-10f), 0.0f);
    SAME(dp__round_e4m3(3 * 0x1p-10f), 0x1p-8f);
    SAME(dp__round_e4m3(-3 * 0x1p-10f), -0x1p-8f);
    SAME(dp__round_e4m3(0x1p-6f - 0x1p-10f), 0x1p-6f);
    SAME(dp__round_e4m3(0x1p-6f), 0x1p-6f);
    SAME(dp__round_e4m3(1e-5f), 0.0f);
    SAME(dp__round_e4m3(-0.0f), -0.0f);
    CHECK(isnan(dp__round_e4m3(NAN)));
}

static void e5m2(void)
{
    /* 1 + 2^-3 ties between 1 (00) and 1.25 (01): 1; 1.375 between 1.25 and 1.5 (10): up. */
    SAME(dp__round_e5m2(1.0f + 0x1p-3f), 1.0f);
    SAME(dp__round_e5m2(1.375f), 1.5f);
    /* 0.3952 = 1.5808 2^-2: 2.32 quarters: 2, 1.5 2^-2 = 0.375. */
    SAME(dp__round_e5m2(0.3952f), 0.375f);
    /* Top binade [32768, 57344], step 8192; 61440 ties to 65536 (inf): saturates. */
    SAME(dp__round_e5m2(57344.0f), 57344.0f);
    SAME(dp__round_e5m2(61440.0f), 57344.0f);
    SAME(dp__round_e5m2(53248.0f), 49152.0f); /* tie 49152 (10) / 57344 (11): down */
    SAME(dp__round_e5m2(INFINITY), 57344.0f);
    SAME(dp__round_e5m2(-1e30f), -57344.0f);
    /* Subnormals, multiples of 2^-16: 2^-17 ties to 0, 3 2^-17 to 2^-15. */
    SAME(dp__round_e5m2(0x1p-16f), 0x1p-16f);
    SAME(dp__round_e5m2(0x1p-17f), 0.0f);
    SAME(dp__round_e5m2(3 * 0x1p-17f), 0x1p-15f);
    SAME(dp__round_e5m2(0x1p-14f), 0x1p-14f);
    CHECK(isnan(dp__round_e5m2(-NAN)));
}

static void scale(void)
{
    SAME(dp__fp8_scale(2.0f, DP_E4M3_MAX), 224.0f);
    SAME(dp__fp8_scale(7 * 0x1p-10f, DP_E4M3_MAX), 0x1p16f); /* 448 / (7 2^-10) */
    SAME(dp__fp8_scale(0.0f, DP_E4M3_MAX), 1.0f);
    SAME(dp__fp8_scale(INFINITY, DP_E5M2_MAX), 1.0f);
    SAME(dp__fp8_scale(NAN, DP_E5M2_MAX), 1.0f);
    /* 448 / 2^-140 = 1.75 2^148 overflows fp32: FLT_MAX. */
    SAME(dp__fp8_scale(0x1p-140f, DP_E4M3_MAX), FLT_MAX);
}

/*
 * C [1x1] = A [1x3] B [3x1], A = (7 2^-10, 1.125 2^-10, -2^-20), B = (1, 1, 1).
 * E4M3: amax_A = 7 2^-10, s_A = 2^16; A s_A = (448, 72, -2^-4), all exact (72 = 1.125
 *   2^6; 2^-4 = 32 subnormal steps); B: s_B = 448, B s_B = 448 each.
 *   C = (448 + 72 - 2^-4) 448 / (2^16 448) = 519.9375 2^-16.
 * E5M2 for A: s_A = 57344 / (7 2^-10) = 2^23; A s_A = (57344, 9216 -> 8192 (1.125 2^13
 *   is the tie between 1 and 1.25 2^13: even), -8): C = 65528 2^-23 = 511.9375 2^-16.
 * Without scaling (A straight to E4M3): 7 2^-10 is 3.5 subnormal steps -> 4 2^-9,
 *   1.125 2^-10 0.56 steps -> 2^-9, -2^-20 -> 0: C = 5 2^-9 = 0.009765625, 23% off.
 * The result carries one rounding of fl(1/448) and of the fp32 products: 1e-6 relative.
 */
static void gemm(void)
{
    struct dp_backend be = {.dtype = DP_DT_BF16};
    const real a[3] = {7 * 0x1p-10f, 1.125f * 0x1p-10f, -0x1p-20f};
    const real b[3] = {1, 1, 1};
    real c = 0;
    dp__cpu_gemm_fp8(&be, false, false, 1, 1, 3, 1, a, 3, DP_F8_E4M3, b, 1, DP_F8_E4M3, 0, &c, 1);
    CHECK_NEAR((double)c, 519.9375 * 0x1p-16, 1e-6);
    dp__cpu_gemm_fp8(&be, false, false, 1, 1, 3, 1, a, 3, DP_F8_E5M2, b, 1, DP_F8_E4M3, 0, &c, 1);
    CHECK_NEAR((double)c, 511.9375 * 0x1p-16, 1e-6);
    /* The same GEMM with A transposed (a 3 x 1 column, lda 2 with a padding column that
     * must not enter the amax), B transposed (1 x 3), alpha 2 and beta 1 onto C = 1. */
    const real at[6] = {7 * 0x1p-10f, 1000, 1.125f * 0x1p-10f, 1000, -0x1p-20f, 1000};
    c = 1;
    dp__cpu_gemm_fp8(&be, true, true, 1, 1, 3, 2, at, 2, DP_F8_E4M3, b, 3, DP_F8_E4M3, 1, &c, 1);
    CHECK_NEAR((double)c, 1 + 2 * 519.9375 * 0x1p-16, 1e-6);
}

/* ------------------------------------------------------------------ the formats used */

static struct {
    int fwd, dgrad, wgrad, bad;
    enum dp_f8 want_grad;
} spy;

static void spy_gemm_fp8(struct dp_backend *be, bool ta, bool tb, int m, int n, int k, real alpha,
                         const real *a, int lda, enum dp_f8 fa, const real *b, int ldb,
                         enum dp_f8 fb, real beta, real *c, int ldc)
{
    /* model.c's linears: forward X W^T (tb), dgrad dY W (neither), wgrad dY^T X (ta). */
    if (tb) {
        spy.fwd++;
        spy.bad += fa != DP_F8_E4M3 || fb != DP_F8_E4M3;
    } else {
        ta ? spy.wgrad++ : spy.dgrad++;
        spy.bad += fa != spy.want_grad || fb != DP_F8_E4M3;
    }
    dp__cpu_gemm_fp8(be, ta, tb, m, n, k, alpha, a, lda, fa, b, ldb, fb, beta, c, ldc);
}

static void tiny(struct dp_model *mp, bool llama)
{
    struct dp_model m;
    memset(&m, 0, sizeof m);
    snprintf(m.name, sizeof m.name, "fp8-%s", llama ? "llama" : "gpt");
    m.layers = 2;
    m.hidden = 16;
    m.heads = 4;
    m.kv_heads = llama ? 2 : 4;
    m.head_dim = 4;
    m.ffn_hidden = 32;
    m.vocab = 40;
    m.seq_len = 16;
    m.ffn = llama ? DP_FFN_SWIGLU : DP_FFN_GELU;
    m.norm = llama ? DP_NORM_RMSNORM : DP_NORM_LAYERNORM;
    m.pos = llama ? DP_POS_ROPE : DP_POS_LEARNED;
    m.max_pos = llama ? 0 : 16;
    m.tied_embeddings = !llama;
    m.qkv_bias = m.out_bias = m.mlp_bias = !llama;
    m.norms_per_layer = 2;
    *mp = m;
}

static void formats(enum dp_fp8_format fmt, bool llama)
{
    struct dp_model m;
    tiny(&m, llama);
    struct dp_layout l;
    dp_layout_default(&l);
    l.precision = DP_BF16;
    l.gemm = DP_GEMM_FP8;
    l.fp8_recipe = DP_FP8_CURRENT;
    l.fp8_format = fmt;
    l.mbs = 2;
    l.gbs = 2;
    l.seq_len = 16;
    struct dp_tokens tok = {0};
    uint16_t ids[200];
    for (int i = 0; i < 200; i++)
        ids[i] = (uint16_t)((i * 7 + 3) % 40);
    tok.tok = ids;
    tok.n = 200;
    snprintf(tok.source, sizeof tok.source, "synthetic");
    struct dp_exec_opts o;
    dp_exec_opts_default(&o);
    o.data = &tok;
    o.precision = DP_BF16;
    o.threads = 1;
    struct dp_err err = {0};
    struct dp_exec *ex;
    if (dp__exec_new(&m, &l, &o, &ex, &err)) {
        fprintf(stderr, "dp__exec_new: %s\n", err.msg);
        check_failures++;
        return;
    }
    struct dp_backend_ops ops = *ex->be->ops;
    ops.gemm_fp8 = spy_gemm_fp8;
    const struct dp_backend_ops *real_ops = ex->be->ops;
    ex->be->ops = &ops;
    memset(&spy, 0, sizeof spy);
    spy.want_grad = fmt == DP_FP8_E4M3 ? DP_F8_E4M3 : DP_F8_E5M2;
    double loss = 0;
    dp__model_working_copy(ex);
    CHECK_EQ(dp__forward_backward(ex, 1, &loss), 0);
    CHECK(isfinite(loss) && loss > 0);
    /* Four linears a layer (QKV, out-projection, MLP in, MLP out), each with one
     * forward, one dgrad and one wgrad GEMM; the output layer is not among them. */
    CHECK_EQ(spy.fwd, 4 * m.layers);
    CHECK_EQ(spy.dgrad, 4 * m.layers);
    CHECK_EQ(spy.wgrad, 4 * m.layers);
    CHECK_EQ(spy.bad, 0);
    ex->be->ops = real_ops;
    dp__exec_free(ex);
}

/*
 * The step-time pricer (predict_ops.c p_gemm_fp8) on costs given by hand: 10 GB/s at
 * every level, no call cost or compute time for element-wise work, one thread. FP8 adds
 * to the element-wise time only: per GEMM operand of e elements an amax read and a
 * quantising read + write, 3 * 4 bytes per element. A linear of k inputs and n outputs
 * over N tokens quantises X and W (N k + n k) forward, dY and W (N n + n k) for dgrad,
 * dY and X (N n + N k) for wgrad: 2 (N k + N n + n k). tiny-gpt here (h 16, qkv 48,
 * MLP 32, N = mbs 2 * seq 16 = 32 tokens, one micro-batch): QKV 2 (512 + 1536 + 768) =
 * 5632, out-projection 2 (512 + 512 + 256) = 2560, MLP in 2 (512 + 1024 + 512) = 4096,
 * MLP out 4096: 16384 a layer, 32768 for 2 layers, 12 bytes each: 393216 B / 1e10 B/s.
 * The GEMMs themselves are the same fp32 GEMMs: gemm_s equal.
 */
static void predict(void)
{
    struct dp_model m;
    tiny(&m, false);
    struct dp_layout l;
    dp_layout_default(&l);
    l.precision = DP_BF16;
    l.mbs = 2;
    l.gbs = 2;
    l.seq_len = 16;
    struct dp_exec_costs k = {.threads = 1,
                              .concurrent = 1,
                              .seq_len = 16,
                              .head_dim = 4,
                              .ffn = m.ffn,
                              .norm = m.norm,
                              .gemm_gflops = 1,
                              .conc_eff = 1,
                              .bw_gbps = {10, 10, 10},
                              .cache_bytes = {1, 1}};
    struct dp_exec_machine run = {.world = 1, .ranks_per_node = 1, .threads = 1, .costs = &k};
    struct dp_exec_prediction p16, p8;
    struct dp_err err = {0};
    CHECK_EQ(dp_exec_predict(&m, &l, &run, &p16, &err), 0);
    l.gemm = DP_GEMM_FP8;
    l.fp8_recipe = DP_FP8_CURRENT;
    CHECK_EQ(dp_exec_predict(&m, &l, &run, &p8, &err), 0);
    CHECK_NEAR(p8.gemm_s, p16.gemm_s, 1e-12);
    CHECK_NEAR(p8.elementwise_s - p16.elementwise_s, 393216 / 1e10, 1e-9);
    CHECK(p16.gemm_s > 0);
}

int main(void)
{
    e4m3();
    e5m2();
    scale();
    gemm();
    formats(DP_FP8_HYBRID, false);
    formats(DP_FP8_E4M3, true);
    predict();
    dp_exec_finalize();
    return check_done("test_executor_fp8");
}
