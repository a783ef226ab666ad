/* Llama's decoder block, forward and backward, for the whole model and for a
 * tensor-parallel shard (with or without sequence parallelism) alike. */
#include <stddef.h>

#include "model/llama/llama.h"

/* Copies the rows of the three (or two) tensors of a product into one matrix, or back. */
static void pack(const anvil_kernels *k, float *dst, float *const *src, const size_t *n, int parts) {
    for (int i = 0; i < parts; i++) {
        k->copy(dst, src[i], n[i]);
        dst += n[i];
    }
}

static void unpack(const anvil_kernels *k, float *const *dst, const float *src, const size_t *n, int parts) {
    for (int i = 0; i < parts; i++) {
        k->copy(dst[i], src, n[i]);
        src += n[i];
    }
}

/* The group of tensors behind q/k/v (qkv 1) or gate/up (qkv 0) in view v, and their sizes. */
static int group(const llama_block_shape *s, const anvil_model_view *v, int qkv, float **t, size_t *n) {
    size_t C = (size_t)s->C, q = (size_t)s->NHs * s->hs * C, kv = (size_t)s->NKVs * s->hs * C;
    size_t h = (size_t)s->Hs * C;
    if (qkv) {
        t[0] = v->t[LLAMA_WQ], t[1] = v->t[LLAMA_WK], t[2] = v->t[LLAMA_WV];
        n[0] = q, n[1] = kv, n[2] = kv;
        return 3;
    }
    t[0] = v->t[LLAMA_WGATE], t[1] = v->t[LLAMA_WUP];
    n[0] = h, n[1] = h;
    return 2;
}

/* The weight gradient of a grouped product: out-of-place at dw, accumulated by matmul_backward onto the
 * tensors' current gradients, which are copied in first and back after, so the sums are as if the
 * product wrote them in place. dx = dout @ w as ever. */
static void grouped_backward(const anvil_kernels *k, const llama_block_shape *s, const anvil_model_view *g,
                             int qkv, float *dx, const float *dout, const float *x, const float *w, float *dw, int OC) {
    float *t[3];
    size_t n[3];
    int parts = group(s, g, qkv, t, n);
    pack(k, dw, t, n, parts);
    k->matmul_backward(dx, dw, NULL, dout, x, w, s->B * s->T, s->C, OC);
    unpack(k, t, dw, n, parts);
}

static void pack_weights(const anvil_kernels *k, const llama_block_shape *s, const anvil_model_view *w,
                         const llama_block_scratch *x) {
    float *t[3];
    size_t n[3];
    int parts = group(s, w, 1, t, n);
    pack(k, x->wqkv, t, n, parts);
    parts = group(s, w, 0, t, n);
    pack(k, x->wgu, t, n, parts);
}

/* q, k and v of the normed input, RoPE on q and k, and attention. */
static int attend(const anvil_kernels *k, const llama_block_shape *s, const llama_layer_acts *a,
                  const llama_block_scratch *x) {
    int N = s->B * s->T;
    k->matmul_forward(a->qkv, a->ln1, x->wqkv, NULL, N, s->C, llama_qkv_width(s), 0);
    k->rope_forward(a->qkv, s->rope, s->B, s->T, 0, s->NHs, s->NKVs, s->hs);
    return k->attention_forward(a->atty, a->lse, a->qkv, s->B, s->T, s->NHs, s->NKVs, s->hs);
}

/* [gate | up] of the normed input, and SwiGLU into x->sw. */
static void mlp_in(const anvil_kernels *k, const llama_block_shape *s, const llama_layer_acts *a,
                   const llama_block_scratch *x) {
    int N = s->B * s->T, H = s->Hs;
    k->matmul_forward(a->gu, a->ln2, x->wgu, NULL, N, s->C, 2 * H, 0);
    k->swiglu_forward(x->sw, a->gu, a->gu + H, N, H, 2 * H);
}

/* A projection into the residual stream, dst = res + in @ w: accumulated in place without a reduce
 * hook; with one, a partial product completed over the group (all-reduced, or under sequence
 * parallelism reduce-scattered to this rank's rows) and then added. */
static int project(const anvil_kernels *k, const llama_reduce *r, float *dst, const float *res, const float *in,
                   const float *w, int N, int IC, int C, float *partial, const char *what) {
    if (!r) {
        k->copy(dst, res, (size_t)N * C);
        k->matmul_forward(dst, in, w, NULL, N, IC, C, 1);
        return 0;
    }
    k->matmul_forward(partial, in, w, NULL, N, IC, C, 0);
    size_t n = (size_t)(r->sp ? r->rows : N) * C;
    if (r->sp ? r->comm->scatter(r->comm->ctx, partial, dst, n, what) : r->comm->reduce(r->comm->ctx, partial, n, what))
        return -1;
    if (!r->sp) k->copy(dst, partial, n);
    k->add_inplace(dst, res, n);
    return 0;
}

/* An RMSNorm of the stream into out [N,C]: under sequence parallelism over this rank's rows, gathered. */
static int norm(const anvil_kernels *k, const llama_block_shape *s, const llama_reduce *r, float *out, float *rstd,
                const float *res, const float *w, float *local, const char *what) {
    if (!(r && r->sp)) {
        k->rmsnorm_forward(out, rstd, res, w, s->B * s->T, s->C, s->eps);
        return 0;
    }
    k->rmsnorm_forward(local, rstd, res, w, r->rows, s->C, s->eps);
    return r->comm->gather(r->comm->ctx, local, out, (size_t)r->rows * s->C, what);
}

int llama_block_forward(const anvil_kernels *k, const llama_block_shape *s, const anvil_model_view *w,
                        const llama_layer_acts *a, const llama_block_scratch *x, const llama_reduce *r) {
    int N = s->B * s->T, C = s->C;
    pack_weights(k, s, w, x);
    if (norm(k, s, r, a->ln1, a->ln1_rstd, a->res, w->t[LLAMA_ATTN_NORM], x->partial, "attention norm gather") ||
        attend(k, s, a, x) ||
        project(k, r, a->res2, a->res, a->atty, w->t[LLAMA_WO], N, s->NHs * s->hs, C, x->partial, "attention output"))
        return -1;
    if (norm(k, s, r, a->ln2, a->ln2_rstd, a->res2, w->t[LLAMA_MLP_NORM], x->partial, "mlp norm gather")) return -1;
    mlp_in(k, s, a, x);
    return project(k, r, a->out, a->res2, x->sw, w->t[LLAMA_WDOWN], N, s->Hs, C, x->partial, "mlp output");
}

/* The gradient of a row-parallel product's output, whole: dres itself, or under sequence parallelism
 * every rank's rows of it gathered into partial. */
static const float *stream_grad(const llama_reduce *r, const llama_block_shape *s, float *dres, float *partial,
                                const char *what) {
    if (!(r && r->sp)) return dres;
    return r->comm->gather(r->comm->ctx, dres, partial, (size_t)r->rows * s->C, what) ? NULL : partial;
}

/* The norm's backward from the gradient of its output x->dln, a partial sum over the group with a reduce
 * hook (all-reduced, or reduce-scattered to this rank's rows), into dres (+=) and the norm's weight. */
static int norm_backward(const anvil_kernels *k, const llama_block_shape *s, const llama_reduce *r, float *dres,
                         float *dw, const float *res, const float *w, const float *rstd, const llama_block_scratch *x,
                         const char *what) {
    int rows = r && r->sp ? r->rows : s->B * s->T;
    const float *dout = x->dln;
    if (r && r->sp) {
        if (r->comm->scatter(r->comm->ctx, x->dln, x->partial, (size_t)rows * s->C, what)) return -1;
        dout = x->partial;
    } else if (r && r->comm->reduce(r->comm->ctx, x->dln, (size_t)rows * s->C, what)) {
        return -1;
    }
    k->rmsnorm_backward(dres, dw, dout, res, w, rstd, rows, s->C);
    return 0;
}

int llama_block_backward(const anvil_kernels *k, const llama_block_shape *s, const anvil_model_view *w,
                         const anvil_model_view *g, const llama_layer_acts *a, float *dres,
                         const llama_block_scratch *x, const llama_reduce *r) {
    int N = s->B * s->T, H = s->Hs, Q = llama_qkv_width(s);
    pack_weights(k, s, w, x);
    /* The MLP: SwiGLU's output recomputed for down's weight gradient. */
    k->swiglu_forward(x->sw, a->gu, a->gu + H, N, H, 2 * H);
    const float *d = stream_grad(r, s, dres, x->partial, "mlp backward gather");
    if (!d) return -1;
    k->matmul_backward(x->dsw, g->t[LLAMA_WDOWN], NULL, d, x->sw, w->t[LLAMA_WDOWN], N, H, s->C);
    k->swiglu_backward(x->dgu, x->dgu + H, x->dsw, a->gu, a->gu + H, N, H, 2 * H);
    grouped_backward(k, s, g, 0, x->dln, x->dgu, a->ln2, x->wgu, x->dw, 2 * H);
    if (norm_backward(k, s, r, dres, g->t[LLAMA_MLP_NORM], a->res2, w->t[LLAMA_MLP_NORM], a->ln2_rstd, x,
                      "mlp backward"))
        return -1;
    /* Attention: its gradient with respect to the rotated q and k, turned back by the inverse rotation. */
    if (!(d = stream_grad(r, s, dres, x->partial, "attention backward gather"))) return -1;
    k->matmul_backward(x->datty, g->t[LLAMA_WO], NULL, d, a->atty, w->t[LLAMA_WO], N, s->NHs * s->hs, s->C);
    if (k->attention_backward(x->dqkv, x->datty, a->atty, a->lse, a->qkv, s->B, s->T, s->NHs, s->NKVs, s->hs))
        return -1;
    k->rope_backward(x->dqkv, s->rope, s->B, s->T, 0, s->NHs, s->NKVs, s->hs);
    grouped_backward(k, s, g, 1, x->dln, x->dqkv, a->ln1, x->wqkv, x->dw, Q);
    return norm_backward(k, s, r, dres, g->t[LLAMA_ATTN_NORM], a->res, w->t[LLAMA_ATTN_NORM], a->ln1_rstd, x,
                         "attention backward");
}
