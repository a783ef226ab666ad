/* Tokens/s the data loader delivers at GPT-2 124M's batch (B=8, T=1024), from
 * a shard of ~100M uint16 tokens the bench writes into /tmp, with the page
 * cache warm and (as root) cold, prefetch off and on. The cold runs also time
 * how long next blocks when the caller computes between batches, which is
 * what prefetch is for. Medians of reps, interleaving off and on.
 *
 *   bench_loader [--tokens N] [--reps N] [--work-ms X] [--keep]
 *
 * --work-ms is the compute per batch in the blocking test (default 1);
 * --keep leaves the shard in /tmp for the next run. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/clock.h"
#include "core/error.h"
#include "data/loader.h"
#include "data/shard.h"

enum { B = 8, T = 1024, VOCAB = 50257 };
static const char *shard_path = "/tmp/anvil_bench_loader/train_000.bin";

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static int make_shard(int64_t ntok) {
    struct stat st;
    if (stat(shard_path, &st) == 0 && st.st_size == ANVIL_SHARD_HEADER_BYTES + 2 * ntok) return 0;
    mkdir("/tmp/anvil_bench_loader", 0700);
    anvil_shard_writer *w = anvil_shard_writer_open(shard_path, ANVIL_SHARD_V16);
    if (!w) return -1;
    enum { CHUNK = 1 << 20 };
    int32_t *buf = malloc(CHUNK * sizeof *buf);
    uint64_t x = 88172645463325252ULL;
    for (int64_t done = 0; done < ntok; done += CHUNK) {
        int64_t n = ntok - done < CHUNK ? ntok - done : CHUNK;
        for (int64_t i = 0; i < n; i++) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            buf[i] = (int32_t)(x % VOCAB);
        }
        if (anvil_shard_writer_append(w, buf, n)) {
            free(buf);
            anvil_shard_writer_abort(w);
            return -1;
        }
    }
    free(buf);
    return anvil_shard_writer_commit(w);
}

static int drop_caches(void) {
    sync();
    FILE *f = fopen("/proc/sys/vm/drop_caches", "w");
    if (!f) return -1;
    int ok = fputs("3\n", f) >= 0;
    return fclose(f) == 0 && ok ? 0 : -1;
}

/* Busy work standing in for the trainer's step, so the prefetch thread has time to overlap. */
static void compute(double seconds) {
    double end = anvil_now() + seconds;
    while (anvil_now() < end) {
    }
}

/* One pass of nbatch batches; returns tokens/s, and in *wait the mean seconds next took. */
static double pass(anvil_loader *L, int64_t nbatch, double work, double *wait, int32_t *in, int32_t *tg) {
    anvil_loader_reset(L);
    double t0 = anvil_now(), waited = 0;
    for (int64_t i = 0; i < nbatch; i++) {
        double a = anvil_now();
        if (anvil_loader_next(L, in, tg)) {
            fprintf(stderr, "bench_loader: %s\n", anvil_errmsg());
            exit(1);
        }
        waited += anvil_now() - a;
        if (work > 0) compute(work);
    }
    *wait = waited / (double)nbatch;
    return (double)nbatch * B * T / (anvil_now() - t0);
}

int main(int argc, char **argv) {
    int64_t ntok = 100 * 1000 * 1000;
    int reps = 5, keep = 0;
    double work = 1e-3;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--tokens") && i + 1 < argc) ntok = atoll(argv[++i]);
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc) reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--work-ms") && i + 1 < argc) work = atof(argv[++i]) * 1e-3;
        else if (!strcmp(argv[i], "--keep")) keep = 1;
        else {
            fprintf(stderr, "usage: bench_loader [--tokens N] [--reps N] [--work-ms X] [--keep]\n");
            return 2;
        }
    }
    if (make_shard(ntok)) {
        fprintf(stderr, "bench_loader: %s\n", anvil_errmsg());
        return 1;
    }
    anvil_loader *L = anvil_loader_open(shard_path, B, T, 0, 1, VOCAB);
    if (!L) {
        fprintf(stderr, "bench_loader: %s\n", anvil_errmsg());
        return 1;
    }
    int32_t *in = malloc(sizeof(int32_t) * B * T), *tg = malloc(sizeof(int32_t) * B * T);
    int64_t nbatch = (ntok - 1) / (B * T);
    double wait, rate[2][16], cold[2][16], coldwait[2][16];
    if (reps > 16) reps = 16;
    pass(L, nbatch, 0, &wait, in, tg); /* warms the page cache */
    for (int r = 0; r < reps; r++)
        for (int p = 0; p <= 1; p++) {
            anvil_loader_set_prefetch(L, p);
            rate[p][r] = pass(L, nbatch, 0, &wait, in, tg);
        }
    printf("shard: %lld tokens, B=%d T=%d, %lld batches a pass\n", (long long)ntok, B, T, (long long)nbatch);
    for (int p = 0; p <= 1; p++) {
        qsort(rate[p], (size_t)reps, sizeof(double), cmp_double);
        printf("warm, prefetch %s: %.1f Mtokens/s (median of %d)\n", p ? "on " : "off", rate[p][reps / 2] / 1e6, reps);
    }
    /* Cold: a quarter pass each, then one with compute per batch for prefetch to hide the reads behind. */
    int can_drop = drop_caches() == 0;
    if (can_drop) {
        int64_t nb = nbatch / 4;
        for (int r = 0; r < reps; r++)
            for (int p = 0; p <= 1; p++) {
                anvil_loader_set_prefetch(L, p);
                drop_caches();
                cold[p][r] = pass(L, nb, 0, &wait, in, tg);
                drop_caches();
                pass(L, nb, work, &coldwait[p][r], in, tg);
            }
        for (int p = 0; p <= 1; p++) {
            qsort(cold[p], (size_t)reps, sizeof(double), cmp_double);
            qsort(coldwait[p], (size_t)reps, sizeof(double), cmp_double);
            printf("cold, prefetch %s: %.1f Mtokens/s; with %.1f ms compute a batch, next blocks %.1f us (medians)\n",
                   p ? "on " : "off", cold[p][reps / 2] / 1e6, work * 1e3, coldwait[p][reps / 2] * 1e6);
        }
    } else {
        printf("cold: skipped (cannot write /proc/sys/vm/drop_caches)\n");
    }
    anvil_loader_close(L);
    free(in);
    free(tg);
    if (!keep) {
        unlink(shard_path);
        rmdir("/tmp/anvil_bench_loader");
    }
    return 0;
}
