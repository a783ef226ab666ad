/* Tensor parallelism (Megatron-LM's layout) over one process group, for any
 * model family: the split of every tensor comes from the model's parameter
 * table (model/model.h), and the passes are the model's own, computing
 * through the collectives this module gives it. For GPT-2:
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
 * buffers laid out tensor after tensor as the whole model's, with local
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
#include "model/model.h"

typedef struct anvil_tp anvil_tp;

/* A shard of cfg's model for this rank of group g, with zeroed parameters. cfg must pass
 * anvil_grid_check for the group's size. Returns NULL after anvil_fail. */
anvil_tp *anvil_tp_new(const anvil_model_config *cfg, const anvil_kernels *k, anvil_group *g);
/* Pipeline stages (src/dist/pipeline.h) are shards of a range of layers [l0, l1), with nslots
 * micro-batches' activations alive at once; the model's parameter table says which of the other
 * tensors a stage holds (model.h's anvil_place). anvil_tp_new is the stage of every layer with one
 * slot. */
anvil_tp *anvil_tp_new_stage(const anvil_model_config *cfg, const anvil_kernels *k, anvil_group *g, int l0, int l1,
                             int nslots);
void anvil_tp_free(anvil_tp *m);
/* The shard's model: its passes (anvil_model_forward_backward, the stage passes), its sequence
 * parallelism, its local layout (offsets[i] .. offsets[i+1] of the flat buffers is tensor i's share). */
anvil_model *anvil_tp_model(anvil_tp *m);
size_t anvil_tp_num_params(const anvil_tp *m);
const size_t *anvil_tp_offsets(const anvil_tp *m);
float *anvil_tp_params(anvil_tp *m);
float *anvil_tp_grads(anvil_tp *m);
/* Whether tensor i is split across the group (else every rank holds all of it). */
int anvil_tp_is_split(const anvil_tp *m, int i);

/* A whole buffer (parameters or a moment: the whole model's layout, n floats) and this rank's shard of
 * it (the local layout), both in backend memory: anvil_tp_shard takes the rank's part of full into
 * local. Returns 0 or -1 after anvil_fail. */
int anvil_tp_shard(anvil_tp *m, const float *full, float *local);
/* The way back, one tensor at a time, so that a rank never holds more than one whole tensor: the
 * group's shards of tensor i (local: the local layout of parameters, gradients or a moment, backend
 * memory) into whole, the whole tensor i in host memory. Collective over the group, except for a
 * replicated tensor or one the stage does not own, which need none. A stage writes only the tensors
 * it owns, and of a stacked per-layer tensor only its layers' rows; the rest of whole is left as it
 * was. 0 or -1 after anvil_fail. */
int anvil_tp_gather_tensor(anvil_tp *m, int i, const float *local, float *whole);

/* The blocks this rank saves of tensor i, for checkpoints in which every rank writes its own part: over
 * the ranks of the group and the stages, they cover each tensor once (a replicated tensor is saved by
 * rank 0 of the group, a tied one by the first stage). Block p is rows runs of cols elements, the first
 * at element `whole` of the whole tensor and each next one a row of the whole tensor (its last
 * dimension) further on; the block's local data is contiguous, rows * cols floats from element `local`
 * of the tensor's local shard. */
size_t anvil_tp_num_blocks(const anvil_tp *m, int i);
void anvil_tp_block(const anvil_tp *m, int i, size_t p, size_t *whole, size_t *local, size_t *rows, size_t *cols);

/* The same shard read piece by piece, so that no rank ever holds a whole tensor: read(ctx, i, off, n,
 * dst) puts elements [off, off + n) of the whole model's tensor i (a vocabulary table with its padding
 * rows) into host memory at dst, n at most 65536, and returns 0 or -1 after anvil_fail. Reads go
 * forward, by tensor and then offset. anvil_tp_fill writes them into local (parameters or a moment,
 * the local layout); anvil_tp_init_weights gives the parameters anvil_model_init_weights' values,
 * bit-identical to initializing the whole model and taking the shard. */
typedef int (*anvil_tp_read_fn)(void *ctx, int i, size_t off, size_t n, float *dst);
int anvil_tp_fill(anvil_tp *m, anvil_tp_read_fn read, void *ctx, float *local);
int anvil_tp_init_weights(anvil_tp *m, uint64_t seed);

/* The squared norm of the gradient of the model's (or stage's) tensors: split tensors summed over
 * the group, replicated ones counted once; a stage counts only the tensors it owns. Collective;
 * returns 0 or -1 after anvil_fail. */
int anvil_tp_grad_sumsq(anvil_tp *m, double *sumsq);
/* Whether this stage's gradient of tensor i is its to count in the model's norm (anvil_model_owns). */
int anvil_tp_owns(const anvil_tp *m, int i);
/* Bytes this rank has passed to the group's collectives so far: an all-reduce counts its buffer, an
 * all-gather what it assembles, a reduce-scatter what it reduces. */
uint64_t anvil_tp_bytes(const anvil_tp *m);

#endif
