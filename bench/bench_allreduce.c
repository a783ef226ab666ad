/* The peer for anvil health's all-reduce figures: MPI_Allreduce called
 * directly from the main thread, measured exactly as anvil health measures
 * its own (in-place float32 sums of MIN, 4*MIN, ... MAX bytes per rank, one
 * warm-up then ITERS timed calls, the median per rank, the slowest rank's
 * median reported, the result checked against the exact sum). The
 * difference is what anvil's communication thread and request queue cost.
 *
 *   anvil launch -n 4 --exec build/bench/bench_allreduce -- [MIN MAX ITERS]
 *
 * Prints one JSON object per size: bytes, time_us, algbw_gb_s, busbw_gb_s
 * (algbw * 2(n-1)/n, the nccl-tests convention) and correct. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, n;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    size_t min_bytes = argc > 1 ? strtoull(argv[1], NULL, 10) : 4096;
    size_t max_bytes = argc > 2 ? strtoull(argv[2], NULL, 10) : (size_t)64 << 20;
    int iters = argc > 3 ? atoi(argv[3]) : 10;
    if (min_bytes < 4 || max_bytes < min_bytes || iters < 1) {
        if (rank == 0) fprintf(stderr, "usage: bench_allreduce [MIN_BYTES MAX_BYTES ITERS]\n");
        MPI_Finalize();
        return 2;
    }
    float *buf = malloc(max_bytes);
    double *t = malloc(sizeof(double) * (size_t)iters);
    if (!buf || !t) MPI_Abort(MPI_COMM_WORLD, 1);
    const double base = n * (n + 1) / 2.0;
    for (size_t bytes = min_bytes; bytes <= max_bytes; bytes *= 4) {
        size_t cnt = bytes / sizeof(float);
        int ok = 1;
        MPI_Barrier(MPI_COMM_WORLD);
        for (int it = -1; it < iters; it++) {
            for (size_t i = 0; i < cnt; i++) buf[i] = (float)(rank + 1 + (int)(i % 13));
            double t0 = MPI_Wtime();
            MPI_Allreduce(MPI_IN_PLACE, buf, (int)cnt, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
            double dt = MPI_Wtime() - t0;
            for (size_t i = 0; i < cnt; i++) ok &= (double)buf[i] == base + (double)n * (double)(i % 13);
            if (it >= 0) t[it] = dt;
        }
        qsort(t, (size_t)iters, sizeof(double), cmp);
        double med = iters % 2 ? t[iters / 2] : 0.5 * (t[iters / 2 - 1] + t[iters / 2]), worst;
        int all_ok;
        MPI_Allreduce(&med, &worst, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
        MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_LAND, MPI_COMM_WORLD);
        double algbw = (double)bytes / worst / 1e9;
        if (rank == 0)
            printf("{\"bytes\": %zu, \"time_us\": %.1f, \"algbw_gb_s\": %.4f, \"busbw_gb_s\": %.4f, \"correct\": %s}\n",
                   bytes, worst * 1e6, algbw, algbw * 2.0 * (n - 1) / n, all_ok ? "true" : "false");
    }
    free(buf);
    free(t);
    MPI_Finalize();
    return 0;
}
