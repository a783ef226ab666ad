/* What the AVX-512 tiles of the CPU GEMM share: lane masks, a 16 x 16
 * transpose of 32-bit elements (integer data goes through it as float bit
 * patterns: only shuffles, no arithmetic), and the combine of a 6 x 64
 * register tile with C. Included inside each tile's TILE_TARGET
 * (gemm_tile.h), which enables AVX-512F. */
#ifndef ANVIL_KERNELS_CPU_AVX512_TILE_H
#define ANVIL_KERNELS_CPU_AVX512_TILE_H

#include <immintrin.h>
#include <stddef.h>

#include "kernels/cpu/gemm_tile.h"

/* The mask of the first n of 16 lanes (n clamped to 0..16). */
static inline __mmask16 lanes(int n) {
    return n >= 16 ? (__mmask16)0xFFFF : n <= 0 ? 0 : (__mmask16)((1u << n) - 1);
}

/* The first two stages of transposing the n x 16 block in r[0..n) (n is 8
 * or 16): afterwards u[4g + e] holds, in 128-bit lane L, rows 4g..4g+3 of
 * column 4L + e. */
static inline __attribute__((always_inline)) void transpose_stages(const __m512 *r, __m512 *u, int n) {
    __m512 t[16];
#pragma GCC unroll 8
    for (int i = 0; i < n; i += 2) {
        t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
        t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
    }
#pragma GCC unroll 4
    for (int g = 0; g < n; g += 4) {
        __m512d t0 = _mm512_castps_pd(t[g]), t1 = _mm512_castps_pd(t[g + 1]);
        __m512d t2 = _mm512_castps_pd(t[g + 2]), t3 = _mm512_castps_pd(t[g + 3]);
        u[g + 0] = _mm512_castpd_ps(_mm512_unpacklo_pd(t0, t2));
        u[g + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(t0, t2));
        u[g + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(t1, t3));
        u[g + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(t1, t3));
    }
}

/* r[0..15] = the transpose of the 16 x 16 block in r[0..15]. */
static inline __attribute__((always_inline)) void transpose16(__m512 r[16]) {
    __m512 u[16];
    transpose_stages(r, u, 16);
#pragma GCC unroll 4
    for (int e = 0; e < 4; e++) {
        __m512 v0 = _mm512_shuffle_f32x4(u[e], u[4 + e], 0x44);
        __m512 v1 = _mm512_shuffle_f32x4(u[e], u[4 + e], 0xEE);
        __m512 v2 = _mm512_shuffle_f32x4(u[8 + e], u[12 + e], 0x44);
        __m512 v3 = _mm512_shuffle_f32x4(u[8 + e], u[12 + e], 0xEE);
        r[e] = _mm512_shuffle_f32x4(v0, v2, 0x88);
        r[4 + e] = _mm512_shuffle_f32x4(v0, v2, 0xDD);
        r[8 + e] = _mm512_shuffle_f32x4(v1, v3, 0x88);
        r[12 + e] = _mm512_shuffle_f32x4(v1, v3, 0xDD);
    }
}

/* Transposes the 8 x 16 block in r[0..7] (rows of 16 k) into col[0..15],
 * the 8 rows at each k. Half the shuffles of a 16 x 16 transpose, for A
 * micro-panels of six rows (fp32 values or 32-bit words of bf16 pairs). */
static inline __attribute__((always_inline)) void transpose8x16(const __m512 r[8], __m256 col[16]) {
    __m512 u[8];
    transpose_stages(r, u, 8);
#pragma GCC unroll 4
    for (int e = 0; e < 4; e++) {
        /* Lanes 0, 2 of u[e] and u[4 + e], then interleaved: columns e and 8 + e. */
        __m512 x = _mm512_shuffle_f32x4(u[e], u[4 + e], _MM_SHUFFLE(2, 0, 2, 0));
        __m512 y = _mm512_shuffle_f32x4(u[e], u[4 + e], _MM_SHUFFLE(3, 1, 3, 1));
        x = _mm512_shuffle_f32x4(x, x, _MM_SHUFFLE(3, 1, 2, 0));
        y = _mm512_shuffle_f32x4(y, y, _MM_SHUFFLE(3, 1, 2, 0));
        col[e] = _mm512_castps512_ps256(x);
        col[8 + e] = _mm512_extractf32x8_ps(x, 1);
        col[4 + e] = _mm512_castps512_ps256(y);
        col[12 + e] = _mm512_extractf32x8_ps(y, 1);
    }
}

/* C[0:m, 0:n] (mode)= acc, the sums of a 6 x 64 tile: the same arithmetic
 * for full and edge tiles, so that results do not depend on how C is cut. */
static inline __attribute__((always_inline)) void combine_6x64(__m512 acc[6][4], float *c, int ldc, int m, int n,
                                                                int mode, float beta) {
    /* Full-width tiles, nearly all of them, need no masks; the arithmetic
     * is the same either way. */
    __mmask16 mask[4];
#pragma GCC unroll 8
    for (int v = 0; v < 4; v++) mask[v] = n == 64 ? (__mmask16)0xFFFF : lanes(n - 16 * v);
    const __m512 vbeta = _mm512_set1_ps(beta);
#pragma GCC unroll 32
    for (int r = 0; r < 6; r++) {
        if (r >= m) break;
        float *cr = c + (size_t)r * ldc;
#pragma GCC unroll 8
        for (int v = 0; v < 4; v++) {
            __m512 x = acc[r][v], y = _mm512_setzero_ps();
            if (mode != GEMM_STORE)
                y = n == 64 ? _mm512_loadu_ps(cr + 16 * v) : _mm512_maskz_loadu_ps(mask[v], cr + 16 * v);
            if (mode == GEMM_ADD) x = _mm512_add_ps(x, y);
            else if (mode == GEMM_SCALE) x = _mm512_fmadd_ps(vbeta, y, x);
            if (n == 64) _mm512_storeu_ps(cr + 16 * v, x);
            else _mm512_mask_storeu_ps(cr + 16 * v, mask[v], x);
        }
    }
}

#endif
