#include "obs/prom.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/strbuf.h"

struct anvil_prom {
    anvil_strbuf page;
};

anvil_prom *anvil_prom_new(void) { return calloc(1, sizeof(anvil_prom)); }

void anvil_prom_free(anvil_prom *p) {
    if (!p) return;
    anvil_strbuf_free(&p->page);
    free(p);
}

/* HELP text escapes backslash and newline; label values also the double quote. */
static void put_escaped(anvil_prom *p, const char *s, int quote) {
    for (; *s; s++) {
        if (*s == '\\') anvil_strbuf_puts(&p->page, "\\\\");
        else if (*s == '\n') anvil_strbuf_puts(&p->page, "\\n");
        else if (quote && *s == '"') anvil_strbuf_puts(&p->page, "\\\"");
        else anvil_strbuf_put(&p->page, s, 1);
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
    if (isnan(v)) anvil_strbuf_puts(&p->page, "NaN");
    else if (isinf(v)) anvil_strbuf_puts(&p->page, v > 0 ? "+Inf" : "-Inf");
    else if (v == floor(v) && fabs(v) < 1e15) anvil_strbuf_printf(&p->page, "%.0f", v);
    else {
        format_double(num, sizeof num, v);
        anvil_strbuf_puts(&p->page, num);
    }
}

static const char *type_name(anvil_prom_type t) {
    return t == ANVIL_PROM_COUNTER ? "counter" : t == ANVIL_PROM_HISTOGRAM ? "histogram" : "gauge";
}

void anvil_prom_family(anvil_prom *p, const char *name, anvil_prom_type type, const char *help) {
    anvil_strbuf_puts(&p->page, "# HELP ");
    anvil_strbuf_puts(&p->page, name);
    anvil_strbuf_puts(&p->page, " ");
    put_escaped(p, help, 0);
    anvil_strbuf_puts(&p->page, "\n# TYPE ");
    anvil_strbuf_puts(&p->page, name);
    anvil_strbuf_puts(&p->page, " ");
    anvil_strbuf_puts(&p->page, type_name(type));
    anvil_strbuf_puts(&p->page, "\n");
}

/* name{labels[,le="..."]} */
static void put_series(anvil_prom *p, const char *name, const anvil_prom_label *labels, int nlabels, const char *le) {
    anvil_strbuf_puts(&p->page, name);
    if (nlabels == 0 && !le) return;
    anvil_strbuf_puts(&p->page, "{");
    for (int i = 0; i < nlabels; i++) {
        if (i) anvil_strbuf_puts(&p->page, ",");
        anvil_strbuf_puts(&p->page, labels[i].name);
        anvil_strbuf_puts(&p->page, "=\"");
        put_escaped(p, labels[i].value, 1);
        anvil_strbuf_puts(&p->page, "\"");
    }
    if (le) {
        if (nlabels) anvil_strbuf_puts(&p->page, ",");
        anvil_strbuf_puts(&p->page, "le=\"");
        anvil_strbuf_puts(&p->page, le);
        anvil_strbuf_puts(&p->page, "\"");
    }
    anvil_strbuf_puts(&p->page, "}");
}

void anvil_prom_sample(anvil_prom *p, const char *name, const anvil_prom_label *labels, int nlabels, double value) {
    put_series(p, name, labels, nlabels, NULL);
    anvil_strbuf_puts(&p->page, " ");
    put_value(p, value);
    anvil_strbuf_puts(&p->page, "\n");
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
        anvil_strbuf_puts(&p->page, " ");
        put_value(p, cum);
        anvil_strbuf_puts(&p->page, "\n");
    }
    snprintf(series, sizeof series, "%s_sum", name);
    anvil_prom_sample(p, series, labels, nlabels, h->sum);
    snprintf(series, sizeof series, "%s_count", name);
    anvil_prom_sample(p, series, labels, nlabels, h->count);
}

const char *anvil_prom_text(const anvil_prom *p, size_t *len) {
    if (p->page.oom) {
        anvil_fail("metrics: out of memory building the page");
        return NULL;
    }
    if (len) *len = p->page.len;
    return anvil_strbuf_text(&p->page);
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
