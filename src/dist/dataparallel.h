/* Data parallelism over the ranks of a job, replicated or sharded.
 *
 *   stage 0  every rank holds everything; gradients are all-reduced (DDP)
 *   stage 1  AdamW moments sharded (ZeRO-1): all-reduce, update the own
 *            shard, all-gather the updated parameters
 *   stage 2  gradients sharded too (ZeRO-2): each unit's gradients are
 *            reduce-scattered as soon as the backward finishes them, into a
 *            small pool of unit buffers, and summed into the rank's shard
 *   stage 3  parameters sharded too (ZeRO-3): each unit is all-gathered
 *            right before the pass needs it (the next one prefetched) and
 *            its buffer reused right after
 *
 * The shards are cut per model unit (model/model.h): unit u's packed
 * parameters are split into shard-group-size nearly equal blocks, block g
 * going to group rank g. With MiCS (shard_group_size k < world) the model
 * state is sharded within groups of k consecutive ranks and replicated
 * across groups; gradients then travel in two hops, a reduce-scatter inside
 * the group and an all-reduce of the shard across the groups.
 *
 * The engine drives the model through its hooks, so the unit order of the
 * passes is the communication schedule: a unit's reduction starts while the
 * backward goes on with the layers below it. Gradient accumulation: stages 0
 * and 1 communicate only on the last micro-step of a step; stages 2 and 3
 * reduce-scatter every micro-step (the point of sharding gradients is that
 * no rank keeps them whole). */
#ifndef ANVIL_DIST_DATAPARALLEL_H
#define ANVIL_DIST_DATAPARALLEL_H

#include <stddef.h>

#include "dist/comm.h"
#include "model/model.h"
#include "optim/optim.h"

typedef struct {
    int zero_stage;       /* 0..3 */
    int shard_group_size; /* MiCS group size k; 0 means the whole world */
    anvil_adamw_config adamw;
} anvil_dp_config;

typedef struct anvil_dp anvil_dp;

/* Checks that the layout divides: k divides the world size, stage in 0..3. */
int anvil_dp_check(const anvil_dp_config *cfg, int world);

/* Takes over the model's parameter and gradient flow on every rank of the
 * world (collective). Rank 0's parameters are broadcast first so that every
 * replica starts identical. From stage 3 on, m->params is freed: only the
 * rank's shard stays. NULL after anvil_fail. */
anvil_dp *anvil_dp_new(anvil_model *m, const anvil_dp_config *cfg);
void anvil_dp_free(anvil_dp *dp);

/* Starts a step: clears the gradients (whole or sharded). */
int anvil_dp_begin_step(anvil_dp *dp);
/* Before each micro-step: whether it is the step's last (stages 0-1 only reduce then). */
void anvil_dp_set_last_micro(anvil_dp *dp, int last);
/* After the last micro-step: waits for every reduction. */
int anvil_dp_finish_grads(anvil_dp *dp);
/* Global-norm clipping and the AdamW update of stages 1-3 on the rank's
 * shard, by the rank's optimizer (at stage 0 every rank holds the whole
 * reduced gradient and steps a whole optimizer as one process does), then the
 * parameter all-gather of stages 1-2. *norm gets the norm before clipping. */
int anvil_dp_step(anvil_dp *dp, float lr, float max_norm, float *norm);

/* Writes the whole parameter vector (the model's flat layout) into flat on
 * every rank: all-gathers the shards from stage 3, copies otherwise. */
int anvil_dp_gather_params(anvil_dp *dp, float *flat);

/* Checkpoints of sharded runs. The rank's shard is a list of slices of the
 * flat layout: slice i covers [flat, flat+len) of parameter tensor `tensor`;
 * its moments are at m and v and, at stage 3, its weights at p (else NULL). */
int anvil_dp_num_slices(const anvil_dp *dp);
void anvil_dp_slice(const anvil_dp *dp, int i, int *tensor, size_t *flat, size_t *len, const float **m,
                    const float **v, const float **p);
/* The shard this rank holds: number g of k; writer is 1 on the first replica
 * of each shard (the ranks that save it). */
void anvil_dp_shard_id(const anvil_dp *dp, int *g, int *k, int *writer);
/* Stages 1-3: the optimizer of the rank's blocks (its moments and update
 * count are what checkpoints save); NULL at stage 0. */
anvil_adamw *anvil_dp_optimizer(anvil_dp *dp);
/* Stages 1-3: takes this rank's part of a whole optimizer's moments (a
 * checkpoint of any layout, put back together) and its update count. */
void anvil_dp_set_moments(anvil_dp *dp, const anvil_adamw *whole);

typedef struct {
    int zero_stage, shard_group_size, shard_rank, replicas;
    size_t shard_elems;    /* parameters in this rank's shard */
    double state_bytes;    /* bytes this rank keeps for parameters, gradients and moments (pools included) */
    double comm_wait_s;    /* time the training thread spent waiting for communication, cumulative */
} anvil_dp_info;

void anvil_dp_get_info(const anvil_dp *dp, anvil_dp_info *info);

#endif
