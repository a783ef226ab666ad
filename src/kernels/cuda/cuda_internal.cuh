/* The CUDA backend's shared internals: the device state, the error latch,
 * stream-ordered scratch memory, reductions, and every kernel-table entry,
 * one file per family as in src/kernels/cpu. Internal to src/kernels/cuda;
 * the public face is kernels/cuda.h, reached through the module's entry
 * (module.cu, kernels/cuda_module.h). The module is built with hidden
 * visibility: nothing here but that entry is seen outside it.
 *
 * Every entry runs on the one stream in cu_g, so kernels see each other's
 * results in call order with no further synchronization, and scratch memory
 * taken with cudaMallocAsync on that stream may be freed (cudaFreeAsync)
 * right after the kernels that use it are queued.
 *
 * Errors: the void entries cannot return one, so the first CUDA or cuBLAS
 * error is latched (cu_latch, with the entry's name) and reported by the
 * next call that can fail (the table's sync, the int-returning entries).
 *
 * Determinism: no kernel uses atomics; every reduction is a fixed tree (a
 * warp's butterfly, then a block's warps in order, then blocks in order)
 * whose shape depends on the sizes alone, so a run repeats bit for bit. */
#ifndef ANVIL_KERNELS_CUDA_CUDA_INTERNAL_CUH
#define ANVIL_KERNELS_CUDA_CUDA_INTERNAL_CUH

#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>

extern "C" {
#include "core/error.h"
#include "kernels/cuda.h"
#include "kernels/kernels.h"
}

struct cu_state {
    int dev;                 /* the device the process is bound to; -1 before */
    cudaStream_t stream;     /* every kernel and copy of the tables */
    cublasLtHandle_t lt;
    void *workspace;         /* cuBLASLt's, used in stream order */
    size_t workspace_bytes;
};
extern cu_state cu_g;

/* kernels/cuda.h's entry points (backend.cu), handed out by module.cu. */
int cu_device_count(void);
int cu_device_info(int device, anvil_cuda_device *info);
const anvil_kernels *cu_kernels(int device, anvil_matmul_dtype dtype);
void *cu_stream(void);

/* Makes cu_g.dev the calling thread's device (once per thread); false after latching. */
bool cu_enter(void);
/* Records the first error only: "cuda: <what>: <message>". */
void cu_latch(const char *what, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* true when e is cudaSuccess, else latches it under what. */
bool cu_ok(const char *what, cudaError_t e);
/* true when the cuBLASLt call succeeded, else latches it under what. */
bool cu_blas_ok(const char *what, cublasStatus_t s);
/* After a kernel launch: latches a launch error under what. */
bool cu_launched(const char *what);
bool cu_failed(void);
/* -1 after anvil_fail with the latched message, or 0 when nothing failed. */
int cu_status(void);

/* Device memory in stream order, for one call's temporaries; NULL after latching. */
void *cu_scratch(const char *what, size_t bytes);
void cu_scratch_free(void *p);

/* Blocks of `threads` for a grid-stride loop over n elements. */
static inline unsigned cu_blocks(size_t n, unsigned threads) {
    size_t b = (n + threads - 1) / threads;
    const size_t cap = (size_t)1 << 20;
    return (unsigned)(b == 0 ? 1 : b < cap ? b : cap);
}

/* Sum and max over a warp by butterfly: every lane ends with the same bits
 * (each step adds the same two numbers on both lanes of a pair). */
template <typename T> __device__ __forceinline__ T cu_warp_sum(T v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ float cu_warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

/* Sum over the block (blockDim.x a multiple of 32, at most 1024), returned
 * to every thread; sh holds 32 values. A fixed tree for a fixed blockDim. */
template <typename T> __device__ T cu_block_sum(T v, T *sh) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = cu_warp_sum(v);
    __syncthreads();
    if (lane == 0) sh[warp] = v;
    __syncthreads();
    T r = lane < nw ? sh[lane] : T(0);
    r = cu_warp_sum(r);
    return r;
}
__device__ __forceinline__ float cu_block_max(float v, float *sh) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = cu_warp_max(v);
    __syncthreads();
    if (lane == 0) sh[warp] = v;
    __syncthreads();
    float r = lane < nw ? sh[lane] : -INFINITY;
    return cu_warp_max(r);
}

/* bf16 copies of fp32 operands for the bf16 matmuls (round to nearest even). */
void cu_to_bf16(const char *what, __nv_bfloat16 *dst, const float *src, size_t n);

/* Row-major C[M,N] = op(A) @ op(B) + beta * C, plus bias[N] on every row when bias is not NULL,
 * as cpu_gemm: op(A) is A[M,K] with leading dimension lda or, with ta, the transpose of A[K,M].
 * A and B are fp32 (true fp32 arithmetic), or bf16 when bf16 (fp32 sums); C is fp32. */
void cu_gemm(const char *what, bool bf16, bool ta, bool tb, int M, int N, int K, const void *A, int lda,
             const void *B, int ldb, float beta, float *C, int ldc, const float *bias);
/* acc[c] += sum over rows r of m[r * cols + c], summed in a fixed order. */
void cu_colsum_acc(const char *what, float *acc, const float *m, int rows, int cols);

/* The table's entries, by family. *_f32 and *_bf16 pairs differ in what their matmuls multiply. */
void cu_encoder_forward(float *out, const int32_t *tokens, const float *wte, const float *wpe, int B, int T, int C);
void cu_encoder_backward(float *dwte, float *dwpe, const float *dout, const int32_t *tokens, int B, int T, int C);
void cu_encoder_shard_forward(float *out, const int32_t *tokens, const float *wte, const float *wpe, int B, int T,
                              int C, int v0, int Vs);
void cu_encoder_shard_backward(float *dwte, float *dwpe, const float *dout, const int32_t *tokens, int B, int T,
                               int C, int v0, int Vs);
void cu_layernorm_forward(float *out, float *mean, float *rstd, const float *x, const float *w, const float *b, int N,
                          int C);
void cu_layernorm_backward(float *dx, float *dw, float *db, const float *dout, const float *x, const float *w,
                           const float *mean, const float *rstd, int N, int C);
void cu_matmul_forward_f32(float *out, const float *x, const float *w, const float *b, int N, int C, int OC,
                           int accumulate);
void cu_matmul_forward_bf16(float *out, const float *x, const float *w, const float *b, int N, int C, int OC,
                            int accumulate);
void cu_matmul_backward_f32(float *dx, float *dw, float *db, const float *dout, const float *x, const float *w, int N,
                            int C, int OC);
void cu_matmul_backward_bf16(float *dx, float *dw, float *db, const float *dout, const float *x, const float *w,
                             int N, int C, int OC);
int cu_attention_forward(float *out, float *lse, const float *qkv, int B, int T, int C, int NH);
int cu_attention_backward(float *dqkv, const float *dout, const float *out, const float *lse, const float *qkv, int B,
                          int T, int C, int NH);
int cu_attention_forward_bf16(float *out, float *lse, const float *qkv, int B, int T, int C, int NH);
int cu_attention_backward_bf16(float *dqkv, const float *dout, const float *out, const float *lse, const float *qkv,
                               int B, int T, int C, int NH);
/* Shared by the fp32 and bf16 attention: C / NH checked (1 to 128), or -1 after anvil_fail; and
 * D[B,NH,T] = rowsum(dout * out) per head, in scratch the caller frees (NULL after latching). */
int cu_attention_head_size(const char *what, int C, int NH);
float *cu_attention_rowdot(const char *what, const float *dout, const float *out, int B, int T, int C, int NH);
int cu_attention_decode(float *out, const float *q, const float *kcache, const float *vcache, int n, int C, int NH);
void cu_gelu_forward(float *out, const float *x, size_t n);
void cu_gelu_backward(float *dx, const float *x, const float *dout, size_t n);
void cu_copy(float *dst, const float *src, size_t n);
void cu_add_inplace(float *dst, const float *src, size_t n);
int cu_classifier_f32(float *losses, float *dx, float *dwte, const float *x, const float *wte, const int32_t *targets,
                      int N, int C, int V, int Vp, float dscale);
int cu_classifier_bf16(float *losses, float *dx, float *dwte, const float *x, const float *wte,
                       const int32_t *targets, int N, int C, int V, int Vp, float dscale);
int cu_classifier_shard_stats_f32(float *lse, float *target_logit, const float *x, const float *wte,
                                  const int32_t *targets, int N, int C, int v0, int Vr, int Vs);
int cu_classifier_shard_stats_bf16(float *lse, float *target_logit, const float *x, const float *wte,
                                   const int32_t *targets, int N, int C, int v0, int Vr, int Vs);
int cu_classifier_shard_backward_f32(float *dx, float *dwte, const float *x, const float *wte, const float *lse,
                                     const int32_t *targets, int N, int C, int v0, int Vr, int Vs, float dscale);
int cu_classifier_shard_backward_bf16(float *dx, float *dwte, const float *x, const float *wte, const float *lse,
                                      const int32_t *targets, int N, int C, int v0, int Vr, int Vs, float dscale);
void cu_logits_f32(float *logits, const float *x, const float *wte, int N, int C, int Vp);
void cu_logits_bf16(float *logits, const float *x, const float *wte, int N, int C, int Vp);
double cu_sumsq(const float *g, size_t n);
void cu_adamw(float *p, const float *g, float gscale, float *m, float *v, size_t n, float lr, float beta1, float beta2, float eps,
              float weight_decay, int t);

#endif
