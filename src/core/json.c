#include "core/json.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"

static pthread_mutex_t parse_lock = PTHREAD_MUTEX_INITIALIZER;

/* Where the check is: the field's name (keys joined by '.', array places as [N]) and what is wrong. */
typedef struct {
    const char *text, *p, *end;
    char path[256];
    size_t plen;
    const char *why;
    size_t at;
} lexer;

/* Appends a key's raw text to the path, with bytes outside printable ASCII shown as \xHH so that
 * the message is valid UTF-8 whatever the key holds. */
static void path_push_key(lexer *l, const char *key, size_t n) {
    size_t len = l->plen;
    if (len && len < sizeof l->path - 1) l->path[len++] = '.';
    for (size_t i = 0; i < n && len + 5 < sizeof l->path; i++) {
        unsigned char c = (unsigned char)key[i];
        if (c >= 0x20 && c < 0x7f) l->path[len++] = (char)c;
        else len += (size_t)snprintf(l->path + len, sizeof l->path - len, "\\x%02x", c);
    }
    l->path[len] = 0;
}

static void path_push_index(lexer *l, int i) {
    size_t len = l->plen;
    if (len + 16 < sizeof l->path) snprintf(l->path + len, sizeof l->path - len, "[%d]", i);
}

static bool fail(lexer *l, const char *at, const char *why) {
    l->why = why;
    l->at = (size_t)(at - l->text);
    return false;
}

/* The length of the UTF-8 sequence at p (RFC 3629: no overlong forms, no surrogates, at most
 * U+10FFFF), or 0 when it is not one. */
static size_t utf8_len(const unsigned char *p, const unsigned char *end) {
    unsigned char c = p[0];
    size_t n = c >= 0xf5 ? 0 : c >= 0xf0 ? 4 : c >= 0xe0 ? 3 : c >= 0xc2 ? 2 : 0;
    if (!n || (size_t)(end - p) < n) return 0;
    for (size_t i = 1; i < n; i++)
        if ((p[i] & 0xc0) != 0x80) return 0;
    if (n == 3 && ((c == 0xe0 && p[1] < 0xa0) || (c == 0xed && p[1] >= 0xa0))) return 0;
    if (n == 4 && ((c == 0xf0 && p[1] < 0x90) || (c == 0xf4 && p[1] >= 0x90))) return 0;
    return n;
}

/* A string at l->p (its opening quote), which the parser accepted: no raw control character, no
 * \u0000 (a C string would end there and drop the rest unseen), valid UTF-8. */
static bool lex_string(lexer *l) {
    const unsigned char *p = (const unsigned char *)l->p + 1, *end = (const unsigned char *)l->end;
    while (p < end && *p != '"') {
        if (*p == '\\') {
            if (p + 5 < end && p[1] == 'u' && !memcmp(p + 2, "0000", 4))
                return fail(l, (const char *)p, "a string may not hold \\u0000 (NUL)");
            p += 2;
        } else if (*p < 0x20) {
            return fail(l, (const char *)p, "a string may not hold a raw control character");
        } else if (*p < 0x80) {
            p++;
        } else {
            size_t n = utf8_len(p, end);
            if (!n) return fail(l, (const char *)p, "not valid UTF-8");
            p += n;
        }
    }
    l->p = (const char *)p + 1;
    return true;
}

/* JSON's whitespace: space, tab, line feed, carriage return. cJSON skips every byte up to 32, NUL
 * included, between tokens; the others are refused where the next token is looked for. */
static bool space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

static void skip_space(lexer *l) {
    while (l->p < l->end && space(*l->p)) l->p++;
}

static bool lex_value(lexer *l);

/* An object or array at l->p; each member's value is checked under its name. */
static bool lex_container(lexer *l) {
    bool object = *l->p == '{';
    char close = object ? '}' : ']';
    size_t base = l->plen;
    l->p++;
    for (int i = 0;; i++) {
        const char *at = l->p;
        skip_space(l);
        if (l->p >= l->end || *l->p == close) break;
        if ((unsigned char)*l->p < 0x20) return fail(l, l->p, "a control character between tokens");
        if (object) {
            /* The key is named whatever is wrong with it, so its end is found first. */
            const char *key = l->p + 1, *q = key;
            while (q < l->end && *q != '"') q += *q == '\\' ? 2 : 1;
            path_push_key(l, key, (size_t)((q < l->end ? q : l->end) - key));
            if (!lex_string(l)) return false;
            skip_space(l);
            l->p++; /* the ':' */
        } else {
            path_push_index(l, i);
        }
        l->plen = strlen(l->path);
        bool good = lex_value(l);
        if (!good) return false;
        l->plen = base;
        l->path[base] = 0;
        skip_space(l);
        if (l->p < l->end && (unsigned char)*l->p < 0x20)
            return fail(l, l->p, "a control character between tokens");
        if (l->p < l->end && *l->p == ',') l->p++;
        /* The parser accepted the text, so each member moves on; a text it read otherwise stops here. */
        if (l->p == at) return fail(l, l->p, "unexpected text");
    }
    l->p++;
    return true;
}

static bool lex_value(lexer *l) {
    skip_space(l);
    if (l->p >= l->end) return true;
    if ((unsigned char)*l->p < 0x20) return fail(l, l->p, "a control character between tokens");
    if (*l->p == '"') return lex_string(l);
    if (*l->p == '{' || *l->p == '[') return lex_container(l);
    while (l->p < l->end && (unsigned char)*l->p > 0x20 && *l->p != ',' && *l->p != ']' && *l->p != '}') l->p++;
    return true;
}

static int by_key(const void *a, const void *b) {
    return strcmp((*(const cJSON *const *)a)->string, (*(const cJSON *const *)b)->string);
}

/* The first key given twice in an object anywhere under v, its name in path; false when none. */
static bool duplicate(const cJSON *v, char *path, size_t cap) {
    size_t base = strlen(path);
    int n = 0;
    for (const cJSON *e = v->child; e; e = e->next) n++;
    if (cJSON_IsObject(v) && n > 1) {
        const cJSON **keys = malloc((size_t)n * sizeof *keys);
        if (keys) {
            int k = 0;
            for (const cJSON *e = v->child; e; e = e->next) keys[k++] = e;
            qsort(keys, (size_t)n, sizeof *keys, by_key);
            for (k = 1; k < n && strcmp(keys[k - 1]->string, keys[k]->string); k++) continue;
            if (k < n) snprintf(path + base, cap - base, "%s%.100s", base ? "." : "", keys[k]->string);
            free(keys);
            if (k < n) return true;
        }
    }
    int i = 0;
    for (const cJSON *e = v->child; e; e = e->next, i++) {
        if (cJSON_IsObject(v)) snprintf(path + base, cap - base, "%s%.100s", base ? "." : "", e->string);
        else snprintf(path + base, cap - base, "[%d]", i);
        if ((e->child || cJSON_IsObject(e)) && duplicate(e, path, cap)) return true;
        path[base] = 0;
    }
    return false;
}

/* The rules cJSON does not keep, over the text it accepted up to end; 0, or -1 after anvil_fail
 * naming the field. */
static int strict(const char *text, const char *end, const cJSON *root) {
    lexer l = {.text = text, .p = text, .end = end};
    if (!lex_value(&l))
        return anvil_fail("%s%s%s (byte %zu)", l.path[0] ? l.path : "", l.path[0] ? ": " : "", l.why, l.at);
    char path[512] = "";
    /* cJSON keeps both copies of a repeated key, and a lookup finds the first: a reader and a
     * checker could see different values. */
    if (duplicate(root, path, sizeof path)) return anvil_fail("%s: given twice", path);
    return 0;
}

void anvil_utf8_sanitize(char *s) {
    const unsigned char *end = (const unsigned char *)s + strlen(s);
    for (unsigned char *p = (unsigned char *)s; *p;) {
        size_t n = *p < 0x80 ? 1 : utf8_len(p, end);
        if (!n) *p = '?';
        p += n ? n : 1;
    }
}

cJSON *anvil_json_parse(const char *text, size_t len, const char **end) {
    const char *stop = NULL;
    pthread_mutex_lock(&parse_lock);
    cJSON *j = cJSON_ParseWithLengthOpts(text, len, &stop, 0);
    pthread_mutex_unlock(&parse_lock);
    if (end) *end = stop;
    if (!j) {
        anvil_fail("malformed JSON near byte %zu", stop && stop >= text ? (size_t)(stop - text) : (size_t)0);
        return NULL;
    }
    if (strict(text, stop, j)) {
        cJSON_Delete(j);
        return NULL;
    }
    return j;
}

cJSON *anvil_json_parse_str(const char *text) { return text ? anvil_json_parse(text, strlen(text) + 1, NULL) : NULL; }
