/* GPT-2's transformer block, forward and backward, for the whole model and for
 * a tensor-parallel shard (with or without sequence parallelism) alike. */
#include <stddef.h>

#include "model/gpt2/gpt2.h"

/* A projection into the residual stream: dst = res + x @ w + b, accumulated in place without a
 * reduce hook, else from the partial product completed across the group. */
static int project(const anvil_kernels *k, const gpt2_reduce *r, float *dst, const float *res, const float *x,
                   const float *w, const float *b, int N, int IC, int C, float *partial, const char *what) {
    size_t NC = (size_t)N * C;
    if (!r) {
        k->copy(dst, res, NC);
        k->matmul_forward(dst, x, w, b, N, IC, C, 1);
        return 0;
    }
    k->matmul_forward(partial, x, w, b, N, IC, C, 0);
    if (r->comm->reduce(r->comm->ctx, partial, NC, what)) return -1;
    k->copy(dst, res, NC);
    k->add_inplace(dst, partial, NC);
    return 0;
}

/* Sequence parallelism: a LayerNorm over this rank's rows, its output gathered over the group into
 * out [N,C] for the column-parallel matrix that follows. */
static int sp_layernorm(const anvil_kernels *k, const gpt2_reduce *r, float *out, float *mean, float *rstd,
                        const float *res, const float *w, const float *b, int C, float *local, const char *what) {
    k->layernorm_forward(local, mean, rstd, res, w, b, r->rows, C);
    return r->comm->gather(r->comm->ctx, local, out, (size_t)r->rows * C, what);
}

/* Sequence parallelism: a row-parallel projection's partial product over every token, summed and
 * scattered to this rank's rows, added to their residual: dst = res + (x @ w + b). */
static int sp_project(const anvil_kernels *k, const gpt2_reduce *r, float *dst, const float *res, const float *x,
                      const float *w, const float *b, int N, int IC, int C, float *partial, const char *what) {
    size_t n = (size_t)r->rows * C;
    k->matmul_forward(partial, x, w, b, N, IC, C, 0);
    if (r->comm->scatter(r->comm->ctx, partial, dst, n, what)) return -1;
    k->add_inplace(dst, res, n);
    return 0;
}

static int sp_block_forward(const anvil_kernels *k, const gpt2_block_shape *s, const anvil_model_view *w,
                            const gpt2_layer_acts *a, const gpt2_block_scratch *x,
                            const gpt2_reduce *r) {
    int N = s->B * s->T, C = s->C, Cs = s->Cs;
    if (sp_layernorm(k, r, a->ln1, a->ln1_mean, a->ln1_rstd, a->res, w->t[ANVIL_GPT2_LN1W], w->t[ANVIL_GPT2_LN1B], C,
                     x->partial, "sp attention gather"))
        return -1;
    k->matmul_forward(a->qkv, a->ln1, w->t[ANVIL_GPT2_QKVW], w->t[ANVIL_GPT2_QKVB], N, C, 3 * Cs, 0);
    if (k->attention_forward(a->atty, a->lse, a->qkv, s->B, s->T, s->NHs, s->NHs, Cs / s->NHs)) return -1;
    if (sp_project(k, r, a->res2, a->res, a->atty, w->t[ANVIL_GPT2_ATTPROJW], w->t[ANVIL_GPT2_ATTPROJB], N, Cs, C,
                   x->partial, "sp attention scatter"))
        return -1;
    if (sp_layernorm(k, r, a->ln2, a->ln2_mean, a->ln2_rstd, a->res2, w->t[ANVIL_GPT2_LN2W], w->t[ANVIL_GPT2_LN2B], C,
                     x->partial, "sp mlp gather"))
        return -1;
    k->matmul_forward(a->fch, a->ln2, w->t[ANVIL_GPT2_FCW], w->t[ANVIL_GPT2_FCB], N, C, 4 * Cs, 0);
    k->gelu_forward(x->gelu, a->fch, (size_t)4 * N * Cs);
    return sp_project(k, r, a->out, a->res2, x->gelu, w->t[ANVIL_GPT2_FCPROJW], w->t[ANVIL_GPT2_FCPROJB], N, 4 * Cs,
                      C, x->partial, "sp mlp scatter");
}

/* Its backward: dres [rows,C] is gathered before each row-parallel matrix's backward (which needs
 * every token's gradient), and the gradient of each LayerNorm output, a partial sum over the group,
 * is scattered back to this rank's rows: the duals of the forward's collectives. */
static int sp_block_backward(const anvil_kernels *k, const gpt2_block_shape *s, const anvil_model_view *w,
                             const anvil_model_view *g, const gpt2_layer_acts *a, float *dres,
                             const gpt2_block_scratch *x, const gpt2_reduce *r) {
    int N = s->B * s->T, C = s->C, Cs = s->Cs, rows = r->rows;
    size_t n = (size_t)rows * C, N4 = (size_t)4 * N * Cs;
    k->gelu_forward(x->gelu, a->fch, N4);
    if (r->comm->gather(r->comm->ctx, dres, x->partial, n, "sp mlp backward gather")) return -1;
    k->matmul_backward(x->dfch, g->t[ANVIL_GPT2_FCPROJW], g->t[ANVIL_GPT2_FCPROJB], x->partial, x->gelu,
                       w->t[ANVIL_GPT2_FCPROJW], N, 4 * Cs, C);
    k->gelu_backward(x->dfch, a->fch, x->dfch, N4);
    k->matmul_backward(x->dln, g->t[ANVIL_GPT2_FCW], g->t[ANVIL_GPT2_FCB], x->dfch, a->ln2, w->t[ANVIL_GPT2_FCW], N, C,
                       4 * Cs);
    if (r->comm->scatter(r->comm->ctx, x->dln, x->partial, n, "sp mlp backward scatter")) return -1;
    k->layernorm_backward(dres, g->t[ANVIL_GPT2_LN2W], g->t[ANVIL_GPT2_LN2B], x->partial, a->res2,
                          w->t[ANVIL_GPT2_LN2W], a->ln2_mean, a->ln2_rstd, rows, C);
    if (r->comm->gather(r->comm->ctx, dres, x->partial, n, "sp attention backward gather")) return -1;
    k->matmul_backward(x->datty, g->t[ANVIL_GPT2_ATTPROJW], g->t[ANVIL_GPT2_ATTPROJB], x->partial, a->atty,
                       w->t[ANVIL_GPT2_ATTPROJW], N, Cs, C);
    if (k->attention_backward(x->dqkv, x->datty, a->atty, a->lse, a->qkv, s->B, s->T, s->NHs, s->NHs, Cs / s->NHs))
        return -1;
    k->matmul_backward(x->dln, g->t[ANVIL_GPT2_QKVW], g->t[ANVIL_GPT2_QKVB], x->dqkv, a->ln1, w->t[ANVIL_GPT2_QKVW], N,
                       C, 3 * Cs);
    if (r->comm->scatter(r->comm->ctx, x->dln, x->partial, n, "sp attention backward scatter")) return -1;
    k->layernorm_backward(dres, g->t[ANVIL_GPT2_LN1W], g->t[ANVIL_GPT2_LN1B], x->partial, a->res,
                          w->t[ANVIL_GPT2_LN1W], a->ln1_mean, a->ln1_rstd, rows, C);
    return 0;
}

int gpt2_block_forward(const anvil_kernels *k, const gpt2_block_shape *s, const anvil_model_view *w,
                             const gpt2_layer_acts *a, const gpt2_block_scratch *x,
                             const gpt2_reduce *r) {
    int N = s->B * s->T, C = s->C, Cs = s->Cs;
    if (r && r->sp) return sp_block_forward(k, s, w, a, x, r);
    k->layernorm_forward(a->ln1, a->ln1_mean, a->ln1_rstd, a->res, w->t[ANVIL_GPT2_LN1W], w->t[ANVIL_GPT2_LN1B], N, C);
    k->matmul_forward(a->qkv, a->ln1, w->t[ANVIL_GPT2_QKVW], w->t[ANVIL_GPT2_QKVB], N, C, 3 * Cs, 0);
    if (k->attention_forward(a->atty, a->lse, a->qkv, s->B, s->T, s->NHs, s->NHs, Cs / s->NHs)) return -1;
    if (project(k, r, a->res2, a->res, a->atty, w->t[ANVIL_GPT2_ATTPROJW], w->t[ANVIL_GPT2_ATTPROJB], N, Cs, C,
                x->partial, "tp attention forward"))
        return -1;
    k->layernorm_forward(a->ln2, a->ln2_mean, a->ln2_rstd, a->res2, w->t[ANVIL_GPT2_LN2W], w->t[ANVIL_GPT2_LN2B], N,
                         C);
    k->matmul_forward(a->fch, a->ln2, w->t[ANVIL_GPT2_FCW], w->t[ANVIL_GPT2_FCB], N, C, 4 * Cs, 0);
    k->gelu_forward(x->gelu, a->fch, (size_t)4 * N * Cs);
    return project(k, r, a->out, a->res2, x->gelu, w->t[ANVIL_GPT2_FCPROJW], w->t[ANVIL_GPT2_FCPROJB], N, 4 * Cs, C,
                   x->partial, "tp mlp forward");
}

int gpt2_block_backward(const anvil_kernels *k, const gpt2_block_shape *s, const anvil_model_view *w,
                              const anvil_model_view *g, const gpt2_layer_acts *a, float *dres,
                              const gpt2_block_scratch *x, const gpt2_reduce *r) {
    int N = s->B * s->T, C = s->C, Cs = s->Cs;
    size_t NC = (size_t)N * C, N4 = (size_t)4 * N * Cs;
    if (r && r->sp) return sp_block_backward(k, s, w, g, a, dres, x, r);
    k->gelu_forward(x->gelu, a->fch, N4);
    k->matmul_backward(x->dfch, g->t[ANVIL_GPT2_FCPROJW], g->t[ANVIL_GPT2_FCPROJB], dres, x->gelu,
                       w->t[ANVIL_GPT2_FCPROJW], N, 4 * Cs, C);
    k->gelu_backward(x->dfch, a->fch, x->dfch, N4);
    k->matmul_backward(x->dln, g->t[ANVIL_GPT2_FCW], g->t[ANVIL_GPT2_FCB], x->dfch, a->ln2, w->t[ANVIL_GPT2_FCW], N, C,
                       4 * Cs);
    if (r && r->comm->reduce(r->comm->ctx, x->dln, NC, "tp mlp backward")) return -1;
    k->layernorm_backward(dres, g->t[ANVIL_GPT2_LN2W], g->t[ANVIL_GPT2_LN2B], x->dln, a->res2, w->t[ANVIL_GPT2_LN2W],
                          a->ln2_mean, a->ln2_rstd, N, C);
    k->matmul_backward(x->datty, g->t[ANVIL_GPT2_ATTPROJW], g->t[ANVIL_GPT2_ATTPROJB], dres, a->atty,
                       w->t[ANVIL_GPT2_ATTPROJW], N, Cs, C);
    if (k->attention_backward(x->dqkv, x->datty, a->atty, a->lse, a->qkv, s->B, s->T, s->NHs, s->NHs, Cs / s->NHs))
        return -1;
    k->matmul_backward(x->dln, g->t[ANVIL_GPT2_QKVW], g->t[ANVIL_GPT2_QKVB], x->dqkv, a->ln1, w->t[ANVIL_GPT2_QKVW], N,
                       C, 3 * Cs);
    if (r && r->comm->reduce(r->comm->ctx, x->dln, NC, "tp attention backward")) return -1;
    k->layernorm_backward(dres, g->t[ANVIL_GPT2_LN1W], g->t[ANVIL_GPT2_LN1B], x->dln, a->res, w->t[ANVIL_GPT2_LN1W],
                          a->ln1_mean, a->ln1_rstd, N, C);
    return 0;
}
