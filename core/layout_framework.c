/*
 * The rules each framework (Megatron-LM, torchtitan, DeepSpeed) sets on a layout:
 * dp_layout_check_framework, with the error naming the JSON field or CLI option.
 */
#include "core.h"

#include <stdio.h>

/* The name of layout field `json` where the error is reported: "FILE: runs[0].layout.zero"
 * under a JSON `where`, "--zero" on the command line (`cli`, or the JSON name with '-'). */
static void field_name(const char *where, const char *json, const char *cli, char *out, size_t cap)
{
    if (where) {
        snprintf(out, cap, "%s.%s", where, json);
        return;
    }
    if (cli) {
        snprintf(out, cap, "%s", cli);
        return;
    }
    size_t n = (size_t)snprintf(out, cap, "--");
    for (const char *c = json; *c && n + 1 < cap; c++)
        out[n++] = *c == '_' ? '-' : *c;
    out[n] = '\0';
}

int dp_layout_check_framework(const struct dp_layout *l, const char *where, struct dp_err *err)
{
    char f[320];
    const char *fw = dp_framework_name(l->framework);
    const int dpcp = l->dp * l->cp;
    if (l->shard_group < 0 || (l->shard_group > 0 && dpcp % l->shard_group)) {
        field_name(where, "shard_group", NULL, f, sizeof f);
        return dp_err_set(err, DP_EUSAGE,
                          "%s: %s shards within groups that divide the dp x cp = %d "
                          "data-parallel ranks (and replicates across them), got %d",
                          f, fw, dpcp, l->shard_group);
    }
    if (l->shard_group > 0 && l->shard_group < dpcp && l->zero < 1) {
        field_name(where, "shard_group", NULL, f, sizeof f);
        return dp_err_set(err, DP_EUSAGE,
                          "%s: hybrid sharding (%d of the %d data-parallel ranks per shard "
                          "group) needs a sharded optimizer: zero 1-3, got zero 0",
                          f, l->shard_group, dpcp);
    }
    if (l->recompute == DP_RECOMPUTE_SELECTIVE && (l->recompute_modules & ~(unsigned)DP_RCM_ALL)) {
        field_name(where, "recompute_modules", NULL, f, sizeof f);
        return dp_err_set(err, DP_EUSAGE, "%s: unknown module bits 0x%x", f, l->recompute_modules);
    }
    if (dp_layout_schedules(l) > 1 && l->framework != DP_FW_TORCHTITAN) {
        field_name(where, "local_batch", NULL, f, sizeof f);
        return dp_err_set(err, DP_EUSAGE,
                          "%s: %s runs all of a step's micro-batches in one pipeline schedule; "
                          "a schedule per gradient-accumulation step (%lld of the %lld "
                          "sequences per data-parallel rank) is torchtitan's",
                          f, fw, (long long)l->local_batch,
                          (long long)(dp_layout_microbatches(l) * l->mbs));
    }
    if (l->loss_chunks > 1 && l->framework != DP_FW_TORCHTITAN) {
        field_name(where, "loss_chunks", NULL, f, sizeof f);
        return dp_err_set(err, DP_EUSAGE,
                          "%s: a loss over slices of the tokens is torchtitan's "
                          "(ChunkedLossWrapper); %s computes it over all tokens at once, got %d "
                          "chunks",
                          f, fw, l->loss_chunks);
    }
    /* (with zero 0-1 there is no FSDP, and with pp 1 every micro-batch syncs anyway: no-ops) */
    if (l->fsdp_per_microbatch && l->framework != DP_FW_TORCHTITAN) {
        field_name(where, "fsdp_per_microbatch", NULL, f, sizeof f);
        return dp_err_set(err, DP_EUSAGE,
                          "%s: FSDP's per-micro-batch gather and reduce-scatter under pipeline "
                          "parallelism is a torchtitan-framework (FSDP2) behaviour, got %s",
                          f, fw);
    }
    /* Megatron-Core builds MTP layers (MultiTokenPredictionBlock); torchtitan's DeepSeek-V3
     * and DeepSpeed train without them. */
    if (l->mtp_layers > 0 && l->framework != DP_FW_MEGATRON) {
        field_name(where, "mtp_layers", NULL, f, sizeof f);
        return dp_err_set(err, DP_EUSAGE,
                          "%s: multi-token prediction is Megatron-Core's (--mtp-num-layers); %s "
                          "trains the next-token loss only, got %d MTP layers",
                          f, fw, l->mtp_layers);
    }
    /* DualPipeV is PyTorch's ScheduleDualPipeV (torchtitan, PithTrain's own); Megatron-Core
     * and DeepSpeed have no DualPipe schedule. */
    if (l->schedule == DP_SCHED_DUALPIPEV && l->framework != DP_FW_TORCHTITAN) {
        field_name(where, "pipeline_schedule", NULL, f, sizeof f);
        return dp_err_set(err, DP_EUSAGE,
                          "%s: dualpipev is PyTorch's ScheduleDualPipeV (torchtitan framework); "
                          "%s runs 1F1B, got dualpipev",
                          f, fw);
    }
    /* Muon: Megatron-Core's emerging optimizers run with DDP or the layer-wise distributed
     * optimizer, not with Megatron-FSDP (arguments.py: "Emerging optimizer does not support
     * Megatron-FSDP"); FSDP2's is PithTrain's and torchtitan's kind; DeepSpeed's is not
     * modelled. */
    if (l->optimizer == DP_OPT_MUON && l->framework == DP_FW_DEEPSPEED) {
        field_name(where, "optimizer", NULL, f, sizeof f);
        return dp_err_set(err, DP_EUSAGE,
                          "%s: muon is priced as Megatron-Core (zero 0-1) and FSDP2 (torchtitan "
                          "framework) run it; DeepSpeed's is not modelled, got deepspeed",
                          f);
    }
    if (l->optimizer == DP_OPT_MUON && l->framework == DP_FW_MEGATRON && l->zero >= 2) {
        field_name(where, "optimizer", NULL, f, sizeof f);
        return dp_err_set(err, DP_EUSAGE,
                          "%s: megatron runs muon with DDP or its layer-wise distributed optimizer "
                          "(zero 0-1), not Megatron-FSDP, got zero %d",
                          f, l->zero);
    }
    /* FP8 attention is Transformer Engine's (fp8_dpa); torchtitan's float8 (torchao) and
     * DeepSpeed quantize the linear layers only. */
    if (l->fp8_attention && l->framework != DP_FW_MEGATRON) {
        field_name(where, "fp8_attention", NULL, f, sizeof f);
        return dp_err_set(err, DP_EUSAGE,
                          "%s: FP8 attention is Transformer Engine's under Megatron-Core "
                          "(--fp8-dot-product-attention); %s runs the attention in bf16, got true",
                          f, fw);
    }
    switch (l->framework) {
    case DP_FW_MEGATRON:
        /* Megatron-LM shards gradients and parameters only with Megatron-FSDP
         * (--data-parallel-sharding-strategy optim_grads / optim_grads_params), which
         * dplan (and its export) takes without pipeline parallelism; the distributed
         * optimizer (zero 1) runs with any pp. */
        if (l->zero >= 2 && l->pp > 1) {
            field_name(where, "zero", NULL, f, sizeof f);
            return dp_err_set(err, DP_EUSAGE,
                              "%s: megatron shards gradients and parameters (zero 2-3, "
                              "Megatron-FSDP) only with pp 1; with pipeline parallelism it runs "
                              "zero 0 or 1 (--use-distributed-optimizer), got zero %d with pp %d",
                              f, l->zero, l->pp);
        }
        if (l->recompute == DP_RECOMPUTE_OP || l->recompute_method == DP_RC_EVERY) {
            field_name(where, l->recompute == DP_RECOMPUTE_OP ? "recompute" : "recompute_method",
                       NULL, f, sizeof f);
            return dp_err_set(err, DP_EUSAGE,
                              "%s: megatron recomputes selective (--recompute-modules) or full "
                              "(--recompute-method uniform or block), got %s",
                              f,
                              l->recompute == DP_RECOMPUTE_OP ? "op (torchtitan's per-op SAC)"
                                                              : "every (torchtitan's layer SAC)");
        }
        if (l->loss == DP_LOSS_COMPILED) {
            field_name(where, "loss", NULL, f, sizeof f);
            return dp_err_set(err, DP_EUSAGE,
                              "%s: megatron computes its cross entropy vocab-parallel, fused (TE) "
                              "or fused-native, not under torch.compile, got compiled",
                              f);
        }
        return 0;
    case DP_FW_TORCHTITAN:
        /* FSDP2 (fully_shard) always shards the parameters; reshard_after_forward False is
         * ZeRO-2 (torchtitan docs/fsdp.md); data_parallel_replicate_degree alone is DDP. */
        if (l->zero == 1) {
            field_name(where, "zero", NULL, f, sizeof f);
            return dp_err_set(err, DP_EUSAGE,
                              "%s: torchtitan shards with FSDP2: zero 0 (replicate), 2 "
                              "(reshard_after_forward never) or 3, got zero 1",
                              f);
        }
        if (l->zero == 0 && l->cp > 1) {
            field_name(where, "zero", NULL, f, sizeof f);
            return dp_err_set(err, DP_EUSAGE,
                              "%s: torchtitan applies FSDP2 over the cp ranks whenever cp > 1: "
                              "zero 2 or 3, got zero 0 with cp %d",
                              f, l->cp);
        }
        if (l->recompute == DP_RECOMPUTE_SELECTIVE ||
            (l->recompute == DP_RECOMPUTE_FULL && l->recompute_method != DP_RC_EVERY &&
             l->recompute_layers > 1)) {
            field_name(where,
                       l->recompute == DP_RECOMPUTE_SELECTIVE ? "recompute" : "recompute_method",
                       NULL, f, sizeof f);
            return dp_err_set(err, DP_EUSAGE,
                              "%s: torchtitan checkpoints none, op (selective_ac_option op), "
                              "full (every block) or full with recompute_method every N "
                              "(selective_ac_option N), got %s",
                              f,
                              l->recompute == DP_RECOMPUTE_SELECTIVE ? "selective (Megatron's)"
                                                                     : "block or uniform chunks");
        }
        if (l->precision == DP_FP16) {
            field_name(where, "precision", NULL, f, sizeof f);
            return dp_err_set(err, DP_EUSAGE,
                              "%s: torchtitan trains bf16 or fp32 (mixed_precision_param), got "
                              "fp16",
                              f);
        }
        /* Half gradients are FSDP2's reduce_dtype bf16 (MixedPrecisionPolicy; NeMo
         * Automodel's default), which torchtitan's own config does not offer. */
        return 0;
    case DP_FW_DEEPSPEED:
        if (l->zero >= 2 && l->pp > 1) {
            field_name(where, "zero", NULL, f, sizeof f);
            return dp_err_set(err, DP_EUSAGE,
                              "%s: deepspeed runs zero 2 and 3 only without pipeline parallelism "
                              "(runtime/pipe/engine.py: 'ZeRO-2 and ZeRO-3 are incompatible with "
                              "pipeline parallelism'), got zero %d with pp %d",
                              f, l->zero, l->pp);
        }
        if (l->cp > 1) {
            field_name(where, "cp", NULL, f, sizeof f);
            return dp_err_set(err, DP_EUSAGE,
                              "%s: deepspeed has no ring context parallelism (its sequence "
                              "parallelism is Ulysses all-to-all): cp 1, got %d",
                              f, l->cp);
        }
        if (l->vpp > 1) {
            field_name(where, "vpp", NULL, f, sizeof f);
            return dp_err_set(err, DP_EUSAGE,
                              "%s: deepspeed's pipeline engine runs one chunk per stage "
                              "(no interleaving): vpp 1, got %d",
                              f, l->vpp);
        }
        /* DeepSpeed's tensor parallelism (AutoTP, or Megatron-DeepSpeed's mpu) shards the
         * linear layers; the norms and dropout stay replicated, so there is no sequence
         * parallelism to ask for (export/deepspeed.c says the same). */
        if (l->sp && l->tp > 1) {
            field_name(where, "sp", NULL, f, sizeof f);
            return dp_err_set(err, DP_EUSAGE,
                              "%s: deepspeed's tensor parallelism shards the linear layers only, "
                              "not the norms and dropout: no sequence parallelism, got sp with "
                              "tp %d",
                              f, l->tp);
        }
        if (l->recompute == DP_RECOMPUTE_SELECTIVE || l->recompute == DP_RECOMPUTE_OP ||
            (l->recompute == DP_RECOMPUTE_FULL && l->recompute_method != DP_RC_UNIFORM &&
             l->recompute_layers > 0)) {
            field_name(where, l->recompute == DP_RECOMPUTE_FULL ? "recompute_method" : "recompute",
                       NULL, f, sizeof f);
            return dp_err_set(err, DP_EUSAGE,
                              "%s: deepspeed checkpoints whole layers (activation_checkpointing, "
                              "every layer or uniform chunks of layers): none or full, got %s",
                              f,
                              l->recompute == DP_RECOMPUTE_FULL ? "block or every"
                                                                : dp_recompute_name(l->recompute));
        }
        if (l->shard_group > 0 && l->shard_group < dpcp && l->zero < 3) {
            field_name(where, "shard_group", NULL, f, sizeof f);
            return dp_err_set(err, DP_EUSAGE,
                              "%s: deepspeed shards in groups (MiCS, mics_shard_size) only with "
                              "zero 3, got zero %d",
                              f, l->zero);
        }
        return 0;
    default: break;
    }
    field_name(where, "framework", NULL, f, sizeof f);
    return dp_err_set(err, DP_EUSAGE, "%s: expected megatron, torchtitan or deepspeed", f);
}
