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
    anvil_gpt2_config cfg;
    size_t nparams;
    size_t offsets[ANVIL_GPT2_NPARAM + 1];
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

/* The kinds of a shard file's slices, the first part of their tensor names: AdamW m and v, weights p. */
extern const char *const ckpt_slice_kinds[3];

/* The manifest of snapshot s listing files, stamped with its own checksum; free with cJSON_free.
 * NULL after anvil_fail. */
char *ckpt_build_manifest(const anvil_ckpt_snapshot *s, const anvil_ckpt_file *files, int nfiles);
/* Checks the size and CRC32C of every file the manifest lists in dir; -1 naming the first bad one.
 * progress (may be NULL) is told the bytes checksummed of all the files' as it goes. */
int ckpt_verify_files(const char *dir, const anvil_ckpt_manifest *m, anvil_ckpt_progress_fn progress, void *ctx);

#endif
