/* A timeline figure: where a job's wall time went, on one time axis in seconds from 0 to t_end.
 *
 * The top panel has a band per row (an attempt, say), each span of time painted in its category's
 * colour (productive, restart, ...), and marks (faults) as vertical lines labelled above the bands;
 * the title and a legend of the categories, with their seconds and shares of t_end, sit above it.
 * The panel below draws a curve (the training loss) against the same axis, each row's start and
 * end marked on it as dashed lines. Nothing here knows of jobs: the caller (anvil plot --goodput)
 * fills the input; obs/plot.h's writers make it an SVG or a PNG. */
#ifndef ANVIL_OBS_PLOT_TIMELINE_H
#define ANVIL_OBS_PLOT_TIMELINE_H

#include <stddef.h>
#include <stdint.h>

#include "obs/plot.h"

#define ANVIL_TIMELINE_WIDTH 1200

typedef struct {
    const char *name;
    uint32_t color; /* 0xRRGGBB */
    double total;   /* seconds, in the legend */
} anvil_timeline_category;

typedef struct {
    const char *label; /* left of its band */
    /* Where the row began and ended, marked on the curve's panel; NAN for a row that has no
     * bounds of its own (the time outside every attempt). */
    double t0, t1;
} anvil_timeline_row;

typedef struct {
    double t0, t1;
    int row, category; /* indexes into rows and categories */
} anvil_timeline_span;

typedef struct {
    double t;
    int row; /* the band it hit, marked on it; -1: none */
    const char *label;
} anvil_timeline_mark;

typedef struct {
    const char *title;
    double t_end; /* the axis spans [0, t_end]; times past either end are drawn at it */
    const anvil_timeline_row *rows;
    int nrows;
    const anvil_timeline_category *categories;
    int ncategories;
    const anvil_timeline_span *spans;
    size_t nspans;
    const anvil_timeline_mark *marks;
    size_t nmarks;
    /* The curve's points (t, y), in order of t; those outside [0, t_end] are left out, and the line
     * breaks where a row starts between two points. */
    const double *curve_t, *curve_y;
    size_t ncurve;
    const char *curve_title, *curve_unit;
} anvil_timeline;

/* The figure's height: bands at most a few hundred pixels tall however many rows there are. */
int anvil_timeline_height(const anvil_timeline *tl);
/* Paints the timeline, ANVIL_TIMELINE_WIDTH by anvil_timeline_height, onto c; -1 after anvil_fail for
 * an input that breaks the rules above (a span's row or category out of range, a time that is not
 * finite). Labels are drawn as valid UTF-8 without control characters, whatever they hold. */
int anvil_timeline_draw(const anvil_timeline *tl, const anvil_canvas *c);
/* The timeline as a figure for anvil_figure_svg and anvil_figure_write; it draws tl, which must
 * outlive it. */
anvil_figure anvil_timeline_figure(const anvil_timeline *tl);

#endif
