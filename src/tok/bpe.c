/* Loading, encoding (split + lowest-rank merging) and decoding. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/fsutil.h"
#include "tok/tok_internal.h"

/* Pieces up to this long merge by rescanning a small array (what tiktoken
 * does); longer ones use a heap so a hostile megabyte-long piece stays
 * O(n log n). */
#define SMALL_PIECE 96
/* Pieces up to this long are remembered per state with their ids. */
#define CACHE_PIECE 48
/* The cache starts small (states are cheap to create per call) and grows
 * to at most this many slots and 32 bytes of key and ids per slot. */
#define CACHE_MIN_SLOTS (1u << 10)
#define CACHE_MAX_SLOTS (1u << 15)

typedef struct {
    uint64_t hash;
    uint32_t off; /* key bytes then ids, in the cache arena */
    uint16_t len;
    uint16_t n_ids;
} cache_slot;

struct anvil_tok_state {
    const anvil_tok *t;
    pcre2_match_data *md;
    cache_slot *cache;
    unsigned char *cache_arena;
    size_t cache_used, cache_cap;
    uint32_t cache_count, cache_mask;
    /* heap-merge scratch, grown on demand */
    uint32_t *next, *prev;
    uint64_t *heap;
    uint32_t *heap_span;
    size_t scratch_cap;
    /* the output being built by the current encode call */
    int32_t **ids;
    size_t *cap;
    size_t n_out;
};

/* The encoding's official specials for its official rank count, else the ones that follow the
 * ranks. */
static int set_specials(anvil_tok *t, const tok_encoding *e, const char *name) {
    t->bos = -1;
    if ((int)t->map.count == e->n_ranks) {
        t->n_special = e->n_special;
        for (int i = 0; i < e->n_special; i++) {
            t->special_str[i] = e->special_str[i];
            t->special_id[i] = e->special_id[i];
        }
        t->eot = t->special_id[0];
        return 0;
    }
    if (t->n_ids > TOK_MAX_ID - e->n_follow)
        return anvil_fail("%s: no room for %s's %d specials after rank %d", name, e->name, e->n_follow, t->n_ids - 1);
    t->special_text = malloc((size_t)e->n_follow * TOK_SPECIAL_CAP);
    if (!t->special_text) return anvil_fail("%s: out of memory", name);
    t->n_special = e->n_follow;
    for (int i = 0; i < e->n_follow; i++) {
        char *text = t->special_text + (size_t)i * TOK_SPECIAL_CAP;
        tok_follow_name(e, i, text);
        t->special_str[i] = text;
        t->special_id[i] = t->n_ids + i;
    }
    t->eot = t->special_id[e->follow_eot];
    if (e->follow_bos >= 0) t->bos = t->special_id[e->follow_bos];
    return 0;
}

anvil_tok *anvil_tok_load_mem(const char *data, size_t n, const char *name, const char *pattern_name) {
    const tok_encoding *e = tok_find_encoding(pattern_name);
    if (!e) return NULL;
    anvil_tok *t = calloc(1, sizeof *t);
    if (!t) {
        anvil_fail("%s: out of memory", name);
        return NULL;
    }
    snprintf(t->name, sizeof t->name, "%s", e->name);
    if (tok_parse_ranks(t, data, n, name)) goto fail;
    if (!(t->re = tok_compile_regex(e, 0)) || !(t->re_fast = tok_compile_regex(e, 1))) goto fail;
    if (set_specials(t, e, name)) goto fail;
    int32_t old_n = t->n_ids;
    for (int i = 0; i < t->n_special; i++) {
        int32_t id = t->special_id[i];
        t->special_len[i] = (uint32_t)strlen(t->special_str[i]);
        if (id < old_n && t->tok_len[id]) {
            anvil_fail("%s: rank %d is taken by a token, but %s's special %s needs that id", name, id, e->name,
                       t->special_str[i]);
            goto fail;
        }
        if (id >= t->n_ids) t->n_ids = id + 1;
    }
    /* Specials get per-id entries too, so decode serves them like tokens. */
    size_t special_bytes = 0;
    for (int i = 0; i < t->n_special; i++) special_bytes += t->special_len[i];
    uint32_t *off = realloc(t->tok_off, sizeof(uint32_t) * ((size_t)t->n_ids + 1));
    if (off) t->tok_off = off;
    uint32_t *len = realloc(t->tok_len, sizeof(uint32_t) * ((size_t)t->n_ids + 1));
    if (len) t->tok_len = len;
    unsigned char *arena = off && len ? realloc(t->arena, t->arena_used + special_bytes) : NULL;
    if (!arena) {
        anvil_fail("%s: out of memory", name);
        goto fail;
    }
    t->arena = arena;
    for (int32_t i = (int32_t)old_n; i <= t->n_ids; i++) t->tok_off[i] = t->tok_len[i] = 0;
    for (int i = 0; i < t->n_special; i++) {
        memcpy(arena + t->arena_used, t->special_str[i], t->special_len[i]);
        t->tok_off[t->special_id[i]] = (uint32_t)t->arena_used;
        t->tok_len[t->special_id[i]] = t->special_len[i];
        t->arena_used += t->special_len[i];
    }
    t->map.arena = arena;
    t->map.tok_off = t->tok_off;
    t->map.tok_len = t->tok_len;
    return t;
fail:
    anvil_tok_free(t);
    return NULL;
}

anvil_tok *anvil_tok_load(const char *rank_file, const char *pattern_name) {
    char *buf;
    size_t n;
    if (anvil_read_file(rank_file, &buf, &n)) return NULL;
    anvil_tok *t = anvil_tok_load_mem(buf, n, rank_file, pattern_name);
    free(buf);
    return t;
}

void anvil_tok_free(anvil_tok *t) {
    if (!t) return;
    free(t->tok_off);
    free(t->tok_len);
    free(t->arena);
    free(t->special_text);
    free(t->map.slots);
    if (t->re) pcre2_code_free(t->re);
    if (t->re_fast) pcre2_code_free(t->re_fast);
    free(t);
}

int32_t anvil_tok_vocab_size(const anvil_tok *t) { return t->n_ids; }
int32_t anvil_tok_eot(const anvil_tok *t) { return t->eot; }
int32_t anvil_tok_bos(const anvil_tok *t) { return t->bos; }
const char *anvil_tok_pattern_name(const anvil_tok *t) { return t->name; }

const unsigned char *anvil_tok_token_bytes(const anvil_tok *t, int32_t id, size_t *len) {
    if (id < 0 || id >= t->n_ids || !t->tok_len[id]) return NULL;
    *len = t->tok_len[id];
    return t->arena + t->tok_off[id];
}

anvil_tok_state *anvil_tok_state_new(const anvil_tok *t) {
    anvil_tok_state *s = calloc(1, sizeof *s);
    if (!s) goto oom;
    s->t = t;
    s->md = pcre2_match_data_create_from_pattern(t->re, NULL);
    s->cache = calloc(CACHE_MIN_SLOTS, sizeof *s->cache);
    s->cache_mask = CACHE_MIN_SLOTS - 1;
    s->cache_cap = (size_t)CACHE_MIN_SLOTS * 32;
    s->cache_arena = malloc(s->cache_cap);
    if (s->md && s->cache && s->cache_arena) return s;
    anvil_tok_state_free(s);
oom:
    anvil_fail("tokenizer: out of memory for an encoder state");
    return NULL;
}

void anvil_tok_state_free(anvil_tok_state *s) {
    if (!s) return;
    if (s->md) pcre2_match_data_free(s->md);
    free(s->cache);
    free(s->cache_arena);
    free(s->next);
    free(s->prev);
    free(s->heap);
    free(s->heap_span);
    free(s);
}

static int emit(anvil_tok_state *s, uint32_t id) {
    if (s->n_out == *s->cap) {
        size_t nc = *s->cap ? *s->cap * 2 : 1024;
        int32_t *p = realloc(*s->ids, nc * sizeof(int32_t));
        if (!p) return anvil_fail("tokenizer: out of memory for %zu ids", nc);
        *s->ids = p;
        *s->cap = nc;
    }
    (*s->ids)[s->n_out++] = (int32_t)id;
    return 0;
}

static cache_slot *cache_find(anvil_tok_state *s, const unsigned char *p, size_t n, uint64_t h) {
    for (uint32_t i = (uint32_t)h & s->cache_mask;; i = (i + 1) & s->cache_mask) {
        cache_slot *c = &s->cache[i];
        if (!c->len) return c;
        if (c->hash == h && c->len == n && !memcmp(s->cache_arena + c->off, p, n)) return c;
    }
}

static void cache_put(anvil_tok_state *s, cache_slot *c, const unsigned char *p, size_t n, uint64_t h,
                      const int32_t *ids, size_t n_ids) {
    size_t need = n + 4 * n_ids;
    if (2 * (s->cache_count + 1) > s->cache_mask + 1 || s->cache_used + need > s->cache_cap) {
        uint32_t slots = s->cache_mask + 1;
        cache_slot *ns = slots < CACHE_MAX_SLOTS ? calloc(2 * (size_t)slots, sizeof *ns) : NULL;
        unsigned char *na = ns ? realloc(s->cache_arena, 2 * s->cache_cap) : NULL;
        if (ns && na) {
            /* Grow: rehash the entries, which keep their arena offsets. */
            s->cache_arena = na;
            s->cache_cap *= 2;
            s->cache_mask = 2 * slots - 1;
            for (uint32_t i = 0; i < slots; i++) {
                if (!s->cache[i].len) continue;
                uint32_t j = (uint32_t)s->cache[i].hash & s->cache_mask;
                while (ns[j].len) j = (j + 1) & s->cache_mask;
                ns[j] = s->cache[i];
            }
            free(s->cache);
            s->cache = ns;
        } else {
            /* Full at its largest: start over. Real text re-warms it within
             * a few kilobytes. */
            free(ns);
            memset(s->cache, 0, (size_t)slots * sizeof *s->cache);
            s->cache_used = 0;
            s->cache_count = 0;
        }
        c = cache_find(s, p, n, h);
    }
    memcpy(s->cache_arena + s->cache_used, p, n);
    memcpy(s->cache_arena + s->cache_used + n, ids, 4 * n_ids);
    c->hash = h;
    c->off = (uint32_t)s->cache_used;
    c->len = (uint16_t)n;
    c->n_ids = (uint16_t)n_ids;
    s->cache_used += need;
    s->cache_count++;
}

/* tiktoken's merge loop: repeatedly merge the adjacent pair whose joined
 * bytes have the lowest rank, the leftmost on ties. */
static int merge_small(anvil_tok_state *s, const unsigned char *p, size_t n) {
    const tok_map *m = &s->t->map;
    uint32_t start[SMALL_PIECE + 1], rank[SMALL_PIECE + 1], id[SMALL_PIECE + 1];
    size_t parts = n;
    for (size_t i = 0; i < n; i++) {
        start[i] = (uint32_t)i;
        id[i] = s->t->byte_rank[p[i]];
        rank[i] = i + 1 < n ? tok_map_get(m, p + i, 2) : TOK_NO_RANK;
    }
    start[n] = (uint32_t)n;
    while (parts > 1) {
        uint32_t best = TOK_NO_RANK;
        size_t bi = 0;
        for (size_t i = 0; i + 1 < parts; i++)
            if (rank[i] < best) best = rank[i], bi = i;
        if (best == TOK_NO_RANK) break;
        id[bi] = best;
        memmove(start + bi + 1, start + bi + 2, sizeof(uint32_t) * (parts - bi - 1));
        memmove(rank + bi + 1, rank + bi + 2, sizeof(uint32_t) * (parts - bi - 2));
        memmove(id + bi + 1, id + bi + 2, sizeof(uint32_t) * (parts - bi - 2));
        parts--;
        rank[bi] = bi + 1 < parts ? tok_map_get(m, p + start[bi], start[bi + 2] - start[bi]) : TOK_NO_RANK;
        if (bi > 0) rank[bi - 1] = tok_map_get(m, p + start[bi - 1], start[bi + 1] - start[bi - 1]);
    }
    for (size_t i = 0; i < parts; i++)
        if (emit(s, id[i])) return -1;
    return 0;
}

static void heap_push(uint64_t *h, uint32_t *span, size_t *n, uint64_t key, uint32_t sp) {
    size_t i = (*n)++;
    while (i) {
        size_t up = (i - 1) / 2;
        if (h[up] <= key) break;
        h[i] = h[up];
        span[i] = span[up];
        i = up;
    }
    h[i] = key;
    span[i] = sp;
}

static void heap_pop(uint64_t *h, uint32_t *span, size_t *n) {
    uint64_t key = h[--*n];
    uint32_t sp = span[*n];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= *n) break;
        if (c + 1 < *n && h[c + 1] < h[c]) c++;
        if (h[c] >= key) break;
        h[i] = h[c];
        span[i] = span[c];
        i = c;
    }
    h[i] = key;
    span[i] = sp;
}

/* The same merge order as merge_small, with a heap of candidate pairs.
 * Node i is the token starting at byte i; an entry is stale once either of
 * its two tokens has grown, which shows as a different pair span. */
static int merge_large(anvil_tok_state *s, const unsigned char *p, size_t n) {
    const tok_map *m = &s->t->map;
    if (n >= UINT32_MAX / 2) return anvil_fail("tokenizer: a %zu-byte piece is too long to merge", n);
    if (n + 1 > s->scratch_cap) {
        size_t c = n + 1;
        free(s->next), free(s->prev), free(s->heap), free(s->heap_span);
        s->next = malloc(c * sizeof *s->next);
        s->prev = malloc(c * sizeof *s->prev);
        s->heap = malloc(2 * c * sizeof *s->heap);
        s->heap_span = malloc(2 * c * sizeof *s->heap_span);
        s->scratch_cap = c;
        if (!s->next || !s->prev || !s->heap || !s->heap_span) {
            s->scratch_cap = 0;
            return anvil_fail("tokenizer: out of memory merging a %zu-byte piece", n);
        }
    }
    uint32_t *next = s->next, *prev = s->prev, *h_span = s->heap_span;
    uint64_t *heap = s->heap;
    size_t hn = 0;
    for (size_t i = 0; i < n; i++) {
        next[i] = (uint32_t)i + 1;
        prev[i] = (uint32_t)i - 1;
        if (i + 1 < n) {
            uint32_t r = tok_map_get(m, p + i, 2);
            if (r != TOK_NO_RANK) heap_push(heap, h_span, &hn, (uint64_t)r << 32 | i, 2);
        }
    }
    next[n] = (uint32_t)n;
    /* Keys are rank << 32 | start: the lowest rank, then the leftmost.
     * Each merge pushes at most two entries and pops at least one, and the
     * heap starts below n, so 2n entries always suffice. */
    while (hn) {
        uint64_t key = heap[0];
        uint32_t sp = h_span[0];
        heap_pop(heap, h_span, &hn);
        uint32_t i = (uint32_t)key, j = next[i];
        if (prev[i] == UINT32_MAX - 1 || j >= n || next[j] - i != sp) continue;
        next[i] = next[j];
        if (next[j] < n) prev[next[j]] = i;
        prev[j] = UINT32_MAX - 1; /* dead */
        if (next[i] < n) {
            uint32_t e = next[next[i]];
            uint32_t r = tok_map_get(m, p + i, e - i);
            if (r != TOK_NO_RANK) heap_push(heap, h_span, &hn, (uint64_t)r << 32 | i, e - i);
        }
        if (i > 0) {
            uint32_t a = prev[i];
            uint32_t r = tok_map_get(m, p + a, next[i] - a);
            if (r != TOK_NO_RANK) heap_push(heap, h_span, &hn, (uint64_t)r << 32 | a, next[i] - a);
        }
    }
    for (uint32_t i = 0; i < n; i = next[i])
        if (emit(s, tok_map_get(m, p + i, next[i] - i))) return -1;
    return 0;
}

static int encode_piece(const unsigned char *p, size_t n, void *ctx) {
    anvil_tok_state *s = ctx;
    const anvil_tok *t = s->t;
    if (n == 1) return emit(s, t->byte_rank[p[0]]);
    uint32_t whole = tok_map_get(&t->map, p, n);
    if (whole != TOK_NO_RANK) return emit(s, whole);
    if (n > CACHE_PIECE) return n <= SMALL_PIECE ? merge_small(s, p, n) : merge_large(s, p, n);
    uint64_t h = tok_hash(p, n);
    cache_slot *c = cache_find(s, p, n, h);
    if (c->len) {
        const unsigned char *ids = s->cache_arena + c->off + c->len;
        for (uint32_t k = 0; k < c->n_ids; k++) {
            int32_t id;
            memcpy(&id, ids + 4 * k, 4);
            if (emit(s, (uint32_t)id)) return -1;
        }
        return 0;
    }
    size_t first = s->n_out;
    if (merge_small(s, p, n)) return -1;
    cache_put(s, c, p, n, h, *s->ids + first, s->n_out - first);
    return 0;
}

/* The next special token at or after pos, or n; *which receives its index. */
static size_t find_special(const anvil_tok *t, const unsigned char *p, size_t n, size_t pos, int *which) {
    while (pos + 1 < n) {
        const unsigned char *c = memmem(p + pos, n - pos, "<|", 2);
        if (!c) break;
        size_t at = (size_t)(c - p);
        for (int k = 0; k < t->n_special; k++)
            if (n - at >= t->special_len[k] && !memcmp(c, t->special_str[k], t->special_len[k])) {
                *which = k;
                return at;
            }
        pos = at + 1;
    }
    return n;
}

int64_t anvil_tok_encode(const anvil_tok *t, anvil_tok_state *s, const void *bytes, size_t n,
                         enum anvil_tok_special special, int32_t **ids, size_t *cap) {
    anvil_tok_state *own = NULL;
    if (!s && !(s = own = anvil_tok_state_new(t))) return -1;
    s->ids = ids;
    s->cap = cap;
    s->n_out = 0;
    const unsigned char *p = bytes;
    int rc = 0;
    for (size_t pos = 0; pos < n && !rc;) {
        int k = 0;
        size_t at = special == ANVIL_TOK_SPECIAL_PLAIN ? n : find_special(t, p, n, pos, &k);
        if (at < n && special == ANVIL_TOK_SPECIAL_REFUSE) {
            rc = anvil_fail("tokenizer: special token %s at byte %zu is not allowed in the text", t->special_str[k],
                            at);
            break;
        }
        /* The text before a special is split on its own, as tiktoken does:
         * a lookahead never sees past it. */
        /* In blocks cut where no piece continues, so that one rare
         * character sends only its own block to the slower exact regex. */
        for (size_t b = pos; b < at && !rc;) {
            size_t e = at - b > 65536 ? b + tok_safe_cut(p + b, at - b, 65536) : at;
            const pcre2_code *re = tok_needs_u16(p + b, e - b) ? t->re : t->re_fast;
            rc = tok_split(re, s->md, p + b, e - b, encode_piece, s);
            b = e;
        }
        if (!rc && at < n) {
            rc = emit(s, (uint32_t)t->special_id[k]);
            at += t->special_len[k];
        }
        pos = at;
    }
    int64_t out = rc ? -1 : (int64_t)s->n_out;
    anvil_tok_state_free(own);
    return out;
}

int64_t anvil_tok_decode(const anvil_tok *t, const int32_t *ids, size_t n, unsigned char **out, size_t *cap) {
    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= t->n_ids || !t->tok_len[ids[i]])
            return anvil_fail("tokenizer: id %d at position %zu names no token (vocabulary of %d)", ids[i], i,
                              t->n_ids);
        total += t->tok_len[ids[i]];
    }
    if (total > *cap || !*out) {
        unsigned char *b = realloc(*out, total ? total : 1);
        if (!b) return anvil_fail("tokenizer: out of memory for %zu decoded bytes", total);
        *out = b;
        *cap = total ? total : 1;
    }
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        memcpy(*out + o, t->arena + t->tok_off[ids[i]], t->tok_len[ids[i]]);
        o += t->tok_len[ids[i]];
    }
    return (int64_t)o;
}
