/* The state database's integrity check at start, and its online backup (job/store.h). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/error.h"
#include "core/fsutil.h"
#include "job/store_internal.h"

/* The table that page lies in (SQLite's dbstat table), into name; "" when it cannot tell. */
static void table_of_page(sqlite3 *db, long page, char *name, size_t cap) {
    sqlite3_stmt *s = NULL;
    name[0] = 0;
    if (sqlite3_prepare_v2(db, "SELECT name FROM dbstat WHERE pageno = ?1", -1, &s, NULL) == SQLITE_OK) {
        sqlite3_bind_int64(s, 1, page);
        if (sqlite3_step(s) == SQLITE_ROW && sqlite3_column_text(s, 0))
            snprintf(name, cap, "%s", (const char *)sqlite3_column_text(s, 0));
    }
    sqlite3_finalize(s);
}

int anvil_store_quick_check(sqlite3 *db) {
    sqlite3_stmt *s = NULL;
    if (sqlite3_prepare_v2(db, "PRAGMA quick_check", -1, &s, NULL) != SQLITE_OK)
        return anvil_fail("damaged: %s", sqlite3_errmsg(db));
    char first[512] = "";
    int problems = 0, rc;
    while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
        const char *t = (const char *)sqlite3_column_text(s, 0);
        if (!t || !strcmp(t, "ok")) continue;
        /* A row may hold several problems, one a line, after a "*** in database main ***" line. */
        for (const char *p = t; *p;) {
            size_t n = strcspn(p, "\n");
            if (n && strncmp(p, "***", 3)) {
                if (!problems++) snprintf(first, sizeof first, "%.*s", (int)n, p);
            }
            p += n + (p[n] == '\n');
        }
    }
    if (rc != SQLITE_DONE && !problems) snprintf(first, sizeof first, "%s", sqlite3_errmsg(db)), problems = 1;
    sqlite3_finalize(s);
    if (!problems) return 0;
    char table[128] = "", where[160] = "", more[48] = "";
    long page = 0;
    if (sscanf(first, "On tree page %ld", &page) == 1 || sscanf(first, "Tree %*d page %ld", &page) == 1)
        table_of_page(db, page, table, sizeof table);
    if (table[0]) snprintf(where, sizeof where, " (in table %s)", table);
    if (problems > 1) snprintf(more, sizeof more, "; %d more problem%s", problems - 1, problems > 2 ? "s" : "");
    return anvil_fail("damaged: %s%s%s", first, where, more);
}

/* Copies every page of src into dst, waiting out a writer that holds the database. */
static int copy_pages(sqlite3 *src, sqlite3 *dst) {
    sqlite3_backup *b = sqlite3_backup_init(dst, "main", src, "main");
    if (!b) return anvil_fail("backup: %s", sqlite3_errmsg(dst));
    int rc;
    for (int tries = 0; (rc = sqlite3_backup_step(b, -1)) == SQLITE_BUSY || rc == SQLITE_LOCKED; tries++) {
        if (tries == 200) break;
        struct timespec ts = {0, 50 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    sqlite3_backup_finish(b);
    if (rc != SQLITE_DONE) return anvil_fail("backup: %s", sqlite3_errstr(rc));
    return sqlite3_errcode(dst) == SQLITE_OK ? 0 : anvil_fail("backup: %s", sqlite3_errmsg(dst));
}

static int fsync_path(const char *path) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0 || fsync(fd)) {
        int e = errno;
        if (fd >= 0) close(fd);
        return anvil_fail("%s: %s", path, strerror(e));
    }
    close(fd);
    return 0;
}

int anvil_store_backup(const char *path, const char *dest) {
    if (access(path, F_OK)) return anvil_fail("%s: no state database there", path);
    sqlite3 *src = NULL, *dst = NULL;
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp-%ld", dest, (long)getpid());
    unlink(tmp);
    int rc = sqlite3_open_v2(path, &src, SQLITE_OPEN_READONLY, NULL) == SQLITE_OK
                 ? 0
                 : anvil_fail("%s: %s", path, src ? sqlite3_errmsg(src) : "out of memory");
    if (!rc) sqlite3_busy_timeout(src, 10000);
    /* A copy of a damaged state would pass for a good one. */
    if (!rc && anvil_store_quick_check(src)) {
        char why[600];
        snprintf(why, sizeof why, "%s", anvil_errmsg());
        rc = anvil_fail("%s: %s: not backed up", path, why);
    }
    if (!rc && sqlite3_open_v2(tmp, &dst, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, NULL) != SQLITE_OK)
        rc = anvil_fail("%s: %s", tmp, dst ? sqlite3_errmsg(dst) : "out of memory");
    if (!rc) rc = copy_pages(src, dst);
    /* The copy stands alone: no write-ahead log beside it. */
    if (!rc && sqlite3_exec(dst, "PRAGMA journal_mode=DELETE", NULL, NULL, NULL) != SQLITE_OK)
        rc = anvil_fail("%s: %s", tmp, sqlite3_errmsg(dst));
    if (dst && sqlite3_close(dst) != SQLITE_OK && !rc) rc = anvil_fail("%s: cannot close", tmp);
    sqlite3_close(src);
    if (!rc) rc = fsync_path(tmp);
    if (!rc) return anvil_rename_durable(tmp, dest);
    unlink(tmp);
    return -1;
}
