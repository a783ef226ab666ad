/* The byte-level BPE tokenizer, compatible id for id with tiktoken.
 *
 * A tokenizer is a rank file (tiktoken's `.tiktoken` format: one
 * "<base64 token bytes> <rank>" per line) plus a named encoding that fixes
 * the pre-tokenization regex and the special tokens. Encoding splits the text
 * with that regex (PCRE2, JIT, Unicode), then merges the bytes of each piece
 * by lowest rank, exactly as tiktoken does, so the ids equal tiktoken's for
 * every valid UTF-8 input (character classes follow Unicode 16, as the npm
 * tiktoken 1.0.22 does; see src/tok/pretok.c).
 *
 * Invalid UTF-8 (which tiktoken cannot receive: its APIs take Unicode
 * strings) is never refused and never replaced: no pattern item matches an
 * ill-formed sequence, so each maximal run of bytes the regex leaves
 * unmatched becomes a piece of its own and is merged like any other piece.
 * Every byte string therefore encodes, and decode(encode(x)) == x always.
 *
 * Thread safety: a loaded anvil_tok is read-only and may be shared. Encoding
 * needs scratch state (regex match data, a piece cache): pass one
 * anvil_tok_state per thread, or NULL for a temporary one. */
#ifndef ANVIL_TOK_TOKENIZER_H
#define ANVIL_TOK_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

typedef struct anvil_tok anvil_tok;
typedef struct anvil_tok_state anvil_tok_state;

/* The named encodings: "gpt2" (same regex and specials as "r50k_base" and
 * "p50k_base"), "cl100k_base", "o200k_base". A rank file with exactly the
 * official number of ranks gets that encoding's special tokens at their
 * official ids (gpt2 <|endoftext|> 50256; cl100k 100257.. ; o200k 199999..).
 * Any other rank file (e.g. one `anvil_tok_train` wrote) gets the single
 * special <|endoftext|> at the id after its highest rank. */
anvil_tok *anvil_tok_load(const char *rank_file, const char *pattern_name);
/* The same from rank-file bytes in memory; `name` labels error messages. */
anvil_tok *anvil_tok_load_mem(const char *data, size_t n, const char *name, const char *pattern_name);
void anvil_tok_free(anvil_tok *t);

/* One more than the highest id (ranks and specials). */
int32_t anvil_tok_vocab_size(const anvil_tok *t);
/* The id of <|endoftext|>. */
int32_t anvil_tok_eot(const anvil_tok *t);
/* The encoding name the tokenizer was loaded with. */
const char *anvil_tok_pattern_name(const anvil_tok *t);

/* What to do with special-token text (e.g. "<|endoftext|>") in the input. */
enum anvil_tok_special {
    ANVIL_TOK_SPECIAL_PLAIN = 0, /* encode it as ordinary text (tiktoken's encode_ordinary) */
    ANVIL_TOK_SPECIAL_ALLOW = 1, /* emit the special id (encode(..., allowed_special="all")) */
    ANVIL_TOK_SPECIAL_REFUSE = 2 /* fail, naming the offset (tiktoken's default encode) */
};

anvil_tok_state *anvil_tok_state_new(const anvil_tok *t);
void anvil_tok_state_free(anvil_tok_state *s);

/* Encodes n bytes into (*ids)[0..], a malloc'd buffer of *cap entries grown
 * with realloc (both may start as NULL/0). Returns the number of ids, or -1
 * (out of memory, a single regex piece over 2 GB, or a refused special token). */
int64_t anvil_tok_encode(const anvil_tok *t, anvil_tok_state *s, const void *bytes, size_t n,
                         enum anvil_tok_special special, int32_t **ids, size_t *cap);

/* Writes the bytes of n ids into *out (grown like *ids above). Returns the
 * byte count, or -1 for an id that names no token. */
int64_t anvil_tok_decode(const anvil_tok *t, const int32_t *ids, size_t n, unsigned char **out, size_t *cap);

/* The bytes of one token (NULL for an unknown id); *len receives their count. */
const unsigned char *anvil_tok_token_bytes(const anvil_tok *t, int32_t id, size_t *len);

/* Learns a byte-level BPE vocabulary of vocab_size ids in total: the 256
 * single bytes at ranks 0..255 (byte order), vocab_size - 257 merges, and
 * <|endoftext|> (not stored in the file) as the last id. The texts are split
 * with the named encoding's regex; "<|endoftext|>" in them separates
 * documents and is not learned. Each step merges the most frequent adjacent
 * pair; ties go to the pair whose left token has the lower rank, then the
 * right one. A merge whose bytes already form a token reuses that token.
 * Stops early when no pair is left. Writes the `.tiktoken` file atomically.
 * `progress`, when not NULL, is called after each merge. Returns the number of
 * ranks written, or -1. */
typedef struct {
    const char *const *files;
    int n_files;
    int vocab_size;
    const char *pattern_name;
    const char *out_path;
    int threads; /* pre-tokenization threads (0: OpenMP's default) */
    void (*progress)(void *ctx, int merges_done, int merges_total, int64_t pair_count);
    void *progress_ctx;
} anvil_tok_train_opts;

int anvil_tok_train(const anvil_tok_train_opts *o);

/* Training from memory (for tests): n_texts byte strings instead of files. */
int anvil_tok_train_mem(const anvil_tok_train_opts *o, const char *const *texts, const size_t *lens, int n_texts);

#endif
