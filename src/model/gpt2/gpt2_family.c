/* GPT-2's family entry: presets, checks, the parameter table, FLOPs, and the
 * Hugging Face config.json of GPT2LMHeadModel. */
#include <limits.h>
#include <math.h>
#include <stddef.h>
#include <string.h>

#include "core/error.h"
#include "model/gpt2/gpt2.h"

static const char *const preset_names[] = {"gpt2", "gpt2-medium", "gpt2-large", "gpt2-xl", "tiny", "mini", "small",
                                           NULL};

static const struct {
    int n_layer, n_head, n_embd, block_size, vocab_size;
} presets[] = {
    {12, 12, 768, 1024, 50257}, {24, 16, 1024, 1024, 50257}, {36, 20, 1280, 1024, 50257}, {48, 25, 1600, 1024, 50257},
    {2, 4, 64, 64, 257},        {4, 4, 128, 128, 257},       {6, 6, 384, 256, 50257},
};

static void preset(const char *name, anvil_model_config *cfg) {
    for (int i = 0; preset_names[i]; i++)
        if (!strcmp(name, preset_names[i])) {
            cfg->family = &anvil_gpt2_family;
            cfg->n_layer = presets[i].n_layer;
            cfg->n_head = presets[i].n_head;
            cfg->n_embd = presets[i].n_embd;
            cfg->block_size = presets[i].block_size;
            cfg->vocab_size = presets[i].vocab_size;
        }
}

/* GPT-2 has no grouped-query attention, a 4C MLP, a tied LM head and a fixed LayerNorm epsilon: the
 * configuration's other fields are derived, whatever they held. */
static int check(anvil_model_config *c) {
    if (c->n_layer < 1 || c->n_layer > 1000) return anvil_fail("model: n_layer must be in 1..1000, got %d", c->n_layer);
    if (c->n_head < 1) return anvil_fail("model: n_head must be positive, got %d", c->n_head);
    if (c->n_embd < 1 || c->n_embd > 16384) return anvil_fail("model: n_embd must be in 1..16384, got %d", c->n_embd);
    if (c->n_embd % c->n_head)
        return anvil_fail("model: n_embd (%d) is not divisible by n_head (%d)", c->n_embd, c->n_head);
    if (c->block_size < 1 || c->block_size > 1 << 20)
        return anvil_fail("model: block_size must be in 1..1048576, got %d", c->block_size);
    if (c->vocab_size < 2 || c->vocab_size > 1 << 24)
        return anvil_fail("model: vocab_size must be in 2..16777216, got %d", c->vocab_size);
    c->padded_vocab = (c->vocab_size + 63) / 64 * 64;
    c->n_kv_head = c->n_head;
    c->ffn_hidden = 4 * c->n_embd;
    c->tied = 1;
    c->norm_eps = 1e-5f;
    c->rope_theta = 0.0f;
    memset(&c->rope_scaling, 0, sizeof c->rope_scaling);
    return 0;
}

static int batch_check(const anvil_model_config *cfg, int B, int T) {
    if (B < 1 || T < 1 || T > cfg->block_size)
        return anvil_fail("model: batch shape B=%d T=%d is invalid (block_size %d)", B, T, cfg->block_size);
    int64_t widest = (int64_t)B * T * 4 * cfg->n_embd;
    if (widest > INT_MAX)
        return anvil_fail("model: batch B=%d x T=%d is too large: its MLP activation (B*T*4*%d = %lld values) "
                          "exceeds %d; use a smaller batch and --total-batch-tokens",
                          B, T, cfg->n_embd, (long long)widest, INT_MAX);
    return 0;
}

static int tp_check(const anvil_model_config *cfg, int tp) {
    if (cfg->n_head % tp) return anvil_fail("--tp %d does not divide the model's %d attention heads", tp, cfg->n_head);
    if (cfg->padded_vocab % tp)
        return anvil_fail("--tp %d does not divide the padded vocabulary of %d rows", tp, cfg->padded_vocab);
    return 0;
}

/* What files record, in this order (model-file metadata, checkpoint manifests). */
static const anvil_model_field fields[] = {
    {"n_layer", offsetof(anvil_model_config, n_layer), 0, 1},
    {"n_head", offsetof(anvil_model_config, n_head), 0, 1},
    {"n_embd", offsetof(anvil_model_config, n_embd), 0, 1},
    {"block_size", offsetof(anvil_model_config, block_size), 0, 1},
    {"vocab_size", offsetof(anvil_model_config, vocab_size), 0, 1},
};

static int ntensors(const anvil_model_config *cfg) {
    (void)cfg;
    return ANVIL_GPT2_NPARAM;
}

/* nanoGPT's initialization: N(0, 0.02) for matrices and embeddings, the residual projections scaled
 * by 1/sqrt(2*n_layer), zero biases, unit LayerNorm weights. */
static void tensor(const anvil_model_config *c, int i, anvil_tensor_info *t) {
    static const struct {
        const char *name, *hf;
        int kind, split, groups, transpose;
    } table[ANVIL_GPT2_NPARAM] = {
        /* kind: 0 a matrix or embedding (decays, normal), 1 a bias (zero), 2 a LayerNorm weight (one) */
        {"wte", "transformer.wte.weight", 0, ANVIL_SPLIT_VOCAB, 1, 0},
        {"wpe", "transformer.wpe.weight", 0, ANVIL_SPLIT_NONE, 1, 0},
        {"ln1w", "transformer.h.%d.ln_1.weight", 2, ANVIL_SPLIT_NONE, 1, 0},
        {"ln1b", "transformer.h.%d.ln_1.bias", 1, ANVIL_SPLIT_NONE, 1, 0},
        {"qkvw", "transformer.h.%d.attn.c_attn.weight", 0, ANVIL_SPLIT_COLUMN, 3, 1},
        {"qkvb", "transformer.h.%d.attn.c_attn.bias", 1, ANVIL_SPLIT_COLUMN, 3, 0},
        {"attprojw", "transformer.h.%d.attn.c_proj.weight", 0, ANVIL_SPLIT_ROW, 1, 1},
        {"attprojb", "transformer.h.%d.attn.c_proj.bias", 1, ANVIL_SPLIT_NONE, 1, 0},
        {"ln2w", "transformer.h.%d.ln_2.weight", 2, ANVIL_SPLIT_NONE, 1, 0},
        {"ln2b", "transformer.h.%d.ln_2.bias", 1, ANVIL_SPLIT_NONE, 1, 0},
        {"fcw", "transformer.h.%d.mlp.c_fc.weight", 0, ANVIL_SPLIT_COLUMN, 1, 1},
        {"fcb", "transformer.h.%d.mlp.c_fc.bias", 1, ANVIL_SPLIT_COLUMN, 1, 0},
        {"fcprojw", "transformer.h.%d.mlp.c_proj.weight", 0, ANVIL_SPLIT_ROW, 1, 1},
        {"fcprojb", "transformer.h.%d.mlp.c_proj.bias", 1, ANVIL_SPLIT_NONE, 1, 0},
        {"lnfw", "transformer.ln_f.weight", 2, ANVIL_SPLIT_NONE, 1, 0},
        {"lnfb", "transformer.ln_f.bias", 1, ANVIL_SPLIT_NONE, 1, 0},
    };
    int64_t L = c->n_layer, C = c->n_embd;
    t->name = table[i].name;
    t->hf_name = table[i].hf;
    t->hf_layout = table[i].transpose ? ANVIL_HF_TRANSPOSE : ANVIL_HF_AS_IS;
    t->split = table[i].split;
    t->split_groups = table[i].groups;
    t->decays = table[i].kind == 0;
    t->init_std = table[i].kind ? 0.0f
                  : i == ANVIL_GPT2_ATTPROJW || i == ANVIL_GPT2_FCPROJW ? 0.02f / sqrtf(2.0f * c->n_layer)
                                                                          : 0.02f;
    t->init_value = table[i].kind == 2 ? 1.0f : 0.0f;
    t->place = ANVIL_PLACE_LAYER;
    t->ndim = 2;
    switch (i) {
    case ANVIL_GPT2_WTE:
        t->place = ANVIL_PLACE_TIED;
        t->vocab_rows = 1;
        t->shape[0] = c->padded_vocab;
        t->shape[1] = C;
        break;
    case ANVIL_GPT2_WPE:
        t->place = ANVIL_PLACE_FIRST;
        t->shape[0] = c->block_size;
        t->shape[1] = C;
        break;
    case ANVIL_GPT2_QKVW: t->ndim = 3; t->shape[0] = L; t->shape[1] = 3 * C; t->shape[2] = C; break;
    case ANVIL_GPT2_QKVB: t->shape[0] = L; t->shape[1] = 3 * C; break;
    case ANVIL_GPT2_ATTPROJW: t->ndim = 3; t->shape[0] = L; t->shape[1] = C; t->shape[2] = C; break;
    case ANVIL_GPT2_FCW: t->ndim = 3; t->shape[0] = L; t->shape[1] = 4 * C; t->shape[2] = C; break;
    case ANVIL_GPT2_FCB: t->shape[0] = L; t->shape[1] = 4 * C; break;
    case ANVIL_GPT2_FCPROJW: t->ndim = 3; t->shape[0] = L; t->shape[1] = C; t->shape[2] = 4 * C; break;
    case ANVIL_GPT2_LNFW:
    case ANVIL_GPT2_LNFB:
        t->place = ANVIL_PLACE_LAST;
        t->ndim = 1;
        t->shape[0] = C;
        break;
    default: t->shape[0] = L; t->shape[1] = C; break; /* the LayerNorms and the row-parallel biases */
    }
}

/* Parameters that count toward model FLOPs: no wpe (a lookup) and no padding rows; wte counts once,
 * as the LM head. */
static size_t flop_params(const anvil_model_config *c) {
    size_t C = (size_t)c->n_embd;
    return anvil_model_num_params(c) - (size_t)c->block_size * C - (size_t)(c->padded_vocab - c->vocab_size) * C;
}

static double flops_per_token(const anvil_model_config *c, int T) {
    return 6.0 * (double)flop_params(c) + 12.0 * c->n_layer * (double)c->n_embd * T;
}

static const char *linear_role(const anvil_model_config *c, int C, int OC) {
    int E = c->n_embd;
    if (C == 4 * E) return OC == E ? "fc_proj" : NULL;
    if (C != E) return NULL;
    return OC == 3 * E ? "qkv" : OC == E ? "attn_proj" : OC == 4 * E ? "fc" : NULL;
}

/* ---- Hugging Face GPT2LMHeadModel ---- */

/* GPT-2's files name the last id, whatever ids says. */
static char *hf_config_write(const anvil_model_config *c, const anvil_model_special_ids *ids) {
    (void)ids;
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
    /* The end-of-text token of both anvil tokenizers is the last id. */
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

/* Refuses what anvil's GPT-2 does not compute (another activation or epsilon, n_inner != 4*n_embd,
 * per-layer attention scaling, untied embeddings), naming the field. */
static int hf_config_read(const cJSON *r, const char *path, anvil_model_config *c) {
    memset(c, 0, sizeof *c);
    c->family = &anvil_gpt2_family;
    const char *act = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(r, "activation_function"));
    const cJSON *eps = cJSON_GetObjectItemCaseSensitive(r, "layer_norm_epsilon");
    const cJSON *inner = cJSON_GetObjectItemCaseSensitive(r, "n_inner");
    const char *pos_key = cJSON_GetObjectItemCaseSensitive(r, "n_positions") ? "n_positions" : "n_ctx";
    if (cfg_int(r, path, "n_layer", &c->n_layer) || cfg_int(r, path, "n_head", &c->n_head) ||
        cfg_int(r, path, "n_embd", &c->n_embd) || cfg_int(r, path, pos_key, &c->block_size) ||
        cfg_int(r, path, "vocab_size", &c->vocab_size))
        return -1;
    if (act && strcmp(act, "gelu_new") && strcmp(act, "gelu_pytorch_tanh"))
        return anvil_fail("%s: field 'activation_function' is '%s'; anvil computes the tanh GELU (gelu_new)", path,
                          anvil_model_shown(act, (char[72]){0}, 72));
    if (eps && (!cJSON_IsNumber(eps) || fabs(eps->valuedouble - 1e-5) > 1e-12))
        return anvil_fail("%s: field 'layer_norm_epsilon' must be 1e-5, anvil's LayerNorm epsilon", path);
    if (inner && !cJSON_IsNull(inner) && (!cJSON_IsNumber(inner) || inner->valuedouble != 4.0 * c->n_embd))
        return anvil_fail("%s: field 'n_inner' must be null or 4*n_embd", path);
    if (cfg_bool_is(r, path, "scale_attn_weights", 1) || cfg_bool_is(r, path, "scale_attn_by_inverse_layer_idx", 0) ||
        cfg_bool_is(r, path, "tie_word_embeddings", 1))
        return -1;
    return check(c);
}

/* The attention-mask buffers older files carry. */
static int hf_ignorable(const char *name) {
    size_t n = strlen(name);
    return (n >= 10 && !strcmp(name + n - 10, ".attn.bias")) ||
           (n >= 17 && !strcmp(name + n - 17, ".attn.masked_bias"));
}

static int forward(anvil_model *m, const int32_t *inputs, const int32_t *targets, int B, int T, float *loss) {
    return m->comm ? gpt2_shard_forward(m, inputs, targets, B, T, loss) : gpt2_forward(m, inputs, targets, B, T, loss);
}

static int forward_backward(anvil_model *m, const int32_t *inputs, const int32_t *targets, int B, int T,
                            float grad_scale, float *loss) {
    return m->comm ? gpt2_shard_forward_backward(m, inputs, targets, B, T, grad_scale, loss)
                   : gpt2_forward_backward(m, inputs, targets, B, T, grad_scale, loss);
}

static void acts_free(anvil_model *m) {
    if (m->comm) gpt2_shard_acts_free(m);
    else gpt2_acts_free(m);
}

const anvil_model_family anvil_gpt2_family = {
    .name = "gpt2",
    .file_format = "anvil-gpt2",
    .presets = preset_names,
    .preset_list = "gpt2, gpt2-medium, gpt2-large, gpt2-xl, tiny, mini, small",
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
    .logits = gpt2_logits,
    .stage_ready = gpt2_stage_ready,
    .stage_forward = gpt2_stage_forward,
    .stage_backward = gpt2_stage_backward,
    .stage_input = gpt2_stage_input,
    .stage_output = gpt2_stage_output,
    .stage_grad = gpt2_stage_grad,
    .stage_floats = gpt2_stage_floats,
    .activation_bytes = gpt2_activation_bytes,
    .acts_free = acts_free,
    .cache_new = gpt2_cache_new,
    .cache_free = gpt2_cache_free,
    .decode = gpt2_decode,
    .hf_model_type = "gpt2",
    .hf_architecture = "GPT2LMHeadModel",
    .hf_config_write = hf_config_write,
    .hf_config_read = hf_config_read,
    .hf_prefix = "transformer.",
    .hf_ignorable = hf_ignorable,
    .hf_tied_head = "lm_head.weight",
};
