/* What a resume with other --batch, --seq or --steps than the checkpoint's run changes.
 *
 * A checkpoint records the run's command line and, since this check, the batch, sequence length and
 * step count it trained with (train_config's "batch", "seq", "steps"). A resume may change them,
 * and that is allowed (a run extended to more steps is the usual case), but it is no longer the
 * run that was checkpointed: the warning says how. */
#ifndef ANVIL_TRAIN_RESUME_CHECK_H
#define ANVIL_TRAIN_RESUME_CHECK_H

#include <stdio.h>

/* One "warning: ..." line on log for each of batch, seq and steps that differs from what
 * train_config (the checkpoint's JSON text, NULL or without the keys for an older checkpoint: no
 * warning) recorded, naming the old and new values and what changes. The number of lines. */
int anvil_resume_check(const char *train_config, int batch, int seq, int steps, FILE *log);

#endif
