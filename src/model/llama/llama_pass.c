/* Llama's passes over a whole model: the forward (evaluation), the training
 * micro-step (forward, the fused LM head and cross-entropy, backward) and the
 * full logits, fetching parameters and handing back gradients unit by unit
 * through the model's hooks when it has them. */
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "model/llama/llama.h"
#include "obs/trace.h"

/* Saved activations of a forward pass, per layer stacked, the scratch of the blocks and of the
 * backward (shared by all layers), and RoPE's table for the batch's positions. */
struct llama_acts {
    float *resid;                /* (L+1) x [N,C]: input of layer l, and the final residual */
    float *ln1, *ln1_rstd;       /* L x [N,C], L x [N] */
    float *qkv;                  /* L x [N,(NH+2NKV)hs] */
    float *atty, *lse;           /* L x [N,C], L x [B,NH,T] */
    float *resid2;               /* L x [N,C]: after attention */
    float *ln2, *ln2_rstd;
    float *gu;                   /* L x [N,2H]: the MLP's [gate | up] */
    float *lnf, *lnf_rstd;       /* [N,C], [N] */
    float *losses;               /* [N] */
    float *dres, *rope;          /* [N,C]; [T,hs] */
    llama_block_scratch x;
    int32_t *inputs, *targets;   /* backend copies of the batch */
    void *owned[32];
    int nowned;
    size_t bytes;
};

static struct llama_acts *acts_of(const anvil_model *m) { return m->acts; }

void llama_acts_free(anvil_model *m) {
    struct llama_acts *a = acts_of(m);
    if (!a) return;
    for (int i = 0; i < a->nowned; i++) m->k->free(a->owned[i]);
    free(a);
    m->acts = NULL;
    m->B = m->T = 0;
}

static int acts_ensure(anvil_model *m, int B, int T) {
    if (m->acts && m->B == B && m->T == T) return 0;
    llama_acts_free(m);
    struct llama_acts *a = calloc(1, sizeof *a);
    if (!a) return anvil_fail("model: out of memory for activations");
    m->acts = a;
    const anvil_model_config *c = &m->cfg;
    size_t L = (size_t)c->n_layer, C = (size_t)c->n_embd, N = (size_t)B * T, NH = (size_t)c->n_head;
    size_t hs = (size_t)llama_hs(c), Q = ((size_t)c->n_head + 2 * (size_t)c->n_kv_head) * hs, H = (size_t)c->ffn_hidden;
    size_t f = sizeof(float), W = (Q > 2 * H ? Q : 2 * H) * C;
    llama_block_scratch *x = &a->x;
    anvil_buffer_plan plan[] = {
        {&a->resid, (L + 1) * N * C * f}, {&a->ln1, L * N * C * f},   {&a->ln1_rstd, L * N * f},
        {&a->qkv, L * N * Q * f},         {&a->atty, L * N * C * f},  {&a->lse, L * NH * N * f},
        {&a->resid2, L * N * C * f},      {&a->ln2, L * N * C * f},   {&a->ln2_rstd, L * N * f},
        {&a->gu, L * N * 2 * H * f},      {&a->lnf, N * C * f},       {&a->lnf_rstd, N * f},
        {&a->losses, N * f},              {&a->dres, N * C * f},      {&a->rope, (size_t)T * hs * f},
        {&x->wqkv, Q * C * f},            {&x->wgu, 2 * H * C * f},   {&x->dw, W * f},
        {&x->sw, N * H * f},              {&x->dsw, N * H * f},       {&x->dgu, N * 2 * H * f},
        {&x->dln, N * C * f},             {&x->datty, N * C * f},     {&x->dqkv, N * Q * f},
        {&a->inputs, N * sizeof(int32_t)}, {&a->targets, N * sizeof(int32_t)},
    };
    if (anvil_alloc_plan(m->k, plan, (int)(sizeof plan / sizeof plan[0]), a->owned, &a->nowned, &a->bytes)) {
        llama_acts_free(m);
        return anvil_fail("model: cannot allocate activations for B=%d T=%d", B, T);
    }
    if (llama_rope_upload(m->k, c, a->rope, T)) {
        llama_acts_free(m);
        return -1;
    }
    m->B = B;
    m->T = T;
    return 0;
}

size_t llama_whole_activation_bytes(const anvil_model *m) { return m->acts ? acts_of(m)->bytes : 0; }

/* Layer l's activations within the stacked buffers. */
static llama_layer_acts layer_acts(const anvil_model *m, int l) {
    struct llama_acts *a = acts_of(m);
    const anvil_model_config *c = &m->cfg;
    size_t N = (size_t)m->B * m->T, NC = N * (size_t)c->n_embd, L = (size_t)l, H = (size_t)c->ffn_hidden;
    size_t Q = ((size_t)c->n_head + 2 * (size_t)c->n_kv_head) * (size_t)llama_hs(c);
    return (llama_layer_acts){a->resid + L * NC,      a->ln1 + L * NC,        a->ln1_rstd + L * N,
                              a->qkv + L * N * Q,     a->atty + L * NC,       a->lse + L * (size_t)c->n_head * N,
                              a->resid2 + L * NC,     a->ln2 + L * NC,        a->ln2_rstd + L * N,
                              a->gu + L * N * 2 * H,  a->resid + (L + 1) * NC};
}

static llama_block_shape block_shape(const anvil_model *m) {
    const anvil_model_config *c = &m->cfg;
    return (llama_block_shape){m->B, m->T, c->n_embd, c->n_head, c->n_kv_head, llama_hs(c), c->ffn_hidden,
                               c->norm_eps, acts_of(m)->rope};
}

/* The forward through the final norm. Leaves the head unit fetched in *h for the LM head; the caller
 * puts it back. */
static int forward_body(anvil_model *m, anvil_model_view *h) {
    const anvil_kernels *k = m->k;
    struct llama_acts *a = acts_of(m);
    int L = m->cfg.n_layer, C = m->cfg.n_embd, N = m->B * m->T;
    llama_block_shape shape = block_shape(m);
    if (anvil_model_get_params(m, 0, h)) return -1;
    k->encoder_forward(a->resid, a->inputs, h->t[LLAMA_EMBED], NULL, m->B, m->T, C);
    for (int l = 0; l < L; l++) {
        anvil_model_view w;
        llama_layer_acts la = layer_acts(m, l);
        double span = anvil_trace_layer_begin(l, "forward");
        if (anvil_model_get_params(m, 1 + l, &w) || llama_block_forward(k, &shape, &w, &la, &a->x, NULL) ||
            anvil_model_put_params(m, 1 + l))
            return -1;
        anvil_trace_layer_end(span);
    }
    k->rmsnorm_forward(a->lnf, a->lnf_rstd, a->resid + (size_t)L * N * C, h->t[LLAMA_NORM], N, C, m->cfg.norm_eps);
    return 0;
}

static int check_batch(anvil_model *m, const int32_t *inputs, const int32_t *targets, int B, int T) {
    if (anvil_model_batch_check(&m->cfg, B, T) ||
        anvil_model_check_tokens(m, "model", inputs, targets, (size_t)B * T) || acts_ensure(m, B, T))
        return -1;
    m->k->upload(acts_of(m)->inputs, inputs, (size_t)B * T * sizeof(int32_t));
    if (targets) m->k->upload(acts_of(m)->targets, targets, (size_t)B * T * sizeof(int32_t));
    return 0;
}

int llama_forward(anvil_model *m, const int32_t *inputs, const int32_t *targets, int B, int T, float *loss) {
    if (check_batch(m, inputs, targets, B, T)) return -1;
    anvil_model_view h;
    if (forward_body(m, &h)) return -1;
    const anvil_model_config *c = &m->cfg;
    struct llama_acts *a = acts_of(m);
    int rc = 0;
    if (targets && loss)
        rc = m->k->classifier(a->losses, NULL, NULL, a->lnf, h.t[llama_head(c)], a->targets, B * T, c->n_embd,
                              c->vocab_size, c->padded_vocab, 0.0f);
    if (anvil_model_put_params(m, 0) || rc) return -1;
    if (targets && loss)
        *loss = anvil_model_mean_loss(m, a->losses, (size_t)B * T, anvil_model_count_targets(targets, (size_t)B * T));
    return 0;
}

int llama_forward_backward(anvil_model *m, const int32_t *inputs, const int32_t *targets, int B, int T,
                           float grad_scale, float *loss) {
    if (!targets) return anvil_fail("model: training needs targets");
    if (check_batch(m, inputs, targets, B, T)) return -1;
    if (!m->hooks && !m->grads) {
        anvil_model_zero_grad(m);
        if (!m->grads) return anvil_fail("model: cannot allocate gradients");
    }
    anvil_model_view h, hg;
    if (forward_body(m, &h)) return -1;
    const anvil_kernels *k = m->k;
    const anvil_model_config *c = &m->cfg;
    struct llama_acts *a = acts_of(m);
    int L = c->n_layer, C = c->n_embd, N = B * T, head = llama_head(c);
    size_t NC = (size_t)N * C;
    int count = anvil_model_count_targets(targets, (size_t)N);
    float dscale = count ? grad_scale / (float)count : 0.0f;

    /* The LM head and loss: the final norm's output gradient lands in dln, and the head's accumulates. */
    if (anvil_model_get_grads(m, 0, &hg)) return -1;
    if (k->classifier(a->losses, a->x.dln, hg.t[head], a->lnf, h.t[head], a->targets, N, C, c->vocab_size,
                      c->padded_vocab, dscale))
        return -1;
    k->zero(a->dres, NC * sizeof(float));
    k->rmsnorm_backward(a->dres, hg.t[LLAMA_NORM], a->x.dln, a->resid + (size_t)L * NC, h.t[LLAMA_NORM], a->lnf_rstd,
                        N, C);
    /* dres carries d(loss)/d(residual stream) down through the layers. */
    llama_block_shape shape = block_shape(m);
    for (int l = L - 1; l >= 0; l--) {
        anvil_model_view w, g;
        llama_layer_acts la = layer_acts(m, l);
        double span = anvil_trace_layer_begin(l, "backward");
        if (anvil_model_get_params(m, 1 + l, &w) || anvil_model_get_grads(m, 1 + l, &g) ||
            llama_block_backward(k, &shape, &w, &g, &la, a->dres, &a->x, NULL) || anvil_model_put_grads(m, 1 + l) ||
            anvil_model_put_params(m, 1 + l))
            return -1;
        anvil_trace_layer_end(span);
    }
    k->encoder_backward(hg.t[LLAMA_EMBED], NULL, a->dres, a->inputs, B, T, C);
    if (anvil_model_put_grads(m, 0) || anvil_model_put_params(m, 0)) return -1;
    *loss = anvil_model_mean_loss(m, a->losses, (size_t)N, count);
    return 0;
}

int llama_logits(anvil_model *m, float *out) {
    if (!m->acts) return anvil_fail("model: logits requested before any forward pass");
    anvil_model_view h;
    if (anvil_model_get_params(m, 0, &h)) return -1;
    m->k->logits(out, acts_of(m)->lnf, h.t[llama_head(&m->cfg)], m->B * m->T, m->cfg.n_embd, m->cfg.padded_vocab);
    return anvil_model_put_params(m, 0);
}
