/* Choosing a run's layout, and what the layouts share. */
#include "train/layout.h"

#include <stdlib.h>
#include <unistd.h>

#include "core/error.h"
#include "dist/comm.h"
#include "dist/grid.h"

anvil_layout *anvil_layout_new(const anvil_train_config *c, const anvil_kernels *k) {
    anvil_layout *L = calloc(1, sizeof *L);
    if (!L) {
        anvil_fail("train: out of memory");
        return NULL;
    }
    L->c = c;
    L->k = k;
    L->rank = anvil_dist_rank();
    L->world = anvil_dist_world_size();
    L->data_rank = L->rank;
    L->data_ranks = L->world;
    int tp = c->tensor_parallel > 1 ? c->tensor_parallel : 1, pp = c->pipeline_parallel > 1 ? c->pipeline_parallel : 1;
    if (tp * pp > 1) {
        /* The ranks of one model replica share their batch: the data ranks are the data-parallel replicas. */
        anvil_grid g;
        anvil_grid_coords(&g, L->world, tp, pp, L->rank);
        L->data_rank = g.dp_rank;
        L->data_ranks = g.dp;
        L->ops = anvil_layout_grid_ops();
    } else {
        L->ops = anvil_layout_data_ops(c->zero_stage);
    }
    int64_t bt = (int64_t)c->B * c->T;
    L->accum = c->total_batch_tokens ? (int)(c->total_batch_tokens / (bt * L->data_ranks)) : 1;
    return L;
}

void anvil_layout_free(anvil_layout *L) {
    if (!L) return;
    if (L->ops) L->ops->free(L);
    if (L->have_model) anvil_model_free(&L->model);
    free(L);
}

static double current_rss_mb(void) {
    long pages = 0, resident = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    if (f) {
        if (fscanf(f, "%ld %ld", &pages, &resident) != 2) resident = 0;
        fclose(f);
    }
    return (double)resident * (double)sysconf(_SC_PAGESIZE) / 1048576.0;
}

int anvil_layout_report_memory(const anvil_layout *L, const char *layout, double state_bytes, double peak_rss_mb) {
    int world = L->world, rank = L->rank;
    double *v = calloc((size_t)world * 3, sizeof *v);
    if (!v) return anvil_fail("train: out of memory");
    v[3 * rank] = peak_rss_mb;
    v[3 * rank + 1] = current_rss_mb();
    v[3 * rank + 2] = state_bytes / 1048576.0;
    int rc = anvil_allreduce(anvil_dist_world(), v, (size_t)world * 3, ANVIL_F64, "memory report");
    if (!rc) {
        fprintf(L->c->log, "memory (%s):", layout);
        for (int r = 0; r < world; r++)
            fprintf(L->c->log, " rank %d %.0f MB peak RSS, %.0f MB RSS now, %.0f MB model state;", r, v[3 * r],
                    v[3 * r + 1], v[3 * r + 2]);
        fprintf(L->c->log, "\n");
    }
    free(v);
    return rc;
}
