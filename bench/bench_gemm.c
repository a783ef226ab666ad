/* GFLOP/s of anvil_sgemm on the active kernel path (ANVIL_ISA) against
 * OpenBLAS's cblas_sgemm on the products GPT-2 124M training runs (C = 768),
 * in the same process, interleaving the two so that load from other
 * processes hits both alike; median of reps. Every anvil figure is also
 * given as a share of the path's FMA peak, measured in the same run
 * (anvil_isa_peak_gflops: all threads, or one for the 1-thread rows).
 * With --bf16, anvil_sgemm_bf16 (AMX or vdpbf16ps: ANVIL_BF16) is measured
 * against anvil's own fp32 anvil_sgemm instead; its share is still of the
 * fp32 FMA peak, so above 100% where bf16 beats it.
 *
 *   bench_gemm [--reps N] [--quick] [--bf16] [--results bench/RESULTS.md]
 *
 * BT = 256 is the batch of a small training run (4 x 64 tokens). --quick
 * keeps only BT = 1024; --results rewrites this path's "## GEMM:"
 * section of that file (creating it if needed) and leaves every other
 * section alone. */
#include <cblas.h>
#include <omp.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/clock.h"
#include "core/error.h"
#include "kernels/gemm.h"
#include "kernels/isa.h"

typedef struct {
    char name[40];
    bool ta, tb, serial;
    int M, N, K;
    float beta;
    double anvil, peer; /* GFLOP/s, medians */
} Shape;

/* --bf16: anvil_sgemm_bf16 against anvil_sgemm; else anvil_sgemm against OpenBLAS. */
static bool bf16;
/* The path's peak on all threads and on one, GFLOP/s. */
static double peak_all, peak_one;

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof(double), cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static void peer_call(const Shape *s, const float *A, const float *B, float *C) {
    if (bf16) {
        anvil_sgemm(s->ta, s->tb, s->M, s->N, s->K, 1.0f, A, s->ta ? s->M : s->K, B, s->tb ? s->K : s->N, s->beta,
                    C, s->N);
        return;
    }
    cblas_sgemm(CblasRowMajor, s->ta ? CblasTrans : CblasNoTrans, s->tb ? CblasTrans : CblasNoTrans, s->M,
                s->N, s->K, 1.0f, A, s->ta ? s->M : s->K, B, s->tb ? s->K : s->N, s->beta, C, s->N);
}

static void anvil_call(const Shape *s, const float *A, const float *B, float *C) {
    int lda = s->ta ? s->M : s->K, ldb = s->tb ? s->K : s->N;
    if (bf16) anvil_sgemm_bf16(s->ta, s->tb, s->M, s->N, s->K, 1.0f, A, lda, B, ldb, s->beta, C, s->N);
    else if (s->serial) anvil_sgemm_serial(s->ta, s->tb, s->M, s->N, s->K, 1.0f, A, lda, B, ldb, s->beta, C, s->N);
    else anvil_sgemm(s->ta, s->tb, s->M, s->N, s->K, 1.0f, A, lda, B, ldb, s->beta, C, s->N);
}

/* Calls per timed sample, so that small products run for a few ms. */
static int inner_reps(const Shape *s) {
    double flop = 2.0 * s->M * s->N * s->K;
    int n = (int)(2e7 / flop);
    return n < 1 ? 1 : n;
}

static void measure(Shape *s, int reps) {
    size_t na = (size_t)s->M * s->K, nb = (size_t)s->K * s->N, nc = (size_t)s->M * s->N;
    float *A = malloc(na * sizeof(float)), *B = malloc(nb * sizeof(float)), *C = malloc(nc * sizeof(float));
    if (!A || !B || !C) {
        fprintf(stderr, "bench_gemm: out of memory for %s\n", s->name);
        exit(1);
    }
    for (size_t i = 0; i < na; i++) A[i] = (float)((i * 2654435761u) % 1000) * 1e-3f - 0.5f;
    for (size_t i = 0; i < nb; i++) B[i] = (float)((i * 40503u) % 1000) * 1e-3f - 0.5f;
    memset(C, 0, nc * sizeof(float));
    /* The serial lines compare one thread against one thread. */
    int threads = omp_get_max_threads();
    if (s->serial) {
        openblas_set_num_threads(1);
        omp_set_num_threads(1);
    }
    int inner = inner_reps(s);
    double flop = 2.0 * s->M * s->N * s->K * inner;
    double *ta = malloc(sizeof(double) * reps), *tb = malloc(sizeof(double) * reps);
    anvil_call(s, A, B, C);
    peer_call(s, A, B, C);
    for (int r = 0; r < reps; r++) {
        double t0 = anvil_now();
        for (int i = 0; i < inner; i++) anvil_call(s, A, B, C);
        double t1 = anvil_now();
        for (int i = 0; i < inner; i++) peer_call(s, A, B, C);
        double t2 = anvil_now();
        ta[r] = flop / (t1 - t0) * 1e-9;
        tb[r] = flop / (t2 - t1) * 1e-9;
    }
    if (s->serial) {
        openblas_set_num_threads(threads);
        omp_set_num_threads(threads);
    }
    s->anvil = median(ta, reps);
    s->peer = median(tb, reps);
    free(ta);
    free(tb);
    free(A);
    free(B);
    free(C);
}

static int add(Shape *v, int n, const char *name, bool ta, bool tb, int M, int N, int K, float beta,
               bool serial) {
    Shape *s = &v[n];
    memset(s, 0, sizeof(*s));
    snprintf(s->name, sizeof(s->name), "%s", name);
    s->ta = ta;
    s->tb = tb;
    s->M = M;
    s->N = N;
    s->K = K;
    s->beta = beta;
    s->serial = serial;
    return n + 1;
}

/* "model name (family F model M), N cpus, L2 ..." from /proc/cpuinfo. */
static void cpu_model(char *out, size_t cap) {
    char name[128] = "unknown CPU", family[16] = "?", model[16] = "?", cache[32] = "?";
    int cpus = 0;
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (f) {
        char line[4096];
        while (fgets(line, sizeof(line), f)) {
            char *colon = strchr(line, ':');
            if (!colon) continue;
            char *val = colon + 1;
            while (*val == ' ') val++;
            val[strcspn(val, "\n")] = 0;
            if (strncmp(line, "processor", 9) == 0) cpus++;
            if (cpus != 1) continue;
            if (strncmp(line, "model name", 10) == 0) snprintf(name, sizeof(name), "%s", val);
            else if (strncmp(line, "cpu family", 10) == 0) snprintf(family, sizeof(family), "%s", val);
            else if (strncmp(line, "model\t", 6) == 0) snprintf(model, sizeof(model), "%s", val);
            else if (strncmp(line, "cache size", 10) == 0) snprintf(cache, sizeof(cache), "%s", val);
        }
        fclose(f);
    }
    snprintf(out, cap, "%s (family %s model %s, L2 %s per core), %d logical CPUs", name, family, model, cache,
             cpus);
}

/* The 1-minute load average: the machine is shared, so it qualifies the numbers. */
static double load_average(void) {
    double l = -1.0;
    FILE *f = fopen("/proc/loadavg", "r");
    if (f) {
        if (fscanf(f, "%lf", &l) != 1) l = -1.0;
        fclose(f);
    }
    return l;
}

static void print_row(FILE *f, const Shape *s) {
    char shape[64];
    snprintf(shape, sizeof(shape), "%c%c %dx%dx%d%s", s->ta ? 'T' : 'N', s->tb ? 'T' : 'N', s->M, s->N, s->K,
             s->beta != 0.0f ? " +=" : "");
    fprintf(f, "| %-26s | %-24s | %8.1f | %5.0f%% | %8.1f | %5.2f |\n", s->name, shape, s->anvil,
            100.0 * s->anvil / (s->serial ? peak_one : peak_all), s->peer, s->anvil / s->peer);
}

/* Replaces the section of path that starts with the line `heading` (up to
 * the next "## " heading) with section, or appends it. */
static int write_section(const char *path, const char *heading, const char *section) {
    char *old = NULL;
    size_t len = 0;
    FILE *f = fopen(path, "r");
    if (f) {
        fseek(f, 0, SEEK_END);
        len = (size_t)ftell(f);
        fseek(f, 0, SEEK_SET);
        old = calloc(len + 1, 1);
        if (!old || fread(old, 1, len, f) != len) {
            fclose(f);
            free(old);
            return -1;
        }
        fclose(f);
    }
    f = fopen(path, "w");
    if (!f) {
        free(old);
        return -1;
    }
    const char *start = NULL;
    if (old) {
        char needle[128];
        snprintf(needle, sizeof needle, "\n%s\n", heading);
        if (strncmp(old, needle + 1, strlen(needle + 1)) == 0) start = old;
        else {
            const char *p = strstr(old, needle);
            if (p) start = p + 1;
        }
    }
    if (!old) fputs("# anvil benchmark results\n\n", f);
    if (start) {
        const char *end = strstr(start + 1, "\n## ");
        fwrite(old, 1, (size_t)(start - old), f);
        fputs(section, f);
        if (end) fputs(end, f);
    } else {
        if (old) {
            fputs(old, f);
            if (len && old[len - 1] != '\n') fputc('\n', f);
            fputc('\n', f);
        }
        fputs(section, f);
    }
    free(old);
    return fclose(f);
}

int main(int argc, char **argv) {
    int reps = 5;
    bool quick = false;
    const char *results = NULL;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--reps") == 0 && i + 1 < argc) reps = atoi(argv[++i]);
        else if (strcmp(argv[i], "--quick") == 0) quick = true;
        else if (strcmp(argv[i], "--bf16") == 0) bf16 = true;
        else if (strcmp(argv[i], "--results") == 0 && i + 1 < argc) results = argv[++i];
        else {
            fprintf(stderr, "usage: bench_gemm [--reps N] [--quick] [--bf16] [--results FILE]\n");
            return 2;
        }
    }
    if (reps < 1) reps = 1;
    if (anvil_isa_check() || (bf16 && anvil_isa_check_bf16())) {
        fprintf(stderr, "bench_gemm: %s\n", anvil_errmsg());
        return 1;
    }
    const anvil_isa isa = anvil_isa_active();
    peak_all = anvil_isa_peak_gflops(isa, ANVIL_BF16_NONE, 1.0);
    int threads = omp_get_max_threads();
    omp_set_num_threads(1);
    peak_one = anvil_isa_peak_gflops(isa, ANVIL_BF16_NONE, 1.0);
    omp_set_num_threads(threads);

    Shape v[48];
    int n = 0;
    static const int bts[] = {1024, 8192, 256};
    for (int b = 0; b < (quick ? 1 : 3); b++) {
        int BT = bts[b];
        char nm[64];
#define ADD(label, ta, tb, M, N, K, beta)                                                                    \
    do {                                                                                                     \
        snprintf(nm, sizeof(nm), "BT=%d %s", BT, label);                                                     \
        n = add(v, n, nm, ta, tb, M, N, K, beta, false);                                                     \
    } while (0)
        ADD("fwd qkv", false, true, BT, 2304, 768, 0.0f);
        ADD("fwd attn proj", false, true, BT, 768, 768, 0.0f);
        ADD("fwd fc", false, true, BT, 3072, 768, 0.0f);
        ADD("fwd fc proj", false, true, BT, 768, 3072, 0.0f);
        ADD("dX qkv", false, false, BT, 768, 2304, 0.0f);
        ADD("dX fc proj", false, false, BT, 768, 3072, 0.0f);
        ADD("dX fc", false, false, BT, 3072, 768, 0.0f);
        ADD("dW qkv", true, false, 2304, 768, BT, 1.0f);
        ADD("dW attn proj", true, false, 768, 768, BT, 1.0f);
        ADD("dW fc", true, false, 3072, 768, BT, 1.0f);
        ADD("dW fc proj", true, false, 768, 3072, BT, 1.0f);
#undef ADD
    }
    n = add(v, n, "lm head fwd chunk", false, true, 512, 50304, 768, 0.0f, false);
    n = add(v, n, "lm head dX chunk", false, false, 512, 768, 50304, 0.0f, false);
    n = add(v, n, "lm head dW chunk", true, false, 50304, 768, 512, 1.0f, false);
    n = add(v, n, "peak square", false, false, 4096, 4096, 4096, 0.0f, false);
    n = add(v, n, "attn scores (1 thread)", false, true, 64, 256, 64, 0.0f, true);
    n = add(v, n, "attn values (1 thread)", false, false, 64, 64, 256, 0.0f, true);
    n = add(v, n, "attn dV-like (1 thread)", true, false, 64, 64, 64, 0.0f, true);

    char cpu[256];
    cpu_model(cpu, sizeof(cpu));
    const char *core = getenv("OPENBLAS_CORETYPE");
    char peer[256], what[64];
    if (bf16) snprintf(peer, sizeof peer, "anvil_sgemm (fp32, %s kernel)", anvil_sgemm_impl());
    else snprintf(peer, sizeof peer, "%s (OPENBLAS_CORETYPE=%s)", openblas_get_config(), core ? core : "unset");
    if (bf16) snprintf(what, sizeof what, "anvil_sgemm_bf16 (%s kernel)", anvil_isa_bf16_name(anvil_isa_bf16()));
    else snprintf(what, sizeof what, "anvil_sgemm (%s kernel)", anvil_sgemm_impl());
    printf("%s vs %s on %s, %d OpenMP threads, median of %d; fp32 FMA peak %.1f GFLOP/s (%.1f on one thread)\n",
           what, peer, cpu, threads, reps, peak_all, peak_one);
    const char *head = bf16 ? "| product                    | op M x N x K             |     bf16 | of peak |     fp32 | ratio |\n"
                              "|----------------------------|--------------------------|---------:|--------:|---------:|------:|\n"
                            : "| product                    | op M x N x K             |    anvil | of peak | openblas | ratio |\n"
                              "|----------------------------|--------------------------|---------:|--------:|---------:|------:|\n";
    const double load_before = load_average();
    fputs(head, stdout);
    for (int i = 0; i < n; i++) {
        measure(&v[i], reps);
        print_row(stdout, &v[i]);
        fflush(stdout);
    }

    if (results) {
        char *sec = NULL;
        size_t sec_len = 0;
        FILE *m = open_memstream(&sec, &sec_len);
        if (!m) return 1;
        char heading[64], command[64];
        snprintf(heading, sizeof heading, "## GEMM: %s",
                 bf16 ? anvil_isa_bf16_name(anvil_isa_bf16()) : anvil_isa_name(isa));
        if (bf16) snprintf(command, sizeof command, "ANVIL_BF16=%s bench_gemm --bf16",
                           anvil_isa_bf16() == ANVIL_BF16_AMX ? "amx" : "avx512");
        else snprintf(command, sizeof command, "ANVIL_ISA=%s bench_gemm", anvil_isa_name(isa));
        fprintf(m,
                "%s\n\n"
                "`%s` (bench/bench_gemm.c): GFLOP/s of %s vs %s, same process, interleaved, "
                "median of %d, and as a share of this path's fp32 FMA peak measured in the same run (%.1f GFLOP/s "
                "on %d threads, %.1f on one). %s, load average %.1f before and %.1f after (shared machine). "
                "\"+=\" is beta = 1 (gradient accumulation); the 1-thread lines are one thread against one "
                "thread.\n\n%s",
                heading, command, what, peer, reps, peak_all, threads, peak_one, cpu, load_before, load_average(),
                head);
        for (int i = 0; i < n; i++) print_row(m, &v[i]);
        fclose(m);
        int rc = write_section(results, heading, sec);
        free(sec);
        if (rc != 0) {
            fprintf(stderr, "bench_gemm: cannot write %s\n", results);
            return 1;
        }
    }
    return 0;
}
