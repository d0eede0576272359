/*
 * compare_runs: check a `dplan run` output directory against a reference run
 * and against the memory model.
 *
 *   compare_runs REF_DIR RUN_DIR [--rtol X] [--mem-tol Y] [--resident] [--losses-only]
 *   compare_runs --memory RUN_DIR [--mem-tol Y] [--resident]
 *   compare_runs --resident RUN_DIR [--margin-mib M]
 *
 * Losses: every step of RUN/log.jsonl within rtol (relative) of REF's (--losses-only: no
 * weight comparison, for runs of different precisions whose weights are not comparable).
 * Weights: every tensor of REF/model.safetensors present in RUN's with the same
 * shape and ||run - ref||_F <= rtol ||ref||_F (see compare_weights).
 * Memory: every rank and pool of RUN/summary.json within mem-tol of the
 * prediction (a zero prediction must be measured as zero).
 * Resident memory (--resident; see check_resident): every rank's real resident peak
 * against what its accounted buffers occupy.
 * Prints one line per check with the worst error; exit 0 if all pass; 77 (skipped) for
 * --resident alone where the kernel cannot reset VmHWM.
 */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "compare_runs: cannot open %s\n", path);
        return NULL;
    }
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)n + 1);
    if (b && fread(b, 1, (size_t)n, f) != (size_t)n) {
        free(b);
        b = NULL;
    }
    fclose(f);
    if (b) {
        b[n] = '\0';
        if (len)
            *len = (size_t)n;
    }
    return b;
}

/* Losses of log.jsonl, in step order; returns the count. */
static int losses(const char *dir, double *out, int cap)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/log.jsonl", dir);
    char *s = slurp(path, NULL);
    if (!s)
        return -1;
    int n = 0;
    for (char *line = strtok(s, "\n"); line && n < cap; line = strtok(NULL, "\n")) {
        cJSON *o = cJSON_Parse(line);
        cJSON *l = cJSON_GetObjectItemCaseSensitive(o, "loss");
        if (cJSON_IsNumber(l))
            out[n++] = l->valuedouble;
        cJSON_Delete(o);
    }
    free(s);
    return n;
}

struct st {
    char *buf;
    size_t len, data;
    cJSON *hdr;
};

static int st_open(const char *dir, struct st *st)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    st->buf = slurp(path, &st->len);
    if (!st->buf || st->len < 8)
        return -1;
    uint64_t h = 0;
    for (int i = 0; i < 8; i++)
        h |= (uint64_t)(unsigned char)st->buf[i] << (8 * i);
    if (8 + h > st->len)
        return -1;
    st->hdr = cJSON_ParseWithLength(st->buf + 8, (size_t)h);
    st->data = 8 + (size_t)h;
    return st->hdr ? 0 : -1;
}

/* Element i of tensor t as a double. */
static double st_get(const struct st *st, const cJSON *t, size_t i)
{
    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(t, "dtype");
    const cJSON *off = cJSON_GetObjectItemCaseSensitive(t, "data_offsets");
    size_t b = st->data + (size_t)cJSON_GetArrayItem(off, 0)->valuedouble;
    if (!strcmp(dt->valuestring, "F64")) {
        double v;
        memcpy(&v, st->buf + b + 8 * i, 8);
        return v;
    }
    float v;
    memcpy(&v, st->buf + b + 4 * i, 4);
    return v;
}

static size_t st_numel(const cJSON *t)
{
    size_t n = 1;
    const cJSON *d;
    cJSON_ArrayForEach(d, cJSON_GetObjectItemCaseSensitive(t, "shape")) n *= (size_t)d->valuedouble;
    return n;
}

static int compare_weights(const char *ref, const char *run, double rtol)
{
    struct st a = {0}, b = {0};
    if (st_open(ref, &a) || st_open(run, &b)) {
        fprintf(stderr, "compare_runs: cannot read model.safetensors of %s or %s\n", ref, run);
        return 1;
    }
    int fail = 0, n = 0;
    double worst = 0;
    const char *worst_name = "";
    const cJSON *t;
    cJSON_ArrayForEach(t, a.hdr)
    {
        if (!strcmp(t->string, "__metadata__"))
            continue;
        const cJSON *u = cJSON_GetObjectItemCaseSensitive(b.hdr, t->string);
        if (!u || st_numel(u) != st_numel(t)) {
            fprintf(stderr, "weights: tensor %s missing or of another shape in %s\n", t->string,
                    run);
            fail = 1;
            continue;
        }
        /* Relative Frobenius error, the metric of Megatron-LM's optimizer-grads-match test
         * (tests/functional_tests/.../test_optimizer_grads_match.py): single elements can
         * differ more, because Adam's update g / (sqrt(v) + eps) turns a rounding-level
         * difference of a near-zero gradient into a visible step. */
        double dd = 0, rr = 0, md = 0;
        for (size_t i = 0, m = st_numel(t); i < m; i++) {
            double x = st_get(&a, t, i), y = st_get(&b, u, i);
            dd += (x - y) * (x - y);
            rr += x * x;
            md = fmax(md, fabs(x - y));
        }
        double e = rr > 0 ? sqrt(dd / rr) : sqrt(dd);
        /* The attention key bias has an exactly zero gradient (softmax is invariant to a
         * per-query constant, and q . bk is one), so it holds Adam-normalised rounding
         * noise in every run: compare it in absolute terms. */
        size_t nl = strlen(t->string);
        if (nl > 8 && !strcmp(t->string + nl - 8, ".attn.bk"))
            e = md;
        if (!(e <= rtol)) {
            fprintf(stderr,
                    "weights: %s differs: relative Frobenius error %.3g > %g (max|diff| %.3g)\n",
                    t->string, e, rtol, md);
            fail = 1;
        }
        if (e > worst || isnan(e)) {
            worst = e;
            worst_name = t->string;
        }
        n++;
    }
    printf("weights: %d tensors, worst relative difference %.3g (%s), tolerance %g\n", n, worst,
           worst_name, rtol);
    cJSON_Delete(a.hdr);
    cJSON_Delete(b.hdr);
    free(a.buf);
    free(b.buf);
    return fail || n == 0;
}

static int compare_losses(const char *ref, const char *run, double rtol)
{
    static double a[100000], b[100000];
    int na = losses(ref, a, 100000), nb = losses(run, b, 100000);
    if (na <= 0 || na != nb) {
        fprintf(stderr, "losses: %d steps in %s, %d in %s\n", na, ref, nb, run);
        return 1;
    }
    double worst = 0;
    int at = 0, fail = 0;
    for (int i = 0; i < na; i++) {
        double e = fabs(b[i] - a[i]) / fabs(a[i]);
        if (!(e <= rtol)) {
            fprintf(stderr, "losses: step %d: %.10g vs reference %.10g (rel %.3g > %g)\n", i + 1,
                    b[i], a[i], e, rtol);
            fail = 1;
        }
        if (e > worst || isnan(e)) {
            worst = e;
            at = i + 1;
        }
    }
    printf("losses: %d steps, worst relative difference %.3g (step %d), tolerance %g\n", na, worst,
           at, rtol);
    return fail;
}

static cJSON *summary(const char *run, const cJSON **ranks)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/summary.json", run);
    char *s = slurp(path, NULL);
    cJSON *o = s ? cJSON_Parse(s) : NULL;
    free(s);
    *ranks = cJSON_GetObjectItemCaseSensitive(o, "ranks");
    if (!cJSON_IsArray(*ranks) || cJSON_GetArraySize(*ranks) == 0) {
        fprintf(stderr, "compare_runs: no ranks in %s\n", path);
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

static double num(const cJSON *o, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsNumber(v) ? v->valuedouble : NAN;
}

static int check_memory(const char *run, double tol)
{
    const cJSON *ranks;
    cJSON *o = summary(run, &ranks);
    if (!o)
        return 1;
    int fail = 0, n = 0;
    double worst = 0;
    const cJSON *r;
    cJSON_ArrayForEach(r, ranks)
    {
        const cJSON *meas = cJSON_GetObjectItemCaseSensitive(r, "measured_peak_bytes");
        const cJSON *pred = cJSON_GetObjectItemCaseSensitive(r, "predicted_bytes");
        const cJSON *p;
        cJSON_ArrayForEach(p, pred)
        {
            const cJSON *m = cJSON_GetObjectItemCaseSensitive(meas, p->string);
            double x = m ? m->valuedouble : -1, y = p->valuedouble;
            double e = y > 0 ? fabs(x - y) / y : (x == 0 ? 0 : INFINITY);
            n++;
            if (!(e <= tol)) {
                fprintf(stderr, "memory: rank %d %s: measured %.0f, predicted %.0f (%.3g > %g)\n",
                        cJSON_GetObjectItemCaseSensitive(r, "rank")->valueint, p->string, x, y, e,
                        tol);
                fail = 1;
            }
            worst = fmax(worst, e);
        }
    }
    printf("memory: %d rank pools, worst relative difference %.3g, tolerance %g\n", n, worst, tol);
    cJSON_Delete(o);
    return fail || n == 0;
}

/*
 * What each rank's process really held, against its accounted buffers. The executor
 * reads VmRSS just before it allocates its buffers (after MPI_Init, the communicator
 * splits, the OpenMP threads and each thread's first OpenBLAS call, so the program, the
 * libraries, MPI's shared-memory segments as set up, the thread stacks and the BLAS
 * buffers' first pages are in the baseline) and resets VmHWM there; after the last step
 * it reads VmHWM. growth = that peak - the baseline. Expected: `reserved`, the bytes
 * the accounted buffers occupy with the CPU allocator's rounding (64 bytes, and whole
 * 2 MiB huge pages from 2 MiB up), all written at allocation so all resident, plus, on
 * the first DP rank of each shard group under ZeRO-1 (DP rank 0; under HSDP every
 * dp_rank that is a multiple of shard_group), the whole flat gradient buffer once more
 * (measured with the blocking reduction and with the overlapped buckets, whose
 * MPI_Ireduce_scatter and the edge's MPI_Reduce_scatter do the same):
 * Open MPI 4.1's MPI_Reduce_scatter_block (coll/tuned decision_fixed.c -> coll/base
 * reduce_scatter_block_basic_linear) reduces into a full-size buffer on the group's rank
 * 0, then scatters. ZeRO-2 and ZeRO-3 reduce-scatter one layer window per call
 * (executor/shard.c), not the flat buffer; no layout of resident_layouts measures them.
 *
 * Not accounted, so allowed above that (the margin): MPI's all-reduce scratch (the
 * backend sends at most 4 MiB per call; Open MPI's algorithms take up to the message
 * again), OpenBLAS's packing panels (the parts touched beyond the first call: about
 * 1-1.5 MiB per thread at these models' shapes), and code pages, heap and stacks first
 * touched during the steps (about 1 MiB). Measured on the layouts of
 * tests/executor/CMakeLists.txt (resident_*): 1.0 to 4.7 MiB above the expectation, never
 * below it. The margin is 6 MiB + 2 MiB per thread; below, 1 MiB (whole pages of
 * buffers smaller than a page, counted at their bytes). A buffer left out of the
 * accounting shows up as its size above the expectation: anything larger than the margin
 * fails (tests/executor/resident.sh runs models whose pools are 10-150 MiB).
 */
static int check_resident(const char *run, double margin_mib, bool alone)
{
    const cJSON *ranks;
    cJSON *o = summary(run, &ranks);
    if (!o)
        return 1;
    const cJSON *lay = cJSON_GetObjectItemCaseSensitive(o, "layout");
    const double zero = num(lay, "zero"), dp = num(lay, "dp"), sg = num(lay, "shard_group");
    const double shard = sg > 0 ? sg : dp; /* the ZeRO shard group (HSDP: shard_group) */
    const double threads = num(o, "threads_per_rank");
    const double mib = 1048576.0;
    double margin = margin_mib > 0 ? margin_mib * mib : (6 + 2 * threads) * mib;
    int fail = 0, n = 0;
    double lo = INFINITY, hi = -INFINITY;
    const cJSON *r;
    cJSON_ArrayForEach(r, ranks)
    {
        int rank = (int)num(r, "rank");
        if (!cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(r, "rss_peak_since_base"))) {
            printf("resident: rank %d could not reset VmHWM (/proc/self/clear_refs): not "
                   "checked\n",
                   rank);
            cJSON_Delete(o);
            return alone ? 77 : 0;
        }
        double growth = num(r, "rss_train_peak_bytes") - num(r, "rss_base_bytes");
        double expect = num(r, "reserved_bytes");
        /* The flat gradient buffer's size, as the rank reports it (flat_grads_bytes; its
         * params pool holds the bf16 / fp16 working copy besides, its grads pool the
         * reduced shard when the gradient buckets overlap the backward, overlap.c). */
        if (zero == 1 && shard > 1 && fmod(num(r, "dp_rank"), shard) == 0)
            expect += num(r, "flat_grads_bytes");
        double un = growth - expect;
        if (!(un <= margin && un >= -mib)) {
            fprintf(stderr,
                    "resident: rank %d: the process grew by %.2f MiB, its accounted buffers "
                    "occupy %.2f MiB: %+.2f MiB unaccounted, allowed -1 to +%.1f MiB\n",
                    rank, growth / mib, expect / mib, un / mib, margin / mib);
            fail = 1;
        }
        lo = fmin(lo, un);
        hi = fmax(hi, isnan(un) ? INFINITY : un);
        n++;
    }
    printf("resident: %d ranks, growth minus accounted buffers %+.2f to %+.2f MiB, allowed -1 "
           "to +%.1f MiB\n",
           n, lo / mib, hi / mib, margin / mib);
    cJSON_Delete(o);
    return fail || n == 0;
}

int main(int argc, char **argv)
{
    double rtol = 1e-5, mtol = 0.05, margin = 0;
    const char *pos[2] = {0};
    int npos = 0;
    bool memory_only = false, resident = false, losses_only = false;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--rtol") && i + 1 < argc)
            rtol = atof(argv[++i]);
        else if (!strcmp(argv[i], "--mem-tol") && i + 1 < argc)
            mtol = atof(argv[++i]);
        else if (!strcmp(argv[i], "--margin-mib") && i + 1 < argc)
            margin = atof(argv[++i]);
        else if (!strcmp(argv[i], "--memory"))
            memory_only = true;
        else if (!strcmp(argv[i], "--resident"))
            resident = true;
        else if (!strcmp(argv[i], "--losses-only"))
            losses_only = true;
        else if (npos < 2)
            pos[npos++] = argv[i];
    }
    if (resident && !memory_only && npos == 1)
        return check_resident(pos[0], margin, true);
    if (memory_only && npos == 1)
        return check_memory(pos[0], mtol) | (resident ? check_resident(pos[0], margin, false) : 0);
    if (npos != 2) {
        fprintf(stderr, "usage: compare_runs REF_DIR RUN_DIR [--rtol X] [--mem-tol Y] "
                        "[--resident] [--losses-only]\n");
        return 2;
    }
    int fail = compare_losses(pos[0], pos[1], rtol);
    if (!losses_only)
        fail |= compare_weights(pos[0], pos[1], rtol);
    fail |= check_memory(pos[1], mtol);
    if (resident)
        fail |= check_resident(pos[1], margin, false);
    return fail;
}
