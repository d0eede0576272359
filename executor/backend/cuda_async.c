/*
 * The CUDA backend's non-blocking collectives (backend.h "non-blocking gradient
 * reductions", and ZeRO-3's allgather_v_start): NCCL on a second stream, the
 * communication stream, so the DP gradient buckets and the next layer's parameter
 * gather run while the compute stream goes on (Megatron-Core and PyTorch DDP/FSDP run
 * their gradient and parameter collectives on a stream of their own likewise).
 *
 * A start records an event on the compute stream and makes the communication stream
 * wait for it (the buffer's producers are done), enqueues the NCCL call there and
 * records the request's own event after it. A wait makes the compute stream wait for
 * that event: no host synchronisation, the consumers of the buffer are simply queued
 * after the collective. NCCL's asynchronous error is read at the wait. Request ids are
 * the host bookkeeping of cuda_host.c (unit-tested without a GPU).
 *
 * Orders: a blocking collective over a group with requests in flight is queued after
 * them (dp__cuda_settle, via dp__cuda_order_after): NCCL runs one communicator's
 * operations in enqueue order only within a stream. Every rank enqueues its NCCL calls in
 * the same program order (the executor's schedule), which is what NCCL asks of
 * communicators used concurrently from several streams.
 *
 * "cuda-mpi" (staged through host memory) has no second stream: its starts run the
 * blocking operation and return no request (-1), as a group of one does.
 */
#include "cuda.h"
#include "cuda_kernels.h"

#include <stdlib.h>

/* The event of request id, created on first use (timing off: only ordering). */
static int req_event(struct cuda_backend *cb, int id, struct dp_err *err, int g)
{
    if (cb->ev_done[id])
        return 0;
    cudaError_t rc = cudaEventCreateWithFlags(&cb->ev_done[id], cudaEventDisableTiming);
    return rc == cudaSuccess ? 0 : dp__cuda_err_cuda(cb, err, (int)rc, "cudaEventCreate", g);
}

/* The communication stream (and the ready event), created on first use. */
static int comm_stream(struct cuda_backend *cb, struct dp_err *err, int g)
{
    if (cb->cstream)
        return 0;
    cudaError_t rc = cudaStreamCreateWithFlags(&cb->cstream, cudaStreamNonBlocking);
    if (rc == cudaSuccess)
        rc = cudaEventCreateWithFlags(&cb->ev_ready, cudaEventDisableTiming);
    return rc == cudaSuccess ? 0
                             : dp__cuda_err_cuda(cb, err, (int)rc, "cudaStreamCreate (comm)", g);
}

/* A request over g: its id in *id, the communication stream after the compute stream's
 * work so far. */
static int begin(struct cuda_backend *cb, int g, int *id, struct dp_err *err)
{
    *id = -1;
    if (cb->sticky)
        return dp_err_set(err, DP_ERUNTIME, "rank %d (%s): %s", cb->base.rank, cb->host,
                          cb->sticky_msg);
    if (comm_stream(cb, err, g))
        return err->code;
    int k = dp__reqs_take(&cb->reqs, g);
    if (k < 0)
        return dp_err_set(err, DP_ERUNTIME, "internal: more than %d requests in flight",
                          DP_MAX_REQS);
    if (req_event(cb, k, err, g)) {
        dp__reqs_done(&cb->reqs, k);
        return err->code;
    }
    cudaError_t rc = cudaEventRecord(cb->ev_ready, cb->stream);
    if (rc == cudaSuccess)
        rc = cudaStreamWaitEvent(cb->cstream, cb->ev_ready, 0);
    if (rc != cudaSuccess) {
        dp__reqs_done(&cb->reqs, k);
        return dp__cuda_err_cuda(cb, err, (int)rc, "cudaStreamWaitEvent (comm)", g);
    }
    *id = k;
    return 0;
}

/* After the NCCL call of request id: its event, or the request dropped on failure. */
static int end(struct cuda_backend *cb, int g, int id, ncclResult_t nr, const char *call,
               struct dp_err *err)
{
    if (nr != ncclSuccess) {
        dp__reqs_done(&cb->reqs, id);
        return dp__cuda_err_nccl(cb, err, (int)nr, call, g);
    }
    cudaError_t rc = cudaEventRecord(cb->ev_done[id], cb->cstream);
    if (rc != cudaSuccess) {
        dp__reqs_done(&cb->reqs, id);
        return dp__cuda_err_cuda(cb, err, (int)rc, call, g);
    }
    return 0;
}

void dp__cuda_order_after(struct cuda_backend *cb, int g)
{
    int ids[DP_MAX_REQS];
    int n = g >= 0 ? dp__reqs_of_group(&cb->reqs, g, ids) : 0;
    for (int i = 0; i < n; i++)
        cudaStreamWaitEvent(cb->stream, cb->ev_done[ids[i]], 0);
}

static int ca_allreduce_start(struct dp_backend *be, enum dp_group g, real *buf, int64_t n,
                              enum dp_redop op, int *req, struct dp_err *err)
{
    struct cuda_backend *cb = dp__cu(be);
    *req = -1;
    if (cb->size[g] <= 1 || n <= 0)
        return 0;
    if (cb->staged)
        return be->ops->allreduce(be, g, buf, n, op, err);
    int id;
    if (begin(cb, g, &id, err))
        return err->code;
    ncclResult_t nr = ncclAllReduce(buf, buf, (size_t)n, ncclFloat,
                                    op == DP_OP_MAX ? ncclMax : ncclSum, cb->ncomm[g], cb->cstream);
    if (end(cb, g, id, nr, "ncclAllReduce (bucket)", err))
        return err->code;
    *req = id;
    return 0;
}

/* As cu_reduce_scatter_v (one ncclReduce per piece in a group, then this rank's piece to
 * the front), on the communication stream. */
static int ca_reduce_scatter_v_start(struct dp_backend *be, enum dp_group g, real *buf,
                                     const int *counts, int *req, struct dp_err *err)
{
    struct cuda_backend *cb = dp__cu(be);
    const int n = cb->size[g], r = cb->rank[g];
    *req = -1;
    if (n <= 1)
        return 0;
    if (cb->staged)
        return be->ops->reduce_scatter_v(be, g, buf, counts, err);
    int id;
    if (begin(cb, g, &id, err))
        return err->code;
    ncclResult_t nr = ncclGroupStart();
    int64_t at = 0, mine = 0;
    for (int i = 0; i < n; at += counts[i++]) {
        if (i == r)
            mine = at;
        if (nr == ncclSuccess)
            nr = ncclReduce(buf + at, buf + at, (size_t)counts[i], ncclFloat, ncclSum, i,
                            cb->ncomm[g], cb->cstream);
    }
    ncclResult_t ne = ncclGroupEnd();
    if (nr == ncclSuccess)
        nr = ne;
    if (nr == ncclSuccess && r > 0)
        dp__cuk_move_front(cb->cstream, buf, buf + mine, counts[r]);
    if (end(cb, g, id, nr, "ncclReduce (bucket reduce-scatter-v)", err))
        return err->code;
    *req = id;
    return 0;
}

static int ca_req_wait(struct dp_backend *be, int req, struct dp_err *err)
{
    struct cuda_backend *cb = dp__cu(be);
    if (req < 0)
        return 0;
    int g = req < DP_MAX_REQS ? cb->reqs.group[req] : -1;
    if (dp__reqs_done(&cb->reqs, req))
        return dp_err_set(err, DP_ERUNTIME, "internal: wait for request %d, not in flight", req);
    cudaError_t rc = cudaStreamWaitEvent(cb->stream, cb->ev_done[req], 0);
    if (rc != cudaSuccess)
        return dp__cuda_err_cuda(cb, err, (int)rc, "cudaStreamWaitEvent (wait)", g);
    ncclResult_t as = ncclSuccess;
    if (cb->ncomm[g])
        ncclCommGetAsyncError(cb->ncomm[g], &as);
    if (as != ncclSuccess)
        return dp__cuda_err_nccl(cb, err, (int)as, "a bucket's collective", g);
    dp__beat(NULL);
    return 0;
}

/* ZeRO-3's prefetch: as cu_allgather_v (one ncclBroadcast per piece), on the
 * communication stream; one in flight (backend.h). */
static int ca_allgather_v_start(struct dp_backend *be, enum dp_group g, real *buf,
                                const int *counts, struct dp_err *err)
{
    struct cuda_backend *cb = dp__cu(be);
    const int n = cb->size[g];
    if (n <= 1)
        return 0;
    if (cb->staged)
        return be->ops->allgather_v(be, g, buf, counts, err);
    if (cb->ag_req >= 0)
        return dp_err_set(err, DP_ERUNTIME, "internal: a second non-blocking all-gather");
    int id;
    if (begin(cb, g, &id, err))
        return err->code;
    ncclResult_t nr = ncclGroupStart();
    int64_t at = 0;
    for (int i = 0; i < n; at += counts[i++])
        if (nr == ncclSuccess)
            nr = ncclBroadcast(buf + at, buf + at, (size_t)counts[i], ncclFloat, i, cb->ncomm[g],
                               cb->cstream);
    ncclResult_t ne = ncclGroupEnd();
    if (end(cb, g, id, nr == ncclSuccess ? ne : nr, "ncclBroadcast (prefetch all-gather-v)", err))
        return err->code;
    cb->ag_req = id;
    return 0;
}

static int ca_allgather_v_wait(struct dp_backend *be, struct dp_err *err)
{
    struct cuda_backend *cb = dp__cu(be);
    int id = cb->ag_req;
    cb->ag_req = -1;
    return ca_req_wait(be, id, err);
}

void dp__cuda_fill_async(struct dp_backend_ops *o)
{
    o->allreduce_start = ca_allreduce_start;
    o->reduce_scatter_v_start = ca_reduce_scatter_v_start;
    o->req_wait = ca_req_wait;
    o->allgather_v_start = ca_allgather_v_start;
    o->allgather_v_wait = ca_allgather_v_wait;
}

void dp__cuda_async_init(struct cuda_backend *cb)
{
    dp__reqs_init(&cb->reqs);
    cb->ag_req = -1;
}

void dp__cuda_async_release(struct cuda_backend *cb)
{
    if (cb->cstream)
        cudaStreamSynchronize(cb->cstream);
    for (int i = 0; i < DP_MAX_REQS; i++)
        if (cb->ev_done[i])
            cudaEventDestroy(cb->ev_done[i]);
    if (cb->ev_ready)
        cudaEventDestroy(cb->ev_ready);
    if (cb->cstream)
        cudaStreamDestroy(cb->cstream);
    cb->cstream = NULL;
}
