/*
 * The overlap rule every communication term of the cost model shares (time.c,
 * time_pipe.c, ops.c, shard.c).
 */
#ifndef DPLAN_COSTMODEL_OVERLAP_H
#define DPLAN_COSTMODEL_OVERLAP_H

/* Communication hidden behind compute is not free: NCCL's kernels occupy SMs (one
 * per channel; 16-32 channels on NVLink/IB systems, against 108-132 SMs) and HBM
 * bandwidth while they run, so the compute they overlap slows down. Overlapped
 * communication is charged this fraction of its duration. */
#define OVERLAP_CONTENTION 0.15

/* Exposed time of communication `comm` overlapped with compute `window`. */
static inline double overlapped(double comm, double window)
{
    double hidden = comm < window ? comm : window;
    return (comm - hidden) + OVERLAP_CONTENTION * hidden;
}

#endif
