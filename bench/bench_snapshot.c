/* What a checkpoint's snapshot costs the training process, by method, on a
 * real model and optimizer (GPT-2 124M by default: weights and AdamW m and v,
 * 1.5 GB), with training steps (forward, backward, AdamW) on random tokens:
 *
 *   - copy: anvil_ckpt_snapshot_take, the trainer's way (every OpenMP thread
 *     copies into the files' images and checksums in the same pass); its
 *     first call, which faults the images' pages in, is shown apart;
 *   - fork: fork() a child that holds a copy-on-write image of the whole
 *     process (it waits on a pipe, as a writer child would while writing),
 *     then one training step in the parent: the fork call, and the step's
 *     time above an ordinary step, which is what the copy-on-write faults of
 *     every page the step writes (gradients, activations, weights, moments)
 *     cost. The child never writes: this is the cheapest fork can be.
 *
 *   bench_snapshot [--preset NAME] [--batch B] [--seq T] [--reps N]
 *
 * Medians of reps (default 5). Only timing: the trainer itself never forks. */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ckpt/checkpoint.h"
#include "core/clock.h"
#include "core/error.h"
#include "core/rng.h"
#include "kernels/kernels.h"
#include "model/model.h"
#include "optim/optim.h"

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

typedef struct {
    anvil_model m;
    anvil_adamw o;
    int32_t *x, *y;
    int B, T;
    anvil_rng rng;
} run;

/* One training step; its time in ms, or -1. */
static double step(run *r) {
    for (int i = 0; i < r->B * r->T; i++) {
        r->x[i] = (int32_t)(anvil_rng_u64(&r->rng) % (uint64_t)r->m.cfg.vocab_size);
        r->y[i] = (int32_t)(anvil_rng_u64(&r->rng) % (uint64_t)r->m.cfg.vocab_size);
    }
    double t0 = anvil_now();
    float loss;
    anvil_model_zero_grad(&r->m);
    if (anvil_model_forward_backward(&r->m, r->x, r->y, r->B, r->T, 1.0f, &loss)) return -1;
    double sumsq = anvil_adamw_grad_sumsq(&r->o, r->m.grads);
    anvil_adamw_step(&r->o, r->m.params, r->m.grads, sumsq, 1.0f, 1e-4f);
    return (anvil_now() - t0) * 1e3;
}

int main(int argc, char **argv) {
    const char *preset = "gpt2";
    int reps = 5;
    run r = {.B = 4, .T = 64};
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--preset")) preset = argv[i + 1];
        else if (!strcmp(argv[i], "--batch")) r.B = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--seq")) r.T = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--reps")) reps = atoi(argv[i + 1]);
        else {
            fprintf(stderr, "bench_snapshot: unknown option %s\n", argv[i]);
            return 2;
        }
    }
    if (reps < 1 || reps > 100 || r.B < 1 || r.T < 1) {
        fprintf(stderr, "bench_snapshot: --reps must be 1..100, --batch and --seq positive\n");
        return 2;
    }
    anvil_model_config cfg;
    const anvil_kernels *k = anvil_kernels_cpu();
    anvil_adamw_config ac = {0.9f, 0.95f, 1e-8f, 0.1f};
    int decays[ANVIL_MODEL_MAX_TENSORS];
    if (anvil_model_preset(preset, &cfg) || anvil_model_init(&r.m, &cfg, k) ||
        (anvil_model_decays(&r.m.cfg, decays),
         anvil_adamw_init_whole(&r.o, k, &ac, r.m.offsets, r.m.ntensors, decays))) {
        fprintf(stderr, "bench_snapshot: %s\n", anvil_errmsg());
        return 1;
    }
    anvil_model_init_weights(&r.m, 1);
    anvil_rng_seed(&r.rng, 7);
    r.x = malloc(sizeof(int32_t) * (size_t)(r.B * r.T));
    r.y = malloc(sizeof(int32_t) * (size_t)(r.B * r.T));
    double *plain = calloc((size_t)reps, sizeof(double)), *copy = calloc((size_t)reps, sizeof(double));
    double *forked = calloc((size_t)reps, sizeof(double)), *fork_ms = calloc((size_t)reps, sizeof(double));
    if (!r.x || !r.y || !plain || !copy || !forked || !fork_ms) return 1;

    for (int i = 0; i < 2; i++) /* warmup: every buffer touched */
        if (step(&r) < 0) return 1;
    anvil_ckpt_state st = {&r.m, &r.o, {0}, r.rng, 1, 0, NULL, NULL, NULL};
    double t0 = anvil_now();
    anvil_ckpt_snapshot *snap = anvil_ckpt_snapshot_take(NULL, &st);
    double first_copy = (anvil_now() - t0) * 1e3;
    if (!snap) {
        fprintf(stderr, "bench_snapshot: %s\n", anvil_errmsg());
        return 1;
    }
    for (int i = 0; i < reps; i++) {
        if ((plain[i] = step(&r)) < 0) return 1;
        t0 = anvil_now();
        snap = anvil_ckpt_snapshot_take(snap, &st);
        copy[i] = (anvil_now() - t0) * 1e3;
        if (!snap) return 1;
        int pipefd[2];
        if (pipe(pipefd)) return 1;
        t0 = anvil_now();
        pid_t pid = fork();
        if (pid == 0) {
            char c;
            close(pipefd[1]);
            _exit(read(pipefd[0], &c, 1) < 0);
        }
        fork_ms[i] = (anvil_now() - t0) * 1e3;
        close(pipefd[0]);
        if (pid < 0 || (forked[i] = step(&r)) < 0) return 1;
        close(pipefd[1]);
        waitpid(pid, NULL, 0);
    }
    anvil_ckpt_snapshot_free(snap);
    double p = median(plain, reps), f = median(forked, reps), c = median(copy, reps), fk = median(fork_ms, reps);
    size_t state_mb = r.m.nparams * 3 * sizeof(float) >> 20;
    printf("| method (%s, %zu MB of weights and moments, B=%d T=%d, %d threads) | cost to the training thread, median of %d |\n",
           preset, state_mb, r.B, r.T, omp_get_max_threads(), reps);
    printf("|---|---:|\n");
    printf("| training step, no snapshot | %.0f ms |\n", p);
    printf("| copy: anvil_ckpt_snapshot_take (first call, faulting its pages in: %.0f ms) | %.0f ms |\n", first_copy,
           c);
    printf("| fork: the fork() call | %.1f ms |\n", fk);
    printf("| fork: the next step's time above an ordinary step (copy-on-write faults) | %.0f ms |\n", f - p);
    printf("| fork: in all | %.0f ms (%.1fx the copy) |\n", fk + f - p, (fk + f - p) / c);
    anvil_adamw_free(&r.o);
    anvil_model_free(&r.m);
    free(r.x);
    free(r.y);
    free(plain);
    free(copy);
    free(forked);
    free(fork_ms);
    return 0;
}
