/* Causal self-attention in the flash style: scores are computed a block at a
 * time and never stored for the backward pass. The forward keeps only each
 * row's log-sum-exp; the backward recomputes the probabilities from it.
 *
 * Layout: a row of qkv holds NH query heads, then NKV key heads, then NKV
 * value heads, hs columns each; query head h reads key/value head
 * h / (NH / NKV) (grouped-query attention; NKV = NH is multi-head attention,
 * GPT-2's [q | k | v]). out holds the NH heads' outputs side by side. All
 * per-head matrices are addressed in place with a leading dimension, never
 * copied. */
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/vmath.h"
#include "kernels/cpu/gemm_tile.h"

#define BQ 64  /* query rows per block */
#define BK 256 /* keys per block */

/* Forward of one block of query rows [q0, q1) of one (batch, head), with the
 * online softmax over key blocks: running max m, running sum l, and the
 * output accumulator rescaled whenever the max grows. */
static void attn_fwd_block(float *out, float *lse, const float *q, const float *k, const float *v, int q0, int q1,
                           int hd, int ld, int ldo, float scale, float *S, float *acc, float *m, float *l) {
    int nq = q1 - q0;
    for (int i = 0; i < nq; i++) {
        m[i] = -INFINITY;
        l[i] = 0.0f;
    }
    memset(acc, 0, sizeof(float) * (size_t)nq * hd);
    for (int k0 = 0; k0 < q1; k0 += BK) {
        int nk = q1 - k0 < BK ? q1 - k0 : BK;
        cpu_gemm_serial(&CPU_TILE, false, true, nq, nk, hd, scale, q + (size_t)q0 * ld, ld, k + (size_t)k0 * ld, ld, 0.0f,
                           S, BK);
        for (int i = 0; i < nq; i++) {
            float *s = S + (size_t)i * BK;
            int valid = q0 + i + 1 - k0; /* keys k0..q0+i are visible */
            if (valid > nk) valid = nk;
            float mx = m[i];
            for (int j = 0; j < valid; j++) mx = s[j] > mx ? s[j] : mx;
            float corr = vexpf(m[i] - mx);
#pragma omp simd
            for (int j = 0; j < valid; j++) s[j] = vexpf(s[j] - mx);
            /* One chain in key order, apart from the exponentials so that they alone are vector
             * code (the same bits as scalar code) and the sum keeps the order it always had. */
            float sum = 0.0f;
            for (int j = 0; j < valid; j++) sum += s[j];
            for (int j = valid; j < nk; j++) s[j] = 0.0f;
            l[i] = l[i] * corr + sum;
            m[i] = mx;
            float *a = acc + (size_t)i * hd;
            for (int d = 0; d < hd; d++) a[d] *= corr;
        }
        cpu_gemm_serial(&CPU_TILE, false, false, nq, hd, nk, 1.0f, S, BK, v + (size_t)k0 * ld, ld, 1.0f, acc, hd);
    }
    for (int i = 0; i < nq; i++) {
        float inv = 1.0f / l[i];
        float *o = out + (size_t)(q0 + i) * ldo;
        const float *a = acc + (size_t)i * hd;
        for (int d = 0; d < hd; d++) o[d] = a[d] * inv;
        lse[q0 + i] = m[i] + logf(l[i]);
    }
}

/* Scratch for every thread of the coming parallel region, taken in one piece
 * before it starts: a thread cannot report a failed allocation from inside
 * the region without leaving its share of the work undone. Slices are
 * rounded to cache lines so threads never share one. */
static float *team_scratch(size_t per_thread, size_t *stride, const char *what) {
    *stride = (per_thread + 15) / 16 * 16;
    size_t bytes = sizeof(float) * *stride * (size_t)omp_get_max_threads();
    float *p = aligned_alloc(64, bytes);
    if (!p) anvil_fail("kernels: cannot allocate %zu bytes of %s scratch", bytes, what);
    return p;
}

int cpu_attention_forward(float *out, float *lse, const float *qkv, int B, int T, int NH, int NKV, int hs) {
    int nqb = (T + BQ - 1) / BQ, group = NH / NKV, ld = (NH + 2 * NKV) * hs, ldo = NH * hs;
    float scale = 1.0f / sqrtf((float)hs);
    size_t stride;
    float *scratch = team_scratch((size_t)BQ * BK + (size_t)BQ * hs, &stride, "attention forward");
    if (!scratch) return -1;
#pragma omp parallel
    {
        float *S = scratch + stride * (size_t)omp_get_thread_num();
        float *acc = S + BQ * BK;
        float m[BQ], l[BQ];
#pragma omp for schedule(dynamic, 1) collapse(2)
        for (int bh = 0; bh < B * NH; bh++)
            for (int qb = 0; qb < nqb; qb++) {
                int b = bh / NH, h = bh % NH;
                /* Later blocks see more keys: issuing them first balances the threads. */
                int q0 = (nqb - 1 - qb) * BQ, q1 = q0 + BQ < T ? q0 + BQ : T;
                const float *row = qkv + (size_t)b * T * ld;
                const float *kh = row + (size_t)(NH + h / group) * hs;
                attn_fwd_block(out + (size_t)b * T * ldo + (size_t)h * hs, lse + (size_t)bh * T, row + (size_t)h * hs,
                               kh, kh + (size_t)NKV * hs, q0, q1, hs, ld, ldo, scale, S, acc, m, l);
            }
    }
    free(scratch);
    return 0;
}

/* Backward of one (batch, query head), with P recomputed from the saved
 * log-sum-exp: writes dq and adds to dk and dv, which the caller zeroed.
 * One thread runs every head of a key/value group, in head order, so no two
 * threads ever write the same gradient and the sums over the group are
 * always taken in the same order. */
static void attn_bwd_head(float *dq, float *dk, float *dv, const float *dout, const float *out, const float *lse,
                          const float *q, const float *k, const float *v, int T, int hd, int ld, int ldo,
                          float scale, float *P, float *dP, float *Dsum) {
    for (int t = 0; t < T; t++) memset(dq + (size_t)t * ld, 0, sizeof(float) * hd);
    for (int q0 = 0; q0 < T; q0 += BQ) {
        int q1 = q0 + BQ < T ? q0 + BQ : T, nq = q1 - q0;
        for (int i = 0; i < nq; i++) {
            const float *o = out + (size_t)(q0 + i) * ldo, *d = dout + (size_t)(q0 + i) * ldo;
            float s = 0.0f;
            for (int c = 0; c < hd; c++) s += o[c] * d[c];
            Dsum[i] = s;
        }
        const float *qb = q + (size_t)q0 * ld, *dob = dout + (size_t)q0 * ldo;
        for (int k0 = 0; k0 < q1; k0 += BK) {
            int nk = q1 - k0 < BK ? q1 - k0 : BK;
            cpu_gemm_serial(&CPU_TILE, false, true, nq, nk, hd, scale, qb, ld, k + (size_t)k0 * ld, ld, 0.0f, P, BK);
            cpu_gemm_serial(&CPU_TILE, false, true, nq, nk, hd, 1.0f, dob, ldo, v + (size_t)k0 * ld, ld, 0.0f, dP, BK);
            for (int i = 0; i < nq; i++) {
                float *p = P + (size_t)i * BK, *dp = dP + (size_t)i * BK;
                int valid = q0 + i + 1 - k0;
                if (valid > nk) valid = nk;
                float li = lse[q0 + i], Di = Dsum[i];
#pragma omp simd
                for (int j = 0; j < valid; j++) {
                    p[j] = vexpf(p[j] - li);
                    dp[j] = p[j] * (dp[j] - Di) * scale;
                }
                for (int j = valid; j < nk; j++) p[j] = dp[j] = 0.0f;
            }
            /* dV += P^T dO; dQ += dS K; dK += dS^T Q (dS already holds the scale). */
            cpu_gemm_serial(&CPU_TILE, true, false, nk, hd, nq, 1.0f, P, BK, dob, ldo, 1.0f, dv + (size_t)k0 * ld, ld);
            cpu_gemm_serial(&CPU_TILE, false, false, nq, hd, nk, 1.0f, dP, BK, k + (size_t)k0 * ld, ld, 1.0f,
                               dq + (size_t)q0 * ld, ld);
            cpu_gemm_serial(&CPU_TILE, true, false, nk, hd, nq, 1.0f, dP, BK, qb, ld, 1.0f, dk + (size_t)k0 * ld, ld);
        }
    }
}

int cpu_attention_backward(float *dqkv, const float *dout, const float *out, const float *lse, const float *qkv,
                           int B, int T, int NH, int NKV, int hs) {
    int group = NH / NKV, ld = (NH + 2 * NKV) * hs, ldo = NH * hs;
    float scale = 1.0f / sqrtf((float)hs);
    size_t stride;
    float *scratch = team_scratch(2 * (size_t)BQ * BK, &stride, "attention backward");
    if (!scratch) return -1;
#pragma omp parallel
    {
        float *P = scratch + stride * (size_t)omp_get_thread_num();
        float *dP = P + BQ * BK;
        float Dsum[BQ];
#pragma omp for schedule(dynamic, 1)
        for (int bg = 0; bg < B * NKV; bg++) {
            int b = bg / NKV, g = bg % NKV;
            size_t base = (size_t)b * T * ld, koff = base + (size_t)(NH + g) * hs, voff = koff + (size_t)NKV * hs;
            for (int t = 0; t < T; t++) {
                memset(dqkv + koff + (size_t)t * ld, 0, sizeof(float) * hs);
                memset(dqkv + voff + (size_t)t * ld, 0, sizeof(float) * hs);
            }
            for (int h = g * group; h < (g + 1) * group; h++) {
                size_t qoff = base + (size_t)h * hs, ooff = (size_t)b * T * ldo + (size_t)h * hs;
                attn_bwd_head(dqkv + qoff, dqkv + koff, dqkv + voff, dout + ooff, out + ooff,
                              lse + ((size_t)b * NH + h) * T, qkv + qoff, qkv + koff, qkv + voff, T, hs, ld, ldo,
                              scale, P, dP, Dsum);
            }
        }
    }
    free(scratch);
    return 0;
}

int cpu_attention_decode(float *out, const float *q, const float *kcache, const float *vcache, int n, int NH,
                         int NKV, int hs) {
    int group = NH / NKV, ld = NKV * hs;
    float scale = 1.0f / sqrtf((float)hs);
    size_t bytes = sizeof(float) * (size_t)n * NH;
    float *scores = malloc(bytes);
    if (!scores) return anvil_fail("kernels: cannot allocate %zu bytes of attention scores", bytes);
#pragma omp parallel for schedule(static) if ((size_t)n * NH * hs > 65536)
    for (int h = 0; h < NH; h++) {
        float *s = scores + (size_t)h * n;
        const float *qh = q + (size_t)h * hs;
        size_t kv = (size_t)(h / group) * hs;
        float mx = -INFINITY;
        for (int j = 0; j < n; j++) {
            const float *kj = kcache + (size_t)j * ld + kv;
            float dot = 0.0f;
            for (int d = 0; d < hs; d++) dot += qh[d] * kj[d];
            s[j] = dot * scale;
            mx = s[j] > mx ? s[j] : mx;
        }
        float sum = 0.0f;
        for (int j = 0; j < n; j++) {
            s[j] = vexpf(s[j] - mx);
            sum += s[j];
        }
        float *oh = out + (size_t)h * hs;
        for (int d = 0; d < hs; d++) oh[d] = 0.0f;
        for (int j = 0; j < n; j++) {
            const float *vj = vcache + (size_t)j * ld + kv;
            float p = s[j] / sum;
            for (int d = 0; d < hs; d++) oh[d] += p * vj[d];
        }
    }
    free(scores);
    return 0;
}
