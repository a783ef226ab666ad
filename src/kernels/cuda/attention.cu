/* Causal attention in fp32, flash style, as src/kernels/cpu/attention.c
 * computes it: scores a tile at a time with an online softmax, only each
 * row's log-sum-exp kept, and the backward recomputing the probabilities
 * from it. No T x T matrix exists, in memory or in shared memory.
 *
 * One warp owns one row: a query row in the forward and in the backward's
 * dQ kernel, a key row in the backward's dK/dV kernel. Its 32 lanes take the
 * 32 keys (or queries) of a tile, each lane one dot product; the row's
 * output is spread over the lanes, dimension d on lane d % 32, and each
 * lane walks the tile's 32 probabilities (broadcast by shuffles) in order.
 * A block's 8 warps share the tile, loaded once into shared memory. Every
 * gradient is written by the one warp that owns its row, summed in a fixed
 * order: no atomics, and the same bits on every run.
 *
 * Head sizes 1 to 128 (up to 4 dimensions per lane). Layout: qkv[B,T,3C]
 * (q, k, v side by side, head h at columns h*hd of each), out[B,T,C],
 * lse[B,NH,T]. */
#include "kernels/cuda/cuda_internal.cuh"

#define ROWS 8  /* warps per block, one row each */
#define TILE 32 /* keys (or queries) per tile: one per lane */
#define MAX_HEAD 128
#define FULL 0xffffffffu

struct attn_shape {
    int T, C, NH, hd;
    float scale;
};

/* Rows [r0, r0 + TILE) of one head's q, k or v (at column offset col), into a padded tile (row
 * stride hd + 1 keeps the lanes' dot products on distinct banks); rows past T are zero. */
__device__ void load_tile(float *tile, const float *base, size_t ld, int r0, int T, int hd) {
    for (int e = threadIdx.x; e < TILE * hd; e += blockDim.x) {
        int j = e / hd, d = e % hd, r = r0 + j;
        tile[j * (hd + 1) + d] = r < T ? base[(size_t)r * ld + d] : 0.0f;
    }
}

__device__ float dot_row(const float *a, const float *b, int hd) {
    float s = 0.0f;
    for (int d = 0; d < hd; d++) s += a[d] * b[d];
    return s;
}

/* Grid (B*NH, query blocks), latest query blocks first: they see the most keys. */
template <int DPL>
__global__ void attn_forward_kernel(float *__restrict__ out, float *__restrict__ lse, const float *__restrict__ qkv,
                                    attn_shape s) {
    extern __shared__ float sm[];
    const int hd = s.hd, ld = hd + 1, warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    float *Ks = sm, *Vs = Ks + TILE * ld, *qs = Vs + TILE * ld + warp * hd;
    const int bh = blockIdx.x, b = bh / s.NH, h = bh % s.NH;
    const int q0 = (gridDim.y - 1 - blockIdx.y) * ROWS, i = q0 + warp;
    const size_t ld3 = 3 * (size_t)s.C;
    const float *base = qkv + (size_t)b * s.T * ld3 + (size_t)h * hd;
    if (i < s.T)
        for (int d = lane; d < hd; d += 32) qs[d] = base[(size_t)i * ld3 + d];
    float acc[DPL], m = -INFINITY, l = 0.0f;
    for (int r = 0; r < DPL; r++) acc[r] = 0.0f;
    const int last = (q0 + ROWS < s.T ? q0 + ROWS : s.T) - 1;
    for (int k0 = 0; k0 <= last; k0 += TILE) {
        __syncthreads();
        load_tile(Ks, base + s.C, ld3, k0, s.T, hd);
        load_tile(Vs, base + 2 * s.C, ld3, k0, s.T, hd);
        __syncthreads();
        if (i >= s.T || k0 > i) continue; /* the same for the whole warp */
        const int key = k0 + lane;
        float sc = key <= i ? dot_row(qs, Ks + lane * ld, hd) * s.scale : -INFINITY;
        float mn = fmaxf(m, cu_warp_max(sc));
        float corr = expf(m - mn);
        float p = key <= i ? expf(sc - mn) : 0.0f;
        l = l * corr + cu_warp_sum(p);
        for (int r = 0; r < DPL; r++) acc[r] *= corr;
        const int nk = i - k0 + 1 < TILE ? i - k0 + 1 : TILE;
        for (int j = 0; j < nk; j++) {
            float pj = __shfl_sync(FULL, p, j);
            for (int r = 0; r < DPL; r++) {
                int d = lane + 32 * r;
                if (d < hd) acc[r] += pj * Vs[j * ld + d];
            }
        }
        m = mn;
    }
    if (i >= s.T) return;
    float inv = 1.0f / l;
    float *o = out + ((size_t)b * s.T + i) * s.C + (size_t)h * hd;
    for (int r = 0; r < DPL; r++) {
        int d = lane + 32 * r;
        if (d < hd) o[d] = acc[r] * inv;
    }
    if (lane == 0) lse[(size_t)bh * s.T + i] = m + logf(l);
}

/* D[bh, t] = sum_d dout * out over one head's row, one warp per row; rows ordered (b, t, h). */
__global__ void attn_rowdot_kernel(float *__restrict__ D, const float *__restrict__ dout,
                                   const float *__restrict__ out, int B, attn_shape s) {
    size_t row = (size_t)blockIdx.x * ROWS + (threadIdx.x >> 5);
    if (row >= (size_t)B * s.T * s.NH) return;
    int lane = threadIdx.x & 31, h = (int)(row % s.NH);
    size_t bt = row / s.NH, b = bt / s.T, t = bt % s.T;
    const float *o = out + bt * s.C + (size_t)h * s.hd, *g = dout + bt * s.C + (size_t)h * s.hd;
    float v = 0.0f;
    for (int d = lane; d < s.hd; d += 32) v += o[d] * g[d];
    v = cu_warp_sum(v);
    if (lane == 0) D[(b * s.NH + h) * s.T + t] = v;
}

/* dK and dV of one key row per warp, walking the query tiles from the first that can see the block's
 * keys. Grid (B*NH, key blocks). */
template <int DPL>
__global__ void attn_backward_kv_kernel(float *__restrict__ dqkv, const float *__restrict__ dout,
                                        const float *__restrict__ qkv, const float *__restrict__ lse,
                                        const float *__restrict__ D, attn_shape s) {
    extern __shared__ float sm[];
    const int hd = s.hd, ld = hd + 1, warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    float *Qs = sm, *Gs = Qs + TILE * ld, *Ls = Gs + TILE * ld, *Ds = Ls + TILE;
    float *kr = Ds + TILE + warp * 2 * hd, *vr = kr + hd;
    const int bh = blockIdx.x, b = bh / s.NH, h = bh % s.NH;
    const int k0 = blockIdx.y * ROWS, j = k0 + warp;
    const size_t ld3 = 3 * (size_t)s.C;
    const float *base = qkv + (size_t)b * s.T * ld3 + (size_t)h * hd;
    const float *gbase = dout + (size_t)b * s.T * s.C + (size_t)h * hd;
    if (j < s.T)
        for (int d = lane; d < hd; d += 32) {
            kr[d] = base[(size_t)j * ld3 + s.C + d];
            vr[d] = base[(size_t)j * ld3 + 2 * s.C + d];
        }
    float dk[DPL], dv[DPL];
    for (int r = 0; r < DPL; r++) dk[r] = dv[r] = 0.0f;
    for (int q0 = k0 / TILE * TILE; q0 < s.T; q0 += TILE) {
        __syncthreads();
        load_tile(Qs, base, ld3, q0, s.T, hd);
        load_tile(Gs, gbase, s.C, q0, s.T, hd);
        for (int t = threadIdx.x; t < TILE; t += blockDim.x) {
            Ls[t] = q0 + t < s.T ? lse[(size_t)bh * s.T + q0 + t] : 0.0f;
            Ds[t] = q0 + t < s.T ? D[(size_t)bh * s.T + q0 + t] : 0.0f;
        }
        __syncthreads();
        if (j >= s.T) continue;
        const int qi = q0 + lane;
        float p = 0.0f, ds = 0.0f;
        if (qi < s.T && qi >= j) {
            p = expf(dot_row(Qs + lane * ld, kr, hd) * s.scale - Ls[lane]);
            ds = p * (dot_row(Gs + lane * ld, vr, hd) - Ds[lane]) * s.scale;
        }
        for (int t = 0; t < TILE; t++) {
            float pt = __shfl_sync(FULL, p, t), dst = __shfl_sync(FULL, ds, t);
            for (int r = 0; r < DPL; r++) {
                int d = lane + 32 * r;
                if (d < hd) {
                    dv[r] += pt * Gs[t * ld + d];
                    dk[r] += dst * Qs[t * ld + d];
                }
            }
        }
    }
    if (j >= s.T) return;
    float *row = dqkv + ((size_t)b * s.T + j) * ld3 + (size_t)h * hd;
    for (int r = 0; r < DPL; r++) {
        int d = lane + 32 * r;
        if (d < hd) {
            row[s.C + d] = dk[r];
            row[2 * s.C + d] = dv[r];
        }
    }
}

/* dQ of one query row per warp, walking the key tiles it sees. Grid (B*NH, query blocks), latest
 * first. */
template <int DPL>
__global__ void attn_backward_q_kernel(float *__restrict__ dqkv, const float *__restrict__ dout,
                                       const float *__restrict__ qkv, const float *__restrict__ lse,
                                       const float *__restrict__ D, attn_shape s) {
    extern __shared__ float sm[];
    const int hd = s.hd, ld = hd + 1, warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    float *Ks = sm, *Vs = Ks + TILE * ld, *qr = Vs + TILE * ld + warp * 2 * hd, *gr = qr + hd;
    const int bh = blockIdx.x, b = bh / s.NH, h = bh % s.NH;
    const int q0 = (gridDim.y - 1 - blockIdx.y) * ROWS, i = q0 + warp;
    const size_t ld3 = 3 * (size_t)s.C;
    const float *base = qkv + (size_t)b * s.T * ld3 + (size_t)h * hd;
    float li = 0.0f, Di = 0.0f;
    if (i < s.T) {
        const float *g = dout + ((size_t)b * s.T + i) * s.C + (size_t)h * hd;
        for (int d = lane; d < hd; d += 32) {
            qr[d] = base[(size_t)i * ld3 + d];
            gr[d] = g[d];
        }
        li = lse[(size_t)bh * s.T + i];
        Di = D[(size_t)bh * s.T + i];
    }
    float dq[DPL];
    for (int r = 0; r < DPL; r++) dq[r] = 0.0f;
    const int last = (q0 + ROWS < s.T ? q0 + ROWS : s.T) - 1;
    for (int k0 = 0; k0 <= last; k0 += TILE) {
        __syncthreads();
        load_tile(Ks, base + s.C, ld3, k0, s.T, hd);
        load_tile(Vs, base + 2 * s.C, ld3, k0, s.T, hd);
        __syncthreads();
        if (i >= s.T || k0 > i) continue;
        const int key = k0 + lane;
        float ds = 0.0f;
        if (key <= i) {
            float p = expf(dot_row(qr, Ks + lane * ld, hd) * s.scale - li);
            ds = p * (dot_row(gr, Vs + lane * ld, hd) - Di) * s.scale;
        }
        const int nk = i - k0 + 1 < TILE ? i - k0 + 1 : TILE;
        for (int jj = 0; jj < nk; jj++) {
            float dsj = __shfl_sync(FULL, ds, jj);
            for (int r = 0; r < DPL; r++) {
                int d = lane + 32 * r;
                if (d < hd) dq[r] += dsj * Ks[jj * ld + d];
            }
        }
    }
    if (i >= s.T) return;
    float *row = dqkv + ((size_t)b * s.T + i) * ld3 + (size_t)h * hd;
    for (int r = 0; r < DPL; r++) {
        int d = lane + 32 * r;
        if (d < hd) row[d] = dq[r];
    }
}

/* The head size, checked: -1 after anvil_fail. */
int cu_attention_head_size(const char *what, int C, int NH) {
    if (NH <= 0 || C % NH)
        return anvil_fail("cuda: %s: %d channels do not split into %d heads", what, C, NH);
    int hd = C / NH;
    if (hd > MAX_HEAD) return anvil_fail("cuda: %s: head size %d is over %d", what, hd, MAX_HEAD);
    return hd;
}

static size_t fwd_smem(int hd) { return sizeof(float) * (2 * (size_t)TILE * (hd + 1) + (size_t)ROWS * hd); }
static size_t bwd_smem(int hd) {
    return sizeof(float) * (2 * (size_t)TILE * (hd + 1) + 2 * (size_t)TILE + 2 * (size_t)ROWS * hd);
}

#define DISPATCH(dpl, kernel, grid, smem, ...)                                                                         \
    switch (dpl) {                                                                                                     \
    case 1: kernel<1><<<grid, 32 * ROWS, smem, cu_g.stream>>>(__VA_ARGS__); break;                                     \
    case 2: kernel<2><<<grid, 32 * ROWS, smem, cu_g.stream>>>(__VA_ARGS__); break;                                     \
    case 3: kernel<3><<<grid, 32 * ROWS, smem, cu_g.stream>>>(__VA_ARGS__); break;                                     \
    default: kernel<4><<<grid, 32 * ROWS, smem, cu_g.stream>>>(__VA_ARGS__); break;                                    \
    }

int cu_attention_forward(float *out, float *lse, const float *qkv, int B, int T, int C, int NH) {
    if (!cu_enter()) return cu_status();
    int hd = cu_attention_head_size("attention_forward", C, NH);
    if (hd < 0) return -1;
    if (B <= 0 || T <= 0) return cu_status();
    attn_shape s = {T, C, NH, hd, 1.0f / sqrtf((float)hd)};
    dim3 grid((unsigned)(B * NH), (unsigned)((T + ROWS - 1) / ROWS));
    DISPATCH((hd + 31) / 32, attn_forward_kernel, grid, fwd_smem(hd), out, lse, qkv, s);
    cu_launched("attention_forward");
    return cu_status();
}

float *cu_attention_rowdot(const char *what, const float *dout, const float *out, int B, int T, int C, int NH) {
    attn_shape s = {T, C, NH, C / NH, 0.0f};
    size_t rows = (size_t)B * NH * T;
    float *D = (float *)cu_scratch(what, rows * sizeof(float));
    if (!D) return nullptr;
    attn_rowdot_kernel<<<(unsigned)((rows + ROWS - 1) / ROWS), 32 * ROWS, 0, cu_g.stream>>>(D, dout, out, B, s);
    cu_launched(what);
    return D;
}

int cu_attention_backward(float *dqkv, const float *dout, const float *out, const float *lse, const float *qkv, int B,
                          int T, int C, int NH) {
    const char *what = "attention_backward";
    if (!cu_enter()) return cu_status();
    int hd = cu_attention_head_size(what, C, NH);
    if (hd < 0) return -1;
    if (B <= 0 || T <= 0) return cu_status();
    attn_shape s = {T, C, NH, hd, 1.0f / sqrtf((float)hd)};
    float *D = cu_attention_rowdot(what, dout, out, B, T, C, NH);
    if (!D) return cu_status();
    dim3 grid((unsigned)(B * NH), (unsigned)((T + ROWS - 1) / ROWS));
    DISPATCH((hd + 31) / 32, attn_backward_kv_kernel, grid, bwd_smem(hd), dqkv, dout, qkv, lse, D, s);
    cu_launched(what);
    DISPATCH((hd + 31) / 32, attn_backward_q_kernel, grid, bwd_smem(hd), dqkv, dout, qkv, lse, D, s);
    cu_launched(what);
    cu_scratch_free(D);
    return cu_status();
}

/* One block per head: scores into scratch, their max and sum (fixed trees), then each thread one
 * output dimension over the keys in order, p = e / sum as the CPU forms it. */
__global__ void attn_decode_kernel(float *__restrict__ out, float *__restrict__ scores, const float *__restrict__ q,
                                   const float *__restrict__ kc, const float *__restrict__ vc, int n, int C, int hd,
                                   float scale) {
    __shared__ float sh[32];
    const int h = blockIdx.x;
    float *sc = scores + (size_t)h * n;
    const float *qh = q + (size_t)h * hd;
    float mx = -INFINITY;
    for (int j = threadIdx.x; j < n; j += blockDim.x) {
        sc[j] = dot_row(qh, kc + (size_t)j * C + (size_t)h * hd, hd) * scale;
        mx = fmaxf(mx, sc[j]);
    }
    mx = cu_block_max(mx, sh);
    float sum = 0.0f;
    for (int j = threadIdx.x; j < n; j += blockDim.x) {
        sc[j] = expf(sc[j] - mx);
        sum += sc[j];
    }
    sum = cu_block_sum(sum, sh); /* its barriers also publish every thread's sc[j] */
    for (int d = threadIdx.x; d < hd; d += blockDim.x) {
        float a = 0.0f;
        for (int j = 0; j < n; j++) a += sc[j] / sum * vc[(size_t)j * C + (size_t)h * hd + d];
        out[(size_t)h * hd + d] = a;
    }
}

int cu_attention_decode(float *out, const float *q, const float *kcache, const float *vcache, int n, int C, int NH) {
    const char *what = "attention_decode";
    if (!cu_enter()) return cu_status();
    if (NH <= 0 || C % NH) return anvil_fail("cuda: %s: %d channels do not split into %d heads", what, C, NH);
    if (n <= 0) return cu_status();
    int hd = C / NH;
    float *scores = (float *)cu_scratch(what, sizeof(float) * (size_t)n * NH);
    if (!scores) return cu_status();
    attn_decode_kernel<<<(unsigned)NH, 256, 0, cu_g.stream>>>(out, scores, q, kcache, vcache, n, C, hd,
                                                              1.0f / sqrtf((float)hd));
    cu_launched(what);
    cu_scratch_free(scores);
    return cu_status();
}
