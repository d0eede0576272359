/*
 * Predicted step time for `dplan run --backend cpu`: the probe's SGEMM rates
 * at two sizes fix a GEMM curve (peak P, half-rate size H: r = P x/(x + H)),
 * its streaming bandwidth the element-wise and optimizer passes, and MPI's
 * shared-memory transport the collectives (a copy in and a copy out: half
 * the streaming bandwidth). The executor computes in fp32, keeps attention
 * probabilities (no flash kernel), applies no dropout and reduces gradients
 * after the last backward, so the layout is set accordingly.
 */
#include "run_predict.h"

#include <stdio.h>
#include <string.h>

#include "costmodel/costmodel.h"
#include "executor/probe.h"

int cli_run_predict_cpu(const struct dp_model *m, const struct dp_layout *l, int world, int threads,
                        double *step_s, struct dp_err *err)
{
    struct dp_device_probe pr;
    int rc = dp_exec_probe_device(&pr, err);
    if (rc)
        return rc;
    if (threads < 1)
        threads = 1;
    /* r1 (x1 + H)/x1 = r2 (x2 + H)/x2 solved for H, then P from either point. */
    double x1 = pr.small_flops, r1 = pr.small_gflops, x2 = pr.large_flops, r2 = pr.large_gflops;
    double den = r1 / x1 - r2 / x2;
    double H = den > 0 ? (r2 - r1) / den : 0;
    if (H < 0)
        H = 0;
    double P = r2 * (x2 + H) / x2;

    struct dp_cluster cl;
    memset(&cl, 0, sizeof cl);
    snprintf(cl.name, sizeof cl.name, "this machine (probed)");
    snprintf(cl.system, sizeof cl.system, "cpu");
    snprintf(cl.gpu.name, sizeof cl.gpu.name, "cpu-probed");
    for (int i = 0; i < DP_PRECISIONS; i++)
        cl.gpu.peak_tflops[i] = P * threads / 1e3;
    cl.gpu.gemm.eff_max = 1.0;
    cl.gpu.gemm.half_flops = H;
    /* The model takes DP_MEM_EFFICIENCY of the bandwidth as achievable; the probe
     * measured the achievable figure already. */
    cl.gpu.mem_bw_gbps = pr.stream_gbps * threads / DP_MEM_EFFICIENCY;
    cl.gpu.mem_bytes = INT64_C(1) << 40;
    cl.gpu.usable_fraction = 1.0;
    cl.nodes = 1;
    cl.gpus_per_node = world;
    cl.nics_per_node = 1;
    cl.intra = (struct dp_link){"shm", DP_LINK_LOCAL, pr.stream_gbps / 2, 1.0, 1.0, 0};
    cl.inter = cl.intra;
    cl.inter.kind = DP_LINK_NET;

    struct dp_model mm = *m;
    mm.dropout = false;
    struct dp_layout ll = *l;
    ll.precision = DP_FP32;
    ll.flash_attn = false;
    ll.dp_overlap = false;
    ll.grad_fp32 = true;
    struct dp_step_cost c;
    dp_time_step_fast(&mm, &cl, &ll, &c);
    *step_s = c.step_time_s;
    return 0;
}
