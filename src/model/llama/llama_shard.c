/* Llama's passes over a shard: a tensor-parallel rank's share of a pipeline
 * stage's layers (the whole model's layers and one rank when neither splits
 * it), computing through the group's collectives (m->comm) in Megatron-LM's
 * layout, as GPT-2's shard does (gpt2_shard.c says how).
 *
 * A rank holds the q rows of its n_head/tp query heads and the k and v rows
 * of its n_kv_head/tp key/value heads, so each query head's key/value head is
 * on the same rank and attention runs on local heads; gate and up hold its
 * ffn_hidden/tp hidden units. o and down are row-parallel: their products are
 * partial sums completed by one all-reduce each (there are no biases). The
 * embedding, and the LM head (its own matrix, or the embedding when tied),
 * are split by vocabulary rows. The RMSNorms are replicated; under sequence
 * parallelism their weight gradients, each rank's over its rows, are summed
 * over the group after the backward. */
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "model/llama/llama.h"

/* One micro-batch's activations: what its backward needs, kept from its forward. */
struct tp_slot {
    float *resid, *ln1, *ln1_rstd, *qkv, *atty, *lse, *resid2, *ln2, *ln2_rstd, *gu;
    float *lnf, *lnf_rstd, *cls_lse, *dres;
    int32_t *inputs, *targets;
    int count; /* targets >= 0 */
};

/* Buffers a pass uses and leaves, shared by the slots. */
struct tp_scratch {
    llama_block_scratch block;
    float *tlogit, *lse_all, *rope;
    float *ln_grads; /* sequence parallelism: one backward's norm weight gradients, before their sum */
};

struct shard_acts {
    int rows; /* the tokens of the residual stream this rank holds */
    struct tp_slot *slots;
    struct tp_scratch x;
    void **owned;
    int nowned;
    size_t act_bytes;
};

static struct shard_acts *acts_of(const anvil_model *m) { return m->acts; }
static int first(const anvil_model *m) { return m->shard.l0 == 0; }
static int last(const anvil_model *m) { return m->shard.l1 == m->cfg.n_layer; }
static int layers(const anvil_model *m) { return m->shard.l1 - m->shard.l0; }
static float *P(const anvil_model *m, int i) { return m->params + m->offsets[i]; }
static float *G(const anvil_model *m, int i) { return m->grads + m->offsets[i]; }

void llama_shard_acts_free(anvil_model *m) {
    struct shard_acts *s = acts_of(m);
    if (!s) return;
    for (int i = 0; i < s->nowned; i++) m->k->free(s->owned[i]);
    free(s->owned);
    free(s->slots);
    free(s);
    m->acts = NULL;
    m->B = m->T = 0;
}

/* The norm weights, in the order sequence parallelism sums their gradients: the stage's layers' two
 * (the first N_NORM_LAYER), then the final one on the last stage. */
static const int norm_tensors[] = {LLAMA_ATTN_NORM, LLAMA_MLP_NORM, LLAMA_NORM};
enum { N_NORM = sizeof norm_tensors / sizeof norm_tensors[0], N_NORM_LAYER = 2 };

static size_t norm_grads_floats(const anvil_model *m) {
    size_t n = 0;
    for (int j = 0; j < N_NORM; j++) n += m->offsets[norm_tensors[j] + 1] - m->offsets[norm_tensors[j]];
    return n;
}

/* The shard's widths of a block (its heads, key/value heads and hidden units). */
static llama_block_shape block_shape(const anvil_model *m) {
    const anvil_model_config *c = &m->cfg;
    int tp = m->shard.tp;
    return (llama_block_shape){m->B,          m->T, c->n_embd, c->n_head / tp, c->n_kv_head / tp, llama_hs(c),
                               c->ffn_hidden / tp, c->norm_eps, m->acts ? acts_of(m)->x.rope : NULL};
}

static int alloc_slots(anvil_model *m, struct shard_acts *s, size_t N, size_t R) {
    const anvil_model_config *c = &m->cfg;
    size_t tp = (size_t)m->shard.tp, L = (size_t)layers(m), C = (size_t)c->n_embd, f = sizeof(float);
    size_t hs = (size_t)llama_hs(c), NHs = (size_t)c->n_head / tp, Q = (NHs + 2 * (size_t)c->n_kv_head / tp) * hs;
    size_t Cs = NHs * hs, Hs = (size_t)c->ffn_hidden / tp;
    enum { PER_SLOT = 16 };
    for (int i = 0; i < m->shard.nslots; i++) {
        struct tp_slot *a = &s->slots[i];
        anvil_buffer_plan plan[PER_SLOT] = {
            {&a->resid, (L + 1) * R * C * f}, {&a->ln1, L * N * C * f},      {&a->ln1_rstd, L * R * f},
            {&a->qkv, L * N * Q * f},         {&a->atty, L * N * Cs * f},    {&a->lse, L * NHs * N * f},
            {&a->resid2, L * R * C * f},      {&a->ln2, L * N * C * f},      {&a->ln2_rstd, L * R * f},
            {&a->gu, L * N * 2 * Hs * f},     {&a->lnf, N * C * f},          {&a->lnf_rstd, R * f},
            {&a->cls_lse, N * f},             {&a->dres, R * C * f},         {&a->inputs, N * sizeof(int32_t)},
            {&a->targets, N * sizeof(int32_t)},
        };
        if (anvil_alloc_plan(m->k, plan, PER_SLOT, s->owned, &s->nowned, &s->act_bytes)) return -1;
    }
    return 0;
}

static int alloc_scratch(anvil_model *m, struct shard_acts *s, size_t N, int T) {
    const anvil_model_config *c = &m->cfg;
    size_t tp = (size_t)m->shard.tp, C = (size_t)c->n_embd, f = sizeof(float), hs = (size_t)llama_hs(c);
    size_t NHs = (size_t)c->n_head / tp, Q = (NHs + 2 * (size_t)c->n_kv_head / tp) * hs, Hs = (size_t)c->ffn_hidden / tp;
    size_t W = (Q > 2 * Hs ? Q : 2 * Hs) * C;
    struct tp_scratch *x = &s->x;
    llama_block_scratch *b = &x->block;
    enum { SCRATCH = 14 };
    anvil_buffer_plan plan[SCRATCH] = {
        {&b->wqkv, Q * C * f},        {&b->wgu, 2 * Hs * C * f},     {&b->dw, W * f},
        {&b->sw, N * Hs * f},         {&b->dsw, N * Hs * f},         {&b->dgu, N * 2 * Hs * f},
        {&b->dln, N * C * f},         {&b->datty, N * NHs * hs * f}, {&b->dqkv, N * Q * f},
        {&b->partial, N * C * f},     {&x->tlogit, N * f},           {&x->lse_all, tp * N * f},
        {&x->rope, (size_t)T * hs * f}, {&x->ln_grads, norm_grads_floats(m) * f},
    };
    int n = m->shard.sequence_parallel ? SCRATCH : SCRATCH - 1;
    if (anvil_alloc_plan(m->k, plan, n, s->owned, &s->nowned, &s->act_bytes)) return -1;
    return llama_rope_upload(m->k, c, x->rope, T);
}

/* Under sequence parallelism the residual stream, the norms' rstds and the stream's gradient hold
 * rows = N/tp tokens; the norm outputs are kept gathered (the column-parallel matrices' inputs). */
static int acts_ensure(anvil_model *m, int B, int T) {
    if (m->acts && m->B == B && m->T == T) return 0;
    int sp = m->shard.sequence_parallel;
    if (sp && anvil_model_sp_check(m->shard.tp, B, T)) return -1;
    llama_shard_acts_free(m);
    struct shard_acts *s = calloc(1, sizeof *s);
    if (!s) return anvil_fail("tensor parallel: out of memory for activations");
    m->acts = s;
    size_t N = (size_t)B * T, R = sp ? N / (size_t)m->shard.tp : N;
    s->owned = calloc((size_t)m->shard.nslots * 16 + 16, sizeof *s->owned);
    s->slots = calloc((size_t)m->shard.nslots, sizeof *s->slots);
    int rc = s->owned && s->slots ? alloc_slots(m, s, N, R) : -1;
    if (!rc) rc = alloc_scratch(m, s, N, T);
    if (rc) {
        llama_shard_acts_free(m);
        return anvil_fail("tensor parallel: cannot allocate activations for %d micro-batches of B=%d T=%d",
                          m->shard.nslots, B, T);
    }
    m->B = B;
    m->T = T;
    s->rows = (int)R;
    return 0;
}

static int prepare(anvil_model *m, struct tp_slot **slot, int s, const int32_t *inputs, const int32_t *targets, int B,
                   int T) {
    if (anvil_model_shard_batch_check(m, s, inputs, targets, B, T) || acts_ensure(m, B, T)) return -1;
    struct tp_slot *a = *slot = &acts_of(m)->slots[s];
    m->k->upload(a->inputs, inputs, (size_t)B * T * sizeof(int32_t));
    m->k->upload(a->targets, targets, (size_t)B * T * sizeof(int32_t));
    a->count = anvil_model_count_targets(targets, (size_t)B * T);
    return 0;
}

static llama_reduce block_hook(const anvil_model *m) {
    return (llama_reduce){m->comm, m->shard.sequence_parallel, acts_of(m)->rows};
}

/* Layer l's activations within a slot's stacked buffers, at the shard's widths. */
static llama_layer_acts layer_acts(const anvil_model *m, struct tp_slot *a, int l) {
    llama_block_shape s = block_shape(m);
    size_t N = (size_t)m->B * m->T, C = (size_t)m->cfg.n_embd, L = (size_t)l, R = (size_t)acts_of(m)->rows;
    size_t NC = N * C, RC = R * C, Q = (size_t)llama_qkv_width(&s), Cs = (size_t)s.NHs * s.hs;
    return (llama_layer_acts){a->resid + L * RC,     a->ln1 + L * NC,        a->ln1_rstd + L * R,
                              a->qkv + L * N * Q,    a->atty + L * N * Cs,   a->lse + L * (size_t)s.NHs * N,
                              a->resid2 + L * RC,    a->ln2 + L * NC,        a->ln2_rstd + L * R,
                              a->gu + L * N * 2 * (size_t)s.Hs, a->resid + (L + 1) * RC};
}

/* Layer l's slices of the per-layer tensors within base (the parameters or the gradients). */
static void layer_view(const anvil_model *m, float *base, int l, anvil_model_view *v) {
    memset(v, 0, sizeof *v);
    for (int i = LLAMA_ATTN_NORM; i <= LLAMA_WDOWN; i++)
        v->t[i] = base + m->offsets[i] + (size_t)l * ((m->offsets[i + 1] - m->offsets[i]) / (size_t)layers(m));
}

/* The embedding (first stage) and the stage's layers: every rank of the group ends with the same
 * resid[L] (under sequence parallelism, with its rows of it). */
static int forward_body(anvil_model *m, struct tp_slot *a) {
    const anvil_kernels *k = m->k;
    struct shard_acts *s = acts_of(m);
    int B = m->B, T = m->T, C = m->cfg.n_embd, sp = m->shard.sequence_parallel;
    if (first(m)) {
        int v0, Vr, Vs;
        anvil_model_vocab_shard(m, &v0, &Vr, &Vs);
        float *emb = sp ? s->x.block.partial : a->resid;
        k->encoder_shard_forward(emb, a->inputs, P(m, LLAMA_EMBED), NULL, B, T, C, v0, Vs);
        if (sp ? anvil_model_tp_scatter(m, emb, a->resid, (size_t)s->rows * C, "sp embedding forward")
               : anvil_model_tp_reduce(m, a->resid, (size_t)B * T * C, "tp embedding forward"))
            return -1;
    }
    llama_block_shape shape = block_shape(m);
    llama_reduce r = block_hook(m);
    for (int l = 0; l < layers(m); l++) {
        anvil_model_view w;
        llama_layer_acts la = layer_acts(m, a, l);
        layer_view(m, m->params, l, &w);
        if (llama_block_forward(k, &shape, &w, &la, &s->x.block, &r)) return -1;
    }
    return 0;
}

/* The final norm and the vocabulary-parallel loss, which leaves the global log-sum-exp in a->cls_lse
 * for the backward and sets *loss to the mean over targets >= 0. */
static int head_forward(anvil_model *m, struct tp_slot *a, const int32_t *targets, float *loss) {
    const anvil_kernels *k = m->k;
    struct shard_acts *s = acts_of(m);
    struct tp_scratch *x = &s->x;
    int N = m->B * m->T, C = m->cfg.n_embd, v0, Vr, Vs, sp = m->shard.sequence_parallel;
    size_t RC = (size_t)s->rows * C;
    float *lnf = sp ? x->block.partial : a->lnf;
    k->rmsnorm_forward(lnf, a->lnf_rstd, a->resid + (size_t)layers(m) * RC, P(m, LLAMA_NORM), s->rows, C,
                       m->cfg.norm_eps);
    if (sp && anvil_model_tp_gather(m, lnf, a->lnf, RC, "sp head gather")) return -1;
    anvil_model_vocab_shard(m, &v0, &Vr, &Vs);
    if (k->classifier_shard_stats(a->cls_lse, x->tlogit, a->lnf, P(m, llama_head(&m->cfg)), a->targets, N, C, v0, Vr,
                                  Vs))
        return -1;
    return anvil_model_vocab_loss(m, a->cls_lse, x->tlogit, x->lse_all, targets, N, a->count, loss);
}

int llama_stage_forward(anvil_model *m, int slot, const int32_t *inputs, const int32_t *targets, int B, int T,
                        float *loss) {
    struct tp_slot *a = NULL;
    if (prepare(m, &a, slot, inputs, targets, B, T) || forward_body(m, a)) return -1;
    return last(m) ? head_forward(m, a, targets, loss) : 0;
}

/* Sequence parallelism: one backward's norm weight gradients, summed over the group and added to the
 * gradients, the same on every rank (so the norm counts them once, as any replicated tensor). */
static int sum_norm_grads(anvil_model *m) {
    float *lg = acts_of(m)->x.ln_grads;
    if (anvil_model_tp_reduce(m, lg, norm_grads_floats(m), "sp norm gradients")) return -1;
    for (size_t j = 0, at = 0; j < N_NORM; j++) {
        int i = norm_tensors[j];
        size_t n = m->offsets[i + 1] - m->offsets[i];
        m->k->add_inplace(G(m, i), lg + at, n);
        at += n;
    }
    return 0;
}

/* The last stage's start of the backward: the LM head's and the final norm's, into a->dres. */
static int head_backward(anvil_model *m, struct tp_slot *a, float *dnorm, float grad_scale) {
    const anvil_kernels *k = m->k;
    struct shard_acts *s = acts_of(m);
    llama_block_scratch *b = &s->x.block;
    int N = m->B * m->T, C = m->cfg.n_embd, head = llama_head(&m->cfg), v0, Vr, Vs, sp = m->shard.sequence_parallel;
    size_t RC = (size_t)s->rows * C;
    anvil_model_vocab_shard(m, &v0, &Vr, &Vs);
    float dscale = a->count ? grad_scale / (float)a->count : 0.0f;
    if (k->classifier_shard_backward(b->dln, G(m, head), a->lnf, P(m, head), a->cls_lse, a->targets, N, C, v0, Vr, Vs,
                                     dscale))
        return -1;
    float *dlnf = sp ? b->partial : b->dln;
    if (sp ? anvil_model_tp_scatter(m, b->dln, dlnf, RC, "sp loss backward")
           : anvil_model_tp_reduce(m, b->dln, (size_t)N * C, "tp loss backward"))
        return -1;
    k->zero(a->dres, RC * sizeof(float));
    k->rmsnorm_backward(a->dres, dnorm, dlnf, a->resid + (size_t)layers(m) * RC, P(m, LLAMA_NORM), a->lnf_rstd,
                        s->rows, C);
    return 0;
}

/* The first stage's end of the backward: the embedding's rows of this vocabulary shard take every
 * token's gradient, wherever it sits. */
static int embed_backward(anvil_model *m, struct tp_slot *a) {
    struct shard_acts *s = acts_of(m);
    int v0, Vr, Vs, C = m->cfg.n_embd;
    anvil_model_vocab_shard(m, &v0, &Vr, &Vs);
    float *demb = m->shard.sequence_parallel ? s->x.block.partial : a->dres;
    if (m->shard.sequence_parallel &&
        anvil_model_tp_gather(m, a->dres, demb, (size_t)s->rows * C, "sp embedding backward"))
        return -1;
    m->k->encoder_shard_backward(G(m, LLAMA_EMBED), NULL, demb, a->inputs, m->B, m->T, C, v0, Vs);
    return 0;
}

int llama_stage_backward(anvil_model *m, int slot, float grad_scale) {
    struct shard_acts *s = acts_of(m);
    struct tp_slot *a = &s->slots[slot];
    int C = m->cfg.n_embd, sp = m->shard.sequence_parallel;
    /* Under sequence parallelism each rank's norm gradients cover its rows only: they go to ln_grads
     * first, to be summed over the group and added to the gradients (which may hold earlier
     * micro-batches' sums already). */
    float *norm_g[LLAMA_NPARAM] = {0};
    for (size_t j = 0, at = 0; j < N_NORM; j++) {
        int i = norm_tensors[j];
        norm_g[i] = sp ? s->x.ln_grads + at : G(m, i);
        at += m->offsets[i + 1] - m->offsets[i];
    }
    if (sp) m->k->zero(s->x.ln_grads, norm_grads_floats(m) * sizeof(float));
    if (last(m) && head_backward(m, a, norm_g[LLAMA_NORM], grad_scale)) return -1;
    llama_block_shape shape = block_shape(m);
    llama_reduce r = block_hook(m);
    for (int l = layers(m) - 1; l >= 0; l--) {
        anvil_model_view w, g;
        llama_layer_acts la = layer_acts(m, a, l);
        layer_view(m, m->params, l, &w);
        layer_view(m, m->grads, l, &g);
        if (sp)
            for (int j = 0; j < N_NORM_LAYER; j++) g.t[norm_tensors[j]] = norm_g[norm_tensors[j]] + (size_t)l * C;
        if (llama_block_backward(m->k, &shape, &w, &g, &la, a->dres, &s->x.block, &r)) return -1;
    }
    if (first(m) && embed_backward(m, a)) return -1;
    return sp ? sum_norm_grads(m) : 0;
}

float *llama_stage_input(anvil_model *m, int slot) { return acts_of(m)->slots[slot].resid; }
float *llama_stage_output(anvil_model *m, int slot) {
    struct shard_acts *s = acts_of(m);
    return s->slots[slot].resid + (size_t)layers(m) * s->rows * m->cfg.n_embd;
}
float *llama_stage_grad(anvil_model *m, int slot) { return acts_of(m)->slots[slot].dres; }
size_t llama_stage_floats(const anvil_model *m) { return m->acts ? (size_t)acts_of(m)->rows * m->cfg.n_embd : 0; }
size_t llama_activation_bytes(const anvil_model *m) { return m->acts ? acts_of(m)->act_bytes : 0; }
int llama_stage_ready(anvil_model *m, int B, int T) { return acts_ensure(m, B, T); }
