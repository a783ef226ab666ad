/* Causal attention of the bf16 table on tensor cores (mma.sync m16n8k16,
 * bf16 inputs, fp32 accumulation), flash style as the fp32 kernels in
 * attention.cu, which stay the reference it is tested against.
 *
 * What is rounded to bf16: q, k, v and dout as they are loaded, and the
 * probabilities P and their gradient dS before they are multiplied again
 * (FlashAttention-2's choice). Scores, the online softmax, the log-sum-exp
 * and every sum stay fp32; outputs are fp32.
 *
 * A block is 4 warps and 64 rows (queries, or keys in the dK/dV kernel), a
 * warp 16 of them; K and V (or Q and dO) tiles pass through shared memory as
 * bf16, in their natural layout where they are an mma's B operand along the
 * head dimension and transposed where they are one along the sequence. The
 * score tile stays in registers: an m16n8 accumulator's layout is exactly
 * that of the m16k16 A operand of the next product (P V, dS K, ...), so the
 * probabilities go from one mma to the next without shared memory.
 *
 * Fragment layouts (PTX ISA, mma.m16n8k16, g = lane / 4, t = lane % 4):
 * A (16 x 16, row-major): registers {row g, cols 2t, 2t+1}, {row g+8, same},
 * {row g, cols 2t+8, 2t+9}, {row g+8, same}; B (16 x 8): {rows 2t, 2t+1,
 * col g}, {rows 2t+8, 2t+9, col g}; C (16 x 8, fp32): c0, c1 at row g, cols
 * 2t, 2t+1, and c2, c3 at row g+8. Each register holds its lower-numbered
 * element in its low half.
 *
 * Head sizes 64 and 128; anything else runs the fp32 kernels. q, k, v and
 * dout are rounded to bf16 once per call, into scratch the tiles are then
 * loaded from 16 bytes at a time. Deterministic: every output element is
 * one thread's fixed sequence of mma and adds, no atomics. */
#include <string.h>

#include "kernels/cuda/cuda_internal.cuh"

#define WARPS 4
#define BLOCK_ROWS (16 * WARPS)

typedef __nv_bfloat16 bf16;

struct tc_shape {
    int T, C, NH;
    float scale;
};

__device__ __forceinline__ void mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ uint32_t pack(float lo, float hi) {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    uint32_t u;
    memcpy(&u, &v, sizeof u);
    return u;
}

__device__ __forceinline__ uint32_t ld32(const bf16 *p) { return *reinterpret_cast<const uint32_t *>(p); }

/* The A operand rows [r0, r0+16) x cols [k0, k0+16) of a row-major tile with row stride S. */
__device__ __forceinline__ void load_a(uint32_t (&a)[4], const bf16 *x, int S, int r0, int k0) {
    const int g = (threadIdx.x & 31) >> 2, t = threadIdx.x & 3;
    const bf16 *p = x + (r0 + g) * S + k0 + 2 * t;
    a[0] = ld32(p);
    a[1] = ld32(p + 8 * S);
    a[2] = ld32(p + 8);
    a[3] = ld32(p + 8 * S + 8);
}

/* The B operand B[k][n] = y[n0 + n][k0 + k] of a row-major tile y with row stride S. */
__device__ __forceinline__ void load_b(uint32_t &b0, uint32_t &b1, const bf16 *y, int S, int n0, int k0) {
    const int g = (threadIdx.x & 31) >> 2, t = threadIdx.x & 3;
    const bf16 *p = y + (n0 + g) * S + k0 + 2 * t;
    b0 = ld32(p);
    b1 = ld32(p + 8);
}

/* The A operand for k-step kk of an accumulator tile s[n-tile][4]: n-tiles 2kk and 2kk+1. */
template <int NT> __device__ __forceinline__ void acc_to_a(uint32_t (&a)[4], const float (&s)[NT][4], int kk) {
    a[0] = pack(s[2 * kk][0], s[2 * kk][1]);
    a[1] = pack(s[2 * kk][2], s[2 * kk][3]);
    a[2] = pack(s[2 * kk + 1][0], s[2 * kk + 1][1]);
    a[3] = pack(s[2 * kk + 1][2], s[2 * kk + 1][3]);
}

/* Rows [r0, r0+R) of a bf16 [T, ld] matrix's HD columns at base into dst[r][c] (row stride HD + 8,
 * which puts a warp's fragment loads on distinct banks), 8 columns per 16-byte load; rows past T are
 * zero. */
template <int HD, int R> __device__ void load_rows(bf16 *dst, const bf16 *base, size_t ld, int r0, int T) {
    constexpr int V8 = HD / 8;
    for (int e = threadIdx.x; e < R * V8; e += blockDim.x) {
        int r = e / V8, c = e % V8 * 8;
        uint4 v = make_uint4(0, 0, 0, 0);
        if (r0 + r < T) v = *reinterpret_cast<const uint4 *>(base + (size_t)(r0 + r) * ld + c);
        *reinterpret_cast<uint4 *>(dst + r * (HD + 8) + c) = v;
    }
}

/* The same rows transposed: dst[c][r], row stride R + 8; consecutive threads take consecutive rows. */
template <int HD, int R> __device__ void load_rows_t(bf16 *dst, const bf16 *base, size_t ld, int r0, int T) {
    constexpr int V8 = HD / 8;
    for (int e = threadIdx.x; e < R * V8; e += blockDim.x) {
        int r = e % R, c = e / R * 8;
        uint4 v = make_uint4(0, 0, 0, 0);
        if (r0 + r < T) v = *reinterpret_cast<const uint4 *>(base + (size_t)(r0 + r) * ld + c);
        bf16 x[8];
        memcpy(x, &v, sizeof v);
#pragma unroll
        for (int i = 0; i < 8; i++) dst[(c + i) * (R + 8) + r] = x[i];
    }
}

/* Max and sum over the 4 lanes (t) that share a row of an accumulator. */
__device__ __forceinline__ float quad_max(float v) {
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
    return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}
__device__ __forceinline__ float quad_sum(float v) {
    v += __shfl_xor_sync(0xffffffffu, v, 1);
    return v + __shfl_xor_sync(0xffffffffu, v, 2);
}

/* The online softmax of one 64-key tile of scores sc (raw q.k) for the thread's rows (row[0], row[1]):
 * masks keys after each row, updates m and l, rescales o, and leaves the probabilities in sc. */
template <int HD>
__device__ __forceinline__ void softmax_tile(float (&sc)[8][4], float (&o)[HD / 8][4], float (&m)[2], float (&l)[2],
                                             const int (&row)[2], int k0, float scale) {
    const int t = threadIdx.x & 3;
    float mx[2] = {m[0], m[1]};
#pragma unroll
    for (int nt = 0; nt < 8; nt++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
            int key = k0 + 8 * nt + 2 * t + (e & 1);
            float v = key <= row[e >> 1] ? sc[nt][e] * scale : -INFINITY;
            sc[nt][e] = v;
            mx[e >> 1] = fmaxf(mx[e >> 1], v);
        }
    float corr[2], rs[2] = {0.0f, 0.0f};
#pragma unroll
    for (int h = 0; h < 2; h++) {
        mx[h] = quad_max(mx[h]);
        corr[h] = expf(m[h] - mx[h]);
    }
#pragma unroll
    for (int nt = 0; nt < 8; nt++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
            float p = expf(sc[nt][e] - mx[e >> 1]);
            sc[nt][e] = p;
            rs[e >> 1] += p;
        }
#pragma unroll
    for (int h = 0; h < 2; h++) {
        l[h] = l[h] * corr[h] + quad_sum(rs[h]);
        m[h] = mx[h];
    }
#pragma unroll
    for (int dt = 0; dt < HD / 8; dt++) {
        o[dt][0] *= corr[0];
        o[dt][1] *= corr[0];
        o[dt][2] *= corr[1];
        o[dt][3] *= corr[1];
    }
}

/* Grid (B*NH, query blocks), latest query blocks first. Shared memory: the query block, then each
 * key tile over it, and the value tile transposed. */
template <int HD>
__global__ void __launch_bounds__(32 * WARPS) attn_fwd_tc_kernel(float *__restrict__ out, float *__restrict__ lse,
                                                                  const bf16 *__restrict__ qkv, tc_shape s) {
    constexpr int S = HD + 8, BK = 64, SV = BK + 8;
    extern __shared__ __align__(16) unsigned char smem[];
    bf16 *Ks = reinterpret_cast<bf16 *>(smem), *Vt = Ks + BLOCK_ROWS * S;
    const int warp = threadIdx.x >> 5, g = (threadIdx.x & 31) >> 2, t = threadIdx.x & 3;
    const int bh = blockIdx.x, b = bh / s.NH, h = bh % s.NH;
    const int q0 = (gridDim.y - 1 - blockIdx.y) * BLOCK_ROWS, w0 = q0 + 16 * warp;
    const size_t ld3 = 3 * (size_t)s.C;
    const bf16 *base = qkv + (size_t)b * s.T * ld3 + (size_t)h * HD;
    load_rows<HD, BLOCK_ROWS>(Ks, base, ld3, q0, s.T);
    __syncthreads();
    uint32_t qa[HD / 16][4];
#pragma unroll
    for (int kk = 0; kk < HD / 16; kk++) load_a(qa[kk], Ks, S, 16 * warp, 16 * kk);
    float o[HD / 8][4] = {}, m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
    const int row[2] = {w0 + g, w0 + g + 8};
    const int last = (q0 + BLOCK_ROWS < s.T ? q0 + BLOCK_ROWS : s.T) - 1;
    for (int k0 = 0; k0 <= last; k0 += BK) {
        __syncthreads();
        load_rows<HD, BK>(Ks, base + s.C, ld3, k0, s.T);
        load_rows_t<HD, BK>(Vt, base + 2 * s.C, ld3, k0, s.T);
        __syncthreads();
        if (k0 > w0 + 15) continue; /* no key of the tile is visible to the warp's rows */
        float sc[8][4] = {};
#pragma unroll
        for (int kk = 0; kk < HD / 16; kk++)
#pragma unroll
            for (int nt = 0; nt < 8; nt++) {
                uint32_t b0, b1;
                load_b(b0, b1, Ks, S, 8 * nt, 16 * kk);
                mma(sc[nt], qa[kk], b0, b1);
            }
        softmax_tile<HD>(sc, o, m, l, row, k0, s.scale);
#pragma unroll
        for (int kk = 0; kk < BK / 16; kk++) {
            uint32_t pa[4];
            acc_to_a<8>(pa, sc, kk);
#pragma unroll
            for (int dt = 0; dt < HD / 8; dt++) {
                uint32_t b0, b1;
                load_b(b0, b1, Vt, SV, 8 * dt, 16 * kk);
                mma(o[dt], pa, b0, b1);
            }
        }
    }
#pragma unroll
    for (int hh = 0; hh < 2; hh++) {
        if (row[hh] >= s.T) continue;
        float inv = 1.0f / l[hh];
        float *orow = out + ((size_t)b * s.T + row[hh]) * s.C + (size_t)h * HD + 2 * t;
#pragma unroll
        for (int dt = 0; dt < HD / 8; dt++) {
            orow[8 * dt] = o[dt][2 * hh] * inv;
            orow[8 * dt + 1] = o[dt][2 * hh + 1] * inv;
        }
        if (t == 0) lse[(size_t)bh * s.T + row[hh]] = m[hh] + logf(l[hh]);
    }
}

/* dK and dV of one block of 64 keys, walking the query tiles of BQ rows from the first that sees
 * them. Grid (B*NH, key blocks). Shared memory: the block's K and V, each query tile's Q and dO
 * (natural and transposed), and its rows' lse and D. */
template <int HD, int BQ>
__global__ void __launch_bounds__(32 * WARPS, 1)
    attn_bwd_kv_tc_kernel(float *__restrict__ dqkv, const bf16 *__restrict__ dout, const bf16 *__restrict__ qkv,
                          const float *__restrict__ lse, const float *__restrict__ D, tc_shape s) {
    constexpr int S = HD + 8, ST = BQ + 8;
    extern __shared__ __align__(16) unsigned char smem[];
    bf16 *Ks = reinterpret_cast<bf16 *>(smem), *Vs = Ks + BLOCK_ROWS * S, *Qs = Vs + BLOCK_ROWS * S;
    bf16 *Gs = Qs + BQ * S, *Qt = Gs + BQ * S, *Gt = Qt + HD * ST;
    float *Ls = reinterpret_cast<float *>(Gt + HD * ST), *Ds = Ls + BQ;
    const int warp = threadIdx.x >> 5, g = (threadIdx.x & 31) >> 2, t = threadIdx.x & 3;
    const int bh = blockIdx.x, b = bh / s.NH, h = bh % s.NH;
    const int k0 = blockIdx.y * BLOCK_ROWS, w0 = k0 + 16 * warp;
    const size_t ld3 = 3 * (size_t)s.C;
    const bf16 *base = qkv + (size_t)b * s.T * ld3 + (size_t)h * HD;
    const bf16 *gbase = dout + (size_t)b * s.T * s.C + (size_t)h * HD;
    load_rows<HD, BLOCK_ROWS>(Ks, base + s.C, ld3, k0, s.T);
    load_rows<HD, BLOCK_ROWS>(Vs, base + 2 * s.C, ld3, k0, s.T);
    float dk[HD / 8][4] = {}, dv[HD / 8][4] = {};
    const int key[2] = {w0 + g, w0 + g + 8};
    for (int q0 = k0 / BQ * BQ; q0 < s.T; q0 += BQ) {
        __syncthreads();
        load_rows<HD, BQ>(Qs, base, ld3, q0, s.T);
        load_rows_t<HD, BQ>(Qt, base, ld3, q0, s.T);
        load_rows<HD, BQ>(Gs, gbase, s.C, q0, s.T);
        load_rows_t<HD, BQ>(Gt, gbase, s.C, q0, s.T);
        for (int i = threadIdx.x; i < BQ; i += blockDim.x) {
            Ls[i] = q0 + i < s.T ? lse[(size_t)bh * s.T + q0 + i] : 0.0f;
            Ds[i] = q0 + i < s.T ? D[(size_t)bh * s.T + q0 + i] : 0.0f;
        }
        __syncthreads();
        if (q0 + BQ - 1 < w0) continue; /* every query of the tile comes before the warp's keys */
        float st[BQ / 8][4] = {}, dp[BQ / 8][4] = {};
#pragma unroll
        for (int kk = 0; kk < HD / 16; kk++) {
            uint32_t ka[4], va[4];
            load_a(ka, Ks, S, 16 * warp, 16 * kk);
            load_a(va, Vs, S, 16 * warp, 16 * kk);
#pragma unroll
            for (int nt = 0; nt < BQ / 8; nt++) {
                uint32_t b0, b1;
                load_b(b0, b1, Qs, S, 8 * nt, 16 * kk);
                mma(st[nt], ka, b0, b1);
                load_b(b0, b1, Gs, S, 8 * nt, 16 * kk);
                mma(dp[nt], va, b0, b1);
            }
        }
        /* st becomes P^T and dp becomes dS^T, the scale included as the CPU does. */
#pragma unroll
        for (int nt = 0; nt < BQ / 8; nt++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                int qi = 8 * nt + 2 * t + (e & 1);
                bool seen = q0 + qi >= key[e >> 1] && q0 + qi < s.T;
                float p = seen ? expf(st[nt][e] * s.scale - Ls[qi]) : 0.0f;
                st[nt][e] = p;
                dp[nt][e] = p * (dp[nt][e] - Ds[qi]) * s.scale;
            }
#pragma unroll
        for (int kk = 0; kk < BQ / 16; kk++) {
            uint32_t pa[4], da[4];
            acc_to_a<BQ / 8>(pa, st, kk);
            acc_to_a<BQ / 8>(da, dp, kk);
#pragma unroll
            for (int dt = 0; dt < HD / 8; dt++) {
                uint32_t b0, b1;
                load_b(b0, b1, Gt, ST, 8 * dt, 16 * kk);
                mma(dv[dt], pa, b0, b1);
                load_b(b0, b1, Qt, ST, 8 * dt, 16 * kk);
                mma(dk[dt], da, b0, b1);
            }
        }
    }
#pragma unroll
    for (int hh = 0; hh < 2; hh++) {
        if (key[hh] >= s.T) continue;
        float *r = dqkv + ((size_t)b * s.T + key[hh]) * ld3 + (size_t)h * HD + 2 * t;
#pragma unroll
        for (int dt = 0; dt < HD / 8; dt++) {
            r[s.C + 8 * dt] = dk[dt][2 * hh];
            r[s.C + 8 * dt + 1] = dk[dt][2 * hh + 1];
            r[2 * s.C + 8 * dt] = dv[dt][2 * hh];
            r[2 * s.C + 8 * dt + 1] = dv[dt][2 * hh + 1];
        }
    }
}

/* dQ of one block of 64 queries, walking the key tiles of BK rows it sees. Grid (B*NH, query
 * blocks), latest first. Shared memory: the block's Q and dO while their fragments are taken,
 * then each key tile's K (natural and transposed) and V. */
template <int HD, int BK>
__global__ void __launch_bounds__(32 * WARPS, 1)
    attn_bwd_q_tc_kernel(float *__restrict__ dqkv, const bf16 *__restrict__ dout, const bf16 *__restrict__ qkv,
                         const float *__restrict__ lse, const float *__restrict__ D, tc_shape s) {
    constexpr int S = HD + 8, ST = BK + 8;
    extern __shared__ __align__(16) unsigned char smem[];
    bf16 *Ks = reinterpret_cast<bf16 *>(smem), *Vs = Ks + BK * S, *Kt = Vs + BK * S;
    bf16 *Qs = Ks, *Gs = Ks + BLOCK_ROWS * S; /* before the first key tile */
    const int warp = threadIdx.x >> 5, g = (threadIdx.x & 31) >> 2, t = threadIdx.x & 3;
    const int bh = blockIdx.x, b = bh / s.NH, h = bh % s.NH;
    const int q0 = (gridDim.y - 1 - blockIdx.y) * BLOCK_ROWS, w0 = q0 + 16 * warp;
    const size_t ld3 = 3 * (size_t)s.C;
    const bf16 *base = qkv + (size_t)b * s.T * ld3 + (size_t)h * HD;
    load_rows<HD, BLOCK_ROWS>(Qs, base, ld3, q0, s.T);
    load_rows<HD, BLOCK_ROWS>(Gs, dout + (size_t)b * s.T * s.C + (size_t)h * HD, s.C, q0, s.T);
    __syncthreads();
    uint32_t qa[HD / 16][4], ga[HD / 16][4];
#pragma unroll
    for (int kk = 0; kk < HD / 16; kk++) {
        load_a(qa[kk], Qs, S, 16 * warp, 16 * kk);
        load_a(ga[kk], Gs, S, 16 * warp, 16 * kk);
    }
    const int row[2] = {w0 + g, w0 + g + 8};
    const float L[2] = {row[0] < s.T ? lse[(size_t)bh * s.T + row[0]] : 0.0f,
                        row[1] < s.T ? lse[(size_t)bh * s.T + row[1]] : 0.0f};
    const float Dr[2] = {row[0] < s.T ? D[(size_t)bh * s.T + row[0]] : 0.0f,
                         row[1] < s.T ? D[(size_t)bh * s.T + row[1]] : 0.0f};
    float dq[HD / 8][4] = {};
    const int last = (q0 + BLOCK_ROWS < s.T ? q0 + BLOCK_ROWS : s.T) - 1;
    for (int k0 = 0; k0 <= last; k0 += BK) {
        __syncthreads();
        load_rows<HD, BK>(Ks, base + s.C, ld3, k0, s.T);
        load_rows<HD, BK>(Vs, base + 2 * s.C, ld3, k0, s.T);
        load_rows_t<HD, BK>(Kt, base + s.C, ld3, k0, s.T);
        __syncthreads();
        if (k0 > w0 + 15) continue;
        float sc[BK / 8][4] = {}, dp[BK / 8][4] = {};
#pragma unroll
        for (int kk = 0; kk < HD / 16; kk++)
#pragma unroll
            for (int nt = 0; nt < BK / 8; nt++) {
                uint32_t b0, b1;
                load_b(b0, b1, Ks, S, 8 * nt, 16 * kk);
                mma(sc[nt], qa[kk], b0, b1);
                load_b(b0, b1, Vs, S, 8 * nt, 16 * kk);
                mma(dp[nt], ga[kk], b0, b1);
            }
#pragma unroll
        for (int nt = 0; nt < BK / 8; nt++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                int kj = k0 + 8 * nt + 2 * t + (e & 1);
                bool seen = kj <= row[e >> 1] && kj < s.T;
                float p = seen ? expf(sc[nt][e] * s.scale - L[e >> 1]) : 0.0f;
                dp[nt][e] = p * (dp[nt][e] - Dr[e >> 1]) * s.scale;
            }
#pragma unroll
        for (int kk = 0; kk < BK / 16; kk++) {
            uint32_t da[4];
            acc_to_a<BK / 8>(da, dp, kk);
#pragma unroll
            for (int dt = 0; dt < HD / 8; dt++) {
                uint32_t b0, b1;
                load_b(b0, b1, Kt, ST, 8 * dt, 16 * kk);
                mma(dq[dt], da, b0, b1);
            }
        }
    }
#pragma unroll
    for (int hh = 0; hh < 2; hh++) {
        if (row[hh] >= s.T) continue;
        float *r = dqkv + ((size_t)b * s.T + row[hh]) * ld3 + (size_t)h * HD + 2 * t;
#pragma unroll
        for (int dt = 0; dt < HD / 8; dt++) {
            r[8 * dt] = dq[dt][2 * hh];
            r[8 * dt + 1] = dq[dt][2 * hh + 1];
        }
    }
}

/* The sequence tile of the backward's inner loops: 64 rows, 32 at head size 128, where 64 would
 * need more registers than a thread has. */
template <int HD> constexpr int bwd_tile() { return HD == 128 ? 32 : 64; }

template <int HD> constexpr size_t fwd_smem() { return sizeof(bf16) * (BLOCK_ROWS * (HD + 8) + HD * (64 + 8)); }
template <int HD> constexpr size_t kv_smem() {
    constexpr int BQ = bwd_tile<HD>();
    return sizeof(bf16) * (2 * BLOCK_ROWS * (HD + 8) + 2 * BQ * (HD + 8) + 2 * HD * (BQ + 8)) + sizeof(float) * 2 * BQ;
}
template <int HD> constexpr size_t q_smem() {
    constexpr int BK = bwd_tile<HD>();
    constexpr size_t tiles = 2 * BK * (HD + 8) + HD * (BK + 8), block = 2 * BLOCK_ROWS * (HD + 8);
    return sizeof(bf16) * (tiles > block ? tiles : block);
}

static size_t up256(size_t bytes) { return (bytes + 255) / 256 * 256; }

template <int HD> static void forward_tc(float *out, float *lse, const bf16 *qkv, int B, tc_shape s) {
    dim3 grid((unsigned)(B * s.NH), (unsigned)((s.T + BLOCK_ROWS - 1) / BLOCK_ROWS));
    attn_fwd_tc_kernel<HD><<<grid, 32 * WARPS, fwd_smem<HD>(), cu_g.stream>>>(out, lse, qkv, s);
    cu_launched("attention_forward");
}

template <int HD>
static void backward_tc(float *dqkv, const bf16 *dout, const float *lse, const bf16 *qkv, const float *D, int B,
                        tc_shape s) {
    const char *what = "attention_backward";
    constexpr int R = bwd_tile<HD>();
    auto kv = attn_bwd_kv_tc_kernel<HD, R>;
    auto q = attn_bwd_q_tc_kernel<HD, R>;
    if (!cu_ok(what, cudaFuncSetAttribute(kv, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)kv_smem<HD>())) ||
        !cu_ok(what, cudaFuncSetAttribute(q, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)q_smem<HD>())))
        return;
    dim3 grid((unsigned)(B * s.NH), (unsigned)((s.T + BLOCK_ROWS - 1) / BLOCK_ROWS));
    kv<<<grid, 32 * WARPS, kv_smem<HD>(), cu_g.stream>>>(dqkv, dout, qkv, lse, D, s);
    cu_launched(what);
    q<<<grid, 32 * WARPS, q_smem<HD>(), cu_g.stream>>>(dqkv, dout, qkv, lse, D, s);
    cu_launched(what);
}

/* The tensor-core kernels take head sizes 64 and 128; q, k, v (and dout) are rounded to bf16 once
 * per call, into scratch whose rows the kernels then read 16 bytes at a time. */
static int head_size_tc(int C, int NH) {
    int hd = NH > 0 && C % NH == 0 ? C / NH : 0;
    return hd == 64 || hd == 128 ? hd : 0;
}

int cu_attention_forward_bf16(float *out, float *lse, const float *qkv, int B, int T, int C, int NH) {
    const char *what = "attention_forward";
    int hd = head_size_tc(C, NH);
    if (!hd || !cu_enter()) return cu_attention_forward(out, lse, qkv, B, T, C, NH);
    if (B <= 0 || T <= 0) return cu_status();
    size_t n3 = (size_t)B * T * 3 * C;
    bf16 *q16 = (bf16 *)cu_scratch(what, n3 * sizeof(bf16));
    if (!q16) return cu_status();
    cu_to_bf16(what, q16, qkv, n3);
    tc_shape s = {T, C, NH, 1.0f / sqrtf((float)hd)};
    if (hd == 64) forward_tc<64>(out, lse, q16, B, s);
    else forward_tc<128>(out, lse, q16, B, s);
    cu_scratch_free(q16);
    return cu_status();
}

int cu_attention_backward_bf16(float *dqkv, const float *dout, const float *out, const float *lse, const float *qkv,
                               int B, int T, int C, int NH) {
    const char *what = "attention_backward";
    int hd = head_size_tc(C, NH);
    if (!hd || !cu_enter()) return cu_attention_backward(dqkv, dout, out, lse, qkv, B, T, C, NH);
    if (B <= 0 || T <= 0) return cu_status();
    size_t n3 = (size_t)B * T * 3 * C, n1 = (size_t)B * T * C;
    char *mem = (char *)cu_scratch(what, up256(n3 * sizeof(bf16)) + n1 * sizeof(bf16));
    if (!mem) return cu_status();
    bf16 *q16 = (bf16 *)mem, *g16 = (bf16 *)(mem + up256(n3 * sizeof(bf16)));
    cu_to_bf16(what, q16, qkv, n3);
    cu_to_bf16(what, g16, dout, n1);
    tc_shape s = {T, C, NH, 1.0f / sqrtf((float)hd)};
    float *D = cu_attention_rowdot(what, dout, out, B, T, C, NH);
    if (D) {
        if (hd == 64) backward_tc<64>(dqkv, g16, lse, q16, D, B, s);
        else backward_tc<128>(dqkv, g16, lse, q16, D, B, s);
    }
    cu_scratch_free(D);
    cu_scratch_free(mem);
    return cu_status();
}
