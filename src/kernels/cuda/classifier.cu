/* The LM head with cross-entropy, whole and in its two vocabulary-parallel
 * halves, and the full logits, as src/kernels/cpu/classifier.c: the logits
 * of ROWS rows at a time (cuBLASLt), a softmax kernel that turns them into
 * losses and, for the backward, into dloss/dlogits in place, then cuBLASLt
 * again for dx and dwte. The [N, Vp] logits never exist at once.
 *
 * In bf16, x and wte are rounded once per call, and each chunk's dlogits
 * as the softmax kernel writes them, as the CPU's bf16 tiles round every
 * operand. */
#include "kernels/cuda/cuda_internal.cuh"

/* Rows per chunk: GPT-2's vocabulary makes the chunk's logits 206 MB of fp32, a fraction of what a
 * training step keeps, and a 1024 x 50304 x 768 product keeps the GPU busy. */
#define ROWS 1024
#define THREADS 512

/* The scratch of one call: the chunk's logits, and in bf16 their rounded copy and x's and wte's. */
struct head_scratch {
    char *mem;
    float *logits;
    __nv_bfloat16 *logits16;
    const void *x, *w; /* the operands the products take: fp32 x and wte, or their bf16 copies */
};

static size_t up256(size_t bytes) { return (bytes + 255) / 256 * 256; }

static bool head_begin(head_scratch *s, const char *what, bool bf16, const float *x, const float *wte, int N, int C,
                       int rows, int cols) {
    size_t nl = (size_t)rows * cols, nx = (size_t)N * C, nw = (size_t)cols * C;
    size_t bytes = up256(nl * 4) + (bf16 ? up256(nl * 2) + up256(nx * 2) + nw * 2 : 0);
    s->mem = (char *)cu_scratch(what, bytes);
    if (!s->mem) return false;
    s->logits = (float *)s->mem;
    s->logits16 = nullptr;
    s->x = x;
    s->w = wte;
    if (bf16) {
        s->logits16 = (__nv_bfloat16 *)(s->mem + up256(nl * 4));
        __nv_bfloat16 *x16 = (__nv_bfloat16 *)((char *)s->logits16 + up256(nl * 2));
        __nv_bfloat16 *w16 = (__nv_bfloat16 *)((char *)x16 + up256(nx * 2));
        cu_to_bf16(what, x16, x, nx);
        cu_to_bf16(what, w16, wte, nw);
        s->x = x16;
        s->w = w16;
    }
    return true;
}

/* Row r0's operand of x: fp32 or bf16. */
static const void *x_rows(const head_scratch *s, bool bf16, int r0, int C) {
    return bf16 ? (const void *)((const __nv_bfloat16 *)s->x + (size_t)r0 * C)
                : (const void *)((const float *)s->x + (size_t)r0 * C);
}

/* dx[nr, C] = dl @ wte and dwte += dl^T @ x for a chunk whose dlogits are in s->logits (fp32) or,
 * rounded, in s->logits16 (bf16). */
static void head_grads(const char *what, bool bf16, head_scratch *s, float *dx, float *dwte, int r0, int nr, int C,
                       int cols) {
    const void *dl = bf16 ? (const void *)s->logits16 : (const void *)s->logits;
    cu_gemm(what, bf16, false, false, nr, C, cols, dl, cols, s->w, C, 0.0f, dx + (size_t)r0 * C, C, nullptr);
    cu_gemm(what, bf16, true, false, cols, C, nr, dl, cols, x_rows(s, bf16, r0, C), C, 1.0f, dwte, C, nullptr);
}

/* The gradient of row j of a chunk: in place, or rounded into the bf16 copy the products take. */
__device__ __forceinline__ void put_grad(float *row, __nv_bfloat16 *row16, int j, float g) {
    if (row16) row16[j] = __float2bfloat16_rn(g);
    else row[j] = g;
}

/* One block per row of the chunk: the loss, and with want_grad the row's dlogits (padding columns
 * zero), in place or, when grad16 is not NULL, rounded into it. Targets < 0 give no loss and a zero
 * row. */
__global__ void softmax_xent_kernel(float *logits, __nv_bfloat16 *grad16, float *__restrict__ losses,
                                    const int32_t *__restrict__ targets, int r0, int V, int Vp, int want_grad,
                                    float dscale) {
    __shared__ float sh[32];
    float *row = logits + (size_t)blockIdx.x * Vp;
    __nv_bfloat16 *row16 = grad16 ? grad16 + (size_t)blockIdx.x * Vp : nullptr;
    int tgt = targets[r0 + blockIdx.x];
    if (tgt < 0) {
        if (threadIdx.x == 0) losses[r0 + blockIdx.x] = 0.0f;
        if (want_grad)
            for (int j = threadIdx.x; j < Vp; j += blockDim.x) put_grad(row, row16, j, 0.0f);
        return;
    }
    float target_logit = row[tgt]; /* read before any thread rewrites the row */
    float mx = -INFINITY;
    for (int j = threadIdx.x; j < V; j += blockDim.x) mx = fmaxf(mx, row[j]);
    mx = cu_block_max(mx, sh);
    float sum = 0.0f;
    for (int j = threadIdx.x; j < V; j += blockDim.x) sum += expf(row[j] - mx);
    sum = cu_block_sum(sum, sh);
    if (threadIdx.x == 0) losses[r0 + blockIdx.x] = logf(sum) - (target_logit - mx);
    if (!want_grad) return;
    float inv = dscale / sum;
    for (int j = threadIdx.x; j < Vp; j += blockDim.x) {
        float g = j < V ? expf(row[j] - mx) * inv : 0.0f;
        put_grad(row, row16, j, j == tgt ? g - dscale : g);
    }
}

static int classifier(bool bf16, float *losses, float *dx, float *dwte, const float *x, const float *wte,
                      const int32_t *targets, int N, int C, int V, int Vp, float dscale) {
    const char *what = "classifier";
    if (!cu_enter() || N <= 0) return cu_status();
    int rows = N < ROWS ? N : ROWS;
    head_scratch s;
    if (!head_begin(&s, what, bf16, x, wte, N, C, rows, Vp)) return cu_status();
    for (int r0 = 0; r0 < N; r0 += rows) {
        int nr = N - r0 < rows ? N - r0 : rows;
        cu_gemm(what, bf16, false, true, nr, Vp, C, x_rows(&s, bf16, r0, C), C, s.w, C, 0.0f, s.logits, Vp, nullptr);
        softmax_xent_kernel<<<(unsigned)nr, THREADS, 0, cu_g.stream>>>(s.logits, s.logits16, losses, targets, r0, V,
                                                                       Vp, dx != nullptr, dscale);
        cu_launched(what);
        if (dx) head_grads(what, bf16, &s, dx, dwte, r0, nr, C, Vp);
    }
    cu_scratch_free(s.mem);
    return cu_status();
}

/* Per row of the shard's chunk: the log-sum-exp of its Vr real logits and the target's logit. */
__global__ void shard_stats_kernel(float *__restrict__ lse, float *__restrict__ target_logit,
                                   const float *__restrict__ logits, const int32_t *__restrict__ targets, int r0,
                                   int v0, int Vr, int Vs) {
    __shared__ float sh[32];
    const float *row = logits + (size_t)blockIdx.x * Vs;
    float mx = -INFINITY;
    for (int j = threadIdx.x; j < Vr; j += blockDim.x) mx = fmaxf(mx, row[j]);
    mx = cu_block_max(mx, sh);
    float sum = 0.0f;
    for (int j = threadIdx.x; j < Vr; j += blockDim.x) sum += expf(row[j] - mx);
    sum = cu_block_sum(sum, sh);
    if (threadIdx.x != 0) return;
    int i = r0 + blockIdx.x, tgt = targets[i];
    int64_t t = (int64_t)tgt - v0;
    lse[i] = Vr > 0 ? mx + logf(sum) : -INFINITY;
    target_logit[i] = tgt >= 0 && t >= 0 && t < Vr ? row[t] : 0.0f;
}

/* Per row: the shard's dlogits, given the global log-sum-exp, in place or rounded into grad16. */
__global__ void shard_grad_kernel(float *logits, __nv_bfloat16 *grad16, const float *__restrict__ lse,
                                  const int32_t *__restrict__ targets, int r0, int v0, int Vr, int Vs, float dscale) {
    float *row = logits + (size_t)blockIdx.x * Vs;
    __nv_bfloat16 *row16 = grad16 ? grad16 + (size_t)blockIdx.x * Vs : nullptr;
    int i = r0 + blockIdx.x, tgt = targets[i];
    int64_t t = (int64_t)tgt - v0;
    float l = lse[i];
    for (int j = threadIdx.x; j < Vs; j += blockDim.x) {
        float g = tgt >= 0 && j < Vr ? expf(row[j] - l) * dscale : 0.0f;
        put_grad(row, row16, j, tgt >= 0 && j == t ? g - dscale : g);
    }
}

static int shard_stats(bool bf16, float *lse, float *target_logit, const float *x, const float *wte,
                       const int32_t *targets, int N, int C, int v0, int Vr, int Vs) {
    const char *what = "classifier_shard_stats";
    if (!cu_enter() || N <= 0) return cu_status();
    int rows = N < ROWS ? N : ROWS;
    head_scratch s;
    if (!head_begin(&s, what, bf16, x, wte, N, C, rows, Vs)) return cu_status();
    for (int r0 = 0; r0 < N; r0 += rows) {
        int nr = N - r0 < rows ? N - r0 : rows;
        cu_gemm(what, bf16, false, true, nr, Vs, C, x_rows(&s, bf16, r0, C), C, s.w, C, 0.0f, s.logits, Vs, nullptr);
        shard_stats_kernel<<<(unsigned)nr, THREADS, 0, cu_g.stream>>>(lse, target_logit, s.logits, targets, r0, v0,
                                                                      Vr, Vs);
        cu_launched(what);
    }
    cu_scratch_free(s.mem);
    return cu_status();
}

static int shard_backward(bool bf16, float *dx, float *dwte, const float *x, const float *wte, const float *lse,
                          const int32_t *targets, int N, int C, int v0, int Vr, int Vs, float dscale) {
    const char *what = "classifier_shard_backward";
    if (!cu_enter() || N <= 0) return cu_status();
    int rows = N < ROWS ? N : ROWS;
    head_scratch s;
    if (!head_begin(&s, what, bf16, x, wte, N, C, rows, Vs)) return cu_status();
    for (int r0 = 0; r0 < N; r0 += rows) {
        int nr = N - r0 < rows ? N - r0 : rows;
        cu_gemm(what, bf16, false, true, nr, Vs, C, x_rows(&s, bf16, r0, C), C, s.w, C, 0.0f, s.logits, Vs, nullptr);
        shard_grad_kernel<<<(unsigned)nr, THREADS, 0, cu_g.stream>>>(s.logits, s.logits16, lse, targets, r0, v0, Vr,
                                                                     Vs, dscale);
        cu_launched(what);
        head_grads(what, bf16, &s, dx, dwte, r0, nr, C, Vs);
    }
    cu_scratch_free(s.mem);
    return cu_status();
}

static void logits(bool bf16, float *out, const float *x, const float *wte, int N, int C, int Vp) {
    const char *what = "logits";
    if (N <= 0 || !cu_enter()) return;
    if (!bf16) {
        cu_gemm(what, false, false, true, N, Vp, C, x, C, wte, C, 0.0f, out, Vp, nullptr);
        return;
    }
    size_t nx = (size_t)N * C, nw = (size_t)Vp * C;
    char *mem = (char *)cu_scratch(what, up256(nx * 2) + nw * 2);
    if (!mem) return;
    __nv_bfloat16 *x16 = (__nv_bfloat16 *)mem, *w16 = (__nv_bfloat16 *)(mem + up256(nx * 2));
    cu_to_bf16(what, x16, x, nx);
    cu_to_bf16(what, w16, wte, nw);
    cu_gemm(what, true, false, true, N, Vp, C, x16, C, w16, C, 0.0f, out, Vp, nullptr);
    cu_scratch_free(mem);
}

int cu_classifier_f32(float *losses, float *dx, float *dwte, const float *x, const float *wte, const int32_t *targets,
                      int N, int C, int V, int Vp, float dscale) {
    return classifier(false, losses, dx, dwte, x, wte, targets, N, C, V, Vp, dscale);
}
int cu_classifier_bf16(float *losses, float *dx, float *dwte, const float *x, const float *wte,
                       const int32_t *targets, int N, int C, int V, int Vp, float dscale) {
    return classifier(true, losses, dx, dwte, x, wte, targets, N, C, V, Vp, dscale);
}
int cu_classifier_shard_stats_f32(float *lse, float *target_logit, const float *x, const float *wte,
                                  const int32_t *targets, int N, int C, int v0, int Vr, int Vs) {
    return shard_stats(false, lse, target_logit, x, wte, targets, N, C, v0, Vr, Vs);
}
int cu_classifier_shard_stats_bf16(float *lse, float *target_logit, const float *x, const float *wte,
                                   const int32_t *targets, int N, int C, int v0, int Vr, int Vs) {
    return shard_stats(true, lse, target_logit, x, wte, targets, N, C, v0, Vr, Vs);
}
int cu_classifier_shard_backward_f32(float *dx, float *dwte, const float *x, const float *wte, const float *lse,
                                     const int32_t *targets, int N, int C, int v0, int Vr, int Vs, float dscale) {
    return shard_backward(false, dx, dwte, x, wte, lse, targets, N, C, v0, Vr, Vs, dscale);
}
int cu_classifier_shard_backward_bf16(float *dx, float *dwte, const float *x, const float *wte, const float *lse,
                                      const int32_t *targets, int N, int C, int v0, int Vr, int Vs, float dscale) {
    return shard_backward(true, dx, dwte, x, wte, lse, targets, N, C, v0, Vr, Vs, dscale);
}
void cu_logits_f32(float *out, const float *x, const float *wte, int N, int C, int Vp) {
    logits(false, out, x, wte, N, C, Vp);
}
void cu_logits_bf16(float *out, const float *x, const float *wte, int N, int C, int Vp) {
    logits(true, out, x, wte, N, C, Vp);
}
