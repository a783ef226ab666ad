/* The GEMM of the CPU backend: one blocked driver (gemm_driver.c) and, per
 * instruction-set path, a tile: the register-blocked micro-kernel with the
 * packing routines that feed it and the cache-block sizes tuned for it.
 * Internal to src/kernels; anvil_sgemm (kernels/gemm.h) is the public entry.
 *
 * Determinism, on every tile: a C element is the same sequence of
 * multiply-adds over k (one chain in increasing k; in AMX's tiles, the
 * hardware's fixed order within each block of 32), cut into K blocks whose
 * bounds depend on K and the tile alone, whatever rectangle of C or thread
 * it lands in. Work is split over M and N only, so results do not depend on
 * the thread count. */
#ifndef ANVIL_KERNELS_CPU_GEMM_TILE_H
#define ANVIL_KERNELS_CPU_GEMM_TILE_H

#include <stdbool.h>
#include <stddef.h>

/* A tile file compiles its code between TILE_TARGET("features") and
 * TILE_TARGET_END for those CPU features (the tile runs only where the CPU
 * has them): GCC's target pragma, or under clang, which ignores GCC's, its
 * own for every function in between. */
#define TILE_PRAGMA(x) _Pragma(#x)
#ifdef __clang__
#define TILE_TARGET(features) TILE_PRAGMA(clang attribute push(__attribute__((target(features))), apply_to = function))
#define TILE_TARGET_END _Pragma("clang attribute pop")
#else
#define TILE_TARGET(features) _Pragma("GCC push_options") TILE_PRAGMA(GCC target(features))
#define TILE_TARGET_END _Pragma("GCC pop_options")
#endif

/* How a tile's product is combined with C. */
enum { GEMM_STORE, GEMM_ADD, GEMM_SCALE };

typedef struct cpu_gemm_tile {
    const char *name;
    int mr, nr;     /* the register tile: mr rows by nr columns of C */
    int kc, nc, mc; /* at most kc of K per packed block; nc columns of packed B; mc rows of packed A */
    int kstep;      /* packed panels hold k in groups of kstep (bf16 pairs: 2), zero-padded */
    int elem_bytes; /* bytes per packed element */
    /* alpha * op(A)[0:mc, 0:kc] as mr-row micro-panels, each k-major, rows
     * past mc zero. A points at op(A)(0,0): with ta, op(A)(i,k) = A[k*lda+i]. */
    void (*pack_a)(bool ta, const float *A, int lda, int mc, int kc, float alpha, void *dst);
    /* op(B)[0:kc, 0:nc] as nr-column micro-panels, each k-major, columns past nc zero. */
    void (*pack_b)(bool tb, const float *B, int ldb, int kc, int nc, void *dst);
    /* C[0:m, 0:n] (mode)= a micro-panel (kc deep, a multiple of kstep) @ b micro-panel. */
    void (*kernel)(int kc, const void *a, const void *b, float *C, int ldc, int m, int n, int mode, float beta);
} cpu_gemm_tile;

extern const cpu_gemm_tile cpu_tile_generic, cpu_tile_avx2, cpu_tile_avx512, cpu_tile_avx512_bf16,
    cpu_tile_amx_bf16;

/* C = alpha * op(A) @ op(B) + beta * C, row-major, as anvil_sgemm
 * (kernels/gemm.h): on all OpenMP threads, each owning a rectangle of C. */
void cpu_gemm(const cpu_gemm_tile *t, bool ta, bool tb, int M, int N, int K, float alpha, const float *A, int lda,
              const float *B, int ldb, float beta, float *C, int ldc);
/* The same on the calling thread; reentrant (packing buffers are per thread). */
void cpu_gemm_serial(const cpu_gemm_tile *t, bool ta, bool tb, int M, int N, int K, float alpha, const float *A,
                     int lda, const float *B, int ldb, float beta, float *C, int ldc);

#endif
