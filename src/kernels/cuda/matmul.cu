/* The matmuls, on cuBLASLt: the linear layers here, and the GEMM every other
 * file multiplies with (cu_gemm).
 *
 * cuBLASLt is column-major; a row-major matrix is the column-major view of
 * its transpose, so row-major C = op(A) op(B) is column-major
 * C^T = op(B)^T op(A)^T: the operands swap places and keep their transpose
 * flags. The linear layer out[N,OC] = x[N,C] w[OC,C]^T is therefore cuBLASLt's
 * "TN" product of w and x, the layout its tensor-core kernels like best.
 *
 * fp32 computes with CUBLAS_COMPUTE_32F, which never uses TF32. bf16 rounds
 * each operand to bf16 (nearest even) into scratch memory first and sums in
 * fp32 (CUBLAS_COMPUTE_32F on bf16 inputs), as the CPU's bf16 tiles do; the
 * bias and its gradient stay fp32. cuBLASLt gives the same bits on every run
 * on the same GPU model and library version, and the algorithm is picked by
 * its heuristic from the shapes and pointer alignments alone. */
#include <string.h>

#include "kernels/cuda/cuda_internal.cuh"

#define CHUNK_ROWS 256 /* rows per partial column sum */

/* The largest power of two up to 256 that divides the address: what the heuristic may assume. */
static uint32_t alignment(const void *p) {
    uint32_t a = 256;
    while (a > 1 && (uintptr_t)p % a) a >>= 1;
    return a;
}

struct lt_plan {
    cublasLtMatmulDesc_t op = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
    cublasLtMatmulPreference_t pref = nullptr;
    ~lt_plan() {
        if (pref) cublasLtMatmulPreferenceDestroy(pref);
        if (d) cublasLtMatrixLayoutDestroy(d);
        if (b) cublasLtMatrixLayoutDestroy(b);
        if (a) cublasLtMatrixLayoutDestroy(a);
        if (op) cublasLtMatmulDescDestroy(op);
    }
};

enum lt_result { LT_DONE, LT_NO_ALGORITHM, LT_FAILED };

/* Column-major D[m,n] = op(X) op(Y) + beta D, plus bias[m] on every column through cuBLASLt's
 * epilogue when bias is not NULL; X and Y stored as cuBLASLt expects for their ops, with leading
 * dimensions ldx, ldy, ldd. LT_NO_ALGORITHM (nothing latched) when the heuristic has none. */
static lt_result lt_run(const char *what, bool bf16, cublasOperation_t ox, cublasOperation_t oy, int m, int n,
                        int k, const void *X, int ldx, const void *Y, int ldy, float beta, float *D, int ldd,
                        const float *bias) {
    lt_plan p;
    cudaDataType_t in = bf16 ? CUDA_R_16BF : CUDA_R_32F;
    cublasLtEpilogue_t epi = bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
    uint64_t ws = cu_g.workspace_bytes;
    uint32_t ax = alignment(X), ay = alignment(Y), ad = alignment(D);
    bool ok = cu_blas_ok(what, cublasLtMatmulDescCreate(&p.op, CUBLAS_COMPUTE_32F, CUDA_R_32F)) &&
              cu_blas_ok(what, cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSA, &ox, sizeof ox)) &&
              cu_blas_ok(what, cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSB, &oy, sizeof oy)) &&
              cu_blas_ok(what, cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi)) &&
              (!bias || cu_blas_ok(what, cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias,
                                                                        sizeof bias))) &&
              cu_blas_ok(what, cublasLtMatrixLayoutCreate(&p.a, in, ox == CUBLAS_OP_N ? m : k,
                                                          ox == CUBLAS_OP_N ? k : m, ldx)) &&
              cu_blas_ok(what, cublasLtMatrixLayoutCreate(&p.b, in, oy == CUBLAS_OP_N ? k : n,
                                                          oy == CUBLAS_OP_N ? n : k, ldy)) &&
              cu_blas_ok(what, cublasLtMatrixLayoutCreate(&p.d, CUDA_R_32F, m, n, ldd)) &&
              cu_blas_ok(what, cublasLtMatmulPreferenceCreate(&p.pref)) &&
              cu_blas_ok(what, cublasLtMatmulPreferenceSetAttribute(p.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                                    &ws, sizeof ws)) &&
              cu_blas_ok(what, cublasLtMatmulPreferenceSetAttribute(
                                   p.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &ax, sizeof ax)) &&
              cu_blas_ok(what, cublasLtMatmulPreferenceSetAttribute(
                                   p.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &ay, sizeof ay)) &&
              cu_blas_ok(what, cublasLtMatmulPreferenceSetAttribute(
                                   p.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &ad, sizeof ad)) &&
              cu_blas_ok(what, cublasLtMatmulPreferenceSetAttribute(
                                   p.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &ad, sizeof ad));
    if (!ok) return LT_FAILED;
    cublasLtMatmulHeuristicResult_t h;
    int found = 0;
    cublasStatus_t hs = cublasLtMatmulAlgoGetHeuristic(cu_g.lt, p.op, p.a, p.b, p.d, p.d, p.pref, 1, &h, &found);
    if (hs == CUBLAS_STATUS_NOT_SUPPORTED || (hs == CUBLAS_STATUS_SUCCESS && found < 1)) return LT_NO_ALGORITHM;
    if (!cu_blas_ok(what, hs)) return LT_FAILED;
    const float alpha = 1.0f;
    return cu_blas_ok(what, cublasLtMatmul(cu_g.lt, p.op, &alpha, X, p.a, Y, p.b, &beta, D, p.d, D, p.d, &h.algo,
                                           cu_g.workspace, cu_g.workspace_bytes, cu_g.stream))
               ? LT_DONE
               : LT_FAILED;
}

/* Column-major D[i + j * ldd] += bias[i]. */
__global__ void add_bias_kernel(float *__restrict__ D, const float *__restrict__ bias, int m, int n, int ldd) {
    size_t total = (size_t)m * n;
    for (size_t e = blockIdx.x * (size_t)blockDim.x + threadIdx.x; e < total; e += (size_t)gridDim.x * blockDim.x) {
        size_t j = e / m, i = e % m;
        D[i + j * ldd] += bias[i];
    }
}

/* The bias through the epilogue where cuBLASLt takes it (it wants the vector 16-byte aligned), else
 * the product alone and the bias added after it, the order the CPU adds it in. */
static void lt_matmul(const char *what, bool bf16, cublasOperation_t ox, cublasOperation_t oy, int m, int n, int k,
                      const void *X, int ldx, const void *Y, int ldy, float beta, float *D, int ldd,
                      const float *bias) {
    if (bias && alignment(bias) >= 16) {
        lt_result r = lt_run(what, bf16, ox, oy, m, n, k, X, ldx, Y, ldy, beta, D, ldd, bias);
        if (r != LT_NO_ALGORITHM) return;
    }
    lt_result r = lt_run(what, bf16, ox, oy, m, n, k, X, ldx, Y, ldy, beta, D, ldd, nullptr);
    if (r == LT_NO_ALGORITHM)
        cu_latch(what, "cuBLASLt has no algorithm for %s m=%d n=%d k=%d", bf16 ? "bf16" : "fp32", m, n, k);
    if (r != LT_DONE || !bias) return;
    size_t total = (size_t)m * n;
    add_bias_kernel<<<cu_blocks(total, 256), 256, 0, cu_g.stream>>>(D, bias, m, n, ldd);
    cu_launched(what);
}

void cu_gemm(const char *what, bool bf16, bool ta, bool tb, int M, int N, int K, const void *A, int lda,
             const void *B, int ldb, float beta, float *C, int ldc, const float *bias) {
    if (M <= 0 || N <= 0 || cu_failed()) return;
    if (K <= 0) {
        cu_latch(what, "a product over an empty inner dimension (K=%d)", K);
        return;
    }
    lt_matmul(what, bf16, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N, N, M, K, B, ldb, A, lda,
              beta, C, ldc, bias);
}

__global__ void to_bf16_kernel(__nv_bfloat16 *__restrict__ dst, const float *__restrict__ src, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        dst[i] = __float2bfloat16_rn(src[i]);
}

/* Four at a time (16-byte loads, 8-byte stores), for src 16-byte and dst 8-byte aligned. */
__global__ void to_bf16_x4_kernel(uint2 *__restrict__ dst, const float4 *__restrict__ src, size_t n4) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n4; i += (size_t)gridDim.x * blockDim.x) {
        float4 v = src[i];
        __nv_bfloat162 lo = __floats2bfloat162_rn(v.x, v.y), hi = __floats2bfloat162_rn(v.z, v.w);
        uint2 w;
        memcpy(&w.x, &lo, sizeof w.x);
        memcpy(&w.y, &hi, sizeof w.y);
        dst[i] = w;
    }
}

void cu_to_bf16(const char *what, __nv_bfloat16 *dst, const float *src, size_t n) {
    if (!n) return;
    size_t n4 = (uintptr_t)src % 16 == 0 && (uintptr_t)dst % 8 == 0 ? n / 4 : 0;
    if (n4) {
        to_bf16_x4_kernel<<<cu_blocks(n4, 256), 256, 0, cu_g.stream>>>((uint2 *)dst, (const float4 *)src, n4);
        cu_launched(what);
    }
    if (n4 * 4 < n) {
        to_bf16_kernel<<<cu_blocks(n - n4 * 4, 256), 256, 0, cu_g.stream>>>(dst + n4 * 4, src + n4 * 4, n - n4 * 4);
        cu_launched(what);
    }
}

/* Block (32, 8) over 32 columns of one chunk of rows, as layernorm's dw: partial[chunk * cols + c]. */
__global__ void colsum_partial_kernel(float *__restrict__ partial, const float *__restrict__ m, int rows, int cols) {
    __shared__ float sh[8][32];
    int c = blockIdx.x * 32 + threadIdx.x, r0 = blockIdx.y * CHUNK_ROWS;
    int r1 = r0 + CHUNK_ROWS < rows ? r0 + CHUNK_ROWS : rows;
    float a = 0.0f;
    if (c < cols)
        for (int r = r0 + threadIdx.y; r < r1; r += 8) a += m[(size_t)r * cols + c];
    sh[threadIdx.y][threadIdx.x] = a;
    __syncthreads();
    if (threadIdx.y == 0 && c < cols) {
        float t = 0.0f;
        for (int k = 0; k < 8; k++) t += sh[k][threadIdx.x];
        partial[(size_t)blockIdx.y * cols + c] = t;
    }
}

__global__ void colsum_final_kernel(float *__restrict__ acc, const float *__restrict__ partial, int chunks, int cols) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= cols) return;
    float t = 0.0f;
    for (int k = 0; k < chunks; k++) t += partial[(size_t)k * cols + c];
    acc[c] += t;
}

void cu_colsum_acc(const char *what, float *acc, const float *m, int rows, int cols) {
    if (rows <= 0 || cols <= 0) return;
    int chunks = (rows + CHUNK_ROWS - 1) / CHUNK_ROWS;
    float *partial = (float *)cu_scratch(what, sizeof(float) * (size_t)chunks * cols);
    if (!partial) return;
    colsum_partial_kernel<<<dim3((unsigned)((cols + 31) / 32), (unsigned)chunks), dim3(32, 8), 0, cu_g.stream>>>(
        partial, m, rows, cols);
    cu_launched(what);
    colsum_final_kernel<<<(unsigned)((cols + 255) / 256), 256, 0, cu_g.stream>>>(acc, partial, chunks, cols);
    cu_launched(what);
    cu_scratch_free(partial);
}

static size_t up256(size_t bytes) { return (bytes + 255) / 256 * 256; }

static void forward(bool bf16, float *out, const float *x, const float *w, const float *b, int N, int C, int OC,
                    int accumulate) {
    if (N <= 0 || OC <= 0 || !cu_enter()) return;
    const char *what = "matmul_forward";
    float beta = accumulate ? 1.0f : 0.0f;
    if (!bf16) {
        cu_gemm(what, false, false, true, N, OC, C, x, C, w, C, beta, out, OC, b);
        return;
    }
    size_t nx = (size_t)N * C, nw = (size_t)OC * C;
    char *mem = (char *)cu_scratch(what, up256(nx * 2) + nw * 2);
    if (!mem) return;
    __nv_bfloat16 *x16 = (__nv_bfloat16 *)mem, *w16 = (__nv_bfloat16 *)(mem + up256(nx * 2));
    cu_to_bf16(what, x16, x, nx);
    cu_to_bf16(what, w16, w, nw);
    cu_gemm(what, true, false, true, N, OC, C, x16, C, w16, C, beta, out, OC, b);
    cu_scratch_free(mem);
}

static void backward(bool bf16, float *dx, float *dw, float *db, const float *dout, const float *x, const float *w,
                     int N, int C, int OC) {
    if (N <= 0 || OC <= 0 || !cu_enter()) return;
    const char *what = "matmul_backward";
    const void *d_op = dout, *x_op = x, *w_op = w;
    char *mem = nullptr;
    if (bf16) {
        size_t nd = (size_t)N * OC, nx = (size_t)N * C, nw = (size_t)OC * C;
        mem = (char *)cu_scratch(what, up256(nd * 2) + up256(nx * 2) + nw * 2);
        if (!mem) return;
        __nv_bfloat16 *d16 = (__nv_bfloat16 *)mem, *x16 = (__nv_bfloat16 *)(mem + up256(nd * 2));
        __nv_bfloat16 *w16 = (__nv_bfloat16 *)(mem + up256(nd * 2) + up256(nx * 2));
        cu_to_bf16(what, d16, dout, nd);
        cu_to_bf16(what, x16, x, nx);
        if (dx) cu_to_bf16(what, w16, w, nw);
        d_op = d16;
        x_op = x16;
        w_op = w16;
    }
    if (dx) cu_gemm(what, bf16, false, false, N, C, OC, d_op, OC, w_op, C, 0.0f, dx, C, nullptr);
    cu_gemm(what, bf16, true, false, OC, C, N, d_op, OC, x_op, C, 1.0f, dw, C, nullptr);
    if (db) cu_colsum_acc(what, db, dout, N, OC);
    cu_scratch_free(mem);
}

void cu_matmul_forward_f32(float *out, const float *x, const float *w, const float *b, int N, int C, int OC,
                           int accumulate) {
    forward(false, out, x, w, b, N, C, OC, accumulate);
}
void cu_matmul_forward_bf16(float *out, const float *x, const float *w, const float *b, int N, int C, int OC,
                            int accumulate) {
    forward(true, out, x, w, b, N, C, OC, accumulate);
}
void cu_matmul_backward_f32(float *dx, float *dw, float *db, const float *dout, const float *x, const float *w, int N,
                            int C, int OC) {
    backward(false, dx, dw, db, dout, x, w, N, C, OC);
}
void cu_matmul_backward_bf16(float *dx, float *dw, float *db, const float *dout, const float *x, const float *w,
                             int N, int C, int OC) {
    backward(true, dx, dw, db, dout, x, w, N, C, OC);
}
