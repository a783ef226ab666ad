/* The data-parallel layouts: replicated (one process, or every rank holding
 * everything with its gradients all-reduced) and ZeRO (stages 1-3, MiCS),
 * both over a whole model driven by src/dist/dataparallel.h's hooks. */
#include <stdlib.h>

#include "core/error.h"
#include "dist/comm.h"
#include "dist/dataparallel.h"
#include "train/layout.h"

typedef struct {
    anvil_adamw whole_opt; /* replicated runs; sharded ones only while resuming */
    anvil_dp *dp;          /* several ranks, or ZeRO */
} data_layout;

static data_layout *D(const anvil_layout *L) { return L->impl; }

static int data_open(anvil_layout *L) {
    const anvil_train_config *c = L->c;
    data_layout *d = calloc(1, sizeof *d);
    if (!(L->impl = d)) return anvil_fail("train: out of memory");
    if (c->init_model) {
        if (anvil_model_load(c->init_model, L->k, &L->model)) return -1;
        L->have_model = 1;
        if (L->model.cfg.vocab_size != c->model.vocab_size || c->T > L->model.cfg.block_size)
            return anvil_fail("train: %s does not fit this run (vocab %d, block %d)", c->init_model,
                              L->model.cfg.vocab_size, L->model.cfg.block_size);
    } else {
        if (anvil_model_init(&L->model, &c->model, L->k)) return -1;
        L->have_model = 1;
        anvil_model_init_weights(&L->model, c->seed);
    }
    L->opt = &d->whole_opt;
    /* A sharded run restores whole moments from a checkpoint of any layout, then keeps its blocks. */
    if (c->zero_stage && !c->resume) return 0;
    int decays[ANVIL_MODEL_MAX_TENSORS];
    anvil_model_decays(&L->model.cfg, decays);
    return anvil_adamw_init_whole(&d->whole_opt, L->k, &c->adamw, L->model.offsets, L->model.ntensors, decays);
}

static void data_describe(anvil_layout *L, FILE *log) {
    (void)L;
    (void)log;
}

static int data_resume(anvil_layout *L, const char *dir, anvil_ckpt_manifest *man) {
    return anvil_ckpt_load(dir, &L->model, &D(L)->whole_opt, man, 0);
}

/* Several replicas: the data-parallel engine all-reduces their gradients. */
static int replicated_start(anvil_layout *L) {
    if (L->world == 1) return 0;
    anvil_dp_config dc = {.zero_stage = 0, .shard_group_size = 0, .adamw = L->c->adamw};
    return (D(L)->dp = anvil_dp_new(&L->model, &dc)) ? 0 : -1;
}

/* The engine takes the rank's blocks of the resumed moments and steps its own optimizer. */
static int zero_start(anvil_layout *L) {
    const anvil_train_config *c = L->c;
    data_layout *d = D(L);
    anvil_dp_config dc = {.zero_stage = c->zero_stage, .shard_group_size = c->shard_group_size, .adamw = c->adamw};
    if (!(d->dp = anvil_dp_new(&L->model, &dc))) return -1;
    if (d->whole_opt.m) anvil_dp_set_moments(d->dp, &d->whole_opt);
    anvil_adamw_free(&d->whole_opt);
    L->opt = anvil_dp_optimizer(d->dp);
    return 0;
}

static int data_zero_grads(anvil_layout *L) {
    if (D(L)->dp) return anvil_dp_begin_step(D(L)->dp);
    anvil_model_zero_grad(&L->model);
    return 0;
}

static int data_micro_steps(anvil_layout *L, const int32_t *x, const int32_t *y, double *loss_sum) {
    const anvil_train_config *c = L->c;
    size_t bt = (size_t)c->B * c->T;
    float scale = 1.0f / ((float)L->accum * (float)L->data_ranks);
    *loss_sum = 0.0;
    for (int micro = 0; micro < L->accum; micro++) {
        float l;
        if (D(L)->dp) anvil_dp_set_last_micro(D(L)->dp, micro == L->accum - 1);
        if (anvil_model_forward_backward(&L->model, x + micro * bt, y + micro * bt, c->B, c->T, scale, &l)) return -1;
        *loss_sum += l;
    }
    return 0;
}

static int data_finish_grads(anvil_layout *L) { return D(L)->dp ? anvil_dp_finish_grads(D(L)->dp) : 0; }

static int replicated_step(anvil_layout *L, float lr, float clip, float *norm) {
    data_layout *d = D(L);
    double sumsq = anvil_adamw_grad_sumsq(&d->whole_opt, L->model.grads);
    *norm = anvil_adamw_step(&d->whole_opt, L->model.params, L->model.grads, sumsq, clip, lr);
    return 0;
}

static int zero_step(anvil_layout *L, float lr, float clip, float *norm) {
    return anvil_dp_step(D(L)->dp, lr, clip, norm);
}

static int data_forward(anvil_layout *L, const int32_t *x, const int32_t *y, float *loss) {
    return anvil_model_forward(&L->model, x, y, L->c->B, L->c->T, loss);
}

/* The model's own weights where it holds them; at stage 3 a copy gathered on every rank. */
static int data_whole(anvil_layout *L, anvil_model *whole, float **gathered) {
    anvil_model *m = &L->model;
    *gathered = NULL;
    if (m->params) {
        *whole = anvil_model_with_params(m, m->params);
        return 0;
    }
    if (!(*gathered = m->k->alloc(m->nparams * sizeof(float))))
        return anvil_fail("train: out of memory gathering the parameters");
    if (anvil_dp_gather_params(D(L)->dp, *gathered)) {
        m->k->free(*gathered);
        *gathered = NULL;
        return -1;
    }
    *whole = anvil_model_with_params(m, *gathered);
    return 0;
}

static int data_save_model(anvil_layout *L, const char *path, const anvil_model_tokenizer *tok) {
    anvil_model whole;
    float *gathered;
    if (data_whole(L, &whole, &gathered)) return -1;
    int rc = L->rank == 0 ? anvil_model_save(path, &whole, tok) : 0;
    L->model.k->free(gathered);
    return rc;
}

/* Replicas save rank 0's copy, the layout recorded for information. */
static int replicated_save_checkpoint(anvil_layout *L, anvil_ckpt_state *st, anvil_checkpointer *ckpt,
                                      int force_sync) {
    anvil_ckpt_layout lay = {.world = L->world, .zero_stage = 0, .shard_group = 1, .tensor_parallel = 1, .pipeline_parallel = 1};
    st->model = &L->model;
    st->opt = L->opt;
    st->layout = L->world > 1 ? &lay : NULL;
    return anvil_checkpointer_save(ckpt, st, NULL, force_sync);
}

/* Every shard, each of its first replica's ranks writing the slices of its blocks. */
static int zero_save_checkpoint(anvil_layout *L, anvil_ckpt_state *st, anvil_checkpointer *ckpt, int force_sync) {
    data_layout *d = D(L);
    anvil_checkpointer_shard sh;
    anvil_dp_shard_id(d->dp, &sh.g, &sh.k, &sh.writer);
    anvil_ckpt_layout lay = {.world = L->world, .zero_stage = L->c->zero_stage, .shard_group = sh.k, .tensor_parallel = 1, .pipeline_parallel = 1};
    st->model = &L->model;
    st->opt = L->opt;
    st->layout = &lay;
    sh.nslices = anvil_dp_num_slices(d->dp);
    anvil_ckpt_slice *sl = calloc((size_t)sh.nslices + 1, sizeof *sl);
    if (!sl) return anvil_fail("train: out of memory for a checkpoint");
    for (int i = 0; i < sh.nslices; i++)
        anvil_dp_slice(d->dp, i, &sl[i].tensor, &sl[i].flat, &sl[i].len, &sl[i].m, &sl[i].v, &sl[i].p);
    sh.slices = sl;
    int rc = anvil_checkpointer_save(ckpt, st, &sh, force_sync);
    free(sl);
    return rc;
}

static int data_report(anvil_layout *L, double peak_rss_mb, double elapsed_s, double *comm_wait_share) {
    *comm_wait_share = 0.0;
    if (!D(L)->dp) return 0;
    anvil_dp_info info;
    anvil_dp_get_info(D(L)->dp, &info);
    *comm_wait_share = elapsed_s > 0 ? info.comm_wait_s / elapsed_s : 0.0;
    char layout[96];
    snprintf(layout, sizeof layout, "ZeRO-%d, shard group %d, %d replicas", info.zero_stage, info.shard_group_size,
             info.replicas);
    if (anvil_layout_report_memory(L, layout, info.state_bytes, peak_rss_mb)) return -1;
    fprintf(L->c->log, "communication: %.1f%% of the training time waited on (not overlapped)\n",
            100.0 * *comm_wait_share);
    return 0;
}

static double data_comm_wait_s(anvil_layout *L) {
    anvil_dp_info info = {0};
    if (D(L)->dp) anvil_dp_get_info(D(L)->dp, &info);
    return info.comm_wait_s;
}

static void data_free(anvil_layout *L) {
    data_layout *d = D(L);
    if (!d) return;
    anvil_dp_free(d->dp);
    anvil_adamw_free(&d->whole_opt);
    free(d);
}

static const anvil_layout_ops replicated_ops = {
    .name = "replicated", .open = data_open, .describe = data_describe, .resume = data_resume,
    .start = replicated_start, .zero_grads = data_zero_grads, .micro_steps = data_micro_steps,
    .finish_grads = data_finish_grads, .step = replicated_step, .forward = data_forward, .whole = data_whole,
    .save_model = data_save_model, .save_checkpoint = replicated_save_checkpoint, .report = data_report,
    .comm_wait_s = data_comm_wait_s, .free = data_free,
};

static const anvil_layout_ops zero_ops = {
    .name = "zero", .open = data_open, .describe = data_describe, .resume = data_resume, .start = zero_start,
    .zero_grads = data_zero_grads, .micro_steps = data_micro_steps, .finish_grads = data_finish_grads,
    .step = zero_step, .forward = data_forward, .whole = data_whole, .save_model = data_save_model,
    .save_checkpoint = zero_save_checkpoint, .report = data_report, .comm_wait_s = data_comm_wait_s,
    .free = data_free,
};

const anvil_layout_ops *anvil_layout_data_ops(int zero_stage) { return zero_stage ? &zero_ops : &replicated_ops; }
