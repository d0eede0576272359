/*
 * dplan calibrate --backend cpu: measure this machine as the CPU backend uses
 * it and write a dplan_calibration profile (fit/fit.h) that --calibration
 * applies in memory, estimate, suggest, whatif and run's prediction.
 *
 * Phases, in this process first (nothing else of ours computes meanwhile):
 *   gemm     the backend's GEMM (executor/bench.c) at the model's layer shapes
 *            and a grid of token counts around them, one thread: the
 *            efficiency curve eff(x) = x / (x + half_flops) against the fitted
 *            asymptotic rate (GSL nonlinear least squares, fit/curves.c);
 *   kernels  the executor's probe (attention, activation, norm, cross-entropy,
 *            AdamW, OpenMP fork/join, SGEMM call cost, bandwidth per cache
 *            level) at each thread split a run of 1..np ranks uses;
 *   memory   streaming passes beyond the last-level cache: bandwidth and a
 *            fixed cost per pass (gsl_fit_wlinear);
 * then, with np >= 2, the collectives under mpirun with np ranks (this
 * program again, --coll-worker, twice: each sample's faster launch is kept):
 * all-reduce, all-gather, reduce-scatter, all-to-all and send/recv from 1 KiB
 * to --max-size, printed as nccl-tests prints them, fitted to alpha-beta per
 * collective over the "shm" link class; last, the kernels again (measure_kernels_late).
 * Every time is a low quantile of repetitions and the best of rounds that
 * interleave the probes: a measurement's work is the same each time and a
 * neighbour's job only ever adds time, so the fast end is the machine and
 * the slow end the neighbours (medians moved the profile by 10-50% between
 * two calibrations a minute apart on a shared VM; docs/accuracy.md).
 */
#include "cli.h"
#include "executor/executor.h"
#include "fit/fit.h"
#include "launch/launch.h"
#include "preflight/preflight.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define KIB 1024.0
#define MIB (1024.0 * 1024.0)

/* ------------------------------------------------------------------ progress */

/* A bar redrawn in place on a terminal; one line per phase otherwise. */
static void progress(const char *phase, int i, int n)
{
    static const char *last;
    if (isatty(2)) {
        int w = 30, done = n > 0 ? w * i / n : w;
        fprintf(stderr, "\rcalibrate: %-9s [%.*s%*s] %d/%d", phase, done,
                "##############################", w - done, "", i, n);
        if (i >= n)
            fputc('\n', stderr);
    } else if (phase != last) {
        fprintf(stderr, "calibrate: %s (%d measurements)\n", phase, n);
    }
    last = phase;
}

/* ------------------------------------------------------------------ the machine */

static int64_t mem_available(void)
{
    FILE *f = fopen("/proc/meminfo", "r");
    char line[256];
    long long kb = 0;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %lld kB", &kb) == 1)
            break;
    if (f)
        fclose(f);
    return (int64_t)kb * 1024;
}

static void cpu_model(char *out, size_t cap)
{
    FILE *f = fopen("/proc/cpuinfo", "r");
    char line[512];
    out[0] = 0;
    while (f && fgets(line, sizeof line, f)) {
        char *c = strchr(line, ':');
        if (strncmp(line, "model name", 10) == 0 && c) {
            snprintf(out, cap, "%s", c + 2);
            out[strcspn(out, "\n")] = 0;
            break;
        }
    }
    if (f)
        fclose(f);
}

static int parse_size(const char *s, int64_t *out)
{
    char *end;
    double v = strtod(s, &end);
    double k = 1;
    if (*end == 'K' || *end == 'k')
        k = KIB, end++;
    else if (*end == 'M' || *end == 'm')
        k = MIB, end++;
    else if (*end == 'G' || *end == 'g')
        k = MIB * 1024, end++;
    if (*end == 'i')
        end++;
    if (*end == 'B')
        end++;
    if (*end || !(v > 0))
        return -1;
    *out = (int64_t)(v * k);
    return 0;
}

/* ------------------------------------------------------------------ collectives worker */

static const enum dp_nccl_coll colls[] = {DP_NCCL_ALL_REDUCE, DP_NCCL_ALL_GATHER,
                                          DP_NCCL_REDUCE_SCATTER, DP_NCCL_ALLTOALL,
                                          DP_NCCL_SENDRECV};
#define NCOLLS ((int)(sizeof colls / sizeof colls[0]))

/* Under mpirun: every rank runs the collectives; rank 0 writes the samples to `file` ({"samples":
 * [{"collective", "bytes", "ranks", "seconds"}]}). Sizes double from 1 KiB (a training step's
 * messages are anywhere in between: tiny-gpt's tensor-parallel all-reduces are 128 KiB, its
 * gradients 1 MiB). The whole sweep runs COLL_ROUNDS times, every collective and size once per
 * round, and each sample is its fastest round: a burst of a neighbour's work lands in one round of
 * a few sizes, not in every repetition of one size, and noise only adds time. */
enum { COLL_ROUNDS = 3, COLL_MAX_SIZES = 24 };
static int coll_worker(const char *file, int64_t max_bytes)
{
    struct dp_err err = {0};
    struct dp_pf_mpi mpi;
    if (dp_pf_mpi_init(&mpi, &err))
        return cli_fail(&err);
    int nsz = 0;
    for (int64_t b = 1024; b <= max_bytes && nsz < COLL_MAX_SIZES; b *= 2)
        nsz++;
    double best[NCOLLS][COLL_MAX_SIZES];
    int rc = 0;
    for (int r = 0; r < COLL_ROUNDS && !rc; r++)
        for (int c = 0; c < NCOLLS && !rc; c++)
            for (int i = 0; i < nsz && !rc; i++) {
                int64_t b = (int64_t)1024 << i;
                /* About 32 MiB moved per size, between 11 and 60 iterations. */
                int iters = (int)fmin(60, fmax(11, 32 * MIB / (double)b));
                double t = 0;
                if ((rc = dp_pf_mpi_bench_coll(&mpi, colls[c], b, iters, &t, &err)))
                    break;
                best[c][i] = r == 0 ? t : fmin(best[c][i], t);
            }
    cJSON *root = cJSON_CreateObject(), *arr = cJSON_AddArrayToObject(root, "samples");
    for (int c = 0; c < NCOLLS && !rc && mpi.rank == 0; c++)
        for (int i = 0; i < nsz; i++) {
            cJSON *e = cJSON_CreateObject();
            cJSON_AddStringToObject(e, "collective", dp_nccl_coll_name(colls[c]));
            cJSON_AddNumberToObject(e, "bytes", (double)((int64_t)1024 << i));
            cJSON_AddNumberToObject(e, "ranks", mpi.size);
            cJSON_AddNumberToObject(e, "seconds", best[c][i]);
            cJSON_AddItemToArray(arr, e);
        }
    /* Ranks in lock step: segments of about 0.02, 0.07, 0.3, 1.2 and 5 ms between
     * synchronisations (tensor parallelism's are a layer's fraction of a step; data
     * parallelism's a step: tiny-gpt's is 5 ms here), each length up to 600 rounds or 0.7 s
     * (the first three take 0.25 s together, the last two 0.7 s each). How the wait grows with the
     * segment is what the executor's prediction reads off them (predict_ops.c sync_wait). */
    static const int passes[] = {2, 8, 32, 128, 512};
    cJSON *ls = mpi.rank == 0 ? cJSON_AddArrayToObject(root, "lockstep") : NULL;
    for (int i = 0; i < 5 && !rc; i++) {
        double seg = 0, wait = 0;
        if ((rc = dp_pf_mpi_bench_lockstep(&mpi, passes[i], 600, 0.7, &seg, &wait, &err)))
            break;
        if (ls) {
            cJSON *e = cJSON_CreateObject();
            cJSON_AddNumberToObject(e, "seg_s", seg);
            cJSON_AddNumberToObject(e, "wait_s", wait);
            cJSON_AddItemToArray(ls, e);
        }
    }
    if (!rc && mpi.rank == 0)
        rc = dp_json_save_file(file, root, &err);
    cJSON_Delete(root);
    dp_pf_mpi_finalize(&mpi);
    return rc ? cli_fail(&err) : 0;
}

/* One launch of the worker as np ranks: its samples and lock-step waits in *root. */
static int coll_launch(int np, int64_t max_bytes, cJSON **root, struct dp_err *err)
{
    char tmp[] = "/tmp/dplan-calibrate-XXXXXX";
    int fd = mkstemp(tmp);
    if (fd < 0)
        return dp_err_set(err, DP_ERUNTIME, "mkstemp: %s", strerror(errno));
    close(fd);
    char maxb[32];
    snprintf(maxb, sizeof maxb, "%lld", (long long)max_bytes);
    char *wargv[] = {"calibrate", "--coll-worker", tmp, "--max-size", maxb, NULL};
    struct dp_launch_job job = {.world = np, .argc = 5, .argv = wargv};
    int nav = 0;
    const char **av = dp_launch_mpirun_argv(&job, &nav);
    if (!av) {
        unlink(tmp);
        return dp_err_set(err, DP_ENOMEM, "out of memory");
    }
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        execvp(av[0], (char *const *)av);
        fprintf(stderr, "dplan: error: %s: %s\n", av[0], strerror(errno));
        _exit(127);
    }
    free(av);
    int st = 0;
    if (pid < 0 || waitpid(pid, &st, 0) < 0 || !WIFEXITED(st) || WEXITSTATUS(st)) {
        unlink(tmp);
        return dp_err_set(err, DP_ERUNTIME, "the collectives under mpirun failed (status %d)",
                          WIFEXITED(st) ? WEXITSTATUS(st) : -1);
    }
    int rc = dp_json_load_file(tmp, root, err);
    unlink(tmp);
    return rc;
}

/* The samples of collective c in one launch's output, at most cap. */
static int coll_samples(const cJSON *root, enum dp_nccl_coll c, struct dp_coll_sample *s, int cap)
{
    const cJSON *arr = cJSON_GetObjectItemCaseSensitive(root, "samples");
    int k = 0;
    for (const cJSON *e = arr ? arr->child : NULL; e && k < cap; e = e->next) {
        const char *name = cJSON_GetStringValue(cJSON_GetObjectItem(e, "collective"));
        if (!name || dp_nccl_coll_parse(name) != (int)c)
            continue;
        s[k].bytes = cJSON_GetNumberValue(cJSON_GetObjectItem(e, "bytes"));
        s[k].ranks = (int)cJSON_GetNumberValue(cJSON_GetObjectItem(e, "ranks"));
        s[k].seconds = cJSON_GetNumberValue(cJSON_GetObjectItem(e, "seconds"));
        k++;
    }
    return k;
}

/*
 * Run the worker as np ranks COLL_LAUNCHES times and keep each sample's faster launch;
 * print the nccl-tests tables; fit each collective. Why launches and not only rounds: on
 * this VM Open MPI's all-reduce and reduce-scatter over 2 ranks run at one of two speeds
 * for the whole of a launch (128 KiB all-reduce, fastest of 3 rounds, in four launches in a
 * row: 37.7, 100.4, 94.4 and 37.7 us; all-gather 8.9-9.5 us in each), so one
 * launch's fastest round can be the slow mode; it priced tiny-gpt's TP 2 step at 4.64 ms
 * where another calibration's fast mode gave 3.37 (measured 3.9-4.7 ms, session 24).
 */
enum { COLL_LAUNCHES = 2 };
static int measure_colls(int np, int64_t max_bytes, struct dp_calibration *cal, struct dp_err *err)
{
    fprintf(stderr,
            "calibrate: collectives over %d ranks, 1 KiB to %.0f KiB, %d launches of mpirun "
            "-np %d ...\n",
            np, (double)max_bytes / KIB, COLL_LAUNCHES, np);
    cJSON *root[COLL_LAUNCHES] = {0};
    int rc = 0;
    for (int i = 0; i < COLL_LAUNCHES && !rc; i++)
        rc = coll_launch(np, max_bytes, &root[i], err);
    int n = rc ? 0 : cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(root[0], "samples"));
    struct dp_coll_sample *s = calloc((size_t)(n > 0 ? n : 1), sizeof *s),
                          *rep = calloc((size_t)(n > 0 ? n : 1), sizeof *rep);
    double *res = calloc((size_t)(n > 0 ? n : 1), sizeof *res);
    if (!rc && (!s || !rep || !res))
        rc = dp_err_set(err, DP_ENOMEM, "out of memory");
    for (int c = 0; c < NCOLLS && !rc; c++) {
        int k = coll_samples(root[0], colls[c], s, n);
        for (int i = 1; i < COLL_LAUNCHES; i++)
            dp_coll_keep_faster(s, k, rep, coll_samples(root[i], colls[c], rep, n));
        char buf[512];
        dp_nccl_header(buf, sizeof buf);
        printf("# %s over %d ranks (MPI, shared memory; fastest of %d rounds in %d launches)\n%s",
               dp_nccl_coll_name(colls[c]), np, COLL_ROUNDS, COLL_LAUNCHES, buf);
        for (int i = 0; i < k; i++) {
            dp_nccl_row(colls[c], s[i].bytes, 4, "float", s[i].ranks, s[i].seconds, buf,
                        sizeof buf);
            fputs(buf, stdout);
        }
        fflush(stdout);
        struct dp_alpha_beta_fit f;
        if (dp_fit_alpha_beta(colls[c], s, k, &f, res, err)) {
            /* Noise can defeat a fit (a shared machine): say so, keep the others. */
            fprintf(stderr, "calibrate: warning: %s; %s left out of the profile\n", err->msg,
                    dp_nccl_coll_name(colls[c]));
            dp_err_clear(err);
            continue;
        }
        struct dp_cal_coll *o = &cal->coll[cal->ncoll++];
        o->coll = colls[c];
        snprintf(o->link, sizeof o->link, "shm");
        o->ranks_min = o->ranks_max = np;
        o->alpha_us = fmax(0, f.alpha_s * 1e6);
        o->busbw_gbps = f.busbw_Bps / 1e9;
        o->alpha_se_us = f.alpha_se_s * 1e6;
        o->busbw_se_gbps = f.busbw_se_Bps / 1e9;
        o->q = f.q;
        for (int i = 0; i < k && o->npoints < DP_CAL_MAX_POINTS; i++)
            if (s[i].ranks == np && (!o->npoints || s[i].bytes > o->point_bytes[o->npoints - 1])) {
                o->point_bytes[o->npoints] = s[i].bytes;
                o->point_us[o->npoints++] = s[i].seconds * 1e6;
            }
    }
    /* Lock step: the measured waits are what the executor's prediction reads (executor.h
     * struct dp_exec_machine lockstep_*); jitter, the sqrt law's constant (wait = e_n jitter
     * sqrt(segment)), is each length's wait / (e_n sqrt(segment)), their median: a one-number
     * summary, and the law a profile without points is priced by. The first launch's, not
     * the smaller of the launches': the waits are the jitter a run's ranks meet (session 23),
     * not noise over what the machine does. */
    const cJSON *ls = rc ? NULL : cJSON_GetObjectItemCaseSensitive(root[0], "lockstep");
    double k[DP_CAL_LOCKSTEP_POINTS];
    int nl = 0;
    for (const cJSON *e = ls ? ls->child : NULL; e && !rc; e = e->next) {
        double seg = cJSON_GetNumberValue(cJSON_GetObjectItem(e, "seg_s")),
               wait = cJSON_GetNumberValue(cJSON_GetObjectItem(e, "wait_s"));
        if (!(seg > 0) || !(wait >= 0) || nl >= DP_CAL_LOCKSTEP_POINTS || np < 2)
            continue;
        k[nl] = wait / (dp_max_normal(np) * sqrt(seg));
        cal->lockstep.seg_s[nl] = seg;
        cal->lockstep.wait_s[nl++] = wait;
    }
    if (nl) {
        for (int i = 1; i < nl; i++)
            for (int j = i; j > 0 && k[j - 1] > k[j]; j--) {
                double t = k[j];
                k[j] = k[j - 1];
                k[j - 1] = t;
            }
        cal->has_lockstep = true;
        cal->lockstep.ranks = np;
        cal->lockstep.n = nl;
        cal->lockstep.jitter = nl % 2 ? k[nl / 2] : 0.5 * (k[nl / 2 - 1] + k[nl / 2]);
    }
    for (int i = 0; i < COLL_LAUNCHES; i++)
        cJSON_Delete(root[i]);
    free(s);
    free(rep);
    free(res);
    return rc;
}

/* ------------------------------------------------------------------ local phases */

/* The forward GEMMs of one layer and the head (m tokens x n outputs over k), tp = 1. */
static int layer_shapes(const struct dp_model *m, int64_t tokens, int sh[][3])
{
    int h = (int)m->hidden, d = (int)m->head_dim, qd = (int)m->heads * d;
    int qkvd = qd + 2 * (int)m->kv_heads * d, f = (int)m->ffn_hidden;
    int F1 = m->ffn == DP_FFN_SWIGLU ? 2 * f : f, V = (int)dp_padded_vocab(m->vocab, 1);
    int N = (int)tokens;
    int shapes[5][3] = {{N, qkvd, h}, {N, h, qd}, {N, F1, h}, {N, h, f}, {N, V, h}};
    memcpy(sh, shapes, sizeof shapes);
    return 5;
}

static int measure_gemm(const struct dp_model *m, int64_t tokens, struct dp_calibration *cal,
                        double *rate_gflops, struct dp_err *err)
{
    int base[5][3];
    int nb = layer_shapes(m, tokens, base);
    /* The layer shapes at 1/16 .. 4x the token count, and three square sizes beyond: the
     * curve's knee and its plateau. */
    static const double scale[] = {1.0 / 16, 1.0 / 4, 1, 4};
    enum { NS = 4, NSQ = 3 };
    int n = nb * NS + NSQ;
    struct dp_gemm_sample *s = calloc((size_t)n, sizeof *s);
    double *res = calloc((size_t)n, sizeof *res);
    if (!s || !res) {
        free(s);
        free(res);
        return dp_err_set(err, DP_ENOMEM, "out of memory");
    }
    int rc = 0, k = 0;
    for (int i = 0; i < n && !rc; i++) {
        int mm, nn, kk;
        if (i < nb * NS) {
            mm = (int)fmax(1, base[i / NS][0] * scale[i % NS]);
            nn = base[i / NS][1];
            kk = base[i / NS][2];
        } else {
            mm = nn = kk = 256 << (i - nb * NS);
        }
        progress("gemm", i, n);
        double t1 = 0, t = 0;
        if ((rc = dp_exec_bench_gemm(mm, nn, kk, 1, 1, &t1, err)))
            break;
        int reps = (int)fmin(25, fmax(5, 0.02 / fmax(t1, 1e-9)));
        if ((rc = dp_exec_bench_gemm(mm, nn, kk, 1, reps, &t, err)))
            break;
        s[k].flops = 2.0 * mm * nn * kk;
        s[k].seconds = t;
        k++;
    }
    progress("gemm", n, n);
    double best = 0;
    for (int i = 0; i < k; i++)
        best = fmax(best, s[i].flops / s[i].seconds);
    /* Fit against a reference above every sample (twice the fastest), then state the curve
     * against its own asymptote: peak = eff_max x reference, eff_max 1. */
    for (int i = 0; i < k; i++)
        s[i].peak_flops_per_s = 2 * best;
    struct dp_gemm_fit f;
    *rate_gflops = best / 1e9;
    if (!rc && dp_fit_gemm(s, k, &f, res, err)) {
        fprintf(stderr,
                "calibrate: warning: %s; the GEMM curve left out of the profile (the machine's "
                "peak: the fastest shape, %.1f GFLOP/s)\n",
                err->msg, best / 1e9);
        dp_err_clear(err);
    } else if (!rc) {
        struct dp_cal_gemm *g = &cal->gemm[cal->ngemm++];
        g->dtype = DP_FP32;
        g->peak_tflops = 2 * best * f.curve.eff_max / 1e12;
        g->curve.eff_max = 1;
        g->curve.half_flops = f.curve.half_flops;
        g->eff_max_se = f.eff_max_se / f.curve.eff_max;
        g->half_flops_se = f.half_flops_se;
        g->q = f.q;
        *rate_gflops = g->peak_tflops * 1e3;
    }
    free(s);
    free(res);
    return rc;
}

/* Field by field, the best of n probes of the same split: the least time, the highest
 * rate (noise only slows a probe down). conc_eff, a ratio of two rates each slowed by
 * noise, takes the median. */
static void best_of(const struct dp_exec_costs *p, int n, struct dp_exec_costs *o)
{
    *o = p[0];
    for (int i = 1; i < n; i++) {
#define LO(f) o->f = fmin(o->f, p[i].f)
#define HI(f) o->f = fmax(o->f, p[i].f)
        LO(gemm_call_s);
        HI(gemm_gflops);
        LO(fork_s);
        HI(bw_gbps[0]);
        HI(bw_gbps[1]);
        HI(bw_gbps[2]);
        LO(attn_fwd_s);
        LO(attn_bwd_s);
        LO(attn_probs_s);
        LO(act_fwd_ns);
        LO(act_bwd_ns);
        LO(norm_fwd_ns);
        LO(norm_bwd_ns);
        LO(ce_ns);
        LO(adamw_ns);
        HI(swept_gbps);
#undef LO
#undef HI
    }
    double c[8];
    int k = n < 8 ? n : 8;
    for (int i = 0; i < k; i++)
        c[i] = p[i].conc_eff;
    for (int i = 1; i < k; i++)
        for (int j = i; j > 0 && c[j - 1] > c[j]; j--) {
            double x = c[j];
            c[j] = c[j - 1];
            c[j - 1] = x;
        }
    o->conc_eff = k % 2 ? c[k / 2] : 0.5 * (c[k / 2 - 1] + c[k / 2]);
}

static void to_cal_cpu(const struct dp_exec_costs *p, struct dp_cal_cpu *o)
{
    o->threads = p->threads;
    o->concurrent = p->concurrent;
    o->seq_len = p->seq_len;
    o->head_dim = p->head_dim;
    o->ffn = p->ffn;
    o->norm = p->norm;
    o->gemm_call_us = p->gemm_call_s * 1e6;
    o->gemm_gflops = p->gemm_gflops;
    o->conc_eff = p->conc_eff;
    o->fork_us = p->fork_s * 1e6;
    memcpy(o->bw_gbps, p->bw_gbps, sizeof o->bw_gbps);
    o->l2_bytes = (double)p->cache_bytes[0];
    o->l3_bytes = (double)p->cache_bytes[1];
    o->attn_fwd_us = p->attn_fwd_s * 1e6;
    o->attn_bwd_us = p->attn_bwd_s * 1e6;
    o->attn_probs_us = p->attn_probs_s * 1e6;
    o->act_fwd_ns = p->act_fwd_ns;
    o->act_bwd_ns = p->act_bwd_ns;
    o->norm_fwd_ns = p->norm_fwd_ns;
    o->norm_bwd_ns = p->norm_bwd_ns;
    o->ce_ns = p->ce_ns;
    o->adamw_ns = p->adamw_ns;
    o->hidden = p->hidden;
    o->sweep_bytes = (double)p->sweep_bytes;
    o->swept_gbps = p->swept_gbps;
}

/* The kernel probe's splits, and each one's best of the rounds of one stretch. */
enum { KPROBES = 5, KLATE = 3 };
struct kprobe {
    struct dp_exec_costs sh[DP_CAL_MAX_CPU], best[DP_CAL_MAX_CPU];
    int ns, first; /* the splits; the first one's index in cal->cpu */
};

/* `rounds` rounds, each probing every split once: a neighbour's burst lands in one round,
 * and each field keeps its best round (best_of). Interleaved, so that every split's probes
 * see the caches and clocks the others leave, as a step's kernels do. */
static int kernel_rounds(struct kprobe *kp, int rounds, const char *what, struct dp_err *err)
{
    static struct dp_exec_costs pr[DP_CAL_MAX_CPU][KPROBES > KLATE ? KPROBES : KLATE];
    const int ns = kp->ns;
    for (int k = 0; k < rounds; k++)
        for (int i = 0; i < ns; i++) {
            progress(what, k * ns + i, rounds * ns);
            pr[i][k] = kp->sh[i];
            int rc = dp_exec_measure_costs(&pr[i][k], err);
            if (rc)
                return rc;
        }
    for (int i = 0; i < ns; i++)
        best_of(pr[i], rounds, &kp->best[i]);
    progress(what, rounds * ns, rounds * ns);
    return 0;
}

/* The probe at each thread split of 1, 2, 4, ..., np ranks (and np itself). */
static int measure_kernels(const struct dp_model *m, int64_t seq, int64_t sweep, int np, int cores,
                           struct kprobe *kp, struct dp_calibration *cal, int64_t *l3_total,
                           struct dp_err *err)
{
    /* Each rank count at the launcher's split (cores / ranks threads) and at one thread
     * per rank (OMP_NUM_THREADS=1). */
    int ranks[DP_CAL_MAX_CPU], thr[DP_CAL_MAX_CPU], n = 0;
    for (int r = 1; n < DP_CAL_MAX_CPU - 1; r = r * 2 < np && r < np ? r * 2 : np) {
        ranks[n] = r;
        thr[n++] = cores / r > 1 ? cores / r : 1;
        if (cores / r > 1 && n < DP_CAL_MAX_CPU - 1) {
            ranks[n] = r;
            thr[n++] = 1;
        }
        if (r == np)
            break;
    }
    /* The splits to measure (a rank count whose split repeats an earlier one, once). */
    struct dp_exec_costs sh[DP_CAL_MAX_CPU];
    int ns = 0;
    for (int i = 0; i < n; i++) {
        struct dp_exec_costs x = {.threads = thr[i],
                                  .concurrent = thr[i] * ranks[i],
                                  .seq_len = seq,
                                  .head_dim = (int)m->head_dim,
                                  .ffn = m->ffn,
                                  .norm = m->norm,
                                  .hidden = (int)m->hidden,
                                  /* the node's ranks share its L3: each rank's tensors
                                   * are pushed out by every rank's buffer table */
                                  .sweep_bytes = sweep * ranks[i]};
        bool dup = false;
        for (int j = 0; j < ns; j++)
            dup |= sh[j].threads == x.threads && sh[j].concurrent == x.concurrent;
        if (!dup)
            sh[ns++] = x;
    }
    kp->ns = ns;
    kp->first = cal->ncpu;
    memcpy(kp->sh, sh, sizeof sh);
    int rc = kernel_rounds(kp, KPROBES, "kernels", err);
    for (int i = 0; !rc && i < ns; i++) {
        to_cal_cpu(&kp->best[i], &cal->cpu[cal->ncpu++]);
        if (cal->ncpu == 1)
            *l3_total = kp->best[i].cache_bytes[1] * sh[i].concurrent;
    }
    return rc;
}

/*
 * The kernel probe again, KLATE rounds at the end of the calibration (after the
 * collectives, half a minute on), each field's best of both stretches and conc_eff the
 * higher of the two stretches' medians. A stretch of seconds in which the host gave the
 * VM's two vCPUs one core's time set every round of the first stretch: CI on 0cdb1f8
 * calibrated conc_eff 0.52 (0.97 in the calibrations before and after), which priced
 * every 2-rank layout of the loop 1.3-1.6x its step while the canaries right after the
 * calibration ran at their usual speed. Sharing a core never speeds a thread up, so the
 * higher stretch is the machine.
 */
static int measure_kernels_late(struct kprobe *kp, struct dp_calibration *cal, struct dp_err *err)
{
    struct dp_exec_costs early[DP_CAL_MAX_CPU];
    memcpy(early, kp->best, sizeof early);
    int rc = kernel_rounds(kp, KLATE, "kernels again", err);
    for (int i = 0; !rc && i < kp->ns; i++) {
        struct dp_exec_costs both[2] = {early[i], kp->best[i]}, p;
        best_of(both, 2, &p);
        p.conc_eff = fmax(early[i].conc_eff, kp->best[i].conc_eff);
        to_cal_cpu(&p, &cal->cpu[kp->first + i]);
    }
    return rc;
}

/* Bandwidth by reuse distance, SGEMM hot and cold and the kernels' cold factors, once (one
 * thread alone; about 5 s of sweeps up to 256 MiB), fitted (fit/reuse.c). */
static int measure_reuse(const struct dp_model *m, int64_t seq, struct dp_calibration *cal,
                         struct dp_err *err)
{
    progress("reuse", 0, 1);
    struct dp_exec_costs sh = {.threads = 1,
                               .concurrent = 1,
                               .seq_len = seq,
                               .head_dim = (int)m->head_dim,
                               .ffn = m->ffn,
                               .norm = m->norm,
                               .hidden = (int)m->hidden};
    struct dp_exec_reuse_samples *x = calloc(1, sizeof *x);
    struct dp_reuse_samples *f = calloc(1, sizeof *f);
    int rc =
        x && f ? dp_exec_measure_reuse(&sh, x, err) : dp_err_set(err, DP_ENOMEM, "out of memory");
    if (!rc) {
        progress("reuse", 1, 1);
        f->n = x->n < DP_CAL_REUSE_POINTS ? x->n : DP_CAL_REUSE_POINTS;
        memcpy(f->bytes, x->bytes, (size_t)f->n * sizeof *f->bytes);
        memcpy(f->read_gbps, x->read_gbps, (size_t)f->n * sizeof *f->read_gbps);
        memcpy(f->write_gbps, x->write_gbps, (size_t)f->n * sizeof *f->write_gbps);
        f->far_bytes = x->far_bytes;
        f->ngemm = x->ngemm < DP_CAL_GEMM_SHAPES ? x->ngemm : DP_CAL_GEMM_SHAPES;
        for (int i = 0; i < f->ngemm; i++)
            f->gemm[i] = (struct dp_sgemm_sample){x->gemm[i].ta,    x->gemm[i].tb, x->gemm[i].m,
                                                  x->gemm[i].n,     x->gemm[i].k,  x->gemm[i].hot_s,
                                                  x->gemm[i].cold_s};
#define K(k)                                                                                       \
    f->k = (struct dp_reuse_kernel_sample){x->k.hot_s, x->k.far_s, x->k.rd_bytes, x->k.wr_bytes}
        K(attn_fwd);
        K(attn_bwd);
        K(attn_probs);
        K(act_fwd);
        K(act_bwd);
        K(norm_fwd);
        K(norm_bwd);
        K(ce);
        K(adamw);
        K(sumsq);
#undef K
        rc = dp_fit_reuse(f, &cal->reuse, NULL, err);
        cal->has_reuse = !rc;
    }
    free(x);
    free(f);
    return rc;
}

static int measure_memory(int64_t from, int64_t to, struct dp_calibration *cal, struct dp_err *err)
{
    struct dp_stream_sample s[16];
    double res[16];
    int n = 0;
    for (int64_t b = from; b <= to && n < 16; b *= 2)
        n++;
    int k = 0;
    for (int64_t b = from; k < n; b *= 2, k++) {
        progress("memory", k, n);
        double t = 0;
        int rc = dp_exec_bench_stream(b, 5, &t, err);
        if (rc)
            return rc;
        s[k].bytes = (double)b;
        s[k].seconds = t;
    }
    progress("memory", n, n);
    struct dp_membw_fit f;
    if (dp_fit_mem_bw(s, n, &f, res, err)) {
        fprintf(stderr, "calibrate: warning: %s; memory bandwidth left out of the profile\n",
                err->msg);
        dp_err_clear(err);
        return 0;
    }
    cal->has_membw = true;
    cal->membw.bw_gbps = f.bw_Bps / 1e9;
    cal->membw.overhead_us = fmax(0, f.overhead_s * 1e6);
    cal->membw.bw_se_gbps = f.bw_se_Bps / 1e9;
    cal->membw.overhead_se_us = f.overhead_se_s * 1e6;
    cal->membw.q = f.q;
    return 0;
}

/*
 * The machine as a cluster of np "GPUs", one per rank (what the planning commands
 * plan for): each rank's peak is its threads at the fitted GEMM asymptote slowed by the
 * concurrency measured with every rank computing; its memory a 1/np share of what is
 * available now; its bandwidth its threads' DRAM stream rate; one link class, "shm",
 * at the fitted all-reduce busbw and latency.
 */
static void machine_cluster(struct dp_calibration *cal, int np, int cores, int64_t avail,
                            double rate_gflops)
{
    struct dp_cluster *cl = &cal->machine.cluster;
    memset(cl, 0, sizeof *cl);
    int th = cores / np > 1 ? cores / np : 1;
    const struct dp_cal_cpu *cpu = dp_calibration_cpu(cal, th, th * np);
    double conc = cpu ? cpu->conc_eff : 1;
    struct dp_gpu *g = &cl->gpu;
    snprintf(g->name, sizeof g->name, "cpu-rank");
    snprintf(g->vendor, sizeof g->vendor, "cpu");
    for (int p = 0; p < DP_PRECISIONS; p++)
        g->peak_tflops[p] = rate_gflops * th * conc / 1e3;
    g->mem_bytes = avail / np;
    g->usable_fraction = 0.9;
    g->mem_bw_gbps = cpu ? cpu->bw_gbps[2] * th : cal->membw.bw_gbps;
    g->runtime_overhead_bytes = (int64_t)(64 * MIB);
    snprintf(g->intra_link, sizeof g->intra_link, "shm");
    snprintf(g->host_link, sizeof g->host_link, "shm");
    g->gemm.eff_max = 1;
    g->gemm.half_flops = cal->ngemm ? cal->gemm[0].curve.half_flops : 0;
    snprintf(cl->name, sizeof cl->name, "%s (%d CPU ranks)", cal->machine.hostname, np);
    snprintf(cl->system, sizeof cl->system, "custom");
    cl->nodes = 1;
    cl->gpus_per_node = np;
    struct dp_link *l = &cl->intra;
    snprintf(l->name, sizeof l->name, "shm");
    l->kind = DP_LINK_PCIE;
    const struct dp_cal_coll *ar = dp_calibration_coll(cal, DP_NCCL_ALL_REDUCE, "shm");
    l->bw_gbps = ar ? ar->busbw_gbps : g->mem_bw_gbps;
    l->latency_us = ar ? ar->alpha_us : 1;
    l->efficiency = 1;
    cl->inter = *l;
    cl->inter.kind = DP_LINK_NET;
    cl->nics_per_node = 1;
    cal->machine.has_cluster = true;
}

static const char help_cpu[] =
    "usage: dplan calibrate --backend cpu [--np N] [MODEL|plan.json] [--mbs B] [--seq-len S]\n"
    "                       [--max-size SIZE] [-o PROFILE.json]\n\n"
    "Measure this machine as the CPU backend uses it and fit the cost model's constants:\n"
    "the backend's GEMM at the model's layer shapes and a grid of token counts around them\n"
    "(efficiency curve, GSL nonlinear least squares); its attention, norm, activation,\n"
    "cross-entropy and AdamW kernels, hot, and OpenMP fork/join at each thread split of\n"
    "1..N ranks; where a step leaves its operands: the cost of reading and of writing a\n"
    "line last touched 256 KiB to 256 MiB of other traffic ago, OpenBLAS's SGEMM over 24\n"
    "shapes and transposes (call, multiply-adds, packing, C: GSL weighted least squares)\n"
    "and what operands out of cache cost it and each kernel; streaming memory bandwidth\n"
    "beyond the last-level cache (linear fit); and with N >= 2 the collectives all-reduce,\n"
    "all-gather, reduce-scatter, all-to-all and send/recv over MPI with N ranks from 1 KiB\n"
    "to SIZE, in place as the executor calls them, printed as nccl-tests prints them,\n"
    "fitted to alpha-beta (latency per ring step, bus bandwidth) and kept as measured (the\n"
    "CPU executor's prediction reads each message off them), and how long ranks in lock\n"
    "step wait for the slowest at each synchronisation. Kernel times are the fast end of\n"
    "repetitions (noise only adds time). Each fit is printed with its quality. -o writes\n"
    "the profile (dplan_calibration; schema in docs/accuracy.md): `--calibration\n"
    "PROFILE.json` applies it in memory, estimate, suggest, whatif and run, and stands for\n"
    "the cluster (N ranks of this machine).\n\n"
    "  --backend cpu    measure the CPU backend (the only one in this build)\n"
    "  --np N           ranks for the collectives and thread splits [2]\n"
    "  MODEL            the model whose shapes to measure at [tiny-gpt]; --mbs and\n"
    "                   --seq-len set the token count of its GEMMs and attention\n"
    "  --max-size SIZE  largest collective buffer (K, M, G suffixes) [4M: a quick run];\n"
    "                   capped by MemAvailable / (4 N); 1G on a real cluster\n"
    "  -o FILE          write the profile\n";

int cli_calibrate_cpu(int argc, char **argv)
{
    enum { OPT_BACKEND = 5000, OPT_NP, OPT_MAXSZ, OPT_WORKER };
    static const struct option opts[] = {{"backend", required_argument, 0, OPT_BACKEND},
                                         {"np", required_argument, 0, OPT_NP},
                                         {"max-size", required_argument, 0, OPT_MAXSZ},
                                         {"coll-worker", required_argument, 0, OPT_WORKER},
                                         {"help", no_argument, 0, 'h'},
                                         CLI_KNOB_OPTIONS,
                                         {0, 0, 0, 0}};
    struct cli_common c;
    cli_common_init(&c);
    const char *outfile = NULL, *worker = NULL;
    int np = 2, ch;
    int64_t max_bytes = (int64_t)(4 * MIB);
    optind = 1;
    opterr = 0;
    while ((ch = cli_next_opt("calibrate", argc, argv, ":ho:", opts, &c)) != -1) {
        switch (ch) {
        case OPT_BACKEND:
            if (strcmp(optarg, "cpu") != 0)
                return cli_usage_error("calibrate",
                                       "--backend: expected cpu (this build has no cuda "
                                       "backend), got \"%s\"",
                                       optarg);
            break;
        case OPT_NP: {
            char *end;
            long v = strtol(optarg, &end, 10);
            if (*end || v < 1 || v > 1024)
                return cli_usage_error("calibrate", "--np: expected 1..1024, got \"%s\"", optarg);
            np = (int)v;
            break;
        }
        case OPT_MAXSZ:
            if (parse_size(optarg, &max_bytes) || max_bytes < 4096)
                return cli_usage_error(
                    "calibrate", "--max-size: expected a size >= 4K like 64M, got \"%s\"", optarg);
            break;
        case OPT_WORKER: worker = optarg; break;
        case 'o': outfile = optarg; break;
        case 'h': fputs(help_cpu, stdout); return 0;
        case -2: return 2;
        default: return 2;
        }
    }
    if (worker)
        return coll_worker(worker, max_bytes);
    if (optind + 1 < argc)
        return cli_usage_error("calibrate", "expected at most one MODEL or plan, got \"%s\"",
                               argv[optind + 1]);
    const char *target = optind < argc ? argv[optind] : "tiny-gpt";
    struct dp_err err = {0};
    /* Before minutes of measuring: -o must not be the MODEL or plan file read. */
    char *inputs[1] = {(char *)target};
    if (cli_output_check(&c, outfile, "-o", inputs, 1, &err))
        return cli_fail(&err);
    struct dp_model m;
    struct dp_layout l;
    struct dp_plan *plan = malloc(sizeof *plan);
    struct dp_calibration *cal = calloc(1, sizeof *cal);
    int rc = 0;
    if (!plan || !cal) {
        free(plan);
        free(cal);
        return cli_fail(&(struct dp_err){.code = DP_ENOMEM, .msg = "out of memory"});
    }
    if (cli_is_plan_file(target)) {
        if ((rc = dp_plan_load(target, plan, &err)))
            goto out;
        m = plan->model;
        l = plan->layout;
    } else {
        if ((rc = dp_model_load(target, &m, &err)) || (rc = cli_layout(&c, &m, 1, &l, &err)))
            goto out;
    }
    int cores = (int)sysconf(_SC_NPROCESSORS_ONLN);
    cores = cores > 0 ? cores : 1;
    int64_t avail = mem_available();
    int64_t cap = avail > 0 ? avail / (4 * np) : (int64_t)(64 * MIB);
    if (max_bytes > cap) {
        fprintf(stderr, "calibrate: --max-size %.0f MiB capped to %.0f MiB (MemAvailable / 4N)\n",
                (double)max_bytes / MIB, (double)cap / MIB);
        max_bytes = cap;
    }
    snprintf(cal->created_by, sizeof cal->created_by, "dplan %s calibrate", DPLAN_VERSION);
    time_t now = time(NULL);
    strftime(cal->measured_at, sizeof cal->measured_at, "%Y-%m-%dT%H:%M:%SZ", gmtime(&now));
    gethostname(cal->machine.hostname, sizeof cal->machine.hostname - 1);
    snprintf(cal->machine.backend, sizeof cal->machine.backend, "cpu");
    cpu_model(cal->machine.cpu, sizeof cal->machine.cpu);
    cal->machine.nodes = 1;
    cal->machine.ranks = np;
    cal->machine.cores = cores;
    printf("calibrate: %s, %d cores, %.1f GiB available; shapes of %s at %lld tokens per "
           "micro-batch; %d ranks\n",
           cal->machine.cpu[0] ? cal->machine.cpu : "cpu", cores, (double)avail / (MIB * 1024),
           m.name, (long long)(l.mbs * l.seq_len), np);
    fflush(stdout);
    double rate = 0;
    int64_t l3 = 0;
    static struct kprobe kp;
    /* The kernels are timed hot; where a step leaves their operands is measured apart, as
     * bandwidth by reuse distance and each kernel's cold factor (measure_reuse), and the
     * prediction prices every operand at its own distance in the step (executor.h struct
     * dp_exec_reuse). */
    if ((rc = measure_gemm(&m, l.mbs * l.seq_len, cal, &rate, &err)) ||
        (rc = measure_kernels(&m, l.seq_len, 0, np, cores, &kp, cal, &l3, &err)) ||
        (rc = measure_reuse(&m, l.seq_len, cal, &err)))
        goto out;
    /* Streaming beyond the last-level cache: from 4x its share as sysfs gives it, or 2x the
     * reuse curve's farthest point where the curve found the cache smaller (a VM's sysfs
     * may give the host's whole L3: 480 MiB here, where the curve falls at 32-64 MiB). */
    if (cal->has_reuse && cal->reuse.n > 0 && 2 * cal->reuse.bytes[cal->reuse.n - 1] < 4.0 * l3)
        l3 = (int64_t)(cal->reuse.bytes[cal->reuse.n - 1] / 2);
    int64_t from = 4 * l3 > (int64_t)(4 * MIB) ? 4 * l3 : (int64_t)(4 * MIB);
    int64_t to = 4 * from < cap ? 4 * from : cap;
    if ((rc = measure_memory(from, to > 2 * from ? to : 4 * from, cal, &err)))
        goto out;
    if (np >= 2) {
        fflush(stdout);
        if ((rc = measure_colls(np, max_bytes, cal, &err)))
            goto out;
    }
    if ((rc = measure_kernels_late(&kp, cal, &err)))
        goto out;
    machine_cluster(cal, np, cores, avail, rate);

    const struct dp_cal_gemm *g = &cal->gemm[0];
    if (cal->ngemm)
        printf("gemm fp32   one thread: peak %.1f GFLOP/s, half at %.3g FLOPs (+-%.2g); R^2 %.3f, "
               "residuals rms %.1f%% max %.1f%% (%d shapes)\n",
               g->peak_tflops * 1e3, g->curve.half_flops, g->half_flops_se, g->q.r2,
               100 * g->q.rms_rel, 100 * g->q.max_rel, g->q.n);
    for (int i = 0; i < cal->ncpu; i++) {
        const struct dp_cal_cpu *k = &cal->cpu[i];
        printf("kernels     %d thread%s, %d computing: sgemm %.1f GFLOP/s x %.2f, call %.2f us, "
               "fork %.2f us, bw %.0f/%.0f/%.1f GB/s, attention fwd %.1f bwd %.1f us\n",
               k->threads, k->threads == 1 ? "" : "s", k->concurrent, k->gemm_gflops, k->conc_eff,
               k->gemm_call_us, k->fork_us, k->bw_gbps[0], k->bw_gbps[1], k->bw_gbps[2],
               k->attn_fwd_us, k->attn_bwd_us);
    }
    if (cal->has_reuse) {
        const struct dp_cal_reuse *r = &cal->reuse;
        printf("reuse       read / write GB/s of a line last touched N bytes ago:");
        for (int i = 0; i < r->n; i += 2)
            printf("%s %.0f/%.0f at %.3g MiB", i ? "," : "", r->read_gbps[i], r->write_gbps[i],
                   r->bytes[i] / MIB);
        printf("\n            sgemm hot: %.2f us a call, %.1f GFLOP/s, %.3f ns per packed "
               "element, %.3f ns per element of C (%d shapes, residuals rms %.1f%% max %.1f%%)\n",
               r->gemm_call_us, r->gemm_gflops, r->gemm_ab_ns, r->gemm_c_ns, r->gemm_hot_q.n,
               100 * r->gemm_hot_q.rms_rel, 100 * r->gemm_hot_q.max_rel);
        printf("            cold operands cost their bytes' extra time at those rates x: sgemm "
               "%.2f (%d shapes, rms %.0f%% around it); attention fwd %.2f bwd %.2f, norms "
               "%.2f/%.2f, activation %.2f/%.2f, cross-entropy %.2f, adamw %.2f\n",
               r->gemm_cold, r->gemm_cold_q.n, 100 * r->gemm_cold_q.rms_rel, r->attn_fwd,
               r->attn_bwd, r->norm_fwd, r->norm_bwd, r->act_fwd, r->act_bwd, r->ce, r->adamw);
    }
    if (cal->has_membw)
        printf("memory      %.2f GB/s, %.1f us per pass; R^2 %.3f, residuals rms %.1f%% max %.1f%% "
               "(%d sizes, %.0f to %.0f MiB)\n",
               cal->membw.bw_gbps, cal->membw.overhead_us, cal->membw.q.r2,
               100 * cal->membw.q.rms_rel, 100 * cal->membw.q.max_rel, cal->membw.q.n,
               (double)from / MIB, (double)(from << (cal->membw.q.n - 1)) / MIB);
    for (int i = 0; i < cal->ncoll; i++) {
        const struct dp_cal_coll *k = &cal->coll[i];
        printf("%-14s %d ranks over shm: alpha %.2f us (+-%.2f), busbw %.2f GB/s (+-%.2f); R^2 "
               "%.3f, residuals rms %.1f%% max %.1f%%\n",
               dp_nccl_coll_name(k->coll), k->ranks_min, k->alpha_us, k->alpha_se_us, k->busbw_gbps,
               k->busbw_se_gbps, k->q.r2, 100 * k->q.rms_rel, 100 * k->q.max_rel);
    }
    if (cal->has_lockstep) {
        printf("lock step   %d ranks, each synchronisation waits for the slowest:",
               cal->lockstep.ranks);
        for (int i = 0; i < cal->lockstep.n; i++)
            printf("%s %.1f us after %.0f us", i ? "," : "", cal->lockstep.wait_s[i] * 1e6,
                   cal->lockstep.seg_s[i] * 1e6);
        printf("; jitter %.2g s^0.5 (the sqrt law wait = %.2f jitter sqrt(segment); the "
               "prediction reads the waits)\n",
               cal->lockstep.jitter, dp_max_normal(cal->lockstep.ranks));
    }
    if (outfile) {
        if ((rc = dp_calibration_save(outfile, cal, &err)))
            goto out;
        printf("wrote %s\n", outfile);
    }
out:
    free(plan);
    free(cal);
    return rc ? cli_fail(&err) : 0;
}
