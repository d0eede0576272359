/*
 * MPI start-up shared by the backends that run over MPI (cpu.c, and cuda.c for its
 * unique-id broadcast and the host-staged kind): start MPI unless the process already
 * did (under mpirun it may not have yet; a test may have), with errors returned rather
 * than fatal. `started_here` records whether this backend must finalise it.
 */
#ifndef DPLAN_EXECUTOR_BACKEND_MPI_UP_H
#define DPLAN_EXECUTOR_BACKEND_MPI_UP_H

#include <mpi.h>
#include <stdbool.h>

#include "core/core.h"

static inline int dp__mpi_up(bool *started_here, struct dp_err *err)
{
    int inited = 0, fin = 0;
    MPI_Initialized(&inited);
    MPI_Finalized(&fin);
    if (fin)
        return dp_err_set(err, DP_ERUNTIME, "MPI was already finalised in this process");
    if (!inited) {
        /* FUNNELED: only the main thread calls MPI (the agent thread never does). */
        int provided = 0;
        if (MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS)
            return dp_err_set(err, DP_ERUNTIME, "MPI_Init_thread failed");
        *started_here = true;
    }
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    return 0;
}

#endif
