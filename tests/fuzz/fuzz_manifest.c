/* libFuzzer entry point for the checkpoint manifest parser: any byte string
 * must be either accepted as a consistent manifest or refused with a message,
 * never crash, leak or read out of bounds. A manifest steers which files
 * verification opens, so an accepted one must name only plain files inside
 * the checkpoint folder. Built and run by tests/fuzz/CMakeLists.txt
 * (ANVIL_FUZZ) and scripts/fuzz.sh. */
#include "ckpt/checkpoint.h"
#include "core/error.h"

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    /* A mutated manifest almost never keeps a valid manifest_crc32c, which would stop the parse at
     * the checksum; so the input is re-stamped unless it starts with a space, which leaves the
     * mismatch path reachable too. */
    char *text = malloc(size ? size : 1);
    if (!text) return 0;
    memcpy(text, data, size);
    if (!size || text[0] != ' ') anvil_ckpt_manifest_stamp(text, size);
    anvil_fail("%s", "");
    anvil_ckpt_manifest m;
    int rc = anvil_ckpt_manifest_parse(text, size, "fuzz", &m);
    free(text);
    if (rc) {
        if (anvil_errmsg()[0] == '\0') __builtin_trap();
        if (m.train_config) __builtin_trap(); /* a refusal leaves nothing to free */
        return 0;
    }
    if (m.version < 1 || m.version > ANVIL_CKPT_VERSION || m.nfiles < 1 || m.nfiles > ANVIL_CKPT_MAX_FILES)
        __builtin_trap();
    if (m.step < 0 || m.tokens_seen < 0 || m.loader.shard < 0 || m.loader.position < 0 || m.rank >= m.world)
        __builtin_trap();
    if ((m.loader.shuffled != 0 && m.loader.shuffled != 1) || (!m.loader.shuffled && m.loader.shuffle_seed))
        __builtin_trap();
    if (m.model.padded_vocab < m.model.vocab_size || m.model.n_embd % m.model.n_head) __builtin_trap();
    for (int i = 0; i < m.nfiles; i++) {
        const char *n = m.files[i].name;
        if (!n[0] || n[0] == '.' || strchr(n, '/') || strlen(n) >= sizeof m.files[i].name) __builtin_trap();
    }
    if (!m.train_config || m.train_config[0] != '{') __builtin_trap();
    anvil_ckpt_manifest_free(&m);
    return 0;
}
