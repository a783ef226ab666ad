#include "kernels/cpu/cpu_kernels.h"

void cpu_encoder_forward(float *out, const int32_t *tokens, const float *wte, const float *wpe, int B, int T,
                         int C) {
#pragma omp parallel for schedule(static)
    for (int i = 0; i < B * T; i++) {
        const float *te = wte + (size_t)tokens[i] * C;
        const float *pe = wpe + (size_t)(i % T) * C;
        float *o = out + (size_t)i * C;
        for (int c = 0; c < C; c++) o[c] = te[c] + pe[c];
    }
}

/* The same token can occur at many positions, so rows of dwte would race if
 * split by position. Splitting by channel instead gives every thread its own
 * columns: no atomics, and the summation order is fixed. */
void cpu_encoder_backward(float *dwte, float *dwpe, const float *dout, const int32_t *tokens, int B, int T, int C) {
#pragma omp parallel
    {
#pragma omp for schedule(static) nowait
        for (int c0 = 0; c0 < C; c0 += 16) {
            int c1 = c0 + 16 < C ? c0 + 16 : C;
            for (int i = 0; i < B * T; i++) {
                float *dt = dwte + (size_t)tokens[i] * C;
                const float *d = dout + (size_t)i * C;
                for (int c = c0; c < c1; c++) dt[c] += d[c];
            }
        }
#pragma omp for schedule(static)
        for (int t = 0; t < T; t++) {
            float *dp = dwpe + (size_t)t * C;
            for (int b = 0; b < B; b++) {
                const float *d = dout + ((size_t)b * T + t) * C;
                for (int c = 0; c < C; c++) dp[c] += d[c];
            }
        }
    }
}
