/* --ckpt-every auto: the checkpoint interval from what a checkpoint costs and how often the job
 * fails, as Young (1974) and Daly (2006) derived it: checkpointing every sqrt(2 x C x MTBF) seconds
 * of work minimizes the expected time lost to checkpoints (C each) plus the work recomputed after a
 * failure (half an interval, on average). C is the checkpoint's measured cost to training (the
 * checkpointer's report: for a background save, its stall and the slowdown while it is written);
 * the interval is never shorter than twice a checkpoint's write, so that the writer idles at least
 * half the time. */
#ifndef ANVIL_TRAIN_CKPT_AUTO_H
#define ANVIL_TRAIN_CKPT_AUTO_H

#include <stddef.h>

/* train's ckpt_every for --ckpt-every auto. */
#define ANVIL_CKPT_EVERY_AUTO (-1)
/* Before any checkpoint was measured: the first one after this many steps, to measure. */
#define ANVIL_CKPT_AUTO_FIRST 10
/* The MTBF without --mtbf or the job service's ANVIL_MTBF_S: a day. */
#define ANVIL_CKPT_AUTO_MTBF_S 86400.0

/* The interval in steps (1 to max_steps) for a checkpoint costing cost_ms (NAN or < 0: unknown, then
 * write_ms stands in) whose write took write_ms, steps of step_ms, and mtbf_s; why: one line saying
 * how it was chosen, for the log. */
int anvil_ckpt_auto_every(double cost_ms, double write_ms, double step_ms, double mtbf_s, int max_steps, char *why,
                          size_t cap);

#endif
