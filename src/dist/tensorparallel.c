#include "dist/tensorparallel.h"

#include <stdlib.h>
#include <string.h>

#include "core/error.h"

/* The shard is a model (its passes are the model's own) that computes through this group's
 * collectives; what stays here is the group, the traffic count, and the moves between the shard's
 * layout and the whole model's. */
struct anvil_tp {
    anvil_model model;
    anvil_model_comm comm;
    anvil_group *g;
    size_t *counts; /* tp entries: the elements each rank puts into a collective over the tokens */
    uint64_t bytes;
};

anvil_model *anvil_tp_model(anvil_tp *m) { return &m->model; }
size_t anvil_tp_num_params(const anvil_tp *m) { return m->model.nparams; }
const size_t *anvil_tp_offsets(const anvil_tp *m) { return m->model.offsets; }
float *anvil_tp_params(anvil_tp *m) { return m->model.params; }
float *anvil_tp_grads(anvil_tp *m) { return m->model.grads; }
uint64_t anvil_tp_bytes(const anvil_tp *m) { return m->bytes; }
int anvil_tp_owns(const anvil_tp *m, int i) { return anvil_model_owns(&m->model, i); }

int anvil_tp_is_split(const anvil_tp *m, int i) {
    anvil_tensor_info t;
    anvil_model_tensor(&m->model.cfg, i, &t);
    return t.split != ANVIL_SPLIT_NONE;
}

/* ---- the collectives the model's passes call ---- */

static int reduce(void *ctx, float *buf, size_t n, const char *what) {
    anvil_tp *m = ctx;
    m->bytes += n * sizeof(float);
    return anvil_allreduce(m->g, buf, n, ANVIL_F32, what);
}

/* Collectives over the tokens (sequence parallelism) and the loss's log-sum-exps, rank r's part at
 * r * n_local floats. Each counts the whole it assembles or reduces: on a ring a reduce-scatter and an
 * all-gather each move half of what an all-reduce of the same buffer moves. */
static int gather(void *ctx, const float *local, float *full, size_t n_local, const char *what) {
    anvil_tp *m = ctx;
    for (int r = 0; r < m->model.shard.tp; r++) m->counts[r] = n_local;
    m->bytes += (uint64_t)m->model.shard.tp * n_local * sizeof(float);
    return anvil_allgather(m->g, local, full, m->counts, ANVIL_F32, what);
}

static int scatter(void *ctx, const float *full, float *local, size_t n_local, const char *what) {
    anvil_tp *m = ctx;
    for (int r = 0; r < m->model.shard.tp; r++) m->counts[r] = n_local;
    m->bytes += (uint64_t)m->model.shard.tp * n_local * sizeof(float);
    return anvil_reduce_scatter(m->g, full, local, m->counts, ANVIL_F32, what);
}

anvil_tp *anvil_tp_new_stage(const anvil_model_config *cfg, const anvil_kernels *k, anvil_group *g, int l0, int l1,
                             int nslots) {
    anvil_tp *m = calloc(1, sizeof *m);
    if (!m) {
        anvil_fail("tensor parallel: out of memory");
        return NULL;
    }
    m->g = g;
    m->comm = (anvil_model_comm){m, reduce, gather, scatter};
    anvil_model_shard sh = {anvil_group_size(g), anvil_group_rank(g), l0, l1, nslots, 0};
    m->counts = calloc((size_t)sh.tp, sizeof *m->counts);
    if (!m->counts) {
        anvil_fail("tensor parallel: out of memory");
        free(m);
        return NULL;
    }
    if (anvil_model_init_shard(&m->model, cfg, k, &sh, &m->comm)) {
        free(m->counts);
        free(m);
        return NULL;
    }
    return m;
}

anvil_tp *anvil_tp_new(const anvil_model_config *cfg, const anvil_kernels *k, anvil_group *g) {
    return anvil_tp_new_stage(cfg, k, g, 0, cfg->n_layer, 1);
}

void anvil_tp_free(anvil_tp *m) {
    if (!m) return;
    anvil_model_free(&m->model);
    free(m->counts);
    free(m);
}

/* ---- the shard against the whole model ---- */

/* Copies rank's shard of tensor i between a whole tensor and a local one (host memory). */
static void shard_copy(const anvil_model *m, int i, int rank, float *whole, float *local, int to_local) {
    for (size_t p = 0, n = anvil_model_num_pieces(m, i); p < n; p++) {
        size_t w, l, len;
        anvil_model_piece(m, i, rank, p, &w, &l, &len);
        if (to_local) memcpy(local + l, whole + w, len * sizeof(float));
        else memcpy(whole + w, local + l, len * sizeof(float));
    }
}

size_t anvil_tp_num_blocks(const anvil_tp *tp, int i) {
    const anvil_model *m = &tp->model;
    if (!anvil_model_owns(m, i) || anvil_model_num_pieces(m, i) == 0) return 0;
    if (!anvil_tp_is_split(tp, i)) return m->shard.tp_rank == 0;
    /* A row-parallel shard's pieces are one per row, a row apart: one block. */
    anvil_tensor_info t;
    anvil_model_tensor(&m->cfg, i, &t);
    return t.split == ANVIL_SPLIT_ROW ? 1 : anvil_model_num_pieces(m, i);
}

void anvil_tp_block(const anvil_tp *tp, int i, size_t p, size_t *whole, size_t *local, size_t *rows, size_t *cols) {
    const anvil_model *m = &tp->model;
    anvil_tensor_info t;
    anvil_model_tensor(&m->cfg, i, &t);
    int block = t.split == ANVIL_SPLIT_ROW;
    anvil_model_piece(m, i, m->shard.tp_rank, block ? 0 : p, whole, local, cols);
    *rows = block ? anvil_model_num_pieces(m, i) : 1;
}

/* The most floats anvil_tp_fill reads at once. */
#define FILL_CHUNK ((size_t)1 << 16)

int anvil_tp_fill(anvil_tp *tp, anvil_tp_read_fn read, void *ctx, float *local) {
    const anvil_model *m = &tp->model;
    float *host = malloc(FILL_CHUNK * sizeof(float));
    if (!host) return anvil_fail("tensor parallel: out of memory");
    int rc = 0;
    for (int i = 0; !rc && i < m->ntensors; i++)
        for (size_t p = 0, np = anvil_model_num_pieces(m, i); !rc && p < np; p++) {
            size_t w, l, len;
            anvil_model_piece(m, i, m->shard.tp_rank, p, &w, &l, &len);
            for (size_t at = 0; !rc && at < len; at += FILL_CHUNK) {
                size_t n = len - at < FILL_CHUNK ? len - at : FILL_CHUNK;
                if (!(rc = read(ctx, i, w + at, n, host)))
                    m->k->upload(local + m->offsets[i] + l + at, host, n * sizeof(float));
            }
        }
    free(host);
    return rc;
}

static int read_init(void *ctx, int i, size_t off, size_t n, float *dst) {
    return anvil_model_init_stream_read(ctx, i, off, n, dst);
}

int anvil_tp_init_weights(anvil_tp *m, uint64_t seed) {
    anvil_model_init_stream s;
    anvil_model_init_stream_start(&s, &m->model.cfg, seed);
    return anvil_tp_fill(m, read_init, &s, m->model.params);
}

int anvil_tp_shard(anvil_tp *tp, const float *full, float *local) {
    const anvil_model *m = &tp->model;
    size_t n = m->nparams, nfull = anvil_model_num_params(&m->cfg);
    float *whole = malloc(nfull * sizeof(float)), *host = malloc(n * sizeof(float));
    if (!whole || !host) {
        free(whole);
        free(host);
        return anvil_fail("tensor parallel: out of memory sharding %zu parameters", nfull);
    }
    m->k->download(whole, full, nfull * sizeof(float));
    size_t at = 0;
    for (int i = 0; i < m->ntensors; i++) {
        shard_copy(m, i, m->shard.tp_rank, whole + at, host + m->offsets[i], 1);
        at += anvil_model_tensor_numel(&m->cfg, i);
    }
    m->k->upload(local, host, n * sizeof(float));
    free(whole);
    free(host);
    return 0;
}

int anvil_tp_gather_tensor(anvil_tp *tp, int i, const float *local, float *whole) {
    const anvil_model *m = &tp->model;
    size_t n = m->offsets[i + 1] - m->offsets[i], g = (size_t)m->shard.tp;
    anvil_tensor_info t;
    anvil_model_tensor(&m->cfg, i, &t);
    if (!anvil_model_owns(m, i) || !n) return 0;
    int split = t.split != ANVIL_SPLIT_NONE;
    float *all = malloc((split ? g : 1) * n * sizeof(float));
    if (!all) return anvil_fail("tensor parallel: out of memory gathering '%s'", t.name);
    m->k->download(all, local + m->offsets[i], n * sizeof(float));
    int rc = 0;
    if (!split) {
        shard_copy(m, i, m->shard.tp_rank, whole, all, 0);
    } else {
        float *mine = malloc(n * sizeof(float));
        if (!mine) rc = anvil_fail("tensor parallel: out of memory gathering '%s'", t.name);
        if (!rc) {
            memcpy(mine, all, n * sizeof(float));
            rc = gather(tp, mine, all, n, "tp gather tensor");
        }
        for (int r = 0; !rc && r < m->shard.tp; r++) shard_copy(m, i, r, whole, all + (size_t)r * n, 0);
        free(mine);
    }
    free(all);
    return rc;
}

int anvil_tp_grad_sumsq(anvil_tp *tp, double *sumsq) {
    const anvil_model *m = &tp->model;
    double split = 0.0, replicated = 0.0;
    for (int i = 0; i < m->ntensors; i++) {
        if (!anvil_model_owns(m, i)) continue;
        double s = m->k->sumsq(m->grads + m->offsets[i], m->offsets[i + 1] - m->offsets[i]);
        if (anvil_tp_is_split(tp, i)) split += s;
        else replicated += s;
    }
    /* Replicated tensors have the same gradient on every rank: counted once, not tp times. */
    if (anvil_allreduce(tp->g, &split, 1, ANVIL_F64, "tp gradient norm")) return -1;
    *sumsq = split + replicated;
    return 0;
}
