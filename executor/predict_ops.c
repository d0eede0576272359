/*
 * The pricing backend's operations: each kernel, collective and message of
 * backend.h adds what it costs on this machine to the rank's bill (struct
 * pricer in predict.h), from the probe's or the calibration's measurements.
 * Why a pricing backend, and the formulas' sources: predict.c.
 */
#include "predict.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define R ((double)sizeof(real)) /* bytes per element */

static struct pricer *pc(struct dp_backend *be)
{
    return (struct pricer *)be;
}

/* Streaming bandwidth (bytes/s per thread) for a working set of `ws` bytes per thread:
 * that of the cache level it fits in. With a swept probe (probe.h swept_gbps), a working
 * set within the L3 share moves at the swept rate instead: its operands were last touched
 * a step's buffer table ago, so they are not in L2 however small the pass (tiny-gpt's
 * element-wise ops and GEMM packing ran at 20-50 GB/s in its step, DPLAN_OPTIME, against
 * 121 GB/s streaming hot in L2); beyond the L3 share it streams from DRAM either way. */
static double bw(const struct pricer *c, double ws)
{
    int lv = ws <= (double)c->pr.cache_bytes[0] ? 0 : ws <= (double)c->pr.cache_bytes[1] ? 1 : 2;
    if (lv < 2 && c->pr.swept_gbps > 0)
        return fmin(c->pr.swept_gbps, c->pr.bw_gbps[lv]) * 1e9;
    return c->pr.bw_gbps[lv] * 1e9;
}

/* A parallel region of the rank's threads: its fork and join (on one thread too: the
 * probe measures it there, cpu_probe.c). */
static void region(struct pricer *c)
{
    c->bill.fork += c->pr.fork_s;
    c->bill.core_s += c->nt * c->pr.fork_s;
}

/* Element-wise work over `elems` elements moving `bytes`, `ns` ns of compute per element
 * on one thread, split over the rank's threads: the slower of compute and memory (a
 * roofline), plus the region. */
static void ew(struct pricer *c, double elems, double bytes, double ns)
{
    region(c);
    double per = bytes / c->nt;
    double t = fmax(elems * ns * 1e-9 / c->nt, per / bw(c, per));
    *(c->optimizer ? &c->bill.opt : &c->bill.ew) += t;
    c->bill.core_s += c->nt * t;
}

/* memset/memcpy on the calling thread. */
static void serial(struct pricer *c, double *bucket, double bytes)
{
    double t = bytes / bw(c, bytes);
    *bucket += t;
    c->bill.core_s += t;
}

/* ------------------------------------------------------------------ the kernels' prices */

/* The bytes of granule g of r (the last one may be short). */
static size_t gran_bytes(const struct reservation *r, size_t g)
{
    size_t a = g * r->gran, b = a + r->gran;
    return (b < r->n ? b : r->n) - a;
}

/* Fenwick tree over operation numbers (predict.h): add v at operation i. */
static void fen_add(struct pricer *c, int64_t i, double v)
{
    if (i < 0 || i >= c->fen_cap)
        return;
    c->fen_val[i] += v;
    c->fen_total += v;
    for (int64_t k = i + 1; k <= c->fen_cap; k += k & -k)
        c->fen[k - 1] += v;
}

/* The bytes whose last touch was at operation <= i. */
static double fen_prefix(const struct pricer *c, int64_t i)
{
    double s = 0;
    for (int64_t k = (i < c->fen_cap ? i : c->fen_cap - 1) + 1; k > 0; k -= k & -k)
        s += c->fen[k - 1];
    return s;
}

/* Room for operation number `i` (doubling, the tree rebuilt from its values). */
static int fen_room(struct pricer *c, int64_t i)
{
    if (i < c->fen_cap)
        return 0;
    int64_t cap = c->fen_cap ? 2 * c->fen_cap : 4096;
    while (cap <= i)
        cap *= 2;
    double *val = realloc(c->fen_val, (size_t)cap * sizeof *val);
    if (!val)
        return -1;
    c->fen_val = val;
    memset(val + c->fen_cap, 0, (size_t)(cap - c->fen_cap) * sizeof *val);
    double *fen = realloc(c->fen, (size_t)cap * sizeof *fen);
    if (!fen)
        return -1;
    c->fen = fen;
    c->fen_cap = cap;
    memcpy(fen, val, (size_t)cap * sizeof *fen);
    for (int64_t k = 1; k <= cap; k++) {
        int64_t up = k + (k & -k);
        if (up <= cap)
            fen[up - 1] += fen[k - 1];
    }
    return 0;
}

/* Buffers are reservations of address space without access; their sizes are kept for
 * munmap, in address order (found by bisection), each with its granules' stamps when
 * operands are priced at their reuse distance. */
static void *p_alloc(struct dp_backend *be, size_t bytes)
{
    struct pricer *c = pc(be);
    if (c->nmaps == c->capmaps) {
        int cap = c->capmaps ? 2 * c->capmaps : 64;
        struct reservation *r = realloc(c->maps, (size_t)cap * sizeof *r);
        if (!r)
            return NULL;
        c->maps = r;
        c->capmaps = cap;
    }
    size_t n = bytes ? bytes : 1;
    struct reservation r = {.n = n, .gran = 4096};
    if (c->pr.reuse.n > 0) {
        /* at most 64 Ki stamps a buffer: a page each up to 256 MiB, then coarser */
        if (n / r.gran > 65536)
            r.gran = (n / 65536 + 4095) / 4096 * 4096;
        size_t ng = (n + r.gran - 1) / r.gran;
        if (!(r.stamp = malloc(ng * sizeof *r.stamp)))
            return NULL;
        for (size_t i = 0; i < ng; i++)
            r.stamp[i] = -1;
    }
    r.p = mmap(NULL, n, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (r.p == MAP_FAILED) {
        free(r.stamp);
        return NULL;
    }
    int i = c->nmaps++;
    while (i > 0 && (uintptr_t)c->maps[i - 1].p > (uintptr_t)r.p) {
        c->maps[i] = c->maps[i - 1];
        i--;
    }
    c->maps[i] = r;
    return r.p;
}

/* The reservation holding address p, or NULL. */
static struct reservation *find(const struct pricer *c, const void *p)
{
    int lo = 0, hi = c->nmaps - 1;
    uintptr_t a = (uintptr_t)p;
    while (lo <= hi) {
        int mid = (lo + hi) / 2;
        uintptr_t b = (uintptr_t)c->maps[mid].p;
        if (a < b)
            hi = mid - 1;
        else if (a >= b + c->maps[mid].n)
            lo = mid + 1;
        else
            return &c->maps[mid];
    }
    return NULL;
}

static void p_free(struct dp_backend *be, void *p)
{
    struct pricer *c = pc(be);
    struct reservation *r = find(c, p);
    if (!r || r->p != p)
        return;
    munmap(r->p, r->n);
    if (r->stamp) {
        size_t ng = (r->n + r->gran - 1) / r->gran;
        for (size_t g = 0; g < ng; g++)
            if (r->stamp[g] >= 0)
                fen_add(c, r->stamp[g], -(double)gran_bytes(r, g));
    }
    free(r->stamp);
    int i = (int)(r - c->maps);
    memmove(&c->maps[i], &c->maps[i + 1], (size_t)(c->nmaps - i - 1) * sizeof *r);
    c->nmaps--;
}

/* ------------------------------------------------------------------ reuse distance */

/*
 * Where the step left each operand. A kernel's memory traffic runs at the bandwidth of
 * wherever its operands sit, and that depends on how many distinct bytes the step touched
 * since their last use: their reuse distance (Mattson et al. 1970's LRU stack distance,
 * in bytes of 4 KiB granules rather than lines). A weight was last touched in the
 * previous step, an activation read in the backward was written in the forward, the input
 * of FC1 was written by the norm just before. The pricer numbers the step's operations,
 * keeps per granule of every buffer the operation that last touched it, and per operation
 * the bytes it was the last to touch (a Fenwick tree), so the distance is a suffix sum;
 * each operand is priced at the rate the calibration measured at that distance
 * (executor.h struct dp_exec_reuse). The step is priced twice and the second kept
 * (predict.c), so weights and optimizer states carry the previous step's distances.
 *
 * An operand read costs its bytes at the read rate of its distance; one written (or read
 * and written) at the write rate, which holds the line's read for ownership and its
 * write-back (the caches are full of the step's dirty lines): measured here, writing a
 * line last touched 8 MiB ago costs 2.5x reading it, 64 MiB ago 3x.
 *
 * Measured here (bench-gpt, 6 layers, hidden 256, mbs 2, one rank, DPLAN_OPTIME): its 75
 * GEMMs took 62.1 ms a step against 52.7 priced from one swept rate, its residual adds 47
 * us a call (the pass's rate beyond 32 MiB) against 12.5 priced.
 */
enum { RD = 1, WR = 2, RW = 3 };

/* A granule's stamp when another rank's core last wrote or read it (remote()). */
#define REMOTE (-2)

/* An operand: `bytes` of it read and/or written within the extent [p, p + extent). */
struct opnd {
    const void *p;
    double extent, bytes;
    int rw;
};

static bool reuse(const struct pricer *c)
{
    return c->pr.reuse.n > 0;
}

/* Seconds per byte read (or written: its read for ownership and write-back) of a line
 * last touched d bytes ago, off the curve: the rate linear in log(distance) between its
 * points, its ends beyond them. The node's other ranks touch as much as this one
 * meanwhile, which the shared cache sees: past the private L2, the distance times the
 * ranks on the node. */
static double spb(const struct pricer *c, double d, bool write)
{
    const struct dp_exec_reuse *k = &c->pr.reuse;
    const double *g = write ? k->write_gbps : k->read_gbps;
    if (d > (double)c->pr.cache_bytes[0] && c->per_node > 1)
        d *= c->per_node;
    if (!(d > k->bytes[0]))
        return 1e-9 / g[0];
    if (d >= k->bytes[k->n - 1])
        return 1e-9 / g[k->n - 1];
    int i = 1;
    while (k->bytes[i] < d)
        i++;
    double f = log(d / k->bytes[i - 1]) / log(k->bytes[i] / k->bytes[i - 1]);
    return 1e-9 / (g[i - 1] + f * (g[i] - g[i - 1]));
}

/* The buffer holding [p, p + bytes) and the byte range of it that the span covers (cut at
 * the buffer's end); NULL outside every buffer. */
static struct reservation *span(const struct pricer *c, const void *p, double bytes, size_t *off,
                                size_t *end)
{
    struct reservation *r = p && bytes > 0 ? find(c, p) : NULL;
    if (r) {
        *off = (size_t)((uintptr_t)p - (uintptr_t)r->p);
        *end = *off + (size_t)bytes;
        *end = *end > r->n ? r->n : *end;
    }
    return r;
}

/* The seconds operand o's bytes cost where its granules were left, read or written; *extra
 * what that is over the same bytes hot. An operand outside every buffer (a scratch the
 * backend owns, a NULL one) is hot. */
static double cost(const struct pricer *c, const struct opnd *o, double *extra)
{
    const bool w = o->rw != RD;
    const double hot = spb(c, 0, w);
    *extra = 0;
    size_t off = 0, end = 0;
    struct reservation *r = span(c, o->p, o->extent, &off, &end);
    if (!r || !(o->bytes > 0))
        return o->bytes > 0 ? o->bytes * hot : 0;
    const double dens = o->bytes / o->extent;
    /* An operand's granules mostly share their last touch: a run of them is one distance,
     * priced once (a large model's weight is tens of thousands of granules). */
    double t = 0, run = 0;
    int64_t last = INT64_MIN;
    for (size_t g = off / r->gran;; g++) {
        bool done = g * r->gran >= end;
        int64_t st = done ? INT64_MIN : r->stamp[g];
        if ((done || st != last) && run > 0) {
            double d = last == REMOTE ? 4.0 * (double)c->pr.cache_bytes[0]
                       : last < 0     ? 1e300
                                      : c->fen_total - fen_prefix(c, last);
            double x = dens * run * spb(c, d, w);
            t += x;
            *extra += x - dens * run * hot;
            run = 0;
        }
        if (done)
            break;
        last = st;
        size_t a = g * r->gran > off ? g * r->gran : off;
        size_t b = (g + 1) * r->gran < end ? (g + 1) * r->gran : end;
        run += (double)(b - a);
    }
    return t;
}

/* Gives the granules over bytes [off, end) of r the stamp `to`; the bytes they held leave
 * the tree in one update per run of granules last touched by one operation. The bytes
 * restamped. */
static double restamp(struct pricer *c, struct reservation *r, size_t off, size_t end, int64_t to)
{
    double moved = 0, run = 0;
    int64_t last = -1;
    for (size_t g = off / r->gran; g * r->gran < end; g++) {
        if (r->stamp[g] == to)
            continue;
        if (r->stamp[g] != last) {
            if (last >= 0)
                fen_add(c, last, -run);
            last = r->stamp[g];
            run = 0;
        }
        double b = (double)gran_bytes(r, g);
        run += b;
        moved += b;
        r->stamp[g] = to;
    }
    if (last >= 0)
        fen_add(c, last, -run);
    return moved;
}

/* Marks the operands touched by operation number `now`, the next number. */
static void touch(struct pricer *c, const struct opnd *o, int n)
{
    const int64_t now = c->now++;
    if (fen_room(c, now))
        return; /* out of memory: distances stop growing, prices stay finite */
    for (int i = 0; i < n; i++) {
        size_t off, end;
        struct reservation *r = span(c, o[i].p, o[i].extent, &off, &end);
        if (r)
            fen_add(c, now, restamp(c, r, off, end, now));
    }
}

/*
 * A collective's result: the lines another rank's core wrote (Open MPI's shared-memory
 * transfers land them there) or read last, not in this core's cache. Measured here: after
 * an in-place all-reduce over 2 ranks, reading its 128 KiB took 7.2 us and zeroing it 7.0,
 * against 2.4 and 2.8 for a buffer only this rank touched (512 KiB: 23 against 10); the
 * next touch is priced as from the shared last-level cache, beyond the private L2 (4x its
 * size on the curve). A group of one moves nothing.
 */
static void remote(struct pricer *c, const void *p, double bytes, int n)
{
    size_t off, end;
    struct reservation *r = n > 1 && reuse(c) ? span(c, p, bytes, &off, &end) : NULL;
    if (r)
        restamp(c, r, off, end, REMOTE);
}

/* An operation's operands where the step left them: the seconds of their footprint at the
 * pass's rates, *extra (if not NULL) what that is over hot; then they are touched. */
static double mem(struct pricer *c, const struct opnd *o, int n, double *extra)
{
    double t = 0, x = 0, e;
    for (int i = 0; i < n; i++) {
        t += cost(c, &o[i], &e);
        x += e;
    }
    touch(c, o, n);
    if (extra)
        *extra = x;
    return t;
}

/* A write-only pass moves each line twice: a store to a line not in the cache first
 * reads it (write-allocate, the read for ownership), then writes it back; the probe's
 * bandwidths are of y = a x + b y, whose stored lines were just read. Measured here: a
 * bias fill of 256 KiB took 5.27 us hot, 2.2 at the triad's 121 GB/s for its bytes once,
 * 4.3 for them twice. */
#define WRITE_ALLOCATE 2.0

/*
 * A ceiling on what the reuse curve charges: the roofline from memory, the slower of the
 * hot compute `hot` and the operands' bytes streamed at the triad's rate (stream_gbps:
 * y = a x + b y over more than the last-level cache), a line read once and a line written
 * twice (write-allocate, then the write-back). The curve's far rates come from 256 KiB
 * passes after a sweep of dirty lines (read ~21 GB/s, write ~10 on this VM, the triad 43)
 * and the kernels' cold factors from the probe's small tensors; the longer streams of a
 * larger model run at the triad's rate. bench-gpt, one rank (DPLAN_OPTIME): its 100 AdamW
 * calls took 3.1-3.2 ms a step, the curve priced 7.3, this ceiling 3.2; its 6 attention
 * forwards 3.0-3.4 ms, priced 5.4, ceiling 3.4; its step 96-98 ms, priced 101 and 93.
 * Seconds of one thread (`hot` too), the triad's rate being one thread's share.
 */
static double roof(const struct pricer *c, double hot, const struct opnd *o, int n)
{
    const double dram = c->pr.bw_gbps[2] * 1e9;
    if (!(dram > 0))
        return INFINITY;
    double b = 0;
    for (int i = 0; i < n; i++)
        b += o[i].bytes * (o[i].rw == RD ? 1 : WRITE_ALLOCATE);
    return fmax(hot, b / dram);
}

/* A cold-priced operation split over the rank's threads: `hot` seconds (each thread's) of
 * compute and `extra` more for its operands where the step left them, capped by the
 * roofline from memory of its whole work. */
static double capped(const struct pricer *c, double hot, double extra, const struct opnd *o, int n)
{
    return fmin(hot + extra, roof(c, hot * c->nt, o, n) / c->nt);
}

/* A dense operand of n elements at p. */
static struct opnd dense(const void *p, double n, int rw)
{
    return (struct opnd){p, R * n, R * n, rw};
}

/* A rows x cols block of a row-major matrix with leading dimension ld. */
static struct opnd block(const void *p, double rows, double cols, double ld, int rw)
{
    double ext = rows > 0 ? R * ((rows - 1) * ld + cols) : 0;
    return (struct opnd){p, ext, R * rows * cols, rw};
}

/*
 * Element-wise work over `elems` elements, split over the rank's threads, plus the region.
 * With a reuse curve: a kernel the calibration timed (ns > 0: its hot cost per element) costs
 * that plus `cold` times its operands' extra over hot (its measured cold factor); a plain
 * pass (ns 0: bias, residual, embedding...) its operands' footprint at the pass's rates.
 * Without one (an older profile, or the run's own probe): the slower of `ns` per element
 * and `bytes` at the bandwidth of their working set (ew).
 */
static void ewo(struct pricer *c, double elems, double bytes, double ns, double cold,
                const struct opnd *o, int n)
{
    if (!reuse(c)) {
        ew(c, elems, bytes, ns);
        return;
    }
    region(c);
    double x, m = mem(c, o, n, &x);
    double hot = elems * ns * 1e-9 / c->nt;
    double t = capped(c, hot, (ns > 0 ? cold * x : m) / c->nt, o, n);
    *(c->optimizer ? &c->bill.opt : &c->bill.ew) += t;
    c->bill.core_s += c->nt * t;
}

/* memset/memcpy on the calling thread, the same way (a plain pass). */
static void serialo(struct pricer *c, double *bucket, double bytes, const struct opnd *o, int n)
{
    if (!reuse(c)) {
        serial(c, bucket, bytes);
        return;
    }
    double t = fmin(mem(c, o, n, NULL), roof(c, 0, o, n));
    *bucket += t;
    c->bill.core_s += t;
}

#define OPND(...)                                                                                  \
    ((const struct opnd[]){__VA_ARGS__}),                                                          \
        (int)(sizeof((const struct opnd[]){__VA_ARGS__}) / sizeof(struct opnd))

static void p_none(struct dp_backend *be, void *dst, const void *src, size_t bytes) {}

static void p_zero(struct dp_backend *be, void *dst, size_t bytes)
{
    double b = (double)bytes;
    serialo(pc(be), pc(be)->optimizer ? &pc(be)->bill.opt : &pc(be)->bill.ew, WRITE_ALLOCATE * b,
            OPND({dst, b, b, WR}));
}

static void p_copy(struct dp_backend *be, void *dst, const void *src, size_t bytes)
{
    double b = (double)bytes;
    serialo(pc(be), &pc(be)->bill.ew, 2.0 * b, OPND({src, b, b, RD}, {dst, b, b, WR}));
}

/* C[m, n] = A[m, k] B[k, n], split by rows as cpu_gemm.c splits it (whole 16-row panels per
 * thread): a fixed call cost, the FLOPs at the probed rate, and the packing of the
 * operands into panels (GotoBLAS/OpenBLAS copy A's rows and all of B, read and write:
 * 8 bytes per element, at the bandwidth of where they sit). Each thread packs all of B:
 * what splitting a small product repeats. */
static void p_gemm(struct dp_backend *be, bool ta, bool tb, int m, int n, int k, real alpha,
                   const real *a, int lda, const real *b, int ldb, real beta, real *cc, int ldc)
{
    struct pricer *c = pc(be);
    int nth = dp_exec_gemm_threads(m, n, k, c->nt);
    double rows = m;
    if (nth > 1) {
        region(c);
        rows = ceil(ceil((double)m / nth) / 16) * 16;
        rows = rows < m ? rows : m;
    }
    double eff = nth > 1 || c->shared ? c->pr.conc_eff : 1.0;
    double pack = (rows + n) * k;
    double t = 0;
    if (!reuse(c)) {
        t = c->pr.gemm_call_s + 2 * rows * n * k / (c->pr.gemm_gflops * 1e9 * eff) +
            2 * R * pack / bw(c, R * pack);
    } else {
        /* Per operand what its distance adds over hot, times SGEMM's measured cold factors
         * (executor.h struct dp_exec_reuse): each thread packs its rows of A and all of B,
         * and writes its rows of C. */
        const struct dp_exec_reuse *f = &c->pr.reuse;
        struct opnd o[3] = {ta ? block(a, k, m, lda, RD) : block(a, m, k, lda, RD),
                            tb ? block(b, n, k, ldb, RD) : block(b, k, n, ldb, RD),
                            block(cc, m, n, ldc, beta != 0 ? RW : WR)};
        double x[3];
        for (int i = 0; i < 3; i++)
            cost(c, &o[i], &x[i]);
        touch(c, o, 3);
        /* Hot, the calibration's SGEMM model for this thread's rows (executor.h struct
         * dp_exec_reuse: the call, the multiply-adds, the packed panels, C's elements; the
         * rate shared as the probe measured with the node's other threads busy). */
        double share = rows / m;
        t += f->gemm_call_s + 2 * rows * n * k / (f->gemm_gflops * 1e9 * eff) +
             f->gemm_ab_s * pack + f->gemm_c_s * rows * n +
             f->gemm_cold * (share * x[0] + x[1] + share * x[2]);
    }
    c->bill.gemm += t;
    c->bill.core_s += nth * t;
}

/* cpu_fp8.c's FP8 GEMM: per operand an amax pass (read) and the quantisation into a
 * packed copy (read, write), memory-bound, then the fp32 GEMM of the copies (the CPU has
 * no FP8 rate: its BLAS runs fp32). */
static void p_gemm_fp8(struct dp_backend *be, bool ta, bool tb, int m, int n, int k, real alpha,
                       const real *a, int lda, enum dp_f8 fa, const real *b, int ldb, enum dp_f8 fb,
                       real beta, real *cc, int ldc)
{
    const double ea = (double)m * k, eb = (double)k * n;
    ew(pc(be), ea, R * 3.0 * ea, 0);
    ew(pc(be), eb, R * 3.0 * eb, 0);
    p_gemm(be, ta, tb, m, n, k, alpha, NULL, ta ? m : k, NULL, tb ? k : n, beta, cc, ldc);
}

static void p_init_fill(struct dp_backend *be, real *dst, int64_t rows, int64_t cols, int64_t gcols,
                        int64_t r0, int64_t c0, uint64_t seed, uint64_t key, double std,
                        double value)
{
}

static void p_norm_fwd(struct dp_backend *be, enum dp_norm_kind kind, real *out, real *stats,
                       const real *inp, const real *w, const real *b, int64_t N, int64_t C)
{
    double e = (double)(N * C);
    ewo(pc(be), e, R * (2.0 * N * C + 2.0 * N), pc(be)->pr.norm_fwd_ns, pc(be)->pr.reuse.norm_fwd,
        OPND(dense(inp, e, RD), dense(w, (double)C, RD), dense(b, b ? (double)C : 0, RD),
             dense(out, e, WR), dense(stats, 2.0 * N, WR)));
}

static void p_norm_bwd(struct dp_backend *be, enum dp_norm_kind kind, real *dinp, real *dw,
                       real *db, const real *dout, const real *inp, const real *w,
                       const real *stats, int64_t N, int64_t C)
{
    double e = (double)(N * C);
    ewo(pc(be), e, R * 4.0 * N * C, pc(be)->pr.norm_bwd_ns, pc(be)->pr.reuse.norm_bwd,
        OPND(dense(dout, e, RD), dense(inp, e, RD), dense(w, (double)C, RD),
             dense(stats, 2.0 * N, RD), dense(dinp, e, RW), dense(dw, dw ? (double)C : 0, RW),
             dense(db, db ? (double)C : 0, RW)));
}

static void p_bias_fill(struct dp_backend *be, real *out, const real *bias, int64_t N, int64_t C)
{
    double e = (double)(N * C);
    ewo(pc(be), e, WRITE_ALLOCATE * R * e, 0, 0,
        OPND(dense(bias, (double)C, RD), dense(out, e, WR)));
}

static void p_bias_grad(struct dp_backend *be, real *db, const real *dout, int64_t N, int64_t C)
{
    double e = (double)(N * C);
    ewo(pc(be), e, R * e, 0, 0, OPND(dense(dout, e, RD), dense(db, (double)C, RW)));
}

static void p_residual(struct dp_backend *be, real *out, const real *a, const real *b,
                       const real *bias, int64_t N, int64_t C)
{
    double e = (double)(N * C);
    ewo(pc(be), e, R * (b ? 3.0 : 2.0) * N * C, 0, 0,
        OPND(dense(a, e, RD), dense(b, b ? e : 0, RD), dense(bias, bias ? (double)C : 0, RD),
             dense(out, e, out == a ? RW : WR)));
}

static void p_add_inplace(struct dp_backend *be, real *y, const real *x, int64_t n)
{
    ewo(pc(be), (double)n, R * 3.0 * n, 0, 0,
        OPND(dense(x, (double)n, RD), dense(y, (double)n, RW)));
}

/* F columns out; GELU reads F, SwiGLU 2 F per row. */
static void p_act_fwd(struct dp_backend *be, enum dp_ffn_kind kind, real *out, const real *inp,
                      int64_t N, int64_t F)
{
    double F1 = kind == DP_FFN_SWIGLU ? 2.0 * F : (double)F;
    ewo(pc(be), (double)(N * F), R * N * (F1 + F), pc(be)->pr.act_fwd_ns, pc(be)->pr.reuse.act_fwd,
        OPND(dense(inp, N * F1, RD), dense(out, (double)(N * F), WR)));
}

static void p_act_bwd(struct dp_backend *be, enum dp_ffn_kind kind, real *dinp, real *dbias,
                      const real *dout, const real *inp, int64_t N, int64_t F)
{
    double F1 = kind == DP_FFN_SWIGLU ? 2.0 * F : (double)F;
    ewo(pc(be), (double)(N * F), R * N * (F + 2 * F1), pc(be)->pr.act_bwd_ns,
        pc(be)->pr.reuse.act_bwd,
        OPND(dense(dout, (double)(N * F), RD), dense(inp, N * F1, RD), dense(dinp, N * F1, WR),
             dense(dbias, dbias ? F1 : 0, RW)));
}

static void p_rope(struct dp_backend *be, real *x, int64_t ld, int64_t N, int64_t T, int nq, int nk,
                   int d, const real *cs, bool inverse)
{
    double e = (double)N * (nq + nk) * d;
    ewo(pc(be), e, R * 2 * e, 0, 0,
        OPND(block(x, (double)N, (double)(nq + nk) * d, (double)ld, RW),
             dense(cs, (double)T * d, RD)));
}

/* q/k norm (cpu_qknorm.c): a norm pass over the heads, and the copy of its input. */
static void p_qk_norm_fwd(struct dp_backend *be, real *x, int64_t ld, real *raw, real *rstd,
                          const real *wq, const real *wk, int64_t N, int nq, int nk, int d)
{
    double e = (double)N * (nq + nk) * d;
    ew(pc(be), e, R * 3 * e, pc(be)->pr.norm_fwd_ns);
}

static void p_qk_norm_bwd(struct dp_backend *be, real *dx, int64_t ld, real *dwq, real *dwk,
                          const real *raw, const real *rstd, const real *wq, const real *wk,
                          int64_t N, int nq, int nk, int d)
{
    double e = (double)N * (nq + nk) * d;
    ew(pc(be), e, R * 4 * e, pc(be)->pr.norm_bwd_ns);
}

/* Attention: one task per (sequence, head) over the threads, the probabilities kept. */
static void p_attn_fwd(struct dp_backend *be, real *ctx, real *probs, const real *qkv, int64_t B,
                       int64_t T, int a, int g, int d)
{
    struct pricer *c = pc(be);
    double N = (double)(B * T), qd = (double)a * d, qkvd = (double)(a + 2 * g) * d;
    serialo(c, &c->bill.attn, R * N * qd, OPND(dense(ctx, N * qd, WR)));
    region(c);
    double tasks = (double)(B * a), pb = R * tasks * T * T;
    double t = ceil(tasks / c->nt) * c->pr.attn_fwd_s, x;
    if (reuse(c)) {
        const struct opnd o[] = {dense(qkv, N * qkvd, RD), dense(probs, pb / R, WR),
                                 dense(ctx, N * qd, RW)};
        mem(c, o, 3, &x);
        t = capped(c, t, c->pr.reuse.attn_fwd * x / c->nt, o, 3);
    } else {
        t = fmax(t, (pb + R * N * (qkvd + qd)) / c->nt / bw(c, (pb + R * N * qkvd) / c->nt));
    }
    c->bill.attn += t;
    c->bill.core_s += c->nt * t;
}

static void p_attn_probs(struct dp_backend *be, real *probs, const real *qkv, int64_t B, int64_t T,
                         int a, int g, int d)
{
    struct pricer *c = pc(be);
    region(c);
    double t = ceil((double)(B * a) / c->nt) * c->pr.attn_probs_s;
    if (reuse(c)) {
        double N = (double)(B * T), qkvd = (double)(a + 2 * g) * d, x;
        const struct opnd o[] = {dense(qkv, N * qkvd, RD),
                                 dense(probs, (double)(B * a) * T * T, WR)};
        mem(c, o, 2, &x);
        t = capped(c, t, c->pr.reuse.attn_probs * x / c->nt, o, 2);
    }
    c->bill.attn += t;
    c->bill.core_s += c->nt * t;
}

/* One task per (sequence, kv head), each over its a/g query heads. */
static void p_attn_bwd(struct dp_backend *be, real *dqkv, real *dprobs, const real *dctx,
                       const real *qkv, const real *probs, int64_t B, int64_t T, int a, int g,
                       int d)
{
    struct pricer *c = pc(be);
    double N = (double)(B * T), qd = (double)a * d, qkvd = (double)(a + 2 * g) * d;
    double pb = R * B * a * T * T;
    serialo(c, &c->bill.attn, R * N * qkvd, OPND(dense(dqkv, N * qkvd, WR)));
    region(c);
    double t = ceil((double)(B * g) / c->nt) * ((double)a / g) * c->pr.attn_bwd_s, x;
    if (reuse(c)) {
        const struct opnd o[] = {dense(dctx, N * qd, RD), dense(qkv, N * qkvd, RD),
                                 dense(probs, pb / R, RD), dense(dprobs, pb / R, WR),
                                 dense(dqkv, N * qkvd, RW)};
        mem(c, o, 5, &x);
        t = capped(c, t, c->pr.reuse.attn_bwd * x / c->nt, o, 5);
    } else {
        t = fmax(t, (2 * pb + R * N * (2 * qkvd + qd)) / c->nt / bw(c, 2 * pb / c->nt));
    }
    c->bill.attn += t;
    c->bill.core_s += c->nt * t;
}

/*
 * Flash attention (attn_flash_*, cpu_attention_flash.c): priced by its FLOPs at the
 * probe's attention rate. A causal head does 4 T^2 d FLOPs forward halved by the mask
 * (S = q k^T and ctx = P v, 2 T^2 d each unmasked) and its backward 2.5 times that: the
 * recomputed S, dP = dctx v^T, dV, dQ, dK, five products against the forward's two (Dao
 * 2023, FlashAttention-2, Sec. 3.1.2 and Alg. 2; Sec. 4.1 counts the backward as 2.5x the
 * forward). The probe times the math head (cpu_attention.c), which does the forward's
 * same 2 T^2 d, so the rate is 2 T^2 d / attn_fwd_s at its shape. A lower bound: the
 * flash kernels are scalar loops, the math ones register-blocked. Memory: qkv and ctx
 * (and their gradients) stream once, no T x T buffer.
 */
static double flash_head_s(const struct pricer *c, int64_t T, int d, double passes)
{
    /* the probe's head: the run's seq_len and head_dim (cp = 1 here) */
    double pT = c->seq_len > 0 ? c->seq_len : (double)T;
    double flops = 2.0 * (double)T * (double)T * d; /* causal: 4 T^2 d / 2 */
    double rate = c->pr.attn_fwd_s > 0 ? 2.0 * pT * pT * d / c->pr.attn_fwd_s : 0;
    return rate > 0 ? passes * flops / rate : 0;
}

static void p_attn_flash_fwd(struct dp_backend *be, real *ctx, real *lse, const real *qkv,
                             int64_t B, int64_t T, int a, int g, int d)
{
    struct pricer *c = pc(be);
    double N = (double)(B * T), qd = (double)a * d, qkvd = (double)(a + 2 * g) * d;
    region(c);
    double tasks = (double)(B * a), bytes = R * (N * (qkvd + qd) + tasks * T);
    double t = ceil(tasks / c->nt) * flash_head_s(c, T, d, 1), x;
    if (reuse(c)) {
        mem(c, OPND(dense(qkv, N * qkvd, RD), dense(ctx, N * qd, WR), dense(lse, tasks * T, WR)),
            &x);
        t += c->pr.reuse.attn_fwd * x / c->nt;
    } else {
        t = fmax(t, bytes / c->nt / bw(c, bytes / c->nt));
    }
    c->bill.attn += t;
    c->bill.core_s += c->nt * t;
}

/* One task per (sequence, kv head), each over its a/g query heads. */
static void p_attn_flash_bwd(struct dp_backend *be, real *dqkv, real *dsum, const real *dctx,
                             const real *qkv, const real *ctx, const real *lse, int64_t B,
                             int64_t T, int a, int g, int d)
{
    struct pricer *c = pc(be);
    double N = (double)(B * T), qd = (double)a * d, qkvd = (double)(a + 2 * g) * d;
    region(c);
    double bytes = R * (N * (2 * qkvd + 2 * qd) + 2.0 * B * a * T);
    double t = ceil((double)(B * g) / c->nt) * ((double)a / g) * flash_head_s(c, T, d, 2.5), x;
    if (reuse(c)) {
        mem(c,
            OPND(dense(qkv, N * qkvd, RD), dense(ctx, N * qd, RD), dense(dctx, N * qd, RD),
                 dense(lse, (double)(B * a) * T, RD), dense(dsum, (double)(B * a) * T, WR),
                 dense(dqkv, N * qkvd, WR)),
            &x);
        t += c->pr.reuse.attn_bwd * x / c->nt;
    } else {
        t = fmax(t, bytes / c->nt / bw(c, bytes / c->nt));
    }
    c->bill.attn += t;
    c->bill.core_s += c->nt * t;
}

/*
 * Ring attention (CP, cp.c): one call is one block of the ring; the cp calls of a layer
 * cover the local 2C rows against the causal half of the global keys, C Tg pairs per
 * (sequence, head), 1 / cp of the probe's causal head of Tg (Tg^2 / 2 pairs), so a call
 * costs the probe's head time / cp^2 (cp = Tg / 2C). Billed at the probe's rate although
 * the block kernels are scalar loops (cpu_attention_cp.c): a lower bound.
 */
static double ring_share(const struct pricer *c, int64_t C)
{
    double cp = c->seq_len > 0 ? c->seq_len / (2.0 * (double)C) : 1;
    return 1.0 / (cp * cp);
}

static void p_attn_ring_fwd(struct dp_backend *be, real *acc, real *mx, real *sm, const real *qkv,
                            int64_t ldq, const real *kv, const int qc[2], const int kc[2],
                            int64_t B, int64_t C, int a, int g, int d)
{
    struct pricer *c = pc(be);
    region(c);
    double t = ceil((double)(B * a) / c->nt) * c->pr.attn_fwd_s * ring_share(c, C);
    c->bill.attn += t;
    c->bill.core_s += c->nt * t;
}

static void p_attn_ring_done(struct dp_backend *be, real *ctx, real *mx, const real *sm, int64_t B,
                             int64_t T, int a, int d)
{
    double e = (double)(B * T) * a * d;
    ew(pc(be), e, R * 2 * e, 0);
}

static void p_attn_ring_dsum(struct dp_backend *be, real *dsum, const real *dctx, const real *ctx,
                             int64_t B, int64_t T, int a, int d)
{
    double e = (double)(B * T) * a * d;
    ew(pc(be), e, R * 2 * e, 0);
}

static void p_attn_ring_bwd(struct dp_backend *be, real *dq, real *dkv, const real *dctx,
                            const real *qkv, int64_t ldq, const real *kv, const real *lse,
                            const real *dsum, const int qc[2], const int kc[2], int64_t B,
                            int64_t C, int a, int g, int d)
{
    struct pricer *c = pc(be);
    region(c);
    double t =
        ceil((double)(B * g) / c->nt) * ((double)a / g) * c->pr.attn_bwd_s * ring_share(c, C);
    c->bill.attn += t;
    c->bill.core_s += c->nt * t;
}

static void p_embed_fwd(struct dp_backend *be, real *out, const int32_t *tok, const real *wte,
                        int64_t v0, int64_t nv, int64_t N, int64_t C)
{
    double e = (double)(N * C);
    ewo(pc(be), e, R * 2.0 * N * C, 0, 0,
        OPND(dense(tok, (double)N, RD), {wte, R * (double)nv * C, R * fmin(e, (double)nv * C), RD},
             dense(out, e, WR)));
}

static void p_embed_bwd(struct dp_backend *be, real *dwte, const int32_t *tok, const real *dout,
                        int64_t v0, int64_t nv, int64_t N, int64_t C)
{
    double e = (double)(N * C);
    ewo(pc(be), e, R * 3.0 * N * C, 0, 0,
        OPND(dense(tok, (double)N, RD), dense(dout, e, RD),
             {dwte, R * (double)nv * C, R * fmin(e, (double)nv * C), RW}));
}

static void p_pos_fwd(struct dp_backend *be, real *out, const real *wpe, int64_t n0, int64_t N,
                      int64_t T, int64_t C)
{
    double e = (double)(N * C);
    ewo(pc(be), e, R * 3.0 * N * C, 0, 0,
        OPND(dense(wpe, (double)(fmin((double)T, (double)N) * C), RD), dense(out, e, RW)));
}

static void p_pos_bwd(struct dp_backend *be, real *dwpe, const real *dout, int64_t n0, int64_t N,
                      int64_t T, int64_t C)
{
    double e = (double)(N * C);
    ewo(pc(be), e, R * 2.0 * N * C, 0, 0,
        OPND(dense(dout, e, RD), dense(dwpe, (double)(fmin((double)T, (double)N) * C), RW)));
}

/* The probe times the three cross-entropy passes together (ce_ns per logit): a third
 * each, over the logits they read (the last one also writes them). */
static void p_ce_max(struct dp_backend *be, real *rowmax, const real *logits, int64_t N, int64_t nv,
                     int64_t v0, int64_t vocab)
{
    double e = (double)(N * nv);
    ewo(pc(be), e, R * e, pc(be)->pr.ce_ns / 3, pc(be)->pr.reuse.ce,
        OPND(dense(logits, e, RD), dense(rowmax, (double)N, WR)));
}

static void p_ce_sums(struct dp_backend *be, real *sums, const real *logits, const real *gmax,
                      const int32_t *tgt, int64_t N, int64_t nv, int64_t v0, int64_t vocab)
{
    double e = (double)(N * nv);
    ewo(pc(be), e, R * e, pc(be)->pr.ce_ns / 3, pc(be)->pr.reuse.ce,
        OPND(dense(logits, e, RD), dense(sums, 2.0 * N, WR)));
}

static void p_ce_grad(struct dp_backend *be, real *logits, real *loss, const real *gmax,
                      const real *sums, const int32_t *tgt, int64_t N, int64_t nv, int64_t v0,
                      int64_t vocab, real dloss)
{
    double e = (double)(N * nv);
    ewo(pc(be), e, R * 2.0 * e, pc(be)->pr.ce_ns / 3, pc(be)->pr.reuse.ce,
        OPND(dense(logits, e, RW)));
}

/* MoE (cpu_moe.c): the router's softmax and top-K read and write N E; the row moves read
 * and write R C. Nothing is routed here: moe.c assumes balanced routing
 * (prices_only), every expert N K / E choices of each rank. */
static void p_router_topk(struct dp_backend *be, real *probs, int32_t *idx, real *w,
                          const real *bias, int64_t N, int E, int K)
{
    (void)bias; /* the sigmoid and the added bias: the same passes over N E */
    ew(pc(be), (double)(N * E * (K + 2)), R * 2.0 * N * E, 0);
}

static void p_router_bwd(struct dp_backend *be, real *dl, const real *probs, const real *w,
                         const int32_t *idx, const int32_t *rrow, const real *dw, const real *gaux,
                         bool sigmoid, int64_t N, int E, int K)
{
    (void)sigmoid;
    ew(pc(be), (double)(N * E * 3), R * 2.0 * N * E, 0);
}

static void p_rows(struct dp_backend *be, real *dst, const real *src, const int32_t *idx,
                   const real *scale, int64_t Rr, int64_t C)
{
    ew(pc(be), (double)(Rr * C), R * 2.0 * Rr * C, 0);
}

static void p_rows_dot(struct dp_backend *be, real *out, const real *a, const int32_t *idx,
                       const real *b, int64_t Rr, int64_t C)
{
    ew(pc(be), (double)(Rr * C), R * 2.0 * Rr * C, 0);
}

/* Host sums run on all threads from 64 Ki elements (cpu_optim.c), else on the caller. */
static double p_sum(struct dp_backend *be, const real *x, int64_t n)
{
    struct pricer *c = pc(be);
    if (reuse(c)) {
        /* the reduction's hot cost (its double accumulation: about 3 elements a ns here) and
         * its operand's distance, on the caller or split over the threads */
        double x0;
        mem(c, OPND(dense(x, (double)n, RD)), &x0);
        int th = n < 65536 ? 1 : c->nt;
        if (th > 1)
            region(c);
        double t = ((double)n * c->pr.reuse.sumsq_s + c->pr.reuse.sumsq * x0) / th;
        *(c->optimizer ? &c->bill.opt : &c->bill.ew) += t;
        c->bill.core_s += th * t;
    } else if (n < 65536 || c->nt <= 1) {
        serial(c, c->optimizer ? &c->bill.opt : &c->bill.ew, R * (double)n);
    } else {
        ew(c, (double)n, R * (double)n, 0);
    }
    return 0;
}

/* AdamW: p, g, m, v read, p, m, v written, in one region. */
static void p_adamw(struct dp_backend *be, real *p, const real *grad, real *m, real *v, int64_t n,
                    double lr, double beta1, double beta2, double eps, double wd, double bc1,
                    double bc2, double gscale)
{
    struct pricer *c = pc(be);
    region(c);
    double e = (double)n;
    double t = e * c->pr.adamw_ns * 1e-9 / c->nt, x;
    if (reuse(c)) {
        const struct opnd o[] = {dense(grad, e, RD), dense(p, e, RW), dense(m, e, RW),
                                 dense(v, e, RW)};
        mem(c, o, 4, &x);
        t = capped(c, t, c->pr.reuse.adamw * x / c->nt, o, 4);
    } else {
        t = fmax(t, 7 * R * e / c->nt / bw(c, 4 * R * e / c->nt));
    }
    c->bill.opt += t;
    c->bill.core_s += c->nt * t;
}

/* ------------------------------------------------------------------ communication */

enum coll { AR, RS, AG, P2P };

/* Alpha-beta over n ranks: log2(n) latency steps (Open MPI's recursive doubling for small
 * messages), the bytes with nccl-tests' bus factors: all-reduce 2(n-1)/n, reduce-scatter
 * and all-gather (n-1)/n, a point-to-point message 1. */
/* A message of `bytes` read off the calibration's measured times over the same group size
 * (nccl-tests' sizes, as coll's): between two measured sizes, the straight line between
 * them in log(bytes)-log(time) (the regimes are power laws: flat below the eager limit,
 * linear in bytes above it); below the smallest, the smallest's time (the latency floor);
 * above the largest, the largest's time scaled by bytes (its bandwidth). < 0: no table. */
static double table_s(const struct pricer *c, enum coll k, double bytes, int n)
{
    int np = c->tab_n[k];
    const double *b = c->tab_bytes[k], *t = c->tab_s[k];
    if (np < 2 || c->tab_ranks[k] != n || !(bytes > 0))
        return -1;
    if (bytes <= b[0])
        return t[0];
    if (bytes >= b[np - 1])
        return t[np - 1] * bytes / b[np - 1];
    int i = 1;
    while (b[i] < bytes)
        i++;
    double f = log(bytes / b[i - 1]) / log(b[i] / b[i - 1]);
    return t[i - 1] * pow(t[i] / t[i - 1], f);
}

static double bill_total(const struct pricer *c)
{
    const struct parts *p = &c->bill;
    return p->gemm + p->attn + p->ew + p->fork + p->comm + p->opt;
}

/*
 * Ranks in lock step: each works on its own between synchronisations, and each
 * synchronisation waits for the slowest of its group. On a shared machine the same work
 * varies from rank to rank (interrupts, timer ticks, other guests on the host's cores and
 * caches), so a group of n waits, on average, the expected largest of n such deviations,
 * the noise amplification of bulk-synchronous programs (Petrini et al., SC'03, "The Case of
 * the Missing Supercomputer Performance"; Hoefler et al., SC'10, "Characterizing the
 * Influence of System Noise on Large-Scale Applications by Simulation").
 *
 * How that wait grows with the work t since the last synchronisation is the machine's:
 * independent per-tick noise gives sqrt(t), a slowdown that lasts longer than t (another
 * guest on the host's caches, for milliseconds to seconds) gives t. `dplan calibrate`
 * measures it at segment lengths from 0.02 to about 5 ms (preflight.h
 * dp_pf_mpi_bench_lockstep), and the wait is read off those points, linear between two;
 * before the first as sqrt(t) through it, past the last as sqrt(t) through it (what was
 * not measured is assumed to decorrelate), scaled from the measured group to n ranks by
 * dp_max_normal(n) / dp_max_normal(ranks). On this VM two ranks waited 6-27% of the segment
 * from 0.02 to 6 ms (near-linear), 4-18% at 17-80 ms: the sqrt law through the points up
 * to 0.4 ms alone priced tiny-gpt's DP 2 step, one 5 ms span, 0.2 ms of waiting where the
 * step took 1.0 ms more than one rank's (CI, 2026-12: the loop's DP 2 layout 0.77 of its
 * measured step). A profile without points: dp_max_normal(n) jitter sqrt(t).
 */
void dp__lockstep_table(struct pricer *c, int ranks, int n, const double *seg_s,
                        const double *wait_s)
{
    c->ls_n = 0;
    c->ls_ranks = ranks >= 2 ? ranks : 2;
    for (int i = 0; i < n && i < DP_EXEC_LOCKSTEP_POINTS; i++) {
        if (!(seg_s[i] > 0) || !(wait_s[i] >= 0))
            continue;
        int k = c->ls_n++;
        while (k > 0 && c->ls_seg[k - 1] > seg_s[i]) {
            c->ls_seg[k] = c->ls_seg[k - 1];
            c->ls_wait[k] = c->ls_wait[k - 1];
            k--;
        }
        c->ls_seg[k] = seg_s[i];
        c->ls_wait[k] = wait_s[i];
    }
    for (int i = 1; i < c->ls_n; i++)
        c->ls_wait[i] = fmax(c->ls_wait[i], c->ls_wait[i - 1]);
}

static double lockstep_wait(const struct pricer *c, int n, double t)
{
    if (c->ls_n == 0)
        return c->lockstep_jitter > 0 ? dp_max_normal(n) * c->lockstep_jitter * sqrt(t) : 0;
    const double *s = c->ls_seg, *w = c->ls_wait;
    int m = c->ls_n;
    double at;
    if (t <= s[0])
        at = w[0] * sqrt(t / s[0]);
    else if (t >= s[m - 1])
        at = w[m - 1] * sqrt(t / s[m - 1]);
    else {
        int i = 1;
        while (s[i] < t)
            i++;
        at = w[i - 1] + (w[i] - w[i - 1]) * (t - s[i - 1]) / (s[i] - s[i - 1]);
    }
    return at * dp_max_normal(n) / dp_max_normal(c->ls_ranks);
}

static void sync_wait(struct pricer *c, int n)
{
    double now = bill_total(c), span = now - c->last_sync;
    if (n > 1 && span > 0)
        c->bill.comm += lockstep_wait(c, n, span);
}

static void coll_price(struct pricer *c, enum coll k, double bytes, int n);

static void coll(struct pricer *c, enum coll k, double bytes, int n)
{
    if (n <= 1 && k != P2P)
        return;
    sync_wait(c, k == P2P ? 2 : n);
    coll_price(c, k, bytes, n);
    c->last_sync = bill_total(c);
}

static void coll_price(struct pricer *c, enum coll k, double bytes, int n)
{
    double tab = table_s(c, k, bytes, k == P2P ? 2 : n);
    if (tab >= 0) {
        c->bill.comm += tab;
        return;
    }
    if (c->fit_busbw_Bps[k] > 0) {
        /* A calibration's fit, in its own model (NCCL's ring, nccl-tests doc/PERFORMANCE.md):
         * all-reduce 2(n-1) steps and factor 2(n-1)/n, reduce-scatter and all-gather n-1
         * and (n-1)/n, send/recv 1 and 1. */
        int r = k == P2P ? 2 : n;
        double st = k == P2P ? 1 : k == AR ? 2.0 * (r - 1) : r - 1.0;
        double fb = k == P2P ? 1 : k == AR ? 2.0 * (r - 1) / r : (r - 1.0) / r;
        c->bill.comm += c->fit_alpha_s[k] * st + fb * bytes / c->fit_busbw_Bps[k];
        return;
    }
    double steps = k == P2P ? 1 : ceil(log2((double)n));
    double f = k == P2P ? 1 : k == AR ? 2.0 * (n - 1) / n : (double)(n - 1) / n;
    c->bill.comm += c->a_step * steps + f * bytes / c->coll_bps;
}

static int p_allreduce(struct dp_backend *be, enum dp_group g, real *buf, int64_t n,
                       enum dp_redop op, struct dp_err *err)
{
    coll(pc(be), AR, R * (double)n, pc(be)->size[g]);
    remote(pc(be), buf, R * (double)n, pc(be)->size[g]);
    return 0;
}

/* nccl-tests count the whole buffer (size x chunk) for reduce-scatter and all-gather. */
static int p_reduce_scatter(struct dp_backend *be, enum dp_group g, real *buf, int64_t chunk,
                            struct dp_err *err)
{
    coll(pc(be), RS, R * (double)chunk * pc(be)->size[g], pc(be)->size[g]);
    remote(pc(be), buf, R * (double)chunk * pc(be)->size[g], pc(be)->size[g]);
    return 0;
}

static int p_allgather(struct dp_backend *be, enum dp_group g, real *buf, int64_t chunk,
                       struct dp_err *err)
{
    coll(pc(be), AG, R * (double)chunk * pc(be)->size[g], pc(be)->size[g]);
    remote(pc(be), buf, R * (double)chunk * pc(be)->size[g], pc(be)->size[g]);
    return 0;
}

static int64_t sum_counts(const int *counts, int n)
{
    int64_t s = 0;
    for (int i = 0; i < n; i++)
        s += counts[i];
    return s;
}

static int p_reduce_scatter_v(struct dp_backend *be, enum dp_group g, real *buf, const int *counts,
                              struct dp_err *err)
{
    int n = pc(be)->size[g];
    coll(pc(be), RS, R * (double)sum_counts(counts, n), n);
    remote(pc(be), buf, R * (double)sum_counts(counts, n), n);
    return 0;
}

static int p_allgather_v(struct dp_backend *be, enum dp_group g, real *buf, const int *counts,
                         struct dp_err *err)
{
    int n = pc(be)->size[g];
    coll(pc(be), AG, R * (double)sum_counts(counts, n), n);
    remote(pc(be), buf, R * (double)sum_counts(counts, n), n);
    return 0;
}

/* An all-to-all moves what this rank sends; priced as an all-gather of it (n - 1 steps). */
static int p_alltoall_v(struct dp_backend *be, enum dp_group g, const real *sbuf,
                        const int *scounts, real *rbuf, const int *rcounts, struct dp_err *err)
{
    int n = pc(be)->size[g];
    coll(pc(be), AG, R * (double)sum_counts(scounts, n > 0 ? n : 1), n);
    remote(pc(be), rbuf, R * (double)sum_counts(rcounts, n > 0 ? n : 1), n);
    return 0;
}

/* Priced as the blocking gather: the CPU backend's MPI progresses it only inside MPI
 * calls, so no overlap with compute is assumed. */
static int p_allgather_v_start(struct dp_backend *be, enum dp_group g, real *buf, const int *counts,
                               struct dp_err *err)
{
    return p_allgather_v(be, g, buf, counts, err);
}

static int p_allgather_v_wait(struct dp_backend *be, struct dp_err *err)
{
    return 0;
}

/*
 * Gradient buckets (allreduce_start): priced whole, as blocking collectives, and billed at
 * their wait, after the backward. Open MPI's non-blocking collectives (coll/libnbc) have
 * no progress thread and advance only inside MPI calls, and the backward between a
 * bucket's start and its wait makes none but the pipeline's messages:
 * bench/executor/mpi_progress.c measured (2 ranks, this machine) the wait after 50 ms of
 * compute at 0.6 / 17.7 / 33.6 ms against a blocking all-reduce's 0.4 / 6.2 / 43.4 ms for
 * 1 / 4 / 16 MiB, so nothing of it is hidden; an MPI_Test every 1 ms did hide it but added
 * 36-179 ms to the 50 ms on the oversubscribed cores (Open MPI yields the core in each
 * call there). What buckets change is their count: each is its own collective with its
 * own latency steps, which this pricing of each bucket holds. Billing at the wait keeps
 * them out of the micro-batches' time, which the pipeline's bubble scales (predict.c).
 */
static int pend(struct pricer *c, double before, int *req)
{
    *req = -1;
    for (int i = 0; i < DP_MAX_REQS; i++)
        if (!c->pend_used[i]) {
            c->pend_used[i] = true;
            c->pend_s[i] = c->bill.comm - before;
            c->bill.comm = before;
            c->last_sync = fmin(c->last_sync, bill_total(c));
            *req = i;
            return 0;
        }
    return 0; /* all in flight: billed now */
}

static int p_allreduce_start(struct dp_backend *be, enum dp_group g, real *buf, int64_t n,
                             enum dp_redop op, int *req, struct dp_err *err)
{
    double before = pc(be)->bill.comm;
    p_allreduce(be, g, buf, n, op, err);
    return pend(pc(be), before, req);
}

static int p_reduce_scatter_v_start(struct dp_backend *be, enum dp_group g, real *buf,
                                    const int *counts, int *req, struct dp_err *err)
{
    double before = pc(be)->bill.comm;
    p_reduce_scatter_v(be, g, buf, counts, err);
    return pend(pc(be), before, req);
}

static int p_req_wait(struct dp_backend *be, int req, struct dp_err *err)
{
    struct pricer *c = pc(be);
    if (req >= 0 && req < DP_MAX_REQS && c->pend_used[req]) {
        c->bill.comm += c->pend_s[req];
        c->pend_used[req] = false;
    }
    return 0;
}

static int p_allreduce_host(struct dp_backend *be, enum dp_group g, double *buf, int n,
                            enum dp_redop op, struct dp_err *err)
{
    coll(pc(be), AR, 8.0 * n, pc(be)->size[g]);
    return 0;
}

static int p_gather_host(struct dp_backend *be, enum dp_group g, const double *in, double *out,
                         int n, struct dp_err *err)
{
    return 0;
}

/* MPI_Sendrecv is full duplex: a send and a receive together cost the larger message. */
static int p_sendrecv(struct dp_backend *be, enum dp_group g, int to, const real *sbuf, int64_t sn,
                      int stag, int from, real *rbuf, int64_t rn, int rtag, struct dp_err *err)
{
    coll(pc(be), P2P, R * (double)(sn > rn ? sn : rn), 2);
    remote(pc(be), rbuf, R * (double)rn, 2);
    return 0;
}

/* The batch's sends and receives overlap (full duplex): it costs its largest message. */
static int p_p2p(struct dp_backend *be, enum dp_group g, const struct dp_p2p *ops, int n,
                 struct dp_err *err)
{
    int64_t most = 0;
    for (int i = 0; i < n; i++)
        most = ops[i].n > most ? ops[i].n : most;
    if (n)
        coll(pc(be), P2P, R * (double)most, 2);
    for (int i = 0; i < n; i++)
        if (!ops[i].send)
            remote(pc(be), ops[i].buf, R * (double)ops[i].n, 2);
    return 0;
}

static int p_barrier(struct dp_backend *be, enum dp_group g, struct dp_err *err)
{
    return 0;
}

static int p_group_size(struct dp_backend *be, enum dp_group g)
{
    return pc(be)->size[g];
}

static int p_group_rank(struct dp_backend *be, enum dp_group g)
{
    return pc(be)->rank[g];
}

static double p_wtime(struct dp_backend *be)
{
    return 0;
}

static void p_destroy(struct dp_backend *be) {}

const struct dp_backend_ops dp__pricing_ops = {
    .name = "pricing",
    .destroy = p_destroy,
    .alloc = p_alloc,
    .free = p_free,
    .upload = p_none,
    .download = p_none,
    .zero = p_zero,
    .copy = p_copy,
    .gemm = p_gemm,
    .gemm_fp8 = p_gemm_fp8,
    .init_fill = p_init_fill,
    .norm_fwd = p_norm_fwd,
    .norm_bwd = p_norm_bwd,
    .bias_fill = p_bias_fill,
    .bias_grad = p_bias_grad,
    .residual = p_residual,
    .add_inplace = p_add_inplace,
    .act_fwd = p_act_fwd,
    .act_bwd = p_act_bwd,
    .rope = p_rope,
    .qk_norm_fwd = p_qk_norm_fwd,
    .qk_norm_bwd = p_qk_norm_bwd,
    .attn_fwd = p_attn_fwd,
    .attn_probs = p_attn_probs,
    .attn_bwd = p_attn_bwd,
    .attn_flash_fwd = p_attn_flash_fwd,
    .attn_flash_bwd = p_attn_flash_bwd,
    .attn_ring_fwd = p_attn_ring_fwd,
    .attn_ring_done = p_attn_ring_done,
    .attn_ring_dsum = p_attn_ring_dsum,
    .attn_ring_bwd = p_attn_ring_bwd,
    .embed_fwd = p_embed_fwd,
    .embed_bwd = p_embed_bwd,
    .pos_fwd = p_pos_fwd,
    .pos_bwd = p_pos_bwd,
    .ce_max = p_ce_max,
    .ce_sums = p_ce_sums,
    .ce_grad = p_ce_grad,
    .sum = p_sum,
    .sumsq = p_sum,
    .adamw = p_adamw,
    .router_topk = p_router_topk,
    .router_bwd = p_router_bwd,
    .rows_gather = p_rows,
    .rows_scatter_add = p_rows,
    .rows_dot = p_rows_dot,
    .alltoall_v = p_alltoall_v,
    .allreduce = p_allreduce,
    .reduce_scatter = p_reduce_scatter,
    .allgather = p_allgather,
    .reduce_scatter_v = p_reduce_scatter_v,
    .allgather_v = p_allgather_v,
    .allgather_v_start = p_allgather_v_start,
    .allgather_v_wait = p_allgather_v_wait,
    .allreduce_start = p_allreduce_start,
    .reduce_scatter_v_start = p_reduce_scatter_v_start,
    .req_wait = p_req_wait,
    .allreduce_host = p_allreduce_host,
    .gather_host = p_gather_host,
    .sendrecv = p_sendrecv,
    .p2p = p_p2p,
    .barrier = p_barrier,
    .group_size = p_group_size,
    .group_rank = p_group_rank,
    .wtime = p_wtime,
};
