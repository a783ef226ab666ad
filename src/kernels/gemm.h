/* Single-precision matrix multiply, row-major, the one primitive every
 * matmul in anvil goes through.
 *
 *   C[M,N] = alpha * op(A) @ op(B) + beta * C
 *
 * op(A) is A (M x K, leading dimension lda) or, when ta, the transpose of a
 * K x M matrix. Likewise for B with tb. When beta == 0, C is written without
 * being read (NaNs in C do not propagate).
 *
 * Each instruction-set path (kernels/isa.h) has its own kernel: AVX-512,
 * AVX2 + FMA, or portable C. On one path, results are bit-identical from
 * run to run and do not depend on the thread count: work is split over M
 * and N only, never over K. */
#ifndef ANVIL_KERNELS_GEMM_H
#define ANVIL_KERNELS_GEMM_H

#include <stdbool.h>

/* On the active path, on all OpenMP threads. Must not be called from inside
 * a parallel region. */
void anvil_sgemm(bool ta, bool tb, int M, int N, int K, float alpha, const float *A, int lda,
                 const float *B, int ldb, float beta, float *C, int ldc);

/* Same contract, on the calling thread only: for small products inside an
 * already parallel loop (attention blocks). */
void anvil_sgemm_serial(bool ta, bool tb, int M, int N, int K, float alpha, const float *A, int lda,
                        const float *B, int ldb, float beta, float *C, int ldc);

/* The same product with op(A) and op(B) rounded to bf16 (nearest even) and
 * multiplied into fp32 sums by the bf16 kernel in use (anvil_isa_bf16: AMX
 * or vdpbf16ps); C stays fp32. -1 after anvil_fail when the active path
 * cannot (anvil_isa_check_bf16), and C is untouched. */
int anvil_sgemm_bf16(bool ta, bool tb, int M, int N, int K, float alpha, const float *A, int lda,
                     const float *B, int ldb, float beta, float *C, int ldc);

/* The kernel anvil_sgemm uses now: "avx512", "avx2" or "generic" (the
 * bf16 one: anvil_isa_bf16). */
const char *anvil_sgemm_impl(void);

#endif
