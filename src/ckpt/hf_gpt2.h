/* Hugging Face GPT-2 interchange: anvil models to and from the layout of
 * transformers' GPT2LMHeadModel, so the ecosystem can use what anvil trains
 * and anvil can start from published GPT-2 weights.
 *
 * A Hugging Face folder holds model.safetensors and config.json. Tensors are
 * named transformer.wte.weight, transformer.wpe.weight,
 * transformer.h.{i}.{ln_1,attn.c_attn,attn.c_proj,ln_2,mlp.c_fc,mlp.c_proj}.{weight,bias}
 * and transformer.ln_f.{weight,bias}; the LM head is tied to wte and, as
 * transformers itself saves it, not stored. Linear layers are Conv1D there,
 * with weights [in, out]: the transpose of anvil's [out, in]. Per-layer
 * tensors are unstacked. */
#ifndef ANVIL_CKPT_HF_GPT2_H
#define ANVIL_CKPT_HF_GPT2_H

#include "ckpt/checkpoint.h"
#include "model/gpt2.h"

/* Writes DIR/model.safetensors (F32, metadata format=pt) and DIR/config.json
 * (GPT2Config: gelu_new, layer_norm_epsilon 1e-5, no dropout, bos/eos the
 * last vocabulary id, which is the end-of-text token of both anvil
 * tokenizers). Creates DIR if needed; each file is replaced atomically. */
int anvil_hf_export(const anvil_gpt2 *m, const char *dir);
/* anvil_hf_export, telling progress (may be NULL) the tensors converted of
 * all of them, then once more when the file is written. */
int anvil_hf_export_progress(const anvil_gpt2 *m, const char *dir, anvil_ckpt_progress_fn progress, void *ctx);

/* Reads DIR/config.json and DIR/model.safetensors, initializes m on backend k
 * and loads the weights. Accepts names with or without the "transformer."
 * prefix (the original gpt2 repository has none), F32, F16 or BF16 tensors,
 * and ignores the attention-mask buffers (attn.bias, attn.masked_bias) that
 * older files carry. A stored lm_head.weight must equal wte. Refuses
 * configurations anvil's model does not compute (another activation or
 * epsilon, n_inner != 4*n_embd, per-layer attention scaling) naming the field. */
int anvil_hf_import(const char *dir, const anvil_kernels *k, anvil_gpt2 *m);
/* anvil_hf_import, telling progress (may be NULL) the tensors converted of all the model's. */
int anvil_hf_import_progress(const char *dir, const anvil_kernels *k, anvil_gpt2 *m, anvil_ckpt_progress_fn progress,
                             void *ctx);

#endif
