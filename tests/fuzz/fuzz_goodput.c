/* libFuzzer entry point for `anvil plot --goodput`: the reading of a goodput JSON into a timeline
 * (src/cli/plot_goodput.c, built in here as the CLI is not in the library) and the timeline's
 * drawing (src/obs/plot_timeline.c). Any bytes are read or refused with one line naming the file,
 * never a crash, a leak or a read past the buffer (which has no terminator); what is read always
 * draws (the drawing refuses input that breaks its rules, so a reader that let one through fails
 * here), onto a canvas that checks every coordinate is finite and inside the figure, every
 * rectangle's size is finite and not negative, every polyline has points, and every text is valid
 * UTF-8 without control characters, on one line. Built and run by tests/fuzz/CMakeLists.txt
 * (ANVIL_FUZZ) and scripts/fuzz.sh. */
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/plot_goodput.h"
#include "core/error.h"

static void must(int cond, const char *what) {
    if (!cond) {
        fprintf(stderr, "fuzz_goodput: %s\n", what);
        abort();
    }
}

static double height;

static void point(double x, double y) {
    must(isfinite(x) && isfinite(y) && x >= 0 && x <= ANVIL_TIMELINE_WIDTH && y >= 0 && y <= height,
         "a coordinate off the figure");
}

static void rect(void *ctx, double x, double y, double w, double h, uint32_t fill, uint32_t stroke, const char *cls) {
    (void)ctx, (void)fill, (void)stroke, (void)cls;
    must(w >= 0 && h >= 0, "a rectangle of negative size");
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
    cli_goodput_timeline t;
    if (cli_goodput_timeline_parse("input.json", "input.json", copy, size, &t)) {
        const char *msg = anvil_errmsg();
        must(!strncmp(msg, "input.json: ", 12), "a refusal that does not name the file");
        must(!strchr(msg, '\n'), "a refusal of more than one line");
    } else {
        height = anvil_timeline_height(&t.tl);
        must(height > 0 && height < 4000, "a figure of no height, or taller than its bands allow");
        anvil_canvas c = {NULL, rect, line, polyline, text};
        must(anvil_timeline_draw(&t.tl, &c) == 0, "a timeline read but not drawn");
        cli_goodput_timeline_free(&t);
    }
    free(copy);
    return 0;
}
