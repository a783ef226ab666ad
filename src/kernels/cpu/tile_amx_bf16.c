/* The AMX tile of the CPU GEMM (gemm_tile.h), for CPUs with AMX-BF16: the
 * numeric contract of the vdpbf16ps tile (tile_avx512_bf16.c) at several
 * times its speed. op(A) and op(B) are rounded to bf16 (nearest even) while
 * they are packed, and TDPBF16PS multiplies 16 x 32 bf16 tiles of A by
 * 32 x 16 of B into 16 x 16 fp32 tiles; products of bf16 are exact in fp32,
 * bf16 denormals count as zero and results flush to zero, as for vdpbf16ps.
 * C stays fp32. The hardware orders the additions inside one TDPBF16PS its
 * own way, not as vdpbf16ps does (so the two tiles' bits differ), but
 * always the same way, so results are as deterministic as other tiles'.
 *
 * Packed layouts, per k block of 32 (the tiles' depth, so kstep = 32):
 * A: 32 rows of 32 bf16, one 64-byte tile row each; rows 0-15 are one A
 *    tile, rows 16-31 the next.
 * B: per sub-panel of 32 columns (a micro-panel is NB of them, one after
 *    the other, each kp deep), two 1 KB halves (columns 0-15, 16-31), each
 *    16 rows of k pairs: row q holds, for each column, k = 2q in the low and
 *    2q + 1 in the high half of a 32-bit word, the layout TDPBF16PS takes B
 *    in. Sub-panels wholly past the last column are neither packed nor read.
 *
 * AMX needs the kernel's permission (arch_prctl) once per process, which
 * anvil_isa_bf16 (isa.c) asks for before it ever selects this tile, and a
 * tile configuration on each thread, loaded here on a thread's first call. */
#include <immintrin.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels/cpu/amx_config.h"
#include "kernels/cpu/gemm_tile.h"

TILE_TARGET("amx-tile,amx-bf16,avx512f,avx512vl,avx512dq,avx512bw,avx512bf16")

#include "kernels/cpu/avx512_tile.h"
#include "kernels/cpu/bf16_pack.h"

/* C is computed in 32 x 32 blocks, each four 16 x 16 accumulator tiles fed
 * by two A and two B tiles: all eight tile registers, each loaded tile
 * feeding two TDPBF16PS. A micro-kernel call covers NB such blocks side by
 * side, so that the vector units combine one block into C while the tiles
 * compute the next. At this speed every K block's pass over C (fp32, often
 * past L2) costs more than an A micro-panel spilling from L1 to L2 (48 KB
 * at KC = 768), so KC = 768 measured best of 256 to 1536 and makes K = 768
 * one pass; NC = 512 keeps the packed B block (768 KB) in a 2 MB L2; MC =
 * 1024 packs B once per thread at BT = 1024. */
enum { MR = 32, BW = 32, NB = 4, NR = BW * NB, KSTEP = 32, KC = 768, NC = 512, MC = 1024 };

/* Whether this thread has loaded amx_tile_config. The only other code that
 * configures tiles, the AMX peak probe, loads the same configuration, and it
 * stays loaded until the thread ends. */
static _Thread_local bool tl_configured;

/* The accumulator tiles = A micro-panel @ one B sub-panel, kp deep. */
static inline void block_product(int kp, const unsigned char *a, const unsigned char *b) {
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
    for (int k = 0; k < kp; k += KSTEP) {
        _tile_loadd(4, a, 64);
        _tile_loadd(6, b, 64);
        _tile_dpbf16ps(0, 4, 6);
        _tile_loadd(7, b + 1024, 64);
        _tile_dpbf16ps(1, 4, 7);
        _tile_loadd(5, a + 1024, 64);
        _tile_dpbf16ps(2, 5, 6);
        _tile_dpbf16ps(3, 5, 7);
        a += 2048;
        b += 2048;
    }
}

/* The accumulators to acc, a 32 x 32 block. */
static inline void store_tiles(float *acc) {
    _tile_stored(0, acc, BW * sizeof(float));
    _tile_stored(1, acc + 16, BW * sizeof(float));
    _tile_stored(2, acc + 16 * BW, BW * sizeof(float));
    _tile_stored(3, acc + 16 * BW + 16, BW * sizeof(float));
}

/* C[0:m, 0:n] (mode)= acc[0:m, 0:n], acc rows BW floats apart: the
 * vdpbf16ps tile's arithmetic. */
static inline void combine(const float *acc, float *c, int ldc, int m, int n, int mode, float beta) {
    const __mmask16 mask[2] = {lanes(n), lanes(n - 16)};
    const __m512 vbeta = _mm512_set1_ps(beta);
    for (int r = 0; r < m; r++) {
        float *cr = c + (size_t)r * ldc;
#pragma GCC unroll 2
        for (int v = 0; v < 2; v++) {
            __m512 x = _mm512_load_ps(acc + r * BW + 16 * v);
            if (mode == GEMM_ADD) x = _mm512_add_ps(x, _mm512_maskz_loadu_ps(mask[v], cr + 16 * v));
            else if (mode == GEMM_SCALE) x = _mm512_fmadd_ps(vbeta, _mm512_maskz_loadu_ps(mask[v], cr + 16 * v), x);
            _mm512_mask_storeu_ps(cr + 16 * v, mask[v], x);
        }
    }
}

static void micro_kernel(int kp, const void *pa, const void *pb, float *restrict c, int ldc, int m, int n,
                         int mode, float beta) {
    if (!tl_configured) {
        _tile_loadconfig(&amx_tile_config);
        tl_configured = true;
    }
    const unsigned char *a = pa, *b = pb;
    const int blocks = (n + BW - 1) / BW;
    const size_t panel = (size_t)kp * BW * sizeof(uint16_t);
    _Alignas(64) float acc[MR * BW];
    /* Block s's combine waits for its tiles; it is issued after block s+1's
     * products so that the two overlap. Only the last block can be partial. */
    for (int s = 0; s < blocks; s++) {
        block_product(kp, a, b + s * panel);
        if (s > 0) combine(acc, c + (s - 1) * BW, ldc, m, BW, mode, beta);
        store_tiles(acc);
    }
    combine(acc, c + (blocks - 1) * BW, ldc, m, n - (blocks - 1) * BW, mode, beta);
}


static inline int min_int(int x, int y) { return x < y ? x : y; }

static void pack_a(bool ta, const float *A, int lda, int mc, int kc, float alpha, void *out) {
    const int kp = (kc + KSTEP - 1) / KSTEP * KSTEP;
    const __m512 va = _mm512_set1_ps(alpha);
    const __m512i zero = _mm512_setzero_si512();
    const size_t panel = (size_t)kp * MR * sizeof(uint16_t) / sizeof(__m512i); /* per micro-panel */
    __m512i *d = out;
    if (!ta) {
        for (int ir = 0; ir < mc; ir += MR) {
            const int m = min_int(mc - ir, MR);
            __m512i *dp = d + (size_t)(ir / MR) * panel;
            /* Each row of op(A) is a contiguous run of k: one tile row per 32. */
            for (int r = 0; r < MR; r++) {
                if (r >= m) {
                    for (int k = 0; k < kp; k += KSTEP) dp[(size_t)(k / KSTEP) * MR + r] = zero;
                    continue;
                }
                const float *s = A + (size_t)(ir + r) * lda;
                for (int k = 0; k < kp; k += KSTEP) {
                    const int n = kc - k;
                    dp[(size_t)(k / KSTEP) * MR + r] = run_pairs_scaled(s + k, n, va);
                }
            }
        }
        return;
    }
    /* op(A)(i,k) = A[k*lda + i]: rows k and k+1 of A make 16 pairs for 16
     * rows of op(A); a 16 x 16 transpose of the pairs gives tile rows. Each k
     * block's 32 rows of A are walked end to end. */
    const int groups = (mc + MR - 1) / MR * (MR / 16);
    for (int k = 0; k < kp; k += KSTEP) {
        const float *s = A + (size_t)k * lda;
        for (int g = 0; g < groups; g++) {
            __m512i *dk = d + (size_t)(g / 2) * panel + (size_t)(k / KSTEP) * MR + (g % 2) * 16;
            const int rows = mc - 16 * g;
            if (rows <= 0) {
                for (int i = 0; i < 16; i++) dk[i] = zero;
                continue;
            }
            __m512 pairs[16];
#pragma GCC unroll 16
            for (int q = 0; q < 16; q++) {
                const int k0 = k + 2 * q;
                __m512 x0 = k0 < kc ? load16_scaled(s + (size_t)(2 * q) * lda + 16 * g, rows, va) : _mm512_setzero_ps();
                __m512 x1 =
                    k0 + 1 < kc ? load16_scaled(s + (size_t)(2 * q + 1) * lda + 16 * g, rows, va) : _mm512_setzero_ps();
                pairs[q] = _mm512_castsi512_ps(pair_rows(x0, x1));
            }
            transpose16(pairs);
#pragma GCC unroll 16
            for (int i = 0; i < 16; i++) dk[i] = _mm512_castps_si512(pairs[i]);
        }
    }
}

static void pack_b(bool tb, const float *B, int ldb, int kc, int nc, void *out) {
    const int kp = (kc + KSTEP - 1) / KSTEP * KSTEP;
    const __m512i zero = _mm512_setzero_si512();
    const size_t panel = (size_t)kp * BW * sizeof(uint16_t) / sizeof(__m512i); /* per sub-panel */
    __m512i *d = out;
    if (!tb) {
        /* op(B)(k,j) = B[k*ldb + j]: rows k and k+1 make one tile row per 16
         * columns; walk the rows end to end. */
        const int groups = (nc + BW - 1) / BW * 2;
        for (int k = 0; k < kp; k += 2) {
            const size_t at = (size_t)(k / KSTEP) * BW + (k % KSTEP) / 2;
            const float *s0 = k < kc ? B + (size_t)k * ldb : NULL, *s1 = k + 1 < kc ? B + (size_t)(k + 1) * ldb : NULL;
            for (int g = 0; g < groups; g++) {
                const int cols = nc - 16 * g;
                __m512 x0 = s0 && cols > 0 ? load16(s0 + 16 * g, cols) : _mm512_setzero_ps();
                __m512 x1 = s1 && cols > 0 ? load16(s1 + 16 * g, cols) : _mm512_setzero_ps();
                d[(size_t)(g / 2) * panel + at + (g % 2) * 16] = pair_rows(x0, x1);
            }
        }
        return;
    }
    for (int jr = 0; jr < nc; jr += BW) {
        const int n = min_int(nc - jr, BW);
        __m512i *dp = d + (size_t)(jr / BW) * panel;
        for (int h = 0; h < BW; h += 16) {
            const int cols = n - h;
            for (int k = 0; k < kp; k += KSTEP) {
                __m512i *dk = dp + (size_t)(k / KSTEP) * BW + h;
                if (cols <= 0) {
                    for (int q = 0; q < 16; q++) dk[q] = zero;
                    continue;
                }
                /* op(B)(k,j) = B[j*ldb + k]: a column's 32 k are its 16 pairs
                 * already; transposing 16 columns gives tile rows. */
                const float *s = B + (size_t)(jr + h) * ldb + k;
                const int nk = kc - k;
                __m512 pairs[16];
#pragma GCC unroll 16
                for (int j = 0; j < 16; j++) {
                    if (j >= cols) {
                        pairs[j] = _mm512_setzero_ps();
                        continue;
                    }
                    pairs[j] = _mm512_castsi512_ps(run_pairs(s + (size_t)j * ldb, nk));
                }
                transpose16(pairs);
#pragma GCC unroll 16
                for (int q = 0; q < 16; q++) dk[q] = _mm512_castps_si512(pairs[q]);
            }
        }
    }
}

TILE_TARGET_END

const cpu_gemm_tile cpu_tile_amx_bf16 = {
    .name = "amx",
    .mr = MR,
    .nr = NR,
    .kc = KC,
    .nc = NC,
    .mc = MC,
    .kstep = KSTEP,
    .elem_bytes = sizeof(uint16_t),
    .pack_a = pack_a,
    .pack_b = pack_b,
    .kernel = micro_kernel,
};
