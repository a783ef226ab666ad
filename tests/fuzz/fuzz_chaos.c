/* libFuzzer entry point for anvil chaos's schedule parser (src/job/chaos.c), which reads the text a
 * user gives --schedule. Invariants: any bytes are accepted or refused with one line that starts
 * "chaos schedule: ", never a crash; an accepted schedule has 1 to ANVIL_CHAOS_MAX_EVENTS events,
 * each by time (finite, >= 0) or by step (>= 0) but not both, of a known kind, with a target only
 * where the kind takes one and a count (from 1) exactly where it is an S3 kind; and the schedule
 * written back as text parses to the same events. Built and run by tests/fuzz/CMakeLists.txt
 * (ANVIL_FUZZ) and scripts/fuzz.sh. */
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "job/chaos.h"

static void must(int cond, const char *what) {
    if (!cond) {
        fprintf(stderr, "fuzz_chaos: %s\n", what);
        abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *text = malloc(size + 1);
    if (!text) return 0;
    memcpy(text, data, size);
    text[size] = 0;
    anvil_chaos_schedule s;
    int rc = anvil_chaos_parse(text, &s);
    free(text);
    if (rc) {
        must(!strncmp(anvil_errmsg(), "chaos schedule: ", 16) && !strchr(anvil_errmsg(), '\n'),
             "a refusal is not one line naming the schedule");
        return 0;
    }
    must(s.n >= 1 && s.n <= ANVIL_CHAOS_MAX_EVENTS, "an accepted schedule's event count out of range");
    char *back = malloc((size_t)s.n * 64 + 1);
    size_t at = 0;
    for (int i = 0; back && i < s.n; i++) {
        const anvil_chaos_event *e = &s.ev[i];
        must((e->at_s >= 0 && isfinite(e->at_s)) != (e->at_step >= 0), "an event neither or both by time and by step");
        must(e->kind >= 0 && e->kind < ANVIL_FAULT_NKINDS, "an unknown kind accepted");
        must(e->target >= -1 && (e->target < 0 || anvil_fault_kind_targeted(e->kind)), "a target on a kind without one");
        must(anvil_fault_kind_s3(e->kind) ? e->count >= 1 : e->count == -1, "a count on a kind without one, or none");
        if (e->at_s >= 0) at += (size_t)snprintf(back + at, 64, "%s%.17gs ", i ? "," : "", e->at_s);
        else at += (size_t)snprintf(back + at, 64, "%sstep:%lld ", i ? "," : "", (long long)e->at_step);
        at += (size_t)snprintf(back + at, 40, "%s", anvil_fault_kind_name(e->kind));
        if (e->target >= 0) at += (size_t)snprintf(back + at, 16, ":%d", e->target);
        if (e->count >= 0) at += (size_t)snprintf(back + at, 16, ":%d", e->count);
    }
    anvil_chaos_schedule again;
    if (back) {
        must(anvil_chaos_parse(back, &again) == 0, "an accepted schedule written back does not parse");
        must(again.n == s.n, "an accepted schedule reads back with another number of events");
        for (int i = 0; i < s.n; i++)
            must(again.ev[i].kind == s.ev[i].kind && again.ev[i].target == s.ev[i].target &&
                     again.ev[i].count == s.ev[i].count &&
                     again.ev[i].at_step == s.ev[i].at_step && again.ev[i].at_s == s.ev[i].at_s,
                 "an accepted schedule reads back differently");
        anvil_chaos_free(&again);
    }
    free(back);
    anvil_chaos_free(&s);
    return 0;
}
