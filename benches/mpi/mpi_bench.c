/* OpenMPI counterpart of `rankwise bench`: the same collectives, sizes and
 * timing rule (median over timed calls of the slowest rank's time).
 *
 *   mpicc -O2 -o mpi_bench mpi_bench.c
 *   mpirun --allow-run-as-root --oversubscribe -np 4 ./mpi_bench allreduce 8 67108864 20 5
 *
 * Sizes follow nccl-tests (docs/reference/contracts.md §6): Allreduce and Bcast move
 * `size` bytes per rank; Allgather, Reduce_scatter_block and Alltoall have
 * `size` = N x the per-rank block. float32 data, MPI_SUM. Prints one line
 * per size: `op size time_us`. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, n;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    if (argc < 6) {
        if (rank == 0) fprintf(stderr, "usage: mpi_bench OP MINBYTES MAXBYTES ITERS WARMUP\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    const char *op = argv[1];
    size_t minb = strtoull(argv[2], 0, 10), maxb = strtoull(argv[3], 0, 10);
    int iters = atoi(argv[4]), warmup = atoi(argv[5]);
    int per_block = strcmp(op, "allgather") == 0 || strcmp(op, "reduce_scatter") == 0 || strcmp(op, "alltoall") == 0;
    float *a = malloc(maxb + 64), *b = malloc(maxb + 64);
    memset(a, 1, maxb + 64);
    memset(b, 0, maxb + 64);
    double *t = malloc(sizeof(double) * iters);
    for (size_t size = minb; size <= maxb; size *= 2) {
        size_t total = size / 4, q = per_block ? total / n : total;
        if (q == 0) continue;
        for (int i = -warmup; i < iters; i++) {
            if (i == 0) MPI_Barrier(MPI_COMM_WORLD);
            double t0 = MPI_Wtime();
            if (!strcmp(op, "allreduce")) MPI_Allreduce(a, b, (int)q, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
            else if (!strcmp(op, "allgather")) MPI_Allgather(a, (int)q, MPI_FLOAT, b, (int)q, MPI_FLOAT, MPI_COMM_WORLD);
            else if (!strcmp(op, "reduce_scatter")) MPI_Reduce_scatter_block(a, b, (int)q, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
            else if (!strcmp(op, "alltoall")) MPI_Alltoall(a, (int)q, MPI_FLOAT, b, (int)q, MPI_FLOAT, MPI_COMM_WORLD);
            else if (!strcmp(op, "broadcast")) MPI_Bcast(b, (int)q, MPI_FLOAT, 0, MPI_COMM_WORLD);
            else MPI_Abort(MPI_COMM_WORLD, 2);
            if (i >= 0) t[i] = MPI_Wtime() - t0;
        }
        MPI_Allreduce(MPI_IN_PLACE, t, iters, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
        qsort(t, iters, sizeof(double), cmp);
        double med = iters % 2 ? t[iters / 2] : (t[iters / 2 - 1] + t[iters / 2]) / 2;
        if (rank == 0) printf("%s %zu %.3f\n", op, (size_t)(per_block ? q * n * 4 : q * 4), med * 1e6);
        fflush(stdout);
    }
    MPI_Finalize();
    return 0;
}
