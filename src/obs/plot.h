/* Figures of training runs, from their metrics.jsonl (`anvil plot`): train and validation loss
 * against steps and tokens, learning rate, gradient norm, throughput and each log metric, one
 * panel each, every run overlaid in its own colour. One drawing routine paints the figure onto a
 * canvas of four operations; the SVG backend writes them as text, the PNG one through cairo, so
 * both files show the same figure. Any figure, a size and a routine that paints it (anvil_figure),
 * is written through the same two backends: obs/plot_timeline.h's is the other. */
#ifndef ANVIL_OBS_PLOT_H
#define ANVIL_OBS_PLOT_H

#include <stddef.h>
#include <stdint.h>

/* The figure's width; its height is the legend's (LEGEND_PAD, plus LEGEND_ROW per LEGEND_RUNS
 * runs) plus PANEL_H per row of two panels. */
#define ANVIL_PLOT_WIDTH 1200
#define ANVIL_PLOT_LEGEND_PAD 12
#define ANVIL_PLOT_LEGEND_ROW 28
#define ANVIL_PLOT_LEGEND_RUNS 3
#define ANVIL_PLOT_PANEL_H 320
/* A panel's plot area spans its width less these margins (the tick labels, the title). */
#define ANVIL_PLOT_MARGIN_L 80
#define ANVIL_PLOT_MARGIN_R 20
#define ANVIL_PLOT_MARGIN_T 30
#define ANVIL_PLOT_MARGIN_B 40

/* The series of one run's metrics.jsonl. */
typedef struct anvil_plot_run anvil_plot_run;

/* Reads dir/metrics.jsonl; the run is named for the folder. NULL after anvil_fail, with a message
 * naming the file and, for a bad record, its line. */
anvil_plot_run *anvil_plot_read(const char *dir);
/* Reads len bytes of metrics.jsonl text (no terminator needed); file names it in messages. */
anvil_plot_run *anvil_plot_read_text(const char *name, const char *file, const char *text, size_t len);
void anvil_plot_run_free(anvil_plot_run *run);
/* The values left out for being null, NaN or infinite (or beyond ±1e300, which no axis spans). */
long anvil_plot_run_skipped(const anvil_plot_run *run);

/* A rect's fill that leaves the inside as it is. */
#define ANVIL_PLOT_NO_FILL 0xFFFFFFFFu

/* What the figure is drawn on: coordinates in pixels from the top left; colours 0xRRGGBB. cls
 * names the element's role (the SVG writes it as its class; cairo has no use for it). */
typedef struct {
    void *ctx;
    void (*rect)(void *ctx, double x, double y, double w, double h, uint32_t fill, uint32_t stroke,
                 const char *cls);
    void (*line)(void *ctx, double x0, double y0, double x1, double y1, uint32_t color, const char *cls);
    /* n points, x and y interleaved; dashed for validation curves. */
    void (*polyline)(void *ctx, const double *xy, size_t n, uint32_t color, int dashed, const char *cls);
    /* anchor: -1 text starts at x, 0 centred on it, 1 ends at it; y is the middle of the text. */
    void (*text)(void *ctx, double x, double y, const char *s, double size, int anchor, uint32_t color,
                 const char *cls);
} anvil_canvas;

/* A figure: its size in pixels and what paints it. draw gets arg and a canvas of width by height; it
 * returns -1 after anvil_fail. */
typedef struct {
    int width, height;
    int (*draw)(const void *arg, const anvil_canvas *c);
    const void *arg;
} anvil_figure;

/* The figure as SVG text, malloc'd into *svg (*len bytes, NUL-terminated). */
int anvil_figure_svg(const anvil_figure *fig, char **svg, size_t *len);
/* Draws the figure into path, as SVG or PNG by its ending (.svg, .png), written atomically. */
int anvil_figure_write(const char *path, const anvil_figure *fig);

/* The figure's height for these runs. */
int anvil_plot_height(const anvil_plot_run *const *runs, int nruns);
/* Paints the figure of nruns runs, ANVIL_PLOT_WIDTH by anvil_plot_height, onto c. */
int anvil_plot_draw(const anvil_plot_run *const *runs, int nruns, const anvil_canvas *c);
/* The runs' figure through anvil_figure_svg and anvil_figure_write. */
int anvil_plot_svg(const anvil_plot_run *const *runs, int nruns, char **svg, size_t *len);
int anvil_plot_write(const char *path, const anvil_plot_run *const *runs, int nruns);

#endif
