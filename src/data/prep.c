/* prep's run: each input read in turn and cut into chunks as it is read, a
 * window of chunks encoded at a time by worker threads, their tokens
 * emitted in input order into the shards of each split, and the folder
 * tidied at the end. */
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
/* Input is read in pieces of this size (and documents may take more). */
#define READ_BYTES ((size_t)4 << 20)
/* The longest document (or JSON line) when the options name none: longer
 * ones are almost always a missing or wrong delimiter, or a decompression
 * bomb, and each is held in memory whole. */
#define MAX_DOC_BYTES ((size_t)64 << 20)

/* ---- progress ---- */

static void report(run *r) {
    const anvil_prep_opts *o = r->o;
    if (!o->progress) return;
    uint64_t at = r->cur_src < r->nsrc ? prep_source_read_at(&r->src[r->cur_src]) : 0;
    anvil_prep_progress p = {
        .bytes_read = (int64_t)(r->bytes_before + at),
        .bytes_total = (int64_t)r->bytes_total,
        .docs = atomic_load_explicit(&r->done_docs, memory_order_relaxed),
        .tokens = atomic_load_explicit(&r->done_tokens, memory_order_relaxed),
    };
    o->progress(o->progress_ctx, &p);
}

/* Encodes c and counts it; the thread that called prep (OpenMP's thread 0) also reports. */
static void encode_and_count(run *r, const span *buf, worker *w, chunk *c) {
    prep_encode_chunk(r->o, buf, r->tk, w, c);
    int64_t docs = c->docs[TRAIN] + c->docs[VAL], tokens = 0;
    for (int s = 0; s < NSPLITS; s++) tokens += r->tk ? c->ntok[s] : c->text_bytes[s] + c->docs[s];
    atomic_fetch_add_explicit(&r->done_docs, docs, memory_order_relaxed);
    atomic_fetch_add_explicit(&r->done_tokens, tokens, memory_order_relaxed);
    if (omp_get_thread_num() == 0) report(r);
}

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
    cJSON *e = cJSON_CreateObject(), *next = cJSON_CreateObject();
    int ok = e && next && cJSON_AddStringToObject(e, "file", strrchr(so->path, '/') + 1) &&
             cJSON_AddStringToObject(e, "split", prep_split_name[s]) &&
             cJSON_AddNumberToObject(e, "tokens", (double)so->open_tokens) &&
             cJSON_AddNumberToObject(e, "bytes", (double)bytes) && cJSON_AddStringToObject(e, "crc32c", hex) &&
             cJSON_AddNumberToObject(next, "chunk", (double)so->chunk) &&
             cJSON_AddNumberToObject(next, "tokens", (double)so->in_chunk) &&
             cJSON_AddStringToObject(next, "input", r->src[so->chunk_src].name) &&
             cJSON_AddNumberToObject(next, "offset", (double)so->chunk_start);
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

/* Emits chunk c's tokens (buf holds its text). Byte-level chunks of plain
 * text hold no tokens: they are cheap to make again here from the text. */
static int emit_chunk(run *r, const span *buf, const chunk *c, int stored, int32_t *tok) {
    const anvil_prep_opts *o = r->o;
    int64_t i = c->index;
    int rc = 0;
    for (int s = 0; s < NSPLITS; s++) {
        r->so[s].chunk = i;
        r->so[s].in_chunk = 0;
        r->so[s].chunk_src = c->src;
        r->so[s].chunk_start = c->start;
    }
    if (stored) {
        for (int s = 0; !rc && s < NSPLITS; s++) rc = emit(r, s, c->tok[s], c->ntok[s]);
    } else if (i >= r->so[TRAIN].from_chunk || i >= r->so[VAL].from_chunk) {
        span v = prep_chunk_view(buf, c);
        size_t off = 0, len;
        const unsigned char *doc;
        while (!rc && prep_next_doc(&v, o, &off, &doc, &len) == PREP_UNIT) {
            int s = anvil_prep_is_val(anvil_fnv1a64(doc, len), o->val_fraction) ? VAL : TRAIN;
            if (i < r->so[s].from_chunk) continue;
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
        if (i == r->so[s].from_chunk && r->so[s].skip > 0)
            rc = anvil_fail("%s/manifest.json: the %s split resumes %lld tokens past the end of its chunk %lld; "
                            "delete the manifest to start over",
                            o->out_dir, prep_split_name[s], (long long)r->so[s].skip, (long long)i);
    return rc;
}

/* The earlier run's resume point of each split, once this run has cut the chunk it names: its
 * input and offset must be where this run's chunk starts. */
static int check_resume_point(const run *r, const chunk *c) {
    for (int s = 0; s < NSPLITS; s++) {
        const split_out *so = &r->so[s];
        if (!so->from_input || c->index != so->from_chunk) continue;
        if (strcmp(so->from_input, r->src[c->src].name) || so->from_offset != c->start)
            return anvil_fail("%s/manifest.json: the %s split resumes at chunk %lld, byte %llu of %s, but this run's "
                              "chunk %lld starts at byte %llu of %s; delete the manifest to start over",
                              r->o->out_dir, prep_split_name[s], (long long)so->from_chunk,
                              (unsigned long long)so->from_offset, so->from_input, (long long)c->index,
                              (unsigned long long)c->start, r->src[c->src].name);
    }
    return 0;
}

/* Encodes a window of chunks of one source in parallel (buf holds their text), then emits them
 * in order, reporting bad JSON lines and failures in order. */
static int run_window(run *r, const span *buf, chunk *cs, size_t n, worker *ws, int nw, int stored, int32_t *tok,
                      anvil_prep_stats *stats) {
    const anvil_prep_opts *o = r->o;
    source *src = r->src;
    for (size_t i = 0; i < n; i++)
        for (int s = 0; s < NSPLITS; s++) cs[i].store[s] = stored && cs[i].index >= r->so[s].from_chunk;
#pragma omp parallel for num_threads(nw) schedule(dynamic, 1)
    for (size_t i = 0; i < n; i++) encode_and_count(r, buf, &ws[omp_get_thread_num()], &cs[i]);
    int rc = 0;
    for (size_t i = 0; !rc && i < n; i++) {
        chunk *c = &cs[i];
        if (c->err) rc = anvil_fail("%s", c->err);
        for (size_t k = 0; !rc && k < c->nbad; k++) {
            char msg[1024];
            long long line = (long long)(c->bad[k] / 3);
            if (c->bad[k] % 3 == 1)
                snprintf(msg, sizeof msg, "%s:%lld: no string field \"%s\"", src[c->src].name, line, o->jsonl_field);
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
            r->docs[s] += c->docs[s];
            r->text_bytes[s] += c->text_bytes[s];
        }
        if (!rc) rc = emit_chunk(r, buf, c, stored, tok);
    }
    for (size_t i = 0; i < n; i++) prep_release_chunk(&cs[i]);
    return rc;
}

/* The text of one input being read: its bytes [base, base + len). */
typedef struct {
    unsigned char *data;
    size_t len, cap;
    uint64_t base;
    int end; /* the input ends at base + len */
} text_buf;

static int read_more(source *s, text_buf *b, size_t piece) {
    if (b->cap - b->len < piece) {
        size_t cap = b->cap * 2 > b->len + piece ? b->cap * 2 : b->len + piece;
        unsigned char *nd = realloc(b->data, cap);
        if (!nd) return anvil_fail("input %s: out of memory for %zu bytes of text", s->name, cap);
        b->data = nd;
        b->cap = cap;
    }
    int64_t got = prep_read_source(s, b->data + b->len, piece);
    if (got < 0) return -1;
    b->len += (size_t)got;
    b->end = got == 0;
    return 0;
}

/* Reads source i to its end, a window of chunks at a time; *next is the index of its first chunk
 * in the run, and is left at the one after its last. */
static int run_source(run *r, int i, text_buf *b, chunk *win, size_t window, worker *ws, int nw, int stored,
                      int32_t *tok, int64_t *next, anvil_prep_stats *stats) {
    source *s = &r->src[i];
    r->cur_src = i;
    if (prep_start_source(s)) return -1;
    b->len = 0;
    b->base = 0;
    b->end = 0;
    cutter cut = {0};
    /* A window holds a few chunks per worker, and about as many bytes. */
    uint64_t window_bytes = (uint64_t)window * r->unit;
    int rc = 0, done = 0;
    while (!rc && !done) {
        size_t n = 0;
        while (!rc && n < window && (n == 0 || cut.start - win[0].start < window_bytes)) {
            span v = {s->name, b->data, b->len, b->base, b->end};
            int got = prep_cut_chunk(r->o, &v, r->unit, &cut, &win[n]);
            if (got == PREP_MORE) {
                rc = read_more(s, b, r->o->read_bytes ? r->o->read_bytes : READ_BYTES);
                report(r);
            } else if (got < 0) {
                rc = -1;
            } else if (got == 0) {
                done = 1;
                break;
            } else {
                win[n].src = i;
                win[n].index = *next + (int64_t)n;
                rc = check_resume_point(r, &win[n]);
                n++;
            }
        }
        span v = {s->name, b->data, b->len, b->base, b->end};
        if (!rc && n) rc = run_window(r, &v, win, n, ws, nw, stored, tok, stats);
        *next += (int64_t)n;
        /* The text before the next chunk is done with. */
        size_t drop = (size_t)(cut.start - b->base);
        if (drop) memmove(b->data, b->data + drop, b->len - drop);
        b->len -= drop;
        b->base = cut.start;
    }
    prep_stop_source(s);
    r->bytes_before += prep_source_size(s);
    if (rc) return rc;
    if (!s->bytes) {
        prep_note(r->o, "skipping empty input %s", s->name);
        stats->skipped_inputs++;
    } else {
        stats->sources++;
        stats->bytes_in += (int64_t)s->bytes;
    }
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

/* One run's buffers, beside the run's state: the inputs, the workers, the window of chunks. */
typedef struct {
    run r;
    anvil_prep_opts o;
    char *tok_data;
    anvil_tok *tk;
    source *src;
    int nopen, nw, all_done;
    int32_t *tok;
    worker *ws;
    chunk *win;
    size_t window;
    text_buf buf;
} prep_job;

static int check_opts(const anvil_prep_opts *o) {
    if (!(o->val_fraction >= 0 && o->val_fraction <= 1))
        return anvil_fail("--val-fraction %g: must be in [0, 1]", o->val_fraction);
    if (o->shard_tokens < 1 || o->shard_tokens > INT32_MAX)
        return anvil_fail("--shard-tokens %lld: must be in [1, %d]", (long long)o->shard_tokens, INT32_MAX);
    if (o->delimiter && !o->delimiter_len) return anvil_fail("--delimiter: must not be empty");
    if (o->delimiter && o->jsonl_field) return anvil_fail("--delimiter and --jsonl-field cannot be combined");
    if (o->ninputs < 1) return anvil_fail("prep: no input files");
    return 0;
}

/* The tokenizer, the buffers and the workers' states, every input opened, and what an earlier run of
 * the same inputs and options left. */
static int job_open(prep_job *j) {
    const anvil_prep_opts *o = &j->o;
    run *r = &j->r;
    r->o = o;
    r->unit = o->chunk_bytes ? o->chunk_bytes : WORK_BYTES;
    if (o->tokenizer_file) {
        if (anvil_read_file(o->tokenizer_file, &j->tok_data, &r->tok_len)) return -1;
        j->tk = anvil_tok_load_mem(j->tok_data, r->tok_len, o->tokenizer_file,
                                   o->tokenizer_pattern ? o->tokenizer_pattern : "gpt2");
        if (!j->tk) return -1;
    }
    r->tk = j->tk;
    r->tok_data = j->tok_data;
    r->version = anvil_shard_version_for_vocab(j->tk ? anvil_tok_vocab_size(j->tk) : ANVIL_BYTETOK_VOCAB);
    j->src = calloc((size_t)o->ninputs, sizeof *j->src);
    j->tok = malloc(CHUNK * sizeof *j->tok);
    r->shards[TRAIN] = cJSON_CreateArray();
    r->shards[VAL] = cJSON_CreateArray();
    j->nw = o->workers > 1 ? o->workers : 1;
    j->ws = calloc((size_t)j->nw, sizeof *j->ws);
    if (!j->src || !j->tok || !r->shards[TRAIN] || !r->shards[VAL] || !j->ws) return anvil_fail("prep: out of memory");
    for (int t = 0; j->tk && t < j->nw; t++)
        if (!(j->ws[t].st = anvil_tok_state_new(j->tk))) return anvil_fail("prep: out of memory for tokenizer state");
    /* Look at every input before writing anything, so a missing file fails the run without touching the
     * output folder. */
    int rc = 0;
    for (int i = 0; !rc && i < o->ninputs; i++) {
        rc = prep_open_source(o->inputs[i], &j->src[i]);
        if (!rc && o->input_names && o->input_names[i]) j->src[i].name = o->input_names[i];
        if (!rc) j->nopen++;
    }
    r->src = j->src;
    r->nsrc = j->nopen;
    for (int i = 0; i < j->nopen; i++) r->bytes_total += prep_source_size(&j->src[i]);
    return rc || prep_build_fingerprint(r) || prep_load_previous(r, &j->all_done) ? -1 : 0;
}

/* Every chunk is read, if only to count its documents; tokens are kept from where each split's kept
 * shards end. Then the last shards, the notes, what an earlier run left that is stale, and the manifest. */
static int job_run(prep_job *j, anvil_prep_stats *stats) {
    const anvil_prep_opts *o = &j->o;
    run *r = &j->r;
    int stored = j->tk || o->jsonl_field, rc = 0;
    j->window = (size_t)j->nw * CHUNKS_PER_WORKER;
    int64_t nchunks = 0;
    if (!(j->win = calloc(j->window, sizeof *j->win))) return anvil_fail("prep: out of memory");
    for (int i = 0; !rc && i < j->nopen; i++)
        rc = run_source(r, i, &j->buf, j->win, j->window, j->ws, j->nw, stored, j->tok, &nchunks, stats);
    if (rc) return -1;
    r->cur_src = j->nopen;
    report(r);
    for (int s = 0; s < NSPLITS; s++)
        if (r->so[s].from_input && r->so[s].from_chunk >= nchunks)
            return anvil_fail("%s/manifest.json: the %s split resumes at chunk %lld, but the inputs make %lld; "
                              "delete the manifest to start over",
                              o->out_dir, prep_split_name[s], (long long)r->so[s].from_chunk, (long long)nchunks);
    if (r->docs[TRAIN] + r->docs[VAL] == 0) return anvil_fail("prep: the input holds no documents");
    for (int s = 0; s < NSPLITS; s++)
        if (r->so[s].w && finish_shard(r, s)) return -1;
    for (int s = 0; s < NSPLITS; s++) {
        int wanted = s == VAL ? o->val_fraction > 0 : o->val_fraction < 1;
        if (r->docs[s] || !wanted) continue;
        int64_t n = r->docs[TRAIN] + r->docs[VAL];
        if (!o->delimiter && !o->jsonl_field)
            /* The usual cause: a text file read as one document, which lands in one split whole. */
            prep_note(o, "no document fell in the %s split, so it has no shards: without --delimiter (text) or "
                      "--jsonl-field (JSON lines) each input file is one document, %lld here",
                      prep_split_name[s], (long long)n);
        else
            prep_note(o, "no document fell in the %s split, so it has no shards (%lld documents in all)",
                      prep_split_name[s], (long long)n);
    }
    if (remove_stale(r) || (j->tk && copy_tokenizer(r)) || ((!j->all_done || r->written) && prep_write_manifest(r, 1)))
        return -1;
    stats->train_docs = r->docs[TRAIN];
    stats->val_docs = r->docs[VAL];
    stats->train_tokens = r->so[TRAIN].tokens;
    stats->val_tokens = r->so[VAL].tokens;
    stats->train_shards = (int)r->so[TRAIN].next_shard;
    stats->val_shards = (int)r->so[VAL].next_shard;
    stats->kept_shards = r->kept;
    return 0;
}

static void job_free(prep_job *j) {
    run *r = &j->r;
    for (int s = 0; s < NSPLITS; s++) anvil_shard_writer_abort(r->so[s].w); /* only left open on failure */
    for (int t = 0; j->ws && t < j->nw; t++) {
        anvil_tok_state_free(j->ws[t].st);
        free(j->ws[t].ids);
    }
    free(j->ws);
    for (int i = 0; i < j->nopen; i++) prep_free_source(&j->src[i]);
    for (size_t i = 0; j->win && i < j->window; i++) prep_release_chunk(&j->win[i]);
    free(j->win);
    free(j->buf.data);
    for (int s = 0; s < NSPLITS; s++) free(r->so[s].from_input);
    free(j->src);
    free(j->tok);
    cJSON_Delete(r->shards[TRAIN]);
    cJSON_Delete(r->shards[VAL]);
    cJSON_Delete(r->tokenizer);
    cJSON_Delete(r->options);
    anvil_tok_free(j->tk);
    free(j->tok_data);
}

int anvil_prep_run(const anvil_prep_opts *o, anvil_prep_stats *stats) {
    memset(stats, 0, sizeof *stats);
    if (check_opts(o)) return -1;
    prep_job *j = calloc(1, sizeof *j);
    if (!j) return anvil_fail("prep: out of memory");
    j->o = *o;
    if (!j->o.max_doc_bytes) j->o.max_doc_bytes = MAX_DOC_BYTES;
    int rc = job_open(j) || job_run(j, stats) ? -1 : 0;
    job_free(j);
    free(j);
    return rc;
}
