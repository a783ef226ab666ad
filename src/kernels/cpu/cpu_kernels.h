/* The CPU backend's kernels, one file per operation; backend.c gathers them
 * into the anvil_kernels table. Internal to src/kernels. */
#ifndef ANVIL_KERNELS_CPU_CPU_KERNELS_H
#define ANVIL_KERNELS_CPU_CPU_KERNELS_H

#include <stddef.h>
#include <stdint.h>

void cpu_encoder_forward(float *out, const int32_t *tokens, const float *wte, const float *wpe, int B, int T, int C);
void cpu_encoder_backward(float *dwte, float *dwpe, const float *dout, const int32_t *tokens, int B, int T, int C);
void cpu_layernorm_forward(float *out, float *mean, float *rstd, const float *x, const float *w, const float *b,
                           int N, int C);
void cpu_layernorm_backward(float *dx, float *dw, float *db, const float *dout, const float *x, const float *w,
                            const float *mean, const float *rstd, int N, int C);
void cpu_matmul_forward(float *out, const float *x, const float *w, const float *b, int N, int C, int OC,
                        int accumulate);
void cpu_matmul_backward(float *dx, float *dw, float *db, const float *dout, const float *x, const float *w, int N,
                         int C, int OC);
void cpu_attention_forward(float *out, float *lse, const float *qkv, int B, int T, int C, int NH);
void cpu_attention_backward(float *dqkv, const float *dout, const float *out, const float *lse, const float *qkv,
                            int B, int T, int C, int NH);
void cpu_attention_decode(float *out, const float *q, const float *kcache, const float *vcache, int n, int C, int NH);
void cpu_gelu_forward(float *out, const float *x, size_t n);
void cpu_gelu_backward(float *dx, const float *x, const float *dout, size_t n);
void cpu_copy(float *dst, const float *src, size_t n);
void cpu_add_inplace(float *dst, const float *src, size_t n);
int cpu_classifier(float *losses, float *dx, float *dwte, const float *x, const float *wte, const int32_t *targets,
                   int N, int C, int V, int Vp, float dscale);
void cpu_logits(float *logits, const float *x, const float *wte, int N, int C, int Vp);
double cpu_sumsq(const float *g, size_t n);
void cpu_scale(float *g, float s, size_t n);
void cpu_adamw(float *p, const float *g, float *m, float *v, size_t n, float lr, float beta1, float beta2, float eps,
               float weight_decay, int t);

#endif
