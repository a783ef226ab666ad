/* GELU (tanh form) and the residual stream's elementwise entries, as
 * src/kernels/cpu/elementwise.c computes them. */
#include "kernels/cuda/cuda_internal.cuh"

#define THREADS 256
#define GELU_K 0.7978845608028654f /* sqrt(2/pi) */

#define GRID_STRIDE(i, n) for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < (n); i += (size_t)gridDim.x * blockDim.x)

__global__ void gelu_forward_kernel(float *__restrict__ out, const float *__restrict__ x, size_t n) {
    GRID_STRIDE(i, n) {
        float v = x[i];
        float u = GELU_K * (v + 0.044715f * v * v * v);
        out[i] = 0.5f * v * (1.0f + tanhf(u));
    }
}

/* dx may be dout (in place): each element is read before it is written. */
__global__ void gelu_backward_kernel(float *dx, const float *__restrict__ x, const float *dout, size_t n) {
    GRID_STRIDE(i, n) {
        float v = x[i];
        float u = GELU_K * (v + 0.044715f * v * v * v);
        float th = tanhf(u);
        float sech2 = 1.0f - th * th;
        float grad = 0.5f * (1.0f + th) + 0.5f * v * sech2 * GELU_K * (1.0f + 3.0f * 0.044715f * v * v);
        dx[i] = grad * dout[i];
    }
}

__global__ void add_kernel(float *__restrict__ dst, const float *__restrict__ src, size_t n) {
    GRID_STRIDE(i, n) dst[i] += src[i];
}

void cu_gelu_forward(float *out, const float *x, size_t n) {
    if (!n || !cu_enter()) return;
    gelu_forward_kernel<<<cu_blocks(n, THREADS), THREADS, 0, cu_g.stream>>>(out, x, n);
    cu_launched("gelu_forward");
}

void cu_gelu_backward(float *dx, const float *x, const float *dout, size_t n) {
    if (!n || !cu_enter()) return;
    gelu_backward_kernel<<<cu_blocks(n, THREADS), THREADS, 0, cu_g.stream>>>(dx, x, dout, n);
    cu_launched("gelu_backward");
}

void cu_copy(float *dst, const float *src, size_t n) {
    if (!n || !cu_enter()) return;
    cu_ok("copy", cudaMemcpyAsync(dst, src, n * sizeof(float), cudaMemcpyDeviceToDevice, cu_g.stream));
}

void cu_add_inplace(float *dst, const float *src, size_t n) {
    if (!n || !cu_enter()) return;
    add_kernel<<<cu_blocks(n, THREADS), THREADS, 0, cu_g.stream>>>(dst, src, n);
    cu_launched("add_inplace");
}

