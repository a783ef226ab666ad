#include "obs/prom.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"

struct anvil_prom {
    char *buf;
    size_t len, cap;
    int oom;
};

anvil_prom *anvil_prom_new(void) { return calloc(1, sizeof(anvil_prom)); }

void anvil_prom_free(anvil_prom *p) {
    if (!p) return;
    free(p->buf);
    free(p);
}

static int reserve(anvil_prom *p, size_t more) {
    if (p->oom) return -1;
    if (p->len + more + 1 <= p->cap) return 0;
    size_t cap = p->cap ? p->cap : 4096;
    while (cap < p->len + more + 1) cap *= 2;
    char *b = realloc(p->buf, cap);
    if (!b) {
        p->oom = 1;
        return -1;
    }
    p->buf = b;
    p->cap = cap;
    return 0;
}

static void put(anvil_prom *p, const char *s, size_t n) {
    if (reserve(p, n)) return;
    memcpy(p->buf + p->len, s, n);
    p->len += n;
    p->buf[p->len] = 0;
}

static void puts_(anvil_prom *p, const char *s) { put(p, s, strlen(s)); }

ANVIL_PRINTF(2, 3) static void putf(anvil_prom *p, const char *fmt, ...) {
    char tmp[128];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n > 0) put(p, tmp, (size_t)n < sizeof tmp ? (size_t)n : sizeof tmp - 1);
}

/* HELP text escapes backslash and newline; label values also the double quote. */
static void put_escaped(anvil_prom *p, const char *s, int quote) {
    for (; *s; s++) {
        if (*s == '\\') puts_(p, "\\\\");
        else if (*s == '\n') puts_(p, "\\n");
        else if (quote && *s == '"') puts_(p, "\\\"");
        else put(p, s, 1);
    }
}

/* The fewest digits (15 to 17) that read back as the same double: 0.1, not 0.10000000000000001. */
static void format_double(char *out, size_t cap, double v) {
    for (int digits = 15; digits <= 17; digits++) {
        snprintf(out, cap, "%.*g", digits, v);
        if (strtod(out, NULL) == v) return;
    }
}

/* Integral values without a fraction, the others exactly. */
static void put_value(anvil_prom *p, double v) {
    char num[40];
    if (isnan(v)) puts_(p, "NaN");
    else if (isinf(v)) puts_(p, v > 0 ? "+Inf" : "-Inf");
    else if (v == floor(v) && fabs(v) < 1e15) putf(p, "%.0f", v);
    else {
        format_double(num, sizeof num, v);
        puts_(p, num);
    }
}

static const char *type_name(anvil_prom_type t) {
    return t == ANVIL_PROM_COUNTER ? "counter" : t == ANVIL_PROM_HISTOGRAM ? "histogram" : "gauge";
}

void anvil_prom_family(anvil_prom *p, const char *name, anvil_prom_type type, const char *help) {
    puts_(p, "# HELP ");
    puts_(p, name);
    puts_(p, " ");
    put_escaped(p, help, 0);
    puts_(p, "\n# TYPE ");
    puts_(p, name);
    puts_(p, " ");
    puts_(p, type_name(type));
    puts_(p, "\n");
}

/* name{labels[,le="..."]} */
static void put_series(anvil_prom *p, const char *name, const anvil_prom_label *labels, int nlabels, const char *le) {
    puts_(p, name);
    if (nlabels == 0 && !le) return;
    puts_(p, "{");
    for (int i = 0; i < nlabels; i++) {
        if (i) puts_(p, ",");
        puts_(p, labels[i].name);
        puts_(p, "=\"");
        put_escaped(p, labels[i].value, 1);
        puts_(p, "\"");
    }
    if (le) {
        if (nlabels) puts_(p, ",");
        puts_(p, "le=\"");
        puts_(p, le);
        puts_(p, "\"");
    }
    puts_(p, "}");
}

void anvil_prom_sample(anvil_prom *p, const char *name, const anvil_prom_label *labels, int nlabels, double value) {
    put_series(p, name, labels, nlabels, NULL);
    puts_(p, " ");
    put_value(p, value);
    puts_(p, "\n");
}

void anvil_prom_histogram_samples(anvil_prom *p, const char *name, const anvil_prom_label *labels, int nlabels,
                                  const anvil_prom_histogram *h) {
    char series[256], le[40];
    snprintf(series, sizeof series, "%s_bucket", name);
    double cum = 0;
    for (int i = 0; i <= h->nbounds; i++) {
        cum += h->counts[i];
        if (i < h->nbounds) format_double(le, sizeof le, h->bounds[i]);
        else snprintf(le, sizeof le, "+Inf");
        put_series(p, series, labels, nlabels, le);
        puts_(p, " ");
        put_value(p, cum);
        puts_(p, "\n");
    }
    snprintf(series, sizeof series, "%s_sum", name);
    anvil_prom_sample(p, series, labels, nlabels, h->sum);
    snprintf(series, sizeof series, "%s_count", name);
    anvil_prom_sample(p, series, labels, nlabels, h->count);
}

const char *anvil_prom_text(const anvil_prom *p, size_t *len) {
    if (p->oom) {
        anvil_fail("metrics: out of memory building the page");
        return NULL;
    }
    if (len) *len = p->len;
    return p->buf ? p->buf : "";
}

void anvil_prom_histogram_exponential(anvil_prom_histogram *h, double start, double factor, int n) {
    memset(h, 0, sizeof *h);
    if (n > ANVIL_PROM_MAX_BUCKETS) n = ANVIL_PROM_MAX_BUCKETS;
    h->nbounds = n;
    double b = start;
    for (int i = 0; i < n; i++, b *= factor) h->bounds[i] = b;
}

void anvil_prom_histogram_observe(anvil_prom_histogram *h, double v) {
    int i = 0;
    while (i < h->nbounds && v > h->bounds[i]) i++;
    h->counts[i] += 1;
    h->sum += v;
    h->count += 1;
}

int anvil_prom_valid_name(const char *s) {
    if (!s || !*s) return 0;
    for (const char *c = s; *c; c++) {
        int alpha = (*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || *c == '_' || *c == ':';
        if (!alpha && !(c > s && *c >= '0' && *c <= '9')) return 0;
    }
    return 1;
}
