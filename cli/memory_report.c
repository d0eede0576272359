/*
 * The memory report shared by `dplan memory` and (later) `dplan estimate`:
 * a per-stage table, the verdict, how the peak stage's terms were derived,
 * and the same as a JSON object whose field names are stable.
 */
#include "memory_report.h"
#include "cli.h"

#include <cjson/cJSON.h>
#include <string.h>

cJSON *cli_mem_json(const struct dp_mem_report *r, const struct dp_layout *l,
                    const struct dp_model *m)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddBoolToObject(o, "fits", r->fits);
    cJSON_AddNumberToObject(o, "capacity_bytes", (double)r->capacity_bytes);
    cJSON_AddNumberToObject(o, "peak_bytes", (double)r->peak_bytes);
    cJSON_AddNumberToObject(o, "peak_stage", r->peak_stage);
    cJSON_AddNumberToObject(o, "headroom_bytes", (double)(r->capacity_bytes - r->peak_bytes));
    cJSON_AddNumberToObject(o, "microbatches", (double)r->microbatches);
    cJSON_AddStringToObject(o, "framework", dp_framework_name(l->framework));
    cJSON_AddStringToObject(o, "peak_quantity",
                            "device total: reserved by the PyTorch caching allocator + CUDA "
                            "context + NCCL buffers (what nvidia-smi shows)");
    cJSON_AddNumberToObject(o, "peak_allocated_bytes",
                            (double)r->stage[r->peak_stage].allocated_bytes);
    cJSON_AddNumberToObject(o, "peak_reserved_bytes",
                            (double)r->stage[r->peak_stage].reserved_bytes);
    cJSON *st = cJSON_AddArrayToObject(o, "stages");
    for (int i = 0; i < r->nstages; i++) {
        const struct dp_mem_stage *s = &r->stage[i];
        cJSON *e = cJSON_CreateObject();
        cJSON_AddNumberToObject(e, "stage", s->stage);
        cJSON_AddNumberToObject(e, "layers", s->layers);
        /* 0-based, inclusive; a stage of an interleaved layout holds vpp chunks, which are
         * not contiguous: then only "chunks" */
        if (l->vpp <= 1) {
            int f0, k0;
            dp_layout_chunk_layers(l, m, s->stage, 0, &f0, &k0);
            if (k0 > 0) {
                cJSON_AddNumberToObject(e, "first_layer", f0);
                cJSON_AddNumberToObject(e, "last_layer", f0 + k0 - 1);
            } else { /* the embedding or the loss alone */
                cJSON_AddNullToObject(e, "first_layer");
                cJSON_AddNullToObject(e, "last_layer");
            }
        } else {
            cJSON *ch = cJSON_AddArrayToObject(e, "chunks");
            for (int c = 0; c < l->vpp; c++) {
                int f, k;
                dp_layout_chunk_layers(l, m, s->stage, c, &f, &k);
                cJSON *r2 = cJSON_CreateObject();
                if (k > 0) {
                    cJSON_AddNumberToObject(r2, "first_layer", f);
                    cJSON_AddNumberToObject(r2, "last_layer", f + k - 1);
                } else {
                    cJSON_AddNullToObject(r2, "first_layer");
                    cJSON_AddNullToObject(r2, "last_layer");
                }
                cJSON_AddItemToArray(ch, r2);
            }
        }
        if (dp_model_mixed_layers(m)) {
            cJSON_AddNumberToObject(e, "dense_layers", s->kind_layers[DP_LAYER_DENSE]);
            cJSON_AddNumberToObject(e, "moe_layers", s->kind_layers[DP_LAYER_MOE]);
        }
        cJSON_AddNumberToObject(e, "params", (double)s->params);
        cJSON_AddNumberToObject(e, "params_bytes", (double)s->params_bytes);
        if (s->fp8_copy_bytes > 0)
            cJSON_AddNumberToObject(e, "fp8_copy_bytes", (double)s->fp8_copy_bytes);
        cJSON_AddNumberToObject(e, "grads_bytes", (double)s->grads_bytes);
        cJSON_AddNumberToObject(e, "optimizer_bytes", (double)s->optimizer_bytes);
        cJSON_AddNumberToObject(e, "activations_bytes", (double)s->activations_bytes);
        cJSON_AddNumberToObject(e, "other_bytes", (double)s->other_bytes);
        cJSON_AddNumberToObject(e, "total_bytes", (double)s->total_bytes);
        cJSON_AddNumberToObject(e, "inflight_microbatches", s->inflight);
        cJSON *a = cJSON_AddObjectToObject(e, "activations");
        cJSON_AddNumberToObject(a, "layers_bytes", (double)s->act_layers_bytes);
        cJSON_AddNumberToObject(a, "embedding_bytes", (double)s->act_embed_bytes);
        cJSON_AddNumberToObject(a, "head_bytes", (double)s->act_head_bytes);
        cJSON_AddNumberToObject(a, "recompute_working_bytes", (double)s->act_working_bytes);
        cJSON_AddNumberToObject(a, "loss_bytes", (double)s->act_loss_bytes);
        cJSON *ot = cJSON_AddObjectToObject(e, "other");
        cJSON_AddNumberToObject(ot, "comm_bytes", (double)s->comm_bytes);
        cJSON_AddNumberToObject(ot, "runtime_bytes", (double)s->runtime_bytes);
        cJSON_AddNumberToObject(ot, "cuda_context_bytes", (double)s->context_bytes);
        cJSON_AddNumberToObject(ot, "nccl_bytes", (double)s->nccl_bytes);
        cJSON_AddNumberToObject(ot, "workspace_bytes", (double)s->workspace_bytes);
        cJSON_AddNumberToObject(ot, "allocator_slack_bytes", (double)s->slack_bytes);
        /* The quantities a measurement reports: torch's allocated and reserved peaks;
         * total_bytes is the device total (nvidia-smi) that must fit. */
        cJSON_AddNumberToObject(e, "allocated_bytes", (double)s->allocated_bytes);
        cJSON_AddNumberToObject(e, "reserved_bytes", (double)s->reserved_bytes);
        cJSON_AddItemToArray(st, e);
    }
    return o;
}

/* "stage 0 (20L: 0-19)": the stage, its layer count and its layers (0-based). */
static void stage_label(const struct dp_mem_report *r, int i, const struct dp_layout *l,
                        const struct dp_model *m, char *out, size_t cap)
{
    const struct dp_mem_stage *s = &r->stage[i];
    char ranges[64];
    dp_layout_stage_ranges(l, m, s->stage, ranges, sizeof ranges);
    char mtp[16] = "";
    if (l->mtp_layers > 0 && s->has_head)
        snprintf(mtp, sizeof mtp, " + %d MTP", l->mtp_layers);
    if (dp_model_mixed_layers(m) && s->kind_layers[DP_LAYER_DENSE] > 0)
        snprintf(out, cap, "stage %d (%dL: %s, %d dense%s)", s->stage, s->layers, ranges,
                 s->kind_layers[DP_LAYER_DENSE], mtp);
    else
        snprintf(out, cap, "stage %d (%dL: %s%s)", s->stage, s->layers, ranges, mtp);
}

void cli_mem_table(FILE *f, const struct dp_mem_report *r, const struct dp_layout *l,
                   const struct dp_model *m)
{
    /* The stage column is as wide as its longest label: "stage 0 (20L: 0-19)". */
    char label[96];
    int w = (int)strlen("GiB per GPU");
    for (int i = 0; i < r->nstages; i++) {
        stage_label(r, i, l, m, label, sizeof label);
        if ((int)strlen(label) > w)
            w = (int)strlen(label);
    }
    fprintf(f, "%-*s %8s %8s %9s %11s %7s %8s\n", w, "GiB per GPU", "params", "grads", "optimizer",
            "activations", "other", "total");
    for (int i = 0; i < r->nstages; i++) {
        const struct dp_mem_stage *s = &r->stage[i];
        stage_label(r, i, l, m, label, sizeof label);
        fprintf(f, "%-*s %8.2f %8.2f %9.2f %11.2f %7.2f %8.2f%s\n", w, label,
                cli_gib(s->params_bytes), cli_gib(s->grads_bytes), cli_gib(s->optimizer_bytes),
                cli_gib(s->activations_bytes), cli_gib(s->other_bytes), cli_gib(s->total_bytes),
                s->total_bytes > r->capacity_bytes ? "  OOM" : "");
    }
}

void cli_mem_tight_note(FILE *f, double margin)
{
    fprintf(f,
            "tight: under %g%% headroom (--memory-margin), within the memory model's measured "
            "error (`dplan validate --memory`): the run may go out of memory or thrash the "
            "caching allocator\n",
            100 * margin);
}

void cli_mem_verdict(FILE *f, const struct dp_mem_report *r, double margin)
{
    const bool tight = dp_mem_tight(r->peak_bytes, r->capacity_bytes, margin);
    int64_t head = r->capacity_bytes - r->peak_bytes;
    if (r->fits)
        fprintf(f,
                "FITS%s: peak %.2f GiB on stage %d, capacity %.2f GiB, headroom %.2f GiB "
                "(%.1f%%)\n",
                tight ? " (tight)" : "", cli_gib(r->peak_bytes), r->peak_stage,
                cli_gib(r->capacity_bytes), cli_gib(head),
                100.0 * (double)head / (double)r->capacity_bytes);
    if (r->fits && tight)
        cli_mem_tight_note(f, margin);
    if (!r->fits)
        fprintf(f, "OOM: stage %d needs %.2f GiB per GPU, capacity %.2f GiB (%.2f GiB over)\n",
                r->peak_stage, cli_gib(r->peak_bytes), cli_gib(r->capacity_bytes), cli_gib(-head));
}

void cli_mem_balance(FILE *f, const struct dp_mem_report *r)
{
    if (r->nstages > 1)
        fprintf(f, "balance: stages range %.2f-%.2f GiB (spread %.1f%% of peak)\n",
                cli_gib(r->min_bytes), cli_gib(r->peak_bytes),
                100.0 * (double)(r->peak_bytes - r->min_bytes) / (double)r->peak_bytes);
}

void cli_mem_quantity(FILE *f, const struct dp_layout *l, const struct dp_mem_report *r)
{
    const struct dp_mem_stage *s = &r->stage[r->peak_stage];
    if (s->context_bytes == 0 && s->nccl_bytes == 0) {
        fprintf(f, "quantity: the model's bytes + --overhead-gib (allocated %.2f GiB)\n",
                cli_gib(s->allocated_bytes));
        return;
    }
    fprintf(f,
            "quantity: peak = device total (nvidia-smi); stage %d: allocated %.2f GiB (torch "
            "max_memory_allocated, Megatron's log), reserved %.2f GiB (max_memory_reserved, "
            "torchtitan's log), + CUDA context and NCCL %.2f GiB (%s)\n",
            s->stage, cli_gib(s->allocated_bytes), cli_gib(s->reserved_bytes),
            cli_gib(s->context_bytes + s->nccl_bytes), dp_framework_name(l->framework));
}

void cli_mem_derivation(FILE *f, const struct dp_layout *l, const struct dp_mem_report *r)
{
    const struct dp_mem_stage *s = &r->stage[r->peak_stage];
    int pb, gb, ob;
    dp_mem_bytes_per_param(l, &pb, &gb, &ob);
    int64_t shard = dp_layout_shard(l);
    fprintf(f, "how (stage %d, each GPU):\n", s->stage);
    char cnt[32];
    fprintf(f, "  params       %s params held x %d B (%s)%s\n",
            cli_count_short(s->params, cnt, sizeof cnt), pb,
            pb == 4 && l->precision != DP_FP32 ? "fp32, the master copy (FSDP2)"
                                               : dp_precision_name(l->precision),
            l->zero >= 3 ? ", sharded over dp" : "");
    if (s->fp8_copy_bytes > 0 && l->fp8_params)
        fprintf(f,
                "               + %.2f GiB block scales of the FP8 weights (their FP8 copy and "
                "its transpose stand in for the %s bytes above)\n",
                cli_gib(s->fp8_copy_bytes), dp_precision_name(l->precision));
    else if (s->fp8_copy_bytes > 0)
        fprintf(f,
                "               + %.2f GiB FP8 copies of the linear weights (the FP8 weight and "
                "its transpose, cached for the step; --fp8-params stores the weights in FP8)\n",
                cli_gib(s->fp8_copy_bytes));
    fprintf(f, "  grads        x %d B (%s)%s\n", gb, gb == 4 ? "fp32 accumulation" : "half",
            l->zero >= 2 ? ", sharded over dp" : "");
    const bool half_states = l->optimizer_dtype != DP_FP32;
    const char *master = l->precision == DP_FP32 || l->framework == DP_FW_TORCHTITAN ? ""
                         : !half_states                       ? "fp32 master + "
                         : l->optimizer_dtype != l->precision ? "master + "
                                                              : "";
    fprintf(f, "  optimizer    x %d B (%s%s%s)%s\n", ob, master,
            l->optimizer == DP_OPT_ADAM   ? "Adam m, v"
            : l->optimizer == DP_OPT_MUON ? "Muon momentum; Adam m, v for the ends"
                                          : "SGD momentum",
            half_states ? (l->optimizer_dtype == DP_BF16 ? " in bf16" : " in fp16") : "",
            l->zero >= 1 ? "" : ", not sharded");
    if (l->zero >= 1)
        fprintf(f, "               sharded over %lld data-parallel ranks (ZeRO-%d%s)\n",
                (long long)shard, l->zero,
                dp_layout_replicas(l) > 1 ? ", replicated across the HSDP groups" : "");
    fprintf(f, "  activations  %.2f micro-batches in flight x %d layers x %.1f MiB/layer (%s)",
            s->inflight, s->layers, (double)s->act_layer_bytes / 1048576.0,
            dp_recompute_name(l->recompute));
    if (s->act_head_bytes) {
        fprintf(f, " + output layer and loss %.2f GiB (%s cross entropy",
                cli_gib(s->act_head_bytes), dp_loss_name(dp_layout_loss(l)));
        if (l->loss_chunks > 1)
            fprintf(f, ", one of %d slices at a time", l->loss_chunks);
        fputc(')', f);
    }
    if (s->act_working_bytes >= 10 << 20)
        fprintf(f, " + recompute working set %.2f GiB", cli_gib(s->act_working_bytes));
    fputc('\n', f);
    if (s->context_bytes || s->nccl_bytes)
        fprintf(f,
                "  other        CUDA context %.2f + NCCL buffers %.2f + workspaces %.2f GiB, "
                "allocator slack %.2f GiB",
                cli_gib(s->context_bytes), cli_gib(s->nccl_bytes), cli_gib(s->workspace_bytes),
                cli_gib(s->slack_bytes));
    else
        fprintf(f, "  other        runtime %.2f GiB (--overhead-gib)", cli_gib(s->runtime_bytes));
    if (s->comm_bytes)
        fprintf(f, " + communication buffers %.2f GiB", cli_gib(s->comm_bytes));
    fputc('\n', f);
}
