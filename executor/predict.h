/*
 * The pricing backend of the CPU executor's step-time prediction (predict.c):
 * the bill it keeps and the backend table whose operations add to it
 * (predict_ops.c). Internal to the executor.
 */
#ifndef DPLAN_EXECUTOR_PREDICT_H
#define DPLAN_EXECUTOR_PREDICT_H

#include "backend/probe.h"
#include "internal.h"

/* Seconds by kind, and core-seconds (for time-sharing when threads exceed cores). */
struct parts {
    double gemm, attn, ew, fork, comm, opt;
    double core_s;
};

/* A buffer: address space reserved (predict_ops.c p_alloc), and when the probe has a reuse
 * curve, the reuse clock's reading at the last touch of each granule of it (-1: never). */
struct reservation {
    void *p;
    size_t n;
    size_t gran;    /* bytes per stamp: a page, or more for a buffer past 64 Ki pages */
    int64_t *stamp; /* the operation that last touched each granule, -1: none */
};

/* The pricing backend: this machine's measurements, the rank's place, the bill. */
struct pricer {
    struct dp_backend base;
    struct dp_device_probe pr;
    int nt;          /* threads per rank */
    bool shared;     /* other ranks compute at the same time: GEMMs run at conc_eff */
    double a_step;   /* MPI: seconds per step of a collective (recursive doubling) */
    double coll_bps; /* MPI: bus bandwidth, bytes/s */
    /* Fitted alpha-beta per collective kind (enum coll of predict_ops.c; busbw 0: none). */
    double fit_alpha_s[4], fit_busbw_Bps[4];
    /* The measured times behind them (dp_exec_machine.coll_point_*), over tab_ranks[k]. */
    int tab_ranks[4], tab_n[4];
    double tab_bytes[4][DP_EXEC_COLL_POINTS], tab_s[4][DP_EXEC_COLL_POINTS];
    int size[DP_NGROUPS], rank[DP_NGROUPS];
    bool optimizer; /* bill element-wise work as optimizer work (zeroing, norm, AdamW) */
    double seq_len; /* the probe's (global) sequence length: the ring kernels' share of it */
    bool flash;     /* the run's attention is flash (attn_flash_*) */
    struct parts bill;
    /* Gradient buckets in flight (allreduce_start): each one's price, billed at its wait
     * (predict_ops.c), and which ids are in flight. */
    double pend_s[DP_MAX_REQS];
    bool pend_used[DP_MAX_REQS];
    struct reservation *maps; /* by address */
    int nmaps, capmaps;
    /* Reuse distances (executor.h struct dp_exec_reuse; pr.reuse.n > 0): operations are
     * numbered (now), each granule holds the number of the last one that touched it, and a
     * Fenwick tree over those numbers holds the bytes of the granules whose last touch each
     * was, so the distinct bytes touched since any operation are a suffix sum. */
    int64_t now;
    double *fen, *fen_val, fen_total;
    int64_t fen_cap;
    int per_node;
    /* Ranks in lock step (executor.h struct dp_exec_machine): the jitter, the measured
     * waits, and the bill's total at this rank's last synchronisation with others. */
    double lockstep_jitter, last_sync;
    int ls_ranks, ls_n;
    double ls_seg[DP_EXEC_LOCKSTEP_POINTS], ls_wait[DP_EXEC_LOCKSTEP_POINTS];
};

/* The measured waits of ranks in lock step into the pricer (predict_ops.c): points with a
 * positive segment, ascending, each wait at least the one before (the expected wait for
 * the slowest never shrinks with more work; a noisy point below its neighbour is raised). */
void dp__lockstep_table(struct pricer *c, int ranks, int n, const double *seg_s,
                        const double *wait_s);

/* Every operation of backend.h priced on this machine (predict_ops.c). */
extern const struct dp_backend_ops dp__pricing_ops;

#endif
