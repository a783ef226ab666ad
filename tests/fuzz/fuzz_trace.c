/* libFuzzer entry point for the trace reader behind `anvil profile summary`
 * (src/obs/trace.c): any bytes as a trace file are summarized or refused
 * with a message naming the file, never a crash, a leak or a read past the
 * buffer (which has no terminator); the summary of an input is the same
 * every time. Built and run by tests/fuzz/CMakeLists.txt (ANVIL_FUZZ) and
 * scripts/fuzz.sh. */
#include "obs/trace.h"

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"

static void must(int cond, const char *what) {
    if (!cond) {
        fprintf(stderr, "fuzz_trace: %s\n", what);
        abort();
    }
}

/* The summary of data, and its status. */
static int summarize(const uint8_t *data, size_t size, char **out, size_t *outn) {
    FILE *f = open_memstream(out, outn);
    must(f != NULL, "open_memstream");
    char *copy = malloc(size ? size : 1);
    must(copy != NULL, "malloc");
    memcpy(copy, data, size);
    int rc = anvil_trace_summary_text("input", copy, size, f, 8);
    fclose(f);
    free(copy);
    return rc;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *a = NULL, *b = NULL;
    size_t an = 0, bn = 0;
    int ra = summarize(data, size, &a, &an);
    if (ra) must(!strncmp(anvil_errmsg(), "input: ", 7), "a refusal that does not name the file");
    int rb = summarize(data, size, &b, &bn);
    must(ra == rb && an == bn && !memcmp(a, b, an), "two summaries of one input differ");
    free(a);
    free(b);
    return 0;
}
