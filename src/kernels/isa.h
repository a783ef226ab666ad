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
#include <stddef.h>

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
/* Whether this CPU (and OS) can run bf16 kernel k on the avx512 path, whatever ANVIL_BF16 and
 * ANVIL_ISA ask for: anvil info --gemm-rate measures every peak the machine has. */
bool anvil_isa_bf16_available(anvil_bf16_kernel k);

/* This CPU's multiply-add throughput on all OpenMP threads, in GFLOP/s, measured over about
 * `seconds`: independent accumulator chains, enough of them to hide the latency, so it is the
 * machine's limit for `isa` and kernel `bf16` (ANVIL_BF16_NONE: the path's fp32 FMA; the generic
 * path has no FMA: a multiply and an add. ANVIL_BF16_AVX512: vdpbf16ps. ANVIL_BF16_AMX: TDPBF16PS
 * on tiles that stay in their registers, 16 x 16 x 32 products a call). bf16 counts 2 FLOPs per
 * product. Returns 0 for a path or kernel this CPU cannot run. */
double anvil_isa_peak_gflops(anvil_isa isa, anvil_bf16_kernel bf16, double seconds);

/* The peak that MFU divides by: anvil_isa_peak_gflops on all OpenMP threads, the best of the probes
 * this machine ran, kept in a cache file (anvil_peak_cache_file) with one entry per CPU model,
 * path, dtype and thread count, so that it is one figure per machine rather than one that moves
 * with the load at the moment a run starts. */
typedef struct {
    double gflops;
    double probed;    /* what this call's probe measured (0: it read the cache alone) */
    bool cached;      /* read from the cache; else probed now (about a second) */
    bool stored;      /* the probe's figure was written to the cache */
    int probes;       /* the figure is the best of this many probes */
    double probed_at; /* when the best was measured, seconds since the epoch */
    char cpu[128];    /* the key: the CPU's model name (/proc/cpuinfo), */
    char path[16];    /* the path, */
    char dtype[12];   /* "fp32", "bf16" (vdpbf16ps) or "bf16-amx", */
    int threads;      /* and the thread count */
    char file[4096];  /* the cache file ("" when there is no folder for one) */
    char note[4400];  /* "" or one line: a cache ignored as corrupt, or one that could not be written */
} anvil_peak;
/* The peak of path isa with kernel bf16 (ANVIL_BF16_NONE: fp32) from the cache, or probed and cached when the
 * cache has none; with reprobe, probed again, the cache keeping the best. A cache that does not
 * parse is ignored (note says so) and replaced; it is written atomically, under a lock that makes
 * processes starting together on one machine probe once. 0, or -1 after anvil_fail for a path or
 * kind this CPU cannot run. */
int anvil_isa_peak(anvil_isa isa, anvil_bf16_kernel bf16, bool reprobe, anvil_peak *out);
/* The cache file: $ANVIL_CACHE_DIR/peak.json, else $XDG_CACHE_HOME/anvil/peak.json, else
 * ~/.cache/anvil/peak.json ("" when none of them is set). */
void anvil_peak_cache_file(char *out, size_t cap);

#endif
