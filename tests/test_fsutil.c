/* The file-system helpers of src/core: folders created level by level
 * (existing ones accepted, a file in the way named), and trees removed
 * without following symbolic links out of them. */
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
    test_mkdir();
    test_remove_tree();
    CHECK(anvil_remove_tree(dir) == 0);
    return t_done("test_fsutil");
}
