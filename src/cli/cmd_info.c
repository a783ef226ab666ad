/* anvil info: presets, parameter counts, and the kernels this machine uses. */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/args.h"
#include "cli/commands.h"
#include "core/clock.h"
#include "kernels/gemm.h"
#include "model/gpt2.h"

static const char *usage =
    "usage: anvil info [--gemm-rate]\n"
    "\n"
    "Lists the model presets with their sizes and the kernels in use.\n"
    "  --gemm-rate   measure this machine's large-SGEMM rate (median of 5, 2048^3)\n"
    "                and print it as one JSON line: {\"sgemm_gflops\": X, \"impl\": ...}\n";

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static int gemm_rate(void) {
    const int n = 2048, reps = 5;
    float *a = malloc(sizeof(float) * n * n), *b = malloc(sizeof(float) * n * n), *c = malloc(sizeof(float) * n * n);
    if (!a || !b || !c) return 1;
    for (long i = 0; i < (long)n * n; i++) {
        a[i] = (float)(i % 7) * 0.1f;
        b[i] = (float)(i % 5) * 0.1f;
    }
    double t[5];
    anvil_sgemm(false, false, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n);
    for (int r = 0; r < reps; r++) {
        double t0 = anvil_now();
        anvil_sgemm(false, false, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n);
        t[r] = anvil_now() - t0;
    }
    qsort(t, reps, sizeof(double), cmp);
    printf("{\"sgemm_gflops\": %.1f, \"impl\": \"%s\", \"threads\": %d, \"n\": %d}\n", 2.0 * n * n * n / t[reps / 2] / 1e9,
           anvil_sgemm_impl(), omp_get_max_threads(), n);
    free(a);
    free(b);
    free(c);
    return 0;
}

int cmd_info(int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            fputs(usage, stdout);
            return 0;
        }
        if (!strcmp(argv[i], "--gemm-rate")) return gemm_rate();
        return cli_usage_error("info", "unknown option '%s'", argv[i]);
    }
    static const char *names[] = {"tiny", "mini", "small", "gpt2", "gpt2-medium", "gpt2-large", "gpt2-xl"};
    printf("%-12s %6s %6s %6s %6s %7s %12s\n", "preset", "layers", "heads", "embd", "block", "vocab", "parameters");
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        anvil_gpt2_config c;
        anvil_gpt2_preset(names[i], &c);
        anvil_gpt2_config_check(&c);
        printf("%-12s %6d %6d %6d %6d %7d %11.2fM\n", names[i], c.n_layer, c.n_head, c.n_embd, c.block_size,
               c.vocab_size, (double)anvil_gpt2_num_params(&c) / 1e6);
    }
    printf("\nkernels: cpu, sgemm %s, %d OpenMP threads\n", anvil_sgemm_impl(), omp_get_max_threads());
    return 0;
}
