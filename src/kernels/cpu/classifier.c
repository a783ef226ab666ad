#include <math.h>
#include <stdlib.h>

#include "core/error.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/gemm_tile.h"
#include "kernels/cpu/vmath.h"

/* Rows per chunk: large enough that the three GEMMs run near peak, small
 * enough that the chunk's logits (ROWS x Vp floats, 100 MB for GPT-2's
 * vocabulary) stay a fraction of the activations. */
#define ROWS 512


/* Softmax of one row of logits over the real vocabulary; returns the loss
 * and, when want_grad, turns the row into dloss/dlogits (scaled). */
static float softmax_xent_row(float *row, int V, int Vp, int target, int want_grad, float dscale) {
    float mx = -INFINITY;
    for (int j = 0; j < V; j++) mx = row[j] > mx ? row[j] : mx;
    float target_logit = row[target] - mx;
    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
    for (int j = 0; j < V; j++) {
        row[j] = vexpf(row[j] - mx);
        sum += row[j];
    }
    float loss = logf(sum) - target_logit;
    if (want_grad) {
        float inv = dscale / sum;
#pragma omp simd
        for (int j = 0; j < V; j++) row[j] *= inv;
        row[target] -= dscale;
        for (int j = V; j < Vp; j++) row[j] = 0.0f;
    }
    return loss;
}

/* The chunk's logits buffer is kept between calls: it is the largest
 * temporary of a step (100 MB for GPT-2), and allocating it afresh would
 * page-fault all of it in again every step. */
static _Thread_local float *chunk_buf;
static _Thread_local size_t chunk_cap;

static float *chunk_buffer(size_t floats) {
    if (floats > chunk_cap) {
        free(chunk_buf);
        chunk_buf = cpu_alloc(floats * sizeof(float));
        chunk_cap = chunk_buf ? floats : 0;
    }
    return chunk_buf;
}

static int classifier(const cpu_gemm_tile *t, float *losses, float *dx, float *dwte, const float *x,
                      const float *wte, const int32_t *targets, int N, int C, int V, int Vp, float dscale) {
    int rows = N < ROWS ? N : ROWS;
    float *buf = chunk_buffer((size_t)rows * Vp);
    if (!buf) return anvil_fail("classifier: cannot allocate %d x %d logits", rows, Vp);
    for (int r0 = 0; r0 < N; r0 += rows) {
        int nr = N - r0 < rows ? N - r0 : rows;
        const float *xc = x + (size_t)r0 * C;
        cpu_gemm(t, false, true, nr, Vp, C, 1.0f, xc, C, wte, C, 0.0f, buf, Vp);
#pragma omp parallel for schedule(static)
        for (int r = 0; r < nr; r++) {
            float *row = buf + (size_t)r * Vp;
            int tgt = targets[r0 + r];
            if (tgt < 0) {
                losses[r0 + r] = 0.0f;
                for (int j = 0; j < Vp; j++) row[j] = 0.0f;
                continue;
            }
            losses[r0 + r] = softmax_xent_row(row, V, Vp, tgt, dx != NULL, dscale);
        }
        if (!dx) continue;
        cpu_gemm(t, false, false, nr, C, Vp, 1.0f, buf, Vp, wte, C, 0.0f, dx + (size_t)r0 * C, C);
        cpu_gemm(t, true, false, Vp, C, nr, 1.0f, buf, Vp, xc, C, 1.0f, dwte, C);
    }
    return 0;
}

int cpu_classifier(float *losses, float *dx, float *dwte, const float *x, const float *wte, const int32_t *targets,
                   int N, int C, int V, int Vp, float dscale) {
    return classifier(&CPU_TILE, losses, dx, dwte, x, wte, targets, N, C, V, Vp, dscale);
}

void cpu_logits(float *logits, const float *x, const float *wte, int N, int C, int Vp) {
    cpu_gemm(&CPU_TILE, false, true, N, Vp, C, 1.0f, x, C, wte, C, 0.0f, logits, Vp);
}

#ifdef ANVIL_CPU_BF16
int cpu_classifier_bf16(float *losses, float *dx, float *dwte, const float *x, const float *wte,
                        const int32_t *targets, int N, int C, int V, int Vp, float dscale) {
    return classifier(&cpu_tile_avx512_bf16, losses, dx, dwte, x, wte, targets, N, C, V, Vp, dscale);
}

void cpu_logits_bf16(float *logits, const float *x, const float *wte, int N, int C, int Vp) {
    cpu_gemm(&cpu_tile_avx512_bf16, false, true, N, Vp, C, 1.0f, x, C, wte, C, 0.0f, logits, Vp);
}

int cpu_classifier_amx(float *losses, float *dx, float *dwte, const float *x, const float *wte,
                       const int32_t *targets, int N, int C, int V, int Vp, float dscale) {
    return classifier(&cpu_tile_amx_bf16, losses, dx, dwte, x, wte, targets, N, C, V, Vp, dscale);
}

void cpu_logits_amx(float *logits, const float *x, const float *wte, int N, int C, int Vp) {
    cpu_gemm(&cpu_tile_amx_bf16, false, true, N, Vp, C, 1.0f, x, C, wte, C, 0.0f, logits, Vp);
}
#endif

/* The vocabulary-parallel halves. Both recompute the shard's logits chunk by
 * chunk, so the backward costs one more x @ wte^T than the fused classifier:
 * the price of never holding a row's softmax across the all-reduce that
 * completes its log-sum-exp. */
static int shard_stats(const cpu_gemm_tile *tile, float *lse, float *target_logit, const float *x, const float *wte,
                       const int32_t *targets, int N, int C, int v0, int Vr, int Vs) {
    int rows = N < ROWS ? N : ROWS;
    float *buf = chunk_buffer((size_t)rows * Vs);
    if (!buf) return anvil_fail("classifier: cannot allocate %d x %d logits", rows, Vs);
    for (int r0 = 0; r0 < N; r0 += rows) {
        int nr = N - r0 < rows ? N - r0 : rows;
        cpu_gemm(tile, false, true, nr, Vs, C, 1.0f, x + (size_t)r0 * C, C, wte, C, 0.0f, buf, Vs);
#pragma omp parallel for schedule(static)
        for (int r = 0; r < nr; r++) {
            const float *row = buf + (size_t)r * Vs;
            float mx = -INFINITY;
            for (int j = 0; j < Vr; j++) mx = row[j] > mx ? row[j] : mx;
            float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
            for (int j = 0; j < Vr; j++) sum += vexpf(row[j] - mx);
            lse[r0 + r] = Vr > 0 ? mx + logf(sum) : -INFINITY;
            int64_t t = (int64_t)targets[r0 + r] - v0;
            target_logit[r0 + r] = targets[r0 + r] >= 0 && t >= 0 && t < Vr ? row[t] : 0.0f;
        }
    }
    return 0;
}

static int shard_backward(const cpu_gemm_tile *tile, float *dx, float *dwte, const float *x, const float *wte,
                          const float *lse, const int32_t *targets, int N, int C, int v0, int Vr, int Vs,
                          float dscale) {
    int rows = N < ROWS ? N : ROWS;
    float *buf = chunk_buffer((size_t)rows * Vs);
    if (!buf) return anvil_fail("classifier: cannot allocate %d x %d logits", rows, Vs);
    for (int r0 = 0; r0 < N; r0 += rows) {
        int nr = N - r0 < rows ? N - r0 : rows;
        const float *xc = x + (size_t)r0 * C;
        cpu_gemm(tile, false, true, nr, Vs, C, 1.0f, xc, C, wte, C, 0.0f, buf, Vs);
#pragma omp parallel for schedule(static)
        for (int r = 0; r < nr; r++) {
            float *row = buf + (size_t)r * Vs;
            int tgt = targets[r0 + r];
            if (tgt < 0) {
                for (int j = 0; j < Vs; j++) row[j] = 0.0f;
                continue;
            }
            float l = lse[r0 + r];
#pragma omp simd
            for (int j = 0; j < Vr; j++) row[j] = vexpf(row[j] - l) * dscale;
            for (int j = Vr; j < Vs; j++) row[j] = 0.0f;
            int64_t t = (int64_t)tgt - v0;
            if (t >= 0 && t < Vr) row[t] -= dscale;
        }
        cpu_gemm(tile, false, false, nr, C, Vs, 1.0f, buf, Vs, wte, C, 0.0f, dx + (size_t)r0 * C, C);
        cpu_gemm(tile, true, false, Vs, C, nr, 1.0f, buf, Vs, xc, C, 1.0f, dwte, C);
    }
    return 0;
}

/* Each table's pair multiplies as its matmuls do: the path's own fp32 tile, vdpbf16ps or AMX. */
#define SHARD_PAIR(stats, backward, tile)                                                                              \
    int stats(float *lse, float *target_logit, const float *x, const float *wte, const int32_t *targets, int N,       \
              int C, int v0, int Vr, int Vs) {                                                                        \
        return shard_stats(tile, lse, target_logit, x, wte, targets, N, C, v0, Vr, Vs);                              \
    }                                                                                                                 \
    int backward(float *dx, float *dwte, const float *x, const float *wte, const float *lse, const int32_t *targets,  \
                 int N, int C, int v0, int Vr, int Vs, float dscale) {                                                \
        return shard_backward(tile, dx, dwte, x, wte, lse, targets, N, C, v0, Vr, Vs, dscale);                       \
    }

SHARD_PAIR(cpu_classifier_shard_stats, cpu_classifier_shard_backward, &CPU_TILE)
#ifdef ANVIL_CPU_BF16
SHARD_PAIR(cpu_classifier_shard_stats_bf16, cpu_classifier_shard_backward_bf16, &cpu_tile_avx512_bf16)
SHARD_PAIR(cpu_classifier_shard_stats_amx, cpu_classifier_shard_backward_amx, &cpu_tile_amx_bf16)
#endif
