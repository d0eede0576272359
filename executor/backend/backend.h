/*
 * The executor's backend interface: device memory, dense and element-wise
 * kernels, collectives and point-to-point messages over the parallel groups.
 *
 * The schedule and model code (model.c, schedule.c, run.c) touch tensors
 * only through these operations, so a CUDA + cuBLAS + NCCL backend can slot
 * in by filling the same table. Backends are made by the factory
 * (factory.c), the only code that names one: run.c asks for a backend by
 * the name the user gave. The CPU backend (cpu.c and its kernel families
 * cpu_gemm.c, cpu_attention.c, cpu_norm.c, cpu_loss.c, cpu_optim.c: MPI,
 * OpenBLAS CBLAS, OpenMP) is the reference; none.c stands in for it when
 * the build has no MPI or OpenBLAS.
 *
 * Conventions:
 *  - Pointers named `real *` are device buffers from `alloc`; `int32_t *`
 *    tokens too. Host data moves with `upload`/`download`.
 *  - Matrices are row-major. A linear layer stores W as [out, in] (PyTorch's
 *    nn.Linear), so Y[N, out] = X[N, in] W^T.
 *  - Kernels that produce parameter gradients accumulate (+=); the caller
 *    zeroes the gradient buffer once per step.
 *  - Collectives and p2p return 0 or a negative enum dp_status with err set
 *    (call site, rank and host). They are blocking, except the `_start` ones
 *    (completed by a wait). A group of size 1 makes them no-ops.
 */
#ifndef DPLAN_EXECUTOR_BACKEND_H
#define DPLAN_EXECUTOR_BACKEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/core.h"
#include "executor/real.h"

/* Communicators, Megatron order (executor.h states the rank formula). */
enum dp_group {
    DP_GROUP_WORLD = 0,
    DP_GROUP_TP,    /* same pp, dp: ranks differing in tp_rank */
    DP_GROUP_DP,    /* same pp, tp */
    DP_GROUP_PP,    /* same tp, dp: the pipeline */
    DP_GROUP_EMB,   /* first and last stage of one pipeline (tied embeddings, pp > 1) */
    DP_GROUP_NODE,  /* the ranks of this node (shared memory): memory checks, threads */
    DP_GROUP_SHARD, /* ZeRO shard group: dp x cp ranks with the same q / shard (HSDP), where
                     * q = cp_rank + cp dp_rank (dp_rank when cp = 1) */
    DP_GROUP_REPL,  /* replicas of one shard: dp x cp ranks with the same q % shard */
    DP_GROUP_CP,    /* same tp, dp, pp: the context-parallel ring (cp_rank order) */
    DP_GROUP_DPCP,  /* same tp, pp: the dp x cp ranks whose gradients are summed */
    /* Experts (groups.h dp__efold_of: Megatron-Core's folding of a stage's tp x cp x dp
     * ranks into etp x ep x edp). */
    DP_GROUP_EP,     /* same pp, etp_rank, edp_rank: the all-to-all's ranks */
    DP_GROUP_EDP,    /* same pp, etp_rank, ep_rank: every replica of one expert slice */
    DP_GROUP_ETP,    /* same pp, ep_rank, edp_rank: one expert's tensor-parallel ranks */
    DP_GROUP_ESHARD, /* ZeRO expert shard group: EDP ranks with the same edp_rank / esh */
    DP_GROUP_EREPL,  /* replicas of one expert shard (HSDP): same edp_rank % esh */
    DP_NGROUPS
};

enum dp_redop { DP_OP_SUM = 0, DP_OP_MAX = 1 };

/*
 * Storage precision of a run (the plan's layout precision; 0 is fp32, so a zeroed
 * configuration is today's fp32 run): what the working copy of the weights, the
 * activations kept for backward, their gradients and the TP/PP messages are stored in.
 * Master weights, gradients, their reductions and the optimizer state stay fp32
 * (Megatron's Float16OptimizerWithFloat16Params, llm.c's master weights); GEMMs and
 * kernels accumulate in fp32 (cuBLAS with bf16 inputs and CUBLAS_COMPUTE_32F).
 */
enum dp_dtype { DP_DT_FP32 = 0, DP_DT_BF16 = 1, DP_DT_FP16 = 2 };

/* Non-blocking requests a backend keeps in flight at once (allreduce_start). */
#define DP_MAX_REQS 64
/*
 * FP8 GEMM operand formats (gemm_fp8): E4M3 for forward tensors (activations, weights),
 * E5M2 for gradients under Transformer Engine's HYBRID format, E4M3 everywhere under
 * its E4M3 format (round.h gives both formats' numbers).
 */
enum dp_f8 { DP_F8_E4M3 = 0, DP_F8_E5M2 = 1 };

/* Norm eps (LayerNorm and RMSNorm), GPT-2 and Llama 2 defaults. */
#define DP_NORM_EPS 1e-5

struct dp_backend;

/* One message of a p2p batch: n reals to (send) or from peer (a rank of the group). */
struct dp_p2p {
    int peer;
    real *buf;
    int64_t n;
    int tag;
    bool send;
};

struct dp_backend_ops {
    const char *name; /* "cpu" */
    void (*destroy)(struct dp_backend *be);

    /* ---- memory (device); accounting is done by the caller (mem.c) */
    void *(*alloc)(struct dp_backend *be, size_t bytes); /* zeroed; NULL on failure */
    void (*free)(struct dp_backend *be, void *p);
    /* Bytes an allocation of `bytes` really occupies (the allocator's rounding), which
     * the resident-memory check counts (mem.c); NULL: `bytes`. */
    size_t (*footprint)(struct dp_backend *be, size_t bytes);
    void (*upload)(struct dp_backend *be, void *dst, const void *src, size_t bytes);
    void (*download)(struct dp_backend *be, void *dst, const void *src, size_t bytes);
    void (*zero)(struct dp_backend *be, void *dst, size_t bytes);
    void (*copy)(struct dp_backend *be, void *dst, const void *src, size_t bytes);

    /* ---- dense: C = alpha op(A) op(B) + beta C, op(X) = X or X^T; C is m x n */
    void (*gemm)(struct dp_backend *be, bool ta, bool tb, int m, int n, int k, real alpha,
                 const real *a, int lda, const real *b, int ldb, real beta, real *c, int ldc);

    /* ---- initialisation: dst[i][j] (rows x cols, leading dimension cols) gets element
     * (r0 + i, c0 + j) of a global tensor with `gcols` columns: std * N(0,1) drawn from a
     * counter-based generator keyed by (seed, key, global index), or `value` when std == 0.
     * So any slice of a tensor is identical to the same slice of the single-process tensor. */
    void (*init_fill)(struct dp_backend *be, real *dst, int64_t rows, int64_t cols, int64_t gcols,
                      int64_t r0, int64_t c0, uint64_t seed, uint64_t key, double std,
                      double value);

    /* ---- element-wise (n = N rows x C columns unless said otherwise) */
    /* Norm: out = norm(inp) * w (+ b); stats[2n] = mean (0 for RMSNorm), stats[2n+1] = rstd. */
    void (*norm_fwd)(struct dp_backend *be, enum dp_norm_kind kind, real *out, real *stats,
                     const real *inp, const real *w, const real *b, int64_t N, int64_t C);
    /* dinp += d/dinp; dw += ..., db += ... (b, db NULL for RMSNorm). */
    void (*norm_bwd)(struct dp_backend *be, enum dp_norm_kind kind, real *dinp, real *dw, real *db,
                     const real *dout, const real *inp, const real *w, const real *stats, int64_t N,
                     int64_t C);
    /* Every row of out = bias [C] (zeros if NULL): the C of a GEMM with beta = 1 that adds
     * the bias, instead of clearing C (beta = 0) and adding the bias in a second pass. */
    void (*bias_fill)(struct dp_backend *be, real *out, const real *bias, int64_t N, int64_t C);
    void (*bias_grad)(struct dp_backend *be, real *db, const real *dout, int64_t N, int64_t C);
    /* out = a + b + bias (b [N, C] and bias [C] may be NULL); out may alias a. */
    void (*residual)(struct dp_backend *be, real *out, const real *a, const real *b,
                     const real *bias, int64_t N, int64_t C);
    void (*add_inplace)(struct dp_backend *be, real *y, const real *x, int64_t n);
    /* GELU (tanh approximation, GPT-2) or SwiGLU (inp = [gate | up], F columns each). */
    void (*act_fwd)(struct dp_backend *be, enum dp_ffn_kind kind, real *out, const real *inp,
                    int64_t N, int64_t F);
    /* dinp (overwritten) = d/dinp; dbias (NULL: none) += the sum of dinp over the rows,
     * the gradient of a bias added to inp (F columns, or 2 F for SwiGLU). For GELU dinp
     * may be dout (in place). */
    void (*act_bwd)(struct dp_backend *be, enum dp_ffn_kind kind, real *dinp, real *dbias,
                    const real *dout, const real *inp, int64_t N, int64_t F);
    /* q/k RMSNorm (Qwen3) on the first nq + nk heads (width d) of each of N rows of x (row
     * stride ld): raw [N][(nq + nk) d] receives their inputs, rstd [N (nq + nk)] the
     * reciprocal rms, and x the normalised heads times wq (query heads) or wk (key heads).
     * qk_norm_bwd turns dL/d(output) in dx's heads into dL/d(input) in place; dwq, dwk +=. */
    void (*qk_norm_fwd)(struct dp_backend *be, real *x, int64_t ld, real *raw, real *rstd,
                        const real *wq, const real *wk, int64_t N, int nq, int nk, int d);
    void (*qk_norm_bwd)(struct dp_backend *be, real *dx, int64_t ld, real *dwq, real *dwk,
                        const real *raw, const real *rstd, const real *wq, const real *wk,
                        int64_t N, int nq, int nk, int d);
    /* Rotary embedding in place on the first nq + nk heads (of width d) of each row of x
     * (row stride ld); row n has position n % T; cs = [T][d/2] cos then [T][d/2] sin.
     * inverse = true applies the transpose (the backward). */
    void (*rope)(struct dp_backend *be, real *x, int64_t ld, int64_t N, int64_t T, int nq, int nk,
                 int d, const real *cs, bool inverse);
    /* Causal attention over qkv rows [B*T][(a + 2g) d] (q heads, then k, then v):
     * probs [B][a][T][T] softmax(q k^T / sqrt(d)), ctx [B*T][a d] = probs v. GQA: q head i
     * uses kv head i / (a / g). `attn_probs` computes probs only (selective recompute). */
    void (*attn_fwd)(struct dp_backend *be, real *ctx, real *probs, const real *qkv, int64_t B,
                     int64_t T, int a, int g, int d);
    void (*attn_probs)(struct dp_backend *be, real *probs, const real *qkv, int64_t B, int64_t T,
                       int a, int g, int d);
    /* dqkv = d/dqkv (overwritten); dprobs is scratch of the size of probs. */
    void (*attn_bwd)(struct dp_backend *be, real *dqkv, real *dprobs, const real *dctx,
                     const real *qkv, const real *probs, int64_t B, int64_t T, int a, int g, int d);
    /*
     * Flash attention (optional: NULL where a backend has none; the executor then runs
     * the three above). The same causal attention, tiled over query and key blocks with
     * the online softmax (flash_tile.h; Dao 2023, FlashAttention-2, Alg. 1 and 2), keeping
     * no probabilities: attn_flash_fwd writes ctx [B*T][a d] and lse [B][a][T], each
     * row's log-sum-exp of its scaled scores; attn_flash_bwd overwrites dqkv, rebuilding
     * the probabilities tile by tile from lse, with dsum [B][a][T] scratch for
     * D = rowsum(dctx * ctx). GQA as attn_fwd.
     */
    void (*attn_flash_fwd)(struct dp_backend *be, real *ctx, real *lse, const real *qkv, int64_t B,
                           int64_t T, int a, int g, int d);
    void (*attn_flash_bwd)(struct dp_backend *be, real *dqkv, real *dsum, const real *dctx,
                           const real *qkv, const real *ctx, const real *lse, int64_t B, int64_t T,
                           int a, int g, int d);
    /*
     * Ring attention (context parallelism, executor/cp.c). Each of the B sequences holds
     * T = 2 C local rows in two chunks of C rows, whose global chunk indices are qc[0],
     * qc[1] for the local queries and kc[0], kc[1] for the key/value block kv [B T][2 g d]
     * (k heads, then v heads) from some rank of the ring. A pair (query chunk, key chunk)
     * is full when kc < qc, causal when kc == qc, skipped when kc > qc. q is read from
     * qkv rows (q heads first, row stride ldq).
     *  attn_ring_fwd: online softmax (Milakov & Gimelshein 2018): acc [B T][a d] holds the
     *    unnormalised context, mx and sm [B][a][T] the running row max and sum of
     *    exponentials (start: all zero; sm 0 means nothing merged yet).
     *  attn_ring_done: ctx = acc / sm in place; mx becomes the log-sum-exp mx + log sm.
     *  attn_ring_dsum: dsum [B][a][T] = rowsum(dctx * ctx) (the backward's D).
     *  attn_ring_bwd: with the softmax rebuilt from lse: dq (row stride ldq) += the
     *    block's part of dL/dq; dkv [B T][2 g d] += dL/dk, dL/dv of the block's rows.
     */
    void (*attn_ring_fwd)(struct dp_backend *be, real *acc, real *mx, real *sm, const real *qkv,
                          int64_t ldq, const real *kv, const int qc[2], const int kc[2], int64_t B,
                          int64_t C, int a, int g, int d);
    void (*attn_ring_done)(struct dp_backend *be, real *ctx, real *mx, const real *sm, int64_t B,
                           int64_t T, int a, int d);
    void (*attn_ring_dsum)(struct dp_backend *be, real *dsum, const real *dctx, const real *ctx,
                           int64_t B, int64_t T, int a, int d);
    void (*attn_ring_bwd)(struct dp_backend *be, real *dq, real *dkv, const real *dctx,
                          const real *qkv, int64_t ldq, const real *kv, const real *lse,
                          const real *dsum, const int qc[2], const int kc[2], int64_t B, int64_t C,
                          int a, int g, int d);
    /* Vocabulary-parallel embedding: out[n] = wte[tok[n] - v0] if v0 <= tok < v0 + nv else 0. */
    void (*embed_fwd)(struct dp_backend *be, real *out, const int32_t *tok, const real *wte,
                      int64_t v0, int64_t nv, int64_t N, int64_t C);
    void (*embed_bwd)(struct dp_backend *be, real *dwte, const int32_t *tok, const real *dout,
                      int64_t v0, int64_t nv, int64_t N, int64_t C);
    /* Learned positions: out[n] += wpe[(n0 + n) % T]; backward accumulates into dwpe. */
    void (*pos_fwd)(struct dp_backend *be, real *out, const real *wpe, int64_t n0, int64_t N,
                    int64_t T, int64_t C);
    void (*pos_bwd)(struct dp_backend *be, real *dwpe, const real *dout, int64_t n0, int64_t N,
                    int64_t T, int64_t C);
    /*
     * Vocabulary-parallel cross-entropy over logits [N][nv] holding global columns
     * [v0, v0 + nv); columns >= vocab are padding and ignored.
     *  ce_max:  rowmax[n] = local max (-inf if no valid column)
     *  ce_sums: sums[n] = logit of the target if local else 0; sums[N + n] = sum exp(l - gmax)
     *  ce_grad: loss[n] = log(sumexp) + gmax - target logit; logits are overwritten by
     *           dloss * (softmax - onehot), the gradient of dloss * sum(loss).
     */
    void (*ce_max)(struct dp_backend *be, real *rowmax, const real *logits, int64_t N, int64_t nv,
                   int64_t v0, int64_t vocab);
    void (*ce_sums)(struct dp_backend *be, real *sums, const real *logits, const real *gmax,
                    const int32_t *tgt, int64_t N, int64_t nv, int64_t v0, int64_t vocab);
    void (*ce_grad)(struct dp_backend *be, real *logits, real *loss, const real *gmax,
                    const real *sums, const int32_t *tgt, int64_t N, int64_t nv, int64_t v0,
                    int64_t vocab, real dloss);
    /* Fused classifier for an unsplit vocabulary (tp = 1; optional: NULL, the executor
     * runs the three above): loss[n] and the in-place gradient of ce_grad from one read
     * of each row for its maximum and sum together (ce_online.h). */
    void (*ce_fused)(struct dp_backend *be, real *logits, real *loss, const int32_t *tgt, int64_t N,
                     int64_t nv, int64_t vocab, real dloss);
    /*
     * Mixture of experts (cpu_moe.c; executor/moe.c says where the conventions come from).
     *  router_topk: probs [N][E] holds the router logits on entry and their softmax on
     *    return; idx [N][K] the K largest probabilities' experts, largest first (ties: the
     *    lower index), w [N][K] their weights renormalised to sum 1. With bias [E]
     *    (DeepSeek-V3's scoring; NULL: the softmax): probs become the sigmoids s of the
     *    logits, the K largest s + bias are chosen, w = their s renormalised to sum 1.
     *  router_bwd: dl [N][E] = the logit gradient, from dw [R] (the gradient of the
     *    weight of grouped row r; choice (n, k) sits at row rrow[n K + k], -1 dropped)
     *    through w = softmax over the chosen logits, plus that of sum_e gaux[e] P[n][e]
     *    through the full softmax (the auxiliary loss). sigmoid: probs holds s, w is
     *    s renormalised over the chosen, P[n][e] = s_e / sum_i s_i (Megatron-Core's
     *    aux-loss scores of the sigmoid router).
     *  rows_gather: dst[r] = scale[r] src[idx[r]] (scale NULL: 1), rows of C.
     *  rows_scatter_add: dst[idx[r]] += scale[r] src[r], r in order (deterministic).
     *  rows_dot: out[r] = a[idx[r]] . b[r].
     */
    void (*router_topk)(struct dp_backend *be, real *probs, int32_t *idx, real *w, const real *bias,
                        int64_t N, int E, int K);
    void (*router_bwd)(struct dp_backend *be, real *dl, const real *probs, const real *w,
                       const int32_t *idx, const int32_t *rrow, const real *dw, const real *gaux,
                       bool sigmoid, int64_t N, int E, int K);
    void (*rows_gather)(struct dp_backend *be, real *dst, const real *src, const int32_t *idx,
                        const real *scale, int64_t R, int64_t C);
    void (*rows_scatter_add)(struct dp_backend *be, real *dst, const real *src, const int32_t *idx,
                             const real *scale, int64_t R, int64_t C);
    void (*rows_dot)(struct dp_backend *be, real *out, const real *a, const int32_t *idx,
                     const real *b, int64_t R, int64_t C);
    /* Host results in double: sum of x, sum of x^2. */
    double (*sum)(struct dp_backend *be, const real *x, int64_t n);
    double (*sumsq)(struct dp_backend *be, const real *x, int64_t n);
    /* AdamW (Loshchilov & Hutter 2019) on n elements: g = grad * gscale,
     * p -= lr * (mhat / (sqrt(vhat) + eps) + wd * p), bc1/bc2 = 1 - beta^t. */
    void (*adamw)(struct dp_backend *be, real *p, const real *grad, real *m, real *v, int64_t n,
                  double lr, double beta1, double beta2, double eps, double wd, double bc1,
                  double bc2, double gscale);

    /* ---- collectives over a group (in place) */
    int (*allreduce)(struct dp_backend *be, enum dp_group g, real *buf, int64_t n, enum dp_redop op,
                     struct dp_err *err);
    /* buf holds size * chunk elements; the reduced chunk of this rank lands in buf[0, chunk). */
    int (*reduce_scatter)(struct dp_backend *be, enum dp_group g, real *buf, int64_t chunk,
                          struct dp_err *err);
    /* buf holds size * chunk; this rank's chunk at buf[rank * chunk] is given to all. */
    int (*allgather)(struct dp_backend *be, enum dp_group g, real *buf, int64_t chunk,
                     struct dp_err *err);
    /* Uneven variants over a group of n ranks: counts[n] elements per rank, ranks in order.
     * reduce_scatter_v: buf holds the sum of counts; this rank's reduced piece lands in
     * buf[0, counts[rank]). allgather_v: this rank's piece already sits at its place
     * (the sum of the counts before it) and every piece is given to all. */
    int (*reduce_scatter_v)(struct dp_backend *be, enum dp_group g, real *buf, const int *counts,
                            struct dp_err *err);
    int (*allgather_v)(struct dp_backend *be, enum dp_group g, real *buf, const int *counts,
                       struct dp_err *err);
    /* All-to-all with counts (MPI_Alltoallv): scounts[i] elements of sbuf go to group
     * rank i, rcounts[i] arrive from it into rbuf, each side packed in rank order. */
    int (*alltoall_v)(struct dp_backend *be, enum dp_group g, const real *sbuf, const int *scounts,
                      real *rbuf, const int *rcounts, struct dp_err *err);
    /* allgather_v without blocking (ZeRO-3's prefetch of the next layer): _start posts it
     * (counts are copied), _wait completes it; buf is not to be read before. One at a
     * time per backend; other collectives may run in between, in the same order on
     * every rank of the group (MPI-3 Sec. 5.12). */
    int (*allgather_v_start)(struct dp_backend *be, enum dp_group g, real *buf, const int *counts,
                             struct dp_err *err);
    int (*allgather_v_wait)(struct dp_backend *be, struct dp_err *err);
    /* Host doubles (loss, squared norms, timings), in place. */
    int (*allreduce_host)(struct dp_backend *be, enum dp_group g, double *buf, int n,
                          enum dp_redop op, struct dp_err *err);
    /* Gather `n` host doubles from each rank of the group to its rank 0 (out: size * n). */
    int (*gather_host)(struct dp_backend *be, enum dp_group g, const double *in, double *out, int n,
                       struct dp_err *err);
    /* ---- point-to-point within a group (peer = rank in the group); -1 = no message */
    int (*sendrecv)(struct dp_backend *be, enum dp_group g, int to, const real *sbuf, int64_t sn,
                    int stag, int from, real *rbuf, int64_t rn, int rtag, struct dp_err *err);
    /* A batch of sends and receives (struct dp_p2p), all posted at once and waited for
     * together, as Megatron's p2p_communication batches torch's isend/irecv: no order of
     * the batch's messages can deadlock (interleaved 1F1B). */
    int (*p2p)(struct dp_backend *be, enum dp_group g, const struct dp_p2p *ops, int n,
               struct dp_err *err);
    int (*barrier)(struct dp_backend *be, enum dp_group g, struct dp_err *err);

    /*
     * ---- non-blocking gradient reductions (executor/overlap.c: DP gradient buckets
     * reduced while the backward runs, Megatron-Core's overlap_grad_reduce).
     * Optional: NULL where a backend has none; the executor then reduces after the
     * backward, blocking. `_start` posts a reduction in place with the semantics of
     * allreduce / reduce_scatter_v (counts are copied) and sets *req to a request id;
     * `req_wait` completes request `req` (ids are reused after it). buf is neither read
     * nor written by the caller in between. At most DP_MAX_REQS requests in flight per
     * backend. Order (MPI-3 Sec. 5.12): every rank of a group starts the group's
     * collectives, blocking or not, in the same order; waits may come in any order.
     * On the CPU (MPI without a progress thread) a request advances only inside MPI calls
     * (bench/executor/mpi_progress.c measures what that leaves); on CUDA it runs on the
     * communication stream after the compute stream's work so far, and req_wait orders the compute
     * stream's later work after it without a host sync (cuda_async.c).
     */
    int (*allreduce_start)(struct dp_backend *be, enum dp_group g, real *buf, int64_t n,
                           enum dp_redop op, int *req, struct dp_err *err);
    int (*reduce_scatter_v_start)(struct dp_backend *be, enum dp_group g, real *buf,
                                  const int *counts, int *req, struct dp_err *err);
    int (*req_wait)(struct dp_backend *be, int req, struct dp_err *err);

    /* ---- facts */
    int (*group_size)(struct dp_backend *be, enum dp_group g);
    int (*group_rank)(struct dp_backend *be, enum dp_group g);
    double (*wtime)(struct dp_backend *be);

    /* ---- device memory (optional, NULL on the CPU) */
    /* Once, before the first alloc: the bytes the memory plan predicts for this rank
     * (mem.c's pools). A device backend takes them at once (the CUDA arena), so a plan
     * that cannot fit fails before step 1 with the device's numbers (DP_EINFEASIBLE). */
    int (*reserve)(struct dp_backend *be, size_t bytes, struct dp_err *err);
    /* The most bytes allocated at once (the arena's high-water mark), and what the device
     * has in use now by every process (cudaMemGetInfo: total - free). */
    void (*mem_peak)(struct dp_backend *be, size_t *peak, size_t *device_used);

    /* ---- storage precision (optional: NULL where the backend runs fp32 only) */
    /* Every element of x rounded to the backend's dtype, to nearest, ties to even
     * (fp16: 65520 and above to inf), and stored back: what a bf16/fp16 store of a
     * tensor computed in fp32 keeps. The executor calls it only when dtype != fp32. */
    void (*round_store)(struct dp_backend *be, real *x, int64_t n);
    /* 2-byte storage words in the backend's dtype (bf16 or fp16; pack16.h): pack rounds
     * each of src's n values as round_store does and writes its 16-bit word to dst;
     * unpack writes each word's value to dst. unpack(pack(x)) equals round_store(x) bit
     * for bit (NaN stays NaN), so a tensor kept in 2 bytes (model.c's working copy of the
     * weights) computes as the emulated one. Called only when dtype != fp32. */
    void (*pack)(struct dp_backend *be, uint16_t *dst, const real *src, int64_t n);
    void (*unpack)(struct dp_backend *be, real *dst, const uint16_t *src, int64_t n);

    /* ---- FP8 GEMMs (optional: NULL where the backend has none; the executor refuses
     * --precision fp8 there). As gemm, with op(A) and op(B) each quantised to its format
     * with current per-tensor scaling: s = fp8_max / amax of the operand (round.h
     * dp__fp8_scale), q = fp8(x s) rounded to nearest even with saturation, then
     * C = alpha (q_A q_B) / (s_A s_B) + beta C, accumulated in fp32 (cuBLASLt's FP8
     * matmul with A/B scale pointers). */
    void (*gemm_fp8)(struct dp_backend *be, bool ta, bool tb, int m, int n, int k, real alpha,
                     const real *a, int lda, enum dp_f8 fa, const real *b, int ldb, enum dp_f8 fb,
                     real beta, real *c, int ldc);
    /* ---- fused GEMM + bias (optional: NULL, and the executor composes bias_fill and
     * gemm with beta 1): C = op(A) op(B) + bias, bias [n] added to every row of C
     * (cuBLASLt's CUBLASLT_EPILOGUE_BIAS). */
    void (*gemm_bias)(struct dp_backend *be, bool ta, bool tb, int m, int n, int k, const real *a,
                      int lda, const real *b, int ldb, const real *bias, real *c, int ldc);
};

/* A backend instance; implementations embed it first in their own struct. */
struct dp_backend {
    const struct dp_backend_ops *ops;
    int rank, world;
    int threads; /* compute threads of this rank */
    /* The step-time pricer (executor/predict.c): computes nothing, so what the step code
     * reads back (MoE routing) is to be assumed (moe.c: balanced). */
    bool prices_only;
    enum dp_dtype dtype; /* the configuration's; the executor's store points use it */
};

/* ------------------------------------------------------------------ the factory */

struct dp_backend_cfg {
    int tp, dp, pp; /* the layout's degrees: the backend's world must be tp * cp * dp * pp */
    int cp;         /* context parallelism (0 or 1: none) */
    int shard;      /* ZeRO shard group size (divides dp * cp; 0 = dp * cp) */
    int ep;         /* expert parallel size (0 = 1) */
    int etp;        /* expert tensor parallel size (divides tp; 0 = tp) */
    int threads;    /* compute threads per rank; <= 0: the backend's own rule */
    /* Storage precision (the default 0: fp32). A backend without round_store refuses
     * any other with one line. */
    enum dp_dtype dtype;
    bool fp8; /* the linear layers' GEMMs in FP8 (gemm_fp8): a device backend checks its GPU */
};

/* One kind of backend this build has (a file defines it; factory.c lists them). */
struct dp_backend_kind {
    const char *name; /* "cpu" */
    /* A backend for this process's rank; NULL with err set on failure. */
    struct dp_backend *(*create)(const struct dp_backend_cfg *cfg, struct dp_err *err);
    void (*finalize)(void);  /* at process end (MPI_Finalize); idempotent */
    void (*abort)(int code); /* end every rank of the job (MPI_Abort); may return */
    /* An environment variable the ranks should start with, "NAME=VALUE" (OpenBLAS reads
     * its core type only at load time), or NULL. */
    const char *(*rank_env)(void);
    /* The attention a run gets without --attention: flash (attn_flash_*) when set, else
     * the math attention (attn_fwd / attn_bwd). */
    bool flash_default;
};
extern const struct dp_backend_kind dp__cpu_kind; /* cpu.c, or none.c without MPI/OpenBLAS */
/* In builds with the CUDA backend (DP_HAVE_CUDA): NCCL, and host-staged over MPI;
 * cuda_loader.c, which opens the module libdplan_cuda.so (cuda.c) on first use. */
extern const struct dp_backend_kind dp__cuda_kind, dp__cuda_mpi_kind;
/* Whether the module loads and the CUDA runtime sees a GPU (tests skip without one). */
bool dp__cuda_device_present(void);

/* The backend `name` (NULL: the first of this build, "cpu"); NULL with err set when the
 * name is unknown or its creation fails. */
struct dp_backend *dp__backend_new(const char *name, const struct dp_backend_cfg *cfg,
                                   struct dp_err *err);
const struct dp_backend_kind *dp__backend_kind(const char *name);
/* Every kind's finalize / abort (only the one in use has anything to do). */
void dp__backend_finalize(void);
void dp__backend_abort(int code);
/* "cpu" (the names of this build, comma-separated). */
const char *dp__backend_names(void);

/* ------------------------------------------------------------------ from the executor */

/* The heartbeat (run.c): backends bump it after every completed collective. */
void dp__beat(const char *what);
/* Counter-based normal N(0,1) for element `idx` of tensor `key` (rng.c). */
double dp__rng_normal(uint64_t seed, uint64_t key, uint64_t idx);

#endif
