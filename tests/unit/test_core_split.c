/*
 * Pipeline splits (core/split.c): the frameworks' rules on the counts their
 * sources give, the two text forms, the checks, and the layout's JSON round
 * trip with the legacy first/last fields.
 */
#include "check.h"
#include "core/core.h"

#include <cjson/cJSON.h>
#include <stdlib.h>

static void expect(const int *got, const int *want, int n)
{
    for (int i = 0; i < n; i++)
        if (got[i] != want[i]) {
            fprintf(stderr, "entry %d: got %d, want %d\n", i, got[i], want[i]);
            CHECK(!"split differs");
            return;
        }
}

/* 126 layers in 64 chunks: 1, then 62 x 2, then 1. */
static void llama_64(int *w)
{
    w[0] = 1;
    for (int i = 1; i < 63; i++)
        w[i] = 2;
    w[63] = 1;
}

static void test_rules(void)
{
    int c[DP_MAX_CHUNKS], w[DP_MAX_CHUNKS];
    struct dp_err err = {0};
    /* Megatron --decoder-first/last-pipeline-num-layers 19/19 of 80 layers on 4 stages:
     * the 42 others split over the 2 middle stages, 21 each. */
    CHECK_EQ(dp_split_first_last(80, 4, 1, 19, 19, c, "x", DP_EUSAGE, &err), 0);
    expect(c, (int[]){19, 21, 21, 19}, 4);
    /* With vpp = 2: each stage's count halves into its two chunks (model order: chunk 0
     * of stages 0-3, then chunk 1): 18/18 of 80 -> middle 22 -> 9, 11, 11, 9 twice. */
    CHECK_EQ(dp_split_first_last(80, 4, 2, 18, 18, c, "x", DP_EUSAGE, &err), 0);
    expect(c, (int[]){9, 11, 11, 9, 9, 11, 11, 9}, 8);
    /* Megatron refuses first/last counts not divisible by vpp. */
    CHECK_EQ(dp_split_first_last(80, 4, 2, 19, 19, c, "x", DP_EUSAGE, &err), DP_EUSAGE);
    CHECK_CONTAINS(err.msg, "divisible by vpp=2");
    dp_err_clear(&err);
    /* --account-for-embedding/loss-in-pipeline-split, Llama 3.1 405B (126 layers) at
     * pp = 8, vpp = 8: (126 + 2) / 64 = 2 per virtual stage, the first and the last
     * one fewer. */
    CHECK_EQ(dp_split_account(126, 8, 8, true, true, c, "x", DP_EUSAGE, &err), 0);
    llama_64(w);
    expect(c, w, 64);
    /* at pp = 16: 128 / 16 = 8, first and last 7 (Llama 3 paper, Sec. 3.3.2: one layer
     * fewer on the first and the last stage) */
    CHECK_EQ(dp_split_account(126, 16, 1, true, true, c, "x", DP_EUSAGE, &err), 0);
    expect(c, (int[]){7, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 7}, 16);
    /* 127 does not divide by 8 */
    CHECK_EQ(dp_split_account(126, 8, 1, true, false, c, "x", DP_EUSAGE, &err), DP_EUSAGE);
    dp_err_clear(&err);
    /* torchtitan: 126 layers over 16 virtual stages with weights 1 and 1: 128 / 16 = 8,
     * first and last 7 (the brief's 7/8/.../8/7). */
    CHECK_EQ(dp_split_torchtitan(126, 8, 2, 1, 1, c, "x", DP_EUSAGE, &err), 0);
    expect(c, (int[]){7, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 7}, 16);
    /* A remainder goes to the first stages: 11 + 2 = 13 over 4 -> 4, 3, 3, 3, then
     * first - 1 and last - 1: 3, 3, 3, 2. */
    CHECK_EQ(dp_split_torchtitan(11, 4, 1, 1, 1, c, "x", DP_EUSAGE, &err), 0);
    expect(c, (int[]){3, 3, 3, 2}, 4);
    /* dplan's balanced family: 11 + 1 + 1 = 13 over 4; the remainder late (stage 2,
     * before the last) or early (stage 0). */
    CHECK_EQ(dp_split_balanced(11, 4, 1, 1, 1, false, c), 0);
    expect(c, (int[]){2, 3, 4, 2}, 4);
    CHECK_EQ(dp_split_balanced(11, 4, 1, 1, 1, true, c), 0);
    expect(c, (int[]){3, 3, 3, 2}, 4);
    /* 94 layers, pp = 8, vpp = 4 (the case): 94 over 32 virtual stages, base 2,
     * 30 left over, one each on virtual stages 30 down to 1. */
    CHECK_EQ(dp_split_balanced(94, 8, 4, 0, 0, false, c), 0);
    int sum = 0;
    for (int i = 0; i < 32; i++)
        sum += c[i];
    CHECK_EQ(sum, 94);
    CHECK_EQ(c[0], 2);
    CHECK_EQ(c[1], 3);
    CHECK_EQ(c[30], 3);
    CHECK_EQ(c[31], 2);
    /* too few layers for the stages */
    CHECK_EQ(dp_split_balanced(3, 4, 1, 0, 0, false, c), -1);
}

static void test_check(void)
{
    struct dp_err err = {0};
    int w[DP_MAX_CHUNKS];
    llama_64(w);
    CHECK_EQ(dp_split_check(w, 64, 126, 8, 8, "--stage-layers", DP_EUSAGE, &err), 0);
    CHECK_EQ(dp_split_check(w, 64, 127, 8, 8, "--stage-layers", DP_EUSAGE, &err), DP_EUSAGE);
    CHECK_STR(err.msg,
              "--stage-layers: expected counts summing to the model's 127 layers, got 126");
    dp_err_clear(&err);
    CHECK_EQ(dp_split_check(w, 64, 126, 8, 4, "--stage-layers", DP_EUSAGE, &err), DP_EUSAGE);
    CHECK_STR(err.msg, "--stage-layers: expected pp x vpp = 8 x 4 = 32 counts (one per model "
                       "chunk), got 64");
    dp_err_clear(&err);
    /* an empty virtual stage in the middle */
    w[5] = 0;
    w[6] = 4;
    CHECK_EQ(dp_split_check(w, 64, 126, 8, 8, "--stage-layers", DP_EUSAGE, &err), DP_EUSAGE);
    CHECK_CONTAINS(err.msg, "entry 5 (stage 5, chunk 0): expected >= 1 layer");
    dp_err_clear(&err);
    /* the embedding and the loss alone in their stages are fine */
    int own[4] = {0, 5, 5, 0};
    CHECK_EQ(dp_split_check(own, 4, 10, 4, 1, "x", DP_EUSAGE, &err), 0);
}

static void test_text(void)
{
    struct dp_err err = {0};
    int c[DP_MAX_CHUNKS], n = 0, w[DP_MAX_CHUNKS];
    char buf[512];
    /* the list form */
    CHECK_EQ(dp_split_parse_list("1,2*62,1", c, DP_MAX_CHUNKS, &n, "x", &err), 0);
    CHECK_EQ(n, 64);
    llama_64(w);
    expect(c, w, 64);
    dp_split_format_list(c, n, buf, sizeof buf);
    CHECK_STR(buf, "1,2*62,1");
    CHECK_EQ(dp_split_parse_list("7, 8*14 ,7", c, DP_MAX_CHUNKS, &n, "x", &err), 0);
    CHECK_EQ(n, 16);
    CHECK_EQ(dp_split_parse_list("7,,8", c, DP_MAX_CHUNKS, &n, "--stage-layers", &err), DP_EUSAGE);
    CHECK_STR(err.msg, "--stage-layers: expected comma-separated layer counts such as 7,8*14,7, "
                       "got \"7,,8\"");
    dp_err_clear(&err);
    CHECK_EQ(dp_split_parse_list("8*0", c, DP_MAX_CHUNKS, &n, "x", &err), DP_EUSAGE);
    dp_err_clear(&err);
    /* Megatron's own example (pipeline_parallel_layer_layout.py): "Ettt|(tt|)*29,m|L" is
     * E+3 layers, 29 x 2, then MTP in a stage of its own and the loss: dplan prices MTP on
     * the loss's stage only and refuses that placement, in one line. */
    int mtp = -1;
    CHECK_EQ(dp_split_parse_megatron("Ettt|(tt|)*29,m|L", 16, c, DP_MAX_CHUNKS, &n, &mtp, "x",
                                     DP_EUSAGE, &err),
             DP_EUSAGE);
    CHECK_CONTAINS(err.msg, "multi-token-prediction layers m in the last virtual stage");
    dp_err_clear(&err);
    /* Megatron-Bridge's DeepSeek-V3 layout for pp 4 x vp 4 (recipes/deepseek/h100/
     * deepseek_v3.py): E + 4 layers, 14 x 4, then one layer, the MTP layer and the loss. */
    CHECK_EQ(dp_split_parse_megatron("Etttt|(tttt|)*14,tmL", 4, c, DP_MAX_CHUNKS, &n, &mtp, "x",
                                     DP_EUSAGE, &err),
             0);
    CHECK_EQ(n, 16);
    CHECK_EQ(mtp, 1);
    CHECK_EQ(c[0], 4);
    CHECK_EQ(c[15], 1);
    dp_split_format_megatron(c, 16, 1, buf, sizeof buf);
    CHECK_STR(buf, "Et*4|(t*4|)*14,tmL");
    /* written back and read again: the same counts and MTP depth */
    CHECK_EQ(dp_split_parse_megatron(buf, 4, c, DP_MAX_CHUNKS, &n, &mtp, "x", DP_EUSAGE, &err), 0);
    CHECK_EQ(mtp, 1);
    CHECK_EQ(c[15], 1);
    /* where MTP is not expected (NULL), or after the loss, or split over stages */
    CHECK_EQ(dp_split_parse_megatron("Etttt|(tttt|)*14,tmL", 4, c, DP_MAX_CHUNKS, &n, NULL, "x",
                                     DP_EUSAGE, &err),
             DP_EUSAGE);
    CHECK_CONTAINS(err.msg, "not expected here");
    dp_err_clear(&err);
    CHECK_EQ(dp_split_parse_megatron("Et|tLm", 2, c, DP_MAX_CHUNKS, &n, &mtp, "x", DP_EUSAGE, &err),
             DP_EUSAGE);
    CHECK_CONTAINS(err.msg, "before the loss L");
    dp_err_clear(&err);
    CHECK_EQ(
        dp_split_parse_megatron("Etm|tmL", 2, c, DP_MAX_CHUNKS, &n, &mtp, "x", DP_EUSAGE, &err),
        DP_EUSAGE);
    CHECK_CONTAINS(err.msg, "together in one virtual stage");
    dp_err_clear(&err);
    /* Without it: 32 virtual stages on pp = 16 (vpp = 2): 3, 29 x 2, 0 + loss, 0. */
    CHECK_EQ(dp_split_parse_megatron("Et*3|(tt|)*29,|L", 16, c, DP_MAX_CHUNKS, &n, NULL, "x",
                                     DP_EUSAGE, &err),
             0);
    CHECK_EQ(n, 32);
    CHECK_EQ(c[0], 3);
    CHECK_EQ(c[1], 2);
    CHECK_EQ(c[29], 2);
    CHECK_EQ(c[30], 0);
    CHECK_EQ(c[31], 0);
    /* Llama 3.1 405B's 64 chunks, formatted and read back */
    dp_split_format_megatron(w, 64, 0, buf, sizeof buf);
    CHECK_STR(buf, "Et|(tt|)*62,tL");
    CHECK_EQ(dp_split_parse_megatron(buf, 8, c, DP_MAX_CHUNKS, &n, NULL, "x", DP_EUSAGE, &err), 0);
    CHECK_EQ(n, 64);
    expect(c, w, 64);
    /* own embedding and loss stages */
    int own[16] = {0, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 0};
    dp_split_format_megatron(own, 16, 0, buf, sizeof buf);
    CHECK_STR(buf, "E|(t*9|)*14,L");
    CHECK_EQ(dp_split_parse_megatron(buf, 16, c, DP_MAX_CHUNKS, &n, NULL, "x", DP_EUSAGE, &err), 0);
    expect(c, own, 16);
    /* irregular counts survive the round trip too */
    int odd[8] = {3, 1, 4, 1, 5, 9, 2, 6};
    dp_split_format_megatron(odd, 8, 0, buf, sizeof buf);
    CHECK_EQ(dp_split_parse_megatron(buf, 4, c, DP_MAX_CHUNKS, &n, NULL, "x", DP_EUSAGE, &err), 0);
    CHECK_EQ(n, 8);
    expect(c, odd, 8);
    /* the errors Megatron's validate_layer_layout would raise, one line each */
    static const struct {
        const char *s, *msg;
    } bad[] = {
        {"Et|tt", "expected the embedding E and the loss L once each, got 1 and 0"},
        {"tE|tL", "expected the embedding E first"},
        {"Et|LtL", "expected the embedding E and the loss L once each, got 1 and 2"},
        {"Et|Lt", "expected the loss L last"},
        {"Et|tt|tL", "expected a multiple of pp=2 virtual stages (pp x vpp), got 3"},
        {"Et|((tt|)*2)*2,tL", "nested parentheses"},
        {"Et|tx|tL", "unknown layer character 'x'"},
        {"Et*99999999|L", "expands to more than"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        dp_err_clear(&err);
        CHECK_EQ(dp_split_parse_megatron(bad[i].s, 2, c, DP_MAX_CHUNKS, &n, NULL,
                                         "--pipeline-layout", DP_EUSAGE, &err),
                 DP_EUSAGE);
        CHECK_CONTAINS(err.msg, bad[i].msg);
        CHECK(strchr(err.msg, '\n') == NULL);
    }
}

static struct dp_model model(int layers)
{
    struct dp_model m = {0};
    snprintf(m.name, sizeof m.name, "m");
    m.layers = layers;
    m.hidden = 64;
    m.heads = m.kv_heads = 4;
    m.head_dim = 16;
    m.ffn_hidden = 256;
    m.vocab = 256;
    m.seq_len = 64;
    m.norms_per_layer = 2;
    return m;
}

static void test_json(void)
{
    struct dp_model m = model(126);
    struct dp_layout l;
    dp_layout_default(&l);
    l.pp = 8;
    l.vpp = 8;
    l.dp = 1;
    l.gbs = 64;
    l.seq_len = 64;
    int w[DP_MAX_CHUNKS];
    llama_64(w);
    CHECK_EQ(dp_layout_set_chunks(&l, w, 64), 0);
    CHECK_EQ(l.nchunks, 64);
    struct dp_err err = {0};
    CHECK_EQ(dp_layout_validate(&l, &m, 8, &err), 0);
    /* stage 0 holds chunks 0, 8, .. 56: 1 + 7 x 2 = 15 layers; chunk 1 of stage 0 is
     * virtual stage 8, from layer 1 + 7 x 2 = 15 */
    CHECK_EQ(dp_layout_stage_layers(&l, &m, 0), 15);
    CHECK_EQ(dp_layout_stage_layers(&l, &m, 3), 16);
    int first, count;
    dp_layout_chunk_layers(&l, &m, 0, 1, &first, &count);
    CHECK_EQ(first, 15);
    CHECK_EQ(count, 2);
    dp_layout_chunk_layers(&l, &m, 7, 7, &first, &count);
    CHECK_EQ(first, 125);
    CHECK_EQ(count, 1);
    /* layout -> JSON -> layout keeps the list exactly */
    cJSON *o = dp_layout_to_json(&l);
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(o, "stage_layers");
    CHECK(cJSON_IsArray(a) && cJSON_GetArraySize(a) == 64);
    struct dp_layout back;
    struct dp_jr jr = {.file = "plan.json", .err = &err};
    snprintf(jr.path, sizeof jr.path, "layout");
    CHECK_EQ(dp_layout_from_json(&jr, o, &back), 0);
    CHECK(dp_layout_equal(&l, &back));
    cJSON_Delete(o);
    /* an all-equal list is the even split */
    int even[8] = {4, 4, 4, 4, 4, 4, 4, 4};
    struct dp_layout e;
    dp_layout_default(&e);
    e.pp = 8;
    CHECK_EQ(dp_layout_set_chunks(&e, even, 8), 0);
    CHECK_EQ(e.nchunks, 0);
    /* the legacy fields still load and mean Megatron's first/last rule */
    cJSON *legacy = cJSON_Parse("{\"tp\": 1, \"pp\": 4, \"dp\": 1, \"mbs\": 1, \"gbs\": 4, "
                                "\"seq_len\": 64, \"first_stage_layers\": 19, "
                                "\"last_stage_layers\": 19}");
    struct dp_model m80 = model(80);
    CHECK_EQ(dp_layout_from_json(&jr, legacy, &back), 0);
    CHECK_EQ(dp_layout_validate(&back, &m80, 4, &err), 0);
    CHECK_EQ(dp_layout_stage_layers(&back, &m80, 0), 19);
    CHECK_EQ(dp_layout_stage_layers(&back, &m80, 1), 21);
    CHECK_EQ(dp_layout_stage_layers(&back, &m80, 3), 19);
    cJSON_Delete(legacy);
    /* a Megatron string in JSON sets vpp */
    cJSON *str = cJSON_Parse("{\"tp\": 1, \"pp\": 8, \"dp\": 1, \"mbs\": 1, \"gbs\": 8, "
                             "\"seq_len\": 64, \"pipeline_layout\": \"Et|(tt|)*62,tL\"}");
    CHECK_EQ(dp_layout_from_json(&jr, str, &back), 0);
    CHECK_EQ(back.vpp, 8);
    CHECK_EQ(back.nchunks, 64);
    cJSON_Delete(str);
    /* errors name the field */
    cJSON *bad = cJSON_Parse("{\"tp\": 1, \"pp\": 8, \"dp\": 1, \"mbs\": 1, \"gbs\": 8, "
                             "\"seq_len\": 64, \"vpp\": 2, \"stage_layers\": [1, 2, 3]}");
    CHECK_EQ(dp_layout_from_json(&jr, bad, &back), DP_EINVAL);
    CHECK_STR(err.msg, "plan.json: layout.stage_layers: expected a multiple of pp=8 counts (pp x "
                       "vpp), got 3");
    cJSON_Delete(bad);
    dp_err_clear(&err);
    /* a plan writes the even split explicitly, and reads it back as even */
    struct dp_plan *p = calloc(1, sizeof *p);
    p->model = m80;
    dp_layout_default(&p->layout);
    p->layout.pp = 4;
    p->layout.gbs = 4;
    p->layout.seq_len = 64;
    cJSON *po = dp_plan_to_json(p, NULL);
    const cJSON *pl = cJSON_GetObjectItemCaseSensitive(po, "layout");
    const cJSON *sl = cJSON_GetObjectItemCaseSensitive(pl, "stage_layers");
    CHECK(cJSON_IsArray(sl) && cJSON_GetArraySize(sl) == 4);
    struct dp_plan *q = calloc(1, sizeof *q);
    CHECK_EQ(dp_plan_from_json(&jr, po, q), 0);
    CHECK(dp_layout_equal(&p->layout, &q->layout));
    cJSON_Delete(po);
    free(p);
    free(q);
}

int main(void)
{
    test_rules();
    test_check();
    test_text();
    test_json();
    return check_done("test_core_split");
}
