#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/kernels.h"

#define HUGE_PAGE ((size_t)2 << 20)

/* 64-byte alignment: one cache line, one AVX-512 vector. Large buffers are
 * 2 MiB aligned and asked to be backed by transparent huge pages: a
 * first-touch page fault costs tens of microseconds on virtual machines, and
 * 4 KiB pages would make the first step pay for hundreds of thousands. */
static void *cpu_alloc(size_t bytes) {
    size_t align = bytes >= 2 * HUGE_PAGE ? HUGE_PAGE : 64;
    size_t rounded = (bytes + align - 1) & ~(align - 1);
    if (!rounded) rounded = align;
    void *p = aligned_alloc(align, rounded);
    if (!p) return NULL;
    if (align == HUGE_PAGE) madvise(p, rounded, MADV_HUGEPAGE);
    memset(p, 0, rounded);
    return p;
}

static void cpu_zero(void *p, size_t bytes) { memset(p, 0, bytes); }
static void cpu_memcpy(void *dst, const void *src, size_t bytes) { memcpy(dst, src, bytes); }

static const anvil_kernels cpu_table = {
    .name = "cpu",
    .alloc = cpu_alloc,
    .free = free,
    .zero = cpu_zero,
    .upload = cpu_memcpy,
    .download = cpu_memcpy,
    .encoder_forward = cpu_encoder_forward,
    .encoder_backward = cpu_encoder_backward,
    .layernorm_forward = cpu_layernorm_forward,
    .layernorm_backward = cpu_layernorm_backward,
    .matmul_forward = cpu_matmul_forward,
    .matmul_backward = cpu_matmul_backward,
    .attention_forward = cpu_attention_forward,
    .attention_backward = cpu_attention_backward,
    .attention_decode = cpu_attention_decode,
    .gelu_forward = cpu_gelu_forward,
    .gelu_backward = cpu_gelu_backward,
    .copy = cpu_copy,
    .add_inplace = cpu_add_inplace,
    .classifier = cpu_classifier,
    .logits = cpu_logits,
    .sumsq = cpu_sumsq,
    .scale = cpu_scale,
    .adamw = cpu_adamw,
};

const anvil_kernels *anvil_kernels_cpu(void) { return &cpu_table; }
