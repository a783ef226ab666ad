/* prep's run: the inputs loaded and cut into chunks, a window of chunks
 * encoded at a time by worker threads, their tokens emitted in input order
 * into the shards of each split, and the folder tidied at the end. */
#include "data/prep.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <omp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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

void prep_note(const anvil_prep_opts *o, const char *fmt, ...) {
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
    prep_crc_hex(crc, hex);
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
    return prep_write_manifest(r, 0);
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
            if (!r->dir_ready && anvil_mkdir_p(r->o->out_dir)) return -1;
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

const char *const prep_tok_copy_name = "tokenizer.tiktoken";

/* A temporary file (src/core/fsutil.h names them "<file>.tmp.XXXXXX") that a
 * killed run left beside one of the files prep writes. */
static int is_leftover_tmp(const char *name) {
    const char *t = strstr(name, ".tmp.");
    if (!t || strlen(t) != 11) return 0;
    char base[256];
    snprintf(base, sizeof base, "%.*s", (int)(t - name), name);
    return !strcmp(base, "manifest.json") || !strcmp(base, prep_tok_copy_name) || shard_index(base, "train") >= 0 ||
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
            else prep_note(o, "removed %s, left by an interrupted run", path);
            continue;
        }
        for (int s = 0; s < NSPLITS; s++) {
            long idx = shard_index(e->d_name, prep_split_name[s]);
            if (idx < 0 || idx < r->so[s].next_shard) continue;
            char path[4096];
            snprintf(path, sizeof path, "%s/%s", o->out_dir, e->d_name);
            if (unlink(path) != 0) rc = anvil_fail("%s: cannot remove stale shard: %s", path, strerror(errno));
            else prep_note(o, "removed stale shard %s from an earlier run", path);
        }
    }
    closedir(d);
    return rc;
}

/* The rank file beside the shards, so that training and sampling decode
 * with exactly the tokenizer the shards were made with. */
static int copy_tokenizer(const run *r) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", r->o->out_dir, prep_tok_copy_name);
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
            prep_note(o, "skipping empty input %s", src[i].name);
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
    if (!rc) rc = prep_build_fingerprint(&r);
    if (!rc) rc = prep_load_previous(&r, &all_done);

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
                long long line = (long long)(c->bad[k] / 3);
                if (c->bad[k] % 3 == 1)
                    snprintf(msg, sizeof msg, "%s:%lld: no string field \"%s\"", src[c->src].name, line,
                             o->jsonl_field);
                else if (c->bad[k] % 3 == 2)
                    snprintf(msg, sizeof msg, "%s:%lld: a string holds \\u0000, which would cut the text short",
                             src[c->src].name, line);
                else
                    snprintf(msg, sizeof msg, "%s:%lld: not valid JSON", src[c->src].name, line);
                if (o->strict) rc = anvil_fail("%s (--strict)", msg);
                else prep_note(o, "skipping %s", msg);
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
        if (!r.docs[s] && wanted)
            prep_note(o, "no document fell in the %s split, so it has no shards", prep_split_name[s]);
    }
    if (!rc) rc = remove_stale(&r);
    if (!rc && tk) rc = copy_tokenizer(&r);
    if (!rc && (!all_done || r.written)) rc = prep_write_manifest(&r, 1);
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
