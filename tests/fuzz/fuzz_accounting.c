/* libFuzzer entry point for the goodput accounting's reading of a run's metrics.jsonl
 * (src/job/goodput.c): any bytes as the file of a job with two attempts, accounted afresh and
 * through the daemon's cache of parsed records, which is given the file in two parts cut where the
 * input's first byte says (a line half written at the cut, as a run leaves one while it writes):
 * never a crash or a leak; the two accountings agree to the bit; and the parts are never negative
 * and add up to the wall time. Built and run by tests/fuzz/CMakeLists.txt (ANVIL_FUZZ) and
 * scripts/fuzz.sh. */
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "job/goodput.h"

static void must(int cond, const char *what) {
    if (!cond) {
        fprintf(stderr, "fuzz_accounting: %s\n", what);
        abort();
    }
}

static void put(const char *path, const uint8_t *data, size_t size, const char *mode) {
    FILE *f = fopen(path, mode);
    must(f != NULL, "cannot write the metrics file");
    must(fwrite(data, 1, size, f) == size, "cannot write the metrics file");
    fclose(f);
}

static int account(const char *path, anvil_goodput_cache *cache, anvil_goodput *g) {
    static const anvil_job_attempt at[] = {{.attempt = 1, .started_at = 100, .ended_at = 200},
                                           {.attempt = 2, .started_at = 210, .ended_at = 0}};
    static char kind[] = "kill-rank", none[] = "";
    static const anvil_job_fault f[] = {{.at = 150, .attempt = 1, .kind = kind, .target = none, .detail = none}};
    anvil_goodput_input in = {.job_id = 7, .submitted_at = 90, .left_queue_at = 95, .end = 300, .attempts = at,
                              .nattempts = 2, .faults = f, .nfaults = 1, .metrics_path = path, .cache = cache};
    return anvil_goodput_account(&in, g);
}

static bool same_number(double a, double b) { return a == b || (isnan(a) && isnan(b)); }

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static char path[64];
    if (!path[0]) snprintf(path, sizeof path, "/tmp/fuzz_accounting_%d.jsonl", (int)getpid());
    size_t cut = size ? (size_t)data[0] * size / 256 : 0;
    anvil_goodput_cache *cache = anvil_goodput_cache_new();
    must(cache != NULL, "no cache");
    anvil_goodput first, fresh, cached;
    put(path, data, cut, "w");
    must(account(path, cache, &first) == 0, "the first part not accounted");
    anvil_goodput_free(&first);
    put(path, data + cut, size - cut, "a");
    must(account(path, NULL, &fresh) == 0 && account(path, cache, &cached) == 0, "the whole file not accounted");
    bool same = same_number(fresh.wall, cached.wall) && same_number(fresh.ettr, cached.ettr) &&
                fresh.nattempts == cached.nattempts && fresh.nfaults == cached.nfaults;
    double sum = 0;
    for (int p = 0; p < ANVIL_GP_NPARTS; p++) {
        same = same && same_number(fresh.total.s[p], cached.total.s[p]);
        must(fresh.total.s[p] >= 0, "a part below zero");
        sum += fresh.total.s[p];
    }
    for (int i = 0; same && i < fresh.nattempts; i++)
        same = fresh.attempts[i].last_step == cached.attempts[i].last_step &&
               fresh.attempts[i].resumed_from == cached.attempts[i].resumed_from;
    must(same, "the cache's accounting differs from a fresh parse");
    must(fabs(sum - fresh.wall) <= 1e-6 * fresh.wall, "the parts do not add up to the wall time");
    anvil_goodput_free(&fresh);
    anvil_goodput_free(&cached);
    anvil_goodput_cache_free(cache);
    return 0;
}
