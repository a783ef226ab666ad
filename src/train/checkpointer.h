/* The checkpoint policy of a training run: when to save (every N steps
 * and/or every M minutes of wall time), saving in the background, and
 * retention. A writer thread copies the weights and moments and does the
 * I/O while training goes on; the training thread waits only when its next
 * optimizer update would overtake the copy.
 * Built on src/ckpt/checkpoint.h. */
#ifndef ANVIL_TRAIN_CHECKPOINTER_H
#define ANVIL_TRAIN_CHECKPOINTER_H

#include <stdint.h>
#include <stdio.h>

#include "ckpt/checkpoint.h"

typedef struct {
    const char *run_dir;
    int every_steps;      /* 0: not by steps */
    double every_minutes; /* 0: not by time */
    int keep_last;        /* >= 1 */
    int64_t keep_every;   /* 0: none kept for good */
    int async;            /* 1: write in the background */
    FILE *log;
} anvil_checkpointer_config;

typedef struct anvil_checkpointer anvil_checkpointer;

anvil_checkpointer *anvil_checkpointer_new(const anvil_checkpointer_config *cfg);
/* Waits for a write in flight; returns -1 if that (or any earlier background) write failed. */
int anvil_checkpointer_free(anvil_checkpointer *cp);
/* Whether the policy asks for a checkpoint after `step` completed steps. */
int anvil_checkpointer_due(const anvil_checkpointer *cp, int64_t step);
/* Saves st. Asynchronously (the default), a writer thread copies the weights and moments while
 * the next step's forward and backward run, then writes; force_sync does everything now (for the
 * last checkpoint and on a stop signal). A failed background write is reported on the log and
 * makes the next call (and free) return -1. */
int anvil_checkpointer_save(anvil_checkpointer *cp, const anvil_ckpt_state *st, int force_sync);
/* Must be called before anything changes the weights or optimizer state (the AdamW update): waits
 * until the writer's snapshot is complete, counting the wait as stall, and logs the stall. */
int anvil_checkpointer_before_update(anvil_checkpointer *cp);

#endif
