/*
 * The CPU backend: MPI (OpenMPI, MPI_THREAD_FUNNELED) for the process groups,
 * collectives and pipeline messages; OpenBLAS through CBLAS for matrix
 * products and OpenMP for everything element-wise (the kernel families in
 * cpu_*.c). Memory is plain 64-byte aligned host memory.
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
#include "groups.h"
#include "mpi_up.h"

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
    /* The one non-blocking all-gather in flight (allgather_v_start). */
    MPI_Request ag_req;
    enum dp_group ag_group;
    bool ag_pending;
    int *ag_counts, *ag_displs; /* [size of the group], kept until it completes */
    /* Gradient buckets in flight (allreduce_start): MPI requests of one id (an
     * all-reduce goes in ALLREDUCE_CHUNK pieces), and the counts MPI reads until the
     * request completes. Open MPI advances them only inside MPI calls (no progress thread:
     * bench/executor/mpi_progress.c), i.e. in the pipeline's messages and the waits. */
    struct cpu_req {
        MPI_Request *r;
        int *pc; /* [n] each piece's elements */
        int n, cap;
        int done; /* pieces [0, done) completed early (drain) */
        int *counts;
        enum dp_group g;
        bool used;
        uint64_t seq; /* start order */
    } req[DP_MAX_REQS];
    int64_t inflight; /* elements of the pieces in flight */
    uint64_t seq;
};

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
                      cb->base.rank, cb->host, call, dp__group_name(g), msg);
}

#define MPI_TRY(cb, err, g, call)                                                                  \
    do {                                                                                           \
        int rc_ = (call);                                                                          \
        if (rc_ != MPI_SUCCESS)                                                                    \
            return mpi_fail(cb, err, rc_, #call, g);                                               \
    } while (0)

static void cpu_finalize(void)
{
    int inited = 0, fin = 0;
    MPI_Initialized(&inited);
    MPI_Finalized(&fin);
    if (inited && !fin && mpi_started_here)
        MPI_Finalize();
}

static void cpu_abort(int code)
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

static int c_reduce_scatter_v(struct dp_backend *be, enum dp_group g, real *buf, const int *counts,
                              struct dp_err *err)
{
    struct cpu_backend *cb = cpu(be);
    if (cb->size[g] <= 1)
        return 0;
    MPI_TRY(cb, err, g,
            MPI_Reduce_scatter(MPI_IN_PLACE, buf, counts, MPI_REAL_T, MPI_SUM, cb->comm[g]));
    dp__beat(NULL);
    return 0;
}

static int c_allgather_v(struct dp_backend *be, enum dp_group g, real *buf, const int *counts,
                         struct dp_err *err)
{
    struct cpu_backend *cb = cpu(be);
    int n = cb->size[g];
    if (n <= 1)
        return 0;
    int *displs = malloc((size_t)n * sizeof *displs);
    if (!displs)
        return dp_err_set(err, DP_ENOMEM, "out of memory");
    for (int i = 0, at = 0; i < n; at += counts[i++])
        displs[i] = at;
    int rc = MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buf, counts, displs, MPI_REAL_T,
                            cb->comm[g]);
    free(displs);
    MPI_TRY(cb, err, g, rc);
    dp__beat(NULL);
    return 0;
}

static int c_alltoall_v(struct dp_backend *be, enum dp_group g, const real *sbuf,
                        const int *scounts, real *rbuf, const int *rcounts, struct dp_err *err)
{
    struct cpu_backend *cb = cpu(be);
    int n = cb->size[g];
    if (n <= 1) {
        if (scounts[0] && rbuf != sbuf)
            memcpy(rbuf, sbuf, (size_t)scounts[0] * sizeof(real));
        return 0;
    }
    int *sd = malloc(2 * (size_t)n * sizeof *sd);
    if (!sd)
        return dp_err_set(err, DP_ENOMEM, "out of memory");
    int *rd = sd + n;
    for (int i = 0, a = 0, b = 0; i < n; a += scounts[i], b += rcounts[i], i++) {
        sd[i] = a;
        rd[i] = b;
    }
    int rc =
        MPI_Alltoallv(sbuf, scounts, sd, MPI_REAL_T, rbuf, rcounts, rd, MPI_REAL_T, cb->comm[g]);
    free(sd);
    MPI_TRY(cb, err, g, rc);
    dp__beat(NULL);
    return 0;
}

static int c_allgather_v_start(struct dp_backend *be, enum dp_group g, real *buf, const int *counts,
                               struct dp_err *err)
{
    struct cpu_backend *cb = cpu(be);
    int n = cb->size[g];
    if (n <= 1)
        return 0;
    if (cb->ag_pending)
        return dp_err_set(err, DP_ERUNTIME, "internal: a second non-blocking all-gather");
    if (!cb->ag_counts) {
        /* the largest group: the world */
        int w = cb->size[DP_GROUP_WORLD];
        cb->ag_counts = malloc((size_t)w * sizeof *cb->ag_counts);
        cb->ag_displs = malloc((size_t)w * sizeof *cb->ag_displs);
        if (!cb->ag_counts || !cb->ag_displs)
            return dp_err_set(err, DP_ENOMEM, "out of memory");
    }
    for (int i = 0, at = 0; i < n; at += counts[i++]) {
        cb->ag_counts[i] = counts[i];
        cb->ag_displs[i] = at;
    }
    MPI_TRY(cb, err, g,
            MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buf, cb->ag_counts, cb->ag_displs,
                            MPI_REAL_T, cb->comm[g], &cb->ag_req));
    cb->ag_pending = true;
    cb->ag_group = g;
    return 0;
}

static int c_allgather_v_wait(struct dp_backend *be, struct dp_err *err)
{
    struct cpu_backend *cb = cpu(be);
    if (!cb->ag_pending)
        return 0;
    cb->ag_pending = false;
    MPI_TRY(cb, err, cb->ag_group, MPI_Wait(&cb->ag_req, MPI_STATUS_IGNORE));
    dp__beat(NULL);
    return 0;
}

/* ------------------------------------------------------------------ non-blocking */

/* A free request id with room for n MPI requests (and `counts` ints when > 0). */
static int req_take(struct cpu_backend *cb, int n, int counts, struct dp_err *err)
{
    int id = 0;
    while (id < DP_MAX_REQS && cb->req[id].used)
        id++;
    if (id == DP_MAX_REQS)
        return dp_err_set(err, DP_ERUNTIME, "internal: more than %d gradient buckets in flight",
                          DP_MAX_REQS);
    struct cpu_req *q = &cb->req[id];
    if (n > q->cap) {
        MPI_Request *r = realloc(q->r, (size_t)n * sizeof *r);
        if (r)
            q->r = r;
        int *pc = r ? realloc(q->pc, (size_t)n * sizeof *pc) : NULL;
        if (!pc)
            return dp_err_set(err, DP_ENOMEM, "out of memory");
        q->pc = pc;
        q->cap = n;
    }
    if (counts > 0) {
        int *c = realloc(q->counts, (size_t)counts * sizeof *c);
        if (!c)
            return dp_err_set(err, DP_ENOMEM, "out of memory");
        q->counts = c;
    }
    q->n = q->done = 0;
    q->seq = cb->seq++;
    return id;
}

/*
 * Room for a piece of `need` elements: while the pieces in flight and it would exceed
 * ASYNC_CHUNK, the oldest piece completes first. Open MPI's non-blocking collectives
 * (coll/libnbc) allocate scratch of up to their message, as the blocking ones do (see
 * ALLREDUCE_CHUNK), and it stays resident: so at most 1 MiB of buckets is in flight
 * (the resident check, tests/executor/compare_runs.c, leaves MPI a few MiB, which the
 * blocking path's 4 MiB pieces already use). It costs no overlap here: without a progress thread a
 * request advances only inside MPI calls anyway (bench/executor/mpi_progress.c). Every rank posts
 * the same pieces in the same order, and a wait progresses all of them: no rank can wait
 * for a piece a peer has not posted while that peer waits for it.
 */
#define ASYNC_CHUNK ((int64_t)(1 << 20) / (int64_t)sizeof(real))

static int drain(struct cpu_backend *cb, int64_t need, struct dp_err *err)
{
    while (cb->inflight > 0 && cb->inflight + need > ASYNC_CHUNK) {
        struct cpu_req *o = NULL;
        for (int i = 0; i < DP_MAX_REQS; i++) {
            struct cpu_req *q = &cb->req[i];
            if (q->used && q->done < q->n && (!o || q->seq < o->seq))
                o = q;
        }
        if (!o)
            break;
        MPI_TRY(cb, err, o->g, MPI_Wait(&o->r[o->done], MPI_STATUS_IGNORE));
        cb->inflight -= o->pc[o->done++];
    }
    return 0;
}

static int c_allreduce_start(struct dp_backend *be, enum dp_group g, real *buf, int64_t n,
                             enum dp_redop op, int *req, struct dp_err *err)
{
    struct cpu_backend *cb = cpu(be);
    *req = -1;
    if (cb->size[g] <= 1 || n <= 0)
        return 0;
    int id = req_take(cb, (int)((n + ASYNC_CHUNK - 1) / ASYNC_CHUNK), 0, err);
    if (id < 0)
        return id;
    struct cpu_req *q = &cb->req[id];
    q->g = g;
    q->used = true;
    *req = id;
    MPI_Op mop = op == DP_OP_MAX ? MPI_MAX : MPI_SUM;
    for (int64_t off = 0; off < n; off += ASYNC_CHUNK) {
        int cnt = (int)(n - off < ASYNC_CHUNK ? n - off : ASYNC_CHUNK);
        int rc = drain(cb, cnt, err);
        if (rc)
            return rc;
        MPI_TRY(cb, err, g,
                MPI_Iallreduce(MPI_IN_PLACE, buf + off, cnt, MPI_REAL_T, mop, cb->comm[g],
                               &q->r[q->n]));
        q->pc[q->n++] = cnt;
        cb->inflight += cnt;
    }
    return 0;
}

static int c_reduce_scatter_v_start(struct dp_backend *be, enum dp_group g, real *buf,
                                    const int *counts, int *req, struct dp_err *err)
{
    struct cpu_backend *cb = cpu(be);
    int n = cb->size[g];
    *req = -1;
    if (n <= 1)
        return 0;
    int id = req_take(cb, 1, n, err);
    if (id < 0)
        return id;
    struct cpu_req *q = &cb->req[id];
    memcpy(q->counts, counts, (size_t)n * sizeof *counts);
    q->g = g;
    q->used = true;
    *req = id;
    int64_t total = 0;
    for (int i = 0; i < n; i++)
        total += counts[i];
    int rc = drain(cb, total, err);
    if (rc)
        return rc;
    MPI_TRY(cb, err, g,
            MPI_Ireduce_scatter(MPI_IN_PLACE, buf, q->counts, MPI_REAL_T, MPI_SUM, cb->comm[g],
                                &q->r[0]));
    q->pc[0] = (int)(total < INT_MAX ? total : INT_MAX);
    q->n = 1;
    cb->inflight += q->pc[0];
    return 0;
}

static int c_req_wait(struct dp_backend *be, int req, struct dp_err *err)
{
    struct cpu_backend *cb = cpu(be);
    if (req < 0)
        return 0; /* a group of one: nothing was posted */
    if (req >= DP_MAX_REQS || !cb->req[req].used)
        return dp_err_set(err, DP_ERUNTIME, "internal: wait for request %d, not in flight", req);
    struct cpu_req *q = &cb->req[req];
    q->used = false;
    for (int i = q->done; i < q->n; i++)
        cb->inflight -= q->pc[i];
    if (q->n > q->done)
        MPI_TRY(cb, err, q->g, MPI_Waitall(q->n - q->done, q->r + q->done, MPI_STATUSES_IGNORE));
    q->n = q->done = 0;
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

static int c_p2p(struct dp_backend *be, enum dp_group g, const struct dp_p2p *ops, int n,
                 struct dp_err *err)
{
    struct cpu_backend *cb = cpu(be);
    MPI_Request req[8];
    if (n > 8)
        return dp_err_set(err, DP_ERUNTIME, "internal: %d messages in one pipeline batch", n);
    for (int i = 0; i < n; i++) {
        if (ops[i].n > INT_MAX)
            return dp_err_set(err, DP_ERUNTIME, "pipeline message of %lld elements is too large",
                              (long long)ops[i].n);
        if (ops[i].send)
            MPI_TRY(cb, err, g,
                    MPI_Isend(ops[i].buf, (int)ops[i].n, MPI_REAL_T, ops[i].peer, ops[i].tag,
                              cb->comm[g], &req[i]));
        else
            MPI_TRY(cb, err, g,
                    MPI_Irecv(ops[i].buf, (int)ops[i].n, MPI_REAL_T, ops[i].peer, ops[i].tag,
                              cb->comm[g], &req[i]));
    }
    if (n)
        MPI_TRY(cb, err, g, MPI_Waitall(n, req, MPI_STATUSES_IGNORE));
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
    free(cb->ag_counts);
    free(cb->ag_displs);
    for (int i = 0; i < DP_MAX_REQS; i++) {
        free(cb->req[i].r);
        free(cb->req[i].pc);
        free(cb->req[i].counts);
    }
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
    .gemm = dp__cpu_gemm,
    .init_fill = dp__cpu_init_fill,
    .norm_fwd = dp__cpu_norm_fwd,
    .norm_bwd = dp__cpu_norm_bwd,
    .bias_fill = dp__cpu_bias_fill,
    .bias_grad = dp__cpu_bias_grad,
    .residual = dp__cpu_residual,
    .add_inplace = dp__cpu_add_inplace,
    .act_fwd = dp__cpu_act_fwd,
    .act_bwd = dp__cpu_act_bwd,
    .rope = dp__cpu_rope,
    .qk_norm_fwd = dp__cpu_qk_norm_fwd,
    .qk_norm_bwd = dp__cpu_qk_norm_bwd,
    .attn_fwd = dp__cpu_attn_fwd,
    .attn_probs = dp__cpu_attn_probs,
    .attn_bwd = dp__cpu_attn_bwd,
    .attn_flash_fwd = dp__cpu_attn_flash_fwd,
    .attn_flash_bwd = dp__cpu_attn_flash_bwd,
    .attn_ring_fwd = dp__cpu_attn_ring_fwd,
    .attn_ring_done = dp__cpu_attn_ring_done,
    .attn_ring_dsum = dp__cpu_attn_ring_dsum,
    .attn_ring_bwd = dp__cpu_attn_ring_bwd,
    .embed_fwd = dp__cpu_embed_fwd,
    .embed_bwd = dp__cpu_embed_bwd,
    .pos_fwd = dp__cpu_pos_fwd,
    .pos_bwd = dp__cpu_pos_bwd,
    .ce_max = dp__cpu_ce_max,
    .ce_sums = dp__cpu_ce_sums,
    .ce_grad = dp__cpu_ce_grad,
    .sum = dp__cpu_sum,
    .sumsq = dp__cpu_sumsq,
    .adamw = dp__cpu_adamw,
    .round_store = dp__cpu_round_store,
    .pack = dp__cpu_pack,
    .unpack = dp__cpu_unpack,
    .gemm_fp8 = dp__cpu_gemm_fp8,
    .router_topk = dp__cpu_router_topk,
    .router_bwd = dp__cpu_router_bwd,
    .rows_gather = dp__cpu_rows_gather,
    .rows_scatter_add = dp__cpu_rows_scatter_add,
    .rows_dot = dp__cpu_rows_dot,
    .allreduce = c_allreduce,
    .reduce_scatter = c_reduce_scatter,
    .allgather = c_allgather,
    .reduce_scatter_v = c_reduce_scatter_v,
    .allgather_v = c_allgather_v,
    .alltoall_v = c_alltoall_v,
    .allgather_v_start = c_allgather_v_start,
    .allgather_v_wait = c_allgather_v_wait,
    .allreduce_start = c_allreduce_start,
    .reduce_scatter_v_start = c_reduce_scatter_v_start,
    .req_wait = c_req_wait,
    .allreduce_host = c_allreduce_host,
    .gather_host = c_gather_host,
    .sendrecv = c_sendrecv,
    .p2p = c_p2p,
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

/*
 * The thread policy, decided here once: --threads, else OMP_NUM_THREADS, else the cores
 * of this node shared by its ranks (MPI_COMM_TYPE_SHARED). The executor reports what it
 * chose (dp_exec_result.threads).
 */
static int thread_policy(int requested, int node_ranks)
{
    int threads = requested;
    if (threads <= 0)
        threads = getenv("OMP_NUM_THREADS") ? omp_get_max_threads() : cores_online() / node_ranks;
    return threads < 1 ? 1 : threads;
}

static struct dp_backend *cpu_new(const struct dp_backend_cfg *cfg, struct dp_err *err)
{
    const int tp = cfg->tp, dp = cfg->dp, pp = cfg->pp, cp = cfg->cp > 1 ? cfg->cp : 1;
    if (dp__mpi_up(&mpi_started_here, err))
        return NULL;
    struct cpu_backend *cb = calloc(1, sizeof *cb);
    if (!cb) {
        dp_err_set(err, DP_ENOMEM, "out of memory");
        return NULL;
    }
    cb->base.ops = &cpu_ops;
    cb->base.dtype = cfg->dtype;
    for (int g = 0; g < DP_NGROUPS; g++)
        cb->comm[g] = MPI_COMM_NULL;
    gethostname(cb->host, sizeof cb->host - 1);
    MPI_Comm_rank(MPI_COMM_WORLD, &cb->base.rank);
    MPI_Comm_size(MPI_COMM_WORLD, &cb->base.world);
    cb->comm[DP_GROUP_WORLD] = MPI_COMM_WORLD;
    cb->size[DP_GROUP_WORLD] = cb->base.world;
    cb->rank[DP_GROUP_WORLD] = cb->base.rank;
    int want = tp * cp * dp * pp;
    if (cb->base.world != want) {
        if (cp > 1)
            dp_err_set(err, DP_EINFEASIBLE,
                       "the plan needs tp*cp*pp*dp = %d*%d*%d*%d = %d ranks but MPI started %d "
                       "(launch with `mpirun -np %d` or let `dplan run` launch itself)",
                       tp, cp, pp, dp, want, cb->base.world, want);
        else
            dp_err_set(err, DP_EINFEASIBLE,
                       "the plan needs tp*pp*dp = %d*%d*%d = %d ranks but MPI started %d (launch "
                       "with `mpirun -np %d` or let `dplan run` launch itself)",
                       tp, pp, dp, want, cb->base.world, want);
        free(cb);
        return NULL;
    }
    struct dp__split sp;
    dp__split_plan(cb->base.rank, cfg, &sp);
    for (int g = 1; g < DP_NGROUPS; g++) {
        if (g == DP_GROUP_NODE)
            continue; /* below: MPI_Comm_split_type */
        if (split(cb, (enum dp_group)g, sp.color[g] < 0 ? MPI_UNDEFINED : sp.color[g], sp.key[g],
                  err)) {
            cpu_destroy(&cb->base);
            return NULL;
        }
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

    int threads = thread_policy(cfg->threads, cb->size[DP_GROUP_NODE]);
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

/*
 * OpenBLAS picks its kernels at load time from the CPU model; a release older than the
 * CPU falls back to generic SSE3 kernels ("Prescott"), several times slower. The core type
 * to force then, when the CPU has AVX-512 ("SkylakeX") or AVX2+FMA ("Haswell").
 */
static const char *blas_core(void)
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

static const char *cpu_rank_env(void)
{
    static char buf[64];
    const char *core = blas_core();
    if (!core)
        return NULL;
    snprintf(buf, sizeof buf, "OPENBLAS_CORETYPE=%s", core);
    return buf;
}

const struct dp_backend_kind dp__cpu_kind = {
    .name = "cpu",
    .create = cpu_new,
    .finalize = cpu_finalize,
    .abort = cpu_abort,
    .rank_env = cpu_rank_env,
};
