#include <math.h>

#include "kernels/cpu/cpu_kernels.h"

/* Floats per float partial, and the most partials summed in double. */
#define SUMSQ_CHUNK 1024
#define SUMSQ_PARTS 1024

/* An OpenMP reduction clause may combine partials in any order. Here the
 * vector is cut into at most SUMSQ_PARTS parts whose bounds depend on n
 * alone; each part sums chunks of SUMSQ_CHUNK floats (in float, then in
 * double) in order, and the parts are added in order, so the norm is the
 * same bits whatever the thread count. */
double cpu_sumsq(const float *g, size_t n) {
    size_t chunks = (n + SUMSQ_CHUNK - 1) / SUMSQ_CHUNK;
    size_t per_part = (chunks + SUMSQ_PARTS - 1) / SUMSQ_PARTS;
    if (per_part == 0) per_part = 1;
    const int parts = (int)((chunks + per_part - 1) / per_part);
    double partial[SUMSQ_PARTS];
#pragma omp parallel for schedule(static)
    for (int p = 0; p < parts; p++) {
        size_t lo = (size_t)p * per_part * SUMSQ_CHUNK, hi = lo + per_part * SUMSQ_CHUNK;
        if (hi > n) hi = n;
        double s = 0.0;
        for (size_t i = lo; i < hi; i += SUMSQ_CHUNK) {
            size_t end = i + SUMSQ_CHUNK < hi ? i + SUMSQ_CHUNK : hi;
            float f = 0.0f;
#pragma omp simd reduction(+ : f)
            for (size_t j = i; j < end; j++) f += g[j] * g[j];
            s += f;
        }
        partial[p] = s;
    }
    double total = 0.0;
    for (int p = 0; p < parts; p++) total += partial[p];
    return total;
}

/* Mirrors torch.optim.AdamW's single-tensor path operation for operation, so
 * that the two agree to float rounding: decay, moments, then
 * p += (-lr/bc1) * m / (sqrt(v)/sqrt(bc2) + eps), with the scalar factors
 * formed in double as Python does. */
void cpu_adamw(float *p, const float *g, float gscale, float *m, float *v, size_t n, float lr, float beta1,
               float beta2, float eps, float weight_decay, int t) {
    float decay = (float)(1.0 - (double)lr * (double)weight_decay);
    double bc1 = 1.0 - pow((double)beta1, t), bc2 = 1.0 - pow((double)beta2, t);
    float step_size = (float)((double)lr / bc1);
    float bc2_sqrt = (float)sqrt(bc2);
    float one_m_b1 = (float)(1.0 - (double)beta1), one_m_b2 = (float)(1.0 - (double)beta2);
#pragma omp parallel for simd schedule(static)
    for (size_t i = 0; i < n; i++) {
        float gi = g[i] * gscale;
        float pi = p[i] * decay;
        float mi = m[i] * beta1 + gi * one_m_b1;
        float vi = v[i] * beta2 + one_m_b2 * gi * gi;
        float denom = sqrtf(vi) / bc2_sqrt + eps;
        p[i] = pi + (-step_size * mi) / denom;
        m[i] = mi;
        v[i] = vi;
    }
}
