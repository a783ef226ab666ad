/* What the figures of src/obs share: round axes and their ticks, curves thinned to the pixel
 * columns they cover, labels made safe for SVG and cairo. Not for use outside src/obs. */
#ifndef ANVIL_OBS_PLOT_INTERNAL_H
#define ANVIL_OBS_PLOT_INTERNAL_H

#include <stddef.h>

#include "obs/plot.h"

#define ANVIL_PLOT_INK 0x222222
#define ANVIL_PLOT_GRID 0xDDDDDD

typedef struct {
    double lo, hi, step;
} anvil_plot_axis;

/* Ticks at multiples of 1, 2 or 5 times a power of ten, about `want` of them over [lo, hi]; with
 * pad, the range widens to whole ticks. A range of one value is widened around it. */
anvil_plot_axis anvil_plot_nice_axis(double lo, double hi, int want, int pad);

typedef struct {
    double x, y, w, h; /* the plot area */
    anvil_plot_axis ax, ay;
} anvil_plot_frame;

/* The pixel coordinates of a value on the frame's x and y axes. */
double anvil_plot_px(const anvil_plot_frame *f, double x);
double anvil_plot_py(const anvil_plot_frame *f, double y);

/* One axis's grid lines, ticks and tick labels (below the frame for x, left of it for y). */
void anvil_plot_ticks(const anvil_canvas *c, const anvil_plot_frame *f, int vertical);
/* Both axes' ticks, and the frame around the plot area. */
void anvil_plot_draw_axes(const anvil_canvas *c, const anvil_plot_frame *f);

/* The points (x[i] * xscale, y[i]) in pixels into xy, x and y interleaved; returns how many. A curve
 * of more than four points per pixel column of the plot area keeps, per column, its first and last
 * points and those of its least and greatest value: xy must hold 2 * min(n, 4 * (size_t)f->w). */
size_t anvil_plot_curve_points(const anvil_plot_frame *f, const double *x, const double *y, size_t n, double xscale,
                               double *xy);

/* The n bytes at s as a label into out (n + 1 bytes): valid UTF-8 without control characters (SVG
 * and cairo take nothing else), anything else shown as '?'. */
void anvil_plot_sanitize(char *out, const char *s, size_t n);

#endif
