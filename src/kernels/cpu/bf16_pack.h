/* What the bf16 tiles of the CPU GEMM (tile_avx512_bf16.c, tile_amx_bf16.c)
 * share when they pack: fp32 rounded to bf16 (nearest even, NaN to the quiet
 * NaN 0x7FC0, fp32 denormals rounded as numbers, not flushed: PyTorch's
 * rounding) sixteen or thirty-two at a time, and k pairs interleaved into the
 * 32-bit words that vdpbf16ps and TDPBF16PS multiply. Both tiles pack with
 * this one rounding, so their packed bits agree. Included inside a tile's
 * TILE_TARGET with AVX512_BF16 and AVX512BW enabled. */
#ifndef ANVIL_KERNELS_CPU_BF16_PACK_H
#define ANVIL_KERNELS_CPU_BF16_PACK_H

#include <immintrin.h>

#include "kernels/cpu/avx512_tile.h"

/* Word i of the result takes 16-bit element i, then 16 + i: two rows of 16
 * bf16 become 16 (row 0, row 1) pairs. */
static inline __m512i interleave_index(void) {
    return _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8, 23, 7, 22, 6, 21, 5,
                            20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
}

/* The rounding in integer arithmetic on 32-bit lanes (add 0x7FFF and the
 * kept half's lowest bit; NaN becomes 0x7FC0): the bf16 is the high half of
 * each result. */
static inline __m512i round_exact(__m512 x) {
    const __m512i u = _mm512_castps_si512(x);
    const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
    const __m512i r = _mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7FFF)), lsb);
    const __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, _mm512_set1_epi32(0x7FFFFFFF)),
                                                  _mm512_set1_epi32(0x7F800000));
    return _mm512_mask_mov_epi32(r, nan, _mm512_set1_epi32(0x7FC00000));
}

/* lo and hi as 32 bf16, lo's first. VCVTNE2PS2BF16 rounds every other
 * input as round_exact does (checked on all 2^32 floats) but flushes fp32
 * denormals to zero and keeps NaN payloads: those inputs take round_exact. */
static inline __m512i to_bf16x32(__m512 lo, __m512 hi) {
    enum { QNAN = 0x01, DENORMAL = 0x20, SNAN = 0x80 };
    const __mmask16 odd =
        _mm512_fpclass_ps_mask(lo, QNAN | DENORMAL | SNAN) | _mm512_fpclass_ps_mask(hi, QNAN | DENORMAL | SNAN);
    if (__builtin_expect(odd == 0, 1)) return (__m512i)_mm512_cvtne2ps_pbh(hi, lo);
    const __m512i high_halves =
        _mm512_set_epi16(63, 61, 59, 57, 55, 53, 51, 49, 47, 45, 43, 41, 39, 37, 35, 33, 31, 29, 27, 25, 23, 21,
                         19, 17, 15, 13, 11, 9, 7, 5, 3, 1);
    return _mm512_permutex2var_epi16(round_exact(lo), high_halves, round_exact(hi));
}

/* 16 k-pairs-by-16 words: word i = (bf16 of k0[i]) | (bf16 of k1[i]) << 16. */
static inline __m512i pair_rows(__m512 k0, __m512 k1) {
    return _mm512_permutexvar_epi16(interleave_index(), to_bf16x32(k0, k1));
}

/* The first n (clamped to 0..16) of 16 floats at s; zeros past n. */
static inline __m512 load16(const float *s, int n) { return _mm512_maskz_loadu_ps(lanes(n), s); }

/* The same times alpha, in fp32 as the vdpbf16ps tile scales; the padding
 * stays zero whatever alpha is. */
static inline __m512 load16_scaled(const float *s, int n, __m512 alpha) {
    const __mmask16 k = lanes(n);
    return _mm512_maskz_mul_ps(k, alpha, _mm512_maskz_loadu_ps(k, s));
}

/* A run of k along a row or column, the first n (clamped to 0..32) floats at s, as 16 words of k
 * pairs (word i: s[2i] in the low half, s[2i + 1] in the high half); zeros past n. */
static inline __m512i run_pairs(const float *s, int n) {
    return to_bf16x32(load16(s, n), n > 16 ? load16(s + 16, n - 16) : _mm512_setzero_ps());
}

/* The same, each float times alpha in fp32 before it is rounded. */
static inline __m512i run_pairs_scaled(const float *s, int n, __m512 alpha) {
    return to_bf16x32(load16_scaled(s, n, alpha), n > 16 ? load16_scaled(s + 16, n - 16, alpha) : _mm512_setzero_ps());
}

#endif
