/* anvil plot: figures of runs from their metrics.jsonl, and a job's goodput timeline. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/args.h"
#include "cli/client.h"
#include "cli/commands.h"
#include "cli/plot_goodput.h"
#include "core/exit.h"
#include "core/fsutil.h"
#include "obs/plot.h"

static const char *usage =
    "usage: anvil plot RUN_DIR... --out FILE.svg|FILE.png\n"
    "       anvil plot --goodput FILE.json --out FILE.svg|FILE.png\n"
    "       anvil plot --job ID [--state DIR | --url URL] [--token-file F] --out FILE.svg|FILE.png\n"
    "\n"
    "Draws the runs' RUN_DIR/metrics.jsonl into one figure, every run overlaid in its own colour and\n"
    "named for its folder in the legend: train (solid) and validation (dashed) loss against steps and\n"
    "against tokens, learning rate, gradient norm and tokens/s against steps, and one panel per log\n"
    "metric (train --metric). Null values (a NaN loss) are left out of their curve, and counted on\n"
    "stderr. Steps written again after a resume replace the earlier ones. A curve with more than four\n"
    "points per pixel column keeps each column's first and last points and its least and greatest.\n"
    "\n"
    "With --goodput, draws a job's timeline from its goodput (what `anvil job --json goodput ID`\n"
    "prints): a band per attempt, each stretch coloured by where its time went (productive,\n"
    "recomputed, detection, restart, checkpoint, eval, queue), the faults as labelled lines, a legend\n"
    "of the parts' seconds and shares of the wall time, the ETTR in the title; below, the training\n"
    "loss against the same axis (seconds since the job's submission), each attempt's start and end\n"
    "dashed. --job ID draws the same from the job service's answer.\n"
    "  --out FILE          the figure: SVG or PNG by its ending, 1200 pixels wide, written atomically\n"
    "  --goodput FILE      a goodput JSON file to draw as a timeline\n"
    "  --job ID            job ID's goodput, asked of the daemon of --state DIR (its serve.port) or\n"
    "                      --url URL, with the token of --token-file F or as `anvil job` finds it\n";

typedef struct {
    const char *out, *goodput, *job, *daemon_opt;
    const char **dirs;
    int ndirs;
} plot_args;

static int parse_args(int argc, char **argv, plot_args *a) {
    const char *cmd = "plot";
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i], **v = NULL;
        if (!strcmp(arg, "--out")) v = &a->out;
        else if (!strcmp(arg, "--goodput")) v = &a->goodput;
        else if (!strcmp(arg, "--job")) v = &a->job;
        else if (!strcmp(arg, "--state") || !strcmp(arg, "--url") || !strcmp(arg, "--token-file")) {
            /* Only checked here: client_open reads them. */
            a->daemon_opt = arg;
            if (!arg_value(cmd, argc, argv, &i)) return ANVIL_EXIT_USAGE;
        } else if (!strncmp(arg, "--", 2)) {
            return cli_usage_error(cmd, "unexpected argument '%s'", arg);
        } else {
            a->dirs[a->ndirs++] = arg;
        }
        if (v && !(*v = arg_value(cmd, argc, argv, &i))) return ANVIL_EXIT_USAGE;
    }
    int sources = (a->ndirs > 0) + (a->goodput != NULL) + (a->job != NULL);
    char *end;
    if (!sources) return cli_usage_error(cmd, "needs at least one RUN_DIR (or --goodput FILE, or --job ID)");
    if (sources > 1) return cli_usage_error(cmd, "draws RUN_DIRs, --goodput FILE or --job ID: give one");
    if (a->daemon_opt && !a->job) return cli_usage_error(cmd, "%s goes with --job", a->daemon_opt);
    if (a->job && (strtoll(a->job, &end, 10) <= 0 || *end))
        return cli_usage_error(cmd, "--job takes a job ID, not '%s'", a->job);
    if (!a->out) return cli_usage_error(cmd, "needs --out FILE.svg or FILE.png");
    size_t n = strlen(a->out);
    if (n <= 4 || (strcmp(a->out + n - 4, ".svg") && strcmp(a->out + n - 4, ".png")))
        return cli_usage_error(cmd, "--out '%s' must end in .svg or .png", a->out);
    return 0;
}

static int plot_runs(const plot_args *a) {
    const char *cmd = "plot";
    int rc = 0;
    anvil_plot_run **runs = calloc((size_t)a->ndirs, sizeof *runs);
    if (!runs) {
        fputs("anvil plot: error: out of memory\n", stderr);
        return ANVIL_EXIT_ERROR;
    }
    for (int i = 0; !rc && i < a->ndirs; i++) {
        if (!(runs[i] = anvil_plot_read(a->dirs[i]))) rc = cli_fail(cmd);
        else if (anvil_plot_run_skipped(runs[i]))
            fprintf(stderr, "anvil plot: %s: %ld null or non-finite values left out\n", a->dirs[i],
                    anvil_plot_run_skipped(runs[i]));
    }
    if (!rc && (anvil_mkdir_parent(a->out) || anvil_plot_write(a->out, (const anvil_plot_run *const *)runs, a->ndirs)))
        rc = cli_fail(cmd);
    for (int i = 0; i < a->ndirs; i++) anvil_plot_run_free(runs[i]);
    free(runs);
    return rc;
}

static int write_timeline(const char *out, const cli_goodput_timeline *t) {
    anvil_figure fig = anvil_timeline_figure(&t->tl);
    return anvil_mkdir_parent(out) || anvil_figure_write(out, &fig) ? cli_fail("plot") : 0;
}

static int plot_goodput_file(const plot_args *a) {
    char *text;
    size_t len;
    if (anvil_read_file_max(a->goodput, CLI_GOODPUT_MAX_BYTES, &text, &len)) return cli_fail("plot");
    const char *base = strrchr(a->goodput, '/');
    cli_goodput_timeline t;
    const char *name = base ? base + 1 : a->goodput;
    int rc = cli_goodput_timeline_parse(a->goodput, name, text, len, &t) ? cli_fail("plot")
                                                                         : write_timeline(a->out, &t);
    free(text);
    cli_goodput_timeline_free(&t);
    return rc;
}

/* The goodput of --job, from the daemon; client_open takes --state, --url and --token-file again. */
static int plot_job(int argc, char **argv, const plot_args *a) {
    client cl;
    int n, rc = client_open(&cl, "plot", usage, argc, argv, &n);
    if (rc >= 0) return rc;
    char path[64], src[96], name[48];
    snprintf(path, sizeof path, "/v1/jobs/%s/goodput", a->job);
    snprintf(src, sizeof src, "job %s's goodput (GET %s)", a->job, path);
    snprintf(name, sizeof name, "job %s", a->job);
    cJSON *g;
    rc = client_call(&cl, "GET", path, NULL, &g);
    client_close(&cl);
    if (rc) return rc;
    cli_goodput_timeline t;
    rc = cli_goodput_timeline_of(src, name, g, &t) ? cli_fail("plot") : write_timeline(a->out, &t);
    cli_goodput_timeline_free(&t);
    cJSON_Delete(g);
    return rc;
}

int cmd_plot(int argc, char **argv) {
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            fputs(usage, stdout);
            return ANVIL_EXIT_OK;
        }
    plot_args a = {.dirs = calloc((size_t)argc, sizeof *a.dirs)};
    if (!a.dirs) {
        fputs("anvil plot: error: out of memory\n", stderr);
        return ANVIL_EXIT_ERROR;
    }
    int rc = parse_args(argc, argv, &a);
    if (!rc) rc = a.job ? plot_job(argc, argv, &a) : a.goodput ? plot_goodput_file(&a) : plot_runs(&a);
    free(a.dirs);
    return rc;
}
