#include <math.h>
#include <omp.h>
#include <stdlib.h>

#include "kernels/cpu/cpu_kernels.h"

/* An OpenMP reduction clause may combine partials in any order; fixed
 * per-thread ranges summed in thread order keep the norm bit-identical from
 * run to run. */
double cpu_sumsq(const float *g, size_t n) {
    int nt = omp_get_max_threads();
    double *partial = calloc((size_t)nt, sizeof(double));
#pragma omp parallel num_threads(nt)
    {
        int tid = omp_get_thread_num(), got = omp_get_num_threads();
        size_t lo = n * (size_t)tid / (size_t)got, hi = n * (size_t)(tid + 1) / (size_t)got;
        double s = 0.0;
        for (size_t i = lo; i < hi; i += 1024) {
            size_t end = i + 1024 < hi ? i + 1024 : hi;
            float f = 0.0f;
#pragma omp simd reduction(+ : f)
            for (size_t j = i; j < end; j++) f += g[j] * g[j];
            s += f;
        }
        partial[tid] = s;
    }
    double total = 0.0;
    for (int t = 0; t < nt; t++) total += partial[t];
    free(partial);
    return total;
}

void cpu_scale(float *g, float s, size_t n) {
#pragma omp parallel for simd schedule(static)
    for (size_t i = 0; i < n; i++) g[i] *= s;
}

/* Mirrors torch.optim.AdamW's single-tensor path operation for operation, so
 * that the two agree to float rounding: decay, moments, then
 * p += (-lr/bc1) * m / (sqrt(v)/sqrt(bc2) + eps), with the scalar factors
 * formed in double as Python does. */
void cpu_adamw(float *p, const float *g, float *m, float *v, size_t n, float lr, float beta1, float beta2, float eps,
               float weight_decay, int t) {
    float decay = (float)(1.0 - (double)lr * (double)weight_decay);
    double bc1 = 1.0 - pow((double)beta1, t), bc2 = 1.0 - pow((double)beta2, t);
    float step_size = (float)((double)lr / bc1);
    float bc2_sqrt = (float)sqrt(bc2);
    float one_m_b1 = (float)(1.0 - (double)beta1), one_m_b2 = (float)(1.0 - (double)beta2);
#pragma omp parallel for simd schedule(static)
    for (size_t i = 0; i < n; i++) {
        float pi = p[i] * decay;
        float mi = m[i] * beta1 + g[i] * one_m_b1;
        float vi = v[i] * beta2 + one_m_b2 * g[i] * g[i];
        float denom = sqrtf(vi) / bc2_sqrt + eps;
        p[i] = pi + (-step_size * mi) / denom;
        m[i] = mi;
        v[i] = vi;
    }
}
