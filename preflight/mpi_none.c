/*
 * The checklist across ranks in a build without MPI: one process, nothing
 * gathered, nothing measured (mpi.c is the real one).
 */
#include "preflight.h"

#include <string.h>

int dp_pf_mpi_init(struct dp_pf_mpi *m, struct dp_err *err)
{
    (void)err;
    m->active = false;
    m->rank = 0;
    m->size = 1;
    return 0;
}

void dp_pf_mpi_finalize(struct dp_pf_mpi *m)
{
    (void)m;
}

int dp_pf_mpi_gather_versions(const struct dp_pf_mpi *m, const struct dp_pf_versions *mine,
                              struct dp_pf_versions *all, struct dp_err *err)
{
    (void)m;
    (void)err;
    all[0] = *mine;
    return 0;
}

int dp_pf_mpi_worst(const struct dp_pf_mpi *m, const char *host, struct dp_pf_item *it,
                    struct dp_err *err)
{
    (void)m;
    (void)host;
    (void)it;
    (void)err;
    return 0;
}

int dp_pf_mpi_busbw(const struct dp_pf_mpi *m, const struct dp_layout *l, enum dp_place_kind k,
                    int iters, struct dp_pf_busbw *out, struct dp_err *err)
{
    (void)m;
    (void)l;
    (void)iters;
    memset(out, 0, sizeof *out);
    out->kind = k;
    return dp_err_set(err, DP_EINVAL, "busbw: dplan was built without MPI");
}

int dp_pf_mpi_bcast_int(const struct dp_pf_mpi *m, int *v)
{
    (void)m;
    (void)v;
    return 0;
}

int dp_pf_mpi_bench_coll(const struct dp_pf_mpi *m, enum dp_nccl_coll k, int64_t bytes, int iters,
                         double *seconds, struct dp_err *err)
{
    (void)m, (void)k, (void)bytes, (void)iters;
    *seconds = 0;
    return dp_err_set(err, DP_EINVAL, "collective benchmark: dplan was built without MPI");
}

int dp_pf_mpi_bench_lockstep(const struct dp_pf_mpi *m, int passes, int iters, double budget_s,
                             double *seg_s, double *wait_s, struct dp_err *err)
{
    (void)m, (void)passes, (void)iters, (void)budget_s;
    *seg_s = *wait_s = 0;
    return dp_err_set(err, DP_EINVAL, "lock-step benchmark: dplan was built without MPI");
}
