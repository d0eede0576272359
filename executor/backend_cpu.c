/*
 * The CPU backend: MPI (OpenMPI, MPI_THREAD_FUNNELED) for the process groups,
 * collectives and pipeline messages; OpenBLAS through CBLAS for matrix
 * products and OpenMP for everything element-wise (kernels.c). Memory is
 * plain 64-byte aligned host memory.
 *
 * Threads: one OpenMP pool per rank. OpenBLAS is set to one thread and GEMMs
 * are split by rows over the OpenMP threads, so the two libraries never run
 * pools of their own side by side (on 2 cores their spinning threads would
 * steal each other's cores).
 *
 * It does not account memory (mem.c does), print or exit; MPI errors come
 * back as a dp_err naming the call, rank and host (MPI_ERRORS_RETURN).
 */
#include "cpu.h"
#include "internal.h"

#include <cblas.h>
#include <limits.h>
#include <mpi.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <unistd.h>

#ifdef DP_REAL_DOUBLE
#define MPI_REAL_T MPI_DOUBLE
#define BLAS_GEMM  cblas_dgemm
#else
#define MPI_REAL_T MPI_FLOAT
#define BLAS_GEMM  cblas_sgemm
#endif

struct cpu_backend {
    struct dp_backend base;
    MPI_Comm comm[DP_NGROUPS];
    int size[DP_NGROUPS], rank[DP_NGROUPS];
    char host[64];
};

static const char *const group_names[DP_NGROUPS] = {"world", "tp", "dp", "pp", "emb", "node"};
static bool mpi_started_here;

static struct cpu_backend *cpu(struct dp_backend *be)
{
    return (struct cpu_backend *)be;
}

static int mpi_fail(struct cpu_backend *cb, struct dp_err *err, int rc, const char *call,
                    enum dp_group g)
{
    char msg[MPI_MAX_ERROR_STRING] = "";
    int len = 0;
    MPI_Error_string(rc, msg, &len);
    return dp_err_set(err, DP_ERUNTIME, "rank %d (%s): %s over the %s group failed: %s",
                      cb->base.rank, cb->host, call, group_names[g], msg);
}

#define MPI_TRY(cb, err, g, call)                                                                  \
    do {                                                                                           \
        int rc_ = (call);                                                                          \
        if (rc_ != MPI_SUCCESS)                                                                    \
            return mpi_fail(cb, err, rc_, #call, g);                                               \
    } while (0)

static int mpi_up(struct dp_err *err)
{
    int inited = 0, fin = 0;
    MPI_Initialized(&inited);
    MPI_Finalized(&fin);
    if (fin)
        return dp_err_set(err, DP_ERUNTIME, "MPI was already finalised in this process");
    if (!inited) {
        int provided = 0;
        if (MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS)
            return dp_err_set(err, DP_ERUNTIME, "MPI_Init_thread failed");
        mpi_started_here = true;
    }
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    return 0;
}

int dp_backend_cpu_world(int *rank, int *world, struct dp_err *err)
{
    int rc = mpi_up(err);
    if (rc)
        return rc;
    MPI_Comm_rank(MPI_COMM_WORLD, rank);
    MPI_Comm_size(MPI_COMM_WORLD, world);
    return 0;
}

void dp_backend_cpu_finalize(void)
{
    int inited = 0, fin = 0;
    MPI_Initialized(&inited);
    MPI_Finalized(&fin);
    if (inited && !fin && mpi_started_here)
        MPI_Finalize();
}

void dp_backend_cpu_abort(int code)
{
    int inited = 0, fin = 0;
    MPI_Initialized(&inited);
    MPI_Finalized(&fin);
    if (inited && !fin)
        MPI_Abort(MPI_COMM_WORLD, code);
}

/* ------------------------------------------------------------------ memory */

/* Buffers of at least this size are aligned to and rounded up to 2 MiB and asked to be
 * backed by transparent huge pages: GEMM packing walks the rows of activations and
 * weights, and with 4 KiB pages (a 1024-float row per page) nearly every row costs a TLB
 * miss. Smaller buffers are 64-byte aligned. */
#define HUGE_BYTES ((size_t)2 << 20)

static size_t cpu_footprint(struct dp_backend *be, size_t bytes)
{
    size_t n = (bytes + 63) / 64 * 64;
    if (n == 0)
        n = 64;
    if (n >= HUGE_BYTES)
        n = (n + HUGE_BYTES - 1) / HUGE_BYTES * HUGE_BYTES;
    return n;
}

static void *cpu_alloc(struct dp_backend *be, size_t bytes)
{
    size_t n = cpu_footprint(be, bytes);
    void *p;
    if (n >= HUGE_BYTES) {
        p = aligned_alloc(HUGE_BYTES, n);
#ifdef MADV_HUGEPAGE
        if (p)
            madvise(p, n, MADV_HUGEPAGE); /* a hint: failure only costs speed */
#endif
    } else {
        p = aligned_alloc(64, n);
    }
    if (p)
        memset(p, 0, n);
    return p;
}

static void cpu_free(struct dp_backend *be, void *p)
{
    free(p);
}

static void cpu_copy(struct dp_backend *be, void *dst, const void *src, size_t bytes)
{
    if (bytes)
        memmove(dst, src, bytes);
}

static void cpu_zero(struct dp_backend *be, void *dst, size_t bytes)
{
    if (bytes)
        memset(dst, 0, bytes);
}

/* ------------------------------------------------------------------ kernels (kernels.c) */

static void k_gemm(struct dp_backend *be, bool ta, bool tb, int m, int n, int k, real alpha,
                   const real *a, int lda, const real *b, int ldb, real beta, real *c, int ldc)
{
    dp__cpu_gemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}
static void k_init_fill(struct dp_backend *be, real *dst, int64_t rows, int64_t cols, int64_t gcols,
                        int64_t r0, int64_t c0, uint64_t seed, uint64_t key, double std,
                        double value)
{
    dp__cpu_init_fill(dst, rows, cols, gcols, r0, c0, seed, key, std, value);
}
static void k_norm_fwd(struct dp_backend *be, enum dp_norm_kind kind, real *out, real *stats,
                       const real *inp, const real *w, const real *b, int64_t N, int64_t C)
{
    dp__cpu_norm_fwd(kind, out, stats, inp, w, b, N, C);
}
static void k_norm_bwd(struct dp_backend *be, enum dp_norm_kind kind, real *dinp, real *dw,
                       real *db, const real *dout, const real *inp, const real *w,
                       const real *stats, int64_t N, int64_t C)
{
    dp__cpu_norm_bwd(kind, dinp, dw, db, dout, inp, w, stats, N, C);
}
static void k_bias_fill(struct dp_backend *be, real *out, const real *bias, int64_t N, int64_t C)
{
    dp__cpu_bias_fill(out, bias, N, C);
}
static void k_bias_grad(struct dp_backend *be, real *db, const real *dout, int64_t N, int64_t C)
{
    dp__cpu_bias_grad(db, dout, N, C);
}
static void k_residual(struct dp_backend *be, real *out, const real *a, const real *b,
                       const real *bias, int64_t N, int64_t C)
{
    dp__cpu_residual(out, a, b, bias, N, C);
}
static void k_add_inplace(struct dp_backend *be, real *y, const real *x, int64_t n)
{
    dp__cpu_add_inplace(y, x, n);
}
static void k_act_fwd(struct dp_backend *be, enum dp_ffn_kind kind, real *out, const real *inp,
                      int64_t N, int64_t F)
{
    dp__cpu_act_fwd(kind, out, inp, N, F);
}
static void k_act_bwd(struct dp_backend *be, enum dp_ffn_kind kind, real *dinp, real *dbias,
                      const real *dout, const real *inp, int64_t N, int64_t F)
{
    dp__cpu_act_bwd(kind, dinp, dbias, dout, inp, N, F);
}
static void k_rope(struct dp_backend *be, real *x, int64_t ld, int64_t N, int64_t T, int nq, int nk,
                   int d, const real *cs, bool inverse)
{
    dp__cpu_rope(x, ld, N, T, nq, nk, d, cs, inverse);
}
static void k_attn_fwd(struct dp_backend *be, real *ctx, real *probs, const real *qkv, int64_t B,
                       int64_t T, int a, int g, int d)
{
    dp__cpu_attn_fwd(ctx, probs, qkv, B, T, a, g, d);
}
static void k_attn_probs(struct dp_backend *be, real *probs, const real *qkv, int64_t B, int64_t T,
                         int a, int g, int d)
{
    dp__cpu_attn_probs(probs, qkv, B, T, a, g, d);
}
static void k_attn_bwd(struct dp_backend *be, real *dqkv, real *dprobs, const real *dctx,
                       const real *qkv, const real *probs, int64_t B, int64_t T, int a, int g,
                       int d)
{
    dp__cpu_attn_bwd(dqkv, dprobs, dctx, qkv, probs, B, T, a, g, d);
}
static void k_embed_fwd(struct dp_backend *be, real *out, const int32_t *tok, const real *wte,
                        int64_t v0, int64_t nv, int64_t N, int64_t C)
{
    dp__cpu_embed_fwd(out, tok, wte, v0, nv, N, C);
}
static void k_embed_bwd(struct dp_backend *be, real *dwte, const int32_t *tok, const real *dout,
                        int64_t v0, int64_t nv, int64_t N, int64_t C)
{
    dp__cpu_embed_bwd(dwte, tok, dout, v0, nv, N, C);
}
static void k_pos_fwd(struct dp_backend *be, real *out, const real *wpe, int64_t n0, int64_t N,
                      int64_t T, int64_t C)
{
    dp__cpu_pos_fwd(out, wpe, n0, N, T, C);
}
static void k_pos_bwd(struct dp_backend *be, real *dwpe, const real *dout, int64_t n0, int64_t N,
                      int64_t T, int64_t C)
{
    dp__cpu_pos_bwd(dwpe, dout, n0, N, T, C);
}
static void k_ce_max(struct dp_backend *be, real *rowmax, const real *logits, int64_t N, int64_t nv,
                     int64_t v0, int64_t vocab)
{
    dp__cpu_ce_max(rowmax, logits, N, nv, v0, vocab);
}
static void k_ce_sums(struct dp_backend *be, real *sums, const real *logits, const real *gmax,
                      const int32_t *tgt, int64_t N, int64_t nv, int64_t v0, int64_t vocab)
{
    dp__cpu_ce_sums(sums, logits, gmax, tgt, N, nv, v0, vocab);
}
static void k_ce_grad(struct dp_backend *be, real *logits, real *loss, const real *gmax,
                      const real *sums, const int32_t *tgt, int64_t N, int64_t nv, int64_t v0,
                      int64_t vocab, real dloss)
{
    dp__cpu_ce_grad(logits, loss, gmax, sums, tgt, N, nv, v0, vocab, dloss);
}
static double k_sum(struct dp_backend *be, const real *x, int64_t n)
{
    return dp__cpu_sum(x, n);
}
static double k_sumsq(struct dp_backend *be, const real *x, int64_t n)
{
    return dp__cpu_sumsq(x, n);
}
static void k_adamw(struct dp_backend *be, real *p, const real *grad, real *m, real *v, int64_t n,
                    double lr, double beta1, double beta2, double eps, double wd, double bc1,
                    double bc2, double gscale)
{
    dp__cpu_adamw(p, grad, m, v, n, lr, beta1, beta2, eps, wd, bc1, bc2, gscale);
}

/* ------------------------------------------------------------------ communication */

/*
 * All-reduces go to MPI in pieces of at most 4 MiB. Open MPI's algorithms allocate
 * scratch of up to the message (coll/base: recursive doubling and Rabenseifner a copy
 * of it, the ring one segment of count/size, two when size > 2) from the heap, where it
 * stays resident: a gradient all-reduce in one call would hold half to all of the
 * gradients' size again, outside every pool. In pieces the scratch stays under 4 MiB
 * (executor/README.md, "Not counted"), for one more MPI latency per 4 MiB.
 */
#define ALLREDUCE_CHUNK ((int64_t)(4 << 20) / (int64_t)sizeof(real))

static int c_allreduce(struct dp_backend *be, enum dp_group g, real *buf, int64_t n,
                       enum dp_redop op, struct dp_err *err)
{
    struct cpu_backend *cb = cpu(be);
    if (cb->size[g] <= 1 || n <= 0)
        return 0;
    MPI_Op mop = op == DP_OP_MAX ? MPI_MAX : MPI_SUM;
    for (int64_t off = 0; off < n; off += ALLREDUCE_CHUNK) {
        int cnt = (int)(n - off < ALLREDUCE_CHUNK ? n - off : ALLREDUCE_CHUNK);
        MPI_TRY(cb, err, g,
                MPI_Allreduce(MPI_IN_PLACE, buf + off, cnt, MPI_REAL_T, mop, cb->comm[g]));
    }
    dp__beat(NULL);
    return 0;
}

static int c_reduce_scatter(struct dp_backend *be, enum dp_group g, real *buf, int64_t chunk,
                            struct dp_err *err)
{
    struct cpu_backend *cb = cpu(be);
    if (cb->size[g] <= 1 || chunk <= 0)
        return 0;
    if (chunk > INT_MAX)
        return dp_err_set(err, DP_ERUNTIME, "reduce-scatter chunk of %lld elements is too large",
                          (long long)chunk);
    MPI_TRY(
        cb, err, g,
        MPI_Reduce_scatter_block(MPI_IN_PLACE, buf, (int)chunk, MPI_REAL_T, MPI_SUM, cb->comm[g]));
    dp__beat(NULL);
    return 0;
}

static int c_allgather(struct dp_backend *be, enum dp_group g, real *buf, int64_t chunk,
                       struct dp_err *err)
{
    struct cpu_backend *cb = cpu(be);
    if (cb->size[g] <= 1 || chunk <= 0)
        return 0;
    if (chunk > INT_MAX)
        return dp_err_set(err, DP_ERUNTIME, "all-gather chunk of %lld elements is too large",
                          (long long)chunk);
    MPI_TRY(cb, err, g,
            MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buf, (int)chunk, MPI_REAL_T,
                          cb->comm[g]));
    dp__beat(NULL);
    return 0;
}

static int c_allreduce_host(struct dp_backend *be, enum dp_group g, double *buf, int n,
                            enum dp_redop op, struct dp_err *err)
{
    struct cpu_backend *cb = cpu(be);
    if (cb->size[g] <= 1 || n <= 0)
        return 0;
    MPI_Op mop = op == DP_OP_MAX ? MPI_MAX : MPI_SUM;
    MPI_TRY(cb, err, g, MPI_Allreduce(MPI_IN_PLACE, buf, n, MPI_DOUBLE, mop, cb->comm[g]));
    dp__beat(NULL);
    return 0;
}

static int c_gather_host(struct dp_backend *be, enum dp_group g, const double *in, double *out,
                         int n, struct dp_err *err)
{
    struct cpu_backend *cb = cpu(be);
    if (cb->size[g] <= 1) {
        memcpy(out, in, (size_t)n * sizeof *in);
        return 0;
    }
    MPI_TRY(cb, err, g, MPI_Gather(in, n, MPI_DOUBLE, out, n, MPI_DOUBLE, 0, cb->comm[g]));
    dp__beat(NULL);
    return 0;
}

static int c_sendrecv(struct dp_backend *be, enum dp_group g, int to, const real *sbuf, int64_t sn,
                      int stag, int from, real *rbuf, int64_t rn, int rtag, struct dp_err *err)
{
    struct cpu_backend *cb = cpu(be);
    if (sn > INT_MAX || rn > INT_MAX)
        return dp_err_set(err, DP_ERUNTIME, "pipeline message of %lld elements is too large",
                          (long long)(sn > rn ? sn : rn));
    MPI_Comm c = cb->comm[g];
    if (to >= 0 && from >= 0)
        MPI_TRY(cb, err, g,
                MPI_Sendrecv(sbuf, (int)sn, MPI_REAL_T, to, stag, rbuf, (int)rn, MPI_REAL_T, from,
                             rtag, c, MPI_STATUS_IGNORE));
    else if (to >= 0)
        MPI_TRY(cb, err, g, MPI_Send(sbuf, (int)sn, MPI_REAL_T, to, stag, c));
    else if (from >= 0)
        MPI_TRY(cb, err, g, MPI_Recv(rbuf, (int)rn, MPI_REAL_T, from, rtag, c, MPI_STATUS_IGNORE));
    dp__beat(NULL);
    return 0;
}

static int c_barrier(struct dp_backend *be, enum dp_group g, struct dp_err *err)
{
    struct cpu_backend *cb = cpu(be);
    if (cb->size[g] <= 1)
        return 0;
    MPI_TRY(cb, err, g, MPI_Barrier(cb->comm[g]));
    return 0;
}

static int c_group_size(struct dp_backend *be, enum dp_group g)
{
    return cpu(be)->size[g];
}

static int c_group_rank(struct dp_backend *be, enum dp_group g)
{
    return cpu(be)->rank[g];
}

static double c_wtime(struct dp_backend *be)
{
    return MPI_Wtime();
}

static void cpu_destroy(struct dp_backend *be)
{
    if (!be)
        return;
    struct cpu_backend *cb = cpu(be);
    int fin = 0;
    MPI_Finalized(&fin);
    for (int g = 1; g < DP_NGROUPS; g++)
        if (!fin && cb->comm[g] != MPI_COMM_NULL)
            MPI_Comm_free(&cb->comm[g]);
    free(cb);
}

static const struct dp_backend_ops cpu_ops = {
    .name = "cpu",
    .destroy = cpu_destroy,
    .alloc = cpu_alloc,
    .free = cpu_free,
    .footprint = cpu_footprint,
    .upload = cpu_copy,
    .download = cpu_copy,
    .zero = cpu_zero,
    .copy = cpu_copy,
    .gemm = k_gemm,
    .init_fill = k_init_fill,
    .norm_fwd = k_norm_fwd,
    .norm_bwd = k_norm_bwd,
    .bias_fill = k_bias_fill,
    .bias_grad = k_bias_grad,
    .residual = k_residual,
    .add_inplace = k_add_inplace,
    .act_fwd = k_act_fwd,
    .act_bwd = k_act_bwd,
    .rope = k_rope,
    .attn_fwd = k_attn_fwd,
    .attn_probs = k_attn_probs,
    .attn_bwd = k_attn_bwd,
    .embed_fwd = k_embed_fwd,
    .embed_bwd = k_embed_bwd,
    .pos_fwd = k_pos_fwd,
    .pos_bwd = k_pos_bwd,
    .ce_max = k_ce_max,
    .ce_sums = k_ce_sums,
    .ce_grad = k_ce_grad,
    .sum = k_sum,
    .sumsq = k_sumsq,
    .adamw = k_adamw,
    .allreduce = c_allreduce,
    .reduce_scatter = c_reduce_scatter,
    .allgather = c_allgather,
    .allreduce_host = c_allreduce_host,
    .gather_host = c_gather_host,
    .sendrecv = c_sendrecv,
    .barrier = c_barrier,
    .group_size = c_group_size,
    .group_rank = c_group_rank,
    .wtime = c_wtime,
};

/* ------------------------------------------------------------------ setup */

static int split(struct cpu_backend *cb, enum dp_group g, int color, int key, struct dp_err *err)
{
    MPI_TRY(cb, err, g, MPI_Comm_split(MPI_COMM_WORLD, color, key, &cb->comm[g]));
    if (cb->comm[g] == MPI_COMM_NULL) {
        cb->size[g] = 0;
        cb->rank[g] = -1;
        return 0;
    }
    MPI_Comm_set_errhandler(cb->comm[g], MPI_ERRORS_RETURN);
    MPI_Comm_size(cb->comm[g], &cb->size[g]);
    MPI_Comm_rank(cb->comm[g], &cb->rank[g]);
    return 0;
}

/* Cores this process may run on. */
static int cores_online(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

struct dp_backend *dp_backend_cpu_new(int tp, int dp, int pp, int threads, struct dp_err *err)
{
    if (mpi_up(err))
        return NULL;
    struct cpu_backend *cb = calloc(1, sizeof *cb);
    if (!cb) {
        dp_err_set(err, DP_ENOMEM, "out of memory");
        return NULL;
    }
    cb->base.ops = &cpu_ops;
    for (int g = 0; g < DP_NGROUPS; g++)
        cb->comm[g] = MPI_COMM_NULL;
    gethostname(cb->host, sizeof cb->host - 1);
    MPI_Comm_rank(MPI_COMM_WORLD, &cb->base.rank);
    MPI_Comm_size(MPI_COMM_WORLD, &cb->base.world);
    cb->comm[DP_GROUP_WORLD] = MPI_COMM_WORLD;
    cb->size[DP_GROUP_WORLD] = cb->base.world;
    cb->rank[DP_GROUP_WORLD] = cb->base.rank;
    int want = tp * dp * pp;
    if (cb->base.world != want) {
        dp_err_set(err, DP_EINFEASIBLE,
                   "the plan needs tp*pp*dp = %d*%d*%d = %d ranks but MPI started %d (launch "
                   "with `mpirun -np %d` or let `dplan run` launch itself)",
                   tp, pp, dp, want, cb->base.world, want);
        free(cb);
        return NULL;
    }
    struct dp_coords c;
    dp_rank_coords(cb->base.rank, tp, dp, pp, &c);
    int emb = (pp > 1 && (c.pp_rank == 0 || c.pp_rank == pp - 1)) ? c.tp_rank + tp * c.dp_rank
                                                                  : MPI_UNDEFINED;
    if (split(cb, DP_GROUP_TP, c.dp_rank + dp * c.pp_rank, c.tp_rank, err) ||
        split(cb, DP_GROUP_DP, c.tp_rank + tp * c.pp_rank, c.dp_rank, err) ||
        split(cb, DP_GROUP_PP, c.tp_rank + tp * c.dp_rank, c.pp_rank, err) ||
        split(cb, DP_GROUP_EMB, emb, c.pp_rank, err)) {
        cpu_destroy(&cb->base);
        return NULL;
    }
    /* The ranks sharing this node's memory (MPI-3 MPI_COMM_TYPE_SHARED). */
    int rc = MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, cb->base.rank, MPI_INFO_NULL,
                                 &cb->comm[DP_GROUP_NODE]);
    if (rc != MPI_SUCCESS) {
        mpi_fail(cb, err, rc, "MPI_Comm_split_type", DP_GROUP_NODE);
        cpu_destroy(&cb->base);
        return NULL;
    }
    MPI_Comm_set_errhandler(cb->comm[DP_GROUP_NODE], MPI_ERRORS_RETURN);
    MPI_Comm_size(cb->comm[DP_GROUP_NODE], &cb->size[DP_GROUP_NODE]);
    MPI_Comm_rank(cb->comm[DP_GROUP_NODE], &cb->rank[DP_GROUP_NODE]);

    /* Threads: explicit, else OMP_NUM_THREADS, else the cores shared by the ranks of
     * this node (MPI_COMM_TYPE_SHARED). */
    if (threads <= 0) {
        if (getenv("OMP_NUM_THREADS"))
            threads = omp_get_max_threads();
        else
            threads = cores_online() / cb->size[DP_GROUP_NODE];
    }
    if (threads < 1)
        threads = 1;
    cb->base.threads = threads;
    omp_set_num_threads(threads);
    openblas_set_num_threads(1);
    /* Start the OpenMP threads and give each its OpenBLAS buffer (allocated at a thread's
     * first GEMM) now: run.c takes the resident baseline after this, so their stacks and
     * buffers' first pages are part of what the process holds before the executor's own
     * buffers. */
#pragma omp parallel
    {
        real wa[16] = {0}, wc[16];
        BLAS_GEMM(CblasRowMajor, CblasNoTrans, CblasNoTrans, 4, 4, 4, 1, wa, 4, wa, 4, 0, wc, 4);
    }
    return &cb->base;
}

/* ------------------------------------------------------------------ BLAS kernels */

const char *dp_exec_blas_hint(void)
{
    if (getenv("OPENBLAS_CORETYPE"))
        return NULL;
    const char *core = openblas_get_corename();
    static const char *const weak[] = {"Prescott",  "Core2",  "Penryn",      "Dunnington",
                                       "Nehalem",   "Atom",   "Sandybridge", "Katmai",
                                       "Northwood", "Banias", "Coppermine"};
    bool is_weak = false;
    for (size_t i = 0; core && i < sizeof weak / sizeof weak[0]; i++)
        is_weak |= strcasecmp(core, weak[i]) == 0;
    if (!is_weak)
        return NULL;
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
        __builtin_cpu_supports("avx512cd"))
        return "SkylakeX";
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        return "Haswell";
    return NULL;
}
