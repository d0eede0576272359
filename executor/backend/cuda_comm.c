/*
 * The CUDA backend's communication (backend.h "collectives", "point-to-point"): NCCL
 * on the backend's stream for "cuda", host staging over MPI for "cuda-mpi" (cuda.c says
 * why both), MPI for the host doubles and barriers in both; and the error text of a
 * failed CUDA, NCCL or MPI call. Every call is blocking: the stream is synchronised and
 * NCCL's asynchronous error read before it returns.
 *
 * NCCL has no uneven reduce-scatter or all-gather: the _v variants are one ncclReduce or
 * ncclBroadcast per rank's piece in one NCCL group (the pieces move in parallel). NCCL
 * p2p has no tags: messages between two ranks of a group match in order, which is what
 * the pipeline schedule sends (one message per tag and direction at a time). A p2p batch
 * (interleaved 1F1B) may hold two messages between the same two ranks (pp = 2: the next
 * stage is also the previous one), so its messages are posted in (peer, tag) order on
 * both sides, which pairs each send with the receive of the same tag.
 *
 * The non-blocking all-gather (allgather_v_start, ZeRO-3's prefetch) is the blocking
 * allgather_v run in _start, with _wait a no-op: correct, but it does not overlap the
 * gather with compute yet (that needs a second stream; docs/gpu.md).
 */
#include "cuda.h"
#include "cuda_kernels.h"
#include "groups.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int dp__cuda_err_cuda(struct cuda_backend *cb, struct dp_err *err, int rc, const char *call, int g)
{
    return dp__cuda_fail(err, false, (int)rc, cb->base.rank, cb->host, call, dp__group_name(g),
                         cudaGetErrorString((cudaError_t)rc));
}

int dp__cuda_err_nccl(struct cuda_backend *cb, struct dp_err *err, int rc, const char *call, int g)
{
    /* ncclGetLastError has the detail (which peer, which transport); ncclGetErrorString
     * only the class of the error. */
    char text[384];
    const char *last = ncclGetLastError(g >= 0 ? cb->ncomm[g] : NULL);
    snprintf(text, sizeof text, "%s%s%s", ncclGetErrorString((ncclResult_t)rc),
             last && *last ? ": " : "", last ? last : "");
    return dp__cuda_fail(err, true, (int)rc, cb->base.rank, cb->host, call, dp__group_name(g),
                         text);
}

int dp__cuda_err_mpi(struct cuda_backend *cb, struct dp_err *err, int rc, const char *call, int g)
{
    char msg[MPI_MAX_ERROR_STRING] = "";
    int len = 0;
    MPI_Error_string(rc, msg, &len);
    return dp__cuda_fail(err, false, -1, cb->base.rank, cb->host, call, dp__group_name(g), msg);
}

/* The sticky error of earlier void operations, then the stream's own state. */
int dp__cuda_settle(struct cuda_backend *cb, struct dp_err *err, int g)
{
    if (cb->sticky)
        return dp_err_set(err, DP_ERUNTIME, "rank %d (%s): %s", cb->base.rank, cb->host,
                          cb->sticky_msg);
    cudaError_t rc = cudaStreamSynchronize(cb->stream);
    if (rc == cudaSuccess)
        rc = cudaGetLastError();
    if (rc != cudaSuccess)
        return dp__cuda_err_cuda(cb, err, (int)rc, "a kernel before this call", g);
    return 0;
}

#define MPI_TRY(cb, err, g, call)                                                                  \
    do {                                                                                           \
        int rc_ = (call);                                                                          \
        if (rc_ != MPI_SUCCESS)                                                                    \
            return dp__cuda_err_mpi(cb, err, rc_, #call, g);                                       \
    } while (0)

/* ------------------------------------------------------------------ staging (cuda-mpi) */

static real *stage(struct cuda_backend *cb, size_t bytes)
{
    if (bytes > cb->host_cap) {
        void *p = NULL;
        if (cudaMallocHost(&p, bytes) != cudaSuccess)
            return NULL;
        cudaFreeHost(cb->host_buf);
        cb->host_buf = p;
        cb->host_cap = bytes;
    }
    return cb->host_buf;
}

static int d2h(struct cuda_backend *cb, real *h, const real *d, int64_t n, struct dp_err *err,
               int g)
{
    cudaError_t rc =
        cudaMemcpyAsync(h, d, (size_t)n * sizeof *h, cudaMemcpyDeviceToHost, cb->stream);
    if (rc == cudaSuccess)
        rc = cudaStreamSynchronize(cb->stream);
    return rc == cudaSuccess ? 0 : dp__cuda_err_cuda(cb, err, (int)rc, "cudaMemcpy (staging)", g);
}

static int h2d(struct cuda_backend *cb, real *d, const real *h, int64_t n, struct dp_err *err,
               int g)
{
    cudaError_t rc =
        cudaMemcpyAsync(d, h, (size_t)n * sizeof *h, cudaMemcpyHostToDevice, cb->stream);
    if (rc == cudaSuccess)
        rc = cudaStreamSynchronize(cb->stream);
    return rc == cudaSuccess ? 0 : dp__cuda_err_cuda(cb, err, (int)rc, "cudaMemcpy (staging)", g);
}

/* After an NCCL call on the stream: wait for it, then NCCL's asynchronous state. */
static int finish(struct cuda_backend *cb, struct dp_err *err, int g, ncclResult_t rc,
                  const char *call)
{
    if (rc != ncclSuccess)
        return dp__cuda_err_nccl(cb, err, (int)rc, call, g);
    cudaError_t cr = cudaStreamSynchronize(cb->stream);
    if (cr != cudaSuccess)
        return dp__cuda_err_cuda(cb, err, (int)cr, call, g);
    ncclResult_t as = ncclSuccess;
    if (cb->ncomm[g])
        ncclCommGetAsyncError(cb->ncomm[g], &as);
    if (as != ncclSuccess)
        return dp__cuda_err_nccl(cb, err, (int)as, call, g);
    dp__beat(NULL);
    return 0;
}

static int too_large(struct dp_err *err, const char *what, int64_t n)
{
    return dp_err_set(err, DP_ERUNTIME, "%s of %lld elements is too large for MPI", what,
                      (long long)n);
}

static int staged_buf(struct cuda_backend *cb, struct dp_err *err, int64_t n, real **h)
{
    *h = stage(cb, (size_t)n * sizeof(real));
    return *h ? 0
              : dp_err_set(err, DP_ENOMEM,
                           "out of pinned host memory for %lld staged "
                           "elements",
                           (long long)n);
}

static int cu_allreduce(struct dp_backend *be, enum dp_group g, real *buf, int64_t n,
                        enum dp_redop op, struct dp_err *err)
{
    struct cuda_backend *cb = dp__cu(be);
    if (cb->size[g] <= 1 || n <= 0)
        return 0;
    if (dp__cuda_settle(cb, err, g))
        return err->code;
    if (!cb->staged)
        return finish(cb, err, g,
                      ncclAllReduce(buf, buf, (size_t)n, ncclFloat,
                                    op == DP_OP_MAX ? ncclMax : ncclSum, cb->ncomm[g], cb->stream),
                      "ncclAllReduce");
    real *h;
    if (staged_buf(cb, err, n, &h) || d2h(cb, h, buf, n, err, g))
        return err->code;
    const int64_t piece = (int64_t)1 << 30;
    for (int64_t off = 0; off < n; off += piece) {
        int cnt = (int)(n - off < piece ? n - off : piece);
        MPI_TRY(cb, err, g,
                MPI_Allreduce(MPI_IN_PLACE, h + off, cnt, MPI_FLOAT,
                              op == DP_OP_MAX ? MPI_MAX : MPI_SUM, cb->mcomm[g]));
    }
    if (h2d(cb, buf, h, n, err, g))
        return err->code;
    dp__beat(NULL);
    return 0;
}

static int cu_reduce_scatter(struct dp_backend *be, enum dp_group g, real *buf, int64_t chunk,
                             struct dp_err *err)
{
    struct cuda_backend *cb = dp__cu(be);
    const int n = cb->size[g], r = cb->rank[g];
    if (n <= 1 || chunk <= 0)
        return 0;
    if (dp__cuda_settle(cb, err, g))
        return err->code;
    if (!cb->staged) {
        /* In place as NCCL defines it (recv = send + rank * count), then to the front:
         * the two ranges are disjoint for rank >= 1. */
        ncclResult_t rc = ncclReduceScatter(buf, buf + (int64_t)r * chunk, (size_t)chunk, ncclFloat,
                                            ncclSum, cb->ncomm[g], cb->stream);
        if (rc == ncclSuccess && r > 0)
            cudaMemcpyAsync(buf, buf + (int64_t)r * chunk, (size_t)chunk * sizeof(real),
                            cudaMemcpyDeviceToDevice, cb->stream);
        return finish(cb, err, g, rc, "ncclReduceScatter");
    }
    if (chunk > INT_MAX)
        return too_large(err, "a reduce-scatter chunk", chunk);
    real *h;
    if (staged_buf(cb, err, n * chunk, &h) || d2h(cb, h, buf, n * chunk, err, g))
        return err->code;
    MPI_TRY(
        cb, err, g,
        MPI_Reduce_scatter_block(MPI_IN_PLACE, h, (int)chunk, MPI_FLOAT, MPI_SUM, cb->mcomm[g]));
    if (h2d(cb, buf, h, chunk, err, g))
        return err->code;
    dp__beat(NULL);
    return 0;
}

static int cu_allgather(struct dp_backend *be, enum dp_group g, real *buf, int64_t chunk,
                        struct dp_err *err)
{
    struct cuda_backend *cb = dp__cu(be);
    const int n = cb->size[g], r = cb->rank[g];
    if (n <= 1 || chunk <= 0)
        return 0;
    if (dp__cuda_settle(cb, err, g))
        return err->code;
    if (!cb->staged)
        return finish(cb, err, g,
                      ncclAllGather(buf + (int64_t)r * chunk, buf, (size_t)chunk, ncclFloat,
                                    cb->ncomm[g], cb->stream),
                      "ncclAllGather");
    if (chunk > INT_MAX)
        return too_large(err, "an all-gather chunk", chunk);
    real *h;
    if (staged_buf(cb, err, n * chunk, &h) ||
        d2h(cb, h + (int64_t)r * chunk, buf + (int64_t)r * chunk, chunk, err, g))
        return err->code;
    MPI_TRY(
        cb, err, g,
        MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, h, (int)chunk, MPI_FLOAT, cb->mcomm[g]));
    if (h2d(cb, buf, h, n * chunk, err, g))
        return err->code;
    dp__beat(NULL);
    return 0;
}

static int64_t displs_of(const int *counts, int n, int *displs)
{
    int64_t at = 0;
    for (int i = 0; i < n; i++) {
        displs[i] = (int)at;
        at += counts[i];
    }
    return at;
}

static int cu_reduce_scatter_v(struct dp_backend *be, enum dp_group g, real *buf, const int *counts,
                               struct dp_err *err)
{
    struct cuda_backend *cb = dp__cu(be);
    const int n = cb->size[g], r = cb->rank[g];
    if (n <= 1)
        return 0;
    if (dp__cuda_settle(cb, err, g))
        return err->code;
    int *displs = malloc((size_t)n * sizeof *displs);
    if (!displs)
        return dp_err_set(err, DP_ENOMEM, "out of memory");
    int64_t total = displs_of(counts, n, displs);
    int rc = 0;
    if (!cb->staged) {
        ncclResult_t nr = ncclGroupStart();
        for (int i = 0; i < n && nr == ncclSuccess; i++)
            nr = ncclReduce(buf + displs[i], buf + displs[i], (size_t)counts[i], ncclFloat, ncclSum,
                            i, cb->ncomm[g], cb->stream);
        ncclResult_t ne = ncclGroupEnd();
        if (nr == ncclSuccess)
            nr = ne;
        if (nr == ncclSuccess && r > 0)
            dp__cuk_move_front(cb->stream, buf, buf + displs[r], counts[r]);
        rc = finish(cb, err, g, nr, "ncclReduce (reduce-scatter-v)");
    } else {
        real *h;
        rc = staged_buf(cb, err, total, &h);
        if (!rc)
            rc = d2h(cb, h, buf, total, err, g);
        if (!rc) {
            int mr = MPI_Reduce_scatter(MPI_IN_PLACE, h, counts, MPI_FLOAT, MPI_SUM, cb->mcomm[g]);
            rc = mr != MPI_SUCCESS ? dp__cuda_err_mpi(cb, err, mr, "MPI_Reduce_scatter", g)
                                   : h2d(cb, buf, h, counts[r], err, g);
        }
        if (!rc)
            dp__beat(NULL);
    }
    free(displs);
    return rc;
}

static int cu_allgather_v(struct dp_backend *be, enum dp_group g, real *buf, const int *counts,
                          struct dp_err *err)
{
    struct cuda_backend *cb = dp__cu(be);
    const int n = cb->size[g], r = cb->rank[g];
    if (n <= 1)
        return 0;
    if (dp__cuda_settle(cb, err, g))
        return err->code;
    int *displs = malloc((size_t)n * sizeof *displs);
    if (!displs)
        return dp_err_set(err, DP_ENOMEM, "out of memory");
    int64_t total = displs_of(counts, n, displs);
    int rc = 0;
    if (!cb->staged) {
        ncclResult_t nr = ncclGroupStart();
        for (int i = 0; i < n && nr == ncclSuccess; i++)
            nr = ncclBroadcast(buf + displs[i], buf + displs[i], (size_t)counts[i], ncclFloat, i,
                               cb->ncomm[g], cb->stream);
        ncclResult_t ne = ncclGroupEnd();
        rc = finish(cb, err, g, nr == ncclSuccess ? ne : nr, "ncclBroadcast (all-gather-v)");
    } else {
        real *h;
        rc = staged_buf(cb, err, total, &h);
        if (!rc)
            rc = d2h(cb, h + displs[r], buf + displs[r], counts[r], err, g);
        if (!rc) {
            int mr = MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, h, counts, displs,
                                    MPI_FLOAT, cb->mcomm[g]);
            rc = mr != MPI_SUCCESS ? dp__cuda_err_mpi(cb, err, mr, "MPI_Allgatherv", g)
                                   : h2d(cb, buf, h, total, err, g);
        }
        if (!rc)
            dp__beat(NULL);
    }
    free(displs);
    return rc;
}

/* All-to-all with counts (expert dispatch and combine, moe.c). NCCL has no alltoallv:
 * one ncclSend and one ncclRecv per peer with a non-zero count in one NCCL group (the
 * pattern of NCCL's user guide, "Point-to-point communication: all-to-all"); this
 * rank's own piece is a device copy. cuda-mpi: MPI_Alltoallv on the staging buffer. */
static int cu_alltoall_v(struct dp_backend *be, enum dp_group g, const real *sbuf,
                         const int *scounts, real *rbuf, const int *rcounts, struct dp_err *err)
{
    struct cuda_backend *cb = dp__cu(be);
    const int n = cb->size[g], r = cb->rank[g];
    if (n <= 1) {
        cudaError_t cr = cudaSuccess;
        if (scounts[0] && rbuf != sbuf)
            cr = cudaMemcpyAsync(rbuf, sbuf, (size_t)scounts[0] * sizeof(real),
                                 cudaMemcpyDeviceToDevice, cb->stream);
        return cr == cudaSuccess
                   ? 0
                   : dp__cuda_err_cuda(cb, err, (int)cr, "cudaMemcpyAsync (all-to-all-v)", g);
    }
    if (dp__cuda_settle(cb, err, g))
        return err->code;
    int *sd = malloc(2 * (size_t)n * sizeof *sd);
    if (!sd)
        return dp_err_set(err, DP_ENOMEM, "out of memory");
    int *rd = sd + n;
    const int64_t stot = displs_of(scounts, n, sd), rtot = displs_of(rcounts, n, rd);
    int rc = 0;
    if (!cb->staged) {
        cudaError_t cr = cudaSuccess;
        if (scounts[r])
            cr = cudaMemcpyAsync(rbuf + rd[r], sbuf + sd[r], (size_t)scounts[r] * sizeof(real),
                                 cudaMemcpyDeviceToDevice, cb->stream);
        if (cr != cudaSuccess) {
            free(sd);
            return dp__cuda_err_cuda(cb, err, (int)cr, "cudaMemcpyAsync (all-to-all-v)", g);
        }
        ncclResult_t nr = ncclGroupStart();
        for (int i = 0; i < n && nr == ncclSuccess; i++) {
            if (i == r)
                continue;
            if (scounts[i])
                nr = ncclSend(sbuf + sd[i], (size_t)scounts[i], ncclFloat, i, cb->ncomm[g],
                              cb->stream);
            if (nr == ncclSuccess && rcounts[i])
                nr = ncclRecv(rbuf + rd[i], (size_t)rcounts[i], ncclFloat, i, cb->ncomm[g],
                              cb->stream);
        }
        ncclResult_t ne = ncclGroupEnd();
        rc = finish(cb, err, g, nr == ncclSuccess ? ne : nr, "ncclSend/ncclRecv (all-to-all-v)");
    } else {
        real *h;
        rc = staged_buf(cb, err, stot + rtot, &h);
        if (!rc && stot)
            rc = d2h(cb, h, sbuf, stot, err, g);
        if (!rc) {
            int mr = MPI_Alltoallv(h, scounts, sd, MPI_FLOAT, h + stot, rcounts, rd, MPI_FLOAT,
                                   cb->mcomm[g]);
            rc = mr != MPI_SUCCESS ? dp__cuda_err_mpi(cb, err, mr, "MPI_Alltoallv", g)
                 : rtot            ? h2d(cb, rbuf, h + stot, rtot, err, g)
                                   : 0;
        }
        if (!rc)
            dp__beat(NULL);
    }
    free(sd);
    return rc;
}

/* Blocking, see the top of the file: the gather is complete when _start returns. */
static int cu_allgather_v_start(struct dp_backend *be, enum dp_group g, real *buf,
                                const int *counts, struct dp_err *err)
{
    return cu_allgather_v(be, g, buf, counts, err);
}

static int cu_allgather_v_wait(struct dp_backend *be, struct dp_err *err)
{
    (void)be;
    (void)err;
    return 0;
}

static int cu_allreduce_host(struct dp_backend *be, enum dp_group g, double *buf, int n,
                             enum dp_redop op, struct dp_err *err)
{
    struct cuda_backend *cb = dp__cu(be);
    if (cb->size[g] <= 1 || n <= 0)
        return 0;
    MPI_TRY(cb, err, g,
            MPI_Allreduce(MPI_IN_PLACE, buf, n, MPI_DOUBLE, op == DP_OP_MAX ? MPI_MAX : MPI_SUM,
                          cb->mcomm[g]));
    dp__beat(NULL);
    return 0;
}

static int cu_gather_host(struct dp_backend *be, enum dp_group g, const double *in, double *out,
                          int n, struct dp_err *err)
{
    struct cuda_backend *cb = dp__cu(be);
    if (cb->size[g] <= 1) {
        memcpy(out, in, (size_t)n * sizeof *in);
        return 0;
    }
    MPI_TRY(cb, err, g, MPI_Gather(in, n, MPI_DOUBLE, out, n, MPI_DOUBLE, 0, cb->mcomm[g]));
    dp__beat(NULL);
    return 0;
}

static int cu_sendrecv(struct dp_backend *be, enum dp_group g, int to, const real *sbuf, int64_t sn,
                       int stag, int from, real *rbuf, int64_t rn, int rtag, struct dp_err *err)
{
    struct cuda_backend *cb = dp__cu(be);
    if (dp__cuda_settle(cb, err, g))
        return err->code;
    if (!cb->staged) {
        ncclResult_t nr = ncclGroupStart();
        if (nr == ncclSuccess && to >= 0)
            nr = ncclSend(sbuf, (size_t)sn, ncclFloat, to, cb->ncomm[g], cb->stream);
        if (nr == ncclSuccess && from >= 0)
            nr = ncclRecv(rbuf, (size_t)rn, ncclFloat, from, cb->ncomm[g], cb->stream);
        ncclResult_t ne = ncclGroupEnd();
        return finish(cb, err, g, nr == ncclSuccess ? ne : nr, "ncclSend/ncclRecv");
    }
    if (sn > INT_MAX || rn > INT_MAX)
        return too_large(err, "a pipeline message", sn > rn ? sn : rn);
    real *h;
    const int64_t s_n = to >= 0 ? sn : 0, r_n = from >= 0 ? rn : 0;
    if (staged_buf(cb, err, s_n + r_n, &h) || (s_n && d2h(cb, h, sbuf, s_n, err, g)))
        return err->code;
    MPI_Comm c = cb->mcomm[g];
    if (to >= 0 && from >= 0)
        MPI_TRY(cb, err, g,
                MPI_Sendrecv(h, (int)sn, MPI_FLOAT, to, stag, h + s_n, (int)rn, MPI_FLOAT, from,
                             rtag, c, MPI_STATUS_IGNORE));
    else if (to >= 0)
        MPI_TRY(cb, err, g, MPI_Send(h, (int)sn, MPI_FLOAT, to, stag, c));
    else if (from >= 0)
        MPI_TRY(cb, err, g,
                MPI_Recv(h + s_n, (int)rn, MPI_FLOAT, from, rtag, c, MPI_STATUS_IGNORE));
    if (r_n && h2d(cb, rbuf, h + s_n, r_n, err, g))
        return err->code;
    dp__beat(NULL);
    return 0;
}

#define P2P_MAX 8 /* the most messages of one batch (the CPU backend's limit too) */

/* The batch's messages in (peer, tag) order, stable (insertion sort of n <= 8). */
static void p2p_order(const struct dp_p2p *ops, int n, int *ord)
{
    for (int i = 0; i < n; i++) {
        int k = i;
        while (k > 0 &&
               (ops[ord[k - 1]].peer > ops[i].peer ||
                (ops[ord[k - 1]].peer == ops[i].peer && ops[ord[k - 1]].tag > ops[i].tag))) {
            ord[k] = ord[k - 1];
            k--;
        }
        ord[k] = i;
    }
}

static int cu_p2p(struct dp_backend *be, enum dp_group g, const struct dp_p2p *ops, int n,
                  struct dp_err *err)
{
    struct cuda_backend *cb = dp__cu(be);
    if (n > P2P_MAX)
        return dp_err_set(err, DP_ERUNTIME, "internal: %d messages in one pipeline batch", n);
    if (n <= 0)
        return 0;
    if (dp__cuda_settle(cb, err, g))
        return err->code;
    int ord[P2P_MAX];
    p2p_order(ops, n, ord);
    if (!cb->staged) {
        ncclResult_t nr = ncclGroupStart();
        for (int k = 0; k < n && nr == ncclSuccess; k++) {
            const struct dp_p2p *o = &ops[ord[k]];
            nr = o->send
                     ? ncclSend(o->buf, (size_t)o->n, ncclFloat, o->peer, cb->ncomm[g], cb->stream)
                     : ncclRecv(o->buf, (size_t)o->n, ncclFloat, o->peer, cb->ncomm[g], cb->stream);
        }
        ncclResult_t ne = ncclGroupEnd();
        return finish(cb, err, g, nr == ncclSuccess ? ne : nr, "ncclSend/ncclRecv (batch)");
    }
    /* cuda-mpi: every message gets its own piece of the staging buffer; sends are copied
     * to the host first, receives back to the device after the Waitall. */
    int64_t at[P2P_MAX], total = 0;
    for (int i = 0; i < n; i++) {
        if (ops[i].n > INT_MAX)
            return too_large(err, "a pipeline message", ops[i].n);
        at[i] = total;
        total += ops[i].n;
    }
    real *h;
    if (staged_buf(cb, err, total, &h))
        return err->code;
    for (int i = 0; i < n; i++)
        if (ops[i].send && ops[i].n && d2h(cb, h + at[i], ops[i].buf, ops[i].n, err, g))
            return err->code;
    MPI_Request req[P2P_MAX];
    for (int i = 0; i < n; i++) {
        int mr = ops[i].send ? MPI_Isend(h + at[i], (int)ops[i].n, MPI_FLOAT, ops[i].peer,
                                         ops[i].tag, cb->mcomm[g], &req[i])
                             : MPI_Irecv(h + at[i], (int)ops[i].n, MPI_FLOAT, ops[i].peer,
                                         ops[i].tag, cb->mcomm[g], &req[i]);
        if (mr != MPI_SUCCESS) {
            /* The requests posted so far still refer to the staging buffer: finish them
             * before it can be reused (the error is reported either way). */
            if (i)
                MPI_Waitall(i, req, MPI_STATUSES_IGNORE);
            return dp__cuda_err_mpi(cb, err, mr, ops[i].send ? "MPI_Isend" : "MPI_Irecv", g);
        }
    }
    MPI_TRY(cb, err, g, MPI_Waitall(n, req, MPI_STATUSES_IGNORE));
    for (int i = 0; i < n; i++)
        if (!ops[i].send && ops[i].n && h2d(cb, ops[i].buf, h + at[i], ops[i].n, err, g))
            return err->code;
    dp__beat(NULL);
    return 0;
}

static int cu_barrier(struct dp_backend *be, enum dp_group g, struct dp_err *err)
{
    struct cuda_backend *cb = dp__cu(be);
    if (dp__cuda_settle(cb, err, g))
        return err->code;
    if (cb->size[g] <= 1)
        return 0;
    MPI_TRY(cb, err, g, MPI_Barrier(cb->mcomm[g]));
    return 0;
}

void dp__cuda_fill_comm(struct dp_backend_ops *o)
{
    o->allreduce = cu_allreduce;
    o->reduce_scatter = cu_reduce_scatter;
    o->allgather = cu_allgather;
    o->reduce_scatter_v = cu_reduce_scatter_v;
    o->allgather_v = cu_allgather_v;
    o->alltoall_v = cu_alltoall_v;
    o->allgather_v_start = cu_allgather_v_start;
    o->allgather_v_wait = cu_allgather_v_wait;
    o->p2p = cu_p2p;
    o->allreduce_host = cu_allreduce_host;
    o->gather_host = cu_gather_host;
    o->sendrecv = cu_sendrecv;
    o->barrier = cu_barrier;
}
