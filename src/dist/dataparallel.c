#include "dist/dataparallel.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/clock.h"
#include "core/error.h"

/* A slice of the rank's shard: len elements of tensor `tensor`, at `flat`
 * in the model's flat layout and at `shard` in the rank's shard arrays. */
typedef struct {
    int tensor;
    size_t flat, shard, len;
} dp_seg;

/* A unit-sized buffer of a pool, with the collective that fills or drains it. */
typedef struct {
    float *buf;
    float *recv; /* the reduce-scatter's block (gradient slots) */
    int unit;    /* the unit it holds, -1 none */
    int in_use;  /* handed to the model and not yet put back */
    anvil_req *req[2];
    double order; /* submission order, to drain the oldest first */
} dp_slot;

enum { NSLOT = 3 }; /* the head's, and two for layers so one fills while one is used */

struct anvil_dp {
    anvil_model *m;
    const anvil_kernels *k;
    anvil_dp_config cfg;
    anvil_group *world, *shard, *replica; /* replica: NULL when the shard group is the world */
    int world_size, srank, ssize;
    int nunits;
    size_t *usize;    /* packed size of each unit */
    size_t *counts;   /* [nunits][ssize]: block sizes */
    size_t *own_off;  /* packed offset of this rank's block within each unit */
    size_t *shard_at; /* offset of each unit's block within the shard arrays */
    size_t shard_n, max_unit, max_layer; /* the largest unit, and the largest layer unit */
    dp_seg *segs;
    int nsegs;
    float *sgrad, *sparam; /* shard arrays, per stage */
    anvil_adamw opt;       /* stages 1-3: the update of the rank's blocks, with their moments */
    float *gather;     /* stages 1-2: one unit, packed, for the parameter all-gather */
    int gather_owned;  /* stage 2 borrows the largest gradient slot instead */
    anvil_model_hooks hooks;
    dp_slot gslots[NSLOT], pslots[NSLOT];
    anvil_req **pending; /* stages 0-1: this step's all-reduces */
    int npending, cappending;
    int last_micro, backward;
    double order, wait_s;
    double bytes; /* allocated here, for the memory report */
};

static size_t *unit_counts(anvil_dp *dp, int u) { return dp->counts + (size_t)u * dp->ssize; }

int anvil_dp_check(const anvil_dp_config *cfg, int world) {
    if (cfg->zero_stage < 0 || cfg->zero_stage > 3) return anvil_fail("dist: --zero must be 0, 1, 2 or 3, got %d", cfg->zero_stage);
    int k = cfg->shard_group_size ? cfg->shard_group_size : world;
    if (k < 1 || world % k)
        return anvil_fail("dist: --shard-group-size %d does not divide the world size %d", cfg->shard_group_size,
                          world);
    if (cfg->shard_group_size && cfg->zero_stage == 0)
        return anvil_fail("dist: --shard-group-size needs --zero 1, 2 or 3 (stage 0 shards nothing)");
    return 0;
}

static int wait_req(anvil_dp *dp, anvil_req **r) {
    if (!*r) return 0;
    double t0 = anvil_now();
    int rc = anvil_wait(*r);
    dp->wait_s += anvil_now() - t0;
    *r = NULL;
    return rc;
}

static void pack(const anvil_model *m, int u, const float *flat, float *packed) {
    anvil_model_range r[ANVIL_MODEL_MAX_TENSORS];
    int n = anvil_model_unit_ranges(m, u, r);
    for (int i = 0; i < n; i++) {
        m->k->copy(packed, flat + r[i].offset, r[i].len);
        packed += r[i].len;
    }
}

static void unpack(const anvil_model *m, int u, const float *packed, float *flat) {
    anvil_model_range r[ANVIL_MODEL_MAX_TENSORS];
    int n = anvil_model_unit_ranges(m, u, r);
    for (int i = 0; i < n; i++) {
        m->k->copy(flat + r[i].offset, packed, r[i].len);
        packed += r[i].len;
    }
}

/* The layout: block sizes per unit, the rank's blocks, and its segments. */
static int plan(anvil_dp *dp) {
    anvil_model *m = dp->m;
    int U = dp->nunits, S = dp->ssize;
    dp->usize = calloc((size_t)U, sizeof(size_t));
    dp->counts = calloc((size_t)U * S, sizeof(size_t));
    dp->own_off = calloc((size_t)U, sizeof(size_t));
    dp->shard_at = calloc((size_t)U, sizeof(size_t));
    dp->segs = calloc((size_t)U * ANVIL_MODEL_MAX_TENSORS, sizeof(dp_seg));
    if (!dp->usize || !dp->counts || !dp->own_off || !dp->shard_at || !dp->segs)
        return anvil_fail("dist: out of memory for the shard plan");
    for (int u = 0; u < U; u++) {
        size_t n = anvil_model_unit_size(m, u), *c = unit_counts(dp, u), off = 0;
        dp->usize[u] = n;
        if (n > dp->max_unit) dp->max_unit = n;
        if (u > 0 && n > dp->max_layer) dp->max_layer = n;
        for (int g = 0; g < S; g++) {
            c[g] = n / (size_t)S + ((size_t)g < n % (size_t)S);
            if (g == dp->srank) dp->own_off[u] = off;
            off += c[g];
        }
        dp->shard_at[u] = dp->shard_n;
        size_t a = dp->own_off[u], b = a + c[dp->srank], p = 0;
        anvil_model_range r[ANVIL_MODEL_MAX_TENSORS];
        int nr = anvil_model_unit_ranges(m, u, r);
        for (int i = 0; i < nr; i++) {
            size_t lo = a > p ? a : p, hi = b < p + r[i].len ? b : p + r[i].len;
            if (lo < hi)
                dp->segs[dp->nsegs++] = (dp_seg){r[i].tensor, r[i].offset + (lo - p), dp->shard_n + (lo - a), hi - lo};
            p += r[i].len;
        }
        dp->shard_n += c[dp->srank];
    }
    return 0;
}

/* ---- the hooks ---- */

static int sharded_grads(const anvil_dp *dp) { return dp->cfg.zero_stage >= 2; }

/* Completes a gradient slot's reduction and adds its block to the shard. */
static int drain_gslot(anvil_dp *dp, dp_slot *s) {
    if (s->unit < 0 || s->in_use) return 0;
    int rc = wait_req(dp, &s->req[0]);
    if (wait_req(dp, &s->req[1])) rc = -1;
    if (rc) return -1;
    size_t n = unit_counts(dp, s->unit)[dp->srank];
    float *dst = dp->sgrad + dp->shard_at[s->unit];
    for (size_t i = 0; i < n; i++) dst[i] += s->recv[i];
    s->unit = -1;
    return 0;
}

static dp_slot *free_slot(anvil_dp *dp, dp_slot *slots, int (*drain)(anvil_dp *, dp_slot *)) {
    /* Slot 0 is the head's; layers use the others, oldest first. */
    dp_slot *best = NULL;
    for (int i = 1; i < NSLOT; i++) {
        dp_slot *s = &slots[i];
        if (s->in_use) continue;
        if (!best || s->order < best->order) best = s;
    }
    if (!best) {
        anvil_fail("dist: no free unit buffer (a unit was fetched twice without being put back)");
        return NULL;
    }
    if (drain(dp, best)) return NULL;
    return best;
}

static int hook_get_grads(void *ctx, int u, anvil_model_view *v) {
    anvil_dp *dp = ctx;
    if (u == 0) dp->backward = 1;
    if (!sharded_grads(dp)) {
        anvil_model_view_flat(dp->m, u, dp->m->grads, v);
        return 0;
    }
    dp_slot *s = u == 0 ? &dp->gslots[0] : free_slot(dp, dp->gslots, drain_gslot);
    if (!s || (u == 0 && drain_gslot(dp, s))) return -1;
    s->unit = u;
    s->in_use = 1;
    dp->k->zero(s->buf, dp->usize[u] * sizeof(float));
    anvil_model_view_packed(dp->m, u, s->buf, v);
    return 0;
}

static int hook_put_grads(void *ctx, int u) {
    anvil_dp *dp = ctx;
    char what[48];
    snprintf(what, sizeof what, "gradients of unit %d", u);
    if (!sharded_grads(dp)) {
        if (!dp->last_micro) return 0;
        anvil_model_range r[ANVIL_MODEL_MAX_TENSORS];
        int n = anvil_model_unit_ranges(dp->m, u, r);
        for (int i = 0; i < n; i++) {
            if (dp->npending == dp->cappending) {
                int cap = dp->cappending ? 2 * dp->cappending : 64;
                anvil_req **p = realloc(dp->pending, (size_t)cap * sizeof *p);
                if (!p) return anvil_fail("dist: out of memory for requests");
                dp->pending = p;
                dp->cappending = cap;
            }
            anvil_req *q = anvil_iallreduce(dp->world, dp->m->grads + r[i].offset, r[i].len, ANVIL_F32, what);
            if (!q) return -1;
            dp->pending[dp->npending++] = q;
        }
        return 0;
    }
    dp_slot *s = NULL;
    for (int i = 0; i < NSLOT; i++)
        if (dp->gslots[i].in_use && dp->gslots[i].unit == u) s = &dp->gslots[i];
    if (!s) return anvil_fail("dist: gradients of unit %d put back without being fetched", u);
    s->in_use = 0;
    s->order = ++dp->order;
    s->req[0] = anvil_ireduce_scatter(dp->shard, s->buf, s->recv, unit_counts(dp, u), ANVIL_F32, what);
    if (!s->req[0]) return -1;
    if (dp->replica) {
        s->req[1] = anvil_iallreduce(dp->replica, s->recv, unit_counts(dp, u)[dp->srank], ANVIL_F32, what);
        if (!s->req[1]) return -1;
    }
    return 0;
}

/* Stage 3: lets a parameter slot be refilled once its gather has landed. */
static int drain_pslot(anvil_dp *dp, dp_slot *s) {
    int rc = wait_req(dp, &s->req[0]);
    s->unit = -1;
    return rc;
}

/* Stage 3: starts gathering unit u into slot s. */
static int start_gather(anvil_dp *dp, dp_slot *s, int u) {
    char what[48];
    snprintf(what, sizeof what, "parameters of unit %d", u);
    s->unit = u;
    s->order = ++dp->order;
    s->req[0] = anvil_iallgather(dp->shard, dp->sparam + dp->shard_at[u], s->buf, unit_counts(dp, u), ANVIL_F32, what);
    return s->req[0] ? 0 : -1;
}

static int hook_get_params(void *ctx, int u, anvil_model_view *v) {
    anvil_dp *dp = ctx;
    if (dp->cfg.zero_stage < 3) {
        anvil_model_view_flat(dp->m, u, dp->m->params, v);
        return 0;
    }
    dp_slot *s = NULL;
    if (u == 0) {
        s = &dp->pslots[0];
        if (s->unit != 0 && start_gather(dp, s, 0)) return -1;
    } else {
        for (int i = 1; i < NSLOT; i++)
            if (dp->pslots[i].unit == u) s = &dp->pslots[i];
        if (!s) {
            if (!(s = free_slot(dp, dp->pslots, drain_pslot)) || start_gather(dp, s, u)) return -1;
        }
    }
    if (wait_req(dp, &s->req[0])) return -1;
    s->in_use = 1;
    anvil_model_view_packed(dp->m, u, s->buf, v);
    /* Prefetch the unit the pass needs next while this one computes. */
    int next = u == 0 ? (dp->backward ? -1 : 1) : dp->backward ? u - 1 : u + 1;
    if (next >= 1 && next < dp->nunits) {
        int have = 0;
        for (int i = 1; i < NSLOT; i++) have |= dp->pslots[i].unit == next;
        if (!have) {
            dp_slot *f = NULL;
            for (int i = 1; i < NSLOT; i++)
                if (!dp->pslots[i].in_use && (!f || dp->pslots[i].order < f->order)) f = &dp->pslots[i];
            if (f && (drain_pslot(dp, f) || start_gather(dp, f, next))) return -1;
        }
    }
    return 0;
}

static int hook_put_params(void *ctx, int u) {
    anvil_dp *dp = ctx;
    if (dp->cfg.zero_stage < 3) return 0;
    for (int i = 0; i < NSLOT; i++)
        if (dp->pslots[i].unit == u && dp->pslots[i].in_use) dp->pslots[i].in_use = 0;
    /* The head is put back last: the pass is over. Every gathered copy is
     * dropped, because the update that follows changes the shards. */
    if (u == 0) {
        dp->backward = 0;
        for (int i = 0; i < NSLOT; i++)
            if (drain_pslot(dp, &dp->pslots[i])) return -1;
    }
    return 0;
}

/* ---- setup ---- */

/* The rank's blocks as the optimizer's segments: weights in the flat layout
 * below stage 3 and in the shard after, gradients in the flat layout at
 * stage 1 and in the shard after, moments in the shard. */
static int init_optimizer(anvil_dp *dp) {
    int st = dp->cfg.zero_stage;
    anvil_adamw_segment *segs = malloc((size_t)(dp->nsegs ? dp->nsegs : 1) * sizeof *segs);
    if (!segs) return anvil_fail("dist: out of memory for the shard plan");
    for (int i = 0; i < dp->nsegs; i++) {
        const dp_seg *g = &dp->segs[i];
        segs[i] = (anvil_adamw_segment){st == 3 ? g->shard : g->flat, st == 1 ? g->flat : g->shard, g->shard, g->len,
                                        anvil_model_tensor_decays(&dp->m->cfg, g->tensor)};
    }
    int rc = anvil_adamw_init(&dp->opt, dp->k, &dp->cfg.adamw, segs, dp->nsegs, dp->shard_n);
    free(segs);
    if (!rc) dp->bytes += 2.0 * sizeof(float) * (double)(dp->shard_n ? dp->shard_n : 1);
    return rc;
}

/* At least one element, so that a rank owning nothing of a small unit still gets a valid buffer. */
static float *alloc_f(anvil_dp *dp, size_t n) {
    if (!n) n = 1;
    float *p = dp->k->alloc(n * sizeof(float));
    if (p) dp->bytes += (double)n * sizeof(float);
    return p;
}

anvil_dp *anvil_dp_new(anvil_model *m, const anvil_dp_config *cfg) {
    anvil_group *world = anvil_dist_world();
    if (!world) {
        anvil_fail("dist: data parallelism before anvil_dist_init");
        return NULL;
    }
    int W = anvil_group_size(world);
    if (anvil_dp_check(cfg, W)) return NULL;
    anvil_dp *dp = calloc(1, sizeof *dp);
    if (!dp) {
        anvil_fail("dist: out of memory");
        return NULL;
    }
    dp->m = m;
    dp->k = m->k;
    dp->cfg = *cfg;
    dp->world = world;
    dp->world_size = W;
    int k = cfg->zero_stage == 0 ? W : cfg->shard_group_size ? cfg->shard_group_size : W;
    int me = anvil_group_rank(world);
    if (k == W) {
        dp->shard = world;
    } else {
        /* Groups of k consecutive ranks share the model state; ranks with the
         * same position in their group hold the same shard. */
        dp->shard = anvil_group_split(world, me / k, me % k, "shard");
        dp->replica = anvil_group_split(world, me % k, me / k, "replica");
        if (!dp->shard || !dp->replica) goto fail;
    }
    dp->srank = cfg->zero_stage == 0 ? 0 : anvil_group_rank(dp->shard);
    dp->ssize = cfg->zero_stage == 0 ? 1 : anvil_group_size(dp->shard);
    dp->nunits = anvil_model_num_units(&m->cfg);
    for (int i = 0; i < NSLOT; i++) dp->gslots[i].unit = dp->pslots[i].unit = -1;
    if (plan(dp)) goto fail;
    if (anvil_broadcast(world, m->params, m->nparams, ANVIL_F32, 0, "initial parameters")) goto fail;

    int st = cfg->zero_stage;
    if (st >= 1 && init_optimizer(dp)) goto fail;
    if (st == 1) {
        if (!(dp->gather = alloc_f(dp, dp->max_unit))) goto oom;
        dp->gather_owned = 1;
    }
    if (st >= 2) {
        if (dp->shard_n && !(dp->sgrad = alloc_f(dp, dp->shard_n))) goto oom;
        /* Slot 0 holds the head for the whole backward; the layers share the
         * other two, sized for a layer, not for the (much larger) head. */
        size_t layer_block = 0;
        for (int u = 1; u < dp->nunits; u++)
            if (unit_counts(dp, u)[dp->srank] > layer_block) layer_block = unit_counts(dp, u)[dp->srank];
        for (int i = 0; i < NSLOT; i++) {
            dp->gslots[i].buf = alloc_f(dp, i == 0 ? dp->usize[0] : dp->max_layer);
            dp->gslots[i].recv = alloc_f(dp, i == 0 ? unit_counts(dp, 0)[dp->srank] : layer_block);
            if (!dp->gslots[i].buf || !dp->gslots[i].recv) goto oom;
        }
        /* Between steps the gradient slots are idle: the largest doubles as the gather buffer. */
        if (st == 2) dp->gather = dp->usize[0] >= dp->max_layer ? dp->gslots[0].buf : dp->gslots[1].buf;
        /* The model's own gradient buffer is never used. */
        dp->k->free(m->grads);
        m->grads = NULL;
    }
    if (st == 3) {
        if (dp->shard_n && !(dp->sparam = alloc_f(dp, dp->shard_n))) goto oom;
        for (int i = 0; i < dp->nsegs; i++)
            dp->k->copy(dp->sparam + dp->segs[i].shard, m->params + dp->segs[i].flat, dp->segs[i].len);
        for (int i = 0; i < NSLOT; i++)
            if (!(dp->pslots[i].buf = alloc_f(dp, i == 0 ? dp->usize[0] : dp->max_layer))) goto oom;
        dp->k->free(m->params);
        m->params = NULL;
    }
    dp->hooks = (anvil_model_hooks){dp, hook_get_params, hook_put_params, hook_get_grads, hook_put_grads};
    m->hooks = &dp->hooks;
    return dp;
oom:
    anvil_fail("dist: cannot allocate the ZeRO-%d state (%zu shard elements)", st, dp->shard_n);
fail:
    anvil_dp_free(dp);
    return NULL;
}

void anvil_dp_free(anvil_dp *dp) {
    if (!dp) return;
    anvil_dp_finish_grads(dp);
    for (int i = 0; i < NSLOT; i++) {
        wait_req(dp, &dp->pslots[i].req[0]);
        dp->k->free(dp->gslots[i].buf);
        dp->k->free(dp->gslots[i].recv);
        dp->k->free(dp->pslots[i].buf);
    }
    if (dp->m && dp->m->hooks == &dp->hooks) dp->m->hooks = NULL;
    anvil_adamw_free(&dp->opt);
    dp->k->free(dp->sgrad);
    dp->k->free(dp->sparam);
    if (dp->gather_owned) dp->k->free(dp->gather);
    if (dp->shard != dp->world) anvil_group_free(dp->shard);
    anvil_group_free(dp->replica);
    free(dp->pending);
    free(dp->usize);
    free(dp->counts);
    free(dp->own_off);
    free(dp->shard_at);
    free(dp->segs);
    free(dp);
}

/* ---- the step ---- */

int anvil_dp_begin_step(anvil_dp *dp) {
    if (sharded_grads(dp)) {
        if (dp->shard_n) dp->k->zero(dp->sgrad, dp->shard_n * sizeof(float));
    } else {
        anvil_model_zero_grad(dp->m);
        if (!dp->m->grads) return anvil_fail("model: cannot allocate gradients");
    }
    return 0;
}

void anvil_dp_set_last_micro(anvil_dp *dp, int last) { dp->last_micro = last; }

int anvil_dp_finish_grads(anvil_dp *dp) {
    int rc = 0;
    for (int i = 0; i < dp->npending; i++)
        if (wait_req(dp, &dp->pending[i])) rc = -1;
    dp->npending = 0;
    for (int i = 0; i < NSLOT; i++)
        if (dp->gslots[i].unit >= 0 && drain_gslot(dp, &dp->gslots[i])) rc = -1;
    return rc;
}

int anvil_dp_step(anvil_dp *dp, float lr, float max_norm, float *norm) {
    anvil_model *m = dp->m;
    int st = dp->cfg.zero_stage;
    if (st == 0) return anvil_fail("dist: anvil_dp_step is for ZeRO stages 1-3");
    float *grads = st == 1 ? m->grads : dp->sgrad;
    /* The norm covers every rank's blocks: their sums of squares add up over the shard group. */
    double ss = anvil_adamw_grad_sumsq(&dp->opt, grads);
    if (anvil_allreduce(dp->shard, &ss, 1, ANVIL_F64, "gradient norm")) return -1;
    *norm = anvil_adamw_step(&dp->opt, st == 3 ? dp->sparam : m->params, grads, ss, max_norm, lr);
    if (st == 3) return 0;
    /* Every rank updated its block of each unit; gather them back. */
    for (int u = 0; u < dp->nunits; u++) {
        pack(m, u, m->params, dp->gather);
        double t0 = anvil_now();
        if (anvil_allgather(dp->shard, dp->gather + dp->own_off[u], dp->gather, unit_counts(dp, u), ANVIL_F32,
                            "updated parameters"))
            return -1;
        dp->wait_s += anvil_now() - t0;
        unpack(m, u, dp->gather, m->params);
    }
    return 0;
}

int anvil_dp_gather_params(anvil_dp *dp, float *flat) {
    anvil_model *m = dp->m;
    if (dp->cfg.zero_stage < 3) {
        m->k->copy(flat, m->params, m->nparams);
        return 0;
    }
    float *buf = alloc_f(dp, dp->max_unit);
    if (!buf) return anvil_fail("dist: out of memory gathering parameters");
    int rc = 0;
    for (int u = 0; u < dp->nunits && !rc; u++) {
        rc = anvil_allgather(dp->shard, dp->sparam + dp->shard_at[u], buf, unit_counts(dp, u), ANVIL_F32,
                             "parameters for saving");
        if (!rc) unpack(m, u, buf, flat);
    }
    dp->k->free(buf);
    return rc;
}

int anvil_dp_num_slices(const anvil_dp *dp) { return dp->nsegs; }

void anvil_dp_slice(const anvil_dp *dp, int i, int *tensor, size_t *flat, size_t *len, const float **m,
                    const float **v, const float **p) {
    const dp_seg *g = &dp->segs[i];
    *tensor = g->tensor;
    *flat = g->flat;
    *len = g->len;
    *m = dp->opt.m + g->shard;
    *v = dp->opt.v + g->shard;
    *p = dp->sparam ? dp->sparam + g->shard : NULL;
}

void anvil_dp_shard_id(const anvil_dp *dp, int *g, int *k, int *writer) {
    *g = dp->srank;
    *k = dp->ssize;
    *writer = !dp->replica || anvil_group_rank(dp->replica) == 0;
}

anvil_adamw *anvil_dp_optimizer(anvil_dp *dp) { return dp->cfg.zero_stage ? &dp->opt : NULL; }

void anvil_dp_set_moments(anvil_dp *dp, const anvil_adamw *whole) {
    for (int i = 0; i < dp->nsegs; i++) {
        const dp_seg *g = &dp->segs[i];
        dp->k->copy(dp->opt.m + g->shard, whole->m + g->flat, g->len);
        dp->k->copy(dp->opt.v + g->shard, whole->v + g->flat, g->len);
    }
    dp->opt.t = whole->t;
}

void anvil_dp_get_info(const anvil_dp *dp, anvil_dp_info *info) {
    memset(info, 0, sizeof *info);
    info->zero_stage = dp->cfg.zero_stage;
    info->shard_group_size = dp->ssize;
    info->shard_rank = dp->srank;
    info->replicas = dp->world_size / dp->ssize;
    info->shard_elems = dp->shard_n;
    double whole = 4.0 * (double)dp->m->nparams;
    /* The model's own buffers, when still held, and stage 0's AdamW moments, which the trainer owns. */
    info->state_bytes = dp->bytes + (dp->m->params ? whole : 0) + (dp->m->grads ? whole : 0) +
                        (dp->cfg.zero_stage == 0 ? 2 * whole : 0);
    info->comm_wait_s = dp->wait_s;
}
