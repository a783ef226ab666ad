/* Hugging Face interchange, for every model family: anvil models to and from
 * a transformers folder (config.json and the weights), so the ecosystem can
 * use what anvil trains and anvil can start from published weights.
 *
 * The family says what config.json holds and each tensor's Hugging Face name
 * and layout (model/model.h's anvil_tensor_info: per-layer tensors unstacked,
 * GPT-2's Conv1D weights transposed to [in, out]). Weights above the shard
 * size go into several files model-0000K-of-0000N.safetensors with
 * model.safetensors.index.json naming each tensor's file, as transformers
 * writes them; below it, one model.safetensors. */
#ifndef ANVIL_CKPT_HF_H
#define ANVIL_CKPT_HF_H

#include <stdint.h>

#include "ckpt/checkpoint.h"
#include "model/model.h"

/* transformers' default shard size, 5 GB. */
#define ANVIL_HF_SHARD_BYTES (5000ull * 1000 * 1000)

/* Writes DIR's weights (F32, metadata format=pt) from m's whole parameters, sharded above shard_bytes
 * (0: ANVIL_HF_SHARD_BYTES), and DIR/config.json, which names the tokenizer's ids (NULL: not known,
 * the family's default). Creates DIR if needed; each file is replaced atomically, the index last.
 * progress (may be NULL) is told the tensors written of all of them. */
int anvil_hf_export(const anvil_model *m, const char *dir, uint64_t shard_bytes, const anvil_model_special_ids *ids,
                    anvil_ckpt_progress_fn progress, void *ctx);

/* Reads DIR/config.json (its model_type picks the family; GPT-2 when it has none) and the weights
 * (model.safetensors, or the files model.safetensors.index.json names), initializes m on backend k and
 * loads them: F32, F16 or BF16. Names may lack the family's prefix (the original gpt2 repository's
 * have none), buffers the family knows to be no parameters are skipped, and a stored LM head of tied
 * embeddings must equal the embedding. Refuses what the family does not compute, naming the field, and
 * any tensor it does not know. progress (may be NULL) is told the tensors converted. */
int anvil_hf_import(const char *dir, const anvil_kernels *k, anvil_model *m, anvil_ckpt_progress_fn progress,
                    void *ctx);

#endif
