/* The model interface's family-independent half: the registry, and everything
 * derived from a family's parameter table (layouts, units, shards, the
 * initialization stream); the passes are dispatched to the family. */
#include "model/model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/suggest.h"
#include "model/family.h"

extern const anvil_model_family anvil_gpt2_family;
extern const anvil_model_family anvil_llama_family;

static const anvil_model_family *const families[] = {&anvil_gpt2_family, &anvil_llama_family};
#define NFAMILIES (int)(sizeof families / sizeof families[0])

/* ---- families and configurations ---- */

const anvil_model_family *anvil_model_family_named(const char *name) {
    char known[256] = "", seen[72];
    for (int i = 0; i < NFAMILIES; i++) {
        if (!strcmp(families[i]->name, name)) return families[i];
        snprintf(known + strlen(known), sizeof known - strlen(known), "%s%s", i ? ", " : "", families[i]->name);
    }
    anvil_fail("model: unknown family '%s' (%s)", anvil_model_shown(name, seen, sizeof seen), known);
    return NULL;
}

const char *anvil_model_family_name(const anvil_model_family *f) { return f->name; }
const char *anvil_model_family_presets(const anvil_model_family *f) { return f->preset_list; }

int anvil_model_preset_at(int i, const char **name, const anvil_model_family **family) {
    for (int f = 0; f < NFAMILIES; f++)
        for (const char *const *p = families[f]->presets; *p; p++)
            if (i-- == 0) {
                *name = *p;
                if (family) *family = families[f];
                return 1;
            }
    return 0;
}

int anvil_model_preset(const char *name, anvil_model_config *cfg) {
    const char *p;
    const anvil_model_family *f;
    char known[512] = "";
    for (int i = 0; anvil_model_preset_at(i, &p, &f); i++) {
        if (!strcmp(p, name)) {
            memset(cfg, 0, sizeof *cfg);
            f->preset(name, cfg);
            return 0;
        }
        snprintf(known + strlen(known), sizeof known - strlen(known), "%s%s", i ? ", " : "", p);
    }
    const char *names[64];
    int n = 0;
    while (n < 64 && anvil_model_preset_at(n, &names[n], NULL)) n++;
    const char *near = anvil_suggest(name, names, n);
    if (near) return anvil_fail("model: unknown preset '%s' (did you mean %s? known: %s)", name, near, known);
    return anvil_fail("model: unknown preset '%s' (%s)", name, known);
}

int anvil_model_config_check(anvil_model_config *cfg) {
    if (!cfg->family) return anvil_fail("model: the configuration names no family");
    return cfg->family->check(cfg);
}

int anvil_model_batch_check(const anvil_model_config *cfg, int B, int T) {
    return cfg->family->batch_check(cfg, B, T);
}

int anvil_model_tp_check(const anvil_model_config *cfg, int tp) { return cfg->family->tp_check(cfg, tp); }

int anvil_model_config_field(const anvil_model_config *cfg, int i, const char **key, char *value, size_t cap,
                             int *is_float, int *min) {
    const anvil_model_family *f = cfg->family;
    if (i < 0 || i >= f->nfields) return 0;
    const anvil_model_field *fd = &f->fields[i];
    const char *at = (const char *)cfg + fd->offset;
    *key = fd->key;
    if (is_float) *is_float = fd->is_float;
    if (min) *min = fd->min;
    if (fd->is_float) {
        float v;
        memcpy(&v, at, sizeof v);
        for (int prec = 6; prec <= 9; prec++) {
            snprintf(value, cap, "%.*g", prec, (double)v);
            if (strtof(value, NULL) == v) break;
        }
    } else {
        int v;
        memcpy(&v, at, sizeof v);
        snprintf(value, cap, "%d", v);
    }
    return 1;
}

int anvil_model_config_set(anvil_model_config *cfg, const char *key, const char *value) {
    const anvil_model_family *f = cfg->family;
    char seen[72];
    for (int i = 0; i < f->nfields; i++) {
        const anvil_model_field *fd = &f->fields[i];
        if (strcmp(fd->key, key)) continue;
        char *end;
        char *at = (char *)cfg + fd->offset;
        if (fd->is_float) {
            float v = strtof(value, &end);
            if (end == value || *end || !isfinite(v))
                return anvil_fail("model: %s: '%s' is not a number", key, anvil_model_shown(value, seen, sizeof seen));
            memcpy(at, &v, sizeof v);
        } else {
            long v = strtol(value, &end, 10);
            if (end == value || *end || v < -(1L << 30) || v > (1L << 30))
                return anvil_fail("model: %s: '%s' is not an integer", key, anvil_model_shown(value, seen, sizeof seen));
            int iv = (int)v;
            memcpy(at, &iv, sizeof iv);
        }
        return 0;
    }
    return anvil_fail("model: %s has no field '%s'", f->name, key);
}

const char *anvil_model_file_format(const anvil_model_family *f) { return f->file_format; }

const anvil_model_family *anvil_model_family_of_format(const char *format) {
    for (int i = 0; i < NFAMILIES; i++)
        if (!strcmp(families[i]->file_format, format)) return families[i];
    return NULL;
}

/* ---- Hugging Face ---- */

const anvil_model_family *anvil_model_hf_family(const char *model_type) {
    char known[256] = "", seen[72];
    for (int i = 0; i < NFAMILIES; i++) {
        if (!strcmp(families[i]->hf_model_type, model_type)) return families[i];
        snprintf(known + strlen(known), sizeof known - strlen(known), "%s%s", i ? ", " : "",
                 families[i]->hf_model_type);
    }
    anvil_fail("'%s' is not a model type anvil reads (%s)", anvil_model_shown(model_type, seen, sizeof seen), known);
    return NULL;
}

const char *anvil_model_hf_architecture(const anvil_model_family *f) { return f->hf_architecture; }
char *anvil_model_hf_config(const anvil_model_config *cfg, const anvil_model_special_ids *ids) {
    return cfg->family->hf_config_write(cfg, ids);
}

int anvil_model_hf_config_read(const anvil_model_family *f, const cJSON *root, const char *path,
                               anvil_model_config *cfg) {
    return f->hf_config_read(root, path, cfg);
}

const char *anvil_model_hf_prefix(const anvil_model_family *f) { return f->hf_prefix; }
int anvil_model_hf_ignorable(const anvil_model_family *f, const char *name) {
    return f->hf_ignorable && f->hf_ignorable(name);
}
const char *anvil_model_hf_tied_head(const anvil_model_family *f) { return f->hf_tied_head; }

/* ---- the parameter table ---- */

int anvil_model_ntensors(const anvil_model_config *cfg) { return cfg->family->ntensors(cfg); }

void anvil_model_tensor(const anvil_model_config *cfg, int i, anvil_tensor_info *out) {
    memset(out, 0, sizeof *out);
    cfg->family->tensor(cfg, i, out);
}

static size_t info_numel(const anvil_tensor_info *t) {
    size_t n = 1;
    for (int d = 0; d < t->ndim; d++) n *= (size_t)t->shape[d];
    return n;
}

size_t anvil_model_tensor_numel(const anvil_model_config *cfg, int i) {
    anvil_tensor_info t;
    anvil_model_tensor(cfg, i, &t);
    return info_numel(&t);
}

size_t anvil_model_tensor_row(const anvil_model_config *cfg, int i) {
    anvil_tensor_info t;
    anvil_model_tensor(cfg, i, &t);
    return (size_t)t.shape[t.ndim - 1];
}

int anvil_model_tensor_index(const anvil_model_config *cfg, const char *name) {
    for (int i = 0, n = anvil_model_ntensors(cfg); i < n; i++) {
        anvil_tensor_info t;
        anvil_model_tensor(cfg, i, &t);
        if (!strcmp(t.name, name)) return i;
    }
    return -1;
}

int anvil_model_tensor_decays(const anvil_model_config *cfg, int i) {
    anvil_tensor_info t;
    anvil_model_tensor(cfg, i, &t);
    return t.decays;
}

void anvil_model_decays(const anvil_model_config *cfg, int *out) {
    for (int i = 0, n = anvil_model_ntensors(cfg); i < n; i++) out[i] = anvil_model_tensor_decays(cfg, i);
}

size_t anvil_model_num_params(const anvil_model_config *cfg) {
    size_t n = 0;
    for (int i = 0, nt = anvil_model_ntensors(cfg); i < nt; i++) n += anvil_model_tensor_numel(cfg, i);
    return n;
}

size_t anvil_model_flop_params(const anvil_model_config *cfg) { return cfg->family->flop_params(cfg); }

double anvil_model_flops_per_token(const anvil_model_config *cfg, int T) {
    return cfg->family->flops_per_token(cfg, T);
}

const char *anvil_model_linear_role(const anvil_model_config *cfg, int C, int OC) {
    return cfg->family->linear_role(cfg, C, OC);
}

/* ---- layouts ---- */

static int per_layer(const anvil_tensor_info *t) { return t->place == ANVIL_PLACE_LAYER; }

static int shard_holds(const anvil_model_shard *s, int L, const anvil_tensor_info *t) {
    int first = s->l0 == 0, last = s->l1 == L;
    switch (t->place) {
    case ANVIL_PLACE_FIRST: return first;
    case ANVIL_PLACE_LAST: return last;
    case ANVIL_PLACE_TIED: return first || last;
    default: return 1;
    }
}

static int setup(anvil_model *m, const anvil_model_config *cfg, const anvil_kernels *k, const anvil_model_shard *s) {
    memset(m, 0, sizeof *m);
    m->cfg = *cfg;
    if (anvil_model_config_check(&m->cfg)) return -1;
    m->k = k;
    m->ntensors = anvil_model_ntensors(&m->cfg);
    if (m->ntensors > ANVIL_MODEL_MAX_TENSORS)
        return anvil_fail("model: %s has %d tensors, more than %d", m->cfg.family->name, m->ntensors,
                          ANVIL_MODEL_MAX_TENSORS);
    m->shard = s ? *s : (anvil_model_shard){1, 0, 0, m->cfg.n_layer, 1, 0};
    size_t L = (size_t)m->cfg.n_layer, off = 0;
    for (int i = 0; i < m->ntensors; i++) {
        anvil_tensor_info t;
        anvil_model_tensor(&m->cfg, i, &t);
        size_t n = info_numel(&t);
        if (per_layer(&t)) n = n / L * (size_t)(m->shard.l1 - m->shard.l0);
        if (!shard_holds(&m->shard, m->cfg.n_layer, &t)) n = 0;
        if (t.split != ANVIL_SPLIT_NONE) n /= (size_t)m->shard.tp;
        m->offsets[i] = off;
        off += n;
    }
    m->offsets[m->ntensors] = off;
    m->nparams = off;
    return 0;
}

int anvil_model_init_layout(anvil_model *m, const anvil_model_config *cfg, const anvil_kernels *k) {
    return setup(m, cfg, k, NULL);
}

int anvil_model_init(anvil_model *m, const anvil_model_config *cfg, const anvil_kernels *k) {
    if (setup(m, cfg, k, NULL)) return -1;
    m->params = k->alloc(m->nparams * sizeof(float));
    if (!m->params) return anvil_fail("model: cannot allocate %zu parameters", m->nparams);
    return 0;
}

int anvil_model_init_shard(anvil_model *m, const anvil_model_config *cfg, const anvil_kernels *k,
                           const anvil_model_shard *shard, const anvil_model_comm *comm) {
    if (setup(m, cfg, k, shard)) return -1;
    m->comm = comm;
    size_t bytes = m->nparams * sizeof(float);
    m->params = k->alloc(bytes);
    m->grads = k->alloc(bytes);
    if (!m->params || !m->grads) {
        anvil_fail("tensor parallel: cannot allocate %zu parameters and their gradients", m->nparams);
        anvil_model_free(m);
        return -1;
    }
    return 0;
}

void anvil_model_free(anvil_model *m) {
    if (m->cfg.family) m->cfg.family->acts_free(m);
    if (m->k) {
        m->k->free(m->params);
        m->k->free(m->grads);
    }
    memset(m, 0, sizeof *m);
}

anvil_model anvil_model_with_params(const anvil_model *m, float *params) {
    anvil_model w = *m;
    w.hooks = NULL;
    w.params = params;
    w.grads = NULL;
    w.B = w.T = 0;
    w.acts = NULL;
    return w;
}

float *anvil_model_param(const anvil_model *m, int i, float *base) { return base + m->offsets[i]; }

/* ---- the initialization stream ---- */

/* The elements of tensor i that the initialization draws from the RNG, one normal each: a normal
 * tensor's, of a vocabulary table its real rows only (the padding stays zero). */
static size_t drawn(const anvil_model_config *c, const anvil_tensor_info *t) {
    if (!(t->init_std > 0.0f)) return 0;
    if (t->vocab_rows) return (size_t)c->vocab_size * (info_numel(t) / (size_t)t->shape[0]);
    return info_numel(t);
}

void anvil_model_init_stream_start(anvil_model_init_stream *s, const anvil_model_config *cfg, uint64_t seed) {
    s->cfg = *cfg;
    anvil_rng_seed(&s->rng, seed);
    s->tensor = 0;
    s->pos = 0;
}

/* Moves the stream to element `to` of its tensor, drawing (and dropping) the normals in between:
 * each normal takes two draws whatever its value. */
static void stream_skip(anvil_model_init_stream *s, size_t to) {
    anvil_tensor_info t;
    anvil_model_tensor(&s->cfg, s->tensor, &t);
    size_t d = drawn(&s->cfg, &t), a = s->pos < d ? s->pos : d, b = to < d ? to : d;
    for (size_t j = a; j < b; j++) {
        anvil_rng_u64(&s->rng);
        anvil_rng_u64(&s->rng);
    }
    s->pos = to;
}

int anvil_model_init_stream_read(anvil_model_init_stream *s, int i, size_t off, size_t n, float *dst) {
    const anvil_model_config *c = &s->cfg;
    anvil_tensor_info t;
    if (i < s->tensor || (i == s->tensor && off < s->pos)) {
        anvil_tensor_info was;
        anvil_model_tensor(c, i, &t);
        anvil_model_tensor(c, s->tensor, &was);
        return anvil_fail("model: initialization read of %s at %zu after %s at %zu: reads go forward only", t.name,
                          off, was.name, s->pos);
    }
    while (s->tensor < i) {
        stream_skip(s, anvil_model_tensor_numel(c, s->tensor));
        s->tensor++;
        s->pos = 0;
    }
    stream_skip(s, off);
    anvil_model_tensor(c, i, &t);
    size_t d = drawn(c, &t);
    for (size_t j = 0; j < n; j++)
        dst[j] = t.init_std > 0.0f ? (off + j < d ? t.init_std * anvil_rng_normal(&s->rng) : 0.0f) : t.init_value;
    s->pos = off + n;
    return 0;
}

void anvil_model_init_weights(anvil_model *m, uint64_t seed) {
    anvil_model_init_stream s;
    anvil_model_init_stream_start(&s, &m->cfg, seed);
    /* One tensor at a time, so initializing never holds a second copy of the model. */
    size_t largest = 0;
    for (int i = 0; i < m->ntensors; i++)
        if (m->offsets[i + 1] - m->offsets[i] > largest) largest = m->offsets[i + 1] - m->offsets[i];
    float *host = malloc(largest * sizeof(float));
    for (int i = 0; i < m->ntensors; i++) {
        size_t n = m->offsets[i + 1] - m->offsets[i];
        anvil_model_init_stream_read(&s, i, 0, n, host);
        m->k->upload(m->params + m->offsets[i], host, n * sizeof(float));
    }
    free(host);
}

/* ---- units ---- */

int anvil_model_num_units(const anvil_model_config *cfg) { return cfg->n_layer + 1; }

int anvil_model_unit_ranges(const anvil_model *m, int u, anvil_model_range *r) {
    int n = 0;
    size_t L = (size_t)m->cfg.n_layer, l = (size_t)(u - 1);
    for (int i = 0; i < m->ntensors; i++) {
        anvil_tensor_info t;
        anvil_model_tensor(&m->cfg, i, &t);
        size_t len = m->offsets[i + 1] - m->offsets[i];
        if (u == 0 && !per_layer(&t)) r[n++] = (anvil_model_range){i, m->offsets[i], len};
        else if (u > 0 && per_layer(&t)) r[n++] = (anvil_model_range){i, m->offsets[i] + l * (len / L), len / L};
    }
    return n;
}

size_t anvil_model_unit_size(const anvil_model *m, int u) {
    anvil_model_range r[ANVIL_MODEL_MAX_TENSORS];
    int n = anvil_model_unit_ranges(m, u, r);
    size_t s = 0;
    for (int i = 0; i < n; i++) s += r[i].len;
    return s;
}

void anvil_model_view_flat(const anvil_model *m, int u, float *base, anvil_model_view *v) {
    anvil_model_range r[ANVIL_MODEL_MAX_TENSORS];
    int n = anvil_model_unit_ranges(m, u, r);
    memset(v, 0, sizeof *v);
    for (int i = 0; i < n; i++) v->t[r[i].tensor] = base + r[i].offset;
}

void anvil_model_view_packed(const anvil_model *m, int u, float *packed, anvil_model_view *v) {
    anvil_model_range r[ANVIL_MODEL_MAX_TENSORS];
    int n = anvil_model_unit_ranges(m, u, r);
    memset(v, 0, sizeof *v);
    size_t off = 0;
    for (int i = 0; i < n; i++) {
        v->t[r[i].tensor] = packed + off;
        off += r[i].len;
    }
}

/* ---- a shard against the whole ---- */

int anvil_model_holds(const anvil_model *m, int i) {
    anvil_tensor_info t;
    anvil_model_tensor(&m->cfg, i, &t);
    return shard_holds(&m->shard, m->cfg.n_layer, &t);
}

int anvil_model_owns(const anvil_model *m, int i) {
    anvil_tensor_info t;
    anvil_model_tensor(&m->cfg, i, &t);
    return t.place == ANVIL_PLACE_TIED ? m->shard.l0 == 0 : shard_holds(&m->shard, m->cfg.n_layer, &t);
}

/* How tensor i is cut: per layer of the shard it is `groups` blocks of rows x cols, and a split divides
 * each block's rows (column-parallel, vocabulary) or its cols (row-parallel) into tp equal parts. */
typedef struct {
    anvil_split split;
    size_t layers, groups, rows, cols, shift;
} cut;

static cut cut_of(const anvil_model *m, int i) {
    anvil_tensor_info t;
    anvil_model_tensor(&m->cfg, i, &t);
    int pl = per_layer(&t), d0 = pl ? 1 : 0, groups = t.split_groups > 0 ? t.split_groups : 1;
    size_t L = (size_t)m->cfg.n_layer;
    cut c = {t.split, pl ? (size_t)(m->shard.l1 - m->shard.l0) : 1, (size_t)groups,
             (size_t)t.shape[d0] / (size_t)groups, t.ndim - d0 >= 2 ? (size_t)t.shape[d0 + 1] : 1, 0};
    /* A stage's layers start l0 layers into the whole stacked tensor. */
    if (pl) c.shift = (size_t)m->shard.l0 * (info_numel(&t) / L);
    return c;
}

size_t anvil_model_num_pieces(const anvil_model *m, int i) {
    if (m->offsets[i + 1] == m->offsets[i]) return 0;
    cut c = cut_of(m, i);
    if (c.split == ANVIL_SPLIT_NONE) return 1;
    return c.layers * c.groups * (c.split == ANVIL_SPLIT_ROW ? c.rows : 1);
}

void anvil_model_piece(const anvil_model *m, int i, int tp_rank, size_t p, size_t *whole, size_t *local,
                       size_t *len) {
    cut c = cut_of(m, i);
    size_t tp = (size_t)m->shard.tp, r = (size_t)tp_rank;
    if (c.split == ANVIL_SPLIT_NONE) {
        *whole = c.shift;
        *local = 0;
        *len = m->offsets[i + 1] - m->offsets[i];
    } else if (c.split == ANVIL_SPLIT_ROW) {
        size_t lcols = c.cols / tp;
        *whole = c.shift + p * c.cols + r * lcols;
        *local = p * lcols;
        *len = lcols;
    } else {
        size_t lrows = c.rows / tp;
        *whole = c.shift + (p * c.rows + r * lrows) * c.cols;
        *local = p * lrows * c.cols;
        *len = lrows * c.cols;
    }
}

void anvil_model_vocab_shard(const anvil_model *m, int *v0, int *Vr, int *Vs) {
    *Vs = m->cfg.padded_vocab / m->shard.tp;
    *v0 = m->shard.tp_rank * *Vs;
    int real = m->cfg.vocab_size - *v0;
    *Vr = real < 0 ? 0 : real > *Vs ? *Vs : real;
}

/* ---- passes ---- */

void anvil_model_zero_grad(anvil_model *m) {
    if (!m->grads) m->grads = m->k->alloc(m->nparams * sizeof(float));
    else m->k->zero(m->grads, m->nparams * sizeof(float));
}

int anvil_model_forward(anvil_model *m, const int32_t *inputs, const int32_t *targets, int B, int T, float *loss) {
    return m->cfg.family->forward(m, inputs, targets, B, T, loss);
}

int anvil_model_forward_backward(anvil_model *m, const int32_t *inputs, const int32_t *targets, int B, int T,
                                 float grad_scale, float *loss) {
    return m->cfg.family->forward_backward(m, inputs, targets, B, T, grad_scale, loss);
}

int anvil_model_logits(anvil_model *m, float *out) { return m->cfg.family->logits(m, out); }

int anvil_model_stage_ready(anvil_model *m, int B, int T) { return m->cfg.family->stage_ready(m, B, T); }

int anvil_model_stage_forward(anvil_model *m, int slot, const int32_t *inputs, const int32_t *targets, int B, int T,
                              float *loss) {
    return m->cfg.family->stage_forward(m, slot, inputs, targets, B, T, loss);
}

int anvil_model_stage_backward(anvil_model *m, int slot, float grad_scale) {
    return m->cfg.family->stage_backward(m, slot, grad_scale);
}

float *anvil_model_stage_input(anvil_model *m, int slot) { return m->cfg.family->stage_input(m, slot); }
float *anvil_model_stage_output(anvil_model *m, int slot) { return m->cfg.family->stage_output(m, slot); }
float *anvil_model_stage_grad(anvil_model *m, int slot) { return m->cfg.family->stage_grad(m, slot); }
size_t anvil_model_stage_floats(const anvil_model *m) { return m->cfg.family->stage_floats(m); }
size_t anvil_model_activation_bytes(const anvil_model *m) { return m->cfg.family->activation_bytes(m); }

void anvil_model_set_sequence_parallel(anvil_model *m, int on) {
    m->cfg.family->acts_free(m);
    m->shard.sequence_parallel = on && m->shard.tp > 1;
}

int anvil_model_sp_check(int tp, int B, int T) {
    if (tp > 1 && ((int64_t)B * T) % tp)
        return anvil_fail("sequence parallel: batch*seq (%d*%d = %lld tokens) is not divisible by --tp %d", B, T,
                          (long long)B * T, tp);
    return 0;
}

anvil_model_cache *anvil_model_cache_new(const anvil_model *m) { return m->cfg.family->cache_new(m); }

void anvil_model_cache_free(anvil_model_cache *c) {
    /* A cache starts with its family, so that it can be freed by it alone. */
    if (c) (*(const anvil_model_family *const *)c)->cache_free(c);
}

int anvil_model_decode(anvil_model *m, anvil_model_cache *c, int32_t token, int pos, float *logits) {
    return m->cfg.family->decode(m, c, token, pos, logits);
}
