/*
 * The planner and the executor agree on what runs (issue 14, item 5): every knob a
 * plan.json layout can hold, each value of its domain (enums: all of them; numbers:
 * the values the planner searches on a tiny model), is either accepted by the
 * executor's check (dp_exec_check: `dplan run` runs it) or refused before any rank
 * starts with one line that names the knob ("cp=2: ..."). Layouts are read through
 * dp_layout_from_json, plan.json's own reader. A knob added to the layout's JSON
 * without a row here fails the coverage check at the end.
 *
 * What "runs" means for each accepted knob is proved elsewhere: the equivalence tests
 * (tests/executor/CMakeLists.txt `layouts`) train tp, pp, dp, cp, mbs, zero 0-3, HSDP,
 * recompute, sp and uneven splits against the single process. Knobs about GPU
 * kernels and overlap (precision, gemm_precision, fp8_*, flash_attn, attention, eager,
 * the *_overlap knobs, grad_fp32) are run the CPU backend's one way: fp32, blocking
 * collectives, attention probabilities kept (executor/README.md "What runs"); MoE
 * knobs do nothing on a dense model (the cost model ignores them too). On a MoE model
 * (tiny-llama with 4 experts, top-2) ep, etp dividing tp (under SP), HSDP, capacity and
 * the dispatcher knobs run (the equivalence tests moe_* train them), and what moe.c does
 * not do is refused.
 */
#include "check.h"
#include "executor/executor.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

enum verdict { RUNS, REFUSED };

struct knob_case {
    const char *key;  /* the knob (JSON name); its value in `json` */
    const char *json; /* fields merged over the base layout */
    enum verdict want;
    const char *needle; /* what the refusal names; NULL: "key=" */
};

/* tiny-gpt: 2 layers, 4 heads (kv 4), hidden 64; base: pp 2, dp 4, ZeRO-1. */
static const char base_json[] =
    "{\"tp\": 1, \"pp\": 2, \"dp\": 4, \"mbs\": 1, \"gbs\": 8, \"seq_len\": 32, \"zero\": 1}";

static const struct knob_case cases[] = {
    {"tp", "{\"tp\": 1}", RUNS, NULL},
    {"tp", "{\"tp\": 2}", RUNS, NULL},
    {"tp", "{\"tp\": 4}", RUNS, NULL},
    {"pp", "{\"pp\": 1}", RUNS, NULL},
    {"pp", "{\"pp\": 2}", RUNS, NULL},
    {"dp", "{\"dp\": 1, \"zero\": 0}", RUNS, NULL},
    {"dp", "{\"dp\": 2}", RUNS, NULL},
    {"cp", "{\"cp\": 1}", RUNS, NULL},
    {"cp", "{\"cp\": 2}", RUNS, NULL},
    {"cp", "{\"cp\": 4}", RUNS, NULL},
    {"cp", "{\"cp\": 2, \"tp\": 2, \"zero\": 0}", RUNS, NULL},
    /* ZeRO-2/3 and HSDP shard over the dp x cp ranks; 30 rows are not 2 cp = 4 chunks */
    {"cp", "{\"cp\": 2, \"pp\": 1, \"zero\": 2}", RUNS, NULL},
    {"cp", "{\"cp\": 2, \"pp\": 1, \"zero\": 3}", RUNS, NULL},
    {"cp", "{\"cp\": 2, \"shard_group\": 2}", RUNS, NULL},
    {"cp", "{\"cp\": 2, \"seq_len\": 30}", REFUSED, "seq_len=30"},
    {"ep", "{\"ep\": 1}", RUNS, NULL},
    {"ep", "{\"ep\": 2}", REFUSED, NULL},
    {"vpp", "{\"vpp\": 1}", RUNS, NULL},
    {"vpp", "{\"vpp\": 2, \"pp\": 1}", REFUSED, NULL}, /* more: cases_8l */
    {"mbs", "{\"mbs\": 2}", RUNS, NULL},
    {"gbs", "{\"gbs\": 16}", RUNS, NULL},
    {"seq_len", "{\"seq_len\": 64}", RUNS, NULL},
    {"seq_len", "{\"seq_len\": 128}", REFUSED, NULL}, /* learned positions: max_position 64 */
    {"zero", "{\"zero\": 0}", RUNS, NULL},
    {"zero", "{\"zero\": 1}", RUNS, NULL},
    /* ZeRO-2/3 with pipeline parallelism: as torchtitan runs it (FSDP2 + PP); Megatron
     * refuses the combination when plan.json is read (core/layout.c framework check). */
    {"zero", "{\"zero\": 2, \"framework\": \"torchtitan\"}", RUNS, NULL},
    {"zero", "{\"zero\": 3, \"framework\": \"torchtitan\"}", RUNS, NULL},
    {"zero", "{\"zero\": 3, \"pp\": 1}", RUNS, NULL},
    {"zero", "{\"zero\": 3}", REFUSED, "megatron"},
    {"shard_group", "{\"shard_group\": 2}", RUNS, NULL},
    {"shard_group", "{\"shard_group\": 2, \"zero\": 3, \"framework\": \"torchtitan\"}", RUNS, NULL},
    {"shard_group", "{\"shard_group\": 4}", RUNS, NULL},
    {"shard_group", "{\"shard_group\": 3}", REFUSED, ".shard_group"},
    {"shard_group", "{\"shard_group\": 2, \"zero\": 0}", REFUSED, ".shard_group"},
    {"recompute", "{\"recompute\": \"none\"}", RUNS, NULL},
    {"recompute", "{\"recompute\": \"selective\"}", RUNS, NULL},
    {"recompute", "{\"recompute\": \"full\"}", RUNS, NULL},
    /* The framework's recompute policies (issue 12) shape the cost model's memory; the
     * executor recomputes its own way (executor/README.md "What runs"): torchtitan's
     * per-op policy and Megatron's module lists keep its selective set, every method
     * with recompute_layers 0 recomputes every layer. */
    {"recompute", "{\"recompute\": \"op\", \"framework\": \"torchtitan\", \"zero\": 3}", RUNS,
     NULL},
    {"recompute", "{\"recompute\": \"op\"}", REFUSED, "megatron"},
    {"recompute_method", "{\"recompute\": \"full\", \"recompute_method\": \"uniform\"}", RUNS,
     NULL},
    {"recompute_method", "{\"recompute\": \"full\", \"recompute_method\": \"block\"}", RUNS, NULL},
    {"recompute_modules", "{\"recompute\": \"selective\", \"recompute_modules\": [\"mlp\"]}", RUNS,
     NULL},
    /* The framework names the stack the cost model prices; the executor is its own. */
    {"framework", "{\"framework\": \"megatron\"}", RUNS, NULL},
    {"framework", "{\"framework\": \"torchtitan\", \"zero\": 2}", RUNS, NULL},
    {"framework", "{\"framework\": \"torchtitan\"}", REFUSED, "torchtitan"},
    {"framework", "{\"framework\": \"deepspeed\"}", RUNS, NULL},
    {"loss", "{\"loss\": \"vocab-parallel\"}", RUNS, NULL},
    {"loss", "{\"loss\": \"unfused\", \"framework\": \"torchtitan\", \"zero\": 3}", RUNS, NULL},
    /* torchtitan's chunked loss shapes the cost model's memory; the executor's loss is its own */
    {"loss_chunks",
     "{\"loss_chunks\": 8, \"loss\": \"compiled\", \"framework\": \"torchtitan\", \"zero\": 3}",
     RUNS, NULL},
    {"loss_chunks", "{\"loss_chunks\": 8}", REFUSED, "megatron"},
    /* a pipeline schedule per local batch (torchtitan): the executor runs one schedule of
     * all the step's micro-batches, whose summed gradients are the same */
    {"local_batch", "{\"local_batch\": 1, \"framework\": \"torchtitan\", \"zero\": 3}", RUNS, NULL},
    {"local_batch", "{\"local_batch\": 1}", REFUSED, "megatron"},
    {"local_batch", "{\"local_batch\": 3, \"framework\": \"torchtitan\", \"zero\": 3}", REFUSED,
     "local_batch=3"},
    {"list_collectives", "{\"list_collectives\": true}", RUNS, NULL},
    {"recompute_layers", "{\"recompute\": \"full\", \"recompute_layers\": 2}", RUNS, NULL},
    {"recompute_layers", "{\"pp\": 1, \"recompute\": \"full\", \"recompute_layers\": 1}", REFUSED,
     NULL},
    {"sp", "{\"tp\": 2, \"sp\": true}", RUNS, NULL},
    {"sp", "{\"sp\": false}", RUNS, NULL},
    {"flash_attn", "{\"flash_attn\": false}", RUNS, NULL},
    {"flash_attn", "{\"flash_attn\": true}", RUNS, NULL},
    {"precision", "{\"precision\": \"bf16\"}", RUNS, NULL},
    {"precision", "{\"precision\": \"fp16\"}", RUNS, NULL},
    {"precision", "{\"precision\": \"fp32\"}", RUNS, NULL},
    {"precision", "{\"precision\": \"fp8\"}", RUNS, NULL},
    {"grad_fp32", "{\"grad_fp32\": false}", RUNS, NULL},
    {"optimizer", "{\"optimizer\": \"adam\"}", RUNS, NULL},
    {"optimizer", "{\"optimizer\": \"sgd\"}", REFUSED, NULL},
    {"optimizer_dtype", "{\"optimizer_dtype\": \"fp32\"}", RUNS, NULL},
    {"optimizer_dtype", "{\"optimizer_dtype\": \"bf16\"}", REFUSED, "optimizer_dtype"},
    {"dp_overlap", "{\"dp_overlap\": false}", RUNS, NULL},
    {"first_stage_layers", "{\"first_stage_layers\": 1}", RUNS, NULL},
    {"last_stage_layers", "{\"last_stage_layers\": 1}", RUNS, NULL},
    {"stage_layers", "{\"stage_layers\": [1, 1]}", RUNS, NULL},
    /* A stage with no layer: refused by stage (issue 13's message names the stage). */
    {"stage_layers", "{\"stage_layers\": [2, 0]}", REFUSED, "stage 1 holds no transformer layer"},
    {"gemm_precision", "{\"gemm_precision\": \"@gemm\"}", RUNS, NULL}, /* every name, below */
    {"fp8_recipe", "{\"precision\": \"fp8\", \"fp8_recipe\": \"@recipe\"}", RUNS, NULL},
    {"fp8_format", "{\"precision\": \"fp8\", \"fp8_format\": \"e4m3\"}", RUNS, NULL},
    {"fp8_format", "{\"precision\": \"fp8\", \"fp8_format\": \"hybrid\"}", RUNS, NULL},
    {"fp8_params", "{\"precision\": \"fp8\", \"fp8_params\": true}", RUNS, NULL},
    {"tp_overlap", "{\"tp\": 2, \"sp\": true, \"tp_overlap\": true}", RUNS, NULL},
    {"overlap_param_gather", "{\"overlap_param_gather\": false}", RUNS, NULL},
    {"pp_overlap", "{\"pp_overlap\": false}", RUNS, NULL},
    {"attention", "{\"attention\": \"@attn\"}", RUNS, NULL},
    {"eager", "{\"eager\": true}", RUNS, NULL},
    /* MoE knobs on a dense model: nothing to run differently (the cost model ignores
     * them too); a MoE model is refused (experts=, below). */
    {"etp", "{\"etp\": 1}", RUNS, NULL},
    {"moe_capacity", "{\"moe_capacity\": 1.25}", RUNS, NULL},
    {"moe_pad", "{\"moe_capacity\": 1.25, \"moe_pad\": true}", RUNS, NULL},
    {"moe_imbalance", "{\"moe_imbalance\": 1}", RUNS, NULL},
    {"moe_dispatcher", "{\"moe_dispatcher\": \"dedup\"}", RUNS, NULL},
    {"moe_dispatcher", "{\"moe_dispatcher\": \"alltoall\"}", RUNS, NULL},
    /* The routing's expert placement prices the cost model's dispatch; the executor routes
     * with its own router. */
    {"moe_routing", "{\"moe_routing\": \"round-robin\"}", RUNS, NULL},
    {"moe_routing", "{\"moe_routing\": \"random\"}", RUNS, NULL},
    /* Megatron's EP all-to-all overlap: an overlap knob, run the CPU backend's one way
     * (blocking collectives); the layout rules (ep > 1) are plan.json's. */
    {"ep_overlap", "{\"ep_overlap\": false}", RUNS, NULL},
};

/* Interleaving (vpp > 1) on tiny-gpt with 8 layers, so that pp 2 vpp 2 and 4 have a
 * layer in every model chunk (the base's gbs 8 / dp 4 = 2 micro-batches, a multiple of
 * pp as interleaving needs). */
static const struct knob_case cases_8l[] = {
    {"vpp", "{\"vpp\": 2}", RUNS, NULL},
    {"vpp", "{\"vpp\": 4}", RUNS, NULL},
    {"vpp", "{\"vpp\": 2, \"stage_layers\": [1, 3, 3, 1]}", RUNS, NULL},
    {"vpp", "{\"vpp\": 2, \"stage_layers\": [0, 4, 3, 1]}", REFUSED,
     "model chunk 0 of stage 0 holds no transformer layer"},
    {"vpp", "{\"vpp\": 2, \"zero\": 3, \"framework\": \"torchtitan\"}", RUNS, NULL},
    {"pp_overlap", "{\"vpp\": 2, \"pp_overlap\": true}", RUNS, NULL}, /* blocking p2p */
};

/* base + fields of `over` -> a layout through plan.json's reader; 0 or its status. */
static int read_layout(const char *over, struct dp_layout *l, struct dp_err *err)
{
    cJSON *b = cJSON_Parse(base_json), *o = cJSON_Parse(over);
    CHECK(b && o);
    if (!b || !o) {
        cJSON_Delete(b);
        cJSON_Delete(o);
        return -1;
    }
    for (cJSON *f = o->child; f; f = f->next) {
        cJSON_DeleteItemFromObjectCaseSensitive(b, f->string);
        cJSON_AddItemToObject(b, f->string, cJSON_Duplicate(f, 1));
    }
    struct dp_jr jr = {.file = "plan.json", .err = err};
    int rc = dp_layout_from_json(&jr, b, l);
    cJSON_Delete(b);
    cJSON_Delete(o);
    return rc;
}

/* One case with `@name` in its JSON replaced by `value`. */
static void run_case(const struct dp_model *m, const struct knob_case *c, const char *value,
                     int *runs, int *refused)
{
    char json[256], needle[96];
    const char *at = strchr(c->json, '@');
    if (at && value) {
        const char *end = at + 1;
        while (*end && *end != '"')
            end++;
        snprintf(json, sizeof json, "%.*s%s%s", (int)(at - c->json), c->json, value, end);
    } else {
        snprintf(json, sizeof json, "%s", c->json);
    }
    struct dp_layout l;
    struct dp_err err = {0};
    fflush(stdout);
    int rc = read_layout(json, &l, &err);
    if (!rc)
        rc = dp_exec_check(m, &l, 0, &err);
    snprintf(needle, sizeof needle, "%s=", c->key);
    if (c->needle)
        snprintf(needle, sizeof needle, "%s", c->needle);
    printf("%-22s %-60s %s%s\n", c->key, json, rc ? "refused: " : "runs", rc ? err.msg : "");
    if (c->want == RUNS) {
        CHECK_EQ(rc, 0);
        (*runs)++;
    } else {
        CHECK(rc != 0);
        CHECK(strchr(err.msg, '\n') == NULL); /* one line */
        CHECK_CONTAINS(err.msg, needle);      /* naming the knob */
        (*refused)++;
    }
}

static void test_every_knob(void)
{
    struct dp_model m;
    struct dp_err err = {0};
    CHECK_EQ(dp_model_load("tiny-gpt", &m, &err), 0);
    int runs = 0, refused = 0;
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        const struct knob_case *c = &cases[i];
        if (strstr(c->json, "@gemm")) {
            for (int g = 1; g < DP_GEMMS; g++)
                run_case(&m, c, dp_gemm_name((enum dp_gemm)g), &runs, &refused);
        } else if (strstr(c->json, "@recipe")) {
            for (int r = 0; r < DP_FP8_RECIPES; r++)
                run_case(&m, c, dp_fp8_recipe_name((enum dp_fp8_recipe)r), &runs, &refused);
        } else if (strstr(c->json, "@attn")) {
            for (int a = 1; a < DP_ATTNS; a++)
                run_case(&m, c, dp_attn_name((enum dp_attn)a), &runs, &refused);
        } else {
            run_case(&m, c, NULL, &runs, &refused);
        }
    }
    struct dp_model m8 = m;
    m8.layers = 8;
    for (size_t i = 0; i < sizeof cases_8l / sizeof *cases_8l; i++)
        run_case(&m8, &cases_8l[i], NULL, &runs, &refused);
    /* A mixture-of-experts model with MLP biases runs (the routed experts' biases); with
     * a shared expert it is refused, naming them. */
    struct dp_model moe = m;
    moe.experts = 4;
    moe.top_k = 2;
    moe.moe_ffn_hidden = m.ffn_hidden;
    struct dp_layout l;
    CHECK_EQ(read_layout("{}", &l, &err), 0);
    CHECK(moe.mlp_bias);
    CHECK_EQ(dp_exec_check(&moe, &l, 0, &err), 0);
    moe.moe_shared_experts = 1;
    moe.moe_shared_ffn_hidden = 32;
    int rc = dp_exec_check(&moe, &l, 0, &err);
    CHECK(rc != 0);
    CHECK_CONTAINS(err.msg, "mlp_bias with shared experts");
    printf("%d knob values run, %d refused\n", runs, refused);
    CHECK(runs > 40 && refused >= 8);
}

/* On a MoE model (base: pp 2, dp 4, ZeRO-1 as above). */
static const struct knob_case moe_cases[] = {
    {"ep", "{\"ep\": 1}", RUNS, NULL},
    {"ep", "{\"ep\": 2, \"zero\": 0}", RUNS, NULL},
    {"ep", "{\"ep\": 4, \"zero\": 0}", RUNS, NULL},
    {"ep", "{\"ep\": 2, \"tp\": 2, \"dp\": 2, \"sp\": true, \"zero\": 0}", RUNS, NULL},
    /* ZeRO with experts: dense state over DP, expert state over EDP (executor/shard.c). */
    {"zero", "{\"ep\": 2, \"zero\": 1}", RUNS, NULL},
    {"zero", "{\"ep\": 4, \"zero\": 1}", RUNS, NULL},
    {"zero", "{\"zero\": 2, \"pp\": 1}", RUNS, NULL},
    {"zero", "{\"ep\": 2, \"zero\": 2, \"pp\": 1}", RUNS, NULL},
    {"zero", "{\"ep\": 2, \"zero\": 3, \"pp\": 1, \"framework\": \"torchtitan\"}", RUNS, NULL},
    {"zero", "{\"zero\": 3, \"pp\": 1}", RUNS, NULL},
    {"zero", "{\"zero\": 3}", REFUSED, "megatron"}, /* the framework's rule, with pp 2 */
    /* HSDP with experts in their own group: the expert state sharded within edp /
     * replicas ranks, all-reduced across as many replicas as the dense state has (dp 4,
     * ep 2: edp 2 in 2 instances); refused where the replicas do not divide edp (ep 4:
     * edp 1). */
    {"shard_group", "{\"ep\": 2, \"zero\": 1, \"shard_group\": 2}", RUNS, NULL},
    {"shard_group", "{\"ep\": 4, \"zero\": 1, \"shard_group\": 2}", REFUSED,
     "shard_group=2 with ep=4"},
    /* Megatron-Core's expert folding: etp dividing tp under SP, EP groups taking in TP
     * and CP ranks; etp < tp without SP (the TP ranks hold the same tokens), etp above
     * tp and capacity where a rank routes part of a micro-batch are refused. */
    {"etp", "{\"tp\": 2, \"etp\": 2}", RUNS, NULL},
    {"etp", "{\"tp\": 2, \"etp\": 1, \"sp\": true, \"zero\": 0}", RUNS, NULL},
    {"etp", "{\"tp\": 2, \"etp\": 1, \"sp\": true, \"ep\": 2, \"dp\": 1, \"zero\": 0}", RUNS, NULL},
    {"etp", "{\"tp\": 2, \"etp\": 1, \"sp\": true, \"ep\": 4, \"dp\": 2, \"zero\": 1}", RUNS, NULL},
    {"etp", "{\"tp\": 2, \"etp\": 1}", REFUSED, "etp=1 < tp=2 without sp"},
    {"etp", "{\"etp\": 2, \"zero\": 0}", REFUSED, "etp=2"},
    {"etp", "{\"tp\": 2, \"etp\": 1, \"sp\": true, \"moe_capacity\": 1.25}", REFUSED,
     "etp=1 with moe_capacity"},
    /* CP with experts, dropless or with capacity (drops over the whole micro-batch,
     * moe.c cp_keep), with ZeRO (expert shard groups over the folded EDP, which takes in
     * the cp ranks). */
    {"cp", "{\"cp\": 2, \"zero\": 0}", RUNS, NULL},
    {"cp", "{\"cp\": 2, \"ep\": 2, \"zero\": 0}", RUNS, NULL},
    {"cp", "{\"cp\": 2, \"ep\": 2, \"dp\": 1, \"zero\": 0}", RUNS, NULL},
    {"cp", "{\"cp\": 2, \"zero\": 0, \"moe_capacity\": 1.25}", RUNS, NULL},
    {"cp", "{\"cp\": 2, \"ep\": 2, \"zero\": 0, \"moe_capacity\": 1.25}", RUNS, NULL},
    {"cp", "{\"cp\": 2, \"zero\": 1}", RUNS, NULL},
    {"cp", "{\"cp\": 2, \"ep\": 2, \"zero\": 1}", RUNS, NULL},
    {"cp", "{\"cp\": 2, \"ep\": 2, \"zero\": 3, \"pp\": 1}", RUNS, NULL},
    {"moe_capacity", "{\"moe_capacity\": 1.25}", RUNS, NULL},
    {"moe_pad", "{\"moe_capacity\": 1.25, \"moe_pad\": true}", RUNS, NULL},
    {"moe_imbalance", "{\"moe_imbalance\": 1}", RUNS, NULL},
    {"moe_dispatcher", "{\"moe_dispatcher\": \"dedup\"}", RUNS, NULL},
    {"moe_routing", "{\"moe_routing\": \"round-robin\"}", RUNS, NULL},
    {"ep_overlap", "{\"ep\": 2, \"ep_overlap\": true, \"pp\": 1}", RUNS, NULL},
};

static void test_moe_knobs(void)
{
    struct dp_model m;
    struct dp_err err = {0};
    CHECK_EQ(dp_model_load("tiny-llama", &m, &err), 0);
    m.experts = 4;
    m.top_k = 2;
    m.moe_ffn_hidden = 64;
    int runs = 0, refused = 0;
    for (size_t i = 0; i < sizeof moe_cases / sizeof *moe_cases; i++)
        run_case(&m, &moe_cases[i], NULL, &runs, &refused);
    struct dp_layout l;
    CHECK_EQ(read_layout("{}", &l, &err), 0);
    /* DeepSeek-V3's router bias runs (sigmoid scores, moe.c), with etp = tp only. */
    m.moe_router_bias = true;
    CHECK_EQ(dp_exec_check(&m, &l, 0, &err), 0);
    struct dp_layout le;
    CHECK_EQ(read_layout("{\"tp\": 2, \"etp\": 1, \"sp\": true, \"zero\": 0}", &le, &err), 0);
    CHECK(dp_exec_check(&m, &le, 0, &err) != 0);
    CHECK_CONTAINS(err.msg, "etp=1 < tp=2 with moe.router_bias");
    err = (struct dp_err){0}; /* dp_err_set keeps the first message */
    m.moe_router_bias = false;
    CHECK_EQ(dp_exec_check(&m, &le, 0, &err), 0);
    m.moe_router_bias = true;
    /* The shared expert's gate (Qwen2-MoE) runs too. */
    m.moe_shared_experts = 1;
    m.moe_shared_ffn_hidden = 32;
    m.moe_shared_gate = true;
    CHECK_EQ(dp_exec_check(&m, &l, 0, &err), 0);
    /* Qwen3's q/k norm runs; MLA does not, named. */
    m.qk_norm = true;
    CHECK_EQ(dp_exec_check(&m, &l, 0, &err), 0);
    m.qk_norm = false;
    m.mla = true;
    CHECK(dp_exec_check(&m, &l, 0, &err) != 0);
    CHECK_CONTAINS(err.msg, "mla");
    /* Counted from the table: ep 4 + zero 6 + shard_group 1 + etp 4 + cp 8 + capacity,
     * pad, imbalance, dispatcher, routing and ep_overlap 6 run; zero 1 + shard_group 1 + etp 3
     * refused. */
    CHECK_EQ(runs, 29);
    CHECK_EQ(refused, 5);
}

/* Every key plan.json's layout writer can emit has a row above. */
static void test_coverage(void)
{
    struct dp_layout l;
    dp_layout_default(&l);
    l.cp = l.ep = 2;
    l.vpp = 2;
    l.gemm = DP_GEMM_FP8;
    l.fp8_params = true;
    l.attn = (enum dp_attn)1;
    l.eager = true;
    l.recompute_layers = 1;
    l.etp = 1;
    l.moe_capacity = 1.25;
    l.moe_pad = true;
    l.moe_imbalance = 1;
    l.moe_dispatcher = DP_DISPATCH_DEDUP;
    l.moe_routing = DP_ROUTING_ROUND_ROBIN;
    l.ep_overlap = true;
    l.shard_group = 2;
    l.recompute = DP_RECOMPUTE_FULL;
    l.recompute_method = DP_RC_UNIFORM;
    l.recompute_modules = 1;
    l.loss = DP_LOSS_UNFUSED;
    l.framework = DP_FW_TORCHTITAN;
    l.list_collectives = true;
    l.first_stage_layers = l.last_stage_layers = 1;
    l.nchunks = 2;
    l.chunk_layers[0] = l.chunk_layers[1] = 1;
    cJSON *o = dp_layout_to_json(&l);
    CHECK(o != NULL);
    int keys = 0;
    for (cJSON *f = o ? o->child : NULL; f; f = f->next) {
        bool found = false;
        for (size_t i = 0; i < sizeof cases / sizeof *cases && !found; i++)
            found = !strcmp(cases[i].key, f->string);
        if (!found)
            fprintf(stderr, "layout key %s has no knob case\n", f->string);
        CHECK(found);
        keys++;
    }
    cJSON_Delete(o);
    CHECK(keys >= 30);
}

int main(void)
{
    test_every_knob();
    test_moe_knobs();
    test_coverage();
    return check_failures ? 1 : 0;
}
