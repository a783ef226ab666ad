/* GPT-2: configuration, parameters, activations, and the forward and
 * backward passes, written against the kernel interface (kernels/kernels.h)
 * so the same code drives any backend.
 *
 * Parameters live in one contiguous buffer, tensor after tensor in the
 * order of anvil_gpt2_param_names; gradients and the optimizer moments
 * mirror it. That makes the optimizer, the gradient norm, gradient
 * averaging across ranks and checkpointing each a single flat loop or
 * write. Per-layer tensors are stacked along a leading n_layer dimension.
 * Linear weights are [out, in], as in PyTorch's nn.Linear. */
#ifndef ANVIL_MODEL_GPT2_H
#define ANVIL_MODEL_GPT2_H

#include <stddef.h>
#include <stdint.h>

#include "core/rng.h"
#include "kernels/kernels.h"

typedef struct {
    int n_layer;
    int n_head;
    int n_embd;
    int block_size;  /* maximum sequence length (rows of wpe) */
    int vocab_size;  /* real vocabulary */
    int padded_vocab; /* vocab_size rounded up to a multiple of 64; the extra rows stay zero */
} anvil_gpt2_config;

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

extern const char *const anvil_gpt2_param_names[ANVIL_GPT2_NPARAM];

/* Fills cfg from a preset name ("gpt2", "gpt2-medium", "gpt2-large", "gpt2-xl", "tiny", "mini",
 * "small"); vocab_size and block_size keep the preset's values until overridden. */
int anvil_gpt2_preset(const char *name, anvil_gpt2_config *cfg);
/* Checks the numbers and sets padded_vocab. One-line error naming the bad field. */
int anvil_gpt2_config_check(anvil_gpt2_config *cfg);
/* Whether batches of B sequences of T tokens fit the model: T within the block size, and the
 * widest activation (B*T rows of 4C) small enough for the kernels' int element counts. */
int anvil_gpt2_batch_check(const anvil_gpt2_config *cfg, int B, int T);
/* The shape of parameter tensor i: up to 3 dims. */
int anvil_gpt2_param_shape(const anvil_gpt2_config *cfg, int i, int64_t shape[3]);
/* The elements of tensor i: the product of its shape (wte with its padding rows). */
size_t anvil_gpt2_param_numel(const anvil_gpt2_config *cfg, int i);
/* Whether AdamW decays tensor i: matrices and embeddings yes, biases and LayerNorm no. */
int anvil_gpt2_param_decays(int i);
size_t anvil_gpt2_num_params(const anvil_gpt2_config *cfg); /* incl. padding rows of wte */
/* Parameters that count toward model FLOPs: excludes wpe (a lookup) and the padding rows;
 * wte counts once, as the LM head. */
size_t anvil_gpt2_flop_params(const anvil_gpt2_config *cfg);
/* Training FLOPs per token at sequence length T, as PaLM's appendix B: 6N + 12*L*C*T. */
double anvil_gpt2_flops_per_token(const anvil_gpt2_config *cfg, int T);

/* Units: the pieces in which parameters are gathered, released and reduced
 * when they are sharded across processes (src/dist/dataparallel.h). Unit 0 is
 * the head: wte, wpe, lnfw and lnfb, needed at both ends of a pass because
 * wte is also the LM head. Unit 1+l is layer l: its slice of each of the 12
 * stacked per-layer tensors. A unit's packed form is its slices laid end to
 * end in tensor order. */
typedef struct {
    int tensor;    /* P_* */
    size_t offset; /* into the flat parameter buffer, in floats */
    size_t len;
} anvil_gpt2_range;

int anvil_gpt2_num_units(const anvil_gpt2_config *cfg); /* n_layer + 1 */

/* Where one unit's tensors are: t[i] is the unit's slice of tensor i, NULL
 * for tensors outside the unit. */
typedef struct {
    float *t[ANVIL_GPT2_NPARAM];
} anvil_gpt2_view;

/* Who supplies parameters and receives gradients. Without hooks the passes
 * read m->params and accumulate into m->grads. With them, every unit is
 * fetched right before use and handed back right after, in this order:
 * forward: get_params(0), then get/put_params(1+l) for each layer in turn;
 * backward: get_grads(0), then for l from the last layer down
 * get_params(1+l), get_grads(1+l), put_grads(1+l), put_params(1+l); finally
 * put_grads(0) and put_params(0). Gradients accumulate (+=) into the views.
 * put_grads means the unit's gradients of this micro-step are final, which
 * is when data parallelism can start reducing them. Evaluation forwards
 * end with put_params(0). Each callback returns 0, or -1 after anvil_fail. */
typedef struct {
    void *ctx;
    int (*get_params)(void *ctx, int unit, anvil_gpt2_view *v);
    int (*put_params)(void *ctx, int unit);
    int (*get_grads)(void *ctx, int unit, anvil_gpt2_view *v);
    int (*put_grads)(void *ctx, int unit);
} anvil_gpt2_hooks;

typedef struct {
    anvil_gpt2_config cfg;
    const anvil_kernels *k;
    const anvil_gpt2_hooks *hooks; /* NULL: the flat buffers */
    size_t nparams;
    size_t offsets[ANVIL_GPT2_NPARAM + 1]; /* in floats, into params/grads */
    float *params;
    float *grads; /* allocated on the first training step */
    int B, T;     /* activation shape currently allocated (0 = none) */
    struct gpt2_acts *acts;
} anvil_gpt2;

int anvil_gpt2_init(anvil_gpt2 *m, const anvil_gpt2_config *cfg, const anvil_kernels *k);
/* The same without the parameters (m->params NULL): the layout, for a process that holds only a shard
 * of the model (tensor and pipeline parallelism). */
int anvil_gpt2_init_layout(anvil_gpt2 *m, const anvil_gpt2_config *cfg, const anvil_kernels *k);
void anvil_gpt2_free(anvil_gpt2 *m);
/* m's configuration, kernels and layout with the weights at params, and no hooks, gradients or
 * activations: a model to read whole weights from (decoding, saving) when m's own are sharded or
 * served through hooks. It owns nothing and is never freed; the forward passes would allocate
 * activations in it, so it is not for them. */
anvil_gpt2 anvil_gpt2_with_params(const anvil_gpt2 *m, float *params);
/* nanoGPT's initialization, from a seed: N(0, 0.02) for matrices and embeddings, residual projections
 * scaled by 1/sqrt(2*n_layer), zero biases, unit LayerNorm. Same seed, same weights. */
void anvil_gpt2_init_weights(anvil_gpt2 *m, uint64_t seed);
/* anvil_gpt2_init_weights' values read piece by piece into host memory, for a process that keeps
 * only some of them: elements [off, off + n) of tensor i (anvil_gpt2's layout, wte with its padding
 * rows). Reads go forward (by tensor, then offset); what they skip still advances the RNG, so every
 * piece is bit-identical to the same piece of a whole initialization, and nothing the size of the
 * model is held. 0, or -1 after anvil_fail for a read that goes back. */
typedef struct {
    anvil_gpt2_config cfg;
    anvil_rng rng;
    int tensor;
    size_t pos;
} anvil_gpt2_init_stream;
void anvil_gpt2_init_stream_start(anvil_gpt2_init_stream *s, const anvil_gpt2_config *cfg, uint64_t seed);
int anvil_gpt2_init_stream_read(anvil_gpt2_init_stream *s, int i, size_t off, size_t n, float *dst);
float *anvil_gpt2_param(const anvil_gpt2 *m, int i, float *base); /* tensor i within params/grads */
/* Unit u's slices in packed order into r (room for ANVIL_GPT2_NPARAM); returns how many. */
int anvil_gpt2_unit_ranges(const anvil_gpt2 *m, int u, anvil_gpt2_range *r);
size_t anvil_gpt2_unit_size(const anvil_gpt2 *m, int u);
/* Views of unit u within a flat buffer laid out like m->params, or within a packed unit buffer. */
void anvil_gpt2_view_flat(const anvil_gpt2 *m, int u, float *base, anvil_gpt2_view *v);
void anvil_gpt2_view_packed(const anvil_gpt2 *m, int u, float *packed, anvil_gpt2_view *v);

/* One transformer block, shared by the whole model and its tensor-parallel shards
 * (dist/tensorparallel.h): the same kernel calls in the same order, at the widths of the rank's share
 * of the heads (Cs = C / tp columns of attention, NHs heads, 4 * Cs hidden units). The weights and
 * gradients are views of the layer (anvil_gpt2_view, per-layer tensors at the shard's shapes).
 *
 * Without a reduce hook the attention and MLP projections accumulate straight into the residual
 * stream. With one, their products are partial sums (row-parallel: the projection's bias is added by
 * whoever the view gives it to, NULL elsewhere) completed by reduce into x->partial, then added; the
 * backward reduces the gradient of each LayerNorm's output the same way. reduce returns 0, or -1
 * after anvil_fail, and is told what it reduces. */
typedef struct {
    void *ctx;
    int (*reduce)(void *ctx, float *buf, size_t n, const char *what);
    /* Sequence parallelism (gather and scatter both set, reduce unused): the residual stream, the
     * LayerNorms' inputs, statistics and gradients (res, res2, out, the means and rstds, dres) hold
     * only this rank's `rows` of the N tokens, consecutive from rank * rows. gather puts every rank's
     * rows [rows,C] (local) together into full [N,C]; scatter sums full [N,C] over the group and leaves
     * this rank's rows in local. The LayerNorm outputs ln1 and ln2 are kept gathered, [N,C], for the
     * weights' gradients. The LayerNorms' weight gradients are then this rank's rows' share only: the
     * caller sums them over the group. */
    int (*gather)(void *ctx, const float *local, float *full, size_t n_local, const char *what);
    int (*scatter)(void *ctx, const float *full, float *local, size_t n_local, const char *what);
    int rows;
} anvil_gpt2_reduce;

typedef struct {
    int B, T, C;
    int Cs, NHs; /* the share: C and n_head for the whole model */
} anvil_gpt2_block_shape;

/* One layer's saved activations: its input res [N,C] and what its backward reads, and its output. */
typedef struct {
    float *res, *ln1, *ln1_mean, *ln1_rstd, *qkv, *atty, *lse, *res2, *ln2, *ln2_mean, *ln2_rstd, *fch, *out;
} anvil_gpt2_layer_acts;

/* Scratch the blocks use and leave: gelu and dfch [N,4Cs], dln [N,C], datty [N,Cs], dqkv [N,3Cs], and
 * partial [N,C] (with a reduce hook only; under sequence parallelism it also holds the gathered
 * gradient of the residual stream and the scattered one of a LayerNorm output). */
typedef struct {
    float *gelu, *dfch, *dln, *datty, *dqkv, *partial;
} anvil_gpt2_block_scratch;

int anvil_gpt2_block_forward(const anvil_kernels *k, const anvil_gpt2_block_shape *s, const anvil_gpt2_view *w,
                             const anvil_gpt2_layer_acts *a, const anvil_gpt2_block_scratch *x,
                             const anvil_gpt2_reduce *r);
/* Its backward: dres holds the gradient of the block's output and is left holding that of its input;
 * the weights' gradients accumulate (+=) into g. */
int anvil_gpt2_block_backward(const anvil_kernels *k, const anvil_gpt2_block_shape *s, const anvil_gpt2_view *w,
                              const anvil_gpt2_view *g, const anvil_gpt2_layer_acts *a, float *dres,
                              const anvil_gpt2_block_scratch *x, const anvil_gpt2_reduce *r);

/* Evaluation forward over B sequences of T tokens (T <= block_size). With targets, *loss gets the
 * mean loss over positions whose target is >= 0 (targets and loss may be NULL). Keeps the final
 * hidden states for anvil_gpt2_logits. Returns 0, or -1 after anvil_fail (bad shape or token id,
 * allocation failure). */
int anvil_gpt2_forward(anvil_gpt2 *m, const int32_t *inputs, const int32_t *targets, int B, int T, float *loss);
/* One training micro-step: forward, the fused LM head + cross-entropy, and backward. Accumulates
 * (+=) into m->grads the gradient of mean_loss * grad_scale (grad_scale = 1/accumulation_steps),
 * and sets *loss to the mean loss. Returns 0 or -1 after anvil_fail. */
int anvil_gpt2_forward_backward(anvil_gpt2 *m, const int32_t *inputs, const int32_t *targets, int B, int T,
                                float grad_scale, float *loss);
void anvil_gpt2_zero_grad(anvil_gpt2 *m);
/* Full logits [B,T,padded_vocab] of the last forward, into backend memory: recomputes the LM head. */
int anvil_gpt2_logits(anvil_gpt2 *m, float *out);

/* Incremental decoding with a key/value cache: feeding the token at position pos (0-based,
 * consecutive from 0) costs O(pos) attention work, not O(pos^2). Reads m->params directly, whatever
 * the hooks. */
typedef struct anvil_gpt2_cache anvil_gpt2_cache;
anvil_gpt2_cache *anvil_gpt2_cache_new(const anvil_gpt2 *m);
void anvil_gpt2_cache_free(anvil_gpt2_cache *c);
/* Writes logits[padded_vocab] for the next token. */
int anvil_gpt2_decode(anvil_gpt2 *m, anvil_gpt2_cache *c, int32_t token, int pos, float *logits);

#endif
