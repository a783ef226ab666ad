/* The token and position embeddings, whole or a vocabulary shard's, as
 * src/kernels/cpu/encoder.c.
 *
 * The backward sums the rows of dout of every position holding a token into
 * that token's row of dwte. Without atomics: the (token, position) pairs are
 * sorted by token with CUB's radix sort, which is stable, so each token's
 * positions stay in increasing order; then one block per token adds its
 * positions' rows in that order onto dwte's row. That is the CPU's sequence
 * of additions exactly, so both give the same bits. */
#include <cub/device/device_radix_sort.cuh>

#include "kernels/cuda/cuda_internal.cuh"

__global__ void encoder_forward_kernel(float *__restrict__ out, const int32_t *__restrict__ tokens,
                                       const float *__restrict__ wte, const float *__restrict__ wpe, int N, int T,
                                       int C, int v0, int Vs) {
    size_t total = (size_t)N * C;
    for (size_t e = blockIdx.x * (size_t)blockDim.x + threadIdx.x; e < total; e += (size_t)gridDim.x * blockDim.x) {
        int i = (int)(e / C), c = (int)(e % C);
        int64_t row = (int64_t)tokens[i] - v0;
        float pe = wpe ? wpe[(size_t)(i % T) * C + c] : 0.0f;
        if (row >= 0 && row < Vs) {
            float te = wte[(size_t)row * C + c];
            out[e] = wpe ? te + pe : te;
        } else {
            out[e] = pe;
        }
    }
}

__global__ void iota_kernel(int32_t *v, int n) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) v[i] = i;
}

/* Block i handles the run of equal tokens that starts at sorted index i (other blocks return). */
__global__ void encoder_dwte_kernel(float *__restrict__ dwte, const float *__restrict__ dout,
                                    const int32_t *__restrict__ keys, const int32_t *__restrict__ pos, int N, int C,
                                    int v0, int Vs) {
    int i = blockIdx.x;
    int32_t tok = keys[i];
    if (i > 0 && keys[i - 1] == tok) return;
    int64_t row = (int64_t)tok - v0;
    if (row < 0 || row >= Vs) return;
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        float s = dwte[(size_t)row * C + c];
        for (int j = i; j < N && keys[j] == tok; j++) s += dout[(size_t)pos[j] * C + c];
        dwte[(size_t)row * C + c] = s;
    }
}

__global__ void encoder_dwpe_kernel(float *__restrict__ dwpe, const float *__restrict__ dout, int B, int T, int C) {
    size_t total = (size_t)T * C;
    for (size_t e = blockIdx.x * (size_t)blockDim.x + threadIdx.x; e < total; e += (size_t)gridDim.x * blockDim.x) {
        float s = dwpe[e];
        for (int b = 0; b < B; b++) s += dout[(size_t)b * T * C + e];
        dwpe[e] = s;
    }
}

void cu_encoder_shard_forward(float *out, const int32_t *tokens, const float *wte, const float *wpe, int B, int T,
                              int C, int v0, int Vs) {
    if (B * T <= 0 || !cu_enter()) return;
    size_t total = (size_t)B * T * C;
    encoder_forward_kernel<<<cu_blocks(total, 256), 256, 0, cu_g.stream>>>(out, tokens, wte, wpe, B * T, T, C, v0,
                                                                           Vs);
    cu_launched("encoder_forward");
}

void cu_encoder_forward(float *out, const int32_t *tokens, const float *wte, const float *wpe, int B, int T, int C) {
    cu_encoder_shard_forward(out, tokens, wte, wpe, B, T, C, 0, INT32_MAX);
}

/* The sorted (token, position) pairs of tokens[N]; the caller frees keys (one scratch block). */
static bool sort_tokens(const int32_t *tokens, int N, int32_t **keys, int32_t **pos) {
    size_t temp_bytes = 0;
    if (!cu_ok("encoder_backward", cub::DeviceRadixSort::SortPairs(nullptr, temp_bytes, tokens, (int32_t *)nullptr,
                                                                    (const int32_t *)nullptr, (int32_t *)nullptr, N,
                                                                    0, 32, cu_g.stream)))
        return false;
    size_t pairs = ((size_t)N * sizeof(int32_t) + 255) / 256 * 256; /* each array on its own 256 bytes */
    char *mem = (char *)cu_scratch("encoder_backward", 3 * pairs + temp_bytes);
    if (!mem) return false;
    *keys = (int32_t *)mem;
    *pos = (int32_t *)(mem + pairs);
    int32_t *iota = (int32_t *)(mem + 2 * pairs);
    void *temp = mem + 3 * pairs;
    iota_kernel<<<cu_blocks((size_t)N, 256), 256, 0, cu_g.stream>>>(iota, N);
    bool ok = cu_launched("encoder_backward") &&
              cu_ok("encoder_backward", cub::DeviceRadixSort::SortPairs(temp, temp_bytes, tokens, *keys, iota, *pos,
                                                                         N, 0, 32, cu_g.stream));
    if (!ok) cu_scratch_free(mem);
    return ok;
}

void cu_encoder_shard_backward(float *dwte, float *dwpe, const float *dout, const int32_t *tokens, int B, int T,
                               int C, int v0, int Vs) {
    int N = B * T;
    if (N <= 0 || !cu_enter()) return;
    int32_t *keys, *pos;
    if (!sort_tokens(tokens, N, &keys, &pos)) return;
    encoder_dwte_kernel<<<(unsigned)N, 128, 0, cu_g.stream>>>(dwte, dout, keys, pos, N, C, v0, Vs);
    cu_launched("encoder_backward");
    cu_scratch_free(keys);
    if (!dwpe) return;
    size_t total = (size_t)T * C;
    encoder_dwpe_kernel<<<cu_blocks(total, 256), 256, 0, cu_g.stream>>>(dwpe, dout, B, T, C);
    cu_launched("encoder_backward");
}

void cu_encoder_backward(float *dwte, float *dwpe, const float *dout, const int32_t *tokens, int B, int T, int C) {
    cu_encoder_shard_backward(dwte, dwpe, dout, tokens, B, T, C, 0, INT32_MAX);
}
