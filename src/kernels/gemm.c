#include "kernels/gemm.h"

#include <cblas.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/sgemm_avx512.h"

/* Read on every call (one short environment scan) so a process, or a test,
 * can switch implementations without restarting. */
static bool use_avx512(void) {
    if (!__builtin_cpu_supports("avx512f") || !__builtin_cpu_supports("avx512vl") ||
        !__builtin_cpu_supports("avx512dq"))
        return false;
    const char *e = getenv("ANVIL_GEMM");
    return !(e && strcmp(e, "blas") == 0);
}

static void blas_sgemm(bool ta, bool tb, int M, int N, int K, float alpha, const float *A, int lda,
                       const float *B, int ldb, float beta, float *C, int ldc) {
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, M, N, K,
                alpha, A, lda, B, ldb, beta, C, ldc);
}

void anvil_sgemm(bool ta, bool tb, int M, int N, int K, float alpha, const float *A, int lda,
                 const float *B, int ldb, float beta, float *C, int ldc) {
    if (use_avx512()) anvil_sgemm_avx512(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    else blas_sgemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

void anvil_sgemm_serial(bool ta, bool tb, int M, int N, int K, float alpha, const float *A, int lda,
                        const float *B, int ldb, float beta, float *C, int ldc) {
    /* Inside a parallel region the OpenMP build of OpenBLAS stays on the
     * calling thread, which is the contract here. */
    if (use_avx512()) anvil_sgemm_avx512_serial(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    else blas_sgemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

const char *anvil_sgemm_impl(void) { return use_avx512() ? "avx512" : "openblas"; }
