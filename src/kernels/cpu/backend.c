/* This path's kernel tables (compiled once per path: cpu_kernels.h). */
#include <stdlib.h>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/kernels.h"

#define STR2(x) #x
#define STR(x) STR2(x)

/* Every entry but the matmuls (the linear layers, the classifier and its
 * vocabulary-parallel halves, the logits), which differ between the fp32 table
 * and the bf16 ones (vdpbf16ps, AMX). */
#define COMMON_ENTRIES                                                                                                \
    .alloc = cpu_alloc, .free = free, .zero = cpu_zero, .upload = cpu_memcpy, .download = cpu_memcpy,                 \
    .download_crc32c = cpu_copy_crc32c, .sync = cpu_sync,                                                             \
    .encoder_forward = cpu_encoder_forward, .encoder_backward = cpu_encoder_backward,                                 \
    .encoder_shard_forward = cpu_encoder_shard_forward, .encoder_shard_backward = cpu_encoder_shard_backward,         \
    .layernorm_forward = cpu_layernorm_forward, .layernorm_backward = cpu_layernorm_backward,                         \
    .attention_forward = cpu_attention_forward, .attention_backward = cpu_attention_backward,                         \
    .attention_decode = cpu_attention_decode, .gelu_forward = cpu_gelu_forward, .gelu_backward = cpu_gelu_backward,   \
    .rmsnorm_forward = cpu_rmsnorm_forward, .rmsnorm_backward = cpu_rmsnorm_backward,                                 \
    .rope_forward = cpu_rope_forward, .rope_backward = cpu_rope_backward,                                             \
    .swiglu_forward = cpu_swiglu_forward, .swiglu_backward = cpu_swiglu_backward,                                     \
    .copy = cpu_copy, .add_inplace = cpu_add_inplace, .sumsq = cpu_sumsq, .adamw = cpu_adamw

const anvil_kernels cpu_table = {
    .name = "cpu-" STR(ANVIL_CPU_ISA),
    COMMON_ENTRIES,
    .matmul_forward = cpu_matmul_forward,
    .matmul_backward = cpu_matmul_backward,
    .classifier = cpu_classifier,
    .classifier_shard_stats = cpu_classifier_shard_stats,
    .classifier_shard_backward = cpu_classifier_shard_backward,
    .logits = cpu_logits,
};

#ifdef ANVIL_CPU_BF16
const anvil_kernels cpu_table_bf16 = {
    .name = "cpu-" STR(ANVIL_CPU_ISA) "-bf16",
    COMMON_ENTRIES,
    .matmul_forward = cpu_matmul_forward_bf16,
    .matmul_backward = cpu_matmul_backward_bf16,
    .classifier = cpu_classifier_bf16,
    .classifier_shard_stats = cpu_classifier_shard_stats_bf16,
    .classifier_shard_backward = cpu_classifier_shard_backward_bf16,
    .logits = cpu_logits_bf16,
};

const anvil_kernels cpu_table_amx = {
    .name = "cpu-" STR(ANVIL_CPU_ISA) "-amx",
    COMMON_ENTRIES,
    .matmul_forward = cpu_matmul_forward_amx,
    .matmul_backward = cpu_matmul_backward_amx,
    .classifier = cpu_classifier_amx,
    .classifier_shard_stats = cpu_classifier_shard_stats_amx,
    .classifier_shard_backward = cpu_classifier_shard_backward_amx,
    .logits = cpu_logits_amx,
};
#endif
