/* libFuzzer entry point for the heartbeat reader (src/obs/heartbeat.c), which the job service's
 * supervisor runs on a file that any training process, or anyone who can write the run folder,
 * may have left. Invariants: any bytes are accepted or refused with a message, never a crash; an
 * accepted heartbeat has a pid >= 1, a step >= 0, a time >= 0, an expect_s >= 0 and a known,
 * terminated phase; and
 * writing back what was accepted reads back as the same fields. Built and run by
 * tests/fuzz/CMakeLists.txt (ANVIL_FUZZ) and scripts/fuzz.sh. */
#include "obs/heartbeat.h"

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"

static void must(int cond, const char *what) {
    if (!cond) {
        fprintf(stderr, "fuzz_heartbeat: %s\n", what);
        abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    anvil_heartbeat hb;
    if (anvil_heartbeat_parse((const char *)data, size, "fuzz", &hb)) {
        must(strncmp(anvil_errmsg(), "fuzz: ", 6) == 0, "a refusal does not name the file");
        return 0;
    }
    must(hb.pid >= 1 && hb.step >= 0 && hb.time >= 0 && hb.expect_s >= 0 && hb.expect_s < 1e9,
         "an accepted heartbeat out of range");
    must(memchr(hb.phase, 0, sizeof hb.phase) != NULL, "an unterminated phase");
    char text[256];
    int n = snprintf(text, sizeof text, "{\"pid\":%ld,\"step\":%lld,\"phase\":\"%s\",\"time\":%.17g,\"expect_s\":%.17g}",
                     hb.pid, (long long)hb.step, hb.phase, hb.time, hb.expect_s);
    anvil_heartbeat again;
    must(anvil_heartbeat_parse(text, (size_t)n, "again", &again) == 0, "what was accepted does not read back");
    must(again.pid == hb.pid && again.step == hb.step && again.time == hb.time && again.expect_s == hb.expect_s &&
             !strcmp(again.phase, hb.phase),
         "what was accepted reads back differently");
    return 0;
}
