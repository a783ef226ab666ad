/* A goodput answer read into a timeline (cli/plot_goodput.h). Everything is checked before it is
 * drawn: a field missing, of the wrong type or out of range is one error naming it. */
#include "cli/plot_goodput.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/json.h"

#define NPARTS 7
/* job/goodput.h's parts, in its order; obs may not include job, and a file is checked against
 * these names anyway. Okabe-Ito colours, grey for the queue that ETTR leaves out. */
static const char *const part_names[NPARTS] = {"productive", "recomputed", "detection", "restart",
                                               "checkpoint", "eval",       "queue"};
static const uint32_t part_colors[NPARTS] = {0x009E73, 0xD55E00, 0xE69F00, 0xCC79A7, 0x0072B2, 0x56B4E9, 0xBBBBBB};

/* No Unix time or duration of a job comes near (some 30000 years). */
#define TIME_MAX 1e12
#define LOSS_MAX 1e300
#define ATTEMPT_MAX 1e9

static int fail_at(const char *src, const char *field, const char *fmt, ...) {
    char why[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    return anvil_fail("%s: %s: %s", src, field, why);
}

/* o's number under key, in [lo, hi] (whole with whole), into *v; field names o ("spans[3]", or ""
 * at the top). */
static int num(const char *src, const char *field, const cJSON *o, const char *key, double lo, double hi, int whole,
               double *v) {
    char name[96];
    snprintf(name, sizeof name, "%s%s%s", field, *field ? "." : "", key);
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!x) return fail_at(src, name, "missing");
    if (!cJSON_IsNumber(x)) return fail_at(src, name, "not a number");
    if (!(x->valuedouble >= lo && x->valuedouble <= hi) || (whole && x->valuedouble != floor(x->valuedouble)))
        return fail_at(src, name, "%g is not a %snumber in [%g, %g]", x->valuedouble, whole ? "whole " : "", lo, hi);
    *v = x->valuedouble;
    return 0;
}

/* g's array under key, of at most max entries (counted into *n), or NULL after anvil_fail. */
static const cJSON *array(const char *src, const cJSON *g, const char *key, int max, int *n) {
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(g, key), *e;
    if (!cJSON_IsArray(a)) {
        fail_at(src, key, a ? "not an array" : "missing");
        return NULL;
    }
    *n = 0;
    cJSON_ArrayForEach(e, a) if (++*n > max) {
        fail_at(src, key, "more than %d entries", max);
        return NULL;
    }
    return a;
}

static int read_parts(const char *src, const cJSON *g, cli_goodput_timeline *t) {
    const cJSON *parts = cJSON_GetObjectItemCaseSensitive(g, "parts");
    if (!cJSON_IsObject(parts)) return fail_at(src, "parts", parts ? "not an object" : "missing");
    for (int p = 0; p < NPARTS; p++) {
        t->parts[p] = (anvil_timeline_category){.name = part_names[p], .color = part_colors[p]};
        if (num(src, "parts", parts, part_names[p], 0, TIME_MAX, 0, &t->parts[p].total)) return -1;
    }
    return 0;
}

/* An attempt's number and its row, sorted by number to find a span's row. */
typedef struct {
    double number;
    int row;
} attempt_key;

static int by_number(const void *a, const void *b) {
    double x = ((const attempt_key *)a)->number, y = ((const attempt_key *)b)->number;
    return (x > y) - (x < y);
}

static int row_of(const attempt_key *keys, int n, double number) {
    attempt_key k = {number, 0}, *hit = bsearch(&k, keys, (size_t)n, sizeof *keys, by_number);
    return hit ? hit->row : -1;
}

/* A row per attempt, after the row outside every attempt when there is one (first: the queue comes
 * first); keys gets the attempts' numbers. */
static int read_attempts(const char *src, const cJSON *g, double submitted, int outside, cli_goodput_timeline *t,
                         attempt_key **keys, int *nkeys) {
    int n;
    const cJSON *all = array(src, g, "attempts", CLI_GOODPUT_MAX_ATTEMPTS, &n), *a;
    if (!all) return -1;
    t->rows = calloc((size_t)n + 1, sizeof *t->rows);
    t->row_labels = calloc((size_t)n + 1, sizeof *t->row_labels);
    *keys = calloc((size_t)n + 1, sizeof **keys);
    if (!t->rows || !t->row_labels || !*keys) return anvil_fail("%s: out of memory", src);
    if (outside) {
        snprintf(t->row_labels[0], sizeof t->row_labels[0], "no attempt");
        t->rows[0] = (anvil_timeline_row){t->row_labels[0], NAN, NAN};
    }
    int r = outside;
    cJSON_ArrayForEach(a, all) {
        char field[32];
        snprintf(field, sizeof field, "attempts[%d]", r - outside);
        double number = 0, t0 = 0, t1 = 0;
        if (!cJSON_IsObject(a)) return fail_at(src, field, "not an object");
        if (num(src, field, a, "attempt", 1, ATTEMPT_MAX, 1, &number) ||
            num(src, field, a, "started_at", 0, TIME_MAX, 0, &t0) ||
            num(src, field, a, "ended_at", 0, TIME_MAX, 0, &t1))
            return -1;
        snprintf(t->row_labels[r], sizeof t->row_labels[r], "attempt %.0f", number);
        t->rows[r] = (anvil_timeline_row){t->row_labels[r], t0 - submitted, t1 - submitted};
        (*keys)[r - outside] = (attempt_key){number, r};
        r++;
    }
    qsort(*keys, (size_t)n, sizeof **keys, by_number);
    for (int i = 1; i < n; i++)
        if ((*keys)[i].number == (*keys)[i - 1].number)
            return fail_at(src, "attempts", "attempt %.0f given twice", (*keys)[i].number);
    t->tl.rows = t->rows;
    t->tl.nrows = r;
    *nkeys = n;
    return 0;
}

/* Whether a span lies outside every attempt (its attempt 0), before the spans are checked. */
static int any_outside(const cJSON *spans) {
    const cJSON *s;
    cJSON_ArrayForEach(s, spans) {
        const cJSON *a = cJSON_GetObjectItemCaseSensitive(s, "attempt");
        if (cJSON_IsNumber(a) && a->valuedouble == 0) return 1;
    }
    return 0;
}

static int part_of(const cJSON *s) {
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(s, "part");
    for (int k = 0; cJSON_IsString(p) && k < NPARTS; k++)
        if (!strcmp(p->valuestring, part_names[k])) return k;
    return -1;
}

static int read_spans(const char *src, const cJSON *spans, int n, const attempt_key *keys, int nkeys,
                      cli_goodput_timeline *t) {
    t->spans = calloc((size_t)n + 1, sizeof *t->spans);
    if (!t->spans) return anvil_fail("%s: out of memory", src);
    int i = 0;
    const cJSON *s;
    cJSON_ArrayForEach(s, spans) {
        char field[32];
        snprintf(field, sizeof field, "spans[%d]", i);
        double t0, t1, number;
        if (!cJSON_IsObject(s)) return fail_at(src, field, "not an object");
        if (num(src, field, s, "t0", -TIME_MAX, TIME_MAX, 0, &t0) || num(src, field, s, "t1", t0, TIME_MAX, 0, &t1) ||
            num(src, field, s, "attempt", 0, ATTEMPT_MAX, 1, &number))
            return -1;
        int row = number == 0 ? 0 : row_of(keys, nkeys, number), part = part_of(s);
        if (row < 0) return fail_at(src, field, "attempt %.0f is not in attempts", number);
        if (part < 0)
            return fail_at(src, field, "part: missing, or not one of productive, recomputed, detection, restart, "
                                       "checkpoint, eval, queue");
        t->spans[i++] = (anvil_timeline_span){t0, t1, row, part};
    }
    t->tl.spans = t->spans;
    t->tl.nspans = (size_t)n;
    return 0;
}

static int read_faults(const char *src, const cJSON *g, double submitted, const attempt_key *keys, int nkeys,
                       cli_goodput_timeline *t) {
    int n, i = 0;
    const cJSON *faults = array(src, g, "faults", CLI_GOODPUT_MAX_FAULTS, &n), *f;
    if (!faults) return -1;
    t->marks = calloc((size_t)n + 1, sizeof *t->marks);
    t->mark_labels = calloc((size_t)n + 1, sizeof *t->mark_labels);
    if (!t->marks || !t->mark_labels) return anvil_fail("%s: out of memory", src);
    cJSON_ArrayForEach(f, faults) {
        char field[32];
        snprintf(field, sizeof field, "faults[%d]", i);
        double at, number;
        if (!cJSON_IsObject(f)) return fail_at(src, field, "not an object");
        const cJSON *kind = cJSON_GetObjectItemCaseSensitive(f, "kind");
        const cJSON *target = cJSON_GetObjectItemCaseSensitive(f, "target");
        if (num(src, field, f, "at", 0, TIME_MAX, 0, &at) || num(src, field, f, "attempt", 0, ATTEMPT_MAX, 1, &number))
            return -1;
        if (!cJSON_IsString(kind)) return fail_at(src, field, "kind: %s", kind ? "not a string" : "missing");
        if (target && !cJSON_IsString(target)) return fail_at(src, field, "target: not a string");
        const char *tg = target ? target->valuestring : "";
        snprintf(t->mark_labels[i], sizeof t->mark_labels[i], "%.64s%s%.40s", kind->valuestring, *tg ? " " : "", tg);
        t->marks[i] = (anvil_timeline_mark){at - submitted, row_of(keys, nkeys, number), t->mark_labels[i]};
        i++;
    }
    t->tl.marks = t->marks;
    t->tl.nmarks = (size_t)n;
    return 0;
}

static int read_loss(const char *src, const cJSON *g, cli_goodput_timeline *t) {
    int n, i = 0;
    const cJSON *loss = array(src, g, "loss", CLI_GOODPUT_MAX_LOSS, &n), *p;
    if (!loss) return -1;
    t->curve = malloc(sizeof *t->curve * 2 * ((size_t)n + 1));
    if (!t->curve) return anvil_fail("%s: out of memory", src);
    cJSON_ArrayForEach(p, loss) {
        char field[32];
        snprintf(field, sizeof field, "loss[%d]", i);
        const cJSON *x = cJSON_GetArrayItem(p, 0), *y = cJSON_GetArrayItem(p, 1);
        if (!cJSON_IsArray(p) || cJSON_GetArraySize(p) != 2 || !cJSON_IsNumber(x) || !cJSON_IsNumber(y))
            return fail_at(src, field, "not a [seconds, loss] pair of numbers");
        if (!(fabs(x->valuedouble) <= TIME_MAX) || !(fabs(y->valuedouble) <= LOSS_MAX))
            return fail_at(src, field, "[%g, %g] is out of range (seconds within ±%g, loss within ±%g)",
                           x->valuedouble, y->valuedouble, TIME_MAX, LOSS_MAX);
        t->curve[i] = x->valuedouble;
        t->curve[n + i++] = y->valuedouble;
    }
    t->tl.curve_t = t->curve;
    t->tl.curve_y = t->curve + n;
    t->tl.ncurve = (size_t)n;
    return 0;
}

static int read_all(const char *src, const char *name, const cJSON *g, cli_goodput_timeline *t) {
    double submitted, wall, ettr;
    int nspans, nkeys = 0;
    attempt_key *keys = NULL;
    if (!cJSON_IsObject(g))
        return anvil_fail("%s: not a goodput object (what `anvil job --json goodput ID` prints)", src);
    if (num(src, "", g, "submitted_at", 0, TIME_MAX, 0, &submitted) ||
        num(src, "", g, "wall_s", 0, TIME_MAX, 0, &wall) || num(src, "", g, "ettr", 0, 1, 0, &ettr) ||
        read_parts(src, g, t))
        return -1;
    const cJSON *spans = array(src, g, "spans", CLI_GOODPUT_MAX_SPANS, &nspans);
    int rc = 0;
    if (!spans || read_attempts(src, g, submitted, any_outside(spans), t, &keys, &nkeys) ||
        read_spans(src, spans, nspans, keys, nkeys, t) || read_faults(src, g, submitted, keys, nkeys, t) ||
        read_loss(src, g, t))
        rc = -1;
    free(keys);
    if (rc) return -1;
    snprintf(t->title, sizeof t->title,
             "%.60s: ETTR %.1f%% (productive / (wall - queue)) of %.1f s, %d attempt%s, %zu fault%s", name, 100 * ettr,
             wall, nkeys, nkeys == 1 ? "" : "s", t->tl.nmarks, t->tl.nmarks == 1 ? "" : "s");
    t->tl.title = t->title;
    t->tl.t_end = wall;
    t->tl.categories = t->parts;
    t->tl.ncategories = NPARTS;
    t->tl.curve_title = "training loss";
    t->tl.curve_unit = "nats per token";
    return 0;
}

int cli_goodput_timeline_of(const char *src, const char *name, const cJSON *g, cli_goodput_timeline *out) {
    memset(out, 0, sizeof *out);
    if (!read_all(src, name, g, out)) return 0;
    cli_goodput_timeline_free(out);
    return -1;
}

int cli_goodput_timeline_parse(const char *src, const char *name, const char *text, size_t len,
                               cli_goodput_timeline *out) {
    memset(out, 0, sizeof *out);
    const char *end;
    cJSON *g = anvil_json_parse(text, len, &end);
    if (!g) {
        char why[256];
        snprintf(why, sizeof why, "%s", anvil_errmsg());
        /* The message may name a key of the file, which may hold a newline: the error stays one line. */
        for (char *c = why; *c; c++)
            if ((unsigned char)*c < 0x20) *c = '?';
        return anvil_fail("%s: not JSON: %s", src, why);
    }
    size_t used = (size_t)(end - text);
    while (used < len && (text[used] == ' ' || text[used] == '\t' || text[used] == '\r' || text[used] == '\n')) used++;
    int rc = used < len ? anvil_fail("%s: text after the JSON value (byte %zu)", src, used)
                        : cli_goodput_timeline_of(src, name, g, out);
    cJSON_Delete(g);
    return rc;
}

void cli_goodput_timeline_free(cli_goodput_timeline *t) {
    free(t->rows);
    free(t->row_labels);
    free(t->spans);
    free(t->marks);
    free(t->mark_labels);
    free(t->curve);
    memset(t, 0, sizeof *t);
}
