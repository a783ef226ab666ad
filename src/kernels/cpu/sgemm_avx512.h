/* The AVX-512 SGEMM behind anvil_sgemm (src/kernels/gemm.h), same contract.
 * Callers must have checked that the CPU has AVX-512F/VL/DQ: these functions
 * are compiled for it whatever the build flags. */
#ifndef ANVIL_KERNELS_CPU_SGEMM_AVX512_H
#define ANVIL_KERNELS_CPU_SGEMM_AVX512_H

#include <stdbool.h>

/* On all OpenMP threads; each owns a rectangle of C. */
void anvil_sgemm_avx512(bool ta, bool tb, int M, int N, int K, float alpha, const float *A, int lda,
                        const float *B, int ldb, float beta, float *C, int ldc);

/* On the calling thread; reentrant (packing buffers are per thread). */
void anvil_sgemm_avx512_serial(bool ta, bool tb, int M, int N, int K, float alpha, const float *A,
                               int lda, const float *B, int ldb, float beta, float *C, int ldc);

#endif
