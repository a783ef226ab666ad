#include <stdint.h>

#include "kernels/cpu/cpu_kernels.h"

void cpu_encoder_shard_forward(float *out, const int32_t *tokens, const float *wte, const float *wpe, int B, int T,
                               int C, int v0, int Vs) {
#pragma omp parallel for schedule(static)
    for (int i = 0; i < B * T; i++) {
        int64_t row = (int64_t)tokens[i] - v0;
        float *o = out + (size_t)i * C;
        const float *pe = wpe ? wpe + (size_t)(i % T) * C : NULL;
        if (row >= 0 && row < Vs) {
            const float *te = wte + (size_t)row * C;
            if (pe)
                for (int c = 0; c < C; c++) o[c] = te[c] + pe[c];
            else
                for (int c = 0; c < C; c++) o[c] = te[c];
        } else {
            for (int c = 0; c < C; c++) o[c] = pe ? pe[c] : 0.0f;
        }
    }
}

void cpu_encoder_forward(float *out, const int32_t *tokens, const float *wte, const float *wpe, int B, int T,
                         int C) {
    cpu_encoder_shard_forward(out, tokens, wte, wpe, B, T, C, 0, INT32_MAX);
}

/* The same token can occur at many positions, so rows of dwte would race if
 * split by position. Splitting by channel instead gives every thread its own
 * columns: no atomics, and the summation order is fixed. */
void cpu_encoder_shard_backward(float *dwte, float *dwpe, const float *dout, const int32_t *tokens, int B, int T,
                                int C, int v0, int Vs) {
#pragma omp parallel
    {
#pragma omp for schedule(static) nowait
        for (int c0 = 0; c0 < C; c0 += 16) {
            int c1 = c0 + 16 < C ? c0 + 16 : C;
            for (int i = 0; i < B * T; i++) {
                int64_t row = (int64_t)tokens[i] - v0;
                if (row < 0 || row >= Vs) continue;
                float *dt = dwte + (size_t)row * C;
                const float *d = dout + (size_t)i * C;
                for (int c = c0; c < c1; c++) dt[c] += d[c];
            }
        }
        if (dwpe) {
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
}

void cpu_encoder_backward(float *dwte, float *dwpe, const float *dout, const int32_t *tokens, int B, int T, int C) {
    cpu_encoder_shard_backward(dwte, dwpe, dout, tokens, B, T, C, 0, INT32_MAX);
}
