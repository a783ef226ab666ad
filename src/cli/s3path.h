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
 * each key after the prefix as its path under dir; -1 after anvil_fail, also when there is none. */
int s3path_fetch_dir(anvil_s3 *s3, const char *uri, const char *dir);
/* Uploads every regular file of dir (not its subfolders) to uri/NAME. */
int s3path_push_dir(anvil_s3 *s3, const char *dir, const char *uri);
/* One object to or from one local file. */
int s3path_fetch_file(anvil_s3 *s3, const char *uri, const char *path);
int s3path_push_file(anvil_s3 *s3, const char *path, const char *uri);
/* Prints the client's counters as one "s3: ..." line on stderr. */
void s3path_print_stats(anvil_s3 *s3);

#endif
