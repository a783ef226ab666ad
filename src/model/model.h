/* The model interface: everything above src/model knows of a model through
 * this header, whatever its family.
 *
 * A family (GPT-2, ...) is a table of operations and a parameter table
 * (src/model/family.h says how to write one); a small registry finds it by
 * name. A configuration names its family; the parameter table says, for every
 * tensor, its name and shape, whether AdamW decays it, how tensor parallelism
 * splits it, which pipeline stage holds it, its Hugging Face name and layout,
 * and how it is initialized. From that table alone this module derives the
 * flat layout, the units that data parallelism gathers and reduces, the
 * local layout of a tensor-parallel or pipeline shard, and the initialization
 * stream, so src/dist, src/ckpt and src/train need no knowledge of any family.
 *
 * Parameters live in one contiguous buffer, tensor after tensor in table
 * order; gradients and the optimizer moments mirror it. Per-layer tensors are
 * stacked along a leading n_layer dimension. Linear weights are [out, in], as
 * in PyTorch's nn.Linear. A vocabulary table's rows are padded to
 * padded_vocab; the padding rows stay zero and files leave them out. */
#ifndef ANVIL_MODEL_MODEL_H
#define ANVIL_MODEL_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "core/rng.h"
#include "kernels/kernels.h"

#define ANVIL_MODEL_MAX_TENSORS 24

typedef struct anvil_model_family anvil_model_family;

/* RoPE's frequency scaling (Llama 3.1's "llama3" type); none for the others. */
typedef struct {
    int llama3;
    float factor, low_freq_factor, high_freq_factor;
    int original_max_position;
} anvil_rope_scaling;

/* A model's shape. Each family documents which fields it reads; the others stay 0. */
typedef struct {
    const anvil_model_family *family;
    int n_layer;
    int n_head;
    int n_kv_head;    /* key/value heads (grouped-query attention); n_head where a family has no GQA */
    int n_embd;
    int ffn_hidden;   /* the MLP's hidden width (Llama: 0 until the check derives it by ffn_multiplier/_multiple_of) */
    float ffn_multiplier; /* Llama's rule for the hidden width: ffn_dim_multiplier (0: none) ... */
    int ffn_multiple_of;  /* ... and multiple_of; neither is recorded, ffn_hidden is */
    int block_size;   /* maximum sequence length */
    int vocab_size;   /* real vocabulary */
    int padded_vocab; /* vocab_size rounded up to a multiple of 64; the extra rows stay zero */
    int tied;         /* the LM head is the token embedding */
    float norm_eps;
    float rope_theta;
    anvil_rope_scaling rope_scaling;
} anvil_model_config;

/* How tensor parallelism splits a tensor over the ranks of a group (Megatron-LM's layout). */
typedef enum {
    ANVIL_SPLIT_NONE,   /* replicated: every rank holds all of it */
    ANVIL_SPLIT_COLUMN, /* column-parallel: output rows (of each of split_groups row blocks) */
    ANVIL_SPLIT_ROW,    /* row-parallel: input columns */
    ANVIL_SPLIT_VOCAB,  /* a vocabulary table's rows */
} anvil_split;

/* Which pipeline stages hold a tensor. */
typedef enum {
    ANVIL_PLACE_LAYER, /* a per-layer tensor: the stage of each layer holds its rows */
    ANVIL_PLACE_FIRST, /* the embedding stage */
    ANVIL_PLACE_LAST,  /* the stage with the final norm and the loss */
    ANVIL_PLACE_TIED,  /* both (the tied embedding and LM head); the first stage's copy is the owner */
} anvil_place;

/* A parameter tensor's layout in a Hugging Face checkpoint, against anvil's. */
typedef enum { ANVIL_HF_AS_IS, ANVIL_HF_TRANSPOSE } anvil_hf_layout;

typedef struct {
    const char *name; /* anvil's name, also in files: "wte", "qkvw" */
    int ndim;
    int64_t shape[3]; /* the whole model's; a per-layer tensor's shape[0] is n_layer */
    anvil_place place;
    int decays;       /* AdamW's weight decay applies */
    anvil_split split;
    int split_groups; /* a column split cuts each of this many blocks of rows alike (q, k and v: 3) */
    int vocab_rows;   /* shape[0] is padded_vocab: rows from vocab_size on are padding */
    /* Initialization: N(0, init_std) where init_std > 0 (a vocabulary table's real rows only), else
     * every element init_value. */
    float init_std, init_value;
    /* The Hugging Face name, a format with %d for the layer of a per-layer tensor (NULL: none), and
     * its layout there. */
    const char *hf_name;
    anvil_hf_layout hf_layout;
} anvil_tensor_info;

/* ---- families and configurations ---- */

/* The family of that name ("gpt2"), or NULL after anvil_fail naming the known ones. */
const anvil_model_family *anvil_model_family_named(const char *name);
/* The family's name, and the presets it knows (a comma-separated list, for messages). */
const char *anvil_model_family_name(const anvil_model_family *f);
const char *anvil_model_family_presets(const anvil_model_family *f);
/* Fills cfg from a preset of any family ("gpt2", "mini", ...); vocab_size and block_size keep the
 * preset's values until overridden. One-line error listing the presets. */
int anvil_model_preset(const char *name, anvil_model_config *cfg);
/* The presets of every family, in order: name i into *name, and its family; 0 past the last. */
int anvil_model_preset_at(int i, const char **name, const anvil_model_family **family);
/* Checks the numbers and sets the derived fields (padded_vocab, and what the family derives). One-line
 * error naming the bad field. */
int anvil_model_config_check(anvil_model_config *cfg);
/* Whether batches of B sequences of T tokens fit the model: T within the block size, and the widest
 * activation small enough for the kernels' int element counts. */
int anvil_model_batch_check(const anvil_model_config *cfg, int B, int T);
/* Whether a tensor-parallel group of tp ranks can split the model: the split widths (heads, key/value
 * heads, the MLP's width, the padded vocabulary) divisible by tp. One-line error. */
int anvil_model_tp_check(const anvil_model_config *cfg, int tp);

/* The configuration as named fields, for files (checkpoint manifests, model-file metadata): field i
 * of the family's list (0 past the last) with its key and value as text (an int in decimal, a float in
 * the fewest digits that read back the same), and in *is_float (may be NULL) whether it is a float and
 * in *min (may be NULL) the least value an int one may take. */
int anvil_model_config_field(const anvil_model_config *cfg, int i, const char **key, char *value, size_t cap,
                             int *is_float, int *min);
/* Sets the field of that key from text; -1 after anvil_fail for an unknown key or a bad value. */
int anvil_model_config_set(anvil_model_config *cfg, const char *key, const char *value);
/* The name of the model-file format the family writes ("anvil-gpt2"), and the family of a format. */
const char *anvil_model_file_format(const anvil_model_family *f);
const anvil_model_family *anvil_model_family_of_format(const char *format);

/* Hugging Face: the family whose config.json says this model_type (NULL after anvil_fail naming the
 * known ones), its architecture ("GPT2LMHeadModel"), config.json's text for cfg and ids (free with cJSON_free;
 * NULL when out of memory), and cfg from a parsed config.json, refusing what the family does not compute
 * with one line naming path and the field. On import, names may lack the family's prefix, buffers that
 * are no parameters are ignorable, and with tied embeddings a stored LM head (tied_head, NULL: none)
 * must equal the embedding. */
struct cJSON;
const anvil_model_family *anvil_model_hf_family(const char *model_type);
const char *anvil_model_hf_architecture(const anvil_model_family *f);
/* The tokenizer's ids that config.json names (bos_token_id, eos_token_id), -1 where it has none; a NULL
 * anvil_model_special_ids means they are not known and the family writes its default (GPT-2's files
 * name the last id, Llama's say null). */
typedef struct {
    int32_t bos, eos;
} anvil_model_special_ids;
char *anvil_model_hf_config(const anvil_model_config *cfg, const anvil_model_special_ids *ids);
int anvil_model_hf_config_read(const anvil_model_family *f, const struct cJSON *root, const char *path,
                               anvil_model_config *cfg);
const char *anvil_model_hf_prefix(const anvil_model_family *f);
int anvil_model_hf_ignorable(const anvil_model_family *f, const char *name);
const char *anvil_model_hf_tied_head(const anvil_model_family *f);

/* The parameter table: tensor i of ntensors. */
int anvil_model_ntensors(const anvil_model_config *cfg);
void anvil_model_tensor(const anvil_model_config *cfg, int i, anvil_tensor_info *out);
/* The elements of tensor i: the product of its shape (a vocabulary table with its padding rows). */
size_t anvil_model_tensor_numel(const anvil_model_config *cfg, int i);
/* The length of a row of tensor i: its last dimension. */
size_t anvil_model_tensor_row(const anvil_model_config *cfg, int i);
/* The index of the tensor named name, or -1. */
int anvil_model_tensor_index(const anvil_model_config *cfg, const char *name);
int anvil_model_tensor_decays(const anvil_model_config *cfg, int i);
/* Every tensor's decays flag, into out (ANVIL_MODEL_MAX_TENSORS entries): what an optimizer of the whole
 * layout (optim.h's anvil_adamw_init_whole) takes. */
void anvil_model_decays(const anvil_model_config *cfg, int *out);
size_t anvil_model_num_params(const anvil_model_config *cfg); /* incl. padding rows */
/* Parameters that count toward model FLOPs: no lookup tables (position embeddings), no padding rows, a
 * tied embedding once, as the LM head. */
size_t anvil_model_flop_params(const anvil_model_config *cfg);
/* Training FLOPs per token at sequence length T, as PaLM's appendix B: 6N + 12*L*C*T for attention. */
double anvil_model_flops_per_token(const anvil_model_config *cfg, int T);
/* Which of a block's linear layers (whole, not a tensor-parallel shard) maps C inputs to OC outputs,
 * by its name in the family ("qkv", "fc_proj", ...): what a profile labels a matmul with. NULL when
 * no layer has that shape. */
const char *anvil_model_linear_role(const anvil_model_config *cfg, int C, int OC);

/* ---- a model: whole, or the shard of one process ---- */

/* Units: the pieces in which parameters are gathered, released and reduced when data parallelism
 * shards them (src/dist/dataparallel.h). Unit 0 is the head: every tensor that is not per-layer, needed
 * at both ends of a pass (the embedding, the final norm, the LM head). Unit 1+l is layer l: its slice
 * of each stacked per-layer tensor. A unit's packed form is its slices laid end to end in table order. */
typedef struct {
    int tensor;
    size_t offset; /* into the flat parameter buffer, in floats */
    size_t len;
} anvil_model_range;

/* Where one unit's tensors are: t[i] is the unit's slice of tensor i, NULL for tensors outside it. */
typedef struct {
    float *t[ANVIL_MODEL_MAX_TENSORS];
} anvil_model_view;

/* Who supplies parameters and receives gradients. Without hooks the passes read m->params and
 * accumulate into m->grads. With them, every unit is fetched right before use and handed back right
 * after, in this order: forward: get_params(0), then get/put_params(1+l) for each layer in turn;
 * backward: get_grads(0), then for l from the last layer down get_params(1+l), get_grads(1+l),
 * put_grads(1+l), put_params(1+l); finally put_grads(0) and put_params(0). Gradients accumulate (+=)
 * into the views. put_grads means the unit's gradients of this micro-step are final, which is when
 * data parallelism can start reducing them. Evaluation forwards end with put_params(0). Each callback
 * returns 0, or -1 after anvil_fail. Whole models only. */
typedef struct {
    void *ctx;
    int (*get_params)(void *ctx, int unit, anvil_model_view *v);
    int (*put_params)(void *ctx, int unit);
    int (*get_grads)(void *ctx, int unit, anvil_model_view *v);
    int (*put_grads)(void *ctx, int unit);
} anvil_model_hooks;

/* The part of the model one process holds and computes. */
typedef struct {
    int tp, tp_rank;       /* tensor parallelism: this rank's share of the split tensors (1, 0: all) */
    int l0, l1;            /* pipeline parallelism: the stage's layers [l0, l1) (0, n_layer: all) */
    int nslots;            /* micro-batches whose activations can be alive at once */
    int sequence_parallel; /* Megatron's sequence parallelism within the TP group */
} anvil_model_shard;

/* The collectives of a sharded pass over its tensor-parallel group, which src/dist supplies: reduce
 * sums buf over the group in place; gather puts every rank's n_local floats together, rank r's at
 * r * n_local of full; scatter sums full (n_local floats per rank) over the group and leaves this
 * rank's part in local. Each returns 0, or -1 after anvil_fail, and is told what it moves. */
typedef struct {
    void *ctx;
    int (*reduce)(void *ctx, float *buf, size_t n, const char *what);
    int (*gather)(void *ctx, const float *local, float *full, size_t n_local, const char *what);
    int (*scatter)(void *ctx, const float *full, float *local, size_t n_local, const char *what);
} anvil_model_comm;

typedef struct {
    anvil_model_config cfg; /* the whole model's */
    const anvil_kernels *k;
    const anvil_model_hooks *hooks; /* NULL: the flat buffers */
    /* A shard's passes compute through comm (the group of the shard's TP index, of one rank when only
     * the pipeline splits the model); a whole model's, with comm NULL, need none. */
    anvil_model_shard shard;
    const anvil_model_comm *comm;
    int ntensors;
    size_t nparams;                              /* this process's */
    size_t offsets[ANVIL_MODEL_MAX_TENSORS + 1]; /* in floats, into params and grads: the local layout */
    float *params;
    float *grads; /* a whole model's: allocated on the first training step */
    int B, T;     /* activation shape currently allocated (0 = none) */
    void *acts;   /* the family's activations */
} anvil_model;

/* A whole model on backend k, with zeroed parameters. */
int anvil_model_init(anvil_model *m, const anvil_model_config *cfg, const anvil_kernels *k);
/* The same without the parameters (m->params NULL): the layout, for a process that holds only a shard
 * of the model. */
int anvil_model_init_layout(anvil_model *m, const anvil_model_config *cfg, const anvil_kernels *k);
/* A shard of the model, with zeroed parameters and gradients, computing through comm. */
int anvil_model_init_shard(anvil_model *m, const anvil_model_config *cfg, const anvil_kernels *k,
                           const anvil_model_shard *shard, const anvil_model_comm *comm);
void anvil_model_free(anvil_model *m);
/* m's configuration, kernels and layout with the weights at params, and no hooks, gradients or
 * activations: a model to read whole weights from (decoding, saving) when m's own are sharded or served
 * through hooks. It owns nothing and is never freed; it is not for the training passes. */
anvil_model anvil_model_with_params(const anvil_model *m, float *params);
float *anvil_model_param(const anvil_model *m, int i, float *base); /* tensor i within params or grads */

/* The initialization, from a seed: every tensor as its table entry says, drawn in table order. Same
 * seed, same weights. */
void anvil_model_init_weights(anvil_model *m, uint64_t seed);
/* anvil_model_init_weights' values read piece by piece into host memory, for a process that keeps
 * only some of them: elements [off, off + n) of tensor i (the whole model's layout). Reads go forward
 * (by tensor, then offset); what they skip still advances the RNG, so every piece is bit-identical to
 * the same piece of a whole initialization, and nothing the size of the model is held. 0, or -1 after
 * anvil_fail for a read that goes back. */
typedef struct {
    anvil_model_config cfg;
    anvil_rng rng;
    int tensor;
    size_t pos;
} anvil_model_init_stream;
void anvil_model_init_stream_start(anvil_model_init_stream *s, const anvil_model_config *cfg, uint64_t seed);
int anvil_model_init_stream_read(anvil_model_init_stream *s, int i, size_t off, size_t n, float *dst);

int anvil_model_num_units(const anvil_model_config *cfg); /* n_layer + 1 */
/* Unit u's slices in packed order into r (room for ANVIL_MODEL_MAX_TENSORS); returns how many. */
int anvil_model_unit_ranges(const anvil_model *m, int u, anvil_model_range *r);
size_t anvil_model_unit_size(const anvil_model *m, int u);
/* Views of unit u within a flat buffer laid out like m->params, or within a packed unit buffer. */
void anvil_model_view_flat(const anvil_model *m, int u, float *base, anvil_model_view *v);
void anvil_model_view_packed(const anvil_model *m, int u, float *packed, anvil_model_view *v);

/* ---- the shard's layout against the whole model's ---- */

/* Whether this process holds tensor i (its stage does), and whether its copy is the one that counts
 * (a tied tensor's is the first stage's). */
int anvil_model_holds(const anvil_model *m, int i);
int anvil_model_owns(const anvil_model *m, int i);
/* A shard's part of tensor i is a list of pieces, each a run of elements contiguous in the whole
 * tensor and in the local one, going forward in both: piece p of rank tp_rank starts at element
 * `whole` of the whole tensor (the whole model's layout) and `local` of the shard's, len elements. */
size_t anvil_model_num_pieces(const anvil_model *m, int i);
void anvil_model_piece(const anvil_model *m, int i, int tp_rank, size_t p, size_t *whole, size_t *local,
                       size_t *len);
/* The rows [v0, v0 + Vs) of a vocabulary table this shard holds, the first Vr of them real. */
void anvil_model_vocab_shard(const anvil_model *m, int *v0, int *Vr, int *Vs);

/* ---- passes ---- */

void anvil_model_zero_grad(anvil_model *m);
/* Evaluation forward over B sequences of T tokens (T <= block_size). With targets, *loss gets the mean
 * loss over positions whose target is >= 0 (targets and loss may be NULL). Keeps the final hidden
 * states for anvil_model_logits. 0, or -1 after anvil_fail (bad shape or token id, allocation
 * failure). A shard's is collective over its group and needs targets. */
int anvil_model_forward(anvil_model *m, const int32_t *inputs, const int32_t *targets, int B, int T, float *loss);
/* One training micro-step: forward, the loss, and backward. Accumulates (+=) into the gradients the
 * gradient of mean_loss * grad_scale (grad_scale = 1/accumulation_steps), and sets *loss to the mean
 * loss. 0 or -1 after anvil_fail. */
int anvil_model_forward_backward(anvil_model *m, const int32_t *inputs, const int32_t *targets, int B, int T,
                                 float grad_scale, float *loss);
/* Full logits [B,T,padded_vocab] of the last forward of a whole model, into backend memory. */
int anvil_model_logits(anvil_model *m, float *out);

/* A pipeline stage's passes, with several micro-batches' activations ("slots") alive at once.
 * stage_ready allocates the slots for micro-batches of B x T (a no-op when they are), so that a stage's
 * input can be received before its forward. stage_forward runs a micro-batch in slot: the first stage
 * embeds inputs, the others start from stage_input(slot) ([B,T,C], the previous stage's output, or
 * this rank's rows of it under sequence parallelism); the output is then at stage_output(slot), and the
 * last stage sets *loss. stage_backward accumulates the gradient of mean_loss * grad_scale: the last
 * stage starts from the loss, the others from stage_grad(slot) (the gradient of their output,
 * received), which then holds the gradient of the stage's input. Collective over the shard's group. */
int anvil_model_stage_ready(anvil_model *m, int B, int T);
int anvil_model_stage_forward(anvil_model *m, int slot, const int32_t *inputs, const int32_t *targets, int B, int T,
                              float *loss);
int anvil_model_stage_backward(anvil_model *m, int slot, float grad_scale);
float *anvil_model_stage_input(anvil_model *m, int slot);
float *anvil_model_stage_output(anvil_model *m, int slot);
float *anvil_model_stage_grad(anvil_model *m, int slot);
/* Floats of a stage's input, output and their gradients on this rank for the current micro-batch shape. */
size_t anvil_model_stage_floats(const anvil_model *m);
/* Bytes of the activation buffers allocated for the current micro-batch shape. */
size_t anvil_model_activation_bytes(const anvil_model *m);
/* Sequence parallelism on or off for the steps that follow (a shard of a group of more than one rank):
 * frees the activations, so call it before a step rather than between a forward and its backward. */
void anvil_model_set_sequence_parallel(anvil_model *m, int on);
/* Whether micro-batches of B x T split evenly over tp ranks by tokens. One-line error. */
int anvil_model_sp_check(int tp, int B, int T);

/* Incremental decoding with a key/value cache, on a whole model's weights (m->params, whatever the
 * hooks): feeding the token at position pos (0-based, consecutive from 0) costs O(pos) attention work,
 * not O(pos^2), and writes logits[padded_vocab] (backend memory) for the next token. */
typedef struct anvil_model_cache anvil_model_cache;
anvil_model_cache *anvil_model_cache_new(const anvil_model *m);
void anvil_model_cache_free(anvil_model_cache *c);
int anvil_model_decode(anvil_model *m, anvil_model_cache *c, int32_t token, int pos, float *logits);

#endif
