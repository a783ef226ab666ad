/* The figures' shared pieces (obs/plot_internal.h): axes, ticks, thinned curves, safe labels. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "obs/plot_internal.h"

#define INK ANVIL_PLOT_INK
#define GRID ANVIL_PLOT_GRID

anvil_plot_axis anvil_plot_nice_axis(double lo, double hi, int want, int pad) {
    double mag = fmax(fabs(lo), fabs(hi));
    if (!(hi - lo > mag * 1e-9)) {
        double d = mag > 1e-200 ? mag * 0.05 : 1;
        lo -= d;
        hi += d;
    }
    double raw = (hi - lo) / want, p = pow(10, floor(log10(raw))), f = raw / p;
    double step = (f < 1.5 ? 1 : f < 3 ? 2 : f < 7 ? 5 : 10) * p;
    if (pad) {
        lo = floor(lo / step) * step;
        hi = ceil(hi / step) * step;
    }
    return (anvil_plot_axis){lo, hi, step};
}

/* A tick's label: SI suffixes from ten thousand up, exponents below a thousandth, else as many
 * decimals as the tick spacing needs. */
static void tick_label(char *out, size_t cap, double v, const anvil_plot_axis *a) {
    if (fabs(v) < a->step * 1e-6) v = 0;
    double top = fmax(fabs(a->lo), fabs(a->hi));
    static const char *const si[] = {"k", "M", "G", "T"};
    if (top >= 1e4 && top < 1e15) {
        int u = (int)floor(log10(top) / 3) - 1;
        double unit = pow(1e3, u + 1);
        int dec = (int)fmax(0, ceil(-log10(a->step / unit) - 1e-9));
        snprintf(out, cap, "%.*f%s", dec, v / unit, si[u]);
    } else if (top < 1e-3 || top >= 1e15) {
        int dec = v == 0 ? 0 : (int)fmax(0, floor(log10(fabs(v))) - floor(log10(a->step)));
        snprintf(out, cap, "%.*e", dec > 15 ? 15 : dec, v);
    } else {
        int dec = (int)fmax(0, ceil(-log10(a->step) - 1e-9));
        snprintf(out, cap, "%.*f", dec, v);
    }
}

double anvil_plot_px(const anvil_plot_frame *f, double x) {
    return f->x + (x - f->ax.lo) / (f->ax.hi - f->ax.lo) * f->w;
}

double anvil_plot_py(const anvil_plot_frame *f, double y) {
    return f->y + f->h - (y - f->ay.lo) / (f->ay.hi - f->ay.lo) * f->h;
}

/* The pixel column of x, in [0, cols). */
static int column(const anvil_plot_frame *f, double x, int cols) {
    return (int)fmin(cols - 1, fmax(0, floor(anvil_plot_px(f, x) - f->x)));
}

void anvil_plot_ticks(const anvil_canvas *c, const anvil_plot_frame *f, int vertical) {
    char label[64];
    const anvil_plot_axis *a = vertical ? &f->ay : &f->ax;
    double k0 = ceil(a->lo / a->step - 1e-9), k1 = floor(a->hi / a->step + 1e-9);
    for (int i = 0; i < 50 && k0 + i <= k1; i++) {
        double v = (k0 + i) * a->step;
        tick_label(label, sizeof label, v, a);
        if (vertical) {
            double y = anvil_plot_py(f, v);
            c->line(c->ctx, f->x, y, f->x + f->w, y, GRID, "grid");
            c->line(c->ctx, f->x - 5, y, f->x, y, INK, "tick");
            c->text(c->ctx, f->x - 8, y, label, 11, 1, INK, "ytick");
        } else {
            double x = anvil_plot_px(f, v);
            c->line(c->ctx, x, f->y, x, f->y + f->h, GRID, "grid");
            c->line(c->ctx, x, f->y + f->h, x, f->y + f->h + 5, INK, "tick");
            c->text(c->ctx, x, f->y + f->h + 15, label, 11, 0, INK, "xtick");
        }
    }
}

void anvil_plot_draw_axes(const anvil_canvas *c, const anvil_plot_frame *f) {
    anvil_plot_ticks(c, f, 0);
    anvil_plot_ticks(c, f, 1);
    c->rect(c->ctx, f->x, f->y, f->w, f->h, ANVIL_PLOT_NO_FILL, INK, "frame");
}

/* Thinned so that the line still spans its points, spikes stay visible, and a million steps draw as
 * fast as a few thousand. */
size_t anvil_plot_curve_points(const anvil_plot_frame *f, const double *x, const double *y, size_t npts, double xscale,
                               double *xy) {
    int cols = (int)f->w;
    size_t n = 0;
    if (npts <= 4 * (size_t)cols) {
        for (size_t i = 0; i < npts; i++) {
            xy[n++] = anvil_plot_px(f, x[i] * xscale);
            xy[n++] = anvil_plot_py(f, y[i]);
        }
        return n / 2;
    }
    for (size_t i = 0; i < npts;) {
        int col = column(f, x[i] * xscale, cols);
        size_t lo = i, hi = i, j = i + 1;
        for (; j < npts && column(f, x[j] * xscale, cols) == col; j++) {
            if (y[j] < y[lo]) lo = j;
            if (y[j] > y[hi]) hi = j;
        }
        size_t keep[4] = {i, lo < hi ? lo : hi, lo < hi ? hi : lo, j - 1};
        for (int k = 0; k < 4; k++) {
            if (k && keep[k] == keep[k - 1]) continue;
            xy[n++] = anvil_plot_px(f, x[keep[k]] * xscale);
            xy[n++] = anvil_plot_py(f, y[keep[k]]);
        }
        i = j;
    }
    return n / 2;
}

void anvil_plot_sanitize(char *out, const char *name, size_t n) {
    const unsigned char *s = (const unsigned char *)name;
    size_t o = 0;
    for (size_t i = 0; i < n;) {
        int len = s[i] < 0x80 ? 1 : (s[i] & 0xE0) == 0xC0 ? 2 : (s[i] & 0xF0) == 0xE0 ? 3 : (s[i] & 0xF8) == 0xF0 ? 4 : 0;
        int valid = len > 0 && i + (size_t)len <= n && !(len == 1 && (s[i] < 0x20 || s[i] == 0x7F));
        for (int k = 1; valid && k < len; k++) valid = (s[i + k] & 0xC0) == 0x80;
        if (valid && len > 1) {
            unsigned cp = s[i] & (0x7F >> len);
            for (int k = 1; k < len; k++) cp = cp << 6 | (s[i + k] & 0x3F);
            static const unsigned least[] = {0, 0, 0x80, 0x800, 0x10000};
            valid = cp >= least[len] && cp <= 0x10FFFF && !(cp >= 0xD800 && cp <= 0xDFFF);
        }
        if (valid) {
            memcpy(out + o, s + i, (size_t)len);
            o += (size_t)len;
            i += (size_t)len;
        } else {
            out[o++] = '?';
            i++;
        }
    }
    out[o] = 0;
}
