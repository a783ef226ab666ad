#include "ckpt/hf_gpt2.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ckpt/safetensors.h"
#include "core/error.h"
#include "core/fsutil.h"
#include "core/json.h"

/* One Hugging Face tensor per anvil tensor (per layer for stacked ones). */
typedef struct {
    const char *suffix; /* after "h.{i}." for per-layer tensors */
    int param;
    int transpose; /* Conv1D weight: stored [in, out] */
} mapping;

static const mapping global_map[] = {{"wte.weight", ANVIL_GPT2_WTE, 0},
                                     {"wpe.weight", ANVIL_GPT2_WPE, 0},
                                     {"ln_f.weight", ANVIL_GPT2_LNFW, 0},
                                     {"ln_f.bias", ANVIL_GPT2_LNFB, 0}};

static const mapping layer_map[] = {{"ln_1.weight", ANVIL_GPT2_LN1W, 0},
                                    {"ln_1.bias", ANVIL_GPT2_LN1B, 0},
                                    {"attn.c_attn.weight", ANVIL_GPT2_QKVW, 1},
                                    {"attn.c_attn.bias", ANVIL_GPT2_QKVB, 0},
                                    {"attn.c_proj.weight", ANVIL_GPT2_ATTPROJW, 1},
                                    {"attn.c_proj.bias", ANVIL_GPT2_ATTPROJB, 0},
                                    {"ln_2.weight", ANVIL_GPT2_LN2W, 0},
                                    {"ln_2.bias", ANVIL_GPT2_LN2B, 0},
                                    {"mlp.c_fc.weight", ANVIL_GPT2_FCW, 1},
                                    {"mlp.c_fc.bias", ANVIL_GPT2_FCB, 0},
                                    {"mlp.c_proj.weight", ANVIL_GPT2_FCPROJW, 1},
                                    {"mlp.c_proj.bias", ANVIL_GPT2_FCPROJB, 0}};

#define NGLOBAL (int)(sizeof global_map / sizeof global_map[0])
#define NLAYER_MAP (int)(sizeof layer_map / sizeof layer_map[0])

/* Shape of one anvil slice (a layer's part of a stacked tensor): rows x cols (cols 1 for vectors),
 * and where it starts within the tensor. */
static void slice_of(const anvil_gpt2_config *c, const mapping *mp, int layer, int64_t *rows, int64_t *cols,
                     size_t *start) {
    int64_t s[3];
    int nd = anvil_gpt2_param_shape(c, mp->param, s);
    if (mp->param == ANVIL_GPT2_WTE) s[0] = c->vocab_size;
    int stacked = layer >= 0;
    *rows = stacked ? s[1] : s[0];
    *cols = stacked ? (nd == 3 ? s[2] : 1) : (nd == 2 ? s[1] : 1);
    *start = stacked ? (size_t)layer * (size_t)(*rows * *cols) : 0;
}

static int hf_ndim(const mapping *mp) {
    return mp->param == ANVIL_GPT2_WTE || mp->param == ANVIL_GPT2_WPE || mp->transpose ? 2 : 1;
}

/* ---- export ---- */

static char *config_json(const anvil_gpt2_config *c) {
    cJSON *r = cJSON_CreateObject();
    if (!r) return NULL;
    cJSON *arch = cJSON_AddArrayToObject(r, "architectures");
    if (arch) cJSON_AddItemToArray(arch, cJSON_CreateString("GPT2LMHeadModel"));
    cJSON_AddStringToObject(r, "model_type", "gpt2");
    cJSON_AddStringToObject(r, "activation_function", "gelu_new");
    cJSON_AddNumberToObject(r, "n_layer", c->n_layer);
    cJSON_AddNumberToObject(r, "n_head", c->n_head);
    cJSON_AddNumberToObject(r, "n_embd", c->n_embd);
    cJSON_AddNullToObject(r, "n_inner");
    cJSON_AddNumberToObject(r, "n_positions", c->block_size);
    cJSON_AddNumberToObject(r, "n_ctx", c->block_size);
    cJSON_AddNumberToObject(r, "vocab_size", c->vocab_size);
    cJSON_AddNumberToObject(r, "bos_token_id", c->vocab_size - 1);
    cJSON_AddNumberToObject(r, "eos_token_id", c->vocab_size - 1);
    cJSON_AddNumberToObject(r, "layer_norm_epsilon", 1e-5);
    cJSON_AddNumberToObject(r, "initializer_range", 0.02);
    /* anvil trains without dropout. */
    cJSON_AddNumberToObject(r, "attn_pdrop", 0.0);
    cJSON_AddNumberToObject(r, "embd_pdrop", 0.0);
    cJSON_AddNumberToObject(r, "resid_pdrop", 0.0);
    cJSON_AddBoolToObject(r, "scale_attn_weights", 1);
    cJSON_AddBoolToObject(r, "scale_attn_by_inverse_layer_idx", 0);
    cJSON_AddBoolToObject(r, "reorder_and_upcast_attn", 0);
    cJSON_AddBoolToObject(r, "tie_word_embeddings", 1);
    cJSON_AddBoolToObject(r, "use_cache", 1);
    cJSON_AddStringToObject(r, "torch_dtype", "float32");
    char *text = cJSON_Print(r);
    cJSON_Delete(r);
    return text;
}

int anvil_hf_export(const anvil_gpt2 *m, const char *dir) { return anvil_hf_export_progress(m, dir, NULL, NULL); }

int anvil_hf_export_progress(const anvil_gpt2 *m, const char *dir, anvil_ckpt_progress_fn progress, void *ctx) {
    const anvil_gpt2_config *c = &m->cfg;
    if (anvil_mkdir(dir)) return -1;
    int L = c->n_layer, nt = NGLOBAL + L * NLAYER_MAP;
    size_t n = m->nparams;
    float *host = malloc(n * sizeof(float)), *out = malloc(n * sizeof(float));
    anvil_st_tensor *t = calloc((size_t)nt, sizeof *t);
    char(*names)[64] = calloc((size_t)nt, sizeof *names);
    int rc = -1;
    if (!host || !out || !t || !names) {
        anvil_fail("%s: out of memory", dir);
        goto done;
    }
    m->k->download(host, m->params, n * sizeof(float));
    size_t pos = 0;
    int k = 0;
    /* HF order: embeddings, blocks, final LayerNorm. */
    for (int g = -1; g <= L; g++) {
        int count = (g == -1) ? 2 : (g == L ? 2 : NLAYER_MAP);
        for (int j = 0; j < count; j++, k++) {
            const mapping *mp = g == -1 ? &global_map[j] : g == L ? &global_map[2 + j] : &layer_map[j];
            int layer = (g == -1 || g == L) ? -1 : g;
            int64_t rows, cols;
            size_t start;
            slice_of(c, mp, layer, &rows, &cols, &start);
            const float *src = host + m->offsets[mp->param] + start;
            float *dst = out + pos;
            if (mp->transpose) {
                for (int64_t r = 0; r < rows; r++)
                    for (int64_t q = 0; q < cols; q++) dst[q * rows + r] = src[r * cols + q];
            } else {
                memcpy(dst, src, (size_t)(rows * cols) * sizeof(float));
            }
            if (layer < 0)
                snprintf(names[k], sizeof names[k], "transformer.%s", mp->suffix);
            else
                snprintf(names[k], sizeof names[k], "transformer.h.%d.%s", layer, mp->suffix);
            t[k].name = names[k];
            t[k].dtype = ANVIL_ST_F32;
            t[k].ndim = hf_ndim(mp);
            if (t[k].ndim == 2) {
                t[k].shape[0] = mp->transpose ? cols : rows;
                t[k].shape[1] = mp->transpose ? rows : cols;
            } else {
                t[k].shape[0] = rows;
            }
            t[k].nbytes = (uint64_t)(rows * cols) * sizeof(float);
            t[k].data = dst;
            pos += (size_t)(rows * cols);
            /* The write is one more step: converting is quick beside it. */
            if (progress) progress(ctx, (uint64_t)k + 1, (uint64_t)nt + 1);
        }
    }
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    const char *meta[] = {"format", "pt"};
    if (anvil_st_write(path, t, nt, meta, 1)) goto done;
    if (progress) progress(ctx, (uint64_t)nt + 1, (uint64_t)nt + 1);
    char *cfg = config_json(c);
    if (!cfg) {
        anvil_fail("%s: out of memory", dir);
        goto done;
    }
    snprintf(path, sizeof path, "%s/config.json", dir);
    rc = anvil_write_file_atomic(path, cfg, strlen(cfg));
    cJSON_free(cfg);
done:
    free(host);
    free(out);
    free(t);
    free(names);
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

static int cfg_int(const cJSON *r, const char *path, const char *key, int *out) {
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(r, key);
    if (!cJSON_IsNumber(it) || it->valuedouble != floor(it->valuedouble) || it->valuedouble < 1 ||
        it->valuedouble > (1 << 24))
        return anvil_fail("%s: field '%s' is missing or not a positive integer", path, key);
    *out = (int)it->valuedouble;
    return 0;
}

static int cfg_bool_is(const cJSON *r, const char *path, const char *key, int want) {
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(r, key);
    if (!it || cJSON_IsNull(it)) return 0;
    if (!cJSON_IsBool(it) || cJSON_IsTrue(it) != want)
        return anvil_fail("%s: field '%s' must be %s: anvil's GPT-2 does not support the alternative", path, key,
                          want ? "true" : "false");
    return 0;
}

static int read_config(const char *path, anvil_gpt2_config *c) {
    FILE *f = fopen(path, "rb");
    if (!f) return anvil_fail("%s: cannot open: %s", path, strerror(errno));
    char *buf = malloc(1 << 20);
    size_t n = buf ? fread(buf, 1, 1 << 20, f) : 0;
    int err = ferror(f);
    fclose(f);
    if (!buf || err || n == (1 << 20)) {
        free(buf);
        return anvil_fail("%s: unreadable or larger than 1 MiB", path);
    }
    cJSON *r = anvil_json_parse(buf, n, NULL);
    free(buf);
    if (!cJSON_IsObject(r)) {
        cJSON_Delete(r);
        return anvil_fail("%s: not a JSON object", path);
    }
    int rc = -1;
    memset(c, 0, sizeof *c);
    const char *mt = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(r, "model_type"));
    const char *act = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(r, "activation_function"));
    const cJSON *eps = cJSON_GetObjectItemCaseSensitive(r, "layer_norm_epsilon");
    const cJSON *inner = cJSON_GetObjectItemCaseSensitive(r, "n_inner");
    const char *pos_key = cJSON_GetObjectItemCaseSensitive(r, "n_positions") ? "n_positions" : "n_ctx";
    if (mt && strcmp(mt, "gpt2"))
        anvil_fail("%s: field 'model_type' is '%s', not 'gpt2'", path, mt);
    else if (cfg_int(r, path, "n_layer", &c->n_layer) || cfg_int(r, path, "n_head", &c->n_head) ||
             cfg_int(r, path, "n_embd", &c->n_embd) || cfg_int(r, path, pos_key, &c->block_size) ||
             cfg_int(r, path, "vocab_size", &c->vocab_size)) {
    } else if (act && strcmp(act, "gelu_new") && strcmp(act, "gelu_pytorch_tanh"))
        anvil_fail("%s: field 'activation_function' is '%s'; anvil computes the tanh GELU (gelu_new)", path, act);
    else if (eps && (!cJSON_IsNumber(eps) || fabs(eps->valuedouble - 1e-5) > 1e-12))
        anvil_fail("%s: field 'layer_norm_epsilon' must be 1e-5, anvil's LayerNorm epsilon", path);
    else if (inner && !cJSON_IsNull(inner) && (!cJSON_IsNumber(inner) || inner->valuedouble != 4.0 * c->n_embd))
        anvil_fail("%s: field 'n_inner' must be null or 4*n_embd", path);
    else if (!cfg_bool_is(r, path, "scale_attn_weights", 1) &&
             !cfg_bool_is(r, path, "scale_attn_by_inverse_layer_idx", 0) &&
             !cfg_bool_is(r, path, "tie_word_embeddings", 1))
        rc = anvil_gpt2_config_check(c);
    cJSON_Delete(r);
    return rc;
}

static int ignorable(const char *name) {
    size_t n = strlen(name);
    return (n >= 10 && !strcmp(name + n - 10, ".attn.bias")) ||
           (n >= 17 && !strcmp(name + n - 17, ".attn.masked_bias"));
}

static int load_weights(const anvil_st_file *f, const char *path, anvil_gpt2 *m, float *host, float *scratch,
                        anvil_ckpt_progress_fn progress, void *ctx) {
    const anvil_gpt2_config *c = &m->cfg;
    const char *prefix = anvil_st_find(f, "transformer.wte.weight") ? "transformer." : "";
    int L = c->n_layer, used = 0, ignored = 0;
    for (int g = -1; g < L; g++) {
        int count = g < 0 ? NGLOBAL : NLAYER_MAP;
        for (int j = 0; j < count; j++) {
            const mapping *mp = g < 0 ? &global_map[j] : &layer_map[j];
            char name[96];
            if (g < 0)
                snprintf(name, sizeof name, "%s%s", prefix, mp->suffix);
            else
                snprintf(name, sizeof name, "%sh.%d.%s", prefix, g, mp->suffix);
            const anvil_st_tensor *t = anvil_st_find(f, name);
            if (!t) return anvil_fail("%s: tensor '%s' is missing", path, name);
            int64_t rows, cols;
            size_t start;
            slice_of(c, mp, g, &rows, &cols, &start);
            int nd = hf_ndim(mp);
            int64_t want0 = nd == 2 && mp->transpose ? cols : rows, want1 = nd == 2 && mp->transpose ? rows : cols;
            int ok = (t->dtype == ANVIL_ST_F32 || t->dtype == ANVIL_ST_F16 || t->dtype == ANVIL_ST_BF16) &&
                     t->ndim == nd && t->shape[0] == want0 && (nd == 1 || t->shape[1] == want1);
            if (!ok && nd == 2)
                return anvil_fail(
                    "%s: tensor '%s' (%s) is not F32/F16/BF16 of shape [%lld,%lld] as config.json implies", path, name,
                    anvil_st_dtype_name(t->dtype), (long long)want0, (long long)want1);
            if (!ok)
                return anvil_fail("%s: tensor '%s' (%s) is not F32/F16/BF16 of shape [%lld] as config.json implies",
                                  path, name, anvil_st_dtype_name(t->dtype), (long long)want0);
            size_t cnt = (size_t)(rows * cols);
            float *dst = host + m->offsets[mp->param] + start;
            if (mp->transpose) {
                to_f32(t, scratch, cnt);
                for (int64_t r = 0; r < rows; r++)
                    for (int64_t q = 0; q < cols; q++) dst[r * cols + q] = scratch[q * rows + r];
            } else {
                to_f32(t, dst, cnt);
            }
            used++;
            if (progress) progress(ctx, (uint64_t)used, (uint64_t)(NGLOBAL + L * NLAYER_MAP));
        }
    }
    const anvil_st_tensor *head = anvil_st_find(f, "lm_head.weight");
    if (head) {
        size_t cnt = (size_t)c->vocab_size * (size_t)c->n_embd;
        int ok = head->ndim == 2 && head->shape[0] == c->vocab_size && head->shape[1] == c->n_embd &&
                 (head->dtype == ANVIL_ST_F32 || head->dtype == ANVIL_ST_F16 || head->dtype == ANVIL_ST_BF16);
        if (ok) {
            to_f32(head, scratch, cnt);
            ok = !memcmp(scratch, host + m->offsets[ANVIL_GPT2_WTE], cnt * sizeof(float));
        }
        if (!ok) return anvil_fail("%s: 'lm_head.weight' differs from wte; anvil's LM head is tied to wte", path);
        used++;
    }
    for (int i = 0; i < anvil_st_count(f); i++) {
        const char *name = anvil_st_at(f, i)->name;
        if (ignorable(name)) ignored++;
    }
    if (used + ignored != anvil_st_count(f)) {
        for (int i = 0; i < anvil_st_count(f); i++) {
            const char *name = anvil_st_at(f, i)->name;
            if (ignorable(name) || !strcmp(name, "lm_head.weight")) continue;
            size_t pl = strlen(prefix);
            if (strncmp(name, prefix, pl))
                return anvil_fail("%s: unexpected tensor '%s' for GPT2LMHeadModel", path, name);
            /* Everything else that was used has the prefix and a known suffix; find the stranger. */
            const char *rest = name + pl;
            int known = 0;
            for (int j = 0; j < NGLOBAL && !known; j++) known = !strcmp(rest, global_map[j].suffix);
            int layer, off = 0;
            if (!known && sscanf(rest, "h.%d.%n", &layer, &off) == 1 && off > 0 && layer >= 0 && layer < L)
                for (int j = 0; j < NLAYER_MAP && !known; j++) known = !strcmp(rest + off, layer_map[j].suffix);
            if (!known) return anvil_fail("%s: unexpected tensor '%s' for this GPT2LMHeadModel config", path, name);
        }
    }
    return 0;
}

int anvil_hf_import(const char *dir, const anvil_kernels *k, anvil_gpt2 *m) {
    return anvil_hf_import_progress(dir, k, m, NULL, NULL);
}

int anvil_hf_import_progress(const char *dir, const anvil_kernels *k, anvil_gpt2 *m, anvil_ckpt_progress_fn progress,
                             void *ctx) {
    char path[PATH_MAX];
    anvil_gpt2_config c;
    snprintf(path, sizeof path, "%s/config.json", dir);
    if (read_config(path, &c)) return -1;
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    anvil_st_file *f = anvil_st_open(path);
    if (!f) return -1;
    if (anvil_gpt2_init(m, &c, k)) {
        anvil_st_close(f);
        return -1;
    }
    size_t n = m->nparams;
    /* Scratch for one converted tensor: the largest is wte (or lm_head) or an MLP weight. */
    size_t C = (size_t)c.n_embd, big = (size_t)c.vocab_size * C;
    if (4 * C * C > big) big = 4 * C * C;
    if ((size_t)c.block_size * C > big) big = (size_t)c.block_size * C;
    float *host = calloc(n, sizeof(float)), *scratch = malloc(big * sizeof(float));
    int rc = host && scratch ? load_weights(f, path, m, host, scratch, progress, ctx) : anvil_fail("%s: out of memory", path);
    if (!rc)
        m->k->upload(m->params, host, n * sizeof(float));
    else
        anvil_gpt2_free(m);
    free(host);
    free(scratch);
    anvil_st_close(f);
    return rc;
}
