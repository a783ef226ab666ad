/* prep's units of work: the inputs cut into chunks of whole documents, and
 * a worker's encoding of one chunk into the tokens of each split. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "data/bytetok.h"
#include "data/prep_internal.h"

static char oom_msg[] = "out of memory";

int32_t anvil_data_doc_start(const anvil_tok *tk) {
    if (!tk) return ANVIL_BYTETOK_EOT;
    return anvil_tok_bos(tk) >= 0 ? anvil_tok_bos(tk) : anvil_tok_eot(tk);
}

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

span prep_chunk_view(const span *buf, const chunk *c) {
    span v = *buf;
    v.data += c->start - buf->base;
    v.len = (size_t)(c->end - c->start);
    v.end = 1;
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
    int32_t eot = tk ? anvil_tok_eot(tk) : ANVIL_BYTETOK_EOT, bos = tk ? anvil_tok_bos(tk) : -1;
    if (bos >= 0)
        return append(c, s, &bos, 1) || append(c, s, w->ids, (size_t)n) || append(c, s, &eot, 1) ? -1 : 0;
    return append(c, s, &eot, 1) || append(c, s, w->ids, (size_t)n) ? -1 : 0;
}

void prep_encode_chunk(const anvil_prep_opts *o, const span *buf, const anvil_tok *tk, worker *w, chunk *c) {
    span v = prep_chunk_view(buf, c);
    size_t off = 0, len;
    const unsigned char *doc;
    int64_t line = c->first_line;
    while (prep_next_unit(&v, o, &off, &doc, &len, &line) == PREP_UNIT) {
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
                snprintf(msg, sizeof msg, "%s: cannot encode the document at byte %llu: %s", v.name,
                         (unsigned long long)(c->start + (uint64_t)(doc - v.data)), why);
            c->err = strdup(msg);
            if (!c->err) c->err = oom_msg;
            return;
        }
    }
}

int prep_cut_chunk(const anvil_prep_opts *o, const span *v, size_t unit, cutter *cut, chunk *c) {
    for (;;) {
        if (!cut->unit_ended) {
            size_t off = (size_t)(cut->off - v->base), len;
            const unsigned char *doc;
            int got = prep_next_unit(v, o, &off, &doc, &len, &cut->line);
            cut->off = v->base + off;
            if (got == PREP_MORE) return PREP_MORE;
            if (got == PREP_TOO_LONG) {
                if (o->jsonl_field)
                    return anvil_fail("%s:%lld: the line is longer than --max-doc-bytes (%zu bytes)", v->name,
                                      (long long)cut->line + 1, o->max_doc_bytes);
                return anvil_fail("input %s: the document at byte %llu is longer than --max-doc-bytes (%zu bytes)%s",
                                  v->name, (unsigned long long)cut->off, o->max_doc_bytes,
                                  o->delimiter ? "" : "; without --delimiter each input is one document");
            }
            if (got == PREP_END) {
                if (cut->off == cut->start) return 0;
                break;
            }
            cut->unit_ended = 1;
        }
        /* A chunk also ends with its source, which may take another read to tell. */
        int at_end = cut->off == v->base + v->len;
        if (at_end && !v->end) return PREP_MORE;
        cut->unit_ended = 0;
        if (cut->off - cut->start >= unit || at_end) break;
    }
    memset(c, 0, sizeof *c);
    c->start = cut->start;
    c->end = cut->off;
    c->first_line = cut->start_line;
    cut->start = cut->off;
    cut->start_line = cut->line;
    return 1;
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
