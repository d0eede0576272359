/*
 * Step-time reports: breakdown, throughput, FLOP rates (with the FLOP
 * convention stated), and which link each parallel group uses.
 */
#include "time_report.h"

#include <cjson/cJSON.h>

#include "cli.h"

static const char flop_convention[] =
    "2 FLOPs per multiply-add, backward = 2x forward, full s x s attention (Narayanan et al. "
    "2021); model FLOPs exclude recompute (MFU), hardware FLOPs include it (HFU)";

/* One group's placement: its size and stride, the slowest link, how far it reaches. */
static void group_json(cJSON *parent, const char *name, const struct dp_layout *l,
                       enum dp_place_kind kind, const struct dp_path *p)
{
    int n;
    long stride;
    dp_place_shape(l, kind, &n, &stride);
    cJSON *o = cJSON_AddObjectToObject(parent, name);
    cJSON_AddNumberToObject(o, "size", n);
    cJSON_AddNumberToObject(o, "stride", (double)stride);
    cJSON_AddStringToObject(o, "link", n > 1 ? p->link : "none");
    cJSON_AddBoolToObject(o, "across_nodes", p->inter_node);
    cJSON_AddNumberToObject(o, "nodes", p->nodes);
    if (kind == DP_PLACE_CP || kind == DP_PLACE_PP) {
        cJSON_AddNumberToObject(o, "hops", p->hops);
        cJSON_AddNumberToObject(o, "hops_across_nodes", p->hops_inter);
    } else {
        cJSON_AddNumberToObject(o, "members_per_node", p->members_per_node);
    }
}

cJSON *cli_time_json(const struct dp_step_cost *c, const struct dp_layout *l)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "step_time_s", c->step_time_s);
    cJSON_AddNumberToObject(o, "tokens_per_s", c->tokens_per_s);
    cJSON_AddNumberToObject(o, "samples_per_s", c->tokens_per_s / (double)l->seq_len);
    cJSON *t = cJSON_AddObjectToObject(o, "tflops_per_gpu");
    cJSON_AddNumberToObject(t, "model", c->model_tflops_per_gpu);
    cJSON_AddNumberToObject(t, "hardware", c->hardware_tflops_per_gpu);
    cJSON_AddNumberToObject(o, "mfu", c->mfu);
    cJSON_AddNumberToObject(o, "hfu", c->hfu);
    cJSON_AddNumberToObject(o, "peak_tflops", c->peak_tflops);
    cJSON_AddStringToObject(o, "gemm_precision", dp_gemm_name(dp_layout_gemm(l)));
    cJSON_AddStringToObject(o, "flop_convention", flop_convention);
    cJSON *b = cJSON_AddObjectToObject(o, "breakdown_s");
    cJSON_AddNumberToObject(b, "compute", c->compute_s);
    cJSON_AddNumberToObject(b, "recompute", c->recompute_s);
    cJSON_AddNumberToObject(b, "tp_comm", c->tp_comm_s);
    cJSON_AddNumberToObject(b, "cp_comm", c->cp_comm_s);
    cJSON_AddNumberToObject(b, "ep_comm", c->ep_comm_s);
    cJSON_AddNumberToObject(b, "pp_comm", c->pp_comm_s);
    cJSON_AddNumberToObject(b, "dp_comm", c->dp_comm_s);
    cJSON_AddNumberToObject(b, "bubble", c->bubble_s);
    cJSON_AddNumberToObject(b, "optimizer", c->optimizer_s);
    cJSON_AddNumberToObject(b, "embedding_sync", c->other_s);
    cJSON_AddNumberToObject(o, "dp_comm_total_s", c->dp_comm_total_s);
    cJSON *k = cJSON_AddObjectToObject(o, "links");
    cJSON_AddStringToObject(k, "tp", c->tp_path.desc);
    cJSON_AddStringToObject(k, "cp", l->cp > 1 ? c->cp_path.desc : "none (1 rank)");
    cJSON_AddStringToObject(k, "dp", c->dp_path.desc);
    cJSON_AddStringToObject(k, "pp", l->pp > 1 ? c->pp_path.desc : "none (1 stage)");
    cJSON_AddStringToObject(k, "ep", c->ep_path.desc);
    cJSON *g = cJSON_AddObjectToObject(o, "groups");
    group_json(g, "tp", l, DP_PLACE_TP, &c->tp_path);
    group_json(g, "cp", l, DP_PLACE_CP, &c->cp_path);
    group_json(g, "dp", l, DP_PLACE_DPCP, &c->dp_path);
    group_json(g, "pp", l, DP_PLACE_PP, &c->pp_path);
    group_json(g, "ep", l, DP_PLACE_EP, &c->ep_path);
    if (l->ep > 1 || dp_layout_etp(l) != l->tp) { /* the expert layers' own groups */
        group_json(g, "etp", l, DP_PLACE_ETP, &c->etp_path);
        group_json(g, "edp", l, DP_PLACE_EDP, &c->edp_path);
    }
    return o;
}

static void row(FILE *f, const char *name, double v, double total)
{
    if (v <= 0)
        return;
    fprintf(f, "  %-16s %10.4f s  %5.1f%%\n", name, v, 100 * v / total);
}

void cli_time_text(FILE *f, const struct dp_step_cost *c, const struct dp_layout *l,
                   const struct dp_cluster *cl)
{
    double T = c->step_time_s;
    fprintf(f, "step time %.4f s: %.0f tokens/s, %.2f samples/s\n", T, c->tokens_per_s,
            c->tokens_per_s / (double)l->seq_len);
    row(f, "compute", c->compute_s, T);
    row(f, "recompute", c->recompute_s, T);
    row(f, "tp comm", c->tp_comm_s, T);
    row(f, "cp comm", c->cp_comm_s, T);
    row(f, "ep comm", c->ep_comm_s, T);
    row(f, "pp comm", c->pp_comm_s, T);
    row(f, "bubble", c->bubble_s, T);
    if (c->dp_comm_total_s > 0)
        fprintf(f, "  %-16s %10.4f s  %5.1f%%  (of %.4f s, the rest overlapped)\n", "dp comm",
                c->dp_comm_s, 100 * c->dp_comm_s / T, c->dp_comm_total_s);
    row(f, "optimizer", c->optimizer_s, T);
    row(f, "embedding sync", c->other_s, T);
    fprintf(f,
            "per GPU: %.1f TFLOP/s model (MFU %.1f%%), %.1f TFLOP/s hardware (HFU %.1f%%) of "
            "%.1f dense %s\n",
            c->model_tflops_per_gpu, 100 * c->mfu, c->hardware_tflops_per_gpu, 100 * c->hfu,
            c->peak_tflops, dp_gemm_name(dp_layout_gemm(l)));
    fprintf(f, "FLOPs: %s\n", flop_convention);
    if (dp_layout_gemm(l) == DP_GEMM_FP8)
        fprintf(f,
                "MFU of FP8 runs: against the dense FP8 peak (%.1f), as MosaicML's and NVIDIA's "
                "benchmarks report it; the attention and the output layer run at the %.1f of "
                "%s\n",
                c->peak_tflops, cl->gpu.peak_tflops[l->precision], dp_precision_name(l->precision));
}

void cli_placement_text(FILE *f, const struct dp_step_cost *c, const struct dp_layout *l)
{
    fprintf(f, "placement (Megatron order: TP fastest, then CP, DP, PP%s):\n",
            l->ep > 1 || dp_layout_etp(l) != l->tp ? "; experts: ETP, EP, then EDP" : "");
    fprintf(f, "  tp=%-3d consecutive ranks         %s\n", l->tp, c->tp_path.desc);
    if (l->cp > 1)
        fprintf(f, "  cp=%-3d ring, stride %-5d        %s\n", l->cp, l->tp, c->cp_path.desc);
    /* Gradients are reduced over dp x cp ranks, tp apart (Megatron-Core's dp-cp group). */
    char what[40];
    if (l->cp > 1)
        snprintf(what, sizeof what, "x cp=%d, stride %d", l->cp, l->tp);
    else
        snprintf(what, sizeof what, "stride %d", l->tp);
    fprintf(f, "  dp=%-3d %-25s %s\n", l->dp, what, c->dp_path.desc);
    if (l->pp > 1)
        fprintf(f, "  pp=%-3d stride %-5d              %s\n", l->pp, l->tp * l->cp * l->dp,
                c->pp_path.desc);
    int etp = dp_layout_etp(l);
    if (etp != l->tp && etp > 1)
        fprintf(f, "  etp=%-2d consecutive ranks         %s\n", etp, c->etp_path.desc);
    if (l->ep > 1)
        fprintf(f, "  ep=%-3d all-to-all, stride %-5d  %s\n", l->ep, etp, c->ep_path.desc);
    if (l->ep > 1 || etp != l->tp)
        fprintf(f, "  edp=%-2d stride %-5d              %s\n", dp_layout_edp(l), etp * l->ep,
                c->edp_path.desc);
}
