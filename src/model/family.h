/* What a model family implements, for src/model alone: the table of
 * operations and the parameter table behind model.h, and the helpers the
 * families share. Nothing outside src/model includes this header.
 *
 * To add a family: a folder src/model/<family>/ with its parameter table and
 * configuration (presets, checks, the fields files record, the Hugging Face
 * config.json), its passes (the whole model's, a tensor-parallel shard's and a
 * pipeline stage's, through the kernel table only), its decoding, and one
 * anvil_model_family value listed in model.c's registry. docs/EXTENDING.md
 * walks through it. */
#ifndef ANVIL_MODEL_FAMILY_H
#define ANVIL_MODEL_FAMILY_H

#include <cjson/cJSON.h>
#include <stddef.h>
#include <stdint.h>

#include "model/model.h"

/* A configuration field that files record: its key, an int or float member of anvil_model_config, and
 * the least value a file may give an int one. */
typedef struct {
    const char *key;
    size_t offset;
    int is_float;
    int min;
} anvil_model_field;

struct anvil_model_family {
    const char *name;        /* "gpt2" */
    const char *file_format; /* the model file's "format" metadata: "anvil-gpt2" */
    const char *const *presets; /* NULL-terminated */
    const char *preset_list;    /* the same, comma-separated, for messages */
    /* cfg from preset `name` (one of presets): every field, family included. */
    void (*preset)(const char *name, anvil_model_config *cfg);
    /* Checks and derives (padded_vocab included): one-line error naming the field. */
    int (*check)(anvil_model_config *cfg);
    int (*batch_check)(const anvil_model_config *cfg, int B, int T);
    int (*tp_check)(const anvil_model_config *cfg, int tp);
    const anvil_model_field *fields;
    int nfields;
    int (*ntensors)(const anvil_model_config *cfg);
    void (*tensor)(const anvil_model_config *cfg, int i, anvil_tensor_info *out);
    size_t (*flop_params)(const anvil_model_config *cfg);
    double (*flops_per_token)(const anvil_model_config *cfg, int T);
    /* model.h's anvil_model_linear_role. */
    const char *(*linear_role)(const anvil_model_config *cfg, int C, int OC);

    /* The passes, as model.h documents them; m->comm says whether m is a shard. */
    int (*forward)(anvil_model *m, const int32_t *inputs, const int32_t *targets, int B, int T, float *loss);
    int (*forward_backward)(anvil_model *m, const int32_t *inputs, const int32_t *targets, int B, int T,
                            float grad_scale, float *loss);
    int (*logits)(anvil_model *m, float *out);
    int (*stage_ready)(anvil_model *m, int B, int T);
    int (*stage_forward)(anvil_model *m, int slot, const int32_t *inputs, const int32_t *targets, int B, int T,
                         float *loss);
    int (*stage_backward)(anvil_model *m, int slot, float grad_scale);
    float *(*stage_input)(anvil_model *m, int slot);
    float *(*stage_output)(anvil_model *m, int slot);
    float *(*stage_grad)(anvil_model *m, int slot);
    size_t (*stage_floats)(const anvil_model *m);
    size_t (*activation_bytes)(const anvil_model *m);
    void (*acts_free)(anvil_model *m);
    anvil_model_cache *(*cache_new)(const anvil_model *m);
    void (*cache_free)(anvil_model_cache *c);
    int (*decode)(anvil_model *m, anvil_model_cache *c, int32_t token, int pos, float *logits);

    /* Hugging Face: config.json's model_type and architecture, the file written from cfg and the
     * tokenizer's ids (cJSON_Print text, NULL when out of memory; ids NULL: not known) and cfg read from
     * a parsed one (one-line error naming path and the field). Tensors carry their names (anvil_tensor_info.hf_name). On import, hf_prefix may be
     * missing from every name (older files), hf_ignorable names buffers to skip, and with tied
     * embeddings a stored hf_tied_head must equal the embedding. */
    const char *hf_model_type, *hf_architecture;
    char *(*hf_config_write)(const anvil_model_config *cfg, const anvil_model_special_ids *ids);
    int (*hf_config_read)(const cJSON *root, const char *path, anvil_model_config *cfg);
    const char *hf_prefix;
    int (*hf_ignorable)(const char *name);
    const char *hf_tied_head;
};

/* ---- shared by the families ---- */

/* Text a file gave (a name, a value), for a one-line message: its first 64 bytes into out (cap of at
 * least 65), control characters shown as '?'. Returns out. */
const char *anvil_model_shown(const char *text, char *out, size_t cap);


/* What a shard's pass checks before it touches a micro-batch: the shape, the slot s among the shard's
 * slots, that targets are given, and every token id. */
int anvil_model_shard_batch_check(const anvil_model *m, int s, const int32_t *inputs, const int32_t *targets, int B,
                                  int T);

/* A unit's parameters or gradients for a whole model's pass: through the hooks where there are hooks
 * (data parallelism's gathers and reductions), else views of the flat buffers. */
int anvil_model_get_params(anvil_model *m, int u, anvil_model_view *v);
int anvil_model_put_params(anvil_model *m, int u);
int anvil_model_get_grads(anvil_model *m, int u, anvil_model_view *v);
int anvil_model_put_grads(anvil_model *m, int u);

/* A shard's collectives over its tensor-parallel group (m->comm), `what` naming the tensor for the
 * watchdog's message. */
int anvil_model_tp_reduce(anvil_model *m, float *buf, size_t n, const char *what);
int anvil_model_tp_gather(anvil_model *m, const float *local, float *full, size_t n, const char *what);
int anvil_model_tp_scatter(anvil_model *m, const float *full, float *local, size_t n, const char *what);

/* Checks a batch's token ids against the vocabulary (targets may be NULL; a negative target takes no
 * part); `who` names the checker in the message. */
int anvil_model_check_tokens(const anvil_model *m, const char *who, const int32_t *inputs, const int32_t *targets,
                             size_t n);
/* Targets >= 0 among n. */
int anvil_model_count_targets(const int32_t *targets, size_t n);
/* Mean of n per-position losses in backend memory, summed on the host in double in a fixed order,
 * over count targets (0 when count is 0). */
float anvil_model_mean_loss(const anvil_model *m, const float *losses, size_t n, int count);
/* The vocabulary-parallel loss of a tensor-parallel shard: each rank's per-row log-sum-exp of its
 * shard's logits (lse[N], backend memory) and target logit (tlogit[N]) combined over the group into
 * the global log-sum-exp, left in lse for the backward, and the mean loss over targets >= 0 into
 * *loss. lse_all is scratch of tp*N floats (backend memory). Collective. */
int anvil_model_vocab_loss(anvil_model *m, float *lse, float *tlogit, float *lse_all, const int32_t *targets, int N,
                           int count, float *loss);

/* A list of activation buffers to allocate in one go: each entry's pointer is written where p points. */
typedef struct {
    void *p;
    size_t bytes;
} anvil_buffer_plan;
/* Allocates plan's n buffers from backend k, appending each to owned (which has room) and counting
 * their bytes; -1 when one cannot be had (those already allocated stay in owned for the caller to free). */
int anvil_alloc_plan(const anvil_kernels *k, const anvil_buffer_plan *plan, int n, void **owned, int *nowned,
                     size_t *bytes);

#endif
