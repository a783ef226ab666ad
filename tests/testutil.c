#include "testutil.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "kernels/isa.h"

int t_failures = 0;
static int t_skips = 0;

void t_fail(const char *file, int line, const char *fmt, ...) {
    va_list ap;
    fprintf(stderr, "%s:%d: ", file, line);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    t_failures++;
}

int t_close(const char *what, const float *got, const float *want, size_t n, float rtol, float atol) {
    size_t worst = 0, bad = 0;
    double worst_excess = -1.0;
    for (size_t i = 0; i < n; i++) {
        double diff = fabs((double)got[i] - (double)want[i]);
        double lim = atol + rtol * fabs((double)want[i]);
        if (!(diff <= lim)) {
            bad++;
            double excess = isnan(diff) ? INFINITY : diff - lim;
            if (excess > worst_excess) {
                worst_excess = excess;
                worst = i;
            }
        }
    }
    if (bad) {
        fprintf(stderr, "%s: %zu of %zu elements out of tolerance (rtol %g, atol %g); worst [%zu] got %.9g want %.9g\n",
                what, bad, n, rtol, atol, worst, got[worst], want[worst]);
        t_failures++;
        return 0;
    }
    return 1;
}

void t_missing(const char *test, const char *fmt, ...) {
    const char *allow = getenv("ANVIL_TEST_ALLOW_SKIP");
    int skip = allow && !strcmp(allow, "1");
    FILE *out = skip ? stdout : stderr;
    va_list ap;
    fprintf(out, "%s: %s: ", test, skip ? "SKIP" : "FAIL");
    va_start(ap, fmt);
    vfprintf(out, fmt, ap);
    va_end(ap);
    fputs(skip ? "\n" : " (ANVIL_TEST_ALLOW_SKIP=1 skips it)\n", out);
    if (skip) t_skips++;
    else t_failures++;
}

int t_done(const char *name) {
    if (t_failures) fprintf(stderr, "%s: %d check(s) failed\n", name, t_failures);
    else if (t_skips) printf("%s: %d part(s) skipped, the rest passed\n", name, t_skips);
    else printf("%s: all checks passed\n", name);
    return t_failures ? 1 : t_skips ? 77 : 0;
}

const char *t_path(const char *test) {
    if (anvil_isa_check()) {
        printf("%s: SKIP: %s\n", test, anvil_errmsg());
        exit(77);
    }
    const char *name = anvil_isa_name(anvil_isa_active());
    printf("%s: kernel path %s\n", test, name);
    return name;
}

int t_tensor(const anvil_model_config *cfg, const char *name) {
    int i = anvil_model_tensor_index(cfg, name);
    if (i < 0) t_fail(__FILE__, __LINE__, "the model has no tensor '%s'", name);
    return i < 0 ? 0 : i;
}

int t_adamw_whole(anvil_adamw *o, const anvil_kernels *k, const anvil_adamw_config *ac, const size_t *offsets,
                  const anvil_model_config *cfg) {
    int decays[ANVIL_MODEL_MAX_TENSORS];
    anvil_model_decays(cfg, decays);
    return anvil_adamw_init_whole(o, k, ac, offsets, anvil_model_ntensors(cfg), decays);
}

anvil_model_config t_gpt2(int n_layer, int n_head, int n_embd, int block_size, int vocab_size) {
    anvil_model_config c = {.family = anvil_model_family_named("gpt2"), .n_layer = n_layer, .n_head = n_head,
                            .n_embd = n_embd, .block_size = block_size, .vocab_size = vocab_size};
    return c;
}

anvil_model_config t_llama(int n_layer, int n_head, int n_kv_head, int n_embd, int ffn_hidden, int block_size,
                           int vocab_size, int tied) {
    anvil_model_config c = {.family = anvil_model_family_named("llama"), .n_layer = n_layer, .n_head = n_head,
                            .n_kv_head = n_kv_head, .n_embd = n_embd, .ffn_hidden = ffn_hidden,
                            .block_size = block_size, .vocab_size = vocab_size, .tied = tied, .norm_eps = 1e-5f,
                            .rope_theta = 10000.0f};
    return c;
}
