/* Which instruction-set path the CPU kernels run: chosen at run time from
 * the CPU's features, or forced lower with ANVIL_ISA=avx512|avx2|generic.
 *
 * The library itself is built for baseline x86-64; each kernel is compiled
 * once per path and only the selected path's code ever runs, so one binary
 * runs on any x86-64 CPU and never raises SIGILL. On one path, results are
 * bit-identical whatever the thread count; different paths round
 * differently (vector widths, fused multiply-adds). */
#ifndef ANVIL_KERNELS_ISA_H
#define ANVIL_KERNELS_ISA_H

#include <stdbool.h>

typedef enum {
    ANVIL_ISA_GENERIC, /* portable C, baseline x86-64 (SSE2), no FMA */
    ANVIL_ISA_AVX2,    /* x86-64-v3: AVX2 + FMA */
    ANVIL_ISA_AVX512,  /* x86-64-v4: AVX-512 F/BW/CD/DQ/VL */
    ANVIL_ISA_COUNT
} anvil_isa;

/* "generic", "avx2", "avx512". */
const char *anvil_isa_name(anvil_isa isa);
/* Whether this CPU (and OS) can run the path. */
bool anvil_isa_supported(anvil_isa isa);
/* The best path this CPU supports. */
anvil_isa anvil_isa_best(void);
/* The path in use: ANVIL_ISA when set to a path this CPU supports, else the
 * best. Read on every call, so a test can switch paths in one process. */
anvil_isa anvil_isa_active(void);
/* 0 when ANVIL_ISA is unset, "auto", or a path this CPU runs; otherwise -1
 * after anvil_fail with a line naming the value and the missing features. */
int anvil_isa_check(void);
/* The kernels that multiply in bf16 (--dtype bf16), on the avx512 path:
 * AMX's TDPBF16PS where the CPU has AMX-BF16 and the OS grants tile data,
 * else AVX512_BF16's vdpbf16ps. Both round inputs to bf16 alike but add in
 * different orders, so their bits differ. ANVIL_BF16=amx|avx512 forces one. */
typedef enum { ANVIL_BF16_NONE, ANVIL_BF16_AVX512, ANVIL_BF16_AMX } anvil_bf16_kernel;

/* 0 when the active path can multiply in bf16 with the kernel ANVIL_BF16
 * asks for (unset or "auto": the best); otherwise -1 after anvil_fail with a
 * line naming what is missing. */
int anvil_isa_check_bf16(void);
/* The bf16 kernel in use; ANVIL_BF16_NONE when anvil_isa_check_bf16 fails.
 * Read on every call, like anvil_isa_active. */
anvil_bf16_kernel anvil_isa_bf16(void);
/* "amx", "avx512-bf16" or "none". */
const char *anvil_isa_bf16_name(anvil_bf16_kernel k);

/* This CPU's vector multiply-add throughput on all OpenMP threads, in
 * GFLOP/s, measured over about `seconds`: independent accumulator chains,
 * enough of them to hide the latency, so it is the machine's limit for
 * `isa` (fp32 FMA; or bf16 dot products, counting 2 FLOPs per bf16 pair
 * element, when bf16). The generic path has no FMA: a multiply and an add.
 * Returns 0 for a path or kind this CPU cannot run. */
double anvil_isa_peak_gflops(anvil_isa isa, bool bf16, double seconds);

#endif
