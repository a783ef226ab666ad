/* A small read-only HTTP server on 127.0.0.1 (libmicrohttpd, its own
 * thread): each GET is answered by a callback, e.g. a trainer's /metrics
 * page. Anything but GET or HEAD is answered 405. */
#ifndef ANVIL_OBS_HTTPD_H
#define ANVIL_OBS_HTTPD_H

#include <stddef.h>

typedef struct anvil_httpd anvil_httpd;

/* What a handler answers: status, Content-Type (static), and a malloc'd body the server frees. */
typedef struct {
    int status;
    const char *content_type;
    char *body;
    size_t len;
} anvil_http_reply;

/* Called on the server's thread, one request at a time. path excludes the query. A handler that
 * leaves body NULL gets a 500 answered for it. */
typedef void (*anvil_http_handler)(void *ctx, const char *path, anvil_http_reply *out);

/* Listens on 127.0.0.1:port (0: a free port); NULL after anvil_fail naming what (e.g. "--metrics-port"). */
anvil_httpd *anvil_httpd_start(const char *what, int port, anvil_http_handler fn, void *ctx);
int anvil_httpd_port(const anvil_httpd *h);
/* Stops the thread, after any request in progress. NULL is fine. */
void anvil_httpd_stop(anvil_httpd *h);

/* A reply with a copy of text; out of memory leaves body NULL. */
void anvil_http_reply_text(anvil_http_reply *out, int status, const char *content_type, const char *text,
                           size_t len);

#endif
