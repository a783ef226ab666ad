/* GPT-2's passes over a whole model: the forward (evaluation), the training
 * micro-step (forward, the fused LM head and cross-entropy, backward) and the
 * full logits, fetching parameters and handing back gradients unit by unit
 * through the model's hooks when it has them. */
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "model/gpt2/gpt2.h"
#include "obs/trace.h"

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

static struct gpt2_acts *gpt2_acts_of(const anvil_model *m) { return m->acts; }

void gpt2_acts_free(anvil_model *m) {
    struct gpt2_acts *a = gpt2_acts_of(m);
    if (!a) return;
    for (int i = 0; i < a->nall; i++) m->k->free(*a->all[i]);
    m->k->free(a->inputs);
    m->k->free(a->targets);
    free(a);
    m->acts = NULL;
    m->B = m->T = 0;
}

static int acts_ensure(anvil_model *m, int B, int T) {
    if (m->acts && m->B == B && m->T == T) return 0;
    gpt2_acts_free(m);
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
            gpt2_acts_free(m);
            return anvil_fail("model: cannot allocate activations for B=%d T=%d", B, T);
        }
    }
    a->inputs = m->k->alloc(N * sizeof(int32_t));
    a->targets = m->k->alloc(N * sizeof(int32_t));
    if (!a->inputs || !a->targets) {
        gpt2_acts_free(m);
        return anvil_fail("model: cannot allocate the token buffers");
    }
    m->B = B;
    m->T = T;
    return 0;
}

/* Layer l's activations within the stacked buffers. */
static gpt2_layer_acts layer_acts(const anvil_model *m, int l) {
    struct gpt2_acts *a = gpt2_acts_of(m);
    size_t N = (size_t)m->B * m->T, NC = N * (size_t)m->cfg.n_embd, L = (size_t)l;
    return (gpt2_layer_acts){a->resid + L * NC,   a->ln1 + L * NC,     a->ln1_mean + L * N,
                             a->ln1_rstd + L * N, a->qkv + L * 3 * NC, a->atty + L * NC,
                             a->lse + L * (size_t)m->cfg.n_head * N,   a->resid2 + L * NC,
                             a->ln2 + L * NC,     a->ln2_mean + L * N, a->ln2_rstd + L * N,
                             a->fch + L * 4 * NC, a->resid + (L + 1) * NC};
}

/* The forward through the final LayerNorm. Leaves the head unit fetched in
 * *h for the LM head; the caller puts it back. */
static int forward_body(anvil_model *m, int B, int T, anvil_model_view *h) {
    const anvil_kernels *k = m->k;
    struct gpt2_acts *a = gpt2_acts_of(m);
    int L = m->cfg.n_layer, C = m->cfg.n_embd, N = B * T;
    size_t NC = (size_t)N * C;
    gpt2_block_shape shape = {B, T, C, C, m->cfg.n_head};
    gpt2_block_scratch x = {a->gelu, a->dfch, a->dln, a->datty, a->dqkv, NULL};
    if (anvil_model_get_params(m, 0, h)) return -1;
    k->encoder_forward(a->resid, a->inputs, h->t[ANVIL_GPT2_WTE], h->t[ANVIL_GPT2_WPE], B, T, C);
    for (int l = 0; l < L; l++) {
        anvil_model_view w;
        gpt2_layer_acts la = layer_acts(m, l);
        double span = anvil_trace_layer_begin(l, "forward");
        if (anvil_model_get_params(m, 1 + l, &w) || gpt2_block_forward(k, &shape, &w, &la, &x, NULL) ||
            anvil_model_put_params(m, 1 + l))
            return -1;
        anvil_trace_layer_end(span);
    }
    k->layernorm_forward(a->lnf, a->lnf_mean, a->lnf_rstd, a->resid + (size_t)L * NC, h->t[ANVIL_GPT2_LNFW],
                         h->t[ANVIL_GPT2_LNFB], N, C);
    return 0;
}

static int check_batch(anvil_model *m, const int32_t *inputs, const int32_t *targets, int B, int T) {
    if (anvil_model_batch_check(&m->cfg, B, T) ||
        anvil_model_check_tokens(m, "model", inputs, targets, (size_t)B * T))
        return -1;
    if (acts_ensure(m, B, T)) return -1;
    m->k->upload(gpt2_acts_of(m)->inputs, inputs, (size_t)B * T * sizeof(int32_t));
    if (targets) m->k->upload(gpt2_acts_of(m)->targets, targets, (size_t)B * T * sizeof(int32_t));
    return 0;
}

int gpt2_forward(anvil_model *m, const int32_t *inputs, const int32_t *targets, int B, int T, float *loss) {
    if (check_batch(m, inputs, targets, B, T)) return -1;
    anvil_model_view h;
    if (forward_body(m, B, T, &h)) return -1;
    const anvil_model_config *c = &m->cfg;
    struct gpt2_acts *a = gpt2_acts_of(m);
    int rc = 0;
    if (targets && loss)
        rc = m->k->classifier(a->losses, NULL, NULL, a->lnf, h.t[ANVIL_GPT2_WTE], a->targets, B * T, c->n_embd,
                              c->vocab_size, c->padded_vocab, 0.0f);
    if (anvil_model_put_params(m, 0) || rc) return -1;
    if (targets && loss)
        *loss = anvil_model_mean_loss(m, a->losses, (size_t)B * T, anvil_model_count_targets(targets, (size_t)B * T));
    return 0;
}

int gpt2_forward_backward(anvil_model *m, const int32_t *inputs, const int32_t *targets, int B, int T,
                          float grad_scale, float *loss) {
    if (!targets) return anvil_fail("model: training needs targets");
    if (check_batch(m, inputs, targets, B, T)) return -1;
    if (!m->hooks && !m->grads) {
        anvil_model_zero_grad(m);
        if (!m->grads) return anvil_fail("model: cannot allocate gradients");
    }
    anvil_model_view h, hg;
    if (forward_body(m, B, T, &h)) return -1;

    const anvil_kernels *k = m->k;
    struct gpt2_acts *a = gpt2_acts_of(m);
    int L = m->cfg.n_layer, C = m->cfg.n_embd, N = B * T;
    size_t NC = (size_t)N * C;
    int count = anvil_model_count_targets(targets, (size_t)N);
    float dscale = count ? grad_scale / (float)count : 0.0f;

    /* The LM head and loss: dlnf lands in dln, and dwte accumulates. */
    if (anvil_model_get_grads(m, 0, &hg)) return -1;
    if (k->classifier(a->losses, a->dln, hg.t[ANVIL_GPT2_WTE], a->lnf, h.t[ANVIL_GPT2_WTE], a->targets, N, C,
                      m->cfg.vocab_size, m->cfg.padded_vocab, dscale))
        return -1;
    k->zero(a->dres, NC * sizeof(float));
    k->layernorm_backward(a->dres, hg.t[ANVIL_GPT2_LNFW], hg.t[ANVIL_GPT2_LNFB], a->dln, a->resid + (size_t)L * NC,
                          h.t[ANVIL_GPT2_LNFW], a->lnf_mean, a->lnf_rstd, N, C);

    /* dres carries d(loss)/d(residual stream) down through the layers. */
    gpt2_block_shape shape = {B, T, C, C, m->cfg.n_head};
    gpt2_block_scratch x = {a->gelu, a->dfch, a->dln, a->datty, a->dqkv, NULL};
    for (int l = L - 1; l >= 0; l--) {
        anvil_model_view w, g;
        gpt2_layer_acts la = layer_acts(m, l);
        double span = anvil_trace_layer_begin(l, "backward");
        if (anvil_model_get_params(m, 1 + l, &w) || anvil_model_get_grads(m, 1 + l, &g) ||
            gpt2_block_backward(k, &shape, &w, &g, &la, a->dres, &x, NULL) || anvil_model_put_grads(m, 1 + l) ||
            anvil_model_put_params(m, 1 + l))
            return -1;
        anvil_trace_layer_end(span);
    }
    k->encoder_backward(hg.t[ANVIL_GPT2_WTE], hg.t[ANVIL_GPT2_WPE], a->dres, a->inputs, B, T, C);
    if (anvil_model_put_grads(m, 0) || anvil_model_put_params(m, 0)) return -1;
    *loss = anvil_model_mean_loss(m, a->losses, (size_t)N, count);
    return 0;
}

int gpt2_logits(anvil_model *m, float *out) {
    if (!m->acts) return anvil_fail("model: logits requested before any forward pass");
    anvil_model_view h;
    if (anvil_model_get_params(m, 0, &h)) return -1;
    m->k->logits(out, gpt2_acts_of(m)->lnf, h.t[ANVIL_GPT2_WTE], m->B * m->T, m->cfg.n_embd, m->cfg.padded_vocab);
    return anvil_model_put_params(m, 0);
}
