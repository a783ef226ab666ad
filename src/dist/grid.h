/* The 3D grid: every rank of the world placed at (pp, dp, tp) coordinates,
 * with one named process group per axis.
 *
 * Rank order, from fastest- to slowest-varying: tensor parallel (TP), then
 * data parallel (DP), then pipeline parallel (PP):
 *
 *     rank = (pp * dp_size + dp) * tp_size + tp
 *
 * TP is innermost because it communicates every layer, forward and backward:
 * neighbouring ranks share a host under `anvil launch`, so its all-reduces
 * stay on shared memory. DP reduces gradients once per step and PP sends one
 * activation per micro-batch, so they tolerate the slower links between hosts.
 *
 * Every group is named after its axis and index ("tp group 3"), and every
 * collective carries that name, so a watchdog report of a hang says which
 * axis stalled. */
#ifndef ANVIL_DIST_GRID_H
#define ANVIL_DIST_GRID_H

#include "dist/comm.h"
#include "model/model.h"

typedef struct {
    int world, tp, dp, pp;          /* sizes; world = tp * dp * pp */
    int rank, tp_rank, dp_rank, pp_rank;
    anvil_group *tp_group, *dp_group, *pp_group;
} anvil_grid;

/* Whether world ranks can form a grid of --tp tp and --pp pp for model cfg: both at least 1, tp * pp
 * dividing world, no more stages than layers, and tp dividing what the model splits (anvil_model_tp_check: for
 * GPT-2 the heads and the padded vocabulary)
 * (tensor parallelism splits both). Allocates nothing, so a bad layout fails before any rank
 * commits memory. One-line error naming the option; returns 0 or -1 after anvil_fail. */
int anvil_grid_check(int world, int tp, int pp, const anvil_model_config *cfg);
/* Coordinates of rank in a grid of these sizes (no groups). */
void anvil_grid_coords(anvil_grid *g, int world, int tp, int pp, int rank);
/* Collective over world: checks the sizes (tp * pp must divide the world) and splits one group per
 * axis. Returns 0 or -1 after anvil_fail, with nothing left allocated. */
int anvil_grid_init(anvil_grid *g, anvil_group *world, int tp, int pp);
void anvil_grid_free(anvil_grid *g);

#endif
