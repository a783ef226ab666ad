/* The file-system helpers of src/core: new files that refuse to replace
 * one, written past the page cache where the file system allows it (and
 * through it where it does not), durable renames, bounded whole-file reads, folders created level by
 * level (existing ones accepted, a file in the way named), trees
 * removed without following symbolic links out of them, the probe of a folder's lock and of its
 * ranks' shared lock, a folder's name escaped for a pattern, and a job's data files kept inside its
 * role (core/confine.h). */
#include <fnmatch.h>
#include <glob.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/confine.h"
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

/* Pages of path in the page cache, or -1 when it cannot be told. */
static long cached_pages(const char *path) {
    int fd = open(path, O_RDONLY);
    struct stat sb;
    if (fd < 0 || fstat(fd, &sb) || sb.st_size == 0) {
        if (fd >= 0) close(fd);
        return -1;
    }
    size_t page = (size_t)sysconf(_SC_PAGESIZE), n = ((size_t)sb.st_size + page - 1) / page;
    void *map = mmap(NULL, (size_t)sb.st_size, PROT_READ, MAP_SHARED, fd, 0);
    close(fd);
    unsigned char *vec = malloc(n);
    long cached = -1;
    if (map != MAP_FAILED && vec && mincore(map, (size_t)sb.st_size, vec) == 0) {
        cached = 0;
        for (size_t i = 0; i < n; i++) cached += vec[i] & 1;
    }
    if (map != MAP_FAILED) munmap(map, (size_t)sb.st_size);
    free(vec);
    return cached;
}

/* Whether the file system under the folder at `where` keeps O_DIRECT writes out of the page cache. */
static int bypasses_cache(const char *where) {
    char probe[300];
    snprintf(probe, sizeof probe, "%s/probe", where);
    int fd = open(probe, O_WRONLY | O_CREAT | O_EXCL | O_DIRECT, 0644);
    void *block = aligned_alloc(ANVIL_DIRECT_ALIGN, ANVIL_DIRECT_ALIGN);
    int direct = fd >= 0 && block && (memset(block, 7, ANVIL_DIRECT_ALIGN), 1) &&
                 write(fd, block, ANVIL_DIRECT_ALIGN) == ANVIL_DIRECT_ALIGN && fsync(fd) == 0;
    if (fd >= 0) close(fd);
    free(block);
    direct = direct && cached_pages(probe) == 0;
    unlink(probe);
    return direct;
}

/* A buffer of 3 blocks and a bit, aligned and then not, written in dir and in /dev/shm (tmpfs,
 * which older kernels refuse O_DIRECT on): the same bytes come back, and where the file system
 * bypasses the page cache for O_DIRECT, so does the aligned write. */
static void test_direct(void) {
    const size_t len = 3 * ANVIL_DIRECT_ALIGN + 123;
    unsigned char *buf = aligned_alloc(ANVIL_DIRECT_ALIGN, 5 * ANVIL_DIRECT_ALIGN);
    for (size_t i = 0; i < 5 * ANVIL_DIRECT_ALIGN; i++) buf[i] = (unsigned char)(i * 131 + 7);
    char shm[64];
    snprintf(shm, sizeof shm, "/dev/shm/anvil_fsutil_test_XXXXXX");
    const char *where[2] = {dir, mkdtemp(shm)};
    for (int w = 0; w < 2 && where[w]; w++) {
        for (int misaligned = 0; misaligned < 2; misaligned++) {
            char path[300];
            snprintf(path, sizeof path, "%s/direct", where[w]);
            const unsigned char *from = buf + misaligned;
            char *text = NULL;
            size_t got = 0;
            CHECK(anvil_write_new_file_direct(path, from, len) == 0);
            if (!misaligned && bypasses_cache(where[w])) CHECK(cached_pages(path) == 0);
            CHECK(anvil_read_file_max(path, len, &text, &got) == 0 && got == len && !memcmp(text, from, len));
            free(text);
            CHECK(anvil_write_new_file_direct(path, from, len) != 0 && strstr(anvil_errmsg(), "direct: cannot create"));
            CHECK(unlink(path) == 0);
        }
    }
    if (where[1]) CHECK(anvil_remove_tree(shm) == 0);
    free(buf);
}

static void test_mkdir(void) {
    CHECK(anvil_mkdir_p(in("a//b/c/")) == 0 && is_dir(in("a/b/c")));
    CHECK(anvil_mkdir_p(in("a/b/c")) == 0);
    CHECK(anvil_mkdir(in("a/b")) == 0);
    CHECK(anvil_write_file_atomic(in("a/file"), "x", 1) == 0);
    CHECK(anvil_mkdir_p(in("a/file/d")) != 0 && strstr(anvil_errmsg(), "a/file: exists and is not a folder"));
    CHECK(anvil_mkdir(in("missing/d")) != 0 && strstr(anvil_errmsg(), "cannot create folder"));
    /* An output path's folders, not the path itself (a file, or a folder its writer makes). */
    CHECK(anvil_mkdir_parent(in("p/q//out.svg")) == 0 && is_dir(in("p/q")) && !is_dir(in("p/q/out.svg")));
    CHECK(anvil_mkdir_parent(in("p/q/r/")) == 0 && is_dir(in("p/q/r")));
    CHECK(anvil_mkdir_parent("relative-file-here") == 0 && anvil_mkdir_parent("/top") == 0);
    CHECK(anvil_mkdir_parent(in("a/file/x.svg")) != 0 && strstr(anvil_errmsg(), "a/file: exists and is not a folder"));
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

/* The run lock's probe: free with no lock file, held while a process (a child here) holds it, with
 * that process's pid, and free again once it has died. */
static void test_lock_probe(void) {
    char holder[256], want[64];
    CHECK(anvil_mkdir(in("run")) == 0);
    CHECK(anvil_lock_probe(in("run"), holder, sizeof holder) == 0 && access(in("run/lock"), F_OK) != 0);
    int go[2], ready[2];
    CHECK(pipe(go) == 0 && pipe(ready) == 0);
    pid_t pid = fork();
    if (pid == 0) {
        char c;
        int fd = anvil_lock_folder(in("run"), "run folder");
        if (write(ready[1], fd >= 0 ? "y" : "n", 1) != 1 || read(go[0], &c, 1) != 1) _exit(1);
        _exit(0);
    }
    char c = 0;
    CHECK(read(ready[0], &c, 1) == 1 && c == 'y');
    snprintf(want, sizeof want, "pid %d on ", (int)pid);
    CHECK(anvil_lock_probe(in("run"), holder, sizeof holder) == 1 && !strncmp(holder, want, strlen(want)));
    CHECK(write(go[1], "g", 1) == 1);
    CHECK(waitpid(pid, NULL, 0) == pid);
    CHECK(anvil_lock_probe(in("run"), holder, sizeof holder) == 0);
    int fd = anvil_lock_folder(in("run"), "run folder");
    CHECK(fd >= 0);
    close(fd);
    for (int i = 0; i < 2; i++) {
        close(go[i]);
        close(ready[i]);
    }
}

/* A folder named with wildcards is matched as itself, by glob(3) and fnmatch(3) alike, and never
 * reaches its siblings. */
static void test_glob_escape(void) {
    char out[64], pattern[256];
    CHECK(anvil_glob_escape("runs/[a]*?\\x", out, sizeof out) == 0 && !strcmp(out, "runs/\\[a\\]\\*\\?\\\\x"));
    CHECK(anvil_glob_escape("abc", out, 4) == 0 && anvil_glob_escape("a*", out, 3) == -1 &&
          strstr(anvil_errmsg(), "too long for a pattern"));
    CHECK(mkdir(in("*"), 0755) == 0 && mkdir(in("other"), 0755) == 0);
    FILE *f = fopen(in("other/train_1.bin"), "w");
    CHECK(f && fclose(f) == 0);
    f = fopen(in("*/train_2.bin"), "w");
    CHECK(f && fclose(f) == 0);
    char escaped[128];
    CHECK(anvil_glob_escape(in("*"), escaped, sizeof escaped) == 0);
    snprintf(pattern, sizeof pattern, "%s/train_*.bin", escaped);
    glob_t g;
    CHECK(glob(pattern, 0, NULL, &g) == 0 && g.gl_pathc == 1 && !strcmp(g.gl_pathv[0], in("*/train_2.bin")));
    globfree(&g);
    CHECK(fnmatch(pattern, in("*/train_2.bin"), FNM_PATHNAME) == 0 &&
          fnmatch(pattern, in("other/train_1.bin"), FNM_PATHNAME) == FNM_NOMATCH);
}

/* Inside a job (ANVIL_JOB_PREFIXES), a file that resolves outside the prefixes, the run folder and
 * the admitted folders is refused, naming it as given; outside a job everything passes. */
static void test_confine(void) {
    CHECK(mkdir(in("role"), 0755) == 0 && mkdir(in("role/data"), 0755) == 0 && mkdir(in("elsewhere"), 0755) == 0 &&
          mkdir(in("jobrun"), 0755) == 0 && mkdir(in("staged"), 0755) == 0);
    static const char *const files[] = {"role/data/a.bin", "elsewhere/secret", "jobrun/ck", "staged/m.json"};
    for (size_t i = 0; i < sizeof files / sizeof *files; i++) {
        FILE *f = fopen(in(files[i]), "w");
        CHECK(f && fclose(f) == 0);
    }
    CHECK(symlink(in("elsewhere/secret"), in("role/data/b.bin")) == 0 && symlink(in("elsewhere"), in("role/out")) == 0);
    CHECK(anvil_confined(in("role/data/b.bin"), "shard") == 0);
    char prefixes[300];
    snprintf(prefixes, sizeof prefixes, "/nonexistent\n%s/role/data\n%s/role/\n", dir, dir);
    CHECK(setenv("ANVIL_JOB_PREFIXES", prefixes, 1) == 0 && setenv("ANVIL_RUN_DIR", in("jobrun"), 1) == 0);
    CHECK(anvil_confined(in("role/data/a.bin"), "shard") == 0 && anvil_confined(in("jobrun/ck"), "checkpoint") == 0);
    CHECK(anvil_confined(in("role/data/missing"), "shard") == 0);
    CHECK(anvil_confined(in("role/data/b.bin"), "shard") == -1 &&
          strstr(anvil_errmsg(), "shard ") && strstr(anvil_errmsg(), "/role/data/b.bin: leads outside the job's role") &&
          !strstr(anvil_errmsg(), "elsewhere"));
    CHECK(anvil_confined(in("role/out/secret"), "manifest") == -1);
    CHECK(anvil_confined(in("staged/m.json"), "manifest") == -1);
    CHECK(anvil_confine_allow(in("staged")) == 0 && anvil_confined(in("staged/m.json"), "manifest") == 0);
    CHECK(setenv("ANVIL_JOB_PREFIXES", "", 1) == 0 && anvil_confined(in("role/data/a.bin"), "shard") == -1);
    unsetenv("ANVIL_JOB_PREFIXES");
    unsetenv("ANVIL_RUN_DIR");
}

/* A child that holds the ranks folder's shared lock until it is killed; its pid. */
static pid_t shared_holder(void) {
    int ready[2];
    CHECK(pipe(ready) == 0);
    pid_t pid = fork();
    if (pid == 0) {
        int fd = anvil_lock_shared(in("ranks"));
        if (write(ready[1], fd >= 0 ? "y" : "n", 1) != 1) _exit(1);
        for (;;) pause();
    }
    char c = 0;
    CHECK(read(ready[0], &c, 1) == 1 && c == 'y');
    close(ready[0]);
    close(ready[1]);
    return pid;
}

/* The ranks' shared lock: free with no lock file; held while any of two holders (the ranks of a run) lives,
 * not only the first; free once both have been killed. */
static void test_lock_shared(void) {
    CHECK(anvil_mkdir(in("ranks")) == 0);
    CHECK(anvil_lock_probe_shared(in("ranks")) == 0 && access(in("ranks/ranks.lock"), F_OK) != 0);
    pid_t pid[2] = {shared_holder(), shared_holder()};
    CHECK(anvil_lock_probe_shared(in("ranks")) == 1);
    for (int i = 0; i < 2; i++) {
        CHECK(kill(pid[i], SIGKILL) == 0 && waitpid(pid[i], NULL, 0) == pid[i]);
        CHECK(anvil_lock_probe_shared(in("ranks")) == (i == 0));
    }
    /* The probe leaves it free for the next run's ranks. */
    int fd = anvil_lock_shared(in("ranks"));
    CHECK(fd >= 0 && anvil_lock_probe_shared(in("ranks")) == 1);
    close(fd);
}

int main(void) {
    snprintf(dir, sizeof dir, "/tmp/anvil_fsutil_test_XXXXXX");
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    test_files();
    test_direct();
    test_mkdir();
    test_remove_tree();
    test_lock_probe();
    test_glob_escape();
    test_confine();
    test_lock_shared();
    CHECK(anvil_remove_tree(dir) == 0);
    return t_done("test_fsutil");
}
