/* Shared internals of prep (data/prep.h), which is split by responsibility:
 * the inputs (sources.c), the chunks of work and their encoding (encode.c),
 * the run that turns them into shards (prep.c), and manifest.json, which
 * records the run and lets a later one resume it (manifest.c). Not part of
 * the public API. */
#ifndef ANVIL_DATA_PREP_INTERNAL_H
#define ANVIL_DATA_PREP_INTERNAL_H

#include <cjson/cJSON.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "core/error.h"
#include "data/prep.h"
#include "data/shard.h"
#include "tok/tokenizer.h"

/* A document's split is a function of its bytes (anvil_prep_is_val). */
enum { TRAIN, VAL, NSPLITS };
extern const char *const prep_split_name[NSPLITS]; /* "train", "val" */

/* Hands a line worth telling the user to o->note, if set. */
void prep_note(const anvil_prep_opts *o, const char *fmt, ...) ANVIL_PRINTF(2, 3);

/* ---- inputs (sources.c) ---- */

enum { SRC_PLAIN, SRC_GZ, SRC_ZST, SRC_WHOLE };

/* One input, read front to back: a regular file in large reads (pread, so
 * a file cut short while prep reads it is an error, not a fault), a .gz or
 * .zst file decompressed as it is read, or a pipe or standard input, read
 * whole when the run starts. */
typedef struct {
    const char *path; /* as given; "-" is standard input */
    const char *name; /* for messages: path, or "<stdin>" */
    int kind;         /* SRC_* */
    int64_t docs;
    /* What a re-run compares: a file's size and mtime, or for a pipe (which
     * has neither) the CRC32C of what it gave. */
    int is_file;
    int64_t file_size, mtime_s, mtime_ns;
    uint32_t crc;
    uint64_t bytes; /* read (decompressed) so far: all of them once read to the end */
    /* while it is being read */
    int fd;
    void *gz; /* gzFile */
    void *zd; /* ZSTD_DCtx */
    unsigned char *zin;
    size_t zin_cap, zin_len, zin_pos, zret;
    int zin_eof;
    uint64_t in_at; /* compressed bytes decoded, for messages */
    unsigned char *whole; /* SRC_WHOLE: everything it gave */
    size_t whole_len;
} source;

/* Looks at path before anything is written (a missing file fails the run
 * at once): a file's size and mtime, or everything a pipe gives; 0, or -1
 * after anvil_fail. */
int prep_open_source(const char *path, source *s);
/* Starts reading s from its beginning; a file must be as it was when opened. */
int prep_start_source(source *s);
/* Reads up to cap more bytes of s into buf: how many (fewer only at its
 * end), 0 at its end, or -1 after anvil_fail naming the input and offset. */
int64_t prep_read_source(source *s, unsigned char *buf, size_t cap);
/* How far into s reading is, in its bytes as stored (compressed ones for .gz and .zst). */
uint64_t prep_source_read_at(const source *s);
/* s's size as stored: the file's, or what a pipe gave. */
uint64_t prep_source_size(const source *s);
/* Closes what prep_start_source opened. */
void prep_stop_source(source *s);
void prep_free_source(source *s);

/* A stretch of one input in memory: its bytes [base, base + len); end: the
 * input ends at base + len. */
typedef struct {
    const char *name;
    const unsigned char *data;
    size_t len;
    uint64_t base;
    int end;
} span;

/* What looking for the next document in a span finds. */
enum {
    PREP_END,     /* the input holds no more */
    PREP_UNIT,    /* a document (a line, for JSON lines) */
    PREP_MORE,    /* the span ends before the next document does: read more */
    PREP_TOO_LONG /* the next document is longer than max_doc_bytes; *off is where it starts */
};
/* Yields the next non-empty document of v from *off (an offset into v) on. */
int prep_next_doc(const span *v, const anvil_prep_opts *o, size_t *off, const unsigned char **doc, size_t *len);
/* Like prep_next_doc, but a JSON-lines input yields every line (blank ones
 * too, without its newline) and counts them in *line. */
int prep_next_unit(const span *v, const anvil_prep_opts *o, size_t *off, const unsigned char **doc, size_t *len,
                   int64_t *line);

/* ---- chunks of work (encode.c) ---- */

/* A run of whole documents of one source, encoded by one worker. */
typedef struct {
    int src;
    int64_t index;       /* in the run, counting every input's chunks */
    uint64_t start, end; /* offsets in the source */
    int64_t first_line; /* JSONL: the number of the line before the chunk */
    int store[NSPLITS]; /* keep the split's tokens (else only count documents) */
    int64_t docs[NSPLITS], ntok[NSPLITS], text_bytes[NSPLITS];
    int32_t *tok[NSPLITS]; /* the chunk's tokens of each split, in order */
    size_t cap[NSPLITS];
    int64_t *bad; /* JSONL: 3 * line number + 0 bad JSON, 1 lacking the field, 2 escaping a NUL */
    size_t nbad, badcap;
    char *err; /* a worker's failure, reported by the main thread in chunk order */
} chunk;

/* One encoding thread's scratch, reused from chunk to chunk. */
typedef struct {
    int32_t *ids;
    size_t cap;
    anvil_tok_state *st;
} worker;

/* Where cutting a source into chunks stands, in the source's offsets. */
typedef struct {
    uint64_t off, start; /* scanned up to; where the next chunk starts */
    int64_t line, start_line;
    int unit_ended; /* a document ends at off: whether the chunk ends too is not decided yet */
} cutter;

/* Cuts the next chunk of about `unit` bytes of whole documents from v,
 * which holds the source from cut->start on, so that the chunks are the
 * same however the source is read: 1 with *c set (all but src and index),
 * 0 when the source has no more, PREP_MORE when v ends before the chunk
 * does, or -1 after anvil_fail (a document longer than max_doc_bytes). */
int prep_cut_chunk(const anvil_prep_opts *o, const span *v, size_t unit, cutter *cut, chunk *c);
/* The part of buf (which holds c's text) that chunk c covers. */
span prep_chunk_view(const span *buf, const chunk *c);
/* Counts c's documents per split and encodes those of the splits c->store
 * asks for (tk NULL: bytes); a JSON line that is not JSON or lacks the field
 * goes to c->bad, and a failure is left in c->err. Chunks are independent,
 * so workers encode them in parallel. */
void prep_encode_chunk(const anvil_prep_opts *o, const span *buf, const anvil_tok *tk, worker *w, chunk *c);
/* Frees what encoding put into c (its tokens, bad lines and error). */
void prep_release_chunk(chunk *c);

/* ---- the run (prep.c) ---- */

/* One split's shards: where this run's output starts and the shard open. */
typedef struct {
    /* Where this run starts writing the split: chunks before from_chunk, and
     * the first `skip` tokens of from_chunk, are in shards already kept. */
    int64_t from_chunk, skip;
    /* Where the earlier run's manifest says from_chunk starts, checked when
     * this run gets there (NULL: no shard of the split was kept). */
    char *from_input;
    uint64_t from_offset;
    int64_t chunk, in_chunk; /* the chunk being emitted and its tokens of this split so far */
    int chunk_src;           /* ... its source, and where it starts there */
    uint64_t chunk_start;
    int64_t next_shard;      /* index of the open (or next) shard */
    int64_t tokens;          /* in the finished shards */
    int64_t open_tokens;     /* in the open shard */
    anvil_shard_writer *w;
    char path[4096];
} split_out;

/* Everything one anvil_prep_run works with, shared with the manifest. */
typedef struct {
    const anvil_prep_opts *o;
    const anvil_tok *tk;
    const char *tok_data; /* the rank file's bytes */
    size_t tok_len;
    source *src;
    int nsrc;
    size_t unit;
    int version;
    split_out so[NSPLITS];
    cJSON *tokenizer, *options; /* as the manifest records them, for a re-run to compare */
    cJSON *shards[NSPLITS];     /* each split's finished shards, kept and new, in order */
    int dir_ready, written, kept;
    int64_t docs[NSPLITS], text_bytes[NSPLITS];
    /* Progress: what the workers have encoded, and the inputs read before the current one. */
    _Atomic int64_t done_docs, done_tokens;
    int cur_src;
    uint64_t bytes_before, bytes_total;
} run;

/* The name of the rank file's copy beside the shards. */
extern const char *const prep_tok_copy_name;

/* ---- the manifest (manifest.c) ---- */

/* A CRC32C as the manifest spells it: 8 lowercase hex digits. */
void prep_crc_hex(uint32_t crc, char hex[9]);
/* Sets r->tokenizer and r->options, what a re-run compares. */
int prep_build_fingerprint(run *r);
/* Rewrites out_dir/manifest.json atomically; `complete` adds the per-split
 * totals and each input's document count. */
int prep_write_manifest(run *r, int complete);
/* Takes over the finished shards of an earlier run into the same folder
 * when it had the same inputs and options. *all_done: that run had finished
 * and every one of its shards verified, so there is nothing to write. */
int prep_load_previous(run *r, int *all_done);

#endif
