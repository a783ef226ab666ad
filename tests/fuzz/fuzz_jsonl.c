/* libFuzzer entry point for the JSON-lines reader of anvil prep (the line
 * splitting and field extraction in src/data/jsonl.c): any byte string, as
 * an input file, must split into lines that tile it exactly, and each line
 * must be classified (document, blank, bad JSON, missing field) the same way
 * every time, with a document's text inside memory the reader owns. Never a
 * crash, leak or out-of-bounds read (the input buffer has no terminator).
 *
 * The first input byte picks the field name; the rest is the file. Built and
 * run by tests/fuzz/CMakeLists.txt (ANVIL_FUZZ) and scripts/fuzz.sh. */
#include "data/prep.h"

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void must(int cond, const char *what) {
    if (!cond) {
        fprintf(stderr, "fuzz_jsonl: %s\n", what);
        abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static const char *const fields[] = {"text", "", "a", "content", "t\xc3\xa9xt"};
    if (size < 1) return 0;
    const char *field = fields[data[0] % 5];
    const unsigned char *file = data + 1;
    size_t len = size - 1, off = 0, covered = 0;
    while (off < len) {
        size_t line_len, before = off;
        size_t at = anvil_jsonl_next_line(file, len, &off, &line_len);
        must(at == before && at + line_len <= len, "a line starts elsewhere or runs past the end");
        must(!memchr(file + at, '\n', line_len), "a line holds a newline");
        must(off == at + line_len + (at + line_len < len), "the next line does not start after the newline");
        must(off > before, "no progress");
        covered += off - before;

        void *hold, *hold2;
        const char *doc, *doc2;
        size_t n, n2;
        int kind = anvil_jsonl_field(file + at, line_len, field, &hold, &doc, &n);
        must(kind >= ANVIL_JSONL_DOC && kind <= ANVIL_JSONL_NUL, "unknown kind");
        size_t trimmed = line_len - (line_len && file[at + line_len - 1] == '\r');
        must((kind == ANVIL_JSONL_BLANK) == (trimmed == 0), "blank means empty");
        if (kind == ANVIL_JSONL_DOC) {
            must(hold != NULL && doc != NULL && strlen(doc) == n, "a document's length is not its text's");
            /* The text lives in the parsed tree, not in the input line. */
            must(doc < (const char *)file || doc >= (const char *)file + len, "a document points into the input");
        } else {
            must(hold == NULL && doc == NULL && n == 0, "a non-document carries text");
        }
        int again = anvil_jsonl_field(file + at, line_len, field, &hold2, &doc2, &n2);
        must(again == kind && n2 == n && (!n || !memcmp(doc, doc2, n)), "the same line read twice differs");
        anvil_jsonl_release(hold);
        anvil_jsonl_release(hold2);
    }
    must(covered == len, "the lines do not tile the input");
    return 0;
}
