/* Data preparation: text files in, token shards out.
 *
 * Tokens are raw bytes (vocabulary 257, the default) or BPE ids from a
 * `.tiktoken` rank file (src/tok/tokenizer.h); shards are llm.c version 1
 * (uint16) when the vocabulary fits, else version 7 (uint32).
 *
 * Inputs ending in .gz or .zst are decompressed (into memory, whole). The
 * input is split into documents (a whole file each, the pieces between
 * occurrences of a delimiter, or one JSON field per line), each document is
 * prefixed with the end-of-text token as in GPT-2 and llm.c, and each goes
 * to the val split when the FNV-1a hash of its bytes falls below the val
 * fraction, else to train. The split is a pure function of a document's
 * bytes, so a re-run, a re-ordering of the inputs or a duplicated document
 * never moves text between train and val.
 *
 * Output, in out_dir: train_000000.bin, ..., val_000000.bin, ... (a split's
 * shards are of equal size within one token, at most shard_tokens each, so
 * no tiny last shard starves the loader) and manifest.json describing them.
 * Shards left over from an earlier run into the same folder that this run
 * did not rewrite are removed, so that a glob over the folder sees exactly
 * this run's data. */
#ifndef ANVIL_DATA_PREP_H
#define ANVIL_DATA_PREP_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    const char *out_dir;
    const char *const *inputs; /* file paths; "-" is standard input */
    int ninputs;
    double val_fraction;   /* in [0, 1] */
    const char *delimiter; /* NULL: each input is one document */
    size_t delimiter_len;
    int64_t shard_tokens; /* in [1, INT32_MAX] */
    /* NULL: byte-level tokens. Else a rank file and an encoding name (NULL
     * means "gpt2"); text that looks like a special token is encoded as
     * ordinary text. */
    const char *tokenizer_file;
    const char *tokenizer_pattern;
    /* Encoding threads (< 1 means 1). Whole documents are grouped into
     * chunks of about 256 KiB that the threads encode independently; the
     * shards are assembled in input order, so they are identical for any
     * count. BPE tokens are held in memory until written (4 bytes a token). */
    int workers;
    /* NULL: plain text. Else each input is JSON lines and each line's string
     * field of this name is one document (delimiter must be NULL). A line
     * that is not JSON or lacks the field is skipped and told to `note` as
     * file:line, or fails the run when strict is set. Blank lines are
     * ignored. */
    const char *jsonl_field;
    int strict;
    size_t chunk_bytes; /* text per unit of work; 0: 256 KiB (tests use less) */
    /* Told about things worth a line to the user (a skipped empty input, an
     * empty split, a removed stale shard); may be NULL. */
    void (*note)(void *ctx, const char *msg);
    void *note_ctx;
} anvil_prep_opts;

typedef struct {
    int64_t bytes_in;
    int64_t train_docs, val_docs;
    int64_t train_tokens, val_tokens;
    int train_shards, val_shards;
    int sources, skipped_inputs;
    int64_t bad_lines; /* JSON lines skipped */
} anvil_prep_stats;

int anvil_prep_run(const anvil_prep_opts *o, anvil_prep_stats *stats);

uint64_t anvil_fnv1a64(const void *data, size_t n);
/* Whether a document with this hash belongs to the val split. */
int anvil_prep_is_val(uint64_t hash, double val_fraction);

/* Reads the vocabulary size and end-of-text id from dir/manifest.json. */
int anvil_data_manifest_vocab(const char *dir, int *vocab_size, int *eot);

#endif
