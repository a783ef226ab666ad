/* The AVX-512 tile of the CPU GEMM (gemm_tile.h), tuned on Zen 5 and on a
 * Sapphire Rapids class Xeon.
 *
 * Row-major C is updated in MR x NR tiles: MR rows of packed A are
 * broadcast, NR columns of packed B are loaded as NR/16 vectors, so C rows
 * are touched with full-width (masked at the edge) vector loads and stores.
 * Packing transposes 16 x 16 blocks in registers where op(A) or op(B) runs
 * the wrong way. Compiled for AVX-512 whatever the build flags; used only on
 * the avx512 path. */
#include <immintrin.h>
#include <stdbool.h>
#include <stddef.h>

#include "kernels/cpu/gemm_tile.h"

TILE_TARGET("avx512f,avx512vl,avx512dq,avx512bw,fma")

#include "kernels/cpu/avx512_tile.h"

/* 6 x 64 tiles: 24 accumulators, 4 B loads and 6 broadcasts per 24 FMAs,
 * which measured best of 6x64, 8x48, 12x32 and 14x32 on Zen 5 (~85-90% of
 * the 2-pipe FMA peak on one core).
 * Block sizes, for a 48 KB L1d and 1 MB L2 (Zen 5); a Sapphire Rapids core
 * (48 KB, 2 MB) measured the same or better with them than with larger ones:
 *  - KC = 768: K = 768, the model width, is one K block, so C is written
 *    once rather than read back for a second block (2-4% on those products
 *    and on large squares); the A micro-panel, 18 KB, stays in L1;
 *  - NC = 256: the packed B block, KC * NC * 4 = 768 KB, leaves room in a
 *    1 MB L2 for the micro-panels and C lines that pass through (NC = 512
 *    or 768 with KC = 512 measured 1-10% slower even with a 2 MB L2);
 *  - MC = 1536: B is packed again only every 1536 rows; the packed A block
 *    (4.5 MB) is read from L3, one 18 KB micro-panel per 4 B micro-panels.
 * C_AHEAD: k steps before the end of a call at which its C tile is fetched
 * from L2 into L1 (about 400 cycles at two FMAs a cycle). */
enum { MR = 6, NV = 4, NR = 16 * NV, KC = 768, NC = 256, MC = 1536, C_AHEAD = 32 };
_Static_assert(MR == 6 && NV == 4, "combine_6x64 writes 6 x 64 tiles");

/* The mask of the first n of 16 lanes (n clamped to 0..16). */
/* Inlined by force: GCC takes a function of prefetches alone for one without
 * effects and drops the calls. */
static inline __attribute__((always_inline)) void prefetch_c(const float *c, int ldc, int m, bool to_l1) {
#pragma GCC unroll 8
    for (int r = 0; r < MR; r++) {
        if (r >= m) break;
        /* A row of the tile is 256 bytes: four lines, five when it is not
         * aligned, which its last float covers. */
        const char *row = (const char *)(c + (size_t)r * ldc);
#pragma GCC unroll 8
        for (int l = 0; l <= 256; l += 64) {
            const char *p = l < 256 ? row + l : row + 4 * (NR - 1);
            if (to_l1) _mm_prefetch(p, _MM_HINT_T0);
            else _mm_prefetch(p, _MM_HINT_T1);
        }
    }
}

/* acc[0:rows] += n steps of the micro-panels at a and b. Unrolled by 4:
 * fewer loop instructions between the FMAs. */
static inline __attribute__((always_inline)) void steps(int rows, int n, const float *restrict a,
                                                         const float *restrict b, __m512 acc[MR][NV]) {
#pragma GCC unroll 4
    for (int k = 0; k < n; k++) {
        __m512 bv[NV];
#pragma GCC unroll 8
        for (int v = 0; v < NV; v++) bv[v] = _mm512_load_ps(b + 16 * v);
#pragma GCC unroll 8
        for (int r = 0; r < rows; r++) {
            __m512 ar = _mm512_set1_ps(a[r]);
#pragma GCC unroll 8
            for (int v = 0; v < NV; v++) acc[r][v] = _mm512_fmadd_ps(ar, bv[v], acc[r][v]);
        }
        a += MR;
        b += NR;
    }
}

/* The k loop of a tile whose first rows rows are computed. A call streams
 * its B micro-panel (kc * 256 bytes, 192 KB at KC = 768) through L1, which
 * would evict a C tile fetched into L1 at the start: C is fetched into L2
 * at the start and into L1 only C_AHEAD steps before the end. */
static inline __attribute__((always_inline)) void tile_loop(int rows, int kc, const float *restrict a,
                                                             const float *restrict b, const float *c, int ldc, int m,
                                                             __m512 acc[MR][NV]) {
    const int k1 = kc > C_AHEAD ? kc - C_AHEAD : 0;
    if (k1 > 0) prefetch_c(c, ldc, m, false);
    steps(rows, k1, a, b, acc);
    prefetch_c(c, ldc, m, true);
    steps(rows, kc - k1, a + (size_t)k1 * MR, b + (size_t)k1 * NR, acc);
}

/* C[0:m, 0:n] (op)= A_panel (MR x kc, k-major) @ B_panel (kc x NR, k-major). */
static void micro_kernel(int kc, const void *pa, const void *pb, float *restrict c, int ldc, int m, int n,
                         int mode, float beta) {
    const float *restrict a = pa, *restrict b = pb;
    __m512 acc[MR][NV];
#pragma GCC unroll 32
    for (int r = 0; r < MR; r++)
#pragma GCC unroll 8
        for (int v = 0; v < NV; v++) acc[r][v] = _mm512_setzero_ps();

    /* An edge tile of a few rows skips the multiply-adds of the zero rows
     * (M % 6 is 4 for M = 64, 256 or 1024); the sums of the rows it does
     * compute are the same chains as in a full tile. */
    if (m <= 2) tile_loop(2, kc, a, b, c, ldc, m, acc);
    else if (m <= 4) tile_loop(4, kc, a, b, c, ldc, m, acc);
    else tile_loop(MR, kc, a, b, c, ldc, m, acc);

    combine_6x64(acc, c, ldc, m, n, mode, beta);
}

/* Packing. */

/* Stores the first six lanes of x, one k of an A micro-panel. The k of a
 * micro-panel are stored in increasing order, eight lanes wide, so each
 * store's two extra lanes are overwritten by the next; its last k (last)
 * stores exactly six, so as not to write past it. */
static inline void store_mr(float *d, __m256 x, bool last) {
    if (last) _mm256_mask_storeu_ps(d, 0x3F, x);
    else _mm256_storeu_ps(d, x);
}

/* kn k of one A micro-panel at d, from rows of the block contiguous at s,
 * s + lda, ...: read eight wide (rows: fewer where the block has fewer than
 * eight rows left); ends when the micro-panel ends with the last of them. */
static inline __attribute__((always_inline)) void deal_a(float *d, const float *s, size_t lda, int kn, __mmask8 rows,
                                                          __m256 alpha, bool ends) {
#pragma GCC unroll 8
    for (int i = 0; i < kn; i++) {
        const float *si = s + i * lda;
        __m256 x = rows == 0xFF ? _mm256_loadu_ps(si) : _mm256_maskz_loadu_ps(rows, si);
        store_mr(d + (size_t)i * MR, _mm256_mul_ps(alpha, x), ends && i == kn - 1);
    }
}

static void pack_a(bool ta, const float *A, int lda, int mc, int kc, float alpha, void *out) {
    float *dst = out;
    if (ta) {
        /* op(A)(i,k) = A[k*lda + i]: each k holds the block's rows
         * contiguously. Eight k at a time across the whole block: the source
         * is read as eight streams end to end and each micro-panel gets
         * whole lines. A micro-panel at a time would fetch every source line
         * again for the next one (with lda = 50304, each k is also a TLB
         * miss). */
        const __m256 va = _mm256_set1_ps(alpha);
        const int wide = mc < 8 ? 0 : (mc - 8) / MR * MR + MR; /* micro-panels with 8 rows to read */
        for (int k = 0; k < kc; k += 8) {
            const int kn = kc - k < 8 ? kc - k : 8;
            const float *s = A + (size_t)k * lda;
            float *d = dst + (size_t)k * MR;
            int ir = 0;
            if (k + 8 < kc)
                for (; ir < wide; ir += MR, d += (size_t)kc * MR) deal_a(d, s + ir, lda, 8, 0xFF, va, false);
            else
                for (; ir < wide; ir += MR, d += (size_t)kc * MR) deal_a(d, s + ir, lda, kn, 0xFF, va, true);
            for (; ir < mc; ir += MR, d += (size_t)kc * MR)
                deal_a(d, s + ir, lda, kn, (__mmask8)lanes(mc - ir), va, k + kn == kc);
        }
        return;
    }
    /* Rows are contiguous in k: transpose 8 x 16 blocks, the block's rows
     * past the micro-panel's (and past mc) zero. Each row is a short stream
     * (kc floats) that the hardware prefetcher picks up late, and not at
     * all across a page when rows are far apart: fetch the next
     * micro-panel's rows a line at a time. */
    const __m512 va = _mm512_set1_ps(alpha);
    for (int ir = 0; ir < mc; ir += MR) {
        const int m = mc - ir < MR ? mc - ir : MR;
        float *d = dst + (size_t)ir * kc;
        const float *s = A + (size_t)ir * lda;
        const bool next = ir + 2 * MR <= mc;
        for (int k = 0; k < kc; k += 16) {
            const int kn = kc - k < 16 ? kc - k : 16;
            const __mmask16 km = lanes(kn);
            __m512 r[8];
            __m256 col[16];
            if (next)
#pragma GCC unroll 8
                for (int i = MR; i < 2 * MR; i++) _mm_prefetch((const char *)(s + (size_t)i * lda + k), _MM_HINT_T0);
#pragma GCC unroll 8
            for (int i = 0; i < 8; i++)
                r[i] = i >= m ? _mm512_setzero_ps() : _mm512_mul_ps(va, _mm512_maskz_loadu_ps(km, s + (size_t)i * lda + k));
            transpose8x16(r, col);
#pragma GCC unroll 16
            for (int i = 0; i < 16; i++)
                if (i < kn) store_mr(d + (size_t)(k + i) * MR, col[i], k + i == kc - 1);
        }
    }
}

/* kn k of one B micro-panel at d, from rows of op(B) contiguous in j at s,
 * s + ldb, ...; masked for the block's last micro-panel when it is partial. */
static inline __attribute__((always_inline)) void copy_b(float *d, const float *s, size_t ldb, int kn, bool masked,
                                                          const __mmask16 mask[NV]) {
#pragma GCC unroll 8
    for (int i = 0; i < kn; i++)
#pragma GCC unroll 8
        for (int v = 0; v < NV; v++) {
            const float *si = s + i * ldb + 16 * v;
            _mm512_store_ps(d + i * NR + 16 * v, masked ? _mm512_maskz_loadu_ps(mask[v], si) : _mm512_loadu_ps(si));
        }
}

static void pack_b(bool tb, const float *B, int ldb, int kc, int nc, void *out) {
    float *dst = out;
    if (tb) {
        /* op(B)(k,j) = B[j*ldb + k]: transpose 16 columns at a time, each a
         * row of B read end to end; the next 16 rows are fetched a line at a
         * time meanwhile, as in pack_a. */
        for (int j = 0; j < nc; j += 16) {
            const int cols = nc - j < 16 ? nc - j : 16;
            const float *s = B + (size_t)j * ldb;
            float *d = dst + (size_t)(j / NR * NR) * kc + j % NR;
            const bool next = j + 32 <= nc;
            for (int k = 0; k < kc; k += 16) {
                const int kn = kc - k < 16 ? kc - k : 16;
                const __mmask16 km = lanes(kn);
                __m512 r[16];
                if (next)
#pragma GCC unroll 16
                    for (int i = 16; i < 32; i++)
                        _mm_prefetch((const char *)(s + (size_t)i * ldb + k), _MM_HINT_T0);
                if (cols == 16 && kn == 16)
#pragma GCC unroll 16
                    for (int i = 0; i < 16; i++) r[i] = _mm512_loadu_ps(s + (size_t)i * ldb + k);
                else
#pragma GCC unroll 16
                    for (int i = 0; i < 16; i++)
                        r[i] = i < cols ? _mm512_maskz_loadu_ps(km, s + (size_t)i * ldb + k) : _mm512_setzero_ps();
                transpose16(r);
#pragma GCC unroll 16
                for (int i = 0; i < 16; i++)
                    if (i < kn) _mm512_store_ps(d + (size_t)(k + i) * NR, r[i]);
            }
        }
        /* Columns past the last group of 16, up to the micro-panel's width, are zero. */
        float *z = dst + (size_t)(nc / NR * NR) * kc;
        for (int j = (nc + 15) / 16 * 16 % NR; j > 0 && j < NR; j += 16)
            for (int k = 0; k < kc; k++) _mm512_store_ps(z + (size_t)k * NR + j, _mm512_setzero_ps());
        return;
    }
    /* Rows of op(B) are contiguous in j. Eight k at a time across the whole
     * block: the source is read as eight streams end to end and each
     * micro-panel gets whole lines. */
    const int full = nc / NR * NR;
    __mmask16 mask[NV];
#pragma GCC unroll 8
    for (int v = 0; v < NV; v++) mask[v] = lanes(nc - full - 16 * v);
    for (int k = 0; k < kc; k += 8) {
        const int kn = kc - k < 8 ? kc - k : 8;
        const float *s = B + (size_t)k * ldb;
        float *d = dst + (size_t)k * NR;
        int jr = 0;
        if (kn == 8)
            for (; jr < full; jr += NR, d += (size_t)kc * NR) copy_b(d, s + jr, ldb, 8, false, mask);
        for (; jr < full; jr += NR, d += (size_t)kc * NR) copy_b(d, s + jr, ldb, kn, false, mask);
        if (full < nc) copy_b(d, s + full, ldb, kn, true, mask);
    }
}

TILE_TARGET_END

const cpu_gemm_tile cpu_tile_avx512 = {
    .name = "avx512",
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
