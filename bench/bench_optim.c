/* The optimizer's step on its own: the gradient norm's pass and AdamW with clipping, over one tensor
 * of N floats (default 123,886,080, GPT-2 124M's parameters), with the clip active, as it is early
 * in training. Two forms of the same arithmetic, interleaved: anvil's (the norm's pass, then one
 * pass that scales each gradient as the update reads it) and the clip as a pass of its own before
 * the update (what anvil did before, and what torch.nn.utils.clip_grad_norm_ does). Medians of
 * reps; GB/s counts the bytes each form must move (the norm reads g; the update reads p, g, m, v
 * and writes p, m, v; the clip's own pass reads and writes g). One JSON line; bench_optim.sh runs
 * the PyTorch peer (bench/torch_optim_peer.py) beside it.
 *
 *   bench_optim [--n N] [--reps N] */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/clock.h"
#include "kernels/kernels.h"
#include "optim/optim.h"

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return v[n / 2];
}

int main(int argc, char **argv) {
    size_t n = 123886080;
    int reps = 7;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--n")) n = (size_t)atoll(argv[i + 1]);
        else if (!strcmp(argv[i], "--reps")) reps = atoi(argv[i + 1]);
        else {
            fprintf(stderr, "bench_optim: unknown option %s\n", argv[i]);
            return 2;
        }
    }
    if (n == 0 || reps < 1 || reps > 1000) {
        fprintf(stderr, "bench_optim: --n and --reps must be positive (reps at most 1000)\n");
        return 2;
    }
    const anvil_kernels *k = anvil_kernels_cpu();
    float *p = k->alloc(n * sizeof(float)), *g = k->alloc(n * sizeof(float));
    if (!p || !g) {
        fprintf(stderr, "bench_optim: out of memory for %zu parameters\n", n);
        return 1;
    }
    for (size_t i = 0; i < n; i++) {
        p[i] = 0.02f * (float)((int)(i % 201) - 100) / 100.0f;
        g[i] = 1e-3f * (float)((int)(i % 193) - 96) / 96.0f;
    }
    size_t offsets[] = {0, n};
    int decays[] = {1};
    anvil_adamw_config cfg = {.beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.1f};
    anvil_adamw opt;
    if (anvil_adamw_init_whole(&opt, k, &cfg, offsets, 1, decays)) {
        fprintf(stderr, "bench_optim: cannot allocate the moments\n");
        return 1;
    }
    /* A max norm below the gradients' so that every step clips. */
    const float lr = 6e-4f, max_norm = 1e-3f;
    double *fused = malloc(sizeof(double) * (size_t)reps), *apart = malloc(sizeof(double) * (size_t)reps);
    if (!fused || !apart) return 1;
    float norm = 0;
    for (int r = -1; r < reps; r++) {
        double t0 = anvil_now();
        norm = anvil_adamw_step(&opt, p, g, anvil_adamw_grad_sumsq(&opt, g), max_norm, lr);
        double t1 = anvil_now();
        /* The same update with the clip as a pass of its own. */
        double ss = anvil_adamw_grad_sumsq(&opt, g);
        float coef = (float)(max_norm / (__builtin_sqrt(ss) + 1e-6));
#pragma omp parallel for simd schedule(static)
        for (size_t i = 0; i < n; i++) g[i] *= coef;
        anvil_adamw_step(&opt, p, g, ss * (double)coef * coef, 0.0f, lr);
        double t2 = anvil_now();
        /* Back to gradients above the clip for the next rep. */
#pragma omp parallel for simd schedule(static)
        for (size_t i = 0; i < n; i++) g[i] /= coef;
        if (r >= 0) {
            fused[r] = t1 - t0;
            apart[r] = t2 - t1;
        }
    }
    double f = median(fused, reps), a = median(apart, reps);
    double gb = 1e-9 * (double)n * sizeof(float);
    printf("{\"impl\":\"anvil\",\"threads\":%d,\"n\":%zu,\"reps\":%d,\"norm\":%.6g,\"ms_fused\":%.2f,\"ms_clip_pass\":%.2f,"
           "\"gbps_fused\":%.1f,\"gbps_clip_pass\":%.1f}\n",
           omp_get_max_threads(), n, reps, norm, f * 1e3, a * 1e3, 8 * gb / f, 10 * gb / a);
    anvil_adamw_free(&opt);
    k->free(p);
    k->free(g);
    free(fused);
    free(apart);
    return 0;
}
