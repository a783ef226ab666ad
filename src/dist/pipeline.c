#include "dist/pipeline.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/clock.h"
#include "core/error.h"

struct anvil_pp {
    anvil_model_config cfg;
    const anvil_kernels *stage_k;
    const anvil_grid *grid;
    anvil_tp *stage;
    anvil_group *tied; /* the first and last stage, which share wte (NULL when one stage) */
    anvil_pp_schedule schedule;
    int micro, nslots, s, P, l0, l1;
    anvil_req **sends; /* per slot: the forward output's send and the input gradient's, in flight */
    int in_flight, max_in_flight;
    uint64_t bytes_sent;
    double waited; /* blocked on neighbours since the current step or evaluation began */
    double idle_s, schedule_s;
};

anvil_tp *anvil_pp_stage(anvil_pp *p) { return p->stage; }
int anvil_pp_max_in_flight(const anvil_pp *p) { return p->max_in_flight; }
uint64_t anvil_pp_bytes_sent(const anvil_pp *p) { return p->bytes_sent; }
void anvil_pp_idle(const anvil_pp *p, double *idle_s, double *schedule_s) {
    *idle_s = p->idle_s;
    *schedule_s = p->schedule_s;
}

void anvil_pp_layers(const anvil_pp *p, int *l0, int *l1) {
    *l0 = p->l0;
    *l1 = p->l1;
}

anvil_pp *anvil_pp_new(const anvil_model_config *cfg, const anvil_kernels *k, const anvil_grid *grid, int micro,
                       anvil_pp_schedule schedule) {
    if (micro < 1) {
        anvil_fail("pipeline: %d micro-batches; at least 1", micro);
        return NULL;
    }
    anvil_pp *p = calloc(1, sizeof *p);
    if (!p) {
        anvil_fail("pipeline: out of memory");
        return NULL;
    }
    p->cfg = *cfg;
    p->stage_k = k;
    p->grid = grid;
    p->schedule = schedule;
    p->micro = micro;
    p->P = grid->pp;
    p->s = grid->pp_rank;
    p->l0 = p->s * cfg->n_layer / p->P;
    p->l1 = (p->s + 1) * cfg->n_layer / p->P;
    /* 1F1B keeps at most P - s micro-batches alive; GPipe all of them. */
    int bound = schedule == ANVIL_PP_1F1B ? p->P - p->s : micro;
    p->nslots = bound < micro ? bound : micro;
    p->sends = calloc((size_t)p->nslots * 2, sizeof *p->sends);
    p->stage = p->sends ? anvil_tp_new_stage(cfg, k, grid->tp_group, p->l0, p->l1, p->nslots) : NULL;
    if (!p->stage) {
        if (!p->sends) anvil_fail("pipeline: out of memory");
        anvil_pp_free(p);
        return NULL;
    }
    if (p->P > 1) {
        int ends = p->s == 0 || p->s == p->P - 1;
        char name[32];
        snprintf(name, sizeof name, "%s of pp group %d", ends ? "tied tensors" : "middle stages",
                 grid->dp_rank * grid->tp + grid->tp_rank);
        if (!(p->tied = anvil_group_split(grid->pp_group, ends, p->s, name))) {
            anvil_pp_free(p);
            return NULL;
        }
    }
    return p;
}

void anvil_pp_free(anvil_pp *p) {
    if (!p) return;
    for (int i = 0; p->sends && i < 2 * p->nslots; i++)
        if (p->sends[i]) anvil_wait(p->sends[i]);
    free(p->sends);
    anvil_group_free(p->tied);
    anvil_tp_free(p->stage);
    free(p);
}

/* Waits for the sends from a slot before it is written again. */
static int drain_slot(anvil_pp *p, int slot) {
    int rc = 0;
    double t0 = anvil_now();
    for (int j = 0; j < 2; j++) {
        anvil_req **r = &p->sends[2 * slot + j];
        if (*r && anvil_wait(*r)) rc = -1;
        *r = NULL;
    }
    p->waited += anvil_now() - t0;
    return rc;
}

/* A blocking receive from a neighbour: the time it waits is the stage's share of the bubble. */
static int receive(anvil_pp *p, float *buf, size_t n, int peer, int tag, const char *what) {
    double t0 = anvil_now();
    int rc = anvil_wait(anvil_irecv(p->grid->pp_group, buf, n, ANVIL_F32, peer, tag, what));
    p->waited += anvil_now() - t0;
    return rc;
}

typedef struct {
    const int32_t *inputs, *targets;
    int B, T;
    float grad_scale;
    double loss_sum;
} step_args;

/* Tags keep a micro-batch's activation apart from its gradient and from other micro-batches'. */
static int tag_of(int mb, int backward) { return 2 * mb + backward; }

static int forward(anvil_pp *p, step_args *a, int mb) {
    int slot = mb % p->nslots;
    size_t BT = (size_t)a->B * a->T, n = anvil_model_stage_floats(anvil_tp_model(p->stage));
    if (drain_slot(p, slot)) return -1;
    if (p->s > 0 && receive(p, anvil_model_stage_input(anvil_tp_model(p->stage), slot), n, p->s - 1, tag_of(mb, 0), "pp activation"))
        return -1;
    float loss = 0.0f;
    if (anvil_model_stage_forward(anvil_tp_model(p->stage), slot, a->inputs + mb * BT, a->targets + mb * BT, a->B, a->T, &loss))
        return -1;
    a->loss_sum += loss;
    if (++p->in_flight > p->max_in_flight) p->max_in_flight = p->in_flight;
    if (p->s < p->P - 1) {
        anvil_req *r = anvil_isend(p->grid->pp_group, anvil_model_stage_output(anvil_tp_model(p->stage), slot), n, ANVIL_F32, p->s + 1,
                                   tag_of(mb, 0), "pp activation");
        if (!r) return -1;
        p->sends[2 * slot] = r;
        p->bytes_sent += n * sizeof(float);
    }
    return 0;
}

static int backward(anvil_pp *p, step_args *a, int mb) {
    int slot = mb % p->nslots;
    size_t n = anvil_model_stage_floats(anvil_tp_model(p->stage));
    if (p->s < p->P - 1 && receive(p, anvil_model_stage_grad(anvil_tp_model(p->stage), slot), n, p->s + 1, tag_of(mb, 1), "pp gradient"))
        return -1;
    if (anvil_model_stage_backward(anvil_tp_model(p->stage), slot, a->grad_scale / (float)p->micro)) return -1;
    p->in_flight--;
    if (p->s > 0) {
        anvil_req *r = anvil_isend(p->grid->pp_group, anvil_model_stage_grad(anvil_tp_model(p->stage), slot), n, ANVIL_F32, p->s - 1,
                                   tag_of(mb, 1), "pp gradient");
        if (!r) return -1;
        p->sends[2 * slot + 1] = r;
        p->bytes_sent += n * sizeof(float);
    }
    return 0;
}

/* Only the last stage has the loss: the stages sum what they have. */
static int share_loss(anvil_pp *p, double last_stage_loss, float *loss) {
    double l = p->s == p->P - 1 ? last_stage_loss : 0.0;
    if (p->P > 1 && anvil_allreduce(p->grid->pp_group, &l, 1, ANVIL_F64, "pp loss")) return -1;
    *loss = (float)l;
    return 0;
}

static int run_schedule(anvil_pp *p, step_args *a) {
    int m = p->micro;
    if (p->schedule == ANVIL_PP_GPIPE) {
        for (int i = 0; i < m; i++)
            if (forward(p, a, i)) return -1;
        for (int i = 0; i < m; i++)
            if (backward(p, a, i)) return -1;
        return 0;
    }
    int warm = p->P - p->s - 1 < m ? p->P - p->s - 1 : m;
    for (int i = 0; i < warm; i++)
        if (forward(p, a, i)) return -1;
    for (int i = 0; i < m - warm; i++)
        if (forward(p, a, warm + i) || backward(p, a, i)) return -1;
    for (int i = m - warm; i < m; i++)
        if (backward(p, a, i)) return -1;
    return 0;
}

int anvil_pp_forward_backward(anvil_pp *p, const int32_t *inputs, const int32_t *targets, int B, int T,
                              float grad_scale, float *loss) {
    step_args a = {inputs, targets, B, T, grad_scale, 0.0};
    if (anvil_model_stage_ready(anvil_tp_model(p->stage), B, T)) return -1;
    double t0 = anvil_now();
    p->waited = 0.0;
    if (run_schedule(p, &a)) return -1;
    for (int slot = 0; slot < p->nslots; slot++)
        if (drain_slot(p, slot)) return -1;
    p->schedule_s += anvil_now() - t0;
    p->idle_s += p->waited;
    /* A tied tensor (GPT-2's wte): the first stage's embedding gradient plus the last stage's LM head's. */
    anvil_tp *st = p->stage;
    const anvil_model *sm = anvil_tp_model(st);
    const size_t *off = anvil_tp_offsets(st);
    int ends = p->s == 0 || p->s == p->P - 1;
    for (int i = 0; p->tied && ends && i < sm->ntensors; i++) {
        anvil_tensor_info t;
        anvil_model_tensor(&sm->cfg, i, &t);
        if (t.place == ANVIL_PLACE_TIED &&
            anvil_allreduce(p->tied, anvil_tp_grads(st) + off[i], off[i + 1] - off[i], ANVIL_F32, "pp tied gradient"))
            return -1;
    }
    return share_loss(p, a.loss_sum / p->micro, loss);
}

int anvil_pp_forward(anvil_pp *p, const int32_t *inputs, const int32_t *targets, int B, int T, float *loss) {
    step_args a = {inputs, targets, B, T, 0.0f, 0.0};
    if (anvil_model_stage_ready(anvil_tp_model(p->stage), B, T) || forward(p, &a, 0)) return -1;
    p->in_flight--;
    return drain_slot(p, 0) ? -1 : share_loss(p, a.loss_sum, loss);
}

int anvil_pp_gather_tensor(anvil_pp *p, int i, const float *local, float *whole) {
    size_t n = anvil_model_tensor_numel(&p->cfg, i);
    memset(whole, 0, n * sizeof(float));
    if (anvil_tp_gather_tensor(p->stage, i, local, whole)) return -1;
    return p->P > 1 ? anvil_allreduce(p->grid->pp_group, whole, n, ANVIL_F32, "pp gather tensor") : 0;
}

int anvil_pp_grad_sumsq(anvil_pp *p, double *sumsq) {
    if (anvil_tp_grad_sumsq(p->stage, sumsq)) return -1;
    return p->P > 1 ? anvil_allreduce(p->grid->pp_group, sumsq, 1, ANVIL_F64, "pp gradient norm") : 0;
}
