/* Chaos schedules (job/chaos.h): their text parsed strictly, each event's fault in one line when it
 * is wrong, and random schedules drawn from a seed. */
#include "job/chaos.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/rng.h"

static const char *const kind_names[ANVIL_FAULT_NKINDS] = {"kill-rank", "stop-rank",   "kill-attempt", "host-lost",
                                                           "net-cut",   "disk-full",   "daemon-kill",  "s3-503",
                                                           "s3-reset"};

const char *anvil_fault_kind_name(anvil_fault_kind k) { return kind_names[k]; }

int anvil_fault_kind_parse(const char *name) {
    for (int k = 0; k < ANVIL_FAULT_NKINDS; k++)
        if (!strcmp(name, kind_names[k])) return k;
    return -1;
}

int anvil_fault_kind_in_daemon(anvil_fault_kind k) { return k <= ANVIL_FAULT_NET_CUT; }

int anvil_fault_kind_on_host(anvil_fault_kind k) { return k == ANVIL_FAULT_HOST_LOST || k == ANVIL_FAULT_NET_CUT; }

int anvil_fault_kind_targeted(anvil_fault_kind k) {
    return k == ANVIL_FAULT_KILL_RANK || k == ANVIL_FAULT_STOP_RANK || anvil_fault_kind_on_host(k);
}

int anvil_fault_kind_s3(anvil_fault_kind k) { return k == ANVIL_FAULT_S3_503 || k == ANVIL_FAULT_S3_RESET; }

const char *anvil_fault_kind_list(void) {
    static char list[256];
    if (!list[0])
        for (int k = 0; k < ANVIL_FAULT_NKINDS; k++)
            snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", k ? ", " : "", kind_names[k]);
    return list;
}

/* The requests an S3 fault strikes when its event names no count; -1 for the other kinds. */
static int default_count(anvil_fault_kind k) {
    return k == ANVIL_FAULT_S3_503 ? ANVIL_CHAOS_S3_503_N : k == ANVIL_FAULT_S3_RESET ? ANVIL_CHAOS_S3_RESET_N : -1;
}

/* A decimal count in [0, max] taking the whole of s; -1 when it is not one. */
static long long whole_number(const char *s, long long max) {
    if (!isdigit((unsigned char)s[0])) return -1;
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    return errno || *end || v > max ? -1 : v;
}

/* "30s", "1.5s", "2m": seconds; -1 when it is not a time. */
static double seconds_of(const char *s) {
    if (!isdigit((unsigned char)s[0])) return -1;
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    double unit = !strcmp(end, "s") ? 1 : !strcmp(end, "m") ? 60 : 0;
    return errno || !unit || !isfinite(v * unit) || v * unit > 1e9 ? -1 : v * unit;
}

/* One event's text (white space trimmed, NUL-terminated, modified): "WHEN KIND[:TARGET]". */
static int parse_event(char *text, int number, anvil_chaos_event *e) {
    char *when = text, *kind = strchr(text, ' ');
    if (!*text) return anvil_fail("chaos schedule: event %d is empty (two commas, or one at an end)", number);
    if (!kind) return anvil_fail("chaos schedule: event %d '%.80s': expected WHEN KIND, e.g. '30s kill-rank:1'", number, text);
    *kind++ = 0;
    while (*kind == ' ') kind++;
    e->at_s = -1;
    e->at_step = -1;
    if (!strncmp(when, "step:", 5)) {
        if ((e->at_step = whole_number(when + 5, INT64_MAX / 2)) < 0)
            return anvil_fail("chaos schedule: event %d: 'step:' takes a step number, got '%.40s'", number, when + 5);
    } else if ((e->at_s = seconds_of(when)) < 0) {
        return anvil_fail("chaos schedule: event %d: WHEN '%.40s' is neither a time (30s, 2m) nor step:N", number,
                          when);
    }
    char *target = strchr(kind, ':');
    if (target) *target++ = 0;
    int k = anvil_fault_kind_parse(kind);
    if (k < 0)
        return anvil_fail("chaos schedule: event %d: unknown fault '%.40s' (%s)", number, kind, anvil_fault_kind_list());
    e->kind = (anvil_fault_kind)k;
    e->target = -1;
    e->count = default_count(e->kind);
    if (target && anvil_fault_kind_s3(e->kind) && (e->count = (int)whole_number(target, 1 << 20)) < 1)
        return anvil_fail("chaos schedule: event %d: the count of %s is a number of requests from 1, got '%.40s'",
                          number, kind, target);
    if (target && !anvil_fault_kind_targeted(e->kind) && !anvil_fault_kind_s3(e->kind))
        return anvil_fail("chaos schedule: event %d: %s takes no target, got ':%.40s'", number, kind, target);
    if (target && anvil_fault_kind_targeted(e->kind) && (e->target = (int)whole_number(target, 1 << 20)) < 0)
        return anvil_fail("chaos schedule: event %d: the target of %s is a %s index, got '%.40s'", number, kind,
                          anvil_fault_kind_on_host(e->kind) ? "host" : "rank", target);
    return 0;
}

static char *trim(char *s) {
    while (*s == ' ' || *s == '\t') s++;
    char *end = s + strlen(s);
    while (end > s && (end[-1] == ' ' || end[-1] == '\t')) *--end = 0;
    return s;
}

int anvil_chaos_parse(const char *text, anvil_chaos_schedule *s) {
    s->ev = NULL;
    s->n = 0;
    for (const char *p = text; *p; p++)
        if ((unsigned char)*p < 0x20 && *p != '\t')
            return anvil_fail("chaos schedule: a control character at byte %zu", (size_t)(p - text));
    char *copy = strdup(text);
    int count = 1;
    for (const char *p = text; *p; p++) count += *p == ',';
    if (count > ANVIL_CHAOS_MAX_EVENTS) {
        free(copy);
        return anvil_fail("chaos schedule: %d events, at most %d", count, ANVIL_CHAOS_MAX_EVENTS);
    }
    s->ev = calloc((size_t)count, sizeof *s->ev);
    if (!copy || !s->ev) {
        free(copy);
        anvil_chaos_free(s);
        return anvil_fail("chaos schedule: out of memory");
    }
    int rc = 0;
    char *rest = copy;
    for (int i = 0; i < count && !rc; i++) {
        char *comma = strchr(rest, ',');
        if (comma) *comma = 0;
        rc = parse_event(trim(rest), i + 1, &s->ev[i]);
        if (comma) rest = comma + 1;
    }
    free(copy);
    if (rc) {
        anvil_chaos_free(s);
        return -1;
    }
    s->n = count;
    return 0;
}

int anvil_chaos_random(uint64_t seed, double mtbf_s, double duration_s, const anvil_fault_kind *kinds, int nkinds,
                       anvil_chaos_schedule *s) {
    s->ev = NULL;
    s->n = 0;
    if (!(mtbf_s > 0) || !isfinite(mtbf_s)) return anvil_fail("chaos: --mtbf must be a positive number of seconds");
    if (!(duration_s > 0) || !isfinite(duration_s))
        return anvil_fail("chaos: --duration must be a positive number of seconds");
    if (nkinds < 1) return anvil_fail("chaos: --kinds names no fault");
    if (duration_s / mtbf_s > ANVIL_CHAOS_MAX_EVENTS / 4)
        return anvil_fail("chaos: --duration %g s at --mtbf %g s is more than %d faults", duration_s, mtbf_s,
                          ANVIL_CHAOS_MAX_EVENTS / 4);
    anvil_rng rng;
    anvil_rng_seed(&rng, seed);
    s->ev = calloc(ANVIL_CHAOS_MAX_EVENTS, sizeof *s->ev);
    if (!s->ev) return anvil_fail("chaos: out of memory");
    double t = 0;
    for (;;) {
        /* Exponential gaps: the faults of a Poisson process of rate 1/mtbf. 1 - u is never 0. */
        t += -mtbf_s * log(1.0 - (double)anvil_rng_uniform(&rng));
        if (t >= duration_s || s->n == ANVIL_CHAOS_MAX_EVENTS) break;
        anvil_chaos_event *e = &s->ev[s->n++];
        e->at_s = t;
        e->at_step = -1;
        e->kind = kinds[anvil_rng_u64(&rng) % (uint64_t)nkinds];
        e->target = -1;
        e->count = default_count(e->kind);
    }
    return 0;
}

void anvil_chaos_free(anvil_chaos_schedule *s) {
    free(s->ev);
    s->ev = NULL;
    s->n = 0;
}
