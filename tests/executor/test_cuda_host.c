/*
 * The CUDA backend's host-only logic (executor/backend/cuda_host.c), which runs in every
 * build, GPU or not: the device arena's offsets, the communicator split plan, the choice
 * of a kernel image for a GPU, and the one-line errors. Expected values are worked out
 * by hand in the comments.
 */
#include "check.h"

#include "executor/backend/cuda_host.h"
#include "executor/backend/cuda_lt_host.h"
#include <string.h>

static void test_arena(void)
{
    struct dp__arena a;
    /* 1024 units of 256 bytes and 100 bytes over: the tail is not usable. */
    CHECK_EQ(dp__arena_init(&a, 1024 * 256 + 100), 0);
    CHECK_EQ(a.cap, 262144);
    CHECK_EQ(dp__arena_footprint(0), 256);
    CHECK_EQ(dp__arena_footprint(256), 256);
    CHECK_EQ(dp__arena_footprint(257), 512);
    size_t o1 = 1, o2 = 1, o3 = 1, o4 = 1;
    CHECK_EQ(dp__arena_alloc(&a, 1, &o1), 0);   /* [0, 256) */
    CHECK_EQ(dp__arena_alloc(&a, 300, &o2), 0); /* [256, 768) */
    CHECK_EQ(dp__arena_alloc(&a, 0, &o3), 0);   /* [768, 1024) */
    CHECK_EQ(o1, 0);
    CHECK_EQ(o2, 256);
    CHECK_EQ(o3, 768);
    CHECK_EQ(a.used, 1024);
    CHECK_EQ(a.hwm, 1024);
    /* Not the start of a live block: refused, nothing changes. */
    CHECK_EQ(dp__arena_free(&a, 5), DP_EINVAL);
    CHECK_EQ(a.used, 1024);
    /* Free the middle, then a block of the same size lands there (first fit). */
    CHECK_EQ(dp__arena_free(&a, 256), 0);
    CHECK_EQ(a.used, 512);
    CHECK_EQ(dp__arena_alloc(&a, 512, &o4), 0);
    CHECK_EQ(o4, 256);
    CHECK_EQ(a.hwm, 1024);
    /* A double free is refused. */
    CHECK_EQ(dp__arena_free(&a, 0), 0);
    CHECK_EQ(dp__arena_free(&a, 0), DP_EINVAL);
    /* Free extents now [0, 256) and [1024, cap): the largest is cap - 1024. */
    CHECK_EQ(dp__arena_largest(&a), 262144 - 1024);
    /* Freeing the rest coalesces everything into one extent of the whole arena. */
    CHECK_EQ(dp__arena_free(&a, 256), 0);
    CHECK_EQ(dp__arena_free(&a, 768), 0);
    CHECK_EQ(a.nfree, 1);
    CHECK_EQ(a.used, 0);
    CHECK_EQ(dp__arena_largest(&a), 262144);
    /* The whole arena in one block, then nothing more fits. */
    size_t big = 1;
    CHECK_EQ(dp__arena_alloc(&a, 262144, &big), 0);
    CHECK_EQ(big, 0);
    CHECK_EQ(dp__arena_alloc(&a, 1, &o1), DP_ENOMEM);
    CHECK_EQ(a.hwm, 262144);
    CHECK_EQ(dp__arena_free(&a, 0), 0);
    CHECK_EQ(dp__arena_alloc(&a, 262145, &o1), DP_ENOMEM);
    dp__arena_release(&a);

    /* Many blocks freed in an interleaved order still coalesce back to one extent. */
    CHECK_EQ(dp__arena_init(&a, 256 * 100), 0);
    size_t off[100];
    for (int i = 0; i < 100; i++)
        CHECK_EQ(dp__arena_alloc(&a, 256, &off[i]), 0);
    CHECK_EQ(off[99], 99 * 256);
    for (int i = 0; i < 100; i += 2)
        CHECK_EQ(dp__arena_free(&a, off[i]), 0);
    CHECK_EQ(a.nfree, 50);
    for (int i = 1; i < 100; i += 2)
        CHECK_EQ(dp__arena_free(&a, off[i]), 0);
    CHECK_EQ(a.nfree, 1);
    CHECK_EQ(dp__arena_largest(&a), 25600);
    dp__arena_release(&a);
}

static void test_split(void)
{
    /* tp 2, dp 2, pp 2; rank 5 = tp_rank 1 + 2 (dp_rank 0 + 2 pp_rank 1)
     * (core/coords.c: tp fastest, then dp, then pp). */
    struct dp__split s;
    dp__split_plan(5, &(struct dp_backend_cfg){.tp = 2, .dp = 2, .pp = 2}, &s);
    CHECK_EQ(s.color[DP_GROUP_WORLD], 0);
    CHECK_EQ(s.key[DP_GROUP_WORLD], 5);
    CHECK_EQ(s.color[DP_GROUP_TP], 2); /* dp_rank + dp pp_rank = 0 + 2 */
    CHECK_EQ(s.key[DP_GROUP_TP], 1);
    CHECK_EQ(s.color[DP_GROUP_DP], 3); /* tp_rank + tp pp_rank = 1 + 2 */
    CHECK_EQ(s.key[DP_GROUP_DP], 0);
    CHECK_EQ(s.color[DP_GROUP_PP], 1); /* tp_rank + tp dp_rank = 1 + 0 */
    CHECK_EQ(s.key[DP_GROUP_PP], 1);
    CHECK_EQ(s.color[DP_GROUP_EMB], 1); /* last stage of pipeline 1 */
    CHECK_EQ(s.color[DP_GROUP_NODE], -1);
    /* shard 0 = dp: one shard group of both DP ranks, replicas of one rank each */
    CHECK_EQ(s.color[DP_GROUP_SHARD], 3); /* 1 + 2 (1 + 2 (0 / 2)) */
    CHECK_EQ(s.key[DP_GROUP_SHARD], 0);

    /* pp 3: the middle stage holds no embedding, so it is outside the EMB group. */
    dp__split_plan(2, &(struct dp_backend_cfg){.tp = 1, .dp = 2, .pp = 3},
                   &s); /* tp 0, dp 0, pp 1 */
    CHECK_EQ(s.color[DP_GROUP_EMB], -1);

    /* Every group is the ranks that differ only in its own coordinate: over a 2 x 3 x 2
     * layout, two ranks share a TP colour iff their dp and pp ranks match, and the keys
     * inside a group are 0 .. size-1, each once. */
    enum { TP = 2, DPD = 3, PP = 2, W = TP * DPD * PP };
    struct dp__split all[W];
    for (int r = 0; r < W; r++)
        dp__split_plan(r, &(struct dp_backend_cfg){.tp = TP, .dp = DPD, .pp = PP}, &all[r]);
    for (int r = 0; r < W; r++)
        for (int q = 0; q < W; q++) {
            int rt = r % TP, rd = r / TP % DPD, rp = r / (TP * DPD);
            int qt = q % TP, qd = q / TP % DPD, qp = q / (TP * DPD);
            CHECK_EQ(all[r].color[DP_GROUP_TP] == all[q].color[DP_GROUP_TP], rd == qd && rp == qp);
            CHECK_EQ(all[r].color[DP_GROUP_DP] == all[q].color[DP_GROUP_DP], rt == qt && rp == qp);
            CHECK_EQ(all[r].color[DP_GROUP_PP] == all[q].color[DP_GROUP_PP], rt == qt && rd == qd);
            if (r != q && all[r].color[DP_GROUP_DP] == all[q].color[DP_GROUP_DP])
                CHECK(all[r].key[DP_GROUP_DP] != all[q].key[DP_GROUP_DP]);
        }
    /* HSDP, dp 4 in shards of 2: dp ranks {0,1} and {2,3} shard; {0,2}, {1,3} replicate. */
    struct dp__split h[4];
    for (int r = 0; r < 4; r++)
        dp__split_plan(r, &(struct dp_backend_cfg){.tp = 1, .dp = 4, .pp = 1, .shard = 2}, &h[r]);
    CHECK(h[0].color[DP_GROUP_SHARD] == h[1].color[DP_GROUP_SHARD]);
    CHECK(h[0].color[DP_GROUP_SHARD] != h[2].color[DP_GROUP_SHARD]);
    CHECK(h[0].color[DP_GROUP_REPL] == h[2].color[DP_GROUP_REPL]);
    CHECK(h[0].color[DP_GROUP_REPL] != h[1].color[DP_GROUP_REPL]);
    CHECK_EQ(h[3].key[DP_GROUP_SHARD], 1); /* 3 % 2 */
    CHECK_EQ(h[3].key[DP_GROUP_REPL], 1);  /* 3 / 2 */

    /* cp 2 (tp 2, dp 2, pp 1): rank = tp_rank + 2 (cp_rank + 2 dp_rank); rank 6 is tp 0,
     * cp 1, dp 1. Its ring is the ranks with tp 0 and dp 1: {4, 6}, where it is second;
     * its DP-CP group the ranks with tp 0: {0, 2, 4, 6}, where it is q = 1 + 2 1 = 3. */
    struct dp__split c[8];
    for (int r = 0; r < 8; r++)
        dp__split_plan(r, &(struct dp_backend_cfg){.tp = 2, .dp = 2, .pp = 1, .cp = 2}, &c[r]);
    for (int r = 0; r < 8; r++) {
        CHECK_EQ(c[r].color[DP_GROUP_CP] == c[6].color[DP_GROUP_CP], r == 4 || r == 6);
        CHECK_EQ(c[r].color[DP_GROUP_DPCP] == c[6].color[DP_GROUP_DPCP], r % 2 == 0);
        CHECK_EQ(c[r].color[DP_GROUP_DP] == c[6].color[DP_GROUP_DP], r == 2 || r == 6);
    }
    CHECK_EQ(c[6].key[DP_GROUP_CP], 1);
    CHECK_EQ(c[6].key[DP_GROUP_DPCP], 3);
    CHECK_EQ(c[6].key[DP_GROUP_SHARD], 3); /* ZeRO shards over the 4 dp x cp ranks */

    /* Experts under cp 2 (tp 1, dp 4, ep 2, pp 1), Megatron-Core's folding: the stage's
     * ranks i = cp_rank + 2 dp_rank (here the rank) refold as ep_rank = i % 2, edp_rank =
     * i / 2. Rank 5 (cp 1, dp 2) has ep_rank 1, edp_rank 2: its all-to-all partner is
     * rank 4 (its other cp rank), its EDP the ranks with i odd {1, 3, 5, 7}, where it is
     * third (key 2). */
    struct dp__split e[8];
    for (int r = 0; r < 8; r++)
        dp__split_plan(r, &(struct dp_backend_cfg){.tp = 1, .dp = 4, .pp = 1, .cp = 2, .ep = 2},
                       &e[r]);
    for (int r = 0; r < 8; r++) {
        CHECK_EQ(e[r].color[DP_GROUP_EP] == e[5].color[DP_GROUP_EP], r == 4 || r == 5);
        CHECK_EQ(e[r].color[DP_GROUP_EDP] == e[5].color[DP_GROUP_EDP], r % 2 == 1);
    }
    CHECK_EQ(e[5].key[DP_GROUP_EP], 1);
    CHECK_EQ(e[5].key[DP_GROUP_EDP], 2);
    CHECK_EQ(e[0].key[DP_GROUP_EDP], 0);

    /* tp 4, etp 2, ep 2, dp 2: i = tp_rank + 4 dp_rank = rank; etp_rank = i % 2, ep_rank =
     * i / 2 % 2, edp_rank = i / 4. Rank 6 (tp 2, dp 1): its expert tensor group {6, 7}, its
     * all-to-all {4, 6} (tp 0 and 2 of dp 1, key 1), its EDP {2, 6} (key 1). */
    struct dp__split t[8];
    for (int r = 0; r < 8; r++)
        dp__split_plan(r, &(struct dp_backend_cfg){.tp = 4, .dp = 2, .pp = 1, .ep = 2, .etp = 2},
                       &t[r]);
    for (int r = 0; r < 8; r++) {
        CHECK_EQ(t[r].color[DP_GROUP_ETP] == t[6].color[DP_GROUP_ETP], r == 6 || r == 7);
        CHECK_EQ(t[r].color[DP_GROUP_EP] == t[6].color[DP_GROUP_EP], r == 4 || r == 6);
        CHECK_EQ(t[r].color[DP_GROUP_EDP] == t[6].color[DP_GROUP_EDP], r == 2 || r == 6);
    }
    CHECK_EQ(t[6].key[DP_GROUP_ETP], 0);
    CHECK_EQ(t[6].key[DP_GROUP_EP], 1);
    CHECK_EQ(t[6].key[DP_GROUP_EDP], 1);

    /* HSDP with experts (dp 8, ep 2, shards of 4: 2 replicas): edp = 4 splits into 2
     * instances of 2 consecutive edp ranks. Rank 5: ep_rank 1, edp_rank 2; its expert shard
     * group edp ranks {2, 3} = ranks {5, 7} (key 0), its expert replicas edp ranks {0, 2} =
     * ranks {1, 5} (key 1). */
    struct dp__split z[8];
    for (int r = 0; r < 8; r++)
        dp__split_plan(r, &(struct dp_backend_cfg){.tp = 1, .dp = 8, .pp = 1, .ep = 2, .shard = 4},
                       &z[r]);
    for (int r = 0; r < 8; r++) {
        CHECK_EQ(z[r].color[DP_GROUP_ESHARD] == z[5].color[DP_GROUP_ESHARD], r == 5 || r == 7);
        CHECK_EQ(z[r].color[DP_GROUP_EREPL] == z[5].color[DP_GROUP_EREPL], r == 1 || r == 5);
    }
    CHECK_EQ(z[5].key[DP_GROUP_ESHARD], 0);
    CHECK_EQ(z[5].key[DP_GROUP_EREPL], 1);
}

static void test_images(void)
{
    int sass[8];
    CHECK_EQ(dp__cuda_parse_archs("80,90,100", sass, 8), 3);
    CHECK_EQ(sass[2], 100);
    CHECK_EQ(dp__cuda_parse_archs("", sass, 8), 0);
    bool jit = true;
    /* A100 sm_80: its own SASS. */
    CHECK_EQ(dp__cuda_pick_image(8, 0, sass, 3, 100, &jit), 80);
    CHECK(!jit);
    /* L4 / RTX 4090 sm_89 and A10 sm_86: sm_80 SASS runs within major 8. */
    CHECK_EQ(dp__cuda_pick_image(8, 9, sass, 3, 100, &jit), 80);
    CHECK_EQ(dp__cuda_pick_image(8, 6, sass, 3, 100, &jit), 80);
    /* H100 sm_90, B200 sm_100, B300 sm_103. */
    CHECK_EQ(dp__cuda_pick_image(9, 0, sass, 3, 100, &jit), 90);
    CHECK_EQ(dp__cuda_pick_image(10, 3, sass, 3, 100, &jit), 100);
    CHECK(!jit);
    /* RTX 5090 sm_120: no SASS of major 12, the compute_100 PTX is JIT-compiled. */
    CHECK_EQ(dp__cuda_pick_image(12, 0, sass, 3, 100, &jit), 100);
    CHECK(jit);
    /* T4 sm_75: older than everything built. */
    CHECK_EQ(dp__cuda_pick_image(7, 5, sass, 3, 100, &jit), -1);
}

static void test_errors(void)
{
    struct dp_err err = {0};
    /* ncclSystemError = 2: a runtime failure, not out-of-memory. */
    CHECK_EQ(dp__cuda_fail(&err, true, 2, 3, "h1", "ncclAllReduce", "dp", "unhandled system error"),
             DP_ERUNTIME);
    CHECK_STR(err.msg, "rank 3 (h1): ncclAllReduce over the dp group failed: unhandled system "
                       "error");
    dp_err_clear(&err);
    /* cudaErrorMemoryAllocation = 2. */
    CHECK_EQ(dp__cuda_fail(&err, false, 2, 0, "h0", "cudaMalloc", NULL, "out of memory"),
             DP_ENOMEM);
    CHECK_STR(err.msg, "rank 0 (h0): cudaMalloc failed: out of memory");
    dp_err_clear(&err);
    CHECK_EQ(dp__cuda_fail(&err, false, 700, 1, "h", "x", NULL, ""), DP_ERUNTIME);
    CHECK_STR(err.msg, "rank 1 (h): x failed: unknown error");
}

/*
 * cuBLASLt plans (cuda_lt_host.h). The executor's linears on tiny-gpt's QKV (N = 32
 * tokens, k = h = 16 in, n = 48 out):
 *  forward  Y = X W^T: ta 0, tb 1, m 32, n 48, k 16, lda 16, ldb 16, ldc 48;
 *  dgrad   dX = dY W: ta 0, tb 0, m 32, n 16, k 48, lda 48, ldb 16, ldc 16;
 *  wgrad   dW += dY^T X: ta 1, tb 0, m 48, n 16, k 32, lda 48, ldb 16, ldc 16.
 */
static void test_lt_plans(void)
{
    struct dp__lt_plan p;
    /* fp32: the buffers as they are, nothing copied. */
    dp__lt_plan_make(&p, DP_LT_FP32, false, true, 32, 48, 16, 16, 16, 48, 0, 0, false);
    CHECK(!p.copy);
    CHECK_EQ(p.bytes, 0);
    CHECK_EQ(p.key.lda, 16);
    CHECK_EQ(p.key.ta, 0);
    CHECK_EQ(p.key.tb, 1);
    /* FP8 forward is TN already: no transposes; K 16 is a multiple of 16 bytes of FP8.
     * A copy 32 x 16 = 512 bytes (256-aligned: B at 512), B 48 x 16 = 768: 1280. */
    dp__lt_plan_make(&p, DP_LT_FP8, false, true, 32, 48, 16, 16, 16, 48, 0, 0, false);
    CHECK(p.copy && !p.tr_a && !p.tr_b);
    CHECK_EQ(p.key.ta, 0);
    CHECK_EQ(p.key.tb, 1);
    CHECK_EQ(p.key.k, 16);
    CHECK_EQ(p.off_b, 512);
    CHECK_EQ(p.bytes, 1280);
    /* dgrad: B (W, stored k x n = 48 x 16) must become n x k = 16 x 48: transposed. */
    dp__lt_plan_make(&p, DP_LT_FP8, false, false, 32, 16, 48, 48, 16, 16, 1, 0, false);
    CHECK(!p.tr_a && p.tr_b);
    CHECK_EQ(p.key.ta, 0);
    CHECK_EQ(p.key.tb, 1);
    CHECK_EQ(p.rows_b, 16);
    CHECK_EQ(p.cols_b, 48);
    CHECK_EQ(p.key.ldb, 48);
    CHECK_EQ(p.key.fa, 1);
    /* wgrad: A (dY, stored k x m = 32 x 48) becomes m x k = 48 x 32; B (X, 32 x 16 = k x n)
     * becomes 16 x 32. Both transposed. */
    dp__lt_plan_make(&p, DP_LT_FP8, true, false, 48, 16, 32, 48, 16, 16, 1, 0, false);
    CHECK(p.tr_a && p.tr_b);
    CHECK_EQ(p.rows_a, 48);
    CHECK_EQ(p.cols_a, 32);
    CHECK_EQ(p.rows_b, 16);
    CHECK_EQ(p.key.lda, 32);
    /* An odd K pads to 16: k = 20 -> 32, the copies' rows 32 bytes; 3 x 32 = 96 -> 256,
     * then 5 x 32 = 160 -> 256: 512 bytes. */
    dp__lt_plan_make(&p, DP_LT_FP8, false, true, 3, 5, 20, 20, 20, 5, 0, 0, false);
    CHECK_EQ(p.key.k, 32);
    CHECK_EQ(p.key.lda, 32);
    CHECK_EQ(p.cols_a, 20);
    CHECK_EQ(p.bytes, 512);
    /* bf16 keeps the call's orientation; rows padded to 8 elements (16 bytes): the
     * wgrad's A stored 32 x 48 (ld 48), B 32 x 16 (ld 16): 3072 + 1024 bytes. */
    dp__lt_plan_make(&p, DP_LT_BF16, true, false, 48, 16, 32, 48, 16, 16, 0, 0, false);
    CHECK(p.copy && !p.tr_a && !p.tr_b);
    CHECK_EQ(p.key.ta, 1);
    CHECK_EQ(p.key.tb, 0);
    CHECK_EQ(p.rows_a, 32);
    CHECK_EQ(p.cols_a, 48);
    CHECK_EQ(p.key.lda, 48);
    CHECK_EQ(p.key.k, 32);
    CHECK_EQ(p.off_b, 3072);
    CHECK_EQ(p.bytes, 4096);
    /* 2-byte rows of 3 values pad to 8. */
    dp__lt_plan_make(&p, DP_LT_FP16, false, false, 2, 3, 3, 3, 3, 3, 0, 0, false);
    CHECK_EQ(p.key.lda, 8);
    CHECK_EQ(p.key.ldb, 8);

    /* The cache: a hit returns the slot; a different ld, compute or epilogue is a miss;
     * past DP_LT_SLOTS keys the oldest slot (0) is taken again and reported evicted. */
    struct dp__lt_cache c;
    memset(&c, 0, sizeof c);
    struct dp__lt_plan q;
    dp__lt_plan_make(&q, DP_LT_FP32, false, true, 32, 48, 16, 16, 16, 48, 0, 0, false);
    CHECK_EQ(dp__lt_cache_find(&c, &q.key), -1);
    bool ev = true;
    CHECK_EQ(dp__lt_cache_take(&c, &q.key, &ev), 0);
    CHECK(!ev);
    CHECK_EQ(dp__lt_cache_find(&c, &q.key), 0);
    struct dp__lt_key k2 = q.key;
    k2.compute = 1;
    CHECK_EQ(dp__lt_cache_find(&c, &k2), -1);
    k2 = q.key;
    k2.ldc = 64;
    CHECK_EQ(dp__lt_cache_find(&c, &k2), -1);
    k2 = q.key;
    k2.epi = 1; /* the bias epilogue is another descriptor */
    CHECK_EQ(dp__lt_cache_find(&c, &k2), -1);
    for (int i = 1; i < DP_LT_SLOTS; i++) {
        k2 = q.key;
        k2.m = 100 + i;
        CHECK_EQ(dp__lt_cache_take(&c, &k2, &ev), i);
        CHECK(!ev);
    }
    k2.m = 7;
    CHECK_EQ(dp__lt_cache_take(&c, &k2, &ev), 0);
    CHECK(ev);
    CHECK_EQ(dp__lt_cache_find(&c, &q.key), -1);
    CHECK_EQ(dp__lt_cache_find(&c, &k2), 0);

    /* FP8 tensor cores: sm_89 (Ada), sm_90 (Hopper), sm_100; not sm_80/86 (Ampere). */
    CHECK(!dp__lt_fp8_capable(8, 0));
    CHECK(!dp__lt_fp8_capable(8, 6));
    CHECK(dp__lt_fp8_capable(8, 9));
    CHECK(dp__lt_fp8_capable(9, 0));
    CHECK(dp__lt_fp8_capable(10, 0));
}

int main(void)
{
    test_lt_plans();
    test_arena();
    test_split();
    test_images();
    test_errors();
    return check_failures ? 1 : 0;
}
