/* Shared between the files of the training checkpoints (checkpoint_write.c,
 * checkpoint_load.c, checkpoint_manifest.c, checkpoint_retention.c). Not part
 * of the public contract, which is checkpoint.h. */
#ifndef ANVIL_CKPT_CHECKPOINT_INTERNAL_H
#define ANVIL_CKPT_CHECKPOINT_INTERNAL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "ckpt/checkpoint.h"
#include "ckpt/safetensors.h"
#include "core/error.h"

/* a/b into out; the message names the path when it does not fit. */
static inline int ckpt_join(char *out, size_t cap, const char *a, const char *b) {
    int n = snprintf(out, cap, "%s/%s", a, b);
    if (n < 0 || (size_t)n >= cap) return anvil_fail("%s/%s: path too long", a, b);
    return 0;
}

/* Everything a checkpoint holds, copied out of the training state: the weights and moments straight
 * into the images of their files (len 0 when this snapshot has none), and what the manifest says. */
struct anvil_ckpt_snapshot {
    anvil_model_config cfg;
    size_t nparams;
    size_t offsets[ANVIL_MODEL_MAX_TENSORS + 1];
    anvil_st_image weights, moments;
    uint32_t weights_crc, moments_crc; /* their files' CRC32C */
    anvil_adamw_config acfg;
    int t;
    anvil_loader_state loader;
    anvil_rng rng;
    int64_t step, tokens_seen;
    char *tokenizer;
    char *train_config; /* compact JSON object */
    anvil_ckpt_layout layout;
};

/* Where a snapshot's state is: the weights are in shard files at ZeRO stage 3 and under tensor or
 * pipeline parallelism, the moments from stage 1 on and under those two as well; otherwise rank 0
 * holds them whole (layout NULL: one process). */
static inline int ckpt_weights_sharded(const anvil_ckpt_layout *l) {
    return l && (l->zero_stage == 3 || l->tensor_parallel > 1 || l->pipeline_parallel > 1);
}
static inline int ckpt_moments_sharded(const anvil_ckpt_layout *l) {
    return l && (l->zero_stage > 0 || ckpt_weights_sharded(l));
}

/* The length of a row of tensor i: its last dimension, the distance between a block slice's runs. */
static inline size_t ckpt_row_width(const anvil_model_config *c, int i) { return anvil_model_tensor_row(c, i); }

/* Tensor i's name in files, with prefix prepended, into out (cap bytes). */
static inline void ckpt_tensor_name(const anvil_model_config *c, int i, const char *prefix, char *out, size_t cap) {
    anvil_tensor_info t;
    anvil_model_tensor(c, i, &t);
    snprintf(out, cap, "%s%s", prefix, t.name);
}

/* Tensor i's shape in files, where a vocabulary table's rows stop at the real vocabulary (the layout's
 * padding rows are left out): its dimensions, into s. */
static inline int ckpt_file_shape(const anvil_model_config *c, int i, int64_t s[3]) {
    anvil_tensor_info t;
    anvil_model_tensor(c, i, &t);
    for (int d = 0; d < 3; d++) s[d] = t.shape[d];
    if (t.vocab_rows) s[0] = c->vocab_size;
    return t.ndim;
}

/* The elements of tensor i that files hold (a vocabulary table's real rows). */
static inline size_t ckpt_file_numel(const anvil_model_config *c, int i) {
    int64_t s[3];
    int nd = ckpt_file_shape(c, i, s);
    size_t n = 1;
    for (int d = 0; d < nd; d++) n *= (size_t)s[d];
    return n;
}

/* A model file's metadata: "format" (the family's) and the configuration's fields as key/value pairs,
 * kv[2j] and kv[2j+1] for j < n, their text held in vals. */
typedef struct {
    char vals[24][32];
    const char *kv[2 * 24 + 2];
    int n;
} ckpt_model_meta;
void ckpt_model_meta_fill(ckpt_model_meta *mm, const anvil_model_config *c);

/* Tensor prefix+param i of a model-file table in f, checked against config c (a vocabulary table
 * without its padding rows), or NULL after anvil_fail naming it and path. */
const anvil_st_tensor *ckpt_checked_tensor(const anvil_st_file *f, const char *path, const char *prefix,
                                           const anvil_model_config *c, int i);

/* Elements [off, off + n) of tensor t of f (opened as an index), which is tensor i of a model file of
 * config c: a vocabulary table's rows stop at the real vocabulary, so what lies past them is padding
 * and reads as zeros. Into host memory at dst; 0 or -1 after anvil_fail. */
int ckpt_read_padded(const anvil_st_file *f, const anvil_st_tensor *t, const anvil_model_config *c, int i, size_t off,
                     size_t n, float *dst);

/* The kinds of a shard file's slices, the first part of their tensor names: AdamW m and v, weights p. */
extern const char *const ckpt_slice_kinds[3];

/* The manifest of snapshot s listing files, stamped with its own checksum; free with cJSON_free.
 * NULL after anvil_fail. */
char *ckpt_build_manifest(const anvil_ckpt_snapshot *s, const anvil_ckpt_file *files, int nfiles);
/* Checks the size and CRC32C of the files the manifest lists in dir that fall to part of nparts (as
 * anvil_ckpt_verify_part deals them; 0 of 1 is every file); -1 naming the first bad one. progress
 * (may be NULL) is told the bytes checksummed of the part's files' as it goes. */
int ckpt_verify_files(const char *dir, const anvil_ckpt_manifest *m, int part, int nparts,
                      anvil_ckpt_progress_fn progress, void *ctx);

#endif
