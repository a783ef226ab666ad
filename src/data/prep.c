#include "data/prep.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <omp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>
#include <zstd.h>

#include "core/error.h"
#include "core/fsutil.h"
#include "data/bytetok.h"
#include "data/shard.h"
#include "tok/tokenizer.h"

uint64_t anvil_fnv1a64(const void *data, size_t n) {
    const unsigned char *p = data;
    uint64_t h = 14695981039346656037ull;
    for (size_t i = 0; i < n; i++) {
        h ^= p[i];
        h *= 1099511628211ull;
    }
    return h;
}

int anvil_prep_is_val(uint64_t hash, double val_fraction) {
    uint64_t cut = (uint64_t)(val_fraction * 1e6 + 0.5);
    return hash % 1000000u < cut;
}

static void note(const anvil_prep_opts *o, const char *fmt, ...) ANVIL_PRINTF(2, 3);
static void note(const anvil_prep_opts *o, const char *fmt, ...) {
    if (!o->note) return;
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    o->note(o->note_ctx, msg);
}

/* ---- inputs ---- */

typedef struct {
    const char *name;
    const unsigned char *data;
    size_t len;
    int mapped;
    int64_t docs;
} source;

static int read_fd_all(int fd, const char *name, source *s) {
    char *buf;
    size_t len;
    if (anvil_read_fd(fd, name, &buf, &len)) return -1;
    s->data = (const unsigned char *)buf;
    s->len = len;
    return 0;
}

static int ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && !strcmp(s + n - k, suffix);
}

static int grow(unsigned char **buf, size_t *cap, size_t len, const char *name) {
    if (len < *cap) return 0;
    size_t ncap = *cap ? *cap * 2 : 1 << 20;
    unsigned char *nb = realloc(*buf, ncap);
    if (!nb) return anvil_fail("input %s: out of memory after %zu decompressed bytes", name, len);
    *buf = nb;
    *cap = ncap;
    return 0;
}

/* gzread also passes through a file that is not gzip at all; concatenated
 * members are read in sequence. */
static int load_gz(const char *path, source *s) {
    gzFile g = gzopen(path, "rb");
    if (!g) return anvil_fail("input %s: cannot open: %s", path, strerror(errno ? errno : ENOMEM));
    unsigned char *buf = NULL;
    size_t len = 0, cap = 0;
    int rc = 0;
    for (;;) {
        if ((rc = grow(&buf, &cap, len, path))) break;
        size_t want = cap - len < (1u << 30) ? cap - len : (1u << 30);
        int got = gzread(g, buf + len, (unsigned)want);
        int zerr = Z_OK;
        const char *msg = got <= 0 ? gzerror(g, &zerr) : NULL;
        /* A truncated stream ends with 0 bytes and Z_BUF_ERROR, not -1. */
        if (got < 0 || zerr != Z_OK) {
            rc = anvil_fail("input %s: gzip error after %zu decompressed bytes: %s", path, len,
                            zerr == Z_ERRNO ? strerror(errno) : msg);
            break;
        }
        if (got == 0) break;
        len += (size_t)got;
    }
    gzclose(g);
    if (rc) {
        free(buf);
        return rc;
    }
    s->data = buf;
    s->len = len;
    return 0;
}

static int load_zst(const char *path, source *s) {
    source raw;
    memset(&raw, 0, sizeof raw);
    raw.name = path;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return anvil_fail("input %s: cannot open: %s", path, strerror(errno));
    int rc = read_fd_all(fd, path, &raw);
    close(fd);
    if (rc) return rc;
    ZSTD_DCtx *dc = ZSTD_createDCtx();
    unsigned char *buf = NULL;
    size_t len = 0, cap = 0, ret = 0;
    ZSTD_inBuffer in = {raw.data, raw.len, 0};
    if (!dc) rc = anvil_fail("input %s: out of memory for zstd", path);
    while (!rc && (in.pos < in.size || ret != 0)) {
        if ((rc = grow(&buf, &cap, len, path))) break;
        ZSTD_outBuffer out = {buf, cap, len};
        size_t before = in.pos;
        ret = ZSTD_decompressStream(dc, &out, &in);
        if (ZSTD_isError(ret)) {
            rc = anvil_fail("input %s: zstd error at compressed byte %zu: %s", path, in.pos, ZSTD_getErrorName(ret));
            break;
        }
        if (in.pos == before && out.pos == len && in.pos == in.size)
            rc = anvil_fail("input %s: zstd data truncated at compressed byte %zu", path, in.pos);
        len = out.pos;
    }
    ZSTD_freeDCtx(dc);
    free((void *)raw.data);
    if (rc) {
        free(buf);
        return rc;
    }
    s->data = buf;
    s->len = len;
    return 0;
}

/* Regular files are mapped rather than read, so a corpus larger than memory
 * only costs page cache. */
static int load_source(const char *path, source *s) {
    memset(s, 0, sizeof *s);
    s->name = strcmp(path, "-") ? path : "<stdin>";
    if (!strcmp(path, "-")) return read_fd_all(0, s->name, s);
    /* Compressed inputs are decompressed into memory whole. */
    if (ends_with(path, ".gz")) return load_gz(path, s);
    if (ends_with(path, ".zst")) return load_zst(path, s);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return anvil_fail("input %s: cannot open: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return anvil_fail("input %s: cannot stat: %s", path, strerror(e));
    }
    int rc = 0;
    if (S_ISDIR(st.st_mode)) {
        rc = anvil_fail("input %s: is a folder, not a file", path);
    } else if (S_ISREG(st.st_mode)) {
        if (st.st_size > 0) {
            void *p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
            if (p == MAP_FAILED) {
                rc = anvil_fail("input %s: cannot map: %s", path, strerror(errno));
            } else {
                madvise(p, (size_t)st.st_size, MADV_SEQUENTIAL);
                s->data = p;
                s->len = (size_t)st.st_size;
                s->mapped = 1;
            }
        }
    } else {
        rc = read_fd_all(fd, path, s); /* a pipe or device: /dev/stdin, <(...) */
    }
    close(fd);
    return rc;
}

static void free_source(source *s) {
    if (s->mapped) munmap((void *)s->data, s->len);
    else free((void *)s->data);
}

/* Yields the next non-empty document of s from *off on; 0 at the end. */
static int next_doc(const source *s, const anvil_prep_opts *o, size_t *off, const unsigned char **doc, size_t *len) {
    while (*off < s->len) {
        const unsigned char *start = s->data + *off;
        size_t rest = s->len - *off;
        const unsigned char *hit = o->delimiter ? memmem(start, rest, o->delimiter, o->delimiter_len) : NULL;
        size_t n = hit ? (size_t)(hit - start) : rest;
        *off += n + (hit ? o->delimiter_len : 0);
        if (n) {
            *doc = start;
            *len = n;
            return 1;
        }
    }
    return 0;
}

/* Like next_doc, but a JSON-lines input yields every line (blank ones too,
 * without its newline) and counts them in *line. */
static int next_unit(const source *s, const anvil_prep_opts *o, size_t *off, const unsigned char **doc, size_t *len,
                     int64_t *line) {
    if (!o->jsonl_field) return next_doc(s, o, off, doc, len);
    if (*off >= s->len) return 0;
    const unsigned char *start = s->data + *off, *nl = memchr(start, '\n', s->len - *off);
    size_t n = nl ? (size_t)(nl - start) : s->len - *off;
    *off += n + (nl != NULL);
    (*line)++;
    *doc = start;
    *len = n;
    return 1;
}

/* ---- output ---- */

enum { TRAIN, VAL, NSPLITS };
static const char *const split_name[NSPLITS] = {"train", "val"};

typedef struct {
    int64_t tokens; /* in the whole split */
    int64_t nshards, next_shard;
    int64_t shard_left; /* tokens still to go into the open shard */
    anvil_shard_writer *w;
    int version;
    char path[4096];
} split_out;

typedef struct {
    cJSON *shards;
    const char *dir;
} manifest_ctx;

/* Shard i of a split with `tokens` tokens over `n` shards: sizes differ by at most one. */
static int64_t shard_size(int64_t tokens, int64_t n, int64_t i) { return tokens / n + (i < tokens % n); }

static int emit(split_out *so, int split, const int32_t *tok, int64_t n, manifest_ctx *m) {
    while (n > 0) {
        if (!so->w) {
            snprintf(so->path, sizeof so->path, "%s/%s_%06lld.bin", m->dir, split_name[split], (long long)so->next_shard);
            so->shard_left = shard_size(so->tokens, so->nshards, so->next_shard);
            so->w = anvil_shard_writer_open(so->path, so->version);
            if (!so->w) return -1;
        }
        int64_t k = n < so->shard_left ? n : so->shard_left;
        if (anvil_shard_writer_append(so->w, tok, k)) return -1;
        tok += k;
        n -= k;
        so->shard_left -= k;
        if (so->shard_left == 0) {
            int64_t size = shard_size(so->tokens, so->nshards, so->next_shard);
            anvil_shard_writer *w = so->w;
            so->w = NULL;
            if (anvil_shard_writer_commit(w)) return -1;
            cJSON *e = cJSON_CreateObject();
            const char *base = strrchr(so->path, '/') + 1;
            if (!e || !cJSON_AddStringToObject(e, "file", base) ||
                !cJSON_AddStringToObject(e, "split", split_name[split]) ||
                !cJSON_AddNumberToObject(e, "tokens", (double)size) || !cJSON_AddItemToArray(m->shards, e)) {
                cJSON_Delete(e);
                return anvil_fail("%s: out of memory building the manifest", so->path);
            }
            so->next_shard++;
        }
    }
    return 0;
}

static int mkdir_p(const char *dir) {
    char buf[4096];
    if (snprintf(buf, sizeof buf, "%s", dir) >= (int)sizeof buf) return anvil_fail("--out %s: path too long", dir);
    for (char *p = buf + 1;; p++) {
        if (*p == '/' || *p == 0) {
            char c = *p;
            *p = 0;
            if (mkdir(buf, 0755) != 0 && errno != EEXIST)
                return anvil_fail("--out %s: cannot create %s: %s", dir, buf, strerror(errno));
            *p = c;
            if (!c) break;
        }
    }
    struct stat st;
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) return anvil_fail("--out %s: exists and is not a folder", dir);
    return 0;
}

/* Parses "<split>_NNNNNN.bin" (exactly six digits); -1 when name is not a shard of split. */
static long shard_index(const char *name, const char *split) {
    size_t k = strlen(split);
    if (strncmp(name, split, k) || name[k] != '_') return -1;
    const char *d = name + k + 1;
    for (int i = 0; i < 6; i++)
        if (d[i] < '0' || d[i] > '9') return -1;
    if (strcmp(d + 6, ".bin")) return -1;
    return strtol(d, NULL, 10);
}

static int remove_stale(const anvil_prep_opts *o, const split_out *so) {
    DIR *d = opendir(o->out_dir);
    if (!d) return anvil_fail("--out %s: cannot list: %s", o->out_dir, strerror(errno));
    struct dirent *e;
    int rc = 0;
    while ((e = readdir(d))) {
        for (int s = 0; s < NSPLITS; s++) {
            long idx = shard_index(e->d_name, split_name[s]);
            if (idx < 0 || idx < so[s].nshards) continue;
            char path[4096];
            snprintf(path, sizeof path, "%s/%s", o->out_dir, e->d_name);
            if (unlink(path) != 0) rc = anvil_fail("%s: cannot remove stale shard: %s", path, strerror(errno));
            else note(o, "removed stale shard %s from an earlier run", path);
        }
    }
    closedir(d);
    return rc;
}

static int write_manifest(const anvil_prep_opts *o, cJSON *shards, const source *src, int nsrc, const anvil_tok *tk) {
    char path[4096];
    snprintf(path, sizeof path, "%s/manifest.json", o->out_dir);
    cJSON *root = cJSON_CreateObject();
    cJSON *sources = cJSON_CreateArray();
    int ok = root && sources;
    int vocab = tk ? anvil_tok_vocab_size(tk) : ANVIL_BYTETOK_VOCAB;
    if (ok && tk) {
        cJSON *t = cJSON_AddObjectToObject(root, "tokenizer");
        ok = t && cJSON_AddStringToObject(t, "file", o->tokenizer_file) &&
             cJSON_AddStringToObject(t, "pattern", anvil_tok_pattern_name(tk));
    } else if (ok) {
        ok = cJSON_AddStringToObject(root, "tokenizer", "bytes") != NULL;
    }
    ok = ok && cJSON_AddNumberToObject(root, "vocab_size", vocab);
    ok = ok && cJSON_AddNumberToObject(root, "eot", tk ? anvil_tok_eot(tk) : ANVIL_BYTETOK_EOT);
    ok = ok && cJSON_AddNumberToObject(root, "shard_version", anvil_shard_version_for_vocab(vocab));
    ok = ok && cJSON_AddNumberToObject(root, "val_fraction", o->val_fraction);
    if (ok && o->delimiter) {
        /* cJSON stops at a NUL; a delimiter holding one is recorded up to it. */
        char *delim = strndup(o->delimiter, o->delimiter_len);
        ok = delim && cJSON_AddStringToObject(root, "delimiter", delim);
        free(delim);
    } else if (ok) {
        ok = cJSON_AddNullToObject(root, "delimiter") != NULL;
    }
    if (ok && o->jsonl_field) ok = cJSON_AddStringToObject(root, "jsonl_field", o->jsonl_field) != NULL;
    ok = ok && cJSON_AddItemReferenceToObject(root, "shards", shards);
    for (int i = 0; ok && i < nsrc; i++) {
        if (!src[i].len) continue;
        cJSON *e = cJSON_CreateObject();
        ok = e && cJSON_AddStringToObject(e, "path", src[i].name) &&
             cJSON_AddNumberToObject(e, "bytes", (double)src[i].len) &&
             cJSON_AddNumberToObject(e, "documents", (double)src[i].docs) && cJSON_AddItemToArray(sources, e);
        if (!ok) cJSON_Delete(e);
    }
    if (!ok || !cJSON_AddItemToObject(root, "sources", sources)) {
        ok = 0;
        cJSON_Delete(sources);
    }
    char *text = ok ? cJSON_Print(root) : NULL;
    cJSON_Delete(root);
    if (!text) return anvil_fail("%s: out of memory building the manifest", path);
    size_t len = strlen(text);
    char *withnl = realloc(text, len + 2);
    if (!withnl) {
        free(text);
        return anvil_fail("%s: out of memory building the manifest", path);
    }
    withnl[len] = '\n';
    int rc = anvil_write_file_atomic(path, withnl, len + 1);
    free(withnl);
    return rc;
}

#define CHUNK 65536
/* Text per unit of work: large enough to amortize scheduling, small enough
 * that even a few megabytes keep several threads busy. */
#define WORK_BYTES ((size_t)1 << 18)

/* A run of whole documents of one source, encoded by one worker. */
typedef struct {
    int src;
    size_t start, end;
    int64_t docs[NSPLITS], ntok[NSPLITS];
    int32_t *tok[NSPLITS]; /* BPE or JSONL only: the chunk's tokens of each split, in order */
    size_t cap[NSPLITS];
    int64_t first_line; /* JSONL: the number of the line before the chunk */
    int64_t *bad;       /* JSONL: 2 * line number + (1 if it is JSON lacking the field) */
    size_t nbad, badcap;
    char *err; /* a worker's failure, reported by the main thread in chunk order */
} chunk;

typedef struct {
    int32_t *ids;
    size_t cap;
    anvil_tok_state *st;
} worker;

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

/* The view of a source that a chunk covers, so next_doc walks only it. */
static source chunk_view(const source *src, const chunk *c) {
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
                      size_t len, int store, const char **why) {
    int s = anvil_prep_is_val(anvil_fnv1a64(doc, len), o->val_fraction) ? VAL : TRAIN;
    c->docs[s]++;
    if (!store) {
        c->ntok[s] += (int64_t)len + 1;
        return 0;
    }
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

static void encode_chunk(const anvil_prep_opts *o, const source *src, const anvil_tok *tk, worker *w, chunk *c) {
    source v = chunk_view(src, c);
    size_t off = 0, len;
    const unsigned char *doc;
    int64_t line = c->first_line;
    int store = tk || o->jsonl_field;
    while (next_unit(&v, o, &off, &doc, &len, &line)) {
        const char *why = "out of memory";
        int rc = 0;
        if (o->jsonl_field) {
            if (len && doc[len - 1] == '\r') len--;
            if (!len) continue;
            /* cJSON's parser is reentrant apart from a global error position
             * that nothing here reads. */
            cJSON *j = cJSON_ParseWithLength((const char *)doc, len);
            const cJSON *f = j ? cJSON_GetObjectItemCaseSensitive(j, o->jsonl_field) : NULL;
            if (cJSON_IsString(f)) {
                size_t n = strlen(f->valuestring);
                if (n) rc = encode_doc(o, tk, w, c, (const unsigned char *)f->valuestring, n, store, &why);
            } else {
                rc = add_bad(c, 2 * line + (j != NULL));
            }
            cJSON_Delete(j);
        } else {
            rc = encode_doc(o, tk, w, c, doc, len, store, &why);
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

/* Cuts every source into chunks at document boundaries, scanning as next_doc
 * does so that the documents are exactly those of a single pass. */
static int make_chunks(const anvil_prep_opts *o, const source *src, int nsrc, chunk **out, size_t *nout) {
    chunk *cs = NULL;
    size_t n = 0, cap = 0, unit = o->chunk_bytes ? o->chunk_bytes : WORK_BYTES;
    for (int i = 0; i < nsrc; i++) {
        size_t off = 0, start = 0, len;
        const unsigned char *doc;
        int64_t line = 0, start_line = 0;
        while (off < src[i].len) {
            int more = next_unit(&src[i], o, &off, &doc, &len, &line);
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

static int encode_all(const anvil_prep_opts *o, const source *src, const anvil_tok *tk, chunk *cs, size_t n) {
    int nw = o->workers > 1 ? o->workers : 1;
    worker *ws = calloc((size_t)nw, sizeof *ws);
    if (!ws) return anvil_fail("prep: out of memory");
    int rc = 0;
    for (int t = 0; tk && t < nw; t++)
        if (!(ws[t].st = anvil_tok_state_new(tk))) rc = anvil_fail("prep: out of memory for tokenizer state");
    if (!rc) {
#pragma omp parallel for num_threads(nw) schedule(dynamic, 1)
        for (size_t i = 0; i < n; i++) encode_chunk(o, src, tk, &ws[omp_get_thread_num()], &cs[i]);
    }
    for (size_t i = 0; !rc && i < n; i++)
        if (cs[i].err) rc = anvil_fail("%s", cs[i].err);
    for (int t = 0; t < nw; t++) {
        anvil_tok_state_free(ws[t].st);
        free(ws[t].ids);
    }
    free(ws);
    return rc;
}

/* Byte-level chunks hold no tokens: they are cheap to make again here. */
static int emit_chunk(const anvil_prep_opts *o, const source *src, split_out *so, manifest_ctx *m, chunk *c,
                      int stored, int32_t *tok) {
    int rc = 0;
    if (stored) {
        for (int s = 0; !rc && s < NSPLITS; s++) rc = emit(&so[s], s, c->tok[s], c->ntok[s], m);
        return rc;
    }
    source v = chunk_view(src, c);
    size_t off = 0, len;
    const unsigned char *doc;
    while (!rc && next_doc(&v, o, &off, &doc, &len)) {
        int s = anvil_prep_is_val(anvil_fnv1a64(doc, len), o->val_fraction) ? VAL : TRAIN;
        int32_t eot = ANVIL_BYTETOK_EOT;
        rc = emit(&so[s], s, &eot, 1, m);
        for (size_t k = 0; !rc && k < len; k += CHUNK) {
            size_t n = len - k < CHUNK ? len - k : CHUNK;
            anvil_bytetok_encode(doc + k, n, tok);
            rc = emit(&so[s], s, tok, (int64_t)n, m);
        }
    }
    return rc;
}

static void free_chunks(chunk *cs, size_t n) {
    for (size_t i = 0; i < n; i++) {
        free(cs[i].tok[TRAIN]);
        free(cs[i].tok[VAL]);
        free(cs[i].bad);
        if (cs[i].err != oom_msg) free(cs[i].err);
    }
    free(cs);
}

int anvil_prep_run(const anvil_prep_opts *o, anvil_prep_stats *stats) {
    memset(stats, 0, sizeof *stats);
    if (!(o->val_fraction >= 0 && o->val_fraction <= 1))
        return anvil_fail("--val-fraction %g: must be in [0, 1]", o->val_fraction);
    if (o->shard_tokens < 1 || o->shard_tokens > INT32_MAX)
        return anvil_fail("--shard-tokens %lld: must be in [1, %d]", (long long)o->shard_tokens, INT32_MAX);
    if (o->delimiter && !o->delimiter_len) return anvil_fail("--delimiter: must not be empty");
    if (o->delimiter && o->jsonl_field) return anvil_fail("--delimiter and --jsonl-field cannot be combined");
    if (o->ninputs < 1) return anvil_fail("prep: no input files");

    anvil_tok *tk = NULL;
    if (o->tokenizer_file) {
        tk = anvil_tok_load(o->tokenizer_file, o->tokenizer_pattern ? o->tokenizer_pattern : "gpt2");
        if (!tk) return -1;
    }
    int version = anvil_shard_version_for_vocab(tk ? anvil_tok_vocab_size(tk) : ANVIL_BYTETOK_VOCAB);
    source *src = calloc((size_t)o->ninputs, sizeof *src);
    int32_t *tok = malloc(CHUNK * sizeof *tok);
    cJSON *shards = cJSON_CreateArray();
    split_out so[NSPLITS];
    memset(so, 0, sizeof so);
    for (int s = 0; s < NSPLITS; s++) so[s].version = version;
    int rc = 0, nloaded = 0;
    if (!src || !tok || !shards) rc = anvil_fail("prep: out of memory");

    /* Load every input before writing anything, so a missing file fails the
     * run without touching the output folder. */
    for (int i = 0; !rc && i < o->ninputs; i++) {
        rc = load_source(o->inputs[i], &src[i]);
        if (rc) break;
        nloaded++;
        if (!src[i].len) {
            note(o, "skipping empty input %s", src[i].name);
            stats->skipped_inputs++;
        } else {
            stats->sources++;
            stats->bytes_in += (int64_t)src[i].len;
        }
    }

    /* Encoding (or, for bytes, counting) sizes the splits, so that the
     * shards can be cut equal before any is written. */
    chunk *cs = NULL;
    size_t nchunks = 0;
    if (!rc) rc = make_chunks(o, src, nloaded, &cs, &nchunks);
    if (!rc) rc = encode_all(o, src, tk, cs, nchunks);
    for (size_t i = 0; !rc && i < nchunks; i++) {
        for (size_t k = 0; !rc && k < cs[i].nbad; k++) {
            char msg[1024];
            long long line = (long long)(cs[i].bad[k] / 2);
            if (cs[i].bad[k] % 2)
                snprintf(msg, sizeof msg, "%s:%lld: no string field \"%s\"", src[cs[i].src].name, line,
                         o->jsonl_field);
            else
                snprintf(msg, sizeof msg, "%s:%lld: not valid JSON", src[cs[i].src].name, line);
            if (o->strict) rc = anvil_fail("%s (--strict)", msg);
            else note(o, "skipping %s", msg);
            stats->bad_lines++;
        }
        for (int s = 0; s < NSPLITS; s++) {
            so[s].tokens += cs[i].ntok[s];
            src[cs[i].src].docs += cs[i].docs[s];
        }
        stats->train_docs += cs[i].docs[TRAIN];
        stats->val_docs += cs[i].docs[VAL];
    }
    if (!rc && stats->train_docs + stats->val_docs == 0) rc = anvil_fail("prep: the input holds no documents");
    if (!rc) rc = mkdir_p(o->out_dir);
    for (int s = 0; !rc && s < NSPLITS; s++) {
        so[s].nshards = (so[s].tokens + o->shard_tokens - 1) / o->shard_tokens;
        int wanted = s == VAL ? o->val_fraction > 0 : o->val_fraction < 1;
        if (!so[s].tokens && wanted) note(o, "no document fell in the %s split, so it has no shards", split_name[s]);
    }

    manifest_ctx m = {shards, o->out_dir};
    for (size_t i = 0; !rc && i < nchunks; i++) {
        rc = emit_chunk(o, src, so, &m, &cs[i], tk || o->jsonl_field, tok);
        free(cs[i].tok[TRAIN]);
        free(cs[i].tok[VAL]);
        cs[i].tok[TRAIN] = cs[i].tok[VAL] = NULL;
    }
    for (int s = 0; s < NSPLITS; s++) anvil_shard_writer_abort(so[s].w); /* only left open on failure */
    if (!rc) rc = remove_stale(o, so);
    if (!rc) rc = write_manifest(o, shards, src, nloaded, tk);
    if (!rc) {
        stats->train_tokens = so[TRAIN].tokens;
        stats->val_tokens = so[VAL].tokens;
        stats->train_shards = (int)so[TRAIN].nshards;
        stats->val_shards = (int)so[VAL].nshards;
    }
    for (int i = 0; i < nloaded; i++) free_source(&src[i]);
    free_chunks(cs, nchunks);
    free(src);
    free(tok);
    cJSON_Delete(shards);
    anvil_tok_free(tk);
    return rc;
}

/* ---- reading the manifest back ---- */

static int is_int_in(const cJSON *x, double lo, double hi) {
    return cJSON_IsNumber(x) && x->valuedouble >= lo && x->valuedouble <= hi &&
           x->valuedouble == (double)(long long)x->valuedouble;
}

int anvil_data_manifest_vocab(const char *dir, int *vocab_size, int *eot) {
    char path[4096];
    snprintf(path, sizeof path, "%s/manifest.json", dir);
    FILE *f = fopen(path, "rb");
    if (!f) return anvil_fail("manifest %s: cannot open: %s", path, strerror(errno));
    char *text = NULL;
    size_t len = 0, cap = 0;
    for (;;) {
        if (len + 4096 + 1 > cap) {
            cap = cap ? cap * 2 : 8192;
            char *nt = realloc(text, cap);
            if (!nt) {
                free(text);
                fclose(f);
                return anvil_fail("manifest %s: out of memory", path);
            }
            text = nt;
        }
        size_t got = fread(text + len, 1, 4096, f);
        len += got;
        if (got < 4096) break;
    }
    int rerr = ferror(f);
    fclose(f);
    if (rerr) {
        free(text);
        return anvil_fail("manifest %s: read failed", path);
    }
    text[len] = 0;
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(text, len, &end, 0);
    int rc = 0;
    if (!root) {
        rc = anvil_fail("manifest %s: not valid JSON near byte %td", path, end ? end - text : (ptrdiff_t)0);
    } else {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, "vocab_size");
        const cJSON *e = cJSON_GetObjectItemCaseSensitive(root, "eot");
        if (!is_int_in(v, 1, INT32_MAX))
            rc = anvil_fail("manifest %s: field \"vocab_size\" is missing or not a positive integer", path);
        else if (!is_int_in(e, 0, v->valuedouble - 1))
            rc = anvil_fail("manifest %s: field \"eot\" is missing or not an integer in [0, vocab_size)", path);
        else {
            *vocab_size = (int)v->valuedouble;
            *eot = (int)e->valuedouble;
        }
    }
    cJSON_Delete(root);
    free(text);
    return rc;
}
