/* GPT-2, for the files of src/model/gpt2 alone: the parameter table's
 * indices, the transformer block shared by every pass, and the passes behind
 * the family's table (gpt2_family.c). Everything else reaches GPT-2 through
 * model/model.h.
 *
 * The model: token and position embeddings, n_layer pre-LayerNorm blocks
 * (causal multi-head attention; an MLP of width 4C with the tanh GELU), a
 * final LayerNorm, and the LM head tied to the token embedding. Biases
 * everywhere, LayerNorm epsilon 1e-5. */
#ifndef ANVIL_MODEL_GPT2_GPT2_H
#define ANVIL_MODEL_GPT2_GPT2_H

#include <stddef.h>
#include <stdint.h>

#include "model/family.h"

extern const anvil_model_family anvil_gpt2_family;

#define ANVIL_GPT2_NPARAM 16

enum {
    ANVIL_GPT2_WTE,
    ANVIL_GPT2_WPE,
    ANVIL_GPT2_LN1W,
    ANVIL_GPT2_LN1B,
    ANVIL_GPT2_QKVW,
    ANVIL_GPT2_QKVB,
    ANVIL_GPT2_ATTPROJW,
    ANVIL_GPT2_ATTPROJB,
    ANVIL_GPT2_LN2W,
    ANVIL_GPT2_LN2B,
    ANVIL_GPT2_FCW,
    ANVIL_GPT2_FCB,
    ANVIL_GPT2_FCPROJW,
    ANVIL_GPT2_FCPROJB,
    ANVIL_GPT2_LNFW,
    ANVIL_GPT2_LNFB
};

/* One transformer block, shared by the whole model and its tensor-parallel shards: the same kernel
 * calls in the same order, at the widths of the rank's share of the heads (Cs = C / tp columns of
 * attention, NHs heads, 4 * Cs hidden units). The weights and gradients are views of the layer
 * (per-layer tensors at the shard's shapes).
 *
 * Without a reduce hook the attention and MLP projections accumulate straight into the residual
 * stream. With one, their products are partial sums (row-parallel: the projection's bias is added by
 * whoever the view gives it to, NULL elsewhere) completed by reduce into x->partial, then added; the
 * backward reduces the gradient of each LayerNorm's output the same way.
 *
 * Sequence parallelism (gather and scatter used, reduce not): the residual stream, the LayerNorms'
 * inputs, statistics and gradients (res, res2, out, the means and rstds, dres) hold only this rank's
 * `rows` of the N tokens, consecutive from rank * rows. gather puts every rank's rows together before
 * QKV and the MLP's first matrix; scatter sums a row-parallel product over the group and leaves this
 * rank's rows. The LayerNorm outputs ln1 and ln2 are kept gathered, [N,C], for the weights'
 * gradients. The LayerNorms' weight gradients are then this rank's rows' share only: the caller sums
 * them over the group. */
typedef struct {
    const anvil_model_comm *comm; /* NULL: the whole model's block */
    int sp;
    int rows;
} gpt2_reduce;

typedef struct {
    int B, T, C;
    int Cs, NHs; /* the share: C and n_head for the whole model */
} gpt2_block_shape;

/* One layer's saved activations: its input res [N,C] and what its backward reads, and its output. */
typedef struct {
    float *res, *ln1, *ln1_mean, *ln1_rstd, *qkv, *atty, *lse, *res2, *ln2, *ln2_mean, *ln2_rstd, *fch, *out;
} gpt2_layer_acts;

/* Scratch the blocks use and leave: gelu and dfch [N,4Cs], dln [N,C], datty [N,Cs], dqkv [N,3Cs], and
 * partial [N,C] (with a reduce hook only; under sequence parallelism it also holds the gathered
 * gradient of the residual stream and the scattered one of a LayerNorm output). */
typedef struct {
    float *gelu, *dfch, *dln, *datty, *dqkv, *partial;
} gpt2_block_scratch;

int gpt2_block_forward(const anvil_kernels *k, const gpt2_block_shape *s, const anvil_model_view *w,
                       const gpt2_layer_acts *a, const gpt2_block_scratch *x, const gpt2_reduce *r);
/* Its backward: dres holds the gradient of the block's output and is left holding that of its input;
 * the weights' gradients accumulate (+=) into g. */
int gpt2_block_backward(const anvil_kernels *k, const gpt2_block_shape *s, const anvil_model_view *w,
                        const anvil_model_view *g, const gpt2_layer_acts *a, float *dres, const gpt2_block_scratch *x,
                        const gpt2_reduce *r);

/* The passes (gpt2_pass.c: a whole model; gpt2_shard.c: a tensor-parallel shard or pipeline stage;
 * gpt2_decode.c: decoding), as the family table wants them. */
int gpt2_forward(anvil_model *m, const int32_t *inputs, const int32_t *targets, int B, int T, float *loss);
int gpt2_forward_backward(anvil_model *m, const int32_t *inputs, const int32_t *targets, int B, int T,
                          float grad_scale, float *loss);
int gpt2_logits(anvil_model *m, float *out);
void gpt2_acts_free(anvil_model *m);

int gpt2_shard_forward(anvil_model *m, const int32_t *inputs, const int32_t *targets, int B, int T, float *loss);
int gpt2_shard_forward_backward(anvil_model *m, const int32_t *inputs, const int32_t *targets, int B, int T,
                                float grad_scale, float *loss);
int gpt2_stage_ready(anvil_model *m, int B, int T);
int gpt2_stage_forward(anvil_model *m, int slot, const int32_t *inputs, const int32_t *targets, int B, int T,
                       float *loss);
int gpt2_stage_backward(anvil_model *m, int slot, float grad_scale);
float *gpt2_stage_input(anvil_model *m, int slot);
float *gpt2_stage_output(anvil_model *m, int slot);
float *gpt2_stage_grad(anvil_model *m, int slot);
size_t gpt2_stage_floats(const anvil_model *m);
size_t gpt2_activation_bytes(const anvil_model *m);
void gpt2_shard_acts_free(anvil_model *m);

anvil_model_cache *gpt2_cache_new(const anvil_model *m);
void gpt2_cache_free(anvil_model_cache *c);
int gpt2_decode(anvil_model *m, anvil_model_cache *c, int32_t token, int pos, float *logits);

#endif
