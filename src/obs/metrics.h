/* Training metrics out of the process: one JSON object per line into the
 * run folder (for tools and plots), and a live progress line on a terminal.
 * Each record is written with a single write(2) so a reader tailing the file
 * never sees half a line. */
#ifndef ANVIL_OBS_METRICS_H
#define ANVIL_OBS_METRICS_H

#include <stdio.h>

typedef struct anvil_metrics anvil_metrics;

/* Opens (appending) path; NULL after anvil_fail. */
anvil_metrics *anvil_metrics_open(const char *path);
void anvil_metrics_close(anvil_metrics *m);

/* Writes {"kind": kind, key: value, ...} from nfields (key, value) pairs; integral values are
 * printed without a fraction, values of 1e8 or more with three decimals (a Unix time to the
 * millisecond), others to nine significant digits. */
int anvil_metrics_write(anvil_metrics *m, const char *kind, const char *const *keys, const double *values,
                        int nfields);

/* A one-line progress bar with ETA, redrawn in place on a terminal. */
void anvil_progress_draw(FILE *tty, int step, int total, double elapsed_s, const char *detail);
void anvil_progress_end(FILE *tty);

/* The progress of a long command (prep, tokenizer train, export, ...), fed
 * as often as its work allows and drawn only as often as a reader can use:
 * on a terminal the bar above, redrawn at most 10 times a second; elsewhere
 * (logs, the job service) a plain line each time another tenth of the work
 * is done or 10 s have passed since the last one, whichever comes first,
 *   "<what>: progress 40% 1.6/4.0 MiB | <detail> | elapsed 00:02 eta 00:03"
 * and a last line with "done" when it finishes. */
enum { ANVIL_METER_OFF, ANVIL_METER_LINES, ANVIL_METER_BAR };
typedef struct {
    FILE *out;
    const char *what;
    const char *unit; /* after the counts ("merges"); NULL: the counts are bytes, scaled */
    int mode;         /* ANVIL_METER_* */
    double done, total; /* as last updated */
    double t0, last;
    int tenth; /* the last tenth a line was printed for */
    int drawn; /* a bar is on the line and needs its newline */
} anvil_meter;

/* The mode for out: off when the user said --no-progress (enabled 0), a bar
 * when out is a terminal, lines otherwise. */
int anvil_meter_mode(FILE *out, int enabled);
void anvil_meter_start(anvil_meter *m, FILE *out, int mode, const char *what, const char *unit);
/* done of total (total <= 0: unknown, no bar or ETA); detail may be "". */
void anvil_meter_update(anvil_meter *m, double done, double total, const char *detail);
/* Ends a bar's line, so that a message can be printed below it. */
void anvil_meter_break(anvil_meter *m);
/* Draws the final figures (the bar's last state and its newline, or the line with "done"). */
void anvil_meter_finish(anvil_meter *m, double done, double total, const char *detail);

#endif
