/* Llama's family entry: presets, checks, the parameter table, FLOPs, RoPE's
 * table, and the Hugging Face config.json of LlamaForCausalLM. */
#include <limits.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "kernels/rope.h"
#include "model/llama/llama.h"

static const char *const preset_names[] = {"llama-tiny",   "llama-mini",   "llama-small", "llama3.2-1b",
                                           "llama3.2-3b", "llama3-8b",   NULL};

/* The published shapes are Meta's (llama-models' sku_list and params.json, the same numbers as the
 * Hugging Face config.json of each): the hidden width by Llama's rule from ffn_dim_multiplier and
 * multiple_of (8192, 8192 and 14336), the 3.2 models' embeddings tied and their RoPE scaled for 128K
 * positions (llama3: factor 32, low 1, high 4, original 8192). The small presets train on this
 * machine in minutes at the widths of GPT-2's tiny, mini and small, with grouped-query attention
 * (llama-mini tied, as the small Llama 3.2 models are) and the short contexts' rope_theta of Llama 2. */
static const struct {
    int n_layer, n_head, n_kv_head, n_embd, block_size, vocab_size, tied;
    float multiplier;
    int multiple_of;
    float theta;
    int llama3;
} presets[] = {
    {2, 4, 2, 64, 64, 257, 0, 0.0f, 32, 10000.0f, 0},
    {4, 4, 2, 128, 128, 257, 1, 0.0f, 32, 10000.0f, 0},
    {6, 6, 2, 384, 256, 50257, 1, 0.0f, 256, 500000.0f, 0},
    {16, 32, 8, 2048, 131072, 128256, 1, 1.5f, 256, 500000.0f, 1},
    {28, 24, 8, 3072, 131072, 128256, 1, 1.0f, 256, 500000.0f, 1},
    {32, 32, 8, 4096, 8192, 128256, 0, 1.3f, 1024, 500000.0f, 0},
};

static void preset(const char *name, anvil_model_config *cfg) {
    for (int i = 0; preset_names[i]; i++) {
        if (strcmp(name, preset_names[i])) continue;
        cfg->family = &anvil_llama_family;
        cfg->n_layer = presets[i].n_layer;
        cfg->n_head = presets[i].n_head;
        cfg->n_kv_head = presets[i].n_kv_head;
        cfg->n_embd = presets[i].n_embd;
        cfg->block_size = presets[i].block_size;
        cfg->vocab_size = presets[i].vocab_size;
        cfg->tied = presets[i].tied;
        cfg->ffn_hidden = 0;
        cfg->ffn_multiplier = presets[i].multiplier;
        cfg->ffn_multiple_of = presets[i].multiple_of;
        cfg->norm_eps = 1e-5f;
        cfg->rope_theta = presets[i].theta;
        if (presets[i].llama3) cfg->rope_scaling = (anvil_rope_scaling){1, 32.0f, 1.0f, 4.0f, 8192};
    }
}

/* Llama's rule (Meta's FeedForward): 2/3 of 4C, times ffn_dim_multiplier, rounded up to multiple_of. */
static int64_t ffn_rule(const anvil_model_config *c) {
    int64_t h = 2 * (4 * (int64_t)c->n_embd) / 3;
    if (c->ffn_multiplier > 0.0f) h = (int64_t)((double)c->ffn_multiplier * (double)h);
    int64_t q = c->ffn_multiple_of;
    return (h + q - 1) / q * q;
}

static anvil_rope_config rope_of(const anvil_model_config *c) {
    const anvil_rope_scaling *s = &c->rope_scaling;
    return (anvil_rope_config){.theta = c->rope_theta,
                               .type = s->llama3 ? ANVIL_ROPE_LLAMA3 : ANVIL_ROPE_DEFAULT,
                               .factor = s->factor,
                               .low_freq_factor = s->low_freq_factor,
                               .high_freq_factor = s->high_freq_factor,
                               .original_max_position_embeddings = s->original_max_position};
}

static int check_rope(const anvil_model_config *c) {
    const anvil_rope_scaling *s = &c->rope_scaling;
    if (s->llama3 != 0 && s->llama3 != 1) return anvil_fail("model: rope_scaling_llama3 must be 0 or 1, got %d", s->llama3);
    if (!s->llama3 && (s->factor != 0.0f || s->low_freq_factor != 0.0f || s->high_freq_factor != 0.0f ||
                       s->original_max_position != 0))
        return anvil_fail("model: rope_scaling's factors are set but its type (llama3) is not");
    anvil_rope_config rc = rope_of(c);
    char why[256];
    if (!anvil_rope_check(&rc, c->n_embd / c->n_head)) return 0;
    snprintf(why, sizeof why, "%s", anvil_errmsg());
    return anvil_fail("model: %s", why);
}

/* One line per bad field, before anything is allocated; derives padded_vocab and, when ffn_hidden is 0,
 * the hidden width by Llama's rule. */
static int check(anvil_model_config *c) {
    if (c->n_layer < 1 || c->n_layer > 1000) return anvil_fail("model: n_layer must be in 1..1000, got %d", c->n_layer);
    if (c->n_head < 1 || c->n_head > 4096) return anvil_fail("model: n_head must be in 1..4096, got %d", c->n_head);
    if (c->n_kv_head < 1 || c->n_head % c->n_kv_head)
        return anvil_fail("model: n_head (%d) is not divisible by n_kv_head (%d): each key/value head serves a whole "
                          "group of query heads",
                          c->n_head, c->n_kv_head);
    if (c->n_embd < 1 || c->n_embd > 16384) return anvil_fail("model: n_embd must be in 1..16384, got %d", c->n_embd);
    if (c->n_embd % c->n_head)
        return anvil_fail("model: n_embd (%d) is not divisible by n_head (%d)", c->n_embd, c->n_head);
    if ((c->n_embd / c->n_head) % 2)
        return anvil_fail("model: the head dimension n_embd/n_head = %d is odd; RoPE rotates pairs of channels",
                          c->n_embd / c->n_head);
    if (c->block_size < 1 || c->block_size > 1 << 20)
        return anvil_fail("model: block_size must be in 1..1048576, got %d", c->block_size);
    if (c->vocab_size < 2 || c->vocab_size > 1 << 24)
        return anvil_fail("model: vocab_size must be in 2..16777216, got %d", c->vocab_size);
    if (c->tied != 0 && c->tied != 1) return anvil_fail("model: tied must be 0 or 1, got %d", c->tied);
    if (!(c->norm_eps > 0.0f) || !isfinite(c->norm_eps))
        return anvil_fail("model: rms_norm_eps must be positive, got %g", c->norm_eps);
    if (c->ffn_hidden == 0) {
        if (c->ffn_multiple_of < 1 || !(c->ffn_multiplier >= 0.0f) || !isfinite(c->ffn_multiplier))
            return anvil_fail("model: ffn_hidden is 0 but Llama's rule has no multiple_of (%d) or a bad "
                              "ffn_dim_multiplier (%g)",
                              c->ffn_multiple_of, c->ffn_multiplier);
        int64_t h = ffn_rule(c);
        if (h < 1 || h > 1 << 20) return anvil_fail("model: Llama's rule gives a hidden width of %lld", (long long)h);
        c->ffn_hidden = (int)h;
    }
    if (c->ffn_hidden < 1 || c->ffn_hidden > 1 << 20)
        return anvil_fail("model: ffn_hidden must be in 1..1048576, got %d", c->ffn_hidden);
    if (check_rope(c)) return -1;
    c->padded_vocab = (c->vocab_size + 63) / 64 * 64;
    return 0;
}

/* The kernels count elements in int: the widest activation ([gate | up], or q/k/v's rows) must fit. */
static int batch_check(const anvil_model_config *c, int B, int T) {
    if (B < 1 || T < 1 || T > c->block_size)
        return anvil_fail("model: batch shape B=%d T=%d is invalid (block_size %d)", B, T, c->block_size);
    int64_t qkv = (int64_t)(c->n_head + 2 * c->n_kv_head) * (c->n_embd / c->n_head), gu = 2 * (int64_t)c->ffn_hidden;
    int64_t wide = qkv > gu ? qkv : gu, widest = (int64_t)B * T * wide;
    if (widest > INT_MAX)
        return anvil_fail("model: batch B=%d x T=%d is too large: its widest activation (B*T*%lld = %lld values) "
                          "exceeds %d; use a smaller batch and --total-batch-tokens",
                          B, T, (long long)wide, (long long)widest, INT_MAX);
    return 0;
}

static int tp_check(const anvil_model_config *c, int tp) {
    if (c->n_head % tp) return anvil_fail("--tp %d does not divide the model's %d attention heads", tp, c->n_head);
    if (c->n_kv_head % tp)
        return anvil_fail("--tp %d does not divide the model's %d key/value heads", tp, c->n_kv_head);
    if (c->ffn_hidden % tp)
        return anvil_fail("--tp %d does not divide the model's MLP width of %d", tp, c->ffn_hidden);
    if (c->padded_vocab % tp)
        return anvil_fail("--tp %d does not divide the padded vocabulary of %d rows", tp, c->padded_vocab);
    return 0;
}

/* What files record, in this order (model-file metadata, checkpoint manifests). */
static const anvil_model_field fields[] = {
    {"n_layer", offsetof(anvil_model_config, n_layer), 0, 1},
    {"n_head", offsetof(anvil_model_config, n_head), 0, 1},
    {"n_kv_head", offsetof(anvil_model_config, n_kv_head), 0, 1},
    {"n_embd", offsetof(anvil_model_config, n_embd), 0, 1},
    {"ffn_hidden", offsetof(anvil_model_config, ffn_hidden), 0, 1},
    {"block_size", offsetof(anvil_model_config, block_size), 0, 1},
    {"vocab_size", offsetof(anvil_model_config, vocab_size), 0, 1},
    {"tied", offsetof(anvil_model_config, tied), 0, 0},
    {"rms_norm_eps", offsetof(anvil_model_config, norm_eps), 1, 0},
    {"rope_theta", offsetof(anvil_model_config, rope_theta), 1, 0},
    {"rope_scaling_llama3", offsetof(anvil_model_config, rope_scaling.llama3), 0, 0},
    {"rope_scaling_factor", offsetof(anvil_model_config, rope_scaling.factor), 1, 0},
    {"rope_scaling_low_freq_factor", offsetof(anvil_model_config, rope_scaling.low_freq_factor), 1, 0},
    {"rope_scaling_high_freq_factor", offsetof(anvil_model_config, rope_scaling.high_freq_factor), 1, 0},
    {"rope_scaling_original_max_position", offsetof(anvil_model_config, rope_scaling.original_max_position), 0, 0},
};

static int ntensors(const anvil_model_config *c) { return c->tied ? LLAMA_NPARAM - 1 : LLAMA_NPARAM; }

/* Hugging Face's LlamaPreTrainedModel: N(0, initializer_range 0.02) for every linear and embedding
 * weight (no scaled residual projections), ones for the RMSNorms. */
static void tensor(const anvil_model_config *c, int i, anvil_tensor_info *t) {
    static const struct {
        const char *name, *hf;
        int norm, split;
    } table[LLAMA_NPARAM] = {
        {"embed", "model.embed_tokens.weight", 0, ANVIL_SPLIT_VOCAB},
        {"attn_norm", "model.layers.%d.input_layernorm.weight", 1, ANVIL_SPLIT_NONE},
        {"wq", "model.layers.%d.self_attn.q_proj.weight", 0, ANVIL_SPLIT_COLUMN},
        {"wk", "model.layers.%d.self_attn.k_proj.weight", 0, ANVIL_SPLIT_COLUMN},
        {"wv", "model.layers.%d.self_attn.v_proj.weight", 0, ANVIL_SPLIT_COLUMN},
        {"wo", "model.layers.%d.self_attn.o_proj.weight", 0, ANVIL_SPLIT_ROW},
        {"mlp_norm", "model.layers.%d.post_attention_layernorm.weight", 1, ANVIL_SPLIT_NONE},
        {"wgate", "model.layers.%d.mlp.gate_proj.weight", 0, ANVIL_SPLIT_COLUMN},
        {"wup", "model.layers.%d.mlp.up_proj.weight", 0, ANVIL_SPLIT_COLUMN},
        {"wdown", "model.layers.%d.mlp.down_proj.weight", 0, ANVIL_SPLIT_ROW},
        {"norm", "model.norm.weight", 1, ANVIL_SPLIT_NONE},
        {"lm_head", "lm_head.weight", 0, ANVIL_SPLIT_VOCAB},
    };
    int64_t L = c->n_layer, C = c->n_embd, hs = c->n_embd / c->n_head, H = c->ffn_hidden;
    int64_t rows[LLAMA_NPARAM] = {0, 0, c->n_head * hs, c->n_kv_head * hs, c->n_kv_head * hs, C, 0, H, H, C, 0, 0};
    int64_t cols[LLAMA_NPARAM] = {0, 0, C, C, C, c->n_head * hs, 0, C, C, H, 0, 0};
    t->name = table[i].name;
    t->hf_name = table[i].hf;
    t->hf_layout = ANVIL_HF_AS_IS;
    t->split = table[i].split;
    t->split_groups = 1;
    t->decays = !table[i].norm;
    t->init_std = table[i].norm ? 0.0f : 0.02f;
    t->init_value = table[i].norm ? 1.0f : 0.0f;
    t->place = ANVIL_PLACE_LAYER;
    if (i == LLAMA_EMBED || i == LLAMA_HEAD) {
        t->place = i == LLAMA_HEAD ? ANVIL_PLACE_LAST : c->tied ? ANVIL_PLACE_TIED : ANVIL_PLACE_FIRST;
        t->vocab_rows = 1;
        t->ndim = 2;
        t->shape[0] = c->padded_vocab;
        t->shape[1] = C;
    } else if (i == LLAMA_NORM) {
        t->place = ANVIL_PLACE_LAST;
        t->ndim = 1;
        t->shape[0] = C;
    } else if (table[i].norm) {
        t->ndim = 2;
        t->shape[0] = L;
        t->shape[1] = C;
    } else {
        t->ndim = 3;
        t->shape[0] = L;
        t->shape[1] = rows[i];
        t->shape[2] = cols[i];
    }
}

/* Parameters that count toward model FLOPs: no padding rows, and the LM head's matrix once: a tied
 * embedding counts as the head, an untied one is a lookup and does not count (its lm_head does). */
static size_t flop_params(const anvil_model_config *c) {
    size_t C = (size_t)c->n_embd, pad = (size_t)(c->padded_vocab - c->vocab_size) * C;
    size_t n = anvil_model_num_params(c) - pad;
    return c->tied ? n : n - pad - (size_t)c->vocab_size * C;
}

static double flops_per_token(const anvil_model_config *c, int T) {
    return 6.0 * (double)flop_params(c) + 12.0 * c->n_layer * (double)c->n_embd * T;
}

/* HF's names; the gate and up projections are one matmul here, as q, k and v are. */
static const char *linear_role(const anvil_model_config *c, int C, int OC) {
    int E = c->n_embd, H = c->ffn_hidden, qkv = (c->n_head + 2 * c->n_kv_head) * llama_hs(c);
    if (C == H && OC == E) return "down_proj";
    if (C != E) return NULL;
    return OC == qkv ? "qkv_proj" : OC == E ? "o_proj" : OC == 2 * H ? "gate_up_proj" : NULL;
}

int llama_rope_upload(const anvil_kernels *k, const anvil_model_config *c, float *dst, int P) {
    int hs = llama_hs(c);
    float *host = malloc((size_t)P * (size_t)hs * sizeof(float));
    if (!host) return anvil_fail("model: out of memory for RoPE's table of %d positions", P);
    anvil_rope_config rc = rope_of(c);
    int rc_ = anvil_rope_table(host, &rc, hs, P);
    if (!rc_) k->upload(dst, host, (size_t)P * (size_t)hs * sizeof(float));
    free(host);
    return rc_;
}

/* ---- Hugging Face LlamaForCausalLM ---- */

/* A float as the shortest decimal that reads back the same, so config.json says 1e-05, not
 * 9.99999974737875e-06. */
static double short_float(float v) {
    char buf[32];
    for (int prec = 6; prec <= 9; prec++) {
        snprintf(buf, sizeof buf, "%.*g", prec, (double)v);
        if (strtof(buf, NULL) == v) break;
    }
    return strtod(buf, NULL);
}

static void add_id(cJSON *r, const char *key, int32_t id) {
    if (id >= 0) cJSON_AddNumberToObject(r, key, id);
    else cJSON_AddNullToObject(r, key);
}

static void add_rope(cJSON *r, const anvil_model_config *c) {
    cJSON_AddNumberToObject(r, "rope_theta", short_float(c->rope_theta));
    if (!c->rope_scaling.llama3) {
        cJSON_AddNullToObject(r, "rope_scaling");
        return;
    }
    cJSON *s = cJSON_AddObjectToObject(r, "rope_scaling");
    if (!s) return;
    cJSON_AddStringToObject(s, "rope_type", "llama3");
    cJSON_AddNumberToObject(s, "factor", short_float(c->rope_scaling.factor));
    cJSON_AddNumberToObject(s, "low_freq_factor", short_float(c->rope_scaling.low_freq_factor));
    cJSON_AddNumberToObject(s, "high_freq_factor", short_float(c->rope_scaling.high_freq_factor));
    cJSON_AddNumberToObject(s, "original_max_position_embeddings", c->rope_scaling.original_max_position);
}

/* Without the tokenizer's ids, bos and eos are null (Hugging Face's "none"): the vocabulary's size does
 * not tell them. Llama 3's encoding puts <|begin_of_text|> 256 ids from the end, but a Llama trained on
 * GPT-2's 50257 ids has no such token at 50001: generation would stop at whatever token has that id. */
static char *hf_config_write(const anvil_model_config *c, const anvil_model_special_ids *ids) {
    cJSON *r = cJSON_CreateObject();
    if (!r) return NULL;
    cJSON *arch = cJSON_AddArrayToObject(r, "architectures");
    if (arch) cJSON_AddItemToArray(arch, cJSON_CreateString("LlamaForCausalLM"));
    cJSON_AddStringToObject(r, "model_type", "llama");
    cJSON_AddStringToObject(r, "hidden_act", "silu");
    cJSON_AddNumberToObject(r, "hidden_size", c->n_embd);
    cJSON_AddNumberToObject(r, "intermediate_size", c->ffn_hidden);
    cJSON_AddNumberToObject(r, "num_hidden_layers", c->n_layer);
    cJSON_AddNumberToObject(r, "num_attention_heads", c->n_head);
    cJSON_AddNumberToObject(r, "num_key_value_heads", c->n_kv_head);
    cJSON_AddNumberToObject(r, "head_dim", llama_hs(c));
    cJSON_AddNumberToObject(r, "max_position_embeddings", c->block_size);
    cJSON_AddNumberToObject(r, "vocab_size", c->vocab_size);
    cJSON_AddNumberToObject(r, "rms_norm_eps", short_float(c->norm_eps));
    add_rope(r, c);
    cJSON_AddBoolToObject(r, "tie_word_embeddings", c->tied);
    add_id(r, "bos_token_id", ids ? ids->bos : -1);
    add_id(r, "eos_token_id", ids ? ids->eos : -1);
    cJSON_AddBoolToObject(r, "attention_bias", 0);
    cJSON_AddBoolToObject(r, "mlp_bias", 0);
    cJSON_AddNumberToObject(r, "attention_dropout", 0.0);
    cJSON_AddNumberToObject(r, "initializer_range", 0.02);
    cJSON_AddNumberToObject(r, "pretraining_tp", 1);
    cJSON_AddBoolToObject(r, "use_cache", 1);
    cJSON_AddStringToObject(r, "torch_dtype", "float32");
    char *text = cJSON_Print(r);
    cJSON_Delete(r);
    return text;
}

/* An integer field in 1..2^24: required, or (dflt > 0) that value when missing or null. */
static int cfg_int(const cJSON *r, const char *path, const char *key, int dflt, int *out) {
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(r, key);
    if ((!it || cJSON_IsNull(it)) && dflt > 0) {
        *out = dflt;
        return 0;
    }
    if (!cJSON_IsNumber(it) || it->valuedouble != floor(it->valuedouble) || it->valuedouble < 1 ||
        it->valuedouble > (1 << 24))
        return anvil_fail("%s: field '%s' is missing or not a positive integer", path, key);
    *out = (int)it->valuedouble;
    return 0;
}

/* A positive number field of object o (named where in messages), or dflt when missing and dflt > 0. */
static int cfg_num(const cJSON *o, const char *path, const char *where, const char *key, double dflt, float *out) {
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!it && dflt > 0.0) {
        *out = (float)dflt;
        return 0;
    }
    if (!cJSON_IsNumber(it) || !(it->valuedouble > 0.0) || !isfinite((float)it->valuedouble))
        return anvil_fail("%s: field '%s%s' is missing or not a positive number", path, where, key);
    *out = (float)it->valuedouble;
    return 0;
}

/* A boolean field that anvil computes only one way: absent, null or want. */
static int cfg_bool_is(const cJSON *r, const char *path, const char *key, int want) {
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(r, key);
    if (!it || cJSON_IsNull(it)) return 0;
    if (!cJSON_IsBool(it) || cJSON_IsTrue(it) != want)
        return anvil_fail("%s: field '%s' must be %s: anvil's Llama does not compute the alternative", path, key,
                          want ? "true" : "false");
    return 0;
}

/* rope_scaling (or transformers 5's rope_parameters): none, "default", or "llama3" with its four
 * numbers; anything else anvil does not compute. */
static int read_scaling(const cJSON *s, const char *path, const char *key, anvil_model_config *c) {
    if (!s || cJSON_IsNull(s)) return 0;
    if (!cJSON_IsObject(s)) return anvil_fail("%s: field '%s' is not an object or null", path, key);
    const cJSON *ty = cJSON_GetObjectItemCaseSensitive(s, "rope_type");
    if (!ty) ty = cJSON_GetObjectItemCaseSensitive(s, "type");
    const char *type = cJSON_GetStringValue(ty);
    if (!type) return anvil_fail("%s: field '%s.rope_type' is missing or not a string", path, key);
    if (!strcmp(type, "default")) return 0;
    if (strcmp(type, "llama3"))
        return anvil_fail("%s: field '%s.rope_type' is '%s'; anvil computes RoPE unscaled or with llama3's scaling",
                          path, key, anvil_model_shown(type, (char[72]){0}, 72));
    char where[64];
    snprintf(where, sizeof where, "%s.", key);
    anvil_rope_scaling *x = &c->rope_scaling;
    float orig = 0.0f;
    x->llama3 = 1;
    if (cfg_num(s, path, where, "factor", 0.0, &x->factor) ||
        cfg_num(s, path, where, "low_freq_factor", 0.0, &x->low_freq_factor) ||
        cfg_num(s, path, where, "high_freq_factor", 0.0, &x->high_freq_factor) ||
        cfg_num(s, path, where, "original_max_position_embeddings", 0.0, &orig))
        return -1;
    if (orig != floorf(orig) || orig > (float)(1 << 24))
        return anvil_fail("%s: field '%soriginal_max_position_embeddings' is not an integer", path, where);
    x->original_max_position = (int)orig;
    return 0;
}

/* What LlamaConfig leaves to its defaults (rms_norm_eps 1e-6, rope_theta 10000, 2048 positions, as many
 * key/value heads as heads, untied) is read the same way; what anvil does not compute (another
 * activation or head size, biases, another RoPE scaling) is refused, naming the field. */
static int hf_config_read(const cJSON *r, const char *path, anvil_model_config *c) {
    memset(c, 0, sizeof *c);
    c->family = &anvil_llama_family;
    if (cfg_int(r, path, "hidden_size", 0, &c->n_embd) || cfg_int(r, path, "intermediate_size", 0, &c->ffn_hidden) ||
        cfg_int(r, path, "num_hidden_layers", 0, &c->n_layer) ||
        cfg_int(r, path, "num_attention_heads", 0, &c->n_head) || cfg_int(r, path, "vocab_size", 0, &c->vocab_size) ||
        cfg_int(r, path, "num_key_value_heads", c->n_head, &c->n_kv_head) ||
        cfg_int(r, path, "max_position_embeddings", 2048, &c->block_size))
        return -1;
    const char *act = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(r, "hidden_act"));
    if (act && strcmp(act, "silu"))
        return anvil_fail("%s: field 'hidden_act' is '%s'; anvil's Llama computes SwiGLU (silu)", path,
                          anvil_model_shown(act, (char[72]){0}, 72));
    const cJSON *hd = cJSON_GetObjectItemCaseSensitive(r, "head_dim");
    if (hd && !cJSON_IsNull(hd) && (!cJSON_IsNumber(hd) || hd->valuedouble * c->n_head != (double)c->n_embd))
        return anvil_fail("%s: field 'head_dim' must be hidden_size / num_attention_heads (%d / %d)", path, c->n_embd,
                          c->n_head);
    if (cfg_bool_is(r, path, "attention_bias", 0) || cfg_bool_is(r, path, "mlp_bias", 0)) return -1;
    const cJSON *tie = cJSON_GetObjectItemCaseSensitive(r, "tie_word_embeddings");
    if (tie && !cJSON_IsNull(tie) && !cJSON_IsBool(tie))
        return anvil_fail("%s: field 'tie_word_embeddings' is not a boolean", path);
    c->tied = cJSON_IsTrue(tie);
    const cJSON *params = cJSON_GetObjectItemCaseSensitive(r, "rope_parameters");
    const cJSON *theta_at = cJSON_GetObjectItemCaseSensitive(r, "rope_theta") || !cJSON_IsObject(params) ? r : params;
    if (cfg_num(r, path, "", "rms_norm_eps", 1e-6, &c->norm_eps) ||
        cfg_num(theta_at, path, theta_at == r ? "" : "rope_parameters.", "rope_theta", 10000.0, &c->rope_theta))
        return -1;
    const cJSON *scaling = cJSON_GetObjectItemCaseSensitive(r, "rope_scaling");
    if (scaling || !params) {
        if (read_scaling(scaling, path, "rope_scaling", c)) return -1;
    } else if (read_scaling(params, path, "rope_parameters", c)) {
        return -1;
    }
    if (check(c)) {
        char why[256];
        snprintf(why, sizeof why, "%s", anvil_errmsg());
        return anvil_fail("%s: %s", path, why);
    }
    return 0;
}

static int forward(anvil_model *m, const int32_t *inputs, const int32_t *targets, int B, int T, float *loss) {
    return m->comm ? llama_stage_forward(m, 0, inputs, targets, B, T, loss) : llama_forward(m, inputs, targets, B, T, loss);
}

static int forward_backward(anvil_model *m, const int32_t *inputs, const int32_t *targets, int B, int T,
                            float grad_scale, float *loss) {
    if (!m->comm) return llama_forward_backward(m, inputs, targets, B, T, grad_scale, loss);
    if (llama_stage_forward(m, 0, inputs, targets, B, T, loss)) return -1;
    return llama_stage_backward(m, 0, grad_scale);
}

static void acts_free(anvil_model *m) {
    if (m->comm) llama_shard_acts_free(m);
    else llama_acts_free(m);
}

static size_t activation_bytes(const anvil_model *m) {
    return m->comm ? llama_activation_bytes(m) : llama_whole_activation_bytes(m);
}

const anvil_model_family anvil_llama_family = {
    .name = "llama",
    .file_format = "anvil-llama",
    .presets = preset_names,
    .preset_list = "llama-tiny, llama-mini, llama-small, llama3.2-1b, llama3.2-3b, llama3-8b",
    .preset = preset,
    .check = check,
    .batch_check = batch_check,
    .tp_check = tp_check,
    .fields = fields,
    .nfields = (int)(sizeof fields / sizeof fields[0]),
    .ntensors = ntensors,
    .tensor = tensor,
    .flop_params = flop_params,
    .flops_per_token = flops_per_token,
    .linear_role = linear_role,
    .forward = forward,
    .forward_backward = forward_backward,
    .logits = llama_logits,
    .stage_ready = llama_stage_ready,
    .stage_forward = llama_stage_forward,
    .stage_backward = llama_stage_backward,
    .stage_input = llama_stage_input,
    .stage_output = llama_stage_output,
    .stage_grad = llama_stage_grad,
    .stage_floats = llama_stage_floats,
    .activation_bytes = activation_bytes,
    .acts_free = acts_free,
    .cache_new = llama_cache_new,
    .cache_free = llama_cache_free,
    .decode = llama_decode,
    .hf_model_type = "llama",
    .hf_architecture = "LlamaForCausalLM",
    .hf_config_write = hf_config_write,
    .hf_config_read = hf_config_read,
    .hf_prefix = NULL,
    .hf_ignorable = NULL,
    .hf_tied_head = "lm_head.weight",
};
