/*
 * The checklist across ranks, over MPI: start MPI when a launcher started
 * this process, gather every rank's versions and items, and measure the
 * all-reduce bandwidth of the plan's groups as nccl-tests does (a warm-up,
 * timed iterations, the slowest rank's mean, algbw = bytes / time and busbw
 * = algbw x 2 (n - 1) / n: nccl-tests doc/PERFORMANCE.md). These are MPI
 * collectives on host buffers: the path MPI takes (the CPU backend's own
 * collectives), not NCCL's GPU path. Built with DPLAN_MPI; mpi_none.c
 * otherwise.
 */
#include "preflight.h"

#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* $DPLAN_CHECK_NO_MPI=1 is for the tests only: they fake launcher variables for the env
 * item without a launcher behind them, where MPI_Init must not run. */
static bool launched(void)
{
    const char *no = getenv("DPLAN_CHECK_NO_MPI");
    if (no && strcmp(no, "1") == 0)
        return false;
    const char *keys[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        const char *v = getenv(keys[i]);
        if (v && v[0])
            return true;
    }
    return false;
}

int dp_pf_mpi_init(struct dp_pf_mpi *m, struct dp_err *err)
{
    m->active = false;
    m->rank = 0;
    m->size = 1;
    if (!launched())
        return 0;
    int inited = 0;
    MPI_Initialized(&inited);
    if (!inited && MPI_Init(NULL, NULL) != MPI_SUCCESS)
        return dp_err_set(err, DP_ERUNTIME, "MPI_Init failed");
    m->active = true;
    MPI_Comm_rank(MPI_COMM_WORLD, &m->rank);
    MPI_Comm_size(MPI_COMM_WORLD, &m->size);
    return 0;
}

void dp_pf_mpi_finalize(struct dp_pf_mpi *m)
{
    if (m->active)
        MPI_Finalize();
    m->active = false;
}

int dp_pf_mpi_gather_versions(const struct dp_pf_mpi *m, const struct dp_pf_versions *mine,
                              struct dp_pf_versions *all, struct dp_err *err)
{
    if (!m->active) {
        all[0] = *mine;
        return 0;
    }
    if (MPI_Gather(mine, (int)sizeof *mine, MPI_BYTE, all, (int)sizeof *mine, MPI_BYTE, 0,
                   MPI_COMM_WORLD) != MPI_SUCCESS)
        return dp_err_set(err, DP_ERUNTIME, "MPI_Gather of the versions failed");
    return 0;
}

struct ranked {
    char host[64];
    struct dp_pf_item it;
};

int dp_pf_mpi_worst(const struct dp_pf_mpi *m, const char *host, struct dp_pf_item *it,
                    struct dp_err *err)
{
    if (!m->active || m->size == 1)
        return 0;
    struct ranked mine = {{0}, *it};
    snprintf(mine.host, sizeof mine.host, "%s", host);
    struct ranked *all = NULL;
    if (m->rank == 0 && !(all = malloc(sizeof *all * (size_t)m->size)))
        return dp_err_set(err, DP_ENOMEM, "out of memory");
    int rc = MPI_Gather(&mine, (int)sizeof mine, MPI_BYTE, all, (int)sizeof mine, MPI_BYTE, 0,
                        MPI_COMM_WORLD);
    if (rc != MPI_SUCCESS) {
        free(all);
        return dp_err_set(err, DP_ERUNTIME, "MPI_Gather of item %s failed", it->id);
    }
    if (m->rank == 0) {
        int w = 0;
        bool status_differs = false, detail_differs = false;
        for (int i = 1; i < m->size; i++) {
            if (all[i].it.status > all[w].it.status)
                w = i;
            status_differs |= all[i].it.status != all[0].it.status;
            detail_differs |= strcmp(all[i].it.detail, all[0].it.detail) != 0;
        }
        *it = all[w].it;
        /* Name the rank when it stands out, or when what went wrong differs by rank; when
         * every rank passes, rank 0's line speaks for them. */
        if (status_differs || (it->status != DP_PF_PASS && detail_differs)) {
            char d[sizeof it->detail];
            snprintf(d, sizeof d, "rank %d (%s): %s", w, all[w].host, all[w].it.detail);
            memcpy(it->detail, d, sizeof d);
        }
    }
    free(all);
    return 0;
}

int dp_pf_mpi_busbw(const struct dp_pf_mpi *m, const struct dp_layout *l, enum dp_place_kind k,
                    int iters, struct dp_pf_busbw *out, struct dp_err *err)
{
    memset(out, 0, sizeof *out);
    out->kind = k;
    long stride;
    dp_place_shape(l, k, &out->ranks, &stride);
    int world = l->tp * l->pp * l->dp * l->cp;
    if (!m->active || m->size != world)
        return dp_err_set(err, DP_EINVAL, "busbw: %d ranks, the plan has %d", m->size, world);
    int *members = malloc(sizeof *members * (size_t)out->ranks);
    if (!members)
        return dp_err_set(err, DP_ENOMEM, "out of memory");
    int n = dp_place_ranks(l, k, m->rank, members, out->ranks);
    int color = members[0];
    for (int i = 1; i < n; i++)
        if (members[i] < color)
            color = members[i];
    free(members);
    MPI_Comm comm;
    if (MPI_Comm_split(MPI_COMM_WORLD, color, m->rank, &comm) != MPI_SUCCESS)
        return dp_err_set(err, DP_ERUNTIME, "MPI_Comm_split for the %d-rank groups failed",
                          out->ranks);
    size_t count = (size_t)(dp_pf_busbw_sizes[DP_PF_BUSBW_SIZES - 1] / (int64_t)sizeof(float));
    float *sbuf = calloc(count, sizeof *sbuf), *rbuf = calloc(count, sizeof *rbuf);
    int rc = 0;
    if (!sbuf || !rbuf) {
        rc = dp_err_set(err, DP_ENOMEM, "out of memory for the all-reduce buffers");
        goto out;
    }
    for (size_t i = 0; i < count; i++)
        sbuf[i] = 1.0f;
    for (int s = 0; s < DP_PF_BUSBW_SIZES; s++) {
        int c = (int)(dp_pf_busbw_sizes[s] / (int64_t)sizeof(float));
        MPI_Allreduce(sbuf, rbuf, c, MPI_FLOAT, MPI_SUM, comm); /* warm-up */
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = MPI_Wtime();
        for (int i = 0; i < iters; i++)
            MPI_Allreduce(sbuf, rbuf, c, MPI_FLOAT, MPI_SUM, comm);
        double t = (MPI_Wtime() - t0) / iters, tmax;
        /* Every group of the kind ran at once, as in training: the slowest sets the pace. */
        MPI_Allreduce(&t, &tmax, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
        out->seconds[s] = tmax;
        double algbw = (double)dp_pf_busbw_sizes[s] / tmax / 1e9;
        out->busbw_gbps[s] = algbw * dp_nccl_busbw_factor(DP_NCCL_ALL_REDUCE, out->ranks);
    }
out:
    free(sbuf);
    free(rbuf);
    MPI_Comm_free(&comm);
    return rc;
}

int dp_pf_mpi_bcast_int(const struct dp_pf_mpi *m, int *v)
{
    if (m->active)
        MPI_Bcast(v, 1, MPI_INT, 0, MPI_COMM_WORLD);
    return 0;
}

int dp_pf_mpi_bench_coll(const struct dp_pf_mpi *m, enum dp_nccl_coll k, int64_t bytes, int iters,
                         double *seconds, struct dp_err *err)
{
    *seconds = 0;
    int n = m->size;
    if (!m->active || n < 2)
        return dp_err_set(err, DP_EINVAL, "collective benchmark: needs 2 or more MPI ranks");
    /* nccl-tests' sizes: the whole buffer; all-gather's input, reduce-scatter's output and
     * each all-to-all block are a 1/n share of it (nccl-tests src/all_gather.cu etc.). */
    size_t count = (size_t)(bytes / (int64_t)sizeof(float)), share = count / (size_t)n;
    if (share < 1 || iters < 1)
        return dp_err_set(err, DP_EINVAL, "collective benchmark: %lld bytes over %d ranks",
                          (long long)bytes, n);
    float *sbuf = calloc(count, sizeof *sbuf), *rbuf = calloc(count, sizeof *rbuf);
    if (!sbuf || !rbuf) {
        free(sbuf);
        free(rbuf);
        return dp_err_set(err, DP_ENOMEM, "out of memory for %lld-byte buffers", (long long)bytes);
    }
    double *ts = malloc(sizeof *ts * (size_t)iters);
    if (!ts) {
        free(sbuf);
        free(rbuf);
        return dp_err_set(err, DP_ENOMEM, "out of memory");
    }
    /* Written, not calloc's zero pages: an all-reduce that reads one shared zero page moves
     * nothing through the caches and would be timed faster than a training step's buffers. */
    for (size_t i = 0; i < count; i++) {
        sbuf[i] = (float)(i % 7) * 0.5f;
        rbuf[i] = (float)(i % 5) * 0.25f;
    }
    int next = (m->rank + 1) % n, prev = (m->rank + n - 1) % n;
    for (int i = -3; i < iters; i++) {
        /* Three warm-ups (the first calls set up the shared-memory channels). Each iteration timed
         * from a barrier (nccl-tests keeps the mean of a back-to-back loop), the median kept
         * (below): a mean of a 1 KiB all-reduce on a shared machine is set by a scheduler tick.
         * Sums in place double the buffer each call: at most 63 calls keep it finite. */
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = MPI_Wtime();
        switch (k) {
        /* In place, as the CPU executor calls them (executor/backend/cpu.c): Open MPI takes
         * other paths for in-place buffers (a 128 KiB all-reduce over 2 ranks here: median
         * 31.8-37.1 us in place against 29.8-34.2 out of place). */
        case DP_NCCL_ALL_REDUCE:
            MPI_Allreduce(MPI_IN_PLACE, rbuf, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
            break;
        case DP_NCCL_ALL_GATHER:
            MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, rbuf, (int)share, MPI_FLOAT,
                          MPI_COMM_WORLD);
            break;
        case DP_NCCL_REDUCE_SCATTER:
            MPI_Reduce_scatter_block(MPI_IN_PLACE, rbuf, (int)share, MPI_FLOAT, MPI_SUM,
                                     MPI_COMM_WORLD);
            break;
        case DP_NCCL_ALLTOALL:
            MPI_Alltoall(sbuf, (int)share, MPI_FLOAT, rbuf, (int)share, MPI_FLOAT, MPI_COMM_WORLD);
            break;
        case DP_NCCL_SENDRECV:
            MPI_Sendrecv(sbuf, (int)count, MPI_FLOAT, next, 7, rbuf, (int)count, MPI_FLOAT, prev, 7,
                         MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            break;
        case DP_NCCL_BROADCAST: MPI_Bcast(sbuf, (int)count, MPI_FLOAT, 0, MPI_COMM_WORLD); break;
        case DP_NCCL_REDUCE:
        default: MPI_Reduce(sbuf, rbuf, (int)count, MPI_FLOAT, MPI_SUM, 0, MPI_COMM_WORLD); break;
        }
        if (i >= 0)
            ts[i] = MPI_Wtime() - t0;
    }
    /* The median, by insertion sort (iters is small). A collective's own spread on a quiet
     * machine (where each rank's polling loop stands when the other arrives, whose cache
     * holds the lines) is part of what every call in a step costs; a neighbour's burst is
     * what the caller's best of several rounds leaves out (cli/calibrate_cpu.c). The 20th
     * percentile kept before priced tiny-gpt's 13 all-reduces a step under tensor
     * parallelism at 325 us where the step took 505-541 (DPLAN_OPTIME, quiet). */
    for (int i = 1; i < iters; i++)
        for (int j = i; j > 0 && ts[j - 1] > ts[j]; j--) {
            double x = ts[j];
            ts[j] = ts[j - 1];
            ts[j - 1] = x;
        }
    double t = ts[(iters - 1) / 2], tmax = t;
    free(ts);
    /* nccl-tests reports the slowest rank's time. */
    MPI_Allreduce(&t, &tmax, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    *seconds = tmax;
    free(sbuf);
    free(rbuf);
    return 0;
}

int dp_pf_mpi_bench_lockstep(const struct dp_pf_mpi *m, int passes, int iters, double budget_s,
                             double *seg_s, double *wait_s, struct dp_err *err)
{
    *seg_s = *wait_s = 0;
    if (!m->active || m->size < 2 || passes < 1 || iters < 3)
        return dp_err_set(err, DP_EINVAL, "lock-step benchmark: needs 2 or more MPI ranks");
    enum { N = 65536 };
    float *x = malloc(N * sizeof *x), *y = malloc(N * sizeof *y);
    double *ts = malloc((size_t)iters * sizeof *ts);
    if (!x || !y || !ts) {
        free(x);
        free(y);
        free(ts);
        return dp_err_set(err, DP_ENOMEM, "out of memory");
    }
    for (int i = 0; i < N; i++) {
        x[i] = (float)(i % 7) * 0.25f;
        y[i] = 1;
    }
    /* The all-reduce of one double when the ranks arrive together: from a barrier, the
     * median. */
    for (int i = -3; i < iters; i++) {
        double v = 1;
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = MPI_Wtime();
        MPI_Allreduce(MPI_IN_PLACE, &v, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
        if (i >= 0)
            ts[i] = MPI_Wtime() - t0;
    }
    for (int i = 1; i < iters; i++)
        for (int j = i; j > 0 && ts[j - 1] > ts[j]; j--) {
            double t = ts[j];
            ts[j] = ts[j - 1];
            ts[j - 1] = t;
        }
    double floor_s = ts[iters / 2], seg = 0, wait = 0;
    /* Up to iters rounds, fewer once a rank has spent budget_s in them: the one double each
     * round all-reduces is that rank's "stop" (MAX), so every rank stops after the same
     * round (a sanitizer build streams 10x slower). */
    int done = 0;
    MPI_Barrier(MPI_COMM_WORLD);
    double start = MPI_Wtime();
    for (int i = -3; i < iters; i++) {
        double t0 = MPI_Wtime();
        for (int p = 0; p < passes; p++) {
            for (int j = 0; j < N; j++)
                y[j] = 0.999f * y[j] + 0.5f * x[j];
            __asm__ volatile("" : : "r"(y) : "memory");
        }
        double t1 = MPI_Wtime(), stop = budget_s > 0 && t1 - start > budget_s ? 1 : 0;
        MPI_Allreduce(MPI_IN_PLACE, &stop, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
        double t2 = MPI_Wtime();
        if (i >= 0) {
            seg += t1 - t0;
            wait += t2 - t1;
            done++;
        }
        if (stop > 0 && done >= 1)
            break;
    }
    if (done < 1)
        done = 1;
    double sum[2] = {seg / done, fmax(0, wait / done - floor_s)};
    MPI_Allreduce(MPI_IN_PLACE, sum, 2, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    *seg_s = sum[0] / m->size;
    *wait_s = sum[1] / m->size;
    free(x);
    free(y);
    free(ts);
    return 0;
}
