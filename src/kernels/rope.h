/* The rotary position embedding's table, built once on the host by the
 * caller (which uploads it for the rope kernels, kernels.h): Llama's
 * rope_theta, optionally with Llama 3.1's frequency scaling, computed as
 * Hugging Face's LlamaRotaryEmbedding computes it in fp32, so a model
 * matches transformers' to rounding. */
#ifndef ANVIL_KERNELS_ROPE_H
#define ANVIL_KERNELS_ROPE_H

typedef enum { ANVIL_ROPE_DEFAULT, ANVIL_ROPE_LLAMA3 } anvil_rope_type;

typedef struct {
    double theta;         /* rope_theta: 10000 for Llama 2, 500000 for Llama 3 */
    anvil_rope_type type; /* rope_scaling.rope_type: none ("default") or "llama3" */
    /* rope_scaling of type llama3 (Llama 3.1 and 3.2: 8 or 32, 1, 4, 8192) */
    double factor, low_freq_factor, high_freq_factor;
    int original_max_position_embeddings;
} anvil_rope_config;

/* 0, or -1 after anvil_fail naming the field, for a head size that is not
 * even and positive, theta <= 0, or llama3 scaling with factor <= 0,
 * original_max_position_embeddings <= 0 or high_freq_factor <=
 * low_freq_factor (its smoothing divides by their difference). */
int anvil_rope_check(const anvil_rope_config *c, int hs);

/* inv_freq[hs/2]: theta^(-2i/hs), then the llama3 scaling: frequencies whose
 * wavelength 2*pi/f exceeds original/low_freq_factor are divided by factor,
 * those below original/high_freq_factor kept, and those between blended
 * linearly in original/wavelength. Every step is one fp32 operation in
 * Hugging Face's order (theta^x itself correctly rounded, where PyTorch's
 * may differ by one unit in the last place). */
int anvil_rope_inv_freq(float *inv_freq, const anvil_rope_config *c, int hs);

/* cs[P*hs]: for each position p < P, the cosines of the hs/2 angles
 * p * inv_freq[i] (each product rounded to fp32, as PyTorch's matmul of the
 * two does), then their sines, correctly rounded: the layout the rope
 * kernels read. */
int anvil_rope_table(float *cs, const anvil_rope_config *c, int hs, int P);

#endif
