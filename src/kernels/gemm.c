#include "kernels/gemm.h"

#include "kernels/cpu/gemm_tile.h"
#include "kernels/isa.h"

static const cpu_gemm_tile *const tiles[ANVIL_ISA_COUNT] = {&cpu_tile_generic, &cpu_tile_avx2, &cpu_tile_avx512};

void anvil_sgemm(bool ta, bool tb, int M, int N, int K, float alpha, const float *A, int lda,
                 const float *B, int ldb, float beta, float *C, int ldc) {
    cpu_gemm(tiles[anvil_isa_active()], ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

void anvil_sgemm_serial(bool ta, bool tb, int M, int N, int K, float alpha, const float *A, int lda,
                        const float *B, int ldb, float beta, float *C, int ldc) {
    cpu_gemm_serial(tiles[anvil_isa_active()], ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

int anvil_sgemm_bf16(bool ta, bool tb, int M, int N, int K, float alpha, const float *A, int lda,
                     const float *B, int ldb, float beta, float *C, int ldc) {
    anvil_bf16_kernel k = anvil_isa_bf16();
    if (k == ANVIL_BF16_NONE) return -1;
    cpu_gemm(k == ANVIL_BF16_AMX ? &cpu_tile_amx_bf16 : &cpu_tile_avx512_bf16, ta, tb, M, N, K, alpha, A, lda, B,
             ldb, beta, C, ldc);
    return 0;
}

const char *anvil_sgemm_impl(void) { return tiles[anvil_isa_active()]->name; }
