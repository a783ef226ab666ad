/* The kernel interface: every numeric operation of the model, forward and
 * backward, behind one table of function pointers.
 *
 * Model code calls only through this table and never touches a buffer's
 * contents itself, so a CUDA backend can provide its own table (and its own
 * allocator) without any change to src/model. All tensors are fp32, dense,
 * row-major; shapes use the names of the GPT-2 code: N rows (= B*T), C
 * channels, OC output channels, NH heads (NKV key/value heads of hs
 * channels each in grouped-query attention), H hidden units, V real
 * vocabulary, Vp padded vocabulary.
 *
 * Conventions: functions named *_backward ACCUMULATE (+=) into parameter
 * gradients (dw, db, dwte...) so gradient accumulation over micro-batches
 * needs no extra pass; input gradients are written or accumulated as each
 * function documents. Every kernel is deterministic, and its results do not
 * depend on the thread count: no reduction is split by thread. Two backends
 * provide the table: the CPU's (kernels/cpu) and CUDA's (kernels/cuda.h). */
#ifndef ANVIL_KERNELS_KERNELS_H
#define ANVIL_KERNELS_KERNELS_H

#include <stddef.h>
#include <stdint.h>

typedef struct anvil_kernels {
    const char *name;

    /* Memory owned by the backend (host memory for the CPU). */
    void *(*alloc)(size_t bytes);            /* zeroed, aligned for vector loads; NULL on failure */
    void (*free)(void *p);
    void (*zero)(void *p, size_t bytes);
    void (*upload)(void *dst, const void *src, size_t bytes);   /* host -> backend */
    void (*download)(void *dst, const void *src, size_t bytes); /* backend -> host */
    /* download, continuing the CRC-32C crc over the bytes (core/crc32c.h), for checkpoint snapshots */
    uint32_t (*download_crc32c)(void *dst, const void *src, size_t bytes, uint32_t crc);
    /* Waits until the work queued so far is done: 0, or -1 after anvil_fail naming the first kernel
     * that failed and why, for the void entries cannot report a failure themselves. A backend that
     * runs asynchronously (CUDA) is checked here; the CPU's runs everything in the call: 0. */
    int (*sync)(void);

    /* out[N,C] = wte[tokens] + wpe[position] for B sequences of T tokens. */
    void (*encoder_forward)(float *out, const int32_t *tokens, const float *wte, const float *wpe, int B,
                            int T, int C);
    void (*encoder_backward)(float *dwte, float *dwpe, const float *dout, const int32_t *tokens, int B, int T,
                             int C);
    /* The vocabulary-parallel embedding of tensor parallelism: wte[Vs,C] holds rows [v0, v0+Vs) of the
     * table. Tokens outside them give zero rows (wpe still added when not NULL), so summing the outputs
     * of every shard gives encoder_forward's; the backward accumulates only in-shard rows of dwte, and
     * dwpe when not NULL. */
    void (*encoder_shard_forward)(float *out, const int32_t *tokens, const float *wte, const float *wpe, int B,
                                  int T, int C, int v0, int Vs);
    void (*encoder_shard_backward)(float *dwte, float *dwpe, const float *dout, const int32_t *tokens, int B,
                                   int T, int C, int v0, int Vs);

    /* out = (x - mean) * rstd * w + b per row; mean and rstd [N] are kept for the backward. */
    void (*layernorm_forward)(float *out, float *mean, float *rstd, const float *x, const float *w,
                              const float *b, int N, int C);
    /* dx += ..., dw += ..., db += ... */
    void (*layernorm_backward)(float *dx, float *dw, float *db, const float *dout, const float *x,
                               const float *w, const float *mean, const float *rstd, int N, int C);

    /* out[N,OC] (= or += when accumulate) x[N,C] @ w[OC,C]^T + b[OC] (b may be NULL). */
    void (*matmul_forward)(float *out, const float *x, const float *w, const float *b, int N, int C, int OC,
                           int accumulate);
    /* dx[N,C] = dout @ w (skipped when dx is NULL); dw += dout^T @ x; db += column sums (if db). */
    void (*matmul_backward)(float *dx, float *dw, float *db, const float *dout, const float *x,
                            const float *w, int N, int C, int OC);

    /* Causal attention with grouped-query heads on packed qkv[B,T,(NH+2*NKV)*hs]: each row holds NH
     * query heads, then NKV key heads, then NKV value heads, hs wide, and query head h attends with
     * key/value head h / (NH/NKV). NKV divides NH; NKV = NH is multi-head attention (GPT-2's
     * [q | k | v] with C = NH*hs), NKV = 1 multi-query. out[B,T,NH*hs]; lse[B,NH,T] keeps each row's
     * log-sum-exp so the backward can recompute the probabilities. The three attention functions
     * return -1 (after anvil_fail) when their scratch space cannot be allocated. */
    int (*attention_forward)(float *out, float *lse, const float *qkv, int B, int T, int NH, int NKV, int hs);
    /* dqkv[B,T,(NH+2*NKV)*hs] = gradient (written, not accumulated); a key or value head's gradient
     * sums its group's query heads. */
    int (*attention_backward)(float *dqkv, const float *dout, const float *out, const float *lse,
                              const float *qkv, int B, int T, int NH, int NKV, int hs);

    /* One new query row per head against the first n cached keys and values (incremental decoding):
     * q[NH*hs], kcache/vcache[>=n, NKV*hs] (key/value heads grouped as above), out[NH*hs]. */
    int (*attention_decode)(float *out, const float *q, const float *kcache, const float *vcache, int n, int NH,
                            int NKV, int hs);

    /* RMSNorm (Llama's): out = w * (x * rstd) per row, rstd = 1 / sqrt(mean(x^2) + eps); rstd [N] is
     * kept for the backward. */
    void (*rmsnorm_forward)(float *out, float *rstd, const float *x, const float *w, int N, int C, float eps);
    /* dx += ..., dw += ... */
    void (*rmsnorm_backward)(float *dx, float *dw, const float *dout, const float *x, const float *w,
                             const float *rstd, int N, int C);

    /* Rotary position embedding in Hugging Face's rotate-half layout, in place on the NH query heads
     * and NKV key heads of packed qkv[B,T,(NH+2*NKV)*hs] (the value heads are left alone); token t of
     * each sequence is at position pos0 + t. cs[P,hs] holds per position p the cosines of its hs/2
     * angles, then their sines (kernels/rope.h builds it). With c, s of angle i < hs/2:
     * x[i] <- x[i]*c - x[i+hs/2]*s and x[i+hs/2] <- x[i+hs/2]*c + x[i]*s. */
    void (*rope_forward)(float *qkv, const float *cs, int B, int T, int pos0, int NH, int NKV, int hs);
    /* Its backward, in place on the query and key heads of dqkv: the inverse rotation. */
    void (*rope_backward)(float *dqkv, const float *cs, int B, int T, int pos0, int NH, int NKV, int hs);

    /* SwiGLU: out[N,H] = silu(gate) * up, silu(g) = g / (1 + exp(-g)). gate and up are [N,H] with rows
     * ld apart (ld = H for separate buffers, 2H for [gate | up] rows of one matmul's output). */
    void (*swiglu_forward)(float *out, const float *gate, const float *up, int N, int H, int ld);
    /* dgate and dup (rows ld apart, like gate and up) = gradients (written, not accumulated). */
    void (*swiglu_backward)(float *dgate, float *dup, const float *dout, const float *gate, const float *up, int N,
                            int H, int ld);

    /* GELU, tanh form. The backward may run in place (dx == dout). */
    void (*gelu_forward)(float *out, const float *x, size_t n);
    void (*gelu_backward)(float *dx, const float *x, const float *dout, size_t n);

    /* dst = src, elementwise (residual stream copies). */
    void (*copy)(float *dst, const float *src, size_t n);
    /* dst += src */
    void (*add_inplace)(float *dst, const float *src, size_t n);

    /* Fused LM head and cross-entropy over x[N,C] against wte[Vp,C], chunked so the [N,Vp] logits
     * never exist at once. Writes losses[N] (per-position loss). When dx is not NULL it also
     * writes dx[N,C] and accumulates dwte, for the loss sum(losses) * dscale. Columns >= V are
     * padding and never take part. targets < 0 are ignored (no loss, no gradient). Returns -1
     * (after anvil_fail) if its chunk buffer cannot be allocated. */
    int (*classifier)(float *losses, float *dx, float *dwte, const float *x, const float *wte,
                       const int32_t *targets, int N, int C, int V, int Vp, float dscale);
    /* The vocabulary-parallel cross-entropy of tensor parallelism, in two halves around the caller's
     * combination of the shards. wte[Vs,C] holds rows [v0, v0+Vs) of the padded table, of which the
     * first Vr are real vocabulary. classifier_shard_stats writes per row the log-sum-exp of this
     * shard's real logits (-inf when Vr is 0) and the target's logit when the target is in the shard
     * (else 0). Given the global log-sum-exp lse[N], classifier_shard_backward writes this shard's term
     * of dx[N,C] (the gradient is the sum over shards) and accumulates dwte, for the loss
     * sum(losses) * dscale. Targets < 0 take no part. Logits are chunked as in classifier; both
     * return -1 (after anvil_fail) if the chunk buffer cannot be allocated. */
    int (*classifier_shard_stats)(float *lse, float *target_logit, const float *x, const float *wte,
                                  const int32_t *targets, int N, int C, int v0, int Vr, int Vs);
    int (*classifier_shard_backward)(float *dx, float *dwte, const float *x, const float *wte, const float *lse,
                                     const int32_t *targets, int N, int C, int v0, int Vr, int Vs, float dscale);
    /* logits[N,Vp] = x @ wte^T, all of them: for evaluation and sampling. */
    void (*logits)(float *logits, const float *x, const float *wte, int N, int C, int Vp);

    /* Sum of squares of g[n], in double for a stable global norm. */
    double (*sumsq)(const float *g, size_t n);
    /* One AdamW update as PyTorch computes it (decoupled weight decay first, then the bias-corrected
     * step) from the gradients g * gscale, each product rounded to fp32 as if g had been scaled in
     * place first (gradient clipping; 1: unclipped), g itself left as it is; t is the 1-based step
     * count. One pass over the four arrays where clipping and the update would take two. */
    void (*adamw)(float *p, const float *g, float gscale, float *m, float *v, size_t n, float lr, float beta1,
                  float beta2, float eps, float weight_decay, int t);
} anvil_kernels;

/* What the matmuls (linear layers and the LM head) multiply in; everything
 * else, the master weights, gradients and optimizer state stay fp32. */
typedef enum { ANVIL_MATMUL_F32, ANVIL_MATMUL_BF16 } anvil_matmul_dtype;

/* Where a run computes: the CPU, or GPU `index` through CUDA. */
typedef enum { ANVIL_DEVICE_CPU, ANVIL_DEVICE_CUDA } anvil_device_kind;
typedef struct {
    anvil_device_kind kind;
    int index;
} anvil_device;

/* "cpu", "cuda" (GPU 0) or "cuda:N" into out; -1 after anvil_fail naming s. */
int anvil_device_parse(const char *s, anvil_device *out);
/* "cpu", "cuda:N" into out (cap bytes). */
void anvil_device_name(anvil_device d, char *out, size_t cap);
/* The kernel table of device with matmuls in dtype: the one entry point that train and the CLI
 * choose a backend by. NULL after anvil_fail when the device cannot (no such GPU, a build without
 * CUDA, bf16 on a CPU path without it). */
const anvil_kernels *anvil_kernels_for(anvil_device device, anvil_matmul_dtype dtype);

/* The CPU backend on the instruction-set path in use (kernels/isa.h), fp32. */
const anvil_kernels *anvil_kernels_cpu(void);
/* The same, with matmuls in `dtype`: NULL after anvil_fail when the path
 * cannot (bf16 needs AVX512_BF16 on the avx512 path). */
const anvil_kernels *anvil_kernels_cpu_for(anvil_matmul_dtype dtype);

#endif
