/* Data preparation: text files in, token shards out.
 *
 * Tokens are raw bytes (vocabulary 257, the default) or BPE ids from a
 * `.tiktoken` rank file (src/tok/tokenizer.h); shards are llm.c version 1
 * (uint16) when the vocabulary fits, else version 7 (uint32).
 *
 * The input is split into documents (a whole file each, the pieces between
 * occurrences of a delimiter, or one JSON field per line), each document is
 * marked as its tokenizer's family marks one: prefixed with the end-of-text
 * token as in GPT-2 and llm.c, or, for an encoding with a beginning-of-text
 * token (llama3), between it and the end-of-text token, as Meta's Llama 3
 * encode(bos=True, eos=True) gives <|begin_of_text|> ... <|end_of_text|>;
 * and each goes
 * to the val split when the FNV-1a hash of its bytes falls below the val
 * fraction, else to train. The split is a pure function of a document's
 * bytes, so a re-run, a re-ordering of the inputs or a duplicated document
 * never moves text between train and val.
 *
 * Input and output are streamed. Each input is read in turn, front to back
 * (regular files in large reads, .gz and .zst files decompressed as they are
 * read), and cut into chunks of whole documents as it is; each split's
 * tokens fill train_000000.bin, ... (and val_...) of exactly shard_tokens
 * tokens, the last one smaller, and each shard is written (atomically) as
 * soon as it is full. Memory stays at about workers x 8 chunks of work, the
 * longest document (at most max_doc_bytes, which also bounds what a
 * decompression bomb can take) and one write buffer per split, whatever the
 * corpus size. Standard input and pipes are read into memory whole first: a
 * re-run needs their checksum before it reads anything. A file that changes
 * or is cut short while prep reads it is an error naming it and the offset.
 *
 * manifest.json is rewritten atomically after every finished shard. Beside
 * the vocabulary it records the tokenizer (size, CRC32C), the options, each
 * input (size and mtime, or for a pipe its CRC32C), and every finished
 * shard: file, split, tokens, bytes, CRC32C and where in the input the next
 * shard of its split starts. A run into a folder whose manifest has the same
 * inputs and options checks the finished shards' checksums, keeps the good
 * ones (up to the first bad or missing one of each split) and continues
 * after them, so an interrupted run finishes where it stopped and a re-run
 * of a finished one writes nothing; other inputs or options start over.
 * Shards that this run's manifest does not list are removed at the end, so
 * a glob over the folder sees exactly this run's data. The tokenizer's rank
 * file is copied into the folder as tokenizer.tiktoken for later decoding. */
#ifndef ANVIL_DATA_PREP_H
#define ANVIL_DATA_PREP_H

#include <stddef.h>
#include <stdint.h>

/* How far a run is: what anvil_prep_opts.progress is told. */
typedef struct {
    int64_t bytes_read, bytes_total; /* of the inputs as stored: a .gz or .zst file's compressed bytes */
    int64_t docs, tokens;            /* encoded so far (tokens: of the splits being written) */
} anvil_prep_progress;

typedef struct {
    const char *out_dir;
    const char *const *inputs; /* file paths; "-" is standard input */
    const char *const *input_names; /* NULL, or per input NULL or its name in messages and the manifest */
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
     * chunks of about 256 KiB that the threads encode independently, a few
     * per thread at a time; the shards are assembled in input order, so they
     * are identical for any count. */
    int workers;
    /* NULL: plain text. Else each input is JSON lines and each line's string
     * field of this name is one document (delimiter must be NULL). A line
     * that is not JSON or lacks the field is skipped and told to `note` as
     * file:line, or fails the run when strict is set (shards finished
     * before the bad line stay, and a re-run resumes after them). Blank
     * lines are ignored. */
    const char *jsonl_field;
    int strict;
    size_t chunk_bytes; /* text per unit of work; 0: 256 KiB (tests use less) */
    size_t read_bytes;  /* input read at a time; 0: 4 MiB (tests use less) */
    /* The longest document (or JSON line) allowed, in bytes; 0: 64 MiB. Each
     * is held in memory whole, so this bounds what a file without its
     * delimiter, or a decompression bomb, can take: a longer one fails the
     * run naming the input and where the document starts. */
    size_t max_doc_bytes;
    /* Told about things worth a line to the user (a skipped empty input, an
     * empty split, a removed stale shard); may be NULL. */
    void (*note)(void *ctx, const char *msg);
    void *note_ctx;
    /* Told how far the run is (may be NULL): after each read of an input and
     * each chunk the calling thread encodes (so always on the calling
     * thread, never on a worker), and once at the end with every input
     * read. Workers add their chunks' counts to atomics that the calls read,
     * so they never wait on one another or on the caller's drawing. */
    void (*progress)(void *ctx, const anvil_prep_progress *p);
    void *progress_ctx;
} anvil_prep_opts;

typedef struct {
    int64_t bytes_in;
    int64_t train_docs, val_docs;
    int64_t train_tokens, val_tokens;
    int train_shards, val_shards;
    int sources, skipped_inputs;
    int64_t bad_lines;  /* JSON lines skipped */
    int kept_shards;    /* finished by an earlier run, verified and kept */
} anvil_prep_stats;

int anvil_prep_run(const anvil_prep_opts *o, anvil_prep_stats *stats);

uint64_t anvil_fnv1a64(const void *data, size_t n);
/* Whether a document with this hash belongs to the val split. */
int anvil_prep_is_val(uint64_t hash, double val_fraction);

/* JSON lines, the part of prep that splits an input into lines and takes
 * one string field from each (apart so that a fuzzer can drive it alone). */
enum { ANVIL_JSONL_DOC, ANVIL_JSONL_BLANK, ANVIL_JSONL_BAD_JSON, ANVIL_JSONL_NO_FIELD, ANVIL_JSONL_NUL };
/* The line at *off of data[0..len) (*off < len): returns its offset, sets
 * *line_len (without the newline) and moves *off past the newline. */
size_t anvil_jsonl_next_line(const unsigned char *data, size_t len, size_t *off, size_t *line_len);
/* Classifies one line (a trailing CR is ignored; only whitespace may follow
 * the JSON value). A line with a \u0000 escape is ANVIL_JSONL_NUL: the
 * decoded text would end at the NUL and lose the rest without a word. For ANVIL_JSONL_DOC, *doc and *doc_len are the field's
 * string up to its first NUL, valid until anvil_jsonl_release(*hold). */
int anvil_jsonl_field(const unsigned char *line, size_t len, const char *field, void **hold, const char **doc,
                      size_t *doc_len);
void anvil_jsonl_release(void *hold);

/* The token a document starts after, as prep marks documents: the tokenizer's beginning-of-text token
 * where it has one (llama3), else the end-of-text token that ends the document before it (tk NULL: the
 * byte tokenizer's). A sample from the start of a document begins there. */
struct anvil_tok;
int32_t anvil_data_doc_start(const struct anvil_tok *tk);

/* Reads the vocabulary size and end-of-text id from dir/manifest.json (which also records "bos",
 * the beginning-of-text id, when the tokenizer has one). */
int anvil_data_manifest_vocab(const char *dir, int *vocab_size, int *eot);
/* The tokenizer dir/manifest.json names: 0 with *tok NULL for bytes, 0 with
 * *tok loaded (from dir/tokenizer.tiktoken) for BPE, or -1. file (may be
 * NULL) receives the rank file's path, or "" for bytes. The file is always
 * one of dir's own ("tokenizer.copy", or "tokenizer.file" in manifests from
 * before prep kept a copy): a name with a '/', '.' or '..' is refused,
 * naming the manifest and the field. */
struct anvil_tok;
int anvil_data_manifest_tokenizer(const char *dir, struct anvil_tok **tok, char *file, size_t cap);
/* A split's token count and the bytes of text they encode (end-of-text
 * tokens add none), from a finished prep's manifest. */
int anvil_data_manifest_split(const char *dir, const char *split, int64_t *tokens, int64_t *text_bytes);

#endif
