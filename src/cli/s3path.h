/* s3:// paths for the commands that take files and folders (export, import,
 * s3): an S3 prefix is staged through a private local folder, since the
 * converters read and write whole local folders. */
#ifndef ANVIL_CLI_S3PATH_H
#define ANVIL_CLI_S3PATH_H

#include <stddef.h>

#include "s3/s3.h"

/* A fresh private folder under $TMPDIR (or /tmp), its path in out; -1 after anvil_fail. */
int s3path_tmpdir(char *out, size_t cap);
/* Downloads every object under the prefix of uri ("s3://b/p" reads "p/..."), keeping the part of
 * each key after the prefix as its path under dir, but those whose name ends in skip_suffix (NULL:
 * none); -1 after anvil_fail, also when there is none. */
int s3path_fetch_dir(anvil_s3 *s3, const char *uri, const char *dir, const char *skip_suffix);
/* Uploads every regular file of dir (not its subfolders) to uri/NAME, in name order, with a
 * manifest.json last. */
int s3path_push_dir(anvil_s3 *s3, const char *dir, const char *uri);
/* One object to or from one local file. */
int s3path_fetch_file(anvil_s3 *s3, const char *uri, const char *path);
int s3path_push_file(anvil_s3 *s3, const char *path, const char *uri);
/* A command's path that may be s3://: staged through a private local folder, which `local` names
 * (or the file `leaf` in it); for a local path, `local` is the path itself and nothing is staged. */
typedef struct {
    anvil_s3 *s3; /* NULL when the path is local */
    const char *uri, *local;
    int file; /* the URI names one object (else a prefix of several) */
    char dir[4096], path[4200];
} s3path_stage;
/* An input: an s3:// key ending in `leaf_suffix` (e.g. ".safetensors"; NULL for none) is one object,
 * downloaded to dir/leaf; any other s3:// prefix is downloaded whole into dir. -1 after anvil_fail. */
int s3path_in(s3path_stage *st, const char *path, const char *leaf_suffix, const char *leaf);
/* A data folder's manifest and tokenizer: an s3:// prefix is staged without its shards (*.bin),
 * which the loader streams. */
int s3path_in_meta(s3path_stage *st, const char *path);
/* An output: `local` is where to write it (dir/leaf when leaf, else dir); s3path_out_push uploads
 * it to the URI afterwards (the file as the object, or the folder's files under the prefix). */
int s3path_out(s3path_stage *st, const char *path, const char *leaf);
int s3path_out_push(s3path_stage *st);
/* Removes the staging folder and closes the client; safe on a zeroed or failed stage. */
void s3path_done(s3path_stage *st);
/* Prints the client's counters as one "s3: ..." line on stderr. */
void s3path_print_stats(anvil_s3 *s3);

#endif
