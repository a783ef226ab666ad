/* The CPU backend's entry points: memory, shared by every path, and the
 * table of the path in use. Built for baseline x86-64, like the rest of the
 * library; it only hands out pointers into the per-path objects. */
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "core/crc32c.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/isa.h"
#include "kernels/kernels.h"

#define HUGE_PAGE ((size_t)2 << 20)

/* 64-byte alignment: one cache line, one AVX-512 vector. Large buffers are
 * 2 MiB aligned and asked to be backed by transparent huge pages: a
 * first-touch page fault costs tens of microseconds on virtual machines, and
 * 4 KiB pages would make the first step pay for hundreds of thousands. */
void *cpu_alloc(size_t bytes) {
    size_t align = bytes >= 2 * HUGE_PAGE ? HUGE_PAGE : 64;
    size_t rounded = (bytes + align - 1) & ~(align - 1);
    if (!rounded) rounded = align;
    void *p = aligned_alloc(align, rounded);
    if (!p) return NULL;
    if (align == HUGE_PAGE) madvise(p, rounded, MADV_HUGEPAGE);
    memset(p, 0, rounded);
    return p;
}

void cpu_zero(void *p, size_t bytes) { memset(p, 0, bytes); }
void cpu_memcpy(void *dst, const void *src, size_t bytes) { memcpy(dst, src, bytes); }
uint32_t cpu_copy_crc32c(void *dst, const void *src, size_t bytes, uint32_t crc) {
    return anvil_crc32c_copy(crc, dst, src, bytes);
}
int cpu_sync(void) { return 0; }

static const anvil_kernels *const tables[ANVIL_ISA_COUNT] = {&cpu_table_generic, &cpu_table_avx2, &cpu_table_avx512};

const anvil_kernels *anvil_kernels_cpu(void) { return tables[anvil_isa_active()]; }

const anvil_kernels *anvil_kernels_cpu_for(anvil_matmul_dtype dtype) {
    if (dtype == ANVIL_MATMUL_F32) return anvil_kernels_cpu();
    switch (anvil_isa_bf16()) {
    case ANVIL_BF16_AMX: return &cpu_table_amx_avx512;
    case ANVIL_BF16_AVX512: return &cpu_table_bf16_avx512;
    default: return NULL;
    }
}
