/* Metrics pulled out of log lines by regular expressions: a definition is a
 * name and a PCRE2 pattern with exactly one capture group, whose text, read
 * as a number, becomes the metric's value each time a line matches (the
 * seed service's MetricDefinitions). `anvil train --metric NAME=REGEX` and a
 * job spec's `metric_definitions` both go through anvil_logmetric_check.
 *
 * A tap (anvil_logtap_open) is a FILE that passes everything written to it
 * on to another FILE and feeds each line to the definitions on the way:
 * lines end at a newline or a carriage return (a progress bar's redraw), and
 * terminal control sequences (ESC [ ... letter) are removed first. */
#ifndef ANVIL_OBS_LOGMETRIC_H
#define ANVIL_OBS_LOGMETRIC_H

#include <stddef.h>
#include <stdio.h>

#define ANVIL_LOGMETRIC_MAX 32      /* definitions per run */
#define ANVIL_LOGMETRIC_NAME_MAX 64 /* characters of a name */
#define ANVIL_LOGMETRIC_REGEX_MAX 1024
#define ANVIL_LOGMETRIC_LINE_MAX 4096 /* longer lines are matched on their first this many bytes */

/* 0 when name is [A-Za-z_][A-Za-z0-9_]* of at most ANVIL_LOGMETRIC_NAME_MAX characters (not "kind"
 * or "step", which label metrics.jsonl's records) and regex
 * compiles with exactly one capture group; else -1 after anvil_fail with a line naming the metric
 * and, for a regex that does not compile, the offset and PCRE2's reason. */
int anvil_logmetric_check(const char *name, const char *regex);
/* Splits "NAME=REGEX" at the first '=' into name (cap bytes) and *regex (pointing into def), then
 * checks both as above. */
int anvil_logmetric_parse(const char *def, char *name, size_t cap, const char **regex);

/* A run's whole set: at most ANVIL_LOGMETRIC_MAX, each checked, no name twice. 0 or -1 after anvil_fail. */
int anvil_logmetric_check_all(const char *const *names, const char *const *regexes, int n);

typedef struct anvil_logmetrics anvil_logmetrics;

/* n definitions, checked as by anvil_logmetric_check_all; NULL after anvil_fail. */
anvil_logmetrics *anvil_logmetrics_new(const char *const *names, const char *const *regexes, int n);
void anvil_logmetrics_free(anvil_logmetrics *lm);
int anvil_logmetrics_count(const anvil_logmetrics *lm);
const char *anvil_logmetrics_name(const anvil_logmetrics *lm, int i);
/* Matches one line (without its end) against every definition; a capture that is not a number,
 * or a line past the match limit (a pattern that backtracks without end), changes nothing.
 * Returns how many values it set. Thread-safe. */
int anvil_logmetrics_feed(anvil_logmetrics *lm, const char *line, size_t len);
/* Each value (NAN until first matched) into values[count], and into updated[count] whether it was
 * set since the last take (then cleared). Either may be NULL. Thread-safe. */
void anvil_logmetrics_take(anvil_logmetrics *lm, double *values, int *updated);

/* A FILE that writes through to `under` (unbuffered, flushed) and feeds lm its lines; NULL after
 * anvil_fail. Closing it feeds a last unterminated line and leaves `under` open. */
FILE *anvil_logtap_open(FILE *under, anvil_logmetrics *lm);

#endif
