/* Pipeline parallelism (with tensor parallelism inside each stage) against
 * one process. CTest runs it alone and under mpirun with 2 and 4 ranks; it
 * tries every layout the world allows of (PP, TP) in {(1,1), (2,1), (4,1),
 * (2,2), (2,2) with sequence parallelism} (and DP 2 below), each with GPipe and 1F1B, on a 4-layer
 * model (4 heads, C = 64,
 * vocabulary 257): 8 AdamW steps of 4 micro-batches of 2 x 16 tokens, against
 * one process accumulating the same micro-batches. Checks each step's loss
 * and gradient norm, the final weights of each stage's layers (and of wte,
 * wpe and the final LayerNorm where they live), that GPipe and 1F1B give
 * identical weights, that 1F1B never holds more than P - s micro-batches'
 * activations on stage s (GPipe: all m), and the bytes sent between stages
 * against 2*B*T*C floats per micro-batch per boundary (a TP rank's 1/tp of them
 * under sequence parallelism), and that the time a
 * stage waited on its neighbours lies within its schedules' time. With a
 * data axis, (DP, PP, TP) = (2, 1, 1) on 2 ranks and (2, 2, 1) on 4, the same
 * steps run with ZeRO-1 over the DP group (dist/zero_grid.h): both replicas
 * take the whole batch at half the gradient scale, so their sum is the
 * reference's gradient, and the norm and weights match to the same
 * tolerances. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/rng.h"
#include "dist/comm.h"
#include "dist/grid.h"
#include "dist/pipeline.h"
#include "dist/zero_grid.h"
#include "model/model.h"
#include "optim/optim.h"
#include "testutil.h"

enum { STEPS = 8, M = 4, B = 2, T = 16 };

/* The worst deviations measured over every layout and both schedules (bench/RESULTS.md): loss
 * 1.9e-7 and gradient norm 8.7e-6 relative, weights 3.0e-5 absolute; about 3x those. */
#define LOSS_RTOL 6e-7f
#define NORM_RTOL 2.6e-5f
#define WEIGHT_ATOL 9e-5f

static int R, W;

/* One process accumulating the same micro-batches: each step's loss and norm, and the final weights. */
typedef struct {
    anvil_model model;
    float loss[STEPS], norm[STEPS];
} reference;

typedef struct {
    float worst_loss, worst_norm, weight_dev;
    int max_in_flight;
    uint64_t bytes_per_step;
    float *local; /* the stage's final parameters (host), for comparing schedules */
    size_t nlocal;
} run_result;

static void fill_batch(anvil_rng *rng, int vocab, int32_t *in, int32_t *tg) {
    for (int i = 0; i < M * B * T; i++) {
        in[i] = (int)(anvil_rng_u64(rng) % (uint64_t)vocab);
        tg[i] = anvil_rng_u64(rng) % 4 ? (in[i] * 7 + 3) % vocab : in[i];
    }
    tg[3] = -1;
}

/* Whether element range [off, off+len) of tensor i in the whole layout belongs to this stage. */
static void stage_range(const anvil_model *ref, int i, int l0, int l1, size_t *begin, size_t *end) {
    size_t a = ref->offsets[i], b = ref->offsets[i + 1], L = (size_t)ref->cfg.n_layer;
    int first = l0 == 0, last = l1 == ref->cfg.n_layer;
    *begin = *end = a;
    anvil_tensor_info t;
    anvil_model_tensor(&ref->cfg, i, &t);
    if (t.place == ANVIL_PLACE_FIRST || t.place == ANVIL_PLACE_TIED) {
        if (first) *end = b;
    } else if (t.place == ANVIL_PLACE_LAST) {
        if (last) *end = b;
    } else {
        size_t per = (b - a) / L;
        *begin = a + (size_t)l0 * per;
        *end = a + (size_t)l1 * per;
    }
}

static void run_reference(const anvil_model_config *cfg, reference *ref) {
    const anvil_kernels *k = anvil_kernels_cpu();
    CHECK(anvil_model_init(&ref->model, cfg, k) == 0);
    anvil_model *m = &ref->model;
    anvil_model_init_weights(m, 777);
    anvil_adamw_config ac = {0.9f, 0.95f, 1e-8f, 0.1f};
    anvil_adamw o;
    CHECK(t_adamw_whole(&o, k, &ac, m->offsets, &m->cfg) == 0);
    int32_t *in = malloc(M * B * T * sizeof *in), *tg = malloc(M * B * T * sizeof *tg);
    anvil_rng rng;
    anvil_rng_seed(&rng, 4242);
    for (int s = 0; s < STEPS; s++) {
        fill_batch(&rng, cfg->vocab_size, in, tg);
        anvil_model_zero_grad(m);
        double l = 0.0;
        for (int mb = 0; mb < M; mb++) {
            float lm = 0.0f;
            CHECK(anvil_model_forward_backward(m, in + mb * B * T, tg + mb * B * T, B, T, 1.0f / M, &lm) == 0);
            l += lm;
        }
        ref->loss[s] = (float)(l / M);
        ref->norm[s] = anvil_adamw_step(&o, m->params, m->grads, anvil_adamw_grad_sumsq(&o, m->grads), 1.0f, 3e-3f);
    }
    free(in);
    free(tg);
    anvil_adamw_free(&o);
}

/* The same steps through the pipeline; the stage starts from the reference's initial weights. */
static void run(const anvil_model_config *cfg, const anvil_grid *grid, anvil_pp_schedule sched, int sp,
                const reference *ref, run_result *res) {
    const anvil_kernels *k = anvil_kernels_cpu();
    memset(res, 0, sizeof *res);
    anvil_model init;
    CHECK(anvil_model_init(&init, cfg, k) == 0);
    anvil_model_init_weights(&init, 777);
    anvil_pp *pp = anvil_pp_new(cfg, k, grid, M, sched);
    CHECK(pp != NULL);
    if (!pp) {
        anvil_model_free(&init);
        return;
    }
    anvil_tp *st = anvil_pp_stage(pp);
    anvil_model_set_sequence_parallel(anvil_tp_model(st), sp);
    CHECK(anvil_tp_shard(st, init.params, anvil_tp_params(st)) == 0);
    anvil_adamw_config ac = {0.9f, 0.95f, 1e-8f, 0.1f};
    anvil_adamw opp;
    CHECK(t_adamw_whole(&opp, k, &ac, anvil_tp_offsets(st), cfg) == 0);
    anvil_zg *zg = NULL;
    if (grid->dp > 1) CHECK((zg = anvil_zg_new(grid, st, 0, &opp)) != NULL);
    int32_t *in = malloc(M * B * T * sizeof *in), *tg = malloc(M * B * T * sizeof *tg);
    anvil_rng rng;
    anvil_rng_seed(&rng, 4242);
    for (int s = 0; s < STEPS; s++) {
        fill_batch(&rng, cfg->vocab_size, in, tg);
        anvil_model_zero_grad(anvil_tp_model(st));
        uint64_t b0 = anvil_pp_bytes_sent(pp);
        float lpp = 0.0f, npp = 0.0f;
        CHECK(anvil_pp_forward_backward(pp, in, tg, B, T, 1.0f / (float)grid->dp, &lpp) == 0);
        res->bytes_per_step = anvil_pp_bytes_sent(pp) - b0;
        if (zg) {
            CHECK(anvil_zg_reduce_grads(zg) == 0 && anvil_zg_step(zg, 3e-3f, 1.0f, &npp) == 0);
        } else {
            double spp = 0.0;
            CHECK(anvil_pp_grad_sumsq(pp, &spp) == 0);
            npp = anvil_adamw_step(&opp, anvil_tp_params(st), anvil_tp_grads(st), spp, 1.0f, 3e-3f);
        }
        res->worst_loss = fmaxf(res->worst_loss, fabsf(lpp - ref->loss[s]) / ref->loss[s]);
        res->worst_norm = fmaxf(res->worst_norm, fabsf(npp - ref->norm[s]) / ref->norm[s]);
    }
    /* The stage's tensors put back whole (the other stages' parts left zero), against the reference. */
    const anvil_model *rm = &ref->model;
    float *full = calloc(rm->nparams, sizeof *full);
    for (int i = 0; i < rm->ntensors; i++)
        CHECK(anvil_tp_gather_tensor(st, i, anvil_tp_params(st), full + rm->offsets[i]) == 0);
    int l0, l1;
    anvil_pp_layers(pp, &l0, &l1);
    for (int i = 0; i < rm->ntensors; i++) {
        size_t a, b;
        stage_range(rm, i, l0, l1, &a, &b);
        for (size_t j = a; j < b; j++) res->weight_dev = fmaxf(res->weight_dev, fabsf(full[j] - rm->params[j]));
    }
    res->nlocal = anvil_tp_num_params(st);
    res->local = malloc(res->nlocal * sizeof(float));
    memcpy(res->local, anvil_tp_params(st), res->nlocal * sizeof(float));
    res->max_in_flight = anvil_pp_max_in_flight(pp);
    double idle, busy;
    anvil_pp_idle(pp, &idle, &busy);
    CHECK(busy > 0.0 && idle >= 0.0 && idle <= busy);
    free(full);
    free(in);
    free(tg);
    anvil_zg_free(zg);
    anvil_adamw_free(&opp);
    anvil_pp_free(pp);
    anvil_model_free(&init);
}

static void test_layout(const anvil_model_config *cfg, const reference *ref, int pp, int tp, int sp) {
    anvil_grid grid;
    CHECK(anvil_grid_check(W, tp, pp, cfg) == 0);
    if (anvil_grid_init(&grid, anvil_dist_world(), tp, pp)) {
        CHECK(0);
        return;
    }
    run_result g, f;
    run(cfg, &grid, ANVIL_PP_GPIPE, sp, ref, &g);
    run(cfg, &grid, ANVIL_PP_1F1B, sp, ref, &f);
    int s = grid.pp_rank, P = grid.pp;
    printf("rank %d, DP %d%s x PP %d x TP %d%s, stage %d: deviation loss %.3g / %.3g, grad norm %.3g / %.3g, weights %.3g / %.3g "
           "(GPipe / 1F1B); held %d / %d micro-batches; sent %llu bytes per step\n",
           R, grid.dp, grid.dp > 1 ? " (ZeRO-1)" : "", P, tp, sp ? " + SP" : "", s, g.worst_loss, f.worst_loss, g.worst_norm, f.worst_norm, g.weight_dev, f.weight_dev,
           g.max_in_flight, f.max_in_flight, (unsigned long long)f.bytes_per_step);
    CHECK(g.worst_loss <= LOSS_RTOL && f.worst_loss <= LOSS_RTOL);
    CHECK(g.worst_norm <= NORM_RTOL && f.worst_norm <= NORM_RTOL);
    CHECK(g.weight_dev <= WEIGHT_ATOL && f.weight_dev <= WEIGHT_ATOL);
    /* Same backward order, same accumulation: the schedules agree bit for bit. */
    CHECK(g.nlocal == f.nlocal && g.local && f.local && memcmp(g.local, f.local, g.nlocal * sizeof(float)) == 0);
    CHECK(g.max_in_flight == M);
    CHECK(f.max_in_flight == (P - s < M ? P - s : M) && f.max_in_flight <= P);
    /* One activation forward and one gradient backward per micro-batch over each boundary this stage has;
     * with sequence parallelism a TP rank sends its share of the tokens only. */
    uint64_t per_mb = (uint64_t)B * T * cfg->n_embd * sizeof(float) / (uint64_t)(sp ? tp : 1);
    uint64_t boundaries = (uint64_t)(s < P - 1) + (uint64_t)(s > 0);
    CHECK(f.bytes_per_step == boundaries * M * per_mb && g.bytes_per_step == f.bytes_per_step);
    free(g.local);
    free(f.local);
    anvil_grid_free(&grid);
}

int main(void) {
    anvil_dist_config dc = {.timeout_s = 60};
    if (anvil_dist_init(&dc)) {
        fprintf(stderr, "%s\n", anvil_errmsg());
        return 1;
    }
    R = anvil_dist_rank();
    W = anvil_dist_world_size();
    anvil_model_config cfg = t_gpt2(4, 4, 64, 64, 257);
    CHECK(anvil_model_config_check(&cfg) == 0);
    reference ref;
    run_reference(&cfg, &ref);
    /* (PP, TP, DP, sequence parallel) */
    const int layouts[][4] = {{1, 1, 1, 0}, {2, 1, 1, 0}, {4, 1, 1, 0}, {2, 2, 1, 0},
                              {2, 2, 1, 1}, {1, 1, 2, 0}, {2, 1, 2, 0}};
    for (size_t i = 0; i < sizeof layouts / sizeof layouts[0]; i++)
        if (layouts[i][0] * layouts[i][1] * layouts[i][2] == W)
            test_layout(&cfg, &ref, layouts[i][0], layouts[i][1], layouts[i][3]);
    anvil_model_free(&ref.model);
    char name[32];
    snprintf(name, sizeof name, "test_pp rank %d/%d", R, W);
    int rc = t_done(name);
    anvil_dist_finalize();
    return rc;
}
