#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/cpu_kernels.h"

#define LN_EPS 1e-5f

void cpu_layernorm_forward(float *out, float *mean, float *rstd, const float *x, const float *w, const float *b,
                           int N, int C) {
#pragma omp parallel for schedule(static)
    for (int i = 0; i < N; i++) {
        const float *xi = x + (size_t)i * C;
        float s = 0.0f;
#pragma omp simd reduction(+ : s)
        for (int c = 0; c < C; c++) s += xi[c];
        float m = s / C;
        float v = 0.0f;
#pragma omp simd reduction(+ : v)
        for (int c = 0; c < C; c++) v += (xi[c] - m) * (xi[c] - m);
        float r = 1.0f / sqrtf(v / C + LN_EPS);
        float *oi = out + (size_t)i * C;
#pragma omp simd
        for (int c = 0; c < C; c++) oi[c] = (xi[c] - m) * r * w[c] + b[c];
        mean[i] = m;
        rstd[i] = r;
    }
}

/* dw and db sum over all N rows. Each thread sums a fixed, contiguous range
 * of rows into its own partial, and the partials are added in thread order,
 * so the result is deterministic for a given thread count. */
void cpu_layernorm_backward(float *dx, float *dw, float *db, const float *dout, const float *x, const float *w,
                            const float *mean, const float *rstd, int N, int C) {
    int nt = omp_get_max_threads();
    float *partial = calloc((size_t)nt * 2 * C, sizeof(float));
#pragma omp parallel num_threads(nt)
    {
        int tid = omp_get_thread_num();
        float *pdw = partial + (size_t)tid * 2 * C;
        float *pdb = pdw + C;
#pragma omp for schedule(static)
        for (int i = 0; i < N; i++) {
            const float *xi = x + (size_t)i * C;
            const float *di = dout + (size_t)i * C;
            float *dxi = dx + (size_t)i * C;
            float m = mean[i], r = rstd[i];
            float sum_dn = 0.0f, sum_dn_xhat = 0.0f;
#pragma omp simd reduction(+ : sum_dn, sum_dn_xhat)
            for (int c = 0; c < C; c++) {
                float xhat = (xi[c] - m) * r;
                float dn = di[c] * w[c];
                sum_dn += dn;
                sum_dn_xhat += dn * xhat;
            }
            sum_dn /= C;
            sum_dn_xhat /= C;
#pragma omp simd
            for (int c = 0; c < C; c++) {
                float xhat = (xi[c] - m) * r;
                float dn = di[c] * w[c];
                pdb[c] += di[c];
                pdw[c] += xhat * di[c];
                dxi[c] += (dn - sum_dn - xhat * sum_dn_xhat) * r;
            }
        }
    }
    for (int t = 0; t < nt; t++) {
        const float *pdw = partial + (size_t)t * 2 * C;
        for (int c = 0; c < C; c++) {
            dw[c] += pdw[c];
            db[c] += pdw[C + c];
        }
    }
    free(partial);
}
