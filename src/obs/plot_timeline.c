/* The timeline figure (obs/plot_timeline.h). Every vertical position comes from one layout, computed
 * the same way for the height and for the drawing, so the two always agree. */
#include "obs/plot_timeline.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "obs/plot_internal.h"

#define INK ANVIL_PLOT_INK
#define W ANVIL_TIMELINE_WIDTH
#define MARGIN_L 110 /* the rows' labels */
#define MARGIN_R 30
#define TITLE_H 36
#define LEGEND_COLS 4
#define LEGEND_ROW 24
/* Two levels of mark labels, so that two faults close in time both keep theirs. */
#define LABEL_LEVELS 2
#define LABEL_LEVEL_H 16
#define STRIP_H (LABEL_LEVELS * LABEL_LEVEL_H + 8)
#define ROW_PITCH 32.0
/* Past 15 rows the bands get thinner instead of the figure taller. */
#define BANDS_MAX_H 480.0
#define AXIS_H 48     /* tick labels and the axis' name under a panel */
#define CURVE_TOP 40  /* the curve panel's title and unit */
#define CURVE_H 240
#define MAX_CATEGORIES 32
/* No y axis spans more: its ticks and padding stay finite. */
#define VALUE_MAX 1e300
/* Text is cut to this many bytes: a label longer than the figure says nothing more. */
#define LABEL_MAX 160

#define MARK_COLOR 0x000000
#define BOUNDARY_COLOR 0x888888
#define BAND_COLOR 0xF0F0F0
#define CURVE_COLOR 0x332288

typedef struct {
    double legend_y;
    int legend_rows;
    double strip_y;
    anvil_plot_frame bands, curve;
    double pitch; /* one row's share of the bands' height */
    double height;
} layout;

static layout layout_of(const anvil_timeline *tl) {
    layout L = {.legend_y = TITLE_H};
    L.legend_rows = (tl->ncategories + LEGEND_COLS - 1) / LEGEND_COLS;
    L.strip_y = L.legend_y + L.legend_rows * LEGEND_ROW + 8;
    double bands_h = fmin(BANDS_MAX_H, fmax(1, tl->nrows) * ROW_PITCH);
    L.pitch = bands_h / fmax(1, tl->nrows);
    L.bands = (anvil_plot_frame){.x = MARGIN_L, .y = L.strip_y + STRIP_H, .w = W - MARGIN_L - MARGIN_R, .h = bands_h};
    L.curve = L.bands;
    L.curve.y = L.bands.y + bands_h + AXIS_H + CURVE_TOP;
    L.curve.h = CURVE_H;
    L.height = L.curve.y + CURVE_H + AXIS_H;
    return L;
}

int anvil_timeline_height(const anvil_timeline *tl) { return (int)ceil(layout_of(tl).height); }

/* s drawn as a label: cut to LABEL_MAX bytes, made valid UTF-8 without control characters. */
static void label(const anvil_canvas *c, double x, double y, const char *s, double size, int anchor, uint32_t color,
                  const char *cls) {
    char buf[LABEL_MAX + 1];
    size_t n = strlen(s);
    anvil_plot_sanitize(buf, s, n < LABEL_MAX ? n : LABEL_MAX);
    c->text(c->ctx, x, y, buf, size, anchor, color, cls);
}

/* A label's width in pixels, roughly: the SVG is measured by whoever renders it, so this only keeps
 * labels from running into each other. */
static double text_width(const char *s, double size) {
    size_t chars = 0;
    for (size_t i = 0; s[i] && i < LABEL_MAX; i++) chars += ((unsigned char)s[i] & 0xC0) != 0x80;
    return (double)chars * size * 0.6;
}

static int check_input(const anvil_timeline *tl) {
    if (!isfinite(tl->t_end)) return anvil_fail("timeline: t_end is not finite");
    if (tl->nrows < 0 || tl->ncategories < 0 || tl->ncategories > MAX_CATEGORIES)
        return anvil_fail("timeline: %d rows, %d categories (0 to %d)", tl->nrows, tl->ncategories, MAX_CATEGORIES);
    for (size_t i = 0; i < tl->nspans; i++) {
        const anvil_timeline_span *s = &tl->spans[i];
        if (s->row < 0 || s->row >= tl->nrows || s->category < 0 || s->category >= tl->ncategories ||
            !isfinite(s->t0) || !isfinite(s->t1))
            return anvil_fail("timeline: span %zu: row %d, category %d, [%g, %g]", i, s->row, s->category, s->t0,
                              s->t1);
    }
    for (size_t i = 0; i < tl->nmarks; i++)
        if (!isfinite(tl->marks[i].t) || tl->marks[i].row < -1 || tl->marks[i].row >= tl->nrows)
            return anvil_fail("timeline: mark %zu: row %d at %g", i, tl->marks[i].row, tl->marks[i].t);
    for (size_t i = 0; i < tl->ncurve; i++)
        if (!isfinite(tl->curve_t[i]) || !(fabs(tl->curve_y[i]) <= VALUE_MAX))
            return anvil_fail("timeline: curve point %zu is not finite, or beyond ±%g", i, VALUE_MAX);
    for (int i = 0; i < tl->ncategories; i++)
        if (!isfinite(tl->categories[i].total)) return anvil_fail("timeline: category %d's total is not finite", i);
    return 0;
}

/* A time's x on the shared axis, held to the axis' ends. */
static double tx(const layout *L, double t) {
    return anvil_plot_px(&L->bands, fmin(L->bands.ax.hi, fmax(L->bands.ax.lo, t)));
}

static void draw_legend(const anvil_canvas *c, const anvil_timeline *tl, const layout *L) {
    double col_w = (W - 40) / (double)LEGEND_COLS;
    for (int i = 0; i < tl->ncategories; i++) {
        const anvil_timeline_category *k = &tl->categories[i];
        double x = 20 + i % LEGEND_COLS * col_w, y = L->legend_y + (i / LEGEND_COLS + 0.5) * LEGEND_ROW;
        char cls[32], text[LABEL_MAX + 48], name[LABEL_MAX + 1];
        size_t n = strlen(k->name);
        anvil_plot_sanitize(name, k->name, n < 40 ? n : 40);
        snprintf(cls, sizeof cls, "swatch cat%d", i);
        c->rect(c->ctx, x, y - 6, 18, 12, k->color, k->color, cls);
        snprintf(text, sizeof text, "%s %.1f s (%.1f%%)", name, k->total,
                 tl->t_end > 0 ? 100 * k->total / tl->t_end : 0.0);
        c->text(c->ctx, x + 24, y, text, 12, -1, INK, "legend");
    }
}

/* The spans of one row, painted a pixel column at a time: each column takes the colour of the
 * category that had most of its time, and a run of columns of one colour is one rectangle. A
 * second is a tenth of a pixel in a long job, and a stall of microseconds after each step (a span
 * each) would otherwise cover the steps' colour or vanish with them; so a column shows what its
 * time mostly went to, and a long job's thousands of spans make a few rectangles. */
typedef struct {
    const anvil_canvas *c;
    const anvil_timeline *tl;
    const layout *L;
    int row;
    int col;                      /* the column being filled; -1: none */
    double share[MAX_CATEGORIES]; /* its pixels (time) per category */
    int run_cat, run_first, run_last; /* the columns decided but not drawn; run_cat -1: none */
} painter;

static void draw_run(painter *p) {
    if (p->run_cat < 0) return;
    char cls[48];
    snprintf(cls, sizeof cls, "span row%d cat%d", p->row, p->run_cat);
    uint32_t color = p->tl->categories[p->run_cat].color;
    const anvil_plot_frame *f = &p->L->bands;
    double x = f->x + p->run_first, w = fmin(p->run_last + 1, f->w) - p->run_first;
    p->c->rect(p->c->ctx, x, f->y + (p->row + 0.125) * p->L->pitch, w, p->L->pitch * 0.75, color, color, cls);
    p->run_cat = -1;
}

/* Columns first to last all of category cat (-1: no time in them). */
static void decide(painter *p, int first, int last, int cat) {
    if (cat >= 0 && cat == p->run_cat && first == p->run_last + 1) {
        p->run_last = last;
        return;
    }
    draw_run(p);
    if (cat >= 0) p->run_cat = cat, p->run_first = first, p->run_last = last;
}

/* Decides the column being filled by the category with most of its time. */
static void close_column(painter *p) {
    if (p->col < 0) return;
    int best = -1;
    for (int k = 0; k < p->tl->ncategories; k++)
        if (p->share[k] > 0 && (best < 0 || p->share[k] > p->share[best])) best = k;
    decide(p, p->col, p->col, best);
    memset(p->share, 0, sizeof p->share);
    p->col = -1;
}

/* Adds [u0, u1) pixels from the frame's left edge to category cat. A span that starts before the
 * column being filled (out of order) is cut to start there. */
static void add_span(painter *p, double u0, double u1, int cat) {
    if (p->col >= 0) u0 = fmax(u0, p->col);
    while (u0 < u1) {
        int c = (int)floor(u0);
        if (c != p->col) {
            close_column(p);
            p->col = c;
        }
        double end = fmin(u1, c + 1.0);
        p->share[cat] += end - u0;
        u0 = end;
        int whole = (int)floor(u1) - (c + 1); /* columns after c that the span fills */
        if (u0 == c + 1.0 && whole > 0) {
            close_column(p);
            decide(p, c + 1, c + whole, cat);
            u0 = c + 1.0 + whole;
        }
    }
}

static void finish_row(painter *p) {
    close_column(p);
    draw_run(p);
}

/* The spans, in order; each row's are expected together, in time order (a row met again later,
 * the time outside every attempt at the end, starts anew). */
static void draw_spans(const anvil_canvas *c, const anvil_timeline *tl, const layout *L) {
    painter p = {.c = c, .tl = tl, .L = L, .row = -1, .col = -1, .run_cat = -1};
    const anvil_plot_frame *f = &L->bands;
    for (size_t i = 0; i < tl->nspans; i++) {
        const anvil_timeline_span *s = &tl->spans[i];
        if (s->row != p.row) {
            finish_row(&p);
            p.row = s->row;
        }
        add_span(&p, tx(L, fmin(s->t0, s->t1)) - f->x, tx(L, fmax(s->t0, s->t1)) - f->x, s->category);
    }
    finish_row(&p);
}

/* The bands' panel: the time axis' grid and ticks, a band and a label per row, the spans on them. */
static void draw_bands(const anvil_canvas *c, const anvil_timeline *tl, const layout *L) {
    const anvil_plot_frame *f = &L->bands;
    anvil_plot_ticks(c, f, 0);
    /* Labels at least 12 px apart: with many rows, every k-th. */
    int every = L->pitch >= 12 ? 1 : (int)ceil(12 / L->pitch);
    for (int r = 0; r < tl->nrows; r++) {
        double y = f->y + r * L->pitch;
        char cls[32];
        snprintf(cls, sizeof cls, "band row%d", r);
        c->rect(c->ctx, f->x, y + L->pitch * 0.125, f->w, L->pitch * 0.75, BAND_COLOR, BAND_COLOR, cls);
        if (r % every == 0) label(c, f->x - 8, y + L->pitch / 2, tl->rows[r].label, 12, 1, INK, "row");
    }
    draw_spans(c, tl, L);
    c->text(c->ctx, f->x + f->w, f->y + f->h + 30, "seconds since submission", 11, 1, INK, "xlabel");
}

/* The marks: a line down through the bands, a dot on the band hit, the label above on the first
 * level where it runs into no other (none where both are taken; the line still shows). */
static void draw_marks(const anvil_canvas *c, const anvil_timeline *tl, const layout *L) {
    double taken[LABEL_LEVELS];
    for (int k = 0; k < LABEL_LEVELS; k++) taken[k] = -INFINITY;
    for (size_t i = 0; i < tl->nmarks; i++) {
        const anvil_timeline_mark *m = &tl->marks[i];
        double x = tx(L, m->t), w = text_width(m->label, 11);
        c->line(c->ctx, x, L->strip_y + 4, x, L->bands.y + L->bands.h, MARK_COLOR, "mark");
        double hit = L->bands.y + (m->row + 0.5) * L->pitch;
        if (m->row >= 0) c->rect(c->ctx, x - 3, hit - 3, 6, 6, MARK_COLOR, MARK_COLOR, "mark-hit");
        /* Right of the line, unless that would run off the figure. */
        int left = x + 4 + w > W - 4;
        double start = left ? x - 4 - w : x + 4;
        for (int k = 0; k < LABEL_LEVELS; k++) {
            if (start < taken[k] + 8) continue;
            label(c, left ? x - 4 : x + 4, L->strip_y + 4 + (k + 0.5) * LABEL_LEVEL_H, m->label, 11, left ? 1 : -1,
                  MARK_COLOR, "mark-label");
            taken[k] = start + w;
            break;
        }
    }
}

/* A dashed vertical line through the curve's panel at t. */
static void boundary(const anvil_canvas *c, const layout *L, double t, uint32_t color, int dashed, const char *cls) {
    double x = tx(L, t), xy[4] = {x, L->curve.y, x, L->curve.y + L->curve.h};
    c->polyline(c->ctx, xy, 2, color, dashed, cls);
}

/* The rows' starts and ends and the marks, on the curve's panel, with each row's label at its start
 * where there is room for it. */
static void draw_boundaries(const anvil_canvas *c, const anvil_timeline *tl, const layout *L) {
    double taken = -INFINITY;
    for (int r = 0; r < tl->nrows; r++) {
        const anvil_timeline_row *row = &tl->rows[r];
        if (!isfinite(row->t0) || !isfinite(row->t1)) continue;
        boundary(c, L, row->t0, BOUNDARY_COLOR, 1, "boundary");
        boundary(c, L, row->t1, BOUNDARY_COLOR, 1, "boundary");
        double x = tx(L, row->t0) + 3, w = text_width(row->label, 10);
        if (x >= taken + 6 && x + w <= L->curve.x + L->curve.w) {
            label(c, x, L->curve.y + 9, row->label, 10, -1, BOUNDARY_COLOR, "boundary-label");
            taken = x + w;
        }
    }
    for (size_t i = 0; i < tl->nmarks; i++) boundary(c, L, tl->marks[i].t, MARK_COLOR, 0, "mark");
}

static int by_value(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Whether a row starts in (lo, hi]; starts sorted. */
static int starts_between(const double *starts, size_t n, double lo, double hi) {
    size_t a = 0, b = n;
    while (a < b) {
        size_t m = a + (b - a) / 2;
        if (starts[m] > lo) b = m;
        else a = m + 1;
    }
    return a < n && starts[a] <= hi;
}

/* The curve's n points as one polyline per row they fall in: an attempt's steps are not joined to
 * those of the one before, across the time that went to neither. */
static int draw_segments(const anvil_canvas *c, const anvil_timeline *tl, const anvil_plot_frame *f, const double *t,
                         const double *y, size_t n, double *xy) {
    double *starts = malloc(sizeof *starts * ((size_t)tl->nrows + 1));
    if (!starts) return anvil_fail("timeline: out of memory");
    size_t ns = 0;
    for (int r = 0; r < tl->nrows; r++)
        if (isfinite(tl->rows[r].t0)) starts[ns++] = tl->rows[r].t0;
    qsort(starts, ns, sizeof *starts, by_value);
    for (size_t a = 0, i = 1; i <= n; i++) {
        if (i < n && !starts_between(starts, ns, t[i - 1], t[i])) continue;
        c->polyline(c->ctx, xy, anvil_plot_curve_points(f, t + a, y + a, i - a, 1, xy), CURVE_COLOR, 0, "curve");
        a = i;
    }
    free(starts);
    return 0;
}

/* The curve's panel: its points inside the time axis, on a y axis of round ticks. */
static int draw_curve(const anvil_canvas *c, const anvil_timeline *tl, const layout *L) {
    anvil_plot_frame f = L->curve;
    label(c, W / 2.0, f.y - CURVE_TOP + 14, tl->curve_title ? tl->curve_title : "", 14, 0, INK, "title");
    label(c, f.x, f.y - 8, tl->curve_unit ? tl->curve_unit : "", 11, -1, INK, "ylabel");
    c->text(c->ctx, f.x + f.w, f.y + f.h + 30, "seconds since submission", 11, 1, INK, "xlabel");
    double *t = malloc(sizeof *t * (tl->ncurve + 1)), *y = malloc(sizeof *y * (tl->ncurve + 1));
    double *xy = malloc(sizeof *xy * 2 * (tl->ncurve + 1));
    if (!t || !y || !xy) {
        free(t), free(y), free(xy);
        return anvil_fail("timeline: out of memory");
    }
    size_t n = 0;
    double lo = INFINITY, hi = -INFINITY;
    for (size_t i = 0; i < tl->ncurve; i++) {
        if (tl->curve_t[i] < f.ax.lo || tl->curve_t[i] > f.ax.hi) continue;
        t[n] = tl->curve_t[i];
        y[n++] = tl->curve_y[i];
        lo = fmin(lo, tl->curve_y[i]), hi = fmax(hi, tl->curve_y[i]);
    }
    int rc = 0;
    if (n) {
        f.ay = anvil_plot_nice_axis(lo, hi, 5, 1);
        anvil_plot_draw_axes(c, &f);
        draw_boundaries(c, tl, L);
        rc = draw_segments(c, tl, &f, t, y, n, xy);
    } else {
        anvil_plot_ticks(c, &f, 0);
        c->rect(c->ctx, f.x, f.y, f.w, f.h, ANVIL_PLOT_NO_FILL, INK, "frame");
        draw_boundaries(c, tl, L);
        c->text(c->ctx, f.x + f.w / 2, f.y + f.h / 2, "no data", 12, 0, INK, "nodata");
    }
    free(t), free(y), free(xy);
    return rc;
}

int anvil_timeline_draw(const anvil_timeline *tl, const anvil_canvas *c) {
    if (check_input(tl)) return -1;
    layout L = layout_of(tl);
    /* Whatever the numbers, the axis spans a positive range; the values were checked finite. */
    L.bands.ax = anvil_plot_nice_axis(0, tl->t_end > 1e-6 ? fmin(tl->t_end, VALUE_MAX) : 1, 8, 0);
    L.curve.ax = L.bands.ax;
    c->rect(c->ctx, 0, 0, W, L.height, 0xFFFFFF, 0xFFFFFF, "background");
    label(c, W / 2.0, TITLE_H / 2.0, tl->title ? tl->title : "", 16, 0, INK, "title");
    draw_legend(c, tl, &L);
    draw_bands(c, tl, &L);
    draw_marks(c, tl, &L);
    return draw_curve(c, tl, &L);
}

static int draw_figure(const void *arg, const anvil_canvas *c) { return anvil_timeline_draw(arg, c); }

anvil_figure anvil_timeline_figure(const anvil_timeline *tl) {
    return (anvil_figure){ANVIL_TIMELINE_WIDTH, anvil_timeline_height(tl), draw_figure, tl};
}
