/* A trained model as one safetensors file: anvil's tensor names (the
 * family's parameter table, per-layer tensors stacked, vocabulary tables
 * without their padding rows) and the configuration in the metadata (the
 * family's format and fields). This is what
 * `anvil train` leaves in its run folder and `anvil sample` reads; the full
 * training checkpoint (optimizer, loader and RNG state) builds on it. */
#ifndef ANVIL_CKPT_MODEL_FILE_H
#define ANVIL_CKPT_MODEL_FILE_H

#include <stddef.h>
#include <stdint.h>

#include "ckpt/safetensors.h"
#include "model/model.h"

/* The tokenizer a model was trained with, as its file's metadata records
 * it: byte-level, or a tiktoken rank file named by its encoding and the
 * CRC32C of its bytes. A run folder keeps that rank file beside
 * model.safetensors, so sample and export need not be told it again. */
#define ANVIL_MODEL_TOKENIZER_FILE "tokenizer.tiktoken"
typedef struct {
    int recorded;     /* 0: the file records none (written before this was recorded, or imported) */
    int bytes;        /* 1: byte-level, no rank file */
    char pattern[32]; /* the rank file's encoding, e.g. "gpt2", "cl100k_base" */
    uint32_t crc32c;  /* of the rank file's bytes */
} anvil_model_tokenizer;

/* The record of rank_file with encoding pattern; rank_file NULL or "" means byte-level. */
int anvil_model_tokenizer_of(const char *rank_file, const char *pattern, anvil_model_tokenizer *out);
/* Copies rank_file into dir as ANVIL_MODEL_TOKENIZER_FILE, atomically. */
int anvil_model_tokenizer_keep(const char *rank_file, const char *dir);

/* Atomic: a crash leaves the previous file or the complete new one. tok (may be NULL) is recorded
 * in the metadata. */
int anvil_model_save(const char *path, const anvil_model *m, const anvil_model_tokenizer *tok);
/* A model file read piece by piece, for a process that holds a shard of the model (tensor and
 * pipeline parallelism) and must never hold a whole tensor: opening reads the header only, checks
 * the format, the configuration (into cfg, padded_vocab set) and every tensor's shape; a read then
 * takes elements [off, off + n) of tensor i (the whole model's layout: padding rows read as zeros)
 * into host memory at dst. NULL or -1 after anvil_fail. */
typedef struct anvil_model_reader anvil_model_reader;
anvil_model_reader *anvil_model_reader_open(const char *path, anvil_model_config *cfg);
int anvil_model_reader_read(anvil_model_reader *r, int i, size_t off, size_t n, float *dst);
void anvil_model_reader_close(anvil_model_reader *r);
/* The same file written tensor by tensor, for a caller that never holds the whole model: open
 * writes the header to a temporary file; then put tensor i = 0, 1, ... in order, each in the whole
 * model's layout (host memory; of a vocabulary table, whose padding rows the file leaves out, the real rows), then
 * anvil_st_stream_commit (or _abort). NULL or -1 after anvil_fail. */
anvil_st_stream *anvil_model_stream_open(const char *path, const anvil_model_config *cfg,
                                         const anvil_model_tokenizer *tok);
int anvil_model_stream_put(anvil_st_stream *s, const anvil_model_config *cfg, int i, const float *data);
/* The tokenizer record of a model file (recorded 0 when it has none). */
int anvil_model_read_tokenizer(const char *path, anvil_model_tokenizer *out);
/* For what anvil_model_load_any was given (a model file or a run folder; a checkpoint folder
 * records no tokenizer): given a rank file by hand (rank_file not NULL), checks it against the
 * model's record, failing with both checksums when they differ; else finds the model's own
 * ANVIL_MODEL_TOKENIZER_FILE beside it, checked the same way, into found (cap bytes; "" when the
 * model is byte-level or records nothing) and its encoding into pattern (32 bytes). */
int anvil_model_tokenizer_for(const char *path, const char *rank_file, char *found, size_t cap, char *pattern);
/* Reads the configuration from the metadata, initializes m on backend k and loads the weights. */
int anvil_model_load(const char *path, const anvil_kernels *k, anvil_model *m);
/* Like anvil_model_load, from what a user may name as a model: a model file; a checkpoint folder,
 * verified first, whose weights are put back together from shard files when the run sharded them;
 * or a run folder, which means its model.safetensors, or while it has none (the run stopped
 * early), its newest checkpoint that verifies (warn as for anvil_ckpt_resolve). */
int anvil_model_load_any(const char *path, const anvil_kernels *k, anvil_model *m, char *warn, size_t warn_cap);
/* Loads weights into an already initialized model whose configuration must match the file's
 * shapes (the parameter table's names, with prefix prepended, e.g. "" or "final."). */
int anvil_model_load_tensors(const char *path, const char *prefix, anvil_model *m);

#endif
