/* What the S3 client reads and encodes: SigV4 percent-encoding, the AWS INI
 * files, and S3's XML answers (through expat). */
#include <ctype.h>
#include <errno.h>
#include <expat.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "s3/s3.h"

char *anvil_s3_encode(const char *s, int keep_slash) {
    static const char hex[] = "0123456789ABCDEF";
    size_t n = strlen(s);
    char *out = malloc(3 * n + 1), *o = out;
    if (!out) return NULL;
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (isalnum(*p) || *p == '-' || *p == '_' || *p == '.' || *p == '~' || (keep_slash && *p == '/')) {
            *o++ = (char)*p;
        } else {
            *o++ = '%';
            *o++ = hex[*p >> 4];
            *o++ = hex[*p & 15];
        }
    }
    *o = 0;
    return out;
}

/* Copies [b, e) trimmed of blanks into out (cap > 0). */
static void copy_trimmed(const char *b, const char *e, char *out, size_t cap) {
    while (b < e && isspace((unsigned char)*b)) b++;
    while (e > b && isspace((unsigned char)e[-1])) e--;
    size_t n = (size_t)(e - b) < cap - 1 ? (size_t)(e - b) : cap - 1;
    memcpy(out, b, n);
    out[n] = 0;
}

int anvil_s3_ini_get(const char *text, size_t len, const char *section, const char *key, char *out, size_t cap) {
    const char *p = text, *end = text + len;
    int in_section = 0;
    char name[256];
    while (p < end) {
        const char *eol = memchr(p, '\n', (size_t)(end - p));
        if (!eol) eol = end;
        const char *b = p;
        while (b < eol && isspace((unsigned char)*b)) b++;
        if (b < eol && *b == '[') {
            const char *close = memchr(b, ']', (size_t)(eol - b));
            if (close) {
                copy_trimmed(b + 1, close, name, sizeof name);
                in_section = !strcmp(name, section);
            }
        } else if (in_section && b < eol && *b != '#' && *b != ';') {
            const char *eq = memchr(b, '=', (size_t)(eol - b));
            if (eq) {
                copy_trimmed(b, eq, name, sizeof name);
                if (!strcmp(name, key)) {
                    if (cap) copy_trimmed(eq + 1, eol, out, cap);
                    return 1;
                }
            }
        }
        p = eol + 1;
    }
    return 0;
}

/* expat collects the text of the elements at the paths the caller asks for;
 * `on_end` sees each element's path ("ListBucketResult/Contents/Key") and
 * text as it closes. Text over MAX_TEXT bytes makes the document malformed:
 * S3 keys are at most 1024 bytes. */
#define MAX_TEXT 4096
#define MAX_PATH 256
typedef struct xml_walk {
    XML_Parser parser;
    char path[MAX_PATH];
    size_t path_len, depth_over; /* depth_over: elements open beyond what path holds */
    char text[MAX_TEXT];
    size_t text_len;
    int failed;
    int (*on_end)(struct xml_walk *w, const char *path, const char *text, size_t len);
    void *ctx;
} xml_walk;

static void XMLCALL xml_start(void *ud, const XML_Char *name, const XML_Char **attrs) {
    (void)attrs;
    xml_walk *w = ud;
    size_t n = strlen(name);
    w->text_len = 0;
    if (w->depth_over || w->path_len + n + 2 > MAX_PATH) {
        w->depth_over++;
        return;
    }
    if (w->path_len) w->path[w->path_len++] = '/';
    memcpy(w->path + w->path_len, name, n + 1);
    w->path_len += n;
}

static void XMLCALL xml_end(void *ud, const XML_Char *name) {
    (void)name;
    xml_walk *w = ud;
    if (w->depth_over) {
        w->depth_over--;
        return;
    }
    w->text[w->text_len] = 0;
    if (!w->failed && w->on_end(w, w->path, w->text, w->text_len)) {
        w->failed = 1;
        XML_StopParser(w->parser, XML_FALSE);
    }
    w->text_len = 0;
    char *slash = strrchr(w->path, '/');
    w->path_len = slash ? (size_t)(slash - w->path) : 0;
    w->path[w->path_len] = 0;
}

static void XMLCALL xml_text(void *ud, const XML_Char *s, int len) {
    xml_walk *w = ud;
    if (w->text_len + (size_t)len >= MAX_TEXT) {
        if (!w->failed) anvil_fail("S3 answer: an element's text is longer than %d bytes", MAX_TEXT);
        w->failed = 1;
        XML_StopParser(w->parser, XML_FALSE);
        return;
    }
    memcpy(w->text + w->text_len, s, (size_t)len);
    w->text_len += (size_t)len;
}

/* Parses xml with w->on_end; -1 after anvil_fail on malformed XML or a failing on_end. */
static int xml_run(xml_walk *w, const char *xml, size_t len, const char *what) {
    w->parser = XML_ParserCreate("UTF-8");
    if (!w->parser) return anvil_fail("%s: out of memory", what);
    w->path[0] = 0;
    w->path_len = w->depth_over = w->text_len = 0;
    w->failed = 0;
    XML_SetUserData(w->parser, w);
    XML_SetElementHandler(w->parser, xml_start, xml_end);
    XML_SetCharacterDataHandler(w->parser, xml_text);
    int rc = 0;
    if (len > (size_t)INT32_MAX) rc = anvil_fail("%s: answer of %zu bytes is too large", what, len);
    else if (XML_Parse(w->parser, xml, (int)len, XML_TRUE) == XML_STATUS_ERROR && !w->failed)
        rc = anvil_fail("%s: malformed XML at line %lu, column %lu: %s", what,
                        (unsigned long)XML_GetCurrentLineNumber(w->parser),
                        (unsigned long)XML_GetCurrentColumnNumber(w->parser),
                        XML_ErrorString(XML_GetErrorCode(w->parser)));
    else if (w->failed)
        rc = -1;
    XML_ParserFree(w->parser);
    return rc;
}

typedef struct {
    char *code, *msg;
    size_t code_cap, msg_cap;
    int found;
} error_ctx;

static int error_end(xml_walk *w, const char *path, const char *text, size_t len) {
    (void)len;
    error_ctx *c = w->ctx;
    if (!strcmp(path, "Error/Code")) {
        copy_trimmed(text, text + strlen(text), c->code, c->code_cap);
        c->found = 1;
    } else if (!strcmp(path, "Error/Message") && c->msg_cap) {
        copy_trimmed(text, text + strlen(text), c->msg, c->msg_cap);
    }
    return 0;
}

int anvil_s3_parse_error(const char *xml, size_t len, char *code, size_t code_cap, char *msg, size_t msg_cap) {
    if (!code_cap) return -1;
    error_ctx c = {code, msg, code_cap, msg_cap, 0};
    code[0] = 0;
    if (msg_cap) msg[0] = 0;
    xml_walk w = {.on_end = error_end, .ctx = &c};
    if (xml_run(&w, xml, len, "S3 error answer") || !c.found) return -1;
    return 0;
}

static int upload_id_end(xml_walk *w, const char *path, const char *text, size_t len) {
    char **id = w->ctx;
    if (strcmp(path, "InitiateMultipartUploadResult/UploadId")) return 0;
    if (*id || !len) return anvil_fail("S3 multipart answer: %s UploadId", *id ? "a second" : "an empty");
    if (!(*id = strdup(text))) return anvil_fail("S3 multipart answer: out of memory");
    return 0;
}

int anvil_s3_parse_upload_id(const char *xml, size_t len, char **upload_id) {
    *upload_id = NULL;
    xml_walk w = {.on_end = upload_id_end, .ctx = upload_id};
    if (xml_run(&w, xml, len, "S3 multipart answer")) {
        free(*upload_id);
        *upload_id = NULL;
        return -1;
    }
    if (!*upload_id) return anvil_fail("S3 multipart answer: no InitiateMultipartUploadResult/UploadId");
    return 0;
}

typedef struct {
    anvil_s3_list_page *page;
    size_t cap;
    char *key; /* of the Contents element being read */
    uint64_t size;
    int have_size;
} list_ctx;

static int list_end(xml_walk *w, const char *path, const char *text, size_t len) {
    list_ctx *c = w->ctx;
    anvil_s3_list_page *pg = c->page;
    if (!strcmp(path, "ListBucketResult/Contents/Key")) {
        free(c->key);
        if (!(c->key = strdup(text))) return anvil_fail("S3 list answer: out of memory");
    } else if (!strcmp(path, "ListBucketResult/Contents/Size")) {
        char *e;
        errno = 0;
        unsigned long long v = strtoull(text, &e, 10);
        if (!len || !isdigit((unsigned char)text[0]) || *e || errno)
            return anvil_fail("S3 list answer: Size '%.40s' is not a byte count", text);
        c->size = v;
        c->have_size = 1;
    } else if (!strcmp(path, "ListBucketResult/Contents")) {
        if (!c->key || !c->have_size) return anvil_fail("S3 list answer: a Contents without its Key or Size");
        if (anvil_s3_list_page_add(pg, &c->cap, c->key, c->size)) return -1;
        c->key = NULL;
        c->have_size = 0;
    } else if (!strcmp(path, "ListBucketResult/IsTruncated")) {
        pg->truncated = !strcmp(text, "true");
    } else if (!strcmp(path, "ListBucketResult/NextContinuationToken") && len) {
        free(pg->next_token);
        if (!(pg->next_token = strdup(text))) return anvil_fail("S3 list answer: out of memory");
    }
    return 0;
}

int anvil_s3_parse_list(const char *xml, size_t len, anvil_s3_list_page *page) {
    memset(page, 0, sizeof *page);
    list_ctx c = {.page = page};
    xml_walk w = {.on_end = list_end, .ctx = &c};
    int rc = xml_run(&w, xml, len, "S3 list answer");
    free(c.key);
    if (!rc && page->truncated && !page->next_token)
        rc = anvil_fail("S3 list answer: IsTruncated without a NextContinuationToken");
    if (!rc && !page->truncated) {
        free(page->next_token);
        page->next_token = NULL;
    }
    if (rc) anvil_s3_list_page_free(page);
    return rc;
}

int anvil_s3_list_page_add(anvil_s3_list_page *page, size_t *cap, char *key, uint64_t size) {
    if (page->n == *cap) {
        size_t c = *cap ? 2 * *cap : 64;
        anvil_s3_object *o = realloc(page->objects, c * sizeof *o);
        if (!o) return anvil_fail("S3 list: out of memory");
        page->objects = o;
        *cap = c;
    }
    page->objects[page->n].key = key;
    page->objects[page->n++].size = size;
    return 0;
}

void anvil_s3_list_page_free(anvil_s3_list_page *page) {
    for (size_t i = 0; i < page->n; i++) free(page->objects[i].key);
    free(page->objects);
    free(page->next_token);
    memset(page, 0, sizeof *page);
}
