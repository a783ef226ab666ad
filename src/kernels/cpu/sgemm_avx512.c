/* Goto/BLIS-style fp32 GEMM for AVX-512 (tuned on Zen 5).
 *
 * Row-major C is updated in MR x NR tiles: MR rows of packed A are
 * broadcast, NR columns of packed B are loaded as NR/16 vectors, so C rows
 * are touched with full-width (masked at the edge) vector loads and stores.
 * Blocking, from the inside out:
 *   - one A micro-panel (MR x kc) stays in L1 while the kernel walks the
 *     NR-wide micro-panels of the packed B block;
 *   - the packed B block (kc x NC) stays in L2;
 *   - the packed A block (MC x kc) comes from L3.
 * alpha is folded into packed A; beta is applied on the first K block only.
 *
 * Determinism: every C element is one FMA chain over k in increasing order,
 * cut at K-block boundaries that depend on K alone, whatever tile or thread
 * it lands in. Padding lanes are zero and never stored. So results do not
 * depend on the thread count or on how C is partitioned. */
#include "kernels/cpu/sgemm_avx512.h"

#include <immintrin.h>
#include <omp.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>

#pragma GCC push_options
#pragma GCC target("avx512f,avx512vl,avx512dq,fma")

/* 6 x 64 tiles: 24 accumulators, 4 B loads and 6 broadcasts per 24 FMAs,
 * which measured best of 6x64, 8x48, 12x32 and 14x32 here (~85-90% of the
 * 2-pipe FMA peak on one core). KC = 512 keeps the A micro-panel at 12 KB of
 * L1; the 512 x 384 packed B block is 768 KB of the 1 MB L2. The values can
 * be overridden at compile time for tuning. */
#ifndef SGEMM_MR
#define SGEMM_MR 6
#endif
#ifndef SGEMM_NV
#define SGEMM_NV 4
#endif
#ifndef SGEMM_KC
#define SGEMM_KC 512
#endif
#ifndef SGEMM_NC
#define SGEMM_NC 384
#endif
#ifndef SGEMM_MC
#define SGEMM_MC 1536
#endif

enum {
    MR = SGEMM_MR,
    NV = SGEMM_NV,
    NR = 16 * SGEMM_NV,
    KC = SGEMM_KC,
    NC = SGEMM_NC / NR * NR,
    MC = SGEMM_MC / MR * MR,
};

/* How a tile's product is combined with C. */
enum { C_STORE, C_ADD, C_SCALE };

/* The mask of the first n of 16 lanes (n clamped to 0..16). */
static inline __mmask16 lanes(int n) {
    return n >= 16 ? (__mmask16)0xFFFF : n <= 0 ? 0 : (__mmask16)((1u << n) - 1);
}

/* C[0:m, 0:n] (op)= A_panel (MR x kc, k-major) @ B_panel (kc x NR, k-major). */
static void micro_kernel(int kc, const float *restrict a, const float *restrict b, float *restrict c,
                         int ldc, int m, int n, int mode, float beta) {
    __m512 acc[MR][NV];
#pragma GCC unroll 32
    for (int r = 0; r < MR; r++)
#pragma GCC unroll 8
        for (int v = 0; v < NV; v++) acc[r][v] = _mm512_setzero_ps();

    /* The C tile is needed only after kc steps: start fetching it now. */
#pragma GCC unroll 32
    for (int r = 0; r < MR; r++)
        if (r < m)
#pragma GCC unroll 8
            for (int v = 0; v < NV; v++)
                _mm_prefetch((const char *)(c + (size_t)r * ldc + 16 * v), _MM_HINT_T0);
    for (int k = 0; k < kc; k++) {
        __m512 bv[NV];
#pragma GCC unroll 8
        for (int v = 0; v < NV; v++) bv[v] = _mm512_load_ps(b + 16 * v);
#pragma GCC unroll 32
        for (int r = 0; r < MR; r++) {
            __m512 ar = _mm512_set1_ps(a[r]);
#pragma GCC unroll 8
            for (int v = 0; v < NV; v++) acc[r][v] = _mm512_fmadd_ps(ar, bv[v], acc[r][v]);
        }
        a += MR;
        b += NR;
    }

    __mmask16 mask[NV];
#pragma GCC unroll 8
    for (int v = 0; v < NV; v++) mask[v] = lanes(n - 16 * v);
    const __m512 vbeta = _mm512_set1_ps(beta);
#pragma GCC unroll 32
    for (int r = 0; r < MR; r++) {
        if (r >= m) break;
        float *cr = c + (size_t)r * ldc;
#pragma GCC unroll 8
        for (int v = 0; v < NV; v++) {
            __m512 x = acc[r][v];
            if (mode == C_ADD) x = _mm512_add_ps(x, _mm512_maskz_loadu_ps(mask[v], cr + 16 * v));
            else if (mode == C_SCALE)
                x = _mm512_fmadd_ps(vbeta, _mm512_maskz_loadu_ps(mask[v], cr + 16 * v), x);
            _mm512_mask_storeu_ps(cr + 16 * v, mask[v], x);
        }
    }
}

/* Transposes a rows x cols (each <= 16) block of src (row stride lds) into
 * dst (row stride ldd): dst[j*ldd + i] = s * src[i*lds + j] for j < cols and
 * i < width, with zeros where i >= rows. */
static inline void transpose16(const float *src, size_t lds, int rows, int cols, float *dst, size_t ldd,
                               int width, float s) {
    const __mmask16 cm = lanes(cols), wm = lanes(width);
    const __m512 vs = _mm512_set1_ps(s);
    __m512 r[16], t[16], u[16];
#pragma GCC unroll 16
    for (int i = 0; i < 16; i++)
        r[i] = i < rows ? _mm512_maskz_loadu_ps(cm, src + i * lds) : _mm512_setzero_ps();
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
        __m512 col[4] = {_mm512_shuffle_f32x4(v0, v2, 0x88), _mm512_shuffle_f32x4(v0, v2, 0xDD),
                         _mm512_shuffle_f32x4(v1, v3, 0x88), _mm512_shuffle_f32x4(v1, v3, 0xDD)};
#pragma GCC unroll 4
        for (int q = 0; q < 4; q++) {
            int j = 4 * q + e;
            if (j < cols) _mm512_mask_storeu_ps(dst + j * ldd, wm, _mm512_mul_ps(vs, col[q]));
        }
    }
}

/* Packs alpha * op(A)[i0:i0+mc, k0:k0+kc] as MR-row micro-panels, each k-major
 * (MR floats per k), rows past mc zero. */
static void pack_a(bool ta, const float *A, int lda, int i0, int mc, int k0, int kc, float alpha,
                   float *dst) {
    for (int ir = 0; ir < mc; ir += MR) {
        int m = mc - ir < MR ? mc - ir : MR;
        float *d = dst + (size_t)ir * kc;
        if (ta) {
            /* op(A)(i,k) = A[k*lda + i]: each k is a contiguous run of rows. */
            const float *s = A + (size_t)k0 * lda + i0 + ir;
            const __m512 va = _mm512_set1_ps(alpha);
            for (int k = 0; k < kc; k++) {
                const float *sk = s + (size_t)k * lda;
                float *dk = d + (size_t)k * MR;
                for (int q = 0; q < MR; q += 16)
                    _mm512_mask_storeu_ps(dk + q, lanes(MR - q),
                                          _mm512_mul_ps(va, _mm512_maskz_loadu_ps(lanes(m - q), sk + q)));
            }
        } else {
            const float *s = A + (size_t)(i0 + ir) * lda + k0;
            for (int q = 0; q < MR; q += 16) {
                int rows = m - q < 16 ? m - q : 16;
                int width = MR - q < 16 ? MR - q : 16;
                for (int k = 0; k < kc; k += 16)
                    transpose16(s + (size_t)q * lda + k, (size_t)lda, rows, kc - k < 16 ? kc - k : 16,
                                d + (size_t)k * MR + q, MR, width, alpha);
            }
        }
    }
}

/* Packs op(B)[k0:k0+kc, j0:j0+nc] as NR-column micro-panels, each k-major
 * (NR floats per k), columns past nc zero. */
static void pack_b(bool tb, const float *B, int ldb, int k0, int kc, int j0, int nc, float *dst) {
    for (int jr = 0; jr < nc; jr += NR) {
        int n = nc - jr < NR ? nc - jr : NR;
        float *d = dst + (size_t)jr * kc;
        if (tb) {
            /* op(B)(k,j) = B[j*ldb + k]: transpose 16 columns at a time. */
            const float *s = B + (size_t)(j0 + jr) * ldb + k0;
            for (int v = 0; v < NV; v++) {
                int rows = n - 16 * v;
                if (rows > 16) rows = 16;
                for (int k = 0; k < kc; k += 16)
                    transpose16(s + (size_t)16 * v * ldb + k, (size_t)ldb, rows, kc - k < 16 ? kc - k : 16,
                                d + (size_t)k * NR + 16 * v, NR, 16, 1.0f);
            }
        } else {
            const float *s = B + (size_t)k0 * ldb + j0 + jr;
            for (int k = 0; k < kc; k++) {
                const float *sk = s + (size_t)k * ldb;
                float *dk = d + (size_t)k * NR;
#pragma GCC unroll 8
                for (int v = 0; v < NV; v++)
                    _mm512_store_ps(dk + 16 * v, _mm512_maskz_loadu_ps(lanes(n - 16 * v), sk + 16 * v));
            }
        }
    }
}

/* C = beta * C over M x N, for products that contribute nothing. */
static void scale_c(int M, int N, float beta, float *C, int ldc) {
    for (int i = 0; i < M; i++) {
        float *c = C + (size_t)i * ldc;
        if (beta == 0.0f)
            for (int j = 0; j < N; j++) c[j] = 0.0f;
        else if (beta != 1.0f)
            for (int j = 0; j < N; j++) c[j] *= beta;
    }
}

/* Grow-only packing buffer, one per thread, so concurrent serial calls never
 * share one. It lives as long as its thread (GEMMs run back to back); the
 * key's destructor frees it when an OpenMP team shrinks or a thread ends. */
static _Thread_local float *tl_pack;
static _Thread_local size_t tl_pack_floats;
static pthread_key_t pack_key;
static pthread_once_t pack_once = PTHREAD_ONCE_INIT;
static bool pack_key_ok;

static void make_pack_key(void) { pack_key_ok = pthread_key_create(&pack_key, free) == 0; }

static float *pack_buffer(size_t floats) {
    if (floats > tl_pack_floats) {
        pthread_once(&pack_once, make_pack_key);
        size_t bytes = (floats * sizeof(float) + 63) / 64 * 64;
        float *p = aligned_alloc(64, bytes);
        if (!p) return NULL;
        free(tl_pack);
        tl_pack = p;
        tl_pack_floats = floats;
        if (pack_key_ok) pthread_setspecific(pack_key, p);
    }
    return tl_pack;
}

static inline int round_up(int x, int m) { return (x + m - 1) / m * m; }

/* The K blocks: nk near-equal pieces of at most KC, a function of K alone. */
static inline int k_blocks(int K) { return (K + KC - 1) / KC; }
static inline int k_start(int K, int nk, int p) { return (int)((int64_t)K * p / nk); }

void anvil_sgemm_avx512_serial(bool ta, bool tb, int M, int N, int K, float alpha, const float *A,
                               int lda, const float *B, int ldb, float beta, float *C, int ldc) {
    if (M <= 0 || N <= 0) return;
    if (K <= 0 || alpha == 0.0f) {
        scale_c(M, N, beta, C, ldc);
        return;
    }
    const int nk = k_blocks(K);
    const int kcmax = k_start(K, nk, 1) + 1;
    const int mcmax = round_up(M < MC ? M : MC, MR);
    const int ncmax = round_up(N < NC ? N : NC, NR);
    size_t a_floats = (size_t)round_up(mcmax * kcmax, 16);
    float *apack = pack_buffer(a_floats + (size_t)ncmax * kcmax);
    if (!apack) {
        /* No memory for packing: there is no error channel in this API, so
         * fall back to a plain loop rather than leave C wrong. */
        for (int i = 0; i < M; i++)
            for (int j = 0; j < N; j++) {
                float s = 0.0f;
                for (int k = 0; k < K; k++)
                    s += (ta ? A[(size_t)k * lda + i] : A[(size_t)i * lda + k]) *
                         (tb ? B[(size_t)j * ldb + k] : B[(size_t)k * ldb + j]);
                float *c = C + (size_t)i * ldc + j;
                *c = alpha * s + (beta == 0.0f ? 0.0f : beta * *c);
            }
        return;
    }
    float *bpack = apack + a_floats;
    const int first_mode = beta == 0.0f ? C_STORE : beta == 1.0f ? C_ADD : C_SCALE;

    for (int i0 = 0; i0 < M; i0 += MC) {
        const int mc = M - i0 < MC ? M - i0 : MC;
        for (int p = 0; p < nk; p++) {
            const int k0 = k_start(K, nk, p), kc = k_start(K, nk, p + 1) - k0;
            const int mode = p == 0 ? first_mode : C_ADD;
            pack_a(ta, A, lda, i0, mc, k0, kc, alpha, apack);
            for (int j0 = 0; j0 < N; j0 += NC) {
                const int nc = N - j0 < NC ? N - j0 : NC;
                pack_b(tb, B, ldb, k0, kc, j0, nc, bpack);
                for (int ir = 0; ir < mc; ir += MR) {
                    const float *ap = apack + (size_t)ir * kc;
                    float *crow = C + (size_t)(i0 + ir) * ldc + j0;
                    const int m = mc - ir < MR ? mc - ir : MR;
                    for (int jr = 0; jr < nc; jr += NR)
                        micro_kernel(kc, ap, bpack + (size_t)jr * kc, crow + jr, ldc, m,
                                     nc - jr < NR ? nc - jr : NR, mode, beta);
                }
            }
        }
    }
}

/* Splits C into a pm x pn grid of MR/NR-aligned rectangles, one per thread,
 * choosing the grid that minimizes the largest thread's work (multiply-adds
 * plus an estimate of its packing, which repeats per thread). */
static void choose_grid(int M, int N, int K, int nt, int *pm, int *pn) {
    const int mt = (M + MR - 1) / MR, ntiles = (N + NR - 1) / NR;
    double best = -1.0;
    *pm = 1;
    *pn = 1;
    for (int a = 1; a <= nt; a++) {
        if (nt % a) continue;
        int b = nt / a;
        if (a > mt || b > ntiles) continue;
        double rows = (double)((mt + a - 1) / a) * MR, cols = (double)((ntiles + b - 1) / b) * NR;
        double b_packs = (rows + MC - 1) / MC;
        double cost = rows * cols * K + 16.0 * K * (rows + cols * b_packs);
        if (best < 0 || cost < best) {
            best = cost;
            *pm = a;
            *pn = b;
        }
    }
}

void anvil_sgemm_avx512(bool ta, bool tb, int M, int N, int K, float alpha, const float *A, int lda,
                        const float *B, int ldb, float beta, float *C, int ldc) {
    int nt = omp_get_max_threads();
    /* Below this many multiply-adds, waking the team costs more than it saves. */
    if (nt <= 1 || omp_in_parallel() || (double)M * N * K < 262144.0) {
        anvil_sgemm_avx512_serial(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
        return;
    }
    int pm, pn;
    choose_grid(M, N, K, nt, &pm, &pn);
    if (pm * pn == 1) {
        anvil_sgemm_avx512_serial(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
        return;
    }
    const int mt = (M + MR - 1) / MR, ntl = (N + NR - 1) / NR;
#pragma omp parallel num_threads(pm * pn)
    {
        int t = omp_get_thread_num(), nth = omp_get_num_threads();
        /* The runtime may give fewer threads than asked: cover the grid anyway. */
        for (int cell = t; cell < pm * pn; cell += nth) {
            int gi = cell / pn, gj = cell % pn;
            int i0 = (int)((int64_t)mt * gi / pm) * MR, i1 = (int)((int64_t)mt * (gi + 1) / pm) * MR;
            int j0 = (int)((int64_t)ntl * gj / pn) * NR, j1 = (int)((int64_t)ntl * (gj + 1) / pn) * NR;
            if (i1 > M) i1 = M;
            if (j1 > N) j1 = N;
            if (i0 >= i1 || j0 >= j1) continue;
            const float *a = ta ? A + i0 : A + (size_t)i0 * lda;
            const float *b = tb ? B + (size_t)j0 * ldb : B + j0;
            anvil_sgemm_avx512_serial(ta, tb, i1 - i0, j1 - j0, K, alpha, a, lda, b, ldb, beta,
                                      C + (size_t)i0 * ldc + j0, ldc);
        }
    }
}

#pragma GCC pop_options
