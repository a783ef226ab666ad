/* The portable tile of the CPU GEMM (gemm_tile.h): plain C that the
 * compiler vectorizes for baseline x86-64 (SSE2, 16 registers of 4 floats),
 * for CPUs with neither AVX2 nor AVX-512. No FMA there: each step is a
 * multiply and an add. A 4 x 8 tile keeps 8 accumulator registers, two of
 * B and the shuffles that spread A (SSE2 has no broadcast) without spilling. */
#include <stdbool.h>
#include <stddef.h>

#include "kernels/cpu/gemm_tile.h"

enum { MR = 4, NR = 8, KC = 256, NC = 256, MC = 1536 };

static void micro_kernel(int kc, const void *pa, const void *pb, float *restrict c, int ldc, int m, int n,
                         int mode, float beta) {
    const float *restrict a = pa, *restrict b = pb;
    float acc[MR][NR];
#pragma GCC unroll 8
    for (int r = 0; r < MR; r++)
#pragma GCC unroll 8
        for (int j = 0; j < NR; j++) acc[r][j] = 0.0f;
    for (int k = 0; k < kc; k++) {
#pragma GCC unroll 8
        for (int r = 0; r < MR; r++)
#pragma GCC unroll 8
            for (int j = 0; j < NR; j++) acc[r][j] += a[r] * b[j];
        a += MR;
        b += NR;
    }
    /* Unrolled like the loops above, so that acc stays in registers. */
#pragma GCC unroll 8
    for (int r = 0; r < MR; r++) {
        if (r >= m) break;
        float *cr = c + (size_t)r * ldc;
#pragma GCC unroll 8
        for (int j = 0; j < NR; j++) {
            if (j >= n) break;
            float x = acc[r][j];
            if (mode == GEMM_ADD) x = cr[j] + x;
            else if (mode == GEMM_SCALE) x = beta * cr[j] + x;
            cr[j] = x;
        }
    }
}

static void pack_a(bool ta, const float *A, int lda, int mc, int kc, float alpha, void *out) {
    float *dst = out;
    for (int ir = 0; ir < mc; ir += MR) {
        const int m = mc - ir < MR ? mc - ir : MR;
        float *d = dst + (size_t)ir * kc;
        if (m < MR)
            for (size_t i = 0; i < (size_t)kc * MR; i++) d[i] = 0.0f;
        if (ta) {
            /* op(A)(i,k) = A[k*lda + i]: each k is a contiguous run of rows. */
            for (int k = 0; k < kc; k++) {
                const float *s = A + (size_t)k * lda + ir;
                for (int r = 0; r < m; r++) d[(size_t)k * MR + r] = alpha * s[r];
            }
        } else {
            for (int r = 0; r < m; r++) {
                const float *s = A + (size_t)(ir + r) * lda;
                for (int k = 0; k < kc; k++) d[(size_t)k * MR + r] = alpha * s[k];
            }
        }
    }
}

static void pack_b(bool tb, const float *B, int ldb, int kc, int nc, void *out) {
    float *dst = out;
    for (int jr = 0; jr < nc; jr += NR) {
        const int n = nc - jr < NR ? nc - jr : NR;
        float *d = dst + (size_t)jr * kc;
        if (n < NR)
            for (size_t i = 0; i < (size_t)kc * NR; i++) d[i] = 0.0f;
        if (tb) {
            /* op(B)(k,j) = B[j*ldb + k]: each column is a contiguous run of k. */
            for (int j = 0; j < n; j++) {
                const float *s = B + (size_t)(jr + j) * ldb;
                for (int k = 0; k < kc; k++) d[(size_t)k * NR + j] = s[k];
            }
        } else {
            for (int k = 0; k < kc; k++) {
                const float *s = B + (size_t)k * ldb + jr;
                for (int j = 0; j < n; j++) d[(size_t)k * NR + j] = s[j];
            }
        }
    }
}

const cpu_gemm_tile cpu_tile_generic = {
    .name = "generic",
    .mr = MR,
    .nr = NR,
    .kc = KC,
    .nc = NC,
    .mc = MC,
    .kstep = 1,
    .elem_bytes = sizeof(float),
    .pack_a = pack_a,
    .pack_b = pack_b,
    .kernel = micro_kernel,
};
