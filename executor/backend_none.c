/*
 * Stand-in for the CPU backend when dplan is configured without MPI or
 * OpenBLAS (-DDPLAN_MPI=OFF / -DDPLAN_OPENBLAS=OFF): `dplan run` then says
 * so instead of failing to link.
 */
#include "internal.h"

struct dp_backend *dp_backend_cpu_new(int tp, int dp, int pp, int threads, struct dp_err *err)
{
    dp_err_set(err, DP_EINFEASIBLE,
               "this dplan was built without the CPU backend (configure with -DDPLAN_MPI=ON "
               "-DDPLAN_OPENBLAS=ON)");
    return NULL;
}

void dp_backend_cpu_finalize(void) {}

void dp_backend_cpu_abort(int code) {}

int dp_backend_cpu_world(int *rank, int *world, struct dp_err *err)
{
    *rank = 0;
    *world = 1;
    return 0;
}

const char *dp_exec_blas_hint(void)
{
    return NULL;
}
