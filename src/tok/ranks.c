/* The .tiktoken rank-file parser and the byte-string map behind it. */
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "tok/tok_internal.h"

int tok_map_init(tok_map *m, uint32_t expected) {
    uint32_t cap = 64;
    while (cap < 2 * (uint64_t)expected + 16) cap *= 2;
    m->slots = calloc(cap, sizeof *m->slots);
    if (!m->slots) return anvil_fail("tokenizer: out of memory for a map of %u tokens", expected);
    m->mask = cap - 1;
    m->count = 0;
    return 0;
}

uint32_t tok_map_put(tok_map *m, uint32_t id) {
    const unsigned char *p = m->arena + m->tok_off[id];
    uint32_t n = m->tok_len[id];
    uint64_t h = tok_hash(p, n);
    uint32_t tag = (uint32_t)(h >> 32);
    uint32_t i = (uint32_t)h & m->mask;
    for (;; i = (i + 1) & m->mask) {
        uint64_t s = m->slots[i];
        if (!s) break;
        if ((uint32_t)(s >> 32) == tag) {
            uint32_t other = (uint32_t)s - 1;
            if (m->tok_len[other] == n && !memcmp(m->arena + m->tok_off[other], p, n)) return other;
        }
    }
    m->slots[i] = (uint64_t)tag << 32 | (id + 1);
    m->count++;
    return TOK_NO_RANK;
}

static int b64_val(unsigned char c) {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
}

/* Strict standard base64 with padding: returns the decoded length, or -1
 * with *why set. out has room for 3*n/4 bytes. */
static long b64_decode(const char *s, size_t n, unsigned char *out, const char **why) {
    if (n == 0) {
        *why = "empty token";
        return -1;
    }
    if (n % 4) {
        *why = "base64 length is not a multiple of 4";
        return -1;
    }
    long o = 0;
    for (size_t i = 0; i < n; i += 4) {
        int v[4], pad = 0;
        for (int k = 0; k < 4; k++) {
            unsigned char c = (unsigned char)s[i + k];
            if (c == '=' && i + 4 == n && k >= 2) {
                v[k] = 0;
                pad++;
                continue;
            }
            if (pad || (v[k] = b64_val(c)) < 0) {
                *why = "invalid base64 character";
                return -1;
            }
        }
        uint32_t w = (uint32_t)v[0] << 18 | (uint32_t)v[1] << 12 | (uint32_t)v[2] << 6 | (uint32_t)v[3];
        if ((pad == 2 && (w & 0xFFFF)) || (pad == 1 && (w & 0xFF))) {
            *why = "non-canonical base64 padding bits";
            return -1;
        }
        out[o++] = (unsigned char)(w >> 16);
        if (pad < 2) out[o++] = (unsigned char)(w >> 8);
        if (pad < 1) out[o++] = (unsigned char)w;
    }
    return o;
}

int tok_parse_ranks(anvil_tok *t, const char *data, size_t n, const char *name) {
    /* First pass: count lines and find the highest rank, so the per-id
     * arrays are allocated once. */
    size_t lines = 0;
    for (size_t i = 0; i < n; i++)
        if (data[i] == '\n') lines++;
    lines++;
    unsigned char *arena = malloc(n ? n : 1); /* decoded bytes never exceed the text */
    uint32_t *rank_of = malloc(sizeof(uint32_t) * lines), *off_of = malloc(sizeof(uint32_t) * lines),
             *len_of = malloc(sizeof(uint32_t) * lines), *line_of = malloc(sizeof(uint32_t) * lines);
    if (!arena || !rank_of || !off_of || !len_of || !line_of) {
        free(arena), free(rank_of), free(off_of), free(len_of), free(line_of);
        return anvil_fail("%s: out of memory reading the rank file", name);
    }
    size_t count = 0, used = 0, line = 0;
    uint32_t max_rank = 0;
    const char *why = NULL;
    for (size_t pos = 0; pos < n;) {
        line++;
        const char *ls = data + pos;
        const char *nl = memchr(ls, '\n', n - pos);
        size_t len = nl ? (size_t)(nl - ls) : n - pos;
        pos += len + (nl != NULL);
        if (len && ls[len - 1] == '\r') len--;
        if (len == 0) continue;
        const char *sp = memchr(ls, ' ', len);
        if (!sp) {
            why = "expected '<base64 token> <rank>'";
            break;
        }
        size_t tl = (size_t)(sp - ls), rl = len - tl - 1;
        if (rl == 0) {
            why = "missing rank";
            break;
        }
        uint32_t r = 0;
        for (size_t k = 0; k < rl; k++) {
            unsigned char c = (unsigned char)sp[1 + k];
            if (c < '0' || c > '9') {
                why = "rank is not a decimal number";
                break;
            }
            r = r * 10 + (c - '0');
            if (r > TOK_MAX_ID) r = TOK_MAX_ID;
        }
        if (why) break;
        if (r >= TOK_MAX_ID) {
            why = "rank is out of range (at most 16777215)";
            break;
        }
        long bl = b64_decode(ls, tl, arena + used, &why);
        if (bl < 0) break;
        rank_of[count] = r;
        off_of[count] = (uint32_t)used;
        len_of[count] = (uint32_t)bl;
        line_of[count] = (uint32_t)line;
        used += (size_t)bl;
        count++;
        if (r > max_rank) max_rank = r;
    }
    if (!why && count == 0) why = "no tokens";
    if (why) {
        free(arena), free(rank_of), free(off_of), free(len_of), free(line_of);
        return anvil_fail("%s:%zu: %s", name, line, why);
    }
    t->n_ids = (int32_t)max_rank + 1;
    t->arena = arena;
    t->arena_used = used;
    t->tok_off = calloc((size_t)t->n_ids + 1, sizeof(uint32_t));
    t->tok_len = calloc((size_t)t->n_ids + 1, sizeof(uint32_t));
    int rc = 0;
    if (!t->tok_off || !t->tok_len || tok_map_init(&t->map, (uint32_t)count)) {
        rc = anvil_fail("%s: out of memory for %zu tokens", name, count);
        goto done;
    }
    t->map.arena = arena;
    t->map.tok_off = t->tok_off;
    t->map.tok_len = t->tok_len;
    for (size_t i = 0; i < count && !rc; i++) {
        uint32_t r = rank_of[i];
        const char *dup = NULL;
        if (t->tok_len[r]) dup = "duplicate rank";
        else {
            t->tok_off[r] = off_of[i];
            t->tok_len[r] = len_of[i];
            if (tok_map_put(&t->map, r) != TOK_NO_RANK) dup = "duplicate token";
        }
        if (dup) rc = anvil_fail("%s:%u: %s %u", name, line_of[i], dup, r);
    }
    for (int b = 0; b < 256 && !rc; b++) {
        unsigned char c = (unsigned char)b;
        t->byte_rank[b] = tok_map_get(&t->map, &c, 1);
        if (t->byte_rank[b] == TOK_NO_RANK)
            rc = anvil_fail("%s: no token for the single byte 0x%02x (a byte-level vocabulary needs all 256)", name, b);
    }
done:
    free(rank_of), free(off_of), free(len_of), free(line_of);
    return rc;
}
