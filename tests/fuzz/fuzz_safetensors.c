/* libFuzzer entry point for the safetensors reader: any byte string must be
 * either accepted as a consistent file or refused with a message, never
 * crash, leak or read out of bounds. Built and run by
 * tests/fuzz/CMakeLists.txt (ANVIL_FUZZ) and scripts/fuzz.sh. */
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
