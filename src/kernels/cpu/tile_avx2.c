/* The AVX2 + FMA tile of the CPU GEMM (gemm_tile.h), for CPUs without
 * AVX-512. A 6 x 16 tile: 12 accumulator registers, two loads of B and six
 * broadcasts of A per 12 FMAs, which fills the 16 ymm registers. Compiled
 * for AVX2 whatever the build flags; used only on the avx2 path. */
#include <immintrin.h>
#include <stdbool.h>
#include <stddef.h>

#include "kernels/cpu/gemm_tile.h"

TILE_TARGET("avx2,fma")

/* The block sizes fit the AVX2-only machines this path is for, Zen 1 (32 KB
 * L1d, 512 KB L2 per core, 8 MB L3 per 4 cores), rather than the larger
 * caches of the CPU they were measured on, where KC = 384 ran under 1%
 * faster:
 *  - KC = 256: one kernel call streams a 16 KB B micro-panel past a 6 KB A
 *    micro-panel, so that the A micro-panel is still in a 32 KB L1 at the
 *    next call (at 384, 24 + 9 KB would not be);
 *  - NC = 256: the packed B block, KC * NC * 4 = 256 KB, half of the L2,
 *    leaves room for the A micro-panels and C lines that pass through;
 *  - MC = 1536: the packed A block, MC * KC * 4 = 1.5 MB, stays within one
 *    core's share of the L3, and B is packed again only every 1536 rows.
 * C_AHEAD: k steps before the end of a call at which its C tile is fetched
 * from L2 into L1 (192 cycles at two FMAs a cycle, twice that on Zen 1). */
enum { MR = 6, NV = 2, NR = 8 * NV, KC = 256, NC = 256, MC = 1536, C_AHEAD = 32 };

/* The mask of the first n of 8 lanes (n clamped to 0..8). */
static inline __m256i lanes(int n) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

/* Inlined by force: GCC takes a function of prefetches alone for one without
 * effects and drops the calls. */
static inline __attribute__((always_inline)) void prefetch_c(const float *c, int ldc, int m, bool to_l1) {
#pragma GCC unroll 8
    for (int r = 0; r < MR; r++) {
        if (r >= m) break;
        /* A row of the tile is 64 bytes: its first and last float cover both
         * lines when it is not aligned. */
        const char *first = (const char *)(c + (size_t)r * ldc), *last = (const char *)(c + (size_t)r * ldc + NR - 1);
        if (to_l1) {
            _mm_prefetch(first, _MM_HINT_T0);
            _mm_prefetch(last, _MM_HINT_T0);
        } else {
            _mm_prefetch(first, _MM_HINT_T1);
            _mm_prefetch(last, _MM_HINT_T1);
        }
    }
}

/* acc[0:rows] += n steps of the micro-panels at *pa and *pb, advancing both.
 * Unrolled by 4, which alone made whole products 6-8% faster here: the loop's
 * own instructions leave the front end less room for the FMAs, and Zen 1,
 * which splits every ymm instruction in two, has less to spare. */
static inline __attribute__((always_inline)) void steps(int rows, int n, const float *restrict *pa,
                                                         const float *restrict *pb, __m256 acc[MR][NV]) {
    const float *restrict a = *pa, *restrict b = *pb;
#pragma GCC unroll 4
    for (int k = 0; k < n; k++) {
        __m256 bv[NV];
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++) bv[v] = _mm256_load_ps(b + 8 * v);
#pragma GCC unroll 8
        for (int r = 0; r < rows; r++) {
            __m256 ar = _mm256_broadcast_ss(a + r);
#pragma GCC unroll 4
            for (int v = 0; v < NV; v++) acc[r][v] = _mm256_fmadd_ps(ar, bv[v], acc[r][v]);
        }
        a += MR;
        b += NR;
    }
    *pa = a;
    *pb = b;
}

/* The k loop of a tile whose first rows rows are computed. C is fetched into
 * L2 at the start and into L1 only C_AHEAD steps before the end: fetched into
 * L1 at the start, it can be evicted by the 22 KB of micro-panels that pass
 * through a 32 KB L1 meanwhile, when ldc puts the tile's rows in one cache
 * set (ldc a multiple of 1024). With a 48 KB L1 both ways measure the same. */
static inline __attribute__((always_inline)) void tile_loop(int rows, int kc, const float *restrict a,
                                                             const float *restrict b, const float *c, int ldc, int m,
                                                             __m256 acc[MR][NV]) {
    prefetch_c(c, ldc, m, false);
    const int k1 = kc > C_AHEAD ? kc - C_AHEAD : 0;
    steps(rows, k1, &a, &b, acc);
    prefetch_c(c, ldc, m, true);
    steps(rows, kc - k1, &a, &b, acc);
}

static void micro_kernel(int kc, const void *pa, const void *pb, float *restrict c, int ldc, int m, int n,
                         int mode, float beta) {
    const float *restrict a = pa, *restrict b = pb;
    __m256 acc[MR][NV];
#pragma GCC unroll 8
    for (int r = 0; r < MR; r++)
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++) acc[r][v] = _mm256_setzero_ps();

    /* An edge tile of a few rows skips the multiply-adds of the zero rows
     * (M % 6 is 4 for M = 64 or 1024); the sums of the rows it does compute
     * are the same chains as in a full tile. */
    if (m <= 2) tile_loop(2, kc, a, b, c, ldc, m, acc);
    else if (m <= 4) tile_loop(4, kc, a, b, c, ldc, m, acc);
    else tile_loop(MR, kc, a, b, c, ldc, m, acc);

    const __m256 vbeta = _mm256_set1_ps(beta);
    if (n == NR) {
#pragma GCC unroll 8
        for (int r = 0; r < MR; r++) {
            if (r >= m) break;
            float *cr = c + (size_t)r * ldc;
#pragma GCC unroll 4
            for (int v = 0; v < NV; v++) {
                __m256 x = acc[r][v];
                if (mode == GEMM_ADD) x = _mm256_add_ps(x, _mm256_loadu_ps(cr + 8 * v));
                else if (mode == GEMM_SCALE) x = _mm256_fmadd_ps(vbeta, _mm256_loadu_ps(cr + 8 * v), x);
                _mm256_storeu_ps(cr + 8 * v, x);
            }
        }
        return;
    }
    __m256i mask[NV];
#pragma GCC unroll 4
    for (int v = 0; v < NV; v++) mask[v] = lanes(n - 8 * v);
    /* Unrolled like the loops above, so that acc stays in registers. */
#pragma GCC unroll 8
    for (int r = 0; r < MR; r++) {
        if (r >= m) break;
        float *cr = c + (size_t)r * ldc;
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++) {
            __m256 x = acc[r][v];
            if (mode == GEMM_ADD) x = _mm256_add_ps(x, _mm256_maskload_ps(cr + 8 * v, mask[v]));
            else if (mode == GEMM_SCALE) x = _mm256_fmadd_ps(vbeta, _mm256_maskload_ps(cr + 8 * v, mask[v]), x);
            _mm256_maskstore_ps(cr + 8 * v, mask[v], x);
        }
    }
}

/* Packing. The copies are vectorized by hand: as plain loops, the transposed
 * ones were scalar, strided stores, and the others a panel at a time, which
 * fetches each source line several times (see pack_a and pack_b). */

/* r[0..7] = the transpose of the 8 x 8 block in r[0..7]. */
static inline void transpose8(__m256 r[8]) {
    __m256 t[8], u[8];
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++) {
        t[2 * i] = _mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
#pragma GCC unroll 2
    for (int i = 0; i < 2; i++) {
        u[4 * i] = _mm256_shuffle_ps(t[4 * i], t[4 * i + 2], _MM_SHUFFLE(1, 0, 1, 0));
        u[4 * i + 1] = _mm256_shuffle_ps(t[4 * i], t[4 * i + 2], _MM_SHUFFLE(3, 2, 3, 2));
        u[4 * i + 2] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], _MM_SHUFFLE(1, 0, 1, 0));
        u[4 * i + 3] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], _MM_SHUFFLE(3, 2, 3, 2));
    }
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++) {
        r[i] = _mm256_permute2f128_ps(u[i], u[i + 4], 0x20);
        r[i + 4] = _mm256_permute2f128_ps(u[i], u[i + 4], 0x31);
    }
}

/* r[i] = src[i*ld + 0:kn] for i < rows, zero past kn and for i >= rows.
 * Inlined, so that the common case, rows = kn = 8 as constants, has no tests. */
static inline __attribute__((always_inline)) void load_block(const float *src, size_t ld, int rows, int kn,
                                                              __m256 r[8]) {
    const __m256i mask = lanes(kn);
#pragma GCC unroll 8
    for (int i = 0; i < 8; i++)
        r[i] = i >= rows ? _mm256_setzero_ps()
               : kn >= 8 ? _mm256_loadu_ps(src + i * ld)
                         : _mm256_maskload_ps(src + i * ld, mask);
}

/* Stores the first six lanes of x, one k of an A micro-panel. The k are
 * stored in increasing order, eight lanes wide, so each store's two extra
 * lanes are overwritten by the next; the last k of a micro-panel (last)
 * stores exactly six, so as not to write past it. */
static inline void store_mr(float *d, __m256 x, bool last) {
    if (last) {
        _mm_storeu_ps(d, _mm256_castps256_ps128(x));
        _mm_storel_pi((__m64 *)(d + 4), _mm256_extractf128_ps(x, 1));
    } else {
        _mm256_storeu_ps(d, x);
    }
}

/* kn k of one A micro-panel at d, from rows of the block contiguous at s,
 * s + lda, ...: read eight wide, or masked where the block has fewer than
 * eight rows left; ends when the micro-panel ends with the last of them. */
static inline __attribute__((always_inline)) void deal_a(float *d, const float *s, size_t lda, int kn, bool masked,
                                                          __m256i mask, __m256 alpha, bool ends) {
#pragma GCC unroll 8
    for (int i = 0; i < kn; i++) {
        const float *si = s + i * lda;
        __m256 x = masked ? _mm256_maskload_ps(si, mask) : _mm256_loadu_ps(si);
        store_mr(d + (size_t)i * MR, _mm256_mul_ps(alpha, x), ends && i == kn - 1);
    }
}

/* kn k of an A micro-panel of m rows, each contiguous in k from s, s + lda, ... */
static inline __attribute__((always_inline)) void transpose_a(float *d, const float *s, size_t lda, int m, int kn,
                                                               __m256 alpha, bool ends) {
    __m256 r[8];
    load_block(s, lda, m, kn, r);
    transpose8(r);
#pragma GCC unroll 8
    for (int i = 0; i < kn; i++) store_mr(d + (size_t)i * MR, _mm256_mul_ps(alpha, r[i]), ends && i == kn - 1);
}

static void pack_a(bool ta, const float *A, int lda, int mc, int kc, float alpha, void *dst) {
    const __m256 va = _mm256_set1_ps(alpha);
    float *out = dst;
    if (ta) {
        /* Each k holds the block's rows contiguously. Eight k at a time,
         * across the whole block: the source is read as eight streams and
         * each micro-panel gets whole lines. A micro-panel at a time would
         * fetch every source line again for the next one (with lda = 50304,
         * each k is also a TLB miss); one k at a time would write 24 bytes to
         * each of mc/MR lines kc*24 bytes apart, which share a few sets. */
        const int wide = mc < 8 ? 0 : (mc - 8) / MR * MR + MR; /* micro-panels with 8 rows to read */
        for (int k = 0; k < kc; k += 8) {
            const int kn = kc - k < 8 ? kc - k : 8;
            const float *s = A + (size_t)k * lda;
            float *d = out + (size_t)k * MR;
            int ir = 0;
            if (k + 8 < kc)
                for (; ir < wide; ir += MR, d += (size_t)kc * MR) deal_a(d, s + ir, lda, 8, false, lanes(8), va, false);
            else
                for (; ir < wide; ir += MR, d += (size_t)kc * MR) deal_a(d, s + ir, lda, kn, false, lanes(8), va, true);
            for (; ir < mc; ir += MR, d += (size_t)kc * MR)
                deal_a(d, s + ir, lda, kn, true, lanes(mc - ir < MR ? mc - ir : MR), va, k + kn == kc);
        }
        return;
    }
    /* Rows are contiguous in k: transpose 8 k at a time. Each row is a short
     * stream (kc floats) that the hardware prefetcher picks up late, and
     * not at all across a page when rows are far apart (lda = 50304 halved
     * the speed): fetch the next micro-panel's rows a line at a time. */
    for (int ir = 0; ir < mc; ir += MR) {
        const int m = mc - ir < MR ? mc - ir : MR;
        float *d = out + (size_t)ir * kc;
        const float *s = A + (size_t)ir * lda;
        const bool next = ir + 2 * MR <= mc;
        int k = 0;
        if (m == MR)
            for (; k + 8 < kc; k += 8) {
                if (next && k % 16 == 0)
#pragma GCC unroll 8
                    for (int i = MR; i < 2 * MR; i++)
                        _mm_prefetch((const char *)(s + (size_t)i * lda + k), _MM_HINT_T0);
                transpose_a(d + (size_t)k * MR, s + k, lda, MR, 8, va, false);
            }
        for (; k < kc; k += 8) {
            const int kn = kc - k < 8 ? kc - k : 8;
            transpose_a(d + (size_t)k * MR, s + k, lda, m, kn, va, k + kn == kc);
        }
    }
}

/* kn k of one B micro-panel at d, from rows contiguous in j at s, s + ldb,
 * ...; masked for the block's last micro-panel when it is partial. */
static inline __attribute__((always_inline)) void copy_b(float *d, const float *s, size_t ldb, int kn, bool masked,
                                                          const __m256i mask[NV]) {
#pragma GCC unroll 8
    for (int i = 0; i < kn; i++)
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++) {
            const float *si = s + i * ldb + 8 * v;
            _mm256_store_ps(d + i * NR + 8 * v, masked ? _mm256_maskload_ps(si, mask[v]) : _mm256_loadu_ps(si));
        }
}

/* kn k of 8 columns of a B micro-panel, of which cols are in op(B), each
 * contiguous in k from s, s + ldb, ... */
static inline __attribute__((always_inline)) void transpose_b(float *d, const float *s, size_t ldb, int cols,
                                                               int kn) {
    __m256 r[8];
    load_block(s, ldb, cols, kn, r);
    transpose8(r);
#pragma GCC unroll 8
    for (int i = 0; i < kn; i++) _mm256_store_ps(d + i * NR, r[i]);
}

static void pack_b(bool tb, const float *B, int ldb, int kc, int nc, void *dst) {
    float *out = dst;
    if (tb) {
        /* Columns of op(B) are contiguous in k: transpose 8 x 8 blocks. */
        for (int jr = 0; jr < nc; jr += NR) {
            float *d = out + (size_t)jr * kc;
            const float *s = B + (size_t)jr * ldb;
            int k = 0;
            if (nc - jr >= NR)
                for (; k + 8 <= kc; k += 8)
#pragma GCC unroll 4
                    for (int v = 0; v < NV; v++)
                        transpose_b(d + (size_t)k * NR + 8 * v, s + (size_t)8 * v * ldb + k, ldb, 8, 8);
            for (; k < kc; k += 8)
#pragma GCC unroll 4
                for (int v = 0; v < NV; v++)
                    transpose_b(d + (size_t)k * NR + 8 * v, s + (size_t)8 * v * ldb + k, ldb, nc - jr - 8 * v,
                                kc - k < 8 ? kc - k : 8);
        }
        return;
    }
    /* Rows of op(B) are contiguous in j. Eight k at a time across the whole
     * block: the source streams and each micro-panel gets whole lines (one k
     * at a time would write 64 bytes to each of nc/NR lines kc*64 bytes
     * apart, which share one cache set). */
    const int full = nc / NR * NR;
    __m256i mask[NV];
#pragma GCC unroll 4
    for (int v = 0; v < NV; v++) mask[v] = lanes(nc - full - 8 * v);
    for (int k = 0; k < kc; k += 8) {
        const int kn = kc - k < 8 ? kc - k : 8;
        const float *s = B + (size_t)k * ldb;
        float *d = out + (size_t)k * NR;
        int jr = 0;
        if (kn == 8)
            for (; jr < full; jr += NR, d += (size_t)kc * NR) copy_b(d, s + jr, ldb, 8, false, mask);
        for (; jr < full; jr += NR, d += (size_t)kc * NR) copy_b(d, s + jr, ldb, kn, false, mask);
        if (full < nc) copy_b(d, s + full, ldb, kn, true, mask);
    }
}

TILE_TARGET_END

const cpu_gemm_tile cpu_tile_avx2 = {
    .name = "avx2",
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
