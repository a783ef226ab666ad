/* prep's inputs, read front to back: regular files as streams of large
 * reads, pipes and standard input (read whole at the start) and gzip and
 * zstd files (decompressed into memory at the start); and the documents in
 * what has been read. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>
#include <zstd.h>

#include "core/crc32c.h"
#include "core/error.h"
#include "core/fsutil.h"
#include "data/prep_internal.h"

static int ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && !strcmp(s + n - k, suffix);
}

static void set_stat(source *s, const struct stat *st) {
    s->is_file = 1;
    s->file_size = (int64_t)st->st_size;
    s->mtime_s = (int64_t)st->st_mtim.tv_sec;
    s->mtime_ns = (int64_t)st->st_mtim.tv_nsec;
}

/* A pipe gives its bytes once, and a re-run compares their checksum before it reads anything
 * else, so it is read whole now. */
static int read_pipe(int fd, source *s) {
    char *buf;
    size_t len;
    if (anvil_read_fd(fd, s->name, &buf, &len)) return -1;
    s->kind = SRC_WHOLE;
    s->whole = (unsigned char *)buf;
    s->whole_len = len;
    s->crc = anvil_crc32c(0, buf, len);
    return 0;
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

/* Hands a decompressed buffer to the source, or drops it when decompression failed. */
static int keep_decompressed(source *s, unsigned char *buf, size_t len, int rc) {
    if (rc) {
        free(buf);
        return rc;
    }
    s->kind = SRC_WHOLE;
    s->whole = buf;
    s->whole_len = len;
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
    return keep_decompressed(s, buf, len, rc);
}

static int load_zst(const char *path, source *s) {
    char *raw;
    size_t raw_len;
    if (anvil_read_file(path, &raw, &raw_len)) return anvil_fail("input %s", anvil_errmsg());
    ZSTD_DCtx *dc = ZSTD_createDCtx();
    unsigned char *buf = NULL;
    size_t len = 0, cap = 0, ret = 0;
    int rc = 0;
    ZSTD_inBuffer in = {raw, raw_len, 0};
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
    free(raw);
    return keep_decompressed(s, buf, len, rc);
}

int prep_open_source(const char *path, source *s) {
    memset(s, 0, sizeof *s);
    s->fd = -1;
    s->path = path;
    s->name = strcmp(path, "-") ? path : "<stdin>";
    if (!strcmp(path, "-")) return read_pipe(0, s);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return anvil_fail("input %s: cannot open: %s", path, strerror(errno));
    struct stat st;
    int rc = 0;
    if (fstat(fd, &st) != 0) {
        rc = anvil_fail("input %s: cannot stat: %s", path, strerror(errno));
    } else if (S_ISDIR(st.st_mode)) {
        rc = anvil_fail("input %s: is a folder, not a file", path);
    } else if (ends_with(path, ".gz") || ends_with(path, ".zst")) {
        set_stat(s, &st);
        rc = ends_with(path, ".gz") ? load_gz(path, s) : load_zst(path, s);
    } else if (S_ISREG(st.st_mode)) {
        set_stat(s, &st);
        s->kind = SRC_PLAIN;
    } else {
        rc = read_pipe(fd, s); /* a pipe or device: /dev/stdin, <(...) */
    }
    /* Opened again when its turn comes, so that a run over many files holds one at a time. */
    close(fd);
    return rc;
}

int prep_start_source(source *s) {
    s->bytes = 0;
    if (s->kind == SRC_WHOLE) return 0;
    s->fd = open(s->path, O_RDONLY | O_CLOEXEC);
    if (s->fd < 0) return anvil_fail("input %s: cannot open: %s", s->name, strerror(errno));
    struct stat st;
    if (fstat(s->fd, &st) != 0) return anvil_fail("input %s: cannot stat: %s", s->name, strerror(errno));
    /* The manifest records the size and mtime seen at the start, and the resume points of other
     * inputs' shards depend on this one's content. */
    if ((int64_t)st.st_size != s->file_size || (int64_t)st.st_mtim.tv_sec != s->mtime_s ||
        (int64_t)st.st_mtim.tv_nsec != s->mtime_ns)
        return anvil_fail("input %s: changed while prep ran (size or mtime differs from when it started)", s->name);
    posix_fadvise(s->fd, 0, 0, POSIX_FADV_SEQUENTIAL);
    return 0;
}

static int64_t read_plain(source *s, unsigned char *buf, size_t cap) {
    size_t left = (size_t)((uint64_t)s->file_size - s->bytes), want = cap < left ? cap : left, got = 0;
    while (got < want) {
        ssize_t n = pread(s->fd, buf + got, want - got, (off_t)(s->bytes + got));
        if (n < 0 && errno == EINTR) continue;
        if (n < 0)
            return anvil_fail("input %s: read failed at byte %llu: %s", s->name,
                              (unsigned long long)(s->bytes + got), strerror(errno));
        if (n == 0)
            return anvil_fail("input %s: ends at byte %llu, but had %lld bytes when prep started (truncated while "
                              "being read?)",
                              s->name, (unsigned long long)(s->bytes + got), (long long)s->file_size);
        got += (size_t)n;
    }
    return (int64_t)got;
}

int64_t prep_read_source(source *s, unsigned char *buf, size_t cap) {
    int64_t got;
    if (s->kind == SRC_PLAIN) {
        got = read_plain(s, buf, cap);
    } else {
        size_t left = s->whole_len - (size_t)s->bytes;
        got = (int64_t)(cap < left ? cap : left);
        memcpy(buf, s->whole + s->bytes, (size_t)got);
    }
    if (got > 0) s->bytes += (uint64_t)got;
    return got;
}

void prep_stop_source(source *s) {
    if (s->fd >= 0) close(s->fd);
    s->fd = -1;
}

void prep_free_source(source *s) {
    prep_stop_source(s);
    free(s->whole);
    s->whole = NULL;
}

/* Whether the document at off, which v ends before its end, is longer than o allows whatever
 * follows: its bytes so far, less a delimiter's start that v may have cut short. */
static int over_cap(const span *v, const anvil_prep_opts *o, size_t off, size_t delim_len) {
    size_t have = v->len - off, cut = delim_len ? delim_len - 1 : 0;
    return have > cut && have - cut > o->max_doc_bytes;
}

int prep_next_doc(const span *v, const anvil_prep_opts *o, size_t *off, const unsigned char **doc, size_t *len) {
    while (*off < v->len) {
        const unsigned char *start = v->data + *off;
        size_t rest = v->len - *off;
        const unsigned char *hit = o->delimiter ? memmem(start, rest, o->delimiter, o->delimiter_len) : NULL;
        if (!hit && !v->end) return over_cap(v, o, *off, o->delimiter_len) ? PREP_TOO_LONG : PREP_MORE;
        size_t n = hit ? (size_t)(hit - start) : rest;
        if (n > o->max_doc_bytes) return PREP_TOO_LONG;
        *off += n + (hit ? o->delimiter_len : 0);
        if (n) {
            *doc = start;
            *len = n;
            return PREP_UNIT;
        }
    }
    return v->end ? PREP_END : PREP_MORE;
}

int prep_next_unit(const span *v, const anvil_prep_opts *o, size_t *off, const unsigned char **doc, size_t *len,
                   int64_t *line) {
    if (!o->jsonl_field) return prep_next_doc(v, o, off, doc, len);
    if (*off >= v->len) return v->end ? PREP_END : PREP_MORE;
    const unsigned char *nl = memchr(v->data + *off, '\n', v->len - *off);
    if (!nl && !v->end) return over_cap(v, o, *off, 1) ? PREP_TOO_LONG : PREP_MORE;
    if ((size_t)((nl ? nl : v->data + v->len) - (v->data + *off)) > o->max_doc_bytes) return PREP_TOO_LONG;
    size_t at = anvil_jsonl_next_line(v->data, v->len, off, len);
    (*line)++;
    *doc = v->data + at;
    return PREP_UNIT;
}
