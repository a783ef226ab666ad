/* A job's goodput, as GET /v1/jobs/ID/goodput answers it (`anvil job --json goodput ID`), turned
 * into the generic timeline figure of obs/plot_timeline.h for `anvil plot --goodput` and
 * `anvil plot --job`: a row per attempt (and one for the time outside every attempt, the queue,
 * when it has any), the spans coloured by part, the faults as marks placed by their Unix time less
 * the submission's, the training loss as the curve. Kept apart from the command (no libcurl, no
 * client) so that tests/fuzz/fuzz_goodput.c can build it alone. */
#ifndef ANVIL_CLI_PLOT_GOODPUT_H
#define ANVIL_CLI_PLOT_GOODPUT_H

#include <stddef.h>

#include <cjson/cJSON.h>

#include "obs/plot_timeline.h"

/* Past these a file is not a goodput anvil wrote (its loss curve is at most 2000 points, a job has
 * a few spans per checkpoint interval); the limits keep a hostile one from taking the memory. */
#define CLI_GOODPUT_MAX_BYTES (64u << 20)
#define CLI_GOODPUT_MAX_ATTEMPTS 10000
#define CLI_GOODPUT_MAX_FAULTS 10000
#define CLI_GOODPUT_MAX_SPANS 200000
#define CLI_GOODPUT_MAX_LOSS 200000

typedef struct {
    anvil_timeline tl; /* what to draw; it points into the rest */
    char title[256];
    anvil_timeline_category parts[7];
    anvil_timeline_row *rows;
    char (*row_labels)[24];
    anvil_timeline_span *spans;
    anvil_timeline_mark *marks;
    char (*mark_labels)[112];
    double *curve; /* t values, then loss values */
} cli_goodput_timeline;

/* The timeline of goodput g; src names it in messages ("g.json", "job 7") and name in the title.
 * -1 after anvil_fail with one line naming src and the field ("g.json: spans[3].t0: not a number"). */
int cli_goodput_timeline_of(const char *src, const char *name, const cJSON *g, cli_goodput_timeline *out);
/* The same from the len bytes of JSON text (no terminator needed). */
int cli_goodput_timeline_parse(const char *src, const char *name, const char *text, size_t len,
                               cli_goodput_timeline *out);
void cli_goodput_timeline_free(cli_goodput_timeline *t);

#endif
