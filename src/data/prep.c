#include "data/prep.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/error.h"
#include "data/bytetok.h"
#include "data/shard.h"

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
    size_t cap = 1 << 20, len = 0;
    unsigned char *buf = malloc(cap);
    if (!buf) return anvil_fail("%s: out of memory", name);
    for (;;) {
        if (len == cap) {
            unsigned char *nb = realloc(buf, cap * 2);
            if (!nb) {
                free(buf);
                return anvil_fail("%s: out of memory after %zu bytes", name, len);
            }
            buf = nb;
            cap *= 2;
        }
        ssize_t got = read(fd, buf + len, cap - len);
        if (got < 0 && errno == EINTR) continue;
        if (got < 0) {
            int e = errno;
            free(buf);
            return anvil_fail("%s: read failed after %zu bytes: %s", name, len, strerror(e));
        }
        if (got == 0) break;
        len += (size_t)got;
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

/* ---- output ---- */

enum { TRAIN, VAL, NSPLITS };
static const char *const split_name[NSPLITS] = {"train", "val"};

typedef struct {
    int64_t tokens; /* in the whole split */
    int64_t nshards, next_shard;
    int64_t shard_left; /* tokens still to go into the open shard */
    anvil_shard_writer *w;
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
            so->w = anvil_shard_writer_open(so->path, ANVIL_SHARD_V16);
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

static int write_manifest(const anvil_prep_opts *o, cJSON *shards, const source *src, int nsrc) {
    char path[4096];
    snprintf(path, sizeof path, "%s/manifest.json", o->out_dir);
    cJSON *root = cJSON_CreateObject();
    cJSON *sources = cJSON_CreateArray();
    int ok = root && sources;
    ok = ok && cJSON_AddStringToObject(root, "tokenizer", "bytes");
    ok = ok && cJSON_AddNumberToObject(root, "vocab_size", ANVIL_BYTETOK_VOCAB);
    ok = ok && cJSON_AddNumberToObject(root, "eot", ANVIL_BYTETOK_EOT);
    ok = ok && cJSON_AddNumberToObject(root, "shard_version", ANVIL_SHARD_V16);
    ok = ok && cJSON_AddNumberToObject(root, "val_fraction", o->val_fraction);
    if (ok && o->delimiter) {
        /* cJSON stops at a NUL; a delimiter holding one is recorded up to it. */
        char *delim = strndup(o->delimiter, o->delimiter_len);
        ok = delim && cJSON_AddStringToObject(root, "delimiter", delim);
        free(delim);
    } else if (ok) {
        ok = cJSON_AddNullToObject(root, "delimiter") != NULL;
    }
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

int anvil_prep_run(const anvil_prep_opts *o, anvil_prep_stats *stats) {
    memset(stats, 0, sizeof *stats);
    if (!(o->val_fraction >= 0 && o->val_fraction <= 1))
        return anvil_fail("--val-fraction %g: must be in [0, 1]", o->val_fraction);
    if (o->shard_tokens < 1 || o->shard_tokens > INT32_MAX)
        return anvil_fail("--shard-tokens %lld: must be in [1, %d]", (long long)o->shard_tokens, INT32_MAX);
    if (o->delimiter && !o->delimiter_len) return anvil_fail("--delimiter: must not be empty");
    if (o->ninputs < 1) return anvil_fail("prep: no input files");

    source *src = calloc((size_t)o->ninputs, sizeof *src);
    int32_t *tok = malloc(CHUNK * sizeof *tok);
    cJSON *shards = cJSON_CreateArray();
    split_out so[NSPLITS];
    memset(so, 0, sizeof so);
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

    /* Pass 1 sizes the splits, so that pass 2 can cut them into equal shards;
     * it keeps each document's split so pass 2 need not hash again. */
    unsigned char *splits = NULL;
    size_t ndocs = 0, splits_cap = 0;
    for (int i = 0; !rc && i < nloaded; i++) {
        size_t off = 0, len;
        const unsigned char *doc;
        while (!rc && next_doc(&src[i], o, &off, &doc, &len)) {
            if (ndocs == splits_cap) {
                splits_cap = splits_cap ? splits_cap * 2 : 4096;
                unsigned char *ns = realloc(splits, splits_cap);
                if (!ns) {
                    rc = anvil_fail("prep: out of memory after %zu documents", ndocs);
                    break;
                }
                splits = ns;
            }
            int s = anvil_prep_is_val(anvil_fnv1a64(doc, len), o->val_fraction) ? VAL : TRAIN;
            splits[ndocs++] = (unsigned char)s;
            so[s].tokens += (int64_t)len + 1;
            *(s == VAL ? &stats->val_docs : &stats->train_docs) += 1;
            src[i].docs++;
        }
    }
    if (!rc && stats->train_docs + stats->val_docs == 0) rc = anvil_fail("prep: the input holds no documents");
    if (!rc) rc = mkdir_p(o->out_dir);
    for (int s = 0; !rc && s < NSPLITS; s++) {
        so[s].nshards = (so[s].tokens + o->shard_tokens - 1) / o->shard_tokens;
        int wanted = s == VAL ? o->val_fraction > 0 : o->val_fraction < 1;
        if (!so[s].tokens && wanted) note(o, "no document fell in the %s split, so it has no shards", split_name[s]);
    }

    manifest_ctx m = {shards, o->out_dir};
    size_t d = 0;
    for (int i = 0; !rc && i < nloaded; i++) {
        size_t off = 0, len;
        const unsigned char *doc;
        while (!rc && next_doc(&src[i], o, &off, &doc, &len)) {
            int s = splits[d++];
            int32_t eot = ANVIL_BYTETOK_EOT;
            rc = emit(&so[s], s, &eot, 1, &m);
            for (size_t k = 0; !rc && k < len; k += CHUNK) {
                size_t n = len - k < CHUNK ? len - k : CHUNK;
                anvil_bytetok_encode(doc + k, n, tok);
                rc = emit(&so[s], s, tok, (int64_t)n, &m);
            }
        }
    }
    for (int s = 0; s < NSPLITS; s++) anvil_shard_writer_abort(so[s].w); /* only left open on failure */
    if (!rc) rc = remove_stale(o, so);
    if (!rc) rc = write_manifest(o, shards, src, nloaded);
    if (!rc) {
        stats->train_tokens = so[TRAIN].tokens;
        stats->val_tokens = so[VAL].tokens;
        stats->train_shards = (int)so[TRAIN].nshards;
        stats->val_shards = (int)so[VAL].nshards;
    }
    for (int i = 0; i < nloaded; i++) free_source(&src[i]);
    free(src);
    free(tok);
    free(splits);
    cJSON_Delete(shards);
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
