#include "core/fsutil.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/error.h"

int anvil_write_all(int fd, const void *buf, size_t n, const char *path) {
    const char *p = buf;
    while (n) {
        ssize_t put = write(fd, p, n);
        if (put < 0 && errno == EINTR) continue;
        if (put < 0) return anvil_fail("%s: write failed: %s", path, strerror(errno));
        p += put;
        n -= (size_t)put;
    }
    return 0;
}

int anvil_fsync_dir(const char *dir) {
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return anvil_fail("%s: cannot open the folder to fsync it: %s", dir, strerror(errno));
    int rc = fsync(fd);
    int e = errno;
    close(fd);
    return rc ? anvil_fail("%s: fsync of the folder failed: %s", dir, strerror(e)) : 0;
}

/* A rename or a new folder is durable only once the folder entry itself is on disk. Trailing
 * slashes name the same entry, so they are not where the parent ends. */
static int fsync_parent(const char *path) {
    char dir[PATH_MAX];
    snprintf(dir, sizeof dir, "%s", path);
    size_t len = strlen(dir);
    while (len > 1 && dir[len - 1] == '/') dir[--len] = '\0';
    char *slash = strrchr(dir, '/');
    if (!slash)
        snprintf(dir, sizeof dir, ".");
    else
        slash[slash == dir] = '\0';
    return anvil_fsync_dir(dir);
}

int anvil_atomic_open(anvil_atomic_file *a, const char *path) {
    a->fd = -1;
    a->path = strdup(path);
    size_t len = strlen(path);
    a->tmp = malloc(len + 16);
    if (!a->path || !a->tmp) {
        free(a->path);
        free(a->tmp);
        return anvil_fail("%s: out of memory", path);
    }
    snprintf(a->tmp, len + 16, "%s.tmp.XXXXXX", path);
    a->fd = mkostemp(a->tmp, O_CLOEXEC);
    if (a->fd < 0) {
        int e = errno;
        free(a->path);
        free(a->tmp);
        return anvil_fail("%s: cannot create a temporary file beside it: %s", path, strerror(e));
    }
    fchmod(a->fd, 0644);
    return 0;
}

void anvil_atomic_abort(anvil_atomic_file *a) {
    if (a->fd >= 0) close(a->fd);
    unlink(a->tmp);
    free(a->path);
    free(a->tmp);
}

int anvil_rename_durable(const char *from, const char *to) {
    if (rename(from, to) != 0) {
        int e = errno;
        unlink(from);
        return anvil_fail("%s: rename into place failed: %s", to, strerror(e));
    }
    return fsync_parent(to);
}

int anvil_atomic_commit(anvil_atomic_file *a) {
    int rc = 0;
    if (fsync(a->fd) != 0) rc = anvil_fail("%s: fsync failed: %s", a->path, strerror(errno));
    if (close(a->fd) != 0 && !rc) rc = anvil_fail("%s: close failed: %s", a->path, strerror(errno));
    a->fd = -1;
    if (rc) {
        anvil_atomic_abort(a);
        return rc;
    }
    rc = anvil_rename_durable(a->tmp, a->path);
    free(a->path);
    free(a->tmp);
    return rc;
}

int anvil_write_file_atomic(const char *path, const void *data, size_t len) {
    anvil_atomic_file a;
    if (anvil_atomic_open(&a, path)) return -1;
    if (anvil_write_all(a.fd, data, len, path)) {
        anvil_atomic_abort(&a);
        return -1;
    }
    return anvil_atomic_commit(&a);
}

/* Direct writes go in pieces of this size: large enough that the per-call overhead is nothing, small
 * enough that the device queue stays busy without the kernel pinning gigabytes at once. */
#define DIRECT_PIECE ((size_t)64 << 20)

/* O_DIRECT writes of the padded buffer while the file system takes them; done gets how far they went. */
static int write_direct(int fd, const char *p, size_t padded, size_t *done) {
    while (*done < padded) {
        size_t n = padded - *done < DIRECT_PIECE ? padded - *done : DIRECT_PIECE;
        ssize_t put = write(fd, p + *done, n);
        if (put < 0 && errno == EINTR) continue;
        if (put < 0) return errno == EINVAL ? 0 : -1;
        *done += (size_t)put;
        if ((size_t)put % ANVIL_DIRECT_ALIGN) return 0; /* a short write leaves the rest misaligned */
    }
    return 0;
}

static int write_new(const char *path, const void *data, size_t len, int direct) {
    int flags = O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC;
    int fd = direct ? open(path, flags | O_DIRECT, 0644) : -1;
    if (fd < 0 && direct && errno != EINVAL) return anvil_fail("%s: cannot create: %s", path, strerror(errno));
    if (fd < 0) {
        direct = 0;
        fd = open(path, flags, 0644);
    }
    if (fd < 0) return anvil_fail("%s: cannot create: %s", path, strerror(errno));
    const char *what = "write";
    size_t done = 0;
    int ok = 1;
    if (direct) {
        size_t padded = (len + ANVIL_DIRECT_ALIGN - 1) / ANVIL_DIRECT_ALIGN * ANVIL_DIRECT_ALIGN;
        ok = write_direct(fd, data, padded, &done) == 0;
        if (ok && done < len && fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_DIRECT)) {
            ok = 0;
            what = "fcntl";
        }
        if (ok && done > len && ftruncate(fd, (off_t)len)) {
            ok = 0;
            what = "ftruncate";
        }
    }
    if (ok && done < len) ok = anvil_write_all(fd, (const char *)data + done, len - done, path) == 0;
    if (ok && !(ok = fsync(fd) == 0)) what = "fsync";
    int err = errno;
    if (close(fd) && ok) {
        ok = 0;
        what = "close";
        err = errno;
    }
    if (!ok) {
        unlink(path);
        return anvil_fail("%s: %s failed: %s", path, what, strerror(err));
    }
    return 0;
}

int anvil_write_new_file(const char *path, const void *data, size_t len) { return write_new(path, data, len, 0); }

int anvil_write_new_file_direct(const char *path, const void *data, size_t len) {
    return write_new(path, data, len, 1);
}

int anvil_read_fd(int fd, const char *name, char **data, size_t *len) {
    size_t cap = 1 << 20, n = 0;
    char *buf = malloc(cap);
    if (!buf) return anvil_fail("%s: out of memory", name);
    for (;;) {
        if (n == cap) {
            char *nb = realloc(buf, cap * 2);
            if (!nb) {
                free(buf);
                return anvil_fail("%s: out of memory after %zu bytes", name, n);
            }
            buf = nb;
            cap *= 2;
        }
        ssize_t got = read(fd, buf + n, cap - n);
        if (got < 0 && errno == EINTR) continue;
        if (got < 0) {
            int e = errno;
            free(buf);
            return anvil_fail("%s: read failed after %zu bytes: %s", name, n, strerror(e));
        }
        if (got == 0) break;
        n += (size_t)got;
    }
    *data = buf;
    *len = n;
    return 0;
}

int anvil_glob_escape(const char *text, char *out, size_t cap) {
    size_t n = 0;
    for (const char *p = text; *p; p++) {
        bool special = strchr("*?[]\\", *p) != NULL;
        if (n + 2 + special > cap) return anvil_fail("%.200s: too long for a pattern", text);
        if (special) out[n++] = '\\';
        out[n++] = *p;
    }
    out[n] = 0;
    return 0;
}

int anvil_read_file(const char *path, char **data, size_t *len) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return anvil_fail("%s: cannot open: %s", path, strerror(errno));
    int rc = anvil_read_fd(fd, path, data, len);
    close(fd);
    return rc;
}

int anvil_read_file_max(const char *path, size_t max, char **data, size_t *len) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return anvil_fail("%s: cannot open: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) || sb.st_size < 0 || (uint64_t)sb.st_size > max) {
        close(fd);
        return anvil_fail("%s: missing or larger than %zu bytes", path, max);
    }
    size_t n = (size_t)sb.st_size, got = 0;
    char *buf = malloc(n + 1);
    while (buf && got < n) {
        ssize_t r = read(fd, buf + got, n - got);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) {
            anvil_fail("%s: read error: %s", path, r < 0 ? strerror(errno) : "file shrank");
            free(buf);
            close(fd);
            return -1;
        }
        got += (size_t)r;
    }
    close(fd);
    if (!buf) return anvil_fail("%s: out of memory", path);
    buf[n] = '\0';
    *data = buf;
    *len = n;
    return 0;
}

int anvil_mkdir(const char *dir) {
    if (mkdir(dir, 0755) == 0) return fsync_parent(dir);
    if (errno == EEXIST) {
        struct stat sb;
        if (stat(dir, &sb) == 0 && S_ISDIR(sb.st_mode)) return 0;
        return anvil_fail("%s: exists and is not a folder", dir);
    }
    return anvil_fail("%s: cannot create folder: %s", dir, strerror(errno));
}

int anvil_mkdir_p(const char *dir) {
    char *d = strdup(dir);
    if (!d) return anvil_fail("%s: out of memory", dir);
    int rc = 0;
    for (size_t i = 1; d[0] && d[i] && !rc; i++) {
        if (d[i] != '/' || d[i - 1] == '/') continue;
        d[i] = '\0';
        rc = anvil_mkdir(d);
        d[i] = '/';
    }
    if (!rc) rc = anvil_mkdir(d);
    free(d);
    return rc;
}

int anvil_mkdir_parent(const char *path) {
    const char *slash = strrchr(path, '/');
    while (slash && slash > path && slash[-1] == '/') slash--;
    if (!slash || slash == path) return 0;
    char *d = strndup(path, (size_t)(slash - path));
    if (!d) return anvil_fail("%s: out of memory", path);
    int rc = anvil_mkdir_p(d);
    free(d);
    return rc;
}

static int remove_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
    (void)sb;
    (void)ftw;
    return flag == FTW_DP ? rmdir(path) : unlink(path);
}

int anvil_remove_tree(const char *path) {
    struct stat sb;
    if (lstat(path, &sb) && errno == ENOENT) return 0;
    if (nftw(path, remove_entry, 16, FTW_DEPTH | FTW_PHYS))
        return anvil_fail("%s: cannot remove: %s", path, strerror(errno));
    return 0;
}

int anvil_lock_folder(const char *dir, const char *what) {
    char path[PATH_MAX], holder[256] = "";
    snprintf(path, sizeof path, "%s/lock", dir);
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) return anvil_fail("%s: cannot open: %s", path, strerror(errno));
    if (flock(fd, LOCK_EX | LOCK_NB)) {
        int e = errno;
        ssize_t n = pread(fd, holder, sizeof holder - 1, 0);
        close(fd);
        if (e != EWOULDBLOCK) return anvil_fail("%s: cannot lock: %s", path, strerror(e));
        holder[n > 0 ? n : 0] = 0;
        holder[strcspn(holder, "\n")] = 0;
        return anvil_fail("%s %s is in use by another process (%s): wait for it, stop it, or choose another folder",
                          what, dir, holder[0] ? holder : "its pid is not recorded yet");
    }
    char host[128] = "";
    if (gethostname(host, sizeof host - 1)) snprintf(host, sizeof host, "unknown host");
    int len = snprintf(holder, sizeof holder, "pid %ld on %s\n", (long)getpid(), host);
    if (ftruncate(fd, 0) || pwrite(fd, holder, (size_t)len, 0) != len) {
        int e = errno;
        close(fd);
        return anvil_fail("%s: cannot write: %s", path, strerror(e));
    }
    return fd;
}

int anvil_lock_shared(const char *dir) {
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/ranks.lock", dir);
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) return anvil_fail("%s: cannot open: %s", path, strerror(errno));
    /* Blocking: only a probe takes it exclusively, and only for a moment. */
    while (flock(fd, LOCK_SH)) {
        if (errno == EINTR) continue;
        int e = errno;
        close(fd);
        return anvil_fail("%s: cannot lock: %s", path, strerror(e));
    }
    return fd;
}

/* Whether the lock file at path is held: an exclusive lock taken for a moment, never kept. With holder,
 * what its holder wrote in it (its pid and host). 0 free (or no file), 1 held, -1 after anvil_fail. */
static int probe_lock(const char *path, char *holder, size_t cap) {
    if (holder) holder[0] = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return errno == ENOENT ? 0 : anvil_fail("%s: cannot open: %s", path, strerror(errno));
    int rc = 0;
    if (!flock(fd, LOCK_EX | LOCK_NB)) {
        flock(fd, LOCK_UN);
    } else if (errno != EWOULDBLOCK) {
        rc = anvil_fail("%s: cannot lock: %s", path, strerror(errno));
    } else {
        rc = 1;
        if (holder) {
            ssize_t n = pread(fd, holder, cap - 1, 0);
            holder[n > 0 ? n : 0] = 0;
            holder[strcspn(holder, "\n")] = 0;
            if (!holder[0]) snprintf(holder, cap, "a process whose pid is not recorded yet");
        }
    }
    close(fd);
    return rc;
}

int anvil_lock_probe_shared(const char *dir) {
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/ranks.lock", dir);
    return probe_lock(path, NULL, 0);
}

int anvil_lock_probe(const char *dir, char *holder, size_t cap) {
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/lock", dir);
    return probe_lock(path, holder, cap);
}
