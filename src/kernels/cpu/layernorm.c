#include <math.h>

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

/* Rows per partial sum of dw and db. */
#define LN_ROWS 32

/* dx row by row; then dw and db, whose sums run over all N rows, by blocks
 * of columns: each block's rows are summed in chunks of LN_ROWS, and the
 * chunks are added in row order. Which thread takes a block changes
 * nothing, so the result does not depend on the thread count, and no
 * scratch memory is needed. */
void cpu_layernorm_backward(float *dx, float *dw, float *db, const float *dout, const float *x, const float *w,
                            const float *mean, const float *rstd, int N, int C) {
#pragma omp parallel
    {
#pragma omp for schedule(static) nowait
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
                dxi[c] += (dn - sum_dn - xhat * sum_dn_xhat) * r;
            }
        }
#pragma omp for schedule(static)
        for (int c0 = 0; c0 < C; c0 += 64) {
            const int nc = C - c0 < 64 ? C - c0 : 64;
            float tw[64] = {0}, tb[64] = {0};
            for (int i0 = 0; i0 < N; i0 += LN_ROWS) {
                const int i1 = i0 + LN_ROWS < N ? i0 + LN_ROWS : N;
                float pw[64] = {0}, pb[64] = {0};
                for (int i = i0; i < i1; i++) {
                    const float *xi = x + (size_t)i * C + c0, *di = dout + (size_t)i * C + c0;
                    const float m = mean[i], r = rstd[i];
#pragma omp simd
                    for (int c = 0; c < nc; c++) {
                        pb[c] += di[c];
                        pw[c] += (xi[c] - m) * r * di[c];
                    }
                }
                for (int c = 0; c < nc; c++) {
                    tw[c] += pw[c];
                    tb[c] += pb[c];
                }
            }
            for (int c = 0; c < nc; c++) {
                dw[c0 + c] += tw[c];
                db[c0 + c] += tb[c];
            }
        }
    }
}
