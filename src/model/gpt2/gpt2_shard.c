/* GPT-2's passes over a shard: a tensor-parallel rank's share of a pipeline
 * stage's layers (the whole model's layers and one rank when neither splits
 * it), computing through the group's collectives (m->comm) in Megatron-LM's
 * layout.
 *
 * QKV's and the MLP's first matrix's output rows are column-parallel (a rank
 * holds its heads' q, k and v rows and its 4C/tp hidden units), so attention
 * and GELU run on local slices; the attention projection and the MLP's second
 * matrix hold the matching input columns (row-parallel), their products are
 * partial sums completed by one all-reduce of B*T*C floats, the bias added by
 * rank 0 only; the backward needs one more per block, of the gradient of the
 * block's LayerNorm output. wte is split by vocabulary rows: the embedding
 * looks up in-shard tokens and contributes zero rows for the others, one
 * all-reduce completing it; the LM head computes only the shard's logits, and
 * their log-sum-exps and target logits are combined over the group
 * (anvil_model_vocab_loss), so no rank holds a row's full logits. LayerNorms,
 * wpe and the row-parallel biases are replicated: every rank computes them on
 * the same inputs and gets the same gradients.
 *
 * Sequence parallelism splits what lies outside those regions by tokens: the
 * residual stream, the LayerNorms' statistics and the embedding's output hold
 * this rank's rows only, each all-reduce becoming a reduce-scatter where a
 * product enters the stream and an all-gather before each column-parallel
 * matrix and the LM head; the LayerNorms' weight gradients, each rank's over
 * its rows, are summed over the group after the backward. */
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "model/gpt2/gpt2.h"

/* One micro-batch's activations: what its backward needs, kept from its forward. A pipeline stage
 * holds several at once. */
struct tp_slot {
    float *resid, *ln1, *ln1_mean, *ln1_rstd, *qkv, *atty, *lse, *resid2, *ln2, *ln2_mean, *ln2_rstd, *fch;
    float *lnf, *lnf_mean, *lnf_rstd, *cls_lse, *dres;
    int32_t *inputs, *targets;
    int count; /* targets >= 0 */
};

/* Buffers a pass uses and leaves, shared by the slots. */
struct tp_scratch {
    gpt2_block_scratch block;
    float *tlogit, *lse_all;
    float *ln_grads; /* sequence parallelism: one backward's LayerNorm gradients, before their sum */
};

struct shard_acts {
    int rows; /* the tokens of the residual stream this rank holds */
    struct tp_slot *slots;
    struct tp_scratch x;
    void **owned; /* every activation buffer, for freeing */
    int nowned;
    size_t act_bytes;
};

static struct shard_acts *acts_of(const anvil_model *m) { return m->acts; }
static int first(const anvil_model *m) { return m->shard.l0 == 0; }
static int last(const anvil_model *m) { return m->shard.l1 == m->cfg.n_layer; }
static int layers(const anvil_model *m) { return m->shard.l1 - m->shard.l0; }
static float *P(const anvil_model *m, int i) { return m->params + m->offsets[i]; }
static float *G(const anvil_model *m, int i) { return m->grads + m->offsets[i]; }

void gpt2_shard_acts_free(anvil_model *m) {
    struct shard_acts *s = acts_of(m);
    if (!s) return;
    for (int i = 0; i < s->nowned; i++) m->k->free(s->owned[i]);
    free(s->owned);
    free(s->slots);
    free(s);
    m->acts = NULL;
    m->B = m->T = 0;
}

/* The LayerNorm tensors, in the order sequence parallelism sums their gradients: ln1w, ln1b, ln2w, ln2b of
 * the stage's layers (the first N_LN_LAYER), then lnfw and lnfb on the last stage. */
static const int ln_tensors[] = {ANVIL_GPT2_LN1W, ANVIL_GPT2_LN1B, ANVIL_GPT2_LN2W,
                                 ANVIL_GPT2_LN2B, ANVIL_GPT2_LNFW, ANVIL_GPT2_LNFB};
enum { N_LN = sizeof ln_tensors / sizeof ln_tensors[0], N_LN_LAYER = 4 };

static size_t ln_grads_floats(const anvil_model *m) {
    size_t n = 0;
    for (int j = 0; j < N_LN; j++) n += m->offsets[ln_tensors[j] + 1] - m->offsets[ln_tensors[j]];
    return n;
}

/* Under sequence parallelism the residual stream, the LayerNorms' statistics and the stream's gradient
 * hold rows = N/tp tokens; the LayerNorm outputs are kept gathered (the column-parallel matrices' inputs,
 * which their weights' gradients read again). */
static int acts_ensure(anvil_model *m, int B, int T) {
    if (m->acts && m->B == B && m->T == T) return 0;
    int sp = m->shard.sequence_parallel;
    if (sp && anvil_model_sp_check(m->shard.tp, B, T)) return -1;
    gpt2_shard_acts_free(m);
    struct shard_acts *s = calloc(1, sizeof *s);
    if (!s) return anvil_fail("tensor parallel: out of memory for activations");
    m->acts = s;
    int nslots = m->shard.nslots;
    size_t L = (size_t)layers(m), C = (size_t)m->cfg.n_embd, N = (size_t)B * T, tp = (size_t)m->shard.tp;
    size_t Cs = C / tp, NHs = (size_t)m->cfg.n_head / tp, f = sizeof(float);
    size_t R = sp ? N / tp : N;
    enum { PER_SLOT = 19, SCRATCH = 9 };
    s->owned = calloc((size_t)nslots * PER_SLOT + SCRATCH, sizeof *s->owned);
    s->slots = calloc((size_t)nslots, sizeof *s->slots);
    int rc = s->owned && s->slots ? 0 : -1;
    for (int i = 0; !rc && i < nslots; i++) {
        struct tp_slot *a = &s->slots[i];
        anvil_buffer_plan plan[PER_SLOT] = {
            {&a->resid, (L + 1) * R * C * f}, {&a->ln1, L * N * C * f},      {&a->ln1_mean, L * R * f},
            {&a->ln1_rstd, L * R * f},        {&a->qkv, L * N * 3 * Cs * f}, {&a->atty, L * N * Cs * f},
            {&a->lse, L * NHs * N * f},       {&a->resid2, L * R * C * f},   {&a->ln2, L * N * C * f},
            {&a->ln2_mean, L * R * f},        {&a->ln2_rstd, L * R * f},     {&a->fch, L * N * 4 * Cs * f},
            {&a->lnf, N * C * f},             {&a->lnf_mean, R * f},         {&a->lnf_rstd, R * f},
            {&a->cls_lse, N * f},             {&a->dres, R * C * f},         {&a->inputs, N * sizeof(int32_t)},
            {&a->targets, N * sizeof(int32_t)},
        };
        rc = anvil_alloc_plan(m->k, plan, PER_SLOT, s->owned, &s->nowned, &s->act_bytes);
    }
    struct tp_scratch *x = &s->x;
    anvil_buffer_plan scratch[SCRATCH] = {
        {&x->block.gelu, N * 4 * Cs * f}, {&x->block.dfch, N * 4 * Cs * f}, {&x->block.dln, N * C * f},
        {&x->block.datty, N * Cs * f},    {&x->block.dqkv, N * 3 * Cs * f}, {&x->block.partial, N * C * f},
        {&x->tlogit, N * f},              {&x->lse_all, tp * N * f},
        {&x->ln_grads, ln_grads_floats(m) * f},
    };
    if (!rc) rc = anvil_alloc_plan(m->k, scratch, sp ? SCRATCH : SCRATCH - 1, s->owned, &s->nowned, &s->act_bytes);
    if (rc) {
        gpt2_shard_acts_free(m);
        return anvil_fail("tensor parallel: cannot allocate activations for %d micro-batches of B=%d T=%d", nslots,
                          B, T);
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

static gpt2_reduce block_hook(const anvil_model *m) {
    return (gpt2_reduce){m->comm, m->shard.sequence_parallel, acts_of(m)->rows};
}

/* Layer l's activations within a slot's stacked buffers, at the shard's widths. */
static gpt2_layer_acts layer_acts(const anvil_model *m, struct tp_slot *a, int l) {
    size_t tp = (size_t)m->shard.tp, N = (size_t)m->B * m->T, NC = N * (size_t)m->cfg.n_embd, NCs = NC / tp;
    size_t L = (size_t)l, NHs = (size_t)m->cfg.n_head / tp, R = (size_t)acts_of(m)->rows;
    size_t RC = R * (size_t)m->cfg.n_embd;
    return (gpt2_layer_acts){a->resid + L * RC,    a->ln1 + L * NC,      a->ln1_mean + L * R,
                             a->ln1_rstd + L * R,  a->qkv + L * 3 * NCs, a->atty + L * NCs,
                             a->lse + L * NHs * N, a->resid2 + L * RC,   a->ln2 + L * NC,
                             a->ln2_mean + L * R,  a->ln2_rstd + L * R,  a->fch + L * 4 * NCs,
                             a->resid + (L + 1) * RC};
}

/* Layer l's slices of the per-layer tensors within base (the parameters or the gradients). */
static void layer_view(const anvil_model *m, float *base, int l, anvil_model_view *v) {
    memset(v, 0, sizeof *v);
    for (int i = ANVIL_GPT2_LN1W; i <= ANVIL_GPT2_FCPROJB; i++)
        v->t[i] = base + m->offsets[i] + (size_t)l * ((m->offsets[i + 1] - m->offsets[i]) / (size_t)layers(m));
}

/* The embedding (first stage) and the stage's layers: every rank of the group ends with the same
 * resid[L] (under sequence parallelism, with its rows of it). */
static int forward_body(anvil_model *m, struct tp_slot *a) {
    const anvil_kernels *k = m->k;
    struct shard_acts *s = acts_of(m);
    int B = m->B, T = m->T, L = layers(m), C = m->cfg.n_embd, N = B * T, Cs = C / m->shard.tp;
    int sp = m->shard.sequence_parallel, rank = m->shard.tp_rank;
    size_t NC = (size_t)N * C;
    if (first(m)) {
        int v0, Vr, Vs;
        anvil_model_vocab_shard(m, &v0, &Vr, &Vs);
        /* wpe rides along on rank 0 only, so the sum adds it once. */
        float *emb = sp ? s->x.block.partial : a->resid;
        k->encoder_shard_forward(emb, a->inputs, P(m, ANVIL_GPT2_WTE), rank ? NULL : P(m, ANVIL_GPT2_WPE), B, T, C,
                                 v0, Vs);
        if (sp ? anvil_model_tp_scatter(m, emb, a->resid, (size_t)s->rows * C, "sp embedding forward")
               : anvil_model_tp_reduce(m, a->resid, NC, "tp embedding forward"))
            return -1;
    }
    gpt2_block_shape shape = {B, T, C, Cs, m->cfg.n_head / m->shard.tp};
    gpt2_reduce r = block_hook(m);
    for (int l = 0; l < L; l++) {
        anvil_model_view w;
        gpt2_layer_acts la = layer_acts(m, a, l);
        layer_view(m, m->params, l, &w);
        /* Row-parallel: the projections' biases are added once, by rank 0, into the sum. */
        if (rank) w.t[ANVIL_GPT2_ATTPROJB] = w.t[ANVIL_GPT2_FCPROJB] = NULL;
        if (gpt2_block_forward(k, &shape, &w, &la, &s->x.block, &r)) return -1;
    }
    return 0;
}

/* The final LayerNorm and the vocabulary-parallel loss, which leaves the global log-sum-exp in
 * a->cls_lse for the backward and sets *loss to the mean over targets >= 0. */
static int head_forward(anvil_model *m, struct tp_slot *a, const int32_t *targets, float *loss) {
    const anvil_kernels *k = m->k;
    struct shard_acts *s = acts_of(m);
    struct tp_scratch *x = &s->x;
    int N = m->B * m->T, C = m->cfg.n_embd, L = layers(m), v0, Vr, Vs, sp = m->shard.sequence_parallel;
    size_t RC = (size_t)s->rows * C;
    /* Under sequence parallelism the LayerNorm runs on this rank's rows and the LM head on all of them. */
    float *lnf = sp ? x->block.partial : a->lnf;
    k->layernorm_forward(lnf, a->lnf_mean, a->lnf_rstd, a->resid + (size_t)L * RC, P(m, ANVIL_GPT2_LNFW),
                         P(m, ANVIL_GPT2_LNFB), s->rows, C);
    if (sp && anvil_model_tp_gather(m, lnf, a->lnf, RC, "sp head gather")) return -1;
    anvil_model_vocab_shard(m, &v0, &Vr, &Vs);
    if (k->classifier_shard_stats(a->cls_lse, x->tlogit, a->lnf, P(m, ANVIL_GPT2_WTE), a->targets, N, C, v0, Vr, Vs))
        return -1;
    return anvil_model_vocab_loss(m, a->cls_lse, x->tlogit, x->lse_all, targets, N, a->count, loss);
}

int gpt2_stage_forward(anvil_model *m, int slot, const int32_t *inputs, const int32_t *targets, int B, int T,
                       float *loss) {
    struct tp_slot *a = NULL;
    if (prepare(m, &a, slot, inputs, targets, B, T) || forward_body(m, a)) return -1;
    return last(m) ? head_forward(m, a, targets, loss) : 0;
}

/* Sequence parallelism: the LayerNorm gradients of one backward, summed over the group and added to the
 * gradients, the same on every rank (so the norm counts them once, as any replicated tensor). */
static int sum_ln_grads(anvil_model *m) {
    float *lg = acts_of(m)->x.ln_grads;
    if (anvil_model_tp_reduce(m, lg, ln_grads_floats(m), "sp layernorm gradients")) return -1;
    for (size_t j = 0, at = 0; j < N_LN; j++) {
        int i = ln_tensors[j];
        size_t n = m->offsets[i + 1] - m->offsets[i];
        m->k->add_inplace(G(m, i), lg + at, n);
        at += n;
    }
    return 0;
}

/* The last stage's start of the backward: the LM head's and the final LayerNorm's, into a->dres. */
static int head_backward(anvil_model *m, struct tp_slot *a, float *const *ln_g, float grad_scale) {
    const anvil_kernels *k = m->k;
    struct shard_acts *s = acts_of(m);
    struct tp_scratch *x = &s->x;
    int N = m->B * m->T, L = layers(m), C = m->cfg.n_embd, v0, Vr, Vs, sp = m->shard.sequence_parallel;
    size_t NC = (size_t)N * C, RC = (size_t)s->rows * C;
    anvil_model_vocab_shard(m, &v0, &Vr, &Vs);
    float dscale = a->count ? grad_scale / (float)a->count : 0.0f;
    if (k->classifier_shard_backward(x->block.dln, G(m, ANVIL_GPT2_WTE), a->lnf, P(m, ANVIL_GPT2_WTE), a->cls_lse,
                                     a->targets, N, C, v0, Vr, Vs, dscale))
        return -1;
    float *dlnf = sp ? x->block.partial : x->block.dln;
    if (sp ? anvil_model_tp_scatter(m, x->block.dln, dlnf, RC, "sp loss backward")
           : anvil_model_tp_reduce(m, x->block.dln, NC, "tp loss backward"))
        return -1;
    k->zero(a->dres, RC * sizeof(float));
    k->layernorm_backward(a->dres, ln_g[ANVIL_GPT2_LNFW], ln_g[ANVIL_GPT2_LNFB], dlnf, a->resid + (size_t)L * RC,
                          P(m, ANVIL_GPT2_LNFW), a->lnf_mean, a->lnf_rstd, s->rows, C);
    return 0;
}

int gpt2_stage_backward(anvil_model *m, int slot, float grad_scale) {
    const anvil_kernels *k = m->k;
    struct shard_acts *s = acts_of(m);
    struct tp_slot *a = &s->slots[slot];
    struct tp_scratch *x = &s->x;
    int B = m->B, T = m->T, L = layers(m), C = m->cfg.n_embd, Cs = C / m->shard.tp, sp = m->shard.sequence_parallel;
    size_t RC = (size_t)s->rows * C;
    /* Under sequence parallelism each rank's LayerNorm gradients cover its rows only: they go to
     * ln_grads first, to be summed over the group and added to the gradients (which may hold earlier
     * micro-batches' sums already). */
    float *ln_g[ANVIL_GPT2_NPARAM] = {0};
    for (size_t j = 0, at = 0; j < N_LN; j++) {
        int i = ln_tensors[j];
        size_t n = m->offsets[i + 1] - m->offsets[i];
        ln_g[i] = sp ? x->ln_grads + at : G(m, i);
        at += n;
    }
    if (sp) k->zero(x->ln_grads, ln_grads_floats(m) * sizeof(float));
    if (last(m) && head_backward(m, a, ln_g, grad_scale)) return -1;
    gpt2_block_shape shape = {B, T, C, Cs, m->cfg.n_head / m->shard.tp};
    gpt2_reduce r = block_hook(m);
    for (int l = L - 1; l >= 0; l--) {
        anvil_model_view w, g;
        gpt2_layer_acts la = layer_acts(m, a, l);
        layer_view(m, m->params, l, &w);
        layer_view(m, m->grads, l, &g);
        if (sp)
            for (int j = 0; j < N_LN_LAYER; j++) {
                int i = ln_tensors[j];
                g.t[i] = ln_g[i] + (size_t)l * C;
            }
        if (gpt2_block_backward(k, &shape, &w, &g, &la, a->dres, &x->block, &r)) return -1;
    }
    if (first(m)) {
        int v0, Vr, Vs;
        anvil_model_vocab_shard(m, &v0, &Vr, &Vs);
        /* The embedding's rows are the vocabulary shard's, wherever their tokens sit: every token's gradient. */
        float *demb = sp ? x->block.partial : a->dres;
        if (sp && anvil_model_tp_gather(m, a->dres, demb, RC, "sp embedding backward")) return -1;
        k->encoder_shard_backward(G(m, ANVIL_GPT2_WTE), G(m, ANVIL_GPT2_WPE), demb, a->inputs, B, T, C, v0, Vs);
    }
    return sp ? sum_ln_grads(m) : 0;
}

float *gpt2_stage_input(anvil_model *m, int slot) { return acts_of(m)->slots[slot].resid; }
float *gpt2_stage_output(anvil_model *m, int slot) {
    struct shard_acts *s = acts_of(m);
    return s->slots[slot].resid + (size_t)layers(m) * s->rows * m->cfg.n_embd;
}
float *gpt2_stage_grad(anvil_model *m, int slot) { return acts_of(m)->slots[slot].dres; }
size_t gpt2_stage_floats(const anvil_model *m) {
    return m->acts ? (size_t)acts_of(m)->rows * m->cfg.n_embd : 0;
}
size_t gpt2_activation_bytes(const anvil_model *m) { return m->acts ? acts_of(m)->act_bytes : 0; }
int gpt2_stage_ready(anvil_model *m, int B, int T) { return acts_ensure(m, B, T); }

int gpt2_shard_forward(anvil_model *m, const int32_t *inputs, const int32_t *targets, int B, int T, float *loss) {
    return gpt2_stage_forward(m, 0, inputs, targets, B, T, loss);
}

int gpt2_shard_forward_backward(anvil_model *m, const int32_t *inputs, const int32_t *targets, int B, int T,
                                float grad_scale, float *loss) {
    if (gpt2_stage_forward(m, 0, inputs, targets, B, T, loss)) return -1;
    return gpt2_stage_backward(m, 0, grad_scale);
}
