/*
 * The CPU backend's bf16 / fp16 storage (backend.h round_store, pack, unpack).
 * round_store emulates a store: the tensor stays in its fp32 buffer, each value rounded
 * to the nearest of the storage type (round.h), so every kernel reading it sees what a
 * bf16 / fp16 tensor would hold while it computes and accumulates in fp32, as cuBLAS does
 * with bf16 inputs and fp32 compute. pack / unpack move a tensor to and from 2-byte words
 * (pack16.h, the per-element code the CUDA kernels share): what the executor keeps in 2
 * bytes (the working copy of the weights) is stored so, and unpacked into an fp32 window
 * before the kernels read it (executor/README.md, "Mixed precision").
 */
#include "cpu.h"
#include "pack16.h"
#include "round.h"

void dp__cpu_round_store(struct dp_backend *be, real *x, int64_t n)
{
    const enum dp_dtype t = be->dtype;
    if (t == DP_DT_FP32)
        return;
#pragma omp parallel for schedule(static) if (n > 32768)
    for (int64_t i = 0; i < n; i++) {
        float v = (float)x[i];
        x[i] = (real)(t == DP_DT_BF16 ? dp__round_bf16(v) : dp__round_fp16(v));
    }
}

void dp__cpu_pack(struct dp_backend *be, uint16_t *dst, const real *src, int64_t n)
{
    const bool fp16 = be->dtype == DP_DT_FP16;
#pragma omp parallel for schedule(static) if (n > 32768)
    for (int64_t i = 0; i < n; i++)
        dst[i] = dp__pack16((float)src[i], fp16);
}

void dp__cpu_unpack(struct dp_backend *be, real *dst, const uint16_t *src, int64_t n)
{
    const bool fp16 = be->dtype == DP_DT_FP16;
#pragma omp parallel for schedule(static) if (n > 32768)
    for (int64_t i = 0; i < n; i++)
        dst[i] = (real)dp__unpack16(src[i], fp16);
}
