/* prep's inputs, read front to back as streams: regular files in large
 * reads, gzip and zstd files decompressed piece by piece, pipes and standard
 * input (read whole at the start); and the documents in what has been read. */
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
        s->kind = ends_with(path, ".gz") ? SRC_GZ : SRC_ZST;
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
    s->in_at = 0;
    s->zret = 0;
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
    if (s->kind == SRC_PLAIN) {
        posix_fadvise(s->fd, 0, 0, POSIX_FADV_SEQUENTIAL);
        return 0;
    }
    if (s->kind == SRC_GZ) {
        /* gzdopen takes over the descriptor. gzread also passes through a file that is not gzip
         * at all; concatenated members are read in sequence. */
        s->gz = gzdopen(s->fd, "rb");
        if (!s->gz) return anvil_fail("input %s: cannot open: %s", s->name, strerror(errno ? errno : ENOMEM));
        s->fd = -1;
        gzbuffer(s->gz, 1 << 17); /* fewer, larger reads of the compressed file than zlib's 8 KiB */
        return 0;
    }
    s->zin_cap = ZSTD_DStreamInSize();
    s->zin = malloc(s->zin_cap);
    s->zd = ZSTD_createDCtx();
    if (!s->zin || !s->zd) return anvil_fail("input %s: out of memory for zstd", s->name);
    s->zin_len = s->zin_pos = 0;
    s->zin_eof = 0;
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

static int64_t read_gz(source *s, unsigned char *buf, size_t cap) {
    unsigned want = cap < (1u << 30) ? (unsigned)cap : (1u << 30);
    int got = gzread(s->gz, buf, want);
    int zerr = Z_OK;
    const char *msg = got <= 0 ? gzerror(s->gz, &zerr) : NULL;
    /* A truncated stream ends with 0 bytes and Z_BUF_ERROR, not -1. */
    if (got < 0 || zerr != Z_OK)
        return anvil_fail("input %s: gzip error after %llu decompressed bytes: %s", s->name,
                          (unsigned long long)s->bytes, zerr == Z_ERRNO ? strerror(errno) : msg);
    return got;
}

static int64_t read_zst(source *s, unsigned char *buf, size_t cap) {
    ZSTD_outBuffer out = {buf, cap, 0};
    while (out.pos < out.size) {
        if (s->zin_pos == s->zin_len && !s->zin_eof) {
            ssize_t n = read(s->fd, s->zin, s->zin_cap);
            if (n < 0 && errno == EINTR) continue;
            if (n < 0)
                return anvil_fail("input %s: read failed at compressed byte %llu: %s", s->name,
                                  (unsigned long long)s->in_at, strerror(errno));
            s->zin_len = (size_t)n;
            s->zin_pos = 0;
            s->zin_eof = n == 0;
        }
        /* Every frame read is complete (an empty file has none); the decoder is not asked again,
         * which it would answer as if a new frame were starting. */
        if (s->zin_pos == s->zin_len && s->zin_eof && s->zret == 0) break;
        ZSTD_inBuffer in = {s->zin, s->zin_len, s->zin_pos};
        size_t before = out.pos;
        size_t ret = ZSTD_decompressStream(s->zd, &out, &in);
        s->in_at += in.pos - s->zin_pos;
        s->zin_pos = in.pos;
        if (ZSTD_isError(ret))
            return anvil_fail("input %s: zstd error at compressed byte %llu: %s", s->name,
                              (unsigned long long)s->in_at, ZSTD_getErrorName(ret));
        s->zret = ret;
        if (s->zin_pos == s->zin_len && s->zin_eof && out.pos == before && ret != 0)
            return anvil_fail("input %s: zstd data truncated at compressed byte %llu", s->name,
                              (unsigned long long)s->in_at);
    }
    return (int64_t)out.pos;
}

int64_t prep_read_source(source *s, unsigned char *buf, size_t cap) {
    int64_t got;
    switch (s->kind) {
    case SRC_PLAIN: got = read_plain(s, buf, cap); break;
    case SRC_GZ: got = read_gz(s, buf, cap); break;
    case SRC_ZST: got = read_zst(s, buf, cap); break;
    default: {
        size_t left = s->whole_len - (size_t)s->bytes;
        got = (int64_t)(cap < left ? cap : left);
        memcpy(buf, s->whole + s->bytes, (size_t)got);
    }
    }
    if (got > 0) s->bytes += (uint64_t)got;
    return got;
}

uint64_t prep_source_read_at(const source *s) {
    if (s->gz) {
        z_off_t at = gzoffset(s->gz);
        return at > 0 ? (uint64_t)at : 0;
    }
    return s->kind == SRC_ZST ? s->in_at : s->bytes;
}

uint64_t prep_source_size(const source *s) { return s->is_file ? (uint64_t)s->file_size : s->whole_len; }

void prep_stop_source(source *s) {
    if (s->gz) gzclose(s->gz);
    if (s->fd >= 0) close(s->fd);
    ZSTD_freeDCtx(s->zd);
    free(s->zin);
    s->gz = NULL;
    s->fd = -1;
    s->zd = NULL;
    s->zin = NULL;
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
