/* Rotary position embedding in the rotate-half layout (Hugging Face's
 * apply_rotary_pos_emb): channel i of a head pairs with channel i + hs/2.
 * In place on the query and key heads, which lie side by side at the start
 * of each qkv row, so one loop covers both; each element is its own
 * product pair, so the work splits over rows with no effect on the bits.
 *
 * Not fused into the attention kernel: the rotation is one read and write
 * of the q and k heads per step, against attention's T-long dot products
 * per element, and the attention kernel reads each key block once per query
 * block, so rotating inside it would repeat the work T/64 times
 * (bench/RESULTS.md has the measured shares). */
#include "kernels/cpu/cpu_kernels.h"

/* sign +1 rotates by the angle (forward), -1 by its negative (the backward's
 * transpose). */
static void rope_rows(float *qkv, const float *cs, int B, int T, int pos0, int NH, int NKV, int hs, float sign) {
    int half = hs / 2, heads = NH + NKV;
    size_t ld = (size_t)(NH + 2 * NKV) * hs;
#pragma omp parallel for schedule(static)
    for (int n = 0; n < B * T; n++) {
        const float *c = cs + (size_t)(pos0 + n % T) * hs, *s = c + half;
        float *row = qkv + (size_t)n * ld;
        for (int h = 0; h < heads; h++) {
            float *x = row + (size_t)h * hs;
#pragma omp simd
            for (int i = 0; i < half; i++) {
                float a = x[i], b = x[i + half], si = sign * s[i];
                x[i] = a * c[i] - b * si;
                x[i + half] = b * c[i] + a * si;
            }
        }
    }
}

void cpu_rope_forward(float *qkv, const float *cs, int B, int T, int pos0, int NH, int NKV, int hs) {
    rope_rows(qkv, cs, B, T, pos0, NH, NKV, hs, 1.0f);
}

void cpu_rope_backward(float *dqkv, const float *cs, int B, int T, int pos0, int NH, int NKV, int hs) {
    rope_rows(dqkv, cs, B, T, pos0, NH, NKV, hs, -1.0f);
}
