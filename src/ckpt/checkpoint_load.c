/* Loading: the checked weights and moments files, or the shard files put back together whatever layout
 * wrote them. */
#include "ckpt/checkpoint.h"

#include <limits.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/checkpoint_internal.h"
#include "ckpt/safetensors.h"
#include "core/error.h"

/* ---- loading ---- */

/* Checks that f holds every tensor prefix+param with the model-file shape. */
static int check_table(const anvil_st_file *f, const char *path, const char *prefix, const anvil_model_config *c) {
    for (int i = 0, n = anvil_model_ntensors(c); i < n; i++)
        if (!ckpt_checked_tensor(f, path, prefix, c, i)) return -1;
    return 0;
}

const anvil_st_tensor *ckpt_checked_tensor(const anvil_st_file *f, const char *path, const char *prefix,
                                           const anvil_model_config *c, int i) {
    char name[128];
    ckpt_tensor_name(c, i, prefix, name, sizeof name);
    const anvil_st_tensor *t = anvil_st_find(f, name);
    int64_t s[3];
    int nd = ckpt_file_shape(c, i, s);
    int ok = t && t->dtype == ANVIL_ST_F32 && t->ndim == nd;
    for (int d = 0; ok && d < nd; d++) ok = t->shape[d] == s[d];
    if (!t) anvil_fail("%s: tensor '%s' is missing", path, name);
    else if (!ok) anvil_fail("%s: tensor '%s' has the wrong dtype or shape for this model configuration", path, name);
    return ok ? t : NULL;
}

/* The most padding elements of any tensor of m: what the zeros uploaded after a vocabulary table's
 * real rows need. */
static size_t most_padding(const anvil_model *m) {
    size_t most = 0;
    for (int i = 0; i < m->ntensors; i++) {
        size_t pad = m->offsets[i + 1] - m->offsets[i] - ckpt_file_numel(&m->cfg, i);
        if (pad > most) most = pad;
    }
    return most;
}

/* Uploads the checked tensors straight from the file buffer into dst (backend memory); a vocabulary
 * table's padding rows get `zeros` (room for them). */
static void upload_table(const anvil_st_file *f, const char *prefix, const anvil_model *m, float *dst,
                         const float *zeros) {
    for (int i = 0; i < m->ntensors; i++) {
        char name[128];
        ckpt_tensor_name(&m->cfg, i, prefix, name, sizeof name);
        const anvil_st_tensor *t = anvil_st_find(f, name);
        m->k->upload(dst + m->offsets[i], t->data, t->nbytes);
        size_t real = ckpt_file_numel(&m->cfg, i), pad = m->offsets[i + 1] - m->offsets[i] - real;
        if (pad) m->k->upload(dst + m->offsets[i] + real, zeros, pad * sizeof(float));
    }
}

static int compare_config(const char *dir, const anvil_model_config *a, const anvil_model_config *b) {
    if (a->family != b->family)
        return anvil_fail("%s: model config differs: the checkpoint holds a %s model, this run a %s one", dir,
                          anvil_model_family_name(a->family), anvil_model_family_name(b->family));
    const char *key;
    char x[32], y[32];
    for (int i = 0; anvil_model_config_field(a, i, &key, x, sizeof x, NULL, NULL); i++) {
        anvil_model_config_field(b, i, &key, y, sizeof y, NULL, NULL);
        if (strcmp(x, y))
            return anvil_fail("%s: model config differs: %s is %s in the checkpoint, %s in this run", dir, key, x, y);
    }
    return 0;
}

/* leaf in dir, read whole, or as an index (anvil_st_open_index) when indexed, with the tables of
 * prefixes checked. */
static anvil_st_file *open_checked(const char *dir, const char *leaf, const char *const *prefixes, int n,
                                   const anvil_model_config *c, int indexed) {
    char path[PATH_MAX];
    if (ckpt_join(path, sizeof path, dir, leaf)) return NULL;
    anvil_st_file *f = indexed ? anvil_st_open_index(path) : anvil_st_open(path);
    for (int i = 0; f && i < n; i++)
        if (check_table(f, path, prefixes[i], c)) {
            anvil_st_close(f);
            f = NULL;
        }
    return f;
}

/* A checkpoint's shard files, read as an index: every slice of each kind cut into runs (a 1-D slice
 * is one run, a block one run per row), sorted by where they go in the flat layout of model/model.h.
 * Opening checks that every tensor is a named slice inside its parameter and that the runs of each
 * kind a caller needs cover the whole layout exactly once, so a read can neither miss nor overlap. */
typedef struct {
    size_t start, len; /* elements [start, start+len) of the flat layout */
    uint64_t src;      /* the run's first byte within its slice's data */
    const anvil_st_tensor *t;
    const anvil_st_file *f;
} run;

typedef struct {
    anvil_st_file *files[ANVIL_CKPT_MAX_FILES];
    char names[ANVIL_CKPT_MAX_FILES][sizeof(((anvil_ckpt_file *)0)->name)];
    int nfiles;
    run *runs[3]; /* m, v, p (ckpt_slice_kinds) */
    size_t nruns[3];
    size_t offsets[ANVIL_MODEL_MAX_TENSORS + 1];
} shard_index;

static int cmp_run(const void *a, const void *b) {
    size_t x = ((const run *)a)->start, y = ((const run *)b)->start;
    return (x > y) - (x < y);
}

/* A shard file's tensor name, "<kind>.<param>.<offset>", as the writer
 * prints it: the offset in plain decimal digits that fit a size_t (sscanf's
 * %zu would take a sign, and wrap). */
static int parse_slice_name(const char *name, char kind[4], char param[32], size_t *off) {
    int used = 0;
    if (sscanf(name, "%3[^.].%31[^.].%n", kind, param, &used) != 2 || !used) return 0;
    const char *d = name + used;
    if (!*d) return 0;
    size_t v = 0;
    for (; *d; d++) {
        if (*d < '0' || *d > '9' || v > (SIZE_MAX - (size_t)(*d - '0')) / 10) return 0;
        v = v * 10 + (size_t)(*d - '0');
    }
    *off = v;
    return 1;
}

/* Tensor t of a shard file as its slice: its kind, parameter, first element and, for a block, rows
 * of cols elements one row of the parameter apart. 0 when it is not one that fits inside its
 * parameter. */
static int parse_slice(const anvil_st_tensor *t, const anvil_model_config *c, const size_t *offsets, int *kind,
                       int *param, size_t *off, size_t *rows, size_t *cols) {
    char ks[4], ps[32];
    *kind = *param = -1;
    if (!parse_slice_name(t->name, ks, ps, off) || t->dtype != ANVIL_ST_F32 || t->ndim < 1 || t->ndim > 2) return 0;
    *param = anvil_model_tensor_index(c, ps);
    for (int j = 0; j < 3; j++)
        if (!strcmp(ks, ckpt_slice_kinds[j])) *kind = j;
    if (*param < 0 || *kind < 0) return 0;
    size_t size = offsets[*param + 1] - offsets[*param], width = ckpt_row_width(c, *param);
    /* The safetensors reader has checked that the shape's product is the data's size. */
    *rows = t->ndim == 2 ? (size_t)t->shape[0] : 1;
    *cols = (size_t)t->shape[t->ndim - 1];
    if (*off > size || *cols > size - *off) return 0;
    if (*rows > 1 && (*cols > width || *rows - 1 > (size - *off - *cols) / width)) return 0;
    return 1;
}

static void shard_index_close(shard_index *x) {
    for (int f = 0; f < x->nfiles; f++) anvil_st_close(x->files[f]);
    for (int k = 0; k < 3; k++) free(x->runs[k]);
    memset(x, 0, sizeof *x);
}

/* Opens the shard files of dir's manifest (headers only) and indexes them; need[k] says which kinds
 * must cover the layout. The model is c with its padded vocabulary. */
static int shard_index_open(shard_index *x, const char *dir, const anvil_ckpt_manifest *man,
                            const anvil_model_config *c, const int need[3]) {
    memset(x, 0, sizeof *x);
    int nt = anvil_model_ntensors(c);
    for (int i = 0; i < nt; i++) x->offsets[i + 1] = x->offsets[i] + anvil_model_tensor_numel(c, i);
    size_t total = x->offsets[nt], cap[3] = {0};
    int rc = 0;
    for (int i = 0; !rc && i < man->nfiles; i++)
        if (!strncmp(man->files[i].name, "shard_", 6)) {
            char path[PATH_MAX];
            if (ckpt_join(path, sizeof path, dir, man->files[i].name) ||
                !(x->files[x->nfiles] = anvil_st_open_index(path)))
                rc = -1;
            else
                memcpy(x->names[x->nfiles++], man->files[i].name, sizeof x->names[0]);
        }
    if (!rc && !x->nfiles) rc = anvil_fail("%s: a sharded checkpoint without shard files", dir);
    /* Two passes: count each kind's runs, then fill them. */
    for (int pass = 0; !rc && pass < 2; pass++) {
        for (int k = 0; pass && !rc && k < 3; k++)
            if (!(x->runs[k] = malloc((cap[k] + 1) * sizeof(run)))) rc = anvil_fail("%s: out of memory", dir);
        for (int f = 0; !rc && f < x->nfiles; f++)
            for (int i = 0; !rc && i < anvil_st_count(x->files[f]); i++) {
                const anvil_st_tensor *t = anvil_st_at(x->files[f], i);
                int kind, param;
                size_t off, rows, cols;
                if (!parse_slice(t, c, x->offsets, &kind, &param, &off, &rows, &cols)) {
                    rc = anvil_fail("%s: tensor '%s' is not a slice of this model's parameters", x->names[f],
                                    t->name);
                    break;
                }
                if (!cols) continue;
                if (!pass) {
                    cap[kind] += rows;
                    continue;
                }
                size_t width = ckpt_row_width(c, param);
                for (size_t r = 0; r < rows; r++)
                    x->runs[kind][x->nruns[kind]++] = (run){x->offsets[param] + off + r * width, cols,
                                                            (uint64_t)(r * cols) * sizeof(float), t, x->files[f]};
            }
    }
    for (int k = 0; !rc && k < 3; k++) {
        qsort(x->runs[k], x->nruns[k], sizeof(run), cmp_run);
        size_t at = 0;
        for (size_t i = 0; need[k] && !rc && i < x->nruns[k]; i++) {
            if (x->runs[k][i].start != at)
                rc = anvil_fail("%s: the shards' '%s' slices %s at element %zu", dir, ckpt_slice_kinds[k],
                                x->runs[k][i].start > at ? "leave a gap" : "overlap", at);
            at = x->runs[k][i].start + x->runs[k][i].len;
        }
        if (need[k] && !rc && at != total)
            rc = anvil_fail("%s: the shards' '%s' slices cover %zu of %zu elements", dir, ckpt_slice_kinds[k], at,
                            total);
    }
    if (rc) shard_index_close(x);
    return rc;
}

/* Elements [at, at+n) of the flat layout of kind k into host memory at dst: the runs cover the
 * layout, so the first run is the last one starting at or before at, and its successors follow. */
static int shard_index_read(const shard_index *x, int k, size_t at, size_t n, float *dst) {
    const run *r = x->runs[k];
    size_t lo = 0, hi = x->nruns[k];
    while (hi - lo > 1) {
        size_t mid = lo + (hi - lo) / 2;
        if (r[mid].start <= at) lo = mid;
        else hi = mid;
    }
    for (size_t i = lo; n; i++) {
        size_t skip = at - r[i].start, take = r[i].len - skip < n ? r[i].len - skip : n;
        if (anvil_st_read(r[i].f, r[i].t, r[i].src + skip * sizeof(float), take * sizeof(float), dst)) return -1;
        dst += take;
        at += take;
        n -= take;
    }
    return 0;
}

/* The most floats a whole load stages at once. */
#define LOAD_CHUNK ((size_t)1 << 22)

/* The shard files' weights (into p, stage 3 or tensor/pipeline parallel), moments (m and v) of a
 * sharded checkpoint: indexed and checked first, so a bad checkpoint changes nothing, then read
 * through a host buffer into backend memory. A NULL destination is not read. */
static int load_shards(const char *dir, const anvil_ckpt_manifest *man, const anvil_model *model, float *p, float *m,
                       float *v) {
    float *dst[3] = {m, v, p};
    int need[3] = {m != NULL, v != NULL, p != NULL};
    shard_index x;
    if (shard_index_open(&x, dir, man, &model->cfg, need)) return -1;
    size_t total = x.offsets[model->ntensors], chunk = total < LOAD_CHUNK ? total : LOAD_CHUNK;
    float *host = malloc((chunk + 1) * sizeof(float));
    int rc = host ? 0 : anvil_fail("%s: out of memory", dir);
    for (int k = 0; !rc && k < 3; k++)
        for (size_t at = 0; dst[k] && !rc && at < total; at += chunk) {
            size_t n = total - at < chunk ? total - at : chunk;
            if (!(rc = shard_index_read(&x, k, at, n, host))) model->k->upload(dst[k] + at, host, n * sizeof(float));
        }
    free(host);
    shard_index_close(&x);
    return rc;
}

/* Whether the manifest lists a file of this name. */
static int lists(const anvil_ckpt_manifest *m, const char *name) {
    for (int i = 0; i < m->nfiles; i++)
        if (!strcmp(m->files[i].name, name)) return 1;
    return 0;
}

static const char *const wpre[] = {""}, *const opre[] = {"m.", "v."};

int anvil_ckpt_load(const char *ckpt_dir, anvil_model *model, anvil_adamw *opt, anvil_ckpt_manifest *info,
                    int verify) {
    anvil_ckpt_manifest m;
    if (info) memset(info, 0, sizeof *info);
    if (anvil_ckpt_read_manifest(ckpt_dir, &m)) return -1;
    int rc = verify ? ckpt_verify_files(ckpt_dir, &m, 0, 1, NULL, NULL) : 0;
    if (!rc) rc = compare_config(ckpt_dir, &m.model, &model->cfg);
    /* Every file is opened and checked before anything is copied. The weights and moments come from
     * model.safetensors and optim.safetensors when the manifest lists them (rank 0 held them whole),
     * and from the shard files otherwise. */
    int whole_w = lists(&m, "model.safetensors"), whole_o = lists(&m, "optim.safetensors");
    anvil_st_file *fw = NULL, *fo = NULL;
    if (!rc && whole_w && !(fw = open_checked(ckpt_dir, "model.safetensors", wpre, 1, &model->cfg, 0))) rc = -1;
    if (!rc && opt && whole_o && !(fo = open_checked(ckpt_dir, "optim.safetensors", opre, 2, &model->cfg, 0)))
        rc = -1;
    if (!rc && (!whole_w || (opt && !whole_o)))
        rc = load_shards(ckpt_dir, &m, model, whole_w ? NULL : model->params, opt && !whole_o ? opt->m : NULL,
                         opt && !whole_o ? opt->v : NULL);
    float *zeros = rc ? NULL : calloc(most_padding(model) + 1, sizeof(float));
    if (!rc && !zeros) rc = anvil_fail("%s: out of memory", ckpt_dir);
    if (!rc) {
        if (fw) upload_table(fw, "", model, model->params, zeros);
        if (fo) {
            upload_table(fo, "m.", model, opt->m, zeros);
            upload_table(fo, "v.", model, opt->v, zeros);
        }
        if (opt) opt->t = (int)m.adam_t;
    }
    free(zeros);
    anvil_st_close(fw);
    anvil_st_close(fo);
    if (!rc && info)
        *info = m;
    else
        anvil_ckpt_manifest_free(&m);
    return rc;
}

/* ---- reading piece by piece ---- */

/* Each kind comes from its whole file (model.safetensors for the weights, optim.safetensors for the
 * moments) when the manifest lists it, else from the shard files' index. */
struct anvil_ckpt_reader {
    anvil_st_file *fw, *fo;
    anvil_model_config cfg;
    const anvil_st_tensor *t[3][ANVIL_MODEL_MAX_TENSORS]; /* weights, m, v */
    int sharded[3];
    shard_index shards;
};

void anvil_ckpt_reader_close(anvil_ckpt_reader *r) {
    if (!r) return;
    anvil_st_close(r->fw);
    anvil_st_close(r->fo);
    shard_index_close(&r->shards);
    free(r);
}

anvil_ckpt_reader *anvil_ckpt_reader_open(const char *ckpt_dir, const anvil_model_config *cfg,
                                          anvil_ckpt_manifest *info, int verify) {
    anvil_ckpt_manifest m;
    if (info) memset(info, 0, sizeof *info);
    if (anvil_ckpt_read_manifest(ckpt_dir, &m)) return NULL;
    anvil_ckpt_reader *r = calloc(1, sizeof *r);
    int rc = r ? 0 : anvil_fail("%s: out of memory", ckpt_dir);
    if (!rc && verify) rc = ckpt_verify_files(ckpt_dir, &m, 0, 1, NULL, NULL);
    if (!rc) rc = compare_config(ckpt_dir, &m.model, cfg);
    if (!rc) {
        r->cfg = m.model;
        r->sharded[0] = !lists(&m, "model.safetensors");
        r->sharded[1] = r->sharded[2] = !lists(&m, "optim.safetensors");
    }
    if (!rc && !r->sharded[0] && !(r->fw = open_checked(ckpt_dir, "model.safetensors", wpre, 1, cfg, 1))) rc = -1;
    if (!rc && !r->sharded[1] && !(r->fo = open_checked(ckpt_dir, "optim.safetensors", opre, 2, cfg, 1))) rc = -1;
    /* The index's kinds are m, v, p; the reader's weights, m, v. */
    int need[3] = {r && r->sharded[1], r && r->sharded[2], r && r->sharded[0]};
    if (!rc && (need[0] || need[2]) && shard_index_open(&r->shards, ckpt_dir, &m, cfg, need)) rc = -1;
    for (int k = 0; !rc && k < 3; k++)
        for (int i = 0, nt = anvil_model_ntensors(cfg); !r->sharded[k] && i < nt; i++) {
            char name[128];
            ckpt_tensor_name(cfg, i, k ? opre[k - 1] : "", name, sizeof name);
            r->t[k][i] = anvil_st_find(k ? r->fo : r->fw, name);
        }
    if (rc) {
        anvil_ckpt_reader_close(r);
        anvil_ckpt_manifest_free(&m);
        return NULL;
    }
    if (info) *info = m;
    else anvil_ckpt_manifest_free(&m);
    return r;
}

int anvil_ckpt_reader_read(anvil_ckpt_reader *r, int kind, int i, size_t off, size_t n, float *dst) {
    if (kind < 0 || kind > 2 || i < 0 || i >= anvil_model_ntensors(&r->cfg))
        return anvil_fail("checkpoint: no tensor %d of kind %d", i, kind);
    if (r->sharded[kind]) {
        const size_t *o = r->shards.offsets;
        if (off > o[i + 1] - o[i] || n > o[i + 1] - o[i] - off) {
            char name[64];
            ckpt_tensor_name(&r->cfg, i, "", name, sizeof name);
            return anvil_fail("checkpoint: read of %zu elements at %zu is past the end of '%s' (%zu)", n, off, name,
                              o[i + 1] - o[i]);
        }
        return shard_index_read(&r->shards, kind ? kind - 1 : 2, o[i] + off, n, dst);
    }
    return ckpt_read_padded(kind ? r->fo : r->fw, r->t[kind][i], &r->cfg, i, off, n, dst);
}

int ckpt_read_padded(const anvil_st_file *f, const anvil_st_tensor *t, const anvil_model_config *c, int i, size_t off,
                     size_t n, float *dst) {
    size_t real = (size_t)(t->nbytes / sizeof(float)), a = off < real ? off : real;
    size_t b = off + n < real ? off + n : real;
    anvil_tensor_info info;
    anvil_model_tensor(c, i, &info);
    if (!info.vocab_rows && b - a < n)
        return anvil_fail("safetensors: read of %zu elements at %zu is past the end of '%s' (%zu)", n, off, t->name,
                          real);
    if (b > a && anvil_st_read(f, t, (uint64_t)a * sizeof(float), (uint64_t)(b - a) * sizeof(float), dst)) return -1;
    if (b - a < n) memset(dst + (b - a), 0, (n - (b - a)) * sizeof(float));
    return 0;
}
