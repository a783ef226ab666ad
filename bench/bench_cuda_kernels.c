/* Throughput of the CUDA kernel table at GPT-2 124M's shapes: the linear
 * layers' GEMMs (forward, and the backward's two products) at B*T rows, the
 * fused causal attention forward and backward at B=8, T=1024, 12 heads of 64,
 * the fused LM head with cross-entropy and its gradients at N=8192 over the
 * 50257-token vocabulary, and AdamW over 124M parameters. Each in the fp32
 * and the bf16 table where they differ; the bf16 figures include rounding
 * the operands to bf16, which the table does on every call.
 *
 * FLOPs counted are the algorithm's: 2*M*N*K per product; attention's
 * causal half, 2*B*NH*T^2*hs forward (QK^T and PV) and 2.5x that backward;
 * AdamW's bytes are 7 floats per parameter (p, g, m, v read; p, m, v
 * written). Usage: bench_cuda_kernels [rows] (default 8192; 16384 also
 * fits an 80 GB GPU). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/clock.h"
#include "core/error.h"
#include "kernels/cuda.h"
#include "kernels/kernels.h"

#define ITERS 10

static const anvil_kernels *K[2]; /* fp32, bf16 */
static const char *const DTYPE[2] = {"fp32", "bf16"};

/* A device buffer of n floats of small pseudo-random values (a 1 MiB pattern, repeated). */
static float *filled(const anvil_kernels *k, size_t n, float scale) {
    static float pattern[1 << 18];
    static int ready;
    if (!ready) {
        uint64_t s = 0x9E3779B97F4A7C15u;
        for (size_t i = 0; i < sizeof pattern / sizeof pattern[0]; i++) {
            s = s * 6364136223846793005u + 1442695040888963407u;
            pattern[i] = (float)((int64_t)(s >> 11) % 2000001 - 1000000) * 1e-6f;
        }
        ready = 1;
    }
    float *d = k->alloc(n * sizeof(float));
    if (!d) {
        fprintf(stderr, "bench_cuda_kernels: cannot allocate %zu floats\n", n);
        exit(1);
    }
    const size_t chunk = sizeof pattern / sizeof pattern[0];
    float *scaled = malloc(sizeof pattern);
    for (size_t i = 0; i < chunk; i++) scaled[i] = pattern[i] * scale;
    for (size_t at = 0; at < n; at += chunk) k->upload(d + at, scaled, (n - at < chunk ? n - at : chunk) * sizeof(float));
    free(scaled);
    return d;
}

static void row(const char *what, const char *dtype, double seconds, double flops, double bytes) {
    printf("%-44s %-5s %9.3f ms", what, dtype, seconds * 1e3);
    if (flops > 0) printf(" %9.1f TFLOP/s", flops / seconds * 1e-12);
    if (bytes > 0) printf(" %9.1f GB/s", bytes / seconds * 1e-9);
    printf("\n");
}

/* Stops at the first failure: a call's own (rc) or one the next sync reports. */
static void check_rc(const anvil_kernels *k, int rc) {
    if (rc || k->sync()) {
        fprintf(stderr, "bench_cuda_kernels: %s\n", anvil_errmsg());
        exit(1);
    }
}
static void check(const anvil_kernels *k) { check_rc(k, 0); }

static void bench_gemm(int N, int C, int OC, const char *name) {
    float *x = filled(K[0], (size_t)N * C, 1.0f), *w = filled(K[0], (size_t)OC * C, 0.02f);
    float *b = filled(K[0], (size_t)OC, 0.01f), *out = filled(K[0], (size_t)N * OC, 0.0f);
    float *dx = filled(K[0], (size_t)N * C, 0.0f), *dw = filled(K[0], (size_t)OC * C, 0.0f);
    float *db = filled(K[0], (size_t)OC, 0.0f);
    for (int t = 0; t < 2; t++) {
        const anvil_kernels *k = K[t];
        char what[64];
        k->matmul_forward(out, x, w, b, N, C, OC, 0);
        check(k);
        double t0 = anvil_now();
        for (int i = 0; i < ITERS; i++) k->matmul_forward(out, x, w, b, N, C, OC, 0);
        check(k);
        snprintf(what, sizeof what, "matmul_forward %s %dx%d->%d", name, N, C, OC);
        row(what, DTYPE[t], (anvil_now() - t0) / ITERS, 2.0 * N * C * OC, 0);
        k->matmul_backward(dx, dw, db, out, x, w, N, C, OC);
        check(k);
        t0 = anvil_now();
        for (int i = 0; i < ITERS; i++) k->matmul_backward(dx, dw, db, out, x, w, N, C, OC);
        check(k);
        snprintf(what, sizeof what, "matmul_backward %s %dx%d->%d", name, N, C, OC);
        row(what, DTYPE[t], (anvil_now() - t0) / ITERS, 4.0 * N * C * OC, 0);
    }
    float *all[] = {x, w, b, out, dx, dw, db};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) K[0]->free(all[i]);
}

static void bench_attention(int B, int T, int C, int NH) {
    size_t n3 = (size_t)B * T * 3 * C, n1 = (size_t)B * T * C;
    float *qkv = filled(K[0], n3, 1.0f), *out = filled(K[0], n1, 0.0f), *dout = filled(K[0], n1, 1.0f);
    float *lse = filled(K[0], (size_t)B * NH * T, 0.0f), *dqkv = filled(K[0], n3, 0.0f);
    double fwd_flops = 2.0 * B * NH * (double)T * T * (C / NH);
    for (int t = 0; t < 2; t++) {
        const anvil_kernels *k = K[t];
        char what[64];
        check_rc(k, k->attention_forward(out, lse, qkv, B, T, NH, NH, C / NH));
        check_rc(k, k->attention_backward(dqkv, dout, out, lse, qkv, B, T, NH, NH, C / NH));
        double t0 = anvil_now();
        for (int i = 0; i < ITERS; i++) k->attention_forward(out, lse, qkv, B, T, NH, NH, C / NH);
        check(k);
        double tf = (anvil_now() - t0) / ITERS;
        t0 = anvil_now();
        for (int i = 0; i < ITERS; i++) k->attention_backward(dqkv, dout, out, lse, qkv, B, T, NH, NH, C / NH);
        check(k);
        double tb = (anvil_now() - t0) / ITERS;
        snprintf(what, sizeof what, "attention_forward B=%d T=%d NH=%d hs=%d", B, T, NH, C / NH);
        row(what, DTYPE[t], tf, fwd_flops, 0);
        snprintf(what, sizeof what, "attention_backward B=%d T=%d NH=%d hs=%d", B, T, NH, C / NH);
        row(what, DTYPE[t], tb, 2.5 * fwd_flops, 0);
    }
    float *all[] = {qkv, out, dout, lse, dqkv};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) K[0]->free(all[i]);
}

static void bench_classifier(int N, int C, int V, int Vp) {
    float *x = filled(K[0], (size_t)N * C, 1.0f), *wte = filled(K[0], (size_t)Vp * C, 0.02f);
    float *dx = filled(K[0], (size_t)N * C, 0.0f), *dwte = filled(K[0], (size_t)Vp * C, 0.0f);
    float *losses = filled(K[0], (size_t)N, 0.0f);
    int32_t *host = malloc((size_t)N * sizeof(int32_t));
    for (int i = 0; i < N; i++) host[i] = (int32_t)((i * 7919u) % (unsigned)V);
    int32_t *targets = K[0]->alloc((size_t)N * sizeof(int32_t));
    K[0]->upload(targets, host, (size_t)N * sizeof(int32_t));
    free(host);
    for (int t = 0; t < 2; t++) {
        const anvil_kernels *k = K[t];
        char what[64];
        check_rc(k, k->classifier(losses, dx, dwte, x, wte, targets, N, C, V, Vp, 1.0f / N));
        double t0 = anvil_now();
        for (int i = 0; i < ITERS; i++) k->classifier(losses, dx, dwte, x, wte, targets, N, C, V, Vp, 1.0f / N);
        check(k);
        snprintf(what, sizeof what, "classifier (fwd+bwd) N=%d C=%d V=%d", N, C, V);
        row(what, DTYPE[t], (anvil_now() - t0) / ITERS, 6.0 * N * (double)Vp * C, 0);
    }
    float *all[] = {x, wte, dx, dwte, losses};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) K[0]->free(all[i]);
    K[0]->free(targets);
}

static void bench_optimizer(size_t n) {
    const anvil_kernels *k = K[0];
    float *p = filled(k, n, 0.02f), *g = filled(k, n, 0.001f), *m = filled(k, n, 0.0f), *v = filled(k, n, 0.0f);
    k->adamw(p, g, 1.0f, m, v, n, 6e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, 1);
    check(k);
    double t0 = anvil_now();
    for (int i = 0; i < ITERS; i++) k->adamw(p, g, 1.0f, m, v, n, 6e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, i + 2);
    check(k);
    row("adamw 124M parameters", "fp32", (anvil_now() - t0) / ITERS, 0, 7.0 * 4 * n);
    t0 = anvil_now();
    double s = 0.0;
    for (int i = 0; i < ITERS; i++) s += k->sumsq(g, n);
    check(k);
    row("sumsq 124M parameters", "fp32", (anvil_now() - t0) / ITERS, 0, 4.0 * n);
    if (s != s) fprintf(stderr, "bench_cuda_kernels: sumsq gave NaN\n");
    float *all[] = {p, g, m, v};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) k->free(all[i]);
}

int main(int argc, char **argv) {
    int N = argc > 1 ? atoi(argv[1]) : 8192;
    anvil_cuda_device dev;
    if (N <= 0 || anvil_cuda_device_info(0, &dev)) {
        fprintf(stderr, "bench_cuda_kernels: %s\n", N <= 0 ? "usage: bench_cuda_kernels [rows]" : anvil_errmsg());
        return 1;
    }
    K[0] = anvil_kernels_cuda(0, ANVIL_MATMUL_F32);
    K[1] = anvil_kernels_cuda(0, ANVIL_MATMUL_BF16);
    if (!K[0] || !K[1]) {
        fprintf(stderr, "bench_cuda_kernels: %s\n", anvil_errmsg());
        return 1;
    }
    printf("bench_cuda_kernels: %s, %d SMs, compute capability %d.%d, %d rows, mean of %d calls\n", dev.name,
           dev.sm_count, dev.cc_major, dev.cc_minor, N, ITERS);
    const int C = 768;
    bench_gemm(N, C, 3 * C, "qkv");
    bench_gemm(N, C, C, "attn_proj");
    bench_gemm(N, C, 4 * C, "fc");
    bench_gemm(N, 4 * C, C, "fc_proj");
    bench_gemm(N, C, 50304, "lm_head");
    bench_attention(8, 1024, C, 12);
    bench_classifier(8192, C, 50257, 50304);
    bench_optimizer((size_t)124439808);
    return 0;
}
