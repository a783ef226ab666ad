#include <math.h>
#include <string.h>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/vmath.h"

#define GELU_K 0.7978845608028654f /* sqrt(2/pi) */

void cpu_gelu_forward(float *out, const float *x, size_t n) {
#pragma omp parallel for simd schedule(static)
    for (size_t i = 0; i < n; i++) {
        float v = x[i];
        float u = GELU_K * (v + 0.044715f * v * v * v);
        out[i] = 0.5f * v * (1.0f + vtanhf(u));
    }
}

void cpu_gelu_backward(float *dx, const float *x, const float *dout, size_t n) {
#pragma omp parallel for simd schedule(static)
    for (size_t i = 0; i < n; i++) {
        float v = x[i];
        float u = GELU_K * (v + 0.044715f * v * v * v);
        float th = vtanhf(u);
        float sech2 = 1.0f - th * th;
        float grad = 0.5f * (1.0f + th) + 0.5f * v * sech2 * GELU_K * (1.0f + 3.0f * 0.044715f * v * v);
        dx[i] = grad * dout[i];
    }
}

void cpu_copy(float *dst, const float *src, size_t n) {
#pragma omp parallel for schedule(static)
    for (size_t i0 = 0; i0 < n; i0 += 65536) {
        size_t len = n - i0 < 65536 ? n - i0 : 65536;
        memcpy(dst + i0, src + i0, len * sizeof(float));
    }
}

void cpu_add_inplace(float *dst, const float *src, size_t n) {
#pragma omp parallel for simd schedule(static)
    for (size_t i = 0; i < n; i++) dst[i] += src[i];
}
