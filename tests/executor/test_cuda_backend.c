/*
 * The CUDA backend against the CPU backend, op by op (backend.h): the same inputs
 * through both, outputs compared. The CPU kernels are the reference that the executor's
 * equivalence tests already hold against PyTorch (tests/executor/torch_ref.py), so
 * agreement here means the GPU computes the same functions. Tolerances: 1e-5 relative
 * for fp32 element-wise work (different summation orders, fast-math-free expf/tanhf of
 * a few ulp), 1e-2 of the operands' scale for the GEMMs and what goes through them
 * (TF32 keeps 10 mantissa bits: each product carries a relative error up to 2^-11 per
 * operand, NVIDIA A100 whitepaper, "TF32"); test_lt states its own (cuBLASLt bf16 and FP8).
 * Without a GPU (cudaGetDeviceCount) it says
 * so and returns 77, ctest's skip code.
 */
#include "check.h"
#include "executor/backend/backend.h"
#include "executor/backend/cuda_module.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static struct dp_backend *cpu, *gpu;
static uint64_t rng_state = 12345;

static float frand(void) /* uniform in [-1, 1), xorshift64 */
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (float)((double)(rng_state >> 11) * 0x1.0p-52 - 1.0);
}

static float *hrand(int64_t n, float scale)
{
    float *h = malloc((size_t)(n > 0 ? n : 1) * sizeof *h);
    for (int64_t i = 0; i < n; i++)
        h[i] = scale * frand();
    return h;
}

/* A device copy of host data on backend be. */
static void *dev(struct dp_backend *be, const void *h, size_t bytes)
{
    void *d = be->ops->alloc(be, bytes);
    if (h)
        be->ops->upload(be, d, h, bytes);
    return d;
}

static float *get(struct dp_backend *be, const float *d, int64_t n)
{
    float *h = malloc((size_t)n * sizeof *h);
    be->ops->download(be, h, d, (size_t)n * sizeof *h);
    return h;
}

/* max |g - c| <= tol * max(1, max |c|): the GPU result g against the CPU's c. */
static void same(const char *what, const float *g, const float *c, int64_t n, double tol)
{
    double err = 0, scale = 1;
    int64_t at = 0;
    for (int64_t i = 0; i < n; i++) {
        if (fabs(c[i]) > scale)
            scale = fabs(c[i]);
        double e = fabs((double)g[i] - (double)c[i]);
        if (!(e <= err)) {
            err = e;
            at = i;
        }
    }
    if (!(err <= tol * scale)) {
        fprintf(stderr, "%s: max error %.3g at %lld (gpu %.8g, cpu %.8g), allowed %.3g\n", what,
                err, (long long)at, g[at], c[at], tol * scale);
        check_failures++;
    }
}

/* Run the body (the variadic part, which uses BE and the device copies it makes) on both backends,
 * then compare the n floats at device pointer `out` of each. */
#define BOTH(what, n, tol, out, ...)                                                               \
    do {                                                                                           \
        float *res_[2];                                                                            \
        for (int b_ = 0; b_ < 2; b_++) {                                                           \
            struct dp_backend *BE = b_ ? gpu : cpu;                                                \
            __VA_ARGS__;                                                                           \
            res_[b_] = get(BE, (out), (n));                                                        \
        }                                                                                          \
        same(what, res_[1], res_[0], (n), (tol));                                                  \
        free(res_[0]);                                                                             \
        free(res_[1]);                                                                             \
    } while (0)

#define F(n) ((size_t)(n) * sizeof(float))

static void test_gemm(void)
{
    const int m = 33, n = 65, k = 47;
    float *a = hrand(m * k, 1), *b = hrand(k * n, 1), *c = hrand(m * n, 1);
    for (int t = 0; t < 4; t++) {
        bool ta = t & 1, tb = t & 2;
        char what[32];
        snprintf(what, sizeof what, "gemm ta=%d tb=%d", ta, tb);
        float *dc = NULL;
        /* k = 47 products of magnitude < 1: |C| up to ~47, TF32 error ~ sqrt(k) 2^-11. */
        BOTH(what, m * n, 1e-2, dc, {
            float *da = dev(BE, a, F(m * k)), *db = dev(BE, b, F(k * n));
            dc = dev(BE, c, F(m * n));
            BE->ops->gemm(BE, ta, tb, m, n, k, 0.7f, da, ta ? m : k, db, tb ? k : n, 0.3f, dc, n);
        });
    }
    /* gemm_bias (the epilogue on the GPU) against bias_fill + gemm with beta 1 on the CPU,
     * which has no gemm_bias: the same sum, the same TF32 bound. */
    float *bias = hrand(n, 1);
    for (int t = 0; t < 4; t++) {
        bool ta = t & 1, tb = t & 2;
        char what[40];
        snprintf(what, sizeof what, "gemm_bias ta=%d tb=%d", ta, tb);
        float *dc = NULL;
        BOTH(what, m * n, 1e-2, dc, {
            float *da = dev(BE, a, F(m * k)), *db = dev(BE, b, F(k * n));
            float *dbias = dev(BE, bias, F(n));
            dc = dev(BE, c, F(m * n));
            if (BE->ops->gemm_bias) {
                BE->ops->gemm_bias(BE, ta, tb, m, n, k, da, ta ? m : k, db, tb ? k : n, dbias, dc,
                                   n);
            } else {
                BE->ops->bias_fill(BE, dc, dbias, m, n);
                BE->ops->gemm(BE, ta, tb, m, n, k, 1, da, ta ? m : k, db, tb ? k : n, 1, dc, n);
            }
        });
    }
    free(bias);
    free(a), free(b), free(c);
}

static void test_init(void)
{
    float *d = NULL;
    /* A 5 x 7 slice at (3, 4) of a tensor with 20 columns: the same counter-based draws. */
    BOTH("init_fill normal", 35, 1e-6, d, {
        d = dev(BE, NULL, F(35));
        BE->ops->init_fill(BE, d, 5, 7, 20, 3, 4, 42, 7, 0.02, 0);
    });
    BOTH("init_fill value", 35, 0, d, {
        d = dev(BE, NULL, F(35));
        BE->ops->init_fill(BE, d, 5, 7, 20, 0, 0, 42, 7, 0, 1.5);
    });
}

static void test_norms(void)
{
    const int64_t N = 37, C = 96;
    float *x = hrand(N * C, 2), *w = hrand(C, 1), *bb = hrand(C, 1), *dy = hrand(N * C, 1);
    for (int kind = 0; kind < 2; kind++) {
        enum dp_norm_kind nk = kind ? DP_NORM_RMSNORM : DP_NORM_LAYERNORM;
        const float *bias = kind ? NULL : bb;
        float *out = NULL, *st = NULL, *dx = NULL, *dw = NULL, *db = NULL;
        BOTH(kind ? "rmsnorm fwd" : "layernorm fwd", N * C, 1e-5, out, {
            out = dev(BE, NULL, F(N * C));
            st = dev(BE, NULL, F(2 * N));
            BE->ops->norm_fwd(BE, nk, out, st, dev(BE, x, F(N * C)), dev(BE, w, F(C)),
                              bias ? dev(BE, bias, F(C)) : NULL, N, C);
        });
#define NORM_BWD                                                                                   \
    do {                                                                                           \
        float *dx_ = dev(BE, NULL, F(N * C)), *st_ = dev(BE, NULL, F(2 * N));                      \
        float *x_ = dev(BE, x, F(N * C)), *w_ = dev(BE, w, F(C));                                  \
        BE->ops->norm_fwd(BE, nk, dev(BE, NULL, F(N *C)), st_, x_, w_,                             \
                          bias ? dev(BE, bias, F(C)) : NULL, N, C);                                \
        dw = dev(BE, NULL, F(C));                                                                  \
        db = kind ? NULL : dev(BE, NULL, F(C));                                                    \
        BE->ops->norm_bwd(BE, nk, dx_, dw, db, dev(BE, dy, F(N *C)), x_, w_, st_, N, C);           \
        dx = dx_;                                                                                  \
    } while (0)
        BOTH("norm bwd dinp", N * C, 1e-4, dx, NORM_BWD);
        BOTH("norm bwd dw", C, 1e-4, dw, NORM_BWD);
        if (!kind)
            BOTH("norm bwd db", C, 1e-4, db, NORM_BWD);
    }
    free(x), free(w), free(bb), free(dy);
}

static void test_small(void)
{
    const int64_t N = 29, C = 70;
    float *a = hrand(N * C, 1), *b = hrand(N * C, 1), *bias = hrand(C, 1);
    float *o = NULL;
    BOTH("bias_fill", N * C, 0, o, {
        o = dev(BE, NULL, F(N * C));
        BE->ops->bias_fill(BE, o, dev(BE, bias, F(C)), N, C);
    });
    BOTH("bias_grad", C, 1e-5, o, {
        o = dev(BE, bias, F(C));
        BE->ops->bias_grad(BE, o, dev(BE, a, F(N * C)), N, C);
    });
    BOTH("residual a+b+bias in place", N * C, 1e-6, o, {
        o = dev(BE, a, F(N * C));
        BE->ops->residual(BE, o, o, dev(BE, b, F(N * C)), dev(BE, bias, F(C)), N, C);
    });
    BOTH("residual a+bias", N * C, 1e-6, o, {
        o = dev(BE, NULL, F(N * C));
        BE->ops->residual(BE, o, dev(BE, a, F(N * C)), NULL, dev(BE, bias, F(C)), N, C);
    });
    BOTH("add_inplace", N * C, 1e-6, o, {
        o = dev(BE, a, F(N * C));
        BE->ops->add_inplace(BE, o, dev(BE, b, F(N * C)), N * C);
    });
    free(a), free(b), free(bias);
}

/* The storage emulation: the same rounded values, bit for bit, from both backends (ties,
 * fp16 overflow and subnormals among them). */
static void test_round(void)
{
    enum { N = 4096 };
    float *h = hrand(N, 70000);
    const float special[] = {1.0f + 0x1p-8f, 1.0f + 3 * 0x1p-8f, 65519.0f,  65520.0f,     -1e5f,
                             0x1p-25f,       3 * 0x1p-25f,       0x1p-134f, 3 * 0x1p-134f};
    memcpy(h, special, sizeof special);
    for (int t = DP_DT_BF16; t <= DP_DT_FP16; t++) {
        float *r[2];
        for (int b = 0; b < 2; b++) { /* compared bit for bit: inf - inf is no error */
            struct dp_backend *be = b ? gpu : cpu;
            be->dtype = (enum dp_dtype)t;
            float *o = dev(be, h, F(N));
            be->ops->round_store(be, o, N);
            r[b] = get(be, o, N);
        }
        int differ = 0;
        for (int i = 0; i < N; i++)
            differ += memcmp(&r[0][i], &r[1][i], sizeof(float)) != 0;
        if (differ) {
            fprintf(stderr, "round_store %s: %d of %d values differ from the cpu's\n",
                    t == DP_DT_BF16 ? "bf16" : "fp16", differ, N);
            check_failures++;
        }
        free(r[0]), free(r[1]);
    }
    cpu->dtype = gpu->dtype = DP_DT_FP32;
    free(h);
}

/* 2-byte words (pack / unpack, pack16.h on both): the same words from both backends, and
 * each backend's unpack of them the same values, bit for bit. */
static void test_pack(void)
{
    enum { N = 4096 };
    float *h = hrand(N, 70000);
    const float special[] = {1.0f + 0x1p-8f, 1.0f + 3 * 0x1p-8f, 65519.0f,  65520.0f,     -1e5f,
                             0x1p-25f,       3 * 0x1p-25f,       0x1p-134f, 3 * 0x1p-134f};
    memcpy(h, special, sizeof special);
    for (int t = DP_DT_BF16; t <= DP_DT_FP16; t++) {
        uint16_t w[2][N];
        float *r[2];
        for (int b = 0; b < 2; b++) {
            struct dp_backend *be = b ? gpu : cpu;
            be->dtype = (enum dp_dtype)t;
            float *x = dev(be, h, F(N));
            uint16_t *d = dev(be, NULL, (size_t)N * sizeof(uint16_t));
            be->ops->pack(be, d, x, N);
            be->ops->download(be, w[b], d, (size_t)N * sizeof(uint16_t));
            be->ops->unpack(be, x, d, N);
            r[b] = get(be, x, N);
        }
        int differ = 0;
        for (int i = 0; i < N; i++)
            differ += w[0][i] != w[1][i] || memcmp(&r[0][i], &r[1][i], sizeof(float)) != 0;
        if (differ) {
            fprintf(stderr, "pack/unpack %s: %d of %d values differ from the cpu's\n",
                    t == DP_DT_BF16 ? "bf16" : "fp16", differ, N);
            check_failures++;
        }
        free(r[0]), free(r[1]);
    }
    cpu->dtype = gpu->dtype = DP_DT_FP32;
    free(h);
}

static void test_act(void)
{
    const int64_t N = 23, F_ = 50;
    float *inp = hrand(N * 2 * F_, 4), *dy = hrand(N * 2 * F_, 1);
    for (int kind = 0; kind < 2; kind++) {
        enum dp_ffn_kind fk = kind ? DP_FFN_SWIGLU : DP_FFN_GELU;
        const int64_t w_in = kind ? 2 * F_ : F_;
        float *o = NULL, *dbias = NULL;
        BOTH(kind ? "swiglu fwd" : "gelu fwd", N * F_, 1e-5, o, {
            o = dev(BE, NULL, F(N * F_));
            BE->ops->act_fwd(BE, fk, o, dev(BE, inp, F(N * w_in)), N, F_);
        });
#define ACT_BWD                                                                                    \
    do {                                                                                           \
        o = dev(BE, NULL, F(N * w_in));                                                            \
        dbias = dev(BE, NULL, F(w_in));                                                            \
        BE->ops->act_bwd(BE, fk, o, dbias, dev(BE, dy, F(N *F_)), dev(BE, inp, F(N *w_in)), N,     \
                         F_);                                                                      \
    } while (0)
        BOTH("act bwd dinp", N * w_in, 1e-5, o, ACT_BWD);
        BOTH("act bwd dbias", w_in, 1e-5, dbias, ACT_BWD);
    }
    free(inp), free(dy);
}

static void test_rope(void)
{
    const int64_t N = 12, T = 6;
    const int nq = 2, nk = 1, d = 8, ld = (nq + 2 * nk) * d;
    float *x = hrand(N * ld, 1), *cs = hrand(2 * T * d / 2, 1);
    for (int inv = 0; inv < 2; inv++) {
        float *o = NULL;
        BOTH(inv ? "rope inverse" : "rope", N * ld, 1e-6, o, {
            o = dev(BE, x, F(N * ld));
            BE->ops->rope(BE, o, ld, N, T, nq, nk, d, dev(BE, cs, F(T * d)), inv);
        });
    }
    free(x), free(cs);
}

static void test_attention(void)
{
    /* GQA: 4 query heads over 2 kv heads, head width 16, 2 sequences of 19 tokens. */
    const int64_t B = 2, T = 19;
    const int a = 4, g = 2, d = 16, ld = (a + 2 * g) * d;
    float *qkv = hrand(B * T * ld, 1), *dctx = hrand(B * T * a * d, 1);
    float *ctx = NULL, *probs = NULL, *dqkv = NULL;
#define ATT_FWD                                                                                    \
    do {                                                                                           \
        ctx = dev(BE, NULL, F(B * T * a * d));                                                     \
        probs = dev(BE, NULL, F(B * a * T * T));                                                   \
        BE->ops->attn_fwd(BE, ctx, probs, dev(BE, qkv, F(B *T *ld)), B, T, a, g, d);               \
    } while (0)
    BOTH("attn ctx", B * T * a * d, 1e-2, ctx, ATT_FWD);
    BOTH("attn probs", B * a * T * T, 1e-2, probs, ATT_FWD);
    BOTH("attn_probs", B * a * T * T, 1e-2, probs, {
        probs = dev(BE, NULL, F(B * a * T * T));
        BE->ops->attn_probs(BE, probs, dev(BE, qkv, F(B * T * ld)), B, T, a, g, d);
    });
    BOTH("attn bwd dqkv", B * T * ld, 1e-2, dqkv, {
        float *q_ = dev(BE, qkv, F(B * T * ld));
        ctx = dev(BE, NULL, F(B * T * a * d));
        probs = dev(BE, NULL, F(B * a * T * T));
        BE->ops->attn_fwd(BE, ctx, probs, q_, B, T, a, g, d);
        dqkv = dev(BE, NULL, F(B * T * ld));
        BE->ops->attn_bwd(BE, dqkv, dev(BE, NULL, F(B * a * T * T)),
                          dev(BE, dctx, F(B * T * a * d)), q_, probs, B, T, a, g, d);
    });
    free(qkv), free(dctx);
}

/* Flash attention (cuda_flash.cu) against the CPU backend's math attention (the
 * reference; for lse, the CPU's flash attention): one partial tile (T = 19), three tiles
 * with a partial last (T = 70), GQA, and d = 64, whose backward needs more than 48 KiB of
 * shared memory (the opt-in of cuda_flash.cu). */
static void test_flash(void)
{
    const int64_t B = 2, Ts[2] = {19, 70};
    const int a = 4, g = 2, ds[2] = {16, 64};
    for (int c = 0; c < 2; c++) {
        const int64_t T = Ts[c];
        const int d = ds[c], ld = (a + 2 * g) * d;
        float *qkv = hrand(B * T * ld, 1), *dctx = hrand(B * T * a * d, 1);
        float *ctx = NULL, *lse = NULL, *dqkv = NULL;
#define FLASH_FWD(q_)                                                                              \
    do {                                                                                           \
        ctx = dev(BE, NULL, F(B * T * a * d));                                                     \
        lse = dev(BE, NULL, F(B * a * T));                                                         \
        if (BE == gpu)                                                                             \
            BE->ops->attn_flash_fwd(BE, ctx, lse, q_, B, T, a, g, d);                              \
        else                                                                                       \
            BE->ops->attn_fwd(BE, ctx, dev(BE, NULL, F(B *a *T *T)), q_, B, T, a, g, d);           \
    } while (0)
        BOTH("flash ctx", B * T * a * d, 1e-4, ctx, FLASH_FWD(dev(BE, qkv, F(B * T * ld))));
        BOTH("flash lse", B * a * T, 1e-4, lse, {
            ctx = dev(BE, NULL, F(B * T * a * d));
            lse = dev(BE, NULL, F(B * a * T));
            BE->ops->attn_flash_fwd(BE, ctx, lse, dev(BE, qkv, F(B * T * ld)), B, T, a, g, d);
        });
        BOTH("flash bwd dqkv", B * T * ld, 1e-4, dqkv, {
            float *q_ = dev(BE, qkv, F(B * T * ld)), *dc_ = dev(BE, dctx, F(B * T * a * d));
            dqkv = dev(BE, NULL, F(B * T * ld));
            if (BE == gpu) {
                FLASH_FWD(q_);
                BE->ops->attn_flash_bwd(BE, dqkv, dev(BE, NULL, F(B * a * T)), dc_, q_, ctx, lse, B,
                                        T, a, g, d);
            } else {
                float *P = dev(BE, NULL, F(B * a * T * T));
                ctx = dev(BE, NULL, F(B * T * a * d));
                BE->ops->attn_fwd(BE, ctx, P, q_, B, T, a, g, d);
                BE->ops->attn_bwd(BE, dqkv, dev(BE, NULL, F(B * a * T * T)), dc_, q_, P, B, T, a, g,
                                  d);
            }
        });
#undef FLASH_FWD
        free(qkv), free(dctx);
    }
}

static void test_ends(void)
{
    const int64_t N = 16, C = 24, T = 8, v0 = 10, nv = 40, vocab = 45;
    int32_t tok[16];
    for (int i = 0; i < 16; i++)
        tok[i] = (int32_t)((i * 7) % 50); /* some below v0, some past v0 + nv */
    float *wte = hrand(nv * C, 1), *wpe = hrand(T * C, 1), *dout = hrand(N * C, 1);
    float *o = NULL;
    BOTH("embed fwd", N * C, 0, o, {
        o = dev(BE, NULL, F(N * C));
        BE->ops->embed_fwd(BE, o, dev(BE, tok, sizeof tok), dev(BE, wte, F(nv * C)), v0, nv, N, C);
    });
    BOTH("embed bwd", nv * C, 1e-6, o, {
        o = dev(BE, wte, F(nv * C));
        BE->ops->embed_bwd(BE, o, dev(BE, tok, sizeof tok), dev(BE, dout, F(N * C)), v0, nv, N, C);
    });
    BOTH("pos fwd", N * C, 1e-6, o, {
        o = dev(BE, dout, F(N * C));
        BE->ops->pos_fwd(BE, o, dev(BE, wpe, F(T * C)), 3, N, T, C);
    });
    BOTH("pos bwd", T * C, 1e-6, o, {
        o = dev(BE, wpe, F(T * C));
        BE->ops->pos_bwd(BE, o, dev(BE, dout, F(N * C)), 3, N, T, C);
    });
    /* Cross-entropy over a vocabulary shard [10, 50) of a 45-word vocabulary: columns
     * 35 .. 39 are padding. */
    float *logits = hrand(N * nv, 3);
    float *mx = NULL, *sums = NULL, *loss = NULL, *lg = NULL;
#define CE                                                                                         \
    do {                                                                                           \
        lg = dev(BE, logits, F(N * nv));                                                           \
        int32_t *t_ = dev(BE, tok, sizeof tok);                                                    \
        mx = dev(BE, NULL, F(N));                                                                  \
        sums = dev(BE, NULL, F(2 * N));                                                            \
        loss = dev(BE, NULL, F(N));                                                                \
        BE->ops->ce_max(BE, mx, lg, N, nv, v0, vocab);                                             \
        BE->ops->ce_sums(BE, sums, lg, mx, t_, N, nv, v0, vocab);                                  \
        BE->ops->ce_grad(BE, lg, loss, mx, sums, t_, N, nv, v0, vocab, 0.25f);                     \
    } while (0)
    BOTH("ce max", N, 0, mx, CE);
    BOTH("ce sums", 2 * N, 1e-5, sums, CE);
    BOTH("ce loss", N, 1e-5, loss, CE);
    BOTH("ce grad", N * nv, 1e-5, lg, CE);
    /* The fused classifier (cuda_ce.cu) on the GPU against the three passes on the CPU,
     * over the whole vocabulary (v0 = 0, tp = 1): 45 words in 50 columns. */
#define CE_FUSED                                                                                   \
    do {                                                                                           \
        lg = dev(BE, logits, F(N * nv));                                                           \
        int32_t *t_ = dev(BE, tok, sizeof tok);                                                    \
        mx = dev(BE, NULL, F(N));                                                                  \
        sums = dev(BE, NULL, F(2 * N));                                                            \
        loss = dev(BE, NULL, F(N));                                                                \
        if (BE == gpu) {                                                                           \
            BE->ops->ce_fused(BE, lg, loss, t_, N, nv, vocab, 0.25f);                              \
        } else {                                                                                   \
            BE->ops->ce_max(BE, mx, lg, N, nv, 0, vocab);                                          \
            BE->ops->ce_sums(BE, sums, lg, mx, t_, N, nv, 0, vocab);                               \
            BE->ops->ce_grad(BE, lg, loss, mx, sums, t_, N, nv, 0, vocab, 0.25f);                  \
        }                                                                                          \
    } while (0)
    BOTH("ce fused loss", N, 1e-5, loss, CE_FUSED);
    BOTH("ce fused grad", N * nv, 1e-5, lg, CE_FUSED);
#undef CE_FUSED
    free(wte), free(wpe), free(dout), free(logits);
}

static void test_reduce_adamw(void)
{
    const int64_t n = 100003;
    float *x = hrand(n, 1);
    double s[2][2];
    for (int b = 0; b < 2; b++) {
        struct dp_backend *BE = b ? gpu : cpu;
        float *d = dev(BE, x, F(n));
        s[b][0] = BE->ops->sum(BE, d, n);
        s[b][1] = BE->ops->sumsq(BE, d, n);
    }
    CHECK_NEAR(s[1][0], s[0][0], 1e-9 * n / fabs(s[0][0])); /* double accumulation */
    CHECK_NEAR(s[1][1], s[0][1], 1e-12);
    float *g = hrand(n, 1), *m = hrand(n, 0.1f), *v = hrand(n, 0.1f);
    for (int64_t i = 0; i < n; i++)
        v[i] = fabsf(v[i]);
    float *p = NULL, *dm = NULL;
#define ADAM                                                                                       \
    do {                                                                                           \
        p = dev(BE, x, F(n));                                                                      \
        dm = dev(BE, m, F(n));                                                                     \
        BE->ops->adamw(BE, p, dev(BE, g, F(n)), dm, dev(BE, v, F(n)), n, 3e-4, 0.9, 0.95, 1e-8,    \
                       0.1, 1 - 0.9 * 0.9, 1 - 0.95 * 0.95, 0.5);                                  \
    } while (0)
    BOTH("adamw p", n, 1e-6, p, ADAM);
    BOTH("adamw m", n, 1e-6, dm, ADAM);
    free(x), free(g), free(m), free(v);
}

/*
 * Ring attention's block kernels (context parallelism): cp = 2 cuts each sequence into
 * 4 chunks; rank 0 holds chunks {0, 3}, rank 1 {1, 2} (the load-balanced split). For
 * each rank's queries, its two key/value blocks are merged in the order that leaves
 * some rows nothing to see in the first block (chunk 0 rows against block {1, 2}), so
 * the "no block merged yet" path runs; then done, dsum and the backward of both blocks.
 * No TF32 here (scalar fp32 loops on both backends): 1e-4 covers expf/logf ulps and
 * sums of a few tens of terms.
 */
static void test_ring(void)
{
    const int64_t B = 2, C = 5, T = 2 * C;
    const int a = 4, g = 2, d = 16, ldq = (a + 2 * g) * d, kvw = 2 * g * d;
    const int chunks[2][2] = {{0, 3}, {1, 2}};
    float *qkv = hrand(B * T * ldq, 1), *kvh[2], *dctx = hrand(B * T * a * d, 1);
    for (int k = 0; k < 2; k++)
        kvh[k] = hrand(B * T * kvw, 1);
    for (int q = 0; q < 2; q++) {
        const int *qc = chunks[q];
        /* The block order: the other rank's chunks first, then the own ones. */
        const int *kcs[2] = {chunks[1 - q], chunks[q]};
        float *acc = NULL, *mx = NULL, *dq = NULL, *dkv[2] = {NULL, NULL};
#define RING                                                                                       \
    do {                                                                                           \
        float *q_ = dev(BE, qkv, F(B * T * ldq)), *kv_[2], *sm_ = dev(BE, NULL, F(B * a * T));     \
        acc = dev(BE, NULL, F(B * T * a * d));                                                     \
        mx = dev(BE, NULL, F(B * a * T));                                                          \
        for (int k_ = 0; k_ < 2; k_++) {                                                           \
            kv_[k_] = dev(BE, kvh[k_], F(B * T * kvw));                                            \
            BE->ops->attn_ring_fwd(BE, acc, mx, sm_, q_, ldq, kv_[k_], qc, kcs[k_], B, C, a, g,    \
                                   d);                                                             \
        }                                                                                          \
        BE->ops->attn_ring_done(BE, acc, mx, sm_, B, T, a, d);                                     \
        float *dc_ = dev(BE, dctx, F(B * T * a * d)), *ds_ = dev(BE, NULL, F(B * a * T));          \
        BE->ops->attn_ring_dsum(BE, ds_, dc_, acc, B, T, a, d);                                    \
        dq = dev(BE, NULL, F(B * T * ldq));                                                        \
        for (int k_ = 0; k_ < 2; k_++) {                                                           \
            dkv[k_] = dev(BE, NULL, F(B * T * kvw));                                               \
            BE->ops->attn_ring_bwd(BE, dq, dkv[k_], dc_, q_, ldq, kv_[k_], mx, ds_, qc, kcs[k_],   \
                                   B, C, a, g, d);                                                 \
        }                                                                                          \
    } while (0)
        BOTH(q ? "ring ctx (rank 1)" : "ring ctx (rank 0)", B * T * a * d, 1e-4, acc, RING);
        BOTH("ring lse", B * a * T, 1e-4, mx, RING);
        BOTH("ring dq", B * T * ldq, 1e-4, dq, RING);
        BOTH("ring dkv, other block", B * T * kvw, 1e-4, dkv[0], RING);
        BOTH("ring dkv, own block", B * T * kvw, 1e-4, dkv[1], RING);
    }
    free(qkv), free(dctx), free(kvh[0]), free(kvh[1]);
}

/*
 * The batched p2p in a one-rank world: two messages to itself, posted with their tags
 * in opposite orders on the send and the receive side, and of different lengths, so a
 * backend that paired them by posting order rather than by tag would swap (or truncate)
 * them. Both kinds: NCCL ("cuda") and host-staged MPI (`staged`, "cuda-mpi").
 * Then the non-blocking all-gather: in a group of one it is a no-op that returns 0.
 */
static void test_p2p(struct dp_backend *be)
{
    struct dp_err err = {0};
    const int64_t n0 = 37, n1 = 53;
    float *h0 = hrand(n0, 1), *h1 = hrand(n1, 1);
    float *s0 = dev(be, h0, F(n0)), *s1 = dev(be, h1, F(n1));
    float *r0 = dev(be, NULL, F(n0)), *r1 = dev(be, NULL, F(n1));
    const struct dp_p2p ops[4] = {
        {.peer = 0, .buf = r1, .n = n1, .tag = 11, .send = false},
        {.peer = 0, .buf = s0, .n = n0, .tag = 10, .send = true},
        {.peer = 0, .buf = r0, .n = n0, .tag = 10, .send = false},
        {.peer = 0, .buf = s1, .n = n1, .tag = 11, .send = true},
    };
    CHECK(be->ops->p2p != NULL);
    if (!be->ops->p2p)
        return;
    int rc = be->ops->p2p(be, DP_GROUP_WORLD, ops, 4, &err);
    if (rc)
        fprintf(stderr, "%s p2p: %s\n", be->ops->name, err.msg);
    CHECK_EQ(rc, 0);
    float *g0 = get(be, r0, n0), *g1 = get(be, r1, n1);
    same("p2p message tag 10", g0, h0, n0, 0);
    same("p2p message tag 11", g1, h1, n1, 0);
    int counts[1] = {(int)n0};
    CHECK(be->ops->allgather_v_start && be->ops->allgather_v_wait);
    if (be->ops->allgather_v_start && be->ops->allgather_v_wait) {
        CHECK_EQ(be->ops->allgather_v_start(be, DP_GROUP_WORLD, s0, counts, &err), 0);
        CHECK_EQ(be->ops->allgather_v_wait(be, &err), 0);
        float *g = get(be, s0, n0);
        same("allgather_v_start, one rank", g, h0, n0, 0);
        free(g);
    }
    free(h0), free(h1), free(g0), free(g1);
}

/* ---- mixture of experts, q/k norm (cuda_moe.cu; the row code is host-tested in
 * test_cuda_moe_host.c). The router's per-row arithmetic is the CPU's in the same
 * order, so the outputs agree to a float ulp or two (the device's double exp is within
 * 1 ulp): 1e-6; the rows ops are exact copies and sums in the CPU's order (0), or a
 * double dot product in a different order (1e-6). Logits from 4 values give ties. */
static void test_moe(void)
{
    enum { N = 50, E = 8, K = 2, C = 24 };
    const int R = N * K;
    float lg[N * E], bias[E];
    static const float v4[4] = {-1, 0, 0.5f, 1};
    for (int i = 0; i < N * E; i++)
        lg[i] = i % 3 ? v4[(int)((frand() + 1) * 2) & 3] : frand();
    for (int e = 0; e < E; e++)
        bias[e] = e % 3 ? 0 : 0.25f;
    for (int sig = 0; sig < 2; sig++) {
        float *pr[2], *w[2], *dl[2];
        int32_t *ix[2], hix[2][N * K], *rr[2];
        int32_t hrr[N * K];
        for (int i = 0; i < R; i++)
            hrr[i] = i % 7 == 6 ? -1 : (int32_t)((i * 5) % R);
        float *dw = hrand(R, 1), *ga = hrand(E, 0.1f);
        for (int b = 0; b < 2; b++) {
            struct dp_backend *BE = b ? gpu : cpu;
            pr[b] = dev(BE, lg, F(N * E));
            w[b] = dev(BE, NULL, F(R));
            ix[b] = dev(BE, NULL, (size_t)R * sizeof(int32_t));
            BE->ops->router_topk(BE, pr[b], ix[b], w[b], sig ? dev(BE, bias, F(E)) : NULL, N, E, K);
            BE->ops->download(BE, hix[b], ix[b], sizeof hix[b]);
            rr[b] = dev(BE, hrr, sizeof hrr);
            dl[b] = dev(BE, NULL, F(N * E));
            BE->ops->router_bwd(BE, dl[b], pr[b], w[b], ix[b], rr[b], dev(BE, dw, F(R)),
                                dev(BE, ga, F(E)), sig, N, E, K);
        }
        CHECK(memcmp(hix[0], hix[1], sizeof hix[0]) == 0);
        float *g[2];
        for (int b = 0; b < 2; b++)
            g[b] = get(b ? gpu : cpu, pr[b], N * E);
        same(sig ? "router_topk sigmoid probs" : "router_topk softmax probs", g[1], g[0], N * E,
             1e-6);
        free(g[0]), free(g[1]);
        for (int b = 0; b < 2; b++)
            g[b] = get(b ? gpu : cpu, w[b], R);
        same("router_topk weights", g[1], g[0], R, 1e-6);
        free(g[0]), free(g[1]);
        for (int b = 0; b < 2; b++)
            g[b] = get(b ? gpu : cpu, dl[b], N * E);
        same(sig ? "router_bwd sigmoid" : "router_bwd softmax", g[1], g[0], N * E, 1e-6);
        free(g[0]), free(g[1]), free(dw), free(ga);
    }
    /* Rows: token n's K choices (rows r = n K + k) from and back to N tokens. */
    int32_t tok[N * K];
    for (int r = 0; r < R; r++)
        tok[r] = (int32_t)((r * 13) % N);
    float *x = hrand(N * C, 1), *y = hrand(R * C, 1), *sc = hrand(R, 1);
    float *o = NULL;
    BOTH("rows_gather scaled", R * C, 0, o, {
        o = dev(BE, NULL, F(R * C));
        BE->ops->rows_gather(BE, o, dev(BE, x, F(N * C)), dev(BE, tok, sizeof tok),
                             dev(BE, sc, F(R)), R, C);
    });
    BOTH("rows_gather in place (identity)", N * C, 0, o, {
        int32_t iota[N];
        for (int n = 0; n < N; n++)
            iota[n] = n;
        o = dev(BE, x, F(N * C));
        BE->ops->rows_gather(BE, o, o, dev(BE, iota, sizeof iota), dev(BE, sc, F(N)), N, C);
    });
    BOTH("rows_scatter_add", N * C, 0, o, {
        o = dev(BE, x, F(N * C));
        BE->ops->rows_scatter_add(BE, o, dev(BE, y, F(R * C)), dev(BE, tok, sizeof tok),
                                  dev(BE, sc, F(R)), R, C);
    });
    BOTH("rows_scatter_add unscaled", N * C, 0, o, {
        o = dev(BE, x, F(N * C));
        BE->ops->rows_scatter_add(BE, o, dev(BE, y, F(R * C)), dev(BE, tok, sizeof tok), NULL, R,
                                  C);
    });
    BOTH("rows_dot", R, 1e-6, o, {
        o = dev(BE, NULL, F(R));
        BE->ops->rows_dot(BE, o, dev(BE, x, F(N * C)), dev(BE, tok, sizeof tok),
                          dev(BE, y, F(R * C)), R, C);
    });
    free(x), free(y), free(sc);
}

/* q/k RMSNorm on 3 query and 1 key heads of width 64 in rows that also hold the v
 * heads (ld = (3 + 2) 64, as the QKV output with g = 1); the weight gradient sums in a
 * different order (1e-5), the rest as the CPU. */
static void test_qk_norm(void)
{
    const int64_t N = 70;
    const int nq = 3, nk = 1, d = 64, H = nq + nk;
    const int64_t ld = (int64_t)(nq + 2 * nk) * d;
    float *x = hrand(N * ld, 2), *wq = hrand(d, 1), *wk = hrand(d, 1), *g = hrand(N * ld, 1);
    float *xo = NULL, *raw = NULL, *rs = NULL, *dx = NULL, *dwq = NULL, *dwk = NULL;
    BOTH("qk_norm_fwd", N * ld, 1e-6, xo, {
        xo = dev(BE, x, F(N * ld));
        raw = dev(BE, NULL, F(N * H * d));
        rs = dev(BE, NULL, F(N * H));
        BE->ops->qk_norm_fwd(BE, xo, ld, raw, rs, dev(BE, wq, F(d)), dev(BE, wk, F(d)), N, nq, nk,
                             d);
    });
    for (int part = 0; part < 3; part++)
        BOTH(part == 0   ? "qk_norm_bwd dx"
             : part == 1 ? "qk_norm_bwd dwq"
                         : "qk_norm_bwd dwk",
             part ? d : N * ld, part ? 1e-5 : 1e-6,
             part == 0   ? dx
             : part == 1 ? dwq
                         : dwk,
             {
                 xo = dev(BE, x, F(N * ld));
                 raw = dev(BE, NULL, F(N * H * d));
                 rs = dev(BE, NULL, F(N * H));
                 float *dq = dev(BE, wq, F(d)), *dk = dev(BE, wk, F(d));
                 BE->ops->qk_norm_fwd(BE, xo, ld, raw, rs, dq, dk, N, nq, nk, d);
                 dx = dev(BE, g, F(N * ld));
                 dwq = dev(BE, wq, F(d)); /* accumulates onto a nonzero start */
                 dwk = dev(BE, NULL, F(d));
                 BE->ops->qk_norm_bwd(BE, dx, ld, dwq, dwk, raw, rs, dq, dk, N, nq, nk, d);
             });
    free(x), free(wq), free(wk), free(g);
}

/* All-to-all with counts in a group of one: this rank's piece copied to rbuf (a group
 * of two needs two GPUs for NCCL, which refuses two ranks on one device; gpu-check.sh
 * runs the cuda-mpi path with ep = 2 on one GPU). */
static void test_alltoall(struct dp_backend *be)
{
    struct dp_err err = {0};
    const int64_t n = 41;
    float *h = hrand(n, 1);
    float *s = dev(be, h, F(n)), *r = dev(be, NULL, F(n));
    int cnt[1] = {(int)n};
    CHECK(be->ops->alltoall_v != NULL);
    if (!be->ops->alltoall_v)
        return;
    int rc = be->ops->alltoall_v(be, DP_GROUP_EP, s, cnt, r, cnt, &err);
    if (rc)
        fprintf(stderr, "%s alltoall_v: %s\n", be->ops->name, err.msg);
    CHECK_EQ(rc, 0);
    float *g = get(be, r, n);
    same("alltoall_v, one rank", g, h, n, 0);
    free(g), free(h);
}

/*
 * The non-blocking reductions (gradient buckets) against the CPU backend's. In this
 * one-rank process every group has one rank, so each start must leave the buffer as it
 * is, return 0 and no request (-1), and the wait for it succeed; a wait for an id that is
 * not in flight is refused on both. The many-rank NCCL path (the communication stream)
 * runs only where each rank has its own GPU (docs/gpu.md, "Not done").
 */
static void test_async(struct dp_backend *be)
{
    struct dp_err err = {0};
    const int64_t n = 41;
    float *h = hrand(n, 1);
    float *dg = dev(be, h, F(n)), *dc = dev(cpu, h, F(n));
    CHECK(be->ops->allreduce_start && be->ops->reduce_scatter_v_start && be->ops->req_wait);
    if (!be->ops->allreduce_start || !be->ops->reduce_scatter_v_start || !be->ops->req_wait)
        return;
    int rg = 7, rc = 7, counts[1] = {(int)n};
    CHECK_EQ(be->ops->allreduce_start(be, DP_GROUP_DPCP, dg, n, DP_OP_SUM, &rg, &err), 0);
    CHECK_EQ(cpu->ops->allreduce_start(cpu, DP_GROUP_DPCP, dc, n, DP_OP_SUM, &rc, &err), 0);
    CHECK_EQ(rg, -1);
    CHECK_EQ(rc, -1);
    CHECK_EQ(be->ops->req_wait(be, rg, &err), 0);
    CHECK_EQ(cpu->ops->req_wait(cpu, rc, &err), 0);
    CHECK_EQ(be->ops->reduce_scatter_v_start(be, DP_GROUP_SHARD, dg, counts, &rg, &err), 0);
    CHECK_EQ(cpu->ops->reduce_scatter_v_start(cpu, DP_GROUP_SHARD, dc, counts, &rc, &err), 0);
    CHECK_EQ(be->ops->req_wait(be, rg, &err), 0);
    CHECK_EQ(cpu->ops->req_wait(cpu, rc, &err), 0);
    float *g = get(be, dg, n), *c = get(cpu, dc, n);
    same("allreduce_start + reduce_scatter_v_start, one rank", g, c, n, 0);
    same("the same, unchanged", g, h, n, 0);
    CHECK(be->ops->req_wait(be, 3, &err) != 0);
    CHECK(cpu->ops->req_wait(cpu, 3, &err) != 0);
    free(h), free(g), free(c);
}

static void test_arena(void)
{
    struct dp_err err = {0};
    CHECK(gpu->ops->reserve != NULL && gpu->ops->mem_peak != NULL);
    CHECK_EQ(gpu->ops->reserve(gpu, (size_t)1 << 20, &err), 0);
    size_t peak0 = 0, used = 0;
    gpu->ops->mem_peak(gpu, &peak0, &used);
    void *p = gpu->ops->alloc(gpu, 1000); /* 1024 bytes in the arena */
    CHECK(p != NULL);
    size_t peak1 = 0;
    gpu->ops->mem_peak(gpu, &peak1, &used);
    CHECK_EQ(peak1 - peak0, 1024);
    CHECK(used > 0);
    gpu->ops->free(gpu, p);
}

/* ---- cuBLASLt (cuda_lt.c): bf16 GEMMs and FP8 GEMMs against the CPU backend */

static float bf16_of(float x) /* round to nearest even, as round.h */
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    u += 0x7fffu + ((u >> 16) & 1u);
    u &= 0xffff0000u;
    memcpy(&x, &u, sizeof u);
    return x;
}

/*
 * bf16 runs: the GPU copies the operands to bf16 (exact: they are bf16 values here, as
 * the executor's stored tensors are) and multiplies with fp32 accumulation; the CPU
 * multiplies the same values in fp32. Every product of two bf16 values is exact in fp32
 * (8 + 8 significant bits), so only the summation order differs: k = 47 terms, each sum
 * rounded by 2^-24 relative, under 1e-5 of the scale.
 * FP8 (gemm_fp8, both formats, every transpose, k = 47 padded to 48 on the GPU): the
 * quantised values are the same on both (the same scale and round-to-nearest-even with
 * saturation; a difference there is one FP8 ulp, 2^-4 relative, far above the bound) and
 * their products exact; Hopper's FP8 tensor cores accumulate with fewer bits than fp32
 * (DeepSeek-V3 report Sec. 3.3.2: about 14), so 47 additions at 2^-14 each: 47 / 16384 =
 * 2.9e-3 of the scale at worst; allowed 4e-3.
 */
static void test_lt(void)
{
    struct dp_err err = {0};
    struct dp_backend_cfg cfg = {
        .tp = 1, .dp = 1, .pp = 1, .shard = 1, .threads = 1, .dtype = DP_DT_BF16};
    struct dp_backend *cpu16 = dp__backend_new("cpu", &cfg, &err);
    struct dp_backend *gpu16 = cpu16 ? dp__backend_new("cuda-mpi", &cfg, &err) : NULL;
    if (!cpu16 || !gpu16) {
        fprintf(stderr, "bf16 backends: %s\n", err.msg);
        check_failures++;
        return;
    }
    const int m = 33, n = 65, k = 47;
    float *a = hrand(m * k, 1), *b = hrand(k * n, 1), *c = hrand(m * n, 1);
    for (int i = 0; i < m * k; i++)
        a[i] = bf16_of(a[i]);
    for (int i = 0; i < k * n; i++)
        b[i] = bf16_of(b[i]);
    struct dp_backend *save_cpu = cpu, *save_gpu = gpu;
    cpu = cpu16;
    gpu = gpu16;
    for (int t = 0; t < 4; t++) {
        bool ta = t & 1, tb = t & 2;
        char what[48];
        snprintf(what, sizeof what, "cublasLt bf16 gemm ta=%d tb=%d", ta, tb);
        float *dc = NULL;
        BOTH(what, m * n, 1e-5, dc, {
            float *da = dev(BE, a, F(m * k)), *db = dev(BE, b, F(k * n));
            dc = dev(BE, c, F(m * n));
            BE->ops->gemm(BE, ta, tb, m, n, k, 0.7f, da, ta ? m : k, db, tb ? k : n, 0.3f, dc, n);
        });
    }
    cfg.fp8 = true;
    struct dp_backend *gpu8 = dp__backend_new("cuda-mpi", &cfg, &err);
    if (!gpu8 && strstr(err.msg, "sm_")) {
        printf("fp8: skipped (%s)\n", err.msg);
    } else if (!gpu8) {
        fprintf(stderr, "fp8 backend: %s\n", err.msg);
        check_failures++;
    } else {
        gpu = gpu8;
        for (int t = 0; t < 8; t++) {
            bool ta = t & 1, tb = t & 2;
            enum dp_f8 fa = t & 4 ? DP_F8_E5M2 : DP_F8_E4M3;
            char what[48];
            snprintf(what, sizeof what, "gemm_fp8 ta=%d tb=%d fa=%s", ta, tb,
                     fa == DP_F8_E5M2 ? "e5m2" : "e4m3");
            float *dc = NULL;
            BOTH(what, m * n, 4e-3, dc, {
                float *da = dev(BE, a, F(m * k)), *db = dev(BE, b, F(k * n));
                dc = dev(BE, c, F(m * n));
                BE->ops->gemm_fp8(BE, ta, tb, m, n, k, 0.7f, da, ta ? m : k, fa, db, tb ? k : n,
                                  DP_F8_E4M3, 0.3f, dc, n);
            });
        }
        if (gpu8->ops->barrier(gpu8, DP_GROUP_WORLD, &err)) {
            fprintf(stderr, "after gemm_fp8: %s\n", err.msg);
            check_failures++;
        }
        gpu8->ops->destroy(gpu8);
    }
    if (gpu16->ops->barrier(gpu16, DP_GROUP_WORLD, &err)) {
        fprintf(stderr, "after the bf16 gemms: %s\n", err.msg);
        check_failures++;
    }
    cpu = save_cpu;
    gpu = save_gpu;
    gpu16->ops->destroy(gpu16);
    cpu16->ops->destroy(cpu16);
    free(a), free(b), free(c);
}

int main(void)
{
    if (dp__cuda_module_error()) { /* a build defect, not a missing GPU */
        fprintf(stderr, "%s\n", dp__cuda_module_error());
        return 1;
    }
    if (!dp__cuda_device_present()) {
        printf("skipped: no CUDA device (cudaGetDeviceCount found none)\n");
        return 77;
    }
    struct dp_err err = {0};
    struct dp_backend_cfg cfg = {.tp = 1, .dp = 1, .pp = 1, .shard = 1, .threads = 1};
    cpu = dp__backend_new("cpu", &cfg, &err);
    gpu = cpu ? dp__backend_new("cuda", &cfg, &err) : NULL;
    if (!cpu || !gpu) {
        fprintf(stderr, "backend: %s\n", err.msg);
        return 1;
    }
    test_arena(); /* first: the buffers of the other tests then come from the arena */
    test_gemm();
    test_init();
    test_norms();
    test_small();
    test_round();
    test_pack();
    test_act();
    test_rope();
    test_attention();
    test_flash();
    test_ends();
    test_reduce_adamw();
    test_ring();
    test_lt();
    test_moe();
    test_qk_norm();
    test_alltoall(gpu);
    test_p2p(gpu);
    test_async(gpu);
    struct dp_backend *staged = dp__backend_new("cuda-mpi", &cfg, &err);
    if (!staged) {
        fprintf(stderr, "cuda-mpi backend: %s\n", err.msg);
        check_failures++;
    } else {
        test_p2p(staged);
        test_alltoall(staged);
        test_async(staged);
        staged->ops->destroy(staged);
    }
    /* Buffers are not freed one by one: the process ends here. */
    if (gpu->ops->barrier(gpu, DP_GROUP_WORLD, &err)) {
        fprintf(stderr, "after the kernels: %s\n", err.msg);
        check_failures++;
    }
    gpu->ops->destroy(gpu);
    cpu->ops->destroy(cpu);
    dp__backend_finalize();
    return check_failures ? 1 : 0;
}
