#include "core/strbuf.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Room for n more bytes and the NUL: 0, or -1 after anvil_fail. */
static int reserve(anvil_strbuf *b, size_t n) {
    if (b->oom) return anvil_fail("out of memory");
    if (b->len + n + 1 <= b->cap) return 0;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + n + 1) cap *= 2;
    char *grown = realloc(b->s, cap);
    if (!grown) {
        b->oom = true;
        return anvil_fail("out of memory");
    }
    b->s = grown;
    b->cap = cap;
    return 0;
}

int anvil_strbuf_put(anvil_strbuf *b, const char *s, size_t n) {
    if (reserve(b, n)) return -1;
    if (n) memcpy(b->s + b->len, s, n);
    b->len += n;
    b->s[b->len] = 0;
    return 0;
}

int anvil_strbuf_puts(anvil_strbuf *b, const char *s) { return anvil_strbuf_put(b, s, strlen(s)); }

int anvil_strbuf_putc(anvil_strbuf *b, char c) { return anvil_strbuf_put(b, &c, 1); }

int anvil_strbuf_printf(anvil_strbuf *b, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0) return anvil_fail("cannot format '%s'", fmt);
    if (reserve(b, (size_t)n)) return -1;
    va_start(ap, fmt);
    vsnprintf(b->s + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
    return 0;
}

const char *anvil_strbuf_text(const anvil_strbuf *b) { return b->s ? b->s : ""; }

void anvil_strbuf_free(anvil_strbuf *b) {
    free(b->s);
    *b = (anvil_strbuf){0};
}
