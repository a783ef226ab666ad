/* The heartbeat: RUN/heartbeat.json, which rank 0 of a training run rewrites as it goes, so that a
 * supervisor (the job service) can tell progress from a hang and show what the run is doing.
 *
 *   {"pid": P, "step": N, "phase": "training", "time": T, "expect_s": E}
 *
 * time is seconds since the epoch when the phase began or the step was done. Phases: "health"
 * (the pre-flight check), "loading" (model, data, resume), "training" (rewritten after a step, at
 * most every HEARTBEAT_EVERY_S unless the phase changed), "evaluating" (validation or a sample),
 * "checkpointing" (a save being taken), "finishing" (the final model being written). expect_s is
 * how long the writer expects the phase may go without another beat: the longest it has measured
 * the phase to take, or before it has, an allowance for the bytes the phase moves
 * (anvil_heartbeat_allowance). The job service derives a hang timeout from it when the job gives
 * none (an older writer's beat has no expect_s: 0, no timeout). Written with rename and without fsync: a crash may
 * lose the last beat, which only makes the run look as stalled as it is. */
#ifndef ANVIL_OBS_HEARTBEAT_H
#define ANVIL_OBS_HEARTBEAT_H

#include <stddef.h>
#include <stdint.h>

#define ANVIL_HEARTBEAT_EVERY_S 1.0

typedef struct {
    long pid;
    int64_t step;
    char phase[16];
    double time;
    double expect_s;
} anvil_heartbeat;

/* The allowance for a phase not measured yet that moves `bytes` (a model's weights, a checkpoint):
 * a minute plus the bytes at 100 MB/s, slow storage's pace. */
double anvil_heartbeat_allowance(double bytes);

/* Writes run_dir/heartbeat.json (through a temporary file beside it). -1 after anvil_fail. */
int anvil_heartbeat_write(const char *run_dir, const char *phase, int64_t step, double expect_s);
/* Reads one: 0, 1 when there is none, -1 after anvil_fail naming the file and field. */
int anvil_heartbeat_read(const char *run_dir, anvil_heartbeat *hb);
/* Parses a heartbeat's text (at most len bytes); -1 after anvil_fail naming what (a path) and the field. */
int anvil_heartbeat_parse(const char *text, size_t len, const char *what, anvil_heartbeat *hb);

#endif
