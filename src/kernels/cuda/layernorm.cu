/* LayerNorm forward and backward, as src/kernels/cpu/layernorm.c: one warp per row for the
 * statistics and dx; dw and db summed over rows in fixed chunks, the chunks then added in order. */
#include "kernels/cuda/cuda_internal.cuh"

#define LN_EPS 1e-5f
#define ROWS_PER_BLOCK 8 /* warps per block, one row each */
#define CHUNK_ROWS 256   /* rows per partial sum of dw and db */

__global__ void layernorm_forward_kernel(float *__restrict__ out, float *__restrict__ mean, float *__restrict__ rstd,
                                         const float *__restrict__ x, const float *__restrict__ w,
                                         const float *__restrict__ b, int N, int C) {
    int row = blockIdx.x * ROWS_PER_BLOCK + (threadIdx.x >> 5), lane = threadIdx.x & 31;
    if (row >= N) return;
    const float *xi = x + (size_t)row * C;
    float s = 0.0f;
    for (int c = lane; c < C; c += 32) s += xi[c];
    float m = cu_warp_sum(s) / C;
    float v = 0.0f;
    for (int c = lane; c < C; c += 32) {
        float d = xi[c] - m;
        v += d * d;
    }
    float r = 1.0f / sqrtf(cu_warp_sum(v) / C + LN_EPS);
    float *oi = out + (size_t)row * C;
    for (int c = lane; c < C; c += 32) oi[c] = (xi[c] - m) * r * w[c] + b[c];
    if (lane == 0) {
        mean[row] = m;
        rstd[row] = r;
    }
}

__global__ void layernorm_dx_kernel(float *__restrict__ dx, const float *__restrict__ dout,
                                    const float *__restrict__ x, const float *__restrict__ w,
                                    const float *__restrict__ mean, const float *__restrict__ rstd, int N, int C) {
    int row = blockIdx.x * ROWS_PER_BLOCK + (threadIdx.x >> 5), lane = threadIdx.x & 31;
    if (row >= N) return;
    const float *xi = x + (size_t)row * C, *di = dout + (size_t)row * C;
    float m = mean[row], r = rstd[row];
    float sum_dn = 0.0f, sum_dn_xhat = 0.0f;
    for (int c = lane; c < C; c += 32) {
        float xhat = (xi[c] - m) * r, dn = di[c] * w[c];
        sum_dn += dn;
        sum_dn_xhat += dn * xhat;
    }
    sum_dn = cu_warp_sum(sum_dn) / C;
    sum_dn_xhat = cu_warp_sum(sum_dn_xhat) / C;
    float *dxi = dx + (size_t)row * C;
    for (int c = lane; c < C; c += 32) {
        float xhat = (xi[c] - m) * r, dn = di[c] * w[c];
        dxi[c] += (dn - sum_dn - xhat * sum_dn_xhat) * r;
    }
}

/* Block (32, 8) over 32 columns of one chunk of rows: thread (tx, ty) sums rows ty, ty + 8, ...
 * of column tx, then the 8 are added in order. pw/pb[chunk * C + c]. */
__global__ void layernorm_dwdb_partial_kernel(float *__restrict__ pw, float *__restrict__ pb,
                                              const float *__restrict__ dout, const float *__restrict__ x,
                                              const float *__restrict__ mean, const float *__restrict__ rstd, int N,
                                              int C) {
    __shared__ float sw[8][32], sb[8][32];
    int c = blockIdx.x * 32 + threadIdx.x, r0 = blockIdx.y * CHUNK_ROWS;
    int r1 = r0 + CHUNK_ROWS < N ? r0 + CHUNK_ROWS : N;
    float aw = 0.0f, ab = 0.0f;
    if (c < C)
        for (int r = r0 + threadIdx.y; r < r1; r += 8) {
            float d = dout[(size_t)r * C + c];
            ab += d;
            aw += (x[(size_t)r * C + c] - mean[r]) * rstd[r] * d;
        }
    sw[threadIdx.y][threadIdx.x] = aw;
    sb[threadIdx.y][threadIdx.x] = ab;
    __syncthreads();
    if (threadIdx.y == 0 && c < C) {
        float tw = 0.0f, tb = 0.0f;
        for (int k = 0; k < 8; k++) {
            tw += sw[k][threadIdx.x];
            tb += sb[k][threadIdx.x];
        }
        pw[(size_t)blockIdx.y * C + c] = tw;
        pb[(size_t)blockIdx.y * C + c] = tb;
    }
}

__global__ void layernorm_dwdb_final_kernel(float *__restrict__ dw, float *__restrict__ db,
                                            const float *__restrict__ pw, const float *__restrict__ pb, int chunks,
                                            int C) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    float tw = 0.0f, tb = 0.0f;
    for (int k = 0; k < chunks; k++) {
        tw += pw[(size_t)k * C + c];
        tb += pb[(size_t)k * C + c];
    }
    dw[c] += tw;
    db[c] += tb;
}

void cu_layernorm_forward(float *out, float *mean, float *rstd, const float *x, const float *w, const float *b, int N,
                          int C) {
    if (N <= 0 || !cu_enter()) return;
    unsigned blocks = (unsigned)((N + ROWS_PER_BLOCK - 1) / ROWS_PER_BLOCK);
    layernorm_forward_kernel<<<blocks, 32 * ROWS_PER_BLOCK, 0, cu_g.stream>>>(out, mean, rstd, x, w, b, N, C);
    cu_launched("layernorm_forward");
}

void cu_layernorm_backward(float *dx, float *dw, float *db, const float *dout, const float *x, const float *w,
                           const float *mean, const float *rstd, int N, int C) {
    if (N <= 0 || !cu_enter()) return;
    unsigned blocks = (unsigned)((N + ROWS_PER_BLOCK - 1) / ROWS_PER_BLOCK);
    layernorm_dx_kernel<<<blocks, 32 * ROWS_PER_BLOCK, 0, cu_g.stream>>>(dx, dout, x, w, mean, rstd, N, C);
    cu_launched("layernorm_backward");
    int chunks = (N + CHUNK_ROWS - 1) / CHUNK_ROWS;
    float *pw = (float *)cu_scratch("layernorm_backward", 2 * sizeof(float) * (size_t)chunks * C);
    if (!pw) return;
    float *pb = pw + (size_t)chunks * C;
    dim3 grid((unsigned)((C + 31) / 32), (unsigned)chunks);
    layernorm_dwdb_partial_kernel<<<grid, dim3(32, 8), 0, cu_g.stream>>>(pw, pb, dout, x, mean, rstd, N, C);
    cu_launched("layernorm_backward");
    layernorm_dwdb_final_kernel<<<(unsigned)((C + 255) / 256), 256, 0, cu_g.stream>>>(dw, db, pw, pb, chunks, C);
    cu_launched("layernorm_backward");
    cu_scratch_free(pw);
}
