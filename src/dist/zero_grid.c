#include "dist/zero_grid.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"

struct anvil_zg {
    anvil_tp *tp;
    const anvil_kernels *k;
    anvil_group *world, *shard, *replica; /* shard: the DP group or a split of it; replica: NULL without MiCS */
    int own_shard;                        /* shard was split here */
    int srank, ssize, first_replica, tp_rank;
    size_t n, *counts, own_off; /* the local buffer, the blocks' sizes, this rank's block */
    float *recv;                /* the reduce-scatter's block */
    anvil_adamw opt;
};

int anvil_zg_check(int zero_stage, int shard_group_size, int dp) {
    if (zero_stage > 1)
        return anvil_fail("train: --zero %d does not combine with --tp or --pp (ZeRO-1 and MiCS do)", zero_stage);
    int k = shard_group_size ? shard_group_size : dp;
    if (k < 1 || dp % k)
        return anvil_fail("train: --shard-group-size %d does not divide the %d data-parallel ranks of the grid",
                          shard_group_size, dp);
    return 0;
}

/* The rank's block as optimizer segments, one per tensor it overlaps; weight decay as the tensor
 * takes it. */
static int init_optimizer(anvil_zg *z, const anvil_adamw_config *cfg) {
    const size_t *off = anvil_tp_offsets(z->tp);
    size_t a = z->own_off, b = a + z->counts[z->srank];
    const anvil_model *m = anvil_tp_model(z->tp);
    anvil_adamw_segment segs[ANVIL_MODEL_MAX_TENSORS];
    int nsegs = 0;
    for (int i = 0; i < m->ntensors; i++) {
        size_t lo = a > off[i] ? a : off[i], hi = b < off[i + 1] ? b : off[i + 1];
        if (lo < hi)
            segs[nsegs++] = (anvil_adamw_segment){lo, lo, lo - a, hi - lo, anvil_model_tensor_decays(&m->cfg, i)};
    }
    return anvil_adamw_init(&z->opt, z->k, cfg, segs, nsegs, b - a);
}

anvil_zg *anvil_zg_new(const anvil_grid *g, anvil_tp *tp, int shard_group_size, const anvil_adamw *local) {
    if (anvil_zg_check(1, shard_group_size, g->dp)) return NULL;
    anvil_zg *z = calloc(1, sizeof *z);
    if (!z) {
        anvil_fail("dist: out of memory");
        return NULL;
    }
    z->tp = tp;
    z->k = local->k;
    z->world = anvil_dist_world();
    z->tp_rank = g->tp_rank;
    int k = shard_group_size ? shard_group_size : g->dp;
    z->shard = g->dp_group;
    z->first_replica = 1;
    if (k < g->dp) {
        /* Groups of k consecutive DP ranks share the optimizer state; the same position in every
         * group holds the same block. Named after the DP group they split. */
        char name[64];
        snprintf(name, sizeof name, "%s shard %d", anvil_group_name(g->dp_group), g->dp_rank / k);
        z->shard = anvil_group_split(g->dp_group, g->dp_rank / k, g->dp_rank % k, name);
        z->own_shard = 1;
        snprintf(name, sizeof name, "%s replica %d", anvil_group_name(g->dp_group), g->dp_rank % k);
        z->replica = anvil_group_split(g->dp_group, g->dp_rank % k, g->dp_rank / k, name);
        if (!z->shard || !z->replica) goto fail;
        z->first_replica = g->dp_rank / k == 0;
    }
    z->srank = anvil_group_rank(z->shard);
    z->ssize = k;
    z->n = anvil_tp_num_params(tp);
    if (!(z->counts = calloc((size_t)k, sizeof *z->counts))) {
        anvil_fail("dist: out of memory");
        goto fail;
    }
    size_t off = 0;
    for (int r = 0; r < k; off += z->counts[r], r++) {
        z->counts[r] = z->n / (size_t)k + ((size_t)r < z->n % (size_t)k);
        if (r == z->srank) z->own_off = off;
    }
    size_t own = z->counts[z->srank];
    if (!(z->recv = z->k->alloc((own ? own : 1) * sizeof(float)))) {
        anvil_fail("dist: cannot allocate the ZeRO-1 gradient block (%zu floats)", own);
        goto fail;
    }
    if (init_optimizer(z, &local->cfg)) goto fail;
    z->k->copy(z->opt.m, local->m + z->own_off, own);
    z->k->copy(z->opt.v, local->v + z->own_off, own);
    z->opt.t = local->t;
    return z;
fail:
    anvil_zg_free(z);
    return NULL;
}

void anvil_zg_free(anvil_zg *z) {
    if (!z) return;
    anvil_adamw_free(&z->opt);
    if (z->recv) z->k->free(z->recv);
    if (z->own_shard) anvil_group_free(z->shard);
    anvil_group_free(z->replica);
    free(z->counts);
    free(z);
}

int anvil_zg_reduce_grads(anvil_zg *z) {
    float *grads = anvil_tp_grads(z->tp);
    size_t own = z->counts[z->srank];
    if (anvil_reduce_scatter(z->shard, grads, z->recv, z->counts, ANVIL_F32, "gradients") ||
        (z->replica && anvil_allreduce(z->replica, z->recv, own, ANVIL_F32, "gradients")))
        return -1;
    z->k->copy(grads + z->own_off, z->recv, own);
    return 0;
}

int anvil_zg_step(anvil_zg *z, float lr, float max_norm, float *norm) {
    float *grads = anvil_tp_grads(z->tp), *params = anvil_tp_params(z->tp);
    const size_t *off = anvil_tp_offsets(z->tp);
    double ss = 0.0;
    if (z->first_replica) {
        for (int s = 0; s < z->opt.nsegs; s++) {
            const anvil_adamw_segment *g = &z->opt.segs[s];
            int i = 0;
            while (off[i + 1] <= g->grad) i++;
            if (anvil_tp_owns(z->tp, i) && (anvil_tp_is_split(z->tp, i) || z->tp_rank == 0))
                ss += z->k->sumsq(grads + g->grad, g->len);
        }
    }
    if (anvil_allreduce(z->world, &ss, 1, ANVIL_F64, "gradient norm")) return -1;
    *norm = anvil_adamw_step(&z->opt, params, grads, ss, max_norm, lr);
    return anvil_allgather(z->shard, params + z->own_off, params, z->counts, ANVIL_F32, "updated parameters");
}

int anvil_zg_gather_moments(anvil_zg *z, float *m, float *v) {
    return anvil_allgather(z->shard, z->opt.m, m, z->counts, ANVIL_F32, "moments for saving") ||
                   anvil_allgather(z->shard, z->opt.v, v, z->counts, ANVIL_F32, "moments for saving")
               ? -1
               : 0;
}

anvil_adamw *anvil_zg_optimizer(anvil_zg *z) { return &z->opt; }

void anvil_zg_shard(const anvil_zg *z, int *g, int *k) {
    *g = z->srank;
    *k = z->ssize;
}
