/* SwiGLU, Llama's MLP nonlinearity: silu(gate) * up, with silu computed as
 * PyTorch's CPU kernel does, g / (1 + exp(-g)). */
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/vmath.h"

void cpu_swiglu_forward(float *out, const float *gate, const float *up, int N, int H, int ld) {
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float *g = gate + (size_t)n * ld, *u = up + (size_t)n * ld;
        float *o = out + (size_t)n * H;
#pragma omp simd
        for (int j = 0; j < H; j++) o[j] = g[j] / (1.0f + vexpf(-g[j])) * u[j];
    }
}

/* d silu(g)/dg = sig(g) * (1 + g * (1 - sig(g))). */
void cpu_swiglu_backward(float *dgate, float *dup, const float *dout, const float *gate, const float *up, int N, int H,
                         int ld) {
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float *g = gate + (size_t)n * ld, *u = up + (size_t)n * ld, *d = dout + (size_t)n * H;
        float *dg = dgate + (size_t)n * ld, *du = dup + (size_t)n * ld;
#pragma omp simd
        for (int j = 0; j < H; j++) {
            float sig = 1.0f / (1.0f + vexpf(-g[j]));
            float gj = g[j], uj = u[j], dj = d[j];
            du[j] = dj * gj * sig;
            dg[j] = dj * uj * sig * (1.0f + gj * (1.0f - sig));
        }
    }
}
