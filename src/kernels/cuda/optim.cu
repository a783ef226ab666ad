/* The optimizer's entries: the gradient norm's sum of squares and AdamW. */
#include <math.h>

#include "kernels/cuda/cuda_internal.cuh"

/* Each block of SUMSQ_THREADS sums a fixed chunk of SUMSQ_PER_THREAD * SUMSQ_THREADS floats (thread
 * t takes every SUMSQ_THREADS-th element from t, in order, then the block's tree); one block then
 * sums the chunks' partials, thread t every SUMSQ_THREADS-th from t, then its tree. Every bound is a
 * function of n alone, so the result is the same bits on every run and every GPU of the same kind. */
#define SUMSQ_THREADS 256
#define SUMSQ_PER_THREAD 16
#define SUMSQ_CHUNK ((size_t)SUMSQ_THREADS * SUMSQ_PER_THREAD)

__global__ void sumsq_partial_kernel(double *partial, const float *__restrict__ g, size_t n) {
    __shared__ double sh[32];
    size_t base = blockIdx.x * SUMSQ_CHUNK + threadIdx.x;
    double s = 0.0;
    for (int k = 0; k < SUMSQ_PER_THREAD; k++) {
        size_t i = base + (size_t)k * SUMSQ_THREADS;
        if (i < n) {
            double v = g[i];
            s += v * v;
        }
    }
    s = cu_block_sum(s, sh);
    if (threadIdx.x == 0) partial[blockIdx.x] = s;
}

__global__ void sumsq_final_kernel(double *out, const double *__restrict__ partial, size_t parts) {
    __shared__ double sh[32];
    double s = 0.0;
    for (size_t i = threadIdx.x; i < parts; i += SUMSQ_THREADS) s += partial[i];
    s = cu_block_sum(s, sh);
    if (threadIdx.x == 0) *out = s;
}

/* In double for each square and sum; synchronous, as its caller needs the number. NaN after a
 * failure (latched: the next sync reports it). */
double cu_sumsq(const float *g, size_t n) {
    if (!cu_enter()) return NAN;
    if (!n) return 0.0;
    size_t parts = (n + SUMSQ_CHUNK - 1) / SUMSQ_CHUNK;
    double *partial = (double *)cu_scratch("sumsq", (parts + 1) * sizeof(double));
    if (!partial) return NAN;
    sumsq_partial_kernel<<<(unsigned)parts, SUMSQ_THREADS, 0, cu_g.stream>>>(partial + 1, g, n);
    cu_launched("sumsq");
    sumsq_final_kernel<<<1, SUMSQ_THREADS, 0, cu_g.stream>>>(partial, partial + 1, parts);
    cu_launched("sumsq");
    double total = NAN;
    bool ok = cu_ok("sumsq", cudaMemcpyAsync(&total, partial, sizeof total, cudaMemcpyDeviceToHost, cu_g.stream));
    cu_scratch_free(partial);
    ok = ok && cu_ok("sumsq", cudaStreamSynchronize(cu_g.stream));
    return ok && !cu_failed() ? total : NAN;
}

/* src/kernels/cpu/optim.c's update operation for operation, each rounded as there (the intrinsics
 * keep nvcc from fusing a multiply and an add the CPU rounds apart), so the two agree bit for bit. */
__global__ void adamw_kernel(float *__restrict__ p, const float *__restrict__ g, float gscale, float *__restrict__ m,
                             float *__restrict__ v, size_t n, float decay, float beta1, float beta2,
                             float one_m_b1, float one_m_b2, float step_size, float bc2_sqrt, float eps) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        float gi = __fmul_rn(g[i], gscale);
        float pi = __fmul_rn(p[i], decay);
        float mi = __fadd_rn(__fmul_rn(m[i], beta1), __fmul_rn(gi, one_m_b1));
        float vi = __fadd_rn(__fmul_rn(v[i], beta2), __fmul_rn(__fmul_rn(one_m_b2, gi), gi));
        float denom = __fadd_rn(__fdiv_rn(__fsqrt_rn(vi), bc2_sqrt), eps);
        p[i] = __fadd_rn(pi, __fdiv_rn(__fmul_rn(-step_size, mi), denom));
        m[i] = mi;
        v[i] = vi;
    }
}

void cu_adamw(float *p, const float *g, float gscale, float *m, float *v, size_t n, float lr, float beta1, float beta2, float eps,
              float weight_decay, int t) {
    if (!n || !cu_enter()) return;
    /* The scalars exactly as the CPU forms them, in double as PyTorch's Python does. */
    float decay = (float)(1.0 - (double)lr * (double)weight_decay);
    double bc1 = 1.0 - pow((double)beta1, t), bc2 = 1.0 - pow((double)beta2, t);
    float step_size = (float)((double)lr / bc1);
    float bc2_sqrt = (float)sqrt(bc2);
    float one_m_b1 = (float)(1.0 - (double)beta1), one_m_b2 = (float)(1.0 - (double)beta2);
    adamw_kernel<<<cu_blocks(n, 256), 256, 0, cu_g.stream>>>(p, g, gscale, m, v, n, decay, beta1, beta2, one_m_b1, one_m_b2,
                                                             step_size, bc2_sqrt, eps);
    cu_launched("adamw");
}
