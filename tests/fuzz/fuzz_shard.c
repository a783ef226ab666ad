/* libFuzzer entry point for shard files and the loader on top of them: any
 * byte string, written to a file, must be either opened as a consistent shard
 * or refused with a message, and the loader must agree with the shard reader
 * batch by batch (same ids, a failure exactly where a window holds an id out
 * of range), with and without its prefetch thread. Never a crash, leak, race
 * or out-of-bounds read. Built and run by tests/fuzz/CMakeLists.txt
 * (ANVIL_FUZZ) and scripts/fuzz.sh. */
#include "core/error.h"
#include "data/loader.h"
#include "data/shard.h"

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char dir[64], path[96];

static void must(int cond, const char *what) {
    if (!cond) {
        fprintf(stderr, "fuzz_shard: %s (last message: %s)\n", what, anvil_errmsg());
        abort();
    }
}

/* Each input's file is removed after it; the folder goes when the run ends. */
static void remove_dir(void) { rmdir(dir); }

static void write_input(const uint8_t *data, size_t size) {
    if (!dir[0]) {
        snprintf(dir, sizeof dir, "/tmp/fuzz_shard_%d", (int)getpid());
        mkdir(dir, 0700);
        atexit(remove_dir);
        snprintf(path, sizeof path, "%s/s.bin", dir);
    }
    FILE *f = fopen(path, "wb");
    must(f != NULL, "cannot write the input file");
    if (size) must(fwrite(data, 1, size, f) == size, "short write of the input file");
    fclose(f);
}

/* Geometry from the file size, so the fuzzer explores it without a separate input. */
static void check_loader(const anvil_shard *s, const uint8_t *data, size_t size) {
    int B = 1 + (int)(size % 3), T = 1 + (int)((size / 3) % 5), world = 1 + (int)((size / 15) % 2);
    int vocab = (size / 30) % 2 ? 65536 : 300;
    int64_t global = (int64_t)world * B * T;
    for (int rank = 0; rank < world; rank++)
        for (int prefetch = 0; prefetch <= 1; prefetch++) {
            anvil_loader *L = anvil_loader_open(path, B, T, rank, world, vocab);
            if (!s || s->ntokens < global + 1) {
                must(L == NULL && anvil_errmsg()[0], "loader accepted a shard without a whole batch, or no message");
                continue;
            }
            must(L != NULL, "loader refused a shard that holds a batch");
            anvil_loader_set_prefetch(L, prefetch);
            if (data[size - 1] & 1) must(anvil_loader_set_shuffle(L, data[size - 1]) == 0, "set_shuffle failed");
            int64_t n = (int64_t)B * T;
            int32_t *in = malloc((size_t)n * sizeof *in), *tg = malloc((size_t)n * sizeof *tg);
            int32_t *want = malloc((size_t)(n + 1) * sizeof *want);
            must(in && tg && want, "out of memory");
            int64_t nwin = (s->ntokens - 1) / global;
            for (int step = 0; step < 40 && step < 2 * nwin + 1; step++) {
                anvil_loader_state before = anvil_loader_get_state(L);
                int rc = anvil_loader_next(L, in, tg);
                if (rc) {
                    must(anvil_errmsg()[0] && strstr(anvil_errmsg(), "vocab_size"), "failed next without a message");
                    anvil_loader_state after = anvil_loader_get_state(L);
                    must(after.shard == before.shard && after.position == before.position && after.epoch == before.epoch,
                         "a failed next moved the state");
                    break;
                }
                /* The window must exist in the shard, with every id in range. */
                int64_t off = -1;
                for (int64_t w = 0; w < nwin && off < 0; w++) {
                    int64_t o = w * global + rank * n;
                    must(anvil_shard_read(s, o, n + 1, want, 0) == 0, "shard read of a window failed");
                    if (!memcmp(want, in, (size_t)n * sizeof *in) && !memcmp(want + 1, tg, (size_t)n * sizeof *tg))
                        off = o;
                }
                must(off >= 0, "the loader returned a window the shard does not hold");
                for (int64_t i = 0; i < n; i++) must((uint32_t)in[i] < (uint32_t)vocab, "an id out of range got through");
            }
            free(in);
            free(tg);
            free(want);
            anvil_loader_close(L);
        }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    write_input(data, size);
    anvil_shard s;
    int ok = anvil_shard_open(&s, path) == 0;
    if (!ok) {
        must(anvil_errmsg()[0] != 0, "refused without a message");
    } else {
        must(s.ntokens > 0 && (s.token_bytes == 2 || s.token_bytes == 4), "accepted an inconsistent header");
        must((size_t)ANVIL_SHARD_HEADER_BYTES + (size_t)s.ntokens * (size_t)s.token_bytes == size,
             "accepted a size that does not match the header");
        /* Reads outside the tokens are refused, not served from past the end. */
        int32_t one[2];
        must(anvil_shard_read(&s, s.ntokens, 1, one, 0) == -1, "read past the end succeeded");
        must(anvil_shard_read(&s, -1, 1, one, 0) == -1, "read before the start succeeded");
        must(anvil_shard_read(&s, s.ntokens - 1, 1, one, 0) == 0, "read of the last token failed");
    }
    check_loader(ok ? &s : NULL, data, size);
    if (ok) anvil_shard_close(&s);
    unlink(path);
    return 0;
}
