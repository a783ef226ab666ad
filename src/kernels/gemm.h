/* Single-precision matrix multiply, row-major, the one primitive every
 * matmul in anvil goes through.
 *
 *   C[M,N] = alpha * op(A) @ op(B) + beta * C
 *
 * op(A) is A (M x K, leading dimension lda) or, when ta, the transpose of a
 * K x M matrix. Likewise for B with tb. When beta == 0, C is written without
 * being read (NaNs in C do not propagate).
 *
 * Results are bit-identical from run to run and do not depend on the thread
 * count: work is split over M and N only, never over K. The AVX-512 kernel is
 * used when the CPU has it (ANVIL_GEMM=blas in the environment forces
 * OpenBLAS's cblas_sgemm, for comparisons). */
#ifndef ANVIL_KERNELS_GEMM_H
#define ANVIL_KERNELS_GEMM_H

#include <stdbool.h>

/* Uses all OpenMP threads. Must not be called from inside a parallel region. */
void anvil_sgemm(bool ta, bool tb, int M, int N, int K, float alpha, const float *A, int lda,
                 const float *B, int ldb, float beta, float *C, int ldc);

/* Same contract, on the calling thread only: for small products inside an
 * already parallel loop (attention blocks). */
void anvil_sgemm_serial(bool ta, bool tb, int M, int N, int K, float alpha, const float *A, int lda,
                        const float *B, int ldb, float beta, float *C, int ldc);

/* Name of the implementation in use: "avx512" or "openblas". */
const char *anvil_sgemm_impl(void);

#endif
