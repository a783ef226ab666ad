/* libFuzzer entry point for log metrics (src/obs/logmetric.c): the
 * definitions a user gives `anvil train --metric` or a job spec's
 * metric_definitions, and the log lines matched against them.
 *
 * The input's lines up to the first empty one are definitions, NAME=REGEX;
 * the rest is log text, written through a tap in pieces whose sizes the
 * input's bytes choose. Invariants: a definition is accepted or refused with
 * a message, never a crash; a set whose every definition parses, with no
 * name twice, compiles; the tap passes the text through byte for byte; a
 * value is NAN or finite, and set only for a definition that matched. Built
 * and run by tests/fuzz/CMakeLists.txt (ANVIL_FUZZ) and scripts/fuzz.sh. */
#include "obs/logmetric.h"

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"

static void must(int cond, const char *what) {
    if (!cond) {
        fprintf(stderr, "fuzz_logmetric: %s\n", what);
        abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *text = malloc(size + 1);
    if (!text) return 0;
    memcpy(text, data, size);
    text[size] = 0;
    char names[ANVIL_LOGMETRIC_MAX][ANVIL_LOGMETRIC_NAME_MAX + 1];
    const char *name_ptrs[ANVIL_LOGMETRIC_MAX], *regexes[ANVIL_LOGMETRIC_MAX];
    int n = 0, all_parsed = 1;
    char *p = text, *end = text + size;
    while (p < end) {
        char *nl = memchr(p, '\n', (size_t)(end - p));
        char *line_end = nl ? nl : end;
        if (line_end == p) {
            p = line_end + 1;
            break;
        }
        *line_end = 0;
        if (n < ANVIL_LOGMETRIC_MAX && strlen(p) == (size_t)(line_end - p)) {
            int rc = anvil_logmetric_parse(p, names[n], sizeof names[0], &regexes[n]);
            if (rc == 0) {
                name_ptrs[n] = names[n];
                n++;
            } else {
                must(anvil_errmsg()[0] != 0, "a refusal without a message");
                all_parsed = 0;
            }
        }
        p = line_end + 1;
    }
    int unique = 1;
    for (int i = 0; i < n; i++)
        for (int j = 0; j < i; j++) unique &= strcmp(names[i], names[j]) != 0;
    anvil_logmetrics *lm = anvil_logmetrics_new(name_ptrs, regexes, n);
    must((lm != NULL) == unique, "a set of parsed, distinct definitions must compile, and a repeated name fail");
    (void)all_parsed;
    if (lm && p < end) {
        size_t len = (size_t)(end - p);
        char *out = NULL;
        size_t outn = 0;
        FILE *under = open_memstream(&out, &outn);
        FILE *tap = under ? anvil_logtap_open(under, lm) : NULL;
        if (tap) {
            /* Pieces of 1 to 64 bytes, their sizes taken from the text itself. */
            for (size_t off = 0; off < len;) {
                size_t piece = 1 + (unsigned char)p[off] % 64;
                if (piece > len - off) piece = len - off;
                must(fwrite(p + off, 1, piece, tap) == piece, "the tap refused a write");
                off += piece;
            }
            fclose(tap);
            fflush(under);
            must(outn == len && !memcmp(out, p, len), "the tap changed the text");
            double v[ANVIL_LOGMETRIC_MAX];
            int up[ANVIL_LOGMETRIC_MAX];
            anvil_logmetrics_take(lm, v, up);
            for (int i = 0; i < n; i++) must(isnan(v[i]) ? !up[i] : isfinite(v[i]) && up[i], "a value that is neither");
        }
        if (under) fclose(under);
        free(out);
    }
    anvil_logmetrics_free(lm);
    free(text);
    return 0;
}
