/* The machine's vector throughput limit, measured rather than taken from a
 * data sheet: every thread runs many independent multiply-add chains (more
 * than latency x issue ports, so the units never wait on a result) with
 * operands that keep the values bounded. Each path's loop is compiled for
 * its own instructions and called only when the CPU has them. */
#include <immintrin.h>
#include <omp.h>

#include "core/clock.h"
#include "kernels/isa.h"

/* Opaque to the compiler, so that the loops below cannot be folded away:
 * acc = acc * 0.5 + 1 converges to 2 and stays there. */
static volatile float mul_v = 0.5f, add_v = 1.0f;
/* 1/64 in bf16: acc grows by 2^-11 per step, far from overflow in any run. */
static volatile short bf16_small = 0x3C80;

enum { CHAINS = 12 };

/* SSE2, as the generic path's kernels: a multiply and an add per lane (the
 * baseline has no FMA), 2 FLOPs. */
static float chains_generic(long iters) {
    __m128 m = _mm_set1_ps(mul_v), c = _mm_set1_ps(add_v), acc[CHAINS];
    for (int i = 0; i < CHAINS; i++) acc[i] = _mm_set1_ps((float)i);
    for (long it = 0; it < iters; it++)
#pragma GCC unroll 16
        for (int i = 0; i < CHAINS; i++) acc[i] = _mm_add_ps(_mm_mul_ps(acc[i], m), c);
    __m128 s = acc[0];
    for (int i = 1; i < CHAINS; i++) s = _mm_add_ps(s, acc[i]);
    return _mm_cvtss_f32(s);
}

__attribute__((target("avx2,fma"))) static float chains_avx2(long iters) {
    __m256 m = _mm256_set1_ps(mul_v), c = _mm256_set1_ps(add_v), acc[CHAINS];
    for (int i = 0; i < CHAINS; i++) acc[i] = _mm256_set1_ps((float)i);
    for (long it = 0; it < iters; it++)
#pragma GCC unroll 16
        for (int i = 0; i < CHAINS; i++) acc[i] = _mm256_fmadd_ps(acc[i], m, c);
    __m256 s = acc[0];
    for (int i = 1; i < CHAINS; i++) s = _mm256_add_ps(s, acc[i]);
    return _mm_cvtss_f32(_mm256_castps256_ps128(s));
}

__attribute__((target("avx512f,fma"))) static float chains_avx512(long iters) {
    __m512 m = _mm512_set1_ps(mul_v), c = _mm512_set1_ps(add_v), acc[CHAINS];
    for (int i = 0; i < CHAINS; i++) acc[i] = _mm512_set1_ps((float)i);
    for (long it = 0; it < iters; it++)
#pragma GCC unroll 16
        for (int i = 0; i < CHAINS; i++) acc[i] = _mm512_fmadd_ps(acc[i], m, c);
    __m512 s = acc[0];
    for (int i = 1; i < CHAINS; i++) s = _mm512_add_ps(s, acc[i]);
    return _mm512_reduce_add_ps(s);
}

/* vdpbf16ps: 16 lanes, each two bf16 products added in, 4 FLOPs per lane.
 */
__attribute__((target("avx512f,avx512bf16"))) static float chains_bf16(long iters) {
    __m512bh a = (__m512bh)_mm512_set1_epi16(bf16_small), b = a;
    __m512 acc[CHAINS];
    for (int i = 0; i < CHAINS; i++) acc[i] = _mm512_set1_ps((float)i);
    for (long it = 0; it < iters; it++)
#pragma GCC unroll 16
        for (int i = 0; i < CHAINS; i++) acc[i] = _mm512_dpbf16_ps(acc[i], a, b);
    __m512 s = acc[0];
    for (int i = 1; i < CHAINS; i++) s = _mm512_add_ps(s, acc[i]);
    return _mm512_reduce_add_ps(s);
}

typedef float (*chain_fn)(long);

static volatile float sink;

/* Seconds for every thread to run `iters` iterations at once. */
static double timed(chain_fn fn, long iters) {
    double t0 = anvil_now();
#pragma omp parallel
    {
        float r = fn(iters);
#pragma omp critical
        sink += r;
    }
    return anvil_now() - t0;
}

double anvil_isa_peak_gflops(anvil_isa isa, bool bf16, double seconds) {
    if (!anvil_isa_supported(isa)) return 0.0;
    chain_fn fn;
    double flop_per_iter; /* per thread: CHAINS vector operations */
    if (bf16) {
        if (isa != ANVIL_ISA_AVX512 || !__builtin_cpu_supports("avx512bf16")) return 0.0;
        fn = chains_bf16;
        flop_per_iter = CHAINS * 16 * 4;
    } else if (isa == ANVIL_ISA_AVX512) {
        fn = chains_avx512;
        flop_per_iter = CHAINS * 16 * 2;
    } else if (isa == ANVIL_ISA_AVX2) {
        fn = chains_avx2;
        flop_per_iter = CHAINS * 8 * 2;
    } else {
        fn = chains_generic;
        flop_per_iter = CHAINS * 4 * 2;
    }
    /* Size the runs from a short one, then keep the fastest of three:
     * interference from other processes only ever slows a run down. */
    long iters = 100000;
    double t = timed(fn, iters);
    if (t <= 0) t = 1e-6;
    long sized = (long)(iters * (seconds / 3.0) / t);
    if (sized > iters) iters = sized;
    double best = 0.0;
    int threads = omp_get_max_threads();
    for (int r = 0; r < 3; r++) {
        double s = timed(fn, iters);
        double rate = flop_per_iter * (double)iters * threads / s * 1e-9;
        if (rate > best) best = rate;
    }
    return best;
}
