#include "obs/plot.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/fsutil.h"
#include "core/json.h"
#include "obs/plot_internal.h"

/* More distinct log metrics in one file than a run can define (ANVIL_LOGMETRIC_MAX) is a file that
 * is not a run's; the limit keeps a hostile one from making thousands of panels. */
#define MAX_LOGS 32
#define NAME_MAX_LEN 64
#define MAX_RUNS 64
/* No axis spans more: its ticks and padding stay finite. */
#define VALUE_MAX 1e300

typedef struct {
    double *x, *y;
    size_t n, cap;
} series;

typedef struct {
    char name[NAME_MAX_LEN + 1];
    series s;
} log_series;

struct anvil_plot_run {
    char *name;
    series loss, val, lr, norm, tps;
    log_series logs[MAX_LOGS];
    int nlogs;
    double tokens_per_step; /* 0 until a train record says */
    long skipped;
};

/* ---- reading ---- */

/* Appends (x, y). A step at or before the series' last one means the run was resumed from an
 * earlier checkpoint and wrote those steps again: the later records replace the ones they repeat,
 * so every series runs forward. */
static int append(series *s, double x, double y) {
    while (s->n && s->x[s->n - 1] >= x) s->n--;
    if (s->n == s->cap) {
        size_t cap = s->cap ? 2 * s->cap : 64;
        double *nx = realloc(s->x, cap * sizeof *nx);
        if (nx) s->x = nx;
        double *ny = nx ? realloc(s->y, cap * sizeof *ny) : NULL;
        if (!ny) return anvil_fail("out of memory");
        s->y = ny;
        s->cap = cap;
    }
    s->x[s->n] = x;
    s->y[s->n++] = y;
    return 0;
}

/* A record's number under key: 1 with *v, 0 when absent, null or beyond what is drawn (counted as
 * skipped), -1 when it is something else. */
static int number(anvil_plot_run *r, const cJSON *o, const char *key, double *v) {
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!f) return 0;
    if (cJSON_IsNull(f) || (cJSON_IsNumber(f) && !(fabs(f->valuedouble) <= VALUE_MAX))) {
        r->skipped++;
        return 0;
    }
    if (!cJSON_IsNumber(f)) return -1;
    *v = f->valuedouble;
    return 1;
}

static int add_field(anvil_plot_run *r, const cJSON *o, const char *key, series *s, double step) {
    double v;
    int got = number(r, o, key, &v);
    if (got < 0) return anvil_fail("\"%s\" is not a number", key);
    return got ? append(s, step, v) : 0;
}

static int metric_name_ok(const char *s) {
    size_t n = strlen(s);
    if (n == 0 || n > NAME_MAX_LEN || (s[0] >= '0' && s[0] <= '9')) return 0;
    for (size_t i = 0; i < n; i++)
        if (!(s[i] == '_' || (s[i] >= 'a' && s[i] <= 'z') || (s[i] >= 'A' && s[i] <= 'Z') ||
              (s[i] >= '0' && s[i] <= '9')))
            return 0;
    return 1;
}

static int add_log(anvil_plot_run *r, const cJSON *o, double step) {
    for (const cJSON *f = o->child; f; f = f->next) {
        if (!strcmp(f->string, "kind") || !strcmp(f->string, "step")) continue;
        if (!metric_name_ok(f->string)) return anvil_fail("\"%.64s\" is not a log metric's name", f->string);
        int i = 0;
        while (i < r->nlogs && strcmp(r->logs[i].name, f->string)) i++;
        if (i == r->nlogs) {
            if (r->nlogs == MAX_LOGS) return anvil_fail("more than %d log metrics", MAX_LOGS);
            snprintf(r->logs[r->nlogs++].name, sizeof r->logs[0].name, "%s", f->string);
        }
        if (add_field(r, o, f->string, &r->logs[i].s, step)) return -1;
    }
    return 0;
}

/* One line's record into r; -1 with a message not yet naming the file. */
static int add_record(anvil_plot_run *r, const char *line, size_t len, int *drawn) {
    const char *end;
    cJSON *o = anvil_json_parse(line, len, &end);
    if (!o) return anvil_fail("not JSON");
    int rc = 0;
    size_t used = (size_t)(end - line);
    while (used < len && (line[used] == ' ' || line[used] == '\t' || line[used] == '\r')) used++;
    const cJSON *kind = cJSON_GetObjectItemCaseSensitive(o, "kind");
    const cJSON *stepf = cJSON_GetObjectItemCaseSensitive(o, "step");
    double step = cJSON_IsNumber(stepf) ? stepf->valuedouble : NAN;
    if (used < len) rc = anvil_fail("text after the record");
    else if (!cJSON_IsObject(o) || !cJSON_IsString(kind)) rc = anvil_fail("not a record with a \"kind\"");
    else if (!(fabs(step) <= VALUE_MAX)) rc = anvil_fail("no numeric \"step\"");
    else if (!strcmp(kind->valuestring, "train")) {
        const cJSON *ms = cJSON_GetObjectItemCaseSensitive(o, "ms");
        const cJSON *tps = cJSON_GetObjectItemCaseSensitive(o, "tokens_per_s");
        if (add_field(r, o, "loss", &r->loss, step) || add_field(r, o, "lr", &r->lr, step) ||
            add_field(r, o, "grad_norm", &r->norm, step) || add_field(r, o, "tokens_per_s", &r->tps, step))
            rc = -1;
        else if (cJSON_IsNumber(ms) && cJSON_IsNumber(tps) && ms->valuedouble > 0 && tps->valuedouble > 0 &&
                 ms->valuedouble * tps->valuedouble <= VALUE_MAX)
            /* Both are printed to 9 digits: their product is the step's whole token count. */
            r->tokens_per_step = round(tps->valuedouble * ms->valuedouble / 1e3);
        *drawn = 1;
    } else if (!strcmp(kind->valuestring, "val")) {
        rc = add_field(r, o, "val_loss", &r->val, step);
        *drawn = 1;
    } else if (!strcmp(kind->valuestring, "log")) {
        rc = add_log(r, o, step);
        *drawn = 1;
    }
    cJSON_Delete(o);
    return rc;
}

void anvil_plot_run_free(anvil_plot_run *r) {
    if (!r) return;
    series *all[] = {&r->loss, &r->val, &r->lr, &r->norm, &r->tps};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) {
        free(all[i]->x);
        free(all[i]->y);
    }
    for (int i = 0; i < r->nlogs; i++) {
        free(r->logs[i].s.x);
        free(r->logs[i].s.y);
    }
    free(r->name);
    free(r);
}

long anvil_plot_run_skipped(const anvil_plot_run *r) { return r->skipped; }

/* The run's name as its legend's label. */
static char *label_of(const char *name) {
    size_t n = strlen(name);
    char *out = malloc(n + 1);
    if (out) anvil_plot_sanitize(out, name, n);
    return out;
}

anvil_plot_run *anvil_plot_read_text(const char *name, const char *file, const char *text, size_t len) {
    anvil_plot_run *r = calloc(1, sizeof *r);
    if (!r || !(r->name = label_of(name))) {
        free(r);
        anvil_fail("%s: out of memory", file);
        return NULL;
    }
    int drawn = 0;
    long lineno = 0;
    for (size_t at = 0; at < len;) {
        const char *nl = memchr(text + at, '\n', len - at);
        size_t n = nl ? (size_t)(nl - (text + at)) : len - at;
        lineno++;
        if (add_record(r, text + at, n, &drawn)) {
            char why[256];
            snprintf(why, sizeof why, "%s", anvil_errmsg());
            anvil_fail("%s:%ld: %s", file, lineno, why);
            anvil_plot_run_free(r);
            return NULL;
        }
        at += n + 1;
    }
    if (!drawn) {
        anvil_fail("%s: no train, val or log records to plot", file);
        anvil_plot_run_free(r);
        return NULL;
    }
    return r;
}

anvil_plot_run *anvil_plot_read(const char *dir) {
    size_t dn = strlen(dir);
    while (dn > 1 && dir[dn - 1] == '/') dn--;
    size_t base = dn;
    while (base > 0 && dir[base - 1] != '/') base--;
    char path[4096], name[4096];
    if (snprintf(path, sizeof path, "%.*s/metrics.jsonl", (int)dn, dir) >= (int)sizeof path) {
        anvil_fail("%s: path too long", dir);
        return NULL;
    }
    snprintf(name, sizeof name, "%.*s", (int)(dn - base), dir + base);
    char *text;
    size_t len;
    if (anvil_read_file(path, &text, &len)) return NULL;
    anvil_plot_run *r = anvil_plot_read_text(name, path, text, len);
    free(text);
    return r;
}

/* ---- drawing ---- */

enum { P_LOSS_STEP, P_LOSS_TOKENS, P_LR, P_NORM, P_TPS, P_FIXED };

static const char *const panel_titles[P_FIXED] = {"loss", "loss by tokens", "learning rate", "gradient norm",
                                                 "tokens/s"};
/* What each panel's y values are in; a log metric's are what its regex captured. */
static const char *const panel_units[P_FIXED] = {"nats per token", "nats per token", "learning rate (no unit)",
                                                "L2 norm (no unit)", "tokens per second"};

/* Colour-blind-safe (Okabe-Ito), then repeated. */
static const uint32_t palette[] = {0x0072B2, 0xD55E00, 0x009E73, 0xCC79A7, 0xE69F00, 0x56B4E9, 0x000000, 0xF0E442};
#define INK ANVIL_PLOT_INK

/* The log metrics' names over all runs, in order of first appearance. */
static int log_names(const anvil_plot_run *const *runs, int nruns, const char **names) {
    int n = 0;
    for (int r = 0; r < nruns; r++)
        for (int i = 0; i < runs[r]->nlogs; i++) {
            int k = 0;
            while (k < n && strcmp(names[k], runs[r]->logs[i].name)) k++;
            if (k == n) names[n++] = runs[r]->logs[i].name;
        }
    return n;
}

static int legend_height(int nruns) {
    return ANVIL_PLOT_LEGEND_PAD + (nruns + ANVIL_PLOT_LEGEND_RUNS - 1) / ANVIL_PLOT_LEGEND_RUNS * ANVIL_PLOT_LEGEND_ROW;
}

int anvil_plot_height(const anvil_plot_run *const *runs, int nruns) {
    const char *names[MAX_LOGS * MAX_RUNS];
    int panels = P_FIXED + (nruns <= MAX_RUNS ? log_names(runs, nruns, names) : 0);
    return legend_height(nruns) + (panels + 1) / 2 * ANVIL_PLOT_PANEL_H;
}

typedef struct {
    const series *s;
    double xscale; /* steps to tokens */
    int run, val;
    const char *what;
} curve;

static int draw_panel(const anvil_canvas *c, double x0, double y0, const char *title, const char *xlabel,
                      const char *ylabel, const curve *cv, int ncv) {
    anvil_plot_frame f = {.x = x0 + ANVIL_PLOT_MARGIN_L,
                          .y = y0 + ANVIL_PLOT_MARGIN_T,
                          .w = ANVIL_PLOT_WIDTH / 2 - ANVIL_PLOT_MARGIN_L - ANVIL_PLOT_MARGIN_R,
                          .h = ANVIL_PLOT_PANEL_H - ANVIL_PLOT_MARGIN_T - ANVIL_PLOT_MARGIN_B};
    c->text(c->ctx, x0 + ANVIL_PLOT_WIDTH / 4, y0 + 14, title, 14, 0, INK, "title");
    c->text(c->ctx, f.x + f.w, f.y + f.h + 30, xlabel, 11, 1, INK, "xlabel");
    c->text(c->ctx, f.x, f.y - 8, ylabel, 11, -1, INK, "ylabel");
    double xlo = INFINITY, xhi = -INFINITY, ylo = INFINITY, yhi = -INFINITY;
    for (int i = 0; i < ncv; i++)
        for (size_t k = 0; k < cv[i].s->n; k++) {
            double x = cv[i].s->x[k] * cv[i].xscale, y = cv[i].s->y[k];
            xlo = fmin(xlo, x), xhi = fmax(xhi, x), ylo = fmin(ylo, y), yhi = fmax(yhi, y);
        }
    if (xlo > xhi) {
        c->rect(c->ctx, f.x, f.y, f.w, f.h, ANVIL_PLOT_NO_FILL, INK, "frame");
        c->text(c->ctx, f.x + f.w / 2, f.y + f.h / 2, "no data", 12, 0, INK, "nodata");
        return 0;
    }
    f.ax = anvil_plot_nice_axis(xlo, xhi, 6, 0);
    f.ay = anvil_plot_nice_axis(ylo, yhi, 5, 1);
    anvil_plot_draw_axes(c, &f);
    size_t most = 0;
    for (int i = 0; i < ncv; i++) most = cv[i].s->n > most ? cv[i].s->n : most;
    double *xy = malloc(2 * sizeof(double) * (most < 4 * (size_t)f.w ? most : 4 * (size_t)f.w) + 1);
    if (!xy) return anvil_fail("plot: out of memory");
    for (int i = 0; i < ncv; i++) {
        if (!cv[i].s->n) continue;
        size_t n = anvil_plot_curve_points(&f, cv[i].s->x, cv[i].s->y, cv[i].s->n, cv[i].xscale, xy);
        char cls[96];
        snprintf(cls, sizeof cls, "curve run%d %s", cv[i].run, cv[i].what);
        uint32_t color = palette[cv[i].run % (int)(sizeof palette / sizeof palette[0])];
        c->polyline(c->ctx, xy, n, color, cv[i].val, cls);
        if (cv[i].val)
            for (size_t k = 0; k < n; k++) c->rect(c->ctx, xy[2 * k] - 2.5, xy[2 * k + 1] - 2.5, 5, 5, color, color, "marker");
    }
    free(xy);
    return 0;
}

static void draw_legend(const anvil_canvas *c, const anvil_plot_run *const *runs, int nruns) {
    double top = ANVIL_PLOT_LEGEND_PAD / 2.0 + ANVIL_PLOT_LEGEND_ROW / 2.0;
    for (int r = 0; r < nruns; r++) {
        uint32_t color = palette[r % (int)(sizeof palette / sizeof palette[0])];
        double x = 20 + r % ANVIL_PLOT_LEGEND_RUNS * 300, y = top + r / ANVIL_PLOT_LEGEND_RUNS * ANVIL_PLOT_LEGEND_ROW;
        c->rect(c->ctx, x, y - 5, 18, 10, color, color, "swatch");
        c->text(c->ctx, x + 24, y, runs[r]->name, 13, -1, INK, "legend");
    }
    c->text(c->ctx, ANVIL_PLOT_WIDTH - 20, top, "solid: train, dashed: validation", 12, 1, INK, "key");
}

int anvil_plot_draw(const anvil_plot_run *const *runs, int nruns, const anvil_canvas *c) {
    if (nruns < 1 || nruns > MAX_RUNS) return anvil_fail("plot: %d runs (1 to %d can be drawn)", nruns, MAX_RUNS);
    const char *names[MAX_LOGS * MAX_RUNS];
    int nlog = log_names(runs, nruns, names);
    int height = anvil_plot_height(runs, nruns);
    c->rect(c->ctx, 0, 0, ANVIL_PLOT_WIDTH, height, 0xFFFFFF, 0xFFFFFF, "background");
    draw_legend(c, runs, nruns);
    curve *cv = malloc(sizeof *cv * 2 * (size_t)nruns);
    if (!cv) return anvil_fail("plot: out of memory");
    int rc = 0;
    for (int p = 0; p < P_FIXED + nlog && !rc; p++) {
        int ncv = 0;
        for (int r = 0; r < nruns; r++) {
            const anvil_plot_run *run = runs[r];
            double xs = p == P_LOSS_TOKENS ? run->tokens_per_step : 1;
            double last = fmax(run->loss.n ? fabs(run->loss.x[run->loss.n - 1]) : 0,
                               run->val.n ? fabs(run->val.x[run->val.n - 1]) : 0);
            /* A run without throughput has no token axis; neither has one that would leave the drawable range. */
            if (p == P_LOSS_TOKENS && !(xs > 0 && last * xs <= VALUE_MAX)) continue;
            switch (p) {
            case P_LOSS_STEP:
            case P_LOSS_TOKENS:
                cv[ncv++] = (curve){&run->loss, xs, r, 0, "loss"};
                cv[ncv++] = (curve){&run->val, xs, r, 1, "val_loss"};
                break;
            case P_LR: cv[ncv++] = (curve){&run->lr, 1, r, 0, "lr"}; break;
            case P_NORM: cv[ncv++] = (curve){&run->norm, 1, r, 0, "grad_norm"}; break;
            case P_TPS: cv[ncv++] = (curve){&run->tps, 1, r, 0, "tokens_per_s"}; break;
            default:
                for (int i = 0; i < run->nlogs; i++)
                    if (!strcmp(run->logs[i].name, names[p - P_FIXED]))
                        cv[ncv++] = (curve){&run->logs[i].s, 1, r, 0, "log"};
            }
        }
        char title[96];
        snprintf(title, sizeof title, "%s", p < P_FIXED ? panel_titles[p] : names[p - P_FIXED]);
        rc = draw_panel(c, p % 2 * (ANVIL_PLOT_WIDTH / 2), legend_height(nruns) + p / 2 * ANVIL_PLOT_PANEL_H, title,
                        p == P_LOSS_TOKENS ? "tokens" : "step", p < P_FIXED ? panel_units[p] : "as logged", cv, ncv);
    }
    free(cv);
    return rc;
}

typedef struct {
    const anvil_plot_run *const *runs;
    int nruns;
} runs_arg;

static int draw_runs(const void *arg, const anvil_canvas *c) {
    const runs_arg *r = arg;
    return anvil_plot_draw(r->runs, r->nruns, c);
}

int anvil_plot_svg(const anvil_plot_run *const *runs, int nruns, char **svg, size_t *len) {
    runs_arg r = {runs, nruns};
    anvil_figure fig = {ANVIL_PLOT_WIDTH, anvil_plot_height(runs, nruns), draw_runs, &r};
    return anvil_figure_svg(&fig, svg, len);
}

int anvil_plot_write(const char *path, const anvil_plot_run *const *runs, int nruns) {
    runs_arg r = {runs, nruns};
    anvil_figure fig = {ANVIL_PLOT_WIDTH, anvil_plot_height(runs, nruns), draw_runs, &r};
    return anvil_figure_write(path, &fig);
}
