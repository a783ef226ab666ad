/* libFuzzer entry point for the metrics reader and the figure of `anvil plot` (src/obs/plot.c):
 * any bytes as a metrics.jsonl are read or refused with a message naming the file and line, never
 * a crash, a leak or a read past the buffer (which has no terminator); what is read is drawn onto
 * a canvas that checks every coordinate is finite and inside the figure, every polyline has
 * points, and every text is valid UTF-8 without control characters (what SVG and cairo take).
 * Built and run by tests/fuzz/CMakeLists.txt (ANVIL_FUZZ) and scripts/fuzz.sh. */
#include "obs/plot.h"

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"

static void must(int cond, const char *what) {
    if (!cond) {
        fprintf(stderr, "fuzz_plot: %s\n", what);
        abort();
    }
}

static double height;

static void point(double x, double y) {
    /* Tick labels sit 8 px outside their frame, well inside the panel's margins. */
    must(isfinite(x) && isfinite(y) && x >= 0 && x <= ANVIL_PLOT_WIDTH && y >= 0 && y <= height,
         "a coordinate off the figure");
}

static void rect(void *ctx, double x, double y, double w, double h, uint32_t fill, uint32_t stroke, const char *cls) {
    (void)ctx, (void)fill, (void)stroke, (void)cls;
    point(x, y);
    point(x + w, y + h);
}

static void line(void *ctx, double x0, double y0, double x1, double y1, uint32_t color, const char *cls) {
    (void)ctx, (void)color, (void)cls;
    point(x0, y0);
    point(x1, y1);
}

static void polyline(void *ctx, const double *xy, size_t n, uint32_t color, int dashed, const char *cls) {
    (void)ctx, (void)color, (void)dashed, (void)cls;
    must(n > 0, "an empty polyline");
    for (size_t i = 0; i < n; i++) point(xy[2 * i], xy[2 * i + 1]);
}

static void text(void *ctx, double x, double y, const char *s, double size, int anchor, uint32_t color,
                 const char *cls) {
    (void)ctx, (void)size, (void)anchor, (void)color, (void)cls;
    point(x, y);
    const unsigned char *u = (const unsigned char *)s;
    for (size_t i = 0; u[i];) {
        int len = u[i] < 0x80 ? 1 : (u[i] & 0xE0) == 0xC0 ? 2 : (u[i] & 0xF0) == 0xE0 ? 3 : (u[i] & 0xF8) == 0xF0 ? 4 : 0;
        must(len > 0 && u[i] >= 0x20 && u[i] != 0x7F, "a text that is not valid UTF-8, or a control character");
        for (int k = 1; k < len; k++) must((u[i + k] & 0xC0) == 0x80, "a text that is not valid UTF-8");
        i += (size_t)len;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *copy = malloc(size ? size : 1);
    must(copy != NULL, "malloc");
    memcpy(copy, data, size);
    /* The run's name is the first line, as a folder name may be anything but '/'. */
    const char *nl = memchr(copy, '\n', size);
    size_t nlen = nl ? (size_t)(nl - copy) : 0;
    char name[64];
    snprintf(name, sizeof name, "%.*s", (int)(nlen < sizeof name ? nlen : sizeof name - 1), copy);
    for (char *c = name; *c; c++)
        if (*c == '/') *c = '_';
    anvil_plot_run *run = anvil_plot_read_text(name, "input", copy, size);
    if (!run) {
        must(!strncmp(anvil_errmsg(), "input:", 6), "a refusal that does not name the file");
    } else {
        const anvil_plot_run *runs[] = {run, run};
        for (int n = 1; n <= 2; n++) {
            height = anvil_plot_height(runs, n);
            anvil_canvas c = {NULL, rect, line, polyline, text};
            must(anvil_plot_draw(runs, n, &c) == 0, "a figure not drawn");
        }
        anvil_plot_run_free(run);
    }
    free(copy);
    return 0;
}
