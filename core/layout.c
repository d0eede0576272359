/*
 * Parallel layouts: defaults, the divisibility rules Megatron-LM enforces
 * (megatron/training/arguments.py validate_args), and JSON I/O. Stage and
 * chunk layer counts and the split rules are in split.c; each framework's own
 * rules (dp_layout_check_framework) are in layout_framework.c.
 */
#include "core.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <string.h>

static const char *const recompute_names[] = {"none", "selective", "full", "op"};
static const char *const method_names[] = {"block", "uniform", "every"};
static const char *const loss_names[] = {"default", "vocab-parallel", "fused",
                                         "unfused", "fused-native",   "compiled"};
static const char *const framework_names[] = {"megatron", "torchtitan", "deepspeed"};
static const char *const module_names[] = {
    "core_attn", "mlp", "layernorm", "moe_act", "moe", "shared_experts", "mla_up_proj"};
#define NMODULES 7

const char *dp_framework_name(enum dp_framework f)
{
    return (unsigned)f < DP_FRAMEWORKS ? framework_names[f] : "?";
}
int dp_framework_parse(const char *s)
{
    for (int i = 0; i < DP_FRAMEWORKS; i++)
        if (strcmp(s, framework_names[i]) == 0)
            return i;
    return -1;
}
const char *dp_loss_name(enum dp_loss k)
{
    return (unsigned)k < DP_LOSSES ? loss_names[k] : "?";
}
int dp_recompute_module_parse(const char *name)
{
    for (int i = 0; i < NMODULES; i++)
        if (strcmp(name, module_names[i]) == 0)
            return 1 << i;
    return -1;
}
void dp_recompute_modules_format(unsigned mods, char *out, size_t cap)
{
    size_t n = 0;
    out[0] = '\0';
    if (!mods)
        mods = DP_RCM_CORE_ATTN;
    for (int i = 0; i < NMODULES && n < cap; i++)
        if (mods & (1u << i))
            n += (size_t)snprintf(out + n, cap - n, "%s%s", n ? "," : "", module_names[i]);
}

enum dp_loss dp_layout_loss(const struct dp_layout *l)
{
    if (l->loss != DP_LOSS_DEFAULT)
        return l->loss;
    /* Megatron-Core's default is its vocab-parallel cross entropy (cross_entropy_loss_fusion
     * False, model_parallel_config.py); torchtitan's cross_entropy_loss and the Hugging Face
     * models DeepSpeed trains up-cast the logits and call F.cross_entropy. */
    return l->framework == DP_FW_MEGATRON ? DP_LOSS_VOCAB_PARALLEL : DP_LOSS_UNFUSED;
}
static const char *const precision_names[] = {"bf16", "fp16", "fp32"};
static const char *const optimizer_names[] = {"adam", "sgd", "muon"};
static const char *const schedule_names[] = {"1f1b", "dualpipev"};

const char *dp_pp_schedule_name(enum dp_pp_schedule s)
{
    return schedule_names[s];
}

const char *dp_optimizer_name(enum dp_optimizer o)
{
    return optimizer_names[o];
}
static const char *const gemm_names[] = {"default", "bf16", "fp16", "tf32", "fp32", "fp8"};
static const char *const recipe_names[] = {"delayed", "current", "rowwise", "blockwise", "mxfp8"};
static const char *const format_names[] = {"hybrid", "e4m3"};
static const char *const attn_names[] = {"default", "flash2", "flash3", "cudnn",
                                         "triton",  "flash1", "flex"};

const char *dp_attn_name(enum dp_attn a)
{
    return (unsigned)a < DP_ATTNS ? attn_names[a] : "?";
}

int dp_attn_parse(const char *s)
{
    for (int i = 1; i < DP_ATTNS; i++)
        if (strcmp(s, attn_names[i]) == 0)
            return i;
    return -1;
}

const char *dp_gemm_name(enum dp_gemm g)
{
    return (unsigned)g < DP_GEMMS ? gemm_names[g] : "?";
}
const char *dp_fp8_recipe_name(enum dp_fp8_recipe r)
{
    return recipe_names[r];
}
const char *dp_fp8_format_name(enum dp_fp8_format f)
{
    return format_names[f];
}
int dp_gemm_parse(const char *s)
{
    for (int i = 1; i < DP_GEMMS; i++)
        if (strcmp(s, gemm_names[i]) == 0)
            return i;
    return -1;
}
int dp_fp8_recipe_parse(const char *s)
{
    /* torchao calls per-tensor current scaling "tensorwise" (Float8LinearRecipeName). */
    if (strcmp(s, "tensorwise") == 0)
        return DP_FP8_CURRENT;
    for (int i = 0; i < DP_FP8_RECIPES; i++)
        if (strcmp(s, recipe_names[i]) == 0)
            return i;
    return -1;
}

enum dp_gemm dp_layout_gemm(const struct dp_layout *l)
{
    if (l->gemm != DP_GEMM_DEFAULT)
        return l->gemm;
    switch (l->precision) {
    case DP_FP16: return DP_GEMM_FP16;
    case DP_FP32: return DP_GEMM_FP32;
    default: return DP_GEMM_BF16;
    }
}

bool dp_layout_mxfp8(const struct dp_layout *l)
{
    return dp_layout_gemm(l) == DP_GEMM_FP8 && l->fp8_recipe == DP_FP8_MXFP8;
}

/* Megatron keeps MXFP8 weights (--fp8-param-gather with the mxfp8 recipe) as Transformer
 * Engine MXFP8 tensors but gathers them in bf16: the distributed optimizer copies its main
 * parameters into the gradient buffer, all-gathers that, and quantizes the result into the
 * weights (--reuse-grad-buf-for-mxfp8-param-ag, which Megatron-Core asserts needs
 * fp8_param_gather; param_and_grad_buffer.py _post_param_sync), since a rowwise-scaled shard
 * cannot give the columnwise copy. */
bool dp_layout_fp8_gather(const struct dp_layout *l)
{
    return dp_layout_gemm(l) == DP_GEMM_FP8 && l->fp8_params && !dp_layout_mxfp8(l);
}

double dp_gpu_peak_tflops(const struct dp_gpu *gpu, enum dp_gemm g, enum dp_precision p)
{
    switch (g) {
    case DP_GEMM_DEFAULT: return gpu->peak_tflops[p];
    case DP_GEMM_BF16: return gpu->peak_tflops[DP_BF16];
    case DP_GEMM_FP16: return gpu->peak_tflops[DP_FP16];
    case DP_GEMM_TF32: return gpu->tf32_tflops;
    case DP_GEMM_FP32: return gpu->peak_tflops[DP_FP32];
    case DP_GEMM_FP8: return gpu->fp8_tflops;
    default: return 0;
    }
}

/* The field an error names beside `field` (the GEMM precision's): on the command line (field
 * "--precision") `option`, in JSON the same path with `key` for gemm_precision. */
static void sibling_field(const char *field, const char *option, const char *key, char *buf,
                          size_t cap)
{
    const char *k = strstr(field, "gemm_precision");
    if (strcmp(field, "--precision") == 0)
        snprintf(buf, cap, "%s", option);
    else if (k)
        snprintf(buf, cap, "%.*s%s", (int)(k - field), field, key);
    else
        snprintf(buf, cap, "%s", field);
}

int dp_layout_check_gpu(const struct dp_layout *l, const struct dp_gpu *gpu, const char *field,
                        struct dp_err *err)
{
    enum dp_gemm g = dp_layout_gemm(l);
    if (dp_gpu_peak_tflops(gpu, g, l->precision) <= 0)
        return dp_err_set(err, DP_EUSAGE,
                          "%s: expected a GPU with %s tensor cores, got %s (its profile has no %s "
                          "peak)",
                          field, g == DP_GEMM_FP8 ? "FP8" : dp_gemm_name(g), gpu->name,
                          dp_gemm_name(g));
    if (g == DP_GEMM_FP8 && gpu->gemm_fp8.eff_max <= 0)
        return dp_err_set(err, DP_EUSAGE,
                          "%s: expected a GPU profile with a gemm_fp8 efficiency curve, got %s",
                          field, gpu->name);
    /* MXFP8's E8M0 block scales are applied by Blackwell's tensor cores (tcgen05 block-scaled
     * MMA); Hopper has no such instruction (Transformer Engine: MXFP8 needs compute
     * capability 10.0). */
    if (g == DP_GEMM_FP8 && l->fp8_recipe == DP_FP8_MXFP8 && !gpu->fp8_block_scaling) {
        char rf[256];
        sibling_field(field, "--fp8-recipe mxfp8", "fp8_recipe", rf, sizeof rf);
        return dp_err_set(err, DP_EUSAGE,
                          "%s: expected a GPU with block-scaled FP8 tensor cores (Blackwell), "
                          "got %s",
                          rf, gpu->name);
    }
    /* Transformer Engine's FP8 attention is cuDNN's fused kernel (FusedAttention backend). */
    enum dp_attn k = l->attn != DP_ATTN_DEFAULT ? l->attn : gpu->attn_default;
    if (l->fp8_attention && k != DP_ATTN_CUDNN) {
        char af[256];
        sibling_field(field, "--fp8-attention", "fp8_attention", af, sizeof af);
        return dp_err_set(err, DP_EUSAGE,
                          "%s: expected cuDNN's fused attention (Transformer Engine runs FP8 "
                          "attention on it), got %s's %s kernel",
                          af, gpu->name, dp_attn_name(k));
    }
    return 0;
}

static const char *const dispatcher_names[] = {"alltoall", "dedup"};
static const char *const routing_names[] = {"random", "round-robin"};

const char *dp_dispatcher_name(enum dp_moe_dispatcher d)
{
    return dispatcher_names[d];
}
const char *dp_routing_name(enum dp_moe_routing r)
{
    return routing_names[r];
}

const char *dp_recompute_name(enum dp_recompute r)
{
    return (unsigned)r < DP_RECOMPUTES ? recompute_names[r] : "?";
}
const char *dp_precision_name(enum dp_precision p)
{
    return precision_names[p];
}
int dp_precision_bytes(enum dp_precision p)
{
    return p == DP_FP32 ? 4 : 2;
}

void dp_layout_default(struct dp_layout *l)
{
    memset(l, 0, sizeof *l);
    l->tp = l->pp = l->dp = l->cp = l->ep = l->vpp = 1;
    l->mbs = 1;
    l->gbs = 1;
    l->zero = 0;
    l->recompute = DP_RECOMPUTE_NONE;
    l->flash_attn = true;
    l->precision = DP_BF16;
    l->grad_fp32 = true;
    l->optimizer = DP_OPT_ADAM;
    l->optimizer_dtype = DP_FP32;
    l->dp_overlap = true;
    l->overlap_param_gather = true; /* follows dp_overlap, as a layout in JSON does */
    l->etp = 0;
    l->moe_capacity = 0;
    l->moe_pad = false;
    l->moe_imbalance = DP_MOE_IMBALANCE_DEFAULT;
}

int64_t dp_padded_vocab(int64_t vocab, int tp)
{
    int64_t m = 128 * (int64_t)tp;
    return (vocab + m - 1) / m * m;
}

void dp_layout_stage_kinds(const struct dp_layout *l, const struct dp_model *m, int stage,
                           struct dp_layer_kinds *out)
{
    memset(out, 0, sizeof *out);
    if (!dp_model_mixed_layers(m)) { /* one kind: no need to find the stage's range */
        out->n[m->experts > 0 ? DP_LAYER_MOE : DP_LAYER_DENSE] =
            dp_layout_stage_layers(l, m, stage);
        return;
    }
    /* Each model chunk's layer range (one chunk without interleaving), by kind. */
    int v = l->vpp > 1 ? l->vpp : 1;
    for (int c = 0; c < v; c++) {
        int first, count;
        dp_layout_chunk_layers(l, m, stage, c, &first, &count);
        struct dp_layer_kinds k;
        dp_model_layer_kinds(m, first, count, &k);
        for (int i = 0; i < DP_LAYER_KINDS; i++)
            out->n[i] += k.n[i];
    }
}

int dp_layout_validate(const struct dp_layout *l, const struct dp_model *m, int gpus,
                       struct dp_err *err)
{
    if (l->tp < 1 || l->pp < 1 || l->dp < 1 || l->cp < 1 || l->ep < 1 || l->vpp < 1)
        return dp_err_set(err, DP_EINFEASIBLE, "parallel degrees must be >= 1");
    int64_t world = (int64_t)l->tp * l->pp * l->dp * l->cp;
    if (gpus > 0 && world != gpus)
        return dp_err_set(err, DP_EINFEASIBLE,
                          "tp*pp*dp*cp = %d*%d*%d*%d = %lld does not equal the %d GPUs of the "
                          "cluster",
                          l->tp, l->pp, l->dp, l->cp, (long long)world, gpus);
    if (m->heads % l->tp)
        return dp_err_set(err, DP_EINFEASIBLE, "tp=%d does not divide heads=%lld", l->tp,
                          (long long)m->heads);
    if (m->kv_heads % l->tp)
        return dp_err_set(err, DP_EINFEASIBLE,
                          "tp=%d does not divide kv_heads=%lld (Megatron requires query groups "
                          "divisible by tp)",
                          l->tp, (long long)m->kv_heads);
    /* Dense MLPs and shared experts are split by tp, routed experts by etp. */
    if ((m->experts == 0 || m->moe_dense_layers > 0) && m->ffn_hidden % l->tp)
        return dp_err_set(err, DP_EINFEASIBLE, "tp=%d does not divide ffn_hidden=%lld", l->tp,
                          (long long)m->ffn_hidden);
    if (m->moe_shared_experts > 0 && m->moe_shared_ffn_hidden % l->tp)
        return dp_err_set(err, DP_EINFEASIBLE, "tp=%d does not divide moe.shared_ffn_hidden=%lld",
                          l->tp, (long long)m->moe_shared_ffn_hidden);
    if (l->etp < 0)
        return dp_err_set(err, DP_EINFEASIBLE, "etp must be >= 1 (0: as tp)");
    if (m->experts > 0 && m->moe_ffn_hidden % dp_layout_etp(l))
        return dp_err_set(err, DP_EINFEASIBLE, "%s=%d does not divide moe.ffn_hidden=%lld",
                          l->etp ? "etp" : "tp", dp_layout_etp(l), (long long)m->moe_ffn_hidden);
    if (l->pp > m->layers && l->nchunks == 0)
        return dp_err_set(err, DP_EINFEASIBLE, "pp=%d exceeds layers=%lld", l->pp,
                          (long long)m->layers);
    if ((int64_t)l->pp * l->vpp > DP_MAX_CHUNKS)
        return dp_err_set(err, DP_EINFEASIBLE,
                          "pp x vpp = %d x %d = %lld model chunks exceeds the supported %d", l->pp,
                          l->vpp, (long long)l->pp * l->vpp, DP_MAX_CHUNKS);
    if (l->nchunks > 0) {
        if (l->first_stage_layers || l->last_stage_layers)
            return dp_err_set(err, DP_EINFEASIBLE,
                              "stage_layers and first/last stage layer counts are alternatives: "
                              "give one pipeline split");
        int c[DP_MAX_CHUNKS];
        for (int s = 0; s < l->nchunks && s < DP_MAX_CHUNKS; s++)
            c[s] = l->chunk_layers[s];
        int rc = dp_split_check_v(c, l->nchunks, m->layers, l->pp, l->vpp,
                                  l->schedule == DP_SCHED_DUALPIPEV, "stage_layers", DP_EINFEASIBLE,
                                  err);
        if (rc)
            return rc;
    } else if (l->first_stage_layers || l->last_stage_layers) {
        int c[DP_MAX_CHUNKS];
        int rc = dp_split_first_last(m->layers, l->pp, l->vpp, l->first_stage_layers,
                                     l->last_stage_layers, c, "first/last stage layers",
                                     DP_EINFEASIBLE, err);
        if (rc)
            return rc;
    } else {
        if (m->layers % l->pp)
            return dp_err_set(err, DP_EINFEASIBLE,
                              "layers=%lld cannot be split evenly into pp=%d stages (an uneven "
                              "split needs --stage-layers or another split rule)",
                              (long long)m->layers, l->pp);
        if ((m->layers / l->pp) % l->vpp)
            return dp_err_set(err, DP_EINFEASIBLE,
                              "vpp=%d does not divide the %lld layers per stage (uneven model "
                              "chunks need --stage-layers or another split rule)",
                              l->vpp, (long long)(m->layers / l->pp));
    }
    if (l->mbs < 1 || l->gbs < 1 || l->seq_len < 1)
        return dp_err_set(err, DP_EINFEASIBLE, "mbs, gbs and seq_len must be >= 1");
    if (dp_model_check_seq_len(m, l->seq_len, err))
        return err->code;
    if (l->gbs % (l->mbs * l->dp))
        return dp_err_set(err, DP_EINFEASIBLE,
                          "gbs=%lld is not a multiple of mbs*dp = %lld*%d = %lld",
                          (long long)l->gbs, (long long)l->mbs, l->dp, (long long)(l->mbs * l->dp));
    int64_t M = dp_layout_microbatches(l);
    if (l->local_batch < 0)
        return dp_err_set(err, DP_EINFEASIBLE, "local_batch=%lld: expected sequences, >= 1",
                          (long long)l->local_batch);
    if (l->local_batch > 0 && l->pp > 1) { /* with pp 1 every micro-batch is a pass anyway */
        if (!dp_local_batch_fits(l->local_batch, l->mbs, M * l->mbs))
            return dp_err_set(err, DP_EINFEASIBLE,
                              "local_batch=%lld: expected a multiple of mbs=%lld that divides "
                              "the %lld sequences per data-parallel rank (gbs / dp)",
                              (long long)l->local_batch, (long long)l->mbs,
                              (long long)(M * l->mbs));
        M = l->local_batch / l->mbs; /* what one schedule runs */
    }
    if (l->vpp > 1) {
        if (l->pp == 1)
            return dp_err_set(err, DP_EINFEASIBLE, "vpp=%d needs pp > 1", l->vpp);
        if (M % l->pp)
            return dp_err_set(err, DP_EINFEASIBLE,
                              "interleaving (vpp=%d) needs the micro-batches of a schedule "
                              "(%lld) to be a multiple of pp=%d",
                              l->vpp, (long long)M, l->pp);
    }
    if (l->cp > 1 && l->seq_len % (2 * l->cp))
        return dp_err_set(err, DP_EINFEASIBLE,
                          "cp=%d needs seq_len=%lld divisible by 2*cp (load-balanced chunks)",
                          l->cp, (long long)l->seq_len);
    if (l->sp && l->tp > 1 && l->seq_len % l->tp)
        return dp_err_set(err, DP_EINFEASIBLE,
                          "sequence parallel needs seq_len=%lld divisible by tp=%d",
                          (long long)l->seq_len, l->tp);
    if ((l->ep > 1 || (l->etp && l->etp != l->tp)) && m->experts == 0)
        return dp_err_set(err, DP_EINFEASIBLE, "%s=%d needs a mixture-of-experts model",
                          l->ep > 1 ? "ep" : "etp", l->ep > 1 ? l->ep : l->etp);
    if (m->experts > 0) {
        int etp = dp_layout_etp(l);
        int64_t stage = (int64_t)l->tp * l->cp * l->dp;
        if (m->experts % l->ep)
            return dp_err_set(err, DP_EINFEASIBLE, "ep=%d does not divide experts=%lld", l->ep,
                              (long long)m->experts);
        /* Megatron-Core parallel_state.py: the expert groups fold each stage's
         * tp x cp x dp ranks into etp x ep x edp. */
        if (stage % ((int64_t)l->ep * etp))
            return dp_err_set(err, DP_EINFEASIBLE,
                              "ep*etp = %d*%d does not divide tp*cp*dp = %lld (the expert "
                              "groups regroup each stage's ranks)",
                              l->ep, etp, (long long)stage);
        /* Megatron-Core TransformerConfig.__post_init__: "When using expert parallelism
         * and tensor parallelism, sequence parallelism must be used". */
        if (l->ep > 1 && l->tp > 1 && !l->sp)
            return dp_err_set(err, DP_EINFEASIBLE,
                              "sp: ep=%d with tp=%d needs sequence parallelism (Megatron-Core "
                              "runs expert parallelism with tensor parallelism only under SP)",
                              l->ep, l->tp);
    }
    if (l->moe_capacity < 0 || l->moe_capacity > 1000)
        return dp_err_set(err, DP_EINFEASIBLE,
                          "moe_capacity=%g: expected a capacity factor > 0, or 0 for dropless",
                          l->moe_capacity);
    if (l->moe_pad && l->moe_capacity == 0)
        return dp_err_set(err, DP_EINFEASIBLE,
                          "moe_pad needs a capacity factor (dropless routing has no capacity)");
    /* Megatron-Core TransformerConfig.__post_init__ on overlap_moe_expert_parallel_comm:
     * "only supported with expert model parallelism", a virtual pipeline with pp > 1,
     * "disable full recomputation"; the schedule is Megatron's (combined_1f1b.py). */
    if (l->ep_overlap && l->ep < 2)
        return dp_err_set(err, DP_EINFEASIBLE,
                          "ep_overlap needs ep > 1 (Megatron-Core: 'only supported with expert "
                          "model parallelism')");
    if (l->ep_overlap && l->pp > 1 && l->vpp < 2)
        return dp_err_set(err, DP_EINFEASIBLE,
                          "ep_overlap with pp=%d needs vpp > 1 (Megatron-Core merges forward and "
                          "backward passes only in the interleaved schedule or without a pipeline)",
                          l->pp);
    if (l->ep_overlap && l->recompute == DP_RECOMPUTE_FULL)
        return dp_err_set(err, DP_EINFEASIBLE,
                          "ep_overlap needs recompute other than full (Megatron-Core: 'disable "
                          "full recomputation when enabling overlap_moe_expert_parallel_comm')");
    if (l->ep_overlap && l->recompute == DP_RECOMPUTE_SELECTIVE &&
        (l->recompute_modules & DP_RCM_MOE))
        return dp_err_set(
            err, DP_EINFEASIBLE,
            "ep_overlap needs recompute_modules without moe (Megatron-Core: 'disable "
            "moe in recompute_modules when enabling overlap_moe_expert_parallel_comm')");
    if (l->ep_overlap && l->framework != DP_FW_MEGATRON)
        return dp_err_set(err, DP_EINFEASIBLE,
                          "ep_overlap is Megatron-Core's (--overlap-moe-expert-parallel-comm); "
                          "framework %s does not offer it",
                          dp_framework_name(l->framework));
    if (!(l->moe_imbalance == 0 || (l->moe_imbalance >= 1 && l->moe_imbalance <= 1000)))
        return dp_err_set(err, DP_EINFEASIBLE,
                          "moe_imbalance=%g: expected the busiest rank's load over the mean, >= 1 "
                          "(0: routing statistics)",
                          l->moe_imbalance);
    if (l->shard_group < 0 || (l->shard_group > 0 && (l->dp * l->cp) % l->shard_group))
        return dp_err_set(err, DP_EINFEASIBLE,
                          "shard_group=%d does not divide the dp x cp = %d data-parallel ranks",
                          l->shard_group, l->dp * l->cp);
    if (l->zero < 0 || l->zero > 3)
        return dp_err_set(err, DP_EINFEASIBLE, "zero=%d: expected 0, 1, 2 or 3", l->zero);
    if (l->schedule == DP_SCHED_DUALPIPEV) {
        /* ScheduleDualPipeV: two stages a rank in a V, at least 2 pp micro-batches
         * (DualPipeV.step asserts num_chunks >= pp_size * 2). The split is any list of 2 pp
         * counts in model order (torchtitan's module_names_per_stage, stage s on rank s or
         * 2 pp - 1 - s: pipeline_parallel.py _get_pp_rank_to_stage_indices_mapping, style
         * "v"), or even; not Megatron's first/last stage counts. */
        int64_t nmb = dp_layout_schedule_microbatches(l);
        if (l->vpp != 2 || l->pp < 2)
            return dp_err_set(err, DP_EINFEASIBLE,
                              "pipeline_schedule dualpipev: expected pp >= 2 and vpp 2 (two "
                              "stages a rank in a V), got pp=%d vpp=%d",
                              l->pp, l->vpp);
        if (nmb < 2LL * l->pp)
            return dp_err_set(err, DP_EINFEASIBLE,
                              "pipeline_schedule dualpipev: expected at least 2 x pp = %d "
                              "micro-batches a step, got %lld",
                              2 * l->pp, (long long)nmb);
        if (l->first_stage_layers || l->last_stage_layers || l->mtp_layers > 0 ||
            (l->nchunks == 0 && m->layers % (2 * l->pp)))
            return dp_err_set(err, DP_EINFEASIBLE,
                              "pipeline_schedule dualpipev: expected the %lld layers split over "
                              "the 2 x pp = %d stages evenly or by a stage list (no first/last "
                              "stage counts or multi-token prediction)",
                              (long long)m->layers, 2 * l->pp);
    }
    if (l->mtp_layers < 0 || l->mtp_layers > DP_MAX_MTP)
        return dp_err_set(err, DP_EINFEASIBLE,
                          "mtp_layers=%d: expected 0 to %d multi-token-prediction layers",
                          l->mtp_layers, DP_MAX_MTP);
    /* ChunkedLossWrapper splits the local tokens into equal slices (torch._check
     * "sequence length must be divisible by num_chunks"). */
    if (l->loss_chunks < 0 || l->loss_chunks > (1 << 16) ||
        (l->loss_chunks > 1 && l->cp > 0 && (l->mbs * l->seq_len / l->cp) % l->loss_chunks))
        return dp_err_set(err, DP_EINFEASIBLE,
                          "loss_chunks=%d: expected a count that divides the micro-batch's "
                          "%lld local tokens (mbs x seq_len / cp) into equal slices",
                          l->loss_chunks, (long long)(l->cp > 0 ? l->mbs * l->seq_len / l->cp : 0));
    /* ZeRO-2/3 with pipeline parallelism: DeepSpeed's pipeline engine refuses it, but
     * torchtitan (FSDP2 + PP) and Megatron-FSDP run it; the cost model follows them
     * (costmodel/memory.c dp_mem_states). The planner does not search it. */
    if (l->precision == DP_FP16 && l->ep > 1)
        return dp_err_set(err, DP_EINFEASIBLE,
                          "expert parallelism does not support fp16 (Megatron)");
    return 0;
}

int dp_layout_stage_first_layer(const struct dp_layout *l, const struct dp_model *m, int stage)
{
    int first = 0;
    for (int s = 0; s < stage && s < l->pp; s++)
        first += dp_layout_stage_layers(l, m, s);
    return first;
}

void dp_layout_stage_ranges(const struct dp_layout *l, const struct dp_model *m, int stage,
                            char *out, size_t cap)
{
    size_t n = 0;
    out[0] = '\0';
    int v = l->vpp > 1 ? l->vpp : 1;
    for (int c = 0; c < v && n < cap; c++) {
        int f, k;
        dp_layout_chunk_layers(l, m, stage, c, &f, &k);
        /* two chunks, "...", the last one: enough to read the stride */
        if (v > 4 && c >= 2 && c < v - 1) {
            if (c == 2)
                n += (size_t)snprintf(out + n, cap - n, ",...");
            continue;
        }
        if (k == 0) /* the embedding or the loss alone */
            n += (size_t)snprintf(out + n, cap - n, "%s%s", c ? "," : "",
                                  stage == 0 && c == 0 ? "E" : "L");
        else if (k == 1)
            n += (size_t)snprintf(out + n, cap - n, "%s%d", c ? "," : "", f);
        else
            n += (size_t)snprintf(out + n, cap - n, "%s%d-%d", c ? "," : "", f, f + k - 1);
    }
}

/* " split=19,21,21,19": the chunks' layer counts in model order, as --stage-layers takes
 * them (N*K for runs of 3 or more). Without the model (dp_layout_format) only an explicit
 * list or the given first/last counts can be shown. */
static int format_split(const struct dp_layout *l, const struct dp_model *m, char *out, size_t cap)
{
    int c[DP_MAX_CHUNKS], n = 0;
    if (l->nchunks > 0) {
        for (int s = 0; s < l->nchunks && s < DP_MAX_CHUNKS; s++)
            c[s] = l->chunk_layers[s];
        n = l->nchunks;
    } else if (l->first_stage_layers || l->last_stage_layers) {
        if (!m)
            return l->first_stage_layers && l->last_stage_layers
                       ? snprintf(out, cap, " split=%d/../%d", l->first_stage_layers,
                                  l->last_stage_layers)
                   : l->first_stage_layers
                       ? snprintf(out, cap, " split=%d/..", l->first_stage_layers)
                       : snprintf(out, cap, " split=../%d", l->last_stage_layers);
        n = dp_layout_expand(l, m, c, DP_MAX_CHUNKS);
    }
    if (n < 1)
        return 0;
    int w = snprintf(out, cap, " split=");
    if (w > 0 && (size_t)w < cap)
        dp_split_format_list(c, n, out + w, cap - (size_t)w);
    return (int)strlen(out);
}

void dp_layout_format_model(const struct dp_layout *l, const struct dp_model *m, char *out,
                            size_t cap)
{
    int n = snprintf(out, cap, "tp=%d pp=%d dp=%d", l->tp, l->pp, l->dp);
    if (l->cp > 1)
        n += snprintf(out + n, cap - (size_t)n, " cp=%d", l->cp);
    if (l->ep > 1)
        n += snprintf(out + n, cap - (size_t)n, " ep=%d", l->ep);
    if (l->etp && l->etp != l->tp)
        n += snprintf(out + n, cap - (size_t)n, " etp=%d", l->etp);
    if (l->vpp > 1)
        n += snprintf(out + n, cap - (size_t)n, " vpp=%d", l->vpp);
    if (l->schedule != DP_SCHED_1F1B)
        n += snprintf(out + n, cap - (size_t)n, " %s", schedule_names[l->schedule]);
    n += snprintf(out + n, cap - (size_t)n, " mbs=%lld", (long long)l->mbs);
    if (l->zero)
        n += snprintf(out + n, cap - (size_t)n, " zero=%d", l->zero);
    if (l->recompute != DP_RECOMPUTE_NONE)
        n += snprintf(out + n, cap - (size_t)n, " rc=%s", recompute_names[l->recompute]);
    if (l->sp && l->tp > 1)
        n += snprintf(out + n, cap - (size_t)n, " sp");
    if (l->shard_group > 0 && l->shard_group < l->dp * l->cp && (size_t)n < cap)
        n += snprintf(out + n, cap - (size_t)n, " hsdp=%d", l->shard_group);
    if (l->framework != DP_FW_MEGATRON && (size_t)n < cap)
        n += snprintf(out + n, cap - (size_t)n, " fw=%s", framework_names[l->framework]);
    if ((size_t)n < cap)
        n += format_split(l, m, out + n, cap - (size_t)n);
    if (dp_layout_gemm(l) == DP_GEMM_FP8 && (size_t)n < cap)
        snprintf(out + n, cap - (size_t)n, " fp8%s%s", l->fp8_recipe == DP_FP8_DELAYED ? "" : "-",
                 l->fp8_recipe == DP_FP8_DELAYED ? "" : recipe_names[l->fp8_recipe]);
}

void dp_layout_format(const struct dp_layout *l, char *out, size_t cap)
{
    dp_layout_format_model(l, NULL, out, cap);
}

cJSON *dp_layout_to_json(const struct dp_layout *l)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "tp", l->tp);
    cJSON_AddNumberToObject(o, "pp", l->pp);
    cJSON_AddNumberToObject(o, "dp", l->dp);
    cJSON_AddNumberToObject(o, "cp", l->cp);
    cJSON_AddNumberToObject(o, "ep", l->ep);
    cJSON_AddNumberToObject(o, "vpp", l->vpp);
    cJSON_AddNumberToObject(o, "mbs", (double)l->mbs);
    cJSON_AddNumberToObject(o, "gbs", (double)l->gbs);
    cJSON_AddNumberToObject(o, "seq_len", (double)l->seq_len);
    cJSON_AddNumberToObject(o, "zero", l->zero);
    cJSON_AddStringToObject(o, "recompute", recompute_names[l->recompute]);
    cJSON_AddBoolToObject(o, "sp", l->sp);
    cJSON_AddBoolToObject(o, "flash_attn", l->flash_attn);
    cJSON_AddStringToObject(o, "precision", precision_names[l->precision]);
    cJSON_AddBoolToObject(o, "grad_fp32", l->grad_fp32);
    cJSON_AddStringToObject(o, "optimizer", optimizer_names[l->optimizer]);
    if (l->optimizer_dtype != DP_FP32)
        cJSON_AddStringToObject(o, "optimizer_dtype", precision_names[l->optimizer_dtype]);
    cJSON_AddBoolToObject(o, "dp_overlap", l->dp_overlap);
    enum dp_gemm g = dp_layout_gemm(l);
    cJSON_AddStringToObject(o, "gemm_precision", dp_gemm_name(g));
    if (g == DP_GEMM_FP8) {
        cJSON_AddStringToObject(o, "fp8_recipe", recipe_names[l->fp8_recipe]);
        cJSON_AddStringToObject(o, "fp8_format", format_names[l->fp8_format]);
        cJSON_AddBoolToObject(o, "fp8_params", l->fp8_params);
        if (l->fp8_output)
            cJSON_AddBoolToObject(o, "fp8_output", true);
        if (l->fp8_attention)
            cJSON_AddBoolToObject(o, "fp8_attention", true);
    }
    cJSON_AddBoolToObject(o, "tp_overlap", l->tp_overlap);
    cJSON_AddBoolToObject(o, "overlap_param_gather", l->overlap_param_gather);
    cJSON_AddBoolToObject(o, "pp_overlap", l->pp_overlap);
    if (l->attn != DP_ATTN_DEFAULT)
        cJSON_AddStringToObject(o, "attention", dp_attn_name(l->attn));
    if (l->eager)
        cJSON_AddBoolToObject(o, "eager", true);
    if (l->list_collectives)
        cJSON_AddBoolToObject(o, "list_collectives", true);
    if (l->recompute_layers)
        cJSON_AddNumberToObject(o, "recompute_layers", l->recompute_layers);
    if (l->recompute_method != DP_RC_BLOCK)
        cJSON_AddStringToObject(o, "recompute_method", method_names[l->recompute_method]);
    if (l->recompute == DP_RECOMPUTE_SELECTIVE && l->recompute_modules &&
        l->recompute_modules != DP_RCM_CORE_ATTN) {
        cJSON *a = cJSON_AddArrayToObject(o, "recompute_modules");
        for (int i = 0; i < NMODULES; i++)
            if (l->recompute_modules & (1u << i))
                cJSON_AddItemToArray(a, cJSON_CreateString(module_names[i]));
    }
    if (l->loss != DP_LOSS_DEFAULT)
        cJSON_AddStringToObject(o, "loss", loss_names[l->loss]);
    if (l->loss_chunks > 1)
        cJSON_AddNumberToObject(o, "loss_chunks", l->loss_chunks);
    if (l->local_batch > 0)
        cJSON_AddNumberToObject(o, "local_batch", (double)l->local_batch);
    if (l->mtp_layers > 0)
        cJSON_AddNumberToObject(o, "mtp_layers", l->mtp_layers);
    if (l->schedule != DP_SCHED_1F1B)
        cJSON_AddStringToObject(o, "pipeline_schedule", schedule_names[l->schedule]);
    if (l->fsdp_per_microbatch)
        cJSON_AddBoolToObject(o, "fsdp_per_microbatch", true);
    if (l->framework != DP_FW_MEGATRON)
        cJSON_AddStringToObject(o, "framework", framework_names[l->framework]);
    if (l->shard_group > 0)
        cJSON_AddNumberToObject(o, "shard_group", l->shard_group);
    if (l->etp)
        cJSON_AddNumberToObject(o, "etp", l->etp);
    if (l->moe_capacity > 0) {
        cJSON_AddNumberToObject(o, "moe_capacity", l->moe_capacity);
        cJSON_AddBoolToObject(o, "moe_pad", l->moe_pad);
    }
    if (l->moe_imbalance != DP_MOE_IMBALANCE_DEFAULT)
        cJSON_AddNumberToObject(o, "moe_imbalance", l->moe_imbalance);
    if (l->moe_dispatcher != DP_DISPATCH_ALLTOALL)
        cJSON_AddStringToObject(o, "moe_dispatcher", dispatcher_names[l->moe_dispatcher]);
    if (l->ep_overlap)
        cJSON_AddBoolToObject(o, "ep_overlap", true);
    if (l->moe_routing != DP_ROUTING_RANDOM)
        cJSON_AddStringToObject(o, "moe_routing", routing_names[l->moe_routing]);
    if (l->first_stage_layers)
        cJSON_AddNumberToObject(o, "first_stage_layers", l->first_stage_layers);
    if (l->last_stage_layers)
        cJSON_AddNumberToObject(o, "last_stage_layers", l->last_stage_layers);
    if (l->nchunks > 0) {
        cJSON *a = cJSON_AddArrayToObject(o, "stage_layers");
        for (int s = 0; s < l->nchunks && s < DP_MAX_CHUNKS; s++)
            cJSON_AddItemToArray(a, cJSON_CreateNumber(l->chunk_layers[s]));
    }
    return o;
}

/* stage_layers (a list) or pipeline_layout (a Megatron string); vpp follows from their
 * length when the object gives none. The sum is checked against the model later
 * (dp_layout_validate), as every other layout constraint. */
static int read_split(struct dp_jr *jr, const cJSON *obj, struct dp_layout *out, bool vpp_given)
{
    const cJSON *list = cJSON_GetObjectItemCaseSensitive(obj, "stage_layers");
    const cJSON *str = cJSON_GetObjectItemCaseSensitive(obj, "pipeline_layout");
    if (cJSON_IsNull(list))
        list = NULL;
    if (cJSON_IsNull(str))
        str = NULL;
    if (!list && !str)
        return 0;
    char what[256];
    snprintf(what, sizeof what, "%s: %s%s%s", jr->file, jr->path, jr->path[0] ? "." : "",
             list ? "stage_layers" : "pipeline_layout");
    if (list && str)
        return dp_err_set(jr->err, DP_EINVAL,
                          "%s: stage_layers and pipeline_layout are alternatives: give one", what);
    if (out->first_stage_layers || out->last_stage_layers)
        return dp_err_set(jr->err, DP_EINVAL,
                          "%s: first/last_stage_layers are an alternative split: give one", what);
    int c[DP_MAX_CHUNKS], n = 0;
    if (list) {
        if (!cJSON_IsArray(list)) {
            char got[64];
            dp_json_describe(list, got, sizeof got);
            return dp_err_set(jr->err, DP_EINVAL,
                              "%s: expected an array of layer counts per model chunk, got %s", what,
                              got);
        }
        for (const cJSON *it = list->child; it; it = it->next, n++) {
            if (n >= DP_MAX_CHUNKS)
                return dp_err_set(jr->err, DP_EINVAL, "%s: expected at most %d counts, got more",
                                  what, DP_MAX_CHUNKS);
            double v = cJSON_IsNumber(it) ? it->valuedouble : -1;
            if (!cJSON_IsNumber(it) || v < 0 || v > UINT16_MAX || v != (double)(int)v) {
                char got[64];
                dp_json_describe(it, got, sizeof got);
                return dp_err_set(jr->err, DP_EINVAL, "%s[%d]: expected integer in [0, %d], got %s",
                                  what, n, UINT16_MAX, got);
            }
            c[n] = (int)v;
        }
    } else {
        if (!cJSON_IsString(str)) {
            char got[64];
            dp_json_describe(str, got, sizeof got);
            return dp_err_set(jr->err, DP_EINVAL,
                              "%s: expected a Megatron layout string such as \"Et|(tt|)*62,tL\", "
                              "got %s",
                              what, got);
        }
        int mtp = 0;
        int rc = dp_split_parse_megatron(str->valuestring, out->pp, c, DP_MAX_CHUNKS, &n, &mtp,
                                         what, DP_EINVAL, jr->err);
        if (rc)
            return rc;
        /* Megatron checks the string's 'm's against --mtp-num-layers; without mtp_layers
         * the string gives it. */
        if (cJSON_GetObjectItemCaseSensitive(obj, "mtp_layers") && mtp != out->mtp_layers)
            return dp_err_set(jr->err, DP_EINVAL,
                              "%s: expected mtp_layers=%d multi-token-prediction layers m in the "
                              "string, got %d",
                              what, out->mtp_layers, mtp);
        out->mtp_layers = mtp;
    }
    if (n < 1 || n % out->pp)
        return dp_err_set(jr->err, DP_EINVAL,
                          "%s: expected a multiple of pp=%d counts (pp x vpp), got %d", what,
                          out->pp, n);
    if (!vpp_given)
        out->vpp = n / out->pp;
    if ((int64_t)n != (int64_t)out->pp * out->vpp)
        return dp_err_set(jr->err, DP_EINVAL,
                          "%s: expected pp x vpp = %d x %d = %lld counts, got %d", what, out->pp,
                          out->vpp, (long long)out->pp * out->vpp, n);
    if (dp_layout_set_chunks(out, c, n))
        return dp_err_set(jr->err, DP_EINVAL, "%s: expected at most %d counts, got %d", what,
                          DP_MAX_CHUNKS, n);
    return 0;
}

int dp_layout_from_json(struct dp_jr *jr, const cJSON *obj, struct dp_layout *out)
{
    static const char *const keys[] = {"tp",
                                       "pp",
                                       "dp",
                                       "cp",
                                       "ep",
                                       "vpp",
                                       "mbs",
                                       "gbs",
                                       "seq_len",
                                       "zero",
                                       "recompute",
                                       "sp",
                                       "flash_attn",
                                       "precision",
                                       "grad_fp32",
                                       "optimizer",
                                       "optimizer_dtype",
                                       "dp_overlap",
                                       "first_stage_layers",
                                       "last_stage_layers",
                                       "stage_layers",
                                       "pipeline_layout",
                                       "gemm_precision",
                                       "fp8_recipe",
                                       "fp8_format",
                                       "fp8_params",
                                       "fp8_output",
                                       "fp8_attention",
                                       "tp_overlap",
                                       "overlap_param_gather",
                                       "pp_overlap",
                                       "attention",
                                       "eager",
                                       "list_collectives",
                                       "recompute_layers",
                                       "etp",
                                       "moe_capacity",
                                       "moe_pad",
                                       "moe_imbalance",
                                       "moe_dispatcher",
                                       "moe_routing",
                                       "ep_overlap",
                                       "recompute_method",
                                       "recompute_modules",
                                       "loss",
                                       "loss_chunks",
                                       "local_batch",
                                       "mtp_layers",
                                       "pipeline_schedule",
                                       "fsdp_per_microbatch",
                                       "framework",
                                       "shard_group",
                                       NULL};
    dp_layout_default(out);
    int64_t tp = 1, pp = 1, dp = 1, cp = 1, ep = 1, vpp = 1, zero = 0, first = 0, last = 0, rl = 0,
            etp = 0;
    int rc_ = 0, prec = 0, opt = 0, gemm = DP_GEMM_DEFAULT, fmt = 0, attn = 0, disp = 0, route = 0,
        sched = 0;
    int method = 0, loss = 0, fw = 0, odt = DP_FP32;
    int64_t sg = 0, lc = 0, mtp = 0;
    /* "precision": "fp8" is shorthand for bf16 storage with FP8 GEMMs. */
    const cJSON *pv = cJSON_GetObjectItemCaseSensitive(obj, "precision");
    bool fp8_shorthand = cJSON_IsString(pv) && strcmp(pv->valuestring, "fp8") == 0;
    static const char *const prec_in[] = {"bf16", "fp16", "fp32", "fp8"};
    if (dp_jr_expect_object(jr, obj, "a layout object") || dp_jr_check_keys(jr, obj, keys) ||
        dp_jr_int(jr, obj, "tp", true, 1, 1 << 20, &tp) ||
        dp_jr_int(jr, obj, "pp", true, 1, 1 << 20, &pp) ||
        dp_jr_int(jr, obj, "dp", true, 1, 1 << 24, &dp) ||
        dp_jr_int(jr, obj, "cp", false, 1, 1 << 20, &cp) ||
        dp_jr_int(jr, obj, "ep", false, 1, 1 << 20, &ep) ||
        dp_jr_int(jr, obj, "vpp", false, 1, 1 << 20, &vpp) ||
        dp_jr_int(jr, obj, "mbs", true, 1, 1 << 24, &out->mbs) ||
        dp_jr_int(jr, obj, "gbs", true, 1, INT64_C(1) << 40, &out->gbs) ||
        dp_jr_int(jr, obj, "seq_len", true, 1, INT64_C(1) << 30, &out->seq_len) ||
        dp_jr_int(jr, obj, "zero", false, 0, 3, &zero) ||
        dp_jr_enum(jr, obj, "recompute", false, recompute_names, DP_RECOMPUTES, &rc_) ||
        dp_jr_enum(jr, obj, "recompute_method", false, method_names, 3, &method) ||
        dp_jr_enum(jr, obj, "loss", false, loss_names + 1, DP_LOSSES - 1, &loss) ||
        dp_jr_enum(jr, obj, "framework", false, framework_names, DP_FRAMEWORKS, &fw) ||
        dp_jr_int(jr, obj, "shard_group", false, 1, 1 << 24, &sg) ||
        dp_jr_int(jr, obj, "loss_chunks", false, 1, 1 << 16, &lc) ||
        dp_jr_int(jr, obj, "local_batch", false, 1, INT64_C(1) << 40, &out->local_batch) ||
        dp_jr_int(jr, obj, "mtp_layers", false, 0, DP_MAX_MTP, &mtp) ||
        dp_jr_enum(jr, obj, "pipeline_schedule", false, schedule_names, 2, &sched) ||
        dp_jr_bool(jr, obj, "fsdp_per_microbatch", false, &out->fsdp_per_microbatch) ||
        dp_jr_bool(jr, obj, "sp", false, &out->sp) ||
        dp_jr_bool(jr, obj, "flash_attn", false, &out->flash_attn) ||
        dp_jr_enum(jr, obj, "precision", false, prec_in, 4, &prec) ||
        dp_jr_bool(jr, obj, "grad_fp32", false, &out->grad_fp32) ||
        dp_jr_enum(jr, obj, "optimizer", false, optimizer_names, 3, &opt) ||
        dp_jr_enum(jr, obj, "optimizer_dtype", false, precision_names, DP_PRECISIONS, &odt) ||
        dp_jr_bool(jr, obj, "dp_overlap", false, &out->dp_overlap) ||
        dp_jr_int(jr, obj, "first_stage_layers", false, 0, 100000, &first) ||
        dp_jr_int(jr, obj, "last_stage_layers", false, 0, 100000, &last) ||
        dp_jr_enum(jr, obj, "gemm_precision", false, gemm_names + 1, DP_GEMMS - 1, &gemm) ||
        dp_jr_enum(jr, obj, "fp8_format", false, format_names, 2, &fmt) ||
        dp_jr_bool(jr, obj, "fp8_params", false, &out->fp8_params) ||
        dp_jr_bool(jr, obj, "fp8_output", false, &out->fp8_output) ||
        dp_jr_bool(jr, obj, "fp8_attention", false, &out->fp8_attention) ||
        dp_jr_bool(jr, obj, "tp_overlap", false, &out->tp_overlap) ||
        dp_jr_bool(jr, obj, "pp_overlap", false, &out->pp_overlap) ||
        dp_jr_enum(jr, obj, "attention", false, attn_names, DP_ATTNS, &attn) ||
        dp_jr_bool(jr, obj, "eager", false, &out->eager) ||
        dp_jr_bool(jr, obj, "list_collectives", false, &out->list_collectives) ||
        dp_jr_int(jr, obj, "recompute_layers", false, 0, 100000, &rl) ||
        dp_jr_int(jr, obj, "etp", false, 1, 1 << 20, &etp) ||
        dp_jr_number(jr, obj, "moe_capacity", false, 0, 1000, &out->moe_capacity) ||
        dp_jr_bool(jr, obj, "moe_pad", false, &out->moe_pad) ||
        dp_jr_number(jr, obj, "moe_imbalance", false, 1, 1000, &out->moe_imbalance) ||
        dp_jr_enum(jr, obj, "moe_dispatcher", false, dispatcher_names, 2, &disp) ||
        dp_jr_enum(jr, obj, "moe_routing", false, routing_names, 2, &route) ||
        dp_jr_bool(jr, obj, "ep_overlap", false, &out->ep_overlap))
        return jr->err->code;
    out->moe_dispatcher = (enum dp_moe_dispatcher)disp;
    out->moe_routing = (enum dp_moe_routing)route;
    out->optimizer_dtype = (enum dp_precision)odt;
    out->recompute_method = (enum dp_recompute_method)method;
    out->framework = (enum dp_framework)fw;
    out->shard_group = (int)sg;
    out->loss_chunks = (int)lc;
    out->mtp_layers = (int)mtp;
    out->schedule = (enum dp_pp_schedule)sched;
    if (cJSON_GetObjectItemCaseSensitive(obj, "loss"))
        out->loss = (enum dp_loss)(loss + 1); /* the enum read skipped "default" */
    /* DeepSpeed accumulates gradients in the model's dtype unless data_types.grad_accum_dtype
     * says otherwise (runtime/engine.py get_data_types): a deepspeed layout that does not
     * name grad_fp32 has half-precision gradients. */
    if (!cJSON_GetObjectItemCaseSensitive(obj, "grad_fp32") && out->framework == DP_FW_DEEPSPEED)
        out->grad_fp32 = false;
    const cJSON *mods = cJSON_GetObjectItemCaseSensitive(obj, "recompute_modules");
    if (mods && !cJSON_IsNull(mods)) {
        size_t o = dp_jr_push(jr, "recompute_modules", 0);
        if (!cJSON_IsArray(mods) || cJSON_GetArraySize(mods) == 0)
            return dp_err_set(jr->err, DP_EINVAL,
                              "%s: %s: expected a non-empty array of module names", jr->file,
                              jr->path);
        int i = 0;
        for (const cJSON *e = mods->child; e; e = e->next, i++) {
            int bit = cJSON_IsString(e) ? dp_recompute_module_parse(e->valuestring) : -1;
            if (bit < 0) {
                char got[128];
                dp_json_describe(e, got, sizeof got);
                return dp_err_set(jr->err, DP_EINVAL,
                                  "%s: %s[%d]: expected one of core_attn, mlp, layernorm, "
                                  "moe_act, moe, shared_experts, mla_up_proj, got %s",
                                  jr->file, jr->path, i, got);
            }
            out->recompute_modules |= (unsigned)bit;
        }
        dp_jr_pop(jr, o);
    }
    out->etp = (int)etp;
    out->recompute_layers = (int)rl;
    out->attn = (enum dp_attn)attn;
    if (cJSON_GetObjectItemCaseSensitive(obj, "gemm_precision"))
        gemm += 1; /* the enum read skipped "default" */
    if (fp8_shorthand) {
        if (gemm != DP_GEMM_DEFAULT && gemm != DP_GEMM_FP8) {
            size_t o = dp_jr_push(jr, "gemm_precision", 0);
            dp_err_set(jr->err, DP_EINVAL, "%s: %s: expected fp8 (precision is fp8), got %s",
                       jr->file, jr->path, dp_gemm_name((enum dp_gemm)gemm));
            dp_jr_pop(jr, o);
            return jr->err->code;
        }
        prec = DP_BF16;
        gemm = DP_GEMM_FP8;
    }
    /* The overlap of the parameter all-gather followed dp_overlap before it had a knob of
     * its own: a layout that does not name it keeps that meaning. */
    out->overlap_param_gather = out->dp_overlap;
    if (dp_jr_bool(jr, obj, "overlap_param_gather", false, &out->overlap_param_gather))
        return jr->err->code;
    const cJSON *rv = cJSON_GetObjectItemCaseSensitive(obj, "fp8_recipe");
    if (rv && !cJSON_IsNull(rv)) {
        int r = cJSON_IsString(rv) ? dp_fp8_recipe_parse(rv->valuestring) : -1;
        if (r < 0) {
            char got[128];
            dp_json_describe(rv, got, sizeof got);
            size_t o = dp_jr_push(jr, "fp8_recipe", 0);
            dp_err_set(jr->err, DP_EINVAL,
                       "%s: %s: expected one of delayed, current (tensorwise), rowwise, "
                       "blockwise, mxfp8, got %s",
                       jr->file, jr->path, got);
            dp_jr_pop(jr, o);
            return jr->err->code;
        }
        out->fp8_recipe = (enum dp_fp8_recipe)r;
    }
    out->tp = (int)tp;
    out->pp = (int)pp;
    out->dp = (int)dp;
    out->cp = (int)cp;
    out->ep = (int)ep;
    out->vpp = (int)vpp;
    out->zero = (int)zero;
    out->recompute = (enum dp_recompute)rc_;
    out->precision = (enum dp_precision)prec;
    out->optimizer = (enum dp_optimizer)opt;
    out->first_stage_layers = (int)first;
    out->last_stage_layers = (int)last;
    out->gemm = (enum dp_gemm)gemm;
    out->fp8_format = (enum dp_fp8_format)fmt;
    int rc = read_split(jr, obj, out, cJSON_GetObjectItemCaseSensitive(obj, "vpp") != NULL);
    if (rc)
        return rc;
    /* Knobs that need another knob (bad input, exit 2, like a bad command line). */
    const char *need = NULL, *field = NULL, *got = NULL;
    if (out->tp_overlap && out->tp > 1 && !out->sp) {
        field = "tp_overlap";
        need = "false without sp true (TP communication overlap needs sequence parallelism: "
               "Megatron-LM validate_args 'Tensor parallel communication/GEMM overlap can "
               "happen only when sequence parallelism is enabled')";
        got = "true with sp false";
    } else if (out->pp_overlap && out->vpp < 2) {
        field = "pp_overlap";
        need = "false without vpp > 1 (Megatron overlaps pipeline send/recv only in the "
               "interleaved schedule: 'Non-interleaved pipeline parallelism does not support "
               "overlapping p2p communication')";
        got = "true with vpp 1";
    } else if (out->fp8_params && dp_layout_gemm(out) != DP_GEMM_FP8) {
        field = "fp8_params";
        need = "false without gemm_precision fp8 (FP8 weights need FP8 GEMMs)";
        got = "true";
    } else if (out->fp8_output && !dp_layout_mxfp8(out)) {
        field = "fp8_output";
        need = "false without gemm_precision fp8 and fp8_recipe mxfp8 (Megatron-Core runs the "
               "output layer in FP8 only under MXFP8: is_mxfp8_output_proj_active)";
        got = "true";
    } else if (out->fp8_attention && dp_layout_gemm(out) != DP_GEMM_FP8) {
        field = "fp8_attention";
        need = "false without gemm_precision fp8 (Transformer Engine's FP8 attention runs "
               "under an FP8 recipe)";
        got = "true";
    } else if (out->fp8_attention && out->fp8_recipe != DP_FP8_DELAYED &&
               out->fp8_recipe != DP_FP8_CURRENT && out->fp8_recipe != DP_FP8_MXFP8) {
        field = "fp8_attention";
        need = "false with fp8_recipe blockwise or rowwise (Megatron-Core passes fp8_dpa to "
               "the delayed, current and mxfp8 recipes only: fp8_utils.py)";
        got = "true";
    } else if (out->fp8_attention && !out->flash_attn) {
        field = "fp8_attention";
        need = "false without flash_attn true (FP8 attention is cuDNN's fused kernel)";
        got = "true with flash_attn false";
    } else if (out->fp8_attention && out->attn != DP_ATTN_DEFAULT && out->attn != DP_ATTN_CUDNN) {
        field = "fp8_attention";
        need = "false with an attention kernel other than cudnn (Transformer Engine runs FP8 "
               "attention on cuDNN's fused attention only)";
        got = dp_attn_name(out->attn);
    }
    if (field) {
        size_t o = dp_jr_push(jr, field, 0);
        dp_err_set(jr->err, DP_EUSAGE, "%s: %s: expected %s, got %s", jr->file, jr->path, need,
                   got);
        dp_jr_pop(jr, o);
        return jr->err->code;
    }
    if (out->recompute_modules && out->recompute != DP_RECOMPUTE_SELECTIVE) {
        size_t o = dp_jr_push(jr, "recompute_modules", 0);
        dp_err_set(jr->err, DP_EUSAGE, "%s: %s: expected recompute selective with it, got %s",
                   jr->file, jr->path, recompute_names[out->recompute]);
        dp_jr_pop(jr, o);
        return jr->err->code;
    }
    /* What the layout's framework offers: "FILE: path.field: <framework> ...". */
    char where[400];
    snprintf(where, sizeof where, "%s: %s", jr->file, jr->path);
    return dp_layout_check_framework(out, where, jr->err);
}
