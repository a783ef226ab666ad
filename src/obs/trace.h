/* Where the time goes: spans recorded while a profile is on, written as
 * Chrome Trace Event Format JSON (complete events, "ph":"X"), which Perfetto
 * and chrome://tracing open.
 *
 * Off, a span costs one relaxed load and a branch (anvil_trace_begin
 * returns a negative time and anvil_trace_end does nothing), so the hooks
 * stay compiled into the model, the collectives and the checkpointer. On,
 * every thread records into one buffer under a mutex: spans are coarse
 * (a kernel call, a collective, a checkpoint write), a few hundred a step.
 * A span counts when it began while the profile was on, wherever it ends. */
#ifndef ANVIL_OBS_TRACE_H
#define ANVIL_OBS_TRACE_H

#include <stdatomic.h>
#include <stdio.h>

extern atomic_int anvil_trace_on;
extern atomic_long anvil_trace_open; /* spans begun and not yet ended */

double anvil_trace_clock(void);

/* The start of a span: now, or -1 when no profile is on. Every span begun must be ended. */
static inline double anvil_trace_begin(void) {
    if (!atomic_load_explicit(&anvil_trace_on, memory_order_relaxed)) return -1.0;
    atomic_fetch_add_explicit(&anvil_trace_open, 1, memory_order_relaxed);
    return anvil_trace_clock();
}

/* Records the span begun at t0 (a no-op when t0 < 0). cat and name are copied. layer >= 0 and
 * bytes >= 0 go into the event's args (-1 leaves them out), with the pass of the layer the thread
 * is in, if any. */
void anvil_trace_record(double t0, double t1, const char *cat, const char *name, int layer, double bytes);

static inline void anvil_trace_end(double t0, const char *cat, const char *name, int layer, double bytes) {
    if (t0 >= 0) anvil_trace_record(t0, anvil_trace_clock(), cat, name, layer, bytes);
}

/* A model layer's pass ("forward", "backward", static): the spans recorded on this thread until
 * its end carry the layer and the pass in their args. */
double anvil_trace_layer_begin(int layer, const char *pass);
void anvil_trace_layer_end(double t0);
/* The layer the calling thread is in, -1 outside any. */
int anvil_trace_layer(void);

/* Names the calling thread in the trace (a static string: "train", "comm", "ckpt writer"). */
void anvil_trace_thread_name(const char *name);

/* Starts recording (discarding anything recorded before), or stops: no span begins after it, the
 * spans already begun (a checkpoint write on its thread) are still recorded when they end. */
void anvil_trace_start(void);
void anvil_trace_stop(void);
/* Spans begun and not ended yet: 0 once everything begun while on is in. */
long anvil_trace_open_spans(void);
/* Writes what was recorded to path (atomically), as process pid named process, and clears it.
 * Returns the number of events, or -1 after anvil_fail. */
long anvil_trace_write(const char *path, int pid, const char *process);

/* Prints a trace file's summary to out: per thread, the top spans by self time (a span's time
 * less that of the spans nested in it), with their count and share of the total step time, the
 * step spans' own self time being what no span covers. 0, or -1 after anvil_fail naming the file
 * and what is wrong with it. */
int anvil_trace_summary(const char *path, FILE *out, int top);
/* The same from a buffer (len bytes, no terminator needed); name labels errors and output. */
int anvil_trace_summary_text(const char *name, const char *text, size_t len, FILE *out, int top);

#endif
