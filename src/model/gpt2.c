#include "model/gpt2.h"

#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/rng.h"
#include "obs/trace.h"

const char *const anvil_gpt2_param_names[ANVIL_GPT2_NPARAM] = {
    "wte", "wpe", "ln1w", "ln1b", "qkvw", "qkvb", "attprojw", "attprojb",
    "ln2w", "ln2b", "fcw", "fcb", "fcprojw", "fcprojb", "lnfw", "lnfb",
};

static const struct {
    const char *name;
    int n_layer, n_head, n_embd, block_size, vocab_size;
} presets[] = {
    {"gpt2", 12, 12, 768, 1024, 50257},
    {"gpt2-medium", 24, 16, 1024, 1024, 50257},
    {"gpt2-large", 36, 20, 1280, 1024, 50257},
    {"gpt2-xl", 48, 25, 1600, 1024, 50257},
    {"tiny", 2, 4, 64, 64, 257},
    {"mini", 4, 4, 128, 128, 257},
    {"small", 6, 6, 384, 256, 50257},
};

int anvil_gpt2_preset(const char *name, anvil_gpt2_config *cfg) {
    for (size_t i = 0; i < sizeof presets / sizeof presets[0]; i++)
        if (!strcmp(name, presets[i].name)) {
            memset(cfg, 0, sizeof *cfg);
            cfg->n_layer = presets[i].n_layer;
            cfg->n_head = presets[i].n_head;
            cfg->n_embd = presets[i].n_embd;
            cfg->block_size = presets[i].block_size;
            cfg->vocab_size = presets[i].vocab_size;
            return 0;
        }
    return anvil_fail("model: unknown preset '%s' (gpt2, gpt2-medium, gpt2-large, gpt2-xl, tiny, mini, small)",
                      name);
}

int anvil_gpt2_config_check(anvil_gpt2_config *c) {
    if (c->n_layer < 1 || c->n_layer > 1000) return anvil_fail("model: n_layer must be in 1..1000, got %d", c->n_layer);
    if (c->n_head < 1) return anvil_fail("model: n_head must be positive, got %d", c->n_head);
    if (c->n_embd < 1 || c->n_embd > 16384) return anvil_fail("model: n_embd must be in 1..16384, got %d", c->n_embd);
    if (c->n_embd % c->n_head)
        return anvil_fail("model: n_embd (%d) is not divisible by n_head (%d)", c->n_embd, c->n_head);
    if (c->block_size < 1 || c->block_size > 1 << 20)
        return anvil_fail("model: block_size must be in 1..1048576, got %d", c->block_size);
    if (c->vocab_size < 2 || c->vocab_size > 1 << 24)
        return anvil_fail("model: vocab_size must be in 2..16777216, got %d", c->vocab_size);
    c->padded_vocab = (c->vocab_size + 63) / 64 * 64;
    return 0;
}

int anvil_gpt2_param_shape(const anvil_gpt2_config *c, int i, int64_t s[3]) {
    int64_t L = c->n_layer, C = c->n_embd;
    s[0] = s[1] = s[2] = 0;
    switch (i) {
    case ANVIL_GPT2_WTE: s[0] = c->padded_vocab; s[1] = C; return 2;
    case ANVIL_GPT2_WPE: s[0] = c->block_size; s[1] = C; return 2;
    case ANVIL_GPT2_LN1W:
    case ANVIL_GPT2_LN1B:
    case ANVIL_GPT2_ATTPROJB:
    case ANVIL_GPT2_LN2W:
    case ANVIL_GPT2_LN2B:
    case ANVIL_GPT2_FCPROJB:
        s[0] = L; s[1] = C; return 2;
    case ANVIL_GPT2_QKVW: s[0] = L; s[1] = 3 * C; s[2] = C; return 3;
    case ANVIL_GPT2_QKVB: s[0] = L; s[1] = 3 * C; return 2;
    case ANVIL_GPT2_ATTPROJW: s[0] = L; s[1] = C; s[2] = C; return 3;
    case ANVIL_GPT2_FCW: s[0] = L; s[1] = 4 * C; s[2] = C; return 3;
    case ANVIL_GPT2_FCB: s[0] = L; s[1] = 4 * C; return 2;
    case ANVIL_GPT2_FCPROJW: s[0] = L; s[1] = C; s[2] = 4 * C; return 3;
    default: s[0] = C; return 1; /* lnfw, lnfb */
    }
}

int anvil_gpt2_param_decays(int i) {
    return i == ANVIL_GPT2_WTE || i == ANVIL_GPT2_WPE || i == ANVIL_GPT2_QKVW || i == ANVIL_GPT2_ATTPROJW ||
           i == ANVIL_GPT2_FCW || i == ANVIL_GPT2_FCPROJW;
}

static size_t shape_numel(const int64_t s[3], int nd) {
    size_t n = 1;
    for (int d = 0; d < nd; d++) n *= (size_t)s[d];
    return n;
}

size_t anvil_gpt2_param_numel(const anvil_gpt2_config *c, int i) {
    int64_t s[3];
    return shape_numel(s, anvil_gpt2_param_shape(c, i, s));
}

size_t anvil_gpt2_num_params(const anvil_gpt2_config *c) {
    size_t n = 0;
    for (int i = 0; i < ANVIL_GPT2_NPARAM; i++) {
        int64_t s[3];
        int nd = anvil_gpt2_param_shape(c, i, s);
        n += shape_numel(s, nd);
    }
    return n;
}

size_t anvil_gpt2_flop_params(const anvil_gpt2_config *c) {
    size_t C = (size_t)c->n_embd;
    return anvil_gpt2_num_params(c) - (size_t)c->block_size * C - (size_t)(c->padded_vocab - c->vocab_size) * C;
}

double anvil_gpt2_flops_per_token(const anvil_gpt2_config *c, int T) {
    return 6.0 * (double)anvil_gpt2_flop_params(c) + 12.0 * c->n_layer * (double)c->n_embd * T;
}

/* Saved activations of a forward pass, per layer stacked, and the scratch
 * of the backward pass (shared by all layers). The GELU output is not kept:
 * the backward recomputes it from the pre-activation, which saves 4*B*T*C
 * floats per layer for one cheap elementwise pass. */
struct gpt2_acts {
    float *resid;                      /* (L+1) x [N,C]: input of layer l, and the final residual */
    float *ln1, *ln1_mean, *ln1_rstd;  /* L x [N,C], L x [N] */
    float *qkv;                        /* L x [N,3C] */
    float *atty, *lse;                 /* L x [N,C], L x [B,NH,T] */
    float *resid2;                     /* L x [N,C]: after attention */
    float *ln2, *ln2_mean, *ln2_rstd;
    float *fch;                        /* L x [N,4C]: MLP pre-activation */
    float *lnf, *lnf_mean, *lnf_rstd;  /* [N,C], [N] */
    float *losses;                     /* [N] */
    float *gelu, *dfch;                /* [N,4C] scratch */
    float *dres, *dln, *datty, *dqkv;  /* backward scratch */
    int32_t *inputs, *targets;         /* backend copies of the batch */
    float **all[24];                   /* every pointer above that owns memory, to free */
    int nall;
};

float *anvil_gpt2_param(const anvil_gpt2 *m, int i, float *base) { return base + m->offsets[i]; }

int anvil_gpt2_init_layout(anvil_gpt2 *m, const anvil_gpt2_config *cfg, const anvil_kernels *k) {
    memset(m, 0, sizeof *m);
    m->cfg = *cfg;
    if (anvil_gpt2_config_check(&m->cfg)) return -1;
    m->k = k;
    size_t off = 0;
    for (int i = 0; i < ANVIL_GPT2_NPARAM; i++) {
        int64_t s[3];
        int nd = anvil_gpt2_param_shape(&m->cfg, i, s);
        m->offsets[i] = off;
        off += shape_numel(s, nd);
    }
    m->offsets[ANVIL_GPT2_NPARAM] = off;
    m->nparams = off;
    return 0;
}

int anvil_gpt2_init(anvil_gpt2 *m, const anvil_gpt2_config *cfg, const anvil_kernels *k) {
    if (anvil_gpt2_init_layout(m, cfg, k)) return -1;
    m->params = k->alloc(m->nparams * sizeof(float));
    if (!m->params) return anvil_fail("model: cannot allocate %zu parameters", m->nparams);
    return 0;
}

static void acts_free(anvil_gpt2 *m) {
    struct gpt2_acts *a = m->acts;
    if (!a) return;
    for (int i = 0; i < a->nall; i++) m->k->free(*a->all[i]);
    m->k->free(a->inputs);
    m->k->free(a->targets);
    free(a);
    m->acts = NULL;
    m->B = m->T = 0;
}

void anvil_gpt2_free(anvil_gpt2 *m) {
    acts_free(m);
    if (m->k) {
        m->k->free(m->params);
        m->k->free(m->grads);
    }
    memset(m, 0, sizeof *m);
}

anvil_gpt2 anvil_gpt2_with_params(const anvil_gpt2 *m, float *params) {
    anvil_gpt2 w = *m;
    w.hooks = NULL;
    w.params = params;
    w.grads = NULL;
    w.B = w.T = 0;
    w.acts = NULL;
    return w;
}

static int acts_ensure(anvil_gpt2 *m, int B, int T) {
    if (m->acts && m->B == B && m->T == T) return 0;
    acts_free(m);
    struct gpt2_acts *a = calloc(1, sizeof *a);
    if (!a) return anvil_fail("model: out of memory for activations");
    m->acts = a;
    size_t L = (size_t)m->cfg.n_layer, C = (size_t)m->cfg.n_embd, N = (size_t)B * T, NH = (size_t)m->cfg.n_head;
    struct {
        float **p;
        size_t n;
    } plan[] = {
        {&a->resid, (L + 1) * N * C}, {&a->ln1, L * N * C}, {&a->ln1_mean, L * N}, {&a->ln1_rstd, L * N},
        {&a->qkv, L * N * 3 * C},     {&a->atty, L * N * C}, {&a->lse, L * NH * N},  {&a->resid2, L * N * C},
        {&a->ln2, L * N * C},         {&a->ln2_mean, L * N}, {&a->ln2_rstd, L * N},  {&a->fch, L * N * 4 * C},
        {&a->lnf, N * C},             {&a->lnf_mean, N},     {&a->lnf_rstd, N},      {&a->losses, N},
        {&a->gelu, N * 4 * C},        {&a->dfch, N * 4 * C}, {&a->dres, N * C},      {&a->dln, N * C},
        {&a->datty, N * C},           {&a->dqkv, N * 3 * C},
    };
    for (size_t i = 0; i < sizeof plan / sizeof plan[0]; i++) {
        *plan[i].p = m->k->alloc(plan[i].n * sizeof(float));
        a->all[a->nall++] = plan[i].p;
        if (!*plan[i].p) {
            acts_free(m);
            return anvil_fail("model: cannot allocate activations for B=%d T=%d", B, T);
        }
    }
    a->inputs = m->k->alloc(N * sizeof(int32_t));
    a->targets = m->k->alloc(N * sizeof(int32_t));
    if (!a->inputs || !a->targets) {
        acts_free(m);
        return anvil_fail("model: cannot allocate the token buffers");
    }
    m->B = B;
    m->T = T;
    return 0;
}

/* The elements of tensor i that the initialization draws from the RNG, one normal each: a matrix's
 * or an embedding's real ones (wte's padding rows stay zero). */
static size_t drawn(const anvil_gpt2_config *c, int i) {
    if (!anvil_gpt2_param_decays(i)) return 0;
    if (i == ANVIL_GPT2_WTE) return (size_t)c->vocab_size * (size_t)c->n_embd;
    return anvil_gpt2_param_numel(c, i);
}

void anvil_gpt2_init_stream_start(anvil_gpt2_init_stream *s, const anvil_gpt2_config *cfg, uint64_t seed) {
    s->cfg = *cfg;
    anvil_rng_seed(&s->rng, seed);
    s->tensor = 0;
    s->pos = 0;
}

/* Moves the stream to element `to` of its tensor, drawing (and dropping) the normals in between:
 * each normal takes two draws whatever its value. */
static void stream_skip(anvil_gpt2_init_stream *s, size_t to) {
    size_t d = drawn(&s->cfg, s->tensor), a = s->pos < d ? s->pos : d, b = to < d ? to : d;
    for (size_t j = a; j < b; j++) {
        anvil_rng_u64(&s->rng);
        anvil_rng_u64(&s->rng);
    }
    s->pos = to;
}

int anvil_gpt2_init_stream_read(anvil_gpt2_init_stream *s, int i, size_t off, size_t n, float *dst) {
    const anvil_gpt2_config *c = &s->cfg;
    if (i < s->tensor || (i == s->tensor && off < s->pos))
        return anvil_fail("model: initialization read of %s at %zu after %s at %zu: reads go forward only",
                          anvil_gpt2_param_names[i], off, anvil_gpt2_param_names[s->tensor], s->pos);
    while (s->tensor < i) {
        stream_skip(s, anvil_gpt2_param_numel(c, s->tensor));
        s->tensor++;
        s->pos = 0;
    }
    stream_skip(s, off);
    size_t d = drawn(c, i);
    float std = (i == ANVIL_GPT2_ATTPROJW || i == ANVIL_GPT2_FCPROJW) ? 0.02f / sqrtf(2.0f * c->n_layer) : 0.02f;
    int unit = i == ANVIL_GPT2_LN1W || i == ANVIL_GPT2_LN2W || i == ANVIL_GPT2_LNFW;
    for (size_t j = 0; j < n; j++)
        dst[j] = unit ? 1.0f : off + j < d ? std * anvil_rng_normal(&s->rng) : 0.0f;
    s->pos = off + n;
    return 0;
}

void anvil_gpt2_init_weights(anvil_gpt2 *m, uint64_t seed) {
    anvil_gpt2_init_stream s;
    anvil_gpt2_init_stream_start(&s, &m->cfg, seed);
    /* One tensor at a time, so initializing never holds a second copy of the model. */
    size_t largest = 0;
    for (int i = 0; i < ANVIL_GPT2_NPARAM; i++)
        if (m->offsets[i + 1] - m->offsets[i] > largest) largest = m->offsets[i + 1] - m->offsets[i];
    float *host = malloc(largest * sizeof(float));
    for (int i = 0; i < ANVIL_GPT2_NPARAM; i++) {
        size_t n = m->offsets[i + 1] - m->offsets[i];
        anvil_gpt2_init_stream_read(&s, i, 0, n, host);
        m->k->upload(m->params + m->offsets[i], host, n * sizeof(float));
    }
    free(host);
}

void anvil_gpt2_zero_grad(anvil_gpt2 *m) {
    if (!m->grads) m->grads = m->k->alloc(m->nparams * sizeof(float));
    else m->k->zero(m->grads, m->nparams * sizeof(float));
}

int anvil_gpt2_num_units(const anvil_gpt2_config *c) { return c->n_layer + 1; }

static const int head_tensors[] = {ANVIL_GPT2_WTE, ANVIL_GPT2_WPE, ANVIL_GPT2_LNFW, ANVIL_GPT2_LNFB};

int anvil_gpt2_unit_ranges(const anvil_gpt2 *m, int u, anvil_gpt2_range *r) {
    int n = 0;
    if (u == 0) {
        for (int j = 0; j < 4; j++) {
            int i = head_tensors[j];
            r[n++] = (anvil_gpt2_range){i, m->offsets[i], m->offsets[i + 1] - m->offsets[i]};
        }
        return n;
    }
    size_t L = (size_t)m->cfg.n_layer, l = (size_t)(u - 1);
    for (int i = ANVIL_GPT2_LN1W; i <= ANVIL_GPT2_FCPROJB; i++) {
        size_t per = (m->offsets[i + 1] - m->offsets[i]) / L;
        r[n++] = (anvil_gpt2_range){i, m->offsets[i] + l * per, per};
    }
    return n;
}

size_t anvil_gpt2_unit_size(const anvil_gpt2 *m, int u) {
    anvil_gpt2_range r[ANVIL_GPT2_NPARAM] = {{0}};
    int n = anvil_gpt2_unit_ranges(m, u, r);
    size_t s = 0;
    for (int i = 0; i < n; i++) s += r[i].len;
    return s;
}

void anvil_gpt2_view_flat(const anvil_gpt2 *m, int u, float *base, anvil_gpt2_view *v) {
    anvil_gpt2_range r[ANVIL_GPT2_NPARAM] = {{0}};
    int n = anvil_gpt2_unit_ranges(m, u, r);
    memset(v, 0, sizeof *v);
    for (int i = 0; i < n; i++) v->t[r[i].tensor] = base + r[i].offset;
}

void anvil_gpt2_view_packed(const anvil_gpt2 *m, int u, float *packed, anvil_gpt2_view *v) {
    anvil_gpt2_range r[ANVIL_GPT2_NPARAM] = {{0}};
    int n = anvil_gpt2_unit_ranges(m, u, r);
    memset(v, 0, sizeof *v);
    size_t off = 0;
    for (int i = 0; i < n; i++) {
        v->t[r[i].tensor] = packed + off;
        off += r[i].len;
    }
}

static int get_params(anvil_gpt2 *m, int u, anvil_gpt2_view *v) {
    if (m->hooks) return m->hooks->get_params(m->hooks->ctx, u, v);
    anvil_gpt2_view_flat(m, u, m->params, v);
    return 0;
}

static int put_params(anvil_gpt2 *m, int u) { return m->hooks ? m->hooks->put_params(m->hooks->ctx, u) : 0; }

static int get_grads(anvil_gpt2 *m, int u, anvil_gpt2_view *v) {
    if (m->hooks) return m->hooks->get_grads(m->hooks->ctx, u, v);
    anvil_gpt2_view_flat(m, u, m->grads, v);
    return 0;
}

static int put_grads(anvil_gpt2 *m, int u) { return m->hooks ? m->hooks->put_grads(m->hooks->ctx, u) : 0; }

/* A projection into the residual stream: dst = res + x @ w + b, accumulated in place without a
 * reduce hook, else from the partial product completed across the group. */
static int project(const anvil_kernels *k, const anvil_gpt2_reduce *r, float *dst, const float *res, const float *x,
                   const float *w, const float *b, int N, int IC, int C, float *partial, const char *what) {
    size_t NC = (size_t)N * C;
    if (!r) {
        k->copy(dst, res, NC);
        k->matmul_forward(dst, x, w, b, N, IC, C, 1);
        return 0;
    }
    k->matmul_forward(partial, x, w, b, N, IC, C, 0);
    if (r->reduce(r->ctx, partial, NC, what)) return -1;
    k->copy(dst, res, NC);
    k->add_inplace(dst, partial, NC);
    return 0;
}

/* Sequence parallelism: a LayerNorm over this rank's rows, its output gathered over the group into
 * out [N,C] for the column-parallel matrix that follows. */
static int sp_layernorm(const anvil_kernels *k, const anvil_gpt2_reduce *r, float *out, float *mean, float *rstd,
                        const float *res, const float *w, const float *b, int C, float *local, const char *what) {
    k->layernorm_forward(local, mean, rstd, res, w, b, r->rows, C);
    return r->gather(r->ctx, local, out, (size_t)r->rows * C, what);
}

/* Sequence parallelism: a row-parallel projection's partial product over every token, summed and
 * scattered to this rank's rows, added to their residual: dst = res + (x @ w + b). */
static int sp_project(const anvil_kernels *k, const anvil_gpt2_reduce *r, float *dst, const float *res, const float *x,
                      const float *w, const float *b, int N, int IC, int C, float *partial, const char *what) {
    size_t n = (size_t)r->rows * C;
    k->matmul_forward(partial, x, w, b, N, IC, C, 0);
    if (r->scatter(r->ctx, partial, dst, n, what)) return -1;
    k->add_inplace(dst, res, n);
    return 0;
}

static int sp_block_forward(const anvil_kernels *k, const anvil_gpt2_block_shape *s, const anvil_gpt2_view *w,
                            const anvil_gpt2_layer_acts *a, const anvil_gpt2_block_scratch *x,
                            const anvil_gpt2_reduce *r) {
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
static int sp_block_backward(const anvil_kernels *k, const anvil_gpt2_block_shape *s, const anvil_gpt2_view *w,
                             const anvil_gpt2_view *g, const anvil_gpt2_layer_acts *a, float *dres,
                             const anvil_gpt2_block_scratch *x, const anvil_gpt2_reduce *r) {
    int N = s->B * s->T, C = s->C, Cs = s->Cs, rows = r->rows;
    size_t n = (size_t)rows * C, N4 = (size_t)4 * N * Cs;
    k->gelu_forward(x->gelu, a->fch, N4);
    if (r->gather(r->ctx, dres, x->partial, n, "sp mlp backward gather")) return -1;
    k->matmul_backward(x->dfch, g->t[ANVIL_GPT2_FCPROJW], g->t[ANVIL_GPT2_FCPROJB], x->partial, x->gelu,
                       w->t[ANVIL_GPT2_FCPROJW], N, 4 * Cs, C);
    k->gelu_backward(x->dfch, a->fch, x->dfch, N4);
    k->matmul_backward(x->dln, g->t[ANVIL_GPT2_FCW], g->t[ANVIL_GPT2_FCB], x->dfch, a->ln2, w->t[ANVIL_GPT2_FCW], N, C,
                       4 * Cs);
    if (r->scatter(r->ctx, x->dln, x->partial, n, "sp mlp backward scatter")) return -1;
    k->layernorm_backward(dres, g->t[ANVIL_GPT2_LN2W], g->t[ANVIL_GPT2_LN2B], x->partial, a->res2,
                          w->t[ANVIL_GPT2_LN2W], a->ln2_mean, a->ln2_rstd, rows, C);
    if (r->gather(r->ctx, dres, x->partial, n, "sp attention backward gather")) return -1;
    k->matmul_backward(x->datty, g->t[ANVIL_GPT2_ATTPROJW], g->t[ANVIL_GPT2_ATTPROJB], x->partial, a->atty,
                       w->t[ANVIL_GPT2_ATTPROJW], N, Cs, C);
    if (k->attention_backward(x->dqkv, x->datty, a->atty, a->lse, a->qkv, s->B, s->T, s->NHs, s->NHs, Cs / s->NHs))
        return -1;
    k->matmul_backward(x->dln, g->t[ANVIL_GPT2_QKVW], g->t[ANVIL_GPT2_QKVB], x->dqkv, a->ln1, w->t[ANVIL_GPT2_QKVW], N,
                       C, 3 * Cs);
    if (r->scatter(r->ctx, x->dln, x->partial, n, "sp attention backward scatter")) return -1;
    k->layernorm_backward(dres, g->t[ANVIL_GPT2_LN1W], g->t[ANVIL_GPT2_LN1B], x->partial, a->res,
                          w->t[ANVIL_GPT2_LN1W], a->ln1_mean, a->ln1_rstd, rows, C);
    return 0;
}

int anvil_gpt2_block_forward(const anvil_kernels *k, const anvil_gpt2_block_shape *s, const anvil_gpt2_view *w,
                             const anvil_gpt2_layer_acts *a, const anvil_gpt2_block_scratch *x,
                             const anvil_gpt2_reduce *r) {
    int N = s->B * s->T, C = s->C, Cs = s->Cs;
    if (r && r->gather) return sp_block_forward(k, s, w, a, x, r);
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

int anvil_gpt2_block_backward(const anvil_kernels *k, const anvil_gpt2_block_shape *s, const anvil_gpt2_view *w,
                              const anvil_gpt2_view *g, const anvil_gpt2_layer_acts *a, float *dres,
                              const anvil_gpt2_block_scratch *x, const anvil_gpt2_reduce *r) {
    int N = s->B * s->T, C = s->C, Cs = s->Cs;
    size_t NC = (size_t)N * C, N4 = (size_t)4 * N * Cs;
    if (r && r->gather) return sp_block_backward(k, s, w, g, a, dres, x, r);
    k->gelu_forward(x->gelu, a->fch, N4);
    k->matmul_backward(x->dfch, g->t[ANVIL_GPT2_FCPROJW], g->t[ANVIL_GPT2_FCPROJB], dres, x->gelu,
                       w->t[ANVIL_GPT2_FCPROJW], N, 4 * Cs, C);
    k->gelu_backward(x->dfch, a->fch, x->dfch, N4);
    k->matmul_backward(x->dln, g->t[ANVIL_GPT2_FCW], g->t[ANVIL_GPT2_FCB], x->dfch, a->ln2, w->t[ANVIL_GPT2_FCW], N, C,
                       4 * Cs);
    if (r && r->reduce(r->ctx, x->dln, NC, "tp mlp backward")) return -1;
    k->layernorm_backward(dres, g->t[ANVIL_GPT2_LN2W], g->t[ANVIL_GPT2_LN2B], x->dln, a->res2, w->t[ANVIL_GPT2_LN2W],
                          a->ln2_mean, a->ln2_rstd, N, C);
    k->matmul_backward(x->datty, g->t[ANVIL_GPT2_ATTPROJW], g->t[ANVIL_GPT2_ATTPROJB], dres, a->atty,
                       w->t[ANVIL_GPT2_ATTPROJW], N, Cs, C);
    if (k->attention_backward(x->dqkv, x->datty, a->atty, a->lse, a->qkv, s->B, s->T, s->NHs, s->NHs, Cs / s->NHs))
        return -1;
    k->matmul_backward(x->dln, g->t[ANVIL_GPT2_QKVW], g->t[ANVIL_GPT2_QKVB], x->dqkv, a->ln1, w->t[ANVIL_GPT2_QKVW], N,
                       C, 3 * Cs);
    if (r && r->reduce(r->ctx, x->dln, NC, "tp attention backward")) return -1;
    k->layernorm_backward(dres, g->t[ANVIL_GPT2_LN1W], g->t[ANVIL_GPT2_LN1B], x->dln, a->res, w->t[ANVIL_GPT2_LN1W],
                          a->ln1_mean, a->ln1_rstd, N, C);
    return 0;
}

/* Layer l's activations within the stacked buffers. */
static anvil_gpt2_layer_acts layer_acts(const anvil_gpt2 *m, int l) {
    struct gpt2_acts *a = m->acts;
    size_t N = (size_t)m->B * m->T, NC = N * (size_t)m->cfg.n_embd, L = (size_t)l;
    return (anvil_gpt2_layer_acts){a->resid + L * NC,    a->ln1 + L * NC,     a->ln1_mean + L * N,
                                   a->ln1_rstd + L * N,  a->qkv + L * 3 * NC, a->atty + L * NC,
                                   a->lse + L * (size_t)m->cfg.n_head * N,    a->resid2 + L * NC,
                                   a->ln2 + L * NC,      a->ln2_mean + L * N, a->ln2_rstd + L * N,
                                   a->fch + L * 4 * NC,  a->resid + (L + 1) * NC};
}

/* The forward through the final LayerNorm. Leaves the head unit fetched in
 * *h for the LM head; the caller puts it back. */
static int forward_body(anvil_gpt2 *m, int B, int T, anvil_gpt2_view *h) {
    const anvil_kernels *k = m->k;
    struct gpt2_acts *a = m->acts;
    int L = m->cfg.n_layer, C = m->cfg.n_embd, N = B * T;
    size_t NC = (size_t)N * C;
    anvil_gpt2_block_shape shape = {B, T, C, C, m->cfg.n_head};
    anvil_gpt2_block_scratch x = {a->gelu, a->dfch, a->dln, a->datty, a->dqkv, NULL};
    if (get_params(m, 0, h)) return -1;
    k->encoder_forward(a->resid, a->inputs, h->t[ANVIL_GPT2_WTE], h->t[ANVIL_GPT2_WPE], B, T, C);
    for (int l = 0; l < L; l++) {
        anvil_gpt2_view w;
        anvil_gpt2_layer_acts la = layer_acts(m, l);
        double span = anvil_trace_layer_begin(l, "forward");
        if (get_params(m, 1 + l, &w) || anvil_gpt2_block_forward(k, &shape, &w, &la, &x, NULL) ||
            put_params(m, 1 + l))
            return -1;
        anvil_trace_layer_end(span);
    }
    k->layernorm_forward(a->lnf, a->lnf_mean, a->lnf_rstd, a->resid + (size_t)L * NC, h->t[ANVIL_GPT2_LNFW],
                         h->t[ANVIL_GPT2_LNFB], N, C);
    return 0;
}

int anvil_gpt2_batch_check(const anvil_gpt2_config *cfg, int B, int T) {
    if (B < 1 || T < 1 || T > cfg->block_size)
        return anvil_fail("model: batch shape B=%d T=%d is invalid (block_size %d)", B, T, cfg->block_size);
    int64_t widest = (int64_t)B * T * 4 * cfg->n_embd;
    if (widest > INT_MAX)
        return anvil_fail("model: batch B=%d x T=%d is too large: its MLP activation (B*T*4*%d = %lld values) "
                          "exceeds %d; use a smaller batch and --total-batch-tokens",
                          B, T, cfg->n_embd, (long long)widest, INT_MAX);
    return 0;
}

static int check_batch(anvil_gpt2 *m, const int32_t *inputs, const int32_t *targets, int B, int T) {
    if (anvil_gpt2_batch_check(&m->cfg, B, T)) return -1;
    for (size_t i = 0; i < (size_t)B * T; i++) {
        if (inputs[i] < 0 || inputs[i] >= m->cfg.vocab_size)
            return anvil_fail("model: input token %d at position %zu is outside the vocabulary (%d)", inputs[i], i,
                              m->cfg.vocab_size);
        if (targets && targets[i] >= m->cfg.vocab_size)
            return anvil_fail("model: target token %d at position %zu is outside the vocabulary (%d)", targets[i], i,
                              m->cfg.vocab_size);
    }
    if (acts_ensure(m, B, T)) return -1;
    m->k->upload(m->acts->inputs, inputs, (size_t)B * T * sizeof(int32_t));
    if (targets) m->k->upload(m->acts->targets, targets, (size_t)B * T * sizeof(int32_t));
    return 0;
}

static int count_targets(const int32_t *targets, size_t n) {
    int c = 0;
    for (size_t i = 0; i < n; i++) c += targets[i] >= 0;
    return c;
}

/* Mean of the per-position losses, summed in double in a fixed order. */
static float mean_loss(anvil_gpt2 *m, size_t n, int count) {
    float *host = malloc(n * sizeof(float));
    m->k->download(host, m->acts->losses, n * sizeof(float));
    double s = 0.0;
    for (size_t i = 0; i < n; i++) s += host[i];
    free(host);
    return count ? (float)(s / count) : 0.0f;
}

int anvil_gpt2_forward(anvil_gpt2 *m, const int32_t *inputs, const int32_t *targets, int B, int T, float *loss) {
    if (check_batch(m, inputs, targets, B, T)) return -1;
    anvil_gpt2_view h;
    if (forward_body(m, B, T, &h)) return -1;
    const anvil_gpt2_config *c = &m->cfg;
    int rc = 0;
    if (targets && loss)
        rc = m->k->classifier(m->acts->losses, NULL, NULL, m->acts->lnf, h.t[ANVIL_GPT2_WTE], m->acts->targets, B * T,
                              c->n_embd, c->vocab_size, c->padded_vocab, 0.0f);
    if (put_params(m, 0) || rc) return -1;
    if (targets && loss) *loss = mean_loss(m, (size_t)B * T, count_targets(targets, (size_t)B * T));
    return 0;
}

int anvil_gpt2_forward_backward(anvil_gpt2 *m, const int32_t *inputs, const int32_t *targets, int B, int T,
                                float grad_scale, float *loss) {
    if (!targets) return anvil_fail("model: training needs targets");
    if (check_batch(m, inputs, targets, B, T)) return -1;
    if (!m->hooks && !m->grads) {
        anvil_gpt2_zero_grad(m);
        if (!m->grads) return anvil_fail("model: cannot allocate gradients");
    }
    anvil_gpt2_view h, hg;
    if (forward_body(m, B, T, &h)) return -1;

    const anvil_kernels *k = m->k;
    struct gpt2_acts *a = m->acts;
    int L = m->cfg.n_layer, C = m->cfg.n_embd, N = B * T;
    size_t NC = (size_t)N * C;
    int count = count_targets(targets, (size_t)N);
    float dscale = count ? grad_scale / (float)count : 0.0f;

    /* The LM head and loss: dlnf lands in dln, and dwte accumulates. */
    if (get_grads(m, 0, &hg)) return -1;
    if (k->classifier(a->losses, a->dln, hg.t[ANVIL_GPT2_WTE], a->lnf, h.t[ANVIL_GPT2_WTE], a->targets, N, C,
                      m->cfg.vocab_size, m->cfg.padded_vocab, dscale))
        return -1;
    k->zero(a->dres, NC * sizeof(float));
    k->layernorm_backward(a->dres, hg.t[ANVIL_GPT2_LNFW], hg.t[ANVIL_GPT2_LNFB], a->dln, a->resid + (size_t)L * NC,
                          h.t[ANVIL_GPT2_LNFW], a->lnf_mean, a->lnf_rstd, N, C);

    /* dres carries d(loss)/d(residual stream) down through the layers. */
    anvil_gpt2_block_shape shape = {B, T, C, C, m->cfg.n_head};
    anvil_gpt2_block_scratch x = {a->gelu, a->dfch, a->dln, a->datty, a->dqkv, NULL};
    for (int l = L - 1; l >= 0; l--) {
        anvil_gpt2_view w, g;
        anvil_gpt2_layer_acts la = layer_acts(m, l);
        double span = anvil_trace_layer_begin(l, "backward");
        if (get_params(m, 1 + l, &w) || get_grads(m, 1 + l, &g) ||
            anvil_gpt2_block_backward(k, &shape, &w, &g, &la, a->dres, &x, NULL) || put_grads(m, 1 + l) ||
            put_params(m, 1 + l))
            return -1;
        anvil_trace_layer_end(span);
    }
    k->encoder_backward(hg.t[ANVIL_GPT2_WTE], hg.t[ANVIL_GPT2_WPE], a->dres, a->inputs, B, T, C);
    if (put_grads(m, 0) || put_params(m, 0)) return -1;
    *loss = mean_loss(m, (size_t)N, count);
    return 0;
}

int anvil_gpt2_logits(anvil_gpt2 *m, float *out) {
    if (!m->acts) return anvil_fail("model: logits requested before any forward pass");
    anvil_gpt2_view h;
    if (get_params(m, 0, &h)) return -1;
    m->k->logits(out, m->acts->lnf, h.t[ANVIL_GPT2_WTE], m->B * m->T, m->cfg.n_embd, m->cfg.padded_vocab);
    return put_params(m, 0);
}

struct anvil_gpt2_cache {
    const anvil_kernels *k;
    float *kc, *vc; /* [L, block_size, C] */
    float *x, *ln, *qkv, *att, *fc, *gelu, *mean, *rstd;
    int32_t *tok;
};

void anvil_gpt2_cache_free(anvil_gpt2_cache *c) {
    if (!c) return;
    void *owned[] = {c->kc, c->vc, c->x, c->ln, c->qkv, c->att, c->fc, c->gelu, c->mean, c->rstd, c->tok};
    for (size_t i = 0; i < sizeof owned / sizeof owned[0]; i++) c->k->free(owned[i]);
    free(c);
}

anvil_gpt2_cache *anvil_gpt2_cache_new(const anvil_gpt2 *m) {
    const anvil_kernels *k = m->k;
    size_t L = (size_t)m->cfg.n_layer, C = (size_t)m->cfg.n_embd, T = (size_t)m->cfg.block_size;
    anvil_gpt2_cache *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    c->k = k;
    c->kc = k->alloc(L * T * C * sizeof(float));
    c->vc = k->alloc(L * T * C * sizeof(float));
    c->x = k->alloc(C * sizeof(float));
    c->ln = k->alloc(C * sizeof(float));
    c->qkv = k->alloc(3 * C * sizeof(float));
    c->att = k->alloc(C * sizeof(float));
    c->fc = k->alloc(4 * C * sizeof(float));
    c->gelu = k->alloc(4 * C * sizeof(float));
    c->mean = k->alloc(sizeof(float));
    c->rstd = k->alloc(sizeof(float));
    c->tok = k->alloc(sizeof(int32_t));
    if (!c->kc || !c->vc || !c->x || !c->ln || !c->qkv || !c->att || !c->fc || !c->gelu || !c->mean || !c->rstd ||
        !c->tok) {
        anvil_gpt2_cache_free(c);
        anvil_fail("model: cannot allocate the decoding cache");
        return NULL;
    }
    return c;
}

/* Pointers to layer l's slice of a stacked parameter tensor. */
#define LP(base, i, l, per) (anvil_gpt2_param(m, (i), (base)) + (size_t)(l) * (size_t)(per))

int anvil_gpt2_decode(anvil_gpt2 *m, anvil_gpt2_cache *c, int32_t token, int pos, float *logits) {
    const anvil_kernels *k = m->k;
    int L = m->cfg.n_layer, C = m->cfg.n_embd, NH = m->cfg.n_head, T = m->cfg.block_size;
    if (pos < 0 || pos >= T) return anvil_fail("model: decode position %d is outside the context (%d)", pos, T);
    if (token < 0 || token >= m->cfg.vocab_size)
        return anvil_fail("model: token %d is outside the vocabulary (%d)", token, m->cfg.vocab_size);
    float *P = m->params;
    k->upload(c->tok, &token, sizeof token);
    k->encoder_forward(c->x, c->tok, anvil_gpt2_param(m, ANVIL_GPT2_WTE, P),
                       anvil_gpt2_param(m, ANVIL_GPT2_WPE, P) + (size_t)pos * C, 1, 1, C);
    for (int l = 0; l < L; l++) {
        float *kc = c->kc + (size_t)l * T * C, *vc = c->vc + (size_t)l * T * C;
        k->layernorm_forward(c->ln, c->mean, c->rstd, c->x, LP(P, ANVIL_GPT2_LN1W, l, C), LP(P, ANVIL_GPT2_LN1B, l, C),
                             1, C);
        k->matmul_forward(c->qkv, c->ln, LP(P, ANVIL_GPT2_QKVW, l, 3 * C * C), LP(P, ANVIL_GPT2_QKVB, l, 3 * C), 1, C,
                          3 * C, 0);
        k->copy(kc + (size_t)pos * C, c->qkv + C, C);
        k->copy(vc + (size_t)pos * C, c->qkv + 2 * C, C);
        if (k->attention_decode(c->att, c->qkv, kc, vc, pos + 1, NH, NH, C / NH)) return -1;
        k->matmul_forward(c->x, c->att, LP(P, ANVIL_GPT2_ATTPROJW, l, C * C), LP(P, ANVIL_GPT2_ATTPROJB, l, C), 1, C, C,
                          1);
        k->layernorm_forward(c->ln, c->mean, c->rstd, c->x, LP(P, ANVIL_GPT2_LN2W, l, C), LP(P, ANVIL_GPT2_LN2B, l, C),
                             1, C);
        k->matmul_forward(c->fc, c->ln, LP(P, ANVIL_GPT2_FCW, l, 4 * C * C), LP(P, ANVIL_GPT2_FCB, l, 4 * C), 1, C,
                          4 * C, 0);
        k->gelu_forward(c->gelu, c->fc, 4 * (size_t)C);
        k->matmul_forward(c->x, c->gelu, LP(P, ANVIL_GPT2_FCPROJW, l, 4 * C * C), LP(P, ANVIL_GPT2_FCPROJB, l, C), 1,
                          4 * C, C, 1);
    }
    k->layernorm_forward(c->ln, c->mean, c->rstd, c->x, anvil_gpt2_param(m, ANVIL_GPT2_LNFW, P),
                         anvil_gpt2_param(m, ANVIL_GPT2_LNFB, P), 1, C);
    k->logits(logits, c->ln, anvil_gpt2_param(m, ANVIL_GPT2_WTE, P), 1, C, m->cfg.padded_vocab);
    return 0;
}
