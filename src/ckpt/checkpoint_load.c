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
static int check_table(const anvil_st_file *f, const char *path, const char *prefix, const anvil_gpt2_config *c) {
    for (int i = 0; i < ANVIL_GPT2_NPARAM; i++) {
        char name[64];
        snprintf(name, sizeof name, "%s%s", prefix, anvil_gpt2_param_names[i]);
        const anvil_st_tensor *t = anvil_st_find(f, name);
        if (!t) return anvil_fail("%s: tensor '%s' is missing", path, name);
        int64_t s[3];
        int nd = anvil_gpt2_param_shape(c, i, s);
        if (i == ANVIL_GPT2_WTE) s[0] = c->vocab_size;
        int ok = t->dtype == ANVIL_ST_F32 && t->ndim == nd;
        for (int d = 0; ok && d < nd; d++) ok = t->shape[d] == s[d];
        if (!ok) return anvil_fail("%s: tensor '%s' has the wrong dtype or shape for the manifest's model", path, name);
    }
    return 0;
}

/* Uploads the checked tensors straight from the file buffer into dst (backend memory); wte's padding
 * rows get `zeros` (room for them). */
static void upload_table(const anvil_st_file *f, const char *prefix, const anvil_gpt2 *m, float *dst,
                         const float *zeros) {
    for (int i = 0; i < ANVIL_GPT2_NPARAM; i++) {
        char name[64];
        snprintf(name, sizeof name, "%s%s", prefix, anvil_gpt2_param_names[i]);
        const anvil_st_tensor *t = anvil_st_find(f, name);
        m->k->upload(dst + m->offsets[i], t->data, t->nbytes);
    }
    size_t real = (size_t)m->cfg.vocab_size * (size_t)m->cfg.n_embd;
    size_t pad = m->offsets[ANVIL_GPT2_WTE + 1] - m->offsets[ANVIL_GPT2_WTE] - real;
    if (pad) m->k->upload(dst + m->offsets[ANVIL_GPT2_WTE] + real, zeros, pad * sizeof(float));
}

static int compare_config(const char *dir, const anvil_gpt2_config *a, const anvil_gpt2_config *b) {
    static const struct {
        const char *name;
        size_t off;
    } fields[] = {{"n_layer", offsetof(anvil_gpt2_config, n_layer)},
                  {"n_head", offsetof(anvil_gpt2_config, n_head)},
                  {"n_embd", offsetof(anvil_gpt2_config, n_embd)},
                  {"block_size", offsetof(anvil_gpt2_config, block_size)},
                  {"vocab_size", offsetof(anvil_gpt2_config, vocab_size)}};
    for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++) {
        int x = *(const int *)((const char *)a + fields[i].off), y = *(const int *)((const char *)b + fields[i].off);
        if (x != y)
            return anvil_fail("%s: model config differs: %s is %d in the checkpoint, %d in this run", dir,
                              fields[i].name, x, y);
    }
    return 0;
}

/* leaf in dir, read whole, or as an index (anvil_st_open_index) when indexed, with the tables of
 * prefixes checked. */
static anvil_st_file *open_checked(const char *dir, const char *leaf, const char *const *prefixes, int n,
                                   const anvil_gpt2_config *c, int indexed) {
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

/* A slice of a shard file: where it goes in the flat layout, and its tensor. */
typedef struct {
    size_t start, len;
    const anvil_st_tensor *t;
} span;

static int cmp_span(const void *a, const void *b) {
    size_t x = ((const span *)a)->start, y = ((const span *)b)->start;
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

/* The shard files of a sharded checkpoint, opened and checked: every tensor
 * is a named slice inside its parameter, and the slices of each kind cover
 * the whole flat layout exactly once. Only then are they copied into m and v
 * (when not NULL) and p (when not NULL: a stage-3 checkpoint has no whole
 * weights file), so a bad checkpoint changes nothing. */
static int load_shards(const char *dir, const anvil_ckpt_manifest *man, const anvil_gpt2 *model, float *p, float *m,
                       float *v) {
    anvil_st_file *files[ANVIL_CKPT_MAX_FILES] = {0};
    span *spans[3] = {0};
    size_t nspans[3] = {0}, cap = 0;
    int nf = 0, rc = 0;
    for (int i = 0; i < man->nfiles; i++)
        if (!strncmp(man->files[i].name, "shard_", 6)) {
            char path[PATH_MAX];
            if (ckpt_join(path, sizeof path, dir, man->files[i].name) || !(files[nf] = anvil_st_open(path))) {
                rc = -1;
                break;
            }
            cap += (size_t)anvil_st_count(files[nf++]);
        }
    if (!rc && !nf) rc = anvil_fail("%s: a ZeRO-%d checkpoint without shard files", dir, man->zero_stage);
    for (int k = 0; !rc && k < 3; k++)
        if (!(spans[k] = malloc((cap + 1) * sizeof(span)))) rc = anvil_fail("%s: out of memory", dir);
    for (int f = 0; !rc && f < nf; f++)
        for (int i = 0; !rc && i < anvil_st_count(files[f]); i++) {
            const anvil_st_tensor *t = anvil_st_at(files[f], i);
            char kind[4], param[32];
            size_t off = 0;
            int ti = -1, ki = -1;
            if (parse_slice_name(t->name, kind, param, &off)) {
                for (int j = 0; j < ANVIL_GPT2_NPARAM; j++)
                    if (!strcmp(param, anvil_gpt2_param_names[j])) ti = j;
                for (int j = 0; j < 3; j++)
                    if (!strcmp(kind, ckpt_slice_kinds[j])) ki = j;
            }
            size_t len = t->ndim == 1 ? (size_t)t->shape[0] : 0;
            if (ti < 0 || ki < 0 || t->dtype != ANVIL_ST_F32 || t->ndim != 1 ||
                off > model->offsets[ti + 1] - model->offsets[ti] ||
                len > model->offsets[ti + 1] - model->offsets[ti] - off)
                rc = anvil_fail("%s: tensor '%s' is not a slice of this model's parameters", man->files[f].name,
                                t->name);
            else
                spans[ki][nspans[ki]++] = (span){model->offsets[ti] + off, len, t};
        }
    float *dst[3] = {m, v, p};
    for (int k = 0; !rc && k < 3; k++) {
        if (!dst[k]) continue;
        qsort(spans[k], nspans[k], sizeof(span), cmp_span);
        size_t at = 0;
        for (size_t i = 0; !rc && i < nspans[k]; i++) {
            if (spans[k][i].start != at)
                rc = anvil_fail("%s: the shards' '%s' slices %s at element %zu", dir, ckpt_slice_kinds[k],
                                spans[k][i].start > at ? "leave a gap" : "overlap", at);
            at = spans[k][i].start + spans[k][i].len;
        }
        if (!rc && at != model->nparams)
            rc = anvil_fail("%s: the shards' '%s' slices cover %zu of %zu elements", dir, ckpt_slice_kinds[k], at,
                            model->nparams);
    }
    for (int k = 0; !rc && k < 3; k++)
        for (size_t i = 0; dst[k] && i < nspans[k]; i++)
            model->k->upload(dst[k] + spans[k][i].start, spans[k][i].t->data, spans[k][i].t->nbytes);
    for (int f = 0; f < nf; f++) anvil_st_close(files[f]);
    for (int k = 0; k < 3; k++) free(spans[k]);
    return rc;
}

static const char *const wpre[] = {""}, *const opre[] = {"m.", "v."};

int anvil_ckpt_load(const char *ckpt_dir, anvil_gpt2 *model, anvil_adamw *opt, anvil_ckpt_manifest *info) {
    anvil_ckpt_manifest m;
    if (info) memset(info, 0, sizeof *info);
    if (anvil_ckpt_read_manifest(ckpt_dir, &m)) return -1;
    int rc = ckpt_verify_files(ckpt_dir, &m, NULL, NULL);
    if (!rc) rc = compare_config(ckpt_dir, &m.model, &model->cfg);
    /* Every file is opened and checked before anything is copied, so a failure changes nothing.
     * Below stage 1 the state is whole in model and optim; from stage 1 the moments, and from
     * stage 3 the weights, come back from the shard files. */
    int stage = m.zero_stage;
    anvil_st_file *fw = NULL, *fo = NULL;
    if (!rc && stage < 3 && !(fw = open_checked(ckpt_dir, "model.safetensors", wpre, 1, &model->cfg, 0))) rc = -1;
    if (!rc && opt && stage == 0 && !(fo = open_checked(ckpt_dir, "optim.safetensors", opre, 2, &model->cfg, 0)))
        rc = -1;
    if (!rc && stage > 0 && (opt || stage == 3))
        rc = load_shards(ckpt_dir, &m, model, stage == 3 ? model->params : NULL, opt ? opt->m : NULL,
                         opt ? opt->v : NULL);
    size_t pad = model->offsets[ANVIL_GPT2_WTE + 1] - model->offsets[ANVIL_GPT2_WTE] -
                 (size_t)model->cfg.vocab_size * model->cfg.n_embd;
    float *zeros = rc ? NULL : calloc(pad + 1, sizeof(float));
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

struct anvil_ckpt_reader {
    anvil_st_file *fw, *fo;
    const anvil_st_tensor *t[3][ANVIL_GPT2_NPARAM]; /* weights, m, v */
};

void anvil_ckpt_reader_close(anvil_ckpt_reader *r) {
    if (!r) return;
    anvil_st_close(r->fw);
    anvil_st_close(r->fo);
    free(r);
}

anvil_ckpt_reader *anvil_ckpt_reader_open(const char *ckpt_dir, const anvil_gpt2_config *cfg,
                                          anvil_ckpt_manifest *info) {
    anvil_ckpt_manifest m;
    if (info) memset(info, 0, sizeof *info);
    if (anvil_ckpt_read_manifest(ckpt_dir, &m)) return NULL;
    anvil_ckpt_reader *r = calloc(1, sizeof *r);
    int rc = r ? 0 : anvil_fail("%s: out of memory", ckpt_dir);
    if (!rc && m.zero_stage > 0)
        rc = anvil_fail("%s: a ZeRO-%d checkpoint keeps its state in shard files, not read piece by piece", ckpt_dir,
                        m.zero_stage);
    if (!rc) rc = ckpt_verify_files(ckpt_dir, &m, NULL, NULL);
    if (!rc) rc = compare_config(ckpt_dir, &m.model, cfg);
    if (!rc && (!(r->fw = open_checked(ckpt_dir, "model.safetensors", wpre, 1, cfg, 1)) ||
                !(r->fo = open_checked(ckpt_dir, "optim.safetensors", opre, 2, cfg, 1))))
        rc = -1;
    for (int k = 0; !rc && k < 3; k++)
        for (int i = 0; i < ANVIL_GPT2_NPARAM; i++) {
            char name[64];
            snprintf(name, sizeof name, "%s%s", k ? opre[k - 1] : "", anvil_gpt2_param_names[i]);
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
    if (kind < 0 || kind > 2 || i < 0 || i >= ANVIL_GPT2_NPARAM)
        return anvil_fail("checkpoint: no tensor %d of kind %d", i, kind);
    const anvil_st_tensor *t = r->t[kind][i];
    /* The file's wte stops at the real vocabulary: what lies past it is padding, zero. */
    size_t real = (size_t)(t->nbytes / sizeof(float)), a = off < real ? off : real;
    size_t b = off + n < real ? off + n : real;
    if (i != ANVIL_GPT2_WTE && b - a < n)
        return anvil_fail("checkpoint: read of %zu elements at %zu is past the end of '%s' (%zu)", n, off, t->name,
                          real);
    if (b > a && anvil_st_read(kind ? r->fo : r->fw, t, (uint64_t)a * sizeof(float), (uint64_t)(b - a) * sizeof(float),
                               dst))
        return -1;
    if (b - a < n) memset(dst + (b - a), 0, (n - (b - a)) * sizeof(float));
    return 0;
}
