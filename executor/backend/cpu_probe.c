/*
 * Device probe for the CPU backend (probe.h): the quantities the CPU
 * step-time model needs (executor/predict.c), measured here rather than
 * assumed. Each time is the low quantile of repetitions (low_quantile): a
 * kernel's work is the same every repetition, and what else runs on the
 * machine (a neighbour's job, an interrupt, a migration) only ever adds time,
 * so the fast tail is the kernel and the slow tail the neighbours. The first
 * repetitions warm the caches and clocks as a training step's back-to-back
 * kernels do. It measures kernels and the machine, never a whole training step.
 */
#include "cpu.h"
#include "probe.h"

#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* The 10th percentile of n repetitions (the minimum below 11): noise only adds time, so
 * the low end is the kernel's own cost; a low quantile rather than the minimum because the
 * very fastest of hundreds of repetitions of a microsecond kernel is a lucky one (a timer
 * tick's rounding, a line another repetition left in L1), and twenty of them agree. */
static double low_quantile(double *t, int n)
{
    qsort(t, (size_t)n, sizeof *t, cmp_double);
    return t[(n - 1) / 10];
}

/* Repetitions of a measurement of about `each_s` seconds so that all take about `budget_s`
 * (between 3 and 200). */
static int reps_for(double each_s, double budget_s)
{
    int r = each_s > 0 ? (int)(budget_s / each_s) : 200;
    return r < 3 ? 3 : r > 200 ? 200 : r;
}

static float *fill(size_t n, int salt)
{
    float *x = malloc((n ? n : 1) * sizeof *x);
    for (size_t i = 0; x && i < n; i++)
        x[i] = (float)((i * 7 + (size_t)salt) % 13) * 0.01f - 0.06f;
    return x;
}

/* The same for the kernels' element type (double in the gradient-check build). */
static real *fill_real(size_t n, int salt)
{
    real *x = malloc((n ? n : 1) * sizeof *x);
    for (size_t i = 0; x && i < n; i++)
        x[i] = (real)((i * 7 + (size_t)salt) % 13) * (real)0.01 - (real)0.06;
    return x;
}

/* Seconds of C[m,n] = A[m,k] B[n,k]^T on the calling thread (low quantile, after two warm-up
 * calls). */
static double gemm_time(int m, int n, int k, int reps)
{
    float *a = fill((size_t)m * k, 1), *b = fill((size_t)n * k, 2), *c = fill((size_t)m * n, 3);
    double *t = malloc((size_t)reps * sizeof *t), med = 0;
    if (a && b && c && t) {
        for (int r = -2; r < reps; r++) {
            double t0 = now_s();
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, n, k, 1.0f, a, k, b, k, 0.0f, c,
                        n);
            if (r >= 0)
                t[r] = now_s() - t0;
        }
        med = low_quantile(t, reps);
    }
    free(a);
    free(b);
    free(c);
    free(t);
    return med;
}

/* Per-thread GEMM rate (GFLOP/s) while `c` threads each run 256^3 products of their own
 * (c = 1: alone). */
static double gemm_rate_concurrent(int c)
{
    const int n = 256, reps = 21;
    double rate = 0;
#pragma omp parallel num_threads(c) reduction(+ : rate)
    {
        float *a = fill((size_t)n * n, 1), *b = fill((size_t)n * n, 2), *x = fill((size_t)n * n, 3);
        double *t = malloc(reps * sizeof *t);
        if (a && b && x && t) {
            for (int r = -1; r < reps; r++) {
#pragma omp barrier
                double t0 = now_s();
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, n, n, 1.0f, a, n, b, n,
                            0.0f, x, n);
                if (r >= 0)
                    t[r] = now_s() - t0;
            }
            rate = 2.0 * n * n * n / low_quantile(t, reps) / 1e9;
        }
        free(a);
        free(b);
        free(x);
        free(t);
    }
    return rate / c;
}

/* Seconds (low quantile) of an empty parallel region of `nt` threads. */
static double fork_time(int nt)
{
    enum { R = 200 };
    double t[R];
    volatile int sink = 0;
    for (int r = 0; r < R; r++) {
        double t0 = now_s();
#pragma omp parallel num_threads(nt)
        sink += 0;
        t[r] = now_s() - t0;
    }
    (void)sink;
    return low_quantile(t, R);
}

/* Per-thread bandwidth (GB/s of y = a x + b y: 12 bytes per element) with `c` threads
 * streaming `ws` bytes each (x and y). */
static double stream_gbps(int c, size_t ws)
{
    size_t n = ws / 8;
    double bw = 0;
#pragma omp parallel num_threads(c) reduction(+ : bw)
    {
        float *x = fill(n, 1), *y = fill(n, 2);
        if (x && y) {
            /* Warm (pages touched, cache filled), then time. */
            for (size_t i = 0; i < n; i++)
                y[i] = 1.5f * x[i] + 0.5f * y[i];
            int reps = reps_for(12.0 * (double)n / 20e9, 0.01);
            if (n * 8 > ((size_t)64 << 20))
                reps = 2;
            double *t = malloc((size_t)reps * sizeof *t);
            for (int r = 0; t && r < reps; r++) {
#pragma omp barrier
                double t0 = now_s();
                for (size_t i = 0; i < n; i++)
                    y[i] = 1.5f * x[i] + 0.5f * y[i];
                __asm__ volatile("" : : "r"(y) : "memory");
                t[r] = now_s() - t0;
            }
            if (t)
                bw = 12.0 * (double)n / low_quantile(t, reps) / 1e9;
            free(t);
        }
        free(x);
        free(y);
    }
    return bw / c;
}

/* GB/s of one pass y = a x + b y over 2 x 256 KiB right after a sweep of sweep_now
 * (low quantile of 20, after two): an element-wise pass of a step, its operands last
 * touched a working set ago. */
static double swept_stream_gbps(void);

/* Cache sizes: sysfs (Linux) first, as VMs often report nonsense through sysconf. */
static int64_t cache_size(int level)
{
    char path[128], buf[64];
    for (int i = 0; i < 8; i++) {
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/level", i);
        FILE *f = fopen(path, "r");
        int lv = 0;
        if (!f)
            break;
        if (fscanf(f, "%d", &lv) != 1)
            lv = 0;
        fclose(f);
        if (lv != level)
            continue;
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/type", i);
        f = fopen(path, "r");
        if (!f || !fgets(buf, sizeof buf, f) || !strncmp(buf, "Instruction", 11)) {
            if (f)
                fclose(f);
            continue;
        }
        fclose(f);
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/size", i);
        f = fopen(path, "r");
        long long kb = 0;
        char unit = 'K';
        if (f && fscanf(f, "%lld%c", &kb, &unit) >= 1) {
            fclose(f);
            return kb * (unit == 'M' ? 1048576 : 1024);
        }
        if (f)
            fclose(f);
    }
    long v = sysconf(level == 2 ? _SC_LEVEL2_CACHE_SIZE : _SC_LEVEL3_CACHE_SIZE);
    return v > 0 ? v : (level == 2 ? 1 << 20 : 32 << 20);
}

/*
 * The caches as a training step leaves them for its next kernel: between two uses of
 * most of its tensors (an activation written in the forward and read in the backward, a
 * weight's gradient, the optimizer's moments) a step touches the rest of its buffer
 * table. A kernel timed on the same operands again and again finds them in L1/L2, which
 * a step's kernel does not: measured here (2-core EPYC VM, one thread), tiny-gpt's
 * attention ran 4.4 us per head forward hot, 8.2 after sweeping 12 MiB (its step's
 * buffers: 10.5 MiB) and 8.4 in the step (DPLAN_OPTIME); its residual add 4.7, 8.0 and
 * 9.7 us. So each repetition below first sweeps sweep_bytes through the caches (a write
 * to every line of a buffer of that size: what the step's other tensors do to them).
 */
static void sweep(int64_t bytes)
{
    static unsigned char *buf;
    static int64_t have;
    if (bytes <= 0)
        return;
    if (bytes > have) {
        unsigned char *b = realloc(buf, (size_t)bytes);
        if (!b)
            return;
        memset(b + have, 0, (size_t)(bytes - have));
        buf = b;
        have = bytes;
    }
    for (int64_t i = 0; i < bytes; i += 64)
        buf[i]++;
    __asm__ volatile("" : : "r"(buf) : "memory");
}

static int64_t sweep_now;  /* the sweep of the probe in progress (dp_exec_probe_device) */
static int reps_cap = 200; /* at most this many repetitions (fewer behind long sweeps) */
static volatile float sink_f;
static volatile double sink_d;

/* Seconds (low quantile) of kernel call `body` over reps, after two untimed calls (the
 * kernels' own OpenMP loops run on one thread: the caller set omp_set_num_threads(1)),
 * each after a sweep of sweep_now bytes (untimed). */
#define TIME_LOW(out, reps, body)                                                                  \
    do {                                                                                           \
        double t_[200];                                                                            \
        int r_ = (reps) < reps_cap ? (reps) : reps_cap;                                            \
        for (int i_ = -2; i_ < r_; i_++) {                                                         \
            sweep(sweep_now);                                                                      \
            double t0_ = now_s();                                                                  \
            body;                                                                                  \
            if (i_ >= 0)                                                                           \
                t_[i_] = now_s() - t0_;                                                            \
        }                                                                                          \
        (out) = low_quantile(t_, r_);                                                              \
    } while (0)

static int kernels(const struct dp_probe_shape *sh, struct dp_device_probe *o)
{
    /* Element-wise: 64 rows of 1024 (256 KiB per operand). The norms over rows of the
     * model's width, as many as make the same 64 Ki elements: a row's reductions (mean,
     * variance) cost per row, which at hidden 64 is 2.3x the per-element cost of rows of
     * 1024 (measured, 0.61 against 0.27 ns per element hot). */
    const int64_t N = 64, C = 1024, E = N * C;
    const int64_t Cn = sh->hidden > 0 && sh->hidden <= E ? sh->hidden : C, Nn = E / Cn;
    const int64_t T = sh->seq_len > 0 ? sh->seq_len : 64, d = sh->head_dim > 0 ? sh->head_dim : 16;
    /* Attention: Bq sequences of the model's a = hidden / head_dim heads a call, H = Bq a
     * >= 16 heads, laid out as a step lays them ([Bq T, 3 a d], each head a strided slice
     * of the rows): measured after a 12 MiB sweep, tiny-gpt's forward took 5.6 us for one
     * head alone and 8.2 us per head in 8 sequences of 4 heads, the layout of its step
     * (8.4 us there, DPLAN_OPTIME). */
    const int64_t ah = sh->hidden > 0 && sh->hidden % d == 0 ? sh->hidden / d : 1,
                  Bq = (16 + ah - 1) / ah, H = Bq * ah;
    size_t big = (size_t)(2 * E > H * T * T ? 2 * E : H * T * T);
    if ((size_t)(3 * H * T * d) > big)
        big = (size_t)(3 * H * T * d);
    real *a = fill_real(big, 1), *b = fill_real(big, 2), *c = fill_real(big, 3),
         *w = fill_real(big, 4);
    real *st = fill_real((size_t)(4 * (Nn > N ? Nn : N)), 5), *db = fill_real((size_t)(2 * E), 6);
    int32_t *tgt = malloc((size_t)N * sizeof *tgt);
    int rc = a && b && c && w && st && db && tgt ? 0 : -1;
    if (!rc) {
        for (int64_t i = 0; i < N; i++)
            tgt[i] = (int32_t)(i % C);
        double t;
        bool gelu = sh->ffn == DP_FFN_GELU;
        /* SwiGLU reads [gate | up] of 2 F columns per output element. At the model's width
         * (a GELU MLP's 4 h; SwiGLU's 8 h / 3 in 64s): the backward walks columns blocks
         * over every row for the bias gradient, whose cost per element depends on the
         * rows (tiny-gpt's 512 x 256 took 0.9 ns an element in its step, 64 x 1024 0.5
         * hot). */
        int64_t F = gelu ? C : C / 2;
        if (sh->hidden > 0)
            F = gelu ? 4 * (int64_t)sh->hidden : ((8 * (int64_t)sh->hidden / 3 + 63) / 64) * 64;
        F = F > E / 2 ? E / 2 : F < 16 ? 16 : F;
        const int64_t Na = E / (gelu ? F : 2 * F);
        TIME_LOW(t, 20, dp__cpu_act_fwd(NULL, sh->ffn, a, b, Na, F));
        o->act_fwd_ns = 1e9 * t / (double)(Na * F);
        TIME_LOW(t, 20, dp__cpu_act_bwd(NULL, sh->ffn, c, db, a, b, Na, F));
        o->act_bwd_ns = 1e9 * t / (double)(Na * F);
        bool ln = sh->norm == DP_NORM_LAYERNORM;
        TIME_LOW(t, 20, dp__cpu_norm_fwd(NULL, sh->norm, a, st, b, w, ln ? w : NULL, Nn, Cn));
        o->norm_fwd_ns = 1e9 * t / (double)E;
        TIME_LOW(t, 20,
                 dp__cpu_norm_bwd(NULL, sh->norm, c, db, ln ? db + Cn : NULL, b, a, w, st, Nn, Cn));
        o->norm_bwd_ns = 1e9 * t / (double)E;
        /* rowmax st[0, N), sums st[N, 3N), loss st[3N, 4N). */
        TIME_LOW(t, 20, {
            dp__cpu_ce_max(NULL, st, a, N, C, 0, C);
            dp__cpu_ce_sums(NULL, st + N, a, st, tgt, N, C, 0, C);
            dp__cpu_ce_grad(NULL, a, st + 3 * N, st, st + N, tgt, N, C, 0, C, (real)1e-3);
        });
        o->ce_ns = 1e9 * t / (double)E;
        TIME_LOW(t, 20,
                 dp__cpu_adamw(NULL, a, b, c, w, E / 2, 1e-3, 0.9, 0.95, 1e-8, 0.1, 0.1, 0.05, 1));
        o->adamw_ns = 1e9 * t / (double)(E / 2);
        /* Causal heads of T x d, the executor's attention kernels; the time per head. */
        real *qkv = a, *probs = b, *dqkv = c, *dprobs = w, *ctx = fill_real((size_t)(H * T * d), 7),
             *dctx = fill_real((size_t)(H * T * d), 8);
        if (ctx && dctx) {
            const int A = (int)ah;
            TIME_LOW(t, 1, dp__cpu_attn_fwd(NULL, ctx, probs, qkv, Bq, T, A, A, (int)d));
            int reps = reps_for(t, sweep_now > 0 ? 0.01 : 0.02);
            TIME_LOW(o->attn_fwd_s, reps,
                     dp__cpu_attn_fwd(NULL, ctx, probs, qkv, Bq, T, A, A, (int)d));
            TIME_LOW(o->attn_probs_s, reps,
                     dp__cpu_attn_probs(NULL, probs, qkv, Bq, T, A, A, (int)d));
            TIME_LOW(o->attn_bwd_s, reps,
                     dp__cpu_attn_bwd(NULL, dqkv, dprobs, dctx, qkv, probs, Bq, T, A, A, (int)d));
            o->attn_fwd_s /= (double)H;
            o->attn_probs_s /= (double)H;
            o->attn_bwd_s /= (double)H;
        } else {
            rc = -1;
        }
        free(ctx);
        free(dctx);
    }
    free(a);
    free(b);
    free(c);
    free(w);
    free(st);
    free(db);
    free(tgt);
    return rc;
}

int dp_exec_probe_device(const struct dp_probe_shape *sh, struct dp_device_probe *out,
                         struct dp_err *err)
{
    memset(out, 0, sizeof *out);
    int nt = sh->threads > 0 ? sh->threads : 1;
    int conc = sh->concurrent > nt ? sh->concurrent : nt;
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    if (cores > 0 && conc > cores)
        conc = (int)cores; /* more threads than cores take turns: cores run at once */
    int saved = omp_get_max_threads();
    openblas_set_num_threads(1);

    /* SGEMM: a large product for the rate, a tiny one (whose FLOPs are negligible) for the
     * cost of a call. 21 repetitions of the large one (4 ms each here): under a scheduler
     * slice of 3-4 ms on a loaded machine most repetitions are preempted once, and the
     * 10th percentile needs two that were not. */
    double tl = gemm_time(1024, 768, 256, 21);
    out->gemm_gflops = tl > 0 ? 2.0 * 1024 * 768 * 256 / tl / 1e9 : 0;
    double ts = gemm_time(16, 16, 16, 400);
    if (out->gemm_gflops <= 0 || ts <= 0)
        return dp_err_set(err, DP_ENOMEM, "device probe: out of memory");
    out->gemm_call_s = ts - 2.0 * 16 * 16 * 16 / (out->gemm_gflops * 1e9);
    if (out->gemm_call_s < 0)
        out->gemm_call_s = 0;
    /* The same product alone and with the other threads busy: the ratio is what sharing
     * the machine (caches, memory, clocks) costs each thread. */
    out->conc_eff = conc > 1 ? gemm_rate_concurrent(conc) / gemm_rate_concurrent(1) : 1.0;
    if (out->conc_eff > 1)
        out->conc_eff = 1; /* noise: sharing never speeds a thread up */
    /* An OpenMP region costs its fork and join even on one thread (GOMP still enters the
     * team: 0.42 us an empty region here at OMP_NUM_THREADS=1, against 0.04 us for a
     * kernel of 16 elements without one), and every element-wise kernel opens one. */
    out->fork_s = fork_time(nt);

    int64_t l2 = cache_size(2), l3 = cache_size(3);
    out->cache_bytes[0] = l2;
    out->cache_bytes[1] = l3 / conc;
    out->bw_gbps[0] = stream_gbps(conc, (size_t)(l2 / 2));
    out->bw_gbps[1] = stream_gbps(conc, (size_t)(l3 / conc / 2));
    size_t dram = (size_t)(2 * l3 / conc);
    out->bw_gbps[2] = stream_gbps(conc, dram > ((size_t)48 << 20) ? dram : (size_t)48 << 20);

    omp_set_num_threads(1);
    sweep_now = sh->sweep_bytes > 0 ? sh->sweep_bytes : 0;
    int rc = kernels(sh, out);
    if (!rc && sweep_now > 0)
        out->swept_gbps = swept_stream_gbps();
    sweep_now = 0;
    omp_set_num_threads(saved);
    if (rc || out->bw_gbps[2] <= 0)
        return dp_err_set(err, DP_ENOMEM, "device probe: out of memory");
    return 0;
}

int dp_exec_gemm_threads(int m, int n, int k, int threads)
{
    return dp__cpu_gemm_threads(m, n, k, threads);
}

static double swept_stream_gbps(void)
{
    const size_t n = 65536;
    float *x = fill(n, 1), *y = fill(n, 2);
    double t = 0;
    if (x && y)
        TIME_LOW(t, 20, {
            for (size_t i = 0; i < n; i++)
                y[i] = 1.5f * x[i] + 0.5f * y[i];
            __asm__ volatile("" : : "r"(y) : "memory");
        });
    free(x);
    free(y);
    return t > 0 ? 12.0 * (double)n / t / 1e9 : 0;
}

/* ------------------------------------------------------------------ bandwidth by reuse distance */

static double median3(double a, double b, double c)
{
    return fmax(fmin(a, b), fmin(fmax(a, b), c));
}

/* Seconds (low quantile of `reps`) of op(A) op(B) into C (beta 0) on this thread, each
 * repetition after a sweep of sweep_now (untimed). */
static double gemm_swept(bool ta, bool tb, int m, int n, int k, const float *a, const float *b,
                         float *c, int reps)
{
    double t;
    TIME_LOW(t, reps,
             cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans,
                         tb ? CblasTrans : CblasNoTrans, m, n, k, 1.0f, a, ta ? m : k, b,
                         tb ? k : n, 0.0f, c, n));
    return t;
}

/*
 * The samples (executor.h struct dp_exec_reuse_samples); fit/ fits them (dp_fit_reuse).
 *
 * The curve: after sweeps of 0 and 256 KiB to 256 MiB, a read of x (B = 256 KiB, eight
 * independent sums so the loads set the pace) and a fill of y from a 1 KiB row (B written:
 * each line read for ownership, then written back, the caches being full of the sweep's
 * dirty lines). Measured on this VM (one thread): read ~100 GB/s hot, ~40 between 4 and 16
 * MiB, ~30 beyond 64 MiB; write ~45, ~19, ~7; sysfs claims a 480 MiB L3 (the host's, shared
 * with other guests): the curve measures the share this thread gets.
 *
 * SGEMM: products of the shapes a small transformer's linears have (tokens x width,
 * width x width, the widths a tensor-parallel split halves), with every transpose a step
 * uses (NN forward, NT input gradient, TN weight gradient) and k from 32 to 1024, hot; a
 * quarter of them also after the farthest sweep. The executor's kernels at the probe's shapes
 * (kernels()) hot and after the farthest sweep, with what each reads and writes per unit of its
 * cost.
 */
int dp_exec_probe_reuse(const struct dp_probe_shape *sh, struct dp_exec_reuse_samples *out,
                        struct dp_err *err)
{
    memset(out, 0, sizeof *out);
    const size_t n = 65536; /* x and y of the pass: 2 x 256 KiB */
    const double B = 4.0 * (double)n;
    const int64_t far = (int64_t)256 << 20;
    float *x = fill(n, 1), *y = fill(n, 2), *row = fill(256, 3);
    int rc = x && y && row ? 0 : -1;
    for (int64_t s = 0; !rc && out->n < DP_EXEC_REUSE_POINTS && s <= far;
         s = s ? 2 * s : (int64_t)256 << 10) {
        double tr, tf;
        sweep_now = s;
        TIME_LOW(tr, 12, {
            /* eight independent sums: the loads, not the additions' latency, set the pace */
            float acc[8] = {0};
            for (size_t i = 0; i < n; i += 8)
                for (int j = 0; j < 8; j++)
                    acc[j] += x[i + j];
            sink_f = acc[0] + acc[1] + acc[2] + acc[3] + acc[4] + acc[5] + acc[6] + acc[7];
        });
        TIME_LOW(tf, 12, {
            for (size_t i = 0; i < n; i += 256)
                memcpy(y + i, row, 256 * sizeof *y);
            __asm__ volatile("" : : "r"(y) : "memory");
        });
        out->bytes[out->n] = (double)s + B;
        out->read_gbps[out->n] = tr > 0 ? B / tr / 1e9 : 0;
        out->write_gbps[out->n++] = tf > 0 ? B / tf / 1e9 : 0;
    }
    free(x);
    free(y);
    free(row);
    /* Farther is never faster: a point slower than one beyond it was slowed by something
     * else (a neighbour, a page the host reclaimed), and the farther one bounds it. */
    for (int i = out->n - 2; i >= 0; i--) {
        out->read_gbps[i] = fmax(out->read_gbps[i], out->read_gbps[i + 1]);
        out->write_gbps[i] = fmax(out->write_gbps[i], out->write_gbps[i + 1]);
    }
    if (rc || out->n < 2 || !(out->write_gbps[out->n - 1] > 0) ||
        !(out->read_gbps[out->n - 1] > 0)) {
        sweep_now = 0;
        return dp_err_set(err, DP_ENOMEM, "reuse probe: out of memory");
    }

    /* The cold times below are taken at the curve's farthest point: at its knee (32-64 MiB
     * on this VM, the edge of the last-level cache share other guests also use) the same
     * measurement moved by 2x between calibrations minutes apart, beyond it by 10%. */
    const int fi = out->n - 1;
    const int64_t far_f = (int64_t)(out->bytes[fi] - B);
    out->far_bytes = out->bytes[fi];

    /* {ta, tb, m, n, k, timed cold too} */
    static const int shapes[][6] = {
        {0, 0, 256, 1024, 256, 1}, {0, 0, 512, 192, 64, 1},   {0, 0, 512, 64, 256, 0},
        {0, 0, 256, 256, 1024, 0}, {0, 0, 1024, 256, 256, 0}, {0, 0, 128, 128, 128, 0},
        {0, 0, 512, 32, 64, 0},    {0, 0, 512, 64, 96, 0},    {0, 1, 256, 256, 1024, 1},
        {0, 1, 256, 256, 256, 1},  {0, 1, 512, 256, 64, 0},   {0, 1, 512, 64, 256, 0},
        {0, 1, 256, 768, 256, 0},  {0, 1, 1024, 64, 64, 0},   {0, 1, 512, 64, 32, 0},
        {0, 1, 512, 96, 64, 0},    {1, 0, 1024, 256, 256, 1}, {1, 0, 64, 192, 512, 1},
        {1, 0, 64, 256, 512, 0},   {1, 0, 256, 64, 512, 0},   {1, 0, 256, 256, 1024, 0},
        {1, 0, 768, 256, 256, 0},  {1, 0, 64, 32, 512, 0},    {1, 0, 32, 128, 512, 0}};
    enum { NS = sizeof shapes / sizeof shapes[0], ROUNDS = 3 };
    _Static_assert(NS <= DP_EXEC_GEMM_SHAPES, "the probe's shapes fit the samples");
    const size_t most = (size_t)1 << 18; /* elements of the largest operand */
    const int64_t nv = 65536;            /* the reduction's elements */
    float *a = fill(most, 3), *b = fill(most, 4), *c = fill(most, 5);
    real *v = fill_real((size_t)nv, 6);
    rc = a && b && c && v ? 0 : -1;
    /*
     * ROUNDS rounds of everything. The cold times are the noisy ones (a burst of another
     * guest's memory traffic through the host's cache after a long sweep), and a factor is a
     * ratio of a kernel's extra time to the pass's at the same distance: each round
     * measures the pass again beside its kernels, and each round's extra is rescaled by the
     * curve's pass over the round's (what the kernel would have taken in the curve's state
     * of the machine); the median round is kept. Hot times keep their fastest round.
     */
    double gh[ROUNDS][NS], gc[ROUNDS][NS];
    struct dp_device_probe kh[ROUNDS], kc[ROUNDS];
    double qh[ROUNDS], qf[ROUNDS], drr[ROUNDS], dwr[ROUNDS];
    memset(kh, 0, sizeof kh);
    memset(kc, 0, sizeof kc);
    int saved = omp_get_max_threads();
    omp_set_num_threads(1);
    float *px = fill(n, 7), *py = fill(n, 8);
    rc |= px && py ? 0 : -1;
    for (int r = 0; r < ROUNDS && !rc; r++) {
        /* the pass, hot and at far_f, this round */
        double rh = 0, rf = 0, wh = 0, wf = 0;
        for (int fr = 0; fr < 2; fr++) {
            sweep_now = fr ? far_f : 0;
            reps_cap = fr ? 7 : 200;
            TIME_LOW(*(fr ? &rf : &rh), 12, {
                float acc[8] = {0};
                for (size_t i = 0; i < n; i += 8)
                    for (int j = 0; j < 8; j++)
                        acc[j] += px[i + j];
                sink_f = acc[0] + acc[1] + acc[2] + acc[3] + acc[4] + acc[5] + acc[6] + acc[7];
            });
            TIME_LOW(*(fr ? &wf : &wh), 12, {
                for (size_t i = 0; i < n; i += 256)
                    memcpy(py + i, px, 256 * sizeof *py);
                __asm__ volatile("" : : "r"(py) : "memory");
            });
        }
        reps_cap = 200;
        drr[r] = (rf - rh) / B;
        dwr[r] = (wf - wh) / B;
        for (int i = 0; i < NS; i++) {
            const int *g = shapes[i];
            sweep_now = 0;
            gh[r][i] = gemm_swept(g[0], g[1], g[2], g[3], g[4], a, b, c, 11);
            sweep_now = far_f;
            gc[r][i] = g[5] ? gemm_swept(g[0], g[1], g[2], g[3], g[4], a, b, c, 7) : 0;
        }
        /* The kernels hot and far, at the shapes kernels() measures. */
        sweep_now = 0;
        rc = kernels(sh, &kh[r]);
        sweep_now = far_f;
        reps_cap = 7;
        if (!rc)
            rc = kernels(sh, &kc[r]);
        if (!rc) {
            /* The gradient norm's reduction over 64 Ki elements (double accumulation). */
            TIME_LOW(qf[r], 7, sink_d = dp__cpu_sumsq(NULL, v, nv));
            reps_cap = 200;
            sweep_now = 0;
            TIME_LOW(qh[r], 20, sink_d = dp__cpu_sumsq(NULL, v, nv));
        }
        reps_cap = 200;
    }
    sweep_now = 0;
    omp_set_num_threads(saved);
    free(px);
    free(py);
    free(a);
    free(b);
    free(c);
    free(v);
    if (rc)
        return dp_err_set(err, DP_ENOMEM, "reuse probe: out of memory");
    /* the curve's extra seconds per byte read and written at far_f */
    const double crd = 1e-9 / out->read_gbps[fi] - 1e-9 / out->read_gbps[0],
                 cwr = 1e-9 / out->write_gbps[fi] - 1e-9 / out->write_gbps[0];
    /* Hot: the fastest round. Cold: hot plus the median round's extra rescaled from its
     * pass to the curve's, for an operand mix of rd bytes read and wr written. */
    double ex[ROUNDS];
    out->ngemm = NS;
    for (int i = 0; i < NS; i++) {
        const int *g = shapes[i];
        double hot = fmin(fmin(gh[0][i], gh[1][i]), gh[2][i]);
        double ab = 4.0 * ((double)g[2] * g[4] + (double)g[4] * g[3]), cb = 4.0 * g[2] * g[3];
        double cold = 0;
        if (g[5]) {
            for (int r = 0; r < ROUNDS; r++) {
                double here = ab * fmax(drr[r], 0) + cb * fmax(dwr[r], 0),
                       curve = ab * crd + cb * cwr;
                double xr = gc[r][i] - gh[r][i];
                ex[r] = here > 0 && curve > 0 ? xr * curve / here : xr;
            }
            double m = median3(ex[0], ex[1], ex[2]);
            cold = hot + (m > 0 ? m : 0);
        }
        out->gemm[i] = (__typeof__(out->gemm[i])){g[0], g[1], g[2], g[3], g[4], hot, cold};
    }
    /* What each kernel reads and writes per unit of its cost, as kernels() lays its
     * operands out (and predict_ops.c counts them): per element of N x F for the
     * activation, N x C for the norms, per logit (its first pass reads them; the others find
     * them hot), per parameter, per head of T x d. */
    const double Rb = (double)sizeof(real);
    const int64_t T = sh->seq_len > 0 ? sh->seq_len : 64, d = sh->head_dim > 0 ? sh->head_dim : 16;
    const double F1 = sh->ffn == DP_FFN_GELU ? 1 : 2; /* input columns per output column */
    const double Td = (double)(T * d), TT = (double)(T * T);
#define KS(f, field, scale, rd, wr)                                                                \
    do {                                                                                           \
        double h_ = fmin(fmin(kh[0].field, kh[1].field), kh[2].field) * (scale);                   \
        for (int r_ = 0; r_ < ROUNDS; r_++) {                                                      \
            double here_ = Rb * (rd)*fmax(drr[r_], 0) + Rb * (wr)*fmax(dwr[r_], 0);                \
            double curve_ = Rb * (rd)*crd + Rb * (wr)*cwr;                                         \
            double x_ = (kc[r_].field - kh[r_].field) * (scale);                                   \
            ex[r_] = here_ > 0 && curve_ > 0 ? x_ * curve_ / here_ : x_;                           \
        }                                                                                          \
        double m_ = median3(ex[0], ex[1], ex[2]);                                                  \
        out->f = (struct dp_exec_kernel_sample){h_, h_ + (m_ > 0 ? m_ : 0), Rb * (rd), Rb * (wr)}; \
    } while (0)
    KS(act_fwd, act_fwd_ns, 1e-9, F1, 1);
    KS(act_bwd, act_bwd_ns, 1e-9, 1 + F1, F1);
    KS(norm_fwd, norm_fwd_ns, 1e-9, 1, 1);
    KS(norm_bwd, norm_bwd_ns, 1e-9, 2, 1);
    KS(ce, ce_ns, 1e-9, 1, 0);
    KS(adamw, adamw_ns, 1e-9, 1, 3);
    KS(attn_fwd, attn_fwd_s, 1, 3 * Td, TT + Td);
    KS(attn_probs, attn_probs_s, 1, 3 * Td, TT);
    KS(attn_bwd, attn_bwd_s, 1, 4 * Td + TT, TT + 3 * Td);
#undef KS
    {
        double h = fmin(fmin(qh[0], qh[1]), qh[2]) / (double)nv;
        for (int r = 0; r < ROUNDS; r++) {
            double here = Rb * fmax(drr[r], 0), curve = Rb * crd;
            double xr = (qf[r] - qh[r]) / (double)nv;
            ex[r] = here > 0 && curve > 0 ? xr * curve / here : xr;
        }
        double m = median3(ex[0], ex[1], ex[2]);
        out->sumsq = (struct dp_exec_kernel_sample){h, h + (m > 0 ? m : 0), Rb, 0};
    }
    return 0;
}
