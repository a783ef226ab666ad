/* GPT-2's incremental decoding: one token at a time against a key/value
 * cache of every layer, on a whole model's weights. */
#include <stdlib.h>

#include "core/error.h"
#include "model/gpt2/gpt2.h"

struct anvil_model_cache {
    const anvil_model_family *family; /* first, as model.c frees caches through it */
    const anvil_kernels *k;
    float *kc, *vc; /* [L, block_size, C] */
    float *x, *ln, *qkv, *att, *fc, *gelu, *mean, *rstd;
    int32_t *tok;
};

void gpt2_cache_free(anvil_model_cache *c) {
    if (!c) return;
    void *owned[] = {c->kc, c->vc, c->x, c->ln, c->qkv, c->att, c->fc, c->gelu, c->mean, c->rstd, c->tok};
    for (size_t i = 0; i < sizeof owned / sizeof owned[0]; i++) c->k->free(owned[i]);
    free(c);
}

anvil_model_cache *gpt2_cache_new(const anvil_model *m) {
    const anvil_kernels *k = m->k;
    size_t L = (size_t)m->cfg.n_layer, C = (size_t)m->cfg.n_embd, T = (size_t)m->cfg.block_size;
    anvil_model_cache *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    c->family = &anvil_gpt2_family;
    c->k = k;
    c->kc = k->alloc(L * T * C * sizeof(float));
    c->vc = k->alloc(L * T * C * sizeof(float));
    c->x = k->alloc(C * sizeof(float));
    c->ln = k->alloc(C * sizeof(float));
    c->qkv = k->alloc(3 * C * sizeof(float));
    c->att = k->alloc(C * sizeof(float));
    c->fc = k->alloc(4 * C * sizeof(float));
    c->gelu = k->alloc(4 * C * sizeof(float));
    c->mean = k->alloc(sizeof(float));
    c->rstd = k->alloc(sizeof(float));
    c->tok = k->alloc(sizeof(int32_t));
    if (!c->kc || !c->vc || !c->x || !c->ln || !c->qkv || !c->att || !c->fc || !c->gelu || !c->mean || !c->rstd ||
        !c->tok) {
        gpt2_cache_free(c);
        anvil_fail("model: cannot allocate the decoding cache");
        return NULL;
    }
    return c;
}

/* Pointers to layer l's slice of a stacked parameter tensor. */
#define LP(base, i, l, per) (anvil_model_param(m, (i), (base)) + (size_t)(l) * (size_t)(per))

int gpt2_decode(anvil_model *m, anvil_model_cache *c, int32_t token, int pos, float *logits) {
    const anvil_kernels *k = m->k;
    int L = m->cfg.n_layer, C = m->cfg.n_embd, NH = m->cfg.n_head, T = m->cfg.block_size;
    if (pos < 0 || pos >= T) return anvil_fail("model: decode position %d is outside the context (%d)", pos, T);
    if (token < 0 || token >= m->cfg.vocab_size)
        return anvil_fail("model: token %d is outside the vocabulary (%d)", token, m->cfg.vocab_size);
    float *P = m->params;
    k->upload(c->tok, &token, sizeof token);
    k->encoder_forward(c->x, c->tok, anvil_model_param(m, ANVIL_GPT2_WTE, P),
                       anvil_model_param(m, ANVIL_GPT2_WPE, P) + (size_t)pos * C, 1, 1, C);
    for (int l = 0; l < L; l++) {
        float *kc = c->kc + (size_t)l * T * C, *vc = c->vc + (size_t)l * T * C;
        k->layernorm_forward(c->ln, c->mean, c->rstd, c->x, LP(P, ANVIL_GPT2_LN1W, l, C), LP(P, ANVIL_GPT2_LN1B, l, C),
                             1, C);
        k->matmul_forward(c->qkv, c->ln, LP(P, ANVIL_GPT2_QKVW, l, 3 * C * C), LP(P, ANVIL_GPT2_QKVB, l, 3 * C), 1, C,
                          3 * C, 0);
        k->copy(kc + (size_t)pos * C, c->qkv + C, C);
        k->copy(vc + (size_t)pos * C, c->qkv + 2 * C, C);
        if (k->attention_decode(c->att, c->qkv, kc, vc, pos + 1, NH, NH, C / NH)) return -1;
        k->matmul_forward(c->x, c->att, LP(P, ANVIL_GPT2_ATTPROJW, l, C * C), LP(P, ANVIL_GPT2_ATTPROJB, l, C), 1, C, C,
                          1);
        k->layernorm_forward(c->ln, c->mean, c->rstd, c->x, LP(P, ANVIL_GPT2_LN2W, l, C), LP(P, ANVIL_GPT2_LN2B, l, C),
                             1, C);
        k->matmul_forward(c->fc, c->ln, LP(P, ANVIL_GPT2_FCW, l, 4 * C * C), LP(P, ANVIL_GPT2_FCB, l, 4 * C), 1, C,
                          4 * C, 0);
        k->gelu_forward(c->gelu, c->fc, 4 * (size_t)C);
        k->matmul_forward(c->x, c->gelu, LP(P, ANVIL_GPT2_FCPROJW, l, 4 * C * C), LP(P, ANVIL_GPT2_FCPROJB, l, C), 1,
                          4 * C, C, 1);
    }
    k->layernorm_forward(c->ln, c->mean, c->rstd, c->x, anvil_model_param(m, ANVIL_GPT2_LNFW, P),
                         anvil_model_param(m, ANVIL_GPT2_LNFB, P), 1, C);
    k->logits(logits, c->ln, anvil_model_param(m, ANVIL_GPT2_WTE, P), 1, C, m->cfg.padded_vocab);
    return 0;
}
