/* GPT-2: configuration, parameters, activations, and the forward and
 * backward passes, written against the kernel interface (kernels/kernels.h)
 * so the same code drives any backend.
 *
 * Parameters live in one contiguous buffer, tensor after tensor in the
 * order of anvil_gpt2_param_names; gradients and the optimizer moments
 * mirror it. That makes the optimizer, the gradient norm, gradient
 * averaging across ranks and checkpointing each a single flat loop or
 * write. Per-layer tensors are stacked along a leading n_layer dimension.
 * Linear weights are [out, in], as in PyTorch's nn.Linear. */
#ifndef ANVIL_MODEL_GPT2_H
#define ANVIL_MODEL_GPT2_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/kernels.h"

typedef struct {
    int n_layer;
    int n_head;
    int n_embd;
    int block_size;  /* maximum sequence length (rows of wpe) */
    int vocab_size;  /* real vocabulary */
    int padded_vocab; /* vocab_size rounded up to a multiple of 64; the extra rows stay zero */
} anvil_gpt2_config;

#define ANVIL_GPT2_NPARAM 16

enum {
    P_WTE, P_WPE, P_LN1W, P_LN1B, P_QKVW, P_QKVB, P_ATTPROJW, P_ATTPROJB,
    P_LN2W, P_LN2B, P_FCW, P_FCB, P_FCPROJW, P_FCPROJB, P_LNFW, P_LNFB
};

extern const char *const anvil_gpt2_param_names[ANVIL_GPT2_NPARAM];

/* Fills cfg from a preset name ("gpt2", "gpt2-medium", "gpt2-large", "gpt2-xl", "tiny", "mini",
 * "small"); vocab_size and block_size keep the preset's values until overridden. */
int anvil_gpt2_preset(const char *name, anvil_gpt2_config *cfg);
/* Checks the numbers and sets padded_vocab. One-line error naming the bad field. */
int anvil_gpt2_config_check(anvil_gpt2_config *cfg);
/* The shape of parameter tensor i: up to 3 dims. */
int anvil_gpt2_param_shape(const anvil_gpt2_config *cfg, int i, int64_t shape[3]);
/* Whether AdamW decays tensor i: matrices and embeddings yes, biases and LayerNorm no. */
int anvil_gpt2_param_decays(int i);
size_t anvil_gpt2_num_params(const anvil_gpt2_config *cfg); /* incl. padding rows of wte */
/* Parameters that count toward model FLOPs: excludes wpe (a lookup) and the padding rows;
 * wte counts once, as the LM head. */
size_t anvil_gpt2_flop_params(const anvil_gpt2_config *cfg);
/* Training FLOPs per token at sequence length T, as PaLM's appendix B: 6N + 12*L*C*T. */
double anvil_gpt2_flops_per_token(const anvil_gpt2_config *cfg, int T);

typedef struct {
    anvil_gpt2_config cfg;
    const anvil_kernels *k;
    size_t nparams;
    size_t offsets[ANVIL_GPT2_NPARAM + 1]; /* in floats, into params/grads */
    float *params;
    float *grads; /* allocated on the first training step */
    int B, T;     /* activation shape currently allocated (0 = none) */
    struct gpt2_acts *acts;
} anvil_gpt2;

int anvil_gpt2_init(anvil_gpt2 *m, const anvil_gpt2_config *cfg, const anvil_kernels *k);
void anvil_gpt2_free(anvil_gpt2 *m);
/* nanoGPT's initialization, from a seed: N(0, 0.02) for matrices and embeddings, residual projections
 * scaled by 1/sqrt(2*n_layer), zero biases, unit LayerNorm. Same seed, same weights. */
void anvil_gpt2_init_weights(anvil_gpt2 *m, uint64_t seed);
float *anvil_gpt2_param(const anvil_gpt2 *m, int i, float *base); /* tensor i within params/grads */

/* Evaluation forward over B sequences of T tokens (T <= block_size). With targets, *loss gets the
 * mean loss over positions whose target is >= 0 (targets and loss may be NULL). Keeps the final
 * hidden states for anvil_gpt2_logits. Returns 0, or -1 after anvil_fail (bad shape or token id,
 * allocation failure). */
int anvil_gpt2_forward(anvil_gpt2 *m, const int32_t *inputs, const int32_t *targets, int B, int T, float *loss);
/* One training micro-step: forward, the fused LM head + cross-entropy, and backward. Accumulates
 * (+=) into m->grads the gradient of mean_loss * grad_scale (grad_scale = 1/accumulation_steps),
 * and sets *loss to the mean loss. Returns 0 or -1 after anvil_fail. */
int anvil_gpt2_forward_backward(anvil_gpt2 *m, const int32_t *inputs, const int32_t *targets, int B, int T,
                                float grad_scale, float *loss);
void anvil_gpt2_zero_grad(anvil_gpt2 *m);
/* Full logits [B,T,padded_vocab] of the last forward, into backend memory: recomputes the LM head. */
int anvil_gpt2_logits(anvil_gpt2 *m, float *out);

/* Incremental decoding with a key/value cache: feeding the token at position pos (0-based,
 * consecutive from 0) costs O(pos) attention work, not O(pos^2). */
typedef struct anvil_gpt2_cache anvil_gpt2_cache;
anvil_gpt2_cache *anvil_gpt2_cache_new(const anvil_gpt2 *m);
void anvil_gpt2_cache_free(anvil_gpt2_cache *c);
/* Writes logits[padded_vocab] for the next token. */
int anvil_gpt2_decode(anvil_gpt2 *m, anvil_gpt2_cache *c, int32_t token, int pos, float *logits);

#endif
