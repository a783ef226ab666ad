/* manifest.json: building it, its own checksum, parsing and validating it, and verifying the files it
 * lists. */
#include "ckpt/checkpoint.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ckpt/checkpoint_internal.h"
#include "core/confine.h"
#include "core/crc32c.h"
#include "core/error.h"
#include "core/fsutil.h"
#include "core/json.h"

#define MANIFEST_MAX_BYTES (16u << 20)
#define JSON_MAX_INT 9007199254740992.0 /* 2^53: beyond it a JSON number is not an exact integer */

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

/* The model's family and its configuration's fields, each as the family types it. */
static int add_model(cJSON *o, const anvil_model_config *c) {
    if (!cJSON_AddStringToObject(o, "family", anvil_model_family_name(c->family))) return 0;
    const char *key;
    char text[32];
    int is_float;
    for (int i = 0; anvil_model_config_field(c, i, &key, text, sizeof text, &is_float, NULL); i++)
        if (!cJSON_AddRawToObject(o, key, text)) return 0;
    return 1;
}

char *ckpt_build_manifest(const anvil_ckpt_snapshot *s, const anvil_ckpt_file *files, int nfiles) {
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
    ok = ok && (o = cJSON_AddObjectToObject(root, "model")) && add_model(o, &s->cfg);
    ok = ok && cJSON_AddStringToObject(root, "tokenizer", s->tokenizer);
    cJSON *tc = ok ? anvil_json_parse_str(s->train_config) : NULL;
    ok = ok && tc && cJSON_AddItemToObject(root, "train_config", tc);
    ok = ok && (o = cJSON_AddObjectToObject(root, "loader"));
    ok = ok && add_raw_i64(o, "shard", s->loader.shard) && add_raw_i64(o, "position", s->loader.position) &&
         add_raw_i64(o, "epoch", s->loader.epoch) && cJSON_AddBoolToObject(o, "shuffled", s->loader.shuffled != 0) &&
         add_u64_string(o, "shuffle_seed", s->loader.shuffle_seed) &&
         cJSON_AddStringToObject(o, "layout", anvil_loader_layout_name((int)s->loader.layout));
    ok = ok && (o = cJSON_AddObjectToObject(root, "rng"));
    ok = ok && add_u64_string(o, "s0", s->rng.s[0]) && add_u64_string(o, "s1", s->rng.s[1]);
    ok = ok && (o = cJSON_AddObjectToObject(root, "optimizer"));
    ok = ok && cJSON_AddStringToObject(o, "name", "adamw") && add_raw_i64(o, "t", s->t) &&
         add_float(o, "beta1", s->acfg.beta1) && add_float(o, "beta2", s->acfg.beta2) &&
         add_float(o, "eps", s->acfg.eps) && add_float(o, "weight_decay", s->acfg.weight_decay);
    ok = ok && (o = cJSON_AddObjectToObject(root, "parallel"));
    ok = ok && cJSON_AddNumberToObject(o, "world", s->layout.world) && cJSON_AddNumberToObject(o, "rank", 0) &&
         cJSON_AddNumberToObject(o, "zero_stage", s->layout.zero_stage) &&
         cJSON_AddNumberToObject(o, "shard_group", s->layout.shard_group) &&
         cJSON_AddNumberToObject(o, "tensor_parallel", s->layout.tensor_parallel > 1 ? s->layout.tensor_parallel : 1) &&
         cJSON_AddNumberToObject(o, "pipeline_parallel",
                                 s->layout.pipeline_parallel > 1 ? s->layout.pipeline_parallel : 1);
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

/* The files must be where the layout keeps the state: whole weights and moments on rank 0 (listed as
 * model.safetensors and optim.safetensors) or in shard files. Before version 3, tensor and pipeline
 * parallel runs saved whole files. */
static int check_files_layout(const anvil_ckpt_manifest *m, const char *name) {
    int grid = m->version >= 3 && (m->tensor_parallel > 1 || m->pipeline_parallel > 1);
    int whole[2] = {m->zero_stage < 3 && !grid, m->zero_stage == 0 && !grid}, listed[2] = {0, 0}, shards = 0;
    static const char *const files[2] = {"model.safetensors", "optim.safetensors"};
    static const char *const what[2] = {"weights", "moments"};
    for (int i = 0; i < m->nfiles; i++) {
        for (int k = 0; k < 2; k++) listed[k] |= !strcmp(m->files[i].name, files[k]);
        shards |= !strncmp(m->files[i].name, "shard_", 6);
    }
    for (int k = 0; k < 2; k++)
        if (listed[k] != whole[k])
            return anvil_fail("%s: field 'files' %s %s, but the layout (zero_stage %d, tensor_parallel %d, "
                              "pipeline_parallel %d) keeps the %s %s",
                              name, listed[k] ? "lists" : "does not list", files[k], m->zero_stage,
                              m->tensor_parallel, m->pipeline_parallel, what[k],
                              whole[k] ? "whole" : "in shard files");
    if ((!whole[0] || !whole[1]) && !shards)
        return anvil_fail("%s: field 'files' lists no shard files, but the layout keeps state in them", name);
    return 0;
}

/* The "model" object: its family (GPT-2 in manifests written before families were recorded) and the
 * family's fields, then the family's own checks. */
static int parse_model(const cJSON *o, const char *name, anvil_model_config *c) {
    memset(c, 0, sizeof *c);
    const cJSON *fam = cJSON_GetObjectItemCaseSensitive(o, "family");
    if (fam && !cJSON_IsString(fam)) return anvil_fail("%s: field 'model.family' is not a string", name);
    if (!(c->family = anvil_model_family_named(fam ? fam->valuestring : "gpt2"))) {
        char why[256];
        snprintf(why, sizeof why, "%s", anvil_errmsg());
        return anvil_fail("%s: field 'model.family': %s", name, why);
    }
    const char *key;
    char text[32];
    int is_float, min;
    for (int i = 0; anvil_model_config_field(c, i, &key, text, sizeof text, &is_float, &min); i++) {
        if (is_float) {
            float f = 0.0f;
            if (get_num(o, key, "model.", name, &f)) return -1;
            snprintf(text, sizeof text, "%.9g", (double)f);
        } else {
            int64_t x = 0;
            if (get_int(o, key, "model.", name, min, 1e9, &x)) return -1;
            snprintf(text, sizeof text, "%lld", (long long)x);
        }
        if (anvil_model_config_set(c, key, text)) return -1;
    }
    if (anvil_model_config_check(c)) {
        char why[256];
        snprintf(why, sizeof why, "%s", anvil_errmsg());
        return anvil_fail("%s: field 'model' is invalid: %s", name, why);
    }
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
    if (!o || parse_model(o, name, &m->model)) return -1;

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
    /* Checkpoints from before the contiguous layout have no 'layout': theirs was strided. */
    const cJSON *lay = cJSON_GetObjectItemCaseSensitive(o, "layout");
    if (lay) {
        const char *v = cJSON_GetStringValue(lay);
        if (v && !strcmp(v, anvil_loader_layout_name(ANVIL_LOADER_CONTIGUOUS)))
            m->loader.layout = ANVIL_LOADER_CONTIGUOUS;
        else if (!v || strcmp(v, anvil_loader_layout_name(ANVIL_LOADER_STRIDED)))
            return anvil_fail("%s: field 'loader.layout' must be \"strided\" or \"contiguous\"", name);
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
    /* Recorded since tensor and pipeline parallelism; older manifests had neither. */
    int64_t tp = 1, pp = 1;
    if ((cJSON_GetObjectItemCaseSensitive(o, "tensor_parallel") &&
         get_int(o, "tensor_parallel", "parallel.", name, 1, 1 << 24, &tp)) ||
        (cJSON_GetObjectItemCaseSensitive(o, "pipeline_parallel") &&
         get_int(o, "pipeline_parallel", "parallel.", name, 1, 1 << 24, &pp)))
        return -1;
    if (tp * pp > p[0])
        return anvil_fail("%s: field 'parallel.tensor_parallel' x 'parallel.pipeline_parallel' exceeds "
                          "'parallel.world'", name);
    m->tensor_parallel = (int)tp;
    m->pipeline_parallel = (int)pp;

    const cJSON *tc = cJSON_GetObjectItemCaseSensitive(root, "train_config");
    if (!cJSON_IsObject(tc)) return anvil_fail("%s: field 'train_config' is missing or not an object", name);
    if (parse_files(root, name, m) || check_files_layout(m, name)) return -1;
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
    cJSON *root = anvil_json_parse(text, len, NULL);
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
    if (ckpt_join(path, sizeof path, ckpt_dir, "manifest.json")) return -1;
    size_t len;
    char *text;
    if (anvil_confined(path, "checkpoint manifest") || anvil_read_file_max(path, MANIFEST_MAX_BYTES, &text, &len))
        return -1;
    int rc = anvil_ckpt_manifest_parse(text, len, path, out);
    free(text);
    return rc;
}

/* One file's progress as a part of all the files'. */
typedef struct {
    anvil_ckpt_progress_fn fn;
    void *ctx;
    uint64_t before, total;
} files_progress;

static void file_progress(void *ctx, uint64_t bytes) {
    const files_progress *fp = ctx;
    fp->fn(fp->ctx, fp->before + bytes, fp->total);
}

/* Which part of nparts checksums each of m's files: largest first, each to the part with the fewest
 * bytes so far (the lowest on a tie), so that parts differ by at most the largest file and every
 * process that reads the same manifest deals the same way. */
static void deal_files(const anvil_ckpt_manifest *m, int nparts, int *part_of) {
    uint64_t load[ANVIL_CKPT_MAX_FILES] = {0};
    int dealt[ANVIL_CKPT_MAX_FILES] = {0};
    if (nparts > ANVIL_CKPT_MAX_FILES) nparts = ANVIL_CKPT_MAX_FILES;
    for (int k = 0; k < m->nfiles; k++) {
        int f = -1;
        for (int i = 0; i < m->nfiles; i++)
            if (!dealt[i] && (f < 0 || m->files[i].bytes > m->files[f].bytes)) f = i;
        int p = 0;
        for (int j = 1; j < nparts; j++)
            if (load[j] < load[p]) p = j;
        dealt[f] = 1;
        part_of[f] = p;
        load[p] += m->files[f].bytes;
    }
}

int ckpt_verify_files(const char *dir, const anvil_ckpt_manifest *m, int part, int nparts,
                      anvil_ckpt_progress_fn progress, void *ctx) {
    int part_of[ANVIL_CKPT_MAX_FILES];
    deal_files(m, nparts, part_of);
    files_progress fp = {progress, ctx, 0, 0};
    for (int i = 0; i < m->nfiles; i++)
        if (part_of[i] == part) fp.total += m->files[i].bytes;
    for (int i = 0; i < m->nfiles; i++) {
        if (part_of[i] != part) continue;
        char path[PATH_MAX];
        uint64_t bytes;
        uint32_t crc;
        if (ckpt_join(path, sizeof path, dir, m->files[i].name) ||
            anvil_crc32c_file_progress(path, &bytes, &crc, progress ? file_progress : NULL, &fp))
            return -1;
        fp.before += bytes;
        if (bytes != m->files[i].bytes)
            return anvil_fail("%s: %" PRIu64 " bytes, the manifest says %" PRIu64 " (truncated or replaced)", path,
                              bytes, m->files[i].bytes);
        if (crc != m->files[i].crc32c)
            return anvil_fail("%s: checksum mismatch (crc32c %08" PRIx32 ", the manifest says %08" PRIx32 ")", path,
                              crc, m->files[i].crc32c);
    }
    return 0;
}

int anvil_ckpt_verify_part(const char *ckpt_dir, int64_t step, int part, int nparts) {
    if (nparts < 1 || part < 0 || part >= nparts)
        return anvil_fail("%s: part %d of %d to verify", ckpt_dir, part, nparts);
    anvil_ckpt_manifest m;
    if (anvil_ckpt_read_manifest(ckpt_dir, &m)) return -1;
    int rc = step >= 0 && m.step != step ? anvil_fail("%s: the manifest says step %" PRId64, ckpt_dir, m.step)
                                         : ckpt_verify_files(ckpt_dir, &m, part, nparts, NULL, NULL);
    anvil_ckpt_manifest_free(&m);
    return rc;
}

int anvil_ckpt_verify(const char *ckpt_dir) { return anvil_ckpt_verify_progress(ckpt_dir, NULL, NULL); }

int anvil_ckpt_verify_progress(const char *ckpt_dir, anvil_ckpt_progress_fn progress, void *ctx) {
    anvil_ckpt_manifest m;
    if (anvil_ckpt_read_manifest(ckpt_dir, &m)) return -1;
    int rc = ckpt_verify_files(ckpt_dir, &m, 0, 1, progress, ctx);
    anvil_ckpt_manifest_free(&m);
    return rc;
}
