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
 * printed without a fraction. */
int anvil_metrics_write(anvil_metrics *m, const char *kind, const char *const *keys, const double *values,
                        int nfields);

/* A one-line progress bar with ETA, redrawn in place on a terminal. */
void anvil_progress_draw(FILE *tty, int step, int total, double elapsed_s, const char *detail);
void anvil_progress_end(FILE *tty);

#endif
