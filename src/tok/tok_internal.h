/* Shared internals of src/tok: the vocabulary table, the byte-string hash
 * and the pre-tokenization regexes. Not part of the public API. */
#ifndef ANVIL_TOK_INTERNAL_H
#define ANVIL_TOK_INTERNAL_H

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stdint.h>
#include <string.h>

#include "tok/tokenizer.h"

/* Token ids are below this, so per-id arrays stay allocatable even for a
 * hostile rank file that names a huge rank. */
#define TOK_MAX_ID (1 << 24)
#define TOK_NO_RANK UINT32_MAX

/* A byte string -> id map over an arena of token bytes. Slots hold
 * (hash high bits << 32 | id + 1), 0 when empty, so most probes that miss
 * never touch the arena. */
typedef struct {
    uint64_t *slots;
    uint32_t mask;
    uint32_t count;
    const unsigned char *arena; /* tok_off/tok_len index into it */
    const uint32_t *tok_off;
    const uint32_t *tok_len;
} tok_map;

/* Llama 3's 256 specials are the most any encoding has. */
#define TOK_MAX_SPECIAL 256
/* Room for one special's text, with its NUL. */
#define TOK_SPECIAL_CAP 40

struct anvil_tok {
    int32_t n_ids;       /* highest id + 1 */
    uint32_t *tok_off;   /* per id: offset of its bytes in arena */
    uint32_t *tok_len;   /* per id: byte count, 0 for an unused id */
    unsigned char *arena;
    size_t arena_used;
    tok_map map;         /* mergeable tokens only, never specials */
    uint32_t byte_rank[256];
    int n_special;
    int32_t special_id[TOK_MAX_SPECIAL];
    const char *special_str[TOK_MAX_SPECIAL];
    uint32_t special_len[TOK_MAX_SPECIAL];
    char *special_text; /* the specials' text when it is generated (tok_follow_name), else NULL */
    int32_t eot, bos;   /* bos: -1 when the encoding has none */
    pcre2_code *re, *re_fast;
    char name[32];
};

static inline uint64_t tok_hash(const unsigned char *p, size_t n) {
    uint64_t h = 0x9E3779B97F4A7C15ull ^ (n * 0xFF51AFD7ED558CCDull);
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        h = (h ^ w) * 0xC2B2AE3D27D4EB4Full;
        h ^= h >> 29;
        p += 8;
        n -= 8;
    }
    if (n) {
        uint64_t w = 0;
        memcpy(&w, p, n);
        h = (h ^ w) * 0xC2B2AE3D27D4EB4Full;
        h ^= h >> 29;
    }
    h *= 0x165667B19E3779F9ull;
    return h ^ (h >> 32);
}

/* The id of bytes p[0..n) or TOK_NO_RANK. */
static inline uint32_t tok_map_get(const tok_map *m, const unsigned char *p, size_t n) {
    uint64_t h = tok_hash(p, n);
    uint32_t tag = (uint32_t)(h >> 32);
    for (uint32_t i = (uint32_t)h & m->mask;; i = (i + 1) & m->mask) {
        uint64_t s = m->slots[i];
        if (!s) return TOK_NO_RANK;
        if ((uint32_t)(s >> 32) == tag) {
            uint32_t id = (uint32_t)s - 1;
            if (m->tok_len[id] == n && !memcmp(m->arena + m->tok_off[id], p, n)) return id;
        }
    }
}

/* Inserts id (whose bytes are already in the arena); returns the id already
 * holding those bytes, or TOK_NO_RANK when it was new. */
uint32_t tok_map_put(tok_map *m, uint32_t id);
int tok_map_init(tok_map *m, uint32_t expected);

/* The named encodings. */
typedef struct {
    const char *name;
    const char *regex;      /* exact for all input */
    const char *regex_fast; /* the same pieces unless tok_needs_u16 */
    int n_ranks; /* the official rank count; its specials apply only then (0: never) */
    int n_special;
    const char *special_str[8];
    int32_t special_id[8];
    /* The specials of any other rank file: n_follow of them at the ids right after its highest
     * rank, in order: the n_named of `named`, then reserved ones (tok_follow_name); the
     * end-of-text one at index follow_eot, the beginning-of-text one at follow_bos (-1: none).
     * A trained vocabulary leaves them room: its size counts them. */
    int n_follow, follow_eot, follow_bos, n_named;
    const char *const *named;
} tok_encoding;

const tok_encoding *tok_find_encoding(const char *name);
/* The text of e's following special number i (< e->n_follow) into buf[TOK_SPECIAL_CAP]. */
void tok_follow_name(const tok_encoding *e, int i, char *buf);
/* Compiles (and JIT-compiles) the encoding's regex, or its fast variant;
 * NULL after anvil_fail. */
pcre2_code *tok_compile_regex(const tok_encoding *e, int fast);
/* The first point c >= from in p[0..n) where no regex piece of any of the
 * encodings can continue (an ASCII letter starting a line that follows a
 * printable ASCII character), or n. Splitting there and encoding the parts
 * separately gives the same ids as encoding the whole. */
size_t tok_safe_cut(const unsigned char *p, size_t n, size_t from);
/* Whether p[0..n) has a code point whose class PCRE2's Unicode tables get
 * wrong (see pretok.c), so that only the exact regex may split it. */
int tok_needs_u16(const unsigned char *p, size_t n);

/* Calls fn(piece, len, ctx) for each pre-tokenization piece of p[0..n),
 * including the runs of ill-formed UTF-8 the regex does not match. Returns 0,
 * -1 on a regex error or when fn returns nonzero. */
typedef int (*tok_piece_fn)(const unsigned char *piece, size_t len, void *ctx);
int tok_split(const pcre2_code *re, pcre2_match_data *md, const unsigned char *p, size_t n, tok_piece_fn fn,
              void *ctx);

/* Parses a .tiktoken file into ids/arena (used by the loader). */
int tok_parse_ranks(anvil_tok *t, const char *data, size_t n, const char *name);

#endif
