#include "ckpt/checkpoint.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "ckpt/safetensors.h"
#include "core/crc32c.h"
#include "core/error.h"
#include "core/fsutil.h"

#define MANIFEST_MAX_BYTES (16u << 20)
#define JSON_MAX_INT 9007199254740992.0 /* 2^53: beyond it a JSON number is not an exact integer */

/* ---- paths ---- */

static int join(char *out, size_t cap, const char *a, const char *b) {
    int n = snprintf(out, cap, "%s/%s", a, b);
    if (n < 0 || (size_t)n >= cap) return anvil_fail("%s/%s: path too long", a, b);
    return 0;
}

/* ---- tensor tables: the model-file layout, shared by weights and moments ---- */

typedef struct {
    anvil_st_tensor t[ANVIL_GPT2_NPARAM];
    char names[ANVIL_GPT2_NPARAM][32];
} tensor_table;

static void fill_table(tensor_table *tt, const anvil_gpt2_config *c, const size_t *offsets, const float *base,
                       const char *prefix) {
    for (int i = 0; i < ANVIL_GPT2_NPARAM; i++) {
        int64_t s[3];
        int nd = anvil_gpt2_param_shape(c, i, s);
        if (i == P_WTE) s[0] = c->vocab_size;
        anvil_st_tensor *t = &tt->t[i];
        memset(t, 0, sizeof *t);
        snprintf(tt->names[i], sizeof tt->names[i], "%s%s", prefix, anvil_gpt2_param_names[i]);
        t->name = tt->names[i];
        t->dtype = ANVIL_ST_F32;
        t->ndim = nd;
        t->nbytes = sizeof(float);
        for (int d = 0; d < nd; d++) {
            t->shape[d] = s[d];
            t->nbytes *= (uint64_t)s[d];
        }
        t->data = base + offsets[i];
    }
}

/* Checks that f holds every tensor prefix+param with the model-file shape. */
static int check_table(const anvil_st_file *f, const char *path, const char *prefix, const anvil_gpt2_config *c) {
    for (int i = 0; i < ANVIL_GPT2_NPARAM; i++) {
        char name[64];
        snprintf(name, sizeof name, "%s%s", prefix, anvil_gpt2_param_names[i]);
        const anvil_st_tensor *t = anvil_st_find(f, name);
        if (!t) return anvil_fail("%s: tensor '%s' is missing", path, name);
        int64_t s[3];
        int nd = anvil_gpt2_param_shape(c, i, s);
        if (i == P_WTE) s[0] = c->vocab_size;
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
    size_t pad = m->offsets[P_WTE + 1] - m->offsets[P_WTE] - real;
    if (pad) m->k->upload(dst + m->offsets[P_WTE] + real, zeros, pad * sizeof(float));
}

/* ---- snapshots ---- */

struct anvil_ckpt_snapshot {
    anvil_gpt2_config cfg;
    size_t nparams;
    size_t offsets[ANVIL_GPT2_NPARAM + 1];
    float *params, *m, *v;
    anvil_adamw_config acfg;
    int t;
    anvil_loader_state loader;
    anvil_rng rng;
    int64_t step, tokens_seen;
    char *tokenizer;
    char *train_config; /* compact JSON object */
    anvil_ckpt_layout layout;
};

void anvil_ckpt_snapshot_free(anvil_ckpt_snapshot *s) {
    if (!s) return;
    free(s->params);
    free(s->m);
    free(s->v);
    free(s->tokenizer);
    free(s->train_config);
    free(s);
}

int64_t anvil_ckpt_snapshot_step(const anvil_ckpt_snapshot *s) { return s->step; }

static char *compact_config(const char *json) {
    if (!json) json = "{}";
    cJSON *j = cJSON_Parse(json);
    if (!j || !cJSON_IsObject(j)) {
        cJSON_Delete(j);
        anvil_fail("checkpoint: the training configuration is not a JSON object");
        return NULL;
    }
    char *out = cJSON_PrintUnformatted(j);
    cJSON_Delete(j);
    if (!out) anvil_fail("checkpoint: out of memory");
    return out;
}

/* Snapshot buffers are 2 MiB aligned and backed by transparent huge pages:
 * the first snapshot touches every page of 3x the model, and at 4 KiB a
 * page the faults alone cost seconds on a virtual machine. */
static void *snapshot_alloc(size_t bytes) {
    const size_t huge = (size_t)2 << 20;
    size_t rounded = (bytes + huge - 1) / huge * huge;
    void *p = aligned_alloc(huge, rounded ? rounded : huge);
    if (p) madvise(p, rounded, MADV_HUGEPAGE);
    return p;
}

/* (Re)allocates *p for bytes when wanted, frees it otherwise. */
static int snapshot_buffer(float **p, int want, size_t bytes) {
    if (!want) {
        free(*p);
        *p = NULL;
        return 0;
    }
    if (!*p) *p = snapshot_alloc(bytes);
    return *p ? 0 : -1;
}

anvil_ckpt_snapshot *anvil_ckpt_snapshot_take(anvil_ckpt_snapshot *reuse, const anvil_ckpt_state *st) {
    int stage = st && st->layout ? st->layout->zero_stage : 0;
    int has_opt = st && st->opt && st->opt->m && st->opt->v;
    if (!st || !st->model || (stage == 0 && !has_opt) || (stage < 3 && !st->model->params) || st->step < 0 ||
        st->tokens_seen < 0 || stage < 0 || stage > 3) {
        anvil_ckpt_snapshot_free(reuse);
        anvil_fail("checkpoint: the state to save needs a model, an initialized optimizer and counters >= 0");
        return NULL;
    }
    const anvil_adamw_config *ac = stage ? &st->layout->adamw : &st->opt->cfg;
    if (!isfinite(ac->beta1) || !isfinite(ac->beta2) || !isfinite(ac->eps) || !isfinite(ac->weight_decay)) {
        anvil_ckpt_snapshot_free(reuse);
        anvil_fail("checkpoint: the AdamW hyperparameters are not finite");
        return NULL;
    }
    const anvil_gpt2 *model = st->model;
    anvil_ckpt_snapshot *s = reuse;
    if (s && s->nparams != model->nparams) {
        anvil_ckpt_snapshot_free(s);
        s = NULL;
    }
    if (!s) s = calloc(1, sizeof *s);
    size_t bytes = model->nparams * sizeof(float);
    if (!s || snapshot_buffer(&s->params, stage < 3, bytes) || snapshot_buffer(&s->m, stage == 0, bytes) ||
        snapshot_buffer(&s->v, stage == 0, bytes)) {
        anvil_ckpt_snapshot_free(s);
        anvil_fail("checkpoint: out of memory for a %zu-parameter snapshot", model->nparams);
        return NULL;
    }
    s->nparams = model->nparams;
    free(s->tokenizer);
    free(s->train_config);
    s->tokenizer = strdup(st->tokenizer ? st->tokenizer : "bytes");
    s->train_config = compact_config(st->train_config_json);
    if (!s->tokenizer || !s->train_config) {
        if (!s->tokenizer) anvil_fail("checkpoint: out of memory");
        anvil_ckpt_snapshot_free(s);
        return NULL;
    }
    s->cfg = model->cfg;
    memcpy(s->offsets, model->offsets, sizeof s->offsets);
    if (s->params) model->k->download(s->params, model->params, bytes);
    if (s->m) {
        model->k->download(s->m, st->opt->m, bytes);
        model->k->download(s->v, st->opt->v, bytes);
    }
    s->layout = st->layout ? *st->layout : (anvil_ckpt_layout){1, 0, 1, 0, st->opt->cfg};
    s->acfg = *ac;
    s->t = stage ? st->layout->adam_t : st->opt->t;
    s->loader = st->loader;
    s->rng = st->rng;
    s->step = st->step;
    s->tokens_seen = st->tokens_seen;
    return s;
}

/* ---- manifest ---- */

static int add_raw_i64(cJSON *o, const char *key, int64_t v) {
    char buf[32];
    snprintf(buf, sizeof buf, "%" PRId64, v);
    return cJSON_AddRawToObject(o, key, buf) != NULL;
}

static int add_u64_string(cJSON *o, const char *key, uint64_t v) {
    char buf[32];
    snprintf(buf, sizeof buf, "%" PRIu64, v);
    return cJSON_AddStringToObject(o, key, buf) != NULL;
}

/* The shortest decimal that reads back as the same float, so 0.9f shows as 0.9. */
static int add_float(cJSON *o, const char *key, float v) {
    char buf[32];
    for (int prec = 6; prec <= 9; prec++) {
        snprintf(buf, sizeof buf, "%.*g", prec, (double)v);
        if (strtof(buf, NULL) == v) break;
    }
    return cJSON_AddRawToObject(o, key, buf) != NULL;
}

static char *build_manifest(const anvil_ckpt_snapshot *s, const anvil_ckpt_file *files, int nfiles) {
    cJSON *root = cJSON_CreateObject(), *o;
    int ok = root != NULL;
    ok = ok && cJSON_AddStringToObject(root, "format", "anvil-checkpoint");
    ok = ok && cJSON_AddNumberToObject(root, "version", ANVIL_CKPT_VERSION);
    ok = ok && add_raw_i64(root, "step", s->step) && add_raw_i64(root, "tokens_seen", s->tokens_seen);
    char when[32];
    time_t now = time(NULL);
    struct tm tmv;
    strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", gmtime_r(&now, &tmv));
    ok = ok && cJSON_AddStringToObject(root, "saved_at", when);
    ok = ok && (o = cJSON_AddObjectToObject(root, "model"));
    ok = ok && cJSON_AddNumberToObject(o, "n_layer", s->cfg.n_layer) &&
         cJSON_AddNumberToObject(o, "n_head", s->cfg.n_head) && cJSON_AddNumberToObject(o, "n_embd", s->cfg.n_embd) &&
         cJSON_AddNumberToObject(o, "block_size", s->cfg.block_size) &&
         cJSON_AddNumberToObject(o, "vocab_size", s->cfg.vocab_size);
    ok = ok && cJSON_AddStringToObject(root, "tokenizer", s->tokenizer);
    cJSON *tc = ok ? cJSON_Parse(s->train_config) : NULL;
    ok = ok && tc && cJSON_AddItemToObject(root, "train_config", tc);
    ok = ok && (o = cJSON_AddObjectToObject(root, "loader"));
    ok = ok && add_raw_i64(o, "shard", s->loader.shard) && add_raw_i64(o, "position", s->loader.position) &&
         add_raw_i64(o, "epoch", s->loader.epoch) && cJSON_AddBoolToObject(o, "shuffled", s->loader.shuffled != 0) &&
         add_u64_string(o, "shuffle_seed", s->loader.shuffle_seed);
    ok = ok && (o = cJSON_AddObjectToObject(root, "rng"));
    ok = ok && add_u64_string(o, "s0", s->rng.s[0]) && add_u64_string(o, "s1", s->rng.s[1]);
    ok = ok && (o = cJSON_AddObjectToObject(root, "optimizer"));
    ok = ok && cJSON_AddStringToObject(o, "name", "adamw") && add_raw_i64(o, "t", s->t) &&
         add_float(o, "beta1", s->acfg.beta1) && add_float(o, "beta2", s->acfg.beta2) &&
         add_float(o, "eps", s->acfg.eps) && add_float(o, "weight_decay", s->acfg.weight_decay);
    ok = ok && (o = cJSON_AddObjectToObject(root, "parallel"));
    ok = ok && cJSON_AddNumberToObject(o, "world", s->layout.world) && cJSON_AddNumberToObject(o, "rank", 0) &&
         cJSON_AddNumberToObject(o, "zero_stage", s->layout.zero_stage) &&
         cJSON_AddNumberToObject(o, "shard_group", s->layout.shard_group);
    cJSON *arr = ok ? cJSON_AddArrayToObject(root, "files") : NULL;
    ok = ok && arr;
    for (int i = 0; ok && i < nfiles; i++) {
        cJSON *f = cJSON_CreateObject();
        char hex[16];
        snprintf(hex, sizeof hex, "%08" PRIx32, files[i].crc32c);
        ok = f && cJSON_AddItemToArray(arr, f) && cJSON_AddStringToObject(f, "name", files[i].name) &&
             add_raw_i64(f, "bytes", (int64_t)files[i].bytes) && cJSON_AddStringToObject(f, "crc32c", hex);
    }
    /* Last, so that find_crc_field's search from the end finds this one. */
    ok = ok && cJSON_AddStringToObject(root, "manifest_crc32c", "00000000");
    char *text = ok ? cJSON_Print(root) : NULL;
    cJSON_Delete(root);
    if (!text || anvil_ckpt_manifest_stamp(text, strlen(text))) {
        cJSON_free(text);
        anvil_fail("checkpoint: out of memory building the manifest");
        return NULL;
    }
    return text;
}

/* ---- the manifest's own checksum ---- */

#define CRC_KEY "\"manifest_crc32c\""

static int json_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

/* The 8 value bytes of the last "manifest_crc32c": "XXXXXXXX" member in text, or NULL. Found in the
 * raw bytes rather than the parsed tree so that the checksum covers the text exactly as stored;
 * the last occurrence because the writer puts the field last, after any string of the training
 * configuration that could contain the same characters. */
static const char *find_crc_field(const char *text, size_t len) {
    size_t klen = strlen(CRC_KEY);
    for (size_t at = len >= klen ? len - klen + 1 : 0; at-- > 0;) {
        if (text[at] != '"' || memcmp(text + at, CRC_KEY, klen)) continue;
        size_t i = at + klen;
        while (i < len && json_space(text[i])) i++;
        if (i >= len || text[i++] != ':') return NULL;
        while (i < len && json_space(text[i])) i++;
        if (len - i < 10 || text[i] != '"' || text[i + 9] != '"') return NULL;
        return text + i + 1;
    }
    return NULL;
}

/* CRC-32C of the whole text with the 8 value bytes at `value` read as "00000000". */
static uint32_t manifest_crc(const char *text, size_t len, const char *value) {
    size_t head = (size_t)(value - text);
    uint32_t c = anvil_crc32c(0, text, head);
    c = anvil_crc32c(c, "00000000", 8);
    return anvil_crc32c(c, value + 8, len - head - 8);
}

int anvil_ckpt_manifest_stamp(char *text, size_t len) {
    char *value = (char *)find_crc_field(text, len);
    if (!value) return anvil_fail("manifest: no \"manifest_crc32c\" field to stamp");
    char hex[9];
    snprintf(hex, sizeof hex, "%08" PRIx32, manifest_crc(text, len, value));
    memcpy(value, hex, 8);
    return 0;
}

static int get_int(const cJSON *obj, const char *key, const char *where, const char *name, double lo, double hi,
                   int64_t *out) {
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!it) return anvil_fail("%s: field '%s%s' is missing", name, where, key);
    double d = it->valuedouble;
    if (!cJSON_IsNumber(it) || d != floor(d) || d < lo || d > hi)
        return anvil_fail("%s: field '%s%s' must be an integer in [%.0f, %.0f]", name, where, key, lo, hi);
    *out = (int64_t)d;
    return 0;
}

static int get_num(const cJSON *obj, const char *key, const char *where, const char *name, float *out) {
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!cJSON_IsNumber(it) || !isfinite(it->valuedouble))
        return anvil_fail("%s: field '%s%s' is missing or not a finite number", name, where, key);
    *out = (float)it->valuedouble;
    return 0;
}

static const cJSON *get_obj(const cJSON *obj, const char *key, const char *name) {
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!cJSON_IsObject(it)) anvil_fail("%s: field '%s' is missing or not an object", name, key);
    return cJSON_IsObject(it) ? it : NULL;
}

static int get_u64_string(const cJSON *obj, const char *key, const char *where, const char *name, uint64_t *out) {
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(obj, key);
    const char *s = cJSON_GetStringValue(it);
    int ok = s && *s >= '0' && *s <= '9' && strlen(s) <= 20;
    if (ok) {
        char *end;
        errno = 0;
        unsigned long long v = strtoull(s, &end, 10);
        ok = !errno && !*end;
        *out = v;
    }
    if (!ok) return anvil_fail("%s: field '%s%s' must be a decimal u64 in a string", name, where, key);
    return 0;
}

/* A file name in the manifest must stay inside the checkpoint folder. */
static int safe_file_name(const char *s) {
    if (!s || !*s || *s == '.' || strlen(s) >= sizeof((anvil_ckpt_file *)0)->name) return 0;
    for (const char *p = s; *p; p++)
        if (*p == '/' || *p == '\\' || (unsigned char)*p < 0x20) return 0;
    return 1;
}

static int parse_files(const cJSON *root, const char *name, anvil_ckpt_manifest *m) {
    const cJSON *arr = cJSON_GetObjectItemCaseSensitive(root, "files");
    if (!cJSON_IsArray(arr)) return anvil_fail("%s: field 'files' is missing or not an array", name);
    int n = cJSON_GetArraySize(arr);
    if (n < 1 || n > ANVIL_CKPT_MAX_FILES)
        return anvil_fail("%s: 'files' must list 1 to %d files, has %d", name, ANVIL_CKPT_MAX_FILES, n);
    int i = 0;
    for (const cJSON *f = arr->child; f; f = f->next, i++) {
        char where[32];
        snprintf(where, sizeof where, "files[%d].", i);
        if (!cJSON_IsObject(f)) return anvil_fail("%s: 'files[%d]' is not an object", name, i);
        const char *fn = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(f, "name"));
        if (!safe_file_name(fn)) return anvil_fail("%s: 'files[%d].name' is missing or not a plain file name", name, i);
        for (int j = 0; j < i; j++)
            if (!strcmp(m->files[j].name, fn)) return anvil_fail("%s: file '%s' is listed twice", name, fn);
        int64_t bytes = 0;
        if (get_int(f, "bytes", where, name, 0, JSON_MAX_INT, &bytes)) return -1;
        const char *hex = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(f, "crc32c"));
        char *end = NULL;
        unsigned long crc = hex && strlen(hex) == 8 && hex[0] != '-' && hex[0] != '+' ? strtoul(hex, &end, 16) : 0;
        if (!end || *end) return anvil_fail("%s: 'files[%d].crc32c' must be 8 hex digits", name, i);
        snprintf(m->files[i].name, sizeof m->files[i].name, "%s", fn);
        m->files[i].bytes = (uint64_t)bytes;
        m->files[i].crc32c = (uint32_t)crc;
    }
    m->nfiles = n;
    return 0;
}

static int parse_root(const cJSON *root, const char *name, const char *crc_value, anvil_ckpt_manifest *m) {
    if (!cJSON_IsObject(root)) return anvil_fail("%s: not a JSON object", name);
    const char *fmt = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(root, "format"));
    if (!fmt || strcmp(fmt, "anvil-checkpoint"))
        return anvil_fail("%s: field 'format' is not \"anvil-checkpoint\"", name);
    int64_t v = 0;
    if (get_int(root, "version", "", name, 1, 1e9, &v)) return -1;
    if (v > ANVIL_CKPT_VERSION)
        return anvil_fail("%s: checkpoint format version %" PRId64 " is newer than this build reads (%d); "
                          "upgrade anvil",
                          name, v, ANVIL_CKPT_VERSION);
    m->version = (int)v;
    /* The checksum itself was checked on the raw text; here the parsed tree must agree that the
     * field is there, so that a flip inside its key cannot pass a version-2 manifest as unprotected. */
    const char *mc = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(root, "manifest_crc32c"));
    if ((v >= 2 || mc) && (!mc || !crc_value || strlen(mc) != 8 || memcmp(mc, crc_value, 8)))
        return anvil_fail("%s: field 'manifest_crc32c' is missing, malformed or not the last member", name);
    if (get_int(root, "step", "", name, 0, JSON_MAX_INT, &m->step) ||
        get_int(root, "tokens_seen", "", name, 0, JSON_MAX_INT, &m->tokens_seen))
        return -1;

    const cJSON *o = get_obj(root, "model", name);
    int64_t x[5] = {0};
    if (!o || get_int(o, "n_layer", "model.", name, 1, 1e9, &x[0]) ||
        get_int(o, "n_head", "model.", name, 1, 1e9, &x[1]) || get_int(o, "n_embd", "model.", name, 1, 1e9, &x[2]) ||
        get_int(o, "block_size", "model.", name, 1, 1e9, &x[3]) ||
        get_int(o, "vocab_size", "model.", name, 1, 1e9, &x[4]))
        return -1;
    m->model = (anvil_gpt2_config){(int)x[0], (int)x[1], (int)x[2], (int)x[3], (int)x[4], 0};
    if (anvil_gpt2_config_check(&m->model)) {
        char why[256];
        snprintf(why, sizeof why, "%s", anvil_errmsg());
        return anvil_fail("%s: field 'model' is invalid: %s", name, why);
    }

    const char *tok = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(root, "tokenizer"));
    if (!tok || strlen(tok) >= sizeof m->tokenizer)
        return anvil_fail("%s: field 'tokenizer' is missing, not a string or too long", name);
    snprintf(m->tokenizer, sizeof m->tokenizer, "%s", tok);

    if (!(o = get_obj(root, "loader", name)) ||
        get_int(o, "shard", "loader.", name, 0, JSON_MAX_INT, &m->loader.shard) ||
        get_int(o, "position", "loader.", name, 0, JSON_MAX_INT, &m->loader.position) ||
        get_int(o, "epoch", "loader.", name, 0, JSON_MAX_INT, &m->loader.epoch))
        return -1;
    /* Version 1 predates shuffling: its batches were always in order. */
    const cJSON *sh = cJSON_GetObjectItemCaseSensitive(o, "shuffled");
    if (m->version >= 2 || sh) {
        if (!cJSON_IsBool(sh)) return anvil_fail("%s: field 'loader.shuffled' is missing or not true/false", name);
        if (get_u64_string(o, "shuffle_seed", "loader.", name, &m->loader.shuffle_seed)) return -1;
        m->loader.shuffled = cJSON_IsTrue(sh);
        if (!m->loader.shuffled && m->loader.shuffle_seed)
            return anvil_fail("%s: field 'loader.shuffle_seed' must be \"0\" when 'loader.shuffled' is false", name);
    }
    if (!(o = get_obj(root, "rng", name)) || get_u64_string(o, "s0", "rng.", name, &m->rng.s[0]) ||
        get_u64_string(o, "s1", "rng.", name, &m->rng.s[1]))
        return -1;
    if (!(o = get_obj(root, "optimizer", name)) || get_int(o, "t", "optimizer.", name, 0, INT_MAX, &m->adam_t) ||
        get_num(o, "beta1", "optimizer.", name, &m->adamw.beta1) ||
        get_num(o, "beta2", "optimizer.", name, &m->adamw.beta2) ||
        get_num(o, "eps", "optimizer.", name, &m->adamw.eps) ||
        get_num(o, "weight_decay", "optimizer.", name, &m->adamw.weight_decay))
        return -1;
    int64_t p[4] = {0};
    if (!(o = get_obj(root, "parallel", name)) || get_int(o, "world", "parallel.", name, 1, 1 << 24, &p[0]) ||
        get_int(o, "rank", "parallel.", name, 0, (1 << 24) - 1, &p[1]) ||
        get_int(o, "zero_stage", "parallel.", name, 0, 3, &p[2]) ||
        get_int(o, "shard_group", "parallel.", name, 1, 1 << 24, &p[3]))
        return -1;
    if (p[1] >= p[0])
        return anvil_fail("%s: field 'parallel.rank' (%" PRId64 ") is not below 'parallel.world'", name, p[1]);
    m->world = (int)p[0];
    m->rank = (int)p[1];
    m->zero_stage = (int)p[2];
    m->shard_group = (int)p[3];

    const cJSON *tc = cJSON_GetObjectItemCaseSensitive(root, "train_config");
    if (!cJSON_IsObject(tc)) return anvil_fail("%s: field 'train_config' is missing or not an object", name);
    if (parse_files(root, name, m)) return -1;
    m->train_config = cJSON_PrintUnformatted(tc);
    if (!m->train_config) return anvil_fail("%s: out of memory", name);
    return 0;
}

int anvil_ckpt_manifest_parse(const char *text, size_t len, const char *name, anvil_ckpt_manifest *out) {
    memset(out, 0, sizeof *out);
    /* Checked before parsing, so that a corrupt manifest is reported as such rather than as
     * whichever field the damage happened to hit. */
    const char *crc_value = find_crc_field(text, len);
    if (crc_value) {
        char want[9];
        snprintf(want, sizeof want, "%08" PRIx32, manifest_crc(text, len, crc_value));
        if (memcmp(crc_value, want, 8)) {
            char got[9];
            for (int i = 0; i < 8; i++) got[i] = crc_value[i] >= 0x20 && crc_value[i] < 0x7f ? crc_value[i] : '?';
            got[8] = '\0';
            return anvil_fail("%s: checksum mismatch: the content's crc32c is %s, 'manifest_crc32c' says %s "
                              "(corrupt or edited)",
                              name, want, got);
        }
    }
    cJSON *root = cJSON_ParseWithLength(text, len);
    if (!root) return anvil_fail("%s: not valid JSON (truncated or corrupt?)", name);
    int rc = parse_root(root, name, crc_value, out);
    cJSON_Delete(root);
    if (rc) anvil_ckpt_manifest_free(out);
    return rc;
}

void anvil_ckpt_manifest_free(anvil_ckpt_manifest *m) {
    if (!m) return;
    free(m->train_config);
    m->train_config = NULL;
}

int anvil_ckpt_read_manifest(const char *ckpt_dir, anvil_ckpt_manifest *out) {
    char path[PATH_MAX];
    memset(out, 0, sizeof *out);
    if (join(path, sizeof path, ckpt_dir, "manifest.json")) return -1;
    size_t len;
    char *text;
    if (anvil_read_file_max(path, MANIFEST_MAX_BYTES, &text, &len)) return -1;
    int rc = anvil_ckpt_manifest_parse(text, len, path, out);
    free(text);
    return rc;
}

static int verify_files(const char *dir, const anvil_ckpt_manifest *m) {
    for (int i = 0; i < m->nfiles; i++) {
        char path[PATH_MAX];
        uint64_t bytes;
        uint32_t crc;
        if (join(path, sizeof path, dir, m->files[i].name) || anvil_crc32c_file(path, &bytes, &crc)) return -1;
        if (bytes != m->files[i].bytes)
            return anvil_fail("%s: %" PRIu64 " bytes, the manifest says %" PRIu64 " (truncated or replaced)", path,
                              bytes, m->files[i].bytes);
        if (crc != m->files[i].crc32c)
            return anvil_fail("%s: checksum mismatch (crc32c %08" PRIx32 ", the manifest says %08" PRIx32 ")", path,
                              crc, m->files[i].crc32c);
    }
    return 0;
}

int anvil_ckpt_verify(const char *ckpt_dir) {
    anvil_ckpt_manifest m;
    if (anvil_ckpt_read_manifest(ckpt_dir, &m)) return -1;
    int rc = verify_files(ckpt_dir, &m);
    anvil_ckpt_manifest_free(&m);
    return rc;
}

/* ---- writing ---- */

static int write_weights(const anvil_ckpt_snapshot *s, const char *path) {
    tensor_table tt;
    fill_table(&tt, &s->cfg, s->offsets, s->params, "");
    char vals[5][24];
    snprintf(vals[0], sizeof vals[0], "%d", s->cfg.n_layer);
    snprintf(vals[1], sizeof vals[1], "%d", s->cfg.n_head);
    snprintf(vals[2], sizeof vals[2], "%d", s->cfg.n_embd);
    snprintf(vals[3], sizeof vals[3], "%d", s->cfg.block_size);
    snprintf(vals[4], sizeof vals[4], "%d", s->cfg.vocab_size);
    /* The model file's metadata, so anvil_model_load (and `anvil sample`) read this file directly. */
    const char *meta[] = {"format", "anvil-gpt2", "n_layer",    vals[0], "n_head",     vals[1],
                          "n_embd", vals[2],      "block_size", vals[3], "vocab_size", vals[4]};
    return anvil_st_write(path, tt.t, ANVIL_GPT2_NPARAM, meta, 6);
}

static int write_moments(const anvil_ckpt_snapshot *s, const char *path) {
    tensor_table tm, tv;
    fill_table(&tm, &s->cfg, s->offsets, s->m, "m.");
    fill_table(&tv, &s->cfg, s->offsets, s->v, "v.");
    anvil_st_tensor all[2 * ANVIL_GPT2_NPARAM];
    memcpy(all, tm.t, sizeof tm.t);
    memcpy(all + ANVIL_GPT2_NPARAM, tv.t, sizeof tv.t);
    char t[24];
    snprintf(t, sizeof t, "%d", s->t);
    const char *meta[] = {"format", "anvil-adamw", "t", t};
    return anvil_st_write(path, all, 2 * ANVIL_GPT2_NPARAM, meta, 2);
}

/* Fills the temporary folder: the snapshot's tensor files, then the manifest
 * with their checksums and the shard files'. */
static int fill_tmp(const anvil_ckpt_snapshot *s, const char *tmp, const anvil_ckpt_file *shards, int nshards) {
    static const char *const names[2] = {"model.safetensors", "optim.safetensors"};
    anvil_ckpt_file files[ANVIL_CKPT_MAX_FILES];
    int n = 0;
    if (nshards < 0 || nshards > ANVIL_CKPT_MAX_FILES - 2)
        return anvil_fail("checkpoint: %d shard files (at most %d)", nshards, ANVIL_CKPT_MAX_FILES - 2);
    for (int i = 0; i < 2; i++) {
        if (!(i == 0 ? s->params : s->m)) continue;
        char path[PATH_MAX];
        if (join(path, sizeof path, tmp, names[i])) return -1;
        if ((i == 0 ? write_weights(s, path) : write_moments(s, path))) return -1;
        snprintf(files[n].name, sizeof files[n].name, "%s", names[i]);
        /* Read back rather than checksum the buffers: this also proves the bytes reached the file system. */
        if (anvil_crc32c_file(path, &files[n].bytes, &files[n].crc32c)) return -1;
        n++;
    }
    for (int i = 0; i < nshards; i++) files[n++] = shards[i];
    char *text = build_manifest(s, files, n);
    if (!text) return -1;
    char path[PATH_MAX];
    int rc = join(path, sizeof path, tmp, "manifest.json");
    if (!rc) rc = anvil_write_new_file(path, text, strlen(text));
    cJSON_free(text);
    return rc ? rc : anvil_fsync_dir(tmp);
}

static int update_latest(const char *ckdir, const char *leaf) {
    char path[PATH_MAX], tmp[PATH_MAX + 32];
    if (join(path, sizeof path, ckdir, "latest")) return -1;
    snprintf(tmp, sizeof tmp, "%s.tmp-%ld", path, (long)getpid());
    unlink(tmp);
    char line[128];
    int n = snprintf(line, sizeof line, "%s\n", leaf);
    /* This process's id in the temporary name, not anvil_write_file_atomic's random suffix, so that
     * anvil_ckpt_prune recognises a crashed writer's leftover. */
    if (anvil_write_new_file(tmp, line, (size_t)n)) return -1;
    return anvil_rename_durable(tmp, path);
}

/* RUN/ckpt (created when missing), the folder name of `step` and its full path. */
static int step_paths(const char *run_dir, int64_t step, char *ckdir, char *leaf, size_t leafcap, char *final) {
    snprintf(leaf, leafcap, "step_%08" PRId64, step);
    if (anvil_mkdir(run_dir) || join(ckdir, PATH_MAX, run_dir, "ckpt") || anvil_mkdir(ckdir) ||
        join(final, PATH_MAX, ckdir, leaf))
        return -1;
    return 0;
}

int anvil_ckpt_begin(const char *run_dir, int64_t step, char *tmp, size_t cap) {
    char ckdir[PATH_MAX], leaf[64], final[PATH_MAX];
    if (step < 0) return anvil_fail("checkpoint: negative step %" PRId64, step);
    if (step_paths(run_dir, step, ckdir, leaf, sizeof leaf, final)) return -1;
    if ((size_t)snprintf(tmp, cap, "%s.tmp-%ld", final, (long)getpid()) >= cap)
        return anvil_fail("%s: path too long", final);
    if (anvil_remove_tree(tmp)) return -1;
    if (mkdir(tmp, 0755)) return anvil_fail("%s: cannot create folder: %s", tmp, strerror(errno));
    return 0;
}

void anvil_ckpt_abandon(const char *tmp) { anvil_remove_tree(tmp); }

int anvil_ckpt_finish(const anvil_ckpt_snapshot *s, const char *run_dir, const char *tmp,
                      const anvil_ckpt_file *shards, int nshards, char *out, size_t cap) {
    char ckdir[PATH_MAX], leaf[64], final[PATH_MAX];
    if (step_paths(run_dir, s->step, ckdir, leaf, sizeof leaf, final) || fill_tmp(s, tmp, shards, nshards)) {
        char why[1024];
        snprintf(why, sizeof why, "%s", anvil_errmsg());
        anvil_remove_tree(tmp);
        return anvil_fail("checkpoint step %" PRId64 " not saved: %s", s->step, why);
    }
    if (rename(tmp, final)) {
        /* A checkpoint of this step exists already (a rerun of the same step): swap atomically so
         * step_X is always one complete checkpoint, then delete the old one under the temporary name. */
        int err = errno;
        if ((err != ENOTEMPTY && err != EEXIST) || renameat2(AT_FDCWD, tmp, AT_FDCWD, final, RENAME_EXCHANGE)) {
            if (err == ENOTEMPTY || err == EEXIST) err = errno;
            anvil_remove_tree(tmp);
            return anvil_fail("%s: rename from %s failed: %s", final, tmp, strerror(err));
        }
        if (anvil_fsync_dir(ckdir) || anvil_remove_tree(tmp)) return -1;
    }
    if (anvil_fsync_dir(ckdir) || update_latest(ckdir, leaf)) return -1;
    if (out && cap) snprintf(out, cap, "%s", final);
    return 0;
}

int anvil_ckpt_snapshot_write(const anvil_ckpt_snapshot *s, const char *run_dir, char *out, size_t cap) {
    char tmp[PATH_MAX + 32];
    if (anvil_ckpt_begin(run_dir, s->step, tmp, sizeof tmp)) return -1;
    return anvil_ckpt_finish(s, run_dir, tmp, NULL, 0, out, cap);
}

static const char *const slice_kinds[3] = {"m", "v", "p"};

void anvil_ckpt_shard_name(int g, int k, char *out, size_t cap) {
    snprintf(out, cap, "shard_%d_of_%d.safetensors", g, k);
}

int anvil_ckpt_write_shard(const char *tmp, int g, int k, const anvil_gpt2 *model, const anvil_ckpt_slice *sl,
                           int n, anvil_ckpt_file *out) {
    int kinds = n > 0 && sl[0].p ? 3 : 2;
    anvil_st_tensor *t = calloc((size_t)n * kinds + 1, sizeof *t);
    char (*names)[64] = calloc((size_t)n * kinds + 1, sizeof *names);
    int rc = 0;
    if (!t || !names) rc = anvil_fail("checkpoint: out of memory for shard %d of %d", g, k);
    for (int i = 0; !rc && i < n; i++) {
        int ti = sl[i].tensor;
        if (ti < 0 || ti >= ANVIL_GPT2_NPARAM || sl[i].flat < model->offsets[ti] ||
            sl[i].flat + sl[i].len > model->offsets[ti + 1] || (kinds == 3) != (sl[i].p != NULL)) {
            rc = anvil_fail("checkpoint: shard %d of %d: slice %d is outside its tensor", g, k, i);
            break;
        }
        for (int j = 0; j < kinds; j++) {
            anvil_st_tensor *x = &t[i * kinds + j];
            snprintf(names[i * kinds + j], sizeof names[0], "%s.%s.%zu", slice_kinds[j], anvil_gpt2_param_names[ti],
                     sl[i].flat - model->offsets[ti]);
            x->name = names[i * kinds + j];
            x->dtype = ANVIL_ST_F32;
            x->ndim = 1;
            x->shape[0] = (int64_t)sl[i].len;
            x->nbytes = sl[i].len * sizeof(float);
            x->data = j == 0 ? sl[i].m : j == 1 ? sl[i].v : sl[i].p;
        }
    }
    char path[PATH_MAX], gs[16], ks[16];
    anvil_ckpt_shard_name(g, k, out->name, sizeof out->name);
    snprintf(gs, sizeof gs, "%d", g);
    snprintf(ks, sizeof ks, "%d", k);
    const char *meta[] = {"format", "anvil-shard", "shard", gs, "of", ks};
    if (!rc) rc = join(path, sizeof path, tmp, out->name);
    if (!rc) rc = anvil_st_write(path, t, n * kinds, meta, 3);
    if (!rc) rc = anvil_crc32c_file(path, &out->bytes, &out->crc32c);
    free(t);
    free(names);
    return rc;
}

int anvil_ckpt_save(const char *run_dir, const anvil_ckpt_state *st, char *out, size_t cap) {
    anvil_ckpt_snapshot *s = anvil_ckpt_snapshot_take(NULL, st);
    if (!s) return -1;
    int rc = anvil_ckpt_snapshot_write(s, run_dir, out, cap);
    anvil_ckpt_snapshot_free(s);
    return rc;
}

/* ---- loading ---- */

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

static anvil_st_file *open_checked(const char *dir, const char *leaf, const char *const *prefixes, int n,
                                   const anvil_gpt2_config *c) {
    char path[PATH_MAX];
    if (join(path, sizeof path, dir, leaf)) return NULL;
    anvil_st_file *f = anvil_st_open(path);
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
            if (join(path, sizeof path, dir, man->files[i].name) || !(files[nf] = anvil_st_open(path))) {
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
            int used = 0, ti = -1, ki = -1;
            if (sscanf(t->name, "%3[^.].%31[^.].%zu%n", kind, param, &off, &used) == 3 && !t->name[used]) {
                for (int j = 0; j < ANVIL_GPT2_NPARAM; j++)
                    if (!strcmp(param, anvil_gpt2_param_names[j])) ti = j;
                for (int j = 0; j < 3; j++)
                    if (!strcmp(kind, slice_kinds[j])) ki = j;
            }
            size_t len = t->ndim == 1 ? (size_t)t->shape[0] : 0;
            if (ti < 0 || ki < 0 || t->dtype != ANVIL_ST_F32 || t->ndim != 1 ||
                off + len > model->offsets[ti + 1] - model->offsets[ti])
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
                rc = anvil_fail("%s: the shards' '%s' slices %s at element %zu", dir, slice_kinds[k],
                                spans[k][i].start > at ? "leave a gap" : "overlap", at);
            at = spans[k][i].start + spans[k][i].len;
        }
        if (!rc && at != model->nparams)
            rc = anvil_fail("%s: the shards' '%s' slices cover %zu of %zu elements", dir, slice_kinds[k], at,
                            model->nparams);
    }
    for (int k = 0; !rc && k < 3; k++)
        for (size_t i = 0; dst[k] && i < nspans[k]; i++)
            model->k->upload(dst[k] + spans[k][i].start, spans[k][i].t->data, spans[k][i].t->nbytes);
    for (int f = 0; f < nf; f++) anvil_st_close(files[f]);
    for (int k = 0; k < 3; k++) free(spans[k]);
    return rc;
}

int anvil_ckpt_load(const char *ckpt_dir, anvil_gpt2 *model, anvil_adamw *opt, anvil_ckpt_manifest *info) {
    static const char *const wpre[] = {""}, *const opre[] = {"m.", "v."};
    anvil_ckpt_manifest m;
    if (info) memset(info, 0, sizeof *info);
    if (anvil_ckpt_read_manifest(ckpt_dir, &m)) return -1;
    int rc = verify_files(ckpt_dir, &m);
    if (!rc) rc = compare_config(ckpt_dir, &m.model, &model->cfg);
    /* Every file is opened and checked before anything is copied, so a failure changes nothing.
     * Below stage 1 the state is whole in model and optim; from stage 1 the moments, and from
     * stage 3 the weights, come back from the shard files. */
    int stage = m.zero_stage;
    anvil_st_file *fw = NULL, *fo = NULL;
    if (!rc && stage < 3 && !(fw = open_checked(ckpt_dir, "model.safetensors", wpre, 1, &model->cfg))) rc = -1;
    if (!rc && opt && stage == 0 && !(fo = open_checked(ckpt_dir, "optim.safetensors", opre, 2, &model->cfg)))
        rc = -1;
    if (!rc && stage > 0 && (opt || stage == 3))
        rc = load_shards(ckpt_dir, &m, model, stage == 3 ? model->params : NULL, opt ? opt->m : NULL,
                         opt ? opt->v : NULL);
    size_t pad = model->offsets[P_WTE + 1] - model->offsets[P_WTE] - (size_t)model->cfg.vocab_size * model->cfg.n_embd;
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

/* ---- finding and pruning ---- */

/* The step of a folder named exactly step_<digits>, or -1. */
static int64_t step_of(const char *name) {
    if (strncmp(name, "step_", 5) || !name[5] || strlen(name + 5) > 15) return -1;
    for (const char *p = name + 5; *p; p++)
        if (*p < '0' || *p > '9') return -1;
    return strtoll(name + 5, NULL, 10);
}

typedef struct {
    int64_t step;
    char name[64];
} entry;

static int cmp_desc(const void *a, const void *b) {
    int64_t x = ((const entry *)a)->step, y = ((const entry *)b)->step;
    return (x < y) - (x > y);
}

/* The step folders of ckdir, newest first. *n = -1 and 0 returned when ckdir does not exist. */
static entry *list_steps(const char *ckdir, int *n) {
    *n = 0;
    DIR *d = opendir(ckdir);
    if (!d) {
        if (errno == ENOENT) {
            *n = -1;
            return NULL;
        }
        anvil_fail("%s: cannot list: %s", ckdir, strerror(errno));
        return NULL;
    }
    entry *v = NULL;
    int cap = 0;
    for (struct dirent *e; (e = readdir(d));) {
        int64_t s = step_of(e->d_name);
        if (s < 0) continue;
        if (*n == cap) {
            cap = cap ? 2 * cap : 16;
            entry *nv = realloc(v, sizeof *v * (size_t)cap);
            if (!nv) {
                free(v);
                closedir(d);
                anvil_fail("%s: out of memory", ckdir);
                *n = 0;
                return NULL;
            }
            v = nv;
        }
        v[*n].step = s;
        memcpy(v[*n].name, e->d_name, strlen(e->d_name) + 1); /* step_of bounds the length */
        (*n)++;
    }
    closedir(d);
    if (!v) v = malloc(sizeof *v);
    if (!v)
        anvil_fail("%s: out of memory", ckdir);
    else
        qsort(v, (size_t)*n, sizeof *v, cmp_desc);
    return v;
}

static void append(char *buf, size_t cap, const char *fmt, const char *a, const char *b) {
    if (!buf || !cap) return;
    size_t len = strlen(buf);
    if (len < cap) snprintf(buf + len, cap - len, fmt, a, b);
}

int anvil_ckpt_find_latest_valid(const char *run_dir, char *out, size_t cap, char *warn, size_t warn_cap) {
    if (warn && warn_cap) warn[0] = '\0';
    char ckdir[PATH_MAX];
    if (join(ckdir, sizeof ckdir, run_dir, "ckpt")) return -1;
    int n;
    entry *v = list_steps(ckdir, &n);
    if (n < 0) return 0;
    if (!v) return -1;
    int found = n == 0 ? 0 : -1;
    char first_err[1024] = "";
    for (int i = 0; i < n && found < 0; i++) {
        char dir[PATH_MAX];
        anvil_ckpt_manifest m;
        if (join(dir, sizeof dir, ckdir, v[i].name)) break;
        int rc = anvil_ckpt_read_manifest(dir, &m);
        if (!rc) {
            if (m.step != v[i].step)
                rc = anvil_fail("%s: the manifest says step %" PRId64, dir, m.step);
            else
                rc = verify_files(dir, &m);
            anvil_ckpt_manifest_free(&m);
        }
        if (rc == 0) {
            snprintf(out, cap, "%s", dir);
            found = 1;
        } else {
            if (!first_err[0]) snprintf(first_err, sizeof first_err, "%s", anvil_errmsg());
            append(warn, warn_cap, "skipping corrupt checkpoint %s: %s\n", v[i].name, anvil_errmsg());
        }
    }
    free(v);
    if (found < 0) anvil_fail("%s: no checkpoint verifies (newest: %s)", ckdir, first_err);
    return found;
}

/* Whether a .tmp- leftover belongs to a process that no longer exists (ours never counts as stale). */
static int stale_tmp(const char *name) {
    const char *t = strstr(name, ".tmp-");
    if (!t || t[5] < '0' || t[5] > '9') return 0;
    long pid = strtol(t + 5, NULL, 10);
    if (pid <= 0 || pid == (long)getpid()) return 0;
    if (pid > INT_MAX) return 1;
    return kill((pid_t)pid, 0) != 0 && errno == ESRCH;
}

int anvil_ckpt_prune(const char *run_dir, int keep_last, int64_t keep_every) {
    if (keep_last < 1 || keep_every < 0)
        return anvil_fail("checkpoint prune: keep_last must be >= 1 and keep_every >= 0");
    char ckdir[PATH_MAX], path[PATH_MAX];
    if (join(ckdir, sizeof ckdir, run_dir, "ckpt")) return -1;
    int n;
    entry *v = list_steps(ckdir, &n);
    if (n < 0) return 0;
    if (!v) return -1;
    char latest[64] = "";
    if (!join(path, sizeof path, ckdir, "latest")) {
        size_t len;
        char *text;
        if (!anvil_read_file_max(path, 4096, &text, &len)) {
            text[strcspn(text, "\n")] = '\0';
            snprintf(latest, sizeof latest, "%s", text);
            free(text);
        }
    }
    int removed = 0, rc = 0;
    for (int i = keep_last; i < n && !rc; i++) {
        if ((keep_every > 0 && v[i].step % keep_every == 0) || !strcmp(v[i].name, latest)) continue;
        char doomed[PATH_MAX + 48];
        /* Out of the step_<digits> namespace first, so a crash mid-delete leaves only a .tmp- leftover. */
        if (join(path, sizeof path, ckdir, v[i].name)) break;
        snprintf(doomed, sizeof doomed, "%s.tmp-%ld.del", path, (long)getpid());
        if (rename(path, doomed)) {
            rc = anvil_fail("%s: cannot rename for deletion: %s", path, strerror(errno));
            break;
        }
        rc = anvil_remove_tree(doomed);
        removed += !rc;
    }
    free(v);
    DIR *d = rc ? NULL : opendir(ckdir);
    for (struct dirent *e; d && !rc && (e = readdir(d));) {
        if ((strncmp(e->d_name, "step_", 5) && strncmp(e->d_name, "latest.tmp-", 11)) || !stale_tmp(e->d_name))
            continue;
        if (join(path, sizeof path, ckdir, e->d_name) || anvil_remove_tree(path))
            rc = -1;
        else
            removed++;
    }
    if (d) closedir(d);
    return rc ? -1 : removed;
}
