/*
 * The host-only logic of the CUDA backend's cuBLASLt GEMMs (cuda_lt.c), plain C without
 * CUDA so that tests/executor/test_cuda_host.c checks it on any machine: the key that
 * picks a cached matmul descriptor, the layout each operand is given to cuBLASLt in
 * (FP8's TN constraint, the 2-byte copies' padding), the workspace those copies take,
 * and whether a GPU has FP8 tensor cores.
 *
 * Orientation: the executor's GEMMs are row-major, C[m, n] = op(A) op(B). cuBLASLt is
 * column-major, so it computes C^T[n, m] = op(B)^T op(A)^T: its "A" is our B with
 * transa = tb, its "B" our A with transb = ta (cuda_ops.c gemm_rm does the same).
 */
#ifndef DPLAN_EXECUTOR_CUDA_LT_HOST_H
#define DPLAN_EXECUTOR_CUDA_LT_HOST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* What a GEMM's operands are given to cuBLASLt as. */
enum dp__lt_mode {
    DP_LT_FP32 = 0, /* fp32 buffers as they are; TF32 or exact fp32 compute */
    DP_LT_BF16 = 1, /* 2-byte copies (the stored values are bf16 already: exact) */
    DP_LT_FP16 = 2,
    DP_LT_FP8 = 3, /* FP8 copies with per-tensor scales (gemm_fp8) */
};

/* One descriptor's identity: everything its matmul descriptor and layouts depend on. */
struct dp__lt_key {
    int m, n, k;
    int lda, ldb, ldc; /* the leading dimensions cuBLASLt sees (of the copies when copied) */
    uint8_t ta, tb;    /* the transposes cuBLASLt applies (after any copy) */
    uint8_t mode;      /* enum dp__lt_mode */
    uint8_t fa, fb;    /* FP8 formats of our A and B (enum dp_f8), 0 otherwise */
    uint8_t compute;   /* 1: exact fp32 (DPLAN_CUDA_GEMM=fp32), 0: the mode's default */
    uint8_t epi;       /* 1: the bias epilogue (gemm_bias), 0: none */
};

/*
 * How the operands reach cuBLASLt. For a copy (mode != DP_LT_FP32), op(A) [m x k] and
 * op(B) [k x n] are written into the workspace; the source is read with its own
 * transpose and the copy is laid out as `copy_ta` / `copy_tb` says, with leading
 * dimension `lda` / `ldb` (a multiple of 16 bytes: cuBLASLt's alignment for tensor-core
 * kernels). FP8 on Hopper takes only "TN" (cuBLAS docs, cublasLtMatmul: "A must be
 * transposed and B non-transposed"): cuBLASLt's A (our B) transposed, its B (our A) not,
 * i.e. our A as a row-major [m x k] copy and our B as a row-major [n x k] copy, whatever
 * the call's ta and tb; the K padding columns of the copies are written as zeros and the
 * GEMM runs over k_pad (zero products add nothing), since the copies' rows are padded.
 * 2-byte copies keep the call's orientation, padded rows only.
 */
struct dp__lt_plan {
    struct dp__lt_key key;
    bool copy;          /* operands copied into the workspace */
    bool tr_a, tr_b;    /* the copy of A / B is the transpose of its source */
    size_t off_b;       /* byte offset of B's copy in the workspace */
    size_t bytes;       /* workspace bytes for both copies (0 without copies) */
    int rows_a, rows_b; /* rows of the copies (row-major), each with lda / ldb */
    int cols_a, cols_b; /* columns holding values (the rest of a row: zero padding) */
};

/* Bytes per element of the copies in a mode (fp32: 4, no copy). */
int dp__lt_elem_bytes(enum dp__lt_mode mode);
/* The plan of C[m, n] = op(A) op(B) with the call's ta, tb, lda, ldb, ldc. */
void dp__lt_plan_make(struct dp__lt_plan *p, enum dp__lt_mode mode, bool ta, bool tb, int m, int n,
                      int k, int lda, int ldb, int ldc, int fa, int fb, bool exact);

/* A small cache of descriptors: `n` slots, replaced round-robin when full. The CUDA
 * side keeps its cuBLASLt objects in a parallel array indexed by the slot. */
#define DP_LT_SLOTS 64
struct dp__lt_cache {
    struct dp__lt_key keys[DP_LT_SLOTS];
    bool used[DP_LT_SLOTS];
    int next; /* the slot the next miss takes when all are used */
};
/* The slot holding `k`, or -1. */
int dp__lt_cache_find(const struct dp__lt_cache *c, const struct dp__lt_key *k);
/* A slot for `k` (a free one, else the round-robin victim; *evict true when it held
 * another key, whose descriptors the caller destroys first). */
int dp__lt_cache_take(struct dp__lt_cache *c, const struct dp__lt_key *k, bool *evict);

/* FP8 tensor cores: compute capability 8.9 (Ada) and newer (Hopper 9.0, Blackwell 10.x). */
bool dp__lt_fp8_capable(int major, int minor);

#endif
