/* Llama, for the files of src/model/llama alone: the parameter table's
 * indices, the decoder block shared by every pass, and the passes behind the
 * family's table (llama_family.c). Everything else reaches Llama through
 * model/model.h.
 *
 * The model, as Hugging Face's LlamaForCausalLM computes it: a token
 * embedding, n_layer pre-norm blocks (RMSNorm; grouped-query attention with
 * RoPE on q and k in the rotate-half layout; RMSNorm; a SwiGLU MLP,
 * down(silu(gate(x)) * up(x))), a final RMSNorm and the LM head, its own
 * matrix or the embedding (tied). No biases, no position table.
 *
 * q, k and v are three tensors (Hugging Face's q_proj, k_proj, v_proj, which
 * tensor parallelism splits by heads alike), as are gate and up. The kernels
 * want one product of each group: attention reads packed rows of NH query,
 * NKV key and NKV value heads, SwiGLU rows of [gate | up]. So a block copies
 * the group's weights into one matrix before its product, and for the
 * backward copies their gradients in, accumulates, and copies them back:
 * O(weights) of copying against O(tokens x weights) of multiplying. */
#ifndef ANVIL_MODEL_LLAMA_LLAMA_H
#define ANVIL_MODEL_LLAMA_LLAMA_H

#include <stddef.h>
#include <stdint.h>

#include "model/family.h"

extern const anvil_model_family anvil_llama_family;

/* The parameter table's order; the per-layer tensors are ATTN_NORM..WDOWN. Tied models have no HEAD. */
enum {
    LLAMA_EMBED,
    LLAMA_ATTN_NORM,
    LLAMA_WQ,
    LLAMA_WK,
    LLAMA_WV,
    LLAMA_WO,
    LLAMA_MLP_NORM,
    LLAMA_WGATE,
    LLAMA_WUP,
    LLAMA_WDOWN,
    LLAMA_NORM,
    LLAMA_HEAD,
    LLAMA_NPARAM
};

/* The LM head's tensor: the embedding when tied. */
static inline int llama_head(const anvil_model_config *c) { return c->tied ? LLAMA_EMBED : LLAMA_HEAD; }
static inline int llama_hs(const anvil_model_config *c) { return c->n_embd / c->n_head; }
/* RoPE's table [P, hs] for positions 0..P-1 into backend memory at dst; -1 after anvil_fail. */
int llama_rope_upload(const anvil_kernels *k, const anvil_model_config *c, float *dst, int P);

/* The collectives of a tensor-parallel block, as gpt2.h's gpt2_reduce: NULL for the whole model's block
 * (the projections accumulate into the residual stream); with comm, the row-parallel products (o and
 * down) are partial sums completed by reduce, and the backward reduces each RMSNorm output's gradient.
 * With sequence parallelism (sp) the residual stream, the norms' inputs, rstds and gradients hold this
 * rank's `rows` of the N tokens: gather before q/k/v and gate/up, scatter after o and down, and the
 * duals in the backward; the norm outputs stay gathered, [N,C], and the norms' weight gradients are
 * this rank's rows' share, which the caller sums over the group. */
typedef struct {
    const anvil_model_comm *comm;
    int sp;
    int rows;
} llama_reduce;

/* One block's widths at a shard: NHs query and NKVs key/value heads of hs channels, Hs hidden units (the
 * whole model's with tp 1). rope is the table [T, hs] in backend memory. */
typedef struct {
    int B, T, C;
    int NHs, NKVs, hs, Hs;
    float eps;
    const float *rope;
} llama_block_shape;

static inline int llama_qkv_width(const llama_block_shape *s) { return (s->NHs + 2 * s->NKVs) * s->hs; }

/* One layer's saved activations: its input res [N,C] (rows under sequence parallelism), the attention
 * norm's output ln1 [N,C] and rstd, qkv [N,(NHs+2NKVs)hs] after RoPE, the attention's output atty
 * [N,NHs*hs] and lse [B,NHs,T], the stream after attention res2, the MLP norm's ln2 and rstd, the MLP's
 * [gate | up] rows gu [N,2Hs], and its output. */
typedef struct {
    float *res, *ln1, *ln1_rstd, *qkv, *atty, *lse, *res2, *ln2, *ln2_rstd, *gu, *out;
} llama_layer_acts;

/* Scratch the blocks use and leave: the packed weights wqkv [(NHs+2NKVs)hs, C] and wgu [2Hs, C], dw for
 * either's gradient, sw and dsw [N,Hs] (SwiGLU's output, recomputed in the backward, and its gradient),
 * dgu [N,2Hs], dln [N,C], datty [N,NHs*hs], dqkv like qkv, and partial [N,C] (with a reduce hook only). */
typedef struct {
    float *wqkv, *wgu, *dw, *sw, *dsw, *dgu, *dln, *datty, *dqkv, *partial;
} llama_block_scratch;

int llama_block_forward(const anvil_kernels *k, const llama_block_shape *s, const anvil_model_view *w,
                        const llama_layer_acts *a, const llama_block_scratch *x, const llama_reduce *r);
/* Its backward: dres holds the gradient of the block's output and is left holding that of its input;
 * the weights' gradients accumulate (+=) into g. */
int llama_block_backward(const anvil_kernels *k, const llama_block_shape *s, const anvil_model_view *w,
                         const anvil_model_view *g, const llama_layer_acts *a, float *dres,
                         const llama_block_scratch *x, const llama_reduce *r);

/* The passes (llama_pass.c: a whole model; llama_shard.c: a tensor-parallel shard or pipeline stage;
 * llama_decode.c: decoding), as the family table wants them. */
int llama_forward(anvil_model *m, const int32_t *inputs, const int32_t *targets, int B, int T, float *loss);
int llama_forward_backward(anvil_model *m, const int32_t *inputs, const int32_t *targets, int B, int T,
                           float grad_scale, float *loss);
int llama_logits(anvil_model *m, float *out);
size_t llama_whole_activation_bytes(const anvil_model *m);
void llama_acts_free(anvil_model *m);

int llama_stage_ready(anvil_model *m, int B, int T);
int llama_stage_forward(anvil_model *m, int slot, const int32_t *inputs, const int32_t *targets, int B, int T,
                        float *loss);
int llama_stage_backward(anvil_model *m, int slot, float grad_scale);
float *llama_stage_input(anvil_model *m, int slot);
float *llama_stage_output(anvil_model *m, int slot);
float *llama_stage_grad(anvil_model *m, int slot);
size_t llama_stage_floats(const anvil_model *m);
size_t llama_activation_bytes(const anvil_model *m);
void llama_shard_acts_free(anvil_model *m);

anvil_model_cache *llama_cache_new(const anvil_model *m);
void llama_cache_free(anvil_model_cache *c);
int llama_decode(anvil_model *m, anvil_model_cache *c, int32_t token, int pos, float *logits);

#endif
