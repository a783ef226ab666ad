/* Branch-free float math that the compiler can vectorize: glibc's expf and
 * tanhf are scalar calls unless -ffast-math is on, which we refuse because
 * it would break NaN detection and exactness elsewhere. */
#ifndef ANVIL_KERNELS_CPU_VMATH_H
#define ANVIL_KERNELS_CPU_VMATH_H

#include <stdint.h>
#include <string.h>

/* exp(x) for x in [-87, 88] (clamped outside), relative error < 2e-7:
 * x = n*ln2 + r with |r| <= ln2/2, then a degree-6 polynomial for e^r.
 * NaN in gives NaN out, so a diverging run is still caught downstream. */
static inline float vexpf(float x_in) {
    float x = x_in != x_in ? 0.0f : x_in;
    x = x < -87.0f ? -87.0f : (x > 88.0f ? 88.0f : x);
    const float shifter = 12582912.0f; /* 1.5 * 2^23: adding it rounds to an integer */
    float n = (x * 1.44269504088896341f + shifter) - shifter;
    float r = x - n * 0.693145751953125f;
    r = r - n * 1.428606765330187045e-06f;
    float p = 1.0f / 720.0f;
    p = p * r + 1.0f / 120.0f;
    p = p * r + 1.0f / 24.0f;
    p = p * r + 1.0f / 6.0f;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    uint32_t bits = (uint32_t)((int32_t)n + 127) << 23;
    float scale;
    memcpy(&scale, &bits, sizeof scale);
    return x_in != x_in ? x_in : p * scale;
}

/* tanh(x) = 1 - 2 / (exp(2x) + 1), exact at the saturated ends. */
static inline float vtanhf(float x) { return 1.0f - 2.0f / (vexpf(2.0f * x) + 1.0f); }

#endif
