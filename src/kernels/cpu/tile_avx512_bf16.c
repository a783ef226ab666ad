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
#include <string.h>

#include "kernels/cpu/gemm_tile.h"

TILE_TARGET("avx512f,avx512vl,avx512dq,avx512bw,avx512bf16,fma")

#include "kernels/cpu/avx512_tile.h"

/* 6 x 64 tiles as the fp32 kernel's (combined with C by the same code); a K
 * block twice as deep fits the same L1 and L2 bytes. */
enum { MR = 6, NV = 4, NR = 16 * NV, KC = 1024, NC = 384, MC = 1536 };
_Static_assert(MR == 6 && NV == 4, "combine_6x64 writes 6 x 64 tiles");

/* fp32 -> bf16, rounding to nearest even (NaNs stay NaN), as PyTorch rounds. */
static inline uint16_t to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    uint32_t rounded = (u + 0x7FFFu + ((u >> 16) & 1u)) >> 16;
    return (u & 0x7FFFFFFFu) > 0x7F800000u ? (uint16_t)0x7FC0 : (uint16_t)rounded;
}

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

/* Element (k, r) of a micro-panel R wide, in 16-bit units. */
#define PAIRED(k, r, R) ((size_t)((k) >> 1) * 2 * (R) + 2 * (size_t)(r) + ((k)&1))

static void pack_a(bool ta, const float *A, int lda, int mc, int kc, float alpha, void *out) {
    const int kp = (kc + 1) & ~1;
    for (int ir = 0; ir < mc; ir += MR) {
        const int m = mc - ir < MR ? mc - ir : MR;
        uint16_t *d = (uint16_t *)out + (size_t)ir * kp;
        if (m < MR || kp != kc) memset(d, 0, sizeof(uint16_t) * (size_t)kp * MR);
        if (ta) {
            for (int k = 0; k < kc; k++) {
                const float *s = A + (size_t)k * lda + ir;
                for (int r = 0; r < m; r++) d[PAIRED(k, r, MR)] = to_bf16(alpha * s[r]);
            }
        } else {
            for (int r = 0; r < m; r++) {
                const float *s = A + (size_t)(ir + r) * lda;
                for (int k = 0; k < kc; k++) d[PAIRED(k, r, MR)] = to_bf16(alpha * s[k]);
            }
        }
    }
}

static void pack_b(bool tb, const float *B, int ldb, int kc, int nc, void *out) {
    const int kp = (kc + 1) & ~1;
    for (int jr = 0; jr < nc; jr += NR) {
        const int n = nc - jr < NR ? nc - jr : NR;
        uint16_t *d = (uint16_t *)out + (size_t)jr * kp;
        if (n < NR || kp != kc) memset(d, 0, sizeof(uint16_t) * (size_t)kp * NR);
        if (tb) {
            for (int j = 0; j < n; j++) {
                const float *s = B + (size_t)(jr + j) * ldb;
                for (int k = 0; k < kc; k++) d[PAIRED(k, j, NR)] = to_bf16(s[k]);
            }
        } else {
            for (int k = 0; k < kc; k++) {
                const float *s = B + (size_t)k * ldb + jr;
                for (int j = 0; j < n; j++) d[PAIRED(k, j, NR)] = to_bf16(s[j]);
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
