/* A run seen from outside while it trains: the Prometheus page rank 0 serves
 * on /metrics, with every rank's figures gathered to it after each step, and
 * the metrics that --metric definitions pull out of the trainer's log.
 *
 * Every rank calls the same functions in the same order (the gather is a
 * collective); only rank 0 serves. The gather is submitted after a step and
 * waited for after the next one, so it overlaps training and the page lags
 * the ranks' figures by one step.
 *
 * The profile (obs/trace.h) is switched on for its steps and written after
 * them, one file per rank.
 *
 * The log lines matched are what the trainer writes to its log on each rank
 * (step and validation lines, checkpoint messages, the progress bar's
 * redraws), ranks other than 0 included, though theirs are not shown. */
#ifndef ANVIL_TRAIN_TELEMETRY_H
#define ANVIL_TRAIN_TELEMETRY_H

#include <stdint.h>
#include <stdio.h>

#include "kernels/isa.h"
#include "obs/metrics.h"
#include "s3/s3.h"

typedef struct anvil_telemetry anvil_telemetry;

typedef struct {
    int metrics_port;     /* -1: no /metrics page; 0: a free port */
    const char *out_dir;  /* rank 0 writes the port in use to out_dir/metrics.port (NULL: nowhere) */
    FILE *log;
    const char *kernels;  /* labels of anvil_train_info */
    const char *dtype;
    /* MFU's denominator: the peak of this CPU's kernel in use (kernels/isa.h; ANVIL_BF16_NONE: the
     * fp32 FMA peak); none (MFU not given) when cpu is 0, a device's kernels doing the work. */
    int cpu;
    anvil_bf16_kernel bf16;
    int steps;            /* the run's last step */
    /* Metrics pulled from the log: NAME and REGEX (obs/logmetric.h) of each. */
    const char *const *metric_names, *const *metric_regexes;
    int nmetrics;
    /* A profile of steps profile_first..profile_last (1-based) into profile_dir/trace_rank<R>.json
     * (NULL: none). */
    const char *profile_dir;
    int profile_first, profile_last;
} anvil_telemetry_config;

/* The step that just ended, as this rank saw it. */
typedef struct {
    int step;                /* 1-based */
    double loss, lr, grad_norm;
    double step_s;           /* this rank's time for the step */
    double tokens_per_step, flops_per_step; /* over all ranks */
    int64_t tokens_seen;
    double comm_wait_s;      /* cumulative wait for communication that did not overlap (0: none) */
} anvil_telemetry_step;

/* Compiles the metric definitions and taps the log; no I/O yet. NULL after anvil_fail. */
anvil_telemetry *anvil_telemetry_open(const anvil_telemetry_config *c);
/* What the trainer should log to: c->log itself, or a tap on it that feeds the definitions. */
FILE *anvil_telemetry_log(anvil_telemetry *t);
/* Finds MFU's peak (the machine's cache, or a second's probe the first time) and says on rank 0's
 * log where it came from; with a metrics port, starts the server on rank 0 and writes the port file. jsonl (rank 0's metrics.jsonl, or NULL) receives
 * the log metrics. 0, or -1 after anvil_fail. */
int anvil_telemetry_start(anvil_telemetry *t, anvil_metrics *jsonl);
/* Model FLOP/s (all ranks') over the ranks' peak, rank 0's figure times the world: NAN when there
 * is no peak (a device run). */
double anvil_telemetry_mfu(const anvil_telemetry *t, double flops_per_s);
/* Before each step (1-based): the profile starts at its first step. 0, or -1 after anvil_fail. */
int anvil_telemetry_step_begin(anvil_telemetry *t, int step);
/* After each step and everything it logged, on every rank; the profile is written after its last
 * step (or at close, when the run ends inside it). 0, or -1 after anvil_fail. */
int anvil_telemetry_step_done(anvil_telemetry *t, const anvil_telemetry_step *s);
/* Rank 0's S3 counters for the page: client "data" (the train loader) or "checkpoint" (the
 * uploader). Shown as anvil_s3_requests_total{client,op}, anvil_s3_retries_total{client},
 * anvil_s3_bytes_total{client,direction} and anvil_s3_request_latency_seconds{client,quantile}
 * (p50 and p99). Other ranks' calls, and calls without a page, do nothing. */
void anvil_telemetry_s3(anvil_telemetry *t, const char *client, const anvil_s3_stats *st);
/* A validation's loss, on every rank alike. */
void anvil_telemetry_validated(anvil_telemetry *t, int step, double val_loss);
/* Waits for the last gather, stops the server, closes the tap and frees t (NULL is fine); -1 after
 * anvil_fail when the gather failed. After a failed run (failed) it does not wait, since a failed
 * rank may never join the gather: the gather's buffers are then left to the process's exit. */
int anvil_telemetry_close(anvil_telemetry *t, int failed);

#endif
