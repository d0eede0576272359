/*
 * The CUDA backend's GEMMs through cuBLASLt (docs/gpu.md): one cublasLtHandle per
 * backend, a matmul descriptor, its layouts and the heuristic's algorithm cached per
 * shape (cuda_lt_host.c: the key and the layout plan, unit-tested without a GPU), and
 * one workspace, cuBLASLt's own 32 MiB (NVIDIA's recommendation for Hopper, cuBLAS docs
 * "cublasSetWorkspace") followed by the operand copies, taken from the device arena
 * through the backend's alloc (past the arena: a loose cudaMalloc, counted in the peak).
 *  - fp32 runs: the fp32 buffers as they are, CUBLAS_COMPUTE_32F_FAST_TF32, or
 *    CUBLAS_COMPUTE_32F with DPLAN_CUDA_GEMM=fp32.
 *  - bf16 / fp16 runs: both operands copied into 2-byte buffers (exact: the executor
 *    stores every GEMM operand rounded to the type already), CUDA_R_16BF / CUDA_R_16F
 *    A and B, fp32 C and D, CUBLAS_COMPUTE_32F: what Megatron's bf16 linears run.
 *  - FP8 (gemm_fp8): each operand's amax, its scale, and its quantised copy laid out for
 *    FP8's TN-only kernels (cuda_lt_host.h), CUDA_R_8F_E4M3 / CUDA_R_8F_E5M2 A and B with
 *    the reciprocal scales as CUBLASLT_MATMUL_DESC_A/B_SCALE_POINTER, fp32 C and D,
 *    CUBLAS_COMPUTE_32F without fast accumulation. Refused below sm_89 (cuda.c).
 * A shape whose fp32 / bf16 GEMM cuBLASLt has no algorithm for falls back to
 * cublasGemmEx (cuda_ops.c); DPLAN_CUDA_LT=0 turns cuBLASLt off (the TF32 path of old).
 * gemm_bias adds the bias in the epilogue (CUBLASLT_EPILOGUE_BIAS, an fp32 bias).
 * Nothing of this has run on a GPU.
 */
#include "cuda_lt.h"
#include "cuda.h"
#include "cuda_lt_kernels.h"
#include "round.h"

#include <cublasLt.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LT_WS ((size_t)32 << 20)

struct lt_slot {
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t la, lb, lc;
    cublasLtMatmulAlgo_t algo;
    bool ok; /* the heuristic gave an algorithm */
};

struct dp__lt {
    cublasLtHandle_t h;
    struct dp__lt_cache cache;
    struct lt_slot slot[DP_LT_SLOTS];
    char *ws; /* [LT_WS cuBLASLt][operand copies] */
    size_t ws_cap;
    float *f8; /* device: amax A, amax B, s_A, 1/s_A, s_B, 1/s_B */
    bool exact;
};

static void slot_free(struct lt_slot *s)
{
    if (s->desc)
        cublasLtMatmulDescDestroy(s->desc);
    if (s->la)
        cublasLtMatrixLayoutDestroy(s->la);
    if (s->lb)
        cublasLtMatrixLayoutDestroy(s->lb);
    if (s->lc)
        cublasLtMatrixLayoutDestroy(s->lc);
    memset(s, 0, sizeof *s);
}

int dp__cuda_lt_init(struct cuda_backend *cb, bool fp8, struct dp_err *err)
{
    const char *off = getenv("DPLAN_CUDA_LT");
    if (off && !strcmp(off, "0") && !fp8)
        return 0;
    if (fp8) {
        int maj = 0, min = 0;
        cudaDeviceGetAttribute(&maj, cudaDevAttrComputeCapabilityMajor, cb->device);
        cudaDeviceGetAttribute(&min, cudaDevAttrComputeCapabilityMinor, cb->device);
        if (!dp__lt_fp8_capable(maj, min))
            return dp_err_set(err, DP_EINFEASIBLE,
                              "rank %d (%s): precision fp8: GPU %d is sm_%d%d; FP8 tensor cores "
                              "need sm_89 or newer (Ada, Hopper, Blackwell)",
                              cb->base.rank, cb->host, cb->device, maj, min);
    }
    struct dp__lt *lt = calloc(1, sizeof *lt);
    if (!lt)
        return dp_err_set(err, DP_ENOMEM, "out of memory");
    cublasStatus_t st = cublasLtCreate(&lt->h);
    if (st != CUBLAS_STATUS_SUCCESS) {
        free(lt);
        return dp_err_set(err, DP_ERUNTIME, "rank %d (%s): cublasLtCreate failed: %s",
                          cb->base.rank, cb->host, cublasGetStatusString(st));
    }
    cudaError_t cr = cudaMalloc((void **)&lt->f8, 6 * sizeof(float));
    if (cr != cudaSuccess) {
        cublasLtDestroy(lt->h);
        free(lt);
        return dp__cuda_err_cuda(cb, err, (int)cr, "cudaMalloc", -1);
    }
    lt->exact = cb->compute == CUBLAS_COMPUTE_32F;
    cb->lt = lt;
    return 0;
}

void dp__cuda_lt_destroy(struct cuda_backend *cb)
{
    struct dp__lt *lt = cb->lt;
    if (!lt)
        return;
    for (int i = 0; i < DP_LT_SLOTS; i++)
        slot_free(&lt->slot[i]);
    if (lt->ws)
        cb->base.ops->free(&cb->base, lt->ws);
    cudaFree(lt->f8);
    cublasLtDestroy(lt->h);
    free(lt);
    cb->lt = NULL;
}

/* The workspace with room for `copies` bytes after cuBLASLt's own; NULL on failure. */
static char *workspace(struct cuda_backend *cb, size_t copies)
{
    struct dp__lt *lt = cb->lt;
    size_t need = LT_WS + copies;
    if (lt->ws_cap < need) {
        if (lt->ws)
            cb->base.ops->free(&cb->base, lt->ws);
        lt->ws = cb->base.ops->alloc(&cb->base, need);
        lt->ws_cap = lt->ws ? need : 0;
        if (!lt->ws)
            dp__cuda_note(cb, "cuBLASLt workspace", 2, "out of device memory");
    }
    return lt->ws;
}

static cudaDataType_t dtype_of(const struct dp__lt_key *k, int f8)
{
    switch ((enum dp__lt_mode)k->mode) {
    case DP_LT_BF16: return CUDA_R_16BF;
    case DP_LT_FP16: return CUDA_R_16F;
    case DP_LT_FP8: return f8 == DP_F8_E5M2 ? CUDA_R_8F_E5M2 : CUDA_R_8F_E4M3;
    default: return CUDA_R_32F;
    }
}

/*
 * The cached slot of a plan, made on a miss. cuBLASLt's A is our B (its buffer row-major
 * [rb x cb_] is column-major [cb_ x rb]), its B our A, D = C^T column-major [n x m].
 */
static struct lt_slot *slot_for(struct cuda_backend *cb, const struct dp__lt_plan *p)
{
    struct dp__lt *lt = cb->lt;
    const struct dp__lt_key *k = &p->key;
    int s = dp__lt_cache_find(&lt->cache, k);
    if (s >= 0)
        return &lt->slot[s];
    bool evict = false;
    s = dp__lt_cache_take(&lt->cache, k, &evict);
    struct lt_slot *sl = &lt->slot[s];
    slot_free(sl);
    const bool fp8 = k->mode == DP_LT_FP8;
    cublasComputeType_t ct =
        k->mode == DP_LT_FP32 && !k->compute ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
    cublasOperation_t opa = k->tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasOperation_t opb = k->ta ? CUBLAS_OP_T : CUBLAS_OP_N;
    /* Row-major shapes of the buffers cuBLASLt reads. */
    const int ra = k->ta ? k->k : k->m, ca = k->ta ? k->m : k->k;
    const int rb = k->tb ? k->n : k->k, cbn = k->tb ? k->k : k->n;
    cublasStatus_t st = cublasLtMatmulDescCreate(&sl->desc, ct, CUDA_R_32F);
    if (st == CUBLAS_STATUS_SUCCESS)
        st =
            cublasLtMatmulDescSetAttribute(sl->desc, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof opa);
    if (st == CUBLAS_STATUS_SUCCESS)
        st =
            cublasLtMatmulDescSetAttribute(sl->desc, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof opb);
    if (st == CUBLAS_STATUS_SUCCESS && k->epi) {
        /* D = alpha op(A) op(B) + beta C + bias, the bias a vector over D's rows (our
         * columns), fp32; its pointer is set per call (matmul). */
        cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_BIAS;
        cudaDataType_t bt = CUDA_R_32F;
        st = cublasLtMatmulDescSetAttribute(sl->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi,
                                            sizeof epi);
        if (st == CUBLAS_STATUS_SUCCESS)
            st = cublasLtMatmulDescSetAttribute(sl->desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt,
                                                sizeof bt);
    }
    if (st == CUBLAS_STATUS_SUCCESS && fp8) {
        /* cuBLASLt's A is our B: its descale is 1 / s_B (f8[5]); its B is our A (f8[3]). */
        const void *pa = lt->f8 + 5, *pb = lt->f8 + 3;
        st = cublasLtMatmulDescSetAttribute(sl->desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &pa,
                                            sizeof pa);
        if (st == CUBLAS_STATUS_SUCCESS)
            st = cublasLtMatmulDescSetAttribute(sl->desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &pb,
                                                sizeof pb);
    }
    if (st == CUBLAS_STATUS_SUCCESS)
        st = cublasLtMatrixLayoutCreate(&sl->la, dtype_of(k, k->fb), (uint64_t)cbn, (uint64_t)rb,
                                        k->ldb);
    if (st == CUBLAS_STATUS_SUCCESS)
        st = cublasLtMatrixLayoutCreate(&sl->lb, dtype_of(k, k->fa), (uint64_t)ca, (uint64_t)ra,
                                        k->lda);
    if (st == CUBLAS_STATUS_SUCCESS)
        st =
            cublasLtMatrixLayoutCreate(&sl->lc, CUDA_R_32F, (uint64_t)k->n, (uint64_t)k->m, k->ldc);
    cublasLtMatmulPreference_t pref = NULL;
    if (st == CUBLAS_STATUS_SUCCESS)
        st = cublasLtMatmulPreferenceCreate(&pref);
    size_t wsb = LT_WS;
    if (st == CUBLAS_STATUS_SUCCESS)
        st = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                  &wsb, sizeof wsb);
    cublasLtMatmulHeuristicResult_t res;
    int nres = 0;
    if (st == CUBLAS_STATUS_SUCCESS)
        st = cublasLtMatmulAlgoGetHeuristic(lt->h, sl->desc, sl->la, sl->lb, sl->lc, sl->lc, pref,
                                            1, &res, &nres);
    if (pref)
        cublasLtMatmulPreferenceDestroy(pref);
    sl->ok = st == CUBLAS_STATUS_SUCCESS && nres > 0;
    if (sl->ok)
        sl->algo = res.algo;
    return sl;
}

static bool matmul(struct cuda_backend *cb, const struct dp__lt_plan *p, float alpha, const void *a,
                   const void *b, float beta, float *c, const float *bias, const char *what)
{
    struct lt_slot *sl = slot_for(cb, p);
    if (!sl->ok)
        return false;
    if (p->key.epi && cublasLtMatmulDescSetAttribute(sl->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                                     &bias, sizeof bias) != CUBLAS_STATUS_SUCCESS)
        return false;
    char *ws = workspace(cb, p->bytes);
    if (!ws)
        return true; /* noted: the next status-returning call reports it */
    cublasStatus_t st = cublasLtMatmul(cb->lt->h, sl->desc, &alpha, b, sl->la, a, sl->lb, &beta, c,
                                       sl->lc, c, sl->lc, &sl->algo, ws, LT_WS, cb->stream);
    if (st != CUBLAS_STATUS_SUCCESS)
        dp__cuda_note(cb, what, (int)st, cublasGetStatusString(st));
    return true;
}

bool dp__cuda_lt_gemm(struct cuda_backend *cb, bool ta, bool tb, int m, int n, int k, float alpha,
                      const float *a, int lda, const float *b, int ldb, float beta, float *c,
                      int ldc, const float *bias)
{
    if (!cb->lt)
        return false;
    const enum dp_dtype t = cb->base.dtype;
    const enum dp__lt_mode mode = t == DP_DT_BF16   ? DP_LT_BF16
                                  : t == DP_DT_FP16 ? DP_LT_FP16
                                                    : DP_LT_FP32;
    struct dp__lt_plan p;
    dp__lt_plan_make(&p, mode, ta, tb, m, n, k, lda, ldb, ldc, 0, 0, cb->lt->exact);
    p.key.epi = bias != NULL;
    if (!p.copy)
        return matmul(cb, &p, alpha, a, b, beta, c, bias, "cublasLtMatmul");
    struct lt_slot *sl = slot_for(cb, &p);
    if (!sl->ok)
        return false;
    char *ws = workspace(cb, p.bytes);
    if (!ws)
        return true;
    char *qa = ws + LT_WS, *qb = qa + p.off_b;
    const int h = mode == DP_LT_FP16;
    dp__cuk_lt_copy16(cb->stream, qa, p.key.lda, a, lda, p.rows_a, p.cols_a, h);
    dp__cuk_lt_copy16(cb->stream, qb, p.key.ldb, b, ldb, p.rows_b, p.cols_b, h);
    return matmul(cb, &p, alpha, qa, qb, beta, c, bias, "cublasLtMatmul (bf16/fp16)");
}

void dp__cuda_lt_gemm_fp8(struct dp_backend *be, bool ta, bool tb, int m, int n, int k, real alpha,
                          const real *a, int lda, enum dp_f8 fa, const real *b, int ldb,
                          enum dp_f8 fb, real beta, real *c, int ldc)
{
    struct cuda_backend *cb = dp__cu(be);
    struct dp__lt *lt = cb->lt;
    if (m <= 0 || n <= 0)
        return;
    if (!lt) { /* cuda.c makes it for every FP8 run: not reached */
        dp__cuda_note(cb, "gemm_fp8", -1, "cuBLASLt is off");
        return;
    }
    struct dp__lt_plan p;
    dp__lt_plan_make(&p, DP_LT_FP8, ta, tb, m, n, k, lda, ldb, ldc, fa, fb, false);
    /* FP8 kernels want 16-byte aligned matrices (cuBLAS docs, cublasLtMatmul, FP8
     * requirements): a C whose rows are not (an odd ldc, an unaligned pointer) is staged
     * through a copy with its rows padded to 4 floats. */
    const bool stage = ldc % 4 || ((uintptr_t)c & 15);
    const size_t off_c = p.bytes;
    if (stage) {
        p.key.ldc = (n + 3) / 4 * 4;
        p.bytes += ((size_t)m * p.key.ldc * sizeof(float) + 255) / 256 * 256;
    }
    char *ws = workspace(cb, p.bytes);
    if (!ws)
        return;
    char *qa = ws + LT_WS, *qb = qa + p.off_b;
    float *d = stage ? (float *)(qa + off_c) : c;
    const size_t dpitch = (size_t)p.key.ldc * sizeof(float), cpitch = (size_t)ldc * sizeof(float);
    if (stage && beta != 0)
        cudaMemcpy2DAsync(d, dpitch, c, cpitch, (size_t)n * sizeof(float), (size_t)m,
                          cudaMemcpyDeviceToDevice, cb->stream);
    /* Sources as stored: A [m x k] or, transposed, [k x m]; B [k x n] or [n x k]. */
    const int sra = ta ? k : m, sca = ta ? m : k, srb = tb ? n : k, scb = tb ? k : n;
    dp__cuk_lt_amax(cb->stream, lt->f8 + 0, a, lda, sra, sca);
    dp__cuk_lt_amax(cb->stream, lt->f8 + 1, b, ldb, srb, scb);
    dp__cuk_lt_scale(cb->stream, lt->f8 + 2, lt->f8 + 0,
                     fa == DP_F8_E5M2 ? DP_E5M2_MAX : DP_E4M3_MAX);
    dp__cuk_lt_scale(cb->stream, lt->f8 + 4, lt->f8 + 1,
                     fb == DP_F8_E5M2 ? DP_E5M2_MAX : DP_E4M3_MAX);
    dp__cuk_lt_quant(cb->stream, qa, p.key.lda, p.rows_a, p.cols_a, a, lda, p.tr_a,
                     fa == DP_F8_E5M2, lt->f8 + 2);
    dp__cuk_lt_quant(cb->stream, qb, p.key.ldb, p.rows_b, p.cols_b, b, ldb, p.tr_b,
                     fb == DP_F8_E5M2, lt->f8 + 4);
    if (!matmul(cb, &p, (float)alpha, qa, qb, (float)beta, d, NULL, "cublasLtMatmul (fp8)")) {
        char msg[96];
        snprintf(msg, sizeof msg, "no FP8 algorithm for m=%d n=%d k=%d", m, n, k);
        dp__cuda_note(cb, "cublasLtMatmulAlgoGetHeuristic", -1, msg);
    } else if (stage) {
        cudaMemcpy2DAsync(c, cpitch, d, dpitch, (size_t)n * sizeof(float), (size_t)m,
                          cudaMemcpyDeviceToDevice, cb->stream);
    }
}
