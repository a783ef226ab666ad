/* libFuzzer entry point for the completion record's parser (src/ckpt/completion.c), which the job
 * service's supervisor runs on RUN/completion.json, a file that anyone who can write the run folder may
 * have left. Invariants: any bytes are accepted or refused with a message, never a crash; an accepted
 * record has a known format and version, a command, a pid >= 1, steps both given (>= 0) or both -1, at
 * most ANVIL_COMPLETION_MAX_FILES files, each a plain name (verification opens them: none may lead out
 * of the run folder) and none twice. Built and run by tests/fuzz/CMakeLists.txt (ANVIL_FUZZ) and
 * scripts/fuzz.sh. */
#include "ckpt/completion.h"

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"

static void must(int cond, const char *what) {
    if (!cond) {
        fprintf(stderr, "fuzz_completion: %s\n", what);
        abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    anvil_completion r;
    anvil_fail("%s", "");
    if (anvil_completion_parse((const char *)data, size, &r)) {
        must(strncmp(anvil_errmsg(), "completion record: ", 19) == 0, "a refusal does not say what it refused");
        return 0;
    }
    must(r.version == ANVIL_COMPLETION_VERSION && r.command[0] && r.pid >= 1, "an accepted record out of range");
    must((r.step < 0) == (r.target_steps < 0) && r.step >= -1 && r.target_steps >= -1, "steps half given");
    must(r.nfiles >= 0 && r.nfiles <= ANVIL_COMPLETION_MAX_FILES, "too many files");
    for (int i = 0; i < r.nfiles; i++) {
        const char *n = r.files[i].name;
        must(memchr(n, 0, sizeof r.files[i].name) && n[0] && n[0] != '.' && !strchr(n, '/'),
             "a name out of the folder");
        for (int k = 0; k < i; k++) must(strcmp(n, r.files[k].name) != 0, "a file named twice");
    }
    return 0;
}
