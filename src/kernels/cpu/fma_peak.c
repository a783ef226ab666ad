/* The machine's vector throughput limit, measured rather than taken from a
 * data sheet: every thread runs many independent multiply-add chains (more
 * than latency x issue ports, so the units never wait on a result) with
 * operands that keep the values bounded. Each path's loop is compiled for
 * its own instructions and called only when the CPU has them. */
#include <immintrin.h>
#include <omp.h>
#include <stdint.h>

#include "core/clock.h"
#include "kernels/cpu/amx_config.h"
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

/* TDPBF16PS into six accumulator tiles from two source tiles loaded once: 16 x 16 results of
 * 32 bf16 products each per call, 16384 FLOPs. Six chains, each call waiting on its tile's last,
 * keep the unit busy (on Sapphire Rapids one call issues every 16 cycles). */
__attribute__((target("amx-tile,amx-bf16"))) static float chains_amx(long iters) {
    _Alignas(64) uint16_t src[16 * 32];
    for (int i = 0; i < 16 * 32; i++) src[i] = (uint16_t)bf16_small;
    _tile_loadconfig(&amx_tile_config);
    _tile_loadd(6, src, 64);
    _tile_loadd(7, src, 64);
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
    _tile_zero(4);
    _tile_zero(5);
    for (long it = 0; it < iters; it++) {
        _tile_dpbf16ps(0, 6, 7);
        _tile_dpbf16ps(1, 6, 7);
        _tile_dpbf16ps(2, 6, 7);
        _tile_dpbf16ps(3, 6, 7);
        _tile_dpbf16ps(4, 6, 7);
        _tile_dpbf16ps(5, 6, 7);
    }
    _Alignas(64) float out[6][16 * 16];
    _tile_stored(0, out[0], 64);
    _tile_stored(1, out[1], 64);
    _tile_stored(2, out[2], 64);
    _tile_stored(3, out[3], 64);
    _tile_stored(4, out[4], 64);
    _tile_stored(5, out[5], 64);
    float s = 0.0f;
    for (int i = 0; i < 6; i++) s += out[i][0];
    return s;
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

double anvil_isa_peak_gflops(anvil_isa isa, anvil_bf16_kernel bf16, double seconds) {
    if (!anvil_isa_supported(isa)) return 0.0;
    chain_fn fn;
    double flop_per_iter; /* per thread */
    if (bf16 != ANVIL_BF16_NONE && (isa != ANVIL_ISA_AVX512 || !anvil_isa_bf16_available(bf16))) return 0.0;
    if (bf16 == ANVIL_BF16_AMX) {
        fn = chains_amx;
        flop_per_iter = 6.0 * 16 * 16 * 32 * 2;
    } else if (bf16 == ANVIL_BF16_AVX512) {
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
    long iters = bf16 == ANVIL_BF16_AMX ? 10000 : 100000;
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
