/* The pipeline bubble, measured: each stage's share of a training step's
 * schedule spent blocked on a neighbour (anvil_pp_idle), for m = 4, 8 and 16
 * micro-batches, beside (P-1)/(m+P-1), the share for stages of equal cost
 * and free communication. One rank per stage (no TP, no DP).
 *
 *   anvil launch -n P --exec build/bench/bench_pp -- [1f1b|gpipe] [STEPS]
 *
 * The model: 4 layers (P must divide them evenly for balanced stages), 4
 * heads, C = 128, a 64-token vocabulary so that the last stage's LM head
 * and loss cost little next to its layers; micro-batches of 4 x 64 tokens.
 * Each m runs 2 warm-up steps, then STEPS (default 7) timed ones; per stage
 * the median over those of the step's idle share. Prints one JSON object per
 * (m, stage). More ranks than cores inflate the idle share: a stage waiting
 * for the core also waits for its neighbour. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/rng.h"
#include "dist/comm.h"
#include "dist/grid.h"
#include "dist/pipeline.h"
#include "model/model.h"

enum { B = 4, T = 64, WARMUP = 2, MAX_STEPS = 64 };

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static int die(void) {
    fprintf(stderr, "bench_pp: %s\n", anvil_errmsg());
    anvil_dist_finalize();
    return 1;
}

int main(int argc, char **argv) {
    anvil_pp_schedule sched = argc > 1 && !strcmp(argv[1], "gpipe") ? ANVIL_PP_GPIPE : ANVIL_PP_1F1B;
    int steps = argc > 2 ? atoi(argv[2]) : 7;
    if ((argc > 1 && strcmp(argv[1], "gpipe") && strcmp(argv[1], "1f1b")) || steps < 1 || steps > MAX_STEPS) {
        fprintf(stderr, "usage: bench_pp [1f1b|gpipe] [STEPS, 1-%d]\n", MAX_STEPS);
        return 2;
    }
    anvil_dist_config dc = {.timeout_s = 120};
    if (anvil_dist_init(&dc)) return die();
    int W = anvil_dist_world_size();
    anvil_model_config cfg = {.family = anvil_model_family_named("gpt2"), .n_layer = 4, .n_head = 4, .n_embd = 128,
                              .block_size = T, .vocab_size = 64};
    anvil_grid grid;
    if (anvil_model_config_check(&cfg) || anvil_grid_check(W, 1, W, &cfg) ||
        anvil_grid_init(&grid, anvil_dist_world(), 1, W))
        return die();
    const anvil_kernels *k = anvil_kernels_cpu();
    anvil_model init;
    if (anvil_model_init(&init, &cfg, k)) return die();
    anvil_model_init_weights(&init, 1);
    const int ms[] = {4, 8, 16};
    int32_t *in = malloc(16 * B * T * sizeof *in), *tg = malloc(16 * B * T * sizeof *tg);
    double *share = malloc(sizeof(double) * (size_t)steps), *all = malloc(sizeof(double) * (size_t)W);
    if (!in || !tg || !share || !all) return 1;
    anvil_rng rng;
    anvil_rng_seed(&rng, 7);
    for (int i = 0; i < 16 * B * T; i++) {
        in[i] = (int32_t)(anvil_rng_u64(&rng) % (uint64_t)cfg.vocab_size);
        tg[i] = (int32_t)(anvil_rng_u64(&rng) % (uint64_t)cfg.vocab_size);
    }
    for (size_t j = 0; j < sizeof ms / sizeof ms[0]; j++) {
        int m = ms[j];
        anvil_pp *pp = anvil_pp_new(&cfg, k, &grid, m, sched);
        if (!pp || anvil_tp_shard(anvil_pp_stage(pp), init.params, anvil_tp_params(anvil_pp_stage(pp)))) return die();
        float loss;
        for (int s = 0; s < WARMUP + steps; s++) {
            double i0, s0, i1, s1;
            anvil_pp_idle(pp, &i0, &s0);
            if (anvil_pp_forward_backward(pp, in, tg, B, T, 1.0f, &loss)) return die();
            anvil_pp_idle(pp, &i1, &s1);
            if (s >= WARMUP) share[s - WARMUP] = (i1 - i0) / (s1 - s0);
        }
        qsort(share, (size_t)steps, sizeof *share, cmp);
        memset(all, 0, sizeof(double) * (size_t)W);
        all[grid.pp_rank] = share[steps / 2];
        if (anvil_allreduce(anvil_dist_world(), all, (size_t)W, ANVIL_F64, "bench_pp idle shares")) return die();
        if (anvil_dist_rank() == 0)
            for (int st = 0; st < W; st++)
                printf("{\"schedule\":\"%s\",\"P\":%d,\"m\":%d,\"stage\":%d,\"idle_share\":%.3f,\"ideal\":%.3f}\n",
                       sched == ANVIL_PP_GPIPE ? "gpipe" : "1f1b", W, m, st, all[st],
                       (double)(W - 1) / (m + W - 1));
        anvil_pp_free(pp);
    }
    free(in);
    free(tg);
    free(share);
    free(all);
    anvil_model_free(&init);
    anvil_grid_free(&grid);
    anvil_dist_finalize();
    return 0;
}
