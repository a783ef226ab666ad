#include "ckpt/model_file.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "ckpt/checkpoint.h"
#include "ckpt/checkpoint_internal.h"
#include "ckpt/safetensors.h"
#include "core/confine.h"
#include "core/crc32c.h"
#include "core/error.h"
#include "core/fsutil.h"

void ckpt_model_meta_fill(ckpt_model_meta *mm, const anvil_model_config *c) {
    const char *key;
    mm->kv[0] = "format";
    mm->kv[1] = anvil_model_file_format(c->family);
    mm->n = 1;
    while (mm->n - 1 < 24 &&
           anvil_model_config_field(c, mm->n - 1, &key, mm->vals[mm->n - 1], sizeof mm->vals[0], NULL, NULL)) {
        mm->kv[2 * mm->n] = key;
        mm->kv[2 * mm->n + 1] = mm->vals[mm->n - 1];
        mm->n++;
    }
}

anvil_st_stream *anvil_model_stream_open(const char *path, const anvil_model_config *c,
                                         const anvil_model_tokenizer *tok) {
    anvil_st_tensor t[ANVIL_MODEL_MAX_TENSORS];
    char names[ANVIL_MODEL_MAX_TENSORS][64];
    int nt = anvil_model_ntensors(c);
    for (int i = 0; i < nt; i++) {
        int64_t s[3];
        int nd = ckpt_file_shape(c, i, s);
        memset(&t[i], 0, sizeof t[i]);
        ckpt_tensor_name(c, i, "", names[i], sizeof names[i]);
        t[i].name = names[i];
        t[i].dtype = ANVIL_ST_F32;
        t[i].ndim = nd;
        t[i].nbytes = sizeof(float);
        for (int d = 0; d < nd; d++) {
            t[i].shape[d] = s[d];
            t[i].nbytes *= (uint64_t)s[d];
        }
    }
    ckpt_model_meta mm;
    ckpt_model_meta_fill(&mm, c);
    char crc[16];
    snprintf(crc, sizeof crc, "%08x", tok ? tok->crc32c : 0u);
    const char *tmeta[] = {"tokenizer", tok && !tok->bytes ? "tiktoken" : "bytes", "tokenizer_pattern",
                           tok ? tok->pattern : "", "tokenizer_crc32c", crc};
    int n = mm.n;
    if (tok && tok->recorded)
        for (int j = 0; j < 3; j++, n++) {
            mm.kv[2 * n] = tmeta[2 * j];
            mm.kv[2 * n + 1] = tmeta[2 * j + 1];
        }
    return anvil_st_stream_open(path, t, nt, mm.kv, n);
}

int anvil_model_stream_put(anvil_st_stream *s, const anvil_model_config *c, int i, const float *data) {
    /* A vocabulary table's padding rows are the layout's, not the file's: its real rows come first. */
    return anvil_st_stream_write(s, data, ckpt_file_numel(c, i) * sizeof(float));
}

int anvil_model_save(const char *path, const anvil_model *m, const anvil_model_tokenizer *tok) {
    float *host = malloc(m->nparams * sizeof(float));
    if (!host) return anvil_fail("%s: out of memory", path);
    m->k->download(host, m->params, m->nparams * sizeof(float));
    anvil_st_stream *s = anvil_model_stream_open(path, &m->cfg, tok);
    int rc = s ? 0 : -1;
    for (int i = 0; !rc && i < m->ntensors; i++) rc = anvil_model_stream_put(s, &m->cfg, i, host + m->offsets[i]);
    if (!rc) rc = anvil_st_stream_commit(s);
    else anvil_st_stream_abort(s);
    free(host);
    return rc;
}

static int load_from(const anvil_st_file *f, const char *path, const char *prefix, anvil_model *m) {
    float *host = calloc(m->nparams, sizeof(float));
    if (!host) return anvil_fail("%s: out of memory", path);
    for (int i = 0; i < m->ntensors; i++) {
        const anvil_st_tensor *t = ckpt_checked_tensor(f, path, prefix, &m->cfg, i);
        if (!t) {
            free(host);
            return -1;
        }
        memcpy(host + m->offsets[i], t->data, t->nbytes);
    }
    m->k->upload(m->params, host, m->nparams * sizeof(float));
    free(host);
    return 0;
}

int anvil_model_load_tensors(const char *path, const char *prefix, anvil_model *m) {
    anvil_st_file *f = anvil_st_open(path);
    if (!f) return -1;
    int rc = load_from(f, path, prefix, m);
    anvil_st_close(f);
    return rc;
}

/* The model configuration a model file's metadata records, checked (padded_vocab set): its family by
 * the format, then the family's fields. */
static int read_config(const anvil_st_file *f, const char *path, anvil_model_config *c) {
    memset(c, 0, sizeof *c);
    const char *fmt = anvil_st_meta(f, "format");
    if (!fmt || !(c->family = anvil_model_family_of_format(fmt)))
        return anvil_fail("%s: not an anvil model file (metadata 'format' is %s)", path, fmt ? fmt : "missing");
    const char *key;
    char text[32];
    int is_float, min;
    for (int i = 0; anvil_model_config_field(c, i, &key, text, sizeof text, &is_float, &min); i++) {
        const char *v = anvil_st_meta(f, key);
        if (!v) return anvil_fail("%s: metadata field '%s' is missing", path, key);
        char *end;
        errno = 0;
        long x = is_float ? 0 : strtol(v, &end, 10);
        if (!is_float && (errno || end == v || *end || x < min || x > 1 << 24))
            return anvil_fail("%s: metadata field '%s' is not an integer in [%d, %d]: '%s'", path, key, min, 1 << 24,
                              v);
        if (anvil_model_config_set(c, key, v)) {
            char why[256];
            snprintf(why, sizeof why, "%s", anvil_errmsg());
            return anvil_fail("%s: metadata field '%s': %s", path, key, why);
        }
    }
    if (anvil_model_config_check(c)) {
        char why[256];
        snprintf(why, sizeof why, "%s", anvil_errmsg());
        return anvil_fail("%s: %s", path, why);
    }
    return 0;
}

int anvil_model_load(const char *path, const anvil_kernels *k, anvil_model *m) {
    anvil_st_file *f = anvil_st_open(path);
    if (!f) return -1;
    anvil_model_config c;
    int rc = read_config(f, path, &c) || anvil_model_init(m, &c, k) ? -1 : 0;
    if (!rc && (rc = load_from(f, path, "", m))) anvil_model_free(m);
    anvil_st_close(f);
    return rc;
}

struct anvil_model_reader {
    anvil_st_file *f;
    anvil_model_config cfg;
    const anvil_st_tensor *t[ANVIL_MODEL_MAX_TENSORS];
};

anvil_model_reader *anvil_model_reader_open(const char *path, anvil_model_config *cfg) {
    anvil_model_reader *r = calloc(1, sizeof *r);
    if (!r) {
        anvil_fail("%s: out of memory", path);
        return NULL;
    }
    int rc = (r->f = anvil_st_open_index(path)) ? read_config(r->f, path, cfg) : -1;
    if (!rc) r->cfg = *cfg;
    for (int i = 0, nt = rc ? 0 : anvil_model_ntensors(cfg); !rc && i < nt; i++)
        if (!(r->t[i] = ckpt_checked_tensor(r->f, path, "", cfg, i))) rc = -1;
    if (rc) {
        anvil_model_reader_close(r);
        return NULL;
    }
    return r;
}

int anvil_model_reader_read(anvil_model_reader *r, int i, size_t off, size_t n, float *dst) {
    if (i < 0 || i >= anvil_model_ntensors(&r->cfg)) return anvil_fail("model file: no tensor %d", i);
    return ckpt_read_padded(r->f, r->t[i], &r->cfg, i, off, n, dst);
}

void anvil_model_reader_close(anvil_model_reader *r) {
    if (!r) return;
    anvil_st_close(r->f);
    free(r);
}

static int load_checkpoint(const char *dir, const anvil_kernels *k, anvil_model *m, int verify) {
    anvil_ckpt_manifest info;
    if (anvil_ckpt_read_manifest(dir, &info)) return -1;
    anvil_model_config c = info.model;
    anvil_ckpt_manifest_free(&info);
    if (anvil_model_init(m, &c, k)) return -1;
    if (anvil_ckpt_load(dir, m, NULL, NULL, verify)) {
        anvil_model_free(m);
        return -1;
    }
    return 0;
}

int anvil_model_load_any(const char *path, const anvil_kernels *k, anvil_model *m, char *warn, size_t warn_cap) {
    struct stat sb;
    char p[PATH_MAX];
    if (warn_cap) warn[0] = 0;
    if (stat(path, &sb) || !S_ISDIR(sb.st_mode)) return anvil_model_load(path, k, m);
    snprintf(p, sizeof p, "%s/model.safetensors", path);
    char manifest[PATH_MAX];
    snprintf(manifest, sizeof manifest, "%s/manifest.json", path);
    if (stat(manifest, &sb) && stat(p, &sb) == 0) return anvil_model_load(p, k, m);
    if (anvil_ckpt_resolve(path, p, sizeof p, warn, warn_cap)) return -1;
    /* A run folder resolved to its newest checkpoint that verifies: its files were just checksummed. */
    return load_checkpoint(p, k, m, !strcmp(p, path));
}

int anvil_model_tokenizer_of(const char *rank_file, const char *pattern, anvil_model_tokenizer *out) {
    memset(out, 0, sizeof *out);
    out->recorded = 1;
    out->bytes = !rank_file || !rank_file[0];
    if (out->bytes) return 0;
    if (!pattern || strlen(pattern) >= sizeof out->pattern)
        return anvil_fail("%s: the tokenizer's encoding name is missing or too long", rank_file);
    snprintf(out->pattern, sizeof out->pattern, "%s", pattern);
    uint64_t bytes;
    return anvil_crc32c_file(rank_file, &bytes, &out->crc32c);
}

int anvil_model_tokenizer_keep(const char *rank_file, const char *dir) {
    char dest[PATH_MAX], *data;
    size_t len;
    snprintf(dest, sizeof dest, "%s/%s", dir, ANVIL_MODEL_TOKENIZER_FILE);
    if (anvil_confined(rank_file, "tokenizer") || anvil_read_file(rank_file, &data, &len)) return -1;
    int rc = anvil_write_file_atomic(dest, data, len);
    free(data);
    return rc;
}

int anvil_model_read_tokenizer(const char *path, anvil_model_tokenizer *out) {
    memset(out, 0, sizeof *out);
    anvil_st_file *f = anvil_st_open(path);
    if (!f) return -1;
    const char *kind = anvil_st_meta(f, "tokenizer"), *pattern = anvil_st_meta(f, "tokenizer_pattern");
    const char *crc = anvil_st_meta(f, "tokenizer_crc32c");
    int rc = 0;
    if (kind && !strcmp(kind, "bytes")) {
        out->recorded = out->bytes = 1;
    } else if (kind) {
        char *end = NULL;
        unsigned long v = crc ? strtoul(crc, &end, 16) : 0;
        if (strcmp(kind, "tiktoken") || !pattern || !pattern[0] || strlen(pattern) >= sizeof out->pattern || !crc ||
            strlen(crc) != 8 || *end || v > UINT32_MAX)
            rc = anvil_fail("%s: metadata 'tokenizer' is neither bytes nor tiktoken with an encoding and an 8-digit "
                            "tokenizer_crc32c",
                            path);
        else {
            out->recorded = 1;
            snprintf(out->pattern, sizeof out->pattern, "%s", pattern);
            out->crc32c = (uint32_t)v;
        }
    }
    anvil_st_close(f);
    return rc;
}

int anvil_model_tokenizer_for(const char *path, const char *rank_file, char *found, size_t cap, char *pattern) {
    struct stat sb;
    char model[PATH_MAX], own[PATH_MAX];
    found[0] = pattern[0] = 0;
    int is_dir = stat(path, &sb) == 0 && S_ISDIR(sb.st_mode);
    snprintf(model, sizeof model, is_dir ? "%s/model.safetensors" : "%s", path);
    if (is_dir && stat(model, &sb)) return 0; /* a checkpoint: no record */
    anvil_model_tokenizer rec, given;
    if (anvil_model_read_tokenizer(model, &rec)) return -1;
    if (!rec.recorded) return 0;
    if (rank_file) {
        if (rec.bytes) return anvil_fail("%s: the model was trained on bytes, not with the tokenizer %s", model, rank_file);
        if (anvil_model_tokenizer_of(rank_file, rec.pattern, &given)) return -1;
        if (given.crc32c != rec.crc32c)
            return anvil_fail("%s (crc32c %08x) is not the tokenizer %s was trained with (crc32c %08x)", rank_file,
                              given.crc32c, model, rec.crc32c);
        return 0;
    }
    if (rec.bytes) return 0;
    const char *slash = strrchr(model, '/');
    int dirlen = slash ? (int)(slash - model) : 1;
    snprintf(own, sizeof own, "%.*s/%s", dirlen, slash ? model : ".", ANVIL_MODEL_TOKENIZER_FILE);
    if (stat(own, &sb))
        return anvil_fail("%s: the model was trained with a tiktoken tokenizer (%s, crc32c %08x), but %s is missing: "
                          "give it with --tokenizer",
                          model, rec.pattern, rec.crc32c, own);
    if (anvil_model_tokenizer_of(own, rec.pattern, &given)) return -1;
    if (given.crc32c != rec.crc32c)
        return anvil_fail("%s (crc32c %08x) is not the tokenizer %s was trained with (crc32c %08x)", own, given.crc32c,
                          model, rec.crc32c);
    snprintf(found, cap, "%s", own);
    snprintf(pattern, 32, "%s", rec.pattern);
    return 0;
}
