/* The CPU backend's kernels, one file per operation; backend.c gathers them
 * into anvil_kernels tables. Internal to src/kernels.
 *
 * These files are compiled once per instruction-set path (the build defines
 * ANVIL_CPU_ISA as generic, avx2 or avx512, with that path's -march), so the
 * compiler vectorizes each for its path. The defines below give every copy
 * of a function its path's suffix (cpu_gelu_forward_avx2, ...), and
 * CPU_TILE names the path's GEMM tile; select.c, built for baseline x86-64,
 * hands out the table of the path in use. */
#ifndef ANVIL_KERNELS_CPU_CPU_KERNELS_H
#define ANVIL_KERNELS_CPU_CPU_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/kernels.h"

/* One table per path, and two more on the avx512 path whose matmuls
 * multiply in bf16: by vdpbf16ps, and by AMX. */
extern const anvil_kernels cpu_table_generic, cpu_table_avx2, cpu_table_avx512, cpu_table_bf16_avx512,
    cpu_table_amx_avx512;

/* Shared by every table: host memory, built once (select.c). */
void *cpu_alloc(size_t bytes);
void cpu_zero(void *p, size_t bytes);
void cpu_memcpy(void *dst, const void *src, size_t bytes);
uint32_t cpu_copy_crc32c(void *dst, const void *src, size_t bytes, uint32_t crc);
int cpu_sync(void);

#ifdef ANVIL_CPU_ISA
#define CPU_CAT2(a, b) a##_##b
#define CPU_CAT(a, b) CPU_CAT2(a, b)
#define CPU_ISA_NAME(f) CPU_CAT(f, ANVIL_CPU_ISA)
#define CPU_TILE CPU_CAT(cpu_tile, ANVIL_CPU_ISA)
#define cpu_table CPU_ISA_NAME(cpu_table)
#define cpu_table_bf16 CPU_ISA_NAME(cpu_table_bf16)
#define cpu_table_amx CPU_ISA_NAME(cpu_table_amx)
#define cpu_encoder_forward CPU_ISA_NAME(cpu_encoder_forward)
#define cpu_encoder_backward CPU_ISA_NAME(cpu_encoder_backward)
#define cpu_encoder_shard_forward CPU_ISA_NAME(cpu_encoder_shard_forward)
#define cpu_encoder_shard_backward CPU_ISA_NAME(cpu_encoder_shard_backward)
#define cpu_classifier_shard_stats CPU_ISA_NAME(cpu_classifier_shard_stats)
#define cpu_classifier_shard_backward CPU_ISA_NAME(cpu_classifier_shard_backward)
#define cpu_classifier_shard_stats_bf16 CPU_ISA_NAME(cpu_classifier_shard_stats_bf16)
#define cpu_classifier_shard_backward_bf16 CPU_ISA_NAME(cpu_classifier_shard_backward_bf16)
#define cpu_classifier_shard_stats_amx CPU_ISA_NAME(cpu_classifier_shard_stats_amx)
#define cpu_classifier_shard_backward_amx CPU_ISA_NAME(cpu_classifier_shard_backward_amx)
#define cpu_layernorm_forward CPU_ISA_NAME(cpu_layernorm_forward)
#define cpu_layernorm_backward CPU_ISA_NAME(cpu_layernorm_backward)
#define cpu_matmul_forward CPU_ISA_NAME(cpu_matmul_forward)
#define cpu_matmul_backward CPU_ISA_NAME(cpu_matmul_backward)
#define cpu_matmul_forward_bf16 CPU_ISA_NAME(cpu_matmul_forward_bf16)
#define cpu_matmul_backward_bf16 CPU_ISA_NAME(cpu_matmul_backward_bf16)
#define cpu_matmul_forward_amx CPU_ISA_NAME(cpu_matmul_forward_amx)
#define cpu_matmul_backward_amx CPU_ISA_NAME(cpu_matmul_backward_amx)
#define cpu_attention_forward CPU_ISA_NAME(cpu_attention_forward)
#define cpu_attention_backward CPU_ISA_NAME(cpu_attention_backward)
#define cpu_attention_decode CPU_ISA_NAME(cpu_attention_decode)
#define cpu_rmsnorm_forward CPU_ISA_NAME(cpu_rmsnorm_forward)
#define cpu_rmsnorm_backward CPU_ISA_NAME(cpu_rmsnorm_backward)
#define cpu_rope_forward CPU_ISA_NAME(cpu_rope_forward)
#define cpu_rope_backward CPU_ISA_NAME(cpu_rope_backward)
#define cpu_swiglu_forward CPU_ISA_NAME(cpu_swiglu_forward)
#define cpu_swiglu_backward CPU_ISA_NAME(cpu_swiglu_backward)
#define cpu_gelu_forward CPU_ISA_NAME(cpu_gelu_forward)
#define cpu_gelu_backward CPU_ISA_NAME(cpu_gelu_backward)
#define cpu_copy CPU_ISA_NAME(cpu_copy)
#define cpu_add_inplace CPU_ISA_NAME(cpu_add_inplace)
#define cpu_classifier CPU_ISA_NAME(cpu_classifier)
#define cpu_classifier_bf16 CPU_ISA_NAME(cpu_classifier_bf16)
#define cpu_classifier_amx CPU_ISA_NAME(cpu_classifier_amx)
#define cpu_logits CPU_ISA_NAME(cpu_logits)
#define cpu_logits_bf16 CPU_ISA_NAME(cpu_logits_bf16)
#define cpu_logits_amx CPU_ISA_NAME(cpu_logits_amx)
#define cpu_sumsq CPU_ISA_NAME(cpu_sumsq)
#define cpu_adamw CPU_ISA_NAME(cpu_adamw)

void cpu_encoder_forward(float *out, const int32_t *tokens, const float *wte, const float *wpe, int B, int T, int C);
void cpu_encoder_backward(float *dwte, float *dwpe, const float *dout, const int32_t *tokens, int B, int T, int C);
void cpu_encoder_shard_forward(float *out, const int32_t *tokens, const float *wte, const float *wpe, int B, int T,
                               int C, int v0, int Vs);
void cpu_encoder_shard_backward(float *dwte, float *dwpe, const float *dout, const int32_t *tokens, int B, int T,
                                int C, int v0, int Vs);
int cpu_classifier_shard_stats(float *lse, float *target_logit, const float *x, const float *wte,
                               const int32_t *targets, int N, int C, int v0, int Vr, int Vs);
int cpu_classifier_shard_backward(float *dx, float *dwte, const float *x, const float *wte, const float *lse,
                                  const int32_t *targets, int N, int C, int v0, int Vr, int Vs, float dscale);
int cpu_classifier_shard_stats_bf16(float *lse, float *target_logit, const float *x, const float *wte,
                                    const int32_t *targets, int N, int C, int v0, int Vr, int Vs);
int cpu_classifier_shard_backward_bf16(float *dx, float *dwte, const float *x, const float *wte, const float *lse,
                                       const int32_t *targets, int N, int C, int v0, int Vr, int Vs, float dscale);
int cpu_classifier_shard_stats_amx(float *lse, float *target_logit, const float *x, const float *wte,
                                   const int32_t *targets, int N, int C, int v0, int Vr, int Vs);
int cpu_classifier_shard_backward_amx(float *dx, float *dwte, const float *x, const float *wte, const float *lse,
                                      const int32_t *targets, int N, int C, int v0, int Vr, int Vs, float dscale);
void cpu_layernorm_forward(float *out, float *mean, float *rstd, const float *x, const float *w, const float *b,
                           int N, int C);
void cpu_layernorm_backward(float *dx, float *dw, float *db, const float *dout, const float *x, const float *w,
                            const float *mean, const float *rstd, int N, int C);
void cpu_matmul_forward(float *out, const float *x, const float *w, const float *b, int N, int C, int OC,
                        int accumulate);
void cpu_matmul_backward(float *dx, float *dw, float *db, const float *dout, const float *x, const float *w, int N,
                         int C, int OC);
void cpu_matmul_forward_bf16(float *out, const float *x, const float *w, const float *b, int N, int C, int OC,
                             int accumulate);
void cpu_matmul_backward_bf16(float *dx, float *dw, float *db, const float *dout, const float *x, const float *w,
                              int N, int C, int OC);
void cpu_matmul_forward_amx(float *out, const float *x, const float *w, const float *b, int N, int C, int OC,
                            int accumulate);
void cpu_matmul_backward_amx(float *dx, float *dw, float *db, const float *dout, const float *x, const float *w,
                             int N, int C, int OC);
int cpu_attention_forward(float *out, float *lse, const float *qkv, int B, int T, int NH, int NKV, int hs);
int cpu_attention_backward(float *dqkv, const float *dout, const float *out, const float *lse, const float *qkv,
                           int B, int T, int NH, int NKV, int hs);
int cpu_attention_decode(float *out, const float *q, const float *kcache, const float *vcache, int n, int NH,
                         int NKV, int hs);
void cpu_rmsnorm_forward(float *out, float *rstd, const float *x, const float *w, int N, int C, float eps);
void cpu_rmsnorm_backward(float *dx, float *dw, const float *dout, const float *x, const float *w, const float *rstd,
                          int N, int C);
void cpu_rope_forward(float *qkv, const float *cs, int B, int T, int pos0, int NH, int NKV, int hs);
void cpu_rope_backward(float *dqkv, const float *cs, int B, int T, int pos0, int NH, int NKV, int hs);
void cpu_swiglu_forward(float *out, const float *gate, const float *up, int N, int H, int ld);
void cpu_swiglu_backward(float *dgate, float *dup, const float *dout, const float *gate, const float *up, int N, int H,
                         int ld);
void cpu_gelu_forward(float *out, const float *x, size_t n);
void cpu_gelu_backward(float *dx, const float *x, const float *dout, size_t n);
void cpu_copy(float *dst, const float *src, size_t n);
void cpu_add_inplace(float *dst, const float *src, size_t n);
int cpu_classifier(float *losses, float *dx, float *dwte, const float *x, const float *wte, const int32_t *targets,
                   int N, int C, int V, int Vp, float dscale);
int cpu_classifier_bf16(float *losses, float *dx, float *dwte, const float *x, const float *wte,
                        const int32_t *targets, int N, int C, int V, int Vp, float dscale);
void cpu_logits(float *logits, const float *x, const float *wte, int N, int C, int Vp);
void cpu_logits_bf16(float *logits, const float *x, const float *wte, int N, int C, int Vp);
int cpu_classifier_amx(float *losses, float *dx, float *dwte, const float *x, const float *wte,
                       const int32_t *targets, int N, int C, int V, int Vp, float dscale);
void cpu_logits_amx(float *logits, const float *x, const float *wte, int N, int C, int Vp);
double cpu_sumsq(const float *g, size_t n);
void cpu_adamw(float *p, const float *g, float gscale, float *m, float *v, size_t n, float lr, float beta1,
               float beta2, float eps, float weight_decay, int t);
#endif

#endif
