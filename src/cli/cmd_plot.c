/* anvil plot: figures of runs from their metrics.jsonl. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/args.h"
#include "cli/commands.h"
#include "core/exit.h"
#include "core/fsutil.h"
#include "obs/plot.h"

static const char *usage =
    "usage: anvil plot RUN_DIR... --out FILE.svg|FILE.png\n"
    "\n"
    "Draws the runs' RUN_DIR/metrics.jsonl into one figure, every run overlaid in its own colour and\n"
    "named for its folder in the legend: train (solid) and validation (dashed) loss against steps and\n"
    "against tokens, learning rate, gradient norm and tokens/s against steps, and one panel per log\n"
    "metric (train --metric). Null values (a NaN loss) are left out of their curve, and counted on\n"
    "stderr. Steps written again after a resume replace the earlier ones. A curve with more than four\n"
    "points per pixel column keeps each column's first and last points and its least and greatest.\n"
    "  --out FILE   the figure: SVG or PNG by its ending, 1200 pixels wide, written atomically\n";

int cmd_plot(int argc, char **argv) {
    const char *cmd = "plot";
    const char *out = NULL;
    const char **dirs = calloc((size_t)argc, sizeof *dirs);
    if (!dirs) {
        fputs("anvil plot: error: out of memory\n", stderr);
        return ANVIL_EXIT_ERROR;
    }
    int ndirs = 0, rc = ANVIL_EXIT_OK;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            fputs(usage, stdout);
            free(dirs);
            return ANVIL_EXIT_OK;
        } else if (!strcmp(argv[i], "--out")) {
            if (!(out = arg_value(cmd, argc, argv, &i))) rc = ANVIL_EXIT_USAGE;
        } else if (!strncmp(argv[i], "--", 2)) {
            rc = cli_usage_error(cmd, "unexpected argument '%s'", argv[i]);
        } else {
            dirs[ndirs++] = argv[i];
        }
        if (rc) break;
    }
    if (!rc && !ndirs) rc = cli_usage_error(cmd, "needs at least one RUN_DIR");
    if (!rc && !out) rc = cli_usage_error(cmd, "needs --out FILE.svg or FILE.png");
    if (!rc && (strlen(out) <= 4 || (strcmp(out + strlen(out) - 4, ".svg") && strcmp(out + strlen(out) - 4, ".png"))))
        rc = cli_usage_error(cmd, "--out '%s' must end in .svg or .png", out);
    anvil_plot_run **runs = rc ? NULL : calloc((size_t)ndirs, sizeof *runs);
    if (!rc && !runs) {
        fputs("anvil plot: error: out of memory\n", stderr);
        rc = ANVIL_EXIT_ERROR;
    }
    for (int i = 0; !rc && i < ndirs; i++) {
        if (!(runs[i] = anvil_plot_read(dirs[i]))) rc = cli_fail(cmd);
        else if (anvil_plot_run_skipped(runs[i]))
            fprintf(stderr, "anvil plot: %s: %ld null or non-finite values left out\n", dirs[i],
                    anvil_plot_run_skipped(runs[i]));
    }
    if (!rc && (anvil_mkdir_parent(out) || anvil_plot_write(out, (const anvil_plot_run *const *)runs, ndirs)))
        rc = cli_fail(cmd);
    for (int i = 0; runs && i < ndirs; i++) anvil_plot_run_free(runs[i]);
    free(runs);
    free(dirs);
    return rc;
}
