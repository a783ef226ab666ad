/* Tensor parallelism (Megatron-LM's layout) of GPT-2 over one process group.
 *
 * Each of the group's tp ranks holds a slice of every layer:
 *   - QKV and the MLP's first matrix (fc) are column-parallel: a rank holds
 *     the output rows of its heads (NH/tp of them, q, k and v alike) and its
 *     4C/tp hidden units, with their biases;
 *   - the attention projection and the MLP's second matrix (fcproj) are
 *     row-parallel: a rank holds the input columns matching its slice, and
 *     each rank's product is a partial sum, completed by one all-reduce of
 *     B*T*C floats per block in the forward; the backward needs one more
 *     per block, on the gradient of the block's LayerNorm output;
 *   - wte is split by vocabulary rows. The embedding looks up in-shard tokens
 *     and contributes zero rows for the others, one all-reduce completing it;
 *     the LM head computes only the shard's logits, the log-sum-exps of the
 *     shards are all-gathered (tp*B*T floats) and the target logits
 *     all-reduced (B*T), so no rank ever holds a row's full logits; the
 *     LM head's input gradient is one more B*T*C all-reduce. The tied
 *     embedding and head use the same rows, so wte's gradient needs none.
 *   - LayerNorms, wpe and the biases of the row-parallel layers are
 *     replicated: every rank computes the same values and the same gradients.
 *
 * Parameters, gradients and the optimizer's moments live in flat local
 * buffers laid out tensor after tensor as in src/model/gpt2.h, with local
 * shapes, so the optimizer steps through them as it does through a whole
 * model. Per step (one forward and backward of N = B*T tokens) the group's
 * all-reduces carry (4*n_layer + 2)*N*C + N floats and the all-gather tp*N:
 * the 4*N*C per layer of Megatron plus the embedding and the head.
 *
 * Sequence parallelism (Megatron-LM's, optional) splits what lies outside
 * those regions by tokens: each rank holds and computes the residual stream,
 * the LayerNorms (their statistics) and the embedding's output for its
 * N/tp of the N tokens only, rank r the rows [r*N/tp, (r+1)*N/tp). Each
 * all-reduce above becomes a reduce-scatter over tokens where a row-parallel
 * product (or the embedding) enters the stream, and an all-gather goes
 * before each column-parallel matrix and the LM head; the backward runs the
 * duals. The LayerNorm outputs are kept gathered, as the matrices' weight
 * gradients read them. Per step: 8*n_layer + 4 collectives of N*C floats
 * (half of them all-gathers, half reduce-scatters), which on a ring move
 * what the 4*n_layer + 2 all-reduces of N*C move, plus one all-reduce of the
 * LayerNorms' weight gradients, each rank's covering its own rows. */
#ifndef ANVIL_DIST_TENSORPARALLEL_H
#define ANVIL_DIST_TENSORPARALLEL_H

#include <stddef.h>
#include <stdint.h>

#include "dist/comm.h"
#include "model/gpt2.h"

typedef struct anvil_tp anvil_tp;

/* A shard of cfg's model for this rank of group g, with zeroed parameters. cfg must pass
 * anvil_grid_check for the group's size. Returns NULL after anvil_fail. */
anvil_tp *anvil_tp_new(const anvil_gpt2_config *cfg, const anvil_kernels *k, anvil_group *g);
void anvil_tp_free(anvil_tp *m);

/* The local layout: offsets[i] .. offsets[i+1] of the flat buffers is tensor i's shard. */
size_t anvil_tp_num_params(const anvil_tp *m);
const size_t *anvil_tp_offsets(const anvil_tp *m);
float *anvil_tp_params(anvil_tp *m);
float *anvil_tp_grads(anvil_tp *m);
/* Whether tensor i is split across the group (else every rank holds all of it). */
int anvil_tp_is_split(int i);

/* A whole buffer (parameters or a moment: anvil_gpt2's layout, n floats) and this rank's shard of
 * it (the local layout), both in backend memory: anvil_tp_shard takes the rank's part of full into
 * local. Returns 0 or -1 after anvil_fail. */
int anvil_tp_shard(anvil_tp *m, const float *full, float *local);
/* The way back, one tensor at a time, so that a rank never holds more than one whole tensor: the
 * group's shards of tensor i (local: the local layout of parameters, gradients or a moment, backend
 * memory) into whole, the whole tensor i in host memory. Collective over the group, except for a
 * replicated tensor or one the stage does not own, which need none. A stage writes only the tensors
 * it owns (its layers, wte and wpe on the first stage, the final LayerNorm on the last), and of a
 * stacked per-layer tensor only its layers' rows; the rest of whole is left as it was.
 * 0 or -1 after anvil_fail. */
int anvil_tp_gather_tensor(anvil_tp *m, int i, const float *local, float *whole);

/* The same shard read piece by piece, so that no rank ever holds a whole tensor: read(ctx, i, off, n,
 * dst) puts elements [off, off + n) of the whole model's tensor i (anvil_gpt2's layout, wte with its
 * padding rows) into host memory at dst, n at most 65536, and returns 0 or -1 after anvil_fail.
 * Reads go forward, by tensor and then offset. anvil_tp_fill writes them into local (parameters or
 * a moment, the local layout); anvil_tp_init_weights gives the parameters anvil_gpt2_init_weights'
 * values, bit-identical to initializing the whole model and taking the shard. */
/* The blocks this rank saves of tensor i, for checkpoints in which every rank writes its own part: over
 * the ranks of the group and the stages, they cover each tensor once (a replicated tensor is saved by
 * rank 0 of the group, wte by the first stage). Block p is rows runs of cols elements, the first at
 * element `whole` of the whole tensor (anvil_gpt2's layout) and each next one a row of the whole
 * tensor (its last dimension) further on; the block's local data is contiguous, rows * cols floats
 * from element `local` of the tensor's local shard. */
size_t anvil_tp_num_blocks(const anvil_tp *m, int i);
void anvil_tp_block(const anvil_tp *m, int i, size_t p, size_t *whole, size_t *local, size_t *rows, size_t *cols);

typedef int (*anvil_tp_read_fn)(void *ctx, int i, size_t off, size_t n, float *dst);
int anvil_tp_fill(anvil_tp *m, anvil_tp_read_fn read, void *ctx, float *local);
int anvil_tp_init_weights(anvil_tp *m, uint64_t seed);

void anvil_tp_zero_grad(anvil_tp *m);
/* One training micro-step over B sequences of T tokens (the same on every rank of the group):
 * accumulates into the local gradients the gradient of mean_loss * grad_scale and sets *loss to the
 * mean loss. Collective. Returns 0 or -1 after anvil_fail. */
int anvil_tp_forward_backward(anvil_tp *m, const int32_t *inputs, const int32_t *targets, int B, int T,
                              float grad_scale, float *loss);
/* Pipeline stages (src/dist/pipeline.h) are shards of a range of layers, with several micro-batches'
 * activations ("slots") alive at once. A stage of layers [l0, l1) holds the embedding (wte, wpe)
 * when l0 = 0 and the final LayerNorm and the LM head (wte, tied) when l1 = n_layer; a tensor it does
 * not hold keeps its place in the layout with no elements. anvil_tp_new is the stage of every layer
 * with one slot. */
anvil_tp *anvil_tp_new_stage(const anvil_gpt2_config *cfg, const anvil_kernels *k, anvil_group *g, int l0, int l1,
                             int nslots);
/* Allocates the slots for micro-batches of B x T (a no-op when they are), so that a stage's input
 * can be received into anvil_tp_stage_input before its forward. Returns 0 or -1 after anvil_fail. */
int anvil_tp_stage_ready(anvil_tp *m, int B, int T);
/* A micro-batch's forward in slot: the first stage embeds inputs, the others start from what
 * anvil_tp_stage_input(slot) holds ([B,T,C], the previous stage's output); the stage's output is
 * then at anvil_tp_stage_output(slot), and the last stage sets *loss. Collective over the group. */
int anvil_tp_stage_forward(anvil_tp *m, int slot, const int32_t *inputs, const int32_t *targets, int B, int T,
                           float *loss);
/* Its backward, accumulating the gradient of mean_loss * grad_scale: the last stage starts from the
 * loss, the others from anvil_tp_stage_grad(slot) (the gradient of their output, received), which
 * then holds the gradient of the stage's input, for the previous stage. */
int anvil_tp_stage_backward(anvil_tp *m, int slot, float grad_scale);
float *anvil_tp_stage_input(anvil_tp *m, int slot);
float *anvil_tp_stage_output(anvil_tp *m, int slot);
float *anvil_tp_stage_grad(anvil_tp *m, int slot);

/* Evaluation: the mean loss only. Collective. */
int anvil_tp_forward(anvil_tp *m, const int32_t *inputs, const int32_t *targets, int B, int T, float *loss);
/* The squared norm of the gradient of the model's (or stage's) tensors: split tensors summed over
 * the group, replicated ones counted once; a stage counts wte and wpe on the first stage and lnf on
 * the last only. Collective; returns 0 or -1 after anvil_fail. */
int anvil_tp_grad_sumsq(anvil_tp *m, double *sumsq);
/* Whether this stage's gradient of tensor i is its to count in the model's norm: every layer's,
 * wte and wpe on the first stage only (the last holds the tied wte too), lnf on the last only. */
int anvil_tp_owns(const anvil_tp *m, int i);
/* Bytes this rank has passed to the group's collectives so far: an all-reduce counts its buffer, an
 * all-gather what it assembles, a reduce-scatter what it reduces. */
uint64_t anvil_tp_bytes(const anvil_tp *m);

/* Sequence parallelism on (on != 0, and the group has more than one rank) or off, for the steps that
 * follow: frees the activations, so call it before a step rather than between a forward and its
 * backward. A pipeline stage's input, output and their gradients are then its rows only: its neighbours'
 * ranks of the same TP index exchange them. */
void anvil_tp_set_sequence_parallel(anvil_tp *m, int on);
/* Whether micro-batches of B x T split evenly over tp ranks by tokens. One-line error; 0 or -1 after
 * anvil_fail. Steps with sequence parallelism check it before allocating. */
int anvil_tp_sp_check(int tp, int B, int T);
/* Floats of a stage's input, output and their gradients on this rank for the current micro-batch
 * shape (after anvil_tp_stage_ready): B*T*C, or this rank's rows' share under sequence parallelism. */
size_t anvil_tp_stage_floats(const anvil_tp *m);
/* Bytes of the activation buffers (every slot's and the scratch) allocated for the current micro-batch
 * shape. */
size_t anvil_tp_activation_bytes(const anvil_tp *m);

#endif
