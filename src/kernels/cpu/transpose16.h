/* A 16 x 16 transpose of 32-bit elements in AVX-512 registers, for the
 * packing of the AVX-512 and AMX tiles (integer data goes through it as
 * float bit patterns: only shuffles, no arithmetic). Included inside each
 * tile's #pragma GCC target, which enables AVX-512F. */
#ifndef ANVIL_KERNELS_CPU_TRANSPOSE16_H
#define ANVIL_KERNELS_CPU_TRANSPOSE16_H

#include <immintrin.h>

/* r[0..15] = the transpose of the 16 x 16 block in r[0..15]. */
static inline __attribute__((always_inline)) void transpose16(__m512 r[16]) {
    __m512 t[16], u[16];
#pragma GCC unroll 8
    for (int i = 0; i < 16; i += 2) {
        t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
        t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
    }
    /* u[4g + e] holds, in 128-bit lane L, rows 4g..4g+3 of column 4L + e. */
#pragma GCC unroll 4
    for (int g = 0; g < 16; g += 4) {
        __m512d t0 = _mm512_castps_pd(t[g]), t1 = _mm512_castps_pd(t[g + 1]);
        __m512d t2 = _mm512_castps_pd(t[g + 2]), t3 = _mm512_castps_pd(t[g + 3]);
        u[g + 0] = _mm512_castpd_ps(_mm512_unpacklo_pd(t0, t2));
        u[g + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(t0, t2));
        u[g + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(t1, t3));
        u[g + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(t1, t3));
    }
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

#endif
