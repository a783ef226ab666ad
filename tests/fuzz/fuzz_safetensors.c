/* libFuzzer entry point for the safetensors reader: any byte string must be
 * either accepted as a consistent file or refused with a message, never
 * crash, leak or read out of bounds. Not part of the CMake build.
 *
 * Build and run from the repository root (about 2 minutes):
 *   clang -std=c17 -g -O1 -D_GNU_SOURCE -fsanitize=fuzzer,address,undefined -Isrc \
 *     tests/fuzz/fuzz_safetensors.c src/ckpt/safetensors.c src/core/error.c src/core/fsutil.c -lcjson \
 *     -o /tmp/fuzz_safetensors
 *   mkdir -p /tmp/fuzz_st_corpus && /tmp/fuzz_safetensors -max_total_time=120 -max_len=4096 \
 *     /tmp/fuzz_st_corpus
 * Seeding the corpus folder with a few small valid files (e.g. written by
 * anvil_st_write) gets it past the JSON syntax faster. */
#include "ckpt/safetensors.h"
#include "core/error.h"

#include <stddef.h>
#include <stdint.h>

static volatile uint8_t sink;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    anvil_fail("%s", "");
    anvil_st_file *f = anvil_st_open_mem(data, size, "fuzz");
    if (!f) {
        /* A refusal must always explain itself. */
        if (anvil_errmsg()[0] == '\0') __builtin_trap();
        return 0;
    }
    /* Touch every byte the reader vouched for, so a bad bound shows up. */
    for (int i = 0; i < anvil_st_count(f); i++) {
        const anvil_st_tensor *t = anvil_st_at(f, i);
        const uint8_t *p = t->data;
        for (uint64_t j = 0; j < t->nbytes; j++) sink ^= p[j];
        if ((uintptr_t)t->data % anvil_st_dtype_size(t->dtype) != 0) __builtin_trap();
        if (anvil_st_find(f, t->name) != t) __builtin_trap();
    }
    (void)anvil_st_meta(f, "format");
    anvil_st_close(f);
    return 0;
}
