#define PCRE2_CODE_UNIT_WIDTH 8
#include "obs/logmetric.h"

#include <math.h>
#include <pcre2.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"

/* Backtracking steps one line may cost one pattern: far above what a sane pattern needs on a
 * 4 KiB line, and a bound on a pathological one. */
#define MATCH_LIMIT 1000000

static int valid_name(const char *s) {
    size_t n = strlen(s);
    if (n == 0 || n > ANVIL_LOGMETRIC_NAME_MAX) return 0;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        int ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || (i > 0 && c >= '0' && c <= '9');
        if (!ok) return 0;
    }
    return 1;
}

/* Compiles regex for metric name; NULL after anvil_fail. */
static pcre2_code *compile(const char *name, const char *regex) {
    /* A log record in metrics.jsonl is {"kind":"log","step":S,NAME:value,...}. */
    if (!strcmp(name, "kind") || !strcmp(name, "step")) {
        anvil_fail("metric '%s': the name is reserved (kind and step label the records)", name);
        return NULL;
    }
    if (!valid_name(name)) {
        anvil_fail("metric '%.80s': a name is 1 to %d letters, digits and underscores, not starting with a digit",
                   name, ANVIL_LOGMETRIC_NAME_MAX);
        return NULL;
    }
    if (strlen(regex) > ANVIL_LOGMETRIC_REGEX_MAX) {
        anvil_fail("metric '%s': the regex is longer than %d bytes", name, ANVIL_LOGMETRIC_REGEX_MAX);
        return NULL;
    }
    int err;
    PCRE2_SIZE off;
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)regex, PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_MATCH_INVALID_UTF,
                                   &err, &off, NULL);
    if (!re) {
        char msg[256];
        pcre2_get_error_message(err, (PCRE2_UCHAR *)msg, sizeof msg);
        anvil_fail("metric '%s': the regex does not compile: %s at offset %zu", name, msg, (size_t)off);
        return NULL;
    }
    uint32_t groups = 0;
    pcre2_pattern_info(re, PCRE2_INFO_CAPTURECOUNT, &groups);
    if (groups != 1) {
        pcre2_code_free(re);
        anvil_fail("metric '%s': the regex has %u capture groups; it needs exactly one, around the number", name,
                   groups);
        return NULL;
    }
    return re;
}

int anvil_logmetric_check(const char *name, const char *regex) {
    pcre2_code *re = compile(name, regex);
    if (!re) return -1;
    pcre2_code_free(re);
    return 0;
}

int anvil_logmetric_parse(const char *def, char *name, size_t cap, const char **regex) {
    const char *eq = strchr(def, '=');
    if (!eq) return anvil_fail("metric '%.80s': expected NAME=REGEX", def);
    size_t n = (size_t)(eq - def);
    if (n >= cap || n > ANVIL_LOGMETRIC_NAME_MAX)
        return anvil_fail("metric '%.*s...': the name is longer than %d characters", 40, def,
                          n >= cap ? (int)cap - 1 : ANVIL_LOGMETRIC_NAME_MAX);
    memcpy(name, def, n);
    name[n] = 0;
    *regex = eq + 1;
    return anvil_logmetric_check(name, *regex);
}

typedef struct {
    char name[ANVIL_LOGMETRIC_NAME_MAX + 1];
    pcre2_code *re;
    double value;
    int updated;
} definition;

struct anvil_logmetrics {
    int n;
    definition d[ANVIL_LOGMETRIC_MAX];
    pcre2_match_data *md;
    pcre2_match_context *mc;
    pthread_mutex_t mu;
};

void anvil_logmetrics_free(anvil_logmetrics *lm) {
    if (!lm) return;
    for (int i = 0; i < lm->n; i++) pcre2_code_free(lm->d[i].re);
    pcre2_match_data_free(lm->md);
    pcre2_match_context_free(lm->mc);
    pthread_mutex_destroy(&lm->mu);
    free(lm);
}

int anvil_logmetric_check_all(const char *const *names, const char *const *regexes, int n) {
    if (n > ANVIL_LOGMETRIC_MAX) return anvil_fail("metrics: %d definitions; at most %d", n, ANVIL_LOGMETRIC_MAX);
    for (int i = 0; i < n; i++) {
        for (int j = 0; j < i; j++)
            if (!strcmp(names[i], names[j])) return anvil_fail("metric '%.80s' is defined twice", names[i]);
        if (anvil_logmetric_check(names[i], regexes[i])) return -1;
    }
    return 0;
}

anvil_logmetrics *anvil_logmetrics_new(const char *const *names, const char *const *regexes, int n) {
    if (anvil_logmetric_check_all(names, regexes, n)) return NULL;
    anvil_logmetrics *lm = calloc(1, sizeof *lm);
    if (!lm) {
        anvil_fail("metrics: out of memory");
        return NULL;
    }
    pthread_mutex_init(&lm->mu, NULL);
    for (int i = 0; i < n; i++) {
        if (!(lm->d[i].re = compile(names[i], regexes[i]))) {
            anvil_logmetrics_free(lm);
            return NULL;
        }
        snprintf(lm->d[i].name, sizeof lm->d[i].name, "%s", names[i]);
        lm->d[i].value = NAN;
        lm->n++;
    }
    /* One group: the whole match and the capture. */
    lm->md = pcre2_match_data_create(2, NULL);
    lm->mc = pcre2_match_context_create(NULL);
    if (!lm->md || !lm->mc) {
        anvil_logmetrics_free(lm);
        anvil_fail("metrics: out of memory");
        return NULL;
    }
    pcre2_set_match_limit(lm->mc, MATCH_LIMIT);
    return lm;
}

int anvil_logmetrics_count(const anvil_logmetrics *lm) { return lm->n; }
const char *anvil_logmetrics_name(const anvil_logmetrics *lm, int i) { return lm->d[i].name; }

/* The capture as a number: all of it (surrounding blanks aside), finite, else NAN. */
static double as_number(const char *s, size_t n) {
    char buf[64];
    while (n && (*s == ' ' || *s == '\t')) s++, n--;
    while (n && (s[n - 1] == ' ' || s[n - 1] == '\t')) n--;
    if (n == 0 || n >= sizeof buf) return NAN;
    memcpy(buf, s, n);
    buf[n] = 0;
    char *end;
    double v = strtod(buf, &end);
    return *end || !isfinite(v) ? NAN : v;
}

int anvil_logmetrics_feed(anvil_logmetrics *lm, const char *line, size_t len) {
    int set = 0;
    pthread_mutex_lock(&lm->mu);
    for (int i = 0; i < lm->n; i++) {
        int rc = pcre2_match(lm->d[i].re, (PCRE2_SPTR)line, len, 0, 0, lm->md, lm->mc);
        if (rc < 2) continue; /* no match, an error, the limit, or a group that took no part */
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(lm->md);
        if (ov[2] == PCRE2_UNSET) continue;
        double v = as_number(line + ov[2], ov[3] - ov[2]);
        if (isnan(v)) continue;
        lm->d[i].value = v;
        lm->d[i].updated = 1;
        set++;
    }
    pthread_mutex_unlock(&lm->mu);
    return set;
}

void anvil_logmetrics_take(anvil_logmetrics *lm, double *values, int *updated) {
    pthread_mutex_lock(&lm->mu);
    for (int i = 0; i < lm->n; i++) {
        if (values) values[i] = lm->d[i].value;
        if (updated) updated[i] = lm->d[i].updated;
        lm->d[i].updated = 0;
    }
    pthread_mutex_unlock(&lm->mu);
}

/* ---- the tap ---- */

typedef struct {
    FILE *under;
    anvil_logmetrics *lm;
    char line[ANVIL_LOGMETRIC_LINE_MAX];
    size_t len;
    int esc; /* 0 text, 1 after ESC, 2 inside ESC [ ... */
} tap;

static void tap_byte(tap *t, char c) {
    if (t->esc == 1) {
        t->esc = c == '[' ? 2 : 0;
        return;
    }
    if (t->esc == 2) {
        if ((c >= '@' && c <= '~')) t->esc = 0; /* the final byte of a control sequence */
        return;
    }
    if (c == '\033') {
        t->esc = 1;
    } else if (c == '\n' || c == '\r') {
        if (t->len) anvil_logmetrics_feed(t->lm, t->line, t->len);
        t->len = 0;
    } else if (t->len < sizeof t->line) {
        t->line[t->len++] = c;
    }
}

static ssize_t tap_write(void *cookie, const char *buf, size_t n) {
    tap *t = cookie;
    size_t w = fwrite(buf, 1, n, t->under);
    fflush(t->under);
    for (size_t i = 0; i < n; i++) tap_byte(t, buf[i]);
    /* The log's own failures (a closed terminal) must not stop the matching or the caller. */
    (void)w;
    return (ssize_t)n;
}

static int tap_close(void *cookie) {
    tap *t = cookie;
    if (t->len) anvil_logmetrics_feed(t->lm, t->line, t->len);
    free(t);
    return 0;
}

FILE *anvil_logtap_open(FILE *under, anvil_logmetrics *lm) {
    tap *t = calloc(1, sizeof *t);
    if (!t) {
        anvil_fail("metrics: out of memory");
        return NULL;
    }
    t->under = under;
    t->lm = lm;
    cookie_io_functions_t io = {.read = NULL, .write = tap_write, .seek = NULL, .close = tap_close};
    FILE *f = fopencookie(t, "w", io);
    if (!f) {
        free(t);
        anvil_fail("metrics: cannot open the log tap");
        return NULL;
    }
    setvbuf(f, NULL, _IONBF, 0);
    return f;
}
