/*
 * The cost model's invariants over layouts drawn at random (a fixed seed) from the shipped
 * models and systems, with every knob the layout has: each valid layout gets a finite,
 * positive step time made of non-negative terms (dp_step_cost_sane), and a memory report
 * whose every stage holds non-negative parts that add up to its total. Session 14 found
 * two layouts of DeepSeek-V3 that broke the first (test_costmodel_moe.c,
 * test_deepseek_sane); this draws from the whole space so that the next such bug fails
 * here rather than in a ranking.
 */
#include "check.h"
#include "costmodel/costmodel.h"

#include <stdlib.h>
#include <string.h>

#define NMODELS  11
#define NSYSTEMS 7
#define NNODES   4

/* A small LCG of our own, so that the draws are the same on every libc. */
static unsigned long long state = 20261206;
static int draw(int n)
{
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    return (int)((state >> 33) % (unsigned long long)n);
}

static int pick(const int *a, int n)
{
    return a[draw(n)];
}

static bool mem_sane(const struct dp_mem_report *r)
{
    if (r->nstages < 1 || !(r->peak_bytes > 0))
        return false;
    for (int s = 0; s < r->nstages; s++) {
        const struct dp_mem_stage *g = &r->stage[s];
        int64_t parts[] = {g->params_bytes, g->grads_bytes, g->optimizer_bytes,
                           g->activations_bytes, g->other_bytes};
        int64_t sum = 0;
        for (int i = 0; i < 5; i++) {
            if (parts[i] < 0)
                return false;
            sum += parts[i];
        }
        if (sum != g->total_bytes || g->total_bytes > r->peak_bytes)
            return false;
    }
    return true;
}

int main(void)
{
    /* Shipped models, and Hugging Face fixtures for the architecture only they have:
     * sliding windows with attention sinks and expert biases (gpt-oss), four norms a
     * layer with q/k norms (Gemma 3), a window on every layer (Mistral). */
    static const char *const models[NMODELS] = {"deepseek-v3",
                                                "qwen3-235b-a22b",
                                                "qwen3-30b-a3b",
                                                "mixtral-8x7b",
                                                "llama3-8b",
                                                "llama3-405b",
                                                "gpt3-175b",
                                                "tiny-llama",
                                                "tests/fixtures/hf/gpt-oss-20b.json",
                                                "tests/fixtures/hf/gemma-3-1b.json",
                                                "mistral-7b"};
    const char *src = getenv("DPLAN_SOURCE_DIR");
    static const char *const systems[NSYSTEMS] = {"dgx-h100",   "hgx-b200",     "dgx-a100-80gb",
                                                  "8x-mi300x",  "8x-h100-pcie", "8x-l40s",
                                                  "gb200-nvl72"};
    static const int nodes[NNODES] = {1, 2, 16, 64};
    static const int p2[] = {1, 2, 4, 8, 16, 32, 64};
    static const int seqs[] = {512, 2048, 4096, 8192, 32768};
    struct dp_model m[NMODELS];
    struct dp_cluster cl[NSYSTEMS][NNODES];
    struct dp_err err = {0};
    for (int i = 0; i < NMODELS; i++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", src ? src : ".", models[i]);
        if (dp_model_load(strchr(models[i], '/') ? path : models[i], &m[i], &err)) {
            CHECK_STR(err.msg, "");
            return check_done("test_costmodel_sane");
        }
    }
    for (int i = 0; i < NSYSTEMS; i++)
        for (int j = 0; j < NNODES; j++)
            if (dp_cluster_from_system(systems[i], nodes[j], NULL, &cl[i][j], &err)) {
                CHECK_STR(err.msg, "");
                return check_done("test_costmodel_sane");
            }
    struct dp_mem_report *rep = malloc(sizeof *rep);
    struct dp_mem_opts mo;
    dp_mem_opts_default(&mo);
    int valid = 0, bad_time = 0, bad_mem = 0, moe = 0;
    for (int it = 0; it < 2000000 && valid < 3000; it++) {
        const struct dp_model *md = &m[draw(NMODELS)];
        const struct dp_cluster *c = &cl[draw(NSYSTEMS)][draw(NNODES)];
        int gpus = dp_cluster_gpus(c);
        struct dp_layout l;
        dp_layout_default(&l);
        l.tp = pick(p2, 4);
        l.cp = pick(p2, 7);
        l.pp = pick(p2, 6);
        l.ep = pick(p2, 7);
        l.vpp = 1 + draw(4);
        if (gpus % (l.tp * l.cp * l.pp) || l.tp > c->gpus_per_node)
            continue;
        l.dp = gpus / (l.tp * l.cp * l.pp);
        l.sp = l.tp > 1 && draw(2);
        l.zero = draw(4);
        l.recompute = (enum dp_recompute)draw(DP_RECOMPUTES);
        l.mbs = pick(p2, 4);
        l.gbs = l.mbs * l.dp * (1 + draw(16));
        l.seq_len = pick(seqs, 5);
        if (md->max_pos > 0 && l.seq_len > md->max_pos)
            l.seq_len = md->max_pos;
        l.framework = (enum dp_framework)draw(DP_FRAMEWORKS);
        l.shard_group = draw(3) ? 0 : pick(p2, 5);
        l.etp = draw(3) ? 0 : pick(p2, 3);
        if (!draw(4)) {
            l.moe_capacity = 1.0 + 0.25 * draw(4);
            l.moe_pad = draw(2);
        }
        if (!draw(4))
            l.moe_imbalance = 1.0 + 0.25 * draw(5);
        l.moe_dispatcher = (enum dp_moe_dispatcher)draw(2);
        l.ep_overlap = draw(2);
        if (!draw(3) && c->gpu.fp8_tflops > 0)
            l.gemm = DP_GEMM_FP8;
        l.tp_overlap = l.sp && draw(2);
        l.pp_overlap = l.vpp > 1 && draw(2);
        dp_err_clear(&err);
        if (dp_layout_validate(&l, md, gpus, &err) || dp_layout_check_framework(&l, NULL, &err))
            continue;
        valid++;
        moe += md->experts > 0;
        struct dp_step_cost sc;
        dp_time_step_fast(md, c, &l, &sc);
        bad_time += !dp_step_cost_sane(&sc);
        if (dp_mem_estimate(md, c, &l, &mo, rep, &err) || !mem_sane(rep))
            bad_mem++;
    }
    free(rep);
    /* The draws reach enough of the space to mean something, MoE layouts among them. */
    printf("%d valid layouts drawn, %d of them MoE\n", valid, moe);
    CHECK(valid >= 1000);
    CHECK(moe >= 300);
    CHECK_EQ(bad_time, 0);
    CHECK_EQ(bad_mem, 0);
    return check_done("test_costmodel_sane");
}
