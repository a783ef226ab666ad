#include "ckpt/safetensors.h"

#include "core/confine.h"
#include "core/error.h"
#include "core/fsutil.h"
#include "core/json.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* Tensor bytes go to and from disk as they lie in memory, and safetensors is
 * little-endian. */
_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "safetensors I/O assumes a little-endian host");

/* A header this large is a corrupt length field, not a real file: even a
 * model with a million tensors needs well under this. */
#define MAX_HEADER_BYTES (100u * 1000u * 1000u)
/* JSON numbers reach us as doubles; past 2^53 they are no longer exact. */
#define MAX_JSON_INT 9007199254740992.0
#define DATA_ALIGN 64

struct anvil_st_file {
    cJSON *root; /* owns the tensor names and the metadata strings */
    const cJSON *meta;
    int n;
    anvil_st_tensor *t;
    int *by_name;  /* tensor indices sorted by name, for find */
    void **copies; /* per tensor: its own aligned copy when the file misaligns it */
    void *data;    /* the data region, DATA_ALIGN-aligned */
    /* Opened by anvil_st_open_index: no data in memory; the file, where its data region starts,
     * and each tensor's offset in it. */
    int fd;
    uint64_t base;
    uint64_t *begin;
};

static const struct {
    const char *name;
    size_t size;
} dtypes[] = {
    [ANVIL_ST_F32] = {"F32", 4},  [ANVIL_ST_F16] = {"F16", 2}, [ANVIL_ST_BF16] = {"BF16", 2},
    [ANVIL_ST_F64] = {"F64", 8},  [ANVIL_ST_I32] = {"I32", 4}, [ANVIL_ST_I64] = {"I64", 8},
    [ANVIL_ST_I16] = {"I16", 2},  [ANVIL_ST_I8] = {"I8", 1},   [ANVIL_ST_U8] = {"U8", 1},
    [ANVIL_ST_U16] = {"U16", 2},  [ANVIL_ST_U32] = {"U32", 4}, [ANVIL_ST_U64] = {"U64", 8},
    [ANVIL_ST_BOOL] = {"BOOL", 1},
};
#define N_DTYPES ((int)(sizeof dtypes / sizeof dtypes[0]))

size_t anvil_st_dtype_size(anvil_st_dtype d) { return (int)d >= 0 && (int)d < N_DTYPES ? dtypes[d].size : 0; }

const char *anvil_st_dtype_name(anvil_st_dtype d) {
    return (int)d >= 0 && (int)d < N_DTYPES ? dtypes[d].name : "?";
}

static int dtype_from_name(const char *s) {
    for (int i = 0; i < N_DTYPES; i++)
        if (strcmp(s, dtypes[i].name) == 0) return i;
    return -1;
}

static void *alloc_aligned(uint64_t nbytes) {
    uint64_t rounded = (nbytes + DATA_ALIGN - 1) / DATA_ALIGN * DATA_ALIGN;
    if (rounded == 0) rounded = DATA_ALIGN;
    if (rounded > SIZE_MAX) return NULL;
    return aligned_alloc(DATA_ALIGN, (size_t)rounded);
}

void anvil_st_close(anvil_st_file *f) {
    if (!f) return;
    if (f->copies)
        for (int i = 0; i < f->n; i++) free(f->copies[i]);
    free(f->copies);
    free(f->by_name);
    free(f->t);
    free(f->data);
    free(f->begin);
    if (f->fd >= 0) close(f->fd);
    cJSON_Delete(f->root);
    free(f);
}

int anvil_st_count(const anvil_st_file *f) { return f->n; }

const anvil_st_tensor *anvil_st_at(const anvil_st_file *f, int i) { return i >= 0 && i < f->n ? &f->t[i] : NULL; }

const anvil_st_tensor *anvil_st_find(const anvil_st_file *f, const char *name) {
    int lo = 0, hi = f->n - 1;
    while (lo <= hi) {
        int mid = lo + (hi - lo) / 2;
        const anvil_st_tensor *t = &f->t[f->by_name[mid]];
        int c = strcmp(name, t->name);
        if (c == 0) return t;
        if (c < 0) hi = mid - 1;
        else lo = mid + 1;
    }
    return NULL;
}

const char *anvil_st_meta(const anvil_st_file *f, const char *key) {
    const cJSON *v = f->meta ? cJSON_GetObjectItemCaseSensitive(f->meta, key) : NULL;
    return v ? v->valuestring : NULL;
}

/* ---- reading ---- */

/* A non-negative integral JSON number small enough to be exact. */
static int json_u64(const cJSON *it, uint64_t *out) {
    if (!cJSON_IsNumber(it)) return 0;
    double d = it->valuedouble;
    if (!(d >= 0.0 && d <= MAX_JSON_INT)) return 0;
    uint64_t u = (uint64_t)d;
    if ((double)u != d) return 0;
    *out = u;
    return 1;
}

/* qsort has no context argument, so the sorts work on small self-contained
 * records rather than on indices into the tensor array. */
typedef struct {
    uint64_t begin, end;
    int idx;
} span;

static int cmp_span(const void *a, const void *b) {
    const span *x = a, *y = b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end) return x->end < y->end ? -1 : 1;
    return x->idx - y->idx;
}

typedef struct {
    const char *name;
    int idx;
} named;

static int cmp_named(const void *a, const void *b) {
    const named *x = a, *y = b;
    int c = strcmp(x->name, y->name);
    return c ? c : x->idx - y->idx;
}

/* Sorts names (with their indices) and reports the first duplicate, or NULL. */
static const char *first_duplicate(named *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_named);
    for (int i = 1; i < n; i++)
        if (strcmp(v[i - 1].name, v[i].name) == 0) return v[i].name;
    return NULL;
}

static int parse_metadata(const char *file, const cJSON *meta) {
    if (!cJSON_IsObject(meta)) return anvil_fail("%s: __metadata__ is not a JSON object", file);
    int m = cJSON_GetArraySize(meta);
    named *keys = malloc(sizeof *keys * (size_t)(m ? m : 1));
    if (!keys) return anvil_fail("%s: out of memory reading __metadata__", file);
    int i = 0;
    for (const cJSON *it = meta->child; it; it = it->next, i++) {
        if (!cJSON_IsString(it)) {
            anvil_fail("%s: __metadata__ value of '%s' is not a string", file, it->string);
            free(keys);
            return -1;
        }
        keys[i] = (named){it->string, i};
    }
    const char *dup = first_duplicate(keys, m);
    if (dup) anvil_fail("%s: __metadata__ key '%s' appears twice", file, dup);
    free(keys);
    return dup ? -1 : 0;
}

static int parse_entry(const char *file, const cJSON *it, uint64_t dsize, anvil_st_tensor *t, span *s) {
    const char *name = it->string;
    t->name = name;
    if (!cJSON_IsObject(it)) return anvil_fail("%s: tensor '%s': entry is not a JSON object", file, name);

    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(it, "dtype");
    if (!cJSON_IsString(dt)) return anvil_fail("%s: tensor '%s': dtype missing or not a string", file, name);
    int d = dtype_from_name(dt->valuestring);
    if (d < 0) return anvil_fail("%s: tensor '%s': unknown dtype '%.32s'", file, name, dt->valuestring);
    t->dtype = (anvil_st_dtype)d;

    const cJSON *shape = cJSON_GetObjectItemCaseSensitive(it, "shape");
    if (!cJSON_IsArray(shape)) return anvil_fail("%s: tensor '%s': shape missing or not an array", file, name);
    int nd = cJSON_GetArraySize(shape);
    if (nd > ANVIL_ST_MAX_DIMS)
        return anvil_fail("%s: tensor '%s': shape has %d dims, at most %d supported", file, name, nd,
                          ANVIL_ST_MAX_DIMS);
    t->ndim = nd;
    uint64_t numel = 1;
    int k = 0;
    for (const cJSON *dim = shape->child; dim; dim = dim->next, k++) {
        uint64_t v;
        if (!json_u64(dim, &v))
            return anvil_fail("%s: tensor '%s': shape[%d] is not a non-negative integer", file, name, k);
        t->shape[k] = (int64_t)v;
        if (__builtin_mul_overflow(numel, v, &numel))
            return anvil_fail("%s: tensor '%s': element count overflows 64 bits", file, name);
    }
    uint64_t want;
    if (__builtin_mul_overflow(numel, (uint64_t)dtypes[d].size, &want))
        return anvil_fail("%s: tensor '%s': byte size overflows 64 bits", file, name);

    const cJSON *offs = cJSON_GetObjectItemCaseSensitive(it, "data_offsets");
    uint64_t b, e;
    if (!cJSON_IsArray(offs) || cJSON_GetArraySize(offs) != 2 || !json_u64(offs->child, &b) ||
        !json_u64(offs->child->next, &e))
        return anvil_fail("%s: tensor '%s': data_offsets is not two non-negative integers", file, name);
    if (b > e)
        return anvil_fail("%s: tensor '%s': data_offsets [%llu, %llu] run backwards", file, name,
                          (unsigned long long)b, (unsigned long long)e);
    if (e > dsize)
        return anvil_fail("%s: tensor '%s': data_offsets [%llu, %llu] outside the %llu-byte data region", file,
                          name, (unsigned long long)b, (unsigned long long)e, (unsigned long long)dsize);
    if (e - b != want)
        return anvil_fail("%s: tensor '%s': data_offsets span %llu bytes but %s shape needs %llu", file, name,
                          (unsigned long long)(e - b), dtypes[d].name, (unsigned long long)want);
    t->nbytes = want;
    s->begin = b;
    s->end = e;
    return 0;
}

/* Checks that the tensors tile [0, dsize) exactly: a hole is unaccounted
 * bytes (a writer bug or tampering), an overlap would alias two tensors. */
static int check_tiling(const char *file, const anvil_st_file *f, span *s, uint64_t dsize) {
    qsort(s, (size_t)f->n, sizeof *s, cmp_span);
    uint64_t at = 0;
    for (int i = 0; i < f->n; i++) {
        if (s[i].begin < at)
            return anvil_fail("%s: tensor '%s' at [%llu, %llu] overlaps tensor '%s'", file, f->t[s[i].idx].name,
                              (unsigned long long)s[i].begin, (unsigned long long)s[i].end,
                              f->t[s[i - 1].idx].name);
        if (s[i].begin > at)
            return anvil_fail("%s: data bytes [%llu, %llu) belong to no tensor (before '%s')", file,
                              (unsigned long long)at, (unsigned long long)s[i].begin, f->t[s[i].idx].name);
        at = s[i].end;
    }
    if (at != dsize)
        return anvil_fail("%s: data bytes [%llu, %llu) belong to no tensor (after the last one)", file,
                          (unsigned long long)at, (unsigned long long)dsize);
    return 0;
}

/* The header text as one JSON object, with nothing but white space after it; NULL after anvil_fail. */
static cJSON *parse_header(const char *file, const char *hdr, uint64_t hlen) {
    const char *end = NULL;
    cJSON *root = anvil_json_parse(hdr, (size_t)hlen, &end);
    if (!root) {
        size_t at = end && end >= hdr && end <= hdr + hlen ? (size_t)(end - hdr) : 0;
        anvil_fail("%s: header is not valid JSON (near header byte %zu)", file, at);
        return NULL;
    }
    for (const char *p = end; p < hdr + hlen; p++) {
        if (*p != ' ' && *p != '\t' && *p != '\n' && *p != '\r') {
            anvil_fail("%s: header has trailing bytes after the JSON object (header byte %zu)", file,
                       (size_t)(p - hdr));
            cJSON_Delete(root);
            return NULL;
        }
    }
    if (!cJSON_IsObject(root)) {
        anvil_fail("%s: header is not a JSON object", file);
        cJSON_Delete(root);
        return NULL;
    }
    return root;
}

/* Points each tensor at its bytes in data (a misaligned one at an aligned copy), or, indexed,
 * records where its bytes begin in the file; -1 after anvil_fail. */
static int place_tensors(const char *file, anvil_st_file *f, const span *spans, const void *data, int indexed) {
    for (int i = 0; i < f->n; i++) {
        const span *sp = &spans[i];
        anvil_st_tensor *t = &f->t[sp->idx];
        if (indexed) {
            f->begin[sp->idx] = sp->begin;
            continue;
        }
        const unsigned char *p = (const unsigned char *)data + sp->begin;
        if ((uintptr_t)p % dtypes[t->dtype].size != 0) {
            void *c = alloc_aligned(t->nbytes);
            if (!c) return anvil_fail("%s: tensor '%s': out of memory copying misaligned data", file, t->name);
            memcpy(c, p, (size_t)t->nbytes);
            f->copies[sp->idx] = c;
            p = c;
        }
        t->data = p;
    }
    return 0;
}

/* Builds the file object from its header text and data region; takes
 * ownership of data (freed on failure too). Indexed: the data stays on
 * disk (data NULL), and each tensor's offset is kept instead. */
static anvil_st_file *parse(const char *file, const char *hdr, uint64_t hlen, void *data, uint64_t dsize,
                            int indexed) {
    anvil_st_file *f = calloc(1, sizeof *f);
    span *spans = NULL;
    named *names = NULL;
    if (!f) {
        free(data);
        anvil_fail("%s: out of memory", file);
        return NULL;
    }
    f->fd = -1;
    f->data = data;
    if (!(f->root = parse_header(file, hdr, hlen))) goto fail;

    int total = cJSON_GetArraySize(f->root), n = 0, n_meta = 0;
    for (const cJSON *it = f->root->child; it; it = it->next) {
        if (strcmp(it->string, "__metadata__") == 0) {
            if (++n_meta > 1) {
                anvil_fail("%s: __metadata__ appears twice", file);
                goto fail;
            }
            if (parse_metadata(file, it) < 0) goto fail;
            f->meta = it;
        }
    }
    n = total - n_meta;
    size_t cap = (size_t)(n ? n : 1);
    f->t = calloc(cap, sizeof *f->t);
    f->by_name = malloc(cap * sizeof *f->by_name);
    f->copies = calloc(cap, sizeof *f->copies);
    spans = malloc(cap * sizeof *spans);
    names = malloc(cap * sizeof *names);
    if (indexed) f->begin = malloc(cap * sizeof *f->begin);
    if (!f->t || !f->by_name || !f->copies || !spans || !names || (indexed && !f->begin)) {
        anvil_fail("%s: out of memory for %d tensors", file, n);
        goto fail;
    }
    f->n = n;

    int i = 0;
    for (const cJSON *it = f->root->child; it; it = it->next) {
        if (it == f->meta) continue;
        if (parse_entry(file, it, dsize, &f->t[i], &spans[i]) < 0) goto fail;
        spans[i].idx = i;
        names[i] = (named){it->string, i};
        i++;
    }
    const char *dup = first_duplicate(names, n);
    if (dup) {
        anvil_fail("%s: tensor name '%s' appears twice", file, dup);
        goto fail;
    }
    for (i = 0; i < n; i++) f->by_name[i] = names[i].idx;
    if (check_tiling(file, f, spans, dsize) < 0 || place_tensors(file, f, spans, data, indexed) < 0) goto fail;
    free(spans);
    free(names);
    return f;

fail:
    free(spans);
    free(names);
    anvil_st_close(f);
    return NULL;
}

static uint64_t read_le64(const unsigned char *b) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = v << 8 | b[i];
    return v;
}

/* Validates the length field against the bytes that exist; returns the
 * header length or -1. */
static int64_t check_header_len(const char *file, const unsigned char *lenbuf, uint64_t size) {
    if (size < 8)
        return anvil_fail("%s: file is %llu bytes, shorter than the 8-byte header length", file,
                          (unsigned long long)size);
    uint64_t hlen = read_le64(lenbuf);
    if (hlen > MAX_HEADER_BYTES)
        return anvil_fail("%s: header length %llu is absurd (limit %u)", file, (unsigned long long)hlen,
                          MAX_HEADER_BYTES);
    if (hlen > size - 8)
        return anvil_fail("%s: header length %llu runs past the end of the %llu-byte file", file,
                          (unsigned long long)hlen, (unsigned long long)size);
    return (int64_t)hlen;
}

anvil_st_file *anvil_st_open_mem(const void *buf, size_t len, const char *name) {
    const unsigned char *b = buf;
    int64_t hlen = check_header_len(name, b, len);
    if (hlen < 0) return NULL;
    uint64_t dsize = len - 8 - (uint64_t)hlen;
    void *data = alloc_aligned(dsize);
    if (!data) {
        anvil_fail("%s: out of memory for %llu data bytes", name, (unsigned long long)dsize);
        return NULL;
    }
    if (dsize) memcpy(data, b + 8 + hlen, (size_t)dsize);
    return parse(name, (const char *)b + 8, (uint64_t)hlen, data, dsize, 0);
}

static int read_full(int fd, void *buf, uint64_t n, uint64_t off) {
    unsigned char *p = buf;
    while (n) {
        size_t chunk = n > (1u << 30) ? (1u << 30) : (size_t)n;
        ssize_t r = pread(fd, p, chunk, (off_t)off);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return r < 0 ? -1 : -2;
        p += r;
        off += (uint64_t)r;
        n -= (uint64_t)r;
    }
    return 0;
}

/* The file at path, read whole, or as an index: the header only, the file kept open for
 * anvil_st_read. */
static anvil_st_file *open_file(const char *path, int indexed) {
    if (anvil_confined(path, "safetensors file")) return NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        anvil_fail("%s: cannot open: %s", path, strerror(errno));
        return NULL;
    }
    struct stat st;
    if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
        anvil_fail("%s: not a regular file", path);
        close(fd);
        return NULL;
    }
    uint64_t size = (uint64_t)st.st_size;
    unsigned char lenbuf[8] = {0};
    char *hdr = NULL;
    void *data = NULL;
    int rc = size >= 8 ? read_full(fd, lenbuf, 8, 0) : 0;
    int64_t hlen = rc == 0 ? check_header_len(path, lenbuf, size) : -1;
    if (hlen >= 0) {
        uint64_t dsize = size - 8 - (uint64_t)hlen;
        hdr = malloc((size_t)hlen + 1);
        if (!indexed) data = alloc_aligned(dsize);
        if (!hdr || (!indexed && !data)) {
            anvil_fail("%s: out of memory for a %llu-byte file", path, (unsigned long long)size);
            hlen = -1;
        } else if ((rc = read_full(fd, hdr, (uint64_t)hlen, 8)) == 0 && !indexed) {
            rc = read_full(fd, data, dsize, 8 + (uint64_t)hlen);
        }
        if (hlen >= 0 && rc == 0) {
            anvil_st_file *f = parse(path, hdr, (uint64_t)hlen, data, dsize, indexed);
            free(hdr);
            if (f && indexed) {
                f->fd = fd;
                f->base = 8 + (uint64_t)hlen;
            } else {
                close(fd);
            }
            return f;
        }
    }
    if (rc == -1) anvil_fail("%s: read error: %s", path, strerror(errno));
    else if (rc == -2) anvil_fail("%s: file shrank while being read", path);
    free(hdr);
    free(data);
    close(fd);
    return NULL;
}

anvil_st_file *anvil_st_open(const char *path) { return open_file(path, 0); }

anvil_st_file *anvil_st_open_index(const char *path) { return open_file(path, 1); }

int anvil_st_read(const anvil_st_file *f, const anvil_st_tensor *t, uint64_t off, uint64_t n, void *dst) {
    if (f->fd < 0) return anvil_fail("safetensors: tensor '%s' read from a file not opened as an index", t->name);
    if (off > t->nbytes || n > t->nbytes - off)
        return anvil_fail("safetensors: tensor '%s' has %llu bytes; read of [%llu, +%llu) is outside", t->name,
                          (unsigned long long)t->nbytes, (unsigned long long)off, (unsigned long long)n);
    int rc = read_full(f->fd, dst, n, f->base + f->begin[t - f->t] + off);
    if (rc) return anvil_fail("safetensors: tensor '%s': %s", t->name, rc == -1 ? strerror(errno) : "file shrank");
    return 0;
}

/* ---- writing ---- */

static int check_write_args(const char *path, const anvil_st_tensor *ts, int n, const char *const *kv, int nm,
                            int need_data) {
    if (n < 0 || nm < 0 || (n > 0 && !ts) || (nm > 0 && !kv))
        return anvil_fail("%s: bad tensor or metadata count", path);
    for (int i = 0; i < n; i++) {
        const anvil_st_tensor *t = &ts[i];
        if (!t->name) return anvil_fail("%s: tensor %d has no name", path, i);
        if (strcmp(t->name, "__metadata__") == 0)
            return anvil_fail("%s: '__metadata__' is reserved and cannot name a tensor", path);
        if (anvil_st_dtype_size(t->dtype) == 0) return anvil_fail("%s: tensor '%s': bad dtype", path, t->name);
        if (t->ndim < 0 || t->ndim > ANVIL_ST_MAX_DIMS)
            return anvil_fail("%s: tensor '%s': ndim %d out of range", path, t->name, t->ndim);
        uint64_t numel = 1;
        for (int k = 0; k < t->ndim; k++)
            if (t->shape[k] < 0 || (double)t->shape[k] > MAX_JSON_INT ||
                __builtin_mul_overflow(numel, (uint64_t)t->shape[k], &numel))
                return anvil_fail("%s: tensor '%s': bad shape[%d]", path, t->name, k);
        uint64_t want;
        if (__builtin_mul_overflow(numel, (uint64_t)anvil_st_dtype_size(t->dtype), &want) || want != t->nbytes)
            return anvil_fail("%s: tensor '%s': nbytes %llu does not match its shape and dtype", path, t->name,
                              (unsigned long long)t->nbytes);
        if (need_data && t->nbytes && !t->data) return anvil_fail("%s: tensor '%s': no data", path, t->name);
    }
    for (int i = 0; i < 2 * nm; i++)
        if (!kv[i]) return anvil_fail("%s: metadata entry %d has a NULL %s", path, i / 2, i % 2 ? "value" : "key");

    int big = n > nm ? n : nm;
    named *v = malloc(sizeof *v * (size_t)(big ? big : 1));
    if (!v) return anvil_fail("%s: out of memory", path);
    for (int i = 0; i < n; i++) v[i] = (named){ts[i].name, i};
    const char *dup = first_duplicate(v, n);
    if (dup) {
        anvil_fail("%s: tensor name '%s' given twice", path, dup);
    } else {
        for (int i = 0; i < nm; i++) v[i] = (named){kv[2 * i], i};
        dup = first_duplicate(v, nm);
        if (dup) anvil_fail("%s: metadata key '%s' given twice", path, dup);
    }
    free(v);
    return dup ? -1 : 0;
}

/* The header text. Shapes and offsets are emitted as raw integer text
 * because cJSON prints large doubles in exponent form, which other readers
 * refuse as an integer. */
static char *build_header(const char *path, const anvil_st_tensor *ts, int n, const char *const *kv, int nm) {
    cJSON *root = cJSON_CreateObject();
    char *text = NULL;
    if (!root) goto oom;
    if (nm > 0) {
        cJSON *meta = cJSON_AddObjectToObject(root, "__metadata__");
        if (!meta) goto oom;
        for (int i = 0; i < nm; i++)
            if (!cJSON_AddStringToObject(meta, kv[2 * i], kv[2 * i + 1])) goto oom;
    }
    uint64_t off = 0;
    for (int i = 0; i < n; i++) {
        const anvil_st_tensor *t = &ts[i];
        char buf[32 * (ANVIL_ST_MAX_DIMS + 1)];
        cJSON *e = cJSON_AddObjectToObject(root, t->name);
        if (!e || !cJSON_AddStringToObject(e, "dtype", dtypes[t->dtype].name)) goto oom;
        int len = snprintf(buf, sizeof buf, "[");
        for (int k = 0; k < t->ndim; k++)
            len += snprintf(buf + len, sizeof buf - (size_t)len, "%s%lld", k ? "," : "", (long long)t->shape[k]);
        snprintf(buf + len, sizeof buf - (size_t)len, "]");
        if (!cJSON_AddRawToObject(e, "shape", buf)) goto oom;
        snprintf(buf, sizeof buf, "[%llu,%llu]", (unsigned long long)off, (unsigned long long)(off + t->nbytes));
        if (!cJSON_AddRawToObject(e, "data_offsets", buf)) goto oom;
        off += t->nbytes;
    }
    text = cJSON_PrintUnformatted(root);
    if (!text) goto oom;
    cJSON_Delete(root);
    return text;
oom:
    cJSON_Delete(root);
    anvil_fail("%s: out of memory building the header", path);
    return NULL;
}

/* The header's length in the file: padded with spaces so that the data region is 8-byte aligned. */
static size_t padded_header(size_t text_len) { return (text_len + 7) / 8 * 8; }

static void put_header_length(unsigned char out[8], size_t hlen) {
    for (int i = 0; i < 8; i++) out[i] = (unsigned char)((uint64_t)hlen >> (8 * i));
}

struct anvil_st_stream {
    anvil_atomic_file f;
    uint64_t left; /* data bytes still to come */
};

anvil_st_stream *anvil_st_stream_open(const char *path, const anvil_st_tensor *tensors, int n,
                                      const char *const *meta_kv, int n_meta_pairs) {
    if (check_write_args(path, tensors, n, meta_kv, n_meta_pairs, 0) < 0) return NULL;
    anvil_st_stream *s = calloc(1, sizeof *s);
    char *text = s ? build_header(path, tensors, n, meta_kv, n_meta_pairs) : NULL;
    if (!s) anvil_fail("%s: out of memory", path);
    if (!text) {
        free(s);
        return NULL;
    }
    size_t tlen = strlen(text), hlen = padded_header(tlen);
    for (int i = 0; i < n; i++) s->left += tensors[i].nbytes;
    unsigned char lenbuf[8];
    put_header_length(lenbuf, hlen);
    static const char spaces[8] = "        ";
    int rc = anvil_atomic_open(&s->f, path);
    if (!rc && (anvil_write_all(s->f.fd, lenbuf, 8, path) || anvil_write_all(s->f.fd, text, tlen, path) ||
                anvil_write_all(s->f.fd, spaces, hlen - tlen, path))) {
        anvil_atomic_abort(&s->f);
        rc = -1;
    }
    cJSON_free(text);
    if (rc) {
        free(s);
        return NULL;
    }
    return s;
}

int anvil_st_stream_write(anvil_st_stream *s, const void *data, size_t n) {
    if (n > s->left) return anvil_fail("%s: %zu bytes more than the header announced", s->f.path, n - (size_t)s->left);
    s->left -= n;
    return anvil_write_all(s->f.fd, data, n, s->f.path);
}

int anvil_st_stream_commit(anvil_st_stream *s) {
    int rc = s->left ? anvil_fail("%s: %llu bytes of tensor data missing", s->f.path, (unsigned long long)s->left) : 0;
    if (rc) anvil_atomic_abort(&s->f);
    else rc = anvil_atomic_commit(&s->f);
    free(s);
    return rc;
}

void anvil_st_stream_abort(anvil_st_stream *s) {
    if (!s) return;
    anvil_atomic_abort(&s->f);
    free(s);
}

int anvil_st_write(const char *path, const anvil_st_tensor *tensors, int n, const char *const *meta_kv,
                   int n_meta_pairs) {
    if (check_write_args(path, tensors, n, meta_kv, n_meta_pairs, 1) < 0) return -1;
    anvil_st_stream *s = anvil_st_stream_open(path, tensors, n, meta_kv, n_meta_pairs);
    int ok = s != NULL;
    for (int i = 0; ok && i < n; i++) ok = anvil_st_stream_write(s, tensors[i].data, tensors[i].nbytes) == 0;
    if (!ok) {
        anvil_st_stream_abort(s);
        return -1;
    }
    return anvil_st_stream_commit(s);
}

void anvil_st_image_free(anvil_st_image *img) {
    free(img->bytes);
    free(img->offsets);
    memset(img, 0, sizeof *img);
}

/* Images are 2 MiB aligned and advised onto transparent huge pages: the first layout touches
 * every page of a checkpoint-sized buffer, and at 4 KiB a page the faults alone cost seconds on
 * a virtual machine. The rounding also leaves room for a header that grows by a few bytes. */
static int image_reserve(anvil_st_image *img, const char *name, size_t len, int n) {
    const size_t huge = (size_t)2 << 20;
    size_t need = (len + ANVIL_DIRECT_ALIGN - 1) / ANVIL_DIRECT_ALIGN * ANVIL_DIRECT_ALIGN;
    if (need > img->cap) {
        size_t cap = (need + huge - 1) / huge * huge;
        free(img->bytes);
        img->cap = 0;
        if (!(img->bytes = aligned_alloc(huge, cap))) return anvil_fail("%s: out of memory for %zu bytes", name, len);
        madvise(img->bytes, cap, MADV_HUGEPAGE);
        img->cap = cap;
    }
    if (n + 1 > img->noffsets) {
        uint64_t *o = realloc(img->offsets, (size_t)(n + 1) * sizeof *o);
        if (!o) return anvil_fail("%s: out of memory", name);
        img->offsets = o;
        img->noffsets = n + 1;
    }
    memset(img->bytes + len, 0, need - len);
    return 0;
}

int anvil_st_image_layout(anvil_st_image *img, const char *name, const anvil_st_tensor *tensors, int n,
                          const char *const *meta_kv, int n_meta_pairs) {
    if (check_write_args(name, tensors, n, meta_kv, n_meta_pairs, 0) < 0) return -1;
    char *text = build_header(name, tensors, n, meta_kv, n_meta_pairs);
    if (!text) return -1;
    size_t tlen = strlen(text), hlen = padded_header(tlen), len = 8 + hlen;
    for (int i = 0; i < n; i++) len += tensors[i].nbytes;
    if (image_reserve(img, name, len, n)) {
        cJSON_free(text);
        return -1;
    }
    put_header_length(img->bytes, hlen);
    memcpy(img->bytes + 8, text, tlen);
    memset(img->bytes + 8 + tlen, ' ', hlen - tlen);
    cJSON_free(text);
    uint64_t at = 8 + hlen;
    for (int i = 0; i < n; i++) {
        img->offsets[i] = at;
        at += tensors[i].nbytes;
    }
    img->len = len;
    return 0;
}
