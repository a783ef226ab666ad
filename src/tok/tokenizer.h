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
 * "p50k_base"), "cl100k_base", "o200k_base", "llama3". A rank file with
 * exactly the official number of ranks gets that encoding's special tokens
 * at their official ids (gpt2 <|endoftext|> 50256; cl100k 100257.. ; o200k
 * 199999..). Any other rank file (e.g. one `anvil_tok_train` wrote) gets the
 * single special <|endoftext|> at the id after its highest rank.
 *
 * "llama3" is Llama 3's tokenizer.model (a rank file of 128000 ranks): the
 * regex of cl100k_base, and 256 specials at the ids after the highest rank,
 * for any rank file, as Meta's tokenizer numbers them: <|begin_of_text|>,
 * <|end_of_text|>, <|reserved_special_token_0|>, <|reserved_special_token_1|>,
 * <|finetune_right_pad_id|>, <|step_id|>, <|start_header_id|>,
 * <|end_header_id|>, <|eom_id|>, <|eot_id|>, <|python_tag|>, then
 * <|reserved_special_token_2|> to <|reserved_special_token_246|> (Llama 3.1's
 * list, kept by 3.2 and 3.3; Llama 3.0 named the same ids but 128004, 128005,
 * 128008 and 128010 on reserved, with the same ids for every token above
 * that prep and chat use). With 128000 ranks: <|begin_of_text|> 128000,
 * <|end_of_text|> 128001, <|eot_id|> 128009, 128256 ids in all. Meta's encode
 * also cuts its input into pieces of at most 400,000 characters and runs of
 * at most 25,000 (non-)whitespace characters before encoding each, which
 * changes ids only at such a cut; anvil encodes the text whole, as
 * tiktoken and Hugging Face's tokenizer do. */
anvil_tok *anvil_tok_load(const char *rank_file, const char *pattern_name);
/* The same from rank-file bytes in memory; `name` labels error messages. */
anvil_tok *anvil_tok_load_mem(const char *data, size_t n, const char *name, const char *pattern_name);
void anvil_tok_free(anvil_tok *t);

/* One more than the highest id (ranks and specials). */
int32_t anvil_tok_vocab_size(const anvil_tok *t);
/* The id of the end-of-text special: <|endoftext|>, or Llama 3's <|end_of_text|>. */
int32_t anvil_tok_eot(const anvil_tok *t);
/* The id of the beginning-of-text special (Llama 3's <|begin_of_text|>), or -1 when the encoding
 * has none (the GPT encodings). */
int32_t anvil_tok_bos(const anvil_tok *t);
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
 * single bytes at ranks 0..255 (byte order), then merges, and the specials
 * that follow the ranks (not stored in the file): <|endoftext|> as the last
 * id (vocab_size - 257 merges), or for llama3 its 256 specials
 * (vocab_size - 512 merges). The texts are split with the named encoding's
 * regex; its end-of-text special (<|endoftext|>, <|end_of_text|>) in them
 * separates documents and is not learned. Each step merges the most frequent adjacent
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

/* The ranks a trained vocabulary of vocab_size ids under the named encoding holds (vocab_size less
 * the specials that follow them), or -1 after anvil_fail for an unknown encoding. */
int anvil_tok_train_ranks(const char *pattern_name, int vocab_size);

/* Training from memory (for tests): n_texts byte strings instead of files. */
int anvil_tok_train_mem(const anvil_tok_train_opts *o, const char *const *texts, const size_t *lens, int n_texts);

#endif
