/* src/kernels/peak.c: MFU's peak, cached per machine, keeps the best of the probes. A re-probe
 * (anvil info --gemm-rate's call) under a cached figure far above what this machine can do keeps
 * that figure, and under one far below it takes the probe's; either way the probe count grows,
 * the file holds the result, and a plain read then finds it without probing. The cache lives in
 * a folder of the test's own, never the suite's (a seeded figure there would skew other tests'
 * MFU). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/json.h"
#include "kernels/isa.h"
#include "testutil.h"

/* Writes the cache with one entry of p's key: gflops from probes probes, measured at probed_at. */
static void seed(const anvil_peak *p, double gflops, int probes, double probed_at) {
    cJSON *e = cJSON_CreateObject();
    cJSON_AddStringToObject(e, "cpu", p->cpu);
    cJSON_AddStringToObject(e, "path", p->path);
    cJSON_AddStringToObject(e, "dtype", p->dtype);
    cJSON_AddNumberToObject(e, "threads", p->threads);
    cJSON_AddNumberToObject(e, "gflops", gflops);
    cJSON_AddNumberToObject(e, "probes", probes);
    cJSON_AddNumberToObject(e, "probed_at", probed_at);
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "format", "anvil-peak-cache");
    cJSON_AddNumberToObject(root, "version", 1);
    cJSON_AddItemToArray(cJSON_AddArrayToObject(root, "peaks"), e);
    char *text = cJSON_PrintUnformatted(root);
    FILE *f = fopen(p->file, "w");
    CHECK(text && f && fputs(text, f) >= 0);
    if (f) fclose(f);
    free(text);
    cJSON_Delete(root);
}

/* The one entry's gflops and probes as the file holds them; -1 each when it does not. */
static void stored(const char *file, double *gflops, int *probes) {
    *gflops = -1;
    *probes = -1;
    char buf[4096];
    FILE *f = fopen(file, "r");
    size_t n = f ? fread(buf, 1, sizeof buf, f) : 0;
    if (f) fclose(f);
    cJSON *root = anvil_json_parse(buf, n, NULL);
    const cJSON *peaks = cJSON_GetObjectItemCaseSensitive(root, "peaks"), *e = cJSON_GetArrayItem(peaks, 0);
    const cJSON *g = cJSON_GetObjectItemCaseSensitive(e, "gflops"), *c = cJSON_GetObjectItemCaseSensitive(e, "probes");
    if (cJSON_GetArraySize(peaks) == 1 && cJSON_IsNumber(g) && cJSON_IsNumber(c)) {
        *gflops = g->valuedouble;
        *probes = (int)c->valuedouble;
    }
    cJSON_Delete(root);
}

int main(void) {
    char dir[] = "/tmp/anvil_test_peak_XXXXXX";
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    setenv("ANVIL_CACHE_DIR", dir, 1);
    anvil_isa isa = anvil_isa_active();

    /* The first call probes, to learn this machine's key and figure. */
    anvil_peak first;
    CHECK(anvil_isa_peak(isa, ANVIL_BF16_NONE, false, &first) == 0);
    CHECK(!first.cached && first.stored && first.probes == 1 && first.probed > 0 && first.gflops == first.probed);
    printf("probed %.1f GFLOP/s (%s, %s, %d threads) into %s\n", first.probed, first.cpu, first.path, first.threads,
           first.file);

    /* A cached figure no CPU reaches: the re-probe measures less, and the cache keeps its figure and its date. */
    const double high = 1e9, high_at = 1e9;
    seed(&first, high, 1, high_at);
    anvil_peak p;
    CHECK(anvil_isa_peak(isa, ANVIL_BF16_NONE, true, &p) == 0);
    CHECK(p.probed > 0 && p.probed < high);
    CHECK(p.gflops == high && p.probed_at == high_at && p.probes == 2 && p.stored && !p.note[0]);
    double g;
    int n;
    stored(first.file, &g, &n);
    CHECK(g == high && n == 2);
    printf("cached %.0f GFLOP/s, re-probed %.1f: the file holds %.0f, %d probes\n", high, p.probed, g, n);

    /* A cached figure far below: the re-probe's figure replaces it, dated now. */
    const double low = 1e-3;
    seed(&first, low, 3, 1e9);
    double before = (double)time(NULL);
    CHECK(anvil_isa_peak(isa, ANVIL_BF16_NONE, true, &p) == 0);
    CHECK(p.probed > low && p.gflops == p.probed && p.probed_at >= before && p.probes == 4 && p.stored);
    stored(first.file, &g, &n);
    CHECK(fabs(g - p.probed) <= 1e-9 * p.probed && n == 4);
    printf("cached %g GFLOP/s, re-probed %.1f: the file holds %.1f, %d probes\n", low, p.probed, g, n);

    /* Without a re-probe the figure is read, not measured. */
    anvil_peak r;
    CHECK(anvil_isa_peak(isa, ANVIL_BF16_NONE, false, &r) == 0);
    CHECK(r.cached && r.probed == 0 && fabs(r.gflops - g) <= 1e-9 * g && r.probes == 4);

    /* Each bf16 kernel's probe where the CPU has it: AMX's tiles (16 x 16 x 32 products a call)
     * outrun vdpbf16ps many times over, so a probe that did not keep its tiles busy shows. */
    double vdp = 0;
    static const anvil_bf16_kernel kinds[] = {ANVIL_BF16_AVX512, ANVIL_BF16_AMX};
    for (int i = 0; i < 2; i++) {
        const char *name = anvil_isa_bf16_name(kinds[i]);
        if (!anvil_isa_bf16_available(kinds[i])) {
            printf("skipped: the %s peak (this CPU lacks it)\n", name);
            continue;
        }
        double g = anvil_isa_peak_gflops(ANVIL_ISA_AVX512, kinds[i], 0.3);
        printf("%s peak: %.1f GFLOP/s\n", name, g);
        CHECK(g > 0);
        if (kinds[i] == ANVIL_BF16_AVX512) vdp = g;
        else CHECK(vdp > 0 && g > 4 * vdp);
    }

    char path[sizeof first.file + 8];
    unlink(first.file);
    snprintf(path, sizeof path, "%s.lock", first.file);
    unlink(path);
    rmdir(dir);
    return t_done("test_peak");
}
