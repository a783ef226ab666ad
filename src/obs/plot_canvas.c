/* The two canvases any figure (obs/plot.h) is written through: SVG text, and cairo's image surface for PNG. */
#include <cairo.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/fsutil.h"
#include "obs/plot.h"

/* ---- SVG ---- */

static void svg_color(FILE *f, const char *attr, uint32_t c) {
    if (c == ANVIL_PLOT_NO_FILL) fprintf(f, " %s=\"none\"", attr);
    else fprintf(f, " %s=\"#%06X\"", attr, (unsigned)c);
}

static void svg_rect(void *ctx, double x, double y, double w, double h, uint32_t fill, uint32_t stroke,
                     const char *cls) {
    FILE *f = ctx;
    fprintf(f, "<rect class=\"%s\" x=\"%.2f\" y=\"%.2f\" width=\"%.2f\" height=\"%.2f\"", cls, x, y, w, h);
    svg_color(f, "fill", fill);
    svg_color(f, "stroke", stroke);
    fputs("/>\n", f);
}

static void svg_line(void *ctx, double x0, double y0, double x1, double y1, uint32_t color, const char *cls) {
    FILE *f = ctx;
    fprintf(f, "<line class=\"%s\" x1=\"%.2f\" y1=\"%.2f\" x2=\"%.2f\" y2=\"%.2f\"", cls, x0, y0, x1, y1);
    svg_color(f, "stroke", color);
    fputs("/>\n", f);
}

static void svg_polyline(void *ctx, const double *xy, size_t n, uint32_t color, int dashed, const char *cls) {
    FILE *f = ctx;
    fprintf(f, "<polyline class=\"%s\" fill=\"none\" stroke-width=\"1.5\"%s", cls,
            dashed ? " stroke-dasharray=\"6 4\"" : "");
    svg_color(f, "stroke", color);
    fputs(" points=\"", f);
    for (size_t i = 0; i < n; i++) fprintf(f, "%s%.2f,%.2f", i ? " " : "", xy[2 * i], xy[2 * i + 1]);
    fputs("\"/>\n", f);
}

static void svg_text(void *ctx, double x, double y, const char *s, double size, int anchor, uint32_t color,
                     const char *cls) {
    FILE *f = ctx;
    fprintf(f, "<text class=\"%s\" x=\"%.2f\" y=\"%.2f\" font-size=\"%g\" text-anchor=\"%s\" dominant-baseline=\"central\"",
            cls, x, y, size, anchor < 0 ? "start" : anchor > 0 ? "end" : "middle");
    svg_color(f, "fill", color);
    fputc('>', f);
    for (; *s; s++) {
        switch (*s) {
        case '&': fputs("&amp;", f); break;
        case '<': fputs("&lt;", f); break;
        case '>': fputs("&gt;", f); break;
        default: fputc(*s, f);
        }
    }
    fputs("</text>\n", f);
}

int anvil_figure_svg(const anvil_figure *fig, char **svg, size_t *len) {
    *svg = NULL;
    FILE *f = open_memstream(svg, len);
    if (!f) return anvil_fail("plot: out of memory");
    fprintf(f,
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" "
            "font-family=\"sans-serif\">\n",
            fig->width, fig->height, fig->width, fig->height);
    anvil_canvas c = {f, svg_rect, svg_line, svg_polyline, svg_text};
    int rc = fig->draw(fig->arg, &c);
    fputs("</svg>\n", f);
    if (fclose(f) && !rc) rc = anvil_fail("plot: out of memory");
    if (rc) {
        free(*svg);
        *svg = NULL;
    }
    return rc;
}

static int write_svg(const char *path, const anvil_figure *fig) {
    char *buf;
    size_t len;
    if (anvil_figure_svg(fig, &buf, &len)) return -1;
    int rc = anvil_write_file_atomic(path, buf, len);
    free(buf);
    return rc;
}

/* ---- PNG through cairo ---- */

static void cairo_color(cairo_t *cr, uint32_t c) {
    cairo_set_source_rgb(cr, (c >> 16 & 0xFF) / 255.0, (c >> 8 & 0xFF) / 255.0, (c & 0xFF) / 255.0);
}

static void cr_rect(void *ctx, double x, double y, double w, double h, uint32_t fill, uint32_t stroke,
                    const char *cls) {
    (void)cls;
    cairo_t *cr = ctx;
    cairo_rectangle(cr, x, y, w, h);
    if (fill != ANVIL_PLOT_NO_FILL) {
        cairo_color(cr, fill);
        cairo_fill_preserve(cr);
    }
    cairo_color(cr, stroke);
    cairo_set_line_width(cr, 1);
    cairo_stroke(cr);
}

static void cr_line(void *ctx, double x0, double y0, double x1, double y1, uint32_t color, const char *cls) {
    (void)cls;
    cairo_t *cr = ctx;
    cairo_move_to(cr, x0, y0);
    cairo_line_to(cr, x1, y1);
    cairo_color(cr, color);
    cairo_set_line_width(cr, 1);
    cairo_stroke(cr);
}

static void cr_polyline(void *ctx, const double *xy, size_t n, uint32_t color, int dashed, const char *cls) {
    (void)cls;
    cairo_t *cr = ctx;
    static const double dash[] = {6, 4};
    for (size_t i = 0; i < n; i++) cairo_line_to(cr, xy[2 * i], xy[2 * i + 1]);
    cairo_color(cr, color);
    cairo_set_line_width(cr, 1.5);
    cairo_set_dash(cr, dash, dashed ? 2 : 0, 0);
    cairo_stroke(cr);
    cairo_set_dash(cr, NULL, 0, 0);
}

static void cr_text(void *ctx, double x, double y, const char *s, double size, int anchor, uint32_t color,
                    const char *cls) {
    cairo_t *cr = ctx;
    cairo_select_font_face(cr, "sans-serif", CAIRO_FONT_SLANT_NORMAL,
                           strcmp(cls, "title") ? CAIRO_FONT_WEIGHT_NORMAL : CAIRO_FONT_WEIGHT_BOLD);
    cairo_set_font_size(cr, size);
    cairo_text_extents_t te;
    cairo_font_extents_t fe;
    cairo_text_extents(cr, s, &te);
    cairo_font_extents(cr, &fe);
    double start = anchor < 0 ? x : anchor > 0 ? x - te.x_advance : x - te.x_advance / 2;
    cairo_move_to(cr, start, y + (fe.ascent - fe.descent) / 2);
    cairo_color(cr, color);
    cairo_show_text(cr, s);
    cairo_new_path(cr);
}

typedef struct {
    char *buf;
    size_t len, cap;
} png_bytes;

static cairo_status_t png_append(void *closure, const unsigned char *data, unsigned int n) {
    png_bytes *b = closure;
    if (b->len + n > b->cap) {
        size_t cap = (b->len + n) * 2;
        char *nb = realloc(b->buf, cap);
        if (!nb) return CAIRO_STATUS_NO_MEMORY;
        b->buf = nb;
        b->cap = cap;
    }
    memcpy(b->buf + b->len, data, n);
    b->len += n;
    return CAIRO_STATUS_SUCCESS;
}

static int write_png(const char *path, const anvil_figure *fig) {
    cairo_surface_t *surface = cairo_image_surface_create(CAIRO_FORMAT_RGB24, fig->width, fig->height);
    cairo_t *cr = cairo_create(surface);
    anvil_canvas c = {cr, cr_rect, cr_line, cr_polyline, cr_text};
    int rc = fig->draw(fig->arg, &c);
    if (!rc && cairo_status(cr) != CAIRO_STATUS_SUCCESS)
        rc = anvil_fail("%s: cairo: %s", path, cairo_status_to_string(cairo_status(cr)));
    cairo_destroy(cr);
    png_bytes png = {0};
    if (!rc) {
        cairo_status_t st = cairo_surface_write_to_png_stream(surface, png_append, &png);
        if (st != CAIRO_STATUS_SUCCESS) rc = anvil_fail("%s: cairo: %s", path, cairo_status_to_string(st));
    }
    cairo_surface_destroy(surface);
    if (!rc) rc = anvil_write_file_atomic(path, png.buf, png.len);
    free(png.buf);
    return rc;
}

int anvil_figure_write(const char *path, const anvil_figure *fig) {
    size_t n = strlen(path);
    if (n > 4 && !strcmp(path + n - 4, ".svg")) return write_svg(path, fig);
    if (n > 4 && !strcmp(path + n - 4, ".png")) return write_png(path, fig);
    return anvil_fail("%s: the figure's file must end in .svg or .png", path);
}
