/* Token shards in llm.c's format, so that shards made by llm.c's scripts
 * (fineweb.py, tinyshakespeare.py) and by `anvil prep` are interchangeable.
 *
 * Layout: a header of 256 little-endian int32, [0] = 20240520 (magic),
 * [1] = version, [2] = token count; then the tokens, uint16 for version 1
 * and uint32 for version 7 (vocabularies larger than 65536). */
#ifndef ANVIL_DATA_SHARD_H
#define ANVIL_DATA_SHARD_H

#include <stddef.h>
#include <stdint.h>

#include "s3/s3.h"

#define ANVIL_SHARD_MAGIC 20240520
#define ANVIL_SHARD_HEADER_BYTES 1024
#define ANVIL_SHARD_V16 1
#define ANVIL_SHARD_V32 7

typedef struct {
    char *path;
    int fd;                  /* -1 for a shard on S3 */
    anvil_s3_reader *remote; /* a shard on S3: its reads */
    int version;
    int token_bytes; /* 2 or 4 */
    int64_t ntokens;
} anvil_shard;

/* Opens and validates a shard: magic, version, a positive token count, and a
 * file size that matches the header exactly (a truncated or padded file is
 * rejected rather than read as garbage). */
int anvil_shard_open(anvil_shard *s, const char *path);
/* The same for an object s3://bucket/key of `size` bytes (0: unknown, then a HEAD asks), through the
 * client s3: every read
 * (the header's first) through an anvil_s3_reader of `range` bytes per GET and up to `inflight` GETs
 * at once, reading ahead. */
int anvil_shard_open_s3(anvil_shard *s, anvil_s3 *s3, const char *uri, uint64_t size, size_t range, int inflight);
void anvil_shard_close(anvil_shard *s);

/* Reads tokens [pos, pos+n) into out with one pread (or one read of the S3 reader). With vocab_size > 0,
 * every id must be < vocab_size: a bad id is reported with the file and its
 * token offset, since it would otherwise index past the embedding table. */
int anvil_shard_read(const anvil_shard *s, int64_t pos, int64_t n, int32_t *out, int vocab_size);

/* The smallest shard version that holds ids < vocab_size. */
int anvil_shard_version_for_vocab(int vocab_size);

/* A shard under construction. Nothing appears at its path until commit, which
 * renames a fully written and fsynced temporary file (in the same folder) into
 * place, so a crash never leaves a partial shard behind. */
typedef struct anvil_shard_writer anvil_shard_writer;

anvil_shard_writer *anvil_shard_writer_open(const char *path, int version);
int anvil_shard_writer_append(anvil_shard_writer *w, const int32_t *tokens, int64_t n);
/* Writes the header, fsyncs, renames into place and fsyncs the folder. Frees w
 * whether or not it succeeds. A shard must hold at least one token. */
int anvil_shard_writer_commit(anvil_shard_writer *w);
/* Drops the temporary file and frees w. */
void anvil_shard_writer_abort(anvil_shard_writer *w);

/* The whole shard in one call. */
int anvil_shard_write(const char *path, const int32_t *tokens, int64_t n, int version);

#endif
