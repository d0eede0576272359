/*
 * export/: what the frameworks would do with the exported settings, checked
 * with the frameworks' own rules re-stated here, and the refusals.
 *
 *  - torchtitan's pipeline split, re-implemented from its source (see
 *    torchtitan_chunks), applied to the exported layers_per_stage and
 *    first/last "less layers" must give every stage exactly dplan's layer
 *    count, for every even and uneven split and interleaving degree;
 *  - DeepSpeed's train_batch_size = micro x accumulation x data parallel;
 *  - the rank-to-host map on hand-worked placements;
 *  - each framework refuses what it cannot express, naming knob and framework.
 */
#include "check.h"
#include "export/export.h"

#include <cjson/cJSON.h>
#include <stdlib.h>

static struct dp_plan base_plan(int layers, int tp, int pp, int dp, int cp)
{
    struct dp_plan p;
    memset(&p, 0, sizeof p);
    p.version = DP_PLAN_VERSION;
    struct dp_model *m = &p.model;
    snprintf(m->name, sizeof m->name, "test-llama");
    m->layers = layers;
    m->hidden = 1024;
    m->heads = m->kv_heads = 16;
    m->head_dim = 64;
    m->ffn_hidden = 4096;
    m->ffn = DP_FFN_SWIGLU;
    m->norm = DP_NORM_RMSNORM;
    m->pos = DP_POS_ROPE;
    m->vocab = 32000;
    m->seq_len = 2048;
    m->norms_per_layer = 2;
    dp_layout_default(&p.layout);
    p.layout.tp = tp;
    p.layout.pp = pp;
    p.layout.dp = dp;
    p.layout.cp = cp;
    p.layout.seq_len = 2048;
    p.layout.gbs = 64 * dp;
    return p;
}

/* A Llama-like decoder's shape (torchtitan's bases are matched on it). */
static void set_shape(struct dp_model *m, int64_t hidden, int heads, int kv_heads, int head_dim,
                      int64_t ffn, int64_t vocab)
{
    m->hidden = hidden;
    m->heads = heads;
    m->kv_heads = kv_heads;
    m->head_dim = head_dim;
    m->ffn_hidden = ffn;
    m->vocab = vocab;
}

static void set_cluster(struct dp_plan *p, int nodes, int gpn)
{
    p->has_cluster = true;
    snprintf(p->cluster.name, sizeof p->cluster.name, "test");
    snprintf(p->cluster.gpu.name, sizeof p->cluster.gpu.name, "test-gpu");
    p->cluster.nodes = nodes;
    p->cluster.gpus_per_node = gpn;
}

static int export_text(const struct dp_plan *p, enum dp_export_format f, struct dp_buf *b,
                       struct dp_err *err)
{
    struct dp_export_opts o;
    dp_export_opts_default(&o);
    o.plan_file = "plan.json";
    memset(b, 0, sizeof *b);
    dp_err_clear(err);
    return dp_export(p, f, &o, b, err);
}

/* The integer after "config.<field> = " in the recipe, or -1. */
static long field(const char *text, const char *name)
{
    char key[128];
    snprintf(key, sizeof key, "config.parallelism.%s = ", name);
    const char *p = strstr(text, key);
    return p ? strtol(p + strlen(key), NULL, 10) : -1;
}

/*
 * torchtitan's split, re-stated from torchtitan/distributed/pipeline_parallel.py
 * (main b5bcd76): _get_pipeline_metadata takes num_virtual_stages =
 * ceil((L + input_weight + output_weight) / layers_per_stage); then
 * _generate_llm_fqn_per_model_part gives effective = L + iw + ow layers,
 * per = effective // stages, extra = effective % stages, stage i gets per
 * (+1 if i < extra) effective layers, stage 0 minus iw and the last minus ow
 * (both checked not to exceed per), transformer layers assigned in order.
 * Returns the stage count, or -1 where torchtitan raises.
 */
static int torchtitan_chunks(int L, int lps, int iw, int ow, int *count, int cap)
{
    int S = (L + iw + ow + lps - 1) / lps;
    if (S < 1 || S > cap)
        return -1;
    if (S == 1) {
        count[0] = L;
        return 1;
    }
    int eff = L + iw + ow, per = eff / S, extra = eff % S;
    if (per == 0 || iw > per || ow > per)
        return -1;
    int left = L;
    for (int i = 0; i < S; i++) {
        int n = per + (i < extra ? 1 : 0);
        if (i == 0)
            n -= iw;
        else if (i == S - 1)
            n -= ow;
        if (i == S - 1)
            n = left < n ? left : n; /* the loop stops when layers run out */
        count[i] = n < left ? n : left;
        left -= count[i];
    }
    return left == 0 ? S : -1;
}

static void test_torchtitan_split(void)
{
    static const int Ls[] = {24, 32, 40, 62, 80, 126};
    int tried = 0, uneven = 0;
    for (size_t li = 0; li < sizeof Ls / sizeof Ls[0]; li++)
        for (int pp = 2; pp <= 16; pp++)
            for (int first = 0; first <= 8 && first < Ls[li]; first++)
                for (int last = 0; last <= 8 && last < Ls[li]; last++) {
                    int L = Ls[li];
                    struct dp_plan p = base_plan(L, 1, pp, 1, 1);
                    p.layout.zero = 0;
                    /* dplan's own uneven splits are "m - 1" or "m - 2" of the middle m; try
                     * first/last as offsets below an even-ish middle too */
                    int m = (L + 2) / pp;
                    p.layout.first_stage_layers = first ? m - first % 3 : 0;
                    p.layout.last_stage_layers = last ? m - last % 3 : 0;
                    if (p.layout.first_stage_layers < 0 || p.layout.last_stage_layers < 0)
                        continue;
                    struct dp_err err = {0};
                    if (dp_layout_validate(&p.layout, &p.model, 0, &err))
                        continue;
                    for (int vpp = 1; vpp <= 4; vpp++) {
                        p.layout.vpp = vpp;
                        p.layout.gbs = 16 * pp;
                        if (dp_layout_validate(&p.layout, &p.model, 0, &err))
                            continue;
                        bool middle_largest = true;
                        for (int s = 1; s < pp - 1; s++)
                            for (int t = 0; t < pp; t++)
                                if (dp_layout_stage_layers(&p.layout, &p.model, t) >
                                    dp_layout_stage_layers(&p.layout, &p.model, s))
                                    middle_largest = false;
                        /* With interleaving torchtitan shortens only its first and last
                         * virtual stages (chunk 0 of stage 0, the last chunk of the last
                         * stage); Megatron's first/last counts shorten every chunk of those
                         * stages, so they are torchtitan's only when no chunk but those two
                         * is short. */
                        if (vpp > 1) {
                            int most = 0;
                            for (int s = 0; s < pp; s++)
                                for (int k = 0; k < vpp; k++) {
                                    int n = dp_layout_chunk_count(&p.layout, &p.model, s, k);
                                    most = n > most ? n : most;
                                }
                            for (int s = 0; s < pp; s++)
                                for (int k = 0; k < vpp; k++)
                                    if (!(s == 0 && k == 0) && !(s == pp - 1 && k == vpp - 1) &&
                                        dp_layout_chunk_count(&p.layout, &p.model, s, k) != most)
                                        middle_largest = false;
                        }
                        struct dp_buf b;
                        int rc = export_text(&p, DP_EXPORT_TORCHTITAN, &b, &err);
                        if (!middle_largest) {
                            /* torchtitan cannot lengthen the first or last stage */
                            CHECK_EQ(rc, DP_EUSAGE);
                            dp_buf_release(&b);
                            continue;
                        }
                        CHECK_EQ(rc, 0);
                        if (rc) {
                            fprintf(stderr, "  %s\n", err.msg);
                            dp_buf_release(&b);
                            continue;
                        }
                        long lps = field(b.data, "pipeline_parallel_layers_per_stage");
                        long iw = field(b.data, "pipeline_parallel_first_stage_less_layers");
                        long ow = field(b.data, "pipeline_parallel_last_stage_less_layers");
                        dp_buf_release(&b);
                        CHECK(lps > 0 && iw >= 0 && ow >= 0);
                        int count[256];
                        int S = torchtitan_chunks(L, (int)lps, (int)iw, (int)ow, count, 256);
                        CHECK_EQ(S, pp * vpp);
                        if (S != pp * vpp)
                            continue;
                        /* chunk c of the looped schedule runs on rank c % pp, as Megatron's
                         * interleaving places them: each rank's chunks sum to its stage */
                        for (int s = 0; s < pp; s++) {
                            int sum = 0;
                            for (int k = 0; k < vpp; k++)
                                sum += count[k * pp + s];
                            CHECK_EQ(sum, dp_layout_stage_layers(&p.layout, &p.model, s));
                        }
                        tried++;
                        uneven += p.layout.first_stage_layers || p.layout.last_stage_layers;
                    }
                }
    /* the loops must have exercised both kinds of split (a test that passes empty is none) */
    CHECK(tried > 200);
    CHECK(uneven > 100);
}

static void test_deepspeed_batch(void)
{
    /* 16 GPUs, dp=16, mbs=2, gbs=512: accumulation = 512 / (2 x 16) = 16 */
    struct dp_plan p = base_plan(32, 1, 1, 16, 1);
    p.layout.mbs = 2;
    p.layout.gbs = 512;
    p.layout.zero = 3;
    struct dp_buf b;
    struct dp_err err = {0};
    CHECK_EQ(export_text(&p, DP_EXPORT_DEEPSPEED_JSON, &b, &err), 0);
    cJSON *root = cJSON_Parse(b.data ? b.data : "");
    CHECK(root != NULL);
    if (root) {
        const cJSON *z = cJSON_GetObjectItemCaseSensitive(root, "zero_optimization");
        CHECK_EQ(cJSON_GetObjectItemCaseSensitive(root, "train_batch_size")->valuedouble, 512);
        CHECK_EQ(
            cJSON_GetObjectItemCaseSensitive(root, "train_micro_batch_size_per_gpu")->valuedouble,
            2);
        CHECK_EQ(cJSON_GetObjectItemCaseSensitive(root, "gradient_accumulation_steps")->valuedouble,
                 16);
        CHECK(z && cJSON_GetObjectItemCaseSensitive(z, "stage")->valuedouble == 3);
        /* bf16 with fp32 gradients (the plan's default) */
        const cJSON *dt = cJSON_GetObjectItemCaseSensitive(root, "data_types");
        CHECK(dt && strcmp(cJSON_GetObjectItemCaseSensitive(dt, "grad_accum_dtype")->valuestring,
                           "fp32") == 0);
        cJSON_Delete(root);
    }
    dp_buf_release(&b);
}

static void test_rank_map(void)
{
    /* tp=2 cp=2 dp=3 pp=2 on 3 nodes of 8: rank = tp + 2 (cp + 2 (dp + 3 pp)).
     * Node 1 holds ranks 8-15: ranks 8-11 are dp 2 of pp 0, ranks 12-15 dp 0 of pp 1
     * (12 = 0 + 2 (0 + 2 (0 + 3 x 1))): pp {0,1}, dp {2,0}, cp {0,1}, tp {0,1}. */
    struct dp_plan p = base_plan(32, 2, 2, 3, 2);
    set_cluster(&p, 3, 8);
    struct dp_buf b;
    struct dp_err err = {0};
    CHECK_EQ(export_text(&p, DP_EXPORT_TORCHRUN, &b, &err), 0);
    CHECK_CONTAINS(b.data, "rank = tp_rank + 2 x (cp_rank + 2 x (dp_rank + 3 x pp_rank))");
    CHECK_CONTAINS(b.data, "node0      ranks 0-7: pp 0 dp 0-1 cp 0-1 tp 0-1\n");
    CHECK_CONTAINS(b.data, "node1      ranks 8-15: pp 0-1 dp 0,2 cp 0-1 tp 0-1\n");
    CHECK_CONTAINS(b.data, "node2      ranks 16-23: pp 1 dp 1-2 cp 0-1 tp 0-1\n");
    CHECK_CONTAINS(b.data, "torchrun --nnodes 3 --nproc-per-node 8");
    dp_buf_release(&b);

    /* expert layers: ep=2 over dp=4 x cp=1 with tp=2 on one node of 8:
     * ep_rank = (rank / 2) % 2 -> ranks 0-7 hold ep 0 and 1 */
    p = base_plan(32, 2, 1, 4, 1);
    p.model.experts = 4;
    p.model.top_k = 2;
    p.model.moe_ffn_hidden = 1024;
    p.layout.ep = 2;
    set_cluster(&p, 1, 8);
    CHECK_EQ(export_text(&p, DP_EXPORT_SLURM, &b, &err), 0);
    CHECK_CONTAINS(b.data, "node0      ranks 0-7: pp 0 dp 0-3 ep 0-1 tp 0-1\n");
    CHECK_CONTAINS(b.data, "#SBATCH --nodes=1\n#SBATCH --ntasks-per-node=8\n");
    dp_buf_release(&b);
}

static void test_refusals(void)
{
    struct dp_buf b;
    struct dp_err err = {0};

    /* Megatron-LM: ZeRO-3 with pipeline parallelism (dp_layout_validate refuses it too;
     * the exporter must not rely on that) */
    struct dp_plan p = base_plan(32, 1, 2, 4, 1);
    p.layout.zero = 3;
    CHECK_EQ(export_text(&p, DP_EXPORT_MEGATRON, &b, &err), DP_EUSAGE);
    CHECK_CONTAINS(err.msg, "plan.json: layout.zero: zero=3 with pp=2");
    CHECK_CONTAINS(err.msg, "Megatron-LM");
    dp_buf_release(&b);

    /* DeepSpeed: context parallelism */
    p = base_plan(32, 1, 1, 4, 2);
    p.layout.zero = 1;
    CHECK_EQ(export_text(&p, DP_EXPORT_DEEPSPEED_JSON, &b, &err), DP_EUSAGE);
    CHECK_CONTAINS(err.msg, "plan.json: layout.cp: cp=2 has no DeepSpeed equivalent");
    dp_buf_release(&b);

    /* torchtitan: fp16 and ZeRO-1 */
    p = base_plan(32, 1, 1, 4, 1);
    p.layout.precision = DP_FP16;
    CHECK_EQ(export_text(&p, DP_EXPORT_TORCHTITAN, &b, &err), DP_EUSAGE);
    CHECK_CONTAINS(err.msg, "plan.json: layout.precision: fp16 has no torchtitan equivalent");
    dp_buf_release(&b);
    p.layout.precision = DP_BF16;
    p.layout.zero = 1;
    CHECK_EQ(export_text(&p, DP_EXPORT_TORCHTITAN, &b, &err), DP_EUSAGE);
    CHECK_CONTAINS(err.msg, "layout.zero: zero=1");
    dp_buf_release(&b);

    /* Megatron-LM: ALiBi */
    p = base_plan(32, 1, 1, 4, 1);
    p.model.pos = DP_POS_ALIBI;
    CHECK_EQ(export_text(&p, DP_EXPORT_MEGATRON, &b, &err), DP_EUSAGE);
    CHECK_CONTAINS(err.msg, "model.position: alibi has no Megatron-LM equivalent");
    dp_buf_release(&b);

    /* the launch formats need the cluster */
    p = base_plan(32, 1, 1, 4, 1);
    for (int f = DP_EXPORT_TORCHRUN; f <= DP_EXPORT_SLURM; f++) {
        CHECK_EQ(export_text(&p, (enum dp_export_format)f, &b, &err), DP_EINVAL);
        CHECK_CONTAINS(err.msg, "plan.json: cluster: missing");
        dp_buf_release(&b);
    }
}

static void test_translations(void)
{
    struct dp_buf b;
    struct dp_err err = {0};
    /* interleaving, full recompute, distributed optimizer with overlap, sequence parallel */
    struct dp_plan p = base_plan(40, 2, 4, 2, 1);
    p.layout.vpp = 5;
    p.layout.gbs = 64;
    p.layout.zero = 1;
    p.layout.sp = true;
    p.layout.recompute = DP_RECOMPUTE_FULL;
    CHECK_EQ(export_text(&p, DP_EXPORT_MEGATRON, &b, &err), 0);
    CHECK_CONTAINS(b.data, "    --num-virtual-stages-per-pipeline-rank 5\n");
    CHECK_CONTAINS(b.data, "    --sequence-parallel\n");
    CHECK_CONTAINS(b.data, "    --use-distributed-optimizer\n");
    CHECK_CONTAINS(b.data, "    --overlap-grad-reduce\n    --overlap-param-gather\n");
    CHECK_CONTAINS(b.data, "    --recompute-granularity full\n    --recompute-method uniform\n"
                           "    --recompute-num-layers 1\n");
    CHECK_CONTAINS(b.data, "    --bf16\n    --accumulate-allreduce-grads-in-fp32\n");
    dp_buf_release(&b);

    /* a program with a quote survives the shell: 'it'\''s' */
    p = base_plan(32, 1, 1, 8, 1);
    set_cluster(&p, 1, 8);
    struct dp_export_opts o;
    dp_export_opts_default(&o);
    o.program = "train.py --name it's";
    memset(&b, 0, sizeof b);
    CHECK_EQ(dp_export(&p, DP_EXPORT_MPIRUN, &o, &b, &err), 0);
    CHECK_CONTAINS(b.data, "; exec python train.py --name it'\\''s'\n");
    dp_buf_release(&b);
}

/* Issue 12's knobs, by the frameworks' own option names: HSDP as torchtitan's 2-D mesh
 * (data_parallel_replicate_degree x data_parallel_shard_degree), Megatron's
 * --num-distributed-optimizer-instances and DeepSpeed's MiCS mics_shard_size; recompute
 * modules, the loss fusion and per-op SAC; and what each refuses. */
static void test_framework_knobs(void)
{
    struct dp_buf b;
    struct dp_err err = {0};
    struct dp_plan p = base_plan(32, 1, 1, 16, 1);
    p.layout.framework = DP_FW_TORCHTITAN;
    p.layout.zero = 3;
    p.layout.shard_group = 8;
    p.layout.recompute = DP_RECOMPUTE_OP;
    CHECK_EQ(export_text(&p, DP_EXPORT_TORCHTITAN, &b, &err), 0);
    CHECK_EQ(field(b.data, "data_parallel_replicate_degree"), 2);
    CHECK_EQ(field(b.data, "data_parallel_shard_degree"), 8);
    CHECK_CONTAINS(b.data, "SelectiveAC");
    CHECK(strstr(b.data, "ChunkedLossWrapper") == NULL);
    dp_buf_release(&b);
    /* the chunked loss: torchtitan's ChunkedLossWrapper with the plan's slice count, set in
     * the function (the frozen CLI cannot change the loss's type) */
    p.layout.loss_chunks = 8;
    CHECK_EQ(export_text(&p, DP_EXPORT_TORCHTITAN, &b, &err), 0);
    CHECK_CONTAINS(b.data, "from torchtitan.components.loss import ChunkedLossWrapper\n");
    CHECK_CONTAINS(b.data, "        config.loss.num_chunks = 8\n");
    CHECK_CONTAINS(b.data, "ChunkedLossWrapper.Config(num_chunks=8, loss_fn=config.loss)");
    dp_buf_release(&b);
    p.layout.loss_chunks = 0;
    /* HSDP needs FSDP2: with DDP (zero 0) there is nothing to shard */
    p.layout.zero = 0;
    CHECK_EQ(export_text(&p, DP_EXPORT_TORCHTITAN, &b, &err), DP_EUSAGE);
    CHECK_CONTAINS(err.msg, "layout.shard_group");
    dp_buf_release(&b);

    /* Megatron: 16 ranks as 4 instances of 4 */
    p = base_plan(32, 2, 1, 16, 1);
    p.layout.zero = 1;
    p.layout.shard_group = 4;
    p.layout.recompute = DP_RECOMPUTE_SELECTIVE;
    p.layout.recompute_modules = DP_RCM_CORE_ATTN | DP_RCM_MLP;
    p.layout.loss = DP_LOSS_FUSED;
    CHECK_EQ(export_text(&p, DP_EXPORT_MEGATRON, &b, &err), 0);
    CHECK_CONTAINS(b.data, "    --num-distributed-optimizer-instances 4\n");
    CHECK_CONTAINS(b.data, "    --recompute-modules core_attn mlp\n");
    CHECK_CONTAINS(b.data, "    --cross-entropy-loss-fusion\n    --cross-entropy-fusion-impl te\n");
    dp_buf_release(&b);
    p.layout.recompute = DP_RECOMPUTE_OP;
    CHECK_EQ(export_text(&p, DP_EXPORT_MEGATRON, &b, &err), DP_EUSAGE);
    CHECK_CONTAINS(err.msg, "Megatron-LM");
    dp_buf_release(&b);

    /* Megatron's FP8 weights: gathered in FP8, or, for MXFP8, through the gradient buffer
     * (Megatron-Core asserts --reuse-grad-buf-for-mxfp8-param-ag needs --fp8-param-gather). */
    p = base_plan(32, 1, 1, 8, 1);
    p.layout.zero = 1;
    p.layout.gemm = DP_GEMM_FP8;
    p.layout.fp8_recipe = DP_FP8_CURRENT;
    p.layout.fp8_params = true;
    CHECK_EQ(export_text(&p, DP_EXPORT_MEGATRON, &b, &err), 0);
    CHECK_CONTAINS(b.data, "    --fp8-param-gather\n");
    CHECK(strstr(b.data, "--reuse-grad-buf-for-mxfp8-param-ag") == NULL);
    dp_buf_release(&b);
    p.layout.fp8_recipe = DP_FP8_MXFP8;
    CHECK_EQ(export_text(&p, DP_EXPORT_MEGATRON, &b, &err), 0);
    CHECK_CONTAINS(b.data, "    --fp8-param-gather\n    --reuse-grad-buf-for-mxfp8-param-ag\n");
    dp_buf_release(&b);
    p.layout.fp8_params = false;
    CHECK_EQ(export_text(&p, DP_EXPORT_MEGATRON, &b, &err), 0);
    CHECK(strstr(b.data, "--reuse-grad-buf-for-mxfp8-param-ag") == NULL);
    dp_buf_release(&b);

    /* torchtitan's FP8 is a model converter: rowwise -> Float8LinearConverter, MXFP8 ->
     * MXFP8LinearConverter, on Llama 3 8B's shape (torchtitan's llama3_8b); the other
     * recipes and FP8 weights have none and are refused, naming the field. */
    p = base_plan(32, 1, 1, 8, 1);
    set_shape(&p.model, 4096, 32, 8, 128, 14336, 128256);
    p.layout.framework = DP_FW_TORCHTITAN;
    p.layout.zero = 3;
    p.layout.gemm = DP_GEMM_FP8;
    p.layout.fp8_recipe = DP_FP8_ROWWISE;
    CHECK_EQ(export_text(&p, DP_EXPORT_TORCHTITAN, &b, &err), 0);
    CHECK_CONTAINS(b.data,
                   "from torchtitan.components.quantization import Float8LinearConverter\n");
    CHECK_CONTAINS(b.data, "    config = llama3_8b()\n");
    CHECK_CONTAINS(b.data, "recipe_name=\"rowwise\", filter_fqns=[\"lm_head\"]");
    dp_buf_release(&b);
    p.layout.fp8_recipe = DP_FP8_MXFP8;
    CHECK_EQ(export_text(&p, DP_EXPORT_TORCHTITAN, &b, &err), 0);
    CHECK_CONTAINS(b.data, "MXFP8LinearConverter.Config(\n                fqns=[\"layers\"]");
    dp_buf_release(&b);
    p.layout.fp8_params = true;
    CHECK_EQ(export_text(&p, DP_EXPORT_TORCHTITAN, &b, &err), DP_EUSAGE);
    CHECK_CONTAINS(err.msg, "layout.fp8_params");
    dp_buf_release(&b);
    p.layout.fp8_params = false;
    p.layout.fp8_recipe = DP_FP8_CURRENT;
    CHECK_EQ(export_text(&p, DP_EXPORT_TORCHTITAN, &b, &err), DP_EUSAGE);
    CHECK_CONTAINS(err.msg, "layout.fp8_recipe: current scaling has no torchtitan converter");
    dp_buf_release(&b);
    /* bf16: the model without converters, as before */
    p.layout.gemm = DP_GEMM_DEFAULT;
    CHECK_EQ(export_text(&p, DP_EXPORT_TORCHTITAN, &b, &err), 0);
    CHECK(strstr(b.data, "Converter") == NULL);
    CHECK_CONTAINS(b.data, "    config.model_spec = model_registry(\"8B\")\n");
    dp_buf_release(&b);

    /* Qwen3-30B-A3B's shape is torchtitan's qwen3_30b_a3b (models/qwen3), whose loss is a
     * ChunkedLossWrapper: a plan without loss_chunks unwraps it, one with them sets them */
    p = base_plan(48, 1, 1, 8, 1);
    set_shape(&p.model, 2048, 32, 4, 128, 6144, 151936);
    p.model.qk_norm = true;
    p.model.experts = 128;
    p.model.top_k = 8;
    p.model.moe_ffn_hidden = 768;
    p.layout.framework = DP_FW_TORCHTITAN;
    p.layout.zero = 3;
    CHECK_EQ(export_text(&p, DP_EXPORT_TORCHTITAN, &b, &err), 0);
    CHECK_CONTAINS(b.data, "from torchtitan.models.qwen3.config_registry import qwen3_30b_a3b\n");
    CHECK_CONTAINS(b.data, "    config.model_spec = model_registry(\"30B-A3B\")\n");
    CHECK_CONTAINS(b.data, "    config.loss = config.loss.loss_fn\n");
    CHECK_CONTAINS(b.data, "-m torchtitan.train --module qwen3 --config qwen3_30b_a3b");
    CHECK_CONTAINS(b.data, "the plan was priced with the GPU's default kernel");
    dp_buf_release(&b);
    p.layout.loss_chunks = 8;
    p.layout.attn = DP_ATTN_FLEX;
    CHECK_EQ(export_text(&p, DP_EXPORT_TORCHTITAN, &b, &err), 0);
    CHECK_CONTAINS(b.data, "        config.loss.num_chunks = 8\n");
    CHECK(strstr(b.data, "# attention:") == NULL);
    CHECK(strstr(b.data, "config.loss = config.loss.loss_fn") == NULL);
    dp_buf_release(&b);
    /* another expert count is not torchtitan's model: no base */
    p.model.experts = 64;
    CHECK_EQ(export_text(&p, DP_EXPORT_TORCHTITAN, &b, &err), 0);
    CHECK_CONTAINS(b.data, "def base_config() -> Trainer.Config:");
    dp_buf_release(&b);

    /* DeepSpeed's config has no FP8 switch: the script says what the model code sets. */
    p = base_plan(32, 1, 1, 8, 1);
    set_cluster(&p, 1, 8);
    p.layout.framework = DP_FW_DEEPSPEED;
    p.layout.zero = 3;
    p.layout.gemm = DP_GEMM_FP8;
    p.layout.fp8_recipe = DP_FP8_MXFP8;
    CHECK_EQ(export_text(&p, DP_EXPORT_DEEPSPEED, &b, &err), 0);
    CHECK_CONTAINS(b.data, "te.fp8_autocast(fp8_recipe=MXFP8BlockScaling())\n");
    dp_buf_release(&b);

    /* DeepSpeed: MiCS groups of 8 under ZeRO-3 */
    p = base_plan(32, 1, 1, 16, 1);
    p.layout.framework = DP_FW_DEEPSPEED;
    p.layout.zero = 3;
    p.layout.shard_group = 8;
    CHECK_EQ(export_text(&p, DP_EXPORT_DEEPSPEED_JSON, &b, &err), 0);
    CHECK_CONTAINS(b.data, "\"mics_shard_size\": 8");
    dp_buf_release(&b);
    p.layout.zero = 1;
    CHECK_EQ(export_text(&p, DP_EXPORT_DEEPSPEED_JSON, &b, &err), DP_EUSAGE);
    CHECK_CONTAINS(err.msg, "mics_shard_size");
    dp_buf_release(&b);
}

int main(void)
{
    test_torchtitan_split();
    test_deepspeed_batch();
    test_rank_map();
    test_refusals();
    test_translations();
    test_framework_knobs();
    return check_failures ? 1 : 0;
}
