/*
 * Predicted step time of `dplan run` on this machine (run_predict.h): the
 * calls one step of the CPU executor makes, each priced with what the probe
 * measured here (executor/probe.c) and what MPI took in this run.
 *
 * Why not the GPU step-time model: costmodel/time.c prices GEMMs with cuBLAS
 * 128-wide tile quantisation and a saturating efficiency curve and has no
 * per-call cost; at tiny-gpt's sizes (hidden 64, head_dim 16) that predicted
 * 27 ms for a 3.5 ms step. On a CPU a small product is not starved of tiles
 * but pays a fixed call cost, each parallel region pays an OpenMP fork and
 * join, and element-wise passes run at the bandwidth of the cache level
 * their operands fit in (measured here: ~135 GB/s per thread in L2, ~5 in
 * DRAM). What the two models share: 1F1B's fill and drain (Narayanan et al.
 * 2021, Sec. 2.2) and alpha-beta collectives with the all-reduce factor
 * 2(n-1)/n (nccl-tests doc/PERFORMANCE.md).
 *
 * The calls mirror executor/model.c (layer_forward/layer_backward, embedding,
 * head) and schedule.c (pipeline, reduce_grads, optimizer); the thread split
 * of each GEMM is the executor's own rule (dp_exec_gemm_threads). A change of
 * the executor's call sequence needs a change here: exec_predict_tiny fails
 * when they drift apart by more than a factor of 1.5.
 */
#include "run_predict.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "costmodel/costmodel.h"
#include "executor/probe.h"
#include "fit/fit.h"

#define R 4.0 /* bytes per element: the executor computes in fp32 */

/* The machine and this rank's share of it. */
struct cm {
    struct dp_device_probe pr;
    int nt;          /* threads per rank */
    bool shared;     /* other ranks compute at the same time: GEMMs run at conc_eff */
    double a_step;   /* MPI: seconds per step of a collective (recursive doubling) */
    double coll_bps; /* MPI: bus bandwidth, bytes/s */
    /* Fitted alpha-beta per collective (calibration profile), by enum coll; NULL: none. */
    const struct dp_cal_coll *fit[4];
};

/* Seconds by kind, and core-seconds (for time-sharing when threads exceed cores). */
struct parts {
    double gemm, attn, ew, fork, comm, opt;
    double core_s;
};

static double total(const struct parts *p)
{
    return p->gemm + p->attn + p->ew + p->fork + p->comm + p->opt;
}

static void add(struct parts *a, const struct parts *b, double k)
{
    a->gemm += k * b->gemm;
    a->attn += k * b->attn;
    a->ew += k * b->ew;
    a->fork += k * b->fork;
    a->comm += k * b->comm;
    a->opt += k * b->opt;
    a->core_s += k * b->core_s;
}

/* Streaming bandwidth (bytes/s per thread) for a working set of `ws` bytes per thread:
 * that of the cache level it fits in. */
static double bw(const struct cm *c, double ws)
{
    int lv = ws <= (double)c->pr.cache_bytes[0] ? 0 : ws <= (double)c->pr.cache_bytes[1] ? 1 : 2;
    return c->pr.bw_gbps[lv] * 1e9;
}

/* A parallel region of the rank's threads: its fork and join. */
static void region(const struct cm *c, struct parts *p)
{
    if (c->nt > 1) {
        p->fork += c->pr.fork_s;
        p->core_s += c->nt * c->pr.fork_s;
    }
}

/* C[m, n] = A[m, k] B[k, n], split by rows as kernels.c splits it (whole 16-row panels per
 * thread): a fixed call cost, the FLOPs at the probed rate, and the packing of the
 * operands into panels (GotoBLAS/OpenBLAS copy A's rows and all of B, read and write:
 * 8 bytes per element, at the bandwidth of where they sit). Each thread packs all of B:
 * what splitting a small product repeats. */
static void gemm(const struct cm *c, struct parts *p, double m, double n, double k)
{
    int nth = dp_exec_gemm_threads((int)m, (int)n, (int)k, c->nt);
    double rows = m;
    if (nth > 1) {
        region(c, p);
        rows = ceil(ceil(m / nth) / 16) * 16;
        rows = rows < m ? rows : m;
    }
    double eff = nth > 1 || c->shared ? c->pr.conc_eff : 1.0;
    double pack = (rows + n) * k;
    double t = c->pr.gemm_call_s + 2 * rows * n * k / (c->pr.gemm_gflops * 1e9 * eff) +
               2 * R * pack / bw(c, R * pack);
    p->gemm += t;
    p->core_s += nth * t;
}

/* An element-wise kernel over `elems` elements moving `bytes`, `ns` ns of compute per
 * element on one thread, split over the rank's threads: the slower of compute and memory
 * (a roofline), plus the region. */
static void ew(const struct cm *c, struct parts *p, double *bucket, double elems, double bytes,
               double ns)
{
    region(c, p);
    double per = bytes / c->nt;
    double t = fmax(elems * ns * 1e-9 / c->nt, per / bw(c, per));
    *bucket += t;
    p->core_s += c->nt * t;
}

/* memset/memcpy on the calling thread. */
static void serial(const struct cm *c, struct parts *p, double *bucket, double bytes)
{
    double t = bytes / bw(c, bytes);
    *bucket += t;
    p->core_s += t;
}

enum coll { AR, RS, AG, P2P };

/* Alpha-beta over n ranks: log2(n) latency steps (Open MPI's recursive doubling for small
 * messages), the bytes with nccl-tests' bus factors: all-reduce 2(n-1)/n, reduce-scatter
 * and all-gather (n-1)/n, a point-to-point message 1. */
static double coll(const struct cm *c, enum coll k, double bytes, int n)
{
    if (n <= 1 && k != P2P)
        return 0;
    if (c->fit[k]) {
        /* The calibration's fit, in its own model: alpha per ring step, nccl-tests' bus
         * bandwidth (fit/fit.h dp_fit_alpha_beta). */
        static const enum dp_nccl_coll kind[] = {DP_NCCL_ALL_REDUCE, DP_NCCL_REDUCE_SCATTER,
                                                 DP_NCCL_ALL_GATHER, DP_NCCL_SENDRECV};
        int r = k == P2P ? 2 : n;
        return c->fit[k]->alpha_us * 1e-6 * dp_nccl_ring_steps(kind[k], r) +
               dp_nccl_busbw_factor(kind[k], r) * bytes / (c->fit[k]->busbw_gbps * 1e9);
    }
    double steps = k == P2P ? 1 : ceil(log2((double)n));
    double f = k == P2P ? 1 : k == AR ? 2.0 * (n - 1) / n : (double)(n - 1) / n;
    return c->a_step * steps + f * bytes / c->coll_bps;
}

struct shape {
    const struct dp_model *m;
    const struct dp_layout *l;
    double B, T, N, Nl, h, d, a, g, qd, qkvd, f, F1, Vl;
    int tp;
    bool sp;
};

/* The row-parallel GEMM and the residual add after attention and after the MLP
 * (model.c linear_residual). */
static void linear_residual(const struct cm *c, const struct shape *s, struct parts *p, double k)
{
    gemm(c, p, s->N, s->h, k);
    if (s->tp == 1) {
        ew(c, p, &p->ew, s->Nl * s->h, R * 2 * s->Nl * s->h, 0);
        return;
    }
    p->comm += coll(c, s->sp ? RS : AR, R * s->N * s->h, s->tp);
    ew(c, p, &p->ew, s->Nl * s->h, R * 3 * s->Nl * s->h, 0);
}

static void layer_fwd(const struct cm *c, const struct shape *s, struct parts *p)
{
    const struct dp_model *m = s->m;
    double N = s->N, Nl = s->Nl, h = s->h;
    ew(c, p, &p->ew, Nl * h, R * (2 * Nl * h + 2 * Nl), c->pr.norm_fwd_ns);
    if (s->sp)
        p->comm += coll(c, AG, R * N * h, s->tp);
    if (m->qkv_bias)
        ew(c, p, &p->ew, N * s->qkvd, R * N * s->qkvd, 0);
    gemm(c, p, N, s->qkvd, h);
    if (m->pos == DP_POS_ROPE)
        ew(c, p, &p->ew, N * (s->a + s->g) * s->d, R * 2 * N * (s->a + s->g) * s->d, 0);
    /* Attention: one task per (sequence, head) over the threads, the probabilities kept. */
    serial(c, p, &p->attn, R * N * s->qd);
    region(c, p);
    double tasks = s->B * s->a, probs = R * tasks * s->T * s->T;
    double t =
        fmax(ceil(tasks / c->nt) * c->pr.attn_fwd_s, (probs + R * N * (s->qkvd + s->qd)) / c->nt /
                                                         bw(c, (probs + R * N * s->qkvd) / c->nt));
    p->attn += t;
    p->core_s += c->nt * t;
    linear_residual(c, s, p, s->qd);
    ew(c, p, &p->ew, Nl * h, R * (2 * Nl * h + 2 * Nl), c->pr.norm_fwd_ns);
    if (s->sp)
        p->comm += coll(c, AG, R * N * h, s->tp);
    if (m->mlp_bias)
        ew(c, p, &p->ew, N * s->F1, R * N * s->F1, 0);
    gemm(c, p, N, s->F1, h);
    ew(c, p, &p->ew, N * s->f, R * N * (s->F1 + s->f), c->pr.act_fwd_ns);
    linear_residual(c, s, p, s->f);
}

static void layer_bwd(const struct cm *c, const struct shape *s, struct parts *p)
{
    const struct dp_model *m = s->m;
    double N = s->N, Nl = s->Nl, h = s->h;
    if (s->l->recompute == DP_RECOMPUTE_FULL)
        layer_fwd(c, s, p); /* the layer again from its kept input */
    if (m->mlp_bias)
        ew(c, p, &p->ew, Nl * h, R * Nl * h, 0);
    if (s->sp)
        p->comm += coll(c, AG, R * N * h, s->tp);
    gemm(c, p, N, s->f, h);
    gemm(c, p, h, s->f, N);
    ew(c, p, &p->ew, N * s->f, R * N * (s->f + 2 * s->F1), c->pr.act_bwd_ns);
    gemm(c, p, s->F1, h, N);
    gemm(c, p, N, h, s->F1);
    if (s->tp > 1)
        p->comm += coll(c, s->sp ? RS : AR, R * N * h, s->tp);
    ew(c, p, &p->ew, Nl * h, R * 4 * Nl * h, c->pr.norm_bwd_ns);
    if (m->out_bias)
        ew(c, p, &p->ew, Nl * h, R * Nl * h, 0);
    if (s->sp)
        p->comm += coll(c, AG, R * N * h, s->tp);
    gemm(c, p, N, s->qd, h);
    gemm(c, p, h, s->qd, N);
    double probs = R * s->B * s->a * s->T * s->T;
    if (s->l->recompute == DP_RECOMPUTE_SELECTIVE) {
        region(c, p);
        double t = ceil(s->B * s->a / c->nt) * c->pr.attn_probs_s;
        p->attn += t;
        p->core_s += c->nt * t;
    }
    /* One task per (sequence, kv head), each over its a/g query heads. */
    serial(c, p, &p->attn, R * N * s->qkvd);
    region(c, p);
    double t = fmax(ceil(s->B * s->g / c->nt) * (s->a / s->g) * c->pr.attn_bwd_s,
                    (2 * probs + R * N * (2 * s->qkvd + s->qd)) / c->nt / bw(c, 2 * probs / c->nt));
    p->attn += t;
    p->core_s += c->nt * t;
    if (m->pos == DP_POS_ROPE)
        ew(c, p, &p->ew, N * (s->a + s->g) * s->d, R * 2 * N * (s->a + s->g) * s->d, 0);
    if (m->qkv_bias)
        ew(c, p, &p->ew, N * s->qkvd, R * N * s->qkvd, 0);
    gemm(c, p, s->qkvd, h, N);
    gemm(c, p, N, h, s->qkvd);
    if (s->tp > 1)
        p->comm += coll(c, s->sp ? RS : AR, R * N * h, s->tp);
    ew(c, p, &p->ew, Nl * h, R * 4 * Nl * h, c->pr.norm_bwd_ns);
}

/* One micro-batch through stage `st` (forward and backward, its pipeline messages). */
static void stage_mb(const struct cm *c, const struct shape *s, int st, struct parts *p)
{
    const struct dp_model *m = s->m;
    const struct dp_layout *l = s->l;
    double N = s->N, Nl = s->Nl, h = s->h, V = s->Vl;
    bool first = st == 0, last = st == l->pp - 1;
    int L = dp_layout_stage_layers(l, m, st);
    memset(p, 0, sizeof *p);
    if (first) {
        ew(c, p, &p->ew, N * h, R * 2 * N * h, 0);
        if (s->tp > 1)
            p->comm += coll(c, s->sp ? RS : AR, R * N * h, s->tp);
        if (m->pos == DP_POS_LEARNED)
            ew(c, p, &p->ew, Nl * h, R * 3 * Nl * h, 0);
    }
    struct parts one;
    memset(&one, 0, sizeof one);
    layer_fwd(c, s, &one);
    layer_bwd(c, s, &one);
    add(p, &one, L);
    if (last) {
        /* Final norm, LM head, vocabulary-parallel cross-entropy (max and sums all-reduced
         * over TP), and the backward through them. */
        ew(c, p, &p->ew, Nl * h, R * (2 * Nl * h + 2 * Nl), c->pr.norm_fwd_ns);
        if (s->sp)
            p->comm += coll(c, AG, R * N * h, s->tp);
        gemm(c, p, N, V, h);
        ew(c, p, &p->ew, N * V, R * 4 * N * V, c->pr.ce_ns);
        p->comm += coll(c, AR, R * N, s->tp) + coll(c, AR, R * 2 * N, s->tp);
        gemm(c, p, V, h, N);
        gemm(c, p, N, h, V);
        serial(c, p, &p->ew, R * Nl * h);
        ew(c, p, &p->ew, Nl * h, R * 4 * Nl * h, c->pr.norm_bwd_ns);
        if (s->sp)
            p->comm += coll(c, RS, R * N * h, s->tp);
    }
    if (first) {
        if (m->pos == DP_POS_LEARNED)
            ew(c, p, &p->ew, Nl * h, R * 2 * Nl * h, 0);
        ew(c, p, &p->ew, N * h, R * 3 * N * h, 0);
    }
    /* 1F1B: an activation out and a gradient back across each boundary of the stage. */
    if (l->pp > 1)
        p->comm += 2 * coll(c, P2P, R * Nl * h, 2);
}

/* Once per step on a rank of stage `st`: zeroing the gradients, their reductions, the
 * loss and norm all-reduce, the norm, AdamW (one region per tensor slice) and the ZeRO-1
 * gather. */
static void stage_step(const struct cm *c, const struct shape *s, int st, double params,
                       struct parts *p)
{
    const struct dp_model *m = s->m;
    const struct dp_layout *l = s->l;
    bool first = st == 0, last = st == l->pp - 1;
    memset(p, 0, sizeof *p);
    /* Tensor slices of the stage (model.c build_segments). */
    bool ln = m->norm == DP_NORM_LAYERNORM;
    double per_layer = (ln ? 4 : 2) + 3 + (m->qkv_bias ? 3 : 0) + 1 + (m->out_bias ? 1 : 0) +
                       (m->ffn == DP_FFN_SWIGLU ? 2 : 1) * (m->mlp_bias ? 2 : 1) + 1 +
                       (m->mlp_bias ? 1 : 0);
    double segs = per_layer * dp_layout_stage_layers(l, m, st);
    segs += first ? 1 + (m->pos == DP_POS_LEARNED) : 0;
    segs += last ? (ln ? 2 : 1) + (!m->tied_embeddings || !first) : 0;
    serial(c, p, &p->opt, R * params);
    if (s->sp) {
        /* The replicated norms' and biases' partial gradients, one all-reduce each
         * (schedule.c reduce_grads; learned positions are max_position x h). */
        double repl = ((ln ? 4 : 2) + m->out_bias + m->mlp_bias) * dp_layout_stage_layers(l, m, st);
        repl += last ? (ln ? 2 : 1) : 0;
        p->comm += repl * coll(c, AR, R * s->h, s->tp);
        if (first && m->pos == DP_POS_LEARNED)
            p->comm += coll(c, AR, R * (double)m->max_pos * s->h, s->tp);
    }
    if (l->pp > 1 && m->tied_embeddings && (first || last))
        p->comm += coll(c, AR, R * s->Vl * s->h, 2);
    int dp = l->dp;
    double local = params, regions = segs;
    if (l->zero >= 1) {
        p->comm += coll(c, RS, R * params, dp) + coll(c, AG, R * params, dp);
        local = params / dp;
        regions = segs / dp + 1;
    } else {
        p->comm += coll(c, AR, R * params, dp);
    }
    int world = l->tp * l->pp * l->dp;
    p->comm += coll(c, AR, 16, world);
    /* Gradient norm (sum of squares) and AdamW: p, g, m, v read, p, m, v written. */
    for (int k = 0; k < 2; k++) {
        double bytes = k == 0 ? R * local : 7 * R * local, ns = k == 0 ? 0 : c->pr.adamw_ns;
        double per = (k == 0 ? R : 4 * R) * local / c->nt;
        double t = fmax(local * ns * 1e-9 / c->nt, bytes / c->nt / bw(c, per));
        p->opt += t;
        p->core_s += c->nt * t;
        if (c->nt > 1) {
            p->fork += regions * c->pr.fork_s;
            p->core_s += c->nt * regions * c->pr.fork_s;
        }
    }
}

/* The probe as the profile measured it. Attention is priced per head of the profile's
 * seq_len x head_dim; a causal head costs T^2 d / 2 multiply-adds for the scores and as
 * many for the weighted values (FlashAttention paper, Sec. 2: O(T^2 d)), so other
 * shapes scale by (T / T0)^2 (d / d0). */
static void calibrated_probe(const struct dp_cal_cpu *k, const struct dp_probe_shape *sh,
                             struct dp_device_probe *p)
{
    memset(p, 0, sizeof *p);
    p->gemm_call_s = k->gemm_call_us * 1e-6;
    p->gemm_gflops = k->gemm_gflops;
    p->conc_eff = k->conc_eff;
    p->fork_s = k->fork_us * 1e-6;
    memcpy(p->bw_gbps, k->bw_gbps, sizeof p->bw_gbps);
    p->cache_bytes[0] = (int64_t)k->l2_bytes;
    p->cache_bytes[1] = (int64_t)k->l3_bytes;
    double T = (double)sh->seq_len / (double)k->seq_len, d = (double)sh->head_dim / k->head_dim;
    double a = T * T * d;
    p->attn_fwd_s = k->attn_fwd_us * 1e-6 * a;
    p->attn_bwd_s = k->attn_bwd_us * 1e-6 * a;
    p->attn_probs_s = k->attn_probs_us * 1e-6 * a;
    p->act_fwd_ns = k->act_fwd_ns;
    p->act_bwd_ns = k->act_bwd_ns;
    p->norm_fwd_ns = k->norm_fwd_ns;
    p->norm_bwd_ns = k->norm_bwd_ns;
    p->ce_ns = k->ce_ns;
    p->adamw_ns = k->adamw_ns;
}

int cli_run_predict_cpu(const struct dp_model *m, const struct dp_layout *l,
                        const struct cli_cpu_run *run, struct cli_cpu_prediction *out,
                        struct dp_err *err)
{
    memset(out, 0, sizeof *out);
    struct cm c;
    memset(&c, 0, sizeof c);
    c.nt = run->threads > 0 ? run->threads : 1;
    int per_node = run->ranks_per_node > 0 ? run->ranks_per_node : 1;
    c.shared = per_node > 1;
    struct dp_probe_shape sh = {.threads = c.nt,
                                .concurrent = c.nt * per_node,
                                .seq_len = l->seq_len,
                                .head_dim = (int)m->head_dim,
                                .ffn = m->ffn,
                                .norm = m->norm};
    int rc = 0;
    const struct dp_cal_cpu *k =
        run->cal ? dp_calibration_cpu(run->cal, sh.threads, sh.concurrent) : NULL;
    if (k) {
        calibrated_probe(k, &sh, &c.pr);
        static const enum dp_nccl_coll kind[] = {DP_NCCL_ALL_REDUCE, DP_NCCL_REDUCE_SCATTER,
                                                 DP_NCCL_ALL_GATHER, DP_NCCL_SENDRECV};
        for (int i = 0; i < 4; i++)
            c.fit[i] = dp_calibration_coll(run->cal, kind[i], NULL);
    } else if ((rc = dp_exec_probe_device(&sh, &c.pr, err))) {
        return rc;
    }
    /* MPI as measured after the run: the small all-reduce's latency spread over its
     * log2(world) steps; the bus bandwidth from the 1 MiB one. */
    int world = run->world > 1 ? run->world : 1;
    double steps = world > 1 ? ceil(log2((double)world)) : 1;
    c.a_step = run->allreduce_small_s > 0 ? run->allreduce_small_s / steps : 0;
    double big = run->allreduce_1mib_s - run->allreduce_small_s;
    c.coll_bps = world > 1 && big > 0 ? 2.0 * (world - 1) / world * 1048576.0 / big : 1e18;

    struct shape s = {.m = m, .l = l, .tp = l->tp, .sp = l->sp && l->tp > 1};
    s.B = (double)l->mbs;
    s.T = (double)l->seq_len;
    s.N = s.B * s.T;
    s.Nl = s.sp ? s.N / l->tp : s.N;
    s.h = (double)m->hidden;
    s.d = (double)m->head_dim;
    s.a = (double)(m->heads / l->tp);
    s.g = (double)(m->kv_heads / l->tp);
    s.qd = s.a * s.d;
    s.qkvd = s.qd + 2 * s.g * s.d;
    s.f = (double)(m->ffn_hidden / l->tp);
    s.F1 = m->ffn == DP_FFN_SWIGLU ? 2 * s.f : s.f;
    s.Vl = (double)(dp_padded_vocab(m->vocab, l->tp) / l->tp);

    struct dp_mem_report *rep = malloc(sizeof *rep);
    if (!rep)
        return dp_err_set(err, DP_ENOMEM, "out of memory");
    if ((rc = dp_mem_estimate_cpu(m, l, rep, err))) {
        free(rep);
        return rc;
    }
    /* Per stage: a micro-batch and the step's own work; 1F1B paced by the slowest. */
    double M = (double)dp_layout_microbatches(l), sum = 0, tmax = -1, core_s = 0;
    struct parts best_mb = {0}, best_step = {0};
    double best_total = -1;
    for (int st = 0; st < l->pp; st++) {
        struct parts mb, stp;
        stage_mb(&c, &s, st, &mb);
        stage_step(&c, &s, st, (double)rep->stage[st].params_bytes / R, &stp);
        double t = total(&mb);
        sum += t;
        tmax = t > tmax ? t : tmax;
        double whole = M * t + total(&stp);
        if (whole > best_total) {
            best_total = whole;
            best_mb = mb;
            best_step = stp;
        }
        core_s += (M * mb.core_s + stp.core_s) * l->tp * l->dp;
    }
    free(rep);
    double pipe = M * tmax + (sum - tmax);
    struct parts all;
    memset(&all, 0, sizeof all);
    add(&all, &best_mb, M);
    add(&all, &best_step, 1);
    out->gemm_s = all.gemm;
    out->attention_s = all.attn;
    out->elementwise_s = all.ew;
    out->fork_s = all.fork;
    out->comm_s = all.comm;
    out->optimizer_s = all.opt;
    out->bubble_s = pipe - M * tmax;
    double step = pipe + total(&best_step);
    /* More compute threads than cores: they take turns, and the step lasts at least the
     * core-seconds of every rank over the cores. */
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    double share = cores > 0 ? core_s / (double)cores : 0;
    if (share > step) {
        out->timeshare_s = share - step;
        step = share;
    }
    out->step_s = step;
    return 0;
}
