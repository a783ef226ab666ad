/* The Llama model beyond its arithmetic (test_llama_torch.c holds that):
 *   - the published shapes: presets llama3.2-1b, llama3.2-3b and llama3-8b count
 *     1,235,814,400, 3,212,749,824 and 8,030,261,248 parameters (Meta's 1.24B,
 *     3.21B, 8.03B), and Llama's hidden-width rule gives their 8192, 8192 and
 *     14336; their config.json as Hugging Face publishes it reads back as the
 *     preset;
 *   - FLOPs per token: 6N + 12*L*C*T with N the LM head once (a tied
 *     embedding as the head, an untied one not at all) and no padding rows;
 *   - decoding with the grouped-query KV cache gives the full forward's logits
 *     at every position (1e-4 relative + 1e-5 absolute, test_decode.c's
 *     bound: the two paths sum in different orders; measured 2026-12-04 on
 *     avx2: 2.0e-5 at most), untied with llama3 scaling and tied multi-query;
 *   - the initialization: the same seed gives the same bits, another seed
 *     others; norms are ones, every matrix N(0, 0.02) (sample std within
 *     2%), the padding rows zero;
 *   - bad configurations fail with one line naming the field before anything
 *     is allocated (n_head not divisible by n_kv_head, an odd head dimension,
 *     a TP that does not divide the key/value heads, bad RoPE scaling);
 *   - Hugging Face: export then import is bit-identical (tied and untied),
 *     also sharded (a small shard size: several files and the index), and
 *     with BF16 tensors each value is the bf16 one exactly; config.json holds
 *     every field LlamaForCausalLM needs, the tokenizer's ids when given, and
 *     what anvil does not compute is refused naming the field. */
#include <cjson/cJSON.h>
#include <glob.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ckpt/hf.h"
#include "ckpt/safetensors.h"
#include "core/error.h"
#include "core/fsutil.h"
#include "core/json.h"
#include "core/rng.h"
#include "model/model.h"
#include "testutil.h"

static char root[PATH_MAX];

static anvil_model_config checked_preset(const char *name) {
    anvil_model_config c;
    CHECK(anvil_model_preset(name, &c) == 0 && anvil_model_config_check(&c) == 0);
    return c;
}

static void test_published(void) {
    const struct {
        const char *preset;
        size_t params;
        int ffn, tied;
    } want[] = {{"llama3.2-1b", 1235814400, 8192, 1}, {"llama3.2-3b", 3212749824, 8192, 1},
                {"llama3-8b", 8030261248, 14336, 0}};
    for (int i = 0; i < 3; i++) {
        anvil_model_config c = checked_preset(want[i].preset);
        CHECK(anvil_model_num_params(&c) == want[i].params);
        CHECK(c.ffn_hidden == want[i].ffn && c.tied == want[i].tied && c.padded_vocab == 128256);
    }
    /* FLOPs: 8B's embedding is a lookup, its lm_head counts; 1B's tied embedding counts once. */
    anvil_model_config c8 = checked_preset("llama3-8b"), c1 = checked_preset("llama3.2-1b");
    CHECK(anvil_model_flop_params(&c8) == 8030261248u - 128256u * 4096u);
    CHECK(anvil_model_flop_params(&c1) == 1235814400u);
    CHECK(anvil_model_flops_per_token(&c8, 8192) == 6.0 * (8030261248.0 - 128256.0 * 4096) + 12.0 * 32 * 4096 * 8192);
    /* A small model's padding rows do not count: llama-tiny's two 257-row tables are padded to 320. */
    anvil_model_config t = checked_preset("llama-tiny");
    CHECK(t.padded_vocab == 320 && !t.tied);
    CHECK(anvil_model_flop_params(&t) == anvil_model_num_params(&t) - 2 * 63 * 64 - 257 * 64);

    /* Llama 3.2 1B's config.json, as Hugging Face's meta-llama/Llama-3.2-1B has it. */
    const char *json =
        "{\"architectures\":[\"LlamaForCausalLM\"],\"attention_bias\":false,\"attention_dropout\":0.0,"
        "\"bos_token_id\":128000,\"eos_token_id\":128001,\"head_dim\":64,\"hidden_act\":\"silu\","
        "\"hidden_size\":2048,\"initializer_range\":0.02,\"intermediate_size\":8192,"
        "\"max_position_embeddings\":131072,\"mlp_bias\":false,\"model_type\":\"llama\",\"num_attention_heads\":32,"
        "\"num_hidden_layers\":16,\"num_key_value_heads\":8,\"pretraining_tp\":1,\"rms_norm_eps\":1e-05,"
        "\"rope_scaling\":{\"factor\":32.0,\"high_freq_factor\":4.0,\"low_freq_factor\":1.0,"
        "\"original_max_position_embeddings\":8192,\"rope_type\":\"llama3\"},\"rope_theta\":500000.0,"
        "\"tie_word_embeddings\":true,\"torch_dtype\":\"bfloat16\",\"transformers_version\":\"4.45.0.dev0\","
        "\"use_cache\":true,\"vocab_size\":128256}";
    cJSON *r = anvil_json_parse_str(json);
    const anvil_model_family *f = anvil_model_hf_family("llama");
    anvil_model_config got;
    CHECK(r && f && anvil_model_hf_config_read(f, r, "config.json", &got) == 0);
    const char *key;
    char a[32], b[32];
    for (int i = 0; anvil_model_config_field(&c1, i, &key, a, sizeof a, NULL, NULL); i++) {
        anvil_model_config_field(&got, i, &key, b, sizeof b, NULL, NULL);
        if (strcmp(a, b)) t_fail(__FILE__, __LINE__, "config.json's %s is %s, the preset's %s", key, b, a);
    }
    cJSON_Delete(r);
}

static void random_tokens(anvil_rng *rng, int32_t *t, int n, int V) {
    for (int i = 0; i < n; i++) t[i] = (int32_t)(anvil_rng_u64(rng) % (uint64_t)V);
}

static void test_decode(anvil_model_config cfg, const char *what) {
    anvil_model m;
    CHECK(anvil_model_init(&m, &cfg, anvil_kernels_cpu()) == 0);
    anvil_model_init_weights(&m, 11);
    /* Larger weights than the init, so that attention is far from uniform. */
    for (size_t i = 0; i < m.nparams; i++) m.params[i] *= 5.0f;
    const int T = cfg.block_size, Vp = m.cfg.padded_vocab;
    int32_t *toks = malloc((size_t)T * sizeof *toks);
    anvil_rng rng;
    anvil_rng_seed(&rng, 3);
    random_tokens(&rng, toks, T, cfg.vocab_size);
    float *full = malloc(sizeof(float) * (size_t)T * Vp), *step = malloc(sizeof(float) * (size_t)T * Vp);
    CHECK(anvil_model_forward(&m, toks, NULL, 1, T, NULL) == 0);
    CHECK(anvil_model_logits(&m, full) == 0);
    anvil_model_cache *c = anvil_model_cache_new(&m);
    CHECK(c != NULL);
    for (int t = 0; c && t < T; t++) CHECK(anvil_model_decode(&m, c, toks[t], t, step + (size_t)t * Vp) == 0);
    double worst = 0.0;
    for (size_t i = 0; i < (size_t)T * Vp; i++) worst = fmax(worst, fabs((double)step[i] - full[i]));
    printf("decode %s: worst |diff| from the full forward %.3g over %d positions\n", what, worst, T);
    t_close("decode vs forward logits", step, full, (size_t)T * Vp, 1e-4f, 1e-5f);
    CHECK(c && anvil_model_decode(&m, c, toks[0], T, step) != 0); /* past the context */
    anvil_model_cache_free(c);
    free(toks);
    free(full);
    free(step);
    anvil_model_free(&m);
}

static void test_init(void) {
    anvil_model_config cfg = checked_preset("llama-tiny");
    anvil_model a, b;
    CHECK(anvil_model_init(&a, &cfg, anvil_kernels_cpu()) == 0 && anvil_model_init(&b, &cfg, anvil_kernels_cpu()) == 0);
    anvil_model_init_weights(&a, 42);
    anvil_model_init_weights(&b, 42);
    CHECK(memcmp(a.params, b.params, a.nparams * sizeof(float)) == 0);
    anvil_model_init_weights(&b, 43);
    CHECK(memcmp(a.params, b.params, a.nparams * sizeof(float)) != 0);
    for (int i = 0; i < a.ntensors; i++) {
        anvil_tensor_info t;
        anvil_model_tensor(&a.cfg, i, &t);
        const float *p = a.params + a.offsets[i];
        size_t n = a.offsets[i + 1] - a.offsets[i], real = t.vocab_rows ? (size_t)cfg.vocab_size * cfg.n_embd : n;
        if (t.init_std > 0.0f) {
            double s = 0.0;
            for (size_t j = 0; j < real; j++) s += (double)p[j] * p[j];
            double sd = sqrt(s / (double)real);
            if (fabs(sd - 0.02) > 0.02 * 0.02) t_fail(__FILE__, __LINE__, "%s: std %.5f, not 0.02", t.name, sd);
            CHECK(t.decays);
        } else {
            for (size_t j = 0; j < n; j++) CHECK(p[j] == 1.0f);
            CHECK(!t.decays);
        }
        for (size_t j = real; j < n; j++) CHECK(p[j] == 0.0f);
    }
    anvil_model_free(&a);
    anvil_model_free(&b);
}

/* The configuration refused with one line containing want, before any allocation. */
static void refused(anvil_model_config c, const char *want) {
    anvil_model m;
    int rc = anvil_model_init(&m, &c, anvil_kernels_cpu());
    CHECK(rc == -1);
    if (rc == 0) anvil_model_free(&m);
    else if (!strstr(anvil_errmsg(), want) || strchr(anvil_errmsg(), '\n'))
        t_fail(__FILE__, __LINE__, "refusal '%s' does not say '%s' in one line", anvil_errmsg(), want);
}

static void test_refusals(void) {
    anvil_model_config good = t_llama(2, 4, 2, 64, 96, 16, 100, 0);
    anvil_model_config c = good;
    c.n_kv_head = 3;
    refused(c, "n_head (4) is not divisible by n_kv_head (3)");
    c = t_llama(2, 4, 4, 36, 96, 16, 100, 0);
    refused(c, "head dimension n_embd/n_head = 9 is odd");
    c = good;
    c.rope_scaling = (anvil_rope_scaling){1, 8.0f, 4.0f, 1.0f, 8192};
    refused(c, "low_freq_factor < high_freq_factor");
    c = good;
    c.rope_scaling.factor = 8.0f;
    refused(c, "its type (llama3) is not");
    c = good;
    c.ffn_hidden = 0;
    refused(c, "multiple_of");
    c = good;
    c.norm_eps = 0.0f;
    refused(c, "rms_norm_eps");
    CHECK(anvil_model_config_check(&good) == 0);
    CHECK(anvil_model_tp_check(&good, 2) == 0);
    CHECK(anvil_model_tp_check(&good, 4) == -1 && strstr(anvil_errmsg(), "--tp 4 does not divide the model's 2 "
                                                                         "key/value heads"));
    good.ffn_hidden = 90;
    CHECK(anvil_model_config_check(&good) == 0);
    CHECK(anvil_model_tp_check(&good, 4) == -1 && strstr(anvil_errmsg(), "key/value heads"));
    CHECK(anvil_model_tp_check(&good, 2) == 0);
    good.n_kv_head = 4;
    CHECK(anvil_model_tp_check(&good, 4) == -1 && strstr(anvil_errmsg(), "MLP width of 90"));
    /* Batches whose widest activation overflows the kernels' int counts. */
    anvil_model_config big = checked_preset("llama3-8b");
    CHECK(anvil_model_batch_check(&big, 8, 8192) == 0);
    CHECK(anvil_model_batch_check(&big, 16, 8192) == -1 && strstr(anvil_errmsg(), "too large"));
}

/* A model with trained-looking weights: random everywhere (padding rows excepted), so no transposition or
 * swapped tensor can hide. */
static void random_model(anvil_model *m, anvil_model_config cfg, uint64_t seed) {
    CHECK(anvil_model_init(m, &cfg, anvil_kernels_cpu()) == 0);
    anvil_model_init_weights(m, seed);
    anvil_rng rng;
    anvil_rng_seed(&rng, seed);
    for (int i = 0; i < m->ntensors; i++) {
        anvil_tensor_info t;
        anvil_model_tensor(&m->cfg, i, &t);
        size_t n = m->offsets[i + 1] - m->offsets[i];
        size_t real = t.vocab_rows ? (size_t)cfg.vocab_size * cfg.n_embd : n;
        for (size_t j = 0; j < real; j++) m->params[m->offsets[i] + j] += 0.1f * anvil_rng_normal(&rng);
    }
}

static void path_in(char *out, const char *dir, const char *leaf) {
    if (snprintf(out, PATH_MAX, "%s/%s", dir, leaf) >= PATH_MAX) t_fail(__FILE__, __LINE__, "%s/%s: too long", dir, leaf);
}

static cJSON *read_config(const char *dir) {
    char p[PATH_MAX], *text;
    size_t len;
    path_in(p, dir, "config.json");
    if (anvil_read_file(p, &text, &len)) return NULL;
    cJSON *r = anvil_json_parse(text, len, NULL);
    free(text);
    return r;
}

static int number_is(const cJSON *r, const char *key, double want) {
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(r, key);
    return cJSON_IsNumber(it) && it->valuedouble == want;
}

static void check_config_json(const char *dir, const anvil_model_config *c, int bos, int eos) {
    cJSON *r = read_config(dir);
    CHECK(r != NULL);
    if (!r) return;
    const cJSON *arch = cJSON_GetObjectItemCaseSensitive(r, "architectures");
    CHECK(cJSON_IsArray(arch) && !strcmp(cJSON_GetStringValue(cJSON_GetArrayItem(arch, 0)), "LlamaForCausalLM"));
    CHECK(!strcmp(cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(r, "model_type")), "llama"));
    CHECK(number_is(r, "hidden_size", c->n_embd) && number_is(r, "intermediate_size", c->ffn_hidden));
    CHECK(number_is(r, "num_hidden_layers", c->n_layer) && number_is(r, "num_attention_heads", c->n_head));
    CHECK(number_is(r, "num_key_value_heads", c->n_kv_head) && number_is(r, "vocab_size", c->vocab_size));
    CHECK(number_is(r, "max_position_embeddings", c->block_size) && number_is(r, "rms_norm_eps", 1e-5));
    CHECK(number_is(r, "rope_theta", c->rope_theta));
    CHECK(cJSON_IsBool(cJSON_GetObjectItemCaseSensitive(r, "tie_word_embeddings")) &&
          cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(r, "tie_word_embeddings")) == c->tied);
    const cJSON *s = cJSON_GetObjectItemCaseSensitive(r, "rope_scaling");
    if (c->rope_scaling.llama3)
        CHECK(cJSON_IsObject(s) && !strcmp(cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(s, "rope_type")), "llama3") &&
              number_is(s, "factor", c->rope_scaling.factor) &&
              number_is(s, "original_max_position_embeddings", c->rope_scaling.original_max_position));
    else
        CHECK(cJSON_IsNull(s));
    const cJSON *b = cJSON_GetObjectItemCaseSensitive(r, "bos_token_id");
    CHECK(bos < 0 ? cJSON_IsNull(b) : number_is(r, "bos_token_id", bos));
    const cJSON *e = cJSON_GetObjectItemCaseSensitive(r, "eos_token_id");
    CHECK(eos < 0 ? cJSON_IsNull(e) : number_is(r, "eos_token_id", eos));
    cJSON_Delete(r);
}

/* Export, import, and the same bits. */
static void round_trip(const anvil_model *a, const char *dir, uint64_t shard_bytes, const anvil_model_special_ids *ids) {
    CHECK(anvil_hf_export(a, dir, shard_bytes, ids, NULL, NULL) == 0);
    anvil_model b;
    if (anvil_hf_import(dir, anvil_kernels_cpu(), &b, NULL, NULL)) {
        t_fail(__FILE__, __LINE__, "import of %s: %s", dir, anvil_errmsg());
        return;
    }
    CHECK(b.cfg.family == a->cfg.family && b.nparams == a->nparams);
    CHECK(b.nparams == a->nparams && !memcmp(a->params, b.params, a->nparams * sizeof(float)));
    const char *key;
    char x[32], y[32];
    for (int i = 0; anvil_model_config_field(&a->cfg, i, &key, x, sizeof x, NULL, NULL); i++) {
        anvil_model_config_field(&b.cfg, i, &key, y, sizeof y, NULL, NULL);
        if (strcmp(x, y)) t_fail(__FILE__, __LINE__, "%s: %s is %s after the round trip, was %s", dir, key, y, x);
    }
    anvil_model_free(&b);
}

static void test_hf_files(const anvil_model *a, const char *dir) {
    char p[PATH_MAX];
    path_in(p, dir, "model.safetensors");
    anvil_st_file *f = anvil_st_open(p);
    CHECK(f != NULL);
    if (!f) return;
    int C = a->cfg.n_embd, kv = a->cfg.n_kv_head * (C / a->cfg.n_head);
    const anvil_st_tensor *t = anvil_st_find(f, "model.layers.1.self_attn.k_proj.weight");
    CHECK(t && t->ndim == 2 && t->shape[0] == kv && t->shape[1] == C);
    /* [out, in] as anvil holds it: k_proj[1][r][c] is wk's layer 1 row r column c. */
    const float *wk = a->params + a->offsets[t_tensor(&a->cfg, "wk")] + (size_t)kv * C;
    CHECK(t && ((const float *)t->data)[5 * C + 7] == wk[5 * C + 7]);
    t = anvil_st_find(f, "model.layers.0.mlp.down_proj.weight");
    CHECK(t && t->shape[0] == C && t->shape[1] == a->cfg.ffn_hidden);
    t = anvil_st_find(f, "model.embed_tokens.weight");
    CHECK(t && t->shape[0] == a->cfg.vocab_size);
    CHECK((anvil_st_find(f, "lm_head.weight") != NULL) == !a->cfg.tied);
    CHECK(anvil_st_find(f, "model.norm.weight") != NULL);
    CHECK(anvil_st_count(f) == 1 + 9 * a->cfg.n_layer + 1 + !a->cfg.tied);
    anvil_st_close(f);
}

static uint16_t to_bf16(float v) {
    uint32_t b;
    memcpy(&b, &v, 4);
    return (uint16_t)((b + 0x7fff + ((b >> 16) & 1)) >> 16); /* round to nearest even */
}

/* The exported weights rewritten as BF16: import reads each value as that bf16 number exactly. */
static void test_bf16(const anvil_model *a, const char *dir) {
    char p[PATH_MAX];
    path_in(p, dir, "model.safetensors");
    anvil_st_file *f = anvil_st_open(p);
    if (!f) {
        t_fail(__FILE__, __LINE__, "%s", anvil_errmsg());
        return;
    }
    int n = anvil_st_count(f);
    anvil_st_tensor *ts = calloc((size_t)n, sizeof *ts);
    uint16_t **data = calloc((size_t)n, sizeof *data);
    for (int i = 0; i < n; i++) {
        ts[i] = *anvil_st_at(f, i);
        size_t cnt = ts[i].nbytes / 4;
        data[i] = malloc(cnt * 2);
        for (size_t j = 0; j < cnt; j++) data[i][j] = to_bf16(((const float *)ts[i].data)[j]);
        ts[i].dtype = ANVIL_ST_BF16;
        ts[i].nbytes = cnt * 2;
        ts[i].data = data[i];
    }
    const char *meta[] = {"format", "pt"};
    CHECK(anvil_st_write(p, ts, n, meta, 1) == 0);
    anvil_model b;
    CHECK(anvil_hf_import(dir, anvil_kernels_cpu(), &b, NULL, NULL) == 0);
    size_t bad = 0;
    for (size_t j = 0; j < a->nparams; j++) {
        uint32_t bits = (uint32_t)to_bf16(a->params[j]) << 16;
        float want;
        memcpy(&want, &bits, 4);
        bad += b.params[j] != want;
    }
    CHECK(bad == 0);
    anvil_model_free(&b);
    for (int i = 0; i < n; i++) free(data[i]);
    free(data);
    free(ts);
    anvil_st_close(f);
}

/* config.json's field set to value (JSON text): the import refused naming want, then the file as it was. */
static void hf_refused(const char *dir, const char *field, const char *value, const char *want) {
    char p[PATH_MAX], *orig;
    size_t len;
    path_in(p, dir, "config.json");
    if (anvil_read_file(p, &orig, &len)) return;
    cJSON *r = anvil_json_parse(orig, len, NULL);
    cJSON_DeleteItemFromObjectCaseSensitive(r, field);
    if (value) cJSON_AddItemToObject(r, field, anvil_json_parse_str(value));
    char *text = cJSON_Print(r);
    CHECK(anvil_write_file_atomic(p, text, strlen(text)) == 0);
    anvil_model m;
    CHECK(anvil_hf_import(dir, anvil_kernels_cpu(), &m, NULL, NULL) == -1);
    if (!strstr(anvil_errmsg(), want) || !strstr(anvil_errmsg(), dir))
        t_fail(__FILE__, __LINE__, "%s=%s: '%s' does not name %s and '%s'", field, value, anvil_errmsg(), dir, want);
    CHECK(anvil_write_file_atomic(p, orig, len) == 0);
    cJSON_free(text);
    cJSON_Delete(r);
    free(orig);
}

static void test_hf(void) {
    char dir[PATH_MAX], sharded[PATH_MAX];
    anvil_model_config untied = t_llama(2, 4, 2, 32, 48, 16, 300, 0);
    untied.rope_theta = 500000.0f;
    untied.rope_scaling = (anvil_rope_scaling){1, 8.0f, 1.0f, 4.0f, 8};
    anvil_model a, t;
    random_model(&a, untied, 5);
    path_in(dir, root, "untied");
    anvil_model_special_ids ids = {-1, 299};
    round_trip(&a, dir, 0, &ids);
    check_config_json(dir, &a.cfg, -1, 299);
    test_hf_files(&a, dir);
    /* Without the tokenizer's ids: null, not ids guessed from the vocabulary's size. */
    round_trip(&a, dir, 0, NULL);
    check_config_json(dir, &a.cfg, -1, -1);
    /* Sharded: 8 KiB files, so the vocabulary tables (38 KB each) take a file each, a layer several. */
    path_in(sharded, root, "sharded");
    round_trip(&a, sharded, 8192, &ids);
    char pattern[PATH_MAX], one[PATH_MAX];
    path_in(pattern, sharded, "model-*-of-*.safetensors");
    path_in(one, sharded, "model.safetensors");
    glob_t g;
    CHECK(glob(pattern, 0, NULL, &g) == 0 && g.gl_pathc > 2 && access(one, F_OK) != 0);
    printf("sharded export at 8 KiB: %zu files and the index\n", g.gl_pathc);
    globfree(&g);
    test_bf16(&a, dir);

    anvil_model_config tied = t_llama(2, 4, 1, 32, 48, 16, 70, 1);
    random_model(&t, tied, 6);
    path_in(dir, root, "tied");
    anvil_model_special_ids l3 = {68, 69};
    round_trip(&t, dir, 0, &l3);
    check_config_json(dir, &t.cfg, 68, 69);
    test_hf_files(&t, dir);
    hf_refused(dir, "hidden_act", "\"gelu\"", "field 'hidden_act'");
    hf_refused(dir, "attention_bias", "true", "field 'attention_bias'");
    hf_refused(dir, "mlp_bias", "true", "field 'mlp_bias'");
    hf_refused(dir, "head_dim", "16", "field 'head_dim'");
    hf_refused(dir, "rope_scaling", "{\"rope_type\":\"yarn\",\"factor\":4.0}", "field 'rope_scaling.rope_type'");
    hf_refused(dir, "rope_scaling", "{\"rope_type\":\"llama3\",\"factor\":4.0}", "rope_scaling.low_freq_factor");
    hf_refused(dir, "num_key_value_heads", "3", "not divisible by n_kv_head");
    hf_refused(dir, "hidden_size", NULL, "field 'hidden_size'");
    hf_refused(dir, "tie_word_embeddings", "false", "lm_head.weight' is missing");
    /* After each refusal the folder is as it was: it imports. */
    anvil_model back;
    CHECK(anvil_hf_import(dir, anvil_kernels_cpu(), &back, NULL, NULL) == 0);
    anvil_model_free(&back);
    anvil_model_free(&a);
    anvil_model_free(&t);
}

int main(void) {
    test_published();
    anvil_model_config gqa = t_llama(2, 4, 2, 32, 48, 40, 97, 0);
    gqa.rope_theta = 500000.0f;
    gqa.rope_scaling = (anvil_rope_scaling){1, 4.0f, 1.0f, 4.0f, 16};
    test_decode(gqa, "GQA 4/2, untied, llama3 scaling");
    test_decode(t_llama(2, 4, 1, 32, 48, 40, 97, 1), "MQA, tied");
    test_init();
    test_refusals();
    snprintf(root, sizeof root, "/tmp/anvil-llama-XXXXXX");
    if (!mkdtemp(root)) return 1;
    test_hf();
    anvil_remove_tree(root);
    return t_done("test_llama_model");
}
