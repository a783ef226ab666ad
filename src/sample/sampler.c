#include "sample/sampler.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"

typedef struct {
    float p;
    int32_t id;
} cand;

static int by_prob_desc(const void *a, const void *b) {
    const cand *x = a, *y = b;
    if (x->p != y->p) return x->p < y->p ? 1 : -1;
    return x->id < y->id ? -1 : (x->id > y->id); /* ties: lower id first, for determinism */
}

int32_t anvil_sample_pick(float *logits, int vocab, const anvil_sample_opts *o, anvil_rng *rng) {
    int32_t best = 0;
    for (int i = 1; i < vocab; i++)
        if (logits[i] > logits[best]) best = i;
    if (o->temperature <= 0.0f) return best;
    cand *c = malloc(sizeof(cand) * (size_t)vocab);
    if (!c) return best;
    double sum = 0.0;
    for (int i = 0; i < vocab; i++) {
        c[i].p = expf((logits[i] - logits[best]) / o->temperature);
        c[i].id = i;
        sum += c[i].p;
    }
    int n = vocab;
    if (o->top_k > 0 || o->top_p < 1.0f) {
        qsort(c, (size_t)vocab, sizeof(cand), by_prob_desc);
        if (o->top_k > 0 && o->top_k < n) n = o->top_k;
        if (o->top_p < 1.0f) {
            double kept = 0.0, total = 0.0;
            for (int i = 0; i < n; i++) total += c[i].p;
            for (int i = 0; i < n; i++) {
                kept += c[i].p;
                if (kept >= o->top_p * total) {
                    n = i + 1;
                    break;
                }
            }
        }
        sum = 0.0;
        for (int i = 0; i < n; i++) sum += c[i].p;
    }
    double r = (double)anvil_rng_uniform(rng) * sum, acc = 0.0;
    int32_t pick = c[n - 1].id;
    for (int i = 0; i < n; i++) {
        acc += c[i].p;
        if (r < acc) {
            pick = c[i].id;
            break;
        }
    }
    free(c);
    return pick;
}

int anvil_generate(anvil_model *m, const int32_t *prompt, int nprompt, int max_new, const anvil_sample_opts *o,
                   anvil_rng *rng, void (*emit)(void *ctx, int32_t token), void *ctx) {
    const int ctx_len = m->cfg.block_size;
    if (nprompt < 1) return anvil_fail("sample: the prompt must hold at least one token");
    if (nprompt > ctx_len)
        return anvil_fail("sample: the prompt (%d tokens) is longer than the context (%d)", nprompt, ctx_len);
    if (max_new <= 0) return 0;
    anvil_model_cache *cache = anvil_model_cache_new(m);
    float *dev_logits = m->k->alloc((size_t)m->cfg.padded_vocab * sizeof(float));
    float *logits = malloc((size_t)m->cfg.padded_vocab * sizeof(float));
    int32_t *window = malloc(sizeof(int32_t) * (size_t)ctx_len); /* the tokens now in the cache */
    int rc = -1, made = 0;
    if (!cache || !dev_logits || !logits || !window) {
        anvil_fail("sample: out of memory");
        goto out;
    }
    memcpy(window, prompt, sizeof(int32_t) * (size_t)nprompt);
    int n = nprompt, fed = 0; /* tokens in the window, and how many of them the cache holds */
    for (;;) {
        for (; fed < n; fed++)
            if (anvil_model_decode(m, cache, window[fed], fed, dev_logits)) goto out;
        m->k->download(logits, dev_logits, (size_t)m->cfg.vocab_size * sizeof(float));
        int32_t tok = anvil_sample_pick(logits, m->cfg.vocab_size, o, rng);
        made++;
        if (emit) emit(ctx, tok);
        if (made == max_new || tok == o->stop_token) break;
        /* A full context slides: keep its second half and rebuild the cache
         * from it, since cached keys carry their old positions. */
        if (n == ctx_len) {
            int keep = ctx_len / 2;
            memmove(window, window + n - keep, sizeof(int32_t) * (size_t)keep);
            n = keep;
            fed = 0;
        }
        window[n++] = tok;
    }
    rc = made;
out:
    anvil_model_cache_free(cache);
    if (dev_logits) m->k->free(dev_logits);
    free(logits);
    free(window);
    return rc;
}
