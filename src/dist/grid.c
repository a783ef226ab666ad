#include "dist/grid.h"

#include <stdio.h>
#include <string.h>

#include "core/error.h"

int anvil_grid_check(int world, int tp, int pp, const anvil_model_config *cfg) {
    if (tp < 1) return anvil_fail("grid: --tp %d must be at least 1", tp);
    if (pp < 1) return anvil_fail("grid: --pp %d must be at least 1", pp);
    if (world % (tp * pp))
        return anvil_fail("grid: %d ranks cannot be divided into --tp %d x --pp %d (%d ranks per data-parallel "
                          "replica)",
                          world, tp, pp, tp * pp);
    if (!cfg) return 0;
    if (pp > cfg->n_layer)
        return anvil_fail("grid: --pp %d makes more pipeline stages than the model's %d layers", pp, cfg->n_layer);
    if (anvil_model_tp_check(cfg, tp)) {
        char why[512];
        snprintf(why, sizeof why, "%s", anvil_errmsg());
        return anvil_fail("grid: %s", why);
    }
    return 0;
}

void anvil_grid_coords(anvil_grid *g, int world, int tp, int pp, int rank) {
    memset(g, 0, sizeof *g);
    g->world = world;
    g->tp = tp;
    g->pp = pp;
    g->dp = world / (tp * pp);
    g->rank = rank;
    g->tp_rank = rank % tp;
    g->dp_rank = rank / tp % g->dp;
    g->pp_rank = rank / (tp * g->dp);
}

int anvil_grid_init(anvil_grid *g, anvil_group *world, int tp, int pp) {
    int n = anvil_group_size(world);
    if (anvil_grid_check(n, tp, pp, NULL)) return -1;
    anvil_grid_coords(g, n, tp, pp, anvil_group_rank(world));
    /* Each group's index is its position among the groups of its axis: the coordinates on the other two
     * axes, slower one first. */
    int tp_idx = g->pp_rank * g->dp + g->dp_rank;
    int dp_idx = g->pp_rank * g->tp + g->tp_rank;
    int pp_idx = g->dp_rank * g->tp + g->tp_rank;
    char name[32];
    snprintf(name, sizeof name, "tp group %d", tp_idx);
    g->tp_group = anvil_group_split(world, tp_idx, g->tp_rank, name);
    snprintf(name, sizeof name, "dp group %d", dp_idx);
    g->dp_group = anvil_group_split(world, dp_idx, g->dp_rank, name);
    snprintf(name, sizeof name, "pp group %d", pp_idx);
    g->pp_group = anvil_group_split(world, pp_idx, g->pp_rank, name);
    if (!g->tp_group || !g->dp_group || !g->pp_group) {
        anvil_grid_free(g);
        return -1;
    }
    return 0;
}

void anvil_grid_free(anvil_grid *g) {
    anvil_group_free(g->tp_group);
    anvil_group_free(g->dp_group);
    anvil_group_free(g->pp_group);
    g->tp_group = g->dp_group = g->pp_group = NULL;
}
