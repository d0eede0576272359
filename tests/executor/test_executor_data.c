/*
 * Token files (llm.c shards, raw uint16 arrays, dplan data prepare, the default
 * corpus), rank detection from launcher environments, the rank formula, the
 * buffer table against sizes worked out by hand, and memory accounting of
 * single-rank runs against the table.
 */
#include "check.h"
#include "executor/internal.h"
#include "launch/launch.h"

#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

static char dir[256];

static const char *path(const char *name)
{
    static char buf[4][512];
    static int k;
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof buf[k], "%s/%s", dir, name);
    return buf[k];
}

static void write_bytes(const char *file, const void *p, size_t n)
{
    FILE *f = fopen(file, "wb");
    fwrite(p, 1, n, f);
    fclose(f);
}

static void test_prepare_and_load(void)
{
    const char *text = "Hello, dplan! \xff\x01";
    write_bytes(path("a.txt"), text, strlen(text));
    write_bytes(path("b.txt"), "xyz", 3);
    char fa[512], fb[512];
    snprintf(fa, sizeof fa, "%s", path("a.txt"));
    snprintf(fb, sizeof fb, "%s", path("b.txt"));
    const char *files[] = {fa, fb};
    struct dp_err err = {0};
    int64_t n = 0;
    CHECK_EQ(dp_data_prepare(files, 2, path("t.bin"), DP_DATA_LLMC, &n, &err), 0);
    CHECK_EQ(n, (int64_t)strlen(text) + 3);
    struct dp_tokens t;
    CHECK_EQ(dp_tokens_load(path("t.bin"), DP_DATA_AUTO, 256, &t, &err), 0);
    CHECK_EQ(t.n, n);
    CHECK_EQ(t.tok[0], 'H');
    CHECK_EQ(t.tok[strlen(text) - 2], 0xff);
    CHECK_EQ(t.tok[t.n - 1], 'z');
    dp_tokens_release(&t);
    /* Raw uint16 (nanoGPT): no magic, detected as raw. */
    CHECK_EQ(dp_data_prepare(files, 2, path("t.raw"), DP_DATA_RAW, &n, &err), 0);
    CHECK_EQ(dp_tokens_load(path("t.raw"), DP_DATA_AUTO, 256, &t, &err), 0);
    CHECK_EQ(t.n, n);
    CHECK_EQ(t.tok[1], 'e');
    dp_tokens_release(&t);
    /* Tokens beyond the model's vocabulary. */
    dp_err_clear(&err);
    CHECK(dp_tokens_load(path("t.bin"), DP_DATA_AUTO, 100, &t, &err) != 0);
    CHECK_CONTAINS(err.msg, "is >= the model's vocab 100");
}

static void test_bad_files(void)
{
    struct dp_err err = {0};
    struct dp_tokens t;
    int32_t hdr[256] = {DP_LLMC_MAGIC, 1, 100};
    uint16_t tok[50] = {0};
    FILE *f = fopen(path("trunc.bin"), "wb");
    fwrite(hdr, sizeof hdr, 1, f);
    fwrite(tok, sizeof tok, 1, f);
    fclose(f);
    CHECK(dp_tokens_load(path("trunc.bin"), DP_DATA_AUTO, 256, &t, &err) != 0);
    CHECK_CONTAINS(err.msg, "size 1124 bytes, expected 1024 + 2*100 = 1224");
    hdr[1] = 7;
    write_bytes(path("v7.bin"), hdr, sizeof hdr);
    dp_err_clear(&err);
    CHECK(dp_tokens_load(path("v7.bin"), DP_DATA_AUTO, 256, &t, &err) != 0);
    CHECK_CONTAINS(err.msg, "version 7");
    write_bytes(path("odd.bin"), "abc", 3);
    dp_err_clear(&err);
    CHECK(dp_tokens_load(path("odd.bin"), DP_DATA_AUTO, 256, &t, &err) != 0);
    CHECK_CONTAINS(err.msg, "is odd");
    dp_err_clear(&err);
    CHECK(dp_tokens_load(path("odd.bin"), DP_DATA_LLMC, 256, &t, &err) != 0);
    CHECK_CONTAINS(err.msg, "shorter than the 1024-byte llm.c header");
    dp_err_clear(&err);
    CHECK(dp_tokens_load(path("none.bin"), DP_DATA_AUTO, 256, &t, &err) == DP_ENOENT);
    CHECK_CONTAINS(err.msg, "none.bin: cannot open");
}

static void test_default_corpus(void)
{
    struct dp_err err = {0};
    struct dp_tokens t;
    if (access("/usr/share/common-licenses", R_OK) == 0) {
        CHECK_EQ(dp_tokens_default(NULL, 256, &t, &err), 0);
        CHECK(t.n > 100000); /* Debian 12: ~250 k bytes of license texts */
        CHECK_CONTAINS(t.source, "/usr/share/common-licenses");
        dp_tokens_release(&t);
    }
    dp_err_clear(&err);
    CHECK(dp_tokens_default(path("no-such-dir"), 256, &t, &err) != 0);
    CHECK_CONTAINS(err.msg, "default corpus");
    dp_err_clear(&err);
    CHECK(dp_tokens_default(NULL, 100, &t, &err) != 0);
    CHECK_CONTAINS(err.msg, "vocab is 100");
}

static void test_env(void)
{
    struct dp_rank_env e;
    const char *vars[] = {"OMPI_COMM_WORLD_SIZE",
                          "OMPI_COMM_WORLD_RANK",
                          "PMI_SIZE",
                          "PMI_RANK",
                          "SLURM_PROCID",
                          "SLURM_NTASKS",
                          "SLURM_STEP_ID",
                          "SLURM_STEPID",
                          "RANK",
                          "WORLD_SIZE",
                          "LOCAL_RANK"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++)
        unsetenv(vars[i]);
    dp_launch_detect_env(&e);
    CHECK(!e.launched);
    CHECK_EQ(e.world, 1);
    setenv("RANK", "3", 1);
    setenv("WORLD_SIZE", "4", 1);
    setenv("LOCAL_RANK", "1", 1);
    dp_launch_detect_env(&e);
    CHECK_STR(e.source, "torchrun");
    CHECK_EQ(e.rank, 3);
    CHECK_EQ(e.world, 4);
    CHECK_EQ(e.local_rank, 1);
    /* A Slurm batch script (no step) is not a launch; srun is. */
    setenv("SLURM_PROCID", "5", 1);
    setenv("SLURM_NTASKS", "8", 1);
    dp_launch_detect_env(&e);
    CHECK_STR(e.source, "torchrun");
    setenv("SLURM_STEP_ID", "0", 1);
    dp_launch_detect_env(&e);
    CHECK_STR(e.source, "slurm");
    CHECK_EQ(e.rank, 5);
    /* MPICH/Hydra (PMI) is checked before Slurm, as launch/env.c orders them. */
    setenv("PMI_SIZE", "6", 1);
    setenv("PMI_RANK", "2", 1);
    dp_launch_detect_env(&e);
    CHECK_STR(e.source, "pmi");
    CHECK_EQ(e.rank, 2);
    CHECK_EQ(e.world, 6);
    setenv("OMPI_COMM_WORLD_SIZE", "2", 1);
    setenv("OMPI_COMM_WORLD_RANK", "1", 1);
    dp_launch_detect_env(&e);
    CHECK_STR(e.source, "openmpi");
    CHECK_EQ(e.rank, 1);
    CHECK_EQ(e.world, 2);
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++)
        unsetenv(vars[i]);
}

/* Megatron parallel_state docstring: 16 GPUs, tp=2, pp=4 (so dp=2): TP groups [0,1],
 * [2,3]...; DP groups [0,2], [1,3], [4,6]...; PP groups [0,4,8,12], [1,5,9,13]... */
static void test_rank_formula(void)
{
    struct dp_coords c;
    dp_rank_coords(5, 2, 2, 4, &c);
    CHECK_EQ(c.tp_rank, 1);
    CHECK_EQ(c.dp_rank, 0);
    CHECK_EQ(c.pp_rank, 1);
    dp_rank_coords(6, 2, 2, 4, &c);
    CHECK_EQ(c.tp_rank, 0);
    CHECK_EQ(c.dp_rank, 1);
    CHECK_EQ(c.pp_rank, 1);
    for (int r = 0; r < 16; r++) {
        dp_rank_coords(r, 2, 2, 4, &c);
        CHECK_EQ(dp_rank_of(&c, 2, 2, 4), r);
        CHECK_EQ(c.cp_rank, 0);
    }
    /* With CP (tp-cp-dp-pp, TP fastest), tp = cp = dp = pp = 2: rank 13 = 1 + 2 (0 + 2 (1 +
     * 2 * 1)), i.e. tp 1, cp 0, dp 1, pp 1; rank 6 = 0 + 2 (1 + 2 (1 + 0)): cp 1, dp 1. */
    dp_rank_coords_cp(13, 2, 2, 2, 2, &c);
    CHECK(c.tp_rank == 1 && c.cp_rank == 0 && c.dp_rank == 1 && c.pp_rank == 1);
    dp_rank_coords_cp(6, 2, 2, 2, 2, &c);
    CHECK(c.tp_rank == 0 && c.cp_rank == 1 && c.dp_rank == 1 && c.pp_rank == 0);
    for (int r = 0; r < 16; r++) {
        dp_rank_coords_cp(r, 2, 2, 2, 2, &c);
        CHECK_EQ(dp_rank_of_cp(&c, 2, 2, 2, 2), r);
    }
}

/*
 * The buffer table (memplan.c) for tiny-gpt (h 64, 2 layers, 4 heads of d 16, GELU ffn
 * 256, vocab 256, 64 learned positions, tied embeddings, LayerNorm, all biases) under
 * tp = pp = dp = 1, mbs 2, seq 32, gbs 4, recompute none, worked out from
 * executor/README.md "Buffer table" (4-byte elements):
 *   params per layer: ln1 2*64 + Wqkv 192*64 + bqkv 192 + Wo 64*64 + bo 64 + ln2 2*64
 *     + W1 256*64 + b1 256 + W2 64*256 + b2 64 = 49984; two layers 99968; + wte 256*64
 *     + wpe 64*64 + final norm 2*64 = 120576 parameters = 482304 bytes (grads the same,
 *     AdamW m and v 964608);
 *   a slot (N = 64 tokens): per layer x 4096, ln1 4096 + 128, qkv 64*192, probs
 *     2*4*32*32, ctx 4096, x2 4096, ln2 4096 + 128, fc1 64*256, act 64*256 = 73984;
 *     two layers + 64 input and 64 target ids = 148096 = 592384 bytes, one in flight
 *     (min(pp, M) = 1);
 *   head: xf 4096, lnf 4096 + 128, logits 64*256, cross-entropy 4*64 = 24960 = 99840;
 *   work: tmp, dtmp, dres 3*4096, dqkv 12288, dctx 4096, dprobs 8192, dact 16384 (GELU's
 *     input gradient in place: no dfc1) = 53248 = 212992; no pipeline buffer.
 */
static void test_memory_table(void)
{
    struct dp_model m;
    struct dp_err err = {0};
    CHECK_EQ(dp_model_load("tiny-gpt", &m, &err), 0);
    struct dp_layout l;
    dp_layout_default(&l);
    l.precision = DP_FP32;
    l.mbs = 2;
    l.gbs = 4;
    l.seq_len = 32;
    int64_t b[DP_NPOOLS];
    CHECK_EQ(dp_exec_memory(&m, &l, 0, b, &err), 0);
    CHECK_EQ(b[DP_POOL_PARAMS], 482304);
    CHECK_EQ(b[DP_POOL_GRADS], 482304);
    CHECK_EQ(b[DP_POOL_OPTIM], 964608);
    CHECK_EQ(b[DP_POOL_ACT_SLOTS], 592384);
    CHECK_EQ(b[DP_POOL_ACT_HEAD], 99840);
    CHECK_EQ(b[DP_POOL_ACT_WORK], 212992);
    CHECK_EQ(b[DP_POOL_COMM], 0);
    /* Flash attention: per layer the probabilities 2*4*32*32 = 8192 give way to the
     * log-sum-exp [B][a][T] = 2*4*32 = 256, so a slot holds 73984 - 8192 + 256 = 66048 per
     * layer, two layers and 128 ids = 132224 = 528896 bytes; work loses dprobs 8192 and
     * gains the backward's D [B][a][T] 256: 53248 - 8192 + 256 = 45312 = 181248 bytes. */
    CHECK_EQ(dp_exec_memory_attn(&m, &l, 0, DP_EXEC_ATTN_FLASH, b, &err), 0);
    CHECK_EQ(b[DP_POOL_ACT_SLOTS], 528896);
    CHECK_EQ(b[DP_POOL_ACT_WORK], 181248);
    CHECK_EQ(b[DP_POOL_ACT_HEAD], 99840);
    /* Selective recompute: the math attention drops probs from the slot (2 * (73984 -
     * 8192) + 128 = 131712 = 526848 bytes) and recomputes them into a work buffer (212992
     * + 8192 * 4 = 245760 bytes); flash has nothing to recompute and keeps the lse: the
     * same 528896 and 181248 as without recompute. */
    l.recompute = DP_RECOMPUTE_SELECTIVE;
    CHECK_EQ(dp_exec_memory(&m, &l, 0, b, &err), 0);
    CHECK_EQ(b[DP_POOL_ACT_SLOTS], 526848);
    CHECK_EQ(b[DP_POOL_ACT_WORK], 245760);
    CHECK_EQ(dp_exec_memory_attn(&m, &l, 0, DP_EXEC_ATTN_FLASH, b, &err), 0);
    CHECK_EQ(b[DP_POOL_ACT_SLOTS], 528896);
    CHECK_EQ(b[DP_POOL_ACT_WORK], 181248);
    l.recompute = DP_RECOMPUTE_NONE;
    /* ZeRO-1 over dp 4, mbs 1 (M = 4 / (1 * 4) = 1): 120576 parameters are a multiple
     * of 4, so AdamW holds 2 * 120576 / 4 = 60288 elements = 241152 bytes; a slot of
     * N = 32 tokens holds per layer x 2048, ln1 2048 + 64, qkv 32*192, probs 4*32*32,
     * ctx 2048, x2 2048, ln2 2048 + 64, fc1 32*256, act 32*256 = 36992, two layers and
     * 32 + 32 ids = 74048 = 296192 bytes. */
    l.dp = 4;
    l.zero = 1;
    l.mbs = 1;
    CHECK_EQ(dp_exec_memory(&m, &l, 0, b, &err), 0);
    CHECK_EQ(b[DP_POOL_OPTIM], 241152);
    CHECK_EQ(b[DP_POOL_ACT_SLOTS], 296192);
    /* ZeRO-2 over dp 4 (shard.c): a layer is one bucket of 49984 elements, the edge is
     * wte 256*64 + wpe 64*64 + final norm 2*64 = 20608 (2 * 49984 + 20608 = 120576);
     * the gradients are the shard 120576 / 4 = 30144 + the edge 20608 + one layer's
     * window 49984 = 100736 elements = 402944 bytes; parameters stay flat (482304). */
    l.zero = 2;
    CHECK_EQ(dp_exec_memory(&m, &l, 0, b, &err), 0);
    CHECK_EQ(b[DP_POOL_PARAMS], 482304);
    CHECK_EQ(b[DP_POOL_GRADS], 402944);
    CHECK_EQ(b[DP_POOL_OPTIM], 241152);
    /* ZeRO-3: the parameters are sharded the same way, plus a second layer window for
     * the next layer's prefetch (shard.c): 100736 + 49984 = 150720 elements = 602880
     * bytes. */
    l.zero = 3;
    CHECK_EQ(dp_exec_memory(&m, &l, 0, b, &err), 0);
    CHECK_EQ(b[DP_POOL_PARAMS], 602880);
    CHECK_EQ(b[DP_POOL_GRADS], 402944);
    CHECK_EQ(b[DP_POOL_OPTIM], 241152);
    /* HSDP, shard groups of 2 of the 4: shards of 120576 / 2 = 60288, so gradients
     * 60288 + 20608 + 49984 = 130880 elements = 523520 bytes, parameters one window more
     * (ZeRO-3's prefetch) 180864 = 723456 bytes, AdamW 2 * 60288 * 4 = 482304 bytes. */
    l.shard_group = 2;
    CHECK_EQ(dp_exec_memory(&m, &l, 0, b, &err), 0);
    CHECK_EQ(b[DP_POOL_PARAMS], 723456);
    CHECK_EQ(b[DP_POOL_GRADS], 523520);
    CHECK_EQ(b[DP_POOL_OPTIM], 482304);
}

/* Single-rank runs: the accounted pools after a step against the buffer table; the
 * slots may hold less than the table's bound only if 1F1B kept fewer in flight. */
static void test_memory_single_rank(void)
{
    const char *models[] = {"tiny-gpt", "tiny-llama"};
    struct dp_tokens tok = {0};
    tok.n = 4096;
    tok.tok = calloc((size_t)tok.n, sizeof *tok.tok);
    for (int64_t i = 0; i < tok.n; i++)
        tok.tok[i] = (uint16_t)(i * 7 % 256);
    for (int mi = 0; mi < 2; mi++)
        for (int rc = 0; rc < 3; rc++)
            for (int mbs = 1; mbs <= 4; mbs *= 4)
                for (int fa = 0; fa < 2; fa++) { /* math, flash attention */
                    struct dp_model m;
                    struct dp_err err = {0};
                    CHECK_EQ(dp_model_load(models[mi], &m, &err), 0);
                    struct dp_layout l;
                    dp_layout_default(&l);
                    l.precision = DP_FP32;
                    l.mbs = mbs;
                    l.gbs = 4;
                    l.seq_len = 32;
                    l.recompute = (enum dp_recompute)rc;
                    int64_t plan[DP_NPOOLS];
                    const enum dp_exec_attn at = fa ? DP_EXEC_ATTN_FLASH : DP_EXEC_ATTN_MATH;
                    CHECK_EQ(dp_exec_memory_attn(&m, &l, 0, at, plan, &err), 0);
                    struct dp_exec_opts o;
                    dp_exec_opts_default(&o);
                    o.attention = at;
                    o.data = &tok;
                    o.threads = 1;
                    struct dp_exec *ex;
                    CHECK_EQ(dp__exec_new(&m, &l, &o, &ex, &err), 0);
                    double loss;
                    CHECK_EQ(dp__forward_backward(ex, 1, &loss), 0);
                    CHECK_EQ(dp__optimizer_step(ex, 1e-3, 1.0), 0);
                    for (int p = 0; p < DP_NPOOLS; p++)
                        CHECK_EQ(ex->mem.peak[p], plan[p]);
                    dp__exec_free(ex);
                }
    free(tok.tok);
}

int main(void)
{
    snprintf(dir, sizeof dir, "/tmp/dplan-test-data-XXXXXX");
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    test_prepare_and_load();
    test_bad_files();
    test_default_corpus();
    test_env();
    test_rank_formula();
    test_memory_table();
    test_memory_single_rank();
    dp_exec_finalize();
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", dir);
    return check_done("test_executor_data");
}
