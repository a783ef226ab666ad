/* BPE training over unique pre-tokenized words.
 *
 * The corpus is split with the encoding's regex into words, counted once
 * (in parallel over chunks cut where no regex piece continues).
 * Merging then works on the unique words only: each pair keeps its total
 * count and the words it occurs in, a lazy max-heap yields the next pair,
 * and a merge touches only the words that contain it, re-counting just
 * their pairs. Nothing is ever recounted over the whole corpus. */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/fsutil.h"
#include "tok/tok_internal.h"

/* ---- unique words with their counts ---- */

typedef struct {
    uint64_t *slots; /* hash tag << 32 | word index + 1 */
    uint32_t mask;
    uint32_t n;
    uint64_t *off;  /* per word: offset of its bytes */
    uint32_t *len;
    int64_t *freq;
    unsigned char *bytes;
    size_t used, cap;
    uint32_t wcap;
    int oom;
} wordmap;

static int wm_init(wordmap *m) {
    memset(m, 0, sizeof *m);
    m->mask = (1u << 16) - 1;
    m->slots = calloc(m->mask + 1, sizeof *m->slots);
    m->cap = 1 << 20;
    m->bytes = malloc(m->cap);
    m->wcap = 1 << 15;
    m->off = malloc(m->wcap * sizeof *m->off);
    m->len = malloc(m->wcap * sizeof *m->len);
    m->freq = malloc(m->wcap * sizeof *m->freq);
    return m->slots && m->bytes && m->off && m->len && m->freq ? 0 : -1;
}

static void wm_free(wordmap *m) {
    free(m->slots), free(m->bytes), free(m->off), free(m->len), free(m->freq);
}

static int wm_grow(wordmap *m) {
    uint32_t nmask = m->mask * 2 + 1;
    uint64_t *ns = calloc((size_t)nmask + 1, sizeof *ns);
    if (!ns) return -1;
    for (uint32_t i = 0; i <= m->mask; i++) {
        uint64_t s = m->slots[i];
        if (!s) continue;
        uint32_t w = (uint32_t)s - 1;
        uint64_t h = tok_hash(m->bytes + m->off[w], m->len[w]);
        uint32_t j = (uint32_t)h & nmask;
        while (ns[j]) j = (j + 1) & nmask;
        ns[j] = s;
    }
    free(m->slots);
    m->slots = ns;
    m->mask = nmask;
    return 0;
}

static int wm_add(wordmap *m, const unsigned char *p, size_t n, int64_t freq) {
    if (m->oom) return -1;
    uint64_t h = tok_hash(p, n);
    uint32_t tag = (uint32_t)(h >> 32), i = (uint32_t)h & m->mask;
    for (;; i = (i + 1) & m->mask) {
        uint64_t s = m->slots[i];
        if (!s) break;
        uint32_t w = (uint32_t)s - 1;
        if ((uint32_t)(s >> 32) == tag && m->len[w] == n && !memcmp(m->bytes + m->off[w], p, n)) {
            m->freq[w] += freq;
            return 0;
        }
    }
    if (m->n == m->wcap) {
        uint32_t nc = m->wcap * 2;
        uint64_t *o = realloc(m->off, nc * sizeof *o);
        if (o) m->off = o;
        uint32_t *l = realloc(m->len, nc * sizeof *l);
        if (l) m->len = l;
        int64_t *f = realloc(m->freq, nc * sizeof *f);
        if (f) m->freq = f;
        if (!o || !l || !f) return m->oom = -1;
        m->wcap = nc;
    }
    while (m->used + n > m->cap) {
        unsigned char *b = realloc(m->bytes, m->cap * 2);
        if (!b) return m->oom = -1;
        m->bytes = b;
        m->cap *= 2;
    }
    memcpy(m->bytes + m->used, p, n);
    uint32_t w = m->n++;
    m->off[w] = m->used;
    m->len[w] = (uint32_t)n;
    m->freq[w] = freq;
    m->used += n;
    m->slots[i] = (uint64_t)tag << 32 | (w + 1);
    if (2 * (uint64_t)m->n > m->mask && wm_grow(m)) return m->oom = -1;
    return 0;
}

static int wm_piece(const unsigned char *p, size_t n, void *ctx) { return wm_add(ctx, p, n, 1); }

/* Splits one text (documents separated by the encoding's end-of-text special, eot) into m. */
static int count_text(pcre2_code *const re[2], pcre2_match_data *md, const char *eot, const unsigned char *p,
                      size_t n, wordmap *m) {
    const size_t el = strlen(eot);
    while (n) {
        const unsigned char *e = memmem(p, n, eot, el);
        size_t seg = e ? (size_t)(e - p) : n;
        if (tok_split(re[!tok_needs_u16(p, seg)], md, p, seg, wm_piece, m)) return -1;
        if (!e) break;
        p += seg + el;
        n -= seg + el;
    }
    return 0;
}

/* ---- pairs ---- */

typedef struct {
    uint32_t a, b;
    int64_t count;
    int64_t heap_count; /* the highest count among its heap entries (0: none live) */
    uint32_t *where;    /* words that contained the pair when it was counted */
    uint32_t n_where, cap_where;
    int dirty;
} pair_t;

typedef struct {
    int64_t count;
    uint32_t a, b, pair;
} heap_ent;

/* Every adjacent pair of the words with its count and the words it occurs
 * in, found by hash, and a max-heap by count that yields the next merge. */
typedef struct {
    pair_t *pairs;
    uint32_t n_pairs, cap_pairs;
    uint32_t *slots; /* pair index + 1 */
    uint32_t mask;
    heap_ent *heap;
    size_t n_heap, cap_heap;
    uint32_t *dirty;
    size_t n_dirty, cap_dirty;
} pair_counts;

static uint64_t pair_hash(uint32_t a, uint32_t b) {
    uint64_t h = ((uint64_t)a << 32 | b) * 0x9E3779B97F4A7C15ull;
    return h ^ (h >> 29);
}

static int grow_array(void **p, size_t *cap, size_t need, size_t elem) {
    if (need <= *cap) return 0;
    size_t nc = *cap ? *cap : 64;
    while (nc < need) nc *= 2;
    void *q = realloc(*p, nc * elem);
    if (!q) return -1;
    *p = q;
    *cap = nc;
    return 0;
}

/* The index of pair (a, b), created with count 0 when new; UINT32_MAX on OOM. */
static uint32_t pair_get(pair_counts *pc, uint32_t a, uint32_t b) {
    uint32_t i = (uint32_t)pair_hash(a, b) & pc->mask;
    for (;; i = (i + 1) & pc->mask) {
        uint32_t s = pc->slots[i];
        if (!s) break;
        if (pc->pairs[s - 1].a == a && pc->pairs[s - 1].b == b) return s - 1;
    }
    if (pc->n_pairs == pc->cap_pairs) {
        size_t cap = pc->cap_pairs;
        if (grow_array((void **)&pc->pairs, &cap, (size_t)pc->n_pairs + 1, sizeof(pair_t))) return UINT32_MAX;
        pc->cap_pairs = (uint32_t)cap;
    }
    uint32_t p = pc->n_pairs++;
    pc->pairs[p] = (pair_t){.a = a, .b = b};
    pc->slots[i] = p + 1;
    if (2 * (uint64_t)pc->n_pairs > pc->mask) {
        uint32_t nmask = pc->mask * 2 + 1;
        uint32_t *ns = calloc((size_t)nmask + 1, sizeof *ns);
        if (!ns) return UINT32_MAX;
        for (uint32_t k = 0; k < pc->n_pairs; k++) {
            uint32_t j = (uint32_t)pair_hash(pc->pairs[k].a, pc->pairs[k].b) & nmask;
            while (ns[j]) j = (j + 1) & nmask;
            ns[j] = k + 1;
        }
        free(pc->slots);
        pc->slots = ns;
        pc->mask = nmask;
    }
    return p;
}

static int pair_add(pair_counts *pc, uint32_t a, uint32_t b, int64_t delta, uint32_t word, int note_word) {
    uint32_t p = pair_get(pc, a, b);
    if (p == UINT32_MAX) return -1;
    pair_t *q = &pc->pairs[p];
    q->count += delta;
    if (note_word && (!q->n_where || q->where[q->n_where - 1] != word)) {
        size_t cap = q->cap_where;
        if (grow_array((void **)&q->where, &cap, (size_t)q->n_where + 1, sizeof(uint32_t))) return -1;
        q->cap_where = (uint32_t)cap;
        q->where[q->n_where++] = word;
    }
    if (!q->dirty) {
        q->dirty = 1;
        if (grow_array((void **)&pc->dirty, &pc->cap_dirty, pc->n_dirty + 1, sizeof(uint32_t))) return -1;
        pc->dirty[pc->n_dirty++] = p;
    }
    return 0;
}

/* Higher count first; ties to the lower left id, then the lower right id. */
static int heap_before(const heap_ent *x, const heap_ent *y) {
    if (x->count != y->count) return x->count > y->count;
    if (x->a != y->a) return x->a < y->a;
    return x->b < y->b;
}

static int heap_push(pair_counts *pc, uint32_t p) {
    if (grow_array((void **)&pc->heap, &pc->cap_heap, pc->n_heap + 1, sizeof(heap_ent))) return -1;
    heap_ent e = {pc->pairs[p].count, pc->pairs[p].a, pc->pairs[p].b, p};
    pc->pairs[p].heap_count = e.count;
    size_t i = pc->n_heap++;
    while (i) {
        size_t up = (i - 1) / 2;
        if (!heap_before(&e, &pc->heap[up])) break;
        pc->heap[i] = pc->heap[up];
        i = up;
    }
    pc->heap[i] = e;
    return 0;
}

static heap_ent heap_pop(pair_counts *pc) {
    heap_ent top = pc->heap[0], e = pc->heap[--pc->n_heap];
    size_t i = 0, n = pc->n_heap;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && heap_before(&pc->heap[c + 1], &pc->heap[c])) c++;
        if (!heap_before(&pc->heap[c], &e)) break;
        pc->heap[i] = pc->heap[c];
        i = c;
    }
    if (n) pc->heap[i] = e;
    return top;
}

/* Pushes every pair whose count grew past its heap entries. Decreases are
 * left lazy: an entry above its pair's count is re-pushed when it surfaces
 * (merge loop), so the heap holds about one entry per live pair instead of
 * one per change. */
static int flush_dirty(pair_counts *pc) {
    for (size_t k = 0; k < pc->n_dirty; k++) {
        pair_t *q = &pc->pairs[pc->dirty[k]];
        q->dirty = 0;
        if (q->count > q->heap_count && heap_push(pc, pc->dirty[k])) return -1;
    }
    pc->n_dirty = 0;
    return 0;
}

static int cmp_u32(const void *x, const void *y) {
    uint32_t a = *(const uint32_t *)x, b = *(const uint32_t *)y;
    return (a > b) - (a < b);
}

/* ---- the .tiktoken writer ---- */

static const char b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

static void put_b64(FILE *f, const unsigned char *p, size_t n) {
    for (size_t i = 0; i < n; i += 3) {
        uint32_t w = (uint32_t)p[i] << 16 | (i + 1 < n ? (uint32_t)p[i + 1] << 8 : 0) | (i + 2 < n ? p[i + 2] : 0);
        fputc(b64[w >> 18 & 63], f);
        fputc(b64[w >> 12 & 63], f);
        fputc(i + 1 < n ? b64[w >> 6 & 63] : '=', f);
        fputc(i + 2 < n ? b64[w & 63] : '=', f);
    }
}

static int write_ranks(const char *path, const unsigned char *arena, const uint32_t *off, const uint32_t *len,
                       uint32_t n) {
    char *text = NULL;
    size_t bytes = 0;
    FILE *f = open_memstream(&text, &bytes);
    if (!f) return anvil_fail("%s: out of memory", path);
    for (uint32_t i = 0; i < n; i++) {
        put_b64(f, arena + off[i], len[i]);
        fprintf(f, " %u\n", i);
    }
    int rc = fclose(f) ? anvil_fail("%s: out of memory", path) : anvil_write_file_atomic(path, text, bytes);
    free(text);
    return rc;
}

/* ---- training ---- */

typedef struct {
    const unsigned char *p;
    size_t n;
} chunk_t;

/* 1. Unique words, counted per thread, then combined in thread order. */
static int count_words(const anvil_tok_train_opts *o, const chunk_t *chunks, size_t n_chunks, wordmap *words) {
    const tok_encoding *enc = tok_find_encoding(o->pattern_name ? o->pattern_name : "gpt2");
    if (!enc) return -1;
    pcre2_code *re[2] = {tok_compile_regex(enc, 0), NULL};
    if (!re[0] || !(re[1] = tok_compile_regex(enc, 1))) {
        if (re[0]) pcre2_code_free(re[0]);
        return -1;
    }
    char eot[TOK_SPECIAL_CAP];
    tok_follow_name(enc, enc->follow_eot, eot);
    int nt = o->threads > 0 ? o->threads : omp_get_max_threads();
    if (nt < 1) nt = 1;
    wordmap *maps = calloc((size_t)nt, sizeof *maps);
    int rc = maps ? 0 : anvil_fail("tokenizer train: out of memory");
    for (int k = 0; k < nt && !rc; k++)
        if (wm_init(&maps[k])) rc = anvil_fail("tokenizer train: out of memory");
    if (!rc) {
        int failed = 0;
#pragma omp parallel num_threads(nt) reduction(| : failed)
        {
            int me = omp_get_thread_num();
            pcre2_match_data *md = pcre2_match_data_create_from_pattern(re[0], NULL);
            if (!md) failed = 1;
            /* Dynamic chunks, but each thread's words go to its own map. */
#pragma omp for schedule(dynamic, 1)
            for (size_t c = 0; c < n_chunks; c++)
                if (!failed && count_text(re, md, eot, chunks[c].p, chunks[c].n, &maps[me])) failed = 1;
            if (md) pcre2_match_data_free(md);
        }
        if (failed) rc = anvil_fail("tokenizer train: out of memory counting words");
        for (int k = 1; k < nt && !rc; k++) {
            for (uint32_t w = 0; w < maps[k].n && !rc; w++)
                if (wm_add(&maps[0], maps[k].bytes + maps[k].off[w], maps[k].len[w], maps[k].freq[w]))
                    rc = anvil_fail("tokenizer train: out of memory counting words");
            wm_free(&maps[k]);
            memset(&maps[k], 0, sizeof maps[k]);
        }
    }
    pcre2_code_free(re[0]);
    pcre2_code_free(re[1]);
    if (rc) {
        for (int k = 0; maps && k < nt; k++) wm_free(&maps[k]);
    } else {
        *words = maps[0];
    }
    free(maps);
    return rc;
}

/* The unique words, each a run of token ids in sym that merges rewrite in
 * place (len shrinks), with the word's count in the corpus. */
typedef struct {
    uint32_t n;
    uint32_t *start, *len;
    int64_t *freq;
    uint32_t *sym;
} word_list;

typedef struct {
    const unsigned char *p;
    uint32_t n, w;
} word_key;

static int cmp_key(const void *x, const void *y) {
    const word_key *a = x, *b = y;
    int c = memcmp(a->p, b->p, a->n < b->n ? a->n : b->n);
    return c ? c : (a->n > b->n) - (a->n < b->n);
}

/* The map's order depends on the thread schedule; sorting the words by
 * their bytes makes everything after this point deterministic. */
static int sort_words(const wordmap *m, word_list *wl) {
    uint32_t nw = m->n;
    if (m->used >= UINT32_MAX)
        return anvil_fail("tokenizer train: the unique words take %zu bytes, more than 4 GB", m->used);
    wl->n = nw;
    wl->start = malloc(sizeof(uint32_t) * ((size_t)nw + 1));
    wl->len = malloc(sizeof(uint32_t) * (nw ? nw : 1));
    wl->freq = malloc(sizeof(int64_t) * (nw ? nw : 1));
    wl->sym = malloc(sizeof(uint32_t) * (m->used ? m->used : 1));
    if (!wl->start || !wl->len || !wl->freq || !wl->sym)
        return anvil_fail("tokenizer train: out of memory for %u words", nw);
    word_key *keys = malloc(sizeof(word_key) * (nw ? nw : 1));
    if (!keys) return anvil_fail("tokenizer train: out of memory sorting words");
    for (uint32_t w = 0; w < nw; w++) keys[w] = (word_key){m->bytes + m->off[w], m->len[w], w};
    qsort(keys, nw, sizeof(word_key), cmp_key);
    size_t pos = 0;
    for (uint32_t i = 0; i < nw; i++) {
        uint32_t w = keys[i].w;
        wl->start[i] = (uint32_t)pos;
        wl->len[i] = m->len[w];
        wl->freq[i] = m->freq[w];
        for (uint32_t k = 0; k < m->len[w]; k++) wl->sym[pos++] = m->bytes[m->off[w] + k];
    }
    free(keys);
    return 0;
}

/* The tokens learned so far: ids 0..n-1, their bytes in an arena, and a map
 * that finds a merge re-creating an existing token. */
typedef struct {
    uint32_t n;
    unsigned char *arena;
    size_t used, cap;
    uint32_t *off, *len;
    tok_map map;
} vocab;

/* 2. The 256 byte tokens, then pair counts over all words. */
static int seed(uint32_t max_tokens, const word_list *wl, vocab *v, pair_counts *pc) {
    pc->mask = (1u << 16) - 1;
    pc->slots = calloc(pc->mask + 1, sizeof *pc->slots);
    v->off = malloc(sizeof(uint32_t) * max_tokens);
    v->len = malloc(sizeof(uint32_t) * max_tokens);
    if (!pc->slots || !v->off || !v->len || tok_map_init(&v->map, max_tokens) ||
        grow_array((void **)&v->arena, &v->cap, 1 << 16, 1))
        return anvil_fail("tokenizer train: out of memory for %u words", wl->n);
    for (uint32_t b = 0; b < 256; b++) {
        v->arena[b] = (unsigned char)b;
        v->off[b] = b;
        v->len[b] = 1;
    }
    v->n = 256;
    v->used = 256;
    v->map.arena = v->arena;
    v->map.tok_off = v->off;
    v->map.tok_len = v->len;
    for (uint32_t b = 0; b < 256; b++) tok_map_put(&v->map, b);
    for (uint32_t i = 0; i < wl->n; i++)
        for (uint32_t k = 0; k + 1 < wl->len[i]; k++)
            if (pair_add(pc, wl->sym[wl->start[i] + k], wl->sym[wl->start[i] + k + 1], wl->freq[i], i, 1))
                return anvil_fail("tokenizer train: out of memory counting pairs");
    return flush_dirty(pc) ? anvil_fail("tokenizer train: out of memory") : 0;
}

/* The id of the token a followed by b: a new one, or the one those bytes
 * already form; UINT32_MAX when out of memory. */
static uint32_t add_token(vocab *v, uint32_t a, uint32_t b) {
    size_t nl = v->len[a] + v->len[b];
    if (grow_array((void **)&v->arena, &v->cap, v->used + nl, 1) || v->used + nl > UINT32_MAX) return UINT32_MAX;
    memcpy(v->arena + v->used, v->arena + v->off[a], v->len[a]);
    memcpy(v->arena + v->used + v->len[a], v->arena + v->off[b], v->len[b]);
    v->map.arena = v->arena;
    uint32_t probe = v->n;
    v->off[probe] = (uint32_t)v->used;
    v->len[probe] = (uint32_t)nl;
    uint32_t existing = tok_map_put(&v->map, probe);
    if (existing != TOK_NO_RANK) return existing;
    v->used += nl;
    return v->n++;
}

/* Rewrites (a, b) as t in each word of `where` (sorted here, duplicates
 * skipped) that still holds the pair, moving the counts of its pairs. */
static int merge_in_words(pair_counts *pc, word_list *wl, uint32_t *where, uint32_t n_where, uint32_t a, uint32_t b,
                          uint32_t t) {
    qsort(where, n_where, sizeof(uint32_t), cmp_u32);
    for (uint32_t k = 0; k < n_where; k++) {
        uint32_t w = where[k];
        if (k && where[k - 1] == w) continue;
        uint32_t *s = wl->sym + wl->start[w], L = wl->len[w];
        int has = 0;
        for (uint32_t j = 0; j + 1 < L; j++)
            if (s[j] == a && s[j + 1] == b) {
                has = 1;
                break;
            }
        if (!has) continue;
        int64_t f = wl->freq[w];
        for (uint32_t j = 0; j + 1 < L; j++)
            if (pair_add(pc, s[j], s[j + 1], -f, w, 0)) return -1;
        uint32_t o2 = 0;
        for (uint32_t j = 0; j < L;) {
            if (j + 1 < L && s[j] == a && s[j + 1] == b) {
                s[o2++] = t;
                j += 2;
            } else {
                s[o2++] = s[j++];
            }
        }
        wl->len[w] = L = o2;
        for (uint32_t j = 0; j + 1 < L; j++)
            if (pair_add(pc, s[j], s[j + 1], f, w, s[j] == t || s[j + 1] == t)) return -1;
    }
    return 0;
}

/* 3. Merges the most frequent pair until there are max_tokens tokens or no
 * pair is left. */
static int merge_pairs(const anvil_tok_train_opts *o, uint32_t max_tokens, word_list *wl, vocab *v,
                       pair_counts *pc) {
    int merges_total = (int)max_tokens - 256, merges_done = 0;
    while (v->n < max_tokens && pc->n_heap) {
        heap_ent top = heap_pop(pc);
        pair_t *q = &pc->pairs[top.pair];
        if (top.count != q->count) {
            /* Stale: a higher entry of this pair was already handled, or
             * the count fell since; then queue the current count. */
            if (top.count > q->count && top.count == q->heap_count) {
                q->heap_count = 0;
                if (q->count > 0 && heap_push(pc, top.pair)) return anvil_fail("tokenizer train: out of memory");
            }
            continue;
        }
        q->heap_count = 0;
        uint32_t a = q->a, b = q->b;
        uint32_t t = add_token(v, a, b);
        if (t == UINT32_MAX) return anvil_fail("tokenizer train: out of memory for token bytes");
        /* Take the pair's word list: after this merge it has no occurrences. */
        uint32_t *where = q->where, n_where = q->n_where;
        q->where = NULL;
        q->n_where = q->cap_where = 0;
        int rc = merge_in_words(pc, wl, where, n_where, a, b, t);
        free(where);
        if (rc || flush_dirty(pc)) return anvil_fail("tokenizer train: out of memory merging");
        merges_done++;
        if (o->progress) o->progress(o->progress_ctx, merges_done, merges_total, top.count);
    }
    return 0;
}

static int train_chunks(const anvil_tok_train_opts *o, const chunk_t *chunks, size_t n_chunks) {
    const tok_encoding *enc = tok_find_encoding(o->pattern_name ? o->pattern_name : "gpt2");
    if (!enc) return -1;
    if (o->vocab_size < 256 + enc->n_follow || o->vocab_size > TOK_MAX_ID)
        return anvil_fail("tokenizer train: vocab size %d is outside [%d, %d] (the 256 bytes and %s's %d special%s)",
                          o->vocab_size, 256 + enc->n_follow, TOK_MAX_ID, enc->name, enc->n_follow,
                          enc->n_follow > 1 ? "s" : "");
    wordmap counted;
    if (count_words(o, chunks, n_chunks, &counted)) return -1;
    uint32_t max_tokens = (uint32_t)(o->vocab_size - enc->n_follow);
    word_list wl = {0};
    vocab v = {0};
    pair_counts pc = {0};
    int rc = sort_words(&counted, &wl);
    wm_free(&counted);
    if (!rc) rc = seed(max_tokens, &wl, &v, &pc);
    if (!rc) rc = merge_pairs(o, max_tokens, &wl, &v, &pc);
    if (!rc) rc = write_ranks(o->out_path, v.arena, v.off, v.len, v.n);
    if (!rc) rc = (int)v.n;
    for (uint32_t p = 0; p < pc.n_pairs; p++) free(pc.pairs[p].where);
    free(pc.pairs), free(pc.slots), free(pc.heap), free(pc.dirty);
    free(wl.start), free(wl.len), free(wl.freq), free(wl.sym);
    free(v.arena), free(v.off), free(v.len), free(v.map.slots);
    return rc;
}

/* Cuts a text into chunks of about 1 MB at points where no regex piece can
 * continue (tok_safe_cut). */
static int add_chunks(const unsigned char *p, size_t n, chunk_t **chunks, size_t *nc, size_t *cc) {
    for (size_t start = 0; start < n;) {
        size_t end = n - start > (1 << 20) ? start + tok_safe_cut(p + start, n - start, 1 << 20) : n;
        if (grow_array((void **)chunks, cc, *nc + 1, sizeof(chunk_t))) return -1;
        (*chunks)[(*nc)++] = (chunk_t){p + start, end - start};
        start = end;
    }
    return 0;
}

int anvil_tok_train_mem(const anvil_tok_train_opts *o, const char *const *texts, const size_t *lens, int n_texts) {
    chunk_t *chunks = NULL;
    size_t nc = 0, cc = 0;
    for (int i = 0; i < n_texts; i++)
        if (add_chunks((const unsigned char *)texts[i], lens[i], &chunks, &nc, &cc)) {
            free(chunks);
            return anvil_fail("tokenizer train: out of memory");
        }
    int rc = train_chunks(o, chunks, nc);
    free(chunks);
    return rc;
}

int anvil_tok_train_ranks(const char *pattern_name, int vocab_size) {
    const tok_encoding *enc = tok_find_encoding(pattern_name ? pattern_name : "gpt2");
    return enc ? vocab_size - enc->n_follow : -1;
}

int anvil_tok_train(const anvil_tok_train_opts *o) {
    char **texts = calloc((size_t)(o->n_files > 0 ? o->n_files : 1), sizeof *texts);
    size_t *lens = calloc((size_t)(o->n_files > 0 ? o->n_files : 1), sizeof *lens);
    int rc = texts && lens ? 0 : anvil_fail("tokenizer train: out of memory");
    for (int i = 0; i < o->n_files && !rc; i++) {
        char *buf = NULL;
        size_t n = 0;
        if (anvil_read_file(o->files[i], &buf, &n)) {
            rc = -1;
            break;
        }
        texts[i] = buf;
        lens[i] = n;
    }
    if (!rc) rc = anvil_tok_train_mem(o, (const char *const *)texts, lens, o->n_files);
    for (int i = 0; texts && i < o->n_files; i++) free(texts[i]);
    free(texts);
    free(lens);
    return rc;
}
