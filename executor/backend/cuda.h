/*
 * The CUDA backend's state, shared by its C files: cuda.c (devices, the arena,
 * communicators, collectives) and cuda_ops.c (the compute operations over cuBLAS and
 * the kernels of cuda_kernels.cu). Only these files include CUDA, NCCL and MPI headers.
 */
#ifndef DPLAN_EXECUTOR_CUDA_H
#define DPLAN_EXECUTOR_CUDA_H

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <mpi.h>
#include <nccl.h>

#include "backend.h"
#include "cuda_host.h"

struct cuda_backend {
    struct dp_backend base;
    bool staged; /* "cuda-mpi": collectives copied to the host and done over MPI */
    int device;
    cudaStream_t stream;
    cublasHandle_t blas;
    /* CUBLAS_COMPUTE_32F_FAST_TF32, or CUBLAS_COMPUTE_32F with DPLAN_CUDA_GEMM=fp32 (the
     * exact fp32 products, for equivalence runs against the CPU backend). */
    cublasComputeType_t compute;
    MPI_Comm mcomm[DP_NGROUPS];
    ncclComm_t ncomm[DP_NGROUPS]; /* NULL in staged mode, for NODE, and outside a group */
    int size[DP_NGROUPS], rank[DP_NGROUPS];
    char host[64];
    /* The arena (reserve): one cudaMalloc; before it, alloc is plain cudaMalloc. */
    char *arena_base;
    struct dp__arena arena;
    size_t loose_bytes, loose_hwm; /* cudaMalloc'd outside the arena */
    double *dsum;                  /* one device double for sum/sumsq */
    void *host_buf;                /* staging for cuda-mpi, grown on demand */
    size_t host_cap;
    /* The first CUDA or cuBLAS error of an operation that returns nothing (kernels,
     * GEMMs): the next call that returns a status reports it. */
    int sticky;
    char sticky_msg[160];
    /* cuBLASLt GEMMs (cuda_lt.c): handle, descriptor cache, workspace; NULL: off. */
    struct dp__lt *lt;
};

static inline struct cuda_backend *dp__cu(struct dp_backend *be)
{
    return (struct cuda_backend *)be;
}

/* Remember the first failure of a void operation (what = the call). */
void dp__cuda_note(struct cuda_backend *cb, const char *what, int code, const char *text);
/* The compute operations of cuda_ops.c and the communication of cuda_comm.c, put into
 * the ops table by cuda.c. */
void dp__cuda_fill_ops(struct dp_backend_ops *ops);
void dp__cuda_fill_comm(struct dp_backend_ops *ops);
/* Mixture of experts and q/k norm (cuda_ops_moe.c over cuda_moe.cu). */
void dp__cuda_fill_moe(struct dp_backend_ops *ops);

/* Errors (cuda_comm.c): fill err for a failed CUDA, NCCL or MPI call over group g (-1:
 * none) with the library's own text; return the status. */
int dp__cuda_err_cuda(struct cuda_backend *cb, struct dp_err *err, int rc, const char *call, int g);
int dp__cuda_err_nccl(struct cuda_backend *cb, struct dp_err *err, int rc, const char *call, int g);
int dp__cuda_err_mpi(struct cuda_backend *cb, struct dp_err *err, int rc, const char *call, int g);
/* The sticky error of earlier void operations, else the stream's own (synchronised). */
int dp__cuda_settle(struct cuda_backend *cb, struct dp_err *err, int g);

#endif
