/* Pipeline parallelism over the PP axis of the grid (dist/grid.h), for any
 * model family (the stages' passes are the model's own; model/model.h). For
 * GPT-2:
 *
 * Stage s of P holds layers [s*L/P, (s+1)*L/P), each stage a tensor-parallel
 * shard over its TP group (dist/tensorparallel.h); the first stage also
 * embeds, the last also holds the final LayerNorm and the loss, and both
 * hold wte (tied), whose gradients are all-reduced between them after the
 * micro-batches. A step runs m micro-batches: each stage receives a
 * micro-batch's input activation [B,T,C] from the previous stage, computes,
 * sends its output on; backwards, the output's gradient comes from the next
 * stage and the input's goes to the previous. Sends are non-blocking and
 * overlap the stage's next computation; a receive is posted right before
 * its data is needed.
 *
 * Schedules: GPipe runs every forward, then every backward, and holds all m
 * micro-batches' activations. 1F1B runs P-s-1 forwards to fill the pipe,
 * then alternates one forward and one backward, then drains: stage s holds
 * at most P-s micro-batches. Both run the backwards in micro-batch order,
 * so they accumulate the same gradients in the same order and give
 * identical weights. Point-to-point traffic per step: 2*B*T*C floats per
 * micro-batch per stage boundary, from each TP rank (under sequence
 * parallelism only its 1/tp of the tokens, sent to the next stage's rank of
 * the same TP index). */
#ifndef ANVIL_DIST_PIPELINE_H
#define ANVIL_DIST_PIPELINE_H

#include <stdint.h>

#include "dist/grid.h"
#include "dist/tensorparallel.h"

typedef enum { ANVIL_PP_GPIPE, ANVIL_PP_1F1B } anvil_pp_schedule;

typedef struct anvil_pp anvil_pp;

/* This rank's stage of cfg on the grid, for steps of `micro` micro-batches. Collective over the
 * grid's PP groups (it splits the group that ties wte). cfg must pass anvil_grid_check. Returns
 * NULL after anvil_fail. */
anvil_pp *anvil_pp_new(const anvil_model_config *cfg, const anvil_kernels *k, const anvil_grid *grid, int micro,
                       anvil_pp_schedule schedule);
void anvil_pp_free(anvil_pp *p);
/* The stage's shard: parameters, gradients, layout, anvil_tp_shard and anvil_tp_gather_tensor. */
anvil_tp *anvil_pp_stage(anvil_pp *p);
void anvil_pp_layers(const anvil_pp *p, int *l0, int *l1);

/* One step's gradients: micro-batch i is inputs/targets + i*B*T (every rank passes all of them);
 * accumulates the gradient of grad_scale times the mean over micro-batches of their mean loss, and
 * sets *loss to that mean on every rank. Collective over the grid's PP and TP groups. */
int anvil_pp_forward_backward(anvil_pp *p, const int32_t *inputs, const int32_t *targets, int B, int T,
                              float grad_scale, float *loss);
/* Evaluation: one micro-batch forward through the stages; *loss on every rank. Collective. */
int anvil_pp_forward(anvil_pp *p, const int32_t *inputs, const int32_t *targets, int B, int T, float *loss);
/* Tensor i of the whole model from every stage's TP shards (local: the stage's local parameters),
 * into whole (host memory, the tensor's size): anvil_tp_gather_tensor within the stage, then a sum
 * over the stages, each having written only what it owns over zeros. Collective over the TP and PP
 * groups. 0 or -1 after anvil_fail. */
int anvil_pp_gather_tensor(anvil_pp *p, int i, const float *local, float *whole);
/* The whole model's squared gradient norm, every tensor counted once. Collective. */
int anvil_pp_grad_sumsq(anvil_pp *p, double *sumsq);
/* The most micro-batches whose activations this stage held at once, over every step so far. */
int anvil_pp_max_in_flight(const anvil_pp *p);
/* Bytes this rank has sent to neighbouring stages so far. */
uint64_t anvil_pp_bytes_sent(const anvil_pp *p);
/* Seconds this rank spent in the training steps' schedules so far (from its first micro-batch to
 * its last send completing), and of those the seconds blocked waiting on a neighbour: a receive,
 * or a send not yet taken. Their ratio is the stage's idle share, the bubble (P-1)/(m+P-1) when
 * stages take equal time and communication is free. */
void anvil_pp_idle(const anvil_pp *p, double *idle_s, double *schedule_s);

#endif
