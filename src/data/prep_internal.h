/* Shared internals of prep (data/prep.h), which is split by responsibility:
 * the inputs (sources.c), the run that turns them into shards (prep.c).
 * Not part of the public API. */
#ifndef ANVIL_DATA_PREP_INTERNAL_H
#define ANVIL_DATA_PREP_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "data/prep.h"

/* ---- inputs (sources.c) ---- */

/* One input, whole in memory: mapped (a regular file), read (standard
 * input, a pipe) or decompressed (.gz, .zst). */
typedef struct {
    const char *name;
    const unsigned char *data;
    size_t len;
    int mapped;
    int64_t docs;
    /* What a re-run compares: a file's size and mtime, or for a pipe (which
     * has neither) the CRC32C of what it gave. */
    int is_file;
    int64_t file_size, mtime_s, mtime_ns;
    uint32_t crc;
} source;

/* Loads path ("-" is standard input) into s; 0, or -1 after anvil_fail. */
int prep_load_source(const char *path, source *s);
void prep_free_source(source *s);
/* Yields the next non-empty document of s from *off on; 0 at the end. */
int prep_next_doc(const source *s, const anvil_prep_opts *o, size_t *off, const unsigned char **doc, size_t *len);
/* Like prep_next_doc, but a JSON-lines input yields every line (blank ones
 * too, without its newline) and counts them in *line. */
int prep_next_unit(const source *s, const anvil_prep_opts *o, size_t *off, const unsigned char **doc, size_t *len,
                   int64_t *line);

#endif
