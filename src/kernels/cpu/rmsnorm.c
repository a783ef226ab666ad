/* RMSNorm, as Llama and Hugging Face's LlamaRMSNorm compute it in fp32:
 * the row scaled by its reciprocal root mean square first, then by the
 * weight, each product rounded on its own (the same two roundings as
 * PyTorch's reference). */
#include <math.h>

#include "kernels/cpu/cpu_kernels.h"

void cpu_rmsnorm_forward(float *out, float *rstd, const float *x, const float *w, int N, int C, float eps) {
#pragma omp parallel for schedule(static)
    for (int i = 0; i < N; i++) {
        const float *xi = x + (size_t)i * C;
        float ss = 0.0f;
#pragma omp simd reduction(+ : ss)
        for (int c = 0; c < C; c++) ss += xi[c] * xi[c];
        float r = 1.0f / sqrtf(ss / C + eps);
        float *oi = out + (size_t)i * C;
#pragma omp simd
        for (int c = 0; c < C; c++) oi[c] = w[c] * (xi[c] * r);
        rstd[i] = r;
    }
}

/* Rows per partial sum of dw. */
#define RMS_ROWS 32

/* dx row by row; then dw, whose sum runs over all N rows, by blocks of
 * columns, each block's rows summed in chunks of RMS_ROWS that are added in
 * row order (as layernorm.c does), so no thread count changes a bit. */
void cpu_rmsnorm_backward(float *dx, float *dw, const float *dout, const float *x, const float *w, const float *rstd,
                          int N, int C) {
#pragma omp parallel
    {
#pragma omp for schedule(static) nowait
        for (int i = 0; i < N; i++) {
            const float *xi = x + (size_t)i * C, *di = dout + (size_t)i * C;
            float *dxi = dx + (size_t)i * C;
            float r = rstd[i], dot = 0.0f;
#pragma omp simd reduction(+ : dot)
            for (int c = 0; c < C; c++) dot += di[c] * w[c] * (xi[c] * r);
            dot /= C;
#pragma omp simd
            for (int c = 0; c < C; c++) dxi[c] += (di[c] * w[c] - xi[c] * r * dot) * r;
        }
#pragma omp for schedule(static)
        for (int c0 = 0; c0 < C; c0 += 64) {
            const int nc = C - c0 < 64 ? C - c0 : 64;
            float tw[64] = {0};
            for (int i0 = 0; i0 < N; i0 += RMS_ROWS) {
                const int i1 = i0 + RMS_ROWS < N ? i0 + RMS_ROWS : N;
                float pw[64] = {0};
                for (int i = i0; i < i1; i++) {
                    const float *xi = x + (size_t)i * C + c0, *di = dout + (size_t)i * C + c0;
                    const float r = rstd[i];
#pragma omp simd
                    for (int c = 0; c < nc; c++) pw[c] += xi[c] * r * di[c];
                }
                for (int c = 0; c < nc; c++) tw[c] += pw[c];
            }
            for (int c = 0; c < nc; c++) dw[c0 + c] += tw[c];
        }
    }
}
