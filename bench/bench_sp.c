/* Sequence parallelism against plain tensor parallelism: the activation
 * memory a rank allocates and the training step's time, over one TP group
 * of every rank.
 *
 *   anvil launch -n TP --exec build/bench/bench_sp -- [off|on|both] [STEPS]
 *
 * The model: 6 layers, 8 heads, C = 384 (the "small" preset's shapes with a
 * 257-token vocabulary), micro-batches of 4 x 256 tokens, forward and
 * backward only (no optimizer). "off" and "on" run one mode and print, per
 * rank, the bytes of the activation buffers the TP module allocated and the
 * process's peak RSS, so that the two modes' peaks come from separate
 * processes; "both" (the default) alternates a step of each, after 2 warm-up
 * steps of each, and prints the median step time of each over STEPS (default
 * 7) and the median of the per-pair ratios SP / no-SP. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "core/clock.h"
#include "core/error.h"
#include "core/rng.h"
#include "dist/comm.h"
#include "dist/tensorparallel.h"
#include "model/model.h"

enum { B = 4, T = 256, WARMUP = 2, MAX_STEPS = 64 };

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static int die(void) {
    fprintf(stderr, "bench_sp: %s\n", anvil_errmsg());
    anvil_dist_finalize();
    return 1;
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp);
    return v[n / 2];
}

/* One timed step: the group starts together, and the step ends when its slowest rank does. */
static int step(anvil_tp *m, const int32_t *in, const int32_t *tg, double *seconds) {
    float loss;
    if (anvil_barrier(anvil_dist_world(), "bench_sp start")) return -1;
    double t0 = anvil_now();
    anvil_model_zero_grad(anvil_tp_model(m));
    if (anvil_model_forward_backward(anvil_tp_model(m), in, tg, B, T, 1.0f, &loss) ||
        anvil_barrier(anvil_dist_world(), "bench_sp end"))
        return -1;
    *seconds = anvil_now() - t0;
    return 0;
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "both";
    int steps = argc > 2 ? atoi(argv[2]) : 7;
    if ((strcmp(mode, "off") && strcmp(mode, "on") && strcmp(mode, "both")) || steps < 1 || steps > MAX_STEPS) {
        fprintf(stderr, "usage: bench_sp [off|on|both] [STEPS, 1-%d]\n", MAX_STEPS);
        return 2;
    }
    anvil_dist_config dc = {.timeout_s = 300};
    if (anvil_dist_init(&dc)) return die();
    int W = anvil_dist_world_size(), R = anvil_dist_rank();
    anvil_model_config cfg = {.family = anvil_model_family_named("gpt2"), .n_layer = 6, .n_head = 8, .n_embd = 384,
                              .block_size = T, .vocab_size = 257};
    if (anvil_model_config_check(&cfg)) return die();
    const anvil_kernels *k = anvil_kernels_cpu();
    int both = !strcmp(mode, "both");
    anvil_tp *m[2] = {NULL, NULL}; /* [0]: no SP, [1]: SP */
    for (int sp = 0; sp < 2; sp++) {
        if (!both && sp != !strcmp(mode, "on")) continue;
        if (!(m[sp] = anvil_tp_new(&cfg, k, anvil_dist_world())) || anvil_tp_init_weights(m[sp], 1)) return die();
        anvil_model_set_sequence_parallel(anvil_tp_model(m[sp]), sp);
    }
    int32_t *in = malloc(B * T * sizeof *in), *tg = malloc(B * T * sizeof *tg);
    double *t[2] = {malloc(sizeof(double) * (size_t)steps), malloc(sizeof(double) * (size_t)steps)};
    double *ratio = malloc(sizeof(double) * (size_t)steps);
    if (!in || !tg || !t[0] || !t[1] || !ratio) return 1;
    anvil_rng rng;
    anvil_rng_seed(&rng, 7);
    for (int i = 0; i < B * T; i++) {
        in[i] = (int32_t)(anvil_rng_u64(&rng) % (uint64_t)cfg.vocab_size);
        tg[i] = (int32_t)(anvil_rng_u64(&rng) % (uint64_t)cfg.vocab_size);
    }
    for (int s = 0; s < WARMUP + steps; s++)
        for (int sp = 0; sp < 2; sp++) {
            double sec;
            if (!m[sp]) continue;
            if (step(m[sp], in, tg, &sec)) return die();
            if (s >= WARMUP) t[sp][s - WARMUP] = sec;
        }
    if (both) {
        for (int s = 0; s < steps; s++) ratio[s] = t[1][s] / t[0][s];
        double r = median(ratio, steps), off = median(t[0], steps), on = median(t[1], steps);
        if (R == 0)
            printf("{\"tp\":%d,\"B\":%d,\"T\":%d,\"steps\":%d,\"median_s_off\":%.4f,\"median_s_on\":%.4f,"
                   "\"median_ratio_on_off\":%.3f}\n",
                   W, B, T, steps, off, on, r);
    } else {
        int sp = !strcmp(mode, "on");
        struct rusage ru;
        getrusage(RUSAGE_SELF, &ru);
        printf("{\"tp\":%d,\"rank\":%d,\"sequence_parallel\":%d,\"activation_bytes\":%zu,\"peak_rss_kb\":%ld,"
               "\"median_s\":%.4f}\n",
               W, R, sp, anvil_model_activation_bytes(anvil_tp_model(m[sp])), ru.ru_maxrss, median(t[sp], steps));
    }
    free(in);
    free(tg);
    free(t[0]);
    free(t[1]);
    free(ratio);
    anvil_tp_free(m[0]);
    anvil_tp_free(m[1]);
    anvil_dist_finalize();
    return 0;
}
