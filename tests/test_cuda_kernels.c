/* The CUDA kernel table against the CPU's, kernel by kernel, on the same
 * random inputs (sizes that are not multiples of any tile included).
 *
 * Every output a kernel writes starts poisoned (all bits set: NaN), so an
 * element it leaves unwritten fails; gradients it accumulates start from the
 * same random values on both sides. Every GPU kernel runs twice and must give
 * the same bits both times. A comparison fails on any NaN or infinity where
 * the reference is finite, and on a normwise error
 * max|got - want| / max|want| above the tolerance stated with it:
 *
 * - exact (0): copy, add, scale, the embedding forward and backward (the
 *   same additions in the same order: the CPU sums each token's positions in
 *   position order, the GPU's stable sort keeps that order) and AdamW (the
 *   same roundings, operation for operation).
 * - 2e-5, fp32 products and sums (matmuls, attention, LayerNorm, the LM
 *   head): two orders of summing over K <= 3072 terms differ by about
 *   sqrt(K) * 6e-8 = 3.3e-6 of the result's scale; 2e-5 leaves 6x room and
 *   still fails TF32 (rounding to 10 bits, about 3e-4 here).
 * - GELU: tanhf against the CPU's polynomial tanh, about 2e-7 apart. The
 *   forward scales that by at most |x|/2 (5e-8 of its output's scale here,
 *   |x| < 14): 2e-6. The backward by up to |x| K (1 + 0.134 x^2), about 100
 *   at |x| = 10 (4e-6 of its scale): 1e-5. The sum of squares, 1e-5
 *   relative (the CPU sums floats in chunks of 1024).
 * - bf16 matmuls against the CPU's fp32 on inputs rounded to bf16 the same
 *   way (nearest even): each product is then exact in both, so only the fp32
 *   sums differ, where tensor cores may truncate rather than round: at most
 *   K * 6e-8 = 1.4e-4 at K = 2304: 2e-4. Inputs left unrounded would be
 *   about 1.5e-3 off, and fail.
 * - the bf16 LM head also rounds each chunk's dlogits (which the reference
 *   cannot) before dx and dwte: relative 2^-9 per element, about 2e-3
 *   normwise: 1e-2; its losses and shard statistics: 5e-4.
 * - bf16 attention (tensor cores) against the GPU's fp32 attention on the
 *   same inputs: q, k, v, dout, P and dS rounded to bf16, about 3e-3
 *   normwise on outputs and 6e-3 on gradients: 2e-2 and 3e-2. A wrong
 *   fragment index is off by O(1).
 *
 * Without a CUDA device (or CUDA built in) it prints "skipped: no GPU" and
 * exits 77. */
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/crc32c.h"
#include "core/error.h"
#include "core/rng.h"
#include "kernels/cuda.h"
#include "kernels/kernels.h"
#include "testutil.h"

static const anvil_kernels *cpu, *gpu, *gpu16;
static anvil_rng rng;

static float *randn(size_t n, float scale) {
    float *p = malloc(n * sizeof(float) + 1);
    for (size_t i = 0; i < n; i++) p[i] = scale * anvil_rng_normal(&rng);
    return p;
}

static void *dup(const void *src, size_t bytes) {
    void *p = malloc(bytes + 1);
    memcpy(p, src, bytes);
    return p;
}

/* fp32 -> bf16 -> fp32, rounding to nearest even as the CPU's bf16 tiles and __float2bfloat16_rn do. */
static float bf16_round(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    if ((u & 0x7FFFFFFFu) > 0x7F800000u) return f;
    u = (u + 0x7FFFu + ((u >> 16) & 1u)) & 0xFFFF0000u;
    memcpy(&f, &u, sizeof f);
    return f;
}

static float *rounded(const float *src, size_t n) {
    float *p = malloc(n * sizeof(float) + 1);
    for (size_t i = 0; i < n; i++) p[i] = bf16_round(src[i]);
    return p;
}

/* A buffer of table k holding host[bytes], or, when host is NULL, poisoned: every bit set. */
static void *put(const anvil_kernels *k, const void *host, size_t bytes) {
    void *d = k->alloc(bytes);
    if (!d) {
        fprintf(stderr, "%s: cannot allocate %zu bytes\n", k->name, bytes);
        exit(1);
    }
    if (host) {
        k->upload(d, host, bytes);
    } else {
        void *poison = malloc(bytes + 1);
        memset(poison, 0xFF, bytes);
        k->upload(d, poison, bytes);
        free(poison);
    }
    return d;
}

/* Downloads a buffer of k into a new host array and frees it. */
static float *take(const anvil_kernels *k, void *d, size_t bytes) {
    float *h = malloc(bytes + 1);
    k->download(h, d, bytes);
    k->free(d);
    return h;
}

static double max_abs(const float *x, size_t n) {
    double m = 0.0;
    for (size_t i = 0; i < n; i++)
        if (fabs((double)x[i]) > m) m = fabs((double)x[i]);
    return m;
}

/* The error relative to `scale`: the reference's own max|want| when 0. */
static void near_of(const char *what, const float *got, const float *want, size_t n, double tol, double scale) {
    double err = 0.0;
    size_t bad = n, worst = 0;
    for (size_t i = 0; i < n; i++) {
        if (isfinite(want[i]) && !isfinite(got[i]) && bad == n) bad = i;
        double d = fabs((double)got[i] - (double)want[i]);
        if (d > err) {
            err = d;
            worst = i;
        }
    }
    if (scale == 0.0) scale = max_abs(want, n);
    double rel = scale > 0.0 ? err / scale : err;
    int ok = bad == n && rel <= tol;
    printf("  %-58s max|diff| %.3g of max|want| %.3g: %.3g (tolerance %.0e)%s\n", what, err, scale, rel, tol,
           ok ? "" : "  FAIL");
    if (bad != n) t_fail(__FILE__, __LINE__, "%s: [%zu] is %g, want %g", what, bad, got[bad], want[bad]);
    else if (!ok) t_fail(__FILE__, __LINE__, "%s: [%zu] is %.9g, want %.9g", what, worst, got[worst], want[worst]);
}

static void near(const char *what, const float *got, const float *want, size_t n, double tol) {
    near_of(what, got, want, n, tol, 0.0);
}

static void exact(const char *what, const float *got, const float *want, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (memcmp(&got[i], &want[i], sizeof(float))) {
            printf("  %-58s differs at [%zu]  FAIL\n", what, i);
            t_fail(__FILE__, __LINE__, "%s: [%zu] is %.9g, want exactly %.9g", what, i, got[i], want[i]);
            return;
        }
    printf("  %-58s exact\n", what);
}

/* Two runs of the same GPU kernel on the same inputs. */
static void same(const char *what, const float *a, const float *b, size_t n) {
    if (memcmp(a, b, n * sizeof(float)))
        t_fail(__FILE__, __LINE__, "%s: a second run on the GPU gave other bits", what);
}

/* ---- matmuls ---- */

struct mm {
    int N, C, OC;
    float *x, *w, *b, *dout, *acc, *dw0, *db0; /* inputs; acc pre-fills out when accumulating */
};

/* bias: 0 none, 1 an allocation's start, 2 one float past it (4-byte aligned: cuBLASLt's epilogue
 * wants 16). */
static float *mm_forward(const anvil_kernels *k, const struct mm *m, const float *x, const float *w, int bias,
                         int accumulate) {
    size_t no = (size_t)m->N * m->OC;
    float *dx = put(k, x, sizeof(float) * m->N * m->C), *dw = put(k, w, sizeof(float) * m->OC * m->C);
    float *db = NULL;
    if (bias) {
        float *hb = malloc(sizeof(float) * (m->OC + 1));
        memcpy(hb + (bias == 2), m->b, sizeof(float) * m->OC);
        db = put(k, hb, sizeof(float) * (m->OC + 1));
        free(hb);
    }
    float *out = put(k, accumulate ? m->acc : NULL, sizeof(float) * no);
    k->matmul_forward(out, dx, dw, db ? db + (bias == 2) : NULL, m->N, m->C, m->OC, accumulate);
    k->free(dx);
    k->free(dw);
    if (db) k->free(db);
    return take(k, out, sizeof(float) * no);
}

/* dx (or NULL when !want_dx), dw and db (when want_db) of one backward, in res[0..2]. */
static void mm_backward(const anvil_kernels *k, const struct mm *m, const float *dout, const float *x,
                        const float *w, int want_dx, int want_db, float *res[3]) {
    size_t nx = (size_t)m->N * m->C, nw = (size_t)m->OC * m->C;
    float *ddo = put(k, dout, sizeof(float) * m->N * m->OC), *dxin = put(k, x, sizeof(float) * nx);
    float *dwin = put(k, w, sizeof(float) * nw);
    float *dx = want_dx ? put(k, NULL, sizeof(float) * nx) : NULL, *dw = put(k, m->dw0, sizeof(float) * nw);
    float *db = want_db ? put(k, m->db0, sizeof(float) * m->OC) : NULL;
    k->matmul_backward(dx, dw, db, ddo, dxin, dwin, m->N, m->C, m->OC);
    res[0] = dx ? take(k, dx, sizeof(float) * nx) : NULL;
    res[1] = take(k, dw, sizeof(float) * nw);
    res[2] = db ? take(k, db, sizeof(float) * m->OC) : NULL;
    k->free(ddo);
    k->free(dxin);
    k->free(dwin);
}

static void free3(float *r[3]) {
    for (int i = 0; i < 3; i++) free(r[i]);
}

static void test_matmul_forward(const struct mm *m, int bf16) {
    const anvil_kernels *g = bf16 ? gpu16 : gpu;
    float *x = bf16 ? rounded(m->x, (size_t)m->N * m->C) : dup(m->x, sizeof(float) * m->N * m->C);
    float *w = bf16 ? rounded(m->w, (size_t)m->OC * m->C) : dup(m->w, sizeof(float) * m->OC * m->C);
    size_t no = (size_t)m->N * m->OC;
    char what[96];
    for (int variant = 0; variant < 4; variant++) {
        int bias = variant == 1 ? 0 : variant == 3 ? 2 : 1, accumulate = variant == 2;
        float *want = mm_forward(cpu, m, x, w, bias, accumulate);
        float *got = mm_forward(g, m, m->x, m->w, bias, accumulate);
        float *again = mm_forward(g, m, m->x, m->w, bias, accumulate);
        snprintf(what, sizeof what, "matmul_forward %s %dx%dx%d%s%s", bf16 ? "bf16" : "fp32", m->N, m->C, m->OC,
                 bias == 2 ? " +bias (4-byte aligned)" : bias ? " +bias" : "", accumulate ? " +=" : "");
        near(what, got, want, no, bf16 ? 2e-4 : 2e-5);
        same(what, got, again, no);
        free(want);
        free(got);
        free(again);
    }
    free(x);
    free(w);
}

/* In bf16, dx and dw come from the rounded operands; db sums the unrounded dout in fp32. */
static void test_matmul_backward(const struct mm *m, int bf16) {
    const anvil_kernels *g = bf16 ? gpu16 : gpu;
    size_t nx = (size_t)m->N * m->C, nw = (size_t)m->OC * m->C, nd = (size_t)m->N * m->OC;
    float *x = bf16 ? rounded(m->x, nx) : dup(m->x, nx * 4), *w = bf16 ? rounded(m->w, nw) : dup(m->w, nw * 4);
    float *d = bf16 ? rounded(m->dout, nd) : dup(m->dout, nd * 4);
    float *want[3], *wantdb[3], *got[3], *again[3], *part[3];
    mm_backward(cpu, m, d, x, w, 1, 1, want);
    mm_backward(cpu, m, m->dout, x, w, 0, 1, wantdb);
    mm_backward(g, m, m->dout, m->x, m->w, 1, 1, got);
    mm_backward(g, m, m->dout, m->x, m->w, 1, 1, again);
    mm_backward(g, m, m->dout, m->x, m->w, 0, 0, part);
    char what[96];
    const char *ty = bf16 ? "bf16" : "fp32";
    double tol = bf16 ? 2e-4 : 2e-5;
    snprintf(what, sizeof what, "matmul_backward %s %dx%dx%d dx", ty, m->N, m->C, m->OC);
    near(what, got[0], want[0], nx, tol);
    same(what, got[0], again[0], nx);
    snprintf(what, sizeof what, "matmul_backward %s %dx%dx%d dw +=", ty, m->N, m->C, m->OC);
    near(what, got[1], want[1], nw, tol);
    same(what, got[1], again[1], nw);
    same(what, got[1], part[1], nw);
    snprintf(what, sizeof what, "matmul_backward %s %dx%dx%d db +=", ty, m->N, m->C, m->OC);
    near(what, got[2], wantdb[2], (size_t)m->OC, 2e-5);
    same(what, got[2], again[2], (size_t)m->OC);
    free3(want);
    free3(wantdb);
    free3(got);
    free3(again);
    free3(part);
    free(x);
    free(w);
    free(d);
}

static void test_matmuls(void) {
    static const int shapes[][3] = {{77, 100, 130}, {256, 768, 2304}, {1, 768, 3072}, {33, 3072, 768}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        struct mm m = {shapes[s][0], shapes[s][1], shapes[s][2], NULL, NULL, NULL, NULL, NULL, NULL, NULL};
        m.x = randn((size_t)m.N * m.C, 1.0f);
        m.w = randn((size_t)m.OC * m.C, 0.05f);
        m.b = randn((size_t)m.OC, 0.1f);
        m.dout = randn((size_t)m.N * m.OC, 1.0f);
        m.acc = randn((size_t)m.N * m.OC, 1.0f);
        m.dw0 = randn((size_t)m.OC * m.C, 1.0f);
        m.db0 = randn((size_t)m.OC, 1.0f);
        for (int bf16 = 0; bf16 < 2; bf16++) {
            test_matmul_forward(&m, bf16);
            test_matmul_backward(&m, bf16);
        }
        free(m.x);
        free(m.w);
        free(m.b);
        free(m.dout);
        free(m.acc);
        free(m.dw0);
        free(m.db0);
    }
}

/* ---- LayerNorm ---- */

/* out, mean, rstd of the forward; then dx (+= onto dx0), dw, db (+=) of the backward, in r[0..5]. */
static void ln_run(const anvil_kernels *k, int N, int C, const float *x, const float *w, const float *b,
                   const float *dout, const float *dx0, const float *dw0, const float *db0, float *r[6]) {
    size_t n = (size_t)N * C;
    float *dxin = put(k, x, n * 4), *dw = put(k, w, (size_t)C * 4), *db = put(k, b, (size_t)C * 4);
    float *out = put(k, NULL, n * 4), *mean = put(k, NULL, (size_t)N * 4), *rstd = put(k, NULL, (size_t)N * 4);
    k->layernorm_forward(out, mean, rstd, dxin, dw, db, N, C);
    float *ddo = put(k, dout, n * 4), *gx = put(k, dx0, n * 4), *gw = put(k, dw0, (size_t)C * 4);
    float *gb = put(k, db0, (size_t)C * 4);
    k->layernorm_backward(gx, gw, gb, ddo, dxin, dw, mean, rstd, N, C);
    r[0] = take(k, out, n * 4);
    r[1] = take(k, mean, (size_t)N * 4);
    r[2] = take(k, rstd, (size_t)N * 4);
    r[3] = take(k, gx, n * 4);
    r[4] = take(k, gw, (size_t)C * 4);
    r[5] = take(k, gb, (size_t)C * 4);
    k->free(dxin);
    k->free(dw);
    k->free(db);
    k->free(ddo);
}

static void test_layernorm(int N, int C) {
    size_t n = (size_t)N * C;
    float *x = randn(n, 2.0f), *w = randn((size_t)C, 1.0f), *b = randn((size_t)C, 1.0f), *dout = randn(n, 1.0f);
    float *dx0 = randn(n, 1.0f), *dw0 = randn((size_t)C, 1.0f), *db0 = randn((size_t)C, 1.0f);
    for (size_t i = 0; i < n; i++) x[i] += 0.5f; /* a nonzero mean */
    float *want[6], *got[6], *again[6];
    ln_run(cpu, N, C, x, w, b, dout, dx0, dw0, db0, want);
    ln_run(gpu, N, C, x, w, b, dout, dx0, dw0, db0, got);
    ln_run(gpu, N, C, x, w, b, dout, dx0, dw0, db0, again);
    static const char *names[6] = {"out", "mean", "rstd", "dx +=", "dw +=", "db +="};
    size_t sizes[6] = {n, (size_t)N, (size_t)N, n, (size_t)C, (size_t)C};
    for (int i = 0; i < 6; i++) {
        char what[96];
        snprintf(what, sizeof what, "layernorm %dx%d %s", N, C, names[i]);
        near(what, got[i], want[i], sizes[i], 2e-5);
        same(what, got[i], again[i], sizes[i]);
        free(want[i]);
        free(got[i]);
        free(again[i]);
    }
    free(x);
    free(w);
    free(b);
    free(dout);
    free(dx0);
    free(dw0);
    free(db0);
}

/* ---- attention ---- */

struct attn {
    int B, T, C, NH;
    float *qkv, *dout;
};

/* out, lse and dqkv in r[0..2]. The backward takes its own forward's out and lse. */
static void attn_run(const anvil_kernels *k, const struct attn *a, float *r[3]) {
    size_t n3 = (size_t)a->B * a->T * 3 * a->C, n1 = (size_t)a->B * a->T * a->C, nl = (size_t)a->B * a->NH * a->T;
    float *qkv = put(k, a->qkv, n3 * 4), *dout = put(k, a->dout, n1 * 4);
    float *out = put(k, NULL, n1 * 4), *lse = put(k, NULL, nl * 4), *dqkv = put(k, NULL, n3 * 4);
    CHECK(k->attention_forward(out, lse, qkv, a->B, a->T, a->NH, a->NH, a->C / a->NH) == 0);
    CHECK(k->attention_backward(dqkv, dout, out, lse, qkv, a->B, a->T, a->NH, a->NH, a->C / a->NH) == 0);
    r[0] = take(k, out, n1 * 4);
    r[1] = take(k, lse, nl * 4);
    r[2] = take(k, dqkv, n3 * 4);
    k->free(qkv);
    k->free(dout);
}

/* r[2], dqkv[B*T, 3C], split into its dq, dk and dv parts (r[2], r[3], r[4]), each [B*T, C], so that a
 * failure names the kernel that wrote it. Each part is measured against the whole gradient's scale:
 * at T = 1, dq and dk are zero, and bf16's rounding leaves in them noise of order 1e-3 of it. The
 * log-sum-exp's error is absolute, that of the scores (O(1) here: unit normal q and k over sqrt(hd)),
 * so it is measured against max(max|lse|, 1): at T = 1 the lse is one score, which may be near 0. */
static void split_dqkv(float *r[5], size_t rows, int C) {
    float *dqkv = r[2];
    for (int part = 0; part < 3; part++) {
        r[2 + part] = malloc(rows * C * sizeof(float));
        for (size_t i = 0; i < rows; i++)
            memcpy(r[2 + part] + i * C, dqkv + (i * 3 + part) * C, (size_t)C * sizeof(float));
    }
    free(dqkv);
}

/* fp32 against the CPU; the bf16 table's against fp32: tensor cores at head sizes 64 and 128, the
 * fp32 kernels at the others (the same bits). On tensor cores out and dv must differ from fp32's,
 * since v and dout are rounded to bf16: proof that those kernels ran. */
static void test_attention(int B, int T, int C, int NH) {
    struct attn a = {B, T, C, NH, NULL, NULL};
    size_t n3 = (size_t)B * T * 3 * C, n1 = (size_t)B * T * C, nl = (size_t)B * NH * T;
    size_t sizes[5] = {n1, nl, n1, n1, n1};
    a.qkv = randn(n3, 1.0f);
    a.dout = randn(n1, 1.0f);
    float *want[5], *got[5], *again[5], *tc[5], *tc2[5];
    float **runs[5] = {want, got, again, tc, tc2};
    attn_run(cpu, &a, want);
    attn_run(gpu, &a, got);
    attn_run(gpu, &a, again);
    attn_run(gpu16, &a, tc);
    attn_run(gpu16, &a, tc2);
    double gscale = max_abs(want[2], n3); /* the CPU's: a wrong GPU result cannot inflate it */
    for (int r = 0; r < 5; r++) split_dqkv(runs[r], (size_t)B * T, C);
    int hd = C / NH, on_tc = hd == 64 || hd == 128;
    static const char *names[5] = {"out", "lse", "dq", "dk", "dv"};
    static const double tc_tol[5] = {2e-2, 1e-2, 3e-2, 3e-2, 3e-2};
    for (int i = 0; i < 5; i++) {
        char what[96];
        snprintf(what, sizeof what, "attention fp32 B=%d T=%d C=%d NH=%d %s", B, T, C, NH, names[i]);
        double scale = i >= 2 ? gscale : i == 1 ? fmax(max_abs(want[1], nl), 1.0) : 0.0;
        near_of(what, got[i], want[i], sizes[i], 2e-5, scale);
        same(what, got[i], again[i], sizes[i]);
        snprintf(what, sizeof what, "attention bf16 B=%d T=%d C=%d NH=%d %s", B, T, C, NH, names[i]);
        if (on_tc) {
            near_of(what, tc[i], got[i], sizes[i], tc_tol[i], scale);
            if (i == 0 || i == 4) CHECK(memcmp(tc[i], got[i], sizes[i] * 4) != 0);
        } else {
            exact(what, tc[i], got[i], sizes[i]);
        }
        same(what, tc[i], tc2[i], sizes[i]);
        free(want[i]);
        free(got[i]);
        free(again[i]);
        free(tc[i]);
        free(tc2[i]);
    }
    free(a.qkv);
    free(a.dout);
}

static float *decode_run(const anvil_kernels *k, const float *q, const float *kc, const float *vc, int n, int C,
                         int NH) {
    float *dq = put(k, q, (size_t)C * 4), *dk = put(k, kc, (size_t)n * C * 4), *dv = put(k, vc, (size_t)n * C * 4);
    float *out = put(k, NULL, (size_t)C * 4);
    CHECK(k->attention_decode(out, dq, dk, dv, n, NH, NH, C / NH) == 0);
    k->free(dq);
    k->free(dk);
    k->free(dv);
    return take(k, out, (size_t)C * 4);
}

static void test_decode(int n, int C, int NH) {
    float *q = randn((size_t)C, 1.0f), *kc = randn((size_t)n * C, 1.0f), *vc = randn((size_t)n * C, 1.0f);
    float *want = decode_run(cpu, q, kc, vc, n, C, NH), *got = decode_run(gpu, q, kc, vc, n, C, NH);
    float *again = decode_run(gpu, q, kc, vc, n, C, NH);
    char what[96];
    snprintf(what, sizeof what, "attention_decode n=%d C=%d NH=%d", n, C, NH);
    near(what, got, want, (size_t)C, 2e-5);
    same(what, got, again, (size_t)C);
    free(q);
    free(kc);
    free(vc);
    free(want);
    free(got);
    free(again);
}

/* ---- elementwise and the optimizer ---- */

enum { GELU_F, GELU_B, GELU_B_INPLACE, COPY, ADD, ADAMW_P, ADAMW_M, ADAMW_V, ELEMENTWISE };

/* Every elementwise entry on n elements, results by the enum above. */
static void elementwise_run(const anvil_kernels *k, size_t n, const float *x, const float *y, const float *m0,
                            const float *v0, int t, float *r[ELEMENTWISE]) {
    size_t b = n * 4;
    float *dx = put(k, x, b), *dy = put(k, y, b), *out = put(k, NULL, b), *g = put(k, NULL, b);
    k->gelu_forward(out, dx, n);
    k->gelu_backward(g, dx, dy, n);
    r[GELU_F] = take(k, out, b);
    r[GELU_B] = take(k, g, b);
    float *inplace = put(k, y, b);
    k->gelu_backward(inplace, dx, inplace, n);
    r[GELU_B_INPLACE] = take(k, inplace, b);
    float *c = put(k, NULL, b);
    k->copy(c, dx, n);
    r[COPY] = take(k, c, b);
    float *a = put(k, x, b);
    k->add_inplace(a, dy, n);
    r[ADD] = take(k, a, b);
    float *p = put(k, x, b), *m = put(k, m0, b), *v = put(k, v0, b);
    /* Clipped at the later step: the scale's rounding is part of the contract. */
    k->adamw(p, dy, t == 1 ? 1.0f : 0.37f, m, v, n, 6e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, t);
    r[ADAMW_P] = take(k, p, b);
    r[ADAMW_M] = take(k, m, b);
    r[ADAMW_V] = take(k, v, b);
    k->free(dx);
    k->free(dy);
}

static void test_elementwise(size_t n, int t) {
    float *x = randn(n, 3.0f), *y = randn(n, 1.0f), *m0 = randn(n, 0.1f), *v0 = randn(n, 0.01f);
    for (size_t i = 0; i < n; i++) v0[i] = v0[i] * v0[i];
    float *want[ELEMENTWISE], *got[ELEMENTWISE], *again[ELEMENTWISE];
    elementwise_run(cpu, n, x, y, m0, v0, t, want);
    elementwise_run(gpu, n, x, y, m0, v0, t, got);
    elementwise_run(gpu, n, x, y, m0, v0, t, again);
    static const char *names[ELEMENTWISE] = {"gelu_forward", "gelu_backward", "gelu_backward in place", "copy",
                                             "add_inplace", "adamw p", "adamw m", "adamw v"};
    for (int i = 0; i < ELEMENTWISE; i++) {
        char what[96];
        snprintf(what, sizeof what, "%s n=%zu%s", names[i], n, i >= ADAMW_P ? (t == 1 ? " t=1" : " t=10") : "");
        if (i <= GELU_B_INPLACE) near(what, got[i], want[i], n, i == GELU_F ? 2e-6 : 1e-5);
        else exact(what, got[i], want[i], n);
        same(what, got[i], again[i], n);
        free(want[i]);
        free(got[i]);
        free(again[i]);
    }
    free(x);
    free(y);
    free(m0);
    free(v0);
}

static double sumsq_run(const anvil_kernels *k, const float *g, size_t n) {
    float *d = put(k, g, n * 4);
    double s = k->sumsq(d, n);
    k->free(d);
    return s;
}

static void test_sumsq(size_t n) {
    float *g = randn(n, 1.0f);
    double want = sumsq_run(cpu, g, n), got = sumsq_run(gpu, g, n), again = sumsq_run(gpu, g, n);
    double rel = fabs(got - want) / want;
    char what[96];
    snprintf(what, sizeof what, "sumsq n=%zu", n);
    printf("  %-58s %.17g vs %.17g: %.3g (tolerance 1e-05)%s\n", what, got, want, rel, rel <= 1e-5 ? "" : "  FAIL");
    CHECK(isfinite(got) && rel <= 1e-5);
    CHECK(memcmp(&got, &again, sizeof got) == 0);
    free(g);
}

/* ---- the embedding ---- */

struct emb {
    int B, T, C, V, v0, Vs, with_wpe;
    int32_t *tokens;
    float *wte, *wpe, *dout, *dwte0, *dwpe0;
};

/* out, dwte, dwpe (NULL without wpe) in r[0..2]; the whole table when Vs is 0, else the shard. */
static void emb_run(const anvil_kernels *k, const struct emb *e, float *r[3]) {
    size_t n = (size_t)e->B * e->T * e->C, rows = (size_t)(e->Vs ? e->Vs : e->V) * e->C, np = (size_t)e->T * e->C;
    int32_t *tok = put(k, e->tokens, (size_t)e->B * e->T * sizeof(int32_t));
    float *wte = put(k, e->wte, rows * 4), *wpe = e->with_wpe ? put(k, e->wpe, np * 4) : NULL;
    float *out = put(k, NULL, n * 4), *dout = put(k, e->dout, n * 4);
    float *dwte = put(k, e->dwte0, rows * 4), *dwpe = e->with_wpe ? put(k, e->dwpe0, np * 4) : NULL;
    if (e->Vs) {
        k->encoder_shard_forward(out, tok, wte, wpe, e->B, e->T, e->C, e->v0, e->Vs);
        k->encoder_shard_backward(dwte, dwpe, dout, tok, e->B, e->T, e->C, e->v0, e->Vs);
    } else {
        k->encoder_forward(out, tok, wte, wpe, e->B, e->T, e->C);
        k->encoder_backward(dwte, dwpe, dout, tok, e->B, e->T, e->C);
    }
    r[0] = take(k, out, n * 4);
    r[1] = take(k, dwte, rows * 4);
    r[2] = dwpe ? take(k, dwpe, np * 4) : NULL;
    k->free(tok);
    k->free(wte);
    if (wpe) k->free(wpe);
    k->free(dout);
}

/* Tokens from a small vocabulary, so that most repeat many times. */
static void test_encoder(int B, int T, int C, int V, int v0, int Vs, int with_wpe) {
    struct emb e = {B, T, C, V, v0, Vs, with_wpe, NULL, NULL, NULL, NULL, NULL, NULL};
    size_t n = (size_t)B * T * C, rows = (size_t)(Vs ? Vs : V) * C, np = (size_t)T * C;
    e.tokens = malloc((size_t)B * T * sizeof(int32_t));
    for (int i = 0; i < B * T; i++) e.tokens[i] = (int32_t)(anvil_rng_u64(&rng) % (uint64_t)V);
    e.wte = randn(rows, 1.0f);
    e.wpe = randn(np, 1.0f);
    e.dout = randn(n, 1.0f);
    e.dwte0 = randn(rows, 1.0f);
    e.dwpe0 = randn(np, 1.0f);
    float *want[3], *got[3], *again[3];
    emb_run(cpu, &e, want);
    emb_run(gpu, &e, got);
    emb_run(gpu, &e, again);
    static const char *names[3] = {"out", "dwte +=", "dwpe +="};
    size_t sizes[3] = {n, rows, np};
    for (int i = 0; i < (with_wpe ? 3 : 2); i++) {
        char what[96];
        snprintf(what, sizeof what, "encoder%s B=%d T=%d C=%d V=%d%s %s", Vs ? " shard" : "", B, T, C, V,
                 with_wpe ? "" : " no wpe", names[i]);
        exact(what, got[i], want[i], sizes[i]);
        same(what, got[i], again[i], sizes[i]);
    }
    free3(want);
    free3(got);
    free3(again);
    free(e.tokens);
    free(e.wte);
    free(e.wpe);
    free(e.dout);
    free(e.dwte0);
    free(e.dwpe0);
}

/* ---- the LM head ---- */

struct head {
    int N, C, V, Vp;
    float *x, *wte, *dwte0;
    int32_t *targets;
};

/* losses, dx, dwte (+=) of the fused classifier (dx and dwte NULL when !grad), in r[0..2]. */
static void head_run(const anvil_kernels *k, const struct head *h, const float *x, const float *wte, int grad,
                     float *r[3]) {
    size_t nx = (size_t)h->N * h->C, nw = (size_t)h->Vp * h->C;
    float *dxin = put(k, x, nx * 4), *dw = put(k, wte, nw * 4), *losses = put(k, NULL, (size_t)h->N * 4);
    int32_t *tg = put(k, h->targets, (size_t)h->N * sizeof(int32_t));
    float *dx = grad ? put(k, NULL, nx * 4) : NULL, *dwte = grad ? put(k, h->dwte0, nw * 4) : NULL;
    CHECK(k->classifier(losses, dx, dwte, dxin, dw, tg, h->N, h->C, h->V, h->Vp, 1.0f / h->N) == 0);
    r[0] = take(k, losses, (size_t)h->N * 4);
    r[1] = dx ? take(k, dx, nx * 4) : NULL;
    r[2] = dwte ? take(k, dwte, nw * 4) : NULL;
    k->free(dxin);
    k->free(dw);
    k->free(tg);
}

static float *logits_run(const anvil_kernels *k, const struct head *h, const float *x, const float *wte) {
    size_t nx = (size_t)h->N * h->C, nw = (size_t)h->Vp * h->C, nl = (size_t)h->N * h->Vp;
    float *dxin = put(k, x, nx * 4), *dw = put(k, wte, nw * 4), *out = put(k, NULL, nl * 4);
    k->logits(out, dxin, dw, h->N, h->C, h->Vp);
    k->free(dxin);
    k->free(dw);
    return take(k, out, nl * 4);
}

static void head_check(const char *ty, const struct head *h, float *want[3], float *got[3], float *again[3],
                       const double tol[3]) {
    static const char *names[3] = {"losses", "dx", "dwte +="};
    size_t sizes[3] = {(size_t)h->N, (size_t)h->N * h->C, (size_t)h->Vp * h->C};
    for (int i = 0; i < 3; i++) {
        if (!want[i]) continue;
        char what[96];
        snprintf(what, sizeof what, "classifier %s N=%d C=%d V=%d Vp=%d %s", ty, h->N, h->C, h->V, h->Vp, names[i]);
        near(what, got[i], want[i], sizes[i], tol[i]);
        same(what, got[i], again[i], sizes[i]);
    }
}

static void test_classifier(int N, int C, int V, int Vp) {
    struct head h = {N, C, V, Vp, randn((size_t)N * C, 1.0f), randn((size_t)Vp * C, 0.2f), NULL, NULL};
    h.dwte0 = randn((size_t)Vp * C, 0.01f);
    h.targets = malloc((size_t)N * sizeof(int32_t));
    for (int i = 0; i < N; i++) h.targets[i] = i % 7 == 3 ? -1 : (int32_t)(anvil_rng_u64(&rng) % (uint64_t)V);
    for (size_t i = (size_t)V * C; i < (size_t)Vp * C; i++) h.wte[i] = 0.0f; /* padding rows, as the model keeps them */
    float *x16 = rounded(h.x, (size_t)N * C), *w16 = rounded(h.wte, (size_t)Vp * C);
    static const double f32[3] = {2e-5, 2e-5, 2e-5}, b16[3] = {5e-4, 1e-2, 1e-2};
    for (int grad = 1; grad >= 0; grad--)
        for (int bf16 = 0; bf16 < 2; bf16++) {
            const anvil_kernels *g = bf16 ? gpu16 : gpu;
            float *want[3], *got[3], *again[3];
            head_run(cpu, &h, bf16 ? x16 : h.x, bf16 ? w16 : h.wte, grad, want);
            head_run(g, &h, h.x, h.wte, grad, got);
            head_run(g, &h, h.x, h.wte, grad, again);
            head_check(bf16 ? "bf16" : "fp32", &h, want, got, again, bf16 ? b16 : f32);
            free3(want);
            free3(got);
            free3(again);
        }
    for (int bf16 = 0; bf16 < 2; bf16++) {
        float *want = logits_run(cpu, &h, bf16 ? x16 : h.x, bf16 ? w16 : h.wte);
        float *got = logits_run(bf16 ? gpu16 : gpu, &h, h.x, h.wte), *again = logits_run(bf16 ? gpu16 : gpu, &h, h.x, h.wte);
        char what[96];
        snprintf(what, sizeof what, "logits %s N=%d C=%d Vp=%d", bf16 ? "bf16" : "fp32", N, C, Vp);
        near(what, got, want, (size_t)N * Vp, bf16 ? 2e-4 : 2e-5);
        same(what, got, again, (size_t)N * Vp);
        free(want);
        free(got);
        free(again);
    }
    free(h.x);
    free(h.wte);
    free(h.dwte0);
    free(h.targets);
    free(x16);
    free(w16);
}

/* The vocabulary-parallel halves on one shard [v0, v0 + Vs) of a table of V real rows: the shard's
 * statistics, and its backward given a global log-sum-exp (any finite values serve). */
static void shard_run(const anvil_kernels *k, const struct head *h, const float *x, const float *wte, const float *lse,
                      int v0, int Vr, int Vs, float *r[4]) {
    size_t nx = (size_t)h->N * h->C, nw = (size_t)Vs * h->C, N = (size_t)h->N;
    float *dxin = put(k, x, nx * 4), *dw = put(k, wte + (size_t)v0 * h->C, nw * 4);
    int32_t *tg = put(k, h->targets, N * sizeof(int32_t));
    float *slse = put(k, NULL, N * 4), *tl = put(k, NULL, N * 4), *glse = put(k, lse, N * 4);
    float *dx = put(k, NULL, nx * 4), *dwte = put(k, h->dwte0, nw * 4);
    CHECK(k->classifier_shard_stats(slse, tl, dxin, dw, tg, h->N, h->C, v0, Vr, Vs) == 0);
    CHECK(k->classifier_shard_backward(dx, dwte, dxin, dw, glse, tg, h->N, h->C, v0, Vr, Vs, 0.5f) == 0);
    r[0] = take(k, slse, N * 4);
    r[1] = take(k, tl, N * 4);
    r[2] = take(k, dx, nx * 4);
    r[3] = take(k, dwte, nw * 4);
    k->free(dxin);
    k->free(dw);
    k->free(tg);
    k->free(glse);
}

static void test_shard(int N, int C, int V, int v0, int Vs) {
    int Vr = V - v0 < Vs ? (V - v0 > 0 ? V - v0 : 0) : Vs;
    size_t total = (size_t)(v0 + Vs) * C;
    struct head h = {N, C, V, v0 + Vs, randn((size_t)N * C, 1.0f), randn(total, 0.2f), randn((size_t)Vs * C, 0.01f),
                     malloc((size_t)N * sizeof(int32_t))};
    for (int i = 0; i < N; i++) h.targets[i] = i % 5 == 2 ? -1 : (int32_t)(anvil_rng_u64(&rng) % (uint64_t)V);
    float *lse = randn((size_t)N, 1.0f), *x16 = rounded(h.x, (size_t)N * C), *w16 = rounded(h.wte, total);
    for (int i = 0; i < N; i++) lse[i] += 8.0f;
    static const char *names[4] = {"lse", "target_logit", "dx", "dwte +="};
    size_t sizes[4] = {(size_t)N, (size_t)N, (size_t)N * C, (size_t)Vs * C};
    for (int bf16 = 0; bf16 < 2; bf16++) {
        const anvil_kernels *g = bf16 ? gpu16 : gpu;
        float *want[4], *got[4], *again[4];
        shard_run(cpu, &h, bf16 ? x16 : h.x, bf16 ? w16 : h.wte, lse, v0, Vr, Vs, want);
        shard_run(g, &h, h.x, h.wte, lse, v0, Vr, Vs, got);
        shard_run(g, &h, h.x, h.wte, lse, v0, Vr, Vs, again);
        for (int i = 0; i < 4; i++) {
            char what[96];
            snprintf(what, sizeof what, "classifier_shard %s N=%d v0=%d Vr=%d Vs=%d %s", bf16 ? "bf16" : "fp32", N, v0,
                     Vr, Vs, names[i]);
            if (Vr == 0 && i == 0) exact(what, got[i], want[i], sizes[i]); /* -inf, both */
            else near(what, got[i], want[i], sizes[i], bf16 ? (i < 2 ? 5e-4 : 1e-2) : 2e-5);
            same(what, got[i], again[i], sizes[i]);
            free(want[i]);
            free(got[i]);
            free(again[i]);
        }
    }
    free(h.x);
    free(h.wte);
    free(h.dwte0);
    free(h.targets);
    free(lse);
    free(x16);
    free(w16);
}

/* ---- memory ---- */

static void test_memory(void) {
    size_t n = ((size_t)20 << 20) + 3;
    unsigned char *src = malloc(n), *back = malloc(n), *snap = malloc(n);
    for (size_t i = 0; i < n; i++) src[i] = (unsigned char)(anvil_rng_u64(&rng) >> 56);
    unsigned char *fresh = gpu->alloc(4096), *zeros = calloc(1, 4096), *seen = malloc(4096);
    gpu->download(seen, fresh, 4096);
    CHECK(memcmp(seen, zeros, 4096) == 0);
    void *d = put(gpu, src, n);
    gpu->download(back, d, n);
    CHECK(memcmp(back, src, n) == 0);
    uint32_t want = anvil_crc32c(0x12345678u, src, n);
    CHECK(gpu->download_crc32c(snap, d, n, 0x12345678u) == want);
    CHECK(memcmp(snap, src, n) == 0);
    /* As the checkpointer calls it: every thread a piece at once, more threads than staging slots. */
    enum { PIECES = 12 };
    uint32_t crcs[PIECES];
    memset(snap, 0, n);
#pragma omp parallel for num_threads(PIECES) schedule(static, 1)
    for (int p = 0; p < PIECES; p++) {
        size_t lo = n * p / PIECES, hi = n * (p + 1) / PIECES;
        crcs[p] = gpu->download_crc32c(snap + lo, (const char *)d + lo, hi - lo, 0);
    }
    CHECK(memcmp(snap, src, n) == 0);
    for (int p = 0; p < PIECES; p++) {
        size_t lo = n * p / PIECES, hi = n * (p + 1) / PIECES;
        CHECK(crcs[p] == anvil_crc32c(0, src + lo, hi - lo));
    }
    gpu->zero((char *)d + 5, 1000);
    gpu->download(back, d, n);
    CHECK(memcmp(back, src, 5) == 0 && back[5] == 0 && back[1004] == 0 && memcmp(back + 1005, src + 1005, n - 1005) == 0);
    printf("  %-58s %s\n", "alloc, upload, download, zero, download_crc32c", t_failures ? "" : "ok");
    gpu->free(d);
    gpu->free(fresh);
    free(src);
    free(back);
    free(snap);
    free(zeros);
    free(seen);
}

/* Errors: an int entry's bad argument fails at once; a void entry's failure is latched and the next
 * sync reports it, naming the entry, as does every int entry after it. Last: it leaves the backend
 * failed. */
static void test_errors(void) {
    float *buf = gpu->alloc(4096);
    CHECK(gpu->attention_forward(buf, buf, buf, 1, 1, 1, 1, 200) == -1 && strstr(anvil_errmsg(), "head size 200"));
    CHECK(gpu->sync() == 0);
    gpu->matmul_forward(buf, buf, buf, NULL, 4, 0, 4, 0);
    CHECK(gpu->sync() == -1 && strstr(anvil_errmsg(), "matmul_forward"));
    printf("  %-58s %s\n", "latched error", anvil_errmsg());
    CHECK(gpu->attention_forward(buf, buf, buf, 1, 1, 1, 1, 64) == -1 && strstr(anvil_errmsg(), "matmul_forward"));
    CHECK(cpu->sync() == 0);
    gpu->free(buf);
}

int main(void) {
    if (anvil_cuda_device_count() < 0) {
        printf("test_cuda_kernels: skipped: no GPU (%s)\n", anvil_errmsg());
        return 77;
    }
    anvil_cuda_device dev;
    CHECK(anvil_cuda_device_info(0, &dev) == 0);
    printf("test_cuda_kernels: %s, %.1f GiB, %d SMs, compute capability %d.%d\n", dev.name,
           dev.memory_bytes / 1073741824.0, dev.sm_count, dev.cc_major, dev.cc_minor);
    cpu = anvil_kernels_cpu();
    gpu = anvil_kernels_cuda(0, ANVIL_MATMUL_F32);
    gpu16 = anvil_kernels_cuda(0, ANVIL_MATMUL_BF16);
    if (!gpu || !gpu16) {
        fprintf(stderr, "test_cuda_kernels: %s\n", anvil_errmsg());
        return 1;
    }
    CHECK(anvil_kernels_cuda(1, ANVIL_MATMUL_F32) == NULL && strstr(anvil_errmsg(), "device"));
    anvil_rng_seed(&rng, 29);
    test_memory();
    test_matmuls();
    test_layernorm(77, 100);
    test_layernorm(256, 768);
    test_attention(2, 77, 192, 3);   /* head size 64, partial tiles */
    test_attention(1, 1, 64, 1);     /* one token */
    test_attention(1, 300, 256, 2);  /* head size 128 */
    test_attention(2, 130, 120, 3);  /* head size 40: fp32 kernels in both tables */
    test_attention(1, 65, 24, 3);    /* head size 8 */
    test_decode(1, 192, 3);
    test_decode(300, 192, 3);
    test_elementwise(100003, 1);
    test_elementwise(4099, 10);
    test_sumsq(1);
    test_sumsq(1000);
    test_sumsq(1000003);
    test_encoder(3, 70, 100, 50, 0, 0, 1);
    test_encoder(3, 70, 100, 50, 0, 0, 0);
    test_encoder(2, 33, 40, 50, 10, 20, 1);
    test_encoder(2, 33, 40, 50, 10, 20, 0);
    test_classifier(77, 64, 1000, 1024);
    test_classifier(1100, 32, 500, 512); /* two chunks, the second partial */
    test_shard(77, 64, 1000, 256, 256);
    test_shard(77, 64, 1000, 768, 256); /* the last shard: 232 real rows */
    test_shard(77, 64, 1000, 1024, 64); /* all padding: no real rows */
    CHECK(gpu->sync() == 0);
    test_errors();
    return t_done("test_cuda_kernels");
}
