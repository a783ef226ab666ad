/* Text generation: temperature, top-k and top-p (nucleus) sampling over
 * the model's next-token distribution, with the model's key/value cache so
 * each new token costs O(T), not O(T^2). */
#ifndef ANVIL_SAMPLE_SAMPLER_H
#define ANVIL_SAMPLE_SAMPLER_H

#include <stdint.h>

#include "core/rng.h"
#include "model/model.h"

typedef struct {
    float temperature; /* 0 means greedy (argmax) */
    int top_k;         /* 0 means no limit */
    float top_p;       /* 1 means no limit */
    int stop_token;    /* generation stops after emitting it; -1 for none */
} anvil_sample_opts;

/* Picks a token from logits[vocab] (modified in place). Deterministic for a given rng state. */
int32_t anvil_sample_pick(float *logits, int vocab, const anvil_sample_opts *o, anvil_rng *rng);

/* Feeds the prompt, then generates up to max_new tokens, calling emit for each new token. When the
 * context (block_size) fills up, it slides: the newest half is kept and re-fed to the cache.
 * Returns the number generated, or -1 after anvil_fail. */
int anvil_generate(anvil_model *m, const int32_t *prompt, int nprompt, int max_new, const anvil_sample_opts *o,
                   anvil_rng *rng, void (*emit)(void *ctx, int32_t token), void *ctx);

#endif
