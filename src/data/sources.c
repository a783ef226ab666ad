/* prep's inputs: files (mapped), pipes and standard input (read whole),
 * gzip and zstd files (decompressed into memory), and the documents in them. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>
#include <zstd.h>

#include "core/crc32c.h"
#include "core/error.h"
#include "core/fsutil.h"
#include "data/prep_internal.h"

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

/* Hands a decompressed buffer to the source, or drops it when decompression failed. */
static int keep_decompressed(source *s, unsigned char *buf, size_t len, int rc) {
    if (rc) {
        free(buf);
        return rc;
    }
    s->data = buf;
    s->len = len;
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
    return keep_decompressed(s, buf, len, rc);
}

/* Regular files are mapped rather than read, so a corpus larger than memory
 * only costs page cache. */
static void set_stat(source *s, const struct stat *st) {
    s->is_file = 1;
    s->file_size = (int64_t)st->st_size;
    s->mtime_s = (int64_t)st->st_mtim.tv_sec;
    s->mtime_ns = (int64_t)st->st_mtim.tv_nsec;
}

int prep_load_source(const char *path, source *s) {
    memset(s, 0, sizeof *s);
    s->name = strcmp(path, "-") ? path : "<stdin>";
    if (!strcmp(path, "-")) {
        if (read_fd_all(0, s->name, s)) return -1;
        s->crc = anvil_crc32c(0, s->data, s->len);
        return 0;
    }
    /* Compressed inputs are decompressed into memory whole. */
    if (ends_with(path, ".gz") || ends_with(path, ".zst")) {
        struct stat st;
        if (stat(path, &st) != 0) return anvil_fail("input %s: cannot open: %s", path, strerror(errno));
        set_stat(s, &st);
        return ends_with(path, ".gz") ? load_gz(path, s) : load_zst(path, s);
    }
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
        set_stat(s, &st);
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
        if (!rc) s->crc = anvil_crc32c(0, s->data, s->len);
    }
    close(fd);
    return rc;
}

void prep_free_source(source *s) {
    if (s->mapped) munmap((void *)s->data, s->len);
    else free((void *)s->data);
}

int prep_next_doc(const source *s, const anvil_prep_opts *o, size_t *off, const unsigned char **doc, size_t *len) {
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

int prep_next_unit(const source *s, const anvil_prep_opts *o, size_t *off, const unsigned char **doc, size_t *len,
                   int64_t *line) {
    if (!o->jsonl_field) return prep_next_doc(s, o, off, doc, len);
    if (*off >= s->len) return 0;
    size_t at = anvil_jsonl_next_line(s->data, s->len, off, len);
    (*line)++;
    *doc = s->data + at;
    return 1;
}
