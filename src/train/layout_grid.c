/* The grid's layout: tensor and pipeline parallelism (src/dist/tensorparallel.h,
 * pipeline.h), each rank holding its shard of its stage, data parallel over the
 * rest with plain replicas or ZeRO-1/MiCS blocks of the moments (zero_grid.h).
 * No rank ever holds a whole tensor of the model's state: --init, resuming,
 * checkpoints and the final model all go piece by piece. */
#include <stdlib.h>

#include "core/error.h"
#include "dist/comm.h"
#include "dist/grid.h"
#include "dist/pipeline.h"
#include "dist/tensorparallel.h"
#include "dist/zero_grid.h"
#include "train/layout.h"

typedef struct {
    anvil_grid grid;
    int have_grid;
    anvil_tp *tp; /* the rank's shard: of every layer, or of its pipeline stage's (owned by pp) */
    anvil_pp *pp;
    anvil_model_reader *init; /* --init: the model file, read piece by piece into the shard */
    anvil_adamw tp_opt;
    anvil_zg *zg; /* ZeRO-1 on the data axis: tp_opt's moments then live in its blocks */
} grid_layout;

static grid_layout *G(const anvil_layout *L) { return L->impl; }

static int read_init_model(void *ctx, int i, size_t off, size_t n, float *dst) {
    return anvil_model_reader_read(ctx, i, off, n, dst);
}

/* This rank's shard of the model, initialized on its own or read piece by piece from the --init model
 * file, and zero moments; resuming reads its shard of a checkpoint's state over them. The whole model
 * is only a layout. */
static int grid_shard(anvil_layout *L) {
    const anvil_train_config *c = L->c;
    grid_layout *g = G(L);
    anvil_model *m = &L->model;
    if (g->grid.pp > 1) {
        anvil_pp_schedule sched = c->pipeline_gpipe ? ANVIL_PP_GPIPE : ANVIL_PP_1F1B;
        if (!(g->pp = anvil_pp_new(&m->cfg, L->k, &g->grid, L->accum, sched))) return -1;
        g->tp = anvil_pp_stage(g->pp);
    } else if (!(g->tp = anvil_tp_new(&m->cfg, L->k, g->grid.tp_group))) {
        return -1;
    }
    anvil_model_set_sequence_parallel(anvil_tp_model(g->tp), c->sequence_parallel);
    int rc = g->init ? anvil_tp_fill(g->tp, read_init_model, g->init, anvil_tp_params(g->tp))
                     : anvil_tp_init_weights(g->tp, c->seed);
    anvil_model_reader_close(g->init);
    g->init = NULL;
    int decays[ANVIL_MODEL_MAX_TENSORS];
    anvil_model_decays(&m->cfg, decays);
    if (rc || anvil_adamw_init_whole(&g->tp_opt, L->k, &c->adamw, anvil_tp_offsets(g->tp), m->ntensors, decays))
        return -1;
    L->opt = &g->tp_opt;
    return 0;
}

static int grid_open(anvil_layout *L) {
    const anvil_train_config *c = L->c;
    grid_layout *g = calloc(1, sizeof *g);
    if (!(L->impl = g)) return anvil_fail("train: out of memory");
    int tp = c->tensor_parallel > 1 ? c->tensor_parallel : 1, pp = c->pipeline_parallel > 1 ? c->pipeline_parallel : 1;
    if (anvil_grid_init(&g->grid, anvil_dist_world(), tp, pp)) return -1;
    g->have_grid = 1;
    if (c->init_model) {
        anvil_model_config fc;
        if (!(g->init = anvil_model_reader_open(c->init_model, &fc)) || anvil_model_init_layout(&L->model, &fc, L->k))
            return -1;
        L->have_model = 1;
        if (fc.vocab_size != c->model.vocab_size || c->T > fc.block_size)
            return anvil_fail("train: %s does not fit this run (vocab %d, block %d)", c->init_model, fc.vocab_size,
                              fc.block_size);
    } else {
        if (anvil_model_init_layout(&L->model, &c->model, L->k)) return -1;
        L->have_model = 1;
    }
    return grid_shard(L);
}

static void grid_describe(anvil_layout *L, FILE *log) {
    const anvil_train_config *c = L->c;
    grid_layout *g = G(L);
    char stages[96] = "";
    if (g->grid.pp > 1)
        snprintf(stages, sizeof stages, " x %d pipeline stages (%s, %d micro-batches)", g->grid.pp,
                 c->pipeline_gpipe ? "GPipe" : "1F1B", L->accum);
    fprintf(log, "model parallel: %d tensor-parallel ranks%s%s, data parallel over %d; %.2fM parameters on rank 0\n",
            g->grid.tp, c->sequence_parallel ? " (sequence parallel)" : "", stages, L->data_ranks,
            (double)anvil_tp_num_params(g->tp) / 1e6);
}

typedef struct {
    anvil_ckpt_reader *ckpt;
    int kind;
} shard_source;

static int read_checkpoint(void *ctx, int i, size_t off, size_t n, float *dst) {
    shard_source *s = ctx;
    return anvil_ckpt_reader_read(s->ckpt, s->kind, i, off, n, dst);
}

/* The rank's shard of the checkpoint's weights and moments, read piece by piece from whatever files
 * hold them (whole, or the shards of any layout). */
static int grid_resume(anvil_layout *L, const char *dir, anvil_ckpt_manifest *man) {
    grid_layout *g = G(L);
    shard_source src = {anvil_ckpt_reader_open(dir, &L->model.cfg, man, 0), 0};
    if (!src.ckpt) return -1;
    float *dst[3] = {anvil_tp_params(g->tp), g->tp_opt.m, g->tp_opt.v};
    int rc = 0;
    for (; !rc && src.kind < 3; src.kind++) rc = anvil_tp_fill(g->tp, read_checkpoint, &src, dst[src.kind]);
    anvil_ckpt_reader_close(src.ckpt);
    if (!rc) g->tp_opt.t = (int)man->adam_t;
    else anvil_ckpt_manifest_free(man);
    return rc;
}

/* ZeRO-1 on the data axis: each rank keeps its block of the local moments, fresh or resumed, and steps
 * its block's optimizer. */
static int grid_start(anvil_layout *L) {
    const anvil_train_config *c = L->c;
    grid_layout *g = G(L);
    if (!c->zero_stage) return 0;
    if (!(g->zg = anvil_zg_new(&g->grid, g->tp, c->shard_group_size, &g->tp_opt))) return -1;
    anvil_adamw_free(&g->tp_opt);
    L->opt = anvil_zg_optimizer(g->zg);
    int gr, k;
    anvil_zg_shard(g->zg, &gr, &k);
    fprintf(c->log, "ZeRO-1 on the data axis: moments sharded over %d ranks, %d replicas\n", k, L->data_ranks / k);
    return 0;
}

static int grid_zero_grads(anvil_layout *L) {
    anvil_model_zero_grad(anvil_tp_model(G(L)->tp));
    return 0;
}

/* A pipeline takes the step's micro-batches together; a shard of every layer one after another. */
static int grid_micro_steps(anvil_layout *L, const int32_t *x, const int32_t *y, double *loss_sum) {
    const anvil_train_config *c = L->c;
    grid_layout *g = G(L);
    float l;
    if (g->pp) {
        if (anvil_pp_forward_backward(g->pp, x, y, c->B, c->T, 1.0f / (float)L->data_ranks, &l)) return -1;
        *loss_sum = (double)l * L->accum;
        return 0;
    }
    size_t bt = (size_t)c->B * c->T;
    float scale = 1.0f / ((float)L->accum * (float)L->data_ranks);
    *loss_sum = 0.0;
    for (int micro = 0; micro < L->accum; micro++) {
        if (anvil_model_forward_backward(anvil_tp_model(g->tp), x + micro * bt, y + micro * bt, c->B, c->T, scale, &l))
            return -1;
        *loss_sum += l;
    }
    return 0;
}

/* Data parallel over the grid: plain replicas of each shard have their gradients all-reduced; with
 * ZeRO-1 each rank's block is reduced. */
static int grid_finish_grads(anvil_layout *L) {
    grid_layout *g = G(L);
    if (g->zg) return anvil_zg_reduce_grads(g->zg);
    if (g->grid.dp > 1)
        return anvil_allreduce(g->grid.dp_group, anvil_tp_grads(g->tp), anvil_tp_num_params(g->tp), ANVIL_F32,
                               "gradients");
    return 0;
}

static int grid_step(anvil_layout *L, float lr, float clip, float *norm) {
    grid_layout *g = G(L);
    if (g->zg) return anvil_zg_step(g->zg, lr, clip, norm);
    double sumsq;
    if (g->pp ? anvil_pp_grad_sumsq(g->pp, &sumsq) : anvil_tp_grad_sumsq(g->tp, &sumsq)) return -1;
    *norm = anvil_adamw_step(&g->tp_opt, anvil_tp_params(g->tp), anvil_tp_grads(g->tp), sumsq, clip, lr);
    return 0;
}

static int grid_forward(anvil_layout *L, const int32_t *x, const int32_t *y, float *loss) {
    grid_layout *g = G(L);
    const anvil_train_config *c = L->c;
    return g->pp ? anvil_pp_forward(g->pp, x, y, c->B, c->T, loss)
                 : anvil_model_forward(anvil_tp_model(g->tp), x, y, c->B, c->T, loss);
}

/* Tensor i of the whole model from the shards, into host memory (a collective over the grid). */
static int gather_tensor(anvil_layout *L, int i, float *whole) {
    grid_layout *g = G(L);
    const float *p = anvil_tp_params(g->tp);
    return g->pp ? anvil_pp_gather_tensor(g->pp, i, p, whole) : anvil_tp_gather_tensor(g->tp, i, p, whole);
}

/* The size of the largest tensor of the whole model: what gather_tensor needs. */
static size_t largest_tensor(const anvil_model *m) {
    size_t most = 0;
    for (int i = 0; i < m->ntensors; i++)
        if (m->offsets[i + 1] - m->offsets[i] > most) most = m->offsets[i + 1] - m->offsets[i];
    return most;
}

/* Tensor by tensor on rank 0 only: the others get no weights and hold one tensor at a time. */
static int grid_whole(anvil_layout *L, anvil_model *whole, float **gathered) {
    anvil_model *m = &L->model;
    *gathered = NULL;
    *whole = anvil_model_with_params(m, NULL);
    float *buf = malloc(largest_tensor(m) * sizeof(float));
    int rc = buf ? 0 : anvil_fail("train: out of memory gathering the parameters");
    if (!rc && L->rank == 0 && !(*gathered = m->k->alloc(m->nparams * sizeof(float))))
        rc = anvil_fail("train: out of memory gathering the parameters");
    for (int i = 0; !rc && i < m->ntensors; i++)
        if (!(rc = gather_tensor(L, i, buf)) && *gathered)
            m->k->upload(*gathered + m->offsets[i], buf, (m->offsets[i + 1] - m->offsets[i]) * sizeof(float));
    free(buf);
    if (rc) {
        if (*gathered) m->k->free(*gathered);
        *gathered = NULL;
        return -1;
    }
    if (*gathered) *whole = anvil_model_with_params(m, *gathered);
    return 0;
}

/* The final model file, gathered one tensor at a time and streamed into the file by rank 0, so no
 * rank ever holds the whole model. */
static int grid_save_model(anvil_layout *L, const char *path, const anvil_model_tokenizer *tok) {
    float *buf = malloc(largest_tensor(&L->model) * sizeof(float));
    int rc = buf ? 0 : anvil_fail("train: out of memory gathering the parameters"), failed = 0;
    anvil_st_stream *s = NULL;
    char err[1024] = "";
    if (!rc && L->rank == 0 && !(s = anvil_model_stream_open(path, &L->model.cfg, tok))) failed = 1;
    /* Rank 0 keeps taking part in the gathers after its own write failed, so no rank waits for it. */
    for (int i = 0; !rc && i < L->model.ntensors; i++)
        if (!(rc = gather_tensor(L, i, buf)) && s && !failed && anvil_model_stream_put(s, &L->model.cfg, i, buf))
            failed = 1;
    if (failed) snprintf(err, sizeof err, "%s", anvil_errmsg());
    if (s && !rc && !failed) rc = anvil_st_stream_commit(s);
    else anvil_st_stream_abort(s);
    if (failed && !rc) rc = anvil_fail("%s", err);
    free(buf);
    return rc;
}

/* Each cell of the grid (a TP rank of a stage) is one shard, written by its first data-parallel replica
 * as blocks of the whole tensors (anvil_tp_block), so no rank ever holds a whole tensor and any layout
 * reads them back. Under ZeRO-1 the cell's moments are first put back together from the data axis's
 * blocks. */
static int grid_save_checkpoint(anvil_layout *L, anvil_ckpt_state *st, anvil_checkpointer *ckpt, int force_sync) {
    grid_layout *g = G(L);
    int zg_g = 0, zg_k = 1;
    if (g->zg) anvil_zg_shard(g->zg, &zg_g, &zg_k);
    anvil_ckpt_layout lay = {L->world, g->zg ? 1 : 0, zg_k, g->grid.tp, g->grid.pp};
    st->model = &L->model;
    st->opt = L->opt;
    st->layout = &lay;
    anvil_checkpointer_shard sh = {g->grid.pp_rank * g->grid.tp + g->grid.tp_rank, g->grid.pp * g->grid.tp,
                                   g->grid.dp_rank == 0, NULL, 0};
    size_t n = anvil_tp_num_params(g->tp);
    const size_t *off = anvil_tp_offsets(g->tp);
    float *lm = g->tp_opt.m, *lv = g->tp_opt.v, *blocks = NULL, *p = anvil_tp_params(g->tp);
    anvil_ckpt_slice *sl = NULL;
    int rc = 0;
    if (g->zg) {
        if (!(blocks = L->k->alloc(2 * n * sizeof(float)))) rc = anvil_fail("train: out of memory for a checkpoint");
        lm = blocks;
        lv = blocks ? blocks + n : NULL;
        /* Collective over the shard group, so every replica takes part. */
        if (!rc) rc = anvil_zg_gather_moments(g->zg, lm, lv);
    }
    size_t count = 0;
    for (int i = 0; sh.writer && i < L->model.ntensors; i++) count += anvil_tp_num_blocks(g->tp, i);
    if (!rc && !(sl = calloc(count + 1, sizeof *sl))) rc = anvil_fail("train: out of memory for a checkpoint");
    for (int i = 0; !rc && sh.writer && i < L->model.ntensors; i++)
        for (size_t b = 0, nb = anvil_tp_num_blocks(g->tp, i); b < nb; b++) {
            size_t whole, local;
            anvil_ckpt_slice *x = &sl[sh.nslices++];
            anvil_tp_block(g->tp, i, b, &whole, &local, &x->rows, &x->len);
            x->tensor = i;
            x->flat = L->model.offsets[i] + whole;
            x->m = lm + off[i] + local;
            x->v = lv + off[i] + local;
            x->p = p + off[i] + local;
        }
    sh.slices = sl;
    if (!rc) rc = anvil_checkpointer_save(ckpt, st, &sh, force_sync);
    free(sl);
    if (blocks) L->k->free(blocks);
    return rc;
}

static int grid_report(anvil_layout *L, double peak_rss_mb, double elapsed_s, double *comm_wait_share) {
    grid_layout *g = G(L);
    (void)elapsed_s;
    *comm_wait_share = 0.0;
    char layout[96];
    snprintf(layout, sizeof layout, "TP %d, PP %d, DP %d%s", g->grid.tp, g->grid.pp, g->grid.dp,
             g->zg ? ", ZeRO-1" : "");
    /* Parameters and gradients, and the two moments (of the rank's block under ZeRO-1). */
    double n = (double)anvil_tp_num_params(g->tp), moments = 8.0 * n;
    if (g->zg) {
        int gr, k;
        anvil_zg_shard(g->zg, &gr, &k);
        moments /= k;
    }
    return anvil_layout_report_memory(L, layout, 8.0 * n + moments, peak_rss_mb);
}

static double grid_comm_wait_s(anvil_layout *L) {
    (void)L;
    return 0.0;
}

static void grid_free(anvil_layout *L) {
    grid_layout *g = G(L);
    if (!g) return;
    anvil_model_reader_close(g->init);
    if (g->pp) anvil_pp_free(g->pp);
    else anvil_tp_free(g->tp);
    anvil_adamw_free(&g->tp_opt);
    anvil_zg_free(g->zg);
    if (g->have_grid) anvil_grid_free(&g->grid);
    free(g);
}

static const anvil_layout_ops grid_ops = {
    .name = "grid", .open = grid_open, .describe = grid_describe, .resume = grid_resume, .start = grid_start,
    .zero_grads = grid_zero_grads, .micro_steps = grid_micro_steps, .finish_grads = grid_finish_grads,
    .step = grid_step, .forward = grid_forward, .whole = grid_whole, .save_model = grid_save_model,
    .save_checkpoint = grid_save_checkpoint, .report = grid_report, .comm_wait_s = grid_comm_wait_s,
    .free = grid_free,
};

const anvil_layout_ops *anvil_layout_grid_ops(void) { return &grid_ops; }
