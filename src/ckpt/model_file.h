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
/* Loads weights into an already initialized model whose configuration must match the file's
 * shapes (tensor names as in anvil_gpt2_param_names, with prefix prepended, e.g. "" or "final."). */
int anvil_model_load_tensors(const char *path, const char *prefix, anvil_gpt2 *m);

#endif
