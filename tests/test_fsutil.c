/* The file-system helpers of src/core: new files that refuse to replace
 * one, durable renames, bounded whole-file reads, folders created level by
 * level (existing ones accepted, a file in the way named), and trees
 * removed without following symbolic links out of them. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/error.h"
#include "core/fsutil.h"
#include "testutil.h"

static char dir[64];

static const char *in(const char *leaf) {
    static char path[4][256];
    static int next;
    char *p = path[next++ % 4];
    snprintf(p, sizeof path[0], "%s/%s", dir, leaf);
    return p;
}

static int is_dir(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0 && S_ISDIR(sb.st_mode);
}

static void test_files(void) {
    char *text = NULL;
    size_t len = 0;
    CHECK(anvil_write_new_file(in("new"), "abc", 3) == 0);
    CHECK(anvil_write_new_file(in("new"), "xyz", 3) != 0 && strstr(anvil_errmsg(), "new: cannot create"));
    CHECK(anvil_read_file_max(in("new"), 3, &text, &len) == 0 && len == 3 && !strcmp(text, "abc"));
    free(text);
    CHECK(anvil_read_file_max(in("new"), 2, &text, &len) != 0 && strstr(anvil_errmsg(), "larger than 2 bytes"));
    CHECK(anvil_write_new_file(in("next"), "de", 2) == 0 && anvil_rename_durable(in("next"), in("new")) == 0);
    CHECK(anvil_read_file_max(in("new"), 16, &text, &len) == 0 && len == 2 && !strcmp(text, "de"));
    free(text);
    CHECK(anvil_write_new_file(in("next"), "f", 1) == 0);
    CHECK(anvil_rename_durable(in("next"), in("nowhere/new")) != 0 && strstr(anvil_errmsg(), "rename into place"));
    CHECK(access(in("next"), F_OK) != 0);
    CHECK(unlink(in("new")) == 0);
}

static void test_mkdir(void) {
    CHECK(anvil_mkdir_p(in("a//b/c/")) == 0 && is_dir(in("a/b/c")));
    CHECK(anvil_mkdir_p(in("a/b/c")) == 0);
    CHECK(anvil_mkdir(in("a/b")) == 0);
    CHECK(anvil_write_file_atomic(in("a/file"), "x", 1) == 0);
    CHECK(anvil_mkdir_p(in("a/file/d")) != 0 && strstr(anvil_errmsg(), "a/file: exists and is not a folder"));
    CHECK(anvil_mkdir(in("missing/d")) != 0 && strstr(anvil_errmsg(), "cannot create folder"));
}

static void test_remove_tree(void) {
    CHECK(anvil_write_file_atomic(in("outside"), "keep", 4) == 0);
    CHECK(symlink(in("outside"), in("a/b/c/link")) == 0);
    CHECK(anvil_write_file_atomic(in("a/b/c/file"), "x", 1) == 0);
    CHECK(anvil_remove_tree(in("a")) == 0 && access(in("a"), F_OK) != 0);
    CHECK(access(in("outside"), F_OK) == 0);
    CHECK(anvil_remove_tree(in("a")) == 0);
    CHECK(anvil_remove_tree(in("outside")) == 0 && access(in("outside"), F_OK) != 0);
}

int main(void) {
    snprintf(dir, sizeof dir, "/tmp/anvil_fsutil_test_XXXXXX");
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    test_files();
    test_mkdir();
    test_remove_tree();
    CHECK(anvil_remove_tree(dir) == 0);
    return t_done("test_fsutil");
}
