/*
 * How fast could bench-gpt train on one core if everything but the matrix products
 * were free? Times OpenBLAS sgemm (one thread) on exactly the products one training
 * step of bench-gpt makes (6 layers, hidden 256, MLP 1024, vocabulary 256, 8 x 128
 * tokens; weights stored [out, in] as in executor/model.c: forward NT, input gradient
 * NN, weight gradient TN accumulated with beta = 1) and prints the GEMM-only step time,
 * hence the most tokens/s any implementation built on these same kernels can reach.
 * Attention's batched products are left out (dplan does them in its own kernels), so
 * the ceiling is generous. bench.py runs it beside dplan and PyTorch (README, "Benchmark").
 *
 *   OPENBLAS_NUM_THREADS=1 OPENBLAS_CORETYPE=SkylakeX build/bench_gemm_ceiling
 */
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

enum { LAYERS = 6, H = 256, F = 1024, V = 256, TOKENS = 8 * 128, REPS = 9 };

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Median seconds of C = op(A) op(B) (+ C) with op(A) m x k and op(B) k x n. */
static double time_gemm(int ta, int tb, int m, int n, int k, float beta)
{
    float *a = malloc(sizeof(float) * (size_t)m * (size_t)k);
    float *b = malloc(sizeof(float) * (size_t)k * (size_t)n);
    float *c = calloc((size_t)m * (size_t)n, sizeof(float));
    if (!a || !b || !c) {
        fprintf(stderr, "bench_gemm_ceiling: out of memory\n");
        exit(1);
    }
    for (size_t i = 0; i < (size_t)m * (size_t)k; i++)
        a[i] = (float)(i % 7) * 0.01f;
    for (size_t i = 0; i < (size_t)k * (size_t)n; i++)
        b[i] = (float)(i % 5) * 0.01f;
    double t[REPS];
    for (int r = 0; r < REPS; r++) {
        double t0 = now();
        cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
                    m, n, k, 1.0f, a, ta ? m : k, b, tb ? k : n, beta, c, n);
        t[r] = now() - t0;
    }
    qsort(t, REPS, sizeof t[0], cmp);
    free(a);
    free(b);
    free(c);
    return t[REPS / 2];
}

struct linear {
    const char *name;
    int in, out, count; /* count: how many per step */
};

int main(void)
{
    const struct linear lin[] = {
        {"qkv", H, 3 * H, LAYERS}, {"attn out", H, H, LAYERS}, {"mlp in", H, F, LAYERS},
        {"mlp out", F, H, LAYERS}, {"lm head", H, V, 1},
    };
    double total = 0, flops = 0;
    printf("%-10s %6s %6s %6s   %9s %9s %9s\n", "linear", "tokens", "in", "out", "fwd GF/s",
           "dX GF/s", "dW GF/s");
    for (size_t i = 0; i < sizeof lin / sizeof lin[0]; i++) {
        const struct linear *l = &lin[i];
        double f = 2.0 * TOKENS * l->in * l->out;
        double tf = time_gemm(0, 1, TOKENS, l->out, l->in, 0.0f);
        double tx = time_gemm(0, 0, TOKENS, l->in, l->out, 0.0f);
        double tw = time_gemm(1, 0, l->out, l->in, TOKENS, 1.0f);
        printf("%-10s %6d %6d %6d   %9.1f %9.1f %9.1f\n", l->name, TOKENS, l->in, l->out,
               f / tf * 1e-9, f / tx * 1e-9, f / tw * 1e-9);
        total += l->count * (tf + tx + tw);
        flops += l->count * 3 * f;
    }
    printf("GEMM work per step: %.2f GFLOP in %.1f ms (%.1f GFLOP/s)\n", flops * 1e-9, total * 1e3,
           flops / total * 1e-9);
    printf("ceiling: %.0f tokens/s with everything but these products free\n", TOKENS / total);
    return 0;
}
