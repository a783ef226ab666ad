#include "kernels/isa.h"

#ifdef __clang__
#include <cpuid.h>
#endif
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "core/error.h"

static const char *const names[ANVIL_ISA_COUNT] = {"generic", "avx2", "avx512"};

const char *anvil_isa_name(anvil_isa isa) { return isa >= 0 && isa < ANVIL_ISA_COUNT ? names[isa] : "?"; }

/* The features each path is compiled for (-march=x86-64-v3 / -v4), as
 * __builtin_cpu_supports names them; it also checks that the OS saves the
 * wider registers. */
static const char *const avx2_features[] = {"avx", "avx2", "fma", "f16c", "bmi", "bmi2", "movbe", "lzcnt", NULL};
static const char *const avx512_features[] = {"avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl", NULL};

#ifdef __clang__
/* The names clang's __builtin_cpu_supports lacks (the fuzz build uses clang),
 * read from CPUID as GCC's runtime reads them: F16C only where AVX is usable,
 * AMX only where the OS saves the tile state (XCR0 bits 17 and 18). */
static bool has_by_cpuid(const char *f) {
    unsigned a, b, c, d;
    if (!strcmp(f, "f16c")) return __get_cpuid(1, &a, &b, &c, &d) && (c >> 29 & 1) && __builtin_cpu_supports("avx");
    if (!strcmp(f, "movbe")) return __get_cpuid(1, &a, &b, &c, &d) && (c >> 22 & 1);
    if (!strcmp(f, "lzcnt")) return __get_cpuid(0x80000001, &a, &b, &c, &d) && (c >> 5 & 1);
    int bit = !strcmp(f, "amx-tile") ? 24 : !strcmp(f, "amx-bf16") ? 22 : -1;
    if (bit < 0 || !__get_cpuid(1, &a, &b, &c, &d) || !(c >> 27 & 1)) return false; /* no OSXSAVE, no XCR0 */
    unsigned xcr0, xcr0_high;
    __asm__("xgetbv" : "=a"(xcr0), "=d"(xcr0_high) : "c"(0));
    return (xcr0 & 0x60000) == 0x60000 && __get_cpuid_count(7, 0, &a, &b, &c, &d) && (d >> bit & 1);
}
#define BY_CPUID(name) if (!strcmp(f, name)) return has_by_cpuid(name);
#else
#define BY_CPUID(name) FEATURE(name)
#endif

/* __builtin_cpu_supports needs a string literal, so the lists above are
 * matched here one name at a time. */
static bool has(const char *f) {
#define FEATURE(name)                                                                                         \
    if (!strcmp(f, name)) return __builtin_cpu_supports(name);
    FEATURE("avx") FEATURE("avx2") FEATURE("fma") BY_CPUID("f16c") FEATURE("bmi") FEATURE("bmi2")
    BY_CPUID("movbe") BY_CPUID("lzcnt") FEATURE("avx512f") FEATURE("avx512bw") FEATURE("avx512cd")
    FEATURE("avx512dq") FEATURE("avx512vl") FEATURE("avx512bf16") BY_CPUID("amx-tile") BY_CPUID("amx-bf16")
#undef FEATURE
    return false;
}

/* Appends the features of `list` this CPU lacks to buf; returns how many. */
static int missing(const char *const *list, char *buf, size_t cap) {
    int n = 0;
    for (; *list; list++) {
        if (has(*list)) continue;
        size_t len = strlen(buf);
        snprintf(buf + len, cap - len, "%s%s", len ? " " : "", *list);
        n++;
    }
    return n;
}

bool anvil_isa_supported(anvil_isa isa) {
    char buf[128] = "";
    switch (isa) {
    case ANVIL_ISA_GENERIC: return true;
    case ANVIL_ISA_AVX2: return missing(avx2_features, buf, sizeof buf) == 0;
    case ANVIL_ISA_AVX512:
        return missing(avx2_features, buf, sizeof buf) == 0 && missing(avx512_features, buf, sizeof buf) == 0;
    default: return false;
    }
}

anvil_isa anvil_isa_best(void) {
    for (int isa = ANVIL_ISA_COUNT - 1; isa > 0; isa--)
        if (anvil_isa_supported((anvil_isa)isa)) return (anvil_isa)isa;
    return ANVIL_ISA_GENERIC;
}

/* The path ANVIL_ISA names: 1 when it names one (in *out), 0 when unset or
 * "auto", -1 when it names none. */
static int requested(anvil_isa *out) {
    const char *e = getenv("ANVIL_ISA");
    if (!e || !*e || !strcmp(e, "auto")) return 0;
    for (int i = 0; i < ANVIL_ISA_COUNT; i++)
        if (!strcmp(e, names[i])) {
            *out = (anvil_isa)i;
            return 1;
        }
    return -1;
}

anvil_isa anvil_isa_active(void) {
    anvil_isa want;
    if (requested(&want) == 1 && anvil_isa_supported(want)) return want;
    return anvil_isa_best();
}

int anvil_isa_check(void) {
    anvil_isa want;
    int r = requested(&want);
    if (r == 0) return 0;
    if (r < 0) return anvil_fail("ANVIL_ISA='%s': expected avx512, avx2, generic or auto", getenv("ANVIL_ISA"));
    char buf[160] = "";
    if (want >= ANVIL_ISA_AVX2) missing(avx2_features, buf, sizeof buf);
    if (want >= ANVIL_ISA_AVX512) missing(avx512_features, buf, sizeof buf);
    if (*buf) return anvil_fail("ANVIL_ISA=%s: this CPU lacks %s", names[want], buf);
    return 0;
}

/* From the kernel's asm/prctl.h and its xstate numbering: AMX tile data is
 * off for a process until it asks. */
#define ARCH_REQ_XCOMP_PERM 0x1023
#define XFEATURE_XTILEDATA 18

static pthread_once_t amx_once = PTHREAD_ONCE_INIT;
static bool amx_ok;

/* Asked once per process; the AMX tile also packs with AVX512_BF16. */
static void probe_amx(void) {
    amx_ok = has("amx-tile") && has("amx-bf16") && has("avx512bf16") &&
             syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0;
}

static bool amx_available(void) {
    pthread_once(&amx_once, probe_amx);
    return amx_ok;
}

/* The kernel the checks pass for, or ANVIL_BF16_NONE after anvil_fail. */
static anvil_bf16_kernel bf16_kernel(void) {
    const char *e = getenv("ANVIL_BF16");
    bool forced_amx = e && !strcmp(e, "amx"), forced_avx512 = e && !strcmp(e, "avx512");
    if (e && *e && strcmp(e, "auto") && !forced_amx && !forced_avx512) {
        anvil_fail("ANVIL_BF16='%s': expected amx, avx512 or auto", e);
        return ANVIL_BF16_NONE;
    }
    anvil_isa isa = anvil_isa_active();
    if (!has("avx512bf16")) {
        anvil_fail("bf16 needs AVX512_BF16 (vdpbf16ps), which this CPU lacks; use --dtype fp32");
        return ANVIL_BF16_NONE;
    }
    if (isa != ANVIL_ISA_AVX512) {
        anvil_fail("bf16 runs on the avx512 path only, and ANVIL_ISA selects %s", names[isa]);
        return ANVIL_BF16_NONE;
    }
    if (forced_avx512) return ANVIL_BF16_AVX512;
    if (amx_available()) return ANVIL_BF16_AMX;
    if (forced_amx) {
        anvil_fail("ANVIL_BF16=amx: this CPU lacks AMX-BF16, or the OS does not grant AMX tile data");
        return ANVIL_BF16_NONE;
    }
    return ANVIL_BF16_AVX512;
}

int anvil_isa_check_bf16(void) { return bf16_kernel() == ANVIL_BF16_NONE ? -1 : 0; }

anvil_bf16_kernel anvil_isa_bf16(void) { return bf16_kernel(); }

bool anvil_isa_bf16_available(anvil_bf16_kernel k) {
    if (k == ANVIL_BF16_NONE || !anvil_isa_supported(ANVIL_ISA_AVX512) || !has("avx512bf16")) return false;
    return k == ANVIL_BF16_AVX512 || amx_available();
}

const char *anvil_isa_bf16_name(anvil_bf16_kernel k) {
    return k == ANVIL_BF16_AMX ? "amx" : k == ANVIL_BF16_AVX512 ? "avx512-bf16" : "none";
}
