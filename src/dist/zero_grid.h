/* ZeRO-1 and MiCS on the data axis of the 3D grid (dist/grid.h).
 *
 * The ranks of one DP group hold the same TP/PP-local shard of the model
 * (dist/tensorparallel.h): the same flat parameter buffer of n floats. With
 * ZeRO-1 that buffer is cut into k nearly equal contiguous blocks, block g
 * going to the rank at position g of its shard group, and each rank keeps the
 * AdamW moments of its block only and updates only that block:
 *
 *   1. gradients are reduce-scattered over the shard group, so each rank
 *      receives the sum of its block, then (MiCS) all-reduced across the
 *      shard groups, on the block only;
 *   2. the rank updates its block;
 *   3. the updated blocks are all-gathered over the shard group, leaving
 *      every rank with the whole local parameter buffer again.
 *
 * k is --shard-group-size (0: the whole DP group). With MiCS (k < DP) the
 * shard groups are k consecutive DP ranks, and ranks at the same position in
 * different groups are replicas of one block. What is sharded is the
 * optimizer state (the moments) and the reduced gradient; parameters stay
 * whole on every rank of the DP group, as ZeRO-1 keeps them, so the forward
 * and backward of tensor and pipeline parallelism are untouched. ZeRO-2 and
 * ZeRO-3 do not combine with the grid.
 *
 * The gradient norm for clipping is summed once over the grid: over a rank's
 * block only (the blocks of a shard group tile the buffer), tensors split by
 * TP on every TP rank and replicated ones on TP rank 0 only, tensors a
 * pipeline stage holds but does not own (the tied wte on the last stage) not
 * at all, and only by the first replica of each block. */
#ifndef ANVIL_DIST_ZERO_GRID_H
#define ANVIL_DIST_ZERO_GRID_H

#include "dist/grid.h"
#include "dist/tensorparallel.h"
#include "optim/optim.h"

typedef struct anvil_zg anvil_zg;

/* Whether --zero zero_stage and --shard-group-size k combine with a grid of dp data-parallel
 * ranks: stage 1 only, and k (0: dp) dividing dp. Returns 0 or -1 after anvil_fail. */
int anvil_zg_check(int zero_stage, int shard_group_size, int dp);

/* ZeRO-1 for the local shard tp of this rank of grid g (collective over its DP group): the rank's
 * block takes its part of local's moments and update count (an optimizer of tp's whole local
 * buffers, anvil_adamw_init_whole over anvil_tp_offsets), which the caller may then free.
 * NULL after anvil_fail. */
anvil_zg *anvil_zg_new(const anvil_grid *g, anvil_tp *tp, int shard_group_size, const anvil_adamw *local);
void anvil_zg_free(anvil_zg *z);

/* After a step's last micro-batch: reduces the rank's block of the local gradients over the DP
 * group (the rest of the gradient buffer is left unreduced). Collective. */
int anvil_zg_reduce_grads(anvil_zg *z);
/* Global-norm clipping (collective over the world), the update of the rank's block, and the
 * all-gather of the updated parameters. *norm gets the norm before clipping. */
int anvil_zg_step(anvil_zg *z, float lr, float max_norm, float *norm);
/* The whole local moments (n floats each, backend memory) from the blocks of the shard group, on
 * every rank of it. Collective. */
int anvil_zg_gather_moments(anvil_zg *z, float *m, float *v);
/* The optimizer of the rank's block: its moments and update count. */
anvil_adamw *anvil_zg_optimizer(anvil_zg *z);
/* The shard group's size k and the rank's position in it. */
void anvil_zg_shard(const anvil_zg *z, int *g, int *k);

#endif
