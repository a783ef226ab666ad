#include "obs/metrics.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/error.h"

struct anvil_metrics {
    int fd;
    char *path;
};

anvil_metrics *anvil_metrics_open(const char *path) {
    int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd < 0) {
        anvil_fail("%s: cannot open metrics file: %s", path, strerror(errno));
        return NULL;
    }
    anvil_metrics *m = malloc(sizeof *m);
    char *name = strdup(path);
    if (!m || !name) {
        close(fd);
        free(m);
        free(name);
        anvil_fail("%s: out of memory", path);
        return NULL;
    }
    m->fd = fd;
    m->path = name;
    return m;
}

void anvil_metrics_close(anvil_metrics *m) {
    if (!m) return;
    close(m->fd);
    free(m->path);
    free(m);
}

/* One record. A full disk can take part of it; that part is cut off again, so that the file
 * holds whole lines only. */
static int write_record(anvil_metrics *m, const char *line, size_t n) {
    size_t done = 0;
    while (done < n) {
        ssize_t put = write(m->fd, line + done, n - done);
        if (put < 0 && errno == EINTR) continue;
        if (put <= 0) {
            int err = put < 0 ? errno : EIO;
            struct stat st;
            if (done && fstat(m->fd, &st) == 0 && ftruncate(m->fd, st.st_size - (off_t)done) != 0)
                return anvil_fail("%s: write failed: %s, and part of a record is left at its end", m->path,
                                  strerror(err));
            return anvil_fail("%s: write failed: %s", m->path, strerror(err));
        }
        done += (size_t)put;
    }
    return 0;
}

int anvil_metrics_write(anvil_metrics *m, const char *kind, const char *const *keys, const double *values,
                        int nfields) {
    char line[4096]; /* room for a log record of every --metric with long names */
    int n = snprintf(line, sizeof line, "{\"kind\":\"%s\"", kind);
    for (int i = 0; i < nfields && n < (int)sizeof line; i++) {
        double v = values[i];
        if (!isfinite(v)) n += snprintf(line + n, sizeof line - n, ",\"%s\":null", keys[i]);
        else if (v == floor(v) && fabs(v) < 1e15) n += snprintf(line + n, sizeof line - n, ",\"%s\":%.0f", keys[i], v);
        else n += snprintf(line + n, sizeof line - n, ",\"%s\":%.9g", keys[i], v);
    }
    if (n >= (int)sizeof line - 2) return anvil_fail("%s: record too long", m->path);
    n += snprintf(line + n, sizeof line - n, "}\n");
    return write_record(m, line, (size_t)n);
}

static void fmt_hms(char *out, size_t cap, double s) {
    long t = s < 0 ? 0 : (long)(s + 0.5);
    if (t >= 3600) snprintf(out, cap, "%ld:%02ld:%02ld", t / 3600, t / 60 % 60, t % 60);
    else snprintf(out, cap, "%02ld:%02ld", t / 60, t % 60);
}

void anvil_progress_draw(FILE *tty, int step, int total, double elapsed_s, const char *detail) {
    const int width = 24;
    int filled = total > 0 ? (int)((long)width * step / total) : 0;
    char bar[32];
    for (int i = 0; i < width; i++) bar[i] = i < filled ? '#' : '.';
    bar[width] = 0;
    char el[32], eta[32];
    fmt_hms(el, sizeof el, elapsed_s);
    fmt_hms(eta, sizeof eta, step > 0 ? elapsed_s / step * (total - step) : 0);
    fprintf(tty, "\r\033[K[%s] %d/%d %s elapsed %s eta %s", bar, step, total, detail, el, eta);
    fflush(tty);
}

void anvil_progress_end(FILE *tty) {
    fputc('\n', tty);
    fflush(tty);
}
