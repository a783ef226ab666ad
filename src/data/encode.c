/* prep's units of work: the inputs cut into chunks of whole documents, and
 * a worker's encoding of one chunk into the tokens of each split. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "data/bytetok.h"
#include "data/prep_internal.h"

static char oom_msg[] = "out of memory";

static int append(chunk *c, int s, const int32_t *t, size_t n) {
    if ((size_t)c->ntok[s] + n > c->cap[s]) {
        size_t cap = c->cap[s] ? c->cap[s] : 4096;
        while (cap < (size_t)c->ntok[s] + n) cap *= 2;
        int32_t *nt = realloc(c->tok[s], cap * sizeof *nt);
        if (!nt) return -1;
        c->tok[s] = nt;
        c->cap[s] = cap;
    }
    memcpy(c->tok[s] + c->ntok[s], t, n * sizeof *t);
    c->ntok[s] += (int64_t)n;
    return 0;
}

source prep_chunk_view(const source *src, const chunk *c) {
    source v = src[c->src];
    v.data += c->start;
    v.len = c->end - c->start;
    return v;
}

static int add_bad(chunk *c, int64_t code) {
    if (c->nbad == c->badcap) {
        size_t cap = c->badcap ? c->badcap * 2 : 16;
        int64_t *nb = realloc(c->bad, cap * sizeof *nb);
        if (!nb) return -1;
        c->bad = nb;
        c->badcap = cap;
    }
    c->bad[c->nbad++] = code;
    return 0;
}

static int encode_doc(const anvil_prep_opts *o, const anvil_tok *tk, worker *w, chunk *c, const unsigned char *doc,
                      size_t len, const char **why) {
    int s = anvil_prep_is_val(anvil_fnv1a64(doc, len), o->val_fraction) ? VAL : TRAIN;
    c->docs[s]++;
    c->text_bytes[s] += (int64_t)len;
    if (!c->store[s]) return 0;
    int64_t n;
    if (tk) {
        n = anvil_tok_encode(tk, w->st, doc, len, ANVIL_TOK_SPECIAL_PLAIN, &w->ids, &w->cap);
        if (n < 0) {
            *why = anvil_errmsg();
            return -1;
        }
    } else {
        if (w->cap < len) {
            int32_t *ni = realloc(w->ids, len * sizeof *ni);
            if (!ni) return -1;
            w->ids = ni;
            w->cap = len;
        }
        anvil_bytetok_encode(doc, len, w->ids);
        n = (int64_t)len;
    }
    int32_t eot = tk ? anvil_tok_eot(tk) : ANVIL_BYTETOK_EOT;
    return append(c, s, &eot, 1) || append(c, s, w->ids, (size_t)n) ? -1 : 0;
}

void prep_encode_chunk(const anvil_prep_opts *o, const source *src, const anvil_tok *tk, worker *w, chunk *c) {
    source v = prep_chunk_view(src, c);
    size_t off = 0, len;
    const unsigned char *doc;
    int64_t line = c->first_line;
    while (prep_next_unit(&v, o, &off, &doc, &len, &line)) {
        const char *why = "out of memory";
        int rc = 0;
        if (o->jsonl_field) {
            void *hold;
            const char *d;
            size_t n;
            int kind = anvil_jsonl_field(doc, len, o->jsonl_field, &hold, &d, &n);
            if (kind == ANVIL_JSONL_DOC && n) rc = encode_doc(o, tk, w, c, (const unsigned char *)d, n, &why);
            else if (kind != ANVIL_JSONL_DOC && kind != ANVIL_JSONL_BLANK)
                rc = add_bad(c, 3 * line + (kind == ANVIL_JSONL_NO_FIELD) + 2 * (kind == ANVIL_JSONL_NUL));
            anvil_jsonl_release(hold);
        } else {
            rc = encode_doc(o, tk, w, c, doc, len, &why);
        }
        if (rc) {
            char msg[1024];
            if (o->jsonl_field)
                snprintf(msg, sizeof msg, "%s:%lld: cannot encode the document: %s", v.name, (long long)line, why);
            else
                snprintf(msg, sizeof msg, "%s: cannot encode the document at byte %zu: %s", v.name,
                         c->start + (size_t)(doc - v.data), why);
            c->err = strdup(msg);
            if (!c->err) c->err = oom_msg;
            return;
        }
    }
}

int prep_make_chunks(const anvil_prep_opts *o, const source *src, int nsrc, size_t unit, chunk **out, size_t *nout) {
    chunk *cs = NULL;
    size_t n = 0, cap = 0;
    for (int i = 0; i < nsrc; i++) {
        size_t off = 0, start = 0, len;
        const unsigned char *doc;
        int64_t line = 0, start_line = 0;
        while (off < src[i].len) {
            int more = prep_next_unit(&src[i], o, &off, &doc, &len, &line);
            if (more && off - start < unit && off < src[i].len) continue;
            if (!more && off == start) break;
            if (n == cap) {
                cap = cap ? cap * 2 : 64;
                chunk *nc = realloc(cs, cap * sizeof *nc);
                if (!nc) {
                    free(cs);
                    return anvil_fail("prep: out of memory after %zu chunks", n);
                }
                cs = nc;
            }
            memset(&cs[n], 0, sizeof cs[n]);
            cs[n].src = i;
            cs[n].start = start;
            cs[n].end = off;
            cs[n].first_line = start_line;
            n++;
            start = off;
            start_line = line;
        }
    }
    *out = cs;
    *nout = n;
    return 0;
}

void prep_release_chunk(chunk *c) {
    for (int s = 0; s < NSPLITS; s++) {
        free(c->tok[s]);
        c->tok[s] = NULL;
        c->ntok[s] = 0;
        c->cap[s] = 0;
    }
    free(c->bad);
    c->bad = NULL;
    c->nbad = c->badcap = 0;
    if (c->err != oom_msg) free(c->err);
    c->err = NULL;
}
