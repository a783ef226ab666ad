/* The model against PyTorch: logits, loss, every parameter gradient, and
 * ten AdamW steps with clipping and weight decay, from the fixture that
 * tests/fixtures/gen_gpt2_fixture.py writes with torch (fp32).
 *
 * Tolerances (fp32 on both sides, different summation orders):
 *   loss:      1e-5 relative
 *   logits:    1e-4 relative + 1e-5 absolute
 *   gradients: 1e-4 relative + 1e-4 * max|gradient of that tensor| absolute
 *   AdamW:     losses and pre-clip norms 1e-4 relative over 10 steps; final
 *              weights 1e-4 relative + 1e-2 * lr absolute. Adam divides by
 *              sqrt(v), so an entry whose gradient is near zero still moves
 *              by up to lr per step, and rounding noise in that gradient
 *              decides the direction; 1% of one step bounds that effect.
 *              The key bias (columns C..2C of qkvb) is left out: softmax is
 *              invariant to it, its exact gradient is zero, and both sides
 *              move it by pure rounding noise. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/model_file.h"
#include "ckpt/safetensors.h"
#include "core/error.h"
#include "model/model.h"
#include "testutil.h"
#include "optim/optim.h"

#define FIXTURE "fixtures/gpt2_tiny.safetensors"

static int meta(const anvil_st_file *f, const char *k) { return atoi(anvil_st_meta(f, k)); }
static float metaf(const anvil_st_file *f, const char *k) { return strtof(anvil_st_meta(f, k), NULL); }

static const float *tensor(const anvil_st_file *f, const char *name, size_t n) {
    const anvil_st_tensor *t = anvil_st_find(f, name);
    if (!t || t->nbytes != n * 4) {
        t_fail(__FILE__, __LINE__, "fixture tensor %s missing or of the wrong size", name);
        exit(1);
    }
    return t->data;
}

static float max_abs(const float *x, size_t n) {
    float m = 0.0f;
    for (size_t i = 0; i < n; i++) m = fabsf(x[i]) > m ? fabsf(x[i]) : m;
    return m;
}

/* Compares one flat model buffer (params or grads) with the fixture's tensors named prefix+name;
 * wte's padding rows must be exactly zero. */
static void compare_params(const anvil_model *m, float *buf, const anvil_st_file *f, const char *prefix,
                           float rtol, float atol_frac, float atol_min, int skip_key_bias) {
    for (int i = 0; i < m->ntensors; i++) {
        char name[64];
        anvil_tensor_info info;
        anvil_model_tensor(&m->cfg, i, &info);
        snprintf(name, sizeof name, "%s%s", prefix, info.name);
        size_t n = m->offsets[i + 1] - m->offsets[i];
        float *got = buf + m->offsets[i];
        if (!strcmp(info.name, "wte")) {
            size_t real = (size_t)m->cfg.vocab_size * m->cfg.n_embd;
            for (size_t j = real; j < n; j++)
                if (got[j] != 0.0f) {
                    t_fail(__FILE__, __LINE__, "%s: padding row element %zu is %g, not 0", name, j, got[j]);
                    break;
                }
            n = real;
        }
        const float *want = tensor(f, name, n);
        if (!strcmp(info.name, "qkvb") && skip_key_bias) {
            int C = m->cfg.n_embd;
            for (int l = 0; l < m->cfg.n_layer; l++)
                for (int c = C; c < 2 * C; c++) got[(size_t)l * 3 * C + c] = want[(size_t)l * 3 * C + c];
        }
        float atol = atol_frac * max_abs(want, n);
        t_close(name, got, want, n, rtol, atol > atol_min ? atol : atol_min);
    }
}

int main(void) {
    t_path("test_gpt2_torch");
    anvil_st_file *f = anvil_st_open(FIXTURE);
    if (!f) {
        fprintf(stderr, "%s\n", anvil_errmsg());
        return 1;
    }
    anvil_model_config cfg = t_gpt2(meta(f, "n_layer"), meta(f, "n_head"), meta(f, "n_embd"), meta(f, "block_size"),
                                    meta(f, "vocab_size"));
    int B = meta(f, "batch"), T = meta(f, "seq"), V = cfg.vocab_size;
    anvil_model m;
    CHECK(anvil_model_init(&m, &cfg, anvil_kernels_cpu()) == 0);
    CHECK(m.cfg.padded_vocab == 320);
    CHECK(anvil_model_load_tensors(FIXTURE, "", &m) == 0);
    const int32_t *x = anvil_st_find(f, "inputs")->data, *y = anvil_st_find(f, "targets")->data;

    /* Forward: loss and logits (the padded columns are excluded). */
    float loss;
    CHECK(anvil_model_forward(&m, x, y, B, T, &loss) == 0);
    /* Measured on every path (2026-12-01): 8e-8 relative. */
    t_close("loss", &loss, tensor(f, "loss", 1), 1, 1e-5f, 0.0f);
    float *logits = malloc(sizeof(float) * B * T * m.cfg.padded_vocab);
    float *real = malloc(sizeof(float) * B * T * V);
    CHECK(anvil_model_logits(&m, logits) == 0);
    for (int r = 0; r < B * T; r++)
        memcpy(real + (size_t)r * V, logits + (size_t)r * m.cfg.padded_vocab, sizeof(float) * V);
    /* Measured on every path: |diff| <= 3e-7, 1% of the bound. */
    t_close("logits", real, tensor(f, "logits", (size_t)B * T * V), (size_t)B * T * V, 1e-4f, 1e-5f);

    /* Backward: every parameter gradient. */
    anvil_model_zero_grad(&m);
    float loss2;
    CHECK(anvil_model_forward_backward(&m, x, y, B, T, 1.0f, &loss2) == 0);
    t_close("training-forward loss", &loss2, &loss, 1, 0.0f, 0.0f); /* the same sums: bit-equal */
    /* Measured on every path: |diff| <= 3.7e-8 and 1.6e-5 relative where |gradient| > 1e-3, under 1% of the bound. */
    compare_params(&m, m.grads, f, "grad.", 1e-4f, 1e-4f, 0.0f, 0);

    /* Ten AdamW steps with clipping, constant lr, decay on matrices and embeddings only. */
    anvil_adamw_config ac = {metaf(f, "beta1"), metaf(f, "beta2"), metaf(f, "eps"), metaf(f, "weight_decay")};
    anvil_adamw opt;
    CHECK(t_adamw_whole(&opt, m.k, &ac, m.offsets, &m.cfg) == 0);
    CHECK(anvil_model_load_tensors(FIXTURE, "", &m) == 0);
    float losses[10], norms[10], lr = metaf(f, "lr"), clip = metaf(f, "grad_clip");
    for (int s = 0; s < 10; s++) {
        anvil_model_zero_grad(&m);
        CHECK(anvil_model_forward_backward(&m, x, y, B, T, 1.0f, &losses[s]) == 0);
        norms[s] = anvil_adamw_step(&opt, m.params, m.grads, anvil_adamw_grad_sumsq(&opt, m.grads), clip, lr);
    }
    /* Measured on every path: losses 2e-7 and norms 1.2e-5 relative; final weights |diff| <= 2.7e-5 (fcw, 83% of
     * its bound, the near-zero-gradient effect described at the top). */
    t_close("adamw losses", losses, tensor(f, "adamw_losses", 10), 10, 1e-4f, 0.0f);
    t_close("adamw grad norms", norms, tensor(f, "adamw_gradnorms", 10), 10, 1e-4f, 0.0f);
    compare_params(&m, m.params, f, "final.", 1e-4f, 0.0f, 1e-2f * lr, 1);
    printf("loss %.7f (torch %.7f); step-10 loss %.7f (torch %.7f)\n", loss, *tensor(f, "loss", 1), losses[9],
           tensor(f, "adamw_losses", 10)[9]);

    anvil_adamw_free(&opt);
    anvil_model_free(&m);
    anvil_st_close(f);
    free(logits);
    free(real);
    return t_done("test_gpt2_torch");
}
