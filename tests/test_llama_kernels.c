/* The Llama family's kernels against PyTorch (fixtures/llama_kernels.safetensors,
 * written by fixtures/gen_llama_kernels_fixture.py from Hugging Face's
 * modeling conventions, fp32): RMSNorm, the RoPE tables (plain and with
 * llama3 scaling) and rotation, SwiGLU, and grouped- and multi-query
 * attention with its KV-cached decode. Then the kernels' own invariants:
 * grouped-query attention equals multi-head attention over repeated key and
 * value heads bit for bit (forward and query gradient), and every result is
 * the same on 1 and 3 threads, bit for bit.
 *
 * Tolerances: absolute, each about 3x the largest difference measured on
 * the avx2 and generic paths (2026-12-04, AMD EPYC, AVX2; the avx512 path
 * is not measured here), which the comment beside it names; differences
 * come from summation order (fp32 on both sides) and from vexpf against
 * PyTorch's exp. */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/safetensors.h"
#include "core/error.h"
#include "kernels/kernels.h"
#include "kernels/rope.h"
#include "testutil.h"

#define FIXTURE "fixtures/llama_kernels.safetensors"

static const anvil_kernels *K;
static anvil_st_file *F;

static const float *fx(const char *name, size_t n) {
    const anvil_st_tensor *t = anvil_st_find(F, name);
    if (!t || t->nbytes != n * 4) {
        t_fail(__FILE__, __LINE__, "fixture tensor %s missing or not %zu elements", name, n);
        exit(1);
    }
    return t->data;
}

static float *dup(const float *x, size_t n) {
    float *p = malloc(n * sizeof *p);
    memcpy(p, x, n * sizeof *p);
    return p;
}

/* The measured difference (printed, for setting tolerances) and the check. */
static void close_to(const char *what, const float *got, const float *want, size_t n, float rtol, float atol) {
    double worst = 0.0, scale = 0.0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)got[i] - want[i]);
        worst = d > worst ? d : worst;
        scale = fabs(want[i]) > scale ? fabs(want[i]) : scale;
    }
    printf("  %-34s max |diff| %.3g (max |want| %.3g)\n", what, worst, scale);
    t_close(what, got, want, n, rtol, atol);
}

static void same_bits(const char *what, const float *a, const float *b, size_t n) {
    if (memcmp(a, b, n * sizeof *a)) t_fail(__FILE__, __LINE__, "%s: not bit-identical", what);
}

static void test_rmsnorm(void) {
    const int N = 37, C = 96;
    size_t n = (size_t)N * C;
    const float *x = fx("rmsnorm.x", n), *w = fx("rmsnorm.w", C), *dout = fx("rmsnorm.dout", n);
    float *out = malloc(n * 4), *rstd = malloc(N * 4), *dx = malloc(n * 4), *dw = malloc(C * 4);
    float *want_dx = malloc(n * 4), *want_dw = malloc(C * 4);
    K->rmsnorm_forward(out, rstd, x, w, N, C, 1e-5f);
    /* Measured 7.2e-7 on outputs of up to 4.3. */
    close_to("rmsnorm forward", out, fx("rmsnorm.out", n), n, 0.0f, 2.2e-6f);
    /* The backward adds to what dx and dw hold. */
    for (size_t i = 0; i < n; i++) dx[i] = want_dx[i] = 0.25f * (float)(i % 7);
    for (int c = 0; c < C; c++) dw[c] = want_dw[c] = -0.5f;
    const float *tdx = fx("rmsnorm.dx", n), *tdw = fx("rmsnorm.dw", C);
    for (size_t i = 0; i < n; i++) want_dx[i] += tdx[i];
    for (int c = 0; c < C; c++) want_dw[c] += tdw[c];
    K->rmsnorm_backward(dx, dw, dout, x, w, rstd, N, C);
    /* Measured 9.5e-7 (dx, up to 5.1) and 1.9e-6 (dw, sums of 37 rows, up to 16). */
    close_to("rmsnorm backward dx", dx, want_dx, n, 0.0f, 3e-6f);
    close_to("rmsnorm backward dw", dw, want_dw, C, 0.0f, 6e-6f);
    free(out), free(rstd), free(dx), free(dw), free(want_dx), free(want_dw);
}

static const anvil_rope_config LLAMA3 = {500000.0, ANVIL_ROPE_LLAMA3, 8.0, 1.0, 4.0, 8192};

static void test_rope_table(void) {
    const int hs = 64, P = 131072;
    anvil_rope_config plain = {10000.0, ANVIL_ROPE_DEFAULT, 0, 0, 0, 0};
    float f[32];
    CHECK(anvil_rope_inv_freq(f, &plain, hs) == 0);
    /* Measured identical; one unit in the last place is allowed, since PyTorch's fp32 pow is not
     * correctly rounded everywhere. */
    close_to("rope inv_freq theta 10000", f, fx("rope.inv_freq_default", 32), 32, 1.2e-7f, 0.0f);
    CHECK(anvil_rope_inv_freq(f, &LLAMA3, hs) == 0);
    close_to("rope inv_freq llama3", f, fx("rope.inv_freq_llama3", 32), 32, 1.2e-7f, 0.0f);
    /* The tiny model's frequencies (fixtures/gen_llama_fixture.py): head size 16 and
     * original_max_position_embeddings 64 put them in all three of llama3's bands. */
    anvil_st_file *m = anvil_st_open("fixtures/llama_tiny.safetensors");
    const anvil_st_tensor *mf = m ? anvil_st_find(m, "rope.inv_freq") : NULL;
    CHECK(mf && mf->nbytes == 8 * 4);
    anvil_rope_config tiny = {500000.0, ANVIL_ROPE_LLAMA3, 4.0, 1.0, 4.0, 64};
    CHECK(anvil_rope_inv_freq(f, &tiny, 16) == 0);
    if (mf) close_to("rope inv_freq of llama_tiny", f, mf->data, 8, 1.2e-7f, 0.0f);
    anvil_st_close(m);
    float *cs = malloc((size_t)P * hs * 4);
    CHECK(anvil_rope_table(cs, &LLAMA3, hs, P) == 0);
    const anvil_st_tensor *pt = anvil_st_find(F, "rope.positions");
    const int32_t *pos = pt->data;
    int np = (int)(pt->nbytes / 4);
    const float *tc = fx("rope.cos", (size_t)np * hs), *tsn = fx("rope.sin", (size_t)np * hs);
    float *gc = malloc((size_t)np * hs * 4), *gs = malloc((size_t)np * hs * 4);
    for (int i = 0; i < np; i++)
        for (int j = 0; j < hs; j++) {
            gc[i * hs + j] = cs[(size_t)pos[i] * hs + j % 32];
            gs[i * hs + j] = cs[(size_t)pos[i] * hs + 32 + j % 32];
        }
    /* The angles are the same fp32 products on both sides; cos and sin differ by PyTorch's rounding:
     * measured 6e-8. */
    close_to("rope cos, positions to 131071", gc, tc, (size_t)np * hs, 0.0f, 1.8e-7f);
    close_to("rope sin, positions to 131071", gs, tsn, (size_t)np * hs, 0.0f, 1.8e-7f);
    free(cs), free(gc), free(gs);

    anvil_rope_config bad = LLAMA3;
    CHECK(anvil_rope_check(&bad, 63) < 0 && strstr(anvil_errmsg(), "head size 63 is not even"));
    bad.high_freq_factor = 1.0;
    CHECK(anvil_rope_check(&bad, 64) < 0 && strstr(anvil_errmsg(), "low_freq_factor < high_freq_factor"));
    bad = LLAMA3;
    bad.theta = 0.0;
    CHECK(anvil_rope_check(&bad, 64) < 0 && strstr(anvil_errmsg(), "rope_theta"));
    bad = LLAMA3;
    bad.original_max_position_embeddings = 0;
    CHECK(anvil_rope_check(&bad, 64) < 0 && strstr(anvil_errmsg(), "original_max_position_embeddings"));
}

static void rope_case(const char *name, const float *cs, int B, int T, int pos0) {
    const int NH = 4, NKV = 2, hs = 64;
    size_t n = (size_t)B * T * (NH + 2 * NKV) * hs;
    char key[64], what[64];
    snprintf(key, sizeof key, "%s.qkv", name);
    float *x = dup(fx(key, n), n);
    K->rope_forward(x, cs, B, T, pos0, NH, NKV, hs);
    snprintf(key, sizeof key, "%s.out", name);
    snprintf(what, sizeof what, "rope forward from %d", pos0);
    /* Measured 4.8e-7 on values up to 4.1, forward and backward. */
    close_to(what, x, fx(key, n), n, 0.0f, 1.5e-6f);
    snprintf(key, sizeof key, "%s.dout", name);
    float *d = dup(fx(key, n), n);
    K->rope_backward(d, cs, B, T, pos0, NH, NKV, hs);
    snprintf(key, sizeof key, "%s.dqkv", name);
    snprintf(what, sizeof what, "rope backward from %d", pos0);
    close_to(what, d, fx(key, n), n, 0.0f, 1.5e-6f);
    free(x), free(d);
}

static void test_rope(void) {
    const int hs = 64, P = 128;
    float *cs = malloc((size_t)P * hs * 4);
    CHECK(anvil_rope_table(cs, &LLAMA3, hs, P) == 0);
    rope_case("rope0", cs, 2, 40, 0);
    rope_case("rope100", cs, 1, 3, 100);
    free(cs);
}

static void test_swiglu(void) {
    const int N = 33, H = 200;
    size_t n = (size_t)N * H;
    const float *gu = fx("swiglu.gate_up", 2 * n), *dout = fx("swiglu.dout", n);
    float *out = malloc(n * 4), *d = malloc(2 * n * 4);
    K->swiglu_forward(out, gu, gu + H, N, H, 2 * H);
    /* Measured 1.9e-6 on outputs up to 302 and gradients up to 100 (vexpf against PyTorch's exp). */
    close_to("swiglu forward", out, fx("swiglu.out", n), n, 0.0f, 6e-6f);
    K->swiglu_backward(d, d + H, dout, gu, gu + H, N, H, 2 * H);
    close_to("swiglu backward", d, fx("swiglu.dgate_up", 2 * n), 2 * n, 0.0f, 6e-6f);
    /* Separate gate and up buffers (ld = H) give the same bits. */
    float *g = malloc(n * 4), *u = malloc(n * 4), *o2 = malloc(n * 4), *dg = malloc(n * 4), *du = malloc(n * 4);
    for (int r = 0; r < N; r++) {
        memcpy(g + (size_t)r * H, gu + (size_t)r * 2 * H, H * 4);
        memcpy(u + (size_t)r * H, gu + (size_t)r * 2 * H + H, H * 4);
    }
    K->swiglu_forward(o2, g, u, N, H, H);
    K->swiglu_backward(dg, du, dout, g, u, N, H, H);
    same_bits("swiglu forward, ld H against 2H", o2, out, n);
    int ok = 1;
    for (int r = 0; r < N; r++)
        ok &= !memcmp(dg + (size_t)r * H, d + (size_t)r * 2 * H, H * 4) &&
              !memcmp(du + (size_t)r * H, d + (size_t)r * 2 * H + H, H * 4);
    CHECK(ok);
    free(out), free(d), free(g), free(u), free(o2), free(dg), free(du);
}

static void attention_case(const char *name, int B, int T, int NH, int NKV, int hs) {
    size_t nq = (size_t)B * T * (NH + 2 * NKV) * hs, no = (size_t)B * T * NH * hs;
    char key[64], what[64];
    snprintf(key, sizeof key, "%s.qkv", name);
    const float *qkv = fx(key, nq);
    snprintf(key, sizeof key, "%s.out", name);
    const float *want = fx(key, no);
    float *out = malloc(no * 4), *lse = malloc((size_t)B * NH * T * 4), *dqkv = malloc(nq * 4);
    CHECK(K->attention_forward(out, lse, qkv, B, T, NH, NKV, hs) == 0);
    snprintf(what, sizeof what, "%s attention forward", name);
    /* Measured 7.8e-7 (outputs up to 3.0). */
    close_to(what, out, want, no, 0.0f, 2.4e-6f);
    snprintf(key, sizeof key, "%s.dout", name);
    CHECK(K->attention_backward(dqkv, fx(key, no), out, lse, qkv, B, T, NH, NKV, hs) == 0);
    snprintf(key, sizeof key, "%s.dqkv", name);
    snprintf(what, sizeof what, "%s attention backward", name);
    /* Measured 2.7e-6 (gradients up to 5.8, the key/value heads summing their group). */
    close_to(what, dqkv, fx(key, nq), nq, 0.0f, 8.5e-6f);

    /* Decoding row t of sequence 0 against the first t + 1 cached keys and values is row t of the
     * forward. */
    int ld = (NH + 2 * NKV) * hs, kvw = NKV * hs;
    float *kc = malloc((size_t)T * kvw * 4), *vc = malloc((size_t)T * kvw * 4), *o = malloc((size_t)NH * hs * 4);
    for (int t = 0; t < T; t++) {
        memcpy(kc + (size_t)t * kvw, qkv + (size_t)t * ld + NH * hs, (size_t)kvw * 4);
        memcpy(vc + (size_t)t * kvw, qkv + (size_t)t * ld + (NH + NKV) * hs, (size_t)kvw * 4);
    }
    int rows[] = {0, 1, 63, 64, T - 1};
    for (int i = 0; i < 5; i++) {
        int t = rows[i];
        CHECK(K->attention_decode(o, qkv + (size_t)t * ld, kc, vc, t + 1, NH, NKV, hs) == 0);
        snprintf(what, sizeof what, "%s decode of row %d", name, t);
        /* Measured 1.8e-7. */
        close_to(what, o, want + (size_t)t * NH * hs, (size_t)NH * hs, 0.0f, 6e-7f);
    }
    free(out), free(lse), free(dqkv), free(kc), free(vc), free(o);
}

/* GQA with NKV heads is MHA with each key/value head repeated over its group: the forward and
 * the query gradients are the same computations, bit for bit; a key/value head's gradient is
 * its group's sum, taken in another order. */
static void test_gqa_is_repeated_mha(void) {
    const int B = 2, T = 130, NH = 6, NKV = 2, hs = 16, G = NH / NKV;
    int ldg = (NH + 2 * NKV) * hs, ldm = 3 * NH * hs;
    size_t ng = (size_t)B * T * ldg, nm = (size_t)B * T * ldm, no = (size_t)B * T * NH * hs;
    const float *src = fx("gqa.qkv", 2 * 70 * 128);
    float *g = malloc(ng * 4), *m = malloc(nm * 4), *dout = malloc(no * 4);
    for (size_t i = 0; i < ng; i++) g[i] = src[i % (2 * 70 * 128)] * (1.0f + (float)(i % 5) * 0.1f);
    for (size_t i = 0; i < no; i++) dout[i] = src[(i * 7) % (2 * 70 * 128)];
    for (int r = 0; r < B * T; r++) {
        const float *gr = g + (size_t)r * ldg;
        float *mr = m + (size_t)r * ldm;
        memcpy(mr, gr, (size_t)NH * hs * 4);
        for (int h = 0; h < NH; h++) {
            memcpy(mr + (size_t)(NH + h) * hs, gr + (size_t)(NH + h / G) * hs, (size_t)hs * 4);
            memcpy(mr + (size_t)(2 * NH + h) * hs, gr + (size_t)(NH + NKV + h / G) * hs, (size_t)hs * 4);
        }
    }
    float *og = malloc(no * 4), *om = malloc(no * 4), *lg = malloc((size_t)B * NH * T * 4),
          *lm = malloc((size_t)B * NH * T * 4), *dg = malloc(ng * 4), *dm = malloc(nm * 4);
    CHECK(K->attention_forward(og, lg, g, B, T, NH, NKV, hs) == 0);
    CHECK(K->attention_forward(om, lm, m, B, T, NH, NH, hs) == 0);
    same_bits("GQA forward against repeated MHA", og, om, no);
    same_bits("GQA log-sum-exp against repeated MHA", lg, lm, (size_t)B * NH * T);
    CHECK(K->attention_backward(dg, dout, og, lg, g, B, T, NH, NKV, hs) == 0);
    CHECK(K->attention_backward(dm, dout, om, lm, m, B, T, NH, NH, hs) == 0);
    float *sum = calloc(ng, 4), *got = malloc(ng * 4);
    int dq_same = 1;
    for (int r = 0; r < B * T; r++) {
        const float *mr = dm + (size_t)r * ldm;
        float *sr = sum + (size_t)r * ldg;
        dq_same &= !memcmp(mr, dg + (size_t)r * ldg, (size_t)NH * hs * 4);
        for (int h = 0; h < NH; h++)
            for (int d = 0; d < hs; d++) {
                sr[(NH + h / G) * hs + d] += mr[(NH + h) * hs + d];
                sr[(NH + NKV + h / G) * hs + d] += mr[(2 * NH + h) * hs + d];
            }
        memcpy(sr, dg + (size_t)r * ldg, (size_t)NH * hs * 4);
    }
    if (!dq_same) t_fail(__FILE__, __LINE__, "GQA query gradients differ from repeated MHA's");
    memcpy(got, dg, ng * 4);
    /* Measured 9.5e-7: sums of three in another order. */
    close_to("GQA key/value gradients, group sums", got, sum, ng, 0.0f, 3e-6f);
    free(g), free(m), free(dout), free(og), free(om), free(lg), free(lm), free(dg), free(dm), free(sum), free(got);
}

/* Every kernel on 1 and on 3 threads, bit for bit (shapes large enough to split among threads). */
static void run_all(int threads, float **res, size_t *len) {
    omp_set_num_threads(threads);
    const int B = 2, T = 300, NH = 4, NKV = 1, hs = 16, ld = (NH + 2 * NKV) * hs, N = 600, C = 96, H = 200;
    size_t nsrc = (size_t)T * ld, nq = (size_t)B * T * ld, no = (size_t)B * T * NH * hs, nin = (size_t)N * 2 * H;
    const float *src = fx("mqa.qkv", nsrc), *w = fx("rmsnorm.w", C);
    float *in = malloc(nin * 4), *x = malloc(nq * 4), *cs = malloc((size_t)T * hs * 4);
    for (size_t i = 0; i < nin; i++) in[i] = src[i % nsrc] * (i < nin / 2 ? 2.0f : -0.7f);
    memcpy(x, in, nq * 4);
    CHECK(anvil_rope_table(cs, &LLAMA3, hs, T) == 0);
    float *r = *res = malloc((nq * 2 + no + (size_t)N * C * 2 + C + (size_t)N * H * 3) * 4);
    size_t at = 0;
    K->rope_forward(x, cs, B, T, 0, NH, NKV, hs);
    memcpy(r + at, x, nq * 4), at += nq;
    float *lse = malloc((size_t)B * NH * T * 4), *out = r + at;
    CHECK(K->attention_forward(out, lse, x, B, T, NH, NKV, hs) == 0);
    at += no;
    CHECK(K->attention_backward(r + at, out, out, lse, x, B, T, NH, NKV, hs) == 0);
    K->rope_backward(r + at, cs, B, T, 0, NH, NKV, hs);
    at += nq;
    float rstd[600];
    K->rmsnorm_forward(r + at, rstd, in, w, N, C, 1e-5f);
    float *dx = r + at + (size_t)N * C, *dw = dx + (size_t)N * C;
    memset(dx, 0, ((size_t)N * C + C) * 4);
    K->rmsnorm_backward(dx, dw, r + at, in, w, rstd, N, C);
    at += (size_t)N * C * 2 + C;
    float *o = r + at, *dgu = o + (size_t)N * H;
    K->swiglu_forward(o, in, in + H, N, H, 2 * H);
    K->swiglu_backward(dgu, dgu + H, o, in, in + H, N, H, 2 * H);
    at += (size_t)N * H * 3;
    *len = at;
    free(in), free(x), free(cs), free(lse);
}

static void test_threads(void) {
    float *a, *b;
    size_t na, nb;
    run_all(1, &a, &na);
    run_all(3, &b, &nb);
    CHECK(na == nb);
    same_bits("rope, attention, rmsnorm, swiglu on 1 and 3 threads", a, b, na);
    free(a), free(b);
    omp_set_num_threads(2);
}

int main(void) {
    t_path("test_llama_kernels");
    K = anvil_kernels_cpu();
    F = anvil_st_open(FIXTURE);
    if (!F) {
        t_fail(__FILE__, __LINE__, "%s", anvil_errmsg());
        return t_done("test_llama_kernels");
    }
    test_rmsnorm();
    test_rope_table();
    test_rope();
    test_swiglu();
    attention_case("gqa", 2, 70, 4, 2, 16);
    attention_case("mqa", 1, 300, 4, 1, 16);
    test_gqa_is_repeated_mha();
    test_threads();
    anvil_st_close(F);
    return t_done("test_llama_kernels");
}
