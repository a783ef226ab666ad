/* A trained model as one safetensors file: anvil's tensor names
 * (anvil_gpt2_param_names, per-layer tensors stacked, wte without its
 * padding rows) and the configuration in the metadata. This is what
 * `anvil train` leaves in its run folder and `anvil sample` reads; the full
 * training checkpoint (optimizer, loader and RNG state) builds on it. */
#ifndef ANVIL_CKPT_MODEL_FILE_H
#define ANVIL_CKPT_MODEL_FILE_H

#include "model/gpt2.h"

/* Atomic: a crash leaves the previous file or the complete new one. */
int anvil_model_save(const char *path, const anvil_gpt2 *m);
/* Reads the configuration from the metadata, initializes m on backend k and loads the weights. */
int anvil_model_load(const char *path, const anvil_kernels *k, anvil_gpt2 *m);
/* Like anvil_model_load, from what a user may name as a model: a model file; a checkpoint folder,
 * verified first, whose weights are put back together from shard files when the run sharded them;
 * or a run folder, which means its model.safetensors, or while it has none (the run stopped
 * early), its newest checkpoint that verifies (warn as for anvil_ckpt_resolve). */
int anvil_model_load_any(const char *path, const anvil_kernels *k, anvil_gpt2 *m, char *warn, size_t warn_cap);
/* Loads weights into an already initialized model whose configuration must match the file's
 * shapes (tensor names as in anvil_gpt2_param_names, with prefix prepended, e.g. "" or "final."). */
int anvil_model_load_tensors(const char *path, const char *prefix, anvil_gpt2 *m);

#endif
