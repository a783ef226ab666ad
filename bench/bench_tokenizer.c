/* Tokenizer encoding throughput: one thread on the whole text, then the text
 * cut at line starts into one part per thread, encoded in parallel (the ids
 * must equal the one-thread ids). bench/bench_tokenizer.sh runs it beside
 * the npm tiktoken peer.
 *
 * usage: bench_tokenizer RANKS ENCODING TEXT [REPS] [THREADS]
 * Prints one JSON line per measurement (median of REPS). */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/clock.h"
#include "core/error.h"
#include "tok/tokenizer.h"

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: bench_tokenizer RANKS ENCODING TEXT [REPS] [THREADS]\n");
        return 2;
    }
    int reps = argc > 4 ? atoi(argv[4]) : 5, nt = argc > 5 ? atoi(argv[5]) : 2;
    if (reps < 1 || reps > 100 || nt < 1 || nt > 64) return 2;
    double tl = anvil_now();
    anvil_tok *t = anvil_tok_load(argv[1], argv[2]);
    if (!t) {
        fprintf(stderr, "bench_tokenizer: %s\n", anvil_errmsg());
        return 1;
    }
    tl = anvil_now() - tl;
    FILE *f = fopen(argv[3], "rb");
    if (!f) return 1;
    fseek(f, 0, SEEK_END);
    size_t n = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    char *text = malloc(n);
    if (!text || fread(text, 1, n, f) != n) return 1;
    fclose(f);

    /* Cut points near each 1/nt of the text: an ASCII letter that starts a
     * line after a printable ASCII character. No regex piece of any of the
     * encodings crosses such a point (a lone "\n" is its own piece whether or
     * not text follows), so the parts' ids concatenate to the whole text's. */
    size_t *cut = malloc(sizeof(size_t) * ((size_t)nt + 1));
    cut[0] = 0;
    cut[nt] = n;
    for (int k = 1; k < nt; k++) {
        size_t c = n / (size_t)nt * (size_t)k;
        if (c < cut[k - 1]) c = cut[k - 1];
        while (c < n && !(c >= 2 && text[c - 1] == '\n' && text[c - 2] > ' ' && text[c - 2] < 127 &&
                          ((text[c] | 32) >= 'a' && (text[c] | 32) <= 'z')))
            c++;
        cut[k] = c;
    }

    double *ts = malloc(sizeof(double) * (size_t)reps);
    int32_t *ids = NULL;
    size_t cap = 0;
    int64_t total = 0;
    anvil_tok_state *s = anvil_tok_state_new(t);
    for (int r = 0; r < reps; r++) {
        double t0 = anvil_now();
        total = anvil_tok_encode(t, s, text, n, ANVIL_TOK_SPECIAL_PLAIN, &ids, &cap);
        ts[r] = anvil_now() - t0;
    }
    anvil_tok_state_free(s);
    qsort(ts, (size_t)reps, sizeof(double), cmp);
    printf("{\"impl\": \"anvil\", \"encoding\": \"%s\", \"threads\": 1, \"bytes\": %zu, \"tokens\": %lld, "
           "\"seconds\": %.4f, \"mb_per_s\": %.2f, \"load_seconds\": %.3f}\n",
           argv[2], n, (long long)total, ts[reps / 2], n / ts[reps / 2] / 1e6, tl);

    int32_t **pids = calloc((size_t)nt, sizeof *pids);
    size_t *pcap = calloc((size_t)nt, sizeof *pcap);
    int64_t *pn = calloc((size_t)nt, sizeof *pn);
    anvil_tok_state **ps = calloc((size_t)nt, sizeof *ps);
    for (int k = 0; k < nt; k++) ps[k] = anvil_tok_state_new(t);
    for (int r = 0; r < reps; r++) {
        double t0 = anvil_now();
#pragma omp parallel for num_threads(nt) schedule(static, 1)
        for (int k = 0; k < nt; k++)
            pn[k] = anvil_tok_encode(t, ps[k], text + cut[k], cut[k + 1] - cut[k], ANVIL_TOK_SPECIAL_PLAIN, &pids[k],
                                     &pcap[k]);
        ts[r] = anvil_now() - t0;
    }
    int64_t sum = 0, same = 1;
    for (int k = 0; k < nt; k++) {
        if (pn[k] < 0 || memcmp(pids[k], ids + sum, sizeof(int32_t) * (size_t)pn[k])) same = 0;
        sum += pn[k];
    }
    qsort(ts, (size_t)reps, sizeof(double), cmp);
    printf("{\"impl\": \"anvil\", \"encoding\": \"%s\", \"threads\": %d, \"bytes\": %zu, \"tokens\": %lld, "
           "\"seconds\": %.4f, \"mb_per_s\": %.2f, \"ids_equal_one_thread\": %s}\n",
           argv[2], nt, n, (long long)sum, ts[reps / 2], n / ts[reps / 2] / 1e6, same && sum == total ? "true" : "false");
    for (int k = 0; k < nt; k++) {
        free(pids[k]);
        anvil_tok_state_free(ps[k]);
    }
    free(pids), free(pcap), free(pn), free(ps), free(ts), free(cut), free(ids), free(text);
    anvil_tok_free(t);
    return same && sum == total ? 0 : 1;
}
