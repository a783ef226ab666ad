/* Staging s3:// prefixes through local folders for the commands. */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli/s3path.h"
#include "core/confine.h"
#include "core/error.h"
#include "core/fsutil.h"

static int ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && !strcmp(s + n - m, suffix);
}

int s3path_tmpdir(char *out, size_t cap) {
    const char *t = getenv("TMPDIR");
    snprintf(out, cap, "%s/anvil-s3-XXXXXX", t && *t ? t : "/tmp");
    if (!mkdtemp(out)) return anvil_fail("%s: cannot create a staging folder: %s", out, strerror(errno));
    /* What is staged there comes from S3, where no symbolic link can be made. */
    return anvil_confine_allow(out);
}

/* op (anvil_s3_get_file or anvil_s3_put_file) on the object uri names and the local path. */
static int object_op(anvil_s3 *s3, const char *uri, const char *path,
                     int (*op)(anvil_s3 *, const char *, const char *, const char *)) {
    char *bucket, *key;
    if (anvil_s3_parse_uri(uri, &bucket, &key)) return -1;
    int rc = key[0] ? op(s3, bucket, key, path) : anvil_fail("'%s' names a bucket, not an object", uri);
    free(bucket);
    free(key);
    return rc;
}

int s3path_fetch_file(anvil_s3 *s3, const char *uri, const char *path) {
    if (anvil_mkdir_parent(path)) return -1;
    return object_op(s3, uri, path, anvil_s3_get_file);
}

int s3path_push_file(anvil_s3 *s3, const char *path, const char *uri) {
    return object_op(s3, uri, path, anvil_s3_put_file);
}

typedef struct {
    anvil_s3 *s3;
    const char *bucket, *dir;
    size_t prefix_len;
    const char *skip_suffix;
    int n;
} fetch_ctx;

static int fetch_one(void *ud, const char *key, uint64_t size) {
    (void)size;
    fetch_ctx *c = ud;
    const char *rel = key + c->prefix_len;
    if (c->skip_suffix && ends_with(rel, c->skip_suffix)) return 0;
    /* A key is a name, not a path: one that would climb out of the staging folder is refused. */
    if (!*rel || strstr(rel, "..") || rel[0] == '/' || strchr(rel, '/'))
        return anvil_fail("s3://%s/%s: not a plain file name under the prefix (anvil reads one level)", c->bucket, key);
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", c->dir, rel);
    if (anvil_s3_get_file(c->s3, c->bucket, key, path)) return -1;
    c->n++;
    return 0;
}

int s3path_fetch_dir(anvil_s3 *s3, const char *uri, const char *dir, const char *skip_suffix) {
    char *bucket, *key;
    if (anvil_s3_parse_uri(uri, &bucket, &key)) return -1;
    size_t kl = strlen(key);
    char *prefix = malloc(kl + 2);
    if (!prefix) {
        free(bucket);
        free(key);
        return anvil_fail("out of memory");
    }
    snprintf(prefix, kl + 2, "%s%s", key, kl && key[kl - 1] != '/' ? "/" : "");
    fetch_ctx c = {s3, bucket, dir, strlen(prefix), skip_suffix, 0};
    int rc = anvil_s3_list(s3, bucket, prefix, fetch_one, &c);
    if (!rc && !c.n) rc = anvil_fail("%s: no objects under this prefix", uri);
    free(prefix);
    free(bucket);
    free(key);
    return rc;
}

static int push_named(anvil_s3 *s3, const char *dir, const char *name, const char *uri) {
    char path[4096];
    struct stat sb;
    snprintf(path, sizeof path, "%s/%s", dir, name);
    if (name[0] == '.' || stat(path, &sb) || !S_ISREG(sb.st_mode)) return 0;
    size_t ul = strlen(uri), n = ul + strlen(name) + 2;
    char *dst = malloc(n);
    if (!dst) return anvil_fail("out of memory");
    snprintf(dst, n, "%s%s%s", uri, ul && uri[ul - 1] == '/' ? "" : "/", name);
    int rc = s3path_push_file(s3, path, dst);
    free(dst);
    return rc;
}

int s3path_push_dir(anvil_s3 *s3, const char *dir, const char *uri) {
    struct dirent **names;
    int n = scandir(dir, &names, NULL, alphasort);
    if (n < 0) return anvil_fail("%s: %s", dir, strerror(errno));
    int rc = 0, manifest = 0;
    for (int i = 0; i < n; i++) {
        if (!strcmp(names[i]->d_name, "manifest.json")) manifest = 1;
        else if (!rc) rc = push_named(s3, dir, names[i]->d_name, uri);
        free(names[i]);
    }
    free(names);
    /* A manifest names the files beside it: it goes last, once they are all there. */
    if (!rc && manifest) rc = push_named(s3, dir, "manifest.json", uri);
    return rc;
}

void s3path_print_stats(anvil_s3 *s3) {
    anvil_s3_stats st;
    char line[512];
    anvil_s3_get_stats(s3, &st);
    anvil_s3_format_stats(&st, line, sizeof line);
    fprintf(stderr, "s3: %s\n", line);
}

static int stage_open(s3path_stage *st, const char *path) {
    memset(st, 0, sizeof *st);
    st->local = path;
    if (!anvil_s3_is_uri(path)) return 0;
    st->uri = path;
    if (!(st->s3 = anvil_s3_open())) return -1;
    if (s3path_tmpdir(st->dir, sizeof st->dir)) {
        st->dir[0] = 0;
        return -1;
    }
    st->local = st->dir;
    return 0;
}

int s3path_in_meta(s3path_stage *st, const char *path) {
    if (stage_open(st, path)) return -1;
    if (!st->s3) return 0;
    return s3path_fetch_dir(st->s3, path, st->dir, ".bin");
}

int s3path_in(s3path_stage *st, const char *path, const char *leaf_suffix, const char *leaf) {
    if (stage_open(st, path)) return -1;
    if (!st->s3) return 0;
    if (leaf_suffix && ends_with(path, leaf_suffix)) {
        st->file = 1;
        snprintf(st->path, sizeof st->path, "%s/%s", st->dir, leaf);
        st->local = st->path;
        return s3path_fetch_file(st->s3, path, st->path);
    }
    return s3path_fetch_dir(st->s3, path, st->dir, NULL);
}

int s3path_out(s3path_stage *st, const char *path, const char *leaf) {
    if (stage_open(st, path)) return -1;
    /* A local output's folders are made here; the output itself (a file, or the folder's last
     * component) by its writer. */
    if (!st->s3) return anvil_mkdir_parent(path);
    if (leaf) {
        st->file = 1;
        snprintf(st->path, sizeof st->path, "%s/%s", st->dir, leaf);
        st->local = st->path;
    }
    return 0;
}

int s3path_out_push(s3path_stage *st) {
    if (!st->s3) return 0;
    return st->file ? s3path_push_file(st->s3, st->path, st->uri) : s3path_push_dir(st->s3, st->dir, st->uri);
}

void s3path_done(s3path_stage *st) {
    if (st->dir[0]) anvil_remove_tree(st->dir);
    anvil_s3_close(st->s3);
    memset(st, 0, sizeof *st);
}
