/* The Llama family's kernels, timed one op at a time on two shapes:
 *   small  a llama-small-like layer: B 4, T 256, C 512, 8 heads (2 key/value), head 64, hidden 1408;
 *   1b     a Llama 3.2 1B layer on one 1024-token sequence: C 2048, 32 heads (8 key/value),
 *          head 64, hidden 8192.
 * Each op is run until 0.5 s have passed (at least 5 times) after 2 untimed calls, and the
 * fastest call is printed in ms as "shape op ms", the lines bench/bench_llama_kernels.py prints
 * for PyTorch on the same shapes (bench/bench_llama_kernels.sh puts them side by side). The
 * fastest, not the median: on a shared 2-core machine a thread descheduled for a 4 ms tick
 * stalls its team at the next barrier, and which calls it hits is noise, not the kernel.
 *   bench_llama_kernels [THREADS]   (default: OpenMP's) */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/clock.h"
#include "core/rng.h"
#include "kernels/kernels.h"
#include "kernels/rope.h"

typedef struct {
    const char *name;
    int B, T, C, NH, NKV, hs, H;
} shape;

static const anvil_kernels *K;

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

typedef struct {
    const shape *s;
    float *x, *w, *out, *rstd, *dx, *dw, *qkv, *dqkv, *att, *lse, *datt, *cs, *gu, *dgu, *h, *dh, *kc, *vc;
} bufs;

enum { RMS_F, RMS_B, ROPE_F, ROPE_B, SWIGLU_F, SWIGLU_B, ATT_F, ATT_B, DECODE, NOPS };
static const char *const op_names[NOPS] = {"rmsnorm_forward", "rmsnorm_backward", "rope_forward", "rope_backward",
                                           "swiglu_forward", "swiglu_backward", "attention_forward",
                                           "attention_backward", "attention_decode"};

static void run_op(int op, bufs *b) {
    const shape *s = b->s;
    int N = s->B * s->T;
    switch (op) {
    case RMS_F: K->rmsnorm_forward(b->out, b->rstd, b->x, b->w, N, s->C, 1e-5f); break;
    case RMS_B: K->rmsnorm_backward(b->dx, b->dw, b->out, b->x, b->w, b->rstd, N, s->C); break;
    case ROPE_F: K->rope_forward(b->qkv, b->cs, s->B, s->T, 0, s->NH, s->NKV, s->hs); break;
    case ROPE_B: K->rope_backward(b->dqkv, b->cs, s->B, s->T, 0, s->NH, s->NKV, s->hs); break;
    case SWIGLU_F: K->swiglu_forward(b->h, b->gu, b->gu + s->H, N, s->H, 2 * s->H); break;
    case SWIGLU_B: K->swiglu_backward(b->dgu, b->dgu + s->H, b->h, b->gu, b->gu + s->H, N, s->H, 2 * s->H); break;
    case ATT_F: K->attention_forward(b->att, b->lse, b->qkv, s->B, s->T, s->NH, s->NKV, s->hs); break;
    case ATT_B: K->attention_backward(b->dqkv, b->datt, b->att, b->lse, b->qkv, s->B, s->T, s->NH, s->NKV, s->hs); break;
    case DECODE: K->attention_decode(b->h, b->qkv, b->kc, b->vc, s->T, s->NH, s->NKV, s->hs); break;
    }
}

static float *filled(size_t n, anvil_rng *r, float scale) {
    float *p = K->alloc(n * sizeof *p);
    if (!p) {
        fprintf(stderr, "bench_llama_kernels: out of memory\n");
        exit(1);
    }
    for (size_t i = 0; i < n; i++) p[i] = scale * anvil_rng_normal(r);
    return p;
}

static void bench_shape(const shape *s) {
    anvil_rng r;
    anvil_rng_seed(&r, 1);
    size_t N = (size_t)s->B * s->T, ld = (size_t)(s->NH + 2 * s->NKV) * s->hs, kv = (size_t)s->NKV * s->hs;
    bufs b = {.s = s};
    b.x = filled(N * s->C, &r, 1.0f), b.w = filled(s->C, &r, 0.1f), b.out = filled(N * s->C, &r, 1.0f);
    b.rstd = filled(N, &r, 0.0f), b.dx = filled(N * s->C, &r, 0.0f), b.dw = filled(s->C, &r, 0.0f);
    b.qkv = filled(N * ld, &r, 1.0f), b.dqkv = filled(N * ld, &r, 1.0f), b.att = filled(N * s->NH * s->hs, &r, 1.0f);
    b.datt = filled(N * s->NH * s->hs, &r, 1.0f), b.lse = filled((size_t)s->B * s->NH * s->T, &r, 0.0f);
    b.gu = filled(N * 2 * s->H, &r, 2.0f), b.dgu = filled(N * 2 * s->H, &r, 0.0f), b.h = filled(N * s->H, &r, 1.0f);
    b.kc = filled((size_t)s->T * kv, &r, 1.0f), b.vc = filled((size_t)s->T * kv, &r, 1.0f);
    b.cs = K->alloc((size_t)s->T * s->hs * sizeof(float));
    anvil_rope_config rc = {500000.0, ANVIL_ROPE_LLAMA3, 32.0, 1.0, 4.0, 8192};
    if (!b.cs || anvil_rope_table(b.cs, &rc, s->hs, s->T)) exit(1);
    for (int op = 0; op < NOPS; op++) {
        if (op == ATT_B) run_op(ATT_F, &b); /* the backward reads the forward's lse */
        run_op(op, &b);
        run_op(op, &b);
        double t[4096];
        int n = 0;
        for (double start = anvil_now(); n < 5 || (anvil_now() - start < 0.5 && n < 4096); n++) {
            double t0 = anvil_now();
            run_op(op, &b);
            t[n] = anvil_now() - t0;
        }
        qsort(t, (size_t)n, sizeof t[0], cmp_double);
        printf("%s %s %.4f\n", s->name, op_names[op], 1e3 * t[0]);
        fflush(stdout);
    }
    float *all[] = {b.x, b.w, b.out, b.rstd, b.dx, b.dw, b.qkv, b.dqkv, b.att, b.datt, b.lse,
                    b.gu, b.dgu, b.h, b.kc, b.vc, b.cs};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) K->free(all[i]);
}

int main(int argc, char **argv) {
    if (argc > 1) omp_set_num_threads(atoi(argv[1]));
    K = anvil_kernels_cpu();
    printf("# anvil %s, %d threads\n", K->name, omp_get_max_threads());
    static const shape shapes[] = {{"small", 4, 256, 512, 8, 2, 64, 1408}, {"1b", 1, 1024, 2048, 32, 8, 64, 8192}};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) bench_shape(&shapes[i]);
    return 0;
}
