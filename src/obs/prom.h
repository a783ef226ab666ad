/* The Prometheus text exposition format (version 0.0.4): a page of metric
 * families, each a HELP and a TYPE line followed by its samples, which the
 * format requires to be consecutive. A page is built in memory, then served
 * (obs/http.h) or checked; the builder never fails half-way: an allocation
 * failure marks the page, and anvil_prom_text then reports it. */
#ifndef ANVIL_OBS_PROM_H
#define ANVIL_OBS_PROM_H

#include <stddef.h>

/* The Content-Type of a page. */
#define ANVIL_PROM_CONTENT_TYPE "text/plain; version=0.0.4; charset=utf-8"

typedef struct anvil_prom anvil_prom;

typedef enum { ANVIL_PROM_GAUGE, ANVIL_PROM_COUNTER, ANVIL_PROM_HISTOGRAM } anvil_prom_type;

/* A label: name (a valid label name) and value (any UTF-8; escaped on output). */
typedef struct {
    const char *name, *value;
} anvil_prom_label;

/* A histogram with fixed upper bounds (ascending; +Inf is implied). */
#define ANVIL_PROM_MAX_BUCKETS 24
typedef struct {
    int nbounds;
    double bounds[ANVIL_PROM_MAX_BUCKETS];
    double counts[ANVIL_PROM_MAX_BUCKETS + 1]; /* per bucket, not cumulative; the last is (bounds[n-1], +Inf) */
    double sum, count;
} anvil_prom_histogram;

anvil_prom *anvil_prom_new(void);
void anvil_prom_free(anvil_prom *p);
/* Starts a family: its HELP and TYPE lines. name must be a valid metric name
 * (anvil_prom_valid_name); counters' names end in _total by convention. */
void anvil_prom_family(anvil_prom *p, const char *name, anvil_prom_type type, const char *help);
/* One sample of the family begun last: name{labels} value. Non-finite values are written as the
 * format spells them (NaN, +Inf, -Inf). */
void anvil_prom_sample(anvil_prom *p, const char *name, const anvil_prom_label *labels, int nlabels, double value);
/* The _bucket (cumulative, with le), _sum and _count samples of a histogram family. */
void anvil_prom_histogram_samples(anvil_prom *p, const char *name, const anvil_prom_label *labels, int nlabels,
                                  const anvil_prom_histogram *h);
/* The page so far, NUL-terminated; NULL after anvil_fail when memory ran out while building it. */
const char *anvil_prom_text(const anvil_prom *p, size_t *len);

/* Sets bounds to start, start*factor, ... (n of them, n <= ANVIL_PROM_MAX_BUCKETS) and clears counts. */
void anvil_prom_histogram_exponential(anvil_prom_histogram *h, double start, double factor, int n);
void anvil_prom_histogram_observe(anvil_prom_histogram *h, double v);

/* Whether s is a valid metric name ([a-zA-Z_:][a-zA-Z0-9_:]*). */
int anvil_prom_valid_name(const char *s);

#endif
