/*
 * Context parallelism on one rank: the sequence split, the positions of the
 * local tokens, and ring attention over the CP group.
 *
 * Split: Megatron-Core's load-balanced causal scheme (get_batch_on_this_cp_rank
 * in megatron/training/utils.py): each sequence of seq_len rows is cut into
 * 2 cp chunks of C rows and cp rank i holds chunks i and 2 cp - 1 - i back to
 * back, so every rank does the same causal work. Every per-token operation
 * (norms, MLP, embedding, loss) runs on these T = seq_len / cp local rows;
 * the token ids, the learned positions and the RoPE angles are those of the
 * global positions (dp__cp_pos).
 *
 * Attention: the ring of Liu et al. 2023 ("Ring Attention with Blockwise
 * Transformers") as Megatron-Core/Transformer Engine run it for causal
 * chunks (transformer_engine/pytorch/attention.py, AttnFuncWithCPAndKVP2P):
 * each rank packs its keys and values into a block, computes its queries
 * against the block it holds, and passes the block on to the next rank of
 * the group (cp_rank + 1), cp - 1 times, merging the partial results by
 * online softmax; the log-sum-exp per query row is kept for the backward.
 * Backward walks the ring the same way with the block's dK, dV travelling
 * with it; after cp passes each block, with its gradient complete, is back
 * on its owner. Chunk pairs are full, causal (the diagonal) or skipped by
 * their global chunk indices (the backend's attn_ring_* kernels). Blocking
 * exchanges, no overlap of the ring with compute.
 */
#include "internal.h"

enum { TAG_RING = 7 };

int64_t dp__cp_pos(const struct dp_exec *ex, int64_t j)
{
    const struct dp_dims *dm = &ex->dm;
    if (dm->cp <= 1)
        return j;
    if (j < dm->C)
        return (int64_t)dm->cp_rank * dm->C + j;
    return (int64_t)(2 * dm->cp - 1 - dm->cp_rank) * dm->C + (j - dm->C);
}

/* Calls fn on each run of local tokens [n0, n0 + n) whose global positions are
 * consecutive (one chunk of one sequence): out row offset, first position, length. */
static void pos_runs(struct dp_exec *ex, real *buf, const real *src, int64_t n0, int64_t n,
                     bool fwd)
{
    const struct dp_dims *dm = &ex->dm;
    int64_t k = 0;
    while (k < n) {
        int64_t j = (n0 + k) % dm->T; /* local row in its sequence */
        int64_t end = j < dm->C ? dm->C : dm->T, len = end - j;
        if (len > n - k)
            len = n - k;
        if (fwd)
            OPS->pos_fwd(ex->be, buf + k * dm->h, src, dp__cp_pos(ex, j), len, dm->Tg, dm->h);
        else
            OPS->pos_bwd(ex->be, buf, src + k * dm->h, dp__cp_pos(ex, j), len, dm->Tg, dm->h);
        k += len;
    }
}

void dp__cp_pos_fwd(struct dp_exec *ex, real *out, const real *wpe, int64_t n0, int64_t n)
{
    pos_runs(ex, out, wpe, n0, n, true);
}

void dp__cp_pos_bwd(struct dp_exec *ex, real *dwpe, const real *dout, int64_t n0, int64_t n)
{
    pos_runs(ex, dwpe, dout, n0, n, false);
}

/* Columns [qd, qd + 2 kvd) of each qkv row (k, v) to kv rows of 2 kvd, or back (unpack:
 * a block's dk, dv into dqkv). */
static void pack(struct dp_exec *ex, real *kv, const real *qkv)
{
    const struct dp_dims *dm = &ex->dm;
    const size_t bytes = (size_t)(2 * dm->kvd) * sizeof(real);
    for (int64_t n = 0; n < dm->N; n++)
        OPS->copy(ex->be, kv + n * 2 * dm->kvd, qkv + n * dm->qkvd + dm->qd, bytes);
}
static void unpack(struct dp_exec *ex, real *dqkv, const real *dkv)
{
    const struct dp_dims *dm = &ex->dm;
    const size_t bytes = (size_t)(2 * dm->kvd) * sizeof(real);
    for (int64_t n = 0; n < dm->N; n++)
        OPS->copy(ex->be, dqkv + n * dm->qkvd + dm->qd, dkv + n * 2 * dm->kvd, bytes);
}

/* Global chunk indices of the two local halves of cp rank r. */
static void chunks(const struct dp_exec *ex, int r, int c[2])
{
    c[0] = r;
    c[1] = 2 * ex->dm.cp - 1 - r;
}

/* Pass the block in *cur (n reals) to the next rank and take the previous one's. */
static int ring_pass(struct dp_exec *ex, real **cur, real **nxt, int64_t n)
{
    const int cp = ex->dm.cp, r = ex->dm.cp_rank;
    dp__beat("context-parallel ring");
    TRY(OPS->sendrecv(ex->be, DP_GROUP_CP, (r + 1) % cp, *cur, n, TAG_RING, (r + cp - 1) % cp, *nxt,
                      n, TAG_RING, ex->err));
    real *t = *cur;
    *cur = *nxt;
    *nxt = t;
    return 0;
}

int dp__cp_attn_fwd(struct dp_exec *ex, const real *qkv, real *ctx, real *lse)
{
    const struct dp_dims *dm = &ex->dm;
    const int cp = dm->cp, r = dm->cp_rank;
    const int64_t blk = dm->N * 2 * dm->kvd, stats = dm->B * dm->a * dm->T;
    real *cur = ex->w.ring, *nxt = ex->w.ring + blk;
    int qc[2], kc[2];
    chunks(ex, r, qc);
    pack(ex, cur, qkv);
    OPS->zero(ex->be, ctx, (size_t)(dm->N * dm->qd) * sizeof(real));
    OPS->zero(ex->be, lse, (size_t)stats * sizeof(real));
    OPS->zero(ex->be, ex->w.cpst, (size_t)stats * sizeof(real));
    for (int s = 0; s < cp; s++) {
        chunks(ex, (r - s + cp) % cp, kc); /* the block now held came from rank r - s */
        OPS->attn_ring_fwd(ex->be, ctx, lse, ex->w.cpst, qkv, dm->qkvd, cur, qc, kc, dm->B, dm->C,
                           dm->a, dm->g, (int)dm->d);
        if (s + 1 < cp)
            TRY(ring_pass(ex, &cur, &nxt, blk));
    }
    OPS->attn_ring_done(ex->be, ctx, lse, ex->w.cpst, dm->B, dm->T, dm->a, (int)dm->d);
    dp__beat(NULL);
    return 0;
}

int dp__cp_attn_bwd(struct dp_exec *ex, real *dqkv, const real *dctx, const real *qkv,
                    const real *ctx, const real *lse)
{
    const struct dp_dims *dm = &ex->dm;
    const int cp = dm->cp, r = dm->cp_rank;
    const int64_t half = dm->N * 2 * dm->kvd, blk = 2 * half;
    real *cur = ex->w.ring, *nxt = ex->w.ring + blk;
    int qc[2], kc[2];
    chunks(ex, r, qc);
    pack(ex, cur, qkv);
    OPS->zero(ex->be, cur + half, (size_t)half * sizeof(real));
    OPS->zero(ex->be, dqkv, (size_t)(dm->N * dm->qkvd) * sizeof(real));
    OPS->attn_ring_dsum(ex->be, ex->w.cpst, dctx, ctx, dm->B, dm->T, dm->a, (int)dm->d);
    for (int s = 0; s < cp; s++) {
        chunks(ex, (r - s + cp) % cp, kc);
        OPS->attn_ring_bwd(ex->be, dqkv, cur + half, dctx, qkv, dm->qkvd, cur, lse, ex->w.cpst, qc,
                           kc, dm->B, dm->C, dm->a, dm->g, (int)dm->d);
        /* The cp-th pass brings each block's finished dK, dV home. */
        TRY(ring_pass(ex, &cur, &nxt, blk));
    }
    unpack(ex, dqkv, cur + half);
    dp__beat(NULL);
    return 0;
}
