/* Durable file writes. Every file anvil writes for later (shards,
 * manifests, model files, exports) goes to a temporary file beside its
 * destination, is fsync'ed, renamed over the destination, and the folder is
 * fsync'ed: a crash leaves either the old file or the complete new one.
 * Folders are created durably too, and removed as whole trees. */
#ifndef ANVIL_CORE_FSUTIL_H
#define ANVIL_CORE_FSUTIL_H

#include <stddef.h>

/* write(2) until done (retrying short writes and EINTR); -1 with a message naming path. */
int anvil_write_all(int fd, const void *buf, size_t n, const char *path);
/* Makes a folder's entries (a rename, a new file) durable. */
int anvil_fsync_dir(const char *dir);
/* rename(2), then fsyncs the folder of `to`; when the rename fails, `from` is removed. */
int anvil_rename_durable(const char *from, const char *to);

/* A file being written under a temporary name beside path. */
typedef struct {
    char *path, *tmp;
    int fd;
} anvil_atomic_file;

int anvil_atomic_open(anvil_atomic_file *a, const char *path);
/* fsync, rename into place, fsync the folder; on failure the temporary file is removed. */
int anvil_atomic_commit(anvil_atomic_file *a);
/* Drops the temporary file. */
void anvil_atomic_abort(anvil_atomic_file *a);

/* Reads everything from fd (a pipe or a file) into a malloc'd buffer; name labels errors. */
int anvil_read_fd(int fd, const char *name, char **data, size_t *len);
/* Reads a whole file into a malloc'd buffer. */
int anvil_read_file(const char *path, char **data, size_t *len);

/* Reads a whole file of at most max bytes into a malloc'd buffer with a NUL after the last byte. */
int anvil_read_file_max(const char *path, size_t max, char **data, size_t *len);

/* Replaces path with data atomically. */
int anvil_write_file_atomic(const char *path, const void *data, size_t len);
/* Creates path, which must not exist, with data, fsync'ed; on failure path is removed. The folder
 * is not fsync'ed: for files under a name of the caller's choosing, or in a folder the caller
 * fsyncs and publishes as a whole. */
int anvil_write_new_file(const char *path, const void *data, size_t len);

/* What anvil_write_new_file_direct needs of its buffer: its start aligned to this, and readable up
 * to len rounded up to a multiple of it (the bytes past len are written, then cut off). */
#define ANVIL_DIRECT_ALIGN 4096
/* anvil_write_new_file for large buffers, past the page cache (O_DIRECT): copying gigabytes into
 * the page cache costs seconds of CPU, which a background writer takes from training, and the
 * pages pushed out are someone else's. Where the file system refuses O_DIRECT (tmpfs on older
 * kernels, or a write it cannot take directly, such as from a misaligned buffer or one cut short by
 * a file size limit), it writes the rest through the page cache. */
int anvil_write_new_file_direct(const char *path, const void *data, size_t len);

/* mkdir that accepts an existing folder and makes a new one durable (its parent is fsync'ed);
 * the parent must exist. */
int anvil_mkdir(const char *dir);
/* anvil_mkdir of every missing folder on the way to dir, then of dir: `mkdir -p`. */
int anvil_mkdir_p(const char *dir);
/* anvil_mkdir_p of the folder that path (a file or folder to be written) lies in: a user's output
 * path may name folders that do not exist yet. */
int anvil_mkdir_parent(const char *path);
/* Removes path, and everything under it when it is a folder; symbolic links are removed, not
 * followed. A missing path is not an error. */
int anvil_remove_tree(const char *path);

/* text with each character that glob(3) and fnmatch(3) read as a wildcard or an escape (* ? [ ] \)
 * behind a backslash, into out: a folder's name as the literal part of a pattern ("runs/[a]" ->
 * "runs/\[a\]"). -1 after anvil_fail naming text when it does not fit in cap. */
int anvil_glob_escape(const char *text, char *out, size_t cap);

/* Claims the folder dir for one process: an exclusive flock on dir/lock, which holds the holder's
 * pid and host for the message a second claimant gets (naming what, e.g. "run folder"). The
 * kernel drops the lock when its process dies, however it dies, so a stale file is simply taken
 * over. Returns the descriptor to close on release, or -1 after anvil_fail. */
int anvil_lock_folder(const char *dir, const char *what);
/* Whether a process holds dir's lock (anvil_lock_folder) now: 0 when none does (or dir has no lock
 * file), 1 when one does, its "pid P on HOST" in holder; -1 after anvil_fail. It takes the lock for
 * a moment to find out, so a process claiming the folder at that moment is refused: for a caller
 * that knows no one should. */
int anvil_lock_probe(const char *dir, char *holder, size_t cap);
/* Marks the folder dir as written by this process, one of several (the ranks of a run): a shared flock on
 * dir/ranks.lock, held until the descriptor is closed and dropped by the kernel (or a shared file system's
 * lock manager) with the process however it dies. Returns the descriptor, or -1 after anvil_fail. */
int anvil_lock_shared(const char *dir);
/* Whether a process holds dir's shared lock (anvil_lock_shared) now: 0 when none does (or there is no
 * lock file), 1 when one does, -1 after anvil_fail. It takes the lock for a moment, as anvil_lock_probe. */
int anvil_lock_probe_shared(const char *dir);

#endif
