/*
 * Does an outstanding non-blocking all-reduce progress while the rank computes?
 * (executor/overlap.c, the CPU backend's pricing in predict_ops.c.)
 *
 *   mpirun -np 2 ./build/bench/mpi_progress N   (N floats)
 *
 * Per size, the best of 7: a blocking MPI_Allreduce; the MPI_Wait of an
 * MPI_Iallreduce posted before 50 ms of computing without MPI calls (if the
 * request progressed meanwhile, the wait is ~0); and the same with an
 * MPI_Test every 1 ms, with what those tests added to the 50 ms. Open MPI's
 * coll/libnbc has no progress thread: it advances a request inside MPI calls.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

static void spin(double s)
{
    double t = MPI_Wtime();
    while (MPI_Wtime() - t < s)
        ;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    int n = argc > 1 ? atoi(argv[1]) : 1 << 20;
    float *b = calloc((size_t)(n > 0 ? n : 1), sizeof *b);
    double blocking = 1e9, wait = 1e9, wait_tested = 1e9, test_cost = 1e9;
    for (int it = 0; it < 7 && b; it++) {
        MPI_Request q;
        MPI_Barrier(MPI_COMM_WORLD);
        double t = MPI_Wtime();
        MPI_Allreduce(MPI_IN_PLACE, b, n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        t = MPI_Wtime() - t;
        blocking = t < blocking ? t : blocking;

        MPI_Barrier(MPI_COMM_WORLD);
        MPI_Iallreduce(MPI_IN_PLACE, b, n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, &q);
        spin(0.05);
        t = MPI_Wtime();
        MPI_Wait(&q, MPI_STATUS_IGNORE);
        t = MPI_Wtime() - t;
        wait = t < wait ? t : wait;

        MPI_Barrier(MPI_COMM_WORLD);
        MPI_Iallreduce(MPI_IN_PLACE, b, n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, &q);
        double t0 = MPI_Wtime();
        for (int k = 0; k < 50; k++) {
            int done;
            spin(0.001);
            MPI_Test(&q, &done, MPI_STATUS_IGNORE);
        }
        double extra = MPI_Wtime() - t0 - 0.05;
        test_cost = extra < test_cost ? extra : test_cost;
        t = MPI_Wtime();
        MPI_Wait(&q, MPI_STATUS_IGNORE);
        t = MPI_Wtime() - t;
        wait_tested = t < wait_tested ? t : wait_tested;
    }
    if (rank == 0)
        printf("%d floats: blocking %.3f ms; wait after 50 ms of compute %.3f ms; with an "
               "MPI_Test every 1 ms: wait %.3f ms, the tests added %.3f ms\n",
               n, 1e3 * blocking, 1e3 * wait, 1e3 * wait_tested, 1e3 * test_cost);
    free(b);
    MPI_Finalize();
    return 0;
}
