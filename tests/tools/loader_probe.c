/* What cli_s3.sh drives the data loader with, to compare shards read from S3
 * with the same shards read locally and to count the requests it makes:
 *
 *   loader_probe write DIR NSHARDS NTOKENS   writes DIR/train_NNN.bin, NSHARDS shards of NTOKENS
 *                                            pseudo-random uint16 tokens each
 *   loader_probe read PATTERN B T RANGE_MIB INFLIGHT [LAYOUT RANK WORLD]
 *                                            reads one epoch of B x T batches (as rank RANK of
 *                                            WORLD, layout strided or contiguous; default rank 0
 *                                            of 1, strided), prints "batches N tokens N fnv1a HEX"
 *                                            and, for S3, the client's counters */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/fsutil.h"
#include "data/loader.h"
#include "data/shard.h"

static int write_shards(const char *dir, int nshards, int64_t ntokens) {
    if (anvil_mkdir_p(dir)) return -1;
    int32_t *tok = malloc((size_t)ntokens * sizeof *tok);
    if (!tok) return anvil_fail("out of memory");
    uint64_t x = 0x9E3779B97F4A7C15ull;
    int rc = 0;
    for (int s = 0; !rc && s < nshards; s++) {
        for (int64_t i = 0; i < ntokens; i++) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            tok[i] = (int32_t)(x % 50257);
        }
        char path[4096];
        snprintf(path, sizeof path, "%s/train_%03d.bin", dir, s);
        rc = anvil_shard_write(path, tok, ntokens, ANVIL_SHARD_V16);
    }
    free(tok);
    return rc;
}

static int read_epoch(const char *pattern, int B, int T, int range_mib, int inflight, int layout, int rank, int world) {
    anvil_loader *L = anvil_loader_open_s3(pattern, B, T, rank, world, 50257, (size_t)range_mib << 20, inflight);
    if (!L) return -1;
    if (anvil_loader_set_layout(L, layout)) {
        anvil_loader_close(L);
        return -1;
    }
    size_t n = (size_t)B * T;
    int32_t *in = malloc(n * sizeof *in), *tg = malloc(n * sizeof *tg);
    uint64_t h = 1469598103934665603ull, batches = 0;
    int rc = in && tg ? 0 : anvil_fail("out of memory");
    while (!rc && anvil_loader_get_state(L).epoch == 0) {
        if ((rc = anvil_loader_next(L, in, tg))) break;
        for (size_t i = 0; i < n; i++) h = (h ^ (uint32_t)in[i] ^ ((uint64_t)(uint32_t)tg[i] << 32)) * 1099511628211ull;
        batches++;
    }
    if (!rc) printf("batches %" PRIu64 " tokens %" PRIu64 " fnv1a %016" PRIx64 "\n", batches, batches * n, h);
    anvil_s3_stats st;
    if (anvil_loader_s3_stats(L, &st)) {
        char line[512];
        anvil_s3_format_stats(&st, line, sizeof line);
        printf("s3: %s\n", line);
    }
    free(in);
    free(tg);
    anvil_loader_close(L);
    return rc;
}

int main(int argc, char **argv) {
    int rc;
    if (argc == 5 && !strcmp(argv[1], "write")) rc = write_shards(argv[2], atoi(argv[3]), atoll(argv[4]));
    else if ((argc == 7 || argc == 10) && !strcmp(argv[1], "read"))
        rc = read_epoch(argv[2], atoi(argv[3]), atoi(argv[4]), atoi(argv[5]), atoi(argv[6]),
                        argc == 10 && !strcmp(argv[7], "contiguous") ? ANVIL_LOADER_CONTIGUOUS : ANVIL_LOADER_STRIDED,
                        argc == 10 ? atoi(argv[8]) : 0, argc == 10 ? atoi(argv[9]) : 1);
    else {
        fprintf(stderr, "usage: loader_probe write DIR NSHARDS NTOKENS | read PATTERN B T RANGE_MIB INFLIGHT "
                        "[LAYOUT RANK WORLD]\n");
        return 2;
    }
    if (rc) fprintf(stderr, "loader_probe: error: %s\n", anvil_errmsg());
    return rc ? 1 : 0;
}
