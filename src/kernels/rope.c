#include "kernels/rope.h"

#include <math.h>
#include <stdlib.h>

#include "core/error.h"

int anvil_rope_check(const anvil_rope_config *c, int hs) {
    if (hs <= 0 || hs % 2)
        return anvil_fail("rope: the head size %d is not even (RoPE rotates pairs of channels)", hs);
    if (!(c->theta > 0.0) || !isfinite(c->theta)) return anvil_fail("rope: rope_theta %g is not positive", c->theta);
    if (c->type == ANVIL_ROPE_DEFAULT) return 0;
    if (c->type != ANVIL_ROPE_LLAMA3) return anvil_fail("rope: unknown rope_scaling type %d", (int)c->type);
    if (!(c->factor > 0.0) || !isfinite(c->factor))
        return anvil_fail("rope: rope_scaling.factor %g is not positive", c->factor);
    if (c->original_max_position_embeddings <= 0)
        return anvil_fail("rope: rope_scaling.original_max_position_embeddings %d is not positive",
                          c->original_max_position_embeddings);
    if (!(c->high_freq_factor > c->low_freq_factor) || !(c->low_freq_factor > 0.0) || !isfinite(c->high_freq_factor))
        return anvil_fail("rope: rope_scaling needs 0 < low_freq_factor < high_freq_factor (got %g and %g)",
                          c->low_freq_factor, c->high_freq_factor);
    return 0;
}

/* HF's _compute_llama3_parameters, one fp32 operation at a time: its Python
 * scalars meet fp32 tensors, so each is rounded to fp32 first (2*pi, the
 * factors), and the two wavelength bounds are exact. */
static float llama3_scale(float f, const anvil_rope_config *c) {
    float factor = (float)c->factor, lo = (float)c->low_freq_factor;
    float old = (float)c->original_max_position_embeddings;
    float low_wl = (float)(c->original_max_position_embeddings / c->low_freq_factor);
    float high_wl = (float)(c->original_max_position_embeddings / c->high_freq_factor);
    float wavelen = (float)(2.0 * M_PI) / f;
    float scaled = wavelen > low_wl ? f / factor : f;
    if (wavelen < high_wl || wavelen > low_wl) return scaled;
    float smooth = (old / wavelen - lo) / (float)(c->high_freq_factor - c->low_freq_factor);
    return (1.0f - smooth) * scaled / factor + smooth * scaled;
}

int anvil_rope_inv_freq(float *inv_freq, const anvil_rope_config *c, int hs) {
    if (anvil_rope_check(c, hs)) return -1;
    float base = (float)c->theta;
    for (int i = 0; i < hs / 2; i++) {
        float e = (float)(2 * i) / (float)hs;
        float f = 1.0f / (float)pow((double)base, (double)e);
        inv_freq[i] = c->type == ANVIL_ROPE_LLAMA3 ? llama3_scale(f, c) : f;
    }
    return 0;
}

int anvil_rope_table(float *cs, const anvil_rope_config *c, int hs, int P) {
    int half = hs / 2;
    float *f = malloc(sizeof(float) * (size_t)(half > 0 ? half : 1));
    if (!f) return anvil_fail("rope: out of memory for %d frequencies", half);
    int rc = anvil_rope_inv_freq(f, c, hs);
    for (int p = 0; !rc && p < P; p++) {
        float *row = cs + (size_t)p * hs;
        for (int i = 0; i < half; i++) {
            float angle = (float)p * f[i];
            row[i] = (float)cos((double)angle);
            row[half + i] = (float)sin((double)angle);
        }
    }
    free(f);
    return rc;
}
