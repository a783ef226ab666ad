#include "obs/httpd.h"

#include <arpa/inet.h>
#include <errno.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"

struct anvil_httpd {
    struct MHD_Daemon *d;
    anvil_http_handler fn;
    void *ctx;
};

void anvil_http_reply_text(anvil_http_reply *out, int status, const char *content_type, const char *text,
                           size_t len) {
    out->status = status;
    out->content_type = content_type;
    out->len = len;
    if ((out->body = malloc(len + 1))) {
        memcpy(out->body, text, len);
        out->body[len] = 0;
    }
}

static enum MHD_Result queue(struct MHD_Connection *c, anvil_http_reply *rep) {
    struct MHD_Response *r = MHD_create_response_from_buffer(rep->len, rep->body, MHD_RESPMEM_MUST_FREE);
    if (!r) {
        free(rep->body);
        return MHD_NO;
    }
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, rep->content_type);
    enum MHD_Result rc = MHD_queue_response(c, (unsigned)rep->status, r);
    MHD_destroy_response(r);
    return rc;
}

static enum MHD_Result handle(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                              const char *version, const char *upload, size_t *upload_size, void **state) {
    (void)version;
    (void)upload;
    anvil_httpd *h = cls;
    /* The first call only announces the request; answer on the second, once any body is past. */
    if (!*state) {
        *state = h;
        return MHD_YES;
    }
    if (*upload_size) {
        *upload_size = 0;
        return MHD_YES;
    }
    anvil_http_reply rep = {0};
    if (strcmp(method, "GET") && strcmp(method, "HEAD")) {
        static const char msg[] = "only GET\n";
        anvil_http_reply_text(&rep, 405, "text/plain; charset=utf-8", msg, sizeof msg - 1);
    } else {
        h->fn(h->ctx, url, &rep);
        if (!rep.body) {
            static const char msg[] = "internal error\n";
            anvil_http_reply_text(&rep, 500, "text/plain; charset=utf-8", msg, sizeof msg - 1);
        }
    }
    if (!rep.body) return MHD_NO;
    return queue(c, &rep);
}

anvil_httpd *anvil_httpd_start(const char *what, int port, anvil_http_handler fn, void *ctx) {
    anvil_httpd *h = calloc(1, sizeof *h);
    if (!h) {
        anvil_fail("%s: out of memory", what);
        return NULL;
    }
    h->fn = fn;
    h->ctx = ctx;
    struct sockaddr_in addr = {0};
    addr.sin_family = AF_INET;
    addr.sin_port = htons((uint16_t)port);
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    errno = 0;
    h->d = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL, (uint16_t)port, NULL, NULL, handle, h,
                            MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&addr, MHD_OPTION_CONNECTION_TIMEOUT, 30u,
                            MHD_OPTION_CONNECTION_LIMIT, 64u, MHD_OPTION_END);
    if (!h->d) {
        anvil_fail("%s: cannot listen on 127.0.0.1:%d: %s", what, port,
                   errno ? strerror(errno) : "libmicrohttpd failed");
        free(h);
        return NULL;
    }
    return h;
}

int anvil_httpd_port(const anvil_httpd *h) {
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(h->d, MHD_DAEMON_INFO_BIND_PORT);
    return info ? info->port : -1;
}

void anvil_httpd_stop(anvil_httpd *h) {
    if (!h) return;
    MHD_stop_daemon(h->d);
    free(h);
}
