#include <string.h>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/gemm_tile.h"

static void forward(const cpu_gemm_tile *t, float *out, const float *x, const float *w, const float *b, int N, int C,
                    int OC, int accumulate) {
    cpu_gemm(t, false, true, N, OC, C, 1.0f, x, C, w, C, accumulate ? 1.0f : 0.0f, out, OC);
    if (!b) return;
#pragma omp parallel for schedule(static)
    for (int i = 0; i < N; i++) {
        float *o = out + (size_t)i * OC;
#pragma omp simd
        for (int j = 0; j < OC; j++) o[j] += b[j];
    }
}

static void backward(const cpu_gemm_tile *t, float *dx, float *dw, float *db, const float *dout, const float *x,
                     const float *w, int N, int C, int OC) {
    if (dx) cpu_gemm(t, false, false, N, C, OC, 1.0f, dout, OC, w, C, 0.0f, dx, C);
    cpu_gemm(t, true, false, OC, C, N, 1.0f, dout, OC, x, C, 1.0f, dw, C);
    if (!db) return;
    /* Column sums: each thread owns a block of columns and walks all rows. */
#pragma omp parallel for schedule(static)
    for (int j0 = 0; j0 < OC; j0 += 64) {
        int j1 = j0 + 64 < OC ? j0 + 64 : OC;
        float acc[64];
        memset(acc, 0, sizeof acc);
        for (int i = 0; i < N; i++) {
            const float *d = dout + (size_t)i * OC;
            for (int j = j0; j < j1; j++) acc[j - j0] += d[j];
        }
        for (int j = j0; j < j1; j++) db[j] += acc[j - j0];
    }
}

void cpu_matmul_forward(float *out, const float *x, const float *w, const float *b, int N, int C, int OC,
                        int accumulate) {
    forward(&CPU_TILE, out, x, w, b, N, C, OC, accumulate);
}

void cpu_matmul_backward(float *dx, float *dw, float *db, const float *dout, const float *x, const float *w, int N,
                         int C, int OC) {
    backward(&CPU_TILE, dx, dw, db, dout, x, w, N, C, OC);
}

#ifdef ANVIL_CPU_BF16
/* bf16 inputs, fp32 products and sums, by vdpbf16ps or by AMX; the bias and
 * its gradient stay fp32. */
void cpu_matmul_forward_bf16(float *out, const float *x, const float *w, const float *b, int N, int C, int OC,
                             int accumulate) {
    forward(&cpu_tile_avx512_bf16, out, x, w, b, N, C, OC, accumulate);
}

void cpu_matmul_backward_bf16(float *dx, float *dw, float *db, const float *dout, const float *x, const float *w,
                              int N, int C, int OC) {
    backward(&cpu_tile_avx512_bf16, dx, dw, db, dout, x, w, N, C, OC);
}

void cpu_matmul_forward_amx(float *out, const float *x, const float *w, const float *b, int N, int C, int OC,
                            int accumulate) {
    forward(&cpu_tile_amx_bf16, out, x, w, b, N, C, OC, accumulate);
}

void cpu_matmul_backward_amx(float *dx, float *dw, float *db, const float *dout, const float *x, const float *w,
                             int N, int C, int OC) {
    backward(&cpu_tile_amx_bf16, dx, dw, db, dout, x, w, N, C, OC);
}
#endif
