/*
 * The CUDA backend (backend.h; docs/gpu.md): one GPU per rank, cuBLAS and the kernels
 * of cuda_kernels.cu for compute (cuda_ops.c), NCCL for collectives and pipeline
 * messages, MPI for starting the ranks, the host-side collectives and the NCCL unique
 * id. Two kinds share the code:
 *  - "cuda": NCCL, one communicator per group, split from the world communicator
 *    (ncclCommSplit) with the CPU backend's colours and keys (cuda_host.c);
 *  - "cuda-mpi": collectives staged through host memory over MPI, so several ranks may
 *    share one GPU (NCCL refuses two ranks on one device): the multi-rank layouts are
 *    testable on a single-GPU machine (the issue's `--comm mpi`).
 * This file and its siblings form the module libdplan_cuda.so, which cuda_loader.c opens
 * on first use (dplan links no CUDA library). Memory is one device arena (reserve, sized from the
 * executor's memory plan); the arena's high-water mark and cudaMemGetInfo come back through
 * mem_peak.
 *
 * Operations that return nothing (kernels, GEMMs) keep their first error (sticky) and the
 * next collective, p2p or barrier returns it, with CUDA's, cuBLAS's or NCCL's own text.
 * Collectives are blocking (the stream is synchronised, then ncclCommGetAsyncError), as
 * backend.h asks; overlap on a second stream is later work.
 */
#include "cuda.h"
#include "cuda_lt.h"
#include "cuda_module.h"
#include "mpi_up.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static bool mpi_started_here;
static struct cuda_backend *live; /* for the abort hook: its NCCL communicators */

void dp__cuda_note(struct cuda_backend *cb, const char *what, int code, const char *text)
{
    if (cb->sticky)
        return;
    cb->sticky = code ? code : -1;
    snprintf(cb->sticky_msg, sizeof cb->sticky_msg, "%s: %s", what, text ? text : "error");
}

/* ------------------------------------------------------------------ memory */

static size_t cu_footprint(struct dp_backend *be, size_t bytes)
{
    return dp__arena_footprint(bytes);
}

static void *cu_alloc(struct dp_backend *be, size_t bytes)
{
    struct cuda_backend *cb = dp__cu(be);
    size_t len = dp__arena_footprint(bytes);
    void *p = NULL;
    size_t off;
    if (cb->arena_base && !dp__arena_alloc(&cb->arena, bytes, &off)) {
        p = cb->arena_base + off;
    } else {
        /* Before the arena, or past it (a buffer the memory plan does not count): plain
         * cudaMalloc, counted in the peak as never freed (its size is not kept). */
        if (cudaMalloc(&p, len) != cudaSuccess)
            return NULL;
        cb->loose_bytes += len;
        if (cb->loose_bytes > cb->loose_hwm)
            cb->loose_hwm = cb->loose_bytes;
    }
    if (cudaMemsetAsync(p, 0, len, cb->stream) != cudaSuccess) {
        dp__cuda_note(cb, "cudaMemsetAsync", 1, "zeroing a new buffer failed");
        return p;
    }
    return p;
}

static void cu_free(struct dp_backend *be, void *p)
{
    struct cuda_backend *cb = dp__cu(be);
    if (!p)
        return;
    char *c = p;
    if (cb->arena_base && c >= cb->arena_base && c < cb->arena_base + cb->arena.cap) {
        /* The stream may still use the block: the next owner's work is queued after. */
        dp__arena_free(&cb->arena, (size_t)(c - cb->arena_base));
        return;
    }
    cudaStreamSynchronize(cb->stream);
    cudaFree(p);
}

static void cu_upload(struct dp_backend *be, void *dst, const void *src, size_t bytes)
{
    struct cuda_backend *cb = dp__cu(be);
    if (!bytes)
        return;
    cudaError_t rc = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, cb->stream);
    if (rc == cudaSuccess)
        rc = cudaStreamSynchronize(cb->stream); /* src may be reused at once */
    if (rc != cudaSuccess)
        dp__cuda_note(cb, "cudaMemcpy (upload)", (int)rc, cudaGetErrorString(rc));
}

static void cu_download(struct dp_backend *be, void *dst, const void *src, size_t bytes)
{
    struct cuda_backend *cb = dp__cu(be);
    if (!bytes)
        return;
    cudaError_t rc = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, cb->stream);
    if (rc == cudaSuccess)
        rc = cudaStreamSynchronize(cb->stream);
    if (rc != cudaSuccess)
        dp__cuda_note(cb, "cudaMemcpy (download)", (int)rc, cudaGetErrorString(rc));
}

static void cu_zero(struct dp_backend *be, void *dst, size_t bytes)
{
    struct cuda_backend *cb = dp__cu(be);
    if (bytes)
        cudaMemsetAsync(dst, 0, bytes, cb->stream);
}

static void cu_copy(struct dp_backend *be, void *dst, const void *src, size_t bytes)
{
    struct cuda_backend *cb = dp__cu(be);
    if (bytes && dst != src)
        cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, cb->stream);
}

/*
 * The arena, once, from the memory plan's bytes: those plus 1/16 (each block rounds up to
 * 256 bytes, mem.c already counts that, and first fit leaves holes between pools whose
 * lifetimes differ) plus 64 MiB for the few buffers of unknown size.
 */
static int cu_reserve(struct dp_backend *be, size_t bytes, struct dp_err *err)
{
    struct cuda_backend *cb = dp__cu(be);
    if (cb->arena_base)
        return 0;
    size_t want = bytes + bytes / 16 + ((size_t)64 << 20);
    size_t free_b = 0, total_b = 0;
    cudaMemGetInfo(&free_b, &total_b);
    void *p = NULL;
    cudaError_t rc = cudaMalloc(&p, want);
    if (rc != cudaSuccess) {
        cudaGetLastError();
        const double gib = 1024.0 * 1024 * 1024;
        return dp_err_set(err, DP_EINFEASIBLE,
                          "rank %d (%s): the plan needs %.2f GiB on GPU %d (%.2f GiB as the "
                          "memory plan predicts, plus the arena's margin) but %.2f of its "
                          "%.2f GiB are free: %s",
                          cb->base.rank, cb->host, (double)want / gib, cb->device,
                          (double)bytes / gib, (double)free_b / gib, (double)total_b / gib,
                          cudaGetErrorString(rc));
    }
    if (dp__arena_init(&cb->arena, want)) {
        cudaFree(p);
        return dp_err_set(err, DP_ENOMEM, "out of memory");
    }
    cb->arena_base = p;
    return 0;
}

static void cu_mem_peak(struct dp_backend *be, size_t *peak, size_t *device_used)
{
    struct cuda_backend *cb = dp__cu(be);
    size_t free_b = 0, total_b = 0;
    cudaMemGetInfo(&free_b, &total_b);
    *peak = cb->arena.hwm + cb->loose_hwm;
    *device_used = total_b - free_b;
}

/* ------------------------------------------------------------------ facts */

static int cu_group_size(struct dp_backend *be, enum dp_group g)
{
    return dp__cu(be)->size[g];
}

static int cu_group_rank(struct dp_backend *be, enum dp_group g)
{
    return dp__cu(be)->rank[g];
}

static double cu_wtime(struct dp_backend *be)
{
    cudaStreamSynchronize(dp__cu(be)->stream); /* timings include the queued work */
    return MPI_Wtime();
}

/* ------------------------------------------------------------------ setup */

static void cu_destroy(struct dp_backend *be)
{
    if (!be)
        return;
    struct cuda_backend *cb = dp__cu(be);
    if (cb->stream)
        cudaStreamSynchronize(cb->stream);
    for (int g = 0; g < DP_NGROUPS; g++)
        if (cb->ncomm[g])
            ncclCommDestroy(cb->ncomm[g]);
    int fin = 0;
    MPI_Finalized(&fin);
    for (int g = 1; g < DP_NGROUPS; g++)
        if (!fin && cb->mcomm[g] != MPI_COMM_NULL)
            MPI_Comm_free(&cb->mcomm[g]);
    dp__cuda_lt_destroy(cb);
    if (cb->blas)
        cublasDestroy(cb->blas);
    cudaFree(cb->dsum);
    cudaFree(cb->arena_base);
    cudaFreeHost(cb->host_buf);
    if (cb->stream)
        cudaStreamDestroy(cb->stream);
    dp__arena_release(&cb->arena);
    if (live == cb)
        live = NULL;
    free(cb);
}

static struct dp_backend_ops cuda_ops = {
    .name = "cuda",
    .destroy = cu_destroy,
    .alloc = cu_alloc,
    .free = cu_free,
    .footprint = cu_footprint,
    .upload = cu_upload,
    .download = cu_download,
    .zero = cu_zero,
    .copy = cu_copy,
    .group_size = cu_group_size,
    .group_rank = cu_group_rank,
    .wtime = cu_wtime,
};

static int mpi_groups(struct cuda_backend *cb, const struct dp__split *sp, struct dp_err *err)
{
    for (int g = 1; g < DP_NGROUPS; g++) {
        int rc;
        if (g == DP_GROUP_NODE)
            rc = MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, cb->base.rank,
                                     MPI_INFO_NULL, &cb->mcomm[g]);
        else
            rc = MPI_Comm_split(MPI_COMM_WORLD, sp->color[g] < 0 ? MPI_UNDEFINED : sp->color[g],
                                sp->key[g], &cb->mcomm[g]);
        if (rc != MPI_SUCCESS)
            return dp__cuda_err_mpi(cb, err, rc, "MPI_Comm_split", g);
        if (cb->mcomm[g] == MPI_COMM_NULL) {
            cb->size[g] = 0;
            cb->rank[g] = -1;
            continue;
        }
        MPI_Comm_set_errhandler(cb->mcomm[g], MPI_ERRORS_RETURN);
        MPI_Comm_size(cb->mcomm[g], &cb->size[g]);
        MPI_Comm_rank(cb->mcomm[g], &cb->rank[g]);
    }
    return 0;
}

/* The world communicator from a unique id that rank 0 broadcasts over MPI, then one per
 * group by ncclCommSplit (collective over the world: every rank calls it, outsiders with
 * NCCL_SPLIT_NOCOLOR). */
static int nccl_groups(struct cuda_backend *cb, const struct dp__split *sp, struct dp_err *err)
{
    ncclUniqueId id;
    memset(&id, 0, sizeof id);
    ncclResult_t rc = ncclSuccess;
    if (cb->base.rank == 0)
        rc = ncclGetUniqueId(&id);
    if (rc != ncclSuccess)
        return dp__cuda_err_nccl(cb, err, (int)rc, "ncclGetUniqueId", DP_GROUP_WORLD);
    int mr = MPI_Bcast(&id, (int)sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD);
    if (mr != MPI_SUCCESS)
        return dp__cuda_err_mpi(cb, err, mr, "MPI_Bcast (the NCCL id)", DP_GROUP_WORLD);
    rc = ncclCommInitRank(&cb->ncomm[DP_GROUP_WORLD], cb->base.world, id, cb->base.rank);
    if (rc != ncclSuccess)
        return dp__cuda_err_nccl(cb, err, (int)rc, "ncclCommInitRank", DP_GROUP_WORLD);
    for (int g = 1; g < DP_NGROUPS; g++) {
        if (g == DP_GROUP_NODE)
            continue; /* host facts only: MPI */
        rc = ncclCommSplit(cb->ncomm[DP_GROUP_WORLD],
                           sp->color[g] < 0 ? NCCL_SPLIT_NOCOLOR : sp->color[g], sp->key[g],
                           &cb->ncomm[g], NULL);
        if (rc != ncclSuccess)
            return dp__cuda_err_nccl(cb, err, (int)rc, "ncclCommSplit", g);
    }
    return 0;
}

/* This rank's GPU: its place among the ranks of its node, modulo the GPUs it sees. */
static int pick_device(struct cuda_backend *cb, struct dp_err *err)
{
    int n = 0;
    cudaError_t rc = cudaGetDeviceCount(&n);
    if (rc != cudaSuccess || n <= 0)
        return dp_err_set(err, DP_ERUNTIME,
                          "rank %d (%s): the cuda backend found no GPU (%s); `dplan run` "
                          "without --backend uses the CPU",
                          cb->base.rank, cb->host,
                          rc != cudaSuccess ? cudaGetErrorString(rc) : "no device");
    const int local = cb->rank[DP_GROUP_NODE], nlocal = cb->size[DP_GROUP_NODE];
    if (!cb->staged && nlocal > n)
        return dp_err_set(err, DP_EINFEASIBLE,
                          "%d ranks on %s share %d GPU%s: NCCL needs one GPU per rank; "
                          "--backend cuda-mpi stages the collectives through the host so "
                          "ranks can share a GPU",
                          nlocal, cb->host, n, n == 1 ? "" : "s");
    cb->device = local % n;
    struct cudaDeviceProp prop;
    if ((rc = cudaGetDeviceProperties(&prop, cb->device)) != cudaSuccess)
        return dp__cuda_err_cuda(cb, err, (int)rc, "cudaGetDeviceProperties", -1);
    int sass[8];
    int ns = dp__cuda_parse_archs(DP_CUDA_SASS, sass, 8);
    bool jit;
    if (dp__cuda_pick_image(prop.major, prop.minor, sass, ns, DP_CUDA_PTX, &jit) < 0)
        return dp_err_set(err, DP_ERUNTIME,
                          "rank %d (%s): GPU %d (%s) is sm_%d%d, older than this build's "
                          "kernels (sm %s, PTX %d): rebuild with CMAKE_CUDA_ARCHITECTURES",
                          cb->base.rank, cb->host, cb->device, prop.name, prop.major, prop.minor,
                          DP_CUDA_SASS, DP_CUDA_PTX);
    if ((rc = cudaSetDevice(cb->device)) != cudaSuccess)
        return dp__cuda_err_cuda(cb, err, (int)rc, "cudaSetDevice", -1);
    return 0;
}

static struct dp_backend *cu_new(const struct dp_backend_cfg *cfg, bool staged, struct dp_err *err)
{
    if (dp__mpi_up(&mpi_started_here, err))
        return NULL;
    struct cuda_backend *cb = calloc(1, sizeof *cb);
    if (!cb) {
        dp_err_set(err, DP_ENOMEM, "out of memory");
        return NULL;
    }
    cb->base.ops = &cuda_ops;
    cb->base.threads = 1; /* one host thread drives the GPU */
    /* bf16 / fp16 storage: emulated as on the CPU (round_store on fp32 buffers; docs/gpu.md),
     * the GEMMs on 2-byte copies (cuda_lt.c): the run's summary says "emulated". */
    cb->base.dtype = cfg->dtype;
    cb->staged = staged;
    const char *gm = getenv("DPLAN_CUDA_GEMM");
    cb->compute = gm && !strcmp(gm, "fp32") ? CUBLAS_COMPUTE_32F : CUBLAS_COMPUTE_32F_FAST_TF32;
    for (int g = 0; g < DP_NGROUPS; g++)
        cb->mcomm[g] = MPI_COMM_NULL;
    gethostname(cb->host, sizeof cb->host - 1);
    MPI_Comm_rank(MPI_COMM_WORLD, &cb->base.rank);
    MPI_Comm_size(MPI_COMM_WORLD, &cb->base.world);
    cb->mcomm[DP_GROUP_WORLD] = MPI_COMM_WORLD;
    cb->size[DP_GROUP_WORLD] = cb->base.world;
    cb->rank[DP_GROUP_WORLD] = cb->base.rank;
    const int cp = cfg->cp > 1 ? cfg->cp : 1, want = cfg->tp * cp * cfg->dp * cfg->pp;
    if (cb->base.world != want) {
        dp_err_set(err, DP_EINFEASIBLE,
                   "the plan needs tp*cp*pp*dp = %d*%d*%d*%d = %d ranks but MPI started %d "
                   "(launch with `mpirun -np %d` or let `dplan run` launch itself)",
                   cfg->tp, cp, cfg->pp, cfg->dp, want, cb->base.world, want);
        free(cb);
        return NULL;
    }
    struct dp__split sp;
    dp__split_plan(cb->base.rank, cfg, &sp);
    cudaError_t cr;
    cublasStatus_t bs;
    if (mpi_groups(cb, &sp, err) || pick_device(cb, err))
        goto fail;
    if ((cr = cudaStreamCreateWithFlags(&cb->stream, cudaStreamNonBlocking)) != cudaSuccess ||
        (cr = cudaMalloc((void **)&cb->dsum, sizeof *cb->dsum)) != cudaSuccess) {
        dp__cuda_err_cuda(cb, err, (int)cr, "cudaStreamCreate/cudaMalloc", -1);
        goto fail;
    }
    if ((bs = cublasCreate(&cb->blas)) != CUBLAS_STATUS_SUCCESS ||
        (bs = cublasSetStream(cb->blas, cb->stream)) != CUBLAS_STATUS_SUCCESS) {
        dp_err_set(err, DP_ERUNTIME, "rank %d (%s): cublasCreate failed: %s", cb->base.rank,
                   cb->host, cublasGetStatusString(bs));
        goto fail;
    }
    if (dp__cuda_lt_init(cb, cfg->fp8, err))
        goto fail;
    if (!staged && nccl_groups(cb, &sp, err))
        goto fail;
    live = cb;
    return &cb->base;
fail:
    cu_destroy(&cb->base);
    return NULL;
}

static struct dp_backend *cuda_new(const struct dp_backend_cfg *cfg, struct dp_err *err)
{
    return cu_new(cfg, false, err);
}

static struct dp_backend *cuda_mpi_new(const struct dp_backend_cfg *cfg, struct dp_err *err)
{
    return cu_new(cfg, true, err);
}

static void cuda_finalize(void)
{
    int inited = 0, fin = 0;
    MPI_Initialized(&inited);
    MPI_Finalized(&fin);
    if (inited && !fin && mpi_started_here)
        MPI_Finalize();
}

/* A failed or hung peer: abort the NCCL communicators first, so that no kernel of this
 * rank waits on the dead one forever, then end the job (the supervisor restarts it). */
static void cuda_abort(int code)
{
    if (live)
        for (int g = DP_NGROUPS - 1; g >= 0; g--)
            if (live->ncomm[g]) {
                ncclCommAbort(live->ncomm[g]);
                live->ncomm[g] = NULL;
            }
    int inited = 0, fin = 0;
    MPI_Initialized(&inited);
    MPI_Finalized(&fin);
    if (inited && !fin)
        MPI_Abort(MPI_COMM_WORLD, code);
}

/* The ops table, whole, at the first use (cuda_ops.c and cuda_comm.c fill their parts). */
static void fill_once(void)
{
    if (!cuda_ops.gemm) {
        dp__cuda_fill_ops(&cuda_ops);
        dp__cuda_fill_comm(&cuda_ops);
        dp__cuda_fill_moe(&cuda_ops);
        cuda_ops.reserve = cu_reserve;
        cuda_ops.mem_peak = cu_mem_peak;
    }
}

static struct dp_backend *cuda_create(const struct dp_backend_cfg *cfg, struct dp_err *err)
{
    fill_once();
    return cuda_new(cfg, err);
}

static struct dp_backend *cuda_mpi_create(const struct dp_backend_cfg *cfg, struct dp_err *err)
{
    fill_once();
    return cuda_mpi_new(cfg, err);
}

static const struct dp_backend_kind cuda_kind = {
    .name = "cuda",
    .create = cuda_create,
    .finalize = cuda_finalize,
    .abort = cuda_abort,
};

static const struct dp_backend_kind cuda_mpi_kind = {
    .name = "cuda-mpi",
    .create = cuda_mpi_create,
    .finalize = cuda_finalize,
    .abort = cuda_abort,
};

static bool device_present(void)
{
    int n = 0;
    return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

/* The module's one export (cuda_module.h), which cuda_loader.c looks up. */
const struct dp__cuda_module dp__cuda_module = {&cuda_kind, &cuda_mpi_kind, device_present};
