/* The bf16 tile of the CPU GEMM (gemm_tile.h), for CPUs with AVX512_BF16:
 * op(A) and op(B) are rounded to bf16 while they are packed, and
 * vdpbf16ps multiplies pairs of them into fp32 accumulators. Each product of
 * two bf16 values is exact in fp32, so the only roundings are the inputs'
 * and the fp32 accumulation's; as the instruction defines, bf16 denormals
 * count as zero and results flush to zero. C stays fp32.
 *
 * Packed panels hold k in pairs: the 32-bit word for pair q of row (or
 * column) r holds k = 2q in its low half and 2q + 1 in its high half, so one
 * 32-bit broadcast of A meets one 16-lane vector of B. */
#include <immintrin.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels/cpu/gemm_tile.h"

TILE_TARGET("avx512f,avx512vl,avx512dq,avx512bw,avx512bf16,fma")

#include "kernels/cpu/avx512_tile.h"
#include "kernels/cpu/bf16_pack.h"

/* 6 x 64 tiles as the fp32 kernel's (combined with C by the same code); a K
 * block twice as deep fits the same L1 and L2 bytes. */
enum { MR = 6, NV = 4, NR = 16 * NV, KC = 1024, NC = 384, MC = 1536 };
_Static_assert(MR == 6 && NV == 4, "combine_6x64 writes 6 x 64 tiles");

static void micro_kernel(int kp, const void *pa, const void *pb, float *restrict c, int ldc, int m, int n,
                         int mode, float beta) {
    const uint32_t *restrict a = pa;
    const __m512i *restrict b = pb;
    __m512 acc[MR][NV];
#pragma GCC unroll 32
    for (int r = 0; r < MR; r++)
#pragma GCC unroll 8
        for (int v = 0; v < NV; v++) acc[r][v] = _mm512_setzero_ps();
#pragma GCC unroll 32
    for (int r = 0; r < MR; r++)
        if (r < m)
#pragma GCC unroll 8
            for (int v = 0; v < NV; v++) _mm_prefetch((const char *)(c + (size_t)r * ldc + 16 * v), _MM_HINT_T0);
    for (int q = 0; q < kp / 2; q++) {
        __m512bh bv[NV];
#pragma GCC unroll 8
        for (int v = 0; v < NV; v++) bv[v] = (__m512bh)_mm512_load_si512(b + v);
#pragma GCC unroll 32
        for (int r = 0; r < MR; r++) {
            __m512bh ar = (__m512bh)_mm512_set1_epi32((int)a[r]);
#pragma GCC unroll 8
            for (int v = 0; v < NV; v++) acc[r][v] = _mm512_dpbf16_ps(acc[r][v], ar, bv[v]);
        }
        a += MR;
        b += NV;
    }
    combine_6x64(acc, c, ldc, m, n, mode, beta);
}

/* Packing: vectors of 16 (or 6) words, each a k pair of one row or column,
 * rounded by bf16_pack.h as the AMX tile rounds; padding rows, columns and
 * the high half of an odd K's last pair are written as zeros. */

static inline int min_int(int x, int y) { return x < y ? x : y; }

static void pack_a(bool ta, const float *A, int lda, int mc, int kc, float alpha, void *out) {
    const int pairs = (kc + 1) / 2;
    const __m512 va = _mm512_set1_ps(alpha), zero = _mm512_setzero_ps();
    for (int ir = 0; ir < mc; ir += MR) {
        const int m = min_int(mc - ir, MR);
        uint32_t *d = (uint32_t *)out + (size_t)ir * pairs;
        if (ta) {
            /* op(A)(i,k) = A[k*lda + i]: rows k and k+1 of A hold the
             * micro-panel's m rows side by side: one pair of each. */
            const __mmask16 rows = lanes(m);
            for (int q = 0; q < pairs; q++) {
                const float *s = A + (size_t)(2 * q) * lda + ir;
                __m512 x0 = _mm512_maskz_mul_ps(rows, va, _mm512_maskz_loadu_ps(rows, s));
                __m512 x1 = 2 * q + 1 < kc ? _mm512_maskz_mul_ps(rows, va, _mm512_maskz_loadu_ps(rows, s + lda)) : zero;
                _mm512_mask_storeu_epi32(d + (size_t)q * MR, 0x3F, pair_rows(x0, x1));
            }
            continue;
        }
        /* Rows of op(A) run along k: 32 k of a row are its 16 pairs, and an
         * 8 x 16 transpose of the words gives each pair's six rows. */
        for (int q0 = 0; q0 < pairs; q0 += 16) {
            const int k = 2 * q0, n = kc - k, nq = min_int(pairs - q0, 16);
            __m512 w[8];
            __m256 col[16];
#pragma GCC unroll 8
            for (int r = 0; r < 8; r++)
                w[r] = r < m ? _mm512_castsi512_ps(run_pairs_scaled(A + (size_t)(ir + r) * lda + k, n, va)) : zero;
            transpose8x16(w, col);
            for (int i = 0; i < nq; i++)
                _mm256_mask_storeu_epi32(d + (size_t)(q0 + i) * MR, 0x3F, _mm256_castps_si256(col[i]));
        }
    }
}

static void pack_b(bool tb, const float *B, int ldb, int kc, int nc, void *out) {
    const int pairs = (kc + 1) / 2;
    const __m512 zero = _mm512_setzero_ps();
    for (int jr = 0; jr < nc; jr += NR) {
        const int n = min_int(nc - jr, NR);
        uint32_t *d = (uint32_t *)out + (size_t)jr * pairs;
        if (!tb) {
            /* op(B)(k,j) = B[k*ldb + j]: rows k and k+1 make one pair of 16
             * columns per vector. */
            for (int q = 0; q < pairs; q++) {
                const float *s0 = B + (size_t)(2 * q) * ldb + jr, *s1 = 2 * q + 1 < kc ? s0 + ldb : NULL;
#pragma GCC unroll 4
                for (int v = 0; v < NV; v++) {
                    const int cols = n - 16 * v;
                    __m512 x0 = cols > 0 ? load16(s0 + 16 * v, cols) : zero;
                    __m512 x1 = s1 && cols > 0 ? load16(s1 + 16 * v, cols) : zero;
                    _mm512_storeu_si512(d + (size_t)q * NR + 16 * v, pair_rows(x0, x1));
                }
            }
            continue;
        }
        /* op(B)(k,j) = B[j*ldb + k]: a column's 32 k are its 16 pairs; a
         * 16 x 16 transpose of 16 columns' words gives each pair's row. */
        for (int h = 0; h < NR; h += 16) {
            const int cols = n - h;
            for (int q0 = 0; q0 < pairs; q0 += 16) {
                const int k = 2 * q0, nk = kc - k, nq = min_int(pairs - q0, 16);
                __m512 w[16];
#pragma GCC unroll 16
                for (int j = 0; j < 16; j++)
                    w[j] = j < cols ? _mm512_castsi512_ps(run_pairs(B + (size_t)(jr + h + j) * ldb + k, nk)) : zero;
                transpose16(w);
                for (int i = 0; i < nq; i++)
                    _mm512_storeu_si512(d + (size_t)(q0 + i) * NR + h, _mm512_castps_si512(w[i]));
            }
        }
    }
}

TILE_TARGET_END

const cpu_gemm_tile cpu_tile_avx512_bf16 = {
    .name = "avx512-bf16",
    .mr = MR,
    .nr = NR,
    .kc = KC,
    .nc = NC,
    .mc = MC,
    .kstep = 2,
    .elem_bytes = sizeof(uint16_t),
    .pack_a = pack_a,
    .pack_b = pack_b,
    .kernel = micro_kernel,
};
