#include "ckpt/hf.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "ckpt/safetensors.h"
#include "core/error.h"
#include "core/fsutil.h"
#include "core/json.h"
#include "model/model.h"

/* One Hugging Face tensor: anvil tensor i, or its layer's slice of it, rows x cols (cols 1 for a
 * vector) from element `start`; ndim and shape as Hugging Face stores it. */
typedef struct {
    int param, layer;
    int64_t rows, cols;
    size_t start;
    int transpose;
    int ndim;
    int64_t shape[2];
    char name[96];
} hf_tensor;

/* Every Hugging Face tensor of cfg in their file order: the embedding stage's tensors, the blocks, then
 * the last stage's (GPT-2: wte, wpe, h.0 ... h.L-1, ln_f). NULL after anvil_fail. */
static hf_tensor *hf_tensors(const anvil_model_config *c, int *count) {
    int nt = anvil_model_ntensors(c), L = c->n_layer, n = 0;
    hf_tensor *v = calloc((size_t)nt * (size_t)(L + 1) + 1, sizeof *v);
    if (!v) {
        anvil_fail("hugging face: out of memory");
        return NULL;
    }
    for (int part = 0; part < 3; part++)
        for (int l = 0; l < (part == 1 ? L : 1); l++)
            for (int i = 0; i < nt; i++) {
                anvil_tensor_info t;
                anvil_model_tensor(c, i, &t);
                int stacked = t.place == ANVIL_PLACE_LAYER;
                int want = stacked ? 1 : t.place == ANVIL_PLACE_LAST ? 2 : 0;
                if (want != part || !t.hf_name) continue;
                hf_tensor *h = &v[n++];
                h->param = i;
                h->layer = stacked ? l : -1;
                int64_t s0 = t.vocab_rows ? c->vocab_size : t.shape[0];
                h->rows = stacked ? t.shape[1] : s0;
                h->cols = stacked ? (t.ndim == 3 ? t.shape[2] : 1) : (t.ndim == 2 ? t.shape[1] : 1);
                h->start = stacked ? (size_t)l * (size_t)(h->rows * h->cols) : 0;
                h->transpose = t.hf_layout == ANVIL_HF_TRANSPOSE;
                h->ndim = stacked ? t.ndim - 1 : t.ndim;
                h->shape[0] = h->ndim == 2 && h->transpose ? h->cols : h->rows;
                h->shape[1] = h->ndim == 2 && h->transpose ? h->rows : h->cols;
                snprintf(h->name, sizeof h->name, t.hf_name, l);
            }
    *count = n;
    return v;
}

static uint64_t hf_bytes(const hf_tensor *h) { return (uint64_t)(h->rows * h->cols) * sizeof(float); }

/* ---- export ---- */

/* One weights file: tensors [a, b) of hf, streamed from the model one at a time. */
static int write_file(const anvil_model *m, const char *path, const hf_tensor *hf, int a, int b, float *host,
                      float *out, int total, anvil_ckpt_progress_fn progress, void *ctx) {
    anvil_st_tensor *t = calloc((size_t)(b - a) + 1, sizeof *t);
    if (!t) return anvil_fail("%s: out of memory", path);
    for (int j = a; j < b; j++) {
        anvil_st_tensor *x = &t[j - a];
        x->name = hf[j].name;
        x->dtype = ANVIL_ST_F32;
        x->ndim = hf[j].ndim;
        x->shape[0] = hf[j].shape[0];
        x->shape[1] = hf[j].shape[1];
        x->nbytes = hf_bytes(&hf[j]);
    }
    const char *meta[] = {"format", "pt"};
    anvil_st_stream *s = anvil_st_stream_open(path, t, b - a, meta, 1);
    int rc = s ? 0 : -1;
    for (int j = a; !rc && j < b; j++) {
        const hf_tensor *h = &hf[j];
        size_t cnt = (size_t)(h->rows * h->cols);
        m->k->download(host, m->params + m->offsets[h->param] + h->start, cnt * sizeof(float));
        const float *src = host;
        if (h->transpose) {
            for (int64_t r = 0; r < h->rows; r++)
                for (int64_t q = 0; q < h->cols; q++) out[q * h->rows + r] = host[r * h->cols + q];
            src = out;
        }
        rc = anvil_st_stream_write(s, src, cnt * sizeof(float));
        /* The last write is one more step: converting is quick beside it. */
        if (!rc && progress) progress(ctx, (uint64_t)j + 1, (uint64_t)total + 1);
    }
    if (!rc) rc = anvil_st_stream_commit(s);
    else anvil_st_stream_abort(s);
    free(t);
    return rc;
}

/* model.safetensors.index.json: the total size and every tensor's file. */
static int write_index(const char *dir, const hf_tensor *hf, int n, const int *file_of, int nfiles) {
    cJSON *r = cJSON_CreateObject(), *meta = r ? cJSON_AddObjectToObject(r, "metadata") : NULL;
    cJSON *map = r ? cJSON_AddObjectToObject(r, "weight_map") : NULL;
    uint64_t total = 0;
    for (int j = 0; j < n; j++) total += hf_bytes(&hf[j]);
    int ok = meta && map && cJSON_AddNumberToObject(meta, "total_size", (double)total);
    for (int j = 0; ok && j < n; j++) {
        char file[64];
        snprintf(file, sizeof file, "model-%05d-of-%05d.safetensors", file_of[j] + 1, nfiles);
        ok = cJSON_AddStringToObject(map, hf[j].name, file) != NULL;
    }
    char *text = ok ? cJSON_Print(r) : NULL;
    cJSON_Delete(r);
    if (!text) return anvil_fail("%s: out of memory for the index", dir);
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
    int rc = anvil_write_file_atomic(path, text, strlen(text));
    cJSON_free(text);
    return rc;
}

int anvil_hf_export(const anvil_model *m, const char *dir, uint64_t shard_bytes, const anvil_model_special_ids *ids,
                    anvil_ckpt_progress_fn progress, void *ctx) {
    const anvil_model_config *c = &m->cfg;
    if (!shard_bytes) shard_bytes = ANVIL_HF_SHARD_BYTES;
    if (!m->params) return anvil_fail("%s: the model to export holds no weights", dir);
    if (anvil_mkdir(dir)) return -1;
    int n;
    hf_tensor *hf = hf_tensors(c, &n);
    if (!hf) return -1;
    size_t most = 1;
    uint64_t total = 0;
    for (int j = 0; j < n; j++) {
        if ((size_t)(hf[j].rows * hf[j].cols) > most) most = (size_t)(hf[j].rows * hf[j].cols);
        total += hf_bytes(&hf[j]);
    }
    /* Shards in order, each closed before the tensor that would take it past shard_bytes. */
    int *file_of = malloc((size_t)n * sizeof *file_of + 1), nfiles = 1;
    float *host = malloc(most * sizeof(float)), *out = malloc(most * sizeof(float));
    int rc = file_of && host && out ? 0 : anvil_fail("%s: out of memory", dir);
    uint64_t in_file = 0;
    for (int j = 0; !rc && j < n; j++) {
        if (total > shard_bytes && in_file && in_file + hf_bytes(&hf[j]) > shard_bytes) {
            nfiles++;
            in_file = 0;
        }
        file_of[j] = nfiles - 1;
        in_file += hf_bytes(&hf[j]);
    }
    char path[PATH_MAX];
    for (int f = 0, a = 0; !rc && f < nfiles; f++) {
        int b = a;
        while (b < n && file_of[b] == f) b++;
        if (total > shard_bytes) snprintf(path, sizeof path, "%s/model-%05d-of-%05d.safetensors", dir, f + 1, nfiles);
        else snprintf(path, sizeof path, "%s/model.safetensors", dir);
        rc = write_file(m, path, hf, a, b, host, out, n, progress, ctx);
        a = b;
    }
    if (!rc && total > shard_bytes) rc = write_index(dir, hf, n, file_of, nfiles);
    if (!rc && progress) progress(ctx, (uint64_t)n + 1, (uint64_t)n + 1);
    char *cfg = rc ? NULL : anvil_model_hf_config(c, ids);
    if (!rc && !cfg) rc = anvil_fail("%s: out of memory", dir);
    if (!rc) {
        snprintf(path, sizeof path, "%s/config.json", dir);
        rc = anvil_write_file_atomic(path, cfg, strlen(cfg));
    }
    cJSON_free(cfg);
    free(file_of);
    free(host);
    free(out);
    free(hf);
    return rc;
}

/* ---- import ---- */

static float half_to_float(uint16_t h) {
    int e = (h >> 10) & 0x1f, f = h & 0x3ff;
    float v = e == 0 ? ldexpf((float)f, -24) : e == 31 ? (f ? NAN : INFINITY) : ldexpf((float)(f | 0x400), e - 25);
    return (h & 0x8000) ? -v : v;
}

static void to_f32(const anvil_st_tensor *t, float *dst, size_t n) {
    if (t->dtype == ANVIL_ST_F32) {
        memcpy(dst, t->data, n * sizeof(float));
        return;
    }
    const uint16_t *s = t->data;
    for (size_t i = 0; i < n; i++) {
        if (t->dtype == ANVIL_ST_F16) {
            dst[i] = half_to_float(s[i]);
        } else {
            uint32_t b = (uint32_t)s[i] << 16;
            memcpy(&dst[i], &b, 4);
        }
    }
}

/* A JSON file of at most cap bytes, parsed; NULL after anvil_fail naming path. */
static cJSON *read_json(const char *path, size_t cap) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        anvil_fail("%s: cannot open: %s", path, strerror(errno));
        return NULL;
    }
    char *buf = malloc(cap);
    size_t n = buf ? fread(buf, 1, cap, f) : 0;
    int err = ferror(f);
    fclose(f);
    if (!buf || err || n == cap) {
        free(buf);
        anvil_fail("%s: unreadable or larger than %zu KiB", path, cap >> 10);
        return NULL;
    }
    cJSON *r = anvil_json_parse(buf, n, NULL);
    free(buf);
    if (!cJSON_IsObject(r)) {
        cJSON_Delete(r);
        anvil_fail("%s: not a JSON object", path);
        return NULL;
    }
    return r;
}

static int read_config(const char *path, anvil_model_config *c) {
    cJSON *r = read_json(path, 1 << 20);
    if (!r) return -1;
    const cJSON *mt = cJSON_GetObjectItemCaseSensitive(r, "model_type");
    int rc = 0;
    if (mt && !cJSON_IsString(mt)) rc = anvil_fail("%s: field 'model_type' is not a string", path);
    const anvil_model_family *f = rc ? NULL : anvil_model_hf_family(mt ? mt->valuestring : "gpt2");
    if (!rc && !f) {
        char why[256];
        snprintf(why, sizeof why, "%s", anvil_errmsg());
        rc = anvil_fail("%s: field 'model_type': %s", path, why);
    }
    if (!rc) rc = anvil_model_hf_config_read(f, r, path, c);
    cJSON_Delete(r);
    return rc;
}

/* The weights files of a Hugging Face folder: model.safetensors, or every file its index names. */
typedef struct {
    anvil_st_file *files[256];
    char names[256][132]; /* as the index names them */
    char paths[256][PATH_MAX];
    int n;
    cJSON *index; /* weight_map, or NULL for one file */
    char where[PATH_MAX]; /* the file, or the index, for messages */
} hf_weights;

static void weights_close(hf_weights *w) {
    for (int i = 0; i < w->n; i++) anvil_st_close(w->files[i]);
    cJSON_Delete(w->index);
    w->n = 0;
    w->index = NULL;
}

static int weights_open(hf_weights *w, const char *dir) {
    memset(w, 0, sizeof *w);
    char *path = w->where;
    struct stat sb;
    snprintf(path, sizeof w->where, "%s/model.safetensors.index.json", dir);
    if (stat(path, &sb)) {
        snprintf(path, sizeof w->where, "%s/model.safetensors", dir);
        snprintf(w->paths[0], sizeof w->paths[0], "%s", path);
        if (!(w->files[0] = anvil_st_open(path))) return -1;
        w->n = 1;
        return 0;
    }
    if (!(w->index = read_json(path, 16 << 20))) return -1;
    const cJSON *map = cJSON_GetObjectItemCaseSensitive(w->index, "weight_map"), *e;
    if (!cJSON_IsObject(map)) return anvil_fail("%s: field 'weight_map' is missing or not an object", path);
    cJSON_ArrayForEach(e, map) {
        if (!cJSON_IsString(e) || strchr(e->valuestring, '/') || !strcmp(e->valuestring, "..") ||
            strlen(e->valuestring) > 128)
            return anvil_fail("%s: weight_map entry '%s' does not name a file of the folder", path, e->string);
        int seen = 0;
        for (int i = 0; i < w->n && !seen; i++) seen = !strcmp(w->names[i], e->valuestring);
        if (seen) continue;
        if (w->n == (int)(sizeof w->files / sizeof w->files[0]))
            return anvil_fail("%s: more than %d weights files", path, w->n);
        snprintf(w->names[w->n], sizeof w->names[0], "%s", e->valuestring);
        snprintf(w->paths[w->n], sizeof w->paths[0], "%s/%s", dir, e->valuestring);
        if (!(w->files[w->n] = anvil_st_open(w->paths[w->n]))) return -1;
        w->n++;
    }
    return 0;
}

/* Tensor name in the weights: in the file the index names for it (NULL when absent). */
static const anvil_st_tensor *weights_find(const hf_weights *w, const char *name, int *in) {
    const char *file = w->index ? cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(
                                      cJSON_GetObjectItemCaseSensitive(w->index, "weight_map"), name))
                                : NULL;
    for (int i = 0; i < w->n; i++) {
        if (file && strcmp(w->names[i], file)) continue;
        const anvil_st_tensor *t = anvil_st_find(w->files[i], name);
        if (t) {
            if (in) *in = i;
            return t;
        }
    }
    return NULL;
}

static int weights_count(const hf_weights *w) {
    int n = 0;
    for (int i = 0; i < w->n; i++) n += anvil_st_count(w->files[i]);
    return n;
}

/* Checks tensor t of file against h and converts it into the anvil layout at dst. */
static int take(const char *path, const anvil_st_tensor *t, const hf_tensor *h, const char *name, float *dst,
                float *scratch) {
    int ok = (t->dtype == ANVIL_ST_F32 || t->dtype == ANVIL_ST_F16 || t->dtype == ANVIL_ST_BF16) &&
             t->ndim == h->ndim && t->shape[0] == h->shape[0] && (h->ndim == 1 || t->shape[1] == h->shape[1]);
    if (!ok && h->ndim == 2)
        return anvil_fail("%s: tensor '%s' (%s) is not F32/F16/BF16 of shape [%lld,%lld] as config.json implies",
                          path, name, anvil_st_dtype_name(t->dtype), (long long)h->shape[0], (long long)h->shape[1]);
    if (!ok)
        return anvil_fail("%s: tensor '%s' (%s) is not F32/F16/BF16 of shape [%lld] as config.json implies", path,
                          name, anvil_st_dtype_name(t->dtype), (long long)h->shape[0]);
    size_t cnt = (size_t)(h->rows * h->cols);
    if (h->transpose) {
        to_f32(t, scratch, cnt);
        for (int64_t r = 0; r < h->rows; r++)
            for (int64_t q = 0; q < h->cols; q++) dst[r * h->cols + q] = scratch[q * h->rows + r];
    } else {
        to_f32(t, dst, cnt);
    }
    return 0;
}

/* A stored LM head of tied embeddings: it must be the embedding. 1 when there is one, 0 when not. */
static int tied_head(const anvil_model *m, const hf_weights *w, const float *host, float *scratch) {
    const char *head = anvil_model_hf_tied_head(m->cfg.family);
    int file = 0;
    const anvil_st_tensor *t = m->cfg.tied && head ? weights_find(w, head, &file) : NULL;
    if (!t) return 0;
    int emb = -1;
    for (int i = 0; i < m->ntensors && emb < 0; i++) {
        anvil_tensor_info ti;
        anvil_model_tensor(&m->cfg, i, &ti);
        if (ti.place == ANVIL_PLACE_TIED) emb = i;
    }
    size_t cnt = (size_t)m->cfg.vocab_size * (size_t)m->cfg.n_embd;
    int ok = emb >= 0 && t->ndim == 2 && t->shape[0] == m->cfg.vocab_size && t->shape[1] == m->cfg.n_embd &&
             (t->dtype == ANVIL_ST_F32 || t->dtype == ANVIL_ST_F16 || t->dtype == ANVIL_ST_BF16);
    if (ok) {
        to_f32(t, scratch, cnt);
        ok = !memcmp(scratch, host + m->offsets[emb], cnt * sizeof(float));
    }
    if (!ok)
        return anvil_fail("%s: '%s' differs from the embedding; this model's LM head is tied to it", w->paths[file],
                          head);
    return 1;
}

/* The first tensor of the weights that is none of the model's, for the message. */
static int stranger(const anvil_model *m, const hf_weights *w, const hf_tensor *hf, int n, size_t strip) {
    const char *head = anvil_model_hf_tied_head(m->cfg.family);
    for (int f = 0; f < w->n; f++)
        for (int i = 0; i < anvil_st_count(w->files[f]); i++) {
            const char *name = anvil_st_at(w->files[f], i)->name;
            if (anvil_model_hf_ignorable(m->cfg.family, name) || (m->cfg.tied && head && !strcmp(name, head)))
                continue;
            int known = 0;
            for (int j = 0; j < n && !known; j++) known = !strcmp(name, hf[j].name + strip);
            if (!known)
                return anvil_fail("%s: unexpected tensor '%s' for this %s config", w->paths[f], name,
                                  anvil_model_hf_architecture(m->cfg.family));
        }
    return anvil_fail("%s: a tensor is stored twice", w->where);
}

static int load_weights(anvil_model *m, const hf_weights *w, float *host, float *scratch,
                        anvil_ckpt_progress_fn progress, void *ctx) {
    int n, rc = 0;
    hf_tensor *hf = hf_tensors(&m->cfg, &n);
    if (!hf) return -1;
    /* Older files leave the family's prefix off every name: every name of the family has it. */
    const char *prefix = anvil_model_hf_prefix(m->cfg.family);
    size_t strip = prefix && n && !weights_find(w, hf[0].name, NULL) ? strlen(prefix) : 0;
    int used = 0, ignored = 0;
    for (int j = 0; !rc && j < n; j++) {
        const char *name = hf[j].name + strip;
        int file = 0;
        const anvil_st_tensor *t = weights_find(w, name, &file);
        if (!t) rc = anvil_fail("%s: tensor '%s' is missing", w->where, name);
        else rc = take(w->paths[file], t, &hf[j], name, host + m->offsets[hf[j].param] + hf[j].start, scratch);
        used++;
        if (!rc && progress) progress(ctx, (uint64_t)used, (uint64_t)n);
    }
    int head = rc ? 0 : tied_head(m, w, host, scratch);
    if (head < 0) rc = -1;
    used += head > 0;
    for (int f = 0; !rc && f < w->n; f++)
        for (int i = 0; i < anvil_st_count(w->files[f]); i++)
            ignored += anvil_model_hf_ignorable(m->cfg.family, anvil_st_at(w->files[f], i)->name);
    if (!rc && used + ignored != weights_count(w)) rc = stranger(m, w, hf, n, strip);
    free(hf);
    return rc;
}

int anvil_hf_import(const char *dir, const anvil_kernels *k, anvil_model *m, anvil_ckpt_progress_fn progress,
                    void *ctx) {
    char path[PATH_MAX];
    anvil_model_config c;
    snprintf(path, sizeof path, "%s/config.json", dir);
    if (read_config(path, &c)) return -1;
    hf_weights *w = calloc(1, sizeof *w);
    if (!w) return anvil_fail("%s: out of memory", dir);
    if (weights_open(w, dir) || anvil_model_init(m, &c, k)) {
        weights_close(w);
        free(w);
        return -1;
    }
    size_t big = 1;
    for (int i = 0; i < m->ntensors; i++) {
        size_t n = m->offsets[i + 1] - m->offsets[i];
        anvil_tensor_info t;
        anvil_model_tensor(&m->cfg, i, &t);
        /* Scratch for one converted tensor: a layer's slice of a stacked one, or a whole other one. */
        size_t one = t.place == ANVIL_PLACE_LAYER ? n / (size_t)m->cfg.n_layer : n;
        if (one > big) big = one;
    }
    float *host = calloc(m->nparams, sizeof(float)), *scratch = malloc(big * sizeof(float));
    int rc = host && scratch ? load_weights(m, w, host, scratch, progress, ctx) : anvil_fail("%s: out of memory", dir);
    if (!rc) m->k->upload(m->params, host, m->nparams * sizeof(float));
    else anvil_model_free(m);
    free(host);
    free(scratch);
    weights_close(w);
    free(w);
    return rc;
}
