/*
 * The CPU backend's bf16 / fp16 storage emulation (backend.h round_store): tensors stay
 * in fp32 buffers, each value rounded to the nearest of the storage type (round.h), so
 * every kernel reading them sees what a bf16 / fp16 tensor would hold while it computes
 * and accumulates in fp32, as cuBLAS does with bf16 inputs and fp32 compute. It does not
 * save memory: the buffers are still 4 bytes an element (executor/README.md, "Mixed
 * precision").
 */
#include "cpu.h"
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
