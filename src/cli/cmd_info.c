/* anvil info: presets, parameter counts, and the kernels this machine uses. */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli/args.h"
#include "cli/commands.h"
#include "core/clock.h"
#include "core/error.h"
#include "kernels/cuda.h"
#include "kernels/gemm.h"
#include "kernels/isa.h"
#include "model/model.h"

static const char *usage =
    "usage: anvil info [--gemm-rate]\n"
    "\n"
    "Lists the model presets with their sizes and the kernels in use: the instruction-set\n"
    "path (the best this CPU runs, or ANVIL_ISA=avx512|avx2|generic to force a lower one),\n"
    "its GEMM, and whether --dtype bf16 can run here; and the peak that train's MFU divides by\n"
    "(vector multiply-adds on every thread), with where it comes from: this machine's cache\n"
    "($ANVIL_CACHE_DIR, else $XDG_CACHE_HOME/anvil, else ~/.cache/anvil: peak.json, the best\n"
    "of the probes run here for this CPU, path, dtype and thread count), or a probe now (about\n"
    "a second), which is then cached.\n"
    "  --gemm-rate   measure this machine: the path's vector multiply-add peak (independent\n"
    "                FMA chains on every thread) and the large-SGEMM rate (median of 5, 2048^3)\n"
    "                as a share of it; where bf16 runs, the peak of each bf16 kernel the CPU has\n"
    "                (vdpbf16ps; AMX's TDPBF16PS on resident tiles) and the bf16 GEMM's rate as a\n"
    "                share of its kernel's peak; one JSON line. Its probes go into the cache, which\n"
    "                keeps the best\n";

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

typedef int (*gemm_fn)(bool, bool, int, int, int, float, const float *, int, const float *, int, float, float *,
                       int);

static int fp32_gemm(bool ta, bool tb, int M, int N, int K, float alpha, const float *A, int lda, const float *B,
                     int ldb, float beta, float *C, int ldc) {
    anvil_sgemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    return 0;
}

/* GFLOP/s of fn on an n^3 product: the median of 5 after one warm-up. */
static double square_rate(gemm_fn fn, int n, const float *a, const float *b, float *c) {
    enum { REPS = 5 };
    double t[REPS];
    if (fn(false, false, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n)) return 0.0;
    for (int r = 0; r < REPS; r++) {
        double t0 = anvil_now();
        fn(false, false, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n);
        t[r] = anvil_now() - t0;
    }
    qsort(t, REPS, sizeof(double), cmp);
    return 2.0 * n * n * n / t[REPS / 2] / 1e9;
}

static int gemm_rate(void) {
    const int n = 2048;
    float *a = malloc(sizeof(float) * n * n), *b = malloc(sizeof(float) * n * n), *c = malloc(sizeof(float) * n * n);
    if (!a || !b || !c) {
        free(a);
        free(b);
        free(c);
        fprintf(stderr, "anvil info: out of memory for three %d x %d matrices\n", n, n);
        return 1;
    }
    for (long i = 0; i < (long)n * n; i++) {
        a[i] = (float)(i % 7) * 0.1f;
        b[i] = (float)(i % 5) * 0.1f;
    }
    anvil_isa isa = anvil_isa_active();
    /* This probe also goes into the machine's peak cache, which keeps the best. */
    anvil_peak best;
    if (anvil_isa_peak(isa, ANVIL_BF16_NONE, true, &best)) return cli_fail("info");
    if (best.note[0]) fprintf(stderr, "anvil info: note: %s\n", best.note);
    double peak = best.probed;
    double rate = square_rate(fp32_gemm, n, a, b, c);
    printf("{\"path\": \"%s\", \"impl\": \"%s\", \"threads\": %d, \"n\": %d, \"fma_peak_gflops\": %.1f, "
           "\"sgemm_gflops\": %.1f, \"sgemm_share_of_peak\": %.3f, \"cached_peak_gflops\": %.1f",
           anvil_isa_name(isa), anvil_sgemm_impl(), omp_get_max_threads(), n, peak, rate, rate / peak, best.gflops);
    if (anvil_isa_check_bf16() == 0) {
        static const struct {
            anvil_bf16_kernel k;
            const char *key;
        } kinds[] = {{ANVIL_BF16_AVX512, "vdpbf16ps_peak_gflops"}, {ANVIL_BF16_AMX, "amx_peak_gflops"}};
        anvil_bf16_kernel in_use = anvil_isa_bf16();
        double used_peak = 0;
        for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++) {
            anvil_peak bp;
            if (!anvil_isa_bf16_available(kinds[i].k)) continue;
            if (anvil_isa_peak(isa, kinds[i].k, true, &bp)) return cli_fail("info");
            if (bp.note[0]) fprintf(stderr, "anvil info: note: %s\n", bp.note);
            printf(", \"%s\": %.1f", kinds[i].key, bp.probed);
            if (kinds[i].k == in_use) used_peak = bp.probed;
        }
        double brate = square_rate(anvil_sgemm_bf16, n, a, b, c);
        printf(", \"bf16_kernel\": \"%s\", \"bf16_gemm_gflops\": %.1f, \"bf16_gemm_share_of_peak\": %.3f",
               anvil_isa_bf16_name(in_use), brate, used_peak > 0 ? brate / used_peak : 0.0);
    }
    printf("}\n");
    free(a);
    free(b);
    free(c);
    return 0;
}

/* Which paths this CPU runs, best first, e.g. "avx512 avx2 generic". */
static void supported_paths(char *buf, size_t cap) {
    buf[0] = 0;
    for (int i = ANVIL_ISA_COUNT - 1; i >= 0; i--) {
        if (!anvil_isa_supported((anvil_isa)i)) continue;
        size_t len = strlen(buf);
        snprintf(buf + len, cap - len, "%s%s", len ? " " : "", anvil_isa_name((anvil_isa)i));
    }
}

/* MFU's peak (the fp32 one, or the bf16 kernel's) and where it comes from: the machine's cache, or a
 * probe now. */
static int print_peak(anvil_bf16_kernel bf16) {
    anvil_peak p;
    if (anvil_isa_peak(anvil_isa_active(), bf16, false, &p)) return -1;
    if (p.note[0]) fprintf(stderr, "anvil info: note: %s\n", p.note);
    char at[32];
    time_t when = (time_t)p.probed_at;
    struct tm tm;
    strftime(at, sizeof at, "%Y-%m-%d %H:%M UTC", gmtime_r(&when, &tm));
    printf("mfu peak:  %.1f GFLOP/s %s (%s, %d threads): %s", p.gflops, p.dtype, p.path, p.threads,
           p.cached ? "from the cache " : "probed now");
    if (p.cached) printf("%s, the best of %d probe%s (%s)\n", p.file, p.probes, p.probes == 1 ? "" : "s", at);
    else if (p.stored) printf(", cached in %s\n", p.file);
    else printf(", not cached\n");
    return 0;
}

/* The GPUs --device cuda:N can name, or why there are none. */
static void list_gpus(void) {
    int n = anvil_cuda_device_count();
    if (n < 0) {
        printf("gpus:      none: %s\n", anvil_errmsg());
        return;
    }
    for (int i = 0; i < n; i++) {
        anvil_cuda_device d;
        if (anvil_cuda_device_info(i, &d)) printf("gpu %-6d %s\n", i, anvil_errmsg());
        else
            printf("gpu %-6d %s, %.1f GiB, %d SMs, compute capability %d.%d (--device cuda:%d)\n", i, d.name,
                   (double)d.memory_bytes / (1u << 30), d.sm_count, d.cc_major, d.cc_minor, i);
    }
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
    printf("%-12s %-6s %6s %6s %8s %6s %6s %7s %6s %7s %11s\n", "preset", "family", "layers", "heads", "kv heads",
           "embd", "ffn", "block", "vocab", "tied", "parameters");
    const char *name;
    for (int i = 0; anvil_model_preset_at(i, &name, NULL); i++) {
        anvil_model_config c;
        if (anvil_model_preset(name, &c) || anvil_model_config_check(&c)) return cli_fail("info");
        double n = (double)anvil_model_num_params(&c);
        printf("%-12s %-6s %6d %6d %8d %6d %6d %7d %6d %7s %10.2f%c\n", name, anvil_model_family_name(c.family),
               c.n_layer, c.n_head, c.n_kv_head, c.n_embd, c.ffn_hidden, c.block_size, c.vocab_size,
               c.tied ? "yes" : "no", n >= 1e9 ? n / 1e9 : n / 1e6, n >= 1e9 ? 'B' : 'M');
    }
    char paths[64];
    supported_paths(paths, sizeof paths);
    const char *forced = getenv("ANVIL_ISA");
    printf("\ncpu path:  %s (%s; this CPU runs: %s)\n", anvil_isa_name(anvil_isa_active()),
           forced && *forced && strcmp(forced, "auto") ? "forced by ANVIL_ISA" : "the best this CPU runs", paths);
    printf("sgemm:     anvil's %s kernel on %d OpenMP threads; OpenBLAS is not used (its results change\n"
           "           with the thread count; speeds side by side: bench/bench_gemm, bench/RESULTS.md)\n",
           anvil_sgemm_impl(), omp_get_max_threads());
    anvil_bf16_kernel bk = anvil_isa_bf16();
    if (bk == ANVIL_BF16_AMX) printf("bf16:      yes, by AMX (TDPBF16PS); ANVIL_BF16=avx512 for vdpbf16ps\n");
    else if (bk == ANVIL_BF16_AVX512) printf("bf16:      yes, by AVX512_BF16 (vdpbf16ps)\n");
    else printf("bf16:      no: %s\n", anvil_errmsg());
    if (print_peak(ANVIL_BF16_NONE) || (bk != ANVIL_BF16_NONE && print_peak(bk))) return cli_fail("info");
    list_gpus();
    return 0;
}
