/* How a run's model state is laid out over its ranks, behind one table of
 * operations, for the files of src/train alone. The trainer's step,
 * validation, saves and finish call these and never ask which layout runs.
 *
 * Three layouts implement it:
 *   - replicated (layout_data.c): one process, or data parallelism where every
 *     rank holds everything and gradients are all-reduced;
 *   - ZeRO (layout_data.c): stages 1-3 and MiCS, the rank's blocks of the
 *     moments (and gradients, and weights) through src/dist/dataparallel.h;
 *   - the grid (layout_grid.c): tensor and pipeline parallelism, with ZeRO-1 or
 *     MiCS on the data axis.
 *
 * A layout opens in three calls around the trainer's own setup: open (the
 * model, whole or sharded, fresh or from --init), resume (a checkpoint's
 * state, when the run resumes), start (what takes the resumed state over:
 * the data-parallel engine, the grid's ZeRO blocks). */
#ifndef ANVIL_TRAIN_LAYOUT_H
#define ANVIL_TRAIN_LAYOUT_H

#include <stdint.h>
#include <stdio.h>

#include "ckpt/checkpoint.h"
#include "ckpt/model_file.h"
#include "model/model.h"
#include "optim/optim.h"
#include "train/checkpointer.h"
#include "train/trainer.h"

typedef struct anvil_layout anvil_layout;

typedef struct {
    const char *name;
    /* The model and its optimizer, from the run's configuration (or --init). */
    int (*open)(anvil_layout *L);
    /* Prints what the layout is, after the model's line. */
    void (*describe)(anvil_layout *L, FILE *log);
    /* Restores weights and moments from checkpoint folder dir, every file of which the ranks verified
     * just now; man receives its manifest (the caller frees it). */
    int (*resume)(anvil_layout *L, const char *dir, anvil_ckpt_manifest *man);
    int (*start)(anvil_layout *L);

    /* One optimizer step: zero the gradients; the step's accum micro-batches x + i*B*T, y + i*B*T,
     * each contributing its share of the mean over the micro-batches and the data ranks (*loss_sum gets
     * the sum of their mean losses on this rank); the reductions that complete the gradients; the
     * update at lr, clipping the global norm at clip (0: none), *norm the norm before it. */
    int (*zero_grads)(anvil_layout *L);
    int (*micro_steps)(anvil_layout *L, const int32_t *x, const int32_t *y, double *loss_sum);
    int (*finish_grads)(anvil_layout *L);
    int (*step)(anvil_layout *L, float lr, float clip, float *norm);

    /* Evaluation: the mean loss of one micro-batch. Collective. */
    int (*forward)(anvil_layout *L, const int32_t *x, const int32_t *y, float *loss);
    /* The whole weights, for sampling: on rank 0 *whole is a model to read them from (free *gathered
     * with the model's kernels afterwards); the other ranks take part in the gathers and get
     * whole->params NULL. Collective. */
    int (*whole)(anvil_layout *L, anvil_model *whole, float **gathered);
    /* The final model file, written by rank 0. Collective. */
    int (*save_model)(anvil_layout *L, const char *path, const anvil_model_tokenizer *tok);
    /* A checkpoint of st (whose model, optimizer and layout fields the layout fills) through ckpt:
     * the layout's slices of the state, each rank its own. Collective. */
    int (*save_checkpoint)(anvil_layout *L, anvil_ckpt_state *st, anvil_checkpointer *ckpt, int force_sync);
    /* After the run: every rank's memory through the run's log on rank 0, and the share of the
     * training time spent waiting on communication (0 where it is not measured). Collective. */
    int (*report)(anvil_layout *L, double peak_rss_mb, double elapsed_s, double *comm_wait_share);
    /* Seconds so far waiting on communication that did not overlap, for the step's telemetry. */
    double (*comm_wait_s)(anvil_layout *L);
    void (*free)(anvil_layout *L);
} anvil_layout_ops;

struct anvil_layout {
    const anvil_layout_ops *ops;
    const anvil_train_config *c;
    const anvil_kernels *k;
    int rank, world;
    int data_rank, data_ranks; /* which slice of each global batch this rank reads, of how many */
    int accum;                 /* micro-batches per step */
    anvil_model model;         /* the whole model, or (on the grid) its configuration and layout only */
    int have_model;
    const anvil_adamw *opt;    /* the optimizer that steps (its update count goes into checkpoints) */
    void *impl;                /* the layout's own state */
};

/* The layout the configuration asks for, with its data ranks set; open it next. NULL after anvil_fail. */
anvil_layout *anvil_layout_new(const anvil_train_config *c, const anvil_kernels *k);
/* Frees a layout in any state (NULL too). */
void anvil_layout_free(anvil_layout *L);

/* Shared by the layouts: the memory line (rank 0 prints every rank's peak, current resident size and the
 * model state of the given bytes, the layout named) and a whole model of m's weights at params. */
int anvil_layout_report_memory(const anvil_layout *L, const char *layout, double state_bytes, double peak_rss_mb);
const anvil_layout_ops *anvil_layout_data_ops(int zero_stage);
const anvil_layout_ops *anvil_layout_grid_ops(void);

#endif
