/* Goto/BLIS-style blocking around a tile's micro-kernel (gemm_tile.h).
 *
 * Loops, from the outside in: rows of C in blocks of mc; K in blocks of at
 * most kc (A's block is packed once and stays in L3/L2); columns in blocks
 * of nc (B's block is packed and stays in L2); then each A micro-panel (mr
 * rows, in L1) walks every B micro-panel of the block. alpha is folded into
 * packed A; beta is applied on the first K block only. */
#include <omp.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>

#include "kernels/cpu/gemm_tile.h"

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
static _Thread_local unsigned char *tl_pack;
static _Thread_local size_t tl_pack_bytes;
static pthread_key_t pack_key;
static pthread_once_t pack_once = PTHREAD_ONCE_INIT;
static bool pack_key_ok;

static void make_pack_key(void) { pack_key_ok = pthread_key_create(&pack_key, free) == 0; }

static unsigned char *pack_buffer(size_t bytes) {
    if (bytes > tl_pack_bytes) {
        pthread_once(&pack_once, make_pack_key);
        unsigned char *p = aligned_alloc(64, (bytes + 63) / 64 * 64);
        if (!p) return NULL;
        free(tl_pack);
        tl_pack = p;
        tl_pack_bytes = bytes;
        if (pack_key_ok) pthread_setspecific(pack_key, p);
    }
    return tl_pack;
}

/* No memory for packing: there is no error channel in this API, so compute
 * C with a plain loop rather than leave it wrong (only the bit pattern of a
 * run that is this short of memory can differ from the tiled one's). */
static void unpacked(bool ta, bool tb, int M, int N, int K, float alpha, const float *A, int lda, const float *B,
                     int ldb, float beta, float *C, int ldc) {
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            float s = 0.0f;
            for (int k = 0; k < K; k++)
                s += (ta ? A[(size_t)k * lda + i] : A[(size_t)i * lda + k]) *
                     (tb ? B[(size_t)j * ldb + k] : B[(size_t)k * ldb + j]);
            float *c = C + (size_t)i * ldc + j;
            *c = alpha * s + (beta == 0.0f ? 0.0f : beta * *c);
        }
}

static inline int round_up(int x, int m) { return (x + m - 1) / m * m; }

/* The K blocks: nk near-equal pieces of at most kc, a function of K alone. */
static inline int k_blocks(const cpu_gemm_tile *t, int K) { return (K + t->kc - 1) / t->kc; }
static inline int k_start(int K, int nk, int p) { return (int)((int64_t)K * p / nk); }

void cpu_gemm_serial(const cpu_gemm_tile *t, bool ta, bool tb, int M, int N, int K, float alpha, const float *A,
                     int lda, const float *B, int ldb, float beta, float *C, int ldc) {
    if (M <= 0 || N <= 0) return;
    if (K <= 0 || alpha == 0.0f) {
        scale_c(M, N, beta, C, ldc);
        return;
    }
    const int MR = t->mr, NR = t->nr, MC = t->mc / MR * MR, NC = t->nc / NR * NR;
    const int nk = k_blocks(t, K);
    const int kpmax = round_up(k_start(K, nk, 1) + 1, t->kstep);
    const int mcmax = round_up(M < MC ? M : MC, MR);
    const int ncmax = round_up(N < NC ? N : NC, NR);
    const size_t a_bytes = ((size_t)mcmax * kpmax * t->elem_bytes + 63) / 64 * 64;
    unsigned char *apack = pack_buffer(a_bytes + (size_t)ncmax * kpmax * t->elem_bytes);
    if (!apack) {
        unpacked(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
        return;
    }
    unsigned char *bpack = apack + a_bytes;
    const int first_mode = beta == 0.0f ? GEMM_STORE : beta == 1.0f ? GEMM_ADD : GEMM_SCALE;

    for (int i0 = 0; i0 < M; i0 += MC) {
        const int mc = M - i0 < MC ? M - i0 : MC;
        for (int p = 0; p < nk; p++) {
            const int k0 = k_start(K, nk, p), kc = k_start(K, nk, p + 1) - k0, kp = round_up(kc, t->kstep);
            const int mode = p == 0 ? first_mode : GEMM_ADD;
            t->pack_a(ta, ta ? A + (size_t)k0 * lda + i0 : A + (size_t)i0 * lda + k0, lda, mc, kc, alpha, apack);
            for (int j0 = 0; j0 < N; j0 += NC) {
                const int nc = N - j0 < NC ? N - j0 : NC;
                t->pack_b(tb, tb ? B + (size_t)j0 * ldb + k0 : B + (size_t)k0 * ldb + j0, ldb, kc, nc, bpack);
                for (int ir = 0; ir < mc; ir += MR) {
                    const unsigned char *ap = apack + (size_t)ir * kp * t->elem_bytes;
                    float *crow = C + (size_t)(i0 + ir) * ldc + j0;
                    const int m = mc - ir < MR ? mc - ir : MR;
                    for (int jr = 0; jr < nc; jr += NR)
                        t->kernel(kp, ap, bpack + (size_t)jr * kp * t->elem_bytes, crow + jr, ldc, m,
                                  nc - jr < NR ? nc - jr : NR, mode, beta);
                }
            }
        }
    }
}

/* Splits C into a pm x pn grid of mr/nr-aligned rectangles, one per thread,
 * choosing the grid that minimizes the largest thread's work (multiply-adds
 * plus an estimate of its packing, which repeats per thread). */
static void choose_grid(const cpu_gemm_tile *t, int M, int N, int K, int nt, int *pm, int *pn) {
    const int mt = (M + t->mr - 1) / t->mr, ntiles = (N + t->nr - 1) / t->nr;
    double best = -1.0;
    *pm = 1;
    *pn = 1;
    for (int a = 1; a <= nt; a++) {
        if (nt % a) continue;
        int b = nt / a;
        if (a > mt || b > ntiles) continue;
        double rows = (double)((mt + a - 1) / a) * t->mr, cols = (double)((ntiles + b - 1) / b) * t->nr;
        double b_packs = (rows + t->mc - 1) / t->mc;
        double cost = rows * cols * K + 16.0 * K * (rows + cols * b_packs);
        if (best < 0 || cost < best) {
            best = cost;
            *pm = a;
            *pn = b;
        }
    }
}

void cpu_gemm(const cpu_gemm_tile *t, bool ta, bool tb, int M, int N, int K, float alpha, const float *A, int lda,
              const float *B, int ldb, float beta, float *C, int ldc) {
    int nt = omp_get_max_threads();
    /* Below this many multiply-adds, waking the team costs more than it saves. */
    if (nt <= 1 || omp_in_parallel() || (double)M * N * K < 262144.0) {
        cpu_gemm_serial(t, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
        return;
    }
    int pm, pn;
    choose_grid(t, M, N, K, nt, &pm, &pn);
    if (pm * pn == 1) {
        cpu_gemm_serial(t, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
        return;
    }
    const int mt = (M + t->mr - 1) / t->mr, ntl = (N + t->nr - 1) / t->nr;
#pragma omp parallel num_threads(pm * pn)
    {
        int id = omp_get_thread_num(), nth = omp_get_num_threads();
        /* The runtime may give fewer threads than asked: cover the grid anyway. */
        for (int cell = id; cell < pm * pn; cell += nth) {
            int gi = cell / pn, gj = cell % pn;
            int i0 = (int)((int64_t)mt * gi / pm) * t->mr, i1 = (int)((int64_t)mt * (gi + 1) / pm) * t->mr;
            int j0 = (int)((int64_t)ntl * gj / pn) * t->nr, j1 = (int)((int64_t)ntl * (gj + 1) / pn) * t->nr;
            if (i1 > M) i1 = M;
            if (j1 > N) j1 = N;
            if (i0 >= i1 || j0 >= j1) continue;
            const float *a = ta ? A + i0 : A + (size_t)i0 * lda;
            const float *b = tb ? B + (size_t)j0 * ldb : B + j0;
            cpu_gemm_serial(t, ta, tb, i1 - i0, j1 - j0, K, alpha, a, lda, b, ldb, beta, C + (size_t)i0 * ldc + j0,
                            ldc);
        }
    }
}
