#include "data/prep.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <omp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/crc32c.h"
#include "core/error.h"
#include "core/fsutil.h"
#include "data/bytetok.h"
#include "data/prep_internal.h"
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

const char *const prep_split_name[NSPLITS] = {"train", "val"};

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

#define CHUNK 65536
/* Text per unit of work: large enough to amortize scheduling, small enough
 * that even a few megabytes keep several threads busy. */
#define WORK_BYTES ((size_t)1 << 18)
/* Chunks encoded at once per worker: enough that chunks of unequal cost even
 * out under dynamic scheduling, few enough to bound the tokens in memory. */
#define CHUNKS_PER_WORKER 8

/* ---- output ---- */

typedef struct {
    /* Where this run starts writing the split: chunks before from_chunk, and
     * the first `skip` tokens of from_chunk, are in shards already kept. */
    int64_t from_chunk, skip;
    int64_t chunk, in_chunk; /* the chunk being emitted and its tokens of this split so far */
    int64_t next_shard;      /* index of the open (or next) shard */
    int64_t tokens;          /* in the finished shards */
    int64_t open_tokens;     /* in the open shard */
    anvil_shard_writer *w;
    char path[4096];
} split_out;

typedef struct {
    const anvil_prep_opts *o;
    const anvil_tok *tk;
    const char *tok_data; /* the rank file's bytes */
    size_t tok_len;
    const source *src;
    int nsrc;
    chunk *cs;
    size_t nchunks, unit;
    int version;
    split_out so[NSPLITS];
    cJSON *tokenizer, *options; /* as the manifest records them, for a re-run to compare */
    cJSON *shards[NSPLITS];     /* each split's finished shards, kept and new, in order */
    int dir_ready, written, kept;
    int64_t docs[NSPLITS], text_bytes[NSPLITS];
} run;

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

static void crc_hex(uint32_t crc, char hex[9]) { snprintf(hex, 9, "%08" PRIx32, crc); }

static cJSON *sources_json(const run *r, int with_docs) {
    cJSON *a = cJSON_CreateArray();
    for (int i = 0; a && i < r->nsrc; i++) {
        const source *s = &r->src[i];
        cJSON *e = cJSON_CreateObject();
        int ok = e && cJSON_AddStringToObject(e, "path", s->name) &&
                 cJSON_AddNumberToObject(e, "bytes", (double)s->len) && cJSON_AddItemToArray(a, e);
        if (!ok) {
            cJSON_Delete(e);
            cJSON_Delete(a);
            return NULL;
        }
        if (s->is_file) {
            char mtime[64];
            snprintf(mtime, sizeof mtime, "%lld.%09lld", (long long)s->mtime_s, (long long)s->mtime_ns);
            ok = cJSON_AddNumberToObject(e, "size", (double)s->file_size) &&
                 cJSON_AddStringToObject(e, "mtime", mtime);
        } else {
            char hex[9];
            crc_hex(s->crc, hex);
            ok = cJSON_AddStringToObject(e, "crc32c", hex) != NULL;
        }
        if (ok && with_docs) ok = cJSON_AddNumberToObject(e, "documents", (double)s->docs) != NULL;
        if (!ok) {
            cJSON_Delete(a);
            return NULL;
        }
    }
    return a;
}

static int write_manifest(run *r, int complete) {
    const anvil_prep_opts *o = r->o;
    char path[4096];
    snprintf(path, sizeof path, "%s/manifest.json", o->out_dir);
    cJSON *root = cJSON_CreateObject();
    int vocab = r->tk ? anvil_tok_vocab_size(r->tk) : ANVIL_BYTETOK_VOCAB;
    int ok = root && cJSON_AddItemToObject(root, "tokenizer", cJSON_Duplicate(r->tokenizer, 1)) &&
             cJSON_AddNumberToObject(root, "vocab_size", vocab) &&
             cJSON_AddNumberToObject(root, "eot", r->tk ? anvil_tok_eot(r->tk) : ANVIL_BYTETOK_EOT) &&
             cJSON_AddNumberToObject(root, "shard_version", r->version) &&
             cJSON_AddNumberToObject(root, "val_fraction", o->val_fraction);
    if (ok && o->delimiter) {
        /* cJSON stops at a NUL; a delimiter holding one is recorded up to it
         * here (options.delimiter_hex has all of it). */
        char *delim = strndup(o->delimiter, o->delimiter_len);
        ok = delim && cJSON_AddStringToObject(root, "delimiter", delim);
        free(delim);
    } else if (ok) {
        ok = cJSON_AddNullToObject(root, "delimiter") != NULL;
    }
    if (ok && o->jsonl_field) ok = cJSON_AddStringToObject(root, "jsonl_field", o->jsonl_field) != NULL;
    ok = ok && cJSON_AddItemToObject(root, "options", cJSON_Duplicate(r->options, 1)) &&
         cJSON_AddBoolToObject(root, "complete", complete);
    /* By split and index rather than in order of completion, so that the
     * manifest does not depend on where earlier runs stopped. */
    cJSON *shards = ok ? cJSON_AddArrayToObject(root, "shards") : NULL;
    ok = shards != NULL;
    for (int s = 0; ok && s < NSPLITS; s++) {
        const cJSON *e;
        cJSON_ArrayForEach(e, r->shards[s]) ok = ok && cJSON_AddItemReferenceToArray(shards, (cJSON *)e);
    }
    /* Text bytes beside tokens give bits per byte, a loss comparable across
     * tokenizers. */
    for (int s = 0; ok && complete && s < NSPLITS; s++) {
        cJSON *splits = cJSON_GetObjectItemCaseSensitive(root, "splits");
        if (!splits) splits = cJSON_AddObjectToObject(root, "splits");
        cJSON *e = splits ? cJSON_AddObjectToObject(splits, prep_split_name[s]) : NULL;
        ok = e && cJSON_AddNumberToObject(e, "documents", (double)r->docs[s]) &&
             cJSON_AddNumberToObject(e, "tokens", (double)(r->so[s].tokens + r->so[s].open_tokens)) &&
             cJSON_AddNumberToObject(e, "text_bytes", (double)r->text_bytes[s]);
    }
    if (ok) {
        cJSON *sources = sources_json(r, complete);
        ok = sources && cJSON_AddItemToObject(root, "sources", sources);
        if (!ok) cJSON_Delete(sources);
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

/* Commits the open shard of split s and records it, with where the next
 * one starts, in a rewritten manifest. */
static int finish_shard(run *r, int s) {
    split_out *so = &r->so[s];
    anvil_shard_writer *w = so->w;
    so->w = NULL;
    if (anvil_shard_writer_commit(w)) return -1;
    uint64_t bytes;
    uint32_t crc;
    if (anvil_crc32c_file(so->path, &bytes, &crc)) return -1;
    char hex[9];
    crc_hex(crc, hex);
    const chunk *c = &r->cs[so->chunk];
    cJSON *e = cJSON_CreateObject(), *next = cJSON_CreateObject();
    int ok = e && next && cJSON_AddStringToObject(e, "file", strrchr(so->path, '/') + 1) &&
             cJSON_AddStringToObject(e, "split", prep_split_name[s]) &&
             cJSON_AddNumberToObject(e, "tokens", (double)so->open_tokens) &&
             cJSON_AddNumberToObject(e, "bytes", (double)bytes) && cJSON_AddStringToObject(e, "crc32c", hex) &&
             cJSON_AddNumberToObject(next, "chunk", (double)so->chunk) &&
             cJSON_AddNumberToObject(next, "tokens", (double)so->in_chunk) &&
             cJSON_AddStringToObject(next, "input", r->src[c->src].name) &&
             cJSON_AddNumberToObject(next, "offset", (double)c->start);
    if (ok) {
        ok = cJSON_AddItemToObject(e, "next", next);
        if (ok) next = NULL;
        ok = ok && cJSON_AddItemToArray(r->shards[s], e);
        if (ok) e = NULL;
    }
    cJSON_Delete(next);
    cJSON_Delete(e);
    if (!ok) return anvil_fail("%s: out of memory building the manifest", so->path);
    so->tokens += so->open_tokens;
    so->open_tokens = 0;
    so->next_shard++;
    r->written++;
    return write_manifest(r, 0);
}

static int emit(run *r, int s, const int32_t *tok, int64_t n) {
    split_out *so = &r->so[s];
    if (so->chunk < so->from_chunk) return 0;
    if (so->chunk == so->from_chunk && so->skip > 0) {
        int64_t k = n < so->skip ? n : so->skip;
        tok += k;
        n -= k;
        so->skip -= k;
        so->in_chunk += k;
    }
    while (n > 0) {
        if (!so->w) {
            if (!r->dir_ready && mkdir_p(r->o->out_dir)) return -1;
            r->dir_ready = 1;
            snprintf(so->path, sizeof so->path, "%s/%s_%06lld.bin", r->o->out_dir, prep_split_name[s],
                     (long long)so->next_shard);
            so->w = anvil_shard_writer_open(so->path, r->version);
            if (!so->w) return -1;
        }
        int64_t room = r->o->shard_tokens - so->open_tokens;
        int64_t k = n < room ? n : room;
        if (anvil_shard_writer_append(so->w, tok, k)) return -1;
        tok += k;
        n -= k;
        so->in_chunk += k;
        so->open_tokens += k;
        if (so->open_tokens == r->o->shard_tokens && finish_shard(r, s)) return -1;
    }
    return 0;
}

/* Emits chunk i's tokens. Byte-level chunks of plain text hold no tokens:
 * they are cheap to make again here from the text. */
static int emit_chunk(run *r, size_t i, int stored, int32_t *tok) {
    const anvil_prep_opts *o = r->o;
    chunk *c = &r->cs[i];
    int rc = 0;
    for (int s = 0; s < NSPLITS; s++) {
        r->so[s].chunk = (int64_t)i;
        r->so[s].in_chunk = 0;
    }
    if (stored) {
        for (int s = 0; !rc && s < NSPLITS; s++) rc = emit(r, s, c->tok[s], c->ntok[s]);
    } else if ((int64_t)i >= r->so[TRAIN].from_chunk || (int64_t)i >= r->so[VAL].from_chunk) {
        source v = prep_chunk_view(r->src, c);
        size_t off = 0, len;
        const unsigned char *doc;
        while (!rc && prep_next_doc(&v, o, &off, &doc, &len)) {
            int s = anvil_prep_is_val(anvil_fnv1a64(doc, len), o->val_fraction) ? VAL : TRAIN;
            if ((int64_t)i < r->so[s].from_chunk) continue;
            int32_t eot = ANVIL_BYTETOK_EOT;
            rc = emit(r, s, &eot, 1);
            for (size_t k = 0; !rc && k < len; k += CHUNK) {
                size_t n = len - k < CHUNK ? len - k : CHUNK;
                anvil_bytetok_encode(doc + k, n, tok);
                rc = emit(r, s, tok, (int64_t)n);
            }
        }
    }
    for (int s = 0; !rc && s < NSPLITS; s++)
        if ((int64_t)i == r->so[s].from_chunk && r->so[s].skip > 0)
            rc = anvil_fail("%s/manifest.json: the %s split resumes %lld tokens past the end of its chunk %zu; "
                            "delete the manifest to start over",
                            o->out_dir, prep_split_name[s], (long long)r->so[s].skip, i);
    return rc;
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

static const char *const tok_copy_name = "tokenizer.tiktoken";

/* A temporary file (src/core/fsutil.h names them "<file>.tmp.XXXXXX") that a
 * killed run left beside one of the files prep writes. */
static int is_leftover_tmp(const char *name) {
    const char *t = strstr(name, ".tmp.");
    if (!t || strlen(t) != 11) return 0;
    char base[256];
    snprintf(base, sizeof base, "%.*s", (int)(t - name), name);
    return !strcmp(base, "manifest.json") || !strcmp(base, tok_copy_name) || shard_index(base, "train") >= 0 ||
           shard_index(base, "val") >= 0;
}

static int remove_stale(const run *r) {
    const anvil_prep_opts *o = r->o;
    DIR *d = opendir(o->out_dir);
    if (!d) return anvil_fail("--out %s: cannot list: %s", o->out_dir, strerror(errno));
    struct dirent *e;
    int rc = 0;
    while ((e = readdir(d))) {
        if (is_leftover_tmp(e->d_name)) {
            char path[4096];
            snprintf(path, sizeof path, "%s/%s", o->out_dir, e->d_name);
            if (unlink(path) != 0) rc = anvil_fail("%s: cannot remove: %s", path, strerror(errno));
            else note(o, "removed %s, left by an interrupted run", path);
            continue;
        }
        for (int s = 0; s < NSPLITS; s++) {
            long idx = shard_index(e->d_name, prep_split_name[s]);
            if (idx < 0 || idx < r->so[s].next_shard) continue;
            char path[4096];
            snprintf(path, sizeof path, "%s/%s", o->out_dir, e->d_name);
            if (unlink(path) != 0) rc = anvil_fail("%s: cannot remove stale shard: %s", path, strerror(errno));
            else note(o, "removed stale shard %s from an earlier run", path);
        }
    }
    closedir(d);
    return rc;
}

/* ---- resuming ---- */

static int build_fingerprint(run *r) {
    const anvil_prep_opts *o = r->o;
    if (r->tk) {
        char hex[9];
        crc_hex(anvil_crc32c(0, r->tok_data, r->tok_len), hex);
        r->tokenizer = cJSON_CreateObject();
        if (!r->tokenizer || !cJSON_AddStringToObject(r->tokenizer, "file", o->tokenizer_file) ||
            !cJSON_AddStringToObject(r->tokenizer, "pattern", anvil_tok_pattern_name(r->tk)) ||
            !cJSON_AddNumberToObject(r->tokenizer, "size", (double)r->tok_len) ||
            !cJSON_AddStringToObject(r->tokenizer, "crc32c", hex) ||
            !cJSON_AddStringToObject(r->tokenizer, "copy", tok_copy_name))
            return anvil_fail("prep: out of memory");
    } else if (!(r->tokenizer = cJSON_CreateString("bytes"))) {
        return anvil_fail("prep: out of memory");
    }
    r->options = cJSON_CreateObject();
    int ok = r->options && cJSON_AddNumberToObject(r->options, "val_fraction", o->val_fraction);
    if (ok && o->delimiter) {
        char *hex = malloc(2 * o->delimiter_len + 1);
        for (size_t i = 0; hex && i < o->delimiter_len; i++)
            snprintf(hex + 2 * i, 3, "%02x", (unsigned char)o->delimiter[i]);
        ok = hex && cJSON_AddStringToObject(r->options, "delimiter_hex", hex);
        free(hex);
    } else if (ok) {
        ok = cJSON_AddNullToObject(r->options, "delimiter_hex") != NULL;
    }
    ok = ok && (o->jsonl_field ? cJSON_AddStringToObject(r->options, "jsonl_field", o->jsonl_field)
                               : cJSON_AddNullToObject(r->options, "jsonl_field"));
    ok = ok && cJSON_AddNumberToObject(r->options, "shard_tokens", (double)o->shard_tokens) &&
         cJSON_AddNumberToObject(r->options, "chunk_bytes", (double)r->unit);
    return ok ? 0 : anvil_fail("prep: out of memory");
}

/* Whether a and b agree on each of the keys (absent in both counts as agreeing). */
static int same_keys(const cJSON *a, const cJSON *b, const char *const *keys) {
    for (; *keys; keys++) {
        const cJSON *x = cJSON_GetObjectItemCaseSensitive(a, *keys), *y = cJSON_GetObjectItemCaseSensitive(b, *keys);
        if ((x == NULL) != (y == NULL) || (x && !cJSON_Compare(x, y, 1))) return 0;
    }
    return 1;
}

/* What differs between the earlier run's manifest and this run, or NULL. */
static const char *fingerprint_diff(const run *r, const cJSON *old) {
    static const char *const tok_keys[] = {"pattern", "size", "crc32c", NULL};
    static const char *const src_keys[] = {"path", "size", "mtime", "crc32c", "bytes", NULL};
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(old, "tokenizer");
    if (!t || cJSON_IsObject(t) != cJSON_IsObject(r->tokenizer) ||
        (cJSON_IsObject(t) ? !same_keys(t, r->tokenizer, tok_keys) : !cJSON_Compare(t, r->tokenizer, 1)))
        return "the tokenizer differs";
    if (!cJSON_Compare(cJSON_GetObjectItemCaseSensitive(old, "options"), r->options, 1)) return "the options differ";
    const cJSON *srcs = cJSON_GetObjectItemCaseSensitive(old, "sources");
    if (!cJSON_IsArray(srcs) || cJSON_GetArraySize(srcs) != r->nsrc) return "the list of inputs differs";
    cJSON *now = sources_json(r, 0);
    const char *why = now ? NULL : "out of memory";
    for (int i = 0; !why && i < r->nsrc; i++)
        if (!same_keys(cJSON_GetArrayItem(srcs, i), cJSON_GetArrayItem(now, i), src_keys))
            why = "an input's size, mtime or content differs";
    cJSON_Delete(now);
    return why;
}

static int get_i64(const cJSON *obj, const char *key, int64_t lo, int64_t hi, int64_t *out) {
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!cJSON_IsNumber(x) || !(x->valuedouble >= (double)lo && x->valuedouble <= (double)hi) ||
        x->valuedouble != (double)(int64_t)x->valuedouble)
        return 0;
    *out = (int64_t)x->valuedouble;
    return 1;
}

/* Checks one shard entry of the earlier manifest and the file it names;
 * NULL when it can be kept as the next shard of its split. */
static const char *check_old_shard(const run *r, const cJSON *e, int s, int64_t *tokens, int64_t *at, int64_t *skip,
                                   char *why, size_t cap) {
    const split_out *so = &r->so[s];
    char want[64], path[4096];
    snprintf(want, sizeof want, "%s_%06lld.bin", prep_split_name[s], (long long)so->next_shard);
    const char *file = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(e, "file"));
    const char *hex = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(e, "crc32c"));
    const cJSON *next = cJSON_GetObjectItemCaseSensitive(e, "next");
    int64_t bytes, offset;
    if (!file || strcmp(file, want)) return "is out of sequence";
    if (!get_i64(e, "tokens", 1, r->o->shard_tokens, tokens) || !get_i64(e, "bytes", 0, INT64_MAX, &bytes) || !hex ||
        strlen(hex) != 8 || !get_i64(next, "chunk", 0, (int64_t)r->nchunks - 1, at) ||
        !get_i64(next, "tokens", 0, INT64_MAX, skip) || !get_i64(next, "offset", 0, INT64_MAX, &offset))
        return "has a missing or malformed field";
    const chunk *c = &r->cs[*at];
    const char *input = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(next, "input"));
    if (!input || strcmp(input, r->src[c->src].name) || (size_t)offset != c->start)
        return "names a resume point that is not where this run's work is cut";
    snprintf(path, sizeof path, "%s/%s", r->o->out_dir, file);
    uint64_t got_bytes;
    uint32_t crc;
    if (access(path, F_OK) != 0) return "is missing";
    if (anvil_crc32c_file(path, &got_bytes, &crc)) {
        snprintf(why, cap, "cannot be read (%s)", anvil_errmsg());
        return why;
    }
    char got[9];
    crc_hex(crc, got);
    if ((int64_t)got_bytes != bytes) {
        snprintf(why, cap, "has %lld bytes, the manifest says %lld", (long long)got_bytes, (long long)bytes);
        return why;
    }
    if (strcmp(got, hex)) {
        snprintf(why, cap, "has CRC32C %s, the manifest says %s", got, hex);
        return why;
    }
    return NULL;
}

/* Takes over the finished shards of an earlier run into the same folder
 * when it had the same inputs and options. *all_done: that run had finished
 * and every one of its shards verified, so there is nothing to write. */
static int load_previous(run *r, int *all_done) {
    const anvil_prep_opts *o = r->o;
    *all_done = 0;
    char path[4096];
    snprintf(path, sizeof path, "%s/manifest.json", o->out_dir);
    if (access(path, F_OK) != 0) return 0;
    char *text;
    size_t len;
    if (anvil_read_file(path, &text, &len)) {
        note(o, "cannot read %s (%s); starting over", path, anvil_errmsg());
        return 0;
    }
    cJSON *old = cJSON_ParseWithLength(text, len);
    free(text);
    const char *why = old ? fingerprint_diff(r, old) : "not valid JSON";
    const cJSON *shards = cJSON_GetObjectItemCaseSensitive(old, "shards");
    if (!why && !cJSON_IsArray(shards)) why = "no list of shards";
    if (why) {
        note(o, "%s: %s; starting over", path, why);
        cJSON_Delete(old);
        return 0;
    }
    int dropped[NSPLITS] = {0, 0}, total = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, shards) {
        total++;
        const char *split = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(e, "split"));
        int s = split && !strcmp(split, "val") ? VAL : split && !strcmp(split, "train") ? TRAIN : -1;
        if (s < 0 || dropped[s]) continue;
        int64_t tokens, at, skip;
        char buf[512];
        const char *bad = check_old_shard(r, e, s, &tokens, &at, &skip, buf, sizeof buf);
        if (bad) {
            const char *file = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(e, "file"));
            note(o, "%s/%s %s; writing it and the %s shards after it again", o->out_dir, file ? file : "(a shard)", bad,
                 prep_split_name[s]);
            dropped[s] = 1;
            continue;
        }
        cJSON *copy = cJSON_Duplicate(e, 1);
        if (!copy || !cJSON_AddItemToArray(r->shards[s], copy)) {
            cJSON_Delete(copy);
            cJSON_Delete(old);
            return anvil_fail("prep: out of memory");
        }
        split_out *so = &r->so[s];
        so->next_shard++;
        so->tokens += tokens;
        so->from_chunk = at;
        so->skip = skip;
        r->kept++;
    }
    int complete = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(old, "complete"));
    cJSON_Delete(old);
    r->dir_ready = 1;
    *all_done = complete && r->kept == total;
    if (*all_done)
        note(o, "all %d shards in %s were finished by an earlier run with the same inputs and options and their "
                "checksums verify; skipped them",
             r->kept, o->out_dir);
    else if (r->kept)
        note(o, "kept %d shard%s finished by an earlier run with the same inputs and options (checksums verified); "
                "continuing after them",
             r->kept, r->kept == 1 ? "" : "s");
    return 0;
}

/* The rank file beside the shards, so that training and sampling decode
 * with exactly the tokenizer the shards were made with. */
static int copy_tokenizer(const run *r) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", r->o->out_dir, tok_copy_name);
    char *have;
    size_t n;
    if (access(path, F_OK) == 0 && anvil_read_file(path, &have, &n) == 0) {
        int same = n == r->tok_len && !memcmp(have, r->tok_data, n);
        free(have);
        if (same) return 0;
    }
    return anvil_write_file_atomic(path, r->tok_data, r->tok_len);
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

    run r;
    memset(&r, 0, sizeof r);
    r.o = o;
    r.unit = o->chunk_bytes ? o->chunk_bytes : WORK_BYTES;
    char *tok_data = NULL;
    anvil_tok *tk = NULL;
    if (o->tokenizer_file) {
        if (anvil_read_file(o->tokenizer_file, &tok_data, &r.tok_len)) return -1;
        tk = anvil_tok_load_mem(tok_data, r.tok_len, o->tokenizer_file,
                                o->tokenizer_pattern ? o->tokenizer_pattern : "gpt2");
        if (!tk) {
            free(tok_data);
            return -1;
        }
    }
    r.tk = tk;
    r.tok_data = tok_data;
    r.version = anvil_shard_version_for_vocab(tk ? anvil_tok_vocab_size(tk) : ANVIL_BYTETOK_VOCAB);
    source *src = calloc((size_t)o->ninputs, sizeof *src);
    int32_t *tok = malloc(CHUNK * sizeof *tok);
    r.shards[TRAIN] = cJSON_CreateArray();
    r.shards[VAL] = cJSON_CreateArray();
    int nw = o->workers > 1 ? o->workers : 1;
    worker *ws = calloc((size_t)nw, sizeof *ws);
    int rc = 0, nloaded = 0;
    if (!src || !tok || !r.shards[TRAIN] || !r.shards[VAL] || !ws) rc = anvil_fail("prep: out of memory");
    for (int t = 0; !rc && tk && t < nw; t++)
        if (!(ws[t].st = anvil_tok_state_new(tk))) rc = anvil_fail("prep: out of memory for tokenizer state");

    /* Load every input before writing anything, so a missing file fails the
     * run without touching the output folder. */
    for (int i = 0; !rc && i < o->ninputs; i++) {
        rc = prep_load_source(o->inputs[i], &src[i]);
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
    r.src = src;
    r.nsrc = nloaded;

    int all_done = 0;
    if (!rc) rc = prep_make_chunks(o, src, nloaded, r.unit, &r.cs, &r.nchunks);
    if (!rc) rc = build_fingerprint(&r);
    if (!rc) rc = load_previous(&r, &all_done);

    /* Every chunk is read, if only to count its documents; tokens are kept
     * from where each split's kept shards end. A window of chunks is encoded
     * in parallel, then emitted in order. */
    int stored = tk || o->jsonl_field;
    size_t window = (size_t)nw * CHUNKS_PER_WORKER;
    for (size_t w0 = 0; !rc && w0 < r.nchunks; w0 += window) {
        size_t w1 = w0 + window < r.nchunks ? w0 + window : r.nchunks;
        for (size_t i = w0; i < w1; i++)
            for (int s = 0; s < NSPLITS; s++) r.cs[i].store[s] = stored && (int64_t)i >= r.so[s].from_chunk;
#pragma omp parallel for num_threads(nw) schedule(dynamic, 1)
        for (size_t i = w0; i < w1; i++) prep_encode_chunk(o, src, tk, &ws[omp_get_thread_num()], &r.cs[i]);
        for (size_t i = w0; !rc && i < w1; i++) {
            chunk *c = &r.cs[i];
            if (c->err) rc = anvil_fail("%s", c->err);
            for (size_t k = 0; !rc && k < c->nbad; k++) {
                char msg[1024];
                long long line = (long long)(c->bad[k] / 2);
                if (c->bad[k] % 2)
                    snprintf(msg, sizeof msg, "%s:%lld: no string field \"%s\"", src[c->src].name, line,
                             o->jsonl_field);
                else
                    snprintf(msg, sizeof msg, "%s:%lld: not valid JSON", src[c->src].name, line);
                if (o->strict) rc = anvil_fail("%s (--strict)", msg);
                else note(o, "skipping %s", msg);
                stats->bad_lines++;
            }
            for (int s = 0; s < NSPLITS; s++) {
                src[c->src].docs += c->docs[s];
                r.docs[s] += c->docs[s];
                r.text_bytes[s] += c->text_bytes[s];
            }
            if (!rc) rc = emit_chunk(&r, i, stored, tok);
        }
        for (size_t i = w0; i < w1; i++) prep_release_chunk(&r.cs[i]);
    }
    if (!rc && r.docs[TRAIN] + r.docs[VAL] == 0) rc = anvil_fail("prep: the input holds no documents");
    for (int s = 0; !rc && s < NSPLITS; s++)
        if (r.so[s].w) rc = finish_shard(&r, s);
    for (int s = 0; !rc && s < NSPLITS; s++) {
        int wanted = s == VAL ? o->val_fraction > 0 : o->val_fraction < 1;
        if (!r.docs[s] && wanted) note(o, "no document fell in the %s split, so it has no shards", prep_split_name[s]);
    }
    if (!rc) rc = remove_stale(&r);
    if (!rc && tk) rc = copy_tokenizer(&r);
    if (!rc && (!all_done || r.written)) rc = write_manifest(&r, 1);
    if (!rc) {
        stats->train_docs = r.docs[TRAIN];
        stats->val_docs = r.docs[VAL];
        stats->train_tokens = r.so[TRAIN].tokens;
        stats->val_tokens = r.so[VAL].tokens;
        stats->train_shards = (int)r.so[TRAIN].next_shard;
        stats->val_shards = (int)r.so[VAL].next_shard;
        stats->kept_shards = r.kept;
    }
    for (int s = 0; s < NSPLITS; s++) anvil_shard_writer_abort(r.so[s].w); /* only left open on failure */
    for (int t = 0; ws && t < nw; t++) {
        anvil_tok_state_free(ws[t].st);
        free(ws[t].ids);
    }
    free(ws);
    for (int i = 0; i < nloaded; i++) prep_free_source(&src[i]);
    for (size_t i = 0; i < r.nchunks; i++) prep_release_chunk(&r.cs[i]);
    free(r.cs);
    free(src);
    free(tok);
    cJSON_Delete(r.shards[TRAIN]);
    cJSON_Delete(r.shards[VAL]);
    cJSON_Delete(r.tokenizer);
    cJSON_Delete(r.options);
    anvil_tok_free(tk);
    free(tok_data);
    return rc;
}

/* ---- reading the manifest back ---- */

static int is_int_in(const cJSON *x, double lo, double hi) {
    return cJSON_IsNumber(x) && x->valuedouble >= lo && x->valuedouble <= hi &&
           x->valuedouble == (double)(long long)x->valuedouble;
}

static cJSON *load_manifest(const char *dir, char *path, size_t cap) {
    snprintf(path, cap, "%s/manifest.json", dir);
    char *text;
    size_t len;
    if (anvil_read_file(path, &text, &len)) {
        char why[1024];
        snprintf(why, sizeof why, "%s", anvil_errmsg());
        anvil_fail("manifest %s", why);
        return NULL;
    }
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(text, len, &end, 0);
    if (!root) anvil_fail("manifest %s: not valid JSON near byte %td", path, end ? end - text : (ptrdiff_t)0);
    free(text);
    return root;
}

int anvil_data_manifest_vocab(const char *dir, int *vocab_size, int *eot) {
    char path[4096];
    cJSON *root = load_manifest(dir, path, sizeof path);
    if (!root) return -1;
    int rc = 0;
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
    cJSON_Delete(root);
    return rc;
}

int anvil_data_manifest_tokenizer(const char *dir, anvil_tok **tok) {
    char path[4096];
    *tok = NULL;
    cJSON *root = load_manifest(dir, path, sizeof path);
    if (!root) return -1;
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(root, "tokenizer");
    const char *copy = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(t, "copy"));
    const char *orig = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(t, "file"));
    const char *pattern = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(t, "pattern"));
    int rc = 0;
    if (cJSON_IsString(t) && !strcmp(t->valuestring, "bytes")) {
        rc = 0;
    } else if ((copy && strchr(copy, '/')) || (!copy && !orig) || !pattern) {
        rc = anvil_fail("manifest %s: field \"tokenizer\" is neither \"bytes\" nor an object with \"copy\" (a file "
                        "name) or \"file\", and \"pattern\"",
                        path);
    } else {
        /* Folders from before the copy existed name only the original file. */
        char file[4096];
        if (copy) snprintf(file, sizeof file, "%s/%s", dir, copy);
        else snprintf(file, sizeof file, "%s", orig);
        *tok = anvil_tok_load(file, pattern);
        if (!*tok) rc = -1;
    }
    cJSON_Delete(root);
    return rc;
}

int anvil_data_manifest_split(const char *dir, const char *split, int64_t *tokens, int64_t *text_bytes) {
    char path[4096];
    cJSON *root = load_manifest(dir, path, sizeof path);
    if (!root) return -1;
    const cJSON *sp = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(root, "splits"), split);
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(sp, "tokens"), *b = cJSON_GetObjectItemCaseSensitive(sp, "text_bytes");
    int rc = 0;
    if (!is_int_in(t, 0, 9e15) || !is_int_in(b, 0, 9e15))
        rc = anvil_fail("manifest %s: field \"splits.%s\" is missing or lacks integer \"tokens\" and \"text_bytes\"",
                        path, split);
    else {
        *tokens = (int64_t)t->valuedouble;
        *text_bytes = (int64_t)b->valuedouble;
    }
    cJSON_Delete(root);
    return rc;
}
