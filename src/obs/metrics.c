#include "obs/metrics.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/clock.h"
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
        /* Nine digits would round a Unix time to seconds: large ones keep their milliseconds. */
        else if (fabs(v) >= 1e8) n += snprintf(line + n, sizeof line - n, ",\"%s\":%.3f", keys[i], v);
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

static void fill_bar(char *bar, int width, double frac) {
    int filled = frac > 0 ? (int)(width * (frac < 1 ? frac : 1)) : 0;
    for (int i = 0; i < width; i++) bar[i] = i < filled ? '#' : '.';
    bar[width] = 0;
}

void anvil_progress_draw(FILE *tty, int step, int total, double elapsed_s, const char *detail) {
    char bar[32];
    fill_bar(bar, 24, total > 0 ? (double)step / total : 0);
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

int anvil_meter_mode(FILE *out, int enabled) {
    if (!enabled) return ANVIL_METER_OFF;
    return isatty(fileno(out)) ? ANVIL_METER_BAR : ANVIL_METER_LINES;
}

void anvil_meter_start(anvil_meter *m, FILE *out, int mode, const char *what, const char *unit) {
    *m = (anvil_meter){.out = out, .what = what, .unit = unit, .mode = mode, .t0 = anvil_now()};
    m->last = m->t0;
}

/* "1.6/4.0 MiB" for bytes (both in the unit that suits the total), else "1234/5000 merges". */
static void fmt_counts(char *out, size_t cap, const anvil_meter *m, double done, double total) {
    if (m->unit) {
        if (total > 0) snprintf(out, cap, "%.0f/%.0f %s", done, total, m->unit);
        else snprintf(out, cap, "%.0f %s", done, m->unit);
        return;
    }
    static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double scale = total > done ? total : done;
    int u = 0;
    while (u < 4 && scale >= 1024 * 10) {
        scale /= 1024;
        u++;
    }
    double div = pow(1024, u);
    if (total > 0) snprintf(out, cap, "%.1f/%.1f %s", done / div, total / div, units[u]);
    else snprintf(out, cap, "%.1f %s", done / div, units[u]);
}

static void draw(anvil_meter *m, double done, double total, const char *detail, double now, int final) {
    double frac = total > 0 ? done / total : 0, el_s = now - m->t0;
    char counts[96], el[32], eta[32];
    fmt_counts(counts, sizeof counts, m, done, total);
    fmt_hms(el, sizeof el, el_s);
    fmt_hms(eta, sizeof eta, frac > 0 ? el_s / frac * (1 - frac) : 0);
    const char *sep = detail && *detail ? " | " : "";
    if (m->mode == ANVIL_METER_BAR) {
        char bar[32];
        fill_bar(bar, 24, frac);
        if (total > 0)
            fprintf(m->out, "\r\033[K[%s] %3.0f%% %s%s%s | elapsed %s eta %s", bar, 100 * frac, counts, sep,
                    detail ? detail : "", el, eta);
        else
            fprintf(m->out, "\r\033[K%s%s%s | elapsed %s", counts, sep, detail ? detail : "", el);
        m->drawn = 1;
        if (final) {
            fputc('\n', m->out);
            m->drawn = 0;
        }
    } else {
        char pct[16] = "";
        if (total > 0) snprintf(pct, sizeof pct, "%.0f%% ", 100 * frac);
        if (final)
            fprintf(m->out, "%s: progress done %s%s%s%s | elapsed %s\n", m->what, pct, counts, sep,
                    detail ? detail : "", el);
        else if (total > 0)
            fprintf(m->out, "%s: progress %s%s%s%s | elapsed %s eta %s\n", m->what, pct, counts, sep,
                    detail ? detail : "", el, eta);
        else
            fprintf(m->out, "%s: progress %s%s%s | elapsed %s\n", m->what, counts, sep, detail ? detail : "", el);
    }
    fflush(m->out);
    m->last = now;
}

void anvil_meter_update(anvil_meter *m, double done, double total, const char *detail) {
    m->done = done;
    m->total = total;
    if (m->mode == ANVIL_METER_OFF) return;
    double now = anvil_now();
    if (m->mode == ANVIL_METER_BAR) {
        if (now - m->last >= 0.1 || !m->drawn) draw(m, done, total, detail, now, 0);
        return;
    }
    /* All done is the final line's to say, unless the end is 10 s away. */
    int tenth = total > 0 ? (int)(10 * done / total) : 0;
    if ((tenth > m->tenth && done < total) || now - m->last >= 10) {
        m->tenth = tenth;
        draw(m, done, total, detail, now, 0);
    }
}

void anvil_meter_break(anvil_meter *m) {
    if (!m->drawn) return;
    fputc('\n', m->out);
    fflush(m->out);
    m->drawn = 0;
}

void anvil_meter_finish(anvil_meter *m, double done, double total, const char *detail) {
    if (m->mode == ANVIL_METER_OFF) return;
    draw(m, done, total, detail, anvil_now(), 1);
}
