/* Goodput: where a job's wall time went, attempt by attempt.
 *
 * The job's time, from its submission to its end (or now), is cut into consecutive intervals and
 * each interval goes to one part, so the parts add up to the wall time by construction:
 *   - queue:       Pending in the daemon's queue (reported, kept out of the ETTR);
 *   - restart:     from leaving the queue, or from an attempt's end, to the next attempt's first
 *                  step: scheduling, fencing, process start, the health check, resume and load;
 *   - productive:  the steps that count toward the final model (or, for a job that has not
 *                  completed, toward its newest checkpoint);
 *   - recomputed:  steps that a failure threw away (past the checkpoint the next attempt resumed
 *                  from), and the part of a step that a fault cut short;
 *   - checkpoint:  the time training waited on checkpoints, and the final model's save;
 *   - eval:        validation and samples;
 *   - detection:   from a fault (or an attempt's last sign of life) to the service noticing the
 *                  attempt's end.
 * ETTR (effective training time ratio) = productive / (wall - queue).
 *
 * The steps' times come from the run's metrics.jsonl: each attempt's trainer writes a "start"
 * record (job, attempt, the step it resumed from, its Unix time "t"), then every "train" record
 * carries its time "t" and what the time since the record before went to besides the step
 * ("ckpt_ms", "eval_ms"), and a run that finished or stopped writes an "end" record. Fault times
 * come from the faults the job service recorded (anvil chaos, job/store.h); without one, an
 * attempt's time after its last record is detection. */
#ifndef ANVIL_JOB_GOODPUT_H
#define ANVIL_JOB_GOODPUT_H

#include <stdbool.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "job/store.h"

typedef enum {
    ANVIL_GP_PRODUCTIVE,
    ANVIL_GP_RECOMPUTED,
    ANVIL_GP_DETECTION,
    ANVIL_GP_RESTART,
    ANVIL_GP_CHECKPOINT,
    ANVIL_GP_EVAL,
    ANVIL_GP_QUEUE,
    ANVIL_GP_NPARTS
} anvil_gp_part;

/* The part's name in JSON, tables and /metrics labels: "productive", ..., "queue". */
const char *anvil_gp_part_name(anvil_gp_part p);

typedef struct {
    double s[ANVIL_GP_NPARTS]; /* seconds */
} anvil_gp_sums;

/* One attempt as the accounting saw it. */
typedef struct {
    int attempt;
    double started_at, ended_at; /* the service's; ended_at: now for a running attempt */
    int64_t resumed_from;        /* the step its first record says it resumed from; -1: it never trained */
    int64_t last_step;           /* the last step it recorded (0: none) */
    int64_t kept_through;        /* its steps up to this one counted as productive */
    anvil_gp_sums parts;         /* its own time, and the restart before it */
} anvil_gp_attempt;

/* What a fault cost: the time from it to the service's notice, the work it threw away, and the
 * restart after it (0 where the attempt it hit did not end by it, a daemon restart say); and for one
 * that its attempt went on through (an S3 storm its retries absorbed), the stall: the time the steps
 * after it took beyond the attempt's usual step, until one was back at that pace. The stall stays in
 * the parts the steps' time went to (it is a cost within them, not a part of its own); one before the
 * attempt's first step lengthens its restart instead, which is not in its stall (no usual pace
 * measures a restart). */
typedef struct {
    double at;
    int attempt;
    char kind[32], target[64];
    double detection, recomputed, restart, stall;
} anvil_gp_fault;

/* One stretch of the timeline and the part it went to (consecutive stretches of one part merged), in
 * seconds since the job's submission; attempt: the attempt's number, 0 before the first. */
typedef struct {
    double t0, t1;
    int attempt;
    anvil_gp_part part;
} anvil_gp_span;

typedef struct {
    double submitted_at; /* Unix time: where the spans' and the loss curve's times count from */
    double wall;         /* submission to end (or now) */
    anvil_gp_sums total;
    double ettr; /* productive / (wall - queue); 0 when nothing but queue has passed */
    anvil_gp_attempt *attempts;
    int nattempts;
    anvil_gp_fault *faults;
    int nfaults;
    anvil_gp_span *spans; /* the timeline, in order */
    int nspans;
    double *loss; /* (seconds since submission, training loss) pairs of the job's steps, in order */
    int nloss;
} anvil_goodput;

/* The records of the metrics files last accounted, parsed once. The daemon accounts a job on every
 * describe, chaos poll and /metrics scrape, and a run's file has a line per step: without it each
 * of those parsed every line again (a 10-minute job's 12,000 lines at every 50 ms poll took a
 * quarter of a core). A file only grows while its run writes it, so later calls parse only the
 * whole lines added since; a file replaced, shortened or rewritten before that point (the bytes of
 * its last parsed line differ) is parsed afresh. Thread-safe. */
typedef struct anvil_goodput_cache anvil_goodput_cache;
anvil_goodput_cache *anvil_goodput_cache_new(void);
void anvil_goodput_cache_free(anvil_goodput_cache *c);

/* What the accounting reads, for anvil_goodput_account: the store's facts of the job. */
typedef struct {
    int64_t job_id;
    double submitted_at, left_queue_at, end; /* end: the job's end, or now while it runs */
    bool completed, failed;                  /* its final status; neither while it runs or when stopped */
    const anvil_job_attempt *attempts;
    int nattempts;
    const anvil_job_fault *faults;
    int nfaults;
    const char *metrics_path; /* the run's metrics.jsonl (a missing file: no records) */
    anvil_goodput_cache *cache; /* NULL: the file is parsed afresh */
} anvil_goodput_input;

/* The accounting of in. -1 after anvil_fail (the metrics file unreadable, out of memory). */
int anvil_goodput_account(const anvil_goodput_input *in, anvil_goodput *g);
/* The accounting of job j as the store keeps it, now being the present time, its records through
 * cache (NULL: none). */
int anvil_goodput_of(anvil_store *st, anvil_goodput_cache *cache, const anvil_job *j, double now, anvil_goodput *g);
void anvil_goodput_free(anvil_goodput *g);

/* {"submitted_at", "wall_s", "ettr", "parts": {name: seconds}, "attempts": [...], "faults": [...]}
 * (submitted_at, the attempts' and the faults' times: Unix times), and with timeline,
 * "spans": [{"t0", "t1", "attempt", "part"}] and "loss": [[t, loss], ...] (at most ANVIL_GP_LOSS_POINTS
 * pairs, evenly thinned), what `anvil plot --goodput` draws; NULL after anvil_fail. */
#define ANVIL_GP_LOSS_POINTS 2000
cJSON *anvil_goodput_json(const anvil_goodput *g, bool timeline);

#endif
