/* Llama's incremental decoding: one token at a time against a cache of every
 * layer's keys and values, n_kv_head heads wide (grouped-query attention
 * keeps n_head / n_kv_head times less than multi-head would), on a whole
 * model's weights. A single row needs no packing: q, k and v (and gate and
 * up) are products of their own, written side by side. */
#include <stdlib.h>

#include "core/error.h"
#include "model/llama/llama.h"

struct anvil_model_cache {
    const anvil_model_family *family; /* first, as model.c frees caches through it */
    const anvil_kernels *k;
    float *kc, *vc; /* [L, block_size, NKV*hs] */
    float *rope;    /* [block_size, hs] */
    float *x, *ln, *rstd, *qkv, *att, *gu, *sw;
    int32_t *tok;
};

void llama_cache_free(anvil_model_cache *c) {
    if (!c) return;
    void *owned[] = {c->kc, c->vc, c->rope, c->x, c->ln, c->rstd, c->qkv, c->att, c->gu, c->sw, c->tok};
    for (size_t i = 0; i < sizeof owned / sizeof owned[0]; i++) c->k->free(owned[i]);
    free(c);
}

anvil_model_cache *llama_cache_new(const anvil_model *m) {
    const anvil_kernels *k = m->k;
    const anvil_model_config *cfg = &m->cfg;
    size_t L = (size_t)cfg->n_layer, C = (size_t)cfg->n_embd, T = (size_t)cfg->block_size, hs = (size_t)llama_hs(cfg);
    size_t KV = (size_t)cfg->n_kv_head * hs, H = (size_t)cfg->ffn_hidden, f = sizeof(float);
    anvil_model_cache *c = calloc(1, sizeof *c);
    if (!c) {
        anvil_fail("model: out of memory for the decoding cache");
        return NULL;
    }
    c->family = &anvil_llama_family;
    c->k = k;
    c->kc = k->alloc(L * T * KV * f);
    c->vc = k->alloc(L * T * KV * f);
    c->rope = k->alloc(T * hs * f);
    c->x = k->alloc(C * f);
    c->ln = k->alloc(C * f);
    c->rstd = k->alloc(f);
    c->qkv = k->alloc((C + 2 * KV) * f);
    c->att = k->alloc(C * f);
    c->gu = k->alloc(2 * H * f);
    c->sw = k->alloc(H * f);
    c->tok = k->alloc(sizeof(int32_t));
    if (!c->kc || !c->vc || !c->rope || !c->x || !c->ln || !c->rstd || !c->qkv || !c->att || !c->gu || !c->sw ||
        !c->tok) {
        llama_cache_free(c);
        anvil_fail("model: cannot allocate the decoding cache (%d layers of %d positions)", cfg->n_layer,
                   cfg->block_size);
        return NULL;
    }
    if (llama_rope_upload(k, cfg, c->rope, cfg->block_size)) {
        llama_cache_free(c);
        return NULL;
    }
    return c;
}

/* Layer l's slice of a stacked parameter tensor. */
static const float *LP(const anvil_model *m, int i, int l) {
    size_t per = (m->offsets[i + 1] - m->offsets[i]) / (size_t)m->cfg.n_layer;
    return anvil_model_param(m, i, m->params) + (size_t)l * per;
}

/* One layer on the row c->x at position pos, its key and value cached. */
static int layer(const anvil_model *m, anvil_model_cache *c, int l, int pos) {
    const anvil_kernels *k = m->k;
    const anvil_model_config *cfg = &m->cfg;
    int C = cfg->n_embd, NH = cfg->n_head, NKV = cfg->n_kv_head, hs = llama_hs(cfg), H = cfg->ffn_hidden;
    int KV = NKV * hs;
    size_t at = (size_t)l * cfg->block_size * KV;
    k->rmsnorm_forward(c->ln, c->rstd, c->x, LP(m, LLAMA_ATTN_NORM, l), 1, C, cfg->norm_eps);
    k->matmul_forward(c->qkv, c->ln, LP(m, LLAMA_WQ, l), NULL, 1, C, C, 0);
    k->matmul_forward(c->qkv + C, c->ln, LP(m, LLAMA_WK, l), NULL, 1, C, KV, 0);
    k->matmul_forward(c->qkv + C + KV, c->ln, LP(m, LLAMA_WV, l), NULL, 1, C, KV, 0);
    k->rope_forward(c->qkv, c->rope, 1, 1, pos, NH, NKV, hs);
    k->copy(c->kc + at + (size_t)pos * KV, c->qkv + C, (size_t)KV);
    k->copy(c->vc + at + (size_t)pos * KV, c->qkv + C + KV, (size_t)KV);
    if (k->attention_decode(c->att, c->qkv, c->kc + at, c->vc + at, pos + 1, NH, NKV, hs)) return -1;
    k->matmul_forward(c->x, c->att, LP(m, LLAMA_WO, l), NULL, 1, C, C, 1);
    k->rmsnorm_forward(c->ln, c->rstd, c->x, LP(m, LLAMA_MLP_NORM, l), 1, C, cfg->norm_eps);
    k->matmul_forward(c->gu, c->ln, LP(m, LLAMA_WGATE, l), NULL, 1, C, H, 0);
    k->matmul_forward(c->gu + H, c->ln, LP(m, LLAMA_WUP, l), NULL, 1, C, H, 0);
    k->swiglu_forward(c->sw, c->gu, c->gu + H, 1, H, 2 * H);
    k->matmul_forward(c->x, c->sw, LP(m, LLAMA_WDOWN, l), NULL, 1, H, C, 1);
    return 0;
}

int llama_decode(anvil_model *m, anvil_model_cache *c, int32_t token, int pos, float *logits) {
    const anvil_kernels *k = m->k;
    const anvil_model_config *cfg = &m->cfg;
    if (pos < 0 || pos >= cfg->block_size)
        return anvil_fail("model: decode position %d is outside the context (%d)", pos, cfg->block_size);
    if (token < 0 || token >= cfg->vocab_size)
        return anvil_fail("model: token %d is outside the vocabulary (%d)", token, cfg->vocab_size);
    k->upload(c->tok, &token, sizeof token);
    k->encoder_forward(c->x, c->tok, anvil_model_param(m, LLAMA_EMBED, m->params), NULL, 1, 1, cfg->n_embd);
    for (int l = 0; l < cfg->n_layer; l++)
        if (layer(m, c, l, pos)) return -1;
    k->rmsnorm_forward(c->ln, c->rstd, c->x, anvil_model_param(m, LLAMA_NORM, m->params), 1, cfg->n_embd,
                       cfg->norm_eps);
    k->logits(logits, c->ln, anvil_model_param(m, llama_head(cfg), m->params), 1, cfg->n_embd, cfg->padded_vocab);
    return 0;
}
