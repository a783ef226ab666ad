/* libFuzzer entry point for the cutting of prep's inputs into chunks of
 * whole documents as they are read (prep_cut_chunk, src/data/encode.c, over
 * the document scanning of src/data/sources.c; a white-box target on prep's
 * private header). Any byte string, as an input, is cut twice: whole, and
 * streamed in pieces of 1-16 bytes into a buffer that holds exactly the bytes
 * read and not yet cut (so ASan sees any read past them). Both must give the
 * same chunks, tiling the input, or the same one-line error (a document or
 * line longer than max_doc_bytes); the whole input never asks for more.
 *
 * The first four bytes pick the document mode (one per input, "\n" or "@@"
 * delimited, JSON lines), the piece size and whether the buffer drops the
 * bytes cut after every chunk, the chunk size and the longest document; the
 * rest is the input. Built and run by tests/fuzz/CMakeLists.txt (ANVIL_FUZZ)
 * and scripts/fuzz.sh. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "data/prep_internal.h"

static void must(int cond, const char *what) {
    if (!cond) {
        fprintf(stderr, "fuzz_chunks: %s\n", what);
        abort();
    }
}

#define MAX_CHUNKS 8192

typedef struct {
    uint64_t start[MAX_CHUNKS], end[MAX_CHUNKS];
    int64_t line[MAX_CHUNKS];
    int n, failed;
    char err[512];
} cuts;

/* Keeps one answer of prep_cut_chunk (a chunk, the end, or an error): 1 when more may follow. */
static int take(cuts *c, int r, const chunk *ch) {
    if (r < 0) {
        c->failed = 1;
        snprintf(c->err, sizeof c->err, "%s", anvil_errmsg());
        return 0;
    }
    if (r == 0) return 0;
    must(c->n < MAX_CHUNKS, "more chunks than bytes");
    c->start[c->n] = ch->start;
    c->end[c->n] = ch->end;
    c->line[c->n] = ch->first_line;
    c->n++;
    return 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 4) return 0;
    static const char *const delims[] = {NULL, "\n", "@@", NULL};
    int mode = data[0] % 4;
    size_t piece = 1 + data[1] % 16, unit = 1 + data[2] % 64;
    int drop_each = (data[1] >> 4) & 1;
    anvil_prep_opts o = {.delimiter = delims[mode],
                         .delimiter_len = delims[mode] ? strlen(delims[mode]) : 0,
                         .jsonl_field = mode == 3 ? "text" : NULL,
                         .max_doc_bytes = data[3] & 1 ? (size_t)1 << 30 : 1 + (data[3] >> 1) % 48};
    const unsigned char *text = data + 4;
    size_t len = size - 4;

    static cuts whole, streamed;
    memset(&whole, 0, sizeof whole);
    memset(&streamed, 0, sizeof streamed);
    cutter cut = {0};
    span v = {"fuzz", text, len, 0, 1};
    for (;;) {
        chunk ch;
        int r = prep_cut_chunk(&o, &v, unit, &cut, &ch);
        must(r != PREP_MORE, "the whole input asks for more");
        if (!take(&whole, r, &ch)) break;
    }
    for (int i = 0; i < whole.n; i++) {
        must(whole.start[i] == (i ? whole.end[i - 1] : 0) && whole.end[i] > whole.start[i], "chunks do not tile");
        must(whole.end[i] - whole.start[i] >= unit || whole.end[i] == len || whole.failed, "a chunk ends early");
    }
    must(whole.failed || (whole.n ? whole.end[whole.n - 1] : 0) == len, "the chunks stop before the end");

    /* Streamed: buf holds the input's bytes [base, base + have), nothing more. */
    cutter sc = {0};
    uint64_t base = 0;
    size_t have = 0;
    for (;;) {
        unsigned char *buf = malloc(have ? have : 1);
        memcpy(buf, text + base, have);
        span sv = {"fuzz", buf, have, base, base + have == len};
        chunk ch;
        int r = prep_cut_chunk(&o, &sv, unit, &sc, &ch);
        free(buf);
        if (r == PREP_MORE) {
            must(base + have < len, "more asked for at the end");
            have += piece < len - base - have ? piece : len - base - have;
            continue;
        }
        if (!take(&streamed, r, &ch)) break;
        if (drop_each) {
            have -= (size_t)(sc.start - base);
            base = sc.start;
        }
    }
    must(streamed.n == whole.n && streamed.failed == whole.failed, "streamed and whole cut differently");
    for (int i = 0; i < whole.n; i++)
        must(streamed.start[i] == whole.start[i] && streamed.end[i] == whole.end[i] &&
                 streamed.line[i] == whole.line[i],
             "a streamed chunk differs");
    must(!whole.failed || !strcmp(streamed.err, whole.err), "streamed and whole fail differently");
    return 0;
}
