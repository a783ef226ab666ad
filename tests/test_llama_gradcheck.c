/* Finite-difference check of every parameter tensor's gradient of tiny Llama
 * models, independent of any reference implementation: grouped-query
 * attention (4 heads, 2 key/value heads) with untied embeddings and llama3
 * RoPE scaling, and multi-query (1 key/value head) tied, each L=2, C=16,
 * hidden 24, T=6, V=13, B=2. Weights are drawn with std 0.3 (the norms' around
 * 1) so every path carries signal, and RoPE's frequencies are high enough
 * (theta 100, original context 4) that its rotation matters within six
 * positions. For 6 entries of each tensor: a central difference with h = 1e-2
 * on the fp32 loss against the analytic gradient, |fd - g| <= 1e-3 *
 * max(|fd|, |g|) + 5e-5, test_gradcheck.c's bound (the fp32 loss carries ~1e-7
 * relative noise, which h turns into ~1e-5 absolute; the O(h^2) truncation
 * error is of the same order). Measured (2026-12-04, avx2 and generic):
 * |fd - g| <= 7.4e-5, and at most 1.1e-5 beyond 1e-3 relative. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "core/rng.h"
#include "model/model.h"
#include "testutil.h"

static int is_norm(const anvil_model *m, int i) {
    anvil_tensor_info t;
    anvil_model_tensor(&m->cfg, i, &t);
    return t.init_value == 1.0f;
}

/* The real elements of tensor i: a vocabulary table's padding rows left out. */
static size_t real_numel(const anvil_model *m, int i) {
    anvil_tensor_info t;
    anvil_model_tensor(&m->cfg, i, &t);
    size_t n = m->offsets[i + 1] - m->offsets[i];
    return t.vocab_rows ? (size_t)m->cfg.vocab_size * (size_t)m->cfg.n_embd : n;
}

static int check_model(anvil_model_config cfg, uint64_t seed) {
    const int B = 2, T = 6;
    anvil_model m;
    CHECK(anvil_model_init(&m, &cfg, anvil_kernels_cpu()) == 0);
    anvil_rng rng;
    anvil_rng_seed(&rng, seed);
    for (int i = 0; i < m.ntensors; i++) {
        float *p = anvil_model_param(&m, i, m.params);
        for (size_t j = 0; j < real_numel(&m, i); j++)
            p[j] = (is_norm(&m, i) ? 1.0f : 0.0f) + 0.3f * anvil_rng_normal(&rng);
    }
    int32_t x[12], y[12];
    for (int i = 0; i < B * T; i++) {
        x[i] = (int32_t)(anvil_rng_u64(&rng) % (uint64_t)cfg.vocab_size);
        y[i] = (int32_t)(anvil_rng_u64(&rng) % (uint64_t)cfg.vocab_size);
    }
    y[3] = -1; /* an ignored position must contribute nothing */
    float loss;
    anvil_model_zero_grad(&m);
    CHECK(anvil_model_forward_backward(&m, x, y, B, T, 1.0f, &loss) == 0);
    int checked = 0;
    float worst = 0.0f, beyond = 0.0f;
    for (int i = 0; i < m.ntensors; i++) {
        size_t n = real_numel(&m, i);
        for (int s = 0; s < 6; s++) {
            size_t j = m.offsets[i] + (size_t)(anvil_rng_u64(&rng) % n);
            const float h = 1e-2f;
            float orig = m.params[j], lp, lm;
            m.params[j] = orig + h;
            CHECK(anvil_model_forward(&m, x, y, B, T, &lp) == 0);
            m.params[j] = orig - h;
            CHECK(anvil_model_forward(&m, x, y, B, T, &lm) == 0);
            m.params[j] = orig;
            float fd = (lp - lm) / (2 * h), g = m.grads[j];
            float tol = 1e-3f * fmaxf(fabsf(fd), fabsf(g)) + 5e-5f;
            worst = fmaxf(worst, fabsf(fd - g));
            beyond = fmaxf(beyond, fabsf(fd - g) - 1e-3f * fmaxf(fabsf(fd), fabsf(g)));
            if (!(fabsf(fd - g) <= tol)) {
                anvil_tensor_info info;
                anvil_model_tensor(&m.cfg, i, &info);
                t_fail(__FILE__, __LINE__, "%s[%zu]: analytic %.6g, finite difference %.6g", info.name,
                       j - m.offsets[i], g, fd);
            }
            checked++;
        }
        /* A vocabulary table's padding rows never receive gradient. */
        for (size_t j = m.offsets[i] + n; j < m.offsets[i + 1]; j++) CHECK(m.grads[j] == 0.0f);
    }
    printf("%s, %d kv heads: checked %d gradient entries of %d tensors, worst |fd - g| %.3g, %.3g beyond 1e-3 "
           "relative; loss %.6f\n",
           cfg.tied ? "tied" : "untied", cfg.n_kv_head, checked, m.ntensors, worst, beyond, loss);
    anvil_model_free(&m);
    return checked;
}

int main(void) {
    t_path("test_llama_gradcheck");
    anvil_model_config gqa = t_llama(2, 4, 2, 16, 24, 8, 13, 0);
    gqa.rope_theta = 100.0f;
    gqa.rope_scaling = (anvil_rope_scaling){1, 4.0f, 1.0f, 4.0f, 4};
    anvil_model_config mqa = t_llama(2, 4, 1, 16, 24, 8, 13, 1);
    mqa.rope_theta = 100.0f;
    CHECK(check_model(gqa, 7) == 6 * 12);
    CHECK(check_model(mqa, 9) == 6 * 11);
    return t_done("test_llama_gradcheck");
}
