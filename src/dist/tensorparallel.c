#include "dist/tensorparallel.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"

/* How a tensor is split: per layer it is groups blocks of rows x cols, and a
 * split divides each block's rows (column-parallel layers: output rows) or
 * its cols (row-parallel layers: input columns) into tp equal parts. q, k and
 * v are three blocks of QKV, so every rank gets the same heads of each. */
enum { REPLICATED, SPLIT_ROWS, SPLIT_COLS };

typedef struct {
    int split;
    size_t layers, groups, rows, cols;
} split_desc;

static split_desc describe(const anvil_gpt2_config *c, int i) {
    size_t L = (size_t)c->n_layer, C = (size_t)c->n_embd;
    switch (i) {
    case ANVIL_GPT2_WTE: return (split_desc){SPLIT_ROWS, 1, 1, (size_t)c->padded_vocab, C};
    case ANVIL_GPT2_QKVW: return (split_desc){SPLIT_ROWS, L, 3, C, C};
    case ANVIL_GPT2_QKVB: return (split_desc){SPLIT_ROWS, L, 3, C, 1};
    case ANVIL_GPT2_FCW: return (split_desc){SPLIT_ROWS, L, 1, 4 * C, C};
    case ANVIL_GPT2_FCB: return (split_desc){SPLIT_ROWS, L, 1, 4 * C, 1};
    case ANVIL_GPT2_ATTPROJW: return (split_desc){SPLIT_COLS, L, 1, C, C};
    case ANVIL_GPT2_FCPROJW: return (split_desc){SPLIT_COLS, L, 1, C, 4 * C};
    default: return (split_desc){REPLICATED, 0, 0, 0, 0};
    }
}

int anvil_tp_is_split(int i) {
    anvil_gpt2_config any = {.n_layer = 1, .n_embd = 1, .padded_vocab = 1};
    return describe(&any, i).split != REPLICATED;
}

/* One micro-batch's activations: what its backward needs, kept from its
 * forward. A pipeline stage holds several at once. */
struct tp_slot {
    float *resid, *ln1, *ln1_mean, *ln1_rstd, *qkv, *atty, *lse, *resid2, *ln2, *ln2_mean, *ln2_rstd, *fch;
    float *lnf, *lnf_mean, *lnf_rstd, *cls_lse, *dres;
    int32_t *inputs, *targets;
    int count; /* targets >= 0 */
};

/* Buffers a pass uses and leaves, shared by the slots. */
struct tp_scratch {
    anvil_gpt2_block_scratch block;
    float *tlogit, *lse_all;
    float *ln_grads; /* sequence parallelism: one backward's LayerNorm gradients, before their sum */
};

struct anvil_tp {
    anvil_gpt2_config cfg;  /* n_layer: this stage's layers */
    anvil_gpt2_config full; /* the whole model */
    const anvil_kernels *k;
    anvil_group *g;
    int tp, rank;
    int l0, first, last; /* layers [l0, l0 + cfg.n_layer); first holds the embedding, last the loss */
    size_t full_offsets[ANVIL_GPT2_NPARAM + 1];
    size_t offsets[ANVIL_GPT2_NPARAM + 1];
    float *params, *grads;
    int B, T, nslots;
    int sp, rows; /* sequence parallelism; rows: the tokens of the residual stream this rank holds */
    size_t *counts; /* tp entries: the elements each rank puts into a collective over the tokens */
    struct tp_slot *slots;
    struct tp_scratch x;
    void **owned; /* every activation buffer, for freeing */
    int nowned;
    size_t act_bytes;
    uint64_t bytes;
};

size_t anvil_tp_num_params(const anvil_tp *m) { return m->offsets[ANVIL_GPT2_NPARAM]; }
const size_t *anvil_tp_offsets(const anvil_tp *m) { return m->offsets; }
float *anvil_tp_params(anvil_tp *m) { return m->params; }
float *anvil_tp_grads(anvil_tp *m) { return m->grads; }
uint64_t anvil_tp_bytes(const anvil_tp *m) { return m->bytes; }
size_t anvil_tp_activation_bytes(const anvil_tp *m) { return m->act_bytes; }

static int per_layer(int i) { return i >= ANVIL_GPT2_LN1W && i <= ANVIL_GPT2_FCPROJB; }

/* Whether this stage holds tensor i: every stage its layers, the first the embedding (wte, wpe), the
 * last the final LayerNorm and the LM head (wte again, tied). A tensor a stage does not hold keeps
 * its place in the layout with no elements. */
static int holds(const anvil_tp *m, int i) {
    if (i == ANVIL_GPT2_WTE) return m->first || m->last;
    if (i == ANVIL_GPT2_WPE) return m->first;
    if (i == ANVIL_GPT2_LNFW || i == ANVIL_GPT2_LNFB) return m->last;
    return 1;
}

/* Whether this stage's copy of tensor i is its own: wte belongs to the first stage (the last one's
 * is an equal copy, its gradients summed with the first's). */
static int owned(const anvil_tp *m, int i) { return i == ANVIL_GPT2_WTE ? m->first : holds(m, i); }

anvil_tp *anvil_tp_new_stage(const anvil_gpt2_config *cfg, const anvil_kernels *k, anvil_group *g, int l0, int l1,
                             int nslots) {
    anvil_tp *m = calloc(1, sizeof *m);
    if (!m) {
        anvil_fail("tensor parallel: out of memory");
        return NULL;
    }
    m->full = *cfg;
    m->cfg = *cfg;
    m->cfg.n_layer = l1 - l0;
    m->l0 = l0;
    m->first = l0 == 0;
    m->last = l1 == cfg->n_layer;
    m->nslots = nslots;
    m->k = k;
    m->g = g;
    m->tp = anvil_group_size(g);
    m->rank = anvil_group_rank(g);
    for (int i = 0; i < ANVIL_GPT2_NPARAM; i++) {
        int64_t shape[3] = {1, 1, 1};
        int nd = anvil_gpt2_param_shape(cfg, i, shape);
        size_t n = 1;
        for (int d = 0; d < nd; d++) n *= (size_t)shape[d];
        m->full_offsets[i + 1] = m->full_offsets[i] + n;
        if (per_layer(i)) n = n / (size_t)cfg->n_layer * (size_t)(l1 - l0);
        if (!holds(m, i)) n = 0;
        m->offsets[i + 1] = m->offsets[i] + (anvil_tp_is_split(i) ? n / (size_t)m->tp : n);
    }
    size_t bytes = anvil_tp_num_params(m) * sizeof(float);
    m->params = k->alloc(bytes);
    m->grads = k->alloc(bytes);
    m->counts = calloc((size_t)m->tp, sizeof *m->counts);
    if (!m->params || !m->grads || !m->counts) {
        anvil_fail("tensor parallel: cannot allocate %zu parameters and their gradients", anvil_tp_num_params(m));
        anvil_tp_free(m);
        return NULL;
    }
    return m;
}

anvil_tp *anvil_tp_new(const anvil_gpt2_config *cfg, const anvil_kernels *k, anvil_group *g) {
    return anvil_tp_new_stage(cfg, k, g, 0, cfg->n_layer, 1);
}

static void acts_free(anvil_tp *m) {
    for (int i = 0; i < m->nowned; i++) m->k->free(m->owned[i]);
    free(m->owned);
    free(m->slots);
    m->owned = NULL;
    m->slots = NULL;
    m->nowned = 0;
    m->act_bytes = 0;
    memset(&m->x, 0, sizeof m->x);
    m->B = m->T = 0;
}

void anvil_tp_free(anvil_tp *m) {
    if (!m) return;
    acts_free(m);
    m->k->free(m->params);
    m->k->free(m->grads);
    free(m->counts);
    free(m);
}

typedef struct {
    void *p;
    size_t bytes;
} buffer_plan;

/* Allocates a plan's buffers, writing each pointer to where p points, and
 * keeps them for acts_free. */
static int alloc_plan(anvil_tp *m, const buffer_plan *plan, int n) {
    for (int i = 0; i < n; i++) {
        void *b = m->k->alloc(plan[i].bytes);
        if (!b) return -1;
        m->owned[m->nowned++] = b;
        m->act_bytes += plan[i].bytes;
        *(void **)plan[i].p = b;
    }
    return 0;
}

/* The LayerNorm tensors, in the order sequence parallelism sums their gradients: ln1w, ln1b, ln2w, ln2b of
 * the stage's layers (the first N_LN_LAYER), then lnfw and lnfb on the last stage. */
static const int ln_tensors[] = {ANVIL_GPT2_LN1W, ANVIL_GPT2_LN1B, ANVIL_GPT2_LN2W,
                                 ANVIL_GPT2_LN2B, ANVIL_GPT2_LNFW, ANVIL_GPT2_LNFB};
enum { N_LN = sizeof ln_tensors / sizeof ln_tensors[0], N_LN_LAYER = 4 };

static size_t ln_grads_floats(const anvil_tp *m) {
    size_t n = 0;
    for (int j = 0; j < N_LN; j++) n += m->offsets[ln_tensors[j] + 1] - m->offsets[ln_tensors[j]];
    return n;
}

int anvil_tp_sp_check(int tp, int B, int T) {
    if (tp > 1 && ((int64_t)B * T) % tp)
        return anvil_fail("sequence parallel: batch*seq (%d*%d = %lld tokens) is not divisible by --tp %d", B, T,
                          (long long)B * T, tp);
    return 0;
}

void anvil_tp_set_sequence_parallel(anvil_tp *m, int on) {
    acts_free(m);
    m->sp = on && m->tp > 1;
}

/* Under sequence parallelism the residual stream, the LayerNorms' statistics and the stream's gradient
 * hold rows = N/tp tokens; the LayerNorm outputs are kept gathered (the column-parallel matrices' inputs,
 * which their weights' gradients read again). */
static int acts_ensure(anvil_tp *m, int B, int T) {
    if (m->B == B && m->T == T) return 0;
    if (m->sp && anvil_tp_sp_check(m->tp, B, T)) return -1;
    acts_free(m);
    size_t L = (size_t)m->cfg.n_layer, C = (size_t)m->cfg.n_embd, N = (size_t)B * T;
    size_t Cs = C / (size_t)m->tp, NHs = (size_t)(m->cfg.n_head / m->tp), tp = (size_t)m->tp, f = sizeof(float);
    size_t R = m->sp ? N / tp : N;
    enum { PER_SLOT = 19, SCRATCH = 9 };
    m->owned = calloc((size_t)m->nslots * PER_SLOT + SCRATCH, sizeof *m->owned);
    m->slots = calloc((size_t)m->nslots, sizeof *m->slots);
    int rc = m->owned && m->slots ? 0 : -1;
    for (int s = 0; !rc && s < m->nslots; s++) {
        struct tp_slot *a = &m->slots[s];
        buffer_plan plan[PER_SLOT] = {
            {&a->resid, (L + 1) * R * C * f}, {&a->ln1, L * N * C * f},      {&a->ln1_mean, L * R * f},
            {&a->ln1_rstd, L * R * f},        {&a->qkv, L * N * 3 * Cs * f}, {&a->atty, L * N * Cs * f},
            {&a->lse, L * NHs * N * f},       {&a->resid2, L * R * C * f},   {&a->ln2, L * N * C * f},
            {&a->ln2_mean, L * R * f},        {&a->ln2_rstd, L * R * f},     {&a->fch, L * N * 4 * Cs * f},
            {&a->lnf, N * C * f},             {&a->lnf_mean, R * f},         {&a->lnf_rstd, R * f},
            {&a->cls_lse, N * f},             {&a->dres, R * C * f},         {&a->inputs, N * sizeof(int32_t)},
            {&a->targets, N * sizeof(int32_t)},
        };
        rc = alloc_plan(m, plan, PER_SLOT);
    }
    struct tp_scratch *x = &m->x;
    buffer_plan scratch[SCRATCH] = {
        {&x->block.gelu, N * 4 * Cs * f}, {&x->block.dfch, N * 4 * Cs * f}, {&x->block.dln, N * C * f},
        {&x->block.datty, N * Cs * f},    {&x->block.dqkv, N * 3 * Cs * f}, {&x->block.partial, N * C * f},
        {&x->tlogit, N * f},              {&x->lse_all, tp * N * f},
        {&x->ln_grads, ln_grads_floats(m) * f},
    };
    if (!rc) rc = alloc_plan(m, scratch, m->sp ? SCRATCH : SCRATCH - 1);
    if (rc) {
        acts_free(m);
        return anvil_fail("tensor parallel: cannot allocate activations for %d micro-batches of B=%d T=%d",
                          m->nslots, B, T);
    }
    m->B = B;
    m->T = T;
    m->rows = (int)R;
    return 0;
}

/* A rank's shard of tensor i is a list of pieces, each a run of elements contiguous in the whole
 * tensor and in the local one: the whole tensor for a replicated one, a block's rows for a
 * column-parallel one, a row's columns for a row-parallel one. Pieces go forward in both. */
static size_t num_pieces(const anvil_tp *m, int i) {
    split_desc d = describe(&m->cfg, i);
    if (m->offsets[i + 1] == m->offsets[i]) return 0;
    if (d.split == REPLICATED) return 1;
    return d.layers * d.groups * (d.split == SPLIT_COLS ? d.rows : 1);
}

static void piece_at(const anvil_tp *m, int i, int rank, size_t p, size_t *whole, size_t *local, size_t *len) {
    split_desc d = describe(&m->cfg, i);
    /* A stage's layers start l0 layers into the whole stacked tensor. */
    size_t shift = per_layer(i) ? (size_t)m->l0 * ((m->full_offsets[i + 1] - m->full_offsets[i]) /
                                                   (size_t)m->full.n_layer)
                                : 0;
    size_t tp = (size_t)m->tp, r = (size_t)rank;
    if (d.split == REPLICATED) {
        *whole = shift;
        *local = 0;
        *len = m->offsets[i + 1] - m->offsets[i];
    } else if (d.split == SPLIT_ROWS) {
        size_t lrows = d.rows / tp;
        *whole = shift + (p * d.rows + r * lrows) * d.cols;
        *local = p * lrows * d.cols;
        *len = lrows * d.cols;
    } else {
        size_t lcols = d.cols / tp;
        *whole = shift + p * d.cols + r * lcols;
        *local = p * lcols;
        *len = lcols;
    }
}

/* Copies rank's shard of tensor i between a whole tensor and a local one (host memory). */
static void shard_copy(const anvil_tp *m, int i, int rank, float *whole, float *local, int to_local) {
    for (size_t p = 0, n = num_pieces(m, i); p < n; p++) {
        size_t w, l, len;
        piece_at(m, i, rank, p, &w, &l, &len);
        if (to_local) memcpy(local + l, whole + w, len * sizeof(float));
        else memcpy(whole + w, local + l, len * sizeof(float));
    }
}

size_t anvil_tp_num_blocks(const anvil_tp *m, int i) {
    split_desc d = describe(&m->cfg, i);
    if (!owned(m, i) || num_pieces(m, i) == 0) return 0;
    if (d.split == REPLICATED) return m->rank == 0;
    /* A row-parallel shard's pieces are one per row, a row apart: one block. */
    return d.split == SPLIT_COLS ? 1 : num_pieces(m, i);
}

void anvil_tp_block(const anvil_tp *m, int i, size_t p, size_t *whole, size_t *local, size_t *rows, size_t *cols) {
    int block = describe(&m->cfg, i).split == SPLIT_COLS;
    piece_at(m, i, m->rank, block ? 0 : p, whole, local, cols);
    *rows = block ? num_pieces(m, i) : 1;
}

/* The most floats anvil_tp_fill reads at once. */
#define FILL_CHUNK ((size_t)1 << 16)

int anvil_tp_fill(anvil_tp *m, anvil_tp_read_fn read, void *ctx, float *local) {
    float *host = malloc(FILL_CHUNK * sizeof(float));
    if (!host) return anvil_fail("tensor parallel: out of memory");
    int rc = 0;
    for (int i = 0; !rc && i < ANVIL_GPT2_NPARAM; i++)
        for (size_t p = 0, np = num_pieces(m, i); !rc && p < np; p++) {
            size_t w, l, len;
            piece_at(m, i, m->rank, p, &w, &l, &len);
            for (size_t at = 0; !rc && at < len; at += FILL_CHUNK) {
                size_t n = len - at < FILL_CHUNK ? len - at : FILL_CHUNK;
                if (!(rc = read(ctx, i, w + at, n, host)))
                    m->k->upload(local + m->offsets[i] + l + at, host, n * sizeof(float));
            }
        }
    free(host);
    return rc;
}

static int read_init(void *ctx, int i, size_t off, size_t n, float *dst) {
    return anvil_gpt2_init_stream_read(ctx, i, off, n, dst);
}

int anvil_tp_init_weights(anvil_tp *m, uint64_t seed) {
    anvil_gpt2_init_stream s;
    anvil_gpt2_init_stream_start(&s, &m->full, seed);
    return anvil_tp_fill(m, read_init, &s, m->params);
}

int anvil_tp_shard(anvil_tp *m, const float *full, float *local) {
    size_t n = anvil_tp_num_params(m), nfull = m->full_offsets[ANVIL_GPT2_NPARAM];
    float *whole = malloc(nfull * sizeof(float)), *host = malloc(n * sizeof(float));
    if (!whole || !host) {
        free(whole);
        free(host);
        return anvil_fail("tensor parallel: out of memory sharding %zu parameters", nfull);
    }
    m->k->download(whole, full, nfull * sizeof(float));
    for (int i = 0; i < ANVIL_GPT2_NPARAM; i++)
        shard_copy(m, i, m->rank, whole + m->full_offsets[i], host + m->offsets[i], 1);
    m->k->upload(local, host, n * sizeof(float));
    free(whole);
    free(host);
    return 0;
}

int anvil_tp_gather_tensor(anvil_tp *m, int i, const float *local, float *whole) {
    size_t n = m->offsets[i + 1] - m->offsets[i], tp = (size_t)m->tp;
    if (!owned(m, i) || !n) return 0;
    float *all = malloc((describe(&m->cfg, i).split == REPLICATED ? 1 : tp) * n * sizeof(float));
    if (!all) return anvil_fail("tensor parallel: out of memory gathering '%s'", anvil_gpt2_param_names[i]);
    m->k->download(all, local + m->offsets[i], n * sizeof(float));
    int rc = 0;
    if (describe(&m->cfg, i).split == REPLICATED) {
        shard_copy(m, i, m->rank, whole, all, 0);
    } else {
        size_t *counts = malloc(tp * sizeof *counts);
        float *mine = malloc(n * sizeof(float));
        if (!counts || !mine) rc = anvil_fail("tensor parallel: out of memory gathering '%s'", anvil_gpt2_param_names[i]);
        for (size_t r = 0; !rc && r < tp; r++) counts[r] = n;
        if (!rc) {
            memcpy(mine, all, n * sizeof(float));
            m->bytes += tp * n * sizeof(float);
            rc = anvil_allgather(m->g, mine, all, counts, ANVIL_F32, "tp gather tensor");
        }
        for (int r = 0; !rc && r < m->tp; r++) shard_copy(m, i, r, whole, all + (size_t)r * n, 0);
        free(counts);
        free(mine);
    }
    free(all);
    return rc;
}

void anvil_tp_zero_grad(anvil_tp *m) { m->k->zero(m->grads, anvil_tp_num_params(m) * sizeof(float)); }

static int allreduce(anvil_tp *m, float *buf, size_t n, const char *what) {
    m->bytes += n * sizeof(float);
    return anvil_allreduce(m->g, buf, n, ANVIL_F32, what);
}

/* Sequence parallelism's collectives over the tokens, rank r's rows at r * n_local floats. Each counts
 * the whole [N,C] it assembles or reduces: on a ring a reduce-scatter and an all-gather each move half
 * of what an all-reduce of the same buffer moves. */
static int gather_rows(anvil_tp *m, const float *local, float *full, size_t n_local, const char *what) {
    for (int r = 0; r < m->tp; r++) m->counts[r] = n_local;
    m->bytes += (uint64_t)m->tp * n_local * sizeof(float);
    return anvil_allgather(m->g, local, full, m->counts, ANVIL_F32, what);
}

static int scatter_rows(anvil_tp *m, const float *full, float *local, size_t n_local, const char *what) {
    for (int r = 0; r < m->tp; r++) m->counts[r] = n_local;
    m->bytes += (uint64_t)m->tp * n_local * sizeof(float);
    return anvil_reduce_scatter(m->g, full, local, m->counts, ANVIL_F32, what);
}

static float *P(anvil_tp *m, int i) { return m->params + m->offsets[i]; }
static float *G(anvil_tp *m, int i) { return m->grads + m->offsets[i]; }

/* The vocabulary shard: rows [v0, v0 + Vs) of wte, the first Vr of them real. */
static void vocab_shard(const anvil_tp *m, int *v0, int *Vr, int *Vs) {
    *Vs = m->cfg.padded_vocab / m->tp;
    *v0 = m->rank * *Vs;
    int real = m->cfg.vocab_size - *v0;
    *Vr = real < 0 ? 0 : real > *Vs ? *Vs : real;
}

static int count_targets(const int32_t *targets, size_t n) {
    int c = 0;
    for (size_t i = 0; i < n; i++) c += targets[i] >= 0;
    return c;
}

static int prepare(anvil_tp *m, struct tp_slot **slot, int s, const int32_t *inputs, const int32_t *targets, int B,
                   int T) {
    if (anvil_gpt2_batch_check(&m->cfg, B, T)) return -1;
    if (s < 0 || s >= m->nslots)
        return anvil_fail("tensor parallel: micro-batch slot %d of %d", s, m->nslots);
    for (size_t i = 0; i < (size_t)B * T; i++) {
        if (inputs[i] < 0 || inputs[i] >= m->cfg.vocab_size)
            return anvil_fail("tensor parallel: input token %d at position %zu is outside the vocabulary (%d)",
                              inputs[i], i, m->cfg.vocab_size);
        if (targets[i] >= m->cfg.vocab_size)
            return anvil_fail("tensor parallel: target token %d at position %zu is outside the vocabulary (%d)",
                              targets[i], i, m->cfg.vocab_size);
    }
    if (acts_ensure(m, B, T)) return -1;
    struct tp_slot *a = *slot = &m->slots[s];
    m->k->upload(a->inputs, inputs, (size_t)B * T * sizeof(int32_t));
    m->k->upload(a->targets, targets, (size_t)B * T * sizeof(int32_t));
    a->count = count_targets(targets, (size_t)B * T);
    return 0;
}

static int reduce(void *ctx, float *buf, size_t n, const char *what) { return allreduce(ctx, buf, n, what); }
static int gather(void *ctx, const float *local, float *full, size_t n, const char *what) {
    return gather_rows(ctx, local, full, n, what);
}
static int scatter(void *ctx, const float *full, float *local, size_t n, const char *what) {
    return scatter_rows(ctx, full, local, n, what);
}

static anvil_gpt2_reduce block_hook(anvil_tp *m) {
    if (m->sp) return (anvil_gpt2_reduce){m, NULL, gather, scatter, m->rows};
    return (anvil_gpt2_reduce){m, reduce, NULL, NULL, m->rows};
}

/* Layer l's activations within a slot's stacked buffers, at the shard's widths. */
static anvil_gpt2_layer_acts layer_acts(const anvil_tp *m, struct tp_slot *a, int l) {
    size_t N = (size_t)m->B * m->T, NC = N * (size_t)m->cfg.n_embd, NCs = NC / (size_t)m->tp, L = (size_t)l;
    size_t NHs = (size_t)(m->cfg.n_head / m->tp), R = (size_t)m->rows, RC = R * (size_t)m->cfg.n_embd;
    return (anvil_gpt2_layer_acts){a->resid + L * RC,    a->ln1 + L * NC,      a->ln1_mean + L * R,
                                   a->ln1_rstd + L * R,  a->qkv + L * 3 * NCs, a->atty + L * NCs,
                                   a->lse + L * NHs * N, a->resid2 + L * RC,   a->ln2 + L * NC,
                                   a->ln2_mean + L * R,  a->ln2_rstd + L * R,  a->fch + L * 4 * NCs,
                                   a->resid + (L + 1) * RC};
}

/* Layer l's slices of the per-layer tensors within base (the parameters or the gradients). */
static void layer_view(const anvil_tp *m, float *base, int l, anvil_gpt2_view *v) {
    memset(v, 0, sizeof *v);
    for (int i = ANVIL_GPT2_LN1W; i <= ANVIL_GPT2_FCPROJB; i++)
        v->t[i] = base + m->offsets[i] + (size_t)l * ((m->offsets[i + 1] - m->offsets[i]) / (size_t)m->cfg.n_layer);
}

/* The embedding (first stage) and the stage's layers: every rank of the
 * group ends with the same resid[L] (under sequence parallelism, with its
 * rows of it). */
static int forward_body(anvil_tp *m, struct tp_slot *a) {
    const anvil_kernels *k = m->k;
    int B = m->B, T = m->T, L = m->cfg.n_layer, C = m->cfg.n_embd, N = B * T, Cs = C / m->tp;
    size_t NC = (size_t)N * C;
    if (m->first) {
        int v0, Vr, Vs;
        vocab_shard(m, &v0, &Vr, &Vs);
        /* wpe rides along on rank 0 only, so the sum adds it once. */
        float *emb = m->sp ? m->x.block.partial : a->resid;
        k->encoder_shard_forward(emb, a->inputs, P(m, ANVIL_GPT2_WTE), m->rank ? NULL : P(m, ANVIL_GPT2_WPE), B, T, C,
                                 v0, Vs);
        if (m->sp ? scatter_rows(m, emb, a->resid, (size_t)m->rows * C, "sp embedding forward")
                  : allreduce(m, a->resid, NC, "tp embedding forward"))
            return -1;
    }
    anvil_gpt2_block_shape shape = {B, T, C, Cs, m->cfg.n_head / m->tp};
    anvil_gpt2_reduce r = block_hook(m);
    for (int l = 0; l < L; l++) {
        anvil_gpt2_view w;
        anvil_gpt2_layer_acts la = layer_acts(m, a, l);
        layer_view(m, m->params, l, &w);
        /* Row-parallel: the projections' biases are added once, by rank 0, into the sum. */
        if (m->rank) w.t[ANVIL_GPT2_ATTPROJB] = w.t[ANVIL_GPT2_FCPROJB] = NULL;
        if (anvil_gpt2_block_forward(k, &shape, &w, &la, &m->x.block, &r)) return -1;
    }
    return 0;
}

/* The final LayerNorm and the vocabulary-parallel loss: each shard's
 * log-sum-exp and target logit, combined across the group. Leaves the
 * global log-sum-exp in a->cls_lse for the backward and sets *loss to the
 * mean over targets >= 0. The combination is N values per shard, done on
 * the host in double. */
static int head_forward(anvil_tp *m, struct tp_slot *a, const int32_t *targets, float *loss) {
    const anvil_kernels *k = m->k;
    struct tp_scratch *x = &m->x;
    int N = m->B * m->T, C = m->cfg.n_embd, L = m->cfg.n_layer, v0, Vr, Vs, tp = m->tp;
    size_t RC = (size_t)m->rows * C;
    /* Under sequence parallelism the LayerNorm runs on this rank's rows and the LM head on all of them. */
    float *lnf = m->sp ? x->block.partial : a->lnf;
    k->layernorm_forward(lnf, a->lnf_mean, a->lnf_rstd, a->resid + (size_t)L * RC, P(m, ANVIL_GPT2_LNFW),
                         P(m, ANVIL_GPT2_LNFB), m->rows, C);
    if (m->sp && gather_rows(m, lnf, a->lnf, RC, "sp head gather")) return -1;
    vocab_shard(m, &v0, &Vr, &Vs);
    if (k->classifier_shard_stats(a->cls_lse, x->tlogit, a->lnf, P(m, ANVIL_GPT2_WTE), a->targets, N, C, v0, Vr, Vs))
        return -1;
    size_t *counts = malloc((size_t)tp * sizeof *counts);
    float *host = malloc(((size_t)tp + 2) * N * sizeof(float));
    if (!counts || !host) {
        free(counts);
        free(host);
        return anvil_fail("tensor parallel: out of memory in the loss");
    }
    for (int r = 0; r < tp; r++) counts[r] = (size_t)N;
    m->bytes += (size_t)tp * N * sizeof(float);
    int rc = anvil_allgather(m->g, a->cls_lse, x->lse_all, counts, ANVIL_F32, "tp loss log-sum-exp");
    if (!rc) rc = allreduce(m, x->tlogit, (size_t)N, "tp loss target logit");
    if (!rc) {
        float *all = host, *tl = host + (size_t)tp * N, *lse = tl + N;
        k->download(all, x->lse_all, (size_t)tp * N * sizeof(float));
        k->download(tl, x->tlogit, (size_t)N * sizeof(float));
        double sum = 0.0;
        for (int i = 0; i < N; i++) {
            float mx = -INFINITY;
            for (int r = 0; r < tp; r++) mx = all[(size_t)r * N + i] > mx ? all[(size_t)r * N + i] : mx;
            double s = 0.0;
            for (int r = 0; r < tp; r++) s += exp((double)all[(size_t)r * N + i] - mx);
            lse[i] = (float)(mx + log(s));
            if (targets[i] >= 0) sum += (double)lse[i] - tl[i];
        }
        k->upload(a->cls_lse, lse, (size_t)N * sizeof(float));
        *loss = a->count ? (float)(sum / a->count) : 0.0f;
    }
    free(counts);
    free(host);
    return rc;
}

int anvil_tp_stage_forward(anvil_tp *m, int slot, const int32_t *inputs, const int32_t *targets, int B, int T,
                           float *loss) {
    struct tp_slot *a = NULL;
    if (prepare(m, &a, slot, inputs, targets, B, T) || forward_body(m, a)) return -1;
    return m->last ? head_forward(m, a, targets, loss) : 0;
}

/* Sequence parallelism: the LayerNorm gradients of one backward, summed over the group and added to the
 * gradients, the same on every rank (so the norm counts them once, as any replicated tensor). */
static int sum_ln_grads(anvil_tp *m) {
    if (allreduce(m, m->x.ln_grads, ln_grads_floats(m), "sp layernorm gradients")) return -1;
    for (size_t j = 0, at = 0; j < N_LN; j++) {
        int i = ln_tensors[j];
        size_t n = m->offsets[i + 1] - m->offsets[i];
        m->k->add_inplace(G(m, i), m->x.ln_grads + at, n);
        at += n;
    }
    return 0;
}

int anvil_tp_stage_backward(anvil_tp *m, int slot, float grad_scale) {
    const anvil_kernels *k = m->k;
    struct tp_slot *a = &m->slots[slot];
    struct tp_scratch *x = &m->x;
    int B = m->B, T = m->T, N = B * T, L = m->cfg.n_layer, C = m->cfg.n_embd, Cs = C / m->tp;
    int v0, Vr, Vs;
    size_t NC = (size_t)N * C;
    vocab_shard(m, &v0, &Vr, &Vs);
    size_t RC = (size_t)m->rows * C;
    /* Under sequence parallelism each rank's LayerNorm gradients cover its rows only: they go to
     * ln_grads first, to be summed over the group and added to the gradients (which may hold earlier
     * micro-batches' sums already). */
    float *ln_g[ANVIL_GPT2_NPARAM] = {0};
    for (size_t j = 0, at = 0; j < N_LN; j++) {
        int i = ln_tensors[j];
        size_t n = m->offsets[i + 1] - m->offsets[i];
        ln_g[i] = m->sp ? x->ln_grads + at : G(m, i);
        at += n;
    }
    if (m->sp) k->zero(x->ln_grads, ln_grads_floats(m) * sizeof(float));
    if (m->last) {
        float dscale = a->count ? grad_scale / (float)a->count : 0.0f;
        if (k->classifier_shard_backward(x->block.dln, G(m, ANVIL_GPT2_WTE), a->lnf, P(m, ANVIL_GPT2_WTE), a->cls_lse,
                                         a->targets, N, C, v0, Vr, Vs, dscale))
            return -1;
        float *dlnf = m->sp ? x->block.partial : x->block.dln;
        if (m->sp ? scatter_rows(m, x->block.dln, dlnf, RC, "sp loss backward")
                  : allreduce(m, x->block.dln, NC, "tp loss backward"))
            return -1;
        k->zero(a->dres, RC * sizeof(float));
        k->layernorm_backward(a->dres, ln_g[ANVIL_GPT2_LNFW], ln_g[ANVIL_GPT2_LNFB], dlnf, a->resid + (size_t)L * RC,
                              P(m, ANVIL_GPT2_LNFW), a->lnf_mean, a->lnf_rstd, m->rows, C);
    }
    anvil_gpt2_block_shape shape = {B, T, C, Cs, m->cfg.n_head / m->tp};
    anvil_gpt2_reduce r = block_hook(m);
    for (int l = L - 1; l >= 0; l--) {
        anvil_gpt2_view w, g;
        anvil_gpt2_layer_acts la = layer_acts(m, a, l);
        layer_view(m, m->params, l, &w);
        layer_view(m, m->grads, l, &g);
        if (m->sp)
            for (int j = 0; j < N_LN_LAYER; j++) {
                int i = ln_tensors[j];
                g.t[i] = ln_g[i] + (size_t)l * C;
            }
        if (anvil_gpt2_block_backward(k, &shape, &w, &g, &la, a->dres, &m->x.block, &r)) return -1;
    }
    if (m->first) {
        /* The embedding's rows are the vocabulary shard's, wherever their tokens sit: every token's gradient. */
        float *demb = m->sp ? x->block.partial : a->dres;
        if (m->sp && gather_rows(m, a->dres, demb, RC, "sp embedding backward")) return -1;
        k->encoder_shard_backward(G(m, ANVIL_GPT2_WTE), G(m, ANVIL_GPT2_WPE), demb, a->inputs, B, T, C, v0, Vs);
    }
    return m->sp ? sum_ln_grads(m) : 0;
}

float *anvil_tp_stage_input(anvil_tp *m, int slot) { return m->slots[slot].resid; }
float *anvil_tp_stage_output(anvil_tp *m, int slot) {
    return m->slots[slot].resid + (size_t)m->cfg.n_layer * m->rows * m->cfg.n_embd;
}
size_t anvil_tp_stage_floats(const anvil_tp *m) { return (size_t)m->rows * m->cfg.n_embd; }
float *anvil_tp_stage_grad(anvil_tp *m, int slot) { return m->slots[slot].dres; }

int anvil_tp_stage_ready(anvil_tp *m, int B, int T) { return acts_ensure(m, B, T); }

int anvil_tp_forward(anvil_tp *m, const int32_t *inputs, const int32_t *targets, int B, int T, float *loss) {
    return anvil_tp_stage_forward(m, 0, inputs, targets, B, T, loss);
}

int anvil_tp_forward_backward(anvil_tp *m, const int32_t *inputs, const int32_t *targets, int B, int T,
                              float grad_scale, float *loss) {
    if (anvil_tp_stage_forward(m, 0, inputs, targets, B, T, loss)) return -1;
    return anvil_tp_stage_backward(m, 0, grad_scale);
}

int anvil_tp_owns(const anvil_tp *m, int i) { return owned(m, i); }

int anvil_tp_grad_sumsq(anvil_tp *m, double *sumsq) {
    double split = 0.0, replicated = 0.0;
    for (int i = 0; i < ANVIL_GPT2_NPARAM; i++) {
        if (!owned(m, i)) continue;
        double s = m->k->sumsq(G(m, i), m->offsets[i + 1] - m->offsets[i]);
        if (anvil_tp_is_split(i)) split += s;
        else replicated += s;
    }
    /* Replicated tensors have the same gradient on every rank: counted once, not tp times. */
    if (anvil_allreduce(m->g, &split, 1, ANVIL_F64, "tp gradient norm")) return -1;
    *sumsq = split + replicated;
    return 0;
}
