/* The checkpoint policy of a training run and its one route to disk: when
 * to save (every N steps and/or every M minutes of wall time), saving in the
 * background, retention, and the true cost of each checkpoint to training,
 * the same for replicated and sharded runs. The training thread copies the
 * weights and moments; a writer thread does the I/O while training goes on.
 *
 * A sharded run (ZeRO) saves on every rank together: rank 0 opens the
 * temporary folder, the first replica of each shard writes its shard file
 * there, and once every rank has reported its file (the ranks exchange their
 * states at each step's anvil_checkpointer_before_update), rank 0 adds the
 * whole weights (below stage 3) and the manifest and renames the folder
 * into place. Built on src/ckpt/checkpoint.h and the collectives. */
#ifndef ANVIL_TRAIN_CHECKPOINTER_H
#define ANVIL_TRAIN_CHECKPOINTER_H

#include <stdint.h>
#include <stdio.h>

#include "ckpt/checkpoint.h"
#include "train/ckpt_remote.h"

typedef struct {
    const char *run_dir;
    int every_steps;      /* 0: not by steps */
    double every_minutes; /* 0: not by time */
    int keep_last;        /* >= 1 */
    int64_t keep_every;   /* 0: none kept for good */
    int async;            /* 1: write in the background */
    FILE *log;
    int progress;         /* 1: log's last line may be a progress bar, ended before a line between steps */
    anvil_ckpt_remote *remote; /* a host's uploader: where its checkpoint files go (NULL: nowhere, or not this rank) */
    const int *host_leader;    /* with uploads, every rank's host's uploader rank, one per rank (NULL: no uploads) */
} anvil_checkpointer_config;

/* This rank's part of a sharded checkpoint: shard g of k, its slices (copied
 * in the save call, so they need to stay valid only during it). */
typedef struct {
    int g, k;
    int writer; /* 1 on the first replica of the shard, the rank that writes it */
    const anvil_ckpt_slice *slices;
    int nslices;
} anvil_checkpointer_shard;

typedef struct anvil_checkpointer anvil_checkpointer;

/* What a checkpoint cost the training, known once its write completes. The cost is the time the
 * training thread spent in the save call (the snapshot, and for a synchronous save everything) and
 * waiting for the write at a later one, plus, over every step from the save until the write was found finished (cost_steps of them), the
 * step's time above base_ms, the median of the recent steps that no checkpoint overlapped, summed, when
 * that sum is positive: steps that come out faster than the median are noise, so that part is
 * clamped to 0 (the log line says so) and a cost is never below the time in the calls. A synchronous
 * save costs exactly its own time. */
typedef struct {
    int64_t step;
    int background;       /* 1: written by the writer thread while training went on */
    double write_ms;      /* synchronous: the whole save; background: the writer's part */
    double writer_cpu_ms; /* the CPU time the writer thread used (0 when synchronous) */
    double call_ms;       /* the training thread's time in the save call: background, the snapshot */
    double waited_ms;     /* background: the time it waited for the write at a later save call */
    double cost_ms;       /* NAN when no undisturbed step was timed yet to compare with */
    int cost_steps;
    double base_ms;       /* NAN when none */
    double sync_ms;       /* what a synchronous save of this checkpoint takes: */
    int64_t sync_step;    /* -1: estimated, as this checkpoint's save call plus its background write (high
                           * when the writer waited for the cores); otherwise measured, by the synchronous
                           * save of that step in this run (the latest) */
} anvil_checkpointer_report;

/* One per rank of the run. */
anvil_checkpointer *anvil_checkpointer_new(const anvil_checkpointer_config *cfg);
/* Waits for a write in flight; returns -1 if that (or any earlier background) write failed. A
 * sharded checkpoint whose shards were not all exchanged yet (only after an error elsewhere) is
 * abandoned, without collectives. */
int anvil_checkpointer_free(anvil_checkpointer *cp);
/* Whether the policy asks for a checkpoint after `step` completed steps, by this rank's clock
 * (ranks agree by going with rank 0's answer). */
int anvil_checkpointer_due(const anvil_checkpointer *cp, int64_t step);
/* Saves st. Replicated runs (shard NULL): rank 0's state is everyone's, and other ranks return 0
 * at once. Sharded runs: every rank calls it (collective), with its shard; st matters on rank 0.
 * Call it on the training thread, between steps: it copies the weights and moments with the
 * OpenMP threads. Asynchronously (the default), a writer thread then writes them while training
 * goes on; force_sync writes now too (for the last checkpoint and on a stop signal). A failed
 * background write is reported on the log and makes the step_done that finds it (or the next call,
 * or free) return -1. */
int anvil_checkpointer_save(anvil_checkpointer *cp, const anvil_ckpt_state *st, const anvil_checkpointer_shard *shard,
                            int force_sync);
/* Must be called on every rank, at the same point of every step (before the update): while a
 * sharded checkpoint is open, exchanges the ranks' shard states (collective) and has rank 0 commit
 * it once every shard is written. 1 when it did, 0 when no checkpoint was open, -1 on every rank
 * when a shard failed. */
int anvil_checkpointer_before_update(anvil_checkpointer *cp);
/* Must be called on every rank after every step, with the step's time (base: 1 when the step may
 * serve as an undisturbed baseline, 0 for warmup steps): counts the step against the checkpoint
 * in flight, or into the baseline when none is, and finishes a background write that has
 * completed, logging its cost. -1 when that write failed (logged as such). */
int anvil_checkpointer_step_done(anvil_checkpointer *cp, double step_ms, int base);
/* Checkpoints every every_steps steps counted from the last save (before the first, from from_step), in
 * place of the configured policy's multiples: --ckpt-every auto's interval, set anew as costs come in. */
void anvil_checkpointer_set_every(anvil_checkpointer *cp, int every_steps, int64_t from_step);
/* The next cost report of a completed checkpoint (rank 0 only; the oldest first): 1 with *rep
 * filled, 0 when there is none. */
int anvil_checkpointer_next_report(anvil_checkpointer *cp, anvil_checkpointer_report *rep);

#endif
