#include "train/profile.h"

#include <stdio.h>

#include "obs/trace.h"

static const anvil_kernels *K;
static anvil_kernels P;
/* The run's model, checked, so the widths its check derives (Llama's MLP) are there; NULL: none. */
static anvil_model_config model_cfg;
static const anvil_model_config *M;

#define OP() double t0_ = anvil_trace_begin()
#define DONE(name) anvil_trace_end(t0_, "op", name, anvil_trace_layer(), -1)

/* A linear layer's span name, "matmul_forward qkv": its role in the block by its shape, as the model
 * family names it. The trace keeps the name's pointer, so each name is made once and kept; the model
 * calls its matmuls from one thread. */
static const char *role(int backward, int C, int OC) {
    static struct {
        int C, OC, backward;
        char name[64];
    } names[32];
    static int n;
    const char *plain = backward ? "matmul_backward" : "matmul_forward";
    for (int i = 0; i < n; i++)
        if (names[i].C == C && names[i].OC == OC && names[i].backward == backward) return names[i].name;
    const char *r = M ? anvil_model_linear_role(M, C, OC) : NULL;
    if (!r || n == (int)(sizeof names / sizeof names[0])) return plain;
    names[n].C = C;
    names[n].OC = OC;
    names[n].backward = backward;
    snprintf(names[n].name, sizeof names[n].name, "%s %s", plain, r);
    return names[n++].name;
}

static void zero(void *p, size_t bytes) {
    OP();
    K->zero(p, bytes);
    DONE("zero");
}
static void upload(void *dst, const void *src, size_t bytes) {
    OP();
    K->upload(dst, src, bytes);
    DONE("upload");
}
static void download(void *dst, const void *src, size_t bytes) {
    OP();
    K->download(dst, src, bytes);
    DONE("download");
}
static void encoder_forward(float *out, const int32_t *tokens, const float *wte, const float *wpe, int B, int T,
                            int C) {
    OP();
    K->encoder_forward(out, tokens, wte, wpe, B, T, C);
    DONE("encoder_forward");
}
static void encoder_backward(float *dwte, float *dwpe, const float *dout, const int32_t *tokens, int B, int T, int C) {
    OP();
    K->encoder_backward(dwte, dwpe, dout, tokens, B, T, C);
    DONE("encoder_backward");
}
static void layernorm_forward(float *out, float *mean, float *rstd, const float *x, const float *w, const float *b,
                              int N, int C) {
    OP();
    K->layernorm_forward(out, mean, rstd, x, w, b, N, C);
    DONE("layernorm_forward");
}
static void layernorm_backward(float *dx, float *dw, float *db, const float *dout, const float *x, const float *w,
                               const float *mean, const float *rstd, int N, int C) {
    OP();
    K->layernorm_backward(dx, dw, db, dout, x, w, mean, rstd, N, C);
    DONE("layernorm_backward");
}
static void matmul_forward(float *out, const float *x, const float *w, const float *b, int N, int C, int OC,
                           int accumulate) {
    OP();
    K->matmul_forward(out, x, w, b, N, C, OC, accumulate);
    DONE(role(0, C, OC));
}
static void matmul_backward(float *dx, float *dw, float *db, const float *dout, const float *x, const float *w, int N,
                            int C, int OC) {
    OP();
    K->matmul_backward(dx, dw, db, dout, x, w, N, C, OC);
    DONE(role(1, C, OC));
}
static int attention_forward(float *out, float *lse, const float *qkv, int B, int T, int NH, int NKV, int hs) {
    OP();
    int rc = K->attention_forward(out, lse, qkv, B, T, NH, NKV, hs);
    DONE("attention_forward");
    return rc;
}
static int attention_backward(float *dqkv, const float *dout, const float *out, const float *lse, const float *qkv,
                              int B, int T, int NH, int NKV, int hs) {
    OP();
    int rc = K->attention_backward(dqkv, dout, out, lse, qkv, B, T, NH, NKV, hs);
    DONE("attention_backward");
    return rc;
}
static int attention_decode(float *out, const float *q, const float *kc, const float *vc, int n, int NH, int NKV,
                            int hs) {
    OP();
    int rc = K->attention_decode(out, q, kc, vc, n, NH, NKV, hs);
    DONE("attention_decode");
    return rc;
}
static void rmsnorm_forward(float *out, float *rstd, const float *x, const float *w, int N, int C, float eps) {
    OP();
    K->rmsnorm_forward(out, rstd, x, w, N, C, eps);
    DONE("rmsnorm_forward");
}
static void rmsnorm_backward(float *dx, float *dw, const float *dout, const float *x, const float *w,
                             const float *rstd, int N, int C) {
    OP();
    K->rmsnorm_backward(dx, dw, dout, x, w, rstd, N, C);
    DONE("rmsnorm_backward");
}
static void rope_forward(float *qkv, const float *cs, int B, int T, int pos0, int NH, int NKV, int hs) {
    OP();
    K->rope_forward(qkv, cs, B, T, pos0, NH, NKV, hs);
    DONE("rope_forward");
}
static void rope_backward(float *dqkv, const float *cs, int B, int T, int pos0, int NH, int NKV, int hs) {
    OP();
    K->rope_backward(dqkv, cs, B, T, pos0, NH, NKV, hs);
    DONE("rope_backward");
}
static void swiglu_forward(float *out, const float *gate, const float *up, int N, int H, int ld) {
    OP();
    K->swiglu_forward(out, gate, up, N, H, ld);
    DONE("swiglu_forward");
}
static void swiglu_backward(float *dgate, float *dup, const float *dout, const float *gate, const float *up, int N,
                            int H, int ld) {
    OP();
    K->swiglu_backward(dgate, dup, dout, gate, up, N, H, ld);
    DONE("swiglu_backward");
}
static void gelu_forward(float *out, const float *x, size_t n) {
    OP();
    K->gelu_forward(out, x, n);
    DONE("gelu_forward");
}
static void gelu_backward(float *dx, const float *x, const float *dout, size_t n) {
    OP();
    K->gelu_backward(dx, x, dout, n);
    DONE("gelu_backward");
}
static void copy(float *dst, const float *src, size_t n) {
    OP();
    K->copy(dst, src, n);
    DONE("copy");
}
static void add_inplace(float *dst, const float *src, size_t n) {
    OP();
    K->add_inplace(dst, src, n);
    DONE("add_inplace");
}
static int classifier(float *losses, float *dx, float *dwte, const float *x, const float *wte, const int32_t *targets,
                      int N, int C, int V, int Vp, float dscale) {
    OP();
    int rc = K->classifier(losses, dx, dwte, x, wte, targets, N, C, V, Vp, dscale);
    DONE(dx ? "lm_head and loss, forward and backward" : "lm_head and loss");
    return rc;
}
static void logits(float *out, const float *x, const float *wte, int N, int C, int Vp) {
    OP();
    K->logits(out, x, wte, N, C, Vp);
    DONE("logits");
}
static double sumsq(const float *g, size_t n) {
    OP();
    double s = K->sumsq(g, n);
    DONE("grad_sumsq");
    return s;
}
static void adamw(float *p, const float *g, float gscale, float *m, float *v, size_t n, float lr, float beta1,
                  float beta2, float eps, float weight_decay, int t) {
    OP();
    K->adamw(p, g, gscale, m, v, n, lr, beta1, beta2, eps, weight_decay, t);
    DONE("adamw");
}

const anvil_kernels *anvil_profiled_kernels(const anvil_kernels *k, const anvil_model_config *model) {
    K = k;
    model_cfg = *model;
    M = anvil_model_config_check(&model_cfg) == 0 ? &model_cfg : NULL;
    /* Entries not traced here (memory; the snapshot's download_crc32c, which runs on every
     * OpenMP thread, where a span each would say little; any added later) call k's directly. */
    P = *k;
    P.zero = zero;
    P.upload = upload;
    P.download = download;
    P.encoder_forward = encoder_forward;
    P.encoder_backward = encoder_backward;
    P.layernorm_forward = layernorm_forward;
    P.layernorm_backward = layernorm_backward;
    P.matmul_forward = matmul_forward;
    P.matmul_backward = matmul_backward;
    P.attention_forward = attention_forward;
    P.attention_backward = attention_backward;
    P.attention_decode = attention_decode;
    P.rmsnorm_forward = rmsnorm_forward;
    P.rmsnorm_backward = rmsnorm_backward;
    P.rope_forward = rope_forward;
    P.rope_backward = rope_backward;
    P.swiglu_forward = swiglu_forward;
    P.swiglu_backward = swiglu_backward;
    P.gelu_forward = gelu_forward;
    P.gelu_backward = gelu_backward;
    P.copy = copy;
    P.add_inplace = add_inplace;
    P.classifier = classifier;
    P.logits = logits;
    P.sumsq = sumsq;
    P.adamw = adamw;
    return &P;
}
