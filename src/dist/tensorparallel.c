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

struct tp_acts {
    float *resid, *ln1, *ln1_mean, *ln1_rstd, *qkv, *atty, *lse, *resid2, *ln2, *ln2_mean, *ln2_rstd, *fch;
    float *lnf, *lnf_mean, *lnf_rstd, *gelu, *dfch, *dres, *dln, *datty, *dqkv, *partial;
    float *cls_lse, *tlogit, *lse_all;
    float **all[32];
    int nall;
    int32_t *inputs, *targets;
};

struct anvil_tp {
    anvil_gpt2_config cfg;
    const anvil_kernels *k;
    anvil_group *g;
    int tp, rank;
    size_t full_offsets[ANVIL_GPT2_NPARAM + 1];
    size_t offsets[ANVIL_GPT2_NPARAM + 1];
    float *params, *grads;
    int B, T;
    struct tp_acts a;
    uint64_t bytes;
};

size_t anvil_tp_num_params(const anvil_tp *m) { return m->offsets[ANVIL_GPT2_NPARAM]; }
const size_t *anvil_tp_offsets(const anvil_tp *m) { return m->offsets; }
float *anvil_tp_params(anvil_tp *m) { return m->params; }
float *anvil_tp_grads(anvil_tp *m) { return m->grads; }
uint64_t anvil_tp_bytes(const anvil_tp *m) { return m->bytes; }

anvil_tp *anvil_tp_new(const anvil_gpt2_config *cfg, const anvil_kernels *k, anvil_group *g) {
    anvil_tp *m = calloc(1, sizeof *m);
    if (!m) {
        anvil_fail("tensor parallel: out of memory");
        return NULL;
    }
    m->cfg = *cfg;
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
        m->offsets[i + 1] = m->offsets[i] + (anvil_tp_is_split(i) ? n / (size_t)m->tp : n);
    }
    size_t bytes = anvil_tp_num_params(m) * sizeof(float);
    m->params = k->alloc(bytes);
    m->grads = k->alloc(bytes);
    if (!m->params || !m->grads) {
        anvil_fail("tensor parallel: cannot allocate %zu parameters and their gradients", anvil_tp_num_params(m));
        anvil_tp_free(m);
        return NULL;
    }
    return m;
}

static void acts_free(anvil_tp *m) {
    struct tp_acts *a = &m->a;
    for (int i = 0; i < a->nall; i++) {
        m->k->free(*a->all[i]);
        *a->all[i] = NULL;
    }
    a->nall = 0;
    m->k->free(a->inputs);
    m->k->free(a->targets);
    a->inputs = a->targets = NULL;
    m->B = m->T = 0;
}

void anvil_tp_free(anvil_tp *m) {
    if (!m) return;
    acts_free(m);
    m->k->free(m->params);
    m->k->free(m->grads);
    free(m);
}

static int acts_ensure(anvil_tp *m, int B, int T) {
    if (m->B == B && m->T == T) return 0;
    acts_free(m);
    struct tp_acts *a = &m->a;
    size_t L = (size_t)m->cfg.n_layer, C = (size_t)m->cfg.n_embd, N = (size_t)B * T;
    size_t Cs = C / (size_t)m->tp, NHs = (size_t)(m->cfg.n_head / m->tp), tp = (size_t)m->tp;
    struct {
        float **p;
        size_t n;
    } plan[] = {
        {&a->resid, (L + 1) * N * C}, {&a->ln1, L * N * C},      {&a->ln1_mean, L * N},    {&a->ln1_rstd, L * N},
        {&a->qkv, L * N * 3 * Cs},    {&a->atty, L * N * Cs},    {&a->lse, L * NHs * N},   {&a->resid2, L * N * C},
        {&a->ln2, L * N * C},         {&a->ln2_mean, L * N},     {&a->ln2_rstd, L * N},    {&a->fch, L * N * 4 * Cs},
        {&a->lnf, N * C},             {&a->lnf_mean, N},         {&a->lnf_rstd, N},        {&a->gelu, N * 4 * Cs},
        {&a->dfch, N * 4 * Cs},       {&a->dres, N * C},         {&a->dln, N * C},         {&a->datty, N * Cs},
        {&a->dqkv, N * 3 * Cs},       {&a->partial, N * C},      {&a->cls_lse, N},         {&a->tlogit, N},
        {&a->lse_all, tp * N},
    };
    for (size_t i = 0; i < sizeof plan / sizeof plan[0]; i++) {
        *plan[i].p = m->k->alloc(plan[i].n * sizeof(float));
        a->all[a->nall++] = plan[i].p;
        if (!*plan[i].p) {
            acts_free(m);
            return anvil_fail("tensor parallel: cannot allocate activations for B=%d T=%d", B, T);
        }
    }
    a->inputs = m->k->alloc(N * sizeof(int32_t));
    a->targets = m->k->alloc(N * sizeof(int32_t));
    if (!a->inputs || !a->targets) {
        acts_free(m);
        return anvil_fail("tensor parallel: cannot allocate the token buffers");
    }
    m->B = B;
    m->T = T;
    return 0;
}

/* Copies rank's shard of tensor i between a whole tensor and a local one (host memory). */
static void shard_copy(const anvil_tp *m, int i, int rank, float *whole, float *local, int to_local) {
    split_desc d = describe(&m->cfg, i);
    if (d.split == REPLICATED) {
        size_t n = m->full_offsets[i + 1] - m->full_offsets[i];
        if (to_local) memcpy(local, whole, n * sizeof(float));
        else memcpy(whole, local, n * sizeof(float));
        return;
    }
    size_t tp = (size_t)m->tp, r = (size_t)rank;
    size_t lrows = d.split == SPLIT_ROWS ? d.rows / tp : d.rows;
    size_t lcols = d.split == SPLIT_COLS ? d.cols / tp : d.cols;
    size_t row0 = d.split == SPLIT_ROWS ? r * lrows : 0, col0 = d.split == SPLIT_COLS ? r * lcols : 0;
    for (size_t b = 0; b < d.layers * d.groups; b++)
        for (size_t j = 0; j < lrows; j++) {
            float *w = whole + (b * d.rows + row0 + j) * d.cols + col0;
            float *l = local + (b * lrows + j) * lcols;
            if (to_local) memcpy(l, w, lcols * sizeof(float));
            else memcpy(w, l, lcols * sizeof(float));
        }
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

int anvil_tp_unshard(anvil_tp *m, const float *local, float *full) {
    size_t n = anvil_tp_num_params(m), tp = (size_t)m->tp, nfull = m->full_offsets[ANVIL_GPT2_NPARAM];
    float *mine = malloc(n * sizeof(float)), *all = malloc(tp * n * sizeof(float));
    float *whole = malloc(nfull * sizeof(float));
    size_t *counts = malloc(tp * sizeof *counts);
    int rc = -1;
    if (!mine || !all || !whole || !counts) {
        anvil_fail("tensor parallel: out of memory gathering %zu parameters", nfull);
        goto out;
    }
    m->k->download(mine, local, n * sizeof(float));
    for (size_t r = 0; r < tp; r++) counts[r] = n;
    m->bytes += tp * n * sizeof(float);
    if ((rc = anvil_allgather(m->g, mine, all, counts, ANVIL_F32, "tp gather parameters"))) goto out;
    for (int i = 0; i < ANVIL_GPT2_NPARAM; i++)
        for (int r = 0; r < m->tp; r++)
            shard_copy(m, i, r, whole + m->full_offsets[i], all + (size_t)r * n + m->offsets[i], 0);
    m->k->upload(full, whole, nfull * sizeof(float));
out:
    free(mine);
    free(all);
    free(whole);
    free(counts);
    return rc;
}

void anvil_tp_zero_grad(anvil_tp *m) { m->k->zero(m->grads, anvil_tp_num_params(m) * sizeof(float)); }

static int allreduce(anvil_tp *m, float *buf, size_t n, const char *what) {
    m->bytes += n * sizeof(float);
    return anvil_allreduce(m->g, buf, n, ANVIL_F32, what);
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

static int prepare(anvil_tp *m, const int32_t *inputs, const int32_t *targets, int B, int T) {
    if (anvil_gpt2_batch_check(&m->cfg, B, T)) return -1;
    for (size_t i = 0; i < (size_t)B * T; i++) {
        if (inputs[i] < 0 || inputs[i] >= m->cfg.vocab_size)
            return anvil_fail("tensor parallel: input token %d at position %zu is outside the vocabulary (%d)",
                              inputs[i], i, m->cfg.vocab_size);
        if (targets[i] >= m->cfg.vocab_size)
            return anvil_fail("tensor parallel: target token %d at position %zu is outside the vocabulary (%d)",
                              targets[i], i, m->cfg.vocab_size);
    }
    if (acts_ensure(m, B, T)) return -1;
    m->k->upload(m->a.inputs, inputs, (size_t)B * T * sizeof(int32_t));
    m->k->upload(m->a.targets, targets, (size_t)B * T * sizeof(int32_t));
    return 0;
}

/* The forward through the final LayerNorm: every rank ends with the same lnf. */
static int forward_body(anvil_tp *m, int B, int T) {
    const anvil_kernels *k = m->k;
    struct tp_acts *a = &m->a;
    int L = m->cfg.n_layer, C = m->cfg.n_embd, N = B * T, Cs = C / m->tp, NHs = m->cfg.n_head / m->tp;
    size_t NC = (size_t)N * C, NCs = (size_t)N * Cs, L1 = (size_t)L;
    int v0, Vr, Vs;
    vocab_shard(m, &v0, &Vr, &Vs);
    /* wpe rides along on rank 0 only, so the all-reduce adds it once. */
    k->encoder_shard_forward(a->resid, a->inputs, P(m, ANVIL_GPT2_WTE), m->rank ? NULL : P(m, ANVIL_GPT2_WPE), B, T,
                             C, v0, Vs);
    if (allreduce(m, a->resid, NC, "tp embedding forward")) return -1;
    for (int l = 0; l < L; l++) {
        float *res = a->resid + l * NC, *ln1 = a->ln1 + l * NC, *qkv = a->qkv + l * 3 * NCs;
        float *atty = a->atty + l * NCs, *res2 = a->resid2 + l * NC, *ln2 = a->ln2 + l * NC;
        float *fch = a->fch + l * 4 * NCs, *out = a->resid + (l + 1) * NC;
        size_t lc = (size_t)l * C, lq = (size_t)l * 3 * Cs * C, lf = (size_t)l * 4 * Cs * C;
        k->layernorm_forward(ln1, a->ln1_mean + (size_t)l * N, a->ln1_rstd + (size_t)l * N, res,
                             P(m, ANVIL_GPT2_LN1W) + lc, P(m, ANVIL_GPT2_LN1B) + lc, N, C);
        k->matmul_forward(qkv, ln1, P(m, ANVIL_GPT2_QKVW) + lq, P(m, ANVIL_GPT2_QKVB) + (size_t)l * 3 * Cs, N, C,
                          3 * Cs, 0);
        if (k->attention_forward(atty, a->lse + (size_t)l * NHs * N, qkv, B, T, Cs, NHs)) return -1;
        /* Row-parallel: partial products summed across the group; the bias is added once, by rank 0. */
        k->matmul_forward(a->partial, atty, P(m, ANVIL_GPT2_ATTPROJW) + (size_t)l * C * Cs,
                          m->rank ? NULL : P(m, ANVIL_GPT2_ATTPROJB) + lc, N, Cs, C, 0);
        if (allreduce(m, a->partial, NC, "tp attention forward")) return -1;
        k->copy(res2, res, NC);
        k->add_inplace(res2, a->partial, NC);
        k->layernorm_forward(ln2, a->ln2_mean + (size_t)l * N, a->ln2_rstd + (size_t)l * N, res2,
                             P(m, ANVIL_GPT2_LN2W) + lc, P(m, ANVIL_GPT2_LN2B) + lc, N, C);
        k->matmul_forward(fch, ln2, P(m, ANVIL_GPT2_FCW) + lf, P(m, ANVIL_GPT2_FCB) + (size_t)l * 4 * Cs, N, C,
                          4 * Cs, 0);
        k->gelu_forward(a->gelu, fch, 4 * NCs);
        k->matmul_forward(a->partial, a->gelu, P(m, ANVIL_GPT2_FCPROJW) + lf,
                          m->rank ? NULL : P(m, ANVIL_GPT2_FCPROJB) + lc, N, 4 * Cs, C, 0);
        if (allreduce(m, a->partial, NC, "tp mlp forward")) return -1;
        k->copy(out, res2, NC);
        k->add_inplace(out, a->partial, NC);
    }
    k->layernorm_forward(a->lnf, a->lnf_mean, a->lnf_rstd, a->resid + L1 * NC, P(m, ANVIL_GPT2_LNFW),
                         P(m, ANVIL_GPT2_LNFB), N, C);
    return 0;
}

/* The vocabulary-parallel loss: each shard's log-sum-exp and target logit,
 * combined across the group. Leaves the global log-sum-exp in a->cls_lse for
 * the backward and sets *loss to the mean over targets >= 0. The combination
 * is N values per shard, done on the host in double. */
static int head_forward(anvil_tp *m, const int32_t *targets, int N, float *loss) {
    const anvil_kernels *k = m->k;
    struct tp_acts *a = &m->a;
    int v0, Vr, Vs, tp = m->tp;
    vocab_shard(m, &v0, &Vr, &Vs);
    if (k->classifier_shard_stats(a->cls_lse, a->tlogit, a->lnf, P(m, ANVIL_GPT2_WTE), a->targets, N,
                                  m->cfg.n_embd, v0, Vr, Vs))
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
    int rc = anvil_allgather(m->g, a->cls_lse, a->lse_all, counts, ANVIL_F32, "tp loss log-sum-exp");
    if (!rc) rc = allreduce(m, a->tlogit, (size_t)N, "tp loss target logit");
    if (!rc) {
        float *all = host, *tl = host + (size_t)tp * N, *lse = tl + N;
        k->download(all, a->lse_all, (size_t)tp * N * sizeof(float));
        k->download(tl, a->tlogit, (size_t)N * sizeof(float));
        double sum = 0.0;
        int count = 0;
        for (int i = 0; i < N; i++) {
            float mx = -INFINITY;
            for (int r = 0; r < tp; r++) mx = all[(size_t)r * N + i] > mx ? all[(size_t)r * N + i] : mx;
            double s = 0.0;
            for (int r = 0; r < tp; r++) s += exp((double)all[(size_t)r * N + i] - mx);
            lse[i] = (float)(mx + log(s));
            if (targets[i] >= 0) {
                sum += (double)lse[i] - tl[i];
                count++;
            }
        }
        k->upload(a->cls_lse, lse, (size_t)N * sizeof(float));
        *loss = count ? (float)(sum / count) : 0.0f;
    }
    free(counts);
    free(host);
    return rc;
}

static int count_targets(const int32_t *targets, size_t n) {
    int c = 0;
    for (size_t i = 0; i < n; i++) c += targets[i] >= 0;
    return c;
}

int anvil_tp_forward(anvil_tp *m, const int32_t *inputs, const int32_t *targets, int B, int T, float *loss) {
    if (prepare(m, inputs, targets, B, T) || forward_body(m, B, T)) return -1;
    return head_forward(m, targets, B * T, loss);
}

int anvil_tp_forward_backward(anvil_tp *m, const int32_t *inputs, const int32_t *targets, int B, int T,
                              float grad_scale, float *loss) {
    if (prepare(m, inputs, targets, B, T) || forward_body(m, B, T)) return -1;
    int N = B * T;
    if (head_forward(m, targets, N, loss)) return -1;
    const anvil_kernels *k = m->k;
    struct tp_acts *a = &m->a;
    int L = m->cfg.n_layer, C = m->cfg.n_embd, Cs = C / m->tp, NHs = m->cfg.n_head / m->tp;
    size_t NC = (size_t)N * C, NCs = (size_t)N * Cs;
    int count = count_targets(targets, (size_t)N), v0, Vr, Vs;
    float dscale = count ? grad_scale / (float)count : 0.0f;
    vocab_shard(m, &v0, &Vr, &Vs);

    if (k->classifier_shard_backward(a->dln, G(m, ANVIL_GPT2_WTE), a->lnf, P(m, ANVIL_GPT2_WTE), a->cls_lse,
                                     a->targets, N, C, v0, Vr, Vs, dscale))
        return -1;
    if (allreduce(m, a->dln, NC, "tp loss backward")) return -1;
    k->zero(a->dres, NC * sizeof(float));
    k->layernorm_backward(a->dres, G(m, ANVIL_GPT2_LNFW), G(m, ANVIL_GPT2_LNFB), a->dln, a->resid + (size_t)L * NC,
                          P(m, ANVIL_GPT2_LNFW), a->lnf_mean, a->lnf_rstd, N, C);
    for (int l = L - 1; l >= 0; l--) {
        float *res = a->resid + l * NC, *ln1 = a->ln1 + l * NC, *qkv = a->qkv + l * 3 * NCs;
        float *atty = a->atty + l * NCs, *res2 = a->resid2 + l * NC, *ln2 = a->ln2 + l * NC;
        float *fch = a->fch + l * 4 * NCs;
        size_t lc = (size_t)l * C, lq = (size_t)l * 3 * Cs * C, lf = (size_t)l * 4 * Cs * C;
        k->gelu_forward(a->gelu, fch, 4 * NCs);
        k->matmul_backward(a->dfch, G(m, ANVIL_GPT2_FCPROJW) + lf, G(m, ANVIL_GPT2_FCPROJB) + lc, a->dres, a->gelu,
                           P(m, ANVIL_GPT2_FCPROJW) + lf, N, 4 * Cs, C);
        k->gelu_backward(a->dfch, fch, a->dfch, 4 * NCs);
        k->matmul_backward(a->dln, G(m, ANVIL_GPT2_FCW) + lf, G(m, ANVIL_GPT2_FCB) + (size_t)l * 4 * Cs, a->dfch,
                           ln2, P(m, ANVIL_GPT2_FCW) + lf, N, C, 4 * Cs);
        if (allreduce(m, a->dln, NC, "tp mlp backward")) return -1;
        k->layernorm_backward(a->dres, G(m, ANVIL_GPT2_LN2W) + lc, G(m, ANVIL_GPT2_LN2B) + lc, a->dln, res2,
                              P(m, ANVIL_GPT2_LN2W) + lc, a->ln2_mean + (size_t)l * N, a->ln2_rstd + (size_t)l * N,
                              N, C);
        k->matmul_backward(a->datty, G(m, ANVIL_GPT2_ATTPROJW) + (size_t)l * C * Cs, G(m, ANVIL_GPT2_ATTPROJB) + lc,
                           a->dres, atty, P(m, ANVIL_GPT2_ATTPROJW) + (size_t)l * C * Cs, N, Cs, C);
        if (k->attention_backward(a->dqkv, a->datty, atty, a->lse + (size_t)l * NHs * N, qkv, B, T, Cs, NHs))
            return -1;
        k->matmul_backward(a->dln, G(m, ANVIL_GPT2_QKVW) + lq, G(m, ANVIL_GPT2_QKVB) + (size_t)l * 3 * Cs, a->dqkv,
                           ln1, P(m, ANVIL_GPT2_QKVW) + lq, N, C, 3 * Cs);
        if (allreduce(m, a->dln, NC, "tp attention backward")) return -1;
        k->layernorm_backward(a->dres, G(m, ANVIL_GPT2_LN1W) + lc, G(m, ANVIL_GPT2_LN1B) + lc, a->dln, res,
                              P(m, ANVIL_GPT2_LN1W) + lc, a->ln1_mean + (size_t)l * N, a->ln1_rstd + (size_t)l * N,
                              N, C);
    }
    k->encoder_shard_backward(G(m, ANVIL_GPT2_WTE), G(m, ANVIL_GPT2_WPE), a->dres, a->inputs, B, T, C, v0, Vs);
    return 0;
}

int anvil_tp_grad_sumsq(anvil_tp *m, double *sumsq) {
    double split = 0.0, replicated = 0.0;
    for (int i = 0; i < ANVIL_GPT2_NPARAM; i++) {
        double s = m->k->sumsq(G(m, i), m->offsets[i + 1] - m->offsets[i]);
        if (anvil_tp_is_split(i)) split += s;
        else replicated += s;
    }
    /* Replicated tensors have the same gradient on every rank: counted once, not tp times. */
    if (anvil_allreduce(m->g, &split, 1, ANVIL_F64, "tp gradient norm")) return -1;
    *sumsq = split + replicated;
    return 0;
}
