/* libFuzzer targets for the tokenizer, built and run by
 * tests/fuzz/CMakeLists.txt (ANVIL_FUZZ) and scripts/fuzz.sh.
 *
 * fuzz_rankfile: the .tiktoken rank-file parser, under gpt2 (one special
 * after the ranks) and llama3 (256). Any byte string must be either loaded
 * as a consistent vocabulary or refused with a message; a loaded one must
 * round-trip a few texts. fuzz_encode (this file with FUZZ_ENCODE): encoding
 * arbitrary bytes (mostly ill-formed UTF-8) with the real gpt2, cl100k_base
 * and o200k_base tables and the trained llama3 one, the first input byte
 * picking the table and the special-token mode; decode(encode(x)) must give
 * x back. It reads tok/ranks/<encoding>.tiktoken (and
 * tok/expected/train_llama3_1456.tiktoken) from the working directory
 * (tests/; see tests/tok/gen.sh): a missing one fails it, unless
 * ANVIL_TEST_ALLOW_SKIP=1. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "tok/tokenizer.h"

#ifdef FUZZ_ENCODE
#include <unistd.h>

#include "testutil.h"
#endif

static void check_roundtrip(const anvil_tok *t, const uint8_t *x, size_t n, enum anvil_tok_special mode) {
    int32_t *ids = NULL;
    size_t cap = 0, bcap = 0;
    unsigned char *back = NULL;
    int64_t k = anvil_tok_encode(t, NULL, x, n, mode, &ids, &cap);
    if (k < 0) {
        /* Only refusing special-token text may fail. */
        if (mode != ANVIL_TOK_SPECIAL_REFUSE || !strstr(anvil_errmsg(), "special token")) __builtin_trap();
    } else {
        int64_t m = anvil_tok_decode(t, ids, (size_t)k, &back, &bcap);
        if (m != (int64_t)n || (n && memcmp(back, x, n))) __builtin_trap();
    }
    free(ids);
    free(back);
}

#ifndef FUZZ_ENCODE

static void load_and_check(const uint8_t *data, size_t size, const char *encoding) {
    anvil_fail("%s", "");
    anvil_tok *t = anvil_tok_load_mem((const char *)data, size, "fuzz", encoding);
    if (!t) {
        if (anvil_errmsg()[0] == '\0') __builtin_trap();
        return;
    }
    static const char *texts[] = {"", "hello world", "aaaa bbbb", "\xff\xfe<|endoftext|>x", "  \n\n 123",
                                  "<|begin_of_text|>a<|end_of_text|><|reserved_special_token_9|>"};
    for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++)
        check_roundtrip(t, (const uint8_t *)texts[i], strlen(texts[i]), ANVIL_TOK_SPECIAL_ALLOW);
    /* Every id below the vocabulary size either names a token or is refused. */
    for (int32_t id = 0; id < anvil_tok_vocab_size(t) && id < 4096; id++) {
        size_t len = 0;
        const unsigned char *b = anvil_tok_token_bytes(t, id, &len);
        if (b && len == 0) __builtin_trap();
    }
    if (anvil_tok_eot(t) >= anvil_tok_vocab_size(t) || anvil_tok_bos(t) >= anvil_tok_vocab_size(t)) __builtin_trap();
    anvil_tok_free(t);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    load_and_check(data, size, "gpt2");
    load_and_check(data, size, "llama3");
    return 0;
}

#else

static anvil_tok *toks[4];

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    static const char *enc[4] = {"gpt2", "cl100k_base", "o200k_base", "llama3"};
    for (int i = 0; i < 4; i++) {
        char path[64];
        strcpy(path, i == 3 ? "tok/expected/train_llama3_1456" : "tok/ranks/");
        if (i < 3) strcat(path, enc[i]);
        strcat(path, ".tiktoken");
        if (access(path, R_OK)) {
            t_missing("fuzz_encode", "tests/%s is missing (tests/tok/gen.sh fetches it from npm tiktoken)", path);
            exit(t_done("fuzz_encode"));
        }
        if (!(toks[i] = anvil_tok_load(path, enc[i]))) abort();
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    const anvil_tok *t = toks[data[0] % 4];
    check_roundtrip(t, data + 1, size - 1, (enum anvil_tok_special)((data[0] / 4) % 3));
    return 0;
}

#endif
