/* A growable, NUL-terminated text: what the Slurm backend's batch scripts, the launcher's merged lines
 * and the Prometheus exposition are built in. Running out of memory is sticky: once a put failed, the
 * later ones do nothing and fail too, so a builder can put many pieces and check once (oom), or check
 * each put's result. */
#ifndef ANVIL_CORE_STRBUF_H
#define ANVIL_CORE_STRBUF_H

#include <stdbool.h>
#include <stddef.h>

#include "core/error.h"

typedef struct {
    char *s;    /* NULL until the first put; then always NUL-terminated */
    size_t len; /* bytes before the NUL */
    size_t cap;
    bool oom;
} anvil_strbuf;

/* Appends n bytes of s: 0, or -1 after anvil_fail("out of memory") (and every later put fails). */
int anvil_strbuf_put(anvil_strbuf *b, const char *s, size_t n);
int anvil_strbuf_puts(anvil_strbuf *b, const char *s);
int anvil_strbuf_putc(anvil_strbuf *b, char c);
/* Appends the formatted text, whatever its length. */
int anvil_strbuf_printf(anvil_strbuf *b, const char *fmt, ...) ANVIL_PRINTF(2, 3);
/* The text so far ("" before any put). */
const char *anvil_strbuf_text(const anvil_strbuf *b);
void anvil_strbuf_free(anvil_strbuf *b);

#endif
