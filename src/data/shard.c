#include "data/shard.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/error.h"
#include "core/fsutil.h"

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "shards are little-endian and are read and written in place"
#endif

/* Checks a shard's first three header words against its size in bytes; -1 after anvil_fail. */
static int check_header(const char *path, const int32_t hdr[3], long long size) {
    if (hdr[0] != ANVIL_SHARD_MAGIC)
        return anvil_fail("shard %s: bad magic %d at byte offset 0 (want %d)", path, hdr[0], ANVIL_SHARD_MAGIC);
    if (hdr[1] != ANVIL_SHARD_V16 && hdr[1] != ANVIL_SHARD_V32)
        return anvil_fail("shard %s: unknown version %d at byte offset 4 (want %d for uint16 or %d for uint32 tokens)",
                          path, hdr[1], ANVIL_SHARD_V16, ANVIL_SHARD_V32);
    if (hdr[2] <= 0) return anvil_fail("shard %s: token count %d at byte offset 8 must be positive", path, hdr[2]);
    int tb = hdr[1] == ANVIL_SHARD_V16 ? 2 : 4;
    long long want = ANVIL_SHARD_HEADER_BYTES + (long long)hdr[2] * tb;
    if (size != want)
        return anvil_fail("shard %s: file is %lld bytes but the header says %d tokens (byte offset 8) of %d bytes, i.e. "
                          "%lld bytes",
                          path, size, hdr[2], tb, want);
    return 0;
}

/* Fills in what the header says; path is copied. */
static int set_fields(anvil_shard *s, const char *path, const int32_t hdr[3]) {
    if (!(s->path = strdup(path))) return anvil_fail("shard %s: out of memory", path);
    s->version = hdr[1];
    s->token_bytes = hdr[1] == ANVIL_SHARD_V16 ? 2 : 4;
    s->ntokens = hdr[2];
    return 0;
}

int anvil_shard_open(anvil_shard *s, const char *path) {
    memset(s, 0, sizeof *s);
    s->fd = -1;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return anvil_fail("shard %s: cannot open: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return anvil_fail("shard %s: cannot stat: %s", path, strerror(e));
    }
    int32_t hdr[3];
    if (st.st_size < ANVIL_SHARD_HEADER_BYTES) {
        close(fd);
        return anvil_fail("shard %s: file is %lld bytes, shorter than the %d-byte header", path,
                          (long long)st.st_size, ANVIL_SHARD_HEADER_BYTES);
    }
    ssize_t got = pread(fd, hdr, sizeof hdr, 0);
    if (got != (ssize_t)sizeof hdr) {
        int e = got < 0 ? errno : EIO;
        close(fd);
        return anvil_fail("shard %s: cannot read the header: %s", path, strerror(e));
    }
    if (check_header(path, hdr, (long long)st.st_size) || set_fields(s, path, hdr)) {
        close(fd);
        return -1;
    }
    s->fd = fd;
    return 0;
}

int anvil_shard_open_s3(anvil_shard *s, anvil_s3 *s3, const char *uri, uint64_t size, size_t range, int inflight) {
    memset(s, 0, sizeof *s);
    s->fd = -1;
    char *bucket, *key;
    if (anvil_s3_parse_uri(uri, &bucket, &key)) return -1;
    int32_t hdr[3];
    int rc = size ? 0 : anvil_s3_head(s3, bucket, key, &size);
    if (rc > 0) rc = anvil_fail("shard %s: no such object", uri);
    if (!rc && size < ANVIL_SHARD_HEADER_BYTES)
        rc = anvil_fail("shard %s: object is %llu bytes, shorter than the %d-byte header", uri, (unsigned long long)size,
                        ANVIL_SHARD_HEADER_BYTES);
    if (!rc && !(s->remote = anvil_s3_reader_open(s3, bucket, key, size, range, inflight))) rc = -1;
    /* The header comes with the first block, which the first batch needs too: no GET of its own. */
    if (!rc) rc = anvil_s3_reader_read(s->remote, 0, sizeof hdr, hdr);
    if (!rc) rc = check_header(uri, hdr, (long long)size);
    if (!rc) rc = set_fields(s, uri, hdr);
    free(bucket);
    free(key);
    if (rc) anvil_shard_close(s);
    return rc;
}

void anvil_shard_close(anvil_shard *s) {
    if (s->fd >= 0) close(s->fd);
    anvil_s3_reader_close(s->remote);
    s->remote = NULL;
    free(s->path);
    s->path = NULL;
    s->fd = -1;
}

/* pread until done: a regular file returns everything at once, but a network
 * filesystem or a signal may split it. A shard on S3 reads through its reader. */
static int pread_full(const anvil_shard *s, void *buf, size_t n, off_t off) {
    if (s->remote) return anvil_s3_reader_read(s->remote, (uint64_t)off, n, buf);
    int fd = s->fd;
    const char *path = s->path;
    char *p = buf;
    while (n) {
        ssize_t got = pread(fd, p, n, off);
        if (got < 0 && errno == EINTR) continue;
        if (got <= 0)
            return anvil_fail("shard %s: read failed at byte offset %lld: %s", path, (long long)off,
                              got < 0 ? strerror(errno) : "unexpected end of file");
        p += got;
        n -= (size_t)got;
        off += got;
    }
    return 0;
}

int anvil_shard_read(const anvil_shard *s, int64_t pos, int64_t n, int32_t *out, int vocab_size) {
    if (pos < 0 || n < 0 || pos + n > s->ntokens)
        return anvil_fail("shard %s: token range [%lld, %lld) is outside its %lld tokens", s->path, (long long)pos,
                          (long long)(pos + n), (long long)s->ntokens);
    off_t off = ANVIL_SHARD_HEADER_BYTES + (off_t)pos * s->token_bytes;
    size_t nbytes = (size_t)n * (size_t)s->token_bytes;
    if (s->token_bytes == 4) {
        if (pread_full(s, out, nbytes, off)) return -1;
    } else {
        /* Read the uint16 ids into the upper half of out and widen forwards:
         * out[i] (bytes 4i..4i+3) never reaches an id not yet widened, which
         * starts at byte 2n+2j for j > i. */
        unsigned char *raw = (unsigned char *)out + 2 * (size_t)n;
        if (pread_full(s, raw, nbytes, off)) return -1;
        for (int64_t i = 0; i < n; i++) out[i] = (int32_t)(raw[2 * i] | (raw[2 * i + 1] << 8));
    }
    if (vocab_size > 0) {
        /* Compared as unsigned so that a uint32 id above INT32_MAX is caught too. */
        uint32_t limit = (uint32_t)vocab_size, bad = 0;
        for (int64_t i = 0; i < n; i++) bad |= (uint32_t)out[i] >= limit;
        if (bad)
            for (int64_t i = 0; i < n; i++)
                if ((uint32_t)out[i] >= limit)
                    return anvil_fail("shard %s: token id %u at token offset %lld (byte offset %lld) is >= vocab_size %d",
                                      s->path, (uint32_t)out[i], (long long)(pos + i),
                                      (long long)(ANVIL_SHARD_HEADER_BYTES + (pos + i) * s->token_bytes), vocab_size);
    }
    return 0;
}

int anvil_shard_version_for_vocab(int vocab_size) { return vocab_size <= 65536 ? ANVIL_SHARD_V16 : ANVIL_SHARD_V32; }

/* ---- shard writer ---- */

#define WRITER_BUF_BYTES (1 << 20)

struct anvil_shard_writer {
    anvil_atomic_file f;
    int version, token_bytes;
    int64_t count;
    size_t used;
    unsigned char buf[WRITER_BUF_BYTES];
};

anvil_shard_writer *anvil_shard_writer_open(const char *path, int version) {
    if (version != ANVIL_SHARD_V16 && version != ANVIL_SHARD_V32) {
        anvil_fail("shard %s: cannot write unknown version %d", path, version);
        return NULL;
    }
    anvil_shard_writer *w = malloc(sizeof *w);
    if (!w) {
        anvil_fail("shard %s: out of memory", path);
        return NULL;
    }
    if (anvil_atomic_open(&w->f, path)) {
        free(w);
        return NULL;
    }
    w->version = version;
    w->token_bytes = version == ANVIL_SHARD_V16 ? 2 : 4;
    w->count = 0;
    /* The header is written last, at commit, once the count is known. */
    memset(w->buf, 0, ANVIL_SHARD_HEADER_BYTES);
    w->used = ANVIL_SHARD_HEADER_BYTES;
    return w;
}

static int writer_flush(anvil_shard_writer *w) {
    if (anvil_write_all(w->f.fd, w->buf, w->used, w->f.path)) return -1;
    w->used = 0;
    return 0;
}

int anvil_shard_writer_append(anvil_shard_writer *w, const int32_t *tokens, int64_t n) {
    if (n < 0 || n > INT32_MAX - w->count)
        return anvil_fail("shard %s: more than %d tokens, the most its int32 header count can hold", w->f.path,
                          INT32_MAX);
    uint32_t limit = w->version == ANVIL_SHARD_V16 ? 65536u : (uint32_t)INT32_MAX + 1u;
    for (int64_t i = 0; i < n; i++)
        if ((uint32_t)tokens[i] >= limit)
            return anvil_fail("shard %s: token id %d at token offset %lld does not fit a version %d shard", w->f.path,
                              tokens[i], (long long)(w->count + i), w->version);
    for (int64_t done = 0; done < n;) {
        if (w->used == WRITER_BUF_BYTES && writer_flush(w)) return -1;
        int64_t room = (int64_t)(WRITER_BUF_BYTES - w->used) / w->token_bytes;
        int64_t k = n - done < room ? n - done : room;
        if (w->token_bytes == 4) {
            memcpy(w->buf + w->used, tokens + done, (size_t)k * 4);
        } else {
            uint16_t narrow[4096];
            for (int64_t j = 0; j < k; j += 4096) {
                int64_t m = k - j < 4096 ? k - j : 4096;
                for (int64_t i = 0; i < m; i++) narrow[i] = (uint16_t)tokens[done + j + i];
                memcpy(w->buf + w->used + (size_t)j * 2, narrow, (size_t)m * 2);
            }
        }
        w->used += (size_t)k * (size_t)w->token_bytes;
        done += k;
    }
    w->count += n;
    return 0;
}

int anvil_shard_writer_commit(anvil_shard_writer *w) {
    int rc = 0;
    if (w->count <= 0) rc = anvil_fail("shard %s: refusing to write a shard with no tokens", w->f.path);
    if (!rc) rc = writer_flush(w);
    if (!rc) {
        int32_t hdr[256] = {ANVIL_SHARD_MAGIC, w->version, (int32_t)w->count};
        if (pwrite(w->f.fd, hdr, sizeof hdr, 0) != (ssize_t)sizeof hdr)
            rc = anvil_fail("shard %s: header write failed: %s", w->f.path, strerror(errno));
    }
    if (rc) anvil_atomic_abort(&w->f);
    else rc = anvil_atomic_commit(&w->f);
    free(w);
    return rc;
}

void anvil_shard_writer_abort(anvil_shard_writer *w) {
    if (!w) return;
    anvil_atomic_abort(&w->f);
    free(w);
}

int anvil_shard_write(const char *path, const int32_t *tokens, int64_t n, int version) {
    anvil_shard_writer *w = anvil_shard_writer_open(path, version);
    if (!w) return -1;
    if (anvil_shard_writer_append(w, tokens, n)) {
        anvil_shard_writer_abort(w);
        return -1;
    }
    return anvil_shard_writer_commit(w);
}
